/**
 * A pipeline that declares `control` (handoffs, rewinds, retry-all: docs/control-flow.md) on
 * the cluster engine. Its steps are not mapped onto the engine's per-task executions: the
 * embedded engine's controlled driver (`runner/controlled.ts`, `Controlled.run`) runs the
 * whole traversal in one execution, with the same rows, ledger, visits, budget and artifacts,
 * and the cluster adds who may run it and when it must stop:
 *
 * - ownership: in window-claims mode the window's claim (its local deadline, in memory); in
 *   the default mode one task claim for the whole pipeline (`inflight.ts`, at seq `nTasks`,
 *   past every task), renewed every heartbeat and fenced by one statement after every lease,
 *   the last step before a call. An execution whose ownership is gone calls nothing more: the
 *   lease goes back and the execution is interrupted, writing nothing
 *   (`PipelineEnv.fencedTraversal`);
 * - every execution starts from the store's traversal state (`visitState`), never from memory:
 *   its first write is version-checked (a fresh pipeline's start mark, or the reservation of
 *   the next attempt number at the pending entry), so a committed step is never run again
 *   and an attempt number that a dead or stale execution may have used is never used again;
 * - every later write is version-checked too (`Controlled.run`: a step, a transition, a
 *   retry's reservation; a terminal failure under `fencedTraversal`): a stale executor's
 *   write is refused with `TraversalConflict` and nothing of it is stored. An execution that
 *   meets a conflict reads the state again while it still owns the pipeline, else stops;
 * - a store error at a commit (L5) retries the write, not the call (a retried write that had
 *   committed meets its own version as a conflict, and the state read again says so);
 * - a cancel (`cancelMarks.ts`: the run or the pipeline marked) stops the pipeline before its
 *   next entry, or once a lease is granted (the lease goes back, nothing is called), as a plain
 *   pipeline stops at its task boundary and at its lease; its row ends `interrupted` at the
 *   traversal position this execution last committed, version-checked like every other write:
 *   a zombie (its ownership lost between its check and this commit) never moves the row back
 *   over a new owner's step.
 *
 * The start follows the embedded engine's recovery table: no traversal state under a row is a
 * corrupt visit checkpoint (the row fails, nothing runs), a complete traversal under a row not
 * settled is settled `succeeded`, a pending payload whose codec is not registered fails the
 * row, a missing pending payload replays the seed keeping the budget and the visit counters
 * (`pipeline.checkpoint_missing`).
 *
 * @internal
 */
import { Deferred, Effect, Either, FiberId, Option, Schedule, type Scope } from "effect"
import { CorruptCheckpoint, type StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import type { Lease, AcquireOptions } from "../../../domain/Lease.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type * as Task from "../../../domain/Task.js"
import { readOnlyView } from "../../../domain/TaskStore.js"
import * as Traversal from "../../../domain/Traversal.js"
import type { Holder, PoolsService } from "../../Pools.js"
import type { CheckpointUnit, StoreService } from "../../Store.js"
import type { AttemptShared } from "../runner/attemptContext.js"
import { withAttemptServices } from "../runner/attemptScope.js"
import * as Controlled from "../runner/controlled.js"
import type { PipelineEnv } from "../runner/pipeline.js"
import * as Rows from "../runner/rows.js"
import { reportMetric } from "../runner/run.js"
import * as PgPools from "../pool/pg/pools.js"
import type { LeaseLost } from "../pool/pg/errors.js"
import { cancelReason, enterRun, executionToken, leaveRun, registryFor, stateOf, type TaskEnv } from "./task.js"
import { memberSharedOf } from "./member.js"
import { makeLossGuard } from "./lossGuard.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * How a controlled pipeline's execution ended: its verdict, `"interrupted"` (its run or the
 * pipeline was cancelled, `cancelMarks.ts`: its row ended `interrupted` at an entry, resumable),
 * or `"lost"` (its ownership went before it ended: it called nothing more and wrote nothing
 * more).
 *
 * @internal
 */
