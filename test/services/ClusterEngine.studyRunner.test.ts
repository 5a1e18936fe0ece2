/**
 * The `Runner` backed by the cluster submitter (`services/internal/cluster/submitRunner.ts`),
 * what a study's driver runs on with `--engine cluster`: `Suite.start` with a trial window runs
 * unchanged on it. In one process (`TestRunner`, memory stores), as ClusterEngine.stops.test.ts.
 *
 * - a window of one member at a time: the next member starts only once every pipeline of the
 *   previous one settled (the submitter follows the rows while the window's source waits:
 *   `admitAsTheyCome`; without it the source and the follow wait for each other forever);
 * - the window's start gate closes admission: a refused spec gets no row, and counts as ended;
 * - `stop`: the first stops admission (the admitted pipelines end), the run ends `interrupted`
 *   with the stop's reason;
 * - a study's `run.stopAfterFailures` (issue 17, pg17ae): `study run --engine cluster` no longer
 *   refuses it and hands it to the submitter (`ClusterStudy.submitterOptions`); a study run on
 *   the submitter stops admitting once that many of its pipelines failed, and settles
 *   `interrupted` with the trials after it not started, as on the embedded engine;
 * - a runner's study catalog grows (`catalogFromStreamReloading`): a pipeline it does not know
 *   is looked up again in the study's trials once the confirmation trials recorded on the
 *   cluster changed (test/cli/cluster-study.test.ts runs `study confirm --engine cluster`).
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as TestRunner from "@effect/cluster/TestRunner"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, Runtime, Schedule, Stream } from "effect"
import * as ClusterStudy from "../../src/cli/ClusterStudy.js"
import * as StudyRunCli from "../../src/cli/StudyRun.js"
import type { LoadedSuite } from "../../src/config/internal/suite.js"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import { catalogFromStreamReloading } from "../../src/services/internal/cluster/workflow.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as CancelMarks from "../../src/services/internal/cluster/cancelMarks.js"
import * as SubmitRunner from "../../src/services/internal/cluster/submitRunner.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import type * as Study from "../../src/services/Study.js"
import * as StudyRun from "../../src/services/Study.js"
import * as StudyCatalog from "../../src/services/StudyCatalog.js"
import * as Suite from "../../src/services/Suite.js"
import type { AnySpec } from "../support/clusterRunner.js"
import { llmPool, makeStudy, studyEnv } from "./studyFixture.js"
import { fakeCatalog } from "./suiteFixture.js"

/**
 * A runner host in this process over a memory store, for `specs`; `marks`: with cancel marks in
 * memory (shared with a submitter built over the host), read every 10 ms.
 */
const hostOf = (
  specs: ReadonlyArray<AnySpec>,
  pools: ReadonlyArray<typeof llmPool> = [],
  marks: boolean | Layer.Layer<CancelMarks.CancelMarks> = false
) => {
  const engine = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))
  const services = Layer.mergeAll(
    MemoryStore.layer(),
    Pool.layer(pools),
    NodeContext.layer,
    marks === false ? Layer.empty : marks === true ? CancelMarks.layerMemory : marks
  )
  return ClusterEngine.workflowLayer({ concurrency: 8, resourcesEvery: "1 second", ...(marks !== false ? { cancelEvery: Duration.millis(10) } : {}) }).pipe(
    Layer.provideMerge(engine),
    Layer.provideMerge(services),
    Layer.provide(ClusterEngine.catalogLayer(specs))
  )
}

const numbers = (n: number) => Array.from({ length: n }, (_, i) => i)
const echo = Task.sync("echo", (n: number) => n)

/** A suite of three members of `n` pipelines each, the specs the runners host, and the layers. */
const setup = (n: number) =>
  Effect.gen(function*() {
    const members = ["a", "b", "c"].map((id) => Suite.member(id, () => Pipeline.make(`p-${id}`, echo).map(numbers(n)), { definitionDigest: id }))
    const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: members })
    const catalog = fakeCatalog("s").pipe(Layer.provide(MemoryStore.layer()))
    const all = yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))
    const hosted = Chunk.toReadonlyArray(all) as ReadonlyArray<AnySpec>
    const runner = Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", maxAdmitted: 2, window: 1 }))
    return { suite, hosted, layer: runner.pipe(Layer.provideMerge(hostOf(hosted)), Layer.merge(catalog)) }
  })

