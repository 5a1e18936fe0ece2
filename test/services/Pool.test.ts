import { assert, describe, it, expect } from "@effect/vitest"
import { Cause, Chunk, Duration, Effect, Exit, Fiber, Option, Queue, Scope, Stream, TestClock } from "effect"
import { Data } from "effect"
import type { Lease } from "../../src/domain/Lease.js"
import * as Resource from "../../src/domain/Resource.js"
import { maskSecrets } from "../../src/domain/internal/resource.js"
import * as Pool from "../../src/services/Pool.js"
import { RetryableError } from "../../src/domain/Errors.js"

class BadCredentials extends Data.TaggedError("BadCredentials")<{ readonly message: string }> {}

/** Lets forked fibers run until they block. */
const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })

const worker = (id: string, capacity = 1, extra: Resource.ResourceOptions = {}) =>
  Resource.make("worker", { id, capacity, ...extra })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pool.PoolsService) => Effect.Effect<A, E, Scope.Scope>,
  options?: Pool.PoolsOptions
) => Effect.scoped(Effect.flatMap(Pool.makePools(configs, options), f))

const activeOf = (pools: Pool.PoolsService, pool: string) =>
  Effect.map(pools.snapshot(pool), (s) => Object.fromEntries(s.map((r) => [r.id, r.active])))

describe("Resource", () => {
  it("generates a deterministic id without secrets and masks secrets in spec at any depth", () => {
    const a = Resource.make("llm", { options: { apiKey: "sk-1", nested: { Authorization: "Bearer x", url: "u" } } })
    const b = Resource.make("llm", { options: { apiKey: "sk-2", nested: { Authorization: "Bearer y", url: "u" } } })
    assert.strictEqual(a.id, b.id)
    assert.match(a.id, /^llm-[0-9a-f]{8}$/)
    assert.isTrue(a.generatedId)
    const spec = Resource.spec(a)
    assert.deepStrictEqual(spec["options"], { apiKey: "***", nested: { Authorization: "***", url: "u" } })
    assert.notInclude(JSON.stringify(spec), "sk-1")
    assert.deepStrictEqual(
      maskSecrets({ list: [{ client_secret: 1, PASSWORD: "p", accessToken: "t", keep: 2 }] }),
      { list: [{ client_secret: "***", PASSWORD: "***", accessToken: "***", keep: 2 }] }
    )
    assert.deepStrictEqual(maskSecrets({ quota: { tokens: 5 }, "x-api-key": "k", keyId: 1 }), {
      quota: { tokens: 5 },
      "x-api-key": "***",
      keyId: 1
    })
  })

  it("looks up selector keys with dot paths and matches selectors", () => {
    const r = Resource.make("llm", { id: "k1", options: { model: "m", quota: { tokens: 10 } }, tags: { tier: "prod" } })
    expect(Resource.lookup(r, "quota.tokens")).toStrictEqual(Option.some(10))
    expect(Resource.lookup(r, "options.model")).toStrictEqual(Option.some("m"))
    expect(Resource.lookup(r, "tags.tier")).toStrictEqual(Option.some("prod"))
    expect(Resource.lookup(r, "id")).toStrictEqual(Option.some("k1"))
    assert.isTrue(Option.isNone(Resource.lookup(r, "quota.cost")))
    assert.isTrue(Resource.matches({ kind: "llm", tags: { tier: "prod" }, options: { "quota.tokens": 10 } }, r))
    assert.isFalse(Resource.matches({ options: { "quota.tokens": 11 } }, r))
    assert.isFalse(Resource.matches({ id: "k2" }, r))
    assert.isFalse(Resource.matches({ where: (i) => i.capacity > 1 }, r))
    assert.isTrue(Resource.matches({ options: { quota: { tokens: 10 } } }, r))
  })

  it("health: degrade at degradeAfter, dead at deadAfter, cooldown keeps the count, success revives", () => {
    const p = { degradeAfter: 3, deadAfter: 8, cooldownMs: 1000 }
    let h = Resource.initialHealth
    const transitions: Array<string | undefined> = []
    for (let i = 0; i < 3; i++) {
      const s = Resource.onFailure(h, p, 0)
      h = s.health
      transitions.push(s.transition)
    }
    assert.deepStrictEqual(transitions, [undefined, undefined, "degraded"])
    assert.isFalse(Resource.inRotation(h, 999))
    assert.isTrue(Resource.inRotation(h, 1000))
    const ended = Resource.onCooldownEnd(h, 1000)
    assert.strictEqual(ended.transition, "cooldown_ended")
    assert.strictEqual(ended.health.consecutiveFailures, 3)
    h = ended.health
    for (let i = 0; i < 5; i++) h = Resource.onFailure(h, p, 2000).health
    assert.strictEqual(h.state, "dead")
    assert.isFalse(Resource.inRotation(h, 1e12))
    const revived = Resource.onSuccess(h)
    assert.strictEqual(revived.transition, "revived")
    assert.deepStrictEqual(revived.health, Resource.initialHealth)
    assert.strictEqual(Resource.onSuccess(Resource.onRevoke(h).health).health.state, "revoked")
  })

  it("validates capacity and thresholds", () => {
    const issues = Resource.validate(Resource.make("x", { capacity: 0, degradeAfter: 5, deadAfter: 2 }), "r")
    assert.deepStrictEqual(issues.map((i) => i.path), ["r.capacity", "r.deadAfter"])
  })

  it("declared quota windows: kept in meta.quotas with defaults, validated, not part of a generated id", () => {
    const plain = Resource.make("x", { capacity: 2 })
    const limited = Resource.make("x", { capacity: 2, quotas: [{ limit: 20, window: "5 seconds" }, { metric: "tokens", limit: 1000, window: "1 minute", estimate: 50 }] })
    assert.strictEqual(limited.id, plain.id)
    assert.deepStrictEqual(Resource.quotas(limited), [
      { metric: "requests", limit: 20, windowMs: 5_000 },
      { metric: "tokens", limit: 1000, windowMs: 60_000, estimate: 50 }
    ])
    assert.deepStrictEqual(Resource.quotas(plain), [])
    const bad = Resource.make("x", {
      quotas: [{ limit: 0, window: "5 seconds" }, { metric: "tokens", limit: 10, window: 0, estimate: 11 }, { limit: 1, window: "1 second" }]
    })
    assert.deepStrictEqual(Resource.validate(bad, "r").map((i) => i.path), [
      "r.quotas[0].limit",
      "r.quotas[1].window",
      "r.quotas[1].estimate",
      "r.quotas[2].metric"
    ])
  })

  it.effect("local pools refuse a resource that declares quotas (they would not enforce them), naming the field", () =>
    Effect.gen(function*() {
      const cfg = [Pool.make("llm", [worker("a"), worker("b", 1, { quotas: [{ limit: 5, window: "1 minute" }] })])]
      const refused = yield* Effect.flip(Effect.scoped(Pool.makePools(cfg)))
      assert.deepStrictEqual(refused.issues.map((i) => i.path), ["pools.llm.resources[1].quotas"])
      assert.match(refused.issues[0]!.message, /--engine cluster/)
      // the global pools build on the same core with the quotas accepted
      yield* Effect.scoped(Pool.makePools(cfg, { globalQuotas: true }))
    }))
})

