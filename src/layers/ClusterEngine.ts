/**
 * The cluster engine (issue 17 §3): one experiment run by several processes on
 * `@effect/cluster` + `@effect/workflow`. The submitter starts one durable workflow per
 * window of pipelines ({@link WindowWorkflow}; its idempotency key is the window's pipeline ids
 * within its store: `Store.storeId`, the first id, the size and a digest of the ids); its one
 * activity runs the window's pipelines, task by task, each task checkpointed on its own. The
 * per-pipeline workflow ({@link PipelineWorkflow}: one pipeline, one activity per task
 * `task/<seq>/<name>`) is still hosted by runners, for executions started before windows.
 *
 * - Runner processes host the workflow ({@link workflowLayer}) over a `WorkflowEngine`
 *   (`@effect/cluster`'s `ClusterWorkflowEngine` on sharding with SQL message storage; see
 *   {@link runnerLayer}), with the `Store` and the `Pools` every runner shares and a
 *   {@link SpecCatalog} built from the same experiment file as the submitter.
 * - A submitter ({@link submit}) registers the run, admits pipelines in windows and follows
 *   them in the store until all are terminal (see {@link SubmitOptions}).
 *
 * Inside each activity the task runs through the runner's own attempt code (timeouts,
 * retry policy, attempt rows, leases) with the rules of research/distributed.md §4: the
 * checkpoint is read before running (L1) and again after every lease is granted (L4), and
 * store errors are retried inside the activity long enough to ride out a database failover
 * (L5). Exactly-once holds for the recorded result, as long as the store keeps the first
 * writer's checkpoint (a store shared by processes must: `PgStore`); the call itself is at
 * least once (a runner killed after the provider answered and before the commit makes the
 * call again).
 *
 * Pipelines that declare `control` (handoffs, rewinds) are refused by the submitter
 * (`ConfigError`): their traversal is not mapped onto activities yet.
 *
 * This module loads `@effect/cluster` and `@effect/workflow`: the embedded engine never
 * imports it (the CLI loads it only for `runner` and `run --engine cluster`).
 *
 * @since 0.7.0
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import type * as MessageStorage from "@effect/cluster/MessageStorage"
import type * as RunnerStorage from "@effect/cluster/RunnerStorage"
import type * as Sharding from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SqlMessageStorage from "@effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import type { WorkflowEngine } from "@effect/workflow/WorkflowEngine"
import type * as ConfigErrorEffect from "effect/ConfigError"
import type * as SocketServer from "@effect/platform/SocketServer"
import { Layer, type Stream } from "effect"
import type { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import type * as Pipeline from "../domain/Pipeline.js"
import type { Pools } from "../services/Pool.js"
import type { Store } from "../services/Store.js"
import * as internalSubmit from "../services/internal/cluster/submit.js"
import * as internalTask from "../services/internal/cluster/task.js"
import * as internal from "../services/internal/cluster/workflow.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * The durable workflow of one pipeline: payload `{ pipelineId, specDigest, storeId? }`
 * (`storeId`: the admitting store's `Store.storeId`), idempotency key the store's identity and
 * the pipeline id (the pipeline id alone for a store without an identity), success `{ verdict: "succeeded" | "failed" | "gone" }`, errors
 * `StoreUnavailable` (the store stayed unreachable past the activity's retry budget) and
 * {@link PipelineNotRunnable}. Starting it twice for one pipeline finds the same execution.
 *
 * @since 0.7.0
 * @category workflows
 */
export const PipelineWorkflow = internal.PipelineWorkflow

/**
 * The durable workflow of a window of pipelines, what {@link submit} starts (one per
 * `SubmitOptions.window` pipelines): payload `{ pipelineIds, specDigests, storeId? }` (the
 * window's ids and their definitions' digests, in order), idempotency key the store's
 * identity, the window's first id, its size and a digest of its ids; success
 * `{ verdicts }` (one `"succeeded" | "failed" | "gone"` per pipeline, in order), errors
 * `StoreUnavailable` and {@link PipelineNotRunnable} (the runner cannot run one of the
 * window's pipelines: it refuses the window). One activity runs the window's pipelines at once,
 * each task as {@link PipelineWorkflow}'s activity runs it (L1 read first, the task's claim,
 * the fence after every lease, first-writer-wins commit): a replayed window runs only the
 * tasks not committed. Starting the same window twice finds the same execution.
 *
 * @since 0.9.0
 * @category workflows
 */
export const WindowWorkflow = internal.WindowWorkflow

