/**
 * A topic hub: the fan-out shared by the bus (`Bus.ts`, topics are strings) and the pools'
 * event stream (`internal/pool/events.ts`, topics are pool names). Each subscriber is a
 * sliding queue registered under one topic, or under {@link all} (every topic), with an
 * optional predicate; a message published on a topic is offered to the subscribers of that
 * topic and to those of {@link all} whose predicate accepts it, in subscription order within
 * each group. Publishing never blocks: a subscriber that falls behind loses its oldest
 * messages (`Queue.sliding`).
 *
 * State is a plain map changed inside `Effect.sync` blocks (atomic: one fiber step at a time).
 *
 * @internal
 */
import { Effect, Queue } from "effect"
import type { Scope } from "effect"

/**
 * The "every topic" key.
 *
 * @internal
 */
export const all: unique symbol = Symbol.for("assay/internal/hub/all")

/** @internal */
export type Key = string | typeof all

interface Subscriber<A> {
  readonly queue: Queue.Queue<A>
  readonly accept: ((a: A) => boolean) | undefined
}

/** @internal */
export interface TopicHub<A> {
  /**
   * Subscribes for the enclosing scope to `topic` (or {@link all}), keeping the messages
   * `accept` returns true for (default: every one); the queue is removed and shut down when
   * the scope closes.
   */
  readonly subscribe: (topic: Key, accept?: (a: A) => boolean) => Effect.Effect<Queue.Dequeue<A>, never, Scope.Scope>
  /** Offers `a` to the matching subscribers of `topic` and of {@link all}; returns how many. */
  readonly publish: (topic: string, a: A) => Effect.Effect<number>
  /** The current subscriber count of one key (those of {@link all} not included for a topic). */
  readonly size: (topic: Key) => number
}

/**
 * A hub whose subscribers each buffer at most `capacity` messages (sliding).
 *
 * @internal
 */
export const make = <A>(capacity: number): TopicHub<A> => {
  const topics = new Map<Key, Set<Subscriber<A>>>()
  const targets = (topic: string, a: A): Array<Queue.Queue<A>> => {
    const out: Array<Queue.Queue<A>> = []
    const add = (set: Set<Subscriber<A>> | undefined) => {
      if (set === undefined) return
      for (const s of set) if (s.accept === undefined || s.accept(a)) out.push(s.queue)
    }
    add(topics.get(topic))
    add(topics.get(all))
    return out
  }
  return {
    subscribe: (topic, accept) =>
      Effect.acquireRelease(
        Effect.map(Queue.sliding<A>(capacity), (queue) => {
          const sub: Subscriber<A> = { queue, accept }
          let set = topics.get(topic)
          if (set === undefined) topics.set(topic, set = new Set())
          set.add(sub)
          return sub
        }),
        (sub) =>
          Effect.zipRight(
            Effect.sync(() => {
              const set = topics.get(topic)
              if (set === undefined) return
              set.delete(sub)
              if (set.size === 0) topics.delete(topic)
            }),
            Queue.shutdown(sub.queue)
          )
      ).pipe(Effect.map((sub) => sub.queue)),
    publish: (topic, a) =>
      Effect.suspend(() => {
        const queues = targets(topic, a)
        if (queues.length === 0) return Effect.succeed(0)
        return Effect.as(Effect.forEach(queues, (q) => Queue.offer(q, a), { discard: true }), queues.length)
      }),
    size: (topic) => topics.get(topic)?.size ?? 0
  }
}
