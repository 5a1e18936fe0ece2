/**
 * The framework's error hierarchy and the error classifier.
 *
 * Every failure assay raises is a tagged error. Errors that may be persisted, printed as JSON
 * or returned over HTTP are `Schema.TaggedError`s so that they round-trip through the store.
 * The hierarchy of the specification (config ⊃ identity conflict, resource ⊃ unavailable ⊃
 * acquire timeout, …) is expressed with the family predicates below, because tagged errors are
 * flat classes.
 *
 * {@link classify} maps any value (a thrown exception, an Effect failure, an HTTP error of any
 * SDK) to one {@link ErrorClass}; the class drives retry decisions and pool health.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Option, Predicate, Schema } from "effect"
import { connectionErrorCodes, humanDuration, serverDelayMessage, tagOf } from "./internal/errors.js"
import * as RateLimit from "./RateLimit.js"

// ---------------------------------------------------------------------------------------------
// Error classes
// ---------------------------------------------------------------------------------------------

/**
 * The nine error classes every failure is mapped to.
 *
 * - `rate_limit`: HTTP 425/429.
 * - `timeout`: a timeout (Effect's `TimeoutException`, a `TimeoutError`), HTTP 408/504.
 * - `connection`: a transport failure (ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT, …).
 * - `upstream`: HTTP 500/502/503/505/507/529.
 * - `retryable`: a {@link RetryableError} without an explicit class.
 * - `invalid`: bad data (TypeError, RangeError, SyntaxError, Schema `ParseError`).
 * - `fatal`: a {@link FatalError}, configuration mistakes, any other HTTP 4xx.
 * - `cancelled`: interruption.
 * - `unknown`: everything else, including {@link ResourceUnavailable}.
 *
 * @since 0.1.0
 * @category models
 */
export const ErrorClass = Schema.Literal(
  "rate_limit",
  "timeout",
  "connection",
  "upstream",
  "retryable",
  "invalid",
  "fatal",
  "cancelled",
  "unknown"
)

/**
 * @since 0.1.0
 * @category models
 */
export type ErrorClass = typeof ErrorClass.Type

/**
 * The classes a {@link RetryPolicy} retries by default (`retryClassified: true`).
 *
 * @since 0.1.0
 * @category constants
 */
export const retryableClasses: ReadonlySet<ErrorClass> = new Set<ErrorClass>([
  "rate_limit",
  "timeout",
  "connection",
  "upstream",
  "retryable"
])

/**
 * Whether a string is one of the nine {@link ErrorClass} values.
 *
 * @since 0.1.0
 * @category guards
 */
export const isErrorClass: (u: unknown) => u is ErrorClass = Schema.is(ErrorClass)

// ---------------------------------------------------------------------------------------------
// Tagged errors
// ---------------------------------------------------------------------------------------------

/**
 * One problem found in a configuration or declaration, with the field path it concerns
 * (for example `pools.apis.resources[1].capacity`) and an optional suggestion. A syntax
 * error of a file (which has no field path yet: `path` is `""`) also carries its 1-based
 * `line` and `column` in the file.
 *
 * @since 0.1.0
 * @category models
 */
export const ConfigIssue = Schema.Struct({
  path: Schema.String,
  message: Schema.String,
  suggestion: Schema.optional(Schema.String),
  line: Schema.optional(Schema.Number),
  column: Schema.optional(Schema.Number)
})

/**
 * @since 0.1.0
 * @category models
 */
export type ConfigIssue = typeof ConfigIssue.Type

/**
 * A configuration or declaration mistake (CLI exit code 2). `issues` lists every problem at
 * once, each with its field path.
 *
 * @since 0.1.0
 * @category errors
 */
export class ConfigError extends Schema.TaggedError<ConfigError>("assay/ConfigError")("ConfigError", {
  message: Schema.String,
  issues: Schema.optionalWith(Schema.Array(ConfigIssue), { default: () => [] })
}) {}

