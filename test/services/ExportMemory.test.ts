/**
 * Export reads payloads in groups bounded in bytes (`Export.BATCH_BYTES`), never a page of
 * pipelines' payloads at once: a pipeline above the budget is read one artifact at a time (a
 * `LargeRow` for `pipelines`). A counting `BulkReader` around the store's own records what each
 * read returned; the files written must still hold every payload.
 */
import { assert, layer } from "@effect/vitest"
import { Chunk, Effect, Stream } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import * as Export from "../../src/services/internal/export.js"
import { buildPayloadStore, pid, storeFixture, tmpDir } from "./ExportFixture.js"

const dir = tmpDir()
const file = nodePath.join(dir, "payloads.db")
const KB = 1024
const MB = 1024 * KB
// 40 pipelines of ~600 KB (a seed of 1 KB, one output): 24 MB in one page of NESTED_BATCH.
// p00010: three outputs of 2.5 MB (7.5 MB > the 4 MB budget: read one artifact at a time).
// p00020: a single 5 MB output (one payload above the budget on its own).
const sizes = (i: number): ReadonlyArray<number> =>
  i === 10 ? [KB, 2.5 * MB, 2.5 * MB, 2.5 * MB] : i === 20 ? [KB, 5 * MB] : [KB, 600 * KB]
const N = 40

interface Reads {
  /** Stored payload bytes and payload count returned by each `bundles` call. */
  readonly bundles: Array<{ readonly bytes: number; readonly payloads: number }>
  /** Stored payload bytes of each single-artifact read. */
  readonly single: Array<number>
}

/** The store's bulk reader, counting what every read returned. */
const counting = (bulk: Export.BulkReader, reads: Reads): Export.BulkReader => ({
  bundles: (ids, o) =>
    Effect.tap(bulk.bundles(ids, o), (m) =>
      Effect.sync(() => {
        let bytes = 0
        let payloads = 0
        for (const b of m.values()) {
          for (const a of b.artifacts) {
            if (a.payload !== undefined) {
              bytes += a.payload.byteLength
              payloads++
            }
          }
        }
        reads.bundles.push({ bytes, payloads })
      })),
  artifact: (a) => Effect.tap(bulk.artifact!(a), (l) => Effect.sync(() => reads.single.push(l.payload?.byteLength ?? 0)))
})

// 450 pipelines of two 1 KB payloads: small enough for every page to fit the budget
const smallFile = nodePath.join(dir, "small.db")
const SMALL = 450

/** Both store files, built once for this file's tests (a `layer()` fixture), and the store opener. */
const Built = storeFixture(Effect.all([
  buildPayloadStore(file, Array.from({ length: N }, (_, i) => ({ sizes: sizes(i) }))),
  buildPayloadStore(smallFile, Array.from({ length: SMALL }, () => ({ sizes: [KB, KB] })))
]))

const exportCounted = (kind: Export.RowKind, format: Export.Format, db = file) =>
  Effect.scoped(Effect.gen(function*() {
    const { bulk, store } = yield* Export.openReadOnly(db)
    const reads: Reads = { bundles: [], single: [] }
    const out = nodePath.join(dir, `${nodePath.basename(db, ".db")}-${kind}.${format}`)
    const n = yield* Export.writeRows(Export.rowItems(store, { kind }, counting(bulk, reads)), out, format)
    return { n, out, reads }
  }))

/** Every read is within the budget, or returned exactly one payload. */
const assertBounded = (reads: Reads) => {
  assert.isAbove(reads.bundles.length, 0)
  for (const r of reads.bundles) {
    assert.isTrue(r.bytes <= Export.BATCH_BYTES || r.payloads === 1, `a read returned ${r.payloads} payloads, ${r.bytes} bytes`)
  }
}

const textLengths = (row: any): Array<number> => row.artifacts.map((a: any) => a.payload.text.length)

