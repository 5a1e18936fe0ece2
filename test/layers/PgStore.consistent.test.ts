/**
 * `Store.consistentReads` on Postgres: one `/stats` picture read in one REPEATABLE READ, READ
 * ONLY transaction, so that a writer (another client, as another runner of the run would be)
 * committing between the picture's reads does not make its totals and per-resource sums
 * disagree (issue 18 trial; SQLite and memory: `test/services/Monitor.consistent.test.ts`).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as PgStore from "../../src/layers/PgStore.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { checkPictureWithWriteBetween } from "../support/consistentPicture.js"
import { rid } from "../support/ids.js"
import { callAttempt, recordCall } from "../support/usageFixture.js"
import { usePostgres } from "../support/postgres.js"

const pg = usePostgres()

const open = (options: PgStore.PgStoreOptions) =>
  Effect.map(Layer.build(PgStore.layer(options)), (ctx) => ctx.unsafeMap.get(Store.key) as StoreService)

describe("PgStore: one consistent picture", () => {
  it.live("a writer (another client) committing between the picture's reads: totals, per-state counts and per-resource sums agree", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("picture"))
      const url = pg.url("picture")
      yield* PgStore.migrate(url)
      const writer = yield* open({ url })
      const reader = yield* open({ url })
      yield* checkPictureWithWriteBetween(writer, reader, "written")
    })), 120_000)

  it.live("a fact buffered inside the view is not written in its read-only transaction: flushed before the view and after it", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("picture_flush"))
      const url = pg.url("picture_flush")
      yield* PgStore.migrate(url)
      const store = yield* open({ url, flushIntervalMs: 3_600_000 })
      yield* store.openRun({ runId: rid("r1"), startedAt: 1_000 })
      const call = (n: number) => ({ pipeline: `p${n}`, runId: "r1", at: 1_000 + n, leaseId: `llm/a#${n}`, tokensIn: 1, tokensOut: 1, costUsd: null })
      // buffered (write-behind) when the view begins: in it
      yield* recordCall(store, call(0))
      const inView = yield* store.consistentReads!(Effect.gen(function*() {
        // buffered inside the view: `stats` (a flush-before-read) must not write it there
        yield* store.recordAttempt(callAttempt(call(1)))
        return yield* store.stats(rid("r1"))
      }))
      assert.strictEqual(inView.attemptsTotal, 1)
      yield* store.flush
      assert.strictEqual((yield* store.stats(rid("r1"))).attemptsTotal, 2)
    })), 120_000)
})
