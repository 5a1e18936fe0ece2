/**
 * Secrets, the whole kind: which values are secret (option names, header values, parts of a
 * URL) and how a text is cleaned of them in every form a server or a library may write them
 * (raw, URL-encoded, HTML-escaped, JSON-escaped, base64 at any alignment).
 *
 * Rules, in one place so that every writer (store, events, errors, exports, report,
 * dashboard) applies the same:
 *
 * - an option **name** with `key`, `token`, `secret`, `password`, `passwd`, `passphrase`,
 *   `credential(s)`, `cookie`, `auth`, `authorization`, `signature` or `sig` (case-insensitive,
 *   not followed by a letter) holds a secret ({@link isSecretName}), except a name ending in
 *   `env` (`apiKeyEnv`, `api_key_env`): that holds the *name* of a variable, which is shown;
 * - every **header** value is secret except those named in {@link publicHeaders}
 *   (`Content-Type`, `Accept`, `User-Agent`, `OpenAI-Organization`, …): `Cookie`,
 *   `X-Custom-Auth` and any header nobody thought of are masked;
 * - in a **URL**, the userinfo (user and password) and every query value are secret, except
 *   the query parameters of {@link publicQueryParams} (`api-version`, …) ({@link maskUrl});
 * - a text is masked **before** it is truncated ({@link maskText}): a secret cut by a slice
 *   would no longer match.
 *
 * @since 0.1.0
 */

/**
 * What a masked secret is replaced by.
 *
 * @since 0.1.0
 * @category constants
 */
export const MASK = "***"

const secretName =
  /(?:key|token|secret|password|passwd|passphrase|credentials?|cookie|auth|authorization|signature|sig)(?![a-z])/i
const variableName = /env$/i

/**
 * Whether an option or field name names a secret (see the module header): `apiKey`,
 * `api_key`, `x-api-key`, `accessToken`, `client_secret`, `Authorization`, `X-Custom-Auth`,
 * `Cookie`, `sig`. Not `apiKeyEnv` / `api_key_env` (a variable's name), nor counters such as
 * `quota.tokens`, `keyId`, `tokenizer`, `author` (a letter follows the word).
 *
 * @since 0.1.0
 * @category secrets
 */
export const isSecretName = (name: string): boolean => secretName.test(name) && !variableName.test(name)

/**
 * Header names (lower case) whose values are not secret: `content-type`, `accept`,
 * `accept-encoding`, `accept-language`, `user-agent`, `openai-organization`, `openai-project`,
 * `openai-beta`, `anthropic-version`, `anthropic-beta`, `x-request-id`, `http-referer`,
 * `x-title` (OpenRouter's attribution headers), `cache-control`, `content-length`. Every other
 * header value is masked.
 *
 * @since 0.1.0
 * @category constants
 */
export const publicHeaders: ReadonlySet<string> = new Set([
  "content-type",
  "accept",
  "accept-encoding",
  "accept-language",
  "user-agent",
  "openai-organization",
  "openai-project",
  "openai-beta",
  "anthropic-version",
  "anthropic-beta",
  "x-request-id",
  "http-referer",
  "x-title",
  "cache-control",
  "content-length"
])

/**
 * Whether a header's value may be shown (its name, any case, is in {@link publicHeaders}).
 *
 * @since 0.1.0
 * @category secrets
 */
export const isPublicHeader = (name: string): boolean => publicHeaders.has(name.toLowerCase())

/**
 * URL query parameters (lower case) whose values are not secret: `api-version`, `api_version`,
 * `version`, `model`, `deployment`, `deployment-id`, `region`, `format`, `alt`. Every other
 * query value is masked.
 *
 * @since 0.1.0
 * @category constants
 */
export const publicQueryParams: ReadonlySet<string> = new Set([
  "api-version",
  "api_version",
  "version",
  "model",
  "deployment",
  "deployment-id",
  "region",
  "format",
  "alt"
])

const urlLike = /^[a-z][a-z0-9+.-]*:\/\//i

/**
 * The secret parts of a URL string: the decoded and raw user and password, and every query
 * value whose parameter is not in {@link publicQueryParams} (decoded and raw). Empty for a
 * string that is not an absolute URL.
 *
 * @since 0.1.0
 * @category secrets
 */
export const secretsOfUrl = (text: string): ReadonlyArray<string> => {
  if (!urlLike.test(text)) return []
  let u: URL
  try {
    u = new URL(text)
  } catch {
    return []
  }
  const out: Array<string> = []
  const add = (raw: string) => {
    if (raw === "") return
    out.push(raw)
    try {
      const decoded = decodeURIComponent(raw.replace(/\+/g, " "))
      if (decoded !== raw) out.push(decoded)
    } catch {
      // a malformed escape: the raw form is masked
    }
  }
  add(u.username)
  add(u.password)
  const query = u.search.startsWith("?") ? u.search.slice(1) : u.search
  for (const pair of query.split("&")) {
    const eq = pair.indexOf("=")
    if (eq < 0) continue
    let name = pair.slice(0, eq)
    try {
      name = decodeURIComponent(name.replace(/\+/g, " "))
    } catch {
      // keep the raw name
    }
    if (!publicQueryParams.has(name.toLowerCase())) add(pair.slice(eq + 1))
  }
  return out
}

