/**
 * The rules of the `adaptive` acquisition algorithm (`AcquireAlgorithm.adaptive`), as plain
 * functions over a mutable per-resource {@link AimdState}: admission (a concurrency window and
 * a paced request rate), and what one lease report does to them (additive increase,
 * multiplicative decrease, pacing by the rate-limit headers). Internal (issue 12 §8): the public
 * surface is `adaptive()` and its options; these are exported for the unit tests of the rules.
 *
 * Method, and where each rule comes from:
 * - **AIMD** (additive increase, multiplicative decrease): Jacobson, "Congestion Avoidance and
 *   Control" (SIGCOMM 1988) and TCP's congestion control, RFC 5681: the allowed amount grows by
 *   a constant step per round of successful traffic, and is cut by a factor on a congestion
 *   signal. Chiu and Jain (1989) showed this is the rule that converges to an efficient and fair
 *   share. Here the signals are an HTTP 429 (the server's loss signal) and a rising latency (the
 *   delay signal of TCP Vegas, Brakmo and Peterson 1995: the answer time grows before the
 *   server refuses).
 * - **Slow start** (RFC 5681 §3.1): before the first congestion signal the amount doubles per
 *   interval, so a conservative start reaches a large limit in a few seconds; past 4× the
 *   initial rate the rate doubles 4× slower (RFC 3742's limited slow start, at the pace of
 *   RFC 9406 HyStart++'s conservative slow start): a server's burst hides its limit, and the
 *   overshoot at the first 429 grows with the growth rate then.
 *   A 429 before any answer with nothing learned (a start inside a 429 storm) is no measure of
 *   the limit: it leaves slow start on and sets no knee (issue 18 F4).
 * - **Our own delay is not the server's**: the latency read is the answer time less the time
 *   this process's event loop was stalled holding it, at its sending or its reading
 *   (`loopDelay.ts`).
 * - **One decrease per window** (RFC 5681 §3.2 reduces once per window of data; RFC 6582,
 *   NewReno, counts only losses of data sent after the reduction): 429s within `holdMs` of a
 *   decrease are the same congestion event, unless the refused request was leased after it.
 * - **Multiplicative factor** 0.7: CUBIC's β (RFC 9438 §4.6). The cut never goes below what the
 *   server was seen to deliver since the previous decrease (`goodputFloor` of it): the
 *   delivery-rate estimate of BBR (Cardwell et al., "BBR: Congestion-Based Congestion
 *   Control", ACM Queue 2016), so a limit that holds steady is not undershot by a blind halving.
 * - **Probing gently near the last knee**: CUBIC's plateau around W_max (RFC 9438 §4.2): the
 *   additive step shrinks (`probe`) once the rate is back near where the server refused; past
 *   slow start a cut never restarts the rate above the knee. Past the knee's band the step
 *   grows from the probe step with the square of the time spent there (`convexMs`), CUBIC's
 *   convex region (RFC 9438 §4.5).
 * - **The knee** (CUBIC's W_max, RFC 8312 §4.1 / RFC 9438 §4.2, measured rather than taken
 *   as the refused rate, which a server's burst inflates): the larger of the epoch's delivery
 *   rate and the sustained rate just before the cut less the knee's band. **A knee that held
 *   is probed less often**: each 429 met only past its band doubles the plateau before the
 *   next probe (up to 8 × `convexMs` when it asked for a wait of at least `holdMs`, else 2 ×),
 *   reset by a 429 at or below the band, a knee that fell, or headers
 *   (issue 18 F2: each probe of a small bucket costs a whole-second Retry-After; a bare 429
 *   costs one request, and a long plateau after it delays finding a limit that rose).
 * - **A restored state ages** (`recover`): a depressed rate regains the knee in proportion to
 *   the time nobody probed, or starts afresh in slow start (RFC 9040's temporal sharing of a
 *   cached ssthresh).
 * - **Only a limited sender grows**: RFC 7661 (congestion window validation): a rate or window
 *   that the demand does not fill is not raised.
 * - **Pacing by headers**: OpenAI documents `x-ratelimit-{limit,remaining,reset}-{requests,
 *   tokens}` on every answer and its cookbook ("How to handle rate limits") advises spacing
 *   requests to stay under them rather than only backing off after a 429; LiteLLM's router
 *   tracks each deployment's requests and tokens per minute and routes away from those near
 *   their limits. When the server sends the headers, the rate is capped by what they allow:
 *   the refill `(limit − remaining) / reset` plus the remaining budget spread over the time to
 *   reset; and a refill well above the rate lifts it at once (doubling per second of answers
 *   up to `goodputFloor` of the refill) rather than waiting for the probes to find it.
 *
 * @internal
 */
import type { Json } from "../../domain/Json.js"
import type { LimitStatus, RateLimitStatus } from "../../domain/RateLimit.js"

/**
 * The parameters of the rules, resolved (see `AcquireAlgorithm.AdaptiveOptions` for the
 * meaning and defaults of each).
 *
 * @internal
 */
export interface AimdParams {
  readonly initialRate: number
  readonly initialConcurrency: number
  readonly minRate: number
  readonly maxRate: number
  readonly decrease: number
  readonly increase: number
  readonly probe: number
  readonly convexMs: number
  readonly goodputFloor: number
  readonly latencyTolerance: number
  readonly latencySlackMs: number
  readonly holdMs: number
  readonly slowStartMs: number
  readonly burstMs: number
}

/**
 * The defaults (see `AcquireAlgorithm.AdaptiveOptions`).
 *
 * @internal
 */
export const defaults: AimdParams = {
  initialRate: 2,
  initialConcurrency: 2,
  minRate: 0.05,
  maxRate: Number.POSITIVE_INFINITY,
  decrease: 0.7,
  increase: 0.1,
  probe: 0.1,
  convexMs: 3000,
  goodputFloor: 0.95,
  latencyTolerance: 2,
  latencySlackMs: 50,
  holdMs: 1000,
  slowStartMs: 250,
  burstMs: 100
}

/** Why the last decrease happened. */
export type DecreaseReason = "rate_limit" | "latency"

/**
 * The learned state of one resource. Rates are requests per second, times epoch ms.
 *
 * @internal
 */
