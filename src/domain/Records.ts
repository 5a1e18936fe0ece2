/**
 * The records the store keeps: one Schema class per table (runs, pipelines, tasks, attempts,
 * artifacts, events, reported metrics, resources) and the state literals they use.
 *
 * Every time is epoch milliseconds (from `Clock`), every duration is milliseconds, every size
 * is bytes. Nullable columns are `null` (never `undefined`) so that a record round-trips
 * through SQLite, JSON and the memory store unchanged. JSON-valued columns (config snapshots,
 * event data, retry decisions, metric values, resource specs) are `unknown` strict JSON.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { PipelineId, RunId } from "./Ids.js"

// ---------------------------------------------------------------------------------------------
// State literals
// ---------------------------------------------------------------------------------------------

/**
 * Status of a run: `running` until it is finished as `completed` (every admitted pipeline
 * reached a terminal state), `interrupted` (stopped, or found stale by a later run) or
 * `failed` (the run itself broke).
 *
 * @since 0.1.0
 * @category models
 */
export const RunStatus = Schema.Literal("running", "completed", "interrupted", "failed")

/**
 * @since 0.1.0
 * @category models
 */
export type RunStatus = typeof RunStatus.Type

/**
 * State of a pipeline. `pending` is admitted but not started, `running` is owned by a run,
 * the other three are terminal.
 *
 * @since 0.1.0
 * @category models
 */
export const PipelineState = Schema.Literal("pending", "running", "succeeded", "failed", "interrupted")

/**
 * @since 0.1.0
 * @category models
 */
export type PipelineState = typeof PipelineState.Type

/**
 * Whether a pipeline state is terminal (`succeeded`, `failed`, `interrupted`).
 *
 * @since 0.1.0
 * @category guards
 */
export const isTerminalPipelineState = (state: PipelineState): boolean =>
  state === "succeeded" || state === "failed" || state === "interrupted"

/**
 * State of one task run (one row per execution of one task of one pipeline). `handed_off`:
 * the task returned a control directive (a handoff), committed with its transition.
 *
 * @since 0.1.0
 * @category models
 */
export const TaskState = Schema.Literal("running", "succeeded", "failed", "interrupted", "skipped", "handed_off")

/**
 * @since 0.1.0
 * @category models
 */
export type TaskState = typeof TaskState.Type

/**
 * Outcome of one attempt of a task. `handed_off`: the attempt returned a control directive;
 * `cache_hit`: the output was served from the call cache (no lease, the body did not run).
 *
 * @since 0.1.0
 * @category models
 */
export const AttemptOutcome = Schema.Literal("succeeded", "failed", "timeout", "cancelled", "handed_off", "cache_hit")

/**
 * @since 0.1.0
 * @category models
 */
export type AttemptOutcome = typeof AttemptOutcome.Type

/**
 * How a reported metric is displayed.
 *
 * @since 0.1.0
 * @category models
 */
export const MetricDisplay = Schema.Literal("number", "percent", "text")

/**
 * @since 0.1.0
 * @category models
 */
export type MetricDisplay = typeof MetricDisplay.Type

const NullableString = Schema.NullOr(Schema.String)
const NullableNumber = Schema.NullOr(Schema.Number)
const StringArray = Schema.Array(Schema.String)
const NullableRunId = Schema.NullOr(RunId)
const NullablePipelineId = Schema.NullOr(PipelineId)
/**
 * The visit of a task, attempt or artifact row (which occurrence of its station it belongs to):
 * 0 for the first entry, and for every row of a pipeline without `control`; missing in rows
 * written before visits existed, which read as 0.
 */
const Visit = Schema.optionalWith(Schema.Int.pipe(Schema.nonNegative()), { default: () => 0 })
/**
 * Whether a task or artifact row is part of the pipeline's current traversal (`true`), or
 * history superseded by a rewind, a retry-all or a restart (`false`). Rows written before
 * visits existed read as `true`.
 */
const Active = Schema.optionalWith(Schema.Boolean, { default: () => true })

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

/**
 * One run: a process (or resume) executing pipelines against a store.
 *
 * - `config`: the configuration snapshot (strict JSON);
 * - `startedAt`, `heartbeatAt`, `endedAt`: epoch ms; `heartbeatAt` is refreshed while the run
 *   lives, so a run whose heartbeat is older than a threshold is stale (crashed);
 * - `stopReason`: why it ended early (`signal`, `stop()`, a stop condition), else `null`.
 *
 * @since 0.1.0
 * @category records
 */
export class RunRecord extends Schema.Class<RunRecord>("assay/RunRecord")({
  runId: RunId,
  label: NullableString,
  status: RunStatus,
  config: Schema.Unknown,
  startedAt: Schema.Number,
  heartbeatAt: Schema.Number,
  endedAt: NullableNumber,
  stopReason: NullableString,
  notes: NullableString,
  meta: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}) {}

