/**
 * One admitted pipeline, run to a terminal state on its own fiber: its tasks in order, each
 * task's attempts until success or a declined retry, a checkpoint after every task, and the
 * interrupted row when a stop (or an interruption from outside) ends it early.
 *
 * Everything it needs comes in one {@link PipelineEnv} record, built once per run.
 *
 * @internal
 */
import {
  Cause,
  Clock,
  Context,
  Duration,
  Effect,
  Either,
  Exit,
  Fiber,
  Option,
  Predicate,
  Runtime,
  Scope
} from "effect"
import type { YieldWrap } from "effect/Utils"
import type { CodecRegistry, Encoded } from "../../../domain/Codec.js"
import * as Control from "../../../domain/Control.js"
import * as Evaluator from "../../../domain/Evaluator.js"
import {
  ArtifactCodecError,
  classifyCause,
  HandoffRefused,
  LeaseLeakError,
  MaxTotalExceeded,
  type StoreUnavailable,
  TaskTimeout
} from "../../../domain/Errors.js"
import { type Handoff, isHandoff } from "../../../domain/Handoff.js"
import { digest } from "../../../domain/Json.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type { AttemptOutcome } from "../../../domain/Records.js"
import * as RetryPolicy from "../../../domain/RetryPolicy.js"
import type * as Task from "../../../domain/Task.js"
import type { Pools } from "../../Pool.js"
import type { AdmissionWrite, CheckpointUnit, NewEvent, PipelineFields, PipelinePatch, StoreService } from "../../Store.js"
import { effectBodyOf, isSyncRun, syncBodyOf } from "../../../domain/internal/syncRun.js"
import { HoldNowTypeId } from "../holdNow.js"
import { afterClose, AttemptGenerator, attemptExit, attemptScoped, AttemptScope } from "./attemptScope.js"
import { evalNow, neverHolds, Pending } from "./evalNow.js"
import { BranchCacheId } from "../../../domain/internal/branchCache.js"
import {
  afterRun,
  branchCache,
  type CacheEnv,
  type CacheNote,
  combineBranchNotes,
  coalesce,
  countNote,
  failedWithNote,
  hasCachedBranch,
  planOf,
  succeededAs
} from "./cache.js"
import { type AttemptShared, AttemptContext, type AttemptUsage, type MemberFacts, memberOf } from "./attemptContext.js"
import * as Rows from "./rows.js"
import type { SlotGate, SlotHold } from "./slotGate.js"
import { emptyHold } from "./slotGate.js"
import type { RunState } from "./state.js"
import * as State from "./state.js"
import type { PipelineId } from "../../../domain/Ids.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * Where a pipeline starts: its cursor and the input of the task at that cursor.
 *
 * @internal
 */
export interface Start {
  readonly cursor: number
  readonly input: unknown
  /** The pipeline's admission, written by its own fiber (see {@link Admission}). */
  readonly admission?: Admission | undefined
  /** What {@link runNow} did before it handed the pipeline to its fiber (see {@link Carried}). */
  readonly carried?: Carried | undefined
}

/**
 * A pipeline {@link runNow} began without a fiber and hands over at `Start.cursor`: what it
 * holds uncommitted (the admission and the deferred checkpoints of the tasks before the
 * cursor), the worker slot it holds, when the task at the cursor began (its task run id), and
 * that task's first attempt, already run (`undefined`: not run, the run was stopping). The
 * fiber continues exactly where the general path would be after that attempt.
 *
 * @internal
 */
export interface Carried {
  readonly uncommitted: Uncommitted
  readonly holder: SlotHold
  readonly taskStartedAt: number
  readonly first: AttemptResult | Effect.Effect<AttemptResult, StoreUnavailable> | undefined
}

/**
 * A pipeline's admission as its fiber writes it: the store write (row, seed, initial traversal
 * state) and the events recorded once the row is durable.
 *
 * @internal
 */
export interface Admission {
  readonly write: AdmissionWrite
  readonly events: ReadonlyArray<NewEvent>
}

/**
 * Writes an admission now: the row (with its seed and initial traversal state), then its
 * events; resolves once the row is durable.
 *
 * @internal
 */
export const writeAdmission = (store: StoreService, a: Admission): Effect.Effect<void, StoreUnavailable> => {
  const write = store.admit(a.write.pipelines, a.write.seeds, a.write.traversals)
  return a.events.length === 0
    ? write
    : Effect.zipRight(write, Effect.forEach(a.events, (e) => store.emitEvent(e), { discard: true }))
}

/**
 * What a pipeline fiber has done but not committed yet: its admission and the checkpoints of
 * synchronous tasks whose next task is synchronous too. They ride in the pipeline's next
 * checkpoint (`admission`, `before`: one transaction, in order), so a crash before it loses
 * them all (none was reported done, and a resume reruns them), and nothing later is durable
 * without them.
 *
 * @internal
 */
export interface Uncommitted {
  admission: AdmissionWrite | undefined
  /** The units, without their pipeline patches (merged into `patch`). */
  units: Array<CheckpointUnit>
  /** The merged pipeline patch of `units` (see {@link mergePatch}). */
  patch: PipelinePatch | undefined
}

/**
 * An empty {@link Uncommitted}.
 *
 * @internal
 */
export const noneUncommitted = (): Uncommitted => ({ admission: undefined, units: [], patch: undefined })

/**
 * Defers `unit`: its rows wait in `u`, its pipeline patch is merged into `u.patch`.
 *
 * @internal
 */
export const defer = (u: Uncommitted, unit: CheckpointUnit): void => {
  const pipeline = unit.pipeline
  // the unit without its patch, field by field (a rest pattern copied it through the runtime's
  // generic property copy, once per deferred task)
  u.units.push(pipeline === undefined ? unit : withoutPatch(unit))
  if (pipeline !== undefined) u.patch = u.patch === undefined ? pipeline : mergePatch(u.patch, pipeline)
}

/** `unit` without its pipeline patch (every other field of a {@link CheckpointUnit} kept). */
const withoutPatch = (unit: CheckpointUnit): CheckpointUnit => {
  const out: AllFields<CheckpointUnit> = {
    pipelineId: unit.pipelineId,
    artifact: unit.artifact,
    task: unit.task,
    pipeline: undefined,
    attempts: unit.attempts,
    events: unit.events,
    traversal: unit.traversal,
    admission: unit.admission,
    before: unit.before
  }
  return out
}

/**
 * Every field of `A`, optional ones included: an object literal of this type lists them all,
 * so that a field added to {@link CheckpointUnit} cannot be dropped by a field-by-field copy.
 */
type AllFields<A> = { [K in keyof Required<A>]: Required<A>[K] }

/**
 * Two pipeline patches of one row as one: the later one's fields win, attempt deltas add up.
 *
 * @internal
 */
export const mergePatch = (earlier: PipelinePatch, later: PipelinePatch): PipelinePatch => ({
  // field by field, one object shape (two spreads of patches of varying shapes took the
  // runtime's generic copy: ~1.5 % of a trivial run's profile)
  state: later.state !== undefined ? later.state : earlier.state,
  nTasksDone: later.nTasksDone !== undefined ? later.nTasksDone : earlier.nTasksDone,
  runId: later.runId !== undefined ? later.runId : earlier.runId,
  startedAt: later.startedAt !== undefined ? later.startedAt : earlier.startedAt,
  endedAt: later.endedAt !== undefined ? later.endedAt : earlier.endedAt,
  error: later.error !== undefined ? later.error : earlier.error,
  attemptsDelta: (earlier.attemptsDelta ?? 0) + (later.attemptsDelta ?? 0),
  updatedAt: later.updatedAt
})

/**
 * A pipeline row as `patch` leaves it (the store's own patch semantics). A copy of the row's
 * own shape whose fields are then set (a spread followed by a dozen fields in one literal
 * built the copy property by property, once per admitted pipeline).
 */
const foldPatch = (row: PipelineFields, patch: PipelinePatch): PipelineFields => {
  const err = patch.error
  // one literal listing every field (a spread of the row then a dozen assignments made a copy
  // property by property: ~2.5 KB allocated per admitted pipeline)
  const out: AllFields<PipelineFields> = {
    pipelineId: row.pipelineId,
    key: row.key,
    name: row.name,
    state: patch.state !== undefined ? patch.state : row.state,
    nTasksDone: patch.nTasksDone !== undefined ? patch.nTasksDone : row.nTasksDone,
    nTasksTotal: row.nTasksTotal,
    specDigest: row.specDigest,
    seedDigest: row.seedDigest,
    tags: row.tags,
    attemptsTotal: row.attemptsTotal + (patch.attemptsDelta ?? 0),
    runId: patch.runId !== undefined ? patch.runId : row.runId,
    createdAt: row.createdAt,
    updatedAt: patch.updatedAt,
    startedAt: patch.startedAt !== undefined ? patch.startedAt : row.startedAt,
    endedAt: patch.endedAt !== undefined ? patch.endedAt : row.endedAt,
    failedTask: err === undefined ? row.failedTask : err === null ? null : err.failedTask,
    errorType: err === undefined ? row.errorType : err === null ? null : err.errorType,
    errorMessage: err === undefined ? row.errorMessage : err === null ? null : err.errorMessage,
    errorClass: err === undefined ? row.errorClass : err === null ? null : err.errorClass,
    // (absent and `null` are the same to every store: "not known")
    repeat: row.repeat ?? null,
    suiteId: row.suiteId ?? null,
    experimentId: row.experimentId ?? null,
    localKey: row.localKey ?? null
  }
  return out
}

