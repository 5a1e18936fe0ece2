/**
 * Acquisition algorithms: how a pool hands out a resource, and what happens when none is
 * free. An algorithm is independent of retries (a retry policy decides what happens after a
 * task failed; an algorithm decides how long and how to wait for a slot).
 *
 * An algorithm receives {@link AcquireOps}, a small set of primitives of the pool service
 * (take a free slot now, queue FIFO for one, look at another pool, prefer some resources
 * over others), and returns a {@link Slot}. Slots an algorithm takes are tracked by the pool:
 * if the algorithm fails or is interrupted, every slot it took is given back, so an algorithm
 * cannot leak capacity.
 *
 * Eight are built in: {@link wait}, {@link backoff}, {@link leastBusy}, {@link failover},
 * {@link sticky}, {@link quotaAware}, {@link immediate} and {@link adaptive} (which learns each
 * resource's limit from the answers). {@link resolveAlgorithm} turns a
 * name or a `{ name, ...options }` object (the config-file form) into an algorithm; built-ins
 * are resolved before plugins, so a plugin cannot shadow them.
 *
 * @since 0.1.0
 */
import { Deferred, Duration, Effect, Either, Exit, Option, ParseResult, Random, Schema } from "effect"
import { AcquireTimeout, ConfigError, PluginError, ResourceUnavailable } from "../domain/Errors.js"
import type { ConfigIssue, ErrorClass, PoolNotFound, ServerDelayRefused } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import type { AcquireError, AlgorithmInput, ResourceInfo, Selector } from "../domain/Lease.js"
import type { RateLimitStatus } from "../domain/RateLimit.js"
import { closest, levenshtein } from "../domain/internal/suggest.js"
import { DurationFromString } from "../domain/RetryPolicy.js"
import { backoffDelayMs, remainingQuota } from "./internal/acquireAlgorithm.js"
import * as Aimd from "./internal/adaptive.js"

// ---------------------------------------------------------------------------------------------
// The interface
// ---------------------------------------------------------------------------------------------

/**
 * A reserved slot on one resource of one pool, not yet turned into a lease. Opaque to
 * algorithms: they only pass it back.
 *
 * @since 0.1.0
 * @category models
 */
export interface Slot {
  readonly pool: string
  readonly resourceId: string
}

/**
 * A resource that could serve the acquire right now (in rotation, matching the selector,
 * with a free slot), with the figures rankers order by.
 *
 * @since 0.1.0
 * @category models
 */
export interface Candidate {
  readonly resource: ResourceInfo
  /** Position of the resource in its pool (insertion order), from 0. */
  readonly index: number
  /** Leases currently held on it. */
  readonly active: number
  readonly capacity: number
  /** Accumulated `lease.report({ usage })` counters. */
  readonly usage: Readonly<Record<string, number>>
  /** Moving average of reported latencies in ms, `undefined` before the first report. */
  readonly latencyEmaMs: number | undefined
  readonly consecutiveFailures: number
}

/**
 * Orders candidates by preference; the pool takes the first one. Must return a subset (in
 * any order) of its input; an empty result means "take nothing".
 *
 * @since 0.1.0
 * @category models
 */
export type Ranker = (candidates: ReadonlyArray<Candidate>) => ReadonlyArray<Candidate>

/**
 * The primitives an algorithm works with, bound to one acquire (its selector, its holder and
 * its target pool). `tryTake` and `wait` use the current {@link Ranker} (none: pool order).
 *
 * @since 0.1.0
 * @category models
 */
export interface AcquireOps {
  /** The pool this acquire targets. */
  readonly pool: string
  /** The caller's selector. */
  readonly selector: Selector
  /** The task asking. */
  readonly taskName: string
  /** The pipeline asking (what `sticky` remembers resources by). */
  readonly pipelineId: string
  /** The current preference order, if any. */
  readonly ranker: Ranker | undefined
  /**
   * Takes a free matching slot now, or `None` when there is none. Fails with
   * `ServerDelayRefused` when none is free and every usable matching resource is throttled by
   * its server longer than the acquire accepts (`retry.maxServerDelay`): polling (as
   * {@link backoff} does) would otherwise wait out a day-long `Retry-After`.
   */
  readonly tryTake: (pool?: string) => Effect.Effect<Option.Option<Slot>, PoolNotFound | ServerDelayRefused>
  /**
   * Queues FIFO (among waiters whose selectors match) until a matching slot frees up, a
   * resource is added, a cooldown, a throttle window or an open breaker ends. Interruptible;
   * an interrupted wait leaves no reservation behind. Fails with `ResourceUnavailable` when
   * every matching resource is dead or revoked, and with `ServerDelayRefused` when every
   * usable one is throttled by its server longer than the acquire accepts.
   */
  readonly wait: (pool?: string) => Effect.Effect<Slot, PoolNotFound | ResourceUnavailable | ServerDelayRefused>
  /** The resource id this pipeline leased last from a pool (for `sticky`). */
  readonly lastResourceId: (pool?: string) => string | undefined
  /** The same ops with another target pool and/or ranker. */
  readonly with: (patch: { readonly pool?: string; readonly ranker?: Ranker | undefined }) => AcquireOps
  /**
   * An opaque token of the pools service this acquire runs in: key per-service state by it
   * (a `WeakMap`), so that one algorithm value used by two services keeps them apart.
   */
  readonly service: object
  /** The pools service's clock, epoch milliseconds (for rankers, which are synchronous). */
  readonly now: () => number
}

/**
 * One lease report as an algorithm with {@link AcquireAlgorithm.observe} hears it: which
 * service (the token of {@link AcquireOps.service}), pool and resource; the resource's
 * `capacity` and the leases `active` on it when the report came (the reporter's included);
 * `now` and `leasedAt` (when the reported lease was granted; epoch ms); the report's `ok`, `latencyMs`, `usage` and `rateLimit` (the answer's
 * rate-limit headers); the error's class (`rate_limit` for a 429) and the wait it names
 * (`retryAfterMs`), when the report carries an error; `loopDelay`: this process's own
 * event-loop stalls as the pools service samples them on its clock (absent when the service
 * has no sampler; read by `adaptive`'s latency rule).
 *
 * @since 0.2.0
 * @category models
 */
