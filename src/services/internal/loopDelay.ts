/**
 * How long this process's own event loop was stalled within a span of time: what the
 * `adaptive` algorithm takes out of a measured answer time before its latency rule reads it
 * (issue 18: on a machine starved of CPU, the answers seemed to slow down while the server's
 * did not, and the rule cut the window 43 times).
 *
 * A request's latency is measured on the clock from before it is sent to after its answer is
 * read; when the loop is blocked (CPU-bound work in this process, or the process not scheduled
 * at all), the answer waits in the socket and the time counts as the server's. The sampler
 * here sleeps {@link RESOLUTION_MS} at a time on Effect's `Clock`; when it wakes late, the loop
 * was blocked for the lateness, just before the waking: each such stall is kept as an
 * interval (its end and length). The method is the one of Node's
 * `perf_hooks.monitorEventLoopDelay` (a timer's lateness at a fixed resolution), kept per
 * interval because that histogram has no timestamps: it cannot say whether a delay fell inside
 * one request's span.
 *
 * **Which stalls held a request** ({@link heldMs}): only those at the ends of its span. A stall
 * that covers the span's start held the request's sending; one that ends at the span's end
 * (within {@link END_SLACK_MS}) held the reading of its answer, which may have arrived at any
 * time during it. A stall in between, with the loop running again before the answer was read,
 * held nothing: the request was out, the server working, and an answer arriving during that
 * stall would have been read when it ended, not later. Summing every stall within the span
 * (what was done before) took a loaded machine's steady stalls out of the server's time too:
 * at load 14–22 a 400 ms answer read as ~110 ms in its most stalled seconds, that became the
 * latency baseline, and the answers of calmer seconds then read as congestion (issue 18's
 * benchmark over HTTP: 48 latency cuts and no 429 on a key used to half its limit).
 *
 * **Real time.** A stall is by definition real time: only the live `Clock` (whose sleeps are
 * Node timers) can wake late. Under `TestClock` or a simulated clock every sleep ends exactly
 * on time, so the sampler runs (driven by that clock) but sees no stall; tests and simulators
 * that need stalls give their own source ({@link layerTest}, or the algorithm's `loopDelay`
 * option). The bookkeeping of stalls is a plain value ({@link StallLog}) tested with explicit
 * times.
 *
 * **Lifetime.** The sampler is a fiber forked in the scope of its layer (or of the pools
 * service that made it): it waits, costing nothing, until the first question, samples while
 * questions come, stops itself after {@link IDLE_STOP_MS} without one, and is interrupted when
 * the scope closes. A stall is seen only once the loop runs the sampler again, so an answer
 * handled in the same turn as the end of a stall may be read before its stall is recorded: the
 * discount is a lower bound.
 *
 * @internal
 */
import { Clock, Context, Duration, Effect, Layer } from "effect"
import type { Scope } from "effect"

/**
 * A source of the process's own event-loop stalls.
 *
 * @internal
 */
export interface LoopDelayShape {
  /**
   * The milliseconds within `[fromMs, toMs]` (epoch ms, the pool's clock, a request's span)
   * during which the event loop was stalled at the span's ends, holding the request's sending
   * or the reading of its answer ({@link heldMs}; 0 when none was seen, or the span is before
   * the sampler ran). Synchronous: it is read inside an algorithm's `observe`.
   */
  readonly stalledMs: (fromMs: number, toMs: number) => number
}

/**
 * The service of the process's own event-loop stalls, read by the `adaptive` algorithm's
 * latency rule. The pools service takes it from its context when given, and otherwise runs a
 * sampler ({@link make}) in its own scope.
 *
 * @internal
 */
export class LoopDelay extends Context.Tag("assay/LoopDelay")<LoopDelay, LoopDelayShape>() {}

/** The sampler's sleep (ms): a stall shorter than about this is not seen. */
export const RESOLUTION_MS = 20

/** Stalls below this lateness (ms) are timer jitter, not kept. */
export const MIN_STALL_MS = 2

/**
 * How close (ms) to a span's start a stall must begin, or to its end a stall must end, to
 * count as holding the request (a stall is placed at the end of the sampler's sleep, so its
 * true position is uncertain by about a sleep).
 */
export const END_SLACK_MS = RESOLUTION_MS

/**
 * The milliseconds of `[fromMs, toMs]` during which the stalls `[startMs, endMs]` held the
 * request of that span: the overlap of the stalls that begin by `fromMs + END_SLACK_MS` (the
 * sending) or end from `toMs − END_SLACK_MS` on (the reading of the answer); stalls in
 * between held nothing (see the module's notes).
 *
 * @internal
 */
export const heldMs = (
  stalls: Iterable<readonly [startMs: number, endMs: number]>,
  fromMs: number,
  toMs: number
): number => {
  if (!(toMs > fromMs)) return 0
  let sum = 0
  for (const [start, end] of stalls) {
    const overlap = Math.min(end, toMs) - Math.max(start, fromMs)
    if (overlap > 0 && (start <= fromMs + END_SLACK_MS || end >= toMs - END_SLACK_MS)) sum += overlap
  }
  return sum
}

/** The stalls kept (the most recent; a span older than them reads as unstalled). */
const KEEP = 1024

