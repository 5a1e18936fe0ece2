/**
 * RunConfig: everything that shapes one run (concurrency, admission window, resume rules,
 * heartbeats, stop conditions, write-behind, journal and artifact backend).
 *
 * The fields are declared once, as a Schema ({@link fieldsWith}), and every form derives from
 * that declaration:
 *
 * - {@link RunSection}: the `run` section of an experiment file (durations are strings with a
 *   unit, `"5 seconds"`; its JSON Schema is part of what `assay schema` prints);
 * - {@link RunConfigInput}: what code passes (`Runner.layer({ concurrency: 4 })`, the runner's
 *   `RunOptions`, the CLI's overrides): every field optional, durations as
 *   `Duration.DurationInput` (`"5 seconds"`, `Duration.millis(500)`, or a number of ms);
 * - {@link RunConfig}: the resolved configuration, every default filled in.
 *
 * {@link resolve} decodes a {@link RunConfigInput} with the same Schema, fills the defaults
 * and fails with a `ConfigError` that names each bad field (`run.concurrency`).
 *
 * @since 0.1.0
 */
import { Duration, Either, Option, ParseResult, Schema, Struct } from "effect"
import * as CallCache from "./CallCache.js"
import { ConfigError, type ConfigIssue } from "./Errors.js"
import { handoffBudgetMessage } from "./internal/handoffBudget.js"
import { RunId } from "./Ids.js"
import * as Pricing from "./Pricing.js"
import { PriceTableSchema } from "./Pricing.js"
import { DurationFromString } from "./RetryPolicy.js"
import { maskUrl } from "./Secrets.js"

/**
 * Journal mode: `"full"` keeps artifact payloads (task-level resume); `"summary"` keeps
 * metadata only (a resumed pipeline restarts from its seed).
 *
 * @since 0.1.0
 * @category models
 */
export type Journal = "full" | "summary"

const PositiveInt = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({
  message: () => "must be an integer >= 1"
})
// the run's ceiling on control transitions: the message `pipeline.control.maxHandoffs` gives
const HandoffBudget = PositiveInt.annotations({
  message: (issue) => ({ message: handoffBudgetMessage(issue.actual), override: true })
})
const JsonRecord = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * A duration given in code: anything `Duration.decodeUnknown` reads (`"5 seconds"`,
 * `Duration.millis(500)`, a number of milliseconds), decoded to a finite `Duration`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const DurationFromInput: Schema.Schema<Duration.Duration, Duration.DurationInput> = Schema.transformOrFail(
  Schema.declare((u: unknown): u is Duration.DurationInput => true, { identifier: "DurationInput" }),
  Schema.DurationFromSelf,
  {
    strict: true,
    decode: (input, _, ast) => {
      // Effect's Duration clamps a negative amount to zero: refuse it instead of meaning 0
      if ((typeof input === "number" && input < 0) || (typeof input === "string" && /^\s*-/.test(input))) {
        return ParseResult.fail(new ParseResult.Type(ast, input, `${JSON.stringify(input)} is negative: a duration is 0 or more`))
      }
      const d = Duration.decodeUnknown(input)
      return Option.isSome(d) && Duration.isFinite(d.value)
        ? ParseResult.succeed(d.value)
        : ParseResult.fail(
          new ParseResult.Type(ast, input, `must be a finite duration such as "5 seconds", got ${JSON.stringify(input)}`)
        )
    },
    encode: (d) => ParseResult.succeed(d)
  }
).annotations({ identifier: "DurationFromInput" })

/**
 * The one declaration of the run config's fields, every field required, with durations
 * decoded by `duration` ({@link DurationFromString} in a file, {@link DurationFromInput} in
 * code). Defaults are in {@link resolve}.
 *
 * @since 0.1.0
 * @category schemas
 */