/**
 * One pipeline: one row of the dataset run through a chain of tasks.
 *
 * - `pipelineId`: content-addressed (or explicit) id, the primary key;
 * - `key`: the explicit key it was bound with, else `null`;
 * - `nTasksDone` / `nTasksTotal`: the checkpoint cursor (tasks whose output is stored); for a
 *   pipeline with control it is the traversal's position (`cursorKind: "position"`), not a
 *   count of tasks that ran: it moves back on a rewind, and is `nTasksTotal` once the traversal
 *   completed, also when a `Handoff.end` skipped the tasks after its source (what ran is in the
 *   task rows and the `handoffs` ledger);
 * - `specDigest` / `seedDigest`: identity digests, compared on resume;
 * - `runId`: the run that owns it (last admitted or settled it);
 * - `attemptsTotal`: attempts made for it across every run;
 * - `createdAt`, `updatedAt`, `startedAt`, `endedAt`: epoch ms (`startedAt`/`endedAt` of the
 *   latest execution; `endedAt - startedAt` is the latency used by `stats`);
 * - `failedTask`, `errorType`, `errorMessage`, `errorClass`: the failure of a `failed` or
 *   `interrupted` pipeline, cleared when it settles as `succeeded`;
 * - `repeat`: which of the `repeats` samples of its seed this pipeline is (from 0), `null` when
 *   unknown (a pipeline stored before schema version 4 under an explicit key). Optional in the
 *   constructor (default `null`);
 * - `suiteId`, `experimentId`, `localKey`: the suite and member (experiment) the pipeline
 *   belongs to and its key outside the suite (its content address or explicit key; see
 *   `domain/Suite.ts`), `null` for a pipeline run outside suites (and in stores before schema
 *   version 7). Optional in the constructor (default `null`).
 *
 * @since 0.1.0
 * @category records
 */
export class PipelineRecord extends Schema.Class<PipelineRecord>("assay/PipelineRecord")({
  pipelineId: PipelineId,
  key: NullableString,
  name: Schema.String,
  state: PipelineState,
  nTasksDone: Schema.Number,
  nTasksTotal: Schema.Number,
  specDigest: Schema.String,
  seedDigest: Schema.String,
  tags: Schema.Record({ key: Schema.String, value: Schema.String }),
  attemptsTotal: Schema.Number,
  runId: RunId,
  createdAt: Schema.Number,
  updatedAt: Schema.Number,
  startedAt: NullableNumber,
  endedAt: NullableNumber,
  failedTask: NullableString,
  errorType: NullableString,
  errorMessage: NullableString,
  errorClass: NullableString,
  repeat: Schema.optionalWith(NullableNumber, { default: () => null }),
  suiteId: Schema.optionalWith(NullableString, { default: () => null }),
  experimentId: Schema.optionalWith(NullableString, { default: () => null }),
  localKey: Schema.optionalWith(NullableString, { default: () => null })
}) {}

/**
 * One execution of one task of one pipeline (`taskRunId` is unique; `(pipelineId, seq)` is
 * not, because a pipeline restarted from its seed runs a task again).
 *
 * `attemptsUsed` counts attempts, `durationMs` is the wall time of the whole task including
 * retry waits, `leaseIds` are the leases its attempts held.
 *
 * @since 0.1.0
 * @category records
 */
export class TaskRecord extends Schema.Class<TaskRecord>("assay/TaskRecord")({
  taskRunId: Schema.String,
  pipelineId: PipelineId,
  runId: RunId,
  seq: Schema.Number,
  taskName: Schema.String,
  state: TaskState,
  attemptsUsed: Schema.Number,
  startedAt: Schema.Number,
  endedAt: NullableNumber,
  durationMs: NullableNumber,
  errorType: NullableString,
  errorMessage: NullableString,
  errorClass: NullableString,
  leaseIds: StringArray,
  visit: Visit,
  active: Active
}) {}

/**
 * One attempt of one task. `attemptId` is assigned by the store when the attempt is written
 * and grows in write order (the key of attempt streams). `decision` is the persisted retry
 * decision (strict JSON, e.g. `{ retry, reason, delayMs, errorClass }`), `null` on success.
 *
 * Token and cost accounting (schema version 12; see `Pricing`), summed over the attempt's
 * lease reports that carried token usage (a `chat` call), all `null` for an attempt that made
 * none (and in rows written before): `model` (the last model that answered), `tokensIn` /
 * `tokensOut` (prompt / completion tokens), `tokensEstimated` (`true` when a server gave no
 * usage and the tokens were estimated), `costUsd` (US dollars, priced; `null` when no price
 * applied and the server reported no cost). Optional in the constructor.
 *
 * @since 0.1.0
 * @category records
 */