export type ControlledVerdict = "succeeded" | "failed" | "gone" | "lost" | "interrupted"

/**
 * What an execution owns the pipeline by: `live`, checked in memory before each attempt and
 * after each lease (the window claim's local deadline, or the task claim's last renewal), and
 * `fence`, one statement after each lease that says whether the claim is still this
 * execution's (task claims; absent for a window, whose deadline is enough).
 *
 * @internal
 */
export interface Ownership {
  readonly live: () => boolean
  readonly fence?: (() => Effect.Effect<boolean>) | undefined
}

/** The claim seq of a controlled pipeline's one task claim: past every task (see the module comment). */
const claimSeq = (spec: AnySpec): number => spec.template.nTasks

/**
 * Whether a stored state is the one admission wrote, with no execution begun on it: version 0
 * (every execution's first write moves it) and no attempt recorded for the pipeline.
 */
const isFresh = (vs: Traversal.VisitState, attemptsTotal: number): boolean => vs.version === 0 && attemptsTotal === 0

/**
 * The state a fresh pipeline's first execution writes before its first attempt: the same
 * state, one version on (the start mark: from then on, every later execution reserves a new
 * attempt number at the pending entry, since this one may have used the reserved one).
 */
const startMark = (vs: Traversal.VisitState): Traversal.VisitState => ({ ...vs, version: vs.version + 1 })

/**
 * The decoded input at an occurrence address, or why it cannot be had (`unregistered`: the
 * payload is there but the task's registry does not know its codec or type). As the embedded
 * engine's admission loads a pending entry.
 */
const loadEntry = (env: TaskEnv, spec: AnySpec, address: string) =>
  Effect.gen(function*(): Effect.fn.Return<
    Either.Either<unknown, { readonly reason: string; readonly unregistered: boolean }>,
    StoreUnavailable
  > {
    const pipelineId = spec.pipelineId
    const missing = (reason: string) => Either.left({ reason, unregistered: false })
    if (address === Traversal.address(pipelineId, -1, 0)) return Either.right(Controlled.seedInput(spec))
    const loaded = yield* env.store.traversal!.getArtifactById(address)
    if (Option.isNone(loaded)) return missing(`no artifact ${address}`)
    const { artifact, payload } = loaded.value
    if (!artifact.available || payload === undefined) return missing(`artifact ${address} payload unavailable`)
    const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
    // a task output decodes with its task's registry; a handoff payload with its source's
    const producer = artifact.seq < tasks.length ? tasks[artifact.seq] : tasks.find((t) => t.name === artifact.taskName)
    const decoded = registryFor(env, producer ?? tasks[0]!).load({ typeName: artifact.typeName, codec: artifact.codec, data: payload })
    return Either.mapLeft(decoded, (e) => ({
      reason: `artifact ${address} undecodable: ${e.message}`,
      unregistered: e.unregistered === true
    }))
  })

/**
 * A pipeline refused at its start (as the embedded admission refuses it): its event, and its
 * row `failed` under its run with the error and the fix.
 */
const refuse = (
  env: TaskEnv,
  spec: AnySpec,
  runId: RunId,
  r: {
    readonly kind: string
    readonly cursor: number
    readonly data: Record<string, unknown>
    readonly errorType: string
    readonly message: string
    readonly fix: string
  }
) =>
  Effect.gen(function*() {
    const now = env.clock.unsafeCurrentTimeMillis()
    const pipelineId = spec.pipelineId
    const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
    yield* env.store.emitEvent({
      kind: r.kind,
      pipelineId,
      runId,
      data: { cursor: r.cursor, ...r.data, error: r.message, fix: r.fix },
      ts: now
    })
    yield* env.store.updatePipeline(pipelineId, {
      state: "failed",
      runId,
      startedAt: now,
      endedAt: now,
      error: { failedTask: tasks[r.cursor]?.name ?? null, errorType: r.errorType, errorMessage: `${r.message}; fix: ${r.fix}`, errorClass: "fatal" },
      updatedAt: now
    })
    yield* env.store.flush
    return "failed" as const
  })

