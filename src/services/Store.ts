/**
 * The `Store` port: every fact assay records (runs, pipelines, tasks, attempts, artifacts,
 * events, reported metrics, resources) and the read side that reports, exports and resumes
 * are built on.
 *
 * Two implementations pass one contract suite: `SqliteStore` (src/layers/SqliteStore.ts, the
 * embedded default) and `MemoryStore` (src/layers/MemoryStore.ts). Nothing here assumes
 * SQLite: ids are assigned by the store, reads are keyset-paged streams, and writes are
 * expressed as units a database can commit atomically.
 *
 * Write semantics:
 * - **Group commit.** {@link Store.checkpoint}, {@link Store.admit}, {@link Store.putTask},
 *   {@link Store.updatePipeline}, {@link Store.settlePipeline} and {@link Store.markFinal} hand
 *   their rows to one writer, which commits everything queued in one short transaction. The
 *   caller's Effect succeeds only once its rows are durable; a failed batch fails every caller
 *   in it with `StoreUnavailable` and nothing of it is visible (rollback).
 * - **Write-behind.** {@link Store.recordAttempt} and {@link Store.emitEvent} only buffer; the
 *   buffer is written in one transaction when it reaches `batchSize` rows or every
 *   `flushInterval`, before any read that returns attempts or events, on {@link Store.flush}
 *   and when the store's scope closes. A failed batch stays buffered and is retried.
 *
 * @since 0.1.0
 */
import type { Effect, Option, Scope, Stream } from "effect"
import { Context } from "effect"
import type { ConfigError, PluginError, StoreUnavailable } from "../domain/Errors.js"
import * as front from "./internal/store/front.js"
import type { WriteOp } from "./internal/store/ops.js"
import * as shared from "./internal/store/shared.js"
import type { ArtifactBackend } from "./ArtifactBackend.js"
import type {
  ArtifactRecord,
  AttemptOutcome,
  AttemptRecord,
  EventRecord,
  MetricDisplay,
  MetricRecord,
  PipelineRecord,
  PipelineState,
  ResourceRecord,
  RunRecord,
  RunStatus,
  TaskRecord
} from "../domain/Records.js"

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/**
 * The fields of a pipeline row as a plain object: what `admit` takes. A `PipelineRecord`
 * instance fits too; plain objects skip the class constructor on the hot path.
 *
 * @since 0.1.0
 * @category models
 */
export type PipelineFields = ConstructorParameters<typeof PipelineRecord>[0]

/**
 * The fields of a task row as a plain object (a `TaskRecord` instance fits too).
 *
 * @since 0.1.0
 * @category models
 */
export type TaskFields = ConstructorParameters<typeof TaskRecord>[0]

/**
 * A new run (`status` is `running`, `heartbeatAt = startedAt`).
 *
 * @since 0.1.0
 * @category models
 */
export interface NewRun {
  readonly runId: string
  readonly label?: string | null | undefined
  /** Configuration snapshot, strict JSON. */
  readonly config?: unknown
  /** Epoch ms. */
  readonly startedAt: number
  readonly notes?: string | null | undefined
  readonly meta?: Readonly<Record<string, unknown>> | undefined
  /**
   * The run's write policy (the run config's `writeBehind`, `writeBatch`, `flushInterval`):
   * applied by the store from this run on, in place of the one it was opened with. Absent
   * fields keep the store's.
   */
  readonly writes?: Partial<WritePolicy> | undefined
}

/**
 * How a store writes attempts and events (the run config's `writeBehind`, `writeBatch`,
 * `flushInterval`):
 * - `writeBehind`: buffer them and write them in batches (default `true`); `false` writes each
 *   one before `recordAttempt` / `emitEvent` returns;
 * - `batchSize`: buffered facts that trigger a write (positive integer, default 128);
 * - `flushIntervalMs`: period of the background write in ms (default 1000; 0 = none).
 *
 * @since 0.1.0
 * @category models
 */
export interface WritePolicy {
  readonly writeBehind: boolean
  readonly batchSize: number
  readonly flushIntervalMs: number
}

/**
 * An attempt to record (the store assigns `attemptId`).
 *
 * @since 0.1.0
 * @category models
 */
