/**
 * The one place that builds what a run writes: the admission row and stored seed, the task
 * row, the attempt row and the checkpoint units (succeeded, failed, interrupted) that commit
 * them together through the store's group commit.
 *
 * @internal
 */
import { utf8 } from "../../../domain/Codec.js"
import { classify, errorTypeOf } from "../../../domain/Errors.js"
import { messageOf } from "../../../domain/internal/errors.js"
import type { AttemptOutcome, PipelineRecord } from "../../../domain/Records.js"
import type * as RetryPolicy from "../../../domain/RetryPolicy.js"
import type * as Task from "../../../domain/Task.js"
import type {
  CheckpointUnit,
  NewArtifact,
  NewAttempt,
  NewEvent,
  PipelineError,
  PipelineFields,
  ResourceInput,
  TaskFields
} from "../../Store.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import { maskSecrets } from "../../../domain/internal/resource.js"
import type { PoolStats, ResourceSnapshot } from "../../Pools.js"
import type { AttemptUsage } from "./attemptContext.js"

/** Longest error message stored (characters). */
const MAX_MESSAGE = 4000

/**
 * The error columns of a failed attempt, task or pipeline.
 *
 * @internal
 */
export interface ErrorColumns {
  errorType: string
  errorMessage: string
  errorClass: string
}

/**
 * The error columns of `error` (message cut to 4,000 characters).
 *
 * @internal
 */
export const errorColumns = (error: unknown): ErrorColumns => ({
  errorType: errorTypeOf(error),
  errorMessage: messageOf(error).slice(0, MAX_MESSAGE),
  errorClass: classify(error) as string
})

/**
 * The error columns of an attempt that was interrupted (no error of its own).
 *
 * @internal
 */
export const interruptedColumns = (): ErrorColumns => ({
  errorType: "Interrupted",
  errorMessage: "interrupted",
  errorClass: "cancelled"
})

/**
 * What a pipeline's spec contributes to its rows.
 *
 * @internal
 */
export interface SpecFacts {
  readonly pipelineId: PipelineId
  readonly key: string
  readonly explicitKey: boolean
  readonly specDigest: string
  readonly seedDigest: string
  readonly seedJson: string
  readonly repeat: number
  readonly template: { readonly name: string; readonly nTasks: number; readonly tags: Task.JsonObject }
  /** The suite membership of a suite member's spec (absent outside suites). */
  readonly member?: { readonly suiteId: string; readonly experimentId: string; readonly localKey: string } | undefined
}

const tagsOf = (tags: Task.JsonObject): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(tags)) out[k] = typeof v === "string" ? v : JSON.stringify(v)
  return out
}

/**
 * The row written when a pipeline is admitted (state `running` at `cursor`), keeping the
 * stored row's creation time and attempt total.
 *
 * @internal
 */
export const admissionRow = (
  spec: SpecFacts,
  cursor: number,
  stored: PipelineRecord | undefined,
  runId: RunId,
  now: number
): PipelineFields => ({
  pipelineId: spec.pipelineId,
  key: spec.explicitKey ? spec.key : null,
  name: spec.template.name,
  state: "running",
  nTasksDone: cursor,
  nTasksTotal: spec.template.nTasks,
  specDigest: spec.specDigest,
  seedDigest: spec.seedDigest,
  tags: tagsOf(spec.template.tags),
  attemptsTotal: stored?.attemptsTotal ?? 0,
  runId,
  createdAt: stored?.createdAt ?? now,
  updatedAt: now,
  startedAt: now,
  endedAt: null,
  failedTask: null,
  errorType: null,
  errorMessage: null,
  errorClass: null,
  repeat: spec.repeat,
  suiteId: spec.member?.suiteId ?? null,
  experimentId: spec.member?.experimentId ?? null,
  localKey: spec.member?.localKey ?? null
})

/**
 * The seed, stored once with a new pipeline's row as its artifact at seq -1.
 *
 * @internal
 */
export const seedArtifact = (spec: SpecFacts, runId: RunId, now: number): NewArtifact => ({
  pipelineId: spec.pipelineId,
  runId,
  seq: -1,
  taskName: null,
  typeName: "json",
  codec: "json",
  digest: spec.seedDigest,
  payload: utf8(spec.seedJson),
  isFinal: false,
  createdAt: now
})

/**
 * One task of one pipeline in this run: what every row of it shares.
 *
 * @internal
 */
export interface TaskRun {
  readonly pipelineId: PipelineId
  readonly runId: RunId
  readonly taskRunId: string
  readonly taskName: string
  readonly seq: number
  /** The visit (0 for a plain pipeline; a control pipeline's revisits count up). */
  readonly visit?: number | undefined
}