/**
 * A URL string with its secret parts masked (see {@link secretsOfUrl}): `user:pass@` becomes
 * `***:***@`, each non-public query value `***`; the rest (scheme, host, path, public query
 * values) is kept as written. A string that is not an absolute URL is returned as is.
 *
 * @since 0.1.0
 * @category secrets
 */
export const maskUrl = (text: string): string => {
  if (!urlLike.test(text)) return text
  let u: URL
  try {
    u = new URL(text)
  } catch {
    return text
  }
  if (u.username === "" && u.password === "" && u.search === "") return text
  const schemeEnd = text.indexOf("://") + 3
  let rest = text.slice(schemeEnd)
  // the userinfo ends at the authority's LAST '@' (a password may hold a raw '@', which
  // drivers read as part of it): masking only up to the first would show the rest
  const slash = rest.search(/[/?#]/)
  const at = (slash < 0 ? rest : rest.slice(0, slash)).lastIndexOf("@")
  if (at >= 0) {
    const colon = rest.slice(0, at).indexOf(":")
    rest = `${colon >= 0 ? `${MASK}:${MASK}` : MASK}${rest.slice(at)}`
  }
  const q = rest.indexOf("?")
  if (q >= 0) {
    const hash = rest.indexOf("#", q)
    const query = rest.slice(q + 1, hash < 0 ? undefined : hash)
    const masked = query.split("&").map((pair) => {
      const eq = pair.indexOf("=")
      if (eq < 0) return pair
      let name = pair.slice(0, eq)
      try {
        name = decodeURIComponent(name.replace(/\+/g, " "))
      } catch {
        // keep the raw name
      }
      return publicQueryParams.has(name.toLowerCase()) || pair.length === eq + 1 ? pair : `${pair.slice(0, eq)}=${MASK}`
    }).join("&")
    rest = `${rest.slice(0, q + 1)}${masked}${hash < 0 ? "" : rest.slice(hash)}`
  }
  return text.slice(0, schemeEnd) + rest
}

const htmlForms = (s: string): ReadonlyArray<string> => {
  const named = s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  return [
    named.replace(/"/g, "&quot;").replace(/'/g, "&#39;"),
    named.replace(/"/g, "&#34;").replace(/'/g, "&#x27;"),
    named.replace(/"/g, "&quot;").replace(/'/g, "&#039;")
  ]
}

/** The part of base64(pad + secret) that depends only on the secret, for pads of 0, 1, 2 bytes. */
const base64Forms = (s: string): ReadonlyArray<string> => {
  const bytes = Buffer.from(s, "utf8")
  const out: Array<string> = []
  for (let k = 0; k < 3; k++) {
    const b64 = Buffer.concat([Buffer.alloc(k), bytes]).toString("base64")
    const core = b64.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + bytes.length)) / 6))
    out.push(core, core.replace(/\+/g, "-").replace(/\//g, "_"))
  }
  return out
}

/**
 * Every form in which a secret may appear in a text: raw, URL-encoded (upper- and lower-case
 * escapes, `+` for space), JSON-escaped, HTML-escaped (named and numeric entities), and
 * base64 / base64url at any byte alignment (the characters that depend only on the secret's
 * bytes, so that `base64("user:" + key)` is caught too). Forms shorter than 4 characters are
 * dropped (too short to mask without destroying the text).
 *
 * @since 0.1.0
 * @category secrets
 */
export const formsOf = (secret: string): ReadonlyArray<string> => {
  if (secret.length < 4) return []
  const enc = encodeURIComponent(secret)
  const forms = new Set<string>([
    secret,
    enc,
    enc.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase()),
    enc.replace(/%20/g, "+"),
    JSON.stringify(secret).slice(1, -1),
    ...htmlForms(secret),
    ...base64Forms(secret)
  ])
  return Array.from(forms).filter((f) => f.length >= 4)
}

/**
 * Replaces every form ({@link formsOf}) of each secret in `text` by `***`, longest first (so
 * a secret that contains another is masked whole). Mask **before** truncating.
 *
 * @since 0.1.0
 * @category secrets
 */
export const maskText = (text: string, secrets: ReadonlyArray<string>): string => {
  const forms = Array.from(new Set(secrets.flatMap(formsOf))).sort((a, b) => b.length - a.length)
  let out = text
  for (const f of forms) if (out.includes(f)) out = out.split(f).join(MASK)
  return out
}

/**
 * {@link maskText}, then cut to `max` characters (an ellipsis marks the cut). Never the other
 * way round: a secret cut by the slice would survive in part.
 *
 * @since 0.1.0
 * @category secrets
 */
export const maskThenTruncate = (text: string, secrets: ReadonlyArray<string>, max: number): string => {
  const masked = maskText(text, secrets)
  return masked.length <= max ? masked : `${masked.slice(0, max)}…`
}

/**
 * Whether a string holds whitespace or a control character (a key read from a file with its
 * trailing newline, a pasted key with a space): such a value cannot be sent in an HTTP header.
 *
 * @since 0.1.0
 * @category secrets
 */
export const hasWhitespaceOrControl = (value: string): boolean => /[\s\u0000-\u001f\u007f-\u009f]/.test(value)