describe("ClusterEngine: the submitter as a Runner (in process)", () => {
  it.live("a trial window of one member at a time: each member starts once the previous one's pipelines settled; every pipeline runs once", () =>
    Effect.gen(function*() {
      const { hosted, layer, suite } = yield* setup(4)
      const log: Array<string> = []
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const handle = yield* Suite.start(suite, {
          window: {
            active: 1,
            mayStart: () => Effect.succeed(true),
            mayAdmit: () => Effect.succeed(true),
            observe: {
              memberStarted: (id) => Effect.sync(() => log.push(`start ${id}`)),
              pipelineSettled: (id) => void log.push(`settled ${id}`)
            }
          }
        })
        const report = yield* handle.await
        const rows = yield* (yield* Store).getPipelines(hosted.map((s) => s.pipelineId))
        return { report, rows }
      })).pipe(Effect.provide(layer))
      assert.strictEqual(result.report.status, "completed")
      assert.strictEqual(result.report.stats.byState.succeeded, 12)
      assert.strictEqual([...result.rows.values()].filter((r) => r.state === "succeeded").length, 12)
      // b starts after a's 4 pipelines settled, c after b's
      const at = (line: string) => log.indexOf(line)
      const lastSettled = (id: string) => log.lastIndexOf(`settled ${id}`)
      assert.deepStrictEqual(log.filter((l) => l.startsWith("start")), ["start a", "start b", "start c"])
      assert.strictEqual(log.filter((l) => l === "settled a").length, 4)
      assert.isAbove(at("start b"), lastSettled("a"), log.join(", "))
      assert.isAbove(at("start c"), lastSettled("b"), log.join(", "))
    }))

  it.live("the start gate closes admission: a refused spec has no row and counts as ended", () =>
    Effect.gen(function*() {
      const { hosted, layer, suite } = yield* setup(2)
      const ended: Array<string> = []
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const handle = yield* Suite.start(suite, {
          window: {
            active: 3,
            mayStart: () => Effect.succeed(true),
            mayAdmit: () => Effect.succeed(true),
            mayStartPipeline: (id) => Effect.succeed(id !== "b"),
            observe: { pipelineEnded: (id) => void ended.push(id) }
          }
        })
        const report = yield* handle.await
        const rows = yield* (yield* Store).getPipelines(hosted.map((s) => s.pipelineId))
        return { report, rows }
      })).pipe(Effect.provide(layer))
      assert.strictEqual(result.report.status, "completed")
      const memberOf = new Map(hosted.map((s) => [s.pipelineId as string, s.member!.experimentId]))
      const rowsOf = (id: string) => [...result.rows.values()].filter((r) => memberOf.get(r.pipelineId) === id)
      assert.strictEqual(rowsOf("b").length, 0, "b's specs were not admitted")
      assert.strictEqual(rowsOf("a").length, 2)
      assert.strictEqual(rowsOf("c").length, 2)
      // the gate started a's and c's pipelines, each ended once
      assert.deepStrictEqual(ended.slice().sort(), ["a", "a", "c", "c"])
    }))

  it.live("stop: admission stops, the admitted pipelines end, the run ends interrupted with the stop's reason", () =>
    Effect.gen(function*() {
      const { hosted, layer } = yield* setup(4)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const runner = yield* Runner.Runner
        const first = yield* Deferred.make<void>()
        // the source gives one spec, then waits until told to go on (it never is: the stop ends it)
        const source = Stream.concat(Stream.make(hosted[0]!), Stream.fromEffect(Effect.zipRight(Deferred.await(first), Effect.never)))
        const handle = yield* runner.start(source as Stream.Stream<Pipeline.PipelineSpec<any, any, any, never>>, {})
        // the first pipeline settles, then the run is stopped
        yield* Effect.repeat(handle.stats, { until: (s) => s.counters.succeeded === 1, schedule: Schedule.spaced("10 millis") })
        yield* handle.stop("enough")
        const report = yield* handle.await
        const rows = yield* (yield* Store).getPipelines(hosted.map((s) => s.pipelineId))
        const run = yield* (yield* Store).getRun(report.runId)
        return { report, rows, run }
      })).pipe(Effect.provide(layer))
      assert.strictEqual(result.report.status, "interrupted")
      assert.strictEqual(result.report.stopReason, "enough")
      assert.strictEqual(result.rows.size, 1)
      const run = Option.getOrThrow(result.run)
      assert.strictEqual(run.status, "interrupted")
      assert.strictEqual(run.stopReason, "enough")
    }))
})

describe("ClusterEngine: a stop told once the submission closed its run (fix17aj)", () => {
  it.live("stops nothing: the run's row, its run.finished event and the report all say completed", () =>
    Effect.gen(function*() {
      const { hosted, layer } = yield* setup(1)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const runner = yield* Runner.Runner
        let handle: Runner.RunHandle<never> | undefined
        const runtime = yield* Effect.runtime<never>()
        // the stop arrives as the submission closes the run (asked whether its owner ends it early)
        const hooks: Runner.RunHooks = {
          closingStop: () => {
            Runtime.runSync(runtime)(handle!.stop("late"))
            return undefined
          }
        }
        handle = yield* runner.start(Stream.make(hosted[0]!) as Stream.Stream<Pipeline.PipelineSpec<any, any, any, never>>, { hooks })
        const report = yield* handle.await
        const store = yield* Store
        const run = Option.getOrThrow(yield* store.getRun(report.runId))
        const finished = yield* store.events({ runId: report.runId, kind: "run.finished" })
        return { report, run, finished }
      })).pipe(Effect.provide(layer))
      const said = [
        result.report.status,
        result.run.status,
        ...result.finished.map((e) => (e.data as { status?: unknown }).status)
      ]
      // (they disagreed: the row and the report interrupted, the event completed)
      assert.deepStrictEqual(said, ["completed", "completed", "completed"])
    }))
})

