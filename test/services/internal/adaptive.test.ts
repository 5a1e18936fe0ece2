import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as Aimd from "../../../src/services/internal/adaptive.js"

const p = Aimd.defaults

/** A success report at `now` with the given latency. */
const ok = (now: number, latencyMs = 100, extra: Partial<Parameters<typeof Aimd.onReport>[2]> = {}) => ({
  now,
  capacity: 64,
  active: 1,
  ok: true,
  latencyMs,
  usage: undefined,
  rateLimit: undefined,
  errorClass: undefined,
  ...extra
})
const limited = (now: number) => ({ ...ok(now), ok: false, latencyMs: 5, errorClass: "rate_limit" })

/**
 * Successes arriving at the allowed rate (the way a saturated resource sees them) for `ms` from
 * `from`, the resource held back by us all along; returns the end time.
 */
const clocked = (s: Aimd.AimdState, from: number, ms: number) => {
  let now = from
  for (;;) {
    const next = now + 1000 / s.rate
    if (next > from + ms + 1e-9) return now
    now = next
    s.ratePressedAt = now
    s.limitPressedAt = now
    Aimd.onReport(s, p, ok(now))
  }
}

/** `n` successes spread evenly over `ms` from `from`, the resource held back by us all along. */
const saturate = (s: Aimd.AimdState, from: number, ms: number, n: number, latencyMs = 100) => {
  for (let i = 1; i <= n; i++) {
    const now = from + (i * ms) / n
    s.ratePressedAt = now
    s.limitPressedAt = now
    Aimd.onReport(s, p, ok(now, latencyMs))
  }
}

