/**
 * The `adaptive` algorithm against simulated providers with hidden limits (issue 18 §3 tests):
 * the real chat task, the real pool and runner, in simulated time (test/support/provider-sim.ts).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Experiment from "../../src/config/internal/experiment.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Algo from "../../src/services/AcquireAlgorithm.js"
import { renderDashboard } from "../../src/services/Dashboard.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as Report from "../../src/services/internal/report.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import * as Chat from "../../src/tasks/Chat.js"
import * as Sim from "../support/provider-sim.js"

/** Prompt "question N: is this spam?" (4 + 7 tokens) + 20 completion tokens. */
const TOKENS_PER_REQUEST = 31

const adaptiveOf = (s: Sim.PoolSample, id: string): Record<string, unknown> =>
  ((s.resources.find((r) => r.id === id)?.algorithm ?? {}) as Record<string, Record<string, unknown>>)["adaptive"] ?? {}

const sampleAt = (run: Sim.ChatRun, atMs: number): Sim.PoolSample => run.samples.find((s) => s.atMs >= atMs)!

/**
 * No pipeline failed; at least `minUtil` of the capacity on offer served in [`fromMs`,
 * `toMs`); at most 2 % of the requests from `toMs` on answered 429 (after convergence).
 */
const assertConverged = (sim: Sim.ProviderSim, run: Sim.ChatRun, fromMs: number, toMs: number, minUtil: number): void => {
  assert.strictEqual(run.report.stats.byState.failed, 0)
  const converged = Sim.figures(sim, run.log, fromMs, toMs, TOKENS_PER_REQUEST)
  assert.isAtLeast(converged.utilisation, minUtil, `served ${converged.served} of ${converged.offered} in [${fromMs} ms, ${toMs} ms)`)
  const after = Sim.figures(sim, run.log, toMs, run.simMs, TOKENS_PER_REQUEST)
  assert.isAtMost(after.rate429, 0.02, `${after.rateLimited} of ${after.requests} after ${toMs} ms`)
}