describe("ClusterEngine: run.stopAfter on the submitter tells the trial window (fix17ai)", () => {
  it.live("stopAfter passed: admissionStopped is told, the source is read no further, the run ends interrupted stop_after", () =>
    Effect.gen(function*() {
      const { hosted } = yield* setup(1)
      const runner = Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", maxAdmitted: 2, window: 1, stopAfter: "100 millis" }))
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const told = yield* Deferred.make<void>()
        const ended: Array<string> = []
        // the source gives one spec, then waits (as a trial window waits for its trial to end)
        const source = Stream.concat(Stream.make(hosted[0]!), Stream.fromEffect(Effect.never))
        const handle = yield* (yield* Runner.Runner).start(source as Stream.Stream<Pipeline.PipelineSpec<any, any, any, never>>, {
          hooks: {
            admissionStopped: () => void Deferred.unsafeDone(told, Exit.void),
            ended: (spec) => void ended.push(spec.pipelineId)
          }
        })
        // told by the deadline, the one path of every stop rule (it was only told for stopAfterFailures)
        const wasTold = yield* Effect.timeout(Deferred.await(told), "20 seconds").pipe(Effect.isSuccess)
        if (!wasTold) yield* handle.stop("test")
        const report = yield* handle.await
        const rows = yield* (yield* Store).getPipelines(hosted.map((s) => s.pipelineId))
        return { wasTold, report, rows, ended }
      })).pipe(Effect.provide(runner.pipe(Layer.provideMerge(hostOf(hosted)))))
      assert.isTrue(result.wasTold, "admissionStopped was not told when stopAfter passed")
      assert.strictEqual(result.report.status, "interrupted")
      assert.strictEqual(result.report.stopReason, "stop_after")
      assert.strictEqual(result.rows.size, 1)
      assert.deepStrictEqual(result.ended, [hosted[0]!.pipelineId])
    }), 60_000)
})

/** The study's settled facts both engines must agree on: its status, each trial's status. */
const settledOf = (r: Study.StudyReport) => ({
  status: r.status,
  stopReason: r.run?.stopReason ?? null,
  trials: r.trials.map((t) => [t.trialId, t.status] as const)
})

describe("ClusterEngine: a study's run.stopAfterFailures on the submitter", () => {
  const args: ClusterStudy.ClusterStudyArgs = { file: "study.json", database: "postgres://x@h/db", maxAdmitted: Option.none(), quiet: true, cacheFlag: undefined }
  const loaded = (run: Record<string, unknown>) => ({ run }) as unknown as LoadedSuite

  it.effect("study run --engine cluster takes run.stopAfterFailures and run.stopAfter and passes them to the submitter", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ id: "fails", qualities: ["good", "broken"] })
      for (const run of [{ stopAfterFailures: 2 }, { stopAfter: "10 minutes" }]) {
        const exit = yield* Effect.exit(ClusterStudy.refuse(args, study, loaded({ trialConcurrency: 1, ...run })))
        assert.isTrue(Exit.isSuccess(exit), JSON.stringify(exit))
      }
      const options = ClusterStudy.submitterOptions({ stopAfterFailures: 2, stopAfter: "10 minutes", maxAdmitted: 8 }, Option.none())
      assert.strictEqual(options.stopAfterFailures, 2)
      assert.isTrue(Duration.equals(Duration.decode(options.stopAfter!), Duration.minutes(10)))
      assert.strictEqual(options.maxAdmitted, 8)
      assert.strictEqual(ClusterStudy.submitterOptions({ maxAdmitted: 8 }, Option.some(3)).maxAdmitted, 3)
    }))

  it.effect("study run --engine cluster takes a stop with running: cancel (issue 17 §3: the runners cancel the run's pipelines)", () =>
    Effect.gen(function*() {
      const cancelling = makeStudy({ id: "c", qualities: ["good"], stop: [{ when: "successfulTrials", count: 1, running: "cancel" }] }).study
      const exit = yield* Effect.exit(ClusterStudy.refuse(args, cancelling, loaded({})))
      assert.isTrue(Exit.isSuccess(exit), JSON.stringify(exit))
      // `study stop --cancel` on a cluster root says what a cancel is there
      assert.include(StudyRunCli.stopRequestedLine("s", "cancel", true), "at their next task boundary")
      assert.include(StudyRunCli.stopRequestedLine("s", "cancel", false), "are cancelled;")
    }))

  it.live("stopAfterFailures 2: the study stops admitting at the second failure and settles interrupted, as on the embedded engine", () =>
    stopsAtFailures(1))

  it.live("stopAfterFailures 2 reached while the window waits for the trial's admitted pipelines: the next trial is not started", () =>
    stopsAtFailures(8))
})

/**
 * A study of 2 variants (good, broken) × 2 repeats, one trial at a time, on the submitter with
 * `run.stopAfterFailures: 2` and `maxAdmitted`, and the same study on the embedded runner: both
 * settle `interrupted` with the same trial statuses. With `maxAdmitted` 1 the count is reached
 * while the submitter admits the broken trial's pipelines; with 8 each trial is admitted whole
 * and the count is reached while the source waits for the window (the next trial must not be
 * started then).
 */
