/**
 * One admitted pipeline whose template declares `control`, run to a terminal state on its own
 * fiber. The plain path (`pipeline.ts`) is untouched: a run picks this path once per pipeline.
 * A new pipeline whose tasks are all `Task.sync` begins without a fiber ({@link runNow}: the
 * same steps and transitions, committed once as the fiber would commit them) and gets its
 * fiber only at the first attempt that needs one (`ControlledStart.carried`).
 *
 * The pipeline's durable traversal state (`VisitState`, kept by the store's `traversal`
 * capability) says where it is: the pending entry (station, visit, input occurrence, reserved
 * attempt numbers), the active slots, the per-station visit counters and the budget spent.
 * Every step is one atomic checkpoint that carries the next state with a version check:
 * - a success: the output artifact at its occurrence, the task and attempt rows, the next entry;
 * - a directive (`Handoff`) allowed by the declaration and the budget: the source task
 *   `handed_off`, its attempt `handed_off` (no decision), the entry payload (at seq
 *   `nTasks + k`, or the source's own input reused, or the seed for `retryAll`), the ledger row,
 *   the invalidation of `target..end` for `rewind`/`retryAll`, the budget and the new pending
 *   entry (for `end`: the pipeline's final state);
 * - a failed attempt that will be retried: its row and the reservation of the next attempt
 *   number (durable, not write-behind, so a kill never reuses a number).
 *
 * @internal
 */
import { Duration, Effect, Either, Exit, Option } from "effect"
import * as Control from "../../../domain/Control.js"
import { type CodecRegistry, type Encoded, JsonCodec, outputTypeName } from "../../../domain/Codec.js"
import { type ArtifactCodecError, BudgetExceeded, HandoffRefused, type StoreUnavailable } from "../../../domain/Errors.js"
import { type Handoff, isHandoff } from "../../../domain/Handoff.js"
import { digest } from "../../../domain/Json.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type * as Task from "../../../domain/Task.js"
import { syncBodyOf } from "../../../domain/internal/syncRun.js"
import * as Traversal from "../../../domain/Traversal.js"
import type { CheckpointUnit, HandoffEventFacts, NewArtifact, PipelinePatch } from "../../Store.js"
import {
  type Admission,
  type AttemptResult,
  BIG_OUTPUT_BYTES,
  codecErrorOf,
  controlOf,
  defer,
  endOfFiber,
  gateStart,
  isSyncTask,
  judgeFailure,
  MAX_UNCOMMITTED,
  noneUncommitted,
  type NowOutcome as PlainNowOutcome,
  type PipelineEnv,
  poolsOf,
  runAttempt,
  runAttemptNow,
  type Uncommitted,
  withUncommitted,
  writeAdmission
} from "./pipeline.js"
import { countNote, failedWithNote, succeededAs } from "./cache.js"
import * as Rows from "./rows.js"
import type { AttemptUsage } from "./attemptContext.js"
import { emptyHold, type SlotHold } from "./slotGate.js"
import * as State from "./state.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>
type TraversalWrite = NonNullable<CheckpointUnit["traversal"]>

/**
 * Where a controlled pipeline starts: its durable traversal state, the decoded input of its
 * pending entry, and the state to commit before any task runs (`prepare`: the reservation of
 * a resume's next attempt number, a seed replay, a fresh restart), with the events that go
 * with it.
 *
 * @internal
 */
export interface ControlledStart {
  readonly state: Traversal.VisitState
  readonly input: unknown
  readonly prepare: Traversal.VisitState | undefined
  /** For `prepare`: the station from which results become history (fresh restart, replay). */
  readonly invalidateFrom?: number | undefined
  /** The pipeline's admission, written by its own fiber before anything else. */
  readonly admission?: Admission | undefined
  /** What {@link runNow} did before it handed the pipeline to its fiber (see {@link ControlledCarried}). */
  readonly carried?: ControlledCarried | undefined
}

/**
 * A controlled pipeline {@link runNow} began without a fiber and hands over at its pending
 * entry (`ControlledStart.state`, whose decoded input is `ControlledStart.input`): what it
 * holds uncommitted (the admission and the deferred steps before that entry, whose states
 * `state` already follows), the worker slot it holds, when the entry's task began (its task
 * run id), and the entry's first attempt, already run (`undefined`: not run, the fiber runs
 * it, or interrupts when the run is stopping). The fiber continues exactly where the general
 * path would be after that attempt.
 *
 * @internal
 */
export interface ControlledCarried {
  readonly uncommitted: Uncommitted
  readonly holder: SlotHold
  readonly taskStartedAt: number
  readonly first: AttemptResult | Effect.Effect<AttemptResult> | undefined
}

/**
 * The input a station's entry receives when it enters from the seed: the seed decoded afresh
 * from the canonical JSON captured at binding (never the bound object, which a task may have
 * mutated).
 *
 * @internal
 */
export const seedInput = (spec: AnySpec): unknown => JSON.parse(spec.seedJson)

/**
 * The seq named by an occurrence address (`pipelineId:seq` or `pipelineId:seq#visit`).
 *
 * @internal
 */
export const seqOfAddress = (pipelineId: PipelineId, address: string): number => {
  const rest = address.slice(pipelineId.length + 1)
  const hash = rest.indexOf("#")
  return Number(hash === -1 ? rest : rest.slice(0, hash))
}

