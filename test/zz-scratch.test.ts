import { it } from "@effect/vitest"
import { Effect } from "effect"
import * as Sim from "./support/provider-sim.js"

const providers: ReadonlyArray<Sim.ProviderSpec> = [
  { name: "a", requests: { perMinute: 1200 }, signals: "headers", latency: { medianMs: 300 } },
  { name: "b", requests: { perMinute: 600 }, signals: "retry-after", latency: { medianMs: 300 } },
  { name: "c", requests: { perMinute: 900 }, signals: "none", latency: { medianMs: 300 }, changes: [{ atMs: 20000, factor: 0.5 }] }
]
for (const algorithm of ["adaptive", "leastBusy", "wait"]) {
  it.live(`scratch ${algorithm}`, () => Effect.gen(function*() {
    const sim = Sim.makeProviders(providers, { seed: 1 })
    const t0 = Date.now()
    const run = yield* Sim.runChat(sim, { algorithm, pipelines: 2400, concurrency: 96, capacity: 32 })
    const f = Sim.figures(sim, run.log, 0, run.simMs, 30)
    console.log(algorithm, "real", Date.now() - t0, "ms sim", run.simMs, "timers", run.timers, JSON.stringify({ ...f, byProvider: undefined }), JSON.stringify(f.byProvider), JSON.stringify(run.report.stats.byState))
    if (algorithm === "adaptive") for (const s of run.samples.filter((_, i) => i % 3 === 0)) console.log(s.atMs, JSON.stringify(s.resources.map((r) => [r.id, r.active, (r.algorithm as any)?.adaptive?.rate, (r.algorithm as any)?.adaptive?.concurrency, (r.algorithm as any)?.adaptive?.pacedBy, (r.algorithm as any)?.adaptive?.decreases])))
  }), 120000)
}
