/**
 * The retry policy of a task and the decision it yields after a failed attempt.
 *
 * A {@link RetryPolicy} is a plain value (no services): how many attempts in total, which
 * failures count as retryable, and the exponential backoff between attempts. After each failed
 * attempt the runner calls {@link decide}, which classifies the failure (see
 * {@link classify}), checks the attempt count and the total time budget, draws the jitter from
 * Effect's `Random` service and honours a server's `Retry-After`. The resulting
 * {@link RetryDecision} is persisted on the attempt row, so "why did it retry five times / why
 * did it stop" is answered by a query.
 *
 * Defaults matter: `maxAttempts` is 1, so nothing is retried unless asked for.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Option, ParseResult, Predicate, Random, Schema } from "effect"
import { classify, ErrorClass, errorTypeOf, retryableClasses, retryAfterOf } from "./Errors.js"
import { decodeDurationText } from "./internal/durationText.js"
import { serverDelayMessage } from "./internal/errors.js"
import type { Json } from "./Json.js"

// ---------------------------------------------------------------------------------------------
// Durations written in config files
// ---------------------------------------------------------------------------------------------

const durationHint = "write a duration with a unit, for example \"500 millis\", \"2 seconds\" or \"1 minute\""

/**
 * A non-negative, finite duration written as a string with a unit (`"500 millis"`,
 * `"30 seconds"`, `"2 minutes"`; units as in Effect's `Duration`: nanos, micros, millis,
 * seconds, minutes, hours, days, weeks), or in the compact form assay prints durations in
 * (`"2s"`, `"1m 30s"`, `"500ms"`). A bare number is refused, because `0.5` could mean
 * seconds or milliseconds; the error message says to write a unit. Encodes as
 * `"<n> millis"`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const DurationFromString: Schema.Schema<Duration.Duration, string> = Schema.transformOrFail(
  Schema.String.annotations({
    message: (issue) => {
      const actual = (issue as { readonly actual?: unknown }).actual
      return typeof actual === "number"
        ? `a bare number (${actual}) is not a duration: ${durationHint}`
        : `expected a duration string: ${durationHint}`
    }
  }),
  Schema.DurationFromSelf,
  {
    strict: true,
    decode: (s, _, ast) => {
      // Effect's Duration clamps a negative amount to zero: refuse it instead of meaning 0
      if (/^\s*-/.test(s)) return ParseResult.fail(new ParseResult.Type(ast, s, `"${s}" is negative: a duration is 0 or more`))
      const d = decodeDurationText(s)
      if (Option.isNone(d)) {
        return ParseResult.fail(new ParseResult.Type(ast, s, `"${s}" is not a duration: ${durationHint}`))
      }
      if (!Duration.isFinite(d.value)) {
        return ParseResult.fail(new ParseResult.Type(ast, s, `"${s}" is not a finite duration`))
      }
      return ParseResult.succeed(d.value)
    },
    encode: (d, _, ast) =>
      Duration.isFinite(d)
        ? ParseResult.succeed(`${Duration.toMillis(d)} millis`)
        : ParseResult.fail(new ParseResult.Type(ast, d, "an infinite duration cannot be written"))
  }
).annotations({ identifier: "DurationFromString" })

// ---------------------------------------------------------------------------------------------
// RetryPolicy
// ---------------------------------------------------------------------------------------------

/**
 * How the computed backoff delay is randomised:
 * - `"full"`: uniform in `[0, d]` (the default; spreads retries of many workers best);
 * - `"equal"`: `d/2` plus uniform in `[0, d/2]`;
 * - `"none"`: exactly `d`.
 *
 * Source: "Exponential Backoff And Jitter", Marc Brooker, AWS Architecture Blog (2015).
 *
 * @since 0.1.0
 * @category models
 */
export const Jitter = Schema.Literal("full", "none", "equal")

/**
 * @since 0.1.0
 * @category models
 */
export type Jitter = typeof Jitter.Type

