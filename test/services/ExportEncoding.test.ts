/**
 * `Export.writeRows` encodes rows into reusable byte buffers (no batch is one string). These
 * tests pin its output, byte for byte, to the plain string encoding it replaced: one
 * `JSON.stringify` per row for jsonl/json, and for csv a header of the first
 * `CSV_HEADER_ROWS` rows' keys plus `extra`, every record written by csv-stringify.
 */
import { assert, describe, it } from "@effect/vitest"
import { stringify } from "csv-stringify/sync"
import { Effect, Either, FastCheck, Stream } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { CodecRegistry } from "../../src/domain/Codec.js"
import { ArtifactRecord } from "../../src/domain/Records.js"
import * as Export from "../../src/services/internal/export.js"
import { tmpDir } from "./ExportFixture.js"
import { pid, rid } from "../support/ids.js"

const cell = (v: unknown): string =>
  v === null || v === undefined ? "" : typeof v === "string" ? v : typeof v === "object" ? JSON.stringify(v) : String(v)

/** The reference encoding: whole-file strings, csv entirely through csv-stringify. */
const reference = (rows: ReadonlyArray<Export.Row>, format: Export.Format): string => {
  if (format === "jsonl") return rows.map((r) => JSON.stringify(r) + "\n").join("")
  if (format === "json") return rows.length === 0 ? "[]\n" : "[\n" + rows.map((r) => JSON.stringify(r)).join(",\n") + "\n]\n"
  if (rows.length === 0) return ""
  const columns: Array<string> = []
  for (const r of rows.slice(0, Export.CSV_HEADER_ROWS)) {
    for (const k of Object.keys(r)) if (k !== "extra" && !columns.includes(k)) columns.push(k)
  }
  const records = rows.map((r) => {
    const extra = Object.keys(r).filter((k) => !columns.includes(k))
    return [
      ...columns.map((c) => cell(r[c])),
      extra.length === 0 ? "" : JSON.stringify(Object.fromEntries(extra.map((k) => [k, r[k]])))
    ]
  })
  return stringify([[...columns, "extra"], ...records])
}

const dir = tmpDir()
let seq = 0

const written = (rows: ReadonlyArray<Export.Row>, format: Export.Format, chunk: number) =>
  Effect.gen(function*() {
    const out = nodePath.join(dir, `enc-${seq++}.${format}`)
    const n = yield* Export.writeRows(Stream.rechunk(Stream.fromIterable(rows), chunk), out, format)
    assert.strictEqual(n, rows.length)
    const bytes = fs.readFileSync(out)
    fs.rmSync(out)
    return bytes
  })

/** Keys that need CSV quoting, a genuine `extra`, and plain ones; values are any JSON (full unicode). */
const key = FastCheck.oneof(
  FastCheck.constantFrom("a", "b", "extra", "q\"k", "x,y", "line\nbreak", "é😀"),
  FastCheck.string({ unit: "grapheme", maxLength: 4 })
)
const value = FastCheck.oneof(
  FastCheck.jsonValue(),
  FastCheck.string({ unit: "binary" }),
  FastCheck.constantFrom("", "\"", "a,b", "\r\n", "\"quoted\", said \"x\"\n", "é€😀")
)
const rowsArb = FastCheck.array(FastCheck.dictionary(key, value, { maxKeys: 6 }), { maxLength: Export.CSV_HEADER_ROWS + 40 })

/** The csv reference with `--csv-safe`: csv-stringify's `escape_formulas`, numbers kept as numbers (never escaped). */
const safeReference = (rows: ReadonlyArray<Export.Row>): string => {
  if (rows.length === 0) return ""
  const columns: Array<string> = []
  for (const r of rows.slice(0, Export.CSV_HEADER_ROWS)) {
    for (const k of Object.keys(r)) if (k !== "extra" && !columns.includes(k)) columns.push(k)
  }
  const safeCell = (v: unknown) => (v !== null && typeof v === "object" ? JSON.stringify(v) : v)
  const records = rows.map((r) => {
    const extra = Object.keys(r).filter((k) => !columns.includes(k))
    return [
      ...columns.map((c) => safeCell(r[c])),
      extra.length === 0 ? null : JSON.stringify(Object.fromEntries(extra.map((k) => [k, r[k]])))
    ]
  })
  return stringify([[...columns, "extra"], ...records], {
    escape_formulas: true,
    cast: { boolean: (b: boolean) => (b ? "true" : "false") }
  })
}

