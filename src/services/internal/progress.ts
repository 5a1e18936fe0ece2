/**
 * The progress display of `assay run`: a scoped fiber that samples a run's live figures
 * ({@link LiveStats}, from its `RunHandle`) and renders done / total (when the source size is
 * known), rate, ETA, failures, interrupted pipelines, retries waiting, attempts in flight and
 * admitted pipelines.
 *
 * - on a terminal: one line redrawn in place (`\r` + ANSI "erase line") every 200 ms, cut to
 *   the terminal's width, ended with a newline when the scope closes;
 * - otherwise (piped, a log file): plain lines, never cut, the first after 1 s and then at
 *   doubling gaps up to 10 s, and a last one when the scope closes;
 * - `quiet`: nothing.
 *
 * No progress library is installed (none of `cli-progress`, `ora`, `log-update` is in
 * node_modules), so the line is drawn with two ANSI control sequences. Time comes from
 * `Clock`, so `TestClock` drives it in tests.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Schedule, type Scope } from "effect"
import { bar, formatDuration, formatRate, formatUntil } from "./monitor.js"
import type { LiveStats, RunHandle } from "../Runner.js"

/**
 * What the display shows at one instant.
 *
 * - `done`: pipelines finished for good in this run: succeeded + failed + skipped (already
 *   done in an earlier run). Interrupted pipelines are **not** done (they resume later): they
 *   are counted in `interrupted`, so a stopped run never reads "16/16 100%";
 * - `perSec`: pipelines processed (succeeded + failed) per second over the last
 *   {@link RATE_WINDOW_MS}, from the run's first second (`null` before it); on the `final`
 *   frame, the average over the whole run;
 * - `etaMs`: `(total - done) / perSec` in ms (`null` without a total or a rate, and on the
 *   final frame);
 * - `inFlight`: attempts running now (each holding a worker slot); `admitted`: pipelines
 *   admitted and not finished (in flight, waiting for a worker slot or for a retry);
 * - `stopping`: the run is stopping (or stopped); `final`: the last frame, written when the
 *   run is over.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProgressView {
  readonly done: number
  readonly total: number | undefined
  readonly succeeded: number
  readonly failed: number
  readonly interrupted?: number | undefined
  readonly retriesWaiting: number
  readonly inFlight: number
  readonly admitted?: number | undefined
  readonly perSec: number | null
  readonly etaMs: number | null
  readonly elapsedMs: number
  readonly stopping?: boolean | undefined
  readonly final?: boolean | undefined
  /** When the view was sampled (epoch ms); the hold times are shown relative to it. */
  readonly nowMs?: number | undefined
  /** Resources held out of rotation by time (throttled, breaker open), soonest end first. */
  readonly holds?: ReadonlyArray<{ readonly resourceId: string; readonly reason: string; readonly until: number }> | undefined
}

/**
 * The words for resources held out of rotation: `waiting for key-a until 14:03:10` (a
 * throttle), `key-a breaker open until …`, `+N` more. Empty when nothing is held.
 *
 * @since 0.2.0
 * @category rendering
 */
export const renderHolds = (
  holds: ReadonlyArray<{ readonly resourceId: string; readonly reason: string; readonly until: number }>,
  nowMs: number
): string => {
  const first = holds[0]
  if (first === undefined) return ""
  const what = first.reason === "breaker_open" ? `${first.resourceId} (breaker open)` : first.resourceId
  return `waiting for ${what} until ${formatUntil(first.until, nowMs)}${holds.length > 1 ? ` +${holds.length - 1}` : ""}`
}

/**
 * Width of the sliding window of the rate (ms).
 *
 * @since 0.1.0
 * @category constants
 */
export const RATE_WINDOW_MS = 10_000

/**
 * Options of {@link track}.
 *
 * - `total`: the source size, when known (enables the bar, the percentage and the ETA);
 * - `quiet`: show nothing;
 * - `tty`: whether `out` is a terminal (live line) or not (plain lines);
 * - `out`: where text goes (e.g. {@link stderrSink}); TTY chunks carry their own `\r`;
 * - `width`: terminal columns (default 80): a terminal line is cut to `width - 1` so that
 *   it redraws in place; plain lines (not a terminal) are never cut;
 * - `interval`: on a terminal, the redraw period (default 200 ms); otherwise the longest
 *   gap between plain lines (default 10 s): the first line comes after 1 s (or `interval`
 *   if shorter) and the gaps double up to `interval` (1 s, 2 s, 4 s, 8 s, 10 s, 10 s, …), so a
 *   piped run shows its rate and ETA from its first seconds.
 *
 * @since 0.1.0
 * @category models
 */