export interface AimdState {
  /** `slowStart` until the first congestion signal, then `avoidance`. */
  phase: "slowStart" | "avoidance"
  /** The allowed request rate (before the header cap). */
  rate: number
  /** The allowed concurrent leases (a window; fractional, at least 1). */
  limit: number
  /** The window's slow-start threshold (RFC 5681 `ssthresh`). */
  limitThresh: number
  /** The rate the server was seen to sustain at the last decrease (`undefined` before). */
  knee: number | undefined
  /** When the rate last rose past the knee's band in this epoch (the convex region's start). */
  aboveSince: number | undefined
  /** The pacing bucket (requests that may start now), refilled at the effective rate. */
  tokens: number
  tokensAt: number
  /** Start of the current epoch (creation or the last decrease). */
  epochAt: number
  lastDecreaseAt: number
  lastDecreaseReason: DecreaseReason | undefined
  decreases: number
  /** Successful answers since the epoch began (the delivery-rate estimate). */
  okInEpoch: number
  okTotal: number
  rateLimitedTotal: number
  /** When an acquire last found the resource held back by the rate / by the window. */
  ratePressedAt: number
  limitPressedAt: number
  latencyEmaMs: number | undefined
  latencyBaseMs: number | undefined
  /** When the baseline was last set. */
  latencyBaseAt: number
  latencySamples: number
  /** The request rate the last answer's rate-limit headers allow, and when it was read. */
  headerCeiling: number | undefined
  headerAt: number
  /**
   * The refill rate the last answer's headers imply (requests per second: `(limit −
   * remaining) / reset`, the smaller of the requests' and the tokens'), read with
   * `headerCeiling` (`headerAt`); `undefined` when they imply none.
   */
  headerRefill: number | undefined
  /** Moving average of the tokens one request used (for the token limits' headers). */
  tokensPerRequest: number | undefined
  /** When the last report was heard (the state's age on a resume). */
  lastReportAt: number
  /** Milliseconds of answer time discounted as our own event loop's stall (see `onReport`). */
  ownDelayTotalMs: number
  /**
   * The delivery rate, as two {@link SUSTAIN_WINDOW_MS} windows of successful answers: the
   * current one's start and count, and the previous one's count (`undefined`: none yet).
   */
  deliveredAt: number
  delivered: number
  deliveredPrev: number | undefined
  /**
   * The sustained rate at the last report heard while the key was pressed (acquires held
   * back by the rate or the window: demand above what the server gives), or `undefined`.
   */
  pressedSustained: number | undefined
  /**
   * How many cuts in a row the knee held (refused only past its band, measured again no more
   * than two bands below it), at most {@link MAX_PROBE_DOUBLINGS}: the plateau at the knee lasts
   * `convexMs × 2^probeDoublings` before the rate probes past it.
   */
  probeDoublings: number
  /**
   * The most leases in flight (`active` at the report, the reporter's included) of a
   * successful answer in the current epoch: what the server was seen to serve at once.
   */
  okActiveMax: number
  /**
   * The server's concurrency limit as learned from 429s (tester18f F3), or `undefined`: a 429
   * at more leases in flight than any answer of the epoch was served at is a refusal of the
   * in-flight count, not of the rate; the window is held at one below that count (growing past
   * it only after a plateau of `convexMs × 2^concDoublings`), and the rate is kept at least at
   * what that window admits at the current latency, so that the pacing does not hold back a
   * key whose bottleneck is the in-flight count. Cleared by a 429 judged a rate limit.
   */
  concKnee: number | undefined
  /** How many concurrency refusals in a row the knee held (at most {@link MAX_PROBE_DOUBLINGS}). */
  concDoublings: number
  /**
   * When the plateau at the concurrency knee began (epoch ms): the last cut, or the resume
   * that restored the knee (the idle time of a resume never carries the window past the knee,
   * as it never carries the rate past the rate's knee, see {@link recover}).
   */
  concFrom: number
}

/**
 * The window of the sustained rate (ms): the successful answers of the last one to two
 * windows, per second. What the server actually delivered, beside the allowance `rate` (which
 * a server's burst lets float above its limit: the trial printed 44.95 req/s against a 25
 * req/s limit).
 */
const SUSTAIN_WINDOW_MS = 5000

const EMA_ALPHA = 0.2

/**
 * Slow start doubles the rate per `slowStartMs` up to this multiple of `initialRate`, then
 * per {@link CSS_GROWTH_DIVISOR} × `slowStartMs` (RFC 3742's limited slow start).
 */
const LIMITED_SLOW_START = 4

/** How much slower slow start grows past its limited threshold (RFC 9406's CSS_GROWTH_DIVISOR). */
const CSS_GROWTH_DIVISOR = 4

/**
 * How many times the plateau at a knee that held doubles (issue 18 F2): up to 2^3 ×
 * `convexMs` (24 s by default) between probes past a limit that stays where it was. Each
 * probe of a small bucket costs a 429 and, with a `Retry-After` of a whole second, a second
 * of silence; probing every few seconds held 0.85 of a 10 requests/s limit.
 */
const MAX_PROBE_DOUBLINGS = 3

/**
 * The doublings of the plateau after a probe refused without a pause (a bare 429, or a wait
 * under a hold): one (6 s by default). No doubling there sent 1.2 % 429s after 10 s on a fresh
 * user's 10 requests/s endpoint (its test's bound is 1 %); three (24 s) found a limit raised
 * ×2.5 after 25 s (bench/adaptive-raise.ts --seed 2 --signals none).
 */
const UNPAUSED_PROBE_DOUBLINGS = 1

/** How long the latency baseline holds before it is measured again (ms). */
const BASE_TTL_MS = 60_000

/**
 * A fresh state: the conservative start (`initialRate`, `initialConcurrency` capped by the
 * resource's capacity), in slow start, at `now`.
 *
 * @internal
 */