describe("Pools: leases", () => {
  it.effect("a scoped lease is released on success, failure and interruption", () =>
    withPools([Pool.make("p", [worker("a", 2)])], (pools) =>
      Effect.gen(function*() {
        yield* Effect.scoped(Effect.flatMap(pools.acquire("p"), () => Effect.void))
        assert.deepStrictEqual(yield* activeOf(pools, "p"), { a: 0 })
        const failed = yield* Effect.exit(Effect.scoped(Effect.flatMap(pools.acquire("p"), () => Effect.fail("boom"))))
        assert.isTrue(Exit.isFailure(failed))
        assert.deepStrictEqual(yield* activeOf(pools, "p"), { a: 0 })
        const fiber = yield* Effect.fork(Effect.scoped(Effect.flatMap(pools.acquire("p"), () => Effect.never)))
        yield* settle
        assert.deepStrictEqual(yield* activeOf(pools, "p"), { a: 1 })
        yield* Fiber.interrupt(fiber)
        assert.deepStrictEqual(yield* activeOf(pools, "p"), { a: 0 })
        const stats = yield* pools.stats("p")
        assert.strictEqual(stats.leasesTotal, 3)
      })))

  it.effect("capacity is never exceeded and a release wakes the first waiter (FIFO)", () =>
    withPools([Pool.make("p", [worker("a", 2)])], (pools) =>
      Effect.gen(function*() {
        const order: Array<number> = []
        const fibers = yield* Effect.forEach([0, 1, 2, 3, 4], (i) =>
          Effect.fork(Effect.scoped(Effect.gen(function*() {
            yield* pools.acquire("p")
            order.push(i)
            yield* Effect.sleep(Duration.seconds(1))
          }))))
        yield* settle
        assert.deepStrictEqual(order, [0, 1])
        assert.strictEqual((yield* pools.stats("p")).waiting, 3)
        assert.strictEqual((yield* pools.stats("p")).active, 2)
        yield* TestClock.adjust("1 second")
        yield* settle
        assert.deepStrictEqual(order, [0, 1, 2, 3])
        yield* TestClock.adjust("2 seconds")
        yield* Fiber.joinAll(fibers)
        assert.deepStrictEqual(order, [0, 1, 2, 3, 4])
        const stats = yield* pools.stats("p")
        assert.strictEqual(stats.active, 0)
        assert.strictEqual(stats.waiting, 0)
        assert.strictEqual(stats.waitsTotal, 3)
        assert.strictEqual(stats.waitMsMax, 2000)
        assert.strictEqual(stats.waitMsP50, 1000)
      })))

  it.effect("FIFO among waiters whose selectors match: a freed slot skips waiters it cannot serve", () =>
    withPools([Pool.make("p", [worker("a"), worker("b")])], (pools) =>
      Effect.gen(function*() {
        const a = yield* pools.acquireRaw({ id: "a" })
        const b = yield* pools.acquireRaw({ id: "b" })
        const wantsA = yield* Effect.fork(Effect.scoped(Effect.as(pools.acquire({ id: "a" }), "A")))
        yield* settle
        const wantsAny = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire({}), (l) => l.resource.id)))
        yield* settle
        yield* b.releaseNow
        assert.strictEqual(yield* Fiber.join(wantsAny), "b")
        assert.isTrue(Option.isNone(yield* Fiber.poll(wantsA)))
        yield* a.releaseNow
        assert.strictEqual(yield* Fiber.join(wantsA), "A")
      })))

  it.effect("an acquire timeout fires while blocked and leaves no reservation behind", () =>
    withPools([Pool.make("p", [worker("a")])], (pools) =>
      Effect.gen(function*() {
        const held = yield* pools.acquireRaw("p")
        const fiber = yield* Effect.fork(Effect.scoped(pools.acquire({ pool: "p", timeout: "2 seconds" })))
        yield* settle
        assert.strictEqual((yield* pools.stats("p")).waiting, 1)
        yield* TestClock.adjust("2 seconds")
        const exit = yield* Fiber.await(fiber)
        assert.isTrue(Exit.isFailure(exit))
        if (Exit.isFailure(exit)) {
          const e = Option.getOrThrow(Exit.causeOption(exit).pipe(Option.flatMap((c) => Option.fromNullable(c)))) as never
          void e
        }
        const err = yield* Effect.flip(Effect.scoped(pools.acquire({ pool: "p", timeout: 0 })))
        assert.strictEqual(err._tag, "AcquireTimeout")
        assert.strictEqual((yield* pools.stats("p")).waiting, 0)
        yield* held.releaseNow
        // the slot is free again: nobody kept a reservation
        const lease = yield* pools.acquireRaw({ pool: "p", algorithm: "immediate" })
        assert.strictEqual(lease.resource.id, "a")
      })))

  it.effect("a selector no resource can match waits until a timeout; immediate fails at once", () =>
    withPools([Pool.make("p", [worker("a")])], (pools) =>
      Effect.gen(function*() {
        const fiber = yield* Effect.fork(Effect.scoped(pools.acquire({ pool: "p", kind: "gpu", timeout: "1 minute" })))
        yield* TestClock.adjust("59 seconds")
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        yield* TestClock.adjust("1 second")
        const err = yield* Effect.flip(Fiber.join(fiber))
        assert.strictEqual(err._tag, "AcquireTimeout")
        const now = yield* Effect.flip(Effect.scoped(pools.acquire({ pool: "p", kind: "gpu", algorithm: "immediate" })))
        assert.strictEqual(now._tag, "ResourceUnavailable")
      })))

  it.effect("selects by id, kind, tags, options dot paths and where", () =>
    withPools(
      [Pool.make("p", [
        Resource.make("llm", { id: "small", options: { model: "m1", limits: { ctx: 8000 } }, tags: { tier: "dev" } }),
        Resource.make("llm", { id: "big", options: { model: "m2", limits: { ctx: 32000 } }, tags: { tier: "prod" } }),
        Resource.make("gpu", { id: "g" })
      ])],
      (pools) =>
        Effect.gen(function*() {
          const pick = (o: Parameters<typeof pools.acquire>[0]) =>
            Effect.scoped(Effect.map(pools.acquire(o), (l) => l.resource.id))
          assert.strictEqual(yield* pick({ kind: "gpu" }), "g")
          assert.strictEqual(yield* pick({ tags: { tier: "prod" } }), "big")
          assert.strictEqual(yield* pick({ options: { "limits.ctx": 8000 } }), "small")
          assert.strictEqual(yield* pick({ options: { model: "m2" } }), "big")
          assert.strictEqual(yield* pick({ where: (r) => (r.options["limits"] as any)?.ctx >= 32000 }), "big")
          assert.strictEqual(yield* pick({ id: "small" }), "small")
        })
    ))

  it.effect("unknown pools fail with PoolNotFound listing known pools", () =>
    withPools([Pool.make("p", [worker("a")])], (pools) =>
      Effect.gen(function*() {
        const err = yield* Effect.flip(Effect.scoped(pools.acquire("nope")))
        assert.strictEqual(err._tag, "PoolNotFound")
        if (err._tag === "PoolNotFound") assert.deepStrictEqual(err.known, ["p"])
        // with exactly one pool, an acquire naming none uses it
        const id = yield* Effect.scoped(Effect.map(pools.acquire(), (l) => l.resource.id))
        assert.strictEqual(id, "a")
      })))

  it.effect("the escape hatch: releaseNow is idempotent; reclaim releases, counts and reports leaks", () =>
    withPools([Pool.make("p", [worker("a", 3)])], (pools) =>
      Effect.gen(function*() {
        const events = yield* pools.events({ kinds: ["lease.leaked"] })
        const holder: Pool.Holder = { taskName: "t", pipelineId: "pl", owner: "attempt-1" }
        const l1 = yield* pools.acquireRaw("p", holder)
        const l2 = yield* pools.acquireRaw("p", holder)
        yield* l1.releaseNow
        yield* l1.releaseNow
        assert.strictEqual((yield* pools.stats("p")).active, 1)
        assert.deepStrictEqual((yield* pools.heldBy("attempt-1")).map((l) => l.id), [l2.id])
        yield* TestClock.adjust("3 seconds")
        const leaked = yield* pools.reclaim("attempt-1")
        assert.deepStrictEqual(leaked.map((l) => [l.leaseId, l.taskName, l.heldMs]), [[l2.id, "t", 3000]])
        const stats = yield* pools.stats("p")
        assert.strictEqual(stats.active, 0)
        assert.strictEqual(stats.leakedTotal, 1)
        const e = yield* Queue.take(events)
        assert.strictEqual(e.kind, "lease.leaked")
        assert.strictEqual(e.data["leaseId"], l2.id)
        // a later releaseNow by the forgetful task does nothing
        yield* l2.releaseNow
        assert.strictEqual((yield* pools.stats("p")).active, 0)
        assert.deepStrictEqual(yield* pools.reclaim("attempt-1"), [])
      })))

  it.effect("releaseAll gives back scoped and raw leases without counting leaks", () =>
    withPools([Pool.make("p", [worker("a", 3)])], (pools) =>
      Effect.gen(function*() {
        const holder: Pool.Holder = { taskName: "t", pipelineId: "pl", owner: "o" }
        yield* pools.acquireRaw("p", holder)
        yield* Effect.scoped(Effect.gen(function*() {
          yield* pools.acquire("p", holder)
          assert.strictEqual((yield* pools.heldBy("o")).length, 2)
          assert.strictEqual(yield* pools.releaseAll("o"), 2)
          assert.strictEqual((yield* pools.stats("p")).active, 0)
        }))
        assert.strictEqual((yield* pools.stats("p")).active, 0)
        assert.strictEqual((yield* pools.stats("p")).leakedTotal, 0)
      })))

  it.effect("lease fields: client, resource, options, taskName, heldMs from the Clock", () =>
    withPools([Pool.make("p", [worker("a", 1, { options: { url: "u" } })])], (pools) =>
      Effect.scoped(Effect.gen(function*() {
        const lease = yield* pools.acquire("p", { taskName: "ask", pipelineId: "x" })
        assert.strictEqual(lease.taskName, "ask")
        assert.strictEqual(lease.pool, "p")
        assert.deepStrictEqual(lease.options, { url: "u" })
        assert.strictEqual(lease.client, undefined)
        yield* TestClock.adjust("1500 millis")
        assert.strictEqual(yield* lease.heldMs, 1500)
        const snap = yield* pools.snapshot("p")
        assert.deepStrictEqual(snap[0]?.leases, [lease.id])
      }))))
})