const stopsAtFailures = (maxAdmitted: number) =>
    Effect.gen(function*() {
      // run order, one trial at a time: v01 r1 (good), v02 r1 (broken: its pipelines fail), v02 r2, v01 r2
      const fixture = () => makeStudy({ id: "fails", qualities: ["good", "broken"], repeats: 2, cases: 3, trialConcurrency: 1 })
      const cluster = fixture()
      const catalog = fakeCatalog("fails").pipe(Layer.provide(MemoryStore.layer()))
      const suite = cluster.study.suiteFor(1) as Suite.Suite<AnySpec, never, never>
      const all = yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))
      const hosted = Chunk.toReadonlyArray(all) as ReadonlyArray<AnySpec>
      const options = ClusterStudy.submitterOptions({ stopAfterFailures: 2 }, Option.some(maxAdmitted))
      const runner = Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", window: 1, ...options }))
      const env = Layer.mergeAll(runner, fakeCatalog("fails"), StudyCatalog.layerMemory).pipe(Layer.provideMerge(hostOf(hosted)))
      const { onCluster, rows } = yield* Effect.gen(function*() {
        const onCluster = yield* StudyRun.run(cluster.study)
        const rows = yield* (yield* Store).getPipelines(hosted.map((h) => h.pipelineId))
        return { onCluster, rows }
      }).pipe(Effect.provide(env))

      const embedded = fixture()
      const local = yield* StudyRun.run(embedded.study).pipe(
        Effect.provide(studyEnv("fails", { stopAfterFailures: 2, concurrency: 1, maxAdmitted: 1 }))
      )
      assert.strictEqual(onCluster.status, "interrupted", onCluster.summary())
      assert.strictEqual(onCluster.run?.stopReason, "stop_after_failures")
      // with whole trials admitted too: the trial window is told that admission stopped before
      // the failure's end wakes it (`RunHooks.admissionStopped`), so it starts no trial in a pull
      // already under way (it did about 1 run in 10 under load: that trial settled `incomplete`)
      assert.deepStrictEqual(settledOf(onCluster), settledOf(local))
      // the trials after the broken one never ran: nothing of theirs was admitted
      const ran = [...cluster.executions.keys()].map((k) => k.split("/")[0])
      assert.deepStrictEqual([...new Set(ran)].sort(), ["p1-v01-r1", "p1-v02-r1"], JSON.stringify([...cluster.executions]))
      // v01 r1's three, and v02 r1's first two (one at a time: its third was withheld, no row);
      // with 8 admitted at a time, all three, or two when the second failure is seen while the
      // third is being admitted (a stop known before its row is written withholds it)
      const states = [...rows.values()].map((r) => r.state).sort()
      const two = ["failed", "failed", "succeeded", "succeeded", "succeeded"]
      const three = ["failed", "failed", "failed", "succeeded", "succeeded", "succeeded"]
      if (maxAdmitted === 1) assert.deepStrictEqual(states, two)
      else assert.oneOf(JSON.stringify(states), [JSON.stringify(two), JSON.stringify(three)])
    })

describe("ClusterEngine: a runner's study catalog grows with the recorded confirmation trials", () => {
  it.effect("a miss asks for the newer source once it changed; a known id never does", () =>
    Effect.gen(function*() {
      const specsOf = (ids: ReadonlyArray<string>) => ids.map((id) => ({ pipelineId: id }) as unknown as AnySpec)
      let recorded: ReadonlyArray<string> = ["a", "b"]
      let served: ReadonlyArray<string> = recorded
      let reloads = 0
      let reads = 0
      const source = (ids: ReadonlyArray<string>) => Stream.suspend(() => (reads++, Stream.fromIterable(specsOf(ids))))
      const reload = Effect.sync(() => {
        reloads++
        if (recorded === served) return Option.none()
        served = recorded
        return Option.some(source(served))
      })
      const catalog = yield* catalogFromStreamReloading(source(served), (e: never) => e, reload)
      assert.isTrue(Option.isSome(yield* catalog.lookup("a")))
      assert.strictEqual(reloads, 0, "a known id does not reload")
      // not recorded yet: one reload asked, nothing newer
      assert.isTrue(Option.isNone(yield* catalog.lookup("c")))
      assert.deepStrictEqual([reloads, reads], [1, 1])
      // recorded (a confirmation after the runner started): the miss reads the newer source
      recorded = ["a", "b", "c"]
      const c = yield* catalog.lookup("c")
      assert.strictEqual(Option.getOrThrow(c).pipelineId, "c")
      assert.deepStrictEqual([reloads, reads], [2, 2])
      assert.isTrue(Option.isSome(yield* catalog.lookup("c")))
      assert.isTrue(Option.isSome(yield* catalog.lookup("b")))
      assert.deepStrictEqual([reloads, reads], [2, 2])
    }))
})

describe("ClusterEngine: what a study's cancel does on a submitter without cancel marks (study stop --cancel)", () => {
  it.live("a cancel stops admission at once: the admitted pipelines finish (no row left running), the trials cut short settle cancelled", () =>
    Effect.gen(function*() {
      // 2 trials at once of 6 pipelines, each holding an llm lease for 150 ms; one admitted at a time
      const { executions, study } = makeStudy({ id: "cancel", qualities: ["good"], repeats: 2, cases: 6, trialConcurrency: 2, leases: true, callMs: 150 })
      const catalog = fakeCatalog("cancel").pipe(Layer.provide(MemoryStore.layer()))
      const suite = study.suiteFor(1) as Suite.Suite<AnySpec, never, never>
      const hosted = Chunk.toReadonlyArray(yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))) as ReadonlyArray<AnySpec>
      const runner = Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", window: 1, maxAdmitted: 1 }))
      const env = Layer.mergeAll(runner, fakeCatalog("cancel"), StudyCatalog.layerMemory).pipe(Layer.provideMerge(hostOf(hosted, [llmPool])))
      const { report, rows } = yield* Effect.gen(function*() {
        const studies = yield* StudyCatalog.StudyCatalog
        // `assay study stop --cancel` once the first pipeline ran
        yield* Effect.fork(Effect.zipRight(
          Effect.repeat(Effect.sync(() => executions.size), { until: (n) => n >= 1, schedule: Schedule.spaced("20 millis") }),
          Effect.flatMap(Effect.clockWith((c) => c.currentTimeMillis), (now) => studies.requestStop("cancel", { running: "cancel", by: "test" }, now))
        ))
        const report = yield* StudyRun.run(study)
        const rows = yield* (yield* Store).getPipelines(hosted.map((h) => h.pipelineId))
        return { report, rows }
      }).pipe(Effect.provide(env))
      assert.isBelow(executions.size, 12, "admission stopped")
      // every admitted pipeline ran to its end on the runners: none is left running or interrupted
      assert.deepStrictEqual([...new Set([...rows.values()].map((r) => r.state))], ["succeeded"])
      assert.strictEqual(rows.size, executions.size)
      assert.strictEqual(report.stop?.running, "cancel", report.summary())
      assert.deepStrictEqual([...new Set(report.trials.map((t) => t.status))], ["cancelled"], report.summary())
    }), 60_000)
})

