import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, FiberId, Schema } from "effect"
import {
  AcquireTimeout,
  ArtifactCodecError,
  classify,
  classifyCause,
  classOfStatus,
  ConfigError,
  CorruptCheckpoint,
  ErrorClass,
  errorTypeOf,
  FatalError,
  isConfigFamily,
  isErrorClass,
  isResourceFamily,
  isUnavailable,
  LeaseLeakError,
  PipelineIdentityConflict,
  PoolNotFound,
  ResourceUnavailable,
  RetryableError,
  retryableClasses,
  retryAfterOf,
  statusOf,
  StoreUnavailable
} from "../../src/domain/Errors.js"
import { parseRetryAfter } from "../../src/domain/RateLimit.js"
import { messageOf } from "../../src/domain/internal/errors.js"

/** An SDK-style HTTP error carrying its status in a given field. */
const httpError = (field: string, status: unknown): Error => Object.assign(new Error(`HTTP ${String(status)}`), {
  [field]: status
})

/** A Node.js system error such as `connect ECONNREFUSED 127.0.0.1:1`. */
const systemError = (code: string): Error => Object.assign(new Error(`connect ${code}`), { code, errno: -1 })

describe("classify: the error-class table", () => {
  const statusRows: ReadonlyArray<readonly [number, ErrorClass]> = [
    [425, "rate_limit"],
    [429, "rate_limit"],
    [408, "timeout"],
    [504, "timeout"],
    [500, "upstream"],
    [502, "upstream"],
    [503, "upstream"],
    [505, "upstream"],
    [507, "upstream"],
    [529, "upstream"],
    [400, "fatal"],
    [401, "fatal"],
    [403, "fatal"],
    [404, "fatal"],
    [409, "fatal"],
    [422, "fatal"]
  ]

  for (const [status, expected] of statusRows) {
    it(`HTTP ${status} → ${expected}`, () => {
      assert.strictEqual(classify(httpError("status", status)), expected)
      assert.strictEqual(classOfStatus(status), expected)
    })
  }

  it("statuses that say nothing fall through to the other rules", () => {
    for (const status of [200, 204, 301, 304, 501, 506, 508]) {
      assert.strictEqual(classOfStatus(status), undefined, `status ${status}`)
      assert.strictEqual(classify(httpError("status", status)), "unknown", `status ${status}`)
    }
    // a 501 from a TypeError is still an invalid-data error by name
    assert.strictEqual(classify(Object.assign(new TypeError("x"), { status: 501 })), "invalid")
  })

  it("reads every status field name", () => {
    for (const field of ["status", "statusCode", "status_code", "http_status", "code"]) {
      assert.strictEqual(classify(httpError(field, 429)), "rate_limit", field)
      assert.strictEqual(statusOf(httpError(field, 503)), 503, field)
    }
    // status given as a three-digit string
    assert.strictEqual(classify(httpError("status", "429")), "rate_limit")
    // response.status / response.statusCode, as in axios-style and fetch-wrapping SDKs
    assert.strictEqual(classify({ message: "x", response: { status: 429 } }), "rate_limit")
    assert.strictEqual(classify({ message: "x", response: { statusCode: 502 } }), "upstream")
    assert.strictEqual(classify({ message: "x", response: { status_code: 404 } }), "fatal")
    assert.strictEqual(statusOf({ response: { status: 408 } }), 408)
  })

  it("ignores non-status values in status fields", () => {
    assert.strictEqual(statusOf({ status: "ok" }), undefined)
    assert.strictEqual(statusOf({ status: 42 }), undefined)
    assert.strictEqual(statusOf({ status: 429.5 }), undefined)
    assert.strictEqual(statusOf({ code: "ECONNRESET" }), undefined)
    assert.strictEqual(statusOf("429"), undefined)
    assert.strictEqual(statusOf(null), undefined)
  })

  it("timeouts: Effect TimeoutException, TimeoutError, 408/504", () => {
    assert.strictEqual(classify(new Cause.TimeoutException("slow")), "timeout")
    const domTimeout = Object.assign(new Error("The operation timed out."), { name: "TimeoutError" })
    assert.strictEqual(classify(domTimeout), "timeout")
    assert.strictEqual(classify(new DOMException("signal timed out", "TimeoutError")), "timeout")
  })

  it("connection errors: system error codes and fetch's TypeError with cause.code", () => {
    for (const code of ["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "ENOTFOUND", "UND_ERR_SOCKET"]) {
      assert.strictEqual(classify(systemError(code)), "connection", code)
    }
    const fetchFailed = new TypeError("fetch failed", { cause: systemError("ECONNREFUSED") })
    assert.strictEqual(classify(fetchFailed), "connection")
    // errno as a string (some libraries)
    assert.strictEqual(classify({ message: "x", errno: "ECONNRESET" }), "connection")
    // an unrelated code is not a connection error
    assert.strictEqual(classify(systemError("ENOENT")), "unknown")
  })

  it("@effect/platform transport errors are connection errors", () => {
    assert.strictEqual(classify({ _tag: "RequestError", reason: "Transport", cause: new Error("boom") }), "connection")
    assert.strictEqual(
      classify({ _tag: "RequestError", reason: "Transport", cause: new Cause.TimeoutException() }),
      "timeout"
    )
  })

  it("RetryableError → retryable, or the class it carries", () => {
    assert.strictEqual(classify(new RetryableError({ message: "try again" })), "retryable")
    assert.strictEqual(classify(new RetryableError({ message: "slow down", errorClass: "rate_limit" })), "rate_limit")
    assert.strictEqual(classify(new RetryableError({ message: "x", errorClass: "upstream" })), "upstream")
  })

  it("invalid data: TypeError, RangeError, SyntaxError, Schema ParseError", () => {
    assert.strictEqual(classify(new TypeError("x is not a function")), "invalid")
    assert.strictEqual(classify(new RangeError("out of range")), "invalid")
    assert.strictEqual(classify(new SyntaxError("bad json")), "invalid")
    const parseError = Schema.decodeUnknownEither(Schema.Number)("nope")
    assert.isTrue(parseError._tag === "Left")
    if (parseError._tag === "Left") assert.strictEqual(classify(parseError.left), "invalid")
  })

  it("fatal: FatalError, config-family errors, other 4xx", () => {
    assert.strictEqual(classify(new FatalError({ message: "context window exceeded" })), "fatal")
    assert.strictEqual(classify(new ConfigError({ message: "bad" })), "fatal")
    assert.strictEqual(classify(new PoolNotFound({ pool: "llm", known: [] })), "fatal")
  })

  it("cancelled: an interrupt cause, Effect's InterruptedException, AbortError", () => {
    assert.strictEqual(classifyCause(Cause.interrupt(FiberId.make(1, 0))), "cancelled")
    assert.strictEqual(classify(new Cause.InterruptedException()), "cancelled")
    assert.strictEqual(classify(new DOMException("aborted", "AbortError")), "cancelled")
  })

  it.effect("classifyCause of a real interrupted fiber is cancelled", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Effect.interrupt)
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) assert.strictEqual(classifyCause(exit.cause), "cancelled")
    }))

  it("classifyCause classifies the failure, then the defect", () => {
    assert.strictEqual(classifyCause(Cause.fail(httpError("status", 429))), "rate_limit")
    assert.strictEqual(classifyCause(Cause.die(new TypeError("bug"))), "invalid")
    assert.strictEqual(classifyCause(Cause.empty), "unknown")
    // a failure alongside an interruption is still that failure
    const both = Cause.parallel(Cause.fail(httpError("status", 503)), Cause.interrupt(FiberId.make(1, 0)))
    assert.strictEqual(classifyCause(both), "upstream")
  })

  it("unknown: ResourceUnavailable, AcquireTimeout, plain Error, strings, anything else", () => {
    assert.strictEqual(classify(new ResourceUnavailable({ pool: "llm", message: "no free slot" })), "unknown")
    assert.strictEqual(classify(new AcquireTimeout({ pool: "llm", timeoutMs: 100 })), "unknown")
    assert.strictEqual(classify(new Error("boom")), "unknown")
    assert.strictEqual(classify("boom"), "unknown")
    assert.strictEqual(classify(42), "unknown")
    assert.strictEqual(classify(null), "unknown")
    assert.strictEqual(classify(undefined), "unknown")
    assert.strictEqual(classify({}), "unknown")
  })

  it("an explicit errorClass / error_class wins over everything", () => {
    assert.strictEqual(classify(Object.assign(new TypeError("x"), { errorClass: "upstream" })), "upstream")
    assert.strictEqual(classify({ status: 429, error_class: "fatal" }), "fatal")
    assert.strictEqual(classify(Object.assign(systemError("ECONNRESET"), { errorClass: "invalid" })), "invalid")
    // an invalid explicit class is ignored, not trusted
    assert.strictEqual(classify({ status: 429, errorClass: "sometimes" }), "rate_limit")
  })

  it("does not loop on a cause cycle", () => {
    const a: Record<string, unknown> = { message: "a" }
    const b: Record<string, unknown> = { message: "b", cause: a }
    a["cause"] = b
    assert.strictEqual(classify(a), "unknown")
  })

  it("retryableClasses are exactly the five retried-by-default classes", () => {
    assert.deepStrictEqual(
      [...retryableClasses].sort(),
      ["connection", "rate_limit", "retryable", "timeout", "upstream"]
    )
    assert.isTrue(isErrorClass("rate_limit"))
    assert.isFalse(isErrorClass("ratelimit"))
    assert.strictEqual(ErrorClass.literals.length, 9)
  })
})

