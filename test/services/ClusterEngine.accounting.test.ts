/**
 * Issue 18 (a fresh user's finding): the cluster engine recorded no tokens, no cost and never
 * used the call cache. A runner (`SingleRunner` with SQL message storage on the harness
 * PostgreSQL; the memory store stands in for the shared store) given the experiment's price
 * table and `run.cache`, with a fake model task that reports token usage on its lease:
 *
 * - every attempt row carries the model, its tokens and its cost priced by the table, and
 *   `report`'s accounting adds them up;
 * - a second submission of the same experiment into a new store, with the same call cache, is
 *   served from the cache: 0 calls, every attempt `cache_hit`, and the run's `run.finished`
 *   (written by the submitter) carries the hits and the cost they saved, as `report` shows.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Pricing from "../../src/domain/Pricing.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as CallCache from "../../src/services/CallCache.js"
import { buildReport } from "../../src/services/internal/report.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, createClusterDatabase, singleRunner } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const PRICE = { inputPer1M: 3, outputPer1M: 15 }

/** One runner on `db` over the store in context, with the experiment's pricing and `run.cache`. */
const runnerOf = (db: string, specs: ReadonlyArray<AnySpec>, cache: CallCache.CallCacheService) =>
  singleRunner(pg, db, {
    specs,
    workflow: { concurrency: 4, pricing: { "fake-model": PRICE }, cache: CallCache.resolveRunCache(true, "run.cache", []) },
    pools: [Pool.make("llm", [Resource.make("llm", { id: "r0", capacity: 4 })])],
    services: Layer.succeed(CallCache.CallCache, cache)
  })

/** A fresh database `db` with the engine's in-flight markers (what `assay migrate` creates beside the cluster's tables). */
const createDatabase = (db: string) => createClusterDatabase(pg, db)

describe("ClusterEngine: token and cost accounting, and the call cache", () => {
  it.live("attempts record model, tokens and cost; a second submission into a new store is served from the cache", () => {
    let calls = 0
    // a model call: takes a lease, reports the server's usage (100 + 10·n tokens in, 20 out)
    const ask = Task.make("ask", { resource: "llm", cache: { mode: undefined } }, (n: number, ctx) =>
      Effect.scoped(Effect.gen(function*() {
        const lease = yield* ctx.acquire()
        calls++
        yield* lease.report({ ok: true, model: "fake-model", usage: { promptTokens: 100 + 10 * n, completionTokens: 20 } })
        return { answer: `a${n}-${calls}` }
      })))
    const template = Pipeline.make("priced", ask)
    const specs = Array.from({ length: 4 }, (_, i) => template.bind(i))
    const expectedCost = specs.reduce((c, _, n) => c + Pricing.costOf(PRICE, 100 + 10 * n, 20), 0)
    const cache = CallCache.makeMemory()
    // each submission on its own cluster database (a workflow that completed in one answers from
    // its stored reply there) and its own store; the cache is the same
    const submitOnce = (db: string) => Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { maxAdmitted: 4, pollInterval: "50 millis", resultEvery: 1 })
      assert.strictEqual(report.succeeded, 4)
      const store = yield* Store
      const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
      const data = yield* buildReport([{ source: "mem", store }])
      return { attempts, data }
    }).pipe(
      Effect.provide(runnerOf(db, specs, cache).pipe(Layer.provideMerge(MemoryStore.layer())))
    )
    return Effect.gen(function*() {
      yield* createDatabase("accounting1")
      yield* createDatabase("accounting2")
      const first = yield* submitOnce("accounting1")
      assert.strictEqual(calls, 4)
      assert.strictEqual(first.attempts.length, 4)
      for (const a of first.attempts) {
        assert.strictEqual(a.outcome, "succeeded")
        assert.strictEqual(a.model, "fake-model")
        assert.strictEqual(a.tokensOut, 20)
        assert.strictEqual(a.costUsd, Pricing.costOf(PRICE, a.tokensIn!, 20))
      }
      assert.deepStrictEqual(first.attempts.map((a) => a.tokensIn).sort(), [100, 110, 120, 130])
      assert.strictEqual(first.data.accounting.total.calls, 4)
      assert.closeTo(first.data.accounting.total.costUsd!, expectedCost, 1e-12)
      assert.deepStrictEqual([first.data.cache.hits, first.data.cache.misses], [0, 4])

      // the same experiment submitted again into a new store, over the same cache: no call
      const second = yield* submitOnce("accounting2")
      assert.strictEqual(calls, 4, "every answer served from the cache")
      assert.deepStrictEqual(second.attempts.map((a) => a.outcome), ["cache_hit", "cache_hit", "cache_hit", "cache_hit"])
      assert.deepStrictEqual([second.data.cache.hits, second.data.cache.misses], [4, 0])
      assert.strictEqual(second.data.cache.tokensSaved.completionTokens, 80)
      assert.closeTo(second.data.cache.costSavedUsd!, expectedCost, 1e-12)
      assert.strictEqual(second.data.accounting.total.calls, 0)
    })
  }, 90_000)
})
