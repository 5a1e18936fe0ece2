/**
 * The runner: takes a (possibly endless) source of pipeline specs and runs them on fibers,
 * with bounded admission, a checkpoint after every task, retries decided by each task's
 * {@link RetryPolicy}, per-attempt timeouts and scoped leases, resume from the last durable
 * checkpoint, graceful stop (signals, `stop()`, stop conditions) and crash detection.
 *
 * Shape of a run:
 * - a **feeder** pulls specs in small batches, looks their stored rows up in one query per
 *   batch, decides skip / resume / restart / conflict, and admits each pipeline once an
 *   admission permit (`maxAdmitted`) is free: queued + running + waiting-to-retry pipelines
 *   never exceed it;
 * - each admitted pipeline runs on its own fiber; an **attempt** runs only while holding one
 *   of `concurrency` worker slots, so a pipeline waiting out a retry delay holds none;
 * - after each task, its artifact, task row, attempt and the pipeline cursor are committed
 *   together through the store's group commit; the next task starts only once that commit is
 *   durable, and a result is reported only after it;
 * - stopping admits nothing new, lets in-flight attempts run for `grace`, then interrupts
 *   them; their rows end `interrupted` and resume from their last checkpoint.
 *
 * The service (`Runner`, `make`, `layer`) starts runs; each run is a {@link RunHandle}
 * (`start` returns it in a `Scope`, the way `Command.start` returns a `Process`; `run` is
 * start + await). The code is in `internal/runner/`: the run loop (`run.ts`), admission
 * (`admit.ts`, performing the decisions of `admission.ts`: a data type and a pure `decide`),
 * one pipeline's fiber (`pipeline.ts`), the rows a run writes (`rows.ts`), the FIFO slot
 * gate (`slotGate.ts`), the attempt context (`attemptContext.ts`), the run state
 * (`state.ts`), the report (`report.ts`) and the stop signals (`signals.ts`). Each receives
 * an explicit environment record (`RunnerEnv`, `AdmitEnv`, `PipelineEnv`).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Option, type Scope, type Stream } from "effect"
import type { CodecRegistry } from "../domain/Codec.js"
import {
  ConfigError,
  MaxTotalExceeded as MaxTotalExceeded_,
  type PipelineIdentityConflict,
  type StoreUnavailable,
  TaskTimeout as TaskTimeout_,
  type WorkerCrashed
} from "../domain/Errors.js"
import type * as Pipeline from "../domain/Pipeline.js"
import type { AttemptRecord, PipelineRecord, RunStatus } from "../domain/Records.js"
import * as RunConfig from "../domain/RunConfig.js"
import type { Membership } from "../domain/Suite.js"
import type { AccountingFigures } from "../domain/TaskStore.js"
import type { MetricOptions } from "../domain/TaskContext.js"
import { Bus, make as makeBus } from "./Bus.js"
import { CallCache, makeMemory as makeMemoryCache } from "./CallCache.js"
import type { ExportError } from "./Export.js"
import * as internal from "./internal/runner/run.js"
import { Pools, type PoolStats } from "./Pool.js"
import type { PoolsService } from "./Pools.js"
import { type ReadError, Store, type StoreStats } from "./Store.js"
import type { PipelineId, RunId } from "../domain/Ids.js"

// ---------------------------------------------------------------------------------------------
// Errors and models
// ---------------------------------------------------------------------------------------------

/**
 * A task spent its `retry.maxTotal` (see `MaxTotalExceeded` in `domain/Errors.ts`, where it
 * is declared with assay's other errors; re-exported here).
 *
 * @since 0.2.0
 * @category errors
 */
export const MaxTotalExceeded = MaxTotalExceeded_

/**
 * See {@link MaxTotalExceeded}.
 *
 * @since 0.2.0
 * @category errors
 */
export type MaxTotalExceeded = MaxTotalExceeded_

/**
 * An attempt ran longer than its task's `timeout` and was interrupted; class `timeout` (see
 * `TaskTimeout` in `domain/Errors.ts`; re-exported here).
 *
 * @since 0.1.0
 * @category errors
 */