describe("Pools: health", () => {
  const failN = (lease: Lease, n: number) =>
    Effect.forEach(Array.from({ length: n }), () => lease.report({ ok: false, error: new Error("503") }), {
      discard: true
    })

  it.effect("ok:false degrades after 3, out of rotation for the cooldown, counter kept; dead after 8; ok:true revives", () =>
    withPools([Pool.make("p", [worker("a", 2)])], (pools) =>
      Effect.gen(function*() {
        const kinds: Array<string> = []
        yield* pools.listen((e) => {
          kinds.push(e.kind)
        })
        const lease = yield* pools.acquireRaw("p")
        yield* failN(lease, 3)
        let snap = (yield* pools.snapshot("p"))[0]!
        assert.strictEqual(snap.state, "degraded")
        assert.strictEqual(snap.lastError, "503")
        const busy = yield* Effect.flip(Effect.scoped(pools.acquire({ pool: "p", algorithm: "immediate" })))
        assert.strictEqual(busy._tag, "ResourceUnavailable")
        yield* TestClock.adjust("30 seconds")
        snap = (yield* pools.snapshot("p"))[0]!
        assert.strictEqual(snap.state, "ready")
        assert.strictEqual(snap.consecutiveFailures, 3)
        // one more failure degrades again at once (the count was kept)
        yield* failN(lease, 1)
        assert.strictEqual((yield* pools.snapshot("p"))[0]!.state, "degraded")
        yield* failN(lease, 4)
        assert.strictEqual((yield* pools.snapshot("p"))[0]!.state, "dead")
        yield* TestClock.adjust("1 hour")
        assert.strictEqual((yield* pools.snapshot("p"))[0]!.state, "dead")
        const stats = yield* pools.stats("p")
        assert.strictEqual(stats.dead, 1)
        assert.strictEqual(stats.failedTotal, 8)
        yield* lease.report({ ok: true })
        snap = (yield* pools.snapshot("p"))[0]!
        assert.strictEqual(snap.state, "ready")
        assert.strictEqual(snap.consecutiveFailures, 0)
        assert.deepStrictEqual(kinds, [
          "resource.degraded",
          "resource.cooldown_ended",
          "resource.degraded",
          "resource.dead",
          "resource.revived"
        ])
      })))

  it.effect("a waiter that only a cooldown expiry can satisfy is woken when the cooldown ends", () =>
    withPools([Pool.make("p", [worker("a", 1, { cooldown: "10 seconds" })])], (pools) =>
      Effect.gen(function*() {
        const lease = yield* pools.acquireRaw("p")
        yield* failN(lease, 3)
        yield* lease.releaseNow
        const fiber = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("p"), (l) => l.resource.id)))
        yield* settle
        yield* TestClock.adjust("9999 millis")
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        yield* TestClock.adjust("1 millis")
        assert.strictEqual(yield* Fiber.join(fiber), "a")
        assert.strictEqual((yield* pools.stats("p")).waitMsMax, 10_000)
      })))

  it.effect("degrade(reason) takes a healthy resource out for its cooldown without counting a failure", () =>
    withPools([Pool.make("p", [worker("a"), worker("b")])], (pools) =>
      Effect.gen(function*() {
        const events = yield* pools.events({ pool: "p", kinds: ["resource.degraded"] })
        yield* Effect.scoped(Effect.flatMap(pools.acquire({ id: "a" }), (l) => l.degrade("quota exhausted")))
        const e = yield* Queue.take(events)
        assert.strictEqual(e.resourceId, "a")
        assert.strictEqual(e.data["reason"], "quota exhausted")
        const snap = yield* pools.snapshot("p")
        assert.strictEqual(snap[0]!.state, "degraded")
        assert.strictEqual(snap[0]!.consecutiveFailures, 0)
        const id = yield* Effect.scoped(Effect.map(pools.acquire(), (l) => l.resource.id))
        assert.strictEqual(id, "b")
      })))

  it.effect("the factory is called lazily once per resource and its client shared by every lease", () =>
    Effect.gen(function*() {
      let calls = 0
      const r = Resource.make("llm", {
        id: "k",
        capacity: 4,
        factory: (info) => Effect.sync(() => ({ n: ++calls, url: info.options["url"] })),
        options: { url: "http://x" }
      })
      yield* withPools([Pool.make("p", [r])], (pools) =>
        Effect.gen(function*() {
          assert.strictEqual(calls, 0)
          const clients = yield* Effect.forEach(
            [1, 2, 3],
            () => Effect.scoped(Effect.map(pools.acquire("p"), (l) => l.client)),
            { concurrency: 3 }
          )
          assert.strictEqual(calls, 1)
          assert.deepStrictEqual(clients[0], { n: 1, url: "http://x" })
          assert.strictEqual(clients[0], clients[2])
        }))
    }))

  it.effect("a factory failure rejects the acquire, emits factory_failed, degrades, and gets a real retry after cooldown", () =>
    Effect.gen(function*() {
      let calls = 0
      const r = Resource.make("llm", {
        id: "k",
        capacity: 2,
        factory: () =>
          Effect.suspend(() => {
            calls++
            return calls <= 1 ? Effect.fail(new BadCredentials({ message: "bad credentials" })) : Effect.succeed("client")
          })
      })
      yield* withPools([Pool.make("p", [r])], (pools) =>
        Effect.gen(function*() {
          const events = yield* pools.events({ kinds: ["resource.factory_failed", "resource.degraded"] })
          for (let i = 0; i < 3; i++) {
            const err = yield* Effect.flip(Effect.scoped(pools.acquire("p")))
            assert.strictEqual(err._tag, "ResourceUnavailable")
          }
          assert.strictEqual(calls, 1)
          const kinds = Chunk.toReadonlyArray(yield* Queue.takeAll(events)).map((e) => e.kind)
          assert.deepStrictEqual(kinds, ["resource.factory_failed", "resource.degraded"])
          const stats = yield* pools.stats("p")
          assert.strictEqual(stats.active, 0)
          assert.strictEqual(stats.degraded, 1)
          const waiter = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("p"), (l) => l.client)))
          yield* TestClock.adjust("30 seconds")
          assert.strictEqual(yield* Fiber.join(waiter), "client")
          assert.strictEqual(calls, 2)
        }))
    }))

  it.effect("latency EMA and usage counters are accumulated per resource and per pool", () =>
    withPools([Pool.make("p", [worker("a", 2), worker("b")])], (pools) =>
      Effect.gen(function*() {
        yield* Effect.scoped(Effect.flatMap(pools.acquire({ id: "a" }), (l) =>
          Effect.zipRight(
            l.report({ ok: true, latencyMs: 100, usage: { tokens: 10 } }),
            l.report({ ok: true, latencyMs: 200, usage: { tokens: 5, calls: 1 } })
          )))
        yield* Effect.scoped(Effect.flatMap(pools.acquire({ id: "b" }), (l) => l.report({ usage: { tokens: 1 } })))
        const snap = yield* pools.snapshot("p")
        assert.strictEqual(snap[0]!.latencyEmaMs, 0.2 * 200 + 0.8 * 100)
        assert.deepStrictEqual(snap[0]!.usage, { tokens: 15, calls: 1 })
        const stats = yield* pools.stats("p")
        assert.deepStrictEqual(stats.usage, { tokens: 16, calls: 1 })
        assert.strictEqual(stats.okTotal, 3)
        assert.deepStrictEqual((yield* pools.stats("p", { id: "b" })).usage, { tokens: 1 })
        assert.strictEqual((yield* pools.stats("p", { id: "b" })).capacity, 1)
      })))
})

