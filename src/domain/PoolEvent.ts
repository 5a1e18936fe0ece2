/**
 * Pool events: the state changes of pools and their resources, as data. The `Pools` service
 * (`src/services/Pools.ts`) produces them; a task reads them through `ctx.subscribe`, a pool
 * declaration observes them through its `onEvent` callback, the runner writes them to the
 * store.
 *
 * This module holds the types only, so that the task context (`TaskContext.ts`) and pool
 * declarations name them without importing a service.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import type { Effect } from "effect"

/**
 * A pool event: a state change delivered to subscribers, listeners and the pool's `onEvent`
 * callback. Kinds: `resource.added`, `resource.revoked`, `resource.degraded`, `resource.dead`,
 * `resource.revived`, `resource.cooldown_ended`, `resource.factory_failed`,
 * `resource.throttled`, `breaker.opened`, `breaker.half_open`, `breaker.closed`,
 * `acquire.suspected_deadlock`, `lease.leaked`, and from global pools `lease.lost` (`PgPools`).
 * `resourceId` is absent for pool-wide events;
 * `data` holds the kind's details (strict JSON); `ts` is epoch milliseconds from `Clock`.
 *
 * @since 0.1.0
 * @category models
 */
export const ResourceEvent = Schema.Struct({
  kind: Schema.String,
  pool: Schema.String,
  resourceId: Schema.optional(Schema.String),
  data: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  ts: Schema.Number
})

/**
 * @since 0.1.0
 * @category models
 */
export type ResourceEvent = typeof ResourceEvent.Type

/**
 * What to subscribe to: one pool (default: every pool) and some kinds (default: every kind).
 *
 * @since 0.1.0
 * @category models
 */
export interface EventFilter {
  readonly pool?: string | undefined
  readonly kinds?: ReadonlyArray<string> | undefined
}

/**
 * Called with every event of a pool (or of every pool, for a service-wide callback). Its
 * failures and defects are ignored: an observer must not break a lease.
 *
 * @since 0.1.0
 * @category models
 */
export type EventCallback = (event: ResourceEvent) => Effect.Effect<void> | void
