import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as Aimd from "../../../src/services/internal/adaptive.js"
import { algorithmText } from "../../../src/services/internal/algorithmState.js"

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
/** A 429 at `now`, asking for a wait of `retryAfterMs` when given. */
const limited = (now: number, retryAfterMs?: number) => ({
  ...ok(now),
  ok: false,
  latencyMs: 5,
  errorClass: "rate_limit",
  ...(retryAfterMs === undefined ? {} : { retryAfterMs })
})

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

  it("slow start doubles the rate per 250 ms of successful traffic while acquires are held back, up to 4× the initial rate", () => {
    const s = Aimd.initial(p, 64, 0)
    // answers arriving at the allowed rate: ×2 per `slowStart` (250 ms): 2 → 8 in 500 ms
    const t = clocked(s, 0, 2 * p.slowStartMs)
    assert.approximately(s.rate, 8, 0.8)
    assert.strictEqual(s.phase, "slowStart")
    // past 4× the initial rate, ×2 per 4 × 250 ms (limited slow start, RFC 3742; HyStart++'s
    // conservative pace, RFC 9406): ×2 in the next second, not ×16
    const r = s.rate
    clocked(s, t, 1000)
    assert.approximately(s.rate / r, 2, 0.2)
  })

  it("a sender that is not held back by its allowance does not grow it (RFC 7661)", () => {
    const s = Aimd.initial(p, 64, 0)
    for (let i = 1; i <= 50; i++) Aimd.onReport(s, p, ok(i * 100))
    assert.strictEqual(s.rate, 2)
    assert.strictEqual(s.limit, 2)
  })

  it("a 429 after an answer cuts the rate and the window by 0.7, and ends slow start", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 40
    s.limit = 20
    // one answer in this epoch: the refusal measures something (a 429 before any answer does
    // not end slow start: test/services/adaptive.stormStart.test.ts)
    s.okInEpoch = 1
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
    clocked(s, 3000, 3000)
    assert.approximately(s.rate, 20.1, 0.05) // +0.01 × 20 per second within ±5 % of the knee, for `convex` (3 s)
  })

  it("a rate held in the knee's band without a 429 for `convex` (3 s) grows convexly from there (issue 18 trial: a raised limit took 20–38 s to find)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 10
    s.rate = 10
    // the provider raised the limit: nothing refuses; 3 s at the probe step, then faster
    const t = clocked(s, 0, 3000)
    assert.approximately(s.rate, 10.3, 0.05)
    clocked(s, t, 6000)
    // the old rule was still at the probe step in the band (10.5) and only then started the clock
    assert.isAbove(s.rate, 11.5)
    const u = clocked(s, t + 6000, 6000)
    assert.isAbove(s.rate, 15)
    void u
  })

  it("past slow start a 429 restarts the rate at most at the knee; the knee falls at most by 0.7 per cut (issue 18)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 10
    s.rate = 14.9 // probed past a 10 requests/s limit on the server's burst
    saturate(s, 0, 10_000, 98) // 9.8 answers/s delivered
    Aimd.onReport(s, p, limited(10_000))
    assert.approximately(s.knee!, 9.8, 1e-9)
    // 0.7 × 14.9 = 10.43 would be above what the server delivered
    assert.approximately(s.rate, 9.8, 1e-9)
    // an epoch spent mostly paused (a Retry-After) delivers little: not read as a collapse (the
    // knee: the sustained rate of the last 5 to 10 s less the band, at least 0.7 × the old one)
    saturate(s, 10_000, 1_500, 2)
    const sustained = Aimd.sustainedRate(s, 11_500)!
    const rateAtCut = s.rate
    Aimd.onReport(s, p, limited(11_500))
    assert.approximately(s.knee!, Math.max(0.7 * 9.8, 0.95 * sustained), 1e-9)
    assert.isAtLeast(s.knee!, 0.7 * 9.8)
    // the rate: 0.7 × the rate at the cut, below the knee
    assert.approximately(s.rate, 0.7 * rateAtCut, 1e-9)
    assert.isAtMost(s.rate, s.knee!)
  })

  it("a 429 after a probe: the knee is the sustained rate before the cut less the band, not the epoch's average with the pause and the climb back in it (issue 18 F2)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 8.5
    s.rate = 12 // probing past a 10 requests/s limit
    // the epoch from 0: a second paused by a Retry-After, 5 s at 8/s climbing back, 6 s at the limit
    saturate(s, 1_000, 5_000, 40)
    saturate(s, 6_000, 6_000, 60)
    const sustained = Aimd.sustainedRate(s, 12_000)!
    Aimd.onReport(s, p, limited(12_000))
    // the epoch's average, 100 / 12 s = 8.33, held 0.84 of a small bucket's limit
    assert.approximately(s.knee!, 0.95 * sustained, 1e-9)
    assert.isAbove(s.knee!, 9.2)
  })

  it("a knee that held (refused only past its band): the plateau before the next probe doubles, 3 s → 24 s at most; a cut at the knee resets it (issue 18 F2)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 10
    let t = 0
    // four probes refused at 11 requests/s with a Retry-After of 1 s, each after 10 s
    // delivering the limit
    for (const expected of [1, 2, 3, 3]) {
      s.rate = 11
      saturate(s, t, 10_000, 100)
      t += 10_000
      Aimd.onReport(s, p, limited(t, 1000))
      assert.strictEqual(s.probeDoublings, expected)
      assert.approximately(s.knee!, 10, 1e-9)
    }
    // the plateau: entering the band, the rate holds within it for 2³ × 3 s, then probes
    s.rate = 0.96 * s.knee!
    s.aboveSince = undefined
    const knee = s.knee!
    const end = clocked(s, t, 23_000)
    assert.isAtMost(s.rate, 1.05 * knee + 1e-9)
    clocked(s, end, 6_000)
    assert.isAbove(s.rate, 1.05 * knee)
    // refused within the band (the limit fell): back to the short plateau
    saturate(s, t + 29_000, 5_000, 40)
    s.rate = knee
    Aimd.onReport(s, p, limited(t + 34_000, 1000))
    assert.strictEqual(s.probeDoublings, 0)
  })

  it("only a probe that cost a pause lengthens the plateau past 6 s: after a bare 429, or one asking for milliseconds, it doubles once (a raised limit is found sooner)", () => {
    for (const retryAfterMs of [undefined, 40]) {
      const s = Aimd.initial(p, 64, 0)
      s.phase = "avoidance"
      s.knee = 10
      let t = 0
      for (let i = 0; i < 3; i++) {
        s.rate = 11
        saturate(s, t, 10_000, 100)
        t += 10_000
        Aimd.onReport(s, p, limited(t, retryAfterMs))
        assert.strictEqual(s.probeDoublings, 1, `after probe ${i + 1}, retryAfterMs ${retryAfterMs}`)
        assert.approximately(s.knee!, 10, 1e-9)
      }
    }
  })

  it("a server that announces its budget in headers is paced by them: no long plateau (a raised limit is found as fast as before)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 10
    s.rate = 11
    saturate(s, 0, 10_000, 100)
    Aimd.onReport(s, p, limited(10_000, 1000))
    assert.strictEqual(s.probeDoublings, 1)
    // an answer naming what is left of the bucket (here full: it sets no cap)
    Aimd.onReport(s, p, ok(10_100, 100, { rateLimit: { requests: { limit: 25, remaining: 25, resetMs: 0 }, tokens: undefined } }))
    assert.strictEqual(s.probeDoublings, 0)
  })

  it("headers announcing a refill well above the rate lift it at once: ×2 per second of answers up to 95 % of the refill; a refill at the rate lifts nothing", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 10
    s.rate = 10
    // a bucket of 25 refilling at 25/s, 5 used: (25 − 20) / 0.2 s = 25 requests/s
    const raised = { rateLimit: { requests: { limit: 25, remaining: 20, resetMs: 200 }, tokens: undefined } }
    let now = 0
    let lifted: number | undefined
    for (let i = 0; i < 40; i++) {
      now += 1000 / s.rate
      s.ratePressedAt = now
      Aimd.onReport(s, p, ok(now, 100, raised))
      assert.isAtMost(s.rate, 0.95 * 25 + 1e-9)
      if (s.rate >= 0.95 * 25 - 1e-9) {
        lifted = now
        break
      }
    }
    // from 10 to 23.75 requests/s at ×2 per second: under 1.5 s of answers
    assert.isDefined(lifted)
    assert.isAtMost(lifted!, 1500)
    // a bucket in use at its limit reads its own rate: (10 − 1) / 0.9 s = 10 requests/s
    const held = Aimd.initial(p, 64, 0)
    held.phase = "avoidance"
    held.knee = 10
    held.rate = 10
    held.ratePressedAt = 100
    Aimd.onReport(held, p, ok(100, 100, { rateLimit: { requests: { limit: 10, remaining: 1, resetMs: 900 }, tokens: undefined } }))
    assert.isAtMost(held.rate, 10.2)
    assert.strictEqual(Aimd.headerRefill({ requests: { limit: 25, remaining: 20, resetMs: 200 }, tokens: undefined }, undefined), 25)
    assert.isUndefined(Aimd.headerRefill({ requests: { limit: 25, remaining: 25, resetMs: 0 }, tokens: undefined }, undefined))
  })

  it("past the knee's band the step starts at the probe step and grows with the square of the time there (CUBIC's convex region)", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.knee = 10
    s.rate = 10.51 // just past the band (±5 %)
    clocked(s, 0, 3000)
    // ∫₀³ 0.1 × 10 × 0.1 × (1 + (t/3)²) dt = 0.4 (the full step would add 3 × 10 %)
    assert.approximately(s.rate, 10.91, 0.05)
    clocked(s, 3000, 9000)
    // full speed again once 0.1 × (1 + (t/3)²) reaches 1 (t = 9 s): a limit that rose is found
    const at12 = s.rate
    clocked(s, 12_000, 1000)
    assert.approximately(s.rate - at12, 0.1 * at12, 0.15)
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

  it("a limit that reads full now (reset now or past, or nothing used) gives no cap, and lifts the last one (issue 18: ~9 req/s against 25)", () => {
    // 25 left of 25, or a reset to the second that is already due: the refill is unknown
    assert.isUndefined(Aimd.headerCeiling({ requests: { limit: 1500, remaining: 24, resetMs: 0 }, tokens: undefined }, 16, undefined))
    assert.isUndefined(Aimd.headerCeiling({ requests: { limit: 25, remaining: 25, resetMs: 40 }, tokens: undefined }, 16, undefined))
    const s = Aimd.initial(p, 64, 0)
    s.rate = 25
    Aimd.onReport(s, p, ok(1000, 100, { active: 16, rateLimit: { requests: { limit: 60, remaining: 0, resetMs: 6000 }, tokens: undefined } }))
    assert.approximately(Aimd.effectiveRate(s, p, 1000), 10, 1e-9)
    Aimd.onReport(s, p, ok(1100, 100, { active: 16, rateLimit: { requests: { limit: 1500, remaining: 24, resetMs: 0 }, tokens: undefined } }))
    assert.strictEqual(Aimd.effectiveRate(s, p, 1100), 25)
  })

  it("a fresh header cap bounds the effective rate; a stale one (no header for 4 holds) no longer does", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 50
    Aimd.onReport(s, p, ok(1000, 100, { rateLimit: { requests: { limit: 60, remaining: 0, resetMs: 6000 }, tokens: undefined } }))
    assert.approximately(Aimd.effectiveRate(s, p, 1000), 10, 1e-9)
    assert.strictEqual(Aimd.effectiveRate(s, p, 1000 + 4 * p.holdMs + 1), s.rate)
  })

  it("pacedBy: headers while fresh headers cap the rate or its growth (an allowance up to 2× the AIMD rate), even at or above the rate; aimd without them, stale, or far above", () => {
    const at = (ceiling: number, now: number) => {
      const s = Aimd.initial(p, 64, 0)
      s.rate = 20
      s.headerCeiling = ceiling
      s.headerAt = 1000
      return (Aimd.describe(s, p, now) as Record<string, unknown>)["pacedBy"]
    }
    assert.strictEqual(at(10, 1000), "headers", "below the rate: caps it")
    assert.strictEqual(at(20, 1000), "headers", "equal to the rate")
    assert.strictEqual(at(30, 1000), "headers", "above the rate, within 2×: caps its growth")
    assert.strictEqual(at(40, 1000), "headers")
    assert.strictEqual(at(41, 1000), "aimd", "far above: bounds nothing")
    assert.strictEqual(at(10, 1000 + 4 * p.holdMs + 1), "aimd", "stale")
    assert.strictEqual((Aimd.describe(Aimd.initial(p, 64, 0), p, 0) as Record<string, unknown>)["pacedBy"], "aimd", "no headers")
    // an answer whose headers allow exactly the rate
    const s = Aimd.initial(p, 64, 0)
    s.rate = 10
    Aimd.onReport(s, p, ok(1000, 100, { rateLimit: { requests: { limit: 60, remaining: 0, resetMs: 6000 }, tokens: undefined } }))
    assert.strictEqual((Aimd.describe(s, p, 1000) as Record<string, unknown>)["pacedBy"], "headers")
  })

  it("describe: strict JSON with the rate, the window, the phase and the last decrease and its reason", () => {
    const s = Aimd.initial(p, 64, 0)
    s.rate = 40
    s.okInEpoch = 1
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

describe("adaptive: a learned state restored on resume (issue 18)", () => {
  /** A state cut by a 429 at `cutAt` to `rate` (knee `knee`), last heard at `lastAt`, saved. */
  const saved = (rate: number, knee: number, cutAt: number, lastAt: number) => {
    const s = Aimd.initial(p, 8, 0)
    s.phase = "avoidance"
    s.rate = rate
    s.knee = knee
    s.limit = 3
    s.decreases = 1
    s.lastDecreaseAt = cutAt
    s.lastDecreaseReason = "rate_limit"
    s.lastReportAt = lastAt
    return JSON.parse(JSON.stringify(Aimd.save(s))) as unknown
  }

  it("resumed within the cut's hold: the cut state as saved", () => {
    const s = Aimd.restore(saved(1.4, 2, 10_000, 10_200), p, 8, 10_500)!
    assert.strictEqual(s.rate, 1.4)
    assert.strictEqual(s.phase, "avoidance")
  })

  it("a depressed rate regains 10 % of the knee per second of idle time past the hold, up to the knee", () => {
    // cut to 6 with a knee of 10; resumed 3 s after the hold ended: 6 + 3 × 1
    const s = Aimd.restore(saved(6, 10, 10_000, 10_500), p, 8, 14_000)!
    assert.approximately(s.rate, 9, 1e-9)
    assert.strictEqual(s.phase, "avoidance")
    // 3 minutes later: back at the knee, not above
    assert.approximately(Aimd.restore(saved(6, 10, 10_000, 10_500), p, 8, 190_000)!.rate, 10, 1e-9)
    // a rate at or above its knee is kept as learned
    assert.strictEqual(Aimd.restore(saved(12, 10, 10_000, 10_500), p, 8, 190_000)!.rate, 12)
  })

  it("a stale state that knows nothing above the conservative start starts afresh in slow start (the tester's 2 req/s 3 min later)", () => {
    const s = Aimd.restore(saved(1.4, 2, 10_000, 12_000), p, 8, 190_000)!
    assert.strictEqual(s.phase, "slowStart")
    assert.strictEqual(s.rate, p.initialRate)
    assert.strictEqual(s.decreases, 1)
    // slow start: 2 → 8 within 500 ms of traffic, then ×2 per second
    clocked(s, 190_000, 1500)
    assert.isAbove(s.rate, 12)
  })

  describe("the concurrency limit learned from 429s (fix18e)", () => {
    /** A state that learned the server serves 3 at once (knee held twice), saved at 10.5 s. */
    const learned = (rate: number) => {
      const s = Aimd.initial(p, 8, 0)
      s.phase = "avoidance"
      s.rate = rate
      s.limit = 3
      s.limitThresh = 3
      s.concKnee = 3
      s.concDoublings = 2
      s.decreases = 4
      s.lastDecreaseAt = 10_000
      s.concFrom = 10_000
      s.lastDecreaseReason = "rate_limit"
      s.lastReportAt = 10_500
      return JSON.parse(JSON.stringify(Aimd.save(s))) as unknown
    }
    /** Successes at 3 in flight, every 100 ms from `from` for `ms`, the window pressed before each. */
    const pressedAt3 = (s: Aimd.AimdState, from: number, ms: number) => {
      for (let t = from; t < from + ms; t += 100) {
        Aimd.admit(s, p, 3, t)
        Aimd.onReport(s, p, { ...ok(t, 300), capacity: 8, active: 3 })
      }
    }

    it("saved and restored: the knee and its doublings; a minute later the window holds at 3 for its plateau (12 s) from the resume, then probes", () => {
      const saved = learned(10) as Record<string, unknown>
      assert.strictEqual(saved["concKnee"], 3)
      assert.strictEqual(saved["concDoublings"], 2)
      const s = Aimd.restore(saved, p, 8, 70_000)!
      assert.strictEqual(s.concKnee, 3)
      assert.strictEqual(s.concDoublings, 2)
      assert.strictEqual(s.limit, 3)
      assert.strictEqual((Aimd.describe(s, p, 70_000) as Record<string, unknown>)["concurrencyLimit"], 3)
      pressedAt3(s, 70_000, 11_900)
      assert.strictEqual(Math.floor(s.limit), 3, "within the plateau from the resume")
      pressedAt3(s, 82_000, 2000)
      assert.isAbove(Math.floor(s.limit), 3, "past it: a probe of one more lease")
    })

    it("a stale state that starts afresh in slow start keeps the knee: the window grows to 3, not past it", () => {
      const s = Aimd.restore(learned(1.5), p, 8, 190_000)!
      assert.strictEqual(s.phase, "slowStart")
      assert.strictEqual(s.concKnee, 3)
      pressedAt3(s, 190_000, 5000)
      assert.strictEqual(Math.floor(s.limit), 3)
    })

    it("a state saved without them (before fix18e) restores with no concurrency knee; a malformed one is dropped", () => {
      const old = { ...(learned(10) as Record<string, unknown>), concKnee: undefined, concDoublings: undefined }
      assert.isUndefined(Aimd.restore(JSON.parse(JSON.stringify(old)), p, 8, 70_000)!.concKnee)
      const bad = { ...(learned(10) as Record<string, unknown>), concKnee: 2.5 }
      assert.isUndefined(Aimd.restore(bad, p, 8, 70_000)!.concKnee)
    })

    it("in words: the learned limit beside the window, apart from the capacity", () => {
      const text = (concurrency: number, concurrencyLimit: number | null) =>
        algorithmText({ adaptive: { rate: 10, concurrency, concurrencyLimit, decreases: 0, lastDecrease: null } })
      assert.strictEqual(text(3, 3), "adaptive allows 10 req/s now, 3 at once, learned from 429s past 3 in flight")
      assert.strictEqual(text(2, 3), "adaptive allows 10 req/s now, 2 at once (learned from 429s: at most 3 in flight)")
      assert.strictEqual(text(8, null), "adaptive allows 10 req/s now, 8 at once")
    })
  })

  it("a state saved before lastReportAt was kept counts from the end of its cut's hold", () => {
    const legacy = { ...(saved(6, 10, 10_000, 10_500) as Record<string, unknown>), lastReportAt: undefined }
    assert.approximately(Aimd.restore(JSON.parse(JSON.stringify(legacy)), p, 8, 14_000)!.rate, 9, 1e-9)
  })
})

describe("adaptive: our own event loop's stall is taken out of the answer time (issue 18)", () => {
  it("an answer of 450 ms of which 400 ms our loop was stalled reads as 50 ms: no latency cut; without the discount, cuts", () => {
    const run = (discount: boolean) => {
      const s = Aimd.initial(p, 64, 0)
      let now = 0
      for (let i = 0; i < 200; i++) {
        now += 10
        s.limitPressedAt = now
        // after 50 answers (the baseline formed), every other answer waited 400 ms on our loop
        const own = i >= 50 && i % 2 === 1 ? 400 : 0
        Aimd.onReport(s, p, ok(now, 50 + own, discount ? { ownDelayMs: own } : {}))
      }
      return s
    }
    const kept = run(true)
    assert.strictEqual(kept.decreases, 0)
    assert.approximately(kept.latencyEmaMs!, 50, 1e-9)
    assert.strictEqual(kept.ownDelayTotalMs, 75 * 400)
    const cut = run(false)
    assert.isAbove(cut.decreases, 0)
    assert.strictEqual(cut.lastDecreaseReason, "latency")
  })

  it("the stall never exceeds the answer time (a stall longer than the answer leaves 0 ms, not less)", () => {
    const s = Aimd.initial(p, 64, 0)
    Aimd.onReport(s, p, ok(10, 30, { ownDelayMs: 500 }))
    assert.strictEqual(s.latencyEmaMs, 0)
    assert.strictEqual(s.ownDelayTotalMs, 30)
  })
})

describe("adaptive: the printed figures (issue 18 trial: 44.95 req/s printed against a limit of 25)", () => {
  it("`sustained` is what the server delivered over the last 5–10 s; `rate` (the allowance) may float above it, and the words name each", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.rate = 45
    s.knee = 40
    // the server answers 25 requests/s (its limit), the allowance sits at 45 for 20 s
    saturate(s, 0, 20_000, 500)
    s.rate = 45
    const d = Aimd.describe(s, p, 20_000) as Record<string, unknown>
    assert.strictEqual(d["rate"], 45)
    assert.approximately(d["sustained"] as number, 25, 0.5)
    const text = algorithmText({ adaptive: d })
    assert.match(text, /^adaptive delivered 2[45](\.\d+)? req\/s lately, allows 45 req\/s now, \d+ at once/)
    // asked for 10 s more and no answer but 429s: nothing sustained
    const refused = structuredClone(s)
    for (let t = 20_500; t <= 30_000; t += 500) {
      // demand held back meanwhile (the key is pressed)
      refused.ratePressedAt = t
      Aimd.onReport(refused, p, limited(t))
    }
    assert.strictEqual((Aimd.describe(refused, p, 30_000) as Record<string, unknown>)["sustained"], 0)
    // before a second of answers: unknown, and the allowance is named as such
    const fresh = Aimd.initial(p, 64, 0)
    Aimd.onReport(fresh, p, ok(100))
    const d0 = Aimd.describe(fresh, p, 500) as Record<string, unknown>
    assert.isNull(d0["sustained"])
    assert.match(algorithmText({ adaptive: d0 }), /^adaptive allows [\d.]+ req\/s now, 2 at once/)
  })

  it('after a cut the allowance is below what was delivered: the words name two times, never "sustains X (allows up to Y)" with X > Y (issue 18 F5)', () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    s.rate = 20
    saturate(s, 0, 20_000, 500)
    // a 429 halves the allowance; what was delivered over the last seconds stays as it was
    Aimd.onReport(s, p, limited(20_000))
    s.ratePressedAt = 20_000
    const d = Aimd.describe(s, p, 20_000) as Record<string, unknown>
    assert.isAbove(d["sustained"] as number, d["rate"] as number)
    const text = algorithmText({ adaptive: d }, () => "14:03:10")
    assert.strictEqual(
      text,
      `adaptive delivered ${d["sustained"]} req/s lately, allows ${d["rate"]} req/s now, ${d["concurrency"]} at once; cut 1× (last: a 429 at 14:03:10)`
    )
    assert.notInclude(text, "sustains")
    assert.notInclude(text, "up to")
  })
})

