/**
 * Statistics for comparing study variants: pure functions, no I/O, no ambient randomness.
 *
 * - summaries: {@link mean}, {@link median}, {@link quantile} (Hyndman & Fan type 7);
 * - intervals: {@link bootstrapMean} (two-stage percentile bootstrap over cases, then repeats
 *   within a case) and {@link pairedBootstrap} (the same over the per-case differences of two
 *   variants measured on the same cases, with win / loss / tie counts);
 * - binary outcomes: {@link mcnemarExact} (exact McNemar test on the discordant pairs);
 * - how much data a claim needs: {@link sufficiency} ("insufficient sample" below 30 paired
 *   cases, or 3 repeats for repeat-level claims);
 * - several objectives at once: {@link dominates}, {@link paretoFront} (point estimates),
 *   {@link paretoFrontUncertain} (dominated only by a lead beyond the intervals, a lead within
 *   them being a tie), {@link paretoDominators}, {@link objectiveLeads} (who leads on what) and
 *   {@link weightedRanking} (min-max normalized weighted sum, a secondary view);
 * - trial-level statistics and small samples: {@link bootstrapReduced} (a p95, p50, sum or
 *   mean recomputed per trial over resampled cases), {@link studentInterval} (a few repeat
 *   values), {@link bonferroniWiden} and {@link holm} (many comparisons at once).
 *
 * Randomness is seeded: every bootstrap takes a `seed`, draws from effect's `Utils.PCGRandom`
 * seeded with it, and echoes the seed in its result, so the same input and seed give the same
 * interval on every machine.
 *
 * Input rules (a breach is a caller bug and throws a `RangeError` naming the position, e.g.
 * `values[3][1]`): every value is a finite number (NaN and ±Infinity are refused, never
 * silently dropped: the caller decides what a missing value means and leaves it out); options
 * are in range (`level` in (0, 1), `resamples` a positive integer, `seed` a non-negative safe
 * integer). "Not enough data" is not an error: the summaries return NaN on an empty list and
 * the bootstraps return `null` when there is no value (resp. no paired case) at all.
 *
 * `docs/statistics.md` is the guide.
 *
 * @since 0.6.0
 */
import { Utils } from "effect"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * Which way an objective is better: larger values (`maximize`), smaller values (`minimize`),
 * or values closer to a target (`target`: the distance `|v − target|` is minimized).
 *
 * @since 0.6.0
 * @category models
 */
export type Direction = "maximize" | "minimize" | "target"

/**
 * A point estimate with a two-sided interval around it.
 *
 * - `estimate`: the statistic on the data as given (e.g. the mean of the per-case means);
 * - `lower` / `upper`: the interval's ends, in the metric's unit (`lower ≤ upper`; equal for a
 *   zero-width interval, e.g. when every value is the same);
 * - `level`: the nominal coverage, a fraction (0.95 for a 95 % interval);
 * - `method`: how it was computed, in words, for reports (e.g. "percentile bootstrap over
 *   cases and repeats, 10000 resamples, seed 7");
 * - `resamples` / `seed`: the bootstrap's settings, `null` for an interval not computed by
 *   resampling.
 *
 * @since 0.6.0
 * @category models
 */
export interface Interval {
  readonly estimate: number
  readonly lower: number
  readonly upper: number
  readonly level: number
  readonly method: string
  readonly resamples: number | null
  readonly seed: number | null
}

/**
 * Settings of a bootstrap: `resamples` (a positive integer, default 10,000), `level` (the
 * interval's coverage in (0, 1), default 0.95), `seed` (a non-negative safe integer; the same
 * seed gives the same interval) and `stages`:
 *
 * - `"casesAndRepeats"` (default): two-stage, cases with replacement, then each drawn case's
 *   repeats with replacement;
 * - `"cases"`: one stage, cases with replacement, each drawn case keeping its own repeats (and
 *   so its own mean). This is the cluster bootstrap Davison & Hinkley (1997, §3.8) prefer when
 *   there are many cases: it does not count the repeat noise twice, so its interval is a little
 *   narrower, and it costs a fraction of the two-stage one (no draw per repeat).
 *
 * @since 0.6.0
 * @category models
 */
export interface BootstrapOptions {
  readonly resamples?: number
  readonly level?: number
  readonly seed: number
  readonly stages?: "cases" | "casesAndRepeats"
}

/**
 * Settings of a paired bootstrap: those of {@link BootstrapOptions}, plus the metric's
 * `direction` (default `maximize`) and, for `target`, its `target`. The direction only decides
 * which side a case's win goes to; the difference is always `candidate − baseline`.
 *
 * @since 0.6.0
 * @category models
 */
export interface PairedOptions extends BootstrapOptions {
  readonly direction?: Direction
  readonly target?: number
}

/**
 * A paired comparison of a candidate with a baseline over the same cases.
 *
 * - `difference`: the mean over paired cases of `mean(candidate repeats) − mean(baseline
 *   repeats)`, with its bootstrap interval (in the metric's unit);
 * - `cases`: how many cases were paired (a case counts when both sides have at least one
 *   value);
 * - `candidateWins` / `baselineWins` / `ties`: in how many paired cases the candidate's
 *   per-case mean is better than the baseline's (per the direction), worse, or equal up to
 *   floating-point noise ({@link nearlyEqual}); the three add up to `cases`. The difference
 *   and its interval ends print as 0 when within that tolerance of 0 at the scale of the
 *   case means.
 *
 * @since 0.6.0
 * @category models
 */
export interface PairedDifference {
  readonly difference: Interval
  readonly cases: number
  readonly candidateWins: number
  readonly baselineWins: number
  readonly ties: number
}

/**
 * The exact McNemar test of two binary outcomes on the same cases: `b` = cases the baseline
 * got right and the candidate wrong, `c` = the reverse, `pValue` the two-sided exact p-value
 * (in [0, 1]), `method` in words.
 *
 * @since 0.6.0
 * @category models
 */
export interface McNemar {
  readonly b: number
  readonly c: number
  readonly pValue: number
  readonly method: string
}

/**
 * Whether a sample is large enough for a significance statement; when not, `reason` says why
 * in the words a report prints (`"insufficient sample: 12 paired cases (< 30)"`).
 *
 * @since 0.6.0
 * @category models
 */
export interface Sufficiency {
  readonly sufficient: boolean
  readonly reason: string | null
}

/**
 * One objective of a Pareto comparison: its direction and, for `target`, the target value.
 *
 * @since 0.6.0
 * @category models
 */
export interface ParetoObjective {
  readonly direction: Direction
  readonly target?: number
}

/**
 * A candidate in a Pareto comparison: an id and one value per objective, in the objectives'
 * order; a value is a number (no uncertainty) or an {@link Interval} (its `estimate` is the
 * point value, `lower`/`upper` its uncertainty).
 *
 * @since 0.6.0
 * @category models
 */
export interface ParetoPoint {
  readonly id: string
  readonly values: ReadonlyArray<Interval | number>
}

// ---------------------------------------------------------------------------------------------
// Input checks (caller bugs throw)
// ---------------------------------------------------------------------------------------------

const refuse = (fn: string, message: string): never => {
  throw new RangeError(`Statistics.${fn}: ${message}`)
}

const checkFinite = (fn: string, x: number, at: string): void => {
  if (!Number.isFinite(x)) {
    refuse(fn, `${at} is ${String(x)}; only finite numbers can be summarized (leave a missing value out instead)`)
  }
}

const checkList = (fn: string, xs: ReadonlyArray<number>, name: string): void => {
  for (let i = 0; i < xs.length; i++) checkFinite(fn, xs[i]!, `${name}[${i}]`)
}

interface Settings {
  readonly resamples: number
  readonly level: number
  readonly seed: number
  readonly inner: boolean
}

const settingsOf = (fn: string, o: BootstrapOptions): Settings => {
  const resamples = o.resamples ?? 10_000
  const level = o.level ?? 0.95
  if (!Number.isSafeInteger(resamples) || resamples < 1) refuse(fn, `resamples must be a positive integer, got ${resamples}`)
  if (!(level > 0 && level < 1)) refuse(fn, `level must be in (0, 1), got ${level}`)
  if (!Number.isSafeInteger(o.seed) || o.seed < 0) refuse(fn, `seed must be a non-negative safe integer, got ${o.seed}`)
  const stages = o.stages ?? "casesAndRepeats"
  if (stages !== "cases" && stages !== "casesAndRepeats") refuse(fn, `stages must be "cases" or "casesAndRepeats", got ${String(stages)}`)
  return { resamples, level, seed: o.seed, inner: stages === "casesAndRepeats" }
}

// ---------------------------------------------------------------------------------------------
// Summaries
// ---------------------------------------------------------------------------------------------

/**
 * The arithmetic mean; `NaN` for an empty list. Computed as `x₀ + Σ(xᵢ − x₀)/n`, so a list of
 * equal values gives exactly that value.
 *
 * @throws RangeError (a caller bug) when a value is not finite.
 * @since 0.6.0
 * @category summaries
 */
export const mean = (xs: ReadonlyArray<number>): number => {
  checkList("mean", xs, "xs")
  const n = xs.length
  if (n === 0) return NaN
  const x0 = xs[0]!
  let acc = 0
  for (let i = 1; i < n; i++) acc += xs[i]! - x0
  return x0 + acc / n
}

const sortedCopy = (xs: ReadonlyArray<number>): Float64Array => Float64Array.from(xs).sort()

/** Type 7 on an already sorted array (no checks). */
const quantileSorted = (s: Float64Array, p: number): number => {
  const n = s.length
  if (n === 0) return NaN
  const h = (n - 1) * p
  const lo = Math.floor(h)
  if (lo >= n - 1) return s[n - 1]!
  const a = s[lo]!
  const b = s[lo + 1]!
  return a === b ? a : a + (h - lo) * (b - a)
}

/**
 * The sample quantile of probability `p` (in [0, 1]) by Hyndman & Fan's definition 7 (the
 * default of R's `quantile()` and of NumPy): with the values sorted `x₍₁₎ ≤ … ≤ x₍ₙ₎` and
 * `h = (n − 1)·p`, the result is `x₍⌊h⌋+1₎ + (h − ⌊h⌋)·(x₍⌊h⌋+2₎ − x₍⌊h⌋+1₎)`, linear
 * interpolation between order statistics (`p = 0` gives the minimum, `p = 1` the maximum).
 * `NaN` for an empty list.
 *
 * Source: R. J. Hyndman and Y. Fan, "Sample quantiles in statistical packages", The American
 * Statistician 50(4), 361–365, 1996.
 *
 * @throws RangeError (a caller bug) when a value is not finite or `p` is not in [0, 1].
 * @since 0.6.0
 * @category summaries
 */
export const quantile = (xs: ReadonlyArray<number>, p: number): number => {
  checkList("quantile", xs, "xs")
  if (!(p >= 0 && p <= 1)) refuse("quantile", `p must be in [0, 1], got ${p}`)
  return quantileSorted(sortedCopy(xs), p)
}

/**
 * The median: {@link quantile} at 0.5 (the middle value, or the mean of the two middle values
 * for an even count); `NaN` for an empty list.
 *
 * @throws RangeError (a caller bug) when a value is not finite.
 * @since 0.6.0
 * @category summaries
 */
export const median = (xs: ReadonlyArray<number>): number => quantile(xs, 0.5)

// ---------------------------------------------------------------------------------------------
// Resampling machinery
// ---------------------------------------------------------------------------------------------

const TWO_52 = 4_503_599_627_370_496