/**
 * A pipeline with an explicit key was found in the store with a different spec or seed
 * digest. Nothing is reused silently; the stored row is left untouched (CLI exit code 2).
 * Belongs to the config family ({@link isConfigFamily}).
 *
 * @since 0.1.0
 * @category errors
 */
export class PipelineIdentityConflict extends Schema.TaggedError<PipelineIdentityConflict>(
  "assay/PipelineIdentityConflict"
)("PipelineIdentityConflict", {
  pipelineId: Schema.String,
  storedSpecDigest: Schema.String,
  specDigest: Schema.String,
  storedSeedDigest: Schema.String,
  seedDigest: Schema.String
}) {
  override get message(): string {
    const parts: Array<string> = []
    if (this.storedSpecDigest !== this.specDigest) {
      parts.push(`spec digest ${this.storedSpecDigest} (stored) != ${this.specDigest}`)
    }
    if (this.storedSeedDigest !== this.seedDigest) {
      parts.push(`seed digest ${this.storedSeedDigest} (stored) != ${this.seedDigest}`)
    }
    return `pipeline ${this.pipelineId}: stored definition differs: ${parts.join("; ")}; use a new key or a new store`
  }
}

/**
 * The task chain of a pipeline does not fit together (a task's input Schema does not accept
 * the previous task's output Schema), or a pipeline declaration is malformed.
 *
 * @since 0.1.0
 * @category errors
 */
export class PipelineBuildError extends Schema.TaggedError<PipelineBuildError>("assay/PipelineBuildError")(
  "PipelineBuildError",
  { message: Schema.String }
) {}

/**
 * A plugin failed to load or to resolve a name.
 *
 * @since 0.1.0
 * @category errors
 */
export class PluginError extends Schema.TaggedError<PluginError>("assay/PluginError")("PluginError", {
  plugin: Schema.String,
  message: Schema.String
}) {}

/**
 * A payload could not be encoded or decoded by its codec. Never a silent wrong value.
 * `unregistered: true` when the registry in use does not know the payload's codec or type (a
 * registration missing from this program, not damaged bytes): a resume refuses such a
 * checkpoint instead of treating it as lost.
 *
 * @since 0.1.0
 * @category errors
 */
export class ArtifactCodecError extends Schema.TaggedError<ArtifactCodecError>("assay/ArtifactCodecError")(
  "ArtifactCodecError",
  {
    codec: Schema.String,
    typeName: Schema.String,
    message: Schema.String,
    unregistered: Schema.optional(Schema.Boolean)
  }
) {}

/**
 * No resource could be leased (for example the `immediate` algorithm found no free slot, or
 * a resource's client factory failed). Class `unknown`: not retried by default.
 *
 * @since 0.1.0
 * @category errors
 */
export class ResourceUnavailable extends Schema.TaggedError<ResourceUnavailable>("assay/ResourceUnavailable")(
  "ResourceUnavailable",
  {
    pool: Schema.String,
    message: Schema.String,
    resourceId: Schema.optional(Schema.String)
  }
) {}

/**
 * No resource could be leased within the acquire timeout (a kind of
 * {@link ResourceUnavailable}; class `unknown`).
 *
 * @since 0.1.0
 * @category errors
 */
export class AcquireTimeout extends Schema.TaggedError<AcquireTimeout>("assay/AcquireTimeout")("AcquireTimeout", {
  pool: Schema.String,
  /** The timeout that expired, in milliseconds. */
  timeoutMs: Schema.Number
}) {
  override get message(): string {
    return `no resource of pool "${this.pool}" could be leased within ${this.timeoutMs} ms`
  }
}

/**
 * A server asked to wait longer than the ceiling assay accepts (`retry.maxServerDelay`,
 * default 10 minutes): the attempt ends instead of waiting silently. Class `rate_limit`
 * (`errorClass`), with the server's remaining delay in `retryAfterMs` (milliseconds) and the
 * epoch millisecond it named in `untilMs`. Raised by the pool for an acquire whose every
 * usable resource is throttled past the ceiling; the runner words a task failure declined
 * for the same reason the same way (`serverDelayMessage`).
 *
 * @since 0.2.0
 * @category errors
 */
