/**
 * Options given to one run (`Runner.run` / `Runner.start`) act as the same options given to
 * `Runner.layer`, and an option a run leaves `undefined` keeps the layer's value.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, TestClock } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"

const env = (options: Runner.RunOptions = {}) =>
  Layer.provideMerge(Runner.layer({ handleSignals: false, ...options }), Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))

const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("10 millis"), n))
const fast = Task.sync("fast", (n: number) => n + 1)
const seeds = Array.from({ length: 200 }, (_, i) => i)

/** Runs 200 pipelines of `task` with `overrides` and gives the runner's live figures after. */
const bounds = (task: typeof slow | typeof fast, overrides: Runner.RunOptions) =>
  Effect.gen(function*() {
    const runner = yield* Runner.Runner
    const fiber = yield* Effect.fork(runner.run(Pipeline.make(`bounded-${task.name}`, task).map(seeds), overrides))
    for (let i = 0; i < 40; i++) yield* TestClock.adjust("10 millis")
    const report = yield* Fiber.join(fiber)
    assert.strictEqual(report.stats.byState.succeeded, 200)
    return yield* runner.stats
  })

describe("Runner.run options", () => {
  it.effect("concurrency and maxAdmitted given to run bound the run as they do given to the layer", () =>
    Effect.gen(function*() {
      const live = yield* bounds(slow, { concurrency: 8, maxAdmitted: 16 })
      assert.strictEqual(live.concurrency, 8)
      assert.strictEqual(live.maxAdmitted, 16)
      assert.strictEqual(live.peakInFlight, 8)
      assert.isAtMost(live.peakAdmitted, 16)
    }).pipe(Effect.provide(env())))

  it.effect("maxAdmitted given to run bounds pipelines of synchronous tasks (run without a fiber each)", () =>
    Effect.gen(function*() {
      const live = yield* bounds(fast, { maxAdmitted: 4 })
      assert.strictEqual(live.maxAdmitted, 4)
      assert.isAtMost(live.peakAdmitted, 4)
    }).pipe(Effect.provide(env({ concurrency: 64 }))))

  it.effect("an option a run leaves undefined keeps the layer's value", () =>
    Effect.gen(function*() {
      const live = yield* bounds(slow, { concurrency: undefined, maxAdmitted: undefined, label: undefined })
      assert.strictEqual(live.concurrency, 8)
      assert.strictEqual(live.maxAdmitted, 16)
      assert.strictEqual(live.peakInFlight, 8)
      assert.isAtMost(live.peakAdmitted, 16)
    }).pipe(Effect.provide(env({ concurrency: 8, maxAdmitted: 16 }))))
})