export interface ReportObservation {
  readonly service: object
  readonly pool: string
  readonly resourceId: string
  readonly capacity: number
  readonly active: number
  readonly now: number
  readonly leasedAt: number
  readonly ok: boolean | undefined
  readonly latencyMs: number | undefined
  readonly usage: Readonly<Record<string, number>> | undefined
  readonly rateLimit: RateLimitStatus | undefined
  readonly errorClass: ErrorClass | undefined
  readonly retryAfterMs: number | undefined
  readonly loopDelay?: { readonly stalledMs: (fromMs: number, toMs: number) => number } | undefined
}

/**
 * An acquisition algorithm. User algorithms implement the same interface; `fingerprint`
 * must return strict JSON describing the configuration (never counters, clients or secrets),
 * because it is part of a task's identity.
 *
 * @since 0.1.0
 * @category models
 */
export interface AcquireAlgorithm {
  readonly _tag: "AcquireAlgorithm"
  /** The algorithm's name (`"wait"`, `"backoff"`, …). */
  readonly name: string
  /** A JSON description of the configuration (durations in milliseconds). */
  readonly fingerprint: () => Json
  /** Obtains one slot. */
  readonly acquire: (ops: AcquireOps) => Effect.Effect<Slot, AcquireError>
  /**
   * Optional promises that let the pool skip generic machinery on its hot path; they must be
   * true of `acquire`. `firstFreeInPoolOrder`: the algorithm starts by taking the first free
   * matching resource of the target pool in pool order, when there is one. `plainWait`: the
   * algorithm is exactly "take or queue FIFO, no timeout, no ranker".
   */
  readonly hints?: AlgorithmHints | undefined
  /**
   * Optional feedback: the pool calls it synchronously with every lease report on a pool the
   * algorithm has been used on (as the pool's algorithm, or per task or call), whichever
   * algorithm granted the lease. Must not throw and should be cheap (it runs inside the
   * pool's state update). Algorithms without it cost the pool nothing.
   */
  readonly observe?: ((observation: ReportObservation) => void) | undefined
  /**
   * Optional: the algorithm's own state of one resource at `now` (epoch ms) as strict JSON (shown in
   * `snapshot()` under `algorithm[name]`, stored with the resource's health, printed by
   * `report` and the dashboard), or `undefined` when it has none.
   */
  readonly describe?: ((service: object, pool: string, resourceId: string, now: number) => Json | undefined) | undefined
  /**
   * Optional: the learned state of one resource worth carrying across a resume, as strict
   * JSON (the runner stores it with the resource's health, see `docs/pools.md`, "Across a
   * resume"), or `undefined` when there is none yet.
   */
  readonly save?: ((service: object, pool: string, resourceId: string) => Json | undefined) | undefined
  /**
   * Optional: takes back what {@link AcquireAlgorithm.save} wrote, for a resource of `capacity`
   * at `now` (epoch ms). Returns whether it was applied (`false`: not a state this algorithm
   * understands; nothing changed). Must not throw.
   */
  readonly restore?:
    | ((service: object, pool: string, resourceId: string, capacity: number, state: unknown, now: number) => boolean)
    | undefined
}

/**
 * See {@link AcquireAlgorithm.hints}.
 *
 * @since 0.1.0
 * @category models
 */
export interface AlgorithmHints {
  readonly firstFreeInPoolOrder?: boolean | undefined
  readonly plainWait?: boolean | undefined
}

/**
 * Whether a value is an {@link AcquireAlgorithm}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isAcquireAlgorithm = (u: unknown): u is AcquireAlgorithm =>
  typeof u === "object" && u !== null && (u as { _tag?: unknown })._tag === "AcquireAlgorithm" &&
  typeof (u as { acquire?: unknown }).acquire === "function" &&
  typeof (u as { fingerprint?: unknown }).fingerprint === "function"

// ---------------------------------------------------------------------------------------------
// Built-ins
// ---------------------------------------------------------------------------------------------

const withTimeout = (
  eff: Effect.Effect<Slot, AcquireError>,
  pool: string,
  timeout: Duration.Duration | undefined
): Effect.Effect<Slot, AcquireError> =>
  timeout === undefined ? eff : Effect.timeoutFail(eff, {
    duration: timeout,
    onTimeout: () => new AcquireTimeout({ pool, timeoutMs: Duration.toMillis(timeout) })
  })

/**
 * Options of {@link wait}: an optional `timeout` after which the acquire fails with
 * `AcquireTimeout`.
 *
 * @since 0.1.0
 * @category models
 */
export interface WaitOptions {
  readonly timeout?: Duration.DurationInput | undefined
}

/**
 * The default: take a free slot, or queue FIFO until one is released, a matching resource
 * is added or a cooldown ends. With `timeout`, fails with `AcquireTimeout` when it expires.
 * A selector no resource can ever match waits forever (unless a timeout is set).
 * Fingerprint: `{ name: "wait", timeoutMs: number | null }`.
 *
 * When to use: steady throughput; the fairest choice (first come, first served).
 *
 * @since 0.1.0
 * @category constructors
 */
export const wait = (options: WaitOptions = {}): AcquireAlgorithm => {
  const timeout = options.timeout === undefined ? undefined : Duration.decode(options.timeout)
  return {
    _tag: "AcquireAlgorithm",
    name: "wait",
    hints: { firstFreeInPoolOrder: true, plainWait: timeout === undefined },
    fingerprint: () => ({ name: "wait", timeoutMs: timeout === undefined ? null : Duration.toMillis(timeout) }),
    acquire: (ops) =>
      withTimeout(
        Effect.flatMap(ops.tryTake(), (o) => Option.isSome(o) ? Effect.succeed(o.value) : ops.wait()),
        ops.pool,
        timeout
      )
  }
}