export const TaskTimeout = TaskTimeout_

/**
 * See {@link TaskTimeout}.
 *
 * @since 0.1.0
 * @category errors
 */
export type TaskTimeout = TaskTimeout_

/**
 * The failures a run can end with: the store became unusable, an explicit key's stored
 * definition differs, a checkpoint contradicts the definition, a worker crashed, or the
 * configuration is invalid.
 *
 * @since 0.1.0
 * @category models
 */
export type RunError = StoreUnavailable | PipelineIdentityConflict | WorkerCrashed | ConfigError

/**
 * A source of pipeline specs: an `Iterable`, an `AsyncIterable` or an Effect `Stream`.
 *
 * @since 0.1.0
 * @category models
 */
export type SpecSource<S extends Pipeline.PipelineSpec<any, any, any, any>, SE = never, SR = never> =
  | Iterable<S>
  | AsyncIterable<S>
  | Stream.Stream<S, SE, SR>

/**
 * Called after a pipeline's terminal state is durable, with its record and, on success, its
 * final artifact's decoded value (`Option.none()` otherwise). A failure is recorded as a
 * `monitor.callback_failed` event and never changes the pipeline's outcome.
 *
 * @since 0.1.0
 * @category models
 */
export type OnPipelineFinished = (
  record: PipelineRecord,
  output: Option.Option<unknown>
) => Effect.Effect<void, unknown>

/**
 * Options of one run: any {@link RunConfig.RunConfigInput} field, plus the finished-pipeline
 * callback and the codec registry used for checkpoints.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunOptions extends RunConfig.RunConfigInput {
  readonly onPipelineFinished?: OnPipelineFinished | undefined
  readonly registry?: CodecRegistry | undefined
  /** What a suite run (a study's trial window, meters and budgets) plugs into the run; see {@link RunHooks}. */
  readonly hooks?: RunHooks | undefined
}

