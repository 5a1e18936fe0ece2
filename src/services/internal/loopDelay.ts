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
 * interval (its end and length), and {@link LoopDelay.stalledMs} sums the intervals' overlap
 * with a request's span. The method is the one of Node's `perf_hooks.monitorEventLoopDelay`
 * (a timer's lateness at a fixed resolution), kept per interval because that histogram has no
 * timestamps: it cannot say whether a delay fell inside one request's span.
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
   * The milliseconds within `[fromMs, toMs]` (epoch ms, the pool's clock) during which the
   * event loop was stalled (0 when none was seen, or the span is before the sampler ran).
   * Synchronous: it is read inside an algorithm's `observe`.
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

  /** See {@link LoopDelayShape.stalledMs}. */
  stalledMs(fromMs: number, toMs: number): number {
    if (toMs <= this.startedAt || !(toMs > fromMs)) return 0
    let sum = 0
    for (let k = this.count - 1; k >= Math.max(0, this.count - KEEP); k--) {
      const i = k % KEEP
      const end = this.ends[i]!
      if (end <= fromMs) break
      const overlap = Math.min(end, toMs) - Math.max(end - this.lengths[i]!, fromMs)
      if (overlap > 0) sum += overlap
    }
    return sum
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
