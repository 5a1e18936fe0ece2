/**
 * The `judge` under the call cache (tester18f F1): an unchanged rerun makes no judge call and
 * gets the same verdicts back, whole; repeats stay independent; a changed rubric (version or
 * criteria) asks again; `readOnly` and `refresh` behave as for `chat`; a format repair is
 * stored as the one verdict; the candidates' seeded order is part of the key; a hit counts as
 * a model call saved, with its tokens and cost; a served verdict reports its metric; the
 * `cache` option is accepted in code and in a config file's `use: judge` entry.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import type { CacheMode } from "../../src/domain/CallCache.js"
import type { AccountingFigures, CacheFigures } from "../../src/domain/TaskStore.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { builtins } from "../../src/tasks/Builtins.js"
import { fanout } from "../../src/tasks/Fanout.js"
import { chatClientFactory } from "../../src/tasks/Chat.js"
import { judge, type JudgeOptions, type JudgeOutput, type RubricInput } from "../../src/tasks/Judge.js"

const KEY = "sk-judge-cache-5e1f0a2b"

const rubric: RubricInput = {
  id: "answer-quality",
  version: 1,
  criteria: [
    { name: "correct", scale: { min: 0, max: 1 } },
    { name: "clear", scale: { min: 1, max: 5 }, weight: 2 }
  ]
}

interface Row {
  readonly id: string
  readonly a: string
  readonly b: string
  readonly gold: string
}

const rows: ReadonlyArray<Row> = [
  { id: "r1", a: "spam, clearly", b: "ham", gold: "spam" },
  { id: "r2", a: "ham", b: "it is spam", gold: "spam" },
  { id: "r3", a: "ham it is", b: "spam", gold: "ham" }
]

const tempDir = () => fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-judge-cache-"))

/** The mock with one endpoint whose judge answers as configured, for the scope. */
const mock = (judgeAnswers: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const profile = yield* MockLlm.decodeProfile({ seed: 5, endpoints: [{ name: "j", latency: { medianMs: 0 }, judge: judgeAnswers }] })
    return yield* MockLlm.serve({ profile, models: MockLlm.builtinModels })
  }).pipe(Effect.provide(NodeContext.layer))

interface Ran {
  /** Requests the mock answered during the run. */
  readonly calls: number
  /** The verdict of each pipeline (by pipeline id). */
  readonly verdicts: ReadonlyMap<string, JudgeOutput>
  readonly outcomes: ReadonlyArray<string>
  readonly leasesTotal: number
  readonly accounting: AccountingFigures
  readonly cache: CacheFigures
  /** The `judgeScore.<candidate>` metric values reported in the run, by pipeline id and name. */
  readonly metrics: ReadonlyMap<string, unknown>
}

/**
 * One run of `[judge, keep]` over `rows` (keyed by id, `repeats` each) in a fresh memory store,
 * the cache in `cacheFile` under `mode` (the run's setting; `undefined`: none given); the judge
 * priced 3 / 4 USD per 1M.
 */
