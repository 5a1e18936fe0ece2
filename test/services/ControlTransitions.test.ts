/**
 * The count of control transitions as every surface prints it (tester13h finding 6): a ledger
 * row is written for every committed `Handoff`, `end` included, but `maxHandoffs` is spent by
 * all but `end`. A pipeline with `maxHandoffs: 2` that rewinds twice and then ends completes at
 * its limit with 3 ledger rows; the surfaces say "3 (2 against maxHandoffs, 1 end)", never a bare
 * "handoffs: 3" that reads as over the budget. The run summary, `report`, `merge`, `watch`'s
 * lines, serve's `/stats` and page, and every store's `stats` give the same split.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { transitionsText } from "../../src/domain/internal/transitions.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as StoreResolver from "../../src/layers/StoreResolver.js"
import * as Merge from "../../src/services/internal/merge.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as StatsServer from "../../src/services/internal/statsServer.js"
import * as Pool from "../../src/services/Pool.js"
import * as Report from "../../src/services/Report.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { budgetEndSpecs } from "./ControlFixture.js"

/** Two pipelines that spend their budget and end: 6 transitions, 4 against the budgets, 2 ends. */
const WORDS = "6 (4 against maxHandoffs, 2 ends)"

const runOn = (store: Layer.Layer<Store, unknown>) =>
  Runner.run(budgetEndSpecs).pipe(
    Effect.provide(Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(store, Pool.layer([]))))
  )

const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-control-transitions-"))
const file = nodePath.join(dir, "t.db")

describe("transitions: ends included, split against maxHandoffs", () => {
  it("the wording", () => {
    assert.strictEqual(transitionsText(3, 2), "3 (2 against maxHandoffs, 1 end)")
    assert.strictEqual(transitionsText(2, 2), "2 (2 against maxHandoffs, 0 ends)")
    assert.strictEqual(transitionsText(3, undefined), "3 (end included)")
  })

  it.live("run summary and JSON, report, merge, watch and serve on a SQLite store", () =>
    Effect.gen(function*() {
      const report = yield* Effect.orDie(runOn(SqliteStore.layer({ filename: file })))
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(report.handoffsTotal, 6)
      assert.strictEqual(report.handoffsBudgeted, 4)
      assert.strictEqual(report.toJSON()["handoffsBudgeted"], 4)
      assert.strictEqual(report.stats.handoffsTotal, 6)
      assert.strictEqual(report.stats.handoffsBudgeted, 4)
      assert.match(report.summary(), new RegExp(`^transitions: ${escape(WORDS)}$`, "m"))
      assert.notMatch(report.summary(), /^handoffs:/m)

      const r = yield* Report.reportPaths([file]).pipe(Effect.provide(StoreResolver.layerOpener()))
      assert.strictEqual(r.handoffsTotal, 6)
      assert.strictEqual(r.handoffsBudgeted, 4)
      assert.strictEqual(JSON.parse(JSON.stringify(r)).handoffsBudgeted, 4)
      assert.match(Report.renderText(r), new RegExp(` {2}Transitions: ${escape(WORDS)}$`, "m"))
      assert.notMatch(Report.renderText(r), /Handoffs:/)

      const merged = yield* Merge.mergeReports([file, file]).pipe(Effect.provide(StoreResolver.layerOpener()))
      assert.strictEqual(merged.handoffsBudgeted, 4)
      assert.strictEqual(merged.stats().handoffsBudgeted, 4)
      assert.include(merged.summary(), `, transitions ${WORDS}, duplicates folded 2`)
      assert.deepStrictEqual(merged.rows.map((row) => [row.handoffs, row.handoffsBudgeted]), [[3, 2], [3, 2]])
      // a source read without the split (an older MergeSource) says only that ends are included
      const bare = yield* Merge.mergeSources([{
        source: "x",
        pipelines: merged.rows.map((row) => row.pipeline),
        taskCounts: new Map(),
        handoffCounts: new Map(merged.rows.map((row) => [row.pipeline.pipelineId, row.handoffs])),
        eventsTotal: 0
      }])
      assert.isNull(bare.handoffsBudgeted)
      assert.include(bare.summary(), ", transitions 6 (end included),")

      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* Store
        const snapshot = yield* Monitor.readSnapshot(store, { runId: "all" })
        assert.strictEqual(snapshot.handoffs_total, 6)
        assert.strictEqual(snapshot.handoffs_budgeted, 4)
        assert.match(Monitor.renderSnapshot(snapshot), new RegExp(`^transitions ${escape(WORDS)}$`, "m"))
        assert.include(Monitor.renderLine(snapshot), `transitions ${WORDS}`)
        const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0 })
        const stats = yield* Effect.promise(() => fetch(`${info.url}/stats`).then((x) => x.json() as Promise<any>))
        assert.strictEqual(stats.handoffs_budgeted, 4)
        const page = yield* Effect.promise(() => fetch(`${info.url}/`).then((x) => x.text()))
        assert.include(page, `transitions <b id="handoffs">${WORDS}</b>`)
      })).pipe(Effect.provide(SqliteStore.layerReadOnly(file)))
    }))

  it.live("the memory store splits them the same way", () =>
    Effect.gen(function*() {
      const report = yield* Effect.orDie(runOn(MemoryStore.layer()))
      assert.strictEqual(report.stats.handoffsTotal, 6)
      assert.strictEqual(report.stats.handoffsBudgeted, 4)
      assert.strictEqual(report.handoffsBudgeted, 4)
    }))
})

function escape(s: string): string {
  return s.replace(/[()]/g, "\\$&")
}
