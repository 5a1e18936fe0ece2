import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Ref, TestClock } from "effect"
import * as Progress from "../../src/services/Progress.js"
import type { LiveStats } from "../../src/services/Runner.js"

const stats = (succeeded: number, failed = 0, delayed = 0, inFlight = 0): LiveStats => ({
  runId: "r1",
  stopping: false,
  inFlight,
  delayed,
  admitted: inFlight + delayed,
  maxAdmitted: 64,
  concurrency: 8,
  counters: { admitted: succeeded + failed + inFlight, succeeded, failed, interrupted: 0, skipped: 0, retries: delayed, leasesLeaked: 0, repairFailures: 0 },
  peakInFlight: inFlight,
  peakAdmitted: inFlight,
  pools: {}
})

/** A fake runner whose figures the test sets, and a sink collecting what is written. */
const setup = Effect.gen(function*() {
  const live = yield* Ref.make(stats(0))
  const written = yield* Ref.make<ReadonlyArray<string>>([])
  const runner = { stats: Ref.get(live) }
  const out = (text: string) => Ref.update(written, (w) => [...w, text])
  return { live, written, runner, out }
})

describe("Progress", () => {
  it.effect("on a terminal: one line redrawn in place, rate and ETA from the last seconds, a newline at the end", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { total: 100, tty: true, out, width: 100 })
        yield* Effect.sleep("5 seconds")
      })))
      yield* TestClock.adjust("1 millis") // the display starts (first sample: 0 done)
      // 10 pipelines per second for 4 seconds, one failure, two waiting for a retry
      for (let s = 1; s <= 4; s++) {
        yield* Ref.set(live, stats(10 * s - 1, 1, 2, 3))
        yield* TestClock.adjust("1 second")
      }
      const mid = yield* Ref.get(written)
      assert.isTrue(mid.length >= 20, `expected a redraw every 200 ms, got ${mid.length}`)
      for (const chunk of mid) {
        assert.isTrue(chunk.startsWith("\r\u001b[2K"), "each redraw starts with CR + erase line")
        assert.isFalse(chunk.includes("\n"), "no newline while running")
      }
      const last = mid[mid.length - 1]!
      assert.include(last, "40/100 40.0%")
      assert.include(last, "10.0/s")
      assert.include(last, "ETA 6s")
      assert.include(last, "1 failed")
      assert.include(last, "2 retrying")
      assert.include(last, "3 running")
      assert.include(last, "[")
      yield* Ref.set(live, stats(99, 1))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(fiber)
      const all = yield* Ref.get(written)
      const final = all[all.length - 1]!
      assert.isTrue(final.endsWith("\n"), "the final line ends the terminal line")
      assert.include(final, "100/100 100.0%")
    }))

  it.effect("not a terminal: a plain line every interval, no control sequences, plus a last line", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { tty: false, out, interval: "10 seconds" })
        yield* Effect.sleep("25 seconds")
      })))
      yield* TestClock.adjust("5 seconds")
      assert.deepStrictEqual(yield* Ref.get(written), [], "nothing before the first interval")
      yield* Ref.set(live, stats(50))
      yield* TestClock.adjust("5 seconds")
      yield* Ref.set(live, stats(120, 3))
      yield* TestClock.adjust("10 seconds")
      const lines = yield* Ref.get(written)
      assert.strictEqual(lines.length, 2)
      for (const l of lines) {
        assert.isTrue(l.endsWith("\n"))
        assert.notInclude(l, "\u001b")
        assert.notInclude(l, "\r")
        assert.notInclude(l, "ETA", "no ETA without a known total")
      }
      assert.include(lines[0]!, "50 done")
      assert.include(lines[1]!, "123 done")
      assert.include(lines[1]!, "3 failed")
      yield* TestClock.adjust("5 seconds")
      yield* Fiber.join(fiber)
      assert.strictEqual((yield* Ref.get(written)).length, 3, "a last line when the run ends")
    }))

  it.effect("quiet: nothing at all", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { total: 10, quiet: true, tty: true, out })
        yield* Effect.sleep("3 seconds")
      })))
      yield* Ref.set(live, stats(5))
      yield* TestClock.adjust("3 seconds")
      yield* Fiber.join(fiber)
      assert.deepStrictEqual(yield* Ref.get(written), [])
    }))

  it("renderProgress fits the width and shows no bar without a total", () => {
    const view: Progress.ProgressView = {
      done: 5, total: undefined, succeeded: 5, failed: 0, retriesWaiting: 0, inFlight: 2, perSec: null, etaMs: null, elapsedMs: 1500
    }
    const line = Progress.renderProgress(view, 80)
    assert.strictEqual(line, "5 done · –/s · 0 failed · 2 running · 2s")
    const narrow = Progress.renderProgress({ ...view, total: 1000, done: 500, perSec: 3.5, etaMs: 142_000 }, 40)
    assert.isAtMost(narrow.length, 39)
  })
})