/**
 * Uniform indices from one PCG stream, several per draw, exactly uniform: a 52-bit draw `m`
 * uniform on `[0, c)` yields the index `m mod k` and keeps `⌊m/k⌋`, uniform on `[0, ⌊c/k⌋)`,
 * for the next index, as long as `m < k·⌊c/k⌋`; otherwise (a rejection), and whenever fewer
 * than `k` values remain, a fresh 52-bit draw is taken. Integers below 2^53 are exact in
 * doubles, and `⌊m/k⌋` is corrected where the product by `1/k` rounds across an integer, so the
 * arithmetic is exact. With 1,000 cases this takes one PCG draw per five indices.
 */
class Indices {
  private m = 0
  private c = 0
  constructor(private readonly rng: Utils.PCGRandom) {}
  /** An index below `k`; `inv` is `1 / k` (a multiplication is cheaper than a division). */
  next(k: number, inv: number): number {
    for (;;) {
      if (this.c < k) {
        this.m = Math.floor(this.rng.number() * TWO_52)
        this.c = TWO_52
      }
      const m = this.m
      const c = this.c
      // ⌊m/k⌋ and ⌊c/k⌋ from the rounded products, corrected by one where they rounded across
      let q = Math.floor(m * inv)
      let j = m - q * k
      if (j < 0) {
        q--
        j += k
      } else if (j >= k) {
        q++
        j -= k
      }
      let cap = Math.floor(c * inv)
      const rest = c - cap * k
      if (rest < 0) cap--
      else if (rest >= k) cap++
      if (q < cap) {
        this.m = q
        this.c = cap
        return j
      }
      this.c = 0
    }
  }
}

/** A PCG stream for a seed below 2^53 (the high and low 32 bits seed the generator). */
const rngOf = (seed: number): Utils.PCGRandom => new Utils.PCGRandom(Math.floor(seed / 4_294_967_296), seed >>> 0)

/**
 * Resampling `r` repeats with replacement (`r` draws below `r`) is one draw `u` below `r^r`
 * (its base-`r` digits are the `r` draws); what matters of it is the multiset of drawn repeats.
 * For `r` ≤ {@link MAX_TABLED} the multisets are enumerated once: `ofDraw[u]` is the multiset's
 * number and `counts[s·r + t]` how often multiset `s` holds repeat `t`. A case then resamples
 * its repeats with one index draw and one table look-up (its mean for each multiset is
 * precomputed), instead of `r` draws and `r` additions.
 */
interface Multisets {
  readonly r: number
  readonly draws: number
  readonly inv: number
  readonly ofDraw: Uint16Array
  readonly size: number
  readonly counts: Uint8Array
}

const MAX_TABLED = 6
const multisetTables = new Map<number, Multisets>()

const multisetsOf = (r: number): Multisets => {
  const known = multisetTables.get(r)
  if (known !== undefined) return known
  const draws = r ** r
  const ofDraw = new Uint16Array(draws)
  const byKey = new Map<string, number>()
  const countRows: Array<ReadonlyArray<number>> = []
  const cnt = new Array<number>(r)
  for (let u = 0; u < draws; u++) {
    cnt.fill(0)
    for (let t = 0, v = u; t < r; t++, v = Math.floor(v / r)) cnt[v % r]!++
    const key = cnt.join(",")
    let id = byKey.get(key)
    if (id === undefined) {
      id = countRows.length
      byKey.set(key, id)
      countRows.push(cnt.slice())
    }
    ofDraw[u] = id
  }
  const counts = new Uint8Array(countRows.length * r)
  countRows.forEach((row, s) => row.forEach((c, t) => (counts[s * r + t] = c)))
  const table: Multisets = { r, draws, inv: 1 / draws, ofDraw, size: countRows.length, counts }
  multisetTables.set(r, table)
  return table
}

/**
 * A side's values packed for resampling, only cases with a value: `flat` holds the values case
 * after case, `start`/`count` locate case i, `caseMean` is its mean (shifted by its first value,
 * so a constant case has exactly that value as its mean). `kind[i]`: 0 = nothing to resample
 * (one repeat, or all repeats equal), 1 = tabled (`tableAt[i]` is the offset of its means per
 * multiset in `tabled`), 2 = resampled repeat by repeat.
 */
interface Packed {
  readonly flat: Float64Array
  readonly start: Int32Array
  readonly count: Int32Array
  readonly caseMean: Float64Array
  readonly kind: Uint8Array
  readonly tableAt: Int32Array
  readonly tabled: Float64Array
  readonly tables: ReadonlyArray<Multisets | undefined>
  readonly multi: boolean
}

const pack = (rows: ReadonlyArray<ReadonlyArray<number>>, keep: ReadonlyArray<number>, inner: boolean, tabulate = true): Packed => {
  const n = keep.length
  let total = 0
  let tabledSize = 0
  const tables: Array<Multisets | undefined> = []
  for (let i = 0; i < n; i++) {
    const r = rows[keep[i]!]!.length
    total += r
    if (inner && r >= 2 && r <= MAX_TABLED) {
      const t = tables[r] ?? (tables[r] = multisetsOf(r))
      if (tabulate) tabledSize += t.size
    }
  }
  const flat = new Float64Array(total)
  const start = new Int32Array(n)
  const count = new Int32Array(n)
  const caseMean = new Float64Array(n)
  const kind = new Uint8Array(n)
  const tableAt = new Int32Array(n)
  const tabled = new Float64Array(tabledSize)
  let multi = false
  let at = 0
  let tat = 0
  for (let i = 0; i < n; i++) {
    const row = rows[keep[i]!]!
    const r = row.length
    start[i] = at
    count[i] = r
    if (r > 1) multi = true
    const x0 = row[0]!
    let acc = 0
    let constant = true
    for (let t = 0; t < r; t++) {
      flat[at++] = row[t]!
      acc += row[t]! - x0
      if (row[t] !== x0) constant = false
    }
    caseMean[i] = x0 + acc / r
    if (constant || !inner) continue
    if (r <= MAX_TABLED) {
      const t = tables[r]!
      kind[i] = 1
      tableAt[i] = tat
      if (!tabulate) continue
      for (let s = 0; s < t.size; s++) {
        let a = 0
        for (let v = 0; v < r; v++) a += t.counts[s * r + v]! * (row[v]! - x0)
        tabled[tat++] = x0 + a / r
      }
    } else {
      kind[i] = 2
    }
  }
  return { flat, start, count, caseMean, kind, tableAt, tabled, tables, multi }
}

/** Case `j`'s mean over its repeats resampled with replacement (its own mean if nothing varies). */
const resampledCaseMean = (p: Packed, j: number, ix: Indices): number => {
  const kind = p.kind[j]!
  if (kind === 0) return p.caseMean[j]!
  const r = p.count[j]!
  if (kind === 1) {
    const t = p.tables[r]!
    return p.tabled[p.tableAt[j]! + t.ofDraw[ix.next(t.draws, t.inv)]!]!
  }
  const s = p.start[j]!
  const flat = p.flat
  const x0 = flat[s]!
  const inv = 1 / r
  let acc = 0
  for (let t = 0; t < r; t++) acc += flat[s + ix.next(r, inv)]! - x0
  return x0 + acc / r
}

/** As the tabled branch of {@link resampledCaseMean}, computing the multiset's mean from its counts. */
const multisetMean = (p: Packed, j: number, ix: Indices): number => {
  const r = p.count[j]!
  const t = p.tables[r]!
  const s = t.ofDraw[ix.next(t.draws, t.inv)]! * r
  const at = p.start[j]!
  const flat = p.flat
  const x0 = flat[at]!
  let a = 0
  for (let v = 0; v < r; v++) a += t.counts[s + v]! * (flat[at + v]! - x0)
  return x0 + a / r
}

const shiftedMean = (xs: Float64Array): number => {
  const x0 = xs[0]!
  let acc = 0
  for (let i = 1; i < xs.length; i++) acc += xs[i]! - x0
  return x0 + acc / xs.length
}

const checkRows = (fn: string, rows: ReadonlyArray<ReadonlyArray<number>>, name: string): void => {
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!
    for (let t = 0; t < row.length; t++) checkFinite(fn, row[t]!, `${name}[${i}][${t}]`)
  }
}

/** What a resample draws, in words. */
const over = (multi: boolean, inner: boolean): string => !multi ? "cases" : inner ? "cases and repeats" : "cases (each with its repeats)"

const percentile = (stats: Float64Array, level: number): { readonly lower: number; readonly upper: number } => {
  stats.sort()
  const alpha = 1 - level
  return { lower: quantileSorted(stats, alpha / 2), upper: quantileSorted(stats, 1 - alpha / 2) }
}

/**
 * How many resamples a shared bootstrap draws at once ({@link sharedBootstrap},
 * {@link bootstrapReduced}): as many as keep the block's per-case draws or counts within
 * 32,768 entries (128 KiB), at least 1 and at most 64.
 */
const blockOf = (n: number): number => Math.max(1, Math.min(64, Math.floor(32_768 / Math.max(n, 1))))

// ---------------------------------------------------------------------------------------------
// Bootstrap
// ---------------------------------------------------------------------------------------------

/**
 * The mean of a variant's metric with a percentile bootstrap interval.
 *
 * `values[case][repeat]`: one row per case, one value per repeat; a case may have fewer
 * repeats than another (a missing repeat is left out, not NaN) and a case with no value is
 * skipped. For a metric with one value per trial, pass one row per repeat (`[[r1], [r2], …]`).
 *
 * - Estimate: the mean of the per-case means (every case weighs the same; with the same number
 *   of repeats per case this is the mean of all values).
 * - Interval: two-stage percentile bootstrap (Efron & Tibshirani 1993, ch. 13; for two-level
 *   data Davison & Hinkley 1997, §3.8): each resample draws as many cases as there are, with
 *   replacement, and within each drawn case as many repeats as it has, with replacement; the
 *   statistic is the mean of the resampled case means; the interval's ends are the `(1 −
 *   level)/2` and `(1 + level)/2` type-7 quantiles of the `resamples` statistics. Resampling
 *   the repeats as well as the cases counts the repeat-to-repeat noise a second time, so the
 *   interval is, if anything, a little wide (the safe side for a study that must not
 *   over-claim). With one value per case it is the ordinary one-stage percentile bootstrap.
 *   `stages: "cases"` keeps each drawn case's repeats as they are (one stage; see
 *   {@link BootstrapOptions}).
 * - Randomness: `Utils.PCGRandom` seeded with `o.seed`; the same values and options give the
 *   same interval, the seed is echoed in the result and in `method`.
 *
 * Edge cases: no value at all → `null` (nothing to estimate); a single case → the interval
 * reflects its repeats only (zero width with `stages: "cases"`); all values equal → a zero-width interval at that value. Whether
 * the sample supports a claim is {@link sufficiency}'s question, not this one's.
 *
 * Cost: per resample, one index draw per case plus, in two stages, one per case whose repeats
 * differ (cases of up to 6 repeats resample them with one draw and a table look-up); typed
 * arrays, no allocation per resample (10,000 resamples of 1,000 cases × 5 repeats: see
 * BENCHMARKS.md).
 *
 * Sources: B. Efron and R. J. Tibshirani, An Introduction to the Bootstrap, Chapman & Hall,
 * 1993 (percentile interval, ch. 13); A. C. Davison and D. V. Hinkley, Bootstrap Methods and
 * their Application, Cambridge University Press, 1997 (hierarchical data, §3.8).
 *
 * @throws RangeError (a caller bug) when a value is not finite or an option is out of range.
 * @since 0.6.0
 * @category intervals
 */
