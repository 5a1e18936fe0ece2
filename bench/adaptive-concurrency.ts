/**
 * `adaptive` against a hidden **concurrency** limit (issue 18, tester18f F3), in simulated time
 * (test/support/provider-sim.ts): the endpoint of `assay mock-llm` with `maxConcurrency: 3`
 * (a 4th request in progress is refused with a 429 and `Retry-After: 1`) and a latency of
 * ~300 ms (lognormal, median 300 ms, sigma 0.175: p95 ≈ 400 ms), so about 10 requests/s on
 * offer and no rate limit; resource capacity 8, 16 pipelines at once, 900 one-call pipelines.
 * Per seed, one JSON line: `util_10_30` / `util_30_end` (answers / the capacity on offer:
 * 3 in flight over the mean latency), `rate_429` (whole run) and `rate_429_after_10s`,
 * `in_flight_avg` (the server's mean requests in progress after 10 s), the adaptive state at
 * the end (`rate`, `concurrency`, `decreases`), `sim_s`, `cpu_s`.
 *
 * Run: `npx tsx bench/adaptive-concurrency.ts [--seeds 1,2,3] [--pipelines 900] [--retry-after 1|none]`
 */
import { Effect } from "effect"
import * as os from "node:os"
import * as Sim from "../test/support/provider-sim.js"

const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1] : undefined
}
const SEEDS = (argOf("--seeds") ?? "1,2,3").split(",").map(Number)
const PIPELINES = Number(argOf("--pipelines") ?? 900)
const RETRY_AFTER = argOf("--retry-after") === "none" ? undefined : Number(argOf("--retry-after") ?? 1)
const TOKENS = 31

const one = (seed: number) =>
  Effect.gen(function*() {
    const sim = Sim.makeProviders([{
      name: "conc",
      signals: "none",
      maxConcurrent: 3,
      concurrencyRetryAfterS: RETRY_AFTER,
      latency: { medianMs: 300, sigma: 0.175 }
    }], { seed })
    const cpu0 = process.cpuUsage()
    const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: PIPELINES, concurrency: 16, capacity: 8 })
    const cpu = process.cpuUsage(cpu0)
    const end = run.simMs - 1_000
    const whole = Sim.figures(sim, run.log, 0, run.simMs, TOKENS)
    const after = Sim.figures(sim, run.log, 10_000, run.simMs, TOKENS)
    const mid = Sim.figures(sim, run.log, 10_000, 30_000, TOKENS)
    const late = Sim.figures(sim, run.log, 30_000, end, TOKENS)
    const busyMs = run.log.filter((r) => r.status === 200 && r.atMs >= 10_000 && r.atMs < end).reduce((a, r) => a + r.latencyMs, 0)
    const state = ((run.samples.at(-1)?.resources[0]?.algorithm ?? {}) as Record<string, Record<string, unknown>>)["adaptive"] ?? {}
    return {
      bench: "adaptive-concurrency",
      seed,
      retry_after: RETRY_AFTER ?? null,
      failed: run.report.stats.byState.failed,
      requests: run.log.length,
      util_10_30: Number(mid.utilisation.toFixed(3)),
      util_30_end: Number(late.utilisation.toFixed(3)),
      rate_429: Number(whole.rate429.toFixed(4)),
      rate_429_after_10s: Number(after.rate429.toFixed(4)),
      in_flight_avg: Number((busyMs / (end - 10_000)).toFixed(2)),
      end_rate: state["rate"],
      end_concurrency: state["concurrency"],
      decreases: state["decreases"],
      sim_s: Number((run.simMs / 1000).toFixed(1)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(2)),
      load: os.loadavg().map((x) => Number(x.toFixed(2)))
    }
  })

const main = Effect.gen(function*() {
  for (const seed of SEEDS) console.log(JSON.stringify(yield* one(seed)))
})

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