/** A `Runner` that hands its run's source and hooks to `drive` (forked in the run's scope): the hooks' order, driven by hand. */
const scriptedRunner = (
  drive: (source: Stream.Stream<AnySpec, unknown>, hooks: Runner.RunHooks) => Effect.Effect<void, unknown>
): Runner.RunnerService => {
  const start = (source: unknown, overrides?: Runner.RunOptions) =>
    Effect.gen(function*() {
      yield* Effect.forkScoped(Effect.orDie(drive(source as Stream.Stream<AnySpec, unknown>, overrides?.hooks ?? {})))
      const handle: Runner.RunHandle<never> = {
        runId: "r-scripted" as RunId,
        stats: Effect.die("not used"),
        stop: () => Effect.void,
        reportMetric: () => Effect.void,
        await: Effect.die("not used")
      }
      return handle
    })
  return { start, run: () => Effect.die("not used"), stats: Effect.die("not used"), stop: () => Effect.void, reportMetric: () => Effect.void } as unknown as Runner.RunnerService
}

describe("ClusterEngine: the trial window starts no trial once admission stopped (issue 17 §3, the trial-start race)", () => {
  it.live("a pull under way when the runner says admission stopped ends the source: the next member is not started", () =>
    Effect.gen(function*() {
      const members = ["a", "b"].map((id) => Suite.member(id, () => Pipeline.make(`p-${id}`, echo).map([1]), { definitionDigest: id }))
      const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: members })
      const started: Array<string> = []
      const next = yield* Deferred.make<Exit.Exit<Chunk.Chunk<AnySpec>, Option.Option<unknown>>>()
      const runner = scriptedRunner((source, hooks) =>
        Effect.scoped(Effect.gen(function*() {
          const pull = yield* Stream.toPull(source)
          const first = Chunk.toReadonlyArray(yield* pull)
          assert.deepStrictEqual(first.map((s) => s.member?.experimentId), ["a"])
          // the next pull waits in the window for a's pipeline to settle (window of one)
          const pending = yield* Effect.fork(Effect.exit(pull))
          yield* Effect.yieldNow()
          // the cluster submitter's order when a's failure reaches stopAfterFailures: admission
          // stops first, then a's end is told (which wakes the pull under way)
          hooks.admissionStopped?.()
          hooks.ended?.(first[0]!)
          yield* Deferred.succeed(next, yield* Fiber.join(pending))
        }))
      )
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Suite.start(suite, {
          window: {
            active: 1,
            mayStart: () => Effect.succeed(true),
            mayAdmit: () => Effect.succeed(true),
            observe: { memberStarted: (id) => Effect.sync(() => void started.push(id)) }
          }
        })
        const exit = yield* Deferred.await(next)
        // the source ended (no chunk of b), and b was never started (not_started for a study)
        assert.isTrue(Exit.isFailure(exit) && Option.isNone(Option.flatten(Cause.failureOption(exit.cause))), String(exit))
      })).pipe(Effect.provide(Layer.merge(Layer.succeed(Runner.Runner, runner), fakeCatalog("s").pipe(Layer.provide(MemoryStore.layer())))))
      assert.deepStrictEqual(started, ["a"])
    }))
})

/** A study run's row in the store: its status and stop reason. */
const runRowOf = (runId: RunId) =>
  Effect.map(Effect.flatMap(Store, (s) => s.getRun(runId)), (row) => {
    const r = Option.getOrThrow(row)
    return { status: r.status, stopReason: r.stopReason }
  })

