/**
 * The stop rules on the cluster engine (issue 17): the submitter's `stopAfterFailures` (an
 * experiment's `run.stopAfterFailures` / `--stop-after-failures`, a suite's suite-wide one)
 * stops admitting once that many pipelines failed, and a suite member's own `stopAfterFailures`
 * (`Suite.pipelines`' `failuresReached` with the submitter's `mayAdmit`) stops admitting that
 * member only. The submitter's `stopAfter` (`run.stopAfter` / `--stop-after`) stops admitting
 * once that much of the `Clock`'s time has passed (TestClock here). In one process
 * (`TestRunner`, memory stores), as ClusterEngine.control.test.ts.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as TestRunner from "@effect/cluster/TestRunner"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
import { FatalError } from "../../src/domain/Errors.js"
import type { RunId } from "../../src/domain/Ids.js"
import type * as InternalSubmit from "../../src/services/internal/cluster/submit.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"
import * as Suite from "../../src/services/Suite.js"
import { SuiteCatalog } from "../../src/services/SuiteCatalog.js"
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
/** Fails at once, for good (no retry). */
const boom = Task.make("boom", { retry: { maxAttempts: 1 } }, (_: number) => Effect.fail(new FatalError({ message: "boom" })))
const echo = Task.sync("echo", (n: number) => n)
const badSpecs: ReadonlyArray<AnySpec> = numbers(24).map((n) => Pipeline.make("bad", boom).bind(n))

