/**
 * The group-commit writer, a hand-written primitive kept for speed: batches bounded in bytes as
 * well as in ops, submitters of payload-carrying ops held back while the bytes queued or being
 * committed exceed the budget (issue 19 §3); batching, durability and failure on the clock
 * (TestClock, issue 12 §8); one span per batch (issue 12 §9).
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Context, DefaultServices, Deferred, Effect, Either, Exit, Fiber, Scope, TestClock, Tracer } from "effect"
import { StoreUnavailable } from "../../../../src/domain/Errors.js"
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

describe("makeGroupCommit on the clock", () => {
  /**
   * Commits that take 10 ms of (test) clock each: what arrives while one commits goes into the
   * next batch, whole; a caller resumes only once its own batch has committed; a failed batch
   * fails exactly its callers; closing the scope commits what is still queued.
   */
  it.effect("batches form while a commit runs; callers resume with their batch; failures stay in their batch", () =>
    Effect.gen(function*() {
      const batches: Array<ReadonlyArray<number>> = []
      const committedAt: Array<number> = []
      const scope = yield* Scope.make()
      const writer = yield* Scope.extend(
        makeGroupCommit<Op>({
          commit: (ops) =>
            Effect.gen(function*() {
              batches.push(ops.map((o) => o.id))
              yield* Effect.sleep("10 millis")
              committedAt.push(yield* Clock.currentTimeMillis)
              if (ops.some((o) => o.id === 13)) {
                return yield* Effect.fail(new StoreUnavailable({ message: "disk full" }))
              }
            })
        }),
        scope
      )
      const submit = (id: number) => Effect.fork(Effect.either(writer.submit({ id, bytes: 0 })))
      const first = yield* submit(1)
      yield* Effect.yieldNow()
      // while 1 commits (t = 0..10), 2, 3 and 13 queue
      const rest = yield* Effect.forEach([2, 3, 13], submit)
      yield* Effect.yieldNow()
      assert.deepStrictEqual(batches, [[1]])
      yield* TestClock.adjust("9 millis")
      assert.isNull(first.unsafePoll(), "not durable before its commit ends")
      yield* TestClock.adjust("1 millis")
      assert.isTrue(Either.isRight(yield* Fiber.join(first)))
      // the next batch took everything queued, in arrival order
      assert.deepStrictEqual(batches, [[1], [2, 3, 13]])
      yield* TestClock.adjust("10 millis")
      const results = yield* Effect.forEach(rest, Fiber.join)
      assert.deepStrictEqual(results.map((r) => Either.isLeft(r) ? r.left.message : "ok"), ["disk full", "disk full", "disk full"])
      assert.deepStrictEqual(committedAt, [10, 20])
      // a later batch is unaffected by the failed one; the scope's close commits what is queued
      const late = yield* submit(4)
      yield* Effect.yieldNow()
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* TestClock.adjust("10 millis")
      yield* Fiber.join(closing)
      assert.isTrue(Either.isRight(yield* Fiber.join(late)))
      assert.deepStrictEqual(batches, [[1], [2, 3, 13], [4]])
      // after close, submissions are refused
      const refused = yield* Effect.either(writer.submit({ id: 5, bytes: 0 }))
      assert.isTrue(Either.isLeft(refused))
    }))
})

/** A tracer that records every span it starts (name, `ops` attribute) and delegates to Effect's own. */
const recordingTracer = (seen: Array<readonly [string, unknown]>) => {
  const native = Context.get(DefaultServices.liveServices, Tracer.Tracer)
  return Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      const span = native.span(name, parent, context, links, startTime, kind, options)
      const attribute = span.attribute.bind(span)
      seen.push([name, undefined])
      const at = seen.length - 1
      span.attribute = (key, value) => {
        if (key === "ops") seen[at] = [name, value]
        attribute(key, value)
      }
      for (const [key, value] of Object.entries(options?.attributes ?? {})) if (key === "ops") seen[at] = [name, value]
      return span
    },
    context: native.context
  })
}

