import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Either, FastCheck as fc, ParseResult, Random, Schema, TestClock } from "effect"
import { FatalError, ResourceUnavailable, RetryableError } from "../../src/domain/Errors.js"
import {
  applyJitter,
  backoffMs,
  decide,
  decodeRetryPolicyConfig,
  identityFields,
  isRetryable,
  RetryDecision,
  RetryPolicy,
  RetryPolicyFromConfig,
  succeeded
} from "../../src/domain/RetryPolicy.js"

const http = (status: number, extra: Record<string, unknown> = {}) =>
  Object.assign(new Error(`HTTP ${status}`), { status }, extra)

const noJitter = (input: Parameters<typeof RetryPolicy.make>[0] = {}) =>
  RetryPolicy.make({ maxAttempts: 10, jitter: "none", ...input })

/** Runs `decide` with a seeded Random so jittered delays are reproducible. */
const decideSeeded = (policy: RetryPolicy, error: unknown, attempt: number, elapsedMs: number, seed: number) =>
  decide(policy, error, attempt, elapsedMs).pipe(Effect.withRandom(Random.make(seed)))

const issuesOf = (u: unknown) => {
  const r = decodeRetryPolicyConfig(u)
  if (Either.isRight(r)) throw new Error("expected the config to be refused")
  return ParseResult.ArrayFormatter.formatErrorSync(r.left)
}

describe("RetryPolicy values", () => {
  it("defaults: one attempt, classified retries, 0.5 s base, factor 2, 30 s cap, full jitter", () => {
    const p = RetryPolicy.default
    assert.strictEqual(p.maxAttempts, 1)
    assert.deepStrictEqual(p.on, [])
    assert.isTrue(p.retryClassified)
    assert.isFalse(p.retryUnknown)
    assert.strictEqual(Duration.toMillis(p.base), 500)
    assert.strictEqual(p.factor, 2)
    assert.strictEqual(Duration.toMillis(p.cap), 30_000)
    assert.strictEqual(p.jitter, "full")
    assert.isUndefined(p.maxTotal)
    assert.deepStrictEqual(RetryPolicy.make(), p)
  })

  it("make accepts any DurationInput and keeps the class", () => {
    const p = RetryPolicy.make({ maxAttempts: 4, base: "250 millis", cap: Duration.seconds(5), maxTotal: 60_000 })
    assert.instanceOf(p, RetryPolicy)
    assert.strictEqual(Duration.toMillis(p.base), 250)
    assert.strictEqual(Duration.toMillis(p.cap), 5000)
    assert.strictEqual(Duration.toMillis(p.maxTotal!), 60_000)
  })

  it("make refuses invalid values", () => {
    assert.throws(() => RetryPolicy.make({ maxAttempts: 0 }), /maxAttempts/)
    assert.throws(() => RetryPolicy.make({ maxAttempts: 1.5 }), /maxAttempts/)
    assert.throws(() => RetryPolicy.make({ factor: 0.5 }), /factor/)
  })

  it("identityFields holds exactly the timing fields, in ms", () => {
    const p = RetryPolicy.make({ maxAttempts: 4, base: "1 second", factor: 3, cap: "1 minute", jitter: "equal" })
    assert.deepStrictEqual(identityFields(p), { maxAttempts: 4, baseMs: 1000, factor: 3, capMs: 60_000, jitter: "equal" })
    const other = RetryPolicy.make({
      maxAttempts: 4,
      base: "1 second",
      factor: 3,
      cap: "1 minute",
      jitter: "equal",
      on: ["X"],
      retryUnknown: true,
      retryClassified: false,
      maxTotal: "2 minutes"
    })
    assert.deepStrictEqual(identityFields(other), identityFields(p))
    assert.notDeepEqual(identityFields(RetryPolicy.make({ maxAttempts: 5 })), identityFields(RetryPolicy.default))
  })
})

