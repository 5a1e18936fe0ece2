/**
 * Tasks: the unary steps a pipeline is made of, and their identity.
 *
 * A task is a value `(input: In, ctx: TaskContext) => Effect<Out, E, R>` plus the declared
 * behaviour the runner honours (default resource pool, acquire algorithm, retry policy,
 * per-attempt timeout) and the declared facts that make up its identity (config, version,
 * factory parameters, nested children, a digest of its code). `R` flows through the types: a
 * pipeline built from tasks that need services needs those services to run.
 *
 * **Definition errors.** A task is defined at module load, from literals written by the
 * programmer, so a malformed definition is a programming mistake. Every constructor here and
 * {@link withOverrides} therefore *throws* a {@link ConfigError} listing every problem at once,
 * each with its field path (`config.when`, `retry.maxAttempts`, `timeout`). Code that builds
 * tasks from data (the declarative loader) wraps the call in {@link tryDefine} to get an
 * `Either` instead. `Pipeline.make` follows the same rule.
 *
 * Nothing in this module performs I/O.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Either, Exit, Predicate, Schema } from "effect"
import { dual } from "effect/Function"
import type { Pipeable } from "effect/Pipeable"
import { pipeArguments } from "effect/Pipeable"
import { type CacheHitFn, type CacheKeyFn, type CacheOption, resolveTaskCache, type TaskCache } from "./CallCache.js"
import { ConfigError, type ConfigIssue, FatalError, PipelineBuildError } from "./Errors.js"
import { setShown, shownOf } from "./internal/shownText.js"
import { type EffectBody, markEffectBody, markSync, type SyncBody } from "./internal/syncRun.js"
import type * as Handoff from "./Handoff.js"
import { canonicalJson, digest, type Json } from "./Json.js"
import type { AlgorithmInput } from "./Lease.js"
import { identityFields, RetryPolicy, type RetryPolicyInput } from "./RetryPolicy.js"
import type { TaskContext } from "./TaskContext.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * A strict JSON object (string keys, strict JSON values): the shape of `config` and
 * `parameters`.
 *
 * @since 0.1.0
 * @category models
 */
export type JsonObject = { readonly [key: string]: Json }

/**
 * An acquire algorithm in its identity form: its name and its options, all strict JSON,
 * deep-copied at definition (`"backoff"` becomes `{ name: "backoff" }`).
 *
 * @since 0.1.0
 * @category models
 */
export type NormalizedAlgorithm = { readonly name: string; readonly [option: string]: Json }

/**
 * A user-supplied algorithm value (`{ _tag: "AcquireAlgorithm", ... }`), kept as given for
 * the runner. Its identity comes from its `fingerprint()` (strict JSON), or, without one,
 * from the task's `version`.
 *
 * @since 0.1.0
 * @category models
 */
export type AlgorithmInstance = {
  readonly _tag: "AcquireAlgorithm"
  readonly name?: string | undefined
  readonly fingerprint?: (() => unknown) | undefined
}

/**
 * The declared behaviour of a task after validation and normalisation.
 *
 * - `resource`: default pool for `ctx.acquire()` (`null`: none);
 * - `algorithm`: normalised algorithm config (`null`: the pool's own);
 * - `algorithmInstance`: the custom algorithm value when one was given, for the runner;
 * - `retry`: the retry policy (default {@link RetryPolicy.default}: one attempt);
 * - `timeout`: wall-clock limit of one attempt (`null`: none), applied by the runner;
 * - `config`: declared behaviour, a frozen deep copy taken at definition;
 * - `version`: explicit version of external or dynamic behaviour (`null`: none);
 * - `evaluator`: whether the runner runs the task blind (see `Evaluator.ts`: no study
 *   variables or member labels in its context, its input redacted); default `false`.
 * - `cache`: the task's call-cache declaration (`null`: none; see `CallCache`), never part of
 *   the task's identity;
 * - `cacheKey`: the task's own cache key material (`null`: its fingerprint and input);
 * - `onCacheHit`: what the runner runs when the cache serves the task's output (`null`: nothing).
 *
 * @since 0.1.0
 * @category models
 */
export interface ResolvedOptions {
  readonly resource: string | null
  readonly algorithm: NormalizedAlgorithm | null
  readonly algorithmInstance: AlgorithmInstance | null
  readonly retry: RetryPolicy
  readonly timeout: Duration.Duration | null
  readonly config: JsonObject
  readonly version: string | null
  readonly evaluator: boolean
  readonly cache: TaskCache | null
  readonly cacheKey: CacheKeyFn | null
  readonly onCacheHit: CacheHitFn | null
}

/**
 * A task. Build one with {@link make}, {@link sync} or {@link promise}; never mutate one
 * (every field is frozen; {@link withOverrides} returns a new task).
 *
 * - `run`: the task body; the runner wraps it with leases, timeout and retries;
 * - `codeDigest`: 32-hex digest of the body's source (or the `codeDigest` option);
 * - `inputSchema` / `outputSchema`: the declared Schemas, used by the pipeline's build-time
 *   check and by codecs (typed loosely here so that `In` stays contravariant; see
 *   {@link outputSchemaOf} for the typed view);
 * - `children`: nested tasks (a fanout's branches), part of the fingerprint;
 * - `parameters`: factory parameters, recorded separately from `config`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Task<in In, out Out, out E = never, out R = never> extends Pipeable {
  readonly _tag: "Task"
  readonly name: string
  readonly options: ResolvedOptions
  readonly run: (input: In, ctx: TaskContext) => Effect.Effect<Out, E, R>
  readonly codeDigest: string
  readonly inputSchema?: Schema.Schema.AnyNoContext | undefined
  readonly outputSchema?: Schema.Schema.AnyNoContext | undefined
  readonly children: ReadonlyArray<Any>
  readonly parameters: JsonObject
  /**
   * Whether `run` may use the per-attempt `Scope` (leases from `ctx.acquire`, finalizers).
   * `true` for Effect tasks ({@link make}); `false` for {@link sync} and {@link promise}
   * tasks, whose bodies cannot run a scoped Effect, so the runner opens no Scope for them.
   */
  readonly scoped: boolean
}

