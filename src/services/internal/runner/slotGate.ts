/**
 * The FIFO slot gate of a run: at most `n` holders at once, waiters served oldest first.
 *
 * Kept hand-written for speed and for its order: taking a free slot is synchronous (no
 * semaphore machinery on the hot path), and a released slot goes to the **oldest** waiter,
 * which Effect's `Semaphore` does not promise. A slot is granted to a waiter by setting its
 * holder's `holding` flag at grant time, so a fiber interrupted between the grant and its next
 * step still gives it back from its exit path (`release` is idempotent per holder).
 *
 * The runner uses two gates: admission (`maxAdmitted` pipelines in the run) and worker slots
 * (`concurrency` attempts running).
 *
 * @internal
 */
import { Effect } from "effect"

/**
 * What one fiber holds: a slot of a gate (`holding`) and, for worker slots, whether it is
 * counted as an attempt in flight (`inAttempt`). Mutable, so that the fiber's own exit path
 * (interruption included) gives back exactly what it holds, whatever step it ended in.
 * `began`: when (epoch ms) the body of the holder's current attempt began, `-1` until it
 * does; set by the attempt, reset by the pipeline before each attempt, so that an
 * interruption knows whether the attempt it cut short had started.
 *
 * @internal
 */
export interface SlotHold {
  holding: boolean
  inAttempt: boolean
  began: number
}

/**
 * A fresh, empty hold.
 *
 * @internal
 */
export const emptyHold = (): SlotHold => ({ holding: false, inAttempt: false, began: -1 })

/**
 * A slot gate.
 *
 * - `take(holder)`: takes a free slot at once when one is free and nobody waits, else waits
 *   in FIFO order; interrupted at once when `isStopping()` is true; interrupting the wait
 *   leaves the queue;
 * - `tryTake(holder)`: takes a free slot now, without an Effect, when one is free, nobody
 *   waits and no stop is under way (`true`); otherwise `false`, and the caller uses `take`;
 * - `release(holder)`: gives the holder's slot (if any) to the oldest waiter, or back to the
 *   free count (always the free count once `isStopping()`: the waiters are being interrupted);
 * - `interruptWaiters()`: ends every wait with an interruption (a stop: waiting fibers are
 *   not in flight and get no grace);
 * - `free` / `waiting`: the figures now (for tests and statistics).
 *
 * @internal
 */
export interface SlotGate {
  readonly take: (holder: SlotHold) => Effect.Effect<void>
  /**
   * Takes a slot for `holder` now when one is free and nobody waits for one (`true`), without
   * an Effect; `false`: take it with {@link SlotGate.take} (which also refuses during a stop).
   */
  readonly tryTake: (holder: SlotHold) => boolean
  readonly release: (holder: SlotHold) => void
  readonly interruptWaiters: () => void
  readonly free: () => number
  readonly waiting: () => number
}

/**
 * Builds a gate of `n` slots; `isStopping` is read at each `take`.
 *
 * @internal
 */
export const make = (n: number, isStopping: () => boolean): SlotGate => {
  let free = n
  // A Set iterates in insertion order: the first entry is the oldest waiter.
  const waiters = new Set<(grant: boolean) => void>()
  const grantNext = (): boolean => {
    for (const w of waiters) {
      w(true)
      return true
    }
    return false
  }
  return {
    take: (holder) =>
      Effect.suspend(() => {
        if (isStopping()) return Effect.interrupt
        if (free > 0 && waiters.size === 0) {
          free--
          holder.holding = true
          return Effect.void
        }
        return Effect.async<void>((resume) => {
          const w = (grant: boolean) => {
            waiters.delete(w)
            if (grant) holder.holding = true
            resume(grant ? Effect.void : Effect.interrupt)
          }
          waiters.add(w)
          // Interrupted while waiting: leave the queue (a grant that raced the interruption
          // is given back by the holder's exit path).
          return Effect.sync(() => void waiters.delete(w))
        })
      }),
    tryTake: (holder) => {
      if (free > 0 && waiters.size === 0 && !isStopping()) {
        free--
        holder.holding = true
        return true
      }
      return false
    },
    release: (holder) => {
      if (!holder.holding) return
      holder.holding = false
      // once stopping, a slot given back goes to no waiter (each is about to be interrupted):
      // a stop decided while the slot was held starts nothing more
      if (isStopping() || !grantNext()) free++
    },
    interruptWaiters: () => {
      for (const w of Array.from(waiters)) w(false)
    },
    free: () => free,
    waiting: () => waiters.size
  }
}
