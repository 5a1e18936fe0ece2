/**
 * The cluster engine's workflows. What the submitter starts: one durable workflow of
 * `@effect/workflow` per window of pipelines (`WindowWorkflow`, idempotency key `windowKey`),
 * whose one activity (`window`) runs the window's pipelines at once, each pipeline's tasks in
 * order, each task checkpointed on its own, with one task claim per pipeline carried from task
 * to task. The engine's messages are per window, not per task. The body runs from the top on
 * every replay; the engine returns a finished activity's stored verdict instead of running it
 * again, and each task execution reads the store first (L1), so a task committed by any
 * executor is never run twice. What runs a task is `task.ts`.
 *
 * Still hosted, for executions started by an earlier submitter: one workflow per pipeline
 * (`PipelineWorkflow`, idempotency key the store's identity and the pipeline id,
 * `workflowKey`), one activity per task named `task/<seq>/<name>` (deterministic and unique
 * within the workflow), with one task claim per task. The research note's sketch (one
 * pipeline = one workflow, one task = one activity) was this mapping; windows replaced it
 * because the engine's messages per task cost more than the tasks' own work.
 *
 * The payloads stay small (pipeline ids and the definitions' digests): runner processes
 * find the specs in their {@link SpecCatalog} (they load the same experiment file as the
 * submitter) and seeds and checkpoints in the store.
 *
 * @internal
 */
import * as Activity from "@effect/workflow/Activity"
import * as Workflow from "@effect/workflow/Workflow"
import * as SqlClient from "@effect/sql/SqlClient"
import type { WorkflowEngine } from "@effect/workflow/WorkflowEngine"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import { Clock, Context, Duration, Effect, Layer, Option, Schedule, Schema, Stream } from "effect"
import * as Rows from "../runner/rows.js"
import * as CallCache from "../../CallCache.js"
import type * as Pricing from "../../../domain/Pricing.js"
import type { RunId } from "../../../domain/Ids.js"
import { StoreUnavailable } from "../../../domain/Errors.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type * as Task from "../../../domain/Task.js"
import { digest } from "../../../domain/Json.js"
import { Bus, make as makeBus } from "../../Bus.js"
import { Pools } from "../../Pool.js"
import type { PoolsService } from "../../Pools.js"
import { Store, type StoreService } from "../../Store.js"
import * as Infra from "./infra.js"
import * as InFlight from "./inflight.js"
import * as PgPools from "../pool/pg/pools.js"
import * as PoolSql from "../pool/pg/sql.js"
import { type CallGate, defaultInfraRetry, makeTaskEnv, newClaim, runTask, type TaskEnv } from "./task.js"
import { runWindow } from "./window.js"
import { runControlledClaimed } from "./controlled.js"
import * as WindowClaims from "./windowClaims.js"
import * as CancelMarks from "./cancelMarks.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * A runner cannot run a pipeline it was asked to: its spec is not in the runner's catalog
 * (the runner loaded another experiment file), its definition differs from the one the
 * submitter admitted (`specDigest`), or the runner writes another store than the one that
 * admitted it (`storeId`). Terminal for the workflow: start the runners on the
 * submitter's experiment file and submit again.
 *
 * @internal
 */
export class PipelineNotRunnable extends Schema.TaggedError<PipelineNotRunnable>("assay/PipelineNotRunnable")(
  "PipelineNotRunnable",
  { pipelineId: Schema.String, message: Schema.String }
) {}

/**
 * How a pipeline's workflow ended: `succeeded`, `failed` (a task failed for good; its row
 * says which), `gone` (its row vanished or was settled by someone else) or `interrupted` (its
 * run was cancelled: `cancelMarks.ts`; its row is `interrupted`, resumable).
 *
 * @internal
 */
export const PipelineOutcome = Schema.Struct({ verdict: Schema.Literal("succeeded", "failed", "gone", "interrupted") })

