/**
 * The cluster engine's submitter: registers a run, admits pipelines (at most `maxAdmitted`
 * running at once: L7, v3 cluster has no cap on resident entities) by writing their rows and
 * starting one workflow per window of `window` pipelines (`WindowWorkflow`, `discard: true`:
 * the submitter never hosts them), and follows their rows in the store until all are terminal.
 *
 * Interrupting it (Ctrl-C) stops admission at once: the run is closed `interrupted`; the
 * workflows already started go on on the runners; pipelines not admitted have no row (or
 * keep theirs), so submitting again admits them, and re-starting a window of the same
 * pipelines joins its live execution: the idempotency key is the store's identity and the
 * window's ids (`windowKey`) and its lane (`windowExecutionKey`), and a window with stored
 * rows is started in the lane that already has a live execution (`liveLanes`); a window of
 * other pipelines runs its tasks through the same task claims, so a pipeline in two live
 * windows still runs each task once.
 *
 * @internal
 */
import * as ClusterSchema from "@effect/cluster/ClusterSchema"
import * as EntityAddress from "@effect/cluster/EntityAddress"
import * as EntityId from "@effect/cluster/EntityId"
import * as EntityType from "@effect/cluster/EntityType"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as Runners from "@effect/cluster/Runners"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import type * as Workflow from "@effect/workflow/Workflow"
import type { WorkflowEngine } from "@effect/workflow/WorkflowEngine"
import { Cause, Chunk, Clock, Context, Duration, Effect, Either, Exit, Fiber, HashRing, Option, Random, Stream } from "effect"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import { messageOf } from "../../../domain/internal/errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import type { PipelineState } from "../../../domain/Records.js"
import { digest } from "../../../domain/Json.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import * as CallCache from "../../CallCache.js"
import { type ClaimExpectation, pipelineStatesOf, Store, type StoreService } from "../../Store.js"
import * as Traversal from "../../../domain/Traversal.js"
import * as Rows from "../runner/rows.js"
import * as Infra from "./infra.js"
import { REFUSAL_ADVICE, RUNNERS_REFUSED } from "./refusal.js"
import * as RunnerWatch from "./runnerWatch.js"
import { type PipelineNotRunnable, type WindowOutcome, WindowWorkflow } from "./workflow.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * A warning of the submitter (see {@link SubmitOptions} `onWarning`): `NoRunner`, no runner
 * has been up (registered and healthy in the cluster's runner storage) for `sinceMs`: the
 * admitted pipelines wait for one; `RunnerLeft` / `RunnerResumed` (`runnerWatch.ts`): a runner
 * left with windows of the submission in flight, and when their work ran again.
 *
 * @internal
 */
export type SubmitWarning = {
  readonly _tag: "NoRunner"
  readonly sinceMs: number
  readonly message: string
} | RunnerWatch.RunnerLeft | RunnerWatch.RunnerResumed

/**
 * The default of {@link SubmitOptions} `maxAdmitted` (`--max-admitted`, `run.maxAdmitted` on the
 * cluster engine): 1,024 pipelines running at once across the cluster (256 before pg17ad).
 *
 * Why that many: a window runs on the one runner that owns its shard, and each runner serves
 * its windows from its own block of the pool's slots. With 256 (four windows of 64) a runner
 * was often left without a window while it held its share of the slots (BENCHMARKS.md pg17ad:
 * 83 to 832 leases granted per runner and renewal interval), and a pipeline spends most of its
 * time in flight on round trips, not calls. 1,024 (sixteen windows) keeps every runner busy:
 * at 20,000 pipelines it gave 589 tasks/s against 332 at the same CPU per pipeline (pg17ac).
 * Far more does not help: at 2,048 a runner holds ~700 pipelines, and a lease of its block is
 * held for 250–700 ms around a 50 ms call (the process's event loop is busy with the others'
 * work), so the rate fell to 344 tasks/s (pg17ac, pg17ad).
 *
 * @internal
 */
export const DEFAULT_MAX_ADMITTED = 1024

/**
 * The default number of pipelines per window for `maxAdmitted` pipelines at once: 64, or a
 * quarter of `maxAdmitted` (rounded up) when that is less. A window runs on the one runner
 * that owns its shard, so with windows as large as `maxAdmitted` one window at a time would
 * run and one runner at a time would work; four windows at once keep several runners busy
 * (`--max-admitted` 256 keeps windows of 64, and the default 1,024 sixteen of them).
 *
 * @internal
 */
export const defaultWindow = (maxAdmitted: number): number => Math.max(1, Math.min(64, Math.ceil(maxAdmitted / 4)))

/**
 * Options of {@link submit}.
 *
 * - `maxAdmitted`: pipelines running at once across the cluster (default
 *   {@link DEFAULT_MAX_ADMITTED}, 1,024);
 * - `window`: pipelines per workflow (default {@link defaultWindow}: 64, and at most a quarter
 *   of `maxAdmitted`, so that at least four windows run at once and spread over the runners;
 *   at most `maxAdmitted`): a window is admitted once that many pipelines of the `maxAdmitted`
 *   are free (or the last pipelines, fewer);
 * - `pollInterval`: how often the submitter follows the run (default 500 ms): the rows of
 *   running pipelines read, `onProgress` told, the run's heartbeat written, the runners
 *   checked;
 * - `roomPollInterval`: while admission waits for room (a window's worth of the `maxAdmitted`
 *   to come free), how often the rows of the `2 × window` running pipelines admitted first
 *   are read (default 100 ms; never less often than `pollInterval`): a window is admitted
 *   within this much of the pipelines that make room for it ending, not a whole
 *   `pollInterval` later. Only those rows are read at this pace (one statement); every
 *   running row, and the rest of the follow, keep to `pollInterval`;
 * - `resultEvery`: every how many follows (`pollInterval`) the workflows of running pipelines
 *   are asked for a result (default 5): a workflow that ended without settling its row (a
 *   runner refused it, or the store stayed away past the activity's retry budget) is seen
 *   this way;
 * - `admitBatch`: how many specs are read from the source and admitted together (one read of
 *   their rows, one group commit of the new ones; default 64, at most `maxAdmitted`);
 * - `startConcurrency`: how many workflow starts of a batch are sent at once (default 16);
 * - `noRunnerAfter`: how long no runner may be up before `onWarning` is told (default 10 s;
 *   checked only when the cluster's `RunnerStorage` is in context);
 * - `runId`, `label`, `notes`, `meta`: of the run record;
 * - `onProgress`: told after every poll; `onWarning`: told of a {@link SubmitWarning} (at most
 *   once per `noRunnerAfter`);
 * - `stopAfterFailures`: once this many pipelines of the submission have failed, no more are
 *   admitted (`run.stopAfterFailures` / `--stop-after-failures`); `mayAdmit`: asked of each spec
 *   just before it is admitted, `false` leaves it out (a suite member whose own
 *   `stopAfterFailures` is spent). Both act at admission: the failures are learnt from the rows
 *   every `pollInterval`, and pipelines already admitted go on (see {@link SubmitReport});
 * - `stopAfter`: once this much time (the `Clock`'s) has passed since the submission started,
 *   no more pipelines are admitted (`run.stopAfter` / `--stop-after`); as `stopAfterFailures`,
 *   it acts at admission: pipelines already admitted go on to their end.
 * - `placeWindows` (default true): a window starts in the lane ({@link WINDOW_LANES}
 *   alternative execution ids, {@link chooseLane}) whose shard's runner has the fewest
 *   pipelines of this submission in flight, the shards' runners computed as @effect/cluster
 *   does ({@link shardRunners}, read from its `RunnerStorage` every 2 s at most) and each
 *   in-flight window counted against the runner its execution id's shard has now. A window
 *   with stored rows (a resume, a re-submission) is first looked up in every lane (the run
 *   requests in the cluster's `MessageStorage`): the lane of a live execution is joined, never
 *   doubled; with none live it is placed as a new window (an ended execution in the lane
 *   chosen is cleared first, as always). Needs `Sharding`, `ShardingConfig` and
 *   `RunnerStorage` in context, and `MessageStorage` for windows with stored rows (otherwise,
 *   or `false`: lane 0, the shard the window's ids hash to, which an older submitter's
 *   window also used).
 *
 * @internal
 */
export interface SubmitOptions {
  readonly maxAdmitted?: number | undefined
  readonly window?: number | undefined
  readonly placeWindows?: boolean | undefined
  readonly pollInterval?: Duration.DurationInput | undefined
  readonly roomPollInterval?: Duration.DurationInput | undefined
  readonly resultEvery?: number | undefined
  readonly noRunnerAfter?: Duration.DurationInput | undefined
  readonly admitBatch?: number | undefined
  readonly startConcurrency?: number | undefined
  readonly runId?: RunId | undefined
  readonly label?: string | undefined
  readonly notes?: string | undefined
  readonly meta?: Readonly<Record<string, unknown>> | undefined
  readonly onProgress?: ((progress: SubmitProgress) => Effect.Effect<void>) | undefined
  readonly onWarning?: ((warning: SubmitWarning) => Effect.Effect<void>) | undefined
  /**
   * Told synchronously of each pipeline of the submission once it is settled: `succeeded`,
   * `failed` or `interrupted` (as counted in {@link SubmitProgress}; `interrupted`: its run was
   * cancelled, `cancelMarks.ts`, or a runner refused it) or `skipped` (already succeeded in the
   * store). A suite's submitter counts them per member with it.
   */
  readonly onSettled?: ((pipelineId: PipelineId, outcome: "succeeded" | "failed" | "interrupted" | "skipped") => void) | undefined
  /** Pipelines failed in this submission after which no more are admitted (integer ≥ 1). */
  readonly stopAfterFailures?: number | undefined
  /** Time after the start of the submission (the `Clock`'s) after which no more are admitted. */
  readonly stopAfter?: Duration.DurationInput | undefined
  /**
   * Asked synchronously of each spec right before it is admitted (after the skip of succeeded
   * ones); `false`: the spec is left out of this submission (no row written, or its row kept as
   * it is: submitting again admits it) and counted in {@link SubmitProgress} `withheld`.
   */
  readonly mayAdmit?: ((spec: AnySpec) => boolean) | undefined
  /**
   * Admit each chunk the source gives as it comes (split into `admitBatch` pieces), instead of
   * gathering `admitBatch` specs first, and follow the running pipelines' rows every
   * `pollInterval` while the source is read, so that `onSettled` / `onProgress` are told while
   * the source waits. For a source that waits for admitted pipelines to settle before it gives
   * more (a study's trial window): gathered batches and a follow paused on the source would
   * wait for each other forever. Default off (the behaviour above is unchanged).
   */
  readonly admitAsTheyCome?: boolean | undefined
  /**
   * Told, when the submission is interrupted (Ctrl-C), what it had seen by then: the counts,
   * `status` `interrupted` (`stopReason` null: the caller knows which signal), the time since
   * it started; after the run was closed. What the submitter's summary on Ctrl-C is made of.
   */
  readonly onInterrupted?: ((report: SubmitReport) => Effect.Effect<void>) | undefined
  /**
   * Told synchronously of each spec the submission read from the source but did not admit (a
   * stop, or `mayAdmit`): the ones counted in {@link SubmitProgress} `withheld`, so that every
   * spec read is admitted, skipped or withheld. A suite's submitter counts them per member.
   */
  readonly onWithheld?: ((spec: AnySpec) => void) | undefined
  /**
   * Asked of each spec once there is room to admit it, right before it is admitted (after the
   * skip of succeeded ones and `mayAdmit`): `false` leaves it out of this submission (no row
   * written, not counted: its caller tells its end). What the embedded engine asks when the
   * pipeline is about to start (a study's budgets, `Runner.RunHooks.startGate`): asked here as
   * late as the submitter can, so that it sees what the pipelines settled before it used.
   */
  readonly startGate?: ((spec: AnySpec) => Effect.Effect<boolean>) | undefined
  /**
   * Told synchronously of each spec the submission admitted (its row written and its workflow
   * started: the ones counted in {@link SubmitProgress} `admitted`). A suite's submitter counts
   * them per member, so that what a member read and neither admitted, skipped nor withheld
   * (specs in hand when Ctrl-C interrupted the submission) is known too. `runsUnder` is the
   * run its row, tasks and attempts are filed under: this submission's, or, for a pipeline it
   * follows (`SubmitProgress.followed`: running under an earlier run), that run's; a cancel
   * mark for it (`cancelMarks.ts`) and a read of its attempts must name that run.
   */
  readonly onAdmitted?: ((spec: AnySpec, runsUnder: RunId) => void) | undefined
  /**
   * Run once when the submission ends with no stop of its own (`stopReason` null): a reason
   * closes the run `interrupted` with that `stopReason` (its row and its `run.finished` event)
   * instead of `completed`; the report then says `interrupted` with `stopReason` null (the
   * caller knows its reason). The cluster-backed runner's stop and a study's drain.
   */
  readonly closeAs?: Effect.Effect<string | undefined> | undefined
  /**
   * Told synchronously, once, when a stop rule of the submission stops admission for good:
   * `stopAfterFailures` reached, `stopAfter` passed, or runners refused a pipeline. Told as the
   * rule becomes true (the failure or refusal counted, the timer fired), so before the
   * `onSettled` of the pipeline that reached it, and whether or not specs are left to admit.
   * What a trial window is told (`Runner.RunHooks.admissionStopped`), so that no pull under
   * way starts another trial (the cluster `Runner`, `submitRunner.ts`).
   */
  readonly onAdmissionStopped?: (() => void) | undefined
  /**
   * Told, when runners refused pipelines, what the submission saw by then (the refused ones
   * counted `interrupted` and `refused`, `status` `interrupted`, `stopReason` null), once the
   * admitted pipelines were followed to their end and before it fails with
   * {@link refusedError}: what the submitter's summary on a refusal is made of.
   */
  readonly onRefused?: ((report: SubmitReport) => Effect.Effect<void>) | undefined
}

/**
 * What the submitter has seen so far: pipelines admitted by this submission, skipped (already
 * succeeded in the store), and of the admitted ones, how many ended succeeded / failed (a task
 * failed for good, or the workflow ended without a verdict) / interrupted (resumable: their run
 * was cancelled, `cancelMarks.ts`, or a runner refused them: `refused` counts those among the
 * `interrupted`, their rows are left `interrupted`), and how many are running now. So
 * `admitted = succeeded + failed + interrupted + running`, and each count is the number of the
 * submission's pipelines that ended so under its run: its rows in that state, and the rows
 * another run admitted again once they ended here (`failed` or `interrupted`), counted as
 * they ended here whatever they became under that run (break38 F2; a cause names that run).
 *
 * @internal
 */
export interface SubmitProgress {
  readonly runId: RunId
  readonly admitted: number
  readonly skipped: number
  readonly succeeded: number
  readonly failed: number
  /**
   * Admitted pipelines left `interrupted`: the runners settled them so (the run was cancelled:
   * `cancelMarks.ts`), or they refused them (`refused`).
   */
  readonly interrupted: number
  /** Of the `interrupted`, those runners refused (`PipelineNotRunnable`; since issue 17 fix17ai, no longer counted `failed`). */
  readonly refused: number
  readonly running: number
  /** Specs read from the source but left out: `mayAdmit` said no, or admission stopped. */
  readonly withheld: number
  /**
   * Pipelines of earlier runs this submission found `running` (their submitter stopped, their
   * windows going on on the runners) and followed to their end instead of admitting them:
   * their rows, tasks and attempts stay filed under those runs (`followed.runIds`), so they are
   * in none of the counts above (a re-submission after Ctrl-C says what it ran and what it
   * only watched). `onAdmitted` and `onSettled` are told of them as of the others.
   */
  readonly followed: FollowedCounts
}

/**
 * The pipelines of earlier runs a submission followed (see {@link SubmitProgress} `followed`):
 * how many are still running, and how they ended; `runIds`: the runs they are filed under.
 *
 * @internal
 */
export interface FollowedCounts {
  readonly running: number
  readonly succeeded: number
  readonly failed: number
  readonly interrupted: number
  readonly runIds: ReadonlyArray<RunId>
}

/**
 * What {@link submit} returns: the progress at the end, the run's status, and `causes`: one
 * line per pipeline whose workflow ended without a verdict (at most 20).
 *
 * `status` is `completed`, or `interrupted` with `stopReason` `stop_after_failures` when
 * `stopAfterFailures` stopped admission (as the embedded engine closes such a run): the
 * pipelines admitted before the count was reached (up to `maxAdmitted`, some not started yet)
 * were still followed to their end, so `failed` may exceed the count. `stopReason` is
 * `stop_after` when `stopAfter` passed while the source still had specs to admit (they were
 * left out: submitting again admits them); a deadline that passes once everything is admitted
 * stops nothing, and the run is `completed`. Whichever of the two stopped admission first is
 * the reason.
 *
 * @internal
 */
export interface SubmitReport extends SubmitProgress {
  readonly status: "completed" | "interrupted"
  readonly stopReason: "stop_after_failures" | "stop_after" | null
  readonly durationMs: number
  readonly causes: ReadonlyArray<string>
}

/**
 * A fresh run id for a run started at `now` (epoch ms): its UTC time and 8 hex characters.
 *
 * @internal
 */
export const makeRunId = (now: number): Effect.Effect<RunId> =>
  Effect.map(Random.nextIntBetween(0, 0x7fffffff), (r): RunId => {
    const stamp = new Date(now).toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z")
    return `${stamp}-${digest(`${now}:${r}`).slice(0, 8)}` as RunId
  })

/**
 * The refusal of a pipeline that declares `control` (handoffs, rewinds) when the store has no
 * traversal capability (`StoreService.traversal`): a control loop never runs without durable
 * traversal state, on the cluster engine as on the embedded one. `undefined`: it may run (a
 * plain pipeline, or a store that keeps traversals: PgStore does).
 *
 * @internal
 */
export const refuseControl = (spec: AnySpec, store: Pick<StoreService, "traversal">): ConfigError | undefined =>
  spec.template.control === undefined || store.traversal !== undefined ? undefined : new ConfigError({
    message: `pipeline "${spec.template.name}" declares control (handoffs/rewind), and this store keeps no traversal state: ` +
      "use a store that does (PostgreSQL, SQLite or memory)",
    issues: [{ path: "pipeline.control", message: "the store has no traversal capability" }]
  })

/**
 * The error {@link submit} ends with when runners refused pipelines (`PipelineNotRunnable`:
 * they host another experiment, or another definition of it): admission stopped at the first
 * refusal, the pipelines admitted before it were followed to their end, and the message names
 * the cause and says what to do once (`refusal.ts`). The refused pipelines are left
 * `interrupted` (resumable): submitting again once the runners load the submitter's file runs
 * them.
 *
 * @internal
 */
export const refusedError = (refused: number, causes: ReadonlyArray<string>): ConfigError => {
  const message = `${refused} pipeline(s) were refused by the runners: ${causes[0] ?? "not runnable"}. ${REFUSAL_ADVICE}`
  return new ConfigError({ message, issues: [{ path: "--config", message: RUNNERS_REFUSED }] })
}

/**
 * How many alternative executions (lanes) a window may start as: each lane's execution id
 * falls on a shard of its own, so the least-loaded of `R` runners is among the 16 lanes'
 * runners except with probability ((R − 1)/R)¹⁶: 0.15 % at 3 runners, 2.8 % at 5, 19 % at 10
 * (and then the lane chosen is the least loaded of the ~8.5 distinct runners drawn, the
 * "power of d choices" of balanced allocation: Azar, Broder, Karlin, Upfal 1999). Lanes 0–7
 * are the keys of the submitters that had 8 lanes, so a window they started is found again.
 * Each window submitted again (its rows stored) reads the run request of every lane once
 * ({@link SubmitOptions} `placeWindows`).
 *
 * @internal
 */
export const WINDOW_LANES = 16

/**
 * The lane a new window starts in: among `runners` (each lane's runner, by index; `undefined`
 * where unknown), the lane whose runner has the least `load` (pipelines of in-flight windows,
 * 0 for a runner not in it), the lowest lane on ties; lane 0 when no lane's runner is known.
 * Why: a window runs on the runner that owns its shard, and with the shard drawn from its
 * pipeline ids alone the ~16 windows in flight fell on 3 runners as a binomial draw, one runner
 * short of work while another queued (BENCHMARKS.md lead36: tasks/s followed the least-utilized
 * runner).
 *
 * @internal
 */
export const chooseLane = (runners: ReadonlyArray<string | undefined>, load: ReadonlyMap<string, number>): number => {
  let best = 0
  let bestLoad = Infinity
  runners.forEach((runner, lane) => {
    if (runner === undefined) return
    const l = load.get(runner) ?? 0
    if (l < bestLoad) {
      best = lane
      bestLoad = l
    }
  })
  return best
}

/**
 * The runner of each shard of the group `default` as @effect/cluster's `Sharding` computes it
 * (its runner-storage sync: the healthy runners of the group on a `HashRing`, weighted, and
 * `HashRing.getShards`): index `i` holds shard `i + 1`'s runner address as a string. Empty when
 * no runner is healthy.
 *
 * @internal
 */
export const shardRunners = (
  runners: ReadonlyArray<readonly [{ readonly address: unknown; readonly groups: ReadonlyArray<string>; readonly weight: number }, boolean]>,
  shardsPerGroup: number
): ReadonlyArray<string> => {
  const ring = HashRing.make<any>()
  for (const [runner, healthy] of runners) {
    if (!healthy || !runner.groups.includes("default")) continue
    HashRing.add(ring, runner.address as any, { weight: runner.weight })
  }
  return (HashRing.getShards(ring, shardsPerGroup) ?? []).map((a) => String(a))
}

/** A window workflow's address in the cluster (what `MessageStorage.clearAddress` takes). */
const workflowAddress = (sharding: Sharding.Sharding["Type"], executionId: string) => {
  const entityId = EntityId.make(executionId)
  const group = Context.get(WindowWorkflow.annotations, ClusterSchema.ShardGroup)(entityId)
  return new EntityAddress.EntityAddress({
    entityType: EntityType.EntityType.make(`Workflow/${WindowWorkflow.name}`),
    entityId,
    shardId: sharding.getShardId(entityId, group)
  })
}

/** A window workflow that ended: its pipelines' verdicts, or why it ended without them. */
type Ended =
  | { readonly _tag: "Verdict"; readonly verdicts: ReadonlyArray<"succeeded" | "failed" | "gone" | "interrupted"> }
  | { readonly _tag: "Refused"; readonly message: string }
  | { readonly _tag: "Broken"; readonly message: string }

const endedOf = (
  result: Workflow.Result<typeof WindowOutcome.Type, StoreUnavailable | PipelineNotRunnable> | undefined
): Ended | undefined => {
  if (result === undefined || result._tag !== "Complete") return undefined
  const exit = result.exit
  if (Exit.isSuccess(exit)) return { _tag: "Verdict", verdicts: exit.value.verdicts }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure) && failure.value._tag === "PipelineNotRunnable") {
    return { _tag: "Refused", message: failure.value.message }
  }
  return { _tag: "Broken", message: Option.isSome(failure) ? messageOf(failure.value) : Cause.pretty(exit.cause).split("\n")[0]! }
}