interface ControlledTask extends Rows.CurrentTask {
  readonly visit: number
}

/** The task of an entry at `address` whose first attempt began waiting at `startedAt` (its task run id). */
const entryTask = (
  pipelineId: PipelineId,
  runId: RunId,
  task: Task.Any,
  seq: number,
  visit: number,
  address: string,
  startedAt: number
): ControlledTask => ({
  pipelineId,
  runId,
  taskRunId: `${address}:${runId}:${startedAt}`,
  taskName: task.name,
  seq,
  visit,
  startedAt,
  attempt: 0,
  // every attempt of a controlled task is committed with its own count
  committed: 0,
  recorded: 0
})

/**
 * The pipeline patch of a step that keeps the traversal going (a success before the end, a
 * transition to a station): the position, the time and the attempt. The row's state, owner
 * run, end time and error are what admission wrote (`running`, this run, none), so they are
 * not written again: SQLite then leaves every index of `pipelines` alone.
 */
const stepPatch = (cursor: number, at: number): PipelinePatch => ({ nTasksDone: cursor, updatedAt: at, attemptsDelta: 1 })

/** The pipeline patch of the step that completes the traversal: `succeeded`, ended `at` (owner and error as admitted). */
const endPatch = (cursor: number, at: number): PipelinePatch => ({
  nTasksDone: cursor,
  state: "succeeded",
  endedAt: at,
  updatedAt: at,
  attemptsDelta: 1
})

type EntryOutcome =
  | { readonly _tag: "Next"; readonly input: unknown }
  | { readonly _tag: "Ended"; readonly value: unknown }
  | { readonly _tag: "Failed" }

/**
 * `unit` with `traversal` as its traversal write (field by field: a spread takes the runtime's
 * generic property copy, once per checkpoint).
 */
const withTraversal = (unit: CheckpointUnit, traversal: NonNullable<CheckpointUnit["traversal"]>): CheckpointUnit => ({
  pipelineId: unit.pipelineId,
  artifact: unit.artifact,
  task: unit.task,
  pipeline: unit.pipeline,
  attempts: unit.attempts,
  events: unit.events,
  traversal,
  admission: unit.admission,
  before: unit.before
})

/**
 * `unit` (a success {@link runNow} deferred without a traversal write) carrying the state it
 * led to, `state`, based on the version `expectedVersion` that the units before it carry.
 */
const withState = (unit: CheckpointUnit, expectedVersion: number, state: Traversal.VisitState): CheckpointUnit =>
  withTraversal(unit, { expectedVersion, state })

/**
 * `unit` (a transition {@link runNow} queued, or its last step) with its traversal write
 * carrying `end`, the pipeline's final state, based on `end`'s own version (see
 * {@link runNow}'s `oneState`).
 */
const carryingEnd = (unit: CheckpointUnit, end: Traversal.VisitState): CheckpointUnit => {
  const t = unit.traversal!
  return withTraversal(unit, {
    expectedVersion: end.version,
    state: end,
    handoff: t.handoff,
    entry: t.entry,
    invalidateFrom: t.invalidateFrom,
    final: t.final,
    handoffEvent: t.handoffEvent
  })
}

/** A checkpoint unit that carries a traversal write. */
type TraversalUnit = CheckpointUnit & { readonly traversal: TraversalWrite }

/** A directive's verdict: the unit of its transition and what follows, or why it is refused. */
type Handed =
  | { readonly _tag: "Commit"; readonly unit: TraversalUnit; readonly outcome: Exclude<EntryOutcome, { _tag: "Failed" }> }
  | { readonly _tag: "Refused"; readonly error: unknown }

const noLeases: ReadonlyArray<string> = []

/** {@link eventFacts}' shared objects, by `(limit, handoffs, visit)` (small ones only: see `factsKey`). */
const sharedFacts = new Map<number, HandoffEventFacts>()

/** {@link sharedFacts}' key of small facts (`undefined`: not shared). */
const factsKey = (visit: number, handoffs: number, limit: number): number | undefined =>
  visit < 16 && handoffs < 64 && limit < 1024 ? (limit * 64 + handoffs) * 16 + visit : undefined

/**
 * The facts of a transition's `pipeline.handoff` event beyond its ledger row: one shared
 * frozen object per small budget, budget spent and visit, so that a transition waiting for its
 * commit holds no event of its own (the store builds the event; see `HandoffEventFacts`).
 */
const eventFacts = (visit: number, handoffs: number, limit: number): HandoffEventFacts => {
  const key = factsKey(visit, handoffs, limit)
  if (key === undefined) return { visit, handoffs, limit }
  let facts = sharedFacts.get(key)
  if (facts === undefined) sharedFacts.set(key, facts = Object.freeze({ visit, handoffs, limit }))
  return facts
}

/**
 * Runs a controlled pipeline from `start` to a terminal state (see the module comment). On
 * interruption its row ends `interrupted` at its current position; the pending entry and its
 * reserved attempt numbers stay as committed, so a resume continues the same visit.
 *
 * @internal
 */
