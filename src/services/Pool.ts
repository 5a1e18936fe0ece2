/**
 * Pools of resources and the leases they hand out.
 *
 * A pool is a named group of resources plus a default acquisition algorithm; the {@link Pools}
 * service holds the pools of a run and is the only state shared between pipelines. A lease
 * is one use of one resource. {@link PoolsService.acquire} returns it **scoped** (given back
 * on every exit path: success, failure, interruption, timeout);
 * {@link PoolsService.acquireRaw} is the escape hatch whose leases the caller releases itself
 * and the runner reclaims ({@link PoolsService.reclaim}) when the attempt ends.
 *
 * Implementation: all pool state lives in plain mutable structures changed only inside
 * synchronous `Effect.sync` blocks. JavaScript runs one fiber step at a time, so each block is
 * atomic: in effect one lock around the whole pool state, without STM (the write-then-retry
 * trap of effect 3.22 does not arise) and without allocation beyond the lease itself on the
 * uncontended path. Waiters are a FIFO list per pool, resumed with `Effect.async` callbacks;
 * a slot granted to a waiter is recorded on the acquire attempt first, so an interruption at
 * any point gives it back. Health comes only from `lease.report` (and factory failures) via
 * the pure state machine in `src/domain/Resource.ts`; cooldown timers are fibers in the
 * service's scope, sleeping on Effect's `Clock`, that wake matching waiters when they fire.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Context, Duration, Effect, Exit, Fiber, Layer, Option, Queue, Schema, Scope, Stream } from "effect"
import * as Breaker from "../domain/Breaker.js"
import {
  AcquireTimeout,
  classify,
  ConfigError,
  messageOf,
  PoolNotFound,
  ResourceUnavailable,
  retryAfterOf,
  ServerDelayRefused
} from "../domain/Errors.js"
import type { ConfigIssue } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import type { AcquireError, AcquireOptions, AlgorithmInput, Lease, LeaseReport, ResourceInfo, Selector } from "../domain/Lease.js"
import * as Resource from "../domain/Resource.js"
import * as AcquireAlgorithm from "./AcquireAlgorithm.js"

// ---------------------------------------------------------------------------------------------
// Public models
// ---------------------------------------------------------------------------------------------

/**
 * A pool event: a state change delivered to subscribers, listeners and the pool's `onEvent`
 * callback. Kinds: `resource.added`, `resource.revoked`, `resource.degraded`, `resource.dead`,
 * `resource.revived`, `resource.cooldown_ended`, `resource.factory_failed`,
 * `acquire.suspected_deadlock`, `lease.leaked`. `ts` is epoch milliseconds from `Clock`.
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
 * Called with every event of a pool; its failures and defects are ignored (an observer must
 * not break a lease).
 *
 * @since 0.1.0
 * @category models
 */
export type EventCallback = (event: ResourceEvent) => Effect.Effect<void> | void

/**
 * Options of {@link make}. `kind`: the kind given to resources added later from plain
 * options; `algorithm`: the pool's default (default `"wait"`); `deadlockWarn`: how long a
 * task holding a lease may wait for another before `acquire.suspected_deadlock` (default
 * 5 seconds); `onEvent`: a callback for this pool's events; `breaker`: the circuit breaker
 * of each resource (see `src/domain/Breaker.ts`; defaults there), or `false` to turn it off
 * (transient failures then count toward the failure streak like any other).
 *
 * @since 0.1.0
 * @category models
 */
export interface PoolOptions {
  readonly kind?: string | undefined
  readonly algorithm?: AlgorithmInput | AcquireAlgorithm.AcquireAlgorithm | undefined
  readonly deadlockWarn?: Duration.DurationInput | undefined
  readonly onEvent?: EventCallback | undefined
  readonly breaker?: Breaker.BreakerOptions | false | undefined
}

/**
 * The longest server-requested wait (a rate limit's Retry-After or reset hint) an acquire
 * accepts by default, in milliseconds: 10 minutes. Longer throttles make waiters fail with
 * `ServerDelayRefused` instead of waiting silently. The runner passes each task's
 * `retry.maxServerDelay` instead ({@link Holder.maxServerDelayMs}).
 *
 * @since 0.2.0
 * @category constants
 */
export const defaultMaxServerDelayMs = 600_000

/**
 * A pool declaration (a value; the {@link Pools} service brings it to life).
 *
 * @since 0.1.0
 * @category models
 */
export interface PoolConfig {
  readonly _tag: "PoolConfig"
  readonly name: string
  readonly resources: ReadonlyArray<Resource.Resource<any>>
  readonly options: PoolOptions
}

/**
 * Declares a pool: a name (how tasks refer to it), its initial resources and options.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  name: string,
  resources: Iterable<Resource.Resource<any>> = [],
  options: PoolOptions = {}
): PoolConfig => ({ _tag: "PoolConfig", name, resources: [...resources], options })

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
export const anonymous: Holder = { taskName: "anonymous", pipelineId: "" }

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
 * What to subscribe to: one pool (default all) and some kinds (default all).
 *
 * @since 0.1.0
 * @category models
 */