/**
 * The retry policy of a task.
 *
 * Fields (type side; durations are Effect `Duration`s):
 * - `maxAttempts`: total attempts including the first (integer ≥ 1, default 1 = no retry);
 * - `on`: extra names that make a failure retryable: an error `_tag`, an Error `name`, or an
 *   {@link ErrorClass} (for example `"unknown"`); default `[]`;
 * - `retryClassified`: retry the classes rate_limit, timeout, connection, upstream, retryable
 *   (default true);
 * - `retryUnknown`: also retry class `unknown`, e.g. `ResourceUnavailable` (default false);
 * - `base`, `factor`, `cap`: the delay before attempt n+1 is `min(cap, base * factor^(n-1))`,
 *   then jittered (defaults 0.5 s, 2, 30 s);
 * - `jitter`: see {@link Jitter} (default `"full"`);
 * - `maxTotal`: optional total time budget of the task, from its first attempt's start: a
 *   retry whose delay would take the elapsed time past it is not made, and the runner ends an
 *   attempt still running (or still waiting for a lease) when the budget runs out;
 * - `maxServerDelay`: the longest delay a server may ask for (a rate limit's Retry-After or
 *   reset hint) that is waited out (default 10 minutes, {@link defaultMaxServerDelayMs}); a
 *   longer one ends the task with `server_delay` and a message naming the time asked for,
 *   and the pool refuses (instead of queueing) an acquire whose usable resources are all
 *   throttled longer.
 *
 * As a Schema, its encoded side is the config-file object (see {@link RetryPolicyFromConfig}).
 * Build values in code with {@link RetryPolicy.make}.
 *
 * @since 0.1.0
 * @category models
 */
export class RetryPolicy extends Schema.Class<RetryPolicy>("assay/RetryPolicy")({
  maxAttempts: Schema.optionalWith(
    Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({
      message: () => "maxAttempts must be an integer >= 1 (1 means no retry)"
    }),
    { default: () => 1, exact: true }
  ),
  on: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [], exact: true }),
  retryClassified: Schema.optionalWith(Schema.Boolean, { default: () => true, exact: true }),
  retryUnknown: Schema.optionalWith(Schema.Boolean, { default: () => false, exact: true }),
  base: Schema.optionalWith(DurationFromString, { default: () => Duration.millis(500), exact: true }),
  factor: Schema.optionalWith(
    Schema.Number.pipe(Schema.finite(), Schema.greaterThanOrEqualTo(1)).annotations({
      message: () => "factor must be a finite number >= 1"
    }),
    { default: () => 2, exact: true }
  ),
  cap: Schema.optionalWith(DurationFromString, { default: () => Duration.seconds(30), exact: true }),
  jitter: Schema.optionalWith(Jitter, { default: () => "full" as const, exact: true }),
  maxTotal: Schema.optionalWith(DurationFromString, { exact: true }),
  maxServerDelay: Schema.optionalWith(DurationFromString, { exact: true })
}) {
  /**
   * Builds a policy from a partial plain object; durations accept any
   * `Duration.DurationInput` (`"2 seconds"`, `Duration.millis(500)`, a number of ms).
   * Throws a `ParseError` on invalid values (e.g. `maxAttempts: 0`): a programming mistake.
   *
   * @since 0.1.0
   */
  static override make<C extends new(...args: Array<any>) => any>(
    this: C,
    ...args: Array<RetryPolicyInput | undefined>
  ): InstanceType<C> {
    const input = args[0] ?? {}
    const props: Record<string, unknown> = {}
    if (input.maxAttempts !== undefined) props["maxAttempts"] = input.maxAttempts
    if (input.on !== undefined) props["on"] = [...input.on]
    if (input.retryClassified !== undefined) props["retryClassified"] = input.retryClassified
    if (input.retryUnknown !== undefined) props["retryUnknown"] = input.retryUnknown
    if (input.base !== undefined) props["base"] = Duration.decode(input.base)
    if (input.factor !== undefined) props["factor"] = input.factor
    if (input.cap !== undefined) props["cap"] = Duration.decode(input.cap)
    if (input.jitter !== undefined) props["jitter"] = input.jitter
    if (input.maxTotal !== undefined) props["maxTotal"] = Duration.decode(input.maxTotal)
    if (input.maxServerDelay !== undefined) props["maxServerDelay"] = Duration.decode(input.maxServerDelay)
    return new this(props)
  }

  /**
   * The default policy: one attempt, no retry.
   *
   * @since 0.1.0
   */
  static readonly default: RetryPolicy = new RetryPolicy({})
}

/**
 * The plain object accepted by {@link RetryPolicy.make}: every field optional; durations as
 * any `Duration.DurationInput` (a bare number is milliseconds here, as everywhere in Effect).
 *
 * @since 0.1.0
 * @category models
 */
