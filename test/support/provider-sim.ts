/**
 * A provider simulation harness (issue 18 §5): LLM endpoints with hidden rate limits, driven in
 * simulated time, reached by the real `chat` task through the real pool, so that acquisition
 * algorithms can be compared over minutes of simulated traffic in a second or two of real time.
 *
 * **Providers** ({@link ProviderSpec}): a request limit and a token limit, each a token bucket
 * (a rate per minute and a burst) or a sliding window (so many per window); changes of both at
 * given times (`changes: [{ atMs: 20_000, factor: 0.5 }]` halves them at 20 s); how a refusal and
 * the answers speak (`signals`): `headers` (OpenAI's `x-ratelimit-{limit,remaining,reset}-*` on
 * every answer and `retry-after-ms` on a 429), `openai` / `anthropic` (those providers' headers
 * over the minute bucket they describe, see {@link Signals}), `retry-after` (a 429 with
 * `Retry-After` in whole seconds, nothing on answers) or `none` (a bare 429); a latency (lognormal around a median,
 * growing with the requests in flight past a `knee`), and optionally a hard concurrency limit.
 * A request is admitted or refused when it arrives (as providers do); the tokens it counts are
 * its prompt (4 per message plus its characters / 4) plus the completion (`completionTokens`).
 *
 * **Reaching them**: {@link ProviderSim.httpClient} is an `@effect/platform` `HttpClient` that
 * answers `POST {baseUrl}/chat/completions` for each provider (`baseUrl` is
 * `http://sim.invalid/<name>/v1`), so a resource built with
 * `Chat.chatClientFactory({ httpClient })` goes through the real chat client (status
 * classification, Retry-After and header parsing) and the chat task's lease reports, exactly
 * the path of a real endpoint ({@link chatPool} builds such a pool).
 *
 * **Simulated time**: {@link simulate} runs an effect on a virtual clock ({@link SimClock}, a
 * `Clock` whose sleeps are timers in a heap) and a synchronous scheduler ({@link SimScheduler}):
 * it runs every fiber until all are suspended, then jumps the clock to the next timer. Nothing
 * waits in real time, and a run is deterministic (the latencies come from a seeded `Random`).
 * Why not `TestClock`: its `adjust` polls for suspension with real `setTimeout(0)`s before each
 * timer it fires, measured at 5.7 ms per timer (2,000 sleeps: 11.4 s), which makes a minute of
 * simulated traffic (tens of thousands of timers) take minutes. `simulate` needs every fiber
 * of the program to be waiting on the clock or on other fibers, never on real I/O (a memory
 * store, no sockets); it yields to the event loop when it finds none runnable and no timer.
 */
import { HttpClient, HttpClientError, HttpClientResponse } from "@effect/platform"
import type { HttpClientRequest } from "@effect/platform"
import { Clock, Duration, Effect, Fiber, Layer, Random } from "effect"
import type { Scheduler } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import type { AcquireAlgorithm } from "../../src/services/AcquireAlgorithm.js"
import * as Pool from "../../src/services/Pool.js"
import * as LoopDelay from "../../src/services/internal/loopDelay.js"
import * as Runner from "../../src/services/Runner.js"
import * as Chat from "../../src/tasks/Chat.js"

// ---------------------------------------------------------------------------------------------
// Simulated time
// ---------------------------------------------------------------------------------------------

interface Timer {
  readonly at: number
  readonly seq: number
  /** Dropped on cancel, so that a cancelled timer does not keep its fiber alive until due. */
  fire: (() => void) | undefined
}

/**
 * A virtual `Clock`: `now` moves only when {@link SimClock.advance} fires the next timer.
 * Sleeps are timers in a binary heap (earliest first, ties in order of scheduling).
 */