/**
 * An attempt row, with the token and cost accounting of its lease reports when it made a
 * model call (`usage`, see `AttemptContext.priceReport`).
 *
 * @internal
 */
export const attemptRow = (
  t: TaskRun,
  attemptNo: number,
  outcome: AttemptOutcome,
  error: ErrorColumns | null,
  decision: RetryPolicy.RetryDecision | null,
  leaseIds: ReadonlyArray<string>,
  startedAt: number,
  endedAt: number,
  usage?: AttemptUsage | undefined
): NewAttempt => {
  // one object literal per shape (an object spread first made V8 build each row property by
  // property: one attempt row per task execution)
  const row = {
    pipelineId: t.pipelineId,
    runId: t.runId,
    taskRunId: t.taskRunId,
    taskName: t.taskName,
    seq: t.seq,
    attemptNo,
    outcome,
    errorClass: error === null ? null : error.errorClass,
    errorType: error === null ? null : error.errorType,
    errorMessage: error === null ? null : error.errorMessage,
    decision,
    leaseIds,
    startedAt,
    endedAt,
    durationMs: endedAt - startedAt,
    visit: t.visit ?? 0
  }
  // (with usage: its fields first, as they always came)
  return usage === undefined ? row : {
    model: usage.model,
    tokensIn: usage.tokensIn,
    tokensOut: usage.tokensOut,
    tokensEstimated: usage.estimated,
    costUsd: usage.costUsd,
    ...row
  }
}

/**
 * The row of an attempt that succeeded (or was served from the call cache): `outcome` and
 * `decision` as `succeededAs` gives them, the attempt's own leases, start and end (epoch ms)
 * and its model usage. The one place the embedded runner's plain and controlled paths and the
 * cluster's task activity build it.
 *
 * @internal
 */
export const succeededAttemptRow = (
  t: TaskRun,
  attemptNo: number,
  succeeded: { readonly outcome: AttemptOutcome; readonly decision: RetryPolicy.RetryDecision },
  result: {
    readonly leaseIds: ReadonlyArray<string>
    readonly startedAt: number
    readonly usage?: AttemptUsage | undefined
  },
  endedAt: number
): NewAttempt =>
  attemptRow(t, attemptNo, succeeded.outcome, null, succeeded.decision, result.leaseIds, result.startedAt, endedAt, result.usage)

/**
 * The attempt of a dead run that was in flight at a pipeline's cursor, as its abandoned row
 * numbers it: `seq` (and `visit`, 0 for a plain pipeline), the number that attempt ran with
 * (`attemptNo`: the one after the dead run's recorded attempts of that task, or a control
 * pipeline's reserved number) and the dead run's task run id when its earlier attempts name it.
 *
 * @internal
 */
export interface InFlight {
  readonly seq: number
  readonly visit: number
  readonly attemptNo: number
  readonly taskRunId?: string | undefined
}

/**
 * What the abandoned attempt of a dead run said by default. The store keeps no durable mark of
 * an attempt's start (one more write per attempt, on the hot path), so a resume cannot tell an
 * attempt that ran from one that was next but had not begun (its pipeline only admitted, or
 * waiting for a worker slot or a retry's delay). Since issue 18 (F3) the embedded engine's
 * resume records a `pipeline.abandoned` event instead of such a row (see `admit.ts`); stores
 * written before hold rows with this message. The cluster engine, whose claims mark an
 * execution's start, still records its own abandoned rows (its message).
 *
 * @internal
 */
export const ABANDONED_MESSAGE = "attempt abandoned: its run died (no heartbeat) with this attempt next; " +
  "it may not have started (the store keeps no mark of an attempt's start: the pipeline may have been " +
  "only admitted, or waiting for a worker slot or a retry's delay)"

/**
 * The attempt recorded for a task whose attempt was in flight, or next, when its run died
 * (outcome `cancelled`, error type `Abandoned`); `visit` is the station's visit on a control
 * pipeline (0 otherwise); `message` says why (default: {@link ABANDONED_MESSAGE}); `attemptNo`
 * is the number the attempt ran (or would have run) with (0 when unknown: the cluster's
 * marker) and `taskRunId` its task run's id when known (otherwise one of its own).
 * `startedAt` is when its execution began, when known (the cluster's claim of the task: its
 * attempt ran from then at the earliest): the row then runs from it to `now`, the time the
 * abandonment was detected (an upper bound of the time it took); otherwise it starts and ends
 * at `now` (0 ms: nothing is known of its start).
 *
 * @internal
 */
