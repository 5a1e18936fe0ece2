/**
 * A retry after a transient failure goes to another resource of the pool that can serve (the
 * "previous hosts" rule of Envoy's retry host predicates): found by issue 17's chaos C9, where a
 * runner with little traffic on a dead endpoint spent all six attempts of one task on it before
 * its own circuit breaker (ten outcomes at least) had seen enough to open, while the other
 * endpoint of the pool was live. The same holds for one process: one pipeline at a time on a
 * pool whose first resource died.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Scope, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pool.PoolsService) => Effect.Effect<A, E, Scope.Scope>
) => Effect.scoped(Effect.flatMap(Pool.makePools(configs), f))

const err503 = () => new RetryableError({ message: "503 Service Unavailable", errorClass: "upstream" })

const twoKeys = (extra: Partial<Resource.ResourceOptions> = {}) => [
  Pool.make("llm", [
    Resource.make("llm", { id: "r1", capacity: 4, ...extra }),
    Resource.make("llm", { id: "r2", capacity: 4, ...extra })
  ])
]

const holder = (pipelineId: string, taskName = "ask") => ({ pipelineId, taskName })

describe("a retry after a transient failure goes elsewhere (chaos C9)", () => {
  it.effect("one pipeline at a time on a pool whose first resource died: each retries on the live one and succeeds", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 6 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          calls.push(`${n}:${lease.resource.id}`)
          if (lease.resource.id === "r1") {
            yield* lease.report({ ok: false, error: err503() })
            return yield* Effect.fail(err503())
          }
          yield* lease.report({ ok: true })
          return n
        }))
      const fiber = yield* Effect.fork(Runner.run(Pipeline.make("c9", ask).map([1, 2, 3])))
      for (let i = 0; i < 200 && fiber.unsafePoll() === null; i++) {
        yield* settle
        yield* TestClock.adjust("1 second")
      }
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 3)
      // every pipeline: one failure on the dead r1 (first free in pool order), its retry on r2
      // (before the fix: attempts on r1 until the breaker, needing ten outcomes, opened)
      for (const n of [1, 2, 3]) {
        assert.deepStrictEqual(calls.filter((c) => c.startsWith(`${n}:`)), [`${n}:r1`, `${n}:r2`])
      }
    }).pipe(
      Effect.provide(Layer.provideMerge(
        Runner.layer({ handleSignals: false, concurrency: 1, heartbeat: "1 hour", staleAfter: "3 hours" }),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer(twoKeys()))
      ))
    ))

  it.effect("the retry waits for the live resource when it is busy, rather than going back to the failing one", () =>
    withPools(twoKeys(), (pools) =>
      Effect.gen(function*() {
        const first = yield* pools.acquireRaw("llm", holder("p1"))
        assert.strictEqual(first.resource.id, "r1")
        yield* first.report({ ok: false, error: err503() })
        yield* first.releaseNow
        // r2 full (another pipeline's leases)
        const others = yield* Effect.all(Array.from({ length: 4 }, () => pools.acquireRaw({ pool: "llm", id: "r2" }, holder("p2"))))
        const retry = yield* Effect.fork(pools.acquireRaw("llm", holder("p1")))
        yield* settle
        assert.isNull(retry.unsafePoll(), "r1 is free, but the retry waits for r2")
        yield* others[0]!.releaseNow
        const lease = yield* Fiber.join(retry)
        assert.strictEqual(lease.resource.id, "r2")
        // only the next acquire avoids it: the one after is served in pool order again
        yield* lease.releaseNow
        const again = yield* pools.acquireRaw("llm", holder("p1"))
        assert.strictEqual(again.resource.id, "r1")
      })))

  it.effect("with no other resource that can serve (dead, revoked, or none), the retry goes back to the failing one", () =>
    withPools(twoKeys({ deadAfter: 1, degradeAfter: 1 }), (pools) =>
      Effect.gen(function*() {
        // r2 dead (a fatal-class failure streak), so r1 is the only one in rotation
        const r2 = yield* pools.acquireRaw({ pool: "llm", id: "r2" }, holder("px"))
        yield* r2.report({ ok: false, error: new Error("boom") })
        yield* r2.releaseNow
        assert.strictEqual((yield* pools.snapshot("llm")).find((s) => s.id === "r2")?.state, "dead")
        const first = yield* pools.acquireRaw("llm", holder("p1"))
        yield* first.report({ ok: false, error: err503() })
        yield* first.releaseNow
        const retry = yield* pools.acquireRaw("llm", holder("p1"))
        assert.strictEqual(retry.resource.id, "r1")
      })))

  it.effect("only transient classes move a retry: a fatal (the request's fault) or a rate limit (throttle) does not", () =>
    withPools(twoKeys(), (pools) =>
      Effect.gen(function*() {
        const first = yield* pools.acquireRaw("llm", holder("p1"))
        yield* first.report({ ok: false, error: new RetryableError({ message: "400 bad request", errorClass: "fatal" }) })
        yield* first.releaseNow
        const retry = yield* pools.acquireRaw("llm", holder("p1"))
        assert.strictEqual(retry.resource.id, "r1")
        // another task of the same pipeline is another holder: not moved
        yield* retry.report({ ok: false, error: err503() })
        yield* retry.releaseNow
        const other = yield* pools.acquireRaw("llm", holder("p1", "judge"))
        assert.strictEqual(other.resource.id, "r1")
        yield* other.releaseNow
        const moved = yield* pools.acquireRaw("llm", holder("p1"))
        assert.strictEqual(moved.resource.id, "r2")
      })))
})