export const bootstrapMean = (values: ReadonlyArray<ReadonlyArray<number>>, o: BootstrapOptions): Interval | null => {
  const { inner, level, resamples, seed } = settingsOf("bootstrapMean", o)
  checkRows("bootstrapMean", values, "values")
  const keep: Array<number> = []
  for (let i = 0; i < values.length; i++) if (values[i]!.length > 0) keep.push(i)
  const n = keep.length
  if (n === 0) return null
  const p = pack(values, keep, inner)
  const ref = p.caseMean[0]!
  const estimate = shiftedMean(p.caseMean)
  const stats = new Float64Array(resamples)
  const ix = new Indices(rngOf(seed))
  const invN = 1 / n
  for (let b = 0; b < resamples; b++) {
    let acc = 0
    for (let i = 0; i < n; i++) acc += resampledCaseMean(p, ix.next(n, invN), ix) - ref
    stats[b] = ref + acc / n
  }
  const { lower, upper } = percentile(stats, level)
  return {
    estimate,
    lower,
    upper,
    level,
    method: `percentile bootstrap over ${over(p.multi, inner)}, ${resamples} resamples, seed ${seed}`,
    resamples,
    seed
  }
}

const closeness = (v: number, target: number): number => -Math.abs(v - target)

/** +1 when `cand` is better than `base` for the direction, −1 when worse, 0 when equal. */
/**
 * The per-case differences (candidate − baseline case means) of `n` paired cases, and the
 * number of cases each side wins by `direction` (`compareFor`).
 */
const pairedCaseDiffs = (direction: Direction, target: number, pb: Packed, pc: Packed, n: number) => {
  const diffs = new Float64Array(n)
  let candidateWins = 0
  let baselineWins = 0
  for (let i = 0; i < n; i++) {
    const b = pb.caseMean[i]!
    const c = pc.caseMean[i]!
    diffs[i] = c - b
    const w = compareFor(direction, target, b, c)
    if (w > 0) candidateWins++
    else if (w < 0) baselineWins++
  }
  return { diffs, candidateWins, baselineWins }
}

const compareFor = (direction: Direction, target: number, base: number, cand: number): number => {
  if (nearlyEqual(base, cand)) return 0
  if (direction === "target" && nearlyEqual(Math.abs(cand - target), Math.abs(base - target))) return 0
  const d = direction === "maximize" ? cand - base : direction === "minimize" ? base - cand : closeness(cand, target) - closeness(base, target)
  return d > 0 ? 1 : d < 0 ? -1 : 0
}

/**
 * The relative tolerance under which two per-case values count as a tie: `1e-9`. Sums of
 * costs or latencies computed in a different order differ in their last bits (a study once
 * reported `Δ -1.807e-20` with "wins" between identical costs); a real difference between
 * two measured values is many orders of magnitude above one part in a billion.
 *
 * @since 0.8.0
 * @category comparing
 */
export const TIE_TOLERANCE = 1e-9

/**
 * Whether two numbers are equal up to floating-point noise:
 * `|a − b| ≤ TIE_TOLERANCE · max(|a|, |b|, 1e-12)` (relative, with an absolute floor of
 * `1e-21` near zero). Used for the paired wins and ties, the sign / McNemar test's discordant
 * cases, and to print a paired difference that small as 0.
 *
 * @param a a finite number
 * @param b a finite number
 * @returns `true` when the two differ by no more than the tolerance
 * @since 0.8.0
 * @category comparing
 */
export const nearlyEqual = (a: number, b: number): boolean =>
  Math.abs(a - b) <= TIE_TOLERANCE * Math.max(Math.abs(a), Math.abs(b), 1e-12)

/**
 * The difference `a − b` as a report states it: exactly 0 when the two are equal up to
 * floating-point noise ({@link nearlyEqual}: relative to the larger magnitude of the two), so a
 * difference of sums of 0.1s, `2.7755575615628914e-17`, is 0, and never `-0`.
 *
 * @param a a finite number
 * @param b a finite number
 * @returns `a − b`, or 0
 * @since 0.16.0
 * @category comparing
 */
export const difference = (a: number, b: number): number => nearlyEqual(a, b) ? 0 : a - b

/** The scale of a paired comparison: the largest absolute case mean on either side. */
const scaleOf = (pb: Packed, pc: Packed, n: number): number => {
  let m = 0
  for (let i = 0; i < n; i++) m = Math.max(m, Math.abs(pb.caseMean[i]!), Math.abs(pc.caseMean[i]!))
  return m
}

/** A paired difference (or one of its interval ends) within noise of 0 at `scale` is 0. */
const snap = (x: number, scale: number): number => Math.abs(x) <= TIE_TOLERANCE * Math.max(scale, 1e-12) ? 0 : x

/**
 * A paired comparison of a candidate with the baseline on the same cases.
 *
 * `base[case][repeat]` and `cand[case][repeat]` index the SAME cases (row i of both is the same
 * case; the two lists must be equally long); a case is paired when both sides have at least
 * one value, the others are left out. Per paired case, `dᵢ = mean(cand repeats) − mean(base
 * repeats)`.
 *
 * - `difference.estimate`: the mean of the `dᵢ`, in the metric's unit (positive = the
 *   candidate's values are larger, whatever the direction);
 * - `difference` interval: paired two-stage percentile bootstrap (Efron & Tibshirani 1993,
 *   ch. 13): each resample draws the paired cases with replacement,
 *   the SAME case for both sides, and within a drawn case resamples each side's repeats with
 *   replacement (the two sides' repeats are separate trials, so independently); the statistic
 *   is the mean of the resampled differences (with `stages: "cases"`: of the drawn cases' own
 *   differences). Seeded as in {@link bootstrapMean}.
 * - `candidateWins` / `baselineWins` / `ties`: per paired case, whether the candidate's mean is
 *   better per `o.direction` (default `maximize`; `minimize`; `target`: closer to `o.target`),
 *   worse or equal up to {@link nearlyEqual} (a tie). The estimate and the interval ends are
 *   set to exactly 0 when within `TIE_TOLERANCE` of 0 relative to the largest case mean.
 *
 * Edge cases: no paired case → `null`; every `dᵢ` equal and no repeat noise → a zero-width
 * interval. For binary outcomes with one value per case, {@link mcnemarExact} is the exact
 * test; this interval is still the difference in rates.
 *
 * Sources: B. Efron and R. J. Tibshirani, An Introduction to the Bootstrap, Chapman & Hall,
 * 1993; A. C. Davison and D. V. Hinkley, Bootstrap Methods and their Application, 1997, §3.8.
 *
 * @throws RangeError (a caller bug) when the lists differ in length, a value is not finite, an
 *   option is out of range, `direction` is not one of the three, or `direction` is `target`
 *   without a finite `target`.
 * @since 0.6.0
 * @category intervals
 */
export const pairedBootstrap = (
  base: ReadonlyArray<ReadonlyArray<number>>,
  cand: ReadonlyArray<ReadonlyArray<number>>,
  o: PairedOptions
): PairedDifference | null => {
  const { inner, level, resamples, seed } = settingsOf("pairedBootstrap", o)
  if (base.length !== cand.length) {
    refuse("pairedBootstrap", `base has ${base.length} cases and cand ${cand.length}; both must list the same cases in the same order`)
  }
  const direction = o.direction ?? "maximize"
  checkDirection("pairedBootstrap", direction, "direction")
  const target = o.target ?? NaN
  if (direction === "target" && !Number.isFinite(target)) refuse("pairedBootstrap", "direction target needs a finite target")
  checkRows("pairedBootstrap", base, "base")
  checkRows("pairedBootstrap", cand, "cand")
  const keep: Array<number> = []
  for (let i = 0; i < base.length; i++) if (base[i]!.length > 0 && cand[i]!.length > 0) keep.push(i)
  const n = keep.length
  if (n === 0) return null
  const pb = pack(base, keep, inner)
  const pc = pack(cand, keep, inner)
  const { baselineWins, candidateWins, diffs } = pairedCaseDiffs(direction, target, pb, pc, n)
  const ref = diffs[0]!
  const estimate = shiftedMean(diffs)
  const stats = new Float64Array(resamples)
  const ix = new Indices(rngOf(seed))
  const invN = 1 / n
  const multi = pb.multi || pc.multi
  for (let b = 0; b < resamples; b++) {
    let acc = 0
    if (multi && inner) {
      for (let i = 0; i < n; i++) {
        const j = ix.next(n, invN)
        acc += resampledCaseMean(pc, j, ix) - resampledCaseMean(pb, j, ix) - ref
      }
    } else {
      for (let i = 0; i < n; i++) acc += diffs[ix.next(n, invN)]! - ref
    }
    stats[b] = ref + acc / n
  }
  const { lower, upper } = percentile(stats, level)
  const scale = scaleOf(pb, pc, n)
  return {
    difference: {
      estimate: snap(estimate, scale),
      lower: snap(lower, scale),
      upper: snap(upper, scale),
      level,
      method: `paired percentile bootstrap over ${over(multi, inner)}, ${resamples} resamples, seed ${seed}`,
      resamples,
      seed
    },
    cases: n,
    candidateWins,
    baselineWins,
    ties: n - candidateWins - baselineWins
  }
}

/**
 * The bootstraps of several variants measured on the same cases, computed together
 * (see {@link sharedBootstrap}).
 *
 * - `intervals[v]`: variant v's mean with its percentile interval, as {@link bootstrapMean}
 *   defines it (estimate, two-stage or one-stage resampling, type-7 percentile ends);
 * - `paired(base, cand, o)`: the paired comparison of variant `cand` with variant `base`, as
 *   {@link pairedBootstrap} defines it (difference cand − base of the per-case means, wins per
 *   `o.direction`, default `maximize`, and `o.target`), every case being paired.
 *
 * @since 0.7.0
 * @category models
 */
export interface SharedBootstrap {
  readonly intervals: ReadonlyArray<Interval>
  readonly paired: (base: number, cand: number, o?: { readonly direction?: Direction; readonly target?: number }) => PairedDifference
}

/**
 * Percentile bootstraps of many variants over the SAME cases with each resample's case draws
 * shared: `groups[v][case][repeat]`, every group with the same cases in the same order and at
 * least one value per case. For each resample one vector of case indices is drawn (with
 * replacement) and serves every variant; within a drawn case each variant's repeats are
 * resampled from a stream of its own (two stages, the default; `stages: "cases"` keeps them).
 *
 * Each variant's interval is then a percentile bootstrap of its mean exactly as
 * {@link bootstrapMean} describes, and the paired difference of two variants on a resample is
 * the difference of their resampled means over the same drawn cases — the paired two-stage
 * bootstrap of {@link pairedBootstrap} (the same cases for both sides, each side's repeats
 * resampled independently) — so the comparisons against a baseline cost nothing beyond the
 * variants' own bootstraps, and the case draws are made once instead of once per variant and
 * comparison. The numbers differ from separate {@link bootstrapMean} / {@link pairedBootstrap}
 * calls only by Monte Carlo error (other draws, the same distribution). Variant v's repeat
 * draws come from its own PCG stream (increment chosen by v), so adding a variant after the
 * others leaves their intervals unchanged. `method` names the sharing.
 *
 * Cost: per resample, n case draws in all plus, per variant, one table look-up or draw per
 * case whose repeats differ; memory: `groups.length × resamples` doubles. Resamples are
 * taken in blocks of up to 64 (their case draws first, then each variant over the block), so
 * the time per variant does not grow with the number of variants; the numbers are the same
 * as resample by resample.
 *
 * Sources: as {@link bootstrapMean} (Efron & Tibshirani 1993, ch. 13; Davison & Hinkley 1997,
 * §3.8); sharing the resampled indices across statistics of the same data is the usual way
 * to bootstrap several statistics jointly (Efron & Tibshirani 1993, ch. 6).
 *
 * @returns `null` when there is no group or no case
 * @throws RangeError (a caller bug) when groups differ in their number of cases, a case has no
 *   value, a value is not finite or an option is out of range.
 * @since 0.7.0
 * @category intervals
 */