describe("retryAfterOf", () => {
  const now = Date.parse("2025-01-01T00:00:00Z")
  const inTwoMinutes = new Date(now + 120_000).toUTCString()

  it("retryAfterMs in milliseconds (RetryableError)", () => {
    assert.strictEqual(retryAfterOf(new RetryableError({ message: "x", retryAfterMs: 1500 }), now), 1500)
    assert.strictEqual(retryAfterOf({ retry_after_ms: 250 }, now), 250)
  })

  it("retryAfter / retry_after as seconds (number), delta-seconds string or HTTP-date", () => {
    assert.strictEqual(retryAfterOf({ retryAfter: 2 }, now), 2000)
    assert.strictEqual(retryAfterOf({ retry_after: 0.5 }, now), 500)
    assert.strictEqual(retryAfterOf({ retryAfter: "3" }, now), 3000)
    assert.strictEqual(retryAfterOf({ retryAfter: inTwoMinutes }, now), 120_000)
    assert.strictEqual(retryAfterOf({ retryAfter: Duration.seconds(4) }, now), 4000)
  })

  it("an HTTP-date in the past means no wait", () => {
    assert.strictEqual(retryAfterOf({ retryAfter: new Date(now - 5000).toUTCString() }, now), 0)
  })

  it("a Retry-After header on a Headers object, a plain record, or response.headers", () => {
    assert.strictEqual(retryAfterOf({ headers: new Headers({ "Retry-After": "7" }) }, now), 7000)
    assert.strictEqual(retryAfterOf({ headers: { "Retry-After": "7" } }, now), 7000)
    assert.strictEqual(retryAfterOf({ headers: { "retry-after": 8 } }, now), 8000)
    assert.strictEqual(retryAfterOf({ headers: { "retry-after": ["9"] } }, now), 9000)
    assert.strictEqual(retryAfterOf({ response: { headers: new Headers({ "retry-after": "1" }) } }, now), 1000)
    assert.strictEqual(retryAfterOf({ response: { headers: { "Retry-After": inTwoMinutes } } }, now), 120_000)
  })

  it("nothing, or garbage, gives undefined", () => {
    assert.strictEqual(retryAfterOf(new Error("x"), now), undefined)
    assert.strictEqual(retryAfterOf("429", now), undefined)
    assert.strictEqual(retryAfterOf({ retryAfterMs: -1 }, now), undefined)
    assert.strictEqual(retryAfterOf({ retryAfterMs: Number.NaN }, now), undefined)
    assert.strictEqual(retryAfterOf({ headers: { "Retry-After": "soon" } }, now), undefined)
    assert.strictEqual(retryAfterOf({ headers: { "Retry-After": "-1" } }, now), undefined)
  })

  it("parseRetryAfter follows RFC 9110 (delta-seconds or HTTP-date)", () => {
    assert.strictEqual(parseRetryAfter("120", now), 120_000)
    assert.strictEqual(parseRetryAfter(" 1.5 ", now), 1500)
    assert.strictEqual(parseRetryAfter("Wed, 01 Jan 2025 00:00:30 GMT", now), 30_000)
    assert.strictEqual(parseRetryAfter("", now), undefined)
    assert.strictEqual(parseRetryAfter("-5", now), undefined)
    assert.strictEqual(parseRetryAfter("1e3", now), undefined)
  })
})

