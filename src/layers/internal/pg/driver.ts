/**
 * The PostgreSQL driver of the store (`Store.StoreDriver`): writes and reads over one
 * `@effect/sql` client (`PgClient`), each group-commit batch and each write-behind batch in
 * one transaction.
 *
 * - **Several writers.** Any number of processes may open the same database for writing
 *   (`exclusiveWriter: false`): ids come from identity columns, counters are incremented in
 *   SQL, and the traversal version check locks the pipeline rows it reads (`FOR UPDATE`, in
 *   id order). A plain batch claims checkpoint keys and locks pipeline rows in key order, so
 *   two writers' batches wait for each other but do not deadlock; a batch with traversal
 *   writes goes unit by unit and may (rarely) be chosen as a deadlock victim: a typed,
 *   retryable `StoreUnavailable` (`40P01`).
 * - **First-writer-wins checkpoints.** A task completion (a checkpoint unit with an output artifact
 *   and a task row; an output written without a task row is stored as is) first inserts
 *   `(pipeline_id, seq, visit)` into `assay_checkpoints` with `ON CONFLICT DO NOTHING`. When the
 *   key is already there (another runner, or a paused "zombie" runner, committed the same task
 *   first), the unit's artifact, task row, pipeline patch and traversal write are skipped and only
 *   its attempts and events (what really happened) are written; the stored output stays the
 *   winner's, and reading it back (`getArtifactById` / `getArtifact`) gives the winner's value.
 *   An invalidation (rewind, retry-all) deletes the keys of the stations it invalidates, and an
 *   admission deletes the keys at and after the cursor it admits the pipeline with (a restart
 *   from the seed clears them all), so a legitimate re-run writes again.
 * - **Fenced by the run (fence38).** A checkpoint unit with a task row is written only while
 *   its pipeline's row is `running` under the task row's run, checked on the row locked in the
 *   commit's transaction: a late commit of an execution that no longer holds the pipeline (a
 *   zombie thawed after its window was taken over, the pipeline failed and another run
 *   admitted it again) writes its attempts and events only, as a first-writer loser does. Its key is not claimed (the new run's own commit of that
 *   task wins), and no output, task row, pipeline patch or traversal write of it is kept, so
 *   the row is never taken back to the old run and no second active task row is left. A unit
 *   of a pipeline the same batch admits under the unit's run (an admission riding its first
 *   checkpoint, possibly written already settled) is the admission's own and is not fenced,
 *   nor is a unit without a task row (a patch, an output written on purpose without one,
 *   attempts, events).
 * - **Errors.** Every `SqlError` becomes a typed `StoreUnavailable` whose message names the
 *   database without its password (`url.ts`).
 *
 * @since 0.8.0
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Chunk, Duration, Effect, Either, Option, Schedule, Schema, Stream } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import { errorRowOf } from "../../../domain/TaskStore.js"
import * as Traversal from "../../../domain/Traversal.js"
import {
  ArtifactRecord,
  type PipelineRecord,
  type PipelineState,
  type TaskRecord,
  trusted
} from "../../../domain/Records.js"
import type { ArtifactBackendService } from "../../../services/ArtifactBackend.js"
import type { CallCacheService } from "../../../services/CallCache.js"
import { settleToPatch } from "../../../services/internal/store/ops.js"
import {
  artifactRecordOf,
  loadPayload,
  PAGE_SIZE,
  quantileAt,
  quantileRanks,
  succeededIndexOf,
  ACCOUNTED_CONDITION,
  PG_ACCOUNTING_COLUMNS,
  cacheFiguresOfRow,
  pgCacheFigures,
  accountingOrderSql,
  figuresOfRow,
  type PipelineStateAndRun
} from "../../../services/internal/store/shared.js"
import { BASE_LEVEL, conflict, handoffEventOf, needsVisits, newest, VISITS_LEVEL } from "../../../services/internal/store/traversal.js"
import type {
  CompletionBucket,
  ErrorRow,
  EventFilter,
  Latency,
  LoadedArtifact,
  NewArtifact,
  NewAttempt,
  NewEvent,
  PipelineBundle,
  PipelineFields,
  PipelinePatch,
  PipelinesPage,
  PlacedArtifact,
  PipelineAccounting,
  ResourceUsage,
  SpecCount,
  StoreDriver,
  StoreStats,
  StoreWrite,
  TaskFields,
  TraversalWrite,
  CheckpointUnit,
  ClaimExpectation,
  ClaimOutcome
} from "../../../services/Store.js"
import {
  PIPELINE_COLUMNS,
  pipelineParams,
  toArtifact,
  toAttempt,
  toEvent,
  toHandoff,
  toMetric,
  toPipeline,
  toResource,
  toRun,
  toTask
} from "../sqlite/rows.js"
import * as TraversalText from "../sqlite/traversalText.js"
import { prepared } from "./prepared.js"
import { redactUrl, scrub } from "./url.js"
import { connectionMessage, isConnectionProblem, isLoginRefused } from "./connect.js"

type Row = Record<string, unknown>

/**
 * What the driver is built on: the client, the URL it was opened with (for messages, never
 * printed whole), whether it is read-only (and the error writes fail with), and the feature
 * level read at open.
 *
 * @since 0.8.0
 * @category models
 */
export interface PgEnv {
  readonly sql: SqlClient.SqlClient
  readonly url: string
  readonly readOnlyError: StoreUnavailable | undefined
  readonly featureLevel: string
  /**
   * How long a statement or transaction that failed because the server could not be reached
   * (a restart, a failover, a dropped connection) or chose it as a deadlock or serialization
   * victim is retried before its error goes to the caller (default 30 s; 0: never retried).
   */
  readonly retryFor?: Duration.DurationInput | undefined
  /** The store's own call cache (`Store.callCache`), on `sql`; none for a read-only open. */
  readonly callCache?: CallCacheService | undefined
  /** The store's identity (`Store.storeId`); none for a read-only open. */
  readonly storeId?: Effect.Effect<string, StoreUnavailable> | undefined
  /**
   * One suite member's view (read-only opens only): the reads see the member's pipelines
   * and their rows alone (see {@link memberScopeSql}). Absent: every row.
   */
  readonly member?: MemberScope | undefined
}

/**
 * A suite member in a Postgres store: `prefix`, the pipeline-id prefix of its pipelines (its
 * 12-hex member digest and `-`: `Suite.memberPipelineId`), and `experimentId`, its id (its
 * private pools and member-scoped metrics are named `experiment:ID:NAME`).
 *
 * @since 0.12.0
 * @category models
 */
export interface MemberScope {
  readonly prefix: string
  readonly experimentId: string
}

/** The tables whose rows belong to one pipeline (`pipeline_id`), scoped by a member's prefix. */
const PIPELINE_TABLES = /\bFROM (assay_(?:pipelines|tasks|attempts|events|artifacts|handoffs|checkpoints))\b/g

/** A SQL string literal of `s` (quotes doubled). */
const literalOf = (s: string) => `'${s.replace(/'/g, "''")}'`

/**
 * A read statement's text scoped to one member, as a suite root's member view reads its
 * rows: each pipeline table read (`FROM assay_pipelines`, tasks, attempts, events, artifacts,
 * handoffs, checkpoints) becomes that table's rows whose `pipeline_id` starts with the
 * member's prefix (`starts_with`, right under any collation; the tables are scanned: a range
 * on the key would use its index only under the C collation; run-level events, without a
 * pipeline, are left out, as a member of a combined suite root shows them); metrics
 * keep the member's pipelines' and, of the run-level ones, the member-scoped ones
 * (`experiment:ID:NAME`); resources keep the shared pools' and the member's own private pools'
 * (`experiment:ID:NAME`), not another member's. Runs are every run's (a member view lists the
 * suite's runs). The prefix is checked to be hex digits and `-` (it is inlined).
 *
 * @since 0.12.0
 * @category reads
 */
export const memberScopeSql = (scope: MemberScope): (text: string) => string => {
  if (!/^[0-9a-f]+-$/.test(scope.prefix)) throw new Error(`not a member prefix: ${scope.prefix}`)
  const prefix = literalOf(scope.prefix)
  const own = literalOf(`experiment:${scope.experimentId}:`)
  const inRange = (column: string) => `starts_with(${column}, ${prefix})`
  return (text) =>
    text
      .replace(PIPELINE_TABLES, (_, table: string) => `FROM (SELECT * FROM ${table} WHERE ${inRange("pipeline_id")}) ${table}`)
      .replace(
        /\bFROM assay_metrics\b/g,
        `FROM (SELECT * FROM assay_metrics WHERE (${inRange("scope")}) OR (scope = '' AND starts_with(name, ${own}))) assay_metrics`
      )
      .replace(
        /\bFROM assay_resources\b/g,
        `FROM (SELECT * FROM assay_resources WHERE NOT starts_with(pool, 'experiment:') OR starts_with(pool, ${own})) assay_resources`
      )
}

/**
 * Whether a failed statement is worth trying again: the server was unreachable or went away
 * (socket errors, SQLSTATE classes 08 and 57P), or picked the transaction as a deadlock or
 * serialization victim (`40P01`, `40001`). A statement the server refused for what it says
 * (a constraint, a syntax error) is not.
 *
 * @since 0.8.0
 * @category errors
 */
export const isTransient = (e: unknown): boolean => {
  let inner: unknown = e
  for (let i = 0; i < 3; i++) {
    const next = (inner as { cause?: unknown } | null)?.cause
    if (next === undefined || next === null) break
    inner = next
  }
  const code = (inner as { code?: unknown } | null)?.code
  if (code === "40P01" || code === "40001" || code === "3D000" || (typeof code === "string" && code.startsWith("28"))) {
    return code === "40P01" || code === "40001"
  }
  return isConnectionProblem(e)
}

/**
 * A transaction whose `COMMIT` or `ROLLBACK` failed: `@effect/sql` makes that a defect (an
 * `SqlError` died with), which happens exactly when the connection is lost mid-transaction (a
 * server restart). Turned back into a failure, so that it is retried and typed like any other.
 */
const failedEnd = <A>(e: Effect.Effect<A, SqlError>): Effect.Effect<A, SqlError> =>
  Effect.catchSomeDefect(e, (d) =>
    (d as { _tag?: unknown } | null)?._tag === "SqlError" ? Option.some(Effect.fail(d as SqlError)) : Option.none())

/** Whether `e` is an `@effect/sql` `SqlError` (the client's failures, before they are typed). */
const isSqlError = (e: unknown): e is SqlError => (e as { _tag?: unknown } | null)?._tag === "SqlError"

/**
 * The retry of a store's {@link isTransient} failures, with one budget per outage rather than
 * per operation: `retryFor` (a duration) is measured on the `Clock` from the first transient
 * failure of the outage, which ends at the next operation the database answers (a success, or
 * a failure that is not transient). Waits are exponential from 100 ms, each at most 2 s. An
 * operation that meets a transient failure once the outage is older than `retryFor` fails at
 * once with it.
 *
 * Why one budget per outage: a store whose database stays away answers every later operation
 * (closing the run, marking its pipelines interrupted) with the same verdict, and with a budget
 * per operation a command waited one whole window for each of them before it could say the
 * database is gone (three windows and more: ~1.5 min at the default 30 s; ci32's finding in
 * test/cli/pg-restart.test.ts). `retryFor` of 0 or less never retries.
 *
 * Returns the wrapper to put around each operation (`SqlError` in, the same error out).
 *
 * @internal
 */