/**
 * The start of an execution from the stored row and traversal state (see the module comment),
 * or the verdict when there is nothing to run.
 */
const startOf = (env: TaskEnv, spec: AnySpec) =>
  Effect.gen(function*(): Effect.fn.Return<
    { readonly _tag: "Run"; readonly runId: RunId; readonly start: Controlled.ControlledStart } | {
      readonly _tag: "Verdict"
      readonly verdict: "succeeded" | "failed" | "gone" | "interrupted"
    },
    StoreUnavailable
  > {
    const { store } = env
    const pipelineId = spec.pipelineId
    const nTasks = spec.template.nTasks
    // this process's own writes first (the store's front may hold some)
    yield* store.flush
    const row = yield* store.getPipeline(pipelineId)
    if (Option.isNone(row)) return { _tag: "Verdict", verdict: "gone" }
    if (row.value.state === "succeeded" || row.value.state === "failed") return { _tag: "Verdict", verdict: row.value.state }
    // settled by a cancel (a resume admits it again, `running`, before its workflow runs)
    if (row.value.state === "interrupted") return { _tag: "Verdict", verdict: "interrupted" }
    const runId = row.value.runId as RunId
    if (store.traversal === undefined) {
      // (the submitter refuses control on such a store: a runner on another store than its)
      return {
        _tag: "Verdict",
        verdict: yield* refuse(env, spec, runId, {
          kind: "pipeline.corrupt_checkpoint",
          cursor: row.value.nTasksDone,
          data: {},
          errorType: "ConfigError",
          message: "the pipeline declares control, and this runner's store keeps no traversal state",
          fix: "start the runners on the submitter's store (PostgreSQL)"
        })
      }
    }
    const persisted = yield* store.traversal.visitState(pipelineId)
    if (Option.isNone(persisted)) {
      return {
        _tag: "Verdict",
        verdict: yield* refuse(env, spec, runId, {
          kind: "pipeline.corrupt_checkpoint",
          cursor: row.value.nTasksDone,
          data: {},
          errorType: "CorruptCheckpoint",
          message: new CorruptCheckpoint({ pipelineId, message: "corrupt visit checkpoint: missing traversal state" }).message,
          fix: "resume with --fresh-restart (RunOptions.freshRestart) to start it again from its seed with a new budget"
        })
      }
    }
    const vs = persisted.value
    if (vs.pending === null) {
      // a torn finish: every step is committed, the row says otherwise
      const now = env.clock.unsafeCurrentTimeMillis()
      yield* store.settlePipeline(pipelineId, { state: "succeeded", nTasksDone: vs.cursor, runId, endedAt: now })
      yield* store.emitEvent({
        kind: "pipeline.terminal_repaired",
        pipelineId,
        runId,
        data: { previousState: row.value.state, previousRunId: row.value.runId, errorMessage: row.value.errorMessage ?? null },
        ts: now
      })
      yield* store.flush
      return { _tag: "Verdict", verdict: "succeeded" }
    }
    const loaded = yield* loadEntry(env, spec, vs.pending.input)
    if (Either.isLeft(loaded) && loaded.left.unregistered) {
      return {
        _tag: "Verdict",
        verdict: yield* refuse(env, spec, runId, {
          kind: "pipeline.checkpoint_undecodable",
          cursor: vs.cursor,
          data: { entry: vs.pending.input },
          errorType: "ArtifactCodecError",
          message: loaded.left.reason,
          fix: "register the payload's codec or type in the run's CodecRegistry (e.g. `HistoryArtifact.register`, or " +
            "declare it as the task's output Schema) and resume"
        })
      }
    }
    if (Either.isLeft(loaded)) {
      // the pending payload is gone: the seed is replayed, the budget and the counters kept
      yield* store.emitEvent({
        kind: "pipeline.checkpoint_missing",
        pipelineId,
        runId,
        data: { cursor: vs.cursor, entry: vs.pending.input, reason: loaded.left.reason },
        ts: env.clock.unsafeCurrentTimeMillis()
      })
      return {
        _tag: "Run",
        runId,
        start: { state: vs, input: Controlled.seedInput(spec), prepare: Traversal.seedReplay(vs, nTasks), invalidateFrom: 0 }
      }
    }
    const prepare = isFresh(vs, row.value.attemptsTotal) ? startMark(vs) : Traversal.reserveAttempt(vs)
    return { _tag: "Run", runId, start: { state: vs, input: loaded.right, prepare } }
  })