/** Whether every row of `pipelines` is the pipeline `pipelineId`'s (no closure per call). */
const allOf = (pipelines: ReadonlyArray<PipelineFields>, pipelineId: string): boolean => {
  for (let i = 0; i < pipelines.length; i++) if (pipelines[i]!.pipelineId !== pipelineId) return false
  return true
}

/** Whether no unit of `units` patches its pipeline row itself. */
const nonePatch = (units: ReadonlyArray<CheckpointUnit>): boolean => {
  for (let i = 0; i < units.length; i++) if (units[i]!.pipeline !== undefined) return false
  return true
}

/**
 * At most this many checkpoints of consecutive synchronous tasks wait for one commit.
 *
 * @internal
 */
export const MAX_UNCOMMITTED = 64

/**
 * `unit` carrying what `u` holds uncommitted before it (then `u` is empty).
 *
 * @internal
 */
export const withUncommitted = (u: Uncommitted, unit: CheckpointUnit): CheckpointUnit => {
  if (u.admission === undefined && u.units.length === 0 && u.patch === undefined) return unit
  let patch = u.patch === undefined
    ? unit.pipeline
    : unit.pipeline === undefined
    ? u.patch
    : mergePatch(u.patch, unit.pipeline)
  let admission = u.admission
  // the row is admitted in this same commit: written as the patch leaves it (no UPDATE),
  // unless an earlier unit patches it itself (a controlled step keeps its own patch, which
  // carries its traversal state): then the patches apply in order after the INSERT
  if (
    admission !== undefined && patch !== undefined && allOf(admission.pipelines, unit.pipelineId) && nonePatch(u.units)
  ) {
    const rows = admission.pipelines
    const folded: Array<PipelineFields> = new Array(rows.length)
    for (let i = 0; i < rows.length; i++) folded[i] = foldPatch(rows[i]!, patch)
    admission = { pipelines: folded, seeds: admission.seeds, traversals: admission.traversals }
    patch = undefined
  }
  const out: AllFields<CheckpointUnit> = {
    pipelineId: unit.pipelineId,
    artifact: unit.artifact,
    task: unit.task,
    pipeline: patch,
    attempts: unit.attempts,
    events: unit.events,
    traversal: unit.traversal,
    admission,
    before: u.units.length === 0 ? undefined : u.units
  }
  u.admission = undefined
  u.units = []
  u.patch = undefined
  return out
}

/**
 * Whether `u` holds anything uncommitted.
 *
 * @internal
 */
export const hasUncommitted = (u: Uncommitted): boolean => u.admission !== undefined || u.units.length > 0 || u.patch !== undefined

/**
 * Whether `task` runs synchronously (built by `Task.sync` from a function, `run` unchanged).
 *
 * @internal
 */
export const isSyncTask = (task: Task.Any | undefined): boolean => task !== undefined && isSyncRun(task.run)

/**
 * What a pipeline fiber reads from its run.
 *
 * - `slots`: the worker slots (`concurrency`);
 * - `clock`: the run's clock, read synchronously on the hot path (`TestClock` in tests);
 * - `registryFor`: the codec registry of a task (its output Schema registered);
 * - `whileParked`: runs an effect as parked (a stop interrupts it at once: waiting pipelines
 *   are not in flight and get no grace);
 * - `onTerminal`: called once the pipeline's terminal state is durable, with its final value
 *   on success.
 *
 * @internal
 */
export interface PipelineEnv {
  readonly state: RunState
  readonly store: StoreService
  readonly pools: Context.Tag.Service<Pools>
  readonly shared: AttemptShared
  /**
   * What the attempts of a suite member's pipelines share: `shared` with the member's view of
   * the pools (`Pools.aliased` over its pool aliases), made once per member.
   */
  readonly memberShared: (member: MemberFacts) => AttemptShared
  readonly slots: SlotGate
  readonly clock: Clock.Clock
  readonly registryFor: (task: Task.Any) => CodecRegistry
  readonly whileParked: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  readonly onTerminal: (pipelineId: PipelineId, finalValue: Option.Option<unknown>) => Effect.Effect<void, StoreUnavailable>
  /**
   * Whether each attempt gets its span `assay.attempt`: when the run's tracer is not Effect's
   * default one (which keeps nothing). A span that becomes the parent of the task's effects
   * costs about 30 µs of CPU per attempt here (two copies of the fiber's refs to provide it,
   * random span ids, the clock in nanoseconds), 40 % of a trivial run's time measured by
   * bench/runner.ts, so it is made only when something records it.
   */
  readonly traceAttempts: boolean
  /** The run's start gate (`RunHooks.startGate`), if any: see {@link gateStart}. */
  readonly startGate?: ((spec: AnySpec) => Effect.Effect<string | undefined>) | undefined
  /** The call cache (see `cache.ts`); `undefined`: no task is ever served from a cache. */
  readonly cache?: CacheEnv | undefined
  /**
   * Wraps each attempt's body (inside its timeout and budget; its scope included, except on
   * the fast path of an Effect task with nothing else around its body, where the attempt's
   * scope closes with the guard's exit right after it): the cluster engine fails an attempt
   * whose global pool lease is lost mid-call (`cluster/task.ts`). Absent in the embedded runner.
   */
  readonly guardBody?: (<A, E>(body: Effect.Effect<A, E>) => Effect.Effect<A, unknown>) | undefined
  /**
   * A controlled pipeline run by the cluster engine (`cluster/controlled.ts`), whose executor
   * may turn out to be a stale one (its claim lost while it was frozen or cut off): its
   * terminal failure is version-checked like every other traversal write (the state is
   * written back unchanged), and an interrupted pipeline's row is left as it is (its next
   * owner continues from the stored traversal; an `interrupted` mark, which carries no
   * version check, could land after the new owner's steps). Absent in the embedded runner.
   */
  readonly fencedTraversal?: boolean | undefined
  /**
   * Asked by a controlled pipeline before each entry (its task boundary): a reason (its run or
   * the pipeline was cancelled for the cluster's runners: `cluster/cancelMarks.ts`) ends the
   * pipeline there, its row `interrupted` with that reason as an interrupted run's row is
   * written (the pending entry and the traversal kept as committed: a resume continues the same
   * visit), and the pipeline's fiber ends without a verdict. Absent in the embedded runner.
   */
  readonly cancelled?: (() => string | undefined) | undefined
}

/**
 * Outputs of at least this many encoded bytes (256 KiB) keep their worker slot until their
 * checkpoint commits: the outputs waiting for the store are then bounded by `concurrency`
 * (not by `maxAdmitted`), which keeps a run's memory bounded by bytes (issue 19: 4 MB outputs
 * at concurrency 20 held 80 of them).
 *
 * @internal
 */
export const BIG_OUTPUT_BYTES = 256 * 1024

const noLeases: ReadonlyArray<string> = []

/**
 * Whether an attempt of `task` goes through the call cache in this run: the task is cacheable,
 * or a fanout with a cacheable branch (fix18e); such an attempt takes the general path.
 */
const cachedIn = (env: PipelineEnv, task: Task.Any): boolean =>
  env.cache !== undefined && (task.options.cache !== null || hasCachedBranch(task))

/**
 * What one attempt ended with: its exit (a success's value, or the cause), the leases it
 * took and when it started (epoch ms).
 *
 * @internal
 */
export interface AttemptResult {
  exit: Exit.Exit<unknown, unknown>
  readonly leaseIds: ReadonlyArray<string>
  readonly startedAt: number
  /** What the call cache did (absent: the task is not cached in this run). */
  readonly cache?: CacheNote | undefined
  /** The attempt's token and cost accounting (absent: no lease report carried usage). */
  readonly usage?: AttemptUsage | undefined
  /**
   * The successful output's encoded form when the attempt already made it with the task's
   * registry (a cache hit's stored bytes, a cache miss's bytes just stored): the checkpoint
   * writes these instead of encoding the output again (absent: it encodes the output).
   */
  readonly encoded?: Encoded | undefined
}

type TaskOutcome = { readonly _tag: "Ok"; readonly value: unknown } | { readonly _tag: "Failed" }

/**
 * Runs `spec` from `start` to a terminal state. On interruption (a stop, or the run's scope
 * closing) its row ends `interrupted` at its last checkpoint; whatever step it ends in, it
 * gives back its worker slot and its in-flight count.
 *
 * @internal
 */
