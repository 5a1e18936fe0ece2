/**
 * What the drivers share of the traversal capability: the version check's error, the feature
 * levels, the address of an occurrence, the ledger's limit rule and a transition's
 * `pipeline.handoff` event built from its ledger row.
 *
 * @since 0.1.0
 */
import { StoreUnavailable } from "../../../domain/Errors.js"
import * as Traversal from "../../../domain/Traversal.js"
import type { NewEvent, TraversalWrite } from "../../Store.js"

/**
 * The feature level of a store that has never committed a revisit.
 *
 * @since 0.1.0
 * @category constants
 */
export const BASE_LEVEL = "base"

/**
 * The feature level of a store that holds a revisit (a station entered a second time): set in
 * the transaction that commits the first one, never undone.
 *
 * @since 0.1.0
 * @category constants
 */
export const VISITS_LEVEL = "visits-v1"

/**
 * The failure of a checkpoint whose traversal version does not match the stored one.
 *
 * @param pipelineId - the pipeline.
 * @param expected - the version the write was based on.
 * @param actual - the stored version, `null` when no state is stored.
 * @returns `StoreUnavailable` with the {@link Traversal.TraversalConflict} as its cause.
 *
 * @since 0.1.0
 * @category errors
 */
export const conflict = (pipelineId: string, expected: number, actual: number | null): StoreUnavailable => {
  const message = actual === null ?
    `traversal of pipeline ${pipelineId}: no traversal state is stored (the write expected version ${expected})` :
    `traversal of pipeline ${pipelineId}: stored version ${actual}, the write expected ${expected} (another writer moved it)`
  return new StoreUnavailable({
    message,
    cause: new Traversal.TraversalConflict({ pipelineId, expected, actual, message })
  })
}

/**
 * Whether committing `state` moves the store to {@link VISITS_LEVEL}.
 *
 * @param state - a traversal state being committed.
 * @returns `true` when it records a revisit.
 *
 * @since 0.1.0
 * @category models
 */
export const needsVisits = (state: Traversal.VisitState): boolean => Traversal.hasRevisit(state)

/**
 * The newest `limit` rows of an oldest-first list, still oldest first (`undefined` = all).
 *
 * @param rows - oldest first.
 * @param limit - a validated limit.
 * @returns the tail.
 *
 * @since 0.1.0
 * @category models
 */
export const newest = <A>(rows: ReadonlyArray<A>, limit: number | undefined): ReadonlyArray<A> =>
  limit === undefined || rows.length <= limit ? rows : rows.slice(rows.length - limit)

/**
 * The `pipeline.handoff` event a traversal write asks its store to record (see
 * `HandoffEventFacts`): built from its ledger row and its facts at commit time, so that the unit waiting for its commit does not hold the event too.
 *
 * @param t - an accepted traversal write.
 * @returns the event, `undefined` when `t` has no `handoff` or no `handoffEvent`.
 *
 * @since 0.16.0
 * @category models
 */
export const handoffEventOf = (t: TraversalWrite): NewEvent | undefined => {
  const h = t.handoff
  const f = t.handoffEvent
  if (h === undefined || f === undefined) return undefined
  return {
    kind: "pipeline.handoff",
    pipelineId: h.pipelineId,
    runId: h.runId,
    // (the key order is the event's stored JSON)
    data: {
      operation: h.operation,
      fromSeq: h.fromSeq,
      fromTask: h.fromTask,
      visit: f.visit,
      toSeq: h.toSeq,
      toTask: h.toTask,
      entry: h.entryArtifactId,
      entryReused: h.entryReused,
      reason: h.reason,
      handoffs: f.handoffs,
      limit: f.limit
    },
    ts: h.ts
  }
}
