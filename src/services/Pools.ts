/**
 * The pools of a run, as a service: the {@link Pools} tag, what it offers ({@link PoolsService}),
 * and its constructors ({@link makePools}, {@link layer}). A pool is declared with
 * `Pool.make` (`Pool.ts`, the value); this service brings the declarations to life, the way
 * `@effect/cluster`'s `Runners.ts` (the service) runs what `Runner.ts` (the value) describes.
 *
 * A lease is one use of one resource. {@link PoolsService.acquire} returns it **scoped**
 * (given back on every exit path: success, failure, interruption, timeout);
 * {@link PoolsService.acquireRaw} is the escape hatch whose leases the caller releases itself
 * and the runner reclaims ({@link PoolsService.reclaim}) when the attempt ends.
 *
 * The code is in `internal/pool/`: the waiter queue (`waiters.ts`), the client build
 * (`client.ts`), statistics (`stats.ts`), the event fan-out (`events.ts`, over the topic hub
 * shared with the bus) and the core that ties them (`core.ts`).
 *
 * @since 0.2.0
 */
import { Context, Effect, Layer } from "effect"
import type { Queue, Scope, Stream } from "effect"
import type * as Breaker from "../domain/Breaker.js"
import type { ConfigError, PoolNotFound } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import type {
  AcquireError,
  AcquireOptions,
  AlgorithmInput,
  Lease,
  LeaseReport,
  ResourceInfo,
  Selector
} from "../domain/Lease.js"
import type { EventCallback, EventFilter, ResourceEvent } from "../domain/PoolEvent.js"
import type * as Resource from "../domain/Resource.js"
import type * as AcquireAlgorithm from "./AcquireAlgorithm.js"
import { aliased as aliasedView } from "./internal/pool/aliased.js"
import * as internal from "./internal/pool/core.js"
import * as state from "./internal/pool/state.js"
import type { PoolConfig } from "./Pool.js"

export type {
  /**
   * Called with every event of a pool (see `domain/PoolEvent.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  EventCallback,
  /**
   * What to subscribe to (see `domain/PoolEvent.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  EventFilter
} from "../domain/PoolEvent.js"
export {
  /**
   * A pool event (see `domain/PoolEvent.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  ResourceEvent
} from "../domain/PoolEvent.js"

/**
 * The longest server-requested wait (a rate limit's Retry-After or reset hint) an acquire
 * accepts by default, in milliseconds: 10 minutes. Longer throttles make waiters fail with
 * `ServerDelayRefused` instead of waiting silently. The runner passes each task's
 * `retry.maxServerDelay` instead ({@link Holder.maxServerDelayMs}).
 *
 * @since 0.2.0
 * @category constants
 */
export const defaultMaxServerDelayMs: number = state.defaultMaxServerDelayMs

/**
 * Who is acquiring: the runner passes one per task attempt.
 *
 * - `taskName`, `pipelineId`: recorded on the lease; `sticky` remembers resources per
 *   pipeline.
 * - `defaultPool`: the pool used when the acquire names none (the task's `resource`).
 * - `defaultAlgorithm`: the task's algorithm (a per-call algorithm beats it; it beats the
 *   pool's).
 * - `heldPools()`: the pools it already holds leases from; when non-empty and the acquire
 *   waits longer than the smallest `deadlockWarn` of those pools, `acquire.suspected_deadlock`
 *   is emitted. Without it, the pools of the unreleased leases tracked under `owner` are used.
 * - `owner`: a key (for example the attempt id) under which leases are tracked, for
 *   {@link PoolsService.heldBy}, {@link PoolsService.releaseAll} and
 *   {@link PoolsService.reclaim}.
 * - `maxServerDelayMs`: the longest server-requested throttle (ms) this acquire waits out;
 *   when every usable resource it could take is throttled longer, it fails with
 *   `ServerDelayRefused` (default {@link defaultMaxServerDelayMs}).
 *
 * @since 0.1.0
 * @category models
 */
export interface Holder {
  readonly taskName: string
  readonly pipelineId: string
  readonly defaultPool?: string | undefined
  readonly defaultAlgorithm?: AlgorithmInput | AcquireAlgorithm.AcquireAlgorithm | undefined
  readonly heldPools?: (() => ReadonlyArray<string>) | undefined
  readonly owner?: string | undefined
  readonly maxServerDelayMs?: number | undefined
}

/**
 * The holder used when none is given: task `"anonymous"`, pipeline `""`.
 *
 * @since 0.1.0
 * @category constants
 */
export const anonymous: Holder = state.anonymous

/**
 * One resource as {@link PoolsService.snapshot} shows it: id, kind, effective state, active
 * leases and their ids, capacity, latency moving average (ms), accumulated usage,
 * consecutive failures, and the last reported error message.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResourceSnapshot {
  readonly id: string
  readonly kind: string
  readonly state: Resource.ResourceState
  readonly active: number
  readonly capacity: number
  readonly leases: ReadonlyArray<string>
  readonly latencyEmaMs: number | undefined
  readonly usage: Readonly<Record<string, number>>
  readonly consecutiveFailures: number
  /** Epoch ms at which a running cooldown ends, when degraded. */
  readonly cooldownUntil: number | undefined
  readonly lastError: string | undefined
  /** Epoch ms until which the server asked us to wait (a rate-limit Retry-After), if now. */
  readonly throttledUntil: number | undefined
  /** How many times the resource was throttled by a Retry-After. */
  readonly throttledTotal: number
  /**
   * After a rate limit: one lease at a time (a probe) until a successful report. Set by a
   * 429 without a hint at once, by one with a hint once its window has passed.
   */
  readonly probing: boolean
  /** The circuit breaker: `closed`, `open` (no leases) or `half_open` (one probe at a time). */
  readonly breaker: Breaker.BreakerState
  /** Epoch ms at which an open breaker turns half-open, when open. */
  readonly breakerUntil: number | undefined
  /** How many times the breaker opened. */
  readonly breakerOpened: number
  /**
   * The state an algorithm keeps of this resource, by algorithm name (for example
   * `algorithm.adaptive`: its learned concurrency and rate; see `AcquireAlgorithm.adaptive`);
   * absent when no algorithm used on the pool keeps any.
   */
  readonly algorithm?: Readonly<Record<string, Json>> | undefined
}

