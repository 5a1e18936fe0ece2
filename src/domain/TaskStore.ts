/**
 * The read side of the store as a task sees it (`TaskContext.store`): runs, pipelines, tasks,
 * artifacts, attempts, events, metrics and resources, read through keyset-paged streams and
 * typed queries; nothing here writes. `StoreService` (src/services/Store.ts) extends it with the
 * write port only the runner uses, so a task cannot write behind the runner's back (metrics go
 * through `ctx.reportMetric`).
 *
 * The read shapes live here, in the domain, and `services/Store.ts` re-exports them.
 *
 * @since 0.1.0
 */
import type { Effect, Option, Stream } from "effect"
import type { ConfigError, StoreUnavailable } from "./Errors.js"
import type { HandoffRecord } from "./Handoff.js"
import type { PipelineId, RunId } from "./Ids.js"
import type { VisitState } from "./Traversal.js"
import type {
  ArtifactRecord,
  AttemptRecord,
  EventRecord,
  MetricRecord,
  PipelineRecord,
  PipelineState,
  ResourceRecord,
  RunRecord,
  TaskRecord
} from "./Records.js"

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
  /**
   * Retries: attempts that ended with the retry policy's decision to retry
   * (`decision.retry === true`). A task re-run after its run died
   * (a gap in the attempt numbers) or on a resume after the policy gave up is no retry.
   */
  readonly retries: number
  readonly events: number
  /**
   * Committed control transitions (handoff ledger rows); for a run, only those that run
   * committed. 0 on a store without the traversal capability.
   */
  readonly handoffsTotal: number
  /**
   * Of `handoffsTotal`, the transitions that spent a unit of a `maxHandoffs` budget: all but
   * `end` (an `end` consumes none). Absent on a store that does not compute it (a plugin
   * written before it): readers then say only that ends are included.
   */
  readonly handoffsBudgeted?: number | undefined
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
  /**
   * Token and cost accounting of the scope's attempts, each attempt counted once however many
   * resources it leased (see {@link AccountingFigures}). Absent on a store that does not
   * compute it (a plugin written before it): readers then fold its attempts.
   */
  readonly accounting?: AccountingFigures | undefined
  /**
   * What the call cache did in the scope, counted from the attempt rows (see
   * {@link CacheFigures}): durable, so a run killed with `kill -9` reads as many as it recorded.
   * Absent on a store that does not compute it (a plugin written before it): readers then fold
   * its attempts (`CallCache.statsOf`).
   */
  readonly cache?: CacheFigures | undefined
}

/**
 * The call cache's figures of a set of attempts, each read from the attempt's own row (its
 * outcome and the `cache` note of its decision): `hits` the attempts served from the cache
 * (outcome `cache_hit`), `misses` the attempts of cached tasks that found nothing and called
 * (succeeded or failed), `refreshed` those run in `refresh` mode, `bypassed` those of `readOnly`
 * tasks that found nothing (they ran and stored nothing), `writeFailures` the misses and refreshes
 * that succeeded but whose output the cache failed to store (counted in those too: the next run
 * calls again), `lookupFailures` the attempts whose lookup the cache failed to answer (counted
 * as misses or bypassed too); `tokensSaved` the stored usage of the calls the hits replaced and
 * `costSavedUsd` their priced cost summed (US dollars; `null` when no hit's call had a known
 * cost).
 *
 * @since 0.11.0
 * @category models
 */
export interface CacheFigures {
  readonly hits: number
  readonly misses: number
  readonly refreshed: number
  readonly bypassed: number
  readonly writeFailures: number
  readonly lookupFailures: number
  readonly tokensSaved: { readonly promptTokens: number; readonly completionTokens: number; readonly totalTokens: number }
  readonly costSavedUsd: number | null
  /**
   * Answers the cache stored (since 0.12.0): the misses and refreshes whose attempt succeeded
   * and whose output was kept (`stored` not `false`, and not `lostRace`: an answer stored first was kept). Absent on a store that does not count it.
   */
  readonly stored?: number | undefined
}