describe("Pools: membership and events", () => {
  it.effect("adding a resource wakes matching waiters; revoked resources never come back", () =>
    withPools([Pool.make("p", [worker("a")], { kind: "worker" })], (pools) =>
      Effect.gen(function*() {
        const seen = yield* pools.events({ pool: "p" })
        const held = yield* pools.acquireRaw("p")
        const waiter = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire({ kind: "worker" }), (l) => l.resource.id)))
        yield* settle
        const info = yield* pools.add("p", { id: "b", tags: { zone: "eu" } })
        assert.strictEqual(info.kind, "worker")
        assert.strictEqual(yield* Fiber.join(waiter), "b")
        assert.isTrue(yield* pools.revoke("p", "a", "key rotated"))
        assert.isFalse(yield* pools.revoke("p", "a"))
        yield* held.releaseNow
        yield* TestClock.adjust("1 hour")
        const err = yield* Effect.flip(Effect.scoped(pools.acquire({ id: "a", algorithm: "immediate" })))
        assert.strictEqual(err._tag, "ResourceUnavailable")
        const stats = yield* pools.stats("p")
        assert.strictEqual(stats.total, 2)
        assert.strictEqual(stats.revoked, 1)
        assert.strictEqual(stats.capacity, 1)
        const handle = yield* pools.get("p")
        assert.deepStrictEqual((yield* handle.resources).map((r) => r.id), ["b"])
        const kinds = Chunk.toReadonlyArray(yield* Queue.takeAll(seen)).map((e) => `${e.kind}:${e.resourceId}`)
        assert.deepStrictEqual(kinds, ["resource.added:b", "resource.revoked:a"])
      })))

  it.effect("duplicate explicit ids are refused; duplicate generated ids are suffixed", () =>
    withPools([Pool.make("p", [Resource.make("w"), Resource.make("w")])], (pools) =>
      Effect.gen(function*() {
        const ids = (yield* pools.snapshot("p")).map((s) => s.id)
        assert.strictEqual(ids[1], `${ids[0]}~2`)
        const err = yield* Effect.flip(pools.add("p", Resource.make("w", { id: ids[0]! })))
        assert.strictEqual(err._tag, "ConfigError")
        const bad = yield* Effect.flip(Effect.scoped(Pool.makePools([Pool.make("q", [Resource.make("w", { capacity: 0 })])])))
        assert.deepStrictEqual(bad.issues.map((i) => i.path), ["pools.q.resources[0].capacity"])
      })))

  it.effect("a task holding a lease that waits longer than deadlockWarn emits acquire.suspected_deadlock", () =>
    withPools(
      [Pool.make("a", [worker("x")], { deadlockWarn: "5 seconds" }), Pool.make("b", [worker("y")])],
      (pools) =>
        Effect.gen(function*() {
          const events = yield* pools.events({ kinds: ["acquire.suspected_deadlock"] })
          const blocker = yield* pools.acquireRaw("b")
          const holder: Pool.Holder = { taskName: "t", pipelineId: "p1", heldPools: () => ["a"] }
          const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
            yield* pools.acquire("a", holder)
            yield* pools.acquire("b", holder)
          })))
          yield* TestClock.adjust("4999 millis")
          assert.strictEqual(yield* Queue.size(events), 0)
          yield* TestClock.adjust("1 millis")
          const e = yield* Queue.take(events)
          assert.strictEqual(e.pool, "b")
          assert.deepStrictEqual(e.data["heldPools"], ["a"])
          assert.strictEqual(e.data["taskName"], "t")
          yield* blocker.releaseNow
          yield* Fiber.join(fiber)
          // without held pools nothing is reported
          const b2 = yield* pools.acquireRaw("b")
          const f2 = yield* Effect.fork(Effect.scoped(pools.acquire("b")))
          yield* TestClock.adjust("1 minute")
          assert.strictEqual(yield* Queue.size(events), 0)
          yield* b2.releaseNow
          yield* Fiber.join(f2)
        })
    ))

  it.effect("without heldPools, the pools of the owner's unreleased leases count as held (the runner's attempts)", () =>
    withPools(
      [Pool.make("a", [worker("x")], { deadlockWarn: "5 seconds" }), Pool.make("b", [worker("y")])],
      (pools) =>
        Effect.gen(function*() {
          const events = yield* pools.events({ kinds: ["acquire.suspected_deadlock"] })
          const blocker = yield* pools.acquireRaw("b")
          const holder: Pool.Holder = { taskName: "t", pipelineId: "p1", owner: "p1:0:1" }
          // holding "a", then waiting on "b": warned after a's deadlockWarn
          const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
            yield* pools.acquire("a", holder)
            yield* pools.acquire("b", holder)
          })))
          yield* TestClock.adjust("5 seconds")
          const e = yield* Queue.take(events)
          assert.deepStrictEqual(e.data["heldPools"], ["a"])
          yield* blocker.releaseNow
          yield* Fiber.join(fiber)
          // the same owner after releasing everything holds nothing: no warning
          const b2 = yield* pools.acquireRaw("b")
          const f2 = yield* Effect.fork(Effect.scoped(pools.acquire("b", holder)))
          yield* TestClock.adjust("1 minute")
          assert.strictEqual(yield* Queue.size(events), 0)
          yield* b2.releaseNow
          yield* Fiber.join(f2)
        })
    ))

  it.effect("subscribe streams events; onEvent callbacks of the pool and of the service both see them", () =>
    Effect.gen(function*() {
      const perPool: Array<string> = []
      const global: Array<string> = []
      yield* withPools(
        [Pool.make("p", [worker("a")], { onEvent: (e) => Effect.sync(() => perPool.push(e.kind)) })],
        (pools) =>
          Effect.gen(function*() {
            const collected = yield* Effect.fork(Stream.runCollect(Stream.take(pools.subscribe({ pool: "p" }), 2)))
            yield* settle
            yield* pools.add("p", worker("b"))
            yield* pools.revoke("p", "b")
            const got = Chunk.toReadonlyArray(yield* Fiber.join(collected))
            assert.deepStrictEqual(got.map((e) => e.kind), ["resource.added", "resource.revoked"])
          }),
        { onEvent: (e) => void global.push(e.kind) }
      )
      assert.deepStrictEqual(perPool, ["resource.added", "resource.revoked"])
      assert.deepStrictEqual(global, ["resource.added", "resource.revoked"])
    }))
})

