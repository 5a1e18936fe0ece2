/**
 * OUT is never a database, from the library as from the CLI: `Export.exportStores`,
 * `Merge.mergeReports(...).export` and a run report's `exportJsonl` refuse to write over their
 * own input store, over a store open in the process, or over any existing SQLite file
 * (`ConfigError`), and the database is left as it was.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { Export, Merge, Pipeline, Pool, Runner, SqliteStore, StoreResolver, Task } from "../../src/index.js"
import { isSqliteFile } from "../../src/services/StoreFiles.js"
import { buildStore, storeFixture, tmpDir } from "./ExportFixture.js"

const dir = tmpDir()
const a = nodePath.join(dir, "a.db")
const other = nodePath.join(dir, "other.db")
const Built = storeFixture(Effect.all([buildStore(a, [{ n: 5 }]), buildStore(other, [{ n: 3 }])]))

const isSqlite = (file: string) => fs.existsSync(file) && isSqliteFile(file)
const refused = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.either(effect), (result) => {
    assert.isTrue(Either.isLeft(result), "the write was refused")
    const error = (result as Either.Left<E, A>).left as { _tag?: string; message?: string }
    assert.strictEqual(error._tag, "ConfigError")
    return error.message ?? ""
  })

layer(Built, { excludeTestServices: true })("OUT is never a database (library)", (it) => {
  it.effect("Export.exportStores refuses its own input and any other SQLite file", () =>
    Effect.gen(function*() {
      const self = yield* refused(Export.exportStores([a], a, { kind: "results", format: "jsonl" }))
      assert.include(self, "input store")
      const over = yield* refused(Export.exportStores([a], other, { kind: "results", format: "jsonl" }))
      assert.include(over, "SQLite")
      assert.isTrue(isSqlite(a) && isSqlite(other), "both databases untouched")
      // a plain file is fine
      const out = nodePath.join(dir, "out.jsonl")
      assert.isAbove(yield* Export.exportStores([a], out, { kind: "results", format: "jsonl" }), 0)
    }).pipe(Effect.provide(StoreResolver.layerOpener())))

  it.effect("a merged report's export refuses its input store", () =>
    Effect.gen(function*() {
      const merged = yield* Merge.mergeReports([a])
      const message = yield* refused(merged.export(a, { format: "jsonl" }))
      assert.include(message, "input store")
      assert.isTrue(isSqlite(a))
    }).pipe(Effect.provide(StoreResolver.layerOpener())))
})

layer(Layer.empty, { excludeTestServices: true })("OUT is never a database (a run's report)", (it) => {
  it.effect("exportJsonl refuses the run's own store (open in this process) and another SQLite file", () =>
    Effect.gen(function*() {
      const runDir = tmpDir()
      const store = nodePath.join(runDir, "run.db")
      const inc = Task.sync("inc", (n: number) => n + 1)
      yield* Effect.gen(function*() {
        const report = yield* Runner.run(Pipeline.make("guard", inc).map([1, 2, 3]))
        const own = yield* refused(report.exportJsonl(store))
        assert.include(own, "open in this process")
        const over = yield* refused(report.exportJsonl(other))
        assert.include(over, "SQLite")
      }).pipe(Effect.provide(Layer.provideMerge(
        Runner.layer({ handleSignals: false }),
        Layer.merge(SqliteStore.layer({ filename: store }), Pool.layer([]))
      )))
      assert.isTrue(isSqlite(store) && isSqlite(other))
    }))
})