export class SimClock implements Clock.Clock {
  readonly [Clock.ClockTypeId]: Clock.ClockTypeId = Clock.ClockTypeId
  private heap: Array<Timer> = []
  private seq = 0
  /** Timers fired so far. */
  fired = 0
  /**
   * @param now the simulated epoch ms to start at
   * @param late when a timer due at `at` fires instead (`at` itself by default): a starved
   *   event loop's late timers (see {@link simulate}'s `lateTimers`)
   */
  constructor(public now: number = 0, private readonly late: (at: number) => number = (at) => at) {}
  unsafeCurrentTimeMillis(): number {
    return this.now
  }
  unsafeCurrentTimeNanos(): bigint {
    return BigInt(Math.round(this.now * 1e6))
  }
  get currentTimeMillis(): Effect.Effect<number> {
    return Effect.sync(() => this.now)
  }
  get currentTimeNanos(): Effect.Effect<bigint> {
    return Effect.sync(() => this.unsafeCurrentTimeNanos())
  }
  sleep(duration: Duration.Duration): Effect.Effect<void> {
    const ms = Duration.toMillis(duration)
    if (!Number.isFinite(ms)) return Effect.never
    return Effect.async<void>((resume) => {
      const t = this.schedule(this.late(this.now + Math.max(0, ms)), () => resume(Effect.void))
      return Effect.sync(() => {
        t.fire = undefined
        if (++this.cancelled > 1024 && this.cancelled > this.heap.length / 2) this.compact()
      })
    })
  }
  /** Schedules `fire` at `at` (epoch ms of the simulation). */
  private cancelled = 0
  /** Drops cancelled timers from the heap (rebuilt in order). */
  private compact(): void {
    this.heap = this.heap.filter((t) => t.fire !== undefined).sort((a, b) => (less(a, b) ? -1 : 1))
    this.cancelled = 0
  }
  schedule(at: number, fire: () => void): Timer {
    const t: Timer = { at, seq: this.seq++, fire }
    const h = this.heap
    h.push(t)
    let i = h.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (!less(h[i]!, h[parent]!)) break
      ;[h[i], h[parent]] = [h[parent]!, h[i]!]
      i = parent
    }
    return t
  }
  private pop(): Timer | undefined {
    const h = this.heap
    const top = h[0]
    if (top === undefined) return undefined
    const last = h.pop()!
    if (h.length > 0) {
      h[0] = last
      let i = 0
      for (;;) {
        const l = 2 * i + 1, r = l + 1
        let m = i
        if (l < h.length && less(h[l]!, h[m]!)) m = l
        if (r < h.length && less(h[r]!, h[m]!)) m = r
        if (m === i) break
        ;[h[i], h[m]] = [h[m]!, h[i]!]
        i = m
      }
    }
    return top
  }
  /** Moves to the earliest pending timer and fires every timer due then; false when none. */
  advance(): boolean {
    let t = this.pop()
    while (t !== undefined && t.fire === undefined) t = this.pop()
    if (t === undefined) return false
    if (t.at > this.now) this.now = t.at
    const fire = t.fire!
    t.fire = undefined
    fire()
    this.fired++
    for (;;) {
      const next = this.heap[0]
      if (next === undefined || next.at > this.now) break
      const u = this.pop()!
      const f = u.fire
      if (f !== undefined) {
        u.fire = undefined
        f()
        this.fired++
      }
    }
    return true
  }
}

const less = (a: Timer, b: Timer): boolean => a.at < b.at || (a.at === b.at && a.seq < b.seq)

/**
 * A synchronous scheduler: fibers' tasks are queued and run by {@link SimScheduler.flush} until
 * none is left (so "every fiber is suspended" is exact, without real timers).
 */
export class SimScheduler implements Scheduler.Scheduler {
  private tasks: Array<() => void> = []
  scheduleTask(task: () => void): void {
    this.tasks.push(task)
  }
  shouldYield(fiber: Fiber.RuntimeFiber<unknown, unknown>): number | false {
    return fiber.currentOpCount > 2048 ? 0 : false
  }
  /** Runs queued tasks (and those they queue) until none is left. */
  flush(): void {
    while (this.tasks.length > 0) {
      const batch = this.tasks
      this.tasks = []
      for (const t of batch) t()
    }
  }
}

/**
 * A starved event loop's stalls: `stallMs` of every `everyMs` from the start (`[k × everyMs,
 * k × everyMs + stallMs)`), only those that begin before `untilMs` when given.
 */
export interface Stalls {
  readonly everyMs: number
  readonly stallMs: number
  readonly untilMs?: number | undefined
}

/**
 * When a moment `t` (simulated epoch ms) held by one of `stalls` (counted from `startMs`) is
 * over: the stall's end, or `t` itself when no stall holds it.
 */
export const stallEndOf = (stalls: Stalls | undefined, startMs: number, t: number): number => {
  if (stalls === undefined) return t
  const off = t - startMs
  const begun = Math.floor(off / stalls.everyMs) * stalls.everyMs
  if (stalls.untilMs !== undefined && begun >= stalls.untilMs) return t
  const into = off - begun
  return into < stalls.stallMs ? t + (stalls.stallMs - into) : t
}

