/**
 * Claiming a pipeline from a dead run records no attempt for what that run had in flight (issue
 * 18, F3): the store keeps no durable mark of an attempt's start, so the attempt may have run
 * or not begun (the pipeline only admitted, waiting for a worker slot or a retry's delay).
 * Instead one `pipeline.abandoned` event names the task, the dead run and the number that
 * attempt had: on a control pipeline the number reserved for it (the resume's own attempt takes
 * the next one, the reserved one is never reused), on a plain pipeline the number after the
 * dead run's recorded attempts of that task. When the records show that nothing was in flight
 * (the reserved number already has its row, the last attempt was not to be retried) nothing is
 * recorded. Before: an `Abandoned` attempt row per claimed pipeline (a fresh trial's resume
 * after kill -9 said 427 attempts for 299 tasks).
 *
 * The dead run is simulated on the store: a run stopped while its pipeline waited to retry
 * (the retry's number reserved, nothing running), its row then set back to `running` as a
 * kill -9 leaves it. The real kill -9 is in Runner.kill.test.ts and test/cli/run.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { RetryableError } from "../../src/domain/Errors.js"
import type { PipelineId, RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })

const stores = {
  memory: () => MemoryStore.layer(),
  sqlite: () => SqliteStore.layer({ filename: path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-abandoned-")), "s.db") })
}

const env = (store: keyof typeof stores) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false, heartbeat: "1 hour", staleAfter: "3 hours", grace: "1 second" }),
    Layer.mergeAll(stores[store](), Pool.layer([]))
  )

const attemptsOf = (pipelineId: PipelineId) =>
  Effect.flatMap(Store, (s) => Effect.map(Stream.runCollect(s.streamAttempts({ pipelineId })), (c) => Array.from(c)))

const abandonedOf = (pipelineId: PipelineId) =>
  Effect.flatMap(Store, (s) => Effect.map(s.events({ pipelineId, kind: "pipeline.abandoned" }), (es) => es.map((e) => [e.runId, e.data])))

/**
 * `flaky` fails its first attempt (retryable, retried after 1 minute) while `broken.on`; the
 * first run is stopped at 2 s, waiting to retry: attempt 2 is the next number and never ran.
 */
const scenario = (control: boolean, broken: { on: boolean }) => {
  const flaky = Task.make(
    "flaky",
    { retry: { maxAttempts: 5, base: "1 minute", jitter: "none" } },
    (n: number, ctx) =>
      broken.on && ctx.attempt === 1
        ? Effect.fail(new RetryableError({ message: "busy", errorClass: "upstream" }))
        : Effect.succeed(n)
  )
  const done = Task.sync("done", (n: number) => n + 1)
  const template = control
    ? Pipeline.fromTasks("abandon", [flaky, done], { control: { edges: { flaky: ["end"] } } })
    : Pipeline.fromTasks("abandon", [flaky, done])
  return template.bind(1)
}