/**
 * Aggregated figures of a pool (optionally restricted to the resources matching a selector;
 * `waiting` and the wait figures are always pool-wide).
 *
 * - `active`, `capacity` (sum over non-revoked resources), `utilization` (= active / capacity,
 *   0 when capacity is 0);
 * - `ready`, `degraded`, `dead`: resource counts by effective state; `total` resources
 *   ever added, `revoked` of them;
 * - `waiting`: acquires currently waiting (queued or backing off), `queued` of them in the
 *   pool's FIFO queue;
 * - `throttled`: resources inside a server-requested throttle window now;
 *   `breakerOpen`: resources whose circuit breaker is open or half-open;
 * - `leasesTotal` granted, `okTotal` / `failedTotal` reports (factory failures count as
 *   failed), `leakedTotal` raw leases reclaimed at attempt end;
 * - `waitsTotal`: acquires that could not be served at once; `waitMsAvg`, `waitMsMax` over all
 *   of them, `waitMsP50`, `waitMsP95` over the last 1024 (nearest-rank percentiles);
 * - `usage`: the accumulated `lease.report({ usage })` counters;
 * - `holds`: the resources held out of rotation by time now, soonest end first: a server's
 *   throttle (`throttled`) or an open circuit breaker (`breaker_open`), with the epoch ms it
 *   ends (`until`). What the progress line, `watch` and the dashboard show as "waiting for
 *   key-a until 14:03:10".
 *
 * @since 0.1.0
 * @category models
 */
export interface PoolStats {
  readonly pool: string
  readonly active: number
  readonly capacity: number
  readonly utilization: number
  readonly ready: number
  readonly degraded: number
  readonly dead: number
  readonly waiting: number
  readonly queued: number
  readonly throttled: number
  readonly breakerOpen: number
  readonly leasesTotal: number
  readonly okTotal: number
  readonly failedTotal: number
  readonly total: number
  readonly revoked: number
  readonly leakedTotal: number
  readonly waitsTotal: number
  readonly waitMsAvg: number
  readonly waitMsP50: number
  readonly waitMsP95: number
  readonly waitMsMax: number
  readonly usage: Readonly<Record<string, number>>
  readonly holds: ReadonlyArray<PoolHold>
}

/**
 * A resource held out of rotation until a time (see {@link PoolStats.holds}).
 *
 * @since 0.2.0
 * @category models
 */
export interface PoolHold {
  readonly resourceId: string
  readonly reason: "throttled" | "breaker_open"
  /** Epoch ms. */
  readonly until: number
}

/**
 * A raw lease that was still held when its owner was reclaimed.
 *
 * @since 0.1.0
 * @category models
 */
export interface LeakedLease {
  readonly leaseId: string
  readonly pool: string
  readonly resourceId: string
  readonly taskName: string
  readonly heldMs: number
}

