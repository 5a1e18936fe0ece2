/**
 * Suites at run time: several experiments (members) under one runner, sharing its worker
 * limit, its bounded admission and, where bound, the same pool instances, each keeping its own
 * pipeline identities, checkpoints and metrics.
 *
 * - {@link member} declares a member: an id, a factory giving a fresh source of ordinary
 *   pipeline specs on every call, and its definition digest (what makes a changed member
 *   definition detectable), pool aliases, label and limit;
 * - {@link make} checks a suite's ids and options (`ConfigError` naming the field);
 * - {@link pipelines} streams the selected members' specs, re-keyed into the suite
 *   (`Suite.tagSpec` of `domain/Suite.ts`), taking one spec from each member in turn under
 *   the runner's one bounded admission, and records each member's facts for the run in the
 *   {@link SuiteCatalog} (how many it submitted, whether its source was exhausted, failed or
 *   stopped by a limit);
 * - {@link start} / {@link run} register the members and run them with the `Runner`, and
 *   report the run with an outcome per member ({@link SuiteReport}).
 *
 * Failure isolation: a member's source failing (a failed stream, a throwing iterator or
 * factory, a value that is not a spec) ends that member only, recorded as its `sourceError`;
 * the others go on. A failure of the store (recording facts included) or of a worker stops the
 * suite, as it stops any run. A limit (a member's `limit`, or the total `limit`) never claims a
 * source exhausted: `sourceExhausted` is true only when the source itself ended.
 *
 * Fairness: admission is round-robin by submission (one spec of each member in turn; a turn
 * of 64 specs while more than 8 members are active, so that the admitted pipelines stay within a
 * few member databases); it does not reserve equal execution time or pool capacity.
 *
 * @since 0.5.0
 */
import { Cause, Chunk, Clock, Deferred, Effect, Exit, FiberId, Option, Predicate, Scope, Stream } from "effect"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import type { PipelineId, RunId } from "../domain/Ids.js"
import type { Json } from "../domain/Json.js"
import { messageOf } from "../domain/internal/errors.js"
import type * as Pipeline from "../domain/Pipeline.js"
import type { AttemptRecord } from "../domain/Records.js"
import { checkId, frozenVariables, idKey, type SuiteLayout, tagSpec } from "../domain/Suite.js"
import type { StoreStats } from "../domain/TaskStore.js"
import { SKIPPED_METRIC } from "./internal/runner/run.js"
import * as metric from "./internal/suite/metric.js"
import { oneLine } from "./internal/suiteViews.js"
import type { PoolConfig } from "./Pool.js"
import type { PoolsService } from "./Pools.js"
import * as Runner from "./Runner.js"
import { SuiteCatalog, type SuiteCatalogService } from "./SuiteCatalog.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

// ---------------------------------------------------------------------------------------------
// Members
// ---------------------------------------------------------------------------------------------

/**
 * A member's source of specs: an `Iterable`, an `AsyncIterable` or an Effect `Stream` of
 * ordinary (untagged) pipeline specs.
 *
 * @since 0.5.0
 * @category models
 */
export type MemberSource<S extends AnySpec, E = never, R = never> = Iterable<S> | AsyncIterable<S> | Stream.Stream<S, E, R>

/**
 * Options of {@link member}.
 *
 * - `definitionDigest`: the member's persisted definition digest; a changed digest under an
 *   existing member id is refused by the catalog (`ConfigError`, exit 2). SDK users supply it
 *   and must fold in whatever input semantics the task fingerprint does not cover;
 * - `definitionParts`: optional, what the digest covers part by part (name -> value or short
 *   digest); stored beside it so a refused change names the parts that changed;
 * - `previousDigests`: optional, digests an older format gave the same definition: a root
 *   that registered the member under one of them accepts it and records `definitionDigest`;
 * - `poolAliases`: local pool name → actual pool name (a shared top-level pool, or a private
 *   `experiment:ID:NAME` one), applied to task declarations, `ctx.acquire`, publish and
 *   subscribe (see `Pools.aliased`). They are the only pool names the member reaches: any
 *   other name (an unbound top-level pool, another member's private pool) is `PoolNotFound`;
 * - `label`: a display name (changes no identity);
 * - `limit`: the most specs (repeats included) this member submits per run (integer ≥ 0);
 * - `stopAfterFailures`: the member stops submitting once N of its pipelines failed in a run
 *   (integer ≥ 1; its admitted pipelines still finish, the other members go on;
 *   `MemberFacts.failuresReached`). Run configuration: changes no identity;
 * - `variables`: a study trial's variables (name → JSON value), seen by its tasks as
 *   `ctx.variables`; kept as a deeply frozen copy (`Suite.frozenVariables` of
 *   `domain/Suite.ts`), so no member shares a mutable object with another. They change no
 *   identity: fold them into `definitionDigest` (a study's trial does).
 *
 * @since 0.5.0
 * @category models
 */
export interface MemberOptions {
  readonly definitionDigest: string
  readonly definitionParts?: Readonly<Record<string, string>> | undefined
  readonly previousDigests?: ReadonlyArray<string> | undefined
  readonly poolAliases?: Readonly<Record<string, string>> | undefined
  readonly label?: string | null | undefined
  readonly limit?: number | null | undefined
  readonly stopAfterFailures?: number | null | undefined
  readonly variables?: Readonly<Record<string, Json>> | undefined
}

/**
 * One member of a suite (see {@link member}).
 *
 * @since 0.5.0
 * @category models
 */
export interface Member<S extends AnySpec = AnySpec, E = never, R = never> {
  readonly _tag: "SuiteMember"
  readonly id: string
  /** Gives a fresh source on every call (a run, a resume). */
  readonly factory: () => MemberSource<S, E, R>
  readonly definitionDigest: string
  readonly definitionParts: Readonly<Record<string, string>> | null
  /** Digests an older format gave the same definition (see {@link MemberOptions}). */
  readonly previousDigests: ReadonlyArray<string>
  readonly poolAliases: Readonly<Record<string, string>>
  readonly label: string | null
  readonly limit: number | null
  /** The member's own failure budget per run (see {@link MemberOptions}), `null` when none. */
  readonly stopAfterFailures: number | null
  /** The trial's variables (deeply frozen), `null` outside studies: `ctx.variables`. */
  readonly variables: Readonly<Record<string, Json>> | null
}

/**
 * Declares a suite member. Nothing is checked here: {@link make} checks the members of a
 * suite together (ids, uniqueness, limits, aliases).
 *
 * @param id the member (experiment) id: 1–80 ASCII letters, digits, `-`, `_`
 * @param factory a fresh source of the member's specs on every call
 * @param options definition digest, pool aliases, label, limit
 * @since 0.5.0
 * @category constructors
 */
export const member = <S extends AnySpec, E = never, R = never>(
  id: string,
  factory: () => MemberSource<S, E, R>,
  options: MemberOptions
): Member<S, E, R> => ({
  _tag: "SuiteMember",
  id,
  factory,
  definitionDigest: options.definitionDigest,
  definitionParts: options.definitionParts ?? null,
  previousDigests: [...(options.previousDigests ?? [])],
  poolAliases: { ...(options.poolAliases ?? {}) },
  label: options.label ?? null,
  limit: options.limit ?? null,
  stopAfterFailures: options.stopAfterFailures ?? null,
  variables: options.variables === undefined ? null : frozenVariables(options.variables)
})

// ---------------------------------------------------------------------------------------------
// Suites
// ---------------------------------------------------------------------------------------------