describe("Pools: algorithm choice", () => {
  it.effect("per-call beats per-task beats per-pool", () =>
    withPools([Pool.make("p", [worker("a")], { algorithm: "immediate" })], (pools) =>
      Effect.gen(function*() {
        yield* pools.acquireRaw("p")
        // pool default: immediate
        assert.strictEqual((yield* Effect.flip(Effect.scoped(pools.acquire("p"))))._tag, "ResourceUnavailable")
        // task default: wait with a timeout
        const task: Pool.Holder = { taskName: "t", pipelineId: "x", defaultAlgorithm: { name: "wait", timeout: "1 second" } }
        const f = yield* Effect.fork(Effect.scoped(pools.acquire("p", task)))
        yield* TestClock.adjust("1 second")
        assert.strictEqual((yield* Effect.flip(Fiber.join(f)))._tag, "AcquireTimeout")
        // per call: immediate again, over the task's wait
        const now = yield* Effect.flip(Effect.scoped(pools.acquire({ pool: "p", algorithm: "immediate" }, task)))
        assert.strictEqual(now._tag, "ResourceUnavailable")
        // a bad per-call algorithm is a ConfigError
        const bad = yield* Effect.flip(Effect.scoped(pools.acquire({ pool: "p", algorithm: "bakoff" })))
        assert.strictEqual(bad._tag, "ConfigError")
      })))
})

