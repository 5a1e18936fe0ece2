/**
 * The cluster submitter's stop signals (break39 F3, F5), with a test signal source in place of
 * the process and the CLI's main program (`Signals.interruptOnStop`) around the submitter:
 *
 * - F3: a second Ctrl-C while the cluster client's layer is torn down (after the submission
 *   ended, tens of ms) went to the main program's claim and interrupted it before the summary:
 *   exit 130 with nothing printed. The summary is now printed while the submission still holds
 *   the signals, before that teardown; the second signal still ends the program (130).
 * - a second signal while the suite's members' outcomes are read cuts that short: the run's
 *   own line is printed with what is known (`gathered` none, `late`).
 * - F5: a Ctrl-C during start-up (before the submission claims the signals) says that nothing
 *   was submitted.
 */
import { assert, describe, it } from "@effect/vitest"
import * as FileSystem from "@effect/platform/FileSystem"
import { Console, Deferred, Effect, Exit, Fiber, Option } from "effect"
import * as ClusterRun from "../../src/cli/ClusterRun.js"
import type { RunId } from "../../src/domain/Ids.js"
import type * as InternalSubmit from "../../src/services/internal/cluster/submit.js"
import * as Signals from "../../src/services/Signals.js"

const report = (): InternalSubmit.SubmitReport => ({
  runId: "run-f3" as RunId,
  admitted: 3,
  refused: 0,
  withheld: 0,
  running: 2,
  succeeded: 1,
  failed: 0,
  skipped: 0,
  interrupted: 0,
  followed: { runs: [], running: 0, succeeded: 0, failed: 0, interrupted: 0 },
  status: "interrupted",
  stopReason: null,
  durationMs: 10,
  causes: []
} as unknown as InternalSubmit.SubmitReport)

/** A console that keeps what is printed (stdout and stderr in one list). */
const capture = () => {
  const lines: Array<string> = []
  const push = (...xs: ReadonlyArray<unknown>) => Effect.sync(() => void lines.push(xs.join(" ")))
  const console = { log: push, error: push, warn: push, info: push } as unknown as Console.Console
  return { lines, console }
}

/** A submission that runs until interrupted, then tells `onInterrupted` what it saw (as `submit` does). */
const submission = (started: Deferred.Deferred<void>) => (onInterrupted: (r: InternalSubmit.SubmitReport) => Effect.Effect<void>) =>
  Deferred.succeed(started, undefined).pipe(
    Effect.zipRight(Effect.never),
    Effect.onInterrupt(() => onInterrupted(report()))
  ) as Effect.Effect<InternalSubmit.SubmitReport>