/** Text cells that start with what `escape_formulas` guards, and negative numbers it leaves alone. */
const formulaValue = FastCheck.oneof(
  value,
  FastCheck.constantFrom("=1+1", "+x", "-y", "@z", "\tt", "\rr", "\uFF1Dq", "-5", -5, -0.5, true, false),
  FastCheck.tuple(FastCheck.constantFrom("=", "+", "-", "@", "\t"), FastCheck.string()).map(([a, b]) => a + b)
)

describe("Export encoding", () => {
  it.live.prop(
    "csv --csv-safe: byte-identical to csv-stringify with escape_formulas, for any rows",
    [FastCheck.array(FastCheck.dictionary(key, formulaValue, { maxKeys: 6 }), { maxLength: Export.CSV_HEADER_ROWS + 40 })],
    ([rows]) =>
      Effect.gen(function*() {
        const out = nodePath.join(dir, `safe-prop-${seq++}.csv`)
        yield* Export.writeRows(Stream.fromIterable(rows), out, { format: "csv", csvSafe: true })
        const text = fs.readFileSync(out, "utf8")
        fs.rmSync(out)
        assert.strictEqual(text, safeReference(rows))
      }),
    { fastCheck: { numRuns: 40 } }
  )

  for (const format of Export.FORMATS) {
    it.live.prop(
      `${format}: byte-identical to the string encoding, for any rows and chunking`,
      [rowsArb, FastCheck.integer({ min: 1, max: 300 })],
      ([rows, chunk]) =>
        Effect.map(written(rows, format, chunk), (bytes) => {
          assert.strictEqual(bytes.toString("utf8"), reference(rows, format))
          assert.isTrue(bytes.equals(Buffer.from(reference(rows, format))))
        }),
      { fastCheck: { numRuns: 40 } }
    )
  }

  it.live("multi-byte text across the 1 MiB buffer boundaries and larger than one buffer", () =>
    Effect.gen(function*() {
      // lengths around the fits-for-sure bound (1 MiB / 3 code units) and beyond one buffer;
      // 2-, 3- and 4-byte characters (the last a surrogate pair) land on every boundary offset
      const sizes = [10, 349_000, 349_525, 349_526, 400_001, 700_000, 1_048_577, 33, 2_100_000, 5]
      const chars = ["é", "€", "😀", "a"]
      const rows = sizes.map((n, i) => {
        const text = chars[i % chars.length]!.repeat(Math.ceil(n / 2))
        // a quoted JSON cell (csv) of about the same size, with quotes to double
        return { i, text, nested: { quote: "\"", text: text.slice(0, Math.ceil(n / 3)) }, tail: "x,\"y\"" }
      })
      for (const format of Export.FORMATS) {
        for (const chunk of [1, 3, 100]) {
          const bytes = yield* written(rows, format, chunk)
          assert.isTrue(bytes.equals(Buffer.from(reference(rows, format))), `${format} chunk ${chunk}`)
        }
      }
    }))
})

describe("Export.decodePayload", () => {
  const registry = CodecRegistry.default()
  const meta = (payload: Uint8Array) =>
    new ArtifactRecord({
      artifactId: 1, pipelineId: pid("p"), runId: rid("r"), seq: 0, taskName: "t0", typeName: "json", codec: "json",
      digest: "d", size: payload.byteLength, storage: "inline", blobRef: null, isFinal: true, available: true, createdAt: 0
    })
  /** The registry's decoding, as the export did it before its direct JSON.parse. */
  const viaRegistry = (payload: Uint8Array): unknown =>
    Either.match(registry.load({ typeName: "json", codec: "json", data: payload }), {
      onLeft: (e) => ({ ...(Export.decodePayload({ ...meta(payload), codec: "x" } as ArtifactRecord, payload) as object), codec: "json", error: e.message }),
      onRight: (v) => v
    })

  it.prop(
    "JSON payloads (any unicode) and invalid bytes decode as through the codec registry",
    [FastCheck.oneof(
      FastCheck.jsonValue().map((v) => new TextEncoder().encode(JSON.stringify(v))),
      FastCheck.uint8Array({ maxLength: 40 }),
      FastCheck.constantFrom(new Uint8Array([0xff, 0x7b]), new TextEncoder().encode("{\"a\":"), new TextEncoder().encode("NaN"))
    )],
    ([payload]) => {
      assert.deepStrictEqual(Export.decodePayload(meta(payload), payload), viaRegistry(payload))
    }
  )
})