export type NewAttempt = Omit<AttemptRecord, "attemptId"> & {
  readonly outcome: AttemptOutcome
}

/**
 * An event to record (the store assigns `eventId`).
 *
 * @since 0.1.0
 * @category models
 */
export interface NewEvent {
  readonly kind: string
  readonly pipelineId: string | null
  readonly runId: string | null
  /** Strict JSON. */
  readonly data: unknown
  /** Epoch ms. */
  readonly ts: number
}

/**
 * An artifact to store: its metadata plus its encoded bytes. `seq = -1` is the seed. The
 * store decides, from the journal mode and the artifact backend, where the bytes go.
 *
 * @since 0.1.0
 * @category models
 */
export interface NewArtifact {
  readonly pipelineId: string
  readonly runId: string
  readonly seq: number
  readonly taskName: string | null
  readonly typeName: string
  readonly codec: string
  /** Content digest of `payload` (see `digest` in src/domain/Json.ts). */
  readonly digest: string
  readonly payload: Uint8Array
  /** Mark it the pipeline's final artifact (clears the flag on every other artifact of it). */
  readonly isFinal: boolean
  /** Epoch ms. */
  readonly createdAt: number
}

/**
 * The failure fields of a pipeline row.
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelineError {
  readonly failedTask: string | null
  readonly errorType: string | null
  readonly errorMessage: string | null
  readonly errorClass: string | null
}

/**
 * A partial update of a pipeline row. Absent fields are left unchanged; `error: null` clears
 * the failure fields, an object sets them. `attemptsDelta` is added to `attemptsTotal`.
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelinePatch {
  readonly state?: PipelineState | undefined
  readonly nTasksDone?: number | undefined
  readonly runId?: string | undefined
  readonly startedAt?: number | null | undefined
  readonly endedAt?: number | null | undefined
  readonly error?: PipelineError | null | undefined
  readonly attemptsDelta?: number | undefined
  /** Epoch ms; becomes `updatedAt`. */
  readonly updatedAt: number
}

/**
 * One task's completion for one pipeline, committed atomically: the output artifact (if
 * any), the task row (final state), the pipeline cursor update, and the attempts and events
 * the task produced.
 *
 * @since 0.1.0
 * @category models
 */
export interface CheckpointUnit {
  readonly pipelineId: string
  readonly artifact?: NewArtifact | undefined
  readonly task?: TaskFields | undefined
  readonly pipeline?: PipelinePatch | undefined
  readonly attempts?: ReadonlyArray<NewAttempt> | undefined
  readonly events?: ReadonlyArray<NewEvent> | undefined
}

/**
 * The single write that settles a pipeline (see the spec's optional `settle_pipeline`
 * capability): terminal state, cursor, owner run, end time, failure fields cleared.
 *
 * @since 0.1.0
 * @category models
 */
export interface SettleInput {
  readonly state: PipelineState
  readonly nTasksDone: number
  readonly runId: string
  /** Epoch ms. */
  readonly endedAt: number
}

/**
 * How a run ends.
 *
 * @since 0.1.0
 * @category models
 */
export interface FinishRun {
  readonly status: Exclude<RunStatus, "running">
  /** Epoch ms. */
  readonly endedAt: number
  readonly stopReason?: string | null | undefined
}

/**
 * A metric report, upserted by (run, scope, name).
 *
 * @since 0.1.0
 * @category models
 */
export interface MetricInput {
  readonly runId: string
  readonly pipelineId: string | null
  readonly name: string
  /** Strict JSON. */
  readonly value: unknown
  readonly label?: string | null | undefined
  readonly display?: MetricDisplay | undefined
  /** Epoch ms. */
  readonly updatedAt: number
}

/**
 * A resource to upsert by (pool, resourceId). Secrets in `spec` are masked again by the store.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResourceInput {
  readonly pool: string
  readonly resourceId: string
  readonly kind: string
  readonly spec: unknown
  readonly health: unknown
  /** Epoch ms. */
  readonly updatedAt: number
}

