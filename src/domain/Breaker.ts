/**
 * The circuit breaker of one resource (an endpoint or a key): pure data and pure functions;
 * the pool service (`src/services/Pool.ts`) keeps one {@link Breaker} per resource, feeds it
 * the outcome of every lease report and times it with Effect's `Clock`.
 *
 * Why: a per-pipeline retry delay does not stop the pipelines together from pouring requests
 * into an endpoint that is failing most of the time (an error storm); each of them retries
 * on its own schedule, so the endpoint keeps seeing the full concurrency. The breaker backs
 * the endpoint off as a whole:
 *
 * - `closed`: leases flow. The outcomes of the last `window` reports of transient classes
 *   (`upstream`, `connection`, `timeout`) and successes are kept; once at least
 *   `minRequests` are known and the share of failures reaches `failureRate`, the breaker
 *   opens. A rate limit (`rate_limit`) is never counted: a 429 says "slow down", not "broken"
 *   (the pool throttles the key instead). Other classes (`fatal`, `unknown`, …) go to the
 *   resource's failure-streak health, not here.
 * - `open`: no lease until `openUntil` (`openFor`, doubled by `factor` after every failed
 *   probe, at most `maxOpen`).
 * - `half_open`: one probe lease at a time; a successful probe closes the breaker (window
 *   cleared), a failed one opens it again for longer. A probe given back without a report
 *   lets the next lease probe.
 *
 * Reports from leases granted before the breaker opened (still in flight when it opened)
 * are ignored while it is open or half-open: they say nothing about the endpoint now.
 *
 * The shape is the classic one (M. Nygard, "Release It!", 2007, ch. 5 "Circuit Breaker");
 * the error-rate trip over a count-based sliding window with a minimum number of calls follows
 * resilience4j's `CircuitBreaker` (`slidingWindowSize`, `minimumNumberOfCalls`,
 * `failureRateThreshold`, `waitDurationInOpenState`).
 *
 * @since 0.2.0
 */
import { Duration } from "effect"
import type { ErrorClass } from "./Errors.js"

/**
 * The breaker's state: `closed` (leases flow), `open` (no leases until `openUntil`),
 * `half_open` (one probe lease at a time).
 *
 * @since 0.2.0
 * @category models
 */
export type BreakerState = "closed" | "open" | "half_open"

/**
 * Options of the breaker (a pool option, `breaker`). Defaults: `window` 20 outcomes,
 * `minRequests` 10, `failureRate` 0.5, `openFor` 1 second, `factor` 2, `maxOpen` 30 seconds.
 *
 * @since 0.2.0
 * @category models
 */
export interface BreakerOptions {
  /** How many recent outcomes the error rate is computed over (integer ≥ 1). */
  readonly window?: number | undefined
  /** Outcomes needed in the window before the breaker may open (integer ≥ 1). */
  readonly minRequests?: number | undefined
  /** Share of failures in the window (0 < r ≤ 1) at which the breaker opens. */
  readonly failureRate?: number | undefined
  /** How long the first opening lasts (later ones grow by `factor`). */
  readonly openFor?: Duration.DurationInput | undefined
  /** Growth of the open time after each failed probe (≥ 1). */
  readonly factor?: number | undefined
  /** The longest opening. */
  readonly maxOpen?: Duration.DurationInput | undefined
}

/**
 * Resolved breaker parameters (durations in milliseconds).
 *
 * @since 0.2.0
 * @category models
 */
export interface BreakerPolicy {
  readonly window: number
  readonly minRequests: number
  readonly failureRate: number
  readonly openForMs: number
  readonly factor: number
  readonly maxOpenMs: number
}

/**
 * The default policy: window 20, minRequests 10, failureRate 0.5, openFor 1 000 ms,
 * factor 2, maxOpen 30 000 ms.
 *
 * @since 0.2.0
 * @category constants
 */
export const defaults: BreakerPolicy = {
  window: 20,
  minRequests: 10,
  failureRate: 0.5,
  openForMs: 1_000,
  factor: 2,
  maxOpenMs: 30_000
}

/**
 * Resolves options against {@link defaults}. Returns the problems (field and message) instead
 * of a policy when a value is out of range.
 *
 * @since 0.2.0
 * @category constructors
 */
export const policy = (
  options: BreakerOptions | undefined
): { readonly policy: BreakerPolicy } | { readonly issues: ReadonlyArray<{ readonly field: string; readonly message: string }> } => {
  const o = options ?? {}
  const issues: Array<{ field: string; message: string }> = []
  const int = (field: string, v: number | undefined, d: number) => {
    if (v === undefined) return d
    if (!Number.isInteger(v) || v < 1) issues.push({ field, message: `${field} must be an integer >= 1` })
    return v
  }
  const window = int("window", o.window, defaults.window)
  const minRequests = int("minRequests", o.minRequests, defaults.minRequests)
  const failureRate = o.failureRate ?? defaults.failureRate
  if (!(failureRate > 0 && failureRate <= 1)) issues.push({ field: "failureRate", message: "failureRate must be in (0, 1]" })
  const factor = o.factor ?? defaults.factor
  if (!(Number.isFinite(factor) && factor >= 1)) issues.push({ field: "factor", message: "factor must be a finite number >= 1" })
  const ms = (field: string, v: Duration.DurationInput | undefined, d: number) => {
    if (v === undefined) return d
    const decoded = Duration.decodeUnknown(v)
    if (decoded._tag === "None" || !Duration.isFinite(decoded.value)) {
      issues.push({ field, message: `${field} must be a finite duration, for example "2 seconds"` })
      return d
    }
    return Duration.toMillis(decoded.value)
  }
  const openForMs = ms("openFor", o.openFor, defaults.openForMs)
  const maxOpenMs = Math.max(openForMs, ms("maxOpen", o.maxOpen, defaults.maxOpenMs))
  if (issues.length > 0) return { issues }
  return { policy: { window, minRequests: Math.min(minRequests, window), failureRate, openForMs, factor, maxOpenMs } }
}