/**
 * How {@link backoff} randomises each delay `d`: `full` draws from `[0, d]`, `equal` from
 * `[d/2, d]`, `none` uses `d`.
 *
 * @since 0.1.0
 * @category models
 */
export type Jitter = "full" | "equal" | "none"

/**
 * Options of {@link backoff}. Defaults: `base` 200 ms, `factor` 2, `cap` 10 s, `jitter`
 * `"full"`, no `maxWait`.
 *
 * @since 0.1.0
 * @category models
 */
export interface BackoffOptions {
  readonly base?: Duration.DurationInput | undefined
  readonly factor?: number | undefined
  readonly cap?: Duration.DurationInput | undefined
  readonly jitter?: Jitter | undefined
  /** Total time to keep polling before failing with `AcquireTimeout`. */
  readonly maxWait?: Duration.DurationInput | undefined
}

/**
 * Polls instead of queueing: tries to take a slot, and when none is free sleeps
 * `min(cap, base * factor^n)` randomised by `jitter` (from Effect's `Random`), then tries
 * again. With `maxWait`, fails with `AcquireTimeout` once that much time has passed.
 * Backoff pollers are not in the FIFO queue, so queued waiters are served first.
 * Jitter formulas after "Exponential Backoff And Jitter" (AWS Architecture Blog, 2015).
 * Fingerprint: `{ name: "backoff", baseMs, factor, capMs, jitter, maxWaitMs }`.
 *
 * When to use: the provider is saturated; avoids every waiter rushing in on each release.
 *
 * @since 0.1.0
 * @category constructors
 */
export const backoff = (options: BackoffOptions = {}): AcquireAlgorithm => {
  const baseMs = Duration.toMillis(options.base ?? Duration.millis(200))
  const factor = options.factor ?? 2
  const capMs = Duration.toMillis(options.cap ?? Duration.seconds(10))
  const jitter = options.jitter ?? "full"
  const maxWaitMs = options.maxWait === undefined ? undefined : Duration.toMillis(options.maxWait)
  return {
    _tag: "AcquireAlgorithm",
    name: "backoff",
    hints: { firstFreeInPoolOrder: true },
    fingerprint: () => ({ name: "backoff", baseMs, factor, capMs, jitter, maxWaitMs: maxWaitMs ?? null }),
    acquire: (ops) =>
      Effect.gen(function*() {
        let waitedMs = 0
        for (let n = 0;; n++) {
          const got = yield* ops.tryTake()
          if (Option.isSome(got)) return got.value
          if (maxWaitMs !== undefined && waitedMs >= maxWaitMs) {
            return yield* new AcquireTimeout({ pool: ops.pool, timeoutMs: maxWaitMs })
          }
          const d = backoffDelayMs(baseMs, factor, capMs, n)
          const r = jitter === "none" ? 1 : yield* Random.next
          let delay = jitter === "full" ? d * r : jitter === "equal" ? d / 2 + (d / 2) * r : d
          if (maxWaitMs !== undefined) delay = Math.min(delay, maxWaitMs - waitedMs)
          // never spin: a zero delay still yields to other fibers, and the wait accounting advances
          yield* Effect.sleep(Duration.millis(Math.max(delay, 1)))
          waitedMs += Math.max(delay, 1)
        }
      })
  }
}

const leastBusyRanker: Ranker = (cs) =>
  cs.slice().sort((a, b) => a.active / a.capacity - b.active / b.capacity || a.index - b.index)

/**
 * Options of algorithms that delegate when nothing is free (default fallback: {@link wait}).
 *
 * @since 0.1.0
 * @category models
 */
export interface FallbackOptions {
  readonly fallback?: AcquireAlgorithm | undefined
}

/**
 * Takes the free matching resource with the lowest load `active / capacity` (ties: pool
 * order); when none is free, delegates to `fallback` (default {@link wait}).
 * Fingerprint: `{ name: "leastBusy", fallback }`.
 *
 * When to use: several endpoints of unequal capacity.
 *
 * @since 0.1.0
 * @category constructors
 */
export const leastBusy = (options: FallbackOptions = {}): AcquireAlgorithm => {
  const fallback = options.fallback ?? wait()
  return {
    _tag: "AcquireAlgorithm",
    name: "leastBusy",
    fingerprint: () => ({ name: "leastBusy", fallback: fallback.fingerprint() }),
    acquire: (ops) => fallback.acquire(ops.with({ ranker: leastBusyRanker }))
  }
}

/**
 * Options of {@link failover}: the pools to try in order (default: the acquire's own pool)
 * and the `fallback` used on the first of them (default {@link wait}).
 *
 * @since 0.1.0
 * @category models
 */
export interface FailoverOptions extends FallbackOptions {
  readonly pools?: ReadonlyArray<string> | undefined
}

/**
 * Tries each listed pool once, in order, and takes the first free matching slot; when all
 * are full, runs `fallback` (default {@link wait}) on the **first** listed pool. It does not
 * loop over the pools again. An unknown pool fails with `PoolNotFound`.
 * Fingerprint: `{ name: "failover", pools, fallback }`.
 *
 * When to use: primary / backup providers, tiers of keys.
 *
 * @since 0.1.0
 * @category constructors
 */
export const failover = (options: FailoverOptions = {}): AcquireAlgorithm => {
  const pools = options.pools ?? []
  const fallback = options.fallback ?? wait()
  return {
    _tag: "AcquireAlgorithm",
    name: "failover",
    fingerprint: () => ({ name: "failover", pools: [...pools], fallback: fallback.fingerprint() }),
    acquire: (ops) =>
      Effect.gen(function*() {
        const order = pools.length === 0 ? [ops.pool] : pools
        for (const p of order) {
          const got = yield* ops.tryTake(p)
          if (Option.isSome(got)) return got.value
        }
        return yield* fallback.acquire(ops.with({ pool: order[0] ?? ops.pool }))
      })
  }
}

