/**
 * Canonical JSON and content digests: the ground of assay's identity (pipeline ids, spec and
 * seed digests, artifact digests, shard assignment).
 *
 * Canonical JSON is deterministic: object keys sorted by UTF-16 code units, no whitespace,
 * `-0` written as `0`, strings escaped as `JSON.stringify` does. It accepts strict JSON only:
 * `null`, booleans, finite numbers, strings, arrays and plain objects with string keys.
 * Object properties whose value is `undefined` are treated as absent (as `JSON.stringify`
 * does), so `{ a: 1, b: undefined }` and `{ a: 1 }` have one identity.
 *
 * @since 0.1.0
 */
import { Data, Either } from "effect"
import * as crypto from "node:crypto"

/**
 * A strict JSON value.
 *
 * @since 0.1.0
 * @category models
 */
export type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [key: string]: Json }

/**
 * A value is not strict JSON. `path` points at the offending value (`$.a[2].b`).
 *
 * @since 0.1.0
 * @category errors
 */
export class CanonicalJsonError extends Data.TaggedError("CanonicalJsonError")<{
  readonly path: string
  readonly reason: string
}> {
  override get message(): string {
    return `not strict JSON at ${this.path}: ${this.reason}`
  }
}

const describe = (u: unknown): string => {
  if (u === null) return "null"
  if (Array.isArray(u)) return "array"
  if (typeof u === "object") {
    const proto = Object.getPrototypeOf(u)
    const name = proto?.constructor?.name
    return typeof name === "string" && name !== "" ? `an instance of ${name}` : "an object with a foreign prototype"
  }
  return typeof u
}

const isPlainObject = (u: object): boolean => {
  const proto = Object.getPrototypeOf(u)
  return proto === Object.prototype || proto === null
}

