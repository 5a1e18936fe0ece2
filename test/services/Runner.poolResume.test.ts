/**
 * Issue 18 §4: pool state that survives a resume. Each "process" below is a fresh pools service
 * (nothing in memory carried over) over one shared store, as `assay resume` after a crash.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { Effect, Fiber, Layer, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as AcquireAlgorithm from "../../src/services/AcquireAlgorithm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Report from "../../src/services/Report.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import * as Chat from "../../src/tasks/Chat.js"
import * as Sim from "../support/provider-sim.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })

/** One process: a fresh pools service and runner over the shared store. */
const proc = (store: StoreService, pools: ReadonlyArray<Pool.PoolConfig>, concurrency = 2) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency, heartbeat: "1 hour", staleAfter: "3 hours" }),
    Layer.merge(Layer.succeed(Store, store), Pool.layer(pools))
  )

const twoKeys = (options: { readonly a?: Record<string, unknown> } = {}) => [
  Pool.make("llm", [
    Resource.make("llm", { id: "key-a", capacity: 1, options: { baseUrl: "https://a.example/v1", apiKey: "sk-a", ...options.a } }),
    Resource.make("llm", { id: "key-b", capacity: 1, options: { baseUrl: "https://b.example/v1", apiKey: "sk-b" } })
  ])
]

interface Call {
  readonly key: string
  readonly at: number
}

/**
 * A call of 1 s; key-a answers 429 with Retry-After 60 s while `server.aThrottles`. Every
 * lease taken is logged with the clock.
 */
const askOf = (calls: Array<Call>, server: { aThrottles: boolean }) =>
  Task.make("ask", { resource: "llm", retry: { maxAttempts: 10, base: "10 millis", cap: "10 millis", jitter: "none" } }, (n: number, ctx) =>
    Effect.gen(function*() {
      const lease = yield* ctx.acquire()
      const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
      calls.push({ key: lease.resource.id, at: now })
      if (lease.resource.id === "key-a" && server.aThrottles) {
        const error = new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: 60_000 })
        yield* lease.report({ ok: false, error })
        return yield* Effect.fail(error)
      }
      yield* Effect.sleep("1 second")
      yield* lease.report({ ok: true, usage: { tokens: 10 } })
      return n
    }))

const resumeOf = (health: unknown): Record<string, unknown> =>
  (health as Record<string, unknown>)["resume"] as Record<string, unknown>