export const fieldsWith = <D extends Schema.Schema<Duration.Duration, any>>(duration: D) => {
  // a period (heartbeat, flush interval) or a deadline (stopAfter) of 0 makes no sense: a busy
  // loop or an immediate stop
  // (same Type, Encoded and Context as `duration`: the cast only forgets the refinement)
  const positive = Schema.compose(duration, PositiveDuration) as unknown as D
  return fieldsOf(duration, positive)
}

const PositiveDuration = Schema.DurationFromSelf.pipe(
  Schema.filter((d) => Duration.greaterThan(d, Duration.zero) || "must be longer than 0")
)

const fieldsOf = <D extends Schema.Schema<Duration.Duration, any>>(duration: D, positive: D) => ({
  /** Store location recorded on the run (the store itself is chosen by a layer). Default `":memory:"`. */
  store: Schema.String,
  /** `"full"` (default) or `"summary"`. */
  journal: Schema.Literal("full", "summary"),
  /** Attempts running at once (default 16). Pipelines waiting out a retry delay hold none. */
  concurrency: PositiveInt,
  /** Queued + running + waiting-to-retry pipelines (default 4 × concurrency). */
  maxAdmitted: PositiveInt,
  /** Label recorded on the run. */
  label: Schema.String,
  /** Explicit run id (default: time-based plus a digest); a plain string, branded on decode. */
  runId: RunId,
  /** Claim pipelines abandoned by runs whose heartbeat is older than `staleAfter`. */
  resume: Schema.Boolean,
  /** Re-run pipelines that already succeeded. */
  retrySucceeded: Schema.Boolean,
  /** Discard checkpoints of admitted pipelines and start them from their seed. */
  freshRestart: Schema.Boolean,
  /** How often the run's heartbeat is written (default 5 s). */
  heartbeat: positive,
  /** How long in-flight attempts may finish after a stop before they are interrupted (5 s). */
  grace: duration,
  /** A run whose heartbeat is older than this is considered dead (default 30 s). */
  staleAfter: duration,
  /** A leaked lease fails its task with `LeaseLeakError` instead of being reclaimed quietly. */
  strictLeases: Schema.Boolean,
  /**
   * Ceiling on the control transitions (handoffs, rewinds, retry-alls) of each pipeline that
   * declares `control` (default 1000): the effective limit is the smaller of this and the
   * pipeline's `control.maxHandoffs` (`Control.effectiveLimit`), so a run can lower a
   * pipeline's budget, never raise it.
   */
  maxHandoffs: HandoffBudget,
  /** Stop admitting after this many failed pipelines (best effort). */
  stopAfterFailures: PositiveInt,
  /** Stop admitting after this much wall time. */
  stopAfter: positive,
  /** Install SIGINT/SIGTERM handlers that call `stop` (default true; a second signal stops at once). */
  handleSignals: Schema.Boolean,
  /** Batch attempts and events (default true for file stores). */
  writeBehind: Schema.Boolean,
  /** Write-behind batch size (default 128). */
  writeBatch: PositiveInt,
  /** Write-behind flush interval (default 1 s). */
  flushInterval: positive,
  /** Where payloads go: `"inline"`, `"file:///path"`, `"null"` or `{ kind, root, minBytes }`. */
  artifactBackend: Schema.Union(Schema.String, Schema.Struct({ kind: Schema.String }, JsonRecord)),
  /** Free-form notes recorded on the run. */
  notes: Schema.String,
  /** Free-form metadata recorded on the run (strict JSON). */
  meta: JsonRecord,
  /**
   * The call cache (see `CallCache`): `true` (= `"readWrite"`), `false` (= `"off"`), a mode
   * (`"readWrite"`, `"readOnly"`, `"refresh"`, `"off"`), or `{ mode, ttl, db }` (`ttl`: how long
   * a stored output may be served, `null`: no expiry; `db`: a shared cache database file instead
   * of the run's store). Default: off, except for tasks declared `cache: true`.
   */
  cache: Schema.Union(
    Schema.Boolean,
    CacheModeSchema,
    Schema.Struct({
      mode: Schema.optional(CacheModeSchema),
      ttl: Schema.optional(Schema.NullOr(
        // one wording for every bad TTL, whatever refused it (negative, zero, not a duration)
        positive.annotations({ message: (issue) => ({ message: CallCache.ttlMessage(issue.actual), override: true }) })
      )),
      db: Schema.optional(Schema.NonEmptyString)
    })
  ),
  /**
   * The price table of model calls (see `Pricing`): model name → `{ inputPer1M, outputPer1M }`
   * in US dollars per 1,000,000 tokens. Every attempt that reports token usage with a model
   * is priced with it (a resource's own `pricing` wins). In an experiment file it is the
   * top-level `pricing`, not a `run` field. Default: none (costs only from what servers report).
   */
  pricing: PriceTableSchema
})