export const abandonedAttempt = (
  pipelineId: PipelineId,
  runId: RunId,
  taskName: string,
  seq: number,
  now: number,
  visit = 0,
  message = ABANDONED_MESSAGE,
  attemptNo = 0,
  taskRunId?: string | undefined,
  startedAt?: number | undefined
): NewAttempt =>
  attemptRow(
    {
      pipelineId,
      runId,
      taskRunId: taskRunId ?? `${pipelineId}:${seq}${visit === 0 ? "" : `#${visit}`}:abandoned:${now}`,
      taskName,
      seq,
      visit
    },
    attemptNo,
    "cancelled",
    {
      errorClass: "cancelled",
      errorType: "Abandoned",
      errorMessage: message
    },
    null,
    [],
    startedAt !== undefined && startedAt > 0 && startedAt <= now ? startedAt : now,
    now
  )

/**
 * A task row in a terminal state.
 *
 * @internal
 */
export const taskRow = (
  t: TaskRun,
  state: Exclude<TaskFields["state"], "running" | "skipped">,
  attemptsUsed: number,
  startedAt: number,
  endedAt: number,
  error: ErrorColumns | null,
  leaseIds: ReadonlyArray<string>
): TaskFields => ({
  taskRunId: t.taskRunId,
  pipelineId: t.pipelineId,
  runId: t.runId,
  seq: t.seq,
  taskName: t.taskName,
  state,
  attemptsUsed,
  startedAt,
  endedAt,
  durationMs: endedAt - startedAt,
  errorType: error === null ? null : error.errorType,
  errorMessage: error === null ? null : error.errorMessage,
  errorClass: error === null ? null : error.errorClass,
  leaseIds,
  visit: t.visit ?? 0
})

/**
 * The checkpoint of a succeeded task: its output artifact (final when it is the last task),
 * its task row, its last attempt and the pipeline cursor (`succeeded` after the last task;
 * `cursor`, default `seq + 1`) with `attemptsDelta` attempts counted (default `attempt`).
 * Rows carry the task's visit.
 *
 * @internal
 */
export const succeededUnit = (
  t: TaskRun,
  output: { readonly typeName: string; readonly codec: string; readonly digest: string; readonly data: Uint8Array },
  isLast: boolean,
  attempt: number,
  taskStartedAt: number,
  endedAt: number,
  taskLeaseIds: ReadonlyArray<string>,
  lastAttempt: NewAttempt,
  cursor: number = t.seq + 1,
  attemptsDelta: number = attempt
): CheckpointUnit => ({
  pipelineId: t.pipelineId,
  artifact: {
    pipelineId: t.pipelineId,
    runId: t.runId,
    seq: t.seq,
    taskName: t.taskName,
    typeName: output.typeName,
    codec: output.codec,
    digest: output.digest,
    payload: output.data,
    isFinal: isLast,
    createdAt: endedAt,
    visit: t.visit ?? 0
  },
  task: taskRow(t, "succeeded", attempt, taskStartedAt, endedAt, null, taskLeaseIds),
  // A step before the last patches only the cursor, the time and the attempt count: the
  // admission row already says `running` under this run with no end and no error, and a patch
  // that SETs no indexed column leaves every index of the pipelines table alone (state, run
  // and latency indexes: about a third of a trivial pipeline's SQL time).
  pipeline: isLast
    ? { nTasksDone: cursor, state: "succeeded", runId: t.runId, endedAt, updatedAt: endedAt, error: null, attemptsDelta }
    : { nTasksDone: cursor, updatedAt: endedAt, attemptsDelta },
  attempts: [lastAttempt]
})

/**
 * The checkpoint of a task that failed for good, which fails its pipeline.
 *
 * @internal
 */
export const failedUnit = (
  t: TaskRun,
  attempt: number,
  taskStartedAt: number,
  endedAt: number,
  error: ErrorColumns,
  taskLeaseIds: ReadonlyArray<string>,
  lastAttempt: NewAttempt,
  reason: string
): CheckpointUnit => ({
  pipelineId: t.pipelineId,
  task: taskRow(t, "failed", attempt, taskStartedAt, endedAt, error, taskLeaseIds),
  pipeline: {
    state: "failed",
    runId: t.runId,
    endedAt,
    updatedAt: endedAt,
    error: { failedTask: t.taskName, ...error },
    attemptsDelta: attempt
  },
  attempts: [lastAttempt],
  events: [{
    kind: "pipeline.failed",
    pipelineId: t.pipelineId,
    runId: t.runId,
    data: { task: t.taskName, seq: t.seq, attempts: attempt, errorClass: error.errorClass, reason },
    ts: endedAt
  }]
})

/**
 * The task being run when a pipeline was interrupted.
 *
 * @internal
 */
