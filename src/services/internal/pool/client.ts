/**
 * The client of a resource (its `factory`'s value): built once, on the first lease that needs
 * it, and shared by every later lease. Concurrent first users wait for that one build on a
 * `Deferred` made per build, then look again (a build that was interrupted leaves no client:
 * one of them builds anew). A failed build is remembered, counted as a failure of the
 * resource and reported as `resource.factory_failed`; the cooldown that follows clears it
 * for a real retry (see `core.ts`).
 *
 * @internal
 */
import { Cause, Deferred, Effect, Exit, FiberId, Option } from "effect"
import { ResourceUnavailable } from "../../../domain/Errors.js"
import { messageOf } from "../../../domain/internal/errors.js"
import type { Json } from "../../../domain/Json.js"
import type * as Resource from "../../../domain/Resource.js"
import type { Effects, PoolState, Res } from "./state.js"
import { clientNone } from "./state.js"

/**
 * What the client build needs from the service.
 *
 * @internal
 */
export interface ClientEnv {
  /** Records an event of `pool` in `fx`. */
  readonly event: (fx: Effects, pool: PoolState, kind: string, resourceId: string, data: Record<string, Json>) => void
  /** Counts a stored factory failure against the resource's health. */
  readonly countFactoryFailure: (fx: Effects, pool: PoolState, res: Res) => void
  /** Runs the effects recorded in `fx`. */
  readonly flush: (fx: Effects) => Effect.Effect<void>
}

/** The failure (or defect) of a cause, else the cause itself. */
const failureOf = (cause: Cause.Cause<unknown>): unknown =>
  Option.getOrElse(Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause)), () => cause)

/**
 * The resource's client, building it if nobody has; fails with `ResourceUnavailable` when the
 * (stored) build failed.
 *
 * @internal
 */
export const client = (
  env: ClientEnv,
  pool: PoolState,
  res: Res,
  factory: Resource.ClientFactory<unknown>
): Effect.Effect<unknown, ResourceUnavailable> =>
  Effect.suspend((): Effect.Effect<unknown, ResourceUnavailable> => {
    const state = res.client
    switch (state._tag) {
      case "ready":
        return Effect.succeed(state.value)
      case "failed": {
        const fx: Effects = { events: undefined, timers: undefined }
        env.countFactoryFailure(fx, pool, res)
        return Effect.zipRight(
          env.flush(fx),
          Effect.fail(
            new ResourceUnavailable({
              pool: pool.name,
              resourceId: res.resource.id,
              message: `client factory of resource "${res.resource.id}" failed: ${messageOf(state.error)}`
            })
          )
        )
      }
      case "building":
        // interruptible: a waiter that gives up simply stops awaiting
        return Effect.flatMap(Deferred.await(state.done), () => client(env, pool, res, factory))
      case "none": {
        // made and recorded in this synchronous step, so that one build runs at a time
        const done = Deferred.unsafeMake<void>(FiberId.none)
        res.client = { _tag: "building", done }
        // the outcome is recorded even when the building fiber is interrupted mid-build
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
              env.event(fx, pool, "resource.factory_failed", res.resource.id, { error: messageOf(failure) })
            }
            Deferred.unsafeDone(done, Exit.void)
            if (Exit.isInterrupted(exit)) return Effect.interrupt
            return Effect.zipRight(env.flush(fx), client(env, pool, res, factory))
          })
        )
      }
    }
  })
