import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope, TestClock } from "effect"
import { classify, RetryableError } from "../../src/domain/Errors.js"
import * as Breaker from "../../src/domain/Breaker.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Pool from "../../src/services/Pool.js"

const settle = Effect.forEach(Array.from({ length: 30 }), () => Effect.yieldNow(), { discard: true })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pool.PoolsService) => Effect.Effect<A, E, Scope.Scope>
) => Effect.scoped(Effect.flatMap(Pool.makePools(configs), f))

const err503 = () => new RetryableError({ message: "503 Service Unavailable", errorClass: "upstream" })
const err429 = (retryAfterMs?: number) =>
  new RetryableError({ message: "429 Too Many Requests", errorClass: "rate_limit", ...(retryAfterMs === undefined ? {} : { retryAfterMs }) })

describe("a 429 never degrades or kills an endpoint (issue 20 §1, case C8)", () => {
  it.effect("forty 429s without any hint: still ready, one lease at a time until a success, then full capacity", () =>
    withPools([Pool.make("llm", [Resource.make("llm", { id: "ep", capacity: 8 })])], (pools) =>
      Effect.gen(function*() {
        const kinds: Array<string> = []
        yield* pools.listen((e) => {
          kinds.push(e.kind)
        })
        for (let i = 0; i < 40; i++) {
          const lease = yield* pools.acquireRaw("llm")
          yield* lease.report({ ok: false, error: err429() })
          yield* lease.releaseNow
        }
        const snap = (yield* pools.snapshot("llm"))[0]!
        assert.strictEqual(snap.state, "ready")
        assert.strictEqual(snap.consecutiveFailures, 0)
        assert.strictEqual(snap.breaker, "closed")
        assert.isTrue(snap.probing)
        assert.strictEqual(snap.throttledTotal, 40)
        assert.notInclude(kinds, "resource.degraded")
        assert.notInclude(kinds, "resource.dead")
        // slowed down: a second lease waits for the first one's outcome
        const probe = yield* pools.acquireRaw("llm")
        const second = yield* Effect.fork(pools.acquireRaw("llm"))
        yield* settle
        assert.isNull(second.unsafePoll())
        yield* probe.report({ ok: true })
        const l2 = yield* Fiber.join(second)
        const more = yield* Effect.all(Array.from({ length: 6 }, () => pools.acquireRaw("llm")))
        assert.strictEqual((yield* pools.stats("llm")).active, 8)
        yield* Effect.forEach([probe, l2, ...more], (l) => l.releaseNow)
      })))

  it.effect("a 429 with a reset hint throttles the key until then; never degraded, whatever the count", () =>
    withPools([Pool.make("llm", [Resource.make("llm", { id: "ep", capacity: 8, degradeAfter: 1, deadAfter: 2 })])], (pools) =>
      Effect.gen(function*() {
        const leases = yield* Effect.all(Array.from({ length: 8 }, () => pools.acquireRaw("llm")))
        for (const l of leases) yield* l.report({ ok: false, error: err429(3000) })
        yield* Effect.forEach(leases, (l) => l.releaseNow)
        const snap = (yield* pools.snapshot("llm"))[0]!
        assert.strictEqual(snap.state, "ready")
        assert.strictEqual(snap.throttledUntil, 3000)
        const stats = yield* pools.stats("llm")
        assert.strictEqual(stats.throttled, 1)
        assert.strictEqual(stats.degraded + stats.dead, 0)
        const waiters = yield* Effect.all(
          Array.from({ length: 16 }, () => Effect.fork(Effect.scoped(Effect.flatMap(pools.acquire("llm"), (l) => l.report({ ok: true }))))))
        yield* TestClock.adjust("2999 millis")
        yield* settle
        assert.isTrue(waiters.every((w) => w.unsafePoll() === null), "no request reaches the key inside its window")
        yield* TestClock.adjust("1 millis")
        yield* settle
        for (const w of waiters) yield* Fiber.join(w)
      })))
})

