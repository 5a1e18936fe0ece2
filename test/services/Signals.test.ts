/**
 * The `Signals` service (the one owner of the process's stop signals), with a test source in
 * place of the process: claims nest (the newest takes every signal), listeners live only while
 * a claim is held, `interruptOnStop` interrupts the program on an unclaimed signal and makes the
 * caller's own interruption wait for it, and the runner claims the signals while it runs (first
 * signal: graceful stop with the grace period; second: immediate; `handleSignals: false`: no
 * claim).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Queue, TestClock } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import * as Signals from "../../src/services/Signals.js"

describe("Signals", () => {
  it.effect("listens only while a claim is held; the newest claim takes every signal", () =>
    Effect.gen(function*() {
      const { send, signals } = Signals.makeTest()
      assert.isFalse(yield* send("SIGINT"), "no claim: nothing listens (Node's default action)")
      const outer = yield* Effect.scoped(Effect.gen(function*() {
        const outer = yield* signals.claim
        const inner = yield* Effect.scoped(Effect.gen(function*() {
          const inner = yield* signals.claim
          assert.isTrue(yield* send("SIGTERM"))
          assert.deepStrictEqual(Array.from(yield* Queue.takeAll(inner)), ["SIGTERM"])
          assert.strictEqual(yield* Queue.size(outer), 0, "an older claim gets nothing while a newer one is held")
          return inner
        }))
        assert.isTrue(yield* Queue.isShutdown(inner), "a released claim's queue is shut down")
        assert.isTrue(yield* send("SIGHUP"))
        assert.strictEqual(yield* Queue.take(outer), "SIGHUP", "the older claim takes over again")
        return outer
      }))
      assert.isTrue(yield* Queue.isShutdown(outer))
      assert.isFalse(yield* send("SIGINT"), "the last claim released: listeners removed")
    }))

  it.effect("absorb: a signal after the main program ended (claims released) is never left to Node's default action", () =>
    Effect.gen(function*() {
      const { send, signals, source } = Signals.makeTest()
      let release = () => {}
      // the CLI's main program: its outcome recorded and the signals absorbed before its claim ends
      const result = yield* Signals.interruptOnStop(
        Effect.succeed(130).pipe(Effect.onExit(() => Effect.sync(() => (release = Signals.absorb(source)))))
      ).pipe(Effect.provideService(Signals.Signals, signals))
      assert.strictEqual(result, 130)
      assert.isTrue(yield* send("SIGINT"), "a late second Ctrl-C is absorbed, the chosen exit code stands")
      assert.isTrue(yield* send("SIGTERM"))
      release()
      release()
      assert.isFalse(yield* send("SIGINT"), "released (e.g. handing over to another runtime): default action again")
    }))

  it.effect("handle runs its callback once per signal, in order", () =>
    Effect.gen(function*() {
      const { send, signals } = Signals.makeTest()
      const seen: Array<Signals.StopSignal> = []
      const done = yield* Deferred.make<void>()
      yield* Effect.scoped(Effect.gen(function*() {
        yield* signals.handle((s) =>
          Effect.suspend(() => {
            seen.push(s)
            return seen.length === 3 ? Deferred.succeed(done, void 0) : Effect.void
          })
        )
        yield* send("SIGINT")
        yield* send("SIGTERM")
        yield* send("SIGHUP")
        yield* Deferred.await(done)
      }))
      assert.deepStrictEqual(seen, ["SIGINT", "SIGTERM", "SIGHUP"])
    }))

  describe("interruptOnStop", () => {
    it.effect("an unclaimed signal interrupts the program", () =>
      Effect.gen(function*() {
        const { send, signals } = Signals.makeTest()
        const fiber = yield* Effect.fork(
          Signals.interruptOnStop(Effect.never).pipe(Effect.provideService(Signals.Signals, signals))
        )
        yield* Effect.yieldNow()
        assert.isTrue(yield* send("SIGHUP"))
        const exit = yield* Fiber.await(fiber)
        assert.isTrue(Exit.isInterrupted(exit))
        assert.isFalse(yield* send("SIGINT"), "the claim ends with the program")
      }))

    it.effect("a signal the program claimed does not interrupt it, nor does the caller's own interruption", () =>
      Effect.gen(function*() {
        const { send, signals } = Signals.makeTest()
        const claimed = yield* Deferred.make<void>()
        const program = Effect.scoped(Effect.gen(function*() {
          const stops = yield* signals.claim
          yield* Deferred.succeed(claimed, void 0)
          const signal = yield* Queue.take(stops)
          // the graceful stop takes its time
          yield* Effect.sleep("3 seconds")
          return `stopped by ${signal}`
        }))
        const fiber = yield* Effect.fork(
          Signals.interruptOnStop(program).pipe(Effect.provideService(Signals.Signals, signals))
        )
        yield* Deferred.await(claimed)
        yield* send("SIGINT")
        // what NodeRuntime.runMain does on SIGINT: interrupt its main fiber
        yield* Fiber.interruptFork(fiber)
        yield* TestClock.adjust("3 seconds")
        const exit = yield* Fiber.await(fiber)
        // the program finished; the caller's pending interruption then ended the caller
        assert.isTrue(Exit.isInterrupted(exit))
        assert.isFalse(yield* send("SIGINT"))
      }))
  })

  describe("the runner's claim", () => {
    const slow = Task.make("slow", (n: number) => Effect.as(Effect.sleep("10 seconds"), n))
    const template = Pipeline.make("signalled", slow)
    const env = (options: Runner.RunOptions, signals: Signals.SignalsService) =>
      Layer.provideMerge(
        Runner.layer({ concurrency: 2, ...options }),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), Layer.succeed(Signals.Signals, signals))
      )
    /** Starts a run of 20 slow pipelines and waits until the runner holds its claim. */
    const start = (send: (s: Signals.StopSignal) => Effect.Effect<boolean>) =>
      Effect.gen(function*() {
        const runner = yield* Runner.Runner
        const fiber = yield* Effect.fork(runner.run(template.map(Array.from({ length: 20 }, (_, i) => i))))
        yield* TestClock.adjust("1 second")
        return { fiber, send }
      })

    it.effect("first signal: a graceful stop within the grace period (stop reason sigterm)", () => {
      const { send, signals } = Signals.makeTest()
      return Effect.gen(function*() {
        const { fiber } = yield* start(send)
        assert.isTrue(yield* send("SIGTERM"), "the runner listens while it runs")
        yield* TestClock.adjust("9 seconds")
        const report = yield* Fiber.join(fiber)
        assert.strictEqual(report.status, "interrupted")
        assert.strictEqual(report.stopReason, "sigterm")
        // the two in flight finished within the 30 s grace; nothing else was started
        assert.strictEqual(report.stats.byState.succeeded, 2)
        assert.isFalse(yield* send("SIGINT"), "the claim ends with the run")
      }).pipe(Effect.provide(env({ grace: "30 seconds" }, signals)))
    })

    it.effect("second signal: the in-flight work is stopped at once", () => {
      const { send, signals } = Signals.makeTest()
      return Effect.gen(function*() {
        const { fiber } = yield* start(send)
        yield* send("SIGINT")
        yield* TestClock.adjust("1 second")
        yield* send("SIGINT")
        yield* TestClock.adjust("1 second")
        const report = yield* Fiber.join(fiber)
        assert.strictEqual(report.status, "interrupted")
        assert.strictEqual(report.stopReason, "sigint")
        assert.strictEqual(report.stats.byState.succeeded ?? 0, 0, "nothing waited for the 30 s grace")
      }).pipe(Effect.provide(env({ grace: "30 seconds" }, signals)))
    })

    it.effect("two runs of one runner at once: one signal stops both (not only the run started last)", () => {
      const { send, signals } = Signals.makeTest()
      return Effect.gen(function*() {
        const runner = yield* Runner.Runner
        const a = yield* Effect.fork(runner.run(template.map([1, 2, 3, 4]), { runId: "a" }))
        const b = yield* Effect.fork(runner.run(template.map([5, 6, 7, 8]), { runId: "b" }))
        yield* TestClock.adjust("1 second")
        assert.isTrue(yield* send("SIGINT"))
        yield* TestClock.adjust("9 seconds")
        const [ra, rb] = [yield* Fiber.join(a), yield* Fiber.join(b)]
        assert.deepStrictEqual([ra.status, ra.stopReason], ["interrupted", "sigint"])
        assert.deepStrictEqual([rb.status, rb.stopReason], ["interrupted", "sigint"])
        // each let its two in flight finish within the grace and started nothing more
        assert.deepStrictEqual([ra.stats.byState.succeeded, rb.stats.byState.succeeded], [2, 2])
      }).pipe(Effect.provide(env({ grace: "30 seconds" }, signals)))
    })

    it.effect("handleSignals: false: the runner claims nothing (a signal goes to whoever claimed before)", () => {
      const { send, signals } = Signals.makeTest()
      return Effect.gen(function*() {
        yield* start(send)
        assert.isFalse(yield* send("SIGINT"))
      }).pipe(Effect.provide(env({ handleSignals: false }, signals)))
    })
  })
})