export interface RetryPolicyInput {
  readonly maxAttempts?: number | undefined
  readonly on?: ReadonlyArray<string> | undefined
  readonly retryClassified?: boolean | undefined
  readonly retryUnknown?: boolean | undefined
  readonly base?: Duration.DurationInput | undefined
  readonly factor?: number | undefined
  readonly cap?: Duration.DurationInput | undefined
  readonly jitter?: Jitter | undefined
  readonly maxTotal?: Duration.DurationInput | undefined
  readonly maxServerDelay?: Duration.DurationInput | undefined
}

/**
 * The default `maxServerDelay` in milliseconds: 10 minutes (longer than the provider resets
 * seen in practice, `x-ratelimit-reset-tokens: 6m0s`; far shorter than a day).
 *
 * @since 0.2.0
 * @category constants
 */
export const defaultMaxServerDelayMs = 600_000

/**
 * A policy's server-delay ceiling in milliseconds (`maxServerDelay`, else
 * {@link defaultMaxServerDelayMs}).
 *
 * @since 0.2.0
 * @category decisions
 */
export const maxServerDelayMs = (policy: RetryPolicy): number =>
  policy.maxServerDelay === undefined ? defaultMaxServerDelayMs : Duration.toMillis(policy.maxServerDelay)

/**
 * Decodes the `retry` object of a config file into a {@link RetryPolicy}: camelCase keys,
 * durations as strings with a unit (`"500 millis"`, `"30 seconds"`; a bare number is refused
 * with a hint to write a unit). Decode it with
 * `Schema.decodeUnknownEither(RetryPolicyFromConfig, { errors: "all", onExcessProperty: "error" })`
 * (or {@link decodeRetryPolicyConfig}) so that unknown keys are errors.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RetryPolicyFromConfig: Schema.Schema<RetryPolicy, typeof RetryPolicy.Encoded> = RetryPolicy

/**
 * Decodes a config object into a {@link RetryPolicy}, reporting every problem at once and
 * refusing unknown keys. Fails with a Schema `ParseError`.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeRetryPolicyConfig = Schema.decodeUnknownEither(RetryPolicyFromConfig, {
  errors: "all",
  onExcessProperty: "error"
})

/**
 * The fields of a policy that change a step's timing, and therefore belong to the pipeline
 * identity: `{ maxAttempts, baseMs, factor, capMs, jitter }` (durations in milliseconds).
 * `on`, `retryClassified`, `retryUnknown`, `maxTotal` and `maxServerDelay` are deliberately
 * excluded, as the specification prescribes for budgets.
 *
 * @since 0.1.0
 * @category identity
 */
export const identityFields = (policy: RetryPolicy): Json => ({
  maxAttempts: policy.maxAttempts,
  baseMs: Duration.toMillis(policy.base),
  factor: policy.factor,
  capMs: Duration.toMillis(policy.cap),
  jitter: policy.jitter
})

// ---------------------------------------------------------------------------------------------
// RetryDecision
// ---------------------------------------------------------------------------------------------

/**
 * Why a decision was taken:
 * - `ok`: the attempt succeeded;
 * - `retryable`: the failure is retryable and another attempt will be made;
 * - `attempts_exhausted`: retryable, but `maxAttempts` is reached;
 * - `policy_declined`: the policy does not retry this failure (its class, cancellation, a
 *   `FatalError`);
 * - `total_budget`: the delay would take the elapsed time past `maxTotal` (or the attempt
 *   ran out of it);
 * - `server_delay`: the server asked to wait longer than `maxServerDelay`;
 * - `stopped`: the failure would have been retried (or the attempt was cancelled), but the run
 *   was stopping: no retry in this run, the pipeline ends `interrupted` and a resume makes
 *   the next attempt;
 * - `control_refused`: the task returned a control directive (a `Handoff`) that its pipeline
 *   refuses (undeclared edge, no `control` block, spent budget): fatal, and the policy is
 *   never consulted.
 *
 * @since 0.1.0
 * @category models
 */
export const RetryReason = Schema.Literal(
  "ok",
  "retryable",
  "attempts_exhausted",
  "policy_declined",
  "total_budget",
  "server_delay",
  "stopped",
  "control_refused"
)

/**
 * @since 0.1.0
 * @category models
 */
export type RetryReason = typeof RetryReason.Type