/**
 * Token and cost figures of a set of attempts (see `Pricing`): `calls` the model calls sent to
 * a provider (since 0.13.0, tester16c F5: what a study trial's `calls` counts), each lease held
 * by an attempt that sent one, so a judge attempt whose answer needed a format repair made 2;
 * `refused` the attempts on a pool resource that the provider refused with a 429 (error class
 * `rate_limit`, no tokens), `failedCalls` those that reached it and failed without an answer
 * (`upstream`: a 5xx, `timeout`; no tokens): both are among `calls`, and `calls - refused -
 * failedCalls` were answered (before 0.13.0, `calls` counted the answered attempts, each
 * once, and the calls sent were `calls + refused + failedCalls`; a connection that never
 * reached the provider is not a call). Since 0.15.0 (fix16aa) a call answered with a 400 or
 * another 4xx (class `fatal`, no tokens) is a call too, as a study trial's meter counts it; a
 * lease without tokens that succeeded or failed with another class (a worker pool's
 * subprocess) is none; `cacheHits` the attempts served by the call cache
 * (outcome `cache_hit`: no call, no tokens, no cost), any cached task's (a pure task declared
 * `cache: true` included); `modelCallHits` those of them whose task declares a pool resource
 * (`chat`, `judge`, any task with a `resource`: it would have leased one to make its call),
 * the model calls the cache saved (since 0.14.0; a hit recorded before that version does not
 * say its task's pool and counts in `cacheHits` only), `tokensIn` / `tokensOut` the sums of
 * their tokens, `costUsd` the sum of their known costs (US dollars), `estimated` the attempts
 * whose tokens were estimated (the server reported none), `unpriced` the attempts with tokens
 * but no known cost. All 0 in a store before schema version 12 but `cacheHits`.
 *
 * @since 0.8.0
 * @category models
 */
export interface AccountingFigures {
  readonly calls: number
  readonly refused: number
  readonly failedCalls: number
  readonly cacheHits: number
  readonly modelCallHits: number
  readonly tokensIn: number
  readonly tokensOut: number
  readonly costUsd: number
  readonly estimated: number
  readonly unpriced: number
}

/**
 * The {@link AccountingFigures} of one pipeline's attempts in scope (what `pipelineAccounting`
 * returns).
 *
 * @since 0.8.0
 * @category models
 */
export interface PipelineAccounting extends AccountingFigures {
  readonly pipelineId: PipelineId
}

/**
 * What `pipelineAccounting` reads: the attempts of `runId` (absent: of every run), of the
 * pipelines among `pipelineIds` when given (an export page; SQLite: admitted pipelines only),
 * and the order: `orderBy` `"cost"` (costUsd descending, then tokens in + out descending),
 * `"tokens"` (tokens in + out descending, then costUsd descending), absent: by pipelineId;
 * ties by pipelineId ascending. `limit` keeps the first N (a top-N view); absent: all.
 *
 * @since 0.8.0
 * @category models
 */