/**
 * A checked suite (see {@link make}).
 *
 * @since 0.5.0
 * @category models
 */
export interface Suite<S extends AnySpec = AnySpec, E = never, R = never> {
  readonly _tag: "Suite"
  readonly id: string
  readonly experiments: ReadonlyArray<Member<S, E, R>>
  /** The output root, as given (the `SuiteStore` layer opens it). */
  readonly outputRoot: string
  readonly layout: SuiteLayout
  /** The pools of the suite: top-level ones and the members' private `experiment:ID:NAME`. */
  readonly pools: ReadonlyArray<PoolConfig>
}

/**
 * Options of {@link make}.
 *
 * @since 0.5.0
 * @category models
 */
export interface MakeOptions<S extends AnySpec, E, R> {
  readonly id: string
  readonly experiments: ReadonlyArray<Member<S, E, R>>
  readonly outputRoot: string
  /** Default `combined`. */
  readonly layout?: SuiteLayout | undefined
  /** When given, every alias target must name one of them. */
  readonly pools?: ReadonlyArray<PoolConfig> | undefined
}

const issue = (path: string, message: string) => ({ path, message })

const refuse = (issues: ReadonlyArray<{ readonly path: string; readonly message: string }>): ConfigError =>
  new ConfigError({
    message: issues.map((i) => `${i.path}: ${i.message}`).join("; "),
    issues: [...issues]
  })

/**
 * Checks and builds a suite. Fails with `ConfigError` listing every problem by field path:
 * an invalid suite or member id (`id`, `experiments[i].id`: 1–80 ASCII letters, digits, `-`,
 * `_`, starting with a letter or digit, no reserved device name), member ids equal
 * case-insensitively, an empty `definitionDigest`, a `limit` that is not an integer ≥ 0, an
 * alias naming no pool of `pools` (when `pools` is given), no member, an empty `outputRoot`,
 * an unknown `layout`.
 *
 * @param options id, members, output root, layout, pools
 * @returns the suite
 * @since 0.5.0
 * @category constructors
 */
export const make = <S extends AnySpec, E = never, R = never>(
  options: MakeOptions<S, E, R>
): Effect.Effect<Suite<S, E, R>, ConfigError> =>
  Effect.suspend(() => {
    const issues: Array<{ path: string; message: string }> = []
    const idIssue = checkId(options.id)
    if (idIssue !== undefined) issues.push(issue("id", `${JSON.stringify(options.id)} ${idIssue}`))
    if (typeof options.outputRoot !== "string" || options.outputRoot === "") {
      issues.push(issue("outputRoot", "must be a non-empty path"))
    }
    const layout = options.layout ?? "combined"
    if (layout !== "combined" && layout !== "byExperiment") {
      issues.push(issue("layout", `must be "combined" or "byExperiment", not ${JSON.stringify(layout)}`))
    }
    if (options.experiments.length === 0) issues.push(issue("experiments", "a suite needs at least one member"))
    const poolNames = options.pools === undefined ? undefined : new Set(options.pools.map((p) => p.name))
    const seen = new Map<string, string>()
    options.experiments.forEach((m, i) => {
      const at = `experiments[${i}]`
      const bad = checkId(m.id)
      if (bad !== undefined) issues.push(issue(`${at}.id`, `${JSON.stringify(m.id)} ${bad}`))
      else {
        const other = seen.get(idKey(m.id))
        if (other !== undefined) {
          issues.push(issue(`${at}.id`, `"${m.id}" is the same id as "${other}" (ids are compared case-insensitively)`))
        } else seen.set(idKey(m.id), m.id)
      }
      if (typeof m.definitionDigest !== "string" || m.definitionDigest === "") {
        issues.push(issue(`${at}.definitionDigest`, "must be a non-empty string"))
      }
      if (m.limit !== null && !(Number.isInteger(m.limit) && m.limit >= 0)) {
        issues.push(issue(`${at}.limit`, `must be an integer >= 0, not ${m.limit}`))
      }
      // (a member made by hand, not by `member`, may lack the field)
      const budget = m.stopAfterFailures ?? null
      if (budget !== null && !(Number.isInteger(budget) && budget >= 1)) {
        issues.push(issue(`${at}.stopAfterFailures`, `must be an integer >= 1, not ${budget}`))
      }
      if (poolNames !== undefined) {
        for (const [local, actual] of Object.entries(m.poolAliases)) {
          if (!poolNames.has(actual)) {
            issues.push(issue(`${at}.poolAliases.${local}`, `names no pool of the suite: "${actual}"`))
          }
        }
      }
    })
    if (issues.length > 0) return Effect.fail(refuse(issues))
    return Effect.succeed({
      _tag: "Suite" as const,
      id: options.id,
      experiments: options.experiments,
      outputRoot: options.outputRoot,
      layout,
      pools: options.pools ?? []
    })
  })

/**
 * What {@link fromLoaded} needs of a loaded suite (the suite loader's `LoadedSuite`, or a
 * study's `suiteFor(version)`, has it all): the id, output root and layout, the pools, and per
 * member its id, label, limit, experiment (whose `pipelines()` gives a fresh stream of specs),
 * definition digest and parts, pool aliases and, for a study's trial, its variable values.
 *
 * @since 0.6.0
 * @category models
 */
export interface LoadedSuiteLike {
  readonly id: string
  readonly output: { readonly root: string; readonly layout: SuiteLayout }
  readonly pools: ReadonlyArray<PoolConfig>
  readonly members: ReadonlyArray<{
    readonly id: string
    readonly label: string | undefined
    readonly limit: number | undefined
    readonly stopAfterFailures?: number | undefined
    readonly experiment: { readonly pipelines: () => Stream.Stream<AnySpec, unknown, any> }
    readonly definitionDigest: string
    readonly definitionParts: Readonly<Record<string, string>>
    readonly previousDigests?: ReadonlyArray<string> | undefined
    readonly poolAliases: Readonly<Record<string, string>>
    /** A study trial's variable values, seen by its tasks as `ctx.variables`. */
    readonly variables?: Readonly<Record<string, Json>> | undefined
  }>
}

/**
 * The runnable suite of a loaded suite file (or a study's suite of one protocol version): one
 * {@link member} per loaded member, running its experiment's pipelines, checked by
 * {@link make} (fails with its `ConfigError`s).
 *
 * @param loaded the loaded suite ({@link LoadedSuiteLike})
 * @returns the suite
 * @since 0.6.0
 * @category constructors
 */
export const fromLoaded = (loaded: LoadedSuiteLike): Effect.Effect<Suite<AnySpec, any, any>, ConfigError> =>
  make<AnySpec, any, any>({
    id: loaded.id,
    outputRoot: loaded.output.root,
    layout: loaded.output.layout,
    pools: loaded.pools,
    experiments: loaded.members.map((m) =>
      member<AnySpec, any, any>(m.id, () => m.experiment.pipelines(), {
        definitionDigest: m.definitionDigest,
        definitionParts: m.definitionParts,
        previousDigests: m.previousDigests,
        poolAliases: m.poolAliases,
        label: m.label ?? null,
        limit: m.limit ?? null,
        stopAfterFailures: m.stopAfterFailures ?? null,
        ...(m.variables === undefined ? {} : { variables: m.variables })
      })
    )
  })

// ---------------------------------------------------------------------------------------------
// Member-scoped metrics
// ---------------------------------------------------------------------------------------------

