import { NodeContext } from "@effect/platform-node"
import { assert, describe, it, expect } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Clock, Effect, Exit, Fiber, Layer, Option, Schema, Stream, TestClock, Tracer } from "effect"
import { FatalError, RetryableError, StoreUnavailable } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import type { PipelineId } from "../../src/domain/Ids.js"
import { pid, rid } from "../support/ids.js"

const env = (options: Runner.RunOptions = {}) => {
  const base = Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
  return Layer.provideMerge(Runner.layer({ handleSignals: false, ...options }), base)
}

const inc = Task.sync("inc", (n: number) => n + 1)
const double = Task.sync("double", (n: number) => n * 2)
const show = Task.sync("show", (n: number) => `value=${n}`)

/** A pipeline row left `running` by run `runId` (admitted at `at`, nothing done yet). */
const runningRow = (spec: { pipelineId: PipelineId; specDigest: string; seedDigest: string }, runId: string, at: number) => ({
  pipelineId: spec.pipelineId,
  key: null,
  name: "rules",
  state: "running" as const,
  nTasksDone: 0,
  nTasksTotal: 3,
  specDigest: spec.specDigest,
  seedDigest: spec.seedDigest,
  tags: {},
  attemptsTotal: 0,
  runId: rid(runId),
  createdAt: at,
  updatedAt: at,
  startedAt: at,
  endedAt: null,
  failedTask: null,
  errorType: null,
  errorMessage: null,
  errorClass: null
})