export const initial = (p: AimdParams, capacity: number, now: number): AimdState => ({
  phase: "slowStart",
  rate: Math.min(p.maxRate, Math.max(p.minRate, p.initialRate)),
  limit: Math.max(1, Math.min(capacity, p.initialConcurrency)),
  limitThresh: Number.POSITIVE_INFINITY,
  knee: undefined,
  aboveSince: undefined,
  tokens: 1,
  tokensAt: now,
  epochAt: now,
  lastDecreaseAt: Number.NEGATIVE_INFINITY,
  lastDecreaseReason: undefined,
  decreases: 0,
  okInEpoch: 0,
  okTotal: 0,
  rateLimitedTotal: 0,
  ratePressedAt: Number.NEGATIVE_INFINITY,
  limitPressedAt: Number.NEGATIVE_INFINITY,
  latencyEmaMs: undefined,
  latencyBaseMs: undefined,
  latencyBaseAt: now,
  latencySamples: 0,
  headerCeiling: undefined,
  headerAt: Number.NEGATIVE_INFINITY,
  headerRefill: undefined,
  tokensPerRequest: undefined,
  lastReportAt: now,
  ownDelayTotalMs: 0,
  deliveredAt: now,
  delivered: 0,
  deliveredPrev: undefined,
  pressedSustained: undefined,
  probeDoublings: 0,
  okActiveMax: 0,
  concKnee: undefined,
  concDoublings: 0,
  concFrom: Number.NEGATIVE_INFINITY
})

/** Counts one successful answer at `now` in the delivery windows. */
const countDelivered = (s: AimdState, now: number): void => {
  if (now >= s.deliveredAt + 2 * SUSTAIN_WINDOW_MS) {
    // a window or more without answers
    s.deliveredPrev = 0
    s.deliveredAt = now
    s.delivered = 0
  } else if (now >= s.deliveredAt + SUSTAIN_WINDOW_MS) {
    s.deliveredPrev = s.delivered
    s.deliveredAt += SUSTAIN_WINDOW_MS
    s.delivered = 0
  }
  s.delivered++
}

/**
 * The rate the server delivered lately (successful answers per second over the current
 * delivery window and the previous one), or `undefined` before a second of answers. The
 * windows end at the last report heard (an answer, a 429, a failure), not at `now`: time in
 * which nobody asked the server (the end of a run: its last pipelines finishing, the run
 * closing; a key idle mid-run) is not time in which it refused to deliver (issue 18: the end
 * of a run printed 21.04 req/s against a limit of 25 the server met to its last answer). A
 * server that keeps answering 429s or failures moves that end on, so its sustained rate falls.
 *
 * @internal
 */
export const sustainedRate = (s: AimdState, now: number): number | undefined => {
  const end = Math.min(now, s.lastReportAt)
  if (end >= s.deliveredAt + 2 * SUSTAIN_WINDOW_MS) return 0
  const inCurrent = Math.max(0, end - s.deliveredAt)
  if (s.deliveredPrev === undefined) return inCurrent >= 1000 ? (s.delivered * 1000) / inCurrent : undefined
  return ((s.deliveredPrev + s.delivered) * 1000) / (SUSTAIN_WINDOW_MS + inCurrent)
}

/** Whether the headers' cap is recent enough to hold (a server that stops sending them). */
const headerFresh = (s: AimdState, p: AimdParams, now: number): boolean =>
  s.headerCeiling !== undefined && now - s.headerAt <= 4 * p.holdMs

/**
 * The request rate in force at `now`: the AIMD rate, capped by the headers' allowance while
 * the last one is fresh.
 *
 * @internal
 */
export const effectiveRate = (s: AimdState, p: AimdParams, now: number): number =>
  headerFresh(s, p, now) ? Math.max(p.minRate, Math.min(s.rate, s.headerCeiling!)) : s.rate

/** How long a resource counts as "held back by us" after an acquire found it so. */
const pressWindowMs = (s: AimdState, p: AimdParams): number => Math.max(p.holdMs, 2 * (s.latencyEmaMs ?? 0))

/** Whether acquires were held back by the rate or the window lately (demand above the supply). */
const isPressed = (s: AimdState, p: AimdParams, now: number): boolean =>
  now - Math.max(s.ratePressedAt, s.limitPressedAt) <= pressWindowMs(s, p)

const refill = (s: AimdState, p: AimdParams, now: number): void => {
  const rate = effectiveRate(s, p, now)
  const cap = Math.max(1, (rate * p.burstMs) / 1000)
  if (now > s.tokensAt) {
    s.tokens = Math.min(cap, s.tokens + (rate * (now - s.tokensAt)) / 1000)
    s.tokensAt = now
  } else if (s.tokens > cap) s.tokens = cap
}

/**
 * Whether a resource with `active` leases may take one more at `now`: `true`; `"window"` when
 * the concurrency window is full (a release will wake the waiter); or the epoch ms at which the
 * pacing allows the next request. A refusal marks the resource as held back by us (what lets
 * it grow).
 *
 * @internal
 */
export const admit = (s: AimdState, p: AimdParams, active: number, now: number): true | "window" | number => {
  if (active >= Math.max(1, Math.floor(s.limit))) {
    s.limitPressedAt = now
    return "window"
  }
  refill(s, p, now)
  if (s.tokens >= 1) return true
  s.ratePressedAt = now
  return now + Math.max(1, Math.ceil(((1 - s.tokens) * 1000) / effectiveRate(s, p, now)))
}

/**
 * Spends one request of the pacing bucket (the resource was just leased).
 *
 * @internal
 */
export const charge = (s: AimdState): void => {
  s.tokens -= 1
}

/**
 * The request rate a response's rate-limit headers allow (requests per second), given the
 * leases `active` now and the tokens a request uses (for the token limit), or `undefined`
 * when they name no remaining budget. Per limit: the refill rate `(limit − remaining) / reset`
 * (the headers' reset is the time until the limit is full again) plus the remaining budget,
 * less what is in flight, spread over the time to reset (at least one second); no cap from a
 * limit that reads full now (a reset of 0 or past, or `remaining ≥ limit`: nothing says how
 * fast it refills); the smaller of the requests' and the tokens' (converted by
 * `tokensPerRequest`).
 *
 * @internal
 */