describe("adaptive in the provider simulator", () => {
  it.effect.each(["none", "retry-after", "headers"] as const)(
    "signals %s: reaches ≥ 90 %% of a hidden 20 requests/s within 30 s, then ≤ 2 %% of requests answered 429, no pipeline failed",
    (signals) =>
      Effect.gen(function*() {
        const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 1200 }, signals, latency: { medianMs: 300 } }], { seed: 7 })
        const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 700, concurrency: 48, capacity: 48 })
        assertConverged(sim, run, 20_000, 30_000, 0.9)
        // the learned rate is the hidden limit's (and shown in the snapshot): the median of the
        // rates sampled after 30 s (a single sample may catch a probe past the limit)
        const rates = run.samples.filter((s) => s.atMs >= 30_000).map((s) => adaptiveOf(s, "p")["rate"] as number).sort((a, b) => a - b)
        const rate = rates[Math.floor(rates.length / 2)]!
        assert.isAtLeast(rate, 18)
        // with headers the cap also lends the unspent budget; without, the learned rate is the limit's
        if (signals !== "headers") assert.isAtMost(rate, 23)
      }), 180_000)

  it.effect.each(["openai", "anthropic"] as const)(
    "signals %s (a minute bucket, as those providers' headers describe it): its minute is spent at the rate the headers allow, ≥ 90 %% of a hidden 20 requests/s from 20 s on, no 429, no pipeline failed",
    (signals) =>
      Effect.gen(function*() {
        // a fresh key holds a minute of requests (1,200): the headers' refill `(limit − remaining)
        // / reset` is the hidden rate and the remaining budget is spread over the time to reset,
        // so the rate falls toward the limit as the bucket empties, and no request is refused
        const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 1200 }, signals, latency: { medianMs: 300 } }], { seed: 7 })
        const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 1900, concurrency: 48, capacity: 48 })
        assertConverged(sim, run, 20_000, 30_000, 0.9)
        assert.strictEqual(run.log.filter((r) => r.status === 429).length, 0)
        for (let t = 20_000; t + 5_000 <= run.simMs - 1_000; t += 5_000) {
          const f = Sim.figures(sim, run.log, t, t + 5_000, TOKENS_PER_REQUEST)
          assert.isAtLeast(f.utilisation, 0.9, `served ${f.served} of ${f.offered} in [${t} ms, ${t + 5_000} ms)`)
        }
        // the learned rate is what the headers allow: above the limit while the minute's budget
        // lasts, falling toward it as the bucket empties
        const rates = run.samples.filter((s) => s.atMs >= 30_000).map((s) => adaptiveOf(s, "p")["rate"] as number)
        assert.isAtLeast(Math.min(...rates), 18)
        assert.isBelow(rates[rates.length - 1]!, rates[0]!)
      }), 180_000)

  it.effect("openai headers over a minute bucket that halves at 20 s: the rate follows the headers down, under 25 % above the new limit within the window (a minute), no 429", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([{
        name: "p",
        requests: { perMinute: 1200 },
        changes: [{ atMs: 20_000, factor: 0.5 }],
        signals: "openai",
        latency: { medianMs: 300 }
      }], { seed: 7 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 2200, concurrency: 48, capacity: 48 })
      assert.strictEqual(run.report.stats.byState.failed, 0)
      assert.strictEqual(run.log.filter((r) => r.status === 429).length, 0)
      const before = adaptiveOf(sampleAt(run, 19_000), "p")["rate"] as number
      const after = adaptiveOf(sampleAt(run, 80_000), "p")["rate"] as number
      assert.isAbove(before, 20)
      assert.isAtMost(after, 12.5, `rate a minute after the halving (from ${before})`)
      const settled = Sim.figures(sim, run.log, 20_000, run.simMs - 1_000, TOKENS_PER_REQUEST)
      assert.isAtLeast(settled.utilisation, 0.9, `served ${settled.served} of ${settled.offered} after 20 s`)
    }), 180_000)

  it.effect.each(["retry-after", "none"] as const)(
    "a fresh user's endpoint (hidden 10 requests/s with a 1 s burst, signals %s; capacity 8, 16 at once): after 10 s ≤ 1 %% of requests answered 429 and ≥ 90 %% of the limit used",
    (signals) =>
      Effect.gen(function*() {
        // issue 18 re-trial: the rate restarted above the delivered rate after each cut and
        // grew 10 %/s past the knee, so a 429 came every ~5 s (2 % of requests)
        const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 600 }, signals, latency: { medianMs: 50 } }], { seed: 1 })
        const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 600, concurrency: 16, capacity: 8 })
        assert.strictEqual(run.report.stats.byState.failed, 0)
        const after = Sim.figures(sim, run.log, 10_000, run.simMs, TOKENS_PER_REQUEST)
        assert.isAtMost(after.rate429, 0.01, `${after.rateLimited} of ${after.requests} after 10 s`)
        const used = Sim.figures(sim, run.log, 10_000, run.simMs - 1_000, TOKENS_PER_REQUEST)
        assert.isAtLeast(used.utilisation, 0.9, `served ${used.served} of ${used.offered} after 10 s`)
      }), 180_000)

  /**
   * Issue 18 F2 (tester18d, real runs against `assay mock-llm`: 7.4–7.7 of 10 requests/s; three
   * endpoints 0.81–0.85 with 2.3–2.6 % 429s): a small bucket answering 429 with a whole-second
   * Retry-After. Before the fix the knee was the epoch's average delivery (the climb back and
   * the pause included) and the rate probed past it every ~12 s: 0.84 of one endpoint, 0.89 of
   * three.
   */
  const smallBucket = (name: string, perSecond: number, burst: number, signals: "retry-after" | "none"): Sim.ProviderSpec => ({
    name,
    requests: { perMinute: perSecond * 60, burst },
    signals,
    latency: { medianMs: 60 }
  })
  const assertHeld = (sim: Sim.ProviderSim, run: Sim.ChatRun, fromMs: number): void => {
    assert.strictEqual(run.report.stats.byState.failed, 0)
    // the last second is the run's tail (fewer pipelines left than the limit)
    const used = Sim.figures(sim, run.log, fromMs, run.simMs - 1_000, TOKENS_PER_REQUEST)
    const detail = Object.entries(used.byProvider).map(([k, v]) => `${k} ${v.served}/${v.offered.toFixed(0)}`).join(", ")
    assert.isAtLeast(used.utilisation, 0.9, `served ${used.served} of ${used.offered} from ${fromMs} ms (${detail})`)
    const after = Sim.figures(sim, run.log, fromMs, run.simMs, TOKENS_PER_REQUEST)
    assert.isAtMost(after.rate429, 0.02, `${after.rateLimited} of ${after.requests} from ${fromMs} ms`)
  }

  it.effect("a small bucket (hidden 10 requests/s, burst 3, Retry-After 1 s, 60 ms; capacity 8, 16 at once): from 30 s ≥ 90 % of the limit used, ≤ 2 % of requests answered 429 (issue 18 F2)", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([smallBucket("hid", 10, 3, "retry-after")], { seed: 1 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 700, concurrency: 16, capacity: 8 })
      assertHeld(sim, run, 30_000)
    }), 180_000)

  it.effect("three small buckets in one pool (10 + 5 + 6 requests/s, Retry-After 1 s or a bare 429; capacity 8 each, 24 at once): from 30 s ≥ 90 % of the capacity on offer, ≤ 2 % of requests answered 429 (issue 18 F2)", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([
        smallBucket("hid", 10, 3, "retry-after"),
        smallBucket("bare", 5, 2, "none"),
        smallBucket("halve", 6, 3, "retry-after")
      ], { seed: 1 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 1500, concurrency: 24, capacity: 8 })
      assertHeld(sim, run, 30_000)
    }), 180_000)

  /**
   * Issue 18 F2's side effect (fix18b): the plateau that doubles while a knee holds made a limit
   * raised ×2.5 mid-run slow to find (bench/adaptive-raise.ts: headers 18.3 s at seed 1, a bare
   * 429 25.0 s at seed 2, against 8.8 and 12.0 s before). The seconds from the raise until the
   * answers of a 3 s window reach 90 % of the new limit (as the bench measures them).
   */
  const findRaised = (run: Sim.ChatRun, raiseMs: number, newRps: number): number | undefined => {
    const served = run.log.filter((r) => r.status === 200).map((r) => r.atMs)
    const last = served[served.length - 1] ?? 0
    for (let t = raiseMs; t + 3000 <= last; t += 100) {
      if (served.filter((x) => x >= t && x < t + 3000).length / 3 >= 0.9 * newRps) return (t + 3000 - raiseMs) / 1000
    }
    return undefined
  }
  it.effect.each([["headers", 1, 6], ["none", 2, 20]] as const)(
    "a limit raised ×2.5 at 30 s (10 → 25 requests/s, signals %s, seed %i): found within %i simulated seconds, ≤ 1 %% of requests after the raise answered 429",
    ([signals, seed, boundS]) =>
      Effect.gen(function*() {
        const sim = Sim.makeProviders([
          { name: "a", requests: { perMinute: 600 }, changes: [{ atMs: 30_000, factor: 2.5 }], signals, latency: { medianMs: 200 } }
        ], { seed })
        const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 1200, concurrency: 64, capacity: 32 })
        assert.strictEqual(run.report.stats.byState.failed, 0)
        const found = findRaised(run, 30_000, 25)
        assert.isDefined(found, "the raised limit was never reached")
        assert.isAtMost(found!, boundS)
        const after = run.log.filter((r) => r.atMs >= 30_000)
        assert.isAtMost(after.filter((r) => r.status === 429).length / after.length, 0.01)
      }), 180_000)

  it.effect.each([1, 2])(
    "a hidden concurrency limit (3 in flight, a 429 with Retry-After 1 s past it, ~300 ms: about 10 requests/s on offer; capacity 8, 16 at once; seed %i): from 30 s ≥ 85 %% of it used, ≤ 2 %% of requests answered 429, the window learned at 3 (tester18f F3)",
    (seed) =>
      Effect.gen(function*() {
        // `assay mock-llm`'s `maxConcurrency: 3` with a latency of median 300 ms, p95 ~400 ms.
        // Each such 429 used to cut the rate and set a rate knee, while the window (never
        // binding) was not learned: 0.59–0.62 of the offer, flat (bench/adaptive-concurrency.ts)
        const sim = Sim.makeProviders([{
          name: "conc",
          signals: "none",
          maxConcurrent: 3,
          concurrencyRetryAfterS: 1,
          latency: { medianMs: 300, sigma: 0.175 }
        }], { seed })
        const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 700, concurrency: 16, capacity: 8 })
        assert.strictEqual(run.report.stats.byState.failed, 0)
        // the last second is the run's tail (fewer pipelines left than the limit)
        const used = Sim.figures(sim, run.log, 30_000, run.simMs - 1_000, TOKENS_PER_REQUEST)
        assert.approximately(used.offered / ((run.simMs - 31_000) / 1000), 9.85, 0.05, "3 in flight over the mean latency")
        assert.isAtLeast(used.utilisation, 0.85, `served ${used.served} of ${used.offered} from 30 s`)
        const after = Sim.figures(sim, run.log, 30_000, run.simMs, TOKENS_PER_REQUEST)
        assert.isAtMost(after.rate429, 0.02, `${after.rateLimited} of ${after.requests} from 30 s`)
        const windows = run.samples.filter((x) => x.atMs >= 30_000).map((x) => adaptiveOf(x, "conc")["concurrency"] as number)
        assert.strictEqual(windows.filter((w) => w === 3).length / windows.length >= 0.9, true, `windows from 30 s: ${windows.join(" ")}`)
      }), 180_000)

  it.effect("the same provider under wait (capacity 48, the limit unknown): far more than 2 % of requests answered 429", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 1200 }, signals: "none", latency: { medianMs: 300 } }], { seed: 7 })
      const run = yield* Sim.runChat(sim, { algorithm: "wait", pipelines: 300, concurrency: 48, capacity: 48 })
      const after = Sim.figures(sim, run.log, 5_000, run.simMs, TOKENS_PER_REQUEST)
      assert.isAbove(after.rate429, 0.2)
    }), 180_000)

  it.effect("a limit that halves at 20 s: backed off within its window (5 s), then ≥ 90 % of the new limit with ≤ 2 % 429s", () =>
    Effect.gen(function*() {
      // 20 requests/s with a 5-second bucket (100 requests), halved at 20 s
      const sim = Sim.makeProviders([{
        name: "p",
        requests: { perMinute: 1200, burst: 100 },
        changes: [{ atMs: 20_000, factor: 0.5 }],
        signals: "none",
        latency: { medianMs: 300 }
      }], { seed: 3 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 800, concurrency: 48, capacity: 48, sampleEvery: 500 })
      assert.strictEqual(run.report.stats.byState.failed, 0)
      const before = adaptiveOf(sampleAt(run, 19_500), "p")["rate"] as number
      assert.isAbove(before, 15, "before the change it ran near the old limit")
      const within = run.samples.filter((s) => s.atMs > 20_000 && s.atMs <= 25_000).map((s) => adaptiveOf(s, "p")["rate"] as number)
      assert.isAtMost(Math.min(...within), 10.5, `rates within the window after the change: ${within.join(", ")}`)
      const last = adaptiveOf(sampleAt(run, 25_000), "p")["lastDecrease"] as { reason: string; at: number }
      assert.strictEqual(last.reason, "rate_limit")
      const settled = Sim.figures(sim, run.log, 30_000, 40_000, TOKENS_PER_REQUEST)
      assert.isAtLeast(settled.utilisation, 0.9, `served ${settled.served} of ${settled.offered} in [30 s, 40 s)`)
      const after = Sim.figures(sim, run.log, 30_000, run.simMs, TOKENS_PER_REQUEST)
      assert.isAtMost(after.rate429, 0.02, `${after.rateLimited} of ${after.requests} after 30 s`)
    }), 180_000)

  it.effect("a fresh user's halving (20 → 10 requests/s at 15 s, Retry-After 1 s, 16 at once): sending resumes when each throttle window ends, never a longer silence", () =>
    Effect.gen(function*() {
      // issue 18 fresh-user trial (ad/): a 3.7 s silence, 2.6 s of it after a 1 s Retry-After
      // had ended, and a 2.1 s silence at the halving. In simulated time (no event-loop stalls)
      // the pool sends again at the window's end: the longest silence is the Retry-After itself.
      const sim = Sim.makeProviders([{
        name: "p",
        requests: { perMinute: 1200, burst: 20 },
        changes: [{ atMs: 15_000, factor: 0.5 }],
        signals: "retry-after",
        latency: { medianMs: 30 }
      }], { seed: 1 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 450, concurrency: 16, capacity: 16 })
      assert.strictEqual(run.report.stats.byState.failed, 0)
      const ts = run.log.map((r) => r.atMs).sort((a, b) => a - b)
      const silences = ts.slice(1).map((t, i) => t - ts[i]!)
      assert.isAtMost(Math.max(...silences), 1_050, "no silence beyond the 1 s Retry-After")
      const after = Sim.figures(sim, run.log, 20_000, run.simMs - 1_000, TOKENS_PER_REQUEST)
      assert.isAtLeast(after.utilisation, 0.9, `served ${after.served} of ${after.offered} after 20 s`)
      assert.isAtMost(run.log.filter((r) => r.status === 429).length / run.log.length, 0.02)
    }), 180_000)

  it.effect("the last pipelines of a run finish: queued behind the window, then paced with no request in flight (issue 18)", () =>
    Effect.gen(function*() {
      // a fresh user's run: 10 requests/s with a bucket of 5, capacity 8, 16 pipelines at once;
      // the last ones waited for a release that never came (the run never ended)
      const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 600, burst: 5 }, signals: "none", latency: { medianMs: 80 } }], { seed: 1 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 120, concurrency: 16, capacity: 8, maxAttempts: 10, timeLimitMs: 120_000 })
      assert.strictEqual(run.report.stats.byState.succeeded, 120)
    }), 180_000)

  it.effect("a token limit that binds before the request limit: paced by the x-ratelimit-*-tokens headers", () =>
    Effect.gen(function*() {
      // requests allow 50/s, tokens only 10 requests' worth per second
      const sim = Sim.makeProviders([{
        name: "p",
        requests: { perMinute: 3000 },
        tokens: { perMinute: 600 * TOKENS_PER_REQUEST },
        signals: "headers",
        latency: { medianMs: 300 }
      }], { seed: 5 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 400, concurrency: 48, capacity: 48 })
      assert.strictEqual(run.report.stats.byState.failed, 0)
      const perRequest = run.log.reduce((a, r) => a + r.tokens, 0) / run.log.length
      assert.approximately(perRequest, TOKENS_PER_REQUEST, 1)
      const converged = Sim.figures(sim, run.log, 20_000, 30_000, perRequest)
      assert.isAtLeast(converged.utilisation, 0.9, `served ${converged.served} of ${converged.offered}`)
      const after = Sim.figures(sim, run.log, 10_000, run.simMs, perRequest)
      assert.isAtMost(after.rate429, 0.02)
      assert.isTrue(run.samples.some((s) => adaptiveOf(s, "p")["pacedBy"] === "headers"), "the headers' cap was the binding one")
    }), 180_000)

  it.effect("rising latency past the server's knee: the concurrency window settles near the knee, cut for latency", () =>
    Effect.gen(function*() {
      // no rate limit; past 4 requests in flight every answer slows down
      const sim = Sim.makeProviders([{ name: "p", signals: "none", knee: 4, latency: { medianMs: 200, sigma: 0.1 } }], { seed: 11 })
      const run = yield* Sim.runChat(sim, { algorithm: "adaptive", pipelines: 600, concurrency: 32, capacity: 32 })
      assert.strictEqual(run.report.stats.byState.failed, 0)
      const late = run.samples.filter((s) => s.atMs >= 15_000)
      assert.isAbove(late.length, 0)
      // latency doubles at 8 in flight (the tolerance): the window stays around there, far below 32
      for (const s of late) assert.isAtMost(adaptiveOf(s, "p")["concurrency"] as number, 10)
      assert.isTrue(run.samples.some((s) => (adaptiveOf(s, "p")["lastDecrease"] as { reason?: string } | null)?.reason === "latency"))
      // answers stay near the unloaded latency (at 32 in flight they would take 5× as long)
      const lat = run.log.filter((r) => r.atMs >= 15_000).map((r) => r.latencyMs).sort((a, b) => a - b)
      assert.isAtMost(lat[Math.floor(lat.length / 2)]!, 2.5 * 200)
    }), 180_000)
})

