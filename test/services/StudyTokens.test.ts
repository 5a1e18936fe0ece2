/**
 * A study's `tokensIn` / `tokensOut` are the tokens billed, read from the attempts' token
 * columns (issue 16, on issue 18's accounting), through a study run against the mock LLM: a
 * failed attempt's call counts (it was billed), a cache hit at the tokens its entry recorded
 * when the call was made (said, with how many calls the cache served), and
 * tokens the server did not report are estimated and said so in the comparison and the evidence.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import { RetryableError } from "../../src/domain/Errors.js"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import { memberDigest, memberDigestOf } from "../../src/domain/Suite.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import * as Study from "../../src/services/Study.js"
import * as StudyCatalog from "../../src/services/StudyCatalog.js"
import * as StudyCompare from "../../src/services/StudyCompare.js"
import * as Suite from "../../src/services/Suite.js"
import { chat, chatClientFactory } from "../../src/tasks/internal/chat.js"
import { fakeCatalog } from "./suiteFixture.js"

const KEY = "sk-study-tokens-5a4b3c2d1e0f"

const mock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 5,
    endpoints: [
      { name: "with", latency: { medianMs: 0 } },
      // answers without `usage`: the client estimates, and marks the attempt estimated
      { name: "without", latency: { medianMs: 0 }, usage: false }
    ]
  })
  return yield* MockLlm.serve({ profile, models: MockLlm.builtinModels })
}).pipe(Effect.provide(NodeContext.layer))

// rows 1 and 2 ask the same thing: the second is served by the call cache (same request, same
// repeat, same variant), so it makes no call
const rows = [
  { id: 1, prompt: "a cheap offer, buy now" },
  { id: 2, prompt: "a cheap offer, buy now" },
  { id: 3, prompt: "the minutes of Tuesday's meeting" }
]

/** A second model call per pipeline whose first attempt is billed (7 in, 3 out) and then fails. */
const billedThenFails = Task.make("second", { resource: "llm", retry: { maxAttempts: 2, base: "1 millis", jitter: "none" } }, (input: unknown, ctx) =>
  Effect.scoped(Effect.gen(function*() {
    const lease = yield* Effect.orDie(ctx.acquire())
    yield* lease.report({ ok: true, model: "mock-spam-1", usage: { tokens: 10, promptTokens: 7, completionTokens: 3 } })
    if (ctx.attempt === 1) return yield* new RetryableError({ message: "the answer did not parse" })
    return input as Json
  })))

const template = Pipeline.make("ask", chat({ retry: { maxAttempts: 1 }, cache: true, template: "{{prompt}}" }), billedThenFails)

const variants: ReadonlyArray<Study.StudyVariant> = [
  { id: "v01", assignment: { endpoint: "with" }, key: "with", digest: "d1", isBaseline: true },
  { id: "v02", assignment: { endpoint: "without" }, key: "without", digest: "d2", isBaseline: false }
]

const studyOf = (server: MockLlm.MockLlmServer): Study.StudyInput => {
  const trialsFor = (version: number): ReadonlyArray<Study.StudyTrial> =>
    variants.map((variant) => ({ trialId: `p${version}-${variant.id}-r1`, variant, repeat: 1 }))
  const poolOf = (endpoint: string) => {
    const ep = server.endpoints.find((e) => e.name === endpoint)!
    return Pool.make(endpoint, [
      Resource.make("llm", { id: endpoint, capacity: 1, options: { baseUrl: ep.baseUrl, apiKey: KEY, model: "mock-spam-1" }, factory: chatClientFactory() })
    ])
  }
  const parts = { experiment: "ask", variables: "endpoint", repeats: "1" }
  return {
    id: "tokens",
    question: "what does each endpoint bill?",
    type: "compare",
    objectives: [{ metric: "tokensIn", direction: "minimize" }],
    stop: [{ when: "allTrialsTerminal" }],
    protocolDigest: JSON.stringify(parts),
    protocolParts: parts,
    describe: (): Json => ({ parts }),
    trialsFor,
    suiteFor: (version) => ({
      _tag: "Suite",
      id: "tokens",
      experiments: trialsFor(version).map((t) =>
        Suite.member(t.trialId, () => template.map(rows), {
          definitionDigest: t.trialId,
          poolAliases: { llm: t.variant.assignment.endpoint as string }
        })
      ),
      outputRoot: "/study-root",
      layout: "combined",
      pools: [poolOf("with"), poolOf("without")]
    })
  }
}