/**
 * One pool, seen through the service.
 *
 * @since 0.1.0
 * @category models
 */
export interface PoolHandle {
  readonly name: string
  /** Scoped acquire from this pool (see {@link PoolsService.acquire}). */
  readonly acquire: <Client = unknown>(
    options?: AcquireOptions,
    holder?: Holder
  ) => Effect.Effect<Lease<Client>, AcquireError, Scope.Scope>
  /** Raw acquire from this pool (see {@link PoolsService.acquireRaw}). */
  readonly acquireRaw: <Client = unknown>(options?: AcquireOptions, holder?: Holder) => Effect.Effect<Lease<Client>, AcquireError>
  readonly add: (resource: Resource.Resource<any> | Resource.ResourceOptions<any>) => Effect.Effect<ResourceInfo, ConfigError>
  readonly revoke: (resourceId: string, reason?: string) => Effect.Effect<boolean>
  /** The current resources (revoked ones excluded). */
  readonly resources: Effect.Effect<ReadonlyArray<ResourceInfo>>
  readonly stats: (selector?: Selector) => Effect.Effect<PoolStats>
  readonly snapshot: Effect.Effect<ReadonlyArray<ResourceSnapshot>>
  readonly subscribe: (kinds?: ReadonlyArray<string>) => Stream.Stream<ResourceEvent>
}

/**
 * The pools of a run.
 *
 * @since 0.1.0
 * @category models
 */
export interface PoolsService {
  /**
   * Leases a resource for the enclosing `Scope`; the lease is released when the scope
   * closes, whatever the exit. `options` may be a pool name. The pool is
   * `options.pool ?? holder.defaultPool`, else the only pool if there is exactly one. The
   * algorithm is `options.algorithm ?? holder.defaultAlgorithm ?? the pool's`. `timeout`
   * fails the wait with `AcquireTimeout` (it fires while blocked).
   * Fails with `PoolNotFound`, `ResourceUnavailable` (algorithm `immediate`, a failed client
   * factory), `AcquireTimeout`, or `ConfigError` / `PluginError` for an unresolvable
   * algorithm.
   */
  readonly acquire: <Client = unknown>(
    options?: AcquireOptions | string,
    holder?: Holder
  ) => Effect.Effect<Lease<Client>, AcquireError, Scope.Scope>
  /**
   * The escape hatch: a lease the caller must give back with `lease.releaseNow`. Tracked
   * under `holder.owner` so that {@link PoolsService.reclaim} can take back what was
   * forgotten. Same failures as {@link PoolsService.acquire}.
   */
  readonly acquireRaw: <Client = unknown>(
    options?: AcquireOptions | string,
    holder?: Holder
  ) => Effect.Effect<Lease<Client>, AcquireError>
  /** The live leases (scoped and raw) acquired under an owner key. */
  readonly heldBy: (owner: string) => Effect.Effect<ReadonlyArray<Lease>>
  /** Releases every live lease of an owner now (not counted as leaked). Returns how many. */
  readonly releaseAll: (owner: string) => Effect.Effect<number>
  /**
   * Ends an owner (an attempt): every raw lease it still holds is released, counted in its
   * pool's `leakedTotal` and reported as a `lease.leaked` event. Scoped leases still live are
   * released too without counting as leaks. Returns the leaked raw leases (the runner turns
   * a non-empty result into `LeaseLeakError` under `strictLeases`).
   */
  readonly reclaim: (owner: string) => Effect.Effect<ReadonlyArray<LeakedLease>>
  /** One pool, or `PoolNotFound`. */
  readonly get: (name: string) => Effect.Effect<PoolHandle, PoolNotFound>
  /** The pool names, in registration order. */
  readonly names: Effect.Effect<ReadonlyArray<string>>
  /** Registers another pool; `ConfigError` if the name is taken or a resource is invalid. */
  readonly addPool: (config: PoolConfig) => Effect.Effect<PoolHandle, ConfigError>
  /**
   * Adds a resource to a pool at run time and wakes the waiters it can serve. Plain
   * resource options get the pool's default `kind`. A generated id already present is
   * suffixed (`~2`, …); an explicit duplicate id or an invalid resource fails with
   * `ConfigError`. Emits `resource.added`.
   */
  readonly add: (
    pool: string,
    resource: Resource.Resource<any> | Resource.ResourceOptions<any>
  ) => Effect.Effect<ResourceInfo, PoolNotFound | ConfigError>
  /**
   * Revokes a resource for good: no new leases; live ones run to their release. Emits
   * `resource.revoked`. `false` when the id is unknown or already revoked.
   */
  readonly revoke: (pool: string, resourceId: string, reason?: string) => Effect.Effect<boolean, PoolNotFound>
  /** Per-resource state of a pool. */
  readonly snapshot: (pool: string) => Effect.Effect<ReadonlyArray<ResourceSnapshot>, PoolNotFound>
  /** Aggregated figures of a pool, optionally over the resources matching a selector. */
  readonly stats: (pool: string, selector?: Selector) => Effect.Effect<PoolStats, PoolNotFound>
  /** A Stream of events (subscribed when the stream starts; a sliding buffer of 4096). */
  readonly subscribe: (filter?: EventFilter) => Stream.Stream<ResourceEvent>
  /** Subscribes now, for the enclosing scope; returns the queue the events arrive on. */
  readonly events: (filter?: EventFilter) => Effect.Effect<Queue.Dequeue<ResourceEvent>, never, Scope.Scope>
  /** Registers a callback for every event, for the enclosing scope (no event is dropped). */
  readonly listen: (callback: EventCallback) => Effect.Effect<void, never, Scope.Scope>
  /**
   * The state of each resource of a pool worth carrying across a resume (throttle window,
   * probing, cooldown, open breaker, usage, the algorithms' learned state; times in epoch ms),
   * keyed by resource id, as strict JSON tagged with the resource's identity (its kind and
   * options without secrets). Revoked resources are left out. See `docs/pools.md`, "Across a
   * resume".
   */
  readonly saveState: (pool: string) => Effect.Effect<ReadonlyArray<SavedResourceState>, PoolNotFound>
  /**
   * Applies a state {@link PoolsService.saveState} wrote (read back from a store: any value is
   * accepted and checked) to the resource `resourceId` of `pool`: a throttle window, cooldown
   * or open breaker still running at the clock's now keeps the resource out of rotation until
   * it ends (one that ended is over), usage counters are added, and each algorithm of the pool
   * that can `restore` takes its learned state back. Emits `resource.restored`, or
   * `resource.restore_ignored` with the reason when nothing was applied (a value that is not
   * a version-1 state, another identity, an unknown resource). Never fails for a bad value.
   */
  readonly restoreState: (pool: string, resourceId: string, state: unknown) => Effect.Effect<RestoreOutcome, PoolNotFound>
}