describe("Runner", () => {
  it.effect("runs every pipeline to success and checkpoints each task", () =>
    Effect.gen(function*() {
      const template = Pipeline.make("arith", inc, double, show)
      const report = yield* Runner.run(template.map([1, 2, 3, 4, 5]))
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(report.stats.byState.succeeded, 5)
      const store = yield* Store
      const spec = template.bind(3)
      const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
      assert.strictEqual(row.state, "succeeded")
      assert.strictEqual(row.nTasksDone, 3)
      const artifacts = yield* store.listArtifacts(spec.pipelineId)
      assert.deepStrictEqual(artifacts.map((a) => a.seq), [-1, 0, 1, 2])
      assert.isTrue(artifacts.find((a) => a.seq === 2)!.isFinal)
      const final = Option.getOrThrow(yield* store.getArtifact(spec.pipelineId, 2))
      assert.strictEqual(new TextDecoder().decode(final.payload!), JSON.stringify("value=8"))
    }).pipe(Effect.provide(env())))

  it.effect("retries a retryable failure after the policy's delay and persists the decision", () =>
    Effect.gen(function*() {
      const flaky = Task.make(
        "flaky",
        { retry: { maxAttempts: 3, base: "1 second", jitter: "none" } },
        (n: number, ctx) =>
          ctx.attempt < 3 ? Effect.fail(new RetryableError({ message: "busy", errorClass: "upstream" })) : Effect.succeed(n)
      )
      const template = Pipeline.make("retry", flaky)
      const fiber = yield* Effect.fork(Runner.run(template.map([7])))
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("2 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 1)
      const store = yield* Store
      const attempts = yield* Stream.runCollect(store.streamAttempts({ runId: report.runId }))
      const rows = Array.from(attempts)
      assert.deepStrictEqual(rows.map((a) => a.outcome), ["failed", "failed", "succeeded"])
      assert.deepStrictEqual(rows.map((a) => a.errorClass), ["upstream", "upstream", null])
      assert.deepStrictEqual(rows.map((a) => (a.decision as { delayMs: number }).delayMs), [1000, 2000, 0])
      // the pipeline row counts every attempt, retries included
      const row = Option.getOrThrow(yield* store.getPipeline(template.bind(7).pipelineId))
      assert.strictEqual(row.attemptsTotal, 3)
    }).pipe(Effect.provide(env())))

  it.effect("a declined failure fails the pipeline with the error recorded", () =>
    Effect.gen(function*() {
      const bad = Task.sync("bad", (_: number): number => {
        throw new FatalError({ message: "no way" })
      })
      const template = Pipeline.make("fatal", inc, bad)
      const report = yield* Runner.run(template.map([1, 2]))
      assert.strictEqual(report.stats.byState.failed, 2)
      const store = yield* Store
      const errors = yield* store.errors({ runId: report.runId })
      assert.strictEqual(errors.length, 2)
      assert.strictEqual(errors[0]!.failedTask, "bad")
      assert.strictEqual(errors[0]!.errorClass, "fatal")
      const row = Option.getOrThrow(yield* store.getPipeline(template.bind(1).pipelineId))
      assert.strictEqual(row.nTasksDone, 1)
    }).pipe(Effect.provide(env())))

  it.effect("a Task.sync body that returns a Promise fails its pipeline (fatal, naming Task.promise); a thrown retryable error is retried", () =>
    Effect.gen(function*() {
      // both bodies run on the runner's direct path for synchronous tasks (no timeout, no budget)
      const promised = Task.sync("promised", (n: number) => Promise.resolve(n) as unknown as number)
      let calls = 0
      const flaky = Task.sync("flaky", { retry: { maxAttempts: 3, base: "1 second", jitter: "none" } }, (n: number) => {
        calls++
        if (calls === 1) throw new RetryableError({ message: "once", errorClass: "upstream" })
        return n * 10
      })
      const store = yield* Store
      const bad = yield* Runner.run(Pipeline.make("promised", inc, promised).map([1]))
      assert.strictEqual(bad.stats.byState.failed, 1)
      const errors = yield* store.errors({ runId: bad.runId })
      assert.strictEqual(errors[0]!.failedTask, "promised")
      assert.strictEqual(errors[0]!.errorClass, "fatal")
      assert.include(errors[0]!.errorMessage ?? "", "Task.promise")
      const template = Pipeline.make("flaky", inc, flaky, double)
      const fiber = yield* Effect.fork(Runner.run(template.map([1])))
      yield* TestClock.adjust("1 second")
      const good = yield* Fiber.join(fiber)
      assert.strictEqual(good.stats.byState.succeeded, 1)
      const row = Option.getOrThrow(yield* store.getPipeline(template.bind(1).pipelineId))
      assert.strictEqual(row.nTasksDone, 3)
      assert.strictEqual(row.attemptsTotal, 4)
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ runId: good.runId })))
      assert.deepStrictEqual(attempts.map((a) => [a.taskName, a.outcome]), [
        ["inc", "succeeded"],
        ["flaky", "failed"],
        ["flaky", "succeeded"],
        ["double", "succeeded"]
      ])
    }).pipe(Effect.provide(env())))

  it.effect("resume continues from the last checkpoint without re-running finished tasks", () =>
    Effect.gen(function*() {
      const executed: Array<string> = []
      let broken = true
      const first = Task.sync("first", (n: number) => {
        executed.push(`first:${n}`)
        return n + 1
      })
      const second = Task.sync("second", (n: number) => {
        executed.push(`second:${n}`)
        if (broken) throw new FatalError({ message: "down" })
        return n * 10
      })
      const template = Pipeline.make("resume", { includeCode: false }, first, second)
      const r1 = yield* Runner.run(template.map([1, 2, 3]))
      assert.strictEqual(r1.stats.byState.failed, 3)
      broken = false
      executed.length = 0
      const r2 = yield* Runner.run(template.map([1, 2, 3]))
      assert.strictEqual(r2.stats.byState.succeeded, 3)
      assert.deepStrictEqual(executed.sort(), ["second:2", "second:3", "second:4"])
      // A third run skips everything.
      executed.length = 0
      const r3 = yield* Runner.run(template.map([1, 2, 3]))
      assert.strictEqual(r3.skipped, 3)
      assert.deepStrictEqual(executed, [])
    }).pipe(Effect.provide(env())))

  it.effect("admission and concurrency bounds hold", () =>
    Effect.gen(function*() {
      const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("10 millis"), n))
      const template = Pipeline.make("bounded", slow)
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map(Array.from({ length: 200 }, (_, i) => i))))
      for (let i = 0; i < 40; i++) yield* TestClock.adjust("10 millis")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 200)
      const live = yield* runner.stats
      assert.isAtMost(live.peakInFlight, 8)
      assert.strictEqual(live.peakInFlight, 8)
      assert.isAtMost(live.peakAdmitted, 16)
    }).pipe(Effect.provide(env({ concurrency: 8, maxAdmitted: 16 }))))

  it.effect("an output Schema class comes back as its class on resume", () =>
    Effect.gen(function*() {
      class Verdict extends Schema.Class<Verdict>("Verdict")({ label: Schema.String, score: Schema.Number }) {
        get loud() {
          return this.label.toUpperCase()
        }
      }
      const seen: Array<string> = []
      let broken = true
      const judge = Task.sync("judge", { output: Verdict }, (n: number) => new Verdict({ label: n > 1 ? "spam" : "ham", score: n }))
      const use = Task.sync("use", (v: Verdict) => {
        if (broken) throw new FatalError({ message: "later" })
        seen.push(v.loud)
        return v.score
      })
      const template = Pipeline.make("schema", { includeCode: false }, judge, use)
      yield* Runner.run(template.map([1, 2]))
      broken = false
      const r2 = yield* Runner.run(template.map([1, 2]))
      assert.strictEqual(r2.stats.byState.succeeded, 2)
      assert.deepStrictEqual(seen.sort(), ["HAM", "SPAM"])
    }).pipe(Effect.provide(env())))

  it.effect("stop() admits nothing new and interrupts in-flight work after the grace period", () =>
    Effect.gen(function*() {
      const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("10 seconds"), n))
      const template = Pipeline.make("stoppable", slow)
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map(Array.from({ length: 50 }, (_, i) => i))))
      yield* TestClock.adjust("1 second")
      yield* runner.stop("test")
      yield* TestClock.adjust("2 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.status, "interrupted")
      assert.strictEqual(report.stopReason, "test")
      // 16 admitted (4 × concurrency): 4 in flight, 12 waiting for a worker; nothing more.
      assert.strictEqual(report.stats.pipelines, 16)
      assert.strictEqual(report.stats.byState.interrupted, 16)
      assert.strictEqual(report.stats.byState.succeeded, 0)
      const live = yield* runner.stats
      assert.strictEqual(live.counters.admitted, 16)
      assert.strictEqual(live.peakInFlight, 4)
    }).pipe(Effect.provide(env({ concurrency: 4, grace: "2 seconds" }))))

  it.effect("a retryable failure during a stop leaves its pipeline interrupted (resumable), a real failure stays failed", () =>
    Effect.gen(function*() {
      // Attempts in flight when the stop comes end within the grace period: even pipelines fail
      // with a retryable error (the policy would retry them), odd ones with an invalid one.
      const call = Task.make(
        "call",
        { retry: { maxAttempts: 3, base: "1 second", jitter: "none" } },
        (n: number, ctx) =>
          ctx.runId.startsWith("resume") ? Effect.succeed(n) : Effect.zipRight(
            Effect.sleep("2 seconds"),
            Effect.fail<RetryableError | FatalError>(
              n % 2 === 0
                ? new RetryableError({ message: "upstream busy", errorClass: "upstream" })
                : new FatalError({ message: "bad row" })
            )
          )
      )
      const template = Pipeline.make("stop-retryable", call)
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map([0, 1, 2, 3])))
      yield* TestClock.adjust("1 second")
      yield* runner.stop("stop_after")
      yield* TestClock.adjust("1 second")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.status, "interrupted")
      assert.strictEqual(report.stats.byState.interrupted, 2)
      assert.strictEqual(report.stats.byState.failed, 2)
      const store = yield* Store
      for (const n of [0, 2]) {
        const id = template.bind(n).pipelineId
        const row = Option.getOrThrow(yield* store.getPipeline(id))
        assert.strictEqual(row.state, "interrupted")
        assert.strictEqual(row.attemptsTotal, 1)
        assert.include(row.errorMessage ?? "", "run stopped: stop_after (before retrying: upstream: upstream busy)")
        const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ pipelineId: id })))
        assert.deepStrictEqual(attempts.map((a) => [a.outcome, a.errorClass, (a.decision as { reason: string }).reason]), [
          ["failed", "upstream", "stopped"]
        ])
      }
      for (const n of [1, 3]) {
        const row = Option.getOrThrow(yield* store.getPipeline(template.bind(n).pipelineId))
        assert.strictEqual(row.state, "failed")
        assert.strictEqual(row.errorClass, "fatal")
      }
      // a resume takes the interrupted ones up (as it does the failed ones)
      const resumed = yield* runner.run(template.map([0, 1, 2, 3]), { resume: true, runId: "resume-1" })
      assert.strictEqual(resumed.status, "completed")
      assert.strictEqual(resumed.stats.byState.succeeded, 4)
    }).pipe(Effect.provide(env({ concurrency: 4, grace: "5 seconds" }))))

  it.effect("a stop during a retry delay ends the pipeline interrupted, not failed", () =>
    Effect.gen(function*() {
      // the attempt fails at once, before the stop; its retry wait is cut by the stop (parked,
      // no grace): interrupted, not failed, one attempt recorded
      const call = Task.make(
        "call",
        { retry: { maxAttempts: 5, base: "10 seconds", jitter: "none" } },
        (_: number) => Effect.fail(new RetryableError({ message: "busy", errorClass: "rate_limit" }))
      )
      const template = Pipeline.make("stop-in-delay", call)
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map([1, 2])))
      yield* TestClock.adjust("1 second")
      yield* runner.stop("sigint")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.interrupted, 2)
      assert.strictEqual(report.stats.byState.failed ?? 0, 0)
    }).pipe(Effect.provide(env({ concurrency: 4, grace: "5 seconds" }))))

  it.effect("a per-attempt timeout fails the attempt with class timeout", () =>
    Effect.gen(function*() {
      const hang = Task.make("hang", { timeout: "2 seconds", retry: { maxAttempts: 2, base: "1 second", jitter: "none" } }, (
        n: number
      ) => Effect.as(Effect.never, n))
      const template = Pipeline.make("timeout", hang)
      const fiber = yield* Effect.fork(Runner.run(template.map([1])))
      yield* TestClock.adjust("2 seconds")
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("2 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.failed, 1)
      const store = yield* Store
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
      assert.deepStrictEqual(attempts.map((a) => a.outcome), ["timeout", "timeout"])
      assert.deepStrictEqual(attempts.map((a) => a.errorClass), ["timeout", "timeout"])
    }).pipe(Effect.provide(env())))
})