describe("ClusterEngine: a study run stopped by a drain closes its run interrupted (tester17af F5)", () => {
  /**
   * A study of one variant × 3 repeats, one trial at a time, each pipeline holding an llm
   * lease for 100 ms; `assay study stop` (a drain) once the first pipeline ran: the first
   * trial finishes, the other two are not started, and the run's row says `interrupted`
   * `study_stop:manual` (it said `completed`), on the submitter as on the embedded engine.
   */
  const drained = (engine: "cluster" | "embedded") =>
    Effect.gen(function*() {
      const { executions, study } = makeStudy({ id: "drain", qualities: ["good"], repeats: 3, cases: 3, trialConcurrency: 1, leases: true, callMs: 100 })
      const catalog = fakeCatalog("drain").pipe(Layer.provide(MemoryStore.layer()))
      const suite = study.suiteFor(1) as Suite.Suite<AnySpec, never, never>
      const hosted = Chunk.toReadonlyArray(yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))) as ReadonlyArray<AnySpec>
      const env = engine === "cluster"
        ? Layer.mergeAll(
          Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", window: 1, maxAdmitted: 1 })),
          fakeCatalog("drain"),
          StudyCatalog.layerMemory
        ).pipe(Layer.provideMerge(hostOf(hosted, [llmPool])))
        : studyEnv("drain", { concurrency: 1, maxAdmitted: 1 })
      return yield* Effect.gen(function*() {
        const studies = yield* StudyCatalog.StudyCatalog
        yield* Effect.fork(Effect.zipRight(
          Effect.repeat(Effect.sync(() => executions.size), { until: (n) => n >= 1, schedule: Schedule.spaced("5 millis") }),
          Effect.flatMap(Effect.clockWith((c) => c.currentTimeMillis), (now) => studies.requestStop("drain", { running: "drain", by: "test" }, now))
        ))
        const report = yield* StudyRun.run(study, { control: StudyRun.studyControl({ pollMs: 20 }) })
        return { report, row: yield* runRowOf(report.run!.runId) }
      }).pipe(Effect.provide(env))
    })

  for (const engine of ["cluster", "embedded"] as const) {
    it.live(`${engine}: the run's row is interrupted, study_stop:manual; the study settles stopped with results`, () =>
      Effect.gen(function*() {
        const { report, row } = yield* drained(engine)
        assert.strictEqual(report.status, "stopped_with_results", report.summary())
        assert.deepStrictEqual(report.trials.map((t) => t.status), ["succeeded", "not_started", "not_started"], report.summary())
        assert.deepStrictEqual(row, { status: "interrupted", stopReason: "study_stop:manual" })
        assert.strictEqual(report.run?.status, "interrupted")
      }), 60_000)
  }

  it.live("a stop that fired once every trial had ended stopped nothing: the run stays completed", () =>
    Effect.gen(function*() {
      // `successfulTrials: 1` with one trial: it fires when that trial ends, with nothing left
      const { study } = makeStudy({ id: "late", qualities: ["good"], repeats: 1, cases: 2, trialConcurrency: 1, stop: [{ when: "successfulTrials", count: 1 }] })
      const out = yield* Effect.gen(function*() {
        const report = yield* StudyRun.run(study)
        return { report, row: yield* runRowOf(report.run!.runId) }
      }).pipe(Effect.provide(studyEnv("late", { concurrency: 1 })))
      assert.deepStrictEqual(out.report.trials.map((t) => t.status), ["succeeded"], out.report.summary())
      assert.deepStrictEqual(out.row, { status: "completed", stopReason: null })
    }))
})

/** A study's settled facts with each trial's metered calls and tokens. */
const meteredOf = (r: Study.StudyReport) => ({
  ...settledOf(r),
  usage: r.trials.map((t) => [t.trialId, t.usage.calls, t.usage.tokens] as const)
})

describe("ClusterEngine: a study's budgets on the submitter (issue 17 §3)", () => {
  /**
   * A study of 2 variants × 2 repeats of 3 cases, one trial at a time, each case one call of
   * 100 tokens, with `budget`, on the submitter (one pipeline admitted at a time) and on the
   * embedded runner (one at a time): the same trial statuses and metered usage.
   */
  const both = (budget: Study.StudyInput["budget"], stop?: Study.StudyInput["stop"]) =>
    Effect.gen(function*() {
      const fixture = () =>
        makeStudy({ id: "budget", qualities: ["good", "bad"], repeats: 2, cases: 3, trialConcurrency: 1, leases: true, budget, ...(stop === undefined ? {} : { stop }) })
      const cluster = fixture()
      const catalog = fakeCatalog("budget").pipe(Layer.provide(MemoryStore.layer()))
      const suite = cluster.study.suiteFor(1) as Suite.Suite<AnySpec, never, never>
      const hosted = Chunk.toReadonlyArray(yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))) as ReadonlyArray<AnySpec>
      const env = Layer.mergeAll(
        Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", window: 1, maxAdmitted: 1 })),
        fakeCatalog("budget"),
        StudyCatalog.layerMemory
      ).pipe(Layer.provideMerge(hostOf(hosted, [llmPool])))
      const onCluster = yield* StudyRun.run(cluster.study).pipe(Effect.provide(env))
      const embedded = fixture()
      const local = yield* StudyRun.run(embedded.study).pipe(Effect.provide(studyEnv("budget", { concurrency: 1, maxAdmitted: 1 })))
      return { onCluster, local, clusterRuns: cluster.executions.size, localRuns: embedded.executions.size }
    })

  it.live("budget.perTrial.calls 2: each trial stops admitting at its second call's end, as the embedded start gate stops it", () =>
    Effect.gen(function*() {
      const { clusterRuns, local, localRuns, onCluster } = yield* both({ perTrial: { calls: 2 }, total: {} })
      assert.deepStrictEqual(meteredOf(onCluster), meteredOf(local), `${onCluster.summary()}\n---\n${local.summary()}`)
      assert.deepStrictEqual([...new Set(onCluster.trials.map((t) => t.status))], ["budget_exhausted"], onCluster.summary())
      assert.deepStrictEqual(onCluster.trials.map((t) => t.usage.calls), [2, 2, 2, 2])
      assert.strictEqual(clusterRuns, localRuns)
    }), 60_000)

  it.live("budget.total.tokens 500 with a budget stop: the study stops once its total is spent, as on the embedded engine", () =>
    Effect.gen(function*() {
      const { local, onCluster } = yield* both({ perTrial: {}, total: { tokens: 500 } }, [{ when: "budget" }, { when: "allTrialsTerminal" }])
      assert.deepStrictEqual(meteredOf(onCluster), meteredOf(local), `${onCluster.summary()}\n---\n${local.summary()}`)
      assert.strictEqual(onCluster.stop?.condition.when, "budget", onCluster.summary())
    }), 60_000)

  it.live("no budget: each trial's calls, tokens and cost are read from the stored attempts, the embedded meter's figures (fix17ai)", () =>
    Effect.gen(function*() {
      const { local, onCluster } = yield* both({ perTrial: {}, total: {} })
      const usage = (r: Study.StudyReport) => r.trials.map((t) => [t.trialId, t.status, t.usage.calls, t.usage.tokens, t.usage.costUsd] as const)
      assert.deepStrictEqual(usage(onCluster), usage(local), `${onCluster.summary()}\n---\n${local.summary()}`)
      // 3 cases, one call each (it was 0 on the cluster: the meter was installed with a budget only)
      assert.deepStrictEqual(onCluster.trials.map((t) => t.usage.calls), [3, 3, 3, 3], onCluster.summary())
      assert.isTrue(onCluster.trials.every((t) => t.usage.tokens > 0), onCluster.summary())
    }), 60_000)

  it.effect("study run --engine cluster takes calls, tokens, cost and time budgets and a budget stop", () =>
    Effect.gen(function*() {
      const args: ClusterStudy.ClusterStudyArgs = { file: "study.json", database: "postgres://x@h/db", maxAdmitted: Option.none(), quiet: true, cacheFlag: undefined }
      const loaded = ({ run: {} }) as unknown as LoadedSuite
      for (const budget of [{ perTrial: { calls: 10 }, total: {} }, { perTrial: { tokens: 10, costUsd: 1 }, total: { calls: 3, timeMs: 60_000 } }]) {
        const study = makeStudy({ id: "b", qualities: ["good"], budget, stop: [{ when: "budget" }] }).study
        const exit = yield* Effect.exit(ClusterStudy.refuse(args, study, loaded))
        assert.isTrue(Exit.isSuccess(exit), JSON.stringify(exit))
      }
      // a trial's time budget too: the runners stop the trial's pipelines (pipeline cancel marks)
      const timed = makeStudy({ id: "t", qualities: ["good"], budget: { perTrial: { timeMs: 1000 }, total: {} } }).study
      const t = yield* Effect.exit(ClusterStudy.refuse(args, timed, loaded))
      assert.isTrue(Exit.isSuccess(t), JSON.stringify(t))
    }))
})

