/**
 * Internal helpers of `Errors` (issue 12 §8: not reachable from the package entry): the
 * wording of durations and refused server delays, the connection error codes `classify` reads,
 * and the description and tag of any failure.
 */
import { Predicate } from "effect"

/** The `_tag` of a tagged value, or `undefined`. */
export const tagOf = (u: unknown): string | undefined =>
  Predicate.hasProperty(u, "_tag") && typeof u._tag === "string" ? u._tag : undefined

/**
 * A duration for people: `850 ms`, `12 s`, `6 min`, `24 h`, `3 d` (rounded; `h` and `d`
 * keep one decimal when not whole).
 */
export const humanDuration = (ms: number): string => {
  const r1 = (x: number) => (Math.round(x * 10) / 10).toString()
  if (ms < 1_000) return `${Math.round(ms)} ms`
  if (ms < 120_000) return `${Math.round(ms / 1_000)} s`
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`
  if (ms < 172_800_000) return `${r1(ms / 3_600_000)} h`
  return `${r1(ms / 86_400_000)} d`
}

/**
 * The words of a refused server delay: `the server asked to wait 24 h (until
 * 2025-01-02T14:03:10.000Z), more than retry.maxServerDelay (10 min)`. `delayMs`: the delay
 * asked; `untilMs`: the epoch millisecond it ends; `maxDelayMs`: the ceiling.
 */
export const serverDelayMessage = (delayMs: number, untilMs: number, maxDelayMs: number): string =>
  `the server asked to wait ${humanDuration(delayMs)} (until ${
    Number.isFinite(untilMs) && Math.abs(untilMs) < 8.64e15 ? new Date(untilMs).toISOString() : "an unreadable time"
  }), more than retry.maxServerDelay (${humanDuration(maxDelayMs)})`

/**
 * Node.js / undici error codes that mean the connection failed.
 */
export const connectionErrorCodes: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EHOSTDOWN",
  "UND_ERR_SOCKET",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_CLOSED"
])

/**
 * A short human description of any failure: the `message` of an Error-like value, or its
 * JSON/`String` form.
 */
export const messageOf = (u: unknown): string => {
  if (Predicate.isObject(u)) {
    const m = (u as Record<string, unknown>)["message"]
    if (typeof m === "string" && m !== "") return m
    const tag = tagOf(u)
    if (tag !== undefined) return tag
  }
  if (typeof u === "string") return u
  try {
    return String(u)
  } catch {
    return "unprintable error"
  }
}