/**
 * A pipeline's workflow identity: the pipeline id within the store that admitted it
 * (`Store.storeId`; the pipeline id alone for a store without an identity). A completed
 * workflow answers every later start of the same identity from its stored reply, and its
 * activities' replies answer a replay: keyed by the pipeline id alone, a fresh store on the
 * same cluster database (a second experiment with the same pipeline ids, or the same
 * experiment into a new store) was answered with the old store's verdicts and ran nothing.
 * The same store keeps the same identity, so a resume or a re-submission finds the same
 * execution.
 *
 * @internal
 */
export const workflowKey = ({ pipelineId, storeId }: { readonly pipelineId: string; readonly storeId?: string | undefined }): string =>
  storeId === undefined ? pipelineId : `${storeId}/${pipelineId}`

/**
 * The workflow of one pipeline (payload: the pipeline id, its definition's digest and the
 * identity of the store that admitted it; idempotency key: {@link workflowKey}).
 *
 * @internal
 */
export const PipelineWorkflow = Workflow.make({
  name: "assay/Pipeline",
  payload: { pipelineId: Schema.String, specDigest: Schema.String, storeId: Schema.optional(Schema.String) },
  success: PipelineOutcome,
  error: Schema.Union(StoreUnavailable, PipelineNotRunnable),
  idempotencyKey: workflowKey
})

const TaskVerdictSchema = Schema.Literal("done", "failed", "gone", "interrupted")

/**
 * A window's workflow identity: the admitting store's identity (`Store.storeId`, none for a
 * store without one), the window's first pipeline id, its size and a digest of its ids in
 * order. The same window submitted again (a resume, a re-submission) finds the same execution;
 * a window of other pipelines, or of the same pipelines in another grouping, is another one.
 *
 * @internal
 */
export const windowKey = (
  { pipelineIds, storeId }: { readonly pipelineIds: ReadonlyArray<string>; readonly storeId?: string | undefined }
): string => {
  const own = `${pipelineIds[0] ?? ""}+${pipelineIds.length}/${digest(pipelineIds.join("\n")).slice(0, 16)}`
  return storeId === undefined ? own : `${storeId}/${own}`
}

/**
 * A window workflow's idempotency key: {@link windowKey}, and for a lane above 0 (`lane`: the
 * submitter's choice among a window's alternative executions, so that it lands on the runner
 * with the least work, see `submit.ts` `chooseLane`) `@lane` after it. Lane 0 (or none) is the
 * key windows had before lanes. A window submitted again joins its live execution because the
 * submitter looks up every lane's run request first (`submit.ts` `liveLanes`), not because the
 * key is the same: a second execution in another lane would wait for the window claim.
 *
 * @internal
 */
export const windowExecutionKey = (
  payload: { readonly pipelineIds: ReadonlyArray<string>; readonly storeId?: string | undefined; readonly lane?: number | undefined }
): string => {
  const key = windowKey(payload)
  return payload.lane === undefined || payload.lane === 0 ? key : `${key}@${payload.lane}`
}

/**
 * What one pipeline of a window came to: the verdict of its workflow-of-one counterpart
 * (`succeeded`, `failed`, `gone`, `interrupted`), in the window's order.
 *
 * @internal
 */
export const WindowOutcome = Schema.Struct({ verdicts: Schema.Array(Schema.Literal("succeeded", "failed", "gone", "interrupted")) })

/**
 * The workflow of a window of pipelines (what the submitter starts: one per window of
 * `SubmitOptions.window` pipelines, not one per pipeline). Payload: the window's pipeline ids
 * and their definitions' digests (same order), the admitting store's identity and the lane
 * the submitter chose ({@link windowExecutionKey}: which of a window's alternative executions,
 * hence which shard and runner; the window claim's key leaves it out, so two lanes of one
 * window never run it at once); idempotency key {@link windowExecutionKey}. Its one activity (`window`) runs the window's pipelines
 * at once, each task through the same execution as a pipeline workflow's activity (`task.ts`:
 * L1 read first, the task's claim, the fence after every lease, first-writer-wins commit), so
 * a replayed window (its runner was killed, its shard moved) runs again only the tasks not
 * committed, and a task committed by any executor is never run again. The engine's messages
 * are per window (one run request, one activity, their replies), not per task.
 *
 * @internal
 */