/**
 * The pools a controlled pipeline's attempts see: every lease granted is checked before the
 * task's call (the last step before it): its local deadline (past it, its slot may be
 * another runner's: the lease is lost and another one acquired), the process's call gate, then
 * the execution's ownership (`live`, and `fence` when given). Ownership gone, the lease goes
 * back at once (nothing was called under it) and `lost` is completed (the execution is
 * interrupted from outside). From the call on, a lease lost mid-call fails the attempt with
 * `LeaseLost` (`watch`, with the attempt's guard), as on the plain path; a slot (of a block or
 * of its own) goes back when the call completes, as on the plain path (the lease's scope ends
 * with the attempt's body), not after the step's checkpoint. A lease granted once the run or
 * the pipeline is `cancelled` (`cancelMarks.ts`) goes back at once too, and `cut` is completed
 * with the reason: the pipeline stops at the lease, as a plain pipeline's task does (`task.ts`).
 */
const fencedPools = (
  env: TaskEnv,
  own: Ownership,
  lost: Deferred.Deferred<void>,
  watch: (lease: Lease<any>) => Effect.Effect<void>,
  cancelled: () => string | undefined,
  cut: Deferred.Deferred<string>
): PoolsService => {
  const check = (lease: Lease<any>): Effect.Effect<"go" | "slot" | "lost"> =>
    Effect.gen(function*() {
      if (yield* PgPools.knownLost(lease)) return "slot"
      const deadline = PgPools.deadlineOf(lease)
      if (deadline !== undefined && env.clock.unsafeCurrentTimeMillis() >= deadline) return "slot"
      if (!own.live()) return "lost"
      if (own.fence !== undefined && !(yield* own.fence())) return "lost"
      return "go"
    })
  const ready = <L extends Lease<any>, E, R>(get: Effect.Effect<L, E, R>): Effect.Effect<L, E, R> => {
    const decide = (lease: L, r: "go" | "slot" | "lost"): Effect.Effect<L, E, R> => {
      if (r === "go") {
        return Effect.zipRight(watch(lease), Effect.as(PgPools.confirm(lease), lease))
      }
      if (r === "slot") return Effect.zipRight(PgPools.lostAtFence(lease), Effect.suspend(() => loop))
      return Effect.zipRight(lease.releaseNow, Effect.zipRight(Deferred.succeed(lost, undefined), Effect.never))
    }
    const loop: Effect.Effect<L, E, R> = Effect.flatMap(get, (lease) => {
      // the process was told to stop: no call starts any more (see `CallGate`)
      if (env.gate.closed) return Effect.zipRight(lease.releaseNow, Effect.never)
      // the run or the pipeline was cancelled while the attempt waited for its lease: the
      // lease goes back at once (nothing was called under it) and `cut` is completed with the
      // reason (the execution is interrupted from outside; `once` writes the interrupted row)
      const reason = cancelled()
      if (reason !== undefined) return Effect.zipRight(lease.releaseNow, Effect.zipRight(Deferred.succeed(cut, reason), Effect.never))
      return Effect.flatMap(check(lease), (r) => decide(lease, r))
    })
    return loop
  }
  return {
    ...env.pools,
    acquire: <Client,>(o?: AcquireOptions | string, h?: Holder) => ready(env.pools.acquire<Client>(o, h)),
    acquireRaw: <Client,>(o?: AcquireOptions | string, h?: Holder) => ready(env.pools.acquireRaw<Client>(o, h))
  }
}