/**
 * Prefers the resource this pipeline leased last from the pool (when it is free and
 * matches), otherwise any; when none is free, delegates to `fallback` (default
 * {@link wait}). Fingerprint: `{ name: "sticky", fallback }`.
 *
 * When to use: prompt caches, warm connections.
 *
 * @since 0.1.0
 * @category constructors
 */
export const sticky = (options: FallbackOptions = {}): AcquireAlgorithm => {
  const fallback = options.fallback ?? wait()
  return {
    _tag: "AcquireAlgorithm",
    name: "sticky",
    fingerprint: () => ({ name: "sticky", fallback: fallback.fingerprint() }),
    acquire: (ops) => {
      const last = ops.lastResourceId()
      if (last === undefined) return fallback.acquire(ops)
      const ranker: Ranker = (cs) => {
        const i = cs.findIndex((c) => c.resource.id === last)
        if (i <= 0) return cs
        const out = cs.slice()
        const [hit] = out.splice(i, 1)
        return hit === undefined ? cs : [hit, ...out]
      }
      return fallback.acquire(ops.with({ ranker }))
    }
  }
}

/**
 * Options of {@link quotaAware}: the usage `metric` (default `"tokens"`) and the `reserve`
 * fraction (default 0.05) below which a resource is used only after every other one.
 *
 * @since 0.1.0
 * @category models
 */
export interface QuotaAwareOptions extends FallbackOptions {
  readonly metric?: string | undefined
  readonly reserve?: number | undefined
}

/**
 * Orders free resources by remaining declared quota (`options.quota[metric]` minus the
 * `usage[metric]` reported so far), largest first. Resources whose remaining fraction is
 * below `reserve` come after every resource above it, and resources without a declared
 * quota come last. A preference, never a refusal: when every candidate is exhausted the best
 * one is still leased. When none is free, delegates to `fallback` (default {@link wait}).
 * Fingerprint: `{ name: "quotaAware", metric, reserve, fallback }`.
 *
 * When to use: budget-limited endpoints; declare the quota in options and report usage.
 *
 * @since 0.1.0
 * @category constructors
 */
export const quotaAware = (options: QuotaAwareOptions = {}): AcquireAlgorithm => {
  const metric = options.metric ?? "tokens"
  const reserve = options.reserve ?? 0.05
  const fallback = options.fallback ?? wait()
  const rank = (c: Candidate): [number, number] => {
    const remaining = remainingQuota(c, metric)
    if (remaining === undefined) return [2, 0]
    const quota = (c.resource.options["quota"] as Record<string, number>)[metric] as number
    const fraction = quota > 0 ? remaining / quota : 0
    return [fraction < reserve ? 1 : 0, -remaining]
  }
  const ranker: Ranker = (cs) => {
    const keyed = cs.map((c) => ({ c, k: rank(c) }))
    keyed.sort((a, b) => a.k[0] - b.k[0] || a.k[1] - b.k[1] || a.c.index - b.c.index)
    return keyed.map((x) => x.c)
  }
  return {
    _tag: "AcquireAlgorithm",
    name: "quotaAware",
    fingerprint: () => ({ name: "quotaAware", metric, reserve, fallback: fallback.fingerprint() }),
    acquire: (ops) => fallback.acquire(ops.with({ ranker }))
  }
}

/**
 * Takes a free slot or fails at once with `ResourceUnavailable` (class `unknown`, so the
 * default retry policy does not retry it). Fingerprint: `{ name: "immediate" }`.
 *
 * When to use: shedding load instead of queueing; capacity mistakes surface loudly.
 *
 * @since 0.1.0
 * @category constructors
 */
export const immediate = (): AcquireAlgorithm => ({
  _tag: "AcquireAlgorithm",
  name: "immediate",
  hints: { firstFreeInPoolOrder: true },
  fingerprint: () => ({ name: "immediate" }),
  acquire: (ops) =>
    Effect.flatMap(ops.tryTake(), (o) =>
      Option.isSome(o)
        ? Effect.succeed(o.value)
        : Effect.fail(new ResourceUnavailable({ pool: ops.pool, message: `no free resource in pool "${ops.pool}"` })))
})

/**
 * Options of {@link adaptive}, all optional (defaults in parentheses). Rates are requests per
 * second; durations are `Duration` inputs (strings with a unit in config files).
 *
 * - `initialRate` (2) and `initialConcurrency` (2, at most the resource's `capacity`): the
 *   conservative start of every resource.
 * - `minRate` (0.05) and `maxRate` (none): bounds of the learned rate.
 * - `decrease` (0.7): the multiplicative factor on a 429 (CUBIC's β, RFC 9438), applied to the
 *   rate and the concurrency window; on rising latency to the window only.
 * - `goodputFloor` (0.95): a 429 never cuts the rate below this share of the rate the server
 *   delivered since the previous cut (BBR's delivery-rate estimate).
 * - `increase` (0.1): the additive step, per second of successful traffic, as a share of the
 *   rate the server sustained at the last cut (the knee).
 * - `probe` (0.1): the step is this much smaller once the rate is back near the knee (CUBIC's
 *   plateau), so the limit is probed gently.
 * - `convex` (3 seconds): past the knee's band the step starts at the probe step and grows
 *   with the square of the time spent there, `probe × (1 + (t / convex)²)`, up to the full
 *   step (CUBIC's convex region, RFC 9438 §4.5): a limit that held is probed slowly, one that
 *   rose is found within seconds. After a 429 past slow start, the rate restarts at most at
 *   the knee.
 * - `latencyTolerance` (2) and `latencySlack` (50 millis): a latency moving average above this
 *   multiple of its lowest value plus the slack counts as congestion (the slack keeps the
 *   jitter of a fast endpoint from reading as congestion).
 * - `hold` (1 second): 429s within a hold of a decrease are the same congestion event, unless
 *   the refused request was leased after the decrease (RFC 6582: one reduction per window).
 * - `slowStart` (250 millis): before the first congestion signal the rate doubles per this much
 *   successful traffic (RFC 5681's slow start doubles per round trip) up to 4 × `initialRate`,
 *   then per 4 × this much (RFC 3742's limited slow start at RFC 9406 HyStart++'s
 *   conservative pace), so that a server's burst, which hides its limit until spent, is not
 *   overshot by as much.
 * - `burst` (100 millis): the pacing bucket holds this much of the rate (at least 1 request).
 * - `loopDelay` (this process's event loop, as the pools service samples it on its clock
 *   and passes it in each report; not in config files, not part of the fingerprint): where
 *   the latency rule learns how long our own event loop was stalled holding an answer,
 *   `stalledMs(fromMs, toMs)` on the pool's clock (epoch ms): the stalls at the span's ends,
 *   one covering its start (the sending) or one ending as the answer is read, not those in
 *   between (the server was working then); that time is taken out of the answer time before
 *   the rule reads it, so a client starved of CPU does not read its own delay as the
 *   server's congestion. `false`: nothing is taken out. Tests and simulators pass their own.
 *
 * @since 0.2.0
 * @category models
 */
