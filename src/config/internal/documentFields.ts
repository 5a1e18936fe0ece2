/**
 * The leaf fields of an experiment document, as a study's protocol description stores them
 * with each version frozen since 0.16.0 (tester16g F11): a map from each leaf's path
 * (`pipeline.tasks[0].options.temperature`) to its canonical value, so that a later version
 * can name the fields that changed instead of two digests. Nothing secret is kept:
 *
 * - a value under a secret-looking key (`Secrets.isSecretName`: `apiKey`, `token`,
 *   `password`, `Authorization`, …) or under `headers` (every header but the public ones,
 *   `Secrets.isPublicHeader`), and a URL with a user, a password or a non-public query value
 *   (`Secrets.secretsOfUrl`), is stored as the marker `{ secret: "not stored" }` only: not
 *   even a digest, since a short digest of a weak password can be guessed offline (so a
 *   changed secret alone is not named: the digests say that something changed); a `${VAR}`
 *   reference under such a key is kept as written;
 * - a `${VAR}` reference is stored as written (the document is read before the environment is
 *   substituted), never its value;
 * - a text longer than {@link MAX_TEXT} characters or with a line break (a prompt) is stored as
 *   `{ digest, chars }`, an array of more than {@link MAX_ITEMS} items as `{ digest, items }`;
 * - an empty object or array is a leaf of its own (`{}`, `[]`).
 *
 * @since 0.16.0
 */
import { canonicalJsonUnsafe, digest, type Json } from "../../domain/Json.js"
import * as Secrets from "../../domain/Secrets.js"

/** Texts longer than this (characters) are stored as a digest and a length. */
export const MAX_TEXT = 60

/** Arrays longer than this are stored as one digest and a count. */
export const MAX_ITEMS = 20

/** What a secret value is stored as: a marker, never the value nor a digest of it. */
const SECRET_MARK: Json = { secret: "not stored" }

/** A whole-value environment reference, `${NAME}`, as written before substitution. */
const ENV_REFERENCE = /^\$\{[A-Za-z_][A-Za-z0-9_]*\}$/

const short = (v: Json): string => digest(canonicalJsonUnsafe(v)).slice(0, 12)

const isObject = (v: Json): v is { readonly [k: string]: Json } => typeof v === "object" && v !== null && !Array.isArray(v)

/** A path segment for a key: `.name`, or `["odd key"]` when it is not a plain name. */
const segment = (path: string, key: string): string =>
  /^[A-Za-z_$][\w$-]*$/.test(key) ? (path === "" ? key : `${path}.${key}`) : `${path}[${JSON.stringify(key)}]`

/**
 * The leaf fields of a JSON document (see the module header), in document order.
 *
 * @param document the experiment document (run section and pool capacities already left out)
 * @returns path -> stored value
 * @since 0.16.0
 */
export const fieldsOf = (document: Json): Record<string, Json> => {
  const out: Record<string, Json> = {}
  const walk = (v: Json, path: string, secret: boolean, inHeaders: boolean): void => {
    if (secret) {
      // a reference (`${OPENAI_API_KEY}`) is not the secret: kept as written; anything else is
      // a marker only, not even a digest (a short digest of a weak password can be guessed)
      out[path] = typeof v === "string" && ENV_REFERENCE.test(v) ? v : SECRET_MARK
      return
    }
    if (Array.isArray(v)) {
      if (v.length === 0) out[path] = []
      else if (v.length > MAX_ITEMS) out[path] = { digest: short(v), items: v.length }
      else v.forEach((x, i) => walk(x, `${path}[${i}]`, false, false))
      return
    }
    if (isObject(v)) {
      const keys = Object.keys(v)
      if (keys.length === 0) out[path] = {}
      for (const k of keys) {
        const hidden = Secrets.isSecretName(k) || (inHeaders && !Secrets.isPublicHeader(k))
        walk(v[k]!, segment(path, k), hidden, k.toLowerCase() === "headers")
      }
      return
    }
    if (typeof v === "string") {
      if (Secrets.secretsOfUrl(v).length > 0) out[path] = SECRET_MARK
      else if (v.length > MAX_TEXT || /[\r\n]/.test(v)) out[path] = { digest: short(v), chars: v.length }
      else out[path] = v
      return
    }
    out[path] = v
  }
  walk(document, "", false, false)
  return out
}
