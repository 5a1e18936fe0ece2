/**
 * One task of one pipeline, run once to its verdict outside the runner's run loop: what the
 * cluster engine's activity executes (see `workflow.ts`). It reuses the runner's attempt
 * machinery (`runAttempt`: the attempt context, timeout, `retry.maxTotal`, seeds, raw-lease
 * reclaim; `judgeFailure`: the retry decision; `Rows`: the attempt, task and checkpoint rows)
 * and adds the rules of the distributed note (research/distributed.md §4):
 *
 * - L1: the stored pipeline row is read first; a task whose checkpoint is committed is not
 *   run again (its stored verdict is returned);
 * - L4: every lease a task takes is followed by a second read of the checkpoint; when another
 *   executor (a zombie, or the new owner after a takeover) committed it meanwhile, the attempt
 *   is interrupted and the stored verdict returned; then, just before the task's call, the
 *   global lease's quota charges are moved to the window the call goes out in (a provider
 *   counts a call in the window it arrives in; the grant's window may have ended while the
 *   lease waited);
 * - L5: a `StoreUnavailable` is retried here with a backoff long enough to ride out a
 *   database failover (`infraRetry`), never turned into a task failure: a failed commit
 *   retries the write (the task is not called again), a failed read retries the activity's
 *   body from its first read.
 *
 * The input of task `seq` is read from the store: the seed for seq 0, else the artifact task
 * `seq - 1` committed (the winner's value when two executors raced: the next task always
 * starts from what the store kept).
 *
 * A task execution is never cut between its call and its commit by the engine: it runs in a
 * fiber of the runner process's own scope, which the activity only awaits, and one process runs
 * at most one execution of a (pipeline, task) at a time ({@link runTask}). `@effect/cluster`
 * 0.60 interrupts the activities of a workflow whose shard this runner lets go (a lock refresh
 * slower than `shardLockRefreshInterval` marks the lock storage unhealthy and force-releases
 * every shard; a Postgres restart drops the advisory locks), and re-runs them once the shard is
 * back (`ClusterWorkflowEngine`: a "Suspended" activity is reset and executed again). Without
 * this, an activity interrupted after the provider answered and before its checkpoint
 * committed called the provider again (chaos C6; also seen before any fault under load).
 *
 * @internal
 */
import { type Clock, Deferred, Duration, Effect, Either, Exit, FiberId, Option, Random, Schedule, type Scope } from "effect"
import { CodecRegistry, outputTypeName } from "../../../domain/Codec.js"
import type { StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import { pipelineKeyOf } from "./cancelMarks.js"
import { digest } from "../../../domain/Json.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type { PipelineRecord } from "../../../domain/Records.js"
import * as RunConfig from "../../../domain/RunConfig.js"
import type * as Task from "../../../domain/Task.js"
import { readOnlyView } from "../../../domain/TaskStore.js"
import type { AcquireOptions, Lease } from "../../../domain/Lease.js"
import type { Holder, PoolsService } from "../../Pools.js"
import * as PgPools from "../pool/pg/pools.js"
import * as PgSql from "../pool/pg/sql.js"
import type { StoreService } from "../../Store.js"
import type { BusService } from "../../Bus.js"
import type { AttemptShared } from "../runner/attemptContext.js"
import { type CacheEnv, succeededAs } from "../runner/cache.js"
import type * as Pricing from "../../../domain/Pricing.js"
import { installAttemptServices } from "../runner/attemptScope.js"
import type { Claims, FenceRequest, FenceResult, Marker } from "./inflight.js"
import { makeLossGuard } from "./lossGuard.js"
import { judgeFailure, type PipelineEnv, runAttempt } from "../runner/pipeline.js"
import * as Rows from "../runner/rows.js"
import { reportMetric } from "../runner/run.js"
import * as SlotGate from "../runner/slotGate.js"
import { emptyHold, type SlotHold } from "../runner/slotGate.js"
import * as State from "../runner/state.js"
import { memberSharedOf } from "./member.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * The verdict of one task as the activity records it: `done` (its checkpoint is committed,
 * by this executor or another), `failed` (the task failed for good: the pipeline is failed),
 * `gone` (the pipeline row is missing or settled otherwise: nothing to do), or `interrupted`
 * (its run was cancelled, `cancelMarks.ts`: the task did not call, and the pipeline's row is
 * settled `interrupted` at the task, resumable).
 *
 * @internal
 */
export type TaskVerdict = "done" | "failed" | "gone" | "interrupted"

/**
 * Whether this runner process still starts calls: closed once it was told to stop (`assay
 * runner` on SIGTERM/SIGINT/SIGHUP, before its scopes close). From then on no task starts an
 * attempt, and a task granted a lease gives it back at once and does not call: a call started
 * after the signal could not commit before the process exits, and the task's next owner would
 * call again (chaos C8, a rolling restart: a call 2.4 s after its runner's SIGTERM, repeated by
 * the new owner). Such a task waits for the process's end without a verdict: its activity is
 * interrupted by the engine as the runner leaves the cluster, as on any stop (an execution
 * ending by itself would be an activity failing, which the workflow retries a few times only).
 *
 * @internal
 */
export interface CallGate {
  /** `true` once {@link CallGate.close} ran. */
  readonly closed: boolean
  /** Closes the gate (idempotent). */
  readonly close: () => void
}

/**
 * A new open {@link CallGate}.
 *
 * @internal
 */
export const makeCallGate = (): CallGate => {
  let closed = false
  return {
    get closed() {
      return closed
    },
    close: () => {
      closed = true
    }
  }
}

/**
 * What every task execution of one runner process shares: the store, the pools, the bus, a
 * worker-slot gate (`concurrency` attempts at once in this process), the clock, the L5 retry
 * schedule, and one run state per run id (the rows an attempt writes carry the run that
 * admitted the pipeline).
 *
 * @internal
 */
export interface TaskEnv {
  readonly store: StoreService
  readonly pools: PoolsService
  readonly bus: BusService
  readonly slots: SlotGate.SlotGate
  readonly clock: Clock.Clock
  readonly infraRetry: Schedule.Schedule<unknown, StoreUnavailable>
  readonly states: Map<RunId, State.RunState>
  readonly registry: CodecRegistry
  readonly registries: Map<Task.Any, CodecRegistry>
  /** The scope task executions run in (the runner process's: closing it interrupts them). */
  readonly scope: Scope.Scope
  /** The execution of each (pipeline, task) running in this process, by `pipelineId/seq`. */
  readonly running: Map<string, Deferred.Deferred<TaskVerdict | "lost", StoreUnavailable>>
  /**
   * The task claims (`inflight.ts`): one live execution of a task across the cluster, and an
   * execution cut short recorded as abandoned. Without them (not PostgreSQL) neither holds.
   */
  readonly claims: Claims | undefined
  /**
   * Whether the store lives in the claims' database (its identity is there: `Claims.holdsStore`):
   * then the checkpoint re-read after a lease (L4) is part of the claims' fence statement.
   */
  readonly storeHere: boolean
  /** The experiment's price table (`pricing`): how attempts' token usage is priced. */
  readonly pricing: Pricing.PriceTable | undefined
  /**
   * The call cache and the experiment's `run.cache` settings; `undefined`: no task is served
   * from a cache.
   */
  readonly cache: CacheEnv | undefined
  /**
   * The tasks whose last execution in this process reached its call through a fenced global
   * lease (the slot claim, or the fence after it, checked the claim and the input): a later
   * task of a pipeline whose claim this execution already holds skips the check before its
   * attempt for them, the fence doing it. A task that ran without one is checked before its
   * attempt again.
   */
  readonly fencedTasks: WeakSet<Task.Any>
  /**
   * The execution of each claimed window running in this process (window claims on,
   * `window.ts`), by window key: a second run of the same window's activity awaits it; once
   * no activity awaits it any more (the engine interrupted them: the window's shard moved),
   * it drains (`WindowRun`).
   */
  readonly windows: Map<string, WindowRun>
  /** Whether calls may still start here (closed when the process was told to stop). */
  readonly gate: CallGate
  /**
   * The runs cancelled (`cancelMarks.ts`), with the reason of each, as this process last read
   * their marks (once per heartbeat, `workflow.ts`): a task of one of them starts no attempt;
   * its pipeline is settled `interrupted`.
   */
  readonly cancelled: Map<RunId, string>
  /**
   * The pipelines cancelled one by one (a trial's time budget: `cancelMarks.ts`), by
   * `pipelineKeyOf(runId, pipelineId)`, with their reasons, as last read: as {@link cancelled},
   * for the pipeline's tasks of that run only.
   */
  readonly cancelledPipelines: Map<string, string>
  /**
   * The runs with task executions in flight in this process, with their number: the runs whose
   * marks are read (a run with nothing in flight here has nothing to stop here).
   */
  readonly inFlight: Map<RunId, number>
}

