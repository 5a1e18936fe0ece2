/**
 * Admission: the feeder's side of a run. For each batch of specs it reads their stored rows in
 * one query, asks the pure {@link Admission.decide} what to do with each, and performs the
 * decision: skip (with its event), load a resume's checkpoint, repair a torn terminal state,
 * report a conflict (which stops the run), or admit the pipeline once an admission slot
 * (`maxAdmitted`) is free and launch its fiber.
 *
 * Everything it needs comes in one {@link AdmitEnv} record, built once per run.
 *
 * @internal
 */
import { Cause, Clock, Effect, Either, Exit, FiberSet, Option, Stream } from "effect"
import type { CodecRegistry } from "../../../domain/Codec.js"
import {
  ConfigError,
  CorruptCheckpoint,
  type PipelineIdentityConflict,
  type StoreUnavailable
} from "../../../domain/Errors.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type { AttemptRecord, PipelineRecord, RunRecord } from "../../../domain/Records.js"
import type * as Task from "../../../domain/Task.js"
import type { CheckpointUnit, NewEvent, StoreService, SucceededIndex } from "../../Store.js"
import * as Traversal from "../../../domain/Traversal.js"
import type { CheckpointNow } from "../store/front.js"
import * as Admission from "./admission.js"
import * as Controlled from "./controlled.js"
import { controlOf } from "./pipeline.js"
import type * as Pipe from "./pipeline.js"
import * as Rows from "./rows.js"
import * as SlotGate from "./slotGate.js"
import type { SlotHold } from "./slotGate.js"
import * as State from "./state.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * What admission reads from its run.
 *
 * - `policy`: the run's admission policy; `staleAfterMs`: how old an owner's heartbeat may be
 *   for the owner to count as live;
 * - `readRecord` / `finishCallback`: the durable row of a pipeline, and the user's
 *   finished-pipeline callback (for repaired pipelines);
 * - `admission`: the admission slots (`maxAdmitted`); `fibers`: where pipeline fibers run;
 * - `launch` / `launchControlled`: runs one admitted pipeline (plain, or declaring `control`)
 *   from its start; `crash`: what a pipeline fiber's
 *   defect does to the run.
 *
 * @internal
 */
export interface AdmitEnv {
  readonly state: State.RunState
  readonly store: StoreService
  /** The runs of this runner still going: alive whatever their heartbeats say. */
  readonly liveRuns: ReadonlySet<RunId>
  /** Pipeline id → the run of this runner that runs it (shared by the runner's runs). */
  readonly claimed: Map<string, string>
  readonly policy: Admission.Policy
  readonly staleAfterMs: number
  readonly registryFor: (task: Task.Any) => CodecRegistry
  readonly emit: (kind: string, pipelineId: PipelineId | null, data: unknown) => Effect.Effect<void, StoreUnavailable>
  readonly readRecord: (pipelineId: PipelineId) => Effect.Effect<PipelineRecord, StoreUnavailable>
  readonly finishCallback: (record: PipelineRecord, output: Option.Option<unknown>) => Effect.Effect<void, StoreUnavailable>
  readonly admission: SlotGate.SlotGate
  readonly fibers: FiberSet.FiberSet<void, never>
  readonly launch: (spec: AnySpec, start: Pipe.Start) => Effect.Effect<void, StoreUnavailable>
  /** Runs one admitted pipeline that declares `control` (see `controlled.ts`). */
  readonly launchControlled: (spec: AnySpec, start: Controlled.ControlledStart) => Effect.Effect<void, StoreUnavailable>
  readonly crash: (cause: Cause.Cause<unknown>) => Effect.Effect<void>
  /**
   * A pipeline of synchronous tasks run without a fiber of its own (see `Pipeline.runNow`,
   * and `Controlled.runNow` for one that declares control), when the run allows it (no run
   * hooks, no finished-pipeline callback, a store built by the front): `run` (or
   * `runControlled`) runs it, `commit` submits its checkpoint with a
   * callback (see `CheckpointNow`), `succeeded` counts it once that has committed (what the
   * general path does after its last checkpoint). `undefined`: every pipeline gets its fiber.
   */
  readonly now?: NowRun | undefined
}

/**
 * What running a pipeline without a fiber of its own needs (see {@link AdmitEnv.now}).
 *
 * @internal
 */
export interface NowRun {
  readonly run: (spec: AnySpec, start: Pipe.Start) => Pipe.NowOutcome | undefined
  /** The same for a pipeline that declares control (see `Controlled.runNow`). */
  readonly runControlled: (spec: AnySpec, start: Controlled.ControlledStart) => Controlled.NowOutcome | undefined
  readonly commit: CheckpointNow
  readonly succeeded: (pipelineId: PipelineId) => void
}

/** A pipeline's run without a fiber of its own, given its admission (see {@link NowRun}). */
type NowRunner = (admission: Pipe.Admission) => Pipe.NowOutcome | Controlled.NowOutcome | undefined

