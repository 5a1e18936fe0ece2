/**
 * A `Runner` service whose runs go to the cluster engine: `start(source, options)` hands the
 * specs to the cluster submitter ({@link Submit.submit}) and maps the run's hooks
 * (`Runner.RunHooks`) onto what the submitter sees, so that a driver written against the
 * `Runner` (a suite's trial window, a study's `Study.execute`) runs unchanged in the submitting
 * process while the pipelines run on the runners.
 *
 * What each hook becomes (the differences with the embedded engine are in docs/scale-out.md,
 * "Studies on the cluster engine"):
 *
 * - `startGate(spec)`: asked when the submitter is about to admit the spec, once there is room
 *   for it in `maxAdmitted` (the embedded engine asks once the pipeline holds a worker slot),
 *   after the attempts of the pipelines settled so far were told (`settledAttempts`): a
 *   reason leaves the spec out (no row written: a later run admits it) and counts it `ended`;
 *   so a gate closes admission, and the pipelines admitted before it closed still run (at
 *   most `maxAdmitted`);
 * - `accounting(read)`: told at the start, `read` summing this run's stored attempts of the
 *   pipelines it is given (`store.pipelineAccounting`, one query per call; a pipeline this run
 *   follows, running under an earlier run when admitted, is read under that run);
 * - `settledAttempts(spec, attempts)`: when given (a study with budgets), a settled
 *   pipeline's attempts of this run (of its earlier run, for a followed one) are read from
 *   the store (one query) and told before its
 *   `failureDecided` / `ended`, at the next follow or before the next start gate;
 * - `admissionStopped()`: told at the first stop, or when a stop rule of the submitter stops
 *   admission (`Submit.SubmitOptions.onAdmissionStopped`: `stopAfterFailures` reached before the
 *   `ended` of the pipeline that reached it, `stopAfter` passed, runners refused a pipeline);
 * - `closingStop()`: asked when the submission ended `completed` with no stop: a reason closes
 *   the run `interrupted` with it (a study's drain);
 * - `ended(spec)` / `failureDecided(spec)`: told once the submitter sees the pipeline's row
 *   terminal (`onSettled`), at most one poll interval after it committed; a pipeline already
 *   succeeded in the store (skipped at admission) is `ended` too (its gate said yes), and so is
 *   one read but withheld (`onWithheld`: `stopAfterFailures` / `stopAfter` or a stop stopped
 *   admission first; no row, a later run admits it);
 * - `onPipelineFinished(record, output)`: called on the next poll after the pipeline settled,
 *   with its stored record and its final output as stored (JSON; `Option.none()` when failed);
 * - `memberPools`, `memberMetric`: not called: the leases and metrics are the runners';
 * - `cancelWhen(spec)`: asked when the spec is admitted; when its Effect completes before the
 *   pipeline settled, the pipeline is marked cancelled for the runners (`cancelMarks.ts`,
 *   `assay_meta` key `cancel/<runId>/<pipelineId>`, `runId` the run the pipeline runs under:
 *   an earlier one for a followed pipeline) and a `pipeline.cancelled` event records the
 *   reason: the runners stop it at its next task boundary (a call under way commits first),
 *   `interrupted` and resumable, at most one read of the marks later (a trial's time budget).
 *   Without marks that can mark a pipeline it is not asked;
 * - `stop(reason)`: the first call stops admission (the source is read no further; admitted
 *   pipelines are followed to their end), the second stops following (the admitted pipelines
 *   go on on the runners; the run ends `interrupted`). The run's `stopReason` is the first
 *   reason. A stop told once the submission closed the run stops nothing: the run, its
 *   `run.finished` event and the report stay as closed. When `stopCancels()` says so at the first call (a study's `running: cancel`), the
 *   run is also marked cancelled for the runners (`cancelMarks.ts`: the `CancelMarks` in
 *   context, else `assay_meta` rows on the Postgres `SqlClient` in context): its running
 *   pipelines stop at their next task boundary (a call under way commits first) and settle
 *   `interrupted`, resumable; they are told `ended` when seen so. Once the run is closed, the
 *   marks no pipeline can read any more are pruned (`CancelMarksService.prune`: those of every
 *   closed run none of whose pipelines runs under it).
 *
 * @internal
 */