/**
 * Why the task executions of `pipelineId` in `runId` start no attempt (its run, or the pipeline
 * alone, was marked cancelled: `cancelMarks.ts`), or `undefined`.
 *
 * @internal
 */
export const cancelReason = (env: TaskEnv, runId: RunId, pipelineId: PipelineId): string | undefined =>
  env.cancelled.get(runId) ??
    (env.cancelledPipelines.size === 0 ? undefined : env.cancelledPipelines.get(pipelineKeyOf(runId, pipelineId)))

/**
 * The default L5 schedule: exponential from 200 ms (factor 2), each delay capped at 5 s,
 * for up to 2 minutes in all (a Postgres restart or failover takes seconds to tens of seconds).
 *
 * @internal
 */
export const defaultInfraRetry = (budget: Duration.Duration = Duration.minutes(2)): Schedule.Schedule<unknown, StoreUnavailable> =>
  Schedule.exponential(Duration.millis(200), 2).pipe(
    Schedule.modifyDelay((d) => Duration.min(d, Duration.seconds(5))),
    Schedule.upTo(budget)
  )

/**
 * `self` retried with `schedule` on failure (L5), as `Effect.retry(self, schedule)`, at the
 * cost of one failure handler while `self` succeeds: the schedule's driver (a `Ref`, its
 * iteration service provided around every try) is built only once `self` has failed, and
 * its first decision is taken on that failure (the same delays and the same budget, counted
 * from the first failure as `Effect.retry` counts them). Defects and interruptions are not
 * retried, as with `Effect.retry`. (pg17z: three retries wrapped every task of a runner.)
 *
 * @internal
 */
export const retryOnFailure = <A, E, R>(
  self: Effect.Effect<A, E, R>,
  schedule: Schedule.Schedule<unknown, E>
): Effect.Effect<A, E, R> =>
  Effect.catchAll(self, (first) => {
    let replay = true
    return Effect.retry(
      Effect.suspend(() => {
        if (!replay) return self
        replay = false
        return Effect.fail(first)
      }),
      schedule
    )
  })

/**
 * Builds the shared part of a runner process's task executions; they run in the scope of the
 * caller (closing it interrupts the executions still running).
 *
 * @internal
 */
export const makeTaskEnv = (options: {
  readonly store: StoreService
  readonly pools: PoolsService
  readonly bus: BusService
  readonly concurrency: number
  readonly infraRetry?: Schedule.Schedule<unknown, StoreUnavailable> | undefined
  readonly registry?: CodecRegistry | undefined
  readonly claims?: Claims | undefined
  readonly storeHere?: boolean | undefined
  readonly pricing?: Pricing.PriceTable | undefined
  readonly cache?: CacheEnv | undefined
  readonly gate?: CallGate | undefined
}): Effect.Effect<TaskEnv, never, Scope.Scope> =>
  Effect.zipWith(Effect.clock, Effect.scope, (clock, scope) => ({
    store: options.store,
    pools: options.pools,
    bus: options.bus,
    slots: SlotGate.make(options.concurrency, () => false),
    clock,
    infraRetry: options.infraRetry ?? defaultInfraRetry(),
    states: new Map(),
    registry: options.registry ?? CodecRegistry.default(),
    registries: new Map(),
    scope,
    running: new Map(),
    claims: options.claims,
    storeHere: options.storeHere === true && options.claims !== undefined,
    pricing: options.pricing,
    cache: options.cache,
    fencedTasks: new WeakSet(),
    windows: new Map(),
    gate: options.gate ?? makeCallGate(),
    cancelled: new Map(),
    cancelledPipelines: new Map(),
    inFlight: new Map()
  }))

/**
 * The codec registry of `task`'s output (its output schema registered under a name derived
 * from the task, the same in every process).
 *
 * @internal
 */
export const registryFor = (env: TaskEnv, task: Task.Any): CodecRegistry => {
  let r = env.registries.get(task)
  if (r === undefined) {
    // a schema without an identifier (a `Schema.Struct`) is registered under a name derived from
    // the task's name and the schema's structure, the same in every process
    r = task.outputSchema === undefined
      ? env.registry
      : env.registry.registerSchema(task.outputSchema, { typeName: outputTypeName(task.name, task.outputSchema) })
    env.registries.set(task, r)
  }
  return r
}

/**
 * The run state of `runId` in this process (made once per run, with the default run options).
 *
 * @internal
 */
export const stateOf = (env: TaskEnv, runId: RunId): Effect.Effect<State.RunState> =>
  Effect.suspend(() => {
    const known = env.states.get(runId)
    if (known !== undefined) return Effect.succeed(known)
    return Effect.gen(function*() {
      // the defaults: a cluster run's per-run options (concurrency, maxAdmitted) belong to the
      // submitter and the runner processes; attempts only read `strictLeases` from it
      const config = yield* Effect.orDie(RunConfig.resolve({ runId }))
      const state = State.make(runId, config, yield* Deferred.make<string>(), yield* Deferred.make<void>())
      env.states.set(runId, state)
      return state
    })
  })

/**
 * The committed verdict of task `seq` in a stored row, if any. An `interrupted` row was
 * settled by a cancel of its run (a resume admits it again, `running`, before its workflow
 * runs): a replay of the workflow runs nothing of it.
 */
const committed = (row: Pick<PipelineRecord, "nTasksDone" | "state">, seq: number): TaskVerdict | undefined =>
  row.nTasksDone > seq
    ? "done"
    : row.state === "failed"
    ? "failed"
    : row.state === "succeeded"
    ? "done"
    : row.state === "interrupted"
    ? "interrupted"
    : undefined

/**
 * What the last step before a task's call found, when it stopped the attempt: `lost`, the
 * execution's claim was taken over by another execution (this one was frozen or cut off past
 * the claim's TTL: a zombie); it must not call, and waits for the other's checkpoint.
 */
interface Fence {
  lost: boolean
  /**
   * The input this execution took from its own commit of the previous task is not what the
   * store kept (another execution's commit won with another value): the attempt stopped
   * before its call, and runs again from the stored input.
   */
  stale: boolean
}

/**
 * The fence request of `claim` now: its renewal, the task it moves the claim to
 * (`claim.current`) and, until it is confirmed, the input to check against the store.
 */