export const outageRetry = (
  retryFor: Duration.DurationInput
): <A>(e: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError> => {
  const budgetMs = Duration.toMillis(Duration.decode(retryFor))
  if (budgetMs <= 0) return (e) => e
  /** When the outage under way began (ms on the Clock); `undefined` while the database answers. */
  let since: number | undefined
  /** The outage's last transient failure seen (ms on the Clock). */
  let last = 0
  const schedule = Schedule.exponential("100 millis").pipe(
    Schedule.union(Schedule.spaced("2 seconds")),
    Schedule.whileInput((e: SqlError) => isTransient(e)),
    Schedule.checkEffect(() =>
      Effect.map(Effect.clockWith((clock) => clock.currentTimeMillis), (now) => {
        // an outage no operation met for OUTAGE_FORGOTTEN_MS is over (nothing asked the database
        // since): a failure now starts a new one with the whole budget
        if (since === undefined || now - last > OUTAGE_FORGOTTEN_MS) since = now
        last = now
        return now - since < budgetMs
      })
    )
  )
  const answered = Effect.sync(() => {
    since = undefined
  })
  return (e) =>
    Effect.retry(
      Effect.onExit(e, (exit) =>
        exit._tag === "Success"
          ? answered
          : Option.match(Cause.failureOption(exit.cause), {
            onNone: () => Effect.void, // interrupted or a defect: the database said nothing
            onSome: (error) => (isTransient(error) ? Effect.void : answered)
          })),
      schedule
    )
}

/**
 * How long (ms) after the last transient failure any operation met an outage is forgotten when
 * nothing answered in between: longer than the retry's longest wait (2 s), so operations
 * retrying side by side keep one outage; an operation after a quiet spell gets a fresh budget.
 */
const OUTAGE_FORGOTTEN_MS = 5_000

/**
 * An `SqlError` (or anything thrown below the client) as the typed `StoreUnavailable` of a
 * store on `url`: the message names the database without its password and quotes the
 * driver's reason (its code, e.g. `57P01` for a server shutting down, `ECONNREFUSED`). A
 * login the server refused is marked `loginRefused: true` (the CLI exits 2 for it).
 *
 * @since 0.8.0
 * @category errors
 */
export const unavailableOf = (url: string, what: string, cause: unknown): StoreUnavailable => {
  const inner = (cause as { cause?: unknown } | null)?.cause ?? cause
  const code = (inner as { code?: unknown } | null)?.code
  const text = inner instanceof Error ? inner.message : (cause as { message?: unknown } | null)?.message ?? String(cause)
  // a server that cannot be reached or refuses the login: host, port, cause and what to do
  if (isConnectionProblem(cause)) {
    const why = connectionMessage(url, cause)
    return new StoreUnavailable({
      message: what === "connecting" ? why : `${what} failed: ${why}`,
      path: redactUrl(url),
      // a refused login is a configuration mistake: the CLI exits 2 for it
      ...(isLoginRefused(cause) ? { loginRefused: true } : {})
    })
  }
  const reason = scrub(`${typeof code === "string" ? `${code}: ` : ""}${String(text)}`, url)
  return new StoreUnavailable({ message: `${what} of postgres store ${redactUrl(url)} failed: ${reason}`, path: redactUrl(url) })
}

/** Bytes as a Buffer for node-postgres (no copy). */
const toBuffer = (u: Uint8Array | null): Buffer | null =>
  u === null ? null : Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength)

/** A BYTEA column as bytes, or `null`. */
const toBytes = (u: unknown): Uint8Array | null =>
  u instanceof Uint8Array ? new Uint8Array(u.buffer, u.byteOffset, u.byteLength) : null

/** JSON text of a value, `null` for `undefined`. */
const jsonOrNull = (u: unknown): string | null => (u === undefined ? null : JSON.stringify(u))

/** Postgres binds at most 65,535 parameters per statement. */
const MAX_PARAMS = 60_000

/** Columns an upsert never overwrites with `NULL` (a re-admission that does not know it keeps it). */
const KEEP_KNOWN = new Set(["repeat", "traversal", "suite_id", "experiment_id", "local_key"])
const ADMIT_COLUMNS = [...PIPELINE_COLUMNS, "traversal"]
const ADMIT_SUFFIX = `ON CONFLICT (pipeline_id) DO UPDATE SET ${
  ADMIT_COLUMNS.filter((c) => c !== "pipeline_id").map((c) =>
    KEEP_KNOWN.has(c) ? `${c} = coalesce(EXCLUDED.${c}, assay_pipelines.${c})` : `${c} = EXCLUDED.${c}`
  ).join(", ")
}`
const TASK_COLUMNS = [
  "task_run_id", "pipeline_id", "run_id", "seq", "task_name", "state", "attempts_used", "started_at", "ended_at",
  "duration_ms", "error_type", "error_message", "error_class", "lease_ids", "visit", "active"
]
const TASK_SUFFIX = `ON CONFLICT (task_run_id) DO UPDATE SET ${
  TASK_COLUMNS.filter((c) => c !== "task_run_id").map((c) => `${c} = EXCLUDED.${c}`).join(", ")
}`
const ATTEMPT_COLUMNS = [
  "pipeline_id", "run_id", "task_run_id", "task_name", "seq", "attempt_no", "outcome", "error_class", "error_type",
  "error_message", "decision", "lease_ids", "started_at", "ended_at", "duration_ms", "visit", "model", "tokens_in",
  "tokens_out", "tokens_estimated", "cost_usd"
]
const EVENT_COLUMNS = ["kind", "pipeline_id", "run_id", "data", "ts"]
const ARTIFACT_COLUMNS = [
  "pipeline_id", "run_id", "seq", "task_name", "type_name", "codec", "digest", "size", "storage", "blob_ref", "payload",
  "is_final", "created_at", "visit", "active"
]
const HANDOFF_COLUMNS = [
  "pipeline_id", "run_id", "from_seq", "from_task", "to_seq", "to_task", "operation", "entry_seq", "entry_artifact_id",
  "entry_reused", "reason", "ts"
]
/** Artifact metadata columns (what `toArtifact` reads). */
const META =
  "artifact_id, pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage, blob_ref, is_final, created_at, (payload IS NOT NULL)::int AS has_payload, visit, active"

const taskRow = (t: TaskFields): Array<unknown> => [
  t.taskRunId, t.pipelineId, t.runId, t.seq, t.taskName, t.state, t.attemptsUsed, t.startedAt, t.endedAt, t.durationMs,
  t.errorType, t.errorMessage, t.errorClass, JSON.stringify(t.leaseIds), t.visit ?? 0, t.active === false ? 0 : 1
]
const attemptRow = (a: NewAttempt): Array<unknown> => [
  a.pipelineId, a.runId, a.taskRunId, a.taskName, a.seq, a.attemptNo, a.outcome, a.errorClass, a.errorType,
  a.errorMessage, jsonOrNull(a.decision), JSON.stringify(a.leaseIds), a.startedAt, a.endedAt, a.durationMs, a.visit ?? 0,
  a.model ?? null, a.tokensIn ?? null, a.tokensOut ?? null, a.tokensEstimated === true ? 1 : 0, a.costUsd ?? null
]
const eventRow = (e: NewEvent): Array<unknown> => [e.kind, e.pipelineId, e.runId, jsonOrNull(e.data), e.ts]
const artifactRow = (a: NewArtifact, placed: PlacedArtifact): Array<unknown> => [
  a.pipelineId, a.runId, a.seq, a.taskName, a.typeName, a.codec, a.digest, a.payload.byteLength, placed.storage,
  placed.blobRef, toBuffer(placed.payload), a.isFinal ? 1 : 0, a.createdAt, a.visit ?? 0, 1
]

/** Column types of the rows sent as arrays (`unnest`), in the order of their columns. */
const PIPELINE_TYPES: ReadonlyArray<readonly [string, string]> = [
  ["pipeline_id", "text"], ["key", "text"], ["name", "text"], ["state", "text"], ["n_tasks_done", "int"],
  ["n_tasks_total", "int"], ["spec_digest", "text"], ["seed_digest", "text"], ["tags", "text"],
  ["attempts_total", "int"], ["run_id", "text"], ["created_at", "bigint"], ["updated_at", "bigint"],
  ["started_at", "bigint"], ["ended_at", "bigint"], ["failed_task", "text"], ["error_type", "text"],
  ["error_message", "text"], ["error_class", "text"], ["repeat", "int"], ["suite_id", "text"],
  ["experiment_id", "text"], ["local_key", "text"], ["traversal", "text"]
]
const TASK_TYPES: ReadonlyArray<readonly [string, string]> = [
  ["task_run_id", "text"], ["pipeline_id", "text"], ["run_id", "text"], ["seq", "int"], ["task_name", "text"],
  ["state", "text"], ["attempts_used", "int"], ["started_at", "bigint"], ["ended_at", "bigint"],
  ["duration_ms", "float8"], ["error_type", "text"], ["error_message", "text"], ["error_class", "text"],
  ["lease_ids", "text"], ["visit", "int"], ["active", "smallint"], ["k", "int"]
]
const ATTEMPT_TYPES: ReadonlyArray<readonly [string, string]> = [
  ["pipeline_id", "text"], ["run_id", "text"], ["task_run_id", "text"], ["task_name", "text"], ["seq", "int"],
  ["attempt_no", "int"], ["outcome", "text"], ["error_class", "text"], ["error_type", "text"],
  ["error_message", "text"], ["decision", "text"], ["lease_ids", "text"], ["started_at", "bigint"],
  ["ended_at", "bigint"], ["duration_ms", "float8"], ["visit", "int"], ["model", "text"], ["tokens_in", "bigint"],
  ["tokens_out", "bigint"], ["tokens_estimated", "smallint"], ["cost_usd", "float8"]
]
const EVENT_TYPES: ReadonlyArray<readonly [string, string]> = [
  ["kind", "text"], ["pipeline_id", "text"], ["run_id", "text"], ["data", "text"], ["ts", "bigint"]
]
const ARTIFACT_TYPES: ReadonlyArray<readonly [string, string]> = [
  ["pipeline_id", "text"], ["run_id", "text"], ["seq", "int"], ["task_name", "text"], ["type_name", "text"],
  ["codec", "text"], ["digest", "text"], ["size", "bigint"], ["storage", "text"], ["blob_ref", "text"],
  ["payload", "bytea"], ["is_final", "smallint"], ["created_at", "bigint"], ["visit", "int"], ["active", "smallint"],
  ["k", "int"]
]
const CLAIM_TYPES: ReadonlyArray<readonly [string, string]> = [
  ["pipeline_id", "text"], ["seq", "int"], ["visit", "int"], ["run_id", "text"], ["digest", "text"],
  ["committed_at", "bigint"], ["k", "int"]
]

/**
 * The run a checkpoint unit was written under, which its pipeline's row must still be
 * `running` under for the unit's output, task row, pipeline patch and traversal write to be
 * written (fence38, see the module docs): its task row's run. `undefined` (a unit without a
 * task row: a patch, an output written on purpose without one, attempts, events): the unit is
 * not fenced.
 */
