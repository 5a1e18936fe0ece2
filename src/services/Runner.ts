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
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type { PlatformError } from "@effect/platform/Error"
import {
  Cause,
  Clock,
  Context,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  Fiber,
  FiberSet,
  Layer,
  Option,
  Predicate,
  Random,
  Schedule,
  Schema,
  Scope,
  Stream
} from "effect"
import { CodecRegistry, utf8 } from "../domain/Codec.js"
import {
  ConfigError,
  CorruptCheckpoint,
  classify,
  classifyCause,
  errorTypeOf,
  humanDuration,
  LeaseLeakError,
  messageOf,
  PipelineIdentityConflict,
  StoreUnavailable,
  WorkerCrashed
} from "../domain/Errors.js"
import { canonicalJson, digest } from "../domain/Json.js"
import { maskSecrets } from "../domain/Resource.js"
import type { AcquireOptions, Lease } from "../domain/Lease.js"
import type * as Pipeline from "../domain/Pipeline.js"
import {
  type AttemptOutcome,
  PipelineRecord,
  type PipelineState,
  type RunStatus,
} from "../domain/Records.js"
import * as RetryPolicy from "../domain/RetryPolicy.js"
import * as RunConfig from "../domain/RunConfig.js"
import type * as Task from "../domain/Task.js"
import type { MetricDisplay, MetricOptions, TaskContext } from "../domain/TaskContext.js"
import * as Signals from "./Signals.js"
import { Bus, type BusService, make as makeBus } from "./Bus.js"
import { type Holder, Pools, type PoolStats } from "./Pool.js"
import {
  type NewArtifact,
  type NewAttempt,
  type NewEvent,
  type PipelineFields,
  Store,
  type StoreService,
  type StoreStats
} from "./Store.js"

// ---------------------------------------------------------------------------------------------
// Errors and models
// ---------------------------------------------------------------------------------------------

/**
 * A task spent its `retry.maxTotal`: the attempt running (or waiting for a lease) when the
 * budget ran out was interrupted. The budget counts from the task's first attempt and covers
 * attempts, retry delays and lease waits. `waitingFor` says what held the pool, when
 * something did (throttled keys, open breakers). Class `timeout`; never retried (its
 * decision is `total_budget`).
 *
 * @since 0.2.0
 * @category errors
 */
export class MaxTotalExceeded extends Schema.TaggedError<MaxTotalExceeded>("assay/MaxTotalExceeded")("MaxTotalExceeded", {
  taskName: Schema.String,
  /** The budget, in milliseconds. */
  maxTotalMs: Schema.Number,
  waitingFor: Schema.optional(Schema.String),
  errorClass: Schema.Literal("timeout")
}) {
  override get message(): string {
    return `task "${this.taskName}" spent its retry.maxTotal of ${humanDuration(this.maxTotalMs)}${
      this.waitingFor === undefined ? "" : ` (${this.waitingFor})`
    }`
  }
}

/**
 * An attempt ran longer than its task's `timeout` and was interrupted. Class `timeout`.
 *
 * @since 0.1.0
 * @category errors
 */
export class TaskTimeout extends Schema.TaggedError<TaskTimeout>("assay/TaskTimeout")("TaskTimeout", {
  taskName: Schema.String,
  /** The per-attempt timeout, in milliseconds. */
  timeoutMs: Schema.Number,
  errorClass: Schema.Literal("timeout")
}) {
  override get message(): string {
    return `task "${this.taskName}" did not finish within ${this.timeoutMs} ms`
  }
}

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
}

/**
 * Live figures of the current run, safe to read mid-run.
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
  readonly runId: string | null
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
  }
  readonly peakInFlight: number
  readonly peakAdmitted: number
  /** Per pool: occupancy, health counts and wait percentiles (see `PoolStats`). */
  readonly pools: Readonly<Record<string, PoolStats>>
}

/**
 * What `run` returns.
 *
 * - `status`: `completed` (the source was exhausted and every admitted pipeline finished) or
 *   `interrupted` (stopped early; `stopReason` says why);
 * - `durationMs`: wall time of the run (from `Clock`);
 * - `stats`: the store's figures for this run (pipelines by state, tasks, attempts, retries,
 *   latency percentiles);
 * - `skipped`: pipelines not run because they had already succeeded or belong to another
 *   live run; `repairFailures`: pipelines whose torn terminal state could not be repaired;
 *   `leasesLeaked`: leases that had to be reclaimed;
 * - `summary()`: a human report; `toJSON()`: the same facts as JSON;
 * - `exportJsonl(path)`: writes this run's pipeline rows as JSON lines, returns the count.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunReport {
  readonly runId: string
  readonly status: Exclude<RunStatus, "running">
  readonly startedAt: number
  readonly durationMs: number
  readonly stats: StoreStats
  readonly skipped: number
  readonly repairFailures: number
  readonly leasesLeaked: number
  readonly retries: number
  readonly stopReason: string | null
  readonly summary: () => string
  readonly toJSON: () => Record<string, unknown>
  readonly exportJsonl: (path: string) => Effect.Effect<number, PlatformError | StoreUnavailable | ConfigError, FileSystem.FileSystem>
}

/**
 * Options of {@link RunnerService.reportMetric}: label, display and the pipeline scope
 * (`null`/absent: the run's scope).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReportMetricOptions extends MetricOptions {
  readonly pipelineId?: string | null | undefined
}

/**
 * The runner service.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunnerService {
  /**
   * Runs every spec of `source` to a terminal state (or until stopped) and returns the
   * report. The tasks' requirements `R` (minus the per-attempt `Scope` the runner provides)
   * surface in the result type, so a program provides them with layers and a test swaps in
   * a fake. Fails with {@link RunError}; source failures propagate as they are.
   */
  readonly run: <S extends Pipeline.PipelineSpec<any, any, any, any>, SE = never, SR = never>(
    source: SpecSource<S, SE, SR>,
    overrides?: RunOptions
  ) => Effect.Effect<RunReport, RunError | SE, Exclude<SpecContext<S>, Scope.Scope> | SR>
  /** Live figures of the current (or last) run. */
  readonly stats: Effect.Effect<LiveStats>
  /**
   * Requests a graceful stop: nothing new is admitted, in-flight attempts get `grace` to
   * finish, then they are interrupted (their pipelines end `interrupted`, resumable).
   * A second call stops at once.
   */
  readonly stop: (reason?: string) => Effect.Effect<void>
  /**
   * Reports the latest value of an application metric for the current run (strings,
   * booleans, finite numbers), at run scope or for one pipeline. Written at once.
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
 * The run-scoped metric in which the runner records how many pipelines it skipped because they
 * had already succeeded (written with each heartbeat and at the end of the run); monitors add
 * it to the run's done count.
 *
 * @since 0.1.0
 * @category constants
 */
export const SKIPPED_METRIC = "skipped"

/**
 * The runner service tag.
 *
 * @since 0.1.0
 * @category tags
 */
export class Runner extends Context.Tag("assay/Runner")<Runner, RunnerService>() {}

// ---------------------------------------------------------------------------------------------
// Internals
// ---------------------------------------------------------------------------------------------

interface Counters {
  admitted: number
  succeeded: number
  failed: number
  interrupted: number
  skipped: number
  retries: number
  leasesLeaked: number
  repairFailures: number
}

interface RunState {
  active: boolean
  runId: string | null
  config: RunConfig.RunConfig | null
  stopping: boolean
  stopReason: string | null
  inFlight: number
  delayed: number
  admitted: number
  peakInFlight: number
  peakAdmitted: number
  counters: Counters
  stopRequested: Deferred.Deferred<string> | null
  hardStop: Deferred.Deferred<void> | null
  crash: Cause.Cause<unknown> | null
}

const freshState = (): RunState => ({
  active: false,
  runId: null,
  config: null,
  stopping: false,
  stopReason: null,
  inFlight: 0,
  delayed: 0,
  admitted: 0,
  peakInFlight: 0,
  peakAdmitted: 0,
  counters: freshCounters(),
  stopRequested: null,
  hardStop: null,
  crash: null
})

const freshCounters = (): Counters => ({
  admitted: 0,
  succeeded: 0,
  failed: 0,
  interrupted: 0,
  skipped: 0,
  retries: 0,
  leasesLeaked: 0,
  repairFailures: 0
})

/** Where a pipeline starts: its cursor and the input of the task at that cursor. */
interface Start {
  readonly cursor: number
  readonly input: unknown
  readonly isNew: boolean
  /** An attempt in flight when the previous owner died, to record as abandoned. */
  readonly abandonedTask: boolean
}