import type { WorkflowEngine } from "@effect/workflow/WorkflowEngine"
import { Cause, Chunk, Clock, Context, Deferred, Effect, Exit, Fiber, FiberId, FiberSet, Option, Predicate, Stream } from "effect"
import { ConfigError } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type { PipelineRecord } from "../../../domain/Records.js"
import { schemaCodecName } from "../../../domain/Codec.js"
import type * as Runner from "../../Runner.js"
import { Store, type StoreService } from "../../Store.js"
import { decodePayload } from "../export.js"
import { makeReport } from "../runner/report.js"
import { memberMetricName } from "../suite/metric.js"
import { sumFigures, zeroFigures } from "../store/shared.js"
import * as CancelMarks from "./cancelMarks.js"
import * as Submit from "./submit.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * What the cluster-backed runner passes to every submission: `maxAdmitted`, `pollInterval`,
 * `label`, `notes`, `meta`, the progress/warning callbacks, and the run's stop rules
 * `stopAfterFailures` / `stopAfter` (a study's `run.stopAfterFailures` / `run.stopAfter`: they
 * stop admission, the run ends `interrupted` with `stopReason` `stop_after_failures` /
 * `stop_after`, as the embedded `Runner` closes such a run; see `Submit.SubmitOptions`).
 *
 * @internal
 */
export type SubmitRunnerOptions = Pick<
  Submit.SubmitOptions,
  | "maxAdmitted"
  | "window"
  | "pollInterval"
  | "label"
  | "notes"
  | "meta"
  | "onProgress"
  | "onWarning"
  | "noRunnerAfter"
  | "stopAfterFailures"
  | "stopAfter"
>

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** A pipeline's final output as stored (JSON of a Schema-encoded output, else as exported). */
const finalOutput = (store: StoreService, pipelineId: PipelineId) =>
  Effect.map(store.loadBundles([pipelineId], { payloads: "final", artifacts: "final", tasks: false }), (bundles) => {
    const b = bundles.get(pipelineId)
    const a = b?.artifacts.find((x) => x.artifact.active && x.artifact.seq >= 0 && x.artifact.isFinal)
    if (a === undefined) return Option.none<unknown>()
    if (a.payload !== undefined && a.artifact.codec === schemaCodecName) {
      try {
        return Option.some<unknown>(JSON.parse(utf8.decode(a.payload)))
      } catch {
        return Option.none<unknown>()
      }
    }
    return Option.some(decodePayload(a.artifact, a.payload))
  })

const toStream = <S, E, R>(source: Runner.SpecSource<any, E, R>): Stream.Stream<S, E, R> => {
  if (Predicate.hasProperty(source, Stream.StreamTypeId)) return source as unknown as Stream.Stream<S, E, R>
  if (Predicate.hasProperty(source, Symbol.asyncIterator)) {
    return Stream.fromAsyncIterable(source as AsyncIterable<S>, (e) => e as E)
  }
  return Stream.fromIterable(source as Iterable<S>)
}

/**
 * Makes the cluster-backed runner (see the module docs) over the `Store` and the cluster's
 * `WorkflowEngine` in context (resolved once: its methods have no requirements beyond the
 * source's).
 *
 * @internal
 */
