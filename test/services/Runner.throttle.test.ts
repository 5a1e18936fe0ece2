import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as Pool from "../../src/services/Pool.js"
import * as Progress from "../../src/services/internal/progress.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })

const env = (pools: ReadonlyArray<Pool.PoolConfig>) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4, heartbeat: "1 hour", staleAfter: "3 hours" }),
    Layer.mergeAll(MemoryStore.layer(), Pool.layer(pools))
  )

const keys = () => [Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity: 2 })])]

/** A call that every server answers 429 with the given Retry-After (ms). */
const throttledCall = (retryAfterMs: number, retry: { readonly maxAttempts: number }) =>
  Task.make("ask", { resource: "llm", retry }, (n: number, ctx) =>
    Effect.gen(function*() {
      const lease = yield* ctx.acquire()
      const error = new RetryableError({ message: "429 Too Many Requests", errorClass: "rate_limit", retryAfterMs })
      yield* lease.report({ ok: false, error })
      return yield* Effect.fail(error)
    }).pipe(Effect.as(n)))

describe("absurd server delays (issue 20 §2, case C9)", () => {
  it.effect("Retry-After of a day: every pipeline fails at once as rate_limit saying 'the server asked to wait 24 h (until …)'", () =>
    Effect.gen(function*() {
      const template = Pipeline.make("c9", throttledCall(86_400_000, { maxAttempts: 6 }))
      // no clock advance at all: nothing waits
      const report = yield* Runner.run(template.map([1, 2, 3, 4, 5, 6, 7, 8]))
      assert.strictEqual(report.stats.byState.failed, 8)
      const store = yield* Store
      const row = Option.getOrThrow(yield* store.getPipeline(template.bind(1).pipelineId))
      assert.strictEqual(row.errorClass, "rate_limit")
      assert.include(row.errorMessage ?? "", "the server asked to wait 24 h (until 1970-01-02T00:00:00.000Z)")
      // the key shows as throttled until then
      const pools = yield* Pool.Pools
      const snap = (yield* pools.snapshot("llm"))[0]!
      assert.strictEqual(snap.throttledUntil, 86_400_000)
      assert.strictEqual(snap.state, "ready")
      // shown as such: the progress line, watch / the dashboard (from the stored health)
      const runner = yield* Runner.Runner
      const view = Progress.makeSampler(0, 8)(yield* runner.stats, 0)
      assert.include(Progress.renderProgress(view, 200), "waiting for key-a until 1970-01-02T00:00:00.000Z")
      const stored = (yield* store.resources).map(Monitor.resourceRow)
      assert.strictEqual(Monitor.holdOf(stored[0]!, 0), "throttled until 1970-01-02T00:00:00.000Z")
    }).pipe(Effect.provide(env(keys()))))

  it.effect("a ceiling raised by retry.maxServerDelay waits the server's delay out", () =>
    Effect.gen(function*() {
      let calls = 0
      const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 2, maxServerDelay: "20 minutes" } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          if (calls++ === 0) {
            const error = new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: 900_000 })
            yield* lease.report({ ok: false, error })
            return yield* Effect.fail(error)
          }
          yield* lease.report({ ok: true })
          return n
        }))
      const fiber = yield* Effect.fork(Runner.run(Pipeline.make("wait-hour", ask).map([1])))
      yield* settle
      yield* TestClock.adjust("15 minutes")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 1)
    }).pipe(Effect.provide(env(keys()))))

  it.effect("retry.maxTotal bounds the task's whole time, waiting for a lease included, and names what held the pool", () =>
    Effect.gen(function*() {
      const pools = yield* Pool.Pools
      // the key is throttled for 5 minutes (under the ceiling): acquires queue
      const first = yield* pools.acquireRaw("llm")
      yield* first.report({ ok: false, error: new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: 300_000 }) })
      yield* first.releaseNow
      const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 3, maxTotal: "60 seconds" } }, (n: number, ctx) =>
        Effect.flatMap(ctx.acquire(), (lease) => Effect.as(lease.report({ ok: true }), n)))
      const fiber = yield* Effect.fork(Runner.run(Pipeline.make("budget", ask).map([1, 2])))
      yield* settle
      yield* TestClock.adjust("59 seconds")
      yield* settle
      assert.isNull(fiber.unsafePoll())
      yield* TestClock.adjust("1 second")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.failed, 2)
      const store = yield* Store
      const row = Option.getOrThrow(yield* store.getPipeline(Pipeline.make("budget", ask).bind(1).pipelineId))
      assert.strictEqual(row.errorType, "MaxTotalExceeded")
      assert.include(row.errorMessage ?? "", "retry.maxTotal of 60 s")
      assert.include(row.errorMessage ?? "", "key-a throttled until 1970-01-01T00:05:00.000Z")
    }).pipe(Effect.provide(env(keys()))))
})
