/**
 * RunConfig: everything that shapes one run (concurrency, admission window, resume rules,
 * heartbeats, stop conditions, write-behind, journal and artifact backend).
 *
 * In code, pass a partial {@link RunConfigInput} (durations as `Duration.DurationInput`); the
 * declarative layer decodes the same fields from a config file. {@link resolve} fills the
 * defaults and validates, failing with a `ConfigError` that names each bad field.
 *
 * @since 0.1.0
 */
import { Duration, Either } from "effect"
import { ConfigError, type ConfigIssue } from "./Errors.js"

/**
 * Journal mode: `"full"` keeps artifact payloads (task-level resume); `"summary"` keeps
 * metadata only (a resumed pipeline restarts from its seed).
 *
 * @since 0.1.0
 * @category models
 */
export type Journal = "full" | "summary"

/**
 * The fields a caller may set, all optional. Durations accept `Duration.DurationInput`
 * (`"5 seconds"`, `Duration.millis(500)`, or a number of milliseconds).
 *
 * @since 0.1.0
 * @category models
 */
export interface RunConfigInput {
  /** Store location recorded on the run (the store itself is chosen by a layer). */
  readonly store?: string | undefined
  /** `"full"` (default) or `"summary"`. */
  readonly journal?: Journal | undefined
  /** Attempts running at once (default 16). Pipelines waiting out a retry delay hold none. */
  readonly concurrency?: number | undefined
  /** Queued + running + waiting-to-retry pipelines (default 4 × concurrency). */
  readonly maxAdmitted?: number | undefined
  /** Label recorded on the run. */
  readonly label?: string | undefined
  /** Explicit run id (default: time-based plus a digest). */
  readonly runId?: string | undefined
  /** Claim pipelines abandoned by runs whose heartbeat is older than `staleAfter`. */
  readonly resume?: boolean | undefined
  /** Re-run pipelines that already succeeded. */
  readonly retrySucceeded?: boolean | undefined
  /** Discard checkpoints of admitted pipelines and start them from their seed. */
  readonly freshRestart?: boolean | undefined
  /** How often the run's heartbeat is written (default 5 s). */
  readonly heartbeat?: Duration.DurationInput | undefined
  /** How long in-flight attempts may finish after a stop before they are interrupted (5 s). */
  readonly grace?: Duration.DurationInput | undefined
  /** A run whose heartbeat is older than this is considered dead (default 30 s). */
  readonly staleAfter?: Duration.DurationInput | undefined
  /** A leaked lease fails its task with `LeaseLeakError` instead of being reclaimed quietly. */
  readonly strictLeases?: boolean | undefined
  /** Stop admitting after this many failed pipelines (best effort). */
  readonly stopAfterFailures?: number | undefined
  /** Stop admitting after this much wall time. */
  readonly stopAfter?: Duration.DurationInput | undefined
  /** Install SIGINT/SIGTERM handlers that call `stop` (default true; a second signal stops at once). */
  readonly handleSignals?: boolean | undefined
  /** Batch attempts and events (default true for file stores). */
  readonly writeBehind?: boolean | undefined
  /** Write-behind batch size (default 128). */
  readonly writeBatch?: number | undefined
  /** Write-behind flush interval (default 1 s). */
  readonly flushInterval?: Duration.DurationInput | undefined
  /** Where payloads go: `"inline"`, `"file:///path"`, `"null"` or `{ kind, root, minBytes }`. */
  readonly artifactBackend?: string | { readonly kind: string; readonly [key: string]: unknown } | undefined
  /** Free-form notes recorded on the run. */
  readonly notes?: string | undefined
  /** Free-form metadata recorded on the run (strict JSON). */
  readonly meta?: Readonly<Record<string, unknown>> | undefined
}