export const run = (env: PipelineEnv, spec: AnySpec, start: Start): Effect.Effect<void, StoreUnavailable> => {
  const { clock, slots, state, store } = env
  const runId = state.runId
  const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
  const nTasks = tasks.length
  const pipelineId = spec.pipelineId
  let cursor = start.cursor
  let currentTask: Rows.CurrentTask | undefined = undefined
  // a pipeline begun by `runNow` continues with its slot and what it left uncommitted
  let carried = start.carried
  const holder: SlotHold = carried === undefined ? emptyHold() : carried.holder
  const uncommitted = carried === undefined ? noneUncommitted() : carried.uncommitted
  // the cursor covers the uncommitted checkpoints: the interrupted row commits them first
  const markInterrupted = Effect.suspend(() => {
    const now = clock.unsafeCurrentTimeMillis()
    state.counters.interrupted++
    return store.checkpoint(
      withUncommitted(
        uncommitted,
        Rows.interruptedUnit(pipelineId, runId, cursor, currentTask, state.stopReason, now, holder.began)
      )
    )
  })
  const carryUncommitted = (unit: CheckpointUnit) => withUncommitted(uncommitted, unit)
  /** Commits what is uncommitted on its own (before a failed attempt's rows). */
  const commitUncommitted = Effect.suspend(() =>
    hasUncommitted(uncommitted)
      ? Effect.uninterruptible(store.checkpoint(withUncommitted(uncommitted, { pipelineId })))
      : Effect.void
  )

  const body = Effect.gen(function*() {
    let input = start.input
    const admission = start.admission
    if (admission !== undefined) {
      // A first task that runs synchronously: the row rides in its checkpoint (one commit
      // instead of two); a start gate that skips the pipeline writes it with the skip (see
      // `gateStart`). Otherwise (or with events to record after it) it is written now.
      if (admission.events.length === 0 && isSyncTask(tasks[cursor])) {
        uncommitted.admission = admission.write
      } else {
        yield* writeAdmission(store, admission)
      }
    }
    if (env.startGate !== undefined && (yield* gateStart(env, spec, holder, cursor, carryUncommitted))) return
    let finalValue: unknown = input
    while (cursor < nTasks) {
      // a turn of the event loop after a slice of synchronous work (see `slice.ts`)
      if (state.slice.due()) yield* state.slice.turn
      // (a carried attempt has run: it is recorded whatever a stop says, as it would have been)
      if (state.stopping && (carried === undefined || carried.first === undefined)) return yield* Effect.interrupt
      const seq = cursor
      const outcome = yield* runTask(tasks[seq]!, seq, input)
      if (outcome._tag === "Failed") {
        state.counters.failed++
        yield* env.onTerminal(pipelineId, Option.none())
        return
      }
      input = outcome.value
      finalValue = outcome.value
      cursor = seq + 1
    }
    state.counters.succeeded++
    yield* env.onTerminal(pipelineId, Option.some(finalValue))
  })

  // ---- one task: attempts until success or a declined retry ---------------------------------
  // A generator delegated to with `yield*` from `body`, not an Effect of its own: a task costs
  // no fiber frames of its own, no span or call-site trace (the attempt's span is enough), and
  // a synchronous task whose checkpoint waits for the next one (see `Uncommitted`) runs without
  // a single Effect step.
  function* runTask(
    task: Task.Any,
    seq: number,
    input: unknown
  ): Generator<YieldWrap<Effect.Effect<unknown, StoreUnavailable>>, TaskOutcome, unknown> {
    // The task row's start is when its first attempt actually started (not when the
    // pipeline began waiting for a worker slot).
    const carry = carried
    carried = undefined
    let taskStarted = carry === undefined ? clock.unsafeCurrentTimeMillis() : carry.taskStartedAt
    const current: Rows.CurrentTask = {
      pipelineId,
      runId,
      taskRunId: `${pipelineId}:${seq}:${runId}:${taskStarted}`,
      taskName: task.name,
      seq,
      startedAt: taskStarted,
      attempt: 0,
      committed: 0,
      recorded: 0
    }
    currentTask = current
    let attempt = 0
    // Every lease the task used across its attempts, for the task row (made at its first lease).
    let taskLeaseIds: Array<string> | undefined
    while (true) {
      attempt++
      current.attempt = attempt
      // the first attempt `runNow` ran before it handed over (the slot still held)
      const ran = attempt === 1 && carry !== undefined ? carry.first : undefined
      if (ran === undefined) {
        // not begun until its body begins (see `SlotHold.began`): an interruption before then
        // cut no attempt of this task short
        holder.began = -1
        // Wait for a worker slot (parked: a stop interrupts the wait), then run the attempt
        // holding it (not parked: a stop gives it the grace period).
        if (!holder.holding && !slots.tryTake(holder)) yield* slots.take(holder) // (held already: the start gate's slot)
      }
      // a synchronous body evaluated at once (no Effect per step) when nothing wraps it
      const now = ran !== undefined ? ran : runAttemptNow(env, spec, task, seq, attempt, input, holder)
      const result = now === undefined
        ? yield* runAttempt(env, spec, task, seq, attempt, input, holder, attempt === 1 ? undefined : taskStarted)
        : Effect.isEffect(now)
        ? yield* now
        : now
      // A control directive from a pipeline without `control` is refused (fatal, not encoded).
      if (result.exit._tag === "Success" && isHandoff(result.exit.value)) {
        result.exit = Exit.fail(refuseDirective(spec, seq, result.exit.value))
      }
      // A big output keeps its worker slot until its checkpoint has committed (see
      // BIG_OUTPUT_BYTES); a failure keeps it until its decision is made (see
      // `State.decideFailure`). Every exit gives the slot back (the fiber's `ensuring`).
      const encoded = result.exit._tag === "Success"
        ? (result.encoded !== undefined ? Either.right(result.encoded) : env.registryFor(task).dump(result.exit.value))
        : undefined
      const holdSlot = encoded !== undefined && Either.isRight(encoded) &&
        encoded.right.data.byteLength >= BIG_OUTPUT_BYTES
      if (!holdSlot && encoded !== undefined && Either.isRight(encoded)) slots.release(holder)
      const ended = clock.unsafeCurrentTimeMillis()
      if (attempt === 1) {
        taskStarted = result.startedAt
        current.startedAt = taskStarted
      }
      if (result.leaseIds.length > 0) (taskLeaseIds ??= []).push(...result.leaseIds)
      if (result.exit._tag === "Success" && encoded !== undefined) {
        const value = result.exit.value
        if (Either.isLeft(encoded)) {
          result.exit = Exit.fail(codecErrorOf(encoded.left, `the output of task ${task.name}`, value))
        } else {
          const enc = encoded.right
          countNote(state.cache, result.cache)
          const succeeded = succeededAs(attempt, result.cache)
          const attemptRow = Rows.succeededAttemptRow(current, attempt, succeeded, result, ended)
          const unit = Rows.succeededUnit(
            current,
            { typeName: enc.typeName, codec: enc.codec, digest: digest(enc.data), data: enc.data },
            seq === nTasks - 1,
            attempt,
            taskStarted,
            ended,
            taskLeaseIds ?? noLeases,
            attemptRow
          )
          // A synchronous task followed by a synchronous task (first attempt, small output):
          // the next one runs at once and the two checkpoints commit together (see
          // `Uncommitted`); the last task, or any other, commits now.
          if (
            seq < nTasks - 1 && !holdSlot && current.committed === 0 && uncommitted.units.length < MAX_UNCOMMITTED &&
            isSyncRun(task.run) && isSyncTask(tasks[seq + 1])
          ) {
            defer(uncommitted, unit)
            currentTask = undefined
            return { _tag: "Ok" as const, value }
          }
          // Earlier failed attempts went to the write-behind buffer: make them durable
          // first, so attempt ids keep the order the attempts ran in.
          if (current.committed > 0) yield* store.flush
          yield* Effect.uninterruptible(store.checkpoint(withUncommitted(uncommitted, unit)))
          if (holdSlot) slots.release(holder)
          currentTask = undefined
          return { _tag: "Ok" as const, value }
        }
      }
      // Failure: classify and decide, still holding the worker slot; a terminal failure is
      // counted before the slot goes back (a failure budget then starts nothing more); what
      // earlier synchronous tasks left uncommitted is committed before the failed attempt's
      // rows (which come after their pipeline's), then persist.
      const { decision, error, fields, outcome } = yield* judgeFailure(
        task,
        (result.exit as Exit.Failure<unknown, unknown>).cause,
        attempt,
        ended - taskStarted,
        poolsOf(env, spec)
      )
      const terminal = !(decision.retry || (state.stopping && error === undefined))
      if (terminal) State.decideFailure(state, spec)
      slots.release(holder)
      yield* commitUncommitted
      countNote(state.cache, result.cache)
      const attemptRow = Rows.attemptRow(
        current,
        attempt,
        outcome,
        fields,
        failedWithNote(decision, result.cache),
        result.leaseIds,
        result.startedAt,
        ended,
        result.usage
      )
      if (!terminal && decision.retry && !state.stopping) {
        yield* store.recordAttempt(attemptRow)
        // a throttled attempt is durable before the retry (the pool wrote its window already):
        // a crash right after a 429 must not hide it from a resume (costs a flush per 429 only)
        if (fields.errorClass === "rate_limit") yield* store.flush
        current.committed++
        current.recorded = attempt
        state.counters.retries++
        // Wait out the delay holding no worker; a stop ends the wait.
        state.delayed++
        yield* env.whileParked(Effect.sleep(Duration.millis(decision.delayMs))).pipe(
          Effect.ensuring(Effect.sync(() => state.delayed--))
        )
        continue
      }
      // A stop cut this task short: a failure the policy would have retried (or an attempt
      // cancelled by the stop itself) is not the task's verdict. The attempt is recorded
      // with the reason `stopped`, and the pipeline ends `interrupted` (resumable: resume
      // makes the next attempt), never `failed`.
      if (!terminal) {
        yield* store.recordAttempt({
          ...attemptRow,
          decision: { ...decision, retry: false, reason: "stopped", delayMs: 0 }
        })
        current.committed++
        current.recorded = attempt
        if (error !== undefined) current.stoppedAfter = `${fields.errorClass}: ${fields.errorMessage}`
        return yield* Effect.interrupt
      }
      // Terminal failure of the task, hence of the pipeline.
      if (current.committed > 0) yield* store.flush
      yield* Effect.uninterruptible(store.checkpoint(
        Rows.failedUnit(current, attempt, taskStarted, ended, fields, taskLeaseIds ?? noLeases, attemptRow, decision.reason)
      ))
      currentTask = undefined
      return { _tag: "Failed" as const }
    }
  }

  return endOfFiber(env, pipelineId, holder, markInterrupted)(body)
}