export const sharedBootstrap = (
  groups: ReadonlyArray<ReadonlyArray<ReadonlyArray<number>>>,
  o: BootstrapOptions
): SharedBootstrap | null => {
  const { inner, level, resamples, seed } = settingsOf("sharedBootstrap", o)
  const V = groups.length
  if (V === 0) return null
  const n = groups[0]!.length
  for (let v = 0; v < V; v++) {
    const g = groups[v]!
    if (g.length !== n) refuse("sharedBootstrap", `groups[${v}] has ${g.length} cases and groups[0] ${n}; every group must list the same cases`)
    checkRows("sharedBootstrap", g, `groups[${v}]`)
    for (let i = 0; i < n; i++) if (g[i]!.length === 0) refuse("sharedBootstrap", `groups[${v}][${i}] has no value; leave out the variant or the case`)
  }
  if (n === 0) return null
  const all = Array.from({ length: n }, (_, i) => i)
  // no per-case tables of multiset means (126 doubles per case of 5 repeats, per variant):
  // the mean of a drawn multiset is computed from the shared counts, in the same order, so it
  // is the same number the table would hold
  const packs = groups.map((g) => pack(g, all, inner, false))
  const refs = packs.map((p) => p.caseMean[0]!)
  const stats = new Float64Array(V * resamples)
  const cases = new Indices(rngOf(seed))
  const hi = Math.floor(seed / 4_294_967_296)
  const lo = seed >>> 0
  // variant v's repeats: its own PCG stream (the increment selects the stream)
  const repeatsOf = packs.map((_, v) => new Indices(new Utils.PCGRandom(hi, lo, v + 1, 0x2545f491)))
  const flat = packs.map((p) => p.kind.every((k) => k === 0))
  // resamples in blocks: the block's case draws first (the shared stream, in the same order),
  // then each variant over the whole block, so that one variant's packed cases stay in the
  // cache for the block instead of every variant's being walked once per resample (with 200
  // variants they are far larger than a core's cache). Each variant still consumes its own
  // repeat stream in resample order, so the numbers are the same as resample by resample.
  const block = blockOf(n)
  const idx = new Int32Array(block * n)
  const invN = 1 / n
  for (let b0 = 0; b0 < resamples; b0 += block) {
    const bn = Math.min(block, resamples - b0)
    for (let k = 0; k < bn * n; k++) idx[k] = cases.next(n, invN)
    for (let v = 0; v < V; v++) {
      const p = packs[v]!
      const ref = refs[v]!
      const means = p.caseMean
      const kind = p.kind
      const ix = repeatsOf[v]!
      const out = v * resamples + b0
      for (let bb = 0; bb < bn; bb++) {
        const off = bb * n
        let acc = 0
        if (flat[v]) {
          for (let i = 0; i < n; i++) acc += means[idx[off + i]!]! - ref
        } else {
          for (let i = 0; i < n; i++) {
            const j = idx[off + i]!
            acc += (kind[j] === 0 ? means[j]! : kind[j] === 1 ? multisetMean(p, j, ix) : resampledCaseMean(p, j, ix)) - ref
          }
        }
        stats[out + bb] = ref + acc / n
      }
    }
  }
  const shared = V > 1 ? ` (case draws shared by ${V} variants)` : ""
  const intervals = packs.map((p, v): Interval => {
    const { lower, upper } = percentile(stats.slice(v * resamples, (v + 1) * resamples), level)
    return {
      estimate: shiftedMean(p.caseMean),
      lower,
      upper,
      level,
      method: `percentile bootstrap over ${over(p.multi, inner)}, ${resamples} resamples, seed ${seed}${shared}`,
      resamples,
      seed
    }
  })
  const paired = (base: number, cand: number, po: { readonly direction?: Direction; readonly target?: number } = {}): PairedDifference => {
    if (!(Number.isInteger(base) && base >= 0 && base < V && Number.isInteger(cand) && cand >= 0 && cand < V)) {
      refuse("sharedBootstrap", `paired(${base}, ${cand}): variants are numbered 0 to ${V - 1}`)
    }
    const direction = po.direction ?? "maximize"
    checkDirection("sharedBootstrap", direction, "direction")
    const target = po.target ?? NaN
    if (direction === "target" && !Number.isFinite(target)) refuse("sharedBootstrap", "direction target needs a finite target")
    const pb = packs[base]!
    const pc = packs[cand]!
    const { baselineWins, candidateWins, diffs } = pairedCaseDiffs(direction, target, pb, pc, n)
    const d = new Float64Array(resamples)
    for (let b = 0; b < resamples; b++) d[b] = stats[cand * resamples + b]! - stats[base * resamples + b]!
    const { lower, upper } = percentile(d, level)
    const pairMulti = pb.multi || pc.multi
    const scale = scaleOf(pb, pc, n)
    return {
      difference: {
        estimate: snap(shiftedMean(diffs), scale),
        lower: snap(lower, scale),
        upper: snap(upper, scale),
        level,
        method: `paired percentile bootstrap over ${over(pairMulti, inner)}, ${resamples} resamples, seed ${seed}${shared}`,
        resamples,
        seed
      },
      cases: n,
      candidateWins,
      baselineWins,
      ties: n - candidateWins - baselineWins
    }
  }
  return { intervals, paired }
}

// ---------------------------------------------------------------------------------------------
// Exact McNemar
// ---------------------------------------------------------------------------------------------

/**
 * The exact McNemar test for two binary outcomes on the same cases (did the baseline / the
 * candidate get case i right?). Only the discordant cases carry information: `b` cases the
 * baseline got right and the candidate wrong, `c` the reverse. Under the null hypothesis (both
 * equally often right) each discordant case goes either way with probability ½, so `b` given
 * `n = b + c` is Binomial(n, ½); the two-sided exact p-value is
 * `min(1, 2 · P(X ≤ min(b, c)))`, X ~ Binomial(n, ½) (the exact conditional test).
 *
 * Edge cases: `b + c = 0` (no discordant case) → `p = 1`; `b = c` → `p = 1`. Up to 50
 * discordant pairs the sum is computed exactly in integers (b=0, c=6 → 0.03125; b=1, c=9 →
 * 0.021484375, to the last bit); above, in log space relative to its largest term, so large
 * `n` neither underflows nor loses precision (relative error around 1e-13).
 *
 * **Repeated measures.** With several repeats of each side, the (case, repeat) pairs are not
 * independent (a deterministic system repeats its answers; three identical repeats would
 * triple `b` and `c` and shrink the p-value for nothing). The unit is then the case: per case,
 * the candidate's and the baseline's outcomes averaged over their repeats; a case is discordant
 * when the two averages differ, `b` counting the cases where the baseline's is better and `c`
 * the candidate's; this function on those counts is the two-sided exact sign test on the
 * cluster (case) means, which is exactly McNemar's exact test when there is one repeat.
 * `StudyCompare` calls it that way (its `b` / `c` are the paired comparison's
 * `baselineWins` / `candidateWins`).
 *
 * The exact conditional test is conservative (its actual size is below the nominal level);
 * Fagerland et al. recommend the mid-p variant for routine use. assay reports the exact test
 * and says so in `method`.
 *
 * Sources: Q. McNemar, "Note on the sampling error of the difference between correlated
 * proportions or percentages", Psychometrika 12(2), 153–157, 1947; M. W. Fagerland,
 * S. Lydersen and P. Laake, "The McNemar test for binary matched-pairs data: mid-p and
 * asymptotic are better than exact conditional", BMC Medical Research Methodology 13:91, 2013;
 * for the cluster-level (sign test on case means) analysis of repeated binary outcomes,
 * A. Agresti, Categorical Data Analysis, 3rd ed., Wiley, 2013, §10.1 (marginal models for
 * matched pairs) and the cluster-level approach to clustered matched-pairs data.
 *
 * @throws RangeError (a caller bug) when `b` or `c` is not a non-negative safe integer.
 * @since 0.6.0
 * @category tests
 */
export const mcnemarExact = (b: number, c: number): McNemar => {
  if (!Number.isSafeInteger(b) || b < 0) refuse("mcnemarExact", `b must be a non-negative integer count, got ${b}`)
  if (!Number.isSafeInteger(c) || c < 0) refuse("mcnemarExact", `c must be a non-negative integer count, got ${c}`)
  const n = b + c
  const method = `exact McNemar test (two-sided exact binomial sign test on ${n} discordant case${n === 1 ? "" : "s"})`
  const k = Math.min(b, c)
  if (n === 0 || 2 * k >= n) return { b, c, pValue: 1, method }
  if (n <= 50) {
    // the binomial coefficients and their sum are integers below 2^53: exact, then one exact scaling
    let coef = 1
    let sum = 1
    for (let j = 1; j <= k; j++) {
      coef = (coef * (n - j + 1)) / j
      sum += coef
    }
    return { b, c, pValue: Math.min(1, sum * 2 ** (1 - n)), method }
  }
  // P(X ≤ k) = t_k · (1 + t_{k−1}/t_k + …), t_j = C(n, j) / 2^n, largest term t_k for k < n/2.
  let logTk = -n * Math.LN2
  for (let i = 0; i < k; i++) logTk += Math.log((n - i) / (i + 1))
  let ratio = 1
  let sum = 1
  for (let j = k; j >= 1; j--) {
    ratio *= j / (n - j + 1)
    sum += ratio
  }
  const pValue = Math.min(1, 2 * Math.exp(logTk + Math.log(sum)))
  return { b, c, pValue, method }
}

// ---------------------------------------------------------------------------------------------
// Sufficiency
// ---------------------------------------------------------------------------------------------

/**
 * Whether a comparison has enough data for a significance statement. A case-level claim (the
 * default) needs at least `min.cases` paired cases (default 30); a repeat-level claim (a metric
 * with one value per trial, compared across repeats) needs at least `min.repeats` repeats
 * (default 3). When the sample is short, `reason` is the report's wording:
 * `"insufficient sample: 12 paired cases (< 30)"` or `"insufficient sample: 2 repeats (< 3)"`,
 * and the report then makes no significance statement.
 *
 * @throws RangeError (a caller bug) when a count or a minimum is not a non-negative integer.
 * @since 0.6.0
 * @category sufficiency
 */
export const sufficiency = (
  f: { readonly pairedCases: number; readonly repeats: number },
  min?: { readonly cases?: number; readonly repeats?: number },
  claim: "case" | "repeat" = "case"
): Sufficiency => {
  const minCases = min?.cases ?? 30
  const minRepeats = min?.repeats ?? 3
  for (const [name, v] of [["pairedCases", f.pairedCases], ["repeats", f.repeats], ["min.cases", minCases], ["min.repeats", minRepeats]] as const) {
    if (!Number.isSafeInteger(v) || v < 0) refuse("sufficiency", `${name} must be a non-negative integer, got ${v}`)
  }
  if (claim === "repeat") {
    return f.repeats >= minRepeats
      ? { sufficient: true, reason: null }
      : { sufficient: false, reason: `insufficient sample: ${f.repeats} repeat${f.repeats === 1 ? "" : "s"} (< ${minRepeats})` }
  }
  return f.pairedCases >= minCases
    ? { sufficient: true, reason: null }
    : { sufficient: false, reason: `insufficient sample: ${f.pairedCases} paired case${f.pairedCases === 1 ? "" : "s"} (< ${minCases})` }
}

