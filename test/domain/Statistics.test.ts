import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as S from "../../src/domain/Statistics.js"

const fcOpts = { endOnFailure: true, numRuns: 60 } as const

/** A fixed list of "random" numbers without Math.random: a golden-ratio sequence in [0, 1). */
const golden = (n: number, offset = 0): Array<number> => Array.from({ length: n }, (_, i) => ((i + offset) * 0.6180339887498949) % 1)

describe("mean / median / quantile", () => {
  it("mean is NaN on an empty list and exact on a constant one", () => {
    assert.isNaN(S.mean([]))
    assert.strictEqual(S.mean([0.1, 0.1, 0.1]), 0.1)
    assert.strictEqual(S.mean([1, 2, 3, 4]), 2.5)
  })

  it("quantile is Hyndman–Fan type 7 (R's default; values from R/NumPy 'linear')", () => {
    // R: quantile(c(3,1,4,1,5,9,2,6), c(0,.1,.25,.5,.75,.9,1)) = 1 1 1.75 3.5 5.25 6.9 9
    const x = [3, 1, 4, 1, 5, 9, 2, 6]
    const want: ReadonlyArray<readonly [number, number]> = [[0, 1], [0.1, 1], [0.25, 1.75], [0.5, 3.5], [0.75, 5.25], [0.9, 6.9], [1, 9]]
    for (const [p, q] of want) assert.closeTo(S.quantile(x, p), q, 1e-12, `p=${p}`)
    // R: quantile(c(2.5,-1,0,7.25,3), c(.05,.33,.5,.99)) = -0.8 0.8 2.5 7.08
    const y = [2.5, -1, 0, 7.25, 3]
    const want2: ReadonlyArray<readonly [number, number]> = [[0.05, -0.8], [0.33, 0.8], [0.5, 2.5], [0.99, 7.08]]
    for (const [p, q] of want2) assert.closeTo(S.quantile(y, p), q, 1e-12, `p=${p}`)
    // R: quantile(1:10, c(.1,.25,.9)) = 1.9 3.25 9.1
    const z = Array.from({ length: 10 }, (_, i) => i + 1)
    assert.closeTo(S.quantile(z, 0.1), 1.9, 1e-12)
    assert.closeTo(S.quantile(z, 0.25), 3.25, 1e-12)
    assert.closeTo(S.quantile(z, 0.9), 9.1, 1e-12)
  })

  it("median: middle value, mean of the two middle ones, NaN when empty; the input is not reordered", () => {
    const x = [5, 1, 3]
    assert.strictEqual(S.median(x), 3)
    assert.deepStrictEqual(x, [5, 1, 3])
    assert.strictEqual(S.median([4, 1, 3, 2]), 2.5)
    assert.strictEqual(S.median([7]), 7)
    assert.isNaN(S.median([]))
    assert.isNaN(S.quantile([], 0.3))
  })

  it("refuses non-finite values and probabilities outside [0, 1], naming the position", () => {
    assert.throws(() => S.mean([1, NaN]), RangeError, "xs[1] is NaN")
    assert.throws(() => S.median([Infinity]), RangeError, "xs[0] is Infinity")
    assert.throws(() => S.quantile([1, 2], 1.5), RangeError, "p must be in [0, 1]")
    assert.throws(() => S.quantile([1, 2], NaN), RangeError, "p must be in [0, 1]")
  })
})