/**
 * An artifact with its payload: `payload` is `undefined` when `artifact.available` is false.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoadedArtifact {
  readonly artifact: ArtifactRecord
  readonly payload: Uint8Array | undefined
}

// ---------------------------------------------------------------------------------------------
// Read-side shapes
// ---------------------------------------------------------------------------------------------

/**
 * Latency percentiles in ms (linear interpolation between closest ranks, the default of
 * NumPy's `percentile` / Hyndman & Fan type 7).
 *
 * @since 0.1.0
 * @category models
 */
export interface Latency {
  readonly p50: number
  readonly p95: number
  readonly p99: number
}

/**
 * What `stats` returns. Counts are scoped to `runId` when one is given (pipelines owned by the
 * run; tasks, attempts of the run).
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreStats {
  readonly pipelines: number
  readonly byState: Readonly<Record<PipelineState, number>>
  readonly tasks: number
  readonly attemptsTotal: number
  /** Attempts with `attemptNo > 1`. */
  readonly retries: number
  readonly events: number
  /** From `endedAt - startedAt` of terminal pipelines; `null` when there are none. */
  readonly latencyMs: Latency | null
  readonly resources: ReadonlyArray<ResourceRecord>
  /**
   * SQLite only: WAL frames (pages) that the last writer could not copy into the database file
   * at close because readers kept it busy. Present (and > 0) only while the `-wal` beside the
   * file still holds them: a copy of the database file alone then lacks that work, so copy the
   * `-wal` with it (or open the store for writing once, which completes the checkpoint).
   */
  readonly walPendingFrames?: number | undefined
}

/**
 * How many pipelines of one definition a store holds (what `pipelinesBySpec` returns): the
 * definition's `specDigest` (a template's digest, see `Pipeline.computeSpecDigest`) and its
 * number of `pipelines` (any state, any run).
 *
 * @since 0.1.0
 * @category models
 */
export interface SpecCount {
  readonly specDigest: string
  readonly pipelines: number
}

/**
 * One failed pipeline as `errors` lists it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ErrorRow {
  readonly pipelineId: string
  readonly name: string
  readonly key: string | null
  readonly runId: string
  readonly failedTask: string | null
  readonly errorType: string | null
  readonly errorMessage: string | null
  readonly errorClass: string | null
  readonly endedAt: number | null
}

/**
 * The {@link ErrorRow} of a failed pipeline record.
 *
 * @since 0.1.0
 * @category constructors
 */
export const errorRowOf = (p: PipelineRecord): ErrorRow => ({
  pipelineId: p.pipelineId,
  name: p.name,
  key: p.key,
  runId: p.runId,
  failedTask: p.failedTask,
  errorType: p.errorType,
  errorMessage: p.errorMessage,
  errorClass: p.errorClass,
  endedAt: p.endedAt
})

/**
 * A row limit: `undefined` = all, `0` = none, a positive integer = at most that many.
 * Negative or non-integer limits fail with `ConfigError`.
 *
 * @since 0.1.0
 * @category models
 */
export type Limit = number | undefined

/**
 * Filters of event reads.
 *
 * @since 0.1.0
 * @category models
 */
export interface EventFilter {
  readonly pipelineId?: string | undefined
  readonly runId?: string | undefined
  readonly kind?: string | undefined
}

/**
 * A keyset position in the pipeline order (createdAt, then pipelineId): the last row of a
 * page. The next page holds the rows strictly after it.
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelineCursor {
  /** Epoch ms. */
  readonly createdAt: number
  readonly pipelineId: string
}

