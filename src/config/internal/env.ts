/**
 * @internal
 *
 * `${VAR}` / `${VAR:-default}` expansion in every string value of a parsed experiment.
 */
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