describe("family predicates", () => {
  const conflict = new PipelineIdentityConflict({
    pipelineId: "p1",
    storedSpecDigest: "a",
    specDigest: "b",
    storedSeedDigest: "s",
    seedDigest: "s"
  })
  const unavailable = new ResourceUnavailable({ pool: "llm", message: "x" })
  const timeout = new AcquireTimeout({ pool: "llm", timeoutMs: 5 })
  const notFound = new PoolNotFound({ pool: "gpu", known: ["llm"] })
  const leak = new LeaseLeakError({ taskName: "t", leaseIds: ["l1"] })

  it("isConfigFamily", () => {
    assert.isTrue(isConfigFamily(new ConfigError({ message: "x" })))
    assert.isTrue(isConfigFamily(conflict))
    assert.isFalse(isConfigFamily(unavailable))
    assert.isFalse(isConfigFamily(new Error("x")))
    assert.isFalse(isConfigFamily("ConfigError"))
  })

  it("isResourceFamily and isUnavailable", () => {
    for (const e of [unavailable, timeout, notFound, leak]) assert.isTrue(isResourceFamily(e), e._tag)
    assert.isFalse(isResourceFamily(new FatalError({ message: "x" })))
    assert.isTrue(isUnavailable(unavailable))
    assert.isTrue(isUnavailable(timeout))
    assert.isFalse(isUnavailable(notFound))
    assert.isFalse(isUnavailable(leak))
  })

  it("messages name what went wrong", () => {
    assert.include(conflict.message, "spec digest a (stored) != b")
    assert.notInclude(conflict.message, "seed digest")
    assert.include(timeout.message, "within 5 ms")
    assert.include(notFound.message, "known pools: llm")
    assert.include(leak.message, "l1")
    assert.strictEqual(messageOf(new ConfigError({ message: "bad field" })), "bad field")
    assert.strictEqual(messageOf("plain"), "plain")
    assert.strictEqual(messageOf(42), "42")
    assert.strictEqual(errorTypeOf(timeout), "AcquireTimeout")
    assert.strictEqual(errorTypeOf(new RangeError("x")), "RangeError")
    assert.strictEqual(errorTypeOf("x"), "string")
  })
})

