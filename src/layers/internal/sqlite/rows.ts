/**
 * The SQLite driver's hand-written row mappers: record → statement parameters
 * (`pipelineParams`, `taskParams`) and row → record (`toPipeline`, `toTask`, …), built with
 * `trusted` (no Schema decode on the hot path: measured, see BENCHMARKS.md). Their round trip
 * is tested against the record Schemas of `domain/Records.ts`
 * (test/layers/internal/sqlite/rows.test.ts).
 *
 * @since 0.1.0
 */
import {
  ArtifactRecord,
  AttemptRecord,
  EventRecord,
  MetricRecord,
  PipelineRecord,
  ResourceRecord,
  RunRecord,
  TaskRecord,
  trusted
} from "../../../domain/Records.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import { HandoffRecord } from "../../../domain/Handoff.js"
import type { PipelineFields, TaskFields } from "../../../services/Store.js"

type Row = Record<string, unknown>

const json = (u: unknown): unknown => (typeof u === "string" ? JSON.parse(u) : null)
const str = (u: unknown): string => String(u)
const nstr = (u: unknown): string | null => (u === null || u === undefined ? null : String(u))
const num = (u: unknown): number => Number(u)
// ids the store wrote itself: branded by a cast, never validated per row (see domain/Ids.ts)
const rid = (u: unknown): RunId => String(u) as RunId
const nrid = (u: unknown): RunId | null => (u === null || u === undefined ? null : String(u) as RunId)
const pid = (u: unknown): PipelineId => String(u) as PipelineId
const npid = (u: unknown): PipelineId | null => (u === null || u === undefined ? null : String(u) as PipelineId)
/** A visit column: `NULL` (a row from before visits) or absent (an older schema) reads 0. */
const visitOf = (u: unknown): number => (u === null || u === undefined ? 0 : Number(u))
/** An active column: only 0 is inactive (`NULL` or absent: a row from before visits). */
const activeOf = (u: unknown): boolean => !(u === 0 || u === 0n)
const nnum = (u: unknown): number | null => (u === null || u === undefined ? null : Number(u))

/**
 * Column list of `pipelines` in insert order (`pno`, the rowid, is assigned by SQLite).
 *
 * @since 0.1.0
 * @category mappers
 */
export const PIPELINE_COLUMNS = [
  "pipeline_id", "key", "name", "state", "n_tasks_done", "n_tasks_total", "spec_digest", "seed_digest", "tags",
  "attempts_total", "run_id", "created_at", "updated_at", "started_at", "ended_at", "failed_task", "error_type",
  "error_message", "error_class", "repeat", "suite_id", "experiment_id", "local_key"
] as const

/**
 * A pipeline record (or the fields `admit` takes) as bound parameters (order of
 * {@link PIPELINE_COLUMNS}; an absent `repeat`, `suiteId`, `experimentId` or `localKey` is `NULL`).
 *
 * @since 0.1.0
 * @category mappers
 */
export const pipelineParams = (p: PipelineFields): Array<unknown> => [
  p.pipelineId, p.key, p.name, p.state, p.nTasksDone, p.nTasksTotal, p.specDigest, p.seedDigest,
  JSON.stringify(p.tags), p.attemptsTotal, p.runId, p.createdAt, p.updatedAt, p.startedAt, p.endedAt,
  p.failedTask, p.errorType, p.errorMessage, p.errorClass, p.repeat ?? null, p.suiteId ?? null,
  p.experimentId ?? null, p.localKey ?? null
]

/**
 * Maps a `pipelines` row. Rows come from this schema (the store wrote them), so the record is
 * built with `trusted` (no constructor, no validation): see src/domain/Records.ts.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toPipeline = (r: Row): PipelineRecord =>
  trusted(PipelineRecord, {
    pipelineId: pid(r.pipeline_id),
    key: nstr(r.key),
    name: str(r.name),
    state: r.state as PipelineRecord["state"],
    nTasksDone: num(r.n_tasks_done),
    nTasksTotal: num(r.n_tasks_total),
    specDigest: str(r.spec_digest),
    seedDigest: str(r.seed_digest),
    tags: json(r.tags) as Record<string, string>,
    attemptsTotal: num(r.attempts_total),
    runId: rid(r.run_id),
    createdAt: num(r.created_at),
    updatedAt: num(r.updated_at),
    startedAt: nnum(r.started_at),
    endedAt: nnum(r.ended_at),
    failedTask: nstr(r.failed_task),
    errorType: nstr(r.error_type),
    errorMessage: nstr(r.error_message),
    errorClass: nstr(r.error_class),
    // absent from stores before version 4 (read-only opens do not migrate): unknown
    repeat: nnum(r.repeat),
    // absent from stores before version 7: outside suites
    suiteId: nstr(r.suite_id),
    experimentId: nstr(r.experiment_id),
    localKey: nstr(r.local_key)
  })

/**
 * Column list of `tasks` in insert order (schema version 3).
 *
 * @since 0.1.0
 * @category mappers
 */