/**
 * Runs `program` in simulated time starting at `startMs` (see the module header) and returns
 * its result with the simulated time it took (`simMs`) and the timers fired. Fails as the
 * program fails; dies when the program waits on nothing (no runnable fiber, no timer, and
 * nothing arriving from the event loop). With `lateTimers`, the program's own event loop is
 * starved: a timer due within a stall fires at its end, with every other one due in it (in
 * the order they were due), as Node runs the timers a busy loop kept waiting.
 */
export const simulate = <A, E>(
  program: Effect.Effect<A, E>,
  options: { readonly startMs?: number; readonly lateTimers?: Stalls | undefined } = {}
): Effect.Effect<{ readonly value: A; readonly simMs: number; readonly timers: number }, E> =>
  Effect.gen(function*() {
    const start = options.startMs ?? 0
    const late = options.lateTimers
    const clock = new SimClock(start, late === undefined ? undefined : (at) => stallEndOf(late, start, at))
    const scheduler = new SimScheduler()
    const fiber = yield* Effect.fork(Effect.withClock(program, clock)).pipe(Effect.withScheduler(scheduler))
    let idle = 0
    let turn = performance.now()
    for (;;) {
      scheduler.flush()
      if (fiber.unsafePoll() !== null) break
      if (clock.advance()) {
        idle = 0
        // keep the host process responsive (a test runner's messages): let the event loop
        // turn every 20 ms of real time; simulated time does not move meanwhile
        if (performance.now() - turn > 20) {
          yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
          turn = performance.now()
        }
        continue
      }
      // nothing runnable and no timer: something waits on the real event loop
      if (++idle > 200) return yield* Effect.dieMessage("simulate: the program waits on nothing (deadlock)")
      yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
    }
    const value = yield* Fiber.join(fiber)
    return { value, simMs: clock.now - start, timers: clock.fired }
  })

// ---------------------------------------------------------------------------------------------
// Providers
// ---------------------------------------------------------------------------------------------

/**
 * One hidden limit: `perMinute` (requests or tokens) as a token bucket holding `burst`
 * (default one second's worth), or, with `window: { ms }`, a sliding window allowing
 * `perMinute × ms / 60 000` in any `ms`.
 */
export interface LimitSpec {
  readonly perMinute: number
  readonly burst?: number | undefined
  readonly window?: { readonly ms: number } | undefined
}

/**
 * How a provider speaks about its limits (see the module header). `openai` and `anthropic` are
 * the headers as the real providers (and `assay mock-llm --rate-limit-headers`) send them on
 * every answer, over the bucket they describe: each limit is then a bucket holding a minute's
 * worth (`perMinute`, refilled at `perMinute / 60` a second; a `burst` or `window` is refused),
 * and the headers name it (`x-ratelimit-limit-requests`, `anthropic-ratelimit-requests-limit`:
 * the per-minute limit in force), the count left of it, and the time until it is full again (a
 * Go duration; Anthropic's an RFC 3339 time to the second), so that the refill
 * `(limit − remaining) / reset` they imply is the hidden rate; a 429 carries `Retry-After` in
 * whole seconds. (Before issue 18's fix18v they named the per-minute limit over an enforced
 * bucket of one second, a mismatch no real provider shows and the mock no longer has.)
 * `headers` names the limit as the bucket's size (any `burst` or `window`) and answers a 429
 * with `retry-after-ms`.
 */
export type Signals = "headers" | "openai" | "anthropic" | "retry-after" | "none"

/** A simulated provider (see the module header). */
export interface ProviderSpec {
  readonly name: string
  readonly requests?: LimitSpec | undefined
  readonly tokens?: LimitSpec | undefined
  /** From `atMs` (simulated, from the start) on, every limit is multiplied by `factor`. */
  readonly changes?: ReadonlyArray<{ readonly atMs: number; readonly factor: number }> | undefined
  readonly signals: Signals
  /** Answer latency: lognormal with this median (ms) and log-sd `sigma` (default 0.3). */
  readonly latency?: { readonly medianMs: number; readonly sigma?: number | undefined } | undefined
  /** Past this many requests in flight, latency grows by `(inFlight - knee) / knee` of itself. */
  readonly knee?: number | undefined
  /**
   * Requests in flight beyond this are refused with a 429 (no hint, unless
   * `concurrencyRetryAfterS`). It bounds the rate on offer to `maxConcurrent` over the mean
   * latency (see {@link ProviderSim.capacityAt}).
   */
  readonly maxConcurrent?: number | undefined
  /**
   * The `Retry-After` (whole seconds) of a 429 past `maxConcurrent`, as `assay mock-llm`'s
   * `maxConcurrency` sends it (`Retry-After: 1`); none when absent.
   */
  readonly concurrencyRetryAfterS?: number | undefined
  /** Completion tokens per answer (default 20). */
  readonly completionTokens?: number | undefined
}