export interface ProgressOptions {
  readonly total?: number | undefined
  readonly quiet?: boolean | undefined
  readonly tty: boolean
  readonly out: (text: string) => Effect.Effect<void>
  readonly width?: number | undefined
  readonly interval?: Duration.DurationInput | undefined
}

/**
 * How often a piped display samples the runner (ms), between its printed lines, so that the
 * rate window holds enough points whatever the print cadence.
 *
 * @since 0.2.0
 * @category constants
 */
export const SAMPLE_EVERY_MS = 500

/** ANSI: carriage return + erase the whole line. */
const REDRAW = "\r\u001b[2K"

/**
 * Renders one progress line (no line ending, no control sequences), e.g.
 * `[##########..........] 50/100 50.0% · 12.5/s · ETA 4s · 1 failed · 2 retrying · 4 in flight · 12 admitted · 8s`;
 * after a stop, `[####................] 20/100 20.0% · 9.8/s avg · 0 failed · 12 interrupted · stopped · 2s`.
 * With `width` (a terminal) the bar adapts and the line is cut to `width - 1` columns;
 * without it (plain lines) the bar has 20 cells and nothing is cut.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderProgress = (v: ProgressView, width?: number): string => {
  const parts: Array<string> = []
  if (v.total !== undefined && v.total > 0) {
    const f = Math.min(1, v.done / v.total)
    parts.push(`${v.done}/${v.total} ${(f * 100).toFixed(1)}%`)
  } else {
    parts.push(`${v.done} done`)
  }
  parts.push(v.perSec === null ? "–/s" : `${formatRate(v.perSec)}${v.final === true ? " avg" : ""}`)
  if (v.total !== undefined && v.final !== true && v.stopping !== true) {
    parts.push(`ETA ${v.etaMs === null ? "–" : formatDuration(v.etaMs)}`)
  }
  parts.push(`${v.failed} failed`)
  const interrupted = v.interrupted ?? 0
  if (interrupted > 0) parts.push(`${interrupted} interrupted`)
  const holds = v.holds === undefined ? "" : renderHolds(v.holds, v.nowMs ?? 0)
  if (holds !== "") parts.push(holds)
  if (v.retriesWaiting > 0) parts.push(`${v.retriesWaiting} retrying`)
  if (v.final !== true || v.inFlight > 0) parts.push(`${v.inFlight} in flight`)
  if (v.admitted !== undefined && (v.final !== true || v.admitted > 0)) parts.push(`${v.admitted} admitted`)
  if (v.stopping === true) parts.push(v.final === true ? "stopped" : "stopping")
  parts.push(formatDuration(v.elapsedMs))
  let line = parts.join(" · ")
  if (v.total !== undefined && v.total > 0) {
    const cells = width === undefined ? 20 : Math.max(10, Math.min(30, width - 1 - line.length - 3))
    line = `${bar(v.done / v.total, cells)} ${line}`
  }
  if (width === undefined) return line
  const max = Math.max(20, width - 1)
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`
}

const holdsOf = (stats: LiveStats) => {
  let out: Array<{ resourceId: string; reason: string; until: number }> | undefined
  for (const p of Object.values(stats.pools)) {
    if (p.holds === undefined || p.holds.length === 0) continue
    for (const h of p.holds) (out ??= []).push(h)
  }
  return out === undefined ? undefined : out.sort((a, b) => a.until - b.until)
}

/**
 * A sampler turning successive {@link LiveStats} into {@link ProgressView}s. `startMs` is when
 * tracking began (epoch ms): the window starts there with nothing processed, so the rate is
 * known from the first second. The rate counts pipelines processed (succeeded + failed) over
 * the last {@link RATE_WINDOW_MS}: skipped pipelines (a resume skips its already done ones in
 * a burst) count as `done` but not toward the rate, interrupted ones toward neither. Call it
 * with `final: true` for the last frame: the rate is then the average over the whole run
 * (never the tail's last seconds) and there is no ETA.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeSampler = (startMs: number, total: number | undefined) => {
  const samples: Array<readonly [number, number]> = [[startMs, 0]]
  return (stats: LiveStats, nowMs: number, final = false): ProgressView => {
    const c = stats.counters
    const processed = c.succeeded + c.failed
    const done = processed + c.skipped
    samples.push([nowMs, processed])
    while (samples.length > 2 && samples[1]![0] <= nowMs - RATE_WINDOW_MS) samples.shift()
    const first = samples[0]!
    const span = nowMs - first[0]
    const elapsed = nowMs - startMs
    const perSec = final
      ? (elapsed > 0 && processed > 0 ? (processed * 1000) / elapsed : null)
      : span >= 1000
      ? ((processed - first[1]) * 1000) / span
      : null
    const etaMs = final
      ? null
      : total !== undefined && done >= total
      ? 0
      : total !== undefined && perSec !== null && perSec > 0
      ? Math.round((Math.max(0, total - done) / perSec) * 1000)
      : null
    return {
      done,
      total,
      succeeded: c.succeeded,
      failed: c.failed,
      interrupted: c.interrupted,
      retriesWaiting: stats.delayed,
      inFlight: stats.inFlight,
      admitted: stats.admitted,
      perSec,
      etaMs,
      elapsedMs: elapsed,
      stopping: stats.stopping,
      final,
      nowMs,
      holds: holdsOf(stats)
    }
  }
}

/**
 * Starts the progress display of one run for the scope: a fiber samples `run.stats` (the
 * run's {@link RunHandle}) every `interval` and writes to `out`; when the scope closes the
 * fiber stops and a final line is written (on a terminal: the line completed with a newline).
 * With `quiet` it does nothing. Any value with a `stats` Effect fits (the `Runner` service
 * too: it shows the run it started last).
 *
 * How `assay run` uses it (progress on stderr, so stdout keeps the report):
 *
 * ```ts
 * Effect.scoped(Effect.gen(function*() {
 *   const runner = yield* Runner.Runner
 *   const run = yield* runner.start(specs, options)
 *   yield* Progress.track(run, { total, quiet, ...Progress.stderrSink() })
 *   return yield* run.await
 * }))
 * ```
 *
 * @param run the run to show (its live figures)
 * @since 0.1.0
 * @category constructors
 */
