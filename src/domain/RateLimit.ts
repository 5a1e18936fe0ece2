/**
 * Rate-limit hints on the wire: every way a provider tells a client how long to wait, read
 * into one {@link RateLimitHint} (a delay in milliseconds and the absolute time it ends).
 *
 * What real providers send (checked against their SDKs and documentation):
 *
 * - `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date. Some servers put a Unix
 *   timestamp there (`Retry-After: 1767225600`): a delta of 10⁹ s or more (31.7 years) is read
 *   as epoch seconds (10¹² or more: epoch milliseconds), never as a 57-year wait.
 * - `retry-after-ms` (OpenAI, Azure OpenAI; read first by the OpenAI and Anthropic SDKs'
 *   `calculateRetryTimeout`): milliseconds.
 * - `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens` (OpenAI, Azure, Groq, many
 *   gateways): a Go `time.Duration` string (`1s`, `6m0s`, `250ms`, `1m30.5s`).
 *   `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset` (Anthropic): an
 *   RFC 3339 time. `x-ratelimit-reset` / `ratelimit-reset` (GitHub-style and the IETF draft):
 *   seconds or a Unix timestamp. Which reset applies is chosen with the matching
 *   `…-remaining-…` header, following the rule proposed in anthropic-sdk-typescript#357: the
 *   latest reset among the limits whose remaining count is 0; when no limit says 0, the
 *   latest among those whose remaining count is unknown; when every limit still has room
 *   (a 429 for another reason), the earliest reset.
 * - the JSON error body: `error.retry_after` / `retry_after` (seconds), `error.retry_after_ms`,
 *   Google's `error.details[].retryDelay` (`google.rpc.RetryInfo`, `"37s"`), and the message
 *   text: OpenAI / Groq "Please try again in 20s" (`6ms`, `1m26.4s`), Azure "Please retry after
 *   7 seconds".
 *
 * Precedence: `retry-after-ms`, `Retry-After`, the reset headers, then the body. Durations are
 * wire format, so they are parsed here by a small exhaustive parser ({@link parseDuration});
 * dates use `Date.parse` (RFC 7231 IMF-fixdate and RFC 3339 are both in its accepted set).
 *
 * @since 0.1.0
 */
import { Predicate } from "effect"

/**
 * A server's request to wait: `delayMs` (milliseconds from `nowMs`, never negative), `untilMs`
 * (the epoch millisecond it ends) and `source` (where it was read, e.g. `"retry-after"`,
 * `"x-ratelimit-reset-requests"`, `"body: Please try again in 20s"`).
 *
 * @since 0.1.0
 * @category models
 */
export interface RateLimitHint {
  readonly delayMs: number
  readonly untilMs: number
  readonly source: string
}

/**
 * Smallest delta-seconds read as a Unix timestamp instead of a delay: 10⁹ s (≈ 31.7 years,
 * 2001-09-09 as a date).
 *
 * @since 0.1.0
 * @category constants
 */
export const EPOCH_SECONDS_THRESHOLD = 1e9

/**
 * Smallest number read as a Unix timestamp in milliseconds rather than seconds: 10¹²
 * (2001-09-09 in ms; 31,700 years in seconds).
 *
 * @since 0.1.0
 * @category constants
 */
export const EPOCH_MILLIS_THRESHOLD = 1e12

const units: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  "μs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000
}

const durationRe = /^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+$/
const durationPart = /(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)/g

