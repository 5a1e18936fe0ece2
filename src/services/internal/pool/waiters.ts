/**
 * The waiter queue of one pool: a FIFO doubly linked list of parked acquires, kept by hand
 * (not Effect's `Semaphore` or `Queue`) because a freed slot goes to the **oldest waiter it
 * can serve**, skipping those whose selector no free resource matches, and a waiter leaves
 * the queue in O(1) when it is interrupted, times out, or is refused.
 *
 * A waiter is resumed exactly once: {@link WaiterQueue.detach} unlinks it and hands back its
 * callback, cleared, so whichever path ends it first (a grant, a failure, a refusal, an
 * interruption) is the only one.
 *
 * Changed only inside synchronous blocks (atomic: one fiber step at a time).
 *
 * @internal
 */
import type { Effect } from "effect"
import type { AcquireTimeout, ResourceUnavailable, ServerDelayRefused } from "../../../domain/Errors.js"
import type { Selector } from "../../../domain/Lease.js"
import type * as AcquireAlgorithm from "../../AcquireAlgorithm.js"

/**
 * How a parked acquire ends: the slot it got, or the failure that ends the wait.
 *
 * @internal
 */
export type WaitResult = Effect.Effect<AcquireAlgorithm.Slot, ResourceUnavailable | ServerDelayRefused | AcquireTimeout>

/**
 * One parked acquire.
 *
 * @internal
 */
export interface Waiter<Attempt> {
  readonly selector: Selector
  readonly ranker: AcquireAlgorithm.Ranker | undefined
  /** The longest server-requested throttle this waiter waits out (ms). */
  readonly maxDelayMs: number
  /** The acquire attempt a granted slot is recorded on (before the waiter is resumed). */
  readonly attempt: Attempt
  /** Ends the wait; `undefined` once ended (or before it is parked). */
  resume: ((result: WaitResult) => void) | undefined
  prev: Waiter<Attempt> | undefined
  next: Waiter<Attempt> | undefined
  queued: boolean
}

/**
 * A FIFO of waiters.
 *
 * @internal
 */
export class WaiterQueue<Attempt> {
  head: Waiter<Attempt> | undefined = undefined
  tail: Waiter<Attempt> | undefined = undefined
  /** How many waiters are queued. */
  size = 0

  /** Appends a waiter (the youngest). */
  push(w: Waiter<Attempt>): void {
    w.queued = true
    w.prev = this.tail
    if (this.tail === undefined) this.head = w
    else this.tail.next = w
    this.tail = w
    this.size++
  }

  /** Takes a waiter out of the queue (nothing if it is not queued). */
  unlink(w: Waiter<Attempt>): void {
    if (!w.queued) return
    w.queued = false
    if (w.prev === undefined) this.head = w.next
    else w.prev.next = w.next
    if (w.next === undefined) this.tail = w.prev
    else w.next.prev = w.prev
    w.prev = undefined
    w.next = undefined
    this.size--
  }

  /**
   * Unlinks a waiter and returns its callback, cleared (`undefined` when it was already
   * ended): the caller ends it the one way it chose.
   */
  detach(w: Waiter<Attempt>): ((result: WaitResult) => void) | undefined {
    this.unlink(w)
    const resume = w.resume
    w.resume = undefined
    return resume
  }
}

/**
 * A new, not yet queued waiter.
 *
 * @internal
 */
export const waiter = <Attempt>(
  selector: Selector,
  ranker: AcquireAlgorithm.Ranker | undefined,
  maxDelayMs: number,
  attempt: Attempt
): Waiter<Attempt> => ({
  selector,
  ranker,
  maxDelayMs,
  attempt,
  resume: undefined,
  prev: undefined,
  next: undefined,
  queued: false
})
