/**
 * Acquisition algorithms against providers with hidden limits (issue 18 §3): `adaptive` vs
 * `leastBusy` vs `wait`, in one run, in simulated time (test/support/provider-sim.ts: the real
 * chat task, pool and runner over a simulated HTTP client and a virtual clock).
 *
 * Three endpoints, limits unknown to assay (each resource allows 32 concurrent leases; the
 * runner runs 96 pipelines at once; the chat task retries up to 20 attempts, 250 ms base, ×2,
 * 10 s cap, full jitter):
 * - `a`: 1,200 requests/min (a token bucket holding 1 s), latency median 400 ms, OpenAI-style
 *   `x-ratelimit-*` headers on every answer and `retry-after-ms` on a 429;
 * - `b`: 600 requests/min, latency median 250 ms, a 429 with `Retry-After` in whole seconds;
 * - `c`: 900 requests/min halving to 450 at 20 s, latency median 600 ms, a bare 429.
 *
 * Printed per algorithm (one JSON line): `pipelines`, `failed` (pipelines that did not succeed),
 * `requests`, `rate_429` (429 answers / requests), `utilisation` (answers / the capacity on
 * offer over the makespan, as `bench/llm-eval.ts` measures it: every pipeline has one chat
 * call, so this is finished pipelines per unit of capacity), `utilisation_busy` (the same
 * while the demand saturated the endpoints: from 0 to the arrival of the request whose answer
 * was the 90th percentile of answers; a client that takes every token the instant it appears,
 * however many 429s that costs, reaches about 1.0 here),
 * `per_endpoint` (utilisation and 429 share each), `sim_s` (simulated makespan), `wall_s` and
 * `cpu_s` (real time and process CPU time of the simulation), `cpu_ratio` / `wall_ratio`
 * against `wait`, and the load average.
 *
 * Run: `npx tsx bench/adaptive.ts [--pipelines 3000] [--seed 1] [--algorithms wait,leastBusy,adaptive]`
 * (the ratios are against the first algorithm named)
 */
import { Console, Effect } from "effect"
import * as os from "node:os"
import * as Sim from "../test/support/provider-sim.js"

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? Number(process.argv[i + 1]) : dflt
}
const PIPELINES = arg("--pipelines", 3000)
const SEED = arg("--seed", 1)
const ALGORITHMS = (() => {
  const i = process.argv.indexOf("--algorithms")
  return i >= 0 ? process.argv[i + 1]!.split(",") : ["wait", "leastBusy", "adaptive"]
})()

const providers: ReadonlyArray<Sim.ProviderSpec> = [
  { name: "a", requests: { perMinute: 1200 }, signals: "headers", latency: { medianMs: 400 } },
  { name: "b", requests: { perMinute: 600 }, signals: "retry-after", latency: { medianMs: 250 } },
  {
    name: "c",
    requests: { perMinute: 900 },
    changes: [{ atMs: 20_000, factor: 0.5 }],
    signals: "none",
    latency: { medianMs: 600 }
  }
]

const one = (algorithm: string) =>
  Effect.gen(function*() {
    const sim = Sim.makeProviders(providers, { seed: SEED })
    const cpu0 = process.cpuUsage()
    const wall0 = performance.now()
    const run = yield* Sim.runChat(sim, { algorithm, pipelines: PIPELINES, concurrency: 96, capacity: 32 })
    const wallS = (performance.now() - wall0) / 1000
    const cpu = process.cpuUsage(cpu0)
    const served = run.log.filter((r) => r.status === 200)
    const t90 = served[Math.floor(0.9 * served.length) - 1]?.atMs ?? run.simMs
    const tokens = served.reduce((a, r) => a + r.tokens, 0) / Math.max(1, served.length)
    const sat = Sim.figures(sim, run.log, 0, t90, tokens)
    const all = Sim.figures(sim, run.log, 0, run.simMs, tokens)
    const perEndpoint: Record<string, { utilisation: number; rate_429: number }> = {}
    for (const [name, f] of Object.entries(sat.byProvider)) {
      perEndpoint[name] = {
        utilisation: Number((f.served / f.offered).toFixed(3)),
        rate_429: Number((f.rateLimited / Math.max(1, f.requests)).toFixed(3))
      }
    }
    return {
      bench: "adaptive",
      algorithm,
      pipelines: PIPELINES,
      failed: run.report.stats.byState.failed + run.report.stats.byState.interrupted,
      requests: run.log.length,
      rate_429: Number(all.rate429.toFixed(4)),
      utilisation: Number(all.utilisation.toFixed(3)),
      utilisation_busy: Number(sat.utilisation.toFixed(3)),
      per_endpoint: perEndpoint,
      sim_s: Number((run.simMs / 1000).toFixed(1)),
      wall_s: Number(wallS.toFixed(2)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(2))
    }
  })

const main = Effect.gen(function*() {
  const lines = []
  for (const algorithm of ALGORITHMS) lines.push(yield* one(algorithm))
  const base = lines[0]!
  for (const l of lines) {
    yield* Console.log(JSON.stringify({
      ...l,
      wall_ratio: Number((l.wall_s / base.wall_s).toFixed(3)),
      cpu_ratio: Number((l.cpu_s / base.cpu_s).toFixed(3)),
      load: os.loadavg().map((x) => Number(x.toFixed(2)))
    }))
  }
})

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