describe("decide: reasons", () => {
  const policy = RetryPolicy.make({ maxAttempts: 3, jitter: "none" })

  it("ok: succeeded(attempt)", () => {
    const d = succeeded(2)
    assert.deepStrictEqual(d, { retry: false, reason: "ok", delayMs: 0, errorClass: null, attempt: 2 })
  })

  it.effect("retryable: a classified retryable failure before the last attempt", () =>
    Effect.gen(function*() {
      const d = yield* decide(policy, http(429), 1, 0)
      assert.deepStrictEqual(d, { retry: true, reason: "retryable", delayMs: 500, errorClass: "rate_limit", attempt: 1 })
      for (const e of [http(503), http(504), new Cause.TimeoutException(), new RetryableError({ message: "x" })]) {
        assert.isTrue((yield* decide(policy, e, 2, 0)).retry)
      }
      const connection = new TypeError("fetch failed", { cause: Object.assign(new Error("x"), { code: "ECONNRESET" }) })
      assert.strictEqual((yield* decide(policy, connection, 1, 0)).errorClass, "connection")
    }))

  it.effect("attempts_exhausted: the last attempt failed", () =>
    Effect.gen(function*() {
      const d = yield* decide(policy, http(429), 3, 0)
      assert.deepStrictEqual(d, { retry: false, reason: "attempts_exhausted", delayMs: 0, errorClass: "rate_limit", attempt: 3 })
      // the default policy (one attempt) never retries
      assert.strictEqual((yield* decide(RetryPolicy.default, http(429), 1, 0)).reason, "attempts_exhausted")
    }))

  it.effect("policy_declined: invalid, fatal, 4xx, unknown, cancelled", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [new TypeError("bad"), "invalid"],
        [new FatalError({ message: "no" }), "fatal"],
        [http(404), "fatal"],
        [new ResourceUnavailable({ pool: "p", message: "x" }), "unknown"],
        [new Error("boom"), "unknown"],
        [new Cause.InterruptedException(), "cancelled"]
      ]
      for (const [error, errorClass] of cases) {
        const d = yield* decide(policy, error, 1, 0)
        assert.deepStrictEqual(d, { retry: false, reason: "policy_declined", delayMs: 0, errorClass, attempt: 1 } as
          RetryDecision)
      }
    }))

  it.effect("policy_declined wins over attempts_exhausted", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* decide(policy, new TypeError("x"), 3, 0)).reason, "policy_declined")
    }))

  it.effect("retryClassified: false declines the classified classes", () =>
    Effect.gen(function*() {
      const p = RetryPolicy.make({ maxAttempts: 3, retryClassified: false })
      assert.strictEqual((yield* decide(p, http(429), 1, 0)).reason, "policy_declined")
      assert.isFalse(isRetryable(p, http(503)))
    }))

  it.effect("retryUnknown: retries ResourceUnavailable and plain errors, never invalid/fatal", () =>
    Effect.gen(function*() {
      const p = RetryPolicy.make({ maxAttempts: 3, retryUnknown: true, jitter: "none" })
      assert.strictEqual((yield* decide(p, new ResourceUnavailable({ pool: "p", message: "x" }), 1, 0)).reason, "retryable")
      assert.isTrue(isRetryable(p, new Error("boom")))
      assert.isFalse(isRetryable(p, new TypeError("x")))
      assert.isFalse(isRetryable(p, http(400)))
    }))

  it.effect("total_budget: elapsed + delay beyond maxTotal", () =>
    Effect.gen(function*() {
      const p = noJitter({ base: "2 seconds", maxTotal: "10 seconds" })
      const within = yield* decide(p, http(503), 1, 8000) // 8 s + 2 s = 10 s: exactly on budget
      assert.strictEqual(within.reason, "retryable")
      const over = yield* decide(p, http(503), 1, 8001)
      assert.deepStrictEqual(over, { retry: false, reason: "total_budget", delayMs: 0, errorClass: "upstream", attempt: 1 })
      // without maxTotal, no budget applies
      assert.isTrue((yield* decide(noJitter({ base: "2 seconds" }), http(503), 1, 1e12)).retry)
    }))

  it("a decision round-trips through its persisted Schema", () => {
    const d: RetryDecision = {
      retry: true,
      reason: "retryable",
      delayMs: 1234.5,
      errorClass: "rate_limit",
      attempt: 2,
      retryAfterMs: 1234.5
    }
    const back = Schema.decodeUnknownSync(RetryDecision)(JSON.parse(JSON.stringify(Schema.encodeSync(RetryDecision)(d))))
    assert.deepStrictEqual(back, d)
    assert.throws(() => Schema.decodeUnknownSync(RetryDecision)({ ...d, reason: "maybe" }))
  })
})

