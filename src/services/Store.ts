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
import type { Effect, Scope, Stream } from "effect"
import type { HandoffRecord } from "../domain/Handoff.js"
import type { VisitState } from "../domain/Traversal.js"
import { Context } from "effect"
import type { ConfigError, PluginError, StoreUnavailable } from "../domain/Errors.js"
import type { PipelineId, RunId } from "../domain/Ids.js"
import * as front from "./internal/store/front.js"
import type { WriteOp } from "./internal/store/ops.js"
import * as shared from "./internal/store/shared.js"
import type {
  CompletionBucket,
  CompletionsOptions,
  ErrorRow,
  EventFilter,
  Limit,
  PipelinesPage,
  PipelinesPageOptions,
  TaskStore,
  HandoffsOptions,
  TakenPipelines,
  TraversalStore
} from "../domain/TaskStore.js"
import type { ArtifactBackend } from "./ArtifactBackend.js"
import type { CallCacheService } from "./CallCache.js"
import type {
  ArtifactRecord,
  AttemptOutcome,
  AttemptRecord,
  EventRecord,
  MetricDisplay,
  PipelineRecord,
  PipelineState,
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
  readonly runId: RunId
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
export type NewAttempt = Omit<AttemptRecord, "attemptId" | "visit" | AccountingField> & {
  readonly outcome: AttemptOutcome
  /** The visit of the task run the attempt belongs to (default 0). */
  readonly visit?: number | undefined
} & { readonly [K in AccountingField]?: AttemptRecord[K] | undefined }

/**
 * The token and cost accounting fields of an attempt (see `AttemptRecord`): optional in a
 * {@link NewAttempt} (absent: `null`, and `tokensEstimated` `false`).
 *
 * @since 0.8.0
 * @category models
 */
export type AccountingField = "model" | "tokensIn" | "tokensOut" | "tokensEstimated" | "costUsd"

/**
 * An event to record (the store assigns `eventId`).
 *
 * @since 0.1.0
 * @category models
 */
export interface NewEvent {
  readonly kind: string
  readonly pipelineId: PipelineId | null
  readonly runId: RunId | null
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
  readonly pipelineId: PipelineId
  readonly runId: RunId
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
  /** The visit that produced it (default 0; handoff payloads are always visit 0). */
  readonly visit?: number | undefined
}

/**
 * A handoff ledger row to append (the store assigns `handoffId`).
 *
 * @since 0.1.0
 * @category models
 */
export type NewHandoff = Omit<HandoffRecord, "handoffId">

/**
 * The traversal part of a {@link CheckpointUnit} (pipelines that declare `control`):
 *
 * - `expectedVersion`: the stored state's version this write is based on; any other stored
 *   version fails the checkpoint with `StoreUnavailable` whose `cause` is a
 *   `Traversal.TraversalConflict`, and nothing of the unit is written;
 * - `state`: the new state (stored as is);
 * - `handoff`: the ledger row of a transition;
 * - `entry`: a new handoff payload (at `seq = nTasks + k`, visit 0);
 * - `invalidateFrom`: task and artifact rows of stations `>= invalidateFrom` (and `< nTasks`,
 *   the payloads stay) become inactive history (rewind, retry-all, restarts: 0);
 * - `final`: the occurrence address of the artifact that becomes the pipeline's only final one
 *   (an `end` transition);
 * - `handoffEvent` (with `handoff`): the store also records the transition's `pipeline.handoff`
 *   event, built from the ledger row (see {@link HandoffEventFacts}), so that a unit waiting
 *   for its commit holds the transition's facts once.
 *
 * @since 0.1.0
 * @category models
 */
export interface TraversalWrite {
  readonly expectedVersion: number
  readonly state: VisitState
  readonly handoff?: NewHandoff | undefined
  readonly handoffEvent?: HandoffEventFacts | undefined
  readonly entry?: NewArtifact | undefined
  readonly invalidateFrom?: number | undefined
  readonly final?: string | undefined
}

/**
 * What a transition's `pipeline.handoff` event says beyond its ledger row
 * ({@link TraversalWrite.handoffEvent}). A store that commits a traversal write with both
 * `handoff` (`h`) and `handoffEvent` (`f`) records, after the unit's own `events`, the event of
 * kind `pipeline.handoff` with `h`'s pipeline, run and time (`ts`), whose data is, in this key
 * order, `{ operation, fromSeq, fromTask, visit, toSeq, toTask, entry, entryReused, reason,
 * handoffs, limit }`: `h`'s fields (`entry` is `h.entryArtifactId`), then `visit`, `handoffs`
 * and `limit` from `f`. A refused write records no event.
 *
 * @since 0.16.0
 * @category models
 */
export interface HandoffEventFacts {
  /** The visit of the source task's entry that returned the directive (0 = first). */
  readonly visit: number
  /** The budget spent once the transition is made (`VisitState.handoffs` of the state it leads to). */
  readonly handoffs: number
  /** The pipeline's effective transition budget (`Control.effectiveLimit`). */
  readonly limit: number
}

/**
 * The initial traversal state of a control pipeline, written by `admit` with its row
 * (replacing any stored state).
 *
 * @since 0.1.0
 * @category models
 */
export interface InitialTraversal {
  readonly pipelineId: PipelineId
  readonly state: VisitState
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
  readonly runId?: RunId | undefined
  readonly startedAt?: number | null | undefined
  readonly endedAt?: number | null | undefined
  readonly error?: PipelineError | null | undefined
  readonly attemptsDelta?: number | undefined
  /** Epoch ms; becomes `updatedAt`. */
  readonly updatedAt: number
}

/**
 * An admission as {@link Store.admit} takes it (pipeline rows, their seeds, the initial
 * traversal states of control pipelines), carried by a {@link CheckpointUnit} whose
 * pipeline's row is not written yet.
 *
 * @since 0.1.0
 * @category models
 */
export interface AdmissionWrite {
  readonly pipelines: ReadonlyArray<PipelineFields>
  readonly seeds?: ReadonlyArray<NewArtifact> | undefined
  readonly traversals?: ReadonlyArray<InitialTraversal> | undefined
}

/**
 * One task's completion for one pipeline, committed atomically: the output artifact (if
 * any), the task row (final state), the pipeline cursor update, and the attempts and events
 * the task produced.
 *
 * A unit may carry what must be committed before it, in the same transaction: the
 * pipeline's `admission` (when its row was not written yet) and then the `before` units of
 * the same pipeline, in order (the runner commits the checkpoints of consecutive synchronous
 * tasks together). Either all of it is durable when `checkpoint` resolves, or the call fails.
 *
 * @since 0.1.0
 * @category models
 */
export interface CheckpointUnit {
  readonly pipelineId: PipelineId
  readonly artifact?: NewArtifact | undefined
  readonly task?: TaskFields | undefined
  readonly pipeline?: PipelinePatch | undefined
  readonly attempts?: ReadonlyArray<NewAttempt> | undefined
  readonly events?: ReadonlyArray<NewEvent> | undefined
  /** The traversal write of a control pipeline (stores with the traversal capability only). */
  readonly traversal?: TraversalWrite | undefined
  /** The pipeline's admission, committed first (see the interface docs). */
  readonly admission?: AdmissionWrite | undefined
  /** Earlier units of the same pipeline, committed after `admission` and before this one. */
  readonly before?: ReadonlyArray<CheckpointUnit> | undefined
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
  readonly runId: RunId
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
  readonly runId: RunId
  readonly pipelineId: PipelineId | null
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

// ---------------------------------------------------------------------------------------------
// Read-side shapes (domain/TaskStore.ts, re-exported)
// ---------------------------------------------------------------------------------------------

export type {
  LoadedArtifact,
  Latency,
  StoreStats,
  SpecCount,
  ResourceUsage,
  AccountingFigures,
  CacheFigures,
  PipelineAccounting,
  PipelineAccountingOptions,
  ErrorRow,
  Limit,
  EventFilter,
  PipelineCursor,
  PipelinesPageOptions,
  PipelinesPage,
  CompletionsOptions,
  CompletionBucket,
  BundleOptions,
  PipelineBundle,
  ReadError,
  TaskStore,
  HandoffsOptions,
  TraversalStore,
  TakenPipelines
} from "../domain/TaskStore.js"

/**
 * The pipelines a store holds as `succeeded`, with what identifies them (see
 * {@link StoreService.succeededPipelines}): `size` of them; `has(id, specDigest, seedDigest,
 * contentAddressed)` says whether pipeline `id` is one of them stored with exactly these
 * definition and seed digests. A content-addressed id (no explicit key: the id is the digest
 * of `[specDigest, seedDigest, repeat]`) stored without a key was made from the same digests,
 * so for a content-addressed spec the id alone answers (the identity content addressing
 * already rests on); a keyed row or a keyed spec compares the stored digests.
 *
 * @since 0.6.0
 * @category models
 */
export interface SucceededIndex {
  readonly size: number
  readonly has: (pipelineId: string, specDigest: string, seedDigest: string, contentAddressed: boolean) => boolean
}

/**
 * What an admission saw of a pipeline's stored row (see {@link StoreService.claimAdmission}):
 * the claim succeeds only while the row still has these values.
 *
 * @since 0.8.0
 * @category models
 */
export interface ClaimExpectation {
  readonly runId: RunId
  readonly state: PipelineState
  readonly nTasksDone: number
  /** Epoch ms. */
  readonly updatedAt: number
}

/**
 * The result of {@link StoreService.claimAdmission}: `Won` (the admission is written, the
 * pipeline is this run's), or `Lost` with the row as another writer left it (`undefined`
 * only if it vanished).
 *
 * @since 0.8.0
 * @category models
 */
export type ClaimOutcome =
  | { readonly _tag: "Won" }
  | { readonly _tag: "Lost"; readonly current: PipelineRecord | undefined }

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/**
 * The store service. Every method has `R = never` and fails only with the errors shown.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoreService extends TaskStore {
  /**
   * `true` when this handle is the only writer the store can have (SqliteStore's writer holds
   * an OS lock on the file): any other run the store still marks `running` is then certainly
   * dead, and the runner claims its pipelines on resume without waiting for `staleAfter`.
   * `false` when other processes may write (or when unknown).
   */
  readonly exclusiveWriter: boolean

  /**
   * The store's own call cache (see `CallCache`), when it has one: SqliteStore opened for
   * writing keeps cached outputs in the `call_cache` table of its file, through its writer
   * connection; PgStore opened for writing in its database's `assay_call_cache` table, through
   * its client. A runner uses it when no `CallCache` is provided (else an in-memory cache).
   * `undefined`: the store keeps no cache (memory, read-only, plugins).
   */
  readonly callCache?: CallCacheService | undefined

  /**
   * The store's identity: a random id given to the store when it was first opened for
   * writing (PgStore: the `store_id` row of `assay_meta`, written once with
   * `ON CONFLICT DO NOTHING`, so every writer of one database reads the same id; a new
   * database, or one migrated again from scratch, gets a new one; MemoryStore: one per
   * instance). Read once per handle and then kept. What the cluster engine puts in a
   * pipeline's workflow identity, so that a fresh store on the same cluster database runs its
   * pipelines instead of being answered from another store's stored replies, and what a runner
   * compares with its own store before running a pipeline. `undefined`: the store has no
   * identity (SQLite, read-only opens, plugins).
   */
  readonly storeId?: Effect.Effect<string, StoreUnavailable> | undefined

  /**
   * Every pipeline stored as `succeeded`, with what identifies it ({@link SucceededIndex}),
   * read at once (SQLite: the content-addressed ids packed in one blob from the state index,
   * other ids as strings, the digests of keyed rows only; nothing else decoded).
   * What admission asks once per run, so that a resume skips the specs of finished pipelines
   * without reading their rows: only the specs this map does not settle (unknown ids,
   * other digests) are looked up. Optional: a store without it (admission then reads every
   * batch's rows) leaves it `undefined`. Costs memory in the number of succeeded pipelines
   * (SQLite: ~30 bytes per content-addressed id; otherwise about 100 bytes each; a keyed one
   * about twice that).
   */
  readonly succeededPipelines?: Effect.Effect<SucceededIndex, StoreUnavailable> | undefined

  /**
   * The states of the pipelines among `ids` that are stored, and, with `among`, only of those
   * whose state is one of `among` (e.g. the terminal ones: which of these pipelines ended?):
   * a map from id to state and run id ({@link PipelineStateAndRun}: the run the row is filed
   * under now), with no entry for an unknown id or a state outside `among`. One read of three
   * columns (id, state, run id; Postgres: a named prepared statement per 5,000 ids; SQLite:
   * one query per 500 ids), nothing else of the rows decoded: what the cluster submitter's
   * follow asks many times a second where `getPipelines` read and decoded ~25 columns of
   * every running row (with `among`, only the rows in those states come back). Sees what `getPipelines` sees (no write-behind flush). Optional: a store
   * without it (a plugin, a suite's router) leaves it `undefined`, and callers read
   * `getPipelines` instead ({@link pipelineStatesOf}).
   */
  readonly pipelineStates?: PipelineStatesRead | undefined

  /**
   * Runs `reads` (several reads of this store) against one consistent view of it, so that
   * figures read one after the other agree while a writer commits meanwhile (the monitoring
   * picture: totals, counts per state and per-resource sums of one `/stats` answer). SQLite:
   * one read transaction on the reading connection (WAL: a snapshot as of its first read;
   * the writer is not held up). Postgres: one `REPEATABLE READ, READ ONLY` transaction (a
   * snapshot as of its first query; no lock). Memory: the writes of other fibers wait until
   * `reads` end (the reading fiber's own go through). The write-behind buffer is flushed once
   * as the view begins; reads inside it do not flush (a read-only transaction cannot write).
   * `reads` should be a few bounded reads: SQLite's close checkpoint waits for them (see
   * docs/store.md). Fails with `StoreUnavailable` when the transaction cannot begin or end.
   * Optional: a store without it (plugins) reads as it goes.
   */
  readonly consistentReads?: (<A, E, R>(reads: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StoreUnavailable, R>) | undefined

  /**
   * Writes one pipeline's admission (row, seed, initial traversal state, as
   * {@link StoreService.admit}) only if the stored row is still what admission decided on:
   * absent when `expected` is `undefined`, else with the same owner run, state, cursor and
   * update time. Atomic against every other writer of the store, so of two runs admitting the
   * same pipeline at once exactly one wins; the other gets the row as it is now and must not
   * run the pipeline. Commits at once (not through the group commit).
   * Present on stores that other processes may write at the same time (Postgres); a store
   * with one writer leaves it `undefined` and admission writes with `admit`.
   */
  readonly claimAdmission?:
    | ((write: AdmissionWrite, expected: ClaimExpectation | undefined) => Effect.Effect<ClaimOutcome, StoreUnavailable>)
    | undefined

  /**
   * {@link StoreService.claimAdmission} for a batch in one transaction: `expected[i]` is what
   * admission saw of `write.pipelines[i]`'s row (`undefined`: absent); each pipeline is
   * written (row, its seeds and traversal state) only if its row is still so, and the answer
   * says, in the same order, which were won and, for each lost one, its row as it is now.
   * What a cluster submitter admits a window's pipelines with, so that of two submitters of
   * the same pipelines a stale read never puts a finished row back to `running`. Dies when
   * `expected` and `write.pipelines` differ in length or a pipeline comes twice. Present
   * where `claimAdmission` is (Postgres).
   */
  readonly claimAdmissions?:
    | ((
      write: AdmissionWrite,
      expected: ReadonlyArray<ClaimExpectation | undefined>
    ) => Effect.Effect<ReadonlyArray<ClaimOutcome>, StoreUnavailable>)
    | undefined

  // runs
  /** Creates a run with status `running`. */
  readonly openRun: (run: NewRun) => Effect.Effect<RunRecord, StoreUnavailable>
  /** Refreshes a run's heartbeat (epoch ms). */
  readonly heartbeat: (runId: RunId, nowMs: number) => Effect.Effect<void, StoreUnavailable>
  /** Ends a run (flushes buffered facts first). */
  readonly finishRun: (runId: RunId, finish: FinishRun) => Effect.Effect<void, StoreUnavailable>
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
    seeds?: ReadonlyArray<NewArtifact> | undefined,
    traversals?: ReadonlyArray<InitialTraversal> | undefined
  ) => Effect.Effect<void, StoreUnavailable>
  /**
   * Commits one task completion atomically (with its `admission` and `before` units, when
   * given); resolves once durable.
   */
  readonly checkpoint: (unit: CheckpointUnit) => Effect.Effect<void, StoreUnavailable>
  /**
   * Upserts one task row by `taskRunId`. The runner does not write a row when a task starts
   * (its rows are written when the task ends, in its checkpoint): nothing durable marks an
   * attempt's start, so a resume after a kill cannot tell a started attempt from one that was
   * next: it records a `pipeline.abandoned` event for it, never an attempt row (see
   * docs/runner.md, "Resume").
   */
  readonly putTask: (task: TaskFields) => Effect.Effect<void, StoreUnavailable>
  /** Applies a partial update to one pipeline row. */
  readonly updatePipeline: (pipelineId: PipelineId, patch: PipelinePatch) => Effect.Effect<void, StoreUnavailable>
  /** One write: terminal state, cursor, owner run, end time; failure fields cleared. */
  readonly settlePipeline: (pipelineId: PipelineId, settle: SettleInput) => Effect.Effect<void, StoreUnavailable>

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
  /** Makes the latest artifact at `seq` the pipeline's only final one (idempotent). */
  readonly markFinal: (pipelineId: PipelineId, seq: number) => Effect.Effect<void, StoreUnavailable>

  // metrics, resources
  readonly reportMetric: (metric: MetricInput) => Effect.Effect<void, StoreUnavailable>
  readonly putResource: (resource: ResourceInput) => Effect.Effect<void, StoreUnavailable>
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
 * The read of {@link StoreService.pipelineStates} (and what {@link pipelineStatesOf} gives):
 * from the pipeline ids and, optionally, the states wanted (`among`), the map of id to the
 * state and run ({@link PipelineStateAndRun}) of those stored (no entry for an unknown id or
 * a state outside `among`); fails with `StoreUnavailable` as the store's reads do. Each
 * entry carries the row's run id beside its state (before owner38, the state alone).
 *
 * @since 0.19.0
 * @category reads
 */
export type PipelineStatesRead = shared.PipelineStatesRead

/**
 * What {@link StoreService.pipelineStates} answers of one stored pipeline: its `state` and
 * the `runId` its row is filed under now (the run that last admitted it). A row moves to
 * another run only when another submission admits it again, after it ended `failed` or
 * `interrupted`: the cluster submitter counts a pipeline whose row another run took as what
 * it did under its own run, never as that run's success.
 *
 * @since 0.19.0
 * @category reads
 */
export type PipelineStateAndRun = shared.PipelineStateAndRun

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
    | "resourceUsage"
    | "pipelineAccounting"
    | "countEvents"
    | "pipelinesBySpec"
    | "loadBundles"
  >
{
  readonly readOnlyError: StoreUnavailable | undefined
  /** See {@link StoreService.callCache} (optional). */
  readonly callCache?: CallCacheService | undefined
  /** See {@link StoreService.storeId} (optional). */
  readonly storeId?: StoreService["storeId"]
  /** See {@link StoreService.succeededPipelines} (optional). */
  readonly succeededPipelines?: StoreService["succeededPipelines"]
  /** See {@link StoreService.pipelineStates} (optional). */
  readonly pipelineStates?: StoreService["pipelineStates"]
  /** See {@link StoreService.takenPipelines} (optional; the front flushes write-behind facts first). */
  readonly takenPipelines?: StoreService["takenPipelines"]
  /** See {@link StoreService.consistentReads} (optional). */
  readonly consistentReads?: StoreService["consistentReads"]
  /**
   * See {@link StoreService.claimAdmission} (optional): the admission as a write op, its
   * seeds placed by the front.
   */
  readonly claimAdmission?:
    | ((
      write: Extract<StoreWrite, { readonly _tag: "Admit" }>,
      expected: ClaimExpectation | undefined
    ) => Effect.Effect<ClaimOutcome, StoreUnavailable>)
    | undefined
  /** See {@link StoreService.claimAdmissions} (optional): the batch as one write op, its seeds placed by the front. */
  readonly claimAdmissions?:
    | ((
      write: Extract<StoreWrite, { readonly _tag: "Admit" }>,
      expected: ReadonlyArray<ClaimExpectation | undefined>
    ) => Effect.Effect<ReadonlyArray<ClaimOutcome>, StoreUnavailable>)
    | undefined
  /**
   * Commits a batch. A checkpoint whose traversal version does not match is skipped (nothing
   * of it written) and returned with its error, by index in `writes`; every other write of the
   * batch commits. Plain batches return nothing.
   */
  readonly commit: (
    writes: ReadonlyArray<StoreWrite>
  ) => Effect.Effect<void | ReadonlyArray<readonly [number, StoreUnavailable]>, StoreUnavailable>
  /** The traversal capability (reads; writes go through `commit`). `handoffs` gets a validated limit. */
  readonly traversal?: {
    readonly visitState: TraversalStore["visitState"]
    readonly handoffs: (options: HandoffsOptions) => Effect.Effect<ReadonlyArray<HandoffRecord>, StoreUnavailable>
    readonly getArtifactById: TraversalStore["getArtifactById"]
  } | undefined
  readonly writeFacts: (
    attempts: ReadonlyArray<NewAttempt>,
    events: ReadonlyArray<NewEvent>
  ) => Effect.Effect<void, StoreUnavailable>
  readonly putArtifact: (artifact: NewArtifact, placed: PlacedArtifact) => Effect.Effect<ArtifactRecord, StoreUnavailable>
  readonly reportMetric: (
    metric: MetricInput & { readonly label: string | null; readonly display: MetricDisplay }
  ) => Effect.Effect<void, StoreUnavailable>
  readonly errors: (options: {
    readonly runId?: RunId | undefined
    readonly limit: number | undefined
  }) => Effect.Effect<ReadonlyArray<ErrorRow>, StoreUnavailable>
  readonly events: (filter: EventFilter, limit: number | undefined) => Effect.Effect<ReadonlyArray<EventRecord>, StoreUnavailable>
  readonly pipelinesPage: (options: PipelinesPageOptions) => Effect.Effect<PipelinesPage, StoreUnavailable>
  readonly completions: (options: CompletionsOptions) => Effect.Effect<ReadonlyArray<CompletionBucket>, StoreUnavailable>
  readonly streamPipelines: (options: {
    readonly runId?: RunId | undefined
    readonly state?: PipelineState | undefined
  }) => Stream.Stream<PipelineRecord, StoreUnavailable>
  readonly streamTasks: (options: {
    readonly pipelineId?: PipelineId | undefined
    readonly runId?: RunId | undefined
  }) => Stream.Stream<TaskRecord, StoreUnavailable>
  readonly streamAttempts: (options: {
    readonly pipelineId?: PipelineId | undefined
    readonly runId?: RunId | undefined
  }) => Stream.Stream<AttemptRecord, StoreUnavailable>
  readonly streamEvents: (filter: EventFilter) => Stream.Stream<EventRecord, StoreUnavailable>
  readonly streamArtifacts: (options: { readonly pipelineId: PipelineId }) => Stream.Stream<ArtifactRecord, StoreUnavailable>
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

/**
 * The states of the stored pipelines among `ids` ({@link StoreService.pipelineStates}), read
 * through `getPipelines` when the store lacks that method (its rows' states kept). What the
 * cluster submitter's follow and admission read.
 *
 * @param store - the store.
 * @returns a function of the ids and, optionally, the states wanted (`among`), to the map of
 *   id to state (no entry for an unknown id or a state outside `among`); fails as the store's
 *   reads do (`StoreUnavailable`).
 *
 * @since 0.19.0
 * @category reads
 */
export const pipelineStatesOf: (
  store: Pick<StoreService, "getPipelines" | "pipelineStates">
) => PipelineStatesRead = shared.pipelineStatesOf

/**
 * The pipelines that ran under a run and are filed under another run now
 * ({@link StoreService.takenPipelines}), read from the run's task rows, attempt rows and
 * `pipeline.interrupted` events when the store lacks that method (a plugin, a suite's view).
 * What `assay report --run-id` adds to the run's own rows.
 *
 * @param store - the store.
 * @returns a function of the run id to the counts per run the rows are filed under now,
 *   ascending by run id; fails as the store's reads do.
 *
 * @since 0.20.0
 * @category reads
 */
export const takenPipelinesOf: (
  store: Pick<StoreService, "takenPipelines" | "streamTasks" | "streamAttempts" | "streamEvents" | "getPipelines" | "pipelineStates">
) => (runId: RunId) => Effect.Effect<ReadonlyArray<TakenPipelines>, StoreUnavailable | ConfigError> = shared.takenPipelinesOf
