/**
 * fix13j (tester13h, finding 2): a run of fast synchronous pipelines kept the event loop busy
 * for seconds (the fast path runs pipelines on the feeder's stack, Effect's scheduler resumes
 * fibers on microtasks), so a signal (a macrotask) reached the run seconds late and thousands
 * of tasks began after Ctrl-C. The runner now gives the event loop a turn after each slice of
 * synchronous work (`slice.ts`).
 *
 * The slice is wall-clock time (and off under a TestClock, see `Slice.resolve`); these tests
 * set it to 0 (every check is due) so that the turn comes at the runner's next check, and count
 * tasks, not time: a stop raised from a macrotask (`setImmediate`, as a signal's listener runs)
 * partway through a large synchronous run is seen before the run ends, and only the few tasks
 * already under way when the macrotask was queued (the rest of the pipelines being run, none of
 * a new one) begin between the macrotask being queued and the run stopping, none after it, on
 * the plain fast path (`Pipeline.runNow`), the controlled one (`Controlled.runNow`) and
 * pipelines on fibers.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Context, DefaultServices, Effect, Layer, Runtime } from "effect"
import * as Handoff from "../../src/domain/Handoff.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import type { TaskContext } from "../../src/domain/TaskContext.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Slice from "../../src/services/internal/runner/slice.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"

/** Pipelines in each run: far more than the run gets through before the stop. */
const N = 4000
/** The execution (counted over the run) whose task queues the stop macrotask. */
const STOP_AT = 200
const CONCURRENCY = 4

/** One run's counts: executions in all, and those after the stop's macrotask was queued. */
interface Counts {
  executed: number
  queuedAt: number | undefined
  stoppedAt: number | undefined
}

/** Makes a task that counts its executions; `body` (default: `n + 1`) is what it returns. */
type MakeTask = (name: string, body?: (n: number, ctx: TaskContext) => unknown) => Task.Any

const counting = (counts: Counts, stop: () => void): MakeTask => (name, body) =>
  Task.sync(name, (n: number, ctx) => {
    counts.executed++
    if (counts.executed === STOP_AT) {
      counts.queuedAt = counts.executed
      // a signal's listener is a macrotask: it runs only when the event loop gets a turn
      setImmediate(() => {
        counts.stoppedAt = counts.executed
        stop()
      })
    }
    return body === undefined ? n + 1 : body(n, ctx)
  }) as Task.Any

const runCounted = (
  build: (task: MakeTask) => Pipeline.Template<any, any, any, any>,
  opts: { readonly sliceMs: number; readonly onFiber?: boolean }
) =>
  Effect.gen(function*() {
    const runner = yield* Runner.Runner
    const counts: Counts = { executed: 0, queuedAt: undefined, stoppedAt: undefined }
    // (the stop runs on this test's runtime, from the macrotask, as a signal listener would)
    const runtime = yield* Effect.runtime<never>()
    const task = counting(counts, () => Runtime.runFork(runtime)(runner.stop("test_signal")))
    const template = build(task)
    const report = yield* runner.run(
      template.map(Array.from({ length: N }, (_, i) => i)),
      // a finished-pipeline callback takes the fast path away: every pipeline on its fiber
      opts.onFiber === true ? { onPipelineFinished: () => Effect.void } : {}
    ).pipe(Effect.provideService(Slice.SliceMillis, opts.sliceMs))
    return { counts, report }
  }).pipe(
    Effect.provide(Layer.provideMerge(
      Runner.layer({ handleSignals: false, concurrency: CONCURRENCY, maxAdmitted: 64 }),
      Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
    ))
  )

const plain = (task: MakeTask) => Pipeline.make("sliced", task("a"), task("b"), task("c"))

// one rewind per even pipeline: its traversal visits `a` and `b` twice
const controlled = (task: MakeTask) =>
  Pipeline.make(
    "sliced-control",
    task("a"),
    task("b", (n, ctx) => ctx.visit === 0 && n % 2 === 0 ? Handoff.rewind("a", n) : n),
    task("c"),
    { control: { rewind: { b: ["a"] }, maxHandoffs: 3 } }
  )

/** What every case asserts: the stop came before the run's end, and few tasks began in between. */
const assertStoppedSoon = (counts: Counts, report: Runner.RunReport, tasksPerPipeline: number) => {
  assert.strictEqual(counts.queuedAt, STOP_AT)
  assert.isDefined(counts.stoppedAt, "the stop's macrotask ran before the run ended")
  assert.strictEqual(report.status, "interrupted")
  assert.strictEqual(report.stopReason, "test_signal")
  assert.isBelow(report.stats.byState.succeeded ?? 0, N)
  // between the macrotask being queued and it running: at most the rest of the pipelines
  // under way (one per worker slot), nothing after it
  assert.isAtMost(counts.stoppedAt! - counts.queuedAt!, CONCURRENCY * tasksPerPipeline)
  assert.strictEqual(counts.executed, counts.stoppedAt)
}

describe("Runner: the event loop gets a turn during long synchronous work", () => {
  it.effect("plain fast path: a stop from a macrotask is seen at once, no task starts after it", () =>
    Effect.gen(function*() {
      const { counts, report } = yield* runCounted(plain, { sliceMs: 0 })
      assertStoppedSoon(counts, report, 3)
    }))

  it.effect("controlled fast path: the same", () =>
    Effect.gen(function*() {
      const { counts, report } = yield* runCounted(controlled, { sliceMs: 0 })
      assertStoppedSoon(counts, report, 4)
    }))

  it.effect("pipelines on fibers: the same", () =>
    Effect.gen(function*() {
      const { counts, report } = yield* runCounted(plain, { sliceMs: 0, onFiber: true })
      assertStoppedSoon(counts, report, 3)
    }))

  it.effect("the slice: 10 ms under the live clock, none under a TestClock (virtual time), a given length wins", () =>
    Effect.gen(function*() {
      const live = Context.get(DefaultServices.liveServices, Clock.Clock)
      assert.strictEqual(Slice.resolve(Slice.AUTO, live), Slice.DEFAULT_SLICE_MS)
      // (it.effect runs on a TestClock)
      const test = yield* Effect.clock
      assert.notStrictEqual(test, live)
      assert.strictEqual(Slice.resolve(Slice.AUTO, test), Infinity)
      assert.strictEqual(Slice.resolve(0, test), 0)
      assert.isFalse(Slice.make(Infinity).due())
      assert.isTrue(Slice.make(0).due())
    }))
})
