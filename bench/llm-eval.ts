/**
 * LLM evaluation benchmark: the spam evaluation of 2,000 SpamAssassin emails (stratified,
 * seed 0) through the pool `llm` against the mock server, once per acquire algorithm
 * (`wait`, `backoff`, `leastBusy`), in one run. Each algorithm gets a fresh mock server (fresh
 * token buckets) and a fresh in-memory store.
 *
 * Fixed profile: three endpoints whose binding limit is a per-key token bucket (`a` 40 req/s,
 * `b` 30 req/s, `c` 30 req/s, bursts equal to the rate; 429 with `Retry-After` = seconds until
 * the next token, at least 1), latency lognormal with median 20 ms / p95 60 ms, no background
 * errors, clean answers. Each resource allows 6 concurrent leases; the runner runs 24 attempts
 * at once; the `classify` task retries up to 10 attempts.
 *
 * The capacity on offer is the sum of the rates (100 requests/s). Printed JSON line per
 * algorithm:
 * - `makespan_s`: run duration; `throughput_per_s`: emails finished per second;
 * - `served`: requests answered 200 (from the mock's request log); `utilisation` = served /
 *   (capacity × makespan);
 * - `rate_429`: 429 answers / all requests; `requests`;
 * - `p95_ms`: 95th percentile of pipeline latency (start to end of each pipeline, from the
 *   store); `failed`: pipelines that did not succeed; `accuracy`.
 *
 * Run: `npx tsx bench/llm-eval.ts [--sample 2000]`
 */
import { NodeContext } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import * as MemoryStore from "../src/layers/MemoryStore.js"
import * as MockLlm from "../src/services/MockLlm.js"
import { runSpamEval } from "../examples/spam-eval/program.js"

const argSample = process.argv.indexOf("--sample")
const SAMPLE = argSample >= 0 ? Number(process.argv[argSample + 1]) : 2000
const RATES = { a: 40, b: 30, c: 30 } as const
const CAPACITY_RPS = RATES.a + RATES.b + RATES.c
const ALGORITHMS = ["wait", "backoff", "leastBusy"] as const

const one = (algorithm: string, resultsDir: string) =>
  Effect.scoped(Effect.gen(function*() {
    const profile = yield* MockLlm.decodeProfile({
      seed: 0,
      endpoints: Object.entries(RATES).map(([name, rps]) => ({
        name,
        rps,
        burst: rps,
        latency: { medianMs: 20, p95Ms: 60 }
      }))
    })
    const server = yield* MockLlm.serve({ profile })
    const report = yield* runSpamEval({
      sample: SAMPLE,
      seed: 0,
      concurrency: 24,
      algorithm,
      storeLayer: MemoryStore.layer(),
      resultsPath: NodePath.join(resultsDir, `${algorithm}.jsonl`),
      endpoints: server.endpoints.map((e) => ({
        id: e.name,
        baseUrl: e.baseUrl,
        model: e.model,
        apiKey: `bench-key-${e.name}`,
        capacity: 6
      })),
      chat: { retry: { maxAttempts: 10, base: "200 millis", cap: "5 seconds" } }
    })
    const log = yield* server.log
    const served = log.filter((e) => e.status === 200).length
    const rateLimited = log.filter((e) => e.status === 429).length
    const makespanS = report.run.durationMs / 1000
    const line = {
      bench: "llm-eval",
      algorithm,
      emails: report.results.length,
      makespan_s: Number(makespanS.toFixed(2)),
      throughput_per_s: Number((report.results.length / makespanS).toFixed(2)),
      capacity_rps: CAPACITY_RPS,
      served,
      requests: log.length,
      utilisation: Number((served / (CAPACITY_RPS * makespanS)).toFixed(3)),
      rate_429: Number((rateLimited / Math.max(1, log.length)).toFixed(3)),
      p95_ms: Math.round(report.run.stats.latencyMs?.p95 ?? 0),
      failed: report.results.filter((r) => r.state !== "succeeded").length,
      accuracy: Number(report.metrics.accuracy.toFixed(4))
    }
    yield* Console.log(JSON.stringify(line))
  }))

const main = Effect.gen(function*() {
  const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-llm-eval-"))
  for (const algorithm of ALGORITHMS) yield* one(algorithm, dir)
  fs.rmSync(dir, { recursive: true, force: true })
})

Effect.runPromise(main.pipe(Effect.provide(NodeContext.layer))).catch((e) => {
  console.error(e)
  process.exit(1)
})