describe("a server delay past the ceiling is refused, not waited out (issue 20 §2, case C9)", () => {
  it.effect("waiters and new acquires fail with ServerDelayRefused (class rate_limit) naming the time", () =>
    withPools([Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity: 2 })])], (pools) =>
      Effect.gen(function*() {
        const holder = yield* pools.acquireRaw("llm")
        const other = yield* pools.acquireRaw("llm")
        const waiter = yield* Effect.fork(Effect.scoped(pools.acquire("llm")))
        yield* settle
        yield* holder.report({ ok: false, error: err429(86_400_000) })
        const exit = yield* Fiber.await(waiter)
        assert.isTrue(Exit.isFailure(exit))
        const e = yield* Effect.flip(Effect.scoped(pools.acquire("llm")))
        assert.strictEqual(e._tag, "ServerDelayRefused")
        assert.strictEqual(classify(e), "rate_limit")
        assert.include(e.message, "the server asked to wait 24 h (until 1970-01-02T00:00:00.000Z)")
        // a holder that accepts a day waits instead
        const patient = yield* Effect.fork(Effect.scoped(pools.acquire("llm", { taskName: "t", pipelineId: "p", maxServerDelayMs: 2 * 86_400_000 })))
        yield* settle
        assert.isNull(patient.unsafePoll())
        yield* TestClock.adjust("1 day")
        yield* Effect.all([holder.releaseNow, other.releaseNow])
        yield* Fiber.join(patient)
      })))

  it.effect.each(["backoff", "leastBusy", "wait"] as const)("with %s, pollers and queued waiters alike are refused at once (no day-long hang)", (algorithm) =>
    withPools([Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity: 2 })], { algorithm })], (pools) =>
      Effect.gen(function*() {
        const holder = yield* pools.acquireRaw("llm")
        const other = yield* pools.acquireRaw("llm")
        // a backoff poller is not queued: it must find out at its next poll
        const waiter = yield* Effect.fork(Effect.scoped(pools.acquire("llm")))
        yield* settle
        yield* holder.report({ ok: false, error: err429(86_400_000) })
        yield* TestClock.adjust("30 seconds")
        const exit = yield* Fiber.await(waiter)
        assert.isTrue(Exit.isFailure(exit) && Exit.isFailure(exit) && JSON.stringify(exit.cause).includes("ServerDelayRefused"), String(exit))
        yield* Effect.all([holder.releaseNow, other.releaseNow])
        // with both slots free again, a fresh acquire is still refused: the only key is throttled for a day
        const e = yield* Effect.flip(Effect.scoped(pools.acquire("llm")))
        assert.strictEqual(e._tag, "ServerDelayRefused")
      })))

  it.effect("another key that is not throttled keeps serving: no refusal while something usable is left", () =>
    withPools([Pool.make("llm", [Resource.make("llm", { id: "a" }), Resource.make("llm", { id: "b" })])], (pools) =>
      Effect.gen(function*() {
        const a = yield* pools.acquireRaw({ pool: "llm", id: "a" })
        yield* a.report({ ok: false, error: err429(86_400_000) })
        yield* a.releaseNow
        const ids: Array<string> = []
        for (let i = 0; i < 3; i++) ids.push(yield* Effect.scoped(Effect.map(pools.acquire("llm"), (l) => l.resource.id)))
        assert.deepStrictEqual(ids, ["b", "b", "b"])
      })))
})

