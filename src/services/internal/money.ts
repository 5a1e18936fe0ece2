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
 * answered): `calls` answered, `refused` answered 429, `failedCalls` failed at the endpoint
 * (see `AccountingFigures`); `312` when every call was answered, else `312 (300 answered, 12
 * refused with 429, 3 failed at the endpoint)`.
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
  return `${f.calls + refused + failed} (${f.calls} answered${refused > 0 ? `, ${refused} refused with 429` : ""}${
    failed > 0 ? `, ${failed} failed at the endpoint` : ""
  })`
}
