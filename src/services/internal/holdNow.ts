/**
 * A synchronous way to give a `Scope` a finalizer, for the runner's attempt scope and the pool
 * (issue 19 §5).
 *
 * Taking a lease inside an attempt used to cost, beyond the lease itself, an uninterruptible
 * region, a context lookup of the `Scope`, and the Scope protocol's `addFinalizer` Effect: about
 * fifteen fiber steps per lease. A Scope that can hold a synchronous finalizer at once for the
 * fiber asking (the runner's `AttemptScope`, while its attempt has no finalizer yet) says so
 * through {@link HoldNowTypeId}; the pool then grants a free slot and registers its release in
 * the same synchronous step (nothing can interrupt between the two), with no Effect at all.
 * Any other Scope, or an attempt that already holds a finalizer, takes the Scope protocol as
 * before.
 *
 * @internal
 */
import { Context, Effect, type Fiber, Scope } from "effect"

/**
 * Where a Scope that can take a synchronous finalizer at once keeps that capability.
 *
 * @internal
 */
export const HoldNowTypeId: unique symbol = Symbol.for("assay/internal/HoldNow")

/**
 * What holds one synchronous finalizer: `hold(release)` must succeed (it is asked right after
 * {@link HoldNow} returned it, with nothing run in between); `release` runs once, when the scope
 * closes, whatever its exit (success, failure, interruption).
 *
 * @internal
 */
export interface SyncHolder {
  readonly hold: (release: () => void) => void
}

/**
 * A Scope that may hold a synchronous finalizer for the fiber asking: its holder now, or
 * `undefined` (then add the finalizer through the Scope protocol).
 *
 * @internal
 */
export interface HoldNow {
  readonly [HoldNowTypeId]: (fiber: Fiber.RuntimeFiber<unknown, unknown>) => SyncHolder | undefined
}

const noScope = (): undefined => undefined

/**
 * The holder of the Scope in `fiber`'s context, when that Scope can hold a synchronous
 * finalizer now; `undefined` otherwise (no Scope, or one without the capability).
 *
 * @internal
 */
export const holderNow = (fiber: Fiber.RuntimeFiber<any, any>): SyncHolder | undefined => {
  const scope = Context.getOrElse(fiber.currentContext as Context.Context<Scope.Scope>, Scope.Scope, noScope)
  return scope !== undefined && HoldNowTypeId in scope
    ? (scope as unknown as HoldNow)[HoldNowTypeId](fiber)
    : undefined
}

/**
 * Where {@link withHolderNow} keeps its body as a function of the holder, on the function its
 * `WithRuntime` step calls (see the runner's `evalNow.ts`; on the function, not on the Effect,
 * so that the Effect keeps the shape of every other).
 *
 * @internal
 */
export const WithHolderTypeId: unique symbol = Symbol.for("assay/internal/WithHolder")

/**
 * `Effect.withFiberRuntime((fiber) => f(holderNow(fiber)))`, marked so that the runner's
 * evaluation without a fiber (`evalNow.ts`) can run `f` with the holder it knows the fiber
 * would have found ({@link holderNow}). `f` must read nothing else of the fiber.
 *
 * @param f the step, from the holder of the fiber's Scope (`undefined`: none holds now)
 * @returns the step as an Effect (run on a fiber, it reads the holder from that fiber)
 * @internal
 */
export const withHolderNow = <A, E, R>(f: (holder: SyncHolder | undefined) => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  const step = (fiber: Fiber.RuntimeFiber<A, E>) => f(holderNow(fiber))
  ;(step as unknown as { [WithHolderTypeId]: typeof f })[WithHolderTypeId] = f
  return Effect.withFiberRuntime<A, E, R>(step)
}