describe("decide: `on` extras", () => {
  class MyProviderError extends Error {
    override readonly name = "MyProviderError"
  }

  it("an `on` entry matches the error's name, _tag or class", () => {
    const byName = RetryPolicy.make({ maxAttempts: 3, on: ["MyProviderError"] })
    assert.isFalse(isRetryable(RetryPolicy.make({ maxAttempts: 3 }), new MyProviderError("x")))
    assert.isTrue(isRetryable(byName, new MyProviderError("x")))
    assert.isFalse(isRetryable(byName, new Error("x")))
    const byTag = RetryPolicy.make({ maxAttempts: 3, on: ["ResourceUnavailable"] })
    assert.isTrue(isRetryable(byTag, new ResourceUnavailable({ pool: "p", message: "x" })))
    const byClass = RetryPolicy.make({ maxAttempts: 3, on: ["invalid"] })
    assert.isTrue(isRetryable(byClass, new RangeError("x")))
    assert.isTrue(isRetryable(RetryPolicy.make({ on: ["TypeError"] }), new TypeError("x")))
  })

  it("`on` cannot make cancellation or a declared FatalError retryable", () => {
    const p = RetryPolicy.make({ maxAttempts: 3, on: ["FatalError", "fatal", "cancelled", "InterruptedException"] })
    assert.isFalse(isRetryable(p, new FatalError({ message: "x" })))
    assert.isFalse(isRetryable(p, new Cause.InterruptedException()))
    // a 4xx is fatal by class but not declared final: naming the class retries it
    assert.isTrue(isRetryable(p, http(409)))
  })

  it.effect("an `on` match yields a real retry decision", () =>
    Effect.gen(function*() {
      const p = noJitter({ maxAttempts: 2, on: ["MyProviderError"] })
      const d = yield* decide(p, new MyProviderError("x"), 1, 0)
      assert.deepStrictEqual(d, { retry: true, reason: "retryable", delayMs: 500, errorClass: "unknown", attempt: 1 })
    }))
})

describe("decide: delays", () => {
  it.effect("jitter none: min(cap, base * factor^(attempt-1))", () =>
    Effect.gen(function*() {
      const p = noJitter({ maxAttempts: 100 })
      const delays: Array<number> = []
      for (let attempt = 1; attempt <= 8; attempt++) delays.push((yield* decide(p, http(429), attempt, 0)).delayMs)
      assert.deepStrictEqual(delays, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000])
      const p3 = noJitter({ maxAttempts: 100, base: "100 millis", factor: 3, cap: "2 seconds" })
      const d3: Array<number> = []
      for (let attempt = 1; attempt <= 5; attempt++) d3.push((yield* decide(p3, http(429), attempt, 0)).delayMs)
      assert.deepStrictEqual(d3, [100, 300, 900, 2000, 2000])
    }))

  it("backoffMs stays at the cap for huge attempt numbers and is 0 for a zero base", () => {
    const p = noJitter({ maxAttempts: 100_000 })
    assert.strictEqual(backoffMs(p, 10_000), 30_000)
    assert.strictEqual(backoffMs(noJitter({ base: 0 }), 10_000), 0)
    assert.strictEqual(backoffMs(noJitter({ factor: 1, base: "3 seconds" }), 50), 3000)
  })

  it("applyJitter", () => {
    assert.strictEqual(applyJitter("none", 1000, 0.7), 1000)
    assert.strictEqual(applyJitter("full", 1000, 0.25), 250)
    assert.strictEqual(applyJitter("equal", 1000, 0.5), 750)
    assert.strictEqual(applyJitter("equal", 1000, 0), 500)
  })

  it.effect.prop(
    "full jitter stays in [0, d], equal jitter in [d/2, d]",
    { seed: fc.integer(), attempt: fc.integer({ min: 1, max: 12 }) },
    ({ attempt, seed }) =>
      Effect.gen(function*() {
        const full = RetryPolicy.make({ maxAttempts: 100, jitter: "full" })
        const equal = RetryPolicy.make({ maxAttempts: 100, jitter: "equal" })
        const d = backoffMs(full, attempt)
        const f = yield* decideSeeded(full, http(503), attempt, 0, seed)
        assert.isTrue(f.retry)
        assert.isAtLeast(f.delayMs, 0)
        assert.isAtMost(f.delayMs, d)
        const e = yield* decideSeeded(equal, http(503), attempt, 0, seed)
        assert.isAtLeast(e.delayMs, d / 2)
        assert.isAtMost(e.delayMs, d)
        // the same seed gives the same delay
        assert.strictEqual((yield* decideSeeded(full, http(503), attempt, 0, seed)).delayMs, f.delayMs)
      }),
    { fastCheck: { numRuns: 200 } }
  )

  it.effect("jitter draws from Random: different seeds spread the delays", () =>
    Effect.gen(function*() {
      const p = RetryPolicy.make({ maxAttempts: 5, jitter: "full" })
      const delays = new Set<number>()
      for (let seed = 0; seed < 20; seed++) delays.add((yield* decideSeeded(p, http(429), 3, 0, seed)).delayMs)
      assert.isAtLeast(delays.size, 15)
    }))

  it.effect("Retry-After (ms or seconds) replaces the computed delay, even beyond the cap", () =>
    Effect.gen(function*() {
      const p = RetryPolicy.make({ maxAttempts: 3, cap: "30 seconds" })
      const d = yield* decide(p, new RetryableError({ message: "slow", errorClass: "rate_limit", retryAfterMs: 45_000 }), 1, 0)
      assert.deepStrictEqual(d, {
        retry: true,
        reason: "retryable",
        delayMs: 45_000,
        errorClass: "rate_limit",
        attempt: 1,
        retryAfterMs: 45_000
      })
      const s = yield* decide(p, http(429, { headers: { "retry-after": "2" } }), 1, 0)
      assert.strictEqual(s.delayMs, 2000)
      assert.strictEqual(s.retryAfterMs, 2000)
    }))

  it.effect("an HTTP-date Retry-After is measured from Clock (TestClock)", () =>
    Effect.gen(function*() {
      const now = Date.parse("2025-03-01T12:00:00Z")
      yield* TestClock.setTime(now)
      const p = RetryPolicy.make({ maxAttempts: 3 })
      const error = http(503, { headers: new Headers({ "Retry-After": new Date(now + 12_000).toUTCString() }) })
      const d = yield* decide(p, error, 1, 0)
      assert.strictEqual(d.delayMs, 12_000)
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual((yield* decide(p, error, 1, 0)).delayMs, 7000)
    }))

  it.effect("a Retry-After beyond the total budget gives total_budget and records the server's delay", () =>
    Effect.gen(function*() {
      const p = RetryPolicy.make({ maxAttempts: 3, maxTotal: "10 seconds" })
      const d = yield* decide(p, new RetryableError({ message: "x", retryAfterMs: 20_000 }), 1, 0)
      assert.deepStrictEqual(d, {
        retry: false,
        reason: "total_budget",
        delayMs: 0,
        errorClass: "retryable",
        attempt: 1,
        retryAfterMs: 20_000
      })
    }))
})