export interface AdaptiveOptions {
  readonly initialRate?: number | undefined
  readonly initialConcurrency?: number | undefined
  readonly minRate?: number | undefined
  readonly maxRate?: number | undefined
  readonly decrease?: number | undefined
  readonly goodputFloor?: number | undefined
  readonly increase?: number | undefined
  readonly probe?: number | undefined
  readonly convex?: Duration.DurationInput | undefined
  readonly latencyTolerance?: number | undefined
  readonly latencySlack?: Duration.DurationInput | undefined
  readonly hold?: Duration.DurationInput | undefined
  readonly slowStart?: Duration.DurationInput | undefined
  readonly burst?: Duration.DurationInput | undefined
  readonly loopDelay?: { readonly stalledMs: (fromMs: number, toMs: number) => number } | false | undefined
}

const adaptiveParams = (o: AdaptiveOptions): Aimd.AimdParams => {
  const ms = (d: Duration.DurationInput | undefined, dflt: number) => d === undefined ? dflt : Duration.toMillis(d)
  const d = Aimd.defaults
  return {
    initialRate: o.initialRate ?? d.initialRate,
    initialConcurrency: o.initialConcurrency ?? d.initialConcurrency,
    minRate: o.minRate ?? d.minRate,
    maxRate: o.maxRate ?? d.maxRate,
    decrease: o.decrease ?? d.decrease,
    goodputFloor: o.goodputFloor ?? d.goodputFloor,
    increase: o.increase ?? d.increase,
    probe: o.probe ?? d.probe,
    convexMs: ms(o.convex, d.convexMs),
    latencyTolerance: o.latencyTolerance ?? d.latencyTolerance,
    latencySlackMs: ms(o.latencySlack, d.latencySlackMs),
    holdMs: ms(o.hold, d.holdMs),
    slowStartMs: ms(o.slowStart, d.slowStartMs),
    burstMs: ms(o.burst, d.burstMs)
  }
}

/**
 * Learns each resource's limit instead of being told it. Per resource it keeps a concurrency
 * window and a paced request rate that follow AIMD: they start conservative, double per
 * `slowStart` of successful traffic until the first congestion signal (slow start), then grow
 * by a constant step per second (additive increase) while answers are fast and 2xx and
 * acquires are held back by them; a 429 cuts both by `decrease` (once per congestion event),
 * rising latency cuts the window. When the server sends `x-ratelimit-remaining-*` / `x-ratelimit-reset-*`
 * headers (the chat task reports them), the rate is also capped by what they allow, so a key
 * that announces its budget is paced under it instead of being probed with 429s. A resource
 * in its pool's throttle window (Retry-After) or with an open breaker is not leased, as with
 * every algorithm. When no resource may take a request now, the acquire queues FIFO and is
 * woken by a release or when the pacing allows the next request.
 *
 * Method and sources: TCP congestion control (Jacobson 1988; RFC 5681: AIMD, slow start, one
 * decrease per window, RFC 6582 NewReno's reading of it; RFC 9438 CUBIC: the factor 0.7 and the gentle probing near the last
 * knee; RFC 7661: only a limited sender grows), TCP Vegas's delay signal, BBR's delivery-rate
 * floor, and the way LiteLLM's router and OpenAI's cookbook use the `x-ratelimit-*` headers
 * (pace under the announced budget rather than only back off after a 429). Parameters and
 * defaults: {@link AdaptiveOptions}; the rules: `docs/pools.md` ("adaptive").
 *
 * The learned state of each resource is in `snapshot()` under `algorithm.adaptive` (rate,
 * concurrency, phase, last decrease and its reason), stored with the resource's health and
 * shown by `report` and the dashboard. Fingerprint: `{ name: "adaptive", ...parameters }`
 * (durations in ms). Use it as the pool's algorithm (or every task's on that pool): it hears
 * every report on the pool, but paces only the leases it grants.
 *
 * When to use: providers whose limits are unknown, shared, or change during the run.
 *
 * @since 0.2.0
 * @category constructors
 */
