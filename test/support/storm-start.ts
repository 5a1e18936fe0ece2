/**
 * Issue 18 F4: a model of how fast `adaptive` reaches a server's limit after a 429 storm
 * (Retry-After 12 s on every request from `stormFromMs` to `stormToMs`), on the pure rules of
 * `adaptive.ts` in simulated time (ms; no clock at all): a server answering 200 after 20 ms
 * while under 20 requests/s (a 1 s window), else 429 (Retry-After 1 s); the pool's throttle
 * modelled as "nothing sent until the Retry-After ends", then one request until an answer
 * (probing). `reachS`: the simulated seconds from the end of the throttle until a 1 s window
 * of answers reaches 90 % of the limit; `rate5sAfter`: the rate in force 5 s after it.
 * Used by `bench/adaptive-storm-start.ts` and `test/services/adaptive.stormStart.test.ts`.
 */
import * as A from "../../src/services/internal/adaptive.js"

const LIMIT = 20
/** What {@link stormRecovery} measured (see the module header). */
export interface StormRecovery {
  readonly throttleEndS: number
  readonly reachS: number | null
  readonly rate5sAfter: number | null
  readonly knee: number | null
}

/**
 * The model run once: a 429 storm (Retry-After 12 s) from `stormFromMs` to `stormToMs`
 * (simulated ms from the state's start at 0), demand always above the supply.
 */
export const stormRecovery = (stormFromMs: number, stormToMs: number): StormRecovery => {
  const p = A.defaults
  const s = A.initial(p, 16, 0)
  const sent: Array<number> = []
  const answers: Array<number> = []
  const inFlight: Array<{ at: number; leasedAt: number; status: number }> = []
  let throttledUntil = 0
  let probing = false
  let throttleEnd: number | undefined
  let rate5: number | undefined
  for (let now = 0; now < 90_000; now += 5) {
    // answers due
    for (let i = inFlight.length - 1; i >= 0; i--) {
      const r = inFlight[i]!
      if (r.at > now) continue
      inFlight.splice(i, 1)
      if (r.status === 429) {
        A.onReport(s, p, { now, capacity: 16, active: inFlight.length, ok: false, latencyMs: 20, usage: undefined, rateLimit: undefined, errorClass: "rate_limit", leasedAt: r.leasedAt })
        const until = now + (now >= stormFromMs && now < stormToMs ? 12_000 : 1000)
        if (until > throttledUntil) throttledUntil = until
        probing = true
      } else {
        answers.push(now)
        probing = false
        A.onReport(s, p, { now, capacity: 16, active: inFlight.length, ok: true, latencyMs: 20, usage: undefined, rateLimit: undefined, errorClass: undefined, leasedAt: r.leasedAt })
      }
    }
    if (throttleEnd === undefined && throttledUntil > 0 && now >= throttledUntil && now >= stormToMs) throttleEnd = now
    if (throttleEnd !== undefined && rate5 === undefined && now >= throttleEnd + 5000) rate5 = A.effectiveRate(s, p, now)
    if (now < throttledUntil) continue
    // demand: always more than the supply
    for (;;) {
      if (probing && inFlight.length > 0) break
      const ok = A.admit(s, p, inFlight.length, now)
      if (ok !== true) break
      A.charge(s)
      const recent = sent.filter((t) => t > now - 1000).length
      const storm = now >= stormFromMs && now < stormToMs
      const status = storm || recent >= LIMIT ? 429 : 200
      if (status === 200) sent.push(now)
      inFlight.push({ at: now + 20, leasedAt: now, status })
      if (probing) break
    }
  }
  let reach: number | null = null
  for (let t = throttleEnd ?? 0; t < 89_000; t += 100) {
    if (answers.filter((x) => x >= t && x < t + 1000).length >= 0.9 * LIMIT) {
      reach = Number(((t + 1000 - (throttleEnd ?? 0)) / 1000).toFixed(1))
      break
    }
  }
  return {
    throttleEndS: (throttleEnd ?? 0) / 1000,
    reachS: reach,
    rate5sAfter: rate5 === undefined ? null : Number(rate5.toFixed(2)),
    knee: s.knee ?? null
  }
}