export interface EventFilter {
  readonly pool?: string | undefined
  readonly kinds?: ReadonlyArray<string> | undefined
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
 * `plugins` (user algorithms by name).
 *
 * @since 0.1.0
 * @category models
 */
export interface PoolsOptions {
  readonly onEvent?: EventCallback | undefined
  readonly plugins?: ReadonlyMap<string, AcquireAlgorithm.AlgorithmPlugin> | undefined
}

// ---------------------------------------------------------------------------------------------
// Internal state
// ---------------------------------------------------------------------------------------------

type ClientState =
  | { readonly _tag: "none" }
  | { readonly _tag: "building"; readonly waiters: Array<() => void> }
  | { readonly _tag: "ready"; readonly value: unknown }
  | { readonly _tag: "failed"; readonly error: unknown }

const clientNone: ClientState = { _tag: "none" }

interface Res {
  resource: Resource.Resource<unknown>
  readonly info: ResourceInfo
  readonly index: number
  health: Resource.Health
  active: number
  readonly leases: Set<string>
  client: ClientState
  readonly usage: Record<string, number>
  latencyEmaMs: number | undefined
  lastError: string | undefined
  /** Bumped at every (re)degradation so that stale cooldown timers do nothing. */
  cooldownGen: number
  /**
   * Epoch ms until which the resource is throttled (a rate-limit report carrying the server's
   * Retry-After); 0 when not throttled.
   */
  throttledUntil: number
  /** After a throttle window: one lease at a time (a probe) until a successful report. */
  probing: boolean
  /** How many times the resource was throttled. */
  throttledTotal: number
  /** The circuit breaker (pure state, see `src/domain/Breaker.ts`). */
  breaker: Breaker.Breaker
  readonly slot: AcquireAlgorithm.Slot
}

interface Waiter {
  readonly selector: Selector
  readonly ranker: AcquireAlgorithm.Ranker | undefined
  /** The longest server-requested throttle this waiter waits out (ms). */
  readonly maxDelayMs: number
  /** Ends the wait with `ServerDelayRefused`. */
  refuse: ((error: ServerDelayRefused) => void) | undefined
  readonly attempt: Attempt
  resume: ((slot: AcquireAlgorithm.Slot) => void) | undefined
  /** Ends the wait with a failure (every resource it could use is dead or revoked). */
  fail: ((error: ResourceUnavailable) => void) | undefined
  prev: Waiter | undefined
  next: Waiter | undefined
  queued: boolean
}

interface PoolState {
  readonly name: string
  readonly kind: string | undefined
  readonly algorithm: AcquireAlgorithm.AcquireAlgorithm
  readonly deadlockWarnMs: number
  readonly onEvent: EventCallback | undefined
  /** `undefined`: the breaker is off. */
  readonly breaker: Breaker.BreakerPolicy | undefined
  /** The latest throttle end of any resource (epoch ms): a cheap "nothing to refuse" test. */
  throttledUntilMax: number
  readonly list: Array<Res>
  readonly byId: Map<string, Res>
  head: Waiter | undefined
  tail: Waiter | undefined
  queued: number
  waiting: number
  leasesTotal: number
  okTotal: number
  failedTotal: number
  leakedTotal: number
  waitsTotal: number
  waitMsSum: number
  waitMsMax: number
  readonly recentWaits: Array<number>
  recentNext: number
  readonly usage: Record<string, number>
  readonly sticky: Map<string, string>
  handle: PoolHandle | undefined
}

/**
 * How many pipelines' last resource a pool remembers for `sticky` (least recently leased
 * forgotten first): far more than can be in flight at once, bounded for endless runs.
 */
const STICKY_MAX = 16_384

/** The slots one acquire has taken so far; all but the one it keeps are given back. */
interface Attempt {
  readonly taken: Array<Res>
  waited: boolean
}

/** Effects produced by a state change, run after the synchronous block. */
interface Effects {
  events: Array<ResourceEvent> | undefined
  timers: Array<{ readonly pool: PoolState; readonly res: Res; readonly gen: number; readonly until: number }> | undefined
  /** Throttle windows to end (wake the waiters only this resource can serve). */
  throttles?: Array<{ readonly pool: PoolState; readonly until: number }> | undefined
  /** Open breakers to turn half-open at `until`. */
  breakers?: Array<{ readonly pool: PoolState; readonly res: Res; readonly opened: number; readonly until: number }> | undefined
}

const EMA_ALPHA = 0.2
const noHolds: ReadonlyArray<PoolHold> = []
const RECENT_WAITS = 1024

const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!

const jsonError = (u: unknown): Json => messageOf(u)

// ---------------------------------------------------------------------------------------------
// The lease
// ---------------------------------------------------------------------------------------------

class LeaseImpl implements Lease<any> {
  released = false
  /** Granted while the resource's breaker was half-open: its report decides the breaker. */
  probe = false
  /** The breaker's `opened` count at grant: reports of leases from before an opening are stale. */
  breakerEpoch = 0
  constructor(
    readonly id: string,
    readonly pool: string,
    readonly res: Res,
    readonly client: any,
    readonly taskName: string,
    readonly acquiredAt: number,
    readonly owner: string | undefined,
    readonly raw: boolean,
    readonly core: Core
  ) {}
  get resource(): ResourceInfo {
    return this.res.info
  }
  get options(): Readonly<Record<string, unknown>> {
    return this.res.info.options
  }
  get heldMs(): Effect.Effect<number> {
    return Effect.sync(() => this.core.now() - this.acquiredAt)
  }
  report(report: LeaseReport): Effect.Effect<void> {
    return this.core.report(this, report)
  }
  degrade(reason?: string): Effect.Effect<void> {
    return this.core.degrade(this, reason)
  }
  get releaseNow(): Effect.Effect<void> {
    return this.core.release(this)
  }
}

// ---------------------------------------------------------------------------------------------
// The core
// ---------------------------------------------------------------------------------------------

class Core {
  readonly pools = new Map<string, PoolState>()
  readonly owners = new Map<string, Set<LeaseImpl>>()
  readonly listeners = new Set<EventCallback>()
  readonly subscribers = new Set<{
    readonly pool: string | undefined
    readonly kinds: ReadonlySet<string> | undefined
    readonly queue: Queue.Queue<ResourceEvent>
  }>()
  readonly resolved = new Map<string, AcquireAlgorithm.AcquireAlgorithm>()
  leaseSeq = 0

  constructor(
    readonly clock: Clock.Clock,
    readonly scope: Scope.Scope,
    readonly options: PoolsOptions
  ) {}

  now(): number {
    return this.clock.unsafeCurrentTimeMillis()
  }

  // --- pools ---------------------------------------------------------------------------------

  unknownPool(name: string): PoolNotFound {
    return new PoolNotFound({ pool: name, known: [...this.pools.keys()] })
  }

