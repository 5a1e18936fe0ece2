import { assert, describe, it, layer } from "@effect/vitest"
import { Chunk, Effect, Option, Stream } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { PipelineRecord } from "../../src/domain/Records.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Export from "../../src/services/internal/export.js"
import { Store } from "../../src/services/Store.js"
import { buildStore, pid, tmpDir, writeRun, storeFixture } from "./ExportFixture.js"
import { PipelineId } from "../../src/domain/Ids.js"
import { rid } from "../support/ids.js"

/** Minimal RFC 4180 reader for checking our own output. */
const parseCsv = (text: string): Array<Array<string>> => {
  const rows: Array<Array<string>> = []
  let row: Array<string> = []
  let field = ""
  let q = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!
    if (q) {
      if (c === "\"") {
        if (text[i + 1] === "\"") (field += "\"", i++)
        else q = false
      } else field += c
    } else if (c === "\"") q = true
    else if (c === ",") (row.push(field), field = "")
    else if (c === "\n") (row.push(field), rows.push(row), row = [], field = "")
    else field += c
  }
  return rows
}

const readRows = (file: string, format: Export.Format): Array<Record<string, unknown>> => {
  const text = fs.readFileSync(file, "utf8")
  if (format === "jsonl") return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l))
  if (format === "json") return JSON.parse(text)
  const [header, ...rows] = parseCsv(text)
  return rows.map((r) => Object.fromEntries(header!.map((h, i) => [h, r[i]])))
}

const dir = tmpDir()
const file = nodePath.join(dir, "store.db")
// 1205 pipelines (every 5th fails), all with the same createdAt: paging crosses a 1000-row boundary on a tie
/** The store file, built once for this file's tests (a `layer()` fixture), and the store opener. */
const Built = storeFixture(buildStore(file, [{ n: 1205, failEvery: 5 }]))

const expected: Record<Export.RowKind, number> = {
  pipelines: 1205,
  results: 1205,
  tasks: 964 * 2 + 241,
  attempts: 964 * 2 + 241 * 2,
  events: 964 * 2 + 241,
  artifacts: 964 * 3 + 241 * 2,
  handoffs: 0, // no pipeline of the fixture declares control
  resources: 1, // llm/k1
  pools: 1
}