/**
 * The stored name of a member-scoped metric (`runner.reportMetric(name, v, { experiment })`):
 * a run-scope metric named `experiment:ID:NAME`.
 *
 * @param experimentId the member
 * @param name the metric's name
 * @since 0.5.0
 * @category metrics
 */
export const memberMetricName: (experimentId: string, name: string) => string = metric.memberMetricName

/**
 * The member and the metric name of a stored member-scoped metric name (see
 * {@link memberMetricName}), `undefined` for any other metric.
 *
 * @param stored a stored metric name
 * @since 0.5.0
 * @category metrics
 */
export const parseMemberMetric: (stored: string) => { readonly experimentId: string; readonly name: string } | undefined =
  metric.parseMemberMetric

// ---------------------------------------------------------------------------------------------
// Admission
// ---------------------------------------------------------------------------------------------

/**
 * What a member did in one run, as recorded in the catalog (`MembershipRecord`'s facts):
 * specs submitted (`admitted`), whether its source ended by itself (`sourceExhausted`), its
 * source's failure (`sourceError`) and whether a limit stopped it (`limitReached`).
 *
 * Under a {@link MemberWindow} (not recorded in the catalog, which has no column for them;
 * a study records them in its own tables): whether the member was started at all (`started`;
 * without a window every selected member is), whether the window's `mayStart` refused it
 * (`startRefused`: a stop fired before its turn) and whether `mayAdmit` ended its submissions
 * (`admitRefused`: its budget was spent). Whether the member's own `stopAfterFailures` ended its
 * submissions (`failuresReached`).
 *
 * @since 0.5.0
 * @category models
 */
export interface MemberFacts {
  readonly experimentId: string
  readonly selected: boolean
  admitted: number
  sourceExhausted: boolean
  sourceError: string | null
  limitReached: boolean
  started: boolean
  startRefused: boolean
  admitRefused: boolean
  /**
   * The member's own failure budget (`stopAfterFailures`) ended its submissions in this run, or
   * skipped admitted pipelines of it that had not started (since 0.7.0; recorded as the
   * member-scoped run metric `experiment:ID:stopped_by_failures`, whose value is the budget,
   * since 0.8.0).
   */
  failuresReached: boolean
}

/**
 * The trial window of a suite run (a study's trials are its members): at most `active`
 * members running at once, started in the suite's order. A member runs from its start until
 * it submits nothing more (its source exhausted or failed, a limit, `mayAdmit`) AND every spec
 * it submitted has settled (its pipeline ended, or admission skipped it): only then does the
 * next one start (since 0.10.0; before, the next started as soon as one submitted nothing
 * more, while its pipelines still ran). Under `Suite.start` / `Suite.run` the runner's hooks
 * count the settled specs; `pipelines` alone (no runner) knows only the submitting members.
 * Round-robin (and wide turns) apply within the members still submitting.
 *
 * - `mayStart(id)`: asked when the member's turn to start comes; `false` leaves it not
 *   started (`MemberFacts.startRefused`, nothing submitted);
 * - `mayAdmit(id)`: asked before each spec the member submits, and by the runner before an
 *   admitted pipeline of the member starts (`Runner.RunHooks.startGate`): `false` ends the
 *   member's submissions (`MemberFacts.admitRefused`) and its admitted pipelines that have not
 *   started are skipped with the reason `budget_exhausted` (left pending: neither failed nor
 *   run; a later resume with budget left runs them). Pipelines already running finish.
 * - `mayStartPipeline(id)` (optional, since 0.9.0): asked instead of `mayAdmit` by the runner's
 *   start gate; `true` means the pipeline starts now (a window may count it in flight until
 *   `WindowObserver.pipelineEnded`), `false` skips it as `mayAdmit` does;
 * - `admit(id)` (optional, since 0.11.0): asked instead of `mayAdmit` before each spec the
 *   member submits, once the member's source gave that spec (a source with nothing left ends
 *   the member as read to its end, unasked), with three answers ({@link Admission}): `admit`;
 *   `refuse` (as `mayAdmit` false; the spec is not submitted); `wait`: not now, the spec is kept
 *   for the member's next turn (it is not ended) and is asked again then, and when no member submitted anything the stream waits for one of
 *   the run's pipelines to settle first. A window says `wait` only while the member has a
 *   submitted spec not settled (else nothing would wake it). Without the runner's settle counts
 *   (`pipelines` alone) `wait` submits the spec;
 * - `observe`: optional hooks for the window's owner (a study's control): see
 *   {@link WindowObserver}.
 *
 * @since 0.6.0
 * @category models
 */
export interface MemberWindow {
  readonly active: number
  readonly mayStart: (experimentId: string) => Effect.Effect<boolean>
  readonly mayAdmit: (experimentId: string) => Effect.Effect<boolean>
  readonly mayStartPipeline?: ((experimentId: string) => Effect.Effect<boolean>) | undefined
  readonly admit?: ((experimentId: string) => Effect.Effect<Admission>) | undefined
  readonly observe?: WindowObserver | undefined
}

/**
 * A {@link MemberWindow}'s answer before a member submits its next spec: `admit` it now,
 * `wait` (not now: asked again later, the member goes on) or `refuse` (the member submits
 * nothing more: `MemberFacts.admitRefused`).
 *
 * @since 0.11.0
 * @category models
 */
export type Admission = "admit" | "wait" | "refuse"

/**
 * What the owner of a {@link MemberWindow} is told of, and plugs in (each optional):
 *
 * - `attach(stop)`: once the run started, its graceful stop (`RunHandle.stop`), for a stop
 *   that cancels running pipelines (told to the runner as such: `Runner.RunHooks.stopCancels`,
 *   which the cluster submitter reads to cancel them on the runners);
 * - `memberStarted(id)`: the member entered the window (before its first spec);
 * - `memberSubmitted(id)`: the member submits nothing more (source ended or failed, a limit,
 *   `mayAdmit` false, or `mayStart` false);
 * - `pools(id, view)`: the pools the member's tasks see, given its aliased view (e.g. a view
 *   metering its leases);
 * - `metric(id, name, value, pipelineId)`: a member's task stored a metric;
 * - `specSubmitted(id)`: the member submitted one more spec; `pipelineSettled(id)`: one of its
 *   submitted specs is done with in this run: its pipeline fiber ended (any exit, a skip by
 *   `mayAdmit` included) or admission skipped it (already succeeded, a duplicate, another run's);
 *   both synchronous. (A torn terminal state repaired at admission is not reported: rare.)
 * - `cancelled(id)`: an Effect that completes, with a reason, when the member's running
 *   pipelines must be interrupted (resumable), or `undefined` for none;
 * - `pipelineEnded(id, pipelineId)` (since 0.9.0): a pipeline of the member that the start gate
 *   started (`MemberWindow.mayStartPipeline` or `mayAdmit` said yes) ended, any exit;
 *   synchronous. `pipelineId` is the one its tasks give as `Pools.Holder.pipelineId`.
 * - `stoppedEarly()` (since 0.17.0): asked once when the run ends with no stop of the
 *   runner's: a reason (e.g. `study_stop:manual`) closes the run `interrupted` with it as its
 *   `stopReason` (the owner's drain left members not started or unfinished;
 *   `Runner.RunHooks.closingStop`), `undefined` closes it `completed`.
 * - `pipelineAttempts(id, pipelineId, attempts)` (since 0.17.0): a pipeline of the member
 *   settled on a runner that does not run its tasks (the cluster submitter), with the attempts
 *   this run stored for it, before its `pipelineEnded` (`Runner.RunHooks.settledAttempts`):
 *   what a study's budgets meter there in place of the leases.
 * - `accounting(read)` (since 0.17.0): told once, when the run starts, by a runner that does
 *   not run the tasks (the cluster submitter), a reader of the run's stored attempts summed
 *   over given pipelines (`Runner.RunHooks.accounting`): what a study without budgets reads
 *   a trial's calls, tokens and cost with, once the trial ended.
 *
 * @since 0.6.0
 * @category models
 */