const fenceRequest = (env: TaskEnv, pipelineId: PipelineId, claim: ClaimState, slot?: FenceRequest["slot"]): FenceRequest => {
  const current = claim.current
  return {
    pipelineId,
    token: claim.token,
    attempt: claim.attempt,
    slot,
    readPipeline: env.storeHere,
    advance: current === undefined ? undefined : { seq: current.seq, taskRunId: current.taskRunId, startedAt: current.startedAt },
    input: current === undefined || current.confirmed || !env.storeHere ? undefined : current.input
  }
}

/**
 * What a fence's answer means for task `seq`: `"committed"` (the store holds its verdict:
 * `found` is completed), `"lost"` (another execution holds the claim: `claim.fence.lost` is
 * set), `"stale"` (the input held in memory is not what the store kept: `claim.fence.stale`
 * is set), or `"go"` (the claim is held and now covers this task; the input is confirmed).
 */
const readFence = (
  seq: number,
  found: Deferred.Deferred<TaskVerdict>,
  claim: ClaimState,
  f: FenceResult
): Effect.Effect<"go" | "committed" | "lost" | "stale"> =>
  Effect.suspend(() => {
    if (f.pipeline !== undefined && f.pipeline !== null) {
      const verdict = committed({ state: f.pipeline.state as PipelineRecord["state"], nTasksDone: f.pipeline.nTasksDone }, seq)
      if (verdict !== undefined) return Effect.as(Deferred.succeed(found, verdict), "committed" as const)
    }
    if (!f.claimHeld) {
      claim.fence.lost = true
      return Effect.succeed("lost" as const)
    }
    if (f.inputKept === false) {
      claim.fence.stale = true
      return Effect.succeed("stale" as const)
    }
    if (claim.current !== undefined) claim.current.confirmed = true
    return Effect.succeed("go" as const)
  })

/**
 * The pools a task of `pipelineId` sees: every lease granted is fenced before the task's call
 * (the last step before it):
 *
 * - L4: the checkpoint of `seq` is read again; when it is committed, `found` is completed and
 *   the attempt is interrupted;
 * - the execution's claim is renewed (when `claim` is given) and moved to this task
 *   (`claim.current`); when another execution holds it now, `fence.lost` is set and the
 *   attempt is interrupted before its call;
 * - the input taken from this execution's own commit of the previous task is checked against
 *   the store's checkpoint (its digest), until confirmed; when the store kept another value,
 *   `fence.stale` is set and the attempt is interrupted before its call (it runs again from
 *   the stored input);
 * - stopped by any of these, the lease is given back at once, as after a completed call
 *   (nothing was called under it), before the attempt is interrupted: a global slot is not
 *   held until its TTL for a call that never went out;
 * - a global lease's slot is renewed (only the same lease id, only while not expired): a
 *   runner frozen or cut off past the lease's TTL between the grant and the call finds its
 *   slot expired or claimed by another runner; the lease is then lost (nothing was called
 *   under it) and the acquire asks for another one, so that the capacity the database counts
 *   is never exceeded by a call under a lapsed slot;
 * - then the lease's quota charges are moved to the window the call goes out in;
 * - from then on, the lease lost mid-call (its renewals failing until its local deadline, or its
 *   slot found taken) fails the attempt with `LeaseLost` and stops the call (`watch`, with the
 *   attempt's `guardBody`): the slot is never given back early, it may be another runner's.
 *
 * With Postgres claims and the store in the claims' database (`env.storeHere`), a global
 * pool on the same database (`Claims.sameDatabase`) claims its slot and fences in one
 * statement (`PgPools.ClaimFence`: the slot is claimed only when the fence lets the call go,
 * so nothing is left to renew); a lease of another pool is fenced by one statement after its
 * grant (`Claims.fence`); without the store there, the store read and the slot renewal are
 * statements of their own. A fence that cannot reach the database lets the call go (a
 * renewal error is not a loss, L3: the claim and the slot stay held until their TTLs; the
 * heartbeat and the pools' renewal fiber try again).
 */
