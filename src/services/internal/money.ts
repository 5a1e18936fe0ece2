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
 * @param unpriced how many calls in the total had tokens but no price
 * @internal
 */
export const knownCost = (costUsd: number | null, unpriced: number): number | null =>
  costUsd === null || (unpriced > 0 && costUsd === 0) ? null : roundUsd(costUsd)

/**
 * A total's cost in words, never a bare dollar figure when a call in it had no price: `$0.011`
 * (all priced), `>= $0.011 (3 calls unpriced)` (some priced: a lower bound), `unpriced (3 calls)`
 * (none priced).
 *
 * @param costUsd the sum of the known costs (US dollars), or `null` (none known)
 * @param unpriced how many calls in the total had tokens but no price
 * @internal
 */
export const formatCost = (costUsd: number | null, unpriced: number): string => {
  const known = knownCost(costUsd, unpriced)
  const calls = (n: number) => `${n} call${n === 1 ? "" : "s"}`
  if (known === null) return `unpriced (${calls(unpriced)})`
  return unpriced > 0 ? `>= ${formatUsd(known)} (${calls(unpriced)} unpriced)` : formatUsd(known)
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