export const run = (env: PipelineEnv, spec: AnySpec, start: ControlledStart): Effect.Effect<void, StoreUnavailable> => {
  const { clock, slots, state, store } = env
  const runId = state.runId
  const template = spec.template
  const tasks = template.tasks as ReadonlyArray<Task.Any>
  const nTasks = tasks.length
  const pipelineId = spec.pipelineId
  let vs = start.state
  let currentTask: ControlledTask | undefined = undefined
  // a pipeline begun by `runNow` continues with its slot and what it left uncommitted
  let carried = start.carried
  const holder: SlotHold = carried === undefined ? emptyHold() : carried.holder

  // The admission and the steps of synchronous tasks followed by a synchronous task, not
  // committed yet: they ride, whole and in order, in the next commit (see `Uncommitted`).
  const uncommitted = carried === undefined ? noneUncommitted() : carried.uncommitted
  /** `unit` with what is uncommitted before it. */
  const carrying = (unit: CheckpointUnit) => withUncommitted(uncommitted, unit)

  /**
   * Commits `unit` (which carries its traversal write, version-checked against `vs`), then
   * adopts the unit's state; uninterruptible, so that the state in memory is the committed one.
   * With `deferrable`, a step whose next entry's task runs synchronously, as the step's own
   * task did, is not committed yet: its state is adopted at once (the next step's version
   * check follows it), it commits with the next one, and `undefined` comes back (nothing to
   * run: the caller yields no Effect, so a deferred step costs no fiber step, as on the plain
   * path).
   */
  const commit = (
    unit: TraversalUnit,
    deferrable: boolean,
    task: Task.Any | undefined
  ): Effect.Effect<void, StoreUnavailable> | undefined => {
    const next = unit.traversal.state.pending
    if (
      deferrable && next !== null && uncommitted.units.length < MAX_UNCOMMITTED && isSyncTask(task) &&
      isSyncTask(tasks[next.seq])
    ) {
      defer(uncommitted, unit)
      vs = unit.traversal.state
      return undefined
    }
    return Effect.uninterruptible(Effect.map(store.checkpoint(carrying(unit)), () => {
      vs = unit.traversal.state
    }))
  }

  /** {@link commit} of a unit that is never deferred. */
  const commitNow = (unit: TraversalUnit) => commit(unit, false, undefined)!

  // the position covers the uncommitted steps: the interrupted row commits them first
  const markInterrupted = Effect.suspend(() => {
    // the cluster engine: nothing is written (see `PipelineEnv.fencedTraversal`)
    if (env.fencedTraversal === true) return Effect.void
    const now = clock.unsafeCurrentTimeMillis()
    state.counters.interrupted++
    // the task row carries the current task's visit
    return store.checkpoint(
      carrying(Rows.interruptedUnit(pipelineId, runId, vs.cursor, currentTask, state.stopReason, now, holder.began))
    )
  })

  // One generator for the whole pipeline: an entry (`runEntry`) is a generator delegated to
  // with `yield*`, not an Effect of its own, so a step costs no extra fiber frames.
  const body = Effect.gen(function*() {
    const admission = start.admission
    if (admission !== undefined) {
      // nothing to commit before the first entry, whose task runs synchronously: the row
      // rides in its step's commit (or, when a start gate skips the pipeline, in the skip's;
      // see `gateStart`)
      if (
        admission.events.length === 0 && start.prepare === undefined &&
        vs.pending !== null && isSyncTask(tasks[vs.pending.seq])
      ) {
        uncommitted.admission = admission.write
      } else {
        yield* writeAdmission(store, admission)
      }
    }
    // the start gate, before the start's reservation (a skipped pipeline writes nothing of its
    // traversal; see `gateStart`)
    if (env.startGate !== undefined && (yield* gateStart(env, spec, holder, vs.cursor, carrying))) return
    // (a dead owner's attempt in flight at the pending entry is a `pipeline.abandoned` event of
    // the admission, never an attempt row: see `admit.ts`)
    if (start.prepare !== undefined) {
      yield* commitNow({
        pipelineId,
        traversal: {
          expectedVersion: vs.version,
          state: start.prepare,
          ...(start.invalidateFrom === undefined ? {} : { invalidateFrom: start.invalidateFrom })
        }
      })
    }
    let input = start.input
    while (vs.pending !== null) {
      // a turn of the event loop after a slice of synchronous work (see `slice.ts`)
      if (state.slice.due()) yield* state.slice.turn
      // (a carried attempt has run: it is recorded whatever a stop says, as it would have been)
      if (state.stopping && (carried === undefined || carried.first === undefined)) return yield* Effect.interrupt
      // the cluster engine: cancelled (see `PipelineEnv.cancelled`): the row ends interrupted
      // here, as `markInterrupted` writes it (the steps not committed yet ride in its commit)
      // (under `fencedTraversal`, only if the stored state is still this execution's: a new
      // owner's step in between refuses it, `TraversalConflict`, and the row is not moved back)
      const cancelledBy = env.cancelled?.()
      if (cancelledBy !== undefined) {
        const now = clock.unsafeCurrentTimeMillis()
        const unit = Rows.interruptedUnit(pipelineId, runId, vs.cursor, currentTask, cancelledBy, now, holder.began)
        return yield* Effect.uninterruptible(store.checkpoint(carrying(
          env.fencedTraversal === true ? { ...unit, traversal: { expectedVersion: vs.version, state: vs } } : unit
        )))
      }
      const pending = vs.pending
      const outcome = yield* runEntry(tasks[pending.seq]!, pending.seq, pending.visit, input)
      switch (outcome._tag) {
        case "Failed":
          state.counters.failed++
          yield* env.onTerminal(pipelineId, Option.none())
          return
        case "Ended":
          state.counters.succeeded++
          yield* env.onTerminal(pipelineId, Option.some(outcome.value))
          return
        case "Next":
          input = outcome.input
      }
    }
    state.counters.succeeded++
    yield* env.onTerminal(pipelineId, Option.some(input))
  })

  // ---- one entry of one station: attempts until a success, a directive or a declined retry ---
  function* runEntry(task: Task.Any, seq: number, visit: number, input: unknown) {
    // the first attempt `runNow` ran before it handed over (the slot still held)
    const carry = carried === undefined || carried.first === undefined ? undefined : carried
    carried = undefined
    let taskStarted = carry === undefined ? clock.unsafeCurrentTimeMillis() : carry.taskStartedAt
    const address = Traversal.address(pipelineId, seq, visit)
    const current = entryTask(pipelineId, runId, task, seq, visit, address, taskStarted)
    currentTask = current
    let first = true
    let taskLeaseIds: ReadonlyArray<string> = noLeases
    while (true) {
      // the number reserved durably before this attempt runs
      const attempt = vs.pending!.attempts
      current.attempt = attempt
      const ran = first && carry !== undefined ? carry.first : undefined
      if (ran === undefined) {
        // not begun until its body begins (see `SlotHold.began`)
        holder.began = -1
        if (!holder.holding && !slots.tryTake(holder)) yield* slots.take(holder) // (held already: the start gate's slot)
      }
      // a synchronous body evaluated at once (no Effect per step) when nothing wraps it
      const now = ran !== undefined ? ran : runAttemptNow(env, spec, task, seq, attempt, input, holder, visit)
      const result = now === undefined
        ? yield* runAttempt(env, spec, task, seq, attempt, input, holder, first ? undefined : taskStarted, visit)
        : Effect.isEffect(now)
        ? yield* now
        : now
      // a plain value is encoded at once; a big one keeps its worker slot until its
      // checkpoint commits (see BIG_OUTPUT_BYTES), a failure until its decision is made (see
      // `State.decideFailure`); every exit gives the slot back
      const encoded = result.exit._tag === "Success" && !isHandoff(result.exit.value)
        ? (result.encoded !== undefined ? Either.right(result.encoded) : env.registryFor(task).dump(result.exit.value))
        : undefined
      const holdSlot = encoded !== undefined && Either.isRight(encoded) &&
        encoded.right.data.byteLength >= BIG_OUTPUT_BYTES
      if (!holdSlot && encoded !== undefined && Either.isRight(encoded)) slots.release(holder)
      const ended = clock.unsafeCurrentTimeMillis()
      if (first) {
        taskStarted = result.startedAt
        current.startedAt = taskStarted
        first = false
      }
      if (result.leaseIds.length > 0) taskLeaseIds = [...taskLeaseIds, ...result.leaseIds]
      if (result.exit._tag === "Success") {
        const value = result.exit.value
        if (isHandoff(value)) {
          const handed = handOff(env, spec, vs, task, current, attempt, value, input, result, taskStarted, ended, taskLeaseIds)
          if (handed._tag === "Commit") {
            slots.release(holder)
            const committing = commit(handed.unit, true, task)
            if (committing !== undefined) yield* committing
            state.counters.handoffs++
            if (handed.outcome._tag === "Ended") state.counters.handoffEnds++
            currentTask = undefined
            return handed.outcome
          }
          result.exit = Exit.fail(handed.error)
        } else if (encoded !== undefined) {
          if (Either.isLeft(encoded)) {
            result.exit = Exit.fail(codecErrorOf(encoded.left, `the output of task ${task.name}`, value))
          } else {
            const enc = encoded.right
            countNote(state.cache, result.cache)
            const next = Traversal.succeed(vs, seq, address, nTasks)
            const isLast = next.pending === null
            const succeeded = succeededAs(attempt, result.cache)
            const committing = commit({
              pipelineId,
              artifact: {
                pipelineId,
                runId,
                seq,
                taskName: task.name,
                typeName: enc.typeName,
                codec: enc.codec,
                digest: digest(enc.data),
                payload: enc.data,
                isFinal: isLast,
                createdAt: ended,
                visit
              },
              task: Rows.taskRow(current, "succeeded", attempt, taskStarted, ended, null, taskLeaseIds),
              // a step inside the traversal moves the position only (see stepPatch)
              pipeline: isLast ? endPatch(next.cursor, ended) : stepPatch(next.cursor, ended),
              attempts: [
                Rows.succeededAttemptRow(current, attempt, succeeded, result, ended)
              ],
              traversal: { expectedVersion: vs.version, state: next }
            }, !holdSlot, task)
            if (committing !== undefined) yield* committing
            if (holdSlot) slots.release(holder)
            currentTask = undefined
            return isLast ? { _tag: "Ended", value } as const : { _tag: "Next", input: value } as const
          }
        }
      }
      const { decision, error, fields, outcome } = yield* judgeFailure(
        task,
        (result.exit as Exit.Failure<unknown, unknown>).cause,
        attempt,
        ended - taskStarted,
        poolsOf(env, spec)
      )
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
      const terminal = !(decision.retry || (state.stopping && error === undefined))
      if (terminal) State.decideFailure(state, spec)
      slots.release(holder)
      const counted = { updatedAt: ended, attemptsDelta: 1 }
      if (!terminal && decision.retry && !state.stopping) {
        // the failed attempt and the next attempt number, durably together
        yield* commitNow({
          pipelineId,
          attempts: [attemptRow],
          pipeline: counted,
          traversal: { expectedVersion: vs.version, state: Traversal.reserveAttempt(vs) }
        })
        current.recorded = attempt
        state.counters.retries++
        state.delayed++
        yield* env.whileParked(Effect.sleep(Duration.millis(decision.delayMs))).pipe(
          Effect.ensuring(Effect.sync(() => state.delayed--))
        )
        continue
      }
      if (!terminal) {
        // cut short by a stop: recorded as `stopped`; a resume reserves the next number
        yield* Effect.uninterruptible(store.checkpoint(carrying({
          pipelineId,
          attempts: [{ ...attemptRow, decision: { ...decision, retry: false, reason: "stopped", delayMs: 0 } }],
          pipeline: counted
        })))
        current.recorded = attempt
        if (error !== undefined) current.stoppedAfter = `${fields.errorClass}: ${fields.errorMessage}`
        return yield* Effect.interrupt
      }
      const unit = Rows.failedUnit(current, attempt, taskStarted, ended, fields, taskLeaseIds, attemptRow, decision.reason)
      yield* Effect.uninterruptible(store.checkpoint(carrying({
        ...unit,
        pipeline: { ...unit.pipeline!, nTasksDone: vs.cursor, attemptsDelta: 1 },
        // the cluster engine: a stale executor's failure is refused (see `PipelineEnv.fencedTraversal`)
        ...(env.fencedTraversal === true ? { traversal: { expectedVersion: vs.version, state: vs } } : {})
      })))
      currentTask = undefined
      return { _tag: "Failed" } as const
    }
  }

  return endOfFiber(env, pipelineId, holder, markInterrupted)(body)
}

