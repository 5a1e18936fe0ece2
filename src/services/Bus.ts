/**
 * The bus: a light signal channel between pipelines of one run (the push side of
 * coordination: "this question is answered", "stop sampling"). Messages are not persisted.
 *
 * A subscriber gets the messages published to its topic (or to every topic with `"*"`)
 * after it subscribed, in publication order, through a sliding buffer of 1024 messages
 * (a subscriber that falls behind loses the oldest ones, never blocks publishers). What a
 * task may use of it is the domain's {@link TaskBus}; the fan-out is the topic hub shared
 * with the pools' events (`internal/hub.ts`).
 *
 * @since 0.1.0
 */
import { Clock, Context, Effect, Layer, Stream } from "effect"
import type { BusMessage, TaskBus } from "../domain/TaskBus.js"
import * as Hub from "./internal/hub.js"

export type {
  /**
   * One message: its topic, its data and the epoch millisecond it was published (`Clock`).
   *
   * @since 0.1.0
   * @category models
   */
  BusMessage,
  /**
   * What a task may do with the bus (`ctx.bus`).
   *
   * @since 0.2.0
   * @category models
   */
  TaskBus
} from "../domain/TaskBus.js"

/**
 * The bus service: the task's {@link TaskBus} (`publish`, `subscribeScoped`, `subscribe`)
 * plus what the host reads.
 *
 * @since 0.1.0
 * @category models
 */
export interface BusService extends TaskBus {
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

/** The subscriber buffer of the bus (messages, sliding). */
const CAPACITY = 1024

const keyOf = (topic: string): Hub.Key => topic === everything ? Hub.all : topic

/**
 * Builds a bus. Subscriber queues are shut down when their scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<BusService> = Effect.sync(() => {
  const hub = Hub.make<BusMessage>(CAPACITY)
  const subscribeScoped = (topic: string) => hub.subscribe(keyOf(topic))
  return {
    // a message on "*" itself reaches the "*" subscribers only (nobody subscribes to the
    // string topic "*": it is mapped to the hub's every-topic key)
    publish: (topic, data = {}) => Effect.flatMap(Clock.currentTimeMillis, (ts) => hub.publish(topic, { topic, data, ts })),
    subscribeScoped,
    subscribe: (topic) => Stream.unwrapScoped(Effect.map(subscribeScoped(topic), (q) => Stream.fromQueue(q))),
    subscribers: (topic) => Effect.sync(() => hub.size(keyOf(topic)))
  }
})

/**
 * The {@link Bus} as a layer (one bus per layer build).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Bus> = Layer.effect(Bus, make)
