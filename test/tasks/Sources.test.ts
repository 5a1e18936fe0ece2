import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { jsonlSource, keyOfRow, rangeSource, scanKeys } from "../../src/tasks/Sources.js"
import { writeJsonl } from "../../src/tasks/WriteJsonl.js"

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "assay-src-"))

describe("sources", () => {
  it.effect("rangeSource(n) yields 0..n-1", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(rangeSource(4))), [0, 1, 2, 3])
      assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(rangeSource(0))), [])
    }))

  it.live("jsonlSource is lazy: a 100k-line file whose end is broken is read only as far as the limit", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = path.join(dir, "big.jsonl")
      const lines = Array.from({ length: 100_000 }, (_, i) => JSON.stringify({ i }))
      fs.writeFileSync(file, lines.join("\n") + "\n{not json\n")
      const first = Chunk.toArray(yield* Stream.runCollect(jsonlSource(file, { limit: 3 })))
      assert.deepStrictEqual(first, [{ i: 0 }, { i: 1 }, { i: 2 }])
      // Taking a few rows of the unlimited stream does not reach the broken line either.
      const taken = Chunk.toArray(yield* Stream.runCollect(Stream.take(jsonlSource(file), 5)))
      assert.strictEqual(taken.length, 5)
      // Reading it all does reach it, with its line number.
      const all = yield* Effect.either(Stream.runDrain(jsonlSource(file)))
      assert.isTrue(Either.isLeft(all))
      if (Either.isLeft(all)) assert.strictEqual(all.left._tag === "SourceError" ? all.left.line : -1, 100_001)
      assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(jsonlSource(file, { limit: 0 }))), [])
      const missing = yield* Effect.either(Stream.runDrain(jsonlSource(path.join(dir, "nope.jsonl"))))
      assert.isTrue(Either.isLeft(missing))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.live("writeJsonl appends canonical JSON lines, creates the directory, and truncates once in mode w", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const out = path.join(dir, "sub/out.jsonl")
      const ctx = {} as never
      const append = writeJsonl(out)
      assert.deepStrictEqual(yield* append.run({ b: 1, a: [1, "x"] }, ctx), { b: 1, a: [1, "x"] })
      yield* Effect.forEach([1, 2, 3], (n) => append.run(n, ctx), { concurrency: 3 })
      const lines = fs.readFileSync(out, "utf8").trim().split("\n")
      assert.strictEqual(lines[0], "{\"a\":[1,\"x\"],\"b\":1}")
      assert.deepStrictEqual(lines.slice(1).sort(), ["1", "2", "3"])
      const fresh = writeJsonl(out, { mode: "w" })
      yield* fresh.run("first", ctx)
      yield* fresh.run("second", ctx)
      assert.deepStrictEqual(fs.readFileSync(out, "utf8").trim().split("\n"), ["\"first\"", "\"second\""])
      const bad = yield* Effect.either(append.run({ x: Number.NaN }, ctx))
      assert.isTrue(Either.isLeft(bad))
      assert.throws(() => writeJsonl(out, { mode: "x" as never }))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.live("keyField: a repeated key fails with both line numbers; a row without a key fails with its row", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const dup = path.join(dir, "dup.jsonl")
      fs.writeFileSync(dup, "{\"id\":\"a\",\"v\":1}\n\n{\"id\":\"b\",\"v\":2}\n{\"id\":\"a\",\"v\":3}\n")
      const e1 = yield* Effect.flip(Stream.runDrain(jsonlSource(dup, { keyField: "id" })))
      assert.strictEqual(e1._tag, "ConfigError")
      assert.strictEqual(e1.message, "source.keyField: key \"a\" appears on lines 1 and 4 of dup.jsonl")
      // Without keyField the same file streams every row; with a limit the repeat is not reached.
      assert.strictEqual(Chunk.size(yield* Stream.runCollect(jsonlSource(dup))), 3)
      assert.strictEqual(Chunk.size(yield* Stream.runCollect(jsonlSource(dup, { keyField: "id", limit: 2 }))), 2)
      const holes = path.join(dir, "holes.jsonl")
      fs.writeFileSync(holes, "{\"id\":1}\n\n{\"id\":null}\n")
      const e2 = yield* Effect.flip(Stream.runDrain(jsonlSource(holes, { keyField: "id" })))
      assert.strictEqual(e2.message, "source.keyField: row 2 (line 3) of holes.jsonl has a null \"id\"")
      // scanKeys stops at its bound and says whether it saw the whole file.
      assert.deepStrictEqual(yield* scanKeys(dup, "id", { maxRows: 2 }), { rows: 2, complete: false })
      const e3 = yield* Effect.flip(scanKeys(dup, "idd", { maxRows: 10, hint: (f) => `fields were ${f.join("+")}` }))
      assert.strictEqual(e3.message, "source.keyField: row 1 of dup.jsonl has no \"idd\" field (fields: id, v); fields were id+v")
    }).pipe(Effect.provide(NodeContext.layer)))

  it("keyOfRow accepts what a pipeline key can be made of: non-empty strings, numbers, other non-null JSON", () => {
    assert.deepStrictEqual(keyOfRow({ id: "a" }, "id"), Either.right("a"))
    assert.deepStrictEqual(keyOfRow({ id: 7 }, "id"), Either.right("7"))
    assert.isTrue(Either.isLeft(keyOfRow({ id: "" }, "id")))
    assert.isTrue(Either.isLeft(keyOfRow({ id: null }, "id")))
    assert.isTrue(Either.isLeft(keyOfRow([1], "id")))
  })
})