describe("Export large rows", () => {
  /** A row and the same row as a LargeRow whose `field` (an array of objects) is read part by part. */
  const largeArb = FastCheck.record({
    head: FastCheck.dictionary(key, value, { maxKeys: 5 }),
    field: FastCheck.constantFrom("artifacts", "tasks", "parts", "q\"f,x"),
    // parts are records (at least one key: their JSON holds a quote, so csv-stringify quotes the
    // plain row's cell too; the streamed cell is always quoted)
    parts: FastCheck.array(FastCheck.dictionary(FastCheck.constantFrom("a", "createdAt", "ts", "n\"k"), value, { minKeys: 1, maxKeys: 3 }), {
      maxLength: 4
    })
  })
  const itemsArb = FastCheck.array(
    FastCheck.oneof(
      FastCheck.dictionary(key, value, { maxKeys: 6 }).map((row) => ({ row, large: undefined })),
      largeArb.map(({ field, head, parts }) => {
        const { [field]: _, ...rest } = head
        return {
          row: { ...rest, [field]: parts } as Export.Row,
          large: new Export.LargeRow(rest, field, parts.map((p) => Effect.succeed(p as Export.Row)))
        }
      })
    ),
    { maxLength: Export.CSV_HEADER_ROWS + 20 }
  )
  const shapeArb = FastCheck.record({
    time: FastCheck.constantFrom("ms" as const, "iso" as const),
    flatten: FastCheck.constantFrom(undefined, 1, 2),
    csvSafe: FastCheck.boolean()
  })

  for (const format of Export.FORMATS) {
    it.live.prop(
      `${format}: a LargeRow is written byte for byte as its materialized row, with any shaping`,
      [itemsArb, shapeArb, FastCheck.integer({ min: 1, max: 50 })],
      ([items, shape, chunk]) =>
        Effect.gen(function*() {
          const options = { format, ...shape, csvSafe: format === "csv" && shape.csvSafe }
          const a = nodePath.join(dir, `large-${seq++}.${format}`)
          const b = nodePath.join(dir, `large-${seq++}.${format}`)
          const streamed: ReadonlyArray<Export.RowItem> = items.map((x) => x.large ?? x.row)
          yield* Export.writeRows(Stream.rechunk(Stream.fromIterable(streamed), chunk), a, options)
          yield* Export.writeRows(Stream.rechunk(Stream.fromIterable(items.map((x) => x.row)), chunk), b, options)
          const [x, y] = [fs.readFileSync(a, "utf8"), fs.readFileSync(b, "utf8")]
          fs.rmSync(a)
          fs.rmSync(b)
          assert.strictEqual(x, y)
        }),
      { fastCheck: { numRuns: 60 } }
    )
  }

  it.live("a large row's parts are read one at a time, when the output reaches them", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const part = (i: number) => Effect.sync(() => (log.push(`read ${i}`), { i, text: "z".repeat(10) }) as Export.Row)
      const out = nodePath.join(dir, `lazy-${seq++}.jsonl`)
      const rows = Stream.make<Array<Export.RowItem>>(
        { before: 1 },
        new Export.LargeRow({ id: "big" }, "artifacts", [part(0), part(1), part(2)]),
        { after: 1 }
      ).pipe(Stream.tap((r) => Effect.sync(() => log.push(`row ${JSON.stringify(r instanceof Export.LargeRow ? r.head : r)}`))))
      assert.strictEqual(yield* Export.writeRows(rows, out, "jsonl"), 3)
      assert.deepStrictEqual(log, ["row {\"before\":1}", "row {\"id\":\"big\"}", "read 0", "read 1", "read 2", "row {\"after\":1}"])
      assert.deepStrictEqual(fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l)), [
        { before: 1 },
        { id: "big", artifacts: [0, 1, 2].map((i) => ({ i, text: "z".repeat(10) })) },
        { after: 1 }
      ])
    }))
})