describe("Runner: cases from users", () => {
  // C4: no run hangs at 99%.
  it.effect("C4: a call that never answers times out, is retried once, and fails with class timeout", () =>
    Effect.gen(function*() {
      const call = Task.make(
        "call",
        { timeout: "2 seconds", retry: { maxAttempts: 2, base: "100 millis", jitter: "none" } },
        (n: number) => n === 137 ? Effect.never : Effect.as(Effect.sleep("10 millis"), n)
      )
      const template = Pipeline.make("c4", call)
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map(Array.from({ length: 200 }, (_, i) => i))))
      yield* TestClock.adjust("5 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 199)
      assert.strictEqual(report.stats.byState.failed, 1)
      const store = yield* Store
      const errors = yield* store.errors({ runId: report.runId })
      assert.strictEqual(errors[0]!.errorClass, "timeout")
      const attempts = Array.from(
        yield* Stream.runCollect(store.streamAttempts({ pipelineId: template.bind(137).pipelineId }))
      )
      assert.strictEqual(attempts.length, 2)
      // No attempt was in flight longer than its timeout.
      for (const a of attempts) assert.isAtMost(a.durationMs, 2000)
    }).pipe(Effect.provide(env({ concurrency: 16 }))))

  it.effect("C4: a stop while a call hangs ends the run within the grace period", () =>
    Effect.gen(function*() {
      const call = Task.make("call", (n: number) => n === 3 ? Effect.never : Effect.as(Effect.sleep("10 millis"), n))
      const template = Pipeline.make("c4-stop", call)
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map(Array.from({ length: 10 }, (_, i) => i))))
      yield* TestClock.adjust("1 second")
      yield* runner.stop("sigint")
      yield* TestClock.adjust("2 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.status, "interrupted")
      assert.strictEqual(report.stats.byState.succeeded, 9)
      assert.strictEqual(report.stats.byState.interrupted, 1)
    }).pipe(Effect.provide(env({ concurrency: 4, grace: "2 seconds" }))))

  // C6: fan-out is bounded.
  // The case's full size (20,000 items) and its wall-time figure are measured by
  // bench/runner.ts (no timing assertions in tests); here the bounds are checked on 1,000
  // items in simulated time, where the makespan is exact.
  it.effect("C6: 1,000 items at concurrency 8 never exceed 8 in flight and keep admission bounded", () =>
    Effect.gen(function*() {
      let inFlight = 0
      let peak = 0
      const work = Task.make("work", (n: number) =>
        Effect.acquireUseRelease(
          Effect.sync(() => {
            inFlight++
            if (inFlight > peak) peak = inFlight
          }),
          () => Effect.as(Effect.sleep("5 millis"), n),
          () => Effect.sync(() => inFlight--)
        ))
      const template = Pipeline.make("c6", work)
      const runner = yield* Runner.Runner
      const n = 1_000
      function* seeds() {
        for (let i = 0; i < n; i++) yield i
      }
      const fiber = yield* Effect.fork(runner.run(template.map(seeds())))
      // The ideal simulated makespan is 1,000 × 5 ms / 8 = 625 ms: all must be done by then.
      yield* TestClock.adjust("625 millis")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, n)
      assert.strictEqual(peak, 8)
      const live = yield* runner.stats
      assert.isAtMost(live.peakInFlight, 8)
      assert.isAtMost(live.peakAdmitted, 32)
    }).pipe(Effect.provide(env({ concurrency: 8 }))))
})