const runJudged = (
  server: MockLlm.MockLlmServer,
  cacheFile: string,
  mode: CacheMode | undefined,
  options: {
    readonly repeats?: number
    readonly judge?: Partial<JudgeOptions>
    readonly rows?: ReadonlyArray<Row>
    readonly concurrency?: number
    /** The judge as a branch of a fanout (beside a plain `gold` branch) at the same place. */
    readonly inFanout?: boolean
  } = {}
) =>
  Effect.gen(function*() {
    const before = (yield* server.log).length
    const j = judge<Row>({
      rubric,
      candidates: { first: "a", second: "b" },
      context: { reference: "gold" },
      model: "mock-judge",
      metric: "judgeScore",
      retry: { maxAttempts: 1 },
      ...options.judge
    })
    const keep = Task.sync("keep", (v: JudgeOutput) => v)
    const template = options.inFanout === true
      ? Pipeline.make("judged", fanout(j, Task.sync("gold", (r: Row) => r.gold)), Task.sync("keep", (v: Record<string, unknown>) => v["judge"] as JudgeOutput))
      : Pipeline.make("judged", j, keep)
    const env = Layer.provideMerge(
      Runner.layer({
        handleSignals: false,
        concurrency: options.concurrency ?? 4,
        ...(mode === undefined ? {} : { cache: mode }),
        pricing: { "mock-judge": { inputPer1M: 3, outputPer1M: 4 } }
      }),
      Layer.mergeAll(
        MemoryStore.layer(),
        Pool.layer([Pool.make("llm", [Resource.make("llm", {
          id: "j",
          capacity: 4,
          options: { baseUrl: server.endpoints[0]!.baseUrl, apiKey: KEY, model: "mock-judge" },
          factory: chatClientFactory()
        })])]),
        SqliteCallCache.layer({ filename: cacheFile, shared: true })
      )
    )
    const ran = yield* Effect.gen(function*() {
      const report = yield* Runner.run(template.map(options.rows ?? rows, { keyOf: (r) => r.id, repeats: options.repeats ?? 1 }))
      const store = yield* Store
      const pools = yield* Pool.Pools
      const leasesTotal = (yield* pools.stats("llm")).leasesTotal
      const verdicts = new Map<string, JudgeOutput>()
      for (const p of yield* Stream.runCollect(store.streamPipelines({ runId: report.runId }))) {
        const art = yield* store.getArtifact(p.pipelineId, 0)
        if (art._tag === "Some" && art.value.payload !== undefined) {
          const out = JSON.parse(Buffer.from(art.value.payload).toString("utf8"))
          verdicts.set(p.pipelineId, options.inFanout === true ? out.judge : out)
        }
      }
      const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
      const stats = yield* store.stats(report.runId)
      const metrics = new Map<string, unknown>()
      for (const m of yield* store.metrics({ runId: report.runId })) {
        if (m.name.startsWith("judgeScore.") && m.pipelineId !== null) metrics.set(`${m.pipelineId} ${m.name}`, m.value)
      }
      assert.strictEqual(report.stats.byState.succeeded, verdicts.size)
      return {
        verdicts,
        outcomes: attempts.filter((a) => a.taskName === (options.inFanout === true ? "fanout" : "judge")).map((a) => a.outcome),
        leasesTotal,
        accounting: stats.accounting!,
        cache: stats.cache!,
        metrics
      }
    }).pipe(Effect.provide(env))
    const calls = (yield* server.log).slice(before).filter((e) => e.status === 200).length
    return { ...ran, calls } as Ran
  })

const cacheRows = (file: string): number => {
  const db = new Database(file, { readonly: true })
  try {
    return (db.prepare("SELECT count(*) AS n FROM call_cache").get() as { n: number }).n
  } finally {
    db.close()
  }
}

