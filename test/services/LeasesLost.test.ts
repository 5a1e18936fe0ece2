/**
 * Lost global leases where a user looks (issue 17): the `lease.lost` pool events a runner on
 * PostgreSQL pools writes to the event log (`PgPools`: `leaseId`, `reason` taken|deadline,
 * `lateMs`, `runnerId`, with the pool and resource the listener adds) are counted per pool
 * resource by `report` (text and JSON), `/stats` and `watch` (its picture and its line).
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as nodePath from "node:path"
import type { RunId } from "../../src/domain/Ids.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Report from "../../src/services/Report.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as StatsServer from "../../src/services/internal/statsServer.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { rid } from "../support/ids.js"
import { buildStore, storeFixture, tmpDir } from "./ExportFixture.js"

/** A `lease.lost` event as the runner's pool listener records it. */
const lost = (s: StoreService, runId: RunId, resourceId: string, reason: "taken" | "deadline", lateMs: number, runnerId: string, ts: number) =>
  s.emitEvent({
    kind: "lease.lost",
    pipelineId: null,
    runId,
    data: { pool: "llm", resourceId, leaseId: `g-${ts}`, reason, lateMs, runnerId },
    ts
  })

const dir = tmpDir()
const file = nodePath.join(dir, "lost.db")
// run "old" lost one lease on k1; run "new" lost three on k1 (two taken, one late) and one on k2
const Built = storeFixture(buildStore(file, [{ n: 2, runId: "old", startedAt: 1000 }, { n: 4, runId: "new", startedAt: 9000 }], (s) =>
  Effect.gen(function*() {
    yield* lost(s, rid("old"), "k1", "taken", 0, "r-a", 1500)
    yield* lost(s, rid("new"), "k1", "taken", 0, "r-a", 9100)
    yield* lost(s, rid("new"), "k1", "taken", 0, "r-b", 9200)
    yield* lost(s, rid("new"), "k1", "deadline", 40, "r-b", 9300)
    yield* lost(s, rid("new"), "k2", "deadline", 0, "r-c", 9050)
    // another kind is not a loss
    yield* s.emitEvent({ kind: "lease.leaked", pipelineId: null, runId: rid("new"), data: { pool: "llm", resourceId: "k1" }, ts: 9400 })
  })))

layer(Built, { excludeTestServices: true })("lost global leases", (it) => {
  it.effect("report: per pool resource of the selected runs, with the reasons, in JSON and in words", () =>
    Effect.gen(function*() {
      const latest = yield* Report.reportPaths([file])
      assert.deepStrictEqual(
        latest.leasesLost.map((l) => [l.pool, l.resourceId, l.lost, l.taken, l.deadline, l.maxLateMs, l.lastAt, l.runners]),
        [["llm", "k1", 3, 2, 1, 40, 9300, ["r-a", "r-b"]], ["llm", "k2", 1, 0, 1, 0, 9050, ["r-c"]]]
      )
      const text = Report.renderText(latest)
      assert.include(text, "Global leases lost: 4")
      assert.include(text, "llm/k1: 3 lost (taken 2, deadline 1; up to 40 ms late)")
      assert.include(text, "llm/k2: 1 lost (taken 0, deadline 1)")
      // the JSON `--json` prints carries them
      assert.deepStrictEqual(JSON.parse(JSON.stringify(latest)).leasesLost[0].lost, 3)
      // the whole store counts the older run's loss too; one run only its own
      const all = yield* Report.reportPaths([file], { runId: "all" })
      assert.deepStrictEqual(all.leasesLost.map((l) => [l.resourceId, l.lost]), [["k1", 4], ["k2", 1]])
      const old = yield* Report.reportPaths([file], { runId: "old" })
      assert.deepStrictEqual(old.leasesLost.map((l) => [l.resourceId, l.lost, l.taken]), [["k1", 1, 1]])
    }))

  it.effect("/stats and watch: the snapshot lists them per resource; the picture and the line say so", () =>
    Effect.gen(function*() {
      const snapshot = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* Store
        const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0, runId: "latest" })
        return yield* Effect.promise(async () => (await fetch(`http://127.0.0.1:${info.port}/stats`)).json() as Promise<Monitor.Snapshot>)
      }).pipe(Effect.provide(SqliteStore.layerReadOnly(file))))
      assert.deepStrictEqual(snapshot.leases_lost, [
        { pool: "llm", resource_id: "k1", lost: 3, taken: 2, deadline: 1, max_late_ms: 40, last_at: 9300, runners: ["r-a", "r-b"] },
        { pool: "llm", resource_id: "k2", lost: 1, taken: 0, deadline: 1, max_late_ms: 0, last_at: 9050, runners: ["r-c"] }
      ])
      const picture = Monitor.renderSnapshot(snapshot, { width: 120 })
      assert.include(picture, "global leases lost 4 (attempts retried)")
      assert.include(picture, "llm/k1 3 lost · taken 2 · deadline 1 · up to 40ms late")
      assert.include(Monitor.renderLine(snapshot), "4 global leases lost")
    }))
})

describe("lost global leases (none)", () => {
  const clean = nodePath.join(dir, "clean.db")
  layer(storeFixture(buildStore(clean, [{ n: 2, runId: "only", startedAt: 1000 }])), { excludeTestServices: true })("a run on local pools", (it) => {
    it.effect("report, /stats and watch say nothing of leases", () =>
      Effect.gen(function*() {
        const r = yield* Report.reportPaths([clean])
        assert.deepStrictEqual(r.leasesLost, [])
        assert.notInclude(Report.renderText(r), "leases lost")
        const s = yield* Effect.flatMap(Store, (store) => Monitor.readSnapshot(store, { runId: "latest" })).pipe(
          Effect.scoped,
          Effect.provide(SqliteStore.layerReadOnly(clean))
        )
        assert.strictEqual(s.leases_lost, undefined)
        assert.notInclude(Monitor.renderLine(s), "lost")
      }))
  })
})