/**
 * The store a controlled pipeline's driver writes through: a checkpoint that fails with a
 * store error other than a traversal conflict is written again (`env.infraRetry`, L5: the
 * write is retried, not the call). `committed`, when given, is told the traversal state of
 * every unit that committed (the last state this execution wrote).
 */
const retryingStore = (env: TaskEnv, committed?: (state: Traversal.VisitState) => void): StoreService => {
  const store = env.store
  const checkpoint = (unit: CheckpointUnit) =>
    store.checkpoint(unit).pipe(
      Effect.retry({ schedule: env.infraRetry, while: (e) => Traversal.conflictOf(e) === undefined }),
      Effect.tap(() => {
        if (committed !== undefined && unit.traversal !== undefined) committed(unit.traversal.state)
      })
    )
  return { ...store, checkpoint }
}

/**
 * The interrupted row of a controlled pipeline stopped at a lease (its run or itself
 * cancelled, `cancelMarks.ts`), at the traversal position this execution last committed
 * (`seen`), written only if the stored state is still that one (`expectedVersion`: a new
 * owner's step in between refuses it with a traversal conflict, and the row is not moved
 * back). The task under way is not recorded (nothing was called under its lease).
 */
const interruptedAt = (
  env: TaskEnv,
  pipelineId: PipelineId,
  runId: RunId,
  seen: Traversal.VisitState,
  reason: string
): CheckpointUnit => ({
  ...Rows.interruptedUnit(pipelineId, runId, seen.cursor, undefined, reason, env.clock.unsafeCurrentTimeMillis()),
  traversal: { expectedVersion: seen.version, state: seen }
})

/**
 * One execution of a controlled pipeline from the stored state to its verdict (see the
 * module comment): `"conflict"` when a write of it was refused (another executor moved the
 * traversal), `"lost"` when its ownership went.
 */
