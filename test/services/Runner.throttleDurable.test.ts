/**
 * Issue 18, fresh-user finding 2: a `kill -9` 200–290 ms after a 429 lost the throttle window
 * (the resume sent to the key at once). The window must be written by the first store write
 * after the 429 is reported, before anything else of the attempt: a store wrapper records the
 * order of the writes and of the attempt's own steps (TestClock; nothing sleeps in real time).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"

/** What happened, in order: the store's writes and the attempt's steps. */
const log: Array<string> = []

const healthOf = (h: unknown): Record<string, unknown> => (typeof h === "object" && h !== null ? h as Record<string, unknown> : {})

/** The memory store, its writes logged (`put A throttled`, `put B`, `event …`, `flush`, `attempt`). */
const Logged = Layer.effect(
  Store,
  Effect.map(Store, (store): StoreService => ({
    ...store,
    putResource: (r) =>
      Effect.zipRight(
        Effect.sync(() => log.push(`put ${r.resourceId}${typeof healthOf(r.health)["throttledUntil"] === "number" ? " throttled" : ""}`)),
        store.putResource(r)
      ),
    emitEvent: (e) => Effect.zipRight(Effect.sync(() => e.kind.startsWith("resource.") && log.push(`event ${e.kind}`)), store.emitEvent(e)),
    recordAttempt: (a) => Effect.zipRight(Effect.sync(() => log.push("attempt")), store.recordAttempt(a)),
    flush: Effect.zipRight(Effect.sync(() => log.push("flush")), store.flush)
  }))
).pipe(Layer.provide(MemoryStore.layer()))

const env = Layer.provideMerge(
  Runner.layer({ handleSignals: false, concurrency: 1, heartbeat: "1 hour", staleAfter: "3 hours" }),
  Layer.mergeAll(
    Logged,
    Pool.layer([
      Pool.make("llm", [Resource.make("llm", { id: "A", capacity: 1 })]),
      Pool.make("judge", [Resource.make("judge", { id: "B", capacity: 1 })])
    ])
  )
)

/** One call on A answered 429 with a Retry-After of 8 s; the attempt logs when its report returned. */
const throttled = Task.make("ask", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
  Effect.gen(function*() {
    const lease = yield* ctx.acquire()
    const error = new RetryableError({ message: "429 Too Many Requests", errorClass: "rate_limit", retryAfterMs: 8_000 })
    yield* Effect.sync(() => log.push("429 read"))
    yield* lease.report({ ok: false, error })
    yield* Effect.sync(() => log.push("attempt continues"))
    return yield* Effect.fail(error)
  }).pipe(Effect.as(n)))

describe("a throttle is durable before its attempt goes on (issue 18)", () => {
  it.effect("the first write after the 429 is the throttled resource's row with its window; then its event, flushed; only then the attempt continues", () =>
    Effect.gen(function*() {
      log.length = 0
      const report = yield* Runner.run(Pipeline.make("t", throttled).map([1]))
      assert.strictEqual(report.stats.byState.failed, 1)
      const from = log.indexOf("429 read")
      const to = log.indexOf("attempt continues")
      assert.isAbove(from, -1)
      assert.deepStrictEqual(log.slice(from + 1, to), ["put A throttled", "event resource.throttled", "flush"])
      // the other pool's resource is written later (within a second, or at the run's end)
      assert.include(log.slice(to), "put B")
    }).pipe(Effect.provide(env)))
})
