import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Either, Fiber, Option, Scope, TestClock } from "effect"
import type { Lease } from "../../src/domain/Lease.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Algo from "../../src/services/AcquireAlgorithm.js"
import { backoffDelayMs } from "../../src/services/internal/acquireAlgorithm.js"
import { fingerprintOf } from "../../src/services/internal/algorithmFingerprint.js"
import * as Pool from "../../src/services/Pool.js"

const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pool.PoolsService) => Effect.Effect<A, E, Scope.Scope>
) => Effect.scoped(Effect.flatMap(Pool.makePools(configs), f))

const w = (id: string, capacity = 1, options: Record<string, unknown> = {}) =>
  Resource.make("w", { id, capacity, options })

const idOf = (l: Lease) => l.resource.id

describe("resolveAlgorithm", () => {
  it("resolves names, aliases and option objects to built-ins with normalised fingerprints", () => {
    const fp = (i: Parameters<typeof Algo.resolveAlgorithm>[0]) => Either.getOrThrow(fingerprintOf(i))
    assert.deepStrictEqual(fp("wait"), { name: "wait", timeoutMs: null })
    assert.deepStrictEqual(fp("least_busy"), fp(Algo.leastBusy()))
    assert.deepStrictEqual(fp({ name: "leastBusy" }), {
      name: "leastBusy",
      fallback: { name: "wait", timeoutMs: null }
    })
    assert.deepStrictEqual(fp({ name: "backoff", cap: "60 seconds", jitter: "none" }), {
      name: "backoff",
      baseMs: 200,
      factor: 2,
      capMs: 60_000,
      jitter: "none",
      maxWaitMs: null
    })
    assert.deepStrictEqual(fp({ name: "backoff", base: Duration.millis(50) }), fp(Algo.backoff({ base: 50 })))
    assert.deepStrictEqual(fp({ name: "failover", pools: ["a", "b"], fallback: { name: "wait", timeout: "1 second" } }), {
      name: "failover",
      pools: ["a", "b"],
      fallback: { name: "wait", timeoutMs: 1000 }
    })
    assert.deepStrictEqual(fp("quota_aware"), {
      name: "quotaAware",
      metric: "tokens",
      reserve: 0.05,
      fallback: { name: "wait", timeoutMs: null }
    })
    assert.deepStrictEqual(fp("immediate"), { name: "immediate" })
    assert.deepStrictEqual(fp("sticky"), { name: "sticky", fallback: { name: "wait", timeoutMs: null } })
  })

  it("refuses unknown names (with a suggestion), bad options with paths, and bare-number durations", () => {
    const unknown = Either.flip(Algo.resolveAlgorithm("bakoff"))
    assert.isTrue(Either.isRight(unknown))
    const e1 = Either.getOrThrow(unknown)
    assert.strictEqual(e1._tag, "ConfigError")
    if (e1._tag === "ConfigError") assert.strictEqual(e1.issues[0]?.suggestion, "did you mean \"backoff\"?")
    const bad = Either.getOrThrow(Either.flip(Algo.resolveAlgorithm({ name: "backoff", factor: 0.5, cap: 60, extra: 1 })))
    assert.strictEqual(bad._tag, "ConfigError")
    if (bad._tag === "ConfigError") {
      assert.deepStrictEqual(bad.issues.map((i) => i.path).sort(), ["algorithm.cap", "algorithm.extra", "algorithm.factor"])
      assert.include(bad.issues.find((i) => i.path === "algorithm.cap")!.message, "bare number")
    }
    const nested = Either.getOrThrow(Either.flip(Algo.resolveAlgorithm({ name: "sticky", fallback: { name: "nope" } })))
    if (nested._tag === "ConfigError") assert.strictEqual(nested.issues[0]?.path, "algorithm.fallback.name")
  })

  it("a misspelt option is named with a did-you-mean, not the list of every key (issue 18: adaptive's initalRate)", () => {
    const typo = Either.getOrThrow(Either.flip(Algo.resolveAlgorithm({ name: "adaptive", initalRate: 5 })))
    assert.strictEqual(typo._tag, "ConfigError")
    if (typo._tag === "ConfigError") {
      assert.deepStrictEqual(typo.issues, [{
        path: "algorithm.initalRate",
        message: "unknown option \"initalRate\" of algorithm adaptive",
        suggestion: "did you mean initialRate?"
      }])
    }
    // nothing close: the algorithm's options are listed
    const far = Either.getOrThrow(Either.flip(Algo.resolveAlgorithm({ name: "quotaAware", colour: "red" })))
    if (far._tag === "ConfigError") assert.strictEqual(far.issues[0]?.suggestion, "its options: metric, reserve, fallback")
  })

  it("immediate refuses an option as every other algorithm does, with its path (issue 18: it accepted any key silently)", () => {
    const bad = Either.getOrThrow(Either.flip(Algo.resolveAlgorithm({ name: "immediate", bogus: 1, timeout: "5 seconds" })))
    assert.strictEqual(bad._tag, "ConfigError")
    if (bad._tag === "ConfigError") {
      assert.deepStrictEqual(bad.issues, [
        { path: "algorithm.bogus", message: "unknown option \"bogus\" of algorithm immediate", suggestion: "immediate takes no options" },
        {
          path: "algorithm.timeout",
          message: "unknown option \"timeout\" of algorithm immediate",
          suggestion: "immediate takes no options; timeout is an option of wait"
        }
      ])
    }
    // without options (a name, or { name }) it resolves as before
    assert.strictEqual(Either.getOrThrow(Algo.resolveAlgorithm({ name: "immediate" })).name, "immediate")
    assert.strictEqual(Either.getOrThrow(Algo.resolveAlgorithm("immediate")).name, "immediate")
  })

  it("resolves plugins after built-ins: a plugin cannot shadow a built-in", () => {
    const mine: Algo.AcquireAlgorithm = { ...Algo.immediate(), name: "mine", fingerprint: () => ({ name: "mine" }) }
    const plugins = new Map<string, Algo.AlgorithmPlugin>([
      ["wait", () => mine],
      ["mine", (o) => ({ ...mine, fingerprint: () => ({ name: "mine", ...o as Record<string, never> }) })],
      ["broken", () => {
        throw new Error("import failed")
      }]
    ])
    assert.strictEqual(Either.getOrThrow(Algo.resolveAlgorithm("wait", plugins)).name, "wait")
    assert.deepStrictEqual(Either.getOrThrow(fingerprintOf({ name: "mine", level: 2 }, plugins)), { name: "mine", level: 2 })
    const broken = Either.getOrThrow(Either.flip(Algo.resolveAlgorithm("broken", plugins)))
    assert.strictEqual(broken._tag, "PluginError")
    assert.strictEqual(Either.getOrThrow(Algo.resolveAlgorithm(mine)), mine)
  })
})