const once = (env: TaskEnv, spec: AnySpec, own: Ownership) =>
  Effect.gen(function*(): Effect.fn.Return<ControlledVerdict | "conflict", StoreUnavailable, Scope.Scope> {
    const started = yield* startOf(env, spec)
    if (started._tag === "Verdict") return started.verdict
    const { runId, start } = started
    const { clock, store } = env
    const state = yield* stateOf(env, runId)
    const lost = Deferred.unsafeMake<void>(FiberId.none)
    // a lease granted once the run or the pipeline was cancelled: the reason (see `fencedPools`)
    const cut = Deferred.unsafeMake<string>(FiberId.none)
    // the traversal state this execution last committed (at first: the one it started from)
    let seen = start.state
    let verdict: "succeeded" | "failed" | undefined = undefined
    /** Set when the run or the pipeline was found cancelled (at an entry or a lease: `cancelMarks.ts`). */
    let interrupted = false
    // the run or this pipeline cancelled, read before each entry and once a lease is granted,
    // while the execution owns it
    const cancelled = () => {
      const reason = own.live() ? cancelReason(env, runId, spec.pipelineId) : undefined
      if (reason !== undefined) interrupted = true
      return reason
    }
    // a global lease lost mid-call fails the running attempt with `LeaseLost` and interrupts
    // its body (the same guard as `task.ts`: `lossGuard.ts`)
    const lossGuard = makeLossGuard()
    const watch = (lease: Lease<any>) =>
      Effect.suspend(() => {
        const lose = lossGuard.current()
        return lose === undefined ? Effect.void : PgPools.onLost(lease, lose)
      })
    // an attempt does not begin once the ownership is gone (nothing is recorded for it)
    const guardBody = <A, E>(body: Effect.Effect<A, E>): Effect.Effect<A, E | LeaseLost> =>
      Effect.suspend(() =>
        own.live() ? lossGuard.guard(body) : Effect.zipRight(Deferred.succeed(lost, undefined), Effect.never)
      )
    const shared: AttemptShared = {
      runId,
      bus: env.bus,
      store: readOnlyView(store),
      pools: fencedPools(env, own, lost, watch, cancelled, cut),
      emit: (kind, pid, data) => Effect.suspend(() => store.emitEvent({ kind, pipelineId: pid, runId, data, ts: clock.unsafeCurrentTimeMillis() })),
      reportMetric: (name, value, o) => reportMetric(store, runId, name, value, o),
      pricing: env.pricing
    }
    const penv: PipelineEnv = {
      cache: env.cache,
      state,
      store: retryingStore(env, (state) => seen = state),
      pools: env.pools,
      shared,
      memberShared: memberSharedOf(shared),
      slots: env.slots,
      clock,
      registryFor: (t) => registryFor(env, t),
      whileParked: (self) => self,
      onTerminal: (_, value) => Effect.sync(() => verdict = Option.isSome(value) ? "succeeded" : "failed"),
      traceAttempts: false,
      guardBody,
      fencedTraversal: true,
      cancelled
    }
    // counted in flight while it runs: the runner reads the marks of its run (`cancelMarks.ts`)
    enterRun(env, runId)
    const ran = yield* Effect.raceAll([
      Effect.either(Controlled.run(penv, spec, start)),
      Effect.as(Deferred.await(lost), "lost" as const),
      Effect.map(Deferred.await(cut), (reason) => ({ cut: reason }))
    ]).pipe(Effect.ensuring(Effect.sync(() => leaveRun(env, runId))))
    if (ran === "lost") return "lost"
    if ("cut" in ran) {
      // stopped at a lease: the row ends interrupted where this execution left the traversal,
      // unless the ownership went meanwhile (nothing more is written) or a new owner moved it
      if (!own.live()) return "lost"
      const wrote = yield* Effect.either(
        Effect.uninterruptible(retryingStore(env).checkpoint(interruptedAt(env, spec.pipelineId, runId, seen, ran.cut)))
      )
      if (Either.isLeft(wrote)) {
        if (Traversal.conflictOf(wrote.left) !== undefined) return "conflict"
        return yield* wrote.left
      }
      yield* store.flush
      return "interrupted"
    }
    if (Either.isLeft(ran)) {
      if (Traversal.conflictOf(ran.left) !== undefined) return "conflict"
      return yield* ran.left
    }
    yield* store.flush
    return verdict ?? (interrupted ? "interrupted" as const : "failed" as const)
  }).pipe(Effect.scoped)

/**
 * Runs controlled pipeline `spec` to its verdict while `own` holds (see the module comment):
 * an execution whose write met another executor's is started again from the stored state
 * while it still owns the pipeline (`live`, and `fence` asked once more); `"lost"` once it
 * does not.
 *
 * @internal
 */
export const runControlled = (env: TaskEnv, spec: AnySpec, own: Ownership): Effect.Effect<ControlledVerdict, StoreUnavailable> =>
  Effect.gen(function*() {
    while (true) {
      if (!own.live()) return "lost" as const
      const r = yield* once(env, spec, own)
      if (r !== "conflict") return r
      // another executor moved the traversal: read it again only while the claim is still ours
      // (a task claim is asked: its renewal may not have run since it was taken over)
      if (own.fence !== undefined && !(yield* own.fence())) return "lost" as const
    }
  }).pipe(withAttemptServices)

/**
 * A controlled pipeline in the default mode (task claims, `inflight.ts`): one claim for the
 * whole pipeline (at seq `nTasks`), renewed every heartbeat, checked by one statement after
 * every lease; while another live execution holds it, this one waits (one heartbeat at a time)
 * for its verdict or for its claim to go stale. Without claims (not PostgreSQL: one process)
 * the pipeline runs at once. The execution runs in a fiber of `env.scope` (as `runTask`): the
 * engine interrupting the activity stops the waiting, not the execution; a second call for the
 * same pipeline in this process awaits the first. Interrupted (its runner stopping), it gives
 * its claim up.
 *
 * @internal
 */
