/**
 * Issue 18's leftover: a model call that used 0 tokens and has no price costs 0 USD at any
 * price. It is counted as priced at 0 (stored `costUsd: 0`), never as "unpriced", in the report
 * (run and resource totals) and in the stores' accounting aggregate (/stats and export read
 * it); a call with tokens and no price stays unpriced.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import { buildReport } from "../../src/services/internal/report.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"

/** A "model call" of `tokens` prompt tokens (0 completion) to a model with no price anywhere. */
const call = Task.make("call", { resource: "llm", retry: { maxAttempts: 1 } }, (tokens: number, ctx) =>
  Effect.scoped(Effect.gen(function*() {
    const lease = yield* ctx.acquire()
    yield* lease.report({ ok: true, model: "unpriced-model", usage: { promptTokens: tokens, completionTokens: 0, totalTokens: tokens } })
    return tokens
  })))

const runWith = (inputs: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const report = yield* Runner.run(Pipeline.make("p", call).map(inputs))
    const store = yield* Store
    const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
    const data = yield* buildReport([{ source: "mem", store }])
    const stats = yield* store.stats(report.runId)
    return { attempts, data, stats }
  }).pipe(Effect.provide(Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 2 }),
    Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 2 })])]))
  )))

describe("a call of 0 tokens without a price", () => {
  it.live("costs 0 USD, known: stored as 0, not unpriced in the report nor in the store's accounting", () =>
    Effect.gen(function*() {
      const { attempts, data, stats } = yield* runWith([0])
      assert.deepStrictEqual(attempts.map((a) => a.costUsd), [0])
      const total = data.accounting!.total
      assert.strictEqual(total.unpriced, 0)
      assert.strictEqual(total.costUsd, 0)
      assert.strictEqual(stats.accounting?.unpriced, 0)
      assert.strictEqual(stats.accounting?.costUsd, 0)
    }))

  it.live("beside a call with tokens and no price: only that one is unpriced", () =>
    Effect.gen(function*() {
      const { attempts, data } = yield* runWith([0, 7])
      assert.deepStrictEqual(attempts.map((a) => a.costUsd ?? null).sort(), [0, null])
      assert.strictEqual(data.accounting!.total.unpriced, 1)
    }))
})
