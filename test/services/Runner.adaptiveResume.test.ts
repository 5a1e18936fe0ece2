/**
 * Issue 18 §4, the adaptive algorithm's learned limits across a resume, with traffic: a run
 * stopped after convergence and resumed goes on near the learned rate from its first second
 * (not the conservative start); a run stopped in a 429 storm still honours the throttle window
 * the server asked for. In simulated time (test/support/provider-sim.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { type Duration, Effect, Layer } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import * as Chat from "../../src/tasks/Chat.js"
import * as Sim from "../support/provider-sim.js"

const proc = (store: StoreService, pools: ReadonlyArray<Pool.PoolConfig>, stopAfter?: Duration.DurationInput) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 16, heartbeat: "1 second", staleAfter: "3 hours", ...(stopAfter !== undefined ? { stopAfter } : {}) }),
    Layer.merge(Layer.succeed(Store, store), Pool.layer(pools))
  )

describe("adaptive across a resume, with traffic", () => {
  it.effect("stopped after convergence, resumed: the first seconds go near the learned rate", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 600 }, signals: "none", latency: { medianMs: 100 } }], { seed: 2 })
      const pools = () => [Sim.chatPool(sim, { name: "adaptive", initialRate: 1, slowStart: "2 seconds" }, 16)]
      const specs = Pipeline.make("p", Chat.chat<string>({ name: "ask", retry: { maxAttempts: 20 } })).map(
        Array.from({ length: 600 }, (_, i) => `q${i}`)
      )
      const { value } = yield* Sim.simulate(Effect.gen(function*() {
        const store = yield* Store
        const first = yield* Runner.run(specs).pipe(Effect.provide(proc(store, pools(), "30 seconds")))
        const stoppedAt = sim.log.length === 0 ? 0 : Math.max(...sim.log.map((r) => r.atMs))
        const second = yield* Runner.run(specs, { resume: true }).pipe(Effect.provide(proc(store, pools())))
        return { first, second, stoppedAt }
      }).pipe(Effect.provide(MemoryStore.layer())))
      const ok = (from: number, to: number) => sim.log.filter((r) => r.atMs >= from && r.atMs < to && r.status === 200).length
      const resumedStart = Math.min(...sim.log.filter((r) => r.atMs > value.stoppedAt).map((r) => r.atMs))
      const converged = ok(value.stoppedAt - 10_000, value.stoppedAt) / 10
      const early = ok(resumedStart, resumedStart + 3000) / 3
      assert.isAbove(converged, 8)
      assert.isAbove(early, 0.8 * converged)
    }), 120_000)
})
