/**
 * The hand-written primitives of the pools kept for speed (issue 12 §8): the FIFO waiter queue
 * (`src/services/internal/pool/waiters.ts`) and the shared client build with its `Deferred`
 * per build (`internal/pool/client.ts`), each on `TestClock` (no real sleeps).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Scope, TestClock } from "effect"
import type { Duration } from "effect"
import { ResourceUnavailable } from "../../src/domain/Errors.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Pool from "../../src/services/Pool.js"
import * as Pools from "../../src/services/Pools.js"
import * as Waiters from "../../src/services/internal/pool/waiters.js"

/** Lets forked fibers run until they block. */
const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pools.PoolsService) => Effect.Effect<A, E, Scope.Scope>
) => Effect.scoped(Effect.flatMap(Pools.makePools(configs), f))

const queuedOf = (pools: Pools.PoolsService, pool: string) => Effect.map(pools.stats(pool), (s) => s.queued)

describe("WaiterQueue", () => {
  it("keeps FIFO order, unlinks from any position, and ends a waiter once", () => {
    const q = new Waiters.WaiterQueue<string>()
    const ends: Array<string> = []
    const ws = ["a", "b", "c"].map((name) => {
      const w = Waiters.waiter({}, undefined, 0, name)
      w.resume = () => ends.push(name)
      q.push(w)
      return w
    })
    assert.strictEqual(q.size, 3)
    q.unlink(ws[1]!)
    q.unlink(ws[1]!) // not queued any more: nothing
    assert.strictEqual(q.size, 2)
    assert.deepStrictEqual([q.head?.attempt, q.head?.next?.attempt, q.tail?.attempt], ["a", "c", "c"])
    q.detach(ws[0]!)?.(Effect.never)
    assert.isUndefined(q.detach(ws[0]!), "a waiter is ended once")
    q.detach(ws[2]!)?.(Effect.never)
    assert.deepStrictEqual(ends, ["a", "c"])
    assert.strictEqual(q.size, 0)
    assert.isUndefined(q.head)
    assert.isUndefined(q.tail)
  })
})

