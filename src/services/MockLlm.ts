/**
 * `MockLlm`: a deterministic, OpenAI-compatible chat-completions server on loopback, for tests,
 * demos and benchmarks (`assay mock-llm`).
 *
 * One HTTP server hosts several named **endpoints**, each under its own path prefix
 * (`/e/<name>/v1/...`; the first endpoint is also served at `/v1/...`). Each endpoint has a
 * {@link EndpointProfile}: a per-key token bucket (429 + `Retry-After` when empty), a lognormal
 * latency with a slow tail, a background error rate, error storms in time windows, a
 * "throttle for the first N seconds" window, hang rules (accept and never answer), a maximum
 * concurrency, and answer noise. Its "model" classifies the email in a spam/ham prompt with
 * {@link scoreEmail}, a fixed weighted-feature scorer.
 *
 * **Model profiles** ({@link ModelProfile}, {@link ModelCatalog}, {@link builtinModels}), when
 * given, are selected by a request's `model`: each agrees with the scorer with its own accuracy
 * (raised by a detailed prompt or examples, fixed per (seed, model, input) by a hash), adds its
 * own latency, has its own rate limit and context window, and prices its tokens (`usage.cost`
 * in USD; prices also in `GET /v1/models`). Other model names keep the endpoint's default
 * behaviour, or get a 404 `model_not_found` when the catalog says `unknownModel: "reject"`.
 *
 * Determinism: every random draw of a request comes from an Effect `Random` seeded with the
 * digest of (profile seed, endpoint, request fingerprint, per-key request counter), and time comes
 * from `Clock` (so `TestClock` drives storms, buckets and latency). The same request sequence
 * therefore gets the same answers, statuses and latencies.
 *
 * **Judge prompts** (the `judge` task's, recognised by their `--- rubric ---` and
 * `--- response L ---` blocks) are answered with a JSON score object: with a `reference`
 * evidence block, each criterion's max when the response contains it and its min otherwise;
 * without one, a score fixed by a hash of the response. An endpoint's `judge` profile
 * ({@link JudgeAnswers}) answers some of them badly, for the judge's format repair.
 *
 * Every request it answers is kept in an in-memory log (`GET /_mock/log`) and, optionally,
 * appended as one JSON line to a file. The raw API key is never logged, only its digest.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type { PlatformError } from "@effect/platform/Error"
import type { ServeError } from "@effect/platform/HttpServerError"
import { Context, Duration, Effect, Either, Layer, Option, ParseResult, Random, Schema } from "effect"
import type { Scope } from "effect"
import { createServer } from "node:http"
import { ConfigError } from "../domain/Errors.js"
import { canonicalJsonUnsafe, digest } from "../domain/Json.js"
import { judgeAnswerOf, judgeRequestOf, malformedJudgeAnswer } from "./internal/mockJudge.js"
import { emailSection, errorBody, throttled, unknownModelBody } from "./internal/mockLlm.js"
import {
  type Bucket,
  answerOf,
  costUsd,
  makeBucket,
  promptStyleOf,
  styleName,
  takeAll
} from "./internal/mockModels.js"

// ---------------------------------------------------------------------------------------------
// Profile
// ---------------------------------------------------------------------------------------------

const Rate = Schema.Number.pipe(Schema.between(0, 1))
const NonNegative = Schema.Number.pipe(Schema.nonNegative())
const HttpStatus = Schema.Int.pipe(Schema.between(400, 599))

/**
 * The latency model of an endpoint: a lognormal distribution given by its median and its 95th
 * percentile (ms), plus a slow tail: with probability `slowRate` a request instead takes
 * between `slowMs` and `2 × slowMs` (uniform). `p95Ms` defaults to twice the median.
 *
 * Formula: for a lognormal with median m and 95th percentile p, μ = ln m and
 * σ = (ln p − ln m) / z₀.₉₅ with z₀.₉₅ = 1.6448536 (the standard normal quantile).
 *
 * @since 0.1.0
 * @category models
 */
export class LatencyProfile extends Schema.Class<LatencyProfile>("LatencyProfile")({
  medianMs: Schema.optionalWith(NonNegative, { default: () => 20 }),
  p95Ms: Schema.optional(NonNegative),
  slowRate: Schema.optionalWith(Rate, { default: () => 0 }),
  slowMs: Schema.optionalWith(NonNegative, { default: () => 2000 })
}) {}

/**
 * An error storm: between `fromS` and `toS` seconds after server start (half-open window),
 * each request is answered with `status` with probability `rate` (default 1). A 429 storm
 * sends `Retry-After: retryAfterS` (default: the seconds left in the window, at least 1).
 *
 * @since 0.1.0
 * @category models
 */
export class Storm extends Schema.Class<Storm>("Storm")({
  fromS: NonNegative,
  toS: NonNegative,
  status: HttpStatus,
  rate: Schema.optionalWith(Rate, { default: () => 1 }),
  retryAfterS: Schema.optional(Schema.Int.pipe(Schema.positive()))
}) {}

/**
 * How a 429 of the mock names its wait (each is what some real provider sends):
 *
 * - `retry-after` (default): `Retry-After: <seconds>`;
 * - `retry-after-ms`: `retry-after-ms: <ms>` only (OpenAI, Azure);
 * - `http-date`: `Retry-After: <IMF-fixdate>`;
 * - `epoch`: `Retry-After: <Unix seconds>` (a misbehaving server: an absolute time where a
 *   delay belongs);
 * - `reset-requests` / `reset-tokens`: no Retry-After; `x-ratelimit-reset-requests` (or
 *   `-tokens`) as a Go duration (`3s`, `6m0s`) with `x-ratelimit-remaining-requests` (or
 *   `-tokens`) `0` (case C8);
 * - `anthropic`: `anthropic-ratelimit-requests-reset` (RFC 3339) with its remaining count `0`;
 * - `body-message`: nothing in the headers, "Please try again in <N>s." in the error message
 *   (OpenAI, Groq);
 * - `body-field`: nothing in the headers, `error.retry_after: <seconds>` in the body;
 * - `google`: nothing in the headers, Gemini's `error.details[].retryDelay: "<N>s"` with
 *   `status: "RESOURCE_EXHAUSTED"`;
 * - `none`: no hint at all (the client backs off by its retry policy).
 *
 * @since 0.1.0
 * @category models
 */
export const RateLimitSignal = Schema.Literal(
  "retry-after",
  "retry-after-ms",
  "http-date",
  "epoch",
  "reset-requests",
  "reset-tokens",
  "anthropic",
  "body-message",
  "body-field",
  "google",
  "none"
)

/**
 * @since 0.1.0
 * @category models
 */
export type RateLimitSignal = typeof RateLimitSignal.Type

/**
 * "Throttle for the first N seconds" (cases C5, C8, C9): during the first `forS` seconds after
 * server start (with `fromFirstRequest`, after the endpoint's first chat request, so that a
 * client's start-up time does not eat the window) every request (or only those whose raw key
 * is in `keys`) is answered 429,
 * naming a wait of `retryAfterS` seconds (default 2; 86400 rehearses "a day's pause") in the
 * form `signal` (default `retry-after`; see {@link RateLimitSignal}).
 *
 * @since 0.1.0
 * @category models
 */
export class Throttle extends Schema.Class<Throttle>("Throttle")({
  forS: Schema.Number.pipe(Schema.positive()),
  retryAfterS: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 2 }),
  keys: Schema.optional(Schema.Array(Schema.String)),
  signal: Schema.optionalWith(RateLimitSignal, { default: () => "retry-after" as const }),
  fromFirstRequest: Schema.optionalWith(Schema.Boolean, { default: () => false })
}) {}

/**
 * Errors inside a 200 (case C10; what OpenRouter and other gateways do when the provider behind
 * them fails): the first `first` chat requests of the endpoint (all keys together), and
 * afterwards each request with probability `rate` (default 0), are answered HTTP 200 with
 * body `{"error":{"message":message,"code":code}}` (defaults: "provider error", 502).
 *
 * @since 0.1.0
 * @category models
 */
export class ErrorIn200 extends Schema.Class<ErrorIn200>("ErrorIn200")({
  first: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 0 }),
  rate: Schema.optionalWith(Rate, { default: () => 0 }),
  code: Schema.optionalWith(HttpStatus, { default: () => 502 }),
  message: Schema.optionalWith(Schema.String, { default: () => "provider error" })
}) {}

/**
 * The content filter (case C10): a request whose text contains `contains` (when given), or
 * each request with probability `rate` (when given), is answered HTTP 200 with
 * `finish_reason: "content_filter"`, `message.content: null` and Azure's
 * `content_filter_results` (`hate` filtered).
 *
 * @since 0.1.0
 * @category models
 */