type Decision =
  | { readonly _tag: "Skip"; readonly reason: string; readonly event?: NewEvent | undefined }
  | { readonly _tag: "Run"; readonly start: Start; readonly events: ReadonlyArray<NewEvent> }
  | { readonly _tag: "Repair"; readonly record: PipelineRecord }
  | { readonly _tag: "Corrupt"; readonly record: PipelineRecord }
  | { readonly _tag: "Conflict"; readonly error: PipelineIdentityConflict }

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

const encoder = new TextEncoder()
const noLeases: ReadonlyArray<string> = []

/** A 32-bit seed per (pipeline, seq, attempt): the same attempt always gets the same seed. */
const attemptSeed = (pipelineId: string, seq: number, attempt: number): number =>
  Number.parseInt(digest(`${pipelineId}:${seq}:${attempt}`).slice(0, 8), 16) >>> 0

const tagsOf = (tags: Task.JsonObject): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(tags)) out[k] = typeof v === "string" ? v : JSON.stringify(v)
  return out
}

const isMetricValue = (v: unknown): v is string | number | boolean =>
  typeof v === "string" || typeof v === "boolean" || (typeof v === "number" && Number.isFinite(v))

const errorFields = (error: unknown) => ({
  errorType: errorTypeOf(error),
  errorMessage: messageOf(error).slice(0, 4000),
  errorClass: classify(error) as string
})

const sourceToStream = <S, SE, SR>(source: SpecSource<any, SE, SR>): Stream.Stream<S, SE, SR> => {
  if (Stream.StreamTypeId in (source as object)) return source as Stream.Stream<S, SE, SR>
  if (Predicate.hasProperty(source, Symbol.asyncIterator)) {
    return Stream.fromAsyncIterable(source as AsyncIterable<S>, (e) => {
      throw e
    }) as unknown as Stream.Stream<S, SE, SR>
  }
  const iterator = (source as Iterable<S>)[Symbol.iterator]()
  return Stream.fromIteratorSucceed(iterator as IterableIterator<S>, 16) as unknown as Stream.Stream<S, SE, SR>
}

// ---------------------------------------------------------------------------------------------
// make
// ---------------------------------------------------------------------------------------------

/**
 * Builds a runner with base options (each `run` may override them). Needs the `Store` and
 * the `Pools` of the run.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (base: RunOptions = {}): Effect.Effect<RunnerService, ConfigError, Store | Pools> =>
  Effect.gen(function*() {
    yield* RunConfig.resolve(base)
    const store = yield* Store
    const pools = yield* Pools
    const bus = yield* Effect.flatMap(Effect.serviceOption(Bus), Option.match({ onNone: () => makeBus, onSome: Effect.succeed }))
    const state: RunState = freshState()

    const requestStop = (reason: string): void => {
      if (state.stopRequested === null) return
      if (state.stopping) {
        if (state.hardStop !== null) Deferred.unsafeDone(state.hardStop, Exit.void)
        return
      }
      state.stopping = true
      state.stopReason = reason
      Deferred.unsafeDone(state.stopRequested, Exit.succeed(reason))
    }

    const reportMetricFor = (
      runId: string | null,
      name: string,
      value: unknown,
      options: ReportMetricOptions | undefined
    ): Effect.Effect<void, StoreUnavailable | ConfigError> =>
      Effect.gen(function*() {
        if (runId === null) return yield* configError("reportMetric", "no run is active")
        if (typeof value === "number" && !Number.isFinite(value)) {
          // NaN or ±Infinity (a 0/0 accuracy, say): dropped, said so, and the task goes on
          const pipelineId = options?.pipelineId ?? null
          yield* Effect.logWarning(`metric "${name}" dropped: ${value} is not a finite number`).pipe(
            Effect.annotateLogs({ runId, pipelineId: pipelineId ?? "run" })
          )
          const ts = yield* Clock.currentTimeMillis
          return yield* store.emitEvent({
            kind: "metric.dropped",
            pipelineId,
            runId,
            data: { name, value: String(value), reason: "not a finite number" },
            ts
          })
        }
        if (!isMetricValue(value)) {
          return yield* configError("reportMetric", `value of "${name}" must be a string, boolean or finite number`)
        }
        const display: MetricDisplay = options?.display ?? (typeof value === "string" ? "text" : "number")
        const now = yield* Clock.currentTimeMillis
        yield* store.reportMetric({
          runId,
          pipelineId: options?.pipelineId ?? null,
          name,
          value,
          label: options?.label ?? null,
          display,
          updatedAt: now
        })
      })

    const service: RunnerService = {
      // The per-attempt Scope a task may require is provided by the runner itself.
      run: <S extends AnySpec, SE = never, SR = never>(source: SpecSource<S, SE, SR>, overrides?: RunOptions) =>
        runOnce(store, pools, bus, state, requestStop, reportMetricFor, { ...base, ...overrides }, source) as Effect.Effect<
          RunReport,
          RunError | SE,
          Exclude<SpecContext<S>, Scope.Scope> | SR
        >,
      stats: Effect.gen(function*() {
        const byPool: Record<string, PoolStats> = {}
        for (const name of yield* pools.names) {
          const stats = yield* Effect.option(pools.stats(name))
          if (Option.isSome(stats)) byPool[name] = stats.value
        }
        return liveStats(state, byPool)
      }),
      stop: (reason = "user") => Effect.sync(() => requestStop(reason)),
      reportMetric: (name, value, options) => reportMetricFor(state.runId, name, value, options)
    }
    return service
  })

/**
 * The runner as a layer, with base options. Fails with `ConfigError` for invalid options.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (base: RunOptions = {}): Layer.Layer<Runner, ConfigError, Store | Pools> =>
  Layer.effect(Runner, make(base))

/**
 * Runs `source` with the `Runner` service in context.
 *
 * @since 0.1.0
 * @category accessors
 */
export const run = <S extends AnySpec, SE = never, SR = never>(
  source: SpecSource<S, SE, SR>,
  overrides?: RunOptions
): Effect.Effect<RunReport, RunError | SE, Runner | Exclude<SpecContext<S>, Scope.Scope> | SR> =>
  Effect.flatMap(Runner, (r) => r.run(source, overrides))

const configError = (path: string, message: string): ConfigError =>
  new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

const liveStats = (state: RunState, pools: Readonly<Record<string, PoolStats>>): LiveStats => ({
  runId: state.runId,
  stopping: state.stopping,
  inFlight: state.inFlight,
  delayed: state.delayed,
  admitted: state.admitted,
  maxAdmitted: state.config?.maxAdmitted ?? 0,
  concurrency: state.config?.concurrency ?? 0,
  counters: { ...state.counters },
  peakInFlight: state.peakInFlight,
  peakAdmitted: state.peakAdmitted,
  pools
})

// ---------------------------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------------------------

const makeRunId = (now: number) =>
  Effect.map(Random.nextIntBetween(0, 0x7fffffff), (r) => {
    const stamp = new Date(now).toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z")
    return `${stamp}-${digest(`${now}:${r}`).slice(0, 8)}`
  })

/** What every attempt context of a run shares. */
interface AttemptShared {
  readonly runId: string
  readonly bus: BusService
  readonly store: StoreService
  readonly pools: Context.Tag.Service<Pools>
  readonly emit: (kind: string, pipelineId: string | null, data: unknown) => Effect.Effect<void, StoreUnavailable>
  readonly reportMetric: (
    name: string,
    value: unknown,
    options: ReportMetricOptions
  ) => Effect.Effect<void, StoreUnavailable | ConfigError>
}

/**
 * The {@link TaskContext} of one attempt. A class, so that an attempt allocates one object:
 * the functions a task may call are built on first access (getters returning closures, so
 * destructuring `const { acquire } = ctx` still works), and the lease bookkeeping only when a
 * lease is taken.
 */
class AttemptContext implements TaskContext {
  readonly runId: string
  readonly bus: BusService
  readonly store: StoreService
  readonly taskName: string
  readonly meta: Record<string, unknown> = {}
  /** Ids of every lease taken by the attempt (undefined until the first). */
  leaseIds: Array<string> | undefined = undefined
  /** Whether the escape hatch was used (its leases are reclaimed after the attempt). */
  rawLeases = false
  #seed: number | undefined = undefined
  #holder: Holder | undefined = undefined
  readonly #shared: AttemptShared
  readonly #task: Task.Any

  constructor(
    shared: AttemptShared,
    task: Task.Any,
    readonly pipelineId: string,
    readonly seq: number,
    readonly attempt: number
  ) {
    this.#shared = shared
    this.#task = task
    this.runId = shared.runId
    this.bus = shared.bus
    this.store = shared.store
    this.taskName = task.name
  }