describe("ClusterEngine: stop rules (in process)", () => {
  it.live("stopAfterFailures: admission stops once that many pipelines failed; the admitted ones end; the run closes interrupted (stop_after_failures)", () =>
    Effect.gen(function*() {
      const specs = badSpecs
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), {
        pollInterval: "10 millis",
        maxAdmitted: 2,
        window: 1,
        stopAfterFailures: 2
      })
      assert.strictEqual(report.status, "interrupted")
      assert.strictEqual(report.stopReason, "stop_after_failures")
      assert.isAtLeast(report.failed, 2)
      // what was admitted before the count was seen (at most maxAdmitted beyond it) ended
      assert.isAtMost(report.admitted, 2 + 2)
      assert.strictEqual(report.failed, report.admitted)
      assert.strictEqual(report.running, 0)
      const store = yield* Store
      const rows = yield* store.getPipelines(specs.map((s) => s.pipelineId))
      assert.strictEqual(rows.size, report.admitted, "no row for a pipeline not admitted")
      const run = Option.getOrThrow(yield* store.getRun(report.runId))
      assert.strictEqual(run.status, "interrupted")
      assert.strictEqual(run.stopReason, "stop_after_failures")
    }).pipe(Effect.provide(hostOf(badSpecs))))

  it.live("a member's own stopAfterFailures stops admitting that member only; the other runs to its end", () =>
    Effect.gen(function*() {
      const failing = Suite.member("failing", () => Pipeline.make("bad", boom).map(numbers(24)), {
        definitionDigest: "f",
        stopAfterFailures: 2
      })
      const ok = Suite.member("ok", () => Pipeline.make("good", echo).map(numbers(12)), { definitionDigest: "o" })
      const suite = yield* Suite.make({ id: "s", outputRoot: "r", experiments: [failing, ok] })
      // the catalog keeps its records in a store of its own (the host's is the run's)
      const catalog = fakeCatalog("s").pipe(Layer.provide(MemoryStore.layer()))
      // what the runner hosts: the suite's specs, keyed into it
      const all = yield* Stream.runCollect(Suite.pipelines(suite, { runId: "r0" as RunId })).pipe(Effect.provide(catalog))
      const hosted = Chunk.toReadonlyArray(all) as ReadonlyArray<AnySpec>
      const failed = new Map<string, number>()
      const reached = (id: string) => id === "failing" && (failed.get(id) ?? 0) >= 2
      const memberOf = new Map(hosted.map((s) => [s.pipelineId as string, s.member!.experimentId]))
      const withheld: Array<string> = []
      const result = yield* Effect.gen(function*() {
        const specs = Suite.pipelines(suite, { runId: "r1" as RunId, failuresReached: reached }).pipe(
          Stream.provideService(SuiteCatalog, yield* SuiteCatalog)
        )
        const report = yield* ClusterEngine.submit(specs, {
          pollInterval: "10 millis",
          maxAdmitted: 2,
          window: 1,
          onSettled: (id, outcome) => {
            const m = memberOf.get(id)!
            if (outcome === "failed") failed.set(m, (failed.get(m) ?? 0) + 1)
          },
          mayAdmit: (spec) => {
            if (!reached(spec.member!.experimentId)) return true
            withheld.push(spec.pipelineId)
            return false
          }
        })
        const rows = yield* (yield* Store).getPipelines(hosted.map((s) => s.pipelineId))
        const facts = yield* (yield* SuiteCatalog).membership("r1" as RunId)
        return { report, rows, facts }
      }).pipe(Effect.provide(Layer.merge(hostOf(hosted), catalog)))
      const { facts, report, rows } = result
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(report.succeeded, 12, "the other member ran to its end")
      assert.isAtLeast(report.failed, 2)
      // the failing member's pipelines admitted after its 2nd failure was seen: at most the
      // window of maxAdmitted that was in flight then
      assert.isAtMost(report.failed, 2 + 2)
      const failingRows = [...rows.values()].filter((r) => memberOf.get(r.pipelineId) === "failing")
      assert.strictEqual(failingRows.length, report.failed, "no row for a pipeline of the member not admitted")
      assert.strictEqual(report.withheld, withheld.length)
      const f = facts.find((m) => m.experimentId === "failing")!
      assert.isFalse(f.sourceExhausted, "the member's source was read no further")
      assert.isBelow(f.admitted, 24)
      assert.isTrue(facts.find((m) => m.experimentId === "ok")!.sourceExhausted)
    }))

  /**
   * The submitter under the TestClock: its polls and its `stopAfter` timer wait on it. Ticks of
   * one poll (1 s) until `done` holds (at most `max` ticks: a hang fails the test, not the suite).
   */
  const tickUntil = (done: () => boolean, max = 1_000) =>
    Effect.gen(function*() {
      for (let i = 0; i < max && !done(); i++) {
        yield* TestClock.adjust("1 second")
        yield* Effect.yieldNow()
      }
      assert.isTrue(done(), "the condition held within the ticks")
    })

  /** `n` pipelines whose one task waits at `gate`, and the progress the submitter reports. */
  const gated = (n: number) =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const wait = Task.make("wait", (x: number) => Effect.as(Deferred.await(gate), x))
      const specs: ReadonlyArray<AnySpec> = numbers(n).map((x) => Pipeline.make("slow", wait).bind(x))
      const seen: Array<InternalSubmit.SubmitProgress> = []
      const options = {
        pollInterval: "1 second",
        maxAdmitted: 2,
        window: 1,
        stopAfter: "10 seconds",
        onProgress: (p: InternalSubmit.SubmitProgress) => Effect.sync(() => void seen.push(p))
      } as const
      return { gate, specs, seen, options }
    })

  it.effect("stopAfter: admission stops once the time has passed; the admitted pipelines end; the run closes interrupted (stop_after)", () =>
    Effect.gen(function*() {
      const { gate, options, seen, specs } = yield* gated(12)
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), options))
        // the first two are admitted and wait at the gate: no room for more
        yield* tickUntil(() => (seen.at(-1)?.admitted ?? 0) === 2)
        yield* TestClock.adjust("10 seconds")
        yield* Deferred.succeed(gate, undefined)
        yield* tickUntil(() => fiber.unsafePoll() !== null)
        const report = yield* Fiber.join(fiber)
        assert.strictEqual(report.status, "interrupted")
        assert.strictEqual(report.stopReason, "stop_after")
        assert.strictEqual(report.admitted, 2, "nothing admitted after the deadline")
        assert.strictEqual(report.succeeded, 2, "the admitted ones ran to their end")
        assert.isAbove(report.withheld, 0)
        const store = yield* Store
        const rows = yield* store.getPipelines(specs.map((s) => s.pipelineId))
        assert.strictEqual(rows.size, 2, "no row for a pipeline not admitted")
        const run = Option.getOrThrow(yield* store.getRun(report.runId))
        assert.strictEqual(run.status, "interrupted")
        assert.strictEqual(run.stopReason, "stop_after")
      }).pipe(Effect.provide(hostOf(specs)))
    }))

  it.effect("stopAfter: every spec read is admitted or withheld, a chunk in hand at the stop included (tester17ad F5)", () =>
    Effect.gen(function*() {
      const { gate, options, seen, specs } = yield* gated(12)
      const told: Array<string> = []
      yield* Effect.gen(function*() {
        // a source that gives its specs 3 at a time, as a suite's members' sources do
        let read = 0
        const source = Stream.rechunk(Stream.fromIterable(specs), 3).pipe(Stream.mapChunks((c) => {
          read += Chunk.size(c)
          return c
        }))
        const fiber = yield* Effect.fork(ClusterEngine.submit(source, {
          ...options,
          admitBatch: 2,
          onWithheld: (spec: AnySpec) => void told.push(spec.pipelineId)
        }))
        yield* tickUntil(() => (seen.at(-1)?.admitted ?? 0) === 2)
        yield* TestClock.adjust("10 seconds")
        yield* Deferred.succeed(gate, undefined)
        yield* tickUntil(() => fiber.unsafePoll() !== null)
        const report = yield* Fiber.join(fiber)
        assert.strictEqual(report.stopReason, "stop_after")
        assert.strictEqual(report.admitted, 2)
        assert.isAbove(report.withheld, 0)
        // the source was read up to the chunk in hand: 2 admitted, the rest of those chunks withheld
        assert.strictEqual(report.admitted + report.withheld, read, "every spec read is admitted or withheld")
        assert.strictEqual(told.length, report.withheld, "each withheld spec is told")
        assert.strictEqual(new Set(told).size, told.length)
      }).pipe(Effect.provide(hostOf(specs)))
    }))

  it.effect("stopAfter: a deadline passing once everything is admitted stops nothing (completed)", () =>
    Effect.gen(function*() {
      const { gate, options, seen, specs } = yield* gated(2)
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), options))
        yield* tickUntil(() => (seen.at(-1)?.admitted ?? 0) === 2)
        yield* TestClock.adjust("10 seconds")
        yield* Deferred.succeed(gate, undefined)
        yield* tickUntil(() => fiber.unsafePoll() !== null)
        const report = yield* Fiber.join(fiber)
        assert.strictEqual(report.status, "completed")
        assert.strictEqual(report.stopReason, null)
        assert.strictEqual(report.succeeded, 2)
      }).pipe(Effect.provide(hostOf(specs)))
    }))
})
