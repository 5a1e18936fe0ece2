/**
 * The run config's `writeBehind`, `writeBatch` and `flushInterval` reach the store's write path
 * (issue 12 §3): through `NewRun.writes` at the store front, and end to end through the runner's
 * options (the CLI hands a config file's `run` section to the runner the same way).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { type NewAttempt, Store, type StoreService } from "../../src/services/Store.js"
import { pid, rid } from "../support/ids.js"

const attempt = (n: number): NewAttempt => ({
  pipelineId: pid("p"),
  runId: rid("r"),
  taskRunId: `t${n}`,
  taskName: "t",
  seq: 0,
  attemptNo: n,
  outcome: "failed",
  errorClass: "x",
  errorType: "X",
  errorMessage: "m",
  decision: null,
  leaseIds: [],
  startedAt: 0,
  endedAt: 1,
  durationMs: 1
})

describe("the run's write policy at the store front", () => {
  it.scoped("writeBehind: false writes each attempt before recordAttempt returns", () =>
    Effect.gen(function*() {
      const store = yield* Store
      yield* store.openRun({ runId: rid("r"), startedAt: 0, writes: { writeBehind: false } })
      yield* store.recordAttempt(attempt(1))
      assert.strictEqual(yield* store.pending, 0)
    }).pipe(Effect.provide(MemoryStore.layer({ batchSize: 1000, flushIntervalMs: 0 }))))

  it.scoped("batchSize from the run: a full batch is written at once", () =>
    Effect.gen(function*() {
      const store = yield* Store
      yield* store.openRun({ runId: rid("r"), startedAt: 0, writes: { batchSize: 2 } })
      yield* store.recordAttempt(attempt(1))
      assert.strictEqual(yield* store.pending, 1)
      yield* store.recordAttempt(attempt(2))
      assert.strictEqual(yield* store.pending, 0)
    }).pipe(Effect.provide(MemoryStore.layer({ batchSize: 1000, flushIntervalMs: 0 }))))

  it.scoped("flushIntervalMs from the run replaces the store's period (the flusher is restarted)", () =>
    Effect.gen(function*() {
      const store = yield* Store
      yield* store.openRun({ runId: rid("r"), startedAt: 0, writes: { flushIntervalMs: 100 } })
      yield* store.recordAttempt(attempt(1))
      yield* TestClock.adjust("99 millis")
      assert.strictEqual(yield* store.pending, 1)
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(yield* store.pending, 0)
    }).pipe(Effect.provide(MemoryStore.layer({ batchSize: 1000, flushIntervalMs: 60_000 }))))

  it.scoped("a store opened with writeBehind: false writes through", () =>
    Effect.gen(function*() {
      const store = yield* Store
      yield* store.emitEvent({ kind: "k", pipelineId: null, runId: null, data: null, ts: 0 })
      assert.strictEqual(yield* store.pending, 0)
    }).pipe(Effect.provide(MemoryStore.layer({ writeBehind: false, batchSize: 1000, flushIntervalMs: 0 }))))
})

/**
 * A run of one pipeline whose task fails once (retried after 500 ms): returns what the store
 * held buffered when the second attempt started (the first attempt goes to the write-behind
 * buffer).
 */
const pendingAtRetry = (options: Runner.RunOptions) =>
  Effect.gen(function*() {
    const store: StoreService = yield* Store
    let seen = -1
    const flaky = Task.make(
      "flaky",
      { retry: { maxAttempts: 2, base: "500 millis", jitter: "none" } },
      (n: number, ctx) =>
        ctx.attempt < 2
          ? Effect.fail(new RetryableError({ message: "busy", errorClass: "upstream" }))
          : Effect.map(store.pending, (p) => {
            seen = p
            return n
          })
    )
    const fiber = yield* Effect.fork(Runner.run(Pipeline.make("policy", flaky).map([1]), options))
    yield* TestClock.adjust("500 millis")
    const report = yield* Fiber.join(fiber)
    assert.strictEqual(report.stats.byState.succeeded, 1)
    return seen
  }).pipe(
    Effect.provide(
      Layer.provideMerge(
        Runner.layer({ handleSignals: false }),
        // the store's own policy would keep the failed attempt buffered for a minute
        Layer.mergeAll(MemoryStore.layer({ batchSize: 1000, flushIntervalMs: 60_000 }), Pool.layer([]))
      )
    )
  )

describe("the run's write policy end to end (runner options)", () => {
  it.effect("the store's own policy buffers the failed attempt", () =>
    Effect.map(pendingAtRetry({}), (seen) => assert.isAbove(seen, 0)))

  it.effect("writeBehind: false", () => Effect.map(pendingAtRetry({ writeBehind: false }), (seen) => assert.strictEqual(seen, 0)))

  it.effect("writeBatch: 1", () => Effect.map(pendingAtRetry({ writeBatch: 1 }), (seen) => assert.strictEqual(seen, 0)))

  it.effect("flushInterval: 100 millis", () =>
    Effect.map(pendingAtRetry({ flushInterval: "100 millis" }), (seen) => assert.strictEqual(seen, 0)))
})