// ---- a directive: check, budget, the unit of one atomic transition ----------------------------
// A handoff payload becomes another task's input: its codec may be any task's output Schema (a
// validator rewinding to its generator with a HistoryArtifact the generator declares).
const templateRegistries = new WeakMap<
  (task: Task.Any) => CodecRegistry,
  WeakMap<ReadonlyArray<Task.Any>, CodecRegistry>
>()

/**
 * The registry a template's handoff payloads are read with: the run's registry with the output
 * Schema of every task of the template registered (as `registryFor` registers each one).
 *
 * @internal
 */
export const payloadRegistry = (
  registryFor: (task: Task.Any) => CodecRegistry,
  tasks: ReadonlyArray<Task.Any>
): CodecRegistry => {
  let byTemplate = templateRegistries.get(registryFor)
  if (byTemplate === undefined) templateRegistries.set(registryFor, byTemplate = new WeakMap())
  let r = byTemplate.get(tasks)
  if (r === undefined) {
    r = registryFor(tasks[0]!)
    for (const t of tasks) {
      if (t.outputSchema !== undefined) r = r.registerSchema(t.outputSchema, { typeName: outputTypeName(t.name, t.outputSchema) })
    }
    byTemplate.set(tasks, r)
  }
  return r
}

/**
 * Encodes the handoff payload `value` of task `source` (bound for `target`): with the source's
 * own registry when one of its codecs claims the value (as before), else with
 * {@link payloadRegistry}. A failure names the task and says it is a handoff payload.
 *
 * @internal
 */