export const headerCeiling = (
  status: RateLimitStatus,
  active: number,
  tokensPerRequest: number | undefined
): number | undefined => {
  const one = (l: LimitStatus | undefined, inFlight: number): number | undefined => {
    if (l === undefined || l.remaining === undefined) return undefined
    // a limit that reads full now (its reset is now or past, or nothing of it is used) says
    // nothing about the refill: no cap from it. Capping it at the remaining budget over a
    // second (what the rule below gives then) held a key at `remaining − in flight` per second
    // while its bucket stayed full: an RFC 3339 reset to the second (Anthropic's), or one a
    // loaded client reads a few ms late, reads as 0 for any bucket that refills within the
    // second (issue 18: ~9 req/s for seconds against a limit of 25, 0.83 of it used)
    if (l.resetMs === undefined || l.resetMs <= 0 || (l.limit !== undefined && l.remaining >= l.limit)) return undefined
    const horizonMs = Math.max(1000, l.resetMs)
    const refillPerS = l.limit !== undefined ? ((l.limit - l.remaining) * 1000) / l.resetMs : 0
    const spare = Math.max(0, l.remaining - inFlight)
    // nothing left and no refill known: one request per reset, never zero
    return Math.max(refillPerS + (spare * 1000) / horizonMs, 1000 / horizonMs)
  }
  const inFlight = Math.max(0, active - 1)
  const req = one(status.requests, inFlight)
  const tpr = tokensPerRequest !== undefined && tokensPerRequest > 0 ? tokensPerRequest : undefined
  const tok = tpr === undefined ? undefined : one(status.tokens, inFlight * tpr)
  const tokReq = tok === undefined || tpr === undefined ? undefined : tok / tpr
  if (req === undefined) return tokReq
  return tokReq === undefined ? req : Math.min(req, tokReq)
}

/**
 * The refill rate a response's rate-limit headers imply (requests per second): per limit
 * `(limit − remaining) / reset` (what was used of it, refilled by the time it reads full: a
 * token bucket's rate, whatever its size), the smaller of the requests' and the tokens'
 * (converted by `tokensPerRequest`); `undefined` when no limit names all three, or each reads
 * full now (a reset of 0 or past, `remaining ≥ limit`).
 *
 * @internal
 */
export const headerRefill = (status: RateLimitStatus, tokensPerRequest: number | undefined): number | undefined => {
  const one = (l: LimitStatus | undefined): number | undefined =>
    l === undefined || l.limit === undefined || l.remaining === undefined || l.resetMs === undefined ||
      l.resetMs <= 0 || l.remaining >= l.limit
      ? undefined
      : ((l.limit - l.remaining) * 1000) / l.resetMs
  const req = one(status.requests)
  const tpr = tokensPerRequest !== undefined && tokensPerRequest > 0 ? tokensPerRequest : undefined
  const tok = tpr === undefined ? undefined : one(status.tokens)
  const tokReq = tok === undefined || tpr === undefined ? undefined : tok / tpr
  if (req === undefined) return tokReq
  return tokReq === undefined ? req : Math.min(req, tokReq)
}

/**
 * A multiplicative decrease at `now` (at most one per `holdMs`: later signals within it are
 * the same congestion event, except a 429 of a request leased after the last cut, `leasedAt`,
 * which was refused at the lowered allowance): the window is cut by `decrease`; on a rate limit the rate is cut
 * by `decrease` too, but never below `goodputFloor` of the rate the server delivered since the
 * previous decrease (measured over at least `holdMs`), and the pacing bucket is emptied. A
 * latency decrease cuts the window only (queueing is a concurrency problem). Returns whether
 * it decreased.
 *
 * @internal
 */
export const decrease = (
  s: AimdState,
  p: AimdParams,
  now: number,
  reason: DecreaseReason,
  leasedAt?: number | undefined,
  pauseMs?: number | undefined
): boolean => {
  // the same congestion event: within a hold of the last cut, unless the refused request was
  // sent after that cut (it saw the lowered allowance and was still refused: NewReno's rule,
  // RFC 6582, of one reduction per window of data sent before it)
  const sentAfter = reason === "rate_limit" && leasedAt !== undefined && leasedAt > s.lastDecreaseAt
  if (now - s.lastDecreaseAt < p.holdMs && !sentAfter) return false
  const current = effectiveRate(s, p, now)
  if (reason === "rate_limit" && s.phase === "slowStart" && s.knee === undefined && s.okInEpoch === 0) {
    // refused before any answer, with nothing learned (a run, or a resume whose saved state
    // knew nothing yet, that starts inside a 429 storm): no measure of the limit, so no knee
    // and no end of slow start; the server's pause is the pool's throttle window's business.
    // Taking the conservative start for a knee made the rate crawl at 1–2 requests/s for
    // seconds after the window, and reach the limit 2.5× later than a run the storm met
    // after a few seconds (issue 18 F4; bench/adaptive-storm-start.ts)
    s.rate = Math.max(p.minRate, Math.min(current, Math.max(p.initialRate, current * p.decrease)))
    s.limit = Math.max(1, s.limit * p.decrease)
    s.tokens = Math.min(s.tokens, 0)
    s.tokensAt = now
    return recordCut(s, now, reason)
  }
  s.limitThresh = Math.max(1, s.limit * p.decrease)
  s.limit = s.limitThresh
  if (reason === "rate_limit") {
    // refused at an in-flight count the server served: a rate limit, not a concurrency one
    s.concKnee = undefined
    s.concDoublings = 0
    const elapsedMs = now - s.epochAt
    const goodput = elapsedMs >= p.holdMs ? (s.okInEpoch * 1000) / elapsedMs : undefined
    const floor = goodput === undefined ? 0 : p.goodputFloor * goodput
    // the knee: what the server delivered in the epoch the 429 ended, but at most `decrease`
    // below the previous knee (an epoch spent paused by a Retry-After, or short of demand,
    // delivers little without the limit having fallen: BBR discards such samples)
    const measured = goodput !== undefined ? Math.min(current, goodput) : current
    const band = 1 - p.goodputFloor
    // ... or the sustained rate just before the cut (the delivery windows, 5 to 10 s, most of
    // them spent probing at or past the limit), less the knee's band for the server's burst
    // in it: the epoch's average alone counts the climb back from the last cut and the
    // Retry-After pause, and settled at 0.85 of a small bucket's limit (issue 18 F2)
    const sustained = sustainedRate(s, now)
    const beforeCut = goodput !== undefined && sustained !== undefined
      ? Math.max(measured, Math.min(current, (1 - band) * sustained))
      : measured
    const previous = s.knee
    s.knee = previous === undefined ? beforeCut : Math.max(beforeCut, p.decrease * previous)
    // the knee held: refused only when probing past its band, and measured again no more than
    // two bands below it (a knee that rose held too: the probe found the limit at least
    // there): the next plateau lasts twice as long (up to 2^MAX_PROBE_DOUBLINGS × `convexMs`);
    // refused at or below the band, or a knee that fell (the limit fell): reset. (Resetting on
    // a knee that rose as well held 0.89–0.91 of a 10 requests/s limit, against 0.93–0.94.)
    // Only a probe that cost a pause doubles it past UNPAUSED_PROBE_DOUBLINGS: a 429 asking for
    // a wait of at least a hold (a Retry-After of whole seconds) silences the key that long,
    // which is what the long plateau saves; a bare 429 or a wait of milliseconds costs one
    // request, and a plateau of 24 s after it only delays finding a limit that rose
    // (bench/adaptive-raise.ts, signals none: 25 s instead of 12 s when the raise fell early
    // in a long plateau)
    const probed = previous !== undefined && current > (1 + band) * previous
    const held = probed && s.knee >= (1 - 2 * band) * previous
    const paused = pauseMs !== undefined && pauseMs >= p.holdMs
    s.probeDoublings = held ? Math.min(paused ? MAX_PROBE_DOUBLINGS : UNPAUSED_PROBE_DOUBLINGS, s.probeDoublings + 1) : 0
    const restart = Math.min(current, Math.max(current * p.decrease, floor))
    // past slow start, never restart above the knee (CUBIC's plateau is the last loss point,
    // RFC 9438 §4.2; here measured as BBR measures it): restarting above it, the next refusal
    // is only the server's burst away
    s.rate = Math.max(p.minRate, s.phase === "avoidance" && goodput !== undefined ? Math.min(restart, s.knee) : restart)
    s.aboveSince = undefined
    s.tokens = Math.min(s.tokens, 0)
    s.tokensAt = now
  } else {
    s.rate = Math.max(p.minRate, Math.min(s.rate, Math.max(current, p.minRate)))
  }
  // a latency cut is the window's business: the rate keeps its phase
  if (reason === "rate_limit") s.phase = "avoidance"
  return recordCut(s, now, reason)
}