/**
 * Hooks of one run, for the suite runtime's trial window (`Suite.SuiteRunOptions.window`): none
 * of them changes a task, and a run without hooks behaves exactly as before.
 *
 * - `memberPools(member, view)`: the pools a suite member's attempts see: given the member's
 *   aliased view (`Pools.aliased`), returns the view to use (e.g. one that meters its leases);
 *   called once per member per run;
 * - `memberMetric(member, name, value, pipelineId)`: told after a member's task stored a metric
 *   (`ctx.reportMetric`; `pipelineId` `null` for the run scope);
 * - `startGate(spec)`: asked when an admitted pipeline is about to run its first attempt of this
 *   run, holding the worker slot that attempt will use: `undefined` starts it; a reason (a short
 *   word such as `budget_exhausted`) skips it: the slot goes back, the pipeline's row returns
 *   to `pending` at its cursor (neither failed nor run: a later run or resume admits it again;
 *   a new pipeline's row is written then, in the same commit as the event) and a
 *   `pipeline.skipped` event names the reason. A pipeline the gate starts pays nothing more in
 *   the store: its admission rides in its first checkpoint as without a gate;
 * - `ended(spec)`: an admitted pipeline's fiber ended (any exit: terminal, interrupted, or
 *   skipped by `startGate`); `skipped(spec)`: a suite member's pipeline was not admitted
 *   (already succeeded, a duplicate, owned by another run: the runner's skip count);
 *   both synchronous, on the runner's path;
 * - `failureDecided(spec)`: a pipeline's failure is decided (its last attempt failed and will not
 *   be retried), told synchronously while that attempt still holds its worker slot, before its
 *   rows commit: a budget counted here (a suite member's `stopAfterFailures`, refused in
 *   `startGate`) starts no pipeline after it is reached (since 0.8.0);
 * - `cancelWhen(spec)`: when it returns an Effect, the pipeline is interrupted once that Effect
 *   completes (its row ends `interrupted`, resumable, like a stop of the run) and a
 *   `pipeline.cancelled` event records the reason it gives;
 * - `admitAsTheyCome` (since 0.10.0): admit each chunk of specs the source gives as it comes
 *   (a chunk longer than the admission batch is still split), instead of gathering small
 *   chunks into full batches: a source that waits for running pipelines to end before it
 *   gives more (a suite's trial window) must not have its last specs held back meanwhile;
 * - `admissionStopped()` (since 0.17.0): told synchronously, once, when the runner will read its
 *   source no further (a stop, a stop rule such as `stopAfterFailures`), before it tells the
 *   `ended` of the pipeline that stopped it: a source that starts work when it is pulled (a
 *   trial window starting its next member) starts nothing more, even in a pull already under
 *   way. The cluster submitter tells it (its stops act at admission); the embedded runner
 *   stops its feeder instead and need not;
 * - `closingStop()` (since 0.17.0): asked once when the run ends with no stop of its own (its
 *   source ended): a reason closes the run `interrupted` with that `stopReason` instead of
 *   `completed` (the source's owner ended it early: a study's drain stop left trials not
 *   started or unfinished); `undefined` closes it as before;
 * - `settledAttempts(spec, attempts)` (since 0.17.0): told by a runner that does not run the
 *   tasks itself (the cluster submitter), once per pipeline of the run that settled, with the
 *   attempts of it this run stored, before its `ended` (and `failureDecided`): what the
 *   embedded engine meters from the leases as they are taken (a study's budgets). The
 *   embedded runner never tells it (the leases are metered through `memberPools`);
 * - `stopCancels()` (since 0.17.0): asked at the run's first stop by a runner whose stop does
 *   not interrupt running pipelines by itself (the cluster submitter: its stops act at
 *   admission): `true` makes the stop a cancel, the running pipelines stopping at their next
 *   task boundary, `interrupted` and resumable, as the embedded runner's stop leaves them (a
 *   study's `running: cancel`). The embedded runner never asks it.
 * - `accounting(read)` (since 0.17.0): told once, when the run starts, by a runner that does
 *   not run the tasks itself (the cluster submitter), with a {@link RunAccountingReader} over
 *   this run's stored attempts: what a study without budgets reads its trials' calls, tokens
 *   and cost with, once per trial (the embedded runner never tells it: its leases are metered
 *   through `memberPools`).
 *
 * @since 0.6.0
 * @category models
 */
export interface RunHooks {
  readonly memberPools?: ((member: Membership, view: PoolsService) => PoolsService) | undefined
  readonly memberMetric?:
    | ((member: Membership, name: string, value: unknown, pipelineId: PipelineId | null) => Effect.Effect<void>)
    | undefined
  readonly startGate?: ((spec: Pipeline.PipelineSpec<any, any, any, any>) => Effect.Effect<string | undefined>) | undefined
  readonly ended?: ((spec: Pipeline.PipelineSpec<any, any, any, any>) => void) | undefined
  readonly skipped?: ((spec: Pipeline.PipelineSpec<any, any, any, any>) => void) | undefined
  readonly failureDecided?: ((spec: Pipeline.PipelineSpec<any, any, any, any>) => void) | undefined
  readonly admitAsTheyCome?: boolean | undefined
  readonly cancelWhen?:
    | ((spec: Pipeline.PipelineSpec<any, any, any, any>) => Effect.Effect<string> | undefined)
    | undefined
  readonly admissionStopped?: (() => void) | undefined
  readonly closingStop?: (() => string | undefined) | undefined
  readonly stopCancels?: (() => boolean) | undefined
  readonly settledAttempts?:
    | ((spec: Pipeline.PipelineSpec<any, any, any, any>, attempts: ReadonlyArray<AttemptRecord>) => Effect.Effect<void>)
    | undefined
  readonly accounting?: ((read: RunAccountingReader) => void) | undefined
}

/**
 * Reads the figures of the attempts that pipelines `pipelineIds` stored under one run, summed
 * over them (`calls`, `tokensIn`, `tokensOut`, `costUsd`, … as the store's accounting counts
 * them: `StoreService.pipelineAccounting`, one aggregate query); fails with `StoreUnavailable`
 * when the store cannot be read. What {@link RunHooks} `accounting` gives.
 *
 * @since 0.17.0
 * @category models
 */