/**
 * What {@link StoreService.pipelinesPage} reads: pipelines of `runId` (owner run; absent = every
 * run) in `state` (absent = every state), ordered by (createdAt, pipelineId), strictly after
 * `after` (absent = from the start), at most `limit` rows (a non-negative integer; anything
 * else fails with `ConfigError`).
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelinesPageOptions {
  readonly runId?: string | undefined
  readonly state?: PipelineState | undefined
  readonly after?: PipelineCursor | undefined
  readonly limit: number
}

/**
 * One page of pipelines and the cursor to pass as `after` for the next page (`null` when no
 * row follows this page, or when `limit` is 0).
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelinesPage {
  readonly pipelines: ReadonlyArray<PipelineRecord>
  readonly next: PipelineCursor | null
}

/**
 * What {@link StoreService.completions} counts: terminal pipelines (`succeeded`, `failed`,
 * `interrupted`) with an `endedAt`, owned by `runId` (absent = every run), bucketed by
 * `endedAt` into buckets of `bucketMs` (a positive integer, ms) aligned on `since` (epoch ms;
 * only pipelines with `endedAt >= since` count). Without `since`, buckets are aligned on 0
 * (the epoch) and every terminal pipeline counts.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompletionsOptions {
  readonly runId?: string | undefined
  readonly bucketMs: number
  readonly since?: number | undefined
}

/**
 * One non-empty completion bucket: `[startMs, startMs + bucketMs)` held `count` completions.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompletionBucket {
  /** Epoch ms: `since + k × bucketMs` (or `k × bucketMs` without `since`). */
  readonly startMs: number
  readonly count: number
}

/**
 * What {@link StoreService.loadBundles} reads for each pipeline.
 *
 * - `payloads`: which artifacts come with their bytes: every one (`"all"`), only the final one
 *   (`"final"`), none (`"none"`: metadata only);
 * - `artifacts`: which artifacts are listed: every one (`"all"`, the default) or only the
 *   final one (`"final"`);
 * - `tasks`: whether task rows are read (default `true`);
 * - `payloadBytes`: a budget in bytes (stored sizes) for the payloads asked for (default: no
 *   budget). The store walks the pipelines one at a time, in an order of its choosing, each
 *   pipeline's artifacts by seq then artifactId, and returns a payload while the running total
 *   of the sizes of the available payloads asked for stays within the budget, and always the
 *   first of them (so a budget of 0, or a payload above the budget, still yields one). From the
 *   first payload that does not fit on, artifacts come back as metadata only (`payload:
 *   undefined`, `available` still true): so the loaded payloads are, pipeline by pipeline, a
 *   prefix of the wanted ones, at most one pipeline is partly loaded, and their total is within
 *   the budget unless only one payload is loaded. The caller reads the rest where it stopped.
 *   A negative or NaN budget counts as 0; `Infinity` is no budget.
 *
 * @since 0.1.0
 * @category models
 */
export interface BundleOptions {
  readonly payloads: "final" | "all" | "none"
  readonly artifacts?: "all" | "final" | undefined
  readonly tasks?: boolean | undefined
  readonly payloadBytes?: number | undefined
}

/**
 * One pipeline's facts as {@link StoreService.loadBundles} returns them: its task rows (by seq,
 * then taskRunId) and its artifacts (by seq, then artifactId). An artifact whose bytes were not
 * asked for has `payload: undefined` (its `available` flag still says whether they exist).
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelineBundle {
  readonly pipelineId: string
  readonly tasks: ReadonlyArray<TaskRecord>
  readonly artifacts: ReadonlyArray<LoadedArtifact>
}

/**
 * The store's errors on reads that take a limit.
 *
 * @since 0.1.0
 * @category models
 */