describe("algorithms in a pool", () => {
  it.effect("backoff polls with exponential delays instead of queueing, and gives up after maxWait", () =>
    withPools([Pool.make("p", [w("a")])], (pools) =>
      Effect.gen(function*() {
        const held = yield* pools.acquireRaw("p")
        const algorithm = Algo.backoff({ base: "100 millis", factor: 2, cap: "1 second", jitter: "none" })
        const fiber = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire({ pool: "p", algorithm }), idOf)))
        yield* settle
        // polls at 0, 100, 300, 700, 1500 ms; a release at 350 ms is only seen at 700 ms
        yield* TestClock.adjust("350 millis")
        yield* held.releaseNow
        assert.strictEqual((yield* pools.stats("p")).active, 0)
        yield* TestClock.adjust("349 millis")
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        yield* TestClock.adjust("1 millis")
        assert.strictEqual(yield* Fiber.join(fiber), "a")
        assert.strictEqual((yield* pools.stats("p")).waitMsMax, 700)

        const held2 = yield* pools.acquireRaw("p")
        const limited = Algo.backoff({ base: "100 millis", jitter: "none", maxWait: "250 millis" })
        const f2 = yield* Effect.fork(Effect.scoped(pools.acquire({ pool: "p", algorithm: limited })))
        yield* TestClock.adjust("250 millis")
        const err = yield* Effect.flip(Fiber.join(f2))
        assert.strictEqual(err._tag, "AcquireTimeout")
        yield* held2.releaseNow
      })))

  it("backoff delays are capped: min(cap, base * factor^n)", () => {
    assert.deepStrictEqual([0, 1, 2, 3, 4, 5].map((n) => backoffDelayMs(200, 2, 2000, n)), [200, 400, 800, 1600, 2000, 2000])
  })

  it.effect("full jitter draws each delay from Random within [0, delay]", () =>
    withPools([Pool.make("p", [w("a")])], (pools) =>
      Effect.gen(function*() {
        const held = yield* pools.acquireRaw("p")
        const algorithm = Algo.backoff({ base: "1 second", factor: 1, cap: "1 second", jitter: "full" })
        const fiber = yield* Effect.fork(Effect.scoped(pools.acquire({ pool: "p", algorithm })))
        yield* settle
        yield* held.releaseNow
        // with full jitter every delay is at most 1 s: the poll after the release comes within 1 s
        yield* TestClock.adjust("1 second")
        assert.isTrue(Option.isSome(yield* Fiber.poll(fiber)))
      })))

  it.effect("leastBusy takes the lowest active/capacity", () =>
    withPools([Pool.make("p", [w("a", 2), w("b", 4)], { algorithm: "leastBusy" })], (pools) =>
      Effect.scoped(Effect.gen(function*() {
        const ids: Array<string> = []
        for (let i = 0; i < 6; i++) ids.push(idOf(yield* pools.acquire("p")))
        // a: 0/2, b: 0/4 → a (tie, pool order); then b (1/2 vs 0/4); b (0.5 vs 0.25); a/b ...
        assert.deepStrictEqual(ids, ["a", "b", "b", "a", "b", "b"])
      }))))

  it.effect("failover tries each pool once in order, then waits on the first one only", () =>
    withPools(
      [Pool.make("primary", [w("p1")]), Pool.make("backup", [w("b1")])],
      (pools) =>
        Effect.gen(function*() {
          const algorithm = Algo.failover({ pools: ["primary", "backup"] })
          const first = yield* pools.acquireRaw({ pool: "primary", algorithm })
          const second = yield* pools.acquireRaw({ pool: "primary", algorithm })
          assert.deepStrictEqual([first.pool, second.pool], ["primary", "backup"])
          const third = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire({ pool: "primary", algorithm }), (l) => l.pool)))
          yield* settle
          // a slot on the backup does not help: the fallback waits on the primary
          yield* second.releaseNow
          yield* settle
          assert.isTrue(Option.isNone(yield* Fiber.poll(third)))
          yield* first.releaseNow
          assert.strictEqual(yield* Fiber.join(third), "primary")
          const missing = yield* Effect.flip(
            Effect.scoped(pools.acquire({ pool: "primary", algorithm: Algo.failover({ pools: ["nope"] }) }))
          )
          assert.strictEqual(missing._tag, "PoolNotFound")
        })
    ))

  it.effect("sticky prefers the resource this pipeline used last", () =>
    withPools([Pool.make("p", [w("a", 4), w("b", 4)], { algorithm: "sticky" })], (pools) =>
      Effect.gen(function*() {
        const p1: Pool.Holder = { taskName: "t", pipelineId: "pipe-1" }
        const p2: Pool.Holder = { taskName: "t", pipelineId: "pipe-2" }
        yield* Effect.scoped(pools.acquire({ id: "b" }, p1))
        const again = yield* Effect.scoped(Effect.map(pools.acquire({}, p1), idOf))
        const other = yield* Effect.scoped(Effect.map(pools.acquire({}, p2), idOf))
        assert.strictEqual(again, "b")
        assert.strictEqual(other, "a")
      })))

  it.effect("sticky memory is bounded: the least recently leased pipelines are forgotten, recent ones kept", () =>
    withPools([Pool.make("p", [w("a", 4), w("b", 4)], { algorithm: "sticky" })], (pools) =>
      Effect.gen(function*() {
        const holder = (pipelineId: string): Pool.Holder => ({ taskName: "t", pipelineId })
        yield* Effect.scoped(pools.acquire({ id: "b" }, holder("old")))
        // far more pipelines than the pool remembers (an endless run)
        for (let i = 0; i < 20_000; i++) yield* Effect.scoped(pools.acquire({ id: "a" }, holder(`p${i}`)))
        yield* Effect.scoped(pools.acquire({ id: "b" }, holder("recent")))
        // forgotten: the fallback takes the first free resource; remembered: back to "b"
        assert.strictEqual(yield* Effect.scoped(Effect.map(pools.acquire({}, holder("old")), idOf)), "a")
        assert.strictEqual(yield* Effect.scoped(Effect.map(pools.acquire({}, holder("recent")), idOf)), "b")
      })))

  it.effect("quotaAware orders by remaining declared quota and never refuses", () =>
    withPools(
      [Pool.make("p", [
        w("small", 4, { quota: { tokens: 1000 } }),
        w("big", 4, { quota: { tokens: 5000 } }),
        w("none", 4)
      ], { algorithm: { name: "quotaAware", metric: "tokens", reserve: 0.05 } })],
      (pools) =>
        Effect.gen(function*() {
          const use = (tokens: number) =>
            Effect.scoped(Effect.flatMap(pools.acquire("p"), (l) => Effect.as(l.report({ ok: true, usage: { tokens } }), idOf(l))))
          assert.strictEqual(yield* use(4200), "big") // big: 800 left, small: 1000
          assert.strictEqual(yield* use(960), "small") // small: 40 left (4% < reserve)
          assert.strictEqual(yield* use(790), "big") // big: 10 left (0.2%), small: 40 — both below reserve
          // both exhausted: still leased (a preference, never a refusal); the undeclared one comes last
          assert.strictEqual(yield* use(100), "small")
          assert.strictEqual(yield* use(0), "big")
        })
    ))

  it.effect("immediate fails at once with ResourceUnavailable when nothing is free", () =>
    withPools([Pool.make("p", [w("a")], { algorithm: Algo.immediate() })], (pools) =>
      Effect.gen(function*() {
        const held = yield* pools.acquireRaw("p")
        const err = yield* Effect.flip(Effect.scoped(pools.acquire("p")))
        assert.strictEqual(err._tag, "ResourceUnavailable")
        assert.strictEqual((yield* pools.stats("p")).waiting, 0)
        yield* held.releaseNow
      })))

  it.effect("wait(timeout) fails with AcquireTimeout while blocked", () =>
    withPools([Pool.make("p", [w("a")], { algorithm: Algo.wait({ timeout: "3 seconds" }) })], (pools) =>
      Effect.gen(function*() {
        const held = yield* pools.acquireRaw("p")
        const fiber = yield* Effect.fork(Effect.scoped(pools.acquire("p")))
        yield* TestClock.adjust("3 seconds")
        const err = yield* Effect.flip(Fiber.join(fiber))
        assert.strictEqual(err._tag, "AcquireTimeout")
        if (err._tag === "AcquireTimeout") assert.strictEqual(err.timeoutMs, 3000)
        yield* held.releaseNow
        assert.strictEqual((yield* pools.stats("p")).active, 0)
      })))

  it.effect("a user algorithm that takes two slots keeps one: the other is given back", () =>
    withPools([Pool.make("p", [w("a"), w("b")])], (pools) =>
      Effect.gen(function*() {
        const greedy: Algo.AcquireAlgorithm = {
          _tag: "AcquireAlgorithm",
          name: "greedy",
          fingerprint: () => ({ name: "greedy" }),
          acquire: (ops) =>
            Effect.gen(function*() {
              const first = yield* ops.tryTake()
              yield* ops.tryTake()
              return Option.getOrThrow(first)
            })
        }
        yield* Effect.scoped(Effect.gen(function*() {
          const lease = yield* pools.acquire({ pool: "p", algorithm: greedy })
          assert.strictEqual(lease.resource.id, "a")
          assert.deepStrictEqual((yield* pools.snapshot("p")).map((s) => s.active), [1, 0])
        }))
        assert.strictEqual((yield* pools.stats("p")).active, 0)
      })))
})