/** The states of an ended pipeline's row: what the follow reads (the others stay running). */
const ENDED: ReadonlyArray<PipelineState> = ["succeeded", "failed", "interrupted"]

/** The first `n` elements of `set`, in its (insertion) order. */
const firstOf = <A>(set: ReadonlySet<A>, n: number): Array<A> => {
  const out: Array<A> = []
  for (const a of set) {
    if (out.length >= n) break
    out.push(a)
  }
  return out
}

/**
 * How long the submitter waits for the cluster's runner storage (`getRunners`: placement, the
 * no-runner warning) before it goes on without the answer: 2 s (@effect/cluster's own
 * runner-storage sync allows 5 s, but admission and the follow must not stall on it).
 * A read cut short by it is cancelled on its connection (`@effect/sql-pg` sends
 * `pg_cancel_backend`), and a late cancel may hit the next statement on that connection
 * (SQLSTATE 57014): that is the cluster client's pool (`ClusterEngine.clientLayer`), whose
 * callers here ride 57014 out (`ridingOut`), never the store's, which has its own client
 * (`PgStore.makeClient`) and does not retry a cancelled statement (review37 F7, checked).
 */
const runnersReadTimeout = Duration.seconds(2)

/** How long a follow waits for a window's workflow to answer a poll before asking it again later. */
const windowPollTimeout = Duration.seconds(2)