/** One request as the provider saw it. */
export interface SimRequest {
  readonly provider: string
  /** Simulated ms since the start of the simulation. */
  readonly atMs: number
  readonly status: 200 | 429
  readonly latencyMs: number
  readonly tokens: number
}

class Limiter {
  private level: number
  private at: number
  private readonly stamps: Array<{ at: number; n: number }> = []
  /** `minute`: a bucket holding a minute's worth, whatever the spec's `burst` (the `openai` and `anthropic` signals). */
  constructor(readonly spec: LimitSpec, private factor: number, now: number, private readonly minute = false) {
    this.level = this.burst()
    this.at = now
  }
  private ratePerMs(): number {
    return (this.spec.perMinute * this.factor) / 60_000
  }
  burst(): number {
    if (this.minute) return this.spec.perMinute * this.factor
    if (this.spec.window !== undefined) return (this.spec.perMinute * this.factor * this.spec.window.ms) / 60_000
    return (this.spec.burst ?? this.spec.perMinute / 60) * this.factor
  }
  setFactor(f: number, now: number): void {
    this.refill(now)
    this.factor = f
    this.level = Math.min(this.level, this.burst())
  }
  private refill(now: number): void {
    if (this.spec.window !== undefined) {
      const from = now - this.spec.window.ms
      while (this.stamps.length > 0 && this.stamps[0]!.at <= from) this.stamps.shift()
      return
    }
    this.level = Math.min(this.burst(), this.level + this.ratePerMs() * (now - this.at))
    this.at = now
  }
  /** What is left now. */
  remaining(now: number): number {
    this.refill(now)
    if (this.spec.window !== undefined) return this.burst() - this.stamps.reduce((a, s) => a + s.n, 0)
    return this.level
  }
  /** Takes `n` if available. */
  take(n: number, now: number): boolean {
    if (this.remaining(now) < n) return false
    if (this.spec.window !== undefined) this.stamps.push({ at: now, n })
    else this.level -= n
    return true
  }
  /** Milliseconds until `n` are available (0 when they are). */
  waitFor(n: number, now: number): number {
    const left = this.remaining(now)
    if (left >= n) return 0
    if (this.spec.window !== undefined) {
      let need = n - left
      for (const s of this.stamps) {
        need -= s.n
        if (need <= 0) return s.at + this.spec.window.ms - now
      }
      return this.spec.window.ms
    }
    return (n - left) / this.ratePerMs()
  }
  /** Milliseconds until the limit is full again (OpenAI's `x-ratelimit-reset-*`). */
  resetMs(now: number): number {
    const left = this.remaining(now)
    if (this.spec.window !== undefined) {
      const last = this.stamps[this.stamps.length - 1]
      return last === undefined ? 0 : last.at + this.spec.window.ms - now
    }
    return (this.burst() - left) / this.ratePerMs()
  }
}