const CacheModeSchema = Schema.Literal("readWrite", "readOnly", "refresh", "off")

/**
 * The `run` section of an experiment file: every field of the run config, optional, with
 * durations written with a unit (`"30 seconds"`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunSection = Schema.partialWith(
  Schema.Struct(Struct.omit(fieldsWith(DurationFromString), "pricing")),
  { exact: true }
)
  .annotations({ identifier: "RunSection" })

/**
 * The run config as code passes it: every field optional, durations as
 * `Duration.DurationInput`. {@link resolve} drops keys whose value is `undefined` ("not set")
 * before decoding with it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunConfigInput = Schema.partialWith(Schema.Struct(fieldsWith(DurationFromInput)), { exact: true })
  .annotations({ identifier: "RunConfigInput" })

/**
 * The fields a caller may set, all optional, `undefined` meaning "not set" (see the field
 * docs of {@link fieldsWith}). Durations accept `Duration.DurationInput` (`"5 seconds"`,
 * `Duration.millis(500)`, or a number of milliseconds).
 *
 * @since 0.1.0
 * @category models
 */
export type RunConfigInput = { readonly [K in keyof typeof RunConfigInput.Encoded]?: typeof RunConfigInput.Encoded[K] | undefined }

type Full = Schema.Struct.Type<ReturnType<typeof fieldsWith<typeof DurationFromInput>>>
type Unset = "runId" | "stopAfterFailures" | "stopAfter" | "artifactBackend" | "cache" | "pricing"

/**
 * A resolved configuration: every default filled in, durations decoded; `runId`,
 * `stopAfterFailures`, `stopAfter`, `artifactBackend`, `cache` and `pricing` stay `undefined`
 * when not set.
 *
 * @since 0.1.0
 * @category models
 */
export type RunConfig = Omit<Full, Unset> & { readonly [K in Unset]: Full[K] | undefined }

const decodeInput = Schema.decodeUnknownEither(RunConfigInput, { errors: "all", onExcessProperty: "ignore" })