/**
 * Any task, whatever its types.
 *
 * @since 0.1.0
 * @category models
 */
export type Any = Task<any, any, any, any>

/**
 * The input type of a task.
 *
 * @since 0.1.0
 * @category type-level
 */
export type Input<T> = T extends Task<infer In, infer _Out, infer _E, infer _R> ? In : never

/**
 * The output type of a task: the values it passes to the next task. A {@link Handoff.Handoff}
 * directive the task may return instead (`(row) => Sample | Handoff`) is excluded: it never
 * reaches the next task as input, so the chain types `Sample` into the next task. A task that
 * only hands off has the output `never`, which any next task accepts.
 *
 * @since 0.1.0
 * @category type-level
 */
export type Output<T> = T extends Task<infer _In, infer Out, infer _E, infer _R> ? Exclude<Out, Handoff.Handoff>
  : never

/**
 * The error type of a task.
 *
 * @since 0.1.0
 * @category type-level
 */
export type Error<T> = T extends Task<infer _In, infer _Out, infer E, infer _R> ? E : never

/**
 * The requirements (services) of a task.
 *
 * @since 0.1.0
 * @category type-level
 */
export type Context<T> = T extends Task<infer _In, infer _Out, infer _E, infer R> ? R : never

/**
 * The options every constructor accepts (all optional):
 *
 * - `resource`: default pool name for `ctx.acquire()`;
 * - `algorithm`: a name (`"backoff"`), a name with options (`{ name: "backoff", cap: "60
 *   seconds" }`, options strict JSON), or a custom algorithm value;
 * - `retry`: a {@link RetryPolicy} or the plain object {@link RetryPolicy.make} takes;
 * - `timeout`: per-attempt wall-clock limit, any `Duration.DurationInput` (a number is ms);
 * - `config`: declared behaviour, strict JSON only, snapshotted (deep-copied) at definition;
 * - `version`: explicit version of behaviour the code digest cannot see;
 * - `parameters`: factory parameters (strict JSON), recorded apart from `config`;
 * - `children`: nested tasks (in order);
 * - `codeDigest`: replaces the digest of the function source;
 * - `evaluator`: `true` makes the task an evaluator: the runner runs it blind, with
 *   `ctx.variables = {}`, no suite or study member labels in its context, the store withheld
 *   and its input passed through the redaction of the trial's variable values (see
 *   `Evaluator.ts` and docs/judge.md). Part of the identity only when `true`.
 * - `cache`: the call cache for a task whose output is a pure function of its input and
 *   declared config: `true` (= `"readWrite"`), `false`, a mode (`"readWrite"`, `"readOnly"`,
 *   `"refresh"`, `"off"`) or `{ mode, ttl }` (see `CallCache.CacheOption`); a stored output is
 *   then served as an attempt with outcome `cache_hit` instead of running the body. Not part of
 *   the task's identity;
 * - `cacheKey`: the key material of the cache (see `CallCache.CacheKeyFn`; default: the task's
 *   fingerprint and its input);
 * - `onCacheHit`: run with the served output when the cache serves it instead of running the
 *   body, to redo what the body does beside returning its output (report its metrics: see
 *   `CallCache.CacheHitFn`; since 0.15.0).
 *
 * `null` is accepted for the nullable fields (`resource`, `algorithm`, `timeout`, `version`)
 * and means "none", as in {@link withOverrides}.
 *
 * @since 0.1.0
 * @category models
 */
export interface BaseOptions {
  readonly resource?: string | null | undefined
  readonly algorithm?: AlgorithmInput | null | undefined
  readonly retry?: RetryPolicy | RetryPolicyInput | undefined
  readonly timeout?: Duration.DurationInput | null | undefined
  readonly config?: JsonObject | undefined
  readonly version?: string | null | undefined
  readonly parameters?: JsonObject | undefined
  readonly children?: ReadonlyArray<Any> | undefined
  readonly codeDigest?: string | undefined
  readonly evaluator?: boolean | undefined
  readonly cache?: CacheOption | undefined
  readonly cacheKey?: CacheKeyFn | undefined
  readonly onCacheHit?: CacheHitFn | undefined
}

/**
 * {@link BaseOptions} plus the optional `input` / `output` Schemas; when given, the task's
 * `In` / `Out` types are inferred from them (their `Type` side).
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<In = any, Out = any> extends BaseOptions {
  readonly input?: Schema.Schema<In, any, never> | undefined
  readonly output?: Schema.Schema<Out, any, never> | undefined
}

// ---------------------------------------------------------------------------------------------
// Guards and helpers
// ---------------------------------------------------------------------------------------------

/**
 * Whether a value is a {@link Task}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isTask = (u: unknown): u is Any => Predicate.isObject(u) && (u as { _tag?: unknown })._tag === "Task"

/**
 * The task's output Schema typed with the task's `Out` (or `undefined` when none was
 * declared).
 *
 * @since 0.1.0
 * @category getters
 */
