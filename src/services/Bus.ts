/**
 * The bus: a light signal channel between pipelines of one run (the push side of
 * coordination: "this question is answered", "stop sampling"). Messages are not persisted.
 *
 * A subscriber gets the messages published to its topic (or to every topic with `"*"`)
 * after it subscribed, in publication order, through a sliding buffer of 1024 messages
 * (a subscriber that falls behind loses the oldest ones, never blocks publishers).
 *
 * @since 0.1.0
 */
import { Clock, Context, Effect, Layer, Queue, Stream } from "effect"
import type { Scope } from "effect"

/**
 * One message: its topic, its data and the epoch millisecond it was published (`Clock`).
 *
 * @since 0.1.0
 * @category models
 */
export interface BusMessage {
  readonly topic: string
  readonly data: Readonly<Record<string, unknown>>
  readonly ts: number
}

/**
 * The bus service.
 *
 * @since 0.1.0
 * @category models
 */
export interface BusService {
  /**
   * Publishes `data` on `topic` and returns how many subscribers it was delivered to (those
   * of the topic plus those of `"*"`). Never blocks.
   */
  readonly publish: (topic: string, data?: Readonly<Record<string, unknown>>) => Effect.Effect<number>
  /**
   * Subscribes now, for the enclosing scope, to a topic or to `"*"` (every topic); returns
   * the queue messages arrive on. Use it when the subscription must exist before something
   * is published.
   */
  readonly subscribeScoped: (topic: string) => Effect.Effect<Queue.Dequeue<BusMessage>, never, Scope.Scope>
  /** A Stream of the messages of a topic (or `"*"`), subscribed when the stream starts. */
  readonly subscribe: (topic: string) => Stream.Stream<BusMessage>
  /** The number of current subscribers of a topic (`"*"` subscribers not included). */
  readonly subscribers: (topic: string) => Effect.Effect<number>
}

/**
 * The bus of a run.
 *
 * @since 0.1.0
 * @category tags
 */
export class Bus extends Context.Tag("assay/Bus")<Bus, BusService>() {}

/**
 * The "every topic" subscription key.
 *
 * @since 0.1.0
 * @category constants
 */
export const everything = "*"

/**
 * Builds a bus. Subscriber queues are shut down when their scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<BusService> = Effect.sync(() => {
  const topics = new Map<string, Set<Queue.Queue<BusMessage>>>()
  const subscribeScoped = (topic: string): Effect.Effect<Queue.Dequeue<BusMessage>, never, Scope.Scope> =>
    Effect.acquireRelease(
      Effect.tap(Queue.sliding<BusMessage>(1024), (q) =>
        Effect.sync(() => {
          let set = topics.get(topic)
          if (set === undefined) topics.set(topic, set = new Set())
          set.add(q)
        })),
      (q) =>
        Effect.zipRight(
          Effect.sync(() => {
            const set = topics.get(topic)
            set?.delete(q)
            if (set !== undefined && set.size === 0) topics.delete(topic)
          }),
          Queue.shutdown(q)
        )
    )
  return {
    publish: (topic, data = {}) =>
      Effect.flatMap(Clock.currentTimeMillis, (ts) =>
        Effect.suspend(() => {
          const message: BusMessage = { topic, data, ts }
          const targets = [...(topics.get(topic) ?? []), ...(topic === everything ? [] : topics.get(everything) ?? [])]
          return Effect.as(Effect.forEach(targets, (q) => Queue.offer(q, message), { discard: true }), targets.length)
        })),
    subscribeScoped,
    subscribe: (topic) => Stream.unwrapScoped(Effect.map(subscribeScoped(topic), (q) => Stream.fromQueue(q))),
    subscribers: (topic) => Effect.sync(() => topics.get(topic)?.size ?? 0)
  }
})

/**
 * The {@link Bus} as a layer (one bus per layer build).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Bus> = Layer.effect(Bus, make)