/**
 * Parses a duration as Go's `time.Duration.String()` and protobuf's JSON `Duration` write it:
 * one or more `<number><unit>` parts with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`
 * (`"1s"`, `"6m0s"`, `"250ms"`, `"1m30.5s"`, `"1h2m3s"`, `"37s"`, `"0s"`). Returns
 * milliseconds (fractional for sub-millisecond units), or `undefined` for anything else
 * (a bare number, a sign, spaces inside, an unknown unit). Surrounding whitespace is ignored.
 *
 * Source: Go `time.ParseDuration` (without its sign), protobuf `Duration` JSON mapping.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseDuration = (text: string): number | undefined => {
  const v = text.trim()
  if (v === "" || !durationRe.test(v)) return undefined
  let ms = 0
  for (const m of v.matchAll(durationPart)) ms += Number(m[1]) * units[m[2]!]!
  return Number.isFinite(ms) ? ms : undefined
}

const numberRe = /^\d+(?:\.\d+)?$/

/** A number of seconds that may be a Unix timestamp: the epoch ms it names, or undefined. */
const epochOf = (n: number): number | undefined =>
  n >= EPOCH_MILLIS_THRESHOLD ? n : n >= EPOCH_SECONDS_THRESHOLD ? n * 1000 : undefined

const dateOf = (v: string): number | undefined => {
  // An HTTP-date names its day or month; an RFC 3339 time has a `T` between digits. Refusing
  // anything else keeps `Date.parse`'s leniency from turning "-5" or "1e3" into a date.
  if (!/[A-Za-z]{3}/.test(v) && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/.test(v)) return undefined
  const at = Date.parse(v)
  return Number.isNaN(at) ? undefined : at
}

/**
 * Parses a `Retry-After` value at `nowMs` (epoch ms): delta-seconds (`"2"`, `"1.5"`), an
 * HTTP-date, or a Unix timestamp in seconds or milliseconds (see {@link EPOCH_SECONDS_THRESHOLD}),
 * the last two read as absolute times. Returns the delay in milliseconds (0 for a time already
 * past), or `undefined` when unparseable.
 *
 * Source: RFC 9110 §10.2.3.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseRetryAfter = (value: string, nowMs: number): number | undefined => {
  const v = value.trim()
  if (v === "") return undefined
  if (numberRe.test(v)) {
    const n = Number(v)
    const epoch = epochOf(n)
    return epoch !== undefined ? Math.max(0, Math.round(epoch - nowMs)) : Math.round(n * 1000)
  }
  const at = dateOf(v)
  return at === undefined ? undefined : Math.max(0, at - nowMs)
}

/**
 * Parses a rate-limit reset value at `nowMs`: a duration ({@link parseDuration}), a number of
 * seconds (a Unix timestamp when large, as in {@link parseRetryAfter}), an HTTP-date or an
 * RFC 3339 time. Returns the delay in milliseconds (never negative), or `undefined`.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseReset = (value: string, nowMs: number): number | undefined => {
  const d = parseDuration(value)
  if (d !== undefined) return Math.round(d)
  return parseRetryAfter(value, nowMs)
}

/**
 * The reset headers read, each with the remaining-count header that says whether its limit is
 * the exhausted one.
 *
 * @since 0.1.0
 * @category constants
 */
export const resetHeaders: ReadonlyArray<{ readonly reset: string; readonly remaining: string }> = [
  { reset: "x-ratelimit-reset-requests", remaining: "x-ratelimit-remaining-requests" },
  { reset: "x-ratelimit-reset-tokens", remaining: "x-ratelimit-remaining-tokens" },
  { reset: "anthropic-ratelimit-requests-reset", remaining: "anthropic-ratelimit-requests-remaining" },
  { reset: "anthropic-ratelimit-tokens-reset", remaining: "anthropic-ratelimit-tokens-remaining" },
  { reset: "anthropic-ratelimit-input-tokens-reset", remaining: "anthropic-ratelimit-input-tokens-remaining" },
  { reset: "anthropic-ratelimit-output-tokens-reset", remaining: "anthropic-ratelimit-output-tokens-remaining" },
  { reset: "x-ratelimit-reset", remaining: "x-ratelimit-remaining" },
  { reset: "ratelimit-reset", remaining: "ratelimit-remaining" }
]

