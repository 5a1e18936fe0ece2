/**
 * The context a task receives with its input, built by the runner for every attempt.
 *
 * This file holds the contract only; the runner builds the values. Later capabilities (bus,
 * resource publication, store access) extend the interface without changing these members.
 *
 * @since 0.1.0
 */
import type { Effect, Scope, Stream } from "effect"
// The context names only domain interfaces (TaskStore, TaskBus, pool events): the runner builds
// the values from its services.
import type { ConfigError, PoolNotFound, StoreUnavailable } from "./Errors.js"
import type { PipelineId, RunId } from "./Ids.js"
import type { Json } from "./Json.js"
import type { AcquireError, AcquireOptions, Lease, ResourceInfo } from "./Lease.js"
import type { EventFilter, ResourceEvent } from "./PoolEvent.js"
import type { Resource, ResourceOptions } from "./Resource.js"
import type { TaskBus } from "./TaskBus.js"
import type { TaskStore } from "./TaskStore.js"

/**
 * How a reported metric is displayed: a number, a ratio shown as a percentage, or text.
 *
 * @since 0.1.0
 * @category models
 */
export type MetricDisplay = "number" | "percent" | "text"

/**
 * Options of `reportMetric`: a human label and how the value is displayed.
 *
 * @since 0.1.0
 * @category models
 */
export interface MetricOptions {
  readonly label?: string | undefined
  readonly display?: MetricDisplay | undefined
  /**
   * Where a task's metric is recorded: `"pipeline"` (default, the current pipeline's scope) or
   * `"run"` (the run's scope: dashboard cards, `report`), for figures a task aggregates itself.
   */
  readonly scope?: "pipeline" | "run" | undefined
}

/**
 * What one attempt of one task knows and can do.
 *
 * @since 0.1.0
 * @category models
 */
export interface TaskContext {
  /** The content-addressed (or explicit) id of the pipeline being run. */
  readonly pipelineId: PipelineId
  /** The id of the current run. */
  readonly runId: RunId
  /** The running task's name. */
  readonly taskName: string
  /**
   * The suite the pipeline belongs to (its `suite.id`), `null` outside a suite. With
   * `experimentId`, `localKey` and `outputDir` it tells which member of a suite an attempt
   * works for, without changing the task's input.
   */
  readonly suiteId: string | null
  /** The suite member (experiment id) the pipeline belongs to, `null` outside a suite. */
  readonly experimentId: string | null
  /**
   * The pipeline's key within its member: the content address or explicit key it had before
   * the suite re-keyed it (`pipelineId` is then the suite-wide id). `null` outside a suite.
   */
  readonly localKey: string | null
  /**
   * The directory for the application's own files of this member, absolute: the suite's output
   * root (layout `combined`) or the member's `experiments/ID` directory (layout
   * `byExperiment`); `null` outside a suite. Nothing is written there or redirected for the
   * task: naming files, concurrent appends and idempotency across retries stay the task's own.
   */
  readonly outputDir: string | null
  /**
   * The variables of the study trial the pipeline belongs to: variable name → its value in the
   * trial's variant (the prompt's text, the model profile object, the range's number, ...).
   * `{}` outside studies. Frozen (deeply): one trial's values, shared with no other trial.
   */
  readonly variables: Readonly<Record<string, Json>>
  /** The task's position in the pipeline, from 0. */
  readonly seq: number
  /**
   * The attempt number within the current visit, from 1: `attempt > 1` means this is a retry.
   */
  readonly attempt: number
  /**
   * Which entry into this task's station this is, from 0: always 0 on a pipeline without
   * `control`; on a pipeline with `control`, each fresh entry of the station (after a rewind or
   * retry-all, or a later station's ordinary entry after one) adds 1. Put it in idempotency keys
   * when every regeneration must be a new external action.
   */
  readonly visit: number
  /**
   * A deterministic seed for this attempt (an unsigned 32-bit integer derived from the
   * pipeline id, seq, visit and attempt): the same attempt of the same pipeline always gets
   * the same seed, so sampling is reproducible across runs and resumes, while a revisit samples
   * anew (visit 0 derives exactly as before visits existed). An Effect task's `Random`
   * service is seeded with it (`Random.make(seed)`), so `Random.next` inside the task is
   * reproducible in the same way.
   */
  readonly seed: number
  /** Free-form values for this attempt only. */
  readonly meta: Record<string, unknown>
  /** The run's cross-pipeline signal bus (`publish` returns the subscriber count). */
  readonly bus: TaskBus
  /**
   * The run's store, read-only, for tasks that read history: writes go through the runner
   * (`reportMetric`, `emit`, the task's output).
   */
  readonly store: TaskStore
  /**
   * Adds a resource to a pool at run time; waiting pipelines can lease it at once. Fails with
   * `PoolNotFound` or `ConfigError` (invalid resource, duplicate explicit id).
   */
  readonly publishResource: (
    pool: string,
    resource: Resource<any> | ResourceOptions<any>
  ) => Effect.Effect<ResourceInfo, PoolNotFound | ConfigError>
  /** Revokes a resource for good (`false` when the id is unknown or already revoked). */
  readonly revokeResource: (pool: string, resourceId: string, reason?: string) => Effect.Effect<boolean, PoolNotFound>
  /** Pool events (`resource.degraded`, `resource.added`, …), optionally of one pool or some kinds. */
  readonly subscribe: (filter?: EventFilter) => Stream.Stream<ResourceEvent>
  /**
   * Leases a resource for the enclosing `Scope`: released on every exit path (success,
   * failure, interruption, timeout). A string is a pool name. The pool defaults to the task's
   * `resource`.
   */
  readonly acquire: <Client = unknown>(
    options?: AcquireOptions | string
  ) => Effect.Effect<Lease<Client>, AcquireError, Scope.Scope>
  /**
   * The escape hatch: a raw lease that the task must release itself (`lease.releaseNow`).
   * One still held when the attempt ends is reclaimed and recorded as leaked (with
   * `strictLeases` the task fails with `LeaseLeakError`).
   */
  readonly acquireLease: <Client = unknown>(
    options?: AcquireOptions | string
  ) => Effect.Effect<Lease<Client>, AcquireError>
  /** The leases this attempt currently holds. */
  readonly heldLeases: Effect.Effect<ReadonlyArray<Lease>>
  /** Gives back every lease this attempt holds, now. */
  readonly reclaimNow: Effect.Effect<void>
  /**
   * Writes a custom event (`kind`, `data`: strict JSON) into this run's event stream
   * (buffered with the other events; fails only if the store is unavailable).
   */
  readonly emit: (kind: string, data?: Readonly<Record<string, unknown>>) => Effect.Effect<void, StoreUnavailable>
  /**
   * Reports the latest value of a metric scoped to the current pipeline (strings, booleans
   * and finite numbers). A non-finite number (`NaN`, `±Infinity`) is dropped with a warning
   * and a `metric.dropped` event, and the task goes on; any other value fails with
   * `ConfigError`. Written at once, not buffered.
   */
  readonly reportMetric: (
    name: string,
    value: string | number | boolean,
    options?: MetricOptions
  ) => Effect.Effect<void, StoreUnavailable | ConfigError>
}