export class ContentFilter extends Schema.Class<ContentFilter>("ContentFilter")({
  contains: Schema.optional(Schema.String),
  rate: Schema.optional(Rate)
}) {}

/**
 * A hang rule (case C4): a matching request is accepted and never answered (the connection
 * stays open until the client gives up or the server stops). All given conditions must hold:
 * `contains` (a substring of the concatenated message text), `nth` (the per-key request
 * counter, 1-based), `keys` (raw keys), `rate` (probability, drawn from the seeded `Random`).
 *
 * @since 0.1.0
 * @category models
 */
export class HangRule extends Schema.Class<HangRule>("HangRule")({
  contains: Schema.optional(Schema.String),
  nth: Schema.optional(Schema.Int.pipe(Schema.positive())),
  keys: Schema.optional(Schema.Array(Schema.String)),
  rate: Schema.optional(Rate)
}) {}

/**
 * How answers are worded: with probability `noiseRate` the label is wrapped in words
 * ("Label: SPAM", "I think this is ham."), with probability `invalidRate` the answer names
 * no label at all (to exercise the `invalid` error class). With `random: true` every answer is
 * instead a fresh token `random-<16 hex>` drawn from the request's seeded draw (which counts
 * the key's requests), so two calls with the same prompt get different answers: a model
 * "answering randomly", to check that repeats stay independent samples and that a call cache
 * serves stored answers (deterministic for a seed and a request order).
 *
 * @since 0.1.0
 * @category models
 */
export class AnswerProfile extends Schema.Class<AnswerProfile>("AnswerProfile")({
  noiseRate: Schema.optionalWith(Rate, { default: () => 0 }),
  invalidRate: Schema.optionalWith(Rate, { default: () => 0 }),
  random: Schema.optionalWith(Schema.Boolean, { default: () => false })
}) {}

/**
 * How the endpoint answers judge prompts (the `judge` task's requests, recognised by their
 * `--- rubric ---` and `--- response L ---` blocks): the first `invalidFirst` judge requests
 * the endpoint accepts (past its rate limits; repair requests count), and then each with
 * probability `invalidRate`, get a malformed answer (prose, no JSON object), to exercise the
 * judge's format repair and its typed failure. Every other judge request gets a JSON score
 * object (see docs/mock-llm.md, "Judge prompts").
 *
 * @since 0.7.0
 * @category models
 */
export class JudgeAnswers extends Schema.Class<JudgeAnswers>("JudgeAnswers")({
  invalidFirst: Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 0 }),
  invalidRate: Schema.optionalWith(Rate, { default: () => 0 })
}) {}

/**
 * One step of an endpoint's limit schedule: from `atS` seconds after server start on, the
 * per-key rate is `rps` requests per second (bucket size: the endpoint's `burst`, else
 * `max(1, ceil(rps))`). A provider raising or lowering a key's limit during the day.
 *
 * @since 0.8.0
 * @category models
 */
export class RateStep extends Schema.Class<RateStep>("RateStep")({
  atS: NonNegative,
  rps: Schema.Number.pipe(Schema.positive())
}) {}

/**
 * Which rate-limit headers an endpoint sends on every chat answer (200 and 429), from its
 * per-key bucket, which then holds a minute of requests (`rps × 60`, refilled at `rps`; the
 * endpoint's `burst` does not apply), as the providers' per-minute limits do: `openai`:
 * `x-ratelimit-limit-requests` (requests per minute at the rate in force),
 * `x-ratelimit-remaining-requests` (whole requests left of them) and
 * `x-ratelimit-reset-requests` (a Go duration such as `1.5s`: the time until the bucket is
 * full again), as OpenAI documents them; `anthropic`: `anthropic-ratelimit-requests-limit`,
 * `-remaining` and `-reset` (RFC 3339 time), as Anthropic does; `none` (default): nothing.
 *
 * @since 0.8.0
 * @category models
 */
export const RateLimitHeaders = Schema.Literal("none", "openai", "anthropic")

/**
 * @since 0.8.0
 * @category models
 */
export type RateLimitHeaders = typeof RateLimitHeaders.Type

/**
 * How an endpoint's token-bucket 429 names its wait (what different providers send when a
 * key's limit is spent): `retry-after` (default): `Retry-After` in whole seconds until the next
 * token, at least 1; `retry-after-ms`: only `retry-after-ms`, the exact milliseconds until the
 * next token (OpenAI, Azure); `none`: a bare 429 with no hint (the client backs off by its own
 * policy). The `rateLimitHeaders`, when on, are sent in every case.
 *
 * @since 0.12.0
 * @category models
 */
export const BucketSignal = Schema.Literal("retry-after", "retry-after-ms", "none")

/**
 * @since 0.12.0
 * @category models
 */
export type BucketSignal = typeof BucketSignal.Type

/**
 * The profile of one endpoint.
 *
 * - `name`: path segment (`/e/<name>/v1`), lowercase letters, digits, `-`, `_`.
 * - `model`: the model id listed by `GET /v1/models` (requests may name any model; it is echoed).
 * - `rps` / `burst`: per-key token bucket, requests per second and bucket size (default
 *   `max(1, ceil(rps))`; with `rateLimitHeaders` a minute of requests); no `rps` means unlimited.
 * - `latency`, `errorRate` (probability of a background error, status drawn from
 *   `errorStatuses`, default [500, 503]), `storms`, `throttle`, `hang`, `errorIn200`,
 *   `contentFilter`, `answers`, `judge` ({@link JudgeAnswers}).
 * - `maxConcurrency`: requests in progress on this endpoint beyond it are answered 429 with
 *   `Retry-After: 1`.
 * - `usage`: `false` leaves `usage` out of every answer (as some servers do), so clients
 *   estimate the tokens (default `true`).
 * - `rpsSchedule`: the per-key rate changing over time ({@link RateStep}s, in `atS` order;
 *   before the first step: `rps`, unlimited when absent). A hidden limit that rises or falls
 *   mid-run.
 * - `rateLimitHeaders`: the `x-ratelimit-*` (or `anthropic-ratelimit-*`) headers of the
 *   per-key bucket on every answer ({@link RateLimitHeaders}; default `none`).
 * - `rateLimitSignal`: how the bucket's 429 names its wait ({@link BucketSignal}; default
 *   `retry-after` in whole seconds).
 *
 * @since 0.1.0
 * @category models
 */
export class EndpointProfile extends Schema.Class<EndpointProfile>("EndpointProfile")({
  name: Schema.String.pipe(Schema.pattern(/^[a-z0-9][a-z0-9_-]*$/)),
  model: Schema.optionalWith(Schema.String, { default: () => "mock-spam-1" }),
  rps: Schema.optional(Schema.Number.pipe(Schema.positive())),
  burst: Schema.optional(Schema.Int.pipe(Schema.positive())),
  latency: Schema.optionalWith(LatencyProfile, { default: () => LatencyProfile.make({}) }),
  errorRate: Schema.optionalWith(Rate, { default: () => 0 }),
  errorStatuses: Schema.optionalWith(Schema.NonEmptyArray(HttpStatus), { default: () => [500, 503] as const }),
  storms: Schema.optionalWith(Schema.Array(Storm), { default: () => [] }),
  throttle: Schema.optional(Throttle),
  hang: Schema.optionalWith(Schema.Array(HangRule), { default: () => [] }),
  errorIn200: Schema.optional(ErrorIn200),
  contentFilter: Schema.optional(ContentFilter),
  maxConcurrency: Schema.optional(Schema.Int.pipe(Schema.positive())),
  answers: Schema.optionalWith(AnswerProfile, { default: () => AnswerProfile.make({}) }),
  judge: Schema.optionalWith(JudgeAnswers, { default: () => JudgeAnswers.make({}) }),
  usage: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  rpsSchedule: Schema.optional(Schema.Array(RateStep).pipe(
    Schema.filter((steps) => {
      for (let i = 1; i < steps.length; i++) {
        if (steps[i]!.atS <= steps[i - 1]!.atS) return { path: [i, "atS"], message: "steps must be in increasing atS order" }
      }
      return true
    })
  )),
  rateLimitHeaders: Schema.optionalWith(RateLimitHeaders, { default: () => "none" as const }),
  rateLimitSignal: Schema.optionalWith(BucketSignal, { default: () => "retry-after" as const })
}) {}

