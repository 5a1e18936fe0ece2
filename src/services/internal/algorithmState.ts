/**
 * An acquisition algorithm's per-resource state in words, for `report`, `watch` and the
 * dashboard: what the runner stores under the resource's `health.algorithm` (the pool
 * snapshot's `algorithm`, by algorithm name). Kept apart from the report and monitor modules
 * so that each adds it with one call.
 *
 * @internal
 */

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const num = (u: unknown): number | undefined => (typeof u === "number" && Number.isFinite(u) ? u : undefined)

/**
 * The state of the `adaptive` algorithm in words, from a stored `health.algorithm` value:
 * `adaptive delivered 19.8 req/s lately, allows 24.5 req/s now, 8 at once, paced by headers;
 * cut 3× (last: a 429 at 14:03:10)`, or `""` when there is none. The two rates are of two
 * times and say so: `delivered … lately` is what the server answered successfully per second
 * over the last 5–10 s (`sustained`), `allows … now` the allowance in force (`rate`). Either
 * may be the larger: a server's burst lets the allowance float above the real limit (issue 18
 * trial: 44.95 against a limit of 25), and a cut puts it below what was delivered before it
 * (issue 18 F5: "sustains 12.6 req/s (allows up to 9.16)" read as a contradiction). A state
 * without `sustained` (older, or before a second of answers): `adaptive allows R req/s now`.
 * A concurrency limit learned from 429s (`concurrencyLimit`, the server's, not the resource's
 * configured `capacity`) is said with the window: `3 at once, learned from 429s past 3 in
 * flight` when the window is at it, `2 at once (learned from 429s: at most 3 in flight)` when
 * not (a window cut for latency, or probing past it).
 * `formatAt` writes the time of the last cut (default: ISO 8601).
 *
 * @internal
 */
export const algorithmText = (algorithm: unknown, formatAt: (epochMs: number) => string = (ms) => new Date(ms).toISOString()): string => {
  if (!isRecord(algorithm) || !isRecord(algorithm["adaptive"])) return ""
  const a = algorithm["adaptive"]
  const rate = num(a["rate"])
  const window = num(a["concurrency"])
  if (rate === undefined || window === undefined) return ""
  const sustained = num(a["sustained"])
  const figures = sustained === undefined
    ? `allows ${rate} req/s now`
    : `delivered ${sustained} req/s lately, allows ${rate} req/s now`
  const learned = num(a["concurrencyLimit"])
  const atOnce = learned === undefined
    ? `${window} at once`
    : learned === window
    ? `${window} at once, learned from 429s past ${learned} in flight`
    : `${window} at once (learned from 429s: at most ${learned} in flight)`
  const parts = [`adaptive ${figures}, ${atOnce}${a["pacedBy"] === "headers" ? ", paced by headers" : ""}`]
  if (a["phase"] === "slowStart") parts[0] += " (slow start)"
  const last = a["lastDecrease"]
  const cuts = num(a["decreases"]) ?? 0
  if (isRecord(last) && typeof last["reason"] === "string") {
    const why = last["reason"] === "rate_limit" ? "a 429" : last["reason"] === "latency" ? "rising latency" : String(last["reason"])
    const at = num(last["at"])
    parts.push(`cut ${cuts}× (last: ${why}${at === undefined ? "" : ` at ${formatAt(at)}`})`)
  }
  return parts.join("; ")
}

/**
 * What a resume restored of a resource, in words, from a stored `health.restored` value:
 * `restored at resume: throttle, probing, algorithm:adaptive`, `saved state not applied
 * (identity_changed)`, or `""` when the run was not a resume (or nothing was saved).
 *
 * @internal
 */
export const restoredText = (restored: unknown): string => {
  if (!isRecord(restored)) return ""
  if (typeof restored["ignored"] === "string") return `saved state not applied (${restored["ignored"]})`
  const applied = restored["applied"]
  if (!Array.isArray(applied)) return ""
  return applied.length === 0 ? "restored at resume: nothing still in force" : `restored at resume: ${applied.join(", ")}`
}