export class ServerDelayRefused extends Schema.TaggedError<ServerDelayRefused>("assay/ServerDelayRefused")(
  "ServerDelayRefused",
  {
    pool: Schema.String,
    resourceId: Schema.optional(Schema.String),
    retryAfterMs: Schema.Number,
    untilMs: Schema.Number,
    maxDelayMs: Schema.Number,
    errorClass: Schema.Literal("rate_limit")
  }
) {
  override get message(): string {
    return `${serverDelayMessage(this.retryAfterMs, this.untilMs, this.maxDelayMs)}${
      this.resourceId === undefined ? "" : ` (resource ${this.resourceId} of pool "${this.pool}")`
    }`
  }
}

/**
 * No pool is registered under that name.
 *
 * @since 0.1.0
 * @category errors
 */
export class PoolNotFound extends Schema.TaggedError<PoolNotFound>("assay/PoolNotFound")("PoolNotFound", {
  pool: Schema.String,
  known: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `no pool named "${this.pool}" (known pools: ${this.known.length === 0 ? "none" : this.known.join(", ")})`
  }
}

/**
 * A lease taken through the escape hatch outlived its task, under `strictLeases`.
 *
 * @since 0.1.0
 * @category errors
 */
export class LeaseLeakError extends Schema.TaggedError<LeaseLeakError>("assay/LeaseLeakError")("LeaseLeakError", {
  taskName: Schema.String,
  leaseIds: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `task "${this.taskName}" ended holding ${this.leaseIds.length} unreleased lease(s): ${this.leaseIds.join(", ")}`
  }
}

/**
 * A failure the task declares retryable, optionally with its class and the server's
 * suggested delay (`retryAfterMs`, milliseconds).
 *
 * @since 0.1.0
 * @category errors
 */
export class RetryableError extends Schema.TaggedError<RetryableError>("assay/RetryableError")("RetryableError", {
  message: Schema.String,
  errorClass: Schema.optional(ErrorClass),
  retryAfterMs: Schema.optional(Schema.Number)
}) {}

/**
 * A failure the task declares final: never retried, whatever `maxAttempts` says.
 *
 * @since 0.1.0
 * @category errors
 */
export class FatalError extends Schema.TaggedError<FatalError>("assay/FatalError")("FatalError", {
  message: Schema.String
}) {}

/**
 * A run budget (time, failures, handoffs) was spent.
 *
 * @since 0.1.0
 * @category errors
 */
export class BudgetExceeded extends Schema.TaggedError<BudgetExceeded>("assay/BudgetExceeded")("BudgetExceeded", {
  budget: Schema.String,
  message: Schema.String
}) {}

/**
 * A task returned a control-flow directive (`Handoff`) the pipeline does not allow: no
 * `control` block, an undeclared edge (named in the message, `validate → report`), a malformed
 * directive, a directive from a fanout branch, or a leaked lease under `strictLeases`. Fatal:
 * never retried, never a silent jump. `task` and `seq` name the source task when known.
 *
 * @since 0.1.0
 * @category errors
 */
export class HandoffRefused extends Schema.TaggedError<HandoffRefused>("assay/HandoffRefused")("HandoffRefused", {
  message: Schema.String,
  task: Schema.optional(Schema.String),
  seq: Schema.optional(Schema.Number)
}) {}

/**
 * The run was stopped (signal, `stop()`, stop conditions) before every pipeline finished.
 *
 * @since 0.1.0
 * @category errors
 */
export class RunInterrupted extends Schema.TaggedError<RunInterrupted>("assay/RunInterrupted")("RunInterrupted", {
  reason: Schema.String
}) {
  override get message(): string {
    return `run interrupted: ${this.reason}`
  }
}

/**
 * A stored checkpoint contradicts the pipeline definition (for example a cursor past the
 * last task). The stored values are left as they are, as evidence.
 *
 * @since 0.1.0
 * @category errors
 */
export class CorruptCheckpoint extends Schema.TaggedError<CorruptCheckpoint>("assay/CorruptCheckpoint")(
  "CorruptCheckpoint",
  { pipelineId: Schema.String, message: Schema.String }
) {}