/**
 * A resolved configuration: every default filled in, durations decoded.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunConfig {
  readonly store: string
  readonly journal: Journal
  readonly concurrency: number
  readonly maxAdmitted: number
  readonly label: string
  readonly runId: string | undefined
  readonly resume: boolean
  readonly retrySucceeded: boolean
  readonly freshRestart: boolean
  readonly heartbeat: Duration.Duration
  readonly grace: Duration.Duration
  readonly staleAfter: Duration.Duration
  readonly strictLeases: boolean
  readonly stopAfterFailures: number | undefined
  readonly stopAfter: Duration.Duration | undefined
  readonly handleSignals: boolean
  readonly writeBehind: boolean
  readonly writeBatch: number
  readonly flushInterval: Duration.Duration
  readonly artifactBackend: RunConfigInput["artifactBackend"]
  readonly notes: string
  readonly meta: Readonly<Record<string, unknown>>
}

const positiveInt = (
  issues: Array<ConfigIssue>,
  path: string,
  value: number | undefined,
  fallback: number
): number => {
  if (value === undefined) return fallback
  if (!Number.isInteger(value) || value < 1) {
    issues.push({ path, message: `must be a positive integer, got ${String(value)}` })
    return fallback
  }
  return value
}

const duration = (
  issues: Array<ConfigIssue>,
  path: string,
  value: Duration.DurationInput | undefined,
  fallback: Duration.Duration
): Duration.Duration => {
  if (value === undefined) return fallback
  const decoded = Duration.decodeUnknown(value)
  if (decoded._tag === "None" || !Duration.isFinite(decoded.value)) {
    issues.push({ path, message: `must be a finite duration such as "5 seconds", got ${JSON.stringify(value)}` })
    return fallback
  }
  return decoded.value
}

/**
 * Fills defaults and validates a {@link RunConfigInput}. Every problem is reported at once in
 * the `ConfigError`'s `issues`, each with its field path (`run.concurrency`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (input: RunConfigInput = {}): Either.Either<RunConfig, ConfigError> => {
  const issues: Array<ConfigIssue> = []
  const concurrency = positiveInt(issues, "run.concurrency", input.concurrency, 16)
  const maxAdmitted = positiveInt(issues, "run.maxAdmitted", input.maxAdmitted, 4 * concurrency)
  const writeBatch = positiveInt(issues, "run.writeBatch", input.writeBatch, 128)
  let stopAfterFailures: number | undefined
  if (input.stopAfterFailures !== undefined) {
    stopAfterFailures = positiveInt(issues, "run.stopAfterFailures", input.stopAfterFailures, 1)
  }
  if (input.journal !== undefined && input.journal !== "full" && input.journal !== "summary") {
    issues.push({ path: "run.journal", message: `must be "full" or "summary", got ${JSON.stringify(input.journal)}` })
  }
  const config: RunConfig = {
    store: input.store ?? ":memory:",
    journal: input.journal === "summary" ? "summary" : "full",
    concurrency,
    maxAdmitted,
    label: input.label ?? "",
    runId: input.runId,
    resume: input.resume ?? false,
    retrySucceeded: input.retrySucceeded ?? false,
    freshRestart: input.freshRestart ?? false,
    heartbeat: duration(issues, "run.heartbeat", input.heartbeat, Duration.seconds(5)),
    grace: duration(issues, "run.grace", input.grace, Duration.seconds(5)),
    staleAfter: duration(issues, "run.staleAfter", input.staleAfter, Duration.seconds(30)),
    strictLeases: input.strictLeases ?? false,
    stopAfterFailures,
    stopAfter: input.stopAfter === undefined
      ? undefined
      : duration(issues, "run.stopAfter", input.stopAfter, Duration.infinity),
    handleSignals: input.handleSignals ?? true,
    writeBehind: input.writeBehind ?? true,
    writeBatch,
    flushInterval: duration(issues, "run.flushInterval", input.flushInterval, Duration.seconds(1)),
    artifactBackend: input.artifactBackend,
    notes: input.notes ?? "",
    meta: input.meta ?? {}
  }
  if (issues.length > 0) {
    return Either.left(
      new ConfigError({
        message: `invalid run configuration: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    )
  }
  return Either.right(config)
}

/**
 * A JSON snapshot of a resolved configuration, as recorded on the run (durations in ms).
 *
 * @since 0.1.0
 * @category encoding
 */
export const toJson = (config: RunConfig): Record<string, unknown> => ({
  store: config.store,
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
  stopAfterFailures: config.stopAfterFailures ?? null,
  stopAfterMs: config.stopAfter === undefined ? null : Duration.toMillis(config.stopAfter),
  handleSignals: config.handleSignals,
  writeBehind: config.writeBehind,
  writeBatch: config.writeBatch,
  flushIntervalMs: Duration.toMillis(config.flushInterval),
  artifactBackend: config.artifactBackend ?? null,
  notes: config.notes,
  meta: config.meta
})