export type ReadError = StoreUnavailable | ConfigError

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/**
 * The store service. Every method has `R = never` and fails only with the errors shown.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreService {
  /** `"sqlite"`, `"memory"`, …: for messages and reports. */
  readonly kind: string
  /** The feature level of the opened store (`"base"`). */
  readonly featureLevel: string
  /** Whether the store was opened read-only: every write fails with `StoreUnavailable`. */
  readonly readOnly: boolean
  /**
   * `true` when this handle is the only writer the store can have (SqliteStore's writer holds
   * an OS lock on the file): any other run the store still marks `running` is then certainly
   * dead, and the runner claims its pipelines on resume without waiting for `staleAfter`.
   * `false` when other processes may write (or when unknown).
   */
  readonly exclusiveWriter: boolean
  /** `"full"` (payloads kept) or `"summary"` (metadata only). */
  readonly journal: "full" | "summary"

  // runs
  /** Creates a run with status `running`. */
  readonly openRun: (run: NewRun) => Effect.Effect<RunRecord, StoreUnavailable>
  /** Refreshes a run's heartbeat (epoch ms). */
  readonly heartbeat: (runId: string, nowMs: number) => Effect.Effect<void, StoreUnavailable>
  /** Ends a run (flushes buffered facts first). */
  readonly finishRun: (runId: string, finish: FinishRun) => Effect.Effect<void, StoreUnavailable>
  readonly getRun: (runId: string) => Effect.Effect<Option.Option<RunRecord>, StoreUnavailable>
  /** The most recently started run. */
  readonly latestRun: Effect.Effect<Option.Option<RunRecord>, StoreUnavailable>
  /** All runs, oldest first. */
  readonly listRuns: Effect.Effect<ReadonlyArray<RunRecord>, StoreUnavailable>
  /**
   * Marks `running` runs whose heartbeat is older than `nowMs - staleAfterMs` as
   * `interrupted` (stop reason `stale`, `endedAt = nowMs`) and returns them as they are now.
   */
  readonly interruptStale: (
    staleAfterMs: number,
    nowMs: number
  ) => Effect.Effect<ReadonlyArray<RunRecord>, StoreUnavailable>

  // pipelines (group-committed writes)
  /**
   * Upserts whole pipeline rows (admission) and stores their seed artifacts (seq -1), in one
   * group commit; resolves once durable.
   */
  readonly admit: (
    pipelines: ReadonlyArray<PipelineFields>,
    seeds?: ReadonlyArray<NewArtifact> | undefined
  ) => Effect.Effect<void, StoreUnavailable>
  /** Commits one task completion atomically; resolves once durable. */
  readonly checkpoint: (unit: CheckpointUnit) => Effect.Effect<void, StoreUnavailable>
  /** Upserts one task row by `taskRunId` (e.g. `running` when a task starts). */
  readonly putTask: (task: TaskFields) => Effect.Effect<void, StoreUnavailable>
  /** Applies a partial update to one pipeline row. */
  readonly updatePipeline: (pipelineId: string, patch: PipelinePatch) => Effect.Effect<void, StoreUnavailable>
  /** One write: terminal state, cursor, owner run, end time; failure fields cleared. */
  readonly settlePipeline: (pipelineId: string, settle: SettleInput) => Effect.Effect<void, StoreUnavailable>
  /** The pipelines among `ids` that exist (one query per call). */
  readonly getPipelines: (
    ids: ReadonlyArray<string>
  ) => Effect.Effect<ReadonlyMap<string, PipelineRecord>, StoreUnavailable>
  readonly getPipeline: (id: string) => Effect.Effect<Option.Option<PipelineRecord>, StoreUnavailable>

  // write-behind facts
  /** Buffers an attempt (write-behind). */
  readonly recordAttempt: (attempt: NewAttempt) => Effect.Effect<void, StoreUnavailable>
  /** Buffers an event (write-behind). */
  readonly emitEvent: (event: NewEvent) => Effect.Effect<void, StoreUnavailable>
  /** Writes buffered attempts and events now; on failure they stay buffered. */
  readonly flush: Effect.Effect<void, StoreUnavailable>
  /** Number of buffered (unwritten) attempts and events. */
  readonly pending: Effect.Effect<number>

  // artifacts
  /** Stores one artifact outside a checkpoint (the seed, at seq -1); returns its record. */
  readonly putArtifact: (artifact: NewArtifact) => Effect.Effect<ArtifactRecord, StoreUnavailable>
  /** The latest artifact of `pipelineId` at `seq`, with its payload when available. */
  readonly getArtifact: (
    pipelineId: string,
    seq: number
  ) => Effect.Effect<Option.Option<LoadedArtifact>, StoreUnavailable>
  /** Every artifact of a pipeline, by seq then artifactId (metadata only). */
  readonly listArtifacts: (pipelineId: string) => Effect.Effect<ReadonlyArray<ArtifactRecord>, StoreUnavailable>
  /** Makes the latest artifact at `seq` the pipeline's only final one (idempotent). */
  readonly markFinal: (pipelineId: string, seq: number) => Effect.Effect<void, StoreUnavailable>

  // metrics, resources
  readonly reportMetric: (metric: MetricInput) => Effect.Effect<void, StoreUnavailable>
  readonly metrics: (filter: {
    readonly runId: string
    readonly pipelineId?: string | null | undefined
  }) => Effect.Effect<ReadonlyArray<MetricRecord>, StoreUnavailable>
  readonly putResource: (resource: ResourceInput) => Effect.Effect<void, StoreUnavailable>
  readonly resources: Effect.Effect<ReadonlyArray<ResourceRecord>, StoreUnavailable>

  // read side
  readonly stats: (runId?: string | undefined) => Effect.Effect<StoreStats, StoreUnavailable>
  /** Failed pipelines, latest first (default limit 20). */
  readonly errors: (options?: {
    readonly runId?: string | undefined
    readonly limit?: Limit
  }) => Effect.Effect<ReadonlyArray<ErrorRow>, ReadError>
  /** The latest `limit` matching events, returned oldest first (no limit = all). */
  readonly events: (
    options?: EventFilter & { readonly limit?: Limit }
  ) => Effect.Effect<ReadonlyArray<EventRecord>, ReadError>
  /** Exact count of matching events (an aggregate query; nothing decoded). */
  readonly countEvents: (filter?: EventFilter) => Effect.Effect<number, StoreUnavailable>
  /**
   * The pipelines of the store counted by definition (spec digest), most pipelines first
   * (ties by digest); empty for an empty store. One aggregate read, nothing decoded: SQLite
   * answers it from the `pipelines_spec` index (schema version 5; an older store opened
   * read-only is scanned). What `resume` and `validate` use to say how many stored pipelines
   * match the current definition.
   */
  readonly pipelinesBySpec: Effect.Effect<ReadonlyArray<SpecCount>, StoreUnavailable>

  /**
   * One keyset page of pipelines (see {@link PipelinesPageOptions}): the cost depends on the
   * page size, not on its position (SQLite: one indexed range query; memory: one scan).
   * Fails with `ConfigError` on an invalid `limit`.
   */
  readonly pipelinesPage: (options: PipelinesPageOptions) => Effect.Effect<PipelinesPage, ReadError>
  /**
   * Completions over time (see {@link CompletionsOptions}): the non-empty buckets, ascending by
   * `startMs`. One aggregate query; nothing decoded. Fails with `ConfigError` when `bucketMs`
   * is not a positive integer.
   */
  readonly completions: (options: CompletionsOptions) => Effect.Effect<ReadonlyArray<CompletionBucket>, ReadError>
  /**
   * The task rows and artifacts of many pipelines at once (see {@link BundleOptions}), for
   * exports: SQLite answers each 500 ids with one query per table. Every id in `pipelineIds`
   * has an entry (empty lists for an unknown id); within a bundle, rows are ordered as
   * {@link PipelineBundle} says. On SQLite (schema version 3) only rows of admitted
   * pipelines are found: child rows written before their pipeline's admission appear once it
   * is admitted. Blob payloads are read from the artifact backend; a missing blob reads as
   * `available: false` without a payload.
   */
  readonly loadBundles: (
    pipelineIds: ReadonlyArray<string>,
    options: BundleOptions
  ) => Effect.Effect<ReadonlyMap<string, PipelineBundle>, StoreUnavailable>

  /** Pipelines by createdAt then pipelineId (best-effort walk of a live store). */
  readonly streamPipelines: (options?: {
    readonly runId?: string | undefined
    readonly state?: PipelineState | undefined
    readonly limit?: Limit
  }) => Stream.Stream<PipelineRecord, ReadError>
  /**
   * Task rows grouped by pipeline in the store's pipeline order, then by seq, then taskRunId.
   * The pipeline order is the store's own: admission order on SQLite schema version 3 (the
   * pipeline number given at first admission; rows of pipelines not yet admitted come first),
   * pipelineId on a read-only open of an older SQLite store and in `MemoryStore`. It is neither
   * {@link streamPipelines}' order nor stable across stores, so callers that join tasks to
   * pipelines must group by pipelineId, not rely on matching orders.
   */
  readonly streamTasks: (options?: {
    readonly pipelineId?: string | undefined
    readonly runId?: string | undefined
    readonly limit?: Limit
  }) => Stream.Stream<TaskRecord, ReadError>
  /** Attempts by attemptId, bounded by the high-water mark taken when the read starts. */
  readonly streamAttempts: (options?: {
    readonly pipelineId?: string | undefined
    readonly runId?: string | undefined
    readonly limit?: Limit
  }) => Stream.Stream<AttemptRecord, ReadError>
  /** Events by eventId (oldest first), bounded by the high-water mark taken at the start. */
  readonly streamEvents: (
    options?: EventFilter & { readonly limit?: Limit }
  ) => Stream.Stream<EventRecord, ReadError>
  /** A pipeline's artifacts by seq then artifactId. */
  readonly streamArtifacts: (options: {
    readonly pipelineId: string
    readonly limit?: Limit
  }) => Stream.Stream<ArtifactRecord, ReadError>
}

