/**
 * `assay run`'s end-of-run summary says what the model calls cost (issue 18 re-trial: it printed
 * no tokens, cost or cache figures while `report` did): the calls, cache hits, tokens and cost,
 * worded as `report` words them (a cost with unpriced calls is never `$0`), through `bin/assay`
 * against the mock LLM.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, tempDir, write } from "../support/cli.js"

const KEY = "sk-cli-summary-1a2b3c4d5e6f"

const mock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({ seed: 5, endpoints: [{ name: "m", latency: { medianMs: 0 } }] })
  return yield* MockLlm.serve({ profile })
}).pipe(Effect.provide(NodeContext.layer))

const experiment = (dir: string, baseUrl: string, extra: Record<string, unknown> = {}) => {
  write(dir, "rows.jsonl", ["win money now", "lunch on friday?", "meeting notes"].map((p) => JSON.stringify({ prompt: p })).join("\n"))
  return write(dir, "exp.json", {
    pools: { llm: { resources: [{ id: "m", capacity: 2, options: { baseUrl, model: "mock-spam-1", apiKeyEnv: "SUMMARY_TEST_KEY" } }] } },
    pipeline: { name: "ask", tasks: [{ use: "chat", options: { temperature: 0 } }] },
    source: { jsonl: { path: "rows.jsonl" } },
    ...extra
  })
}

describe("assay run's summary: model calls, tokens and cost", () => {
  it.scopedLive("priced: the same tokens and cost as report; a rerun served by the call cache says so", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("run-summary")
      const env = { SUMMARY_TEST_KEY: KEY }
      const exp = experiment(dir, server.endpoints[0]!.baseUrl, { pricing: { "mock-spam-1": { inputPer1M: 2, outputPer1M: 8 } } })
      const ran = yield* assay(["run", "-c", exp, "--store", "run.db", "--quiet", "--cache"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)
      const json = yield* assay(["report", "run.db", "--json"], { cwd: dir })
      const t = (JSON.parse(json.stdout) as { accounting: { total: { tokensIn: number; tokensOut: number; costUsd: number } } }).accounting.total
      const line = ran.stdout.split("\n").find((l) => l.startsWith("model calls: "))
      assert.isDefined(line, ran.stdout)
      assert.match(line!, new RegExp(`^model calls: 3; tokens in ${t.tokensIn}, out ${t.tokensOut}; cost \\$0\\.\\d+$`))
      // the cost as report prints it (two significant digits, no trailing zero past the cents)
      const report = (yield* assay(["report", "run.db"], { cwd: dir })).stdout
      const cost = /cost (\$[\d.]+)/.exec(line!)![1]!
      assert.include(report, `; cost ${cost}`)
      assert.notMatch(cost, /\.\d*[1-9]0+$/)
      // the cache was on and every call missed: said, with the answers it stored (tester18d F6)
      assert.include(ran.stdout, "\ncall cache: 0 hits, 3 misses (3 answers stored)\n")

      const again = yield* assay(["run", "-c", exp, "--store", "rerun.db", "--quiet", "--cache-db", "run.db"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(again.code, 0, again.stderr)
      assert.include(again.stdout, "model calls: 0, cache hits 3 (any cached task; 3 model calls saved); tokens in 0, out 0; cost $0")
      assert.match(again.stdout, /\ncall cache: 3 hits, 0 misses \(\$0\.\d+ not spent\)\n/)
    }))

  it.scopedLive("no price anywhere: the cost is 'unpriced (3 attempts)', never $0", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("run-summary-unpriced")
      const exp = experiment(dir, server.endpoints[0]!.baseUrl)
      const ran = yield* assay(["run", "-c", exp, "--store", "run.db", "--quiet"], { cwd: dir, env: { SUMMARY_TEST_KEY: KEY }, killAfterMs: 60_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)
      assert.match(ran.stdout, /^model calls: 3; tokens in [1-9]\d*, out [1-9]\d*; cost unpriced \(3 attempts\)$/m)
      assert.notInclude(ran.stdout, "$0")
      // no --cache: no cache line
      assert.notInclude(ran.stdout, "call cache")
    }))
})

describe("assay run --summary json: the call cache's figures (tester18f F4) of a chat + judge experiment (tester18f F1)", () => {
  it.scopedLive("the JSON summary has report --json's cache object; an unchanged rerun makes 0 chat and 0 judge calls", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("run-summary-json")
      const env = { SUMMARY_TEST_KEY: KEY }
      const exp = experiment(dir, server.endpoints[0]!.baseUrl, {
        pricing: { "mock-spam-1": { inputPer1M: 2, outputPer1M: 8 } },
        pipeline: {
          name: "judged",
          tasks: [
            { use: "chat", options: { temperature: 0, template: "Spam or ham? {{prompt}}" } },
            {
              use: "judge",
              options: {
                rubric: { id: "label", version: 1, criteria: [{ name: "correct", scale: { min: 0, max: 1 } }] },
                candidates: { answer: "content" },
                context: { question: "input.prompt" },
                metric: "judgeScore"
              }
            }
          ]
        }
      })
      interface Summary {
        readonly stats: { readonly accounting: { readonly calls: number; readonly cacheHits: number; readonly modelCallHits: number } }
        readonly cache: Record<string, unknown> & {
          readonly hits: number
          readonly misses: number
          readonly stored: number
          readonly modelCallHits: number
          readonly costSavedUsd: number | null
          readonly tokensSaved: { readonly totalTokens: number }
        }
      }
      const run = (store: string) =>
        Effect.gen(function*() {
          const before = (yield* server.log).length
          const ran = yield* assay(["run", "-c", exp, "--store", store, "--quiet", "--cache-db", "cache.db", "--summary", "json"], {
            cwd: dir,
            env,
            killAfterMs: 60_000
          })
          assert.strictEqual(ran.code, 0, ran.stderr)
          const calls = (yield* server.log).slice(before).filter((e) => e.status === 200).length
          return { summary: JSON.parse(ran.stdout) as Summary, calls }
        })

      const first = yield* run("a.db")
      assert.strictEqual(first.calls, 6, "3 chat calls and 3 judge calls")
      assert.strictEqual(first.summary.cache.hits, 0)
      assert.strictEqual(first.summary.cache.misses, 6)
      assert.strictEqual(first.summary.cache.stored, 6)

      const rerun = yield* run("b.db")
      assert.strictEqual(rerun.calls, 0, "the judge is served from the cache like the chat")
      const c = rerun.summary.cache
      assert.strictEqual(c.hits, 6)
      assert.strictEqual(c.misses, 0)
      assert.strictEqual(c.modelCallHits, 6)
      assert.isAbove(c.tokensSaved.totalTokens, 0)
      assert.isAbove(c.costSavedUsd!, 0)
      assert.strictEqual(rerun.summary.stats.accounting.calls, 0)
      // the same object as report --json's
      const report = yield* assay(["report", "b.db", "--json"], { cwd: dir })
      assert.deepStrictEqual(c, (JSON.parse(report.stdout) as { cache: unknown }).cache)
    }))
})