describe("cluster submitter: stop signals (break39 F3, F5)", () => {
  it.effect("F3: a second Ctrl-C during the client layer's teardown: the summary is printed first, and the program still ends (130)", () =>
    Effect.gen(function*() {
      const { send, signals } = Signals.makeTest()
      const { console: testConsole, lines } = capture()
      const started = yield* Deferred.make<void>()
      let secondTaken = false
      // the moment the submission's claim is given up, a second Ctrl-C comes (the cluster client's
      // layer is torn down then, tens of ms): the main program's claim takes it
      const second = Effect.gen(function*() {
        secondTaken = yield* send("SIGINT")
        yield* Effect.repeatN(Effect.yieldNow(), 20)
      })
      const fiber = yield* Effect.fork(Signals.interruptOnStop(
        ClusterRun.withStopSignals(submission(started), {
          show: ({ report, stopped }) =>
            Effect.zipRight(Console.log(`summary ${report.runId} ${report.succeeded}`), stopped ? Console.error("stopped: …") : Effect.void)
        }).pipe(
          Effect.tap(() => second),
          // what the submitter does after it: never reached
          Effect.tap(() => Console.log("after"))
        )
      ).pipe(Effect.provideService(Signals.Signals, signals), Console.withConsole(testConsole)))
      yield* Deferred.await(started)
      assert.isTrue(yield* send("SIGINT"))
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(secondTaken, "the second signal was listened to")
      assert.isTrue(Exit.isInterrupted(exit), "the second signal still ends the program (exit 130)")
      assert.deepStrictEqual(lines, ["summary run-f3 1", "stopped: …"], "the summary and the stop are printed before the teardown")
    }))

  it.effect("a second Ctrl-C while the members' outcomes are gathered cuts that short: the summary is printed with what is known", () =>
    Effect.gen(function*() {
      const { send, signals } = Signals.makeTest()
      const started = yield* Deferred.make<void>()
      const gathering = yield* Deferred.make<void>()
      const shown: Array<ClusterRun.StopOutcome<string>> = []
      const fiber = yield* Effect.fork(ClusterRun.withStopSignals(submission(started), {
        gather: () => Effect.zipRight(Deferred.succeed(gathering, undefined), Effect.never),
        show: (o) => Effect.sync(() => void shown.push(o))
      }).pipe(Effect.provideService(Signals.Signals, signals)))
      yield* Deferred.await(started)
      yield* send("SIGINT")
      yield* Deferred.await(gathering)
      yield* send("SIGTERM")
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(shown.length, 1)
      assert.deepStrictEqual(
        [outcome.stopped, outcome.late, Option.isNone(outcome.gathered), outcome.report.stopReason],
        [true, true, true, "sigint"]
      )
    }))

  it.effect("a submission that ends on its own: gathered and shown, nothing late", () =>
    Effect.gen(function*() {
      const { signals } = Signals.makeTest()
      const shown: Array<ClusterRun.StopOutcome<number>> = []
      const outcome = yield* ClusterRun.withStopSignals(() => Effect.succeed(report()), {
        gather: () => Effect.succeed(7),
        show: (o) => Effect.sync(() => void shown.push(o))
      }).pipe(Effect.provideService(Signals.Signals, signals))
      assert.deepStrictEqual([outcome.stopped, outcome.late, Option.getOrNull(outcome.gathered)], [false, false, 7])
      assert.strictEqual(shown.length, 1)
    }))

  it.effect("a Ctrl-C as the run is being opened (no report yet): said, and nothing was admitted", () =>
    Effect.gen(function*() {
      const { send, signals } = Signals.makeTest()
      const { console, lines } = capture()
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(ClusterRun.withStopSignals(
        () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never) as Effect.Effect<InternalSubmit.SubmitReport>,
        { show: () => Console.log("summary"), onNotAdmitted: Console.error("not admitted") }
      ).pipe(Effect.provideService(Signals.Signals, signals), Console.withConsole(console)))
      yield* Deferred.await(started)
      yield* send("SIGINT")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.deepStrictEqual(lines, ["not admitted"])
    }))

  it.effect("F5: a Ctrl-C during start-up (before the submission claims the signals) says that nothing was submitted", () =>
    Effect.gen(function*() {
      const { send, signals } = Signals.makeTest()
      const { console, lines } = capture()
      const reading = yield* Deferred.make<void>()
      // start-up stalls reading the experiment file (a slow disk, plugins loading)
      const hang = () => Effect.zipRight(Deferred.succeed(reading, undefined), Effect.never)
      const fs = FileSystem.layerNoop({
        access: hang,
        exists: hang,
        readFile: hang,
        readFileString: hang,
        realPath: hang,
        stat: hang
      })
      const fiber = yield* Effect.fork(Signals.interruptOnStop(ClusterRun.submitRun({
        config: "exp.yaml",
        database: "postgres://u@127.0.0.1:1/db",
        store: Option.none(),
        maxAdmitted: Option.none(),
        limit: Option.none(),
        label: Option.none(),
        quiet: true,
        strictEnv: false
      })).pipe(Effect.provide(fs), Effect.provideService(Signals.Signals, signals), Console.withConsole(console)))
      yield* Deferred.await(reading)
      assert.isTrue(yield* send("SIGINT"))
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isInterrupted(exit), "exit 130")
      assert.deepStrictEqual(lines, ["stopped before anything was submitted: no run was created."])
    }))
})
