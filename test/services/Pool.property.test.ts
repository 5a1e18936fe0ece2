import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, FastCheck as fc, TestClock } from "effect"
import type { Lease, Selector } from "../../src/domain/Lease.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Pool from "../../src/services/Pool.js"

const settle = Effect.forEach(Array.from({ length: 30 }), () => Effect.yieldNow(), { discard: true })

const selectorArb: fc.Arbitrary<Selector> = fc.constantFrom<Selector>(
  {},
  { tags: { t: "a" } },
  { tags: { t: "b" } },
  { kind: "w" }
)

const scriptArb = fc.record({
  selector: selectorArb,
  startMs: fc.integer({ min: 0, max: 400 }),
  holdMs: fc.integer({ min: 0, max: 300 }),
  raw: fc.boolean(),
  forgetRelease: fc.boolean(),
  timeoutMs: fc.option(fc.integer({ min: 1, max: 500 }), { nil: undefined }),
  interruptAtMs: fc.option(fc.integer({ min: 0, max: 800 }), { nil: undefined }),
  report: fc.constantFrom("ok", "fail", "none"),
  algorithm: fc.constantFrom("wait", "leastBusy", "sticky", "backoff")
})

const opArb = fc.record({
  atMs: fc.integer({ min: 0, max: 800 }),
  op: fc.constantFrom("revoke0", "revoke1", "revoke2", "addA", "addB")
})

const initial = () => [
  Resource.make("w", { id: "r0", capacity: 2, tags: { t: "a" }, degradeAfter: 2, deadAfter: 1000, cooldown: "1 second" }),
  Resource.make("w", { id: "r1", capacity: 1, tags: { t: "b" }, degradeAfter: 2, deadAfter: 1000, cooldown: "1 second" }),
  Resource.make("w", { id: "r2", capacity: 1, tags: { t: "a" }, degradeAfter: 2, deadAfter: 1000, cooldown: "1 second" })
]

describe("Pool invariants under random interleavings", () => {
  it.effect.prop(
    "capacity is never exceeded, no lease is lost or double-released, satisfiable waiters are served, interrupted waiters leave nothing",
    { scripts: fc.array(scriptArb, { minLength: 1, maxLength: 14 }), ops: fc.array(opArb, { maxLength: 4 }) },
    ({ ops, scripts }) =>
      Effect.scoped(Effect.gen(function*() {
        const pools = yield* Pool.makePools([Pool.make("p", initial(), { kind: "w" })])
        const live = new Set<string>()
        let added = 0
        const fibers = yield* Effect.forEach(scripts, (s, i) => {
          const holder: Pool.Holder = { taskName: `t${i}`, pipelineId: `p${i % 3}`, owner: `f${i}` }
          const options = {
            ...s.selector,
            pool: "p",
            algorithm: s.algorithm,
            ...(s.timeoutMs === undefined ? {} : { timeout: s.timeoutMs })
          }
          const use = (lease: Lease) =>
            Effect.gen(function*() {
              live.add(lease.id)
              if (s.report !== "none") yield* lease.report({ ok: s.report === "ok" })
              yield* Effect.sleep(s.holdMs)
            })
          const body = s.raw
            ? Effect.gen(function*() {
              const lease = yield* pools.acquireRaw(options, holder)
              yield* use(lease)
              if (!s.forgetRelease) {
                live.delete(lease.id)
                yield* lease.releaseNow
              }
            }).pipe(Effect.ensuring(Effect.flatMap(pools.reclaim(holder.owner!), (leaked) =>
              Effect.sync(() => {
                for (const l of leaked) live.delete(l.leaseId)
              }))))
            : Effect.scoped(Effect.gen(function*() {
              const lease = yield* pools.acquire(options, holder)
              // finalizers run in reverse order: this one runs before the lease's release
              yield* Effect.addFinalizer(() => Effect.sync(() => live.delete(lease.id)))
              yield* use(lease)
            }))
          return Effect.fork(Effect.zipRight(Effect.sleep(s.startMs), body))
        })
        const interrupters = yield* Effect.forEach(scripts, (s, i) =>
          s.interruptAtMs === undefined
            ? Effect.void
            : Effect.fork(Effect.zipRight(Effect.sleep(s.interruptAtMs), Fiber.interrupt(fibers[i]!))))
        const opFibers = yield* Effect.forEach(ops, (o) =>
          Effect.fork(Effect.zipRight(
            Effect.sleep(o.atMs),
            o.op.startsWith("revoke")
              ? Effect.asVoid(pools.revoke("p", `r${o.op.slice(6)}`))
              : Effect.asVoid(pools.add("p", { id: `x${++added}`, tags: { t: o.op === "addA" ? "a" : "b" }, capacity: 1 }))
          )))

        const check = Effect.gen(function*() {
          const snap = yield* pools.snapshot("p")
          let sum = 0
          for (const r of snap) {
            assert.isAtMost(r.active, r.capacity, `resource ${r.id} over capacity`)
            assert.strictEqual(r.leases.length, r.active, `resource ${r.id}: leases vs active`)
            sum += r.active
          }
          assert.strictEqual(sum, live.size, "sum of active equals the leases held")
        })

        for (let t = 0; t < 1500; t += 25) {
          yield* TestClock.adjust("25 millis")
          yield* settle
          yield* check
        }
        // endgame: resources every selector can use, then enough time for cooldowns and backoff
        yield* pools.add("p", { id: "endA", tags: { t: "a" }, capacity: 1, degradeAfter: 1000, deadAfter: 1000 })
        yield* pools.add("p", { id: "endB", tags: { t: "b" }, capacity: 1, degradeAfter: 1000, deadAfter: 1000 })
        for (let t = 0; t < 40; t++) {
          yield* TestClock.adjust("1 second")
          yield* settle
          yield* check
        }
        const exits = yield* Effect.forEach(fibers, (f) => Fiber.await(f))
        yield* Effect.forEach(interrupters, (f) => f === undefined ? Effect.void : Fiber.join(f))
        yield* Effect.forEach(opFibers, (f) => Fiber.join(f))
        exits.forEach((exit, i) => {
          const s = scripts[i]!
          if (s.timeoutMs === undefined && s.interruptAtMs === undefined) {
            assert.isTrue(Exit.isSuccess(exit), `fiber ${i} was never served: ${JSON.stringify(s)}`)
          } else if (Exit.isFailure(exit)) {
            assert.isTrue(Exit.isInterrupted(exit) || s.timeoutMs !== undefined)
          }
        })
        yield* check
        const stats = yield* pools.stats("p")
        assert.strictEqual(stats.active, 0)
        assert.strictEqual(stats.waiting, 0)
        assert.strictEqual(live.size, 0)
      })),
    { fastCheck: { numRuns: 25 } }
  )
})