export const dumpPayload = (
  registryFor: (task: Task.Any) => CodecRegistry,
  tasks: ReadonlyArray<Task.Any>,
  source: Task.Any,
  target: string,
  value: unknown
): Either.Either<Encoded, ArtifactCodecError> => {
  const own = registryFor(source)
  const registry = own.codecFor(value) !== JsonCodec ? own : payloadRegistry(registryFor, tasks)
  return Either.mapLeft(registry.dump(value), (e) => codecErrorOf(e, `the handoff payload task ${source.name} sent to ${target}`))
}

/**
 * The transition a directive asks for, as the checkpoint unit that commits it and the
 * outcome that follows; or why it is refused (an undeclared edge, an undecodable value, a
 * spent budget), before anything is written.
 */
const handOff = (
  env: PipelineEnv,
  spec: AnySpec,
  vs: Traversal.VisitState,
  task: Task.Any,
  current: ControlledTask,
  attempt: number,
  directive: Handoff,
  input: unknown,
  result: { readonly leaseIds: ReadonlyArray<string>; readonly startedAt: number; readonly usage?: AttemptUsage | undefined },
  taskStarted: number,
  ended: number,
  taskLeaseIds: ReadonlyArray<string>,
  stepPatched = true,
  expectedVersion = vs.version
): Handed => {
  const state = env.state
  const runId = state.runId
  const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
  const nTasks = tasks.length
  const pipelineId = spec.pipelineId
  const control = controlOf(spec.template)!
  const limit = Control.effectiveLimit(control, state.config.maxHandoffs)
  const seq = current.seq
  const checked = Control.check(control, nTasks, seq, directive)
  if (Either.isLeft(checked)) {
    return { _tag: "Refused", error: new HandoffRefused({ message: checked.left, task: task.name, seq }) }
  }
  const t = checked.right
  const pending = vs.pending!
  // the entry: the seed (retryAll), the source's own input (no value), or a new payload
  let entryAddress: string
  let entrySeq: number
  let entryArtifact: NewArtifact | undefined = undefined
  let nextInput: unknown
  if (t.operation === "retryAll") {
    entrySeq = -1
    entryAddress = vs.seed
    nextInput = seedInput(spec)
  } else if (Option.isNone(t.value)) {
    entryAddress = pending.input
    entrySeq = seqOfAddress(pipelineId, entryAddress)
    nextInput = input
  } else {
    const encoded = dumpPayload(env.registryFor, tasks, task, t.toSeq === "end" ? "end" : tasks[t.toSeq]!.name, t.value.value)
    if (Either.isLeft(encoded)) return { _tag: "Refused", error: encoded.left }
    const enc = encoded.right
    entrySeq = nTasks + vs.payloads
    entryAddress = Traversal.address(pipelineId, entrySeq, 0)
    entryArtifact = {
      pipelineId,
      runId,
      seq: entrySeq,
      taskName: task.name,
      typeName: enc.typeName,
      codec: enc.codec,
      digest: digest(enc.data),
      payload: enc.data,
      isFinal: t.toSeq === "end",
      createdAt: ended
    }
    nextInput = t.value.value
  }
  const moved = Traversal.transition(vs, {
    operation: t.operation,
    fromSeq: seq,
    toSeq: t.toSeq,
    entry: entryAddress,
    payload: entryArtifact !== undefined,
    nTasks,
    limit
  })
  if (Either.isLeft(moved)) {
    return {
      _tag: "Refused",
      error: new BudgetExceeded({
        budget: "maxHandoffs",
        message: `${task.name} (seq ${seq}) returned Handoff.${t.operation} after ${vs.handoffs} of ${limit} ` +
          `transitions: the control budget is spent (${Control.describeLimit(control, state.config.maxHandoffs)}); ` +
          `the spent budget survives resume: resume with --fresh-restart (RunOptions.freshRestart) to run it ` +
          `again from its seed with a new budget` +
          (control.maxHandoffs !== null && control.maxHandoffs > state.config.maxHandoffs
            ? `, or raise run.maxHandoffs (up to the declared ${control.maxHandoffs}) and resume`
            : "") +
          `; raising control.maxHandoffs does not give this pipeline more: the block is part of the ` +
          `pipeline's identity, so a raised limit defines new pipelines, which all run from their seeds`
      })
    }
  }
  const next = moved.right
  const isEnd = t.toSeq === "end"
  const toSeq = isEnd ? null : t.toSeq as number
  const toTask = toSeq === null ? null : tasks[toSeq]!.name
  const entryReused = entryArtifact === undefined
  const traversal: TraversalWrite = {
    expectedVersion,
    state: next,
    handoff: {
      pipelineId,
      runId,
      fromSeq: seq,
      fromTask: task.name,
      toSeq,
      toTask,
      operation: t.operation,
      entrySeq,
      entryArtifactId: entryAddress,
      entryReused,
      reason: t.reason,
      ts: ended
    },
    // (set below, each when it applies: no spread of a temporary object per transition)
    entry: entryArtifact,
    invalidateFrom: t.operation === "rewind" || t.operation === "retryAll" ? toSeq! : undefined,
    // a new payload is written final itself; a reused entry (input, seed) is marked
    final: isEnd && entryReused ? entryAddress : undefined,
    handoffEvent: eventFacts(current.visit, next.handoffs, limit)
  }
  return {
    _tag: "Commit",
    unit: {
      pipelineId,
      task: Rows.taskRow(current, "handed_off", attempt, taskStarted, ended, null, taskLeaseIds),
      attempts: [Rows.attemptRow(current, attempt, "handed_off", null, null, result.leaseIds, result.startedAt, ended, result.usage)],
      // (`stepPatched` false: a step {@link runNow} defers, whose patch it counts itself)
      pipeline: isEnd ? endPatch(next.cursor, ended) : stepPatched ? stepPatch(next.cursor, ended) : undefined,
      // (the `pipeline.handoff` event: the store builds it from `traversal`'s ledger row and facts)
      traversal
    },
    outcome: isEnd ? { _tag: "Ended", value: nextInput } : { _tag: "Next", input: nextInput }
  }
}