const recheckingPools = (
  env: TaskEnv,
  task: Task.Any,
  pipelineId: PipelineId,
  seq: number,
  found: Deferred.Deferred<TaskVerdict>,
  claim: ClaimState | undefined,
  /** From the fence on, a loss of `lease` fails the running attempt (synchronous). */
  watch: (lease: Lease<any>) => void,
  windowed?: WindowedTask | undefined,
  /** Whether the task's run was cancelled (`cancelMarks.ts`): asked once a lease is granted. */
  cancelled?: (() => boolean) | undefined
): PoolsService => {
  /**
   * Stops the attempt at its fence, before its call: the lease goes back at once, as after a
   * completed call, since nothing was called under it (the fence is the last step before the
   * call; a global slot is given back only under the lease's own id, so a slot another holder
   * took meanwhile is left alone). Left to the interruption, it would be an unknown outcome and
   * a global slot would stay held until its TTL.
   */
  const stop = (lease: Lease<any>) => Effect.zipRight(lease.releaseNow, Effect.interrupt)
  const settle = (lease: Lease<any>, verdict: TaskVerdict | undefined) =>
    verdict === undefined ? Effect.void : Effect.zipRight(Deferred.succeed(found, verdict), stop(lease))
  const recheck = (lease: Lease<any>) =>
    Effect.flatMap(
      Effect.orElseSucceed(env.store.getPipeline(pipelineId), () => Option.none<PipelineRecord>()),
      (row) => settle(lease, Option.isSome(row) ? committed(row.value, seq) : undefined)
    )
  /** A global slot renewed on its own client: `false` only when it is no longer the lease's. */
  const slotHeld = (slot: PgPools.SlotFence) =>
    Effect.orElseSucceed(
      PgSql.renew(slot.sql, slot.pool, slot.resource, { slot: slot.slot, leaseId: slot.leaseId }, slot.ttlMs),
      () => true
    )
  const claims = env.claims
  /** `true` when the call may go out under `lease`, `false` when its slot was lost. */
  const fenced = (lease: Lease<any>): Effect.Effect<boolean> => {
    const slot = PgPools.slotFence(lease)
    if (claims === undefined || claim === undefined) {
      return Effect.zipRight(recheck(lease), slot === undefined ? Effect.succeed(true) : slotHeld(slot))
    }
    return Effect.gen(function*() {
      const slotHere = slot !== undefined && (yield* claims.sameDatabase(slot.sql))
      const request = fenceRequest(env, pipelineId, claim, slotHere ? slot : undefined)
      const answer = yield* Effect.either(claims.fence(request))
      if (Either.isLeft(answer)) {
        // the claims' database cannot be reached: L4 through the store, the claim presumed held
        yield* recheck(lease)
        return slot === undefined || slotHere ? true : yield* slotHeld(slot)
      }
      const f = answer.right
      if (f.pipeline === undefined) yield* recheck(lease)
      if ((yield* readFence(seq, found, claim, f)) !== "go") return yield* stop(lease)
      env.fencedTasks.add(task)
      if (slot === undefined) return true
      return slotHere ? f.slotHeld === true : yield* slotHeld(slot)
    })
  }
  /** When the last fence joined to a slot claim was sent (local clock, epoch ms). */
  let fencedAt = 0
  /**
   * Whether a lease fenced at its slot claim may still go out without another fence: its
   * local deadline has not passed (its slot cannot have expired and been claimed by another
   * runner before it), nor the claim's TTL since the fence was sent, less a margin (the claim
   * cannot have gone stale and been taken over). Past either (the process froze between the
   * claim and the call), it is fenced again, on its own statement.
   */
  const freshAtClaim = (lease: Lease<any>): boolean => {
    const now = env.clock.unsafeCurrentTimeMillis()
    const deadline = PgPools.deadlineOf(lease)
    if (deadline !== undefined && now >= deadline) return false
    if (claims === undefined) return true
    const ttlMs = Duration.toMillis(claims.ttl)
    return now < fencedAt + ttlMs - Math.min(ttlMs / 10, 2_000)
  }
  /** The fence joined to a global slot claim (the store in the claims' database only). */
  const atClaim: PgPools.ClaimFence | undefined = claims === undefined || claim === undefined || !env.storeHere
    ? undefined
    : (() => {
      let request: FenceRequest | undefined
      return {
        here: (sql) => claims.sameDatabase(sql),
        parts: (first) => {
          fencedAt = env.clock.unsafeCurrentTimeMillis()
          return claims.fenceParts(request = fenceRequest(env, pipelineId, claim), seq, first)
        },
        settle: (row) =>
          Effect.map(readFence(seq, found, claim, claims.fenceResult(request ?? fenceRequest(env, pipelineId, claim), row)), (r) => {
            if (r !== "go") return false
            env.fencedTasks.add(task)
            return true
          })
      }
    })()
  /**
   * The fence of a task in a claimed window (window claims on): no statement. The lease's
   * local deadline has not passed (its slot cannot have expired and been claimed by another
   * runner), else the lease is lost and another one acquired; the window's claim is within its
   * local deadline (no other execution can have taken the window over), else the execution
   * stops before its call (`fence.lost`: the window is claimed again, or waited for). Stopped
   * there, the lease goes back at once, as after a completed call: nothing was called under
   * it (this is the last step before the call), and its slot is still its own (its deadline
   * was checked first). Left to the interruption, it would be an unknown outcome, its slot
   * held until its TTL: a draining window's waiters then kept slots nobody used for a whole
   * TTL (chaos C4, 2026-12-04).
   */
  const inWindow = (w: WindowedTask, lease: Lease<any>): Effect.Effect<boolean> =>
    Effect.suspend(() => {
      const deadline = PgPools.deadlineOf(lease)
      if (deadline !== undefined && env.clock.unsafeCurrentTimeMillis() >= deadline) return Effect.succeed(false)
      if (w.live()) return Effect.succeed(true)
      if (claim !== undefined) claim.fence.lost = true
      return stop(lease)
    })
  /** The call may go out under `lease`: a loss of it fails the attempt, its quota charges confirmed. */
  const go = <L extends Lease<any>>(lease: L): Effect.Effect<L> => {
    watch(lease)
    return PgPools.confirmNeeded(lease) ? Effect.as(PgPools.confirm(lease), lease) : Effect.succeed(lease)
  }
  /**
   * {@link ready} in a claimed window: the same checks in one synchronous step (no statement
   * to wait for; ops17ak): the process stopping, the run cancelled, the lease known lost or
   * past its local deadline (acquired again), the window past its own (`inWindow`).
   */
  const readyInWindow = <L extends Lease<any>, E, R>(w: WindowedTask, get: Effect.Effect<L, E, R>): Effect.Effect<L, E, R> => {
    const loop: Effect.Effect<L, E, R> = Effect.flatMap(get, (lease) => {
      if (env.gate.closed) return Effect.zipRight(lease.releaseNow, Effect.never)
      if (cancelled !== undefined && cancelled()) return stop(lease)
      const deadline = PgPools.deadlineOf(lease)
      if (PgPools.lostNow(lease) || (deadline !== undefined && env.clock.unsafeCurrentTimeMillis() >= deadline)) {
        return Effect.zipRight(PgPools.lostAtFence(lease), Effect.suspend(() => loop))
      }
      if (!w.live()) {
        if (claim !== undefined) claim.fence.lost = true
        return stop(lease)
      }
      return go(lease)
    })
    return loop
  }
  /** Acquires, fences, and acquires again while the fence finds the slot lost. */
  const ready = <L extends Lease<any>, E, R>(get: Effect.Effect<L, E, R>): Effect.Effect<L, E, R> => {
    if (windowed !== undefined) return readyInWindow(windowed, get)
    const acquire = atClaim === undefined ? get : Effect.locally(get, PgPools.currentClaimFence, atClaim)
    const loop: Effect.Effect<L, E, R> = Effect.flatMap(acquire, (lease) =>
      // the process was told to stop: no call starts any more; the lease goes back and the
      // attempt waits for the process's end (its activity is then interrupted by the engine,
      // as on any stop: a task ending here would be an activity's failure to the workflow)
      env.gate.closed ? Effect.zipRight(lease.releaseNow, Effect.never) : cancelled !== undefined && cancelled()
        // the run was cancelled while the attempt waited for its lease: the lease goes back at
        // once and the attempt stops before its call (the execution settles the pipeline)
        ? stop(lease)
        : Effect.flatMap(
        // a lease its renewal fiber already saw lost (taken, or past its local deadline) is not
        // fenced again; a lease fenced by its slot claim has nothing left to check, unless the
        // process froze between the claim and now (`freshAtClaim`)
        Effect.flatMap(
          PgPools.knownLost(lease),
          (lost) =>
            lost
              ? Effect.succeed(false)
              : windowed !== undefined
              ? inWindow(windowed, lease)
              : PgPools.fencedAtClaim(lease) && freshAtClaim(lease)
              ? Effect.succeed(true)
              : fenced(lease)
        ),
        (ok) =>
          ok
            // from now on a loss of the lease fails the attempt (`guardBody`); the last thing
            // before the task's call: the lease's quota charges are moved to the window the
            // call goes out in (a grant's window may have ended meanwhile)
            // (a slot, of a block or of its own, goes back when the call completes, not after
            // the task's checkpoint: the lease's scope ends with the attempt's body)
            ? Effect.suspend(() => go(lease))
            : Effect.zipRight(PgPools.lostAtFence(lease), Effect.suspend(() => loop))
      ))
    return loop
  }
  return {
    ...env.pools,
    acquire: <Client,>(o?: AcquireOptions | string, h?: Holder) => ready(env.pools.acquire<Client>(o, h)),
    acquireRaw: <Client,>(o?: AcquireOptions | string, h?: Holder) => ready(env.pools.acquireRaw<Client>(o, h))
  }
}

/**
 * The input of task `seq`: the seed, or the artifact task `seq - 1` committed (read from the store).
 *
 * @internal
 */
export const inputOf = (env: TaskEnv, spec: AnySpec, seq: number) =>
  Effect.gen(function*() {
    if (seq === 0) return Option.some<unknown>(JSON.parse(spec.seedJson))
    const loaded = yield* env.store.getArtifact(spec.pipelineId, seq - 1)
    if (Option.isNone(loaded) || loaded.value.payload === undefined) return Option.none<unknown>()
    const { artifact, payload } = loaded.value
    const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
    const decoded = registryFor(env, tasks[seq - 1]!).load({ typeName: artifact.typeName, codec: artifact.codec, data: payload })
    return decoded._tag === "Right" ? Option.some<unknown>(decoded.right) : Option.none<unknown>()
  })

/**
 * Runs task `seq` of `spec` to its verdict (see the module comment for L1, L4 and L5).
 * Attempts wait for one of the process's worker slots; a retry delay holds none. A task
 * failure ends the pipeline `failed` (its checkpoint says so); store errors are retried with
 * `env.infraRetry`, and fail with `StoreUnavailable` only once that schedule is spent.
 *
 * The execution runs in a fiber of `env.scope`, not in the caller's: interrupting the caller
 * (the activity, when the engine lets the workflow's shard go) stops the waiting, not the
 * execution, which goes on to its commit. While it runs, a second call for the same
 * (pipeline, task) in this process awaits it instead of starting another (the engine re-runs
 * the interrupted activity once the shard is back); once it ended, a new call starts from the
 * store (L1: a committed task is not run again). Across processes, the task's claim
 * (`inflight.ts`) keeps a second live execution from calling: it waits for the first one's
 * checkpoint instead.
 *
 * @internal
 */