export type RunAccountingReader = (pipelineIds: ReadonlyArray<PipelineId>) => Effect.Effect<AccountingFigures, StoreUnavailable>

/**
 * Live figures of a run, safe to read mid-run (`runId` is `null` only from a runner that
 * has not started a run yet).
 *
 * - `inFlight`: attempts running now (holding a worker slot);
 * - `delayed`: pipelines parked in a retry delay (holding no worker);
 * - `admitted`: admitted and not yet finished (≤ `maxAdmitted`);
 * - `counters`: admitted / succeeded / failed / interrupted / skipped / retries / leaked
 *   leases since the run started.
 *
 * @since 0.1.0
 * @category models
 */
export interface LiveStats {
  readonly runId: RunId | null
  readonly stopping: boolean
  readonly inFlight: number
  readonly delayed: number
  readonly admitted: number
  readonly maxAdmitted: number
  readonly concurrency: number
  readonly counters: {
    readonly admitted: number
    readonly succeeded: number
    readonly failed: number
    readonly interrupted: number
    readonly skipped: number
    readonly retries: number
    readonly leasesLeaked: number
    readonly repairFailures: number
    /** Control transitions (handoffs) committed by pipelines that declare `control`. */
    readonly handoffs: number
  }
  readonly peakInFlight: number
  readonly peakAdmitted: number
  /** Per pool: occupancy, health counts and wait percentiles (see `PoolStats`). */
  readonly pools: Readonly<Record<string, PoolStats>>
}

/**
 * A run's call cache that could not be used for some of its calls (see {@link RunReport}'s
 * `callCache`): where it is (`location`: the shared cache database's path, the store's file,
 * or `:memory:`), how many lookups failed (those calls were made without the cache) and how
 * many writes failed (those answers were not kept: the calls are made again next run).
 *
 * @since 0.9.0
 * @category models
 */
export interface RunCacheTrouble {
  readonly location: string
  readonly lookupFailures: number
  readonly writeFailures: number
}

