/**
 * Case C3 (../shared/cases/README.md): retries are bounded, and the bounds hold — on
 * simulated time, through the public API (`src/index.ts`).
 *
 * The provider is a scripted task whose answer depends on `Clock` time, so `TestClock` drives
 * both the retry waits and the provider's recovery.
 *
 * (a) The case asks for 5 items, 503 for the first 60 s then 200, policy base 1 s, factor 2,
 * cap 8 s, max 10 attempts, and expects "no wait above the cap" and "all succeed by 75 s".
 * Those two expectations cannot both hold with max 10 attempts: 10 attempts have 9 waits,
 * which sum to at most 1 + 2 + 4 + 8 × 6 = 55 s (less with the default full jitter, which
 * draws each wait from [0, computed)), so the 10th attempt starts before t = 55 s, while the
 * provider still answers 503, and the runner (correctly) stops with `attempts_exhausted`.
 * The case's intent is that retries are *bounded* (each wait ≤ cap, a finite number of
 * attempts, an end in bounded time) and that a recovering provider is *reached* with enough
 * attempts. So the test checks both halves separately:
 *   (i)  max 10 attempts (full jitter): every persisted decision's delayMs ≤ 8 000, each item
 *        ends after exactly 10 attempts with reason `attempts_exhausted`, its last attempt
 *        starting at ≤ 55 s;
 *   (ii) max 12 attempts, jitter "none": waits 1, 2, 4, 8, 8, … put attempts at 0, 1, 3, 7,
 *        15, 23, 31, 39, 47, 55, 63 s; the 11th (63 s) gets a 200, so all succeed by 75 s,
 *        still with every wait ≤ cap.
 * (b) 5 items, always 429 without Retry-After, max 4 attempts: each item fails with class
 *     rate_limit after exactly 4 attempts (20 in total). The CLI version (exit code 1) is in
 *     test/cli/run.test.ts.
 *
 * The clock is advanced 1 s at a time (so every woken fiber runs before the next step),
 * after the run has admitted its items; MemoryStore and `handleSignals: false` keep the run
 * free of real timers.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Data, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
import { MemoryStore, Pipeline, Pool, Runner, Store, Task } from "../../src/index.js"
import { rid } from "../support/ids.js"

/** What the scripted provider answers with: an HTTP status, classified by assay. */
class ProviderError extends Data.TaggedError("ProviderError")<{ readonly status: number; readonly message: string }> {}

const ITEMS = [0, 1, 2, 3, 4]

const env = Layer.provideMerge(
  Runner.layer({ handleSignals: false, concurrency: 5 }),
  Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
)

/** 503 until `recoverAtMs` (Clock time), then the answer. */
const provider = (retry: Task.Options<number, string>["retry"], recoverAtMs: number) =>
  Task.make("provider", { retry }, (n: number) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      now < recoverAtMs
        ? Effect.fail(new ProviderError({ status: 503, message: "503 service unavailable" }))
        : Effect.succeed(`answer ${n}`)))

interface Decision {
  readonly retry: boolean
  readonly reason: string
  readonly delayMs: number
  readonly errorClass: string
}

/**
 * Forks the run, waits until every item is admitted, then advances the clock 1 s at a time
 * for `seconds` steps. Returns the report and the (simulated) time at which the run ended.
 */
const runOnTestClock = <S extends Pipeline.PipelineSpec<any, any, any, any>>(specs: ReadonlyArray<S>, seconds: number) =>
  Effect.gen(function*() {
    const runner = yield* Runner.Runner
    const fiber = yield* Effect.fork(runner.run(specs))
    for (let i = 0; i < 10_000 && (yield* runner.stats).counters.admitted < specs.length; i++) yield* Effect.yieldNow()
    assert.strictEqual((yield* runner.stats).counters.admitted, specs.length, "the run started before the clock moved")
    let endedAt: number | undefined
    for (let s = 0; s < seconds; s++) {
      yield* TestClock.adjust("1 second")
      if (endedAt === undefined && Option.isSome(yield* Fiber.poll(fiber))) endedAt = yield* Clock.currentTimeMillis
    }
    const report = yield* Fiber.join(fiber)
    return { report, endedAt: endedAt ?? (yield* Clock.currentTimeMillis) }
  })

const attemptsOf = (runId: string) =>
  Effect.gen(function*() {
    const store = yield* Store.Store
    // Ordered by attempt number: the point here is each pipeline's sequence, not the order in
    // which the write-behind batches happened to land.
    return Array.from(yield* Stream.runCollect(store.streamAttempts({ runId: rid(runId) }))).sort((a, b) => a.attemptNo - b.attemptNo)
  })