/**
 * What {@link runNow} did: `Commit`: every task succeeded, `unit` is the pipeline's one
 * checkpoint (its admission, every task's rows and its terminal row, as the general path's
 * last commit carries them) and `finalValue` the last task's output; `Continue`: it ran up to
 * a task whose first attempt needs the general path (a failure, a directive, a big or
 * unencodable output, leases to reclaim): `start` hands the pipeline to its fiber there.
 *
 * @internal
 */
export type NowOutcome =
  | { readonly _tag: "Commit"; readonly unit: CheckpointUnit; readonly finalValue: unknown }
  | { readonly _tag: "Continue"; readonly start: Start }

/**
 * Whether {@link runNow} may run `spec` from `start`: a plain pipeline (no `control`) to be
 * admitted now (its admission with no events to record: a claimed pipeline's `pipeline.abandoned`
 * event among them), no start gate, no attempt spans, and every task from the cursor a `Task.sync` or an Effect task
 * (`Task.make`) that nothing wraps (no timeout, no `retry.maxTotal`, not an evaluator, not
 * cached in this run), few enough for one commit (see {@link MAX_UNCOMMITTED}).
 *
 * @internal
 */
export const canRunNow = (env: PipelineEnv, spec: AnySpec, start: Start): boolean => {
  const admission = start.admission
  if (
    admission === undefined || admission.events.length > 0 || start.carried !== undefined ||
    env.startGate !== undefined || env.traceAttempts || controlOf(spec.template) !== undefined
  ) return false
  const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
  if (start.cursor >= tasks.length || tasks.length - start.cursor > MAX_UNCOMMITTED) return false
  for (let i = start.cursor; i < tasks.length; i++) {
    const task = tasks[i]!
    const options = task.options
    if (
      (syncBodyOf(task.run) === undefined && !task.scoped) || options.timeout !== null ||
      options.retry.maxTotal !== undefined ||
      options.evaluator || cachedIn(env, task)
    ) return false
  }
  return true
}

/**
 * Runs an admitted plain pipeline whose tasks are all synchronous or Effect tasks (see
 * {@link canRunNow}) at once, on the caller's fiber, without a fiber of its own: the same
 * attempts, rows and checkpoint as {@link run} would make (its `runTask` defers every
 * synchronous task's checkpoint to the next one's, so the general path also commits such a
 * pipeline once, its admission with it). `undefined`: nothing ran (not eligible, or no worker
 * slot is free now): use {@link run}. The caller commits a `Commit`'s unit (uninterruptibly,
 * as the general path's last checkpoint is) and then counts the pipeline succeeded.
 *
 * `Task.sync` attempts are evaluated directly ({@link runAttemptNow}), and so are Effect tasks'
 * (`Task.make`) without a fiber ({@link runEffectAttemptNow}, `evalNow.ts`). An attempt that
 * ends at once (`ctx.acquire()` of a free slot, then a pure map) is treated as a synchronous
 * task's, its checkpoint deferred to the next one's. An Effect attempt that reaches a step
 * needing a fiber goes on on a fiber of its own, started at once; when that fiber does not end
 * at once (the attempt waits: a lease, I/O), the pipeline is handed to its own fiber, which
 * first commits what the earlier tasks left uncommitted (the general path commits an Effect
 * task's checkpoint when it ends), then awaits that attempt (interrupting it if the pipeline
 * fiber is interrupted, so nothing runs twice and a stop reaches it). An Effect task that
 * {@link runEffectAttemptNow} does not take runs, with the tasks after it, on one fiber (see
 * `NowRun.onFiber`), each attempt the general path's own ({@link runAttempt}).
 *
 * @internal
 */
export const runNow = (env: PipelineEnv, spec: AnySpec, start: Start): NowOutcome | undefined => {
  if (!canRunNow(env, spec, start)) return undefined
  const { slots, state } = env
  // one worker slot for the whole pipeline (nothing else runs between its tasks)
  const holder = emptyHold()
  if (state.stopping || !slots.tryTake(holder)) return undefined
  const uncommitted = noneUncommitted()
  uncommitted.admission = start.admission!.write
  return new NowRun(env, spec, holder, uncommitted, start.cursor, start.input).run()
}

/** The value of a {@link NowRun} fiber that ended at once (never read: see `NowRun.outcome`). */
const unread = undefined as unknown as AttemptResult

/**
 * One pipeline's run by {@link runNow}: where it is (`seq`, its `input`, when that task began),
 * what it left uncommitted, and the fiber its Effect tasks' attempts run on.
 */
class NowRun {
  seq: number
  input: unknown
  taskStartedAt = 0
  /** What the run ended with when its attempts' fiber ended at once. */
  outcome: NowOutcome | undefined = undefined
  /**
   * The attempts' fiber did not end at once: the pipeline's fiber took it over at `seq`, and
   * the attempts' fiber ends with that attempt's result (no further attempt, no bookkeeping).
   */
  handedOver = false
  readonly tasks: ReadonlyArray<Task.Any>
  constructor(
    readonly env: PipelineEnv,
    readonly spec: AnySpec,
    readonly holder: SlotHold,
    readonly uncommitted: Uncommitted,
    cursor: number,
    input: unknown
  ) {
    this.seq = cursor
    this.input = input
    this.tasks = spec.template.tasks as ReadonlyArray<Task.Any>
    this.begin()
  }

  /** The task at `seq` begins: its task run id's time; no attempt of it has begun yet. */
  begin(): void {
    this.taskStartedAt = this.env.clock.unsafeCurrentTimeMillis()
    this.holder.began = -1
  }

  /**
   * Runs the attempts at once: `Task.sync` ones directly, Effect ones evaluated without a fiber
   * ({@link runEffectAttemptNow}); an Effect attempt that goes on (a wait) continues on a fiber
   * of its own, and the pipeline is handed over with it unless that fiber ended at once. An
   * Effect task the evaluation does not take (see {@link runEffectAttemptNow}) runs with the
   * rest on one fiber ({@link onFiber}).
   */
  run(): NowOutcome {
    const { env, spec, holder, tasks } = this
    let runtime: Runtime.Runtime<never> | undefined = undefined
    let holds: Holds = "fiber"
    const first = this.seq
    while (true) {
      // a slice of synchronous work is over: the pipeline's fiber goes on from here, after a
      // turn of the event loop (see `slice.ts`)
      if (this.seq > first && env.state.slice.due()) return this.handOver(undefined)
      const task = tasks[this.seq]!
      let ran: AttemptResult | Effect.Effect<AttemptResult> | undefined
      if (syncBodyOf(task.run) !== undefined) {
        ran = runAttemptNow(env, spec, task, this.seq, 1, this.input, holder)
      } else {
        // (outside a fiber: nothing ran, the pipeline's fiber runs the attempt)
        if (runtime === undefined) {
          runtime = runtimeNow()
          if (runtime === undefined) return this.handOver(undefined)
          holds = holdsIn(runtime.context)
        }
        const now = runEffectAttemptNow(env, spec, task, this.seq, 1, this.input, holder, runtime.context, holds)
        if (now === undefined) return this.onFiber()
        if (now instanceof AttemptGoesOn) {
          // (`runFork` starts the fiber on this call stack: an attempt that never waits has
          // ended when it returns)
          const fiber = Runtime.runFork(runtime)(now.effect)
          const exit = fiber.unsafePoll()
          if (exit === null) {
            return this.handOver(new AttemptRunning(fiber).awaitAfter(env, spec.pipelineId, this.uncommitted))
          }
          // (an attempt's fiber fails only interrupted: the run stopping, as `runAttempt` ends then)
          if (Exit.isFailure(exit)) return this.handOver(exit)
          ran = exit.value
        } else {
          ran = now
        }
      }
      const out = this.settle(ran)
      if (out !== undefined) return out
    }
  }

  /**
   * Runs the attempts from `seq` on a fiber forked from the calling fiber's runtime (the run's
   * context, as a pipeline fiber has it), started now: its outcome when it ended at once; when
   * it goes on (a wait: its fiber keeps running, a lease wait parked as the general path parks
   * it, so a stop interrupts it), the pipeline handed over at the attempt it is in.
   */
  onFiber(): NowOutcome {
    const runtime = runtimeNow()
    // (outside a fiber: nothing ran, the pipeline's fiber runs the attempt)
    if (runtime === undefined) return this.handOver(undefined)
    // (`runFork` starts the fiber on this call stack: attempts that never suspend have ended
    // when it returns)
    const fiber = Runtime.runFork(runtime)(Effect.suspend(() => this.drive()))
    const exit = fiber.unsafePoll()
    if (exit === null) {
      this.handedOver = true
      return this.handOver(new AttemptRunning(fiber).awaitAfter(this.env, this.spec.pipelineId, this.uncommitted))
    }
    // (an attempt's fiber fails only interrupted: the run stopping, as `runAttempt` ends then)
    if (Exit.isFailure(exit)) return this.handOver(exit)
    return this.outcome!
  }

