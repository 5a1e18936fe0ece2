/**
 * Issue 18 §2 on the dashboard: the per-resource token and cost figures, their pool subtotal
 * rows and the scope note, served by `assay serve`'s app on 127.0.0.1 over a SQLite store
 * written in the test, asserted on `/stats` (JSON) and on the rendered page (escaped HTML).
 *
 * The per-resource usage is an aggregate over the attempts' leases; the snapshot reads it
 * again only when the scope's attempt figures changed. Counted here through the store layer
 * (a store whose `resourceUsage` counts its calls, served as it is): an idle refresh reads
 * nothing, a write makes the next refresh read again, and two views refreshed in turn (the
 * whole store and the latest run, as two open tabs do) each keep their own reading.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Monitor from "../../src/services/Monitor.js"
import * as StatsServer from "../../src/services/internal/statsServer.js"
import type { StoreService } from "../../src/services/Store.js"
import { Store } from "../../src/services/Store.js"
import { rid } from "../support/ids.js"
import { callAttempt, recordCall, withTempSqliteStore } from "../support/usageFixture.js"

/** A pool name that needs escaping on the page. */
const POOL = `llm<"&">`

/** Run r1 (completed) then r2 (completed, the latest); each with model calls on POOL/a, POOL/b and judge/j. */
const fill = (store: StoreService) =>
  Effect.gen(function*() {
    let n = 0
    const runOf = (runId: string, startedAt: number, calls: ReadonlyArray<readonly [string, number, number, number | null]>) =>
      Effect.gen(function*() {
        yield* store.openRun({ runId: rid(runId), startedAt })
        for (const [target, tokensIn, tokensOut, costUsd] of calls) {
          n++
          yield* recordCall(store, { pipeline: `p${n - 1}`, runId, at: startedAt, leaseId: `${target}#${n}`, tokensIn, tokensOut, costUsd })
        }
        yield* store.finishRun(rid(runId), { status: "completed", endedAt: startedAt + 100 })
      })
    yield* runOf("r1", 1_000, [[`${POOL}/a`, 100, 10, 0.001], [`${POOL}/b`, 200, 20, 0.002], ["judge/j", 50, 5, null]])
    yield* runOf("r2", 2_000, [[`${POOL}/a`, 1000, 100, 0.01], [`${POOL}/a`, 1000, 100, 0.01], ["judge/j", 500, 50, null]])
    for (const [pool, id] of [[POOL, "a"], [POOL, "b"], ["judge", "j"]] as const) {
      yield* store.putResource({ pool, resourceId: id, kind: "chat", spec: {}, health: { state: "ready" }, updatedAt: 1 })
    }
    yield* store.flush
  })

/** The store as served, with its `resourceUsage` calls counted (the scopes asked, in order). */
const counted = (store: StoreService) => {
  const calls: Array<string> = []
  const wrapped: StoreService = {
    ...store,
    resourceUsage: (runId) => Effect.zipRight(Effect.sync(() => calls.push(runId ?? "all")), store.resourceUsage(runId))
  }
  return { store: wrapped, calls }
}

const get = (url: string) =>
  Effect.promise(async () => {
    const r = await fetch(url)
    return { status: r.status, body: await r.text() }
  })

const getJson = (url: string) => Effect.map(get(url), (a) => JSON.parse(a.body))

/** A test over a fresh store file, filled, served on 127.0.0.1 (port 0) for the test's duration. */
const served = <A, E>(body: (o: { readonly base: string; readonly calls: Array<string>; readonly store: StoreService }) => Effect.Effect<A, E>) =>
  withTempSqliteStore(
    "assay-serve-usage-",
    Effect.gen(function*() {
      const raw = yield* Store
      yield* fill(raw)
      const { calls, store } = counted(raw)
      const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0 })
      assert.strictEqual(info.host, "127.0.0.1")
      return yield* body({ base: info.url, calls, store })
    })
  )

const poolTotal = (s: any, pool: string) => (s.pool_totals as Array<any>).find((t) => t.pool === pool)
const resource = (s: any, pool: string, id: string) => (s.resources as Array<any>).find((r) => r.pool === pool && r.resource_id === id)