/** A Go duration string, as OpenAI's reset headers are written (`"1.5s"`, `"250ms"`). */
const goDuration = (ms: number): string => {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`
  const s = ms / 1000
  if (s < 60) return `${Math.ceil(s * 1000) / 1000}s`
  const m = Math.floor(s / 60)
  return `${m}m${Math.ceil((s - m * 60) * 1000) / 1000}s`
}

/**
 * Whether a provider's limits are minute buckets (its signals are `openai` or `anthropic`: the
 * bucket the headers describe, as real providers and `assay mock-llm --rate-limit-headers`
 * enforce it); throws when such a provider's limit names a `burst` or a `window`, which the
 * headers could not describe (the mock refuses `--burst` beside `--rate-limit-headers` the same way).
 */
const minuteBucket = (spec: ProviderSpec): boolean => {
  if (spec.signals !== "openai" && spec.signals !== "anthropic") return false
  for (const [kind, l] of [["requests", spec.requests], ["tokens", spec.tokens]] as const) {
    if (l !== undefined && (l.burst !== undefined || l.window !== undefined)) {
      throw new Error(`provider ${spec.name}: ${kind}.burst/window with signals ${spec.signals}: its headers describe a minute bucket`)
    }
  }
  return true
}

class Provider {
  readonly requests: Limiter | undefined
  readonly tokens: Limiter | undefined
  inFlight = 0
  private changeIndex = 0
  constructor(readonly spec: ProviderSpec, readonly startMs: number) {
    const minute = minuteBucket(spec)
    this.requests = spec.requests === undefined ? undefined : new Limiter(spec.requests, 1, startMs, minute)
    this.tokens = spec.tokens === undefined ? undefined : new Limiter(spec.tokens, 1, startMs, minute)
  }
  /** Applies the changes due at `now`. */
  tick(now: number): void {
    const changes = this.spec.changes ?? []
    while (this.changeIndex < changes.length && now - this.startMs >= changes[this.changeIndex]!.atMs) {
      const f = changes[this.changeIndex]!.factor
      this.requests?.setFactor(f, now)
      this.tokens?.setFactor(f, now)
      this.changeIndex++
    }
  }
  /** The factor in force at a simulated offset (for the capacity on offer). */
  factorAt(offsetMs: number): number {
    let f = 1
    for (const c of this.spec.changes ?? []) if (offsetMs >= c.atMs) f = c.factor
    return f
  }
}

/** The simulated providers, their HTTP client and their request log. */
export interface ProviderSim {
  readonly httpClient: HttpClient.HttpClient
  readonly providers: ReadonlyArray<ProviderSpec>
  /** Every request so far, in arrival order. */
  readonly log: ReadonlyArray<SimRequest>
  /** `http://sim.invalid/<name>/v1` */
  readonly baseUrl: (name: string) => string
  /**
   * Requests per second the provider allows at a simulated offset (ms): the smaller of its
   * request rate, its token rate over the tokens a request takes (`tokensPerRequest`) and,
   * with `maxConcurrent`, that many requests in flight over the mean latency (Little's law;
   * the lognormal's mean, `median × e^(sigma²/2)`, without the `knee`'s slowing).
   */
  readonly capacityAt: (name: string, offsetMs: number, tokensPerRequest: number) => number
  /**
   * The client's own event-loop stalls (`loopStalls` of {@link makeProviders}) as the
   * `adaptive` algorithm's `loopDelay` reads them: the stalled ms within a span of simulated
   * epoch ms (0 without `loopStalls`).
   */
  readonly loopDelay: { readonly stalledMs: (fromMs: number, toMs: number) => number }
}

/** Prompt tokens, estimated as providers' rule of thumb: 4 characters a token, plus 4 a message. */
const promptTokensOf = (request: HttpClientRequest.HttpClientRequest): number => {
  const body = request.body
  if (body._tag !== "Uint8Array") return 0
  try {
    const json = JSON.parse(new TextDecoder().decode(body.body)) as { messages?: Array<{ content?: unknown }> }
    let n = 0
    for (const m of json.messages ?? []) n += 4 + Math.ceil((typeof m.content === "string" ? m.content.length : 0) / 4)
    return n
  } catch {
    return Math.ceil(body.body.length / 4)
  }
}

/**
 * Builds the simulated providers at `startMs` (simulated epoch ms; their `changes` count from
 * it). Latencies are drawn from a `Random` seeded with `seed`.
 */