export interface WindowObserver {
  readonly attach?: ((stop: (reason: string) => Effect.Effect<void>) => Effect.Effect<void>) | undefined
  readonly memberStarted?: ((experimentId: string) => Effect.Effect<void>) | undefined
  readonly memberSubmitted?: ((experimentId: string) => Effect.Effect<void>) | undefined
  readonly pools?: ((experimentId: string, view: PoolsService) => PoolsService) | undefined
  readonly metric?:
    | ((experimentId: string, name: string, value: unknown, pipelineId: PipelineId | null) => Effect.Effect<void>)
    | undefined
  readonly specSubmitted?: ((experimentId: string) => void) | undefined
  readonly pipelineSettled?: ((experimentId: string) => void) | undefined
  readonly cancelled?: ((experimentId: string) => Effect.Effect<string> | undefined) | undefined
  readonly pipelineEnded?: ((experimentId: string, pipelineId?: string | undefined) => void) | undefined
  readonly stoppedEarly?: (() => string | undefined) | undefined
  readonly pipelineAttempts?:
    | ((experimentId: string, pipelineId: string, attempts: ReadonlyArray<AttemptRecord>) => Effect.Effect<void>)
    | undefined
  readonly accounting?: ((read: Runner.RunAccountingReader) => void) | undefined
}

/**
 * The reason the runner gives a member's admitted pipeline it skips because the window's
 * `mayAdmit` said no (see {@link MemberWindow}).
 *
 * @since 0.6.0
 * @category constants
 */
export const BUDGET_EXHAUSTED = "budget_exhausted"

/**
 * The reason the runner gives a member's admitted pipeline it skips, unstarted, because the
 * member's own `stopAfterFailures` was reached (left pending: a resume runs it).
 *
 * @since 0.8.0
 * @category constants
 */
export const FAILURE_BUDGET = "stop_after_failures"

/**
 * The runner hooks of a {@link MemberWindow}: the start gate (`mayAdmit`, skip reason
 * {@link BUDGET_EXHAUSTED}) and the observer's pools, metric, launch, end and cancel hooks.
 */
const hooksOf = (window: MemberWindow, occupancy: Occupancy): Runner.RunHooks => {
  const o = window.observe
  const idOf = (spec: AnySpec): string | undefined => spec.member?.experimentId
  // the pipelines the gate started, until their fiber ends (`pipelineEnded`)
  const started = new WeakSet<AnySpec>()
  const settledOnly = (spec: AnySpec) => {
    const id = idOf(spec)
    if (id === undefined) return
    occupancy.settled(id)
    o?.pipelineSettled?.(id)
  }
  const ended = o?.pipelineEnded === undefined ? settledOnly : (spec: AnySpec) => {
    const id = idOf(spec)
    if (id !== undefined && started.delete(spec)) o.pipelineEnded!(id, spec.pipelineId)
    settledOnly?.(spec)
  }
  const gate = window.mayStartPipeline ?? window.mayAdmit
  return {
    startGate: (spec) => {
      const id = idOf(spec)
      return id === undefined ? Effect.succeed(undefined) : Effect.map(gate(id), (ok) => {
        if (!ok) return BUDGET_EXHAUSTED
        started.add(spec)
        return undefined
      })
    },
    memberPools: o?.pools === undefined ? undefined : (m, view) => o.pools!(m.experimentId, view),
    memberMetric: o?.metric === undefined ? undefined : (m, name, value, pid) => o.metric!(m.experimentId, name, value, pid),
    ended,
    skipped: settledOnly,
    // the suite's stream waits for a windowed member's pipelines to end: admit what it gave
    admitAsTheyCome: true,
    cancelWhen: o?.cancelled === undefined ? undefined : (spec) => {
      const id = idOf(spec)
      return id === undefined ? undefined : o.cancelled!(id)
    },
    admissionStopped: occupancy.stopAdmission,
    // the stop given to `attach` is the owner's cancel
    stopCancels: occupancy.cancelling,
    closingStop: o?.stoppedEarly,
    settledAttempts: o?.pipelineAttempts === undefined ? undefined : (spec, attempts) => {
      const id = idOf(spec)
      return id === undefined ? Effect.void : o.pipelineAttempts!(id, spec.pipelineId, attempts)
    },
    accounting: o?.accounting
  }
}

/**
 * Options of {@link pipelines}: the run the facts are recorded under, the members to run
 * (default: all, in the suite's order; unknown ids fail with `ConfigError`), the total
 * `limit` of specs submitted (integer ≥ 0), and the trial `window` ({@link MemberWindow}; none:
 * every selected member submits from the start).
 *
 * @since 0.5.0
 * @category models
 */
export interface PipelinesOptions {
  readonly runId: RunId
  readonly experiments?: ReadonlyArray<string> | undefined
  readonly limit?: number | undefined
  readonly window?: MemberWindow | undefined
  /**
   * Whether member `experimentId`'s own failure budget (`stopAfterFailures`) is spent, as the
   * caller counts its failures (the cluster submitter, from the settled pipelines; since
   * 0.12.0): once true, the member's source is read no further and its facts say
   * `failuresReached`. `Suite.start` counts them itself and ignores this.
   */
  readonly failuresReached?: ((experimentId: string) => boolean) | undefined
}

/**
 * The members a selection names, in the suite's order; `ConfigError` (`--experiment`) for an
 * unknown id (ids compare case-insensitively).
 *
 * @since 0.5.0
 * @category admission
 */
export const select = <S extends AnySpec, E, R>(
  suite: Suite<S, E, R>,
  experiments: ReadonlyArray<string> | undefined
): Effect.Effect<ReadonlyArray<Member<S, E, R>>, ConfigError> =>
  Effect.suspend(() => {
    if (experiments === undefined || experiments.length === 0) return Effect.succeed(suite.experiments)
    const wanted = new Set(experiments.map(idKey))
    const known = new Set(suite.experiments.map((m) => idKey(m.id)))
    const unknown = experiments.filter((e) => !known.has(idKey(e)))
    if (unknown.length > 0) {
      return Effect.fail(refuse(unknown.map((u) =>
        issue(
          "--experiment",
          `"${u}" is not a member of suite "${suite.id}" (members: ${suite.experiments.map((m) => m.id).join(", ")})`
        )
      )))
    }
    return Effect.succeed(suite.experiments.filter((m) => wanted.has(idKey(m.id))))
  })

const toStream = <S, E, R>(source: MemberSource<any, E, R>): Stream.Stream<S, unknown, R> => {
  if (Predicate.hasProperty(source, Stream.StreamTypeId)) return source as Stream.Stream<S, E, R>
  if (Predicate.hasProperty(source, Symbol.asyncIterator)) {
    return Stream.fromAsyncIterable(source as AsyncIterable<S>, (e) => e)
  }
  if (Predicate.hasProperty(source, Symbol.iterator)) return Stream.fromIterable(source as Iterable<S>)
  return Stream.die(new TypeError("the member's factory gave neither a Stream nor an (async) iterable"))
}

