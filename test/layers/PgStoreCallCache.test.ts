/**
 * The call cache of a Postgres store (`PgCallCache`, table `assay_call_cache`): what a run
 * cached is there for the next run and for every other process on the database; a write
 * replaces its key (`putFirst` keeps the first answer); an unmigrated database is refused naming `assay migrate`; a runner over
 * `PgStore.layer` uses that table by default (the store's own cache), a provided `CallCache`
 * layer wins. One throwaway server for the file (test/support/postgres.ts).
 */
import { assert, describe, it, expect } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import * as PgCallCache from "../../src/layers/PgCallCache.js"
import * as PgStore from "../../src/layers/PgStore.js"
import * as CallCache from "../../src/services/CallCache.js"
import type { CacheEntry } from "../../src/services/CallCache.js"
import { usePostgres } from "../support/postgres.js"
import { counter, runOnce } from "../support/cacheCounter.js"

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
        expect(yield* first.get("k1")).toStrictEqual(Option.none())
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

  it.live("putFirst keeps the first answer across clients (two processes agree); an expired one is replaced (tester18g F1)", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("cachefirst"))
      const url = pg.url("cachefirst")
      yield* PgStore.migrate(url)
      yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* PgCallCache.make({ url })
        const b = yield* PgCallCache.make({ url })
        const text = (e: CacheEntry) => Buffer.from(e.data).toString("utf8")
        const first = entry("k", "first", 1000)
        assert.strictEqual(yield* CallCache.putFirst(a, first, null), first, "stored: the entry itself")
        const kept = yield* CallCache.putFirst(b, entry("k", "second", 2000), null)
        assert.strictEqual(text(kept), JSON.stringify({ content: "first" }))
        assert.strictEqual(kept.createdAt, 1000)
        assert.strictEqual(text(Option.getOrThrow(yield* b.get("k"))), JSON.stringify({ content: "first" }))
        // within the TTL kept; past it replaced
        assert.strictEqual(text(yield* CallCache.putFirst(b, entry("k", "third", 1500), 1000)), JSON.stringify({ content: "first" }))
        const fourth = entry("k", "fourth", 2000)
        assert.strictEqual(yield* CallCache.putFirst(b, fourth, 1000), fourth)
        assert.strictEqual(text(Option.getOrThrow(yield* a.get("k"))), JSON.stringify({ content: "fourth" }))
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


const cacheRows = (database: string) => Effect.sync(() => Number(pg.psql(database, "SELECT count(*) FROM assay_call_cache").trim()))

describe("Postgres store: the run's call cache", { timeout: 120_000 }, () => {
  it.live("with no cache layer, a runner over PgStore keeps its cache in the database: a second build makes 0 calls", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("runner1"))
      const url = pg.url("runner1")
      yield* PgStore.migrate(url)
      const model = counter()
      yield* runOnce(model, PgStore.layer({ url }))
      assert.strictEqual(model.calls(), 3)
      assert.strictEqual(yield* cacheRows("runner1"), 3, "the outputs are in the database's assay_call_cache")
      const second = yield* runOnce(model, PgStore.layer({ url }))
      assert.strictEqual(model.calls(), 3, "a new build of the layers (a new process) is served from the database")
      assert.strictEqual(second.stats.byState.succeeded, 3)
    }))

  it.live("a cache layer provided beside the store wins over the store's own cache", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("runner2"))
      const url = pg.url("runner2")
      yield* PgStore.migrate(url)
      const model = counter()
      yield* runOnce(model, Layer.mergeAll(PgStore.layer({ url }), CallCache.layerMemory))
      yield* runOnce(model, Layer.mergeAll(PgStore.layer({ url }), CallCache.layerMemory))
      assert.strictEqual(model.calls(), 6, "each build has its own memory cache")
      assert.strictEqual(yield* cacheRows("runner2"), 0, "nothing was written to the store's table")
    }))
})
