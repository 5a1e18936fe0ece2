/**
 * The state of one run, created by `start` (no field of it is ever absent): live figures,
 * counters, the stop request and the first crash. Mutated in place on the hot path (plain
 * field updates, no `Ref`), read by `stats` at any time.
 *
 * @internal
 */
import { type Cause, Deferred, Exit } from "effect"
import type * as RunConfig from "../../../domain/RunConfig.js"
import type { PoolStats } from "../../Pool.js"
import type { LiveStats, RunHooks } from "../../Runner.js"
import type { RunId } from "../../../domain/Ids.js"
import * as Slice from "./slice.js"

/**
 * The counters of a run (see `LiveStats.counters`).
 *
 * @internal
 */
export interface Counters {
  admitted: number
  succeeded: number
  failed: number
  interrupted: number
  skipped: number
  retries: number
  leasesLeaked: number
  repairFailures: number
  /** Control transitions (handoffs) this run committed, `end` included. */
  handoffs: number
  /** Of `handoffs`, the `end` transitions (the ones that spend no `maxHandoffs` budget). */
  handoffEnds: number
}

/**
 * The call cache's figures of a run (see `CallCache.CacheStats`, whose flat form this is).
 *
 * @internal
 */
export interface CacheCounters {
  hits: number
  misses: number
  refreshed: number
  bypassed: number
  /** Outputs of misses and refreshes the cache failed to store (counted in those too). */
  writeFailures: number
  /** Lookups the cache failed to answer (a damaged or unreadable cache; counted as misses too). */
  lookupFailures: number
  promptTokens: number
  completionTokens: number
  totalTokens: number
  /** The priced cost (US dollars) of the calls the hits replaced; `null` while none was priced. */
  costSavedUsd: number | null
}

/**
 * One run's mutable state.
 *
 * - `stopRequested`: completed with the first stop's reason; `hardStop`: completed by a
 *   second stop or a crash (ends the grace period at once);
 * - `stopReason`: `null` until a stop; `crash`: `null` unless a pipeline fiber died.
 *
 * @internal
 */
export interface RunState {
  readonly runId: RunId
  readonly config: RunConfig.RunConfig
  readonly stopRequested: Deferred.Deferred<string>
  readonly hardStop: Deferred.Deferred<void>
  readonly counters: Counters
  /**
   * Of `counters.skipped`, how many per suite member (`spec.member.experimentId`); pipelines
   * outside suites are not counted here.
   */
  readonly skippedByMember: Map<string, number>
  /**
   * Of `counters.skipped`, the pipelines left to another run that still looks alive (running,
   * heartbeat younger than `staleAfter`), per that run's id: on a shared store (Postgres) it
   * may be working on another host, or be a process killed less than `staleAfter` ago.
   */
  readonly heldByOtherRuns: Map<string, number>
  stopping: boolean
  stopReason: string | null
  /**
   * The run's time slice: its loops give the event loop a turn after this much synchronous
   * work, so that a signal (or any macrotask) reaches the run soon (see `slice.ts`).
   */
  readonly slice: Slice.TimeSlice
  inFlight: number
  delayed: number
  admitted: number
  peakInFlight: number
  peakAdmitted: number
  crash: Cause.Cause<unknown> | null
  finished: boolean
  /**
   * What the call cache did in this run (attempts served, run and stored, and the tokens the
   * served ones saved), recorded with `run.finished` as `cache` when any of it is non-zero.
   */
  readonly cache: CacheCounters
  /**
   * Pipelines whose failure is decided (their last attempt failed and is not retried, or
   * admission failed them), counted at the decision, before the worker slot goes back and
   * before the failure's rows commit (`counters.failed` counts them once committed): what
   * `stopAfterFailures` compares with (see {@link decideFailure}).
   */
  failuresDecided: number
  /** The run's `RunHooks.failureDecided`, told of each pipeline whose failure is decided. */
  onFailureDecided?: RunHooks["failureDecided"]
  /** The run's `RunHooks.skipped`, told of each skipped suite member pipeline. */
  onMemberSkip?: ((spec: { readonly member?: { readonly experimentId: string } | undefined }) => void) | undefined
}