/**
 * Which members of a windowed run are still running: started, and not every spec they
 * submitted settled (its pipeline fiber ended, or admission skipped it). The runner's hooks
 * count the settled specs (`settled`); the suite's stream waits on `changed` when the window is
 * full of members that submitted everything but still have pipelines running.
 */
interface Occupancy {
  readonly settled: (experimentId: string) => void
  readonly settledOf: (experimentId: string) => number
  /** Completes at the next `settled` (a fresh one is taken each time). */
  readonly changed: () => Effect.Effect<void>
  /** The runner reads the source no further (`Runner.RunHooks.admissionStopped`): wakes `changed`. */
  readonly stopAdmission: () => void
  /** Whether {@link Occupancy.stopAdmission} was told: the window starts no member from then on. */
  readonly admissionStopped: () => boolean
  /** The owner stops the run to cancel its running pipelines (the stop given to `WindowObserver.attach`). */
  readonly cancel: () => void
  /** Whether {@link Occupancy.cancel} was told (`Runner.RunHooks.stopCancels`). */
  readonly cancelling: () => boolean
}

const makeOccupancy = (): Occupancy => {
  const counts = new Map<string, number>()
  let next = Deferred.unsafeMake<void>(FiberId.none)
  let stopped = false
  let cancelling = false
  const wake = () => {
    const d = next
    next = Deferred.unsafeMake<void>(FiberId.none)
    Deferred.unsafeDone(d, Exit.void)
  }
  return {
    settled: (id) => {
      counts.set(id, (counts.get(id) ?? 0) + 1)
      wake()
    },
    settledOf: (id) => counts.get(id) ?? 0,
    changed: () => Deferred.await(next),
    stopAdmission: () => {
      if (stopped) return
      stopped = true
      wake()
    },
    admissionStopped: () => stopped,
    cancel: () => {
      cancelling = true
    },
    cancelling: () => cancelling
  }
}

type Lane = {
  readonly member: Member<any, any, any>
  readonly facts: MemberFacts
  readonly outputDir: string
  // the source's next specs (pulled a chunk at a time) and where the next one is
  buffer: Chunk.Chunk<unknown>
  index: number
  pull: Effect.Effect<Chunk.Chunk<unknown>, Option.Option<unknown>> | undefined
  ended: boolean
}

/**
 * The failure of a member's source as recorded: its message; a defect (a throwing iterator
 * or factory) too.
 */
const sourceErrorOf = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const e = failure.value
    const message = messageOf(e)
    // a source error (SourceError) carries its file and line apart from its message: name them
    if (Predicate.hasProperty(e, "path") && typeof e.path === "string" && e.path !== "" && !message.includes(e.path)) {
      const line = Predicate.hasProperty(e, "line") && typeof e.line === "number" ? `:${e.line}` : ""
      return `${e.path}${line}: ${message}`
    }
    return message
  }
  const defect = Cause.dieOption(cause)
  return Option.isSome(defect) ? messageOf(defect.value) : Cause.pretty(cause)
}

/**
 * Streams the selected members' specs, re-keyed into the suite (pipeline id from the suite,
 * member and local key; `spec.member` set with the member's pool aliases and output
 * directory), one spec of each member in turn (round-robin; 64 specs per turn while more than 8
 * members are active: see the module docs), pulled only as fast as the
 * runner's admission takes them. Each member's facts for `runId` are recorded in the
 * {@link SuiteCatalog}: at the start (`selected`, and `selected: false` for the members not
 * selected), when the member ends (its source exhausted, failed, or a limit reached) and when
 * the stream ends (specs submitted so far). A member's source failure ends that member only;
 * a failure of the catalog fails the stream (`StoreUnavailable`), which stops a run.
 *
 * @param suite the suite
 * @param options the run id, selection and total limit
 * @returns the tagged specs
 * @since 0.5.0
 * @category admission
 */
export const pipelines = <S extends AnySpec, E, R>(
  suite: Suite<S, E, R>,
  options: PipelinesOptions
): Stream.Stream<S, ConfigError | StoreUnavailable, R | SuiteCatalog> => {
  const tracker = new Map<string, MemberFacts>()
  const reached = options.failuresReached
  const budgets: FailureBudgets = reached === undefined ? noBudgets : {
    reached,
    stop: (id) =>
      Effect.sync(() => {
        const facts = tracker.get(id)
        if (facts !== undefined) facts.failuresReached = true
      })
  }
  return pipelinesTracked(suite, options, tracker, budgets)
}

/**
 * How many members may be active before a turn grows past one spec: the suite store's member
 * cache holds 8 databases (`SuiteStore.DEFAULT_MAX_OPEN`; services do not import layers).
 */
const CACHED_MEMBERS = 8
/**
 * A member's turn once more than {@link CACHED_MEMBERS} members are active: its next 64 specs.
 * With one spec each, the admitted pipelines (4 × concurrency by default) spread over every
 * member, and a `byExperiment` root evicts and reopens a member database on nearly every write
 * (12 members: 0.11 of one experiment's throughput); with turns of 64 they stay within a few
 * members, each reopened once per round.
 */
const WIDE_TURN = 64

/**
 * The specs each active member submits per round: one, or {@link WIDE_TURN} past the cache.
 * Wide rounds alternate direction (1..n, n..1, ...): with an LRU cache of 8 and 12 members a
 * one-way cycle reopens all 12 databases per round, a sweep only the 4 the cache let go.
 */
const turnOf = (activeMembers: number): number => (activeMembers > CACHED_MEMBERS ? WIDE_TURN : 1)

/**
 * A run's count of each member's decided failures (for the members' own `stopAfterFailures`):
 * `reached(id)` is true once member `id`'s budget is spent; `stop(id)` marks the member
 * stopped by it (its facts, and the metric that records it; once).
 */
interface FailureBudgets {
  readonly reached: (experimentId: string) => boolean
  readonly stop: (experimentId: string) => Effect.Effect<void>
}

const noBudgets: FailureBudgets = { reached: () => false, stop: () => Effect.void }