/** How long the submitter's calls into the cluster's storage ride out a lost database. */
const submitBudget = Duration.seconds(60)

/**
 * The submitter's calls into the cluster's storage (start a workflow, ask for its result,
 * clear an ended one) ride out a database restart: a lost connection or a cancelled statement,
 * failed or died with (the cluster's storage dies with some of its errors), is retried
 * exponentially from 200 ms, each wait at most 5 s, for 60 s in all (`infra.ts`). A loss that
 * lasts longer fails the submission with `StoreUnavailable` saying what could not be done,
 * for how long it was tried and that the admitted pipelines go on (never a defect); any other
 * error is what it was. `doing` names the call ("start the workflow of a window").
 */
const ridingOut = <A, E, R>(self: Effect.Effect<A, E, R>, doing: string): Effect.Effect<A, E | StoreUnavailable, R> =>
  Infra.ridingOutTyped(self, Infra.ridingOutSchedule(submitBudget), (cause) =>
    `cannot ${doing}: the cluster's database stayed unreachable for the submitter's ${
      Duration.format(submitBudget)
    } retry budget (${cause}). The pipelines already admitted go on on the runners; submit again to follow them and admit the rest`)

/**
 * Submits every spec of `specs` and follows them to the end (see the module comment).
 *
 * What is admitted is what `resume` would run: a pipeline without a row, or whose row is
 * `failed`, `interrupted` or `running`; a `succeeded` row is skipped. A workflow that already
 * ended for an admitted pipeline (it failed before, or a runner refused it) is cleared from the
 * cluster's storage before the pipeline is started again, so a re-submission runs it again
 * (from its first uncommitted task: committed checkpoints are kept). A running workflow is
 * joined: the lane of its live execution is looked up first (`placeWindows`), and the start
 * in that lane finds the same execution.
 *
 * Fails with `ConfigError` for a control pipeline when the store keeps no traversal state
 * (before anything is written for it: {@link refuseControl}) or when
 * runners refused pipelines ({@link refusedError}: admission stops at the first refusal), or
 * with the store's `StoreUnavailable`; the source's errors propagate as they are.
 *
 * @internal
 */