describe("Runner: callbacks, metrics and crashes", () => {
  it.effect("onPipelineFinished sees durable terminal rows; a failing callback is recorded, not fatal", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const seen: Array<string> = []
      const template = Pipeline.make("cb", inc, double)
      const report = yield* Runner.run(template.map([1, 2, 3]), {
        onPipelineFinished: (record, output) =>
          Effect.gen(function*() {
            const durable = Option.getOrThrow(yield* store.getPipeline(record.pipelineId))
            seen.push(`${durable.state}:${Option.getOrThrow(output)}`)
            if (Option.getOrThrow(output) === 8) return yield* Effect.fail("callback broke")
          })
      })
      assert.strictEqual(report.stats.byState.succeeded, 3)
      assert.deepStrictEqual(seen.sort(), ["succeeded:4", "succeeded:6", "succeeded:8"])
      assert.strictEqual(yield* store.countEvents({ kind: "monitor.callback_failed", runId: report.runId }), 1)
    }).pipe(Effect.provide(env())))

  it.effect("reportMetric from the runner and from a task are stored per scope", () =>
    Effect.gen(function*() {
      const runner = yield* Runner.Runner
      const scored = Task.make("scored", (n: number, ctx) =>
        Effect.as(
          Effect.zipRight(
            ctx.reportMetric("score", n / 10, { display: "percent", label: "Score" }),
            ctx.reportMetric("phase", "scoring", { scope: "run" })
          ),
          n
        ))
      const template = Pipeline.make("metrics", scored)
      const report = yield* runner.run(template.map([5]), {
        onPipelineFinished: () => runner.reportMetric("evaluated", 1, { label: "Evaluated" })
      })
      const store = yield* Store
      const runLevel = yield* store.metrics({ runId: report.runId, pipelineId: null })
      assert.deepStrictEqual(
        runLevel.map((m) => [m.name, m.value, m.label]).sort(),
        [["evaluated", 1, "Evaluated"], ["phase", "scoring", null]]
      )
      const pipelineLevel = yield* store.metrics({ runId: report.runId, pipelineId: template.bind(5).pipelineId })
      assert.deepStrictEqual(pipelineLevel.map((m) => [m.name, m.value, m.display]), [["score", 0.5, "percent"]])
    }).pipe(Effect.provide(env())))

  it.effect("a run interrupted from outside (a parent timeout, runMain on Ctrl-C) is still closed: interrupted, rows resumable", () =>
    Effect.gen(function*() {
      const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("1 second"), n))
      const template = Pipeline.make("outside", slow)
      const fiber = yield* Effect.fork(Runner.run(template.map([1, 2, 3, 4]), { concurrency: 2, handleSignals: false }))
      yield* TestClock.adjust("1500 millis")
      yield* Fiber.interrupt(fiber)
      const store = yield* Store
      const runs = yield* store.listRuns
      assert.strictEqual(runs.length, 1)
      assert.strictEqual(runs[0]!.status, "interrupted")
      assert.strictEqual(runs[0]!.stopReason, "interrupted")
      const rows = yield* store.getPipelines([1, 2, 3, 4].map((n) => template.bind(n).pipelineId))
      assert.deepStrictEqual([...rows.values()].map((p) => p.state).sort(), ["interrupted", "interrupted", "succeeded", "succeeded"])
      const finished = yield* store.events({ kind: "run.finished" })
      assert.strictEqual(finished.length, 1)
    }).pipe(Effect.provide(env())))

  it.effect("a non-finite metric is dropped with a metric.dropped event; the task's output is kept (C17b)", () =>
    Effect.gen(function*() {
      const runner = yield* Runner.Runner
      const ratio = Task.make("ratio", (n: number, ctx) =>
        Effect.as(
          Effect.all([
            ctx.reportMetric("accuracy", n / 0 - n / 0), // NaN
            ctx.reportMetric("speedup", n / 0), // Infinity
            ctx.reportMetric("kept", n)
          ], { discard: true }),
          n * 10
        ))
      const template = Pipeline.make("nan-metric", ratio)
      const report = yield* runner.run(template.map([1, 2]))
      assert.strictEqual(report.stats.byState.succeeded, 2)
      const store = yield* Store
      const id = template.bind(1).pipelineId
      const metrics = yield* store.metrics({ runId: report.runId, pipelineId: id })
      assert.deepStrictEqual(metrics.map((m) => [m.name, m.value]), [["kept", 1]])
      const dropped = yield* store.events({ runId: report.runId, kind: "metric.dropped", limit: 10 })
      assert.strictEqual(dropped.length, 4)
      assert.deepStrictEqual(
        dropped.filter((e) => e.pipelineId === id).map((e) => e.data).sort((a: any, b: any) => a.name.localeCompare(b.name)),
        [{ name: "accuracy", value: "NaN", reason: "not a finite number" }, { name: "speedup", value: "Infinity", reason: "not a finite number" }]
      )
      const final = Option.getOrThrow(yield* store.getArtifact(id, 0))
      assert.strictEqual(new TextDecoder().decode(final.payload!), "10")
    }).pipe(Effect.provide(env())))

  it.effect("a defect in the framework's own path stops the run with WorkerCrashed and closes the run record", () =>
    Effect.gen(function*() {
      const template = Pipeline.make("crash", inc)
      const victim = template.bind(2).pipelineId
      const crashing = Layer.effect(
        Store,
        Effect.map(Store, (s) => ({
          ...s,
          checkpoint: (unit: Parameters<typeof s.checkpoint>[0]) =>
            unit.pipelineId === victim && unit.task !== undefined ? Effect.die(new Error("store hook blew up")) : s.checkpoint(unit)
        }))
      )
      const program = Effect.gen(function*() {
        const error = yield* Effect.flip(Runner.run(template.map([1, 2, 3])))
        assert.strictEqual(error._tag, "WorkerCrashed")
        const store = yield* Store
        const run = Option.getOrThrow(yield* store.latestRun)
        assert.strictEqual(run.status, "interrupted")
        assert.strictEqual(run.stopReason, "worker_crashed")
      })
      const base = Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
      const stores = Layer.provideMerge(crashing, base)
      yield* program.pipe(Effect.provide(Layer.provideMerge(Runner.layer({ handleSignals: false }), stores)))
    }))
})