export const runControlledClaimed = (
  env: TaskEnv,
  spec: AnySpec
): Effect.Effect<"succeeded" | "failed" | "gone" | "interrupted", StoreUnavailable> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.suspend(() => {
      const key = `c:${spec.pipelineId}`
      const running = env.running.get(key)
      const awaitIt = (d: Deferred.Deferred<any, StoreUnavailable>) =>
        Effect.map(restore(Deferred.await(d)), (v) => (v === "done" ? "succeeded" : v === "lost" ? "gone" : v) as "succeeded" | "failed" | "gone" | "interrupted")
      if (running !== undefined) return awaitIt(running)
      const done = Deferred.unsafeMake<any, StoreUnavailable>(FiberId.none)
      env.running.set(key, done)
      // one token for the execution: an L5 retry claims again with the same token
      const execution = Effect.interruptible(
        Effect.flatMap(executionToken, (token) => Effect.retry(claimedExecution(env, spec, token), env.infraRetry))
      )
      return Effect.zipRight(
        Effect.map(Effect.forkIn(execution, env.scope), (fiber) =>
          fiber.addObserver((exit) => {
            if (env.running.get(key) === done) env.running.delete(key)
            Deferred.unsafeDone(done, exit)
          })),
        awaitIt(done)
      )
    })
  )

const claimedExecution = (
  env: TaskEnv,
  spec: AnySpec,
  token: string
): Effect.Effect<"succeeded" | "failed" | "gone" | "interrupted", StoreUnavailable> =>
  Effect.gen(function*() {
    const claims = env.claims
    if (claims === undefined) {
      const r = yield* runControlled(env, spec, { live: () => true })
      return r === "lost" ? "gone" as const : r
    }
    const pipelineId = spec.pipelineId as PipelineId
    let held = false
    const own: Ownership = {
      live: () => held,
      fence: () =>
        Effect.map(
          Effect.either(claims.fence({ pipelineId, token, attempt: 0, readPipeline: false })),
          (answer) => {
            // the claims' database cannot be reached: the claim is presumed held (L3)
            if (Either.isLeft(answer)) return true
            if (!answer.right.claimHeld) held = false
            return held
          }
        )
    }
    return yield* Effect.gen(function*() {
      while (true) {
        const row = yield* Effect.zipRight(env.store.flush, env.store.getPipeline(pipelineId))
        if (Option.isNone(row)) return "gone" as const
        if (row.value.state === "succeeded" || row.value.state === "failed") return row.value.state
        if (row.value.state === "interrupted") return "interrupted" as const
        const now = env.clock.unsafeCurrentTimeMillis()
        const claimed = yield* claims.claim({
          pipelineId,
          seq: claimSeq(spec),
          runId: row.value.runId,
          token,
          taskRunId: `${pipelineId}:control:${row.value.runId}:${now}`,
          attempt: 0,
          startedAt: now
        })
        if (!claimed.won) {
          yield* Effect.sleep(claims.heartbeat)
          continue
        }
        held = true
        const r = yield* Effect.scoped(Effect.gen(function*() {
          // renewed every heartbeat while it runs (a renewal that cannot reach the database
          // is skipped: the claim goes stale only after `ttl` without one)
          yield* Effect.forkScoped(
            Effect.repeat(
              Effect.ignore(Effect.map(claims.renew(pipelineId, token, 0), (ok) => {
                if (!ok) held = false
              })),
              Schedule.spaced(claims.heartbeat)
            ).pipe(Effect.delay(claims.heartbeat))
          )
          return yield* runControlled(env, spec, own)
        }))
        if (r !== "lost") {
          held = false
          yield* Effect.ignore(claims.release(pipelineId, token))
          return r
        }
        held = false
      }
    }).pipe(
      Effect.onInterrupt(() => Effect.ignore(claims.release(pipelineId, token)))
    )
  })