// ---- the synchronous fast path ------------------------------------------------------------

/**
 * The end of {@link runNow}. `Commit`: the traversal is complete; `unit` carries everything
 * (admission, every step and transition, the terminal row) in one checkpoint, `finalValue` is
 * the pipeline's value. `ContinueControlled`: `start` hands the pipeline to its fiber at an
 * entry whose first attempt needs the general path (a failure, a refused directive, a big or
 * unencodable output, leases to reclaim) or that the general path would not defer (a stop,
 * {@link MAX_UNCOMMITTED} steps waiting).
 *
 * @internal
 */
export type NowOutcome =
  | Extract<PlainNowOutcome, { readonly _tag: "Commit" }>
  | { readonly _tag: "ContinueControlled"; readonly start: ControlledStart }

/**
 * {@link runNow}'s conditions on `start`, the run and the template. The start: a pipeline
 * admitted now at a pending entry, its admission with no events to record, nothing to prepare,
 * not carried. The run: no start gate, no attempt spans. The template:
 * it declares control, and each of its tasks (a transition may lead to any) runs at once (see
 * `runsAtOnce`).
 *
 * @internal
 */
export const canRunNow = (env: PipelineEnv, spec: AnySpec, start: ControlledStart): boolean => {
  const admitted = start.admission
  if (
    admitted === undefined || admitted.events.length > 0 || start.prepare !== undefined ||
    start.carried !== undefined || start.state.pending === null ||
    env.startGate !== undefined || env.traceAttempts || controlOf(spec.template) === undefined
  ) return false
  // (asked once per run and template: a run binds one template to many seeds)
  const template = spec.template
  let known = atOnce.get(env)
  if (known === undefined) atOnce.set(env, known = new Map())
  let value = known.get(template)
  if (value === undefined) {
    value = (template.tasks as ReadonlyArray<Task.Any>).every((task) => runsAtOnce(env, task))
    known.set(template, value)
  }
  return value
}

