/**
 * Internal helpers of `AcquireAlgorithm` (issue 12 §8: not reachable from the package entry):
 * the backoff delay, a candidate's remaining quota (`fingerprintOf` is in `algorithmFingerprint.ts`).
 */
import type { Candidate } from "../AcquireAlgorithm.js"

/**
 * The delay in milliseconds before poll `n + 1` (n from 0) of `AcquireAlgorithm.backoff`, before
 * jitter: `min(cap, base * factor^n)`.
 */
export const backoffDelayMs = (baseMs: number, factor: number, capMs: number, n: number): number =>
  Math.min(capMs, baseMs * Math.pow(factor, n))

/**
 * The remaining quota of a candidate for a metric: `options.quota[metric]` minus the
 * accumulated `usage[metric]`, or `undefined` when no quota is declared.
 */
export const remainingQuota = (c: Candidate, metric: string): number | undefined => {
  const quota = c.resource.options["quota"]
  if (typeof quota !== "object" || quota === null) return undefined
  const q = (quota as Record<string, unknown>)[metric]
  if (typeof q !== "number" || !Number.isFinite(q)) return undefined
  return q - (c.usage[metric] ?? 0)
}