describe("adaptive: our own event loop's delay is not the server's latency (issue 18)", () => {
  // a client starved of CPU: its loop stalls 600 ms of every second; the server answers in
  // ~50 ms with no limit; what the client measures includes the stalls
  const starved = () =>
    Sim.makeProviders([{ name: "p", signals: "none", latency: { medianMs: 50, sigma: 0.1 } }], {
      seed: 13,
      loopStalls: { everyMs: 1000, stallMs: 600 }
    })
  const latencyCuts = (run: Sim.ChatRun) => {
    const last = adaptiveOf(run.samples.at(-1)!, "p")
    return { decreases: last["decreases"] as number, reason: (last["lastDecrease"] as { reason?: string } | null)?.reason, last }
  }

  it.effect("the stalls taken out (loopDelay): no latency cut, the window grows; counted in loopStallMs", () =>
    Effect.gen(function*() {
      const sim = starved()
      const run = yield* Sim.runChat(sim, { algorithm: Algo.adaptive({ loopDelay: sim.loopDelay }), pipelines: 250, concurrency: 32, capacity: 32 })
      assert.strictEqual(run.report.stats.byState.failed, 0)
      const { decreases, last } = latencyCuts(run)
      assert.strictEqual(decreases, 0, JSON.stringify(last))
      assert.isAtLeast(last["concurrency"] as number, 16)
      assert.isAbove(last["loopStallMs"] as number, 0)
      // what the rule read: the server's ~50 ms, not the client's
      assert.isAtMost(last["latencyEmaMs"] as number, 80)
    }), 180_000)

  it.effect("only the stalls that held a request count: a server answering in 600 ms is read as 600 ms through a loaded spell, and no cut follows it", () =>
    Effect.gen(function*() {
      // issue 18's benchmark over HTTP (load 14–22): the loop stalled a few ms of every few
      // tens all along; summing every stall inside a 400 ms answer read it as ~110 ms in the
      // most stalled seconds, that became the baseline, and calmer seconds then read as
      // congestion (48 latency cuts, no 429, the key used to half its limit). Here: 70 ms of
      // every 100 stalled for the first 15 s, then none; the server's latency never changes
      const sim = Sim.makeProviders([{ name: "p", signals: "none", latency: { medianMs: 600, sigma: 0.1 } }], {
        seed: 17,
        loopStalls: { everyMs: 100, stallMs: 70, untilMs: 15_000 }
      })
      const run = yield* Sim.runChat(sim, { algorithm: Algo.adaptive({ loopDelay: sim.loopDelay }), pipelines: 1500, concurrency: 32, capacity: 32 })
      assert.strictEqual(run.report.stats.byState.failed, 0)
      const end = adaptiveOf(run.samples.at(-1)!, "p")
      // the baseline (the lowest average seen) is near the server's ~600 ms, not what a loaded
      // spell's stalls left of it
      assert.isAtLeast(end["latencyBaseMs"] as number, 0.7 * 600, JSON.stringify(end))
      // no latency cut once the load has passed, and the window is back at the capacity
      const late = run.samples.filter((x) => x.atMs >= 17_000)
      const cutsAt17 = adaptiveOf(late[0]!, "p")["decreases"] as number
      assert.strictEqual(end["decreases"], cutsAt17, JSON.stringify(end))
      assert.isAtLeast(end["concurrency"] as number, 30, JSON.stringify(end))
    }), 180_000)

  /**
   * tester18f F2 (3 endpoints, 2.4–3.6 % 429s at load 13–17): does a starved loop turn a stall
   * into a burst of sends? Here the client's timers fire late: every timer due within a stall
   * (400 ms of every second) fires at its end, the answers and the pacer's together. The pacing
   * bucket holds at most `max(1, rate × burst)` (100 ms) requests, so the missed slots are not
   * caught up: never two sends within 10 ms. The control: a bucket of a second (`burst: "1
   * second"`) catches up the stall's slots at its end, and the same check sees it.
   */
  const lateRun = (options: Algo.AdaptiveOptions) =>
    Effect.gen(function*() {
      const stalls = { everyMs: 1000, stallMs: 400 }
      const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 600, burst: 3 }, signals: "retry-after", latency: { medianMs: 60 } }], {
        seed: 1,
        loopStalls: stalls
      })
      const run = yield* Sim.runChat(sim, {
        algorithm: Algo.adaptive({ loopDelay: sim.loopDelay, ...options }),
        pipelines: 400,
        concurrency: 16,
        capacity: 8,
        lateTimers: stalls
      })
      const ts = run.log.map((r) => r.atMs).sort((a, b) => a - b)
      const within10 = Math.max(...ts.map((t, i) => ts.slice(i).filter((x) => x < t + 10).length))
      const rates = run.samples.map((x) => (adaptiveOf(x, "p")["rate"] as number | undefined) ?? 0)
      return { sim, run, within10, maxRate: Math.max(...rates) }
    })

  it.effect("timers fired late by a stalled loop (400 ms of every second): the pacing does not catch up the missed slots, never two sends within 10 ms (tester18f F2)", () =>
    Effect.gen(function*() {
      const { maxRate, run, sim, within10 } = yield* lateRun({})
      assert.strictEqual(run.report.stats.byState.failed, 0)
      // below 20 requests/s the bucket holds under 2 requests: one at a time
      assert.isBelow(maxRate, 20)
      assert.strictEqual(within10, 1)
      const after = Sim.figures(sim, run.log, 10_000, run.simMs, TOKENS_PER_REQUEST)
      assert.isAtMost(after.rate429, 0.02, `${after.rateLimited} of ${after.requests} after 10 s`)
      // the control: a bucket of a second sends the stall's slots at once
      const control = yield* lateRun({ burst: "1 second" })
      assert.isAtLeast(control.within10, 3)
    }), 180_000)

  it.effect("the same run with loopDelay: false reads the stalls as congestion and cuts the window for latency", () =>
    Effect.gen(function*() {
      const sim = starved()
      const run = yield* Sim.runChat(sim, { algorithm: Algo.adaptive({ loopDelay: false }), pipelines: 250, concurrency: 32, capacity: 32 })
      const { decreases, reason } = latencyCuts(run)
      assert.isAtLeast(decreases, 2)
      assert.strictEqual(reason, "latency")
    }), 180_000)
})