export class AttemptRecord extends Schema.Class<AttemptRecord>("assay/AttemptRecord")({
  attemptId: Schema.Number,
  pipelineId: PipelineId,
  runId: RunId,
  taskRunId: Schema.String,
  taskName: Schema.String,
  seq: Schema.Number,
  attemptNo: Schema.Number,
  outcome: AttemptOutcome,
  errorClass: NullableString,
  errorType: NullableString,
  errorMessage: NullableString,
  decision: Schema.Unknown,
  leaseIds: StringArray,
  startedAt: Schema.Number,
  endedAt: Schema.Number,
  durationMs: Schema.Number,
  visit: Visit,
  model: Schema.optionalWith(NullableString, { default: () => null }),
  tokensIn: Schema.optionalWith(NullableNumber, { default: () => null }),
  tokensOut: Schema.optionalWith(NullableNumber, { default: () => null }),
  tokensEstimated: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  costUsd: Schema.optionalWith(NullableNumber, { default: () => null })
}) {}

/**
 * Metadata of one stored artifact (a task output, or the seed at `seq = -1`). `artifactId` is
 * assigned by the store and is unique; `(pipelineId, seq)` is not.
 *
 * - `digest`, `size` (bytes), `codec`, `typeName` are kept whatever the backend;
 * - `storage`: where the payload is (`inline` in the store, `blob` in a backend file named by
 *   `blobRef`, `none` when dropped by `journal: "summary"` or the null backend);
 * - `available`: whether the payload can be read right now (a deleted blob reads `false`).
 *
 * @since 0.1.0
 * @category records
 */
export class ArtifactRecord extends Schema.Class<ArtifactRecord>("assay/ArtifactRecord")({
  artifactId: Schema.Number,
  pipelineId: PipelineId,
  runId: RunId,
  seq: Schema.Number,
  taskName: NullableString,
  typeName: Schema.String,
  codec: Schema.String,
  digest: Schema.String,
  size: Schema.Number,
  storage: Schema.Literal("inline", "blob", "none"),
  blobRef: NullableString,
  isFinal: Schema.Boolean,
  available: Schema.Boolean,
  createdAt: Schema.Number,
  visit: Visit,
  active: Active
}) {}

/**
 * One structured event. `eventId` is assigned by the store in write order (the key of event
 * streams); `data` is strict JSON; `ts` is epoch ms.
 *
 * @since 0.1.0
 * @category records
 */
export class EventRecord extends Schema.Class<EventRecord>("assay/EventRecord")({
  eventId: Schema.Number,
  kind: Schema.String,
  pipelineId: NullablePipelineId,
  runId: NullableRunId,
  data: Schema.Unknown,
  ts: Schema.Number
}) {}

/**
 * One reported metric, unique by (run, scope, name): `pipelineId = null` is run scope.
 * `value` is strict JSON (usually a number or a string); `updatedAt` is epoch ms.
 *
 * @since 0.1.0
 * @category records
 */
export class MetricRecord extends Schema.Class<MetricRecord>("assay/MetricRecord")({
  runId: RunId,
  pipelineId: NullablePipelineId,
  name: Schema.String,
  value: Schema.Unknown,
  label: NullableString,
  display: MetricDisplay,
  updatedAt: Schema.Number
}) {}

/**
 * One resource of one pool: its spec with secrets masked (see `maskSecrets` in the store
 * helpers) and its health counters (strict JSON, e.g. `{ state, leases, failures }`).
 *
 * @since 0.1.0
 * @category records
 */
export class ResourceRecord extends Schema.Class<ResourceRecord>("assay/ResourceRecord")({
  pool: Schema.String,
  resourceId: Schema.String,
  kind: Schema.String,
  spec: Schema.Unknown,
  health: Schema.Unknown,
  updatedAt: Schema.Number
}) {}

// ---------------------------------------------------------------------------------------------
// Trusted construction
// ---------------------------------------------------------------------------------------------

/**
 * Builds an instance of a record class from fields that are already known to be valid,
 * without running the class constructor: `Object.assign(Object.create(Class.prototype),
 * fields)`. The result is equal to `new Class(fields, true)` in every way callers observe:
 * `instanceof Class`, `Equal.equals` (and `Hash.hash`) with `new Class(fields, true)`, the same
 * own enumerable properties, and the same `Schema.encode` output (checked in
 * test/domain/Records.test.ts). It costs about 0.3 µs instead of about 1.5 µs for a
 * constructor call with validation off (measured on a `PipelineRecord`), which matters on the
 * stores' read and write paths (hundreds of thousands of rows per second).
 *
 * Use it **only** for rows the store itself wrote (or a copy of an existing instance with
 * fields of the same types): nothing is checked. Anything that comes from a user, a file or
 * the network must go through the constructor or `Schema.decode`. Like `new Class(fields,
 * true)`, nested objects (`tags`, `leaseIds`) are shared with `fields`, not copied.
 *
 * @param Class a `Schema.Class` (any class whose constructor only assigns its fields)
 * @param fields every field of the record, already valid
 * @returns an instance of `Class` holding the fields of `fields` (a shallow copy)
 *
 * @since 0.1.0
 * @category constructors
 */
export const trusted = <A extends object, F extends object>(
  Class: { readonly prototype: A } & (new(fields: F) => A),
  fields: NoInfer<F>
): A => Object.assign(Object.create(Class.prototype) as A, fields)