describe("bootstrapMean", () => {
  it("matches the normal-theory interval mean ± 1.96·s/√n on a large symmetric sample", () => {
    const xs = golden(2000).map((u) => 10 + 4 * u) // uniform-like on [10, 14), symmetric
    const n = xs.length
    const m = xs.reduce((a, b) => a + b, 0) / n
    const s = Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / n) // the bootstrap's plug-in s.d.
    const half = 1.96 * s / Math.sqrt(n)
    const iv = S.bootstrapMean(xs.map((x) => [x]), { seed: 11 })!
    assert.closeTo(iv.estimate, m, 1e-9)
    // 10,000 resamples: Monte Carlo error of each end ≈ 1.5 % of the half-width
    assert.closeTo(iv.lower, m - half, 0.06 * half)
    assert.closeTo(iv.upper, m + half, 0.06 * half)
    assert.strictEqual(iv.level, 0.95)
    assert.strictEqual(iv.resamples, 10_000)
    assert.strictEqual(iv.seed, 11)
    assert.strictEqual(iv.method, "percentile bootstrap over cases, 10000 resamples, seed 11")
  })

  it("two-stage: its spread matches the two-stage resampling variance computed in closed form", () => {
    // Var* = (1/n)·[ (1/n)Σ(mᵢ − m̄)² + (1/n)Σ vᵢ/rᵢ ], vᵢ the plug-in variance of case i's repeats
    const rows = Array.from({ length: 400 }, (_, i) => {
      const r = 2 + (i % 5) // 2..6 repeats (tabled) and, below, 8 (repeat by repeat)
      const base = golden(1, i)[0]!
      // repeat noise larger than the case-to-case spread: the inner stage matters (~25 % of the width)
      return Array.from({ length: i % 7 === 0 ? 8 : r }, (_, t) => base + 3 * golden(1, 1000 + i * 13 + t)[0]!)
    })
    const n = rows.length
    const means = rows.map((r) => r.reduce((a, b) => a + b, 0) / r.length)
    const grand = means.reduce((a, b) => a + b, 0) / n
    const between = means.reduce((a, b) => a + (b - grand) ** 2, 0) / n
    const within = rows.reduce((a, r, i) => a + r.reduce((x, y) => x + (y - means[i]!) ** 2, 0) / r.length / r.length, 0) / n
    const sd = Math.sqrt((between + within) / n)
    const iv = S.bootstrapMean(rows, { seed: 3, level: 0.9 })!
    assert.closeTo(iv.estimate, grand, 1e-9)
    assert.closeTo(iv.lower, grand - 1.6449 * sd, 0.07 * 1.6449 * sd)
    assert.closeTo(iv.upper, grand + 1.6449 * sd, 0.07 * 1.6449 * sd)
    assert.strictEqual(iv.method, "percentile bootstrap over cases and repeats, 10000 resamples, seed 3")
  })

  it("one stage (stages: 'cases'): the spread of the case means alone, repeats kept together", () => {
    // Var* = (1/n)·(1/n)Σ(mᵢ − m̄)²: the ordinary bootstrap of the case means
    const rows = Array.from({ length: 400 }, (_, i) => Array.from({ length: 2 + (i % 5) }, (_, t) => golden(1, i)[0]! + 3 * golden(1, 1000 + i * 13 + t)[0]!))
    const means = rows.map((r) => r.reduce((a, b) => a + b, 0) / r.length)
    const one = S.bootstrapMean(rows, { seed: 3, stages: "cases" })!
    const same = S.bootstrapMean(means.map((m) => [m]), { seed: 3 })!
    assert.closeTo(one.lower, same.lower, 1e-9)
    assert.closeTo(one.upper, same.upper, 1e-9)
    assert.strictEqual(one.method, "percentile bootstrap over cases (each with its repeats), 10000 resamples, seed 3")
    const two = S.bootstrapMean(rows, { seed: 3 })!
    assert.isBelow(one.upper - one.lower, two.upper - two.lower)
    // a constant shift of every value: one stage sees a constant difference, two stages also the repeat noise
    const shifted = rows.map((r) => r.map((x) => x + 1))
    const paired = S.pairedBootstrap(rows, shifted, { seed: 3, stages: "cases" })!.difference
    assert.closeTo(paired.lower, 1, 1e-9)
    assert.closeTo(paired.upper, 1, 1e-9)
    const paired2 = S.pairedBootstrap(rows, shifted, { seed: 3 })!.difference
    assert.isAbove(paired2.upper - paired2.lower, 0.05)
    assert.throws(() => S.bootstrapMean(rows, { seed: 3, stages: "repeats" as "cases" }), RangeError, "stages must be")
  })

  it("a constant sample gives exactly a zero-width interval at its value", () => {
    const iv = S.bootstrapMean([[0.1, 0.1], [0.1], [0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]], { seed: 1 })!
    assert.deepStrictEqual([iv.estimate, iv.lower, iv.upper], [0.1, 0.1, 0.1])
  })

  it("is reproducible for a seed and differs for another seed", () => {
    const rows = Array.from({ length: 50 }, (_, i) => golden(3, i * 3))
    const a = S.bootstrapMean(rows, { seed: 42, resamples: 2000 })
    const b = S.bootstrapMean(rows, { seed: 42, resamples: 2000 })
    const c = S.bootstrapMean(rows, { seed: 43, resamples: 2000 })!
    assert.deepStrictEqual(a, b)
    assert.strictEqual(c.estimate, a!.estimate)
    assert.notDeepEqual([c.lower, c.upper], [a!.lower, a!.upper])
    // seeds above 2^32 are distinct seeds too (not wrapped)
    const d = S.bootstrapMean(rows, { seed: 42 + 2 ** 32, resamples: 2000 })!
    assert.notDeepEqual([d.lower, d.upper], [a!.lower, a!.upper])
  })

  it("no value at all is null; one case reflects its repeats only; one value is a zero-width interval", () => {
    assert.isNull(S.bootstrapMean([], { seed: 1 }))
    assert.isNull(S.bootstrapMean([[], []], { seed: 1 }))
    assert.deepStrictEqual(S.bootstrapMean([[], [3]], { seed: 1 }), {
      estimate: 3,
      lower: 3,
      upper: 3,
      level: 0.95,
      method: "percentile bootstrap over cases, 10000 resamples, seed 1",
      resamples: 10_000,
      seed: 1
    })
    const one = S.bootstrapMean([[0, 1]], { seed: 1 })!
    // resampling two repeats: means 0, 0.5, 1 with probabilities ¼, ½, ¼
    assert.deepStrictEqual([one.estimate, one.lower, one.upper], [0.5, 0, 1])
  })

  it("refuses NaN / Infinity (naming the position) and out-of-range options", () => {
    assert.throws(() => S.bootstrapMean([[1], [2, NaN]], { seed: 1 }), RangeError, "values[1][1] is NaN")
    assert.throws(() => S.bootstrapMean([[-Infinity]], { seed: 1 }), RangeError, "values[0][0] is -Infinity")
    assert.throws(() => S.bootstrapMean([[1]], { seed: -1 }), RangeError, "seed must be a non-negative safe integer")
    assert.throws(() => S.bootstrapMean([[1]], { seed: 1.5 }), RangeError, "seed")
    assert.throws(() => S.bootstrapMean([[1]], { seed: 1, level: 1 }), RangeError, "level must be in (0, 1)")
    assert.throws(() => S.bootstrapMean([[1]], { seed: 1, resamples: 0 }), RangeError, "resamples must be a positive integer")
  })

  it("properties: lower ≤ estimate ≤ upper; the estimate does not depend on case order", () => {
    const rowsArb = fc.array(fc.array(fc.double({ min: -1e3, max: 1e3, noNaN: true }), { minLength: 1, maxLength: 7 }), { minLength: 1, maxLength: 30 })
    fc.assert(
      fc.property(rowsArb, fc.nat(1000), fc.constantFrom(0.8, 0.9, 0.95, 0.99), (rows, seed, level) => {
        const iv = S.bootstrapMean(rows, { seed, level, resamples: 300 })!
        return iv.lower <= iv.estimate && iv.estimate <= iv.upper
      }),
      fcOpts
    )
    fc.assert(
      fc.property(rowsArb.chain((rows) => fc.tuple(fc.constant(rows), fc.shuffledSubarray(rows, { minLength: rows.length }))), ([rows, shuffled]) => {
        const a = S.bootstrapMean(rows, { seed: 1, resamples: 10 })!.estimate
        const b = S.bootstrapMean(shuffled, { seed: 1, resamples: 10 })!.estimate
        return Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a))
      }),
      fcOpts
    )
  })
})

