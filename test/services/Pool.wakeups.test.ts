import { assert, describe, it } from "@effect/vitest"
import { Clock, Duration, Effect, Exit, FastCheck as fc, Fiber, Queue, Scope, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Resource from "../../src/domain/Resource.js"
import * as AcquireAlgorithm from "../../src/services/AcquireAlgorithm.js"
import * as Pool from "../../src/services/Pool.js"

const settle = Effect.forEach(Array.from({ length: 30 }), () => Effect.yieldNow(), { discard: true })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pool.PoolsService) => Effect.Effect<A, E, Scope.Scope>
) => Effect.scoped(Effect.flatMap(Pool.makePools(configs), f))

describe("issue 21: a task holding a lease acquires another", () => {
  it.effect("a free slot is granted at once, with no deadlock warning and no clock advance", () =>
    withPools(
      [
        Pool.make("model", [Resource.make("w", { id: "m", capacity: 2 })]),
        // a client factory takes the acquire off the synchronous fast path
        Pool.make("judge", [Resource.make("w", { id: "j", capacity: 2, factory: () => Effect.succeed("client") })])
      ],
      (pools) =>
        Effect.gen(function*() {
          const events = yield* pools.events({ kinds: ["acquire.suspected_deadlock"] })
          const holder: Pool.Holder = { taskName: "t", pipelineId: "p", owner: "o1" }
          const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
            yield* pools.acquire("model", holder)
            const judge = yield* pools.acquire("judge", holder)
            return judge.resource.id
          })))
          yield* settle
          const done = fiber.unsafePoll()
          assert.isNotNull(done, "the second acquire waited although a slot was free")
          assert.strictEqual(yield* Fiber.join(fiber), "j")
          assert.strictEqual(yield* Queue.size(events), 0)
        })
    ))
})

// ---------------------------------------------------------------------------------------------
// Every wake-up re-arms until its condition holds (issue 20 §0) and no waiter sleeps while it
// could be served (issue 21), under random interleavings.
// ---------------------------------------------------------------------------------------------

/**
 * A clock whose timers fire early or late: each `sleep(d)` lasts `d + skew()` ms on the
 * underlying TestClock (at least 1 ms when `d` is: a timer never fires in zero time). Node's timers fire up to ~1 ms early as
 * `Date.now()` sees it; a timer armed once "at the deadline" then finds its condition still
 * false.
 */
const skewedClock = (base: Clock.Clock, skew: () => number): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => base.unsafeCurrentTimeMillis(),
  unsafeCurrentTimeNanos: () => base.unsafeCurrentTimeNanos(),
  currentTimeMillis: base.currentTimeMillis,
  currentTimeNanos: base.currentTimeNanos,
  sleep: (d) => {
    const ms = Duration.toMillis(d)
    return base.sleep(Duration.millis(ms <= 0 ? 0 : Math.max(1, ms + skew())))
  }
})

const Outcome = fc.constantFrom(
  { ok: true } as const,
  { ok: true } as const,
  { ok: false, kind: "rate_limit", retryAfterMs: 1 } as const,
  { ok: false, kind: "rate_limit", retryAfterMs: 37 } as const,
  { ok: false, kind: "rate_limit", retryAfterMs: 400 } as const,
  { ok: false, kind: "rate_limit_no_hint" } as const,
  { ok: false, kind: "upstream" } as const,
  { ok: false, kind: "upstream" } as const,
  { ok: false, kind: "streak" } as const
)
type Outcome = typeof Outcome extends fc.Arbitrary<infer A> ? A : never

const errorOf = (o: Outcome): unknown => {
  if (o.ok) return undefined
  switch (o.kind) {
    case "rate_limit":
      return new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: o.retryAfterMs })
    case "rate_limit_no_hint":
      return new RetryableError({ message: "429", errorClass: "rate_limit" })
    case "upstream":
      return new RetryableError({ message: "503", errorClass: "upstream" })
    case "streak":
      return new Error("500 something")
  }
}

const Script = fc.record({
  startMs: fc.integer({ min: 0, max: 300 }),
  holdMs: fc.integer({ min: 0, max: 120 }),
  /** Holds a lease of pool "model" while acquiring from "judge" (the judge-after-model shape). */
  holdsModel: fc.boolean(),
  algorithm: fc.constantFrom("wait", "leastBusy", "sticky"),
  outcomes: fc.array(Outcome, { minLength: 1, maxLength: 4 })
})

