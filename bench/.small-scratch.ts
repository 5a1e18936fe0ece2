import { Effect } from "effect"
import * as Sim from "/work/wt/fix18b/test/support/provider-sim.js"
const sb = (name: string, perSecond: number, burst: number, signals: "retry-after" | "none"): Sim.ProviderSpec => ({ name, requests: { perMinute: perSecond * 60, burst }, signals, latency: { medianMs: 60 } })
const one = (label: string, specs: Array<Sim.ProviderSpec>, seed: number, pipelines: number, concurrency: number) => Effect.gen(function*() {
  const sim = Sim.makeProviders(specs, { seed })
  const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines, concurrency, capacity: 8 })
  const used = Sim.figures(sim, run.log, 30_000, run.simMs - 1_000, 31)
  const after = Sim.figures(sim, run.log, 30_000, run.simMs, 31)
  console.log(JSON.stringify({ label, seed, utilisation: Number(used.utilisation.toFixed(3)), rate429: Number((after.rate429 * 100).toFixed(2)), failed: run.report.stats.byState.failed }))
})
const main = Effect.gen(function*() {
  for (const seed of [1, 2, 3]) {
    yield* one("one", [sb("hid", 10, 3, "retry-after")], seed, 700, 16)
    yield* one("three", [sb("hid", 10, 3, "retry-after"), sb("bare", 5, 2, "none"), sb("halve", 6, 3, "retry-after")], seed, 1500, 24)
  }
})
Effect.runPromise(main)