/**
 * The size of an endpoint's per-key bucket at the rate `rps`: with `rateLimitHeaders` (`openai`,
 * `anthropic`) a minute of requests, `max(1, round(rps × 60))`, as those providers' limits are
 * per minute and their headers count down within it (`burst` does not apply); else `burst`,
 * default `max(1, ⌈rps⌉)`. Issue 18 trial (F1): the headers named a per-minute limit while
 * `remaining` counted a bucket of a few requests, so the refill they imply read ~3,800 req/s
 * against 8 and `adaptive` was never paced by them.
 *
 * @internal
 */
const bucketSize = (ep: EndpointProfile, rps: number): number =>
  ep.rateLimitHeaders === "none" ? ep.burst ?? Math.max(1, Math.ceil(rps)) : Math.max(1, Math.round(rps * 60))

/**
 * The per-key rate of `ep` at `elapsedS` seconds after server start: the last step of its
 * `rpsSchedule` that has begun, else its `rps` (`undefined`: unlimited).
 *
 * @since 0.8.0
 * @category utils
 */
export const rpsAt = (ep: Pick<EndpointProfile, "rps" | "rpsSchedule">, elapsedS: number): number | undefined => {
  let rps = ep.rps
  for (const step of ep.rpsSchedule ?? []) if (step.atS <= elapsedS) rps = step.rps
  return rps
}

/**
 * Parses a limit schedule written `RPS@TIME,RPS@TIME,...` (`10@0s,25@30s`: 10 requests/s
 * from the start, 25 from second 30; a time is a number with its unit, `s`, `ms` or `m`, as
 * every duration flag takes one: `25@30` is refused, not read as seconds), as `--rps-schedule`
 * takes it. Returns the steps, or a message naming what is wrong.
 *
 * @since 0.8.0
 * @category parsing
 */
export const parseRpsSchedule = (text: string): Either.Either<ReadonlyArray<RateStep>, string> => {
  const steps: Array<RateStep> = []
  for (const part of text.split(",").map((p) => p.trim()).filter((p) => p !== "")) {
    const bare = /^\d+(?:\.\d+)?@(\d+(?:\.\d+)?)$/.exec(part)
    if (bare !== null) {
      return Either.left(`"${part}": the time ${bare[1]} has no unit; write ${bare[1]}s, ${bare[1]}ms or ${bare[1]}m`)
    }
    const m = /^(\d+(?:\.\d+)?)@(\d+(?:\.\d+)?)(ms|s|m)$/.exec(part)
    if (m === null) return Either.left(`"${part}" is not RPS@TIME (e.g. 10@0s, 25@30s)`)
    const rps = Number(m[1])
    const t = Number(m[2])
    const atS = m[3] === "ms" ? t / 1000 : m[3] === "m" ? t * 60 : t
    if (!(rps > 0)) return Either.left(`"${part}": the rate must be > 0`)
    if (steps.length > 0 && atS <= steps[steps.length - 1]!.atS) return Either.left(`"${part}": times must increase`)
    steps.push(RateStep.make({ atS, rps }))
  }
  if (steps.length === 0) return Either.left("no step given (e.g. 10@0s,25@30s)")
  return Either.right(steps)
}

/**
 * A whole mock server profile: the seed of every random draw and the endpoints (at least one,
 * unique names). This is the format of the `--profile` JSON file.
 *
 * @since 0.1.0
 * @category models
 */
export class MockProfile extends Schema.Class<MockProfile>("MockProfile")({
  seed: Schema.optionalWith(Schema.Int, { default: () => 0 }),
  endpoints: Schema.NonEmptyArray(EndpointProfile).pipe(
    Schema.filter((eps) => {
      const seen = new Set<string>()
      for (const [i, e] of eps.entries()) {
        if (seen.has(e.name)) return { path: [i, "name"], message: `duplicate endpoint name "${e.name}"` }
        seen.add(e.name)
      }
      return true
    })
  )
}) {}

/**
 * The three endpoints of the spam example's pool, in order: `fast` (fast but flaky: 30 ms
 * median, 8 % 5xx, a 503 storm from 20 s to 25 s), `steady` (slow but steady: 400 ms median,
 * no errors, at most 4 concurrent requests), `limited` (rate-limited: 5 requests/s per key,
 * burst 5, 80 ms median). Used for `--endpoints N` (cycled, with a numeric suffix past 3).
 *
 * @since 0.1.0
 * @category constructors
 */
export const presetEndpoints = (n: number): ReadonlyArray<EndpointProfile> => {
  const presets = [
    EndpointProfile.make({
      name: "fast",
      latency: LatencyProfile.make({ medianMs: 30, p95Ms: 90, slowRate: 0.01, slowMs: 1500 }),
      errorRate: 0.08,
      storms: [Storm.make({ fromS: 20, toS: 25, status: 503, rate: 0.7 })],
      answers: AnswerProfile.make({ noiseRate: 0.2, invalidRate: 0.01 })
    }),
    EndpointProfile.make({
      name: "steady",
      latency: LatencyProfile.make({ medianMs: 400, p95Ms: 700 }),
      maxConcurrency: 4,
      answers: AnswerProfile.make({ noiseRate: 0.05 })
    }),
    EndpointProfile.make({
      name: "limited",
      rps: 5,
      burst: 5,
      latency: LatencyProfile.make({ medianMs: 80, p95Ms: 200 })
    })
  ] as const
  return Array.from({ length: n }, (_, i) => {
    const base = presets[i % 3]!
    return i < 3 ? base : EndpointProfile.make({ ...base, name: `${base.name}-${Math.floor(i / 3) + 1}` })
  })
}

// `Schema.optional` fields are unions with `undefined`, so a bad value also yields an
// "Expected undefined" issue for the field and each parent; those only add noise.
const formatIssues = (e: ParseResult.ParseError) =>
  ParseResult.ArrayFormatter.formatErrorSync(e).filter((i, _, all) =>
    !(i.message.startsWith("Expected undefined") && all.some((o) => !o.message.startsWith("Expected undefined")))
  ).map((i) => ({
    path: i.path.length === 0 ? "$" : i.path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("").replace(/^\./, ""),
    message: i.message
  }))

/**
 * Decodes a profile from unknown JSON data (excess properties are errors). Fails with a
 * {@link ConfigError} listing every problem with its field path (e.g. `endpoints[0].rps`).
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeProfile = (input: unknown): Effect.Effect<MockProfile, ConfigError> =>
  Schema.decodeUnknown(MockProfile, { errors: "all", onExcessProperty: "error" })(input).pipe(
    Effect.mapError((e) => {
      const issues = formatIssues(e)
      return new ConfigError({
        message: `invalid mock-llm profile: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    })
  )

/**
 * Reads and decodes a profile JSON file. Fails with a {@link ConfigError} (unreadable file,
 * invalid JSON, or schema problems with their field paths).
 *
 * @since 0.1.0
 * @category decoding
 */
export const readProfileFile = (path: string): Effect.Effect<MockProfile, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(path).pipe(
      Effect.mapError((e) => new ConfigError({ message: `cannot read mock-llm profile ${path}: ${e.message}` }))
    )
    const json = yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) => new ConfigError({ message: `mock-llm profile ${path} is not JSON: ${String(e)}` })
    })
    return yield* decodeProfile(json)
  })

// ---------------------------------------------------------------------------------------------
// Model profiles
// ---------------------------------------------------------------------------------------------

/**
 * The latency a model profile adds to its endpoint's: `baseMs + U·jitterMs + perKTokensMs ×
 * (prompt + completion tokens) / 1000` milliseconds, with U uniform in [0, 1) drawn from the
 * request's seeded `Random`; slept on `Clock` (so `TestClock` drives it). All default to 0.
 *
 * @since 0.1.0
 * @category models
 */
export class ModelLatency extends Schema.Class<ModelLatency>("ModelLatency")({
  baseMs: Schema.optionalWith(NonNegative, { default: () => 0 }),
  jitterMs: Schema.optionalWith(NonNegative, { default: () => 0 }),
  perKTokensMs: Schema.optionalWith(NonNegative, { default: () => 0 })
}) {}

/**
 * What a model profile charges, in US dollars per 1,000 tokens: `promptPer1k` for prompt
 * tokens, `completionPer1k` for completion tokens. Both default to 0.
 *
 * @since 0.1.0
 * @category models
 */
export class ModelPricing extends Schema.Class<ModelPricing>("ModelPricing")({
  promptPer1k: Schema.optionalWith(NonNegative, { default: () => 0 }),
  completionPer1k: Schema.optionalWith(NonNegative, { default: () => 0 })
}) {}