  /**
   * The attempts from `seq` on, on the attempts' fiber: each attempt's result settled at once
   * ({@link settle}) while the fiber has not been handed over; once it has, the attempt it is
   * in (or the next one, when the fiber yielded between them) is its last, its result the
   * fiber's value.
   */
  drive(): Effect.Effect<AttemptResult> {
    const { env, spec, holder, tasks } = this
    while (true) {
      const task = tasks[this.seq]!
      if (this.handedOver || syncBodyOf(task.run) === undefined) {
        return Effect.flatMap(runAttempt(env, spec, task, this.seq, 1, this.input, holder, undefined), (result) => {
          if (this.handedOver) return Effect.succeed(result)
          const out = this.settle(result)
          if (out === undefined) return Effect.suspend(() => this.drive())
          this.outcome = out
          return Effect.succeed(unread)
        })
      }
      const out = this.settle(runAttemptNow(env, spec, task, this.seq, 1, this.input, holder))
      if (out !== undefined) {
        this.outcome = out
        return Effect.succeed(unread)
      }
    }
  }

  /** The pipeline handed to its fiber at `seq`, with that task's first attempt (see {@link Carried}). */
  handOver(first: AttemptResult | Effect.Effect<AttemptResult, StoreUnavailable> | undefined): NowOutcome {
    return {
      _tag: "Continue",
      start: {
        cursor: this.seq,
        input: this.input,
        carried: { uncommitted: this.uncommitted, holder: this.holder, taskStartedAt: this.taskStartedAt, first }
      }
    }
  }

  /**
   * The first attempt of the task at `seq` ended with `ran`: when it succeeded with an output
   * small enough and encodable, its rows are deferred and the next task begins (`undefined`),
   * or, for the last task, the pipeline's one checkpoint is ready (`Commit`); otherwise
   * (a failure, a directive, a big or unencodable output, leases to reclaim, nothing run) the
   * pipeline is handed over with it.
   */
  settle(ran: AttemptResult | Effect.Effect<AttemptResult> | undefined): NowOutcome | undefined {
    if (ran === undefined || Effect.isEffect(ran)) return this.handOver(ran)
    const exit = ran.exit
    if (exit._tag !== "Success" || isHandoff(exit.value)) return this.handOver(ran)
    const { env, tasks, seq } = this
    const task = tasks[seq]!
    const encoded = ran.encoded !== undefined ? Either.right(ran.encoded) : env.registryFor(task).dump(exit.value)
    if (Either.isLeft(encoded) || encoded.right.data.byteLength >= BIG_OUTPUT_BYTES) return this.handOver(ran)
    const enc = encoded.right
    const pipelineId = this.spec.pipelineId
    const runId = env.state.runId
    const nTasks = tasks.length
    // as `run`'s `runTask` builds them for a first attempt that succeeded (no cache note)
    const ended = env.clock.unsafeCurrentTimeMillis()
    const current: Rows.CurrentTask = {
      pipelineId,
      runId,
      taskRunId: `${pipelineId}:${seq}:${runId}:${this.taskStartedAt}`,
      taskName: task.name,
      seq,
      startedAt: ran.startedAt,
      attempt: 1,
      committed: 0,
      recorded: 0
    }
    const attemptRow = Rows.succeededAttemptRow(current, 1, succeededAs(1, undefined), ran, ended)
    const unit = Rows.succeededUnit(
      current,
      { typeName: enc.typeName, codec: enc.codec, digest: digest(enc.data), data: enc.data },
      seq === nTasks - 1,
      1,
      ran.startedAt,
      ended,
      // (a first attempt: the task's leases are its leases, as `runTask` gathers them)
      ran.leaseIds,
      attemptRow
    )
    if (seq < nTasks - 1) {
      defer(this.uncommitted, unit)
      this.input = exit.value
      this.seq = seq + 1
      this.begin()
      return undefined
    }
    env.slots.release(this.holder)
    return { _tag: "Commit", unit: withUncommitted(this.uncommitted, unit), finalValue: exit.value }
  }
}

/**
 * The run's start gate for an admitted pipeline about to run its first attempt of this run
 * (`env.startGate`, see `RunHooks.startGate`): waits for a worker slot as that attempt would,
 * then asks the gate. Started: returns `false`, the slot still held for the first attempt.
 * Skipped: the slot goes back, the row returns to `pending` at `cursor` (not failed, not run:
 * a later admission resumes it) with a `pipeline.skipped` event naming the reason; returns
 * `true`. `carry` adds what the fiber holds uncommitted to that checkpoint: an admission that
 * was to ride the first task's checkpoint is then written in the skip's commit (the row
 * inserted as `pending`), so a skipped pipeline always has its row, and a started one pays no
 * commit of its own for its admission.
 *
 * @internal
 */
export const gateStart = (
  env: PipelineEnv,
  spec: AnySpec,
  holder: SlotHold,
  cursor: number,
  carry: (unit: CheckpointUnit) => CheckpointUnit
): Effect.Effect<boolean, StoreUnavailable> =>
  // the gate is asked once the slot is held (a gate that reads a count must not be built earlier)
  Effect.flatMap(Effect.zipRight(env.slots.take(holder), Effect.suspend(() => env.startGate!(spec))), (reason) => {
    if (reason === undefined) return Effect.succeed(false)
    env.slots.release(holder)
    const now = env.clock.unsafeCurrentTimeMillis()
    const pipelineId = spec.pipelineId
    return Effect.as(
      Effect.uninterruptible(env.store.checkpoint(carry({
        pipelineId,
        pipeline: { state: "pending", nTasksDone: cursor, startedAt: null, endedAt: null, updatedAt: now },
        events: [{ kind: "pipeline.skipped", pipelineId, runId: env.state.runId, data: { reason, cursor }, ts: now }]
      }))),
      true
    )
  })

/**
 * The end of a pipeline fiber, plain or controlled: on interruption its row is marked
 * interrupted (`markInterrupted`, uninterruptible; a store failure is logged), and whatever
 * step it ended in, it gives back the worker slot and the in-flight count `holder` holds.
 *
 * @internal
 */
export const endOfFiber = (
  env: PipelineEnv,
  pipelineId: PipelineId,
  holder: SlotHold,
  markInterrupted: Effect.Effect<void, StoreUnavailable>
) =>
<A>(body: Effect.Effect<A, StoreUnavailable>): Effect.Effect<A, StoreUnavailable> => {
  const giveBack = Effect.sync(() => {
    if (holder.inAttempt) {
      holder.inAttempt = false
      env.state.inFlight--
    }
    env.slots.release(holder)
  })
  // one handler for both (`Effect.onInterrupt` then `Effect.ensuring`, in that order): an
  // interrupted pipeline is marked, and the slot goes back whatever the marking did
  return Effect.onExit(body, (exit) =>
    Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)
      ? Effect.ensuring(
        markInterrupted.pipe(
          Effect.catchAll((e) =>
            Effect.logError(`could not mark pipeline ${pipelineId} interrupted: ${e.message}`).pipe(
              Effect.annotateLogs({ runId: env.state.runId, pipelineId })
            )
          )
        ),
        giveBack
      )
      : giveBack)
}

/**
 * The fatal `HandoffRefused` for a directive that `spec`'s declaration does not allow (the
 * message names the refused edge, or says the pipeline declares no control).
 *
 * @internal
 */
export const refuseDirective = (spec: AnySpec, seq: number, directive: Handoff): HandoffRefused => {
  const task = spec.template.tasks[seq]!.name
  const checked = Control.check(controlOf(spec.template), spec.template.nTasks, seq, directive)
  return new HandoffRefused({
    message: Either.isLeft(checked) ? checked.left : `the task at seq ${seq} returned ${directive.operation}`,
    task,
    seq
  })
}

/**
 * The resolved `control` declaration of a template (`undefined` for a plain pipeline).
 *
 * @internal
 */
export const controlOf = (template: Pipeline.AnyTemplate): Control.ResolvedControl | undefined => template.control

/**
 * The verdict on a failed attempt: its error (`undefined` when it was interrupted), the retry
 * decision, the attempt's outcome and its error columns.
 *
 * @internal
 */
export interface FailureVerdict {
  readonly error: unknown
  readonly decision: RetryPolicy.RetryDecision
  readonly outcome: AttemptOutcome
  readonly fields: Rows.ErrorColumns
}

/**
 * Classifies a failed attempt of `task` and decides its retry: an interruption is
 * `cancelled` (never retried), a spent `retry.maxTotal` is `total_budget`, a refused control
 * directive (`HandoffRefused`, `BudgetExceeded`) is `control_refused` without consulting the
 * policy, anything else is the policy's decision (`elapsedMs`: since the task's first attempt
 * started). A refused server delay prefixes the error message with its words.
 *
 * @internal
 */
