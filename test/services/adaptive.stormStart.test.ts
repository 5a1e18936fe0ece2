/**
 * Issue 18 F4: a resume (or a run) that starts inside a 429 storm, with nothing learned, took
 * the conservative start for the server's limit (its knee): after the Retry-After window it ran
 * at 1–2 requests/s for seconds and needed ~35 s to reach the limit, against ~14 s for a run
 * the same storm met a few seconds in. Now a refusal before any answer keeps slow start and
 * sets no knee. Simulated time (test/support/storm-start.ts: the pure rules, no clock).
 */
import { assert, describe, it } from "@effect/vitest"
import * as A from "../../src/services/internal/adaptive.js"
import { stormRecovery } from "../support/storm-start.js"

describe("adaptive: a 429 storm before any answer", () => {
  it("the first refusal sets no knee and keeps slow start, at no less than the conservative start", () => {
    const s = A.initial(A.defaults, 16, 0)
    A.onReport(s, A.defaults, {
      now: 20,
      capacity: 16,
      active: 0,
      ok: false,
      latencyMs: 20,
      usage: undefined,
      rateLimit: undefined,
      errorClass: "rate_limit",
      leasedAt: 0
    })
    assert.strictEqual(s.phase, "slowStart")
    assert.isUndefined(s.knee)
    assert.strictEqual(s.rate, A.defaults.initialRate)
    assert.strictEqual(s.decreases, 1)
  })

  it("after the window it reaches the limit at least as fast as a run the storm met 2.5 s in", () => {
    const fresh = stormRecovery(2500, 5500)
    const atOnce = stormRecovery(0, 3000)
    assert.isNotNull(fresh.reachS)
    assert.isNotNull(atOnce.reachS)
    assert.isAtMost(atOnce.reachS!, fresh.reachS!)
    // 5 s after the window: well past the 1–2 requests/s of the trial
    assert.isAtLeast(atOnce.rate5sAfter!, 8)
  })
})