describe("Throttling by Retry-After (case C5)", () => {
  const rateLimited = (retryAfterMs: number) =>
    new RetryableError({ message: "429 Too Many Requests", errorClass: "rate_limit", retryAfterMs })

  it.effect("a rate-limit report with Retry-After takes the resource out of rotation until then, without degrading it", () =>
    withPools([Pool.make("keys", [worker("a", 4)])], (pools) =>
      Effect.gen(function*() {
        // Four concurrent calls all answered 429 (more than degradeAfter = 3).
        const leases = yield* Effect.all(Array.from({ length: 4 }, () => pools.acquireRaw("keys")))
        for (const lease of leases) {
          yield* lease.report({ ok: false, error: rateLimited(2000) })
          yield* lease.releaseNow
        }
        const snap = (yield* pools.snapshot("keys"))[0]!
        assert.strictEqual(snap.state, "ready")
        assert.strictEqual(snap.consecutiveFailures, 0)
        assert.strictEqual(snap.throttledUntil, 2000)
        // A waiter is not served inside the window, and is woken when it ends.
        const waiter = yield* Effect.fork(Effect.scoped(Effect.flatMap(pools.acquire("keys"), (l) => Effect.succeed(l.resource.id))))
        yield* settle
        yield* TestClock.adjust("1999 millis")
        yield* settle
        assert.isNull(waiter.unsafePoll())
        yield* TestClock.adjust("1 millis")
        assert.strictEqual(yield* Fiber.join(waiter), "a")
      })))

  it.effect("after the window only one probe lease at a time, until a successful report", () =>
    withPools([Pool.make("keys", [worker("a", 4)])], (pools) =>
      Effect.gen(function*() {
        const first = yield* pools.acquireRaw("keys")
        yield* first.report({ ok: false, error: rateLimited(1000) })
        yield* first.releaseNow
        yield* TestClock.adjust("1 second")
        const probe = yield* pools.acquireRaw("keys")
        const second = yield* Effect.fork(pools.acquireRaw("keys"))
        yield* settle
        assert.isNull(second.unsafePoll(), "a second lease waits while the probe is out")
        yield* probe.report({ ok: true })
        const lease2 = yield* Fiber.join(second)
        const lease3 = yield* pools.acquireRaw("keys")
        assert.deepStrictEqual((yield* activeOf(pools, "keys"))["a"], 3)
        yield* Effect.all([probe.releaseNow, lease2.releaseNow, lease3.releaseNow])
      })))

  it.effect("a throttled key is left alone while another key serves", () =>
    withPools([Pool.make("keys", [worker("a", 2), worker("b", 2)])], (pools) =>
      Effect.gen(function*() {
        const a = yield* pools.acquireRaw({ pool: "keys", id: "a" })
        yield* a.report({ ok: false, error: rateLimited(5000) })
        yield* a.releaseNow
        const served: Array<string> = []
        for (let i = 0; i < 6; i++) {
          const lease = yield* pools.acquireRaw("keys")
          served.push(lease.resource.id)
          yield* lease.report({ ok: true })
          yield* lease.releaseNow
        }
        assert.deepStrictEqual(served, ["b", "b", "b", "b", "b", "b"])
        const stats = yield* pools.stats("keys")
        assert.strictEqual(stats.degraded + stats.dead, 0)
      })))
})

