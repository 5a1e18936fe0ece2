import { HttpClientRequest } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect } from "effect"
import * as RateLimit from "../../src/domain/RateLimit.js"
import * as Sim from "./provider-sim.js"

const ask = (sim: Sim.ProviderSim, name: string) =>
  Effect.scoped(Effect.gen(function*() {
    const res = yield* sim.httpClient.execute(
      HttpClientRequest.post(`${sim.baseUrl(name)}/chat/completions`).pipe(
        HttpClientRequest.bodyUnsafeJson({ model: "m", messages: [{ role: "user", content: "12345678" }] })
      )
    )
    return { status: res.status, headers: res.headers as Record<string, string>, at: yield* Clock.currentTimeMillis }
  })).pipe(Effect.orDie)

describe("provider simulator", () => {
  it.effect("simulated time: ten minutes of sleeps end at once, at the simulated instant they were due", () =>
    Effect.gen(function*() {
      const r = yield* Sim.simulate(
        Effect.gen(function*() {
          yield* Effect.forEach([1, 2, 3], (n) => Effect.sleep(`${n * 200} seconds`), { concurrency: "unbounded" })
          return yield* Clock.currentTimeMillis
        }),
        { startMs: 1_000 }
      )
      assert.strictEqual(r.value, 601_000)
      assert.strictEqual(r.simMs, 600_000)
    }))

  it.effect("a token bucket: the burst is served, the next request is refused with the provider's signal", () =>
    Effect.gen(function*() {
      const spec = (signals: Sim.Signals): Sim.ProviderSpec => ({
        name: signals,
        requests: { perMinute: 120, burst: 2 },
        signals,
        latency: { medianMs: 10, sigma: 0 }
      })
      const sim = Sim.makeProviders([spec("headers"), spec("retry-after"), spec("none")])
      const out = yield* Sim.simulate(Effect.forEach(["headers", "retry-after", "none"], (name) =>
        Effect.gen(function*() {
          const rs = yield* Effect.forEach([1, 2, 3], () => ask(sim, name), { concurrency: "unbounded" })
          return rs
        })))
      const [headers, retryAfter, none] = out.value
      assert.deepStrictEqual(headers!.map((r) => r.status), [200, 200, 429])
      // OpenAI's form: limit, remaining, reset (time to full), and retry-after-ms on the 429
      const refused = headers![2]!.headers
      assert.strictEqual(refused["x-ratelimit-limit-requests"], "2")
      assert.strictEqual(refused["x-ratelimit-remaining-requests"], "0")
      assert.strictEqual(refused["retry-after-ms"], "500")
      const status = RateLimit.statusOfHeaders((n) => refused[n], 0)
      assert.deepStrictEqual(status?.requests, { limit: 2, remaining: 0, resetMs: 1000 })
      assert.deepStrictEqual(retryAfter!.map((r) => r.status), [200, 200, 429])
      assert.strictEqual(retryAfter![2]!.headers["retry-after"], "1")
      assert.isUndefined(retryAfter![0]!.headers["x-ratelimit-remaining-requests"])
      assert.deepStrictEqual(none!.map((r) => r.status), [200, 200, 429])
      assert.isUndefined(RateLimit.hintOfHeaders((n) => none![2]!.headers[n], 0))
      assert.deepStrictEqual(sim.log.map((r) => r.status).filter((s) => s === 429).length, 3)
    }))

  it.effect.each(["openai", "anthropic"] as const)(
    "signals %s: the headers describe the bucket that is enforced, a minute's worth, as the real providers' (and the mock's) do",
    (signals) =>
      Effect.gen(function*() {
        // 6 a minute: six answered at once (the minute's bucket), the seventh refused; the
        // headers' limit is the bucket's size, remaining counts down within it, and the refill
        // they imply, (limit − remaining) / reset, is the hidden rate (0.1 a second)
        const sim = Sim.makeProviders([{ name: "p", requests: { perMinute: 6 }, signals, latency: { medianMs: 10, sigma: 0 } }])
        const out = yield* Sim.simulate(Effect.forEach([1, 2, 3, 4, 5, 6, 7], () => ask(sim, "p")))
        assert.deepStrictEqual(out.value.map((r) => r.status), [200, 200, 200, 200, 200, 200, 429])
        const name = signals === "openai" ? "x-ratelimit-remaining-requests" : "anthropic-ratelimit-requests-remaining"
        assert.deepStrictEqual(out.value.slice(0, 6).map((r) => r.headers[name]), ["5", "4", "3", "2", "1", "0"])
        const refused = out.value[6]!
        assert.strictEqual(refused.headers["retry-after"], "10")
        const first = out.value[0]!
        const status = RateLimit.statusOfHeaders((n) => first.headers[n], first.at)
        assert.strictEqual(status?.requests?.limit, 6)
        const refillPerS = ((status!.requests!.limit! - status!.requests!.remaining!) * 1000) / status!.requests!.resetMs!
        // Anthropic's reset is to the second (up to 1 s early of the 10 s until full): within 12 % then
        assert.approximately(refillPerS, 0.1, signals === "openai" ? 0.001 : 0.012)
        // a burst the headers cannot describe is refused
        assert.throws(() => Sim.makeProviders([{ name: "q", requests: { perMinute: 6, burst: 2 }, signals }]), /minute bucket/)
      }))

  it.effect("a sliding window: so many per window, the next one once the oldest has left it", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([{ name: "w", requests: { perMinute: 60, window: { ms: 3000 } }, signals: "none", latency: { medianMs: 10, sigma: 0 } }])
      const out = yield* Sim.simulate(Effect.gen(function*() {
        const first = yield* Effect.forEach([1, 2, 3, 4], () => ask(sim, "w"), { concurrency: "unbounded" })
        yield* Effect.sleep("2900 millis")
        const early = yield* ask(sim, "w")
        yield* Effect.sleep("200 millis")
        const late = yield* ask(sim, "w")
        return [...first, early, late].map((r) => r.status)
      }))
      assert.deepStrictEqual(out.value, [200, 200, 200, 429, 429, 200])
    }))

  it.effect("limits change when told: halved from 20 s on (capacity and refusals)", () =>
    Effect.gen(function*() {
      const sim = Sim.makeProviders([{
        name: "h",
        requests: { perMinute: 600, burst: 10 },
        changes: [{ atMs: 20_000, factor: 0.5 }],
        signals: "none",
        latency: { medianMs: 10, sigma: 0 }
      }])
      assert.strictEqual(sim.capacityAt("h", 19_999, 1), 10)
      assert.strictEqual(sim.capacityAt("h", 20_000, 1), 5)
      const out = yield* Sim.simulate(Effect.gen(function*() {
        yield* Effect.sleep("21 seconds")
        // the bucket holds 5 now: 5 served, the rest refused
        return (yield* Effect.forEach(Array.from({ length: 8 }), () => ask(sim, "h"), { concurrency: "unbounded" })).map((r) => r.status)
      }))
      assert.deepStrictEqual(out.value.filter((s) => s === 200).length, 5)
    }))

  it.effect("deterministic: the same seed gives the same latencies", () =>
    Effect.gen(function*() {
      const once = (seed: number) =>
        Effect.gen(function*() {
          const sim = Sim.makeProviders([{ name: "d", signals: "none", latency: { medianMs: 100 } }], { seed })
          yield* Sim.simulate(Effect.forEach(Array.from({ length: 20 }), () => ask(sim, "d"), { concurrency: 4 }))
          return sim.log.map((r) => r.latencyMs)
        })
      const a = yield* once(1)
      assert.deepStrictEqual(yield* once(1), a)
      assert.notDeepEqual(yield* once(2), a)
    }))
})