  createPool(config: PoolConfig): Effect.Effect<PoolState, ConfigError> {
    return Effect.suspend(() => {
      const issues: Array<ConfigIssue> = []
      const base = `pools.${config.name}`
      if (config.name === "") issues.push({ path: "pools", message: "a pool needs a non-empty name" })
      if (this.pools.has(config.name)) issues.push({ path: base, message: `a pool named "${config.name}" already exists` })
      const algo = AcquireAlgorithm.resolveAlgorithm(config.options.algorithm ?? "wait", this.options.plugins)
      if (algo._tag === "Left") {
        const e = algo.left
        if (e._tag === "ConfigError") {
          for (const i of e.issues) issues.push({ ...i, path: `${base}.${i.path}` })
        } else issues.push({ path: `${base}.algorithm`, message: e.message })
      }
      const deadlockWarnMs = config.options.deadlockWarn === undefined ? 5_000 : Duration.toMillis(config.options.deadlockWarn)
      let breaker: Breaker.BreakerPolicy | undefined
      if (config.options.breaker !== false) {
        const b = Breaker.policy(config.options.breaker)
        if ("issues" in b) {
          for (const i of b.issues) issues.push({ path: `${base}.breaker.${i.field}`, message: i.message })
        } else breaker = b.policy
      }
      const state: PoolState = {
        name: config.name,
        kind: config.options.kind,
        algorithm: algo._tag === "Right" ? algo.right : AcquireAlgorithm.wait(),
        deadlockWarnMs,
        onEvent: config.options.onEvent,
        breaker,
        throttledUntilMax: 0,
        list: [],
        byId: new Map(),
        head: undefined,
        tail: undefined,
        queued: 0,
        waiting: 0,
        leasesTotal: 0,
        okTotal: 0,
        failedTotal: 0,
        leakedTotal: 0,
        waitsTotal: 0,
        waitMsSum: 0,
        waitMsMax: 0,
        recentWaits: [],
        recentNext: 0,
        usage: {},
        sticky: new Map(),
        handle: undefined
      }
      config.resources.forEach((r, i) => {
        const err = this.insertResource(state, r, `${base}.resources[${i}]`)
        if (err !== undefined) issues.push(...err)
      })
      if (issues.length > 0) {
        return Effect.fail(
          new ConfigError({
            message: `invalid pool "${config.name}": ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
            issues
          })
        )
      }
      this.pools.set(config.name, state)
      state.handle = this.handle(state)
      return Effect.succeed(state)
    })
  }

  /** Validates and inserts; returns issues on failure. */
  insertResource(
    pool: PoolState,
    input: Resource.Resource<any> | Resource.ResourceOptions<any>,
    path: string
  ): ReadonlyArray<ConfigIssue> | undefined {
    let resource: Resource.Resource<unknown> = (input as { _tag?: unknown })._tag === "Resource"
      ? input as Resource.Resource<unknown>
      : Resource.make(pool.kind ?? "generic", input as Resource.ResourceOptions<unknown>)
    const issues = Resource.validate(resource, path)
    if (issues.length > 0) return issues
    if (pool.byId.has(resource.id)) {
      if (!resource.generatedId) {
        return [{ path: `${path}.id`, message: `duplicate resource id "${resource.id}" in pool "${pool.name}"` }]
      }
      let n = 2
      while (pool.byId.has(`${resource.id}~${n}`)) n++
      resource = Resource.withId(resource, `${resource.id}~${n}`)
    }
    const res: Res = {
      resource,
      info: Resource.info(resource),
      index: pool.list.length,
      health: Resource.initialHealth,
      active: 0,
      leases: new Set(),
      client: clientNone,
      usage: {},
      latencyEmaMs: undefined,
      lastError: undefined,
      cooldownGen: 0,
      throttledUntil: 0,
      probing: false,
      throttledTotal: 0,
      breaker: Breaker.initial,
      slot: { pool: pool.name, resourceId: resource.id }
    }
    pool.list.push(res)
    pool.byId.set(resource.id, res)
    return undefined
  }

  // --- events --------------------------------------------------------------------------------

  event(
    fx: Effects,
    pool: PoolState,
    kind: string,
    resourceId: string | undefined,
    data: Record<string, Json> = {}
  ): void {
    const e: ResourceEvent = resourceId === undefined
      ? { kind, pool: pool.name, data, ts: this.now() }
      : { kind, pool: pool.name, resourceId, data, ts: this.now() }
    ;(fx.events ??= []).push(e)
  }

  /** Applies a health step to a resource, recording events and cooldown timers. */
  applyStep(fx: Effects, pool: PoolState, res: Res, step: Resource.Step, data: Record<string, Json> = {}): void {
    const before = res.health
    res.health = step.health
    if (step.health.state === "degraded" && step.health.cooldownUntil !== before.cooldownUntil) {
      const gen = ++res.cooldownGen
      ;(fx.timers ??= []).push({ pool, res, gen, until: step.health.cooldownUntil })
    } else if (step.health.state !== "degraded") {
      res.cooldownGen++
    }
    if (step.transition !== undefined) {
      this.event(fx, pool, `resource.${step.transition}`, res.resource.id, {
        consecutiveFailures: step.health.consecutiveFailures,
        ...(step.transition === "degraded" ? { cooldownUntil: step.health.cooldownUntil } : {}),
        ...data
      })
    }
  }

  /**
   * Sleeps until the clock reads `until` (epoch ms) or later. A timer may fire early (Node
   * fires up to ~1 ms before its deadline as `Date.now()` sees it) or late; every wake-up
   * re-reads the clock and sleeps again while the deadline is still ahead, so whatever is
   * checked after it (a throttle window, a cooldown, an open breaker) holds when it runs.
   */
  sleepUntil(until: number): Effect.Effect<void> {
    const loop: Effect.Effect<void> = Effect.suspend(() => {
      const left = until - this.now()
      return left <= 0 ? Effect.void : Effect.zipRight(this.clock.sleep(Duration.millis(Math.max(1, left))), loop)
    })
    return loop
  }

  /**
   * Runs a timer fiber in the service's scope, interruptible whatever region it is forked
   * from (a fiber inherits its parent's interruptibility: a timer forked inside an
   * uninterruptible region, a lease release or an acquire's bookkeeping, would otherwise
   * hold the scope's closing, or its interrupter, until it fires).
   */
  timer(effect: Effect.Effect<void>): Effect.Effect<Fiber.RuntimeFiber<void>> {
    return Effect.forkIn(Effect.interruptible(effect), this.scope)
  }

  flush(fx: Effects): Effect.Effect<void> {
    if (fx.events === undefined && fx.timers === undefined && fx.throttles === undefined && fx.breakers === undefined) {
      return Effect.void
    }
    return Effect.suspend(() => {
      const effects: Array<Effect.Effect<unknown>> = []
      if (fx.timers !== undefined) {
        for (const t of fx.timers) effects.push(this.timer(this.cooldownTimer(t.pool, t.res, t.gen, t.until)))
      }
      if (fx.throttles !== undefined) {
        for (const t of fx.throttles) {
          // the window's end re-checked by `sleepUntil`; `dispatch` serves what is free then
          effects.push(this.timer(Effect.zipRight(this.sleepUntil(t.until), Effect.sync(() => this.dispatch(t.pool)))))
        }
      }
      if (fx.breakers !== undefined) {
        for (const t of fx.breakers) effects.push(this.timer(this.breakerTimer(t.pool, t.res, t.opened, t.until)))
      }
      if (fx.events !== undefined) {
        for (const e of fx.events) effects.push(this.deliver(e))
      }
      return Effect.all(effects, { discard: true })
    })
  }

  deliver(e: ResourceEvent): Effect.Effect<void> {
    const callbacks: Array<EventCallback> = []
    const pool = this.pools.get(e.pool)
    if (pool?.onEvent !== undefined) callbacks.push(pool.onEvent)
    if (this.options.onEvent !== undefined) callbacks.push(this.options.onEvent)
    for (const l of this.listeners) callbacks.push(l)
    const run = (cb: EventCallback) =>
      Effect.suspend(() => {
        const out = cb(e)
        return Effect.isEffect(out) ? out : Effect.void
      }).pipe(Effect.catchAllCause(() => Effect.void))
    const offers: Array<Effect.Effect<boolean>> = []
    for (const s of this.subscribers) {
      if ((s.pool === undefined || s.pool === e.pool) && (s.kinds === undefined || s.kinds.has(e.kind))) {
        offers.push(Queue.offer(s.queue, e))
      }
    }
    return Effect.zipRight(
      Effect.all(offers, { discard: true }),
      Effect.forEach(callbacks, run, { discard: true })
    )
  }

  cooldownTimer(pool: PoolState, res: Res, gen: number, until: number): Effect.Effect<void> {
    return Effect.flatMap(
      this.sleepUntil(until),
      () =>
        Effect.suspend(() => {
          const fx: Effects = { events: undefined, timers: undefined }
          if (res.cooldownGen === gen) {
            const step = Resource.onCooldownEnd(res.health, this.now())
            if (step.transition !== undefined) {
              // a stored factory failure gets a real retry after the cooldown
              if (res.client._tag === "failed") res.client = clientNone
              this.applyStep(fx, pool, res, step)
              this.dispatch(pool)
            }
          }
          return this.flush(fx)
        })
    )
  }

  /** An open breaker's time is over: half-open (one probe at a time), waiters woken. */
  breakerTimer(pool: PoolState, res: Res, opened: number, until: number): Effect.Effect<void> {
    return Effect.flatMap(this.sleepUntil(until), () =>
      Effect.suspend(() => {
        if (res.breaker.opened !== opened) return Effect.void
        const fx: Effects = { events: undefined, timers: undefined }
        this.applyBreaker(fx, pool, res, Breaker.onOpenEnd(res.breaker, this.now()))
        if (pool.head !== undefined) this.dispatch(pool)
        return this.flush(fx)
      }))
  }

  /** Applies a breaker step, recording its event and, when it opened, its timer. */
  applyBreaker(fx: Effects, pool: PoolState, res: Res, step: Breaker.BreakerStep, data: Record<string, Json> = {}): void {
    res.breaker = step.breaker
    if (step.transition === undefined) return
    if (step.transition === "opened") {
      ;(fx.breakers ??= []).push({ pool, res, opened: step.breaker.opened, until: step.breaker.openUntil })
    }
    this.event(fx, pool, `breaker.${step.transition}`, res.resource.id, {
      ...(step.transition === "opened" ? { openUntil: step.breaker.openUntil, failedProbes: step.breaker.failedProbes } : {}),
      ...data
    })
  }

  // --- taking slots --------------------------------------------------------------------------

  free(res: Res, now: number): boolean {
    if (now < res.throttledUntil) return false
    const b = res.breaker
    if (b.state === "open" && now < b.openUntil) return false
    // a probe at a time: after a rate limit, or while the breaker is half-open
    const capacity = res.probing || b.state !== "closed" ? 1 : res.resource.capacity
    return res.active < capacity && Resource.inRotation(res.health, now)
  }

  /** Picks a free matching resource (no side effects). */
  pick(pool: PoolState, selector: Selector, ranker: AcquireAlgorithm.Ranker | undefined, now: number): Res | undefined {
    if (ranker === undefined) {
      for (const res of pool.list) {
        if (this.free(res, now) && Resource.matches(selector, res.info)) return res
      }
      return undefined
    }
    const candidates: Array<AcquireAlgorithm.Candidate> = []
    for (const res of pool.list) {
      if (this.free(res, now) && Resource.matches(selector, res.info)) {
        candidates.push({
          resource: res.info,
          index: res.index,
          active: res.active,
          capacity: res.resource.capacity,
          usage: res.usage,
          latencyEmaMs: res.latencyEmaMs,
          consecutiveFailures: res.health.consecutiveFailures
        })
      }
    }
    if (candidates.length === 0) return undefined
    const first = ranker(candidates)[0]
    if (first === undefined) return undefined
    const res = pool.byId.get(first.resource.id)
    return res !== undefined && this.free(res, now) && Resource.matches(selector, res.info) ? res : undefined
  }

  take(attempt: Attempt, res: Res): void {
    res.active++
    attempt.taken.push(res)
  }

  /** Gives a slot back (not a lease) and wakes waiters. */
  untake(pool: PoolState, res: Res): void {
    res.active--
    if (pool.head !== undefined) this.dispatch(pool)
  }

  /** Serves queued waiters FIFO (skipping those no free resource matches). */
  dispatch(pool: PoolState): void {
    const now = this.now()
    let w = pool.head
    while (w !== undefined) {
      const next = w.next
      const res = this.pick(pool, w.selector, w.ranker, now)
      if (res !== undefined) {
        this.take(w.attempt, res)
        this.unlink(pool, w)
        const resume = w.resume
        w.resume = undefined
        w.fail = undefined
        resume?.(res.slot)
        if (!this.anyFree(pool, now)) return
      } else {
        const hopeless = this.hopeless(pool, w.selector)
        if (hopeless !== undefined) {
          this.detach(pool, w).fail?.(hopeless)
        } else {
          this.refuseIfOverlong(pool, w, now)
        }
      }
      w = next
    }
  }

  /** Fails every queued waiter whose usable resources are all throttled past its ceiling. */
  refuseOverlong(pool: PoolState): void {
    const now = this.now()
    let w = pool.head
    while (w !== undefined) {
      const next = w.next
      this.refuseIfOverlong(pool, w, now)
      w = next
    }
  }

  refuseIfOverlong(pool: PoolState, w: Waiter, now: number): void {
    const refused = this.overlong(pool, w.selector, w.maxDelayMs, now)
    if (refused === undefined) return
    this.detach(pool, w).refuse?.(refused)
  }

  /**
   * Takes a waiter out of its queue and clears its callbacks (a waiter is ended once), then
   * returns them so that the caller ends it the one way it chose.
   */
  detach(pool: PoolState, w: Waiter): Pick<Waiter, "resume" | "fail" | "refuse"> {
    this.unlink(pool, w)
    const callbacks = { resume: w.resume, fail: w.fail, refuse: w.refuse }
    w.resume = undefined
    w.fail = undefined
    w.refuse = undefined
    return callbacks
  }

  /**
   * A wait longer than the acquire accepts: every resource matching the selector that is not
   * dead or revoked is throttled by its server past `now + maxDelayMs`, and there is at least
   * one (the earliest end is reported).
   */
  overlong(pool: PoolState, selector: Selector, maxDelayMs: number, now: number): ServerDelayRefused | undefined {
    if (pool.throttledUntilMax - now <= maxDelayMs) return undefined
    let earliest: Res | undefined
    for (const res of pool.list) {
      if (!Resource.matches(selector, res.info)) continue
      const state = Resource.effectiveState(res.health, now)
      if (state === "dead" || state === "revoked") continue
      if (res.throttledUntil - now <= maxDelayMs) return undefined
      if (earliest === undefined || res.throttledUntil < earliest.throttledUntil) earliest = res
    }
    if (earliest === undefined) return undefined
    return new ServerDelayRefused({
      pool: pool.name,
      resourceId: earliest.resource.id,
      retryAfterMs: earliest.throttledUntil - now,
      untilMs: earliest.throttledUntil,
      maxDelayMs,
      errorClass: "rate_limit"
    })
  }

  /**
   * A wait that can never be served: every resource matching the selector is dead or revoked
   * (neither comes back by itself) and at least one of them died (its endpoint keeps failing,
   * so waiting would hang the run). A selector whose resources were all revoked, or that
   * matches no resource at all, keeps waiting: revocation is an operator's move, usually
   * followed by an `add`.
   */
  hopeless(pool: PoolState, selector: Selector): ResourceUnavailable | undefined {
    const now = this.now()
    let matching = 0
    let dead = 0
    for (const res of pool.list) {
      if (!Resource.matches(selector, res.info)) continue
      matching++
      const state = Resource.effectiveState(res.health, now)
      if (state === "dead") dead++
      else if (state !== "revoked") return undefined
    }
    if (matching === 0 || dead === 0) return undefined
    return new ResourceUnavailable({
      pool: pool.name,
      message: `every resource of pool "${pool.name}" that matches the request is dead or revoked (${dead} dead of ${matching}); a successful report or an added resource is needed`
    })
  }

  anyFree(pool: PoolState, now: number): boolean {
    for (const res of pool.list) if (this.free(res, now)) return true
    return false
  }

  unlink(pool: PoolState, w: Waiter): void {
    if (!w.queued) return
    w.queued = false
    if (w.prev === undefined) pool.head = w.next
    else w.prev.next = w.next
    if (w.next === undefined) pool.tail = w.prev
    else w.next.prev = w.prev
    w.prev = undefined
    w.next = undefined
    pool.queued--
  }

  enqueue(pool: PoolState, w: Waiter): void {
    w.queued = true
    w.prev = pool.tail
    if (pool.tail === undefined) pool.head = w
    else pool.tail.next = w
    pool.tail = w
    pool.queued++
  }

  markWaiting(attempt: Attempt, pool: PoolState): void {
    if (!attempt.waited) {
      attempt.waited = true
      pool.waiting++
    }
  }

  ops(
    attempt: Attempt,
    target: string,
    selector: Selector,
    holder: Holder,
    ranker: AcquireAlgorithm.Ranker | undefined,
    home: PoolState
  ): AcquireAlgorithm.AcquireOps {
    const core = this
    const poolOf = (name: string | undefined) => core.pools.get(name ?? target)
    const ops: AcquireAlgorithm.AcquireOps = {
      pool: target,
      selector,
      taskName: holder.taskName,
      pipelineId: holder.pipelineId,
      ranker,
      tryTake: (name) =>
        Effect.suspend((): Effect.Effect<Option.Option<AcquireAlgorithm.Slot>, PoolNotFound | ServerDelayRefused> => {
          const pool = poolOf(name)
          if (pool === undefined) return Effect.fail(core.unknownPool(name ?? target))
          const now = core.now()
          const res = core.pick(pool, selector, ranker, now)
          if (res === undefined) {
            // nothing free: a wait the holder would not accept is refused now (issue 20 §2),
            // whichever algorithm asks (backoff polls instead of queueing)
            const refused = core.overlong(pool, selector, holder.maxServerDelayMs ?? defaultMaxServerDelayMs, now)
            if (refused !== undefined) return Effect.fail(refused)
            core.markWaiting(attempt, home)
            return Effect.succeed(Option.none())
          }
          core.take(attempt, res)
          return Effect.succeed(Option.some(res.slot))
        }),
      wait: (name) =>
        Effect.suspend((): Effect.Effect<AcquireAlgorithm.Slot, PoolNotFound | ResourceUnavailable | ServerDelayRefused> => {
          const pool = poolOf(name)
          if (pool === undefined) return Effect.fail(core.unknownPool(name ?? target))
          return core.park(pool, selector, ranker, attempt, home, holder)
        }),
      lastResourceId: (name) => poolOf(name)?.sticky.get(holder.pipelineId),
      with: (patch) =>
        core.ops(
          attempt,
          patch.pool ?? target,
          selector,
          holder,
          "ranker" in patch ? patch.ranker : ranker,
          home
        )
    }
    return ops
  }

  /**
   * Takes a free slot or queues FIFO for one; check and enqueue happen in one synchronous
   * step. Fails at once with `ResourceUnavailable` when every matching resource is dead or
   * revoked (see {@link Core.hopeless}), and with `ServerDelayRefused` when every usable one
   * is throttled longer than the holder accepts.
   *
   * Only a waiter that is really queued starts the deadlock watch: an acquire served at once
   * never arms a timer (issue 21: a task holding a lease that acquired a free slot of another
   * pool waited for the watch's timer, forked uninterruptible, to fire before going on).
   */
  park(
    pool: PoolState,
    selector: Selector,
    ranker: AcquireAlgorithm.Ranker | undefined,
    attempt: Attempt,
    home: PoolState,
    holder: Holder
  ): Effect.Effect<AcquireAlgorithm.Slot, ResourceUnavailable | ServerDelayRefused> {
    return Effect.suspend(() => {
      const held = this.heldPoolsFor(holder)
      if (held.length > 0) {
        // a holder of other leases is watched for deadlocks only when it really queues
        const res = this.pick(pool, selector, ranker, this.now())
        if (res !== undefined) {
          this.take(attempt, res)
          return Effect.succeed(res.slot)
        }
      }
      const maxDelayMs = holder.maxServerDelayMs ?? defaultMaxServerDelayMs
      const waiter: Waiter = {
        selector,
        ranker,
        maxDelayMs,
        refuse: undefined,
        attempt,
        resume: undefined,
        fail: undefined,
        prev: undefined,
        next: undefined,
        queued: false
      }
      const parked = Effect.async<AcquireAlgorithm.Slot, ResourceUnavailable | ServerDelayRefused>((resume) => {
        // check, refuse or enqueue in one synchronous step (a fiber can yield between two)
        const now = this.now()
        const res = this.pick(pool, selector, ranker, now)
        if (res !== undefined) {
          this.take(attempt, res)
          resume(Effect.succeed(res.slot))
          return
        }
        const hopeless = this.hopeless(pool, selector)
        if (hopeless !== undefined) {
          resume(Effect.fail(hopeless))
          return
        }
        const refused = this.overlong(pool, selector, maxDelayMs, now)
        if (refused !== undefined) {
          resume(Effect.fail(refused))
          return
        }
        this.markWaiting(attempt, home)
        waiter.resume = (slot) => resume(Effect.succeed(slot))
        waiter.fail = (error) => resume(Effect.fail(error))
        waiter.refuse = (error) => resume(Effect.fail(error))
        this.enqueue(pool, waiter)
        return Effect.sync(() => {
          // interrupted: leave the queue; a slot granted meanwhile is in `attempt.taken`
          this.detach(pool, waiter)
        })
      })
      return held.length === 0 ? parked : this.watchDeadlock(parked, pool, holder, held)
    })
  }

  /** The pools a holder already holds leases from. */
  heldPoolsFor(holder: Holder): ReadonlyArray<string> {
    return holder.heldPools?.() ?? this.heldPoolsOf(holder.owner)
  }

  /** The pools an owner holds unreleased leases from (what `heldPools` defaults to). */
  heldPoolsOf(owner: string | undefined): ReadonlyArray<string> {
    const set = owner === undefined ? undefined : this.owners.get(owner)
    if (set === undefined || set.size === 0) return []
    const pools = new Set<string>()
    for (const lease of set) pools.add(lease.pool)
    return Array.from(pools)
  }

  /**
   * Runs `wait` with a warning timer: when the holder already holds leases and the wait lasts
   * the smallest `deadlockWarn` of their pools, `acquire.suspected_deadlock` is emitted. The
   * timer is an interruptible fiber of the service's scope, stopped without waiting for it
   * (`interruptFork`) as soon as the wait ends in any way.
   */
  watchDeadlock<A, E>(
    wait: Effect.Effect<A, E>,
    pool: PoolState,
    holder: Holder,
    held: ReadonlyArray<string>
  ): Effect.Effect<A, E> {
    let warnMs = Infinity
    for (const name of held) {
      const p = this.pools.get(name)
      warnMs = Math.min(warnMs, p === undefined ? 5_000 : p.deadlockWarnMs)
    }
    if (!Number.isFinite(warnMs)) return wait
    const deadline = this.now() + warnMs
    const warn = Effect.flatMap(this.sleepUntil(deadline), () => {
      const fx: Effects = { events: undefined, timers: undefined }
      this.event(fx, pool, "acquire.suspected_deadlock", undefined, {
        taskName: holder.taskName,
        pipelineId: holder.pipelineId,
        heldPools: [...held],
        waitedMs: warnMs
      })
      return this.flush(fx)
    })
    return Effect.flatMap(this.timer(warn), (fiber) => Effect.ensuring(wait, Fiber.interruptFork(fiber)))
  }

  // --- acquiring -----------------------------------------------------------------------------

  resolveInput(
    input: AlgorithmInput | AcquireAlgorithm.AcquireAlgorithm
  ): Effect.Effect<AcquireAlgorithm.AcquireAlgorithm, AcquireError> {
    if (typeof input === "string") {
      const hit = this.resolved.get(input)
      if (hit !== undefined) return Effect.succeed(hit)
    } else if (AcquireAlgorithm.isAcquireAlgorithm(input)) {
      return Effect.succeed(input)
    }
    const r = AcquireAlgorithm.resolveAlgorithm(input, this.options.plugins)
    if (r._tag === "Left") return Effect.fail(r.left)
    if (typeof input === "string") this.resolved.set(input, r.right)
    return Effect.succeed(r.right)
  }

  /** Keeps `slot`, gives back every other slot of the attempt. */
  settle(attempt: Attempt, keep: Res | undefined): void {
    for (const res of attempt.taken) {
      if (res === keep) {
        keep = undefined
        continue
      }
      const pool = this.pools.get(res.slot.pool)
      if (pool !== undefined) this.untake(pool, res)
    }
    attempt.taken.length = 0
  }

  acquireCore(
    options: AcquireOptions | string | undefined,
    holder: Holder,
    raw: boolean
  ): Effect.Effect<LeaseImpl, AcquireError> {
    return Effect.suspend(() => {
      const opts: AcquireOptions = typeof options === "string" ? { pool: options } : options ?? {}
      let poolName = opts.pool ?? holder.defaultPool
      if (poolName === undefined && this.pools.size === 1) poolName = this.pools.keys().next().value
      const pool = poolName === undefined ? undefined : this.pools.get(poolName)
      if (pool === undefined) return Effect.fail(this.unknownPool(poolName ?? "(none given)"))
      const algoInput = opts.algorithm ?? holder.defaultAlgorithm
      const selector: Selector = opts
      const go = (algorithm: AcquireAlgorithm.AcquireAlgorithm): Effect.Effect<LeaseImpl, AcquireError> => {
        const started = this.now()
        if (algorithm.hints?.firstFreeInPoolOrder === true) {
          // fast path: a free resource whose client needs no building is leased synchronously
          const res = this.pick(pool, selector, undefined, started)
          if (res !== undefined && (res.resource.factory === undefined || res.client._tag === "ready")) {
            res.active++
            const client = res.client._tag === "ready" ? res.client.value : undefined
            return Effect.succeed(this.newLease(pool, res, client, holder, raw, started))
          }
        }
        const attempt: Attempt = { taken: [], waited: false }
        let phase: Effect.Effect<LeaseImpl, AcquireError> = algorithm.hints?.plainWait === true
          ? Effect.flatMap(
            this.park(pool, selector, undefined, attempt, pool, holder),
            (slot) => this.buildLease(attempt, slot, holder, raw, started, pool)
          )
          : Effect.flatMap(
            algorithm.acquire(this.ops(attempt, pool.name, selector, holder, undefined, pool)),
            (slot) => this.buildLease(attempt, slot, holder, raw, started, pool)
          )
        if (opts.timeout !== undefined) {
          const timeout = Duration.decode(opts.timeout)
          phase = Effect.timeoutFail(phase, {
            duration: timeout,
            onTimeout: () => new AcquireTimeout({ pool: pool.name, timeoutMs: Duration.toMillis(timeout) })
          })
        }
        return Effect.uninterruptible(
          Effect.onExit(Effect.interruptible(phase), (exit) =>
            Effect.sync(() => {
              if (attempt.waited) pool.waiting--
              if (Exit.isFailure(exit)) this.settle(attempt, undefined)
            }))
        )
      }
      return algoInput === undefined ? go(pool.algorithm) : Effect.flatMap(this.resolveInput(algoInput), go)
    })
  }

  buildLease(
    attempt: Attempt,
    slot: AcquireAlgorithm.Slot,
    holder: Holder,
    raw: boolean,
    started: number,
    home: PoolState
  ): Effect.Effect<LeaseImpl, AcquireError> {
    const pool = this.pools.get(slot.pool)
    const res = pool?.byId.get(slot.resourceId)
    if (pool === undefined || res === undefined || !attempt.taken.includes(res)) {
      return Effect.dieMessage(`algorithm returned a slot it did not take: ${slot.pool}/${slot.resourceId}`)
    }
    const finish = (client: unknown): Effect.Effect<LeaseImpl> =>
      Effect.sync(() => {
        this.settle(attempt, res)
        const now = this.now()
        if (attempt.waited) {
          const waited = now - started
          home.waitsTotal++
          home.waitMsSum += waited
          if (waited > home.waitMsMax) home.waitMsMax = waited
          if (home.recentWaits.length < RECENT_WAITS) home.recentWaits.push(waited)
          else home.recentWaits[home.recentNext] = waited
          home.recentNext = (home.recentNext + 1) % RECENT_WAITS
        }
        return this.newLease(pool, res, client, holder, raw, now)
      })
    const factory = res.resource.factory
    if (factory === undefined) return finish(undefined)
    return Effect.flatMap(this.client(pool, res, factory), finish)
  }

  /** Records a lease on a slot already counted in `res.active`. */
  newLease(pool: PoolState, res: Res, client: unknown, holder: Holder, raw: boolean, now: number): LeaseImpl {
    const id = `${pool.name}/${res.resource.id}#${++this.leaseSeq}`
    const lease = new LeaseImpl(id, pool.name, res, client, holder.taskName, now, holder.owner, raw, this)
    lease.breakerEpoch = res.breaker.opened
    lease.probe = res.breaker.state !== "closed"
    res.leases.add(id)
    pool.leasesTotal++
    if (holder.pipelineId !== "") {
      // Most recently used last; the oldest entry goes once the map is full, so that an
      // endless run does not keep one entry per pipeline it ever saw.
      const sticky = pool.sticky
      sticky.delete(holder.pipelineId)
      sticky.set(holder.pipelineId, res.resource.id)
      if (sticky.size > STICKY_MAX) sticky.delete(sticky.keys().next().value!)
    }
    if (holder.owner !== undefined) {
      let set = this.owners.get(holder.owner)
      if (set === undefined) this.owners.set(holder.owner, set = new Set())
      set.add(lease)
    }
    return lease
  }

  /** The resource's client: built once, shared; concurrent first users wait for one build. */
  client(
    pool: PoolState,
    res: Res,
    factory: Resource.ClientFactory<unknown>
  ): Effect.Effect<unknown, ResourceUnavailable> {
    return Effect.suspend((): Effect.Effect<unknown, ResourceUnavailable> => {
      const state = res.client
      switch (state._tag) {
        case "ready":
          return Effect.succeed(state.value)
        case "failed": {
          const fx: Effects = { events: undefined, timers: undefined }
          this.countFactoryFailure(fx, pool, res)
          return Effect.zipRight(
            this.flush(fx),
            Effect.fail(
              new ResourceUnavailable({
                pool: pool.name,
                resourceId: res.resource.id,
                message: `client factory of resource "${res.resource.id}" failed: ${messageOf(state.error)}`
              })
            )
          )
        }
        case "building": {
          const waiting = Effect.async<void>((resume) => {
            const cb = () => resume(Effect.void)
            state.waiters.push(cb)
            return Effect.sync(() => {
              const i = state.waiters.indexOf(cb)
              if (i >= 0) state.waiters.splice(i, 1)
            })
          })
          return Effect.flatMap(waiting, () => this.client(pool, res, factory))
        }
        case "none": {
          const building: ClientState = { _tag: "building", waiters: [] }
          res.client = building
          // the outcome is recorded even when the acquiring fiber is interrupted mid-build
          return Effect.uninterruptibleMask((restore) =>
            Effect.flatMap(Effect.exit(restore(Effect.suspend(() => factory(res.info)))), (exit) => {
              const fx: Effects = { events: undefined, timers: undefined }
              if (Exit.isSuccess(exit)) {
                res.client = { _tag: "ready", value: exit.value }
              } else if (Exit.isInterrupted(exit)) {
                res.client = clientNone
              } else {
                const failure = failureOf(exit.cause)
                res.client = { _tag: "failed", error: failure }
                this.event(fx, pool, "resource.factory_failed", res.resource.id, { error: jsonError(failure) })
              }
              for (const w of building.waiters) w()
              if (Exit.isInterrupted(exit)) return Effect.interrupt
              return Effect.zipRight(this.flush(fx), this.client(pool, res, factory))
            })
          )
        }
      }
    })
  }

  countFactoryFailure(fx: Effects, pool: PoolState, res: Res): void {
    pool.failedTotal++
    res.lastError = res.client._tag === "failed" ? messageOf(res.client.error) : res.lastError
    this.applyStep(fx, pool, res, Resource.onFailure(res.health, res.resource, this.now()))
  }

  // --- lease operations ----------------------------------------------------------------------

  release(lease: LeaseImpl): Effect.Effect<void> {
    return Effect.sync(() => {
      if (lease.released) return
      lease.released = true
      const res = lease.res
      res.leases.delete(lease.id)
      if (lease.owner !== undefined) {
        const set = this.owners.get(lease.owner)
        if (set !== undefined) {
          set.delete(lease)
          if (set.size === 0) this.owners.delete(lease.owner)
        }
      }
      const pool = this.pools.get(lease.pool)
      res.active--
      if (pool !== undefined && pool.head !== undefined) this.dispatch(pool)
    })
  }

  report(lease: LeaseImpl, report: LeaseReport): Effect.Effect<void> {
    return Effect.suspend(() => {
      const pool = this.pools.get(lease.pool)
      if (pool === undefined) return Effect.void
      const res = lease.res
      const fx: Effects = { events: undefined, timers: undefined }
      if (report.latencyMs !== undefined && Number.isFinite(report.latencyMs)) {
        res.latencyEmaMs = res.latencyEmaMs === undefined
          ? report.latencyMs
          : EMA_ALPHA * report.latencyMs + (1 - EMA_ALPHA) * res.latencyEmaMs
      }
      if (report.usage !== undefined) {
        for (const [k, v] of Object.entries(report.usage)) {
          if (typeof v !== "number" || !Number.isFinite(v)) continue
          res.usage[k] = (res.usage[k] ?? 0) + v
          pool.usage[k] = (pool.usage[k] ?? 0) + v
        }
      }
      const now = this.now()
      const errorClass = report.ok === false && report.error !== undefined ? classify(report.error) : undefined
      const breaker = pool.breaker
      // The breaker hears probes, and the leases granted since it last closed.
      const current = lease.breakerEpoch === res.breaker.opened
      if (breaker !== undefined && lease.probe && current && res.breaker.state === "open") {
        this.applyBreaker(fx, pool, res, Breaker.onOpenEnd(res.breaker, now))
      }
      const probeOf = (outcome: "ok" | "failed" | "other") => {
        if (breaker === undefined || !current) return
        if (lease.probe) {
          this.applyBreaker(fx, pool, res, Breaker.onProbe(res.breaker, breaker, outcome, now))
          lease.probe = false
        } else if (outcome !== "other") {
          this.applyBreaker(fx, pool, res, Breaker.onOutcome(res.breaker, breaker, outcome === "failed", now))
        }
      }
      if (errorClass === "rate_limit") {
        // Throttled by the server: the endpoint works, it asked us to slow down. Never a
        // health failure (it never degrades or kills the resource), never a breaker failure.
        // With a hint (Retry-After, reset headers, a body hint: the error's retry-after) the
        // resource is out of rotation until then, then one probe lease at a time until a
        // success; without one, one lease at a time at once (each pipeline backs off by its
        // retry policy).
        pool.failedTotal++
        res.lastError = messageOf(report.error)
        res.probing = true
        res.throttledTotal++
        const retryAfterMs = retryAfterOf(report.error, now)
        if (retryAfterMs !== undefined && retryAfterMs > 0) {
          const until = now + retryAfterMs
          if (until > res.throttledUntil) {
            res.throttledUntil = until
            if (until > pool.throttledUntilMax) pool.throttledUntilMax = until
            ;(fx.throttles ??= []).push({ pool, until })
          }
          this.event(fx, pool, "resource.throttled", res.resource.id, { retryAfterMs, until })
          // waiters that will not wait this long fail now instead of waiting silently
          if (pool.head !== undefined) this.refuseOverlong(pool)
        } else {
          this.event(fx, pool, "resource.throttled", res.resource.id, { retryAfterMs: null, until: null })
        }
        probeOf("other")
      } else if (report.ok === false && breaker !== undefined && errorClass !== undefined && Breaker.breakerClasses.has(errorClass)) {
        // A transient failure (5xx, connection, timeout): the breaker's business, not the
        // failure streak's; an endpoint whose probes keep failing `deadAfter` times in a row
        // is dead (it will not come back by itself).
        pool.failedTotal++
        res.lastError = messageOf(report.error)
        const wasProbe = lease.probe && current
        probeOf("failed")
        if (wasProbe && res.breaker.failedProbes >= res.resource.deadAfter && res.health.state !== "dead") {
          this.applyStep(fx, pool, res, {
            health: { state: "dead", consecutiveFailures: res.health.consecutiveFailures, cooldownUntil: 0 },
            transition: "dead"
          }, { error: jsonError(report.error), failedProbes: res.breaker.failedProbes })
          if (pool.head !== undefined) this.dispatch(pool)
        }
      } else if (report.ok === false) {
        pool.failedTotal++
        if (report.error !== undefined) res.lastError = messageOf(report.error)
        this.applyStep(
          fx,
          pool,
          res,
          Resource.onFailure(res.health, res.resource, this.now()),
          report.error === undefined ? {} : { error: jsonError(report.error) }
        )
        probeOf("other")
        // A resource that just died may leave waiters nothing to wait for: fail those now.
        if (res.health.state === "dead" && pool.head !== undefined) this.dispatch(pool)
      } else {
        pool.okTotal++
        const wasOpen = res.breaker.state !== "closed"
        if (report.ok === true) probeOf("ok")
        if (res.probing || (wasOpen && res.breaker.state === "closed")) {
          res.probing = false
          if (pool.head !== undefined) this.dispatch(pool)
        }
        const step = Resource.onSuccess(res.health)
        this.applyStep(fx, pool, res, step)
        if (step.transition === "revived" && pool.head !== undefined) this.dispatch(pool)
      }
      return this.flush(fx)
    })
  }

  degrade(lease: LeaseImpl, reason: string | undefined): Effect.Effect<void> {
    return Effect.suspend(() => {
      const pool = this.pools.get(lease.pool)
      if (pool === undefined) return Effect.void
      const fx: Effects = { events: undefined, timers: undefined }
      this.applyStep(
        fx,
        pool,
        lease.res,
        Resource.onDegrade(lease.res.health, lease.res.resource, this.now()),
        reason === undefined || reason === "" ? { explicit: true } : { explicit: true, reason }
      )
      return this.flush(fx)
    })
  }

  // --- registry operations -------------------------------------------------------------------

  addResource(
    pool: PoolState,
    input: Resource.Resource<any> | Resource.ResourceOptions<any>
  ): Effect.Effect<ResourceInfo, ConfigError> {
    return Effect.suspend(() => {
      const issues = this.insertResource(pool, input, `pools.${pool.name}.resources[${pool.list.length}]`)
      if (issues !== undefined) {
        return Effect.fail(
          new ConfigError({ message: issues.map((i) => `${i.path}: ${i.message}`).join("; "), issues: [...issues] })
        )
      }
      const res = pool.list[pool.list.length - 1]!
      const fx: Effects = { events: undefined, timers: undefined }
      this.event(fx, pool, "resource.added", res.resource.id, { spec: Resource.spec(res.resource) })
      if (pool.head !== undefined) this.dispatch(pool)
      return Effect.as(this.flush(fx), res.info)
    })
  }

  revokeResource(pool: PoolState, id: string, reason: string | undefined): Effect.Effect<boolean> {
    return Effect.suspend(() => {
      const res = pool.byId.get(id)
      if (res === undefined || res.health.state === "revoked") return Effect.succeed(false)
      const fx: Effects = { events: undefined, timers: undefined }
      this.applyStep(fx, pool, res, Resource.onRevoke(res.health))
      this.event(fx, pool, "resource.revoked", id, reason === undefined ? {} : { reason })
      if (pool.head !== undefined) this.dispatch(pool)
      return Effect.as(this.flush(fx), true)
    })
  }

  snapshotOf(pool: PoolState): ReadonlyArray<ResourceSnapshot> {
    const now = this.now()
    return pool.list.map((res) => {
      const state = Resource.effectiveState(res.health, now)
      return {
        id: res.resource.id,
        kind: res.resource.kind,
        state,
        active: res.active,
        capacity: res.resource.capacity,
        leases: [...res.leases],
        latencyEmaMs: res.latencyEmaMs,
        usage: { ...res.usage },
        consecutiveFailures: res.health.consecutiveFailures,
        cooldownUntil: state === "degraded" ? res.health.cooldownUntil : undefined,
        lastError: res.lastError,
        throttledUntil: res.throttledUntil > now ? res.throttledUntil : undefined,
        throttledTotal: res.throttledTotal,
        probing: res.probing,
        breaker: Breaker.effectiveState(res.breaker, now),
        breakerUntil: res.breaker.state === "open" && res.breaker.openUntil > now ? res.breaker.openUntil : undefined,
        breakerOpened: res.breaker.opened
      }
    })
  }

  statsOf(pool: PoolState, selector: Selector | undefined): PoolStats {
    const now = this.now()
    let active = 0, capacity = 0, ready = 0, degraded = 0, dead = 0, total = 0, revoked = 0, throttled = 0, breakerOpen = 0
    const usage: Record<string, number> = {}
    let holds: Array<PoolHold> | undefined
    const all = selector === undefined || Resource.isEmptySelector(selector)
    for (const res of pool.list) {
      if (!all && !Resource.matches(selector, res.info)) continue
      total++
      active += res.active
      if (res.throttledUntil > now) {
        throttled++
        ;(holds ??= []).push({ resourceId: res.resource.id, reason: "throttled", until: res.throttledUntil })
      } else if (res.breaker.state === "open" && res.breaker.openUntil > now) {
        ;(holds ??= []).push({ resourceId: res.resource.id, reason: "breaker_open", until: res.breaker.openUntil })
      }
      if (res.breaker.state !== "closed") breakerOpen++
      const state = Resource.effectiveState(res.health, now)
      if (state === "revoked") {
        revoked++
      } else {
        capacity += res.resource.capacity
        if (state === "ready") ready++
        else if (state === "degraded") degraded++
        else dead++
      }
      if (!all) for (const [k, v] of Object.entries(res.usage)) usage[k] = (usage[k] ?? 0) + v
    }
    const sorted = [...pool.recentWaits].sort((a, b) => a - b)
    return {
      pool: pool.name,
      active,
      capacity,
      utilization: capacity === 0 ? 0 : active / capacity,
      ready,
      degraded,
      dead,
      waiting: pool.waiting,
      queued: pool.queued,
      throttled,
      breakerOpen,
      leasesTotal: pool.leasesTotal,
      okTotal: pool.okTotal,
      failedTotal: pool.failedTotal,
      total,
      revoked,
      leakedTotal: pool.leakedTotal,
      waitsTotal: pool.waitsTotal,
      waitMsAvg: pool.waitsTotal === 0 ? 0 : pool.waitMsSum / pool.waitsTotal,
      waitMsP50: percentile(sorted, 0.5),
      waitMsP95: percentile(sorted, 0.95),
      waitMsMax: pool.waitMsMax,
      usage: all ? { ...pool.usage } : usage,
      holds: holds === undefined ? noHolds : holds.sort((a, b) => a.until - b.until)
    }
  }

  subscribeQueue(filter: EventFilter | undefined): Effect.Effect<Queue.Dequeue<ResourceEvent>, never, Scope.Scope> {
    const kinds = filter?.kinds === undefined ? undefined : new Set(filter.kinds)
    const pool = filter?.pool
    return Effect.acquireRelease(
      Effect.tap(Queue.sliding<ResourceEvent>(4096), (queue) =>
        Effect.sync(() => {
          this.subscribers.add({ pool, kinds, queue })
        })),
      (queue) =>
        Effect.zipRight(
          Effect.sync(() => {
            for (const s of this.subscribers) if (s.queue === queue) this.subscribers.delete(s)
          }),
          Queue.shutdown(queue)
        )
    )
  }

  handle(pool: PoolState): PoolHandle {
    const core = this
    return {
      name: pool.name,
      acquire: <Client>(options?: AcquireOptions, holder?: Holder) =>
        core.scoped<Client>({ ...options, pool: pool.name }, holder ?? anonymous),
      acquireRaw: <Client>(options?: AcquireOptions, holder?: Holder) =>
        core.acquireCore({ ...options, pool: pool.name }, holder ?? anonymous, true) as Effect.Effect<
          Lease<Client>,
          AcquireError
        >,
      add: (resource) => core.addResource(pool, resource),
      revoke: (id, reason) => core.revokeResource(pool, id, reason),
      resources: Effect.sync(() => pool.list.filter((r) => r.health.state !== "revoked").map((r) => r.info)),
      stats: (selector) => Effect.sync(() => core.statsOf(pool, selector)),
      snapshot: Effect.sync(() => core.snapshotOf(pool)),
      subscribe: (kinds) =>
        Stream.unwrapScoped(
          Effect.map(core.subscribeQueue({ pool: pool.name, kinds }), (q) => Stream.fromQueue(q))
        )
    }
  }

  scoped<Client>(
    options: AcquireOptions | string | undefined,
    holder: Holder
  ): Effect.Effect<Lease<Client>, AcquireError, Scope.Scope> {
    // The shape of `Effect.acquireRelease` (uninterruptible acquire whose wait is made
    // interruptible inside `acquireCore`, then a finalizer on the scope), registering the
    // finalizer with `Scope.addFinalizer` directly: the release reads no FiberRefs, so the
    // FiberRefs snapshot/diff that `acquireRelease` performs on every release is pure cost.
    return Effect.uninterruptible(
      Effect.flatMap(this.acquireCore(options, holder, false), (lease) =>
        Effect.flatMap(Effect.scope, (scope) => Effect.as(Scope.addFinalizer(scope, this.release(lease)), lease)))
    ) as Effect.Effect<Lease<Client>, AcquireError, Scope.Scope>
  }

  reclaimOwner(owner: string, countLeaks: boolean): Effect.Effect<ReadonlyArray<LeakedLease>> {
    return Effect.suspend(() => {
      const set = this.owners.get(owner)
      if (set === undefined) return Effect.succeed([])
      const leaked: Array<LeakedLease> = []
      const fx: Effects = { events: undefined, timers: undefined }
      const now = this.now()
      const releases: Array<Effect.Effect<void>> = []
      for (const lease of [...set]) {
        if (countLeaks && lease.raw) {
          const pool = this.pools.get(lease.pool)
          const item: LeakedLease = {
            leaseId: lease.id,
            pool: lease.pool,
            resourceId: lease.res.resource.id,
            taskName: lease.taskName,
            heldMs: now - lease.acquiredAt
          }
          leaked.push(item)
          if (pool !== undefined) {
            pool.leakedTotal++
            this.event(fx, pool, "lease.leaked", item.resourceId, {
              leaseId: item.leaseId,
              taskName: item.taskName,
              owner,
              heldMs: item.heldMs
            })
          }
        }
        releases.push(this.release(lease))
      }
      this.owners.delete(owner)
      return Effect.as(Effect.zipRight(Effect.all(releases, { discard: true }), this.flush(fx)), leaked)
    })
  }
}

/** The failure (or defect) of a cause, else the cause itself. */
const failureOf = (cause: Cause.Cause<unknown>): unknown =>
  Option.getOrElse(Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause)), () => cause)

// ---------------------------------------------------------------------------------------------
// Constructors and layers
// ---------------------------------------------------------------------------------------------

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
  Effect.gen(function*() {
    const clock = yield* Effect.clock
    const scope = yield* Effect.scope
    const core = new Core(clock, scope, options)
    const issues: Array<ConfigIssue> = []
    for (const p of pools) {
      const r = yield* Effect.either(core.createPool(p))
      if (r._tag === "Left") issues.push(...r.left.issues)
    }
    if (issues.length > 0) {
      return yield* new ConfigError({
        message: `invalid pools: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    }
    const poolOf = (name: string): Effect.Effect<PoolState, PoolNotFound> =>
      Effect.suspend(() => {
        const p = core.pools.get(name)
        return p === undefined ? Effect.fail(core.unknownPool(name)) : Effect.succeed(p)
      })
    const service: PoolsService = {
      acquire: <Client>(o?: AcquireOptions | string, holder?: Holder) => core.scoped<Client>(o, holder ?? anonymous),
      acquireRaw: <Client>(o?: AcquireOptions | string, holder?: Holder) =>
        core.acquireCore(o, holder ?? anonymous, true) as Effect.Effect<Lease<Client>, AcquireError>,
      heldBy: (owner) => Effect.sync(() => [...(core.owners.get(owner) ?? [])]),
      releaseAll: (owner) =>
        Effect.suspend(() => {
          const n = core.owners.get(owner)?.size ?? 0
          return Effect.as(core.reclaimOwner(owner, false), n)
        }),
      reclaim: (owner) => core.reclaimOwner(owner, true),
      get: (name) => Effect.map(poolOf(name), (p) => p.handle!),
      names: Effect.sync(() => [...core.pools.keys()]),
      addPool: (config) => Effect.map(core.createPool(config), (p) => p.handle!),
      add: (pool, resource) => Effect.flatMap(poolOf(pool), (p) => core.addResource(p, resource)),
      revoke: (pool, id, reason) => Effect.flatMap(poolOf(pool), (p) => core.revokeResource(p, id, reason)),
      snapshot: (pool) => Effect.map(poolOf(pool), (p) => core.snapshotOf(p)),
      stats: (pool, selector) => Effect.map(poolOf(pool), (p) => core.statsOf(p, selector)),
      subscribe: (filter) => Stream.unwrapScoped(Effect.map(core.subscribeQueue(filter), (q) => Stream.fromQueue(q))),
      events: (filter) => core.subscribeQueue(filter),
      listen: (callback) =>
        Effect.acquireRelease(
          Effect.sync(() => core.listeners.add(callback)),
          () => Effect.sync(() => core.listeners.delete(callback))
        ).pipe(Effect.asVoid)
    }
    return service
  })

/**
 * The {@link Pools} service as a scoped layer (see {@link makePools}).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (pools: Iterable<PoolConfig>, options: PoolsOptions = {}): Layer.Layer<Pools, ConfigError> =>
  Layer.scoped(Pools, makePools(pools, options))