/**
 * The store cannot be trusted or reached: not an assay store, corrupt, locked by another
 * writer, from a newer feature level, or an I/O failure. `locked: true` marks the one case
 * that is nobody's mistake and passes by itself: another process holds the store's (or suite
 * root's) writer lock. The CLI exits {@link https://man.freebsd.org/sysexits | 75} for it
 * (`ExitCode.Locked`), 1 for the other cases.
 *
 * @since 0.1.0
 * @category errors
 */
export class StoreUnavailable extends Schema.TaggedError<StoreUnavailable>("assay/StoreUnavailable")(
  "StoreUnavailable",
  {
    message: Schema.String,
    path: Schema.optional(Schema.String),
    cause: Schema.optional(Schema.Defect),
    /** Another process holds the writer lock (since 0.5.0). */
    locked: Schema.optional(Schema.Boolean),
    /**
     * The database server refused the login (SQLSTATE `28P01` / `28000`: a wrong user,
     * password or `pg_hba.conf` rule; `3D000`: the database does not exist): a configuration
     * mistake, which the CLI exits 2 for (since 0.14.0).
     */
    loginRefused: Schema.optional(Schema.Boolean)
  }
) {}

/**
 * Whether `u` is a {@link StoreUnavailable} raised because another process holds the writer
 * lock (`locked: true`).
 *
 * @since 0.5.0
 * @category guards
 */
export const isStoreLocked = (u: unknown): u is StoreUnavailable => u instanceof StoreUnavailable && u.locked === true

/**
 * Whether `u` is a {@link StoreUnavailable} raised because the database server refused the
 * login (`loginRefused: true`): a configuration mistake (the user, the password or the
 * server's `pg_hba.conf`), which trying again will not mend. The CLI exits 2 for it, as for a
 * `ConfigError`, on every command that connects.
 *
 * @param u - any failure.
 * @returns `true` for a refused login.
 *
 * @since 0.14.0
 * @category guards
 */
export const isLoginRefusedError = (u: unknown): u is StoreUnavailable =>
  u instanceof StoreUnavailable && u.loginRefused === true

/**
 * A worker died outside its own handlers (a defect in the framework or a store hook). The run
 * is stopped at once and its record closed `interrupted`.
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkerCrashed extends Schema.TaggedError<WorkerCrashed>("assay/WorkerCrashed")("WorkerCrashed", {
  pipelineId: Schema.optional(Schema.String),
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * An attempt ran longer than its task's `timeout` and was interrupted. Class `timeout`.
 * Raised by the runner (re-exported as `Runner.TaskTimeout`).
 *
 * @since 0.1.0
 * @category errors
 */
export class TaskTimeout extends Schema.TaggedError<TaskTimeout>("assay/TaskTimeout")("TaskTimeout", {
  taskName: Schema.String,
  /** The per-attempt timeout, in milliseconds. */
  timeoutMs: Schema.Number,
  errorClass: Schema.Literal("timeout")
}) {
  override get message(): string {
    return `task "${this.taskName}" did not finish within ${this.timeoutMs} ms`
  }
}

/**
 * A task spent its `retry.maxTotal`: the attempt running (or waiting for a lease) when the
 * budget ran out was interrupted. The budget counts from the task's first attempt and covers
 * attempts, retry delays and lease waits. `waitingFor` says what held the pool, when
 * something did (throttled keys, open breakers). Class `timeout`; never retried (its
 * decision is `total_budget`). Raised by the runner (re-exported as `Runner.MaxTotalExceeded`).
 *
 * @since 0.2.0
 * @category errors
 */
export class MaxTotalExceeded extends Schema.TaggedError<MaxTotalExceeded>("assay/MaxTotalExceeded")("MaxTotalExceeded", {
  taskName: Schema.String,
  /** The budget, in milliseconds. */
  maxTotalMs: Schema.Number,
  waitingFor: Schema.optional(Schema.String),
  errorClass: Schema.Literal("timeout")
}) {
  override get message(): string {
    return `task "${this.taskName}" spent its retry.maxTotal of ${humanDuration(this.maxTotalMs)}${
      this.waitingFor === undefined ? "" : ` (${this.waitingFor})`
    }`
  }
}

