/**
 * The run loop: `start` creates one run's state, forks the loop in the caller's scope and
 * returns its handle. The loop opens the run, claims what dead runs left, feeds specs through
 * admission into pipeline fibers, keeps the heartbeat, stops on request (grace, then
 * interruption), closes the run and builds its report.
 *
 * Everything it needs from the runner service comes in one {@link RunnerEnv} record.
 *
 * @internal
 */
import {
  Cause,
  Chunk,
  Clock,
  Context,
  DefaultServices,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  FiberSet,
  Option,
  Predicate,
  Random,
  Schedule,
  type Scope,
  Stream,
  Tracer
} from "effect"
import { CodecRegistry, outputTypeName } from "../../../domain/Codec.js"
import * as CallCacheDomain from "../../../domain/CallCache.js"
import { ConfigError, type ConfigIssue, StoreUnavailable, WorkerCrashed } from "../../../domain/Errors.js"
import { digest } from "../../../domain/Json.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type { PipelineRecord, RunStatus } from "../../../domain/Records.js"
import * as Rows from "./rows.js"
import * as SpecStream from "../../../domain/internal/specStream.js"
import * as RunConfig from "../../../domain/RunConfig.js"
import type * as Task from "../../../domain/Task.js"
import type { MetricDisplay } from "../../../domain/TaskContext.js"
import type { BusService } from "../../Bus.js"
import type { CallCacheService } from "../../CallCache.js"
import type { Pools, PoolStats } from "../../Pool.js"
import type {
  ReportMetricOptions,
  RunError,
  RunHandle,
  RunOptions,
  SpecContext,
  SpecSource
} from "../../Runner.js"
import type { StoreService } from "../../Store.js"
import { checkpointNowOf } from "../store/front.js"
import { checkId } from "../../../domain/Suite.js"
import { memberMetricName } from "../suite/metric.js"
import * as Admit from "./admit.js"
import { withAttemptServices } from "./attemptScope.js"
import * as Controlled from "./controlled.js"
import type { AttemptShared, MemberFacts } from "./attemptContext.js"
import { aliased } from "../pool/aliased.js"
import * as Pipe from "./pipeline.js"
import { makeReport } from "./report.js"
import { onStopSignal } from "./signals.js"
import { readOnlyView } from "../../../domain/TaskStore.js"
import * as SlotGate from "./slotGate.js"
import * as Slice from "./slice.js"
import * as State from "./state.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * The run-scoped metric in which the runner records how many pipelines it skipped because they
 * had already succeeded (written with each heartbeat and at the end of the run); monitors add
 * it to the run's done count. In a suite run the runner also records each member's share as
 * the member-scoped metric of that name (`experiment:ID:skipped`, see `Suite.memberMetricName`).
 *
 * @internal
 */
export const SKIPPED_METRIC = "skipped"

/**
 * What every run of a runner shares: its store, its pools and its bus.
 *
 * @internal
 */
export interface RunnerEnv {
  readonly store: StoreService
  readonly pools: Context.Tag.Service<Pools>
  readonly bus: BusService
  /**
   * The pipelines that the runner's runs have decided to run and not finished: pipeline id →
   * run id. Shared by the runs of one runner so that two runs at once never run the same
   * pipeline (the store's rows are durable only after the group commit).
   */
  readonly claimed: Map<string, string>
  /** The runs of this runner that are open (opened in the store and not finished). */
  readonly liveRuns: Set<RunId>
  /** The stop requests of the runner's runs that handle signals (each run adds its own). */
  readonly signalTargets: Set<(reason: string) => void>
  /**
   * The call cache of the runner's runs (the `CallCache` in context, else one in-memory cache
   * per runner), used by tasks whose cache mode is not `off`.
   */
  readonly callCache?: CallCacheService | undefined
}

const cacheActive = (c: State.CacheCounters): boolean => c.hits + c.misses + c.refreshed + c.bypassed + c.writeFailures + c.lookupFailures > 0

const configError = (path: string, message: string): ConfigError =>
  new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

const isMetricValue = (v: unknown): v is string | number | boolean =>
  typeof v === "string" || typeof v === "boolean" || (typeof v === "number" && Number.isFinite(v))