describe("ClusterEngine: study stop --cancel on the runners (issue 17 §3, cancel marks)", () => {
  /**
   * One trial at a time of 2 pipelines, each `score` then 3 steps of 300 ms, 2 admitted at a
   * time; the runner host and the submitter share cancel marks in memory (read every 10 ms).
   * `assay study stop --cancel` once a first step began: the running trial's pipelines stop at
   * their next task boundary, settle `interrupted` with their committed tasks kept, the trial
   * settles `cancelled`, the next trial is not started, and the run's row is `interrupted`.
   * (A resume of such rows, re-admitted, needs the durable engine: `TestRunner` does not run a
   * cleared workflow again; see ClusterEngine.cancel.test.ts.)
   */
  it.live("the running trial's pipelines stop at a task boundary, interrupted with their checkpoints; the trial settles cancelled", () =>
    Effect.gen(function*() {
      const { stepRuns, study } = makeStudy({
        id: "cx",
        qualities: ["good"],
        repeats: 2,
        cases: 2,
        trialConcurrency: 1,
        steps: { count: 3, ms: 300 }
      })
      const catalog = fakeCatalog("cx").pipe(Layer.provide(MemoryStore.layer()))
      const suite = study.suiteFor(1) as Suite.Suite<AnySpec, never, never>
      const hosted = Chunk.toReadonlyArray(yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))) as ReadonlyArray<AnySpec>
      // the marks in memory, and the prunes the submitter asks once the run is closed (fix17aj)
      let pruned = 0
      const marks = Layer.sync(CancelMarks.CancelMarks, () => ({
        ...CancelMarks.makeMemory(),
        prune: () => Effect.sync(() => (pruned++, 0))
      }))
      const env = Layer.mergeAll(
        Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", window: 1, maxAdmitted: 2 })),
        fakeCatalog("cx"),
        StudyCatalog.layerMemory
      ).pipe(Layer.provideMerge(hostOf(hosted, [], marks)))
      const out = yield* Effect.gen(function*() {
        const studies = yield* StudyCatalog.StudyCatalog
        yield* Effect.fork(Effect.zipRight(
          Effect.repeat(Effect.sync(() => stepRuns.size), { until: (n) => n >= 1, schedule: Schedule.spaced("5 millis") }),
          Effect.flatMap(Effect.clockWith((c) => c.currentTimeMillis), (now) => studies.requestStop("cx", { running: "cancel", by: "test" }, now))
        ))
        const first = yield* StudyRun.run(study, { control: StudyRun.studyControl({ pollMs: 20 }) })
        const rows = yield* (yield* Store).getPipelines(hosted.map((h) => h.pipelineId))
        const row = yield* runRowOf(first.run!.runId)
        const checkpoints = yield* Effect.forEach(hosted, (h) => (Effect.flatMap(Store, (st) => st.getArtifact(h.pipelineId, 0))))
        const finished = yield* (yield* Store).events({ runId: first.run!.runId, kind: "run.finished" })
        return { first, rows, row, checkpoints, finished }
      }).pipe(Effect.provide(env))
      const { checkpoints, finished, first, row, rows } = out
      assert.strictEqual(first.stop?.running, "cancel", first.summary())
      assert.deepStrictEqual(first.trials.map((t) => t.status), ["cancelled", "not_started"], first.summary())
      assert.deepStrictEqual(row, { status: "interrupted", stopReason: "study_stop:manual" })
      // the run closed, its marks are pruned (once)
      assert.strictEqual(pruned, 1)
      // the run's end event says so too (it said completed: the submitter closed it before the stop's reason was applied)
      assert.deepStrictEqual(
        finished.map((e) => [(e.data as { status?: unknown }).status, (e.data as { stopReason?: unknown }).stopReason]),
        [["interrupted", "study_stop:manual"]]
      )
      // the running trial's two pipelines: interrupted at a task boundary, before their last
      // step, their committed tasks kept; the next trial's were never admitted
      const states = [...rows.values()].map((r) => [r.state, r.nTasksDone] as const)
      assert.strictEqual(states.length, 2, JSON.stringify(states))
      // (the stop comes once one pipeline's first step began: that one committed its first task;
      // the other may not have reached its first commit yet under load, and then stops at 0)
      for (const [state, done] of states) {
        assert.strictEqual(state, "interrupted", JSON.stringify(states))
        assert.isBelow(done, 4, JSON.stringify(states))
      }
      assert.isTrue(states.some(([, done]) => done >= 1), JSON.stringify(states))
      // the last step never ran; each step ran once (a step under way at the cancel committed)
      assert.isFalse([...stepRuns.keys()].some((k) => k.endsWith("/step3")), JSON.stringify([...stepRuns]))
      for (const [k, n] of stepRuns) assert.strictEqual(n, 1, `step ${k} ran ${n} times`)
      // the interrupted pipelines keep their committed first task's checkpoint (a resume starts
      // after it); one stopped before its first commit has none
      const committed = hosted.filter((h) => (rows.get(h.pipelineId)?.nTasksDone ?? 0) >= 1)
      assert.isAtLeast(committed.length, 1)
      assert.strictEqual(checkpoints.filter(Option.isSome).length, committed.length)
    }), 60_000)
})