describe("adaptive: the AIMD rules", () => {
  it("starts conservative: 2 requests/s, a window of 2 (never above the capacity)", () => {
    const s = Aimd.initial(p, 64, 0)
    assert.strictEqual(s.rate, 2)
    assert.strictEqual(s.limit, 2)
    assert.strictEqual(s.phase, "slowStart")
    assert.strictEqual(Aimd.initial(p, 1, 0).limit, 1)
  })

  it("slow start doubles the rate per 250 ms of successful traffic while acquires are held back", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 10
    // answers arriving at the allowed rate: ×2 per `slowStart` (250 ms), ×8 in 750 ms
    clocked(s, 0, 3 * p.slowStartMs)
    assert.approximately(s.rate, 80, 8)
  })

  it("a sender that is not held back by its allowance does not grow it (RFC 7661)", () => {
    const s = Aimd.initial(p, 64, 0)
    for (let i = 1; i <= 50; i++) Aimd.onReport(s, p, ok(i * 100))
    assert.strictEqual(s.rate, 2)
    assert.strictEqual(s.limit, 2)
  })

  it("a 429 cuts the rate and the window by 0.7, and ends slow start", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 40
    s.limit = 20
    Aimd.onReport(s, p, limited(500)) // less than `hold` since the start: no delivery estimate
    assert.approximately(s.rate, 28, 1e-9)
    assert.approximately(s.limit, 14, 1e-9)
    assert.strictEqual(s.phase, "avoidance")
    assert.strictEqual(s.lastDecreaseReason, "rate_limit")
    assert.strictEqual(s.decreases, 1)
    assert.isAtMost(s.tokens, 0, "the pacing bucket is emptied")
  })

  it("the cut never goes below 0.95 of what the server delivered since the previous cut (the knee)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 40
    saturate(s, 0, 2000, 72) // 36 answers/s delivered over 2 s
    const before = s.rate
    Aimd.onReport(s, p, limited(2000))
    assert.approximately(s.knee!, 36, 1e-9)
    assert.approximately(s.rate, Math.max(0.7 * before, 0.95 * 36), 1e-9)
  })

  it("429s within one hold (1 s) of a cut are the same congestion event: one cut", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 40
    Aimd.onReport(s, p, limited(100))
    Aimd.onReport(s, p, limited(600))
    Aimd.onReport(s, p, limited(1099))
    assert.strictEqual(s.decreases, 1)
    Aimd.onReport(s, p, limited(1100))
    assert.strictEqual(s.decreases, 2)
  })

  it("a 429 of a request leased after the last cut is a new congestion event: cut again at once (RFC 6582)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 40
    Aimd.onReport(s, p, limited(100))
    Aimd.onReport(s, p, { ...limited(300), leasedAt: 50 }) // sent before the cut: same event
    assert.strictEqual(s.decreases, 1)
    Aimd.onReport(s, p, { ...limited(300), leasedAt: 150 }) // sent after it, still refused
    assert.strictEqual(s.decreases, 2)
    assert.approximately(s.rate, 40 * 0.7 * 0.7, 1e-9)
  })

  it("after a cut the rate grows additively: +10 % of the knee per second, 10× slower near the knee", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 20
    s.rate = 10
    clocked(s, 0, 3000)
    assert.approximately(s.rate, 16, 0.2) // +0.1 × 20 per second
    s.rate = 19.5
    clocked(s, 3000, 5000)
    assert.approximately(s.rate, 20.5, 0.05) // +0.01 × 20 per second within ±5 % of the knee
  })

  it("the window grows by one per answer in slow start, by one per window of answers after", () => {
    const s = Aimd.initial(p, 64, 0)
    saturate(s, 0, 1000, 4)
    assert.strictEqual(s.limit, 6)
    s.phase = "avoidance"
    s.limitThresh = 6
    saturate(s, 1000, 1000, 6)
    assert.approximately(s.limit, 7, 0.1)
  })

  it("the window never exceeds the resource's capacity; the rate never exceeds maxRate", () => {
    const q = { ...p, maxRate: 5 }
    const s = Aimd.initial(q, 3, 0)
    for (let i = 1; i <= 100; i++) {
      s.ratePressedAt = i * 10
      s.limitPressedAt = i * 10
      Aimd.onReport(s, q, { ...ok(i * 10), capacity: 3 })
    }
    assert.strictEqual(s.limit, 3)
    assert.strictEqual(s.rate, 5)
  })

  it("rising latency (moving average above 2× its lowest) cuts the window, not the rate", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 30
    s.limit = 20
    saturate(s, 0, 2000, 20, 100)
    let rate = s.rate
    let limit = s.limit
    let t = 2000
    while (s.decreases === 0 && t < 10_000) {
      rate = s.rate
      limit = s.limit
      Aimd.onReport(s, p, ok((t += 50), 400))
    }
    assert.strictEqual(s.lastDecreaseReason, "latency")
    assert.approximately(s.limit, limit * 0.7, 1e-9)
    assert.strictEqual(s.rate, rate)
    assert.strictEqual(s.phase, "slowStart", "the rate keeps its phase")
  })

  it("latency jitter within the slack (50 ms) is not congestion: a 20 ms endpoint answering in 60 ms is not cut", () => {
    const s = Aimd.initial(p, 64, 0)
    saturate(s, 0, 1000, 20, 20)
    let t = 1000
    for (let i = 0; i < 100; i++) Aimd.onReport(s, p, ok((t += 20), 60))
    assert.strictEqual(s.decreases, 0)
  })

  it("admission: a full window says 'window'; an empty pacing bucket says when the next request may start", () => {
    const s = Aimd.initial(p, 64, 0)
    assert.strictEqual(Aimd.admit(s, p, 2, 0), "window")
    assert.strictEqual(Aimd.admit(s, p, 0, 0), true)
    Aimd.charge(s)
    // 2 requests/s: the next one 500 ms later
    assert.strictEqual(Aimd.admit(s, p, 0, 0), 500)
    assert.strictEqual(Aimd.admit(s, p, 0, 500), true)
  })

  it("headers cap the rate: refill (limit − remaining) / reset plus the remaining budget over the time to reset", () => {
    // 60 requests per 60 s bucket, 30 left, full again in 30 s: refill 1/s + 30 spare over 30 s
    assert.approximately(
      Aimd.headerCeiling({ requests: { limit: 60, remaining: 30, resetMs: 30_000 }, tokens: undefined }, 1, undefined)!,
      2,
      1e-9
    )
    // nothing left: the refill only
    assert.approximately(
      Aimd.headerCeiling({ requests: { limit: 60, remaining: 0, resetMs: 60_000 }, tokens: undefined }, 1, undefined)!,
      1,
      1e-9
    )
    // the token limit binds (1,000 tokens/s refill, 100 tokens a request → 10/s)
    const both = Aimd.headerCeiling(
      {
        requests: { limit: 1000, remaining: 0, resetMs: 10_000 },
        tokens: { limit: 60_000, remaining: 0, resetMs: 60_000 }
      },
      1,
      100
    )
    assert.approximately(both!, 10, 1e-9)
    assert.isUndefined(Aimd.headerCeiling({ requests: { limit: 60, remaining: undefined, resetMs: 1000 }, tokens: undefined }, 1, undefined))
  })

  it("a fresh header cap bounds the effective rate; a stale one (no header for 4 holds) no longer does", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 50
    Aimd.onReport(s, p, ok(1000, 100, { rateLimit: { requests: { limit: 60, remaining: 0, resetMs: 6000 }, tokens: undefined } }))
    assert.approximately(Aimd.effectiveRate(s, p, 1000), 10, 1e-9)
    assert.strictEqual(Aimd.effectiveRate(s, p, 1000 + 4 * p.holdMs + 1), s.rate)
  })

  it("describe: strict JSON with the rate, the window, the phase and the last decrease and its reason", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 40
    Aimd.onReport(s, p, limited(2000))
    const d = Aimd.describe(s, p, 2000) as Record<string, unknown>
    assert.deepStrictEqual(d["lastDecrease"], { reason: "rate_limit", at: 2000 })
    assert.strictEqual(d["phase"], "avoidance")
    assert.strictEqual(d["concurrency"], 1)
    assert.strictEqual(typeof d["rate"], "number")
    assert.deepStrictEqual(JSON.parse(JSON.stringify(d)), d)
  })

  it("property: under any sequence of reports the rate stays in [minRate, maxRate] and the window in [1, capacity]", () => {
    const report = fc.record({
      dt: fc.integer({ min: 0, max: 2000 }),
      kind: fc.constantFrom("ok", "rate_limit", "upstream", "noisy"),
      latencyMs: fc.integer({ min: 1, max: 5000 }),
      pressed: fc.boolean(),
      remaining: fc.option(fc.integer({ min: 0, max: 100 }), { nil: undefined })
    })
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 16 }), fc.array(report, { maxLength: 200 }), (capacity, reports) => {
        const q = { ...p, maxRate: 100 }
        const s = Aimd.initial(q, capacity, 0)
        let now = 0
        for (const r of reports) {
          now += r.dt
          if (r.pressed) {
            s.ratePressedAt = now
            s.limitPressedAt = now
          }
          Aimd.onReport(s, q, {
            now,
            capacity,
            active: 1,
            ok: r.kind === "ok",
            latencyMs: r.latencyMs,
            usage: { tokens: 50 },
            rateLimit: r.remaining === undefined ? undefined : { requests: { limit: 100, remaining: r.remaining, resetMs: 1000 }, tokens: undefined },
            errorClass: r.kind === "ok" ? undefined : r.kind
          })
          const rate = Aimd.effectiveRate(s, q, now)
          if (!(rate >= q.minRate && rate <= q.maxRate && s.rate <= q.maxRate)) return false
          if (!(s.limit >= 1 && s.limit <= capacity)) return false
        }
        return true
      }),
      { endOnFailure: true }
    )
  })
})
