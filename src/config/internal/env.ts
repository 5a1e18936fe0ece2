/**
 * @internal
 *
 * `${VAR}` / `${VAR:-default}` expansion in every string value of a parsed experiment.
 */
import { Effect } from "effect"
import { ConfigError, type ConfigIssue } from "../../domain/Errors.js"
import * as Task from "../../domain/Task.js"

import { formatPath, isRecord } from "./issues.js"

// ---------------------------------------------------------------------------------------------
// Environment expansion
// ---------------------------------------------------------------------------------------------

export const envPattern = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g

/**
 * One string of the config that took a value from the environment: where it is (`path`, the
 * keys and indexes from the file's root) and its text as written (`template`, e.g.
 * `"${OPENAI_API_KEY}"`), which is what may be shown or stored in place of the value.
 */
export interface Interpolation {
  readonly path: ReadonlyArray<PropertyKey>
  readonly template: string
}

/**
 * Expands `${VAR}` and `${VAR:-default}` in every string value of a parsed config (keys are
 * left alone; `$$` is a literal `$`). `${VAR:-default}` uses the default when the variable is
 * unset or empty; an unset `${VAR}` becomes `""` and is listed in `unresolved` with the path
 * where it appeared; a `${VAR}` set to `""` expands to `""` and is listed in `empty` (when
 * given), which `--strict-env` refuses too. Only strings are expanded: a number field cannot
 * take `${N:-3}`. Task values and functions (in TypeScript definitions) are not entered.
 * Each string into which a non-empty variable's value went is listed in `interpolated` (when
 * given) with its path and its text as written: the value may be a secret whatever its key,
 * so the config compiler shows and stores the text, never the value (issue 18, F2).
 *
 * @since 0.1.0
 * @category environment
 */
export const expandEnv = (
  value: unknown,
  env: Readonly<Record<string, string | undefined>>,
  unresolved: Array<{ name: string; path: string }>,
  at: ReadonlyArray<PropertyKey> = [],
  empty?: Array<{ name: string; path: string }>,
  interpolated?: Array<Interpolation>
): unknown => {
  if (typeof value === "string") {
    let fromEnv = false
    const out = value.replace(envPattern, (whole, name: string | undefined, fallback: string | undefined) => {
      if (whole === "$$") return "$"
      const v = env[name!]
      if (v !== undefined && v !== "") fromEnv = true
      if (fallback !== undefined) return v === undefined || v === "" ? fallback : v
      if (v === undefined) {
        unresolved.push({ name: name!, path: formatPath(at) })
        return ""
      }
      if (v === "") empty?.push({ name: name!, path: formatPath(at) })
      return v
    })
    if (fromEnv) interpolated?.push({ path: at, template: value })
    return out
  }
  if (Array.isArray(value)) return value.map((v, i) => expandEnv(v, env, unresolved, [...at, i], empty, interpolated))
  if (isRecord(value) && !Task.isTask(value)) {
    const proto = Object.getPrototypeOf(value)
    if (proto !== Object.prototype && proto !== null) return value
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[k] = expandEnv(v, env, unresolved, [...at, k], empty, interpolated)
    return out
  }
  return value
}

/**
 * An inline key that named an unset variable (`apiKey: "${OPENAI_API_KEY}"`), made the same as
 * `apiKeyEnv: OPENAI_API_KEY` (tester18g F5): where the key stood (`path`, e.g.
 * `pools.llm.resources[0].options.apiKey`) and the variable.
 *
 * @internal
 */
export interface UnsetInlineKey {
  readonly path: string
  readonly name: string
}

/**
 * Rewrites, in an expanded config, each resource's inline key (`apiKey` / `api_key` under
 * `pools.NAME.resources[i].options`) that holds an unset `${VAR}` (listed in `unresolved` at
 * its path) as `apiKeyEnv: VAR`, when the resource names no `apiKeyEnv` of its own: an unset
 * key is then one case whichever way it is written (the specific warning, and every call to
 * the resource fails with the typed "the environment variable VAR is not set" without a request
 * sent; before, the key expanded to `""` and each call went out without one, a 401 each). The
 * rewritten places are taken out of `unresolved` (their generic "expands to \"\"" warning would
 * repeat the specific one) and returned. `expanded` is changed in place (a fresh value from
 * {@link expandEnv}).
 *
 * @param expanded the config after {@link expandEnv}
 * @param unresolved the unset references {@link expandEnv} listed (changed in place)
 * @returns the rewritten keys
 * @internal
 */