// ---------------------------------------------------------------------------------------------
// Pareto
// ---------------------------------------------------------------------------------------------

/** An objective value as "goodness" (larger is better): point and interval. */
interface Good {
  readonly point: number
  readonly lo: number
  readonly hi: number
}

const goodness = (fn: string, p: ParetoPoint, i: number, o: ParetoObjective): Good => {
  const v = p.values[i]!
  const at = `point ${JSON.stringify(p.id)} value ${i}`
  const [est, lo, hi] = typeof v === "number" ? [v, v, v] : [v.estimate, v.lower, v.upper]
  checkFinite(fn, est, `${at} (estimate)`)
  checkFinite(fn, lo, `${at} (lower)`)
  checkFinite(fn, hi, `${at} (upper)`)
  if (lo > est || est > hi) refuse(fn, `${at}: the interval [${lo}, ${hi}] does not contain its estimate ${est}`)
  switch (o.direction) {
    case "maximize":
      return { point: est, lo, hi }
    case "minimize":
      return { point: -est, lo: -hi, hi: -lo }
    case "target": {
      const t = o.target!
      const far = Math.max(Math.abs(lo - t), Math.abs(hi - t))
      const near = t >= lo && t <= hi ? 0 : Math.min(Math.abs(lo - t), Math.abs(hi - t))
      return { point: closeness(est, t), lo: -far, hi: -near }
    }
  }
}

const DIRECTIONS: ReadonlyArray<string> = ["maximize", "minimize", "target"]

const checkDirection = (fn: string, direction: string, at: string): void => {
  if (!DIRECTIONS.includes(direction)) refuse(fn, `${at} must be maximize, minimize or target, got ${JSON.stringify(direction)}`)
}

const checkObjectives = (fn: string, objectives: ReadonlyArray<ParetoObjective>): void => {
  objectives.forEach((o, i) => {
    checkDirection(fn, o.direction, `objectives[${i}].direction`)
    if (o.direction === "target" && !Number.isFinite(o.target)) refuse(fn, `objectives[${i}]: direction target needs a finite target`)
  })
}

const goodsOf = (fn: string, p: ParetoPoint, objectives: ReadonlyArray<ParetoObjective>): ReadonlyArray<Good> => {
  if (p.values.length !== objectives.length) {
    refuse(fn, `point ${JSON.stringify(p.id)} has ${p.values.length} values for ${objectives.length} objectives`)
  }
  return objectives.map((o, i) => goodness(fn, p, i, o))
}

/**
 * Who leads on one objective: `1` when `x` is better than `y`, `-1` when `y` is better than `x`,
 * `0` for a tie. Strict: on the point estimates. Uncertainty-aware: better beyond noise only
 * (`ab()` / `ba()` when they answer, else the two intervals do not overlap); a lead within
 * noise is a tie. A lead beyond noise is a lead on the point estimates too, so `ab()` is asked
 * only when `x`'s point estimate is ahead (and `ba()` only when `y`'s is).
 */
const leadOf = (
  x: Good,
  y: Good,
  uncertain: boolean,
  ab?: (() => boolean | undefined) | undefined,
  ba?: (() => boolean | undefined) | undefined
): -1 | 0 | 1 => {
  if (x.point > y.point) return !uncertain || (ab?.() ?? x.lo > y.hi) ? 1 : 0
  if (y.point > x.point) return !uncertain || (ba?.() ?? y.lo > x.hi) ? -1 : 0
  return 0
}

/**
 * Whether `a` dominates `b` on these goods: no objective on which `b` leads (strict: on the
 * point estimates; uncertain: beyond noise), and at least one on which `a` leads.
 * `separated(k, reverse)`: the paired answer for objective `k`, `a` over `b` (or `b` over `a`
 * when `reverse`), `undefined` when the intervals decide. Uncertain: the leads of `a` are
 * looked for first, and `b`'s only when `a` has one (a paired answer may be costly).
 */
const dominatesGood = (
  a: ReadonlyArray<Good>,
  b: ReadonlyArray<Good>,
  uncertain: boolean,
  separated?: ((objective: number, reverse: boolean) => boolean | undefined) | undefined
): boolean => {
  if (!uncertain) {
    let better = false
    for (let i = 0; i < a.length; i++) {
      if (a[i]!.point < b[i]!.point) return false
      if (a[i]!.point > b[i]!.point) better = true
    }
    return better
  }
  let better = false
  for (let i = 0; i < a.length && !better; i++) {
    if (leadOf(a[i]!, b[i]!, true, separated && (() => separated(i, false))) > 0) better = true
  }
  if (!better) return false
  for (let i = 0; i < a.length; i++) {
    if (b[i]!.point > a[i]!.point && leadOf(a[i]!, b[i]!, true, undefined, separated && (() => separated(i, true))) < 0) return false
  }
  return true
}

/**
 * Whether point `a` dominates point `b` over the objectives (values in the objectives' order;
 * `target` objectives compare the distance `|v − target|`, smaller is better).
 *
 * - Strict (`uncertain = false`, Pareto dominance on point estimates): `a` is at least as good
 *   as `b` on every objective and better on at least one. Equal points do not dominate each
 *   other.
 * - Uncertainty-aware (`uncertain = true`): `a` is better than `b` beyond the intervals on at
 *   least one objective (a's interval lies entirely on the better side of b's, no overlap; a
 *   bare number is a zero-width interval), and `b` is better than `a` beyond the intervals on
 *   none. A lead within noise, either way, is a tie on that objective: a variant better beyond
 *   noise on accuracy and dearer by less than the noise on cost dominates (issue 16: "better
 *   or equal on every objective and better on one beyond the intervals"). So a difference
 *   within noise never makes a point dominated, and never saves it either. The two relations
 *   differ both ways: an uncertainty-aware dominance need not be a strict one (its winner may
 *   be behind on a point estimate, within noise) and a strict one need not be uncertainty-aware
 *   (its lead may be within noise). The uncertainty-aware front is therefore not a superset of
 *   the strict front.
 *
 * This is the pairwise relation; the uncertainty-aware fronts ({@link paretoFrontUncertain},
 * {@link paretoDominators}) also set aside dominance cycles (see there), which a pairwise
 * relation on overlapping intervals can form.
 *
 * Source: Pareto dominance as in K. Deb, Multi-Objective Optimization using Evolutionary
 * Algorithms, Wiley, 2001, ch. 2; the interval condition is assay's rule (issue 16).
 *
 * @throws RangeError (a caller bug) when a point has the wrong number of values, a value or an
 *   interval end is not finite, an interval does not contain its estimate, an objective's
 *   direction is not one of the three, or a `target` objective has no finite target.
 * @since 0.6.0
 * @category pareto
 */
export const dominates = (a: ParetoPoint, b: ParetoPoint, objectives: ReadonlyArray<ParetoObjective>, uncertain: boolean): boolean => {
  checkObjectives("dominates", objectives)
  return dominatesGood(goodsOf("dominates", a, objectives), goodsOf("dominates", b, objectives), uncertain)
}

/**
 * Options of {@link paretoFrontUncertain}: `comparable(a, b)` tells whether the data can rank
 * point `a` against point `b` at all (e.g. their comparison has the minimum sample: see
 * {@link sufficiency}); when it returns `false`, `a` never dominates `b` whatever the
 * intervals say. Default: every pair is comparable.
 *
 * @since 0.9.0
 * @category models
 */
export interface UncertainFrontOptions {
  readonly comparable?: ((a: string, b: string) => boolean) | undefined
  /**
   * Whether `a` is better than `b` beyond noise on objective number `objective`, from
   * something better than the two marginal intervals (e.g. the interval of their paired
   * difference); `undefined`: the marginal intervals decide. It is asked only when `a`'s point
   * estimate is ahead of `b`'s on that objective (a lead beyond noise is a lead on the point
   * estimates), and both ways: a lead beyond noise of the other side blocks a dominance, one
   * within noise does not (since 0.16.0; before, any lead of the other side on the point
   * estimates blocked it).
   */
  readonly separated?: ((a: string, b: string, objective: number) => boolean | undefined) | undefined
}

/**
 * The dominance relation of a whole set: `edges[j][i]` when point `j` dominates point `i`
 * (uncertainty-aware: only when `comparable(j, i)`), with, in the uncertainty-aware relation,
 * every edge inside a cycle removed (see {@link dropDominanceCycles}).
 */
const dominanceEdges = (
  fn: string,
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective>,
  uncertain: boolean,
  options: UncertainFrontOptions
): ReadonlyArray<ReadonlyArray<boolean>> => {
  checkObjectives(fn, objectives)
  const goods = points.map((p) => goodsOf(fn, p, objectives))
  const { comparable, separated } = uncertain ? options : {}
  const edges = points.map((pj, j) =>
    points.map((pi, i) => {
      if (i === j) return false
      if (comparable !== undefined && !comparable(pj.id, pi.id)) return false
      const sep = separated === undefined ? undefined : (k: number, reverse: boolean) => reverse ? separated(pi.id, pj.id, k) : separated(pj.id, pi.id, k)
      return dominatesGood(goods[j]!, goods[i]!, uncertain, sep)
    })
  )
  return uncertain ? acyclic(edges) : edges
}

/**
 * The edges of a directed graph (`edges[j][i]`: an edge j → i) without those inside a
 * strongly connected component (a cycle): Tarjan's algorithm (R. Tarjan, "Depth-first search
 * and linear graph algorithms", SIAM J. Comput. 1972), iterative. O(n²).
 */
const acyclic = (edges: ReadonlyArray<ReadonlyArray<boolean>>): ReadonlyArray<ReadonlyArray<boolean>> => {
  const component = components(edges)
  return edges.map((row, j) => row.map((e, i) => e && component[i] !== component[j]))
}

/** Each node's strongly connected component (a number; nodes in a cycle share one). */
const components = (edges: ReadonlyArray<ReadonlyArray<boolean>>): Int32Array => {
  const n = edges.length
  const index = new Int32Array(n).fill(-1)
  const low = new Int32Array(n)
  const onStack = new Uint8Array(n)
  const component = new Int32Array(n).fill(-1)
  const stack: Array<number> = []
  let next = 0
  let components = 0
  for (let root = 0; root < n; root++) {
    if (index[root] !== -1) continue
    // frames: [node, next neighbour to look at]
    const frames: Array<[number, number]> = [[root, 0]]
    index[root] = low[root] = next++
    stack.push(root)
    onStack[root] = 1
    while (frames.length > 0) {
      const frame = frames[frames.length - 1]!
      const [v, from] = frame
      let w = from
      while (w < n && !edges[v]![w]) w++
      if (w < n) {
        frame[1] = w + 1
        if (index[w] === -1) {
          index[w] = low[w] = next++
          stack.push(w)
          onStack[w] = 1
          frames.push([w, 0])
        } else if (onStack[w] === 1) low[v] = Math.min(low[v]!, index[w]!)
        continue
      }
      frames.pop()
      if (frames.length > 0) {
        const parent = frames[frames.length - 1]![0]
        low[parent] = Math.min(low[parent]!, low[v]!)
      }
      if (low[v] === index[v]) {
        let x: number
        do {
          x = stack.pop()!
          onStack[x] = 0
          component[x] = components
        } while (x !== v)
        components++
      }
    }
  }
  return component
}

