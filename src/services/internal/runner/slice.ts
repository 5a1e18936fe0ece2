/**
 * The run's time slice: how the runner gives the event loop a turn during long synchronous work.
 *
 * Why: Effect's scheduler runs fibers on microtasks (a macrotask only after 2048 rounds in a
 * row), and the runner's fast paths run whole pipelines of synchronous tasks on the feeder's
 * call stack (`Pipeline.runNow`, `Controlled.runNow`), their commits resuming the feeder from
 * the store's group commit. A run of fast `Task.sync` pipelines so keeps the microtask queue
 * busy for seconds: no macrotask (a signal's listener, a timer, I/O) runs meanwhile, so Ctrl-C
 * reached the run 1.5–3 s late, thousands of tasks after the signal (tester13h, finding 2).
 *
 * What: the runner's loops (the feeder, before each pipeline it admits; a pipeline's fiber,
 * before each task) ask {@link TimeSlice.due} (one `performance.now()`): once at least
 * `sliceMs` of wall-clock time have passed since the event loop's last turn seen here, they
 * wait for {@link TimeSlice.turn}: a macrotask (`setImmediate`), which runs only after the
 * microtask queue has drained and the loop has polled for I/O and signals. Every loop that finds
 * the slice due parks the same way, so the work in progress drains, the loop turns (a SIGINT
 * listener sets the run's stop flag then) and the parked loops go on, each checking the stop
 * flag before it starts anything. The slice is real time on purpose: it schedules around the
 * process's event loop, which the run's `Clock` (a `TestClock` in tests) knows nothing of; no
 * result depends on it.
 *
 * @internal
 */
import { Clock, Context, DefaultServices, Effect } from "effect"
import { performance } from "node:perf_hooks"

/**
 * The default slice: at most this many milliseconds of synchronous work between two turns of
 * the event loop (a turn costs some tens of microseconds: well under 1 % at this length).
 *
 * @internal
 */
export const DEFAULT_SLICE_MS = 10

/**
 * The slice length (milliseconds of wall-clock time) a run reads when it starts: `0`, every
 * check is due (each pipeline admitted and each task begun on a fiber first waits for a turn of
 * the event loop: slow, for tests that need the turn at a known point); `Infinity`, never (no
 * turns); the default, {@link AUTO}: {@link DEFAULT_SLICE_MS} when the run's `Clock` is Effect's
 * live clock, never otherwise (see {@link resolve}).
 *
 * @internal
 */
export class SliceMillis extends Context.Reference<SliceMillis>()("assay/runner/SliceMillis", {
  defaultValue: (): number => AUTO
}) {}

/**
 * {@link SliceMillis}'s default: decided by the run's clock (see {@link resolve}).
 *
 * @internal
 */
export const AUTO = -1

const liveClock = Context.get(DefaultServices.liveServices, Clock.Clock)

/**
 * The slice length of a run: `configured` when it is not {@link AUTO}; else
 * {@link DEFAULT_SLICE_MS} under Effect's live clock and `Infinity` (no turns) under any other
 * clock. A run on a `TestClock` is a test driving virtual time: its fibers must progress on
 * microtasks alone, as `TestClock.adjust` expects (a fiber parked on a macrotask would reach its
 * next sleep after the clock was moved), and no signal comes to such a run anyway.
 *
 * @internal
 */
export const resolve = (configured: number, clock: Clock.Clock): number =>
  configured !== AUTO ? configured : clock === liveClock ? DEFAULT_SLICE_MS : Infinity

/**
 * One run's time slice (see the module docs).
 *
 * - `due()`: whether `sliceMs` ms have passed since the last turn of the event loop this slice
 *   saw (its creation, or the end of a {@link TimeSlice.turn}).
 * - `turn`: waits for one macrotask turn of the event loop (`setImmediate`; cleared when the
 *   waiting fiber is interrupted), then starts a new slice.
 *
 * @internal
 */
export interface TimeSlice {
  readonly due: () => boolean
  readonly turn: Effect.Effect<void>
}

/**
 * A {@link TimeSlice} of `sliceMs` milliseconds (wall clock, `performance.now()`; `Infinity`:
 * never due).
 *
 * @internal
 */
export const make = (sliceMs: number): TimeSlice => {
  let last = performance.now()
  const turn = Effect.async<void>((resume) => {
    const handle = setImmediate(() => {
      last = performance.now()
      resume(Effect.void)
    })
    return Effect.sync(() => clearImmediate(handle))
  })
  return {
    due: sliceMs === Infinity ? () => false : () => performance.now() - last >= sliceMs,
    turn
  }
}
