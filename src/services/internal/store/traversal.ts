/**
 * What both drivers share of the traversal capability: the version check's error, the feature
 * levels, the address of an occurrence and the ledger's limit rule.
 *
 * @since 0.1.0
 */
import { StoreUnavailable } from "../../../domain/Errors.js"
import * as Traversal from "../../../domain/Traversal.js"

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
