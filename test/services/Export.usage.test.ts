/**
 * Issue 18 §2 in exports: `--rows resources` and `--rows pools` give the token and cost totals
 * per pool resource and per pool, of every run or of one (`runId`), in every format, with the
 * figures `report` prints (an attempt that leased several resources counts on each; a call
 * without a price leaves the cost unknown, not $0).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { PipelineRecord } from "../../src/domain/Records.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Export from "../../src/services/Export.js"
import * as Report from "../../src/services/Report.js"
import type { StoreService } from "../../src/services/Store.js"
import { Store } from "../../src/services/Store.js"
import { pid, rid } from "../support/ids.js"

/** Runs r1 and r2 of model calls on llm/a, llm/b (one attempt leasing both) and judge/j; an unrecorded resource ghost/z. */
const fill = (store: StoreService) =>
  Effect.gen(function*() {
    let n = 0
    const call = (runId: string, leases: ReadonlyArray<string>, tokensIn: number | null, tokensOut: number | null, costUsd: number | null, extra: { rateLimited?: boolean; estimated?: boolean } = {}) =>
      Effect.gen(function*() {
        const p = pid(`p${n++}`)
        yield* store.admit([
          new PipelineRecord({
            pipelineId: p, key: null, name: "demo", state: "succeeded", nTasksDone: 1, nTasksTotal: 1, specDigest: "spec",
            seedDigest: `seed${n}`, tags: {}, attemptsTotal: 1, runId: rid(runId), createdAt: n, updatedAt: n,
            startedAt: n, endedAt: n + 1, failedTask: null, errorType: null, errorMessage: null, errorClass: null
          })
        ])
        yield* store.recordAttempt({
          pipelineId: p, runId: rid(runId), taskRunId: `${p}/0`, taskName: "ask", seq: 0, attemptNo: 1,
          outcome: extra.rateLimited === true ? "failed" : "succeeded", errorClass: extra.rateLimited === true ? "rate_limit" : null,
          errorType: null, errorMessage: null, decision: null, leaseIds: leases.map((t, i) => `${t}#${n}.${i}`),
          startedAt: n, endedAt: n + 1, durationMs: 1, tokensIn, tokensOut, costUsd, tokensEstimated: extra.estimated === true
        })
      })
    yield* store.openRun({ runId: rid("r1"), startedAt: 1 })
    yield* call("r1", ["llm/a"], 100, 10, 0.001)
    yield* call("r1", ["llm/a", "llm/b"], 200, 20, 0.002)
    yield* call("r1", ["judge/j"], 50, 5, null, { estimated: true })
    yield* store.finishRun(rid("r1"), { status: "completed", endedAt: 50 })
    yield* store.openRun({ runId: rid("r2"), startedAt: 100 })
    yield* call("r2", ["llm/b"], null, null, null, { rateLimited: true })
    yield* call("r2", ["llm/b"], 1000, 100, 0.01)
    yield* call("r2", ["ghost/z"], 7, 3, 0.5)
    yield* store.finishRun(rid("r2"), { status: "completed", endedAt: 150 })
    for (const [pool, id] of [["llm", "a"], ["llm", "b"], ["judge", "j"], ["judge", "idle"]] as const) {
      yield* store.putResource({ pool, resourceId: id, kind: "chat", spec: {}, health: { state: "ready" }, updatedAt: 1 })
    }
    yield* store.flush
  })

const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-export-usage-"))

/** Exports `kind` of the store in context as `format`; returns the file's text. */
const exported = (kind: Export.RowKind, format: Export.Format, runId?: string) =>
  Effect.gen(function*() {
    const store = yield* Store
    const out = nodePath.join(dir, `${kind}-${runId ?? "all"}-${Math.random().toString(36).slice(2)}.${format}`)
    yield* Export.exportStore(store, out, { kind, format, ...(runId === undefined ? {} : { runId: rid(runId) }) })
    return fs.readFileSync(out, "utf8")
  })

const RESOURCES_ALL = [
  { pool: "ghost", resourceId: "z", kind: null, runId: null, attempts: 1, retries: 0, rateLimited: 0, tokensIn: 7, tokensOut: 3, estimated: 0, unpriced: 0, costUsd: 0.5 },
  { pool: "judge", resourceId: "idle", kind: "chat", runId: null, attempts: 0, retries: 0, rateLimited: 0, tokensIn: 0, tokensOut: 0, estimated: 0, unpriced: 0, costUsd: 0 },
  { pool: "judge", resourceId: "j", kind: "chat", runId: null, attempts: 1, retries: 0, rateLimited: 0, tokensIn: 50, tokensOut: 5, estimated: 1, unpriced: 1, costUsd: null },
  { pool: "llm", resourceId: "a", kind: "chat", runId: null, attempts: 2, retries: 0, rateLimited: 0, tokensIn: 300, tokensOut: 30, estimated: 0, unpriced: 0, costUsd: 0.003 },
  { pool: "llm", resourceId: "b", kind: "chat", runId: null, attempts: 3, retries: 0, rateLimited: 1, tokensIn: 1200, tokensOut: 120, estimated: 0, unpriced: 0, costUsd: 0.012 }
]

