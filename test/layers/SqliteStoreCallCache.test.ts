/**
 * The call cache of a runner over an SQLite store lives in the store's file by default, and a
 * cache layer on the store's own file works whatever the order the layers are built in.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as CallCache from "../../src/services/CallCache.js"
import { counter, runOnce } from "../support/cacheCounter.js"

const tempFile = () => NodePath.join(fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-storecache-")), "state.db")


const cacheRows = (file: string): number => {
  const db = new Database(file, { readonly: true })
  try {
    return (db.prepare("SELECT count(*) AS n FROM call_cache").get() as { n: number }).n
  } finally {
    db.close()
  }
}

describe("SQLite store: the run's call cache", () => {
  it.live("with no cache layer, a runner over an SQLite store keeps its cache in the store's file: a second build makes 0 calls", () =>
    Effect.gen(function*() {
      const file = tempFile()
      const model = counter()
      yield* runOnce(model, SqliteStore.layer({ filename: file }))
      assert.strictEqual(model.calls(), 3)
      assert.strictEqual(cacheRows(file), 3, "the outputs are in the store's call_cache table")
      const second = yield* runOnce(model, SqliteStore.layer({ filename: file }))
      assert.strictEqual(model.calls(), 3, "a new build of the layers (a new process) is served from the file")
      assert.strictEqual(second.stats.byState.succeeded, 3)
    }))

  it.live("a cache layer provided beside the store wins over the store's own cache", () =>
    Effect.gen(function*() {
      const file = tempFile()
      const model = counter()
      const stores = Layer.mergeAll(SqliteStore.layer({ filename: file }), CallCache.layerMemory)
      yield* runOnce(model, stores)
      yield* runOnce(model, Layer.mergeAll(SqliteStore.layer({ filename: file }), CallCache.layerMemory))
      assert.strictEqual(model.calls(), 6, "each build has its own memory cache")
      assert.strictEqual(cacheRows(file), 0, "nothing was written to the store's table")
    }))

  for (const order of ["cache first", "store first"] as const) {
    it.live(`SqliteCallCache on the store's own file, ${order}: the store opens, the second build makes 0 calls`, () =>
      Effect.gen(function*() {
        const file = tempFile()
        const model = counter()
        const build = () => {
          const store = SqliteStore.layer({ filename: file })
          const cache = SqliteCallCache.layer({ filename: file, shared: false })
          return order === "cache first" ? Layer.mergeAll(cache, store) : Layer.mergeAll(store, cache)
        }
        yield* runOnce(model, build())
        yield* runOnce(model, build())
        assert.strictEqual(model.calls(), 3)
        // and the file is a store every later open accepts
        yield* runOnce(model, SqliteStore.layer({ filename: file }))
        assert.strictEqual(model.calls(), 3)
        assert.strictEqual(cacheRows(file), 3)
      }))
  }

  it.live("a file holding only assay's call cache table (a cache opened there first) is made a store, its entries kept", () =>
    Effect.gen(function*() {
      const file = tempFile()
      const model = counter()
      // an earlier process used the path as a cache before any store was opened on it
      yield* runOnce(model, Layer.mergeAll(SqliteStore.layer({ filename: tempFile() }), SqliteCallCache.layer({ filename: file, shared: false })))
      assert.strictEqual(model.calls(), 3)
      yield* runOnce(model, SqliteStore.layer({ filename: file }))
      assert.strictEqual(model.calls(), 3, "the store opened on it and serves the entries")
    }))

  it.live("another application's database is still refused", () =>
    Effect.gen(function*() {
      const file = tempFile()
      const db = new Database(file)
      db.exec("CREATE TABLE call_cache (x); CREATE TABLE notes (y)")
      db.close()
      const error = yield* Effect.flip(runOnce(counter(), SqliteStore.layer({ filename: file })))
      assert.include(String((error as { message?: unknown }).message), "another application")
    }))
})
