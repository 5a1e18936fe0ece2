/**
 * Simulated work: built-in tasks that exercise retries, pools, leases and concurrency with no
 * network anywhere. They are what the docs, the examples and the runner's own tests use.
 *
 * - {@link echo}: returns its input;
 * - {@link delay}: waits on `Clock`, returns its input;
 * - {@link flaky}: fails its first `failTimes` attempts of each pipeline, then succeeds;
 * - {@link boom}: always fails, with the error class you ask for;
 * - {@link leaky}: takes a raw lease and never gives it back (for reclaim / `strictLeases`);
 * - {@link simulateLlm}: acquire → wait → report usage → return: the workhorse for pools and
 *   backoff.
 *
 * **Identity.** Every factory records its behaviour parameters in the task's `parameters`
 * (apart from the user's `config`), so `delay("1 second")` and `delay("2 seconds")` give
 * different pipeline ids, and a declarative override of `config` cannot erase them.
 *
 * **Definition errors.** Like `Task.make`, every factory throws a `ConfigError` (with field
 * paths) when given a malformed parameter or an unknown option key (a typo in a config file
 * must not be silently ignored): a definition is a programming mistake.
 *
 * **Time and randomness** come from Effect's `Clock` and from a `Random` seeded with the
 * attempt's `ctx.seed`, so tests run on `TestClock` and every run of the same pipeline draws
 * the same outcomes.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Option, Random, Schema } from "effect"
import {
  ConfigError,
  type ConfigIssue,
  ErrorClass,
  FatalError,
  isErrorClass,
  RetryableError
} from "../../domain/Errors.js"
import type { AcquireError, AlgorithmInput, Selector } from "../../domain/Lease.js"
import type { RetryPolicy, RetryPolicyInput } from "../../domain/RetryPolicy.js"
import * as Task from "../../domain/Task.js"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * A failure caused by bad data (class `invalid`: not retried by default). What the mock
 * tasks raise for `errorClass: "invalid"`; the `errorClass` field is what `classify` reads,
 * so the class survives a round trip through the store.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidValueError extends Schema.TaggedError<InvalidValueError>("assay/InvalidValueError")(
  "InvalidValueError",
  {
    message: Schema.String,
    errorClass: Schema.optionalWith(Schema.Literal("invalid"), { default: () => "invalid" as const })
  }
) {}

/**
 * The errors the mock tasks fail with: a {@link RetryableError} carrying the asked class
 * (no explicit class for `"retryable"`), a {@link FatalError} for `"fatal"`, an
 * {@link InvalidValueError} for `"invalid"`.
 *
 * @since 0.1.0
 * @category models
 */
export type MockError = RetryableError | FatalError | InvalidValueError

/**
 * Builds the error a mock task fails with for an error class (see {@link MockError}).
 * `classify(mockError(c, m))` is `c` for every class.
 *
 * @since 0.1.0
 * @category constructors
 */
export const mockError = (errorClass: ErrorClass, message: string): MockError => {
  switch (errorClass) {
    case "fatal":
      return new FatalError({ message })
    case "invalid":
      return new InvalidValueError({ message })
    case "retryable":
      return new RetryableError({ message })
    default:
      return new RetryableError({ message, errorClass })
  }
}

// ---------------------------------------------------------------------------------------------
// Options and validation
// ---------------------------------------------------------------------------------------------

/**
 * Options every mock factory accepts, passed on to the task definition:
 *
 * - `name`: replaces the default name (`"delay"`, `"flaky"`, …);
 * - `retry`: the task's retry policy (default: one attempt, no retry);
 * - `timeout`: per-attempt limit, applied by the runner (`null`: none);
 * - `version`, `config`: as in `Task.make` (`config` stays apart from the factory's
 *   `parameters`).
 *
 * @since 0.1.0
 * @category models
 */
export interface MockOptions {
  readonly name?: string | undefined
  readonly retry?: RetryPolicy | RetryPolicyInput | undefined
  readonly timeout?: Duration.DurationInput | null | undefined
  readonly version?: string | null | undefined
  readonly config?: Task.JsonObject | undefined
}

