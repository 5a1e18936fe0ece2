/**
 * `adaptive`'s start against a fresh user's endpoint (issue 18: most 429s of a short run came
 * from slow start's overshoot), in simulated time (test/support/provider-sim.ts).
 *
 * The endpoint of `assay mock-llm --rps 10 --latency-ms 50`: 10 requests/s with a bucket of 10
 * (a second's burst), median latency 50 ms, at most 4 requests in flight (a 5th is refused with a
 * 429), signals `retry-after` (whole seconds) or `none`; resource capacity 8, 16 pipelines at
 * once, 300 one-call pipelines (the tester's `adapt.yaml`). Per seed and signals, one JSON line:
 * `rate_429` (429s / requests over the whole run), `rate_429_first_4s`, `rate_429_after_10s`,
 * `429_first_4s` (count), `utilisation_after_10s`, `reach_90_s` (simulated seconds until a 1 s
 * window first served ≥ 90 % of the limit), `sim_s`, `cpu_s`; then a summary line with the sums.
 *
 * Run: `npx tsx bench/adaptive-start.ts [--seeds 1,2,3] [--pipelines 300] [--slow-start "1 second"]`
 */
import { Effect } from "effect"
import * as os from "node:os"
import * as Sim from "../test/support/provider-sim.js"

const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1] : undefined
}
const SEEDS = (argOf("--seeds") ?? "1,2,3").split(",").map(Number)
const PIPELINES = Number(argOf("--pipelines") ?? 300)
const TOKENS = 31
/** `--slow-start 1s`-style override of the algorithm's `slowStart` (default: the algorithm's own). */
const SLOW_START = argOf("--slow-start")
const ALGORITHM = SLOW_START === undefined ? "adaptive" : { name: "adaptive", slowStart: SLOW_START }

const one = (seed: number, signals: "retry-after" | "none") =>
  Effect.gen(function*() {
    const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 600, burst: 10 }, signals, maxConcurrent: 4, latency: { medianMs: 50 } }], { seed })
    const cpu0 = process.cpuUsage()
    const run = yield* Sim.runChat(sim, { algorithm: ALGORITHM, pipelines: PIPELINES, concurrency: 16, capacity: 8 })
    const cpu = process.cpuUsage(cpu0)
    const whole = Sim.figures(sim, run.log, 0, run.simMs, TOKENS)
    const first = Sim.figures(sim, run.log, 0, 4_000, TOKENS)
    const after = Sim.figures(sim, run.log, 10_000, run.simMs, TOKENS)
    const used = Sim.figures(sim, run.log, 10_000, Math.max(10_001, run.simMs - 1_000), TOKENS)
    let reach: number | null = null
    for (let t = 0; t + 1000 <= run.simMs; t += 250) {
      if (Sim.figures(sim, run.log, t, t + 1000, TOKENS).utilisation >= 0.9) {
        reach = (t + 1000) / 1000
        break
      }
    }
    return {
      bench: "adaptive_start",
      seed,
      signals,
      pipelines: PIPELINES,
      failed: run.report.stats.byState.failed + run.report.stats.byState.interrupted,
      requests: whole.requests,
      "429": whole.rateLimited,
      "429_first_4s": first.rateLimited,
      "429_after_10s": after.rateLimited,
      rate_429: Number(whole.rate429.toFixed(4)),
      rate_429_first_4s: Number(first.rate429.toFixed(4)),
      rate_429_after_10s: Number(after.rate429.toFixed(4)),
      utilisation_after_10s: Number(used.utilisation.toFixed(3)),
      reach_90_s: reach,
      sim_s: Number((run.simMs / 1000).toFixed(1)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(2))
    }
  })

const main = Effect.gen(function*() {
  const sum = { requests: 0, "429": 0, "429_first_4s": 0, "429_after_10s": 0, requests_after_10s: 0 }
  for (const signals of ["retry-after", "none"] as const) {
    for (const seed of SEEDS) {
      const l = yield* one(seed, signals)
      console.log(JSON.stringify(l))
      sum.requests += l.requests
      sum["429"] += l["429"]
      sum["429_first_4s"] += l["429_first_4s"]
      sum["429_after_10s"] += l["429_after_10s"]
    }
  }
  console.log(JSON.stringify({ bench: "adaptive_start.sum", ...sum, rate_429: Number((sum["429"] / sum.requests).toFixed(4)), load: os.loadavg().map((x) => Number(x.toFixed(2))) }))
})

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
