import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { PipelineRecord } from "../../src/domain/Records.js"
import * as Merge from "../../src/services/Merge.js"
import { buildStore, pid, tmpDir, storeFixture } from "./ExportFixture.js"
import { PipelineId } from "../../src/domain/Ids.js"
import { rid } from "../support/ids.js"

const dir = tmpDir()
const a = nodePath.join(dir, "a.db")
const b = nodePath.join(dir, "b.db")
// a: p0..p9, p4 and p9 failed; b: p0..p14, p0..p4 interrupted, the rest succeeded (overlap p0..p9)
/** The two store files, built once for this file's tests (a `layer()` fixture), and the store opener. */
const Built = storeFixture(Effect.all([
  buildStore(a, [{ n: 10, failEvery: 5 }]),
  buildStore(b, [{ n: 15, runId: "r2", startedAt: 5000, state: (i) => (i < 5 ? "interrupted" : "succeeded") }])
]))

const rec = (id: string, state: PipelineRecord["state"], endedAt: number | null, attemptsTotal = 1) =>
  new PipelineRecord({
    pipelineId: PipelineId.make(id), key: null, name: "m", state, nTasksDone: 0, nTasksTotal: 1, specDigest: "s", seedDigest: "d", tags: {},
    attemptsTotal, runId: rid("r"), createdAt: 0, updatedAt: endedAt ?? 0, startedAt: 0, endedAt, failedTask: null, errorType: null,
    errorMessage: null, errorClass: null
  })

layer(Built, { excludeTestServices: true })("Merge", (it) => {
  it.effect("the same store twice changes nothing but duplicates; events stay raw", () =>
    Effect.gen(function*() {
      const one = yield* Merge.mergeReports([a])
      const two = yield* Merge.mergeReports([a, a])
      assert.deepStrictEqual({ ...two.stats(), duplicates: 0, sources: [], sourceEventsTotal: 0 }, { ...one.stats(), duplicates: 0, sources: [], sourceEventsTotal: 0 })
      assert.strictEqual(two.duplicates, 10)
      assert.strictEqual(two.sourceEventsTotal, 2 * one.sourceEventsTotal)
      assert.strictEqual(one.tasks, 8 * 2 + 2)
      assert.strictEqual(one.attemptsTotal, 8 * 2 + 2 * 3)
    }))

  it.effect("overlapping shards: best state wins, counts from survivors, merged export deduplicated", () =>
    Effect.gen(function*() {
      const m = yield* Merge.mergeReports([a, b])
      assert.strictEqual(m.pipelines, 15)
      assert.strictEqual(m.duplicates, 10)
      // p9 failed in a, succeeded in b: b wins
      assert.strictEqual(m.rows.find((r) => r.pipeline.pipelineId === pid(9))!.source, b)
      assert.deepStrictEqual(m.errors().map((e) => e.pipelineId), [pid(4)])
      assert.strictEqual(m.stats().byState.failed, 1)
      assert.match(m.summary(), /15 pipeline\(s\)/)
      const out = nodePath.join(dir, "merged.jsonl")
      assert.strictEqual(yield* m.export(out, { kind: "results" }), 15)
      const ids = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l).pipelineId)
      assert.strictEqual(new Set(ids).size, 15)
    }))

  it.effect("ties on state go to the latest finish; running loses to interrupted", () =>
    Effect.gen(function*() {
      const m = yield* Merge.mergeSources([
        { source: "x", pipelines: [rec("p", "failed", 10, 1), rec("q", "running", null, 1)], taskCounts: new Map([["p", 1]]), eventsTotal: 3 },
        { source: "y", pipelines: [rec("p", "failed", 20, 2), rec("q", "interrupted", 5, 4)], taskCounts: new Map([["p", 2]]), eventsTotal: 4 }
      ])
      assert.deepStrictEqual(m.rows.map((r) => [r.pipeline.pipelineId, r.source]), [["p", "y"], ["q", "y"]])
      assert.strictEqual(m.attemptsTotal, 6)
      assert.strictEqual(m.tasks, 2)
      assert.strictEqual(m.sourceEventsTotal, 7)
    }))

  it.effect("a row without attemptsTotal is a ConfigError naming the row and source", () =>
    Effect.gen(function*() {
      const bad = { ...rec("p7", "succeeded", 1), attemptsTotal: undefined } as unknown as PipelineRecord
      const e = yield* Effect.flip(Merge.mergeSources([{ source: "shard3.db", pipelines: [bad], taskCounts: new Map(), eventsTotal: 0 }]))
      assert.strictEqual(e._tag, "ConfigError")
      assert.match(e.message, /p7/)
      assert.match(e.message, /shard3\.db/)
    }))

  it.effect("merging never modifies the store files", () =>
    Effect.gen(function*() {
      const before = [fs.readFileSync(a), fs.statSync(a).mtimeMs]
      const m = yield* Merge.mergeReports([a, a])
      yield* m.export(nodePath.join(dir, "ro.csv"), { format: "csv" })
      assert.isTrue((before[0] as Buffer).equals(fs.readFileSync(a)))
      assert.strictEqual(fs.statSync(a).mtimeMs, before[1])
      assert.isFalse(fs.existsSync(`${a}-wal`))
    }))
})