/** Records a cut made at `now` for `reason`: the last decrease, the count, a new epoch. Returns `true`. */
const recordCut = (s: AimdState, now: number, reason: DecreaseReason): true => {
  s.lastDecreaseAt = now
  s.concFrom = now
  s.lastDecreaseReason = reason
  s.decreases++
  s.epochAt = now
  s.okInEpoch = 0
  s.okActiveMax = 0
  return true
}

/**
 * How fast the rate grows toward a refill the headers announce well above it: ×2 per this
 * many ms of answers (slow start's doubling at the pace of its limited form past
 * {@link LIMITED_SLOW_START}, see {@link liftedByHeaders}).
 */
const LIFT_DOUBLING_MS = 1000

/**
 * The headers' lift, for one successful answer at `now` past slow start: when the last
 * answer's headers are fresh and the refill they imply (`headerRefill`) is more than
 * `1 + 2 × (1 − goodputFloor)` times the rate `r`, the rate doubles per
 * {@link LIFT_DOUBLING_MS} of answers up to `goodputFloor` of that refill (never past it), and
 * the plateau is over (its clock starts again at the new rate). Returns whether it lifted.
 * A server that says how much room it has is not probed for it (OpenAI's cookbook: pace by
 * the headers): a limit raised mid-run was found only by the convex climb, 16–18 s
 * (bench/adaptive-raise.ts, signals headers), and a refill that does not exceed the rate by
 * two bands (a bucket in use at its limit reads its own rate) lifts nothing.
 */
const liftedByHeaders = (s: AimdState, p: AimdParams, now: number, r: number): boolean => {
  const band = 1 - p.goodputFloor
  const refill = headerFresh(s, p, now) ? s.headerRefill : undefined
  // started by a refill two bands above the rate (or the knee, once the lift is under way),
  // carried on up to `goodputFloor` of it
  if (refill === undefined || !(refill > (1 + 2 * band) * Math.min(r, s.knee ?? r)) || !(p.goodputFloor * refill > r)) return false
  s.rate = Math.min(p.goodputFloor * refill, r * Math.pow(2, 1000 / (LIFT_DOUBLING_MS * r)))
  s.aboveSince = undefined
  s.probeDoublings = 0
  return true
}

/**
 * The additive increase for one successful answer at `now`, when an acquire was held back by
 * us recently (RFC 7661). The rate: in slow start ×2 per `slowStartMs` of answers; after, by
 * `increase × knee` per second of answers (each answer adds that over the rate), `probe`
 * times as fast within ±(1 − `goodputFloor`) of the knee, and past that band by
 * `increase × rate` per second times `min(1, probe × (1 + (t / convexMs)²))`, t the time since
 * the rate left the band (a limit that held is probed slowly; one that rose is found). The window: +1 per answer in slow start
 * (below its threshold), +1/window per answer after (one per window of answers, RFC 5681).
 * Both capped: the rate by `maxRate` and twice the headers' allowance, the window by
 * `capacity`.
 *
 * @internal
 */
