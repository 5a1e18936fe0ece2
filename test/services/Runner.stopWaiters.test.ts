/**
 * A stop (a time limit, a signal, `handle.stop`) ends every wait for a pool lease at once: an
 * attempt queued on a busy pool, a throttle window or a pacing timer has sent nothing, so it is
 * parked, not in flight, and gets no grace; only attempts holding their leases may finish
 * within the grace period. Before the fix such waiters got the grace too, took a lease freed
 * meanwhile and sent a request after the stop (`stopAfter: 2 seconds` ran for 7 s).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, TestClock } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as AcquireAlgorithm from "../../src/services/AcquireAlgorithm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })

const env = (algorithm: AcquireAlgorithm.AcquireAlgorithm) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4, heartbeat: "1 hour", staleAfter: "3 hours", grace: "5 seconds", stopAfter: "2 seconds" }),
    Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })], { algorithm })]))
  )

describe("a stop interrupts every wait for a lease", () => {
  for (const [name, algorithm] of [["wait", AcquireAlgorithm.wait()], ["adaptive", AcquireAlgorithm.adaptive({ initialRate: 0.2 })]] as const) {
    it.effect(`${name}: stopAfter 2 s: no request starts after the stop; the run ends when the request in flight does`, () =>
      Effect.gen(function*() {
        const sent: Array<number> = []
        // each request takes 3 s; one lease at a time
        const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
          Effect.gen(function*() {
            const lease = yield* ctx.acquire()
            sent.push(yield* TestClockNow)
            yield* Effect.sleep("3 seconds")
            yield* lease.report({ ok: true })
            return n
          }))
        const fiber = yield* Effect.fork(Runner.run(Pipeline.make("p", ask).map([1, 2, 3, 4])))
        for (let i = 0; i < 20; i++) {
          yield* settle
          yield* TestClock.adjust("500 millis")
        }
        const report = yield* Fiber.join(fiber)
        // the first request went at once, none after the stop at 2 s
        assert.deepStrictEqual(sent, [0])
        assert.strictEqual(report.stats.byState.succeeded, 1)
        assert.strictEqual(report.stats.byState.interrupted, 3)
        // the run ended when the request in flight did (3 s), not at the end of the grace (7 s)
        assert.isAtMost(report.durationMs, 3500)
      }).pipe(Effect.provide(env(algorithm))))
  }
})

const TestClockNow = Effect.clockWith((c) => c.currentTimeMillis)