const pipelinesTracked = <S extends AnySpec, E, R>(
  suite: Suite<S, E, R>,
  options: PipelinesOptions,
  tracker: Map<string, MemberFacts>,
  budgets: FailureBudgets = noBudgets,
  occupancy?: Occupancy | undefined
): Stream.Stream<S, ConfigError | StoreUnavailable, R | SuiteCatalog> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    const runId = options.runId
    const totalLimit = options.limit
    if (totalLimit !== undefined && !(Number.isInteger(totalLimit) && totalLimit >= 0)) {
      return yield* refuse([issue("limit", `must be an integer >= 0, not ${totalLimit}`)])
    }
    const window = options.window
    if (window !== undefined && !(Number.isInteger(window.active) && window.active >= 1)) {
      return yield* refuse([issue("window.active", `must be an integer >= 1, not ${window.active}`)])
    }
    const observe = window?.observe
    const selected = yield* select(suite, options.experiments)
    const chosen = new Set(selected.map((m) => m.id))
    const record = (facts: MemberFacts, fields: Partial<Omit<MemberFacts, "experimentId">>) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => catalog.recordMembership(runId, facts.experimentId, fields, now))

    const lanes: Array<Lane> = []
    for (const m of suite.experiments) {
      const facts: MemberFacts = {
        experimentId: m.id,
        selected: chosen.has(m.id),
        admitted: 0,
        sourceExhausted: false,
        sourceError: null,
        limitReached: false,
        // without a window every selected member starts with the run
        started: window === undefined && chosen.has(m.id),
        startRefused: false,
        admitRefused: false,
        failuresReached: false
      }
      tracker.set(m.id, facts)
      if (!facts.selected) {
        yield* record(facts, { selected: false })
        continue
      }
      yield* record(facts, { selected: true, admitted: 0, sourceExhausted: false, sourceError: null, limitReached: false })
      lanes.push({
        member: m,
        facts,
        outputDir: catalog.outputDirOf(m.id),
        buffer: Chunk.empty(),
        index: 0,
        pull: undefined,
        ended: false
      })
    }
    // what is not final yet when the stream ends (interrupted, or the total limit): the count
    yield* Effect.addFinalizer(() =>
      Effect.forEach(lanes, (l) => l.ended ? Effect.void : record(l.facts, { admitted: l.facts.admitted }), {
        discard: true
      }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record the members' facts: ${e.message}`)))
    )
    const scope = yield* Effect.scope

    const end = (
      lane: Lane,
      fields: Partial<Omit<MemberFacts, "experimentId" | "selected" | "started" | "startRefused" | "admitRefused">>
    ) => {
      lane.ended = true
      Object.assign(lane.facts, fields)
      const recorded = record(lane.facts, { ...fields, admitted: lane.facts.admitted })
      const submitted = observe?.memberSubmitted
      return submitted === undefined ? recorded : Effect.zipRight(recorded, submitted(lane.member.id))
    }
    const fail = (lane: Lane, cause: Cause.Cause<unknown>) =>
      Effect.zipRight(
        Effect.logWarning(`suite member "${lane.member.id}": its source failed; the other members go on`).pipe(
          Effect.annotateLogs({ experimentId: lane.member.id, error: sourceErrorOf(cause) })
        ),
        end(lane, { sourceError: sourceErrorOf(cause).slice(0, 4000) })
      )

    // the member's next spec, or undefined once it ended (its facts recorded)
    const take = (lane: Lane): Effect.Effect<AnySpec | undefined, StoreUnavailable, R> =>
      Effect.gen(function*() {
        while (!lane.ended) {
          if (lane.index < lane.buffer.length) {
            const value = Chunk.unsafeGet(lane.buffer, lane.index++)
            if (!Predicate.isTagged(value, "PipelineSpec")) {
              yield* fail(lane, Cause.die(new TypeError(`the source gave a value that is not a PipelineSpec`)))
              return undefined
            }
            if ((value as AnySpec).member !== undefined) {
              yield* fail(lane, Cause.die(new TypeError(`nested suites are not supported (a spec already belongs to a suite)`)))
              return undefined
            }
            return value as AnySpec
          }
          if (lane.pull === undefined) {
            const made = yield* Effect.exit(
              Effect.flatMap(
                Effect.try({ try: () => toStream<unknown, E, R>(lane.member.factory()), catch: (e) => e }),
                (stream) => Scope.extend(Stream.toPull(stream), scope)
              )
            )
            if (Exit.isFailure(made)) {
              yield* fail(lane, made.cause)
              return undefined
            }
            lane.pull = made.value as Effect.Effect<Chunk.Chunk<unknown>, Option.Option<unknown>>
          }
          const pulled = yield* Effect.exit(lane.pull)
          if (Exit.isSuccess(pulled)) {
            lane.buffer = pulled.value
            lane.index = 0
            continue
          }
          if (Cause.isInterruptedOnly(pulled.cause)) return yield* Effect.failCause(pulled.cause as Cause.Cause<never>)
          const failure = Cause.failureOption(pulled.cause)
          if (Option.isSome(failure) && Option.isNone(failure.value)) {
            yield* end(lane, { sourceExhausted: true })
            return undefined
          }
          yield* fail(
            lane,
            Option.isSome(failure) && Option.isSome(failure.value) ? Cause.fail(failure.value.value) : pulled.cause
          )
          return undefined
        }
        return undefined
      })

    let total = 0
    let backward = true
    let active: Array<Lane> = []
    // under a window: the members not started yet, in the suite's order
    const waiting: Array<Lane> = []
    for (const lane of lanes) {
      if (lane.member.limit === 0) yield* end(lane, { limitReached: true })
      else (window === undefined ? active : waiting).push(lane)
    }
    // the members started and not yet ended: still submitting, or (with the runner's settle
    // counts) a submitted spec not settled yet. Without the counts (`pipelines` alone) only the
    // submitting ones are known.
    const started: Array<Lane> = []
    const running = (): number => {
      if (occupancy === undefined) return active.length
      let n = 0
      for (const l of started) if (!l.ended || occupancy.settledOf(l.member.id) < l.facts.admitted) n++
      return n
    }
    // the window: members start in the suite's order while fewer than `window.active` run
    const fill = Effect.gen(function*() {
      while (window !== undefined && running() < window.active && waiting.length > 0) {
        const lane = waiting.shift()!
        // once the runner reads the source no further (a stop rule), no member starts, even in a
        // pull already under way: it is left not started, as `mayStart` false leaves it
        if (occupancy?.admissionStopped() === true || !(yield* window.mayStart(lane.member.id))) {
          lane.facts.startRefused = true
          yield* end(lane, {})
          continue
        }
        lane.facts.started = true
        if (observe?.memberStarted !== undefined) yield* observe.memberStarted(lane.member.id)
        active.push(lane)
        started.push(lane)
      }
    })
    // one round: a turn of each active member, in the suite's order (see `turnOf`)
    const round: Effect.Effect<Chunk.Chunk<S>, Option.Option<StoreUnavailable>, R> = Effect.gen(function*() {
      yield* fill
      for (;;) {
        // the window is full of members that submitted everything and still run: wait for one
        // of their pipelines to settle (nothing this stream gave is held back meanwhile: the
        // runner admits a windowed suite's chunks as they come), then try again
        while (occupancy !== undefined && active.length === 0 && waiting.length > 0) {
          const changed = occupancy.changed()
          if (running() < window!.active) {
            yield* fill
            continue
          }
          yield* changed
          yield* fill
        }
        if (active.length === 0) break
        while (active.length > 0) {
          const out: Array<S> = []
          const turn = turnOf(active.length)
          // taken before any member is asked: a settle while they are asked is not missed
          const settledSince = occupancy?.changed()
          let held = false
          // wide turns sweep back and forth: the members of the last turns (still cached) go first
          const order = turn > 1 && (backward = !backward) ? active.slice().reverse() : active
          for (const lane of order) {
            for (let k = 0; k < turn && !lane.ended; k++) {
              if (totalLimit !== undefined && total >= totalLimit) break
              if (window !== undefined && window.admit === undefined && !(yield* window.mayAdmit(lane.member.id))) {
                lane.facts.admitRefused = true
                yield* end(lane, {})
                break
              }
              if (budgets.reached(lane.member.id)) {
                yield* budgets.stop(lane.member.id)
                yield* end(lane, {})
                break
              }
              const spec = yield* take(lane)
              if (spec === undefined) break
              // `admit` is asked once the member has a next spec (a source read to its end says
              // so, whatever its budget): refused, the spec is dropped; not now, it is put back
              if (window?.admit !== undefined) {
                const answer = yield* window.admit(lane.member.id)
                if (answer === "refuse") {
                  lane.facts.admitRefused = true
                  yield* end(lane, {})
                  break
                }
                // (nothing wakes a wait without the runner's settle counts: then it is submitted)
                if (answer === "wait" && settledSince !== undefined) {
                  lane.index--
                  held = true
                  break
                }
              }
              out.push(tagSpec(spec, {
                suiteId: suite.id,
                experimentId: lane.member.id,
                poolAliases: lane.member.poolAliases,
                outputDir: lane.outputDir,
                ...(lane.member.variables === null ? {} : { variables: lane.member.variables })
              }) as S)
              lane.facts.admitted++
              observe?.specSubmitted?.(lane.member.id)
              total++
              if (lane.member.limit !== null && lane.facts.admitted >= lane.member.limit) {
                yield* end(lane, { limitReached: true })
              }
            }
          }
          if (totalLimit !== undefined && total >= totalLimit) {
            // the total limit stops every member still going: none of them is exhausted
            for (const lane of active) if (!lane.ended) yield* end(lane, { limitReached: true })
            // the members the window had not started yet stay not started
            waiting.length = 0
          }
          active = active.filter((l) => !l.ended)
          const before = started.length
          yield* fill
          if (out.length > 0) return Chunk.unsafeFromArray(out)
          // every member still going said "not now" (and none started): wait for a pipeline of
          // the run to settle
          if (held && settledSince !== undefined && started.length === before) yield* settledSince
        }
      }
      return yield* Effect.fail(Option.none())
    }).pipe(Effect.mapError((e) => Option.isOption(e) ? e : Option.some(e)))
    return Stream.repeatEffectChunkOption(round)
  }))

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/**
 * One member's outcome in a suite run: its facts (see {@link MemberFacts}), its label,
 * this run's figures for its pipelines (`stats`) and how many of its pipelines the run
 * skipped because they were already done (`skipped`, the runner's member-scoped count); both
 * `null` when the member was not selected, or its view could not be read. Of `admitted`,
 * what is neither in `stats.byState` nor skipped was handed to the runner but never started
 * (an interrupted run).
 *
 * @since 0.5.0
 * @category models
 */