const fenceRunOf = (u: CheckpointUnit): string | undefined => u.task?.runId
/** Patch fields in the order of their columns; a patch row says which it sets in a bit mask `h`. */
const PATCH_FIELDS = [
  ["state", "text"], ["n_tasks_done", "int"], ["run_id", "text"], ["started_at", "bigint"], ["ended_at", "bigint"],
  ["failed_task", "text"], ["error_type", "text"], ["error_message", "text"], ["error_class", "text"]
] as const
const PATCH_TYPES: ReadonlyArray<readonly [string, string]> = [
  ["id", "text"], ...PATCH_FIELDS, ["h", "int"], ["attempts_delta", "int"], ["updated_at", "bigint"]
]
/** A folded pipeline patch as a row of {@link PATCH_TYPES}. */
const patchRow = (id: string, p: PipelinePatch): Array<unknown> => {
  const e = p.error
  const has = [
    p.state !== undefined, p.nTasksDone !== undefined, p.runId !== undefined, p.startedAt !== undefined,
    p.endedAt !== undefined, e !== undefined, e !== undefined, e !== undefined, e !== undefined
  ]
  return [
    id, p.state ?? null, p.nTasksDone ?? null, p.runId ?? null, p.startedAt ?? null, p.endedAt ?? null,
    e?.failedTask ?? null, e?.errorType ?? null, e?.errorMessage ?? null, e?.errorClass ?? null,
    has.reduce((h, b, k) => (b ? h | (1 << k) : h), 0), p.attemptsDelta ?? 0, p.updatedAt
  ]
}

/**
 * Rows as one array parameter per column: `from` is
 * `unnest($a::t1[], $b::t2[], …) WITH ORDINALITY AS x(c1, c2, …, ord)` (`ord` counts rows from
 * 1 in the order given), its parameters appended to `params`.
 */
const unnestOf = (
  types: ReadonlyArray<readonly [string, string]>,
  values: ReadonlyArray<ReadonlyArray<unknown>>,
  params: Array<unknown> = []
): { readonly from: string; readonly params: Array<unknown> } => {
  const marks = types.map(([, type], c) => {
    params.push(values.map((row) => row[c] ?? null))
    return `$${params.length}::${type}[]`
  })
  return {
    from: `unnest(${marks.join(", ")}) WITH ORDINALITY AS x(${types.map(([name]) => name).join(", ")}, ord)`,
    params
  }
}

/** The traversal state of a control pipeline as stored. */
const validState = Schema.decodeUnknownEither(Traversal.VisitState)

/**
 * Builds the driver over an opened, checked database (see `PgStore.makeDriver`).
 *
 * @since 0.8.0
 * @category constructors
 */