describe("Runner: resume rules", () => {
  const counting = () => {
    const ran: Array<string> = []
    const step = (name: string) =>
      Task.sync(name, (n: number) => {
        ran.push(name)
        return n + 1
      })
    return { ran, template: Pipeline.make("rules", { includeCode: false }, step("a"), step("b"), step("c")) }
  }

  it.effect("a torn finish (failed row, cursor at the end) is repaired without re-running anything", () =>
    Effect.gen(function*() {
      const { ran, template } = counting()
      yield* Runner.run(template.map([1]))
      const store = yield* Store
      const id = template.bind(1).pipelineId
      yield* store.updatePipeline(id, {
        state: "failed",
        error: { failedTask: "c", errorType: "Torn", errorMessage: "killed while finishing", errorClass: "unknown" },
        updatedAt: 1
      })
      ran.length = 0
      const report = yield* Runner.run(template.map([1]))
      assert.deepStrictEqual(ran, [])
      const row = Option.getOrThrow(yield* store.getPipeline(id))
      assert.strictEqual(row.state, "succeeded")
      assert.isNull(row.errorMessage)
      assert.strictEqual(row.runId, report.runId)
      assert.strictEqual(yield* store.countEvents({ kind: "pipeline.terminal_repaired" }), 1)
    }).pipe(Effect.provide(env())))

  it.effect("a cursor past the last task is reported corrupt and left as evidence", () =>
    Effect.gen(function*() {
      const { ran, template } = counting()
      yield* Runner.run(template.map([1]))
      const store = yield* Store
      const id = template.bind(1).pipelineId
      yield* store.updatePipeline(id, { state: "failed", nTasksDone: 7, updatedAt: 1 })
      ran.length = 0
      const report = yield* Runner.run(template.map([1]))
      assert.deepStrictEqual(ran, [])
      // counted as this run's failure (summary, report, exit code), its cause and fix on the row
      assert.strictEqual(report.stats.byState.failed, 1)
      const row = Option.getOrThrow(yield* store.getPipeline(id))
      assert.strictEqual(row.state, "failed")
      assert.strictEqual(row.nTasksDone, 7)
      assert.strictEqual(row.runId, report.runId)
      assert.include(row.errorMessage ?? "", "cursor 7 is past the last task")
      assert.strictEqual(yield* store.countEvents({ kind: "pipeline.corrupt_cursor" }), 1)
    }).pipe(Effect.provide(env())))

  it.effect("a missing checkpoint payload (journal summary) restarts from the seed with checkpoint_missing", () =>
    Effect.gen(function*() {
      let broken = true
      const ran: Array<string> = []
      const a = Task.sync("a", (n: number) => (ran.push("a"), n + 1))
      const b = Task.sync("b", (n: number) => {
        ran.push("b")
        if (broken) throw new FatalError({ message: "down" })
        return n * 2
      })
      const template = Pipeline.make("summary", { includeCode: false }, a, b)
      yield* Runner.run(template.map([1]))
      broken = false
      ran.length = 0
      const report = yield* Runner.run(template.map([1]))
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.deepStrictEqual(ran, ["a", "b"])
      const store = yield* Store
      assert.strictEqual(yield* store.countEvents({ kind: "pipeline.checkpoint_missing" }), 1)
    }).pipe(Effect.provide(Layer.provideMerge(
      Runner.layer({ handleSignals: false }),
      Layer.mergeAll(MemoryStore.layer({ journal: "summary" }), Pool.layer([]))
    ))))

  it.effect("freshRestart discards checkpoints (pipeline.restarted); retrySucceeded re-runs succeeded ones", () =>
    Effect.gen(function*() {
      const { ran, template } = counting()
      yield* Runner.run(template.map([1, 2]))
      ran.length = 0
      const again = yield* Runner.run(template.map([1, 2]))
      assert.strictEqual(again.skipped, 2)
      assert.deepStrictEqual(ran, [])
      const retried = yield* Runner.run(template.map([1, 2]), { retrySucceeded: true })
      assert.strictEqual(retried.stats.byState.succeeded, 2)
      assert.strictEqual(ran.length, 6)
      const store = yield* Store
      assert.strictEqual(yield* store.countEvents({ kind: "pipeline.restarted" }), 2)
    }).pipe(Effect.provide(env())))

  it.effect("a repeated seed runs once (the repeat skipped as duplicate); a repeated key with another seed is a conflict", () =>
    Effect.gen(function*() {
      const { ran, template } = counting()
      // 1 repeated within a batch and across batches (maxAdmitted 1 forces small batches)
      const report = yield* Runner.run(template.map([1, 2, 1, 3, 1]), { maxAdmitted: 1 })
      assert.strictEqual(report.stats.byState.succeeded, 3)
      assert.strictEqual(report.skipped, 2)
      assert.strictEqual(ran.length, 9)
      const store = yield* Store
      const skips = yield* store.events({ kind: "pipeline.skipped" })
      assert.deepStrictEqual(skips.map((e) => (e.data as { reason: string }).reason), ["duplicate", "duplicate"])
      const keyed = Pipeline.make("keyed-dup", Task.sync("v", (n: number) => n + 1))
      const error = yield* Effect.flip(Runner.run(keyed.map([1, 2], { keyOf: () => "same-key" })))
      assert.strictEqual(error._tag, "PipelineIdentityConflict")
    }).pipe(Effect.provide(env())))

  it.effect("a running row owned by a live run is skipped as owned_by_another_run", () =>
    Effect.gen(function*() {
      const { ran, template } = counting()
      const store = yield* Store
      const spec = template.bind(1)
      yield* store.openRun({ runId: rid("other"), startedAt: 0 })
      yield* store.admit([runningRow(spec, "other", 0)])
      const report = yield* Runner.run(template.map([1]))
      assert.strictEqual(report.skipped, 1)
      assert.deepStrictEqual(ran, [])
      const events = yield* store.events({ kind: "pipeline.skipped" })
      assert.deepStrictEqual(events.map((e) => (e.data as { reason: string }).reason), ["owned_by_another_run"])
    }).pipe(Effect.provide(env())))

  it.effect.each([{ resume: true }, { resume: false }])("on SQLite (one writer, an OS lock) a run still marked running is dead: run (resume: $resume) claims its rows at once", ({ resume }) =>
    Effect.gen(function*() {
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-runner-owned-")), "s.db")
      const { ran, template } = counting()
      const spec = template.bind(1)
      // a run that died (kill -9) a moment ago, its heartbeat fresh, its pipeline running
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* Store
        const now = yield* Clock.currentTimeMillis
        yield* store.openRun({ runId: rid("dead"), startedAt: now })
        yield* store.admit([runningRow(spec, "dead", now)])
      }).pipe(Effect.provide(SqliteStore.layer({ filename: file }))))
      // no time passes: the default staleAfter (30 s) has not elapsed, yet the lock proves it dead
      const report = yield* Runner.run(template.map([1]), { resume }).pipe(
        Effect.provide(Layer.provideMerge(
          Runner.layer({ handleSignals: false }),
          Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]))
        ))
      )
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.strictEqual(report.skipped, 0)
      assert.strictEqual(ran.length, 3)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("an explicit key whose stored digests differ is a PipelineIdentityConflict and nothing is touched", () =>
    Effect.gen(function*() {
      const one = Pipeline.make("keyed", Task.sync("v1", (n: number) => n + 1))
      const two = Pipeline.make("keyed", Task.sync("v2", (n: number) => n + 2))
      yield* Runner.run(one.map([{ n: 1 }].map((s) => s.n), { keyOf: () => "row-1" }))
      const store = yield* Store
      const before = Option.getOrThrow(yield* store.getPipeline(pid("row-1")))
      const error = yield* Effect.flip(Runner.run(two.map([1], { keyOf: () => "row-1" })))
      assert.strictEqual(error._tag, "PipelineIdentityConflict")
      const after = Option.getOrThrow(yield* store.getPipeline(pid("row-1")))
      assert.deepStrictEqual(after, before)
    }).pipe(Effect.provide(env())))

  it.effect("stopAfterFailures stops admission after N failed pipelines", () =>
    Effect.gen(function*() {
      const bad = Task.sync("bad", (_: number): number => {
        throw new FatalError({ message: "no" })
      })
      const report = yield* Runner.run(Pipeline.make("stopper", bad).map(Array.from({ length: 100 }, (_, i) => i)), {
        stopAfterFailures: 3,
        concurrency: 1,
        maxAdmitted: 1
      })
      assert.strictEqual(report.status, "interrupted")
      assert.strictEqual(report.stopReason, "stop_after_failures")
      assert.isAtMost(report.stats.byState.failed, 4)
      assert.isAtLeast(report.stats.byState.failed, 3)
    }).pipe(Effect.provide(env())))

  it.effect("stopAfterFailures: once the N-th failure is decided no new pipeline starts (at most N + concurrency - 1 fail)", () =>
    Effect.gen(function*() {
      // every row fails, after a few yields (attempts overlap, as calls to a server do)
      for (const [budget, concurrency] of [[1, 6], [3, 6], [2, 1]] as const) {
        let started = 0
        const bad = Task.make("bad", (n: number) =>
          Effect.gen(function*() {
            started++
            for (let i = 0; i < 1 + (n % 5); i++) yield* Effect.yieldNow()
            return yield* Effect.fail(new FatalError({ message: "no" }))
          }))
        const report = yield* Runner.run(Pipeline.make(`stopper-${budget}-${concurrency}`, bad).map(Array.from({ length: 200 }, (_, i) => i)), {
          stopAfterFailures: budget,
          concurrency
        }).pipe(Effect.provide(env()))
        assert.strictEqual(report.status, "interrupted")
        assert.strictEqual(report.stopReason, "stop_after_failures")
        const failed = report.stats.byState.failed ?? 0
        assert.isAtLeast(failed, budget)
        // the pipelines in flight when the budget was reached may fail too; nothing new starts
        assert.isAtMost(failed, budget + concurrency - 1, `budget ${budget}, concurrency ${concurrency}`)
        assert.isAtMost(started, budget + concurrency - 1, `started, budget ${budget}, concurrency ${concurrency}`)
      }
    }))

  it.effect("exportJsonl writes this run's pipeline rows", () =>
    Effect.gen(function*() {
      const { template } = counting()
      const report = yield* Runner.run(template.map([1, 2, 3]))
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-export-")), "run.jsonl")
      const n = yield* report.exportJsonl(file)
      assert.strictEqual(n, 3)
      const rows = fs.readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.deepStrictEqual(rows.map((r) => r.state), ["succeeded", "succeeded", "succeeded"])
    }).pipe(Effect.provide(Layer.merge(env(), NodeContext.layer))))
})

