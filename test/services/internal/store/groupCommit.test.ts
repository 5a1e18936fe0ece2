/**
 * The group-commit writer's budgets (issue 19 §3): batches bounded in bytes as well as in ops,
 * and submitters of payload-carrying ops held back while the bytes queued or being committed
 * exceed the budget.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { makeGroupCommit } from "../../../../src/services/internal/store/shared.js"

interface Op {
  readonly id: number
  readonly bytes: number
}

/** A writer whose commits wait for `gate` (one gate per commit, opened by the test). */
const harness = (budgets: { maxBatchBytes: number; maxQueuedBytes: number }) =>
  Effect.gen(function*() {
    const batches: Array<ReadonlyArray<number>> = []
    const gates: Array<Deferred.Deferred<void>> = []
    const writer = yield* makeGroupCommit<Op>({
      commit: (ops) =>
        Effect.gen(function*() {
          batches.push(ops.map((o) => o.id))
          const gate = yield* Deferred.make<void>()
          gates.push(gate)
          yield* Deferred.await(gate)
        }),
      sizeOf: (op) => op.bytes,
      ...budgets
    })
    /** Opens the oldest unopened gate once a commit is waiting on it. */
    const release = Effect.gen(function*() {
      while (gates.length === 0) yield* Effect.yieldNow()
      yield* Deferred.succeed(gates.shift()!, undefined)
      yield* Effect.yieldNow()
    })
    return { writer, batches, release }
  })

describe("makeGroupCommit budgets", () => {
  it.scoped("a batch takes ops up to maxBatchBytes (at least one); ops without bytes never wait", () =>
    Effect.gen(function*() {
      const { batches, release, writer } = yield* harness({ maxBatchBytes: 10, maxQueuedBytes: 1000 })
      // the first op starts a commit alone; the rest queue behind it
      const first = yield* Effect.fork(writer.submit({ id: 0, bytes: 4 }))
      yield* Effect.yieldNow()
      const rest = yield* Effect.fork(Effect.forEach(
        [{ id: 1, bytes: 4 }, { id: 2, bytes: 4 }, { id: 3, bytes: 4 }, { id: 4, bytes: 30 }, { id: 5, bytes: 0 }],
        (op) => writer.submit(op),
        { concurrency: "unbounded", discard: true }
      ))
      for (let i = 0; i < 4; i++) yield* release
      yield* Fiber.join(first)
      yield* Fiber.join(rest)
      assert.deepStrictEqual(batches, [[0], [1, 2], [3], [4, 5]])
    }))

  it.scoped("submitters wait while the bytes queued or being committed exceed maxQueuedBytes, in arrival order", () =>
    Effect.gen(function*() {
      const { batches, release, writer } = yield* harness({ maxBatchBytes: 100, maxQueuedBytes: 10 })
      const done: Array<number> = []
      const submit = (op: Op) => Effect.fork(Effect.tap(writer.submit(op), () => Effect.sync(() => done.push(op.id))))
      const a = yield* submit({ id: 0, bytes: 8 }) // committing: 8 bytes held
      yield* Effect.yieldNow()
      const b = yield* submit({ id: 1, bytes: 8 }) // 16 > 10: waits outside the queue
      const c = yield* submit({ id: 2, bytes: 0 }) // no bytes: queued at once
      const d = yield* submit({ id: 3, bytes: 1 }) // behind a waiter: waits too (arrival order)
      yield* Effect.yieldNow()
      assert.deepStrictEqual(batches, [[0]])
      yield* release // commits 0; room for 1 and 3 (9 bytes)
      yield* release // commits [2, 1, 3]
      yield* Fiber.join(Fiber.zip(Fiber.zip(a, b), Fiber.zip(c, d)))
      assert.deepStrictEqual(batches, [[0], [2, 1, 3]])
      assert.strictEqual(writer.queuedBytes(), 0)
      // an op alone larger than the budget still goes through (into an empty queue)
      const big = yield* Effect.fork(writer.submit({ id: 9, bytes: 50 }))
      yield* release
      yield* Fiber.join(big)
      assert.deepStrictEqual(batches[2], [9])
      assert.deepStrictEqual(done.slice(0, 1), [0])
    }))
})