export interface MemberOutcome extends Readonly<MemberFacts> {
  readonly label: string | null
  readonly stats: StoreStats | null
  readonly skipped: number | null
}

/**
 * What a suite run returns: the run's report, one outcome per member (in the suite's order),
 * whether a member's source failed, `summary()` (the run's summary and a line per member) and
 * `toJSON()`. No suite-level average of the members' figures is made up.
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteReport {
  readonly suiteId: string
  readonly run: Runner.RunReport
  readonly members: ReadonlyArray<MemberOutcome>
  /** Some selected member's source failed. */
  readonly sourceFailed: boolean
  summary(): string
  toJSON(): Record<string, unknown>
}

/**
 * Options of {@link start} / {@link run}: the runner's run options plus the members to run
 * (`experiments`, default all), the total `limit` of specs submitted, and the trial `window`
 * ({@link MemberWindow}; absent: every selected member submits from the start, as before).
 * With a window the run's `hooks` are the window's (`Runner.RunHooks`).
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteRunOptions extends Runner.RunOptions {
  readonly experiments?: ReadonlyArray<string> | undefined
  readonly limit?: number | undefined
  readonly window?: MemberWindow | undefined
}

/**
 * A suite run started by {@link start}: the run's handle, plus `awaitSuite`, its
 * {@link SuiteReport}.
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteRunHandle extends Runner.RunHandle<ConfigError | StoreUnavailable> {
  readonly awaitSuite: Effect.Effect<SuiteReport, Runner.RunError | StoreUnavailable | ConfigError>
}

/** A member's counts in a run: submitted = succeeded + failed + interrupted + skipped + pending. */
interface MemberCounts {
  readonly submitted: number
  readonly succeeded: number
  readonly failed: number
  readonly interrupted: number
  readonly skipped: number
  /** Handed to the runner but never started (after a stop), stored pending or not written. */
  readonly pending: number
}

const memberCounts = (m: MemberOutcome): MemberCounts | undefined => {
  const by = m.stats?.byState
  if (!m.selected || !m.started || by === undefined) return undefined
  const skipped = m.skipped ?? 0
  const pending = Math.max(0, m.admitted - (by.succeeded ?? 0) - (by.failed ?? 0) - (by.interrupted ?? 0) - skipped)
  return { submitted: m.admitted, succeeded: by.succeeded ?? 0, failed: by.failed ?? 0, interrupted: by.interrupted ?? 0, skipped, pending }
}

const countsText = (c: MemberCounts): string =>
  ` · succeeded ${c.succeeded} · failed ${c.failed} · interrupted ${c.interrupted} · skipped ${c.skipped}` +
  (c.pending > 0 ? ` · pending ${c.pending}` : "")

/** The suite's totals over its members' lines (they add up the same way), or "" without any. */
const totalsText = (members: ReadonlyArray<MemberOutcome>): string => {
  const all = members.map(memberCounts).filter((c): c is MemberCounts => c !== undefined)
  if (all.length === 0) return ""
  const sum = (k: keyof MemberCounts) => all.reduce((a, c) => a + c[k], 0)
  const total: MemberCounts = {
    submitted: sum("submitted"),
    succeeded: sum("succeeded"),
    failed: sum("failed"),
    interrupted: sum("interrupted"),
    skipped: sum("skipped"),
    pending: sum("pending")
  }
  return ` submitted ${total.submitted}${countsText(total)}`
}

const memberLine = (m: MemberOutcome): string => {
  const name = oneLine(m.label === null ? m.experimentId : `${m.experimentId} (${m.label})`)
  if (!m.selected) return `  ${name}: not selected`
  if (!m.started) return `  ${name}: not started${m.startRefused ? " (a stop fired before its turn)" : ""}`
  const c = memberCounts(m)
  const counts = c === undefined ? "" : countsText(c)
  const source = m.sourceError !== null
    ? `source failed: ${oneLine(m.sourceError)}`
    : m.failuresReached
    ? `stopped by its own stopAfterFailures (${m.sourceExhausted ? "source exhausted" : "source not exhausted"}; resume continues it)`
    : m.sourceExhausted
    ? "source exhausted"
    : m.limitReached
    ? "limit reached (source not exhausted)"
    : m.admitRefused
    ? "budget spent (source not exhausted)"
    : "source not exhausted"
  return `  ${name}: submitted ${m.admitted}${counts} · ${source}`
}

const makeSuiteReport = (suiteId: string, run: Runner.RunReport, members: ReadonlyArray<MemberOutcome>): SuiteReport => ({
  suiteId,
  run,
  members,
  sourceFailed: members.some((m) => m.sourceError !== null),
  summary: () => [run.summary(), `suite ${oneLine(suiteId)}:${totalsText(members)}`, ...members.map(memberLine)].join("\n"),
  toJSON: () => ({
    ...run.toJSON(),
    suiteId,
    members: members.map((m) => ({
      experimentId: m.experimentId,
      label: m.label,
      selected: m.selected,
      admitted: m.admitted,
      sourceExhausted: m.sourceExhausted,
      sourceError: m.sourceError,
      limitReached: m.limitReached,
      started: m.started,
      startRefused: m.startRefused,
      admitRefused: m.admitRefused,
      failuresReached: m.failuresReached,
      byState: m.stats?.byState ?? null,
      skipped: m.skipped
    }))
  })
})