/**
 * A runner cannot run a pipeline it was asked to: the spec is not in its catalog, its
 * definition digest differs from the submitted one, or the runner writes another store than
 * the one that admitted it (`Store.storeId`). Fields: `pipelineId`, `message`.
 *
 * @since 0.7.0
 * @category errors
 */
export const PipelineNotRunnable = internal.PipelineNotRunnable

/**
 * See {@link PipelineNotRunnable}.
 *
 * @since 0.7.0
 * @category errors
 */
export type PipelineNotRunnable = internal.PipelineNotRunnable

/**
 * Where a runner process finds the spec of a pipeline id (`lookup(pipelineId)`: the spec, or
 * none when the experiment it loaded has no such pipeline; `StoreUnavailable` when reading the
 * experiment's source failed).
 *
 * @since 0.7.0
 * @category models
 */
export type SpecCatalogService = internal.SpecCatalogService

/**
 * The spec catalog tag (see {@link SpecCatalogService}).
 *
 * @since 0.7.0
 * @category tags
 */
export const SpecCatalog = internal.SpecCatalog

/**
 * A catalog over specs in memory, as a layer.
 *
 * @param specs the pipelines runners may be asked to run
 * @since 0.7.0
 * @category layers
 */
export const catalogLayer = (specs: Iterable<AnySpec>): Layer.Layer<internal.SpecCatalog> =>
  Layer.succeed(internal.SpecCatalog, internal.catalogFromSpecs(specs))

/**
 * A catalog over a stream of specs (an experiment's `pipelines()`), read whole on first use,
 * as a layer. `describe` words a source failure (it becomes a `StoreUnavailable` of the
 * lookup; the next lookup reads again).
 *
 * @since 0.7.0
 * @category layers
 */
export const catalogStreamLayer = <E, R>(
  specs: Stream.Stream<AnySpec, E, R>,
  describe: (e: E) => string
): Layer.Layer<internal.SpecCatalog, never, R> => Layer.effect(internal.SpecCatalog, internal.catalogFromStream(specs, describe))

/**
 * Options of {@link workflowLayer}: `concurrency`, attempts running at once in this process
 * (default 64; pools bound them further); `infraRetry`, the schedule retrying store errors
 * inside an activity (default: exponential from 200 ms, each delay at most 5 s, 2 minutes in
 * all); `resourcesEvery`, how often the pools' resource state is written to the store
 * (default 5 s, and once more when the process stops); `pricing`, the experiment's price table
 * (attempts record model, tokens and cost priced as the embedded engine prices them); `cache`,
 * the experiment's `run.cache` resolved (`CallCache.resolveRunCache`; default off), served from
 * the `CallCache` in context, else the store's own, else one in memory per process;
 * `windowClaims` (default off), each window claimed whole (a row per pipeline: a pipeline is
 * run by one execution at a time whatever window it is grouped in) with local deadlines instead
 * of a claim, a fence and an input read per task (docs/scale-out.md "Window claims"; needs the
 * pipeline claim table, `assay migrate`); `blockLeases` (`{ expectedRunners? }`, default off,
 * needs `windowClaims` and `PgPools` in the cluster's database), each global pool resource's
 * slots held as a block, renewed with the window claims, resized at each renewal to the
 * process's demand-proportional share of the capacity (`expectedRunners`, optional: the first
 * block's size, `⌊capacity ÷ expectedRunners⌋`, before demands are known), and handed to the
 * window's tasks in memory (docs/scale-out.md "Block leases"); `cancelEvery`, how often the
 * cancel marks of the runs this process serves are read (default the claims' heartbeat; the
 * marks are rows of the store's `assay_meta` when the store lives in the cluster's database: a
 * study's `running: cancel`, docs/scale-out.md "Studies on the cluster engine").
 *
 * @since 0.7.0
 * @category models
 */
export type WorkflowLayerOptions = internal.WorkflowLayerOptions

/**
 * Whether a runner process still starts calls ({@link WorkflowLayerOptions}' `callGate`):
 * `closed` once `close()` ran. A runner closes it as soon as it is told to stop (SIGTERM,
 * SIGINT, SIGHUP), before its scopes close: from then on no task of the process starts an
 * attempt, and a task granted a lease gives it back at once and stops before its call, since a
 * call started then could not commit before the process exits and the task's next owner would
 * call again.
 *
 * @since 0.7.0
 * @category models
 */
export type CallGate = internalTask.CallGate

/**
 * A new open {@link CallGate}, to pass to {@link workflowLayer} and close when the process is
 * told to stop.
 *
 * @returns an open gate
 * @since 0.7.0
 * @category constructors
 */
