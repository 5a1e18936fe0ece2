/**
 * assay: run experiments as checkpointed, resumable pipelines over shared, rate-limited pools.
 *
 * The public API, re-exported by concept (`import { Pipeline, Runner, Task } from "assay"`).
 *
 * @since 0.1.0
 */

// domain
/** @since 0.1.0 */
export * as Codec from "./domain/Codec.js"
/** @since 0.1.0 */
export * as Errors from "./domain/Errors.js"
/** @since 0.1.0 */
export * as Json from "./domain/Json.js"
/** @since 0.1.0 */
export * as Pipeline from "./domain/Pipeline.js"
/** @since 0.1.0 */
export * as Records from "./domain/Records.js"
/** @since 0.1.0 */
export * as Resource from "./domain/Resource.js"
/** @since 0.1.0 */
export * as RetryPolicy from "./domain/RetryPolicy.js"
/** @since 0.1.0 */
export * as RunConfig from "./domain/RunConfig.js"
/** @since 0.1.0 */
export * as Shard from "./domain/Shard.js"
/** @since 0.1.0 */
export * as Task from "./domain/Task.js"
/** @since 0.1.0 */
export type { Lease, LeaseReport, Selector, AcquireOptions } from "./domain/Lease.js"
/** @since 0.1.0 */
export type { TaskContext } from "./domain/TaskContext.js"

// services
/** @since 0.1.0 */
export * as AcquireAlgorithm from "./services/AcquireAlgorithm.js"
/** @since 0.1.0 */
export * as ArtifactBackend from "./services/ArtifactBackend.js"
/** @since 0.1.0 */
export * as Bus from "./services/Bus.js"
/** @since 0.1.0 */
export * as MockLlm from "./services/MockLlm.js"
/** @since 0.1.0 */
export * as Pool from "./services/Pool.js"
/** @since 0.1.0 */
export * as ProcessRunner from "./services/ProcessRunner.js"
/** @since 0.1.0 */
export * as Runner from "./services/Runner.js"
/** @since 0.1.0 */
export * as Store from "./services/Store.js"

// layers
/** @since 0.1.0 */
export * as ArtifactBackends from "./layers/ArtifactBackends.js"
/** @since 0.1.0 */
export * as MemoryStore from "./layers/MemoryStore.js"
/** @since 0.1.0 */
export * as NodeProcessRunner from "./layers/NodeProcessRunner.js"
/** @since 0.1.0 */
export * as SqliteStore from "./layers/SqliteStore.js"