/**
 * The breaker of one resource. `outcomes` is a ring of the last `window` outcomes (`true` =
 * failure); `failedProbes` counts probes failed in a row (it sets the next open time);
 * `openUntil` is the epoch ms at which an open breaker turns half-open; `opened` counts
 * openings.
 *
 * @since 0.2.0
 * @category models
 */
export interface Breaker {
  readonly state: BreakerState
  readonly outcomes: ReadonlyArray<boolean>
  readonly failedProbes: number
  readonly openUntil: number
  readonly opened: number
}

/**
 * A closed breaker with an empty window.
 *
 * @since 0.2.0
 * @category constructors
 */
export const initial: Breaker = { state: "closed", outcomes: [], failedProbes: 0, openUntil: 0, opened: 0 }

/**
 * A state change worth an event (`breaker.opened`, `breaker.half_open`, `breaker.closed`).
 *
 * @since 0.2.0
 * @category models
 */
export type BreakerTransition = "opened" | "half_open" | "closed"

/**
 * The result of a breaker function: the next breaker and the transition, if any.
 *
 * @since 0.2.0
 * @category models
 */
export interface BreakerStep {
  readonly breaker: Breaker
  readonly transition: BreakerTransition | undefined
}

/**
 * The classes a breaker counts as failures: `upstream`, `connection`, `timeout`.
 *
 * @since 0.2.0
 * @category constants
 */
export const breakerClasses: ReadonlySet<ErrorClass> = new Set<ErrorClass>(["upstream", "connection", "timeout"])

/**
 * The open time after `failedProbes` failed probes: `min(maxOpen, openFor * factor^failedProbes)` ms.
 *
 * @since 0.2.0
 * @category utils
 */
export const openMs = (p: BreakerPolicy, failedProbes: number): number => {
  const raw = p.openForMs * Math.pow(p.factor, failedProbes)
  return Number.isFinite(raw) ? Math.min(p.maxOpenMs, raw) : p.maxOpenMs
}

const open = (b: Breaker, p: BreakerPolicy, failedProbes: number, nowMs: number): BreakerStep => ({
  breaker: { state: "open", outcomes: [], failedProbes, openUntil: nowMs + openMs(p, failedProbes), opened: b.opened + 1 },
  transition: "opened"
})

/**
 * One counted outcome (`failed`: a failure of a breaker class; else a success) of a lease
 * granted while closed. Ignored unless closed. Opens when the window holds at least
 * `minRequests` outcomes and the failure share reaches `failureRate`.
 *
 * @since 0.2.0
 * @category transitions
 */
export const onOutcome = (b: Breaker, p: BreakerPolicy, failed: boolean, nowMs: number): BreakerStep => {
  if (b.state !== "closed") return { breaker: b, transition: undefined }
  const outcomes = b.outcomes.length >= p.window ? [...b.outcomes.slice(b.outcomes.length - p.window + 1), failed] : [...b.outcomes, failed]
  if (failed && outcomes.length >= p.minRequests) {
    let failures = 0
    for (const f of outcomes) if (f) failures++
    if (failures / outcomes.length >= p.failureRate) return open(b, p, 0, nowMs)
  }
  return { breaker: { ...b, outcomes }, transition: undefined }
}

/**
 * The report of a probe (a lease granted while half-open): a success closes the breaker, a
 * counted failure opens it again for longer; anything else (a rate limit, another class)
 * leaves it half-open for the next probe.
 *
 * @since 0.2.0
 * @category transitions
 */
export const onProbe = (b: Breaker, p: BreakerPolicy, outcome: "ok" | "failed" | "other", nowMs: number): BreakerStep => {
  if (b.state !== "half_open") return { breaker: b, transition: undefined }
  if (outcome === "ok") return { breaker: { ...initial, opened: b.opened }, transition: "closed" }
  if (outcome === "failed") return open(b, p, b.failedProbes + 1, nowMs)
  return { breaker: b, transition: undefined }
}

/**
 * The open time is over at `nowMs`: an open breaker turns half-open. Otherwise nothing.
 *
 * @since 0.2.0
 * @category transitions
 */
export const onOpenEnd = (b: Breaker, nowMs: number): BreakerStep =>
  b.state === "open" && nowMs >= b.openUntil
    ? { breaker: { ...b, state: "half_open" }, transition: "half_open" }
    : { breaker: b, transition: undefined }

/**
 * The state shown at `nowMs`: an open breaker whose time is over shows as `half_open`.
 *
 * @since 0.2.0
 * @category utils
 */
export const effectiveState = (b: Breaker, nowMs: number): BreakerState =>
  b.state === "open" && nowMs >= b.openUntil ? "half_open" : b.state