describe("pool waiters on TestClock", () => {
  // a plain wait carries its acquire's deadline in the parked waiter (one timer for all waiters
  // of the service, pg17x) instead of a timeout around the wait: the same AcquireTimeout at the
  // same instant, whatever the order the deadlines arrive in
  it.effect("each waiter fails with AcquireTimeout at its own deadline, not before, whatever order the deadlines come in; a served waiter's deadline ends nothing", () =>
    withPools([Pool.make("p", [Resource.make("w", { id: "r", capacity: 1 })])], (pools) =>
      Effect.gen(function*() {
        const holderScope = yield* Scope.make()
        yield* Scope.extend(pools.acquire("p"), holderScope)
        const waiter = (timeout: Duration.DurationInput) =>
          Effect.fork(Effect.scoped(Effect.map(pools.acquire({ pool: "p", timeout }), (lease) => lease.id)))
        const late = yield* waiter("5 seconds")
        yield* settle
        yield* TestClock.adjust("1 second")
        // a later waiter whose deadline (t = 3 s) comes before the first one's (t = 5 s)
        const early = yield* waiter("2 seconds")
        yield* settle
        const served = yield* waiter("10 seconds")
        yield* settle
        assert.strictEqual(yield* queuedOf(pools, "p"), 3)
        yield* TestClock.adjust("1999 millis")
        assert.isUndefined(yield* Fiber.poll(early).pipe(Effect.map((o) => o._tag === "Some" ? o.value : undefined)), "not before its deadline")
        yield* TestClock.adjust("1 millis")
        const e1 = yield* Effect.flip(Fiber.join(early))
        assert.deepStrictEqual([e1._tag, e1._tag === "AcquireTimeout" ? e1.timeoutMs : -1], ["AcquireTimeout", 2000])
        assert.strictEqual(yield* queuedOf(pools, "p"), 2)
        yield* TestClock.adjust("1999 millis")
        assert.strictEqual(yield* queuedOf(pools, "p"), 2, "the first waiter still waits (its deadline is t = 5 s)")
        yield* TestClock.adjust("1 millis")
        const e2 = yield* Effect.flip(Fiber.join(late))
        assert.deepStrictEqual([e2._tag, e2._tag === "AcquireTimeout" ? e2.timeoutMs : -1], ["AcquireTimeout", 5000])
        // the slot frees: the last waiter is served, and its deadline passing later ends nothing
        yield* Scope.close(holderScope, Exit.void)
        const id = yield* Fiber.join(served)
        assert.match(id, /^p\/r#/)
        yield* TestClock.adjust("1 minute")
        assert.strictEqual(yield* queuedOf(pools, "p"), 0)
        // served again at once, and a wait that times out leaves the slot to the next acquire
        const again = yield* Scope.make()
        yield* Scope.extend(pools.acquire({ pool: "p", timeout: "1 second" }), again)
        const refused = yield* waiter("1 second")
        yield* settle
        yield* TestClock.adjust("1 second")
        assert.strictEqual((yield* Effect.flip(Fiber.join(refused)))._tag, "AcquireTimeout")
        yield* Scope.close(again, Exit.void)
        assert.match(yield* Effect.scoped(Effect.map(pools.acquire({ pool: "p", timeout: "1 second" }), (l) => l.id)), /^p\/r#/)
      })))

  it.effect("a freed slot goes to the oldest live waiter; one that timed out or was interrupted leaves the queue", () =>
    withPools([Pool.make("p", [Resource.make("w", { id: "r", capacity: 1 })])], (pools) =>
      Effect.gen(function*() {
        const order: Array<string> = []
        const holderScope = yield* Scope.make()
        yield* Scope.extend(pools.acquire("p"), holderScope)
        const waiter = (name: string, timeout?: Duration.DurationInput) =>
          Effect.fork(Effect.scoped(Effect.gen(function*() {
            yield* pools.acquire({ pool: "p", ...(timeout === undefined ? {} : { timeout }) })
            order.push(name)
            yield* Effect.sleep("1 second")
          })))
        const a = yield* waiter("a")
        yield* settle
        const b = yield* waiter("b", "2 seconds")
        yield* settle
        const c = yield* waiter("c")
        yield* settle
        const d = yield* waiter("d")
        yield* settle
        assert.strictEqual(yield* queuedOf(pools, "p"), 4)

        yield* TestClock.adjust("2 seconds") // b's timeout fires while it is queued
        const bError = yield* Effect.flip(Fiber.join(b))
        assert.strictEqual(bError._tag, "AcquireTimeout")
        yield* Fiber.interrupt(c) // c gives up
        assert.strictEqual(yield* queuedOf(pools, "p"), 2)

        yield* Scope.close(holderScope, Exit.void) // the slot goes to a, the oldest
        yield* settle
        assert.deepStrictEqual(order, ["a"])
        yield* TestClock.adjust("1 second") // a releases: d is next (b and c are gone)
        yield* Fiber.join(a)
        yield* settle
        assert.deepStrictEqual(order, ["a", "d"])
        yield* TestClock.adjust("1 second")
        yield* Fiber.join(d)
        const stats = yield* pools.stats("p")
        assert.strictEqual(stats.queued, 0)
        assert.strictEqual(stats.waiting, 0)
        assert.strictEqual(stats.active, 0)
        assert.strictEqual(stats.waitsTotal, 2, "the served waiters' waits are recorded")
        assert.strictEqual(stats.waitMsMax, 3_000, "d waited 3 s of TestClock time")
      })))

  it.effect("a waiter no free resource matches is skipped: the slot goes to a younger waiter it suits", () =>
    withPools(
      [Pool.make("p", [Resource.make("gpu", { id: "g", capacity: 1 }), Resource.make("cpu", { id: "c", capacity: 1 })])],
      (pools) =>
        Effect.gen(function*() {
          const gpuHold = yield* Scope.make()
          const cpuHold = yield* Scope.make()
          yield* Scope.extend(pools.acquire({ pool: "p", id: "g" }), gpuHold)
          yield* Scope.extend(pools.acquire({ pool: "p", id: "c" }), cpuHold)
          const wantsGpu = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire({ pool: "p", kind: "gpu" }), (l) => l.resource.id)))
          yield* settle
          const wantsAny = yield* Effect.fork(Effect.scoped(Effect.map(pools.acquire("p"), (l) => l.resource.id)))
          yield* settle
          assert.strictEqual(yield* queuedOf(pools, "p"), 2)
          yield* Scope.close(cpuHold, Exit.void)
          assert.strictEqual(yield* Fiber.join(wantsAny), "c")
          assert.isNull(wantsGpu.unsafePoll(), "the gpu waiter still waits for its kind")
          yield* Scope.close(gpuHold, Exit.void)
          assert.strictEqual(yield* Fiber.join(wantsGpu), "g")
          assert.strictEqual(yield* queuedOf(pools, "p"), 0)
        })
    ))
})