describe("pairedBootstrap", () => {
  const base = [[1], [0], [1], [0.5]]
  const cand = [[1], [1], [0], [0.7]]

  it("counts wins, losses and ties per case, by direction", () => {
    const max = S.pairedBootstrap(base, cand, { seed: 1 })!
    assert.deepStrictEqual([max.cases, max.candidateWins, max.baselineWins, max.ties], [4, 2, 1, 1])
    assert.closeTo(max.difference.estimate, 0.05, 1e-12)
    const min = S.pairedBootstrap(base, cand, { seed: 1, direction: "minimize" })!
    assert.deepStrictEqual([min.candidateWins, min.baselineWins, min.ties], [1, 2, 1])
    assert.strictEqual(min.difference.estimate, max.difference.estimate) // always cand − base
    // target 0.55: distances base .45 .55 .45 .05, cand .45 .45 .55 .15
    const tgt = S.pairedBootstrap(base, cand, { seed: 1, direction: "target", target: 0.55 })!
    assert.deepStrictEqual([tgt.candidateWins, tgt.baselineWins, tgt.ties], [1, 2, 1])
  })

  it("pairs per-case means, leaves out cases missing on either side", () => {
    const r = S.pairedBootstrap([[0, 1], [], [2], [5]], [[1, 1, 1], [9], [], [4, 6]], { seed: 1 })!
    // paired cases 0 and 3: differences 1 − 0.5 = 0.5 and 5 − 5 = 0
    assert.deepStrictEqual([r.cases, r.candidateWins, r.baselineWins, r.ties], [2, 1, 0, 1])
    assert.closeTo(r.difference.estimate, 0.25, 1e-12)
    assert.strictEqual(r.difference.method, "paired percentile bootstrap over cases and repeats, 10000 resamples, seed 1")
    assert.isNull(S.pairedBootstrap([[1], []], [[], [2]], { seed: 1 }))
  })

  it("with one value per case it is the bootstrap of the differences (same seed, same draws)", () => {
    const b = golden(300).map((u) => [u])
    const c = golden(300, 7).map((u) => [u + 0.05])
    const p = S.pairedBootstrap(b, c, { seed: 9 })!
    const d = S.bootstrapMean(b.map((row, i) => [c[i]![0]! - row[0]!]), { seed: 9 })!
    assert.closeTo(p.difference.estimate, d.estimate, 1e-12)
    assert.closeTo(p.difference.lower, d.lower, 1e-12)
    assert.closeTo(p.difference.upper, d.upper, 1e-12)
  })

  it("a constant shift gives a zero-width interval at the shift; reproducible per seed", () => {
    const b = [[1, 1], [2], [3, 3, 3]]
    const c = [[1.5, 1.5], [2.5, 2.5], [3.5]]
    const r = S.pairedBootstrap(b, c, { seed: 5 })!
    assert.deepStrictEqual([r.difference.estimate, r.difference.lower, r.difference.upper], [0.5, 0.5, 0.5])
    const rows = Array.from({ length: 40 }, (_, i) => golden(3, i * 3))
    const rows2 = Array.from({ length: 40 }, (_, i) => golden(2, 500 + i * 2))
    assert.deepStrictEqual(S.pairedBootstrap(rows, rows2, { seed: 5, resamples: 500 }), S.pairedBootstrap(rows, rows2, { seed: 5, resamples: 500 }))
    assert.notDeepEqual(
      S.pairedBootstrap(rows, rows2, { seed: 5, resamples: 500 })!.difference.lower,
      S.pairedBootstrap(rows, rows2, { seed: 6, resamples: 500 })!.difference.lower
    )
  })

  it("refuses lists of different lengths, NaN, and target without a target", () => {
    assert.throws(() => S.pairedBootstrap([[1]], [[1], [2]], { seed: 1 }), RangeError, "same cases")
    assert.throws(() => S.pairedBootstrap([[1]], [[NaN]], { seed: 1 }), RangeError, "cand[0][0] is NaN")
    assert.throws(() => S.pairedBootstrap([[1]], [[1]], { seed: 1, direction: "target" }), RangeError, "finite target")
    assert.throws(() => S.pairedBootstrap([[1]], [[1]], { seed: 1, direction: "max" as "maximize" }), RangeError, "direction must be maximize, minimize or target")
  })

  it("properties: wins + losses + ties = cases; swapping the sides negates the difference", () => {
    const side = fc.array(fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 25 })
    fc.assert(
      fc.property(side, side, (b0, c0) => {
        const n = Math.min(b0.length, c0.length)
        const b = b0.slice(0, n)
        const c = c0.slice(0, n)
        const x = S.pairedBootstrap(b, c, { seed: 1, resamples: 200 })!
        const y = S.pairedBootstrap(c, b, { seed: 1, resamples: 200 })!
        return x.candidateWins + x.baselineWins + x.ties === x.cases &&
          x.candidateWins === y.baselineWins && x.ties === y.ties &&
          Math.abs(x.difference.estimate + y.difference.estimate) < 1e-9 &&
          x.difference.lower <= x.difference.estimate && x.difference.estimate <= x.difference.upper
      }),
      fcOpts
    )
  })
})

describe("sharedBootstrap", () => {
  // three variants on the same 300 cases, 2..6 repeats per case, noise within cases
  const rowsOf = (shift: number, salt: number) =>
    Array.from({ length: 300 }, (_, i) => Array.from({ length: 2 + (i % 5) }, (_, t) => golden(1, i)[0]! + shift + 2 * golden(1, salt + i * 7 + t)[0]!))
  const groups = [rowsOf(0, 1000), rowsOf(0.3, 5000), rowsOf(-0.1, 9000)]

  it("each variant's interval is its two-stage bootstrap, and paired differences the paired one, up to Monte Carlo error", () => {
    const sh = S.sharedBootstrap(groups, { seed: 5 })!
    groups.forEach((g, v) => {
      const alone = S.bootstrapMean(g, { seed: 5 + v })!
      const iv = sh.intervals[v]!
      assert.strictEqual(iv.estimate, alone.estimate)
      const half = (alone.upper - alone.lower) / 2
      assert.closeTo(iv.lower, alone.lower, 0.06 * half)
      assert.closeTo(iv.upper, alone.upper, 0.06 * half)
      assert.strictEqual(iv.method, "percentile bootstrap over cases and repeats, 10000 resamples, seed 5 (case draws shared by 3 variants)")
    })
    for (const [b, c] of [[0, 1], [0, 2], [2, 1]] as const) {
      const alone = S.pairedBootstrap(groups[b]!, groups[c]!, { seed: 9, direction: "minimize" })!
      const p = sh.paired(b, c, { direction: "minimize" })
      assert.strictEqual(p.difference.estimate, alone.difference.estimate)
      assert.deepStrictEqual([p.cases, p.candidateWins, p.baselineWins, p.ties], [alone.cases, alone.candidateWins, alone.baselineWins, alone.ties])
      const half = (alone.difference.upper - alone.difference.lower) / 2
      assert.closeTo(p.difference.lower, alone.difference.lower, 0.06 * half)
      assert.closeTo(p.difference.upper, alone.difference.upper, 0.06 * half)
      assert.include(p.difference.method, "paired percentile bootstrap over cases and repeats")
    }
  })

  it("is reproducible for a seed; adding a variant after the others leaves their intervals as they were", () => {
    const two = S.sharedBootstrap(groups.slice(0, 2), { seed: 5 })!
    const again = S.sharedBootstrap(groups.slice(0, 2), { seed: 5 })!
    assert.deepStrictEqual(again.intervals, two.intervals)
    const three = S.sharedBootstrap(groups, { seed: 5 })!
    for (const v of [0, 1]) {
      assert.strictEqual(three.intervals[v]!.lower, two.intervals[v]!.lower)
      assert.strictEqual(three.intervals[v]!.upper, two.intervals[v]!.upper)
    }
    assert.strictEqual(three.paired(0, 1).difference.lower, two.paired(0, 1).difference.lower)
    const other = S.sharedBootstrap(groups.slice(0, 2), { seed: 6 })!
    assert.notStrictEqual(other.intervals[0]!.lower, two.intervals[0]!.lower)
  })

  it("one value per case: the paired interval is the bootstrap of the differences; a constant shift is a zero-width interval", () => {
    const xs = golden(200).map((u) => [u])
    const shifted = xs.map(([x]) => [x! + 0.25])
    const sh = S.sharedBootstrap([xs, shifted], { seed: 2 })!
    const d = sh.paired(0, 1).difference
    assert.closeTo(d.estimate, 0.25, 1e-12)
    assert.closeTo(d.lower, 0.25, 1e-12)
    assert.closeTo(d.upper, 0.25, 1e-12)
    assert.strictEqual(sh.intervals[0]!.method, "percentile bootstrap over cases, 10000 resamples, seed 2 (case draws shared by 2 variants)")
  })

  it("no group or no case is null; refuses groups of different lengths, a case without a value, NaN and unknown variants", () => {
    assert.isNull(S.sharedBootstrap([], { seed: 1 }))
    assert.isNull(S.sharedBootstrap([[], []], { seed: 1 }))
    assert.throws(() => S.sharedBootstrap([[[1]], [[1], [2]]], { seed: 1 }), RangeError, "groups[1] has 2 cases")
    assert.throws(() => S.sharedBootstrap([[[1], []]], { seed: 1 }), RangeError, "groups[0][1] has no value")
    assert.throws(() => S.sharedBootstrap([[[1], [NaN]]], { seed: 1 }), RangeError, "groups[0][1][0] is NaN")
    const sh = S.sharedBootstrap([[[1], [2]]], { seed: 1 })!
    assert.throws(() => sh.paired(0, 1), RangeError, "numbered 0 to 0")
    assert.throws(() => sh.paired(0, 0, { direction: "target" }), RangeError, "finite target")
  })
})

