/**
 * Why a connection to a PostgreSQL server failed, in words a user can act on: which server
 * (host and port, the URL without its password), what went wrong (refused, unknown host, timed
 * out, authentication, unknown database, TLS, too many connections, starting up or shutting
 * down) and what to do about it. One routine for every command that connects (the store,
 * `assay migrate`, runners and submitters), so they all say the same.
 *
 * @since 0.8.0
 */
import { redactUrl, scrub } from "./url.js"

/**
 * The host and port a URL names (defaults: `localhost`, `5432`), and its database and user
 * when given. Best effort: a URL that does not parse gives the defaults.
 *
 * @param url - a `postgres://` URL.
 * @returns `{ host, port, database, user }` (`undefined` for what the URL leaves out).
 *
 * @since 0.8.0
 * @category urls
 */
export const endpointOf = (
  url: string
): {
  readonly host: string
  readonly port: number
  readonly database: string | undefined
  readonly user: string | undefined
} => {
  const m = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)(?:\/([^?#]*))?/i.exec(url.trim())
  const authority = m?.[1] ?? ""
  const at = authority.lastIndexOf("@")
  const userinfo = at < 0 ? undefined : authority.slice(0, at)
  const hostport = at < 0 ? authority : authority.slice(at + 1)
  const hp = /^(\[[^\]]*\]|[^:]*)(?::(\d+))?$/.exec(hostport)
  const decode = (s: string | undefined) => {
    if (s === undefined || s === "") return undefined
    try {
      return decodeURIComponent(s)
    } catch {
      return s
    }
  }
  const user = userinfo === undefined ? undefined : decode(userinfo.split(":")[0])
  return {
    host: decode(hp?.[1]) ?? "localhost",
    port: hp?.[2] === undefined ? 5432 : Number(hp[2]),
    database: decode(m?.[2]),
    user
  }
}

/** The driver's code and message of `cause` (an `SqlError`, its `cause`, or an `Error`). */
const detailOf = (cause: unknown): { readonly code: string | undefined; readonly message: string } => {
  let inner: unknown = cause
  // SqlError → the pg / node error (one or two levels down)
  for (let i = 0; i < 3; i++) {
    const next = (inner as { cause?: unknown } | null)?.cause
    if (next === undefined || next === null) break
    inner = next
  }
  const code = (inner as { code?: unknown } | null)?.code
  const message = inner instanceof Error
    ? inner.message
    : String((inner as { message?: unknown } | null)?.message ?? (cause as { message?: unknown } | null)?.message ?? cause)
  return { code: typeof code === "string" ? code : undefined, message }
}

/**
 * What went wrong and what to do, or `undefined` when `cause` is not a connection problem
 * this routine knows (the caller then quotes the driver).
 */
const adviceOf = (
  code: string | undefined,
  message: string,
  ep: ReturnType<typeof endpointOf>
): { readonly what: string; readonly todo: string } | undefined => {
  const where = `${ep.host}:${ep.port}`
  const text = message.toLowerCase()
  if (code === "ECONNREFUSED") {
    return {
      what: `the connection to ${where} was refused (no server listens there)`,
      todo: "check the host and port in the URL, and that the Postgres server is running and accepts TCP connections"
    }
  }
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") {
    return { what: `the host ${ep.host} was not found`, todo: "check the host name in the URL (and DNS)" }
  }
  if (code === "ETIMEDOUT" || code === "EHOSTUNREACH" || code === "ENETUNREACH" || text.includes("timed out") || text.includes("timeout")) {
    return {
      what: `${where} did not answer in time`,
      todo: "check that the host is reachable from here (firewall, network) and that the port is Postgres's"
    }
  }
  if (code === "28P01" || code === "28000" || text.includes("password authentication failed") || text.includes("no pg_hba.conf entry")) {
    return {
      what: `the server at ${where} refused the login${ep.user === undefined ? "" : ` of user "${ep.user}"`} (${
        code === "28P01" ? "authentication failed" : text.includes("does not exist") ? "no such role" : "not allowed by pg_hba.conf"
      })`,
      todo: "check the user and the password (in the URL, PGPASSWORD or ~/.pgpass) and the server's pg_hba.conf"
    }
  }
  if (code === "3D000") {
    return {
      what: `the database${ep.database === undefined ? "" : ` "${ep.database}"`} does not exist on ${where}`,
      todo: `create it (\`createdb ${ep.database ?? "NAME"}\`), then run \`assay migrate --database URL\` once`
    }
  }
  if (
    text.includes("ssl") || text.includes("tls") || text.includes("certificate") ||
    (code !== undefined && (code.startsWith("ERR_TLS") || code.startsWith("ERR_SSL") || code.includes("CERT")))
  ) {
    return {
      what: `the TLS handshake with ${where} failed`,
      todo: "match the URL's sslmode to the server (sslmode=disable for a server without TLS, sslmode=require or verify-full with a certificate it trusts)"
    }
  }
  if (code === "53300") {
    return { what: `the server at ${where} has no connection slot left`, todo: "raise max_connections, or run fewer processes at once" }
  }
  if (code === "57P03" || code === "57P01" || code === "57P02" || code === "ECONNRESET") {
    return {
      what: `the server at ${where} is starting up, shutting down or restarting`,
      todo: "wait for it to be up and try again"
    }
  }
  return undefined
}

