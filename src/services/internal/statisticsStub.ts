/**
 * @internal
 *
 * TEMPORARY stand-in for `src/domain/Statistics.ts` (built by the `stats` helper at the same
 * time, see notes/ISSUE16-PLAN.md): the same names and signatures as the contract, so that
 * `StudyCompare.ts` swaps its import when `stats` is merged and this file is deleted.
 * Implementations are plain and unoptimized.
 *
 * Sources: percentile bootstrap (Efron & Tibshirani 1993, ch. 13); exact McNemar test as a
 * two-sided exact binomial test on the discordant pairs (McNemar 1947; Fagerland, Lydersen &
 * Laake 2013); quantiles by Hyndman & Fan (1996) type 7.
 */
import { Utils } from "effect"

export type Direction = "maximize" | "minimize" | "target"
export interface Interval {
  readonly estimate: number
  readonly lower: number
  readonly upper: number
  readonly level: number
  readonly method: string
  readonly resamples: number | null
  readonly seed: number | null
}
export interface BootstrapOptions {
  readonly resamples?: number
  readonly level?: number
  readonly seed: number
}
export interface PairedDifference {
  readonly difference: Interval
  readonly cases: number
  readonly candidateWins: number
  readonly baselineWins: number
  readonly ties: number
}
export interface McNemar {
  readonly b: number
  readonly c: number
  readonly pValue: number
  readonly method: string
}
export interface Sufficiency {
  readonly sufficient: boolean
  readonly reason: string | null
}
export interface ParetoObjective {
  readonly direction: Direction
  readonly target?: number
}
export interface ParetoPoint {
  readonly id: string
  readonly values: ReadonlyArray<Interval | number>
}

export const mean = (xs: ReadonlyArray<number>): number => xs.length === 0 ? NaN : xs.reduce((a, b) => a + b, 0) / xs.length

export const quantile = (xs: ReadonlyArray<number>, p: number): number => {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  const h = (s.length - 1) * p
  const lo = Math.floor(h)
  const hi = Math.min(lo + 1, s.length - 1)
  return s[lo]! + (h - lo) * (s[hi]! - s[lo]!)
}

export const median = (xs: ReadonlyArray<number>): number => quantile(xs, 0.5)

const caseMeans = (values: ReadonlyArray<ReadonlyArray<number>>) => values.map((r) => mean(r))

const resampleMean = (values: ReadonlyArray<ReadonlyArray<number>>, rng: Utils.PCGRandom): number => {
  let sum = 0
  for (let i = 0; i < values.length; i++) {
    const row = values[rng.integer(values.length)]!
    let s = 0
    for (let j = 0; j < row.length; j++) s += row[rng.integer(row.length)]!
    sum += s / row.length
  }
  return sum / values.length
}

const percentile = (est: number, draws: Array<number>, level: number, resamples: number, seed: number, what: string): Interval => {
  draws.sort((a, b) => a - b)
  const a = (1 - level) / 2
  return {
    estimate: est,
    lower: quantile(draws, a),
    upper: quantile(draws, 1 - a),
    level,
    method: `percentile bootstrap over ${what}, ${resamples} resamples, seed ${seed} (stub)`,
    resamples,
    seed
  }
}

export const bootstrapMean = (values: ReadonlyArray<ReadonlyArray<number>>, o: BootstrapOptions): Interval => {
  const rows = values.filter((r) => r.length > 0)
  const resamples = o.resamples ?? 10_000
  const level = o.level ?? 0.95
  const est = mean(caseMeans(rows))
  if (rows.length === 0) return { estimate: NaN, lower: NaN, upper: NaN, level, method: "no values", resamples: null, seed: null }
  const rng = new Utils.PCGRandom(o.seed)
  const draws: Array<number> = []
  for (let k = 0; k < resamples; k++) draws.push(resampleMean(rows, rng))
  return percentile(est, draws, level, resamples, o.seed, "cases and repeats")
}

export const pairedBootstrap = (
  base: ReadonlyArray<ReadonlyArray<number>>,
  cand: ReadonlyArray<ReadonlyArray<number>>,
  o: BootstrapOptions
): PairedDifference => {
  const idx: Array<number> = []
  for (let i = 0; i < Math.min(base.length, cand.length); i++) if (base[i]!.length > 0 && cand[i]!.length > 0) idx.push(i)
  const resamples = o.resamples ?? 10_000
  const level = o.level ?? 0.95
  const diffs = idx.map((i) => mean(cand[i]!) - mean(base[i]!))
  let candidateWins = 0
  let baselineWins = 0
  let ties = 0
  for (const d of diffs) d > 0 ? candidateWins++ : d < 0 ? baselineWins++ : ties++
  const est = mean(diffs)
  const rng = new Utils.PCGRandom(o.seed)
  const draws: Array<number> = []
  for (let k = 0; k < resamples && idx.length > 0; k++) {
    let s = 0
    for (let n = 0; n < idx.length; n++) {
      const i = idx[rng.integer(idx.length)]!
      const b = base[i]!
      const c = cand[i]!
      let sb = 0
      for (let j = 0; j < b.length; j++) sb += b[rng.integer(b.length)]!
      let sc = 0
      for (let j = 0; j < c.length; j++) sc += c[rng.integer(c.length)]!
      s += sc / c.length - sb / b.length
    }
    draws.push(s / idx.length)
  }
  return {
    difference: idx.length === 0
      ? { estimate: NaN, lower: NaN, upper: NaN, level, method: "no paired cases", resamples: null, seed: null }
      : percentile(est, draws, level, resamples, o.seed, "paired cases and repeats"),
    cases: idx.length,
    candidateWins,
    baselineWins,
    ties
  }
}