export const increase = (s: AimdState, p: AimdParams, now: number, capacity: number): void => {
  const press = pressWindowMs(s, p)
  if (now - s.ratePressedAt <= press) {
    const r = Math.max(s.rate, p.minRate)
    if (s.phase === "slowStart") {
      // ×2 per `slowStartMs` up to LIMITED_SLOW_START × the initial rate, then ×2 per
      // CSS_GROWTH_DIVISOR × `slowStartMs` (limited slow start, RFC 3742; HyStart++'s
      // conservative slow start, RFC 9406 §4.2, grows at 1/4 of slow start's pace): a
      // server's burst hides its limit until spent, and the faster the rate is still growing
      // then, the further past the limit it is at the first 429 (issue 18)
      const doublingMs = r < LIMITED_SLOW_START * p.initialRate ? p.slowStartMs : CSS_GROWTH_DIVISOR * p.slowStartMs
      s.rate = r * Math.pow(2, 1000 / (doublingMs * r))
    } else if (liftedByHeaders(s, p, now, r)) {
      // done: the headers announce room well above the rate
    } else {
      // gentle within ±(1 − goodputFloor) of the knee; past it the knee is stale: fast again
      const knee = s.knee ?? r
      const band = 1 - p.goodputFloor
      const near = r >= (1 - band) * knee && r <= (1 + band) * knee
      const above = r > (1 + band) * knee
      // the convex clock runs from when the rate reached the knee's band and keeps running
      // past it (issue 18 trial: a raised limit took 20–38 s to find, 5 s of them spent in
      // the band at the probe step before the convex region's clock even started)
      // (from a convex period after reaching the band: a limit that held is probed gently)
      if (!near && !above) s.aboveSince = undefined
      else if (s.aboveSince === undefined) s.aboveSince = above ? now : now + p.convexMs * Math.pow(2, s.probeDoublings)
      // below the band: the full step (concave approach); within it: the probe step (the
      // plateau); past it: from the probe step, growing with the square of the time spent
      // past it up to the full step (CUBIC's convex region, RFC 9438 §4.5: a limit that held
      // is probed slowly at first, one that rose is found in seconds)
      const convex = s.aboveSince === undefined || now <= s.aboveSince
        ? p.probe
        : Math.min(1, p.probe * (1 + ((now - s.aboveSince) / p.convexMs) ** 2))
      const mult = near || above ? convex : 1
      s.rate = r + (p.increase * Math.max(knee, r) * mult) / r
      // a knee that held: the plateau holds the rate within the band until the probe is due
      // (the probe step alone would creep past the band, and past the limit, meanwhile)
      if (s.probeDoublings > 0 && s.aboveSince !== undefined && now <= s.aboveSince) {
        s.rate = Math.min(s.rate, Math.max(r, (1 + band) * knee))
      }
    }
    let cap = p.maxRate
    if (headerFresh(s, p, now)) cap = Math.min(cap, 2 * s.headerCeiling!)
    s.rate = Math.max(p.minRate, Math.min(s.rate, Math.max(cap, p.minRate)))
  }
  if (now - s.limitPressedAt <= press) {
    const grown = Math.min(capacity, s.limit < s.limitThresh ? s.limit + 1 : s.limit + 1 / s.limit)
    // a concurrency limit learned from 429s: the window stays at it for a plateau that doubles
    // each time a probe past it was refused again, then grows (a probe of one more lease)
    const plateauEnd = s.concFrom + p.convexMs * Math.pow(2, s.concDoublings)
    s.limit = s.concKnee !== undefined && now < plateauEnd ? Math.max(s.limit, Math.min(grown, s.concKnee)) : grown
  }
}

/**
 * A 429 judged a refusal of the in-flight count (tester18f F3: a server allowing 3 requests at
 * once, ~300 ms each, about 10 requests/s, was held at 6 requests/s: each such 429 cut the
 * rate and set a rate knee, and the window, never binding, was not learned): refused at
 * `active` leases in flight (the refused one included) when every successful answer of the
 * epoch (at least `active` of them) was served at fewer, or at more than the concurrency knee
 * already learned. Then the window is set to `active − 1`, what the server serves at once;
 * the rate is not cut, and is raised to what that window admits at the current latency
 * (Little's law: rate = in flight / latency, plus the knee's band twice) so that the pacing
 * does not hold the key back; the rate's knee and plateau are left as they were. One such
 * cut per hold, unless the refused request was leased after the last cut (as
 * {@link decrease}). Returns whether the 429 was so judged (and so handled).
 *
 * @internal
 */
export const concurrencyRefusal = (
  s: AimdState,
  p: AimdParams,
  now: number,
  active: number,
  leasedAt: number | undefined
): boolean => {
  const n = active
  const above = s.okInEpoch >= n && n > s.okActiveMax
  const pastKnee = s.concKnee !== undefined && n - 1 >= s.concKnee
  if (n < 2 || !(above || pastKnee)) return false
  const sentAfter = leasedAt !== undefined && leasedAt > s.lastDecreaseAt
  if (now - s.lastDecreaseAt < p.holdMs && !sentAfter) return true
  const knee = n - 1
  // the knee held: a probe past it refused again (the plateau before the next one doubles)
  s.concDoublings = s.concKnee !== undefined && knee >= s.concKnee ? Math.min(MAX_PROBE_DOUBLINGS, s.concDoublings + 1) : 0
  s.concKnee = knee
  s.limit = Math.max(1, Math.min(s.limit, knee))
  s.limitThresh = s.limit
  const band = 1 - p.goodputFloor
  if (s.latencyEmaMs !== undefined && s.latencyEmaMs > 0) {
    s.rate = Math.min(p.maxRate, Math.max(s.rate, ((1 + 2 * band) * knee * 1000) / s.latencyEmaMs))
  }
  s.phase = "avoidance"
  return recordCut(s, now, "rate_limit")
}

/**
 * What one lease report does (see the module header): a rate limit decreases; a success
 * feeds the delivery count, the latency average and baseline, decreases when the average
 * exceeds `latencyTolerance` × the baseline + `latencySlackMs` (the slack keeps the jitter of a
 * fast endpoint from reading as congestion), else increases; other failures change nothing.
 * The latency read is the answer time less `ownDelayMs`, the time our own event loop was
 * stalled during it (a CPU-starved client is not a congested server).
 * Headers, when present, set the pacing cap; reported `usage.tokens` feeds the tokens per
 * request.
 *
 * @internal
 */
