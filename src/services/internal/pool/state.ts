/**
 * The mutable state of the pools service: one {@link PoolState} per pool, one {@link Res} per
 * resource. Plain structures changed only inside synchronous `Effect.sync` blocks (JavaScript
 * runs one fiber step at a time, so each block is atomic: in effect one lock around the whole
 * state, without STM and without allocation beyond the lease on the uncontended path).
 *
 * @internal
 */
import type { Deferred } from "effect"
import type * as Breaker from "../../../domain/Breaker.js"
import type { EventCallback, ResourceEvent } from "../../../domain/PoolEvent.js"
import type { ResourceInfo } from "../../../domain/Lease.js"
import type * as Resource from "../../../domain/Resource.js"
import type * as AcquireAlgorithm from "../../AcquireAlgorithm.js"
import type { Holder, PoolHandle } from "../../Pools.js"
import type { LeaseImpl } from "./core.js"
import type { WaitStats } from "./stats.js"
import type { WaiterQueue } from "./waiters.js"

/**
 * The longest server-requested wait an acquire accepts by default, in milliseconds
 * (10 minutes); see `Pools.defaultMaxServerDelayMs`.
 *
 * @internal
 */
export const defaultMaxServerDelayMs = 600_000

/**
 * The holder used when none is given; see `Pools.anonymous`.
 *
 * @internal
 */
export const anonymous: Holder = { taskName: "anonymous", pipelineId: "" }

/**
 * A resource's shared client: not built, being built (those who need it await `done`, then
 * look again), built, or failed (the failure stays until the cooldown ends).
 *
 * @internal
 */
export type ClientState =
  | { readonly _tag: "none" }
  | { readonly _tag: "building"; readonly done: Deferred.Deferred<void> }
  | { readonly _tag: "ready"; readonly value: unknown }
  | { readonly _tag: "failed"; readonly error: unknown }

/** @internal */
export const clientNone: ClientState = { _tag: "none" }

/**
 * One resource of a pool.
 *
 * @internal
 */
export interface Res {
  resource: Resource.Resource<unknown>
  readonly info: ResourceInfo
  readonly index: number
  health: Resource.Health
  active: number
  /** The resource's unreleased leases, in the order granted. */
  readonly leases: Set<{ readonly id: string }>
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
  /**
   * A ceiling below the declared capacity (leases at once), set from outside the core: the
   * global pools' block leases (`pool/pg/pools.ts`) hold this many slot rows of the resource,
   * and the local core grants no more. `undefined`: the declared capacity alone.
   */
  ceiling?: number | undefined
}

/**
 * The slots one acquire has taken so far; all but the one it keeps are given back.
 *
 * @internal
 */
export interface Attempt {
  readonly taken: Array<Res>
  waited: boolean
  /** The lease built from the kept slot (given back if the acquire ends in failure anyway). */
  lease: LeaseImpl | undefined
  /**
   * When the acquire's own timeout ends (epoch ms, `Clock`), when its wait is bounded by a
   * deadline of the parked waiter ({@link Core.park}) instead of a timeout around it.
   */
  deadline?: number | undefined
  /** The acquire's timeout (ms), what its `AcquireTimeout` carries; with `deadline`. */
  timeoutMs?: number | undefined
}

/**
 * One pool.
 *
 * @internal
 */
export interface PoolState {
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
  /** Queued acquires, oldest first. */
  readonly waiters: WaiterQueue<Attempt>
  /** Acquires currently waiting (queued or backing off). */
  waiting: number
  leasesTotal: number
  okTotal: number
  failedTotal: number
  leakedTotal: number
  readonly waits: WaitStats
  readonly usage: Record<string, number>
  readonly sticky: StickyMemory
  /**
   * The resource whose transient failure (classes `upstream`, `connection`, `timeout`) a
   * holder's next acquire from this pool avoids while another resource can serve, keyed by
   * {@link avoidKey} (bounded like `sticky`; read once: `Core.avoiding`).
   */
  readonly avoid: StickyMemory
  handle: PoolHandle | undefined
  /**
   * Algorithms used on this pool that hear its lease reports (`AcquireAlgorithm.observe`),
   * registered on first use; usually empty, so a report costs nothing more.
   */
  readonly observers: Array<AcquireAlgorithm.AcquireAlgorithm>
}

/**
 * The key of a holder's task in a pool's `avoid` memory: its pipeline and task name (every
 * attempt of one task of one pipeline shares it).
 *
 * @internal
 */
export const avoidKey = (pipelineId: string, taskName: string): string => `${pipelineId}\u0000${taskName}`

/**
 * How many pipelines' last resource a pool remembers at most for `sticky`: far more than can
 * be in flight at once, bounded for endless runs (see {@link StickyMemory}).
 *
 * @internal
 */
export const STICKY_MAX = 16_384

/**
 * The resource each pipeline leased last from a pool, for `sticky`: the `STICKY_MAX / 2`
 * pipelines that leased most recently are always remembered, older ones may be forgotten,
 * never more than `STICKY_MAX` are kept.
 *
 * Two generations of plain maps: writes go to the young one; when it holds `STICKY_MAX / 2`
 * pipelines it becomes the old one and the previous old one is dropped. Every operation is
 * O(1). (A single `Map` kept in recency order, evicting its first key, made every lease scan
 * the deleted entries V8 leaves at the front of the table until it compacts: 5 µs per lease
 * once a run had leased for more than 16,384 pipelines, measured with bench/runner.ts.)
 *
 * @internal
 */
export class StickyMemory {
  #young = new Map<string, string>()
  #old = new Map<string, string>()
  readonly #half: number
  constructor(max: number = STICKY_MAX) {
    this.#half = Math.max(1, Math.floor(max / 2))
  }
  /** The resource id `pipelineId` leased last, if remembered. */
  get(pipelineId: string): string | undefined {
    return this.#young.get(pipelineId) ?? this.#old.get(pipelineId)
  }
  /** Remembers that `pipelineId` leased `resourceId` last. */
  set(pipelineId: string, resourceId: string): void {
    this.#young.set(pipelineId, resourceId)
    if (this.#young.size >= this.#half) {
      this.#old = this.#young
      this.#young = new Map()
    }
  }
  /** Whether nothing is remembered (an O(1) check before building a key). */
  get empty(): boolean {
    return this.#young.size === 0 && this.#old.size === 0
  }
  /** The resource id remembered for `key`, forgotten as it is read. */
  take(key: string): string | undefined {
    const young = this.#young.get(key)
    if (young !== undefined) {
      this.#young.delete(key)
      this.#old.delete(key)
      return young
    }
    const old = this.#old.get(key)
    if (old !== undefined) this.#old.delete(key)
    return old
  }
}

/**
 * Effects produced by a state change, run after the synchronous block.
 *
 * @internal
 */
export interface Effects {
  events: Array<ResourceEvent> | undefined
  timers: Array<{ readonly pool: PoolState; readonly res: Res; readonly gen: number; readonly until: number }> | undefined
  /** Throttle windows to end (wake the waiters only this resource can serve). */
  throttles?: Array<{ readonly pool: PoolState; readonly until: number }> | undefined
  /** Open breakers to turn half-open at `until`. */
  breakers?: Array<{ readonly pool: PoolState; readonly res: Res; readonly opened: number; readonly until: number }> | undefined
}