/**
 * The store service tag.
 *
 * @since 0.1.0
 * @category tags
 */
export class Store extends Context.Tag("assay/Store")<Store, StoreService>() {}

/**
 * How the read side (export, report, merge) opens a store it is given by name: `openReadOnly`
 * takes a store argument as the CLI takes it (a path, a `file:` URI, a plugin URI) and opens
 * it read-only in the current scope (never created, migrated or written). Services never open
 * a store file themselves; the layer of this tag (`StoreResolver.layerOpener`) decides what a
 * name means.
 *
 * Fails with `ConfigError` on a spec that does not resolve (unknown scheme, malformed URI),
 * `StoreUnavailable` when the store is missing or not an assay store, `PluginError` when a
 * plugin's factory fails.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreOpenerService {
  readonly openReadOnly: (
    source: string
  ) => Effect.Effect<StoreService, StoreUnavailable | ConfigError | PluginError, Scope.Scope>
}

/**
 * The store opener tag (see {@link StoreOpenerService}).
 *
 * @since 0.1.0
 * @category tags
 */
export class StoreOpener extends Context.Tag("assay/StoreOpener")<StoreOpener, StoreOpenerService>() {}

/**
 * Options shared by both store layers.
 *
 * - `journal`: `"full"` (default) or `"summary"` (payloads are never stored);
 * - `batchSize`: write-behind rows buffered before a flush (default 128);
 * - `flushIntervalMs`: write-behind flush period in ms (default 1000);
 * - `writeBehind`: buffer attempts and events (default `true`; see {@link WritePolicy}).
 *
 * A run may replace the last three for its duration (`NewRun.writes`).
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreOptions {
  readonly journal?: "full" | "summary" | undefined
  readonly batchSize?: number | undefined
  readonly flushIntervalMs?: number | undefined
  readonly writeBehind?: boolean | undefined
}

/**
 * Keyset paging batch size of every stream (rows per query).
 *
 * @since 0.1.0
 * @category constants
 */