export const submit = <SE, SR>(
  specs: Stream.Stream<AnySpec, SE, SR>,
  options: SubmitOptions = {}
): Effect.Effect<SubmitReport, SE | StoreUnavailable | ConfigError, Store | WorkflowEngine | SR> =>
  Effect.suspend(() => {
    /**
     * The run this submission opened, until it is closed: a stop between `openRun` and the
     * submission's own close (the run's start event, the set-up before the body: ux39) closes
     * it too, never leaving its row `running` with nothing submitting.
     */
    const life: { opened?: { readonly store: StoreService; readonly runId: RunId }; closed: boolean } = { closed: false }
    return Effect.onExit(submitting(specs, options, life), (exit) =>
      Exit.isSuccess(exit) || life.opened === undefined || life.closed ? Effect.void : Effect.flatMap(Clock.currentTimeMillis, (endedAt) =>
        life.opened!.store.finishRun(life.opened!.runId, {
          status: "interrupted",
          endedAt,
          stopReason: Exit.isInterrupted(exit) ? "user" : "submit_failed"
        }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not close the run: ${e.message}`)))))
  })

/** {@link submit}'s body; `life` says which run it opened and whether it closed it. */
const submitting = <SE, SR>(
  specs: Stream.Stream<AnySpec, SE, SR>,
  options: SubmitOptions,
  life: { opened?: { readonly store: StoreService; readonly runId: RunId }; closed: boolean }
): Effect.Effect<SubmitReport, SE | StoreUnavailable | ConfigError, Store | WorkflowEngine | SR> =>
  Effect.gen(function*() {
    const store = yield* Store
    /** The states of stored pipelines (`StoreService.pipelineStates`, or the rows' states). */
    const statesOf = pipelineStatesOf(store)
    const maxAdmitted = Math.max(1, options.maxAdmitted ?? DEFAULT_MAX_ADMITTED)
    const windowSize = Math.max(1, Math.min(maxAdmitted, options.window ?? defaultWindow(maxAdmitted)))
    const poll = Duration.decode(options.pollInterval ?? Duration.millis(500))
    const pollMs = Duration.toMillis(poll)
    const roomPoll = Duration.min(poll, Duration.decode(options.roomPollInterval ?? Duration.millis(100)))
    const resultEvery = Math.max(1, options.resultEvery ?? 5)
    const admitBatchSize = Math.max(1, Math.min(maxAdmitted, options.admitBatch ?? Math.max(64, windowSize)))
    const startConcurrency = Math.max(1, options.startConcurrency ?? 16)
    const noRunnerAfter = Duration.toMillis(Duration.decode(options.noRunnerAfter ?? Duration.seconds(10)))
    const runnerStorage = yield* Effect.serviceOption(RunnerStorage.RunnerStorage)
    const sharding = yield* Effect.serviceOption(Sharding.Sharding)
    const messages = yield* Effect.serviceOption(MessageStorage.MessageStorage)
    const startedAt = yield* Clock.currentTimeMillis
    const runId = options.runId ?? (yield* makeRunId(startedAt))
    life.opened = { store, runId }
    yield* store.openRun({
      runId,
      label: options.label ?? null,
      config: {
        engine: "cluster",
        maxAdmitted,
        ...(options.stopAfterFailures === undefined ? {} : { stopAfterFailures: options.stopAfterFailures }),
        ...(options.stopAfter === undefined ? {} : { stopAfterMs: Duration.toMillis(Duration.decode(options.stopAfter)) })
      },
      ...(options.notes === undefined || options.notes === "" ? {} : { notes: options.notes }),
      startedAt,
      meta: options.meta
    })
    // the run's own events, as the embedded engine writes them (report / watch / serve)
    const emit = (kind: string, data: unknown) =>
      Effect.flatMap(Clock.currentTimeMillis, (ts) => store.emitEvent({ kind, pipelineId: null, runId, data, ts })).pipe(
        Effect.zipRight(store.flush),
        Effect.catchAll((e) => Effect.logWarning(`could not record ${kind}: ${e.message}`))
      )
    yield* emit("run.started", { engine: "cluster", maxAdmitted })
    // the call cache's figures of the run, written with `run.finished` as the embedded engine
    // writes them (what `report` and the dashboard read): the runners know each hit, the
    // submitter knows when the run ends, so it counts them from the run's attempt rows (their
    // outcome `cache_hit` and the cache note of their decision), once, at the end: as the
    // store's aggregate (`stats`, one query on Postgres), not by streaming and decoding every
    // attempt of the run into this process (~5 % of the submitter's CPU and ~0.3 s of
    // Postgres at 6,000 pipelines, all of it after the last task; BENCHMARKS.md sub17an)
    const cacheFigures = Effect.map(
      Effect.orElseSucceed(CallCache.statsOfScope(store, runId), () => CallCache.emptyStats),
      (c) =>
        CallCache.isActive(c)
          ? {
            cache: {
              hits: c.hits,
              misses: c.misses,
              refreshed: c.refreshed,
              bypassed: c.bypassed,
              writeFailures: c.writeFailures,
              lookupFailures: c.lookupFailures,
              ...c.tokensSaved,
              costSavedUsd: c.costSavedUsd
            }
          }
          : {}
    )
    const running = new Set<PipelineId>()
    const counts = { admitted: 0, skipped: 0, succeeded: 0, failed: 0, interrupted: 0, refused: 0, withheld: 0 }
    /** Specs read but not admitted: counted, and told to `onWithheld`. */
    const withhold = (specs: ReadonlyArray<AnySpec>) => {
      counts.withheld += specs.length
      if (options.onWithheld !== undefined) for (const spec of specs) options.onWithheld(spec)
    }
    const stopAfterFailures = options.stopAfterFailures
    /** Admission stops for good: a runner refused pipelines, or the failures reached the count. */
    const failuresReached = () => stopAfterFailures !== undefined && counts.failed >= stopAfterFailures
    /** Set by the `stopAfter` timer (a fiber sleeping on the `Clock`) once the time has passed. */
    let timeUp = false
    /** Followed pipelines (see `followedUnder`) runners refused: not in `counts.refused`, which counts the submission's own. */
    let refusedFollowed = 0
    const refusedAll = () => counts.refused + refusedFollowed
    const stopped = () => refusedAll() > 0 || failuresReached() || timeUp
    let stopTold = false
    /**
     * Tells `onAdmissionStopped`, once, as soon as a stop rule holds (`stopped`): called where
     * each rule can become true (a failure or a refusal counted, the `stopAfter` timer), before
     * the `onSettled` of the pipeline that made it true.
     */
    const tellStopped = () => {
      if (stopTold || !stopped()) return
      stopTold = true
      options.onAdmissionStopped?.()
    }
    /**
     * What first left specs of the source out (read but not admitted, or not read): recorded
     * when admission withholds them, so a deadline that passes after the last admission stops
     * nothing.
     */
    let haltedBy: "stop_after_failures" | "stop_after" | null = null
    const halt = () => {
      if (haltedBy === null && refusedAll() === 0) haltedBy = failuresReached() ? "stop_after_failures" : timeUp ? "stop_after" : null
    }
    const causes: Array<string> = []
    const refusals: Array<string> = []
    /**
     * Pipelines of earlier runs found running and followed (not admitted: see
     * `SubmitProgress.followed`), with the run each is counted under (its row's when found).
     */
    const followedUnder = new Map<PipelineId, RunId>()
    const followedRuns = new Set<RunId>()
    /** The run a pipeline of this submission is counted under: this run, or a followed one's run. */
    const runOf = (id: PipelineId): RunId => followedUnder.get(id) ?? runId
    const followed = { running: 0, succeeded: 0, failed: 0, interrupted: 0 }
    /** Counts a pipeline's end: the submission's own counts, or the followed ones'. */
    const tally = (id: PipelineId, outcome: "succeeded" | "failed" | "interrupted") => {
      if (followedUnder.has(id)) {
        followed.running--
        followed[outcome]++
      } else counts[outcome]++
    }
    const progress = (): SubmitProgress => ({
      runId,
      ...counts,
      running: running.size - followed.running,
      followed: { ...followed, runIds: Array.from(followedRuns) }
    })
    const settled = (id: PipelineId, outcome: "succeeded" | "failed" | "interrupted" | "skipped") => options.onSettled?.(id, outcome)
    let polls = 0
    /** When the last whole follow ran (`Clock` ms): the rows alone are read in between. */
    let followedAt = startedAt
    let runnerSeenAt = startedAt
    let warnedAt = startedAt

    // the workflows are keyed by this store's identity too (`workflowKey`): a fresh store on the
    // same cluster database runs its pipelines, it is not answered from another store's replies
    const storeId = store.storeId === undefined ? undefined : yield* store.storeId
    const payloadOf = (specs: ReadonlyArray<AnySpec>, lane = 0) => ({
      pipelineIds: specs.map((spec) => spec.pipelineId),
      specDigests: specs.map((spec) => spec.specDigest),
      storeId,
      ...(lane === 0 ? {} : { lane })
    })
    /** A started window: its execution id and its pipelines, in order. */
    interface Window {
      readonly executionId: string
      readonly ids: ReadonlyArray<PipelineId>
    }
    const shardingConfig = yield* Effect.serviceOption(ShardingConfig.ShardingConfig)
    /** The shards' runners as last computed (`shardRunners`), and when (ms); refreshed every 2 s at most. */
    let placement: { at: number; runners: ReadonlyArray<string> } | undefined = undefined
    const placementNow = Effect.gen(function*() {
      if (options.placeWindows === false || Option.isNone(runnerStorage) || Option.isNone(sharding) || Option.isNone(shardingConfig)) {
        return undefined
      }
      const now = yield* Clock.currentTimeMillis
      if (placement === undefined || now - placement.at >= 2_000) {
        // a read that fails or hangs (the database away) places nothing for 2 s: lane 0, as
        // without placement; admission never waits on it past `runnersReadTimeout`
        const runners = yield* runnerStorage.value.getRunners.pipe(
          Effect.timeout(runnersReadTimeout),
          Effect.orElseSucceed(() => [])
        )
        placement = { at: now, runners: shardRunners(runners, shardingConfig.value.shardsPerGroup) }
      }
      return placement.runners.length === 0 ? undefined : placement.runners
    })
    /** The runner of an execution id's shard by `runners` (`undefined` when unknown). */
    const runnerOfExecution = (runners: ReadonlyArray<string>, executionId: string): string | undefined => {
      if (Option.isNone(sharding)) return undefined
      const entityId = EntityId.make(executionId)
      const group = Context.get(WindowWorkflow.annotations, ClusterSchema.ShardGroup)(entityId)
      if (group !== "default") return undefined
      return runners[sharding.value.getShardId(entityId, group).id - 1]
    }
    /** The windows with a pipeline still running. */
    const windows = new Set<Window>()

    /**
     * Counts a pipeline whose row another run took (`takenBy`: the row is filed under it now,
     * not under the run the pipeline is counted under, {@link runOf}): a row moves to another
     * run only when another submission admits it again, and a submission admits again only a
     * row that ended `failed` or `interrupted` (a succeeded one is skipped, a running one
     * followed); so the pipeline ended here, unsucceeded, whatever the row says now (it may
     * have succeeded under the other run since: that run's success, break38 F2). It is counted
     * `interrupted` when a cancel stopped it under its run (`cancelMarks.ts`: the runner
     * commits the row's `interrupted` and a `pipeline.interrupted` event of that run in one
     * checkpoint) or runners refused it ({@link checkWindow} commits the same pair), and events
     * are never rewritten, so the event outlives the row's state; one
     * count on the events' pipeline index, read only for the rare taken row), else `failed`,
     * with a cause naming the run that took it.
     */
    const countTaken = (id: PipelineId, takenBy: RunId) =>
      Effect.gen(function*() {
        const under = runOf(id)
        const cancelled = yield* store.countEvents({ pipelineId: id, runId: under, kind: "pipeline.interrupted" })
        const outcome = cancelled > 0 ? "interrupted" as const : "failed" as const
        running.delete(id)
        tally(id, outcome)
        if (outcome === "failed") tellStopped()
        settled(id, outcome)
        if (causes.length < 20) {
          causes.push(`${id}: ${outcome} under ${under === runId ? "this run" : `run ${under}`}, then admitted again by run ${takenBy} (its row is filed under that run now)`)
        }
      })

    /** Windows whose poll timed out and has not ended yet (its runner does not answer). */
    const hanging = new Set<Window>()
    /**
     * Asks a window's workflow whether it ended, and settles its pipelines still running: a
     * pipeline whose row is not terminal when its window ended (a runner refused the window, or
     * the store stayed away past the activity's retry budget) is counted from the workflow's
     * verdict, or failed with its cause; one a runner refused is set `interrupted` and counted
     * so (and `refused`). A row filed under another run now (admitted again after it ended
     * here, and perhaps `running` there) is counted by {@link countTaken}, before any verdict:
     * the window's execution id does not name the run, so the other run's start of the same
     * window may be the execution polled.
     */
    const checkWindow = (w: Window) =>
      Effect.gen(function*() {
        // a window whose runner does not answer (paused, hung: the connection stays up) is asked
        // again at a later follow: its poll would hold up the follow, and with it the runner
        // watch's pings and progress lines, until the runner answers or its registration lapses
        // (break39 F4 b: told only at +18 s as "left the cluster"); at most one poll per window
        // hangs at a time (the timed-out one's interruption goes on in the background)
        if (hanging.has(w)) return
        hanging.add(w)
        const polled = yield* ridingOut(WindowWorkflow.poll(w.executionId), "ask a window's workflow for its result").pipe(
          Effect.ensuring(Effect.sync(() => void hanging.delete(w))),
          Effect.disconnect,
          Effect.timeoutOption(windowPollTimeout)
        )
        if (Option.isNone(polled)) return
        const ended = endedOf(polled.value)
        if (ended === undefined) return
        windows.delete(w)
        const live = w.ids.filter((id) => running.has(id))
        if (live.length === 0) return
        // the rows' states are read again: a verdict is written to the row before the workflow ends
        const states = yield* statesOf(live)
        for (const id of live) {
          const row = states.get(id)
          // another run admitted it again after it ended here: neither the row's state nor the
          // verdict (the other run's start of the same window may have answered it) is this run's
          if (row !== undefined && row.runId !== runOf(id)) {
            yield* countTaken(id, row.runId)
            continue
          }
          running.delete(id)
          const state = row?.state
          if (state === "succeeded") {
            tally(id, "succeeded")
            settled(id, "succeeded")
            continue
          }
          if (state === "failed") {
            tally(id, "failed")
            tellStopped()
            settled(id, "failed")
            continue
          }
          // settled so by a runner on a cancel of this run (`cancelMarks.ts`)
          if (state === "interrupted" && ended._tag === "Verdict") {
            tally(id, "interrupted")
            settled(id, "interrupted")
            continue
          }
          if (ended._tag === "Refused") {
            // nothing of it ran: left interrupted, resumable (a submission admits it again),
            // not running with no runner running it (tester17af F7); counted so, as its row
            // says (`refused` counts them among the `interrupted`). The row and a
            // `pipeline.interrupted` event of the run it was refused under are one checkpoint:
            // the event outlives the row's state, so a submission whose refused pipeline another
            // run admits again before it looks still counts it interrupted ({@link countTaken})
            const now = yield* Clock.currentTimeMillis
            yield* store.checkpoint({
              pipelineId: id,
              pipeline: { state: "interrupted", updatedAt: now },
              events: [{
                kind: "pipeline.interrupted",
                pipelineId: id,
                runId: runOf(id),
                data: { reason: "refused", error: ended.message },
                ts: now
              }]
            })
            // `refused` counts the submission's own among its `interrupted`; a followed one's
            // refusal stops admission and ends the submission the same way (`refusedAll`)
            if (followedUnder.has(id)) refusedFollowed++
            else counts.refused++
            tally(id, "interrupted")
            if (refusals.length < 20) refusals.push(ended.message)
            if (causes.length < 20) causes.push(`${id}: ${ended.message}`)
            tellStopped()
            settled(id, "interrupted")
            continue
          }
          const verdict = ended._tag === "Verdict" ? ended.verdicts[w.ids.indexOf(id)] : undefined
          if (verdict === "succeeded") {
            tally(id, "succeeded")
            settled(id, "succeeded")
            continue
          }
          tally(id, "failed")
          tellStopped()
          settled(id, "failed")
          if (causes.length < 20) {
            causes.push(`${id}: ${ended._tag === "Verdict" ? `its workflow ended "${verdict}" without settling the row` : ended.message}`)
          }
        }
      })

    /** Which runner left with windows in flight, and when their work ran again (newuser37 F4). */
    const watch = yield* RunnerWatch.make({
      runners: yield* Effect.serviceOption(Runners.Runners),
      lockExpiration: Option.match(shardingConfig, { onNone: () => Duration.seconds(35), onSome: (c) => c.shardLockExpiration })
    })
    /**
     * Tells `onWarning` when no runner has been up for `noRunnerAfter`, and when a runner left
     * with windows in flight or their work ran again (`runnerWatch.ts`).
     */
    const checkRunners = Effect.gen(function*() {
      if (Option.isNone(runnerStorage) || options.onWarning === undefined) return
      const now = yield* Clock.currentTimeMillis
      // a read that fails or hangs tells nothing (no warning from it, and the follow goes on)
      const read = yield* runnerStorage.value.getRunners.pipe(Effect.timeout(runnersReadTimeout), Effect.option)
      if (Option.isNone(read)) return
      const runners = read.value
      const assignment = Option.isSome(shardingConfig) ? shardRunners(runners, shardingConfig.value.shardsPerGroup) : []
      for (const event of yield* watch.check({ now, runners, assignment, windows, running, runnerOf: runnerOfExecution })) {
        yield* options.onWarning(event)
      }
      if (runners.some(([, healthy]) => healthy)) {
        runnerSeenAt = now
        return
      }
      if (now - runnerSeenAt >= noRunnerAfter && now - warnedAt >= noRunnerAfter) {
        warnedAt = now
        const seconds = Math.round((now - runnerSeenAt) / 1000)
        yield* options.onWarning({
          _tag: "NoRunner",
          sinceMs: now - runnerSeenAt,
          message: `no cluster runner has been up for ${seconds} s: ${running.size} admitted pipeline(s) wait for one`
        })
      }
    })

    /**
     * Reads the rows of running pipelines once (one query) and drops the terminal ones; once
     * `pollInterval` has passed since the last whole follow, follows the rest too (the windows'
     * results every `resultEvery` of them, the runners, the heartbeat, `onProgress`). In
     * between (a room poll) only the rows of the `2 × window` pipelines admitted first are
     * read: pipelines end roughly in the order they were admitted (each runner serves its
     * windows' tasks first come, first served), so these are where the room for the next
     * window comes from, at a fraction of reading every running row (up to `maxAdmitted`)
     * ten times a second. A pipeline further down that ended is seen at the next whole follow.
     * An ended row filed under another run than the one the pipeline is counted under (the read
     * returns each ended row's run id beside its state) is counted by {@link countTaken}.
     */
    const refreshOnce = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const whole = now - followedAt >= pollMs
      // `running` iterates in insertion order: the pipelines admitted first come first
      const ids = whole ? Array.from(running) : firstOf(running, 2 * windowSize)
      // the ended ones among them, with their states and runs only (three columns of the ended rows)
      const ended = yield* statesOf(ids, ENDED)
      for (const id of ids) {
        const row = ended.get(id)
        if (row === undefined) continue
        // ended under another run, which admitted it again after it ended here (break38 F2)
        if (row.runId !== runOf(id)) {
          yield* countTaken(id, row.runId)
          continue
        }
        const state = row.state
        // an `interrupted` row: a runner settled it so on a cancel of this run (`cancelMarks.ts`)
        if (state === "succeeded" || state === "failed" || state === "interrupted") {
          running.delete(id)
          tally(id, state)
          tellStopped()
          settled(id, state)
        }
      }
      if (!whole) return
      followedAt = now
      polls++
      const askResults = polls % resultEvery === 0
      for (const w of Array.from(windows)) {
        if (!w.ids.some((id) => running.has(id))) windows.delete(w)
        else if (askResults) yield* checkWindow(w)
      }
      // once more after the last pipelines ended: the windows of a runner that left ran again
      if (running.size > 0 || watch.waiting()) yield* checkRunners
      yield* store.heartbeat(runId, yield* Clock.currentTimeMillis)
      if (options.onProgress !== undefined) yield* options.onProgress(progress())
    })
    // one follow at a time: with `admitAsTheyCome` a background follow runs beside admission's
    const following = yield* Effect.makeSemaphore(1)
    const refresh = following.withPermits(1)(refreshOnce)
    // waiting for room: the rows every `roomPollInterval`, the whole follow every `pollInterval`
    const waitBelow = (n: number) =>
      Effect.whileLoop({
        while: () => running.size > n && !stopped(),
        body: () => Effect.zipRight(Effect.sleep(roomPoll), refresh),
        step: () => {}
      })

    /**
     * Waits for a window workflow to end, and says whether it ended (then starting it again
     * needs {@link clearEnded} first, or the start would be answered from the ended one). A
     * workflow settles its rows `failed` (or `interrupted`, on a cancel) before it ends: when a
     * row of the window is so (`anyFailed`) and the window's workflow has a run request but no
     * reply yet, the reply is awaited (polling every `pollInterval`), else the new start would
     * join the ending execution and never run the pipeline again.
     */
    const awaitEnded = (executionId: string, first: PipelineId, anyFailed: boolean) =>
      Effect.gen(function*() {
        if (Option.isNone(sharding) || Option.isNone(messages)) return false
        let result = yield* ridingOut(WindowWorkflow.poll(executionId), "ask an ended window's workflow for its result")
        while (anyFailed && result === undefined) {
          // no run request stored: the rows were settled by another engine or workflow (nothing to wait for)
          if (!(yield* hasRequest(messages.value, sharding.value, executionId, first))) return false
          yield* Effect.sleep(poll)
          yield* checkRunners
          result = yield* ridingOut(WindowWorkflow.poll(executionId), "ask an ended window's workflow for its result")
        }
        return result !== undefined && result._tag === "Complete"
      })

    /**
     * Clears a window workflow that ended ({@link awaitEnded}), so starting it again runs it
     * again. Done only right before this submission's own start of that window, in the same
     * uninterruptible step, after its claim won the rows: a clear between another
     * submission's start and its runner's read of it deletes that start, leaving its rows
     * `running` with nothing running them (break39 F1: a submission that looked at the ended
     * workflow, then lost the rows to another that cleared and started it, cleared it again).
     */
    const clearEnded = (executionId: string, first: PipelineId) =>
      Effect.gen(function*() {
        if (Option.isNone(sharding) || Option.isNone(messages)) return
        const address = workflowAddress(sharding.value, executionId)
        yield* ridingOut(messages.value.clearAddress(address), `clear the ended workflow of the window of ${first}`).pipe(
          Effect.mapError((e) =>
            e._tag === "StoreUnavailable"
              ? e
              : new StoreUnavailable({ message: `cannot clear the ended workflow of the window of ${first}: ${messageOf(e)}` })
          )
        )
      })

    /**
     * Whether a window's execution has a run request stored in the cluster's message storage
     * (it was started, and not cleared since): one read, riding out a lost database.
     */
    const hasRequest = (
      storage: MessageStorage.MessageStorage["Type"],
      shards: Sharding.Sharding["Type"],
      executionId: string,
      first: PipelineId
    ) =>
      ridingOut(
        storage.requestIdForPrimaryKey({ address: workflowAddress(shards, executionId), tag: "run", id: "" }),
        `read the workflow of the window of ${first}`
      ).pipe(
        Effect.map(Option.isSome),
        Effect.mapError((e) =>
          e._tag === "StoreUnavailable"
            ? e
            : new StoreUnavailable({ message: `cannot read the workflow of the window of ${first}: ${messageOf(e)}` })
        )
      )

    /**
     * The lanes of a window with stored rows that hold a live execution (a run request and no
     * result yet), lowest first, from its lanes' execution ids (`ids`, by lane): every lane is
     * read (8 at a time), since a window first started by a placing submitter may be in any of
     * them. Empty without the cluster's `MessageStorage` (the caller keeps lane 0).
     */
    const liveLanes = (ids: ReadonlyArray<string>, first: PipelineId) =>
      Option.isNone(sharding) || Option.isNone(messages) ? Effect.succeed([]) : Effect.map(
        Effect.forEach(ids, (executionId, lane) =>
          Effect.gen(function*() {
            if (!(yield* hasRequest(messages.value, sharding.value, executionId, first))) return undefined
            const result = yield* ridingOut(WindowWorkflow.poll(executionId), "ask a window's workflow for its result")
            // running, or suspended (it resumes on its runner): live; only a complete one is not
            return result === undefined || result._tag !== "Complete" ? lane : undefined
          }), { concurrency: 8 }),
        (lanes) => lanes.filter((lane): lane is number => lane !== undefined)
      )

    /**
     * Admits a batch of specs in the source's order: one read of their rows, then, once a
     * window's worth of the `maxAdmitted` is free, their rows written in one transaction, each
     * only while it is as read (`Store.claimAdmissions`, where the store has it; one group
     * commit otherwise), and one workflow started per window of `window` pipelines of the rows
     * won, `startConcurrency` at a time. One by one, each admission waited for its own round trips
     * (the row read, the admission's commit, the workflow's request and the runner's notice),
     * and that serial latency, not the window, bounded how many pipelines ran at once.
     * A control pipeline is refused before anything is written for it when the store keeps no
     * traversal state (the ones before it in the batch are admitted first).
     */
    /** The specs `mayAdmit` lets in (all without it); the others are withheld (`withhold`). */
    const admissible = (specs: ReadonlyArray<AnySpec>): ReadonlyArray<AnySpec> => {
      const gate = options.mayAdmit
      if (gate === undefined) return specs
      const refused: Array<AnySpec> = []
      const kept = specs.filter((spec) => gate(spec) || (refused.push(spec), false))
      withhold(refused)
      return kept
    }

    const admitBatch = (batch: ReadonlyArray<AnySpec>) =>
      Effect.gen(function*() {
        if (stopped()) {
          halt()
          withhold(batch)
          return
        }
        const control = batch.findIndex((spec) => refuseControl(spec, store) !== undefined)
        const specs = control === -1 ? batch : batch.slice(0, control)
        // their rows: a stored row is admitted again from where it is (`Rows.admissionRow`)
        const stored = specs.length === 0
          ? new Map<PipelineId, never>()
          : yield* store.getPipelines(specs.map((spec) => spec.pipelineId))
        let pending: ReadonlyArray<AnySpec> = specs.filter((spec) => {
          if (stored.get(spec.pipelineId)?.state !== "succeeded") return true
          counts.skipped++
          settled(spec.pipelineId, "skipped")
          return false
        })
        while (pending.length > 0) {
          // a full window (or the last pipelines) at a time: windows of one or two pipelines,
          // admitted as single pipelines finish, would pay the engine's messages per pipeline
          yield* waitBelow(maxAdmitted - Math.min(windowSize, pending.length))
          if (stopped()) {
            halt()
            withhold(pending)
            return
          }
          pending = admissible(pending)
          if (pending.length === 0) break
          const room = maxAdmitted - running.size
          const take = Math.min(pending.length, room >= windowSize ? room - (room % windowSize) : room)
          let group: ReadonlyArray<AnySpec> = pending.slice(0, take)
          pending = pending.slice(group.length)
          if (options.startGate !== undefined) {
            group = yield* Effect.filter(group, options.startGate)
            // a stop that came while the gate was asked (it may read the store) withholds them
            if (stopped()) {
              halt()
              withhold([...group, ...pending])
              return
            }
            group = admissible(group)
            if (group.length === 0) continue
          }
          // the windows are planned before any row is written: a window with stored rows joins
          // its live execution (in whichever lane), or first waits for an ending one of the same
          // pipelines to end (`awaitEnded`; cleared right before its start); a stop or a Ctrl-C during that wait
          // leaves the rows as they were (failed, interrupted), never `running` with no window
          const shardsNow = yield* placementNow
          // each window goes to the runner with the least work in flight (a lane each), the
          // windows in flight counted against the runner their shard has now
          const load = new Map<string, number>()
          if (shardsNow !== undefined) {
            for (const w of windows) {
              const runner = runnerOfExecution(shardsNow, w.executionId)
              if (runner === undefined) continue
              load.set(runner, (load.get(runner) ?? 0) + w.ids.reduce((n, id) => n + (running.has(id) ? 1 : 0), 0))
            }
          }
          const planWindow = (specs: ReadonlyArray<AnySpec>) =>
            Effect.gen(function*() {
              const rowsOf = specs.map((spec) => stored.get(spec.pipelineId))
              const anyStored = rowsOf.some((row) => row !== undefined)
              const lookUp = anyStored && Option.isSome(messages)
              let lane = 0
              let runner: string | undefined = undefined
              // the lanes' execution ids, when computed (placement or a lane lookup)
              let laneIds: ReadonlyArray<string> | undefined = undefined
              if (shardsNow !== undefined || lookUp) {
                const ids: Array<string> = []
                for (let l = 0; l < WINDOW_LANES; l++) ids.push(yield* WindowWorkflow.executionId(payloadOf(specs, l)))
                const live = lookUp ? yield* liveLanes(ids, specs[0]!.pipelineId) : []
                if (live.length > 0) lane = live[0]!
                else if (shardsNow !== undefined && (!anyStored || lookUp)) {
                  lane = chooseLane(ids.map((id) => runnerOfExecution(shardsNow, id)), load)
                }
                runner = shardsNow === undefined ? undefined : runnerOfExecution(shardsNow, ids[lane]!)
                if (runner !== undefined) load.set(runner, (load.get(runner) ?? 0) + specs.length)
                laneIds = ids
              }
              const executionId = laneIds?.[lane] ?? (yield* WindowWorkflow.executionId(payloadOf(specs, lane)))
              // (a row settled `interrupted` by a cancel is settled before its workflow ends, as a
              // failed one); the clear itself waits for the claim (`clearEnded`)
              const ended = anyStored &&
                (yield* awaitEnded(
                  executionId,
                  specs[0]!.pipelineId,
                  rowsOf.some((row) => row?.state === "failed" || row?.state === "interrupted")
                ))
              return { specs, executionId, lane, runner, ended }
            })
          let started: Array<
            {
              readonly specs: ReadonlyArray<AnySpec>
              readonly executionId: string
              readonly lane: number
              readonly runner: string | undefined
              /** Its workflow ended: cleared right before it starts again. */
              readonly ended: boolean
            }
          > = []
          for (let i = 0; i < group.length; i += windowSize) started.push(yield* planWindow(group.slice(i, i + windowSize)))
          // a stop that came while an ending execution was awaited: nothing is written yet
          if (stopped()) {
            halt()
            withhold([...group, ...pending])
            return
          }
          const now = yield* Clock.currentTimeMillis
          const rows: Array<ReturnType<typeof Rows.admissionRow>> = []
          const seeds: Array<ReturnType<typeof Rows.seedArtifact>> = []
          const traversals: Array<{ readonly pipelineId: PipelineId; readonly state: Traversal.VisitState }> = []
          /** What this admission read of each row it writes (`undefined`: none): the claim's condition. */
          const expected: Array<ClaimExpectation | undefined> = []
          for (const spec of group) {
            const row = stored.get(spec.pipelineId)
            // a running row is followed as it is: its workflow may be committing tasks right
            // now, and writing the row again would put back the cursor read above
            if (row?.state === "running") continue
            rows.push(Rows.admissionRow(spec, row?.nTasksDone ?? 0, row, runId, now))
            expected.push(row === undefined ? undefined : { runId: row.runId, state: row.state, nTasksDone: row.nTasksDone, updatedAt: row.updatedAt })
            if (row === undefined) {
              seeds.push(Rows.seedArtifact(spec, runId, now))
              // a new control pipeline's traversal starts with its row, as on the embedded
              // engine; a stored one continues from its own (`controlled.ts`)
              if (spec.template.control !== undefined) {
                traversals.push({ pipelineId: spec.pipelineId, state: Traversal.initial(spec.pipelineId, spec.template.nTasks) })
              }
            }
          }
          // from the admission's write to its windows' starts and their counting: one step a
          // Ctrl-C cannot cut in half (cut after the write, the rows won stayed `running` with
          // no window started for them, and the submission said it admitted none: break38 F1);
          // the waits that may be long (room, an ending execution) all come before the write
          yield* Effect.uninterruptible(Effect.gen(function*() {
            // on a store other processes write (Postgres), each row is written only if it is still
            // as this admission read it (before it waited for room): of two submitters of the same
            // pipelines, the one whose read is stale leaves them to the other (never puts a finished
            // row back to `running` at its old cursor, nor starts a second window for them)
            const lost = new Set<PipelineId>()
            if (store.claimAdmissions !== undefined && rows.length > 0) {
              const outcomes = yield* store.claimAdmissions({
                pipelines: rows,
                seeds,
                ...(traversals.length === 0 ? {} : { traversals })
              }, expected)
              outcomes.forEach((outcome, k) => {
                if (outcome._tag === "Lost") lost.add(rows[k]!.pipelineId)
              })
            } else {
              yield* store.admit(rows, seeds, traversals.length === 0 ? undefined : traversals)
            }
            if (lost.size > 0) {
              // admitted by another submission meanwhile: skipped when it already succeeded,
              // withheld otherwise (its own submitter follows it; submitting again admits it)
              const after = yield* statesOf(Array.from(lost))
              const withheldNow: Array<AnySpec> = []
              for (const spec of group) {
                if (!lost.has(spec.pipelineId)) continue
                if (after.get(spec.pipelineId)?.state === "succeeded") {
                  counts.skipped++
                  settled(spec.pipelineId, "skipped")
                } else withheldNow.push(spec)
              }
              withhold(withheldNow)
              group = group.filter((spec) => !lost.has(spec.pipelineId))
              // a window that lost some of its pipelines is another window (another execution id):
              // planned again from the ones won (rows written already; a lost race is rare)
              const replanned: typeof started = []
              for (const w of started) {
                const kept = w.specs.filter((spec) => !lost.has(spec.pipelineId))
                if (kept.length === w.specs.length) replanned.push(w)
                else {
                  if (w.runner !== undefined) load.set(w.runner, (load.get(w.runner) ?? 0) - w.specs.length)
                  if (kept.length > 0) replanned.push(yield* planWindow(kept))
                }
              }
              started = replanned
              if (group.length === 0) return
            }
            // the rows are this submission's now (or followed as they run): an ended workflow of
            // a window is cleared right before its start (never before the claim: break39 F1)
            yield* Effect.forEach(
              started,
              ({ ended, executionId, lane, specs }) =>
                Effect.zipRight(
                  ended ? clearEnded(executionId, specs[0]!.pipelineId) : Effect.void,
                  ridingOut(WindowWorkflow.execute(payloadOf(specs, lane), { discard: true }), "start the workflow of a window")
                ),
              { concurrency: startConcurrency, discard: true }
            )
            for (const { executionId, specs } of started) {
              windows.add({ executionId, ids: specs.map((spec) => spec.pipelineId) })
              for (const spec of specs) {
                running.add(spec.pipelineId)
                // a row running under an earlier run is followed, not taken over (its window
                // writes its tasks under that run): counted apart
                const row = stored.get(spec.pipelineId)
                const follows = row?.state === "running" && row.runId !== runId
                if (follows) {
                  if (!followedUnder.has(spec.pipelineId)) {
                    followedUnder.set(spec.pipelineId, row.runId)
                    followedRuns.add(row.runId)
                    followed.running++
                  }
                } else counts.admitted++
                options.onAdmitted?.(spec, follows ? row.runId : runId)
              }
            }
          }))
        }
        if (control !== -1) return yield* refuseControl(batch[control]!, store)!
      })

    const body = Effect.gen(function*() {
      if (options.stopAfter !== undefined) {
        // a child of this fiber: interrupted when the submission ends
        yield* Effect.fork(Effect.delay(Effect.sync(() => {
          timeUp = true
          tellStopped()
        }), options.stopAfter))
      }
      // admission stops at the first refusal, once the failures reach `stopAfterFailures`, or
      // once `stopAfter` has passed (a spec the stop leaves unread or unadmitted is recorded)
      const admitting = () => {
        if (!stopped()) return true
        halt()
        return false
      }
      // whole chunks: a chunk the source gave is read (a suite counts its specs as read), so
      // when the stop comes between chunks the one in hand is withheld, never dropped unseen
      const source = specs.pipe(
        Stream.chunks,
        Stream.takeWhile((chunk) => admitting() || (withhold(Chunk.toReadonlyArray(chunk)), false)),
        Stream.flattenChunks
      )
      if (options.admitAsTheyCome === true) {
        // the rows are followed while the source waits (see `admitAsTheyCome`); stopped once it ended
        const follow = yield* Effect.fork(
          Effect.forever(Effect.zipRight(Effect.sleep(poll), Effect.when(refresh, () => running.size > 0)))
        )
        // pulled only while admission goes on: a source that does work to give its next chunk
        // (a study's window starts its next trial) is not asked once a stop rule stopped
        // admission, as the embedded runner's feeder stops at a stop
        yield* Effect.scoped(Effect.gen(function*() {
          const pull = yield* Stream.toPull(specs)
          while (admitting()) {
            const next = yield* Effect.either(pull)
            if (Either.isLeft(next)) {
              // the source ended: a stop rule that holds now ended it (`onAdmissionStopped` ends
              // a trial window's source early), so it left specs out as a refused pull would
              if (Option.isNone(next.left)) {
                if (stopped()) halt()
                return
              }
              return yield* Effect.fail(next.left.value)
            }
            const chunk = next.right
            if (!admitting()) return withhold(Chunk.toReadonlyArray(chunk))
            yield* Effect.forEach(
              Chunk.toReadonlyArray(Chunk.chunksOf(chunk, admitBatchSize)),
              (piece) => admitBatch(Chunk.toReadonlyArray(piece)),
              { discard: true }
            )
          }
        })).pipe(Effect.ensuring(Fiber.interrupt(follow)))
      } else {
        yield* Stream.runForEach(Stream.grouped(source, admitBatchSize), (chunk) => admitBatch(Chunk.toReadonlyArray(chunk)))
      }
      // after a refusal, the pipelines already admitted are followed to their end
      yield* Effect.whileLoop({
        while: () => running.size > 0,
        body: () => Effect.zipRight(Effect.sleep(poll), refresh),
        step: () => {}
      })
      if (refusedAll() > 0) {
        if (options.onRefused !== undefined) {
          const at = yield* Clock.currentTimeMillis
          yield* options.onRefused({ ...progress(), status: "interrupted", stopReason: null, durationMs: at - startedAt, causes })
        }
        return yield* refusedError(refusedAll(), refusals)
      }
      const endedAt = yield* Clock.currentTimeMillis
      // the failures' count stops the run even when nothing was left out (as before); a
      // deadline only when it left specs out, and the first of the two to do so is the reason
      const stopReason = haltedBy === "stop_after" ? haltedBy : failuresReached() ? "stop_after_failures" as const : haltedBy
      // with no stop of its own, the caller may close the run interrupted (`closeAs`)
      const closedAs = stopReason === null && options.closeAs !== undefined ? yield* options.closeAs : undefined
      const status = stopReason === null && closedAs === undefined ? "completed" as const : "interrupted" as const
      life.closed = true
      yield* store.finishRun(runId, { status, endedAt, stopReason: stopReason ?? closedAs ?? null })
      yield* emit("run.finished", { status, stopReason: stopReason ?? closedAs ?? null, counters: progress(), ...(yield* cacheFigures) })
      return { ...progress(), status, stopReason, durationMs: endedAt - startedAt, causes }
    })
    // interrupted or failed: admission stops; the run is closed, its admitted pipelines go on
    return yield* Effect.onExit(body, (exit) =>
      Exit.isSuccess(exit) ? Effect.void : Effect.flatMap(Clock.currentTimeMillis, (endedAt) =>
        Effect.suspend(() => {
          life.closed = true
          return store.finishRun(runId, {
          status: "interrupted",
          endedAt,
          stopReason: Exit.isInterrupted(exit) ? "user" : "submit_failed"
        }).pipe(
          Effect.zipRight(Effect.flatMap(cacheFigures, (cache) =>
            emit("run.finished", {
              status: "interrupted",
              stopReason: Exit.isInterrupted(exit) ? "user" : "submit_failed",
              counters: progress(),
              ...cache
            }))),
          Effect.catchAll((e) => Effect.logWarning(`could not close the run: ${e.message}`)),
          Effect.zipRight(
            Exit.isInterrupted(exit) && options.onInterrupted !== undefined
              ? options.onInterrupted({ ...progress(), status: "interrupted", stopReason: null, durationMs: endedAt - startedAt, causes })
              : Effect.void
          )
        )
        })))
  })