/**
 * The message of a failed connection to `url`: the URL without its password, host and port,
 * the cause in words, what to do, and the driver's own reason (its code and message, scrubbed
 * of the password). E.g. `cannot connect to postgres://bob:***@db:5432/assay: the connection
 * to db:5432 was refused (no server listens there); check the host and port … [ECONNREFUSED:
 * connect ECONNREFUSED 10.0.0.1:5432]`.
 *
 * @param url - the connection URL (its password is never shown).
 * @param cause - what the client failed with (an `SqlError`, a pg error, a Node socket error).
 * @returns one line.
 *
 * @since 0.8.0
 * @category errors
 */
export const connectionMessage = (url: string, cause: unknown): string => {
  const ep = endpointOf(url)
  const { code, message } = detailOf(cause)
  const driver = scrub(`${code === undefined ? "" : `${code}: `}${message}`, url)
  const advice = adviceOf(code, message, ep)
  return advice === undefined
    ? `cannot connect to ${redactUrl(url)} (${ep.host}:${ep.port}): ${driver}`
    : `cannot connect to ${redactUrl(url)}: ${advice.what}; ${advice.todo} [${driver}]`
}

/**
 * Whether `cause` looks like a failure to reach or log in to the server (as opposed to an SQL
 * statement the server refused).
 *
 * @param cause - an `SqlError` or what it wraps.
 * @returns `true` for socket errors, timeouts and the connection-class SQLSTATEs (08, 28, 3D, 53300, 57P0x).
 *
 * @since 0.8.0
 * @category errors
 */
export const isConnectionProblem = (cause: unknown): boolean => {
  const { code, message } = detailOf(cause)
  if (code === undefined) {
    return /failed to connect|connection timed out|connection terminated|connection error|not queryable|ECONNREFUSED|ECONNRESET/i
      .test(message)
  }
  return /^E[A-Z]+$/.test(code) || code.startsWith("08") || code.startsWith("28") || code === "3D000" ||
    code === "53300" || code.startsWith("57P")
}

/**
 * Whether `cause` is the server refusing the login (SQLSTATE `28P01`, authentication failed,
 * `28000`, no such role / not allowed by `pg_hba.conf`, or `3D000`, the database named in the
 * URL does not exist): a configuration error (the user, password, server rules or database
 * name are wrong), which trying again will not mend: only a person can (newuser37 F8: a
 * supervisor restarted a runner on a missing database every 5 s, for ever).
 *
 * @param cause - an `SqlError` or what it wraps.
 * @returns `true` for the `28` class SQLSTATEs and `3D000`.
 *
 * @since 0.14.0
 * @category errors
 */
export const isLoginRefused = (cause: unknown): boolean => {
  const { code } = detailOf(cause)
  return code === "28P01" || code === "28000" || code === "3D000"
}