const judges = () => [
  Resource.make("j", { id: "j0", capacity: 2, degradeAfter: 2, deadAfter: 1_000, cooldown: "300 millis" }),
  Resource.make("j", {
    id: "j1",
    capacity: 1,
    degradeAfter: 2,
    deadAfter: 1_000,
    cooldown: "300 millis",
    factory: () => Effect.succeed("judge-client")
  })
]

/** Whether a resource as the snapshot shows it could take one more lease now. */
const couldServe = (r: Pool.ResourceSnapshot): boolean => {
  if (r.state !== "ready" || r.throttledUntil !== undefined || r.breaker === "open") return false
  const capacity = r.probing || r.breaker === "half_open" ? 1 : r.capacity
  return r.active < capacity
}

const runScripts = (
  scripts: ReadonlyArray<typeof Script extends fc.Arbitrary<infer A> ? A : never>,
  skews: ReadonlyArray<number>,
  strict: boolean
) =>
  Effect.scoped(Effect.gen(function*() {
    let k = 0
    const clock = skewedClock(yield* Effect.clock, () => skews.length === 0 ? 0 : skews[k++ % skews.length]!)
    // only the pools run on the skewed clock (they capture it when made); the test drives TestClock
    const pools = yield* Effect.withClock(
      Pool.makePools([
        Pool.make("model", [Resource.make("m", { id: "m0", capacity: 8 })]),
        Pool.make("judge", judges(), {
          deadlockWarn: "1 hour",
          breaker: { window: 4, minRequests: 2, openFor: "100 millis", maxOpen: "800 millis" }
        })
      ]),
      clock
    )
    {
      {
        // when each resource last granted a lease (TestClock ms)
        const lastGrant = new Map<string, number>()
        const fibers = yield* Effect.forEach(scripts, (s, i) => {
          // each outcome is another task of the script's pipeline: no acquire is the retry of a
          // failed one, so none leaves a resource out (a retry after a transient failure waits
          // for another resource while the failing one is free: Pool.retryElsewhere.test.ts)
          const one = (o: Outcome, k: number) =>
            Effect.scoped(Effect.gen(function*() {
              const holder: Pool.Holder = { taskName: `t${i}.${k}`, pipelineId: `p${i}`, owner: `o${i}` }
              if (s.holdsModel) yield* pools.acquire("model", holder)
              const lease = yield* pools.acquire({ pool: "judge", algorithm: s.algorithm }, holder)
              lastGrant.set(lease.resource.id, yield* Clock.currentTimeMillis)
              yield* Effect.sleep(s.holdMs)
              yield* lease.report(o.ok ? { ok: true } : { ok: false, error: errorOf(o) })
            }))
          return Effect.fork(Effect.zipRight(Effect.sleep(s.startMs), Effect.forEach(s.outcomes, one, { discard: true })))
        })
        // `previous`: free resources seen while waiters were queued at the last checkpoint
        let previous = new Set<string>()
        let previousAt = 0
        const check = (label: string) =>
          Effect.gen(function*() {
            const stats = yield* pools.stats("judge")
            const snap = yield* pools.snapshot("judge")
            const free = new Set(snap.filter(couldServe).map((r) => r.id))
            const stuck = stats.queued > 0 ? free : new Set<string>()
            if (strict) {
              assert.strictEqual(stuck.size, 0, `${label}: ${stats.queued} queued while ${[...stuck]} could serve`)
            } else {
              // Late timers may leave a free slot unserved for up to their lateness (< one step).
              // A slot seen free at two checkpoints in a row is stuck only when it granted no
              // lease in between: a late throttle timer may serve a waiter that is throttled
              // again at once, leaving the slot free at both checkpoints but not idle between
              // them (found by an unpinned run: 2 late timers in a row, 33 ms and 25 ms).
              const persisting = [...stuck].filter((id) => previous.has(id) && (lastGrant.get(id) ?? -1) < previousAt)
              assert.strictEqual(persisting.length, 0, `${label}: waiters stayed queued while ${persisting} could serve`)
            }
            previous = stuck
            previousAt = yield* Clock.currentTimeMillis
          })
        for (let t = 0; t < 4_000; t += 50) {
          yield* TestClock.adjust("50 millis")
          yield* settle
          yield* check(`t=${t + 50} ms`)
        }
        const exits = yield* Effect.forEach(fibers, (f) => Effect.map(Effect.sync(() => f.unsafePoll()), (e) => e))
        exits.forEach((exit, i) => {
          assert.isNotNull(exit, `script ${i} was never served: ${JSON.stringify(scripts[i])}`)
          assert.isTrue(exit !== null && Exit.isSuccess(exit), `script ${i} failed: ${String(exit)}`)
        })
        const stats = yield* pools.stats("judge")
        assert.strictEqual(stats.waiting, 0)
        assert.strictEqual(stats.active, 0)
        assert.strictEqual(stats.dead, 0, "no resource died")
      }
    }
  }))