/**
 * The decision after one attempt, persisted on the attempt row.
 *
 * - `retry`: whether another attempt is made;
 * - `reason`: see {@link RetryReason};
 * - `delayMs`: milliseconds to wait before the next attempt (0 when not retrying);
 * - `errorClass`: the class of the failure (`null` on success);
 * - `attempt`: the 1-based number of the attempt this decision concerns;
 * - `retryAfterMs`: the server's suggested delay in milliseconds, when it gave one;
 * - `message`: for `server_delay`, the words of the refusal ("the server asked to wait 24 h
 *   (until …)").
 *
 * @since 0.1.0
 * @category models
 */
export const RetryDecision = Schema.Struct({
  retry: Schema.Boolean,
  reason: RetryReason,
  delayMs: Schema.Number,
  errorClass: Schema.NullOr(ErrorClass),
  attempt: Schema.Number,
  retryAfterMs: Schema.optional(Schema.Number),
  message: Schema.optional(Schema.String)
})

/**
 * @since 0.1.0
 * @category models
 */
export type RetryDecision = typeof RetryDecision.Type

/**
 * The decision recorded for a successful attempt: `{ retry: false, reason: "ok", delayMs: 0,
 * errorClass: null, attempt }`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const succeeded = (attempt: number): RetryDecision => ({
  retry: false,
  reason: "ok",
  delayMs: 0,
  errorClass: null,
  attempt
})

// ---------------------------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------------------------

const nameOf = (u: unknown): string | undefined =>
  Predicate.hasProperty(u, "name") && typeof u.name === "string" ? u.name : undefined

/**
 * Whether an `on` entry names this failure: its `_tag`, its Error `name`, or its class.
 */
const matchesOn = (policy: RetryPolicy, error: unknown, errorClass: ErrorClass): boolean => {
  if (policy.on.length === 0) return false
  const type = errorTypeOf(error)
  const name = nameOf(error)
  return policy.on.some((entry) => entry === type || entry === name || entry === errorClass)
}

/**
 * Failures that are final whatever the policy says, even when named in `on`: a declared
 * `FatalError`, a refused control-flow directive (`HandoffRefused`) and a spent handoff budget
 * (`BudgetExceeded`): retrying them would only repeat the same refusal.
 */
const finalTags: ReadonlySet<string> = new Set(["FatalError", "HandoffRefused", "BudgetExceeded"])

const isFatalError = (u: unknown): boolean => Predicate.hasProperty(u, "_tag") && finalTags.has(u._tag as string)

const retryableWithClass = (policy: RetryPolicy, error: unknown, errorClass: ErrorClass): boolean => {
  // Cancellation, a declared FatalError and a refused or over-budget handoff are final
  // whatever the policy says.
  if (errorClass === "cancelled" || isFatalError(error)) return false
  if (matchesOn(policy, error, errorClass)) return true
  if (policy.retryClassified && retryableClasses.has(errorClass)) return true
  if (policy.retryUnknown && errorClass === "unknown") return true
  return false
}

/**
 * Whether the policy would retry this failure (ignoring the attempt count and the time
 * budget). Cancellation, a `FatalError`, a `HandoffRefused` and a `BudgetExceeded` are never
 * retryable (not even when named in `on`); an `on` entry matching the
 * error's `_tag`, `name` or class makes it retryable; otherwise the classified retryable
 * classes when `retryClassified`, and `unknown` when `retryUnknown`. `invalid` and `fatal` are
 * declined unless named in `on`.
 *
 * @since 0.1.0
 * @category decisions
 */
export const isRetryable = (policy: RetryPolicy, error: unknown): boolean =>
  retryableWithClass(policy, error, classify(error))

/**
 * The backoff delay in milliseconds before the attempt after `attempt` (1-based), before
 * jitter: `min(cap, base * factor^(attempt-1))`.
 *
 * @since 0.1.0
 * @category decisions
 */
export const backoffMs = (policy: RetryPolicy, attempt: number): number => {
  const base = Duration.toMillis(policy.base)
  const cap = Duration.toMillis(policy.cap)
  if (base === 0) return 0
  const raw = base * Math.pow(policy.factor, Math.max(0, attempt - 1))
  return Number.isFinite(raw) ? Math.min(cap, raw) : cap
}

/**
 * Applies the policy's jitter to a delay `d` (ms), given a uniform draw `u` in `[0, 1)`.
 *
 * @since 0.1.0
 * @category decisions
 */