export const onReport = (
  s: AimdState,
  p: AimdParams,
  r: {
    readonly now: number
    readonly capacity: number
    readonly active: number
    readonly ok: boolean | undefined
    readonly latencyMs: number | undefined
    readonly usage: Readonly<Record<string, number>> | undefined
    readonly rateLimit: RateLimitStatus | undefined
    readonly errorClass: string | undefined
    /** The wait the error asked for (ms: a Retry-After), when it named one. */
    readonly retryAfterMs?: number | undefined
    /** When the reported lease was granted (epoch ms), when known. */
    readonly leasedAt?: number | undefined
    /**
     * Of `latencyMs`, the milliseconds our own event loop was stalled (see `loopDelay.ts`):
     * time the answer waited on this process, not on the server; taken out before the
     * latency rule reads it.
     */
    readonly ownDelayMs?: number | undefined
  }
): void => {
  s.lastReportAt = Math.max(s.lastReportAt, r.now)
  const tokens = r.usage?.["tokens"]
  if (typeof tokens === "number" && Number.isFinite(tokens) && tokens > 0) {
    s.tokensPerRequest = s.tokensPerRequest === undefined ? tokens : EMA_ALPHA * tokens + (1 - EMA_ALPHA) * s.tokensPerRequest
  }
  if (r.rateLimit !== undefined) {
    const c = headerCeiling(r.rateLimit, r.active, s.tokensPerRequest)
    // `undefined`: the headers name no budget, or only limits that read full now (no cap
    // then, not the last answer's)
    s.headerCeiling = c
    s.headerRefill = headerRefill(r.rateLimit, s.tokensPerRequest)
    s.headerAt = c === undefined && s.headerRefill === undefined ? Number.NEGATIVE_INFINITY : r.now
    // a server that announces its budget paces the rate by it: the long plateau of a knee that
    // held is for servers that say nothing (bench/adaptive-raise.ts, signals headers: a raised
    // limit found in 18–21 s instead of 9 s with it; the headers of a bucket reading full set
    // no cap, so their room cannot be read from the cap)
    if (s.probeDoublings > 0 && (r.rateLimit.requests?.remaining !== undefined || r.rateLimit.tokens?.remaining !== undefined)) {
      s.probeDoublings = 0
      s.aboveSince = undefined
    }
  }
  if (r.errorClass === "rate_limit") {
    s.rateLimitedTotal++
    if (concurrencyRefusal(s, p, r.now, r.active, r.leasedAt)) return
    decrease(s, p, r.now, "rate_limit", r.leasedAt, r.retryAfterMs)
    return
  }
  if (r.ok === false || r.errorClass !== undefined) return
  s.okTotal++
  s.okInEpoch++
  s.okActiveMax = Math.max(s.okActiveMax, r.active)
  countDelivered(s, r.now)
  if (isPressed(s, p, r.now)) s.pressedSustained = sustainedRate(s, r.now)
  if (r.latencyMs !== undefined && Number.isFinite(r.latencyMs) && r.latencyMs >= 0) {
    // the server's share of the answer time: our own loop's stall taken out
    const own = r.ownDelayMs !== undefined && r.ownDelayMs > 0 ? Math.min(r.ownDelayMs, r.latencyMs) : 0
    const latencyMs = r.latencyMs - own
    s.ownDelayTotalMs += own
    s.latencyEmaMs = s.latencyEmaMs === undefined ? latencyMs : EMA_ALPHA * latencyMs + (1 - EMA_ALPHA) * s.latencyEmaMs
    s.latencySamples++
    // the baseline: the lowest average seen, forgotten after BASE_TTL_MS (BBR's min-RTT
    // expiry) so that a provider that became lastingly slower is not cut down to one lease
    if (
      s.latencySamples >= 5 &&
      (s.latencyBaseMs === undefined || s.latencyEmaMs < s.latencyBaseMs || r.now - s.latencyBaseAt > BASE_TTL_MS)
    ) {
      s.latencyBaseMs = s.latencyEmaMs
      s.latencyBaseAt = r.now
    }
    if (
      s.latencySamples >= 10 && s.latencyBaseMs !== undefined &&
      s.latencyEmaMs > p.latencyTolerance * s.latencyBaseMs + p.latencySlackMs && decrease(s, p, r.now, "latency")
    ) return
  }
  increase(s, p, r.now, r.capacity)
}

/**
 * What paces the resource at `now` (`describe`'s `pacedBy`): `headers` while the last
 * answer's rate-limit headers are fresh (within 4 holds) and their allowance is within twice
 * the AIMD rate: below it they cap the rate in force; from it up to twice it they cap its
 * growth (`increase` never lets the rate past twice the allowance), so the rate follows what
 * the server announces. `aimd` otherwise: no headers, stale ones, or an allowance so far above
 * the rate that it bounds nothing (a daily budget, a per-minute limit read as a burst).
 *
 * @internal
 */
export const pacedBy = (s: AimdState, p: AimdParams, now: number): "headers" | "aimd" =>
  headerFresh(s, p, now) && s.headerCeiling! <= 2 * s.rate ? "headers" : "aimd"

const round = (x: number, digits = 2): number => {
  const f = Math.pow(10, digits)
  return Math.round(x * f) / f
}

/**
 * The state as strict JSON for snapshots, `report` and the dashboard: `rate` (the allowance:
 * requests/s the pacing lets through, which may exceed what the server accepts), `sustained`
 * (requests/s the server answered successfully over the last 5 to 10 s, as of the last time
 * acquires were held back, demand above the supply; or null before a second of answers), `concurrency` (the window, whole leases), `phase`, `pacedBy` (`headers` while fresh
 * headers cap the rate or its growth, else `aimd`: see {@link pacedBy}), `knee` (the sustained rate at the last decrease, or null),
 * `concurrencyLimit` (the server's concurrency limit learned from 429s, whole leases: the
 * concurrency knee, see {@link concurrencyRefusal}; null when none is known),
 * `decreases`, `lastDecrease` (`{ reason, at }` or null), `rateLimited` (429s heard),
 * `latencyEmaMs`, `latencyBaseMs` (both of the server's share of the answer time),
 * `loopStallMs` (answer time taken out as our own event loop's stall, in all).
 *
 * @internal
 */
export const describe = (s: AimdState, p: AimdParams, now: number): Json => {
  const rate = effectiveRate(s, p, now)
  // while demand is below the supply (a run's last pipelines, some retrying after a backoff;
  // a key the run no longer needs) the deliveries measure the demand, not the server: the
  // figure is the one of the last time the key was pressed (issue 18: a run's tail printed
  // 13.13 req/s against a limit of 25 that the server met to the end)
  const live = sustainedRate(s, now)
  const sustained = isPressed(s, p, now) ? live : s.pressedSustained ?? live
  return {
    rate: round(rate),
    sustained: sustained === undefined ? null : round(sustained),
    concurrency: Math.max(1, Math.floor(s.limit)),
    concurrencyLimit: s.concKnee === undefined ? null : s.concKnee,
    phase: s.phase,
    pacedBy: pacedBy(s, p, now),
    knee: s.knee === undefined ? null : round(s.knee),
    decreases: s.decreases,
    lastDecrease: s.lastDecreaseReason === undefined ? null : { reason: s.lastDecreaseReason, at: s.lastDecreaseAt },
    rateLimited: s.rateLimitedTotal,
    latencyEmaMs: s.latencyEmaMs === undefined ? null : round(s.latencyEmaMs, 1),
    latencyBaseMs: s.latencyBaseMs === undefined ? null : round(s.latencyBaseMs, 1),
    loopStallMs: Math.round(s.ownDelayTotalMs)
  }
}