const taskOptions = (o: MockOptions): Task.BaseOptions => {
  const out: { -readonly [K in keyof Task.BaseOptions]: Task.BaseOptions[K] } = {}
  if (o.retry !== undefined) out.retry = o.retry
  if (o.timeout !== undefined) out.timeout = o.timeout
  if (o.version !== undefined) out.version = o.version
  if (o.config !== undefined) out.config = o.config
  return out
}

const fail = (task: string, issues: ReadonlyArray<ConfigIssue>): never => {
  throw new ConfigError({
    message: `${task}: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
    issues
  })
}

const checkClass = (value: unknown, path: string, issues: Array<ConfigIssue>): ErrorClass => {
  if (isErrorClass(value)) return value
  issues.push({
    path,
    message: `${JSON.stringify(value) ?? String(value)} is not an error class`,
    suggestion: `one of ${ErrorClass.literals.join(", ")}`
  })
  return "retryable"
}

/** A finite, non-negative duration in milliseconds, or an issue. */
const checkDuration = (value: unknown, path: string, issues: Array<ConfigIssue>): number => {
  // Effect clamps a negative input to zero; a negative duration is a mistake here.
  const negative = (typeof value === "number" && value < 0) ||
    (typeof value === "string" && value.trim().startsWith("-"))
  const d = Duration.decodeUnknown(value)
  if (negative || Option.isNone(d) || !Duration.isFinite(d.value)) {
    issues.push({
      path,
      message: `${JSON.stringify(value) ?? String(value)} is not a finite, non-negative duration`,
      suggestion: "write a Duration input such as \"250 millis\" or a number of milliseconds"
    })
    return 0
  }
  return Duration.toMillis(d.value)
}

const commonKeys = ["name", "retry", "timeout", "version", "config"] as const

/** Unknown option keys are mistakes (a typo in a config file must not be ignored). */
const checkKeys = (
  options: object,
  extra: ReadonlyArray<string>,
  issues: Array<ConfigIssue>
): void => {
  const known = new Set<string>([...commonKeys, ...extra])
  for (const key of Object.keys(options)) {
    if (!known.has(key)) {
      issues.push({
        path: key,
        message: `unknown option "${key}"`,
        suggestion: `known options: ${[...known].join(", ")}`
      })
    }
  }
}

const checkName = (value: unknown, issues: Array<ConfigIssue>): void => {
  if (value !== undefined && (typeof value !== "string" || value.trim() === "")) {
    issues.push({ path: "name", message: "name must be a non-empty string" })
  }
}

// ---------------------------------------------------------------------------------------------
// echo
// ---------------------------------------------------------------------------------------------

/**
 * Returns its input unchanged. A task value, not a factory. Its type is `Task<unknown, any>`
 * so that it fits anywhere in a chain (it accepts any input, and its output is accepted by any
 * next task; in a fanout it adds no constraint to the group's input); use {@link echoOf} for a
 * precisely typed view of the same task.
 *
 * @since 0.1.0
 * @category tasks
 */
export const echo: Task.Task<unknown, any> = Task.make(
  "echo",
  { codeDigest: "assay.echo/v1" },
  (input: unknown) => Effect.succeed(input)
)

/**
 * The {@link echo} task typed as `Task<A, A>` (the same value; same identity).
 *
 * @since 0.1.0
 * @category tasks
 */
export const echoOf = <A>(): Task.Task<A, A> => echo

// ---------------------------------------------------------------------------------------------
// delay
// ---------------------------------------------------------------------------------------------

/**
 * Waits `duration` on Effect's `Clock` (so `TestClock` drives it), then returns its input.
 * `duration` is any `Duration.DurationInput` (a number is milliseconds); recorded as
 * `parameters: { delayMs }`. Interruptible while waiting. Default name `"delay"`.
 *
 * Throws `ConfigError` for a negative, infinite or unparseable duration.
 *
 * @since 0.1.0
 * @category tasks
 */
export const delay = <A = any>(duration: Duration.DurationInput, options: MockOptions = {}): Task.Task<A, A> => {
  const issues: Array<ConfigIssue> = []
  checkKeys(options, [], issues)
  checkName(options.name, issues)
  const delayMs = checkDuration(duration, "duration", issues)
  if (issues.length > 0) fail("delay", issues)
  return Task.make(
    options.name ?? "delay",
    { ...taskOptions(options), parameters: { delayMs }, codeDigest: "assay.delay/v1" },
    (input: A) => Effect.as(Effect.sleep(Duration.millis(delayMs)), input)
  )
}

// ---------------------------------------------------------------------------------------------
// flaky
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link flaky}: `errorClass` of the failures (default `"retryable"`; see
 * {@link MockError}) and their `message` (default `"flaky: attempt <n> of <failTimes>
 * failing"`).
 *
 * @since 0.1.0
 * @category models
 */
export interface FlakyOptions extends MockOptions {
  readonly errorClass?: ErrorClass | undefined
  readonly message?: string | undefined
}

/**
 * Fails the first `failTimes` attempts (default 2) of each pipeline, then returns its input.
 * The attempt number comes from `ctx.attempt`, not from a counter, so the behaviour is the
 * same in every run, on resume and across processes: attempt n fails iff `n <= failTimes`.
 * Give it a `retry` with `maxAttempts > failTimes` to see it succeed. Recorded as
 * `parameters: { failTimes, errorClass, message }` (`message` `null` when defaulted).
 * Default name `"flaky"`.
 *
 * Throws `ConfigError` when `failTimes` is not a non-negative integer or the class is
 * unknown.
 *
 * @since 0.1.0
 * @category tasks
 */
export const flaky = <A = any>(failTimes: number = 2, options: FlakyOptions = {}): Task.Task<A, A, MockError> => {
  const issues: Array<ConfigIssue> = []
  checkKeys(options, ["errorClass", "message"], issues)
  checkName(options.name, issues)
  if (!Number.isInteger(failTimes) || failTimes < 0) {
    issues.push({ path: "failTimes", message: `failTimes must be a non-negative integer, got ${String(failTimes)}` })
  }
  const errorClass = checkClass(options.errorClass ?? "retryable", "errorClass", issues)
  if (options.message !== undefined && typeof options.message !== "string") {
    issues.push({ path: "message", message: "message must be a string" })
  }
  if (issues.length > 0) fail("flaky", issues)
  const message = options.message
  return Task.make(
    options.name ?? "flaky",
    {
      ...taskOptions(options),
      parameters: { failTimes, errorClass, message: message ?? null },
      codeDigest: "assay.flaky/v1"
    },
    (input: A, ctx) =>
      ctx.attempt <= failTimes ?
        Effect.fail(mockError(errorClass, message ?? `flaky: attempt ${ctx.attempt} of ${failTimes} failing`)) :
        Effect.succeed(input)
  )
}

// ---------------------------------------------------------------------------------------------
// boom
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link boom}: `errorClass` of the failure (default `"retryable"`; see
 * {@link MockError}).
 *
 * @since 0.1.0
 * @category models
 */
export interface BoomOptions extends MockOptions {
  readonly errorClass?: ErrorClass | undefined
}

/**
 * Always fails with `message` (default `"boom"`) and the asked class: `"retryable"` (a
 * `RetryableError`), `"fatal"` (a `FatalError`, never retried), `"invalid"` (an
 * {@link InvalidValueError}), or any other {@link ErrorClass} (a `RetryableError` carrying
 * it). Recorded as `parameters: { message, errorClass }`. Default name `"boom"`.
 *
 * Throws `ConfigError` for an unknown class or a non-string message.
 *
 * @since 0.1.0
 * @category tasks
 */
export const boom = <A = any>(message: string = "boom", options: BoomOptions = {}): Task.Task<A, never, MockError> => {
  const issues: Array<ConfigIssue> = []
  checkKeys(options, ["errorClass"], issues)
  checkName(options.name, issues)
  if (typeof message !== "string") issues.push({ path: "message", message: "message must be a string" })
  const errorClass = checkClass(options.errorClass ?? "retryable", "errorClass", issues)
  if (issues.length > 0) fail("boom", issues)
  return Task.make(
    options.name ?? "boom",
    { ...taskOptions(options), parameters: { message, errorClass }, codeDigest: "assay.boom/v1" },
    (_input: A) => Effect.fail(mockError(errorClass, message))
  )
}

// ---------------------------------------------------------------------------------------------
// leaky
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link leaky}: the `pool` to take the lease from (default: the task's
 * `resource`, else the only pool), and the task's `resource` / `algorithm`.
 *
 * @since 0.1.0
 * @category models
 */
export interface LeakyOptions extends MockOptions {
  readonly pool?: string | undefined
  readonly resource?: string | null | undefined
  readonly algorithm?: AlgorithmInput | null | undefined
}

/**
 * Takes a lease through the escape hatch (`ctx.acquireLease`) and deliberately never gives
 * it back, then returns its input: the runner's reclaim at the end of the attempt finds it,
 * counts it as leaked (`lease.leaked`), and under `strictLeases` fails the task with
 * `LeaseLeakError`. Recorded as `parameters: { pool }` (`null` when defaulted). Default name
 * `"leaky"`. Fails with the acquire's errors.
 *
 * @since 0.1.0
 * @category tasks
 */
export const leaky = <A = any>(options: LeakyOptions = {}): Task.Task<A, A, AcquireError> => {
  const issues: Array<ConfigIssue> = []
  checkKeys(options, ["pool", "resource", "algorithm"], issues)
  checkName(options.name, issues)
  if (options.pool !== undefined && (typeof options.pool !== "string" || options.pool === "")) {
    issues.push({ path: "pool", message: "pool must be a non-empty string" })
  }
  if (issues.length > 0) fail("leaky", issues)
  const pool = options.pool
  const base: Task.BaseOptions = {
    ...taskOptions(options),
    ...(options.resource !== undefined ? { resource: options.resource } : {}),
    ...(options.algorithm !== undefined ? { algorithm: options.algorithm } : {})
  }
  return Task.make(
    options.name ?? "leaky",
    { ...base, parameters: { pool: pool ?? null }, codeDigest: "assay.leaky/v1" },
    (input: A, ctx) => Effect.as(ctx.acquireLease(pool === undefined ? undefined : { pool }), input)
  )
}

// ---------------------------------------------------------------------------------------------
// simulateLlm
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link simulateLlm}:
 *
 * - `latency`: how long one call takes, on `Clock` (default `"5 millis"`);
 * - `failRate`: probability in `[0, 1]` that a call fails (default 0);
 * - `errorClass`: the class of a failed call (default `"rate_limit"`);
 * - `tokens`: tokens reported as usage per successful call (non-negative integer, default 32);
 * - `resource`: the pool to lease from (becomes the task's `resource`);
 * - `selector`: which resources may serve it (`id`, `kind`, `tags`, `options`; a `where`
 *   predicate is refused because it cannot be part of the identity);
 * - `algorithm`: the task's acquire algorithm.
 *
 * @since 0.1.0
 * @category models
 */
export interface SimulateLlmOptions extends MockOptions {
  readonly latency?: Duration.DurationInput | undefined
  readonly failRate?: number | undefined
  readonly errorClass?: ErrorClass | undefined
  readonly tokens?: number | undefined
  readonly resource?: string | undefined
  readonly selector?: Omit<Selector, "where"> | undefined
  readonly algorithm?: AlgorithmInput | null | undefined
}

/**
 * What {@link simulateLlm} returns: its `input`, a deterministic `answer` string, the
 * `tokens` reported, the id of the resource that served it (`resourceId`), and the
 * simulated `latencyMs` (milliseconds, measured on `Clock`).
 *
 * @since 0.1.0
 * @category models
 */
export interface SimulatedLlmOutput<A> {
  readonly input: A
  readonly answer: string
  readonly tokens: number
  readonly resourceId: string
  readonly latencyMs: number
}

/**
 * The failure draw of one attempt: the first value of Effect's seeded PRNG
 * `Random.make(seed)` (uniform in `[0, 1)`). Pure and stable across processes for a given
 * seed.
 *
 * @since 0.1.0
 * @category tasks
 */
export const drawFor = (seed: number): Effect.Effect<number> => Random.make(seed).next

/**
 * A simulated LLM call, shaped like a real one: lease a resource for the call (scoped, so it
 * is released on every exit path) → wait `latency` on `Clock` → decide failure → report to
 * the pool → return.
 *
 * **Failure draw (deterministic).** The call fails when `drawFor(ctx.seed) < failRate`.
 * `ctx.seed` is derived by the runner from (pipeline id, seq, attempt), so the same attempt
 * of the same pipeline fails or succeeds identically in every run and on resume, while a
 * retry (another attempt) draws anew. `failRate: 0` never fails, `failRate: 1` always does.
 *
 * On failure it reports `{ ok: false, latencyMs, error }` (which drives the resource's
 * health) and fails with {@link mockError}`(errorClass)`: a `RetryableError` of class
 * `rate_limit` by default. On success it reports `{ ok: true, latencyMs, usage: { tokens } }`
 * and returns a {@link SimulatedLlmOutput}. Fails also with the acquire's errors.
 *
 * Recorded as `parameters: { latencyMs, failRate, errorClass, tokens, selector }`; the
 * task's `resource` is `resource`. Default name `"simulateLlm"`. Replace the sleep with an
 * HTTP call and this is a real task.
 *
 * Throws `ConfigError` for a bad latency, a `failRate` outside `[0, 1]`, a negative or
 * fractional `tokens`, an unknown class, or a selector that is not strict JSON.
 *
 * @since 0.1.0
 * @category tasks
 */
export const simulateLlm = <A = any>(
  options: SimulateLlmOptions = {}
): Task.Task<A, SimulatedLlmOutput<A>, MockError | AcquireError> => {
  const issues: Array<ConfigIssue> = []
  checkKeys(options, ["latency", "failRate", "errorClass", "tokens", "resource", "selector", "algorithm"], issues)
  checkName(options.name, issues)
  const latencyMs = checkDuration(options.latency ?? "5 millis", "latency", issues)
  const failRate = options.failRate ?? 0
  if (typeof failRate !== "number" || !(failRate >= 0 && failRate <= 1)) {
    issues.push({ path: "failRate", message: `failRate must be a number in [0, 1], got ${String(failRate)}` })
  }
  const errorClass = checkClass(options.errorClass ?? "rate_limit", "errorClass", issues)
  const tokens = options.tokens ?? 32
  if (!Number.isInteger(tokens) || tokens < 0) {
    issues.push({ path: "tokens", message: `tokens must be a non-negative integer, got ${String(tokens)}` })
  }
  const selector = options.selector ?? {}
  if ("where" in selector) {
    issues.push({
      path: "selector.where",
      message: "a where predicate cannot be part of the task identity",
      suggestion: "select with id, kind, tags or options"
    })
  }
  if (issues.length > 0) fail("simulateLlm", issues)
  const { id, kind, options: selectOptions, tags } = selector
  const selectorJson: Record<string, unknown> = {}
  if (id !== undefined) selectorJson["id"] = id
  if (kind !== undefined) selectorJson["kind"] = kind
  if (tags !== undefined) selectorJson["tags"] = tags
  if (selectOptions !== undefined) selectorJson["options"] = selectOptions
  const acquireOptions: Selector = { ...selectorJson }
  const base: Task.BaseOptions = {
    ...taskOptions(options),
    ...(options.resource !== undefined ? { resource: options.resource } : {}),
    ...(options.algorithm !== undefined ? { algorithm: options.algorithm } : {})
  }
  return Task.make(
    options.name ?? "simulateLlm",
    {
      ...base,
      // A selector that is not strict JSON is reported by Task.make as a parameters issue.
      parameters: { latencyMs, failRate, errorClass, tokens, selector: selectorJson as Task.JsonObject },
      codeDigest: "assay.simulateLlm/v1"
    },
    (input: A, ctx) =>
      Effect.scoped(
        Effect.gen(function*() {
          const lease = yield* ctx.acquire(acquireOptions)
          const start = yield* Clock.currentTimeMillis
          yield* Effect.sleep(Duration.millis(latencyMs))
          const elapsed = (yield* Clock.currentTimeMillis) - start
          const u = yield* drawFor(ctx.seed)
          if (u < failRate) {
            const error = mockError(
              errorClass,
              `simulated ${errorClass} failure from ${lease.resource.id} (attempt ${ctx.attempt})`
            )
            yield* lease.report({ ok: false, latencyMs: elapsed, error })
            return yield* error
          }
          yield* lease.report({ ok: true, latencyMs: elapsed, usage: { tokens } })
          return {
            input,
            answer: `simulated answer ${(ctx.seed >>> 0).toString(16).padStart(8, "0")}`,
            tokens,
            resourceId: lease.resource.id,
            latencyMs: elapsed
          } satisfies SimulatedLlmOutput<A>
        })
      )
  )
}
