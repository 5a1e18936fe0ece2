import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
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

describe("a throttle of one key does not hold a retry another key can serve (tester18e F1)", () => {
  interface Call {
    readonly key: string
    readonly at: number
  }
  const twoKeys = (algorithm: string) => [
    Pool.make("llm", [
      Resource.make("llm", { id: "key-a", capacity: 2 }),
      Resource.make("llm", { id: "key-b", capacity: 2 })
    ], { algorithm })
  ]
  /** key-a answers 429 with Retry-After `retryAfterMs` while `server.aThrottles`; key-b answers. */
  const askOf = (calls: Array<Call>, server: { aThrottles: boolean; bRetryAfterMs?: number }) =>
    Task.make("ask", { resource: "llm", retry: { maxAttempts: 4 } }, (n: number, ctx) =>
      Effect.gen(function*() {
        const lease = yield* ctx.acquire()
        const at = yield* Effect.clockWith((c) => c.currentTimeMillis)
        calls.push({ key: lease.resource.id, at })
        const throttle = lease.resource.id === "key-a" && server.aThrottles
          ? 60_000
          : lease.resource.id === "key-b" && server.bRetryAfterMs !== undefined
          ? server.bRetryAfterMs
          : undefined
        if (throttle !== undefined) {
          if (lease.resource.id === "key-b") delete server.bRetryAfterMs
          const error = new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: throttle })
          yield* lease.report({ ok: false, error })
          return yield* Effect.fail(error)
        }
        yield* lease.report({ ok: true })
        return n
      }))

  it.effect.each(["wait", "leastBusy", "sticky", "failover", "quotaAware", "backoff", "adaptive"] as const)(
    "%s: key-a answers 429 Retry-After 60 s; the refused pipelines retry on key-b within their backoff (0.5 s), not 60 s",
    (algorithm) =>
      Effect.gen(function*() {
        const calls: Array<Call> = []
        const template = Pipeline.make("ra", askOf(calls, { aThrottles: true }))
        const fiber = yield* Effect.fork(Runner.run(template.map(Array.from({ length: 8 }, (_, i) => i))))
        for (let i = 0; i < 300 && fiber.unsafePoll() === null; i++) {
          yield* settle
          yield* TestClock.adjust("100 millis")
        }
        yield* settle
        // done well before key-a's window ends, with key-a refused at least once
        const exit = fiber.unsafePoll()
        const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
        assert.isNotNull(exit, `the run still waits for key-a's 60 s: ${JSON.stringify(calls)}`)
        assert.isBelow(now, 5_000)
        const report = yield* Fiber.join(fiber)
        assert.strictEqual(report.stats.byState.succeeded, 8)
        const toA = calls.filter((c) => c.key === "key-a")
        assert.isAbove(toA.length, 0)
        // the throttled key stays out of rotation inside its window
        assert.isTrue(toA.every((c) => c.at === toA[0]!.at))
        const store = yield* Store
        const retried = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({}))).flatMap((a) => {
          const d = a.decision as { reason: string; retryAfterMs?: number; delayMs: number } | null
          return d?.reason === "retryable" ? [d] : []
        })
        assert.isAbove(retried.length, 0)
        for (const d of retried) {
          assert.strictEqual(d.retryAfterMs, 60_000)
          assert.isAtMost(d.delayMs, 500)
        }
      }).pipe(Effect.provide(env(twoKeys(algorithm))))
  )

  it.effect("every key throttled: the retry waits for the first window to end (key-b's 10 s), not the refusing key's 60 s", () =>
    Effect.gen(function*() {
      const calls: Array<Call> = []
      const server = { aThrottles: true, bRetryAfterMs: 10_000 }
      const pools = [Pool.make("llm", [
        Resource.make("llm", { id: "key-a", capacity: 1 }),
        Resource.make("llm", { id: "key-b", capacity: 1 })
      ])]
      const template = Pipeline.make("ra2", askOf(calls, server))
      const fiber = yield* Effect.fork(Runner.run(template.map([1, 2])).pipe(Effect.provide(env(pools))))
      yield* settle
      // both keys refused at t=0: nothing is sent before key-b's window ends
      assert.deepStrictEqual(calls.map((c) => c.at), [0, 0])
      yield* TestClock.adjust("9 seconds")
      yield* settle
      assert.strictEqual(calls.length, 2)
      yield* TestClock.adjust("2 seconds")
      yield* settle
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 2)
      assert.isTrue(calls.slice(2).every((c) => c.key === "key-b" && c.at >= 10_000 && c.at < 11_000))
    }).pipe(Effect.provide(MemoryStore.layer())))
})
