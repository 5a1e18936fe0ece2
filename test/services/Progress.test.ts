import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Ref, TestClock } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Progress from "../../src/services/Progress.js"
import * as Runner from "../../src/services/Runner.js"
import type { LiveStats } from "../../src/services/Runner.js"
import { rid } from "../support/ids.js"

const stats = (
  succeeded: number,
  failed = 0,
  delayed = 0,
  inFlight = 0,
  more: { interrupted?: number; skipped?: number; stopping?: boolean; admitted?: number } = {}
): LiveStats => ({
  runId: rid("r1"),
  stopping: more.stopping ?? false,
  inFlight,
  delayed,
  admitted: more.admitted ?? inFlight + delayed,
  maxAdmitted: 64,
  concurrency: 8,
  counters: {
    admitted: succeeded + failed + inFlight,
    succeeded,
    failed,
    interrupted: more.interrupted ?? 0,
    skipped: more.skipped ?? 0,
    retries: delayed,
    leasesLeaked: 0,
    repairFailures: 0,
    handoffs: 0
  },
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
      assert.include(last, "3 in flight")
      assert.include(last, "5 admitted")
      assert.include(last, "[")
      yield* Ref.set(live, stats(99, 1))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(fiber)
      const all = yield* Ref.get(written)
      const final = all[all.length - 1]!
      assert.isTrue(final.endsWith("\n"), "the final line ends the terminal line")
      assert.include(final, "100/100 100.0%")
    }))

  it.effect("not a terminal: plain lines from the first second, gaps doubling up to the interval, plus a last line", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { tty: false, out, interval: "10 seconds" })
        yield* Effect.sleep("35 seconds")
      })))
      // 20 pipelines per second (one failure in ten)
      for (let t = 1; t <= 30; t++) {
        yield* Ref.set(live, stats(18 * t, 2 * t))
        yield* TestClock.adjust("1 second")
      }
      const lines = yield* Ref.get(written)
      // gaps of 1, 2, 4, 8, then 10 s: at 1, 3, 7, 15, 25 seconds
      assert.deepStrictEqual(lines.map((l) => /· (\d+)s$/.exec(l.trim())?.[1]), ["1", "3", "7", "15", "25"])
      for (const l of lines) {
        assert.isTrue(l.endsWith("\n"))
        assert.notInclude(l, "\u001b")
        assert.notInclude(l, "\r")
        assert.notInclude(l, "ETA", "no ETA without a known total")
      }
      // the rate is there from the first line
      assert.include(lines[0]!, "20 done · 20.0/s")
      assert.include(lines[4]!, "500 done · 20.0/s · 50 failed")
      yield* TestClock.adjust("5 seconds")
      yield* Fiber.join(fiber)
      assert.strictEqual((yield* Ref.get(written)).length, 7, "one more at 35 s, and a last line when the run ends")
    }))

  it.effect("piped with a known total: rate and ETA at 1 s (not after 10 s); the last line gives the run's average rate, not the tail's", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { total: 1000, tty: false, out })
        yield* Effect.sleep("22 seconds")
      })))
      // 85 per second for 11 s (935 done), then a slow tail: 5 more in 10 s, the last 60 at 22 s
      for (let t = 1; t <= 11; t++) {
        yield* Ref.set(live, stats(85 * t))
        yield* TestClock.adjust("1 second")
      }
      for (let t = 1; t <= 10; t++) {
        if (t % 2 === 0) yield* Ref.update(live, (s) => stats(s.counters.succeeded + 1))
        yield* TestClock.adjust("1 second")
      }
      yield* Ref.set(live, stats(1000))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(fiber)
      const lines = yield* Ref.get(written)
      assert.match(lines[0]!, /85\/1000 8\.5% · 85\.0\/s · ETA 11s · 0 failed/)
      const final = lines[lines.length - 1]!
      // 1000 in 22 s: 45.5/s on average (the last 10 s alone: 0.6/s)
      assert.include(final, "1000/1000 100.0% · 45.5/s avg · 0 failed")
      assert.notInclude(final, "ETA")
    }))

  it.effect("C17c: after a stop, the last frame counts interrupted pipelines as interrupted, never as done", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { total: 16, tty: true, out, width: 100 })
        yield* Effect.sleep("2 seconds")
      })))
      yield* Ref.set(live, stats(0, 0, 0, 4, { admitted: 16, stopping: true }))
      yield* TestClock.adjust("1 second")
      const stoppingLine = (yield* Ref.get(written)).at(-1)!
      assert.include(stoppingLine, "0/16 0.0%")
      assert.include(stoppingLine, "stopping")
      assert.notInclude(stoppingLine, "ETA")
      // the stop ends: 4 interrupted in flight, 12 interrupted while waiting for a worker
      yield* Ref.set(live, stats(0, 0, 0, 0, { interrupted: 16, admitted: 0, stopping: true }))
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(fiber)
      const final = (yield* Ref.get(written)).at(-1)!
      assert.notInclude(final, "16/16")
      assert.notInclude(final, "100.0%")
      assert.include(final, "0/16 0.0%")
      assert.include(final, "16 interrupted")
      assert.include(final, "stopped")
    }))

  it.effect("resume: skipped pipelines are done but do not inflate the rate", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { total: 1000, tty: false, out })
        yield* Effect.sleep("3 seconds")
      })))
      yield* Ref.set(live, stats(0, 0, 0, 0, { skipped: 997 }))
      yield* TestClock.adjust("1 second")
      yield* Ref.set(live, stats(3, 0, 0, 0, { skipped: 997 }))
      yield* TestClock.adjust("2 seconds")
      yield* Fiber.join(fiber)
      const lines = yield* Ref.get(written)
      assert.include(lines[0]!, "997/1000 99.7% · 0.00/s")
      assert.include(lines.at(-1)!, "1000/1000 100.0% · 1.00/s avg")
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

  it("renderProgress: a terminal line fits its width; a plain line (no width) is never cut", () => {
    const view: Progress.ProgressView = {
      done: 5, total: undefined, succeeded: 5, failed: 0, retriesWaiting: 0, inFlight: 2, perSec: null, etaMs: null, elapsedMs: 1500
    }
    const line = Progress.renderProgress(view, 80)
    assert.strictEqual(line, "5 done · –/s · 0 failed · 2 in flight · 2s")
    const narrow = Progress.renderProgress({ ...view, total: 1000, done: 500, perSec: 3.5, etaMs: 142_000 }, 40)
    assert.isAtMost(narrow.length, 39)
    const long: Progress.ProgressView = {
      ...view,
      total: 1000,
      done: 500,
      perSec: 3.5,
      etaMs: 142_000,
      retriesWaiting: 12,
      admitted: 64,
      nowMs: 0,
      holds: [{ resourceId: "endpoint-with-a-long-name", reason: "throttled", until: 86_400_000 * 3 }]
    }
    const plain = Progress.renderProgress(long)
    assert.isAbove(plain.length, 120)
    assert.notInclude(plain, "…")
    assert.match(plain, /^\[#{10}\.{10}\] 500\/1000 50\.0% .* 12 retrying · 2 in flight · 64 admitted · 2s$/)
  })

  it.effect("piped lines are not cut at 80 columns", () =>
    Effect.gen(function*() {
      const { live, out, runner, written } = yield* setup
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        yield* Progress.track(runner, { total: 100000, tty: false, out, width: 80 })
        yield* Effect.sleep("2 seconds")
      })))
      yield* Ref.set(live, stats(12345, 678, 90, 32, { admitted: 256, interrupted: 3 }))
      yield* TestClock.adjust("2 seconds")
      yield* Fiber.join(fiber)
      const lines = yield* Ref.get(written)
      for (const l of lines) {
        assert.isAbove(l.trimEnd().length, 80)
        assert.notInclude(l, "…")
        assert.match(l.trimEnd(), / · \d+s$/)
      }
    }))

  it.effect("tracks a run through its handle: live figures while it runs, the run's own totals at the end", () =>
    Effect.gen(function*() {
      const written = yield* Ref.make<ReadonlyArray<string>>([])
      const out = (text: string) => Ref.update(written, (w) => [...w, text])
      const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("400 millis"), n))
      const template = Pipeline.make("tracked", slow)
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        const runner = yield* Runner.Runner
        const run = yield* runner.start(template.map(Array.from({ length: 12 }, (_, i) => i)))
        yield* Progress.track(run, { total: 12, tty: false, out })
        return yield* run.await
      })))
      yield* TestClock.adjust("1100 millis")
      const mid = yield* Ref.get(written)
      assert.strictEqual(mid.length, 1)
      // 4 attempts at a time, 400 ms each: 8 done at 800 ms, the last 4 in flight at 1 s
      assert.include(mid[0]!, "8/12")
      assert.include(mid[0]!, "4 in flight")
      yield* TestClock.adjust("2 seconds")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 12)
      const lines = yield* Ref.get(written)
      assert.include(lines[lines.length - 1]!, "12/12 100.0%")
    }).pipe(
      Effect.provide(
        Layer.provideMerge(
          Runner.layer({ handleSignals: false, concurrency: 4 }),
          Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
        )
      )
    ))
})