/**
 * The pipelines run without a fiber whose checkpoints are submitted and not yet committed,
 * waited for by one fiber of the run's fiber set (so the run ends, or stops, only once they
 * have committed, as it waits for a pipeline fiber's last, uninterruptible checkpoint).
 */
interface Wave {
  pending: number
  resume: (() => void) | undefined
  failure: Cause.Cause<unknown> | undefined
  done: boolean
}

/**
 * The admission of one run: `admitBatch(specs)` (called by the feeder, in source order) and
 * `conflict()`, the identity conflict that stopped the run (or `null`).
 *
 * @internal
 */
export const make = (env: AdmitEnv) => {
  const { admission, crash, emit, fibers, finishCallback, readRecord, registryFor, staleAfterMs, state, store } = env
  const runId = state.runId
  const policy = env.policy
  // Run records of the owners of stored rows, looked up once per run.
  const runCaches = new Map<string, Option.Option<RunRecord>>()
  // Pipelines admitted by this run and not finished (at most maxAdmitted): a repeat of one of
  // them must not start it a second time while its admission row may not be durable yet.
  const inFlight = new Map<string, AnySpec>()
  let conflict: PipelineIdentityConflict | null = null
  // A pipeline that declares control on a store without the traversal capability: the run
  // stops before writing it (never a silent, non-durable loop).
  let refusal: ConfigError | null = null

  const ownerStatus = (ownerRunId: RunId, now: number) =>
    Effect.gen(function*(): Effect.fn.Return<Admission.OwnerStatus, StoreUnavailable> {
      // another run of this process on this store: alive whatever its heartbeat says
      if (env.liveRuns.has(ownerRunId)) return "live"
      let cached = runCaches.get(ownerRunId)
      if (cached === undefined) {
        cached = yield* store.getRun(ownerRunId)
        runCaches.set(ownerRunId, cached)
      }
      if (Option.isNone(cached)) return "silent"
      const r = cached.value
      if (r.status !== "running") return "finished"
      return now - r.heartbeatAt < staleAfterMs ? "live" : "silent"
    })

  /**
   * The attempt the dead owner `ownerRunId` had in flight at `seq` (`visit`), numbered from
   * what the store recorded of it (one read of the pipeline's attempts, made only for a
   * pipeline claimed from a dead run, never on a clean resume): on a plain pipeline the number
   * after the owner's recorded attempts of that task (1 when none), in the owner's task run;
   * on a control pipeline the number reserved for it (`reserved`). `undefined` when the
   * records show that nothing was in flight: the reserved number already has its row, or the
   * owner's last attempt there was not to be retried.
   */
  const inFlightAttempt = (pipelineId: PipelineId, ownerRunId: RunId, seq: number, visit: number, reserved: number | undefined) =>
    Effect.map(Stream.runCollect(store.streamAttempts({ pipelineId })), (attempts): Rows.InFlight | undefined => {
      let last: AttemptRecord | undefined
      for (const a of attempts) {
        if (a.seq !== seq || a.visit !== visit || a.errorType === "Abandoned") continue
        if (reserved !== undefined) {
          if (a.attemptNo === reserved) return undefined
        } else if (a.runId === ownerRunId && (last === undefined || a.attemptNo > last.attemptNo)) {
          last = a
        }
      }
      if (reserved !== undefined) return { seq, visit, attemptNo: reserved }
      if (last === undefined) return { seq, visit, attemptNo: 1 }
      const decision = last.decision as { readonly retry?: unknown } | null
      return decision !== null && decision.retry === false
        ? undefined
        : { seq, visit, attemptNo: last.attemptNo + 1, taskRunId: last.taskRunId }
    })

  /**
   * The `pipeline.abandoned` event of a pipeline claimed from the dead run `ownerRunId` with an
   * attempt in flight, or next, at `a` (issue 18, F3). The store keeps no durable mark of an
   * attempt's start, so that attempt may have run (a paid call made, its answer lost) or not
   * begun at all (the pipeline only admitted, or waiting for a worker slot or a retry's delay):
   * no attempt row is invented for it, so attempt counts hold only what ran and was recorded.
   * Data: `task` and `seq` (and `visit` on a control pipeline) where it was, `run` the run it
   * belonged to, `attemptNo` the number that attempt had (a control pipeline's resume skips it).
   * `assay report` counts these per dead run, bounded by that run's concurrency.
   */
  const abandonedEvent = (spec: AnySpec, ownerRunId: RunId, a: Rows.InFlight, now: number): NewEvent => ({
    kind: "pipeline.abandoned",
    pipelineId: spec.pipelineId,
    runId,
    data: {
      run: ownerRunId,
      task: (spec.template.tasks as ReadonlyArray<Task.Any>)[a.seq]?.name ?? null,
      seq: a.seq,
      ...(a.visit === 0 ? {} : { visit: a.visit }),
      attemptNo: a.attemptNo
    },
    ts: now
  })

  /** The input of a resume at `cursor` (> 0): its checkpoint, or a restart from the seed. */
  const loadStart = (spec: AnySpec, d: Extract<Admission.Admission, { _tag: "Resume" }>, now: number) =>
    Effect.gen(function*(): Effect.fn.Return<{ start: Pipe.Start; events: ReadonlyArray<NewEvent> }, StoreUnavailable> {
      const cursor = d.cursor
      const restart = (kind: string, why: string) => ({
        start: { cursor: 0, input: spec.seed },
        events: [{ kind, pipelineId: spec.pipelineId, runId, data: { cursor, reason: why }, ts: now }]
      })
      const loaded = yield* store.getArtifact(spec.pipelineId, cursor - 1)
      if (Option.isNone(loaded)) return restart("pipeline.checkpoint_missing", "no artifact at the cursor")
      const { artifact, payload } = loaded.value
      if (!artifact.available || payload === undefined) {
        return restart("pipeline.checkpoint_missing", "artifact payload unavailable")
      }
      const task = (spec.template.tasks as ReadonlyArray<Task.Any>)[cursor - 1]!
      const decoded = registryFor(task).load({ typeName: artifact.typeName, codec: artifact.codec, data: payload })
      if (decoded._tag === "Left") return restart("pipeline.checkpoint_unusable", decoded.left.message)
      return {
        start: { cursor, input: decoded.right },
        events: d.claimedFrom === undefined
          ? []
          : [{ kind: "pipeline.claimed", pipelineId: spec.pipelineId, runId, data: { from: d.claimedFrom, cursor }, ts: now }]
      }
    })

  const repair = (spec: AnySpec, stored: PipelineRecord) =>
    Effect.gen(function*(): Effect.fn.Return<Option.Option<Option.Option<unknown>>, StoreUnavailable> {
      const now = yield* Clock.currentTimeMillis
      const nTasks = spec.template.nTasks
      const loaded = yield* store.getArtifact(spec.pipelineId, nTasks - 1)
      const task = (spec.template.tasks as ReadonlyArray<Task.Any>)[nTasks - 1]!
      const usable = Option.flatMap(loaded, ({ artifact, payload }) => {
        if (!artifact.available || payload === undefined) return Option.none()
        const decoded = registryFor(task).load({ typeName: artifact.typeName, codec: artifact.codec, data: payload })
        return decoded._tag === "Right" ? Option.some(decoded.right) : Option.none()
      })
      if (Option.isNone(usable)) return Option.none()
      const settled = yield* Effect.either(
        Effect.zipRight(
          store.markFinal(spec.pipelineId, nTasks - 1),
          store.settlePipeline(spec.pipelineId, { state: "succeeded", nTasksDone: nTasks, runId, endedAt: now })
        )
      )
      if (settled._tag === "Left") {
        state.counters.repairFailures++
        yield* emit("pipeline.terminal_repair_failed", spec.pipelineId, { phase: "settle", error: settled.left.message })
        return Option.some(Option.none<unknown>())
      }
      yield* emit("pipeline.terminal_repaired", spec.pipelineId, {
        previousState: stored.state,
        previousRunId: stored.runId,
        errorMessage: stored.errorMessage
      })
      return Option.some(Option.some(usable.value))
    })

  // The pipelines the store held as succeeded before this run admitted anything, read once at
  // the first batch (none under retrySucceeded, which skips nothing): a spec among them with
  // the same digests is skipped without reading its row; every other spec (new, unfinished,
  // other digests, or finished during this run) is looked up with its batch as before.
  let succeeded: SucceededIndex | undefined | null = null
  const succeededIndex = Effect.suspend(() =>
    succeeded !== null
      ? Effect.succeed(succeeded)
      : policy.retrySucceeded || store.succeededPipelines === undefined
      ? Effect.sync(() => (succeeded = undefined))
      : Effect.map(store.succeededPipelines, (index) => (succeeded = index.size === 0 ? undefined : index))
  )
  const knownSucceeded = (index: SucceededIndex, spec: AnySpec): boolean =>
    index.has(spec.pipelineId, spec.specDigest, spec.seedDigest, !spec.explicitKey)
  const NO_ROWS: ReadonlyMap<PipelineId, PipelineRecord> = new Map()
  /**
   * Skips a spec the index knows as succeeded when it is finished before this run, not
   * repeated, and not another run's of this runner: as `decide` would (see `decideSucceeded`),
   * without claiming it. `false`: the spec goes through the full decision.
   */
  const skipKnown = (spec: AnySpec, seenInBatch: Map<string, AnySpec>): boolean => {
    const id = spec.pipelineId
    if (
      (env.claimed.size > 0 && env.claimed.has(id)) || seenInBatch.has(id) ||
      (inFlight.size > 0 && inFlight.has(id)) || (store.traversal === undefined && controlOf(spec.template) !== undefined)
    ) return false
    seenInBatch.set(id, spec)
    State.countSkip(state, spec)
    return true
  }

  const admitBatch = (batch: ReadonlyArray<AnySpec>) =>
    Effect.gen(function*() {
      if (batch.length === 0) return
      const now = yield* Clock.currentTimeMillis
      const index = yield* succeededIndex
      // 1 for a spec the index settles (the common case of a resume: one flag, no array of specs)
      let known: Uint8Array | undefined
      let unknown: ReadonlyArray<AnySpec> = batch
      if (index !== undefined) {
        known = new Uint8Array(batch.length)
        const rest: Array<AnySpec> = []
        for (let i = 0; i < batch.length; i++) {
          if (knownSucceeded(index, batch[i]!)) known[i] = 1
          else rest.push(batch[i]!)
        }
        unknown = rest
      }
      const storedMap = unknown.length === 0 ? NO_ROWS : yield* store.getPipelines(unknown.map((s) => s.pipelineId))
      const seenInBatch = new Map<string, AnySpec>()
      for (let i = 0; i < batch.length; i++) {
        const spec = batch[i]!
        // a turn of the event loop after a slice of synchronous work (a signal reaches the run
        // there; see `slice.ts`), then nothing more once the run is stopping
        if (state.slice.due()) yield* state.slice.turn
        if (state.stopping) return
        const isKnown = known !== undefined && known[i] === 1
        if (isKnown && skipKnown(spec, seenInBatch)) continue
        const stored = storedMap.get(spec.pipelineId)
        const controlled = controlOf(spec.template) !== undefined
        if (controlled && store.traversal === undefined) {
          const message = `pipeline "${spec.template.name}" declares control, but the store has no traversal ` +
            `capability (durable visit state, handoff ledger): it cannot run control flow durably`
          refusal = new ConfigError({ message, issues: [{ path: "pipeline.control", message }] })
          State.requestStop(state, "config_error")
          return
        }
        // Another run of this runner is running it (its rows may not be durable yet): skip.
        const claimant = env.claimed.get(spec.pipelineId)
        if (claimant !== undefined && claimant !== runId) {
          State.countSkip(state, spec)
          yield* emit("pipeline.skipped", spec.pipelineId, { reason: "owned_by_another_run", owner: claimant })
          continue
        }
        // Claimed from the decision on (admission may wait for a slot); given back below unless
        // the pipeline was launched (then its fiber gives it back when it ends).
        if (claimant === undefined) env.claimed.set(spec.pipelineId, runId)
        try {
          const earlier = seenInBatch.get(spec.pipelineId) ?? inFlight.get(spec.pipelineId)
          if (earlier === undefined) seenInBatch.set(spec.pipelineId, spec)
          const owner = earlier === undefined && Admission.needsOwner(stored, policy)
            ? yield* ownerStatus(stored.runId, now)
            : undefined
          const decision = isKnown ? Admission.decideSucceeded({
            pipelineId: spec.pipelineId,
            specDigest: spec.specDigest,
            seedDigest: spec.seedDigest,
            nTasks: spec.template.nTasks
          }, earlier) : Admission.decide({
            spec: {
              pipelineId: spec.pipelineId,
              specDigest: spec.specDigest,
              seedDigest: spec.seedDigest,
              nTasks: spec.template.nTasks
            },
            earlier,
            stored,
            owner,
            policy
          })
          if (controlled && decision._tag !== "Skip" && decision._tag !== "Conflict") {
            yield* admitControlled(spec, decision, stored, now)
            continue
          }
          switch (decision._tag) {
            case "Skip":
              State.countSkip(state, spec)
              if (decision.reason === "owned_by_another_run" && decision.owner !== undefined) {
                state.heldByOtherRuns.set(decision.owner, (state.heldByOtherRuns.get(decision.owner) ?? 0) + 1)
              }
              if (decision.reason !== "succeeded") {
                yield* emit("pipeline.skipped", spec.pipelineId, decision.owner === undefined
                  ? { reason: decision.reason }
                  : { reason: decision.reason, owner: decision.owner })
              }
              continue
            case "Conflict": {
              const e = decision.error
              conflict = e
              yield* emit("pipeline.identity_conflict", spec.pipelineId, {
                storedSpecDigest: e.storedSpecDigest,
                specDigest: e.specDigest,
                storedSeedDigest: e.storedSeedDigest,
                seedDigest: e.seedDigest,
                ...(decision.duplicateInRun ? { duplicateInRun: true } : {})
              })
              State.requestStop(state, "identity_conflict")
              return
            }
            case "Corrupt":
              yield* refuse(spec, now, {
                kind: "pipeline.corrupt_cursor",
                cursor: decision.record.nTasksDone,
                data: { nTasks: spec.template.nTasks },
                errorType: "CorruptCheckpoint",
                message: new CorruptCheckpoint({
                  pipelineId: spec.pipelineId,
                  message: `cursor ${decision.record.nTasksDone} is past the last task (${spec.template.nTasks})`
                }).message,
                fix: "resume with --fresh-restart to run it again from its seed"
              })
              continue
            case "Repair": {
              const repaired = yield* repair(spec, decision.record)
              if (Option.isSome(repaired)) {
                if (Option.isSome(repaired.value)) {
                  state.counters.succeeded++
                  const record = yield* readRecord(spec.pipelineId)
                  yield* finishCallback(record, repaired.value)
                }
                continue
              }
              // The terminal artifact is unusable: restart from the seed.
              yield* admitOne(spec, { cursor: 0, input: spec.seed }, false, false, [{
                kind: "pipeline.checkpoint_unusable",
                pipelineId: spec.pipelineId,
                runId,
                data: { cursor: decision.record.nTasksDone, reason: "terminal artifact missing or undecodable" },
                ts: now
              }], decision.record, now)
              continue
            }
            case "FromSeed":
              yield* admitOne(
                spec,
                { cursor: 0, input: spec.seed },
                decision.abandonedTask,
                decision.isNew,
                decision.event === undefined
                  ? []
                  : [{ kind: decision.event.kind, pipelineId: spec.pipelineId, runId, data: decision.event.data, ts: now }],
                stored,
                now
              )
              continue
            case "Resume": {
              const { events, start } = yield* loadStart(spec, decision, now)
              yield* admitOne(spec, start, decision.abandonedTask, false, events, stored, now)
            }
          }
        } finally {
          if (!inFlight.has(spec.pipelineId) && env.claimed.get(spec.pipelineId) === runId) {
            env.claimed.delete(spec.pipelineId)
          }
        }
      }
    })

  /**
   * Admission of a pipeline that declares control (the seed's recovery table): a new one
   * starts its traversal at the seed; a restart (`freshRestart`, or a succeeded one under
   * `retrySucceeded`) starts from the seed with a fresh budget, keeping the visit counters;
   * any other stored row continues at its exact persisted visit, pending entry and attempt
   * numbers (the next number reserved before the task runs). A row without traversal state is
   * refused (corrupt visit checkpoint, see `refuse`); a pending entry whose payload is gone replays the seed
   * keeping budget and counters (`pipeline.checkpoint_missing`).
   */
  const admitControlled = (spec: AnySpec, decision: Admission.Admission, stored: PipelineRecord | undefined, now: number) => {
    if (decision._tag === "FromSeed" && decision.isNew) {
      // a new pipeline (the common case): admitted at once, no generator of its own
      const initial = Traversal.initial(spec.pipelineId, spec.template.nTasks)
      const start = { state: initial, input: Controlled.seedInput(spec), prepare: undefined }
      return admitWith(
        spec,
        0,
        (admission) => env.launchControlled(spec, { ...start, admission }),
        true,
        [],
        stored,
        now,
        initial,
        // a controlled pipeline of synchronous tasks without a fiber (see `Controlled.runNow`)
        env.now === undefined ? undefined : (admission) => env.now!.runControlled(spec, { ...start, admission })
      )
    }
    return Effect.gen(function*() {
      const pipelineId = spec.pipelineId
      const nTasks = spec.template.nTasks
      const traversal = store.traversal!
      const event = (kind: string, data: unknown): NewEvent => ({ kind, pipelineId, runId, data, ts: now })
      const launch = (start: Omit<Controlled.ControlledStart, "admission">) => (admission: Pipe.Admission | undefined) =>
        env.launchControlled(spec, { ...start, admission })
      const persisted = yield* traversal.visitState(pipelineId)
      if (decision._tag === "FromSeed" && decision.event !== undefined) {
        // a deliberate restart from the seed: new budget, active traversal cleared, counters kept
        const events = [event(decision.event.kind, decision.event.data)]
        if (Option.isNone(persisted)) {
          // nothing to keep: the traversal starts over (the fix for a missing traversal state)
          const initial = Traversal.initial(pipelineId, nTasks)
          return yield* admitWith(
            spec,
            0,
            launch({ state: initial, input: Controlled.seedInput(spec), prepare: undefined }),
            false,
            events,
            stored,
            now,
            initial
          )
        }
        const fresh = Traversal.freshRestart(persisted.value, nTasks)
        return yield* admitWith(
          spec,
          persisted.value.cursor,
          launch({ state: persisted.value, input: Controlled.seedInput(spec), prepare: fresh, invalidateFrom: 0 }),
          false,
          events,
          stored,
          now,
          undefined
        )
      }
      if (Option.isNone(persisted)) {
        return yield* refuse(spec, now, {
          kind: "pipeline.corrupt_checkpoint",
          cursor: stored?.nTasksDone ?? 0,
          data: {},
          errorType: "CorruptCheckpoint",
          message: new CorruptCheckpoint({ pipelineId, message: "corrupt visit checkpoint: missing traversal state" })
            .message,
          fix: "resume with --fresh-restart (RunOptions.freshRestart) to start it again from its seed with a new budget"
        })
      }
      const vs = persisted.value
      // an attempt of the dead owner was in flight (or next) at the pending entry: a
      // `pipeline.abandoned` event naming the number reserved for it (which the resume's
      // reservation skips), never an attempt row (see `abandonedEvent`)
      const inFlight = (decision._tag === "Resume" || decision._tag === "FromSeed") && decision.abandonedTask &&
          vs.pending !== null && stored !== undefined
        ? yield* inFlightAttempt(pipelineId, stored.runId, vs.pending.seq, vs.pending.visit, vs.pending.attempts)
        : undefined
      const events: Array<NewEvent> = []
      if (inFlight !== undefined) events.push(abandonedEvent(spec, stored!.runId, inFlight, now))
      if (decision._tag === "Resume" && decision.claimedFrom !== undefined) {
        events.push(event("pipeline.claimed", { from: decision.claimedFrom, cursor: vs.cursor }))
      }
      if (vs.pending === null) {
        // Every step is committed (the traversal is complete) but the row says otherwise:
        // settle it succeeded without running anything (its final artifact was marked by the
        // same commit that completed the traversal).
        const settled = yield* Effect.either(
          store.settlePipeline(pipelineId, { state: "succeeded", nTasksDone: vs.cursor, runId, endedAt: now })
        )
        if (settled._tag === "Left") {
          state.counters.repairFailures++
          return yield* emit("pipeline.terminal_repair_failed", pipelineId, { phase: "settle", error: settled.left.message })
        }
        yield* emit("pipeline.terminal_repaired", pipelineId, {
          previousState: stored?.state ?? null,
          previousRunId: stored?.runId ?? null,
          errorMessage: stored?.errorMessage ?? null
        })
        state.counters.succeeded++
        return yield* finishCallback(yield* readRecord(pipelineId), Option.none())
      }
      const loaded = yield* loadEntry(spec, vs.pending.input)
      if (Either.isLeft(loaded) && loaded.left.unregistered) {
        // The payload is there but this program's codec registry does not know its codec or
        // type (a registration left out, e.g. `HistoryArtifact.register`): replaying the seed
        // would silently drop the entry state the author chose. Refused (failed under this run,
        // its traversal untouched): a resume with the registration continues the same visit.
        return yield* refuse(spec, now, {
          kind: "pipeline.checkpoint_undecodable",
          cursor: vs.cursor,
          data: { entry: vs.pending.input },
          errorType: "ArtifactCodecError",
          message: loaded.left.reason,
          fix: "register the payload's codec or type in the run's CodecRegistry (e.g. `HistoryArtifact.register`, or " +
            "declare it as the output Schema of a task of the pipeline) and resume"
        })
      }
      if (Either.isLeft(loaded)) {
        // the pending payload is gone: replay the seed, keeping the budget and the counters
        events.push(event("pipeline.checkpoint_missing", {
          cursor: vs.cursor,
          entry: vs.pending.input,
          reason: loaded.left.reason
        }))
        const replay = Traversal.seedReplay(vs, nTasks)
        return yield* admitWith(
          spec,
          vs.cursor,
          launch({ state: vs, input: Controlled.seedInput(spec), prepare: replay, invalidateFrom: 0 }),
          false,
          events,
          stored,
          now,
          undefined
        )
      }
      return yield* admitWith(
        spec,
        vs.cursor,
        launch({ state: vs, input: loaded.right, prepare: Traversal.reserveAttempt(vs) }),
        false,
        events,
        stored,
        now,
        undefined
      )
    })
  }

  /**
   * The decoded input at an occurrence address, or why it cannot be had (`unregistered`: the
   * payload exists but this registry does not know its codec or type).
   */
  const loadEntry = (spec: AnySpec, address: string) =>
    Effect.gen(function*(): Effect.fn.Return<
      Either.Either<unknown, { readonly reason: string; readonly unregistered: boolean }>,
      StoreUnavailable
    > {
      const pipelineId = spec.pipelineId
      const missing = (reason: string) => Either.left({ reason, unregistered: false })
      if (address === Traversal.address(pipelineId, -1, 0)) return Either.right(Controlled.seedInput(spec))
      const loaded = yield* store.traversal!.getArtifactById(address)
      if (Option.isNone(loaded)) return missing(`no artifact ${address}`)
      const { artifact, payload } = loaded.value
      if (!artifact.available || payload === undefined) return missing(`artifact ${address} payload unavailable`)
      const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
      // a task output decodes with its task's registry; a handoff payload (written with its
      // source's codecs or any task's output Schema: see `Controlled.dumpPayload`) with all of them
      const registry = artifact.seq < tasks.length
        ? registryFor(tasks[artifact.seq]!)
        : Controlled.payloadRegistry(registryFor, tasks)
      const decoded = registry.load({ typeName: artifact.typeName, codec: artifact.codec, data: payload })
      return Either.mapLeft(decoded, (e) => ({
        reason: `artifact ${address} undecodable: ${e.message}`,
        unregistered: e.unregistered === true
      }))
    })

  /**
   * A claim lost to another writer of the store (see `claimAdmission`): the pipeline is not
   * run; it counts as skipped, and as held by the winner unless the winner already finished it.
   */
  const lostClaim = (spec: AnySpec, current: PipelineRecord | undefined) =>
    Effect.suspend(() => {
      state.counters.admitted--
      State.countSkip(state, spec)
      if (current === undefined) return emit("pipeline.skipped", spec.pipelineId, { reason: "owned_by_another_run" })
      if (current.state === "running" || current.state === "pending") {
        state.heldByOtherRuns.set(current.runId, (state.heldByOtherRuns.get(current.runId) ?? 0) + 1)
      }
      return emit("pipeline.skipped", spec.pipelineId, { reason: "owned_by_another_run", owner: current.runId })
    })

  /**
   * A pipeline the run refuses at admission (a corrupt cursor or visit checkpoint, an entry
   * payload this program cannot decode): accounted exactly like a pipeline that failed while
   * running, in one place. Its row becomes `failed` under this run with the cause and the fix
   * as its error (so the summary, `assay report`, the exit code and `run.finished` agree), the
   * refusal event records the same, and `onPipelineFinished` hears of it. Nothing else of the
   * row is touched (cursor, traversal, artifacts): the fix, then a resume, continues it.
   */
  const refuse = (spec: AnySpec, now: number, r: {
    readonly kind: string
    readonly cursor: number
    readonly data: Record<string, unknown>
    readonly errorType: string
    readonly message: string
    readonly fix: string
  }) =>
    Effect.gen(function*() {
      const pipelineId = spec.pipelineId
      const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
      const errorMessage = `${r.message}; fix: ${r.fix}`
      State.decideFailure(state, spec)
      state.counters.failed++
      yield* emit(r.kind, pipelineId, { cursor: r.cursor, ...r.data, error: r.message, fix: r.fix })
      yield* store.updatePipeline(pipelineId, {
        state: "failed",
        runId,
        startedAt: now,
        endedAt: now,
        error: {
          failedTask: tasks[r.cursor]?.name ?? null,
          errorType: r.errorType,
          errorMessage,
          errorClass: "fatal"
        },
        updatedAt: now
      })
      yield* finishCallback(yield* readRecord(pipelineId), Option.none())
    })

  /**
   * Admits a plain pipeline at `start`. `abandonedTask`: its stored row was claimed from a dead
   * owner run with an attempt in flight (or next) at the stored cursor (only ever with a stored
   * row: see `Admission.decide`), recorded as a `pipeline.abandoned` event of the admission.
   */
  const admitOne = (
    spec: AnySpec,
    start: Pipe.Start,
    abandonedTask: boolean,
    isNew: boolean,
    events: ReadonlyArray<NewEvent>,
    stored: PipelineRecord | undefined,
    now: number
  ) =>
    // the dead owner's attempt in flight (or next) at the stored cursor: a `pipeline.abandoned`
    // event, never an attempt row (see `abandonedEvent`)
    abandonedTask && stored !== undefined
      ? Effect.flatMap(inFlightAttempt(spec.pipelineId, stored.runId, stored.nTasksDone, 0, undefined), (a) =>
        admitWith(
          spec,
          start.cursor,
          (admission) => env.launch(spec, { ...start, admission }),
          isNew,
          a === undefined ? events : [...events, abandonedEvent(spec, stored.runId, a, now)],
          stored,
          now,
          undefined
        ))
      : admitWith(
        spec,
        start.cursor,
        (admission) => env.launch(spec, { ...start, admission }),
        isNew,
        events,
        stored,
        now,
        undefined,
        env.now === undefined ? undefined : (admission) => env.now!.run(spec, { ...start, admission })
      )

  const admitWith = (
    spec: AnySpec,
    cursor: number,
    launch: (admission: Pipe.Admission | undefined) => Effect.Effect<void, StoreUnavailable>,
    isNew: boolean,
    events: ReadonlyArray<NewEvent>,
    stored: PipelineRecord | undefined,
    now: number,
    initial: Traversal.VisitState | undefined,
    runNow?: NowRunner | undefined
  ): Effect.Effect<void> =>
    // no generator per admitted pipeline: a free admission slot starts its fiber at once
    Effect.suspend(() => {
      // The feeder is interrupted when the run stops, which ends this wait.
      const hold = SlotGate.emptyHold()
      return admission.tryTake(hold)
        ? admitHeld(spec, cursor, launch, isNew, events, stored, now, initial, hold, runNow)
        : Effect.flatMap(
          admission.take(hold),
          () => admitHeld(spec, cursor, launch, isNew, events, stored, now, initial, hold, runNow)
        )
    })

  // The wave of pipelines run without a fiber that are waiting for their commits (see `Wave`).
  let wave: Wave | undefined
  const awaitWave = (w: Wave): Effect.Effect<void> =>
    Effect.flatMap(
      Effect.uninterruptible(Effect.async<void>((resume) => {
        const end = () => {
          w.done = true
          resume(Effect.void)
        }
        if (w.pending === 0) end()
        else w.resume = end
      })),
      () => w.failure === undefined ? Effect.void : crash(w.failure)
    )

  /**
   * A pipeline `runNow` ran to its end: its one checkpoint submitted with a callback that
   * counts it succeeded and gives back what the fiber's end would (admission slot, claim); one
   * fiber per wave waits for the wave's commits. A checkpoint that cannot be submitted so gets
   * a fiber of its own, as before.
   */
  const commitNow = (
    spec: AnySpec,
    unit: CheckpointUnit,
    hold: SlotHold
  ): Effect.Effect<void> => {
    // (made here, not by the caller: a closure made in `admitHeld` would keep its whole
    // context, the pipeline's launchers and admission among it, until the wave's commit)
    const release = () => released(spec, hold)
    const now = env.now!
    const pipelineId = spec.pipelineId
    let w = wave
    const fresh = w === undefined || w.done
    if (fresh) w = wave = { pending: 0, resume: undefined, failure: undefined, done: false }
    const joined = w!
    joined.pending++
    const submitted = now.commit(unit, (exit) => {
      if (Exit.isSuccess(exit)) now.succeeded(pipelineId)
      else if (joined.failure === undefined) joined.failure = exit.cause
      release()
      joined.pending--
      if (joined.pending === 0 && joined.resume !== undefined) joined.resume()
    })
    if (!submitted) {
      joined.pending--
      return Effect.zipRight(
        fresh ? FiberSet.run(fibers, awaitWave(joined)) : Effect.void,
        Effect.asVoid(FiberSet.run(
          fibers,
          Effect.uninterruptible(store.checkpoint(unit)).pipe(
            Effect.zipRight(Effect.sync(() => now.succeeded(pipelineId))),
            Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.void : crash(cause)),
            Effect.ensuring(Effect.sync(release))
          )
        ))
      )
    }
    return fresh ? Effect.asVoid(FiberSet.run(fibers, awaitWave(joined))) : Effect.void
  }

  /** {@link admitWith} once its admission slot (`hold`) is held: starts the pipeline's fiber. */
  const admitHeld = (
    spec: AnySpec,
    cursor: number,
    launch: (admission: Pipe.Admission | undefined) => Effect.Effect<void, StoreUnavailable>,
    isNew: boolean,
    events: ReadonlyArray<NewEvent>,
    stored: PipelineRecord | undefined,
    now: number,
    initial: Traversal.VisitState | undefined,
    hold: SlotHold,
    runNow?: NowRunner | undefined
  ): Effect.Effect<void> => {
    if (state.stopping) {
      admission.release(hold)
      return Effect.void
    }
    state.admitted++
    state.counters.admitted++
    inFlight.set(spec.pipelineId, spec)
    if (state.admitted > state.peakAdmitted) state.peakAdmitted = state.admitted
    const record = Rows.admissionRow(spec, cursor, stored, runId, now)
    // The seed is stored once, with the row, as the artifact at seq -1.
    const seeds = isNew ? [Rows.seedArtifact(spec, runId, now)] : []
    // The row is written by the pipeline's own fiber, so that the admissions of many
    // pipelines share one group commit instead of the feeder waiting for each (and a plain
    // pipeline whose first task is synchronous commits it with that task's checkpoint).
    const written: Pipe.Admission = {
      write: initial === undefined
        ? { pipelines: [record], seeds }
        : { pipelines: [record], seeds, traversals: [{ pipelineId: spec.pipelineId, state: initial }] },
      events
    }
    // On a store other processes write (Postgres), the admission is a claim: written only
    // if the row is still what this decision saw, so of two runs admitting the pipeline at
    // once exactly one runs it; the other skips it as held by the winner.
    const claim = store.claimAdmission
    // a plain pipeline of synchronous tasks runs here, without a fiber (see `Pipeline.runNow`)
    const ran = claim === undefined && runNow !== undefined ? runNow(written) : undefined
    if (ran !== undefined) {
      return ran._tag === "Commit"
        ? commitNow(spec, ran.unit, hold)
        : ran._tag === "Continue"
        ? forkPipeline(spec, hold, env.launch(spec, ran.start))
        : forkPipeline(spec, hold, env.launchControlled(spec, ran.start))
    }
    const started = claim === undefined ? launch(written) : Effect.flatMap(
      claim(written.write, stored === undefined ? undefined : {
        runId: stored.runId,
        state: stored.state,
        nTasksDone: stored.nTasksDone,
        updatedAt: stored.updatedAt
      }),
      (outcome) =>
        outcome._tag === "Won"
          ? launch(written.events.length === 0 ? undefined : { write: { pipelines: [] }, events: written.events })
          : lostClaim(spec, outcome.current)
    )
    return forkPipeline(spec, hold, started)
  }

  /** What the end of an admitted pipeline gives back: its admission slot and its claim. */
  const released = (spec: AnySpec, hold: SlotHold): void => {
    admission.release(hold)
    state.admitted--
    inFlight.delete(spec.pipelineId)
    if (env.claimed.get(spec.pipelineId) === runId) env.claimed.delete(spec.pipelineId)
  }

  /** Runs an admitted pipeline's fiber in the run's fiber set (a defect crashes the run). */
  const forkPipeline = (spec: AnySpec, hold: SlotHold, fiber: Effect.Effect<void, StoreUnavailable>): Effect.Effect<void> =>
    Effect.asVoid(FiberSet.run(
      fibers,
      fiber.pipe(
        Effect.catchAllCause((cause) => Cause.isInterruptedOnly(cause) ? Effect.void : crash(cause)),
        Effect.ensuring(Effect.sync(() => released(spec, hold)))
      )
    ))

  return {
    admitBatch,
    conflict: (): PipelineIdentityConflict | null => conflict,
    refusal: (): ConfigError | null => refusal
  }
}