  /** The pool owner key of this attempt (leases, reclaim). */
  get owner(): string {
    return `${this.pipelineId}:${this.seq}:${this.attempt}`
  }
  get seed(): number {
    return this.#seed ??= attemptSeed(this.pipelineId, this.seq, this.attempt)
  }
  #holderOf(): Holder {
    const task = this.#task
    return this.#holder ??= {
      taskName: task.name,
      pipelineId: this.pipelineId,
      defaultPool: task.options.resource ?? undefined,
      defaultAlgorithm: (task.options.algorithmInstance ?? task.options.algorithm ?? undefined) as Holder[
        "defaultAlgorithm"
      ],
      owner: this.owner,
      maxServerDelayMs: RetryPolicy.maxServerDelayMs(task.options.retry)
    }
  }
  #track(lease: Lease): void {
    ;(this.leaseIds ??= []).push(lease.id)
  }
  get publishResource(): TaskContext["publishResource"] {
    return (pool, resource) => this.#shared.pools.add(pool, resource)
  }
  get revokeResource(): TaskContext["revokeResource"] {
    return (pool, id, reason) => this.#shared.pools.revoke(pool, id, reason)
  }
  get subscribe(): TaskContext["subscribe"] {
    return (filter) => this.#shared.pools.subscribe(filter)
  }
  get acquire(): TaskContext["acquire"] {
    return <Client,>(opts?: AcquireOptions | string) =>
      // The pool tracks the attempt's unreleased leases under its owner key (held pools for
      // deadlock warnings, reclaim); the attempt only records the ids for its task row.
      Effect.map(this.#shared.pools.acquire<Client>(opts, this.#holderOf()), (lease) => {
        this.#track(lease)
        return lease
      })
  }
  get acquireLease(): TaskContext["acquireLease"] {
    return <Client,>(opts?: AcquireOptions | string) =>
      Effect.tap(
        Effect.suspend(() => {
          this.rawLeases = true
          return this.#shared.pools.acquireRaw<Client>(opts, this.#holderOf())
        }),
        (lease) => Effect.sync(() => this.#track(lease))
      )
  }
  get heldLeases(): TaskContext["heldLeases"] {
    return this.#shared.pools.heldBy(this.owner)
  }
  get reclaimNow(): TaskContext["reclaimNow"] {
    return Effect.asVoid(this.#shared.pools.releaseAll(this.owner))
  }
  get emit(): TaskContext["emit"] {
    return (kind, data) => this.#shared.emit(kind, this.pipelineId, data ?? {})
  }
  get reportMetric(): TaskContext["reportMetric"] {
    return (name, value, o) =>
      this.#shared.reportMetric(name, value, { ...o, pipelineId: o?.scope === "run" ? null : this.pipelineId })
  }
}

/**
 * What one pipeline fiber holds: a worker slot and/or an attempt counted in flight. Kept on a
 * mutable record so that the pipeline's own exit path (interruption included) can give back
 * exactly what it holds, whatever step it was interrupted in.
 */
interface SlotHold {
  holding: boolean
  inAttempt: boolean
}

/**
 * The worker slots: at most `n` attempts run at once. Taking a free slot is synchronous (no
 * semaphore machinery on the hot path); otherwise the fiber waits in FIFO order. A slot is
 * granted to a waiter by setting its holder's `holding` flag at grant time, so a fiber
 * interrupted between the grant and its next step still releases it from its exit path.
 * `interruptWaiters` ends every wait with an interruption (a stop: waiting pipelines are not
 * in flight and get no grace).
 */
/**
 * Outputs of at least this many encoded bytes (256 KiB) keep their worker slot until their
 * checkpoint commits (see the task loop).
 */
const BIG_OUTPUT_BYTES = 256 * 1024

const makeSlotGate = (n: number, isStopping: () => boolean) => {
  let free = n
  const waiters = new Set<(grant: boolean) => void>()
  const grantNext = (): boolean => {
    for (const w of waiters) {
      w(true)
      return true
    }
    return false
  }
  return {
    take: (holder: SlotHold): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (isStopping()) return Effect.interrupt
        if (free > 0 && waiters.size === 0) {
          free--
          holder.holding = true
          return Effect.void
        }
        return Effect.async<void>((resume) => {
          const w = (grant: boolean) => {
            waiters.delete(w)
            if (grant) holder.holding = true
            resume(grant ? Effect.void : Effect.interrupt)
          }
          waiters.add(w)
          // Interrupted while waiting: leave the queue (a grant that raced the interruption
          // is given back by the holder's exit path).
          return Effect.sync(() => void waiters.delete(w))
        })
      }),
    release: (holder: SlotHold): void => {
      if (!holder.holding) return
      holder.holding = false
      if (!grantNext()) free++
    },
    interruptWaiters: (): void => {
      for (const w of Array.from(waiters)) w(false)
    }
  }
}