export const WindowWorkflow = Workflow.make({
  name: "assay/Window",
  payload: {
    pipelineIds: Schema.Array(Schema.String),
    specDigests: Schema.Array(Schema.String),
    storeId: Schema.optional(Schema.String),
    lane: Schema.optional(Schema.Number)
  },
  success: WindowOutcome,
  error: Schema.Union(StoreUnavailable, PipelineNotRunnable),
  idempotencyKey: windowExecutionKey
})

/**
 * Where a runner process finds the spec of a pipeline id: built from the experiment it
 * loaded (`fromSpecs`, `fromStream`).
 *
 * @internal
 */
export interface SpecCatalogService {
  readonly lookup: (pipelineId: string) => Effect.Effect<Option.Option<AnySpec>, StoreUnavailable>
}

/**
 * The spec catalog tag.
 *
 * @internal
 */
export class SpecCatalog extends Context.Tag("assay/cluster/SpecCatalog")<SpecCatalog, SpecCatalogService>() {}

/**
 * A catalog over specs in memory.
 *
 * @internal
 */
export const catalogFromSpecs = (specs: Iterable<AnySpec>): SpecCatalogService => {
  const byId = new Map<string, AnySpec>()
  for (const s of specs) byId.set(s.pipelineId, s)
  return { lookup: (id) => Effect.succeed(Option.fromNullable(byId.get(id))) }
}

/**
 * A catalog over a stream of specs, read whole on the first lookup (memory: one spec per
 * pipeline of the experiment). A source failure fails that lookup (and the next ones retry).
 *
 * @internal
 */
export const catalogFromStream = <E, R>(
  specs: Stream.Stream<AnySpec, E, R>,
  describe: (e: E) => string
): Effect.Effect<SpecCatalogService, never, R> =>
  Effect.map(Effect.context<R>(), (context) => {
    let loaded: Map<string, AnySpec> | undefined
    const load = Stream.runFold(specs, new Map<string, AnySpec>(), (m, s) => m.set(s.pipelineId, s)).pipe(
      Effect.mapError((e) => new StoreUnavailable({ message: `cannot read the experiment's pipelines: ${describe(e)}` })),
      Effect.provide(context)
    )
    const sem = Effect.unsafeMakeSemaphore(1)
    return {
      lookup: (id) =>
        Effect.map(
          sem.withPermits(1)(Effect.suspend(() =>
            loaded !== undefined ? Effect.succeed(loaded) : Effect.tap(load, (m) => Effect.sync(() => loaded = m))
          )),
          (m) => Option.fromNullable(m.get(id))
        )
    }
  })

/**
 * A catalog over a stream of specs (as {@link catalogFromStream}) that can grow while the
 * runner runs: a lookup that misses asks `reload` whether the source changed since it was
 * read (a study's confirmation trials recorded on the cluster after the runner started: one
 * small read per miss); `Option.some(stream)` is read whole in place of the catalog, and the
 * lookup is answered from it; `Option.none()` answers the miss as one. Lookups wait for a
 * reload under way (one at a time).
 *
 * @param specs the source read on the first lookup
 * @param describe words a source failure (a `StoreUnavailable` of the lookup)
 * @param reload the newer source, when there is one
 * @internal
 */