export const adaptive = (options: AdaptiveOptions = {}): AcquireAlgorithm => {
  const p = adaptiveParams(options)
  const loop = options.loopDelay === false ? undefined : options.loopDelay
  const services = new WeakMap<object, Map<string, Aimd.AimdState>>()
  const stateOf = (service: object, pool: string, resourceId: string, capacity: number, now: number): Aimd.AimdState => {
    let m = services.get(service)
    if (m === undefined) services.set(service, m = new Map())
    const key = `${pool}\u0000${resourceId}`
    let s = m.get(key)
    if (s === undefined) m.set(key, s = Aimd.initial(p, capacity, now))
    return s
  }
  const batons = new WeakMap<object, Map<string, Effect.Semaphore>>()
  const batonOf = (service: object, pool: string): Effect.Semaphore => {
    let m = batons.get(service)
    if (m === undefined) batons.set(service, m = new Map())
    let b = m.get(pool)
    if (b === undefined) m.set(pool, b = Effect.unsafeMakeSemaphore(1))
    return b
  }
  const finite = (x: number) => (Number.isFinite(x) ? x : null)
  return {
    _tag: "AcquireAlgorithm",
    name: "adaptive",
    fingerprint: () => ({
      name: "adaptive",
      initialRate: p.initialRate,
      initialConcurrency: p.initialConcurrency,
      minRate: p.minRate,
      maxRate: finite(p.maxRate),
      decrease: p.decrease,
      goodputFloor: p.goodputFloor,
      increase: p.increase,
      probe: p.probe,
      convexMs: p.convexMs,
      latencyTolerance: p.latencyTolerance,
      latencySlackMs: p.latencySlackMs,
      holdMs: p.holdMs,
      slowStartMs: p.slowStartMs,
      burstMs: p.burstMs
    }),
    observe: (o) => {
      const stalls = options.loopDelay === false ? undefined : loop ?? o.loopDelay
      Aimd.onReport(
        stateOf(o.service, o.pool, o.resourceId, o.capacity, o.now),
        p,
        o.latencyMs === undefined || stalls === undefined
          ? o
          // the answer's span on the pool's clock: what of it our own loop was stalled
          : { ...o, ownDelayMs: stalls.stalledMs(o.now - o.latencyMs, o.now) }
      )
    },
    describe: (service, pool, resourceId, now) => {
      const s = services.get(service)?.get(`${pool}\u0000${resourceId}`)
      return s === undefined ? undefined : Aimd.describe(s, p, now)
    },
    save: (service, pool, resourceId) => {
      const s = services.get(service)?.get(`${pool}\u0000${resourceId}`)
      return s === undefined ? undefined : Aimd.save(s)
    },
    restore: (service, pool, resourceId, capacity, state, now) => {
      const s = Aimd.restore(state, p, capacity, now)
      if (s === undefined) return false
      let m = services.get(service)
      if (m === undefined) services.set(service, m = new Map())
      // a state learned in this process already is newer than any saved one: kept
      const key = `${pool}\u0000${resourceId}`
      if (!m.has(key)) m.set(key, s)
      return true
    },
    acquire: (ops) =>
      Effect.gen(function*() {
        // the earliest time the pacing lets a held-back resource take a request, as the last
        // ranking found it (reset by each ranking)
        let nextAt = Number.POSITIVE_INFINITY
        // completed when a ranking run by the pool for this queued acquire (a release serving
        // the queue) found it held back by the pacing only: its pacer must then sleep
        let paceNeeded: Deferred.Deferred<void> | undefined
        const ranker: Ranker = (cs) => {
          const now = ops.now()
          nextAt = Number.POSITIVE_INFINITY
          let best: Candidate | undefined
          let bestState: Aimd.AimdState | undefined
          let bestLoad = Number.POSITIVE_INFINITY
          for (const c of cs) {
            const s = stateOf(ops.service, ops.pool, c.resource.id, c.capacity, now)
            const a = Aimd.admit(s, p, c.active, now)
            if (a === true) {
              const load = c.active / Math.max(1, Math.floor(s.limit))
              if (load < bestLoad) {
                best = c
                bestState = s
                bestLoad = load
              }
            } else if (a !== "window" && a < nextAt) nextAt = a
          }
          if (best === undefined || bestState === undefined) {
            if (Number.isFinite(nextAt) && paceNeeded !== undefined) Deferred.unsafeDone(paceNeeded, Exit.void)
            return []
          }
          // the ranker's first choice is taken at once by the pool (it is free and matches)
          Aimd.charge(bestState)
          return [best]
        }
        const o = ops.with({ ranker })
        const take = Effect.suspend(() => {
          nextAt = Number.POSITIVE_INFINITY
          return o.tryTake()
        })
        const got = yield* take
        if (Option.isSome(got)) return got.value
        // Not now: queue as usual (a release, a new resource or the end of a throttle serves
        // the queue), and race a pacer. When the pacing holds the resource back, one acquire
        // per pool at a time (the baton holder) sleeps until the pacing allows the next
        // request and takes it; a timer per waiting acquire would wake them all for every
        // request. An acquire held back by the window waits until a release finds it held
        // back by the pacing instead (issue 18: with no request left in flight, nothing else
        // would ever wake it), then paces; held back by the window again, it queues again.
        const pace = batonOf(ops.service, ops.pool).withPermits(1)(Effect.gen(function*() {
          for (;;) {
            const got = yield* take
            if (Option.isSome(got)) return got
            if (!Number.isFinite(nextAt)) return Option.none<Slot>()
            yield* Effect.sleep(Duration.millis(Math.max(1, nextAt - ops.now())))
          }
        }))
        for (;;) {
          const needed = yield* Deferred.make<void>()
          paceNeeded = needed
          const pacer = Number.isFinite(nextAt) ? pace : Effect.zipRight(Deferred.await(needed), pace)
          const woken = yield* Effect.raceFirst(Effect.map(o.wait(), Option.some), pacer)
          if (Option.isSome(woken)) {
            paceNeeded = undefined
            return woken.value
          }
        }
      })
  }
}

// ---------------------------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------------------------

/**
 * A user algorithm registered under a name: builds the algorithm from the options of a
 * `{ name, ...options }` object (empty for a bare name). Return `Either.left` (or throw)
 * to report bad options.
 *
 * @since 0.1.0
 * @category models
 */
export type AlgorithmPlugin = (
  options: Readonly<Record<string, unknown>>
) => AcquireAlgorithm | Either.Either<AcquireAlgorithm, ConfigError | PluginError>