describe("judge: the call cache", () => {
  it.scopedLive("rerun unchanged: 0 judge calls, no lease, the same verdicts whole; repeats stay independent; hits are model calls saved", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const cacheFile = NodePath.join(tempDir(), "cache.db")

      const first = yield* runJudged(server, cacheFile, "readWrite", { repeats: 2 })
      // 3 rows × 2 repeats: each repeat is its own judgement (repeat 2 never served repeat 1's)
      assert.strictEqual(first.calls, 6)
      assert.strictEqual(first.verdicts.size, 6)
      assert.strictEqual(first.cache.misses, 6)
      assert.strictEqual(first.cache.hits, 0)
      assert.strictEqual(cacheRows(cacheFile), 6)
      assert.strictEqual(first.metrics.size, 12, "one per candidate and pipeline")

      const rerun = yield* runJudged(server, cacheFile, "readWrite", { repeats: 2 })
      assert.strictEqual(rerun.calls, 0, "an unchanged rerun asks the judge nothing")
      assert.strictEqual(rerun.leasesTotal, 0, "a hit takes no lease")
      assert.deepStrictEqual([...new Set(rerun.outcomes)], ["cache_hit"])
      // the full record comes back: rubric, model, order, scores, reasons, overall, evidence, repair
      assert.deepStrictEqual(rerun.verdicts, first.verdicts)
      for (const v of rerun.verdicts.values()) {
        assert.strictEqual(v.rubricId, "answer-quality")
        assert.strictEqual(v.rubricVersion, "1")
        assert.strictEqual(v.judgeModel, "mock-judge")
        assert.strictEqual(v.order.length, 2)
        assert.strictEqual(v.formatRepair, null)
      }
      // accounting: 6 hits, each a model call saved, with its tokens and its cost
      assert.strictEqual(rerun.accounting.calls, 0)
      assert.strictEqual(rerun.accounting.cacheHits, 6)
      assert.strictEqual(rerun.accounting.modelCallHits, 6)
      assert.strictEqual(rerun.cache.hits, 6)
      assert.strictEqual(rerun.cache.tokensSaved.promptTokens, first.accounting.tokensIn)
      assert.strictEqual(rerun.cache.tokensSaved.completionTokens, first.accounting.tokensOut)
      assert.isAbove(first.accounting.costUsd, 0)
      assert.closeTo(rerun.cache.costSavedUsd!, first.accounting.costUsd, 1e-9)
      // a served verdict reports its metric as the body would have
      assert.deepStrictEqual(rerun.metrics, first.metrics)

      // one more repeat: exactly the 3 new judgements are asked for
      const more = yield* runJudged(server, cacheFile, "readWrite", { repeats: 3 })
      assert.strictEqual(more.calls, 3)
      assert.strictEqual(more.cache.hits, 6)
      assert.strictEqual(more.cache.misses, 3)
    }))

  it.scopedLive("a judge inside a fanout is cached with the key of a judge task at its place: rerun unchanged → 0 judge calls (fix18e)", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const cacheFile = NodePath.join(tempDir(), "cache.db")

      const first = yield* runJudged(server, cacheFile, "readWrite", { repeats: 2, inFanout: true })
      assert.strictEqual(first.calls, 6)
      assert.strictEqual(first.verdicts.size, 6)
      assert.strictEqual(cacheRows(cacheFile), 6, "one entry per judgement")
      assert.strictEqual(first.cache.misses, 6)

      const rerun = yield* runJudged(server, cacheFile, "readWrite", { repeats: 2, inFanout: true })
      assert.strictEqual(rerun.calls, 0, "an unchanged rerun asks the judge in the fanout nothing")
      assert.strictEqual(rerun.leasesTotal, 0)
      assert.deepStrictEqual(rerun.verdicts, first.verdicts)
      // the group's attempt leased nothing: a cache hit, counted once
      assert.deepStrictEqual([...new Set(rerun.outcomes)], ["cache_hit"])
      assert.strictEqual(rerun.cache.hits, 6)
      // a served verdict reports its metric as the body would have
      assert.deepStrictEqual(rerun.metrics, first.metrics)

      // the same key as the judge as a task of its own at that place: served both ways
      const asTask = yield* runJudged(server, cacheFile, "readWrite", { repeats: 2 })
      assert.strictEqual(asTask.calls, 0)
      assert.deepStrictEqual(asTask.verdicts, first.verdicts)

      // off: the fanout's judge calls again
      const off = yield* runJudged(server, cacheFile, "off", { repeats: 1, inFanout: true })
      assert.strictEqual(off.calls, 3)
    }))

  it.scopedLive("a changed rubric asks again: a new version, or new criteria under the same version", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite")).calls, 3)
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite")).calls, 0)

      const v2 = yield* runJudged(server, cacheFile, "readWrite", { judge: { rubric: { ...rubric, version: 2 } } })
      assert.strictEqual(v2.calls, 3)
      for (const v of v2.verdicts.values()) assert.strictEqual(v.rubricVersion, "2")

      // the same id and version with another weight: the verdict's overall would differ
      const reweighted: RubricInput = {
        ...rubric,
        criteria: [rubric.criteria[0]!, { ...rubric.criteria[1]!, weight: 1 }]
      }
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite", { judge: { rubric: reweighted } })).calls, 3)
      // another judge model, another temperature: other requests
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite", { judge: { temperature: 0.5 } })).calls, 3)
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite", { judge: { model: "small" } })).calls, 3)
      // and the first setting is still served
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite")).calls, 0)
    }))

  it.scopedLive("readOnly serves and stores nothing new; refresh asks again and replaces", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      const first = yield* runJudged(server, cacheFile, "readWrite", { repeats: 2 })
      assert.strictEqual(first.calls, 6)

      const ro = yield* runJudged(server, cacheFile, "readOnly", { repeats: 3 })
      assert.strictEqual(ro.calls, 3, "repeats 0 and 1 served, repeat 2 asked")
      assert.strictEqual(ro.cache.hits, 6)
      assert.strictEqual(ro.cache.bypassed, 3)
      assert.strictEqual(cacheRows(cacheFile), 6, "readOnly stores nothing")

      const refreshed = yield* runJudged(server, cacheFile, "refresh", { repeats: 2 })
      assert.strictEqual(refreshed.calls, 6)
      assert.strictEqual(refreshed.cache.refreshed, 6)
      assert.strictEqual(refreshed.cache.hits, 0)
      assert.strictEqual(cacheRows(cacheFile), 6, "replaced, not added")

      const off = yield* runJudged(server, cacheFile, "off", { repeats: 2 })
      assert.strictEqual(off.calls, 6)
      assert.deepStrictEqual([...new Set(off.outcomes)], ["succeeded"])
    }))

  it.scopedLive("a judge declared cache: false is never cached; cache: true caches without the run's setting", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite", { judge: { cache: false } })).calls, 3)
      assert.strictEqual((yield* runJudged(server, cacheFile, "readWrite", { judge: { cache: false } })).calls, 3)
      assert.strictEqual(cacheRows(cacheFile), 0)
      // no run setting: the judge's own `cache: true` turns it on; the default (absent) follows the run
      assert.strictEqual((yield* runJudged(server, cacheFile, undefined, { judge: { cache: true } })).calls, 3)
      assert.strictEqual((yield* runJudged(server, cacheFile, undefined, { judge: { cache: true } })).calls, 0)
      assert.strictEqual((yield* runJudged(server, cacheFile, undefined)).calls, 3, "off by default")
    }))

  it.scopedLive("a format repair is stored as the one verdict: served whole, no call, both calls' tokens saved", () =>
    Effect.gen(function*() {
      // the endpoint's first judge answer is malformed: the first row's judgement needs a repair
      const server = yield* mock({ invalidFirst: 1 })
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      const one = [rows[0]!]
      const first = yield* runJudged(server, cacheFile, "readWrite", { rows: one })
      assert.strictEqual(first.calls, 2, "the answer and its repair")
      assert.strictEqual(first.accounting.calls, 2)
      const verdict = [...first.verdicts.values()][0]!
      assert.isNotNull(verdict.formatRepair)
      assert.strictEqual(cacheRows(cacheFile), 1, "one entry for the two calls")

      const rerun = yield* runJudged(server, cacheFile, "readWrite", { rows: one })
      assert.strictEqual(rerun.calls, 0)
      assert.deepStrictEqual([...rerun.verdicts.values()][0], verdict)
      assert.strictEqual(rerun.accounting.modelCallHits, 1)
      assert.strictEqual(rerun.cache.tokensSaved.promptTokens, first.accounting.tokensIn)
      assert.strictEqual(rerun.cache.tokensSaved.completionTokens, first.accounting.tokensOut)
      assert.closeTo(rerun.cache.costSavedUsd!, first.accounting.costUsd, 1e-9)
    }))

  it.scopedLive("the seeded order is part of the key: identical candidates shown in another order are judged again", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const cacheFile = NodePath.join(tempDir(), "cache.db")
      // twelve pipelines with the same text: their requests differ only by the order drawn
      const same = Array.from({ length: 12 }, (_, i) => ({ id: `s${i}`, a: "spam!", b: "not spam", gold: "spam" }))
      const first = yield* runJudged(server, cacheFile, "readWrite", { rows: same, concurrency: 1 })
      const orders = new Set([...first.verdicts.values()].map((v) => v.order.join(",")))
      assert.strictEqual(orders.size, 2, "both orders are drawn among 12 pipelines")
      // one call per order shown; every other pipeline is served the verdict of its own order
      assert.strictEqual(first.calls, 2)
      assert.strictEqual(first.cache.hits, 10)
      for (const v of first.verdicts.values()) {
        assert.deepStrictEqual(v.evidenceSummary.candidates.map((c) => c.name), v.order)
      }
    }))
})

describe("judge: the cache option in a config file", () => {
  it("use: judge accepts cache (true, a mode, { mode, ttl }) and refuses a bad one with its path", () => {
    const make = builtins.get("judge")!.make
    const base = { rubric, candidates: { answer: "content" } }
    for (const cache of [true, false, "readOnly", { mode: "refresh", ttl: "7 days" }]) {
      const t = make([], { ...base, cache }, { baseDir: "." } as never)
      assert.isNotNull(t.options.cache)
    }
    assert.throws(() => make([], { ...base, cache: "readwrite" }, { baseDir: "." } as never), /options\.cache/)
    assert.match(builtins.get("judge")!.signature, /cache\?/)
  })
})
