import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, FastCheck, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import {
  jsonlKeyedRows,
  jsonlSource,
  keyOfLine,
  keyOfRow,
  rangeSource,
  scanKeys,
  scanSource,
  unsafeIntegersOf,
  unsafeIntegersWarning
} from "../../src/tasks/internal/sources.js"
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

  describe("C15: keys that JSON numbers cannot hold", () => {
    const key = (text: string, field = "id") => keyOfLine(JSON.parse(text), text, field)

    it("keyOfLine keeps a numeric key exactly as the line writes it", () => {
      // beyond 2^53: JSON.parse rounds both to 1311112222333344500
      assert.deepStrictEqual(key(`{"id": 1311112222333344445}`), Either.right("1311112222333344445"))
      assert.deepStrictEqual(key(`{"id": 1311112222333344446}`), Either.right("1311112222333344446"))
      assert.deepStrictEqual(keyOfRow(JSON.parse(`{"id": 1311112222333344446}`), "id"), Either.right("1311112222333344500"))
      // any number whose text differs from its JavaScript round trip
      assert.deepStrictEqual(key(`{"id": 1.0}`), Either.right("1.0"))
      assert.deepStrictEqual(key(`{"id":1e3}`), Either.right("1e3"))
      assert.deepStrictEqual(key(`{"id": -0}`), Either.right("-0"))
      assert.deepStrictEqual(key(`{"id": 0.10000000000000000001}`), Either.right("0.10000000000000000001"))
      assert.deepStrictEqual(key(`{"id": 1e400}`), Either.right("1e400"))
      // plain numbers, strings and other values: as before
      assert.deepStrictEqual(key(`{"id": 42, "v": "x"}`), Either.right("42"))
      assert.deepStrictEqual(key(`{"id": "1311112222333344445"}`), Either.right("1311112222333344445"))
      assert.deepStrictEqual(key(`{"id": true}`), Either.right("true"))
      // an object key: its JSON text with the numbers as written
      assert.deepStrictEqual(key(`{"id": {"a": 1311112222333344445, "b": [1.50]}}`), Either.right(`{"a":1311112222333344445,"b":[1.50]}`))
      assert.deepStrictEqual(key(`{"id": {"a": 1, "b": "x"}}`), Either.right(`{"a":1,"b":"x"}`))
      // errors unchanged
      assert.isTrue(Either.isLeft(key(`{"id": null}`)))
      assert.isTrue(Either.isLeft(key(`{"idd": 1}`)))
    })

    it("keyOfLine is not fooled by the field's name elsewhere in the line (nested, in a string, escaped, repeated)", () => {
      // the same name in a nested object, before and after the top-level key
      assert.deepStrictEqual(key(`{"x": {"id": 5}, "id": 5.0}`), Either.right("5.0"))
      assert.deepStrictEqual(key(`{"id": 5.0, "x": {"id": 5}}`), Either.right("5.0"))
      // the top-level key spelled with an escape, a nested one spelled plainly
      assert.deepStrictEqual(key(`{"\u0069d": 7.0, "x": {"id": 7}}`), Either.right("7.0"))
      assert.deepStrictEqual(key(`{"\u0069d": 7, "note": "\u00e9"}`), Either.right("7"))
      // the name as a string value
      assert.deepStrictEqual(key(`{"k": "id", "id": 3}`), Either.right("3"))
      // a field written twice with two values is refused, not silently keyed by the last
      assert.isTrue(Either.isLeft(key(`{"id": 1311112222333344445, "id": 1311112222333344446}`)))
    })

    it.prop("keyOfLine returns the text of any JSON number written as the key, whatever the rest of the row", [
      FastCheck.oneof(
        FastCheck.bigInt({ min: -(10n ** 25n), max: 10n ** 25n }).map(String),
        FastCheck.integer().map(String),
        FastCheck.tuple(FastCheck.integer({ min: -999, max: 999 }), FastCheck.nat(99999)).map(([a, b]) => `${a}.${b}`),
        FastCheck.tuple(FastCheck.integer({ min: 1, max: 9 }), FastCheck.integer({ min: -30, max: 30 })).map(([a, e]) => `${a}e${e}`)
      ),
      FastCheck.constantFrom("alone", "nested before", "nested after"),
      FastCheck.constantFrom("", " ", "  ")
    ], ([written, shape, space]) => {
      // the same name nested, holding the rounded number (the fast path must not take it)
      const nested = `"x": {"id": ${JSON.stringify(Number(written)) ?? 0}}`
      const own = `"id":${space}${written}`
      const text = shape === "alone"
        ? `{"v": "a.b", ${own}}`
        : shape === "nested before"
        ? `{${nested},${space}${own}}`
        : `{${own}, ${nested}}`
      return Either.getOrThrow(key(text)) === written
    })

    it("unsafeIntegersOf lists the integers JavaScript rounds, with their paths; a row without 16 digits in a row costs one test", () => {
      assert.deepStrictEqual(unsafeIntegersOf(`{"id": 1311112222333344445, "n": 9007199254740991, "m": {"l": [1, -9007199254740993]}}`), [
        { path: "id", text: "1311112222333344445", rounded: "1311112222333344500" },
        { path: "m.l[1]", text: "-9007199254740993", rounded: "-9007199254740992" }
      ])
      assert.deepStrictEqual(unsafeIntegersOf(`{"a b": 12345678901234567890}`), [
        { path: `["a b"]`, text: "12345678901234567890", rounded: "12345678901234567000" }
      ])
      // digits inside a string, fractions and exponents are not integers as written
      assert.deepStrictEqual(unsafeIntegersOf(`{"phone": "13111122223333444455", "f": 1311112222333344445.5, "e": 1e20}`), [])
      assert.deepStrictEqual(unsafeIntegersOf(`{"id": 7}`), [])
      assert.deepStrictEqual(unsafeIntegersOf(`not json 1311112222333344445`), [])
    })

    it.live("keyed rows keep distinct keys; a repeated big key is named exactly as written, with both lines", () =>
      Effect.gen(function*() {
        const dir = tmp()
        const file = path.join(dir, "big.jsonl")
        fs.writeFileSync(file, `{"id": 1311112222333344445}\n{"id": 1311112222333344446}\n`)
        const rows = Chunk.toArray(yield* Stream.runCollect(jsonlKeyedRows(file, { keyField: "id" })))
        assert.deepStrictEqual(rows.map((r) => r.key), ["1311112222333344445", "1311112222333344446"])
        assert.strictEqual(Chunk.size(yield* Stream.runCollect(jsonlSource(file, { keyField: "id" }))), 2)
        const scan = yield* scanSource(file, { keyField: "id", maxRows: 10 })
        assert.deepStrictEqual([scan.rows, scan.complete, scan.unsafeRows], [2, true, 2])
        assert.deepStrictEqual(scan.unsafeIntegers.map((u) => [u.line, u.text]), [[1, "1311112222333344445"], [2, "1311112222333344446"]])
        const warning = unsafeIntegersWarning(file, scan, "id")!
        assert.include(warning, "big.jsonl line 1: id is 1311112222333344445, an integer beyond 2^53")
        assert.include(warning, "rounded to 1311112222333344500")
        assert.include(warning, `write it as a string ("1311112222333344445")`)
        // without a keyField the scan reads the lines without parsing them and still finds them
        const plain = yield* scanSource(file, { maxRows: 1 })
        assert.deepStrictEqual([plain.rows, plain.complete, plain.unsafeRows], [1, false, 1])

        const dup = path.join(dir, "dup.jsonl")
        fs.writeFileSync(dup, `{"id": 1311112222333344445}\n{"id": 1311112222333344446}\n{"id": 1311112222333344445}\n`)
        const e = yield* Effect.flip(scanKeys(dup, "id", { maxRows: 10 }))
        assert.strictEqual(e.message, "source.keyField: key \"1311112222333344445\" appears on lines 1 and 3 of dup.jsonl")
        assert.notInclude(e.message, "1311112222333344500")
      }).pipe(Effect.provide(NodeContext.layer)))
  })
})