export const track = (
  run: Pick<RunHandle, "stats">,
  options: ProgressOptions
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    if (options.quiet === true) return
    const tty = options.tty
    const width = tty ? (options.width ?? 80) : undefined
    const intervalMs = Duration.toMillis(Duration.decode(options.interval ?? (tty ? "200 millis" : "10 seconds")))
    const start = yield* Clock.currentTimeMillis
    const sample = makeSampler(start, options.total)
    const view = (final: boolean) => Effect.zipWith(run.stats, Clock.currentTimeMillis, (st, now) => sample(st, now, final))
    const line = (v: ProgressView) => renderProgress(v, width)
    // Registered first, so it runs after the ticking fiber is interrupted: the last frame.
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(view(true), (v) => options.out(tty ? `${REDRAW}${line(v)}\n` : `${line(v)}\n`))
    )
    if (tty) {
      yield* Effect.forkScoped(
        Effect.repeat(Effect.flatMap(view(false), (v) => options.out(`${REDRAW}${line(v)}`)), Schedule.spaced(intervalMs))
      )
      return
    }
    // Piped: sample often (the rate window), print on a doubling cadence up to `interval`.
    const sampleMs = Math.min(SAMPLE_EVERY_MS, intervalMs)
    let gapMs = Math.min(1000, intervalMs)
    let nextPrint = start + gapMs
    const tick = Effect.flatMap(view(false), (v) => {
      if ((v.nowMs ?? 0) < nextPrint) return Effect.void
      gapMs = Math.min(gapMs * 2, intervalMs)
      nextPrint = (v.nowMs ?? 0) + gapMs
      return options.out(`${line(v)}\n`)
    })
    yield* Effect.forkScoped(Effect.delay(Effect.repeat(tick, Schedule.spaced(sampleMs)), sampleMs))
  })

/**
 * The process's stderr as a progress sink: `tty` and `width` from the stream, `out` writing
 * to it. For CLI entry points only (services never touch the process's streams).
 *
 * @since 0.1.0
 * @category sinks
 */
export const stderrSink = (): Pick<ProgressOptions, "tty" | "out" | "width"> => ({
  tty: process.stderr.isTTY === true,
  width: process.stderr.columns ?? 80,
  out: (text) => Effect.sync(() => void process.stderr.write(text))
})
