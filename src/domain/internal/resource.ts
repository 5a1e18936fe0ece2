/**
 * Internal helpers of `Resource` (issue 12 §8: not reachable from the package entry): secret
 * detection and masking, conversion to display-safe JSON, structural equality of selector values.
 */
import type { Json } from "../Json.js"
import * as Secrets from "../Secrets.js"

/**
 * Whether an option key names a secret; see `Secrets.isSecretName`: it contains `key`,
 * `token`, `secret`, `password`, `auth`, `cookie`, `credential`, `signature`, … (any case, not
 * followed by another letter: `api_key`, `apiKey`, `Authorization`, `accessToken`,
 * `client_secret`, `x-api-key`), and does not end in `env` (`apiKeyEnv` holds a variable's
 * name, which is shown). The letter rule keeps counters such as `quota.tokens` (and `keyId`,
 * `tokenizer`) readable.
 */
export const isSecretKey = (key: string): boolean => Secrets.isSecretName(key)

/**
 * The symbol-keyed property under which an object (or array) of resource options records, by
 * key (or index), the config text of a value that came from `${VAR}` interpolation (e.g.
 * `{ myNote: "${OPENAI_API_KEY}" }`). `maskSecrets` shows and stores that text in place of
 * the value, whatever the key: an environment value may be a secret under any name (issue 18,
 * F2). A symbol key is invisible to `Object.entries`, `JSON.stringify` and the tasks that read
 * the options; an object spread copies it.
 */
export const envReferences: unique symbol = Symbol.for("assay/envReferences")

/**
 * A copy of `value` (plain objects and arrays, copied along each path only) whose objects
 * record the config text of each interpolated value under {@link envReferences}; `refs` are
 * paths relative to `value` (`["headers", "X-Note"]`) with their text as written. A path
 * that does not lead to a value in `value` is ignored.
 */
export const withEnvReferences = (
  value: unknown,
  refs: ReadonlyArray<{ readonly path: ReadonlyArray<PropertyKey>; readonly template: string }>
): unknown => {
  if (refs.length === 0 || value === null || typeof value !== "object") return value
  const isArray = Array.isArray(value)
  if (!isArray && Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return value
  const copy: Record<PropertyKey, unknown> = isArray ? [...(value as Array<unknown>)] as never : { ...(value as object) }
  const own: Record<string, string> = { ...((value as Record<PropertyKey, unknown>)[envReferences] as Record<string, string> | undefined) }
  const deeper = new Map<string, Array<{ readonly path: ReadonlyArray<PropertyKey>; readonly template: string }>>()
  for (const r of refs) {
    if (r.path.length === 0) continue
    const k = String(r.path[0])
    if (!Object.prototype.hasOwnProperty.call(value, k)) continue
    if (r.path.length === 1) own[k] = r.template
    else deeper.set(k, [...(deeper.get(k) ?? []), { path: r.path.slice(1), template: r.template }])
  }
  for (const [k, rs] of deeper) copy[k] = withEnvReferences(copy[k], rs)
  if (Object.keys(own).length > 0) copy[envReferences] = own
  return copy
}

/**
 * Converts any value to strict JSON for display: non-finite numbers and `undefined` become
 * `null`, functions `"[function]"`, bigints their decimal string, `Date`s their ISO string,
 * other class instances `"[ClassName]"`, cycles `"[cycle]"`.
 */
export const toJsonSafe = (value: unknown): Json => jsonSafe(value, new Set(), false)

/**
 * `toJsonSafe` that also masks secrets, at any depth (see `Secrets`): the value of
 * every key for which `isSecretKey` holds becomes `"***"`; inside an object under a key
 * named `headers` (any case), every value except those of `Secrets.publicHeaders`; in every
 * string that is a URL, its userinfo and non-public query values (`Secrets.maskUrl`); a value
 * that came from the environment (recorded under {@link envReferences}) becomes its config
 * text (`"${OPENAI_API_KEY}"`), whatever its key.
 */
export const maskSecrets = (value: unknown): Json => jsonSafe(value, new Set(), true)

const jsonSafe = (u: unknown, seen: Set<object>, mask: boolean, headers = false): Json => {
  switch (typeof u) {
    case "string":
      return mask ? Secrets.maskUrl(u) : u
    case "boolean":
      return u
    case "number":
      return Number.isFinite(u) ? u : null
    case "bigint":
      return u.toString()
    case "function":
      return "[function]"
    case "undefined":
    case "symbol":
      return null
    case "object": {
      if (u === null) return null
      if (seen.has(u)) return "[cycle]"
      if (u instanceof Date) return Number.isNaN(u.getTime()) ? null : u.toISOString()
      seen.add(u)
      try {
        const refs = mask ? (u as { readonly [envReferences]?: Readonly<Record<string, string>> })[envReferences] : undefined
        if (Array.isArray(u)) {
          return u.map((x, i) => refs?.[String(i)] !== undefined ? jsonSafe(refs[String(i)], seen, mask) : jsonSafe(x, seen, mask, headers))
        }
        const proto = Object.getPrototypeOf(u)
        if (proto !== Object.prototype && proto !== null) {
          const name = proto?.constructor?.name
          return `[${typeof name === "string" && name !== "" ? name : "object"}]`
        }
        const out: Record<string, Json> = {}
        for (const [k, v] of Object.entries(u as Record<string, unknown>)) {
          if (v === undefined) continue
          out[k] = mask && (isSecretKey(k) || (headers && !Secrets.isPublicHeader(k)))
            ? Secrets.MASK
            : refs?.[k] !== undefined
            ? jsonSafe(refs[k], seen, mask)
            : jsonSafe(v, seen, mask, mask && k.toLowerCase() === "headers")
        }
        return out
      } finally {
        seen.delete(u)
      }
    }
  }
}

/**
 * Structural equality on JSON-like values (primitives by `Object.is` except `0 === -0`,
 * arrays element-wise, plain objects key-wise).
 */
export const deepEqual = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) {
    return typeof a === "number" && typeof b === "number" && Number.isNaN(a) && Number.isNaN(b)
  }
  if (Array.isArray(a) !== Array.isArray(b)) return false
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]))
  }
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  if (ka.length !== kb.length) return false
  return ka.every((k) =>
    Object.prototype.hasOwnProperty.call(b, k) &&
    deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])
  )
}