describe("Runner: run handles, spans, the report", () => {
  it.effect("start returns the run's handle at once; two runs of one runner go on side by side, each with its own figures and stop", () =>
    Effect.gen(function*() {
      const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("1 second"), n))
      const template = Pipeline.make("handles", slow)
      const runner = yield* Runner.Runner
      const { a, b, reportA, reportB } = yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* runner.start(template.map([1, 2, 3, 4]), { runId: "run-a" })
        const b = yield* runner.start(template.map([5, 6]), { runId: "run-b", concurrency: 1 })
        assert.strictEqual(a.runId, "run-a")
        yield* TestClock.adjust("10 millis")
        const liveA = yield* a.stats
        const liveB = yield* b.stats
        assert.deepStrictEqual([liveA.runId, liveA.inFlight], ["run-a", 4])
        assert.deepStrictEqual([liveB.runId, liveB.inFlight], ["run-b", 1])
        // the runner's own figures are those of the run started last
        assert.strictEqual((yield* runner.stats).runId, "run-b")
        yield* b.stop("only b")
        yield* TestClock.adjust("2 seconds")
        const reportA = yield* a.await
        const reportB = yield* b.await
        return { a, b, reportA, reportB }
      }))
      assert.deepStrictEqual([reportA.runId, reportA.status, reportA.stats.byState.succeeded], ["run-a", "completed", 4])
      assert.deepStrictEqual([reportB.runId, reportB.status, reportB.stopReason], ["run-b", "interrupted", "only b"])
      // a finished run's handle still reads its figures; stopping it does nothing
      yield* a.stop("late")
      assert.isFalse((yield* a.stats).stopping)
      assert.strictEqual((yield* b.stats).counters.interrupted + (yield* b.stats).counters.succeeded, 2)
    }).pipe(Effect.provide(env({ grace: "1 second" }))))

  it.effect("ctx.store reads history but has no write operation at all, even for code that ignores the types", () =>
    Effect.gen(function*() {
      const seen: Array<unknown> = []
      const probe = Task.make("probe", (n: number, ctx) =>
        Effect.gen(function*() {
          const raw = ctx.store as unknown as Record<string, unknown>
          seen.push(["checkpoint", "reportMetric", "emitEvent", "admit", "openRun", "flush"].map((k) => typeof raw[k]))
          const run = yield* ctx.store.getRun(ctx.runId)
          seen.push(Option.map(run, (r) => r.status))
          return n
        }))
      yield* Runner.run(Pipeline.make("read-only", probe).map([1]))
      expect(seen).toStrictEqual([Array(6).fill("undefined"), Option.some("running")])
    }).pipe(Effect.provide(env())))

  it.effect("two runs of one source at once on one store: each pipeline runs once, neither run is taken for dead", () =>
    Effect.gen(function*() {
      let calls = 0
      const counted = Task.make("counted", (n: number) => Effect.as(Effect.zipRight(Effect.sync(() => calls++), Effect.sleep("1 second")), n))
      const template = Pipeline.make("shared-source", counted)
      const runner = yield* Runner.Runner
      const seeds = Array.from({ length: 20 }, (_, i) => i)
      const [ra, rb] = yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* runner.start(template.map(seeds), { runId: "run-a", concurrency: 4 })
        yield* TestClock.adjust("10 millis")
        const b = yield* runner.start(template.map(seeds), { runId: "run-b", concurrency: 4 })
        yield* TestClock.adjust("30 seconds")
        return [yield* a.await, yield* b.await] as const
      }))
      assert.strictEqual(calls, 20, "every pipeline ran exactly once")
      assert.deepStrictEqual([ra.status, rb.status], ["completed", "completed"])
      const store = yield* Store
      const runs = yield* store.listRuns
      assert.deepStrictEqual(runs.map((r) => [r.runId, r.status, r.stopReason]), [
        ["run-a", "completed", null],
        ["run-b", "completed", null]
      ])
      assert.strictEqual((yield* store.stats()).byState.succeeded, 20)
    }).pipe(Effect.provide(env())))

  it.effect("closing the scope a run was started in interrupts it: its rows end interrupted and the run is closed", () =>
    Effect.gen(function*() {
      const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("10 seconds"), n))
      const runner = yield* Runner.Runner
      const runId = yield* Effect.scoped(Effect.gen(function*() {
        const run = yield* runner.start(Pipeline.make("scoped", slow).map([1, 2]))
        yield* TestClock.adjust("1 second")
        return run.runId
      }))
      const store = yield* Store
      const record = yield* store.getRun(runId)
      assert.isTrue(Option.isSome(record))
      assert.strictEqual(Option.getOrThrow(record).status, "interrupted")
      assert.strictEqual((yield* store.stats(runId)).byState.interrupted, 2)
    }).pipe(Effect.provide(env())))

  it.effect("a span per run (assay.run, with its runId) and per attempt (assay.attempt, child of the run's span)", () =>
    Effect.gen(function*() {
      const spans: Array<Tracer.Span> = []
      const base = yield* Effect.tracer
      const recording = Tracer.make({
        span: (...args) => {
          const span = base.span(...args)
          spans.push(span)
          return span
        },
        context: (f) => f()
      })
      const flaky = Task.make("flaky", { retry: { maxAttempts: 2, base: "10 millis", jitter: "none" } }, (n: number, ctx) =>
        ctx.attempt === 1 ? Effect.fail(new RetryableError({ message: "once", errorClass: "upstream" })) : Effect.succeed(n))
      const report = yield* Effect.fork(Runner.run(Pipeline.make("spans", inc, flaky).map([1, 2]))).pipe(
        Effect.flatMap((f) => Effect.zipRight(TestClock.adjust("1 second"), Fiber.join(f))),
        Effect.withTracer(recording)
      )
      const run = spans.filter((s) => s.name === "assay.run")
      assert.strictEqual(run.length, 1)
      assert.strictEqual(run[0]!.attributes.get("assay.run.id"), report.runId)
      const attempts = spans.filter((s) => s.name === "assay.attempt")
      // 2 pipelines × (inc once + flaky twice)
      assert.strictEqual(attempts.length, 6)
      for (const s of attempts) {
        assert.strictEqual(Option.getOrThrow(s.parent).spanId, run[0]!.spanId)
        assert.strictEqual(s.status._tag, "Ended")
      }
      const flakyAttempts = attempts.filter((s) => s.attributes.get("task") === "flaky").map((s) => s.attributes.get("attempt"))
      assert.deepStrictEqual(flakyAttempts.sort(), [1, 1, 2, 2])
    }).pipe(Effect.provide(env())))

  it.effect("exportJsonl writes atomically: a read failure half-way leaves neither the file nor a temp file", () =>
    Effect.gen(function*() {
      const report = yield* Runner.run(Pipeline.make("export", inc, double).map([1, 2, 3]))
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-export-"))
      const file = path.join(dir, "run.jsonl")
      const store = yield* Store
      const failing = {
        ...store,
        streamPipelines: (o?: Parameters<typeof store.streamPipelines>[0]) =>
          Stream.concat(Stream.take(store.streamPipelines(o), 1), Stream.fail(new StoreUnavailable({ message: "disk gone" })))
      }
      const exit = yield* Effect.exit(report.exportJsonl(file).pipe(Effect.provideService(Store, failing)))
      assert.isTrue(Exit.isFailure(exit))
      assert.deepStrictEqual(fs.readdirSync(dir), [])
      // and the plain report is data: JSON round-trips its facts
      assert.deepStrictEqual(JSON.parse(JSON.stringify(report)), report.toJSON())
    }).pipe(Effect.provide(env())))
})