/**
 * The built-in names (`least_busy` and `quota_aware` are accepted as aliases).
 *
 * @since 0.1.0
 * @category constants
 */
export const builtinNames: ReadonlyArray<string> = [
  "wait",
  "backoff",
  "leastBusy",
  "failover",
  "sticky",
  "quotaAware",
  "immediate",
  "adaptive"
]

const aliases: Record<string, string> = {
  least_busy: "leastBusy",
  quota_aware: "quotaAware",
  leastbusy: "leastBusy",
  quotaaware: "quotaAware"
}

const DurationOption = Schema.Union(DurationFromString, Schema.DurationFromSelf)
const Fallback = Schema.optional(Schema.Unknown)
const PositiveNumber = Schema.Number.pipe(Schema.finite(), Schema.greaterThan(0))

const optionSchemas = {
  wait: Schema.Struct({ timeout: Schema.optional(DurationOption) }),
  backoff: Schema.Struct({
    base: Schema.optional(DurationOption),
    factor: Schema.optional(Schema.Number.pipe(Schema.finite(), Schema.greaterThanOrEqualTo(1))),
    cap: Schema.optional(DurationOption),
    jitter: Schema.optional(Schema.Literal("full", "equal", "none")),
    maxWait: Schema.optional(DurationOption)
  }),
  leastBusy: Schema.Struct({ fallback: Fallback }),
  failover: Schema.Struct({ pools: Schema.optional(Schema.Array(Schema.String)), fallback: Fallback }),
  sticky: Schema.Struct({ fallback: Fallback }),
  quotaAware: Schema.Struct({
    metric: Schema.optional(Schema.NonEmptyString),
    reserve: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
    fallback: Fallback
  }),
  immediate: Schema.Struct({}),
  adaptive: Schema.Struct({
    initialRate: Schema.optional(PositiveNumber),
    initialConcurrency: Schema.optional(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))),
    minRate: Schema.optional(PositiveNumber),
    maxRate: Schema.optional(PositiveNumber),
    decrease: Schema.optional(Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThan(1))),
    goodputFloor: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
    increase: Schema.optional(Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(1))),
    probe: Schema.optional(Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(1))),
    latencyTolerance: Schema.optional(Schema.Number.pipe(Schema.finite(), Schema.greaterThan(1))),
    convex: Schema.optional(DurationOption),
    latencySlack: Schema.optional(DurationOption),
    hold: Schema.optional(DurationOption),
    slowStart: Schema.optional(DurationOption),
    burst: Schema.optional(DurationOption)
  })
} as const

/**
 * One issue per field path (a union reports one per member; the first is the clearest). An
 * option the algorithm does not have is named with a did-you-mean among `known` (`initalRate`
 * → `initialRate`), else the list of its options, as unknown keys are elsewhere in a config.
 */
const issuesOf = (error: ParseResult.ParseError, prefix: string, name: string, known: ReadonlyArray<string>): Array<ConfigIssue> => {
  const byPath = new Map<string, ConfigIssue>()
  for (const i of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const path = [prefix, ...i.path.map(String)].join(".")
    if (byPath.has(path)) continue
    if (i._tag === "Unexpected" && i.path.length === 1) {
      const key = String(i.path[0])
      const near = closest(key, known)
      byPath.set(path, {
        path,
        message: `unknown option "${key}" of algorithm ${name}`,
        suggestion: near !== undefined
          ? `did you mean ${near}?`
          : known.length > 0
          ? `its options: ${known.join(", ")}`
          : `${name} takes no options`
      })
    } else byPath.set(path, { path, message: i.message })
  }
  return [...byPath.values()]
}

const fail = (path: string, message: string, suggestion?: string): Either.Either<never, ConfigError> =>
  Either.left(
    new ConfigError({
      message: `${path}: ${message}`,
      issues: [suggestion === undefined ? { path, message } : { path, message, suggestion }]
    })
  )

const resolveAt = (
  input: unknown,
  plugins: ReadonlyMap<string, AlgorithmPlugin>,
  path: string
): Either.Either<AcquireAlgorithm, ConfigError | PluginError> => {
  if (isAcquireAlgorithm(input)) return Either.right(input)
  let rawName: unknown
  let options: Record<string, unknown> = {}
  if (typeof input === "string") {
    rawName = input
  } else if (typeof input === "object" && input !== null && !Array.isArray(input)) {
    const { name, ...rest } = input as Record<string, unknown>
    rawName = name
    options = rest
  } else {
    return fail(path, "an algorithm is a name, a { name, ...options } object or an algorithm value")
  }
  if (typeof rawName !== "string" || rawName === "") return fail(`${path}.name`, "the algorithm name is missing")
  const name = aliases[rawName] ?? rawName
  switch (name) {
    case "wait":
    case "backoff":
    case "leastBusy":
    case "failover":
    case "sticky":
    case "quotaAware":
    case "immediate":
    case "adaptive":
      return resolveBuiltin(name, options, plugins, path)
  }
  const plugin = plugins.get(rawName)
  if (plugin === undefined) {
    const known = [...builtinNames, ...plugins.keys()]
    const best = known.map((k) => [k, levenshtein(rawName.toLowerCase(), k.toLowerCase())] as const)
      .sort((a, b) => a[1] - b[1])[0]
    return fail(
      `${path}.name`,
      `unknown algorithm "${rawName}" (known: ${known.join(", ")})`,
      best !== undefined && best[1] <= 3 ? `did you mean "${best[0]}"?` : undefined
    )
  }
  try {
    const made = plugin(options)
    if (Either.isEither(made)) {
      return Either.flatMap(made, (a) =>
        isAcquireAlgorithm(a)
          ? Either.right(a)
          : Either.left(new PluginError({ plugin: rawName, message: "the plugin did not return an algorithm" })))
    }
    return isAcquireAlgorithm(made)
      ? Either.right(made)
      : Either.left(new PluginError({ plugin: rawName, message: "the plugin did not return an algorithm" }))
  } catch (e) {
    return Either.left(new PluginError({ plugin: rawName, message: e instanceof Error ? e.message : String(e) }))
  }
}