export const catalogFromStreamReloading = <E, R>(
  specs: Stream.Stream<AnySpec, E, R>,
  describe: (e: E) => string,
  reload: Effect.Effect<Option.Option<Stream.Stream<AnySpec, E, R>>, StoreUnavailable, R>
): Effect.Effect<SpecCatalogService, never, R> =>
  Effect.map(Effect.context<R>(), (context) => {
    let loaded: Map<string, AnySpec> | undefined
    const read = (source: Stream.Stream<AnySpec, E, R>) =>
      Stream.runFold(source, new Map<string, AnySpec>(), (m, s) => m.set(s.pipelineId, s)).pipe(
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot read the experiment's pipelines: ${describe(e)}` })),
        Effect.tap((m) => Effect.sync(() => loaded = m)),
        Effect.provide(context)
      )
    const sem = Effect.unsafeMakeSemaphore(1)
    return {
      lookup: (id) =>
        sem.withPermits(1)(Effect.gen(function*() {
          const m = loaded ?? (yield* read(specs))
          const found = m.get(id)
          if (found !== undefined) return Option.some(found)
          const newer = yield* Effect.provide(reload, context)
          if (Option.isNone(newer)) return Option.none()
          return Option.fromNullable((yield* read(newer.value)).get(id))
        }))
    }
  })

/**
 * Options of {@link workflowLayer}: the worker slots of this process (`concurrency`, attempts
 * at once), the L5 budget (`infraRetry`, default `task.ts`'s `defaultInfraRetry`), how
 * often the pools' resources are written to the store (`resourcesEvery`, default 5 s; also
 * when the process stops), and the task claims' TTL and heartbeat (`claimTtl`, `claimHeartbeat`;
 * default the cluster's `shardLockExpiration` and `shardLockRefreshInterval` when a
 * `ShardingConfig` is in context, else 35 s and 10 s: a claim not renewed for as long as a shard
 * lock is presumed dead, like the lock); the experiment's price table (`pricing`, how the
 * attempts' token usage is priced, as the embedded engine prices it) and its call cache
 * settings (`cache`, the resolved `run.cache`: `CallCache.resolveRunCache`; default off, tasks
 * declared `cache: true` still cached). The cache itself is the `CallCache` in context, else
 * the store's own (`Store.callCache`), else one in memory for this process.
 *
 * @internal
 */
export interface WorkflowLayerOptions {
  readonly pricing?: Pricing.PriceTable | undefined
  readonly cache?: CallCache.RunCache | undefined
  readonly concurrency?: number | undefined
  readonly infraRetry?: TaskEnv["infraRetry"] | undefined
  readonly resourcesEvery?: Duration.DurationInput | undefined
  readonly claimTtl?: Duration.DurationInput | undefined
  readonly claimHeartbeat?: Duration.DurationInput | undefined
  /**
   * Window claims (issue 17, step 1; default off): a window's activity claims its window's
   * pipelines all at once (`windowClaims.ts`, a row per pipeline, so an execution runs a
   * pipeline only while it holds it, whatever window it is grouped in; TTL `claimTtl`, all of
   * the process's window claims renewed every
   * `claimHeartbeat` in one statement), reads its pipelines' rows and last checkpoints in one
   * statement, and runs their tasks without a task claim, a fence statement or an input read,
   * checking the window's local deadline in memory before each call (`window.ts`). Needs a
   * Postgres `SqlClient` in context and the pipeline claim table (`assay migrate`); without a
   * Postgres client it is ignored.
   */
  readonly windowClaims?: boolean | undefined
  /**
   * Block leases (issue 17, steps 2 and 3; default off; needs `windowClaims`): each global
   * pool resource's slot rows are claimed by this process as a block at the first acquire of
   * its pool, renewed with the window claims in their one statement per heartbeat, and handed
   * to the window's tasks in memory (no slot statement per task); a slot goes back to the
   * block when its task's call completes (before the checkpoint's commit). At each renewal the block is resized to
   * this process's demand-proportional share of the capacity (its leases in use + waiters
   * against every live runner's). `expectedRunners`, optional, only sets the first block's
   * size (`⌊capacity ÷ expectedRunners⌋`) before the demands are known. A resource whose block
   * is empty is served by a slot claim per task. Needs the global pools (`PgPools`) in the
   * cluster's database (otherwise ignored, with a warning) and their demand table (`assay
   * migrate`).
   */
  readonly blockLeases?: { readonly expectedRunners?: number | undefined } | undefined
  /**
   * The process's call gate (`task.ts`'s `makeCallGate`): once it is closed (the runner told to
   * stop), no task of this process starts an attempt or a call; a task granted a lease gives it
   * back at once. Default: a gate of the layer's own, never closed.
   */
  readonly callGate?: CallGate | undefined
  /**
   * How often the cancel marks of the runs this process has task executions of in flight are
   * read (`cancelMarks.ts`: the runs' marks and their pipelines', a statement each); default the claims' heartbeat (`claimHeartbeat`, else the cluster's
   * `shardLockRefreshInterval`, else 10 s). The marks are the `CancelMarks` in context, else
   * rows of `assay_meta` on the Postgres `SqlClient` in context when the store lives in its
   * database; without either, a cancelled run's pipelines run to their end.
   */
  readonly cancelEvery?: Duration.DurationInput | undefined
}

