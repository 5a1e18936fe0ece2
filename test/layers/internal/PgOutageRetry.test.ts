/**
 * The Postgres store's retry of transient failures keeps one budget per outage, not per
 * operation (src/layers/internal/pg/driver.ts `outageRetry`): once an outage outlasted the
 * retry window, the operations that follow in it (closing a run, marking its pipelines) fail at
 * once instead of waiting a whole window each; an answer from the database ends the outage.
 * All on the TestClock.
 */
import { SqlError } from "@effect/sql/SqlError"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option, TestClock } from "effect"
import { outageRetry } from "../../../src/layers/internal/pg/driver.js"

/** A transient failure (serialization failure, retried) and a permanent one (unique violation). */
const transient = () => new SqlError({ cause: { code: "40001" }, message: "could not serialize access" })
const permanent = () => new SqlError({ cause: { code: "23505" }, message: "duplicate key" })

/** An operation failing with `error()` until `ok()` says the database is back; counts its attempts. */
const operation = (error: () => SqlError, ok: () => boolean = () => false) => {
  let attempts = 0
  const effect = Effect.suspend(() => {
    attempts++
    return ok() ? Effect.succeed("answered") : Effect.fail(error())
  })
  return { effect, attempts: () => attempts }
}

describe("PgStore: the retry budget is one per outage", () => {
  it.effect("an operation after an outage outlasted the window fails at its first transient failure", () =>
    Effect.gen(function*() {
      const retrying = outageRetry("30 seconds")
      const first = operation(transient)
      const f1 = yield* Effect.fork(retrying(first.effect))
      yield* TestClock.adjust("29 seconds")
      assert.isTrue(Option.isNone(yield* Fiber.poll(f1)), "still retrying inside the window")
      yield* TestClock.adjust("5 seconds")
      const exit1 = yield* Fiber.await(f1)
      assert.isTrue(Exit.isFailure(exit1))
      assert.isAbove(first.attempts(), 5)
      // the run's closing operations, in the same outage: no second window each
      const second = operation(transient)
      const f2 = yield* Effect.fork(retrying(second.effect))
      yield* TestClock.adjust("1 millis")
      const exit2 = yield* Fiber.poll(f2)
      assert.isTrue(Option.isSome(exit2) && Exit.isFailure(exit2.value), "failed at once")
      assert.strictEqual(second.attempts(), 1)
    }))

  it.effect("operations retrying side by side share the window from the outage's first failure", () =>
    Effect.gen(function*() {
      const retrying = outageRetry("10 seconds")
      const a = operation(transient)
      const fa = yield* Effect.fork(retrying(a.effect))
      yield* TestClock.adjust("6 seconds")
      const b = operation(transient)
      const fb = yield* Effect.fork(retrying(b.effect))
      yield* TestClock.adjust("6 seconds")
      // a: 12 s after the outage began; b: only 6 s after its own first failure, same outage
      assert.isTrue(Exit.isFailure(yield* Fiber.await(fa)))
      assert.isTrue(Exit.isFailure(yield* Fiber.await(fb)))
      assert.isAbove(b.attempts(), 1)
    }))

  it.effect("an answer from the database ends the outage: the next failure gets the whole window", () =>
    Effect.gen(function*() {
      const retrying = outageRetry("10 seconds")
      let up = false
      const first = operation(transient, () => up)
      const f1 = yield* Effect.fork(retrying(first.effect))
      yield* TestClock.adjust("4 seconds")
      up = true
      yield* TestClock.adjust("3 seconds")
      assert.deepStrictEqual(yield* Fiber.join(f1), "answered")
      // a permanent failure is an answer too; then a new outage 1 s later
      assert.isTrue(Exit.isFailure(yield* Effect.exit(retrying(operation(permanent).effect))))
      yield* TestClock.adjust("1 second")
      const next = operation(transient)
      const f2 = yield* Effect.fork(retrying(next.effect))
      yield* TestClock.adjust("8 seconds")
      assert.isTrue(Option.isNone(yield* Fiber.poll(f2)), "a new outage: retried for its whole window")
      assert.isAbove(next.attempts(), 1)
      yield* TestClock.adjust("5 seconds")
      assert.isTrue(Exit.isFailure(yield* Fiber.await(f2)))
    }))

  it.effect("an outage nothing met for a while is forgotten: a later failure gets the whole window", () =>
    Effect.gen(function*() {
      const retrying = outageRetry("10 seconds")
      const f1 = yield* Effect.fork(retrying(operation(transient).effect))
      yield* TestClock.adjust("12 seconds")
      assert.isTrue(Exit.isFailure(yield* Fiber.await(f1)))
      yield* TestClock.adjust("1 minute") // no operation asked the database meanwhile
      const later = operation(transient)
      const f2 = yield* Effect.fork(retrying(later.effect))
      yield* TestClock.adjust("3 seconds")
      assert.isTrue(Option.isNone(yield* Fiber.poll(f2)))
      assert.isAbove(later.attempts(), 1)
      yield* Fiber.interrupt(f2)
    }))

  it.effect("a window of 0 never retries", () =>
    Effect.gen(function*() {
      const once = operation(transient)
      assert.isTrue(Exit.isFailure(yield* Effect.exit(outageRetry(0)(once.effect))))
      assert.strictEqual(once.attempts(), 1)
    }))
})