describe("adaptive: options", () => {
  const issues = (input: unknown) => {
    const r = Algo.resolveAlgorithm(input as Algo.AcquireAlgorithm)
    assert.isTrue(Either.isLeft(r))
    const e = Either.getLeft(r)
    return e._tag === "Some" && e.value._tag === "ConfigError" ? e.value.issues.map((i) => `${i.path}: ${i.message}`) : []
  }

  it("resolves by name and with options; the fingerprint carries the parameters (durations in ms)", () => {
    const r = Algo.resolveAlgorithm({ name: "adaptive", initialRate: 5, hold: "2 seconds" })
    assert.isTrue(Either.isRight(r))
    const fp = Either.getOrThrow(r).fingerprint() as Record<string, unknown>
    assert.strictEqual(fp["name"], "adaptive")
    assert.strictEqual(fp["initialRate"], 5)
    assert.strictEqual(fp["holdMs"], 2000)
    assert.strictEqual(fp["decrease"], 0.7)
    assert.strictEqual(fp["maxRate"], null)
    assert.deepStrictEqual(Either.getOrThrow(Algo.resolveAlgorithm("adaptive")).fingerprint(), Algo.adaptive().fingerprint())
  })

  it("bad options are refused with their field paths", () => {
    assert.deepStrictEqual(issues({ name: "adaptive", decrease: 1.5 }).map((l) => l.split(":")[0]), ["algorithm.decrease"])
    assert.deepStrictEqual(issues({ name: "adaptive", bogus: 1 }).map((l) => l.split(":")[0]), ["algorithm.bogus"])
    assert.deepStrictEqual(issues({ name: "adaptive", hold: 5 }).map((l) => l.split(":")[0]), ["algorithm.hold"])
    assert.deepStrictEqual(issues({ name: "adaptive", initialConcurrency: 0 }).map((l) => l.split(":")[0]), ["algorithm.initialConcurrency"])
    assert.deepStrictEqual(issues({ name: "adaptive", minRate: 10, maxRate: 5 }), [
      "algorithm.minRate: minRate (10) is above maxRate (5)",
      "algorithm.initialRate: initialRate (2) is outside [minRate, maxRate] = [10, 5]"
    ])
  })
})