/** The sampler stops after this long (ms) without a question, and restarts on the next one. */
export const IDLE_STOP_MS = 30_000

/**
 * The stalls seen, as a ring of the most recent {@link KEEP} intervals (end, length in ms),
 * fed by the sampler's wake-ups. Pure bookkeeping: no clock of its own.
 *
 * @internal
 */
export class StallLog {
  private readonly ends = new Float64Array(KEEP)
  private readonly lengths = new Float64Array(KEEP)
  private count = 0
  /** The epoch ms the sampling began (spans ending before it read 0). */
  startedAt = Number.POSITIVE_INFINITY
  /** The epoch ms of the sampler's previous wake-up. */
  private last = 0

  /** Sampling begins at `now` (epoch ms). */
  begin(now: number): void {
    this.last = now
    if (!(this.startedAt <= now)) this.startedAt = now
  }

  /**
   * The sampler woke at `now` after a sleep of {@link RESOLUTION_MS} that began at the
   * previous wake-up: a lateness of {@link MIN_STALL_MS} or more is kept as a stall ending now.
   */
  wake(now: number): void {
    const late = now - this.last - RESOLUTION_MS
    this.last = now
    if (late >= MIN_STALL_MS) this.record(now, late)
  }

  /** Keeps a stall of `lengthMs` ending at `endMs` (ends in increasing order). */
  record(endMs: number, lengthMs: number): void {
    const i = this.count % KEEP
    this.ends[i] = endMs
    this.lengths[i] = lengthMs
    this.count++
  }

  /** See {@link LoopDelayShape.stalledMs}: the stalls that held the span's request ({@link heldMs}). */
  stalledMs(fromMs: number, toMs: number): number {
    if (toMs <= this.startedAt || !(toMs > fromMs)) return 0
    const within: Array<readonly [number, number]> = []
    for (let k = this.count - 1; k >= Math.max(0, this.count - KEEP); k--) {
      const i = k % KEEP
      const end = this.ends[i]!
      if (end <= fromMs) break
      within.push([end - this.lengths[i]!, end])
    }
    return heldMs(within, fromMs, toMs)
  }
}

/**
 * A running sampler: the service plus `wakeups()`, how many times its fiber has woken so far
 * (for tests: it stops growing once the sampler is idle or its scope closed).
 *
 * @internal
 */
export interface Sampler extends LoopDelayShape {
  readonly wakeups: () => number
}

/**
 * Makes a sampler on the context's `Clock`, its fiber forked in the current scope (interrupted
 * when the scope closes). Nothing runs before the first {@link LoopDelayShape.stalledMs}
 * question, which answers 0 and starts the sampling; it stops after {@link IDLE_STOP_MS}
 * without a question. See the module's notes on real time.
 *
 * @internal
 */
export const make: Effect.Effect<Sampler, never, Scope.Scope> = Effect.suspend(() => makeWith(IDLE_STOP_MS))

/**
 * {@link make} with another idle stop (ms; tests).
 *
 * @internal
 */
export const makeWith = (idleStopMs: number): Effect.Effect<Sampler, never, Scope.Scope> => Effect.gen(function*() {
  const clock = yield* Effect.clock
  const log = new StallLog()
  const asked = yield* Effect.makeLatch(false)
  let running = false
  let askedAt = 0
  let wakeups = 0
  const wake = Effect.map(Clock.currentTimeMillis, (now) => {
    wakeups++
    log.wake(now)
    if (now - askedAt > idleStopMs) running = false
    return running
  })
  const session = Effect.gen(function*() {
    yield* asked.await
    asked.unsafeClose()
    log.begin(yield* Clock.currentTimeMillis)
    yield* Effect.repeat(Effect.zipRight(Effect.sleep(Duration.millis(RESOLUTION_MS)), wake), {
      while: (stillRunning) => stillRunning
    })
  })
  yield* Effect.forkScoped(Effect.forever(session))
  return {
    wakeups: () => wakeups,
    stalledMs: (fromMs, toMs) => {
      askedAt = clock.unsafeCurrentTimeMillis()
      if (!running) {
        running = true
        asked.unsafeOpen()
        return 0
      }
      return log.stalledMs(fromMs, toMs)
    }
  }
})

/**
 * The live service: a sampler ({@link make}) in the layer's scope.
 *
 * @internal
 */
export const layer: Layer.Layer<LoopDelay> = Layer.scoped(LoopDelay, make)

/**
 * A test service that reads stalls from a list of `[endMs, lengthMs]` intervals (epoch ms on
 * the test's clock), with the sampler's overlap rule; no fiber.
 *
 * @internal
 */
export const layerTest = (stalls: ReadonlyArray<readonly [endMs: number, lengthMs: number]>): Layer.Layer<LoopDelay> =>
  Layer.sync(LoopDelay, () => {
    const log = new StallLog()
    log.begin(Number.NEGATIVE_INFINITY)
    const sorted = [...stalls].sort((a, b) => a[0] - b[0])
    for (const [end, length] of sorted) log.record(end, length)
    return { stalledMs: (fromMs, toMs) => log.stalledMs(fromMs, toMs) }
  })
