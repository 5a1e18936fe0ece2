/**
 * The runner's watchdogs (docs/scale-out.md, "Supervising runners"), on the test clock with
 * short durations: a database that stops answering ends the runner after `lostAfter` (not
 * before; a database that comes back resets the count), a message left unread on the
 * runner's shards a whole `stallAfter` period ends it (messages that move on do not), and the
 * durations come from the environment.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Exit, Fiber, Option, Ref, TestClock } from "effect"
import * as CancelMarks from "../../src/services/internal/cluster/cancelMarks.js"
import * as Watchdog from "../../src/services/internal/cluster/watchdog.js"

const short = Watchdog.settings(Duration.seconds(30), Duration.seconds(20))

describe("runner watchdogs", () => {
  it.effect("the database lost: fails after lostAfter without an answer, never earlier; an answer resets the count", () =>
    Effect.gen(function*() {
      assert.strictEqual(Duration.toMillis(short.pingEvery), 10_000)
      const up = yield* Ref.make(true)
      const ping = Effect.flatMap(Ref.get(up), (ok) => ok ? Effect.void : Effect.fail("down"))
      const fiber = yield* Effect.fork(Watchdog.databaseLost(ping, short, "postgres://db/x"))
      yield* TestClock.adjust("5 minutes")
      assert.isNull(fiber.unsafePoll(), "an answering database is never given up")
      yield* Ref.set(up, false)
      yield* TestClock.adjust("20 seconds")
      assert.isNull(fiber.unsafePoll(), "20 s without an answer: still waiting")
      // back for one ping: the count starts again
      yield* Ref.set(up, true)
      yield* TestClock.adjust("10 seconds")
      yield* Ref.set(up, false)
      yield* TestClock.adjust("20 seconds")
      assert.isNull(fiber.unsafePoll(), "20 s since the last answer")
      yield* TestClock.adjust("10 seconds")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(exit)
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.match(error.message, /postgres:\/\/db\/x has not answered for 30 s/)
    }))

  it.effect("a ping that hangs counts as no answer", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.fork(Watchdog.databaseLost(Effect.never, short, "db"))
      yield* TestClock.adjust("25 seconds")
      assert.isNull(fiber.unsafePoll())
      yield* TestClock.adjust("30 seconds")
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.strictEqual(error._tag, "StoreUnavailable")
    }))

  it.effect("stalled shards: a message unread for a whole period ends the runner; messages that move on do not", () =>
    Effect.gen(function*() {
      const lists = yield* Ref.make<ReadonlyArray<ReadonlyArray<string>>>([["m1", "m2"], ["m3"], [], ["m4"], ["m4", "m5"]])
      const unread = Effect.map(
        Ref.modify(lists, (ls) => [ls[0] ?? [], ls.slice(1)]),
        (ids) => ({ shards: 7, ids })
      )
      const fiber = yield* Effect.fork(Watchdog.shardsStalled(unread, short))
      yield* TestClock.adjust("80 seconds") // four checks: every list differs from the one before
      assert.isNull(fiber.unsafePoll())
      yield* TestClock.adjust("20 seconds") // m4 was already unread at the previous check
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.strictEqual(error._tag, "ShardsStalled")
      assert.match(error.message, /1 message\(s\) on this runner's 7 shard\(s\) waited more than 20s unread/)
    }))

  it.effect("durations from the environment; defaults when unset; a bad value names the variable", () =>
    Effect.gen(function*() {
      const withEnv = (env: Record<string, string>) =>
        Effect.withConfigProvider(Watchdog.settingsFromEnv, ConfigProvider.fromMap(new Map(Object.entries(env))))
      const unset = yield* withEnv({})
      assert.strictEqual(Duration.toMillis(unset.lostAfter), 90_000)
      assert.strictEqual(Duration.toMillis(unset.stallAfter), 180_000)
      assert.strictEqual(Duration.toMillis(unset.pingEvery), 10_000)
      const set = yield* withEnv({ ASSAY_RUNNER_DB_LOST_AFTER: "6 seconds", ASSAY_RUNNER_STALL_AFTER: "15 seconds" })
      assert.strictEqual(Duration.toMillis(set.lostAfter), 6_000)
      assert.strictEqual(Duration.toMillis(set.stallAfter), 15_000)
      assert.strictEqual(Duration.toMillis(set.pingEvery), 2_000)
      for (const bad of ["soon", "0 seconds"]) {
        const error = yield* Effect.flip(withEnv({ ASSAY_RUNNER_STALL_AFTER: bad }))
        assert.deepStrictEqual(error.issues.map((i) => i.path), ["ASSAY_RUNNER_STALL_AFTER"])
      }
    }))

  it.effect("how often a runner reads its runs' cancel marks: ASSAY_RUNNER_CANCEL_EVERY, unset = the heartbeat; a bad value names it", () =>
    Effect.gen(function*() {
      const withEnv = (env: Record<string, string>) =>
        Effect.withConfigProvider(CancelMarks.cancelEveryFromEnv, ConfigProvider.fromMap(new Map(Object.entries(env))))
      assert.isTrue(Option.isNone(yield* withEnv({})))
      const set = yield* withEnv({ ASSAY_RUNNER_CANCEL_EVERY: "2 seconds" })
      assert.strictEqual(Option.map(set, Duration.toMillis).pipe(Option.getOrUndefined), 2_000)
      for (const bad of ["soon", "0 seconds", "5"]) {
        const error = yield* Effect.flip(withEnv({ ASSAY_RUNNER_CANCEL_EVERY: bad }))
        assert.deepStrictEqual(error.issues.map((i) => i.path), ["ASSAY_RUNNER_CANCEL_EVERY"])
      }
    }))
})