export const judgeFailure = (
  task: Task.Any,
  cause: Cause.Cause<unknown>,
  attempt: number,
  elapsedMs: number,
  pools?: Context.Tag.Service<Pools>
): Effect.Effect<FailureVerdict> =>
  Effect.gen(function*() {
    const raw = Cause.isInterruptedOnly(cause)
      ? undefined
      : Option.getOrElse(Cause.failureOption(cause), () => Option.getOrUndefined(Cause.dieOption(cause)))
    // a directive thrown or failed with instead of returned: refused with the fix, never retried
    const error = isHandoff(raw)
      ? new HandoffRefused({
        message: `task "${task.name}" threw or failed with a Handoff (${raw.operation}): a directive is` +
          ` returned as the task's value (Effect.succeed(Handoff.${raw.operation}(...)) or return it), never thrown`,
        task: task.name
      })
      : raw
    const errorClass = error === undefined ? "cancelled" : error === raw ? classifyCause(cause) : "fatal"
    const decision: RetryPolicy.RetryDecision = error === undefined
      ? { retry: false, reason: "policy_declined" as const, delayMs: 0, errorClass, attempt }
      : Predicate.isTagged(error, "MaxTotalExceeded")
      ? { retry: false, reason: "total_budget" as const, delayMs: 0, errorClass, attempt }
      : Predicate.isTagged(error, "HandoffRefused") || Predicate.isTagged(error, "BudgetExceeded")
      ? { retry: false, reason: "control_refused" as const, delayMs: 0, errorClass, attempt }
      : yield* Effect.flatMap(
        errorClass === "rate_limit" && pools !== undefined ? servableIn(pools, task.options.resource) : noFigure,
        (elsewhereMs) => RetryPolicy.decide(task.options.retry, error, attempt, elapsedMs, elsewhereMs)
      )
    const outcome: AttemptOutcome = error !== undefined && Predicate.isTagged(error, "TaskTimeout")
      ? "timeout"
      : error === undefined
      ? "cancelled"
      : "failed"
    const fields = error === undefined ? Rows.interruptedColumns() : Rows.errorColumns(error)
    // a refused server delay says so first (the pool's own refusal already does)
    if (
      decision.reason === "server_delay" && decision.message !== undefined &&
      !Predicate.isTagged(error, "ServerDelayRefused")
    ) {
      fields.errorMessage = `${decision.message}: ${fields.errorMessage}`.slice(0, 4000)
    }
    return { error, decision, outcome, fields }
  })

const noFigure: Effect.Effect<number | undefined> = Effect.succeed(undefined)

/**
 * The pools a pipeline's tasks lease from: the run's, or a suite member's view of them under
 * its own names.
 *
 * @internal
 */
export const poolsOf = (env: PipelineEnv, spec: AnySpec): Context.Tag.Service<Pools> => {
  const member = memberOf(spec)
  return member === undefined ? env.shared.pools : env.memberShared(member).pools
}

/**
 * After a rate limit on a task of `pool`: the milliseconds until a resource of the pool can
 * take the retry (0: one can now), read from the pool's state: a resource that is not dead
 * or revoked rejoins at the end of its throttle window, open breaker or cooldown, whichever
 * is last. `undefined` when the pool holds no resource in a throttle window now (the pool did
 * not hear the throttle: the server's Retry-After stands), when every resource is dead or
 * revoked, or when the task names no pool. Whatever the acquisition algorithm, a lease is only
 * handed out from a resource outside such holds, so a retry scheduled for then can be served.
 */
const servableIn = (
  pools: Context.Tag.Service<Pools>,
  pool: string | null | undefined
): Effect.Effect<number | undefined> =>
  pool === null || pool === undefined ? noFigure : Effect.flatMap(Clock.currentTimeMillis, (now) =>
    pools.snapshot(pool).pipe(
      Effect.map((snap) => {
        let throttled = false
        let soonest: number | undefined
        for (const r of snap) {
          if (r.state === "dead" || r.state === "revoked") continue
          if (r.throttledUntil !== undefined && r.throttledUntil > now) throttled = true
          const at = Math.max(
            now,
            r.throttledUntil ?? now,
            r.breakerUntil ?? now,
            r.state === "degraded" ? r.cooldownUntil ?? now : now
          )
          if (soonest === undefined || at < soonest) soonest = at
        }
        return throttled && soonest !== undefined ? soonest - now : undefined
      }),
      Effect.orElseSucceed(() => undefined)
    ))

// ---- one attempt ------------------------------------------------------------------------------

/** What holds a pool up now, in words: throttled keys and open breakers (or undefined). */
const heldUp = (pools: Context.Tag.Service<Pools>, pool: string | null | undefined): Effect.Effect<string | undefined> =>
  pool === null || pool === undefined ? Effect.succeed(undefined) : pools.snapshot(pool).pipe(
    Effect.map((snap) => {
      const parts: Array<string> = []
      for (const r of snap) {
        if (r.throttledUntil !== undefined) {
          parts.push(`${r.id} throttled until ${new Date(r.throttledUntil).toISOString()}`)
        } else if (r.breakerUntil !== undefined) {
          parts.push(`${r.id} breaker open until ${new Date(r.breakerUntil).toISOString()}`)
        }
      }
      return parts.length === 0 ? undefined : `pool "${pool}": ${parts.join(", ")}`
    }),
    Effect.orElseSucceed(() => undefined)
  )

const withinBudget = <A, E, R>(
  pools: Context.Tag.Service<Pools>,
  body: Effect.Effect<A, E, R>,
  task: Task.Any,
  maxTotalMs: number,
  leftMs: number
): Effect.Effect<A, E | MaxTotalExceeded, R> =>
  Effect.flatMap(
    Effect.timeoutTo(body, { duration: Duration.millis(leftMs), onSuccess: Option.some, onTimeout: Option.none }),
    (o) =>
      Option.isSome(o)
        ? Effect.succeed(o.value)
        : Effect.flatMap(heldUp(pools, task.options.resource), (waitingFor) =>
          Effect.fail(
            new MaxTotalExceeded({
              taskName: task.name,
              maxTotalMs,
              errorClass: "timeout",
              ...(waitingFor === undefined ? {} : { waitingFor })
            })
          ))
  )

/**
 * One attempt of `task` (see {@link runBody}) under the call cache when the task is cacheable
 * and the run has a cache: a stored, unexpired output is served at once (no lease, the body
 * does not run, `cache.status: "hit"`); otherwise the body runs and its success is stored as
 * the cache mode says. Never fails: the attempt's exit is in the result.
 *
 * @internal
 */
export const runAttempt = (
  env: PipelineEnv,
  spec: AnySpec,
  task: Task.Any,
  seq: number,
  attempt: number,
  input: unknown,
  slot: SlotHold,
  taskStartedAt: number | undefined,
  visit = 0
): Effect.Effect<AttemptResult> => {
  const cache = env.cache
  // the hot path of an uncached task pays two property reads
  if (cache === undefined || task.options.cache === null) {
    return runBody(env, spec, task, seq, attempt, input, slot, taskStartedAt, visit)
  }
  const member = memberOf(spec)
  const shared = member === undefined ? env.shared : env.memberShared(member)
  const registry = env.registryFor(task)
  return Effect.flatMap(planOf(cache, task, spec, visit, input, shared.pools, registry, seq), (plan) => {
    if (plan === undefined) return runBody(env, spec, task, seq, attempt, input, slot, taskStartedAt, visit)
    const now = () => env.clock.unsafeCurrentTimeMillis()
    return coalesce<AttemptResult>(cache, plan, registry, now, {
      serve: (hit) => {
        if (env.state.stopping) return Effect.interrupt
        const served: AttemptResult = {
          exit: Exit.succeed(hit.value),
          leaseIds: noLeases,
          startedAt: now(),
          cache: hit.note,
          ...(hit.encoded === undefined ? {} : { encoded: hit.encoded })
        }
        const onHit = task.options.onCacheHit
        if (onHit === null) return Effect.succeed(served)
        // what the body does beside returning its output (the judge's metrics), redone; its
        // failure fails the attempt as the body's would
        const pipelineId = spec.pipelineId
        return Effect.map(
          Effect.exit(onHit(hit.value, {
            pipelineId,
            seq,
            visit,
            reportMetric: (name, value, o) =>
              shared.reportMetric(name, value, { ...o, pipelineId: o?.scope === "run" ? null : pipelineId })
          })),
          (exit): AttemptResult => Exit.isSuccess(exit) ? served : { ...served, exit, encoded: undefined }
        )
      },
      lead: (publish) =>
        Effect.flatMap(
          runBody(env, spec, task, seq, attempt, input, slot, taskStartedAt, visit),
          (result) =>
            Effect.map(
              afterRun(cache, plan, task.name, result.exit, registry, now(), result.usage),
              ({ encoded, entry, note, replaced }) => {
                if (entry !== undefined) publish(entry)
                if (note === undefined) return result
                // another answer to this request was stored first: it is this attempt's output
                const exit = replaced === undefined ? result.exit : Exit.succeed(replaced.value)
                return { ...result, exit, cache: note, ...(encoded === undefined ? {} : { encoded }) }
              }
            )
        ),
      // a waiter holds no worker slot while another attempt makes its call; it takes one
      // again (in turn, as any attempt) only to make the call itself
      waiting: Effect.sync(() => env.slots.release(slot)),
      leading: Effect.suspend(() => slot.holding ? Effect.void : env.slots.take(slot))
    })
  })
}

