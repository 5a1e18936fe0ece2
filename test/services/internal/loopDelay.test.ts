/**
 * The event-loop stall sampler read by the `adaptive` algorithm's latency rule (issue 18's
 * leftovers): a fiber on Effect's `Clock` in its scope (TestClock drives it; nothing runs after
 * the scope closes), the stall bookkeeping with explicit times, the pools service passing a
 * stall source from its context to the algorithm, and one live check that a real stall of
 * the loop is seen (a stall is real time: only the live clock wakes late).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope, TestClock } from "effect"
import * as Resource from "../../../src/domain/Resource.js"
import * as Pool from "../../../src/services/Pool.js"
import * as LoopDelay from "../../../src/services/internal/loopDelay.js"

const R = LoopDelay.RESOLUTION_MS

describe("StallLog: the stalls kept and their overlap with a span", () => {
  it("a late wake-up is a stall ending then, of the lateness; on-time ones and jitter below 2 ms are not", () => {
    const log = new LoopDelay.StallLog()
    log.begin(1000)
    log.wake(1000 + R) // on time
    log.wake(1000 + 2 * R + 1) // 1 ms late: jitter
    log.wake(1000 + 3 * R + 1 + 150) // 150 ms late: a stall over [1061, 1211]
    assert.strictEqual(log.stalledMs(1000, 1230), 150, "the stall ended as the span did: it held the answer's reading")
    assert.strictEqual(log.stalledMs(1100, 1150), 50, "a span inside the stall: all of it")
    assert.strictEqual(log.stalledMs(1000, 1100), 39, "the stall's first 39 ms")
    assert.strictEqual(log.stalledMs(1211, 2000), 0, "after the stall")
    assert.strictEqual(log.stalledMs(500, 999), 0, "before sampling began")
    assert.strictEqual(log.stalledMs(1100, 1100), 0, "an empty span")
    // a stall in the middle of a span, the loop running again well before its end: the request
    // was out and its answer not yet in (it would have been read as the stall ended), so the
    // stall held nothing (issue 18's benchmark over HTTP: summed, a loaded machine's steady
    // stalls were taken out of the server's latency)
    assert.strictEqual(log.stalledMs(1000, 2000), 0, "a stall in the middle held nothing")
    assert.strictEqual(log.stalledMs(1045, 2000), 150, "one that began as the request left held its sending")
  })

  it("heldMs: the stalls at a span's ends count, those in between do not", () => {
    const steady = Array.from({ length: 20 }, (_, k) => [1000 + 32 * k, 1000 + 32 * k + 12] as const)
    // a 400 ms answer through a steady 12-of-32 ms lateness: only the ends' stalls, not ~150 ms
    assert.strictEqual(LoopDelay.heldMs(steady, 1000, 1400), 12 + 12)
    assert.strictEqual(LoopDelay.heldMs([[900, 1100]], 1000, 1400), 100, "covering the start")
    assert.strictEqual(LoopDelay.heldMs([[1300, 1390]], 1000, 1400), 90, "ending within the slack of the end")
    assert.strictEqual(LoopDelay.heldMs([[1300, 1350]], 1000, 1400), 0, "ended well before the answer was read")
  })
})

describe("the sampler: a fiber on the Clock, in its scope", () => {
  it.effect("nothing runs before the first question; then TestClock drives it; idle it stops; a question restarts it", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const idleStop = 10 * R
      const sampler = yield* Scope.extend(LoopDelay.makeWith(idleStop), scope)
      yield* TestClock.adjust("1 second")
      assert.strictEqual(sampler.wakeups(), 0, "not started")
      assert.strictEqual(sampler.stalledMs(0, 1000), 0, "the first question starts it and knows nothing")
      yield* TestClock.adjust(5 * R)
      assert.strictEqual(sampler.wakeups(), 5)
      // on the test clock every sleep ends on time: no stall
      assert.strictEqual(sampler.stalledMs(1000, 1000 + 5 * R), 0)
      yield* TestClock.adjust(idleStop + 2 * R)
      const idle = sampler.wakeups()
      assert.strictEqual(idle, 5 + 11, "the first wake-up past the idle stop ends it")
      yield* TestClock.adjust("1 second")
      assert.strictEqual(sampler.wakeups(), idle, "stopped")
      sampler.stalledMs(0, 1)
      yield* TestClock.adjust(5 * R)
      assert.strictEqual(sampler.wakeups(), idle + 5, "restarted")
      yield* Scope.close(scope, Exit.void)
    }))

  it.effect("the scope closed while sampling: the fiber is interrupted, no wake-up after", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const sampler = yield* Scope.extend(LoopDelay.make, scope)
      sampler.stalledMs(0, 1)
      yield* TestClock.adjust(3 * R)
      assert.strictEqual(sampler.wakeups(), 3)
      yield* Scope.close(scope, Exit.void)
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual(sampler.wakeups(), 3)
    }))

  it.live("on the live clock, a loop blocked for 150 ms reads as (most of) 150 ms stalled within the span", () =>
    Effect.scoped(Effect.gen(function*() {
      const sampler = yield* LoopDelay.make
      sampler.stalledMs(0, 1)
      yield* Effect.sleep(3 * R)
      const from = Date.now()
      yield* Effect.sync(() => {
        const until = from + 150
        while (Date.now() < until) {
          // the loop blocked for 150 ms
        }
      })
      yield* Effect.sleep(3 * R)
      const to = Date.now()
      const stalled = sampler.stalledMs(from, to)
      assert.isAtLeast(stalled, 150 - 2 * R)
      assert.isAtMost(stalled, to - from)
    })))
})

describe("the pools service passes its stall source to the adaptive algorithm", () => {
  const pools = [
    Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 8, options: { baseUrl: "https://k.example/v1", apiKey: "sk-k" } })], {
      algorithm: "adaptive"
    })
  ]
  const answer = (pools: Pool.PoolsService) =>
    Effect.gen(function*() {
      const lease = yield* pools.acquireRaw("llm")
      yield* TestClock.adjust("400 millis")
      yield* lease.report({ ok: true, latencyMs: 400 })
      yield* lease.releaseNow
      const snap = yield* pools.snapshot("llm")
      return (snap[0]!.algorithm as Record<string, Record<string, unknown>>)["adaptive"]!["loopStallMs"]
    })

  it.effect("a LoopDelay in the context: the stall that held the answer's reading is taken out (loopStallMs)", () =>
    Effect.scoped(Effect.gen(function*() {
      const p = yield* Pool.makePools(pools)
      return yield* answer(p)
    })).pipe(
      // 250 ms stalled up to the answer's reading at 400 ms
      Effect.provide(LoopDelay.layerTest([[400, 250]])),
      Effect.map((stalled) => assert.strictEqual(stalled, 250))
    ))

  it.effect("none given: the service's own sampler, on the test clock, sees no stall", () =>
    Effect.scoped(Effect.gen(function*() {
      const p = yield* Pool.makePools(pools)
      return yield* answer(p)
    })).pipe(Effect.map((stalled) => assert.strictEqual(stalled, 0))))
})
