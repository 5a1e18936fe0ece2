/**
 * PostgreSQL connection URLs as the store takes them: which specs are Postgres URLs, and how
 * a URL (or any text that may contain it) is shown without its password.
 *
 * @since 0.8.0
 */

/**
 * Whether `spec` is a PostgreSQL connection URL (`postgres://…` or `postgresql://…`, any case
 * of the scheme).
 *
 * @param spec - a store spec as the CLI or a config file gives it.
 * @returns `true` for the two Postgres schemes.
 *
 * @since 0.8.0
 * @category urls
 */
export const isPostgresUrl = (spec: string): boolean => /^postgres(?:ql)?:\/\//i.test(spec.trim())

/** The password of a URL as written (still percent-encoded), or `undefined`. */
const rawPassword = (url: string): string | undefined => {
  const parts = userinfoOf(url)
  if (parts === undefined) return undefined
  const colon = parts.userinfo.indexOf(":")
  return colon < 0 ? undefined : parts.userinfo.slice(colon + 1)
}

/**
 * The scheme + `//`, the userinfo (up to the authority's LAST `@`: a password may hold a raw
 * `@`, which the driver reads as part of it) and what follows it, or `undefined` without one.
 */
const userinfoOf = (url: string): { readonly head: string; readonly userinfo: string; readonly tail: string } | undefined => {
  const m = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)/i.exec(url)
  if (m === null) return undefined
  const authority = m[2]!
  const at = authority.lastIndexOf("@")
  if (at < 0) return undefined
  return { head: m[1]!, userinfo: authority.slice(0, at), tail: authority.slice(at) + url.slice(m[0].length) }
}

/**
 * The URL with its password replaced by `***` (user, host, port, database and parameters
 * kept); a `password=` query parameter is masked too. What every message, log and header
 * shows of a connection URL.
 *
 * @param url - a connection URL (need not parse).
 * @returns the same text without the secret.
 *
 * @since 0.8.0
 * @category urls
 */
export const redactUrl = (url: string): string => {
  const parts = userinfoOf(url)
  const colon = parts === undefined ? -1 : parts.userinfo.indexOf(":")
  let out = parts === undefined || colon < 0
    ? url
    : `${parts.head}${parts.userinfo.slice(0, colon)}:***${parts.tail}`
  out = out.replace(/([?&](?:password|sslpassword)=)[^&#]*/gi, "$1***")
  return out
}

/**
 * Removes every form of `url`'s password (as written, percent-decoded) from `text`: for
 * messages that come from the driver and might quote it.
 *
 * @param text - any text.
 * @param url - the connection URL whose secret must not appear.
 * @returns `text` with the password (and the whole URL) masked.
 *
 * @since 0.8.0
 * @category urls
 */
export const scrub = (text: string, url: string): string => {
  let out = text.split(url).join(redactUrl(url))
  const raw = rawPassword(url)
  if (raw !== undefined && raw.length > 0) {
    const forms = new Set([raw])
    try {
      forms.add(decodeURIComponent(raw))
    } catch {
      // a malformed escape: the raw form is all there is
    }
    for (const f of forms) if (f.length > 0) out = out.split(f).join("***")
  }
  return out
}

/**
 * Every Postgres URL in `text` with its userinfo password replaced by `***` (for command lines
 * echoed back to the user, such as the `resume with:` hint).
 *
 * @param text - any text.
 * @returns `text` with each `postgres://user:password@` written `postgres://user:***@`.
 *
 * @since 0.8.0
 * @category urls
 */
export const redactUrlsIn = (text: string): string =>
  text.replace(/postgres(?:ql)?:\/\/[^\s'"]*/gi, (url) => redactUrl(url))

/**
 * The URL without its password (the user, host, port, database and other parameters kept; a
 * `password=` or `sslpassword=` query parameter dropped): a URL a user can paste back into a
 * command, the driver then taking the password from `PGPASSWORD` or `~/.pgpass`. A masked URL
 * (`user:***@`) cannot be pasted: the driver would log in with the password `***`.
 *
 * @param url - a connection URL (need not parse).
 * @returns the same URL without any password; `url` itself when it has none.
 *
 * @since 0.8.0
 * @category urls
 */
export const withoutPassword = (url: string): string => {
  const parts = userinfoOf(url)
  const colon = parts === undefined ? -1 : parts.userinfo.indexOf(":")
  let out = parts === undefined || colon < 0 ? url : `${parts.head}${parts.userinfo.slice(0, colon)}${parts.tail}`
  out = out.replace(/([?&])(?:password|sslpassword)=[^&#]*&?/gi, "$1").replace(/[?&](#|$)/, "$1")
  return out
}

/**
 * Whether `url` carries a password (in its userinfo or as a `password=` parameter).
 *
 * @param url - a connection URL (need not parse).
 * @returns `true` when {@link withoutPassword} would change it.
 *
 * @since 0.8.0
 * @category urls
 */
export const hasPassword = (url: string): boolean => withoutPassword(url) !== url

/**
 * Every Postgres URL in `text` without its password ({@link withoutPassword}), and whether any
 * had one: for commands printed to be pasted (`results:`, `resume with:`). When `removed`, the
 * caller says where the password must come from (see {@link PASSWORD_HINT}).
 *
 * @param text - any text.
 * @returns `{ text, removed }`.
 *
 * @since 0.8.0
 * @category urls
 */
export const pasteable = (text: string): { readonly text: string; readonly removed: boolean } => {
  let removed = false
  const out = text.replace(/postgres(?:ql)?:\/\/[^\s'"]*/gi, (url) => {
    const bare = withoutPassword(url)
    if (bare !== url) removed = true
    return bare
  })
  return { text: out, removed }
}

/**
 * What a pasteable command adds when the URL's password was left out of it.
 *
 * @since 0.8.0
 * @category urls
 */
export const PASSWORD_HINT =
  "the password is left out of the database URL above: set PGPASSWORD (or a ~/.pgpass entry) before running it, or put your own URL (or the variable you took it from) back in its place"