/**
 * One attempt of `task`, holding a worker slot: counted in flight while it runs, in a span
 * `assay.attempt` (pipeline id, task, seq, attempt number), bounded by the task's `timeout`
 * and its `retry.maxTotal` budget; raw leases it leaked are reclaimed (and fail it under
 * `strictLeases`). `visit` is the station's visit (0 without control): it reaches the
 * attempt's context (`ctx.visit`, its seed and lease owner key). Never fails: the attempt's
 * exit is in the result.
 *
 * @internal
 */
const runBody = (
  env: PipelineEnv,
  spec: AnySpec,
  task: Task.Any,
  seq: number,
  attempt: number,
  input: unknown,
  slot: SlotHold,
  taskStartedAt: number | undefined,
  visit = 0
): Effect.Effect<AttemptResult> =>
  Effect.suspend(() => {
    const ctx = beginAttempt(env, spec, task, seq, attempt, visit, slot)
    if (ctx === undefined) return Effect.interrupt
    // a fanout with a cacheable branch: its branches go through the call cache (fix18e)
    if (env.cache !== undefined && hasCachedBranch(task)) {
      const notes = ctx.branchNotes = []
      ctx[BranchCacheId] = branchCache(
        env.cache,
        spec,
        seq,
        visit,
        poolsOf(env, spec),
        env.registryFor,
        () => env.clock.unsafeCurrentTimeMillis(),
        ctx.reportMetric,
        notes
      )
    }
    const startedAt = slot.began
    const timeout = task.options.timeout
    const maxTotal = task.options.retry.maxTotal
    // The common Effect task (nothing wraps its body): the attempt, its scope's close and its
    // end in one uninterruptible region (see `attemptExit`): no span, timeout or budget to
    // put between the body and its exit. A body guard (the cluster's loss guard) goes around
    // the body inside the attempt: its fiber inherits the attempt (its scope and generator),
    // and the attempt's scope closes once the guard ended, with the guard's exit (pg17ac).
    if (task.scoped && timeout === null && maxTotal === undefined && !env.traceAttempts && !task.options.evaluator) {
      // (a `Task.make` body is called as `run` would call it, without its `Effect.suspend`:
      // `attemptExit` calls it inside the attempt and makes a throw a defect, as `suspend` does)
      const direct = effectBodyOf(task.run)
      const call = direct === undefined
        ? () => task.run(input, ctx) as Effect.Effect<unknown, unknown, never>
        : () => direct(input, ctx as never) as Effect.Effect<unknown, unknown, never>
      const guard = env.guardBody
      return attemptExit(
        new AttemptGenerator(ctx),
        guard === undefined ? call : () => guard(call()),
        (exit: Exit.Exit<unknown, unknown>) => attemptEnd(env, task, ctx, exit, startedAt, slot)
      )
    }
    // Sync and promise tasks cannot run a scoped Effect: they get no Scope (opening one costs
    // more than the rest of a trivial attempt). An evaluator runs blind: no variables or member
    // labels in its context, no store, its input redacted (domain/Evaluator.ts).
    const run = task.options.evaluator
      ? Effect.suspend(() => {
        const blind = Evaluator.blind(ctx, input)
        return task.run(blind.input, blind.ctx)
      })
      : Effect.suspend(() => task.run(input, ctx))
    // Effect tasks also get Effect's `Random` seeded with the attempt's seed (`ctx.seed`: the
    // pipeline, seq, attempt and, past visit 0, the visit), so a rerun samples the same values
    // and a retry or a revisit samples anew; the generator is built when the attempt first
    // draws (see `attemptScope.ts`). Sync and promise bodies cannot read it.
    const scoped = task.scoped ? attemptScoped(run, new AttemptGenerator(ctx)) : run
    const body = env.guardBody === undefined ? scoped : env.guardBody(scoped as Effect.Effect<unknown, unknown>)
    const timed = timeout === null
      ? body
      : Effect.timeoutFail(body, {
        duration: timeout,
        onTimeout: () =>
          new TaskTimeout({ taskName: task.name, timeoutMs: Duration.toMillis(timeout), errorClass: "timeout" })
      })
    // retry.maxTotal bounds the task's whole time, a lease wait included: the attempt running
    // when it runs out is interrupted (from the first attempt's start)
    const member = memberOf(spec)
    const budgeted = maxTotal === undefined ? timed : withinBudget(
      (member === undefined ? env.shared : env.memberShared(member)).pools,
      timed,
      task,
      Duration.toMillis(maxTotal),
      Math.max(0, (taskStartedAt ?? startedAt) + Duration.toMillis(maxTotal) - startedAt)
    )
    // The tasks' requirements come from the run's own context, which every pipeline fiber
    // inherits (the run's type carries them).
    // The attempt's span, when a tracer records spans (see `PipelineEnv.traceAttempts`); no
    // stack trace capture (`withSpan` would allocate an `Error` per attempt).
    const provided = env.traceAttempts
      ? Effect.withSpan(budgeted as Effect.Effect<unknown, unknown, never>, "assay.attempt", {
        attributes: { pipelineId: spec.pipelineId, task: task.name, seq, attempt },
        captureStackTrace: false
      })
      : budgeted as Effect.Effect<unknown, unknown, never>
    return Effect.flatMap(Effect.exit(provided), (exit): Effect.Effect<AttemptResult> => {
      const ended = attemptEnd(env, task, ctx, exit, startedAt, slot)
      return Effect.isEffect(ended) ? ended : Effect.succeed(ended)
    })
  })

/**
 * The end of an attempt whose body ended with `exit`: the slot and the in-flight count given
 * back, the result with the attempt's leases and usage; raw leases still held are reclaimed
 * (then an Effect; under `strictLeases` they fail the attempt).
 */
const attemptEnd = (
  env: PipelineEnv,
  task: Task.Any,
  ctx: AttemptContext,
  exit: Exit.Exit<unknown, unknown>,
  startedAt: number,
  slot: SlotHold
): AttemptResult | Effect.Effect<AttemptResult> => {
  // a fanout's branches that went through the call cache: the attempt's one note (fix18e)
  const notes = ctx.branchNotes
  if (notes !== undefined) {
    ctx.branchNotes = undefined
    const cache = combineBranchNotes(notes, ctx.leaseIds !== undefined)
    if (cache !== undefined) {
      const ended = attemptEnd(env, task, ctx, exit, startedAt, slot)
      return Effect.isEffect(ended) ? Effect.map(ended, (r) => ({ ...r, cache })) : { ...ended, cache }
    }
  }
  const state = env.state
  slot.inAttempt = false
  state.inFlight--
  const leaseIds = ctx.leaseIds
  const usage = ctx.usage
  if (!ctx.rawLeases) {
    return usage === undefined
      ? { exit, leaseIds: leaseIds ?? noLeases, startedAt }
      : { exit, leaseIds: leaseIds ?? noLeases, startedAt, usage }
  }
  return Effect.map(env.pools.reclaim(ctx.owner), (leaked) => {
    if (leaked.length > 0) {
      state.counters.leasesLeaked += leaked.length
      if (state.config.strictLeases && Exit.isSuccess(exit)) {
        exit = Exit.fail(new LeaseLeakError({ taskName: task.name, leaseIds: leaked.map((l) => l.leaseId) }))
      }
    }
    return usage === undefined ? { exit, leaseIds: leaseIds ?? noLeases, startedAt } : { exit, leaseIds: leaseIds ?? noLeases, startedAt, usage }
  })
}

/**
 * One attempt of a `Task.sync` task evaluated at once, without an Effect per step, when
 * nothing wraps its body: no timeout, no `retry.maxTotal`, no span, not an evaluator, not
 * served by the call cache; the caller holds a worker slot. The same attempt as
 * {@link runAttempt} (same context, same exit, same bookkeeping): `undefined` when the task does
 * not qualify (or the run is stopping: {@link runAttempt} then interrupts), an Effect only
 * when raw leases must be reclaimed.
 *
 * @internal
 */
export const runAttemptNow = (
  env: PipelineEnv,
  spec: AnySpec,
  task: Task.Any,
  seq: number,
  attempt: number,
  input: unknown,
  slot: SlotHold,
  visit = 0
): AttemptResult | Effect.Effect<AttemptResult> | undefined => {
  const direct = syncBodyOf(task.run)
  if (direct === undefined) return undefined
  const options = task.options
  if (
    env.traceAttempts || options.timeout !== null || options.retry.maxTotal !== undefined || options.evaluator ||
    cachedIn(env, task)
  ) return undefined
  const ctx = beginAttempt(env, spec, task, seq, attempt, visit, slot)
  if (ctx === undefined) return undefined
  const startedAt = slot.began
  return attemptEnd(env, task, ctx, direct(input, ctx as never), startedAt, slot)
}

/**
 * An attempt begins now, holding `slot`: counted in flight, its start (now) on the slot
 * (`slot.began`); its context (a suite member's pipeline sees its pools under its own names:
 * one lookup per attempt, a plain pipeline pays one property read). `undefined` when the run
 * is stopping (nothing begun).
 */