/**
 * What of the learned state is carried across a resume (see `docs/pools.md`, "Across a
 * resume"): the rate and window with their thresholds, the phase, the knee, the concurrency
 * knee learned from 429s with its doublings (`concKnee`, `concDoublings`; absent when none is
 * known, and in states saved before they were kept), the decreases and the latency baseline.
 * Counters of the epoch and the pacing bucket are not: they start afresh. Infinite values are
 * written as `null` (strict JSON).
 *
 * @internal
 */
export const save = (s: AimdState): Json => ({
  v: 1,
  phase: s.phase,
  rate: s.rate,
  limit: s.limit,
  limitThresh: Number.isFinite(s.limitThresh) ? s.limitThresh : null,
  knee: s.knee ?? null,
  decreases: s.decreases,
  lastDecreaseAt: Number.isFinite(s.lastDecreaseAt) ? s.lastDecreaseAt : null,
  lastDecreaseReason: s.lastDecreaseReason ?? null,
  latencyBaseMs: s.latencyBaseMs ?? null,
  tokensPerRequest: s.tokensPerRequest ?? null,
  lastReportAt: Number.isFinite(s.lastReportAt) ? s.lastReportAt : null,
  ...(s.concKnee === undefined ? {} : { concKnee: s.concKnee, concDoublings: s.concDoublings })
})

const finiteOr = <A>(u: unknown, otherwise: A): number | A => (typeof u === "number" && Number.isFinite(u) ? u : otherwise)

/**
 * A state from what {@link save} wrote, on a resource of `capacity` at `now`: the learned rate
 * clamped to `[minRate, maxRate]`, the window to `[1, capacity]`, a fresh epoch and pacing
 * bucket; a concurrency knee (a whole number of leases, at least 1) with its doublings, its
 * plateau starting again at `now` (the window does not probe past it before a plateau of
 * traffic, as in the run that learned it). `undefined` when the value is not a version-1
 * saved state (nothing is applied).
 *
 * @internal
 */
export const restore = (u: unknown, p: AimdParams, capacity: number, now: number): AimdState | undefined => {
  if (typeof u !== "object" || u === null || Array.isArray(u)) return undefined
  const o = u as Record<string, unknown>
  const rate = finiteOr(o["rate"], undefined)
  const limit = finiteOr(o["limit"], undefined)
  if (o["v"] !== 1 || rate === undefined || limit === undefined || rate <= 0 || limit <= 0) return undefined
  if (o["phase"] !== "slowStart" && o["phase"] !== "avoidance") return undefined
  const s = initial(p, capacity, now)
  s.phase = o["phase"]
  s.rate = Math.min(p.maxRate, Math.max(p.minRate, rate))
  s.limit = Math.max(1, Math.min(capacity, limit))
  s.limitThresh = finiteOr(o["limitThresh"], Number.POSITIVE_INFINITY)
  s.knee = finiteOr(o["knee"], undefined)
  s.decreases = Math.max(0, Math.floor(finiteOr(o["decreases"], 0)))
  s.lastDecreaseAt = finiteOr(o["lastDecreaseAt"], Number.NEGATIVE_INFINITY)
  const reason = o["lastDecreaseReason"]
  s.lastDecreaseReason = reason === "rate_limit" || reason === "latency" ? reason : undefined
  s.latencyBaseMs = finiteOr(o["latencyBaseMs"], undefined)
  s.tokensPerRequest = finiteOr(o["tokensPerRequest"], undefined)
  const concKnee = finiteOr(o["concKnee"], undefined)
  if (concKnee !== undefined && concKnee >= 1 && Number.isInteger(concKnee)) {
    s.concKnee = concKnee
    s.concDoublings = Math.min(MAX_PROBE_DOUBLINGS, Math.max(0, Math.floor(finiteOr(o["concDoublings"], 0))))
    s.concFrom = now
  }
  return recover(s, p, capacity, finiteOr(o["lastReportAt"], Number.NEGATIVE_INFINITY), now)
}

/**
 * A restored state's recovery for the time nobody probed (issue 18): from the later of the
 * last report and the end of the last cut's congestion event (a hold after it), a rate below
 * the knee regains `increase × knee` per second, as the additive increase would have, up to
 * the knee; when what remains knows nothing above the conservative start, the resource starts
 * afresh (slow start from `initialRate`), keeping the window, the latency baseline, the tokens
 * per request and the concurrency knee learned from 429s (a limit of the server's, not a
 * depressed allowance: the window grows up to it in slow start, then waits out its plateau).
 * A resume within the hold keeps the cut (the pool's restored throttle window, if any, holds
 * the key meanwhile). TCP's analogue: a cached ssthresh reused by a later connection that
 * starts in slow start (RFC 9040 §8, temporal sharing).
 *
 * @internal
 */
export const recover = (s: AimdState, p: AimdParams, capacity: number, lastReportAt: number, now: number): AimdState => {
  const from = Math.max(lastReportAt, s.lastDecreaseAt + p.holdMs)
  const idleS = (now - from) / 1000
  if (!(idleS > 0) || s.phase !== "avoidance") return s
  const knee = s.knee ?? s.rate
  if (s.rate < knee) s.rate = Math.min(knee, s.rate + p.increase * knee * idleS)
  if (s.rate <= p.initialRate) {
    const fresh = initial(p, capacity, now)
    fresh.limit = Math.max(fresh.limit, Math.min(capacity, s.limit))
    fresh.latencyBaseMs = s.latencyBaseMs
    fresh.tokensPerRequest = s.tokensPerRequest
    if (s.concKnee !== undefined) {
      fresh.concKnee = s.concKnee
      fresh.concDoublings = s.concDoublings
      fresh.concFrom = s.concFrom
      fresh.limitThresh = s.concKnee
    }
    fresh.decreases = s.decreases
    fresh.lastDecreaseAt = s.lastDecreaseAt
    fresh.lastDecreaseReason = s.lastDecreaseReason
    return fresh
  }
  return s
}
