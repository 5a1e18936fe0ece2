/**
 * Issue 18 re-trial: the adaptive algorithm's learned state restored by a resume, by the age of
 * the state (TestClock). A key throttled from its first request (Retry-After 12 s) is cut to
 * the conservative start; resumed within the throttle window it still waits for the window,
 * resumed 3 minutes later it starts afresh in slow start instead of crawling up from the
 * depressed rate (the tester's run: 2 requests/s restored, 21 s to recover).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Pool from "../../src/services/Pool.js"

const pools = () => [
  Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 8, options: { baseUrl: "https://k.example/v1", apiKey: "sk-k" } })], {
    algorithm: "adaptive"
  })
]

/** A run whose first request is answered 429 with Retry-After 12 s; its saved pool state. */
const throttledRun = Effect.scoped(Effect.gen(function*() {
  const first = yield* Pool.makePools(pools())
  const lease = yield* first.acquireRaw("llm")
  yield* lease.report({ ok: false, error: new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: 12_000 }) })
  yield* lease.releaseNow
  return (yield* first.saveState("llm"))[0]!.state
}))

const adaptiveOf = (snap: ReadonlyArray<Pool.ResourceSnapshot>) =>
  (snap[0]!.algorithm as Record<string, Record<string, unknown>>)["adaptive"]!

describe("adaptive: a learned state restored by its age", () => {
  it.effect("resumed within the throttle window: the window holds, then one lease at a time, at most the conservative start", () =>
    Effect.gen(function*() {
      const saved = yield* throttledRun
      yield* TestClock.adjust("5 seconds")
      const outcome = yield* Effect.scoped(Effect.gen(function*() {
        const again = yield* Pool.makePools(pools())
        const outcome = yield* again.restoreState("llm", "k", saved)
        return { outcome, snap: yield* again.snapshot("llm") }
      }))
      assert.deepStrictEqual(outcome.outcome, { _tag: "Restored", applied: ["throttle", "probing", "algorithm:adaptive"] })
      assert.strictEqual(outcome.snap[0]!.throttledUntil, 12_000)
      assert.isAtMost(adaptiveOf(outcome.snap)["rate"] as number, 2)
    }))

  it.effect("resumed 3 minutes after the throttle ended: no window, slow start from the conservative start", () =>
    Effect.gen(function*() {
      const saved = yield* throttledRun
      yield* TestClock.adjust("3 minutes")
      const outcome = yield* Effect.scoped(Effect.gen(function*() {
        const again = yield* Pool.makePools(pools())
        const outcome = yield* again.restoreState("llm", "k", saved)
        return { outcome, snap: yield* again.snapshot("llm") }
      }))
      // the window is over (nothing holds the key); one lease at a time until a success, as after any throttle
      assert.deepStrictEqual(outcome.outcome, { _tag: "Restored", applied: ["probing", "algorithm:adaptive"] })
      assert.isUndefined(outcome.snap[0]!.throttledUntil)
      const a = adaptiveOf(outcome.snap)
      assert.strictEqual(a["phase"], "slowStart")
      assert.strictEqual(a["rate"], 2)
      // the cut it remembers is still reported
      assert.strictEqual(a["decreases"], 1)
    }))
})