/**
 * A fresh state for the run `runId`; `sliceMs`: its time slice's length (milliseconds of
 * wall-clock time, see `slice.ts`; by default `Infinity`: no turns).
 *
 * @internal
 */
export const make = (
  runId: RunId,
  config: RunConfig.RunConfig,
  stopRequested: Deferred.Deferred<string>,
  hardStop: Deferred.Deferred<void>,
  sliceMs: number = Infinity
): RunState => ({
  runId,
  config,
  stopRequested,
  hardStop,
  counters: {
    admitted: 0,
    succeeded: 0,
    failed: 0,
    interrupted: 0,
    skipped: 0,
    retries: 0,
    leasesLeaked: 0,
    repairFailures: 0,
    handoffs: 0,
    handoffEnds: 0
  },
  skippedByMember: new Map(),
  heldByOtherRuns: new Map(),
  cache: { hits: 0, misses: 0, refreshed: 0, bypassed: 0, writeFailures: 0, lookupFailures: 0, promptTokens: 0, completionTokens: 0, totalTokens: 0, costSavedUsd: null },
  stopping: false,
  stopReason: null,
  slice: Slice.make(sliceMs),
  inFlight: 0,
  delayed: 0,
  admitted: 0,
  peakInFlight: 0,
  peakAdmitted: 0,
  crash: null,
  finished: false,
  failuresDecided: 0
})

/**
 * A pipeline's failure is decided (its last attempt failed and will not be retried, or
 * admission failed it): counted now, synchronously, while the failing attempt still holds its
 * worker slot. The run's `stopAfterFailures` stops the run as soon as the count reaches it (so
 * no pipeline takes a worker slot after that, see `SlotGate.make`), and `RunHooks.failureDecided`
 * hears of it (a suite member's own budget). Counting when the failure's rows have committed
 * instead let the next pipelines take the slot and start meanwhile.
 *
 * @internal
 */
export const decideFailure = (state: RunState, spec: Parameters<NonNullable<RunHooks["failureDecided"]>>[0]): void => {
  state.failuresDecided++
  const budget = state.config.stopAfterFailures
  if (budget !== undefined && state.failuresDecided >= budget) requestStop(state, "stop_after_failures")
  state.onFailureDecided?.(spec)
}

/**
 * Requests a stop (synchronously, callable from a signal handler): the first request records
 * its reason and completes `stopRequested`; a later one completes `hardStop` (stop at once).
 * Nothing happens once the run is finished.
 *
 * @internal
 */
export const requestStop = (state: RunState, reason: string): void => {
  if (state.finished) return
  if (state.stopping) {
    Deferred.unsafeDone(state.hardStop, Exit.void)
    return
  }
  state.stopping = true
  state.stopReason = reason
  Deferred.unsafeDone(state.stopRequested, Exit.succeed(reason))
}

/**
 * The live figures of a run (a copy, safe to keep).
 *
 * @internal
 */
export const liveStats = (state: RunState, pools: Readonly<Record<string, PoolStats>>): LiveStats => ({
  runId: state.runId,
  stopping: state.stopping,
  inFlight: state.inFlight,
  delayed: state.delayed,
  admitted: state.admitted,
  maxAdmitted: state.config.maxAdmitted,
  concurrency: state.config.concurrency,
  counters: { ...state.counters },
  peakInFlight: state.peakInFlight,
  peakAdmitted: state.peakAdmitted,
  pools
})

/**
 * Counts one pipeline the run skipped (`counters.skipped`), and under its suite member
 * (`skippedByMember`) when it has one.
 *
 * @internal
 */
export const countSkip = (state: RunState, spec: { readonly member?: { readonly experimentId: string } | undefined }): void => {
  state.counters.skipped++
  const id = spec.member?.experimentId
  if (id !== undefined) {
    state.skippedByMember.set(id, (state.skippedByMember.get(id) ?? 0) + 1)
    state.onMemberSkip?.(spec)
  }
}
