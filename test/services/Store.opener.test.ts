/**
 * One way to open a store read-only (issue 12 §4): `Export`, `Report` and `Merge` open their
 * store arguments through the `StoreOpener` in context, so the library takes `file:` URIs and
 * plugin stores exactly as the CLI does (before, they took SQLite paths only: a `file:` URI was
 * opened as a relative path named `file:/…`, a plugin URI likewise).
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { pathToFileURL } from "node:url"
import * as Plugins from "../../src/layers/Plugins.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as StoreResolver from "../../src/layers/StoreResolver.js"
import * as Export from "../../src/services/Export.js"
import * as Merge from "../../src/services/Merge.js"
import * as Report from "../../src/services/Report.js"
import { StoreOpener } from "../../src/services/Store.js"
import { buildStore, tmpDir } from "./ExportFixture.js"

const dir = tmpDir()
const file = nodePath.join(dir, "o.db")
/** The store file, built once for this file's tests (a `layer()` fixture). */
const Built = Layer.effectDiscard(buildStore(file, [{ n: 7, failEvery: 7 }]))

/** A plugin whose `demo://` scheme opens the SQLite file named by the URI's path, read-only. */
const registry: Plugins.PluginRegistry = {
  ...Plugins.empty,
  stores: new Map([[
    "demo",
    {
      plugin: "demo-plugin",
      factory: (uri, o) => {
        assert.isTrue(o.readOnly)
        return SqliteStore.layerWith({ filename: uri.pathname, readonly: true })
      }
    }
  ]])
}

layer(Built, { excludeTestServices: true })("StoreOpener", (it) => {
  it.effect("Report, Merge and Export take a file: URI", () =>
    Effect.gen(function*() {
      const uri = pathToFileURL(file).href
      const report = yield* Report.reportPaths([uri], { runId: "all" })
      assert.strictEqual(report.pipelines, 7)
      const merged = yield* Merge.mergeReports([uri, file])
      assert.strictEqual(merged.stats().pipelines, 7)
      const out = nodePath.join(dir, "o.jsonl")
      assert.strictEqual(yield* Export.exportStores([uri], out, { kind: "results", format: "jsonl" }), 7)
      assert.strictEqual(fs.readFileSync(out, "utf8").trim().split("\n").length, 7)
    }).pipe(Effect.provide(StoreResolver.layerOpener())))

  it.effect("a plugin store through the opener's registry; an unknown scheme is a ConfigError", () =>
    Effect.gen(function*() {
      const report = yield* Report.reportPaths([`demo://${file}`], { runId: "all" })
      assert.strictEqual(report.pipelines, 7)
      const e = yield* Effect.flip(Report.reportPaths([`nope://${file}`]))
      assert.strictEqual(e._tag, "ConfigError")
    }).pipe(Effect.provide(StoreResolver.layerOpener({ registry }))))

  it.effect("the opener is a service: a test can hand Export any store", () =>
    Effect.gen(function*() {
      const opened: Array<string> = []
      const recording = Layer.effect(
        StoreOpener,
        Effect.map(StoreOpener, (inner) => ({
          openReadOnly: (source: string) => {
            opened.push(source)
            return inner.openReadOnly(file)
          }
        }))
      ).pipe(Layer.provide(StoreResolver.layerOpener()))
      const n = yield* Export.exportStores(["anything"], nodePath.join(dir, "any.jsonl"), { kind: "pipelines", format: "jsonl" })
        .pipe(Effect.provide(recording))
      assert.strictEqual(n, 7)
      assert.deepStrictEqual(opened, ["anything"])
    }))
})