describe("C3: retries are bounded, and the bounds hold (simulated time)", () => {
  it.effect("(a-i) max 10 attempts: every wait ≤ cap; each item ends after exactly 10 attempts, by 55 s", () =>
    Effect.gen(function*() {
      const task = provider({ maxAttempts: 10, base: "1 second", factor: 2, cap: "8 seconds" }, 60_000)
      const template = Pipeline.make("c3a-bounded", task)
      const { report } = yield* runOnTestClock(ITEMS.map((n) => template.bind(n)), 80)
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(report.stats.byState.failed, 5)
      const attempts = yield* attemptsOf(report.runId)
      assert.strictEqual(attempts.length, 50)
      const decisions = attempts.map((a) => a.decision as Decision)
      assert.isTrue(decisions.every((d) => d.delayMs >= 0 && d.delayMs <= 8_000), "no scheduled wait above the cap")
      assert.isTrue(decisions.every((d) => d.errorClass === "upstream"))
      for (const n of ITEMS) {
        const mine = attempts.filter((a) => a.pipelineId === template.bind(n).pipelineId)
        assert.deepStrictEqual(mine.map((a) => a.attemptNo), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        const last = mine[mine.length - 1]!
        assert.deepStrictEqual(
          { retry: (last.decision as Decision).retry, reason: (last.decision as Decision).reason },
          { retry: false, reason: "attempts_exhausted" }
        )
        assert.isTrue(mine.slice(0, -1).every((a) => (a.decision as Decision).retry))
        // Bounded in time: the waits sum to at most 1 + 2 + 4 + 8 × 6 = 55 s.
        assert.isAtMost(last.startedAt - report.startedAt, 55_000)
        // Each wait was honoured: the next attempt starts no earlier than the decided delay.
        for (let i = 1; i < mine.length; i++) {
          assert.isAtLeast(mine[i]!.startedAt - mine[i - 1]!.endedAt, Math.floor((mine[i - 1]!.decision as Decision).delayMs))
        }
      }
    }).pipe(Effect.provide(env)))

  it.effect("(a-ii) with enough attempts (12, no jitter) all 5 items succeed by t = 75 s, every wait ≤ cap", () =>
    Effect.gen(function*() {
      const task = provider({ maxAttempts: 12, base: "1 second", factor: 2, cap: "8 seconds", jitter: "none" }, 60_000)
      const template = Pipeline.make("c3a-recovers", task)
      const { endedAt, report } = yield* runOnTestClock(ITEMS.map((n) => template.bind(n)), 80)
      assert.strictEqual(report.stats.byState.succeeded, 5)
      assert.isAtMost(endedAt - report.startedAt, 75_000)
      const attempts = yield* attemptsOf(report.runId)
      const decisions = attempts.map((a) => a.decision as Decision)
      assert.isTrue(decisions.every((d) => d.delayMs <= 8_000), "no scheduled wait above the cap")
      for (const n of ITEMS) {
        const mine = attempts.filter((a) => a.pipelineId === template.bind(n).pipelineId)
        assert.deepStrictEqual(
          mine.map((a) => (a.decision as Decision).delayMs),
          [1_000, 2_000, 4_000, 8_000, 8_000, 8_000, 8_000, 8_000, 8_000, 8_000, 0]
        )
        assert.deepStrictEqual(mine.map((a) => a.outcome).slice(-2), ["failed", "succeeded"])
        assert.deepStrictEqual(mine.map((a) => a.startedAt - report.startedAt), [
          0, 1_000, 3_000, 7_000, 15_000, 23_000, 31_000, 39_000, 47_000, 55_000, 63_000
        ])
      }
    }).pipe(Effect.provide(env)))

  it.effect("(b) always 429 without Retry-After, max 4 attempts: each item fails as rate_limit after exactly 4 (20 in total)", () =>
    Effect.gen(function*() {
      const task = Task.make(
        "always429",
        { retry: { maxAttempts: 4, base: "1 second", factor: 2, cap: "8 seconds" } },
        (_: number) => Effect.fail(new ProviderError({ status: 429, message: "429 too many requests" }))
      )
      const template = Pipeline.make("c3b", task)
      const { report } = yield* runOnTestClock(ITEMS.map((n) => template.bind(n)), 20)
      assert.strictEqual(report.stats.byState.failed, 5)
      const attempts = yield* attemptsOf(report.runId)
      assert.strictEqual(attempts.length, 20)
      const store = yield* Store.Store
      for (const n of ITEMS) {
        const id = template.bind(n).pipelineId
        const mine = attempts.filter((a) => a.pipelineId === id)
        assert.deepStrictEqual(mine.map((a) => a.attemptNo), [1, 2, 3, 4])
        assert.isTrue(mine.every((a) => a.errorClass === "rate_limit"))
        assert.strictEqual((mine[3]!.decision as Decision).reason, "attempts_exhausted")
        const row = Option.getOrThrow(yield* store.getPipeline(id))
        assert.strictEqual(row.state, "failed")
        assert.strictEqual(row.errorClass, "rate_limit")
      }
    }).pipe(Effect.provide(env)))
})