layer(Built, { excludeTestServices: true })("Export", (it) => {
  for (const kind of Export.ROW_KINDS) {
    for (const format of Export.FORMATS) {
      it.effect(`${kind} as ${format}: every row once`, () =>
        Effect.gen(function*() {
          const out = nodePath.join(dir, `${kind}.${format}`)
          const n = yield* Export.exportStores([file], out, { kind, format })
          assert.strictEqual(n, expected[kind])
          const rows = readRows(out, format)
          assert.strictEqual(rows.length, expected[kind])
          if (kind === "pipelines" || kind === "results") {
            assert.strictEqual(new Set(rows.map((r) => r.pipelineId)).size, 1205)
          }
          if (format === "csv" && expected[kind] > 0) assert.isTrue(fs.readFileSync(out, "utf8").split("\n")[0]!.endsWith(",extra"))
        }))
    }
  }

  it.effect("bulk rows (loadBundles) equal rows assembled one pipeline at a time from the port's single reads", () =>
    Effect.gen(function*() {
      /** The reference: per pipeline, its task stream, its artifact listing and one payload read per artifact. */
      const perPipeline = (store: Store["Type"]): Export.BulkReader => ({
        bundles: (ids, o) =>
          Effect.map(
            Effect.forEach(ids, (id) =>
              Effect.gen(function*() {
                const tasks = o.tasks === false ? [] : Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamTasks({ pipelineId: id })))
                const listed = (yield* store.listArtifacts(id)).filter((a) => o.artifacts !== "final" || a.isFinal)
                const artifacts = yield* Effect.forEach(listed, (a) =>
                  o.payloads === "all" || (o.payloads === "final" && a.isFinal)
                    ? Effect.map(store.getArtifact(a.pipelineId, a.seq), (l) => ({
                      artifact: a,
                      payload: Option.getOrThrow(l).artifact.artifactId === a.artifactId ? Option.getOrThrow(l).payload : undefined
                    }))
                    : Effect.succeed({ artifact: a, payload: undefined }))
                return [id, { pipelineId: id, tasks, artifacts }] as const
              })),
            (pairs) => new Map(pairs)
          )
      })
      for (const kind of Export.ROW_KINDS) {
        const [a, b] = yield* Effect.scoped(Effect.gen(function*() {
          const { bulk, store } = yield* Export.openReadOnly(file)
          const fast = yield* Stream.runCollect(Export.iterRows(store, { kind, limit: 1100 }, bulk))
          const slow = yield* Stream.runCollect(Export.iterRows(store, { kind, limit: 1100 }, perPipeline(store)))
          return [Chunk.toReadonlyArray(fast), Chunk.toReadonlyArray(slow)] as const
        }))
        assert.strictEqual(a.length, Math.min(1100, expected[kind]))
        assert.deepStrictEqual(a, b)
      }
    }))

  it.effect("nested pipeline rows carry tasks and decoded payloads; results keep failed pipelines", () =>
    Effect.gen(function*() {
      const out = nodePath.join(dir, "nested.jsonl")
      yield* Export.exportStores([file], out, { kind: "pipelines", format: "jsonl", limit: 5 })
      const rows = readRows(out, "jsonl") as Array<any>
      assert.deepStrictEqual(rows.map((r) => r.pipelineId), [0, 1, 2, 3, 4].map(pid))
      assert.deepStrictEqual(rows[0].tasks.map((t: any) => t.seq), [0, 1])
      assert.deepStrictEqual(rows[0].artifacts.map((a: any) => a.payload), [{ i: 0 }, { i: 0, seq: 0, answer: "a,\"0\"\n" }, {
        i: 0, seq: 1, answer: "a,\"0\"\n"
      }])
      assert.strictEqual(rows[0].attemptsTotal, 2)
      const res = nodePath.join(dir, "results.json")
      yield* Export.exportStores([file], res, { kind: "results", format: "json", limit: 5 })
      const results = readRows(res, "json") as Array<any>
      assert.strictEqual(results[4].state, "failed")
      assert.strictEqual(results[4].errorMessage, "bad 4")
      assert.strictEqual(results[4].payload, null)
      assert.deepStrictEqual(results[0].payload, { i: 0, seq: 1, answer: "a,\"0\"\n" })
    }))

  it.effect("limits: none = all, 0 = none, N = first N, negative or fractional = ConfigError", () =>
    Effect.gen(function*() {
      const out = nodePath.join(dir, "lim.jsonl")
      assert.strictEqual(yield* Export.exportStores([file], out, { kind: "artifacts", format: "jsonl", limit: 0 }), 0)
      assert.strictEqual(fs.readFileSync(out, "utf8"), "")
      assert.strictEqual(yield* Export.exportStores([file], out, { kind: "artifacts", format: "jsonl", limit: 7 }), 7)
      assert.strictEqual(yield* Export.exportStores([file, file], out, { kind: "tasks", format: "jsonl", limit: 3 }), 6)
      for (const limit of [-1, 1.5]) {
        const e = yield* Effect.flip(Export.exportStores([file], out, { kind: "tasks", format: "jsonl", limit }))
        assert.strictEqual(e._tag, "ConfigError")
      }
    }))

  it.effect("csv: keys first seen after the header prefix go to the extra column", () =>
    Effect.gen(function*() {
      const out = nodePath.join(dir, "extra.csv")
      const rows = Stream.fromIterable(
        Array.from({ length: Export.CSV_HEADER_ROWS + 3 }, (_, i) => i < Export.CSV_HEADER_ROWS ? { a: i, b: "x" } : { a: i, late: { deep: [i] } })
      )
      yield* Export.writeRows(rows, out, "csv")
      const parsed = parseCsv(fs.readFileSync(out, "utf8"))
      assert.deepStrictEqual(parsed[0], ["a", "b", "extra"])
      assert.deepStrictEqual(parsed[1], ["0", "x", ""])
      assert.deepStrictEqual(parsed.at(-1), [String(Export.CSV_HEADER_ROWS + 2), "", JSON.stringify({ late: { deep: [Export.CSV_HEADER_ROWS + 2] } })])
    }))

  it.effect("a failure mid-export leaves no partial output and no temp file; an old file survives", () =>
    Effect.gen(function*() {
      const sub = nodePath.join(dir, "atomic")
      fs.mkdirSync(sub)
      const out = nodePath.join(sub, "out.jsonl")
      fs.writeFileSync(out, "old\n")
      const failing = Stream.concat(
        Stream.fromIterable(Array.from({ length: 5000 }, (_, i) => ({ i, pad: "x".repeat(500) }))),
        Stream.fail("boom")
      )
      const e = yield* Effect.flip(Export.writeRows(failing, out, "jsonl"))
      assert.strictEqual(e, "boom")
      assert.deepStrictEqual(fs.readdirSync(sub), ["out.jsonl"])
      assert.strictEqual(fs.readFileSync(out, "utf8"), "old\n")
    }))

  it.effect("a missing output directory is an ExportError", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Export.writeRows(Stream.make({ a: 1 }), nodePath.join(dir, "no", "such", "x.jsonl"), "jsonl"))
      assert.strictEqual(e._tag, "ExportError")
    }))

  it.effect("iterRows works on the memory store", () =>
    Effect.gen(function*() {
      const store = yield* Store
      yield* writeRun(store, { n: 12, failEvery: 4 })
      const rows = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind: "results" })))
      assert.strictEqual(rows.length, 12)
      assert.deepStrictEqual(rows.filter((r) => r.state === "failed").map((r) => r.pipelineId), [pid(3), pid(7), pid(11)])
    }).pipe(Effect.provide(MemoryStore.layer())))

})

describe("Export.repeatOf", () => {
  const base = new PipelineRecord({
    pipelineId: PipelineId.make("p"), key: null, name: "n", state: "succeeded", nTasksDone: 1, nTasksTotal: 1, specDigest: "s", seedDigest: "d",
    tags: {}, attemptsTotal: 1, runId: rid("r"), createdAt: 0, updatedAt: 0, startedAt: 0, endedAt: 0, failedTask: null, errorType: null,
    errorMessage: null, errorClass: null
  })
  it("a stored repeat field first (when the store records one), then a repeat tag, then a key's #N, else null", () => {
    assert.strictEqual(Export.repeatOf({ ...base, repeat: 2, tags: { repeat: "5" } } as unknown as PipelineRecord), 2)
    assert.strictEqual(Export.repeatOf({ ...base, repeat: null, tags: { repeat: "5" } } as unknown as PipelineRecord), 5)
    assert.strictEqual(Export.repeatOf(new PipelineRecord({ ...base, key: "row-7#3" })), 3)
    assert.strictEqual(Export.repeatOf(base), null)
  })
})
