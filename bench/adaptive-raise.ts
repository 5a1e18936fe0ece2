/**
 * How fast `adaptive` finds a raised limit (issue 18 trial: ~20–38 s), in simulated time
 * (test/support/provider-sim.ts). One endpoint: 600 requests/min (a bucket holding 1 s),
 * latency median 200 ms, raised ×2.5 (to 1,500/min = 25 requests/s) at 30 s; the runner keeps
 * 64 pipelines in flight, the resource allows 32 leases. Signals: a bare 429 (`none`),
 * OpenAI-style headers on every answer naming the bucket's size (`headers`), or the headers as
 * OpenAI and Anthropic send them (`openai`, `anthropic`: the limit per minute, Anthropic's
 * reset an RFC 3339 time to the second, a 429 with Retry-After in whole seconds).
 *
 * Printed per (signals, options) one JSON line: `find_s`, the simulated seconds from the raise
 * until the answers of a 3 s window reach 90% of the new limit (null: never within the run);
 * `after_rate`, answers/s over the last 20 s of the run; `rate_429` after the raise;
 * `recover_s` (median and max over the 429s from 10 s on): the simulated seconds from a 429
 * until a 1 s window of answers reaches 90 % of the limit in force again; `wall_s`,
 * `cpu_s` (real time and process CPU time of the simulation).
 *
 * Run: `npx tsx bench/adaptive-raise.ts [--pipelines 2600] [--seed 1] [--convex-ms 3000,1000]
 * [--signals none,headers,openai,anthropic]`
 */
import { Console, Effect } from "effect"
import * as Sim from "../test/support/provider-sim.js"

const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1]! : dflt
}
const PIPELINES = Number(arg("--pipelines", "2600"))
const SEED = Number(arg("--seed", "1"))
const CONVEX = arg("--convex-ms", "default").split(",")
const SIGNALS = arg("--signals", "none,headers,openai,anthropic").split(",") as ReadonlyArray<Sim.Signals>
const RAISE_MS = 30_000
const NEW_RPS = 25

const one = (signals: Sim.Signals, convex: string) =>
  Effect.gen(function*() {
    const sim = Sim.makeProviders([
      { name: "a", requests: { perMinute: 600 }, changes: [{ atMs: RAISE_MS, factor: 2.5 }], signals, latency: { medianMs: 200 } }
    ], { seed: SEED })
    const algorithm = convex === "default" ? "adaptive" : { name: "adaptive", convex: `${Number(convex)} millis` }
    const cpu0 = process.cpuUsage()
    const wall0 = performance.now()
    const run = yield* Sim.runChat(sim, { algorithm, pipelines: PIPELINES, concurrency: 64, capacity: 32 })
    const wallS = (performance.now() - wall0) / 1000
    const cpu = process.cpuUsage(cpu0)
    const served = run.log.filter((r) => r.status === 200).map((r) => r.atMs)
    const last = served[served.length - 1] ?? 0
    let findS: number | null = null
    for (let t = RAISE_MS; t + 3000 <= last; t += 100) {
      const n = served.filter((x) => x >= t && x < t + 3000).length
      if (n / 3 >= 0.9 * NEW_RPS) {
        findS = Number(((t + 3000 - RAISE_MS) / 1000).toFixed(1))
        break
      }
    }
    const after = run.log.filter((r) => r.atMs >= RAISE_MS)
    const tail = served.filter((x) => x >= last - 20_000).length / 20
    // time to recover from each 429 past the first 10 s: to a 1 s window at 90 % of the limit
    const recover: Array<number> = []
    for (const r of run.log) {
      if (r.status !== 429 || r.atMs < 10_000 || r.atMs > last - 10_000) continue
      const limit = r.atMs >= RAISE_MS ? NEW_RPS : 10
      for (let d = 0; r.atMs + d + 1000 <= last; d += 100) {
        const n = served.filter((x) => x >= r.atMs + d && x < r.atMs + d + 1000).length
        if (n >= 0.9 * limit) {
          recover.push(d / 1000)
          break
        }
      }
    }
    recover.sort((a, b) => a - b)
    return {
      bench: "adaptive-raise",
      signals,
      convex_ms: convex,
      find_s: findS,
      after_rate: Number(tail.toFixed(2)),
      rate_429: Number((after.filter((r) => r.status === 429).length / Math.max(1, after.length)).toFixed(4)),
      recover_s: recover.length === 0 ? null : { median: recover[Math.floor(recover.length / 2)]!, max: recover[recover.length - 1]!, n: recover.length },
      sim_s: Number((run.simMs / 1000).toFixed(1)),
      wall_s: Number(wallS.toFixed(2)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(2))
    }
  })

const main = Effect.gen(function*() {
  for (const signals of SIGNALS) {
    for (const c of CONVEX) yield* Console.log(JSON.stringify(yield* one(signals, c)))
  }
})

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
