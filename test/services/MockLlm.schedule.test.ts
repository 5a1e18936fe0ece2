/**
 * Issue 18 trial: the mock could neither change a key's limit over time nor announce it. An
 * endpoint's `rpsSchedule` (`--rps-schedule 10@0s,25@30s`) raises or lowers the per-key rate
 * at given times, and `rateLimitHeaders` sends the bucket as OpenAI's `x-ratelimit-*` or
 * Anthropic's `anthropic-ratelimit-*` headers on every answer, which assay's provider layer
 * reads (`RateLimit.statusOfHeaders`, what `adaptive` paces by). `rateLimitSignal` chooses how
 * the bucket's 429 names its wait (issue 18's benchmark over HTTP needs a Retry-After endpoint,
 * a retry-after-ms one and a bare-429 one). TestClock throughout.
 */
import { HttpClient, HttpClientRequest, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Either, Option } from "effect"
import { applyOverrides } from "../../src/cli/MockLlmCommand.js"
import * as RateLimit from "../../src/domain/RateLimit.js"
import { decodeProfile, makeApp, parseRpsSchedule } from "../../src/services/MockLlm.js"
import { headerCeiling } from "../../src/services/internal/adaptive.js"
import { TestClock } from "effect"

const chat = (key: string, text: string, endpoint = "a") =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const res = yield* client.execute(
      HttpClientRequest.post(`/e/${endpoint}/v1/chat/completions`).pipe(
        HttpClientRequest.bodyUnsafeJson({ model: "m", messages: [{ role: "user", content: text }] }),
        HttpClientRequest.bearerToken(key)
      )
    )
    yield* res.json
    const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
    return { status: res.status, headers: res.headers, status_: RateLimit.statusOfHeaders((n) => res.headers[n], now) }
  })

const serveApp = (input: unknown) =>
  Effect.gen(function*() {
    const mock = yield* makeApp({ profile: yield* Effect.orDie(decodeProfile(input)) })
    yield* HttpServer.serveEffect(mock.app)
  })