describe("Runner: consecutive synchronous tasks (one commit for the admission and their checkpoints)", () => {
  const sqliteEnv = () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-runner-sync-")), "s.db")
    return Layer.provideMerge(
      Runner.layer({ handleSignals: false }),
      Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]))
    ).pipe(Layer.provideMerge(NodeContext.layer))
  }
  /** What the store holds for a pipeline, without ids and times. */
  const facts = (pipelineId: PipelineId) =>
    Effect.gen(function*() {
      const store = yield* Store
      const row = Option.getOrThrow(yield* store.getPipeline(pipelineId))
      const tasks = Array.from(yield* Stream.runCollect(store.streamTasks({ pipelineId })))
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ pipelineId })))
      const artifacts = yield* store.listArtifacts(pipelineId)
      return {
        state: row.state,
        nTasksDone: row.nTasksDone,
        attemptsTotal: row.attemptsTotal,
        ended: row.endedAt !== null,
        error: row.errorMessage,
        tasks: tasks.map((t) => [t.seq, t.state, t.attemptsUsed]),
        attempts: attempts.map((a) => [a.seq, a.attemptNo, a.outcome]),
        artifacts: artifacts.map((a) => [a.seq, a.isFinal])
      }
    })

  it.effect("a pipeline of Task.sync tasks stores what the same Effect tasks store (row, tasks, attempts, final artifact)", () =>
    Effect.gen(function*() {
      const eff = (name: string, f: (n: number) => number) => Task.make(name, {}, (n: number) => Effect.succeed(f(n)))
      const sync = Pipeline.make("sync", Task.sync("a", (n: number) => n + 1), Task.sync("b", (n: number) => n * 2), Task.sync("c", (n: number) => n - 3))
      const effects = Pipeline.make("sync", eff("a", (n) => n + 1), eff("b", (n) => n * 2), eff("c", (n) => n - 3))
      const r1 = yield* Runner.run(sync.map([1, 2, 3]))
      const r2 = yield* Runner.run(effects.map([1, 2, 3]))
      assert.strictEqual(r1.stats.byState.succeeded, 3)
      assert.strictEqual(r2.stats.byState.succeeded, 3)
      const a = yield* facts(sync.bind(2).pipelineId)
      const b = yield* facts(effects.bind(2).pipelineId)
      assert.deepStrictEqual(a, b)
      assert.deepStrictEqual(a, {
        state: "succeeded",
        nTasksDone: 3,
        attemptsTotal: 3,
        ended: true,
        error: null,
        tasks: [[0, "succeeded", 1], [1, "succeeded", 1], [2, "succeeded", 1]],
        attempts: [[0, 1, "succeeded"], [1, 1, "succeeded"], [2, 1, "succeeded"]],
        artifacts: [[-1, false], [0, false], [1, false], [2, true]]
      })
      const store = yield* Store
      const final = Option.getOrThrow(yield* store.getArtifact(sync.bind(2).pipelineId, 2))
      assert.strictEqual(new TextDecoder().decode(final.payload!), "3")
    }).pipe(Effect.provide(sqliteEnv())))

  it.effect("a failing synchronous task: the checkpoints before it are durable before its retry waits, and the totals count every attempt", () =>
    Effect.gen(function*() {
      let calls = 0
      const flaky = Task.sync("flaky", { retry: { maxAttempts: 3, base: "1 second", jitter: "none" } }, (n: number) => {
        calls++
        if (calls === 1) throw new RetryableError({ message: "busy", errorClass: "upstream" })
        return n * 10
      })
      const template = Pipeline.make("sync-retry", inc, double, flaky, show)
      const id = template.bind(1).pipelineId
      const fiber = yield* Effect.fork(Runner.run(template.map([1])))
      // the retry's delay has not passed: what ran before the failure is stored, the failure too
      const store = yield* Store
      // (the run reaches its retry's sleep after a bounded number of scheduler turns)
      const reached = (row: Option.Option<{ readonly nTasksDone: number }>) => Option.isSome(row) && row.value.nTasksDone >= 2
      for (let turn = 0; turn < 10_000 && !reached(yield* store.getPipeline(id)); turn++) yield* Effect.yieldNow()
      const during = yield* facts(id)
      assert.strictEqual(during.state, "running")
      assert.strictEqual(during.nTasksDone, 2)
      assert.deepStrictEqual(during.tasks, [[0, "succeeded", 1], [1, "succeeded", 1]])
      assert.deepStrictEqual(during.attempts, [[0, 1, "succeeded"], [1, 1, "succeeded"], [2, 1, "failed"]])
      yield* TestClock.adjust("1 second")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 1)
      const after = yield* facts(id)
      assert.strictEqual(after.nTasksDone, 4)
      assert.strictEqual(after.attemptsTotal, 5)
      assert.deepStrictEqual(after.attempts.map((a) => a[2]), ["succeeded", "succeeded", "failed", "succeeded", "succeeded"])
      const final = Option.getOrThrow(yield* store.getArtifact(id, 3))
      assert.strictEqual(new TextDecoder().decode(final.payload!), JSON.stringify("value=40"))
    }).pipe(Effect.provide(env())))
})