export const makeCallGate: () => CallGate = internalTask.makeCallGate

/**
 * Registers {@link WindowWorkflow} and {@link PipelineWorkflow} with the `WorkflowEngine` in context: what makes a
 * process run pipelines. Needs the `Store`, the `Pools` and a {@link SpecCatalog}; the tasks'
 * own requirements are taken from the context the layer is built in. While it lives, the
 * pools' events go to the store's event log and their resources' state to its resource rows,
 * filed under the run whose pipelines this process ran last (what `report`, `watch` and
 * `serve` show). When the context holds a Postgres `SqlClient` (the cluster's), each task
 * execution claims its task in `assay_cluster_inflight` (created by `assay migrate`): a lease
 * with a heartbeat (TTL: the `ShardingConfig`'s `shardLockExpiration` when one is in context,
 * see {@link WorkflowLayerOptions}) that keeps a second execution on another runner (a frozen
 * runner's zombie, or the new owner after a takeover) from calling while the first one lives;
 * an execution cut short (a killed runner, a moved shard) is recorded as an abandoned attempt
 * when its stale claim is taken over. Building the layer fails with a `StoreUnavailable` naming
 * `assay migrate` when that Postgres database lacks the claim table or has an older one
 * (rather than every task start failing and being retried for ever).
 *
 * @param options see {@link WorkflowLayerOptions}
 * @since 0.7.0
 * @category layers
 */
export const workflowLayer: (
  options?: WorkflowLayerOptions
) => Layer.Layer<never, StoreUnavailable, WorkflowEngine | Store | Pools | internal.SpecCatalog> = internal.workflowLayer

/**
 * Options of {@link runnerLayer} and {@link clientLayer}: the cluster's sharding settings
 * (`@effect/cluster` `ShardingConfig`: `runnerAddress` `{ host, port }` where this runner
 * listens for other runners, `shardsPerGroup`, lock and poll intervals; defaults from the
 * environment and the library).
 *
 * @since 0.7.0
 * @category models
 */
export interface ClusterOptions {
  readonly shardingConfig?: Partial<ShardingConfig.ShardingConfig["Type"]> | undefined
}

/**
 * A runner process's engine: sharding over TCP (`NodeClusterSocket`, msgpack) with SQL
 * message and runner storage on the `SqlClient` in context (PostgreSQL), and the
 * `ClusterWorkflowEngine` on top (it also gives the `Sharding`, e.g. to ask which shards this
 * runner holds) and its `ShardingConfig` (from which {@link workflowLayer} takes its task
 * claims' TTL and heartbeat). Provide {@link workflowLayer} with it to host pipelines.
 * The cluster's tables are created on first start; start one runner (or migrate) before the
 * others (L6: concurrent first starts can collide on `CREATE TABLE`).
 *
 * @since 0.7.0
 * @category layers
 */
export const runnerLayer = (
  options: ClusterOptions = {}
): Layer.Layer<
  WorkflowEngine | Sharding.Sharding | ShardingConfig.ShardingConfig,
  SocketServer.SocketServerError | ConfigErrorEffect.ConfigError,
  SqlClient.SqlClient
> =>
  ClusterWorkflowEngine.layer.pipe(
    Layer.provideMerge(NodeClusterSocket.layer({ storage: "sql", shardingConfig: options.shardingConfig })),
    // the sharding settings, also for the workflow layer (its task claims' TTL and heartbeat)
    Layer.provideMerge(ShardingConfig.layerFromEnv(options.shardingConfig))
  )

/**
 * A submitter's engine: client-only sharding (hosts no shard, sends workflow starts through
 * SQL message storage and the runners' sockets) and the `ClusterWorkflowEngine`. It also
 * gives the submitter the cluster's storage: `MessageStorage` (to clear a workflow that
 * already ended before a pipeline is submitted again) and `RunnerStorage` (to say when no
 * runner is up, and which runner holds which shard: windows are placed on the runner with the
 * least work), and its `ShardingConfig`.
 *
 * @since 0.7.0
 * @category layers
 */
export const clientLayer = (
  options: ClusterOptions = {}
): Layer.Layer<
  WorkflowEngine | Sharding.Sharding | ShardingConfig.ShardingConfig | MessageStorage.MessageStorage | RunnerStorage.RunnerStorage,
  ConfigErrorEffect.ConfigError,
  SqlClient.SqlClient