export const PAGE_SIZE = 1000

// ---------------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------------

/**
 * One queued pipeline write as the front hands it to {@link StoreDriver.commit}: an admission
 * (pipelines and their placed seeds), a checkpoint unit (its artifact placed), a task row, a
 * pipeline patch or settle, a final-artifact mark.
 *
 * @since 0.1.0
 * @category drivers
 */
export type StoreWrite = WriteOp

/**
 * Where an artifact's bytes went (`storage`, the inline `payload` or the backend's `blobRef`),
 * as the front placed them before handing the artifact to the driver.
 *
 * @since 0.1.0
 * @category drivers
 */
export type PlacedArtifact = shared.PlacedArtifact

/**
 * What a store implements below the front ({@link makeWith}): commits, fact writes and typed
 * reads, nothing else. The front owns the group commit, the write-behind buffer and its policy,
 * flush-before-read, limit validation, artifact placement, secret masking and read-only
 * refusal, so a driver never sees an invalid limit, an unplaced artifact or a write on a
 * read-only store.
 *
 * - `readOnlyError`: `undefined` for a writable store, else the error every write fails with;
 * - `commit`: writes one batch of queued writes atomically (all or nothing), in order;
 * - `writeFacts`: writes buffered attempts and events atomically (ids assigned by the driver);
 * - `finishRun`: the run row only (the front flushes first);
 * - `putArtifact`: an artifact already placed; `reportMetric` gets `label` and `display`
 *   filled; `putResource` gets its `spec` already masked;
 * - reads with a limit get it validated (`errors`, `events`: a positive integer or
 *   `undefined` = all; `pipelinesPage`: positive); streams are unlimited (the front takes);
 *   `streamAttempts` / `streamEvents` are bounded by the high-water mark at their start.
 *
 * @since 0.1.0
 * @category drivers
 */
