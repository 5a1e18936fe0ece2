/**
 * The store resolver and plugin URIs: what counts as a plugin URI, resolution of every store
 * form (built-ins win), the validation checks the loader uses, opening plugin stores and
 * artifact backends through their factories, and how a broken factory is reported.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Either, Exit, FastCheck, Layer, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { NodeFileSystem } from "@effect/platform-node"
import { ConfigError, StoreUnavailable } from "../../src/domain/Errors.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Plugins from "../../src/layers/Plugins.js"
import * as PluginUri from "../../src/layers/PluginUri.js"
import * as StoreResolver from "../../src/layers/internal/storeResolver.js"
import { ArtifactBackend } from "../../src/services/ArtifactBackend.js"
import { Store } from "../../src/services/Store.js"
import { rid } from "../support/ids.js"

type Seen = Array<{ uri: string; options: Plugins.StoreFactoryOptions }>

/** A registry whose `mem` scheme opens a memory store (and records how it was called). */
const registryWith = (
  stores: Record<string, Plugins.StoreFactory>,
  extra: Partial<Plugins.PluginRegistry> = {}
): Plugins.PluginRegistry => ({
  ...Plugins.empty,
  stores: new Map(Object.entries(stores).map(([k, factory]) => [k, { plugin: "./test-plugin.ts", factory }])),
  ...extra
})

const memFactory = (seen: Seen): Plugins.StoreFactory => (uri, options) => {
  seen.push({ uri: uri.href, options })
  return MemoryStore.layerWith({ journal: options.journal })
}

const open = (spec: string, registry: Plugins.PluginRegistry, readOnly = false) =>
  Effect.scoped(
    Effect.flatMap(
      Layer.build(StoreResolver.layer(spec, { journal: "summary", readOnly, baseDir: "/base", registry })),
      (ctx) => Effect.succeed(Context.get(ctx, Store))
    )
  )

const leftOf = <A, E>(e: Either.Either<A, E>): E => {
  if (Either.isRight(e)) throw new Error(`expected a failure, got ${JSON.stringify(e.right)}`)
  return e.left
}

describe("PluginUri.parse", () => {
  it("only scheme:// with a scheme of two or more characters is a URI", () => {
    for (const notUri of ["runs/qa.db", "./mem://x", ":memory:", "C:\\runs\\qa.db", "C://runs/qa.db", "c:/x", "mem:x", "/abs/mem://x", "", "1ab://x"]) {
      assert.strictEqual(PluginUri.parse(notUri)._tag, "NotUri", notUri)
      assert.isFalse(PluginUri.isUri(notUri), notUri)
    }
    const p = PluginUri.parse("S3://bucket/runs.db")
    assert.strictEqual(p._tag, "Uri")
    if (p._tag === "Uri") {
      assert.strictEqual(p.scheme, "s3")
      assert.strictEqual(p.uri.host, "bucket")
      assert.strictEqual(p.uri.pathname, "/runs.db")
    }
    assert.strictEqual(PluginUri.parse("http://exa mple/")._tag, "Malformed")
  })

  it.prop(
    "a string that does not start with letter, letter-ish, '://' never resolves to a plugin store",
    [FastCheck.string()],
    ([s]) => {
      const registry = registryWith({ mem: memFactory([]) })
      const r = StoreResolver.resolve(s, registry)
      const startsLikeUri = /^[A-Za-z][A-Za-z0-9+.-]+:\/\//.test(s)
      if (!startsLikeUri) {
        assert.isTrue(Either.isLeft(r) || r.right._tag !== "Plugin")
        if (s !== "" && s.trim() !== "" && s !== ":memory:") assert.strictEqual(Either.getOrThrow(r)._tag, "Sqlite")
      }
    }
  )
})