/**
 * Fills defaults and validates a {@link RunConfigInput} against the run config's Schema.
 * Every problem is reported at once in the `ConfigError`'s `issues`, each with its field path
 * (`run.concurrency`). Keys that are not run config fields (the runner's `onPipelineFinished`,
 * `registry`) are ignored.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (input: RunConfigInput = {}): Either.Either<RunConfig, ConfigError> => {
  const set: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(input)) if (v !== undefined) set[k] = v
  // the price table is checked on its own: field paths `pricing.<model>.<field>`, unknown
  // fields refused (the rest of the input ignores keys that are not run config fields)
  const priceIssues = Pricing.tableIssues(set["pricing"])
  if (priceIssues.length > 0) {
    return Either.left(
      new ConfigError({
        message: `invalid pricing: ${priceIssues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues: priceIssues
      })
    )
  }
  const decoded = decodeInput(set)
  if (Either.isLeft(decoded)) {
    // one issue per field: a literal union (`journal`) fails once per member, merged here into
    // `expected "full" or "summary", got "ful"` (the wording of the experiment loader)
    const byPath = new Map<string, Array<string>>()
    for (const i of ParseResult.ArrayFormatter.formatErrorSync(decoded.left)) {
      const at = ["run", ...i.path.map(String)].join(".")
      byPath.set(at, [...(byPath.get(at) ?? []), i.message])
    }
    const issues: Array<ConfigIssue> = [...byPath].map(([path, messages]) => {
      const literals = messages.map((m) => /^Expected (".*"), actual (.*)$/.exec(m))
      return literals.length > 1 && literals.every((m) => m !== null)
        ? { path, message: `expected ${literals.map((m) => m![1]).join(" or ")}, got ${literals[0]![2]}` }
        : { path, message: messages.join("; ") }
    })
    return Either.left(
      new ConfigError({
        message: `invalid run configuration: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    )
  }
  const d = decoded.right
  const concurrency = d.concurrency ?? 16
  return Either.right({
    store: d.store ?? ":memory:",
    journal: d.journal ?? "full",
    concurrency,
    maxAdmitted: d.maxAdmitted ?? 4 * concurrency,
    label: d.label ?? "",
    runId: d.runId,
    resume: d.resume ?? false,
    retrySucceeded: d.retrySucceeded ?? false,
    freshRestart: d.freshRestart ?? false,
    heartbeat: d.heartbeat ?? Duration.seconds(5),
    grace: d.grace ?? Duration.seconds(5),
    staleAfter: d.staleAfter ?? Duration.seconds(30),
    strictLeases: d.strictLeases ?? false,
    maxHandoffs: d.maxHandoffs ?? 1000,
    stopAfterFailures: d.stopAfterFailures,
    stopAfter: d.stopAfter,
    handleSignals: d.handleSignals ?? true,
    writeBehind: d.writeBehind ?? true,
    writeBatch: d.writeBatch ?? 128,
    flushInterval: d.flushInterval ?? Duration.seconds(1),
    artifactBackend: d.artifactBackend,
    notes: d.notes ?? "",
    meta: d.meta ?? {},
    cache: d.cache,
    pricing: d.pricing
  })
}

/**
 * A JSON snapshot of a resolved configuration, as recorded on the run (durations in ms).
 *
 * @since 0.1.0
 * @category encoding
 */
export const toJson = (config: RunConfig): Record<string, unknown> => ({
  // stored with the run: a connection URL's user and password never are
  store: maskUrl(config.store),
  journal: config.journal,
  concurrency: config.concurrency,
  maxAdmitted: config.maxAdmitted,
  label: config.label,
  runId: config.runId ?? null,
  resume: config.resume,
  retrySucceeded: config.retrySucceeded,
  freshRestart: config.freshRestart,
  heartbeatMs: Duration.toMillis(config.heartbeat),
  graceMs: Duration.toMillis(config.grace),
  staleAfterMs: Duration.toMillis(config.staleAfter),
  strictLeases: config.strictLeases,
  maxHandoffs: config.maxHandoffs,
  stopAfterFailures: config.stopAfterFailures ?? null,
  stopAfterMs: config.stopAfter === undefined ? null : Duration.toMillis(config.stopAfter),
  handleSignals: config.handleSignals,
  writeBehind: config.writeBehind,
  writeBatch: config.writeBatch,
  flushIntervalMs: Duration.toMillis(config.flushInterval),
  artifactBackend: config.artifactBackend ?? null,
  notes: config.notes,
  meta: config.meta,
  ...(config.pricing === undefined ? {} : { pricing: config.pricing }),
  ...(config.cache === undefined ? {} : {
    cache: typeof config.cache === "object"
      ? {
        mode: config.cache.mode ?? "readWrite",
        ttlMs: config.cache.ttl === undefined || config.cache.ttl === null ? null : Duration.toMillis(config.cache.ttl),
        ...(config.cache.db === undefined ? {} : { db: config.cache.db })
      }
      : config.cache
  })
})
