/**
 * The event fan-out of the pools service: every event goes to the subscribers' queues (the
 * topic hub shared with the bus, topics being pool names), then to the pool's `onEvent`, the
 * service's `onEvent` and every `listen` callback, in that order. Callbacks never drop an
 * event (the runner writes them to the store through one); subscriber queues slide (4096).
 * A callback's failure or defect is ignored: an observer must not break a lease.
 *
 * @internal
 */
import { Effect, Stream } from "effect"
import type { Queue, Scope } from "effect"
import type { EventCallback, EventFilter, ResourceEvent } from "../../../domain/PoolEvent.js"
import * as Hub from "../hub.js"

/** The subscriber buffer of the pools' events (events, sliding). */
const CAPACITY = 4096

const run = (cb: EventCallback, e: ResourceEvent): Effect.Effect<void> =>
  Effect.suspend(() => {
    const out = cb(e)
    return Effect.isEffect(out) ? out : Effect.void
  }).pipe(Effect.catchAllCause(() => Effect.void))

/**
 * The fan-out of one pools service.
 *
 * @internal
 */
export class EventFanout {
  readonly listeners = new Set<EventCallback>()
  readonly hub = Hub.make<ResourceEvent>(CAPACITY)

  /** `onEvent`: the service-wide callback (every pool's events). */
  constructor(readonly onEvent: EventCallback | undefined) {}

  /** Delivers one event; `poolOnEvent` is the callback of the event's pool, if any. */
  deliver(e: ResourceEvent, poolOnEvent: EventCallback | undefined): Effect.Effect<void> {
    const callbacks: Array<EventCallback> = []
    if (poolOnEvent !== undefined) callbacks.push(poolOnEvent)
    if (this.onEvent !== undefined) callbacks.push(this.onEvent)
    for (const l of this.listeners) callbacks.push(l)
    const offers = this.hub.publish(e.pool, e)
    return callbacks.length === 0
      ? Effect.asVoid(offers)
      : Effect.zipRight(offers, Effect.forEach(callbacks, (cb) => run(cb, e), { discard: true }))
  }

  /** Subscribes now, for the enclosing scope, to the events matching `filter`. */
  events(filter: EventFilter | undefined): Effect.Effect<Queue.Dequeue<ResourceEvent>, never, Scope.Scope> {
    const kinds = filter?.kinds === undefined ? undefined : new Set(filter.kinds)
    return this.hub.subscribe(
      filter?.pool === undefined ? Hub.all : filter.pool,
      kinds === undefined ? undefined : (e) => kinds.has(e.kind)
    )
  }

  /** A Stream of the events matching `filter`, subscribed when the stream starts. */
  subscribe(filter: EventFilter | undefined): Stream.Stream<ResourceEvent> {
    return Stream.unwrapScoped(Effect.map(this.events(filter), (q) => Stream.fromQueue(q)))
  }

  /** Registers a callback for every event, for the enclosing scope. */
  listen(callback: EventCallback): Effect.Effect<void, never, Scope.Scope> {
    return Effect.asVoid(Effect.acquireRelease(
      Effect.sync(() => this.listeners.add(callback)),
      () => Effect.sync(() => this.listeners.delete(callback))
    ))
  }
}