export const outputSchemaOf = <T extends Any>(task: T): Schema.Schema<Output<T>, any> | undefined =>
  task.outputSchema as Schema.Schema<Output<T>, any> | undefined

/**
 * The task's input Schema typed with the task's `In` (or `undefined` when none was declared).
 *
 * @since 0.1.0
 * @category getters
 */
export const inputSchemaOf = <T extends Any>(task: T): Schema.Schema<Input<T>, any> | undefined =>
  task.inputSchema as Schema.Schema<Input<T>, any> | undefined

/**
 * Runs a definition (a task, an override, a pipeline) and returns its definition error as a
 * `Left` instead of throwing it: for code that defines tasks from data and wants to collect
 * errors. Only {@link ConfigError} and {@link PipelineBuildError} are caught; anything else
 * thrown is a bug and is rethrown.
 *
 * @since 0.1.0
 * @category constructors
 */
export const tryDefine = <A>(define: () => A): Either.Either<A, ConfigError | PipelineBuildError> => {
  try {
    return Either.right(define())
  } catch (e) {
    if (e instanceof ConfigError || e instanceof PipelineBuildError) return Either.left(e)
    throw e
  }
}

// ---------------------------------------------------------------------------------------------
// Validation and normalisation (pure; collects issues)
// ---------------------------------------------------------------------------------------------

const deepFreeze = <A>(value: A): A => {
  if (value !== null && typeof value === "object") {
    for (const v of Object.values(value)) deepFreeze(v)
    Object.freeze(value)
  }
  return value
}

const strictJsonHint = "null, booleans, finite numbers, strings, arrays, plain objects"

/** Strict-JSON snapshot: a frozen deep copy, or an issue naming the offending path. */
const snapshotJson = (value: unknown, field: string, issues: Array<ConfigIssue>): Json | undefined => {
  const encoded = canonicalJson(value)
  if (Either.isLeft(encoded)) {
    issues.push({
      path: `${field}${encoded.left.path.slice(1)}`,
      message: `${encoded.left.reason} (${field} must be strict JSON: ${strictJsonHint})`
    })
    return undefined
  }
  return deepFreeze(JSON.parse(encoded.right) as Json)
}

const snapshotObject = (value: unknown, field: string, issues: Array<ConfigIssue>): JsonObject | undefined => {
  if (!Predicate.isObject(value) || Array.isArray(value) || typeof value === "function") {
    issues.push({ path: field, message: `${field} must be a JSON object, got ${describeValue(value)}` })
    return undefined
  }
  return snapshotJson(value, field, issues) as JsonObject | undefined
}

const describeValue = (u: unknown): string =>
  u === null ? "null" : Array.isArray(u) ? "an array" : typeof u === "object" ? "an object" : typeof u

const isAlgorithmInstance = (u: unknown): u is AlgorithmInstance =>
  Predicate.isObject(u) && (u as { _tag?: unknown })._tag === "AcquireAlgorithm"

const normalizeAlgorithm = (
  input: unknown,
  version: string | null,
  issues: Array<ConfigIssue>
): { readonly algorithm: NormalizedAlgorithm | null; readonly instance: AlgorithmInstance | null } => {
  const none = { algorithm: null, instance: null }
  if (input === null || input === undefined) return none
  if (typeof input === "string") {
    if (input.trim() === "") {
      issues.push({ path: "algorithm", message: "algorithm name must not be empty" })
      return none
    }
    return { algorithm: deepFreeze({ name: input }), instance: null }
  }
  if (isAlgorithmInstance(input)) {
    const name = typeof input.name === "string" && input.name !== "" ? input.name : "custom"
    if (typeof input.fingerprint === "function") {
      let fp: unknown
      try {
        fp = input.fingerprint()
      } catch (e) {
        issues.push({ path: "algorithm", message: `the algorithm's fingerprint() threw: ${String(e)}` })
        return none
      }
      const snap = snapshotJson(fp, "algorithm.fingerprint()", issues)
      if (snap === undefined) return none
      return { algorithm: deepFreeze({ name, fingerprint: snap }), instance: input }
    }
    if (version === null) {
      issues.push({
        path: "algorithm",
        message: `custom algorithm "${name}" has no fingerprint(), so its behaviour is not part of the task identity`,
        suggestion: "give the algorithm a fingerprint() returning strict JSON, or declare the task's version"
      })
      return none
    }
    return { algorithm: deepFreeze({ name, custom: true }), instance: input }
  }
  if (Predicate.isObject(input) && !Array.isArray(input)) {
    const record = input as Record<string, unknown>
    if (typeof record["name"] !== "string" || record["name"].trim() === "") {
      issues.push({ path: "algorithm.name", message: "an algorithm object needs a non-empty string name" })
      return none
    }
    const snap = snapshotJson(input, "algorithm", issues)
    if (snap === undefined) return none
    return { algorithm: snap as NormalizedAlgorithm, instance: null }
  }
  issues.push({
    path: "algorithm",
    message: `algorithm must be a name, { name, ...options } or an algorithm value, got ${describeValue(input)}`
  })
  return none
}