export interface PipelineAccountingOptions {
  readonly runId?: RunId | undefined
  readonly pipelineIds?: ReadonlyArray<PipelineId> | undefined
  readonly orderBy?: "cost" | "tokens" | undefined
  readonly limit?: number | undefined
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
 * What the attempts did on one pool resource (what `resourceUsage` returns): `target` is the
 * lease target `pool/resourceId` (a lease id `pool/resourceId#n` without its `#n`), `attempts`
 * the attempts that held a lease on it (an attempt holding several leases on the same target
 * counts once), `retries` those of them that ran because the previous attempt of the same task
 * run (pipeline, seq, visit) in scope ended with the retry policy's decision to retry
 * (`decision.retry === true`; a re-run after a kill is none), `rateLimited` those whose
 * `errorClass` is `rate_limit`.
 *
 * Token and cost accounting (see `Pricing`; 0 in stores before schema version 12):
 * `tokensIn` / `tokensOut` summed over those attempts, `costUsd` the sum of their known costs
 * (US dollars), `estimated` the attempts whose tokens were estimated, `unpriced` the attempts
 * with tokens but no known cost. An attempt's figures count once per target it leased.
 *
 * @since 0.6.0
 * @category models
 */
export interface ResourceUsage {
  readonly target: string
  readonly attempts: number
  readonly retries: number
  readonly rateLimited: number
  readonly tokensIn: number
  readonly tokensOut: number
  readonly costUsd: number
  readonly estimated: number
  readonly unpriced: number
}

/**
 * One failed pipeline as `errors` lists it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ErrorRow {
  readonly pipelineId: PipelineId
  readonly name: string
  readonly key: string | null
  readonly runId: RunId
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
  readonly pipelineId?: PipelineId | undefined
  readonly runId?: RunId | undefined
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
  readonly pipelineId: PipelineId
}

/**
 * What {@link TaskStore.pipelinesPage} reads: pipelines of `runId` (owner run; absent = every
 * run) in `state` (absent = every state), ordered by (createdAt, pipelineId), strictly after
 * `after` (absent = from the start), at most `limit` rows (a non-negative integer; anything
 * else fails with `ConfigError`).
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelinesPageOptions {
  readonly runId?: RunId | undefined
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
 * What {@link TaskStore.completions} counts: terminal pipelines (`succeeded`, `failed`,
 * `interrupted`) with an `endedAt`, owned by `runId` (absent = every run), bucketed by
 * `endedAt` into buckets of `bucketMs` (a positive integer, ms) aligned on `since` (epoch ms;
 * only pipelines with `endedAt >= since` count). Without `since`, buckets are aligned on 0
 * (the epoch) and every terminal pipeline counts.
 *
 * @since 0.1.0
 * @category models
 */
export interface CompletionsOptions {
  readonly runId?: RunId | undefined
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
 * What {@link TaskStore.loadBundles} reads for each pipeline.
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
 * One pipeline's facts as {@link TaskStore.loadBundles} returns them: its task rows (by seq,
 * then taskRunId) and its artifacts (by seq, then artifactId). An artifact whose bytes were not
 * asked for has `payload: undefined` (its `available` flag still says whether they exist).
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelineBundle {
  readonly pipelineId: PipelineId
  readonly tasks: ReadonlyArray<TaskRecord>
  readonly artifacts: ReadonlyArray<LoadedArtifact>
}

/**
 * Pipelines that ran under one run and whose rows are filed under another run now, counted
 * per the run they are filed under (see {@link TaskStore.takenPipelines}): a failed or
 * interrupted pipeline admitted again by another submission (a cluster run's rows move to the
 * run that admitted them last). `interrupted` counts those the asked run stopped (it recorded
 * a `pipeline.interrupted` event for them, or it died with them in flight and the run that
 * claimed them recorded a `pipeline.abandoned` event naming it), `failed` the others: how the
 * cluster submitter counts them in its own summary.
 *
 * @since 0.20.0
 * @category models
 */
export interface TakenPipelines {
  /** The run the rows are filed under now. */
  readonly runId: RunId
  readonly failed: number
  readonly interrupted: number
}

/**
 * The store's errors on reads that take a limit.
 *
 * @since 0.1.0
 * @category models
 */
export type ReadError = StoreUnavailable | ConfigError

/**
 * Options of {@link TraversalStore.handoffs}: a pipeline and/or a run, and `limit` (the
 * newest N rows, still oldest first; `undefined` = all).
 *
 * @since 0.1.0
 * @category models
 */
export interface HandoffsOptions {
  readonly pipelineId?: PipelineId | undefined
  readonly runId?: RunId | undefined
  readonly limit?: Limit
}

/**
 * The traversal capability of a store (optional): what pipelines that declare `control` need.
 * Writes go through `checkpoint` (`CheckpointUnit.traversal`) and `admit` (initial states).
 *
 * - `visitState`: the pipeline's durable traversal state, `None` for a plain pipeline (or a
 *   state that is missing);
 * - `handoffs`: ledger rows, oldest first; `limit` keeps the newest N;
 * - `getArtifactById`: any occurrence by its address (`pipelineId:seq` for visit 0,
 *   `pipelineId:seq#visit` for revisits), superseded ones included; `None` when unknown.
 *
 * @since 0.1.0
 * @category models
 */
export interface TraversalStore {
  readonly visitState: (pipelineId: PipelineId) => Effect.Effect<Option.Option<VisitState>, StoreUnavailable>
  readonly handoffs: (options?: HandoffsOptions) => Effect.Effect<ReadonlyArray<HandoffRecord>, ReadError>
  readonly getArtifactById: (address: string) => Effect.Effect<Option.Option<LoadedArtifact>, StoreUnavailable>
}


// ---------------------------------------------------------------------------------------------
// The read-only store
// ---------------------------------------------------------------------------------------------

/**
 * The read-only store a task may use (see the module docs). Every method has `R = never` and
 * fails only with the errors shown.
 *
 * @since 0.1.0
 * @category models
 */
export interface TaskStore {
  /** `"sqlite"`, `"memory"`, …: for messages and reports. */
  readonly kind: string
  /**
   * The feature level of the opened store, read when accessed: `"base"`, or `"visits-v1"` once
   * a revisit (a station entered a second time) has been committed; it never goes back.
   */
  readonly featureLevel: string
  /** Whether the store was opened read-only: every write fails with `StoreUnavailable`. */
  readonly readOnly: boolean
  /** `"full"` (payloads kept) or `"summary"` (metadata only). */
  readonly journal: "full" | "summary"
  /**
   * The traversal capability's reads (both built-in stores have it; `undefined` on a store
   * without it): visit states, the handoff ledger, any occurrence by its address. A task reads
   * a superseded occurrence with `ctx.store.traversal?.getArtifactById(address)`.
   */
  readonly traversal?: TraversalStore | undefined