export const makeProviders = (
  providers: ReadonlyArray<ProviderSpec>,
  options: {
    readonly seed?: number
    readonly startMs?: number
    /**
     * The client's event loop stalls for `stallMs` every `everyMs` (simulated, from the start:
     * `[k × everyMs, k × everyMs + stallMs)`), as on a machine starved of CPU: a request sent
     * during a stall leaves at its end, an answer arriving during one is read at its end (the
     * server's latency is unchanged; the client measures more); with `untilMs`, only the stalls
     * that begin before that offset (a load that passes).
     */
    readonly loopStalls?: { readonly everyMs: number; readonly stallMs: number; readonly untilMs?: number | undefined } | undefined
  } = {}
): ProviderSim => {
  const startMs = options.startMs ?? 0
  const stalls = options.loopStalls
  /** When the stall that holds simulated epoch ms `t` ends (`t` itself when none holds it). */
  const stallEnd = (t: number): number => {
    if (stalls === undefined) return t
    const off = t - startMs
    const begun = Math.floor(off / stalls.everyMs) * stalls.everyMs
    if (stalls.untilMs !== undefined && begun >= stalls.untilMs) return t
    const into = off - begun
    return into < stalls.stallMs ? t + (stalls.stallMs - into) : t
  }
  /** The stalls that held a request of the span (the rule of `LoopDelay.heldMs`). */
  const stalledMs = (fromMs: number, toMs: number): number => {
    if (stalls === undefined || !(toMs > fromMs)) return 0
    const within: Array<readonly [number, number]> = []
    for (let k = Math.floor((fromMs - startMs) / stalls.everyMs); startMs + k * stalls.everyMs < toMs; k++) {
      const a = startMs + k * stalls.everyMs
      if (stalls.untilMs === undefined || a - startMs < stalls.untilMs) within.push([a, a + stalls.stallMs])
    }
    return LoopDelay.heldMs(within, fromMs, toMs)
  }
  const rng = Random.make(options.seed ?? 0)
  const byName = new Map(providers.map((p) => [p.name, new Provider(p, startMs)]))
  const log: Array<SimRequest> = []
  const respond = (
    request: HttpClientRequest.HttpClientRequest,
    status: number,
    body: unknown,
    headers: Record<string, string>
  ): HttpClientResponse.HttpClientResponse => {
    const text = JSON.stringify(body)
    const response = HttpClientResponse.fromWeb(
      request,
      new Response(text, { status, headers: { "content-type": "application/json", ...headers } })
    )
    // the body as a ready value: reading a web Response is a real promise, which simulated
    // time cannot wait for
    ;(response as unknown as { textBody: Effect.Effect<string> }).textBody = Effect.succeed(text)
    return response
  }
  const limitHeaders = (p: Provider, now: number): Record<string, string> => {
    const h: Record<string, string> = {}
    const signals = p.spec.signals
    for (const [kind, l] of [["requests", p.requests], ["tokens", p.tokens]] as const) {
      if (l === undefined) continue
      const perMinute = String(Math.round(l.spec.perMinute * p.factorAt(now - startMs)))
      const remaining = String(Math.max(0, Math.floor(l.remaining(now))))
      if (signals === "anthropic") {
        h[`anthropic-ratelimit-${kind}-limit`] = perMinute
        h[`anthropic-ratelimit-${kind}-remaining`] = remaining
        // an RFC 3339 time to the second, as Anthropic writes it (a bucket refilling within a
        // second reads as full now)
        h[`anthropic-ratelimit-${kind}-reset`] = new Date(Math.floor((now + l.resetMs(now)) / 1000) * 1000).toISOString()
          .replace(".000Z", "Z")
        continue
      }
      h[`x-ratelimit-limit-${kind}`] = signals === "openai" ? perMinute : String(Math.floor(l.burst()))
      h[`x-ratelimit-remaining-${kind}`] = remaining
      h[`x-ratelimit-reset-${kind}`] = goDuration(l.resetMs(now))
    }
    return h
  }
  /** Whether the provider sends its limits' headers on every answer. */
  const sendsHeaders = (p: Provider): boolean =>
    p.spec.signals === "headers" || p.spec.signals === "openai" || p.spec.signals === "anthropic"
  const httpClient = HttpClient.make((request, url) =>
    Effect.gen(function*() {
      const name = url.pathname.split("/")[1] ?? ""
      const p = byName.get(name)
      if (p === undefined) {
        return yield* new HttpClientError.RequestError({ request, reason: "Transport", description: `no provider ${name}` })
      }
      const sent = yield* Clock.currentTimeMillis
      // sent during a stall of the client's loop: it leaves when the loop runs again
      if (stallEnd(sent) > sent) yield* Effect.sleep(Duration.millis(stallEnd(sent) - sent))
      const now = yield* Clock.currentTimeMillis
      p.tick(now)
      const completion = p.spec.completionTokens ?? 20
      const tokens = promptTokensOf(request) + completion
      const atMs = now - startMs
      const refuse = (headers: Record<string, string>, message: string) => {
        log.push({ provider: name, atMs, status: 429, latencyMs: 0, tokens })
        return respond(request, 429, { error: { message, type: "rate_limit_exceeded" } }, headers)
      }
      if (p.spec.maxConcurrent !== undefined && p.inFlight >= p.spec.maxConcurrent) {
        const after = p.spec.concurrencyRetryAfterS
        return refuse(after === undefined ? {} : { "retry-after": String(after) }, "Too many concurrent requests")
      }
      const reqOk = p.requests === undefined || p.requests.remaining(now) >= 1
      const tokOk = p.tokens === undefined || p.tokens.remaining(now) >= tokens
      if (!reqOk || !tokOk) {
        const waitMs = Math.max(p.requests?.waitFor(1, now) ?? 0, p.tokens?.waitFor(tokens, now) ?? 0)
        const wholeSeconds = String(Math.max(1, Math.ceil(waitMs / 1000)))
        const headers = p.spec.signals === "headers"
          ? { ...limitHeaders(p, now), "retry-after-ms": String(Math.ceil(waitMs)) }
          : p.spec.signals === "openai" || p.spec.signals === "anthropic"
          ? { ...limitHeaders(p, now), "retry-after": wholeSeconds }
          : p.spec.signals === "retry-after"
          ? { "retry-after": wholeSeconds }
          : {}
        return refuse(headers, `Rate limit reached for ${reqOk ? "tokens" : "requests"}`)
      }
      p.requests?.take(1, now)
      p.tokens?.take(tokens, now)
      p.inFlight++
      const median = p.spec.latency?.medianMs ?? 200
      const sigma = p.spec.latency?.sigma ?? 0.3
      // Box-Muller from two uniforms of the seeded Random
      const u1 = Math.max(1e-12, yield* rng.next)
      const u2 = yield* rng.next
      const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2)
      let latencyMs = median * Math.exp(sigma * z)
      const knee = p.spec.knee
      if (knee !== undefined && p.inFlight > knee) latencyMs *= 1 + (p.inFlight - knee) / knee
      latencyMs = Math.max(1, Math.round(latencyMs))
      yield* Effect.sleep(Duration.millis(latencyMs)).pipe(Effect.ensuring(Effect.sync(() => p.inFlight--)))
      const done = yield* Clock.currentTimeMillis
      p.tick(done)
      log.push({ provider: name, atMs, status: 200, latencyMs, tokens })
      // answered during a stall of the client's loop: read when the loop runs again
      if (stallEnd(done) > done) yield* Effect.sleep(Duration.millis(stallEnd(done) - done))
      const headers = sendsHeaders(p) ? limitHeaders(p, done) : {}
      const promptTokens = tokens - completion
      return respond(request, 200, {
        id: `sim-${log.length}`,
        object: "chat.completion",
        model: "sim-model",
        choices: [{ index: 0, message: { role: "assistant", content: "ham" }, finish_reason: "stop" }],
        usage: { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: tokens }
      }, headers)
    })
  )
  return {
    httpClient,
    providers,
    log,
    baseUrl: (name) => `http://sim.invalid/${name}/v1`,
    loopDelay: { stalledMs },
    capacityAt: (name, offsetMs, tokensPerRequest) => {
      const p = byName.get(name)
      if (p === undefined) return 0
      const f = p.factorAt(offsetMs)
      const req = p.spec.requests === undefined ? Number.POSITIVE_INFINITY : (p.spec.requests.perMinute * f) / 60
      const tok = p.spec.tokens === undefined ? Number.POSITIVE_INFINITY : (p.spec.tokens.perMinute * f) / 60 / tokensPerRequest
      const sigma = p.spec.latency?.sigma ?? 0.3
      const meanMs = (p.spec.latency?.medianMs ?? 200) * Math.exp((sigma * sigma) / 2)
      const conc = p.spec.maxConcurrent === undefined ? Number.POSITIVE_INFINITY : (p.spec.maxConcurrent * 1000) / meanMs
      return Math.min(req, tok, conc)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------

/**
 * A pool `llm` with one resource per provider (id = provider name, `capacity` leases each),
 * whose clients are real chat clients over the simulated HTTP client.
 */
export const chatPool = (
  sim: ProviderSim,
  algorithm: string | { readonly name: string; readonly [k: string]: unknown } | AcquireAlgorithm,
  capacity: number
): Pool.PoolConfig =>
  Pool.make(
    "llm",
    sim.providers.map((p) =>
      Resource.make("llm", {
        id: p.name,
        capacity,
        options: { baseUrl: sim.baseUrl(p.name), model: "sim-model", apiKey: `sim-key-${p.name}` },
        factory: Chat.chatClientFactory({ httpClient: sim.httpClient })
      })
    ),
    { algorithm }
  )

/** One sample of the pool during a run: simulated offset (ms) and each resource's snapshot. */
export interface PoolSample {
  readonly atMs: number
  readonly resources: ReadonlyArray<Pool.ResourceSnapshot>
}

/** What {@link runChat} returns. */
export interface ChatRun {
  readonly report: Runner.RunReport
  readonly log: ReadonlyArray<SimRequest>
  readonly samples: ReadonlyArray<PoolSample>
  readonly simMs: number
  readonly timers: number
}

/**
 * Runs `pipelines` one-task pipelines (the built-in `chat` task, default retry policy raised to
 * `maxAttempts` attempts) through the Runner with a memory store, `concurrency` at once, against
 * the pool {@link chatPool} builds, in simulated time from `startMs` (default 0); samples the
 * pool's snapshot every `sampleEvery` ms (default 1000).
 */
export const runChat = (
  sim: ProviderSim,
  options: {
    readonly algorithm: string | { readonly name: string; readonly [k: string]: unknown } | AcquireAlgorithm
    readonly pipelines: number
    readonly concurrency: number
    readonly capacity: number
    readonly maxAttempts?: number | undefined
    readonly sampleEvery?: number | undefined
    readonly startMs?: number | undefined
    /** Simulated ms the run may take; past it the run fails with a `TimeoutException`. */
    readonly timeLimitMs?: number | undefined
    /** The client's timers fire late, at the end of these stalls (see {@link simulate}). */
    readonly lateTimers?: Stalls | undefined
  }
): Effect.Effect<ChatRun, unknown> => {
  const startMs = options.startMs ?? 0
  const env = Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: options.concurrency, heartbeat: "1 hour", staleAfter: "3 hours" }),
    Layer.mergeAll(MemoryStore.layer(), Pool.layer([chatPool(sim, options.algorithm, options.capacity)]))
  )
  const task = Chat.chat<string>({
    name: "ask",
    retry: { maxAttempts: options.maxAttempts ?? 20, base: "250 millis", factor: 2, cap: "10 seconds", jitter: "full" }
  })
  const inputs = Array.from({ length: options.pipelines }, (_, i) => `question ${i}: is this spam?`)
  const program = Effect.gen(function*() {
    const pools = yield* Pool.Pools
    const samples: Array<PoolSample> = []
    const sampler = Effect.gen(function*() {
      for (;;) {
        const now = yield* Clock.currentTimeMillis
        samples.push({ atMs: now - startMs, resources: yield* pools.snapshot("llm") })
        yield* Effect.sleep(Duration.millis(options.sampleEvery ?? 1000))
      }
    }).pipe(Effect.orDie)
    const fiber = yield* Effect.fork(sampler)
    const running = Runner.run(Pipeline.make("sim", task).map(inputs))
    const report = yield* (options.timeLimitMs === undefined
      ? running
      : Effect.timeout(running, Duration.millis(options.timeLimitMs)))
    yield* Fiber.interrupt(fiber)
    return { report, samples }
  }).pipe(Effect.provide(env))
  return Effect.map(simulate(program, { startMs, lateTimers: options.lateTimers }), ({ simMs, timers, value }) => ({
    report: value.report,
    samples: value.samples,
    log: sim.log,
    simMs,
    timers
  }))
}