const hint = (delayMs: number, nowMs: number, source: string): RateLimitHint => ({
  delayMs,
  untilMs: nowMs + delayMs,
  source
})

/**
 * Reads the wait a response's headers ask for, at `nowMs`. `header(name)` returns a header by
 * its lower-case name. Precedence: `retry-after-ms`, `retry-after`, then the reset headers of
 * {@link resetHeaders} (chosen with their remaining counts; see the module header).
 *
 * @since 0.1.0
 * @category parsing
 */
export const hintOfHeaders = (
  header: (lowerCaseName: string) => string | undefined,
  nowMs: number
): RateLimitHint | undefined => {
  const ms = header("retry-after-ms")
  if (ms !== undefined && numberRe.test(ms.trim())) return hint(Math.round(Number(ms.trim())), nowMs, "retry-after-ms")
  const ra = header("retry-after")
  if (ra !== undefined) {
    const d = parseRetryAfter(ra, nowMs)
    if (d !== undefined) return hint(d, nowMs, "retry-after")
  }
  const resets: Array<{ name: string; delayMs: number; remaining: number | undefined }> = []
  for (const { remaining, reset } of resetHeaders) {
    const v = header(reset)
    if (v === undefined) continue
    const delayMs = parseReset(v, nowMs)
    if (delayMs === undefined) continue
    const r = header(remaining)
    const n = r === undefined || !/^-?\d+(?:\.\d+)?$/.test(r.trim()) ? undefined : Number(r.trim())
    resets.push({ name: reset, delayMs, remaining: n })
  }
  if (resets.length === 0) return undefined
  const exhausted = resets.filter((r) => r.remaining !== undefined && r.remaining <= 0)
  const unknown = resets.filter((r) => r.remaining === undefined)
  const pick = exhausted.length > 0
    ? exhausted.reduce((a, b) => (b.delayMs > a.delayMs ? b : a))
    : unknown.length > 0
    ? unknown.reduce((a, b) => (b.delayMs > a.delayMs ? b : a))
    : resets.reduce((a, b) => (b.delayMs < a.delayMs ? b : a))
  return hint(pick.delayMs, nowMs, pick.name)
}

const isRecord = (u: unknown): u is Record<string, unknown> => Predicate.isObject(u) && !Array.isArray(u)

const secondsField = (o: Record<string, unknown>, key: string, nowMs: number): number | undefined => {
  const v = o[key]
  if (typeof v === "number" && Number.isFinite(v) && v >= 0) {
    const epoch = epochOf(v)
    return epoch !== undefined ? Math.max(0, Math.round(epoch - nowMs)) : Math.round(v * 1000)
  }
  if (typeof v === "string") return parseReset(v, nowMs)
  return undefined
}

const msField = (o: Record<string, unknown>, key: string): number | undefined => {
  const v = o[key]
  if (typeof v === "number" && Number.isFinite(v) && v >= 0) return Math.round(v)
  if (typeof v === "string" && numberRe.test(v.trim())) return Math.round(Number(v.trim()))
  return undefined
}

const messageUnit: Record<string, number> = {
  ms: 1,
  millisecond: 1,
  milliseconds: 1,
  s: 1000,
  sec: 1000,
  secs: 1000,
  second: 1000,
  seconds: 1000,
  m: 60_000,
  min: 60_000,
  mins: 60_000,
  minute: 60_000,
  minutes: 60_000,
  h: 3_600_000,
  hour: 3_600_000,
  hours: 3_600_000
}

// "try again in 20s", "try again in 1m26.4s", "retry after 7 seconds", "retry in 2.5 minutes",
// "Please wait 30 seconds"
const messageRe =
  /\b(?:try again|retry|wait)(?: after| in)?\s+((?:\d+(?:\.\d+)?(?:h|m|s|ms|us|\u00b5s|ns))+|\d+(?:\.\d+)?\s*(?:milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|h))\b/i