export const make = (base: SubmitRunnerOptions = {}): Effect.Effect<Runner.RunnerService, never, Store | WorkflowEngine> =>
  Effect.gen(function*() {
    const env = yield* Effect.context<Store | WorkflowEngine>()
    const store = Context.get(env, Store)
    // where a cancel is marked for the runners (none: a cancel stops admission only)
    const marks = yield* CancelMarks.fromContext
    let latest: Runner.RunHandle<any> | undefined
    const going = new Set<Runner.RunHandle<any>>()

    const start = <S extends AnySpec, SE, SR>(source: Runner.SpecSource<S, SE, SR>, overrides?: Runner.RunOptions) =>
      Effect.gen(function*() {
        const hooks = overrides?.hooks
        const startedAt = yield* Clock.currentTimeMillis
        const runId: RunId = yield* Submit.makeRunId(startedAt)
        const maxAdmitted = overrides?.maxAdmitted ?? base.maxAdmitted
        let stopReason: string | null = null
        let stops = 0
        const stopped = yield* Deferred.make<void>()
        /**
         * Admission stops for good: the source is read no further (`interruptWhen`), and the
         * hooks' owner is told first, synchronously (`RunHooks.admissionStopped`): a trial
         * window woken by the `ended` told next, in a pull already under way, starts no trial
         * (it would settle `incomplete` where the embedded engine leaves it `not_started`).
         */
        let admissionOver = false
        const stopAdmission = () => {
          if (admissionOver) return
          admissionOver = true
          hooks?.admissionStopped?.()
          Deferred.unsafeDone(stopped, Exit.void)
        }
        const specOf = new Map<PipelineId, AnySpec>()
        const finished: Array<PipelineId> = []
        let last: Submit.SubmitProgress = {
          runId,
          admitted: 0,
          skipped: 0,
          succeeded: 0,
          failed: 0,
          interrupted: 0,
          refused: 0,
          running: 0,
          withheld: 0,
          followed: { running: 0, succeeded: 0, failed: 0, interrupted: 0, runIds: [] }
        }
        const onFinished = overrides?.onPipelineFinished
        /** The pipelines settled since the last poll, to `onPipelineFinished` (each once). */
        const drainFinished = Effect.uninterruptible(Effect.gen(function*() {
          if (onFinished === undefined) return
          while (finished.length > 0) {
            const id = finished.shift()!
            const rows = yield* store.getPipelines([id]).pipe(Effect.orElseSucceed(() => new Map<PipelineId, PipelineRecord>()))
            const record = rows.get(id)
            if (record === undefined) continue
            const output = record.state === "succeeded"
              ? yield* finalOutput(store, id).pipe(Effect.orElseSucceed(() => Option.none<unknown>()))
              : Option.none<unknown>()
            yield* onFinished(record, output).pipe(
              Effect.catchAllCause((cause) => Effect.logWarning(`the finished-pipeline callback failed: ${Cause.pretty(cause)}`))
            )
          }
        }))
        // every spec read is known until its end is told (admitted and settled, refused by the
        // gate, or withheld by a stop)
        const gated: Stream.Stream<AnySpec, SE, SR> = Stream.mapChunks(
          Stream.interruptWhen(toStream<AnySpec, SE, SR>(source), Deferred.await(stopped)),
          (chunk) => {
            for (const spec of chunk) specOf.set(spec.pipelineId, spec)
            return chunk
          }
        )
        /**
         * The settled pipelines whose end waits for their stored attempts (`settledAttempts`:
         * a study's budgets meter them): told in order, the attempts first, then the failure
         * and the end, so that the window's next decision sees what they used.
         */
        /**
         * The run each followed pipeline runs under (`onAdmitted`'s `runsUnder`: a pipeline
         * running under an earlier run when admitted); the others run under `runId`. Its cancel
         * mark and its attempts are that run's (review37 F5).
         */
        const runsUnder = new Map<PipelineId, RunId>()
        const runOf = (id: PipelineId): RunId => runsUnder.get(id) ?? runId
        const meterAttempts = hooks?.settledAttempts
        const toMeter: Array<{ readonly spec: AnySpec; readonly failed: boolean }> = []
        const metering = yield* Effect.makeSemaphore(1)
        const drainSettled = metering.withPermits(1)(Effect.uninterruptible(Effect.gen(function*() {
          if (meterAttempts === undefined) return
          while (toMeter.length > 0) {
            const { failed, spec } = toMeter.shift()!
            const attempts = yield* Stream.runCollect(store.streamAttempts({ pipelineId: spec.pipelineId, runId: runOf(spec.pipelineId) })).pipe(
              Effect.map(Chunk.toReadonlyArray),
              Effect.catchAll((e) =>
                Effect.as(Effect.logWarning(`could not read the attempts of ${spec.pipelineId} (its usage is not metered): ${e.message}`), [])
              )
            )
            yield* meterAttempts(spec, attempts)
            if (failed) hooks?.failureDecided?.(spec)
            hooks?.ended?.(spec)
          }
        })))
        // the start gate, asked once there is room to admit the spec (the usage of the
        // pipelines settled before it metered first): a spec it refuses is left out, its end told
        const startGate = hooks?.startGate
        const admitGate = startGate === undefined ? undefined : (spec: AnySpec) =>
          Effect.zipRight(
            drainSettled,
            Effect.map(startGate(spec), (reason) => {
              if (reason === undefined) return true
              specOf.delete(spec.pipelineId)
              hooks?.ended?.(spec)
              return false
            })
          )
        /**
         * A pipeline's own cancel (`RunHooks.cancelWhen`: a trial's time budget): watched from
         * its admission until it settles; when it completes first, the pipeline is marked
         * cancelled for the runners (`cancelMarks.ts`, `markPipeline`), which stop it at its next
         * task boundary and settle it `interrupted` (its checkpoints kept), and a
         * `pipeline.cancelled` event records the reason, as the embedded engine records it.
         */
        const cancelWhen = hooks?.cancelWhen
        const markPipeline = marks?.markPipeline
        const watches = new Map<PipelineId, Deferred.Deferred<void>>()
        const runWatch = cancelWhen === undefined || markPipeline === undefined ? undefined : yield* FiberSet.makeRuntime<never>()
        const watchCancel = runWatch === undefined ? undefined : (spec: AnySpec) => {
          const cancel = cancelWhen!(spec)
          if (cancel === undefined) return
          const id = spec.pipelineId
          const settled = Deferred.unsafeMake<void>(FiberId.none)
          watches.set(id, settled)
          runWatch(Effect.raceFirst(
            Deferred.await(settled),
            Effect.flatMap(cancel, (reason) =>
              Effect.zipRight(
                markPipeline!(runOf(id), id, reason),
                Effect.flatMap(Clock.currentTimeMillis, (ts) => store.emitEvent({ kind: "pipeline.cancelled", pipelineId: id, runId, data: { reason }, ts }))
              ).pipe(
                Effect.catchAll((e) => Effect.logWarning(`pipeline ${id} cannot be cancelled (it runs to its end): ${e.message}`))
              ))
          ))
        }
        const unwatch = (id: PipelineId) => {
          const settled = watches.get(id)
          if (settled === undefined) return
          watches.delete(id)
          Deferred.unsafeDone(settled, Exit.void)
        }
        /** The reason the submission closed the run `interrupted` with (`closeAs`), if it asked. */
        let closedAs: string | undefined = undefined
        const submission = Submit.submit(gated, {
          ...base,
          runId,
          ...(maxAdmitted === undefined ? {} : { maxAdmitted }),
          ...(overrides?.label === undefined ? {} : { label: overrides.label }),
          admitAsTheyCome: true,
          mayAdmit: () => stops === 0,
          ...(admitGate === undefined ? {} : { startGate: admitGate }),
          // a spec read but not admitted (a stop rule or a stop came first) ended without a
          // row, as one the start gate refused: a window waiting for its trial's pipelines to
          // end goes on (and gives its next specs, which the stopped admission withholds too)
          onWithheld: (spec) => {
            if (!specOf.delete(spec.pipelineId)) return
            hooks?.ended?.(spec)
          },
          onAdmitted: (spec, under) => {
            if (under !== runId) runsUnder.set(spec.pipelineId, under)
            watchCancel?.(spec)
          },
          // a stop, or a source its owner ended early (a study's drain), closes the run
          // interrupted, its `run.finished` event saying so
          // (asked once every settled pipeline's end was told: the owner's view is final)
          closeAs: Effect.zipRight(
            Effect.zipRight(drainSettled, drainFinished),
            Effect.sync(() => closedAs = stopReason ?? hooks?.closingStop?.())
          ),
          // a stop rule of the submitter (`stopAfterFailures`, `stopAfter`, a refusal) ends the
          // source's reading before the end of the pipeline that reached it is told: told
          // first, a trial window waiting for it would start the next trial (marking it
          // started) inside the pull the stop then withholds, and that trial would settle
          // `incomplete` where the embedded engine leaves it `not_started`
          onAdmissionStopped: stopAdmission,
          onSettled: (id, outcome) => {
            unwatch(id)
            const spec = specOf.get(id)
            if (spec === undefined) return
            specOf.delete(id)
            // an interrupted pipeline (a cancel: `cancelMarks.ts`) is not terminal: it ends, unfinished
            if (outcome === "succeeded" || outcome === "failed") finished.push(id)
            if (meterAttempts !== undefined && outcome !== "skipped") {
              toMeter.push({ spec, failed: outcome === "failed" })
              return
            }
            if (outcome === "failed") hooks?.failureDecided?.(spec)
            hooks?.ended?.(spec)
          },
          onProgress: (p) =>
            Effect.zipRight(
              Effect.sync(() => {
                last = p
              }),
              Effect.zipRight(
                Effect.zipRight(drainSettled, drainFinished),
                base.onProgress === undefined ? Effect.void : base.onProgress(p)
              )
            )
        }).pipe(Effect.provide(env))
        // a reader of this run's stored usage (a study without budgets: one query per trial;
        // one per earlier run when some of the pipelines are followed ones of that run)
        hooks?.accounting?.((ids) => {
          const byRun = new Map<RunId, Array<PipelineId>>()
          for (const id of ids) {
            const run = runOf(id)
            const group = byRun.get(run)
            if (group === undefined) byRun.set(run, [id])
            else group.push(id)
          }
          return Effect.map(
            Effect.forEach(Array.from(byRun), ([run, pipelineIds]) => store.pipelineAccounting({ runId: run, pipelineIds })),
            (groups) => groups.flat().reduce(sumFigures, zeroFigures())
          )
        })
        const fiber = yield* Effect.forkScoped(submission)
        /**
         * A cancel (the hooks' owner says so at the stop: `RunHooks.stopCancels`): the run is
         * marked for the runners (`cancelMarks.ts`), whose pipelines of it stop at their next
         * task boundary and settle `interrupted`. Without marks, the stop acts at admission only.
         */
        const markCancelled = (reason: string) =>
          marks === undefined || hooks?.stopCancels?.() !== true ? Effect.void : marks.mark(runId, reason).pipe(
            Effect.catchAll((e) => Effect.logWarning(`the run's pipelines cannot be cancelled (they run to their end): ${e.message}`))
          )
        const stop = (reason = "user") =>
          Effect.suspend(() => {
            stops++
            if (stops === 1) {
              stopReason = reason
              return Effect.zipRight(Effect.sync(stopAdmission), markCancelled(reason))
            }
            return stops === 2 ? Fiber.interrupt(fiber).pipe(Effect.asVoid) : Effect.void
          })
        const awaited = Effect.gen(function*() {
          const exit = yield* Fiber.await(fiber)
          yield* drainSettled
          yield* drainFinished
          going.delete(handle)
          if (Exit.isFailure(exit) && !Exit.isInterrupted(exit)) return yield* Effect.failCause(exit.cause)
          const report = Exit.isSuccess(exit) ? exit.value : undefined
          const endedAt = yield* Clock.currentTimeMillis
          // the submission closed the run (its row and its `run.finished` event): with the stop's
          // reason when the stop came first (`closeAs`), `interrupted` with a stop rule of its
          // own, or `completed`; a stop told once it had closed the run stopped nothing, and the
          // run stays as closed. Interrupted or failed, the submission closed it `interrupted`.
          const interrupted = report === undefined || report.status === "interrupted"
          const reason = report === undefined ? stopReason ?? "user" : report.stopReason ?? closedAs ?? null
          // the run is closed: the marks no pipeline can read any more go (this run's, once none
          // of its pipelines runs under it, and those of earlier runs closed so since)
          if (marks?.prune !== undefined) {
            yield* marks.prune().pipe(
              Effect.catchAll((e) => Effect.logDebug(`the cancel marks were not pruned (the next run's close prunes them): ${e.message}`))
            )
          }
          const stats = yield* store.stats(runId)
          return makeReport({
            runId,
            status: interrupted ? "interrupted" : "completed",
            startedAt,
            durationMs: endedAt - startedAt,
            stats,
            skipped: report?.skipped ?? last.skipped,
            repairFailures: 0,
            leasesLeaked: 0,
            retries: 0,
            handoffsTotal: 0,
            handoffsBudgeted: 0,
            stopReason: reason,
            heldByOtherRuns: [],
            staleAfterMs: 0
          })
        })
        const cached = yield* Effect.cached(awaited)
        const handle: Runner.RunHandle<SE> = {
          runId,
          stats: Effect.sync(() => liveStats(last, stops > 0, maxAdmitted ?? Submit.DEFAULT_MAX_ADMITTED)),
          stop,
          reportMetric: (name, value, options) =>
            Effect.gen(function*() {
              if (options?.pipelineId != null && options.experiment !== undefined) {
                return yield* new ConfigError({
                  message: "reportMetric: give a pipelineId or an experiment, not both",
                  issues: [{ path: "experiment", message: "not with a pipelineId" }]
                })
              }
              yield* store.reportMetric({
                runId,
                pipelineId: options?.pipelineId ?? null,
                name: options?.experiment === undefined ? name : memberMetricName(options.experiment, name),
                value,
                label: options?.label ?? null,
                ...(options?.display === undefined ? {} : { display: options.display }),
                updatedAt: yield* Clock.currentTimeMillis
              })
            }),
          await: cached as Effect.Effect<Runner.RunReport, Runner.RunError | SE>
        }
        going.add(handle)
        latest = handle
        return handle
      })

    const service: Runner.RunnerService = {
      start: start as Runner.RunnerService["start"],
      run: ((source: Runner.SpecSource<AnySpec, any, any>, overrides?: Runner.RunOptions) =>
        Effect.scoped(Effect.flatMap(start(source, overrides), (h) => h.await))) as unknown as Runner.RunnerService["run"],
      stats: Effect.suspend(() => latest === undefined ? Effect.succeed(liveStats(undefined, false, base.maxAdmitted ?? Submit.DEFAULT_MAX_ADMITTED)) : latest.stats),
      stop: (reason) => Effect.forEach(Array.from(going), (h) => h.stop(reason), { discard: true }),
      reportMetric: (name, value, options) =>
        latest === undefined
          ? Effect.fail(new ConfigError({ message: "reportMetric: no run has started", issues: [{ path: "run", message: "no run" }] }))
          : latest.reportMetric(name, value, options)
    }
    return service
  })

/** The live figures the submitter knows: admitted, settled, running (no worker, pool or retry figures: the runners'). */
const liveStats = (p: Submit.SubmitProgress | undefined, stopping: boolean, maxAdmitted: number): Runner.LiveStats => ({
  runId: p?.runId ?? null,
  stopping,
  inFlight: p?.running ?? 0,
  delayed: 0,
  admitted: p?.running ?? 0,
  maxAdmitted,
  concurrency: 0,
  counters: {
    admitted: p?.admitted ?? 0,
    succeeded: p?.succeeded ?? 0,
    failed: p?.failed ?? 0,
    interrupted: p?.interrupted ?? 0,
    skipped: p?.skipped ?? 0,
    retries: 0,
    leasesLeaked: 0,
    repairFailures: 0,
    handoffs: 0
  },
  peakInFlight: 0,
  peakAdmitted: 0,
  pools: {}
})