describe("circuit breaker (issue 20 §8)", () => {
  const pool = (options: Pool.PoolOptions = {}) =>
    Pool.make("llm", [Resource.make("llm", { id: "ep", capacity: 4 })], {
      breaker: { window: 10, minRequests: 4, failureRate: 0.5, openFor: "1 second", maxOpen: "8 seconds" },
      ...options
    })

  it("the pure machine: trips on the error rate of the window, doubles its open time per failed probe", () => {
    const p = (Breaker.policy({ window: 4, minRequests: 4, failureRate: 0.5, openFor: 1000, maxOpen: 3000 }) as { policy: Breaker.BreakerPolicy }).policy
    let b = Breaker.initial
    for (const failed of [false, false, true]) b = Breaker.onOutcome(b, p, failed, 0).breaker
    assert.strictEqual(b.state, "closed", "3 outcomes are fewer than minRequests")
    const trip = Breaker.onOutcome(b, p, true, 10)
    assert.strictEqual(trip.transition, "opened")
    assert.strictEqual(trip.breaker.openUntil, 1010)
    assert.strictEqual(Breaker.onOpenEnd(trip.breaker, 1009).transition, undefined)
    const half = Breaker.onOpenEnd(trip.breaker, 1010).breaker
    const again = Breaker.onProbe(half, p, "failed", 2000).breaker
    assert.strictEqual(again.openUntil, 4000)
    const capped = Breaker.onProbe(Breaker.onOpenEnd(Breaker.onProbe(Breaker.onOpenEnd(again, 4000).breaker, p, "failed", 4000).breaker, 9000).breaker, p, "failed", 9000)
    assert.strictEqual(capped.breaker.openUntil, 12000, "capped at maxOpen")
    assert.strictEqual(Breaker.onProbe(Breaker.onOpenEnd(capped.breaker, 12000).breaker, p, "ok", 12000).transition, "closed")
    assert.deepStrictEqual(Breaker.policy({ failureRate: 2, window: 0 }), {
      issues: [
        { field: "window", message: "window must be an integer >= 1" },
        { field: "failureRate", message: "failureRate must be in (0, 1]" }
      ]
    })
  })

  it.effect("closed → open (no leases) → half-open (one probe) → closed, with events and stats; 429s and 5% noise do not trip it", () =>
    withPools([pool()], (pools) =>
      Effect.gen(function*() {
        const kinds: Array<string> = []
        yield* pools.listen((e) => {
          if (e.kind.startsWith("breaker.")) kinds.push(e.kind)
        })
        const once = (report: Parameters<import("../../src/domain/Lease.js").Lease["report"]>[0]) =>
          Effect.scoped(Effect.flatMap(pools.acquire("llm"), (l) => l.report(report)))
        // noise: 1 failure in 10, and rate limits, never open it
        for (let i = 0; i < 30; i++) yield* once(i % 10 === 0 ? { ok: false, error: err503() } : { ok: true })
        for (let i = 0; i < 10; i++) yield* once({ ok: false, error: err429() })
        yield* once({ ok: true })
        assert.strictEqual((yield* pools.snapshot("llm"))[0]!.breaker, "closed")
        // a storm: failures until the window's rate reaches 50 %
        let n = 0
        while ((yield* pools.snapshot("llm"))[0]!.breaker === "closed") {
          yield* once({ ok: false, error: err503() })
          n++
        }
        assert.isAtMost(n, 6)
        const snap = (yield* pools.snapshot("llm"))[0]!
        assert.strictEqual(snap.breaker, "open")
        assert.strictEqual(snap.state, "ready", "a breaker is not the failure streak: never degraded by 5xx")
        assert.strictEqual((yield* pools.stats("llm")).breakerOpen, 1)
        const w = yield* Effect.fork(Effect.scoped(Effect.flatMap(pools.acquire("llm"), (l) => Effect.as(l.report({ ok: false, error: err503() }), l.id))))
        yield* TestClock.adjust("999 millis")
        yield* settle
        assert.isNull(w.unsafePoll(), "no lease while open")
        yield* TestClock.adjust("1 millis")
        yield* Fiber.join(w)
        // the probe failed: open again for 2 s
        const s2 = (yield* pools.snapshot("llm"))[0]!
        assert.strictEqual(s2.breaker, "open")
        assert.strictEqual(s2.breakerUntil, 3000)
        yield* TestClock.adjust("2 seconds")
        // half-open: one probe at a time
        const probe = yield* pools.acquireRaw("llm")
        const second = yield* Effect.fork(pools.acquireRaw("llm"))
        yield* settle
        assert.isNull(second.unsafePoll(), "one probe at a time")
        yield* probe.report({ ok: true })
        const l2 = yield* Fiber.join(second)
        assert.strictEqual((yield* pools.snapshot("llm"))[0]!.breaker, "closed")
        yield* Effect.all([probe.releaseNow, l2.releaseNow])
        assert.deepStrictEqual(kinds, ["breaker.opened", "breaker.half_open", "breaker.opened", "breaker.half_open", "breaker.closed"])
      })))

  it.effect("reports of leases granted before the breaker opened are ignored; a probe released without a report lets the next lease probe", () =>
    withPools([pool()], (pools) =>
      Effect.gen(function*() {
        const inFlight = yield* Effect.all(Array.from({ length: 4 }, () => pools.acquireRaw("llm")))
        for (const l of inFlight) yield* l.report({ ok: false, error: err503() })
        assert.strictEqual((yield* pools.snapshot("llm"))[0]!.breaker, "open")
        yield* Effect.forEach(inFlight, (l) => l.releaseNow)
        yield* TestClock.adjust("1 second")
        const p1 = yield* pools.acquireRaw("llm")
        yield* p1.releaseNow
        const p2 = yield* pools.acquireRaw("llm")
        yield* p2.report({ ok: true })
        assert.strictEqual((yield* pools.snapshot("llm"))[0]!.breaker, "closed")
        yield* p2.releaseNow
      })))

  it.effect("probes that keep failing deadAfter times in a row: the endpoint is dead and its waiters fail", () =>
    withPools([Pool.make("llm", [Resource.make("llm", { id: "ep", capacity: 1, deadAfter: 3 })], { breaker: { minRequests: 1, openFor: "1 second", maxOpen: "1 second" } })], (pools) =>
      Effect.gen(function*() {
        const l = yield* pools.acquireRaw("llm")
        yield* l.report({ ok: false, error: err503() })
        yield* l.releaseNow
        for (let i = 0; i < 3; i++) {
          yield* TestClock.adjust("1 second")
          const probe = yield* pools.acquireRaw("llm")
          yield* probe.report({ ok: false, error: new RetryableError({ message: "ECONNREFUSED", errorClass: "connection" }) })
          yield* probe.releaseNow
        }
        assert.strictEqual((yield* pools.snapshot("llm"))[0]!.state, "dead")
        const e = yield* Effect.flip(Effect.scoped(pools.acquire("llm")))
        assert.strictEqual(e._tag, "ResourceUnavailable")
      })))

  it.effect("breaker: false sends transient failures to the failure streak, as before", () =>
    withPools([pool({ breaker: false })], (pools) =>
      Effect.gen(function*() {
        const l = yield* pools.acquireRaw("llm")
        for (let i = 0; i < 3; i++) yield* l.report({ ok: false, error: err503() })
        const s = (yield* pools.snapshot("llm"))[0]!
        assert.strictEqual(s.state, "degraded")
        assert.strictEqual(s.breaker, "closed")
        yield* l.releaseNow
      })))
})