describe("pool state across a resume (issue 18 §4)", () => {
  it.effect.each(["memory", "sqlite"] as const)("%s: a key throttled for 60 s, run interrupted and resumed 10 s later: nothing reaches it before second 60; the other key keeps working", (kind) =>
    Effect.gen(function*() {
      const store = yield* Store
      const calls: Array<Call> = []
      const server = { aThrottles: true }
      const template = Pipeline.make("storm", askOf(calls, server))
      const specs = template.map(Array.from({ length: 80 }, (_, i) => i))
      // process 1: key-a answers 429 (Retry-After 60 s) at t=0; interrupted at t=2 s
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs))
        yield* settle
        yield* TestClock.adjust("1 second")
        yield* settle
        // the throttle reached the store within a second (heartbeat is 1 hour): a crash now loses nothing
        const row = (yield* store.resources).find((r) => r.resourceId === "key-a")!
        assert.strictEqual(resumeOf(row.health)["throttledUntil"], 60_000)
        yield* TestClock.adjust("1 second")
        yield* settle
        yield* Fiber.interrupt(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      const before = calls.length
      assert.isTrue(calls.some((c) => c.key === "key-a" && c.at === 0))
      // 10 s after the 429 the process is back; the server would answer key-a now (it would not
      // tell: the window is the server's own)
      yield* TestClock.adjust("8 seconds")
      server.aThrottles = false
      const report = yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs, { resume: true }))
        for (let i = 0; i < 200 && fiber.unsafePoll() === null; i++) {
          yield* settle
          yield* TestClock.adjust("1 second")
        }
        return yield* Fiber.join(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      assert.strictEqual(report.stats.byState.failed, 0)
      const after = calls.slice(before)
      const toA = after.filter((c) => c.key === "key-a")
      const toB = after.filter((c) => c.key === "key-b")
      assert.isAbove(toA.length, 0)
      assert.isAtLeast(Math.min(...toA.map((c) => c.at)), 60_000)
      // key-b served from the resume on, every second until key-a came back
      assert.strictEqual(Math.min(...toB.map((c) => c.at)), 10_000)
      assert.isAtLeast(toB.filter((c) => c.at < 60_000).length, 45)
      // `report` says what the resume restored
      const text = Report.renderText(yield* Report.buildReport([{ source: "mem", store }]))
      assert.match(text, /llm\/key-a \(llm\): ready; .*; restored at resume: throttle, probing/)
      // the restore is on the event log
      const restored = yield* store.events({ kind: "resource.restored" })
      assert.isTrue(restored.some((e) => (e.data as { resourceId?: string }).resourceId === "key-a"))
    }).pipe(Effect.provide(
      kind === "memory"
        ? MemoryStore.layer()
        : Layer.provide(
          SqliteStore.layer({ filename: nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-pool-resume-")), "s.db") }),
          NodeContext.layer
        )
    )))

  it.effect("a restored throttle window counts as a hold that ends: a pipeline refused by the other key (Retry-After 120 s) retries when the restored window ends, not 120 s later (tester18e F1)", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const calls: Array<Call> = []
      // phase 1: key-a answers 429 (Retry-After 60 s), key-b never answers; phase 2: key-a
      // answers, key-b refuses its first request with Retry-After 120 s, then answers
      const server = { phase: 1, bRefused: false }
      const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 10, base: "10 millis", cap: "10 millis", jitter: "none" } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
          calls.push({ key: lease.resource.id, at: now })
          const key = lease.resource.id
          if (server.phase === 1 && key === "key-b") return yield* Effect.never
          const retryAfterMs = server.phase === 1 ? 60_000 : key === "key-b" && !server.bRefused ? 120_000 : undefined
          if (retryAfterMs !== undefined) {
            if (key === "key-b") server.bRefused = true
            const error = new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs })
            yield* lease.report({ ok: false, error })
            return yield* Effect.fail(error)
          }
          yield* lease.report({ ok: true })
          return n
        }))
      const specs = Pipeline.make("restored", ask).map([0, 1])
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs))
        yield* settle
        yield* TestClock.adjust("1 second")
        yield* settle
        yield* Fiber.interrupt(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      assert.deepStrictEqual(calls.map((c) => [c.key, c.at]), [["key-a", 0], ["key-b", 0]])
      yield* TestClock.adjust("9 seconds")
      server.phase = 2
      const before = calls.length
      const report = yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs, { resume: true }))
        for (let i = 0; i < 200 && fiber.unsafePoll() === null; i++) {
          yield* settle
          yield* TestClock.adjust("1 second")
        }
        return yield* Fiber.join(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      assert.strictEqual(report.stats.byState.succeeded, 2)
      const after = calls.slice(before)
      // key-b refused one at t=10 s; nothing reached key-a before its restored window ended
      // (60 s), and the refused pipeline went there then, not at 130 s
      assert.deepStrictEqual(after.find((c) => c.key === "key-b"), { key: "key-b", at: 10_000 })
      assert.isTrue(after.filter((c) => c.key === "key-a").every((c) => c.at >= 60_000))
      assert.isBelow(Math.max(...after.map((c) => c.at)), 61_000)
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("a throttle window that ended while the process was down is over", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const calls: Array<Call> = []
      const server = { aThrottles: true }
      const specs = Pipeline.make("late", askOf(calls, server)).map(Array.from({ length: 6 }, (_, i) => i))
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs))
        yield* settle
        yield* TestClock.adjust("1 second")
        yield* settle
        yield* Fiber.interrupt(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      yield* TestClock.adjust("2 minutes")
      server.aThrottles = false
      const before = calls.length
      const start = 121_000
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs, { resume: true }))
        for (let i = 0; i < 20 && fiber.unsafePoll() === null; i++) {
          yield* settle
          yield* TestClock.adjust("1 second")
        }
        return yield* Fiber.join(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      // key-a is used at once (as a probe: one lease, then both keys)
      assert.isTrue(calls.slice(before).some((c) => c.key === "key-a" && c.at === start))
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("a resource whose identity changed (another URL) does not get the old state", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const calls: Array<Call> = []
      const server = { aThrottles: true }
      const specs = Pipeline.make("moved", askOf(calls, server)).map(Array.from({ length: 6 }, (_, i) => i))
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs))
        yield* settle
        yield* TestClock.adjust("1 second")
        yield* settle
        yield* Fiber.interrupt(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      yield* TestClock.adjust("9 seconds")
      server.aThrottles = false
      const before = calls.length
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs, { resume: true }))
        for (let i = 0; i < 20 && fiber.unsafePoll() === null; i++) {
          yield* settle
          yield* TestClock.adjust("1 second")
        }
        return yield* Fiber.join(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys({ a: { baseUrl: "https://a2.example/v1" } }))))
      // key-a (now another endpoint) is used at once
      assert.isTrue(calls.slice(before).some((c) => c.key === "key-a" && c.at === 10_000))
      assert.include(
        Report.renderText(yield* Report.buildReport([{ source: "mem", store }])),
        "llm/key-a (llm): ready; attempts"
      )
      assert.include(Report.renderText(yield* Report.buildReport([{ source: "mem", store }])), "saved state not applied (identity_changed)")
      const ignored = yield* store.events({ kind: "resource.restore_ignored" })
      assert.deepStrictEqual(
        ignored.map((e) => [(e.data as { resourceId: string }).resourceId, (e.data as { reason: string }).reason]),
        [["key-a", "identity_changed"]]
      )
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("a changed API key alone is the same resource (secrets are not part of the identity)", () =>
    Effect.gen(function*() {
      const pools = yield* Pool.Pools
      const saved = yield* Effect.scoped(Effect.gen(function*() {
        const first = yield* Pool.makePools(twoKeys())
        const lease = yield* first.acquireRaw("llm")
        yield* lease.report({ ok: false, error: new RetryableError({ message: "429", errorClass: "rate_limit", retryAfterMs: 60_000 }) })
        yield* lease.releaseNow
        return yield* first.saveState("llm")
      }))
      assert.notInclude(JSON.stringify(saved), "sk-a")
      const outcome = yield* pools.restoreState("llm", "key-a", saved.find((s) => s.resourceId === "key-a")!.state)
      assert.deepStrictEqual(outcome, { _tag: "Restored", applied: ["throttle", "probing"] })
      assert.strictEqual((yield* pools.snapshot("llm"))[0]!.throttledUntil, 60_000)
    }).pipe(Effect.provide(Pool.layer(twoKeys({ a: { apiKey: "sk-a-rotated" } })))))

  it.effect("corrupt and unknown saved rows are reported and ignored; the resume runs", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const calls: Array<Call> = []
      const specs = Pipeline.make("corrupt", askOf(calls, { aThrottles: false })).map([1, 2, 3, 4])
      const put = (resourceId: string, health: unknown) =>
        store.putResource({ pool: "llm", resourceId, kind: "llm", spec: {}, health, updatedAt: 0 })
      yield* put("key-a", { state: "ready", resume: { v: 99, whatever: true } })
      yield* put("key-b", "not an object")
      yield* put("key-gone", { resume: { v: 1 } })
      const report = yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs, { resume: true }))
        for (let i = 0; i < 20 && fiber.unsafePoll() === null; i++) {
          yield* settle
          yield* TestClock.adjust("1 second")
        }
        return yield* Fiber.join(fiber)
      }).pipe(Effect.provide(proc(store, twoKeys())))
      assert.strictEqual(report.stats.byState.succeeded, 4)
      assert.isTrue(calls.some((c) => c.key === "key-a" && c.at === 0))
      const ignored = (yield* store.events({ kind: "resource.restore_ignored" })).map((e) => e.data as Record<string, string>)
      assert.deepStrictEqual(ignored.map((d) => [d["resourceId"], d["reason"]]).sort(), [
        ["key-a", "invalid"],
        ["key-b", "invalid"],
        ["key-gone", "unknown_resource"]
      ])
      assert.include(ignored.find((d) => d["resourceId"] === "key-a")!["message"], "unknown version 99")
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("quota usage spent before the interruption counts after the resume: only the rest is on offer", () =>
    Effect.gen(function*() {
      const quotaKeys = (algorithm: AcquireAlgorithm.AcquireAlgorithm) => [
        Pool.make("llm", [
          Resource.make("llm", { id: "key-a", capacity: 4, options: { quota: { tokens: 100 } } }),
          Resource.make("llm", { id: "key-b", capacity: 4, options: { quota: { tokens: 100 } } })
        ], { algorithm })
      ]
      // before: key-a spent 60 of its 100 tokens
      const saved = yield* Effect.scoped(Effect.gen(function*() {
        const first = yield* Pool.makePools(quotaKeys(AcquireAlgorithm.quotaAware()))
        const lease = yield* first.acquireRaw("llm")
        assert.strictEqual(lease.resource.id, "key-a")
        yield* lease.report({ ok: true, usage: { tokens: 60 } })
        yield* lease.releaseNow
        return yield* first.saveState("llm")
      }))
      // after: a fresh service; restored, key-a shows 60 used and quotaAware prefers key-b (100 left vs 40)
      const pools = yield* Pool.makePools(quotaKeys(AcquireAlgorithm.quotaAware()))
      for (const s of saved) yield* pools.restoreState("llm", s.resourceId, s.state)
      const snap = yield* pools.snapshot("llm")
      assert.deepStrictEqual(snap.map((r) => [r.id, r.usage["tokens"] ?? 0]), [["key-a", 60], ["key-b", 0]])
      const lease = yield* pools.acquireRaw("llm")
      assert.strictEqual(lease.resource.id, "key-b")
      yield* lease.releaseNow
      // restoring twice into the same live service does not count the usage twice
      for (const s of saved) yield* pools.restoreState("llm", s.resourceId, s.state)
      assert.strictEqual((yield* pools.snapshot("llm"))[0]!.usage["tokens"], 60)
    }).pipe(Effect.scoped))

  it.effect("an open breaker and a cooldown still running are restored; they end at their time", () =>
    Effect.gen(function*() {
      const saved = yield* Effect.scoped(Effect.gen(function*() {
        const first = yield* Pool.makePools(twoKeys())
        const snap = yield* first.saveState("llm")
        return snap
      }))
      const a = saved.find((s) => s.resourceId === "key-a")!.state as Record<string, unknown>
      const pools = yield* Pool.makePools(twoKeys())
      const outcome = yield* pools.restoreState("llm", "key-a", { ...a, breakerOpenUntil: 30_000, failedProbes: 1 })
      assert.deepStrictEqual(outcome, { _tag: "Restored", applied: ["breaker"] })
      const outcomeB = yield* pools.restoreState("llm", "key-b", {
        ...(saved.find((s) => s.resourceId === "key-b")!.state as object),
        cooldownUntil: 20_000,
        consecutiveFailures: 3
      })
      assert.deepStrictEqual(outcomeB, { _tag: "Restored", applied: ["cooldown"] })
      const waiting = yield* Effect.fork(pools.acquireRaw("llm"))
      yield* settle
      yield* TestClock.adjust("19 seconds")
      yield* settle
      assert.isNull(waiting.unsafePoll())
      yield* TestClock.adjust("1 second")
      const lease = yield* Fiber.join(waiting)
      assert.strictEqual(lease.resource.id, "key-b")
      yield* lease.releaseNow
    }).pipe(Effect.scoped))
})