/**
 * Reads a wait hint in a message text ("Please try again in 20s", "try again in 1m26.4s",
 * "Please retry after 7 seconds"), in milliseconds, or `undefined`.
 *
 * @since 0.1.0
 * @category parsing
 */
export const delayInMessage = (text: string): number | undefined => {
  const m = messageRe.exec(text)
  if (m === null) return undefined
  const raw = m[1]!.trim()
  const go = parseDuration(raw)
  if (go !== undefined) return Math.round(go)
  const parts = /^(\d+(?:\.\d+)?)\s*([a-z\u00b5]+)$/i.exec(raw)
  if (parts === null) return undefined
  const unit = messageUnit[parts[2]!.toLowerCase()]
  return unit === undefined ? undefined : Math.round(Number(parts[1]) * unit)
}

/**
 * Reads the wait a JSON error body asks for, at `nowMs`: `retry_after_ms` / `retryAfterMs`
 * (ms), `retry_after` / `retryAfter` (seconds, a duration or a date), on the body or its
 * `error` object; Google's `error.details[].retryDelay` (`google.rpc.RetryInfo`); then the
 * message text ({@link delayInMessage}). `body` is the parsed JSON (anything else gives
 * `undefined`).
 *
 * @since 0.1.0
 * @category parsing
 */
export const hintOfBody = (body: unknown, nowMs: number): RateLimitHint | undefined => {
  if (!isRecord(body)) return undefined
  const scopes: Array<readonly [string, Record<string, unknown>]> = []
  if (isRecord(body["error"])) scopes.push(["error.", body["error"]])
  scopes.push(["", body])
  for (const [prefix, o] of scopes) {
    for (const key of ["retry_after_ms", "retryAfterMs"]) {
      const ms = msField(o, key)
      if (ms !== undefined) return hint(ms, nowMs, `body: ${prefix}${key}`)
    }
    for (const key of ["retry_after", "retryAfter"]) {
      const ms = secondsField(o, key, nowMs)
      if (ms !== undefined) return hint(ms, nowMs, `body: ${prefix}${key}`)
    }
    const details = o["details"]
    if (Array.isArray(details)) {
      for (const d of details) {
        if (isRecord(d) && typeof d["retryDelay"] === "string") {
          const ms = parseDuration(d["retryDelay"])
          if (ms !== undefined) return hint(Math.round(ms), nowMs, `body: ${prefix}details[].retryDelay`)
        }
      }
    }
  }
  for (const [prefix, o] of scopes) {
    const message = o["message"]
    if (typeof message === "string") {
      const ms = delayInMessage(message)
      if (ms !== undefined) return hint(ms, nowMs, `body: ${prefix}message`)
    }
  }
  return undefined
}

/**
 * The wait a response asks for: its headers first ({@link hintOfHeaders}), then its parsed
 * JSON body ({@link hintOfBody}); `undefined` when it names none.
 *
 * @since 0.1.0
 * @category parsing
 */
export const hintOf = (
  header: (lowerCaseName: string) => string | undefined,
  body: unknown,
  nowMs: number
): RateLimitHint | undefined => hintOfHeaders(header, nowMs) ?? hintOfBody(body, nowMs)

/**
 * A wait in words for messages: `"250 ms"`, `"3 s"`, `"6 min"`, `"24 h"`, `"2.5 d"`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const formatWait = (ms: number): string => {
  const r = (x: number) => String(Math.round(x * 10) / 10)
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 120_000) return `${r(ms / 1000)} s`
  if (ms < 7_200_000) return `${r(ms / 60_000)} min`
  if (ms < 172_800_000) return `${r(ms / 3_600_000)} h`
  return `${r(ms / 86_400_000)} d`
}

/**
 * One limit as a response's headers describe it: `remaining` requests (or tokens) before the
 * server refuses, `resetMs` until it is full again (milliseconds from the response), and the
 * `limit` itself when the server names it. Any field the server did not send is `undefined`.
 *
 * @since 0.2.0
 * @category models
 */
