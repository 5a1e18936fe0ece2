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
 * Expands `${VAR}` and `${VAR:-default}` in every string value of a parsed config (keys are
 * left alone; `$$` is a literal `$`). `${VAR:-default}` uses the default when the variable is
 * unset or empty; an unset `${VAR}` becomes `""` and is listed in `unresolved` with the path
 * where it appeared; a `${VAR}` set to `""` expands to `""` and is listed in `empty` (when
 * given), which `--strict-env` refuses too. Only strings are expanded: a number field cannot
 * take `${N:-3}`. Task values and functions (in TypeScript definitions) are not entered.
 *
 * @since 0.1.0
 * @category environment
 */
export const expandEnv = (
  value: unknown,
  env: Readonly<Record<string, string | undefined>>,
  unresolved: Array<{ name: string; path: string }>,
  at: ReadonlyArray<PropertyKey> = [],
  empty?: Array<{ name: string; path: string }>
): unknown => {
  if (typeof value === "string") {
    return value.replace(envPattern, (whole, name: string | undefined, fallback: string | undefined) => {
      if (whole === "$$") return "$"
      const v = env[name!]
      if (fallback !== undefined) return v === undefined || v === "" ? fallback : v
      if (v === undefined) {
        unresolved.push({ name: name!, path: formatPath(at) })
        return ""
      }
      if (v === "") empty?.push({ name: name!, path: formatPath(at) })
      return v
    })
  }
  if (Array.isArray(value)) return value.map((v, i) => expandEnv(v, env, unresolved, [...at, i], empty))
  if (isRecord(value) && !Task.isTask(value)) {
    const proto = Object.getPrototypeOf(value)
    if (proto !== Object.prototype && proto !== null) return value
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[k] = expandEnv(v, env, unresolved, [...at, k], empty)
    return out
  }
  return value
}

