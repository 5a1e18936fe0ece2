/**
 * Money for people.
 *
 * @internal
 */
import { roundUsd } from "../../domain/Pricing.js"

/**
 * US dollars as people read them: `$0`; below a dollar, two significant digits without an
 * exponent and without trailing zeros past the cents (`$0.011`, `$0.00018`, `$0.009`, `$0.05`,
 * `$0.50`), so a small amount never rounds to a different one (`$0.011` is not `$0.01`, cheap
 * calls never show `$0.0000`); from a dollar up, cents (`$3.40`).
 *
 * @param usd an amount in US dollars (>= 0)
 * @internal
 */
export const formatUsd = (usd: number): string => {
  if (usd === 0) return "$0"
  const r = Number(usd.toPrecision(2))
  if (r >= 1) return `$${usd.toFixed(2)}`
  // `0.0090` → `0.009`; `0.50` keeps its cents
  return `$${usd.toFixed(Math.min(20, 1 - Math.floor(Math.log10(r)))).replace(/(\.\d\d\d*?)0+$/, "$1")}`
}

/**
 * US dollars in every study view (`study run`'s trials and usage, `study status`, the report's
 * Run section and budget line, a budget's reasons, the Study page; fix16x: `study run` printed
 * `$0.01` for 0.01035 beside `$0.011` and `$0.0097` while `status` printed `$0.0103`): `$0`,
 * else `digits` significant digits (default 3) with their trailing zeros, so every figure
 * reads at the same precision (`$0.0104`, `$0.0107`, `$0.00972`, `$0.0500`, `$0.135`,
 * `$0.000238`), never an exponent; from a dollar up at least the cents (`$1.23`, `$12.35`).
 *
 * @param usd an amount in US dollars (>= 0)
 * @param digits significant digits (1..15, default 3): more to tell two figures apart
 * @internal
 */
export const formatStudyUsd = (usd: number, digits = 3): string => {
  if (usd === 0 || !Number.isFinite(usd)) return `$${usd}`
  // the decimals `digits` significant digits take, recomputed once when rounding adds a digit
  // (0.09996 -> 0.1000)
  const decimalsOf = (v: number) => Math.min(20, Math.max(2, digits - 1 - Math.floor(Math.log10(Math.abs(v)))))
  const first = decimalsOf(usd)
  const rounded = Number(usd.toFixed(first))
  return `$${usd.toFixed(rounded === 0 ? first : Math.min(first, decimalsOf(rounded)))}`
}

/**
 * How every study view words a cost (fix16x), the options of {@link formatCost}: dollars by
 * {@link formatStudyUsd}, and the trial meter's `unpriced` counted in calls (each lease report
 * with tokens but no price: `StudyControl.usageOfReport`).
 *
 * @internal
 */
export const STUDY_COST = { unit: "call", usd: formatStudyUsd } as const

/**
 * Model calls made, with what the call cache served in their place, in the one wording the
 * summaries use (`study run`'s trials and usage, `study status`; tester18d F3: `calls 0 … $0`
 * beside a Compare that counts the hits at their recorded usage): `0 calls (4 served from
 * cache, $0.00018 not spent)`; `12 calls` when the cache served none. The calls and their cost
 * beside it are what was spent this time.
 *
 * @param calls the calls made (leases acquired)
 * @param hits the answers the call cache served instead
 * @param savedUsd what the served calls cost when they were made (US dollars), `null`: unknown
 * @internal
 */
export const callsServedText = (calls: number, hits: number, savedUsd: number | null): string => {
  const made = `${calls} call${calls === 1 ? "" : "s"}`
  if (hits === 0) return made
  return `${made} (${hits} served from cache${savedUsd === null || savedUsd === 0 ? "" : `, ${formatUsd(savedUsd)} not spent`})`
}

/**
 * What the call cache did, in one line of a run's summary (tester18d F6: a run whose calls all
 * missed said nothing of the cache it filled): `call cache: 0 hits, 20 misses (20 answers
 * stored)`, `call cache: 28 hits, 0 misses ($0.0012 not spent)`, with `refreshed N` and
 * `read-only misses N` when there were some.
 *
 * @param c the figures (`StoreStats.cache`, `CallCache.CacheStats`)
 * @internal
 */