describe("ties up to floating-point noise", () => {
  it("nearlyEqual: one part in a billion is a tie, a real difference is not", () => {
    assert.isTrue(S.nearlyEqual(0.1 + 0.2, 0.3))
    assert.isTrue(S.nearlyEqual(0.0123, 0.0123 * (1 + 1e-12)))
    assert.isFalse(S.nearlyEqual(0.0123, 0.0124))
    assert.isFalse(S.nearlyEqual(0, 1e-15))
  })

  it("identical costs summed in another order: all ties, and the difference and its interval are exactly 0", () => {
    const base = [[0.1 + 0.2], [0.7 + 0.1], [0.3 + 0.6]]
    const cand = [[0.3], [0.8], [0.9]]
    assert.notStrictEqual(base[0]![0], cand[0]![0], "the fixture really differs in its last bits")
    for (const r of [S.pairedBootstrap(base, cand, { seed: 1, direction: "minimize" })!, S.sharedBootstrap([base, cand], { seed: 1 })!.paired(0, 1, { direction: "minimize" })]) {
      assert.deepStrictEqual([r.candidateWins, r.baselineWins, r.ties], [0, 0, 3])
      assert.deepStrictEqual([r.difference.estimate, r.difference.lower, r.difference.upper], [0, 0, 0])
    }
  })
})

describe("mcnemarExact", () => {
  it("matches exact binomial p-values (hand-computed and scipy.stats.binomtest)", () => {
    const table: ReadonlyArray<readonly [number, number, number]> = [
      [0, 6, 0.03125], // 2 · (1/2)^6
      [1, 9, 0.021484375], // 2 · 11/1024
      [2, 8, 0.109375], // 2 · 56/1024
      [7, 0, 0.015625],
      [3, 17, 0.0025768280029296875],
      [40, 62, 0.037066767438560584],
      [400, 470, 0.019267052848609047],
      [5, 5, 1],
      [0, 1, 1]
    ]
    for (const [b, c, p] of table) {
      const r = S.mcnemarExact(b, c)
      if (b + c <= 50) assert.strictEqual(r.pValue, p, `b=${b} c=${c}`) // exact in integers
      else assert.closeTo(r.pValue, p, p * 1e-10, `b=${b} c=${c}`)
      assert.deepStrictEqual([r.b, r.c], [b, c])
    }
  })

  it("no discordant pair gives p = 1; the method is named", () => {
    const r = S.mcnemarExact(0, 0)
    assert.strictEqual(r.pValue, 1)
    assert.strictEqual(r.method, "exact McNemar test (two-sided exact binomial sign test on 0 discordant cases)")
  })

  it("agrees with an exact BigInt computation for large counts (property)", () => {
    const exact = (b: number, c: number): number => {
      const n = b + c
      const k = Math.min(b, c)
      let coef = 1n
      let sum = 1n
      for (let j = 1; j <= k; j++) {
        coef = (coef * BigInt(n - j + 1)) / BigInt(j)
        sum += coef
      }
      // 2 · sum / 2^n from sum's top 64 bits (the rest is below double precision)
      const bits = sum.toString(2).length
      const drop = Math.max(0, bits - 64)
      return Math.min(1, 2 * Number(sum >> BigInt(drop)) * 2 ** (drop - n))
    }
    fc.assert(
      fc.property(fc.nat(600), fc.nat(600), (b, c) => {
        const want = exact(b, c)
        const got = S.mcnemarExact(b, c).pValue
        return want < 1e-15 ? got < 1e-14 : Math.abs(got - want) <= 1e-9 * want
      }),
      fcOpts
    )
  })

  it("refuses counts that are not non-negative integers", () => {
    assert.throws(() => S.mcnemarExact(-1, 2), RangeError, "b must be")
    assert.throws(() => S.mcnemarExact(1, 2.5), RangeError, "c must be")
    assert.throws(() => S.mcnemarExact(1, NaN), RangeError, "c must be")
  })
})

describe("sufficiency", () => {
  it("says 'insufficient sample' below 30 paired cases, or 3 repeats for a repeat-level claim", () => {
    assert.deepStrictEqual(S.sufficiency({ pairedCases: 12, repeats: 5 }), { sufficient: false, reason: "insufficient sample: 12 paired cases (< 30)" })
    assert.deepStrictEqual(S.sufficiency({ pairedCases: 1, repeats: 5 }), { sufficient: false, reason: "insufficient sample: 1 paired case (< 30)" })
    assert.deepStrictEqual(S.sufficiency({ pairedCases: 30, repeats: 1 }), { sufficient: true, reason: null })
    assert.deepStrictEqual(S.sufficiency({ pairedCases: 300, repeats: 2 }, undefined, "repeat"), { sufficient: false, reason: "insufficient sample: 2 repeats (< 3)" })
    assert.deepStrictEqual(S.sufficiency({ pairedCases: 0, repeats: 3 }, undefined, "repeat"), { sufficient: true, reason: null })
  })

  it("takes declared minimums and refuses nonsense counts", () => {
    assert.deepStrictEqual(S.sufficiency({ pairedCases: 40, repeats: 3 }, { cases: 50 }), { sufficient: false, reason: "insufficient sample: 40 paired cases (< 50)" })
    assert.deepStrictEqual(S.sufficiency({ pairedCases: 40, repeats: 4 }, { repeats: 5 }, "repeat"), { sufficient: false, reason: "insufficient sample: 4 repeats (< 5)" })
    assert.throws(() => S.sufficiency({ pairedCases: -1, repeats: 3 }), RangeError, "pairedCases")
    assert.throws(() => S.sufficiency({ pairedCases: 1, repeats: 3 }, { cases: 2.5 }), RangeError, "min.cases")
  })
})

