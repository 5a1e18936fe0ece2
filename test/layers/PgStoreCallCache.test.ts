/**
 * The call cache of a Postgres store (`PgCallCache`, table `assay_call_cache`): what a run
 * cached is there for the next run and for every other process on the database; a write
 * replaces its key; an unmigrated database is refused naming `assay migrate`. One throwaway
 * server for the file (test/support/postgres.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import * as PgCallCache from "../../src/layers/PgCallCache.js"
import * as PgStore from "../../src/layers/PgStore.js"
import type { CacheEntry } from "../../src/services/CallCache.js"
import { usePostgres } from "../support/postgres.js"

const pg = usePostgres()

const entry = (key: string, text: string, createdAt: number): CacheEntry => ({
  key,
  taskName: "ask",
  namespace: { experiment: "e1" } as unknown as CacheEntry["namespace"],
  typeName: "Json",
  codec: "json",
  data: new Uint8Array(Buffer.from(JSON.stringify({ content: text }))),
  usage: { promptTokens: 3, completionTokens: 5, totalTokens: 8 },
  createdAt
})

describe("PgCallCache", { timeout: 120_000 }, () => {
  it.live("an entry written by one process's cache is read back whole by another's; a write replaces its key", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("cache1"))
      const url = pg.url("cache1")
      yield* PgStore.migrate(url)
      // two caches on their own clients: two runs, or two runners
      const [a, b] = yield* Effect.scoped(Effect.gen(function*() {
        const first = yield* PgCallCache.make({ url })
        assert.strictEqual(first.kind, "postgres")
        assert.deepStrictEqual(yield* first.get("k1"), Option.none())
        yield* first.put(entry("k1", "hello", 1000))
        yield* first.put(entry("k2", "other", 1001))
        return [yield* first.size, yield* first.get("k1")] as const
      }))
      assert.strictEqual(a, 2)
      assert.isTrue(Option.isSome(b))
      yield* Effect.scoped(Effect.gen(function*() {
        const second = yield* PgCallCache.make({ url })
        const got = yield* second.get("k1")
        assert.isTrue(Option.isSome(got))
        const e = Option.getOrThrow(got)
        assert.deepStrictEqual(
          { ...e, data: Buffer.from(e.data).toString("utf8") },
          { ...entry("k1", "hello", 1000), data: JSON.stringify({ content: "hello" }) }
        )
        yield* second.put({ ...entry("k1", "newer", 2000), usage: null })
        const replaced = Option.getOrThrow(yield* second.get("k1"))
        assert.strictEqual(Buffer.from(replaced.data).toString("utf8"), JSON.stringify({ content: "newer" }))
        assert.strictEqual(replaced.createdAt, 2000)
        assert.isNull(replaced.usage)
        assert.strictEqual(yield* second.size, 2)
      }))
    }))

  it.live("a database without the cache table is refused with a ConfigError naming `assay migrate`", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("cache2"))
      const exit = yield* Effect.exit(Effect.scoped(PgCallCache.make({ url: pg.url("cache2") })))
      assert.isTrue(Exit.isFailure(exit))
      const e = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      assert.strictEqual(Option.getOrThrow(e)._tag, "ConfigError")
      assert.match(Option.getOrThrow(e).message, /assay migrate --database/)
    }))
})
