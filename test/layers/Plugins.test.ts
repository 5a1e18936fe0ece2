/**
 * Plugin loading of `stores` and `artifactBackends`: schemes registered with their plugin,
 * the built-in `file` scheme never taken over, malformed entries reported as the plugin's
 * error, the first plugin listed winning a scheme, and registries merged in order.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as Plugins from "../../src/layers/Plugins.js"

const dir = () => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-plugins-"))
const write = (d: string, name: string, text: string) => fs.writeFileSync(nodePath.join(d, name), text)

describe("Plugins.load: stores and artifact backends", () => {
  it.live("registers schemes by plugin; file:// stays built-in; the first plugin listed wins a scheme", () =>
    Effect.gen(function*() {
      const d = dir()
      write(d, "a.mjs", [
        `export default {`,
        `  name: "a",`,
        `  stores: { mem: () => "a-mem", file: () => "a-file", "s3+v2": () => "a-s3" },`,
        `  artifactBackends: { blobs: () => "a-blobs", file: () => "a-file" }`,
        `}`
      ].join("\n"))
      write(d, "b.mjs", `export const stores = { mem: () => "b-mem", other: () => "b-other" }\n`)
      const r = yield* Plugins.load(["./a.mjs", "./b.mjs"], d)
      assert.deepStrictEqual([...r.errors], [])
      const [a, b] = r.plugins
      assert.deepStrictEqual(a!.stores, ["mem", "s3+v2"])
      assert.deepStrictEqual(a!.artifactBackends, ["blobs"])
      assert.deepStrictEqual(a!.shadowed, ["file://", "file://"])
      assert.deepStrictEqual(b!.stores, ["mem", "other"])
      assert.deepStrictEqual([...r.stores.keys()], ["mem", "s3+v2", "other"])
      const call = (scheme: string) =>
        (r.stores.get(scheme)!.factory as unknown as () => string)()
      assert.strictEqual(call("mem"), "a-mem")
      assert.strictEqual(r.stores.get("mem")!.plugin, "./a.mjs")
      assert.strictEqual(call("other"), "b-other")
      assert.isFalse(r.stores.has("file"))
      assert.isFalse(r.artifactBackends.has("file"))
      assert.strictEqual(r.artifactBackends.get("blobs")!.plugin, "./a.mjs")
    }))

  it.live("a malformed scheme or a non-function factory is the plugin's error; its good schemes still load", () =>
    Effect.gen(function*() {
      const d = dir()
      write(d, "bad.mjs", `export const stores = { Mem: () => 1, x: () => 1, "c": () => 1, ok: () => 1, nofn: 3 }\nexport const artifactBackends = []\n`)
      const r = yield* Plugins.load(["./bad.mjs"], d)
      const p = r.plugins[0]!
      assert.deepStrictEqual(p.stores, ["ok"])
      assert.isString(p.error)
      assert.include(p.error!, "stores: \"Mem\" is not a URI scheme")
      assert.include(p.error!, "stores: \"c\" is not a URI scheme")
      assert.include(p.error!, "stores.nofn is not a factory function")
      assert.include(p.error!, "`artifactBackends` must be an object")
      assert.strictEqual(r.errors.get("./bad.mjs"), p.error)
      assert.isTrue(r.stores.has("ok"))
    }))

  it.live("a plugin that fails to import provides no scheme and lists its error", () =>
    Effect.gen(function*() {
      const d = dir()
      write(d, "boom.mjs", `throw new Error("no credentials")\n`)
      const r = yield* Plugins.load(["./boom.mjs"], d)
      assert.deepStrictEqual(r.plugins[0]!.stores, [])
      assert.deepStrictEqual(r.plugins[0]!.artifactBackends, [])
      assert.include(r.errors.get("./boom.mjs")!, "no credentials")
      assert.strictEqual(r.stores.size, 0)
    }))

  it("merge: the first registry wins a scheme; plugins and errors are concatenated", () => {
    const f = (tag: string) => (() => tag) as unknown as Plugins.StoreFactory
    const first: Plugins.PluginRegistry = {
      ...Plugins.empty,
      stores: new Map([["mem", { plugin: "first", factory: f("1") }]]),
      errors: new Map([["x", "broken"]])
    }
    const second: Plugins.PluginRegistry = {
      ...Plugins.empty,
      stores: new Map([["mem", { plugin: "second", factory: f("2") }], ["s3", { plugin: "second", factory: f("3") }]])
    }
    const m = Plugins.merge(first, second)
    assert.strictEqual(m.stores.get("mem")!.plugin, "first")
    assert.strictEqual(m.stores.get("s3")!.plugin, "second")
    assert.deepStrictEqual([...m.errors.keys()], ["x"])
  })
})
