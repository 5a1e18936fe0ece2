import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Queue, Scope } from "effect"
import * as Resource from "../../src/domain/Resource.js"
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