const keptAlgorithm = (
  kept: NonNullable<Definition["keepAlgorithm"]>,
  version: string | null,
  issues: Array<ConfigIssue>
): NonNullable<Definition["keepAlgorithm"]> => {
  const instance = kept.instance
  if (instance !== null && typeof instance.fingerprint !== "function" && version === null) {
    issues.push({
      path: "algorithm",
      message: `custom algorithm "${
        kept.algorithm?.name ?? "custom"
      }" has no fingerprint(), so the task needs a version`,
      suggestion: "keep the task's version, or give the algorithm a fingerprint() returning strict JSON"
    })
  }
  return kept
}

const resolveRetry = (input: unknown, issues: Array<ConfigIssue>): RetryPolicy => {
  if (input === undefined) return RetryPolicy.default
  if (input instanceof RetryPolicy) return input
  if (!Predicate.isObject(input) || Array.isArray(input)) {
    issues.push({ path: "retry", message: `retry must be a RetryPolicy or an object, got ${describeValue(input)}` })
    return RetryPolicy.default
  }
  const known = new Set([
    "maxAttempts",
    "on",
    "retryClassified",
    "retryUnknown",
    "base",
    "factor",
    "cap",
    "jitter",
    "maxTotal",
    "maxServerDelay"
  ])
  const unknownKeys = Object.keys(input).filter((k) => !known.has(k))
  for (const k of unknownKeys) issues.push({ path: `retry.${k}`, message: `unknown retry field "${k}"` })
  if (unknownKeys.length > 0) return RetryPolicy.default
  try {
    return RetryPolicy.make(input as RetryPolicyInput)
  } catch (e) {
    issues.push({ path: "retry", message: e instanceof globalThis.Error ? e.message : String(e) })
    return RetryPolicy.default
  }
}

const resolveTimeout = (input: unknown, issues: Array<ConfigIssue>): Duration.Duration | null => {
  if (input === null || input === undefined) return null
  const decoded = Duration.decodeUnknown(input)
  if (decoded._tag === "None") {
    issues.push({
      path: "timeout",
      message: `timeout ${JSON.stringify(input) ?? String(input)} is not a duration`,
      suggestion: "write a Duration input such as \"60 seconds\" or a number of milliseconds"
    })
    return null
  }
  const ms = Duration.toMillis(decoded.value)
  if (!Duration.isFinite(decoded.value) || !(ms > 0)) {
    issues.push({ path: "timeout", message: "timeout must be a finite, positive duration (null means none)" })
    return null
  }
  return decoded.value
}

const resolveOptionalString = (
  input: unknown,
  field: string,
  issues: Array<ConfigIssue>
): string | null => {
  if (input === null || input === undefined) return null
  if (typeof input !== "string" || input === "") {
    issues.push({ path: field, message: `${field} must be a non-empty string or null, got ${describeValue(input)}` })
    return null
  }
  return input
}

const resolveChildren = (input: unknown, issues: Array<ConfigIssue>): ReadonlyArray<Any> => {
  if (input === undefined) return Object.freeze([])
  if (!Array.isArray(input)) {
    issues.push({ path: "children", message: `children must be an array of tasks, got ${describeValue(input)}` })
    return Object.freeze([])
  }
  input.forEach((c, i) => {
    if (!isTask(c)) issues.push({ path: `children[${i}]`, message: "not a task" })
  })
  return Object.freeze([...input] as Array<Any>)
}

const optionKeys = new Set([
  "resource",
  "algorithm",
  "retry",
  "timeout",
  "config",
  "version",
  "parameters",
  "children",
  "codeDigest",
  "input",
  "output",
  "evaluator",
  "cache",
  "cacheKey",
  "onCacheHit"
])

const isSchema = (u: unknown): u is Schema.Schema.AnyNoContext => Schema.isSchema(u)

interface Definition {
  readonly name: unknown
  readonly options: Readonly<Record<string, unknown>>
  readonly run: unknown
  /** The function whose source is digested (the user's body, not a wrapper). */
  readonly source: unknown
  /** Whether `run` needs the per-attempt Scope (default `true`). */
  readonly scoped?: boolean | undefined
  /**
   * An algorithm already normalised (by an earlier definition) to keep as it is: a custom
   * algorithm's fingerprint is captured once, when the task is first defined.
   */
  readonly keepAlgorithm?: {
    readonly algorithm: NormalizedAlgorithm | null
    readonly instance: AlgorithmInstance | null
  } | undefined
}

const TaskProto = {
  _tag: "Task" as const,
  pipe() {
    // eslint-disable-next-line prefer-rest-params
    return pipeArguments(this, arguments)
  }
}

