/**
 * The part of the run's bus a task may use (`ctx.bus`): publish a signal, subscribe to a
 * topic. The bus service (`src/services/Bus.ts`) implements it and adds what only the host
 * needs (subscriber counts). The bus carries light cross-pipeline signals ("this question is
 * answered", "stop sampling"); messages are not persisted.
 *
 * @since 0.2.0
 */
import type { Effect, Queue, Scope, Stream } from "effect"

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
 * What a task may do with the bus. A subscriber gets the messages published to its topic (or
 * to every topic with `"*"`) after it subscribed, in publication order, through a sliding
 * buffer of 1024 messages (a subscriber that falls behind loses the oldest, never blocks a
 * publisher).
 *
 * @since 0.2.0
 * @category models
 */
export interface TaskBus {
  /**
   * Publishes `data` (default `{}`) on `topic` and returns how many subscribers it was
   * delivered to (those of the topic plus those of `"*"`). Never blocks.
   */
  readonly publish: (topic: string, data?: Readonly<Record<string, unknown>>) => Effect.Effect<number>
  /**
   * Subscribes now, for the enclosing scope, to a topic or to `"*"` (every topic); returns
   * the queue messages arrive on (shut down when the scope closes). Use it when the
   * subscription must exist before something is published.
   */
  readonly subscribeScoped: (topic: string) => Effect.Effect<Queue.Dequeue<BusMessage>, never, Scope.Scope>
  /** A Stream of the messages of a topic (or `"*"`), subscribed when the stream starts. */
  readonly subscribe: (topic: string) => Stream.Stream<BusMessage>
}