export const cacheLineText = (c: {
  readonly hits: number
  readonly misses: number
  readonly refreshed: number
  readonly bypassed: number
  readonly costSavedUsd: number | null
  readonly stored?: number | undefined
}): string => {
  const n = (k: number, one: string, many: string) => `${k} ${k === 1 ? one : many}`
  const counts = [
    n(c.hits, "hit", "hits"),
    n(c.misses, "miss", "misses"),
    ...(c.refreshed > 0 ? [`refreshed ${c.refreshed}`] : []),
    ...(c.bypassed > 0 ? [n(c.bypassed, "read-only miss (nothing stored)", "read-only misses (nothing stored)")] : [])
  ]
  const notes = [
    ...(c.stored !== undefined && c.stored > 0 ? [n(c.stored, "answer stored", "answers stored")] : []),
    ...(c.hits > 0 && c.costSavedUsd !== null && c.costSavedUsd > 0 ? [`${formatUsd(c.costSavedUsd)} not spent`] : [])
  ]
  return `call cache: ${counts.join(", ")}${notes.length === 0 ? "" : ` (${notes.join(", ")})`}`
}

/**
 * The cost of a total as a figure a reader may rely on: the sum of the known costs when every
 * call in it was priced, or some were (then a lower bound: see `unpriced`); `null` when calls
 * without a price made it up and none had one (a sum of nothing known is not `$0`).
 *
 * The figure is rounded to 1e-9 USD (`Pricing.roundUsd`, the precision of each call's cost), so
 * a sum of many calls shows no floating-point noise wherever it is printed or served.
 *
 * @param costUsd the sum of the known costs (US dollars)
 * @param unpriced how many attempts (or calls) in the total had tokens but no price
 * @internal
 */
export const knownCost = (costUsd: number | null, unpriced: number): number | null =>
  costUsd === null || (unpriced > 0 && costUsd === 0) ? null : roundUsd(costUsd)

/**
 * What a total's `unpriced` figure counts: `attempt` for the store's accounting (`assay
 * report`, the run's summary, `watch`, the dashboard, the exports: the attempts with tokens but
 * no price, one each however many calls it sent), `call` for a study trial's usage meter (each
 * lease report with tokens and no price: a judge's format repair is a second one).
 *
 * @internal
 */
export type UnpricedUnit = "attempt" | "call"

/**
 * A total's cost in words, never a bare dollar figure when part of it had no price: `$0.011`
 * (all priced), `>= $0.011 (3 attempts unpriced)` (some priced: a lower bound), `unpriced (3
 * attempts)` (none priced); the count named by what it counts (`unit`, fix16x: the store's
 * figure counts attempts and was worded as calls, so a judge's repaired attempt read `calls 2 …
 * unpriced (1 call)`).
 *
 * @param costUsd the sum of the known costs (US dollars), or `null` (none known)
 * @param unpriced how many attempts (or calls: `unit`) in the total had tokens but no price
 * @param options `unit` (default `attempt`); `usd`, the dollar formatter (default {@link formatUsd};
 *   the study views pass {@link formatStudyUsd})
 * @internal
 */
export const formatCost = (
  costUsd: number | null,
  unpriced: number,
  options: { readonly unit?: UnpricedUnit; readonly usd?: (usd: number) => string } = {}
): string => {
  const known = knownCost(costUsd, unpriced)
  const unit = options.unit ?? "attempt"
  const usd = options.usd ?? formatUsd
  const count = (n: number) => `${n} ${unit}${n === 1 ? "" : "s"}`
  if (known === null) return `unpriced (${count(unpriced)})`
  return unpriced > 0 ? `>= ${usd(known)} (${count(unpriced)} unpriced)` : usd(known)
}

/**
 * The model calls sent to providers in words (tester18c F4: the figure counted only the calls
 * answered): `calls` sent, of which `refused` answered 429 and `failedCalls` failed at the
 * endpoint (see `AccountingFigures`); `312` when every call was answered, else `312 (297
 * answered, 12 refused with 429, 3 failed at the endpoint)`.
 *
 * @param f the figures (`refused` / `failedCalls` absent: 0)
 * @returns the count of calls sent, with how many were answered when not all were
 * @since 0.12.0
 * @category formatting
 */
export const callsText = (f: { readonly calls: number; readonly refused?: number | undefined; readonly failedCalls?: number | undefined }): string => {
  const refused = f.refused ?? 0
  const failed = f.failedCalls ?? 0
  if (refused + failed === 0) return String(f.calls)
  return `${f.calls} (${Math.max(0, f.calls - refused - failed)} answered${refused > 0 ? `, ${refused} refused with 429` : ""}${
    failed > 0 ? `, ${failed} failed at the endpoint` : ""
  })`
}

/**
 * The cache hits of `AccountingFigures` in words, with a leading comma, or `""` when
 * there were none: `, cache hits 28 (any cached task; 20 model calls saved)`.
 *
 * @since 0.14.0
 * @category formatting
 */
export const cacheHitsText = (a: { readonly cacheHits: number; readonly modelCallHits: number }): string =>
  a.cacheHits > 0
    ? `, cache hits ${a.cacheHits} (any cached task; ${a.modelCallHits} model call${a.modelCallHits === 1 ? "" : "s"} saved)`
    : ""
