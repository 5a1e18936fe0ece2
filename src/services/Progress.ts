/**
 * The progress display of `assay run`: a scoped fiber that samples the runner's live figures
 * ({@link LiveStats}) and renders done / total (when the source size is known), rate, ETA,
 * failures, retries waiting and attempts in flight.
 *
 * - on a terminal: one line redrawn in place (`\r` + ANSI "erase line") every 200 ms, ended
 *   with a newline when the scope closes;
 * - otherwise: one plain line every 10 s and a last one when the scope closes;
 * - `quiet`: nothing.
 *
 * No progress library is installed (none of `cli-progress`, `ora`, `log-update` is in
 * node_modules), so the line is drawn with two ANSI control sequences. Time comes from
 * `Clock`, so `TestClock` drives it in tests.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Schedule, type Scope } from "effect"
import { bar, formatDuration, formatRate, formatUntil } from "./Monitor.js"
import type { LiveStats } from "./Runner.js"

/**
 * What the display shows at one instant.
 *
 * - `done`: pipelines finished in this run (succeeded + failed + interrupted + skipped);
 * - `perSec`: finished pipelines per second over the last {@link RATE_WINDOW_MS} (`null`
 *   before one second of samples);
 * - `etaMs`: `(total - done) / perSec` in ms (`null` without a total or a rate).
 *
 * @since 0.1.0
 * @category models
 */
export interface ProgressView {
  readonly done: number
  readonly total: number | undefined
  readonly succeeded: number
  readonly failed: number
  readonly retriesWaiting: number
  readonly inFlight: number
  readonly perSec: number | null
  readonly etaMs: number | null
  readonly elapsedMs: number
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
 * - `tty`: whether `out` is a terminal (live line) or not (periodic plain lines);
 * - `out`: where text goes (e.g. {@link stderrSink}); TTY chunks carry their own `\r`;
 * - `width`: terminal columns (default 80; lines are cut to `width - 1`);
 * - `interval`: refresh period (default 200 ms on a terminal, 10 s otherwise).
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

/** ANSI: carriage return + erase the whole line. */
const REDRAW = "\r\u001b[2K"

/**
 * Renders one progress line (no line ending, no control sequences), e.g.
 * `[##########..........] 50/100 50.0% · 12.5/s · ETA 4s · 1 failed · 2 retrying · 4 running`.
 * With `width`, the bar adapts and the line is cut to `width - 1` columns.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderProgress = (v: ProgressView, width = 80): string => {
  const parts: Array<string> = []
  if (v.total !== undefined && v.total > 0) {
    const f = Math.min(1, v.done / v.total)
    parts.push(`${v.done}/${v.total} ${(f * 100).toFixed(1)}%`)
  } else {
    parts.push(`${v.done} done`)
  }
  parts.push(v.perSec === null ? "–/s" : formatRate(v.perSec))
  if (v.total !== undefined) parts.push(`ETA ${v.etaMs === null ? "–" : formatDuration(v.etaMs)}`)
  parts.push(`${v.failed} failed`)
  const holds = v.holds === undefined ? "" : renderHolds(v.holds, v.nowMs ?? 0)
  if (holds !== "") parts.push(holds)
  if (v.retriesWaiting > 0) parts.push(`${v.retriesWaiting} retrying`)
  parts.push(`${v.inFlight} running`)
  parts.push(formatDuration(v.elapsedMs))
  let line = parts.join(" · ")
  if (v.total !== undefined && v.total > 0) {
    const cells = Math.max(10, Math.min(30, width - 1 - line.length - 3))
    line = `${bar(v.done / v.total, cells)} ${line}`
  }
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
 * A sampler turning successive {@link LiveStats} into {@link ProgressView}s, with the rate
 * over the last {@link RATE_WINDOW_MS}. `startMs` is when tracking began (epoch ms).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeSampler = (startMs: number, total: number | undefined) => {
  const samples: Array<readonly [number, number]> = []
  return (stats: LiveStats, nowMs: number): ProgressView => {
    const c = stats.counters
    const done = c.succeeded + c.failed + c.interrupted + c.skipped
    samples.push([nowMs, done])
    while (samples.length > 2 && samples[1]![0] <= nowMs - RATE_WINDOW_MS) samples.shift()
    const first = samples[0]!
    const span = nowMs - first[0]
    const perSec = span >= 1000 ? ((done - first[1]) * 1000) / span : null
    const etaMs = total !== undefined && perSec !== null && perSec > 0
      ? Math.round((Math.max(0, total - done) / perSec) * 1000)
      : total !== undefined && done >= total
      ? 0
      : null
    return {
      done,
      total,
      succeeded: c.succeeded,
      failed: c.failed,
      retriesWaiting: stats.delayed,
      inFlight: stats.inFlight,
      perSec,
      etaMs,
      elapsedMs: nowMs - startMs,
      nowMs,
      holds: holdsOf(stats)
    }
  }
}

/**
 * Starts the progress display for the scope: a fiber samples `source.stats` every
 * `interval` and writes to `out`; when the scope closes the fiber stops and a final line is
 * written (on a terminal: the line completed with a newline). With `quiet` it does nothing.
 * `source` is the runner (any value with a `stats` Effect).
 *
 * How `assay run` uses it (progress on stderr, so stdout keeps the report):
 *
 * ```ts
 * Effect.scoped(Effect.gen(function*() {
 *   const runner = yield* Runner.Runner
 *   yield* Progress.track(runner, { total, quiet, ...Progress.stderrSink() })
 *   return yield* runner.run(specs, options)
 * }))
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const track = (
  source: { readonly stats: Effect.Effect<LiveStats> },
  options: ProgressOptions
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    if (options.quiet === true) return
    const width = options.width ?? 80
    const interval = Duration.decode(options.interval ?? (options.tty ? "200 millis" : "10 seconds"))
    const start = yield* Clock.currentTimeMillis
    const sample = makeSampler(start, options.total)
    const view = Effect.zipWith(source.stats, Clock.currentTimeMillis, sample)
    // Registered first, so it runs after the ticking fiber is interrupted.
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(view, (v) => options.out(options.tty ? `${REDRAW}${renderProgress(v, width)}\n` : `${renderProgress(v, width)}\n`))
    )
    const tick = Effect.flatMap(view, (v) => options.out(options.tty ? `${REDRAW}${renderProgress(v, width)}` : `${renderProgress(v, width)}\n`))
    yield* Effect.forkScoped(
      options.tty
        ? Effect.repeat(tick, Schedule.spaced(interval))
        : Effect.delay(Effect.repeat(tick, Schedule.spaced(interval)), interval)
    )
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
