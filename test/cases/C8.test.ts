/**
 * Case C8 (../shared/cases/README.md), through spawned `bin/assay run` against a spawned
 * `assay mock-llm`: a 429 that names its reset some other way than `Retry-After`.
 *
 * (a) C8 as written: one endpoint of capacity 8, 16 rows, defaults everywhere; for its first
 *     3 s the endpoint answers 429 with `x-ratelimit-reset-requests: 3s` and
 *     `x-ratelimit-remaining-requests: 0`, no Retry-After. All 16 succeed, the wait is the
 *     header's (every 429's recorded decision waits ≥ 3 s), the endpoint is never degraded
 *     nor dead. Before the parsing, the 429 carried no hint, counted as a health failure and
 *     the endpoint was dead within 0.6 s (16 failed).
 * (b) The neighbouring variants, one endpoint each in one pool: `retry-after-ms`, an
 *     HTTP-date, an epoch timestamp in Retry-After (an absolute time, not a 57-year wait),
 *     `x-ratelimit-reset-tokens`, Anthropic's RFC 3339 reset, OpenAI's "Please try again in
 *     2s" in the body, `error.retry_after`, Gemini's `retryDelay`. Every 429 carries its wait
 *     (so none degrades its endpoint) and all rows succeed.
 * (c) A 429 with no hint at all backs off by the retry policy and does not kill the endpoint
 *     (the pool's reaction: a rate limit never touches health).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, chatExperiment, query, startMock, tmp, write } from "./support.js"

const signals = [
  "retry-after-ms",
  "http-date",
  "epoch",
  "reset-tokens",
  "anthropic",
  "body-message",
  "body-field",
  "google"
] as const

interface AttemptRow {
  readonly outcome: string
  readonly error_class: string | null
  readonly error_message: string | null
  readonly decision: string | null
}

const healthEvents = (db: string) =>
  query<{ kind: string; n: number }>(
    db,
    "SELECT kind, count(*) AS n FROM events WHERE kind IN ('resource.degraded', 'resource.dead') GROUP BY kind"
  )

describe("C8: a 429 that names its reset some other way", () => {
  it.live("(a) x-ratelimit-reset-requests: 3s only: 16/16 succeed after the header's wait; never degraded or dead", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const mock = await startMock(dir, {
        endpoints: [{ name: "c8", latency: { medianMs: 5 }, throttle: { forS: 3, retryAfterS: 3, signal: "reset-requests", fromFirstRequest: true } }]
      })
      try {
        const store = path.join(dir, "c8.db")
        const file = write(dir, "c8.json", chatExperiment({
          store,
          n: 16,
          resources: [{ id: "c8", capacity: 8, options: { baseUrl: mock.baseUrl("c8"), model: "m", apiKeyEnv: "C8_KEY" } }]
        }))
        const r = await assay(["run", "-c", file, "--quiet"], { C8_KEY: "sk-c8" })
        assert.strictEqual(r.code, 0, r.stderr)
        assert.deepStrictEqual(query(store, "SELECT state, count(*) AS n FROM pipelines GROUP BY state"), [{ state: "succeeded", n: 16 }])
        const failed = query<AttemptRow>(store, "SELECT * FROM attempts WHERE outcome != 'succeeded'")
        assert.isAbove(failed.length, 0, "the endpoint did throttle")
        for (const a of failed) {
          assert.strictEqual(a.error_class, "rate_limit")
          assert.include(a.error_message, "x-ratelimit-reset-requests")
          const d = JSON.parse(a.decision!) as { retry: boolean; delayMs: number; retryAfterMs: number }
          assert.isTrue(d.retry)
          assert.strictEqual(d.retryAfterMs, 3000, "the wait is taken from the header")
          // the retry waits for the key's window (the pool holds the key until it ends; the
          // delay runs from the decision, a few ms after the 429, so it may be just under 3000)
          assert.isAtMost(d.delayMs, 3000)
        }
        // no retry fell inside the header's window: a retry sent early would have met another
        // 429, a second failed attempt of the same pipeline
        const perPipeline = query<{ n: number }>(store, "SELECT count(*) AS n FROM attempts WHERE outcome != 'succeeded' GROUP BY pipeline_id")
        assert.isTrue(perPipeline.every((p) => p.n === 1), JSON.stringify(perPipeline))
        assert.deepStrictEqual(healthEvents(store), [], "a 429 says slow down, not broken")
        const throttled = (await mock.log()).filter((e) => e["reason"] === "throttle")
        assert.strictEqual(throttled.length, failed.length)
      } finally {
        await mock.stop()
      }
    }), 60_000)

  it.live("(b) retry-after-ms, HTTP-date, epoch, reset-tokens, Anthropic, body message, body field, Gemini: all read", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const mock = await startMock(dir, {
        endpoints: signals.map((signal) => ({
          name: signal,
          latency: { medianMs: 5 },
          throttle: { forS: 2, retryAfterS: 2, signal, fromFirstRequest: true }
        }))
      })
      try {
        const store = path.join(dir, "c8b.db")
        const file = write(dir, "c8b.json", chatExperiment({
          store,
          n: 24,
          resources: signals.map((s) => ({ id: s, capacity: 2, options: { baseUrl: mock.baseUrl(s), model: "m", apiKeyEnv: "C8_KEY" } }))
        }))
        const r = await assay(["run", "-c", file, "--quiet"], { C8_KEY: "sk-c8" })
        assert.strictEqual(r.code, 0, r.stderr)
        assert.deepStrictEqual(query(store, "SELECT state, count(*) AS n FROM pipelines GROUP BY state"), [{ state: "succeeded", n: 24 }])
        const failed = query<AttemptRow>(store, "SELECT * FROM attempts WHERE outcome != 'succeeded'")
        const bySource = new Map<string, number>()
        for (const a of failed) {
          assert.strictEqual(a.error_class, "rate_limit", a.error_message ?? "")
          const d = JSON.parse(a.decision!) as { retryAfterMs?: number }
          assert.isDefined(d.retryAfterMs, `a wait was read from: ${a.error_message}`)
          assert.isAtMost(d.retryAfterMs!, 3000, `never a 57-year wait: ${a.error_message}`)
          const source = /from ([^)]+)\)/.exec(a.error_message ?? "")?.[1] ?? "?"
          bySource.set(source, (bySource.get(source) ?? 0) + 1)
        }
        // every signal was met (each endpoint answered at least one 429) and read from its place
        for (const s of ["retry-after-ms", "retry-after", "x-ratelimit-reset-tokens", "anthropic-ratelimit-requests-reset", "body: error.message", "body: error.retry_after", "body: error.details[].retryDelay"]) {
          assert.isTrue(bySource.has(s), `${s} in ${JSON.stringify([...bySource])}`)
        }
        assert.deepStrictEqual(healthEvents(store), [])
      } finally {
        await mock.stop()
      }
    }), 60_000)

  it.live("(c) a 429 with no hint backs off by the retry policy and never kills the endpoint", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const mock = await startMock(dir, {
        endpoints: [{ name: "none", latency: { medianMs: 5 }, throttle: { forS: 3, retryAfterS: 3, signal: "none", fromFirstRequest: true } }]
      })
      try {
        const store = path.join(dir, "c8c.db")
        const file = write(dir, "c8c.json", chatExperiment({
          store,
          n: 16,
          resources: [{ id: "none", capacity: 8, options: { baseUrl: mock.baseUrl("none"), model: "m", apiKeyEnv: "C8_KEY" } }],
          retry: { maxAttempts: 12, base: "500 millis", factor: 2, cap: "2 seconds" }
        }))
        const r = await assay(["run", "-c", file, "--quiet"], { C8_KEY: "sk-c8" })
        assert.strictEqual(r.code, 0, r.stderr)
        assert.deepStrictEqual(query(store, "SELECT state, count(*) AS n FROM pipelines GROUP BY state"), [{ state: "succeeded", n: 16 }])
        assert.deepStrictEqual(healthEvents(store), [])
      } finally {
        await mock.stop()
      }
    }), 60_000)
})