describe("StoreResolver.resolve", () => {
  const registry = registryWith({ mem: memFactory([]) })

  it("built-ins: :memory:, paths (POSIX, Windows, relative), file:// URIs", () => {
    assert.deepStrictEqual(Either.getOrThrow(StoreResolver.resolve(":memory:", registry)), { _tag: "Memory" })
    for (const p of ["runs/qa.db", "/abs/qa.db", "C:\\runs\\qa.db", "C://runs/qa.db", "mem:qa"]) {
      assert.deepStrictEqual(Either.getOrThrow(StoreResolver.resolve(p, registry)), { _tag: "Sqlite", filename: p })
    }
    assert.deepStrictEqual(Either.getOrThrow(StoreResolver.resolve("file:///tmp/a%20b/qa.db", registry)), {
      _tag: "Sqlite",
      filename: "/tmp/a b/qa.db"
    })
    const remote = leftOf(StoreResolver.resolve("file://otherhost/qa.db", registry))
    assert.strictEqual(remote.issues[0]!.path, "run.store")
    assert.include(remote.message, "not a usable file URI")
  })

  it("a plugin scheme resolves (case-insensitively) to its factory and plugin", () => {
    const t = Either.getOrThrow(StoreResolver.resolve("MEM://bucket/runs.db?x=1", registry))
    assert.strictEqual(t._tag, "Plugin")
    if (t._tag === "Plugin") {
      assert.strictEqual(t.scheme, "mem")
      assert.strictEqual(t.plugin, "./test-plugin.ts")
      assert.strictEqual(t.uri.searchParams.get("x"), "1")
    }
  })

  it("an unknown scheme is a ConfigError at the field path, naming the scheme, the known ones and broken plugins", () => {
    const broken = { ...registry, errors: new Map([["./s3.ts", "Cannot find module 'aws'"]]) }
    const e = leftOf(StoreResolver.resolve("nope://x", broken))
    assert.strictEqual(e._tag, "ConfigError")
    assert.strictEqual(e.issues[0]!.path, "run.store")
    assert.include(e.message, "\"nope://\"")
    assert.include(e.message, "file://, postgres://, postgresql://, mem://")
    assert.include(e.message, "./s3.ts (Cannot find module 'aws')")
    assert.strictEqual(leftOf(StoreResolver.resolve("nope://x", registry, "--store")).issues[0]!.path, "--store")
    assert.strictEqual(leftOf(StoreResolver.resolve("   ", registry)).issues[0]!.path, "run.store")
  })

  it("checkStoreSpec: what resolve refuses, as one issue; absent or non-string specs are left alone", () => {
    assert.isTrue(Option.isNone(StoreResolver.checkStoreSpec(undefined, registry)))
    assert.isTrue(Option.isNone(StoreResolver.checkStoreSpec(42, registry)))
    assert.isTrue(Option.isNone(StoreResolver.checkStoreSpec("mem://x", registry)))
    assert.isTrue(Option.isNone(StoreResolver.checkStoreSpec("runs/qa.db", registry)))
    const issue = Option.getOrThrow(StoreResolver.checkStoreSpec("nope://x", Plugins.empty))
    assert.strictEqual(issue.path, "run.store")
    assert.include(issue.message, "no plugin provides the store scheme \"nope://\"")
    assert.isString(issue.suggestion)
  })

  it("checkArtifactBackendSpec: built-in forms, plugin schemes, unknown schemes at run.artifactBackend", () => {
    const backends = {
      artifactBackends: new Map([["blobs", { plugin: "./b.ts", factory: (() => ArtifactBackends.layerNull) as Plugins.ArtifactBackendFactory }]])
    }
    for (const ok of ["inline", "null", "file:///data", "blobs://x", { kind: "null" }, undefined, 3]) {
      assert.isTrue(Option.isNone(StoreResolver.checkArtifactBackendSpec(ok, backends)), JSON.stringify(ok))
    }
    const unknown = Option.getOrThrow(StoreResolver.checkArtifactBackendSpec("s3://bucket", backends))
    assert.strictEqual(unknown[0]!.path, "run.artifactBackend")
    assert.include(unknown[0]!.message, "\"s3://\"")
    assert.include(unknown[0]!.message, "file://, blobs://")
    const bogus = Option.getOrThrow(StoreResolver.checkArtifactBackendSpec("bogus", backends))
    assert.strictEqual(bogus[0]!.path, "run.artifactBackend")
  })
})