describe("wake-ups under a clock that fires early and late", () => {
  it.effect.prop(
    "exact timers: no waiter is queued while a slot it matches is free (throttles, probes, cooldowns, breakers, held leases)",
    { scripts: fc.array(Script, { minLength: 1, maxLength: 8 }) },
    ({ scripts }) => runScripts(scripts, [], true),
    { fastCheck: { numRuns: 12, endOnFailure: true }, timeout: 300_000 }
  )

  it.effect.prop(
    "early and late timers: every waiter is eventually served and none stays queued past a timer's lateness",
    {
      scripts: fc.array(Script, { minLength: 1, maxLength: 8 }),
      skews: fc.array(fc.integer({ min: -3, max: 40 }), { minLength: 1, maxLength: 16 })
    },
    ({ scripts, skews }) => runScripts(scripts, skews, false),
    // No shrinking: a counterexample is reported as found (shrinking one of these inputs took
    // 15 minutes once, which a CI run saw as a 300 s hang).
    { fastCheck: { numRuns: 12, endOnFailure: true }, timeout: 300_000 }
  )

  it.effect("early and late timers, regression: a slot re-throttled by the waiter a late timer served is not a stuck slot", () =>
    runScripts(
      [
        { startMs: 0, holdMs: 0, holdsModel: false, algorithm: "wait", outcomes: [{ ok: true }] },
        {
          startMs: 0,
          holdMs: 0,
          holdsModel: false,
          algorithm: "wait",
          outcomes: [{ ok: false, kind: "upstream" }, { ok: false, kind: "rate_limit", retryAfterMs: 400 }, { ok: true }]
        },
        {
          startMs: 0,
          holdMs: 97,
          holdsModel: true,
          algorithm: "wait",
          outcomes: [{ ok: true }, { ok: false, kind: "rate_limit", retryAfterMs: 37 }, { ok: true }]
        },
        {
          startMs: 0,
          holdMs: 0,
          holdsModel: false,
          algorithm: "wait",
          outcomes: [{ ok: true }, { ok: false, kind: "upstream" }, { ok: false, kind: "streak" }, { ok: false, kind: "rate_limit", retryAfterMs: 1 }]
        }
      ],
      [3, 25, 0, -1, 0, 5, 33],
      false
    ))

  it.effect("a throttle whose timer fires 1 ms early still wakes its waiter (the 0.00/s hang)", () =>
    Effect.scoped(Effect.gen(function*() {
      const clock = skewedClock(yield* Effect.clock, () => -1)
      {
        {
          const pools = yield* Effect.withClock(Pool.makePools([Pool.make("keys", [Resource.make("k", { id: "key-a", capacity: 4 })])]), clock)
          const first = yield* pools.acquireRaw("keys")
          yield* first.report({ ok: false, error: new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: 1000 }) })
          yield* first.releaseNow
          const waiter = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("keys"), (l) => l.resource.id)))
          yield* TestClock.adjust("999 millis")
          yield* settle
          assert.isNull(waiter.unsafePoll(), "served inside the window")
          yield* TestClock.adjust("1 millis")
          yield* settle
          assert.strictEqual(yield* Fiber.join(waiter), "key-a")
        }
      }
    })))

  it.effect("a cooldown and an open breaker whose timers fire early still wake their waiters", () =>
    Effect.scoped(Effect.gen(function*() {
      const clock = skewedClock(yield* Effect.clock, () => -1)
      {
        {
          const pools = yield* Effect.withClock(
            Pool.makePools([
              Pool.make("p", [Resource.make("k", { id: "a", capacity: 1, degradeAfter: 1, cooldown: "2 seconds" })], {
                breaker: { minRequests: 1, openFor: "3 seconds" }
              })
            ]),
            clock
          )
          // a streak failure: degraded for 2 s
          const l1 = yield* pools.acquireRaw("p")
          yield* l1.report({ ok: false, error: new Error("boom") })
          yield* l1.releaseNow
          const w1 = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("p"), (l) => l.resource.id)))
          yield* TestClock.adjust("2 seconds")
          yield* settle
          assert.strictEqual(yield* Fiber.join(w1), "a")
          // a transient failure: the breaker opens for 3 s
          const l2 = yield* pools.acquireRaw("p")
          yield* l2.report({ ok: false, error: new RetryableError({ message: "503", errorClass: "upstream" }) })
          yield* l2.releaseNow
          assert.strictEqual((yield* pools.snapshot("p"))[0]!.breaker, "open")
          const w2 = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("p"), (l) => l.resource.id)))
          yield* TestClock.adjust("2999 millis")
          yield* settle
          assert.isNull(w2.unsafePoll())
          yield* TestClock.adjust("1 millis")
          yield* settle
          assert.strictEqual(yield* Fiber.join(w2), "a")
        }
      }
    })))

  it.effect("closing the pools does not wait for a pending throttle, cooldown or breaker timer", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const pools = yield* Pool.makePools([
        Pool.make("p", [Resource.make("k", { id: "a", capacity: 1, degradeAfter: 1, cooldown: "1 hour" }), Resource.make("k", { id: "b" })], {
          breaker: { minRequests: 1, openFor: "1 hour" }
        })
      ]).pipe(Scope.extend(scope))
      // reports made inside uninterruptible regions, as a lease finalizer would
      const a = yield* pools.acquireRaw({ pool: "p", id: "a" })
      yield* Effect.uninterruptible(a.report({ ok: false, error: new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: 86_400_000 }) }))
      yield* a.releaseNow
      const b = yield* pools.acquireRaw({ pool: "p", id: "b" })
      yield* Effect.uninterruptible(b.report({ ok: false, error: new RetryableError({ message: "503", errorClass: "upstream" }) }))
      yield* b.releaseNow
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* settle
      assert.isNotNull(closing.unsafePoll(), "scope close waited for a timer")
    }))
})

