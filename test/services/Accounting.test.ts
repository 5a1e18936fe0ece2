/**
 * Token and cost accounting (issue 18 §2) through the runner, against the mock LLM server:
 * exact tokens and the configured price when the server reports usage; estimated (and marked)
 * tokens when it does not; a resource's own pricing over the experiment's; the server's
 * reported cost only where no price is configured; the cost saved by cache hits; the totals of
 * `report` per resource, pool and run.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Pricing from "../../src/domain/Pricing.js"
import type { AttemptRecord } from "../../src/domain/Records.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as RunConfig from "../../src/domain/RunConfig.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import { formatUsd } from "../../src/services/internal/money.js"
import { buildReport, renderText } from "../../src/services/internal/report.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { chat, chatClientFactory } from "../../src/tasks/internal/chat.js"
import type { ChatOutput } from "../../src/tasks/internal/chat.js"

const KEY = "sk-acct-1f2e3d4c5b6a7988"

const mock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 3,
    endpoints: [
      { name: "with", latency: { medianMs: 0 } },
      // answers without `usage`: the client estimates
      { name: "without", latency: { medianMs: 0 }, usage: false }
    ]
  })
  return yield* MockLlm.serve({ profile, models: MockLlm.builtinModels })
}).pipe(Effect.provide(NodeContext.layer))

const rows = ["a cheap offer, buy now", "the minutes of Tuesday's meeting", "hello"].map((prompt) => ({ prompt }))

const PRICE: Pricing.ModelPrice = { inputPer1M: 2, outputPer1M: 8 }

interface Ran {
  readonly attempts: ReadonlyArray<AttemptRecord>
  readonly outputs: ReadonlyArray<ChatOutput<unknown>>
}

/** Runs `chat` (model `model`) over the rows on endpoint `endpoint` of the mock, in a memory store. */
const runOn = (
  server: MockLlm.MockLlmServer,
  endpoint: string,
  options: {
    readonly model?: string
    readonly pricing?: Pricing.PriceTable
    readonly resourcePricing?: unknown
    readonly cacheFile?: string
    /** A pure task declared `cache: true` before the chat (a cached task that calls no model). */
    readonly pure?: boolean
  } = {}
) =>
  Effect.gen(function*() {
    const ep = server.endpoints.find((e) => e.name === endpoint)!
    const resource = Resource.make("llm", {
      id: endpoint,
      capacity: 2,
      options: { baseUrl: ep.baseUrl, apiKey: KEY, model: "mock-spam-1" },
      factory: chatClientFactory(),
      ...(options.resourcePricing !== undefined ? { pricing: options.resourcePricing } : {})
    })
    const ask = chat({ retry: { maxAttempts: 1 }, ...(options.model !== undefined ? { model: options.model } : {}) })
    const prepare = Task.make("prepare", { cache: true }, (row: { readonly prompt: string }) => Effect.succeed({ prompt: row.prompt }))
    const runAll = options.pure === true ? Runner.run(Pipeline.make("ask", prepare, ask).map(rows)) : Runner.run(Pipeline.make("ask", ask).map(rows))
    const env = Layer.provideMerge(
      Runner.layer({
        handleSignals: false,
        concurrency: 2,
        ...(options.pricing !== undefined ? { pricing: options.pricing } : {}),
        ...(options.cacheFile !== undefined ? { cache: "readWrite" as const } : {})
      }),
      Layer.mergeAll(
        MemoryStore.layer(),
        Pool.layer([Pool.make("llm", [resource])]),
        options.cacheFile !== undefined ? SqliteCallCache.layer({ filename: options.cacheFile, shared: true }) : Layer.empty
      )
    )
    return yield* Effect.gen(function*() {
      const report = yield* runAll
      assert.strictEqual(report.stats.byState.succeeded, rows.length)
      const store = yield* Store
      const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
      const outputs: Array<ChatOutput<unknown>> = []
      for (const a of attempts) {
        const art = yield* store.getArtifact(a.pipelineId, 0)
        if (art._tag === "Some" && art.value.payload !== undefined) {
          outputs.push(JSON.parse(Buffer.from(art.value.payload).toString("utf8")) as ChatOutput<unknown>)
        }
      }
      const data = yield* buildReport([{ source: "mem", store }])
      return { attempts, outputs, report: data }
    }).pipe(Effect.provide(env))
  })