/**
 * Every tagged error assay raises.
 *
 * @since 0.1.0
 * @category models
 */
export type AssayError =
  | ConfigError
  | PipelineIdentityConflict
  | PipelineBuildError
  | PluginError
  | ArtifactCodecError
  | ResourceUnavailable
  | AcquireTimeout
  | PoolNotFound
  | LeaseLeakError
  | RetryableError
  | FatalError
  | BudgetExceeded
  | HandoffRefused
  | RunInterrupted
  | CorruptCheckpoint
  | StoreUnavailable
  | WorkerCrashed
  | TaskTimeout
  | MaxTotalExceeded


/**
 * The config family: {@link ConfigError} and {@link PipelineIdentityConflict} (CLI exit 2).
 *
 * @since 0.1.0
 * @category guards
 */
export const isConfigFamily = (u: unknown): u is ConfigError | PipelineIdentityConflict => {
  const tag = tagOf(u)
  return tag === "ConfigError" || tag === "PipelineIdentityConflict"
}

/**
 * The resource family: unavailable, acquire timeout, pool not found, lease leak.
 *
 * @since 0.1.0
 * @category guards
 */
export const isResourceFamily = (
  u: unknown
): u is ResourceUnavailable | AcquireTimeout | PoolNotFound | LeaseLeakError => {
  const tag = tagOf(u)
  return tag === "ResourceUnavailable" || tag === "AcquireTimeout" || tag === "PoolNotFound" ||
    tag === "LeaseLeakError"
}

/**
 * {@link ResourceUnavailable} and its refinement {@link AcquireTimeout}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isUnavailable = (u: unknown): u is ResourceUnavailable | AcquireTimeout => {
  const tag = tagOf(u)
  return tag === "ResourceUnavailable" || tag === "AcquireTimeout"
}

// ---------------------------------------------------------------------------------------------
// classify
// ---------------------------------------------------------------------------------------------

const upstreamStatuses: ReadonlySet<number> = new Set([500, 502, 503, 505, 507, 529])

const asStatus = (u: unknown): number | undefined => {
  if (typeof u === "number" && Number.isInteger(u) && u >= 100 && u <= 599) return u
  if (typeof u === "string" && /^\d{3}$/.test(u)) return asStatus(Number(u))
  return undefined
}

/**
 * Reads an HTTP status from an error: `status`, `statusCode`, `status_code`, `http_status`,
 * `code` (when numeric), then `response.status` / `response.statusCode`.
 *
 * @since 0.1.0
 * @category classification
 */
export const statusOf = (u: unknown): number | undefined => {
  if (!Predicate.isObject(u)) return undefined
  const o = u as Record<string, unknown>
  for (const key of ["status", "statusCode", "status_code", "http_status", "code"]) {
    const s = asStatus(o[key])
    if (s !== undefined) return s
  }
  const response = o["response"]
  if (Predicate.isObject(response)) {
    const r = response as Record<string, unknown>
    return asStatus(r["status"]) ?? asStatus(r["statusCode"]) ?? asStatus(r["status_code"])
  }
  return undefined
}

/**
 * Maps an HTTP status to its error class, or `undefined` for a status that says nothing
 * (2xx/3xx and the 5xx codes outside the upstream list).
 *
 * @since 0.1.0
 * @category classification
 */
export const classOfStatus = (status: number): ErrorClass | undefined => {
  if (status === 425 || status === 429) return "rate_limit"
  if (status === 408 || status === 504) return "timeout"
  if (upstreamStatuses.has(status)) return "upstream"
  if (status >= 400 && status < 500) return "fatal"
  return undefined
}

const explicitClassOf = (o: Record<string, unknown>): ErrorClass | undefined => {
  const v = o["errorClass"] ?? o["error_class"]
  return isErrorClass(v) ? v : undefined
}