describe("StoreResolver.layer", () => {
  it.effect("opens a plugin store with the URI, journal, readOnly and baseDir; the store works", () =>
    Effect.gen(function*() {
      const seen: Seen = []
      const registry = registryWith({ mem: memFactory(seen) })
      const found = yield* Effect.scoped(
        Effect.gen(function*() {
          const ctx = yield* Layer.build(
            StoreResolver.layer("mem://bucket/a", { journal: "summary", readOnly: false, baseDir: "/base", registry })
          )
          const store = Context.get(ctx, Store)
          yield* store.openRun({ runId: rid("r1"), startedAt: 5 })
          return { kind: store.kind, journal: store.journal, run: yield* store.getRun(rid("r1")) }
        })
      )
      assert.strictEqual(found.kind, "memory")
      assert.strictEqual(found.journal, "summary")
      assert.isTrue(Option.isSome(found.run))
      assert.deepStrictEqual(seen, [{ uri: "mem://bucket/a", options: { journal: "summary", readOnly: false, baseDir: "/base" } }])
    }))

  it.effect("a plugin store gets the run's artifact backend, including a plugin backend", () =>
    Effect.gen(function*() {
      const kinds: Array<string> = []
      const registry: Plugins.PluginRegistry = {
        ...registryWith({
          probe: () =>
            Layer.scoped(
              Store,
              Effect.zipRight(
                Effect.tap(ArtifactBackend, (b) => Effect.sync(() => kinds.push(b.kind))),
                MemoryStore.make({})
              )
            )
        }),
        artifactBackends: new Map([
          ["nullish", { plugin: "./b.ts", factory: (() => ArtifactBackends.layerNull) as Plugins.ArtifactBackendFactory }]
        ])
      }
      const build = (artifactBackend: string) =>
        Effect.scoped(Layer.build(StoreResolver.layer("probe://x", { journal: "full", readOnly: false, baseDir: "/", registry, artifactBackend })))
      yield* build("nullish://x")
      yield* build("inline")
      assert.deepStrictEqual(kinds, ["null", "inline"])
      const e = yield* Effect.flip(build("nope://x"))
      assert.strictEqual(e._tag, "ConfigError")
      assert.include(e.message, "\"nope://\"")
    }))

  it.effect("read-only: the factory is told readOnly; :memory: has nothing to read (ConfigError)", () =>
    Effect.gen(function*() {
      const seen: Seen = []
      yield* open("mem://x", registryWith({ mem: memFactory(seen) }), true)
      assert.isTrue(seen[0]!.options.readOnly)
      const e = yield* Effect.flip(open(":memory:", Plugins.empty, true))
      assert.strictEqual(e._tag, "ConfigError")
    }))

  it.effect("a factory that throws, returns no Layer, dies or fails oddly is a PluginError naming plugin and scheme", () =>
    Effect.gen(function*() {
      const cases: Record<string, Plugins.StoreFactory> = {
        throws: () => {
          throw new Error("bucket credentials missing")
        },
        nolayer: () => 42 as unknown as Layer.Layer<Store>,
        dies: () => Layer.effect(Store, Effect.die(new Error("kaboom"))),
        odd: () => Layer.fail({ reason: "weird" } as unknown as StoreUnavailable)
      }
      const registry = registryWith(cases)
      const messages: Record<string, string> = {}
      for (const scheme of Object.keys(cases)) {
        const e = yield* Effect.flip(open(`${scheme}://x`, registry))
        assert.strictEqual(e._tag, "PluginError", scheme)
        assert.include(e.message, `store factory of plugin ./test-plugin.ts for ${scheme}:// failed`)
        messages[scheme] = e.message
      }
      assert.include(messages["throws"], "bucket credentials missing")
      assert.include(messages["nolayer"], "returned number, not a Layer")
      assert.include(messages["dies"], "kaboom")
    }))

  it.effect("StoreUnavailable and ConfigError from a plugin's layer are kept as they are", () =>
    Effect.gen(function*() {
      const registry = registryWith({
        down: () => Layer.fail(new StoreUnavailable({ message: "bucket unreachable" })),
        bad: () => Layer.fail(new ConfigError({ message: "write bad://NAME" }))
      })
      const down = yield* Effect.flip(open("down://x", registry))
      assert.strictEqual(down._tag, "StoreUnavailable")
      assert.strictEqual(down.message, "bucket unreachable")
      const bad = yield* Effect.flip(open("bad://x", registry))
      assert.strictEqual(bad._tag, "ConfigError")
    }))

  it.effect("an unknown scheme fails before any factory is called", () =>
    Effect.gen(function*() {
      const seen: Seen = []
      const exit = yield* Effect.exit(open("nope://x", registryWith({ mem: memFactory(seen) })))
      assert.isTrue(Exit.isFailure(exit))
      assert.deepStrictEqual(seen, [])
    }))
})

describe("ArtifactBackends.layerWith", () => {
  it.effect("built-ins win (file:// is the file backend); a plugin scheme calls its factory with the URI", () =>
    Effect.gen(function*() {
      const root = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-backend-"))
      const uris: Array<string> = []
      const plugins: ArtifactBackends.PluginBackends = {
        baseDir: "/base",
        artifactBackends: new Map([
          ["file", { plugin: "./evil.ts", factory: (() => ArtifactBackends.layerNull) as Plugins.ArtifactBackendFactory }],
          ["mine", {
            plugin: "./mine.ts",
            factory: ((uri: URL) => {
              uris.push(uri.href)
              return ArtifactBackends.layerNull
            }) as Plugins.ArtifactBackendFactory
          }]
        ])
      }
      const kindOf = (input: string) =>
        Effect.scoped(
          Effect.map(
            Layer.build(ArtifactBackends.layerWith(input, plugins).pipe(Layer.provide(NodeFileSystem.layer))),
            (ctx) => Context.get(ctx, ArtifactBackend).kind
          )
        )
      assert.strictEqual(yield* kindOf(`file://${root}`), "file")
      assert.strictEqual(yield* kindOf("mine://bucket/p"), "null")
      assert.deepStrictEqual(uris, ["mine://bucket/p"])
      const e = yield* Effect.flip(kindOf("theirs://x"))
      assert.strictEqual(e._tag, "ConfigError")
      assert.include(e.message, "\"theirs://\"")
    }))
})

describe("StoreResolver: Postgres URLs", () => {
  it("postgres:// and postgresql:// resolve to the built-in Postgres store, password kept for opening only", () => {
    for (const spec of ["postgres://u:pw@127.0.0.1:5432/db", "postgresql://u@db.internal/assay?sslmode=require"]) {
      const target = Either.getOrThrow(StoreResolver.resolve(spec, Plugins.empty))
      assert.deepStrictEqual(target, { _tag: "Postgres", url: spec })
    }
  })
})