describe("RetryPolicyFromConfig", () => {
  it("decodes a full config object", () => {
    const p = Either.getOrThrow(decodeRetryPolicyConfig({
      maxAttempts: 5,
      on: ["RetryableError"],
      retryClassified: true,
      retryUnknown: true,
      base: "500 millis",
      factor: 3,
      cap: "30 seconds",
      jitter: "equal",
      maxTotal: "2 minutes"
    }))
    assert.instanceOf(p, RetryPolicy)
    assert.strictEqual(p.maxAttempts, 5)
    assert.deepStrictEqual(p.on, ["RetryableError"])
    assert.isTrue(p.retryUnknown)
    assert.strictEqual(Duration.toMillis(p.base), 500)
    assert.strictEqual(Duration.toMillis(p.cap), 30_000)
    assert.strictEqual(Duration.toMillis(p.maxTotal!), 120_000)
    assert.strictEqual(p.jitter, "equal")
  })

  it("fills defaults for missing keys", () => {
    const p = Either.getOrThrow(decodeRetryPolicyConfig({ maxAttempts: 3 }))
    assert.deepStrictEqual(p, RetryPolicy.make({ maxAttempts: 3 }))
  })

  it("refuses a bare-number duration with a hint to write a unit", () => {
    const issues = issuesOf({ maxAttempts: 3, base: 0.5 })
    assert.strictEqual(issues.length, 1)
    assert.deepStrictEqual(issues[0]!.path, ["base"])
    assert.match(issues[0]!.message, /bare number \(0\.5\).*unit.*"500 millis"/)
  })

  it("refuses an unparseable duration, naming it", () => {
    const issues = issuesOf({ cap: "30 parsecs" })
    assert.deepStrictEqual(issues[0]!.path, ["cap"])
    assert.match(issues[0]!.message, /"30 parsecs" is not a duration/)
  })

  it("refuses unknown keys (snake_case included) with their path, and reports every problem", () => {
    const issues = issuesOf({ max_attempts: 3, maxAttempts: 0, jitter: "some" })
    const paths = issues.map((i) => i.path.join("."))
    assert.includeMembers(paths, ["max_attempts", "maxAttempts", "jitter"])
    const unknown = issues.find((i) => i.path[0] === "max_attempts")!
    assert.match(unknown.message, /unexpected/)
    const attempts = issues.find((i) => i.path[0] === "maxAttempts")!
    assert.match(attempts.message, /integer >= 1/)
  })

  it("refuses a non-object and wrong field types", () => {
    assert.isTrue(Either.isLeft(decodeRetryPolicyConfig(3)))
    assert.isTrue(Either.isLeft(decodeRetryPolicyConfig({ on: "RetryableError" })))
    assert.isTrue(Either.isLeft(decodeRetryPolicyConfig({ factor: 0.5 })))
  })

  it("encodes back to a config object that decodes to the same policy", () => {
    const p = RetryPolicy.make({ maxAttempts: 4, base: "1.5 seconds", maxTotal: "1 minute", on: ["X"] })
    const encoded = Schema.encodeSync(RetryPolicyFromConfig)(p)
    assert.strictEqual(encoded.base, "1500 millis")
    assert.strictEqual(encoded.maxTotal, "60000 millis")
    assert.deepStrictEqual(Either.getOrThrow(decodeRetryPolicyConfig(JSON.parse(JSON.stringify(encoded)))), p)
  })
})
