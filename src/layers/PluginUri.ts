/**
 * Plugin URIs: how assay tells a plugin URI (`s3://bucket/runs.db`, `myblobs://prefix`) from a
 * path or a built-in word, and how it calls a plugin's factory for one without letting a
 * broken plugin crash the process.
 *
 * A spec is a plugin URI only when it starts with `scheme://`, the scheme being a letter and
 * at least one more of `A-Z a-z 0-9 + . -` (RFC 3986 §3.1). So `:memory:`, `runs/qa.db`,
 * `./x://y`, `C:\runs\qa.db` and `C://runs` (a one-letter scheme is a Windows drive) are never
 * URIs. Schemes are compared lowercased, as RFC 3986 §3.1 asks.
 *
 * @since 0.1.0
 */
import { Cause, Layer, Option } from "effect"
import { type ConfigError, PluginError, type StoreUnavailable } from "../domain/Errors.js"
import * as SpecUri from "../domain/SpecUri.js"

/**
 * What a store or backend spec is (see `domain/SpecUri.ts`, re-exported here).
 *
 * @since 0.1.0
 * @category models
 */
export type ParsedSpec = SpecUri.ParsedSpec

/**
 * Classifies a spec (see the module docs for what counts as a URI). Pure.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parse: (spec: string) => ParsedSpec = SpecUri.parse

/**
 * Whether a spec is written as a plugin URI (`scheme://...`, well-formed or not).
 *
 * @since 0.1.0
 * @category parsing
 */
export const isUri: (spec: string) => boolean = SpecUri.isUri

const passThrough = new Set(["StoreUnavailable", "ConfigError", "PluginError"])

const tagOf = (u: unknown): string | undefined =>
  typeof u === "object" && u !== null && typeof (u as { _tag?: unknown })["_tag"] === "string"
    ? (u as { _tag: string })._tag
    : undefined

const describe = (u: unknown): string => {
  if (u instanceof Error) return u.message.split("\n")[0]!
  if (typeof u === "object" && u !== null && typeof (u as { message?: unknown }).message === "string") {
    return (u as { message: string }).message
  }
  return String(u)
}

/**
 * Calls a plugin factory and guards what comes back, as a layer:
 * - the factory throws → `PluginError` (`<what> factory of plugin <plugin> for <scheme>://
 *   failed: <message>`);
 * - it returns something that is not a `Layer` → `PluginError`;
 * - the layer fails with `StoreUnavailable`, `ConfigError` or `PluginError` → that error, as is;
 * - the layer fails with anything else, or dies → `PluginError` with its message.
 * Interruption is kept as interruption. `what` names the thing built (`"store"`,
 * `"artifact backend"`).
 *
 * @since 0.1.0
 * @category plugins
 */
export const guardFactory = <I, R>(
  what: string,
  plugin: string,
  scheme: string,
  call: () => Layer.Layer<I, unknown, R>
): Layer.Layer<I, StoreUnavailable | ConfigError | PluginError, R> => {
  const fail = (message: string) =>
    Layer.fail(new PluginError({ plugin, message: `${what} factory of plugin ${plugin} for ${scheme}:// failed: ${message}` }))
  let built: unknown
  try {
    built = call()
  } catch (e) {
    return fail(describe(e))
  }
  if (!Layer.isLayer(built)) {
    return fail(`it returned ${built === null ? "null" : typeof built}, not a Layer`)
  }
  return Layer.catchAllCause(built as Layer.Layer<I, unknown, R>, (cause) => {
    if (Cause.isInterruptedOnly(cause)) return Layer.failCause(cause as Cause.Cause<never>)
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure)) {
      const e = failure.value
      const tag = tagOf(e)
      if (tag !== undefined && passThrough.has(tag)) return Layer.fail(e as StoreUnavailable | ConfigError | PluginError)
      return fail(describe(e))
    }
    const defect = Cause.dieOption(cause)
    return fail(Option.isSome(defect) ? describe(defect.value) : Cause.pretty(cause).split("\n")[0]!)
  })
}