const resolveBuiltin = (
  name: keyof typeof optionSchemas,
  options: Record<string, unknown>,
  plugins: ReadonlyMap<string, AlgorithmPlugin>,
  path: string
): Either.Either<AcquireAlgorithm, ConfigError | PluginError> => {
  const known = Object.keys(optionSchemas[name].fields)
  if (known.length === 0 && Object.keys(options).length > 0) {
    // an empty Struct accepts any object whatever `onExcessProperty` says: an algorithm without
    // options (immediate) refuses every key itself, as the others do (issue 18)
    const issues = Object.keys(options).map((key): ConfigIssue => {
      const elsewhere = builtinNames.filter((n) => n in optionSchemas && key in optionSchemas[n as keyof typeof optionSchemas].fields)
      return {
        path: `${path}.${key}`,
        message: `unknown option "${key}" of algorithm ${name}`,
        suggestion: `${name} takes no options${elsewhere.length === 0 ? "" : `; ${key} is an option of ${elsewhere.join(", ")}`}`
      }
    })
    return Either.left(
      new ConfigError({
        message: `invalid options for algorithm "${name}": ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    )
  }
  const decoded = Schema.decodeUnknownEither(optionSchemas[name] as Schema.Schema<Record<string, unknown>, unknown>, {
    errors: "all",
    onExcessProperty: "error"
  })(options)
  if (Either.isLeft(decoded)) {
    const issues = issuesOf(decoded.left, path, name, known)
    return Either.left(
      new ConfigError({
        message: `invalid options for algorithm "${name}": ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    )
  }
  const o = decoded.right
  let fallback: AcquireAlgorithm | undefined
  if (o["fallback"] !== undefined) {
    const fb = resolveAt(o["fallback"], plugins, `${path}.fallback`)
    if (Either.isLeft(fb)) return fb
    fallback = fb.right
  }
  const d = (k: string) => o[k] as Duration.Duration | undefined
  switch (name) {
    case "wait":
      return Either.right(wait({ timeout: d("timeout") }))
    case "backoff":
      return Either.right(
        backoff({
          base: d("base"),
          factor: o["factor"] as number | undefined,
          cap: d("cap"),
          jitter: o["jitter"] as Jitter | undefined,
          maxWait: d("maxWait")
        })
      )
    case "leastBusy":
      return Either.right(leastBusy({ fallback }))
    case "failover":
      return Either.right(failover({ pools: o["pools"] as ReadonlyArray<string> | undefined, fallback }))
    case "sticky":
      return Either.right(sticky({ fallback }))
    case "quotaAware":
      return Either.right(
        quotaAware({ metric: o["metric"] as string | undefined, reserve: o["reserve"] as number | undefined, fallback })
      )
    case "immediate":
      return Either.right(immediate())
    case "adaptive": {
      const n = (k: string) => o[k] as number | undefined
      const cross: Array<ConfigIssue> = []
      const min = n("minRate") ?? Aimd.defaults.minRate
      const max = n("maxRate") ?? Aimd.defaults.maxRate
      const init = n("initialRate") ?? Aimd.defaults.initialRate
      if (min > max) cross.push({ path: `${path}.minRate`, message: `minRate (${min}) is above maxRate (${max})` })
      if (init < min || init > max) {
        cross.push({ path: `${path}.initialRate`, message: `initialRate (${init}) is outside [minRate, maxRate] = [${min}, ${max}]` })
      }
      for (const k of ["hold", "slowStart", "burst", "latencySlack", "convex"]) {
        const v = d(k)
        const ok = v === undefined ||
          (Duration.isFinite(v) && (k === "latencySlack" ? Duration.toMillis(v) >= 0 : Duration.toMillis(v) > 0))
        if (!ok) cross.push({ path: `${path}.${k}`, message: `${k} must be a finite, ${k === "latencySlack" ? "non-negative" : "positive"} duration` })
      }
      if (cross.length > 0) {
        return Either.left(
          new ConfigError({
            message: `invalid options for algorithm "adaptive": ${cross.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
            issues: cross
          })
        )
      }
      return Either.right(
        adaptive({
          initialRate: n("initialRate"),
          initialConcurrency: n("initialConcurrency"),
          minRate: n("minRate"),
          maxRate: n("maxRate"),
          decrease: n("decrease"),
          goodputFloor: n("goodputFloor"),
          increase: n("increase"),
          probe: n("probe"),
          convex: d("convex"),
          latencyTolerance: n("latencyTolerance"),
          latencySlack: d("latencySlack"),
          hold: d("hold"),
          slowStart: d("slowStart"),
          burst: d("burst")
        })
      )
    }
  }
}

/**
 * Turns an algorithm input into an algorithm:
 * - an {@link AcquireAlgorithm} value is returned as is;
 * - a name (`"backoff"`) or a `{ name, ...options }` object is resolved against the
 *   built-ins first (`least_busy`, `quota_aware` accepted), then against `plugins`, so a
 *   plugin cannot shadow a built-in.
 *
 * Built-in options are Schema-validated, unknown options refused. Durations are strings with
 * a unit (`"200 millis"`, `"60 seconds"`) or `Duration` values; a bare number is refused as
 * ambiguous. `fallback` is itself an algorithm input (resolved recursively).
 *
 * Fails with `ConfigError` (unknown name, with a suggestion; bad options, each with its
 * path under `algorithm`) or `PluginError` (a plugin threw or returned something else).
 *
 * @since 0.1.0
 * @category resolution
 */
export const resolveAlgorithm = (
  input: AlgorithmInput | AcquireAlgorithm,
  plugins: ReadonlyMap<string, AlgorithmPlugin> = new Map()
): Either.Either<AcquireAlgorithm, ConfigError | PluginError> => resolveAt(input, plugins, "algorithm")