const byPrompt = (r: Ran) =>
  new Map(r.outputs.map((o, i) => [(o.input as { prompt: string }).prompt, { output: o, attempt: r.attempts[i]! }]))

describe("token and cost accounting through the runner (mock LLM)", () => {
  it.scopedLive("usage given: the server's exact tokens, priced by the experiment's table; totals in the report", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const ran = yield* runOn(server, "with", { pricing: { "mock-spam-1": PRICE } })
      assert.strictEqual(ran.attempts.length, rows.length)
      for (const { attempt, output } of byPrompt(ran).values()) {
        assert.strictEqual(attempt.model, "mock-spam-1")
        assert.strictEqual(attempt.tokensIn, output.usage.promptTokens)
        assert.strictEqual(attempt.tokensOut, output.usage.completionTokens)
        assert.isAbove(attempt.tokensIn!, 0)
        assert.isFalse(attempt.tokensEstimated)
        assert.strictEqual(attempt.costUsd, Pricing.costOf(PRICE, attempt.tokensIn!, attempt.tokensOut!))
      }
      // the report: the resource, its pool and the run add up to the attempts
      const tin = ran.attempts.reduce((n, a) => n + a.tokensIn!, 0)
      const tout = ran.attempts.reduce((n, a) => n + a.tokensOut!, 0)
      const cost = ran.attempts.reduce((n, a) => n + a.costUsd!, 0)
      const res = ran.report.resources.find((r) => r.resourceId === "with")!
      assert.deepStrictEqual([res.tokensIn, res.tokensOut, res.estimated, res.unpriced], [tin, tout, 0, 0])
      assert.closeTo(res.costUsd!, cost, 1e-12)
      assert.deepStrictEqual(ran.report.accounting.pools.map((p) => [p.pool, p.tokensIn]), [["llm", tin]])
      assert.closeTo(ran.report.accounting.total.costUsd!, cost, 1e-12)
      assert.strictEqual(ran.report.accounting.runs[0]!.tokensOut, tout)
      assert.strictEqual(ran.report.accounting.total.calls, ran.attempts.length)
      assert.isFalse(ran.report.accounting.multiLeased, "one resource per attempt: the resources add up to the total")
      // the top pipelines by cost: each pipeline's own attempt, dearest first
      const top = ran.report.accounting.pipelines
      assert.strictEqual(top.by, "cost")
      assert.strictEqual(top.rows.length, Math.min(10, ran.attempts.length))
      const dearest = [...ran.attempts].sort((a, b) => b.costUsd! - a.costUsd! || (a.pipelineId < b.pipelineId ? -1 : 1))[0]!
      assert.strictEqual(top.rows[0]!.pipelineId, dearest.pipelineId)
      assert.deepStrictEqual(
        [top.rows[0]!.calls, top.rows[0]!.tokensIn, top.rows[0]!.tokensOut, top.rows[0]!.costUsd],
        [1, dearest.tokensIn, dearest.tokensOut, dearest.costUsd]
      )
      for (let i = 1; i < top.rows.length; i++) assert.isAtMost(top.rows[i]!.costUsd!, top.rows[i - 1]!.costUsd!)
      const text = renderText(ran.report)
      assert.include(text, `Tokens and cost (each attempt once): calls ${ran.attempts.length}; tokens in ${tin}, out ${tout}; cost $`)
      assert.include(text, `Top ${top.rows.length} pipeline(s) by cost:\n  ${dearest.pipelineId}: calls 1; tokens in ${dearest.tokensIn}`)
      assert.include(text, `llm/with (llm)`)
      // pipelines that cost nothing (served from the call cache) are no one's top
      const withRows = (rows: typeof top.rows) =>
        renderText({ ...ran.report, accounting: { ...ran.report.accounting, pipelines: { ...top, rows } } })
      const free = top.rows.map((r) => ({ ...r, costUsd: 0, unpriced: 0 }))
      assert.include(withRows(free), "No pipeline's calls cost anything (every call was priced at $0)")
      assert.notInclude(withRows(free), "pipeline(s) by cost")
      assert.notInclude(withRows(free), "Top pipelines")
      // a run served entirely from the call cache: said so, with what it saved; no empty ranking
      const hitsOnly = renderText({
        ...ran.report,
        cache: { ...ran.report.cache, hits: free.length, misses: 0, costSavedUsd: 0.43 },
        accounting: { ...ran.report.accounting, pipelines: { ...top, rows: free.map((r) => ({ ...r, calls: 0, cacheHits: 1, tokensIn: 0, tokensOut: 0 })) } }
      })
      assert.include(hitsOnly, `No model call was made: the call cache served every cached task (${free.length} hits; $0.43 saved)`)
      assert.notInclude(hitsOnly, "Top pipelines")
      // the sentence gives the scope's hits (the run's attempt rows), not the sum over the ranked
      // rows the report lists (tester18d F1: "10 hits" for a run of 28)
      const scopeHits = free.length + 18
      const manyHits = renderText({
        ...ran.report,
        cache: { ...ran.report.cache, hits: scopeHits, misses: 0, costSavedUsd: 0.43 },
        accounting: {
          ...ran.report.accounting,
          total: { ...ran.report.accounting.total, calls: 0, cacheHits: scopeHits },
          pipelines: { ...top, rows: free.slice(0, 3).map((r) => ({ ...r, calls: 0, cacheHits: 1, tokensIn: 0, tokensOut: 0 })) }
        }
      })
      assert.include(manyHits, `No model call was made: the call cache served every cached task (${scopeHits} hits; $0.43 saved)`)
      const mixed = withRows([top.rows[0]!, ...free.slice(1)])
      assert.include(mixed, `Top 1 pipeline(s) by cost (${top.rows.length - 1} at $0 left out):\n  ${dearest.pipelineId}: calls 1`)
      // pipelines whose calls were all refused with a 429 cost nothing: left out of the ranking
      // like any $0 pipeline, and said so, never listed as work done at $0 (fix18v's note)
      const refused = free.map((r) => ({ ...r, calls: 1, refused: 1, failedCalls: 0, tokensIn: 0, tokensOut: 0 }))
      const n = refused.length - 1
      assert.include(withRows([top.rows[0]!, ...refused.slice(1)]), `Top 1 pipeline(s) by cost (${n} at $0 left out, all with no call answered (429 only)):\n  ${dearest.pipelineId}: calls 1;`)
      assert.include(withRows([top.rows[0]!, free[1]!, ...refused.slice(2)]), `Top 1 pipeline(s) by cost (${n} at $0 left out, ${n - 1} with no call answered (429 only)):`)
      // no call answered at all: no ranking, and not "priced at $0"
      const storm = renderText({
        ...ran.report,
        accounting: {
          ...ran.report.accounting,
          total: { ...ran.report.accounting.total, calls: refused.length, refused: refused.length, failedCalls: 0, tokensIn: 0, tokensOut: 0, costUsd: 0 },
          pipelines: { ...top, rows: refused }
        }
      })
      assert.include(storm, `No pipeline's calls cost anything: no call was answered (calls ${refused.length} (0 answered, ${refused.length} refused with 429))`)
      assert.notInclude(storm, "priced at $0")
      assert.notInclude(storm, "pipeline(s) by cost")
    }))

  it.scopedLive("usage absent: tokens estimated at 4 characters per token and marked estimated, then priced", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const ran = yield* runOn(server, "without", { pricing: { "mock-spam-1": PRICE } })
      for (const [prompt, { attempt, output }] of byPrompt(ran)) {
        assert.isTrue(attempt.tokensEstimated)
        assert.isTrue(output.usage.estimated)
        assert.strictEqual(attempt.tokensIn, Math.ceil(prompt.length / 4))
        assert.strictEqual(attempt.tokensOut, Math.ceil(output.content.length / 4))
        assert.strictEqual(attempt.costUsd, Pricing.costOf(PRICE, attempt.tokensIn!, attempt.tokensOut!))
      }
      const res = ran.report.resources.find((r) => r.resourceId === "without")!
      assert.strictEqual(res.estimated, rows.length)
      assert.include(renderText(ran.report), `(${rows.length} attempt(s) estimated)`)
    }))

  it.scopedLive("a resource's own pricing wins over the experiment's; without any price the cost is unknown (null), never 0", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const own: Pricing.ModelPrice = { inputPer1M: 100, outputPer1M: 300 }
      const ran = yield* runOn(server, "with", { pricing: { "mock-spam-1": PRICE }, resourcePricing: own })
      for (const a of ran.attempts) assert.strictEqual(a.costUsd, Pricing.costOf(own, a.tokensIn!, a.tokensOut!))
      // a table by model on the resource: its entry for the model wins too
      const table = yield* runOn(server, "with", { pricing: { "mock-spam-1": PRICE }, resourcePricing: { "mock-spam-1": own } })
      for (const a of table.attempts) assert.strictEqual(a.costUsd, Pricing.costOf(own, a.tokensIn!, a.tokensOut!))
      const none = yield* runOn(server, "with")
      for (const a of none.attempts) {
        assert.isAbove(a.tokensIn!, 0)
        assert.isNull(a.costUsd)
      }
      assert.strictEqual(none.report.accounting.total.unpriced, rows.length)
      // no total over unpriced calls reads as a number of dollars: not the run's, the pool's,
      // the resource's nor a pipeline's (JSON: null; text: "unpriced")
      const acc = none.report.accounting
      assert.deepStrictEqual(
        [acc.total.costUsd, acc.runs[0]!.costUsd, acc.pools[0]!.costUsd, acc.resourcesSum.costUsd, ...acc.pipelines.rows.map((p) => p.costUsd)],
        [null, null, null, null, ...rows.map(() => null)]
      )
      assert.isNull(none.report.resources.find((r) => r.resourceId === "with")!.costUsd)
      assert.isNull(JSON.parse(JSON.stringify(none.report)).accounting.total.costUsd)
      const text = renderText(none.report)
      assert.include(text, `cost unpriced (${rows.length} attempts)`)
      assert.notInclude(text, "$0")
    }))

  it.scopedLive("the server's usage.cost is used only where no price is configured; a configured price wins", () =>
    Effect.gen(function*() {
      const server = yield* mock
      // model profile "small" of the mock prices its tokens and reports usage.cost
      const small = MockLlm.builtinModels.models.find((m) => m.name === "small")!
      const served = yield* runOn(server, "with", { model: "small" })
      for (const a of served.attempts) {
        const expected = Math.round(
          ((a.tokensIn! * small.pricing.promptPer1k + a.tokensOut! * small.pricing.completionPer1k) / 1000) * 1e9
        ) / 1e9
        assert.isAbove(expected, 0)
        assert.strictEqual(a.costUsd, expected, "the server's figure")
      }
      const configured = yield* runOn(server, "with", { model: "small", pricing: { small: PRICE } })
      for (const a of configured.attempts) assert.strictEqual(a.costUsd, Pricing.costOf(PRICE, a.tokensIn!, a.tokensOut!))
    }))

  it.scopedLive("a cache hit reports the priced cost of the call it replaced as cost saved", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-acct-"))
      const cacheFile = NodePath.join(dir, "cache.db")
      const first = yield* runOn(server, "with", { pricing: { "mock-spam-1": PRICE }, cacheFile })
      const spent = first.attempts.reduce((n, a) => n + a.costUsd!, 0)
      assert.isNull(first.report.cache.costSavedUsd)
      const again = yield* runOn(server, "with", { pricing: { "mock-spam-1": PRICE }, cacheFile })
      assert.deepStrictEqual(again.attempts.map((a): ReadonlyArray<unknown> => [a.outcome, a.costUsd]), rows.map(() => ["cache_hit", null]))
      assert.strictEqual(again.report.cache.hits, rows.length)
      assert.closeTo(again.report.cache.costSavedUsd!, spent, 1e-12)
      assert.include(renderText(again.report), "Call cache: hits 3")
      // a run of cache hits only still has its tokens and cost line, saying what the cache saved
      const saved = again.report.cache.tokensSaved.totalTokens
      assert.isAbove(saved, 0)
      assert.include(
        renderText(again.report),
        `Tokens and cost (each attempt once): calls 0, cache hits 3 (any cached task; 3 model calls saved); tokens in 0, out 0; cost $0; saved by the call cache: ${saved} tokens, ${
          formatUsd(again.report.cache.costSavedUsd!)
        }`
      )
    }))

  it.scopedLive("the hits of a pure cached task are cache hits, not model calls saved: cacheHits counts both, modelCallHits the chat's", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-acct-"))
      const cacheFile = NodePath.join(dir, "cache.db")
      const first = yield* runOn(server, "with", { cacheFile, pure: true })
      assert.deepStrictEqual([first.report.accounting.total.cacheHits, first.report.accounting.total.modelCallHits], [0, 0])
      const again = yield* runOn(server, "with", { cacheFile, pure: true })
      const total = again.report.accounting.total
      // 3 rows: 3 hits of the pure task, 3 of chat (whose task leases from pool llm)
      assert.deepStrictEqual([total.calls, total.cacheHits, total.modelCallHits], [0, 6, 3])
      assert.deepStrictEqual(again.report.accounting.runs.map((r) => [r.cacheHits, r.modelCallHits]), [[6, 3]])
      assert.include(renderText(again.report), "calls 0, cache hits 6 (any cached task; 3 model calls saved); ")
      const json = JSON.parse(JSON.stringify(again.report)) as { accounting: { total: Record<string, unknown> } }
      assert.strictEqual(json.accounting.total["modelCallHits"], 3)
      // per pipeline: one hit of each task, one model call saved
      assert.deepStrictEqual(
        again.report.accounting.pipelines.rows.map((p) => [p.cacheHits, p.modelCallHits]),
        rows.map(() => [2, 1])
      )
      fs.rmSync(dir, { recursive: true, force: true })
    }))
})

