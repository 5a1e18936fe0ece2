/**
 * Two embedded `assay run --store postgres://…` of one experiment started at the same moment
 * (a fresh user's report: 16 of 40 pipelines ran in both processes, their task rows twice,
 * the attempts counted twice). Admission on a shared store is a claim: of two runs admitting a
 * pipeline at once exactly one runs it, the other skips it as held by the winner. Ground truth:
 * the mock provider's request log (every call, with a fingerprint of its request).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as PgStore from "../../src/layers/PgStore.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, tempDir, write } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"

const pg = usePostgres()

const slowMock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 3,
    endpoints: [{ name: "m", latency: { medianMs: 40 }, answers: { random: true } }]
  })
  return yield* MockLlm.serve({ profile })
}).pipe(Effect.provide(NodeContext.layer))

describe("two assay run --store postgres://… of one experiment at once", () => {
  it.scopedLive("every pipeline runs once: one call per prompt, one task row per task, attempts counted once", () =>
    Effect.gen(function*() {
      const server = yield* slowMock
      const dir = yield* tempDir("pg-twice")
      const n = 40
      write(dir, "rows.jsonl", Array.from({ length: n }, (_, i) => JSON.stringify({ prompt: `question ${i}` })).join("\n"))
      const exp = write(dir, "exp.json", {
        run: { concurrency: 8 },
        pools: {
          llm: {
            resources: [{
              id: "m",
              capacity: 8,
              options: { baseUrl: server.endpoints[0]!.baseUrl, model: "mock-1", apiKeyEnv: "PG_TWICE_KEY" }
            }]
          }
        },
        pipeline: { name: "ask", tasks: [{ use: "chat", options: { temperature: 1 } }] },
        source: { jsonl: { path: "rows.jsonl" } }
      })
      yield* Effect.promise(() => pg.createDatabase("twice"))
      const url = pg.url("twice")
      yield* PgStore.migrate(url)
      const run = assay(["run", "-c", exp, "--store", url], {
        cwd: dir,
        env: { PG_TWICE_KEY: "sk-twice" },
        killAfterMs: 120_000
      })
      const [a, b] = yield* Effect.all([run, run], { concurrency: 2 })
      assert.strictEqual(a.code, 0, a.stderr)
      assert.strictEqual(b.code, 0, b.stderr)
      // pg's warning about two queries at once on one client is never printed
      assert.notInclude(a.stderr + b.stderr, "DeprecationWarning")
      const count = (q: string) => Number(pg.psql("twice", q).trim())
      const calls = (yield* server.log).filter((e) => e.status === 200)
      // the provider saw each prompt once
      assert.strictEqual(calls.length, n)
      assert.strictEqual(new Set(calls.map((e) => e.fingerprint)).size, n)
      assert.strictEqual(count("SELECT count(*) FROM assay_pipelines WHERE state = 'succeeded'"), n)
      // one task row, one succeeded attempt, one output per task
      assert.strictEqual(count("SELECT count(*) FROM assay_tasks"), n)
      assert.strictEqual(count("SELECT count(*) FROM assay_attempts"), n)
      assert.strictEqual(count("SELECT count(*) FROM assay_artifacts WHERE seq = 0"), n)
      assert.strictEqual(count("SELECT sum(attempts_total) FROM assay_pipelines"), n)
      // between them the two runs ran every pipeline once: what one ran, the other skipped
      const skipped = (out: string) => Number(/skipped (\d+)/.exec(out)?.[1] ?? Number.NaN)
      assert.strictEqual(skipped(a.stdout) + skipped(b.stdout), n, `${a.stdout}\n${b.stdout}`)
    }), { timeout: 240_000 })
})