/**
 * A model profile's rate limit, per (endpoint, API key, model): `rps` requests per second
 * (bucket size `burst`, default `max(1, ⌈rps⌉)`) and/or `rpm` requests per minute (bucket size
 * `rpm`, refilled at `rpm / 60` per second). A request needs a token from every given bucket;
 * otherwise it is answered 429 with `Retry-After` = the seconds until every bucket has one.
 *
 * @since 0.1.0
 * @category models
 */
export class ModelRateLimit extends Schema.Class<ModelRateLimit>("ModelRateLimit")({
  rps: Schema.optional(Schema.Number.pipe(Schema.positive())),
  rpm: Schema.optional(Schema.Number.pipe(Schema.positive())),
  burst: Schema.optional(Schema.Int.pipe(Schema.positive()))
}) {}

/**
 * How much a prompt's style helps a model profile, as the fraction of its remaining error
 * removed: `instructions` for a detailed prompt (at least 50 words of instructions outside the
 * email), `examples` for a prompt with examples (an assistant turn before the last user
 * message, or the word "example(s)" in the instructions). Defaults 0.3 and 0.2.
 *
 * @since 0.1.0
 * @category models
 */
export class PromptGains extends Schema.Class<PromptGains>("PromptGains")({
  instructions: Schema.optionalWith(Rate, { default: () => 0.3 }),
  examples: Schema.optionalWith(Rate, { default: () => 0.2 })
}) {}

/**
 * A model profile of the mock, selected by a request's `model` field.
 *
 * - `name`: the model id clients send (`[A-Za-z0-9][A-Za-z0-9._:/-]*`, e.g. `small`,
 *   `org/model-7b`; a name with `/` is listed by `GET /v1/models` but cannot be retrieved
 *   by `GET /v1/models/<id>`).
 * - `accuracy`: the probability (0–1) that the answer agrees with the {@link scoreEmail}
 *   label for a terse prompt; otherwise it names the other label. Which inputs it gets wrong
 *   is fixed by a hash of (seed, name, input), so it is the same on every run, at any
 *   concurrency and for every prompt; a better prompt (see {@link PromptGains}) only turns
 *   wrong answers right. Accuracy against true labels is therefore at most the scorer's.
 * - `promptGains`: see {@link PromptGains}.
 * - `chattiness`: the probability (0–1) of a sentence instead of a bare label when the prompt
 *   does not ask for one word (more completion tokens); default 0.
 * - `invalidRate`: the probability of an answer naming no label; default 0.
 * - `latency`, `pricing`, `rateLimit`: see {@link ModelLatency}, {@link ModelPricing},
 *   {@link ModelRateLimit}.
 * - `maxContext`: tokens; a request whose prompt tokens plus `max_tokens` exceed it is answered
 *   400 `context_length_exceeded`. No limit when absent.
 *
 * @since 0.1.0
 * @category models
 */
export class ModelProfile extends Schema.Class<ModelProfile>("ModelProfile")({
  name: Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9][A-Za-z0-9._:/-]*$/)),
  accuracy: Rate,
  promptGains: Schema.optionalWith(PromptGains, { default: () => PromptGains.make({}) }),
  chattiness: Schema.optionalWith(Rate, { default: () => 0 }),
  invalidRate: Schema.optionalWith(Rate, { default: () => 0 }),
  latency: Schema.optionalWith(ModelLatency, { default: () => ModelLatency.make({}) }),
  pricing: Schema.optionalWith(ModelPricing, { default: () => ModelPricing.make({}) }),
  rateLimit: Schema.optional(ModelRateLimit),
  maxContext: Schema.optional(Schema.Int.pipe(Schema.positive()))
}) {}

/**
 * What the mock does with a request whose `model` names no profile (and is not its endpoint's
 * own `model`): `reject` answers 404 `model_not_found` naming the known models; `default`
 * answers it with the endpoint's default behaviour (any model name accepted and echoed, as
 * without profiles).
 *
 * @since 0.1.0
 * @category models
 */
export const UnknownModel = Schema.Literal("reject", "default")

/**
 * @since 0.1.0
 * @category models
 */
export type UnknownModel = typeof UnknownModel.Type

/**
 * The model profiles of a server: `models` (at least one, unique names) and the policy for
 * other model names, `unknownModel` (default `reject`). The format of `assay mock-llm --models
 * FILE` (JSON, YAML or TOML).
 *
 * @since 0.1.0
 * @category models
 */
export class ModelCatalog extends Schema.Class<ModelCatalog>("ModelCatalog")({
  models: Schema.NonEmptyArray(ModelProfile).pipe(
    Schema.filter((ms) => {
      const seen = new Set<string>()
      for (const [i, m] of ms.entries()) {
        if (seen.has(m.name)) return { path: [i, "name"], message: `duplicate model name "${m.name}"` }
        seen.add(m.name)
      }
      return true
    })
  ),
  unknownModel: Schema.optionalWith(UnknownModel, { default: () => "reject" as const })
}) {}

/**
 * The built-in model profiles, in order of price:
 *
 * | name | accuracy | price / 1k prompt, completion (USD) | latency | rate limit | context |
 * | --- | --- | --- | --- | --- | --- |
 * | `small` | 0.80 | 0.00015, 0.0006 | 40 ms + U·40 ms + 20 ms/1k tokens | 50 rps | 8,192 |
 * | `medium` | 0.90 | 0.0006, 0.0024 | 150 ms + U·100 ms + 40 ms/1k tokens | 20 rps | 32,768 |
 * | `large` | 0.97 | 0.0025, 0.01 | 400 ms + U·300 ms + 80 ms/1k tokens | 10 rps | 128,000 |
 *
 * `small` gains the most from a better prompt (instructions 0.4, examples 0.3) and is the
 * chattiest (0.3); `medium` 0.3 / 0.2, chattiness 0.15; `large` 0.25 / 0.15, chattiness 0.05.
 * `assay mock-llm` serves them unless `--models FILE` is given, with `unknownModel: "default"`
 * (any other model name keeps the endpoint's default behaviour).
 *
 * @since 0.1.0
 * @category constructors
 */
export const builtinModels: ModelCatalog = ModelCatalog.make({
  unknownModel: "default",
  models: [
    ModelProfile.make({
      name: "small",
      accuracy: 0.8,
      promptGains: PromptGains.make({ instructions: 0.4, examples: 0.3 }),
      chattiness: 0.3,
      latency: ModelLatency.make({ baseMs: 40, jitterMs: 40, perKTokensMs: 20 }),
      pricing: ModelPricing.make({ promptPer1k: 0.00015, completionPer1k: 0.0006 }),
      rateLimit: ModelRateLimit.make({ rps: 50 }),
      maxContext: 8192
    }),
    ModelProfile.make({
      name: "medium",
      accuracy: 0.9,
      promptGains: PromptGains.make({ instructions: 0.3, examples: 0.2 }),
      chattiness: 0.15,
      latency: ModelLatency.make({ baseMs: 150, jitterMs: 100, perKTokensMs: 40 }),
      pricing: ModelPricing.make({ promptPer1k: 0.0006, completionPer1k: 0.0024 }),
      rateLimit: ModelRateLimit.make({ rps: 20 }),
      maxContext: 32768
    }),
    ModelProfile.make({
      name: "large",
      accuracy: 0.97,
      promptGains: PromptGains.make({ instructions: 0.25, examples: 0.15 }),
      chattiness: 0.05,
      latency: ModelLatency.make({ baseMs: 400, jitterMs: 300, perKTokensMs: 80 }),
      pricing: ModelPricing.make({ promptPer1k: 0.0025, completionPer1k: 0.01 }),
      rateLimit: ModelRateLimit.make({ rps: 10 }),
      maxContext: 128000
    })
  ]
})