/**
 * One resource's saved state (see {@link PoolsService.saveState}): its id and the value to
 * store (strict JSON, version 1).
 *
 * @since 0.6.0
 * @category models
 */
export interface SavedResourceState {
  readonly resourceId: string
  readonly state: Json
}

/**
 * The outcome of {@link PoolsService.restoreState}: `Restored` with what was applied
 * (`throttle`, `probing`, `cooldown`, `breaker`, `usage`, `algorithm:<name>`; empty when the
 * saved state held nothing still in force), or `Ignored` with a reason (`invalid`,
 * `identity_changed`, `unknown_resource`) and a message.
 *
 * @since 0.6.0
 * @category models
 */
export type RestoreOutcome =
  | { readonly _tag: "Restored"; readonly applied: ReadonlyArray<string> }
  | {
    readonly _tag: "Ignored"
    readonly reason: "invalid" | "identity_changed" | "unknown_resource"
    readonly message: string
  }

/**
 * The pools of a run, as a service.
 *
 * @since 0.1.0
 * @category tags
 */
export class Pools extends Context.Tag("assay/Pools")<Pools, PoolsService>() {}

/**
 * Options of {@link makePools} / {@link layer}: `onEvent` (every pool's events),
 * `plugins` (user algorithms by name), `globalQuotas` (see below).
 *
 * @since 0.1.0
 * @category models
 */
export interface PoolsOptions {
  readonly onEvent?: EventCallback | undefined
  readonly plugins?: ReadonlyMap<string, AcquireAlgorithm.AlgorithmPlugin> | undefined
  /**
   * Accept resources that declare quota windows (`Resource.make({ quotas })`): set by the
   * global pools (`PgPools`), which enforce them. Without it such a resource is refused with a
   * `ConfigError` at `pools.<name>.resources[i].quotas`, since local pools do not enforce them.
   */
  readonly globalQuotas?: boolean | undefined
}