export const TASK_COLUMNS = [
  "pno", "task_run_id", "pipeline_id", "run_id", "seq", "task_name", "state", "attempts_used", "started_at", "ended_at",
  "duration_ms", "error_type", "error_message", "error_class", "lease_ids", "visit", "active"
] as const

/**
 * The JSON of a list of lease ids (`[]` without a call to `JSON.stringify` for the common empty
 * list: one per task row and per attempt row).
 *
 * @since 0.1.0
 * @category mappers
 */
export const leaseIdsJson = (leaseIds: ReadonlyArray<string>): string =>
  leaseIds.length === 0 ? "[]" : JSON.stringify(leaseIds)

/**
 * A task record as bound parameters (order of {@link TASK_COLUMNS}), `pno` its pipeline's
 * number (schema version 3).
 *
 * @since 0.1.0
 * @category mappers
 */
export const taskParams = (t: TaskFields, pno: number): Array<unknown> => [
  pno, t.taskRunId, t.pipelineId, t.runId, t.seq, t.taskName, t.state, t.attemptsUsed, t.startedAt, t.endedAt,
  t.durationMs, t.errorType, t.errorMessage, t.errorClass, leaseIdsJson(t.leaseIds), t.visit ?? 0,
  t.active === false ? 0 : 1
]

/**
 * Maps a `tasks` row.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toTask = (r: Row): TaskRecord =>
  trusted(TaskRecord, {
    taskRunId: str(r.task_run_id),
    pipelineId: pid(r.pipeline_id),
    runId: rid(r.run_id),
    seq: num(r.seq),
    taskName: str(r.task_name),
    state: r.state as TaskRecord["state"],
    attemptsUsed: num(r.attempts_used),
    startedAt: num(r.started_at),
    endedAt: nnum(r.ended_at),
    durationMs: nnum(r.duration_ms),
    errorType: nstr(r.error_type),
    errorMessage: nstr(r.error_message),
    errorClass: nstr(r.error_class),
    leaseIds: json(r.lease_ids) as Array<string>,
    visit: visitOf(r.visit),
    active: activeOf(r.active)
  })

/**
 * Column list of `attempts` in insert order (schema version 3).
 *
 * @since 0.1.0
 * @category mappers
 */
export const ATTEMPT_COLUMNS = [
  "attempt_id", "pno", "pipeline_id", "run_id", "task_run_id", "task_name", "seq", "attempt_no", "outcome", "error_class",
  "error_type", "error_message", "decision", "lease_ids", "started_at", "ended_at", "duration_ms", "visit",
  // token and cost accounting (schema version 12)
  "model", "tokens_in", "tokens_out", "tokens_estimated", "cost_usd"
] as const

/**
 * Maps an `attempts` row.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toAttempt = (r: Row): AttemptRecord =>
  trusted(AttemptRecord, {
    attemptId: num(r.attempt_id),
    pipelineId: pid(r.pipeline_id),
    runId: rid(r.run_id),
    taskRunId: str(r.task_run_id),
    taskName: str(r.task_name),
    seq: num(r.seq),
    attemptNo: num(r.attempt_no),
    outcome: r.outcome as AttemptRecord["outcome"],
    errorClass: nstr(r.error_class),
    errorType: nstr(r.error_type),
    errorMessage: nstr(r.error_message),
    decision: json(r.decision),
    leaseIds: json(r.lease_ids) as Array<string>,
    startedAt: num(r.started_at),
    endedAt: num(r.ended_at),
    durationMs: num(r.duration_ms),
    visit: visitOf(r.visit),
    // absent before schema version 12: null (and not estimated)
    model: r.model === undefined ? null : nstr(r.model),
    tokensIn: r.tokens_in === undefined || r.tokens_in === null ? null : num(r.tokens_in),
    tokensOut: r.tokens_out === undefined || r.tokens_out === null ? null : num(r.tokens_out),
    tokensEstimated: r.tokens_estimated === 1 || r.tokens_estimated === 1n || r.tokens_estimated === true,
    costUsd: r.cost_usd === undefined || r.cost_usd === null ? null : num(r.cost_usd)
  })

/**
 * Column list of `artifacts` (without the payload) as selected by reads.
 *
 * @since 0.1.0
 * @category mappers
 */
export const ARTIFACT_META =
  "artifact_id, pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage, blob_ref, is_final, created_at, payload IS NOT NULL AS has_payload, visit, active"

/**
 * {@link ARTIFACT_META} for a store before schema version 6 (opened read-only): no visit
 * columns, every row visit 0 and active.
 *
 * @since 0.1.0
 * @category mappers
 */