describe("ClusterEngine: a trial's time budget on the runners (issue 17 §3, pipeline cancel marks)", () => {
  /**
   * One variant × 2 repeats, one trial at a time, 2 pipelines a trial of `score` then 3 steps
   * of 400 ms, `budget.perTrial.time` 500 ms: the running trial's pipelines are cancelled
   * during their second step. On the submitter (cancel marks in memory, read every 10 ms) they
   * stop at the next task boundary (the step under way commits), settle `interrupted`, the
   * third step never runs; the trials and the study settle as on the embedded engine, whose
   * pipelines settle `interrupted` too.
   */
  it.live("the trial's pipelines stop at a task boundary, interrupted, and the trials settle as on the embedded engine", () =>
    Effect.gen(function*() {
      const fixture = () =>
        makeStudy({
          id: "tb",
          qualities: ["good"],
          repeats: 2,
          cases: 2,
          trialConcurrency: 1,
          steps: { count: 3, ms: 400 },
          budget: { perTrial: { timeMs: 500 }, total: {} }
        })
      const cluster = fixture()
      const catalog = fakeCatalog("tb").pipe(Layer.provide(MemoryStore.layer()))
      const suite = cluster.study.suiteFor(1) as Suite.Suite<AnySpec, never, never>
      const hosted = Chunk.toReadonlyArray(yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))) as ReadonlyArray<AnySpec>
      const env = Layer.mergeAll(
        Layer.effect(Runner.Runner, SubmitRunner.make({ pollInterval: "10 millis", window: 1, maxAdmitted: 2 })),
        fakeCatalog("tb"),
        StudyCatalog.layerMemory
      ).pipe(Layer.provideMerge(hostOf(hosted, [], true)))
      const rowsOf = (report: Study.StudyReport) =>
        Effect.gen(function*() {
          const store = yield* Store
          const rows = yield* store.getPipelines(hosted.map((h) => h.pipelineId))
          const events = yield* store.events({ runId: report.run!.runId })
          return {
            states: [...rows.values()].map((r) => [r.state, r.nTasksDone] as const),
            cancelled: events.filter((e) => e.kind === "pipeline.cancelled").length
          }
        })
      const onCluster = yield* Effect.flatMap(StudyRun.run(cluster.study), (r) => Effect.map(rowsOf(r), (rows) => ({ r, rows }))).pipe(Effect.provide(env))
      const embedded = fixture()
      const local = yield* Effect.flatMap(StudyRun.run(embedded.study), (r) => Effect.map(rowsOf(r), (rows) => ({ r, rows }))).pipe(
        Effect.provide(studyEnv("tb", { concurrency: 2, maxAdmitted: 2 }))
      )
      const both = `${onCluster.r.summary()}\n---\n${local.r.summary()}`
      assert.deepStrictEqual(settledOf(onCluster.r), settledOf(local.r), both)
      // every pipeline of both trials: interrupted after its first step began, before its last
      for (const { rows } of [onCluster, local]) {
        assert.strictEqual(rows.states.length, 4, JSON.stringify(rows.states))
        for (const [state, done] of rows.states) {
          assert.strictEqual(state, "interrupted", JSON.stringify(rows.states))
          assert.isAtLeast(done, 1, JSON.stringify(rows.states))
          assert.isBelow(done, 4, JSON.stringify(rows.states))
        }
        assert.strictEqual(rows.cancelled, 4)
      }
      // on the runners, a step under way at the cancel commits, and the third step never runs
      assert.isFalse([...cluster.stepRuns.keys()].some((k) => k.endsWith("/step3")), JSON.stringify([...cluster.stepRuns]))
      for (const [k, n] of cluster.stepRuns) assert.strictEqual(n, 1, `step ${k} ran ${n} times`)
    }), 60_000)
})