/**
 * Decodes a model catalog from unknown data (excess properties are errors). Fails with a
 * {@link ConfigError} listing every problem with its field path (e.g. `models[1].accuracy`).
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeModelCatalog = (input: unknown): Effect.Effect<ModelCatalog, ConfigError> =>
  Schema.decodeUnknown(ModelCatalog, { errors: "all", onExcessProperty: "error" })(input).pipe(
    Effect.mapError((e) => {
      const issues = formatIssues(e)
      return new ConfigError({
        message: `invalid mock-llm model profiles: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    })
  )

// ---------------------------------------------------------------------------------------------
// Scorer
// ---------------------------------------------------------------------------------------------

const spamTerms: ReadonlyArray<readonly [RegExp, number]> = [
  [/\bfree\b/g, 0.6],
  [/\b(?:click|call) (?:here|now|below)\b/g, 1.5],
  [/\b(?:remove|unsubscribe|opt[- ]?out)\b/g, 0.7],
  [/\b(?:guarantee[ds]?|risk[- ]free|no obligation|100%)/g, 1.0],
  [/\b(?:money|cash|income|earn|profit|dollars|million)\b/g, 0.6],
  [/\b(?:credit|mortgage|loan|debt|refinance|insurance|rates?)\b/g, 0.5],
  [/\b(?:offer|order|buy|sale|save|discount|cheap|price|bonus)\b/g, 0.35],
  [/\b(?:limited time|act now|urgent|immediately|today only|don'?t miss|hurry)\b/g, 1.2],
  [/\b(?:winner|won|prize|congratulations|selected|lottery)\b/g, 0.9],
  [/\b(?:viagra|pills?|weight loss|diet|herbal|enlarge\w*|sex\w*|adult)\b/g, 1.2],
  [/\b(?:dear (?:friend|sir|madam)|valued customer)\b/g, 1.5],
  [/\b(?:investment|business opportunity|marketing|e-?mail list|bulk e-?mail)\b/g, 0.8],
  [/\$\s?\d/g, 0.5],
  [/!{2,}/g, 0.8]
]

const hamTerms: ReadonlyArray<readonly [RegExp, number]> = [
  [/\bwrote:/g, 1.8],
  [/^>/gm, 0.3],
  [/\b(?:patch|bug|kernel|compile[rd]?|package|rpm|cvs|perl|python|linux|debian|config\w*|script)\b/g, 0.35],
  [/\b(?:thanks|cheers|regards|i think|i'?m|we'?re|anyone)\b/g, 0.25],
  [/\b(?:list|mailing list)\b.*\b(?:archive|digest|sourceforge)\b/g, 0.8]
]

const countCapped = (re: RegExp, text: string, cap: number): number => {
  let n = 0
  re.lastIndex = 0
  while (n < cap && re.exec(text) !== null) n++
  re.lastIndex = 0
  return n
}

/**
 * The mock model's classifier: a weighted feature score over an email's text (subject, sender
 * and body as they appear in the prompt). Positive features: spam vocabulary (money, offers,
 * urgency, prizes, pills, "click here", "remove"), dollar amounts, "!!", links, the share of
 * ALL-CAPS words, leftover HTML; negative features: replies and quotes ("wrote:", `>` lines),
 * technical vocabulary, conversational words. Each feature's count is capped so one long email
 * cannot dominate. `label` is `"spam"` when `score ≥ 1.6` (a threshold chosen so that accuracy
 * on the SpamAssassin corpus is high but imperfect). Pure and deterministic; it never sees the
 * gold label.
 *
 * @since 0.1.0
 * @category scorer
 */
export const scoreEmail = (text: string): { readonly score: number; readonly label: "spam" | "ham" } => {
  const lower = text.toLowerCase()
  let score = 0
  for (const [re, w] of spamTerms) score += w * countCapped(re, lower, 4)
  for (const [re, w] of hamTerms) score -= w * countCapped(re, lower, 5)
  const links = countCapped(/https?:\/\/|www\./g, lower, 10)
  score += links >= 3 ? 1.2 : links * 0.3
  const words = text.match(/\b[A-Za-z]{3,}\b/g) ?? []
  if (words.length > 0) {
    const caps = words.filter((w) => w === w.toUpperCase()).length / words.length
    if (caps > 0.3) score += 2.5
    else if (caps > 0.12) score += 1.2
  }
  if (/<\s*(?:html|body|table|font|td|div|br|p)\b/i.test(text)) score += 1.5
  if (/^\s*subject:\s*re:/im.test(text)) score -= 1.5
  return { score, label: score >= 1.6 ? "spam" : "ham" }
}

// ---------------------------------------------------------------------------------------------
// Request log
// ---------------------------------------------------------------------------------------------

/**
 * One answered request. `keyHash` is the digest of the API key (never the key), `null` when
 * none was sent; `status` is `null` for a request the server hung on (never answered);
 * `fingerprint` is the digest of the canonical JSON of the request's `messages`; `counter` is
 * the per-(endpoint, key) request number (1-based); `atMs` is the `Clock` time of arrival
 * (epoch ms) and `offsetMs` the same relative to server start; `latencyMs` the simulated
 * latency; `answer` the label text sent, if any. For a request answered by a model profile
 * (see {@link ModelProfile}): `model` (the profile's name), `style` (the prompt style read:
 * `terse`, or `detailed`, `examples`, `one-word` joined by `+`), and on a 200 `promptTokens`,
 * `completionTokens` and `costUsd` (as in the response's `usage`).
 *
 * @since 0.1.0
 * @category models
 */
export class RequestLogEntry extends Schema.Class<RequestLogEntry>("RequestLogEntry")({
  seq: Schema.Int,
  endpoint: Schema.String,
  path: Schema.String,
  keyHash: Schema.NullOr(Schema.String),
  status: Schema.NullOr(Schema.Int),
  latencyMs: Schema.Number,
  fingerprint: Schema.NullOr(Schema.String),
  counter: Schema.Int,
  atMs: Schema.Number,
  offsetMs: Schema.Number,
  reason: Schema.String,
  answer: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  style: Schema.optional(Schema.String),
  promptTokens: Schema.optional(Schema.Int),
  completionTokens: Schema.optional(Schema.Int),
  costUsd: Schema.optional(Schema.Number)
}) {}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link makeApp} / {@link serve}: the profile, the model profiles (`models`; none
 * when absent: every request gets the endpoint's default behaviour, whatever its `model`; pass
 * {@link builtinModels} for `small` / `medium` / `large`), an optional JSONL log file, and the
 * in-memory log capacity (default 200,000 entries; past it by a tenth, the oldest entries are
 * dropped down to the capacity; the JSONL file keeps everything).
 *
 * @since 0.1.0
 * @category models
 */
export interface MockLlmOptions {
  readonly profile: MockProfile
  readonly models?: ModelCatalog | undefined
  readonly logFile?: string | undefined
  readonly logCapacity?: number | undefined
}

/**
 * The mock server's app, not yet bound to a socket: serve it with `HttpServer.serveEffect`
 * (e.g. on `NodeHttpServer.layerTest`) or use {@link serve}.
 *
 * @since 0.1.0
 * @category models
 */
export interface MockLlmApp {
  readonly app: HttpApp.Default
  readonly profile: MockProfile
  /** The model profiles served, if any. */
  readonly models: ModelCatalog | undefined
  /** `Clock` time (epoch ms) at which the app was made: storm and throttle windows start here. */
  readonly startedAtMs: number
  /** A snapshot of the in-memory request log, oldest first. */
  readonly log: Effect.Effect<ReadonlyArray<RequestLogEntry>>
}

const z95 = 1.6448536

interface KeyState {
  tokens: number
  lastMs: number
  counter: number
}

const ChatMessage = Schema.Struct({
  role: Schema.String,
  content: Schema.optional(
    Schema.NullOr(
      Schema.Union(
        Schema.String,
        Schema.Array(Schema.Struct({ type: Schema.String, text: Schema.optional(Schema.String) }))
      )
    )
  )
})

const ChatRequest = Schema.Struct({
  model: Schema.String,
  messages: Schema.NonEmptyArray(ChatMessage),
  max_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  max_completion_tokens: Schema.optional(Schema.NullOr(Schema.Number))
})

const messageText = (m: typeof ChatMessage.Type): string =>
  m.content === undefined || m.content === null
    ? ""
    : typeof m.content === "string"
    ? m.content
    : m.content.map((p) => p.text ?? "").join("")

const noiseTemplates: ReadonlyArray<(l: string) => string> = [
  (l) => `Label: ${l.toUpperCase()}`,
  (l) => `I think this is ${l}.`,
  (l) => `${l} (confidence: high)`,
  (l) => `Answer: ${l}`,
  (l) => `**${l}**`
]

const invalidAnswers = ["I cannot tell from this message.", "Unclear.", "Please provide more context."]

const ceilTokens = (chars: number) => Math.max(1, Math.ceil(chars / 4))