const POOLS_ALL = [
  { pool: "ghost", runId: null, resources: 1, attempts: 1, retries: 0, rateLimited: 0, tokensIn: 7, tokensOut: 3, estimated: 0, unpriced: 0, costUsd: 0.5 },
  { pool: "judge", runId: null, resources: 2, attempts: 1, retries: 0, rateLimited: 0, tokensIn: 50, tokensOut: 5, estimated: 1, unpriced: 1, costUsd: null },
  { pool: "llm", runId: null, resources: 2, attempts: 5, retries: 0, rateLimited: 1, tokensIn: 1500, tokensOut: 150, estimated: 0, unpriced: 0, costUsd: 0.015 }
]

/** Numbers compared to 1e-12 (sums of dollar amounts in floating point). */
const close = (actual: ReadonlyArray<Record<string, unknown>>, expected: ReadonlyArray<Record<string, unknown>>) => {
  assert.strictEqual(actual.length, expected.length)
  actual.forEach((row, i) => {
    const want = expected[i]!
    assert.deepStrictEqual(Object.keys(row), Object.keys(want))
    for (const [k, v] of Object.entries(want)) {
      if (typeof v === "number" && typeof row[k] === "number") assert.closeTo(row[k] as number, v, 1e-12, `${i}.${k}`)
      else assert.strictEqual(row[k], v, `${i}.${k}`)
    }
  })
}

const layers = [["memory", MemoryStore.layer()], ["sqlite", SqliteStore.layer({ filename: nodePath.join(dir, "store.db") })]] as const

describe("export: per-resource and per-pool totals", () => {
  for (const [name, layer] of layers) {
    it.effect(`${name}: resources and pools as JSON, every run and one run; the pools agree with report's subtotals`, () =>
      Effect.gen(function*() {
        yield* fill(yield* Store)
        close(JSON.parse(yield* exported("resources", "json")), RESOURCES_ALL)
        close(JSON.parse(yield* exported("pools", "json")), POOLS_ALL)
        // one run: r2's attempts only (the rate-limited call is a call on llm/b)
        const r2 = JSON.parse(yield* exported("pools", "json", "r2"))
        close(r2, [
          { pool: "ghost", runId: "r2", resources: 1, attempts: 1, retries: 0, rateLimited: 0, tokensIn: 7, tokensOut: 3, estimated: 0, unpriced: 0, costUsd: 0.5 },
          { pool: "judge", runId: "r2", resources: 2, attempts: 0, retries: 0, rateLimited: 0, tokensIn: 0, tokensOut: 0, estimated: 0, unpriced: 0, costUsd: 0 },
          { pool: "llm", runId: "r2", resources: 2, attempts: 2, retries: 0, rateLimited: 1, tokensIn: 1000, tokensOut: 100, estimated: 0, unpriced: 0, costUsd: 0.01 }
        ])
        // the same subtotals as report's (which lists the resources the store records)
        const report = yield* Report.buildReport([{ source: "store", store: yield* Store }], { runId: "all" })
        assert.deepStrictEqual(report.accounting.pools.map((p) => p.pool), ["judge", "llm"])
        for (const p of report.accounting.pools) {
          const row = (POOLS_ALL as ReadonlyArray<Record<string, unknown>>).find((x) => x["pool"] === p.pool)!
          assert.deepStrictEqual([p.tokensIn, p.tokensOut, p.unpriced, p.attempts], [row["tokensIn"], row["tokensOut"], row["unpriced"], row["attempts"]])
        }
      }).pipe(Effect.provide(layer)))
  }

  it.effect("resources and pools as CSV (header, an unknown cost as an empty cell) and JSONL", () =>
    Effect.gen(function*() {
      yield* fill(yield* Store)
      const csv = (yield* exported("pools", "csv")).trimEnd().split("\n")
      assert.strictEqual(csv[0], "pool,runId,resources,attempts,retries,rateLimited,tokensIn,tokensOut,estimated,unpriced,costUsd,extra")
      assert.deepStrictEqual(csv.slice(1), [
        "ghost,,1,1,0,0,7,3,0,0,0.5,",
        "judge,,2,1,0,0,50,5,1,1,,",
        "llm,,2,5,0,1,1500,150,0,0,0.015,"
      ])
      const resources = (yield* exported("resources", "csv", "r1")).trimEnd().split("\n")
      assert.strictEqual(resources[0], "pool,resourceId,kind,runId,attempts,retries,rateLimited,tokensIn,tokensOut,estimated,unpriced,costUsd,extra")
      assert.include(resources, "llm,a,chat,r1,2,0,0,300,30,0,0,0.003,")
      assert.include(resources, "judge,j,chat,r1,1,0,0,50,5,1,1,,")
      const lines = (yield* exported("resources", "jsonl")).trimEnd().split("\n").map((l) => JSON.parse(l))
      close(lines, RESOURCES_ALL)
    }).pipe(Effect.provide(MemoryStore.layer())))
})