const outcomes = (
  suite: Suite<any, any, any>,
  catalog: SuiteCatalogService,
  runId: RunId,
  tracker: Map<string, MemberFacts>
): Effect.Effect<ReadonlyArray<MemberOutcome>> =>
  Effect.forEach(suite.experiments, (m) => {
    const facts: MemberFacts = tracker.get(m.id) ?? {
      experimentId: m.id,
      selected: false,
      admitted: 0,
      sourceExhausted: false,
      sourceError: null,
      limitReached: false,
      started: false,
      startRefused: false,
      admitRefused: false,
      failuresReached: false
    }
    // the member's figures of this run, and the runner's count of its skips (the member-scoped
    // run metric `experiment:ID:skipped`; none recorded: nothing skipped)
    const figures = facts.selected
      ? Effect.flatMap(catalog.view(m.id), (v) =>
        Effect.all({
          stats: v.stats(runId),
          skipped: Effect.map(v.metrics({ runId, pipelineId: null }), (ms) => {
            const hit = ms.find((x) => x.name === metric.memberMetricName(m.id, SKIPPED_METRIC))?.value
            return typeof hit === "number" ? hit : 0
          })
        })).pipe(
          Effect.map((x): { stats: StoreStats | null; skipped: number | null } => x),
          Effect.catchAll((e) =>
            Effect.as(Effect.logWarning(`could not read member "${m.id}"'s figures: ${e.message}`), { stats: null, skipped: null })
          )
        )
      : Effect.succeed({ stats: null, skipped: null })
    return Effect.map(figures, (x): MemberOutcome => ({ ...facts, label: m.label, stats: x.stats, skipped: x.skipped }))
  })

/**
 * Starts a suite run in the current scope: checks that the catalog is this suite's, registers
 * the selected members' definitions (a changed definition under a known id fails with
 * `ConfigError` before anything runs), then starts the `Runner` on {@link pipelines}. Returns
 * the run's handle at once.
 *
 * Needs the `Runner` (built on the suite's `Store` and `Pools`, e.g. from the `SuiteStore`
 * layer) and the {@link SuiteCatalog}.
 *
 * @param suite the suite
 * @param options run options, selection, total limit
 * @since 0.5.0
 * @category running
 */
export const start = <S extends AnySpec, E, R>(
  suite: Suite<S, E, R>,
  options: SuiteRunOptions = {}
): Effect.Effect<
  SuiteRunHandle,
  ConfigError | StoreUnavailable,
  Runner.Runner | SuiteCatalog | Scope.Scope | R | Exclude<Runner.SpecContext<S>, Scope.Scope>
> =>
  Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    if (catalog.suiteId !== suite.id) {
      return yield* refuse([issue("suite.id", `the output root belongs to suite "${catalog.suiteId}", not "${suite.id}"`)])
    }
    const selected = yield* select(suite, options.experiments)
    const now = yield* Clock.currentTimeMillis
    yield* catalog.registerMembers(
      selected.map((m) => ({
        experimentId: m.id,
        definitionDigest: m.definitionDigest,
        definitionParts: m.definitionParts,
        previousDigests: m.previousDigests,
        label: m.label,
        limit: m.limit
      })),
      now
    )
    const runner = yield* Runner.Runner
    const tracker = new Map<string, MemberFacts>()
    const runIdOf = yield* Deferred.make<RunId>()
    const { experiments, limit, window, ...runOptions } = options
    if (window !== undefined && !(Number.isInteger(window.active) && window.active >= 1)) {
      return yield* refuse([issue("window.active", `must be an integer >= 1, not ${window.active}`)])
    }
    // Members with a failure budget of their own: their failures are counted when the runner
    // decides them (`RunHooks.failureDecided`: the failing attempt still holds its worker slot),
    // and once the budget is spent the member's source is read no further and its admitted
    // pipelines that have not started are skipped (`startGate`: left pending, resumable). So no
    // pipeline of the member starts after its N-th failure is decided; those already started go
    // on (counting the results of the commit instead let up to two admission windows through).
    const budgetOf = new Map(selected.flatMap((m) => m.stopAfterFailures == null ? [] : [[m.id, m.stopAfterFailures] as const]))
    const decided = new Map<string, number>()
    let reportMetric: Runner.RunHandle<unknown>["reportMetric"] | undefined
    const budgets: FailureBudgets = {
      reached: (id) => {
        const budget = budgetOf.get(id)
        return budget !== undefined && (decided.get(id) ?? 0) >= budget
      },
      stop: (id) =>
        Effect.suspend(() => {
          const facts = tracker.get(id)
          if (facts === undefined || facts.failuresReached || reportMetric === undefined) return Effect.void
          facts.failuresReached = true
          return reportMetric(metric.FAILURES_REACHED_METRIC, budgetOf.get(id) ?? 0, {
            experiment: id,
            label: "Stopped by its own stopAfterFailures",
            display: "number"
          }).pipe(Effect.catchAll((e) => Effect.logWarning(`could not record that member "${id}" reached its stopAfterFailures: ${e.message}`)))
        })
    }
    const occupancy = window === undefined ? undefined : makeOccupancy()
    const windowHooks = window === undefined ? undefined : hooksOf(window, occupancy!)
    const hooks: Runner.RunHooks | undefined = budgetOf.size === 0 ? windowHooks : {
      ...windowHooks,
      failureDecided: (spec) => {
        const id = spec.member?.experimentId
        if (id !== undefined && budgetOf.has(id)) decided.set(id, (decided.get(id) ?? 0) + 1)
      },
      // asked once the pipeline holds its worker slot (hence lazily)
      startGate: (spec) =>
        Effect.suspend(() => {
          const id = spec.member?.experimentId
          if (id !== undefined && budgets.reached(id)) return Effect.as(budgets.stop(id), FAILURE_BUDGET)
          return windowHooks?.startGate === undefined ? Effect.succeed(undefined) : windowHooks.startGate(spec)
        })
    }
    const source = Stream.unwrap(Effect.map(Deferred.await(runIdOf), (runId) =>
      pipelinesTracked(suite, {
        runId,
        ...(experiments === undefined ? {} : { experiments }),
        ...(limit === undefined ? {} : { limit }),
        ...(window === undefined ? {} : { window })
      }, tracker, budgets, occupancy)))
    const handle = yield* runner.start(source, hooks === undefined ? runOptions : { ...runOptions, hooks })
    reportMetric = handle.reportMetric
    // the stop the owner is given cancels the running pipelines: a runner whose stop does not by
    // itself (the cluster submitter) asks `stopCancels` at the stop
    if (window?.observe?.attach !== undefined) {
      yield* window.observe.attach((reason) => Effect.zipRight(Effect.sync(() => occupancy!.cancel()), handle.stop(reason)))
    }
    yield* Deferred.succeed(runIdOf, handle.runId)
    const awaitSuite = Effect.flatMap(handle.await, (report) =>
      Effect.map(outcomes(suite, catalog, report.runId, tracker), (members) =>
        makeSuiteReport(suite.id, report, members)))
    return { ...handle, awaitSuite } as SuiteRunHandle
  })

/**
 * Runs a suite to its end (see {@link start}) and returns its {@link SuiteReport}. A member's
 * source failure does not fail the effect (see `SuiteReport.sourceFailed`); the store's or a
 * worker's does, as `Runner.run`'s.
 *
 * @param suite the suite
 * @param options run options, selection, total limit
 * @since 0.5.0
 * @category running
 */
export const run = <S extends AnySpec, E, R>(
  suite: Suite<S, E, R>,
  options: SuiteRunOptions = {}
): Effect.Effect<
  SuiteReport,
  Runner.RunError | StoreUnavailable | ConfigError,
  Runner.Runner | SuiteCatalog | R | Exclude<Runner.SpecContext<S>, Scope.Scope>
> => Effect.scoped(Effect.flatMap(start(suite, options), (h) => h.awaitSuite))