/**
 * Builds the mock server's app and state. Requires `FileSystem` only to append the JSONL log
 * (`options.logFile`, opened for append in the current scope). Fails with a `PlatformError`
 * when the log file cannot be opened.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeApp = (
  options: MockLlmOptions
): Effect.Effect<MockLlmApp, PlatformError, FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const profile = options.profile
    const capacity = options.logCapacity ?? 200_000
    const startedAtMs = yield* Effect.clockWith((c) => c.currentTimeMillis)
    const fs = yield* FileSystem.FileSystem
    const file = options.logFile === undefined
      ? undefined
      : yield* fs.open(options.logFile, { flag: "a" })
    const fileLock = yield* Effect.makeSemaphore(1)
    const encoder = new TextEncoder()
    const entries: Array<RequestLogEntry> = []
    let seq = 0
    const keys = new Map<string, KeyState>()
    /** Chat requests per endpoint that reached the answer stage (for `errorIn200.first`). */
    const served = new Map<string, number>()
    /** Judge requests per endpoint past its limits (for `judge.invalidFirst`). */
    const judged = new Map<string, number>()
    /** `Clock` time of each endpoint's first chat request (for `throttle.fromFirstRequest`). */
    const firstRequestMs = new Map<string, number>()
    const semaphores = new Map<string, Effect.Semaphore>()
    for (const ep of profile.endpoints) {
      if (ep.maxConcurrency !== undefined) {
        semaphores.set(ep.name, yield* Effect.makeSemaphore(ep.maxConcurrency))
      }
    }
    const byName = new Map(profile.endpoints.map((e) => [e.name, e]))
    const catalog = options.models
    const modelsByName = new Map((catalog?.models ?? []).map((m) => [m.name, m]))
    /** Per-(endpoint, key, model) rate-limit buckets of the model profiles. */
    const modelBuckets = new Map<string, ReadonlyArray<Bucket>>()
    /** The model ids an endpoint answers: its own `model` (default behaviour), then the profiles. */
    const knownModels = (ep: EndpointProfile): ReadonlyArray<string> =>
      modelsByName.has(ep.model) ? [...modelsByName.keys()] : [ep.model, ...modelsByName.keys()]

    const record = (fields: Omit<RequestLogEntry, "seq" | "offsetMs">) =>
      Effect.gen(function*() {
        seq += 1
        const entry = RequestLogEntry.make({ ...fields, seq, offsetMs: fields.atMs - startedAtMs })
        entries.push(entry)
        // trim in chunks of a tenth so that a full log does not shift the array on every request
        if (entries.length > capacity + Math.ceil(capacity / 10)) entries.splice(0, entries.length - capacity)
        if (file !== undefined) {
          const encoded = yield* Effect.orDie(Schema.encode(RequestLogEntry)(entry))
          const line = encoder.encode(JSON.stringify(encoded) + "\n")
          yield* fileLock.withPermits(1)(file.writeAll(line)).pipe(Effect.orDie)
        }
      })

    const respond = (status: number, body: unknown, headers: Record<string, string> = {}) =>
      HttpServerResponse.unsafeJson(body, { status, headers })
    /** An answer's body without its `usage` when the endpoint sends none (`usage: false`). */
    const withUsage = (ep: EndpointProfile, body: Record<string, unknown>): Record<string, unknown> => {
      if (ep.usage) return body
      const { usage: _, ...rest } = body
      return rest
    }

    const bearer = (req: HttpServerRequest.HttpServerRequest): string | undefined => {
      const h = req.headers["authorization"]
      if (h === undefined) return undefined
      const m = /^Bearer\s+(\S+)\s*$/i.exec(h)
      return m?.[1]
    }

    /** Takes a token from the key's bucket, or returns the milliseconds until the next one. */
    const takeToken = (ep: EndpointProfile, state: KeyState, now: number): number | undefined => {
      const rps = rpsAt(ep, (now - startedAtMs) / 1000)
      if (rps === undefined) return undefined
      const burst = bucketSize(ep, rps)
      state.tokens = Math.min(burst, state.tokens + ((now - state.lastMs) / 1000) * rps)
      state.lastMs = now
      if (state.tokens >= 1) {
        state.tokens -= 1
        return undefined
      }
      return Math.max(1, Math.ceil(((1 - state.tokens) / rps) * 1000))
    }

    /** The headers of a bucket's 429 naming a wait of `waitMs` (see `rateLimitSignal`). */
    const bucketSignal = (ep: EndpointProfile, waitMs: number): Record<string, string> =>
      ep.rateLimitSignal === "none"
        ? {}
        : ep.rateLimitSignal === "retry-after-ms"
        ? { "retry-after-ms": String(waitMs) }
        : { "retry-after": String(Math.max(1, Math.ceil(waitMs / 1000))) }

    /** The rate-limit headers of the key's bucket after this request (see `rateLimitHeaders`). */
    const limitHeaders = (ep: EndpointProfile, state: KeyState, now: number): Record<string, string> => {
      const rps = rpsAt(ep, (now - startedAtMs) / 1000)
      if (ep.rateLimitHeaders === "none" || rps === undefined) return {}
      // the bucket is the minute's (see `bucketSize`): the limit, the count left of it and the
      // time until it is full again, as a real provider's headers say them, so that the refill
      // `(limit − remaining) / reset` is the key's rate
      const burst = bucketSize(ep, rps)
      const remaining = Math.max(0, Math.floor(state.tokens))
      const fullInMs = Math.max(0, Math.ceil(((burst - Math.max(0, state.tokens)) / rps) * 1000))
      const perMinute = String(burst)
      if (ep.rateLimitHeaders === "anthropic") {
        return {
          "anthropic-ratelimit-requests-limit": perMinute,
          "anthropic-ratelimit-requests-remaining": String(remaining),
          "anthropic-ratelimit-requests-reset": new Date(now + fullInMs).toISOString()
        }
      }
      return {
        "x-ratelimit-limit-requests": perMinute,
        "x-ratelimit-remaining-requests": String(remaining),
        "x-ratelimit-reset-requests": `${fullInMs / 1000}s`
      }
    }

    /** A chat answer with the key's rate-limit headers (`rateLimitHeaders`) added. */
    const chat = (ep: EndpointProfile, path: string) =>
      Effect.suspend(() => {
        const hs: { headers: Record<string, string> } = { headers: {} }
        return Effect.map(chatAnswer(ep, path, hs), (r) => Object.keys(hs.headers).length === 0 ? r : HttpServerResponse.setHeaders(r, hs.headers))
      })

    const chatAnswer = (ep: EndpointProfile, path: string, hs: { headers: Record<string, string> }) =>
      Effect.gen(function*() {
        const req = yield* HttpServerRequest.HttpServerRequest
        const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
        const key = bearer(req)
        const base = { endpoint: ep.name, path, atMs: now }
        if (key === undefined) {
          yield* record({ ...base, keyHash: null, status: 401, latencyMs: 0, fingerprint: null, counter: 0, reason: "no_key" })
          return respond(401, errorBody(401, "missing API key: send Authorization: Bearer <key>"))
        }
        const keyHash = digest(`assay-mock-llm-key:${key}`)
        const stateKey = `${ep.name}\u0000${key}`
        let state = keys.get(stateKey)
        if (state === undefined) {
          state = { tokens: bucketSize(ep, rpsAt(ep, (now - startedAtMs) / 1000) ?? 1), lastMs: now, counter: 0 }
          keys.set(stateKey, state)
        }
        state.counter += 1
        const counter = state.counter
        const body = yield* Effect.either(HttpServerRequest.schemaBodyJson(ChatRequest))
        if (Either.isLeft(body)) {
          yield* record({ ...base, keyHash, status: 400, latencyMs: 0, fingerprint: null, counter, reason: "bad_request" })
          return respond(400, errorBody(400, "request body is not a chat completion request (model, messages)"))
        }
        const request = body.right
        const fingerprint = digest(canonicalJsonUnsafe(request.messages.map((m) => ({ role: m.role, content: messageText(m) }))))
        const seedHex = digest(`${profile.seed}|${ep.name}|${fingerprint}|${keyHash}|${counter}`)
        const rng = Random.make(Number.parseInt(seedHex.slice(0, 12), 16))
        const draws = yield* Effect.all(Array.from({ length: 8 }, () => rng.next))
        const [uHang, uStorm, uError, uErrorPick, uLat1, uLat2, uSlow, uAnswer] = draws as unknown as [
          number, number, number, number, number, number, number, number
        ]
        const elapsedS = (now - startedAtMs) / 1000
        const text = request.messages.map(messageText).join("\n")

        // 0. the model profile the request names (none: the endpoint's default behaviour)
        const model = modelsByName.get(request.model)
        const style = model === undefined
          ? undefined
          : promptStyleOf(request.messages.map((m) => ({ role: m.role, text: messageText(m) })))
        const entryBase = {
          ...base,
          keyHash,
          fingerprint,
          counter,
          ...(model === undefined || style === undefined ? {} : { model: model.name, style: styleName(style) })
        }
        if (
          model === undefined && catalog !== undefined && catalog.unknownModel === "reject" && request.model !== ep.model
        ) {
          yield* record({ ...entryBase, status: 404, latencyMs: 0, reason: "unknown_model" })
          return respond(404, unknownModelBody(request.model, knownModels(ep)))
        }

        // 1. throttle window (C5, C8, C9)
        const th = ep.throttle
        if (!firstRequestMs.has(ep.name)) firstRequestMs.set(ep.name, now)
        const throttleS = th?.fromFirstRequest === true ? (now - firstRequestMs.get(ep.name)!) / 1000 : elapsedS
        if (th !== undefined && throttleS < th.forS && (th.keys === undefined || th.keys.includes(key))) {
          yield* record({ ...entryBase, status: 429, latencyMs: 0, reason: "throttle" })
          const signalled = throttled(th.signal, th.retryAfterS, now)
          return respond(429, signalled.body, signalled.headers)
        }
        // 2. token bucket
        const waitMs = takeToken(ep, state, now)
        hs.headers = limitHeaders(ep, state, now)
        if (waitMs !== undefined) {
          yield* record({ ...entryBase, status: 429, latencyMs: 0, reason: "rate_limit" })
          return respond(429, errorBody(429, `rate limit of ${rpsAt(ep, elapsedS)} requests/s exceeded`), bucketSignal(ep, waitMs))
        }
        // 2a. the model's context window, then its rate limit
        const promptTokens = ceilTokens(text.length)
        if (model !== undefined && model.maxContext !== undefined) {
          const wanted = request.max_completion_tokens ?? request.max_tokens ?? 0
          if (promptTokens + wanted > model.maxContext) {
            yield* record({ ...entryBase, status: 400, latencyMs: 0, reason: "context_length" })
            return respond(400, {
              error: {
                message: `This model's maximum context length is ${model.maxContext} tokens. However, you requested ${
                  promptTokens + wanted
                } tokens (${promptTokens} in the messages, ${wanted} in the completion).`,
                type: "invalid_request_error",
                param: "messages",
                code: "context_length_exceeded"
              }
            })
          }
        }
        if (model !== undefined && model.rateLimit !== undefined) {
          const rl = model.rateLimit
          const bucketKey = `${ep.name}\u0000${key}\u0000${model.name}`
          let buckets = modelBuckets.get(bucketKey)
          if (buckets === undefined) {
            buckets = [
              ...(rl.rps === undefined ? [] : [makeBucket(rl.rps, rl.burst ?? Math.max(1, Math.ceil(rl.rps)), now)]),
              ...(rl.rpm === undefined ? [] : [makeBucket(rl.rpm / 60, Math.max(1, Math.floor(rl.rpm)), now)])
            ]
            modelBuckets.set(bucketKey, buckets)
          }
          const wait = takeAll(buckets, now)
          if (wait !== undefined) {
            yield* record({ ...entryBase, status: 429, latencyMs: 0, reason: "model_rate_limit" })
            const limits = [rl.rps === undefined ? "" : `${rl.rps} requests/s`, rl.rpm === undefined ? "" : `${rl.rpm} requests/min`]
              .filter((l) => l !== "").join(" and ")
            return respond(429, errorBody(429, `rate limit of ${limits} for model ${model.name} exceeded`), {
              "retry-after": String(wait)
            })
          }
        }
        // 3. hang rules (C4)
        const hangs = ep.hang.some((r) =>
          (r.contains === undefined || text.includes(r.contains)) &&
          (r.nth === undefined || r.nth === counter) &&
          (r.keys === undefined || r.keys.includes(key)) &&
          (r.rate === undefined || uHang < r.rate)
        )
        if (hangs) {
          yield* record({ ...entryBase, status: null, latencyMs: 0, reason: "hang" })
          return yield* Effect.never
        }
        // 4. latency
        const lat = ep.latency
        const median = Math.max(lat.medianMs, 0.001)
        const p95 = Math.max(lat.p95Ms ?? 2 * median, median)
        const sigma = (Math.log(p95) - Math.log(median)) / z95
        const normal = Math.sqrt(-2 * Math.log(1 - uLat1)) * Math.cos(2 * Math.PI * uLat2)
        const latencyMs = lat.slowRate > 0 && uSlow < lat.slowRate
          ? lat.slowMs * (1 + uLat1)
          : lat.medianMs === 0
          ? 0
          : Math.exp(Math.log(median) + sigma * normal)
        // a judge prompt is answered with scores (a model profile only prices it and adds its latency)
        const judgeRequest = judgeRequestOf(text)
        let judgeAnswer: { readonly content: string; readonly malformed: boolean } | undefined
        if (judgeRequest !== undefined) {
          const n = (judged.get(ep.name) ?? 0) + 1
          judged.set(ep.name, n)
          const malformed = n <= ep.judge.invalidFirst || uAnswer < ep.judge.invalidRate
          judgeAnswer = {
            content: malformed ? malformedJudgeAnswer(judgeRequest) : judgeAnswerOf(judgeRequest, profile.seed, request.model),
            malformed
          }
        }
        // the model's answer is fixed by hashes (not by the request counter), so it is known before
        // the wait, whose length depends on its tokens
        const modelAnswer = model === undefined || style === undefined
          ? undefined
          : judgeAnswer !== undefined
          ? {
            content: judgeAnswer.content,
            completionTokens: ceilTokens(judgeAnswer.content.length),
            costUsd: costUsd(model.pricing, promptTokens, ceilTokens(judgeAnswer.content.length))
          }
          : answerOf(model, style, scoreEmail(style.input).label, profile.seed, fingerprint, promptTokens)
        const uJitter = model === undefined ? 0 : yield* rng.next
        const modelLatencyMs = model === undefined || modelAnswer === undefined
          ? 0
          : model.latency.baseMs + uJitter * model.latency.jitterMs +
            (model.latency.perKTokensMs * (promptTokens + modelAnswer.completionTokens)) / 1000
        const latency = Math.round((latencyMs + modelLatencyMs) * 1000) / 1000

        const answer = Effect.gen(function*() {
          if (latency > 0) yield* Effect.sleep(Duration.millis(latency))
          // 5. storms, then the background error rate
          const storm = ep.storms.find((s) => elapsedS >= s.fromS && elapsedS < s.toS)
          if (storm !== undefined && uStorm < storm.rate) {
            const headers: Record<string, string> = storm.status === 429
              ? { "retry-after": String(storm.retryAfterS ?? Math.max(1, Math.ceil(storm.toS - elapsedS))) }
              : {}
            yield* record({ ...entryBase, status: storm.status, latencyMs: latency, reason: "storm" })
            return respond(storm.status, errorBody(storm.status, "error storm"), headers)
          }
          if (uError < ep.errorRate) {
            const statuses = ep.errorStatuses
            const status = statuses[Math.min(statuses.length - 1, Math.floor(uErrorPick * statuses.length))]!
            yield* record({ ...entryBase, status, latencyMs: latency, reason: "error" })
            return respond(status, errorBody(status, "simulated upstream error"))
          }
          // 6. an error inside a 200 (C10)
          const e200 = ep.errorIn200
          if (e200 !== undefined) {
            const n = (served.get(ep.name) ?? 0) + 1
            served.set(ep.name, n)
            if (n <= e200.first || uErrorPick < e200.rate) {
              yield* record({ ...entryBase, status: 200, latencyMs: latency, reason: "error_in_200" })
              return respond(200, { error: { message: e200.message, code: e200.code } })
            }
          }
          // 7. the content filter (C10)
          const cf = ep.contentFilter
          if (
            cf !== undefined && (cf.contains !== undefined || cf.rate !== undefined) &&
            (cf.contains === undefined || text.includes(cf.contains)) && (cf.rate === undefined || uStorm < cf.rate)
          ) {
            yield* record({ ...entryBase, status: 200, latencyMs: latency, reason: "content_filter" })
            return respond(200, withUsage(ep, {
              id: `chatcmpl-${seedHex.slice(0, 24)}`,
              object: "chat.completion",
              created: Math.floor(now / 1000),
              model: request.model,
              choices: [{
                index: 0,
                message: { role: "assistant", content: null },
                finish_reason: "content_filter",
                content_filter_results: {
                  hate: { filtered: true, severity: "high" },
                  self_harm: { filtered: false, severity: "safe" },
                  sexual: { filtered: false, severity: "safe" },
                  violence: { filtered: false, severity: "safe" }
                }
              }],
              usage: {
                prompt_tokens: promptTokens,
                completion_tokens: 0,
                total_tokens: promptTokens,
                ...(model === undefined ? {} : { cost: costUsd(model.pricing, promptTokens, 0) })
              }
            }))
          }
          // 8. the model: a model profile's answer (fixed above), or the endpoint's default behaviour
          const answerReason = judgeAnswer === undefined ? "ok" : judgeAnswer.malformed ? "judge_malformed" : "judge"
          if (modelAnswer !== undefined) {
            const { completionTokens, content, costUsd: cost } = modelAnswer
            yield* record({
              ...entryBase,
              status: 200,
              latencyMs: latency,
              reason: answerReason,
              answer: content,
              promptTokens,
              completionTokens,
              costUsd: cost
            })
            return respond(200, withUsage(ep, {
              id: `chatcmpl-${seedHex.slice(0, 24)}`,
              object: "chat.completion",
              created: Math.floor(now / 1000),
              model: request.model,
              choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
              usage: {
                prompt_tokens: promptTokens,
                completion_tokens: completionTokens,
                total_tokens: promptTokens + completionTokens,
                cost
              }
            }))
          }
          const lastUser = [...request.messages].reverse().find((m) => m.role === "user")
          const { label } = scoreEmail(emailSection(lastUser === undefined ? text : messageText(lastUser)))
          const inv = ep.answers.invalidRate
          const content = judgeAnswer !== undefined
            ? judgeAnswer.content
            : ep.answers.random
            ? `random-${seedHex.slice(16, 32)}`
            : uAnswer < inv
            ? invalidAnswers[Math.floor((uAnswer / inv) * invalidAnswers.length) % invalidAnswers.length]!
            : uAnswer < inv + ep.answers.noiseRate
            ? noiseTemplates[
              Math.floor(((uAnswer - inv) / ep.answers.noiseRate) * noiseTemplates.length) % noiseTemplates.length
            ]!(label)
            : label
          yield* record({ ...entryBase, status: 200, latencyMs: latency, reason: answerReason, answer: content })
          const completionTokens = ceilTokens(content.length)
          return respond(200, withUsage(ep, {
            id: `chatcmpl-${seedHex.slice(0, 24)}`,
            object: "chat.completion",
            created: Math.floor(now / 1000),
            model: request.model,
            choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
            usage: {
              prompt_tokens: promptTokens,
              completion_tokens: completionTokens,
              total_tokens: promptTokens + completionTokens
            }
          }))
        })
        const sem = semaphores.get(ep.name)
        if (sem === undefined) return yield* answer
        const limited = yield* sem.withPermitsIfAvailable(1)(answer)
        if (Option.isSome(limited)) return limited.value
        yield* record({ ...entryBase, status: 429, latencyMs: 0, reason: "concurrency" })
        return respond(429, errorBody(429, `more than ${ep.maxConcurrency} concurrent requests`), {
          "retry-after": "1"
        })
      })

    /** A model object; a profile's carries its price, context window and rate limit. */
    const modelObject = (id: string) => {
      const m = modelsByName.get(id)
      const plain = { id, object: "model", created: Math.floor(startedAtMs / 1000), owned_by: "assay-mock" }
      return m === undefined ? plain : {
        ...plain,
        context_length: m.maxContext ?? null,
        pricing: { prompt_per_1k_usd: m.pricing.promptPer1k, completion_per_1k_usd: m.pricing.completionPer1k },
        rate_limit: { rps: m.rateLimit?.rps ?? null, rpm: m.rateLimit?.rpm ?? null }
      }
    }

    const models = (ep: EndpointProfile) =>
      Effect.succeed(respond(200, { object: "list", data: knownModels(ep).map(modelObject) }))

    const retrieveModel = (ep: EndpointProfile) =>
      Effect.gen(function*() {
        const params = yield* HttpRouter.params
        const id = params["model"] ?? ""
        const known = knownModels(ep)
        return known.includes(id) ? respond(200, modelObject(id)) : respond(404, unknownModelBody(id, known))
      })

    const withEndpoint = <A, E, R>(f: (ep: EndpointProfile) => Effect.Effect<A, E, R>) =>
      Effect.gen(function*() {
        const params = yield* HttpRouter.params
        const ep = byName.get(params["endpoint"] ?? "")
        if (ep === undefined) {
          return respond(404, errorBody(404, `no endpoint named "${params["endpoint"]}"`))
        }
        return yield* f(ep)
      })

    const first = profile.endpoints[0]
    const LogQuery = Schema.Struct({
      endpoint: Schema.optional(Schema.String),
      since: Schema.optional(Schema.NumberFromString)
    })

    const router = HttpRouter.empty.pipe(
      HttpRouter.post("/v1/chat/completions", chat(first, "/v1/chat/completions")),
      HttpRouter.get("/v1/models", models(first)),
      HttpRouter.get("/v1/models/:model", retrieveModel(first)),
      HttpRouter.post(
        "/e/:endpoint/v1/chat/completions",
        withEndpoint((ep) => chat(ep, `/e/${ep.name}/v1/chat/completions`))
      ),
      HttpRouter.get("/e/:endpoint/v1/models", withEndpoint(models)),
      HttpRouter.get("/e/:endpoint/v1/models/:model", withEndpoint(retrieveModel)),
      HttpRouter.get("/_mock/health", Effect.succeed(respond(200, { ok: true }))),
      HttpRouter.get(
        "/_mock/log",
        Effect.gen(function*() {
          const q = yield* HttpServerRequest.schemaSearchParams(LogQuery)
          const since = q.since ?? 0
          const selected = entries.filter((e) =>
            e.seq > since && (q.endpoint === undefined || e.endpoint === q.endpoint)
          )
          return respond(200, { entries: selected.map((e) => Schema.encodeSync(RequestLogEntry)(e)) })
        }).pipe(
          Effect.catchTag("ParseError", () => Effect.succeed(respond(400, errorBody(400, "bad log query"))))
        )
      )
    )
    const app: HttpApp.Default = router.pipe(
      Effect.catchTag("RouteNotFound", () => Effect.succeed(respond(404, errorBody(404, "not found"))))
    )

    return {
      app,
      profile,
      models: catalog,
      startedAtMs,
      log: Effect.sync(() => entries.slice())
    } satisfies MockLlmApp
  })

