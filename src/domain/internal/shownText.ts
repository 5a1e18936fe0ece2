/**
 * @internal
 *
 * What a task shows of its `parameters` and `config` where they differ from what it holds:
 * a value that came from `${VAR}` interpolation in a config file is shown (and stored, by
 * whatever stores a description) as its config text (`"${API_TOKEN}"`), never as the value,
 * which may be a secret whatever its key (issue 18). The task keeps the value itself: it runs
 * with it, and its identity digest (`Task.fingerprint`) is computed from it (a digest is not
 * the secret).
 */
import type { Json } from "../Json.js"

/** A task's shown forms (`undefined`: shown as held). */
export interface Shown {
  readonly parameters?: Json | undefined
  readonly config?: Json | undefined
}

// keyed by the task object (frozen: a WeakMap, not a property)
const shown = new WeakMap<object, Shown>()

/** Records the shown forms of `task`'s parameters and config; returns `task`. */
export const setShown = <T extends object>(task: T, forms: Shown): T => {
  if (forms.parameters !== undefined || forms.config !== undefined) shown.set(task, forms)
  return task
}

/** The shown forms recorded for `task` (see {@link setShown}). */
export const shownOf = (task: object): Shown | undefined => shown.get(task)

/**
 * `value` with every string equal to one of `texts`' keys replaced by its config text, at any
 * depth (plain objects and arrays are copied along the way); the same object when nothing was
 * replaced. Whole strings only: a short value never rewrites part of another string.
 *
 * @param texts the interpolated values, each mapped to its text as written
 */
export const replaceValues = (value: Json, texts: ReadonlyMap<string, string>): Json => {
  if (texts.size === 0) return value
  if (typeof value === "string") return texts.get(value) ?? value
  if (Array.isArray(value)) {
    let changed = false
    const out = value.map((v) => {
      const r = replaceValues(v, texts)
      if (r !== v) changed = true
      return r
    })
    return changed ? out : value
  }
  if (value !== null && typeof value === "object") {
    let changed = false
    const out: Record<string, Json> = {}
    for (const [k, v] of Object.entries(value)) {
      const r = replaceValues(v as Json, texts)
      if (r !== v) changed = true
      out[k] = r
    }
    return changed ? out : value
  }
  return value
}