export interface LimitStatus {
  readonly limit: number | undefined
  readonly remaining: number | undefined
  readonly resetMs: number | undefined
}

/**
 * What a response said about the key's rate limits (read on every answer, 2xx included):
 * the request limit and the token limit, each a {@link LimitStatus}, or `undefined` when the
 * response named none. Read by `statusOfHeaders`; carried to the pool in a lease report
 * (`LeaseReport.rateLimit`), where the `adaptive` algorithm paces requests by it.
 *
 * @since 0.2.0
 * @category models
 */
export interface RateLimitStatus {
  readonly requests: LimitStatus | undefined
  readonly tokens: LimitStatus | undefined
}

/**
 * The header names {@link statusOfHeaders} reads per limit (lower case): OpenAI's (also Azure
 * OpenAI, Groq and most gateways) `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, and
 * Anthropic's `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`.
 *
 * @since 0.2.0
 * @category constants
 */
export const statusHeaders: {
  readonly requests: ReadonlyArray<{ readonly limit: string; readonly remaining: string; readonly reset: string }>
  readonly tokens: ReadonlyArray<{ readonly limit: string; readonly remaining: string; readonly reset: string }>
} = {
  requests: [
    { limit: "x-ratelimit-limit-requests", remaining: "x-ratelimit-remaining-requests", reset: "x-ratelimit-reset-requests" },
    {
      limit: "anthropic-ratelimit-requests-limit",
      remaining: "anthropic-ratelimit-requests-remaining",
      reset: "anthropic-ratelimit-requests-reset"
    }
  ],
  tokens: [
    { limit: "x-ratelimit-limit-tokens", remaining: "x-ratelimit-remaining-tokens", reset: "x-ratelimit-reset-tokens" },
    {
      limit: "anthropic-ratelimit-tokens-limit",
      remaining: "anthropic-ratelimit-tokens-remaining",
      reset: "anthropic-ratelimit-tokens-reset"
    }
  ]
}

const countOf = (v: string | undefined): number | undefined => {
  if (v === undefined) return undefined
  const t = v.trim()
  if (!/^\d+(?:\.\d+)?$/.test(t)) return undefined
  const n = Number(t)
  return Number.isFinite(n) ? n : undefined
}

const limitStatusOf = (
  header: (lowerCaseName: string) => string | undefined,
  names: ReadonlyArray<{ readonly limit: string; readonly remaining: string; readonly reset: string }>,
  nowMs: number
): LimitStatus | undefined => {
  for (const n of names) {
    const limit = countOf(header(n.limit))
    const remaining = countOf(header(n.remaining))
    const r = header(n.reset)
    const resetMs = r === undefined ? undefined : parseReset(r, nowMs)
    if (limit !== undefined || remaining !== undefined || resetMs !== undefined) return { limit, remaining, resetMs }
  }
  return undefined
}

/**
 * Reads the rate-limit status a response's headers announce, at `nowMs` (epoch ms; reset
 * values may be durations, seconds or dates, see {@link parseReset}). `header(name)` returns
 * a header by its lower-case name. Returns `undefined` when the response names no limit.
 *
 * Which headers: {@link statusHeaders}. OpenAI documents `x-ratelimit-reset-*` as the time
 * until the limit is back to its full value (a duration such as `6m0s`), which is how the
 * `adaptive` algorithm reads it.
 *
 * @since 0.2.0
 * @category parsing
 */
export const statusOfHeaders = (
  header: (lowerCaseName: string) => string | undefined,
  nowMs: number
): RateLimitStatus | undefined => {
  const requests = limitStatusOf(header, statusHeaders.requests, nowMs)
  const tokens = limitStatusOf(header, statusHeaders.tokens, nowMs)
  return requests === undefined && tokens === undefined ? undefined : { requests, tokens }
}
