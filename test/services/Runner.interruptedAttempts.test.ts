/**
 * An interruption (a stop whose grace runs out, Ctrl-C) leaves one attempt row for every
 * attempt that started, written in the same commit as its task row: an attempt cut short in
 * its body is `cancelled` (error type `Interrupted`, decision `stopped`) under the number it
 * ran with; a task still waiting for its first attempt (for a worker slot) gets no task row and
 * no attempt; a task waiting to retry keeps the rows of the attempts it made. Before the fix
 * the cut attempt had no row (a tester counted 358 interrupted task rows against 334 attempts)
 * and a task waiting for a slot got an `interrupted` row claiming one attempt.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Stream, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import type { PipelineId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type { AttemptRecord, TaskRecord } from "../../src/domain/Records.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })

const env = () =>
  Layer.provideMerge(
    Runner.layer({
      handleSignals: false,
      concurrency: 2,
      heartbeat: "1 hour",
      staleAfter: "3 hours",
      grace: "1 second",
      stopAfter: "5 seconds"
    }),
    Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
  )

const rowsOf = (pipelineId: PipelineId) =>
  Effect.gen(function*() {
    const store = yield* Store
    const tasks: ReadonlyArray<TaskRecord> = Array.from(yield* Stream.runCollect(store.streamTasks({ pipelineId })))
    const attempts: ReadonlyArray<AttemptRecord> = Array.from(yield* Stream.runCollect(store.streamAttempts({ pipelineId })))
    const pipeline = yield* store.getPipeline(pipelineId)
    return { tasks, attempts, attemptsTotal: pipeline._tag === "Some" ? pipeline.value.attemptsTotal : -1 }
  })

/** Runs the stop scenario on the test clock: the run stops at 5 s, the grace ends at 6 s. */
const runToStop = <A>(run: Effect.Effect<A, unknown, Runner.Runner>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(run)
    for (let i = 0; i < 20; i++) {
      yield* settle
      yield* TestClock.adjust("500 millis")
    }
    return yield* Fiber.join(fiber)
  })

/**
 * Five pipelines `first` (synchronous) then `slow` on 2 worker slots: inputs 1 and 2 start
 * `slow` at once; input 2's first attempt fails at 1 s and waits 1 s to retry, so input 3
 * takes its slot; at 5 s the run stops: inputs 1 and 3 are in their attempt (cut at 6 s),
 * input 2 waits for a slot for its second attempt, inputs 4 and 5 for their first task.
 */
const scenario = (control: boolean, hang: { on: boolean }) => {
  const first = Task.sync("first", (n: number) => n)
  const slow = Task.make(
    "slow",
    { retry: { maxAttempts: 3, base: "1 second", jitter: "none" } },
    (n: number, ctx) =>
      !hang.on
        ? Effect.succeed(n)
        : n === 2 && ctx.attempt === 1
        ? Effect.zipRight(Effect.sleep("1 second"), Effect.fail(new RetryableError({ message: "busy", errorClass: "upstream" })))
        : Effect.as(Effect.sleep("60 seconds"), n)
  )
  const template = control
    ? Pipeline.fromTasks("cut", [first, slow], { control: { edges: { first: ["end"] } } })
    : Pipeline.fromTasks("cut", [first, slow])
  return [1, 2, 3, 4, 5].map((n) => template.bind(n))
}

const summary = (rows: { tasks: ReadonlyArray<TaskRecord>; attempts: ReadonlyArray<AttemptRecord> }) => ({
  tasks: rows.tasks.map((t) => [t.taskName, t.state, t.attemptsUsed]),
  attempts: rows.attempts.map((a) => [a.taskName, a.attemptNo, a.outcome, a.errorType, (a.decision as { readonly reason?: string } | null)?.reason ?? null])
})

/** Every attempt row belongs to a task row, and every task row has exactly its attempts. */
const consistent = (rows: { tasks: ReadonlyArray<TaskRecord>; attempts: ReadonlyArray<AttemptRecord>; attemptsTotal: number }) => {
  for (const t of rows.tasks.filter((x) => x.state === "interrupted")) {
    const mine = rows.attempts.filter((a) => a.taskRunId === t.taskRunId)
    assert.strictEqual(mine.length, t.attemptsUsed, `task ${t.taskRunId}: ${t.attemptsUsed} attempts, ${mine.length} rows`)
  }
  const taskRuns = new Set(rows.tasks.map((t) => t.taskRunId))
  for (const a of rows.attempts) assert.isTrue(taskRuns.has(a.taskRunId), `attempt ${a.taskRunId}#${a.attemptNo} has a task row`)
  assert.strictEqual(rows.attemptsTotal, rows.attempts.length)
}

describe("an interruption records every attempt that started, once", () => {
  for (const control of [false, true]) {
    it.effect(`${control ? "control" : "plain"} pipelines: cut attempts cancelled, waiting tasks without rows`, () =>
      Effect.gen(function*() {
        const hang = { on: true }
        const specs = scenario(control, hang)
        const report = yield* runToStop(Runner.run(specs))
        assert.strictEqual(report.stats.byState.interrupted, 5)
        const rows = yield* Effect.forEach(specs, (s) => rowsOf(s.pipelineId))
        const cut = {
          tasks: [["first", "succeeded", 1], ["slow", "interrupted", 1]],
          attempts: [["first", 1, "succeeded", null, "ok"], ["slow", 1, "cancelled", "Interrupted", "stopped"]]
        }
        assert.deepStrictEqual(summary(rows[0]!), cut)
        assert.deepStrictEqual(summary(rows[2]!), cut)
        // waiting to retry: its failed attempt, nothing for the attempt that never began
        assert.deepStrictEqual(summary(rows[1]!), {
          tasks: [["first", "succeeded", 1], ["slow", "interrupted", 1]],
          attempts: [["first", 1, "succeeded", null, "ok"], ["slow", 1, "failed", "RetryableError", "retryable"]]
        })
        // waiting for a worker slot for `slow`: it never began, nothing of it is recorded
        // (`first`, synchronous, may have run while slots changed hands)
        for (const r of [rows[3]!, rows[4]!]) {
          assert.deepStrictEqual(summary(r).tasks.filter(([name]) => name === "slow"), [])
          assert.deepStrictEqual(summary(r).attempts.filter(([name]) => name === "slow"), [])
        }
        for (const r of rows) consistent(r)
        // a resume continues each: a cut attempt's number is never used again
        hang.on = false
        const resumed = yield* Runner.run(specs, { resume: true })
        assert.strictEqual(resumed.stats.byState.succeeded, 5)
        const after = yield* Effect.forEach(specs, (s) => rowsOf(s.pipelineId))
        for (const r of after) {
          const seen = new Set<string>()
          for (const a of r.attempts) {
            const key = control ? `${a.seq}#${a.visit}#${a.attemptNo}` : `${a.taskRunId}#${a.attemptNo}`
            assert.isFalse(seen.has(key), `attempt ${key} recorded twice`)
            seen.add(key)
          }
          assert.strictEqual(r.attemptsTotal, r.attempts.length)
        }
        if (control) {
          // the controlled station's numbers run on across the runs: 1 cut, 2 succeeded
          assert.deepStrictEqual(
            after[0]!.attempts.filter((a) => a.taskName === "slow").map((a) => [a.attemptNo, a.outcome]),
            [[1, "cancelled"], [2, "succeeded"]]
          )
        }
      }).pipe(Effect.provide(env())))
  }
})