const build = <In, Out, E, R>(def: Definition): Task<In, Out, E, R> => {
  const issues: Array<ConfigIssue> = []
  const name = typeof def.name === "string" ? def.name : ""
  if (typeof def.name !== "string" || def.name.trim() === "") {
    issues.push({ path: "name", message: "a task needs a non-empty string name" })
  }
  const o = def.options
  for (const key of Object.keys(o)) {
    if (!optionKeys.has(key)) issues.push({ path: key, message: `unknown task option "${key}"` })
  }
  if (typeof def.run !== "function") issues.push({ path: "run", message: "a task needs a function" })
  const resource = resolveOptionalString(o["resource"], "resource", issues)
  const version = resolveOptionalString(o["version"], "version", issues)
  const { algorithm, instance } = def.keepAlgorithm === undefined ?
    normalizeAlgorithm(o["algorithm"], version, issues) :
    keptAlgorithm(def.keepAlgorithm, version, issues)
  const retry = resolveRetry(o["retry"], issues)
  const timeout = resolveTimeout(o["timeout"], issues)
  const config = o["config"] === undefined ? deepFreeze({}) : snapshotObject(o["config"], "config", issues)
  const parameters = o["parameters"] === undefined ?
    deepFreeze({}) :
    snapshotObject(o["parameters"], "parameters", issues)
  const children = resolveChildren(o["children"], issues)
  const evaluator = o["evaluator"] === undefined ? false : o["evaluator"]
  if (typeof evaluator !== "boolean") {
    issues.push({ path: "evaluator", message: `evaluator must be true or false, got ${describeValue(evaluator)}` })
  }
  const cache = resolveTaskCache(o["cache"], "cache", issues) ?? null
  const cacheKey = o["cacheKey"]
  if (cacheKey !== undefined && cacheKey !== null && typeof cacheKey !== "function") {
    issues.push({ path: "cacheKey", message: "cacheKey must be a function (input, env) => Effect<Json | undefined>" })
  }
  const onCacheHit = o["onCacheHit"]
  if (onCacheHit !== undefined && onCacheHit !== null && typeof onCacheHit !== "function") {
    issues.push({ path: "onCacheHit", message: "onCacheHit must be a function (output, ctx) => Effect<void>" })
  }
  const input = o["input"]
  const output = o["output"]
  if (input !== undefined && !isSchema(input)) issues.push({ path: "input", message: "input must be a Schema" })
  if (output !== undefined && !isSchema(output)) issues.push({ path: "output", message: "output must be a Schema" })
  let codeDigest = ""
  if (o["codeDigest"] !== undefined) {
    if (typeof o["codeDigest"] !== "string" || o["codeDigest"] === "") {
      issues.push({ path: "codeDigest", message: "codeDigest must be a non-empty string" })
    } else {
      codeDigest = o["codeDigest"]
    }
  } else if (typeof def.source === "function") {
    codeDigest = digest(Function.prototype.toString.call(def.source))
  }
  if (issues.length > 0) {
    const label = name === "" ? "task" : `task "${name}"`
    throw new ConfigError({
      message: `${label}: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
      issues
    })
  }
  const task = Object.create(TaskProto) as { -readonly [K in keyof Task<In, Out, E, R>]: Task<In, Out, E, R>[K] }
  task.name = name
  task.options = Object.freeze({
    resource,
    algorithm,
    algorithmInstance: instance,
    retry,
    timeout,
    config: config!,
    version,
    evaluator: evaluator === true,
    cache,
    cacheKey: typeof cacheKey === "function" ? cacheKey as CacheKeyFn : null,
    onCacheHit: typeof onCacheHit === "function" ? onCacheHit as CacheHitFn : null
  })
  task.run = def.run as Task<In, Out, E, R>["run"]
  task.codeDigest = codeDigest
  if (input !== undefined) task.inputSchema = input as Schema.Schema.AnyNoContext
  if (output !== undefined) task.outputSchema = output as Schema.Schema.AnyNoContext
  task.children = children
  task.parameters = parameters!
  task.scoped = def.scoped ?? true
  return Object.freeze(task) as Task<In, Out, E, R>
}

/** Splits `(name, fn)` / `(name, options, fn)`. */
const splitArgs = (args: ReadonlyArray<unknown>): { options: Record<string, unknown>; fn: unknown } => {
  if (args.length >= 3) {
    const options = args[1]
    if (options !== undefined && (!Predicate.isObject(options) || Array.isArray(options))) {
      throw new ConfigError({
        message: `task "${String(args[0])}": options must be an object`,
        issues: [{ path: "options", message: "options must be an object" }]
      })
    }
    return { options: (options ?? {}) as Record<string, unknown>, fn: args[2] }
  }
  return { options: {}, fn: args[1] }
}

// ---------------------------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------------------------

/**
 * Defines a task from an Effect function `(input, ctx) => Effect<Out, E, R>`.
 *
 * `make(name, fn)` or `make(name, options, fn)` (see {@link Options}); with `input` /
 * `output` Schemas the `In` / `Out` types are inferred from them. A body whose branches
 * return different Effects (`ok ? Effect.succeed(row) : Effect.succeed(Handoff.rewind(...))`)
 * is typed from its whole return type (`Out = Sample | Handoff`); with an `output` Schema, the
 * body may also return a `Handoff` directive. A synchronous throw from `fn` (before it returns
 * an Effect) is a defect, as everywhere in Effect.
 *
 * Throws {@link ConfigError} (with every issue and its path) on a malformed definition.
 *
 * @since 0.1.0
 * @category constructors
 */
export function make<In, Out, E = never, R = never>(
  name: string,
  fn: (input: In, ctx: TaskContext) => Effect.Effect<Out, E, R>
): Task<In, Out, E, R>
export function make<In, Out, Ret extends Out | Handoff.Handoff, E = never, R = never>(
  name: string,
  options: Options<In, Out> & { readonly output: Schema.Schema<Out, any, never> },
  fn: (input: In, ctx: TaskContext) => Effect.Effect<Ret, E, R>
): Task<In, Out | Extract<Ret, Handoff.Handoff>, E, R>
export function make<In, Out, E = never, R = never>(
  name: string,
  options: Options<In, Out>,
  fn: (input: In, ctx: TaskContext) => Effect.Effect<Out, E, R>
): Task<In, Out, E, R>
export function make<In, Ret extends Effect.Effect<any, any, any>>(
  name: string,
  fn: (input: In, ctx: TaskContext) => Ret
): Task<In, Effect.Effect.Success<Ret>, Effect.Effect.Error<Ret>, Effect.Effect.Context<Ret>>
export function make<In, Out, Ret extends Effect.Effect<Out | Handoff.Handoff, any, any>>(
  name: string,
  options: Options<In, Out> & { readonly output: Schema.Schema<Out, any, never> },
  fn: (input: In, ctx: TaskContext) => Ret
): Task<
  In,
  Out | Extract<Effect.Effect.Success<Ret>, Handoff.Handoff>,
  Effect.Effect.Error<Ret>,
  Effect.Effect.Context<Ret>
>
export function make<In, Ret extends Effect.Effect<any, any, any>>(
  name: string,
  options: Options<In> & { readonly output?: undefined },
  fn: (input: In, ctx: TaskContext) => Ret
): Task<In, Effect.Effect.Success<Ret>, Effect.Effect.Error<Ret>, Effect.Effect.Context<Ret>>
export function make(name: string, ...rest: ReadonlyArray<unknown>): Any {
  const { fn, options } = splitArgs([name, ...rest])
  const f = fn as (input: unknown, ctx: TaskContext) => Effect.Effect<unknown, unknown, unknown>
  return build({
    name,
    options,
    source: fn,
    run: typeof fn === "function"
      ? markEffectBody((input: unknown, ctx: TaskContext) => Effect.suspend(() => f(input, ctx)), f as EffectBody)
      : fn
  })
}

/**
 * The `run` of a `Task.sync` task over `f`, marked synchronous (the runner may run the next
 * synchronous task before this one's checkpoint commits, and commit both together) with its
 * direct evaluation (the same exit without running an Effect; see `SyncBody`).
 */
const syncRun = (name: string, f: (input: unknown, ctx: TaskContext) => unknown) => {
  const direct = (input: unknown, ctx: TaskContext): Exit.Exit<unknown, unknown> => {
    let out: unknown
    try {
      out = f(input, ctx)
    } catch (thrown) {
      return Exit.fail(thrown)
    }
    return isThenable(out) ?
      Exit.fail(new FatalError({ message: `task "${name}" returned a Promise: define it with Task.promise` })) :
      Exit.succeed(out)
  }
  // one Effect step per call: this is the hot path of trivial tasks
  return markSync((input: unknown, ctx: TaskContext) => Effect.suspend(() => direct(input, ctx)), direct as SyncBody)
}

const isThenable = (u: unknown): boolean =>
  Predicate.isObject(u) && typeof (u as { then?: unknown }).then === "function"

/**
 * Defines a task from a plain synchronous function `(input, ctx) => Out`.
 *
 * A throw becomes a failure carrying the thrown value unchanged (`E = unknown`); the runner
 * classifies it later. Returning a Promise by mistake is a {@link FatalError} failure (never
 * retried) saying to use {@link promise}. A synchronous body cannot be interrupted, so a `timeout` only takes
 * effect between attempts.
 *
 * Throws {@link ConfigError} on a malformed definition (see {@link make}).
 *
 * @since 0.1.0
 * @category constructors
 */
export function sync<In, Out>(
  name: string,
  fn: (input: In, ctx: TaskContext) => Out
): Task<In, Out, unknown>
export function sync<In, Out, const Ret extends Out | Handoff.Handoff>(
  name: string,
  options: Options<In, Out> & { readonly output: Schema.Schema<Out, any, never> },
  fn: (input: In, ctx: TaskContext) => Ret
): Task<In, Out | Extract<Ret, Handoff.Handoff>, unknown>
export function sync<In, Out>(
  name: string,
  options: Options<In, Out>,
  fn: (input: In, ctx: TaskContext) => Out
): Task<In, Out, unknown>
export function sync(name: string, ...rest: ReadonlyArray<unknown>): Any {
  const { fn, options } = splitArgs([name, ...rest])
  return build({
    name,
    options,
    source: fn,
    scoped: typeof fn !== "function",
    run: typeof fn === "function" ? syncRun(name, fn as (input: unknown, ctx: TaskContext) => unknown) : fn
  })
}

/**
 * Defines a task from a Promise function `(input, ctx, signal) => Promise<Out>`.
 *
 * A rejection (or a synchronous throw) becomes a failure carrying the rejection value
 * unchanged (`E = unknown`). `signal` is an `AbortSignal` that fires when the attempt is
 * interrupted (timeout, Ctrl-C, a cancelled run): pass it to `fetch` and friends.
 *
 * Throws {@link ConfigError} on a malformed definition (see {@link make}).
 *
 * @since 0.1.0
 * @category constructors
 */
export function promise<In, Out>(
  name: string,
  fn: (input: In, ctx: TaskContext, signal: AbortSignal) => PromiseLike<Out>
): Task<In, Out, unknown>
export function promise<In, Out, const Ret extends Out | Handoff.Handoff>(
  name: string,
  options: Options<In, Out> & { readonly output: Schema.Schema<Out, any, never> },
  fn: (input: In, ctx: TaskContext, signal: AbortSignal) => PromiseLike<Ret>
): Task<In, Out | Extract<Ret, Handoff.Handoff>, unknown>
export function promise<In, Out>(
  name: string,
  options: Options<In, Out>,
  fn: (input: In, ctx: TaskContext, signal: AbortSignal) => PromiseLike<Out>
): Task<In, Out, unknown>
export function promise(name: string, ...rest: ReadonlyArray<unknown>): Any {
  const { fn, options } = splitArgs([name, ...rest])
  const f = fn as (input: unknown, ctx: TaskContext, signal: AbortSignal) => PromiseLike<unknown>
  return build({
    name,
    options,
    source: fn,
    scoped: typeof fn !== "function",
    run: typeof fn === "function" ?
      (input: unknown, ctx: TaskContext) =>
        Effect.tryPromise({ try: (signal) => f(input, ctx, signal), catch: (rejected) => rejected }) :
      fn
  })
}

// ---------------------------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link fingerprint}: `includeCode` (default `true`) adds the code digests, of
 * this task and of its children.
 *
 * @since 0.1.0
 * @category models
 */
export interface FingerprintOptions {
  readonly includeCode?: boolean | undefined
}

/**
 * The JSON that stands for a task in its pipeline's spec digest:
 * `{ name, resource, timeoutMs, retry, algorithm, config, version, parameters, children,
 * codeDigest? }` where `timeoutMs` is milliseconds or `null`, `retry` is the policy's
 * {@link identityFields} (maxAttempts, base, factor, cap, jitter; `on`, `retryClassified`,
 * `retryUnknown` and `maxTotal` are deliberately out), `children` are the children's
 * fingerprints in order (same `includeCode`), `evaluator: true` is present only for an
 * evaluator task (so no other task's identity changed when the option appeared), and
 * `codeDigest` is present only with `includeCode` (default true). Schemas, closures, clients and the pool's default algorithm
 * are not part of it: declare such behaviour in `config` or `version`.
 *
 * @since 0.1.0
 * @category identity
 */
export const fingerprint = (task: Any, options?: FingerprintOptions): Json => {
  const includeCode = options?.includeCode ?? true
  const o = task.options
  const fp: Record<string, Json> = {
    name: task.name,
    resource: o.resource,
    timeoutMs: o.timeout === null ? null : Duration.toMillis(o.timeout),
    retry: identityFields(o.retry),
    algorithm: o.algorithm,
    config: o.config,
    version: o.version,
    parameters: task.parameters,
    children: task.children.map((c) => fingerprint(c, { includeCode }))
  }
  // only when set: every task defined before evaluators existed keeps its identity
  if (o.evaluator) fp["evaluator"] = true
  if (includeCode) fp["codeDigest"] = task.codeDigest
  return fp
}

/**
 * A JSON summary of a task's resolved options (what `assay validate` prints): name,
 * resource, algorithm, retry (the policy's config-file form), `timeoutMs`, config, version,
 * `evaluator: true` (only for an evaluator), parameters, codeDigest, whether input/output
 * Schemas are declared, and children. A value a config file took from `${VAR}` is shown as
 * its config text (`"${API_TOKEN}"`) in `parameters` and `config`, never as the value (the
 * task runs with the value, and its identity digest is computed from it).
 *
 * @since 0.1.0
 * @category identity
 */
export const describe = (task: Any): Json => {
  const o = task.options
  const shown = shownOf(task)
  return {
    name: task.name,
    resource: o.resource,
    algorithm: o.algorithm,
    retry: Schema.encodeSync(RetryPolicy)(o.retry) as unknown as Json,
    timeoutMs: o.timeout === null ? null : Duration.toMillis(o.timeout),
    config: shown?.config ?? o.config,
    version: o.version,
    ...(o.evaluator ? { evaluator: true } : {}),
    parameters: shown?.parameters ?? task.parameters,
    codeDigest: task.codeDigest,
    inputSchema: task.inputSchema !== undefined,
    outputSchema: task.outputSchema !== undefined,
    children: task.children.map(describe)
  }
}

// ---------------------------------------------------------------------------------------------
// Overrides
// ---------------------------------------------------------------------------------------------

/**
 * The marker for "not given" in {@link withOverrides}, even when the key is present: a
 * builder that always forwards the same set of keys passes `UNSET` for what its caller did
 * not mention, and the task keeps its current value.
 *
 * @since 0.1.0
 * @category overrides
 */
export const UNSET: unique symbol = Symbol.for("assay/Task/UNSET")

/**
 * The type of {@link UNSET}.
 *
 * @since 0.1.0
 * @category overrides
 */
export type Unset = typeof UNSET

/**
 * What {@link withOverrides} accepts. Every key is optional; `UNSET` means "not given";
 * `null` clears the nullable fields (`resource`, `algorithm`, `timeout`, `version`). The
 * other fields are not nullable: clear `config` / `parameters` with `{}` and `children` with
 * `[]`.
 *
 * @since 0.1.0
 * @category overrides
 */
export interface Overrides<In = any, Out = any, E = any, R = any> {
  readonly name?: string | Unset
  readonly resource?: string | null | Unset
  readonly algorithm?: AlgorithmInput | null | Unset
  readonly retry?: RetryPolicy | RetryPolicyInput | Unset
  readonly timeout?: Duration.DurationInput | null | Unset
  readonly config?: JsonObject | Unset
  readonly version?: string | null | Unset
  readonly parameters?: JsonObject | Unset
  readonly children?: ReadonlyArray<Any> | Unset
  readonly run?: ((input: In, ctx: TaskContext) => Effect.Effect<Out, E, R>) | Unset
  readonly codeDigest?: string | Unset
  readonly evaluator?: boolean | Unset
  readonly cache?: CacheOption | Unset
}

const nullableOverrides = new Set(["resource", "algorithm", "timeout", "version"])
const overrideKeys = new Set([
  ...nullableOverrides,
  "name",
  "retry",
  "config",
  "parameters",
  "children",
  "run",
  "codeDigest",
  "evaluator",
  "cache"
])

/**
 * A copy of a task with some fields replaced; the original is never touched.
 *
 * The three cases, all user-visible:
 * - a key that is absent (or `undefined`) keeps the current value;
 * - an explicit `null` clears a nullable field: `resource`, `algorithm`, `timeout`, `version`;
 * - {@link UNSET} means "not given" even though the key is present.
 *
 * `null` for a non-nullable field (`name`, `retry`, `config`, `parameters`, `children`,
 * `run`, `codeDigest`, `evaluator`) throws a {@link ConfigError} instead of silently doing nothing; so does
 * an unknown key or an invalid value (same validation as {@link make}). A new `run` gets the
 * digest of its own source unless `codeDigest` is given too.
 *
 * Dual: `withOverrides(task, overrides)` or `task.pipe(withOverrides(overrides))`.
 *
 * @since 0.1.0
 * @category overrides
 */
export const withOverrides: {
  <In, Out, E, R>(overrides: Overrides<In, Out, E, R>): (task: Task<In, Out, E, R>) => Task<In, Out, E, R>
  <In, Out, E, R>(task: Task<In, Out, E, R>, overrides: Overrides<In, Out, E, R>): Task<In, Out, E, R>
} = dual(2, <In, Out, E, R>(task: Task<In, Out, E, R>, overrides: Overrides<In, Out, E, R>): Task<In, Out, E, R> => {
  const given: Record<string, unknown> = {}
  const issues: Array<ConfigIssue> = []
  for (const [key, value] of Object.entries(overrides as Record<string, unknown>)) {
    if (value === UNSET || value === undefined) continue
    if (!overrideKeys.has(key)) {
      issues.push({ path: key, message: `unknown override "${key}"` })
      continue
    }
    if (value === null && !nullableOverrides.has(key)) {
      const hint = key === "config" || key === "parameters" ?
        " (clear it with {})" :
        key === "children" ?
        " (clear it with [])" :
        ""
      issues.push({ path: key, message: `${key} cannot be null${hint}` })
      continue
    }
    given[key] = value
  }
  if (issues.length > 0) {
    throw new ConfigError({
      message: `task "${task.name}": ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
      issues
    })
  }
  const o = task.options
  const has = (k: string) => Object.prototype.hasOwnProperty.call(given, k)
  const options: Record<string, unknown> = {
    resource: has("resource") ? given["resource"] : o.resource,
    algorithm: has("algorithm") ? given["algorithm"] : undefined,
    retry: has("retry") ? given["retry"] : o.retry,
    timeout: has("timeout") ? given["timeout"] : o.timeout,
    config: has("config") ? given["config"] : o.config,
    version: has("version") ? given["version"] : o.version,
    parameters: has("parameters") ? given["parameters"] : task.parameters,
    children: has("children") ? given["children"] : task.children,
    evaluator: has("evaluator") ? given["evaluator"] : o.evaluator,
    cache: has("cache") ? given["cache"] : cacheOptionOf(o.cache),
    ...(o.cacheKey === null ? {} : { cacheKey: o.cacheKey }),
    ...(o.onCacheHit === null ? {} : { onCacheHit: o.onCacheHit })
  }
  if (task.inputSchema !== undefined) options["input"] = task.inputSchema
  if (task.outputSchema !== undefined) options["output"] = task.outputSchema
  if (has("codeDigest")) options["codeDigest"] = given["codeDigest"]
  else if (!has("run")) options["codeDigest"] = task.codeDigest
  const copy = build<In, Out, E, R>({
    name: has("name") ? given["name"] : task.name,
    options,
    keepAlgorithm: has("algorithm") ? undefined : { algorithm: o.algorithm, instance: o.algorithmInstance },
    run: has("run") ? given["run"] : task.run,
    source: given["run"],
    // a new `run` is an Effect function (see `Overrides.run`), which may need the Scope
    scoped: has("run") ? true : task.scoped
  })
  // what it shows of a value from `${VAR}` goes with the parameters and config it kept
  const shown = shownOf(task)
  return shown === undefined ? copy : setShown(copy, {
    parameters: has("parameters") ? undefined : shown.parameters,
    config: has("config") ? undefined : shown.config
  })
})

/** A resolved cache declaration back in its option form (for {@link withOverrides}). */
const cacheOptionOf = (c: TaskCache | null): CacheOption | undefined =>
  c === null ? undefined : { mode: c.mode, ...(c.ttlMs === undefined ? {} : { ttl: c.ttlMs }) }

/**
 * A copy of a task with a new retry policy (replacing the old one; fields not given take the
 * {@link RetryPolicy} defaults). Changes the pipeline identity when a timing field differs.
 * Throws {@link ConfigError} on an invalid policy.
 *
 * Dual: `withRetry(task, retry)` or `task.pipe(withRetry(retry))`.
 *
 * @since 0.1.0
 * @category overrides
 */
export const withRetry: {
  (retry: RetryPolicy | RetryPolicyInput): <In, Out, E, R>(task: Task<In, Out, E, R>) => Task<In, Out, E, R>
  <In, Out, E, R>(task: Task<In, Out, E, R>, retry: RetryPolicy | RetryPolicyInput): Task<In, Out, E, R>
} = dual(
  2,
  <In, Out, E, R>(task: Task<In, Out, E, R>, retry: RetryPolicy | RetryPolicyInput): Task<In, Out, E, R> =>
    withOverrides(task, { retry })
)