export const applyJitter = (jitter: Jitter, d: number, u: number): number => {
  switch (jitter) {
    case "none":
      return d
    case "full":
      return d * u
    case "equal":
      return d / 2 + (d / 2) * u
  }
}

/**
 * Decides what to do after attempt number `attempt` (1-based) failed with `error`, when
 * `elapsedMs` milliseconds have been spent on this step so far.
 *
 * In order:
 * 1. the failure is classified with {@link classify};
 * 2. not retryable under {@link isRetryable} → `policy_declined`;
 * 3. `attempt >= maxAttempts` → `attempts_exhausted`;
 * 4. the delay is `min(cap, base * factor^(attempt-1))` with the policy's jitter (drawn from
 *    `Random`); a server's Retry-After ({@link retryAfterOf}, HTTP-dates relative to `Clock`)
 *    replaces it, and may exceed `cap`: the server's word wins, up to `maxServerDelay`;
 *    except when `elsewhereMs` (see below) is shorter than the Retry-After: the throttle held
 *    one resource and another of its pool can take the retry sooner, so the delay is the
 *    larger of the jittered backoff and `elsewhereMs` (the refusing resource stays out of
 *    rotation until its window ends: the pool sees to that);
 * 5. a server delay beyond `maxServerDelay` → `server_delay` (retryable or not: a delay that
 *    long is refused whatever the attempt count), with `message`; with `elsewhereMs` the delay
 *    judged is the shorter of the two (another resource that serves sooner keeps the task);
 * 6. `maxTotal` set and `elapsedMs + delay > maxTotal` → `total_budget`;
 * 7. otherwise `retryable` with that delay.
 *
 * `elsewhereMs` (optional, milliseconds, ≥ 0): after a throttle that the task's pool heard,
 * how long until a resource of that pool can take another lease (0: one can now); the runner
 * computes it from the pool's state (`undefined`: no such figure, the server's word stands).
 *
 * Never fails; uses only the default `Random` and `Clock` services.
 *
 * @since 0.1.0
 * @category decisions
 */
export const decide = (
  policy: RetryPolicy,
  error: unknown,
  attempt: number,
  elapsedMs: number,
  elsewhereMs?: number
): Effect.Effect<RetryDecision> =>
  Effect.gen(function*() {
    const errorClass = classify(error)
    const declined = (reason: RetryReason, retryAfterMs?: number): RetryDecision => ({
      retry: false,
      reason,
      delayMs: 0,
      errorClass,
      attempt,
      ...(retryAfterMs !== undefined ? { retryAfterMs } : {})
    })
    if (!retryableWithClass(policy, error, errorClass)) return declined("policy_declined")
    const now = yield* Clock.currentTimeMillis
    const retryAfterMs = retryAfterOf(error, now)
    // another resource of the pool serves sooner than the throttled one: the wait is its
    const sooner = retryAfterMs !== undefined && elsewhereMs !== undefined && elsewhereMs >= 0 &&
        elsewhereMs < retryAfterMs
      ? elsewhereMs
      : undefined
    const ceiling = maxServerDelayMs(policy)
    if (retryAfterMs !== undefined && (sooner ?? retryAfterMs) > ceiling) {
      return { ...declined("server_delay", retryAfterMs), message: serverDelayMessage(retryAfterMs, now + retryAfterMs, ceiling) }
    }
    if (attempt >= policy.maxAttempts) return declined("attempts_exhausted")
    let delayMs: number
    if (sooner !== undefined) {
      const u = policy.jitter === "none" ? 0 : yield* Random.next
      delayMs = Math.max(applyJitter(policy.jitter, backoffMs(policy, attempt), u), sooner)
    } else if (retryAfterMs !== undefined) {
      delayMs = retryAfterMs
    } else {
      const u = policy.jitter === "none" ? 0 : yield* Random.next
      delayMs = applyJitter(policy.jitter, backoffMs(policy, attempt), u)
    }
    if (policy.maxTotal !== undefined && elapsedMs + delayMs > Duration.toMillis(policy.maxTotal)) {
      return declined("total_budget", retryAfterMs)
    }
    return {
      retry: true,
      reason: "retryable",
      delayMs,
      errorClass,
      attempt,
      ...(retryAfterMs !== undefined ? { retryAfterMs } : {})
    } satisfies RetryDecision
  })