/**
 * What `run` returns.
 *
 * - `status`: `completed` (the source was exhausted and every admitted pipeline finished) or
 *   `interrupted` (stopped early; `stopReason` says why);
 * - `durationMs`: wall time of the run (from `Clock`);
 * - `stats`: the store's figures for this run (pipelines by state, tasks, attempts, retries,
 *   latency percentiles, and `accounting`: model calls, cache hits, tokens in and out, cost in
 *   USD, estimated and unpriced attempts, when the store keeps them; see `StoreStats`);
 * - `callCache`: present when the run's call cache could not be used for some calls (a
 *   damaged or unreadable cache file): its `location` (a file path, or `:memory:`),
 *   `lookupFailures` (calls it could not serve: they were made without it) and `writeFailures`
 *   (answers it could not store: those calls are made again next run); `summary()` says so;
 * - `skipped`: pipelines not run because they had already succeeded or belong to another
 *   live run; `repairFailures`: pipelines whose torn terminal state could not be repaired;
 *   `leasesLeaked`: leases that had to be reclaimed; `handoffsTotal`: control transitions
 *   (`Handoff` directives: to, end, rewind, retryAll) this run committed; `handoffsBudgeted`:
 *   of those, the ones that spent a unit of their pipeline's `maxHandoffs` budget (all but
 *   `end`), the figure to compare with the budget (summed over the run's pipelines);
 * - `heldByOtherRuns`: of `skipped`, the pipelines left to another run that still looks alive
 *   (marked running, heartbeat younger than `staleAfter`), per run id. On a shared store
 *   (Postgres) that run may be working elsewhere, or be a process killed less than
 *   `staleAfter` ago: `summary()` then says how to take them over;
 * - `summary()`: a human report; `toJSON()`: the same facts as JSON (both derived from the
 *   fields above: the report is plain data and holds no service);
 * - `exportJsonl(path)`: writes this run's pipeline rows (each a `PipelineRecord` in its
 *   JSON encoding) as JSON lines through `Export.writeRows` (`-` is standard output; a file is
 *   written atomically, and a failure leaves neither a partial file nor a temp file) and
 *   returns the count. It reads the rows from the `Store` in the context (the store the run
 *   wrote). Fails with `ExportError` on file-system failures, or the store's read error.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunReport {
  readonly runId: RunId
  readonly status: Exclude<RunStatus, "running">
  readonly startedAt: number
  readonly durationMs: number
  readonly stats: StoreStats
  readonly skipped: number
  readonly repairFailures: number
  readonly leasesLeaked: number
  readonly retries: number
  readonly handoffsTotal: number
  readonly handoffsBudgeted: number
  readonly stopReason: string | null
  readonly heldByOtherRuns: ReadonlyArray<{ readonly runId: RunId; readonly pipelines: number }>
  readonly callCache?: RunCacheTrouble | undefined
  summary(): string
  toJSON(): Record<string, unknown>
  exportJsonl(path: string): Effect.Effect<number, ReadError | ExportError, Store>
}

/**
 * Options of {@link RunnerService.reportMetric}: label, display and the scope: one pipeline
 * (`pipelineId`), one suite member (`experiment`: the member's id; stored as the run-scope
 * metric `experiment:ID:NAME`, see `Suite.memberMetricName`), else (both absent) the run.
 * Giving both fails with `ConfigError`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReportMetricOptions extends MetricOptions {
  readonly pipelineId?: PipelineId | null | undefined
  readonly experiment?: string | undefined
}

/**
 * One run, started by {@link RunnerService.start}: the run goes on in the background of the
 * scope it was started in (closing that scope interrupts it; its pipelines end `interrupted`,
 * resumable, and its record is closed).
 *
 * - `runId`: the run's id (known at once);
 * - `stats`: its live figures;
 * - `stop(reason = "user")`: a graceful stop (nothing new admitted, in-flight attempts get
 *   `grace`, then are interrupted); a second call stops at once; no effect once it ended;
 * - `reportMetric(name, value, options)`: stores an application metric of this run (see
 *   {@link RunnerService.reportMetric});
 * - `await`: waits for the run's end and gives its {@link RunReport}; fails with
 *   {@link RunError} or the source's error `E`. It may be awaited more than once.
 *
 * @since 0.3.0
 * @category models
 */
export interface RunHandle<E = never> {
  readonly runId: RunId
  readonly stats: Effect.Effect<LiveStats>
  readonly stop: (reason?: string) => Effect.Effect<void>
  readonly reportMetric: (
    name: string,
    value: string | number | boolean,
    options?: ReportMetricOptions
  ) => Effect.Effect<void, StoreUnavailable | ConfigError>
  readonly await: Effect.Effect<RunReport, RunError | E>
}