export const makeDriver = (env: PgEnv, backend: ArtifactBackendService): StoreDriver => {
  const { sql, url } = env
  let level = env.featureLevel
  const fail = (what: string) => (e: SqlError) => unavailableOf(url, what, e)
  const retryFor = env.retryFor ?? "30 seconds"
  /** Tries `e` again while it fails with a transient error, for at most `retryFor`. */
  const retrying = outageRetry(retryFor)
  const read = <A>(e: Effect.Effect<A, SqlError>): Effect.Effect<A, StoreUnavailable> =>
    Effect.mapError(retrying(e), fail("read"))
  const rows = (text: string, params: ReadonlyArray<unknown> = []): Effect.Effect<ReadonlyArray<Row>, SqlError> =>
    sql.unsafe<Row>(text, params as Array<unknown>)
  /**
   * {@link rows} as a named prepared statement (`prepared.ts`): only for the hot statements
   * of a fixed set of texts that return no row or only columns of their own parameters (a
   * `SELECT *` would fail once a migration adds a column: "cached plan must not change result
   * type").
   */
  const hot = (text: string, params: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<Row>, SqlError> =>
    rows(prepared(text), params)
  const scoped = env.member === undefined ? undefined : memberScopeSql(env.member)
  const q = (text: string, params: ReadonlyArray<unknown> = []) =>
    read(rows(scoped === undefined ? text : scoped(text), params))
  /**
   * A read of fixed text through {@link hot} (a named prepared statement; scoped to the
   * member's rows as {@link q} is): only for texts that list their columns.
   */
  const hotRead = (text: string, params: ReadonlyArray<unknown>) =>
    read(hot(scoped === undefined ? text : scoped(text), params))
  /** One transaction; a read-only store refuses before touching the database. */
  const tx = <A>(what: string, body: Effect.Effect<A, SqlError>): Effect.Effect<A, StoreUnavailable> =>
    env.readOnlyError !== undefined
      ? Effect.fail(env.readOnlyError)
      : Effect.mapError(retrying(failedEnd(sql.withTransaction(body))), fail(what))

  /** A multi-row INSERT of `values` (chunked below the parameter limit); the returned rows. */
  const insertMany = (
    table: string,
    columns: ReadonlyArray<string>,
    values: ReadonlyArray<ReadonlyArray<unknown>>,
    suffix = ""
  ): Effect.Effect<ReadonlyArray<Row>, SqlError> =>
    Effect.suspend(() => {
      const per = Math.max(1, Math.floor(MAX_PARAMS / columns.length))
      const chunks: Array<ReadonlyArray<ReadonlyArray<unknown>>> = []
      for (let i = 0; i < values.length; i += per) chunks.push(values.slice(i, i + per))
      return Effect.map(
        Effect.forEach(chunks, (chunk) => {
          const params: Array<unknown> = []
          const tuples = chunk.map((row) => {
            const marks = row.map((v) => {
              params.push(v)
              return `$${params.length}`
            })
            return `(${marks.join(",")})`
          })
          return rows(`INSERT INTO ${table} (${columns.join(",")}) VALUES ${tuples.join(",")} ${suffix}`, params)
        }),
        (out) => out.flat()
      )
    })

  /** Inserts one artifact (a final one clears every other final of its pipeline); returns its id. */
  const insertArtifact = (a: NewArtifact, placed: PlacedArtifact): Effect.Effect<number, SqlError> =>
    Effect.gen(function*() {
      const [r] = yield* insertMany("assay_artifacts", ARTIFACT_COLUMNS, [artifactRow(a, placed)], "RETURNING artifact_id")
      const id = Number(r!.artifact_id)
      if (a.isFinal) {
        yield* rows(
          "UPDATE assay_artifacts SET is_final = 0 WHERE pipeline_id = $1 AND is_final = 1 AND artifact_id <> $2",
          [a.pipelineId, id]
        )
      }
      return id
    })

  /** Makes artifact `id` the only final one of its pipeline. */
  const setFinal = (pipelineId: string, id: number) =>
    Effect.zipRight(
      rows("UPDATE assay_artifacts SET is_final = 1 WHERE artifact_id = $1 AND is_final = 0", [id]),
      rows("UPDATE assay_artifacts SET is_final = 0 WHERE pipeline_id = $1 AND is_final = 1 AND artifact_id <> $2", [
        pipelineId,
        id
      ])
    )

  const patchPipeline = (pipelineId: string, p: PipelinePatch, traversal?: string): Effect.Effect<unknown, SqlError> => {
    const sets: Array<string> = []
    const params: Array<unknown> = []
    const set = (column: string, value: unknown) => {
      params.push(value)
      sets.push(`${column} = $${params.length}`)
    }
    if (p.state !== undefined) set("state", p.state)
    if (p.nTasksDone !== undefined) set("n_tasks_done", p.nTasksDone)
    if (p.runId !== undefined) set("run_id", p.runId)
    if (p.startedAt !== undefined) set("started_at", p.startedAt)
    if (p.endedAt !== undefined) set("ended_at", p.endedAt)
    if (p.error !== undefined) {
      set("failed_task", p.error?.failedTask ?? null)
      set("error_type", p.error?.errorType ?? null)
      set("error_message", p.error?.errorMessage ?? null)
      set("error_class", p.error?.errorClass ?? null)
    }
    if (p.attemptsDelta !== undefined && p.attemptsDelta !== 0) {
      params.push(p.attemptsDelta)
      sets.push(`attempts_total = attempts_total + $${params.length}`)
    }
    if (traversal !== undefined) set("traversal", traversal)
    set("updated_at", p.updatedAt)
    params.push(pipelineId)
    return rows(`UPDATE assay_pipelines SET ${sets.join(", ")} WHERE pipeline_id = $${params.length}`, params)
  }

  /** The latest artifact id at `seq` (active ones; with `visit`, that occurrence's, active or not). */
  const latestAt = (pipelineId: string, seq: number, visit?: number) =>
    Effect.map(
      visit === undefined
        ? rows(
          "SELECT max(artifact_id) AS id FROM assay_artifacts WHERE pipeline_id = $1 AND seq = $2 AND active = 1",
          [pipelineId, seq]
        )
        : rows(
          "SELECT max(artifact_id) AS id FROM assay_artifacts WHERE pipeline_id = $1 AND seq = $2 AND visit = $3",
          [pipelineId, seq, visit]
        ),
      (r) => (r[0]?.id === null || r[0]?.id === undefined ? undefined : Number(r[0].id))
    )


  /**
   * Whether a batch can be committed by {@link plainCommit}: no traversal write, no final mark,
   * and no pipeline admitted after an earlier write of it in the same batch (so admitting every
   * row first, then the rest, is the same as applying the writes in order).
   */
  const isPlain = (ops: ReadonlyArray<StoreWrite>): boolean => {
    const touched = new Set<string>()
    for (const op of ops) {
      switch (op._tag) {
        case "Admit":
          if (op.traversals.length > 0) return false
          for (const p of op.pipelines) if (touched.has(p.pipelineId)) return false
          break
        case "Checkpoint":
          if (op.unit.traversal !== undefined) return false
          touched.add(op.unit.pipelineId)
          break
        case "MarkFinal":
          return false
        case "PutTask":
          touched.add(op.task.pipelineId)
          break
        case "Patch":
        case "Settle":
          touched.add(op.pipelineId)
          break
      }
    }
    return true
  }


  /**
   * A plain batch (see {@link isPlain}) in at most three statements, whatever its size, every
   * row set sent as one array per column (`unnest`):
   *
   * 1. the admitted rows upserted (in id order) and the checkpoint keys at and after their
   *    cursors deleted, in one statement;
   * 2. the checkpoint keys claimed (first writer wins; the first unit of a key in the batch is
   *    its candidate, in key order), and, filtered by the claims in SQL, the artifacts (seeds and
   *    outputs in the batch's order, so ids follow it; of several finals of one pipeline only the
   *    last is inserted final, and the pipeline's older finals are cleared), the task rows (the
   *    last row of a task run wins, as consecutive upserts would), the attempts and the events,
   *    in one statement that returns the keys won;
   * 3. the pipeline patches of the winners, folded per pipeline in order, in one UPDATE (its
   *    rows locked in id order before 2, see below).
   *
   * Between 1 and 2, the units are fenced (see the module docs) by one more statement: it
   * locks, in id order, the rows of the fenced units' pipelines and of those 3. patches, and a
   * unit's claim, output and task row (and, in 3, its patch) are kept only if its row is
   * `running` under its run. It is planned per call: prepared, its generic plan (made while
   * the table was small: arrays of unknown size) scanned the whole table, ~2–5 ms a commit at
   * 10,000–20,000 pipelines (BENCHMARKS lead39).
   */
  const plainCommit = (ops: ReadonlyArray<StoreWrite>): Effect.Effect<undefined, SqlError> =>
    Effect.gen(function*() {
      // 1. admissions
      const admitted = new Map<string, PipelineFields>()
      for (const op of ops) if (op._tag === "Admit") for (const p of op.pipelines) admitted.set(p.pipelineId, p)
      if (admitted.size > 0) {
        const u = unnestOf(
          PIPELINE_TYPES,
          // in id order, as every writer locks rows (two batches never wait on each other in a cycle)
          Array.from(admitted.values(), (p) => [...pipelineParams(p), null]).sort((a, b) =>
            String(a[0]) < String(b[0]) ? -1 : String(a[0]) > String(b[0]) ? 1 : 0
          )
        )
        yield* hot(
          `WITH up AS (INSERT INTO assay_pipelines (${ADMIT_COLUMNS.join(",")}) SELECT ${
            ADMIT_COLUMNS.join(",")
          } FROM ${u.from} ORDER BY ord ${ADMIT_SUFFIX} RETURNING pipeline_id, n_tasks_done)
           DELETE FROM assay_checkpoints c USING up WHERE c.pipeline_id = up.pipeline_id AND c.seq >= up.n_tasks_done`,
          u.params
        )
      }
      // the fences (see the module docs): the pipeline rows of the fenced units and of the
      //    patches of 3. locked in id order, before any checkpoint key (as the unit-by-unit path
      //    and an admission's claim lock them), and a fenced unit (one with a task row, of a
      //    pipeline this batch does not admit under the unit's run) kept only if its row is
      //    `running` under the unit's run. Its own statement, planned per call with the ids
      //    it is given: a generic plan made while the table was small scans the whole table
      //    (fence38's cost, BENCHMARKS lead39)
      const fencedOut = new Set<number>()
      {
        const fenceRun = new Map<number, string>()
        const locked = new Set<string>()
        ops.forEach((op, i) => {
          switch (op._tag) {
            case "Checkpoint": {
              const run = fenceRunOf(op.unit)
              const pid = op.unit.pipelineId
              if (op.unit.pipeline !== undefined) locked.add(pid)
              if (run === undefined || admitted.get(pid)?.runId === run) return
              fenceRun.set(i, run)
              locked.add(pid)
              return
            }
            case "Patch":
            case "Settle":
              locked.add(op.pipelineId)
              return
            default:
              return
          }
        })
        if (locked.size > 0) {
          const owner = new Map<string, string>()
          for (
            const r of yield* rows(
              "SELECT pipeline_id, run_id, state FROM assay_pipelines WHERE pipeline_id = ANY($1::text[]) ORDER BY pipeline_id FOR UPDATE",
              [Array.from(locked).sort()]
            )
          ) {
            if (r.state === "running") owner.set(String(r.pipeline_id), String(r.run_id))
          }
          for (const [i, run] of fenceRun) {
            if (owner.get((ops[i] as Extract<StoreWrite, { _tag: "Checkpoint" }>).unit.pipelineId) !== run) fencedOut.add(i)
          }
        }
      }
      // 2. claims, artifacts, tasks, attempts, events: row `k` of a claim is the index of its
      //    candidate; artifact and task rows carry the claim they depend on (NULL: none); a
      //    fenced-out unit writes its attempts and events only
      const keyOf = (pid: unknown, seq: unknown, visit: unknown) => `${String(pid)}\u0000${Number(seq)}\u0000${Number(visit)}`
      const claimOf = new Map<number, number>()
      const candidates = new Map<string, number>()
      const claimRows: Array<Array<unknown>> = []
      ops.forEach((op, i) => {
        if (op._tag !== "Checkpoint" || op.unit.artifact === undefined || op.unit.task === undefined || fencedOut.has(i)) return
        const a = op.unit.artifact
        const key = keyOf(a.pipelineId, a.seq, a.visit ?? 0)
        const c = candidates.get(key)
        if (c !== undefined) return void claimOf.set(i, -1 - c) // a later unit of a claimed key: lost
        candidates.set(key, claimRows.length)
        claimOf.set(i, claimRows.length)
        claimRows.push([a.pipelineId, a.seq, a.visit ?? 0, a.runId, a.digest, a.createdAt, claimRows.length])
      })
      // in key order: two writers claiming the same keys wait in the same order, never in a cycle
      claimRows.sort((a, b) => {
        const ka = keyOf(a[0], a[1], a[2])
        const kb = keyOf(b[0], b[1], b[2])
        return ka < kb ? -1 : ka > kb ? 1 : 0
      })
      const LOST = -1
      const artifacts: Array<NewArtifact> = []
      const artifactRows: Array<Array<unknown>> = []
      const taskRows: Array<Array<unknown>> = []
      const attempts: Array<Array<unknown>> = []
      const events: Array<Array<unknown>> = []
      ops.forEach((op, i) => {
        switch (op._tag) {
          case "Admit":
            for (const [a, placed] of op.seeds) {
              artifacts.push(a)
              artifactRows.push([...artifactRow(a, placed), null])
            }
            return
          case "Checkpoint": {
            const u = op.unit
            for (const a of u.attempts ?? []) attempts.push(attemptRow(a))
            for (const e of u.events ?? []) events.push(eventRow(e))
            if (u.traversal?.handoffEvent !== undefined) {
              const e = handoffEventOf(u.traversal)
              if (e !== undefined) events.push(eventRow(e))
            }
            if (fencedOut.has(i)) return
            const c = claimOf.get(i)
            const claim = c === undefined ? null : c < 0 ? LOST : c
            if (u.artifact !== undefined && op.placed !== undefined) {
              artifacts.push(u.artifact)
              artifactRows.push([...artifactRow(u.artifact, op.placed), claim])
            }
            if (u.task !== undefined) taskRows.push([...taskRow(u.task), claim])
            return
          }
          case "PutTask":
            taskRows.push([...taskRow(op.task), null])
            return
          default:
            return
        }
      })
      // of several finals of one pipeline in the batch, only the last stays final
      const lastFinal = new Map<string, number>()
      artifacts.forEach((a, k) => {
        if (a.isFinal) lastFinal.set(a.pipelineId, k)
      })
      artifacts.forEach((a, k) => {
        if (a.isFinal && lastFinal.get(a.pipelineId) !== k) artifactRows[k]![11] = 0
      })
      const won = new Set<number>()
      if (claimRows.length + artifactRows.length + taskRows.length + attempts.length + events.length > 0) {
        const params: Array<unknown> = []
        const ctes: Array<string> = []
        const claims = unnestOf(CLAIM_TYPES, claimRows, params)
        ctes.push(
          `cl AS (SELECT * FROM ${claims.from})`,
          `won AS (INSERT INTO assay_checkpoints (pipeline_id, seq, visit, run_id, digest, committed_at)
             SELECT pipeline_id, seq, visit, run_id, digest, committed_at FROM cl ORDER BY ord
             ON CONFLICT (pipeline_id, seq, visit) DO NOTHING RETURNING pipeline_id, seq, visit)`,
          `wk AS (SELECT cl.k FROM cl JOIN won USING (pipeline_id, seq, visit))`
        )
        /** Rows whose claim (last column, `k`) is absent or won. */
        const kept = "(x.k IS NULL OR x.k IN (SELECT k FROM wk))"
        if (artifactRows.length > 0) {
          const u = unnestOf(ARTIFACT_TYPES, artifactRows, params)
          ctes.push(
            `ins AS (INSERT INTO assay_artifacts (${ARTIFACT_COLUMNS.join(",")}) SELECT ${
              ARTIFACT_COLUMNS.map((c) => `x.${c}`).join(",")
            } FROM ${u.from} WHERE ${kept} ORDER BY x.ord RETURNING artifact_id, pipeline_id, is_final)`,
            `fin AS (UPDATE assay_artifacts a SET is_final = 0 FROM ins WHERE ins.is_final = 1 AND a.pipeline_id = ins.pipeline_id AND a.is_final = 1 AND a.artifact_id <> ins.artifact_id)`
          )
        }
        if (taskRows.length > 0) {
          const u = unnestOf(TASK_TYPES, taskRows, params)
          ctes.push(
            `tk AS (INSERT INTO assay_tasks (${TASK_COLUMNS.join(",")}) SELECT * FROM (SELECT DISTINCT ON (x.task_run_id) ${
              TASK_COLUMNS.map((c) => `x.${c}`).join(",")
            } FROM ${u.from} WHERE ${kept} ORDER BY x.task_run_id, x.ord DESC) t ORDER BY task_run_id ${TASK_SUFFIX})`
          )
        }
        if (attempts.length > 0) {
          const u = unnestOf(ATTEMPT_TYPES, attempts, params)
          ctes.push(
            `at AS (INSERT INTO assay_attempts (${ATTEMPT_COLUMNS.join(",")}) SELECT ${
              ATTEMPT_COLUMNS.map((c) => `x.${c}`).join(",")
            } FROM ${u.from} ORDER BY x.ord)`
          )
        }
        if (events.length > 0) {
          const u = unnestOf(EVENT_TYPES, events, params)
          ctes.push(
            `ev AS (INSERT INTO assay_events (${EVENT_COLUMNS.join(",")}) SELECT ${
              EVENT_COLUMNS.map((c) => `x.${c}`).join(",")
            } FROM ${u.from} ORDER BY x.ord)`
          )
        }
        for (const r of yield* hot(`WITH ${ctes.join(",\n")} SELECT k FROM wk`, params)) won.add(Number(r.k))
      }
      // 3. the pipeline patches of the units kept, folded per pipeline in batch order
      const patches = new Map<string, PipelinePatch>()
      const patch = (pipelineId: string, p: PipelinePatch) => {
        const before = patches.get(pipelineId)
        if (before === undefined) return void patches.set(pipelineId, p)
        const merged: { -readonly [K in keyof PipelinePatch]: PipelinePatch[K] } = { ...before }
        for (const [k, v] of Object.entries(p)) if (v !== undefined) (merged as Record<string, unknown>)[k] = v
        merged.attemptsDelta = (before.attemptsDelta ?? 0) + (p.attemptsDelta ?? 0)
        patches.set(pipelineId, merged)
      }
      ops.forEach((op, i) => {
        switch (op._tag) {
          case "Checkpoint": {
            const c = claimOf.get(i)
            if (c !== undefined && (c < 0 || !won.has(c))) return
            if (fencedOut.has(i)) return
            if (op.unit.pipeline !== undefined) patch(op.unit.pipelineId, op.unit.pipeline)
            return
          }
          case "Patch":
            return patch(op.pipelineId, op.patch)
          case "Settle":
            return patch(op.pipelineId, settleToPatch(op.settle))
          default:
            return
        }
      })
      if (patches.size > 0) {
        const list = Array.from(patches).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
        const u = unnestOf(PATCH_TYPES, list.map(([id, p]) => patchRow(id, p)))
        const sets = PATCH_FIELDS.map(([column], k) => `${column} = CASE WHEN v.h & ${1 << k} <> 0 THEN v.${column} ELSE p.${column} END`)
        // the rows were locked in id order by the fences' statement (every patched row is
        // among them); planned per call, never prepared: its generic plan (arrays of unknown
        // size) scans and hashes the whole table, ~7 ms a call at 20,000 pipelines against ~0.3
        // (BENCHMARKS lead34b)
        yield* rows(
          `UPDATE assay_pipelines p SET ${sets.join(", ")}, attempts_total = p.attempts_total + v.attempts_delta, updated_at = v.updated_at
           FROM ${u.from.replace(/ AS x\(/, " AS v(")} WHERE p.pipeline_id = v.id`,
          u.params
        )
      }
      return undefined
    })

  /** The statements of a commit of `ops`, outside any transaction (see {@link commit}). */
  const commitBody = (ops: ReadonlyArray<StoreWrite>) => {
    let levelUp = false
    const levelFor = (state: Traversal.VisitState) => {
      if (level === BASE_LEVEL && needsVisits(state)) levelUp = true
    }
    const putState = (pipelineId: string, state: Traversal.VisitState) => {
      levelFor(state)
      return rows("UPDATE assay_pipelines SET traversal = $1 WHERE pipeline_id = $2", [
        TraversalText.encode(pipelineId, state),
        pipelineId
      ])
    }
    const applyTraversal = (pipelineId: string, t: TraversalWrite, entryPlaced: PlacedArtifact | undefined) =>
      Effect.gen(function*() {
        if (t.entry !== undefined && entryPlaced !== undefined) yield* insertArtifact(t.entry, entryPlaced)
        const h = t.handoff
        if (h !== undefined) {
          yield* insertMany("assay_handoffs", HANDOFF_COLUMNS, [[
            h.pipelineId, h.runId, h.fromSeq, h.fromTask, h.toSeq, h.toTask, h.operation, h.entrySeq, h.entryArtifactId,
            h.entryReused ? 1 : 0, h.reason, h.ts
          ]])
        }
        const from = t.invalidateFrom
        if (from !== undefined) {
          const end = t.state.counters.length
          yield* rows("UPDATE assay_tasks SET active = 0 WHERE pipeline_id = $1 AND seq >= $2 AND active = 1", [pipelineId, from])
          yield* rows(
            "UPDATE assay_artifacts SET active = 0 WHERE pipeline_id = $1 AND seq >= $2 AND seq < $3 AND active = 1",
            [pipelineId, from, end]
          )
          // the stations run again: their checkpoints may be written anew
          yield* rows("DELETE FROM assay_checkpoints WHERE pipeline_id = $1 AND seq >= $2 AND seq < $3", [pipelineId, from, end])
        }
        if (t.final !== undefined) {
          const at = Traversal.parseAddress(t.final)
          const id = at === undefined ? undefined : yield* latestAt(pipelineId, at.seq, at.visit)
          if (id !== undefined) yield* setFinal(pipelineId, id)
        }
        yield* putState(pipelineId, t.state)
      })

    const body = Effect.gen(function*() {
      // the fences of the units (see plainCommit) and the version check of the traversal
      // writes, on the stored rows locked in id order
      let stored: Map<string, number | null> | undefined
      const tpids = new Set<string>()
      const fencedRun = new Map<number, string>()
      {
        const admittedRun = new Map<string, string>()
        ops.forEach((op, i) => {
          if (op._tag === "Admit") for (const p of op.pipelines) admittedRun.set(p.pipelineId, p.runId)
          if (op._tag !== "Checkpoint") return
          if (op.unit.traversal !== undefined) tpids.add(op.unit.pipelineId)
          const run = fenceRunOf(op.unit)
          if (run !== undefined && admittedRun.get(op.unit.pipelineId) !== run) fencedRun.set(i, run)
        })
      }
      const fencedOut = new Set<number>()
      if (tpids.size + fencedRun.size > 0) {
        const pids = new Set(tpids)
        for (const i of fencedRun.keys()) pids.add((ops[i] as Extract<StoreWrite, { _tag: "Checkpoint" }>).unit.pipelineId)
        const locked = yield* rows(
          "SELECT pipeline_id, traversal, run_id, state FROM assay_pipelines WHERE pipeline_id = ANY($1) ORDER BY pipeline_id FOR UPDATE",
          [Array.from(pids).sort()]
        )
        if (tpids.size > 0) stored = new Map()
        // each row's owner run, while `running`, as the batch's admissions leave it in order
        const owner = new Map<string, string | undefined>()
        for (const r of locked) {
          const pid = String(r.pipeline_id)
          if (stored !== undefined && tpids.has(pid)) {
            stored.set(pid, typeof r.traversal === "string" ? TraversalText.versionOf(r.traversal) : null)
          }
          owner.set(pid, r.state === "running" ? String(r.run_id) : undefined)
        }
        ops.forEach((op, i) => {
          if (op._tag === "Admit") for (const p of op.pipelines) owner.set(p.pipelineId, p.state === "running" ? p.runId : undefined)
          const run = fencedRun.get(i)
          if (op._tag === "Checkpoint" && run !== undefined && owner.get(op.unit.pipelineId) !== run) fencedOut.add(i)
        })
      }
      let refused: Array<readonly [number, StoreUnavailable]> | undefined
      const refusedAt = new Set<number>()
      if (stored !== undefined) {
        const seen = new Map<string, number | null>()
        for (let i = 0; i < ops.length; i++) {
          const op = ops[i]!
          if (op._tag === "Admit") for (const t of op.traversals) seen.set(t.pipelineId, t.state.version)
          if (op._tag !== "Checkpoint" || op.unit.traversal === undefined || fencedOut.has(i)) continue
          const pid = op.unit.pipelineId
          const actual = seen.has(pid) ? seen.get(pid)! : (stored.get(pid) ?? null)
          if (actual !== op.unit.traversal.expectedVersion) {
            ;(refused ??= []).push([i, conflict(pid, op.unit.traversal.expectedVersion, actual)])
            refusedAt.add(i)
          } else seen.set(pid, op.unit.traversal.state.version)
        }
      }
      const attempts: Array<Array<unknown>> = []
      const events: Array<Array<unknown>> = []
      for (let i = 0; i < ops.length; i++) {
        if (refusedAt.has(i)) continue
        const op = ops[i]!
        switch (op._tag) {
          case "Admit": {
            if (op.pipelines.length > 0) {
              const states = new Map<string, string>()
              for (const t of op.traversals) states.set(t.pipelineId, TraversalText.encode(t.pipelineId, t.state))
              // one row per id (the last), as one upsert may not touch a row twice
              const last = new Map<string, PipelineFields>()
              for (const p of op.pipelines) last.set(p.pipelineId, p)
              yield* insertMany(
                "assay_pipelines",
                ADMIT_COLUMNS,
                Array.from(last.values(), (p) => [...pipelineParams(p), states.get(p.pipelineId) ?? null]),
                ADMIT_SUFFIX
              )
              // checkpoints at and after the admitted cursor will be written (again)
              yield* rows(
                "DELETE FROM assay_checkpoints c USING assay_pipelines p WHERE p.pipeline_id = ANY($1) AND c.pipeline_id = p.pipeline_id AND c.seq >= p.n_tasks_done",
                [Array.from(last.keys())]
              )
            }
            for (const [a, placed] of op.seeds) yield* insertArtifact(a, placed)
            const admitted = new Set(op.pipelines.map((p) => p.pipelineId))
            for (const t of op.traversals) {
              if (admitted.has(t.pipelineId)) levelFor(t.state)
              else yield* putState(t.pipelineId, t.state)
            }
            break
          }
          case "Checkpoint": {
            const u = op.unit
            for (const a of u.attempts ?? []) attempts.push(attemptRow(a))
            for (const e of u.events ?? []) events.push(eventRow(e))
            if (u.traversal?.handoffEvent !== undefined) {
              const e = handoffEventOf(u.traversal)
              if (e !== undefined) events.push(eventRow(e))
            }
            // fenced: the pipeline is no longer `running` under the unit's run (a late commit
            // of an execution that lost it): only its facts are written, as a loser's below
            if (fencedOut.has(i)) break
            if (u.artifact !== undefined && u.task !== undefined) {
              // first writer wins: a task completion whose output is already committed writes
              // only its facts
              const won = yield* rows(
                "INSERT INTO assay_checkpoints (pipeline_id, seq, visit, run_id, digest, committed_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (pipeline_id, seq, visit) DO NOTHING RETURNING seq",
                [u.artifact.pipelineId, u.artifact.seq, u.artifact.visit ?? 0, u.artifact.runId, u.artifact.digest, u.artifact.createdAt]
              )
              if (won.length === 0) break
              if (op.placed !== undefined) yield* insertArtifact(u.artifact, op.placed)
            } else if (u.artifact !== undefined && op.placed !== undefined) {
              // an output without a task row (a superseded output written on purpose): not a completion
              yield* insertArtifact(u.artifact, op.placed)
            }
            if (u.task !== undefined) yield* insertMany("assay_tasks", TASK_COLUMNS, [taskRow(u.task)], TASK_SUFFIX)
            if (u.pipeline !== undefined) yield* patchPipeline(u.pipelineId, u.pipeline)
            if (u.traversal !== undefined) yield* applyTraversal(u.pipelineId, u.traversal, op.entryPlaced)
            break
          }
          case "PutTask":
            yield* insertMany("assay_tasks", TASK_COLUMNS, [taskRow(op.task)], TASK_SUFFIX)
            break
          case "Patch":
            yield* patchPipeline(op.pipelineId, op.patch)
            break
          case "Settle":
            yield* patchPipeline(op.pipelineId, settleToPatch(op.settle))
            break
          case "MarkFinal": {
            const id = yield* latestAt(op.pipelineId, op.seq)
            if (id !== undefined) yield* setFinal(op.pipelineId, id)
            break
          }
        }
      }
      if (attempts.length > 0) yield* insertMany("assay_attempts", ATTEMPT_COLUMNS, attempts)
      if (events.length > 0) yield* insertMany("assay_events", EVENT_COLUMNS, events)
      if (levelUp) yield* rows("UPDATE assay_meta SET value = $1 WHERE key = 'feature_level'", [VISITS_LEVEL])
      return refused
    })
    return Effect.tap(isPlain(ops) ? plainCommit(ops) : body, () =>
      Effect.sync(() => {
        if (levelUp) level = VISITS_LEVEL
      }))
  }
  /** Commits `ops` in one transaction (retried whole while the server is unreachable). */
  const commit = (ops: ReadonlyArray<StoreWrite>) => tx("commit", Effect.suspend(() => commitBody(ops)))

  /**
   * A batch of pipelines' admissions, each written only if its row is still as admission saw
   * it (`expected[i]` for `op.pipelines[i]`): new rows are inserted with `ON CONFLICT DO
   * NOTHING`, stored ones taken over by one conditional `UPDATE` on their owner run, state,
   * cursor and update time (the row lock makes a second claimer re-check the condition against
   * the first one's write, and find it changed). Only the winners go on to the admission write
   * proper (a stored row written whole with its checkpoint keys at and after the cursor
   * released; a new row stays as inserted; seeds, traversal states), in the same transaction.
   * Each lost one is answered with its row as it is now.
   */
  const claimAdmissions = (
    op: Extract<StoreWrite, { readonly _tag: "Admit" }>,
    expected: ReadonlyArray<ClaimExpectation | undefined>
  ): Effect.Effect<ReadonlyArray<ClaimOutcome>, StoreUnavailable> => {
    if (env.readOnlyError !== undefined) return Effect.fail(env.readOnlyError)
    if (expected.length !== op.pipelines.length || new Set(op.pipelines.map((p) => p.pipelineId)).size !== op.pipelines.length) {
      return Effect.dieMessage("claimAdmissions: one expectation per pipeline, each pipeline once")
    }
    if (op.pipelines.length === 0) return Effect.succeed([])
    // in key order, as the group commit writes: two claimers of overlapping batches then wait
    // for each other rather than deadlock (a deadlock victim's transaction is retried whole)
    const byId = (x: { readonly pipelineId: string }, y: { readonly pipelineId: string }) =>
      x.pipelineId < y.pipelineId ? -1 : x.pipelineId > y.pipelineId ? 1 : 0
    const fresh = op.pipelines.filter((_, i) => expected[i] === undefined).sort(byId)
    const taken = op.pipelines.flatMap((p, i) => {
      const e = expected[i]
      return e === undefined ? [] : [{ p, e, pipelineId: p.pipelineId }]
    }).sort(byId)
    const claimed = tx("admit", Effect.gen(function*() {
      const won = new Set<string>()
      if (fresh.length > 0) {
        const inserted = yield* insertMany(
          "assay_pipelines",
          ADMIT_COLUMNS,
          fresh.map((p) => [...pipelineParams(p), null]),
          "ON CONFLICT (pipeline_id) DO NOTHING RETURNING pipeline_id"
        )
        for (const r of inserted) won.add(String(r.pipeline_id))
      }
      if (taken.length > 0) {
        const updated = yield* rows(
          // the rows locked in id order first (an UPDATE's join locks in its own order)
          `WITH l AS MATERIALIZED (
               SELECT pipeline_id FROM assay_pipelines WHERE pipeline_id = ANY($1::text[]) ORDER BY pipeline_id FOR UPDATE
             )
           UPDATE assay_pipelines AS p SET run_id = e.new_run, updated_at = e.new_at
             FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::bigint[])
               AS e(id, new_run, new_at, run, state, n, at), l
             WHERE p.pipeline_id = e.id AND l.pipeline_id = e.id AND p.run_id = e.run AND p.state = e.state
               AND p.n_tasks_done = e.n AND p.updated_at = e.at
             RETURNING p.pipeline_id`,
          [
            taken.map(({ p }) => p.pipelineId),
            taken.map(({ p }) => p.runId),
            taken.map(({ p }) => p.updatedAt),
            taken.map(({ e }) => e.runId),
            taken.map(({ e }) => e.state),
            taken.map(({ e }) => e.nTasksDone),
            taken.map(({ e }) => e.updatedAt)
          ]
        )
        for (const r of updated) won.add(String(r.pipeline_id))
      }
      if (won.size > 0) {
        // a new row won is in place as inserted; a stored one won is written whole (and its
        // checkpoint keys at and after its cursor released) by the admission proper
        yield* commitBody([{
          _tag: "Admit",
          pipelines: taken.flatMap(({ p }) => won.has(p.pipelineId) ? [p] : []),
          seeds: op.seeds.filter(([a]) => won.has(a.pipelineId)),
          traversals: op.traversals.filter((t) => won.has(t.pipelineId))
        }])
      }
      return won
    }))
    return Effect.flatMap(claimed, (won) => {
      const lost = op.pipelines.filter((p) => !won.has(p.pipelineId))
      if (lost.length === 0) return Effect.succeed(op.pipelines.map((): ClaimOutcome => ({ _tag: "Won" })))
      return Effect.map(
        q("SELECT * FROM assay_pipelines WHERE pipeline_id = ANY($1::text[])", [lost.map((p) => p.pipelineId)]),
        (r) => {
          const now = new Map(r.map((row) => [String(row.pipeline_id), toPipeline(row)]))
          return op.pipelines.map((p): ClaimOutcome => {
            if (won.has(p.pipelineId)) return { _tag: "Won" }
            const current = now.get(p.pipelineId)
            // a retried claim whose first commit went through (its answer lost with the
            // connection) finds its own row: won
            return current !== undefined && current.runId === p.runId && current.updatedAt === p.updatedAt
              ? { _tag: "Won" }
              : { _tag: "Lost", current }
          })
        }
      )
    })
  }

  /** One pipeline's admission claim ({@link claimAdmissions} of one). */
  const claimAdmission = (
    op: Extract<StoreWrite, { readonly _tag: "Admit" }>,
    expected: ClaimExpectation | undefined
  ): Effect.Effect<ClaimOutcome, StoreUnavailable> => {
    const p = op.pipelines[0]
    if (p === undefined || op.pipelines.some((o) => o.pipelineId !== p.pipelineId)) {
      return Effect.dieMessage("claimAdmission: exactly one pipeline per claim")
    }
    return Effect.map(claimAdmissions({ ...op, pipelines: [p] }, [expected]), (outcomes) => outcomes[0]!)
  }

  // --- reads -----------------------------------------------------------------------------------

  const refine = (a: ArtifactRecord): Effect.Effect<ArtifactRecord, StoreUnavailable> =>
    a.storage === "blob" && a.blobRef !== null
      ? Effect.map(backend.exists(a.blobRef), (ok) => ok ? a : trusted(ArtifactRecord, { ...a, available: false }))
      : Effect.succeed(a)

  const loadedRow = (r: ReadonlyArray<Row>): Effect.Effect<Option.Option<LoadedArtifact>, StoreUnavailable> => {
    const row = r[0]
    if (row === undefined) return Effect.succeed(Option.none())
    const meta = toArtifact(row)
    return Effect.map(loadPayload(meta.storage, toBytes(row.payload), meta.blobRef, backend), (payload) =>
      Option.some({
        artifact: meta.available === (payload !== undefined)
          ? meta
          : trusted(ArtifactRecord, { ...meta, available: payload !== undefined }),
        payload
      }))
  }

  /** A keyset-paged stream: `fetch(cursor)` returns the next page (at most `PAGE_SIZE` rows). */
  const pager = <C, A>(
    fetch: (cursor: C | undefined) => Effect.Effect<ReadonlyArray<Row>, StoreUnavailable>,
    cursorOf: (row: Row) => C,
    map: (row: Row) => A
  ): Stream.Stream<A, StoreUnavailable> =>
    Stream.paginateChunkEffect(undefined as C | undefined, (cursor) =>
      Effect.map(fetch(cursor), (page) => {
        const last = page[page.length - 1]
        return [
          Chunk.unsafeFromArray(page.map(map)),
          page.length < PAGE_SIZE || last === undefined ? Option.none() : Option.some(cursorOf(last) as C | undefined)
        ] as const
      }))

  /** `WHERE` conditions with their parameters, numbered from `$1`. */
  const where = () => {
    const conds: Array<string> = []
    const params: Array<unknown> = []
    return {
      add: (cond: (p: (v: unknown) => string) => string) => {
        conds.push(cond((v) => {
          params.push(v)
          return `$${params.length}`
        }))
      },
      text: () => (conds.length === 0 ? "TRUE" : conds.join(" AND ")),
      params
    }
  }
  const eventWhere = (f: EventFilter) => {
    const w = where()
    if (f.pipelineId !== undefined) w.add((p) => `pipeline_id = ${p(f.pipelineId)}`)
    if (f.runId !== undefined) w.add((p) => `run_id = ${p(f.runId)}`)
    if (f.kind !== undefined) w.add((p) => `kind = ${p(f.kind)}`)
    return w
  }

  const getRun = (runId: string) =>
    Effect.map(q("SELECT * FROM assay_runs WHERE run_id = $1", [runId]), (r) => Option.map(Option.fromNullable(r[0]), toRun))

  const TIMED_TERMINAL = "state IN ('succeeded', 'failed', 'interrupted') AND started_at IS NOT NULL AND ended_at IS NOT NULL"
  const latency = (runId: string | undefined): Effect.Effect<Latency | null, StoreUnavailable> =>
    Effect.gen(function*() {
      const cond = runId === undefined ? TIMED_TERMINAL : `run_id = $1 AND ${TIMED_TERMINAL}`
      const params = runId === undefined ? [] : [runId]
      const [c] = yield* q(`SELECT count(*) AS n FROM assay_pipelines WHERE ${cond}`, params)
      const n = Number(c?.n ?? 0)
      if (n === 0) return null
      const values = new Map<number, number>()
      for (const k of quantileRanks(n, [0.5, 0.95, 0.99])) {
        const [r] = yield* q(
          `SELECT ended_at - started_at AS d FROM assay_pipelines WHERE ${cond} ORDER BY d LIMIT 1 OFFSET ${k}`,
          params
        )
        values.set(k, Number(r?.d ?? 0))
      }
      const at = (k: number) => values.get(k) ?? 0
      return { p50: quantileAt(n, at, 0.5), p95: quantileAt(n, at, 0.95), p99: quantileAt(n, at, 0.99) }
    })

  const resourcesRead = Effect.map(q("SELECT * FROM assay_resources ORDER BY pool, resource_id"), (r) => r.map(toResource))

  const loadedArtifact = (meta: ArtifactRecord, wanted: boolean, inline: unknown): Effect.Effect<LoadedArtifact, StoreUnavailable> => {
    if (!wanted) return Effect.map(refine(meta), (artifact) => ({ artifact, payload: undefined }))
    if (meta.storage === "inline") return Effect.succeed({ artifact: meta, payload: toBytes(inline) ?? undefined })
    return Effect.map(loadPayload(meta.storage, null, meta.blobRef, backend), (payload) => ({
      artifact: meta.available === (payload !== undefined) ? meta : trusted(ArtifactRecord, { ...meta, available: payload !== undefined }),
      payload
    }))
  }

  const driver: StoreDriver = {
    kind: "postgres",
    get featureLevel() {
      return level
    },
    readOnlyError: env.readOnlyError,
    // other processes may write the same database
    exclusiveWriter: false,
    callCache: env.callCache,
    storeId: env.storeId,
    // One REPEATABLE READ, READ ONLY transaction: every read of `reads` sees the snapshot taken
    // at its first query, whatever other writers commit meanwhile; it takes no lock, so it
    // holds no writer up. (`SET TRANSACTION` must come before the transaction's first query.)
    consistentReads: <A, E, R>(reads: Effect.Effect<A, E, R>): Effect.Effect<A, E | StoreUnavailable, R> =>
      sql.withTransaction(
        Effect.zipRight(
          Effect.mapError(rows("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"), fail("read")),
          reads
        )
      ).pipe(
        // a lost connection at COMMIT is a defect in @effect/sql: typed like any other failure
        Effect.catchSomeDefect((d) => isSqlError(d) ? Option.some(Effect.fail(d)) : Option.none()),
        Effect.mapError((e) => isSqlError(e) ? fail("read")(e) : e as E | StoreUnavailable)
      ),
    commit,
    writeFacts: (as, es) =>
      tx(
        "write",
        Effect.gen(function*() {
          if (as.length > 0) yield* insertMany("assay_attempts", ATTEMPT_COLUMNS, as.map(attemptRow))
          if (es.length > 0) yield* insertMany("assay_events", EVENT_COLUMNS, es.map(eventRow))
        })
      ),
    putArtifact: (a, placed) => tx("write", Effect.map(insertArtifact(a, placed), (id) => artifactRecordOf(id, a, placed))),

    openRun: (run) =>
      Effect.flatMap(
        tx(
          "openRun",
          rows(
            "INSERT INTO assay_runs (run_id, label, status, config, started_at, heartbeat_at, ended_at, stop_reason, notes, meta) VALUES ($1, $2, 'running', $3, $4, $4, NULL, NULL, $5, $6)",
            [run.runId, run.label ?? null, jsonOrNull(run.config ?? null), run.startedAt, run.notes ?? null, JSON.stringify(run.meta ?? {})]
          )
        ),
        () => Effect.map(getRun(run.runId), (o) => Option.getOrThrow(o))
      ),
    heartbeat: (runId, nowMs) => tx("heartbeat", rows("UPDATE assay_runs SET heartbeat_at = $1 WHERE run_id = $2", [nowMs, runId])),
    finishRun: (runId, finish) =>
      tx(
        "finishRun",
        rows("UPDATE assay_runs SET status = $1, ended_at = $2, stop_reason = $3 WHERE run_id = $4", [
          finish.status,
          finish.endedAt,
          finish.stopReason ?? null,
          runId
        ])
      ),
    interruptStale: (staleAfterMs, nowMs) =>
      Effect.map(
        tx(
          "interruptStale",
          rows(
            "UPDATE assay_runs SET status = 'interrupted', ended_at = $1, stop_reason = 'stale' WHERE status = 'running' AND heartbeat_at < $2 RETURNING *",
            [nowMs, nowMs - staleAfterMs]
          )
        ),
        (r) => r.map(toRun)
      ),
    reportMetric: (m) =>
      tx(
        "reportMetric",
        rows(
          "INSERT INTO assay_metrics (run_id, scope, name, value, label, display, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (run_id, scope, name) DO UPDATE SET value = EXCLUDED.value, label = EXCLUDED.label, display = EXCLUDED.display, updated_at = EXCLUDED.updated_at",
          [m.runId, m.pipelineId ?? "", m.name, jsonOrNull(m.value), m.label, m.display, m.updatedAt]
        )
      ),
    putResource: (r) =>
      tx(
        "putResource",
        rows(
          "INSERT INTO assay_resources (pool, resource_id, kind, spec, health, updated_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (pool, resource_id) DO UPDATE SET kind = EXCLUDED.kind, spec = EXCLUDED.spec, health = EXCLUDED.health, updated_at = EXCLUDED.updated_at",
          [r.pool, r.resourceId, r.kind, jsonOrNull(r.spec), jsonOrNull(r.health), r.updatedAt]
        )
      ),

    traversal: {
      visitState: (pipelineId) =>
        Effect.flatMap(q("SELECT traversal FROM assay_pipelines WHERE pipeline_id = $1", [pipelineId]), (r) => {
          const text = r[0]?.traversal
          if (typeof text !== "string") return Effect.succeed(Option.none())
          const decoded = Either.flatMap(
            Either.try({ try: () => TraversalText.decode(pipelineId, text), catch: (e) => ({ message: String(e) }) }),
            (u) => validState(u)
          )
          return Either.isRight(decoded)
            ? Effect.succeed(Option.some(decoded.right))
            : Effect.fail(
              new StoreUnavailable({
                message: `postgres store ${redactUrl(url)}: the traversal state of pipeline ${pipelineId} is corrupt: ${decoded.left.message}`
              })
            )
        }),
      handoffs: (o) => {
        const w = where()
        if (o.pipelineId !== undefined) w.add((p) => `pipeline_id = ${p(o.pipelineId)}`)
        if (o.runId !== undefined) w.add((p) => `run_id = ${p(o.runId)}`)
        return Effect.map(
          q(`SELECT * FROM assay_handoffs WHERE ${w.text()} ORDER BY handoff_id`, w.params),
          (r) => newest(r.map(toHandoff), o.limit)
        )
      },
      getArtifactById: (address) => {
        const at = Traversal.parseAddress(address)
        if (at === undefined) return Effect.succeed(Option.none())
        return Effect.flatMap(
          q(
            `SELECT ${META}, payload FROM assay_artifacts WHERE pipeline_id = $1 AND seq = $2 AND visit = $3 ORDER BY artifact_id DESC LIMIT 1`,
            [at.pipelineId, at.seq, at.visit]
          ),
          loadedRow
        )
      }
    },

    getRun,
    latestRun: Effect.map(
      q("SELECT * FROM assay_runs ORDER BY started_at DESC, run_id DESC LIMIT 1"),
      (r) => Option.map(Option.fromNullable(r[0]), toRun)
    ),
    listRuns: Effect.map(q("SELECT * FROM assay_runs ORDER BY started_at, run_id"), (r) => r.map(toRun)),
    getPipelines: (ids) =>
      Effect.map(
        Effect.forEach(
          Array.from({ length: Math.ceil(ids.length / 5000) }, (_, i) => ids.slice(i * 5000, (i + 1) * 5000)),
          (chunk) => q("SELECT * FROM assay_pipelines WHERE pipeline_id = ANY($1)", [chunk])
        ),
        (pages) => {
          const out = new Map<PipelineId, PipelineRecord>()
          for (const page of pages) for (const r of page) out.set(String(r.pipeline_id) as PipelineId, toPipeline(r))
          return out
        }
      ),
    // the run's pipelines (its task rows, attempt rows, `pipeline.interrupted` events: each
    // through its run-id index) whose row is filed under another run now, per that run; the
    // ones it stopped (its interrupted events, and the `pipeline.abandoned` events of runs that
    // claimed them after it died: through the kind index) are interrupted
    takenPipelines: (runId) =>
      Effect.map(
        q(
          `WITH ran AS (
             SELECT pipeline_id FROM assay_tasks WHERE run_id = $1
             UNION SELECT pipeline_id FROM assay_attempts WHERE run_id = $1
             UNION SELECT pipeline_id FROM assay_events
               WHERE run_id = $1 AND kind = 'pipeline.interrupted' AND pipeline_id IS NOT NULL
           ), stopped AS (
             SELECT pipeline_id FROM assay_events
               WHERE run_id = $1 AND kind = 'pipeline.interrupted' AND pipeline_id IS NOT NULL
             UNION SELECT pipeline_id FROM assay_events
               WHERE kind = 'pipeline.abandoned' AND pipeline_id IS NOT NULL AND (data::jsonb)->>'run' = $1
           )
           SELECT p.run_id, count(*) FILTER (WHERE s.pipeline_id IS NULL) AS failed,
             count(*) FILTER (WHERE s.pipeline_id IS NOT NULL) AS interrupted
           FROM ran JOIN assay_pipelines p ON p.pipeline_id = ran.pipeline_id
           LEFT JOIN stopped s ON s.pipeline_id = ran.pipeline_id
           WHERE p.run_id <> $1
           GROUP BY p.run_id ORDER BY p.run_id COLLATE "C"`,
          [runId]
        ),
        (r) => r.map((row) => ({ runId: String(row.run_id) as RunId, failed: Number(row.failed), interrupted: Number(row.interrupted) }))
      ),
    pipelineStates: (ids, among) =>
      Effect.map(
        Effect.forEach(
          Array.from({ length: Math.ceil(ids.length / 5000) }, (_, i) => ids.slice(i * 5000, (i + 1) * 5000)),
          (chunk) =>
            // two fixed texts, named prepared statements: three columns, never `SELECT *`
            among === undefined
              ? hotRead("SELECT pipeline_id, state, run_id FROM assay_pipelines WHERE pipeline_id = ANY($1)", [chunk])
              : hotRead(
                "SELECT pipeline_id, state, run_id FROM assay_pipelines WHERE pipeline_id = ANY($1) AND state = ANY($2)",
                [chunk, among]
              )
        ),
        (pages) => {
          const out = new Map<PipelineId, PipelineStateAndRun>()
          for (const page of pages) {
            for (const r of page) {
              out.set(String(r.pipeline_id) as PipelineId, { state: r.state as PipelineState, runId: String(r.run_id) as RunId })
            }
          }
          return out
        }
      ),
    getPipeline: (id) =>
      Effect.map(q("SELECT * FROM assay_pipelines WHERE pipeline_id = $1", [id]), (r) =>
        Option.map(Option.fromNullable(r[0]), toPipeline)),
    getArtifact: (pipelineId, seq) =>
      Effect.flatMap(
        q(
          `SELECT ${META}, payload FROM assay_artifacts WHERE pipeline_id = $1 AND seq = $2 AND active = 1 ORDER BY artifact_id DESC LIMIT 1`,
          [pipelineId, seq]
        ),
        loadedRow
      ),
    listArtifacts: (pipelineId) =>
      Effect.flatMap(
        q(`SELECT ${META} FROM assay_artifacts WHERE pipeline_id = $1 ORDER BY seq, artifact_id`, [pipelineId]),
        (r) => Effect.forEach(r, (row) => refine(toArtifact(row)))
      ),
    metrics: (f) =>
      Effect.map(
        f.pipelineId === undefined
          ? q("SELECT * FROM assay_metrics WHERE run_id = $1 ORDER BY scope, name", [f.runId])
          : q("SELECT * FROM assay_metrics WHERE run_id = $1 AND scope = $2 ORDER BY scope, name", [f.runId, f.pipelineId ?? ""]),
        (r) => r.map(toMetric)
      ),
    resources: resourcesRead,

    stats: (runId) =>
      Effect.gen(function*() {
        const cond = runId === undefined ? "TRUE" : "run_id = $1"
        const params = runId === undefined ? [] : [runId]
        const states = yield* q(`SELECT state, count(*) AS n FROM assay_pipelines WHERE ${cond} GROUP BY state`, params)
        const byState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
        let n = 0
        for (const r of states) {
          byState[r.state as PipelineState] = Number(r.n)
          n += Number(r.n)
        }
        const latencyMs = yield* latency(runId)
        const [tasks] = yield* q(`SELECT count(*) AS n FROM assay_tasks WHERE ${cond}`, params)
        // a retry is the retry policy's decision (`decision.retry` is JSON true)
        const [att] = yield* q(
          `SELECT count(*) AS n, count(*) FILTER (WHERE decision IS NOT NULL AND decision::jsonb @> '{"retry": true}'::jsonb) AS r, ${PG_ACCOUNTING_COLUMNS} FROM assay_attempts WHERE ${cond}`,
          params
        )
        // the call cache's figures, from the attempt rows' cache notes
        const [cache] = yield* q(pgCacheFigures(cond), params)
        const [ev] = yield* q(`SELECT count(*) AS n FROM assay_events WHERE ${cond}`, params)
        const [ho] = yield* q(`SELECT count(*) AS n, count(to_seq) AS b FROM assay_handoffs WHERE ${cond}`, params)
        const resources = yield* resourcesRead
        return {
          pipelines: n,
          byState,
          tasks: Number(tasks?.n ?? 0),
          attemptsTotal: Number(att?.n ?? 0),
          retries: Number(att?.r ?? 0),
          events: Number(ev?.n ?? 0),
          handoffsTotal: Number(ho?.n ?? 0),
          // (an `end` row has no to_seq)
          handoffsBudgeted: Number(ho?.b ?? 0),
          latencyMs,
          resources,
          accounting: figuresOfRow(att),
          cache: cacheFiguresOfRow(cache)
        } satisfies StoreStats
      }),
    claimAdmission,
    claimAdmissions,
    succeededPipelines: Effect.map(
      Effect.zip(
        q("SELECT pipeline_id FROM assay_pipelines WHERE state = 'succeeded'"),
        q("SELECT pipeline_id, spec_digest, seed_digest FROM assay_pipelines WHERE key IS NOT NULL AND state = 'succeeded'")
      ),
      ([ids, keyed]) =>
        succeededIndexOf(ids.map((r) => r.pipeline_id), keyed.map((r) => [r.pipeline_id, r.spec_digest, r.seed_digest]))
    ),
    pipelineAccounting: (o = {}) => {
      if (o.pipelineIds !== undefined && o.pipelineIds.length === 0) return Effect.succeed([])
      if (o.limit !== undefined && o.limit <= 0) return Effect.succeed([])
      // only attempts with a model call or a cache hit, grouped by pipeline (one aggregate)
      const conds = [ACCOUNTED_CONDITION]
      const params: Array<unknown> = []
      if (o.runId !== undefined) {
        params.push(o.runId)
        conds.push(`run_id = $${params.length}`)
      }
      if (o.pipelineIds !== undefined) {
        params.push(o.pipelineIds)
        conds.push(`pipeline_id = ANY($${params.length})`)
      }
      return Effect.map(
        q(
          `SELECT pipeline_id, ${PG_ACCOUNTING_COLUMNS} FROM assay_attempts WHERE ${conds.join(" AND ")} GROUP BY pipeline_id ORDER BY ${
            accountingOrderSql(o.orderBy, ' COLLATE "C"')
          }${o.limit === undefined ? "" : ` LIMIT ${Math.floor(o.limit)}`}`,
          params
        ),
        (r) => r.map((row): PipelineAccounting => ({ pipelineId: String(row.pipeline_id) as PipelineId, ...figuresOfRow(row) }))
      )
    },
    resourceUsage: (runId) =>
      // in SQL: an attempt is a retry when the attempt before it in scope of its task run
      // (pipeline, seq, visit; attempt-id order) was decided a retry (`decision.retry` JSON
      // true); it counts once per target of its leases (a lease id's target is everything before
      // its last '#', `leaseTarget`)
      Effect.map(
        q(
          `WITH a AS (
             SELECT attempt_id, error_class, lease_ids, tokens_in, tokens_out, tokens_estimated, cost_usd,
               coalesce(lag(decision IS NOT NULL AND decision::jsonb -> 'retry' = 'true'::jsonb)
                 OVER (PARTITION BY pipeline_id, seq, visit ORDER BY attempt_id), false) AS retry
             FROM assay_attempts WHERE ${runId === undefined ? "TRUE" : "run_id = $1"}
           ), t AS (
             SELECT DISTINCT a.attempt_id, a.retry, a.error_class, a.tokens_in, a.tokens_out, a.tokens_estimated,
               a.cost_usd, regexp_replace(l.v, '#[^#]*$', '') AS target
             FROM a CROSS JOIN LATERAL jsonb_array_elements_text(a.lease_ids::jsonb) AS l(v)
           )
           SELECT target, count(*) AS attempts, count(*) FILTER (WHERE retry) AS retries,
             count(*) FILTER (WHERE error_class = 'rate_limit') AS rate_limited,
             coalesce(sum(tokens_in), 0) AS tokens_in, coalesce(sum(tokens_out), 0) AS tokens_out,
             coalesce(sum(cost_usd), 0) AS cost_usd, count(*) FILTER (WHERE tokens_estimated = 1) AS estimated,
             count(*) FILTER (WHERE cost_usd IS NULL AND coalesce(tokens_in, 0) + coalesce(tokens_out, 0) > 0) AS unpriced
           FROM t GROUP BY target ORDER BY target COLLATE "C"`,
          runId === undefined ? [] : [runId]
        ),
        (r) =>
          r.map((row): ResourceUsage => ({
            target: String(row.target),
            attempts: Number(row.attempts),
            retries: Number(row.retries),
            rateLimited: Number(row.rate_limited),
            tokensIn: Number(row.tokens_in),
            tokensOut: Number(row.tokens_out),
            costUsd: Number(row.cost_usd),
            estimated: Number(row.estimated),
            unpriced: Number(row.unpriced)
          }))
      ),
    errors: (o) =>
      Effect.map(
        q(
          `SELECT * FROM assay_pipelines WHERE state = 'failed'${o.runId === undefined ? "" : " AND run_id = $1"} ORDER BY updated_at DESC, pipeline_id${
            o.limit === undefined ? "" : ` LIMIT ${o.limit}`
          }`,
          o.runId === undefined ? [] : [o.runId]
        ),
        (r) => r.map((row): ErrorRow => errorRowOf(toPipeline(row)))
      ),
    events: (o, limit) => {
      const w = eventWhere(o)
      return limit === undefined
        ? Effect.map(q(`SELECT * FROM assay_events WHERE ${w.text()} ORDER BY event_id`, w.params), (r) => r.map(toEvent))
        : Effect.map(
          q(`SELECT * FROM assay_events WHERE ${w.text()} ORDER BY event_id DESC LIMIT ${limit}`, w.params),
          (r) => r.map(toEvent).reverse()
        )
    },
    countEvents: (f = {}) => {
      const w = eventWhere(f)
      return Effect.map(q(`SELECT count(*) AS n FROM assay_events WHERE ${w.text()}`, w.params), (r) => Number(r[0]?.n ?? 0))
    },
    pipelinesBySpec: Effect.map(
      q("SELECT spec_digest, count(*) AS n FROM assay_pipelines GROUP BY spec_digest ORDER BY n DESC, spec_digest"),
      (r) => r.map((row): SpecCount => ({ specDigest: String(row.spec_digest), pipelines: Number(row.n) }))
    ),
    pipelinesPage: (o) => {
      const w = where()
      if (o.runId !== undefined) w.add((p) => `run_id = ${p(o.runId)}`)
      if (o.state !== undefined) w.add((p) => `state = ${p(o.state)}`)
      if (o.after !== undefined) {
        const after = o.after
        w.add((p) => `(created_at, pipeline_id) > (${p(after.createdAt)}::bigint, ${p(after.pipelineId)}::text)`)
      }
      return Effect.map(
        q(`SELECT * FROM assay_pipelines WHERE ${w.text()} ORDER BY created_at, pipeline_id LIMIT ${o.limit + 1}`, w.params),
        (r): PipelinesPage => {
          const pipelines = r.slice(0, o.limit).map(toPipeline)
          const last = pipelines[pipelines.length - 1]
          return {
            pipelines,
            next: r.length > o.limit && last !== undefined ? { createdAt: last.createdAt, pipelineId: last.pipelineId } : null
          }
        }
      )
    },
    completions: (o) => {
      const bucketMs = o.bucketMs
      const origin = Math.trunc(o.since ?? 0)
      const w = where()
      if (o.runId !== undefined) w.add((p) => `run_id = ${p(o.runId)}`)
      w.add(() => "state IN ('succeeded', 'failed', 'interrupted') AND ended_at IS NOT NULL")
      if (o.since !== undefined) w.add((p) => `ended_at >= ${p(o.since)}`)
      return Effect.map(
        q(
          `SELECT b, count(*) AS n FROM (SELECT floor((ended_at - ${origin})::float8 / ${bucketMs})::bigint AS b FROM assay_pipelines WHERE ${w.text()}) x GROUP BY b ORDER BY b`,
          w.params
        ),
        (r) => r.map((x): CompletionBucket => ({ startMs: origin + Number(x.b) * bucketMs, count: Number(x.n) }))
      )
    },
    loadBundles: (ids, o) =>
      Effect.gen(function*() {
        const out = new Map<PipelineId, { pipelineId: PipelineId; tasks: Array<TaskRecord>; artifacts: Array<LoadedArtifact> }>()
        for (const id of ids) out.set(id, { pipelineId: id, tasks: [], artifacts: [] })
        const unique = Array.from(out.keys())
        const budget = o.payloadBytes === undefined || o.payloadBytes === Infinity
          ? Infinity
          : Number.isNaN(o.payloadBytes) ? 0 : Math.max(0, o.payloadBytes)
        const payloadCol = o.payloads === "none" ? "" : ", payload"
        /** Stored bytes of the wanted, available payloads met so far (ids in the order given). */
        let spent = 0
        for (let i = 0; i < unique.length; i += 1000) {
          const chunk = unique.slice(i, i + 1000)
          if (o.tasks !== false) {
            const ts = yield* q(
              "SELECT * FROM assay_tasks WHERE pipeline_id = ANY($1) ORDER BY pipeline_id, seq, visit, task_run_id",
              [chunk]
            )
            for (const r of ts) out.get(String(r.pipeline_id) as PipelineId)?.tasks.push(toTask(r))
          }
          const as = yield* q(
            `SELECT ${META}${payloadCol} FROM assay_artifacts WHERE pipeline_id = ANY($1)${
              o.artifacts === "final" ? " AND is_final = 1" : ""
            } ORDER BY pipeline_id, seq, artifact_id`,
            [chunk]
          )
          const byPipeline = new Map<string, Array<Row>>()
          for (const r of as) {
            const list = byPipeline.get(String(r.pipeline_id))
            if (list === undefined) byPipeline.set(String(r.pipeline_id), [r])
            else list.push(r)
          }
          for (const id of chunk) {
            for (const r of byPipeline.get(id) ?? []) {
              const meta = toArtifact(r)
              let wanted = o.payloads === "all" || (o.payloads === "final" && meta.isFinal)
              if (wanted && meta.available) {
                const before = spent
                spent += meta.size
                wanted = spent <= budget || before === 0
              }
              out.get(id)!.artifacts.push(yield* loadedArtifact(meta, wanted, r.payload))
            }
          }
        }
        return out as ReadonlyMap<PipelineId, PipelineBundle>
      }),

    streamPipelines: (o) =>
      pager<readonly [number, string], PipelineRecord>(
        (c) => {
          const w = where()
          if (o.runId !== undefined) w.add((p) => `run_id = ${p(o.runId)}`)
          if (o.state !== undefined) w.add((p) => `state = ${p(o.state)}`)
          if (c !== undefined) w.add((p) => `(created_at, pipeline_id) > (${p(c[0])}::bigint, ${p(c[1])}::text)`)
          return q(`SELECT * FROM assay_pipelines WHERE ${w.text()} ORDER BY created_at, pipeline_id LIMIT ${PAGE_SIZE}`, w.params)
        },
        (r) => [Number(r.created_at), String(r.pipeline_id)] as const,
        toPipeline
      ),
    streamTasks: (o) =>
      pager<readonly [string, number, number, string], TaskRecord>(
        (c) => {
          const w = where()
          if (o.pipelineId !== undefined) w.add((p) => `pipeline_id = ${p(o.pipelineId)}`)
          if (o.runId !== undefined) w.add((p) => `run_id = ${p(o.runId)}`)
          if (c !== undefined) {
            w.add((p) =>
              `(pipeline_id, seq, visit, task_run_id) > (${p(c[0])}::text, ${p(c[1])}::int, ${p(c[2])}::int, ${p(c[3])}::text)`
            )
          }
          return q(
            `SELECT * FROM assay_tasks WHERE ${w.text()} ORDER BY pipeline_id, seq, visit, task_run_id LIMIT ${PAGE_SIZE}`,
            w.params
          )
        },
        (r) => [String(r.pipeline_id), Number(r.seq), Number(r.visit), String(r.task_run_id)] as const,
        toTask
      ),
    streamAttempts: (o) =>
      Stream.unwrap(
        Effect.map(q("SELECT coalesce(max(attempt_id), 0) AS m FROM assay_attempts"), (m) => {
          const hwm = Number(m[0]?.m ?? 0)
          return pager<number, ReturnType<typeof toAttempt>>(
            (c) => {
              const w = where()
              w.add((p) => `attempt_id > ${p(c ?? 0)} AND attempt_id <= ${p(hwm)}`)
              if (o.pipelineId !== undefined) w.add((p) => `pipeline_id = ${p(o.pipelineId)}`)
              if (o.runId !== undefined) w.add((p) => `run_id = ${p(o.runId)}`)
              return q(`SELECT * FROM assay_attempts WHERE ${w.text()} ORDER BY attempt_id LIMIT ${PAGE_SIZE}`, w.params)
            },
            (r) => Number(r.attempt_id),
            toAttempt
          )
        })
      ),
    streamEvents: (o) =>
      Stream.unwrap(
        Effect.map(q("SELECT coalesce(max(event_id), 0) AS m FROM assay_events"), (m) => {
          const hwm = Number(m[0]?.m ?? 0)
          return pager<number, ReturnType<typeof toEvent>>(
            (c) => {
              const w = eventWhere(o)
              w.add((p) => `event_id > ${p(c ?? 0)} AND event_id <= ${p(hwm)}`)
              return q(`SELECT * FROM assay_events WHERE ${w.text()} ORDER BY event_id LIMIT ${PAGE_SIZE}`, w.params)
            },
            (r) => Number(r.event_id),
            toEvent
          )
        })
      ),
    streamArtifacts: (o) =>
      Stream.mapEffect(
        pager<readonly [number, number], ArtifactRecord>(
          (c) =>
            c === undefined
              ? q(`SELECT ${META} FROM assay_artifacts WHERE pipeline_id = $1 ORDER BY seq, artifact_id LIMIT ${PAGE_SIZE}`, [
                o.pipelineId
              ])
              : q(
                `SELECT ${META} FROM assay_artifacts WHERE pipeline_id = $1 AND (seq, artifact_id) > ($2::int, $3::bigint) ORDER BY seq, artifact_id LIMIT ${PAGE_SIZE}`,
                [o.pipelineId, c[0], c[1]]
              ),
          (r) => [Number(r.seq), Number(r.artifact_id)] as const,
          toArtifact
        ),
        refine
      )
  }
  return driver
}