describe("a study's tokensIn / tokensOut: the tokens billed, from the attempts (mock LLM)", () => {
  it.scopedLive("failed attempts count, cache hits count at the tokens their entry recorded, estimated tokens are said so", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const study = studyOf(server)
      const input: StudyCompare.CompareInput = { ...study, baseline: variants[0]!, variants }
      const cacheFile = NodePath.join(fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-study-tokens-")), "cache.db")
      const env = Layer.provideMerge(
        Layer.mergeAll(
          Runner.layer({ handleSignals: false, concurrency: 1, maxAdmitted: 1, cache: "readWrite" }),
          fakeCatalog("tokens"),
          StudyCatalog.layerMemory
        ),
        Layer.mergeAll(
          MemoryStore.layer(),
          Pool.layer(study.suiteFor(1).pools!),
          SqliteCallCache.layer({ filename: cacheFile, shared: true })
        )
      )
      yield* Effect.gen(function*() {
        const report = yield* Study.run(study)
        assert.deepStrictEqual(report.trials.map((t) => t.status), ["succeeded", "succeeded"])
        const store = yield* Store
        const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({})))
        const c = yield* StudyCompare.compare(input)
        for (const [i, v] of variants.entries()) {
          const mine = attempts.filter((a) => memberDigestOf(a.pipelineId) === memberDigest("tokens", `p1-${v.id}-r1`))
          const chats = mine.filter((a) => a.taskName === "chat")
          const seconds = mine.filter((a) => a.taskName === "second")
          // per pipeline: one chat (the repeated row a cache hit), the second task's failed then succeeded attempt
          assert.deepStrictEqual(chats.map((a) => a.outcome).sort(), ["cache_hit", "succeeded", "succeeded"], v.id)
          assert.deepStrictEqual(seconds.map((a) => a.outcome).sort(), ["failed", "failed", "failed", "succeeded", "succeeded", "succeeded"], v.id)
          const served = chats.filter((a) => a.outcome === "succeeded")
          // the cache hit counts at the tokens its entry recorded when the call was made
          // (tester18c F3: a hit is free, and averaged with paid trials it read as a cheaper variant)
          const hit = chats.find((a) => a.outcome === "cache_hit")!
          const recorded = (hit.decision as { readonly cache?: { readonly usage?: { readonly promptTokens: number; readonly completionTokens: number } } }).cache?.usage
          assert.isDefined(recorded, JSON.stringify(hit.decision))
          assert.isAbove(recorded!.promptTokens, 0)
          const billedIn = served.reduce((n, a) => n + a.tokensIn!, 0) + 6 * 7 + recorded!.promptTokens
          const billedOut = served.reduce((n, a) => n + a.tokensOut!, 0) + 6 * 3 + recorded!.completionTokens
          const values = c.variants[i]!.values
          assert.deepStrictEqual(values.tokensIn!.perRepeat, [billedIn], `${v.id}: the failed attempts' 7 tokens each count, the cache hit's at its call's`)
          assert.deepStrictEqual(values.tokensOut!.perRepeat, [billedOut], v.id)
          // and it is said: how many of the variant's calls the cache served
          assert.strictEqual(values.tokensIn!.cacheHits, 1)
          assert.include(values.tokensIn!.aggregation, "calls served from the call cache, counted at what the call cost when it was made")
          assert.isAbove(served[0]!.tokensIn!, 0)
          const estimated = mine.filter((a) => a.tokensEstimated).length
          if (v.id === "v01") {
            assert.strictEqual(estimated, 0)
            assert.isUndefined(values.tokensIn!.estimatedAttempts)
            assert.notInclude(values.tokensIn!.aggregation, "estimated")
          } else {
            // the server gave no usage: the two chat calls were estimated (the second task reported its own)
            assert.strictEqual(estimated, 2)
            assert.strictEqual(values.tokensIn!.estimatedAttempts, 2)
            assert.include(values.tokensOut!.aggregation, "2 attempts with estimated tokens (the server gave no usage)")
            const e = yield* StudyCompare.evidence(input, "tokensIn", "v02")
            assert.strictEqual(e.trials[0]!.estimatedAttempts, 2)
            assert.include(StudyCompare.renderEvidence(e), "(2 attempts with estimated tokens)")
          }
        }
        assert.include(c.metrics.find((m) => m.name === "tokensIn")!.source, "failed ones included), cache hits included at their recorded usage")
        assert.isTrue(c.conclusion.limitations.some((l) => l.startsWith("call cache: calls served from it (v01 1 of ") && l.includes("v02 1 of ")), JSON.stringify(c.conclusion.limitations))
      }).pipe(Effect.provide(env))
    }))
})