// ---------------------------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------------------------

/**
 * A running mock server: its base URL (`http://127.0.0.1:<port>`), port, each endpoint's
 * OpenAI base URL (`<url>/e/<name>/v1`), the names of its model profiles (empty without
 * any), and the request log.
 *
 * @since 0.1.0
 * @category models
 */
export interface MockLlmServer {
  readonly url: string
  readonly host: string
  readonly port: number
  readonly endpoints: ReadonlyArray<{ readonly name: string; readonly model: string; readonly baseUrl: string }>
  readonly models: ReadonlyArray<string>
  readonly log: Effect.Effect<ReadonlyArray<RequestLogEntry>>
}

/**
 * The running mock server as a service (see {@link layer}).
 *
 * @since 0.1.0
 * @category tags
 */
export class MockLlm extends Context.Tag("assay/MockLlm")<MockLlm, MockLlmServer>() {}

/**
 * Starts the mock server on `host` (default `127.0.0.1`) and `port` (default 0: a free port)
 * for the lifetime of the current scope, and returns its address. On scope close every open
 * connection is dropped (so hung requests do not keep the process alive) and the socket closed.
 * Fails with a `ServeError` when it cannot listen, or a `PlatformError` when the log file
 * cannot be opened.
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (
  options: MockLlmOptions & { readonly host?: string | undefined; readonly port?: number | undefined }
): Effect.Effect<MockLlmServer, ServeError | PlatformError, FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const mock = yield* makeApp(options)
    const nodeServer = createServer()
    const server = yield* NodeHttpServer.make(() => nodeServer, {
      host: options.host ?? "127.0.0.1",
      port: options.port ?? 0
    })
    // runs before the listener is closed: drop every connection, including hung ones
    yield* Effect.addFinalizer(() => Effect.sync(() => nodeServer.closeAllConnections()))
    yield* HttpServer.serveEffect(mock.app).pipe(Effect.provideService(HttpServer.HttpServer, server))
    const address = server.address
    const host = address._tag === "TcpAddress" ? address.hostname : "127.0.0.1"
    const port = address._tag === "TcpAddress" ? address.port : 0
    const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`
    return {
      url,
      host,
      port,
      endpoints: mock.profile.endpoints.map((e) => ({ name: e.name, model: e.model, baseUrl: `${url}/e/${e.name}/v1` })),
      models: (mock.models?.models ?? []).map((m) => m.name),
      log: mock.log
    } satisfies MockLlmServer
  })

/**
 * A layer that runs the mock server for the layer's lifetime and provides its
 * {@link MockLlmServer} under the {@link MockLlm} tag.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: MockLlmOptions & { readonly host?: string | undefined; readonly port?: number | undefined }
): Layer.Layer<MockLlm, ServeError | PlatformError, FileSystem.FileSystem> => Layer.scoped(MockLlm, serve(options))