const logChoose = (n: number, k: number) => {
  let s = 0
  for (let i = 1; i <= k; i++) s += Math.log(n - k + i) - Math.log(i)
  return s
}

export const mcnemarExact = (b: number, c: number): McNemar => {
  const n = b + c
  let p = 1
  if (n > 0) {
    const k = Math.min(b, c)
    let tail = 0
    for (let i = 0; i <= k; i++) tail += Math.exp(logChoose(n, i) - n * Math.LN2)
    p = Math.min(1, 2 * tail)
  }
  return { b, c, pValue: p, method: "exact McNemar test (two-sided binomial on discordant pairs) (stub)" }
}

export const sufficiency = (
  f: { readonly pairedCases: number; readonly repeats: number },
  min: { readonly cases?: number; readonly repeats?: number } = {},
  claim: "case" | "repeat" = "case"
): Sufficiency => {
  const cases = min.cases ?? 30
  const repeats = min.repeats ?? 3
  if (claim === "case" && f.pairedCases < cases) {
    return { sufficient: false, reason: `insufficient sample: ${f.pairedCases} paired cases (< ${cases})` }
  }
  if (claim === "repeat" && f.repeats < repeats) {
    return { sufficient: false, reason: `insufficient sample: ${f.repeats} repeats (< ${repeats})` }
  }
  return { sufficient: true, reason: null }
}

const est = (v: Interval | number) => typeof v === "number" ? v : v.estimate
const score = (v: number, o: ParetoObjective) =>
  o.direction === "maximize" ? v : o.direction === "minimize" ? -v : -Math.abs(v - (o.target ?? 0))
const bounds = (v: Interval | number, o: ParetoObjective): readonly [number, number] => {
  if (typeof v === "number") return [score(v, o), score(v, o)]
  if (o.direction === "target") {
    const t = o.target ?? 0
    const near = t >= v.lower && t <= v.upper ? 0 : Math.min(Math.abs(v.lower - t), Math.abs(v.upper - t))
    return [-Math.max(Math.abs(v.lower - t), Math.abs(v.upper - t)), -near]
  }
  const a = score(v.lower, o)
  const b = score(v.upper, o)
  return [Math.min(a, b), Math.max(a, b)]
}

export const dominates = (a: ParetoPoint, b: ParetoPoint, objectives: ReadonlyArray<ParetoObjective>, uncertain: boolean): boolean => {
  let better = false
  for (let i = 0; i < objectives.length; i++) {
    const o = objectives[i]!
    if (!uncertain) {
      const x = score(est(a.values[i]!), o)
      const y = score(est(b.values[i]!), o)
      if (x < y) return false
      if (x > y) better = true
    } else {
      const [alo, ahi] = bounds(a.values[i]!, o)
      const [blo, bhi] = bounds(b.values[i]!, o)
      if (ahi < blo) return false
      if (alo > bhi) better = true
    }
  }
  return better
}

const front = (points: ReadonlyArray<ParetoPoint>, objectives: ReadonlyArray<ParetoObjective>, uncertain: boolean) =>
  points.filter((p) => !points.some((q) => q !== p && dominates(q, p, objectives, uncertain))).map((p) => p.id)

export const paretoFront = (points: ReadonlyArray<ParetoPoint>, objectives: ReadonlyArray<ParetoObjective>): ReadonlyArray<string> =>
  front(points, objectives, false)

export const paretoFrontUncertain = (
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective>
): ReadonlyArray<string> => front(points, objectives, true)

export const weightedRanking = (
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective & { readonly weight: number }>
): ReadonlyArray<{ readonly id: string; readonly score: number }> => {
  const scores = points.map((p) => ({ id: p.id, score: 0 }))
  objectives.forEach((o, i) => {
    const s = points.map((p) => score(est(p.values[i]!), o))
    const lo = Math.min(...s)
    const hi = Math.max(...s)
    s.forEach((v, k) => {
      scores[k]!.score += o.weight * (hi === lo ? 1 : (v - lo) / (hi - lo))
    })
  })
  return scores.sort((a, b) => b.score - a.score)
}