/** {@link canRunNow}'s answers to whether every task of a template runs at once, by run and template. */
const atOnce = new WeakMap<PipelineEnv, Map<unknown, boolean>>()

/**
 * Whether an attempt of `task` is evaluated at once by `runAttemptNow`: a `Task.sync` body that
 * nothing wraps (no timeout, no `retry.maxTotal`, not an evaluator, not cached in this run).
 */
const runsAtOnce = (env: PipelineEnv, task: Task.Any): boolean => {
  const options = task.options
  return syncBodyOf(task.run) !== undefined && options.timeout === null && options.retry.maxTotal === undefined &&
    !options.evaluator && (env.cache === undefined || options.cache === null)
}

/**
 * Runs an admitted controlled pipeline whose tasks are all synchronous (see {@link canRunNow})
 * at once, on the caller's fiber, without a fiber of its own and without an Effect per step:
 * the same attempts, steps and transitions (`Traversal.succeed`, {@link handOff}: the same
 * rows, ledger row, event, invalidation and stored traversal state) as {@link run} would make.
 * One difference in what the commit carries, not in what it stores: a deferred success carries
 * no traversal write; the next transition (or the last step) carries the state that includes
 * it, version-checked against the state before it, all in the same transaction. `run`'s
 * `runEntry` defers every synchronous step whose next entry's task is
 * synchronous (transitions included) to the next commit, so the general path also commits
 * such a pipeline once (up to {@link MAX_UNCOMMITTED} steps), its admission with it: nothing
 * the general path makes durable before going on is made durable later here. `undefined`:
 * nothing ran (not eligible, the run stopping, or no worker slot free now): use {@link run}.
 * The caller commits a `Commit`'s unit (uninterruptibly, as the general path's last checkpoint
 * is) and then counts the pipeline succeeded.
 *
 * @internal
 */