describe("Pareto", () => {
  const accCost: ReadonlyArray<S.ParetoObjective> = [{ direction: "maximize" }, { direction: "minimize" }]
  const iv = (estimate: number, lower: number, upper: number): S.Interval => ({ estimate, lower, upper, level: 0.95, method: "test", resamples: null, seed: null })

  it("strict front of a hand-made set: dominated points drop, equal points both stay", () => {
    const points: ReadonlyArray<S.ParetoPoint> = [
      { id: "A", values: [0.9, 10] },
      { id: "B", values: [0.8, 5] },
      { id: "C", values: [0.85, 12] }, // A is better on both
      { id: "D", values: [0.9, 10] }, // equal to A
      { id: "E", values: [0.9, 11] } // A is equal on accuracy, better on cost
    ]
    assert.deepStrictEqual(S.paretoFront(points, accCost), ["A", "B", "D"])
    assert.isTrue(S.dominates(points[0]!, points[2]!, accCost, false))
    assert.isFalse(S.dominates(points[0]!, points[3]!, accCost, false))
    assert.isFalse(S.dominates(points[3]!, points[0]!, accCost, false))
    assert.deepStrictEqual(S.paretoFront([], accCost), [])
  })

  it("a point dominated only within noise is dropped by the strict front and kept by the uncertainty-aware one", () => {
    const points: ReadonlyArray<S.ParetoPoint> = [
      { id: "A", values: [iv(0.9, 0.85, 0.95), iv(10, 9.5, 10.5)] },
      { id: "E", values: [iv(0.88, 0.8, 0.95), iv(11, 10.2, 11.8)] }, // worse on both, intervals overlap A's
      { id: "F", values: [iv(0.5, 0.45, 0.55), iv(20, 19, 21)] }, // worse beyond the intervals
      { id: "G", values: [iv(0.7, 0.6, 0.8), iv(10.4, 10, 10.8)] } // worse beyond on accuracy, within on cost
    ]
    assert.deepStrictEqual(S.paretoFront(points, accCost), ["A"])
    assert.deepStrictEqual(S.paretoFrontUncertain(points, accCost), ["A", "E"])
    assert.isTrue(S.dominates(points[0]!, points[1]!, accCost, false))
    assert.isFalse(S.dominates(points[0]!, points[1]!, accCost, true))
    assert.isTrue(S.dominates(points[0]!, points[3]!, accCost, true))
  })

  it("uncertainty-aware dominance cycles (within noise is not transitive) are set aside: no empty front", () => {
    // a beats b beyond noise on the first objective and ties the others within noise, b beats c
    // on the third, c beats a on the second: pairwise, each dominates the next. The front sets
    // the cycle aside (the data do not order them) and keeps all three (since fix16ac).
    const max: ReadonlyArray<S.ParetoObjective> = [{ direction: "maximize" }, { direction: "maximize" }, { direction: "maximize" }]
    const a: S.ParetoPoint = { id: "a", values: [iv(5, 5, 5), iv(2, 0, 4), iv(6, 3, 10)] }
    const b: S.ParetoPoint = { id: "b", values: [iv(2, 0, 4), iv(6, 3, 10), iv(5, 5, 5)] }
    const c: S.ParetoPoint = { id: "c", values: [iv(6, 3, 10), iv(5, 5, 5), iv(2, 0, 4)] }
    assert.isTrue(S.dominates(a, b, max, true))
    assert.isTrue(S.dominates(b, c, max, true))
    assert.isTrue(S.dominates(c, a, max, true))
    assert.deepStrictEqual(S.paretoFrontUncertain([a, b, c], max), ["a", "b", "c"])
    assert.deepStrictEqual([...S.paretoDominators([a, b, c], max, true).values()], [[], [], []])
    // a fourth point beaten beyond noise by a, outside the cycle: that dominance stands
    const d: S.ParetoPoint = { id: "d", values: [iv(1, 0, 1.5), iv(2, 0, 4), iv(6, 3, 10)] }
    assert.deepStrictEqual(S.paretoFrontUncertain([a, b, c, d], max), ["a", "b", "c"])
    assert.deepStrictEqual(S.paretoDominators([a, b, c, d], max, true).get("d"), ["a", "c"])
    // the same cycle assembled pair by pair
    const by = S.dropDominanceCycles(new Map([["a", ["c"]], ["b", ["a"]], ["c", ["b"]], ["d", ["a", "c"]]]))
    assert.deepStrictEqual([...by], [["a", []], ["b", []], ["c", []], ["d", ["a", "c"]]])
    // and which points were set aside, for the report to say so (tester16g F1)
    assert.deepStrictEqual(S.paretoDominanceCycles([a, b, c, d], max), [["a", "b", "c"]])
    assert.deepStrictEqual(S.dominanceCycles(new Map([["a", ["c"]], ["b", ["a"]], ["c", ["b"]], ["d", ["a", "c"]]])), [["a", "b", "c"]])
    assert.deepStrictEqual(S.paretoDominanceCycles([a, d], max), [])
    assert.deepStrictEqual(S.dominanceCycles(new Map([["x", ["y"]], ["y", ["x"]], ["z", []], ["w", ["z"]]])), [["x", "y"]])
  })

  it("a lead within noise is a tie (issue 16): better beyond noise on one objective and behind within noise on another dominates (fix16ac F1)", () => {
    // X: accuracy far better; cost a little higher, within noise. Y: cheaper on the point estimate
    const x: S.ParetoPoint = { id: "X", values: [iv(0.9, 0.86, 0.94), iv(10.2, 9.6, 10.8)] }
    const y: S.ParetoPoint = { id: "Y", values: [iv(0.7, 0.65, 0.75), iv(10, 9.5, 10.5)] }
    assert.isTrue(S.dominates(x, y, accCost, true))
    assert.isFalse(S.dominates(y, x, accCost, true))
    // on point estimates Y's lower cost keeps it: the uncertainty-aware front is no superset of the strict one
    assert.isFalse(S.dominates(x, y, accCost, false))
    assert.deepStrictEqual(S.paretoFront([x, y], accCost), ["X", "Y"])
    assert.deepStrictEqual(S.paretoFrontUncertain([x, y], accCost), ["X"])
    assert.deepStrictEqual(S.paretoDominators([x, y], accCost, true).get("Y"), ["X"])
    assert.deepStrictEqual(S.objectiveLeads(x, y, accCost, true), ["a", "tie"])
    assert.deepStrictEqual(S.objectiveLeads(x, y, accCost, false), ["a", "b"])
    // the other way round: Y's lead on cost beyond noise blocks the dominance (a trade-off)
    const cheap: S.ParetoPoint = { id: "Z", values: [iv(0.7, 0.65, 0.75), iv(8, 7.5, 8.5)] }
    assert.isFalse(S.dominates(x, cheap, accCost, true))
    assert.isFalse(S.dominates(cheap, x, accCost, true))
    assert.deepStrictEqual(S.paretoFrontUncertain([x, cheap], accCost), ["X", "Z"])
    assert.deepStrictEqual(S.objectiveLeads(cheap, x, accCost, true), ["b", "a"])
    // within noise on both: a tie, neither dominates, both stay (whatever the point estimates)
    const near: S.ParetoPoint = { id: "N", values: [iv(0.88, 0.84, 0.92), iv(10.4, 9.8, 11)] }
    assert.isFalse(S.dominates(x, near, accCost, true))
    assert.isFalse(S.dominates(near, x, accCost, true))
    assert.deepStrictEqual(S.paretoFrontUncertain([x, near], accCost), ["X", "N"])
    // equal points: a tie everywhere
    assert.isFalse(S.dominates(x, { ...x, id: "X2" }, accCost, true))
    assert.deepStrictEqual(S.paretoFrontUncertain([x, { ...x, id: "X2" }], accCost), ["X", "X2"])
    // a paired answer decides both ways: Y better on cost beyond noise by the paired test blocks X
    const sepBoth = (a: string, b: string, k: number) => k === 0 ? a === "X" : a === "Y"
    assert.deepStrictEqual(S.paretoFrontUncertain([x, y], accCost, { separated: sepBoth }), ["X", "Y"])
    assert.deepStrictEqual(S.objectiveLeads(x, y, accCost, true, { separated: sepBoth }), ["a", "b"])
    // the paired test finds no difference on cost either way: a tie, X dominates
    const sepAcc = (a: string, _b: string, k: number) => k === 0 ? a === "X" : false
    assert.deepStrictEqual(S.paretoFrontUncertain([x, y], accCost, { separated: sepAcc }), ["X"])
  })

  it("target: closeness to the target decides, in point estimates and in intervals", () => {
    const obj: ReadonlyArray<S.ParetoObjective> = [{ direction: "target", target: 100 }]
    const pts: ReadonlyArray<S.ParetoPoint> = [{ id: "low", values: [95] }, { id: "high", values: [110] }, { id: "on", values: [100] }]
    assert.deepStrictEqual(S.paretoFront(pts, obj), ["on"])
    // [96, 104] contains the target: distance in [0, 4]; [105, 107]: distance in [5, 7] → beyond
    const a: S.ParetoPoint = { id: "a", values: [iv(101, 96, 104)] }
    const b: S.ParetoPoint = { id: "b", values: [iv(106, 105, 107)] }
    const c: S.ParetoPoint = { id: "c", values: [iv(103, 98, 108)] } // distance in [0, 8]: within
    assert.isTrue(S.dominates(a, b, obj, true))
    assert.isFalse(S.dominates(a, c, obj, true))
    assert.isTrue(S.dominates(a, c, obj, false))
    assert.throws(() => S.paretoFront(pts, [{ direction: "target" }]), RangeError, "needs a finite target")
  })

  it("refuses a wrong number of values, NaN and an interval that does not contain its estimate", () => {
    assert.throws(() => S.paretoFront([{ id: "x", values: [1] }], accCost), RangeError, "has 1 values for 2 objectives")
    assert.throws(() => S.paretoFront([{ id: "x", values: [1, NaN] }], accCost), RangeError, "point \"x\" value 1 (estimate) is NaN")
    assert.throws(() => S.paretoFront([{ id: "x", values: [1, iv(5, 6, 7)] }], accCost), RangeError, "does not contain its estimate")
    assert.throws(() => S.paretoFront([{ id: "x", values: [1] }], [{ direction: "up" as "maximize" }]), RangeError, "objectives[0].direction must be")
  })

  it("properties: non-empty front for non-empty input, no member dominated, bare numbers give the strict front", () => {
    const value = fc.tuple(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 3 }))
      .map(([e, dl, du]): S.Interval | number => (dl === 0 && du === 0 ? e : iv(e, e - dl, e + du)))
    const arb = fc.integer({ min: 1, max: 4 }).chain((m) =>
      fc.tuple(
        fc.array(fc.array(value, { minLength: m, maxLength: m }), { minLength: 1, maxLength: 12 }),
        fc.array(fc.constantFrom<S.ParetoObjective>({ direction: "maximize" }, { direction: "minimize" }, { direction: "target", target: 3 }), { minLength: m, maxLength: m })
      )
    )
    fc.assert(
      fc.property(arb, ([rows, objectives]) => {
        const points = rows.map((values, i) => ({ id: `p${i}`, values }))
        const strict = S.paretoFront(points, objectives)
        const loose = S.paretoFrontUncertain(points, objectives)
        const byId = new Map(points.map((p) => [p.id, p]))
        const undominated = (ids: ReadonlyArray<string>) => ids.every((id) => points.every((q) => !S.dominates(q, byId.get(id)!, objectives, false)))
        const by = S.paretoDominators(points, objectives, true)
        // off the uncertainty-aware front: dominated pairwise by someone; on it: by nobody outside a cycle
        const placed = points.every((p) => loose.includes(p.id) === (by.get(p.id)!.length === 0))
        const pairwise = points.every((p) => by.get(p.id)!.every((q) => S.dominates(byId.get(q)!, p, objectives, true)))
        // without uncertainty (every value a bare number) "beyond noise" is "better": the two fronts agree
        const bare = points.map((p) => ({ id: p.id, values: p.values.map((v) => typeof v === "number" ? v : v.estimate) }))
        const same = S.paretoFrontUncertain(bare, objectives).join() === S.paretoFront(bare, objectives).join()
        return strict.length > 0 && loose.length > 0 && undominated(strict) && placed && pairwise && same
      }),
      fcOpts
    )
  })
})