/**
 * The "dominated by" relation as an adjacency matrix over the map's keys (in key order):
 * `edges[j][i]` when `ids[j]` dominates `ids[i]`; self-dominance and ids not listed as keys are
 * left out.
 */
const dominanceGraph = (
  dominators: ReadonlyMap<string, ReadonlyArray<string>>
): { readonly ids: ReadonlyArray<string>; readonly edges: Array<Array<boolean>> } => {
  const ids = [...dominators.keys()]
  const at = new Map(ids.map((id, i) => [id, i]))
  const edges = ids.map(() => ids.map(() => false))
  ids.forEach((id, i) => {
    for (const by of dominators.get(id) ?? []) {
      const j = at.get(by)
      if (j !== undefined && j !== i) edges[j]![i] = true
    }
  })
  return { ids, edges }
}

/**
 * A dominance relation without its cycles: each point's dominators (by id), minus those in a
 * cycle with it (a dominates b, b dominates … dominates a). Pairwise uncertainty-aware
 * dominance can cycle, because "within noise" is not transitive: with three objectives, `a` can
 * beat `b` beyond noise on the first and tie the others, `b` beat `c` on the third, `c` beat `a`
 * on the second. Such variants are not ranked against one another (the data do not order them):
 * none removes another from the front, and a dominance by a variant outside the cycle stands.
 * So a non-empty set always has a non-empty front. Ids not listed as keys are ignored.
 *
 * @param dominators each point's dominators, e.g. assembled pair by pair
 * @returns the same map without the dominators in a cycle with their point
 * @since 0.16.0
 * @category pareto
 */
