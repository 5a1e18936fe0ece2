import { assert, describe, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { retryAfterOf } from "../../src/domain/Errors.js"
import {
  delayInMessage,
  formatWait,
  hintOfBody,
  hintOfHeaders,
  statusOfHeaders,
  parseDuration,
  parseReset,
  parseRetryAfter
} from "../../src/domain/RateLimit.js"

const now = Date.parse("2025-01-01T00:00:00Z")
const headers = (h: Record<string, string>) => (name: string) => h[name]

describe("parseDuration (Go time.Duration / protobuf Duration)", () => {
  it("reads every unit and combination providers send", () => {
    const table: ReadonlyArray<readonly [string, number]> = [
      ["1s", 1000],
      ["0s", 0],
      ["250ms", 250],
      ["6m0s", 360_000],
      ["1m30.5s", 90_500],
      ["1m26.4s", 86_400],
      ["20ms", 20],
      ["7.5s", 7500],
      ["2h", 7_200_000],
      ["1h2m3s", 3_723_000],
      ["1h0m0.001s", 3_600_001],
      ["37s", 37_000],
      ["500us", 0.5],
      ["500µs", 0.5],
      ["500μs", 0.5],
      ["1000000ns", 1],
      [".5s", 500],
      ["1.s", 1000],
      [" 3s ", 3000],
      ["1s500ms", 1500]
    ]
    for (const [text, ms] of table) assert.closeTo(parseDuration(text)!, ms, 1e-9, text)
  })

  it("refuses what is not a duration", () => {
    for (const bad of ["", "s", "3", "-3s", "+3s", "3 s", "3sec", "3S", "3d", "3s x", "1e3s", "3.s.5", "ms", "1m 30s", "NaNs"]) {
      assert.isUndefined(parseDuration(bad), bad)
    }
  })

  it("round-trips Go's String() form of any whole-millisecond duration (property)", () => {
    // Go prints h, m and s parts for durations >= 1 s, ms for shorter ones.
    const goString = (ms: number): string => {
      if (ms === 0) return "0s"
      if (ms < 1000) return `${ms}ms`
      const h = Math.floor(ms / 3_600_000)
      const m = Math.floor((ms % 3_600_000) / 60_000)
      const s = (ms % 60_000) / 1000
      return `${h > 0 ? `${h}h` : ""}${h > 0 || m > 0 ? `${m}m` : ""}${s}s`
    }
    FastCheck.assert(
      FastCheck.property(FastCheck.integer({ min: 0, max: 100 * 3_600_000 }), (ms) => {
        const parsed = parseDuration(goString(ms))
        return parsed !== undefined && Math.abs(parsed - ms) < 1e-6
      })
    )
  })
})

describe("parseRetryAfter", () => {
  it("delta-seconds and HTTP-dates (RFC 9110)", () => {
    assert.strictEqual(parseRetryAfter("120", now), 120_000)
    assert.strictEqual(parseRetryAfter("1.5", now), 1500)
    assert.strictEqual(parseRetryAfter("0", now), 0)
    assert.strictEqual(parseRetryAfter("Wed, 01 Jan 2025 00:00:30 GMT", now), 30_000)
    assert.strictEqual(parseRetryAfter("Tue, 31 Dec 2024 23:59:00 GMT", now), 0, "a date in the past is no wait")
    assert.strictEqual(parseRetryAfter("86400", now), 86_400_000, "a long delay stays a delay (the pool caps it)")
  })

  it("an epoch timestamp is an absolute time, never a 57-year wait", () => {
    const at = now + 45_000
    assert.strictEqual(parseRetryAfter(String(at / 1000), now), 45_000, "epoch seconds")
    assert.strictEqual(parseRetryAfter(String(at), now), 45_000, "epoch milliseconds")
    assert.strictEqual(parseRetryAfter("1000000000", now), 0, "2001: in the past")
    assert.strictEqual(parseRetryAfter("999999999", now), 999_999_999_000, "just below the threshold: a (silly) delay")
  })

  it("refuses garbage", () => {
    for (const bad of ["", " ", "-5", "1e3", "soon", "3s", "0x10"]) assert.isUndefined(parseRetryAfter(bad, now), bad)
  })
})

describe("parseReset", () => {
  it("durations, seconds, epochs and RFC 3339 times", () => {
    assert.strictEqual(parseReset("6m0s", now), 360_000)
    assert.strictEqual(parseReset("2", now), 2000)
    assert.strictEqual(parseReset(String(now / 1000 + 7), now), 7000)
    assert.strictEqual(parseReset("2025-01-01T00:00:09Z", now), 9000)
    assert.strictEqual(parseReset("2025-01-01T00:00:09.500+00:00", now), 9500)
    assert.isUndefined(parseReset("later", now))
  })
})

describe("hintOfHeaders", () => {
  it("precedence: retry-after-ms, retry-after, then the resets", () => {
    assert.deepStrictEqual(
      hintOfHeaders(headers({ "retry-after-ms": "1500", "retry-after": "9", "x-ratelimit-reset-requests": "30s" }), now),
      { delayMs: 1500, untilMs: now + 1500, source: "retry-after-ms" }
    )
    assert.strictEqual(hintOfHeaders(headers({ "retry-after": "9", "x-ratelimit-reset-requests": "30s" }), now)?.source, "retry-after")
    assert.strictEqual(hintOfHeaders(headers({ "retry-after": "junk", "x-ratelimit-reset-requests": "3s" }), now)?.delayMs, 3000)
  })

  it("C8: only x-ratelimit-reset-requests (remaining 0), no Retry-After", () => {
    assert.deepStrictEqual(
      hintOfHeaders(headers({ "x-ratelimit-reset-requests": "3s", "x-ratelimit-remaining-requests": "0" }), now),
      { delayMs: 3000, untilMs: now + 3000, source: "x-ratelimit-reset-requests" }
    )
  })

  it("the exhausted limit's reset wins; among several exhausted, the latest", () => {
    const openai = {
      "x-ratelimit-reset-requests": "120ms",
      "x-ratelimit-remaining-requests": "59",
      "x-ratelimit-reset-tokens": "6m0s",
      "x-ratelimit-remaining-tokens": "0"
    }
    assert.deepStrictEqual(hintOfHeaders(headers(openai), now)?.delayMs, 360_000)
    assert.deepStrictEqual(hintOfHeaders(headers({ ...openai, "x-ratelimit-remaining-requests": "0" }), now)?.delayMs, 360_000)
    assert.deepStrictEqual(
      hintOfHeaders(headers({ ...openai, "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "10" }), now)?.delayMs,
      120
    )
  })

  it("no remaining counts: the latest reset; every limit with room left: the earliest", () => {
    assert.strictEqual(
      hintOfHeaders(headers({ "x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "250ms" }), now)?.delayMs,
      1000
    )
    assert.strictEqual(
      hintOfHeaders(
        headers({
          "x-ratelimit-reset-requests": "1s",
          "x-ratelimit-reset-tokens": "250ms",
          "x-ratelimit-remaining-requests": "3",
          "x-ratelimit-remaining-tokens": "10"
        }),
        now
      )?.delayMs,
      250
    )
  })

  it("Anthropic's RFC 3339 resets and GitHub-style epoch resets", () => {
    assert.deepStrictEqual(
      hintOfHeaders(
        headers({
          "anthropic-ratelimit-requests-reset": "2025-01-01T00:00:04Z",
          "anthropic-ratelimit-requests-remaining": "0",
          "anthropic-ratelimit-tokens-reset": "2025-01-01T00:01:00Z",
          "anthropic-ratelimit-tokens-remaining": "5000"
        }),
        now
      ),
      { delayMs: 4000, untilMs: now + 4000, source: "anthropic-ratelimit-requests-reset" }
    )
    assert.strictEqual(
      hintOfHeaders(headers({ "x-ratelimit-reset": String(now / 1000 + 12), "x-ratelimit-remaining": "0" }), now)?.delayMs,
      12_000
    )
  })

  it("nothing parseable: undefined", () => {
    assert.isUndefined(hintOfHeaders(headers({}), now))
    assert.isUndefined(hintOfHeaders(headers({ "x-ratelimit-reset-requests": "soon", "retry-after-ms": "-1" }), now))
  })
})

describe("hintOfBody", () => {
  it("fields of each provider's error shape", () => {
    const table: ReadonlyArray<readonly [unknown, number, string]> = [
      [{ error: { message: "slow down", retry_after: 2 } }, 2000, "body: error.retry_after"],
      [{ error: { message: "x", retry_after_ms: 750 } }, 750, "body: error.retry_after_ms"],
      [{ retry_after: "1.5" }, 1500, "body: retry_after"],
      [{ error: { retryAfter: "4s" } }, 4000, "body: error.retryAfter"],
      [{ error: { retry_after: now / 1000 + 30 } }, 30_000, "body: error.retry_after"],
      [
        {
          error: {
            code: 429,
            status: "RESOURCE_EXHAUSTED",
            details: [{ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "37s" }]
          }
        },
        37_000,
        "body: error.details[].retryDelay"
      ],
      [
        {
          error: {
            message:
              "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 20s. Visit https://platform.openai.com/account/rate-limits",
            type: "tokens",
            code: "rate_limit_exceeded"
          }
        },
        20_000,
        "body: error.message"
      ],
      [{ error: { message: "Please try again in 6ms." } }, 6, "body: error.message"],
      [{ error: { message: "Rate limit reached ... Please try again in 1m26.4s." } }, 86_400, "body: error.message"],
      [{ error: { code: "429", message: "Requests ... have exceeded call rate limit. Please retry after 7 seconds." } }, 7000, "body: error.message"],
      [{ message: "Too many requests, retry in 2 minutes" }, 120_000, "body: message"]
    ]
    for (const [body, ms, source] of table) {
      assert.deepStrictEqual(hintOfBody(body, now), { delayMs: ms, untilMs: now + ms, source }, JSON.stringify(body))
    }
  })

  it("no hint: undefined", () => {
    for (const body of [undefined, null, "text", [], {}, { error: { message: "overloaded" } }, { error: "bad" }]) {
      assert.isUndefined(hintOfBody(body, now), JSON.stringify(body))
    }
  })

  it("delayInMessage reads words and Go durations", () => {
    assert.strictEqual(delayInMessage("try again in 1.5 seconds"), 1500)
    assert.strictEqual(delayInMessage("please wait 30 sec"), 30_000)
    assert.strictEqual(delayInMessage("retry after 2 hours"), 7_200_000)
    assert.strictEqual(delayInMessage("try again in 250 ms"), 250)
    assert.isUndefined(delayInMessage("try again later"))
    assert.isUndefined(delayInMessage("you have 3 requests left"))
  })
})

describe("retryAfterOf reads the new signals on any error", () => {
  it("headers of an SDK error, epoch numbers", () => {
    assert.strictEqual(retryAfterOf({ status: 429, headers: { "x-ratelimit-reset-requests": "3s" } }, now), 3000)
    assert.strictEqual(retryAfterOf({ response: { headers: new Headers({ "retry-after-ms": "40" }) } }, now), 40)
    assert.strictEqual(retryAfterOf({ retryAfter: now / 1000 + 5 }, now), 5000)
    assert.strictEqual(retryAfterOf({ retryAfter: "1767225600" }, now), Date.parse("2026-01-01T00:00:00Z") - now)
  })
})

describe("formatWait", () => {
  it("words for waits", () => {
    assert.deepStrictEqual([250, 3000, 360_000, 86_400_000, 3 * 86_400_000].map(formatWait), ["250 ms", "3 s", "6 min", "24 h", "3 d"])
  })
})

describe("statusOfHeaders (what every answer says about the key's limits)", () => {
  const of = (h: Record<string, string>) => statusOfHeaders((n) => h[n], Date.parse("2025-01-01T00:00:00Z"))

  it("OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}, resets as Go durations", () => {
    assert.deepStrictEqual(
      of({
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "499",
        "x-ratelimit-reset-requests": "120ms",
        "x-ratelimit-limit-tokens": "30000",
        "x-ratelimit-remaining-tokens": "29000",
        "x-ratelimit-reset-tokens": "2s"
      }),
      {
        requests: { limit: 500, remaining: 499, resetMs: 120 },
        tokens: { limit: 30000, remaining: 29000, resetMs: 2000 }
      }
    )
  })

  it("Anthropic's anthropic-ratelimit-*, resets as RFC 3339 times; absent fields are undefined", () => {
    assert.deepStrictEqual(
      of({
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2025-01-01T00:00:30Z"
      }),
      { requests: { limit: 50, remaining: 0, resetMs: 30_000 }, tokens: undefined }
    )
    assert.deepStrictEqual(of({ "x-ratelimit-remaining-tokens": "12" }), {
      requests: undefined,
      tokens: { limit: undefined, remaining: 12, resetMs: undefined }
    })
  })

  it("nothing named, or only garbage: undefined", () => {
    assert.isUndefined(of({}))
    assert.isUndefined(of({ "x-ratelimit-remaining-requests": "-3", "x-ratelimit-reset-requests": "soon" }))
  })
})