export interface CurrentTask extends TaskRun {
  startedAt: number
  attempt: number
  /** Failed attempts of this task already recorded (write-behind). */
  committed: number
  /** The number of the last attempt of this task run whose row is written (0: none yet). */
  recorded: number
  /** The retryable failure a stop cut short (its retry not made), for the interrupted row. */
  stoppedAfter?: string
}

/**
 * The checkpoint of an interrupted pipeline: the pipeline keeps its cursor and ends
 * `interrupted` (resumable). Its current task (if any) ends `interrupted` when one of its
 * attempts of this run started; a task that was still waiting for its first attempt (for a
 * worker slot, or a start) gets no task row. `began` is when the current attempt's body began
 * (epoch ms; `-1`: it had not begun): an attempt cut short before its row was written gets
 * its row here, `cancelled` (error type `Interrupted`, decision `stopped`), in the same
 * commit as the task row, so every attempt that started has exactly one row.
 *
 * @internal
 */
export const interruptedUnit = (
  pipelineId: PipelineId,
  runId: RunId,
  cursor: number,
  task: CurrentTask | undefined,
  stopReason: string | null,
  now: number,
  began = -1
): CheckpointUnit => {
  const stopped = `run stopped: ${stopReason ?? "interrupted"}`
  const message = task?.stoppedAfter === undefined
    ? stopped
    : `${stopped} (before retrying: ${task.stoppedAfter})`.slice(0, MAX_MESSAGE)
  const error: PipelineError = {
    failedTask: task === undefined ? null : task.taskName,
    errorType: "Interrupted",
    errorMessage: message,
    errorClass: "cancelled"
  }
  const events: ReadonlyArray<NewEvent> = [{
    kind: "pipeline.interrupted",
    pipelineId,
    runId,
    data: { cursor, reason: stopReason },
    ts: now
  }]
  // the current attempt began and has no row yet (cut short in its body, or before its row
  // was written)
  const cut = task !== undefined && began >= 0 && task.recorded < task.attempt
  const used = task === undefined ? 0 : cut ? task.attempt : task.recorded
  const columns: ErrorColumns = { errorType: "Interrupted", errorMessage: message, errorClass: "cancelled" }
  return {
    pipelineId,
    task: task === undefined || used === 0 ? undefined : taskRow(
      task,
      "interrupted",
      used,
      cut && task.recorded === 0 ? began : task.startedAt,
      now,
      columns,
      []
    ),
    pipeline: {
      state: "interrupted",
      nTasksDone: cursor,
      runId,
      endedAt: now,
      updatedAt: now,
      attemptsDelta: task === undefined ? 0 : task.committed + (cut ? 1 : 0),
      error
    },
    ...(cut
      ? {
        attempts: [attemptRow(task, task.attempt, "cancelled", columns, {
          retry: false,
          reason: "stopped",
          delayMs: 0,
          errorClass: "cancelled",
          attempt: task.attempt
        }, [], began, now)]
      }
      : {}),
    events
  }
}

/**
 * The stored row of one resource of pool `pool` (what `report`, `watch` and the dashboard read
 * of it): its spec with every secret masked, and its health as the pool's snapshot shows it at
 * `updatedAt` (ms), with the pool's wait p95 (ms) and waiters, under run `runId`; `extra` adds
 * health fields (the embedded runner's saved and restored pool state). Written by the embedded
 * runner and by cluster runners alike.
 */
export const resourceRow = (
  pool: string,
  snap: ResourceSnapshot,
  info: { readonly options?: Parameters<typeof maskSecrets>[0]; readonly tags?: Parameters<typeof maskSecrets>[0] } | undefined,
  stats: Pick<PoolStats, "waitMsP95" | "waiting">,
  runId: RunId,
  updatedAt: number,
  extra: Readonly<Record<string, unknown>> = {}
): ResourceInput => ({
  pool,
  resourceId: snap.id,
  kind: snap.kind,
  spec: {
    id: snap.id,
    kind: snap.kind,
    capacity: snap.capacity,
    options: maskSecrets(info?.options ?? {}),
    tags: maskSecrets(info?.tags ?? {})
  },
  health: {
    state: snap.state,
    active: snap.active,
    capacity: snap.capacity,
    consecutiveFailures: snap.consecutiveFailures,
    latencyEmaMs: snap.latencyEmaMs ?? null,
    usage: snap.usage,
    cooldownUntil: snap.cooldownUntil ?? null,
    lastError: snap.lastError ?? null,
    throttledUntil: snap.throttledUntil ?? null,
    throttledTotal: snap.throttledTotal,
    breaker: snap.breaker,
    breakerUntil: snap.breakerUntil ?? null,
    algorithm: snap.algorithm ?? null,
    poolWaitMsP95: stats.waitMsP95,
    poolWaiting: stats.waiting,
    runId,
    ...extra
  },
  updatedAt
})
