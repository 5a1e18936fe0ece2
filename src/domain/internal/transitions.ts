/**
 * The one wording of a count of control transitions (handoff ledger rows), wherever a figure is
 * printed: the run summary, `assay report`, `assay watch`, `assay merge`, `run --shards` and
 * serve's dashboard. A ledger row is written for every committed `Handoff` (to, rewind,
 * retryAll and end), but `maxHandoffs` is spent by all of them except `end` (see
 * `Traversal.transition`), so the count is split: a user comparing it with a pipeline's
 * `maxHandoffs` reads the budgeted part, not the total.
 *
 * @internal
 */

/**
 * The figure after the label `transitions`: `3 (2 against maxHandoffs, 1 end)`.
 *
 * @param total - the transitions committed (ledger rows, `end` included).
 * @param budgeted - of those, the ones that spent a unit of a `maxHandoffs` budget (all but
 *   `end`); `undefined` when the source does not say (a plugin store written before the
 *   figure): the text then only says that ends are included.
 *
 * @internal
 */
export const transitionsText = (total: number, budgeted: number | undefined): string => {
  if (budgeted === undefined) return `${total} (end included)`
  const ends = total - budgeted
  return `${total} (${budgeted} against maxHandoffs, ${ends} end${ends === 1 ? "" : "s"})`
}