// the runner's own choice of run id (see `RunId`): the UTC start time and 8 hex digits
const makeRunId = (now: number) =>
  Effect.map(Random.nextIntBetween(0, 0x7fffffff), (r): RunId => {
    const stamp = new Date(now).toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z")
    return `${stamp}-${digest(`${now}:${r}`).slice(0, 8)}` as RunId
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

/**
 * Stores the latest value of an application metric of run `runId` (strings, booleans, finite
 * numbers). A non-finite number is dropped with a warning and a `metric.dropped` event; any
 * other value fails with `ConfigError`.
 *
 * @internal
 */
export const reportMetric = (
  store: StoreService,
  runId: RunId,
  name: string,
  value: unknown,
  options: ReportMetricOptions | undefined
): Effect.Effect<void, StoreUnavailable | ConfigError> =>
  Effect.gen(function*() {
    const pipelineId = options?.pipelineId ?? null
    const experiment = options?.experiment
    if (experiment !== undefined) {
      if (pipelineId !== null) {
        return yield* configError("reportMetric", "give either pipelineId or experiment, not both")
      }
      const invalid = checkId(experiment)
      if (invalid !== undefined) {
        return yield* configError("reportMetric.experiment", `"${experiment}" ${invalid}`)
      }
      name = memberMetricName(experiment, name)
    }
    if (typeof value === "number" && !Number.isFinite(value)) {
      // NaN or ±Infinity (a 0/0 accuracy, say): dropped, said so, and the task goes on
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
      pipelineId,
      name,
      value,
      label: options?.label ?? null,
      display,
      updatedAt: now
    })
  })

/**
 * The live figures of a run with its pools' figures.
 *
 * @internal
 */
export const statsOf = (env: RunnerEnv, state: State.RunState) =>
  Effect.gen(function*() {
    const byPool: Record<string, PoolStats> = {}
    for (const name of yield* env.pools.names) {
      const stats = yield* Effect.option(env.pools.stats(name))
      if (Option.isSome(stats)) byPool[name] = stats.value
    }
    return State.liveStats(state, byPool)
  })

/**
 * Starts a run of `source` in the current scope and returns its handle at once: the options
 * are resolved (fails with `ConfigError`), the run id chosen, and the loop forked in the
 * scope (closing the scope interrupts the run, which then closes its record `interrupted`).
 * The loop runs in a span `assay.run` and its logs carry `runId`.
 *
 * @internal
 */
export const start = <S extends AnySpec, SE, SR>(
  env: RunnerEnv,
  source: SpecSource<S, SE, SR>,
  options: RunOptions
): Effect.Effect<RunHandle<SE>, ConfigError, Scope.Scope | Exclude<SpecContext<S>, Scope.Scope> | SR> =>
  Effect.gen(function*() {
    const config = yield* RunConfig.resolve(options)
    const cacheIssues: Array<ConfigIssue> = []
    if (config.cache !== undefined) CallCacheDomain.resolveRunCache(config.cache, "run.cache", cacheIssues)
    if (cacheIssues.length > 0) {
      return yield* new ConfigError({
        message: `invalid run configuration: ${cacheIssues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues: cacheIssues
      })
    }
    const startedAt = yield* Clock.currentTimeMillis
    const runId = config.runId ?? (yield* makeRunId(startedAt))
    const state = State.make(
      runId,
      config,
      yield* Deferred.make<string>(),
      yield* Deferred.make<void>(),
      Slice.resolve(yield* Slice.SliceMillis, yield* Effect.clock)
    )
    state.onMemberSkip = options.hooks?.skipped as State.RunState["onMemberSkip"]
    state.onFailureDecided = options.hooks?.failureDecided
    const loop = runLoop(env, state, options, source, startedAt).pipe(
      Effect.ensuring(Effect.sync(() => {
        state.finished = true
        // whatever ended the run, its claims end with it
        env.liveRuns.delete(runId)
        for (const [pipelineId, owner] of env.claimed) if (owner === runId) env.claimed.delete(pipelineId)
      })),
      Effect.tap((report) => Effect.annotateCurrentSpan("assay.run.status", report.status)),
      Effect.withSpan("assay.run", { attributes: { "assay.run.id": runId, "assay.run.concurrency": config.concurrency } }),
      Effect.annotateLogs({ runId })
    ) as Effect.Effect<import("../../Runner.js").RunReport, RunError | SE, never>
    const fiber = yield* Effect.forkScoped(loop)
    const handle: RunHandle<SE> = {
      runId,
      stats: statsOf(env, state),
      stop: (reason = "user") => Effect.sync(() => State.requestStop(state, reason)),
      reportMetric: (name, value, o) => reportMetric(env.store, runId, name, value, o),
      await: Fiber.join(fiber)
    }
    return handle
  })

/** Pool events whose state a crash should not lose: written within a second (see `poolsDirty`). */
const PERSIST_SOON: ReadonlySet<string> = new Set([
  "resource.throttled",
  "resource.degraded",
  "breaker.opened",
  "resource.restored"
])

/** Breaker transitions: each is written at once, like a throttle window (see `savedAtOnce`). */
const BREAKER_TRANSITIONS: ReadonlySet<string> = new Set(["breaker.opened", "breaker.half_open", "breaker.closed"])

/**
 * Whether a pool event's resource row is written at once, before the fiber that caused it
 * goes on: a throttle window that starts (a 429 with a Retry-After or reset hint) and every
 * breaker transition (a crash right after a close would otherwise bring the resource back
 * half-open, an avoidable probe; these are rare: at most a few per `openFor`).
 */
const savedAtOnce = (event: { readonly kind: string; readonly data: unknown }): boolean =>
  BREAKER_TRANSITIONS.has(event.kind) ||
  (event.kind === "resource.throttled" && Predicate.isObject(event.data) &&
    typeof (event.data as { readonly until?: unknown }).until === "number")

const runLoop = <S extends AnySpec, SE, SR>(
  env: RunnerEnv,
  state: State.RunState,
  options: RunOptions,
  source: SpecSource<S, SE, SR>,
  startedAt: number
) =>
  Effect.scoped(Effect.gen(function*() {
    const { pools, store } = env
    const { config, hardStop, runId, stopRequested } = state
    const registry = options.registry ?? CodecRegistry.default()
    const hooks = options.hooks
    const requestStop = (reason: string) => State.requestStop(state, reason)
    const emit = (kind: string, pipelineId: PipelineId | null, data: unknown) =>
      Effect.flatMap(Clock.currentTimeMillis, (ts) => store.emitEvent({ kind, pipelineId, runId, data, ts }))

    // Claim what dead runs left behind before anything else.
    // With an exclusive writer (SqliteStore's OS lock) no other run can be alive: a run still
    // marked running died without closing, whatever its heartbeat says.
    // A plain run claims them too on such a store: the owner is provably dead, and skipping its
    // rows as "owned by another run" would report success with work left undone. Elsewhere
    // (heartbeats only) claiming a possibly live run's rows needs an explicit resume.
    const staleAfterMs = store.exclusiveWriter ? 0 : Duration.toMillis(config.staleAfter)
    // The other runs of this runner are alive whatever their heartbeats say: refresh them first
    // so that they are never taken for dead.
    const staleRuns = config.resume || store.exclusiveWriter
      ? yield* Effect.zipRight(
        Effect.forEach(env.liveRuns, (other) => store.heartbeat(other, startedAt), { discard: true }),
        store.interruptStale(staleAfterMs, startedAt)
      )
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
    env.liveRuns.add(runId)
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
          yield* emit("run.finished", null, {
            status: "interrupted",
            stopReason,
            counters: state.counters,
            ...(cacheActive(state.cache) ? { cache: state.cache } : {})
          })
          yield* store.flush
        }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not close the interrupted run: ${e.message}`)))
    )
    yield* emit("run.started", null, { concurrency: config.concurrency, maxAdmitted: config.maxAdmitted })
    for (const r of staleRuns) {
      // `inFlight: "events"`: what that run had in flight is recorded as `pipeline.abandoned`
      // events (since 0.12), so `report` need not look for the Abandoned rows of older stores
      yield* emit("run.stale_interrupted", null, { staleRunId: r.runId, heartbeatAt: r.heartbeatAt, inFlight: "events" })
    }

    // Pool state that survives a resume (docs/pools.md, "Across a resume"): a throttle, a
    // cooldown or an open breaker marks the pools dirty; a fiber writes them within a second
    // (one batch, not one write per event); the heartbeat writes the rest (learned limits,
    // usage) every `heartbeat`.
    let poolsDirty = false
    // what the resume restored per resource (`pool\u0000id`), written with the health for `report`
    const restoredOf = new Map<string, { readonly applied: ReadonlyArray<string> } | { readonly ignored: string }>()
    // A throttle window that starts, and every breaker transition, is made durable at once
    // (`savedAtOnce`; `persistThrottle`, set below once
    // the pools can be written): the callback runs in the fiber whose lease heard the 429,
    // before its attempt ends, and the resource is out of rotation until the window ends, so
    // the window is in the store before the next request to that resource can be sent. The
    // first write is that resource's row alone (its saved state holds the window), then the
    // forced flush of the event; the other resources follow within a second (`poolsDirty`).
    let persistThrottle: (pool: string, resourceId: string | undefined) => Effect.Effect<void> = () => Effect.void
    // Pool events go to the event log.
    yield* pools.listen((event) => {
      if (PERSIST_SOON.has(event.kind)) poolsDirty = true
      const recorded = store.emitEvent({
        kind: event.kind,
        pipelineId: null,
        runId,
        data: { pool: event.pool, resourceId: event.resourceId, ...(event.data as object) },
        ts: event.ts
      }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record pool event: ${e.message}`)))
      return savedAtOnce(event)
        ? Effect.suspend(() => persistThrottle(event.pool, event.resourceId)).pipe(
          Effect.zipRight(recorded),
          Effect.zipRight(
            store.flush.pipe(Effect.catchAll((e) => Effect.logWarning(`could not write a pool event to the store: ${e.message}`)))
          )
        )
        : recorded
    })

    // On resume, the pools take back what the interrupted run saved (before anything is
    // leased and before this run's first write replaces it). A bad row is reported (a
    // `resource.restore_ignored` event and a warning) and skipped; nothing here fails the run.
    if (config.resume) {
      yield* Effect.gen(function*() {
        const names = new Set(yield* pools.names)
        for (const r of yield* store.resources) {
          if (!names.has(r.pool)) continue
          const h = r.health
          const saved = typeof h === "object" && h !== null && !Array.isArray(h) ? (h as Record<string, unknown>)["resume"] : h
          if (saved === undefined || saved === null) continue
          const outcome = yield* pools.restoreState(r.pool, r.resourceId, saved)
          restoredOf.set(
            `${r.pool}\u0000${r.resourceId}`,
            outcome._tag === "Restored" ? { applied: outcome.applied } : { ignored: outcome.reason }
          )
          if (outcome._tag === "Ignored") {
            yield* Effect.logWarning(
              `pool "${r.pool}", resource "${r.resourceId}": saved state not applied (${outcome.reason}): ${outcome.message}`
            )
          }
        }
      }).pipe(Effect.catchAllCause((cause) =>
        Effect.zipRight(
          Effect.logWarning(`could not restore the pools' saved state: ${Cause.pretty(cause).slice(0, 500)}`),
          emit("pool.restore_failed", null, { error: Cause.pretty(cause).slice(0, 2000) }).pipe(Effect.ignore)
        )
      ))
    }

    // Pool resources (spec with secrets masked, health) go to the store at start, with every
    // heartbeat and at the end, so that report / watch / serve can show them.
    // the rows of one pool's resources (`only`: just that one) as they are now
    const putPool = (name: string, now: number, only?: string | undefined) =>
      Effect.gen(function*() {
        const handle = yield* pools.get(name)
        const infos = new Map((yield* handle.resources).map((r) => [r.id, r]))
        const saved = new Map((yield* pools.saveState(name)).map((x) => [x.resourceId, x.state]))
        const stats = yield* handle.stats()
        for (const snap of yield* handle.snapshot) {
          if (only !== undefined && snap.id !== only) continue
          yield* store.putResource(Rows.resourceRow(name, snap, infos.get(snap.id), stats, runId, now, {
            resume: saved.get(snap.id) ?? null,
            restored: restoredOf.get(`${name}\u0000${snap.id}`) ?? null
          }))
        }
      })
    const persistResources = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      poolsDirty = false
      for (const name of yield* pools.names) yield* putPool(name, now)
      // Pipelines skipped because they were already done (resume) count toward the run's
      // progress: monitors read this run-scoped metric.
      if (state.counters.skipped > 0) {
        yield* reportMetric(store, runId, SKIPPED_METRIC, state.counters.skipped, {
          label: "Skipped (already done)",
          display: "number"
        }).pipe(Effect.catchTag("ConfigError", () => Effect.void))
      }
      // ... and per suite member (`experiment:ID:skipped`): the suite views' per-member skips
      for (const [experiment, n] of state.skippedByMember) {
        yield* reportMetric(store, runId, SKIPPED_METRIC, n, {
          experiment,
          label: "Skipped (already done)",
          display: "number"
        }).pipe(Effect.catchTag("ConfigError", () => Effect.void))
      }
    }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record pool resources: ${e.message}`)))
    yield* persistResources
    // a throttle or a breaker transition: first that resource's row (one commit), then the event
    // saying so through a forced flush (only on 429s with a window and breaker transitions); the other rows within a second (`poolsDirty`)
    persistThrottle = (pool, resourceId) =>
      Effect.gen(function*() {
        poolsDirty = true
        if (resourceId !== undefined) yield* putPool(pool, yield* Clock.currentTimeMillis, resourceId)
        else yield* persistResources
      }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not write a throttle or breaker to the store: ${e.message}`)))
    // an interrupted run writes the pools' last state too (runs before the run is closed)
    yield* Effect.addFinalizer(() => runClosed ? Effect.void : persistResources)
    yield* Effect.forkScoped(
      Effect.suspend(() => poolsDirty ? persistResources : Effect.void).pipe(
        Effect.repeat(Schedule.spaced(Duration.min(Duration.seconds(1), config.heartbeat))),
        Effect.delay(Duration.min(Duration.seconds(1), config.heartbeat))
      )
    )

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
    // A stop signal stops every run of this runner that handles signals (the newest run's
    // claim receives it: claims nest), not only the run started last.
    if (config.handleSignals) {
      yield* Effect.acquireRelease(
        Effect.sync(() => env.signalTargets.add(requestStop)),
        () => Effect.sync(() => env.signalTargets.delete(requestStop))
      )
      yield* onStopSignal((reason) => {
        for (const stop of env.signalTargets) stop(reason)
      })
    }

    // Admission slots: the feeder waits here when maxAdmitted pipelines are in; a stop
    // interrupts the feeder itself (its wait included).
    const admission = SlotGate.make(config.maxAdmitted, () => false)
    const slots = SlotGate.make(config.concurrency, () => state.stopping)
    // The clock of the run, read synchronously on the hot path (TestClock in tests).
    const clock = yield* Effect.clock
    const fibers = yield* FiberSet.make<void, never>()

    const crash = (cause: Cause.Cause<unknown>) =>
      Effect.sync(() => {
        if (state.crash === null) state.crash = cause
        requestStop("worker_crashed")
        Deferred.unsafeDone(hardStop, Exit.void)
      })

    const finishCallback = (record: PipelineRecord, output: Option.Option<unknown>) =>
      options.onPipelineFinished === undefined
        ? Effect.void
        : Effect.suspend(() => options.onPipelineFinished!(record, output)).pipe(
          Effect.catchAllCause((cause) =>
            emit("monitor.callback_failed", record.pipelineId, { error: Cause.pretty(cause).slice(0, 2000) })
          )
        )

    const readRecord = (pipelineId: PipelineId) =>
      Effect.flatMap(store.getPipeline(pipelineId), (o) =>
        Option.match(o, {
          onNone: () => Effect.fail(new StoreUnavailable({ message: `pipeline ${pipelineId} vanished from the store` })),
          onSome: Effect.succeed
        }))

    const onTerminal = (pipelineId: PipelineId, finalValue: Option.Option<unknown>) =>
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

    // Per-task codec registries (a task's output Schema decodes back to its class).
    const registries = new Map<Task.Any, CodecRegistry>()
    const registryFor = (task: Task.Any): CodecRegistry => {
      let r = registries.get(task)
      if (r === undefined) {
        // a schema without an identifier (a `Schema.Struct`) is registered under a name derived from
        // the task's name and the schema's structure, the same in every process
        r = task.outputSchema === undefined
          ? registry
          : registry.registerSchema(task.outputSchema, { typeName: outputTypeName(task.name, task.outputSchema) })
        registries.set(task, r)
      }
      return r
    }

    const shared: AttemptShared = {
      runId,
      bus: env.bus,
      // a task reads history; it never writes behind the runner's back (not even from JavaScript)
      store: readOnlyView(store),
      pools,
      emit,
      reportMetric: (name, value, o) => reportMetric(store, runId, name, value, o),
      pricing: state.config.pricing,
      // a stop interrupts every wait for a lease at once (the pacing timers of `adaptive`,
      // a throttle window, a busy pool): only attempts that hold their leases get the grace
      leaseWait: whileParked,
      leaseRefused: () => state.stopping
    }
    // A suite member's attempts see the pools under the member's own names.
    const memberShared = new Map<string, AttemptShared>()
    const sharedOf = (member: MemberFacts): AttemptShared => {
      const key = `${member.suiteId}\u0000${member.experimentId}`
      let s = memberShared.get(key)
      if (s === undefined) {
        const view = aliased(pools, member.poolAliases)
        const onMetric = hooks?.memberMetric
        s = {
          ...shared,
          pools: hooks?.memberPools === undefined ? view : hooks.memberPools(member, view),
          reportMetric: onMetric === undefined ? shared.reportMetric : (name, value, o) =>
            Effect.zipRight(shared.reportMetric(name, value, o), onMetric(member, name, value, o.pipelineId ?? null))
        }
        memberShared.set(key, s)
      }
      return s
    }
    // Attempt spans only when a tracer records them (see PipelineEnv.traceAttempts).
    const tracer = yield* Effect.tracer
    const traceAttempts = tracer !== Context.get(DefaultServices.liveServices, Tracer.Tracer)
    const pipelineEnv: Pipe.PipelineEnv = {
      cache: env.callCache === undefined ? undefined : {
        service: env.callCache,
        // checked when the run started
        run: config.cache === undefined
          ? CallCacheDomain.runCacheOff
          : CallCacheDomain.resolveRunCache(config.cache, "run.cache", [])
      },
      startGate: hooks?.startGate,
      traceAttempts,
      state,
      store,
      pools,
      shared,
      memberShared: sharedOf,
      slots,
      clock,
      registryFor,
      whileParked,
      onTerminal
    }

    // A pipeline fiber under the run's hooks (none: the fiber itself): told when it ends, and
    // interrupted (resumable) when its `cancelWhen` completes.
    const hooked = (spec: AnySpec, fiber: Effect.Effect<void, StoreUnavailable>): Effect.Effect<void, StoreUnavailable> => {
      if (hooks === undefined) return fiber
      // asked when the fiber starts (admission may have waited for a slot since the decision)
      const body = hooks.cancelWhen === undefined ? fiber : Effect.suspend(() => {
        const cancel = hooks.cancelWhen!(spec)
        return cancel === undefined ? fiber : Effect.raceFirst(
          fiber,
          // the cancel wins the race: the pipeline's fiber is interrupted (and awaited: its row
          // is marked interrupted), then this fiber ends interrupted, as a stop ends it
          Effect.flatMap(cancel, (reason) =>
            Effect.zipRight(emit("pipeline.cancelled", spec.pipelineId, { reason }), Effect.interrupt))
        )
      })
      const ended = hooks.ended
      return ended === undefined ? body : Effect.ensuring(body, Effect.sync(() => ended(spec)))
    }

    /** See `AdmitEnv.now` (`undefined`: a store not built by the front). */
    const nowRun = (): Admit.NowRun | undefined => {
      const commit = checkpointNowOf(store)
      return commit === undefined ? undefined : {
        run: (spec, start) => Pipe.runNow(pipelineEnv, spec, start),
        runControlled: (spec, start) => Controlled.runNow(pipelineEnv, spec, start),
        commit,
        // what the pipeline fiber does after its last checkpoint (`counters.succeeded`, then
        // `onTerminal`, which without a callback only checks the failure budget)
        succeeded: () => {
          state.counters.succeeded++
          if (config.stopAfterFailures !== undefined && state.counters.failed >= config.stopAfterFailures) {
            requestStop("stop_after_failures")
          }
        }
      }
    }

    // ---- admission --------------------------------------------------------------------------
    const admit = Admit.make({
      state,
      store,
      liveRuns: env.liveRuns,
      claimed: env.claimed,
      policy: {
        runId,
        resume: config.resume,
        freshRestart: config.freshRestart,
        retrySucceeded: config.retrySucceeded,
        exclusiveWriter: store.exclusiveWriter
      },
      staleAfterMs,
      registryFor,
      emit,
      readRecord,
      finishCallback,
      admission,
      fibers,
      launch: (spec, start) => hooked(spec, Pipe.run(pipelineEnv, spec, start)),
      launchControlled: (spec, start) => hooked(spec, Controlled.run(pipelineEnv, spec, start)),
      crash,
      // plain pipelines of synchronous tasks without a fiber of their own, when nothing needs
      // one: no hooks to tell or to cancel it, no callback to hear of its end
      now: hooks !== undefined || options.onPipelineFinished !== undefined ? undefined : nowRun()
    })

    const feeder = Effect.gen(function*() {
      const batchSize = Math.max(1, Math.min(256, config.maxAdmitted))
      // a `Template.map` stream read a batch of seeds at a time (what the batching pulls anyway)
      const stream = SpecStream.withReadAhead(source as Stream.Stream<AnySpec, SE, SR>, batchSize) ??
        sourceToStream<AnySpec, SE, SR>(source)
      const admitChunk = (chunk: Chunk.Chunk<AnySpec>) => state.stopping ? Effect.interrupt : admit.admitBatch(Array.from(chunk))
      yield* hooks?.admitAsTheyCome === true
        // a source that may wait for its own pipelines to end (a suite's trial window): what
        // it gave is admitted now, in batches of at most batchSize, never held for more
        ? Stream.runForEachChunk(stream, (chunk) =>
          Effect.forEach(Chunk.chunksOf(chunk, batchSize), admitChunk, { discard: true }))
        : stream.pipe(Stream.rechunk(batchSize), Stream.runForEachChunk(admitChunk))
    })

    // ---- drive ------------------------------------------------------------------------------
    // the pipelines' fibers (forked by the feeder) give Effect tasks their attempt's Scope and
    // seeded Random through one AttemptScope and one AttemptRandom (see `attemptScope.ts`)
    const feederFiber = yield* Effect.fork(withAttemptServices(feeder))
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
    // a source its owner ended early (a study's drain stop: `RunHooks.closingStop`) closes it interrupted too
    const closing = state.crash === null && !state.stopping && state.stopReason === null ? hooks?.closingStop?.() : undefined
    if (closing !== undefined) state.stopReason = closing
    const status: Exclude<RunStatus, "running"> = state.crash !== null || state.stopping || closing !== undefined ? "interrupted" : "completed"
    const conflict = admit.conflict()
    const refusal = admit.refusal()
    yield* store.finishRun(runId, {
      status: conflict !== null || refusal !== null ? "failed" : status,
      endedAt,
      stopReason: state.stopReason
    })
    runClosed = true
    yield* emit("run.finished", null, {
      status,
      stopReason: state.stopReason,
      counters: state.counters,
      ...(cacheActive(state.cache) ? { cache: state.cache } : {})
    }).pipe(
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
    if (conflict !== null) return yield* conflict
    if (refusal !== null) return yield* refusal
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
      handoffsTotal: state.counters.handoffs,
      handoffsBudgeted: state.counters.handoffs - state.counters.handoffEnds,
      stopReason: state.stopReason,
      heldByOtherRuns: Array.from(state.heldByOtherRuns, ([runId, pipelines]) => ({ runId: runId as RunId, pipelines })),
      staleAfterMs,
      ...(env.callCache !== undefined && state.cache.lookupFailures + state.cache.writeFailures > 0
        ? {
          callCache: {
            location: env.callCache.location,
            lookupFailures: state.cache.lookupFailures,
            writeFailures: state.cache.writeFailures
          }
        }
        : {})
    })
  }))
