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
import * as Export from "../../src/services/Export.js"
import { tmpDir } from "./ExportFixture.js"

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

describe("Export encoding", () => {
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
      artifactId: 1, pipelineId: "p", runId: "r", seq: 0, taskName: "t0", typeName: "json", codec: "json",
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
