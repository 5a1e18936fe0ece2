/**
 * The surfaces of control flow (issue 13 §5): `handoffsTotal` in report, merge and serve's
 * `/stats`; `/pipelines` rows with the traversal state and `cursor_kind: "position"` for
 * pipelines that declare control only; export's `handoffs` row kind and, in `pipelines` rows,
 * the control record and ledger rows of control pipelines only; nested task and artifact rows
 * with `visit` and `active`. The store is written by the runner (ControlFixture.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Option, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as StoreResolver from "../../src/layers/StoreResolver.js"
import * as Export from "../../src/services/internal/export.js"
import * as Merge from "../../src/services/internal/merge.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as Report from "../../src/services/Report.js"
import * as StatsServer from "../../src/services/internal/statsServer.js"
import { Store } from "../../src/services/Store.js"
import { type ControlStore, writeControlStore } from "./ControlFixture.js"

const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-control-surfaces-"))
const file = nodePath.join(dir, "control.db")
let ids: ControlStore | undefined
/** The fixture store, written once (by the first test that needs it). */
const fixture = Effect.suspend(() =>
  ids !== undefined ? Effect.succeed(ids) : Effect.map(writeControlStore(file), (written) => (ids = written))
)

const rowsOf = (kind: Export.RowKind, runId?: string) =>
  Effect.scoped(Effect.gen(function*() {
    const { bulk, store } = yield* Export.openReadOnly(file)
    return Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind, runId: runId as never }, bulk))) as Array<any>
  })).pipe(Effect.provide(StoreResolver.layerOpener()))