describe("persisted errors round-trip through their Schema", () => {
  const roundTrip = <A, I>(schema: Schema.Schema<A, I>, value: A): A =>
    Schema.decodeUnknownSync(schema)(JSON.parse(JSON.stringify(Schema.encodeSync(schema)(value))))

  it("RetryableError keeps its class and delay", () => {
    const e = new RetryableError({ message: "slow down", errorClass: "rate_limit", retryAfterMs: 1200 })
    const back = roundTrip(RetryableError, e)
    assert.instanceOf(back, RetryableError)
    assert.strictEqual(back.errorClass, "rate_limit")
    assert.strictEqual(back.retryAfterMs, 1200)
    assert.strictEqual(back.message, "slow down")
    assert.strictEqual(classify(back), "rate_limit")
  })

  it("ConfigError keeps its issues; the default is an empty list", () => {
    const e = new ConfigError({
      message: "2 problems",
      issues: [{ path: "pools.llm.capacity", message: "must be >= 1", suggestion: "capacity: 1" }, {
        path: "retry.on",
        message: "unknown"
      }]
    })
    const back = roundTrip(ConfigError, e)
    assert.deepStrictEqual(back.issues, e.issues)
    assert.deepStrictEqual(new ConfigError({ message: "x" }).issues, [])
  })

  it("every tagged error decodes to its own class", () => {
    const samples = [
      [AcquireTimeout, new AcquireTimeout({ pool: "p", timeoutMs: 10 })],
      [ArtifactCodecError, new ArtifactCodecError({ codec: "json", typeName: "json", message: "bad" })],
      [CorruptCheckpoint, new CorruptCheckpoint({ pipelineId: "p", message: "cursor past the end" })],
      [PipelineIdentityConflict, conflictSample()],
      [StoreUnavailable, new StoreUnavailable({ message: "locked", path: "/tmp/x.db" })]
    ] as const
    for (const [schema, value] of samples) {
      const back = roundTrip(schema as unknown as Schema.Schema<unknown, unknown>, value)
      assert.instanceOf(back, schema as unknown as new(...args: Array<never>) => unknown)
      assert.deepStrictEqual(
        Schema.encodeSync(schema as unknown as Schema.Schema<unknown, unknown>)(back),
        Schema.encodeSync(schema as unknown as Schema.Schema<unknown, unknown>)(value)
      )
    }
  })

  it("decoding refuses a value of another tag", () => {
    const encoded = Schema.encodeSync(FatalError)(new FatalError({ message: "x" }))
    assert.throws(() => Schema.decodeUnknownSync(RetryableError)(encoded))
  })
})

function conflictSample(): PipelineIdentityConflict {
  return new PipelineIdentityConflict({
    pipelineId: "p",
    storedSpecDigest: "a",
    specDigest: "a",
    storedSeedDigest: "s1",
    seedDigest: "s2"
  })
}
