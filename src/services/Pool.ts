/**
 * A pool declaration: a name, the initial resources and options, as a plain value
 * ({@link PoolConfig}, built by {@link make}). The {@link Pools} service (`Pools.ts`) brings
 * declarations to life: the split of `@effect/cluster`'s `Runner.ts` (the value) and
 * `Runners.ts` (the service).
 *
 * For programs that declare their pools in one place, this module also re-exports the
 * service's layer and types, so that `Pool.layer([Pool.make("llm", [...])])` reads as one
 * sentence; `Pools.layer` is the same layer.
 *
 * ```ts
 * import { Pool, Resource } from "assay"
 *
 * const PoolsLive = Pool.layer([
 *   Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity: 4 })], { algorithm: "leastBusy" })
 * ])
 * ```
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import type * as Breaker from "../domain/Breaker.js"
import type { AlgorithmInput } from "../domain/Lease.js"
import type { EventCallback } from "../domain/PoolEvent.js"
import type * as Resource from "../domain/Resource.js"
import type * as AcquireAlgorithm from "./AcquireAlgorithm.js"
import type { Pools } from "./Pools.js"

export {
  /**
   * The pools service's tag (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category tags
   */
  Pools,
  /**
   * The holder used when none is given (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category constants
   */
  anonymous,
  /**
   * The longest server-requested wait an acquire accepts by default, in ms (see `Pools.ts`).
   *
   * @since 0.2.0
   * @category constants
   */
  defaultMaxServerDelayMs,
  /**
   * Builds the pools service from declarations, for the enclosing scope (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category constructors
   */
  makePools,
  /**
   * The pools service as a scoped layer, from declarations (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category layers
   */
  layer,
  /**
   * A pool event (see `domain/PoolEvent.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  ResourceEvent
} from "./Pools.js"

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
  EventFilter,
  /**
   * Who is acquiring (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  Holder,
  /**
   * A raw lease still held when its owner was reclaimed (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  LeakedLease,
  /**
   * One pool, seen through the service (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  PoolHandle,
  /**
   * A resource held out of rotation until a time (see `Pools.ts`).
   *
   * @since 0.2.0
   * @category models
   */
  PoolHold,
  /**
   * Options of the pools service (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  PoolsOptions,
  /**
   * What the pools service offers (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  PoolsService,
  /**
   * Aggregated figures of a pool (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  PoolStats,
  /**
   * One resource as the service's snapshot shows it (see `Pools.ts`).
   *
   * @since 0.1.0
   * @category models
   */
  ResourceSnapshot
} from "./Pools.js"

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