/** The run this process worked for last (what its pool events and resource rows are filed under). */
const latestRun = (env: TaskEnv): RunId | undefined => {
  let last: RunId | undefined
  for (const runId of env.states.keys()) last = runId
  return last
}

/**
 * Writes this process's view of every pool resource to the store (spec with secrets masked,
 * health, stats), as the embedded engine does at every heartbeat, filed under `runId`: what
 * `report`, `watch` and `serve` show. Several runners write the same rows; the last write
 * stands (with global pools, `active` and the health come from the shared rows).
 */
const persistResources = (store: StoreService, pools: PoolsService, runId: RunId) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    for (const name of yield* pools.names) {
      const handle = yield* pools.get(name)
      const infos = new Map((yield* handle.resources).map((r) => [r.id, r]))
      const stats = yield* handle.stats()
      for (const snap of yield* handle.snapshot) {
        yield* store.putResource(Rows.resourceRow(name, snap, infos.get(snap.id), stats, runId, now))
      }
    }
    yield* store.flush
  }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record pool resources: ${e.message}`)))

/**
 * The spec of a pipeline this runner is asked to run, or why it cannot: the store the
 * submitter admitted it to is another than this runner's, the runner's experiment has no such
 * pipeline, or its definition differs from the submitted one.
 */
const runnable = (
  catalog: SpecCatalogService,
  ownStore: string | undefined,
  { pipelineId, specDigest, storeId }: { readonly pipelineId: string; readonly specDigest: string; readonly storeId?: string | undefined }
): Effect.Effect<AnySpec, StoreUnavailable | PipelineNotRunnable> =>
  Effect.gen(function*() {
    // the reply is this store's: a runner that writes another store than the submitter's
    // refuses the pipeline (it would run it into the wrong store)
    if (storeId !== undefined && ownStore !== undefined && storeId !== ownStore) {
      return yield* new PipelineNotRunnable({
        pipelineId,
        message: `pipeline ${pipelineId} was submitted to store ${storeId}, and this runner writes store ${ownStore}: ` +
          "start the runners with the submitter's store (--store, or the --database URL)"
      })
    }
    const found = yield* catalog.lookup(pipelineId)
    if (Option.isNone(found)) {
      return yield* new PipelineNotRunnable({
        pipelineId,
        // what to do is said once, by the submitter (`refusal.ts`)
        message: `pipeline ${pipelineId} is not among the pipelines this runner serves (its file, as it read it when it started)`
      })
    }
    const spec = found.value
    if (spec.specDigest !== specDigest) {
      return yield* new PipelineNotRunnable({
        pipelineId,
        message: `pipeline ${pipelineId}: the runner's definition (${spec.specDigest}) differs from the submitted one (${specDigest})`
      })
    }
    return spec
  })

/**
 * Runs one pipeline's tasks in order inside a window's activity, each through `runTask` (the
 * same execution a pipeline workflow's per-task activity runs), to its verdict. One task
 * claim for the whole pipeline: claimed (with the L1 read) at its first task to run, then
 * carried from task to task, each task's fence moving it on (`task.ts`), so that a task
 * after the first costs no claim statement of its own.
 */