/**
 * Builds the pools service from pool declarations, for the enclosing scope (cooldown timers
 * and event hubs live in it). Uses the `Clock` of the calling fiber (so `TestClock` in
 * tests). Fails with `ConfigError` listing every problem (duplicate pool names, invalid
 * resources with their field paths, unresolvable algorithms).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makePools = (
  pools: Iterable<PoolConfig>,
  options: PoolsOptions = {}
): Effect.Effect<PoolsService, ConfigError, Scope.Scope> =>
  internal.make(pools, options)

/**
 * The {@link Pools} service as a scoped layer (see {@link makePools}).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (pools: Iterable<PoolConfig>, options: PoolsOptions = {}): Layer.Layer<Pools, ConfigError> =>
  Layer.scoped(Pools, makePools(pools, options))

/**
 * A view of `pools` under local names, as a suite member sees its pools: each key of
 * `aliases` (a pool name of the member's own configuration) means the pool named by its value
 * (a shared top-level pool, or the member's private `experiment:ID:NAME`). The mapping applies
 * to every place a pool is named: acquire by name, by `options.pool` and by the holder's
 * default pool (the task's declared `resource`), `get`, `add` (publish), `revoke`, `snapshot`,
 * `stats` and the pool of an event filter (`subscribe`, `events`). Events, handles and stats of
 * a pool that exactly one local name maps to carry that local name. The view is closed: it
 * reaches only the keys of `aliases` (bind a pool under its own name with an identity alias).
 * Any other name, an actual name included, fails with `PoolNotFound` whose `known` lists the
 * local names; `names` gives the local names; event streams carry only the view's pools; an
 * acquire naming no pool (and no default) takes the only local pool when there is exactly one.
 * The leases, the owners' bookkeeping and the pools themselves are those of `pools` (one
 * instance: capacity, health, cooldown, throttles and quotas are shared with every other view).
 *
 * @param pools the service to view
 * @param aliases local pool name → actual pool name: the only names the view knows
 * @returns the closed aliased view
 * @since 0.5.0
 * @category combinators
 */
export const aliased = (pools: PoolsService, aliases: Readonly<Record<string, string>>): PoolsService =>
  aliasedView(pools, aliases)

/**
 * What {@link metered} tells of the leases taken through its view: `acquired(lease, holder)` once
 * per lease granted (scoped or raw), before the caller gets it, with the holder the caller gave; `reported(lease, report)` for each
 * `lease.report` made through the lease the view handed out, before the report reaches the
 * pool.
 *
 * @since 0.6.0
 * @category models
 */
export interface LeaseMeter {
  readonly acquired: (lease: Lease, holder?: Holder | undefined) => Effect.Effect<void>
  readonly reported: (lease: Lease, report: LeaseReport) => Effect.Effect<void>
}

const meteredLease = <Client>(lease: Lease<Client>, meter: LeaseMeter): Lease<Client> => ({
  // the pool's lease reads its fields through getters: delegate, never copy
  get id() {
    return lease.id
  },
  get pool() {
    return lease.pool
  },
  get resource() {
    return lease.resource
  },
  get options() {
    return lease.options
  },
  get client() {
    return lease.client
  },
  get taskName() {
    return lease.taskName
  },
  get heldMs() {
    return lease.heldMs
  },
  report: (report) => Effect.zipRight(meter.reported(lease as Lease, report), lease.report(report)),
  degrade: (reason) => lease.degrade(reason),
  get releaseNow() {
    return lease.releaseNow
  }
})

/**
 * A view of `pools` that meters its leases (a study trial's calls, tokens and cost; see
 * `StudyControl`): every lease acquired through it (`acquire`, `acquireRaw`) is told to
 * `meter.acquired`, and the lease handed out tells `meter.reported` of each report before
 * passing it on. Everything else is `pools` itself (one instance: capacity, health and quotas
 * are shared). The suite runtime applies it over a member's aliased view ({@link aliased}), so
 * tasks need no change; leases read back through `heldBy` are the pool's own (not metered).
 *
 * @param pools the service (or view) to meter
 * @param meter what to tell
 * @returns the metered view
 * @since 0.6.0
 * @category combinators
 */
export const metered = (pools: PoolsService, meter: LeaseMeter): PoolsService => ({
  ...pools,
  acquire: <Client,>(o?: AcquireOptions | string, h?: Holder) =>
    Effect.flatMap(
      pools.acquire<Client>(o, h),
      (lease) => Effect.as(meter.acquired(lease as Lease, h), meteredLease(lease, meter))
    ),
  acquireRaw: <Client,>(o?: AcquireOptions | string, h?: Holder) =>
    Effect.flatMap(
      pools.acquireRaw<Client>(o, h),
      (lease) => Effect.as(meter.acquired(lease as Lease, h), meteredLease(lease, meter))
    )
})