describe("adaptive in experiment configs", () => {
  const write = (algorithm: string) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-adaptive-"))
    const file = path.join(dir, "x.yaml")
    fs.writeFileSync(file, [
      "pools:",
      `  llm: { algorithm: ${algorithm}, resources: [ {id: a, capacity: 8} ] }`,
      "pipeline: { name: m, resource: llm, tasks: [ { use: echo } ] }",
      "source: { range: { n: 2 } }"
    ].join("\n"))
    return file
  }

  it.effect("algorithm: { name: adaptive, ... } is accepted; bad options are refused at their paths, all at once", () =>
    Effect.gen(function*() {
      yield* Experiment.load(write("{ name: adaptive, initialRate: 5, hold: 2 seconds }"))
      yield* Experiment.load(write("adaptive"))
      const e = yield* Effect.flip(Experiment.load(write("{ name: adaptive, decrease: 1.5, hold: 5, burst: soon }")))
      assert.deepStrictEqual(e.issues.map((i) => i.path), [
        "pools.llm.algorithm.decrease",
        "pools.llm.algorithm.hold",
        "pools.llm.algorithm.burst"
      ])
      const cross = yield* Effect.flip(Experiment.load(write("{ name: adaptive, minRate: 10, maxRate: 5 }")))
      assert.deepStrictEqual(cross.issues.map((i) => i.path), ["pools.llm.algorithm.minRate", "pools.llm.algorithm.initialRate"])
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("adaptive: its state where users look", () => {
  it.effect("the pool snapshot, the stored health, report and the dashboard show the learned rate, window and last cut", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 600 }, signals: "none", latency: { medianMs: 200 } }], { seed: 1 })
      const env = Layer.provideMerge(
        Runner.layer({ handleSignals: false, concurrency: 16, heartbeat: "1 hour", staleAfter: "3 hours" }),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer([Sim.chatPool(sim, { name: "adaptive", initialRate: 1 }, 16)]))
      )
      const { value } = yield* Sim.simulate(Effect.gen(function*() {
        yield* Runner.run(Pipeline.make("p", Chat.chat<string>({ name: "ask", retry: { maxAttempts: 20 } })).map(
          Array.from({ length: 150 }, (_, i) => `q${i}`)
        ))
        const pools = yield* Pool.Pools
        const snap = (yield* pools.snapshot("llm"))[0]!
        const store = yield* Store
        const stored = (yield* store.resources)[0]!
        const report = Report.renderText(yield* Report.buildReport([{ source: "mem", store }]))
        const monitored = yield* Monitor.readSnapshot(store)
        const page = renderDashboard(monitored)
        return { snap, stored, report, page, monitored }
      }).pipe(Effect.provide(env)))
      const learned = (value.snap.algorithm as Record<string, Record<string, unknown>>)["adaptive"]!
      assert.isAbove(learned["rate"] as number, 5)
      assert.strictEqual((learned["lastDecrease"] as { reason: string }).reason, "rate_limit")
      // stored with the health at the end of the run
      const health = value.stored.health as Record<string, unknown>
      assert.deepStrictEqual(health["algorithm"], value.snap.algorithm)
      const row = Monitor.resourceRow(value.stored)
      assert.match(row.algorithm_text, /^adaptive delivered [\d.]+ req\/s lately, allows [\d.]+ req\/s now, \d+ at once; cut \d+× \(last: a 429 at /)
      // what a resume restored, as report says it, on the dashboard and in watch too (tester18d F5)
      assert.strictEqual(row.restored_text, "")
      const resumed = Monitor.resourceRow({ ...value.stored, health: { ...health, restored: { applied: ["throttle", "probing", "algorithm:adaptive"] } } })
      assert.strictEqual(resumed.restored_text, "restored at resume: throttle, probing, algorithm:adaptive")
      const withRestored = { ...value.monitored, resources: value.monitored.resources.map(() => resumed) }
      assert.include(renderDashboard(withRestored), `<span class="muted restored">restored at resume: throttle, probing, algorithm:adaptive</span>`)
      assert.include(Monitor.renderSnapshot(withRestored, { color: false, width: 400 }), " · restored at resume: throttle, probing, algorithm:adaptive")
      assert.include(value.report, `llm/p (llm): ready; attempts`)
      assert.include(value.report, `; adaptive delivered ${learned["sustained"]} req/s lately, allows ${learned["rate"]} req/s now, ${learned["concurrency"]} at once; cut `)
      assert.include(value.page, `<span class="muted algo">adaptive delivered ${learned["sustained"]} req/s lately, allows ${learned["rate"]} req/s now`)
    }), 180_000)
})
