/**
 * `adaptive` against three endpoints with small one-second buckets (tester18f F2, fix18e), in
 * simulated time (test/support/provider-sim.ts), so that no CPU load is involved: tester18f's
 * `prof6.json` for `assay mock-llm`: `a` 12 requests/s (a bucket of 12, `Retry-After`), `b`
 * 6 requests/s (a bucket of 6, a bare 429), `c` 10 requests/s halving at 20 s (a bucket of 10,
 * `Retry-After`), each answering in ~60 ms; resource capacity 8, 24 pipelines at once, one chat
 * call per pipeline (its `cmp/adaptive.yaml`, 800 rows). Per seed, one JSON line: `requests`,
 * `rate_429` (whole run), `first_10s_429` (429s in the first 10 s: finding the limits),
 * `rate_429_after_10s`, the 429s per endpoint, `sim_s`, `cpu_s`.
 *
 * Run: `npx tsx bench/adaptive-small-buckets.ts [--seeds 1,2,3] [--pipelines 800]`
 */
import { Effect } from "effect"
import * as os from "node:os"
import * as Sim from "../test/support/provider-sim.js"

const argOf = (name: string): string | undefined => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1] : undefined
}
const SEEDS = (argOf("--seeds") ?? "1,2,3").split(",").map(Number)
const PIPELINES = Number(argOf("--pipelines") ?? 800)

const one = (seed: number) =>
  Effect.gen(function*() {
    const sim = Sim.makeProviders([
      { name: "a", requests: { perMinute: 720, burst: 12 }, signals: "retry-after", latency: { medianMs: 60 } },
      { name: "b", requests: { perMinute: 360, burst: 6 }, signals: "none", latency: { medianMs: 60 } },
      {
        name: "c",
        requests: { perMinute: 600, burst: 10 },
        changes: [{ atMs: 20_000, factor: 0.5 }],
        signals: "retry-after",
        latency: { medianMs: 60 }
      }
    ], { seed })
    const cpu0 = process.cpuUsage()
    const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: PIPELINES, concurrency: 24, capacity: 8 })
    const cpu = process.cpuUsage(cpu0)
    const refused = run.log.filter((r) => r.status === 429)
    const first = refused.filter((r) => r.atMs < 10_000).length
    const after = run.log.filter((r) => r.atMs >= 10_000).length
    const perEndpoint: Record<string, string> = {}
    for (const p of ["a", "b", "c"]) {
      perEndpoint[p] = `${refused.filter((r) => r.provider === p).length}/${run.log.filter((r) => r.provider === p).length}`
    }
    return {
      bench: "adaptive-small-buckets",
      seed,
      failed: run.report.stats.byState.failed,
      requests: run.log.length,
      rate_429: Number((refused.length / run.log.length).toFixed(4)),
      first_10s_429: first,
      rate_429_after_10s: Number(((refused.length - first) / Math.max(1, after)).toFixed(4)),
      per_endpoint_429: perEndpoint,
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