describe("control flow on the read surfaces", () => {
  it.live("report: handoffsTotal in JSON and text (run-scoped); a plain-only run keeps its text", () =>
    Effect.gen(function*() {
      const { control } = yield* fixture
      const r = yield* Report.reportPaths([file]).pipe(Effect.provide(StoreResolver.layerOpener()))
      assert.strictEqual(r.handoffsTotal, control.length)
      assert.strictEqual(r.pipelines, 5)
      // 2 × (generate, validate (handed off), generate#1, validate#1, report) + 3 plain tasks
      assert.strictEqual(r.tasks, 13)
      assert.match(Report.renderText(r), /Tasks: 13 {2}Attempts: 13 {2}Retries: 0 {2}Transitions: 2 \(2 against maxHandoffs, 0 ends\)$/m)
      assert.strictEqual(JSON.parse(JSON.stringify(r)).handoffsTotal, 2)
      // the same store twice: each store's run-scoped ledger count is summed, like tasks
      const twice = yield* Report.reportPaths([file, file]).pipe(Effect.provide(StoreResolver.layerOpener()))
      assert.strictEqual(twice.handoffsTotal, 4)
      assert.strictEqual(twice.tasks, 26)
      const text = Report.renderText({ ...r, handoffsTotal: 0 })
      assert.match(text, /Tasks: 13 {2}Attempts: 13 {2}Retries: 0$/m)
      // admission to end (queueing included) is labelled as such, not as latency
      assert.match(text, /^Time in run ms \(admission to end, incl\. queueing\): p50 [\d.]+ {2}p95 [\d.]+ {2}p99 [\d.]+$/m)
      assert.notMatch(text, /^Latency/m)
    }))

  it.live("merge: handoffsTotal recounted from the surviving rows (a store given twice counts once)", () =>
    Effect.gen(function*() {
      const { control } = yield* fixture
      const one = yield* Merge.mergeReports([file]).pipe(Effect.provide(StoreResolver.layerOpener()))
      assert.strictEqual(one.handoffsTotal, 2)
      assert.strictEqual(one.stats().handoffsTotal, 2)
      assert.deepStrictEqual(
        one.rows.map((r) => [r.pipeline.pipelineId, r.handoffs]).sort(),
        [...control.map((id) => [id, 1]), ...ids!.plains.map((id) => [id, 0])].sort()
      )
      assert.match(one.summary(), /tasks 13, attempts 13, transitions 2 \(2 against maxHandoffs, 0 ends\), duplicates folded 0/)
      assert.match(one.summary(), /^time in run ms \(admission to end, incl\. queueing\): p50 \d+, p95 \d+, p99 \d+$/m)
      assert.notMatch(one.summary(), /^latency/m)
      const twice = yield* Merge.mergeReports([file, file]).pipe(Effect.provide(StoreResolver.layerOpener()))
      assert.strictEqual(twice.handoffsTotal, 2)
      assert.strictEqual(twice.duplicates, 5)
      // sources read without the traversal capability (older MergeSource values) count none
      const bare = yield* Merge.mergeSources([{ source: "x", pipelines: [], taskCounts: new Map(), eventsTotal: 0 }])
      assert.strictEqual(bare.handoffsTotal, 0)
      assert.notMatch(bare.summary(), /transitions/)
    }))

  it.live("export: the handoffs row kind (ledger rows in write order; limit and run filter)", () =>
    Effect.gen(function*() {
      const { control } = yield* fixture
      const rows = yield* rowsOf("handoffs")
      assert.strictEqual(rows.length, 2)
      assert.deepStrictEqual(rows.map((r) => r.pipelineId).sort(), [...control].sort())
      for (const r of rows) {
        assert.deepInclude(r, {
          fromSeq: 1,
          fromTask: "validate",
          toSeq: 0,
          toTask: "generate",
          operation: "rewind",
          entrySeq: 3,
          entryArtifactId: `${r.pipelineId}:3`,
          entryReused: false,
          reason: "first draft refused"
        })
      }
      assert.isTrue(rows[0].handoffId < rows[1].handoffId)
      const runId = rows[0].runId as string
      assert.strictEqual((yield* rowsOf("handoffs", runId)).length, 2)
      assert.strictEqual((yield* rowsOf("handoffs", "no-such-run")).length, 0)
      const limited = yield* Effect.scoped(Effect.gen(function*() {
        const { bulk, store } = yield* Export.openReadOnly(file)
        return Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind: "handoffs", limit: 1 }, bulk)))
      })).pipe(Effect.provide(StoreResolver.layerOpener()))
      assert.deepStrictEqual(limited, [rows[0]])
      // as CSV: one line per ledger row under the header
      const out = nodePath.join(dir, "handoffs.csv")
      assert.strictEqual(yield* Export.exportStores([file], out, { kind: "handoffs", format: "csv" }).pipe(Effect.provide(StoreResolver.layerOpener())), 2)
      const lines = fs.readFileSync(out, "utf8").trim().split("\n")
      assert.strictEqual(lines.length, 3)
      assert.match(lines[0]!, /^handoffId,pipelineId,runId,fromSeq,fromTask,toSeq,toTask,operation,entrySeq,entryArtifactId,entryReused,reason,ts/)
    }))

  it.live("export: pipelines rows carry the control record and ledger of control pipelines only; nested rows carry visit and active", () =>
    Effect.gen(function*() {
      const { control, plain } = yield* fixture
      const rows = yield* rowsOf("pipelines")
      const plainRow = rows.find((r) => r.pipelineId === plain)
      assert.isFalse("control" in plainRow)
      assert.isFalse("handoffs" in plainRow)
      assert.deepStrictEqual(plainRow.tasks.map((t: any) => [t.seq, t.visit, t.active]), [[0, 0, true]])
      for (const id of control) {
        const row = rows.find((r) => r.pipelineId === id)
        assert.strictEqual(row.state, "succeeded")
        assert.deepStrictEqual(row.control, {
          version: row.control.version,
          cursor: 3,
          cursorKind: "position",
          pending: null,
          active: [
            { seq: 0, visit: 1, artifact: `${id}:0#1` },
            { seq: 1, visit: 1, artifact: `${id}:1#1` },
            { seq: 2, visit: 0, artifact: `${id}:2` }
          ],
          counters: [2, 2, 1],
          handoffs: 1,
          payloads: 1,
          ledger: 1,
          floor: 0,
          seed: `${id}:-1`,
          input: null,
          terminal: `${id}:2`
        })
        assert.isAbove(row.control.version, 0)
        assert.deepStrictEqual(row.handoffs.map((h: any) => [h.operation, h.fromTask, h.toTask]), [["rewind", "validate", "generate"]])
        const tasks = [...row.tasks].sort((a: any, b: any) => a.visit - b.visit || a.seq - b.seq)
        assert.deepStrictEqual(tasks.map((t: any) => [t.seq, t.visit, t.state, t.active]), [
          [0, 0, "succeeded", false],
          [1, 0, "handed_off", false],
          [2, 0, "succeeded", true],
          [0, 1, "succeeded", true],
          [1, 1, "succeeded", true]
        ])
        const artifacts = row.artifacts.map((a: any) => [a.seq, a.visit, a.active])
        assert.deepInclude(artifacts, [0, 0, false])
        assert.deepInclude(artifacts, [0, 1, true])
        assert.deepInclude(artifacts, [3, 0, true]) // the rewind's payload
        const payload = row.artifacts.find((a: any) => a.seq === 3).payload
        assert.deepStrictEqual(payload, { n: payload.n, hint: "again" })
        assert.deepStrictEqual(row.artifacts.find((a: any) => a.isFinal).payload, { n: payload.n, hint: "again", visit: 1, ok: true })
      }
      // iso times reach the nested ledger rows too
      const iso = Export.isoTimes(rows.find((r) => r.pipelineId === control[0]))
      assert.match((iso["handoffs"] as Array<any>)[0].ts, /^\d{4}-\d\d-\d\dT/)
      // the top-level task and attempt rows carry the visit
      const attempts = yield* rowsOf("attempts")
      assert.deepStrictEqual(
        attempts.filter((a) => a.pipelineId === control[0]).map((a) => [a.taskName, a.visit, a.outcome]),
        [["generate", 0, "succeeded"], ["validate", 0, "handed_off"], ["generate", 1, "succeeded"], ["validate", 1, "succeeded"], ["report", 0, "succeeded"]]
      )
    }))

  it.live("export: artifact rows carry the occurrence address after the numeric id (top-level, nested, CSV); task rows visit 0 first", () =>
    Effect.gen(function*() {
      const { control, plain } = yield* fixture
      const id = control[0]!
      const rows = (yield* rowsOf("artifacts")).filter((r) => r.pipelineId === id)
      assert.deepStrictEqual(rows.map((r) => [r.seq, r.visit, r.address]), [
        [-1, 0, `${id}:-1`],
        [0, 0, `${id}:0`],
        [0, 1, `${id}:0#1`],
        [1, 1, `${id}:1#1`],
        [2, 0, `${id}:2`],
        [3, 0, `${id}:3`]
      ])
      assert.deepStrictEqual(Object.keys(rows[0]).slice(0, 2), ["artifactId", "address"])
      assert.isNumber(rows[0].artifactId)
      const nested = (yield* rowsOf("pipelines")).find((r) => r.pipelineId === plain)
      assert.deepStrictEqual(nested.artifacts.map((a: any) => a.address), [`${plain}:-1`, `${plain}:0`])
      const out = nodePath.join(dir, "artifacts.csv")
      yield* Export.exportStores([file], out, { kind: "artifacts", format: "csv" }).pipe(Effect.provide(StoreResolver.layerOpener()))
      const [header, ...lines] = fs.readFileSync(out, "utf8").trim().split("\n")
      assert.match(header!, /^artifactId,address,pipelineId,/)
      assert.isTrue(lines.some((l) => l.includes(`,${id}:0#1,`)))
      // the top-level task rows: by station, visit 0 before the revisit
      const tasks = (yield* rowsOf("tasks")).filter((r) => r.pipelineId === id)
      assert.deepStrictEqual(tasks.map((t) => [t.seq, t.visit]), [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0]])
    }))

  it.live("serve: /stats handoffs_total, /pipelines traversal and cursor_kind only on control rows", () =>
    Effect.gen(function*() {
      const { control, plain } = yield* fixture
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* Store
        const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0 })
        const get = (p: string) => Effect.promise(() => fetch(`${info.url}${p}`).then((r) => r.json() as Promise<any>))
        const stats = yield* get("/stats")
        assert.strictEqual(stats.handoffs_total, 2)
        const page0 = yield* Effect.promise(() => fetch(`${info.url}/`).then((r) => r.text()))
        assert.include(page0, `transitions <b id="handoffs">2 (2 against maxHandoffs, 0 ends)</b>`)
        const page = yield* get("/pipelines?limit=10")
        assert.strictEqual(page.rows.length, 5)
        const plainRow = page.rows.find((r: any) => r.pipeline_id === plain)
        assert.isFalse("cursor_kind" in plainRow)
        assert.isFalse("traversal" in plainRow)
        for (const id of control) {
          const row = page.rows.find((r: any) => r.pipeline_id === id)
          assert.strictEqual(row.cursor_kind, "position")
          assert.deepInclude(row.traversal, { cursor: 3, pending: null, counters: [2, 2, 1], handoffs: 1, ledger: 1, floor: 0 })
          assert.deepStrictEqual(row.traversal.active.map((a: any) => a.artifact), [`${id}:0#1`, `${id}:1#1`, `${id}:2`])
        }
        // the handoffs rows download like any other kind
        const r = yield* Effect.promise(() => fetch(`${info.url}/export?rows=handoffs&format=jsonl`))
        assert.strictEqual(r.status, 200)
        const lines = (yield* Effect.promise(() => r.text())).trim().split("\n")
        assert.strictEqual(lines.length, 2)
        // the terminal view says so too
        const snapshot = yield* Monitor.readSnapshot(store, { runId: "all" })
        assert.match(Monitor.renderSnapshot(snapshot), /^transitions 2 \(2 against maxHandoffs, 0 ends\)$/m)
      })).pipe(Effect.provide(SqliteStore.layerReadOnly(file)))
    }))

  it.live("export reads the traversal state once per plain definition, and for every pipeline of a control definition", () =>
    Effect.gen(function*() {
      const { control, plains } = yield* fixture
      const probed: Array<string> = []
      const exported = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* Store
        const t = store.traversal!
        const counting = { ...t, visitState: (id: typeof plains[number]) => Effect.zipRight(Effect.sync(() => probed.push(id)), t.visitState(id)) }
        const wrapped = new Proxy(store, { get: (s, k, r) => (k === "traversal" ? counting : Reflect.get(s, k, r)) })
        return Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(wrapped, { kind: "pipelines" })))
      })).pipe(Effect.provide(SqliteStore.layerReadOnly(file)))
      assert.strictEqual(exported.length, 5)
      assert.strictEqual(probed.filter((id) => plains.includes(id as never)).length, 1)
      assert.deepStrictEqual(probed.filter((id) => control.includes(id as never)).sort(), [...control].sort())
      assert.strictEqual(exported.filter((r) => "control" in r).length, 2)
    }))

  it.live("the read surfaces of a plain store are unchanged: no handoffs, no control fields", () =>
    Effect.gen(function*() {
      yield* fixture
      const rows = yield* rowsOf("pipelines")
      const snapshotPage = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* Store
        // a store without the traversal capability (a third-party backend) reads as plain
        const bare = new Proxy(store, { get: (t, k, r) => (k === "traversal" ? undefined : Reflect.get(t, k, r)) })
        const page = yield* Monitor.storeReads(bare).pipelinesPage({ runId: undefined, after: undefined, limit: 10 })
        const exported = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(bare, { kind: "pipelines" })))
        const handoffs = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(bare, { kind: "handoffs" })))
        const state = yield* store.traversal!.visitState(ids!.plain)
        return { page, exported, handoffs, state }
      })).pipe(Effect.provide(SqliteStore.layerReadOnly(file)))
      assert.isTrue(Option.isNone(snapshotPage.state))
      assert.isTrue(snapshotPage.page.rows.every((r) => r.cursor_kind === undefined && r.traversal === undefined))
      assert.isTrue(snapshotPage.exported.every((r) => !("control" in r) && !("handoffs" in r)))
      assert.deepStrictEqual(snapshotPage.handoffs, [])
      assert.strictEqual(rows.length, 5)
    }))
})