// the fixture builds ~34 MB of stores once (its own timeout); each test gets 120 s
layer(Built, { excludeTestServices: true, timeout: "120 seconds" })("Export memory: payloads read in groups bounded in bytes", (it) => {
  it.effect("pipelines: no read returns more than BATCH_BYTES; the large pipeline is read one artifact at a time", () =>
    Effect.gen(function*() {
      const { n, out, reads } = yield* exportCounted("pipelines", "jsonl")
      assert.strictEqual(n, N)
      assertBounded(reads)
      // the 7.5 MB and the 5 MB pipelines (above the budget): their 4 + 2 artifacts one by
      // one, never through `bundles`
      assert.strictEqual(reads.single.length, 6)
      assert.isTrue(reads.single.every((b) => b <= 5 * MB + 64))
      const rows = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.deepStrictEqual(rows.map((r) => r.pipelineId), Array.from({ length: N }, (_, i) => pid(i)))
      for (let i = 0; i < N; i++) assert.deepStrictEqual(textLengths(rows[i]), sizes(i).map((s) => s))
      assert.deepStrictEqual(Object.keys(rows[10]), Object.keys(rows[0]))
    }), 120_000)

  it.effect("artifacts and results: bounded the same way, every payload written", () =>
    Effect.gen(function*() {
      const arts = yield* exportCounted("artifacts", "jsonl")
      assert.strictEqual(arts.n, N * 2 + 2)
      assertBounded(arts.reads)
      assert.strictEqual(arts.reads.single.length, 6)
      const texts = fs.readFileSync(arts.out, "utf8").trim().split("\n").map((l) => JSON.parse(l).payload.text.length)
      assert.deepStrictEqual(texts, Array.from({ length: N }, (_, i) => sizes(i)).flat())
      const res = yield* exportCounted("results", "csv")
      assert.strictEqual(res.n, N)
      assertBounded(res.reads)
      // the 5 MB final is read alone
      assert.isTrue(res.reads.bundles.some((r) => r.payloads === 1 && r.bytes > Export.BATCH_BYTES))
    }), 120_000)

  it.effect("small payloads: each page is read once (payloads with the page, no metadata-only read first)", () =>
    Effect.gen(function*() {
      const pages = (batch: number) => Math.ceil(SMALL / batch)
      const pipelines = yield* exportCounted("pipelines", "jsonl", smallFile)
      assert.strictEqual(pipelines.n, SMALL)
      assert.deepStrictEqual(pipelines.reads.bundles.map((r) => r.payloads), [400, 400, 100], "one read per page of NESTED_BATCH")
      assert.strictEqual(pipelines.reads.bundles.length, pages(Export.NESTED_BATCH))
      assert.deepStrictEqual(pipelines.reads.single, [])
      const artifacts = yield* exportCounted("artifacts", "csv", smallFile)
      assert.strictEqual(artifacts.n, SMALL * 2)
      assert.strictEqual(artifacts.reads.bundles.length, pages(Export.NESTED_BATCH))
      const results = yield* exportCounted("results", "csv", smallFile)
      assert.strictEqual(results.n, SMALL)
      assert.deepStrictEqual(results.reads.bundles.map((r) => r.payloads), [SMALL], "finals only, one page")
      const rows = fs.readFileSync(pipelines.out, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.isTrue(rows.every((r) => textLengths(r).join() === `${KB},${KB}`))
    }), 120_000)

  it.effect("a large row is written exactly as its materialized row (jsonl, json, csv)", () =>
    Effect.gen(function*() {
      for (const format of Export.FORMATS) {
        const [streamed, whole] = yield* Effect.scoped(Effect.gen(function*() {
          const { store } = yield* Export.openReadOnly(file)
          const a = nodePath.join(dir, `streamed.${format}`)
          const b = nodePath.join(dir, `whole.${format}`)
          yield* Export.writeRows(Export.rowItems(store, { kind: "pipelines", limit: 12 }), a, { format, time: "iso" })
          const rows = yield* Stream.runCollect(Export.iterRows(store, { kind: "pipelines", limit: 12 }))
          assert.isTrue(Chunk.toReadonlyArray(rows).every((r) => !(r instanceof Export.LargeRow)))
          yield* Export.writeRows(Stream.fromChunk(rows), b, { format, time: "iso" })
          return [fs.readFileSync(a), fs.readFileSync(b)] as const
        }))
        assert.isTrue(streamed.equals(whole), `${format} differs`)
      }
    }), 120_000)
})