export const runTask = (
  env: TaskEnv,
  spec: AnySpec,
  seq: number,
  carried?: ClaimState | undefined
): Effect.Effect<TaskVerdict, StoreUnavailable> =>
  // "lost" is a windowed execution's only (`runWindowedTask`)
  Effect.map(runTaskWith(env, spec, seq, carried, undefined), (v) => v === "lost" ? "gone" as const : v)

/**
 * A task of a claimed window (window claims on, `window.ts`): as {@link runTask}, without a
 * task claim, a fence statement or an input read. The run and the input are `windowed`'s
 * (the window's one read, or the output this process committed for the task before); before
 * each attempt, and after each lease (the last step before the call), the window's claim is
 * checked against its local deadline in memory (`windowed.live`) and each global lease
 * against its own. Past the window's deadline the execution calls nothing more and answers
 * `"lost"` (the window is claimed again before anything else runs); a call already under way
 * finishes and commits (first writer wins). On `"done"` by this execution,
 * `windowed.committed` holds the output it committed (encoded).
 *
 * Unlike {@link runTask}, it runs in the calling fiber: the caller is the window's execution
 * (a fiber of the process's scope, the only one of its window in this process), which has
 * installed the attempt services (`installAttemptServices`) in the fiber.
 *
 * @internal
 */
export const runWindowedTask = (
  env: TaskEnv,
  spec: AnySpec,
  seq: number,
  windowed: WindowedTask
): Effect.Effect<TaskVerdict | "lost", StoreUnavailable> =>
  // in the calling fiber (the window's pipeline fiber, with the attempt services installed
  // once: `window.ts`): the window's execution is already a fiber of the process's scope that
  // the activities only await, and one process runs one execution of a window at a time
  // (`env.windows`), so one of a (pipeline, task): no fiber, registration or observer of its
  // own per task (pg17ac)
  retryOnFailure(runTaskOnce(env, spec, seq, unclaimed(), windowed), env.infraRetry)

/**
 * One execution of a claimed window in this process (`window.ts`): what it settles (`done`),
 * how many activities await it (`callers`), and whether it drains (`draining`: no activity
 * awaits it any more, so it starts no call, lets the calls under way commit, gives its claim
 * up and ends; an activity that comes back to it before then stops the drain).
 *
 * @internal
 */
export interface WindowRun {
  readonly done: Deferred.Deferred<ReadonlyArray<"succeeded" | "failed" | "gone" | "interrupted">, StoreUnavailable>
  callers: number
  draining: boolean
}

/**
 * A task run inside a claimed window: its run and input, the window claim's liveness (local
 * deadline, in memory), and (set by the execution) the output it committed.
 *
 * @internal
 */
export interface WindowedTask {
  readonly runId: RunId
  readonly input: unknown
  /** Whether the window's claim is within its local deadline now. */
  readonly live: () => boolean
  /** The output this execution committed for the task (encoded), once `"done"` by it. */
  committed: { readonly typeName: string; readonly codec: string; readonly data: Uint8Array } | undefined
}

const runTaskWith = (
  env: TaskEnv,
  spec: AnySpec,
  seq: number,
  carried: ClaimState | undefined,
  windowed: WindowedTask | undefined
): Effect.Effect<TaskVerdict | "lost", StoreUnavailable> =>
  // registering the execution, forking it and attaching the observer that settles `done` (however
  // the execution ends, interrupted before it started included) happen with no interruption
  // in between: a registered execution always settles; only the waiting is interruptible
  Effect.uninterruptibleMask((restore) =>
    Effect.suspend(() => {
      const key = `${windowed === undefined ? "" : "w:"}${spec.pipelineId}/${seq}`
      const running = env.running.get(key)
      if (running !== undefined) return restore(Deferred.await(running))
      const done = Deferred.unsafeMake<TaskVerdict | "lost", StoreUnavailable>(FiberId.none)
      env.running.set(key, done)
      // a task of a claimed window holds no task claim: its claim state carries the fence's
      // flags and the committed output only, and draws no token (pg17z)
      const start = carried !== undefined ? Effect.succeed(carried) : windowed !== undefined ? Effect.sync(unclaimed) : newClaim
      const execution = Effect.interruptible(Effect.flatMap(start, (claim) => {
        // one claim per execution (or per pipeline, carried from task to task): an L5 retry
        // of the body claims again with the same token
        const token = claim.token
        const claims = env.claims
        // the execution's own fiber (forked below, per task): the attempt services are
        // installed in it once, not provided around the execution
        return Effect.zipRight(installAttemptServices, retryOnFailure(runTaskOnce(env, spec, seq, claim, windowed), env.infraRetry)).pipe(
          // an execution stopped before its commit (its runner stopping) gives its claim up, so
          // that the next owner of the task need not wait for it to go stale
          Effect.onInterrupt(() =>
            claims === undefined || !claim.held ? Effect.void : Effect.ignore(claims.release(spec.pipelineId, token))
          )
        )
      }))
      return Effect.zipRight(
        Effect.map(Effect.forkIn(execution, env.scope), (fiber) =>
          fiber.addObserver((exit) => {
            if (env.running.get(key) === done) env.running.delete(key)
            Deferred.unsafeDone(done, exit)
          })),
        restore(Deferred.await(done))
      )
    })
  )

/**
 * A token unique to one execution (96 random bits, from `Random`).
 *
 * @internal
 */
export const executionToken = Effect.map(
  Effect.all([Random.nextIntBetween(0, 2 ** 32), Random.nextIntBetween(0, 2 ** 32), Random.nextIntBetween(0, 2 ** 32)]),
  (parts) => parts.map((n) => n.toString(16).padStart(8, "0")).join("")
)

/**
 * One execution's claim: its token, whether it is held, the attempt it is on, the fence; and,
 * for a claim carried across a pipeline's tasks (`runTask`'s `carried`), the run, the task it
 * covers and the last output this execution committed.
 *
 * @internal
 */
export interface ClaimState {
  readonly token: string
  held: boolean
  attempt: number
  readonly fence: Fence
  /**
   * The run the claim was won under (from the pipeline's row), once won through the row
   * (`Claims.claimRunnable`): a claim carried to the pipeline's next task continues with it.
   */
  runId: RunId | undefined
  /** The task the claim covers now, what the next fence moves the row to and checks. */
  current: CurrentTask | undefined
  /**
   * The output this execution committed for task `seq` (its encoding and digest), while the
   * claim is carried: the next task's input, decoded from it instead of read back from the
   * store; the first fence before that task's call checks the store kept this digest.
   */
  last: { readonly seq: number; readonly encoded: { readonly typeName: string; readonly codec: string; readonly data: Uint8Array }; readonly digest: string } | undefined
}

/**
 * What the claim covers now: task `seq` (its task-run id and start), whether what it was
 * started with is confirmed (the claim held and the task not committed, read in one
 * statement, and the input taken from memory equal to the stored one), and that input's
 * checkpoint (`input`: `seq` and digest) when it came from memory.
 */
interface CurrentTask {
  readonly seq: number
  readonly taskRunId: string
  readonly startedAt: number
  readonly input: { readonly seq: number; readonly digest: string } | undefined
  confirmed: boolean
}

/**
 * A claim for one execution (a task's, or a pipeline's carried from task to task): a new
 * token, not held yet.
 *
 * @internal
 */