export const ARTIFACT_META_V5 =
  "artifact_id, pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage, blob_ref, is_final, created_at, payload IS NOT NULL AS has_payload, 0 AS visit, 1 AS active"

/**
 * Maps an `artifacts` row; `available` is the stored view (inline payload present, or a blob
 * reference) and is refined against the backend by the store.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toArtifact = (r: Row): ArtifactRecord =>
  trusted(ArtifactRecord, {
    artifactId: num(r.artifact_id),
    pipelineId: pid(r.pipeline_id),
    runId: rid(r.run_id),
    seq: num(r.seq),
    taskName: nstr(r.task_name),
    typeName: str(r.type_name),
    codec: str(r.codec),
    digest: str(r.digest),
    size: num(r.size),
    storage: r.storage as ArtifactRecord["storage"],
    blobRef: nstr(r.blob_ref),
    isFinal: num(r.is_final) === 1,
    available: r.storage === "inline" ? num(r.has_payload) === 1 : r.storage === "blob",
    createdAt: num(r.created_at),
    visit: visitOf(r.visit),
    active: activeOf(r.active)
  })

/**
 * Maps an `artifacts` row selected as {@link ARTIFACT_META} in array form (`.values`: one value
 * per column, in that list's order), as {@link toArtifact} maps the object form. Bulk reads use
 * it: an array per row costs less to build than an object per row.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toArtifactValues = (v: ReadonlyArray<unknown>): ArtifactRecord =>
  trusted(ArtifactRecord, {
    artifactId: num(v[0]),
    pipelineId: pid(v[1]),
    runId: rid(v[2]),
    seq: num(v[3]),
    taskName: nstr(v[4]),
    typeName: str(v[5]),
    codec: str(v[6]),
    digest: str(v[7]),
    size: num(v[8]),
    storage: v[9] as ArtifactRecord["storage"],
    blobRef: nstr(v[10]),
    isFinal: num(v[11]) === 1,
    available: v[9] === "inline" ? num(v[13]) === 1 : v[9] === "blob",
    createdAt: num(v[12]),
    visit: visitOf(v[14]),
    active: activeOf(v[15])
  })

/**
 * Maps an `events` row.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toEvent = (r: Row): EventRecord =>
  trusted(EventRecord, {
    eventId: num(r.event_id),
    kind: str(r.kind),
    pipelineId: npid(r.pipeline_id),
    runId: nrid(r.run_id),
    data: json(r.data),
    ts: num(r.ts)
  })

/**
 * Maps a `runs` row.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toRun = (r: Row): RunRecord =>
  trusted(RunRecord, {
    runId: rid(r.run_id),
    label: nstr(r.label),
    status: r.status as RunRecord["status"],
    config: json(r.config),
    startedAt: num(r.started_at),
    heartbeatAt: num(r.heartbeat_at),
    endedAt: nnum(r.ended_at),
    stopReason: nstr(r.stop_reason),
    notes: nstr(r.notes),
    meta: (json(r.meta) ?? {}) as Record<string, unknown>
  })

/**
 * Maps a `metrics` row (scope `''` is the run scope).
 *
 * @since 0.1.0
 * @category mappers
 */
export const toMetric = (r: Row): MetricRecord =>
  trusted(MetricRecord, {
    runId: rid(r.run_id),
    pipelineId: r.scope === "" ? null : pid(r.scope),
    name: str(r.name),
    value: json(r.value),
    label: nstr(r.label),
    display: r.display as MetricRecord["display"],
    updatedAt: num(r.updated_at)
  })

/**
 * Maps a `resources` row.
 *
 * @since 0.1.0
 * @category mappers
 */
export const toResource = (r: Row): ResourceRecord =>
  trusted(ResourceRecord, {
    pool: str(r.pool),
    resourceId: str(r.resource_id),
    kind: str(r.kind),
    spec: json(r.spec),
    health: json(r.health),
    updatedAt: num(r.updated_at)
  })

/**
 * Maps a `handoffs` row (schema version 6).
 *
 * @since 0.1.0
 * @category mappers
 */
export const toHandoff = (r: Row): HandoffRecord =>
  trusted(HandoffRecord, {
    handoffId: num(r.handoff_id),
    pipelineId: pid(r.pipeline_id),
    runId: rid(r.run_id),
    fromSeq: num(r.from_seq),
    fromTask: str(r.from_task),
    toSeq: nnum(r.to_seq),
    toTask: nstr(r.to_task),
    operation: r.operation as HandoffRecord["operation"],
    entrySeq: num(r.entry_seq),
    entryArtifactId: str(r.entry_artifact_id),
    entryReused: num(r.entry_reused) === 1,
    reason: str(r.reason),
    ts: num(r.ts)
  })