describe("weightedRanking", () => {
  const objectives = [{ direction: "maximize", weight: 2 }, { direction: "minimize", weight: 1 }] as const
  const points: ReadonlyArray<S.ParetoPoint> = [
    { id: "C", values: [85, 12] },
    { id: "A", values: [90, 10] },
    { id: "B", values: [80, 5] }
  ]

  it("orders by the weighted sum of min-max normalized goodness, ties in input order", () => {
    // accuracy → A 1, B 0, C 0.5; cost → A 2/7, B 1, C 0; scores A (2 + 2/7)/3, B 1/3, C 1/3
    const r = S.weightedRanking(points, objectives)
    assert.deepStrictEqual(r.map((x) => x.id), ["A", "C", "B"])
    assert.closeTo(r[0]!.score, (2 + 2 / 7) / 3, 1e-12)
    assert.closeTo(r[1]!.score, 1 / 3, 1e-12)
    assert.closeTo(r[2]!.score, 1 / 3, 1e-12)
  })

  it("normalizes: scores in [0, 1]; an objective where all points agree gives everyone 1", () => {
    const r = S.weightedRanking([{ id: "x", values: [3, 1] }, { id: "y", values: [3, 2] }], [{ direction: "maximize", weight: 1 }, { direction: "target", target: 1, weight: 1 }])
    assert.deepStrictEqual(r, [{ id: "x", score: 1 }, { id: "y", score: 0.5 }])
    assert.deepStrictEqual(S.weightedRanking([], objectives), [])
  })

  it("refuses negative weights and weights that add up to zero", () => {
    assert.throws(() => S.weightedRanking(points, [{ direction: "maximize", weight: -1 }, { direction: "minimize", weight: 1 }]), RangeError, "weight must be")
    assert.throws(() => S.weightedRanking(points, [{ direction: "maximize", weight: 0 }, { direction: "minimize", weight: 0 }]), RangeError, "add up to 0")
  })
})