const runOnce = <S extends AnySpec, SE, SR>(
  store: StoreService,
  pools: Context.Tag.Service<Pools>,
  bus: BusService,
  state: RunState,
  requestStop: (reason: string) => void,
  reportMetricFor: (
    runId: string | null,
    name: string,
    value: unknown,
    options: ReportMetricOptions | undefined
  ) => Effect.Effect<void, StoreUnavailable | ConfigError>,
  options: RunOptions,
  source: SpecSource<S, SE, SR>
): Effect.Effect<RunReport, RunError | SE, SpecContext<S> | SR> =>
  Effect.scoped(Effect.gen(function*() {
    if (state.active) return yield* configError("run", "this runner is already running a run")
    state.active = true
    yield* Effect.addFinalizer(() => Effect.sync(() => { state.active = false }))
    const config = yield* RunConfig.resolve(options)
    const registry = options.registry ?? CodecRegistry.default()
    const startedAt = yield* Clock.currentTimeMillis
    const runId = config.runId ?? (yield* makeRunId(startedAt))
    const stopRequested = yield* Deferred.make<string>()
    const hardStop = yield* Deferred.make<void>()
    Object.assign(state, freshState(), { active: true, runId, config, stopRequested, hardStop })

    const emit = (kind: string, pipelineId: string | null, data: unknown) =>
      Effect.flatMap(Clock.currentTimeMillis, (ts) => store.emitEvent({ kind, pipelineId, runId, data, ts }))

    // Claim what dead runs left behind before anything else.
    // With an exclusive writer (SqliteStore's OS lock) no other run can be alive: a run still
    // marked running died without closing, whatever its heartbeat says.
    // A plain run claims them too on such a store: the owner is provably dead, and skipping its
    // rows as "owned by another run" would report success with work left undone. Elsewhere
    // (heartbeats only) claiming a possibly live run's rows needs an explicit resume.
    const staleAfterMs = store.exclusiveWriter ? 0 : Duration.toMillis(config.staleAfter)
    const staleRuns = config.resume || store.exclusiveWriter
      ? yield* store.interruptStale(staleAfterMs, startedAt)
      : []
    yield* store.openRun({
      runId,
      label: config.label === "" ? null : config.label,
      config: RunConfig.toJson(config),
      startedAt,
      notes: config.notes === "" ? null : config.notes,
      meta: config.meta,
      // the run's write policy reaches the store's write path (run config, file or options)
      writes: {
        writeBehind: config.writeBehind,
        batchSize: config.writeBatch,
        flushIntervalMs: Duration.toMillis(config.flushInterval)
      }
    })
    // If this fiber is interrupted from outside (NodeRuntime.runMain on Ctrl-C, a timeout, a
    // parent scope closing) the steps below that close the run never run: close it here
    // instead. Finalizers run in reverse order, so this one runs after the pipeline fibers
    // (created later) have been interrupted and have marked their rows interrupted.
    let runClosed = false
    yield* Effect.addFinalizer(() =>
      runClosed
        ? Effect.void
        : Effect.gen(function*() {
          const endedAt = yield* Clock.currentTimeMillis
          const stopReason = state.stopReason ?? "interrupted"
          yield* store.finishRun(runId, { status: "interrupted", endedAt, stopReason })
          yield* emit("run.finished", null, { status: "interrupted", stopReason, counters: state.counters })
          yield* store.flush
        }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not close the interrupted run: ${e.message}`)))
    )
    yield* emit("run.started", null, { concurrency: config.concurrency, maxAdmitted: config.maxAdmitted })
    for (const r of staleRuns) yield* emit("run.stale_interrupted", null, { staleRunId: r.runId, heartbeatAt: r.heartbeatAt })

    // Pool events go to the event log.
    yield* pools.listen((event) =>
      store.emitEvent({
        kind: event.kind,
        pipelineId: null,
        runId,
        data: { pool: event.pool, resourceId: event.resourceId, ...(event.data as object) },
        ts: event.ts
      }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record pool event: ${e.message}`)))
    )

    // Pool resources (spec with secrets masked, health) go to the store at start, with every
    // heartbeat and at the end, so that report / watch / serve can show them.
    const persistResources = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      for (const name of yield* pools.names) {
        const handle = yield* pools.get(name)
        const infos = new Map((yield* handle.resources).map((r) => [r.id, r]))
        const stats = yield* handle.stats()
        for (const snap of yield* handle.snapshot) {
          const info = infos.get(snap.id)
          yield* store.putResource({
            pool: name,
            resourceId: snap.id,
            kind: snap.kind,
            spec: {
              id: snap.id,
              kind: snap.kind,
              capacity: snap.capacity,
              options: maskSecrets(info?.options ?? {}),
              tags: maskSecrets(info?.tags ?? {})
            },
            health: {
              state: snap.state,
              active: snap.active,
              capacity: snap.capacity,
              consecutiveFailures: snap.consecutiveFailures,
              latencyEmaMs: snap.latencyEmaMs ?? null,
              usage: snap.usage,
              cooldownUntil: snap.cooldownUntil ?? null,
              lastError: snap.lastError ?? null,
              throttledUntil: snap.throttledUntil ?? null,
              throttledTotal: snap.throttledTotal,
              breaker: snap.breaker,
              breakerUntil: snap.breakerUntil ?? null,
              poolWaitMsP95: stats.waitMsP95,
              poolWaiting: stats.waiting,
              runId
            },
            updatedAt: now
          })
        }
      }
      // Pipelines skipped because they were already done (resume) count toward the run's
      // progress: monitors read this run-scoped metric.
      if (state.counters.skipped > 0) {
        yield* reportMetricFor(runId, SKIPPED_METRIC, state.counters.skipped, {
          label: "Skipped (already done)",
          display: "number"
        }).pipe(Effect.catchTag("ConfigError", () => Effect.void))
      }
    }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record pool resources: ${e.message}`)))
    yield* persistResources

    // Heartbeat.
    yield* Effect.forkScoped(
      Effect.flatMap(Clock.currentTimeMillis, (now) => store.heartbeat(runId, now)).pipe(
        Effect.zipLeft(persistResources),
        Effect.catchAll((e) => Effect.logWarning(`heartbeat failed: ${e.message}`)),
        Effect.repeat(Schedule.spaced(config.heartbeat)),
        Effect.delay(config.heartbeat)
      )
    )
    if (config.stopAfter !== undefined) {
      const after = config.stopAfter
      yield* Effect.forkScoped(Effect.delay(Effect.sync(() => requestStop("stop_after")), after))
    }
    if (config.handleSignals) yield* installSignalHandlers(requestStop)

    // Admission slots: the feeder waits here when maxAdmitted pipelines are in; a stop
    // interrupts the feeder itself (its wait included).
    const admission = makeSlotGate(config.maxAdmitted, () => false)
    const slots = makeSlotGate(config.concurrency, () => state.stopping)
    // The clock of the run, read synchronously on the hot path (TestClock in tests).
    const clock = yield* Effect.clock
    const fibers = yield* FiberSet.make<void, never>()
    const runCaches = new Map<string, Option.Option<import("../domain/Records.js").RunRecord>>()
    // Pipelines admitted by this run and not finished (at most maxAdmitted): a repeat of one of
    // them must not start it a second time while its admission row may not be durable yet.
    const inFlight = new Map<string, AnySpec>()
    let conflict: PipelineIdentityConflict | null = null

    const crash = (cause: Cause.Cause<unknown>) =>
      Effect.sync(() => {
        if (state.crash === null) state.crash = cause
        requestStop("worker_crashed")
        Deferred.unsafeDone(hardStop, Exit.void)
      })

    // ---- per pipeline -------------------------------------------------------------------

    const finishCallback = (record: PipelineRecord, output: Option.Option<unknown>) =>
      options.onPipelineFinished === undefined
        ? Effect.void
        : Effect.suspend(() => options.onPipelineFinished!(record, output)).pipe(
          Effect.catchAllCause((cause) =>
            emit("monitor.callback_failed", record.pipelineId, { error: Cause.pretty(cause).slice(0, 2000) })
          )
        )

    const readRecord = (pipelineId: string) =>
      Effect.flatMap(store.getPipeline(pipelineId), (o) =>
        Option.match(o, {
          onNone: () => Effect.fail(new StoreUnavailable({ message: `pipeline ${pipelineId} vanished from the store` })),
          onSome: Effect.succeed
        }))

    const onTerminal = (pipelineId: string, finalValue: Option.Option<unknown>) =>
      Effect.suspend(() => {
        if (config.stopAfterFailures !== undefined && state.counters.failed >= config.stopAfterFailures) {
          requestStop("stop_after_failures")
        }
        // The callback gets the durable row, read back from the store.
        return options.onPipelineFinished === undefined
          ? Effect.void
          : Effect.flatMap(readRecord(pipelineId), (record) => finishCallback(record, finalValue))
      })

    // Fibers parked waiting for a worker slot or in a retry delay: a stop interrupts them at
    // once (they are not in flight), while attempts in flight get the grace period.
    const parked = new Set<Fiber.RuntimeFiber<unknown, unknown>>()
    const whileParked = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      Effect.withFiberRuntime<A, E, R>((fiber) => {
        if (state.stopping) return Effect.interrupt
        parked.add(fiber)
        return Effect.ensuring(self, Effect.sync(() => parked.delete(fiber)))
      })
    yield* Effect.forkScoped(
      Effect.flatMap(Deferred.await(stopRequested), () => {
        slots.interruptWaiters()
        return Effect.forEach(Array.from(parked), (fiber) => Fiber.interruptFork(fiber), { discard: true })
      })
    )

    const runPipeline = (spec: AnySpec, start: Start): Effect.Effect<void, StoreUnavailable> => {
      const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
      const nTasks = tasks.length
      const pipelineId = spec.pipelineId
      let cursor = start.cursor
      let currentTask: {
        seq: number
        taskRunId: string
        startedAt: number
        attempt: number
        committed: number
        /** The retryable failure a stop cut short (its retry not made), for the interrupted row. */
        stoppedAfter?: string
      } | null = null
      const holder: SlotHold = { holding: false, inAttempt: false }

      const markInterrupted = Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        state.counters.interrupted++
        const task = currentTask
        const stopped = `run stopped: ${state.stopReason ?? "interrupted"}`
        const message = task?.stoppedAfter === undefined ? stopped : `${stopped} (before retrying: ${task.stoppedAfter})`.slice(0, 4000)
        yield* store.checkpoint({
          pipelineId,
          task: task === null ? undefined : ({
            taskRunId: task.taskRunId,
            pipelineId,
            runId,
            seq: task.seq,
            taskName: tasks[task.seq]!.name,
            state: "interrupted",
            attemptsUsed: task.attempt,
            startedAt: task.startedAt,
            endedAt: now,
            durationMs: now - task.startedAt,
            errorType: "Interrupted",
            errorMessage: message,
            errorClass: "cancelled",
            leaseIds: []
          }),
          pipeline: {
            state: "interrupted",
            nTasksDone: cursor,
            runId,
            endedAt: now,
            updatedAt: now,
            // the current task's failed attempts already recorded (write-behind)
            attemptsDelta: task === null ? 0 : task.committed,
            error: {
              failedTask: task === null ? null : tasks[task.seq]!.name,
              errorType: "Interrupted",
              errorMessage: message,
              errorClass: "cancelled"
            }
          },
          events: [{ kind: "pipeline.interrupted", pipelineId, runId, data: { cursor, reason: state.stopReason }, ts: now }]
        })
      })

      const body = Effect.gen(function*() {
        let input = start.input
        const now0 = yield* Clock.currentTimeMillis
        if (start.abandonedTask) {
          yield* store.recordAttempt({
            pipelineId,
            runId,
            taskRunId: `${pipelineId}:${cursor}:abandoned:${now0}`,
            taskName: tasks[cursor]?.name ?? "?",
            seq: cursor,
            attemptNo: 0,
            outcome: "cancelled",
            errorClass: "cancelled",
            errorType: "Abandoned",
            errorMessage: "attempt abandoned: its run died (no heartbeat) while it was in flight",
            decision: null,
            leaseIds: [],
            startedAt: now0,
            endedAt: now0,
            durationMs: 0
          })
        }
        let finalValue: unknown = input
        while (cursor < nTasks) {
          if (state.stopping) return yield* Effect.interrupt
          const seq = cursor
          const task = tasks[seq]!
          const outcome = yield* runTask(spec, task, seq, input)
          if (outcome._tag === "Failed") {
            state.counters.failed++
            yield* onTerminal(pipelineId, Option.none())
            return
          }
          input = outcome.value
          finalValue = outcome.value
          cursor = seq + 1
        }
        state.counters.succeeded++
        yield* onTerminal(pipelineId, Option.some(finalValue))
      })

      // ---- one task: attempts until success or a declined retry -------------------------
      const runTask = (
        spec: AnySpec,
        task: Task.Any,
        seq: number,
        input: unknown
      ): Effect.Effect<{ _tag: "Ok"; value: unknown } | { _tag: "Failed" }, StoreUnavailable> =>
        Effect.gen(function*() {
          // The task row's start is when its first attempt actually started (not when the
          // pipeline began waiting for a worker slot).
          let taskStarted = clock.unsafeCurrentTimeMillis()
          const taskRunId = `${pipelineId}:${seq}:${runId}:${taskStarted}`
          currentTask = { seq, taskRunId, startedAt: taskStarted, attempt: 0, committed: 0 }
          let attempt = 0
          let attemptsCommitted = 0
          // Every lease the task used across its attempts, for the task row.
          const taskLeaseIds: Array<string> = []
          while (true) {
            attempt++
            currentTask.attempt = attempt
            // Wait for a worker slot (parked: a stop interrupts the wait), then run the attempt
            // holding it (not parked: a stop gives it the grace period).
            yield* slots.take(holder)
            const result = yield* runAttempt(spec, task, seq, attempt, input, holder, attempt === 1 ? undefined : taskStarted)
            // A big output keeps its worker slot until its checkpoint has committed: the outputs
            // waiting for the store are then bounded by `concurrency` (not by `maxAdmitted`),
            // which keeps a run's memory bounded by bytes (issue 19: 4 MB outputs at concurrency
            // 20 held 80 of them). Every exit gives the slot back (the fiber's `ensuring`).
            const encoded = result.exit._tag === "Success" ? registryFor(task).dump(result.exit.value) : undefined
            const holdSlot = encoded !== undefined && Either.isRight(encoded) && encoded.right.data.byteLength >= BIG_OUTPUT_BYTES
            if (!holdSlot) slots.release(holder)
            const ended = clock.unsafeCurrentTimeMillis()
            if (attempt === 1) {
              taskStarted = result.startedAt
              currentTask.startedAt = taskStarted
            }
            taskLeaseIds.push(...result.leaseIds)
            if (result.exit._tag === "Success" && encoded !== undefined) {
              const value = result.exit.value
              if (Either.isLeft(encoded)) {
                result.exit = Exit.fail(encoded.left)
              } else {
                const isLast = seq === nTasks - 1
                const enc = encoded.right
                const attemptRow: NewAttempt = {
                  pipelineId,
                  runId,
                  taskRunId,
                  taskName: task.name,
                  seq,
                  attemptNo: attempt,
                  outcome: "succeeded",
                  errorClass: null,
                  errorType: null,
                  errorMessage: null,
                  decision: RetryPolicy.succeeded(attempt),
                  leaseIds: result.leaseIds,
                  startedAt: result.startedAt,
                  endedAt: ended,
                  durationMs: ended - result.startedAt
                }
                // Earlier failed attempts went to the write-behind buffer: make them durable first,
                // so attempt ids keep the order the attempts ran in.
                if (attemptsCommitted > 0) yield* store.flush
                yield* Effect.uninterruptible(store.checkpoint({
                  pipelineId,
                  artifact: {
                    pipelineId,
                    runId,
                    seq,
                    taskName: task.name,
                    typeName: enc.typeName,
                    codec: enc.codec,
                    digest: digest(enc.data),
                    payload: enc.data,
                    isFinal: isLast,
                    createdAt: ended
                  },
                  task: ({
                    taskRunId,
                    pipelineId,
                    runId,
                    seq,
                    taskName: task.name,
                    state: "succeeded",
                    attemptsUsed: attempt,
                    startedAt: taskStarted,
                    endedAt: ended,
                    durationMs: ended - taskStarted,
                    errorType: null,
                    errorMessage: null,
                    errorClass: null,
                    leaseIds: taskLeaseIds
                  }),
                  pipeline: {
                    nTasksDone: seq + 1,
                    state: isLast ? "succeeded" : "running",
                    runId,
                    endedAt: isLast ? ended : null,
                    updatedAt: ended,
                    error: null,
                    attemptsDelta: attempt
                  },
                  attempts: [attemptRow]
                }))
                if (holdSlot) slots.release(holder)
                currentTask = null
                return { _tag: "Ok" as const, value }
              }
            }
            // Failure: classify, decide, persist the decision.
            const cause = (result.exit as Exit.Failure<unknown, unknown>).cause
            const error = Cause.isInterruptedOnly(cause)
              ? undefined
              : Option.getOrElse(Cause.failureOption(cause), () => Option.getOrUndefined(Cause.dieOption(cause)))
            const errorClass = error === undefined ? "cancelled" : classifyCause(cause)
            const elapsed = ended - taskStarted
            const decision: RetryPolicy.RetryDecision = error === undefined
              ? { retry: false, reason: "policy_declined" as const, delayMs: 0, errorClass, attempt }
              : Predicate.isTagged(error, "MaxTotalExceeded")
              ? { retry: false, reason: "total_budget" as const, delayMs: 0, errorClass, attempt }
              : yield* RetryPolicy.decide(task.options.retry, error, attempt, elapsed)
            const outcome: AttemptOutcome = error !== undefined && Predicate.isTagged(error, "TaskTimeout")
              ? "timeout"
              : error === undefined
              ? "cancelled"
              : "failed"
            const fields = error === undefined
              ? { errorType: "Interrupted", errorMessage: "interrupted", errorClass: "cancelled" }
              : errorFields(error)
            // a refused server delay says so first (the pool's own refusal already does)
            if (decision.reason === "server_delay" && decision.message !== undefined && !Predicate.isTagged(error, "ServerDelayRefused")) {
              fields.errorMessage = `${decision.message}: ${fields.errorMessage}`.slice(0, 4000)
            }
            const attemptRow: NewAttempt = {
              pipelineId,
              runId,
              taskRunId,
              taskName: task.name,
              seq,
              attemptNo: attempt,
              outcome,
              errorClass: fields.errorClass,
              errorType: fields.errorType,
              errorMessage: fields.errorMessage,
              decision,
              leaseIds: result.leaseIds,
              startedAt: result.startedAt,
              endedAt: ended,
              durationMs: ended - result.startedAt
            }
            if (decision.retry && !state.stopping) {
              yield* store.recordAttempt(attemptRow)
              attemptsCommitted++
              currentTask.committed = attemptsCommitted
              state.counters.retries++
              // Wait out the delay holding no worker; a stop ends the wait.
              state.delayed++
              yield* whileParked(Effect.sleep(Duration.millis(decision.delayMs))).pipe(
                Effect.ensuring(Effect.sync(() => state.delayed--))
              )
              continue
            }
            // A stop cut this task short: a failure the policy would have retried (or an attempt
            // cancelled by the stop itself) is not the task's verdict. The attempt is recorded
            // with the reason `stopped`, and the pipeline ends `interrupted` (resumable: resume
            // makes the next attempt), never `failed`.
            if (state.stopping && (decision.retry || error === undefined)) {
              yield* store.recordAttempt({
                ...attemptRow,
                decision: { ...decision, retry: false, reason: "stopped", delayMs: 0 }
              })
              attemptsCommitted++
              currentTask.committed = attemptsCommitted
              if (error !== undefined) currentTask.stoppedAfter = `${fields.errorClass}: ${fields.errorMessage}`
              return yield* Effect.interrupt
            }
            // Terminal failure of the task, hence of the pipeline.
            if (attemptsCommitted > 0) yield* store.flush
            yield* Effect.uninterruptible(store.checkpoint({
              pipelineId,
              task: ({
                taskRunId,
                pipelineId,
                runId,
                seq,
                taskName: task.name,
                state: "failed",
                attemptsUsed: attempt,
                startedAt: taskStarted,
                endedAt: ended,
                durationMs: ended - taskStarted,
                ...fields,
                leaseIds: taskLeaseIds
              }),
              pipeline: {
                state: "failed",
                runId,
                endedAt: ended,
                updatedAt: ended,
                error: { failedTask: task.name, ...fields },
                attemptsDelta: attempt
              },
              attempts: [attemptRow],
              events: [{
                kind: "pipeline.failed",
                pipelineId,
                runId,
                data: { task: task.name, seq, attempts: attempt, errorClass: fields.errorClass, reason: decision.reason },
                ts: ended
              }]
            }))
            currentTask = null
            return { _tag: "Failed" as const }
          }
        })

      return body.pipe(
        Effect.onInterrupt(() =>
          Effect.uninterruptible(markInterrupted).pipe(
            Effect.catchAll((e) => Effect.logError(`could not mark pipeline ${pipelineId} interrupted: ${e.message}`))
          )
        ),
        // Whatever step the fiber ended in, give back the slot and the in-flight count it holds.
        Effect.ensuring(Effect.sync(() => {
          if (holder.inAttempt) {
            holder.inAttempt = false
            state.inFlight--
          }
          slots.release(holder)
        }))
      )
    }

    // Per-task codec registries (a task's output Schema decodes back to its class).
    const registries = new Map<Task.Any, CodecRegistry>()
    const registryFor = (task: Task.Any): CodecRegistry => {
      let r = registries.get(task)
      if (r === undefined) {
        r = task.outputSchema === undefined ? registry : registry.registerSchema(task.outputSchema)
        registries.set(task, r)
      }
      return r
    }

    // ---- one attempt ----------------------------------------------------------------------

    /** What holds a pool up now, in words: throttled keys and open breakers (or undefined). */
    const heldUp = (pool: string | null | undefined): Effect.Effect<string | undefined> =>
      pool === null || pool === undefined ? Effect.succeed(undefined) : pools.snapshot(pool).pipe(
        Effect.map((snap) => {
          const parts: Array<string> = []
          for (const r of snap) {
            if (r.throttledUntil !== undefined) parts.push(`${r.id} throttled until ${new Date(r.throttledUntil).toISOString()}`)
            else if (r.breakerUntil !== undefined) parts.push(`${r.id} breaker open until ${new Date(r.breakerUntil).toISOString()}`)
          }
          return parts.length === 0 ? undefined : `pool "${pool}": ${parts.join(", ")}`
        }),
        Effect.orElseSucceed(() => undefined)
      )

    const withinBudget = <A, E, R>(
      body: Effect.Effect<A, E, R>,
      task: Task.Any,
      maxTotalMs: number,
      leftMs: number
    ): Effect.Effect<A, E | MaxTotalExceeded, R> =>
      Effect.flatMap(
        Effect.timeoutTo(body, { duration: Duration.millis(leftMs), onSuccess: Option.some, onTimeout: Option.none }),
        (o) =>
          Option.isSome(o) ? Effect.succeed(o.value) : Effect.flatMap(heldUp(task.options.resource), (waitingFor) =>
            Effect.fail(
              new MaxTotalExceeded({
                taskName: task.name,
                maxTotalMs,
                errorClass: "timeout",
                ...(waitingFor === undefined ? {} : { waitingFor })
              })
            ))
      )
    const shared: AttemptShared = {
      runId,
      bus,
      store,
      pools,
      emit,
      reportMetric: (name, value, o) => reportMetricFor(runId, name, value, o)
    }
    interface AttemptResult {
      exit: Exit.Exit<unknown, unknown>
      readonly leaseIds: ReadonlyArray<string>
      readonly startedAt: number
    }

    const runAttempt = (
      spec: AnySpec,
      task: Task.Any,
      seq: number,
      attempt: number,
      input: unknown,
      slot: SlotHold,
      taskStartedAt: number | undefined
    ): Effect.Effect<AttemptResult> =>
      Effect.suspend(() => {
        if (state.stopping) return Effect.interrupt
        state.inFlight++
        slot.inAttempt = true
        if (state.inFlight > state.peakInFlight) state.peakInFlight = state.inFlight
        const startedAt = clock.unsafeCurrentTimeMillis()
        const ctx = new AttemptContext(shared, task, spec.pipelineId, seq, attempt)
        const timeout = task.options.timeout
        // Sync and promise tasks cannot run a scoped Effect: they get no Scope (opening one
        // costs more than the rest of a trivial attempt).
        const run = Effect.suspend(() => task.run(input, ctx))
        const body = task.scoped ? Effect.scoped(run) : run
        const timed = timeout === null
          ? body
          : Effect.timeoutFail(body, {
            duration: timeout,
            onTimeout: () => new TaskTimeout({ taskName: task.name, timeoutMs: Duration.toMillis(timeout), errorClass: "timeout" })
          })
        // retry.maxTotal bounds the task's whole time, a lease wait included: the attempt
        // running when it runs out is interrupted (from the first attempt's start)
        const maxTotal = task.options.retry.maxTotal
        const budgeted = maxTotal === undefined ? timed : withinBudget(
          timed,
          task,
          Duration.toMillis(maxTotal),
          Math.max(0, (taskStartedAt ?? startedAt) + Duration.toMillis(maxTotal) - startedAt)
        )
        // The tasks' requirements come from the run's own context, which every pipeline fiber
        // inherits (the run's type carries them).
        const provided = budgeted as Effect.Effect<unknown, unknown, never>
        return Effect.flatMap(Effect.exit(provided), (exit): Effect.Effect<AttemptResult> => {
          slot.inAttempt = false
          state.inFlight--
          const leaseIds = ctx.leaseIds
          if (!ctx.rawLeases) return Effect.succeed({ exit, leaseIds: leaseIds ?? noLeases, startedAt })
          // Raw leases still held are reclaimed; under strictLeases they fail the attempt.
          return Effect.map(pools.reclaim(ctx.owner), (leaked) => {
            if (leaked.length > 0) {
              state.counters.leasesLeaked += leaked.length
              if (config.strictLeases && Exit.isSuccess(exit)) {
                exit = Exit.fail(new LeaseLeakError({ taskName: task.name, leaseIds: leaked.map((l) => l.leaseId) }))
              }
            }
            return { exit, leaseIds: leaseIds ?? noLeases, startedAt }
          })
        })
      })

    // ---- admission --------------------------------------------------------------------------

    const runOwnerLive = (ownerRunId: string, now: number) =>
      Effect.gen(function*() {
        if (ownerRunId === runId) return false
        let cached = runCaches.get(ownerRunId)
        if (cached === undefined) {
          cached = yield* store.getRun(ownerRunId)
          runCaches.set(ownerRunId, cached)
        }
        return Option.match(cached, {
          onNone: () => false,
          onSome: (r) => r.status === "running" && now - r.heartbeatAt < staleAfterMs
        })
      })

    const decide = (spec: AnySpec, stored: PipelineRecord | undefined, now: number) =>
      Effect.gen(function*(): Effect.fn.Return<Decision, StoreUnavailable> {
        const nTasks = spec.template.nTasks
        if (stored === undefined) {
          return { _tag: "Run", start: { cursor: 0, input: spec.seed, isNew: true, abandonedTask: false }, events: [] }
        }
        if (stored.specDigest !== spec.specDigest || stored.seedDigest !== spec.seedDigest) {
          return {
            _tag: "Conflict",
            error: new PipelineIdentityConflict({
              pipelineId: spec.pipelineId,
              storedSpecDigest: stored.specDigest,
              specDigest: spec.specDigest,
              storedSeedDigest: stored.seedDigest,
              seedDigest: spec.seedDigest
            })
          }
        }
        // A row this run wrote: the same pipeline came again after the first finished.
        if (stored.runId === runId) {
          return {
            _tag: "Skip",
            reason: "duplicate",
            event: { kind: "pipeline.skipped", pipelineId: spec.pipelineId, runId, data: { reason: "duplicate" }, ts: now }
          }
        }
        const fromSeed = (kind: string, data: unknown): Decision => ({
          _tag: "Run",
          start: { cursor: 0, input: spec.seed, isNew: false, abandonedTask: false },
          events: [{ kind, pipelineId: spec.pipelineId, runId, data, ts: now }]
        })
        if (config.freshRestart) {
          if (stored.state === "succeeded" && !config.retrySucceeded) return { _tag: "Skip", reason: "succeeded" }
          if (stored.state === "running" && (yield* runOwnerLive(stored.runId, now))) {
            return ownedSkip(spec, stored, now)
          }
          return fromSeed("pipeline.restarted", { discardedCursor: stored.nTasksDone, previousState: stored.state })
        }
        switch (stored.state) {
          case "succeeded":
            if (!config.retrySucceeded) return { _tag: "Skip", reason: "succeeded" }
            return fromSeed("pipeline.restarted", { discardedCursor: stored.nTasksDone, previousState: "succeeded" })
          case "running":
          case "pending": {
            if (stored.runId !== runId && (yield* runOwnerLive(stored.runId, now))) return ownedSkip(spec, stored, now)
            if (!config.resume && !store.exclusiveWriter && stored.runId !== runId) {
              // The owner looks gone, but without an exclusive writer claiming needs an explicit
              // resume (with one, the owner is provably dead: see the stale-run claim above).
              const owner = runCaches.get(stored.runId)
              const ownerDone = owner !== undefined && Option.isSome(owner) && owner.value.status !== "running"
              if (!ownerDone) return ownedSkip(spec, stored, now)
            }
            return yield* resumeFrom(spec, stored, now, stored.state === "running")
          }
          case "failed":
          case "interrupted":
            if (stored.nTasksDone === nTasks) return { _tag: "Repair", record: stored }
            return yield* resumeFrom(spec, stored, now, false)
        }
      })

    const ownedSkip = (spec: AnySpec, stored: PipelineRecord, now: number): Decision => ({
      _tag: "Skip",
      reason: "owned_by_another_run",
      event: {
        kind: "pipeline.skipped",
        pipelineId: spec.pipelineId,
        runId,
        data: { reason: "owned_by_another_run", owner: stored.runId },
        ts: now
      }
    })

    const resumeFrom = (spec: AnySpec, stored: PipelineRecord, now: number, abandoned: boolean) =>
      Effect.gen(function*(): Effect.fn.Return<Decision, StoreUnavailable> {
        const nTasks = spec.template.nTasks
        const cursor = stored.nTasksDone
        if (cursor > nTasks || cursor < 0) return { _tag: "Corrupt", record: stored }
        if (cursor === nTasks) return { _tag: "Repair", record: stored }
        if (cursor === 0) {
          return { _tag: "Run", start: { cursor: 0, input: spec.seed, isNew: false, abandonedTask: abandoned }, events: [] }
        }
        const restart = (kind: string, why: string): Decision => ({
          _tag: "Run",
          start: { cursor: 0, input: spec.seed, isNew: false, abandonedTask: abandoned },
          events: [{ kind, pipelineId: spec.pipelineId, runId, data: { cursor, reason: why }, ts: now }]
        })
        const loaded = yield* store.getArtifact(spec.pipelineId, cursor - 1)
        if (Option.isNone(loaded)) return restart("pipeline.checkpoint_missing", "no artifact at the cursor")
        const { artifact, payload } = loaded.value
        if (!artifact.available || payload === undefined) {
          return restart("pipeline.checkpoint_missing", "artifact payload unavailable")
        }
        const task = (spec.template.tasks as ReadonlyArray<Task.Any>)[cursor - 1]!
        const decoded = registryFor(task).load({ typeName: artifact.typeName, codec: artifact.codec, data: payload })
        if (Either.isLeft(decoded)) return restart("pipeline.checkpoint_unusable", decoded.left.message)
        return {
          _tag: "Run",
          start: { cursor, input: decoded.right, isNew: false, abandonedTask: abandoned },
          events: abandoned
            ? [{ kind: "pipeline.claimed", pipelineId: spec.pipelineId, runId, data: { from: stored.runId, cursor }, ts: now }]
            : []
        }
      })

    const repair = (spec: AnySpec, stored: PipelineRecord) =>
      Effect.gen(function*(): Effect.fn.Return<Option.Option<Option.Option<unknown>>, StoreUnavailable> {
        const now = yield* Clock.currentTimeMillis
        const nTasks = spec.template.nTasks
        const loaded = yield* store.getArtifact(spec.pipelineId, nTasks - 1)
        const task = (spec.template.tasks as ReadonlyArray<Task.Any>)[nTasks - 1]!
        const usable = Option.flatMap(loaded, ({ artifact, payload }) =>
          artifact.available && payload !== undefined
            ? Either.getRight(
              registryFor(task).load({ typeName: artifact.typeName, codec: artifact.codec, data: payload })
            )
            : Option.none())
        if (Option.isNone(usable)) return Option.none()
        const attempt = yield* Effect.either(
          Effect.zipRight(
            store.markFinal(spec.pipelineId, nTasks - 1),
            store.settlePipeline(spec.pipelineId, { state: "succeeded", nTasksDone: nTasks, runId, endedAt: now })
          )
        )
        if (Either.isLeft(attempt)) {
          state.counters.repairFailures++
          yield* emit("pipeline.terminal_repair_failed", spec.pipelineId, {
            phase: "settle",
            error: attempt.left.message
          })
          return Option.some(Option.none<unknown>())
        }
        yield* emit("pipeline.terminal_repaired", spec.pipelineId, {
          previousState: stored.state,
          previousRunId: stored.runId,
          errorMessage: stored.errorMessage
        })
        return Option.some(Option.some(usable.value))
      })

    const admitBatch = (batch: ReadonlyArray<AnySpec>) =>
      Effect.gen(function*() {
        if (batch.length === 0) return
        const now = yield* Clock.currentTimeMillis
        const storedMap = yield* store.getPipelines(batch.map((s) => s.pipelineId))
        const seenInBatch = new Map<string, AnySpec>()
        for (const spec of batch) {
          if (state.stopping) return
          // The same id twice in one run (a repeated explicit key, or a repeated seed): the
          // first one runs. An identical repeat is skipped (`pipeline.skipped`, reason
          // duplicate); a repeat with another definition or seed is an identity conflict.
          const earlier = seenInBatch.get(spec.pipelineId) ?? inFlight.get(spec.pipelineId)
          if (earlier !== undefined) {
            if (earlier.specDigest !== spec.specDigest || earlier.seedDigest !== spec.seedDigest) {
              conflict = new PipelineIdentityConflict({
                pipelineId: spec.pipelineId,
                storedSpecDigest: earlier.specDigest,
                specDigest: spec.specDigest,
                storedSeedDigest: earlier.seedDigest,
                seedDigest: spec.seedDigest
              })
              yield* emit("pipeline.identity_conflict", spec.pipelineId, {
                storedSpecDigest: earlier.specDigest,
                specDigest: spec.specDigest,
                storedSeedDigest: earlier.seedDigest,
                seedDigest: spec.seedDigest,
                duplicateInRun: true
              })
              requestStop("identity_conflict")
              return
            }
            state.counters.skipped++
            yield* emit("pipeline.skipped", spec.pipelineId, { reason: "duplicate" })
            continue
          }
          seenInBatch.set(spec.pipelineId, spec)
          const stored = storedMap.get(spec.pipelineId)
          // Fast path of a resume: an unchanged pipeline that already succeeded is skipped
          // without any further work.
          if (
            stored !== undefined && stored.state === "succeeded" && !config.retrySucceeded && !config.freshRestart &&
            stored.specDigest === spec.specDigest && stored.seedDigest === spec.seedDigest && stored.runId !== runId
          ) {
            state.counters.skipped++
            continue
          }
          // A pipeline the store has never seen starts from its seed: no decision to make.
          const decision = stored === undefined
            ? { _tag: "Run" as const, start: { cursor: 0, input: spec.seed, isNew: true, abandonedTask: false }, events: [] }
            : yield* decide(spec, stored, now)
          switch (decision._tag) {
            case "Skip":
              state.counters.skipped++
              if (decision.event !== undefined) yield* store.emitEvent(decision.event)
              continue
            case "Conflict":
              conflict = decision.error
              yield* emit("pipeline.identity_conflict", spec.pipelineId, {
                storedSpecDigest: decision.error.storedSpecDigest,
                specDigest: decision.error.specDigest,
                storedSeedDigest: decision.error.storedSeedDigest,
                seedDigest: decision.error.seedDigest
              })
              requestStop("identity_conflict")
              return
            case "Corrupt":
              state.counters.failed++
              yield* emit("pipeline.corrupt_cursor", spec.pipelineId, {
                cursor: decision.record.nTasksDone,
                nTasks: spec.template.nTasks,
                error: new CorruptCheckpoint({
                  pipelineId: spec.pipelineId,
                  message: `cursor ${decision.record.nTasksDone} is past the last task (${spec.template.nTasks})`
                }).message
              })
              continue
            case "Repair": {
              const repaired = yield* repair(spec, decision.record)
              if (Option.isSome(repaired)) {
                if (Option.isSome(repaired.value)) {
                  state.counters.succeeded++
                  const record = yield* readRecord(spec.pipelineId)
                  yield* finishCallback(record, repaired.value)
                }
                continue
              }
              // The terminal artifact is unusable: restart from the seed.
              yield* admitOne(spec, {
                _tag: "Run",
                start: { cursor: 0, input: spec.seed, isNew: false, abandonedTask: false },
                events: [{
                  kind: "pipeline.checkpoint_unusable",
                  pipelineId: spec.pipelineId,
                  runId,
                  data: { cursor: decision.record.nTasksDone, reason: "terminal artifact missing or undecodable" },
                  ts: now
                }]
              }, decision.record, now)
              continue
            }
            case "Run":
              yield* admitOne(spec, decision, storedMap.get(spec.pipelineId), now)
          }
        }
      })

    const admitOne = (
      spec: AnySpec,
      decision: Extract<Decision, { _tag: "Run" }>,
      stored: PipelineRecord | undefined,
      now: number
    ) =>
      Effect.gen(function*() {
        // The feeder is interrupted when the run stops, which ends this wait.
        const hold: SlotHold = { holding: false, inAttempt: false }
        yield* admission.take(hold)
        if (state.stopping) {
          admission.release(hold)
          return
        }
        state.admitted++
        state.counters.admitted++
        inFlight.set(spec.pipelineId, spec)
        if (state.admitted > state.peakAdmitted) state.peakAdmitted = state.admitted
        const record: PipelineFields = {
          pipelineId: spec.pipelineId,
          key: spec.explicitKey ? spec.key : null,
          name: spec.template.name,
          state: "running" as PipelineState,
          nTasksDone: decision.start.cursor,
          nTasksTotal: spec.template.nTasks,
          specDigest: spec.specDigest,
          seedDigest: spec.seedDigest,
          tags: tagsOf(spec.template.tags),
          attemptsTotal: stored?.attemptsTotal ?? 0,
          runId,
          createdAt: stored?.createdAt ?? now,
          updatedAt: now,
          startedAt: now,
          endedAt: null,
          failedTask: null,
          errorType: null,
          errorMessage: null,
          errorClass: null,
          repeat: spec.repeat
        }
        // The seed is stored once, with the row, as the artifact at seq -1.
        const seeds: ReadonlyArray<NewArtifact> = decision.start.isNew
          ? [{
            pipelineId: spec.pipelineId,
            runId,
            seq: -1,
            taskName: null,
            typeName: "json",
            codec: "json",
            digest: spec.seedDigest,
            payload: utf8(spec.seedJson),
            isFinal: false,
            createdAt: now
          }]
          : []
        // The row is written by the pipeline's own fiber, so that the admissions of many
        // pipelines share one group commit instead of the feeder waiting for each.
        const admitted = decision.events.length === 0
          ? store.admit([record], seeds)
          : Effect.zipRight(
            store.admit([record], seeds),
            Effect.forEach(decision.events, (e) => store.emitEvent(e), { discard: true })
          )
        yield* FiberSet.run(
          fibers,
          Effect.zipRight(admitted, runPipeline(spec, decision.start)).pipe(
            Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.void : crash(cause)),
            Effect.ensuring(Effect.sync(() => {
              admission.release(hold)
              state.admitted--
              inFlight.delete(spec.pipelineId)
            }))
          )
        )
      })

    const feeder = Effect.gen(function*() {
      const stream = sourceToStream<AnySpec, SE, SR>(source)
      const batchSize = Math.max(1, Math.min(256, config.maxAdmitted))
      yield* stream.pipe(
        Stream.rechunk(batchSize),
        Stream.runForEachChunk((chunk) =>
          state.stopping ? Effect.interrupt : admitBatch(Array.from(chunk))
        )
      )
    })

    // ---- drive ------------------------------------------------------------------------------
    const feederFiber = yield* Effect.fork(feeder)
    const completion = Effect.zipRight(Fiber.join(feederFiber), FiberSet.awaitEmpty(fibers))
    const finished = yield* Effect.raceFirst(
      Effect.as(completion, "done" as const),
      Effect.as(Deferred.await(stopRequested), "stop" as const)
    ).pipe(Effect.exit)

    let sourceFailure: Option.Option<Cause.Cause<SE | StoreUnavailable>> = Option.none()
    if (Exit.isFailure(finished)) {
      // The source (or admission) failed: stop what is running, then report it.
      sourceFailure = Option.some(finished.cause as Cause.Cause<SE | StoreUnavailable>)
      if (state.stopReason === null) requestStop("source_failed")
    }
    if (state.stopping) {
      yield* Fiber.interrupt(feederFiber)
      yield* Effect.raceFirst(
        FiberSet.awaitEmpty(fibers),
        Effect.raceFirst(Effect.sleep(config.grace), Deferred.await(hardStop))
      )
      yield* FiberSet.clear(fibers)
    }
    yield* FiberSet.awaitEmpty(fibers)

    yield* persistResources
    const endedAt = yield* Clock.currentTimeMillis
    const status: Exclude<RunStatus, "running"> = state.crash !== null || state.stopping ? "interrupted" : "completed"
    yield* store.finishRun(runId, { status: conflict !== null ? "failed" : status, endedAt, stopReason: state.stopReason })
    runClosed = true
    yield* emit("run.finished", null, { status, stopReason: state.stopReason, counters: state.counters }).pipe(
      Effect.zipRight(store.flush),
      Effect.catchAll((e) => Effect.logWarning(`could not record run.finished: ${e.message}`))
    )

    if (state.crash !== null) {
      const c = state.crash
      const failure = Cause.failureOption(c)
      if (Option.isSome(failure) && Predicate.isTagged(failure.value, "StoreUnavailable")) {
        return yield* (failure.value as StoreUnavailable)
      }
      return yield* (new WorkerCrashed({ message: `a worker crashed: ${Cause.pretty(c).slice(0, 2000)}` }))
    }
    if (conflict !== null) return yield* (conflict as PipelineIdentityConflict)
    if (Option.isSome(sourceFailure) && !Cause.isInterruptedOnly(sourceFailure.value)) {
      return yield* Effect.failCause(sourceFailure.value)
    }

    const stats = yield* store.stats(runId)
    return makeReport({
      runId,
      status,
      startedAt,
      durationMs: endedAt - startedAt,
      stats,
      skipped: state.counters.skipped,
      repairFailures: state.counters.repairFailures,
      leasesLeaked: state.counters.leasesLeaked,
      retries: state.counters.retries,
      stopReason: state.stopReason
    }, store)
  }))

// ---------------------------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------------------------

/**
 * The signals that stop a run gracefully: Ctrl-C (SIGINT), a service manager or `kill`
 * (SIGTERM), and the terminal closing (SIGHUP). The stop reason is the signal's name in lower
 * case (`sigint`, `sigterm`, `sighup`).
 *
 * @since 0.1.0
 * @category signals
 */
export const stopSignals: ReadonlyArray<NodeJS.Signals> = Signals.stopSignals

/** While the run's scope lasts, the stop signals (claimed from `Signals`) request a stop. */
const installSignalHandlers = (requestStop: (reason: string) => void) =>
  Effect.flatMap(
    Signals.Signals,
    (signals) => signals.handle((signal) => Effect.sync(() => requestStop(signal.toLowerCase())))
  )

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

type ReportFacts = Omit<RunReport, "summary" | "toJSON" | "exportJsonl">

const makeReport = (facts: ReportFacts, store: StoreService): RunReport => {
  const toJSON = () => ({
    runId: facts.runId,
    status: facts.status,
    startedAt: facts.startedAt,
    durationMs: facts.durationMs,
    stopReason: facts.stopReason,
    skipped: facts.skipped,
    repairFailures: facts.repairFailures,
    leasesLeaked: facts.leasesLeaked,
    retries: facts.retries,
    stats: {
      pipelines: { total: facts.stats.pipelines, byState: facts.stats.byState },
      tasks: facts.stats.tasks,
      attemptsTotal: facts.stats.attemptsTotal,
      retries: facts.stats.retries,
      latencyMs: facts.stats.latencyMs
    }
  })
  const summary = () => {
    const s = facts.stats
    const by = Object.entries(s.byState).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(", ")
    const lines = [
      `run ${facts.runId}: ${facts.status}${facts.stopReason !== null ? ` (${facts.stopReason})` : ""} in ${
        (facts.durationMs / 1000).toFixed(1)
      } s`,
      `pipelines: ${s.pipelines}${by === "" ? "" : ` (${by})`}, skipped ${facts.skipped}`,
      `tasks: ${s.tasks}, attempts: ${s.attemptsTotal}, retries: ${s.retries}, leases leaked: ${facts.leasesLeaked}`
    ]
    if (s.latencyMs !== null) {
      lines.push(
        `pipeline latency: p50 ${s.latencyMs.p50.toFixed(0)} ms, p95 ${s.latencyMs.p95.toFixed(0)} ms, p99 ${
          s.latencyMs.p99.toFixed(0)
        } ms`
      )
    }
    if (facts.repairFailures > 0) lines.push(`terminal repair failures: ${facts.repairFailures}`)
    return lines.join("\n")
  }
  const exportJsonl = (path: string) =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const tmp = `${path}.tmp-${process.pid}`
      let n = 0
      yield* Effect.scoped(Effect.gen(function*() {
        const file = yield* fs.open(tmp, { flag: "w" })
        yield* store.streamPipelines({ runId: facts.runId }).pipe(
          Stream.grouped(500),
          Stream.runForEach((chunk) => {
            n += chunk.length
            const text = Array.from(chunk, (p) => Either.getOrThrow(canonicalJson(Schema.encodeSync(PipelineRecord)(p))))
              .join("\n") + "\n"
            return file.writeAll(encoder.encode(text))
          })
        )
      }))
      yield* fs.rename(tmp, path)
      return n
    })
  return { ...facts, summary, toJSON, exportJsonl }
}