describe("No wait on resources that cannot come back", () => {
  it.effect("a waiter whose every matching resource dies fails with ResourceUnavailable instead of hanging", () =>
    withPools([Pool.make("keys", [worker("a", 1, { deadAfter: 2, degradeAfter: 1 })])], (pools) =>
      Effect.gen(function*() {
        const holder = yield* pools.acquireRaw("keys")
        const waiter = yield* Effect.fork(Effect.scoped(pools.acquire("keys")))
        yield* settle
        assert.isNull(waiter.unsafePoll())
        // Two failures: degraded, then dead.
        yield* holder.report({ ok: false, error: new BadCredentials({ message: "401" }) })
        yield* holder.report({ ok: false, error: new BadCredentials({ message: "401" }) })
        const exit = yield* Fiber.await(waiter)
        assert.isTrue(Exit.isFailure(exit))
        if (Exit.isFailure(exit)) assert.strictEqual(Option.getOrThrow(Cause.failureOption(exit.cause))._tag, "ResourceUnavailable")
        // A new acquire fails at once too.
        const again = yield* Effect.flip(Effect.scoped(pools.acquire("keys")))
        assert.strictEqual(again._tag, "ResourceUnavailable")
        yield* holder.releaseNow
      })))

  it.effect("revoked resources are not hopeless: their waiters wait for an added resource", () =>
    withPools([Pool.make("keys", [worker("a", 1)])], (pools) =>
      Effect.gen(function*() {
        const a = yield* pools.acquireRaw("keys")
        const waiter = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("keys"), (l) => l.resource.id)))
        yield* settle
        yield* pools.revoke("keys", "a", "retired")
        yield* settle
        assert.isNull(waiter.unsafePoll())
        yield* pools.add("keys", worker("c", 1))
        assert.strictEqual(yield* Fiber.join(waiter), "c")
        yield* a.releaseNow
      })))
})
