/**
 * assay: run experiments as checkpointed, resumable pipelines over shared, rate-limited pools.
 *
 * The public API, re-exported by concept.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as Errors from "./domain/Errors.js"
/** @since 0.1.0 */
export * as Json from "./domain/Json.js"