describe("Statistics: small samples, resampled trial statistics, multiplicity (issue 16 review)", () => {
  it("Student's t and normal quantiles match published tables", () => {
    // Abramowitz & Stegun table 26.10 / any t table: t(0.975; 1) 12.706, (2) 4.303, (10) 2.228, (30) 2.042
    for (const [df, t] of [[1, 12.7062], [2, 4.3027], [10, 2.2281], [30, 2.0423]] as const) assert.closeTo(S.studentQuantile(0.975, df), t, 1e-4)
    assert.closeTo(S.studentQuantile(0.025, 4), -2.7764, 1e-4)
    assert.closeTo(S.normalQuantile(0.975), 1.959964, 1e-6)
    assert.closeTo(S.normalQuantile(0.0001), -3.719016, 1e-5)
  })

  it("studentInterval: mean ± t·s/√n, null below two values", () => {
    const i = S.studentInterval([1, 2, 3], 0.95)!
    assert.closeTo(i.lower, 2 - 4.302653 / Math.sqrt(3), 1e-5)
    assert.closeTo(i.upper, 2 + 4.302653 / Math.sqrt(3), 1e-5)
    assert.include(i.method, "df 2")
    assert.isNull(S.studentInterval([5], 0.95))
  })

  it("holm: step-down adjusted p-values in input order", () => {
    assert.deepStrictEqual(S.holm([0.01, 0.04, 0.03, 0.005]).map((p) => Math.round(p * 1e6) / 1e6), [0.03, 0.06, 0.06, 0.02])
  })

  it("bonferroniWiden scales each side by z(1 − α/2m)/z(1 − α/2)", () => {
    const i = { estimate: 0, lower: -1, upper: 2, level: 0.95, method: "m", resamples: null, seed: null }
    const w = S.bonferroniWiden(i, 10)
    const r = S.normalQuantile(1 - 0.05 / 20) / S.normalQuantile(0.975)
    assert.closeTo(w.lower, -r, 1e-12)
    assert.closeTo(w.upper, 2 * r, 1e-12)
    assert.strictEqual(S.bonferroniWiden(i, 1), i)
  })

  it("a target objective on the widened front: closer to the target beyond the widened intervals dominates, from either side; within them it does not", () => {
    const iv = (estimate: number, lower: number, upper: number): S.Interval => ({ estimate, lower, upper, level: 0.95, method: "t", resamples: null, seed: null })
    const objectives = [{ direction: "target" as const, target: 0.5 }]
    // the report widens every interval for k(k − 1)/2 × objectives pairwise comparisons: 5 variants → 10
    const widen = (ps: ReadonlyArray<S.ParetoPoint>) => ps.map((p) => ({ id: p.id, values: p.values.map((x) => typeof x === "number" ? x : S.bonferroniWiden(x, 10)) }))
    const points: ReadonlyArray<S.ParetoPoint> = [
      { id: "on", values: [iv(0.5, 0.48, 0.52)] }, // on the target
      { id: "above", values: [iv(0.6, 0.58, 0.62)] }, // 0.1 too high, far beyond the widened intervals
      { id: "below", values: [iv(0.4, 0.38, 0.42)] }, // 0.1 too low: as far from the target, as dominated
      { id: "near", values: [iv(0.55, 0.53, 0.57)] }, // beyond the raw intervals, within the widened ones
      { id: "wide", values: [iv(0.7, 0.2, 0.9)] } // its interval spans the target: never dominated
    ]
    // raw intervals: "near" is beaten beyond them (on's closeness ≥ −0.02 > near's ≤ −0.03)
    assert.deepStrictEqual(S.paretoFrontUncertain(points, objectives), ["on", "wide"])
    // widened (×1.43 at m = 10): "near" is no longer separated from "on"; "above" and "below" still are
    assert.deepStrictEqual(S.paretoFrontUncertain(widen(points), objectives), ["on", "near", "wide"])
    assert.isTrue(S.dominates(widen(points)[0]!, widen(points)[1]!, objectives, true))
    assert.isTrue(S.dominates(widen(points)[0]!, widen(points)[2]!, objectives, true))
    assert.isFalse(S.dominates(widen(points)[0]!, widen(points)[3]!, objectives, true))
    // the strict front on point estimates keeps only the variant on the target
    assert.deepStrictEqual(S.paretoFront(points, objectives), ["on"])
  })

  it("bootstrapReduced: the estimate is the mean of the repeats' statistic; equal variants give equal replicates, so their paired difference is exactly 0", () => {
    const rows = [[1, 5, 2, 8, 3, 9, 4], [2, 6, 1, 7, 3, 8, 5]]
    const r = S.bootstrapReduced([rows, rows], "p95", { seed: 3, resamples: 500 })
    const p95 = (xs: Array<number>) => S.quantile(xs, 0.95)
    assert.closeTo(r.intervals[0]!.estimate, (p95(rows[0]!) + p95(rows[1]!)) / 2, 1e-12)
    assert.isBelow(r.intervals[0]!.lower, r.intervals[0]!.estimate)
    const d = r.paired(0, 1)!
    assert.deepStrictEqual([d.estimate, d.lower, d.upper], [0, 0, 0])
  })

  it("bootstrapReduced: the paired difference is over exactly the values both sides have, for every reducer (issue 16: a sum counted the baseline's unpaired case)", () => {
    // the candidate lacks case 3 in both repeats; on the paired cases the two sides are equal
    const base = [[1, 5, 2, 40, 3, 9, 4], [2, 6, 1, 55, 3, 8, 5]]
    const cand = base.map((row) => row.map((y, c) => c === 3 ? null : y))
    for (const reducer of ["sum", "mean", "p50", "p95"] as const) {
      const r = S.bootstrapReduced([base, cand], reducer, { seed: 3, resamples: 500 })
      const d = r.paired(0, 1)!
      assert.deepStrictEqual([d.estimate, d.lower, d.upper], [0, 0, 0], reducer)
      assert.include(d.method, "both sides have", reducer)
    }
    // one paired case differs (case 5: 9 -> 2 and 8 -> 1): a sum's difference is -7 per repeat
    const moved = cand.map((row) => row.map((y, c) => c === 5 ? y! - 7 : y))
    const d = S.bootstrapReduced([base, moved], "sum", { seed: 3, resamples: 500 }).paired(0, 1)!
    assert.strictEqual(d.estimate, -7)
    assert.isAtMost(d.upper, 0)
  })

  it("bootstrapReduced and sharedBootstrap draw their resamples in blocks and give, to the last bit, the numbers of one resample at a time", () => {
    // the expected numbers were computed by the implementation that walked every variant once
    // per resample (main c27d728): the blocks (and the p95 read from the top) change the order
    // of the work, never the draws or the arithmetic, so a report prints the same digits.
    // 40 cases: blocks of 64 resamples, so 300 resamples end with a partial block; values on a
    // grid of 0.5 (ties), some cases missing, rows of different lengths
    const reducedInput = [0, 1, 2].map((v) =>
      Array.from({ length: 2 + (v % 2) }, (_, r) =>
        Array.from({ length: 40 - (r === 1 ? 3 : 0) }, (_, c) => ((c * 7 + r * 3 + v) % 11 === 0 ? null : Math.round(golden(1, c * 13 + r * 5 + v * 101)[0]! * 20) / 2))
      )
    )
    const expected: Record<string, { intervals: Array<Array<number>>; sums: Array<number>; paired: Array<number> }> = {"p95": {intervals: [[9.337499999999999, 8.3934375, 9.769687499999998], [9.016666666666666, 8.282916666666665, 9.571041666666668], [9.5625, 8.817812499999999, 9.75]], sums: [2762.462500000002, 2702.3250000000016, 2841.5499999999997], paired: [-0.4440625000000013, 1.1440625000000004]}, "p50": {intervals: [[3.5, 2.684375000000001, 5.25], [5.916666666666667, 4.833333333333333, 6.75], [4.625, 2.875, 6.25]], sums: [1120.375, 1729.4166666666658, 1384.125], paired: [-1, 3.0062499999999943]}, "mean": {intervals: [[4.358251633986928, 3.576702997640498, 5.11471629065379], [5.344037219037219, 4.751183599565953, 5.982166325989856], [4.741421568627452, 3.807455724225174, 5.56047181372549]], sums: [1303.2148637581793, 1609.8838640262725, 1423.7599514039928], paired: [-0.4933034293144587, 1.5027429054515287]}, "sum": {intervals: [[152.5, 123.11875, 183.75], [189, 167.16666666666666, 212.66666666666666], [166.25, 127.5, 198.14374999999998]], sums: [45545, 56959.16666666668, 49993.5], paired: [-22.049999999999986, 58.25]}}
    for (const reducer of ["p95", "p50", "mean", "sum"] as const) {
      const r = S.bootstrapReduced(reducedInput, reducer, { seed: 11, resamples: 300 })
      const pd = r.paired(0, 2)!
      // the case-bootstrap part of each interval (its percentile ends, never inside the
      // estimate), read from the replicates: the run-to-run spread is added on top of it
      // (tested in StatisticsRepeats.test.ts)
      const caseInterval = (est: number, reps: ReadonlyArray<number>) => [est, Math.min(S.quantile(reps, 0.025), est), Math.max(S.quantile(reps, 0.975), est)]
      // replicates to the last bit (their sums); interval ends, read here with another
      // quantile formula, to 1e-12
      const r12 = (xs: ReadonlyArray<number>) => xs.map((x) => +x.toFixed(12))
      const d = Array.from(r.replicates[2]!, (y, b) => y - r.replicates[0]![b]!)
      const dEst = r.intervals[2]!.estimate - r.intervals[0]!.estimate
      assert.deepStrictEqual({
        intervals: r.intervals.map((i, v) => r12(caseInterval(i!.estimate, Array.from(r.replicates[v]!)))),
        sums: r.replicates.map((x) => x.reduce((a, b) => a + b, 0)),
        paired: r12(caseInterval(dEst, d).slice(1))
      }, { ...expected[reducer]!, intervals: expected[reducer]!.intervals.map(r12), paired: r12(expected[reducer]!.paired) }, reducer)
      // and the interval reported contains the case part
      for (const [v, i] of r.intervals.entries()) {
        const [, lo, hi] = caseInterval(i!.estimate, Array.from(r.replicates[v]!))
        assert.isTrue(i!.lower <= lo! + 1e-12 && i!.upper >= hi! - 1e-12, `${reducer} variant ${v}`)
      }
      // the whole-sample difference (`expected.paired`, above) is not the paired one: variants 0
      // and 2 lack different cases, and the paired interval is over the values both have
      // (the same draws): it contains the case part of the two sides masked to those values
      const both = (r: number, c: number) => reducedInput[0]![r]?.[c] != null && reducedInput[2]![r]?.[c] != null
      const masked = [0, 2].map((v) => [0, 1].map((r) => Array.from({ length: 40 }, (_, c) => both(r, c) ? reducedInput[v]![r]![c]! : null)))
      const m = S.bootstrapReduced(masked, reducer, { seed: 11, resamples: 300 })
      const md = Array.from(m.replicates[1]!, (y, b) => y - m.replicates[0]![b]!)
      const [mEst, mLo, mHi] = caseInterval(m.intervals[1]!.estimate - m.intervals[0]!.estimate, md)
      assert.closeTo(pd.estimate, mEst!, 1e-12, `${reducer} paired estimate`)
      assert.notStrictEqual(pd.estimate, dEst, `${reducer}: the paired estimate is not the whole-sample one`)
      assert.isTrue(pd.lower <= mLo! + 1e-12 && pd.upper >= mHi! - 1e-12, `${reducer} paired`)
    }
    // 1 to 8 repeats per case: constant cases, tabled multisets and repeats drawn one by one
    const sharedInput = [0, 1, 2].map((v) =>
      Array.from({ length: 40 }, (_, c) => Array.from({ length: 1 + ((c + v) % 8) }, (_, t) => c % 5 === 0 ? 1 : golden(1, c * 17 + t * 3 + v * 7)[0]! + v * 0.1))
    )
    const sh = S.sharedBootstrap(sharedInput, { seed: 4, resamples: 300 })!
    const sd = sh.paired(0, 2).difference
    assert.deepStrictEqual({ intervals: sh.intervals.map((i) => [i.lower, i.upper]), paired: [sd.lower, sd.upper] }, {intervals: [[0.48099922589362565, 0.6504700709348155], [0.6012802626359868, 0.7518296998518142], [0.7154380456980757, 0.8428773148545605]], paired: [0.12475229867347633, 0.30061982935039205]})
  })

  it("paretoFrontUncertain: an incomparable pair removes nobody; a separated pair removes the loser", () => {
    const objectives = [{ direction: "maximize" as const }]
    const pts = [{ id: "a", values: [1] }, { id: "b", values: [2] }]
    assert.deepStrictEqual(S.paretoFrontUncertain(pts, objectives), ["b"])
    assert.deepStrictEqual(S.paretoFrontUncertain(pts, objectives, { comparable: () => false }), ["a", "b"])
    const wide = [{ id: "a", values: [{ estimate: 1, lower: 0, upper: 3, level: 0.95, method: "m", resamples: null, seed: null }] }, { id: "b", values: [2] }]
    assert.deepStrictEqual(S.paretoFrontUncertain(wide, objectives), ["a", "b"])
    assert.deepStrictEqual(S.paretoFrontUncertain(wide, objectives, { separated: (a) => a === "b" }), ["b"])
  })
})