> =>
  ClusterWorkflowEngine.layer.pipe(
    Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "byo", shardingConfig: options.shardingConfig })),
    Layer.provideMerge(Layer.mergeAll(SqlMessageStorage.layer, Layer.orDie(SqlRunnerStorage.layer))),
    // the sharding settings stay in context: the submitter places its windows by shard
    Layer.provideMerge(ShardingConfig.layerFromEnv(options.shardingConfig))
  )

/**
 * Options of {@link submit}: `maxAdmitted` (pipelines running at once across the cluster,
 * default 1,024), `window` (pipelines per workflow, default 64 or a quarter of `maxAdmitted` when
 * that is less, so that four windows run at once; at most `maxAdmitted`: one
 * {@link WindowWorkflow} per window, admitted once that many pipelines are free), `pollInterval` (how often the submitter follows
 * the run: running pipelines' rows read, `onProgress`, heartbeat, runners checked; default 500 ms),
 * `roomPollInterval` (while admission waits for room, how often the rows of the `2 × window` running pipelines admitted first are read,
 * so that the next window is admitted soon after pipelines end; default 100 ms),
 * `resultEvery` (every how many follows the running windows' workflows are asked whether they
 * ended without settling their pipelines' rows, default 5), `admitBatch` (specs admitted together: one
 * read of their rows, one group commit; default 64, at most `maxAdmitted`), `startConcurrency`
 * (workflow starts of a batch sent at once, default 16), `noRunnerAfter` (how long no runner may be up
 * before `onWarning` hears of it, default 10 s; needs the cluster's `RunnerStorage`, which
 * {@link clientLayer} gives), `runId`, `label`, `meta` (of the run record), `onProgress`
 * (told after every poll), `onWarning` (told of a {@link SubmitWarning}), `onSettled` (told of
 * each pipeline once settled), `stopAfterFailures` (no more admitted once this many failed;
 * the admitted ones go on) and `mayAdmit` (asked of each spec before it is admitted; `false`
 * withholds it).
 *
 * @since 0.7.0
 * @category models
 */
export type SubmitOptions = internalSubmit.SubmitOptions

/**
 * A warning of the submitter: `NoRunner` (`sinceMs`: how long no runner has been registered
 * and healthy; `message`: a sentence saying so). Told at most once per `noRunnerAfter`.
 *
 * @since 0.8.0
 * @category models
 */
export type SubmitWarning = internalSubmit.SubmitWarning

/**
 * What the submitter has seen: `admitted` (by this submission), `skipped` (already
 * succeeded in the store), `succeeded` / `failed` (of the admitted ones; `failed` includes
 * workflows that ended without a verdict), `refused` (of the failed: refused by a runner that
 * does not host the experiment), `running` (now), `withheld` (read from the source but not
 * admitted: `mayAdmit` said no, or admission stopped).
 *
 * @since 0.7.0
 * @category models
 */
export type SubmitProgress = internalSubmit.SubmitProgress

/**
 * What {@link submit} returns: the final {@link SubmitProgress}, `status` (`completed`, or
 * `interrupted` with `stopReason: "stop_after_failures"` when `stopAfterFailures` stopped
 * admission), `durationMs` (Clock) and `causes` (one line per pipeline whose workflow ended without a
 * verdict, at most 20).
 *
 * @since 0.7.0
 * @category models
 */
export type SubmitReport = internalSubmit.SubmitReport

/**
 * Submits an experiment's specs to the cluster and follows them: opens a run, admits at most
 * `maxAdmitted` pipelines at once (their rows, then their workflows, started with `discard`),
 * and returns once every admitted pipeline is terminal. What is admitted is what `resume`
 * would run: succeeded pipelines are skipped; failed, interrupted and running ones are
 * admitted again, and a workflow that already ended for one of them is cleared from the
 * cluster's storage first (it needs the cluster's `MessageStorage` and `Sharding`, which
 * {@link clientLayer} gives), so it runs again from its first uncommitted task. A running
 * workflow is joined. Interrupting it stops admission and closes the run `interrupted`;
 * started workflows go on. Fails with `ConfigError` for a pipeline that declares `control`,
 * or when a runner refused pipelines (it hosts another experiment: admission stops at the
 * first refusal, the admitted pipelines are followed to their end, and the message names the
 * cause), `StoreUnavailable` from the store, or the source's error.
 *
 * @since 0.7.0
 * @category submitting
 */
export const submit: <SE, SR>(
  specs: Stream.Stream<AnySpec, SE, SR>,
  options?: SubmitOptions
) => Effect<SubmitReport, SE | StoreUnavailable | ConfigError, Store | WorkflowEngine | SR> = internalSubmit.submit

type Effect<A, E, R> = import("effect").Effect.Effect<A, E, R>
