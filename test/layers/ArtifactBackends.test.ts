import { NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { spawnSync } from "node:child_process"
import { digestFull } from "../../src/domain/Json.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import { ArtifactBackend, DEFAULT_MIN_BYTES, parseBackendSpec } from "../../src/services/ArtifactBackend.js"
import * as OutputFile from "../../src/services/OutputFile.js"

const withBackend = <A, E>(
  layer: Layer.Layer<ArtifactBackend, unknown, never>,
  f: (b: ArtifactBackend["Type"]) => Effect.Effect<A, E>
) => Effect.flatMap(ArtifactBackend, f).pipe(Effect.provide(layer))

describe("ArtifactBackend resolution", () => {
  it("parses every accepted form", () => {
    assert.deepStrictEqual(Either.getOrThrow(parseBackendSpec("inline")), { kind: "inline" })
    assert.deepStrictEqual(Either.getOrThrow(parseBackendSpec("null")), { kind: "null" })
    assert.deepStrictEqual(Either.getOrThrow(parseBackendSpec("file:///data/blobs")), {
      kind: "file",
      root: "/data/blobs",
      minBytes: DEFAULT_MIN_BYTES
    })
    assert.deepStrictEqual(Either.getOrThrow(parseBackendSpec({ kind: "file", root: "/x", min_bytes: 10 })), {
      kind: "file",
      root: "/x",
      minBytes: 10
    })
  })

  it("rejects unknown kinds and malformed file backends with ConfigError", () => {
    for (const bad of ["s3://bucket", "", { kind: "file" }, { kind: "file", root: "rel/path" }, {
      kind: "file",
      root: "/x",
      minBytes: -1
    }, { kind: "zip" }]) {
      const r = parseBackendSpec(bad)
      assert.isTrue(Either.isLeft(r), JSON.stringify(bad))
      if (Either.isLeft(r)) assert.strictEqual(r.left._tag, "ConfigError")
    }
  })

  it.effect("layer() builds the chosen backend", () =>
    Effect.gen(function*() {
      const root = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-resolve-"))
      const kinds = []
      for (const spec of ["inline", "null", `file://${root}`] as const) {
        kinds.push(yield* withBackend(ArtifactBackends.layer(spec).pipe(Layer.provide(NodeFileSystem.layer)), (b) => Effect.succeed(b.kind)))
      }
      assert.deepStrictEqual(kinds, ["inline", "null", "file"])
      const e = yield* Effect.flip(Effect.scoped(Layer.build(ArtifactBackends.layer("bogus").pipe(Layer.provide(NodeFileSystem.layer)))))
      assert.strictEqual(e._tag, "ConfigError")
    }))
})

describe("file backend", () => {
  it.effect("writes through a temp file + rename, content-addressed, and reads back", () =>
    Effect.gen(function*() {
      const root = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-file-"))
      const layer = ArtifactBackends.layerFile({ root, minBytes: 8 }).pipe(Layer.provide(NodeFileSystem.layer))
      yield* withBackend(layer, (b) =>
        Effect.gen(function*() {
          const small = yield* b.put(new Uint8Array([1, 2, 3]))
          assert.strictEqual(small.storage, "inline")
          const payload = new Uint8Array(64).fill(7)
          const p1 = yield* b.put(payload)
          const p2 = yield* b.put(payload.slice())
          assert.strictEqual(p1.storage, "blob")
          assert.deepStrictEqual(p1, p2)
          const ref = (p1 as { ref: string }).ref
          const files = fs.readdirSync(root, { recursive: true }).map(String).filter((f) => f.includes(ref))
          assert.strictEqual(files.length, 1, files.join(", "))
          assert.isFalse(
            fs.readdirSync(root, { recursive: true }).map(String).some((f) => f.includes("tmp")),
            "no temp file left behind"
          )
          assert.deepStrictEqual(Option.getOrThrow(yield* b.get(ref)), payload)
          assert.isTrue(yield* b.exists(ref))
          fs.unlinkSync(nodePath.join(root, ref.slice(0, 2), ref))
          assert.isTrue(Option.isNone(yield* b.get(ref)))
          assert.isFalse(yield* b.exists(ref))
          // refs that are not digests never escape the root
          assert.isTrue(Option.isNone(yield* b.get("../../etc/passwd")))
        }))
    }))

  it.effect("writes through the one atomic writer (OutputFile): a temp left by a killed process is swept", () =>
    Effect.gen(function*() {
      const root = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-file-"))
      const payload = new Uint8Array(64).fill(9)
      const ref = digestFull(payload)
      const dir = nodePath.join(root, ref.slice(0, 2))
      fs.mkdirSync(dir, { recursive: true })
      // what a writer killed mid-blob leaves: OutputFile's temp name, with a pid that is gone
      const dead = spawnSync(process.execPath, ["-e", ""]).pid!
      const stale = OutputFile.tempPath(nodePath.join(dir, ref), dead)
      fs.writeFileSync(stale, "half a blob")
      const layer = ArtifactBackends.layerFile({ root, minBytes: 8 }).pipe(Layer.provide(NodeFileSystem.layer))
      yield* withBackend(layer, (b) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* b.put(payload), { storage: "blob", ref })
          assert.deepStrictEqual(fs.readdirSync(dir), [ref], "the stale temp is gone, the blob is there")
          assert.deepStrictEqual(new Uint8Array(fs.readFileSync(nodePath.join(dir, ref))), payload)
        }))
    }))
})