/**
 * The runner service.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunnerService {
  /**
   * Starts a run of `source` in the current scope and returns its {@link RunHandle} once the
   * options are resolved (fails with `ConfigError` otherwise); the run itself goes on in a
   * fiber of the scope. A runner may run several runs at once.
   */
  readonly start: <S extends Pipeline.PipelineSpec<any, any, any, any>, SE = never, SR = never>(
    source: SpecSource<S, SE, SR>,
    overrides?: RunOptions
  ) => Effect.Effect<RunHandle<SE>, ConfigError, Scope.Scope | Exclude<SpecContext<S>, Scope.Scope> | SR>
  /**
   * Runs every spec of `source` to a terminal state (or until stopped) and returns the
   * report: `start` then `await`, in a scope of its own. The tasks' requirements `R` (minus
   * the per-attempt `Scope` the runner provides) surface in the result type, so a program
   * provides them with layers and a test swaps in a fake. Fails with {@link RunError};
   * source failures propagate as they are.
   */
  readonly run: <S extends Pipeline.PipelineSpec<any, any, any, any>, SE = never, SR = never>(
    source: SpecSource<S, SE, SR>,
    overrides?: RunOptions
  ) => Effect.Effect<RunReport, RunError | SE, Exclude<SpecContext<S>, Scope.Scope> | SR>
  /** Live figures of the run started last (running or finished); zeros before any run. */
  readonly stats: Effect.Effect<LiveStats>
  /**
   * Requests a graceful stop of every run of this runner still going: nothing new is
   * admitted, in-flight attempts get `grace` to finish, then they are interrupted (their
   * pipelines end `interrupted`, resumable). A second call stops at once.
   */
  readonly stop: (reason?: string) => Effect.Effect<void>
  /**
   * Reports the latest value of an application metric for the run started last (strings,
   * booleans, finite numbers), at run scope or for one pipeline. Written at once. Fails with
   * `ConfigError` before any run, or for a value of another type (a non-finite number is
   * dropped with a warning and a `metric.dropped` event).
   */
  readonly reportMetric: (
    name: string,
    value: string | number | boolean,
    options?: ReportMetricOptions
  ) => Effect.Effect<void, StoreUnavailable | ConfigError>
}

/**
 * The requirements of a spec's tasks.
 *
 * @since 0.1.0
 * @category models
 */
export type SpecContext<S> = S extends Pipeline.PipelineSpec<any, any, any, infer R> ? R : never

/**
 * The runner service tag.
 *
 * @since 0.1.0
 * @category tags
 */
export class Runner extends Context.Tag("assay/Runner")<Runner, RunnerService>() {}

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

const idleStats: LiveStats = {
  runId: null,
  stopping: false,
  inFlight: 0,
  delayed: 0,
  admitted: 0,
  maxAdmitted: 0,
  concurrency: 0,
  counters: {
    admitted: 0,
    succeeded: 0,
    failed: 0,
    interrupted: 0,
    skipped: 0,
    retries: 0,
    leasesLeaked: 0,
    repairFailures: 0,
    handoffs: 0
  },
  peakInFlight: 0,
  peakAdmitted: 0,
  pools: {}
}

/**
 * A run's options: the runner's base options with the run's overrides laid over them, field
 * by field. An override that is absent or `undefined` keeps the base's value (a caller that
 * forwards optional flags as `{ maxAdmitted: flag }` must not reset the layer's value to the
 * default).
 */
const withOverrides = (base: RunOptions, overrides: RunOptions | undefined): RunOptions => {
  if (overrides === undefined) return base
  const merged: Record<string, unknown> = { ...base }
  for (const [key, value] of Object.entries(overrides)) if (value !== undefined) merged[key] = value
  return merged as RunOptions
}