// ---------------------------------------------------------------------------------------------
// Issue 18 §3 (a fresh user's run): the last pipelines of a run on an `adaptive` pool stayed
// `running` for good. An acquire that queued behind the concurrency window, then was served
// by a release while the pacing held the resource back, waited for a release that never came.
// ---------------------------------------------------------------------------------------------

describe("adaptive: the last waiters, with no request in flight", () => {
  it.effect("an acquire queued behind the window is granted once the pacing allows, after the last release", () =>
    withPools(
      [Pool.make("llm", [Resource.make("w", { id: "k", capacity: 8 })], {
        algorithm: AcquireAlgorithm.adaptive({ initialRate: 1, initialConcurrency: 2 })
      })],
      (pools) =>
        Effect.gen(function*() {
          const holder = (p: string): Pool.Holder => ({ taskName: "t", pipelineId: p, owner: p })
          // two leases fill the window (the second one after a second of pacing at 1 request/s)
          const a = yield* Effect.forkScoped(Effect.scoped(Effect.zipRight(pools.acquire("llm", holder("a")), Effect.never)))
          yield* settle
          const b = yield* Effect.forkScoped(Effect.scoped(Effect.zipRight(pools.acquire("llm", holder("b")), Effect.never)))
          yield* TestClock.adjust("1 second")
          yield* settle
          // the third queues behind the window
          const c = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("llm", holder("c")), (l) => l.resource.id)))
          yield* settle
          assert.isNull(c.unsafePoll(), "the window of 2 is full")
          // both leases end at once, while the pacing still holds the resource back
          yield* Fiber.interrupt(a)
          yield* Fiber.interrupt(b)
          yield* settle
          assert.isNull(c.unsafePoll(), "the pacing holds it back for up to a second")
          // nothing is in flight: only the pacing can wake it
          yield* TestClock.adjust("2 seconds")
          yield* settle
          const done = c.unsafePoll()
          assert.isNotNull(done, "the last acquire was never granted")
          assert.strictEqual(yield* Fiber.join(c), "k")
        })
    ))
})