describe("a claimed pipeline's attempt in flight: a pipeline.abandoned event, never an invented attempt row", () => {
  for (const store of ["memory", "sqlite"] as const) {
    it.effect(`${store}: control pipeline: the reserved number, the resume's attempt the next one`, () =>
      Effect.gen(function*() {
        const broken = { on: true }
        const spec = scenario(true, broken)
        const fiber = yield* Effect.fork(Runner.run([spec], { stopAfter: "2 seconds" }))
        for (let i = 0; i < 6; i++) {
          yield* settle
          yield* TestClock.adjust("500 millis")
        }
        const first = yield* Fiber.join(fiber)
        assert.strictEqual(first.stats.byState.interrupted, 1)
        const s = yield* Store
        // as a kill -9 leaves it: running, under a run that is gone
        yield* s.updatePipeline(spec.pipelineId, { state: "running", runId: "dead-run" as RunId, updatedAt: 0 })
        broken.on = false
        const resumed = yield* Runner.run([spec], { resume: true })
        assert.strictEqual(resumed.stats.byState.succeeded, 1)
        const rows = (yield* attemptsOf(spec.pipelineId)).filter((a) => a.taskName === "flaky")
        assert.deepStrictEqual(rows.map((a) => [a.attemptNo, a.outcome, a.errorType]), [
          [1, "failed", "RetryableError"],
          [3, "succeeded", null]
        ])
        assert.deepStrictEqual(yield* abandonedOf(spec.pipelineId), [
          [resumed.runId, { run: "dead-run", task: "flaky", seq: 0, attemptNo: 2 }]
        ])
      }).pipe(Effect.provide(env(store))))

    it.effect(`${store}: plain pipeline: the number after the dead run's attempts, in its task run`, () =>
      Effect.gen(function*() {
        const broken = { on: true }
        const spec = scenario(false, broken)
        const fiber = yield* Effect.fork(Runner.run([spec], { stopAfter: "2 seconds" }))
        for (let i = 0; i < 6; i++) {
          yield* settle
          yield* TestClock.adjust("500 millis")
        }
        const first = yield* Fiber.join(fiber)
        assert.strictEqual(first.stats.byState.interrupted, 1)
        const s = yield* Store
        // as a kill -9 leaves it: running under the first run (whose record says it ended)
        yield* s.updatePipeline(spec.pipelineId, { state: "running", runId: first.runId, updatedAt: 0 })
        broken.on = false
        const resumed = yield* Runner.run([spec], { resume: true })
        assert.strictEqual(resumed.stats.byState.succeeded, 1)
        const rows = (yield* attemptsOf(spec.pipelineId)).filter((a) => a.taskName === "flaky")
        assert.deepStrictEqual(rows.map((a) => [a.attemptNo, a.outcome, a.errorType]), [
          [1, "failed", "RetryableError"],
          [1, "succeeded", null]
        ])
        // the resume's attempt is in a task run of its own
        assert.notStrictEqual(rows[1]!.taskRunId, rows[0]!.taskRunId)
        assert.deepStrictEqual(yield* abandonedOf(spec.pipelineId), [
          [resumed.runId, { run: first.runId, task: "flaky", seq: 0, attemptNo: 2 }]
        ])
        // attempts are what ran and was recorded: flaky's two and done's one
        assert.strictEqual((yield* (yield* Store).stats(undefined)).attemptsTotal, 3)
      }).pipe(Effect.provide(env(store))))

    it.effect(`${store}: the records show nothing in flight (its last attempt failed for good): no abandoned row`, () =>
      Effect.gen(function*() {
        let broken = true
        const a = Task.make("a", (n: number) => broken ? Effect.fail(new RetryableError({ message: "x", errorClass: "upstream" })) : Effect.succeed(n))
        for (const control of [false, true]) {
          const template = control
            ? Pipeline.fromTasks(`ended-${control}`, [a, Task.sync("b", (n: number) => n)], { control: { edges: { a: ["end"] } } })
            : Pipeline.fromTasks(`ended-${control}`, [a, Task.sync("b", (n: number) => n)])
          const spec = template.bind(1)
          broken = true
          const first = yield* Runner.run([spec])
          assert.strictEqual(first.stats.byState.failed, 1)
          const s = yield* Store
          yield* s.updatePipeline(spec.pipelineId, { state: "running", runId: first.runId, updatedAt: 0 })
          broken = false
          assert.strictEqual((yield* Runner.run([spec], { resume: true })).stats.byState.succeeded, 1)
          const rows = (yield* attemptsOf(spec.pipelineId)).filter((x) => x.taskName === "a")
          assert.deepStrictEqual(
            rows.map((x) => [x.attemptNo, x.outcome]),
            [[1, "failed"], [control ? 2 : 1, "succeeded"]],
            control ? "control" : "plain"
          )
          assert.deepStrictEqual(yield* abandonedOf(spec.pipelineId), [])
        }
      }).pipe(Effect.provide(env(store))))
  }
})