  readonly getRun: (runId: RunId) => Effect.Effect<Option.Option<RunRecord>, StoreUnavailable>
  /** The most recently started run. */
  readonly latestRun: Effect.Effect<Option.Option<RunRecord>, StoreUnavailable>
  /** All runs, oldest first. */
  readonly listRuns: Effect.Effect<ReadonlyArray<RunRecord>, StoreUnavailable>
  /** The pipelines among `ids` that exist (one query per call). */
  readonly getPipelines: (
    ids: ReadonlyArray<PipelineId>
  ) => Effect.Effect<ReadonlyMap<PipelineId, PipelineRecord>, StoreUnavailable>
  readonly getPipeline: (id: PipelineId) => Effect.Effect<Option.Option<PipelineRecord>, StoreUnavailable>
  /** The latest artifact of `pipelineId` at `seq`, with its payload when available. */
  readonly getArtifact: (
    pipelineId: PipelineId,
    seq: number
  ) => Effect.Effect<Option.Option<LoadedArtifact>, StoreUnavailable>
  /** Every artifact of a pipeline, by seq then artifactId (metadata only). */
  readonly listArtifacts: (pipelineId: PipelineId) => Effect.Effect<ReadonlyArray<ArtifactRecord>, StoreUnavailable>
  readonly metrics: (filter: {
    readonly runId: RunId
    readonly pipelineId?: PipelineId | null | undefined
  }) => Effect.Effect<ReadonlyArray<MetricRecord>, StoreUnavailable>
  readonly resources: Effect.Effect<ReadonlyArray<ResourceRecord>, StoreUnavailable>
  readonly stats: (runId?: RunId | undefined) => Effect.Effect<StoreStats, StoreUnavailable>
  /**
   * Per pool resource, what the attempts of `runId` (absent: of every run) did on it (see
   * {@link ResourceUsage}), ascending by `target`; targets no attempt leased are absent. One
   * aggregate read (SQLite: attempts in id order, leases unnested in SQL; nothing decoded per
   * attempt). Write-behind attempts are flushed first.
   */
  readonly resourceUsage: (runId?: RunId | undefined) => Effect.Effect<ReadonlyArray<ResourceUsage>, StoreUnavailable>
  /**
   * Token and cost figures per pipeline (see {@link PipelineAccountingOptions}): only the
   * pipelines with at least one model call or cache hit in scope are listed (any other
   * pipeline's figures are all 0). One aggregate read grouped by pipeline (SQL on SQLite and
   * Postgres; nothing decoded per attempt). Write-behind attempts are flushed first.
   */
  readonly pipelineAccounting: (
    options?: PipelineAccountingOptions
  ) => Effect.Effect<ReadonlyArray<PipelineAccounting>, StoreUnavailable>
  /** Failed pipelines, latest first (default limit 20). */
  readonly errors: (options?: {
    readonly runId?: RunId | undefined
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
    pipelineIds: ReadonlyArray<PipelineId>,
    options: BundleOptions
  ) => Effect.Effect<ReadonlyMap<PipelineId, PipelineBundle>, StoreUnavailable>
  /**
   * The pipelines that ran under `runId` (a task row, an attempt row or a
   * `pipeline.interrupted` event of that run) and whose row is filed under another run now,
   * counted per that run ({@link TakenPipelines}), ascending by run id; empty when none.
   * One aggregate read over the run's rows through the run-id indexes of tasks, attempts and
   * events, and the `pipeline.abandoned` events through the kind index (nothing decoded per
   * pipeline). What `assay report --run-id` adds to a run's own
   * rows so that its counts match the run's summary. Write-behind facts are flushed first.
   * Optional: a store without it (a plugin, a suite's view) leaves it `undefined`, and callers
   * read the run's rows instead (`Store.takenPipelinesOf`).
   */
  readonly takenPipelines?: ((runId: RunId) => Effect.Effect<ReadonlyArray<TakenPipelines>, StoreUnavailable>) | undefined
  /** Pipelines by createdAt then pipelineId (best-effort walk of a live store). */
  readonly streamPipelines: (options?: {
    readonly runId?: RunId | undefined
    readonly state?: PipelineState | undefined
    readonly limit?: Limit
  }) => Stream.Stream<PipelineRecord, ReadError>
  /**
   * Task rows grouped by pipeline in the store's pipeline order, then by seq, then visit (0 first), then taskRunId.
   * The pipeline order is the store's own: admission order on SQLite schema version 3 (the
   * pipeline number given at first admission; rows of pipelines not yet admitted come first),
   * pipelineId on a read-only open of an older SQLite store and in `MemoryStore`. It is neither
   * {@link streamPipelines}' order nor stable across stores, so callers that join tasks to
   * pipelines must group by pipelineId, not rely on matching orders.
   */
  readonly streamTasks: (options?: {
    readonly pipelineId?: PipelineId | undefined
    readonly runId?: RunId | undefined
    readonly limit?: Limit
  }) => Stream.Stream<TaskRecord, ReadError>
  /** Attempts by attemptId, bounded by the high-water mark taken when the read starts. */
  readonly streamAttempts: (options?: {
    readonly pipelineId?: PipelineId | undefined
    readonly runId?: RunId | undefined
    readonly limit?: Limit
  }) => Stream.Stream<AttemptRecord, ReadError>
  /** Events by eventId (oldest first), bounded by the high-water mark taken at the start. */
  readonly streamEvents: (
    options?: EventFilter & { readonly limit?: Limit }
  ) => Stream.Stream<EventRecord, ReadError>
  /** A pipeline's artifacts by seq then artifactId. */
  readonly streamArtifacts: (options: {
    readonly pipelineId: PipelineId
    readonly limit?: Limit
  }) => Stream.Stream<ArtifactRecord, ReadError>
}

/** Every member of {@link TaskStore}: what {@link readOnlyView} copies. */
const TASK_STORE_MEMBERS = [
  "kind",
  "featureLevel",
  "readOnly",
  "journal",
  "getRun",
  "latestRun",
  "listRuns",
  "getPipelines",
  "getPipeline",
  "getArtifact",
  "listArtifacts",
  "metrics",
  "resources",
  "stats",
  "resourceUsage",
  "pipelineAccounting",
  "errors",
  "events",
  "countEvents",
  "pipelinesBySpec",
  "pipelinesPage",
  "completions",
  "loadBundles",
  "streamPipelines",
  "streamTasks",
  "streamAttempts",
  "streamEvents",
  "streamArtifacts",
  "traversal",
  "takenPipelines"
] as const satisfies ReadonlyArray<keyof TaskStore>

// fails to compile when TaskStore gains a member the list above lacks
const _everyMember: Exclude<keyof TaskStore, (typeof TASK_STORE_MEMBERS)[number]> extends never ? true : never = true
void _everyMember

/**
 * A read-only view of a store: an object with exactly the members of {@link TaskStore}, taken
 * from `store` (a full store service fits). What a task receives as `ctx.store`, so that a
 * task (or a JavaScript plugin that ignores the types) cannot write behind the runner's back:
 * the write operations are not there at all.
 *
 * @param store any object implementing at least {@link TaskStore}
 * @returns a new object holding only the read members (bound to the same store)
 * @since 0.1.0
 * @category constructors
 */
export const readOnlyView = (store: TaskStore): TaskStore => {
  const view: Record<string, unknown> = {}
  for (const key of TASK_STORE_MEMBERS) {
    // the feature level can move while the store is open: read through
    if (key === "featureLevel") Object.defineProperty(view, key, { get: () => store.featureLevel, enumerable: true })
    else view[key] = store[key]
  }
  return Object.freeze(view) as unknown as TaskStore
}