describe("Export shaping", () => {
  it("isoTimes: the records' time fields at the top and in tasks/artifacts; payloads and data untouched", () => {
    const row = {
      createdAt: 0, endedAt: null, ts: 1_700_000_000_123, durationMs: 5, heartbeatAt: 8.64e15 + 1,
      payload: { createdAt: 1 }, data: { ts: 2 },
      tasks: [{ startedAt: 1000, payload: { endedAt: 3 } }], artifacts: [{ createdAt: 2000 }, "x"]
    }
    assert.deepStrictEqual(Export.isoTimes(row), {
      createdAt: "1970-01-01T00:00:00.000Z", endedAt: null, ts: "2023-11-14T22:13:20.123Z", durationMs: 5,
      heartbeatAt: 8.64e15 + 1, // outside the Date range: kept as a number
      payload: { createdAt: 1 }, data: { ts: 2 },
      tasks: [{ startedAt: "1970-01-01T00:00:01.000Z", payload: { endedAt: 3 } }], artifacts: [{ createdAt: "1970-01-01T00:00:02.000Z" }, "x"]
    })
    const untouched = { a: 1, createdAt: "already" }
    assert.strictEqual(Export.isoTimes(untouched), untouched)
  })

  it("flattenRow: dotted names up to the depth; arrays, empty and deeper objects stay whole; clashes keep the object", () => {
    const row = { id: 1, payload: { label: "spam", p: { a: 1, b: { c: 2 } }, list: [1, 2], empty: {} }, tags: {}, n: null }
    assert.deepStrictEqual(Export.flattenRow(row, 1), {
      id: 1, "payload.label": "spam", "payload.p": { a: 1, b: { c: 2 } }, "payload.list": [1, 2], "payload.empty": {}, tags: {}, n: null
    })
    assert.deepStrictEqual(Export.flattenRow(row, 3), {
      id: 1, "payload.label": "spam", "payload.p.a": 1, "payload.p.b.c": 2, "payload.list": [1, 2], "payload.empty": {}, tags: {}, n: null
    })
    // `{"a.b": 1, "a": {"b": 2}}` would give `x.a.b` twice; `y` would shadow the row's own `y.z`
    const clash = { x: { "a.b": 1, a: { b: 2 } }, y: { z: 1 }, "y.z": 0 }
    assert.deepStrictEqual(Export.flattenRow(clash, 3), clash)
  })

  it.live("csv: booleans true/false; cells kept as stored unless csvSafe, which quotes formula starts (not numbers)", () =>
    Effect.gen(function*() {
      const rows = [{ f: "=1+1", p: "+x", m: "-x", at: "@SUM(A1)", tab: "\tx", cr: "\rx", neg: -5, ok: true, no: false, fw: "＝1" }]
      const plainOut = nodePath.join(dir, `plain-${seq++}.csv`)
      yield* Export.writeRows(Stream.fromIterable(rows), plainOut, "csv")
      assert.strictEqual(fs.readFileSync(plainOut, "utf8"), "f,p,m,at,tab,cr,neg,ok,no,fw,extra\n=1+1,+x,-x,@SUM(A1),\tx,\"\rx\",-5,true,false,＝1,\n")
      const safeOut = nodePath.join(dir, `safe-${seq++}.csv`)
      yield* Export.writeRows(Stream.fromIterable(rows), safeOut, { format: "csv", csvSafe: true })
      assert.strictEqual(
        fs.readFileSync(safeOut, "utf8"),
        "f,p,m,at,tab,cr,neg,ok,no,fw,extra\n'=1+1,'+x,'-x,'@SUM(A1),'\tx,\"'\rx\",-5,true,false,'＝1,\n"
      )
    }))
})