describe("the circuit breaker across a resume (issue 18 trial: a half-open breaker was forgotten)", () => {
  const failing = () => [
    Pool.make("llm", [Resource.make("llm", { id: "ep", capacity: 10, options: { baseUrl: "https://ep.example/v1" } })], {
      breaker: { window: 4, minRequests: 4, failureRate: 0.5, openFor: "2 seconds" }
    })
  ]
  const err503 = () => new RetryableError({ message: "503 Service Unavailable", errorClass: "upstream" })

  /** Opens the breaker with 4 failures; `waitMs` later, the state is saved as at a crash. */
  const savedAfter = (waitMs: number) =>
    Effect.scoped(Effect.gen(function*() {
      const first = yield* Pool.makePools(failing())
      const leases = yield* Effect.all(Array.from({ length: 4 }, () => first.acquireRaw("llm")))
      for (const l of leases) yield* l.report({ ok: false, error: err503() })
      yield* Effect.forEach(leases, (l) => l.releaseNow)
      assert.strictEqual((yield* first.snapshot("llm"))[0]!.breaker, "open")
      yield* TestClock.adjust(waitMs)
      yield* settle
      return (yield* first.saveState("llm"))[0]!.state
    }))

  /** A fresh process restores `state` and 10 acquires come at once: how many are granted. */
  const grantedAfterRestore = (state: unknown) =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pool.makePools(failing())
      const outcome = yield* pools.restoreState("llm", "ep", state)
      const fibers = yield* Effect.all(Array.from({ length: 10 }, () => Effect.fork(pools.acquireRaw("llm"))))
      yield* settle
      const granted = fibers.filter((f) => f.unsafePoll() !== null).length
      const breaker = (yield* pools.snapshot("llm"))[0]!.breaker
      yield* Effect.forEach(fibers, (f) => Fiber.interrupt(f))
      return { outcome, granted, breaker }
    }))

  it.effect("half-open when saved: the resumed run sends one probe, not the full capacity", () =>
    Effect.gen(function*() {
      // 3 s after opening for 2 s: half-open when the process died
      const state = yield* savedAfter(3_000)
      assert.strictEqual((state as Record<string, unknown>)["breakerState"], "half_open")
      const r = yield* grantedAfterRestore(state)
      assert.deepStrictEqual(r.outcome, { _tag: "Restored", applied: ["breaker"] })
      assert.strictEqual(r.breaker, "half_open")
      assert.strictEqual(r.granted, 1)
    }))

  it.effect("open when saved, its time over before the resume: half-open, one probe", () =>
    Effect.gen(function*() {
      const state = yield* savedAfter(500)
      assert.strictEqual((state as Record<string, unknown>)["breakerState"], "open")
      // the process was down longer than the opening
      yield* TestClock.adjust("10 seconds")
      const r = yield* grantedAfterRestore(state)
      assert.strictEqual(r.breaker, "half_open")
      assert.strictEqual(r.granted, 1)
    }))

  it.effect("open when saved and still open at the resume: nothing before its end, then one probe", () =>
    Effect.gen(function*() {
      const state = yield* savedAfter(500)
      const r = yield* grantedAfterRestore(state)
      assert.strictEqual(r.breaker, "open")
      assert.strictEqual(r.granted, 0)
    }))

  it.effect("a state saved before breakerState was kept still restores (the field is optional)", () =>
    Effect.gen(function*() {
      const { breakerState: _, ...old } = (yield* savedAfter(3_000)) as Record<string, unknown>
      const r = yield* grantedAfterRestore(old)
      assert.deepStrictEqual(r.outcome, { _tag: "Restored", applied: [] })
    }))
})