describe("adaptive: the sustained rate at the end of a run (issue 18: 21.04 req/s printed against a limit of 25)", () => {
  it("the time after the last answer, in which nobody asked, does not lower it: the run's last pipelines and its close", () => {
    const s = Aimd.initial(p, 64, 0)
    s.phase = "avoidance"
    // the server answers 25 requests/s (its limit) until the last answer at 18.4 s
    saturate(s, 0, 18_400, 460)
    // the run ends 1.8 s later (what the trial measured): its state is written then
    const atEnd = Aimd.describe(s, p, 20_200) as Record<string, unknown>
    assert.approximately(atEnd["sustained"] as number, 25, 25 * 0.05)
    // the run's tail: a few last pipelines (retries after a backoff) answered one by one,
    // acquires no longer held back: the deliveries measure the demand, not the server (the
    // key counts as pressed for `holdMs` more, so the figure dips a little: within 10 %)
    const tail = structuredClone(s)
    for (let t = 19_000; t <= 22_000; t += 500) Aimd.onReport(tail, p, ok(t))
    assert.approximately((Aimd.describe(tail, p, 22_000) as Record<string, unknown>)["sustained"] as number, 25, 25 * 0.1)
    // a key left idle for a minute still says what it sustained while it was asked
    assert.approximately((Aimd.describe(s, p, 80_000) as Record<string, unknown>)["sustained"] as number, 25, 25 * 0.05)
  })
})