const keyPath = (path: string, key: string): string =>
  /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`

/**
 * A rejection found while writing: the reason and the keys from the offending value up to the
 * root (innermost first). Paths are only built when something is rejected, so that a valid
 * value costs no string work beyond its own JSON.
 */
interface Rejection {
  readonly reason: string
  readonly keys: Array<string | number>
}

const reject = (reason: string): Rejection => ({ reason, keys: [] })

/**
 * Where {@link write} appends: `s`, the text so far; with `parts`, big strings that need no
 * escaping are not copied into `s` but listed (`parts` then `s` is the whole text, in order).
 */
interface Out {
  s: string
  readonly parts?: Array<string> | undefined
}

/** Strings at least this long (64 Ki UTF-16 units) are candidates for `parts`. */
const BIG_STRING = 64 * 1024

/**
 * A character `JSON.stringify` would escape (a quote, a backslash, a control character) or a
 * surrogate (lone ones are escaped; paired ones are not, but are left to `JSON.stringify`).
 */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/

/**
 * Appends the canonical JSON of `u` to `out.s`. `stack` holds the objects being written (a
 * cycle check; nesting is shallow, so a scan beats a Set's hashing). String concatenation
 * rather than an array of parts: V8 builds ropes, which is cheaper for the small values
 * tasks exchange.
 */
const write = (u: unknown, stack: Array<object>, out: Out): Rejection | undefined => {
  switch (typeof u) {
    case "string":
      if (out.parts !== undefined && u.length >= BIG_STRING && !NEEDS_ESCAPE.test(u)) {
        // its JSON is the string itself between quotes: keep a reference, copy nothing
        out.parts.push(out.s + "\"", u)
        out.s = "\""
      } else out.s += JSON.stringify(u)
      return undefined
    case "boolean":
      out.s += u ? "true" : "false"
      return undefined
    case "number":
      if (!Number.isFinite(u)) return reject(`non-finite number ${String(u)}`)
      out.s += Object.is(u, -0) ? "0" : JSON.stringify(u)
      return undefined
    case "undefined":
      return reject("undefined is not JSON")
    case "bigint":
    case "symbol":
    case "function":
      return reject(`${typeof u} is not JSON`)
    case "object": {
      if (u === null) {
        out.s += "null"
        return undefined
      }
      if (stack.includes(u)) return reject("cycle")
      if (Array.isArray(u)) {
        if (Object.getPrototypeOf(u) !== Array.prototype) return reject(`${describe(u)} is not a plain array`)
        stack.push(u)
        out.s += "["
        for (let i = 0; i < u.length; i++) {
          if (i > 0) out.s += ","
          if (!(i in u)) return { reason: "sparse array hole", keys: [i] }
          const err = write(u[i], stack, out)
          if (err) {
            err.keys.push(i)
            return err
          }
        }
        out.s += "]"
        stack.pop()
        return undefined
      }
      if (!isPlainObject(u)) return reject(`${describe(u)} is not a plain object`)
      if (Object.getOwnPropertySymbols(u).length > 0) return reject("symbol keys are not JSON")
      stack.push(u)
      const record = u as Record<string, unknown>
      const keys = sortKeys(Object.keys(record))
      out.s += "{"
      let first = true
      for (let k = 0; k < keys.length; k++) {
        const key = keys[k]!
        const value = record[key]
        if (value === undefined) continue
        if (first) first = false
        else out.s += ","
        out.s += JSON.stringify(key) + ":"
        const err = write(value, stack, out)
        if (err) {
          err.keys.push(key)
          return err
        }
      }
      out.s += "}"
      stack.pop()
      return undefined
    }
  }
}

/**
 * `keys` sorted in place by UTF-16 code units (the order of `Array.prototype.sort` without a
 * comparator); an object's few keys by insertion, which allocates nothing.
 */
const sortKeys = (keys: Array<string>): Array<string> => {
  if (keys.length > 16) return keys.sort()
  for (let i = 1; i < keys.length; i++) {
    const k = keys[i]!
    let j = i - 1
    while (j >= 0 && keys[j]! > k) {
      keys[j + 1] = keys[j]!
      j--
    }
    keys[j + 1] = k
  }
  return keys
}

/**
 * Whether `u` is strict JSON whose canonical form is exactly `JSON.stringify(u)`: every object
 * plain, its keys already in sorted order (no integer-like key out of it), no `undefined`
 * value, no symbol key; arrays plain and dense; numbers finite (`JSON.stringify(-0)` is `0`
 * already); no string of {@link BIG_STRING} units or more (those take {@link write}'s path
 * without a copy); at most 32 levels deep (deeper values, cycles among them, take
 * {@link write}, which rejects cycles). Then the native serializer writes it in one flat
 * string: cheaper than {@link write}'s concatenation, which builds a rope per value (half of
 * the allocations of a task output's encoding in bench/runner.ts). Anything else answers
 * `false`, and {@link write} decides, with its error paths.
 */
const isNativeCanonical = (u: unknown, depth: number): boolean => {
  switch (typeof u) {
    case "string":
      return u.length < BIG_STRING
    case "boolean":
      return true
    case "number":
      return Number.isFinite(u)
    case "object": {
      if (u === null) return true
      if (depth > 32) return false
      if (Array.isArray(u)) {
        if (Object.getPrototypeOf(u) !== Array.prototype) return false
        for (let i = 0; i < u.length; i++) {
          if (!(i in u) || !isNativeCanonical(u[i], depth + 1)) return false
        }
        return true
      }
      if (!isPlainObject(u)) return false
      const record = u as Record<string, unknown>
      let previous: string | undefined
      // `for…in` lists what `Object.keys` does (own enumerable string keys, integer-like ones
      // first) plus inherited enumerable ones, which only make the check stricter
      for (const key in record) {
        if (previous !== undefined && !(previous < key)) return false
        previous = key
        const value = record[key]
        if (value === undefined || !isNativeCanonical(value, depth + 1)) return false
      }
      return Object.getOwnPropertySymbols(u).length === 0
    }
    default:
      return false
  }
}

const pathOf = (keys: ReadonlyArray<string | number>): string => {
  let path = "$"
  for (let i = keys.length - 1; i >= 0; i--) {
    const k = keys[i]!
    path = typeof k === "number" ? `${path}[${k}]` : keyPath(path, k)
  }
  return path
}

/**
 * Encodes a value as canonical JSON, or fails with {@link CanonicalJsonError} naming the path
 * of the first value that is not strict JSON (functions, class instances such as `Date`,
 * `Map`, `Set`, non-finite numbers, `bigint`, cycles, symbol keys, sparse arrays).
 *
 * @since 0.1.0
 * @category encoding
 */
export const canonicalJson = (value: unknown): Either.Either<string, CanonicalJsonError> => {
  if (isNativeCanonical(value, 0)) return Either.right(JSON.stringify(value))
  const out = { s: "" }
  const err = write(value, [], out)
  return err ? Either.left(new CanonicalJsonError({ path: pathOf(err.keys), reason: err.reason })) : Either.right(out.s)
}

/**
 * {@link canonicalJson} as UTF-8 bytes, without the intermediate copy of big strings: the same
 * bytes as `Buffer.from(canonicalJson(value), "utf8")`, but a string of 64 Ki characters or more
 * that needs no escaping is written from the value itself into the one output buffer (a 4 MB
 * string output cost a 4 MB JSON string, then the bytes; now only the bytes). Fails like
 * {@link canonicalJson}.
 *
 * @since 0.1.0
 * @category encoding
 */
export const canonicalJsonBytes = (value: unknown): Either.Either<Uint8Array, CanonicalJsonError> => {
  if (isNativeCanonical(value, 0)) {
    const b = Buffer.from(JSON.stringify(value), "utf8")
    return Either.right(new Uint8Array(b.buffer, b.byteOffset, b.byteLength))
  }
  const out: Out = { s: "", parts: [] }
  const err = write(value, [], out)
  if (err) return Either.left(new CanonicalJsonError({ path: pathOf(err.keys), reason: err.reason }))
  const parts = out.parts!
  if (parts.length === 0) {
    const b = Buffer.from(out.s, "utf8")
    return Either.right(new Uint8Array(b.buffer, b.byteOffset, b.byteLength))
  }
  parts.push(out.s)
  let size = 0
  for (const p of parts) size += Buffer.byteLength(p, "utf8")
  const bytes = Buffer.allocUnsafeSlow(size)
  let at = 0
  for (const p of parts) at += bytes.write(p, at, "utf8")
  return Either.right(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength))
}

/**
 * {@link canonicalJson} that throws the {@link CanonicalJsonError}; for values already known
 * to be strict JSON.
 *
 * @since 0.1.0
 * @category encoding
 */
export const canonicalJsonUnsafe = (value: unknown): string =>
  Either.getOrThrowWith(canonicalJson(value), (e) => e)

/**
 * Whether a value is strict JSON (see {@link canonicalJson}).
 *
 * @since 0.1.0
 * @category guards
 */
export const isStrictJson = (value: unknown): value is Json => Either.isRight(canonicalJson(value))

const encoder = new TextEncoder()

// node:crypto's one-shot `hash` (Node ≥ 20.12) is ~3× cheaper than createHash().update().digest().
const oneShot: ((algorithm: string, data: string | Uint8Array, encoding: "hex") => string) | undefined =
  (crypto as unknown as { hash?: (a: string, d: string | Uint8Array, e: "hex") => string }).hash

const hashHex = (data: Uint8Array | string): string =>
  // a string is hashed as its UTF-8 bytes either way (the one-shot hash encodes it natively)
  oneShot !== undefined
    ? oneShot("blake2b512", data, "hex")
    : crypto.createHash("blake2b512").update(typeof data === "string" ? encoder.encode(data) : data).digest("hex")

/**
 * The content digest used everywhere in assay: BLAKE2b-512 (node:crypto `blake2b512`) of the
 * bytes, truncated to its first 16 bytes and written as 32 lowercase hex characters.
 * Strings are digested as their UTF-8 bytes.
 *
 * @since 0.1.0
 * @category digests
 */
export const digest = (data: Uint8Array | string): string => hashHex(data).slice(0, 32)

/**
 * The full 128-hex-character BLAKE2b-512 digest, for places that want the whole hash
 * (shard assignment).
 *
 * @since 0.1.0
 * @category digests
 */
export const digestFull = (data: Uint8Array | string): string => hashHex(data)

/**
 * The digest of a value's canonical JSON, or a {@link CanonicalJsonError}.
 *
 * @since 0.1.0
 * @category digests
 */
export const digestJson = (value: unknown): Either.Either<string, CanonicalJsonError> =>
  Either.map(canonicalJson(value), digest)