export const unsetInlineKeysAsEnv = (
  expanded: unknown,
  unresolved: Array<{ name: string; path: string }>
): ReadonlyArray<UnsetInlineKey> => {
  if (unresolved.length === 0 || !isRecord(expanded) || !isRecord(expanded["pools"])) return []
  const out: Array<UnsetInlineKey> = []
  for (const [pool, p] of Object.entries(expanded["pools"])) {
    if (!isRecord(p) || !Array.isArray(p["resources"])) continue
    p["resources"].forEach((r: unknown, j: number) => {
      if (!isRecord(r) || !isRecord(r["options"])) return
      const options = r["options"]
      if (options["apiKeyEnv"] !== undefined || options["api_key_env"] !== undefined) return
      for (const k of ["apiKey", "api_key"]) {
        const path = formatPath(["pools", pool, "resources", j, "options", k])
        const unset = unresolved.find((u) => u.path === path)
        if (unset === undefined || typeof options[k] !== "string") continue
        delete options[k]
        options["apiKeyEnv"] = unset.name
        for (let i = unresolved.length - 1; i >= 0; i--) if (unresolved[i]!.path === path) unresolved.splice(i, 1)
        out.push({ path, name: unset.name })
        return
      }
    })
  }
  return out
}

/** Values shorter than this are not hidden in messages (a `3` or a `gpt` is no secret, and hiding it would garble the text). */
const HIDDEN_MIN_LENGTH = 6

/**
 * A problem's message and suggestion with every value that went into the config from
 * `${VAR}` written back as `${VAR}`: a value may be a secret whatever field it went into
 * (`temperature: "${KEY}"` is refused with the text it got), and a problem is printed.
 *
 * @param interpolated the strings that took a value from the environment
 * @param env the environment they were read from
 * @returns a function from a problem to the problem as it may be shown
 * @internal
 */
export const hidingEnvValues = (
  interpolated: ReadonlyArray<Interpolation>,
  env: Readonly<Record<string, string | undefined>>
): (i: ConfigIssue) => ConfigIssue => {
  const values = new Map<string, string>()
  for (const { template } of interpolated) {
    for (const m of template.matchAll(envPattern)) {
      const name = m[1]
      const value = name === undefined ? undefined : env[name]
      if (name !== undefined && value !== undefined && value.length >= HIDDEN_MIN_LENGTH) values.set(value, `\${${name}}`)
    }
  }
  if (values.size === 0) return (i) => i
  const hide = hiderOf(values)
  return (i) => ({
    ...i,
    message: hide(i.message),
    ...(i.suggestion === undefined ? {} : { suggestion: hide(i.suggestion) })
  })
}

/** Replaces each value of `values` in a text by what it is shown as (longest first: a value that contains another is replaced whole). */
const hiderOf = (values: ReadonlyMap<string, string>): (text: string) => string => {
  const ordered = Array.from(values).sort((a, b) => b[0].length - a[0].length)
  return (text) => ordered.reduce((t, [value, shown]) => t.split(value).join(shown), text)
}

/**
 * A loader's `ConfigError` with every value that went into its file from `${VAR}` written back
 * as `${VAR}`, in its message and in each problem ({@link hidingEnvValues}): what the study
 * and suite loaders fail with, so their exit-2 messages never show an environment value.
 *
 * @param error the loader's error
 * @param interpolated the strings of the file that took a value from the environment
 * @param env the environment they were read from
 * @returns the error as it may be shown
 * @internal
 */
export const hidingEnvValuesIn = (
  error: ConfigError,
  interpolated: ReadonlyArray<Interpolation>,
  env: Readonly<Record<string, string | undefined>>
): ConfigError => {
  const hideIssue = hidingEnvValues(interpolated, env)
  return new ConfigError({ message: hideIssue({ path: "", message: error.message }).message, issues: error.issues.map(hideIssue) })
}

/**
 * Runs a loader with a list it fills with the strings that took a value from `${VAR}` (pass it
 * to `expandEnv`), and hides those values again in the `ConfigError` it fails with
 * ({@link hidingEnvValuesIn}).
 *
 * @param env the environment the loader expands from
 * @param body the loader, given the list
 * @returns the loader, failing with its problems as they may be shown
 * @internal
 */
export const hidingEnvValuesOf = <A, R>(
  env: Readonly<Record<string, string | undefined>>,
  body: (interpolated: Array<Interpolation>) => Effect.Effect<A, ConfigError, R>
): Effect.Effect<A, ConfigError, R> =>
  Effect.suspend(() => {
    const interpolated: Array<Interpolation> = []
    return Effect.mapError(body(interpolated), (e) => hidingEnvValuesIn(e, interpolated, env))
  })
