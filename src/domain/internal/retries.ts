/**
 * What counts as a retry in the stores' statistics and in reports.
 *
 * A retry is the retry policy's decision to run a failed attempt again, recorded on that
 * attempt as `decision.retry === true`. An attempt number above 1 is not enough: attempt numbers
 * are reserved before a task runs, so a task re-run after its run died (or on a resume after the
 * policy gave up) also has a number above 1 without being a retry.
 *
 * @internal
 */

/**
 * Whether an attempt's persisted decision (strict JSON, `null` on success) is a decision to
 * retry.
 *
 * @param decision - the attempt's `decision`.
 * @returns `true` for `{ retry: true, ... }`.
 *
 * @internal
 */
export const isRetryDecision = (decision: unknown): boolean =>
  typeof decision === "object" && decision !== null && (decision as { readonly retry?: unknown }).retry === true

/**
 * Counts the attempts that are retries, fed in attempt-id order: an attempt is a retry when the
 * previous attempt of the same task run (pipeline, seq, visit) seen so far ended with a decision
 * to retry. Used where a retry must be attributed to the attempt that ran it (per resource).
 *
 * @returns `isRetry(attempt)`, to call once per attempt in order.
 *
 * @internal
 */
export const retryTracker = (): (a: {
  readonly pipelineId: string
  readonly seq: number
  readonly visit?: number | undefined
  readonly decision: unknown
}) => boolean => {
  const lastRetried = new Map<string, boolean>()
  return (a) => {
    const key = `${a.pipelineId}\u0000${a.seq}\u0000${a.visit ?? 0}`
    const isRetry = lastRetried.get(key) === true
    if (isRetryDecision(a.decision)) lastRetried.set(key, true)
    else lastRetried.delete(key)
    return isRetry
  }
}
