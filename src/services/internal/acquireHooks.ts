/**
 * What a runner attempt asks of a scoped lease acquire, handed to the pools service on the
 * acquire's holder, so that a lease granted at once costs no Effect of the runner's own
 * (issue 19 §5).
 *
 * An attempt's `ctx.acquire()` used to wrap every acquire in the run's parking (a stop of the
 * run interrupts a wait for a lease at once: `Effect.withFiberRuntime`, a Set entry and an
 * `Effect.ensuring`), then map the lease to what the task sees (`Effect.flatMap`): about twelve
 * fiber steps per lease, around an acquire that, with a free slot, runs none (see
 * `holdNow.ts`). A pools service that says it applies these hooks ({@link AppliesHooksTypeId}:
 * the service of `pool/core.ts`, and an aliased view of it) reads them from the holder of a
 * scoped acquire ({@link hooksOf}) and:
 * - refuses to start the acquire (interrupts it) when {@link AcquireHooks.refused} says so,
 *   as the parking did;
 * - grants a free slot at once with no parking (nothing waits, so nothing can be parked);
 * - runs any wait through {@link AcquireHooks.park};
 * - gives the task {@link AcquireHooks.granted} of the lease, in either case.
 *
 * Any other pools service (a test stub, a wrapper) gets the holder without the hooks being
 * needed: the attempt then parks and maps as before. Raw acquires (`acquireRaw`) ignore them.
 *
 * @internal
 */
import type { Effect } from "effect"
import type { Lease } from "../../domain/Lease.js"
import type { Holder, PoolsService } from "../Pools.js"

/**
 * The key of a holder's {@link AcquireHooks}.
 *
 * @internal
 */
export const AcquireHooksTypeId: unique symbol = Symbol.for("assay/internal/AcquireHooks")

/**
 * The key under which a pools service says it applies {@link AcquireHooks} (value `true`).
 *
 * @internal
 */
export const AppliesHooksTypeId: unique symbol = Symbol.for("assay/internal/AppliesAcquireHooks")

/**
 * What a runner attempt asks of a scoped acquire (see the module docs).
 *
 * @internal
 */
export interface AcquireHooks {
  /** Whether a new acquire is refused now (the run is stopping): the acquire is interrupted. */
  readonly refused: () => boolean
  /** Runs a wait for a lease as parked (a stop of the run interrupts it at once). */
  readonly park: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** The lease the task sees, from the pool's lease (called once per granted lease). */
  readonly granted: <Client>(lease: Lease<Client>) => Lease<Client>
}

/**
 * A {@link Holder} that may carry {@link AcquireHooks}.
 *
 * @internal
 */
export interface HookedHolder extends Holder {
  readonly [AcquireHooksTypeId]?: AcquireHooks | undefined
}

/**
 * The hooks `holder` carries, if any.
 *
 * @internal
 */
export const hooksOf = (holder: Holder): AcquireHooks | undefined => (holder as HookedHolder)[AcquireHooksTypeId]

/**
 * Whether `pools` applies the {@link AcquireHooks} of a scoped acquire's holder.
 *
 * @internal
 */
export const appliesHooks = (pools: PoolsService): boolean =>
  (pools as { readonly [AppliesHooksTypeId]?: unknown })[AppliesHooksTypeId] === true

/**
 * `pools`, marked as applying {@link AcquireHooks} (the same object).
 *
 * @internal
 */
export const markAppliesHooks = (pools: PoolsService): PoolsService =>
  Object.defineProperty(pools, AppliesHooksTypeId, { value: true, enumerable: false })