describe("adaptive: learned limits across a resume", () => {
  it.effect("a resumed run starts at the learned rate and window, not the conservative start", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 600 }, signals: "none", latency: { medianMs: 200 } }], { seed: 1 })
      const pools = () => [Sim.chatPool(sim, { name: "adaptive", initialRate: 1 }, 16)]
      const specs = Pipeline.make("p", Chat.chat<string>({ name: "ask", retry: { maxAttempts: 20 } })).map(
        Array.from({ length: 150 }, (_, i) => `q${i}`)
      )
      const adaptiveOf = (snap: ReadonlyArray<Pool.ResourceSnapshot>) =>
        (snap[0]!.algorithm as Record<string, Record<string, unknown>> | undefined)?.["adaptive"]
      const { value } = yield* Sim.simulate(Effect.gen(function*() {
        const store = yield* Store
        const learned = yield* Effect.gen(function*() {
          yield* Runner.run(specs)
          return adaptiveOf(yield* (yield* Pool.Pools).snapshot("llm"))
        }).pipe(Effect.provide(proc(store, pools(), 16)))
        const fresh = yield* Effect.gen(function*() {
          return adaptiveOf(yield* (yield* Pool.Pools).snapshot("llm"))
        }).pipe(Effect.provide(proc(store, pools(), 16)))
        const resumed = yield* Effect.gen(function*() {
          yield* Runner.run(specs, { resume: true })
          return adaptiveOf(yield* (yield* Pool.Pools).snapshot("llm"))
        }).pipe(Effect.provide(proc(store, pools(), 16)))
        return { learned, fresh, resumed }
      }).pipe(Effect.provide(MemoryStore.layer())))
      const learned = value.learned!
      const resumed = value.resumed!
      assert.isAbove(learned["rate"] as number, 5)
      // a fresh service knows nothing (no state until its first report)
      assert.isUndefined(value.fresh)
      assert.strictEqual(resumed["rate"], learned["rate"])
      assert.strictEqual(resumed["concurrency"], learned["concurrency"])
      assert.strictEqual(resumed["phase"], learned["phase"])
      assert.deepStrictEqual(resumed["lastDecrease"], learned["lastDecrease"])
    }), 60_000)
})