const beginAttempt = (
  env: PipelineEnv,
  spec: AnySpec,
  task: Task.Any,
  seq: number,
  attempt: number,
  visit: number,
  slot: SlotHold
): AttemptContext | undefined => {
  const state = env.state
  if (state.stopping) return undefined
  state.inFlight++
  slot.inAttempt = true
  if (state.inFlight > state.peakInFlight) state.peakInFlight = state.inFlight
  slot.began = env.clock.unsafeCurrentTimeMillis()
  const member = memberOf(spec)
  const shared = member === undefined ? env.shared : env.memberShared(member)
  return new AttemptContext(shared, task, spec.pipelineId, seq, attempt, visit, member)
}

/**
 * An attempt {@link runEffectAttemptNow} began that did not end at once: the rest of it (its
 * body from the step it stopped at, its scope's close, its end), to run on a fiber of its own.
 *
 * @internal
 */
export class AttemptGoesOn {
  constructor(readonly effect: Effect.Effect<AttemptResult>) {}
}

/**
 * One attempt of an Effect task (`Task.make`) evaluated at once, without a fiber
 * (`evalNow.ts`), when nothing wraps its body (the tasks {@link runBody} runs through
 * `attemptExit`: no timeout, no `retry.maxTotal`, no span, not an evaluator, no body guard, not
 * served by the call cache); the caller holds a worker slot. The same attempt as
 * {@link runAttempt} (same context, exit, lease bookkeeping and scope close): its result when
 * it ended; {@link AttemptGoesOn} when it reached a step that needs a fiber (a wait, a fork, an
 * error handler, …), or must reclaim raw leases: the caller runs the rest on a fiber of its own
 * at once; `undefined` when the task does not qualify or the run is stopping (nothing ran).
 * `context` is the context of the fiber that would have run it (the run's), `holds` how its
 * Scope holds a synchronous finalizer ({@link holdsIn}).
 *
 * @internal
 */
export const runEffectAttemptNow = (
  env: PipelineEnv,
  spec: AnySpec,
  task: Task.Any,
  seq: number,
  attempt: number,
  input: unknown,
  slot: SlotHold,
  context: Context.Context<never>,
  holds: Holds,
  visit = 0
): AttemptResult | AttemptGoesOn | undefined => {
  const options = task.options
  if (
    !task.scoped || options.timeout !== null || options.retry.maxTotal !== undefined || env.traceAttempts ||
    options.evaluator || env.guardBody !== undefined || cachedIn(env, task)
  ) return undefined
  const ctx = beginAttempt(env, spec, task, seq, attempt, visit, slot)
  if (ctx === undefined) return undefined
  const startedAt = slot.began
  const generator = new AttemptGenerator(ctx)
  // (called as `attemptExit` calls it: a throw is a defect of the attempt)
  const direct = effectBodyOf(task.run)
  let body: Effect.Effect<unknown, unknown>
  try {
    body = direct === undefined
      ? task.run(input, ctx) as Effect.Effect<unknown, unknown>
      : direct(input, ctx as never) as Effect.Effect<unknown, unknown>
  } catch (defect) {
    body = Effect.die(defect)
  }
  const end = (exit: Exit.Exit<unknown, unknown>) => attemptEnd(env, task, ctx, exit, startedAt, slot)
  const ran = evalNow(body, context, holds === "attempt" ? generator : holds === "never" ? neverHolds : undefined)
  if (ran instanceof Pending) return new AttemptGoesOn(attemptExit(generator, () => ran.effect, end))
  // the attempt's end as `attemptExit` makes it: its scope closed with its exit, then `end`
  const closing = generator.closeNow(ran)
  let exit = ran
  if (closing !== undefined) {
    const closed = evalNow(closing, context, undefined)
    if (closed instanceof Pending) {
      return new AttemptGoesOn(
        Effect.uninterruptible(Effect.flatMap(Effect.exit(closed.effect), (c) => endOf(end(afterClose(ran, c)))))
      )
    }
    exit = afterClose(ran, closed)
  }
  const result = end(exit)
  return Effect.isEffect(result) ? new AttemptGoesOn(result) : result
}

const endOf = (result: AttemptResult | Effect.Effect<AttemptResult>): Effect.Effect<AttemptResult> =>
  Effect.isEffect(result) ? result : Effect.succeed(result)

/**
 * How a fiber running in a context finds the synchronous holder a marked `WithRuntime` step
 * asks for (a pool's scoped acquire, see `holdNow.ts`): `attempt`: its Scope is the runner's
 * attempt Scope, which holds for the attempt the fiber runs; `never`: its Scope (if any) has
 * no such capability; `fiber`: another Scope answers from the fiber (such steps need one).
 *
 * @internal
 */
export type Holds = "attempt" | "never" | "fiber"

/**
 * {@link Holds} for `context`.
 *
 * @internal
 */
export const holdsIn = (context: Context.Context<never>): Holds => {
  const scope = Context.getOrElse(context as Context.Context<Scope.Scope>, Scope.Scope, noScope)
  return scope instanceof AttemptScope ? "attempt" : scope === undefined || !(HoldNowTypeId in scope) ? "never" : "fiber"
}

const noScope = (): undefined => undefined

/**
 * The attempts' fiber of a {@link NowRun} that did not end at once: the attempt it is in goes
 * on on it, and its value is that attempt's result.
 *
 * @internal
 */
export class AttemptRunning {
  constructor(readonly fiber: Fiber.RuntimeFiber<AttemptResult>) {}
  /**
   * What the pipeline's fiber runs as this attempt (see `Carried.first`): commits what
   * `uncommitted` holds (as a checkpoint of its own, uninterruptibly: the general path made it
   * durable before this attempt began), then awaits the attempt. Whatever ends it early (the
   * pipeline fiber interrupted, the commit failing) interrupts the attempt and awaits its end
   * (its leases released), as the general path's attempt would have been interrupted.
   */
  awaitAfter(env: PipelineEnv, pipelineId: PipelineId, uncommitted: Uncommitted): Effect.Effect<AttemptResult, StoreUnavailable> {
    const fiber = this.fiber
    const awaited = Effect.flatten(Fiber.await(fiber))
    const body = hasUncommitted(uncommitted)
      ? Effect.zipRight(
        Effect.uninterruptible(Effect.suspend(() => env.store.checkpoint(withUncommitted(uncommitted, { pipelineId })))),
        awaited
      )
      : awaited
    return Effect.onExit(body, (exit) => Exit.isSuccess(exit) ? Effect.void : Fiber.interrupt(fiber))
  }
}

/** The runtime the attempts' fibers of {@link runNow} run in, per calling fiber. */
const nowRuntimes = new WeakMap<Fiber.RuntimeFiber<unknown, unknown>, Runtime.Runtime<never>>()

/**
 * The runtime of the fiber calling now (the run's feeder, where {@link runNow} runs): its
 * context (the run's services, the attempt's `Scope` and `Random`: see `attemptScope.ts`), its
 * FiberRefs (a fiber forked from it gets its own attempt cell, as a pipeline fiber does) and the
 * default runtime flags (interruptible, as a pipeline fiber runs). Made once per fiber; `undefined` outside a fiber.
 */
const runtimeNow = (): Runtime.Runtime<never> | undefined => {
  const current = Fiber.getCurrentFiber()
  if (current._tag === "None") return undefined
  const fiber = current.value
  let runtime = nowRuntimes.get(fiber)
  if (runtime === undefined) {
    runtime = Runtime.make({
      context: fiber.currentContext as Context.Context<never>,
      fiberRefs: fiber.getFiberRefs(),
      runtimeFlags: Runtime.defaultRuntimeFlags
    })
    nowRuntimes.set(fiber, runtime)
  }
  return runtime
}

/**
 * `e` with what failed to encode said first (`the output of task X`, `the handoff payload
 * task X sent to Y`). When `value` holds a Handoff directive somewhere inside (a task that
 * returned `{ next: Handoff.to(...) }`), the message says that instead: a directive must be the
 * task's whole return value.
 *
 * @internal
 */
export const codecErrorOf = (e: ArtifactCodecError, what: string, value?: unknown): ArtifactCodecError => {
  const nested = value === undefined ? undefined : directivePath(value, "$", 0)
  return new ArtifactCodecError({
    codec: e.codec,
    typeName: e.typeName,
    message: nested !== undefined
      ? `${what}: a Handoff directive (${nested.directive}) was found inside the value, at ${nested.path}: a directive ` +
        `must be the task's whole return value (return Handoff.to(...) itself, not an object or array holding it)`
      : `${what}: ${e.message}`,
    ...(e.unregistered === undefined ? {} : { unregistered: e.unregistered })
  })
}

/** Where a Handoff directive sits inside `value` (plain objects and arrays, 32 levels deep at most). */
const directivePath = (
  value: unknown,
  path: string,
  depth: number
): { readonly path: string; readonly directive: string } | undefined => {
  if (typeof value !== "object" || value === null || depth > 32) return undefined
  if (isHandoff(value)) return depth === 0 ? undefined : { path, directive: String(value) }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = directivePath(value[i], `${path}[${i}]`, depth + 1)
      if (found !== undefined) return found
    }
    return undefined
  }
  const proto = Object.getPrototypeOf(value)
  if (proto !== Object.prototype && proto !== null) return undefined
  for (const [k, v] of Object.entries(value)) {
    const found = directivePath(v, /^[A-Za-z_$][\w$]*$/.test(k) ? `${path}.${k}` : `${path}[${JSON.stringify(k)}]`, depth + 1)
    if (found !== undefined) return found
  }
  return undefined
}