const runPipeline = (env: TaskEnv, spec: AnySpec): Effect.Effect<"succeeded" | "failed" | "gone" | "interrupted", StoreUnavailable> =>
  Effect.gen(function*() {
    // a pipeline that declares control runs whole under one claim (`controlled.ts`)
    if (spec.template.control !== undefined) return yield* runControlledClaimed(env, spec)
    const n = (spec.template.tasks as ReadonlyArray<Task.Any>).length
    const claim = yield* newClaim
    for (let seq = 0; seq < n; seq++) {
      const verdict = yield* runTask(env, spec, seq, claim)
      if (verdict === "failed") return "failed" as const
      if (verdict === "gone") return "gone" as const
      if (verdict === "interrupted") return "interrupted" as const
    }
    return "succeeded" as const
  })

const windowBody = (
  env: TaskEnv,
  catalog: SpecCatalogService,
  ownStore: string | undefined,
  claimed: { readonly claims: WindowClaims.WindowClaims; readonly sql: SqlClient.SqlClient | undefined } | undefined
) =>
({ pipelineIds, specDigests, storeId }: {
  readonly pipelineIds: ReadonlyArray<string>
  readonly specDigests: ReadonlyArray<string>
  readonly storeId?: string | undefined
}) =>
  Effect.gen(function*() {
    // every pipeline of the window is checked before any runs: a runner that cannot run one
    // of them (another experiment, store or definition) refuses the window
    const specs = yield* Effect.forEach(
      pipelineIds,
      (pipelineId, i) => runnable(catalog, ownStore, { pipelineId, specDigest: specDigests[i] ?? "", storeId })
    )
    const activity = Activity.make({
      name: "window",
      success: WindowOutcome,
      error: StoreUnavailable,
      execute: Effect.map(
        claimed === undefined
          ? Effect.forEach(specs, (spec) => runPipeline(env, spec), { concurrency: "unbounded" })
          : runWindow(env, claimed.claims, claimed.sql, windowKey({ pipelineIds, storeId }), specs, storeId),
        (verdicts) => ({ verdicts })
      )
    })
    // L5 for the engine's own calls (see `body`)
    return yield* Infra.ridingOutTyped(activity)
  })

const body = (env: TaskEnv, catalog: SpecCatalogService, ownStore: string | undefined) =>
({ pipelineId, specDigest, storeId }: { readonly pipelineId: string; readonly specDigest: string; readonly storeId?: string | undefined }) =>
  Effect.gen(function*() {
    const spec = yield* runnable(catalog, ownStore, { pipelineId, specDigest, storeId })
    const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
    for (let seq = 0; seq < tasks.length; seq++) {
      const activity = Activity.make({
        name: `task/${seq}/${tasks[seq]!.name}`,
        success: TaskVerdictSchema,
        error: StoreUnavailable,
        execute: runTask(env, spec, seq)
      })
      // L5 for the engine's own calls: sending the activity's request (and resetting it)
      // goes through the cluster's SQL storage, and @effect/cluster 0.60 dies on a
      // PersistenceError there (`ClusterWorkflowEngine.activityExecute`: `Effect.orDie`); a
      // workflow dying that way completes with the defect (`Workflow.CaptureDefects`), i.e. the
      // pipeline ends on an infrastructure error. A statement of that storage cancelled by
      // the driver's best-effort cancel of another fiber's statement (`57014`) is ridden out
      // the same way, and a loss that outlasts the budget is a typed `StoreUnavailable`, never
      // a defect (`Infra.ridingOutTyped`). The request is keyed by the activity's name
      // and attempt, so sending it again once the database is back finds the same request
      // (its stored reply, or the execution in progress): never a second execution.
      const verdict = yield* Infra.ridingOutTyped(activity)
      if (verdict === "failed") return { verdict: "failed" as const }
      if (verdict === "gone") return { verdict: "gone" as const }
      if (verdict === "interrupted") return { verdict: "interrupted" as const }
    }
    return { verdict: "succeeded" as const }
  })