describe("adaptive: a concurrency limit learned from 429s across a resume (fix18e)", () => {
  it.effect.each(["memory", "sqlite"] as const)(
    "%s: a server serving 3 at once (429 past it): the resumed run starts at 3 at once and meets no 429 from exceeding it",
    (kind) =>
      Effect.gen(function*() {
        // `assay mock-llm`'s `maxConcurrency: 3`, ~300 ms per answer; capacity 8, 16 at once
        const sim = Sim.makeProviders([{
          name: "conc",
          signals: "none",
          maxConcurrent: 3,
          concurrencyRetryAfterS: 1,
          latency: { medianMs: 300, sigma: 0.175 }
        }], { seed: 1 })
        const pools = () => [Sim.chatPool(sim, "adaptive", 8)]
        const ask = Chat.chat<string>({ name: "ask", retry: { maxAttempts: 20, base: "250 millis", factor: 2, cap: "10 seconds", jitter: "full" } })
        const first = Pipeline.make("p", ask).map(Array.from({ length: 300 }, (_, i) => `q${i}`))
        // the resumed run: the first run's pipelines (done) and 40 more (about 4 s of answers)
        const again = Pipeline.make("p", ask).map(Array.from({ length: 340 }, (_, i) => `q${i}`))
        const adaptiveOf = (snap: ReadonlyArray<Pool.ResourceSnapshot>) =>
          (snap[0]!.algorithm as Record<string, Record<string, unknown>> | undefined)?.["adaptive"]
        const program = Effect.gen(function*() {
          const store = yield* Store
          const learned = yield* Effect.gen(function*() {
            yield* Runner.run(first)
            return adaptiveOf(yield* (yield* Pool.Pools).snapshot("llm"))
          }).pipe(Effect.provide(proc(store, pools(), 16)))
          // the store carries the learned limit (the run's last write of the pools' state)
          const row = (yield* store.resources).find((r) => r.resourceId === "conc")!
          const saved = (resumeOf(row.health)["algorithms"] as Record<string, Record<string, unknown>>)["adaptive"]!
          // a minute later (nothing throttled any more)
          yield* Effect.sleep("1 minute")
          const from = sim.log.length
          const resumed = yield* Effect.gen(function*() {
            const pools = yield* Pool.Pools
            const fiber = yield* Effect.fork(Runner.run(again, { resume: true }))
            // at the resume, before any answer: the learned window
            yield* Effect.sleep("10 millis")
            const atStart = adaptiveOf(yield* pools.snapshot("llm"))
            const report = yield* Fiber.join(fiber)
            return { atStart, report }
          }).pipe(Effect.provide(proc(store, pools(), 16)))
          const text = Report.renderText(yield* Report.buildReport([{ source: "mem", store }]))
          return { learned, saved, resumed, requests: sim.log.slice(from), text }
        })
        const { value } = yield* Sim.simulate(program.pipe(Effect.provide(
          kind === "memory"
            ? MemoryStore.layer()
            : Layer.provide(
              SqliteStore.layer({ filename: nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-pool-resume-")), "s.db") }),
              NodeContext.layer
            )
        )))
        assert.strictEqual(value.learned!["concurrencyLimit"], 3)
        assert.strictEqual(value.saved["concKnee"], 3)
        assert.strictEqual(value.resumed.report.stats.byState.failed, 0)
        assert.strictEqual(value.resumed.atStart!["concurrencyLimit"], 3)
        assert.isAtMost(value.resumed.atStart!["concurrency"] as number, 3)
        // the 40 new pipelines, each answered once, none refused
        assert.strictEqual(value.requests.length, 40)
        assert.strictEqual(value.requests.filter((r) => r.status === 429).length, 0)
        // `report` says what was learned, apart from the configured capacity
        assert.match(value.text, /llm\/conc \(llm\): .*3 at once, learned from 429s past 3 in flight/)
      }),
    60_000
  )
})

describe("every breaker transition is written at once (a kill right after one loses nothing)", () => {
  const breakerPool = () => [
    Pool.make("llm", [Resource.make("llm", { id: "ep", capacity: 2, options: { baseUrl: "https://ep.example/v1" } })], {
      breaker: { window: 4, minRequests: 4, failureRate: 0.5, openFor: "2 seconds" }
    })
  ]
  /** A call of 1 s; 503 at once while `server.fails`. Every lease taken is logged with the clock. */
  const callOf = (calls: Array<Call>, server: { fails: boolean }) =>
    Task.make("call", { resource: "llm", retry: { maxAttempts: 50, base: "10 millis", cap: "10 millis", jitter: "none" } }, (n: number, ctx) =>
      Effect.gen(function*() {
        const lease = yield* ctx.acquire()
        calls.push({ key: lease.resource.id, at: yield* Effect.clockWith((c) => c.currentTimeMillis) })
        if (server.fails) {
          const error = new RetryableError({ message: "503 Service Unavailable", errorClass: "upstream" })
          yield* lease.report({ ok: false, error })
          return yield* Effect.fail(error)
        }
        yield* Effect.sleep("1 second")
        yield* lease.report({ ok: true })
        return n
      }))

  it.effect.each(["memory", "sqlite"] as const)("%s: opened, half-open and closed are each in the store when they happen; killed right after the close, the resume has the full capacity (no probe)", (kind) =>
    Effect.gen(function*() {
      const store = yield* Store
      // a killed process writes nothing more: its finalizers' writes are lost
      let killed = false
      const killable: StoreService = {
        ...store,
        putResource: (r) => Effect.suspend(() => killed ? Effect.void : store.putResource(r))
      }
      const savedBreaker = Effect.map(store.resources, (rows) => {
        const row = rows.find((r) => r.resourceId === "ep")
        return row === undefined ? undefined : (resumeOf(row.health)["breakerState"] as string | undefined) ?? "closed"
      })
      const calls: Array<Call> = []
      const server = { fails: true }
      const specs = Pipeline.make("b", callOf(calls, server)).map(Array.from({ length: 12 }, (_, i) => i))
      // process 1 (heartbeat 1 hour): the breaker opens, goes half-open, a probe closes it; each
      // transition is read back from the store in the same instant (no clock step between)
      const seen = yield* Effect.gen(function*() {
        const pools = yield* Pool.Pools
        const fiber = yield* Effect.fork(Runner.run(specs))
        const seen: Array<{ readonly live: string; readonly saved: string | undefined; readonly at: number }> = []
        let last = "closed"
        for (let i = 0; i < 1000 && !(last === "closed" && seen.length > 0); i++) {
          yield* settle
          const live = (yield* pools.snapshot("llm"))[0]!.breaker
          if (live !== last) {
            seen.push({ live, saved: yield* savedBreaker, at: yield* Effect.clockWith((c) => c.currentTimeMillis) })
            last = live
            // the endpoint recovers while the breaker is open: the probe succeeds
            if (live === "open") server.fails = false
          }
          if (!(last === "closed" && seen.length > 0)) yield* TestClock.adjust("10 millis")
        }
        // killed right after the close
        killed = true
        yield* Fiber.interrupt(fiber)
        return seen
      }).pipe(Effect.provide(proc(killable, breakerPool())))
      assert.deepStrictEqual(seen.map((s) => s.live), ["open", "half_open", "closed"])
      // the resume: the endpoint answered since it failed; both slots at once, no probe
      const before = calls.length
      const resumedAt = yield* Effect.clockWith((c) => c.currentTimeMillis)
      const breaker = yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Runner.run(specs, { resume: true }))
        yield* settle
        const breaker = (yield* (yield* Pool.Pools).snapshot("llm"))[0]!.breaker
        yield* Fiber.interrupt(fiber)
        return breaker
      }).pipe(Effect.provide(proc(store, breakerPool())))
      assert.strictEqual(breaker, "closed")
      assert.strictEqual(calls.slice(before).filter((c) => c.at === resumedAt).length, 2)
      const restored = yield* store.events({ kind: "breaker.half_open" })
      assert.isFalse(restored.some((e) => (e.data as { restored?: boolean }).restored === true))
      // each transition was in the store in the instant it happened
      assert.deepStrictEqual(seen.map((s) => s.saved), ["open", "half_open", "closed"])
    }).pipe(Effect.provide(
      kind === "memory"
        ? MemoryStore.layer()
        : Layer.provide(
          SqliteStore.layer({ filename: nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-breaker-kill-")), "s.db") }),
          NodeContext.layer
        )
    )))
})