describe("mock-llm: a limit that changes over time, announced by headers", () => {
  it.scoped("rpsSchedule: 2 requests/s, then 5 from second 30; x-ratelimit-* headers of a minute's bucket, read by the provider layer", () =>
    Effect.gen(function*() {
      yield* serveApp({
        endpoints: [{ name: "a", rpsSchedule: [{ atS: 0, rps: 2 }, { atS: 30, rps: 5 }], rateLimitHeaders: "openai", latency: { medianMs: 0 } }]
      })
      const early = [yield* chat("k", "1"), yield* chat("k", "2"), yield* chat("k", "3")]
      assert.deepStrictEqual(early.map((r) => r.status), [200, 200, 200])
      assert.strictEqual(early[0]!.headers["x-ratelimit-limit-requests"], "120")
      // remaining counts down within the minute's 120, as OpenAI's does
      assert.deepStrictEqual(early.map((r) => r.headers["x-ratelimit-remaining-requests"]), ["119", "118", "117"])
      // what assay reads of them: 120/min, 119 left, the bucket full again in 0.5 s (one request at 2/s)
      assert.deepStrictEqual(early[0]!.status_?.requests, { limit: 120, remaining: 119, resetMs: 500 })
      // the bucket empties after 120 requests at once: the 121st is refused
      const rest: Array<number> = []
      for (let i = 0; i < 117; i++) rest.push((yield* chat("k", `more ${i}`)).status)
      assert.deepStrictEqual([rest.at(-1), (yield* chat("k", "over")).status], [200, 429])
      // at second 30 the limit rises: 5 requests/s, 300 a minute
      yield* TestClock.adjust(Duration.seconds(30))
      const after = yield* chat("k2", "x")
      assert.strictEqual(after.headers["x-ratelimit-limit-requests"], "300")
      assert.strictEqual(after.status_?.requests?.limit, 300)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("issue 18 trial F1: the headers' refill is the key's rate, so adaptive's header rule paces by them", () =>
    Effect.gen(function*() {
      yield* serveApp({ endpoints: [{ name: "a", rps: 8, rateLimitHeaders: "openai", latency: { medianMs: 0 } }] })
      // a client sending twice the limit for a minute: 16 requests a second
      let last: RateLimit.RateLimitStatus | undefined
      for (let s = 0; s < 60; s++) {
        for (let i = 0; i < 16; i++) last = (yield* chat("k", `${s}-${i}`)).status_ ?? last
        yield* TestClock.adjust(Duration.seconds(1))
      }
      // the documented rule, `(limit − remaining) / reset` plus what remains over the reset:
      // the key's 8 requests/s, not the ~3,800 of a 480/min limit over a 3-request bucket
      const ceiling = headerCeiling(last!, 1, undefined)
      assert.isDefined(ceiling)
      assert.isAtLeast(ceiling!, 8)
      assert.isAtMost(ceiling!, 9)
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("anthropic-ratelimit-* headers (reset as an RFC 3339 time)", () =>
    Effect.gen(function*() {
      yield* serveApp({ endpoints: [{ name: "a", rps: 1, rateLimitHeaders: "anthropic", latency: { medianMs: 0 } }] })
      yield* TestClock.adjust(Duration.seconds(100))
      const r = yield* chat("k", "1")
      assert.strictEqual(r.headers["anthropic-ratelimit-requests-limit"], "60")
      assert.strictEqual(r.headers["anthropic-ratelimit-requests-remaining"], "59")
      assert.strictEqual(r.headers["anthropic-ratelimit-requests-reset"], new Date(101_000).toISOString())
      assert.isUndefined(r.headers["x-ratelimit-limit-requests"])
      assert.deepStrictEqual(r.status_?.requests, { limit: 60, remaining: 59, resetMs: 1000 })
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.scoped("rateLimitSignal: the bucket's 429 names its wait as Retry-After seconds, retry-after-ms, or nothing", () =>
    Effect.gen(function*() {
      // 4 requests/s, bucket of 1: the second request at once waits 250 ms for the next token
      yield* serveApp({
        endpoints: [
          { name: "a", rps: 4, burst: 1, latency: { medianMs: 0 } },
          { name: "b", rps: 4, burst: 1, latency: { medianMs: 0 }, rateLimitSignal: "retry-after-ms" },
          // with rate-limit headers the bucket holds a minute of requests: 1 a minute holds one
          { name: "c", rps: 1 / 60, latency: { medianMs: 0 }, rateLimitSignal: "none", rateLimitHeaders: "openai" }
        ]
      })
      const refused = (ep: string) =>
        Effect.gen(function*() {
          const first = yield* chat("k", "1", ep)
          assert.strictEqual(first.status, 200)
          const r = yield* chat("k", "2", ep)
          assert.strictEqual(r.status, 429)
          return r
        })
      const a = yield* refused("a")
      assert.strictEqual(a.headers["retry-after"], "1")
      assert.isUndefined(a.headers["retry-after-ms"])
      const b = yield* refused("b")
      assert.strictEqual(b.headers["retry-after-ms"], "250")
      assert.isUndefined(b.headers["retry-after"])
      const c = yield* refused("c")
      assert.isUndefined(c.headers["retry-after"])
      assert.isUndefined(c.headers["retry-after-ms"])
      // the rate-limit headers are still sent with a bare 429
      assert.strictEqual(c.headers["x-ratelimit-remaining-requests"], "0")
      const none = { seed: Option.none(), rps: Option.none(), burst: Option.none(), latencyMs: Option.none(), errorRate: Option.none(), maxConcurrency: Option.none() }
      const base = yield* Effect.orDie(decodeProfile({ endpoints: [{ name: "a", rps: 3 }, { name: "b" }] }))
      assert.deepStrictEqual(base.endpoints.map((e) => e.rateLimitSignal), ["retry-after", "retry-after"])
      const p = yield* applyOverrides(base, { ...none, rateLimitSignal: Option.some("none" as const) })
      assert.deepStrictEqual(p.endpoints.map((e) => e.rateLimitSignal), ["none", "none"])
      const bad = yield* Effect.flip(decodeProfile({ endpoints: [{ name: "a", rateLimitSignal: "retry-later" }] }))
      assert.include(bad.message, "rateLimitSignal")
    }).pipe(Effect.provide(NodeHttpServer.layerTest)))

  it.effect("--rps-schedule: parsed on every endpoint; a bad one names the flag", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(
        Either.map(parseRpsSchedule("10@0s, 25@30s,40@2m,50@150000ms"), (s) => s.map((x) => [x.rps, x.atS])),
        Either.right([[10, 0], [25, 30], [40, 120], [50, 150]])
      )
      assert.isTrue(Either.isLeft(parseRpsSchedule("25@30s,10@0s")))
      // a time without its unit is refused, as by every duration flag (issue 18: 25@30 was read as seconds)
      assert.deepStrictEqual(parseRpsSchedule("10@0s,25@30"), Either.left(`"25@30": the time 30 has no unit; write 30s, 30ms or 30m`))
      const base = yield* Effect.orDie(decodeProfile({ endpoints: [{ name: "a", rps: 3 }, { name: "b" }] }))
      const none = { seed: Option.none(), rps: Option.none(), burst: Option.none(), latencyMs: Option.none(), errorRate: Option.none(), maxConcurrency: Option.none() }
      const p = yield* applyOverrides(base, { ...none, rpsSchedule: Option.some("10@0s,25@30s"), rateLimitHeaders: Option.some("openai" as const) })
      for (const e of p.endpoints) {
        assert.strictEqual(e.rps, 10)
        assert.deepStrictEqual(e.rpsSchedule?.map((s) => [s.atS, s.rps]), [[0, 10], [30, 25]])
        assert.strictEqual(e.rateLimitHeaders, "openai")
      }
      const bad = yield* Effect.flip(applyOverrides(base, { ...none, rpsSchedule: Option.some("fast") }))
      assert.include(bad.message, "--rps-schedule: \"fast\" is not RPS@TIME")
      // a burst beside the headers' minute bucket is refused, naming the flag
      const burst = yield* Effect.flip(applyOverrides(base, { ...none, burst: Option.some(3), rateLimitHeaders: Option.some("openai" as const) }))
      assert.include(burst.message, "--burst: does not apply with --rate-limit-headers openai")
    }))
})