describe("pricing configuration", () => {
  it("run config: a negative price, a price that is not a number, an unknown field are refused by field path", () => {
    const bad = RunConfig.resolve({
      pricing: {
        a: { inputPer1M: -1, outputPer1M: 2 },
        b: { inputPer1M: "3" as unknown as number, outputPer1M: 2 },
        c: { inputPer1M: 1, outputPer1M: 2, outputper1m: 3 } as unknown as Pricing.ModelPrice
      }
    })
    assert.strictEqual(bad._tag, "Left")
    if (bad._tag === "Left") {
      const paths = bad.left.issues.map((i) => i.path)
      assert.deepStrictEqual(paths, ["pricing.a.inputPer1M", "pricing.b.inputPer1M", "pricing.c.outputper1m"])
      assert.include(bad.left.issues[2]!.suggestion ?? "", "outputPer1M")
    }
    const good = RunConfig.resolve({ pricing: { m: { inputPer1M: 0, outputPer1M: 1.5 } } })
    assert.strictEqual(good._tag, "Right")
  })

  it("a resource's pricing: one price or a table by model, checked with its path", () => {
    assert.deepStrictEqual(Resource.validate(Resource.make("llm", { pricing: { inputPer1M: 1, outputPer1M: 2 } })), [])
    assert.deepStrictEqual(Resource.validate(Resource.make("llm", { pricing: { m: { inputPer1M: 1, outputPer1M: 2 } } })), [])
    const issues = Resource.validate(Resource.make("llm", { pricing: { inputPer1M: 1, outputPer1M: Number.NaN } }), "pools.llm.resources[0]")
    assert.deepStrictEqual(issues.map((i) => i.path), ["pools.llm.resources[0].pricing.outputPer1M"])
    // adding a price does not change a generated id
    assert.strictEqual(Resource.make("llm", { pricing: { inputPer1M: 1, outputPer1M: 2 } }).id, Resource.make("llm").id)
  })

  it("priceFor: the answering model first, then the one asked for; the resource's own pricing before the table", () => {
    const table: Pricing.PriceTable = { "gpt-x": { inputPer1M: 1, outputPer1M: 2 } }
    assert.deepStrictEqual(Pricing.priceFor(["gpt-x-2026-01-01", "gpt-x"], table), table["gpt-x"])
    assert.isUndefined(Pricing.priceFor(["other"], table))
    const resource = { meta: { pricing: { inputPer1M: 9, outputPer1M: 9 } } }
    assert.deepStrictEqual(Pricing.priceFor(["gpt-x"], table, resource), { inputPer1M: 9, outputPer1M: 9 })
    assert.strictEqual(Pricing.costOf({ inputPer1M: 2.5, outputPer1M: 10 }, 1000, 500), 0.0075)
    assert.strictEqual(Pricing.estimateTokens("12345"), 2)
    assert.strictEqual(Pricing.estimateTokens(""), 0)
  })
})