/**
 * Registers the pipeline workflow with the `WorkflowEngine` in context: what a runner process
 * hosts. While it lives, the pools' events go to the store's event log and their resources'
 * state (health, usage, stats) to its resource rows, filed under the run whose pipelines the
 * process ran last, as the embedded engine writes them. Its tasks run with the `Store`, the `Pools` and the `SpecCatalog` in context (and the
 * `Bus` when one is, else a fresh one); everything else the context holds when the layer is
 * built (e.g. a `ProcessRunner` and a `FileSystem` for the built-in tasks) reaches the tasks.
 * A Postgres `SqlClient` in context keeps the task claims (`inflight.ts`: one live execution of a
 * task across the cluster); the layer fails with a `StoreUnavailable` naming `assay migrate`
 * when their table is missing or from an older version.
 *
 * @internal
 */
export const workflowLayer = (
  options: WorkflowLayerOptions = {}
): Layer.Layer<never, StoreUnavailable, WorkflowEngine | Store | Pools | SpecCatalog> =>
  Layer.unwrapScoped(Effect.gen(function*() {
    const context = yield* Effect.context<never>()
    const bus = yield* Effect.flatMap(Effect.serviceOption(Bus), Option.match({ onNone: () => makeBus, onSome: Effect.succeed }))
    const store = yield* Store
    const pools = yield* Pools
    // the task claims live next to the cluster's tables, on its SQL client (when one is in context)
    const sql = yield* Effect.serviceOption(SqlClient.SqlClient)
    // a database never migrated fails here, clearly, instead of at every task start
    if (Option.isSome(sql)) yield* InFlight.requireTable(sql.value)
    const sharding = yield* Effect.serviceOption(ShardingConfig.ShardingConfig)
    const ownStore = store.storeId === undefined ? undefined : yield* store.storeId
    // the start-up checks below ride out a database that is briefly away as the tasks' writes
    // do (L5), then fail with its error: an unknown answer read as "no" would leave this runner
    // in another claim mode than the others (or refuse it with a wrong reason) for its life
    const startRetry = options.infraRetry ?? defaultInfraRetry()
    const claims = Option.isSome(sql)
      ? InFlight.make(sql.value, {
        ttl: options.claimTtl ?? Option.getOrUndefined(Option.map(sharding, (c) => c.shardLockExpiration)),
        heartbeat: options.claimHeartbeat ?? Option.getOrUndefined(Option.map(sharding, (c) => c.shardLockRefreshInterval))
      })
      : undefined
    const env = yield* makeTaskEnv({
      store,
      pools,
      bus,
      gate: options.callGate,
      concurrency: options.concurrency ?? 64,
      infraRetry: options.infraRetry,
      pricing: options.pricing,
      cache: {
        service: Option.getOrElse(yield* Effect.serviceOption(CallCache.CallCache), () => store.callCache ?? CallCache.makeMemory()),
        run: options.cache ?? CallCache.runCacheOff
      },
      claims,
      // the store in the claims' database: the checkpoint re-read after a lease joins the fence
      storeHere: claims !== undefined && ownStore !== undefined &&
        (yield* Effect.retry(claims.holdsStore(ownStore), startRetry))
    })
    // pool events go to the event log, filed under the run this process works for
    yield* pools.listen((event) => {
      const runId = latestRun(env)
      return store.emitEvent({
        kind: event.kind,
        pipelineId: null,
        runId: runId ?? null,
        data: { pool: event.pool, resourceId: event.resourceId, ...(event.data as object) },
        ts: event.ts
      }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record pool event: ${e.message}`)))
    })
    // the resources' state, every `resourcesEvery` and when the process stops
    const persist = Effect.suspend(() => {
      const runId = latestRun(env)
      return runId === undefined ? Effect.void : persistResources(store, pools, runId)
    })
    const every = Duration.decode(options.resourcesEvery ?? Duration.seconds(5))
    yield* Effect.addFinalizer(() => persist)
    yield* Effect.forkScoped(Effect.delay(Effect.repeat(persist, Schedule.spaced(every)), every))
    // the cancel marks of the runs this process serves, once per heartbeat (`cancelMarks.ts`)
    const marks = Option.isSome(yield* Effect.serviceOption(CancelMarks.CancelMarks)) || env.storeHere
      ? yield* CancelMarks.fromContext
      : undefined
    if (marks !== undefined) {
      let warned = false
      // (the runs with task executions in flight here now, at each read: a run with none has
      // nothing to stop here, and a long-lived runner does not read every run it ever served)
      const readMarks = Effect.suspend(() =>
        CancelMarks.refresh(marks, env.cancelled, env.inFlight.keys(), env.cancelledPipelines)
      ).pipe(
        Effect.catchAll((e) =>
          warned ? Effect.void : Effect.zipRight(
            Effect.sync(() => warned = true),
            Effect.logWarning(`could not read the runs' cancel marks (a cancel waits for the next read): ${e.message}`)
          )
        )
      )
      const markEvery = options.cancelEvery ?? options.claimHeartbeat ??
        Option.getOrElse(Option.map(sharding, (c) => c.shardLockRefreshInterval), () => Duration.seconds(10))
      yield* Effect.forkScoped(Effect.repeat(readMarks, Schedule.spaced(markEvery)))
    }
    const catalog = yield* SpecCatalog
    const run = body(env, catalog, ownStore)
    // window claims (step 1 of the design): one claim per window, renewed all at once
    // block leases (step 2): the global pools' blocks ride on the window claims' renewal
    const gate = PgPools.gateOf(pools)
    let rider: WindowClaims.Rider | undefined = undefined
    if (options.blockLeases !== undefined && options.windowClaims === true && Option.isSome(sql) && claims !== undefined) {
      if (gate === undefined || !(yield* Effect.retry(claims.checkSameDatabase(gate.sql), startRetry))) {
        yield* Effect.logWarning("block leases need the global pools in the cluster's database: a slot is claimed per task")
      } else {
        // the demand table (step 3) comes with `assay migrate` of this version
        const present = yield* PoolSql.demandTablePresent(gate.sql).pipe(
          Effect.mapError((e) =>
            new StoreUnavailable({ message: `cannot read whether the pools' demand table exists: ${e.message}`, cause: e })
          ),
          Effect.retry(startRetry)
        )
        if (!present) {
          return yield* new StoreUnavailable({
            message: "the pools' database has no `assay_pool_demand` table (block leases): run `assay migrate --database URL` " +
              "once before starting runners with block leases"
          })
        }
        yield* gate.enableBlocks(options.blockLeases.expectedRunners)
        rider = gate.blockRider
      }
    }
    const windowClaims = options.windowClaims === true && Option.isSome(sql)
      ? WindowClaims.make(sql.value, {
        rider,
        clock: env.clock,
        ttl: options.claimTtl ?? Option.getOrUndefined(Option.map(sharding, (c) => c.shardLockExpiration)),
        heartbeat: options.claimHeartbeat ?? Option.getOrUndefined(Option.map(sharding, (c) => c.shardLockRefreshInterval))
      })
      : undefined
    if (windowClaims !== undefined && Option.isSome(sql)) {
      yield* WindowClaims.requireTable(sql.value)
      // with blocks, at least as often as the pools renew their slots
      const every = rider === undefined || gate === undefined
        ? windowClaims.heartbeat
        : Duration.min(windowClaims.heartbeat, Duration.millis(gate.settings.renewEveryMs))
      yield* Effect.forkScoped(Effect.repeat(windowClaims.renewAll, Schedule.spaced(every)))
    }
    const runWindowed = windowBody(
      env,
      catalog,
      ownStore,
      windowClaims === undefined ? undefined : { claims: windowClaims, sql: env.storeHere ? Option.getOrUndefined(sql) : undefined }
    )
    // the submitter starts windows; pipeline workflows stay hosted for executions started
    // before windows (a re-submission joins them)
    return Layer.merge(
      PipelineWorkflow.toLayer((payload) => Effect.provide(run(payload), context)),
      WindowWorkflow.toLayer((payload) => Effect.provide(runWindowed(payload), context))
    )
  }))