export const newClaim: Effect.Effect<ClaimState> = Effect.map(
  Effect.suspend(() => executionToken),
  (token): ClaimState => ({ token, held: false, attempt: 1, fence: { lost: false, stale: false }, runId: undefined, current: undefined, last: undefined })
)

/**
 * The claim state of a task of a claimed window: never held (the window's claim stands for
 * it), so its token is never sent.
 */
const unclaimed = (): ClaimState => ({
  token: "",
  held: false,
  attempt: 1,
  fence: { lost: false, stale: false },
  runId: undefined,
  current: undefined,
  last: undefined
})

/** What an abandoned attempt of the cluster engine says. */
const abandonedMessage = "attempt abandoned: the runner running it stopped (killed, lost, frozen, or its shard moved) while it was in flight; " +
  "it may not have called its task; the task was run again by another execution"

/**
 * Claims task `seq` for this execution; while another live execution holds it, waits (one
 * heartbeat at a time, holding no worker slot and no lease) for that execution's checkpoint, or
 * for its claim to go stale. Answers `undefined` once the claim is held, or the verdict the
 * store committed meanwhile.
 */
const acquireClaim = (
  env: TaskEnv,
  claims: Claims,
  spec: AnySpec,
  seq: number,
  taskName: string,
  runId: RunId,
  taskRunId: string,
  claim: ClaimState
): Effect.Effect<TaskVerdict | undefined, StoreUnavailable> =>
  Effect.gen(function*() {
    const pipelineId = spec.pipelineId
    while (true) {
      const now = env.clock.unsafeCurrentTimeMillis()
      const result = yield* claims.claim({ pipelineId, seq, runId, token: claim.token, taskRunId, attempt: claim.attempt, startedAt: now })
      if (result.won) {
        yield* claimWon(env, pipelineId, seq, taskName, runId, now, claim, result.previous)
        return undefined
      }
      claim.held = false
      yield* Effect.sleep(claims.heartbeat)
      const row = yield* env.store.getPipeline(pipelineId)
      if (Option.isNone(row)) return "gone" as const
      const verdict = committed(row.value, seq)
      if (verdict !== undefined) return verdict
    }
  })

/**
 * A claim won: held from now on; an earlier execution of this task under this run that
 * started and never committed (cut short, or frozen past the TTL: the claim taken over from it)
 * is recorded as an abandoned attempt, as the embedded engine's resume does: from that
 * execution's claim (its `startedAt`) to now, the time it was found abandoned.
 */
const claimWon = (
  env: TaskEnv,
  pipelineId: PipelineId,
  seq: number,
  taskName: string,
  runId: RunId,
  now: number,
  claim: ClaimState,
  previous: Option.Option<Marker>
): Effect.Effect<void, StoreUnavailable> =>
  Effect.suspend(() => {
    claim.held = true
    const p = previous
    if (Option.isSome(p) && p.value.seq === seq && p.value.runId === runId && p.value.token !== claim.token) {
      return env.store.recordAttempt(
        // from its execution's claim (the earliest its attempt began) to now, when it was found
        // abandoned: not a 0 ms attempt at the time of detection (tester17af F13)
        Rows.abandonedAttempt(pipelineId, runId, taskName, seq, now, 0, abandonedMessage, p.value.attempt, p.value.taskRunId, p.value.startedAt)
      )
    }
    return Effect.void
  })

/**
 * The start of a task's execution when the store lives in the claims' database
 * (`env.storeHere`): the L1 read and the claim are one statement (`Claims.claimRunnable`: the
 * task is claimed only when the row says it is the next one to run). Answers the run and the
 * input when this execution holds the claim, or the verdict to return (committed meanwhile,
 * gone, or another execution's checkpoint waited for).
 */
const startClaimed = (
  env: TaskEnv,
  claims: Claims,
  spec: AnySpec,
  seq: number,
  taskName: string,
  claim: ClaimState
): Effect.Effect<
  { readonly verdict: TaskVerdict } | { readonly runId: RunId; readonly taskStarted: number; readonly input: unknown },
  StoreUnavailable
> =>
  Effect.gen(function*() {
    const pipelineId = spec.pipelineId
    const taskStarted = env.clock.unsafeCurrentTimeMillis()
    const first = yield* claims.claimRunnable({ pipelineId, seq, token: claim.token, attempt: claim.attempt, startedAt: taskStarted })
    if (first.pipeline === null) return { verdict: "gone" as const }
    const row = { state: first.pipeline.state as PipelineRecord["state"], nTasksDone: first.pipeline.nTasksDone }
    // L1: a committed checkpoint is never run again (and was not claimed)
    const done = committed(row, seq)
    if (done !== undefined) return { verdict: done }
    if (row.nTasksDone < seq) return { verdict: "gone" as const }
    const runId = first.pipeline.runId as RunId
    if (first.won) {
      yield* claimWon(env, pipelineId, seq, taskName, runId, taskStarted, claim, first.previous)
    } else {
      const other = yield* acquireClaim(env, claims, spec, seq, taskName, runId, `${pipelineId}:${seq}:${runId}:${taskStarted}`, claim)
      if (other !== undefined) return { verdict: other }
    }
    const input = yield* inputOf(env, spec, seq)
    if (Option.isNone(input)) {
      // no input to run from (the previous task's artifact is missing): nothing to run; the
      // claim is given up so that no other execution waits for it
      yield* Effect.ignore(claims.release(pipelineId, claim.token))
      claim.held = false
      return { verdict: "gone" as const }
    }
    return { runId, taskStarted, input: input.value }
  })

/**
 * One try of a task's execution (an L5 retry runs it again). A task with a task claim
 * (`env.claims`, not windowed) runs in a scope of its own, which the claim's heartbeat is
 * forked into (interrupted when the try ends); a task of a claimed window has no claim and no
 * heartbeat, so no scope is opened: the fiber's context keeps the attempt services' `Scope`
 * (`installAttemptServices`), and the attempts take their fast path (`attemptScoped` finds
 * the services installed instead of providing them again around every attempt: pg17ac).
 */
const runTaskOnce = (
  env: TaskEnv,
  spec: AnySpec,
  seq: number,
  claim: ClaimState,
  windowed: WindowedTask | undefined
): Effect.Effect<TaskVerdict | "lost", StoreUnavailable> =>
  windowed !== undefined || env.claims === undefined
    ? taskTry(env, spec, seq, claim, windowed, undefined)
    : Effect.scoped(Effect.flatMap(Effect.scope, (scope) => taskTry(env, spec, seq, claim, windowed, scope)))

const taskTry = (
  env: TaskEnv,
  spec: AnySpec,
  seq: number,
  claim: ClaimState,
  windowed: WindowedTask | undefined,
  /** The try's own scope (the heartbeat's): given when the task holds a task claim. */
  scope: Scope.Scope | undefined
): Effect.Effect<TaskVerdict | "lost", StoreUnavailable> => {
  /** The run this try counts in `env.inFlight`, once known (its marks are read while it runs). */
  let counted: RunId | undefined
  // the try's worker slot: taken before each attempt and given back after it; an attempt
  // (or a slot wait) cut short gives it back here, in the try's one region (ops17al: no
  // region of its own per attempt; `release` is idempotent per holder)
  const holder = emptyHold()
  return Effect.ensuring(
    taskTryBody(env, spec, seq, claim, windowed, scope, holder, (runId) => {
      counted = runId
      enterRun(env, runId)
    }),
    Effect.sync(() => {
      env.slots.release(holder)
      if (counted !== undefined) leaveRun(env, counted)
    })
  )
}

/**
 * Counts an execution of `runId` in flight in this process (`TaskEnv.inFlight`: the runs whose
 * cancel marks are read); {@link leaveRun} when it ends.
 *
 * @internal
 */