export const runNow = (env: PipelineEnv, spec: AnySpec, start: ControlledStart): NowOutcome | undefined => {
  const { clock, slots, state } = env
  // one worker slot for the whole pipeline (nothing else runs between its steps)
  const holder = emptyHold()
  if (!canRunNow(env, spec, start) || state.stopping || !slots.tryTake(holder)) return undefined
  const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
  const { pipelineId } = spec
  const { runId } = state
  const nTasks = tasks.length
  // the admission rides in the pipeline's one commit, as on the general path
  const admitted = start.admission!.write
  const uncommitted: Uncommitted = { admission: admitted, units: [], patch: undefined }
  let vs = start.state
  // When the pipeline commits whole (`Commit`) and its admission carries its initial state
  // alone, every traversal write of that commit, the admission's included, carries the final
  // state, each based on the final state's version (`commitWhole`): the commit stores exactly
  // what the chain of states would (the last state of a chain is what every store keeps; the
  // ledger rows, entries, invalidations and final marks are applied in the same order), and a
  // batch waiting for its group commit keeps one state per pipeline, not the initial state and
  // one per transition besides. A hand-over to the fiber keeps the chain as it is.
  const initialOnly = admitted.traversals
  const oneState = initialOnly !== undefined && initialOnly.length === 1 && initialOnly[0]!.pipelineId === pipelineId &&
    initialOnly[0]!.state === vs && admitted.pipelines.length === 1
  /** The `Commit` of the pipeline whose last unit, carrying its final state, is `last`. */
  const commitWhole = (last: CheckpointUnit, finalValue: unknown): NowOutcome => {
    slots.release(holder)
    settlePatch()
    if (oneState) {
      const end = last.traversal!.state
      uncommitted.admission = { pipelines: admitted.pipelines, seeds: admitted.seeds, traversals: [{ pipelineId, state: end }] }
      const units = uncommitted.units
      for (let i = 0; i < units.length; i++) if (units[i]!.traversal !== undefined) units[i] = carryingEnd(units[i]!, end)
      if (last.traversal!.expectedVersion !== end.version) last = carryingEnd(last, end)
    }
    return { _tag: "Commit", unit: withUncommitted(uncommitted, last), finalValue }
  }
  let input = start.input
  // The version of the last state a unit of this commit carries (the admission's at first).
  // A deferred success carries no traversal write: its state lives only until the next step
  // (the next unit that carries one, a transition or the last step, is based on `written` and
  // carries the state that includes it; they commit in one transaction, so no store ever
  // holds the skipped state), so that a batch waiting for its group commit keeps one state
  // per transition instead of one per step (see `withState` for a hand-over).
  let written = vs.version
  // The deferred steps' units carry no pipeline patch: each step's would be `stepPatch` (the
  // cursor, the time, one attempt), so their merge is the last one's with an attempt per step,
  // set in `uncommitted.patch` once, when the pipeline commits or goes to its fiber (no patch
  // object, copy of the unit or merge per step, as `defer` makes).
  let lastCursor = 0
  let lastEnded = 0
  const settlePatch = () => {
    const n = uncommitted.units.length
    if (n > 0) uncommitted.patch = { nTasksDone: lastCursor, updatedAt: lastEnded, attemptsDelta: n }
  }
  const handOver = (taskStartedAt: number, first: AttemptResult | Effect.Effect<AttemptResult> | undefined): NowOutcome => {
    settlePatch()
    // the fiber's next step is based on `vs`: the last deferred unit carries it
    const units = uncommitted.units
    if (written !== vs.version) units[units.length - 1] = withState(units[units.length - 1]!, written, vs)
    return {
      _tag: "ContinueControlled",
      start: { state: vs, input, prepare: undefined, carried: { uncommitted, holder, taskStartedAt, first } }
    }
  }
  while (true) {
    const pending = vs.pending!
    // where `run` would check for a stop (or give the event loop a turn, see `slice.ts`), or
    // commit rather than defer: its fiber goes on from here
    if (state.stopping || uncommitted.units.length >= MAX_UNCOMMITTED || state.slice.due()) {
      return handOver(0, undefined)
    }
    const seq = pending.seq
    const visit = pending.visit
    const task = tasks[seq]!
    const taskStartedAt = clock.unsafeCurrentTimeMillis()
    const attempt = pending.attempts
    holder.began = -1
    const ran = runAttemptNow(env, spec, task, seq, attempt, input, holder, visit)
    if (ran === undefined || Effect.isEffect(ran)) return handOver(taskStartedAt, ran)
    const exit = ran.exit
    if (exit._tag !== "Success" || ran.leaseIds.length > 0) return handOver(taskStartedAt, ran)
    const value = exit.value
    const address = Traversal.address(pipelineId, seq, visit)
    // as `run`'s `runEntry` builds them for a first attempt (no cache note, no leases)
    const current = entryTask(pipelineId, runId, task, seq, visit, address, taskStartedAt)
    current.startedAt = ran.startedAt
    current.attempt = attempt
    if (isHandoff(value)) {
      const ended = clock.unsafeCurrentTimeMillis()
      const handed = handOff(
        env,
        spec,
        vs,
        task,
        current,
        attempt,
        value,
        input,
        ran,
        ran.startedAt,
        ended,
        noLeases,
        false,
        written
      )
      if (handed._tag !== "Commit") return handOver(taskStartedAt, ran)
      state.counters.handoffs++
      const unit = handed.unit
      const outcome = handed.outcome
      if (outcome._tag === "Ended") state.counters.handoffEnds++
      if (unit.traversal.state.pending === null || outcome._tag === "Ended") {
        return commitWhole(unit, (outcome as { value: unknown }).value)
      }
      // (no patch of its own: see `settlePatch`)
      uncommitted.units.push(unit)
      vs = unit.traversal.state
      written = vs.version
      lastCursor = vs.cursor
      lastEnded = ended
      input = outcome.input
      continue
    }
    const encoded = env.registryFor(task).dump(value)
    if (Either.isLeft(encoded) || encoded.right.data.byteLength >= BIG_OUTPUT_BYTES) return handOver(taskStartedAt, ran)
    const enc = encoded.right
    const ended = clock.unsafeCurrentTimeMillis()
    const next = Traversal.succeed(vs, seq, address, nTasks)
    const isLast = next.pending === null
    const unit: CheckpointUnit = {
      pipelineId,
      artifact: {
        pipelineId,
        runId,
        seq,
        taskName: task.name,
        typeName: enc.typeName,
        codec: enc.codec,
        digest: digest(enc.data),
        payload: enc.data,
        isFinal: isLast,
        createdAt: ended,
        visit
      },
      task: Rows.taskRow(current, "succeeded", attempt, ran.startedAt, ended, null, noLeases),
      // (a deferred step has no patch of its own: see `settlePatch`)
      pipeline: isLast ? endPatch(next.cursor, ended) : undefined,
      attempts: [Rows.succeededAttemptRow(current, attempt, succeededAs(attempt, undefined), ran, ended)],
      // (a deferred success has no traversal write of its own: see `written`)
      // (see `oneState`)
      traversal: isLast ? { expectedVersion: oneState ? next.version : written, state: next } : undefined
    }
    if (isLast) return commitWhole(unit, value)
    uncommitted.units.push(unit)
    vs = next
    lastCursor = next.cursor
    lastEnded = ended
    input = value
  }
}