export interface StoreDriver extends
  Pick<
    StoreService,
    | "kind"
    | "featureLevel"
    | "exclusiveWriter"
    | "openRun"
    | "heartbeat"
    | "finishRun"
    | "getRun"
    | "latestRun"
    | "listRuns"
    | "interruptStale"
    | "getPipelines"
    | "getPipeline"
    | "getArtifact"
    | "listArtifacts"
    | "metrics"
    | "putResource"
    | "resources"
    | "stats"
    | "countEvents"
    | "pipelinesBySpec"
    | "loadBundles"
  >
{
  readonly readOnlyError: StoreUnavailable | undefined
  readonly commit: (writes: ReadonlyArray<StoreWrite>) => Effect.Effect<void, StoreUnavailable>
  readonly writeFacts: (
    attempts: ReadonlyArray<NewAttempt>,
    events: ReadonlyArray<NewEvent>
  ) => Effect.Effect<void, StoreUnavailable>
  readonly putArtifact: (artifact: NewArtifact, placed: PlacedArtifact) => Effect.Effect<ArtifactRecord, StoreUnavailable>
  readonly reportMetric: (
    metric: MetricInput & { readonly label: string | null; readonly display: MetricDisplay }
  ) => Effect.Effect<void, StoreUnavailable>
  readonly errors: (options: {
    readonly runId?: string | undefined
    readonly limit: number | undefined
  }) => Effect.Effect<ReadonlyArray<ErrorRow>, StoreUnavailable>
  readonly events: (filter: EventFilter, limit: number | undefined) => Effect.Effect<ReadonlyArray<EventRecord>, StoreUnavailable>
  readonly pipelinesPage: (options: PipelinesPageOptions) => Effect.Effect<PipelinesPage, StoreUnavailable>
  readonly completions: (options: CompletionsOptions) => Effect.Effect<ReadonlyArray<CompletionBucket>, StoreUnavailable>
  readonly streamPipelines: (options: {
    readonly runId?: string | undefined
    readonly state?: PipelineState | undefined
  }) => Stream.Stream<PipelineRecord, StoreUnavailable>
  readonly streamTasks: (options: {
    readonly pipelineId?: string | undefined
    readonly runId?: string | undefined
  }) => Stream.Stream<TaskRecord, StoreUnavailable>
  readonly streamAttempts: (options: {
    readonly pipelineId?: string | undefined
    readonly runId?: string | undefined
  }) => Stream.Stream<AttemptRecord, StoreUnavailable>
  readonly streamEvents: (filter: EventFilter) => Stream.Stream<EventRecord, StoreUnavailable>
  readonly streamArtifacts: (options: { readonly pipelineId: string }) => Stream.Stream<ArtifactRecord, StoreUnavailable>
}

/**
 * Builds the store service of a driver in the current scope, using the `ArtifactBackend` in
 * context (see {@link StoreDriver} for the split). Closing the scope commits queued writes and
 * flushes buffered facts. Fails with `ConfigError` on invalid `options` (a `batchSize` that is
 * not a positive integer, a negative `flushIntervalMs`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWith: (
  driver: StoreDriver,
  options?: StoreOptions
) => Effect.Effect<StoreService, ConfigError, ArtifactBackend | Scope.Scope> = front.makeWith

/**
 * Validates a read limit: `undefined` (all) or a non-negative integer; anything else fails
 * with `ConfigError` (issue path `limit`). The one check behind every store read and export.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkLimit: (limit: Limit) => Effect.Effect<number | undefined, ConfigError> = shared.checkLimit
