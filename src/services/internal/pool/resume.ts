/**
 * Pool state that survives a resume (issue 18 §4, `docs/pools.md` "Across a resume"): what of
 * a resource is saved (throttle window, probing, cooldown, open breaker, usage, the
 * algorithms' learned state) and the check a saved value passes before it is applied
 * (a known version, the same resource identity).
 *
 * @internal
 */
import { Either, Schema } from "effect"
import { maskSecrets } from "../../../domain/internal/resource.js"
import { canonicalJsonUnsafe, digest } from "../../../domain/Json.js"
import type * as Resource from "../../../domain/Resource.js"

/**
 * The saved state of one resource, version 1. Times are epoch ms (0: none).
 *
 * @internal
 */
export const SavedState = Schema.Struct({
  v: Schema.Literal(1),
  identity: Schema.String,
  savedAt: Schema.Number,
  throttledUntil: Schema.Number,
  probing: Schema.Boolean,
  cooldownUntil: Schema.Number,
  consecutiveFailures: Schema.Number,
  breakerOpenUntil: Schema.Number,
  /**
   * The breaker when it was not closed: `open` (until `breakerOpenUntil`) or `half_open` (one
   * probe at a time). Absent in states saved before it was kept: then only a running opening
   * (`breakerOpenUntil` later than the resume) was restored, and a half-open breaker was lost.
   */
  breakerState: Schema.optional(Schema.Literal("open", "half_open")),
  failedProbes: Schema.Number,
  usage: Schema.Record({ key: Schema.String, value: Schema.Number }),
  algorithms: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})

/** @internal */
export type SavedState = typeof SavedState.Type

const decode = Schema.decodeUnknownEither(SavedState)

/**
 * The identity of a resource, without its secrets: a digest of its kind and its options with
 * secret values masked (an endpoint's URL, model, quota...). Capacity, tags and health
 * parameters are not part of it (changing them keeps the learned state); a changed URL or
 * model is another resource as far as the saved state goes.
 *
 * @internal
 */
export const identityOf = (resource: Resource.Resource<unknown>): string =>
  digest(canonicalJsonUnsafe({ kind: resource.kind, options: maskSecrets(resource.options) }))

/**
 * Why a saved state was not applied: `invalid` (not a version-1 state), `identity_changed`
 * (saved for a resource with other options or kind), `unknown_resource` (no such resource in
 * the pool now).
 *
 * @internal
 */
export type IgnoredReason = "invalid" | "identity_changed" | "unknown_resource"

/**
 * Decodes a stored value and checks it against the resource it would be applied to.
 *
 * @internal
 */
export const check = (
  u: unknown,
  resource: Resource.Resource<unknown>
): Either.Either<SavedState, { readonly reason: IgnoredReason; readonly message: string }> => {
  const r = decode(u)
  if (Either.isLeft(r)) {
    const head = typeof u === "object" && u !== null && "v" in u && (u as { v: unknown }).v !== 1
      ? `unknown version ${JSON.stringify((u as { v: unknown }).v)}`
      : "not a saved pool state"
    return Either.left({ reason: "invalid", message: `${head}: ${r.left.message.split("\n").slice(0, 3).join(" ")}` })
  }
  if (r.right.identity !== identityOf(resource)) {
    return Either.left({
      reason: "identity_changed",
      message: "the resource's kind or options changed since the state was saved"
    })
  }
  return Either.right(r.right)
}
