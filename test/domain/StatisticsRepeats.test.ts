/**
 * A statistic computed once per trial (a p95 latency, a sum) varies from repeat to repeat as
 * well as from case to case (issue 16, tester t16c: identical variants called different on
 * `latencyP95Ms` in 7 of 15 comparisons, an interval narrower than the spread of its own three
 * repeats). `bootstrapReduced` must count the run-to-run variation: identical variants under a
 * seeded Random are called different no more often than the stated error rate.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Random } from "effect"
import * as S from "../../src/domain/Statistics.js"

/** A standard normal draw (Box–Muller) from the seeded Random. */
const normal = (rng: Random.Random) =>
  Effect.gen(function*() {
    const u = 1 - (yield* rng.next)
    const v = yield* rng.next
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v)
  })

/**
 * One A/A study: `variants` identical variants, `cases` cases, `repeats` repeats. A pipeline's
 * latency is the case's own cost × the trial's load (one log-normal factor per trial: the
 * machine was busy or not while that trial ran) × a little per-pipeline noise.
 */
const aaStudy = (rng: Random.Random, variants: number, cases: number, repeats: number) =>
  Effect.gen(function*() {
    const caseMs: Array<number> = []
    for (let c = 0; c < cases; c++) caseMs.push(50 * Math.exp(0.5 * (yield* normal(rng))))
    const values: Array<Array<Array<number>>> = []
    for (let v = 0; v < variants; v++) {
      const byRepeat: Array<Array<number>> = []
      for (let r = 0; r < repeats; r++) {
        const load = Math.exp(0.6 * (yield* normal(rng)))
        const row: Array<number> = []
        for (let c = 0; c < cases; c++) row.push(caseMs[c]! * load * Math.exp(0.1 * (yield* normal(rng))))
        byRepeat.push(row)
      }
      values.push(byRepeat)
    }
    return values
  })

describe("Statistics.bootstrapReduced counts the variation between repeats", () => {
  it.effect("identical variants (40 cases, 3 repeats, p95) are called different at most at the stated 5 % rate", () =>
    Effect.gen(function*() {
      const rng = Random.make(16)
      const studies = 200
      let claims = 0
      for (let k = 0; k < studies; k++) {
        const values = yield* aaStudy(rng, 2, 40, 3)
        const r = S.bootstrapReduced(values, "p95", { seed: k, resamples: 400 })
        const d = r.paired(0, 1)!
        if (d.lower > 0 || d.upper < 0) claims++
      }
      // nominal 5 %: 10 of 200 expected; allow three binomial standard deviations (≈ 9 more).
      // Before the fix (case resampling only) about half of these comparisons excluded 0.
      assert.isAtMost(claims, 19, `${claims} of ${studies} identical pairs called different`)
    }))

  it("a variant's interval is at least as wide as the t interval over its repeats' own values, and says so", () => {
    // the tester's aa5 v01: per-repeat p95 122.0, 216.1, 658.1 ms; the old interval was [260.1, 350.7]
    const cases = 40
    const mk = (level: number) => Array.from({ length: cases }, (_, c) => level * (0.5 + c / cases))
    const per = [mk(122 / 0.9875), mk(216.1 / 0.9875), mk(658.1 / 0.9875)]
    const r = S.bootstrapReduced([per], "p95", { seed: 1, resamples: 500 })
    const iv = r.intervals[0]!
    const ys = per.map((row) => S.quantile(row, 0.95))
    const t = S.studentInterval(ys, 0.95)!
    assert.closeTo(iv.estimate, S.mean(ys), 1e-9)
    assert.isAtMost(iv.lower, t.lower + 1e-9)
    assert.isAtLeast(iv.upper, t.upper - 1e-9)
    assert.isBelow(iv.lower, Math.min(...ys))
    assert.isAbove(iv.upper, Math.max(...ys))
    assert.include(iv.method, "run-to-run variation")
    assert.include(iv.method, "Welch–Satterthwaite")
  })

  it("the paired difference covers the per-repeat differences' t interval (aa4: −15.9, −243.4, −1.3 ms)", () => {
    const cases = 40
    const row = (shift: number) => Array.from({ length: cases }, (_, c) => 100 + c + shift)
    const base = [row(0), row(0), row(0)]
    const cand = [row(-15.9), row(-243.4), row(-1.3)]
    const r = S.bootstrapReduced([base, cand], "p95", { seed: 2, resamples: 500 })
    const d = r.paired(0, 1)!
    const diffs = [0, 1, 2].map((k) => S.quantile(cand[k]!, 0.95) - S.quantile(base[k]!, 0.95))
    const t = S.studentInterval(diffs, 0.95)!
    assert.isAtMost(d.lower, t.lower + 1e-9)
    assert.isAtLeast(d.upper, t.upper - 1e-9)
    assert.isBelow(d.lower, 0)
    assert.isAbove(d.upper, 0)
    assert.include(d.method, "per-repeat differences")
  })

  it("one repeat: no spread to estimate, the interval is the case bootstrap's and the method says the run part is missing", () => {
    const r = S.bootstrapReduced([[[1, 5, 2, 8, 3, 9, 4]]], "p95", { seed: 3, resamples: 200 })
    assert.include(r.intervals[0]!.method, "not counted (1 repeat")
  })
})