/**
 * Figures of a run between two simulated offsets (ms): requests, 429s, answers (200s) per
 * provider and in all, the 429 share, and the utilisation: answers / the capacity on offer
 * (∫ `capacityAt` over the interval, `tokensPerRequest` converting token limits).
 */
export const figures = (
  sim: ProviderSim,
  log: ReadonlyArray<SimRequest>,
  fromMs: number,
  toMs: number,
  tokensPerRequest: number
): {
  readonly requests: number
  readonly rateLimited: number
  readonly served: number
  readonly rate429: number
  readonly offered: number
  readonly utilisation: number
  readonly byProvider: Readonly<Record<string, { requests: number; rateLimited: number; served: number; offered: number }>>
} => {
  const byProvider: Record<string, { requests: number; rateLimited: number; served: number; offered: number }> = {}
  for (const p of sim.providers) {
    let offered = 0
    for (let t = fromMs; t < toMs; t += 100) offered += (sim.capacityAt(p.name, t, tokensPerRequest) * Math.min(100, toMs - t)) / 1000
    byProvider[p.name] = { requests: 0, rateLimited: 0, served: 0, offered }
  }
  for (const r of log) {
    if (r.atMs < fromMs || r.atMs >= toMs) continue
    const b = byProvider[r.provider]!
    b.requests++
    if (r.status === 429) b.rateLimited++
    else b.served++
  }
  const sum = (k: "requests" | "rateLimited" | "served" | "offered") => Object.values(byProvider).reduce((a, b) => a + b[k], 0)
  const requests = sum("requests")
  const rateLimited = sum("rateLimited")
  const served = sum("served")
  const offered = sum("offered")
  return {
    requests,
    rateLimited,
    served,
    rate429: requests === 0 ? 0 : rateLimited / requests,
    offered,
    utilisation: offered === 0 ? 0 : served / offered,
    byProvider
  }
}