describe("dashboard: per-resource usage, pool subtotals, scope note", () => {
  it.scopedLive("an idle refresh reads no per-resource usage; a write makes the next refresh read it again", () =>
    served(({ base, calls, store }) =>
      Effect.gen(function*() {
        const first = yield* getJson(`${base}/stats?run_id=all`)
        assert.deepStrictEqual(calls, ["all"])
        assert.strictEqual(resource(first, POOL, "a").accounting.attempts, 3)
        // idle: the same figures, no aggregate query
        for (let i = 0; i < 3; i++) {
          const again = yield* getJson(`${base}/stats?run_id=all`)
          assert.deepStrictEqual(again.resources, first.resources)
          assert.deepStrictEqual(again.pool_totals, first.pool_totals)
        }
        assert.deepStrictEqual(calls, ["all"])
        // the page of the same view reads the same snapshot: still nothing
        assert.strictEqual((yield* get(`${base}/`)).status, 200)
        assert.deepStrictEqual(calls, ["all"])
        // a write (one more model call on POOL/b): the next refresh reads again and shows it
        yield* store.recordAttempt({
          ...callAttempt({ pipeline: "p0", runId: "r1", at: 1_010, leaseId: `${POOL}/b#99`, tokensIn: 7, tokensOut: 3, costUsd: 0.5 }),
          attemptNo: 2
        })
        yield* store.flush
        const after = yield* getJson(`${base}/stats?run_id=all`)
        assert.deepStrictEqual(calls, ["all", "all"])
        assert.strictEqual(resource(after, POOL, "b").accounting.attempts, 2)
        assert.strictEqual(resource(after, POOL, "b").accounting.tokens_in, 207)
        assert.strictEqual(poolTotal(after, POOL).attempts, 5)
        yield* getJson(`${base}/stats?run_id=all`)
        assert.deepStrictEqual(calls, ["all", "all"])
      })
    ))

  it.scopedLive("two views refreshed in turn (whole store, latest run) keep their own readings", () =>
    served(({ base, calls }) =>
      Effect.gen(function*() {
        for (let i = 0; i < 3; i++) {
          yield* getJson(`${base}/stats?run_id=all`)
          yield* getJson(`${base}/stats?run_id=latest`)
        }
        assert.deepStrictEqual(calls, ["all", "r2"])
      })
    ))

  it.scopedLive("/stats and the page: the latest run's figures say they are that run's only; the whole store's sum both runs", () =>
    served(({ base }) =>
      Effect.gen(function*() {
        const latest = yield* getJson(`${base}/stats?run_id=latest`)
        assert.strictEqual(latest.run_id, "r2")
        assert.strictEqual(latest.runs_total, 2)
        assert.deepStrictEqual([latest.accounting.calls, latest.accounting.tokens_in, latest.accounting.tokens_out], [3, 2500, 250])
        // r2 made no call on POOL/b: its row says so (null), its pool still counts it
        assert.isNull(resource(latest, POOL, "b").accounting)
        assert.deepStrictEqual(
          poolTotal(latest, POOL),
          { pool: POOL, resources: 2, attempts: 2, tokens_in: 2000, tokens_out: 200, cost_usd: 0.02, estimated: 0, unpriced: 0 }
        )
        // the judge's calls had no price: unpriced, cost unknown (null), not $0
        assert.deepStrictEqual(
          poolTotal(latest, "judge"),
          { pool: "judge", resources: 1, attempts: 1, tokens_in: 500, tokens_out: 50, cost_usd: null, estimated: 0, unpriced: 1 }
        )
        const page = (yield* get(`${base}/?run_id=latest`)).body
        assert.include(page, `<span id="cost-scope" class="muted">(this run only; whole experiment: view whole store, 2 runs)</span>`)

        const all = yield* getJson(`${base}/stats?run_id=all`)
        assert.strictEqual(all.run_id, "all")
        assert.deepStrictEqual([all.accounting.calls, all.accounting.tokens_in, all.accounting.tokens_out], [6, 2850, 285])
        assert.deepStrictEqual(
          poolTotal(all, POOL),
          { pool: POOL, resources: 2, attempts: 4, tokens_in: 2300, tokens_out: 230, cost_usd: 0.023, estimated: 0, unpriced: 0 }
        )
        assert.strictEqual(poolTotal(all, "judge").attempts, 2)
        const allPage = (yield* get(`${base}/?run_id=all`)).body
        assert.include(allPage, `<span id="cost-scope" class="muted"></span>`)
      })
    ))

  it.scopedLive("the page's pool subtotal rows: one per pool, escaped, with the resources, attempts, tokens and cost", () =>
    served(({ base }) =>
      Effect.gen(function*() {
        const page = (yield* get(`${base}/?run_id=all`)).body
        const rows = Array.from(page.matchAll(/<tr class="subtotal">(.*?)<\/tr>/g), (m) => m[1]!)
        assert.strictEqual(rows.length, 2)
        const escaped = "llm&lt;&quot;&amp;&quot;&gt;"
        const llm = rows.find((r) => r.includes(`pool ${escaped} subtotal`))!
        const judge = rows.find((r) => r.includes("pool judge subtotal"))!
        assert.include(llm, `<td>pool ${escaped} subtotal <span class="muted">(2 resources, 4 attempts)</span></td>`)
        assert.include(llm, `<td class="cost">2300 in / 230 out · $0.023</td>`)
        assert.include(judge, `<td>pool judge subtotal <span class="muted">(1 resources, 2 attempts)</span></td>`)
        assert.include(judge, `<td class="cost">550 in / 55 out · unpriced (2 attempts)</td>`)
        // the pool's name never reaches the page unescaped
        assert.notInclude(page, POOL)
        // and each resource row carries its own share
        assert.include(page, `<td class="cost">2100 in / 210 out · $0.021</td>`)
      })
    ))

  it.scopedLive("an older run's view keeps the resources it used after a later run overwrote their rows (/stats and /resources)", () =>
    served(({ base, store }) =>
      Effect.gen(function*() {
        // the store keeps one row per resource: the later run r2 wrote them all last
        for (const [pool, id] of [[POOL, "a"], [POOL, "b"], ["judge", "j"]] as const) {
          yield* store.putResource({
            pool, resourceId: id, kind: "chat", spec: {}, updatedAt: 3,
            health: { state: "ready", runId: "r2", active: 1, capacity: 4, throttledUntil: 9_999_999_999_999 }
          })
        }
        yield* store.flush
        const r1 = yield* getJson(`${base}/stats?run_id=r1`)
        assert.strictEqual(r1.run_id, "r1")
        const a = resource(r1, POOL, "a")
        const b = resource(r1, POOL, "b")
        const j = resource(r1, "judge", "j")
        assert.deepStrictEqual(a.accounting, { attempts: 1, tokens_in: 100, tokens_out: 10, cost_usd: 0.001, estimated: 0, unpriced: 0 })
        assert.deepStrictEqual(b.accounting, { attempts: 1, tokens_in: 200, tokens_out: 20, cost_usd: 0.002, estimated: 0, unpriced: 0 })
        assert.deepStrictEqual(j.accounting, { attempts: 1, tokens_in: 50, tokens_out: 5, cost_usd: null, estimated: 0, unpriced: 1 })
        // the health shown is not r1's: cleared, the row still naming the run that wrote it
        assert.deepStrictEqual([a.state, a.active, a.capacity, a.throttled_until, a.run_id], [null, null, null, null, "r2"])
        assert.strictEqual(poolTotal(r1, POOL).attempts, 2)
        // the latest run's view: its own health and its own figures
        const r2 = yield* getJson(`${base}/stats?run_id=r2`)
        assert.deepStrictEqual([resource(r2, POOL, "a").state, resource(r2, POOL, "a").accounting.attempts], ["ready", 2])
        assert.isNull(resource(r2, POOL, "b").accounting)
        // the whole store: both runs' attempts on each resource
        const all = yield* getJson(`${base}/stats?run_id=all`)
        assert.strictEqual(resource(all, POOL, "a").accounting.attempts, 3)
        assert.strictEqual(resource(all, "judge", "j").accounting.attempts, 2)
        // /resources for r1: the resources it leased, with no borrowed health
        const rows = (yield* getJson(`${base}/resources?run_id=r1`)).rows as Array<any>
        assert.deepStrictEqual(rows.map((r) => `${r.pool}/${r.resource_id}:${r.state}`).sort(), [`${POOL}/a:null`, `${POOL}/b:null`, "judge/j:null"].sort())
      })
    ))
})