export const enterRun = (env: TaskEnv, runId: RunId): void => {
  env.inFlight.set(runId, (env.inFlight.get(runId) ?? 0) + 1)
}

/**
 * An execution counted by {@link enterRun} ended.
 *
 * @internal
 */
export const leaveRun = (env: TaskEnv, runId: RunId): void => {
  const n = (env.inFlight.get(runId) ?? 1) - 1
  if (n <= 0) env.inFlight.delete(runId)
  else env.inFlight.set(runId, n)
}

const taskTryBody = (
  env: TaskEnv,
  spec: AnySpec,
  seq: number,
  claim: ClaimState,
  windowed: WindowedTask | undefined,
  scope: Scope.Scope | undefined,
  /** The try's worker slot (given back by the caller whatever the try's exit). */
  holder: SlotHold,
  /** Told once the try knows its run (before its first attempt). */
  enter: (runId: RunId) => void
): Effect.Effect<TaskVerdict | "lost", StoreUnavailable> =>
  Effect.gen(function*() {
    const { clock, slots, store } = env
    // a task of a claimed window has no task claim: the window's claim and its deadline stand for it
    const claims = windowed === undefined ? env.claims : undefined
    const pipelineId = spec.pipelineId
    const tasks = spec.template.tasks as ReadonlyArray<Task.Any>
    const task = tasks[seq]
    if (task === undefined) return "gone" as const
    let runId: RunId
    let taskStarted: number
    let input: unknown
    claim.fence.lost = false
    claim.fence.stale = false
    const found = Deferred.unsafeMake<TaskVerdict>(FiberId.none)
    /** The input read back from the store (the claim's input then needs no check). */
    const reload = Effect.map(inputOf(env, spec, seq), (loaded) => {
      if (claim.current !== undefined) claim.current = { ...claim.current, input: undefined }
      return loaded
    })
    /**
     * The claim carried to this task checked in one statement (`Claims.fence`, without a
     * slot): renewed and moved to this task, the row read (L1), the input from memory
     * compared with the stored one. `undefined` to go on; else the verdict to return.
     */
    const checkCarried = (cl: Claims): Effect.Effect<TaskVerdict | undefined, StoreUnavailable> =>
      Effect.gen(function*() {
        while (true) {
          const r = yield* readFence(seq, found, claim, yield* cl.fence(fenceRequest(env, pipelineId, claim)))
          if (r === "go") return undefined
          if (r === "committed") return yield* Deferred.await(found)
          if (r === "stale") {
            claim.fence.stale = false
            const loaded = yield* reload
            if (Option.isNone(loaded)) return "gone" as const
            input = loaded.value
            continue
          }
          claim.fence.lost = false
          const other = yield* acquireClaim(env, cl, spec, seq, task.name, runId, `${pipelineId}:${seq}:${runId}:${taskStarted}`, claim)
          if (other !== undefined) return other
        }
      })
    if (windowed !== undefined) {
      // the window's read gave the run and the input (L1 for the whole window)
      runId = windowed.runId
      taskStarted = clock.unsafeCurrentTimeMillis()
      input = windowed.input
    } else if (
      claims !== undefined && env.storeHere && claim.held && claim.runId !== undefined &&
      claim.current !== undefined && claim.current.seq === seq - 1
    ) {
      // the pipeline's claim, carried from its previous task (this execution committed it):
      // no claim statement of its own; the first fence before this task's call (at its slot
      // claim, or after its lease) renews the claim, moves it to this task and reads the row
      // (L1); a task that takes no fenced lease is checked here first
      runId = claim.runId
      taskStarted = clock.unsafeCurrentTimeMillis()
      const last = claim.last
      claim.last = undefined
      const decoded = last === undefined || last.seq !== seq - 1 ? undefined : registryFor(env, tasks[seq - 1]!).load(last.encoded)
      let from: { readonly seq: number; readonly digest: string } | undefined = undefined
      if (decoded !== undefined && decoded._tag === "Right") {
        // the output this execution committed: the next task's input without reading it back
        input = decoded.right
        from = { seq: seq - 1, digest: last!.digest }
      } else {
        const loaded = yield* inputOf(env, spec, seq)
        if (Option.isNone(loaded)) return "gone" as const
        input = loaded.value
      }
      claim.current = { seq, taskRunId: `${pipelineId}:${seq}:${runId}:${taskStarted}`, startedAt: taskStarted, input: from, confirmed: false }
      if (!env.fencedTasks.has(task)) {
        const verdict = yield* checkCarried(claims)
        if (verdict !== undefined) return verdict
      }
    } else if (claims !== undefined && env.storeHere) {
      // the L1 read and the claim in one statement
      claim.last = undefined
      const started = yield* startClaimed(env, claims, spec, seq, task.name, claim)
      if ("verdict" in started) return started.verdict
      runId = started.runId
      taskStarted = started.taskStarted
      input = started.input
      claim.runId = runId
      claim.current = { seq, taskRunId: `${pipelineId}:${seq}:${runId}:${taskStarted}`, startedAt: taskStarted, input: undefined, confirmed: true }
    } else {
      // L1: a committed checkpoint is never run again
      const row = yield* store.getPipeline(pipelineId)
      if (Option.isNone(row)) return "gone" as const
      const done = committed(row.value, seq)
      if (done !== undefined) return done
      if (row.value.nTasksDone < seq) return "gone" as const
      const loaded = yield* inputOf(env, spec, seq)
      if (Option.isNone(loaded)) return "gone" as const
      runId = row.value.runId as RunId
      taskStarted = clock.unsafeCurrentTimeMillis()
      input = loaded.value
      if (claims !== undefined) {
        const other = yield* acquireClaim(env, claims, spec, seq, task.name, runId, `${pipelineId}:${seq}:${runId}:${taskStarted}`, claim)
        if (other !== undefined) return other
      }
    }
    const current: Rows.TaskRun = {
      pipelineId,
      runId,
      taskRunId: `${pipelineId}:${seq}:${runId}:${taskStarted}`,
      taskName: task.name,
      seq
    }
    if (claims !== undefined && scope !== undefined) {
      // the claim is renewed while the execution runs (a renewal that cannot reach the
      // database is skipped: the claim goes stale only after `ttl` without one)
      yield* Effect.forkIn(
        Effect.repeat(
          Effect.ignore(Effect.suspend(() => claims.renew(pipelineId, claim.token, claim.attempt))),
          Schedule.spaced(claims.heartbeat)
        ).pipe(Effect.delay(claims.heartbeat)),
        scope
      )
    }
    const state = yield* stateOf(env, runId)
    enter(runId)
    const registry = registryFor(env, task)
    // the running attempt's loss signal: a global lease it holds lost mid-call (its renewals
    // failed until its local deadline, or its slot was found taken) fails the attempt with
    // `LeaseLost` (retryable) and interrupts its call, before the slot can expire in the
    // database and be claimed by another runner (the deadline keeps a margin): the provider
    // never sees more calls at once than the capacity. The slot is not given back early (it
    // may be another's by then); a result that arrived first is kept (first-writer-wins at
    // the checkpoint).
    const lossGuard = makeLossGuard()
    /** Set when a lease was granted after the run was cancelled: the attempt stopped before its call. */
    let cutByCancel = false
    const cancelledAtLease = () => {
      if (cancelReason(env, runId, pipelineId) === undefined) return false
      cutByCancel = true
      return true
    }
    /**
     * The run was cancelled: the pipeline ends `interrupted` at this task (its checkpoints
     * kept: resumable), nothing of the task recorded, and the task's claim goes back.
     */
    const settleCancelled = (reason: string) =>
      Effect.gen(function*() {
        yield* Effect.uninterruptible(retryOnFailure(
          Effect.zipRight(
            store.flush,
            store.checkpoint(Rows.interruptedUnit(pipelineId, runId, seq, undefined, reason, clock.unsafeCurrentTimeMillis()))
          ),
          env.infraRetry
        ))
        if (claims !== undefined && claim.held) {
          yield* Effect.ignore(claims.release(pipelineId, claim.token))
          claim.held = false
        }
        return "interrupted" as const
      })
    const watch = (lease: Lease<any>): void => {
      const lose = lossGuard.current()
      if (lose !== undefined) PgPools.onLostNow(lease, lose)
    }
    const guardBody = lossGuard.guard
    const shared: AttemptShared = {
      runId,
      bus: env.bus,
      store: readOnlyView(store),
      pools: recheckingPools(
        env,
        task,
        pipelineId,
        seq,
        found,
        claims === undefined && windowed === undefined ? undefined : claim,
        watch,
        windowed,
        cancelledAtLease
      ),
      emit: (kind, pid, data) =>
        Effect.suspend(() => store.emitEvent({ kind, pipelineId: pid, runId, data, ts: clock.unsafeCurrentTimeMillis() })),
      reportMetric: (name, value, o) => reportMetric(store, runId, name, value, o),
      pricing: env.pricing
    }
    const penv: PipelineEnv = {
      cache: env.cache,
      state,
      store,
      pools: env.pools,
      shared,
      memberShared: memberSharedOf(shared),
      slots,
      clock,
      registryFor: (t) => registryFor(env, t),
      whileParked: (self) => self,
      onTerminal: () => Effect.void,
      traceAttempts: false,
      guardBody
    }
    const leaseIds: Array<string> = []
    let attempt = 0
    while (true) {
      attempt++
      claim.attempt = attempt
      if (claims !== undefined && attempt > 1 && !(yield* claims.renew(pipelineId, claim.token, attempt))) claim.fence.lost = true
      // a claimed window past its local deadline calls nothing more
      if (windowed !== undefined && !windowed.live()) claim.fence.lost = true
      // the process was told to stop: no attempt starts any more (nothing is recorded; the
      // execution waits for the process's end and the task's next owner runs it)
      if (env.gate.closed) return yield* Effect.never
      // the run was cancelled: no attempt starts (the task boundary, or before a retry)
      const cancelledBy = cancelReason(env, runId, pipelineId)
      if (cancelledBy !== undefined) return yield* settleCancelled(cancelledBy)
      if (!claim.fence.lost) {
        // a free slot taken without an Effect (as the embedded engine's pipelines do)
        if (!slots.tryTake(holder)) yield* slots.take(holder)
        // (an attempt never fails: its exit is in the result; cut short, the try's `ensuring`
        // gives the slot back)
        const result = yield* runAttempt(penv, spec, task, seq, attempt, input, holder, attempt === 1 ? undefined : taskStarted)
        slots.release(holder)
        // a lease granted after the run was cancelled: the attempt stopped before its call
        if (cutByCancel) return yield* settleCancelled(cancelReason(env, runId, pipelineId) ?? "cancelled")
        // L4: another executor committed this task while the attempt waited for its lease
        const other = yield* Deferred.poll(found)
        if (Option.isSome(other)) return yield* other.value
        if (
          !claim.fence.stale && !claim.fence.lost && claims !== undefined && claim.current !== undefined &&
          !claim.current.confirmed
        ) {
          // the attempt reached its end without a fence (it took no fenced lease): the claim
          // and the input are checked before anything is committed (a stale input sets
          // `claim.fence.stale`), and the task is checked before its attempt from now on
          env.fencedTasks.delete(task)
          const r = yield* readFence(seq, found, claim, yield* claims.fence(fenceRequest(env, pipelineId, claim)))
          if (r === "committed") return yield* Deferred.await(found)
        }
        if (claim.fence.stale) {
          // the input taken from memory was not what the store kept (seen by a fence before
          // the call, or by the check above before the commit): the attempt runs again (same
          // number) from the stored input
          claim.fence.stale = false
          attempt--
          const loaded = yield* reload
          if (Option.isNone(loaded)) return "gone" as const
          input = loaded.value
          continue
        }
        if (!claim.fence.lost) {
          const ended = clock.unsafeCurrentTimeMillis()
          if (attempt === 1) taskStarted = result.startedAt
          leaseIds.push(...result.leaseIds)
          let exit = result.exit
          if (Exit.isSuccess(exit)) {
            const encoded = registry.dump(exit.value)
            if (encoded._tag === "Right") {
              const enc = encoded.right
              // a served output is recorded `cache_hit`, its cache note in the decision (what
              // `report` counts hits, misses and the savings from), with the attempt's usage
              const succeeded = succeededAs(attempt, result.cache)
              const attemptRow = Rows.succeededAttemptRow(current, attempt, succeeded, result, ended)
              const outputDigest = digest(enc.data)
              const unit = Rows.succeededUnit(
                current,
                { typeName: enc.typeName, codec: enc.codec, digest: outputDigest, data: enc.data },
                seq === tasks.length - 1,
                attempt,
                taskStarted,
                ended,
                leaseIds,
                attemptRow
              )
              // the checkpoint is the commit point; a store that keeps the first writer's row
              // (first-writer-wins) makes a racing executor's commit a no-op, and the next task
              // reads its input back from the store: the winner's value
              // L5 at the commit: a store error retries the write, not the call
              yield* Effect.uninterruptible(retryOnFailure(Effect.zipRight(store.flush, store.checkpoint(unit)), env.infraRetry))
              // kept for the pipeline's next task, which takes it as its input once a fence
              // confirms the store kept this digest (an earlier writer may have won)
              claim.last = { seq, encoded: { typeName: enc.typeName, codec: enc.codec, data: enc.data }, digest: outputDigest }
              if (windowed !== undefined) windowed.committed = claim.last.encoded
              return "done" as const
            }
            exit = Exit.fail(encoded.left)
          }
          const { decision, fields, outcome } = yield* judgeFailure(
            task,
            (exit as Exit.Failure<unknown, unknown>).cause,
            attempt,
            ended - taskStarted
          )
          const attemptRow = Rows.attemptRow(
            current,
            attempt,
            outcome,
            fields,
            decision,
            result.leaseIds,
            result.startedAt,
            ended,
            result.usage
          )
          if (decision.retry) {
            yield* store.recordAttempt(attemptRow).pipe(Effect.retry(env.infraRetry))
            yield* Effect.sleep(Duration.millis(decision.delayMs))
            continue
          }
          if (outcome === "cancelled") return yield* Effect.interrupt
          yield* Effect.zipRight(
            store.flush,
            store.checkpoint(Rows.failedUnit(current, attempt, taskStarted, ended, fields, leaseIds, attemptRow, decision.reason))
          ).pipe(Effect.retry(env.infraRetry), Effect.uninterruptible)
          return "failed" as const
        }
      }
      // fenced: another execution took the claim over while this one was frozen or cut off (a
      // zombie); it stopped before its call (nothing is recorded: the other execution recorded
      // this one as abandoned) and waits for the other's checkpoint, or claims the task again
      // once the other's claim went stale
      // a task of a claimed window whose deadline passed: the window is claimed again first
      if (windowed !== undefined) return "lost" as const
      claim.fence.lost = false
      attempt--
      const other = yield* acquireClaim(env, claims!, spec, seq, task.name, runId, current.taskRunId, claim)
      if (other !== undefined) return other
    }
  })