describe("float noise is 0 (fix16ac F6)", () => {
  it("difference: a − b, exactly 0 within float noise of the two magnitudes, never -0", () => {
    assert.strictEqual(S.difference(0.1 + 0.2, 0.3), 0)
    assert.notStrictEqual(0.1 + 0.2 - 0.3, 0)
    assert.isTrue(Object.is(S.difference(0.3, 0.1 + 0.2), 0))
    assert.isTrue(Object.is(S.difference(-0, 0), 0))
    assert.strictEqual(S.difference(1e-17, 0), 1e-17) // a tiny value that is no noise of larger ones
    assert.strictEqual(S.difference(2, 0.5), 1.5)
  })

  it("bootstrapReduced: two sums equal but for float noise differ by exactly 0", () => {
    // per repeat, case values 0.1, 0.2, 0.3 against 0, 0.3, 0.3: sums 0.6000000000000001 and 0.6
    const a = [[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]]
    const b = [[0, 0.3, 0.3], [0, 0.3, 0.3]]
    assert.notStrictEqual(0.1 + 0.2 + 0.3, 0 + 0.3 + 0.3)
    const r = S.bootstrapReduced([a, b], "sum", { seed: 1, resamples: 200 })
    const d = r.paired(0, 1)!
    assert.isTrue(Object.is(d.estimate, 0), String(d.estimate))
  })

  it("the study views print a zero as 0, never -0", async () => {
    const Words = await import("../../src/domain/internal/words.js")
    assert.strictEqual(Words.figure(-0), "0")
    assert.strictEqual(Words.figure(0), "0")
    assert.strictEqual(Words.figure(-0.5), "-0.5000")
  })
})
