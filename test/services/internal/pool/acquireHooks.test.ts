import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope } from "effect"
import type { Lease } from "../../../../src/domain/Lease.js"
import * as Resource from "../../../../src/domain/Resource.js"
import * as Pool from "../../../../src/services/Pool.js"
import {
  type AcquireHooks,
  AcquireHooksTypeId,
  appliesHooks,
  type HookedHolder
} from "../../../../src/services/internal/acquireHooks.js"
import { aliased } from "../../../../src/services/internal/pool/aliased.js"
import { AttemptGenerator, attemptScoped } from "../../../../src/services/internal/runner/attemptScope.js"

// What a runner attempt relies on when it hands its parking to the pools service: a stop
// refuses a new acquire (no slot taken), a wait is parked (so a stop can interrupt it), a
// lease granted at once is not, and the task gets the attempt's view of every lease once.

const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })

const onePool = [Pool.make("p", [Resource.make("worker", { id: "w", capacity: 1 })])]

/** A holder with hooks that count what the pool asked of them. */
const hooked = (stopping: { value: boolean }) => {
  const calls = { parked: 0, granted: [] as Array<string> }
  const hooks: AcquireHooks = {
    refused: () => stopping.value,
    park: (self) => Effect.suspend(() => {
      calls.parked++
      return self
    }),
    granted: <Client,>(lease: Lease<Client>) => {
      calls.granted.push(lease.id)
      return { ...lease, taskName: `seen:${lease.taskName}` }
    }
  }
  const holder: HookedHolder = { taskName: "t", pipelineId: "p1", owner: "p1:0:1", [AcquireHooksTypeId]: hooks }
  return { holder, calls }
}

const inAttempt = <A, E, R>(body: Effect.Effect<A, E, R>) => attemptScoped(body, new AttemptGenerator({ seed: 1 }))

describe("acquire hooks", () => {
  it.effect("a free slot is granted without parking, a wait is parked; the task sees each lease through `granted`", () =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pool.makePools(onePool)
      assert.isTrue(appliesHooks(pools))
      const { calls, holder } = hooked({ value: false })
      const first = yield* Effect.fork(inAttempt(Effect.gen(function*() {
        const lease = yield* pools.acquire("p", holder)
        assert.strictEqual(lease.taskName, "seen:t")
        return yield* Effect.never
      })))
      yield* settle
      assert.strictEqual(calls.parked, 0)
      assert.strictEqual(calls.granted.length, 1)
      // the only slot is held: the second attempt waits, parked
      const second = yield* Effect.fork(inAttempt(pools.acquire("p", holder)))
      yield* settle
      assert.strictEqual(calls.parked, 1)
      assert.strictEqual(calls.granted.length, 1)
      yield* Fiber.interrupt(first)
      const lease = yield* Fiber.join(second)
      assert.strictEqual(lease.taskName, "seen:t")
      assert.strictEqual(calls.granted.length, 2)
      assert.notStrictEqual(calls.granted[0], calls.granted[1])
    })))

  it.effect("a refused acquire is interrupted and takes no slot", () =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pool.makePools(onePool)
      const stopping = { value: true }
      const { calls, holder } = hooked(stopping)
      const exit = yield* Effect.exit(inAttempt(pools.acquire("p", holder)))
      assert.isTrue(Exit.isInterrupted(exit))
      assert.deepStrictEqual(calls, { parked: 0, granted: [] })
      const snapshot = yield* pools.snapshot("p")
      assert.strictEqual(snapshot[0]!.active, 0)
      // outside an attempt (any other Scope) the same refusal holds
      const scope = yield* Scope.make()
      assert.isTrue(Exit.isInterrupted(yield* Effect.exit(Scope.extend(pools.acquire("p", holder), scope))))
      stopping.value = false
      const lease = yield* Scope.extend(pools.acquire("p", holder), scope)
      assert.strictEqual(lease.taskName, "seen:t")
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual((yield* pools.snapshot("p"))[0]!.active, 0)
    })))

  it.effect("a suite member's view applies them too (the holder keeps its hooks under a local pool name)", () =>
    Effect.scoped(Effect.gen(function*() {
      const pools = yield* Pool.makePools(onePool)
      const view = aliased(pools, { apis: "p" })
      assert.isTrue(appliesHooks(view))
      const { calls, holder } = hooked({ value: false })
      const lease = yield* inAttempt(view.acquire("apis", { ...holder, defaultPool: "apis" }))
      assert.strictEqual(lease.taskName, "seen:t")
      assert.strictEqual(calls.granted.length, 1)
      assert.strictEqual(calls.parked, 0)
      // a view over a service that does not apply them says so (the attempt then parks and maps itself)
      assert.isFalse(appliesHooks(aliased({ ...pools }, { apis: "p" })))
    })))
})