/**
 * Builds a runner with base options (each `start` / `run` may override them, field by field:
 * an override left `undefined` keeps the base's value). Needs the
 * `Store` and the `Pools` of the run (and uses the `Bus` in context, or a fresh one; the
 * `CallCache` in context, else the store's own, else one in memory: see {@link layer}). Fails
 * with `ConfigError` for invalid base options.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (base: RunOptions = {}): Effect.Effect<RunnerService, ConfigError, Store | Pools> =>
  Effect.gen(function*() {
    yield* RunConfig.resolve(base)
    const store = yield* Store
    const env: internal.RunnerEnv = {
      store,
      pools: yield* Pools,
      bus: yield* Effect.flatMap(Effect.serviceOption(Bus), Option.match({ onNone: () => makeBus, onSome: Effect.succeed })),
      claimed: new Map(),
      liveRuns: new Set(),
      signalTargets: new Set(),
      // the call cache in context, else the store's own (an SQLite store's file), else one in
      // memory for this runner's runs
      callCache: Option.getOrElse(yield* Effect.serviceOption(CallCache), () => store.callCache ?? makeMemoryCache())
    }
    // The runs still going (the target of `stop`) and the run started last (`stats`,
    // `reportMetric`): handles, not a shared mutable "current run".
    const going = new Set<RunHandle<unknown>>()
    let latest: Option.Option<RunHandle<unknown>> = Option.none()

    const start = <S extends AnySpec, SE = never, SR = never>(source: SpecSource<S, SE, SR>, overrides?: RunOptions) =>
      Effect.tap(internal.start(env, source, withOverrides(base, overrides)), (handle) =>
        Effect.zipRight(
          Effect.sync(() => {
            going.add(handle)
            latest = Option.some(handle)
          }),
          Effect.addFinalizer(() => Effect.sync(() => going.delete(handle)))
        ))

    const service: RunnerService = {
      start,
      run: <S extends AnySpec, SE = never, SR = never>(source: SpecSource<S, SE, SR>, overrides?: RunOptions) =>
        Effect.scoped(Effect.flatMap(start(source, overrides), (handle) => handle.await)),
      stats: Effect.suspend(() => Option.match(latest, { onNone: () => Effect.succeed(idleStats), onSome: (h) => h.stats })),
      stop: (reason = "user") => Effect.suspend(() => Effect.forEach(Array.from(going), (h) => h.stop(reason), { discard: true })),
      reportMetric: (name, value, options) =>
        Effect.suspend(() =>
          Option.match(latest, {
            onNone: () =>
              Effect.fail(
                new ConfigError({
                  message: "reportMetric: no run is active",
                  issues: [{ path: "reportMetric", message: "no run is active" }]
                })
              ),
            onSome: (h) => h.reportMetric(name, value, options)
          })
        )
    }
    return service
  })

/**
 * The runner as a layer, with base options. Fails with `ConfigError` for invalid options.
 *
 * **Which call cache its runs use** (when a run's `cache` option, or a task's `cache: true`,
 * turns the call cache on; see `CallCache`), picked once when the layer is built, first
 * match wins:
 * 1. a `CallCache` service in context (`SqliteCallCache.layer`, `CallCache.layerMemory`, a
 *    plugin's), whatever the store;
 * 2. else the store's own cache (`Store.callCache`): a runner over an SQLite store opened for
 *    writing keeps cached outputs in the `call_cache` table of that store's file, through the
 *    store's connection, and one over a Postgres store in its database's `assay_call_cache`
 *    table, so they survive the process and a resume (or another runner on the database)
 *    reads them;
 * 3. else (a memory, read-only or plugin store) a cache in memory, shared by this runner's
 *    runs and lost with it.
 *
 * To share one cache file between experiments, provide `SqliteCallCache.layer({ filename,
 * shared: true })` (what `--cache-db` and `run.cache.db` do in the CLI).
 *
 * @param base - the runner's base options (each `start` / `run` may override them)
 * @returns a layer of the `Runner`, needing the `Store` and the `Pools` (and the `Bus` and a
 *   `CallCache` when in context)
 * @since 0.1.0
 * @category layers
 */
export const layer = (base: RunOptions = {}): Layer.Layer<Runner, ConfigError, Store | Pools> =>
  Layer.effect(Runner, make(base))

/**
 * Runs `source` with the `Runner` service in context (see {@link RunnerService.run}).
 *
 * @since 0.1.0
 * @category accessors
 */
export const run = <S extends AnySpec, SE = never, SR = never>(
  source: SpecSource<S, SE, SR>,
  overrides?: RunOptions
): Effect.Effect<RunReport, RunError | SE, Runner | Exclude<SpecContext<S>, Scope.Scope> | SR> =>
  Effect.flatMap(Runner, (r) => r.run(source, overrides))

/**
 * Starts a run of `source` with the `Runner` service in context and returns its handle (see
 * {@link RunnerService.start}).
 *
 * @since 0.3.0
 * @category accessors
 */
export const start = <S extends AnySpec, SE = never, SR = never>(
  source: SpecSource<S, SE, SR>,
  overrides?: RunOptions
): Effect.Effect<RunHandle<SE>, ConfigError, Runner | Scope.Scope | Exclude<SpecContext<S>, Scope.Scope> | SR> =>
  Effect.flatMap(Runner, (r) => r.start(source, overrides))
