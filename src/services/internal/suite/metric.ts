/**
 * How a member-scoped metric is stored: a run-scope metric (no pipeline) whose name carries
 * the member, `experiment:ID:NAME` (the shape of a member's private pool names).
 *
 * @internal
 */

const PREFIX = "experiment:"

/**
 * The stored name of metric `name` scoped to member `experimentId`.
 *
 * @internal
 */
export const memberMetricName = (experimentId: string, name: string): string => `${PREFIX}${experimentId}:${name}`

/**
 * The member and metric name of a stored member-scoped metric name, or `undefined` for any
 * other name. Member ids never contain `:`, so the first `:` after the prefix ends the id.
 *
 * @internal
 */
export const parseMemberMetric = (stored: string): { readonly experimentId: string; readonly name: string } | undefined => {
  if (!stored.startsWith(PREFIX)) return undefined
  const end = stored.indexOf(":", PREFIX.length)
  if (end <= PREFIX.length || end === stored.length - 1) return undefined
  return { experimentId: stored.slice(PREFIX.length, end), name: stored.slice(end + 1) }
}

/**
 * The member-scoped run metric a suite run writes when a member's own `stopAfterFailures`
 * stopped it (value: the budget): what tells the views, later, that the member's source was
 * not exhausted because its failure budget stopped it (the catalog's membership facts have no
 * column for it).
 *
 * @internal
 */
export const FAILURES_REACHED_METRIC = "stopped_by_failures"
