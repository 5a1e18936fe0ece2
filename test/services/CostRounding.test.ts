/**
 * Sums of costs leave the program rounded to 1e-9 USD, the precision of each call's cost: a
 * total of several calls reads `0.002035`, never `0.0020350000000000004` (binary floating-point
 * addition), in `report --json` (run and pool totals, the cost the call cache saved) and on
 * `/stats` (the totals, the pool rows, the cache's saving).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Pricing from "../../src/domain/Pricing.js"
import * as Monitor from "../../src/services/Monitor.js"
import { usageRows } from "../../src/services/internal/export.js"
import { buildReport } from "../../src/services/internal/report.js"
import * as StatsServer from "../../src/services/internal/statsServer.js"
import type { StoreService } from "../../src/services/Store.js"
import { Store } from "../../src/services/Store.js"
import * as StudyControl from "../../src/services/StudyControl.js"
import { rid } from "../support/ids.js"
import { callAttempt, recordCall, withTempSqliteStore } from "../support/usageFixture.js"

// each a cost rounded to 1e-9 USD, as `Pricing.costOf` gives; added in JavaScript,
// 0.000814 + 0.001221 is 0.0020350000000000004, 0.001628 + 0.000407 the same, and
// 0.002035 + 0.000407 is 0.0024419999999999997
const R1 = [["a", 0.000814], ["a", 0.001221]] as const
const R2 = [["b", 0.000407]] as const
const SAVED = { r1: 0.001628, r2: 0.000407 } as const

/** Two finished runs of model calls on llm/a and llm/b, each with the cost its call-cache hits saved. */
const fill = (store: StoreService) =>
  Effect.gen(function*() {
    let n = 0
    for (const [runId, costs, startedAt] of [["r1", R1, 1_000], ["r2", R2, 2_000]] as const) {
      yield* store.openRun({ runId: rid(runId), startedAt })
      for (const [resource, costUsd] of costs) {
        n++
        yield* recordCall(store, {
          pipeline: `p${n - 1}`, runId, at: startedAt, leaseId: `llm/${resource}#${n}`, tokensIn: 100, tokensOut: 10, costUsd
        })
      }
      // one call served from the cache (the figures are counted from the attempt rows)
      yield* store.recordAttempt({
        ...callAttempt({ pipeline: `p${n - 1}`, runId, at: startedAt + 50, leaseId: "", tokensIn: 0, tokensOut: 0, costUsd: 0 }),
        attemptNo: 2, outcome: "cache_hit", leaseIds: [], tokensIn: null, tokensOut: null, costUsd: null,
        decision: { cache: { status: "hit", usage: { promptTokens: 10, completionTokens: 1, totalTokens: 11, costUsd: SAVED[runId] } } }
      })
      yield* store.finishRun(rid(runId), { status: "completed", endedAt: startedAt + 100 })
    }
    for (const id of ["a", "b"]) {
      yield* store.putResource({ pool: "llm", resourceId: id, kind: "chat", spec: {}, health: { state: "ready" }, updatedAt: 1 })
    }
    yield* store.flush
  })

const withStore = <A, E, R>(body: (store: StoreService) => Effect.Effect<A, E, R>) =>
  withTempSqliteStore(
    "assay-cost-round-",
    Effect.gen(function*() {
      const store = yield* Store
      yield* fill(store)
      return yield* body(store)
    })
  )

describe("cost totals are rounded to 1e-9 USD where they leave the program", () => {
  it("the rounding itself: to the nearest billionth of a dollar", () => {
    assert.strictEqual(Pricing.roundUsd(0.000814 + 0.001221), 0.002035)
    assert.strictEqual(Pricing.roundUsd(0.0014579999999999997), 0.001458)
    assert.strictEqual(Pricing.roundUsd(1.23456789049), 1.23456789)
    assert.strictEqual(Pricing.roundUsd(0), 0)
  })

  it("a study trial's usage summed over its calls (and resumes) without float noise", () => {
    const call = (costUsd: number): StudyControl.TrialUsage => ({ calls: 1, tokens: 10, costUsd, timeMs: 5 })
    const usage = [0.000814, 0.001221, 0.000407].map(call).reduce(StudyControl.addUsage)
    assert.deepStrictEqual(usage, { calls: 3, tokens: 30, costUsd: 0.002442, timeMs: 15 })
  })

  it.scopedLive("report --json: run, pool and whole-store totals and the cache's saving print without float noise", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const r = yield* buildReport([{ source: "s", store }], { runId: "all" })
        const json = JSON.parse(JSON.stringify(r)) as typeof r
        assert.strictEqual(json.accounting.total.costUsd, 0.002442)
        assert.deepStrictEqual(json.accounting.runs.map((x) => x.costUsd), [0.002035, 0.000407])
        assert.deepStrictEqual(json.accounting.pools.map((x) => x.costUsd), [0.002442])
        assert.deepStrictEqual(json.resources.map((x) => [x.resourceId, x.costUsd]), [["a", 0.002035], ["b", 0.000407]])
        assert.strictEqual(json.cache.costSavedUsd, 0.002035)
      })
    ))

  it.scopedLive("export: the resources' and the pools' totals rows without float noise", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const resources = yield* usageRows(store, undefined, "resources")
        assert.deepStrictEqual(resources.map((r) => [r["resourceId"], r["costUsd"]]), [["a", 0.002035], ["b", 0.000407]])
        const pools = yield* usageRows(store, undefined, "pools")
        assert.deepStrictEqual(pools.map((r) => [r["pool"], r["costUsd"]]), [["llm", 0.002442]])
      })
    ))

  it.scopedLive("/stats: the totals, the pool row and the cache's saving without float noise", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0 })
        const s = yield* Effect.promise(async () => (await fetch(`${info.url}/stats?run_id=all`)).json() as Promise<any>)
        assert.strictEqual(s.accounting.cost_usd, 0.002442)
        assert.deepStrictEqual((s.resources as Array<any>).map((r) => [r.resource_id, r.accounting.cost_usd]), [["a", 0.002035], ["b", 0.000407]])
        assert.strictEqual((s.pool_totals as Array<any>).find((t) => t.pool === "llm").cost_usd, 0.002442)
        // snake_case like the rest of /stats (issue 18: the cache's keys were camelCase)
        assert.deepStrictEqual(s.cache, {
          hits: 2,
          misses: 0,
          refreshed: 0,
          bypassed: 0,
          write_failures: 0,
          lookup_failures: 0,
          tokens_saved: { prompt_tokens: 20, completion_tokens: 2, total_tokens: 22 },
          cost_saved_usd: 0.002035
        })
        const page = yield* Effect.promise(async () => (await fetch(`${info.url}/?run_id=all`)).text())
        assert.include(page, `id="cache">2 / 0 (22 tokens, $0.002 saved)`, "the page's first paint")
        assert.include(page, "s.cache.tokens_saved.total_tokens", "the page's refresh reads the new keys")
      })
    ))
})