describe("an acquire interrupted as its lease is built", () => {
  // Found by Pool.property.test.ts (seed 1951585115): with a `timeout`, the wait runs in a
  // child fiber raced against the timer; an interruption arriving as that fiber built the
  // lease dropped the lease with the race's result, and its slot stayed taken for good.
  it.effect("gives the slot back: nothing stays active, the next waiter is served", () =>
    withPools([Pool.make("p", [Resource.make("w", { id: "r", capacity: 2 })])], (pools) =>
      Effect.gen(function*() {
        const use = (i: number, options: Omit<Parameters<Pools.PoolsService["acquire"]>[0] & object, "pool">) =>
          Effect.fork(Effect.zipRight(
            Effect.sleep(0),
            Effect.scoped(Effect.gen(function*() {
              const lease = yield* pools.acquire({ pool: "p", ...options }, { taskName: `t${i}`, pipelineId: `p${i}`, owner: `o${i}` })
              yield* lease.report({ ok: true })
              yield* Effect.sleep(0)
            }))
          ))
        const timed = yield* use(0, { algorithm: "leastBusy", timeout: 1 })
        const plain = yield* use(1, { algorithm: "wait" })
        yield* Effect.fork(Effect.zipRight(Effect.sleep(0), Fiber.interrupt(timed)))
        for (let i = 0; i < 4; i++) {
          yield* TestClock.adjust("25 millis")
          yield* settle
        }
        assert.isTrue(Exit.isInterrupted(yield* Fiber.await(timed)))
        assert.isTrue(Exit.isSuccess(yield* Fiber.await(plain)))
        const [r] = yield* pools.snapshot("p")
        assert.strictEqual(r!.active, 0, `leases still held: ${r!.leases.join(", ")}`)
        assert.deepStrictEqual(r!.leases, [])
        assert.deepStrictEqual(yield* pools.heldBy("o0"), [])
      })))
})

describe("client build (one Deferred per build)", () => {
  it.effect("concurrent first users wait for one build and share its client", () =>
    Effect.gen(function*() {
      let calls = 0
      const factory = () => Effect.as(Effect.sleep("3 seconds"), { n: ++calls })
      return yield* withPools([Pool.make("p", [Resource.make("w", { id: "r", capacity: 4, factory })])], (pools) =>
        Effect.gen(function*() {
          const fibers = yield* Effect.forEach(
            [0, 1, 2, 3],
            () => Effect.fork(Effect.scoped(Effect.map(pools.acquire<{ n: number }>("p"), (l) => l.client))),
            { concurrency: "unbounded" }
          )
          yield* settle
          assert.strictEqual(calls, 1)
          assert.isTrue(fibers.every((f) => f.unsafePoll() === null), "nobody has a lease before the client is built")
          yield* TestClock.adjust("3 seconds")
          const clients = yield* Effect.forEach(fibers, Fiber.join)
          assert.strictEqual(calls, 1)
          assert.isTrue(clients.every((c) => c === clients[0]), "one client shared by every lease")
        }))
    }))

  it.effect("a builder interrupted mid-build leaves no client: a waiting user builds anew; an interrupted waiter just leaves", () =>
    Effect.gen(function*() {
      let calls = 0
      const factory = () => Effect.as(Effect.sleep("3 seconds"), { n: ++calls })
      return yield* withPools([Pool.make("p", [Resource.make("w", { id: "r", capacity: 4, factory })])], (pools) =>
        Effect.gen(function*() {
          const acquire = Effect.fork(Effect.scoped(Effect.map(pools.acquire<{ n: number }>("p"), (l) => l.client.n)))
          const builder = yield* acquire
          yield* settle
          const leaver = yield* acquire
          const waiter = yield* acquire
          yield* settle
          yield* Fiber.interrupt(leaver)
          yield* TestClock.adjust("1 second")
          yield* Fiber.interrupt(builder) // mid-build
          yield* settle
          assert.strictEqual(calls, 2, "the remaining waiter started a new build at once")
          yield* TestClock.adjust("2 seconds")
          assert.isNull(waiter.unsafePoll(), "the new build takes its full 3 s")
          yield* TestClock.adjust("1 second")
          assert.strictEqual(yield* Fiber.join(waiter), 2)
          const snap = yield* pools.snapshot("p")
          assert.strictEqual(snap[0]!.active, 0)
        }))
    }))

  it.effect("a failed build fails every user that waited for it and is reported once", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      let calls = 0
      const factory = () => Effect.zipRight(Deferred.await(gate), Effect.suspend(() => (calls++, Effect.fail("no credentials"))))
      return yield* withPools([Pool.make("p", [Resource.make("w", { id: "r", capacity: 2, factory })])], (pools) =>
        Effect.gen(function*() {
          const events = yield* pools.events({ kinds: ["resource.factory_failed"] })
          const a = yield* Effect.fork(Effect.scoped(pools.acquire("p")))
          const b = yield* Effect.fork(Effect.scoped(pools.acquire("p")))
          yield* settle
          yield* Deferred.succeed(gate, undefined)
          const errors = yield* Effect.forEach([a, b], (f) => Effect.flip(Fiber.join(f)))
          for (const e of errors) assert.instanceOf(e, ResourceUnavailable)
          assert.strictEqual(calls, 1)
          const failed = yield* Effect.flip(Effect.scoped(pools.acquire("p")))
          assert.instanceOf(failed, ResourceUnavailable)
          assert.strictEqual((yield* events.takeAll).length, 1)
        }))
    }))
})
