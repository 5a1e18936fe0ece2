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
 *   with the stop's reason.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as TestRunner from "@effect/cluster/TestRunner"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Layer, Option, Schedule, Stream } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SubmitRunner from "../../src/services/internal/cluster/submitRunner.js"
import * as Pool from "../../src/services/Pool.js"
import { Runner } from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import * as Suite from "../../src/services/Suite.js"
import type { AnySpec } from "../support/clusterRunner.js"
import { fakeCatalog } from "./suiteFixture.js"

/** A runner host in this process over a memory store, for `specs`. */
const hostOf = (specs: ReadonlyArray<AnySpec>) => {
  const engine = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))
  const services = Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)
  return ClusterEngine.workflowLayer({ concurrency: 8, resourcesEvery: "1 second" }).pipe(
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
    const runner = Layer.effect(Runner, SubmitRunner.make({ pollInterval: "10 millis", maxAdmitted: 2, window: 1 }))
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
        const runner = yield* Runner
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