describe("makeGroupCommit tracing", () => {
  const twoBatches = (seen: Array<readonly [string, unknown]>) =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const writer = yield* makeGroupCommit<Op>({
        commit: (ops) => (ops[0]!.id === 0 ? Deferred.await(gate) : Effect.void)
      })
      const first = yield* Effect.fork(writer.submit({ id: 0, bytes: 0 }))
      yield* Effect.yieldNow()
      const rest = yield* Effect.fork(Effect.forEach([1, 2], (id) => writer.submit({ id, bytes: 0 }), { concurrency: "unbounded" }))
      yield* Effect.yieldNow()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Fiber.join(rest)
      return seen.filter(([name]) => name === "Store.groupCommit")
    })

  it.scoped("with a tracer installed, each batch commits in its own span Store.groupCommit, with its op count", () =>
    Effect.gen(function*() {
      const seen: Array<readonly [string, unknown]> = []
      const spans = yield* twoBatches(seen).pipe(Effect.withTracer(recordingTracer(seen)))
      assert.deepStrictEqual(spans, [["Store.groupCommit", 1], ["Store.groupCommit", 2]])
    }))

  it.scoped("with Effect's default tracer (nobody collects spans), batches make no span", () =>
    Effect.gen(function*() {
      const spans: Array<string> = []
      const gate = yield* Deferred.make<void>()
      const writer = yield* makeGroupCommit<Op>({
        commit: () =>
          Effect.flatMap(Effect.option(Effect.currentSpan), (span) =>
            Effect.sync(() => {
              if (span._tag === "Some") spans.push(span.value.name)
            })).pipe(Effect.zipRight(Deferred.succeed(gate, undefined)), Effect.asVoid)
      })
      yield* writer.submit({ id: 0, bytes: 0 })
      yield* Deferred.await(gate)
      assert.deepStrictEqual(spans, [])
    }))
})

describe("makeGroupCommit spent ops", () => {
  /**
   * `spent` sees each op of a batch once, in batch order, only after every submitter of that
   * batch has been resumed: for a batch that commits, one that refuses an op, and one that
   * fails (the store front empties its ops there, see `front.ts`'s `spend`).
   */
  it.scoped("spent is called once per op, in batch order, after the batch's submitters have resumed", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const writer = yield* makeGroupCommit<Op>({
        commit: (ops) =>
          Effect.suspend(() => {
            log.push(`commit ${ops.map((o) => o.id).join(",")}`)
            if (ops.some((o) => o.id === 13)) return Effect.fail(new StoreUnavailable({ message: "disk full" }))
            const refused = ops.findIndex((o) => o.id === 7)
            return Effect.succeed(refused < 0 ? undefined : [[refused, new StoreUnavailable({ message: "refused" })] as const])
          }),
        spent: (op) => void log.push(`spent ${op.id}`)
      })
      const submit = (id: number) =>
        writer.submitNow({ id, bytes: 0 }, (exit) => void log.push(`${Exit.isSuccess(exit) ? "done" : "failed"} ${id}`))
      /** Lets the writer take and commit what is queued. */
      const settle = Effect.gen(function*() {
        for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      })
      // one batch commits; the next refuses 7; the last fails whole
      submit(1)
      yield* settle
      submit(2)
      submit(7)
      submit(3)
      yield* settle
      submit(13)
      submit(4)
      yield* settle
      assert.deepStrictEqual(log, [
        "commit 1",
        "done 1",
        "spent 1",
        "commit 2,7,3",
        "done 2",
        "failed 7",
        "done 3",
        "spent 2",
        "spent 7",
        "spent 3",
        "commit 13,4",
        "failed 13",
        "failed 4",
        "spent 13",
        "spent 4"
      ])
    }))

  it.scoped("without spent, ops are left as they were", () =>
    Effect.gen(function*() {
      const writer = yield* makeGroupCommit<{ id: number; payload: Array<number> | undefined }>({ commit: () => Effect.void })
      const op = { id: 1, payload: [1, 2] }
      yield* writer.submit(op)
      assert.deepStrictEqual(op, { id: 1, payload: [1, 2] })
    }))
})