const codeOf = (o: Record<string, unknown>): string | undefined =>
  typeof o["code"] === "string" ? o["code"] : typeof o["errno"] === "string" ? o["errno"] : undefined

const byTag: Record<string, ErrorClass> = {
  RetryableError: "retryable",
  FatalError: "fatal",
  TimeoutException: "timeout",
  ParseError: "invalid",
  SeedError: "invalid",
  ArtifactCodecError: "invalid",
  ConfigError: "fatal",
  PipelineIdentityConflict: "fatal",
  PipelineBuildError: "fatal",
  PluginError: "fatal",
  CorruptCheckpoint: "fatal",
  InterruptedException: "cancelled",
  ResourceUnavailable: "unknown",
  AcquireTimeout: "unknown",
  PoolNotFound: "fatal",
  LeaseLeakError: "fatal",
  BudgetExceeded: "fatal",
  HandoffRefused: "fatal",
  RunInterrupted: "cancelled"
}

const byName: Record<string, ErrorClass> = {
  TimeoutError: "timeout",
  AbortError: "cancelled",
  TypeError: "invalid",
  RangeError: "invalid",
  SyntaxError: "invalid",
  URIError: "invalid"
}

const classifyDepth = (u: unknown, depth: number): ErrorClass => {
  if (!Predicate.isObject(u)) return "unknown"
  const o = u as Record<string, unknown>
  // 1. an explicit class on the error always wins
  const explicit = explicitClassOf(o)
  if (explicit !== undefined) return explicit
  // 2. a status-like field
  const status = statusOf(o)
  if (status !== undefined) {
    const c = classOfStatus(status)
    if (c !== undefined) return c
  }
  // 3. a connection error code, on the error or on its cause (fetch wraps them in TypeError)
  const code = codeOf(o)
  if (code !== undefined && connectionErrorCodes.has(code)) return "connection"
  const tag = tagOf(o)
  // @effect/platform's HttpClientError: a transport failure is a connection error
  if (tag === "RequestError" && o["reason"] === "Transport") {
    const inner = depth < 4 && o["cause"] !== undefined ? classifyDepth(o["cause"], depth + 1) : "unknown"
    return inner === "timeout" ? "timeout" : "connection"
  }
  if (depth < 4 && o["cause"] !== undefined && o["cause"] !== u) {
    const inner = classifyDepth(o["cause"], depth + 1)
    if (inner === "connection" || inner === "timeout" || inner === "rate_limit" || inner === "upstream") {
      return inner
    }
  }
  // 4. tags of assay's and Effect's own errors
  if (tag !== undefined && byTag[tag] !== undefined) return byTag[tag]
  // 5. well-known JavaScript error names
  const name = typeof o["name"] === "string" ? o["name"] : undefined
  if (name !== undefined && byName[name] !== undefined) return byName[name]
  return "unknown"
}

/**
 * Maps any failure to its {@link ErrorClass}.
 *
 * Order of precedence:
 * 1. an explicit `errorClass` / `error_class` property holding a valid class;
 * 2. an HTTP status read by {@link statusOf} (425/429 → rate_limit, 408/504 → timeout,
 *    500/502/503/505/507/529 → upstream, any other 4xx → fatal);
 * 3. a connection error code (`code`/`errno`: ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT,
 *    ENOTFOUND, EAI_AGAIN, EHOSTUNREACH, ENETUNREACH, undici's UND_ERR_SOCKET/CONNECT_TIMEOUT/CLOSED), on the
 *    error or in its `cause` chain (fetch's `TypeError("fetch failed")` carries it in `cause`);
 * 4. the tag of assay's and Effect's errors (RetryableError → retryable, FatalError → fatal,
 *    TimeoutException → timeout, ParseError → invalid, InterruptedException → cancelled,
 *    ResourceUnavailable / AcquireTimeout → unknown);
 * 5. the JavaScript error name (TimeoutError → timeout, AbortError → cancelled,
 *    TypeError / RangeError / SyntaxError → invalid);
 * 6. otherwise `unknown`.
 *
 * The table follows the specification's error-class section.
 *
 * @since 0.1.0
 * @category classification
 */
