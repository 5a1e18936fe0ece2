/**
 * The loss guard of a cluster task's attempt: a global lease lost mid-call (its renewals failing
 * until its local deadline, or its slot found taken) fails the attempt with `LeaseLost` and
 * interrupts its call, before the slot can expire in the database and be claimed by another
 * runner (the deadline keeps a margin).
 *
 * The attempt's body runs on one forked fiber; the loss, told by the lease's watcher (a plain
 * callback, `PgPools.onLost`), interrupts that fiber. Before (pg17z), the body raced a
 * `Deferred` of the loss (`Effect.raceFirst`: two forked fibers, the race's bookkeeping and its
 * FiberRefs merge per attempt); the outcome is the same:
 *
 * - the body ended first (success or failure): its exit stands, a loss told after it changes
 *   nothing (a result that arrived first is kept: first-writer-wins at the checkpoint);
 * - the loss told first: the body is interrupted and awaited, and the attempt fails with the
 *   `LeaseLost`, whatever the interrupted body's exit;
 * - the caller interrupted: the body is interrupted and awaited before the caller's own
 *   finalizers run (the lease's release, the worker slot), as the race did.
 *
 * @internal
 */
import { Effect, Exit, Fiber, FiberId, FiberRef, FiberRefs } from "effect"
import type { LeaseLost } from "../pool/pg/errors.js"

/**
 * One attempt's guard at a time: {@link LossGuard.guard} wraps an attempt's body (the latest
 * attempt is the one a loss is told to), {@link LossGuard.lose} tells the running attempt its
 * lease was lost (a callback for `PgPools.onLost`; no effect once that attempt's body ended).
 *
 * @internal
 */
export interface LossGuard {
  readonly guard: <A, E>(body: Effect.Effect<A, E>) => Effect.Effect<A, E | LeaseLost>
  /** The loss callback of the attempt running now, `undefined` before the first attempt. */
  readonly current: () => ((lost: LeaseLost) => void) | undefined
}

/** What one guarded attempt knows: its body's fiber once forked, whether it ended, the loss told first. */
interface Attempt {
  fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined
  ended: boolean
  lost: LeaseLost | undefined
}

/**
 * What `fiber.inheritAll` does at a join (the child's FiberRefs merged into the caller's), less
 * the service Context. Merging `FiberRef.currentContext` diffs the child's Context against the
 * caller's (Effect's `contextPatch.diff`: a `Map` of every service, and a runner's Context holds
 * the whole cluster's: ~27 KB allocated per task, BENCHMARKS.md gen17am, fib17an), once per
 * attempt, whenever the body provided anything (every attempt does), though the value it hands
 * back is the caller's own: `Effect.provide*`, `Effect.locally` & co. restore the Context when
 * their effect ends, and no body leaves a service behind for its caller. The other FiberRefs
 * (annotations, a `FiberRef.set` by the body) come back as with a join; the runtime flags'
 * patch is not applied (a body does not change the caller's flags: a join excludes
 * interruption and wind-down, and nothing on the task path changes the others).
 */
const inheritAllButContext = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Effect.Effect<void> =>
  Effect.inheritFiberRefs(FiberRefs.delete(fiber.getFiberRefs(), FiberRef.currentContext))

/**
 * A new {@link LossGuard} (one per task execution: its attempts run one after another).
 *
 * @internal
 */
export const makeLossGuard = (): LossGuard => {
  let running: ((lost: LeaseLost) => void) | undefined = undefined
  const guard = <A, E>(body: Effect.Effect<A, E>): Effect.Effect<A, E | LeaseLost> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        const attempt: Attempt = { fiber: undefined, ended: false, lost: undefined }
        running = (lost) => {
          if (attempt.ended || attempt.lost !== undefined) return
          attempt.lost = lost
          attempt.fiber?.unsafeInterruptAsFork(FiberId.none)
        }
        return Effect.flatMap(Effect.fork(restore(body)), (fiber) => {
          attempt.fiber = fiber
          // told before the fork (between the lease's watch and the body's start): interrupted at once
          if (attempt.lost !== undefined) fiber.unsafeInterruptAsFork(FiberId.none)
          // the body's exit, awaited interruptibly by one `Async` with no canceler: the caller
          // interrupted (before or during the wait) is handled below, in this region. What
          // `Effect.onInterrupt(restore(Fiber.join(fiber)), …)` did, without its two `onExit`
          // regions (the join's own await has a canceler: ops17am)
          const ended = Effect.async<Exit.Exit<A, E>>((resume) => {
            fiber.addObserver((exit) => {
              if (attempt.lost === undefined) attempt.ended = true
              resume(Effect.succeed(exit as Exit.Exit<A, E>))
            })
          })
          return Effect.flatMap(Effect.exit(restore(ended)), (waited): Effect.Effect<A, E | LeaseLost> => {
            // the caller interrupted (the wait's only failure): the body is interrupted and
            // awaited before the caller's own finalizers run
            if (Exit.isFailure(waited)) return Effect.zipRight(Fiber.interrupt(fiber), Effect.failCause(waited.cause))
            if (attempt.lost !== undefined) return Exit.fail(attempt.lost)
            const exit = waited.value
            // as `Fiber.join`: a body that succeeded hands its FiberRefs back to the caller,
            // all but its service Context (see `inheritAllButContext`)
            return Exit.isSuccess(exit) ? Effect.as(inheritAllButContext(fiber), exit.value) : exit
          })
        })
      })
    )
  return { guard, current: () => running }
}