export const dropDominanceCycles = (dominators: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyMap<string, ReadonlyArray<string>> => {
  const { ids, edges } = dominanceGraph(dominators)
  const kept = acyclic(edges)
  return new Map(ids.map((id, i) => [id, ids.filter((_, j) => kept[j]![i])]))
}

/**
 * The dominance cycles {@link dropDominanceCycles} sets aside: each group of points that beat
 * one another in a circle (a strongly connected component of two or more points of the
 * "dominated by" relation), its ids in the map's key order; the groups ordered by their first
 * id. Empty when the relation has no cycle. What a report says of a variant on the front only
 * because its cycle was set aside. Ids not listed as keys are ignored.
 *
 * @param dominators each point's dominators, before {@link dropDominanceCycles}
 * @returns the cycles' ids
 * @since 0.16.0
 * @category pareto
 */
export const dominanceCycles = (dominators: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyArray<ReadonlyArray<string>> => {
  const { ids, edges } = dominanceGraph(dominators)
  const component = components(edges)
  const groups = new Map<number, Array<string>>()
  ids.forEach((id, i) => groups.set(component[i]!, [...(groups.get(component[i]!) ?? []), id]))
  return [...groups.values()].filter((g) => g.length > 1)
}

/**
 * The raw "dominated by" relation of {@link paretoDominators} with `uncertain = true`, cycles
 * kept: for each point, the points that dominate it beyond the intervals.
 */
const uncertainDominatorsRaw = (
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective>,
  options: UncertainFrontOptions
): ReadonlyMap<string, ReadonlyArray<string>> => {
  checkObjectives("paretoDominanceCycles", objectives)
  const goods = points.map((p) => goodsOf("paretoDominanceCycles", p, objectives))
  const { comparable, separated } = options
  return new Map(points.map((pi, i) => [
    pi.id,
    points.filter((pj, j) => {
      if (i === j) return false
      if (comparable !== undefined && !comparable(pj.id, pi.id)) return false
      const sep = separated === undefined ? undefined : (k: number, reverse: boolean) => reverse ? separated(pi.id, pj.id, k) : separated(pj.id, pi.id, k)
      return dominatesGood(goods[j]!, goods[i]!, true, sep)
    }).map((p) => p.id)
  ]))
}

/**
 * The dominance cycles {@link paretoFrontUncertain} sets aside (same `options`): see
 * {@link dominanceCycles}. Empty when the uncertainty-aware relation has no cycle. O(n² · m).
 *
 * @throws RangeError (a caller bug): as {@link dominates}.
 * @since 0.16.0
 * @category pareto
 */
export const paretoDominanceCycles = (
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective>,
  options: UncertainFrontOptions = {}
): ReadonlyArray<ReadonlyArray<string>> => dominanceCycles(uncertainDominatorsRaw(points, objectives, options))

const front = (
  fn: string,
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective>,
  uncertain: boolean,
  options: UncertainFrontOptions = {}
): ReadonlyArray<string> => {
  const edges = dominanceEdges(fn, points, objectives, uncertain, options)
  return points.filter((_, i) => !edges.some((row) => row[i])).map((p) => p.id)
}

/**
 * The strict Pareto front: the ids of the points no other point dominates on point estimates
 * ({@link dominates} with `uncertain = false`), in input order. Equal points are both on the
 * front; an empty input gives an empty front, a non-empty one a non-empty front. O(n² · m).
 *
 * @throws RangeError (a caller bug): as {@link dominates}.
 * @since 0.6.0
 * @category pareto
 */
export const paretoFront = (points: ReadonlyArray<ParetoPoint>, objectives: ReadonlyArray<ParetoObjective>): ReadonlyArray<string> =>
  front("paretoFront", points, objectives, false)

/**
 * The uncertainty-aware Pareto front: the ids of the points no other point dominates beyond the
 * intervals ({@link dominates} with `uncertain = true`: better beyond noise on one objective,
 * not worse beyond noise on any), in input order, after setting aside dominance cycles (see
 * {@link dropDominanceCycles}): non-empty for a non-empty set. It is not a superset of the
 * strict front ({@link paretoFront}): it keeps the points beaten only within noise (the data
 * cannot yet rule them out), and it drops a point whose only lead is within noise while it is
 * beaten beyond noise elsewhere (on point estimates it is on the strict front). With
 * `options.comparable`, a point is dominated only by a point it can be compared with (a
 * comparison below the minimum sample removes nobody). With `options.separated`, a pair's
 * "better beyond noise" on an objective may come from a paired comparison instead of the two
 * marginal intervals. O(n² · m).
 *
 * @throws RangeError (a caller bug): as {@link dominates}.
 * @since 0.6.0
 * @category pareto
 */
export const paretoFrontUncertain = (
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective>,
  options: UncertainFrontOptions = {}
): ReadonlyArray<string> => front("paretoFrontUncertain", points, objectives, true, options)

/**
 * Who dominates whom: for each point (by id, in input order) the ids of the points that
 * dominate it, in input order, by the rule of {@link paretoFront} (`uncertain = false`) or of
 * {@link paretoFrontUncertain} (`uncertain = true`, with the same `options`, cycles set aside).
 * A point with an empty list is on that front. For a report's "dominated by v03". O(n² · m).
 *
 * @throws RangeError (a caller bug): as {@link dominates}.
 * @since 0.10.0
 * @category pareto
 */
export const paretoDominators = (
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective>,
  uncertain: boolean,
  options: UncertainFrontOptions = {}
): ReadonlyMap<string, ReadonlyArray<string>> => {
  const edges = dominanceEdges("paretoDominators", points, objectives, uncertain, options)
  return new Map(points.map((p, i) => [p.id, points.filter((_, j) => edges[j]![i]).map((q) => q.id)]))
}

/**
 * Who leads on each objective between two points, as the uncertainty-aware rule judges it
 * (`uncertain = true`: beyond noise, with `options.separated` as in {@link paretoFrontUncertain})
 * or on the point estimates (`uncertain = false`): per objective, in order, `"a"` (a is better),
 * `"b"` (b is better) or `"tie"` (within noise, or equal). What a report shows as the deciding
 * comparison of a dominance.
 *
 * @throws RangeError (a caller bug): as {@link dominates}.
 * @since 0.16.0
 * @category pareto
 */
export const objectiveLeads = (
  a: ParetoPoint,
  b: ParetoPoint,
  objectives: ReadonlyArray<ParetoObjective>,
  uncertain: boolean,
  options: Pick<UncertainFrontOptions, "separated"> = {}
): ReadonlyArray<"a" | "b" | "tie"> => {
  checkObjectives("objectiveLeads", objectives)
  const ga = goodsOf("objectiveLeads", a, objectives)
  const gb = goodsOf("objectiveLeads", b, objectives)
  const sep = uncertain ? options.separated : undefined
  return ga.map((x, k) => {
    const lead = leadOf(x, gb[k]!, uncertain, sep && (() => sep(a.id, b.id, k)), sep && (() => sep(b.id, a.id, k)))
    return lead > 0 ? "a" : lead < 0 ? "b" : "tie"
  })
}

/**
 * A weighted ranking (a secondary view beside the Pareto fronts): per objective, each point's
 * point estimate is turned into goodness (`v` for maximize, `−v` for minimize, `−|v − target|`
 * for target) and min-max normalized over the points to [0, 1] (1 = the best point on that
 * objective, 0 = the worst; when every point has the same value, all get 1); the score is
 * `Σ wᵢ · normᵢ / Σ wᵢ`, in [0, 1]. Returned best first; equal scores keep input order.
 *
 * The scores depend on which points are ranked (normalization is relative) and on the weights,
 * which are a judgement: the report shows this view after the fronts, never instead of them.
 *
 * @throws RangeError (a caller bug) when a weight is negative or not finite, all weights are
 *   zero (or there is no objective), or as {@link dominates}.
 * @since 0.6.0
 * @category pareto
 */
export const weightedRanking = (
  points: ReadonlyArray<ParetoPoint>,
  objectives: ReadonlyArray<ParetoObjective & { readonly weight: number }>
): ReadonlyArray<{ readonly id: string; readonly score: number }> => {
  const fn = "weightedRanking"
  checkObjectives(fn, objectives)
  let total = 0
  objectives.forEach((o, i) => {
    if (!Number.isFinite(o.weight) || o.weight < 0) refuse(fn, `objectives[${i}].weight must be a finite number ≥ 0, got ${o.weight}`)
    total += o.weight
  })
  if (!(total > 0)) refuse(fn, "the weights add up to 0; give at least one objective a positive weight")
  const goods = points.map((p) => goodsOf(fn, p, objectives))
  const scores = new Float64Array(points.length)
  objectives.forEach((o, i) => {
    let lo = Infinity
    let hi = -Infinity
    for (const g of goods) {
      lo = Math.min(lo, g[i]!.point)
      hi = Math.max(hi, g[i]!.point)
    }
    goods.forEach((g, k) => {
      const norm = hi === lo ? 1 : (g[i]!.point - lo) / (hi - lo)
      scores[k] = scores[k]! + o.weight * norm
    })
  })
  return points
    .map((p, k) => ({ id: p.id, score: scores[k]! / total, k }))
    .sort((x, y) => y.score - x.score || x.k - y.k)
    .map(({ id, score }) => ({ id, score }))
}

// ---------------------------------------------------------------------------------------------
// Statistics of a trial recomputed over resampled cases; small samples; multiplicity
// ---------------------------------------------------------------------------------------------

/**
 * How a trial's value is computed from its pipelines' values (one value per case): `mean`,
 * `sum`, `p50` or `p95` (type-7 quantiles, Hyndman & Fan 1996).
 *
 * @since 0.9.0
 * @category models
 */
export type TrialReducer = "mean" | "sum" | "p50" | "p95"

/**
 * The result of {@link bootstrapReduced}: per variant its interval (`null` when it has no
 * value at all) and its `replicates` (the statistic of each resample, in draw order; the
 * draws are shared, so `replicates` of two variants are paired resample by resample; empty
 * when the variant has no value), and `paired(base, cand)`: the difference cand − base with
 * its percentile interval from the paired replicates (`null` when either has no value).
 *
 * @since 0.9.0
 * @category models
 */
export interface ReducedBootstrap {
  readonly intervals: ReadonlyArray<Interval | null>
  readonly replicates: ReadonlyArray<Float64Array>
  readonly paired: (base: number, cand: number) => Interval | null
}

/**
 * The type-7 quantile `p` of a weighted multiset given in sorted order: `order` the items in
 * ascending order of `values`, `counts[at + item]` their weights (≥ 0), `w` the total weight.
 * The quantile lies between the items at positions `⌊h⌋` and `⌊h⌋ + 1` of the expanded sorted
 * sequence, `h = (w − 1)·p`; this walks from the smallest item.
 */
const weightedQuantile = (order: Int32Array, values: Float64Array, counts: Uint32Array, at: number, w: number, p: number): number => {
  const h = (w - 1) * p
  const lo = Math.floor(h)
  const frac = h - lo
  let seen = 0
  let atLo = NaN
  for (let k = 0; k < order.length; k++) {
    const c = counts[at + order[k]!]!
    if (c === 0) continue
    seen += c
    if (Number.isNaN(atLo) && seen > lo) {
      atLo = values[order[k]!]!
      if (frac === 0 || seen > lo + 1) return atLo
      continue
    }
    if (!Number.isNaN(atLo)) return atLo + frac * (values[order[k]!]! - atLo)
  }
  return atLo
}

/**
 * {@link weightedQuantile} walking from the largest item (for a high `p`, e.g. a p95, it stops
 * after the top few per cent): the same two items, the same arithmetic, so the same number.
 */
const weightedQuantileFromTop = (order: Int32Array, values: Float64Array, counts: Uint32Array, at: number, w: number, p: number): number => {
  const h = (w - 1) * p
  const lo = Math.floor(h)
  const frac = h - lo
  // positions at or above `start` are covered by the items walked so far
  let start = w
  let atHi = NaN
  for (let k = order.length - 1; k >= 0; k--) {
    const c = counts[at + order[k]!]!
    if (c === 0) continue
    start -= c
    if (start <= lo) {
      // this item covers position lo; it covers lo + 1 too unless it ends at lo + 1
      const atLo = values[order[k]!]!
      if (frac === 0 || start + c > lo + 1) return atLo
      return atLo + frac * (atHi - atLo)
    }
    // the item covering position lo + 1 (the last one seen before the item covering lo)
    atHi = values[order[k]!]!
  }
  return NaN
}

/**
 * A trial-level statistic of several variants measured on the same cases, with its
 * uncertainty from resampling the CASES (not the repeats' few values): per resample, cases
 * are drawn with replacement from the `n` cases (one draw shared by every variant and every
 * repeat, as the cluster bootstrap of Davison & Hinkley 1997, §3.8, does for two-level data);
 * for each variant and each repeat the reducer is recomputed over the drawn cases' values in
 * that repeat (a case drawn twice counts twice; a case the repeat lacks is left out); the
 * variant's statistic is the mean over its repeats of those values. The estimate is the same
 * computation on the cases as they are (the mean over repeats of each trial's value); the
 * interval's ends are the `(1 − level)/2` and `(1 + level)/2` type-7 quantiles of the
 * replicates (percentile interval, Efron & Tibshirani 1993, ch. 13). The paired difference
 * of two variants is read from the same replicates (their draws are the same), so it needs no
 * second resampling.
 *
 * The run-to-run variation is added on top (issue 16): the repeats run the same cases, so the
 * case resampling cannot see that one repeat ran under load and the next did not; for a
 * statistic computed once per trial the repeat is the unit of replication. Each interval is
 * widened by the spread of the trials' own values (each repeat's statistic over all its cases;
 * for `paired`, repeat r of the candidate minus repeat r of the baseline): the two standard
 * uncertainties add in quadrature and the coverage factor is Student's t with
 * Welch–Satterthwaite degrees of freedom (GUM, JCGM 100:2008, §5.1.2 and Annex G; "Student"
 * 1908). With 3 repeats that is close to a paired t interval with df 2 over the per-repeat
 * differences. Below two repeats the run part cannot be estimated and the method says it is
 * not counted (the report then makes no claim: fewer repeats than its minimum).
 * `replicates` stay the case bootstrap's alone.
 *
 * Why: a p95 or a sum recomputed per trial gives one number per repeat; a percentile bootstrap
 * over 3 such numbers covers far less than its nominal level (about 68 % for a nominal 95 %
 * with 3 normal values: the 27 possible resamples span at most the range of the 3 values).
 * Resampling the cases measures the sampling error of the cases; the t part measures the
 * repeats'; a comparison of trials must account for both.
 *
 * `values[v][r][c]`: variant `v`, repeat `r`, case `c` (`null` or absent: no value). Every
 * variant must list the same `n` cases in the same order (sort them by a stable key first: the
 * result depends on the order). Cost: per resample `n` index draws plus, per (variant,
 * repeat), one pass over its `n` values for `mean` and `sum`, half of them for `p50` and the
 * top twentieth or so for `p95` (quantiles walk a pre-sorted order from its nearer end, no
 * sorting per resample); resamples are taken in blocks of up to 64, each variant's columns
 * walked for a whole block at a time (the result is the same as resample by resample).
 * The method text says `case draws shared by K variants`, K the variants with at least one
 * value (a variant with none has no interval and takes no part in the draws).
 *
 * @throws RangeError (a caller bug) when a value is not finite, the variants list different
 *   numbers of cases, or an option is out of range.
 * @since 0.9.0
 * @category intervals
 */
export const bootstrapReduced = (
  values: ReadonlyArray<ReadonlyArray<ReadonlyArray<number | null>>>,
  reducer: TrialReducer,
  o: BootstrapOptions
): ReducedBootstrap => {
  const fn = "bootstrapReduced"
  const { level, resamples, seed } = settingsOf(fn, o)
  const V = values.length
  const n = V === 0 ? 0 : Math.max(0, ...values.flatMap((g) => g.map((r) => r.length)))
  // per (variant, repeat): its values (NaN = none), its sorted order of present cases, the
  // cases it lacks (the total weight of its cases in a resample is n minus theirs), its repeat
  const cols: Array<Array<{ readonly x: Float64Array; readonly order: Int32Array; readonly missing: Int32Array; readonly r: number }>> = values.map((g, v) =>
    g.flatMap((row, r) => {
      const x = new Float64Array(n).fill(NaN)
      const present: Array<number> = []
      const missing: Array<number> = []
      for (let c = 0; c < n; c++) {
        const y = c < row.length ? row[c] : undefined
        if (y === null || y === undefined) {
          missing.push(c)
          continue
        }
        checkFinite(fn, y, `values[${v}][${r}][${c}]`)
        x[c] = y
        present.push(c)
      }
      if (present.length === 0) return []
      present.sort((a, b) => x[a]! - x[b]! || a - b)
      return [{ x, order: Int32Array.from(present), missing: Int32Array.from(missing), r }]
    })
  )
  const quantileP = reducer === "p50" ? 0.5 : 0.95
  // a trial's own value: the statistic over all its cases
  const statOf1 = ({ order, x }: { readonly order: Int32Array; readonly x: Float64Array }): number => {
    let s = 0
    for (let i = 0; i < order.length; i++) s += x[order[i]!]!
    return reducer === "sum" ? s : reducer === "mean" ? s / order.length : quantileSorted(Float64Array.from(order, (c) => x[c]!), quantileP)
  }
  // `counts[at + c]`: how often case c is drawn in the resample whose counts start at `at`
  // (every resample draws n cases, so the counts of all cases add up to n)
  const statOf = (v: number, counts: Uint32Array, at: number): number => {
    let acc = 0
    let k = 0
    for (const { missing, order, x } of cols[v]!) {
      let w = n
      let s = 0
      if (reducer === "mean" || reducer === "sum") {
        w = 0
        for (let i = 0; i < order.length; i++) {
          const c = counts[at + order[i]!]!
          w += c
          s += c * x[order[i]!]!
        }
      } else {
        for (let i = 0; i < missing.length; i++) w -= counts[at + missing[i]!]!
      }
      if (w === 0) continue
      acc += reducer === "sum"
        ? s
        : reducer === "mean"
        ? s / w
        : quantileP > 0.5
        ? weightedQuantileFromTop(order, x, counts, at, w, quantileP)
        : weightedQuantile(order, x, counts, at, w, quantileP)
      k++
    }
    return k === 0 ? NaN : acc / k
  }
  const ones = new Uint32Array(n).fill(1)
  const estimates = cols.map((_, v) => statOf(v, ones, 0))
  // each trial's own value (the statistic over all its cases), by repeat index: the spread
  // between repeats is the run-to-run variation the case resampling cannot see
  const perRepeat = cols.map((c) => {
    const m = new Map<number, number>()
    for (const col of c) m.set(col.r, statOf1(col))
    return m
  })
  const replicates = cols.map((c) => new Float64Array(c.length === 0 ? 0 : resamples))
  const ix = new Indices(rngOf(seed))
  const invN = 1 / Math.max(n, 1)
  // resamples in blocks: the block's case counts first (the one stream of draws, in the same
  // order), then each variant over the whole block, so that one variant's columns stay in the
  // cache for the block (with 200 variants every variant's columns are far larger than a
  // core's cache); the numbers are those of resample by resample
  const block = blockOf(n)
  const counts = new Uint32Array(block * Math.max(n, 1))
  for (let b0 = 0; b0 < resamples && n > 0; b0 += block) {
    const bn = Math.min(block, resamples - b0)
    counts.fill(0)
    for (let bb = 0; bb < bn; bb++) {
      const at = bb * n
      for (let i = 0; i < n; i++) {
        const j = at + ix.next(n, invN)
        counts[j] = counts[j]! + 1
      }
    }
    for (let v = 0; v < V; v++) {
      if (cols[v]!.length === 0) continue
      const reps = replicates[v]!
      for (let bb = 0; bb < bn; bb++) {
        const s = statOf(v, counts, bb * n)
        // a resample may draw none of a variant's cases in every repeat: keep its estimate
        reps[b0 + bb] = Number.isNaN(s) ? estimates[v]! : s
      }
    }
  }
  // the variants actually resampled together: a variant with no values (e.g. no compared
  // trial: every repeat broke a hard constraint) has no interval and shares no draw
  const resampled = cols.filter((c) => c.length > 0).length
  const method = `percentile bootstrap over cases (the trial's ${reducer} recomputed per repeat over the drawn cases, then averaged over repeats), ${resamples} resamples, seed ${seed}${resampled > 1 ? ` (case draws shared by ${resampled} variants)` : ""}`
  const intervalOf = (estimate: number, reps: Float64Array, repeatValues: ReadonlyArray<number>, what: string): Interval => {
    const { lower, upper } = percentile(Float64Array.from(reps), level)
    const cases: Interval = { estimate, lower: Math.min(lower, estimate), upper: Math.max(upper, estimate), level, method, resamples, seed }
    return withRepeatSpread(cases, repeatValues, what)
  }
  return {
    intervals: cols.map((c, v) => c.length === 0 ? null : intervalOf(estimates[v]!, replicates[v]!, Array.from(perRepeat[v]!.values()), "per-repeat values")),
    replicates,
    paired: (base, cand) => {
      if (cols[base]!.length === 0 || cols[cand]!.length === 0) return null
      // a paired difference is over exactly the paired values: repeat r's case c counts only
      // when both sides have it (a sum or a p95 over a case only one side has is no paired
      // difference: the baseline's extra case would show as the candidate's loss). When the
      // two sides lack different values, both are masked to the shared ones and bootstrapped
      // again with the same seed and `n` (the same case draws)
      const at = (v: number, r: number, c: number): boolean => {
        const y = values[v]![r]?.[c]
        return y !== null && y !== undefined
      }
      const R = Math.max(values[base]!.length, values[cand]!.length)
      let differ = false
      for (let r = 0; r < R && !differ; r++) for (let c = 0; c < n && !differ; c++) differ = at(base, r, c) !== at(cand, r, c)
      if (differ) {
        const mask = (v: number) => Array.from({ length: R }, (_, r) => Array.from({ length: n }, (_, c) => at(base, r, c) && at(cand, r, c) ? values[v]![r]![c]! : null))
        const restricted = bootstrapReduced([mask(base), mask(cand)], reducer, o).paired(0, 1)
        return restricted === null ? null : { ...restricted, method: `${restricted.method} (over the ${pairedCount(mask(base))} value(s) both sides have)` }
      }
      const rb = replicates[base]!
      const rc = replicates[cand]!
      const d = new Float64Array(resamples)
      // differences of float noise (sums of 0.1s in another order) are 0 (fix16ac F6)
      for (let b = 0; b < resamples; b++) d[b] = difference(rc[b]!, rb[b]!)
      // the run-to-run part: repeat r of the candidate minus repeat r of the baseline
      const diffs: Array<number> = []
      for (const [r, y] of perRepeat[cand]!) {
        const x = perRepeat[base]!.get(r)
        if (x !== undefined) diffs.push(difference(y, x))
      }
      const i = intervalOf(difference(estimates[cand]!, estimates[base]!), d, diffs, "per-repeat differences")
      return { ...i, method: `paired ${i.method}` }
    }
  }
}

const pairedCount = (rows: ReadonlyArray<ReadonlyArray<number | null>>): number =>
  rows.reduce((a, row) => a + row.filter((y) => y !== null).length, 0)

/**
 * Adds the run-to-run variation of a trial-level statistic to an interval that only has the
 * case sampling (the case bootstrap of {@link bootstrapReduced}). Two independent sources of
 * error are combined as the GUM does (JCGM 100:2008, "Guide to the expression of uncertainty
 * in measurement", §5.1.2 and Annex G): standard uncertainties add in quadrature,
 * `u = √(u_case² + u_run²)`, with `u_case` the case-bootstrap half-width divided by
 * `z((1 + level)/2)` (per side, so an asymmetric interval keeps its shape) and
 * `u_run = s/√R` the standard error of the mean of the `R` per-repeat values (Type A, R − 1
 * degrees of freedom); the coverage factor is Student's `t((1 + level)/2, ν)` with the
 * Welch–Satterthwaite effective degrees of freedom `ν = (R − 1)·u⁴/u_run⁴` (the case part
 * counted as known, ν_case = ∞), truncated down to an integer (GUM G.4.1). With few repeats
 * the run part dominates and the interval is about the paired t interval over the repeats
 * (df R − 1), which is what a statistic measured once per trial supports: the repeat, not the
 * case, is its unit of replication. Below two values the run part cannot be estimated: the
 * interval is returned as it is and its method says so.
 */
const withRepeatSpread = (cases: Interval, ys: ReadonlyArray<number>, what: string): Interval => {
  const R = ys.length
  if (R < 2) {
    return { ...cases, method: `${cases.method}; the run-to-run variation is not counted (${R} repeat${R === 1 ? "" : "s"}: no spread to estimate)` }
  }
  const m = mean(ys)
  let ss = 0
  for (const y of ys) ss += (y - m) ** 2
  const uRun = Math.sqrt(ss / (R - 1) / R)
  const z = normalQuantile((1 + cases.level) / 2)
  const side = (half: number): number => {
    const uCase = half / z
    const u2 = uCase * uCase + uRun * uRun
    if (u2 === 0) return 0
    const nu = uRun === 0 ? Infinity : Math.floor((R - 1) * (u2 * u2) / (uRun ** 4))
    const k = !Number.isFinite(nu) || nu > 200 ? z : studentQuantile((1 + cases.level) / 2, Math.max(1, nu))
    return k * Math.sqrt(u2)
  }
  const lower = cases.estimate - side(cases.estimate - cases.lower)
  const upper = cases.estimate + side(cases.upper - cases.estimate)
  return {
    ...cases,
    lower,
    upper,
    method: `${cases.method}; combined with the spread of the ${R} ${what} (run-to-run variation, Student's t, ${R - 1} df) in quadrature, Welch–Satterthwaite degrees of freedom (GUM, JCGM 100:2008)`
  }
}

/**
 * The standard normal quantile Φ⁻¹(p) for p in (0, 1): P. J. Acklam's rational approximation
 * ("An algorithm for computing the inverse normal cumulative distribution function", 2003;
 * relative error below 1.15e-9, ample for widening an interval).
 *
 * @throws RangeError (a caller bug) when `p` is not in (0, 1).
 * @since 0.9.0
 * @category distributions
 */
export const normalQuantile = (p: number): number => {
  if (!(p > 0 && p < 1)) refuse("normalQuantile", `p must be in (0, 1), got ${p}`)
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239]
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1]
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783]
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416]
  const lowP = 0.02425
  let x: number
  if (p < lowP) {
    const q = Math.sqrt(-2 * Math.log(p))
    x = (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1)
  } else if (p <= 1 - lowP) {
    const q = p - 0.5
    const r = q * q
    x = (((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q /
      (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1)
  } else {
    const q = Math.sqrt(-2 * Math.log(1 - p))
    x = -(((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1)
  }
  return x
}

/**
 * The CDF of Student's t with `df` (a positive integer) degrees of freedom, in closed form:
 * Abramowitz & Stegun 1964, 26.7.3 (odd df) and 26.7.4 (even df), with θ = atan(t/√df).
 */
const studentCdf = (t: number, df: number): number => {
  const theta = Math.atan(t / Math.sqrt(df))
  const s = Math.sin(theta)
  const c2 = Math.cos(theta) ** 2
  let a: number // P(|T| ≤ |t|), signed like t
  if (df % 2 === 1) {
    let term = Math.cos(theta)
    let sum = df > 1 ? term : 0
    for (let k = 3; k <= df - 2; k += 2) {
      term *= c2 * (k - 1) / k
      sum += term
    }
    a = (2 / Math.PI) * (theta + s * sum)
  } else {
    let term = 1
    let sum = 1
    for (let k = 2; k <= df - 2; k += 2) {
      term *= c2 * (k - 1) / k
      sum += term
    }
    a = s * sum
  }
  return 0.5 + a / 2
}

/**
 * The quantile of Student's t distribution with `df` degrees of freedom (a positive integer)
 * at probability `p` in (0, 1): the CDF in closed form (Abramowitz & Stegun 1964, 26.7.3–4)
 * inverted by bisection to 1e-12. For df above 200 the normal quantile (the difference is
 * below 0.5 %).
 *
 * @throws RangeError (a caller bug) when `p` is not in (0, 1) or `df` not a positive integer.
 * @since 0.9.0
 * @category distributions
 */
export const studentQuantile = (p: number, df: number): number => {
  if (!(p > 0 && p < 1)) refuse("studentQuantile", `p must be in (0, 1), got ${p}`)
  if (!Number.isSafeInteger(df) || df < 1) refuse("studentQuantile", `df must be a positive integer, got ${df}`)
  if (df > 200) return normalQuantile(p)
  let lo = -1e7
  let hi = 1e7
  for (let i = 0; i < 200 && hi - lo > 1e-12 * Math.max(1, Math.abs(lo)); i++) {
    const mid = (lo + hi) / 2
    if (studentCdf(mid, df) < p) lo = mid
    else hi = mid
  }
  return (lo + hi) / 2
}

/**
 * A small-sample interval for the mean of a few values (e.g. one value per repeat of a
 * trial-level metric such as `calls` or `costUsd`): Student's t interval
 * `x̄ ± t(df = n − 1, (1 + level)/2) · s/√n` (W. S. Gosset, "Student", Biometrika 1908), which
 * keeps its nominal coverage for normal data at any n ≥ 2, where a bootstrap over 3 values
 * does not. `null` below two values (no spread to estimate). The method names the df.
 *
 * @param xs the values (finite)
 * @param level the confidence level in (0, 1)
 * @throws RangeError (a caller bug) when a value is not finite or `level` not in (0, 1).
 * @since 0.9.0
 * @category intervals
 */
export const studentInterval = (xs: ReadonlyArray<number>, level: number): Interval | null => {
  checkList("studentInterval", xs, "xs")
  if (!(level > 0 && level < 1)) refuse("studentInterval", `level must be in (0, 1), got ${level}`)
  const n = xs.length
  if (n < 2) return null
  const m = mean(xs)
  let ss = 0
  for (const x of xs) ss += (x - m) ** 2
  const half = studentQuantile((1 + level) / 2, n - 1) * Math.sqrt(ss / (n - 1) / n)
  return { estimate: m, lower: m - half, upper: m + half, level, method: `Student's t interval over ${n} repeat values (df ${n - 1})`, resamples: null, seed: null }
}

/**
 * An interval widened for `m` simultaneous comparisons (Bonferroni: each at level
 * `1 − (1 − level)/m`), assuming the interval is a normal-theory one or a bootstrap interval
 * of a roughly normal statistic: each side's distance from the estimate is scaled by
 * `z((1 + level')/2) / z((1 + level)/2)` (the same scaling on each side keeps an asymmetric
 * interval's shape). `m ≤ 1` returns the interval unchanged. Source: the Bonferroni
 * inequality (O. J. Dunn, "Multiple comparisons among means", JASA 1961).
 *
 * @since 0.9.0
 * @category intervals
 */
export const bonferroniWiden = (i: Interval, m: number): Interval => {
  if (!(m > 1)) return i
  const alpha = 1 - i.level
  const r = normalQuantile(1 - alpha / (2 * m)) / normalQuantile(1 - alpha / 2)
  return {
    ...i,
    lower: i.estimate - (i.estimate - i.lower) * r,
    upper: i.estimate + (i.upper - i.estimate) * r,
    level: 1 - alpha / m,
    method: `${i.method}; widened for ${m} comparisons (Bonferroni)`
  }
}

/**
 * Holm's step-down adjustment of p-values (S. Holm, "A simple sequentially rejective multiple
 * test procedure", Scand. J. Statist. 1979): with the m p-values sorted ascending,
 * `p̃₍ᵢ₎ = max over j ≤ i of min(1, (m − j + 1) · p₍ⱼ₎)`; returned in the input order. It
 * controls the family-wise error rate at the level used, under any dependence.
 *
 * @throws RangeError (a caller bug) when a p-value is not in [0, 1].
 * @since 0.9.0
 * @category tests
 */
export const holm = (ps: ReadonlyArray<number>): ReadonlyArray<number> => {
  ps.forEach((p, i) => {
    if (!(p >= 0 && p <= 1)) refuse("holm", `ps[${i}] must be in [0, 1], got ${p}`)
  })
  const m = ps.length
  const order = ps.map((p, i) => ({ p, i })).sort((a, b) => a.p - b.p || a.i - b.i)
  const out = new Array<number>(m)
  let running = 0
  order.forEach(({ i, p }, k) => {
    running = Math.max(running, Math.min(1, (m - k) * p))
    out[i] = running
  })
  return out
}