export const classify = (u: unknown): ErrorClass => classifyDepth(u, 0)

/**
 * Classifies an Effect `Cause`: the first failure (else the first defect) is classified with
 * {@link classify}; a cause holding only interruptions is `cancelled`; an empty cause is
 * `unknown`.
 *
 * @since 0.1.0
 * @category classification
 */
export const classifyCause = (cause: Cause.Cause<unknown>): ErrorClass => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) return classify(failure.value)
  const defect = Cause.dieOption(cause)
  if (Option.isSome(defect)) return classify(defect.value)
  // `Cause.isInterruptedOnly` is vacuously true for an empty cause, so ask for an interrupt.
  return Cause.isInterrupted(cause) ? "cancelled" : "unknown"
}

// ---------------------------------------------------------------------------------------------
// Retry-After
// ---------------------------------------------------------------------------------------------

const headerOf = (headers: unknown, name: string): string | undefined => {
  if (!Predicate.isObject(headers)) return undefined
  const h = headers as Record<string, unknown> & { get?: unknown }
  if (typeof h.get === "function") {
    try {
      const v = (h.get as (n: string) => unknown).call(headers, name)
      if (typeof v === "string") return v
    } catch {
      // not a Headers-like object
    }
  }
  for (const key of Object.keys(h)) {
    if (key.toLowerCase() === name) {
      const v = h[key]
      if (typeof v === "string") return v
      if (typeof v === "number") return String(v)
      if (Array.isArray(v) && typeof v[0] === "string") return v[0]
    }
  }
  return undefined
}

/**
 * Reads the server's suggested delay from an error, in milliseconds:
 * `retryAfterMs` (ms), `retryAfter` / `retry_after` (seconds as a number, a delta-seconds or
 * HTTP-date string, or an Effect `Duration`), then the rate-limit headers on `headers` or
 * `response.headers` (`retry-after-ms`, `Retry-After`, `x-ratelimit-reset-*` and the other
 * reset headers of `RateLimit.hintOfHeaders`). A number of seconds of 10⁹ or more is a Unix
 * timestamp. `nowMs` is the current time in epoch milliseconds (for dates and timestamps).
 *
 * @since 0.1.0
 * @category classification
 */
export const retryAfterOf = (u: unknown, nowMs: number): number | undefined => {
  if (!Predicate.isObject(u)) return undefined
  const o = u as Record<string, unknown>
  const ms = o["retryAfterMs"] ?? o["retry_after_ms"]
  if (typeof ms === "number" && Number.isFinite(ms) && ms >= 0) return ms
  const ra = o["retryAfter"] ?? o["retry_after"]
  if (typeof ra === "number" && Number.isFinite(ra) && ra >= 0) return RateLimit.parseRetryAfter(String(ra), nowMs)
  if (typeof ra === "string") {
    const parsed = RateLimit.parseRetryAfter(ra, nowMs)
    if (parsed !== undefined) return parsed
  }
  if (Duration.isDuration(ra)) return Duration.toMillis(ra)
  const fromHeaders = RateLimit.hintOfHeaders((name) => headerOf(o["headers"], name), nowMs)
  if (fromHeaders !== undefined) return fromHeaders.delayMs
  const response = o["response"]
  if (Predicate.isObject(response)) {
    const headers = (response as Record<string, unknown>)["headers"]
    const h = RateLimit.hintOfHeaders((name) => headerOf(headers, name), nowMs)
    if (h !== undefined) return h.delayMs
  }
  return undefined
}

/**
 * The type name recorded for a failure: the `_tag` of a tagged error, else the `name` of an
 * Error, else `typeof`.
 *
 * @since 0.1.0
 * @category classification
 */
export const errorTypeOf = (u: unknown): string => {
  const tag = tagOf(u)
  if (tag !== undefined) return tag
  if (Predicate.isObject(u) && typeof (u as Record<string, unknown>)["name"] === "string") {
    return (u as Record<string, unknown>)["name"] as string
  }
  return typeof u
}
