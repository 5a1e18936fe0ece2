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
 * Converts any value to strict JSON for display: non-finite numbers and `undefined` become
 * `null`, functions `"[function]"`, bigints their decimal string, `Date`s their ISO string,
 * other class instances `"[ClassName]"`, cycles `"[cycle]"`.
 */
export const toJsonSafe = (value: unknown): Json => jsonSafe(value, new Set(), false)

/**
 * `toJsonSafe` that also masks secrets, at any depth (see `Secrets`): the value of
 * every key for which `isSecretKey` holds becomes `"***"`; inside an object under a key
 * named `headers` (any case), every value except those of `Secrets.publicHeaders`; in every
 * string that is a URL, its userinfo and non-public query values (`Secrets.maskUrl`).
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
        if (Array.isArray(u)) return u.map((x) => jsonSafe(x, seen, mask, headers))
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
