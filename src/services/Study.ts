/**
 * Studies at run time: a study is a suite generated from variants (every trial — one variant ×
 * one repeat — is one suite member: shared pools, namespaced ids, one combined output root).
 * This module freezes the study's protocol, registers its trials, runs the trials' suite under
 * the study's control (trial window, budgets, stop conditions), then **settles** every trial
 * and the study and returns a {@link StudyReport}.
 *
 * - {@link prepare}: freezes the protocol (version 1 on the first run; a changed protocol is
 *   refused with `ConfigError` naming the changed parts unless `newVersion`, which starts
 *   version N+1), registers the version's trials and chooses the ones to run: every trial not
 *   settled for good (see `FINAL_TRIAL_STATUSES`), or the ones named;
 * - {@link execute}: runs the chosen trials (`Suite.start` with the control's window), then
 *   settles them ({@link settleTrial}) and the study ({@link settleStudy}) and records both;
 * - {@link run}: both.
 *
 * Settlement (the rules of the PRD's §11, made exact here):
 *
 * | trial status | when |
 * | --- | --- |
 * | `failed` | a pipeline failed (and not every failure was an endpoint fault), or its source failed, or it ran to its end but broke a hard constraint |
 * | `succeeded` | its source was read to its end, every pipeline it submitted ended succeeded, no hard constraint broken |
 * | `budget_exhausted` | not complete, and one of its budget figures was spent (its next pipelines were not started); or complete but its final usage went past a per-trial budget figure (pipelines running when the budget was reached finished) |
 * | `not_started` | a stop fired (or the run ended) before the trial started (the window never started it, no pipeline of it stored, no call used) |
 * | `cancelled` | started and not complete, and a stop with `running: cancel` fired |
 * | `incomplete` | every failed pipeline failed by an endpoint fault (a model endpoint answered 401, 403, 404 or 407, or could not be called as configured: a failure that says nothing about the variant; `resume` runs those pipelines again), or anything else not complete (drained or interrupted mid-way, even before its first pipeline ran; a limit) |
 *
 * | study status | when (over the trials of the current protocol version) |
 * | --- | --- |
 * | `completed` | nothing stopped early (a stop that fired once every trial had run to its settlement does not count), ≥ 1 succeeded, every objective's metric known for the succeeded ones |
 * | `failed` | no stop fired early, every trial settled, none succeeded (and not every clean one excluded by a hard constraint) |
 * | `stopped_with_results` | a stop condition fired early (it left a trial not started, cancelled or incomplete) and ≥ 1 succeeded trial has every objective's metric |
 * | `cancelled` | a stop condition fired early and no trial succeeded |
 * | `inconclusive` | succeeded trials lack an objective's metric, or every trial that ran clean broke a hard constraint, or a trial is `incomplete` by endpoint faults (fix the endpoint, then `resume`) |
 * | `interrupted` | the process was stopped (a signal) before the study settled: `resume` continues it |
 * | `pending` | some trials of the version were not run (a run of named trials only) |
 *
 * A trial's metrics at settlement: its reported metrics (member-scoped run metrics, else the
 * mean of a pipeline-scope metric), the study's declared metrics (`StudyInput.metrics`) and the
 * built-in metrics an objective or a `metricThreshold` names (see `StudyMetrics`), so a hard
 * constraint may be on any of them. The comparison of the settled trials is `StudyCompare`.
 *
 * Only `succeeded` trials are ever eligible for a comparison or a best (`StudyReport.eligible`);
 * `failed`, `cancelled`, `budget_exhausted`, `incomplete` and `not_started` never are, and a
 * study where no trial succeeded reports neither success nor a best.
 *
 * Unknown side effects: assay tasks declare no side effects, and an attempt in flight when a
 * run died is recorded `Abandoned` and run again from its checkpoint on resume; no trial is
 * failed for it.
 *
 * @since 0.6.0
 */
import { callsServedText, formatCost, STUDY_COST } from "./internal/money.js"
import { Clock, Deferred, Effect, Option, type Scope, Stream } from "effect"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import type { PipelineId } from "../domain/Ids.js"
import type { Json } from "../domain/Json.js"
import type * as Pipeline from "../domain/Pipeline.js"
import { memberDigest, memberDigestOf } from "../domain/Suite.js"
import * as OutputPath from "../domain/internal/outputPath.js"
import { closest } from "../domain/internal/suggest.js"
import * as EndpointFault from "../domain/internal/endpointFault.js"
import * as Words from "../domain/internal/words.js"
import * as DomainStudy from "../domain/Study.js"
import type * as Runner from "./Runner.js"
import * as CallCache from "./CallCache.js"
import * as StudyMetrics from "./StudyMetrics.js"
import { SKIPPED_METRIC } from "./internal/runner/run.js"
import { FAILURES_REACHED_METRIC } from "./internal/suite/metric.js"
import * as Suite from "./Suite.js"
import * as StudyControl from "./StudyControl.js"
import { SuiteCatalog, type SuiteCatalogService } from "./SuiteCatalog.js"
import {
  decideFreeze,
  FINAL_TRIAL_STATUSES,
  type StopFired,
  StudyCatalog,
  type StudyCatalogService,
  type StudyRecordStatus,
  type TrialLedger,
  type TrialRecord,
  type TrialSettlement,
  type TrialStatus,
  type TrialUsage,
  ZERO_USAGE
} from "./StudyCatalog.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

// ---------------------------------------------------------------------------------------------
// What a study gives (the shape of `config/Study.ts`'s LoadedStudy that this module reads)
// ---------------------------------------------------------------------------------------------

/**
 * A variant as this module reads it: id (`v01` …), assignment (variable name -> JSON value;
 * for `prompt`/`model` the name of the text/profile), canonical key, digest, whether it is the
 * baseline.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyVariant {
  readonly id: string
  readonly assignment: Readonly<Record<string, Json>>
  readonly key: string
  readonly digest: string
  readonly isBaseline: boolean
}

/**
 * A comparison operator of a hard constraint or a metric threshold.
 *
 * @since 0.6.0
 * @category models
 */
export type MetricOp = ">" | ">=" | "<" | "<=" | "==" | "!="

/**
 * An objective as settlement reads it: its metric, and an optional hard constraint on it
 * (`{ op, value }`) that a succeeding trial must meet.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyObjective {
  readonly metric: string
  readonly direction: "maximize" | "minimize" | "target"
  readonly hardConstraint?: { readonly op: MetricOp; readonly value: number } | null | undefined
}

/**
 * One trial of a protocol version: its id (`p<version>-<variant>-r<repeat>`), variant and
 * repeat (1-based); `seedable` (default true): its pipelines' seeds derive from their ids.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyTrial {
  readonly trialId: string
  readonly variant: StudyVariant
  readonly repeat: number
  readonly seedable?: boolean | undefined
}

/**
 * A loaded suite as a study run reads it (the shape of `config/Suite.ts`'s `LoadedSuite`):
 * id, output root and layout, pools, and members whose experiment gives a fresh stream of
 * specs (`pipelines()`; a loaded experiment's stream needs a `FileSystem`, which the caller
 * provides).
 *
 * @since 0.6.0
 * @category models
 */
export type LoadedSuiteShape = Suite.LoadedSuiteLike

/**
 * The suite of a protocol version: the loaded suite of a study file (its members' experiments
 * run as loaded) or a suite built in code (`Suite.make`).
 *
 * @since 0.6.0
 * @category models
 */
export type StudySuite = LoadedSuiteShape | Suite.Suite<AnySpec, any, any>

/**
 * What a study run needs of a loaded study (`config/Study.ts`'s `LoadedStudy` has it all):
 * identity, protocol digest and parts (what a refused change names), its description (JSON,
 * stored with the version), objectives and stop conditions (settlement), and per version the
 * trials and the suite to run.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyInput {
  readonly id: string
  readonly question: string
  readonly type: string
  readonly objectives: ReadonlyArray<StudyObjective>
  readonly stop: ReadonlyArray<StudyControl.StopCondition>
  /** Per-trial and total budgets (default none). */
  readonly budget?: { readonly perTrial: StudyControl.BudgetFigures; readonly total: StudyControl.BudgetFigures } | undefined
  /** Trials running at once: started, and not every pipeline they submitted ended yet (default 3). */
  readonly trialConcurrency?: number | undefined
  /** The variables (a `model` variable's profile gives a trial's price). */
  readonly variables?: ReadonlyArray<{ readonly name: string; readonly type: string }> | undefined
  /**
   * The price of a variant's model calls from the pricing tables the accounting uses (the
   * experiment's `pricing`, a resource's own; a study file gives the dearest of its calls),
   * for a trial whose model profile has no `price`; `null` or absent: none.
   */
  readonly variantPrice?: ((variantId: string) => StudyControl.ModelPrice | null) | undefined
  /**
   * The declared metrics (`metrics:` of the study file; default none): computed for every
   * trial at settlement, with the built-in metrics the objectives name (see `StudyMetrics`).
   */
  readonly metrics?: ReadonlyArray<DomainStudy.MetricDecl> | undefined
  /**
   * The declared metrics' output paths not checked when loading (`DomainStudy.OutputCheck`;
   * default none): {@link execute} checks them against the run's first succeeded pipeline's
   * output and, when one leads nowhere, stops the run at once, marks the study `interrupted`
   * and fails with a `ConfigError` at the metric's field path (with a did-you-mean).
   */
  readonly outputChecks?: ReadonlyArray<DomainStudy.OutputCheck> | undefined
  /**
   * The experiments' tasks whose code could report a metric (default none; since 0.14.0): named
   * when {@link execute} stops a study whose first succeeded pipelines reported none of a
   * declared objective's `from: { metric }` metric.
   */
  readonly reportingTasks?: ReadonlyArray<string> | undefined
  /**
   * The pipeline metrics the experiment's judge tasks report (default none; since 0.15.0): an
   * objective on one of them is not watched by {@link execute} (a judge reports its score
   * itself), while an objective on another metric that is neither declared nor built in is
   * (a study without `metrics:`: tester16f F4).
   */
  readonly judgeMetrics?: ReadonlyArray<string> | undefined
  readonly protocolDigest: string
  readonly protocolParts: Readonly<Record<string, string>>
  /**
   * The digests and parts earlier builds gave the same protocol (default none): a version
   * frozen with one of them is this protocol, and its record is upgraded to the current digest.
   */
  readonly previousProtocols?: ReadonlyArray<DomainStudy.PreviousProtocol> | undefined
  /** The pipelines planned per trial (`null` or absent: unknown): a trial's progress counts against it. */
  readonly pipelinesPerTrial?: number | null | undefined
  /**
   * The names of the experiment's evaluator tasks (`judge`; default none): the cost of their
   * calls is stored with each settlement as the judge's share of the trial's `costUsd`, which
   * the study views show beside it (since 0.13.0, tester16b N7).
   */
  readonly evaluatorTasks?: ReadonlyArray<string> | undefined
  readonly describe: () => Json
  readonly trialsFor: (version: number) => ReadonlyArray<StudyTrial>
  readonly suiteFor: (version: number) => StudySuite
}

// ---------------------------------------------------------------------------------------------
// The control (trial window, budgets, stop conditions): `StudyControl.ts`
// ---------------------------------------------------------------------------------------------

/**
 * What the orchestration reads from the study's control while and after the suite runs:
 * `window` (handed to the suite run: which trials start and when), the stop that `fired`
 * (or `null`) and the trials whose budget was spent (trial id -> the figure spent).
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyControlHandle {
  readonly window?: Suite.MemberWindow | undefined
  readonly fired: Effect.Effect<StopFired | null>
  readonly exhausted: Effect.Effect<ReadonlyMap<string, string>>
  /**
   * Why each of those trials' budget stopped it, with the figures (since 0.11.0;
   * `StudyControl.StudyControlHandle.exhaustedNotes`): the settlement's reason says it.
   */
  readonly exhaustedNotes?: Effect.Effect<ReadonlyMap<string, string>> | undefined
  /** The run is over: the control's last evaluation and usage write (before settling). */
  readonly finish?: Effect.Effect<void, StoreUnavailable> | undefined
}

/**
 * Builds the control of one run of a study version in the run's scope.
 *
 * @since 0.6.0
 * @category models
 */
export type StudyControlFactory = (input: {
  readonly catalog: SuiteCatalogService
  readonly study: StudyInput
  readonly version: number
  readonly trials: ReadonlyArray<StudyTrial>
  readonly ledger: TrialLedger
  /**
   * The version's trials settled for good by an earlier run (not run again): each with whether
   * it succeeded (they count toward `successfulTrials`, `allTrialsTerminal` and the total
   * budget, and their stored metrics toward `metricThreshold`).
   */
  readonly settled?: ReadonlyArray<{ readonly trial: StudyTrial; readonly succeeded: boolean }> | undefined
}) => Effect.Effect<StudyControlHandle, ConfigError | StoreUnavailable, Scope.Scope>

/**
 * The control of a run without one: every trial runs, no budget, no stop condition.
 *
 * @since 0.6.0
 * @category control
 */
export const noControl: StudyControlFactory = () =>
  Effect.succeed({ fired: Effect.succeed(null), exhausted: Effect.succeed(new Map()) })

/**
 * The price of a trial: the `price` of its variant's profile of the first `model` variable,
 * else the study's {@link StudyInput.variantPrice} (`null` when neither gives one).
 */
const priceOf = (study: StudyInput, trial: StudyTrial): StudyControl.ModelPrice | null =>
  profilePriceOf(study, trial) ?? study.variantPrice?.(trial.variant.id) ?? null

/** The `price` of a trial's model profile (see {@link priceOf}). */
const profilePriceOf = (study: StudyInput, trial: StudyTrial): StudyControl.ModelPrice | null => {
  const model = (study.variables ?? []).find((v) => v.type === "model")
  if (model === undefined) return null
  const values = (trial.variant as { readonly values?: Readonly<Record<string, Json>> }).values
  const profile = values?.[model.name]
  if (typeof profile !== "object" || profile === null || Array.isArray(profile)) return null
  const price = (profile as Readonly<Record<string, Json>>).price
  if (typeof price !== "object" || price === null || Array.isArray(price)) return null
  const p = price as Readonly<Record<string, Json>>
  return typeof p.promptPer1k === "number" && typeof p.completionPer1k === "number"
    ? { promptPer1k: p.promptPer1k, completionPer1k: p.completionPer1k }
    : null
}

/**
 * The study's control (`StudyControl.control`): the trial window (`trialConcurrency`), the
 * per-trial and total budgets, the stop conditions, a trial's success by {@link settleTrial}
 * (read from the store when the trial ends), manual stops from the ledger (`assay study stop`)
 * and, with `signals`, from Ctrl-C (then run the suite with `handleSignals: false`).
 *
 * @param options `signals`: Ctrl-C is a manual stop; `pollMs`: ledger poll period (ms)
 * @since 0.6.0
 * @category control
 */
export const studyControl = (
  options: { readonly signals?: boolean | undefined; readonly pollMs?: number | undefined } = {}
): StudyControlFactory =>
({ catalog: suiteCatalog, ledger, settled = [], study, trials }) =>
  Effect.gen(function*() {
    // the trial's own view: its rows only (settlement's reader), read once per ended trial
    // (its metrics with the declared and built-in ones computed, as settlement sees them)
    type Figures = Effect.Effect.Success<ReturnType<typeof trialFigures>>
    type Metrics = ReadonlyMap<string, Readonly<Record<string, number>>>
    const figuresCache = new Map<
      string,
      { readonly figures: Figures; readonly metrics: Metrics; readonly usage: ReadonlyMap<string, TrialUsage> }
    >()
    const cachedFigures = (trialId: string) =>
      Effect.suspend(() => {
        const hit = figuresCache.get(trialId)
        if (hit !== undefined) return Effect.succeed(hit)
        return Effect.gen(function*() {
          const figures = yield* trialFigures(study.id, [trialId], trialId)
          const usage = yield* ledger.usage([trialId])
          const { metrics } = yield* withComputedMetrics(study, [trialId], figures.metrics, usage, trialId)
          const entry = { figures, metrics, usage }
          figuresCache.set(trialId, entry)
          return entry
        }).pipe(Effect.provideService(SuiteCatalog, suiteCatalog))
      })
    const metric = (trialId: string, name: string) =>
      cachedFigures(trialId).pipe(
        Effect.map((f) => f.metrics.get(trialId)?.[name] ?? null),
        Effect.catchTag("ConfigError", () => Effect.succeed(null))
      )
    const succeeded = (trialId: string) =>
      Effect.gen(function*() {
        const rows = (yield* suiteCatalog.membership()).filter((m) => m.experimentId === trialId && m.selected)
        const latest = rows[rows.length - 1]
        const { figures, metrics, usage } = yield* cachedFigures(trialId)
        return trialSucceeded({
          admitted: latest?.admitted ?? 0,
          sourceExhausted: latest?.sourceExhausted ?? false,
          sourceError: latest?.sourceError ?? null,
          byState: figures.byState.get(trialId) ?? {},
          metrics: metrics.get(trialId) ?? {},
          budgetSpent: null,
          overBudget: overshootOf(usage.get(trialId) ?? ZERO_USAGE, study.budget?.perTrial ?? {}),
          stop: null
        }, study.objectives)
      }).pipe(Effect.catchTag("ConfigError", () => Effect.succeed(false)))
    // a tokens or dollars budget projects by the mean cost of a trial's ended pipelines: on a
    // resume, those stored ended count (their spend is in the recorded usage)
    const perTrial = study.budget?.perTrial ?? {}
    const endedBefore = perTrial.tokens === undefined && perTrial.costUsd === undefined
      ? new Map<string, ByState>()
      : yield* trialStates(study.id, trials.map((t) => t.trialId)).pipe(Effect.provideService(SuiteCatalog, suiteCatalog))
    return yield* StudyControl.control(
      {
        trials: [...trials, ...settled.map((s) => s.trial)].map((t) => {
          const st = endedBefore.get(t.trialId)
          return {
            trialId: t.trialId,
            price: priceOf(study, t),
            ...(st === undefined ? {} : { endedBefore: st.succeeded + st.failed })
          }
        }),
        budget: study.budget ?? { perTrial: {}, total: {} },
        stop: study.stop
      },
      ledger,
      {
        trialConcurrency: study.trialConcurrency,
        trialSucceeded: succeeded,
        trialMetric: metric,
        settled: new Map(settled.map((s) => [s.trial.trialId, s.succeeded])),
        ...(options.signals === undefined ? {} : { signals: options.signals }),
        ...(options.pollMs === undefined ? {} : { pollMs: options.pollMs })
      }
    )
  })

// ---------------------------------------------------------------------------------------------
// Settlement (pure)
// ---------------------------------------------------------------------------------------------

/**
 * What a trial's settlement is judged on:
 *
 * - `admitted`: pipelines it submitted in the run that settles it; `sourceExhausted`: its
 *   source was read to its end then; `sourceError`: the source's failure (`null` when none);
 * - `byState`: its stored pipelines by state (every run: a pipeline done earlier counts);
 * - `metrics`: its metrics (see {@link StudyReport}); `budgetSpent`: the budget figure spent
 *   (`calls`, `tokens`, `costUsd`, `timeMs`) or `null`;
 * - `stop`: the stop that fired in the run (or `null`);
 * - `planned` (optional): the pipelines its plan has (`null` or absent: unknown); its progress
 *   reads `N of P planned pipeline(s) ended, A admitted`, else `N of A admitted pipeline(s)
 *   ended`, where A counts the pipelines it submitted or stored;
 * - `started` (optional): the trial began in this or an earlier run (the window started it, or
 *   it used a call) even when none of its pipelines is stored or admitted: stopped then, it is
 *   `incomplete` or `cancelled` (resumable), never `not_started`;
 * - `overBudget` (optional, since 0.9.0): the per-trial budget figures its final usage went
 *   past, in words (see `TrialReport.overshoot`): a trial over its budget is never
 *   `succeeded` (it settles `budget_exhausted`, so it never counts as a best).
 *
 * @since 0.6.0
 * @category settlement
 */
export interface TrialFacts {
  readonly admitted: number
  readonly sourceExhausted: boolean
  readonly sourceError: string | null
  readonly byState: Readonly<Partial<Record<"pending" | "running" | "succeeded" | "failed" | "interrupted", number>>>
  readonly metrics: Readonly<Record<string, number>>
  readonly budgetSpent: string | null
  readonly stop: StopFired | null
  readonly started?: boolean | undefined
  readonly planned?: number | null | undefined
  readonly overBudget?: ReadonlyArray<string> | undefined
  /**
   * Why its budget stopped it, with the figures (since 0.11.0; the control's
   * `exhaustedNotes`: `is spent: $0.0010 used of $0.0010`, `has no room for another pipeline:
   * ...`): the reason reads `its cost budget NOTE: PROGRESS`; a note of the study's total
   * (`the study's total cost budget ...`, since 0.12.0) reads `NOTE; PROGRESS`.
   */
  readonly budgetNote?: string | undefined
  /**
   * The endpoint faults among its failed pipelines (since 0.11.0), one per failed pipeline
   * whose stored failure is one (an HTTP 401, 403, 404 or 407 of a model endpoint, or an
   * endpoint that cannot be called as configured: see `domain/internal/endpointFault.ts`):
   * `resourceId` and `what` (`401`, `a configuration fault (...)`). When every failed pipeline
   * has one, the trial is `incomplete`, not `failed` (see {@link settleTrial}).
   */
  readonly endpointFaults?: ReadonlyArray<{ readonly resourceId: string; readonly what: string }> | undefined
}

const OPS: Readonly<Record<MetricOp, (a: number, b: number) => boolean>> = {
  ">": (a, b) => a > b,
  ">=": (a, b) => a >= b,
  "<": (a, b) => a < b,
  "<=": (a, b) => a <= b,
  "==": (a, b) => a === b,
  "!=": (a, b) => a !== b
}

/**
 * Whether `value op bound` holds.
 *
 * @since 0.6.0
 * @category settlement
 */
export const compare = (value: number, op: MetricOp, bound: number): boolean => OPS[op](value, bound)

/**
 * The hard constraints `metrics` break, one phrase each (`accuracy >= 0.8 broken: 0.75`, the
 * value with 4 significant digits as the report prints it: `0.8333`); a
 * constraint whose metric is missing is not broken (it is missing: see {@link missingMetrics}).
 *
 * @param metrics the trial's metrics
 * @param objectives the study's objectives
 * @since 0.6.0
 * @category settlement
 */
export const brokenConstraints = (
  metrics: Readonly<Record<string, number>>,
  objectives: ReadonlyArray<StudyObjective>
): ReadonlyArray<string> =>
  objectives.flatMap((o) => {
    const c = o.hardConstraint
    const v = metrics[o.metric]
    if (c === null || c === undefined || v === undefined) return []
    return compare(v, c.op, c.value) ? [] : [`hard constraint ${o.metric} ${c.op} ${c.value} broken: ${Words.figure(v)}`]
  })

/**
 * The objectives' metrics `metrics` lacks (each name once, in objective order).
 *
 * @since 0.6.0
 * @category settlement
 */
export const missingMetrics = (
  metrics: Readonly<Record<string, number>> | null,
  objectives: ReadonlyArray<StudyObjective>
): ReadonlyArray<string> =>
  Array.from(new Set(objectives.map((o) => o.metric))).filter((m) => metrics === null || metrics[m] === undefined)

const count = (n: number | undefined) => n ?? 0

/**
 * Whether a trial ran to its end: its source read to the end without failure, and every
 * pipeline stored ended succeeded, at least as many as it submitted.
 *
 * @since 0.6.0
 * @category settlement
 */
export const trialComplete = (f: Pick<TrialFacts, "admitted" | "sourceExhausted" | "sourceError" | "byState">): boolean => {
  const s = f.byState
  const succeeded = count(s.succeeded)
  const other = count(s.failed) + count(s.interrupted) + count(s.pending) + count(s.running)
  return f.sourceExhausted && f.sourceError === null && other === 0 && succeeded >= f.admitted
}

/**
 * A trial's progress in words, each count naming what it counts: `N of P planned pipeline(s)
 * ended, A submitted` when the plan's count `P` is known, else `N of A submitted pipeline(s)
 * ended` (`A`: the pipelines it submitted or stored, ended ones included; "submitted", not
 * "admitted", which `study status` and the run monitor keep for the pipelines admitted and not
 * ended: tester16b N8).
 *
 * @param ended its pipelines ended succeeded
 * @param admitted its pipelines submitted or stored
 * @param planned the pipelines its plan has, `null` when unknown
 * @returns the phrase
 * @since 0.7.0
 * @category settlement
 */
export const progressOf = (ended: number, admitted: number, planned: number | null): string =>
  planned === null
    ? `${ended} of ${Words.count(admitted, "submitted pipeline")} ended`
    : `${ended} of ${Words.count(planned, "planned pipeline")} ended, ${admitted} submitted`

/**
 * How the reason of a trial left `incomplete` by endpoint faults begins (see
 * {@link settleTrial}): `every failure was an endpoint fault: 401 on resource a for 6 pipelines;
 * ...`.
 *
 * @since 0.11.0
 * @category settlement
 */
export const ENDPOINT_FAULT_REASON = "every failure was an endpoint fault"

/**
 * A trial's settlement: its status and the reason (see the module's table).
 *
 * @param f what it is judged on
 * @param objectives the study's objectives (hard constraints)
 * @returns status and reason
 * @since 0.6.0
 * @category settlement
 */
export const settleTrial = (
  f: TrialFacts,
  objectives: ReadonlyArray<StudyObjective>
): { readonly status: TrialStatus; readonly reason: string; readonly endpointFault?: boolean } => {
  const failed = count(f.byState.failed)
  const stored = Object.values(f.byState).reduce((a: number, b) => a + count(b), 0)
  if (f.sourceError !== null) return { status: "failed", reason: `its source failed: ${f.sourceError}` }
  if (failed > 0) {
    const faults = f.endpointFaults ?? []
    if (faults.length >= failed) {
      // every failure is the endpoint's (a key refused, a model it does not know, an endpoint
      // that cannot be called as configured): nothing about the variant; resume runs them again
      const of = f.planned ?? Math.max(f.admitted, stored)
      return {
        status: "incomplete",
        reason: `${ENDPOINT_FAULT_REASON}: ${EndpointFault.faultsText(faults)}; ${count(f.byState.succeeded)} of ${
          Words.count(of, "pipeline")
        } succeeded; fix the endpoint, then resume runs its failed pipelines again`,
        endpointFault: true
      }
    }
    const also = faults.length === 0 ? "" : `, ${faults.length} of them by an endpoint fault: ${EndpointFault.faultsText(faults)}`
    return { status: "failed", reason: `${Words.count(failed, "pipeline")} failed${also}` }
  }
  if (trialComplete(f)) {
    const broken = brokenConstraints(f.metrics, objectives)
    if (broken.length > 0) return { status: "failed", reason: broken.join("; ") }
    // no trial gets more budget because it ran: over its budget, it is not a result
    if (f.overBudget !== undefined && f.overBudget.length > 0) {
      return {
        status: "budget_exhausted",
        reason: `every pipeline ended, but over its budget: ${f.overBudget.join("; ")}; it never counts as a best`
      }
    }
    return { status: "succeeded", reason: `${Words.count(count(f.byState.succeeded), "pipeline")} succeeded` }
  }
  const ended = count(f.byState.succeeded)
  const nothing = stored === 0 && f.admitted === 0
  const progress = nothing
    ? "no pipeline of it ran yet"
    : `${progressOf(ended, Math.max(f.admitted, stored), f.planned ?? null)}${f.sourceExhausted ? "" : "; source not read to its end"}`
  if (f.budgetSpent !== null) {
    const figure = f.budgetSpent as StudyControl.BudgetFigure
    const word = StudyControl.figureWord(figure)
    // the study's total stopped it: its note says so in full
    const reason = f.budgetNote === undefined || f.budgetNote === ""
      ? `its ${word} budget is spent: ${progress}`
      : f.budgetNote.startsWith("the study's total ")
      ? `${f.budgetNote}; ${progress}`
      : `its ${word} budget ${f.budgetNote}; ${progress}`
    return { status: "budget_exhausted", reason }
  }
  if (nothing && f.started !== true) {
    return {
      status: "not_started",
      reason: f.stop === null ? "never started" : `never started: ${f.stop.reason}`
    }
  }
  // a manual stop (Ctrl-C, `assay study stop`) holds only for its run: resume continues the trial
  const more = f.stop !== null && f.stop.condition.when === "manual" ? "; resume continues it" : ""
  if (f.stop !== null && f.stop.running === "cancel") return { status: "cancelled", reason: `cancelled: ${f.stop.reason}; ${progress}${more}` }
  if (f.stop === null) return { status: "incomplete", reason: progress }
  // started by the window, stopped before any pipeline of it was submitted
  if (nothing) return { status: "incomplete", reason: `started, then stopped before any pipeline of it was submitted: ${f.stop.reason}${more}` }
  return { status: "incomplete", reason: `stopped after it started: ${f.stop.reason}; ${progress}${more}` }
}

/**
 * Whether a trial succeeded (for the `successfulTrials` stop condition and comparisons): the
 * {@link settleTrial} rule.
 *
 * @since 0.6.0
 * @category settlement
 */
export const trialSucceeded = (f: TrialFacts, objectives: ReadonlyArray<StudyObjective>): boolean =>
  settleTrial(f, objectives).status === "succeeded"

/**
 * Whether a trial status may be compared or chosen as a best: `succeeded` only.
 *
 * @since 0.6.0
 * @category settlement
 */
export const isEligible = (status: TrialStatus): boolean => status === "succeeded"

/**
 * What a study's settlement is judged on: every trial of the version (status, metrics, the
 * broken constraints among its reasons), whether a stop condition fired early (other than the
 * natural end), whether the run was interrupted before settling.
 *
 * @since 0.6.0
 * @category settlement
 */
export interface StudyFacts {
  readonly trials: ReadonlyArray<{
    readonly status: TrialStatus
    readonly metrics: Readonly<Record<string, number>> | null
    readonly brokeConstraint: boolean
    /** It is `incomplete` because every failure of it was an endpoint fault (since 0.11.0). */
    readonly endpointFault?: boolean | undefined
    /** How the reason names it (`v04 r1`: variant and repeat; since 0.14.0). */
    readonly label?: string | undefined
  }>
  readonly stoppedEarly: boolean
  readonly interrupted: boolean
}

/**
 * A study's settlement: its status and the reason (see the module's table).
 *
 * @param f what it is judged on
 * @param objectives the study's objectives
 * @since 0.6.0
 * @category settlement
 */
export const settleStudy = (
  f: StudyFacts,
  objectives: ReadonlyArray<StudyObjective>
): { readonly status: StudyRecordStatus; readonly reason: string } => {
  const total = f.trials.length
  const succeeded = f.trials.filter((t) => t.status === "succeeded")
  const comparable = succeeded.filter((t) => missingMetrics(t.metrics, objectives).length === 0)
  const unsettled = f.trials.filter((t) => t.status === "pending" || t.status === "running").length
  const tally = `${succeeded.length} of ${Words.count(total, "trial")} succeeded`
  if (f.interrupted) return { status: "interrupted", reason: `interrupted before settling (${tally}); resume continues it` }
  if (unsettled > 0 && !f.stoppedEarly) return { status: "pending", reason: `${unsettled} of ${Words.count(total, "trial")} not run yet (${tally})` }
  if (f.stoppedEarly) {
    if (comparable.length > 0) return { status: "stopped_with_results", reason: `stopped early; ${tally}` }
    if (succeeded.length > 0) {
      return {
        status: "inconclusive",
        reason: `stopped early; ${tally} but none has every objective's metric (${missingMetrics(null, objectives).join(", ")})`
      }
    }
    return { status: "cancelled", reason: `stopped early; no trial succeeded` }
  }
  const faulted = f.trials.filter((t) => t.endpointFault === true).length
  if (faulted > 0) {
    // not a result: the endpoint failed them, whatever the variants; resume runs them again
    return {
      status: "inconclusive",
      reason: `${faulted} of ${Words.count(total, "trial")} not settled: every failure of ${faulted === 1 ? "it" : "theirs"} was an endpoint fault ` +
        `(fix the endpoint, then resume runs ${faulted === 1 ? "it" : "them"} again); ${tally}`
    }
  }
  if (succeeded.length === 0) {
    const byConstraint = f.trials.filter((t) => t.status === "failed" && t.brokeConstraint).length
    const otherFailures = f.trials.filter((t) => t.status === "failed" && !t.brokeConstraint).length
    if (byConstraint > 0 && otherFailures === 0) {
      return { status: "inconclusive", reason: `no trial succeeded: every trial that ran to its end broke a hard constraint` }
    }
    return { status: "failed", reason: `no trial succeeded (${total} settled)` }
  }
  if (comparable.length < succeeded.length) {
    const missing = Array.from(new Set(succeeded.flatMap((t) => missingMetrics(t.metrics, objectives))))
    // how many of the succeeded trials lack one, counted (tester16e F3): "all 18 trials", "3 of 18 trials (v04 r1, …)"
    const lacking = succeeded.filter((t) => missingMetrics(t.metrics, objectives).length > 0)
    const trials = succeeded.length === total ? Words.count(succeeded.length, "trial") : `${succeeded.length} succeeded ${succeeded.length === 1 ? "trial" : "trials"}`
    const labels = lacking.flatMap((t) => t.label === undefined ? [] : [t.label])
    const named = labels.length === 0 ? "" : ` (${labels.slice(0, 3).join(", ")}${labels.length > 3 ? ", …" : ""})`
    const which = lacking.length === succeeded.length ? (succeeded.length === 1 ? `its one ${trials.replace(/^1 /, "")}` : `all ${trials}`) : `${lacking.length} of ${trials}${named}`
    return { status: "inconclusive", reason: `${tally}, but ${Words.labelled("objective metric", missing)} ${missing.length === 1 ? "is" : "are"} missing for ${which}` }
  }
  return { status: "completed", reason: tally }
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

/**
 * One trial in a {@link StudyReport}: identity, variant (id and assignment), repeat, settled
 * status and reason, usage so far, metrics (member-scoped run metrics `experiment:ID:NAME` of
 * its latest run, else the mean of the pipeline-scope metric over its pipelines; booleans as
 * 0/1; plus the declared metrics and the built-in ones the objectives name), its stored
 * pipelines by state, and whether it ran in this process (`ran`).
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialReport {
  readonly trialId: string
  readonly variantId: string
  readonly assignment: Json
  readonly repeat: number
  readonly status: TrialStatus
  readonly reason: string | null
  readonly usage: TrialUsage
  readonly metrics: Readonly<Record<string, number>>
  readonly byState: Readonly<Record<string, number>>
  readonly ran: boolean
  /**
   * Its metrics are partial: it did not succeed and did not run to its end (they cover the
   * pipelines it finished only, and never enter a comparison). A trial that ran every pipeline
   * but failed (a hard constraint broken, over its budget) is not partial.
   */
  readonly partialMetrics?: boolean | undefined
  /**
   * With `partialMetrics`: the pipelines its pipeline-level metrics cover (since 0.11.0), its
   * `succeeded` pipelines (a metric a task reported in a pipeline that did not succeed is left
   * out), of the `planned` ones (`null`: unknown). The text says `partial (2 of 40 pipelines)`.
   */
  readonly metricsOver?: { readonly succeeded: number; readonly planned: number | null } | undefined
  /**
   * The per-trial budget figures its usage went past, in words (`cost $0.0013 of $0.0010,
   * 30% over`): a budget is a start gate, so pipelines running when it was reached finish.
   */
  readonly overshoot?: ReadonlyArray<string> | undefined
  /**
   * What the call cache did for its pipelines, from their attempt rows (since 0.11.0): `hits`
   * (answers served from the cache: no call, no lease, so not in `usage.calls`) and `misses`
   * (calls its cached tasks made). Absent when the cache did nothing for it. The text says
   * `0 calls (8 served from cache, $0.00036 not spent) · cache misses 0` (`costSavedUsd`: what
   * the served calls cost when they were made, `null` when unknown; since 0.12.0).
   */
  readonly cache?: { readonly hits: number; readonly misses: number; readonly costSavedUsd?: number | null | undefined } | undefined
}

/**
 * What a study run returns: the study, the protocol version run, the study's settled status
 * and the reason, the stop that fired (or `null`), one entry per trial of the version (in
 * trial order), the trials eligible for a comparison (`succeeded` only), the trials never
 * started (left out of every comparison), the report of the trials' suite run (`null` when
 * every trial was already settled for good and nothing ran), `summary()` and `toJSON()`.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyReport {
  readonly studyId: string
  readonly version: number
  readonly status: StudyRecordStatus
  readonly reason: string
  readonly stop: StopFired | null
  readonly trials: ReadonlyArray<TrialReport>
  readonly eligible: ReadonlyArray<string>
  readonly notStarted: ReadonlyArray<string>
  /**
   * What the result cannot say: one line per variant of the version without any succeeded
   * trial (it has no eligible result, whatever the study's status).
   */
  readonly limitations: ReadonlyArray<string>
  /** The stop ended the study early (it left a trial unfinished): the summary prints it. */
  readonly stoppedEarly: boolean
  readonly run: Runner.RunReport | null
  summary(): string
  toJSON(): Record<string, unknown>
}

const formatUsage = (u: TrialUsage, cache?: TrialReport["cache"]): string =>
  // what was spent this time, and what the cache served instead (money.ts callsServedText: the
  // one wording; the Compare counts the hits at their recorded usage, tester18d F3)
  `${callsServedText(u.calls, cache?.hits ?? 0, cache?.costSavedUsd ?? null)}${cache === undefined ? "" : ` · cache misses ${cache.misses}`} · tokens ${u.tokens} · ${formatCost(u.costUsd, u.unpriced ?? 0, STUDY_COST)} · ${(u.timeMs / 1000).toFixed(1)} s`

const formatMetrics = (m: Readonly<Record<string, number>>): string => Object.entries(m).map(([k, v]) => `${k} ${Words.figure(v)}`).join(" · ")

/**
 * The label of partial metrics: `partial (2 of 40 pipelines)` (their succeeded pipelines, of
 * the planned ones; `partial (2 pipelines)` when the plan does not say), `partial` without the count.
 *
 * @param over the pipelines they cover (`TrialReport.metricsOver`)
 * @returns the label
 * @since 0.11.0
 * @category formatting
 */
export const partialLabel = (over: { readonly succeeded: number; readonly planned?: number | null | undefined } | undefined): string =>
  over === undefined
    ? "partial"
    : over.planned === null || over.planned === undefined
    ? `partial (${Words.count(over.succeeded, "pipeline")})`
    : `partial (${over.succeeded} of ${Words.count(over.planned, "pipeline")})`

const makeReport = (input: Omit<StudyReport, "summary" | "toJSON">): StudyReport => ({
  ...input,
  summary: () => {
    const byStatus = new Map<string, number>()
    for (const t of input.trials) byStatus.set(t.status, (byStatus.get(t.status) ?? 0) + 1)
    const lines = [
      `study ${input.studyId} (protocol version ${input.version}): ${Words.statusWords(input.status)} — ${input.reason}`,
      `trials: ${[...byStatus].map(([s, n]) => `${Words.statusWords(s)} ${n}`).join(" · ")}`
    ]
    if (input.stop !== null && input.stoppedEarly) lines.push(`stop: ${input.stop.reason}`)
    for (const t of input.trials) {
      const metrics = formatMetrics(t.metrics)
      const shown = metrics === "" ? "" : t.partialMetrics === true ? ` · ${partialLabel(t.metricsOver)}: ${metrics}` : ` · ${metrics}`
      const over = t.overshoot === undefined || t.overshoot.length === 0
        ? ""
        : ` · over budget: ${t.overshoot.join(", ")} (a budget is a start gate: running pipelines finish)`
      lines.push(
        `  ${t.trialId} ${Words.statusWords(t.status)}${t.reason === null ? "" : ` (${t.reason})`} · ${formatUsage(t.usage, t.cache)}${shown}${over}`
      )
    }
    if (input.notStarted.length > 0) lines.push(`not started (left out of comparisons): ${input.notStarted.join(", ")}`)
    for (const l of input.limitations) lines.push(`limitation: ${l}`)
    if (input.eligible.length === 0) lines.push("no trial succeeded: nothing to compare, no best")
    return lines.join("\n")
  },
  toJSON: () => ({
    studyId: input.studyId,
    version: input.version,
    status: input.status,
    reason: input.reason,
    stop: input.stop,
    eligible: input.eligible,
    notStarted: input.notStarted,
    limitations: input.limitations,
    stoppedEarly: input.stoppedEarly,
    trials: input.trials.map((t) => ({ ...t })),
    run: input.run === null ? null : input.run.toJSON()
  })
})

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link prepare} / {@link run}: `newVersion` (start version N+1 of a changed
 * protocol), `version` (continue that earlier version), `resume` (refuse when the study never ran), `trials` (run only these trial ids of
 * the version), and the suite run's options (`runOptions`, e.g. the codec registry).
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyRunOptions {
  readonly newVersion?: boolean | undefined
  /** Continue this existing protocol version (the file's protocol must be its own). */
  readonly version?: number | undefined
  readonly resume?: boolean | undefined
  readonly trials?: ReadonlyArray<string> | undefined
  readonly control?: StudyControlFactory | undefined
  readonly runOptions?: Runner.RunOptions | undefined
}

/**
 * A prepared study run (see {@link prepare}): the version, its trials, the registered rows,
 * the ones to run, and the suite.
 *
 * @since 0.6.0
 * @category models
 */
export interface Prepared {
  readonly study: StudyInput
  readonly version: number
  readonly created: boolean
  readonly trials: ReadonlyArray<StudyTrial>
  readonly toRun: ReadonlyArray<StudyTrial>
  /**
   * Of `toRun`, the trials whose pipelines had all ended before (an interrupted run, e.g. kill
   * -9, ended them but never settled them): the run settles them and runs nothing of theirs
   * again (since 0.14.0; absent: none).
   */
  readonly endedBefore?: ReadonlyArray<string> | undefined
  readonly suite: Suite.Suite<AnySpec, any, any>
}

/**
 * What a prepared run has left, as `study run` and `resume` say it: `15 of 18 trials to run (3
 * ended before)` (a trial that ended before an interruption is settled, not run again), `18 of
 * 18 trials to run`.
 *
 * @param p the prepared run
 * @returns the phrase
 * @since 0.14.0
 * @category rendering
 */
export const toRunText = (p: Pick<Prepared, "trials" | "toRun" | "endedBefore">): string => {
  const ended = p.endedBefore?.length ?? 0
  return `${p.toRun.length - ended} of ${Words.count(p.trials.length, "trial")} to run${ended === 0 ? "" : ` (${ended} ended before)`}`
}

const isLoadedSuite = (s: StudySuite): s is LoadedSuiteShape => (s as { _tag?: unknown })._tag !== "Suite"

/**
 * The runnable suite of a {@link StudySuite} (a loaded suite's members run their experiments).
 *
 * @since 0.6.0
 * @category running
 */
export const toSuite = (s: StudySuite): Effect.Effect<Suite.Suite<AnySpec, any, any>, ConfigError> =>
  isLoadedSuite(s)
    ? Suite.fromLoaded(s)
    : Effect.succeed(s)

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * The order trials start in: round-robin by repeat (every variant's repeat 1, then every
 * variant's repeat 2, …), the variants of repeat `r` rotated by `r − 1` places (repeat 1:
 * v1 v2 v3; repeat 2: v2 v3 v1; …); trials of the same repeat keep their declared variant order
 * otherwise. Starting a variant's repeats side by side, or the variants one after the other,
 * would tie each variant to a stretch of time (a warm or loaded server, a rate limiter's
 * state, other trials' load) and a time-varying metric such as latency would then measure the
 * schedule instead of the variant; interleaving spreads every variant over the run, and the
 * rotation keeps one variant from always starting first. Deterministic (no seed needed): a
 * resumed study starts its remaining trials in the same order.
 *
 * @param trials the trials (any order)
 * @returns the same trials in run order
 * @since 0.9.0
 * @category running
 */
export const runOrder = <T extends Pick<StudyTrial, "variant" | "repeat">>(trials: ReadonlyArray<T>): ReadonlyArray<T> => {
  const variantIndex = new Map<string, number>()
  for (const t of trials) if (!variantIndex.has(t.variant.id)) variantIndex.set(t.variant.id, variantIndex.size)
  const nv = Math.max(1, variantIndex.size)
  const slot = (t: T): number => (variantIndex.get(t.variant.id)! - ((t.repeat - 1) % nv) + nv) % nv
  return trials
    .map((t, i) => ({ t, i }))
    .sort((a, b) => a.t.repeat - b.t.repeat || slot(a.t) - slot(b.t) || a.i - b.i)
    .map((x) => x.t)
}

/** A study's suite with its members (one per trial) in {@link runOrder}: the order the runner starts them. */
const inRunOrder = (suite: Suite.Suite<AnySpec, any, any>, trials: ReadonlyArray<StudyTrial>): Suite.Suite<AnySpec, any, any> => {
  const rank = new Map(runOrder(trials).map((t, i) => [t.trialId, i]))
  const at = (id: string): number => rank.get(id) ?? Number.MAX_SAFE_INTEGER
  return { ...suite, experiments: [...suite.experiments].sort((a, b) => at(a.id) - at(b.id)) }
}

/**
 * Freezes the protocol and registers the version's trials (see the module docs), after every
 * check (nothing is written when one fails). Fails with `ConfigError`: a changed protocol
 * without `newVersion` (path `protocol`), `newVersion` on an unchanged one (`--new-version`),
 * `resume` of a study that never ran (`study.id`), `resume` with `newVersion`, a named trial
 * that is not one of the version (`--trial`), what `StudyControl.validate` refuses (budgets,
 * stop conditions), a `deadline` already past when a new version would be created
 * (`stop[i].at`).
 *
 * @since 0.6.0
 * @category running
 */
export const prepare = (
  study: StudyInput,
  options: StudyRunOptions = {}
): Effect.Effect<Prepared, ConfigError | StoreUnavailable, StudyCatalog> =>
  Effect.gen(function*() {
    const catalog = yield* StudyCatalog
    if (options.resume === true) {
      if (options.newVersion === true) return yield* configError("--new-version", "resume continues a version: use run --new-version")
      const known = yield* catalog.study(study.id)
      if (Option.isNone(known)) {
        return yield* configError("study.id", `study "${study.id}" has never run in this output root: nothing to resume (use assay study run)`)
      }
    }
    const now = yield* Clock.currentTimeMillis
    const freezeInput = {
      studyId: study.id,
      question: study.question,
      type: study.type,
      protocolDigest: study.protocolDigest,
      protocolParts: study.protocolParts,
      previousProtocols: study.previousProtocols ?? [],
      protocol: study.describe(),
      newVersion: options.newVersion === true,
      ...(options.version === undefined ? {} : { version: options.version })
    }
    // everything is checked before any state is written: a refused command leaves nothing behind
    const versions = yield* catalog.versions(study.id)
    const decided = decideFreeze(versions[versions.length - 1], freezeInput, versions)
    if (decided._tag === "Refused") return yield* decided.error
    const version = decided.frozen.version
    const trials = study.trialsFor(version)
    if (options.trials !== undefined && options.trials.length > 0) {
      const known = new Set(trials.map((t) => t.trialId))
      const unknown = options.trials.filter((t) => !known.has(t))
      if (unknown.length > 0) {
        return yield* configError(
          "--trial",
          `${Words.listed(unknown.map((u) => JSON.stringify(u)))} ${unknown.length === 1 ? "is not a trial" : "are not trials"} of version ${version} (its ${
            Words.labelled("trial", trials.map((t) => t.trialId), { max: 5 })
          })`
        )
      }
    }
    const suite = inRunOrder(yield* toSuite(study.suiteFor(version)), trials)
    const deadlines = yield* StudyControl.validate(
      {
        trials: trials.map((t) => ({ trialId: t.trialId, price: priceOf(study, t) })),
        budget: study.budget ?? { perTrial: {}, total: {} },
        stop: study.stop
      },
      { trialConcurrency: study.trialConcurrency, trialSucceeded: () => Effect.succeed(false) }
    )
    if (decided.frozen.created) {
      // a new version whose deadline already passed would freeze a protocol that runs nothing
      for (const [i, c] of study.stop.entries()) {
        const at = deadlines.get(c)
        if (at !== undefined && at <= now) {
          return yield* configError(
            `stop[${i}].at`,
            `the deadline ${new Date(at).toISOString()} has already passed: the study would start nothing; move it later or remove it`
          )
        }
      }
    }
    const frozen = yield* catalog.freeze(freezeInput, now)
    yield* catalog.registerTrials(
      study.id,
      trials.map((t) => ({
        trialId: t.trialId,
        version: frozen.version,
        variantId: t.variant.id,
        variantKey: t.variant.key,
        variant: t.variant.assignment as Json,
        repeat: t.repeat,
        seedable: t.seedable ?? true
      })),
      now
    )
    const rows = new Map((yield* catalog.trials(study.id, frozen.version)).map((r) => [r.trialId, r]))
    let toRun: ReadonlyArray<StudyTrial>
    if (options.trials !== undefined && options.trials.length > 0) {
      const wanted = new Set(options.trials)
      toRun = trials.filter((t) => wanted.has(t.trialId))
    } else {
      toRun = trials.filter((t) => !FINAL_TRIAL_STATUSES.has(rows.get(t.trialId)?.status ?? "pending"))
    }
    // ended (every pipeline terminal, marked by the control) but never settled: an interrupted run
    const endedBefore = toRun.flatMap((t) => {
      const r = rows.get(t.trialId)
      return r !== undefined && r.endedAt !== null && !FINAL_TRIAL_STATUSES.has(r.status) ? [t.trialId] : []
    })
    return { study, version: frozen.version, created: frozen.created, trials, toRun: runOrder(toRun), endedBefore, suite }
  })

/** A metric value as a number (booleans 0/1), else undefined. */
const numeric = (v: unknown): number | undefined =>
  typeof v === "number" && Number.isFinite(v) ? v : typeof v === "boolean" ? (v ? 1 : 0) : undefined

type ByState = Record<"pending" | "running" | "succeeded" | "failed" | "interrupted", number>

/** Pipeline ids per store query when reading their states. */
const STATE_CHUNK = 500

/**
 * Each trial's stored pipelines by state, read from the root's merged view (the study
 * catalog's one aggregate read, else one walk over the pipelines, grouped by member prefix).
 */
/**
 * The call cache's hits and misses of each trial whose cache did anything, from the attempt
 * rows of the root's merged view (each attempt's pipeline names its trial; one pass over the
 * attempts, see `CallCache.addAttempt`): what `study run` and `study status` show per trial.
 *
 * @param studyId the study
 * @param trialIds the trials to count (attempts of other trials are skipped)
 * @returns trial id → `{ hits, misses }`, only the trials the cache did something for
 * @since 0.12.0
 * @category reading
 */
export const trialCache = (
  studyId: string,
  trialIds: ReadonlyArray<string>
): Effect.Effect<Map<string, { readonly hits: number; readonly misses: number; readonly costSavedUsd: number | null }>, StoreUnavailable | ConfigError, SuiteCatalog> =>
  Effect.gen(function*() {
    const store = yield* (yield* SuiteCatalog).view(undefined)
    const byDigest = new Map(trialIds.map((id) => [memberDigest(studyId, id), id]))
    const stats = new Map<string, CallCache.CacheStats>()
    yield* Stream.runForEach(store.streamAttempts({}), (a) =>
      Effect.sync(() => {
        if (a.outcome !== "cache_hit" && (a.decision === null || typeof a.decision !== "object" || !("cache" in a.decision))) return
        const d = memberDigestOf(a.pipelineId)
        const trial = d === undefined ? undefined : byDigest.get(d)
        if (trial === undefined) return
        stats.set(trial, CallCache.addAttempt(stats.get(trial) ?? CallCache.emptyStats, a.outcome, a.decision))
      }))
    const out = new Map<string, { readonly hits: number; readonly misses: number; readonly costSavedUsd: number | null }>()
    for (const [trial, c] of stats) if (c.hits + c.misses > 0) out.set(trial, { hits: c.hits, misses: c.misses, costSavedUsd: c.costSavedUsd })
    return out
  })

const trialStates = (
  studyId: string,
  trialIds: ReadonlyArray<string>,
  /** The view to read (default: the root's merged view). */
  trialView?: string
): Effect.Effect<Map<string, ByState>, StoreUnavailable | ConfigError, SuiteCatalog> =>
  Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    const byDigest = new Map(trialIds.map((id) => [memberDigest(studyId, id), id]))
    const wanted = new Set(trialIds)
    const byState = new Map<string, ByState>()
    const studyCatalog = yield* Effect.serviceOption(StudyCatalog)
    const aggregate = trialView === undefined && Option.isSome(studyCatalog) ? studyCatalog.value.pipelineStates : undefined
    if (aggregate !== undefined) {
      // one aggregate read of the root's database (the catalog's own): no row decoded
      for (const [id, states] of yield* aggregate(studyId)) {
        if (!wanted.has(id)) continue
        byState.set(id, {
          pending: states.pending ?? 0,
          running: states.running ?? 0,
          succeeded: states.succeeded ?? 0,
          failed: states.failed ?? 0,
          interrupted: states.interrupted ?? 0
        })
      }
    } else {
      const store = yield* catalog.view(trialView)
      yield* Stream.runForEach(store.streamPipelines(), (p) =>
        Effect.sync(() => {
          const d = memberDigestOf(p.pipelineId)
          const trial = d === undefined ? undefined : byDigest.get(d)
          if (trial === undefined) return
          let s = byState.get(trial)
          if (s === undefined) {
            s = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
            byState.set(trial, s)
          }
          s[p.state] = (s[p.state] ?? 0) + 1
        }))
    }
    return byState
  })

/**
 * The stored figures of each trial, read from the root's merged view: its pipelines by state
 * ({@link trialStates}) and its metrics: member-scoped run metrics (the latest run's value
 * wins) over the mean of its succeeded pipelines' latest values of a pipeline-scope metric,
 * read from every run of the root (a trial's pipelines may have ended in an earlier run).
 */
const trialFigures = (
  studyId: string,
  trialIds: ReadonlyArray<string>,
  /** The view to read (default: the root's merged view). */
  trialView?: string
): Effect.Effect<
  {
    readonly byState: ReadonlyMap<string, ByState>
    readonly metrics: ReadonlyMap<string, Readonly<Record<string, number>>>
  },
  StoreUnavailable | ConfigError,
  SuiteCatalog
> =>
  Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    const store = yield* catalog.view(trialView)
    const byDigest = new Map(trialIds.map((id) => [memberDigest(studyId, id), id]))
    const wanted = new Set(trialIds)
    const byState = yield* trialStates(studyId, trialIds, trialView)
    const runs = yield* store.listRuns // oldest first: later values overwrite earlier ones
    const memberScoped = new Map<string, Map<string, number>>()
    const perPipeline = new Map<string, Map<string, number>>() // pipeline -> name -> value
    for (const r of runs) {
      for (const m of yield* store.metrics({ runId: r.runId })) {
        const v = numeric(m.value)
        if (v === undefined) continue
        if (m.pipelineId === null) {
          const parsed = Suite.parseMemberMetric(m.name)
          if (parsed === undefined || !wanted.has(parsed.experimentId)) continue
          // the runner's and the suite's bookkeeping (pipelines skipped as already done, a
          // failure budget reached) is not a metric of the trial (issue 16, t16c: "partial:
          // skipped 40" among the metrics)
          if (BOOKKEEPING_METRICS.has(parsed.name)) continue
          const ms = memberScoped.get(parsed.experimentId) ?? new Map<string, number>()
          ms.set(parsed.name, v)
          memberScoped.set(parsed.experimentId, ms)
        } else {
          const d = memberDigestOf(m.pipelineId)
          if (d === undefined || !byDigest.has(d)) continue
          const ps = perPipeline.get(m.pipelineId) ?? new Map<string, number>()
          ps.set(m.name, v)
          perPipeline.set(m.pipelineId, ps)
        }
      }
    }
    // only succeeded pipelines count (issue 16: a trial stopped early averaged the values its
    // unfinished pipelines reported); their states read in chunks (one query each)
    const pids = [...perPipeline.keys()] as Array<PipelineId>
    for (let i = 0; i < pids.length; i += STATE_CHUNK) {
      const chunk = pids.slice(i, i + STATE_CHUNK)
      const rows = yield* store.getPipelines(chunk)
      for (const pid of chunk) if (rows.get(pid)?.state !== "succeeded") perPipeline.delete(pid)
    }
    const sums = new Map<string, Map<string, { sum: number; n: number }>>()
    for (const [pid, ms] of perPipeline) {
      const trial = byDigest.get(memberDigestOf(pid)!)!
      const acc = sums.get(trial) ?? new Map<string, { sum: number; n: number }>()
      for (const [name, v] of ms) {
        const a = acc.get(name) ?? { sum: 0, n: 0 }
        a.sum += v
        a.n++
        acc.set(name, a)
      }
      sums.set(trial, acc)
    }
    const metrics = new Map<string, Record<string, number>>()
    for (const id of trialIds) {
      const m: Record<string, number> = {}
      for (const [name, a] of sums.get(id) ?? []) m[name] = a.sum / a.n
      for (const [name, v] of memberScoped.get(id) ?? []) m[name] = v
      metrics.set(id, m)
    }
    return { byState, metrics }
  })

/**
 * The endpoint faults of the given trials' failed pipelines (see `TrialFacts.endpointFaults`),
 * read from the failed rows of the root's merged view only (one pass over the failed
 * pipelines; none read when no trial has one).
 */
const trialFaults = (
  studyId: string,
  trialIds: ReadonlyArray<string>
): Effect.Effect<ReadonlyMap<string, ReadonlyArray<EndpointFault.EndpointFault>>, StoreUnavailable | ConfigError, SuiteCatalog> =>
  Effect.gen(function*() {
    const out = new Map<string, Array<EndpointFault.EndpointFault>>()
    if (trialIds.length === 0) return out
    const byDigest = new Map(trialIds.map((id) => [memberDigest(studyId, id), id]))
    const store = yield* Effect.flatMap(SuiteCatalog, (c) => c.view(undefined))
    yield* Stream.runForEach(store.streamPipelines({ state: "failed" }), (p) =>
      Effect.sync(() => {
        const d = memberDigestOf(p.pipelineId)
        const trial = d === undefined ? undefined : byDigest.get(d)
        if (trial === undefined) return
        const fault = EndpointFault.endpointFaultOf(p)
        if (fault === undefined) return
        const list = out.get(trial) ?? []
        list.push(fault)
        out.set(trial, list)
      }))
    return out
  })

/**
 * The metrics settlement computes beyond the reported ones: the declared metrics and the
 * built-in ones an objective or a `metricThreshold` names (see `StudyMetrics`).
 */
const settlementDefinitions = (study: StudyInput): ReadonlyArray<StudyMetrics.MetricDefinition> => {
  const named = new Set([
    ...study.objectives.map((o) => o.metric),
    ...study.stop.flatMap((s) => s.when === "metricThreshold" ? [s.metric] : [])
  ])
  return StudyMetrics.definitions(study.metrics ?? [], study.objectives)
    .filter((d) => d.kind === "declared" || (d.kind === "builtin" && named.has(d.name)))
}

/**
 * Each trial's metrics for settlement: the reported ones ({@link trialFigures}) overlaid with
 * the declared and named built-in ones.
 */
const withComputedMetrics = (
  study: StudyInput,
  ids: ReadonlyArray<string>,
  reported: ReadonlyMap<string, Readonly<Record<string, number>>>,
  usage: ReadonlyMap<string, TrialUsage>,
  view?: string
): Effect.Effect<
  { readonly metrics: ReadonlyMap<string, Readonly<Record<string, number>>>; readonly judgeCostUsd: ReadonlyMap<string, number> },
  StoreUnavailable | ConfigError,
  SuiteCatalog
> =>
  Effect.gen(function*() {
    const defs = settlementDefinitions(study)
    const evaluatorTasks = new Set(study.evaluatorTasks ?? [])
    if (defs.length === 0 && evaluatorTasks.size === 0) return { metrics: reported, judgeCostUsd: new Map() }
    const computed = yield* StudyMetrics.read({ studyId: study.id, trialIds: ids, metrics: defs, usage, view, evaluatorTasks })
    const judgeCostUsd = new Map<string, number>()
    for (const [id, v] of computed) if (v.judgeCostUsd !== undefined) judgeCostUsd.set(id, v.judgeCostUsd)
    return {
      metrics: new Map(ids.map((id) => [id, { ...(reported.get(id) ?? {}), ...(computed.get(id)?.values ?? {}) }])),
      judgeCostUsd
    }
  })

/** Member-scoped run metrics the runner and the suite keep for themselves, never a trial's metric. */
const BOOKKEEPING_METRICS: ReadonlySet<string> = new Set([SKIPPED_METRIC, FAILURES_REACHED_METRIC])

/** Whether a stop that fired ends the study early (every condition but the natural end). */
const isEarly = (stop: StopFired | null): boolean => stop !== null && stop.condition.when !== "allTrialsTerminal"

/**
 * Runs a prepared study version (see the module docs) and settles it: the trials run, every
 * trial of the version reported. Needs the `Runner` (on the root's `Store` and the suite's
 * `Pools`), the `SuiteCatalog` and the `StudyCatalog` of the root.
 *
 * @since 0.6.0
 * @category running
 */
export const execute = (
  prepared: Prepared,
  options: StudyRunOptions = {}
): Effect.Effect<StudyReport, Runner.RunError | StoreUnavailable | ConfigError, Runner.Runner | SuiteCatalog | StudyCatalog> =>
  Effect.scoped(Effect.gen(function*() {
    const { study, suite, toRun, version } = prepared
    const catalog = yield* StudyCatalog
    const ledger = catalog.ledger(study.id)
    const start = yield* Clock.currentTimeMillis
    // requests written while no process ran are not this run's
    yield* catalog.dropStopRequests(study.id, start)
    yield* catalog.setStatus(study.id, "running", null, start)
    const suiteCatalog = yield* SuiteCatalog
    const running = new Set(toRun.map((t) => t.trialId))
    const rows = new Map((yield* catalog.trials(study.id, version)).map((r) => [r.trialId, r]))
    const settled = prepared.trials.flatMap((t) => {
      const status = rows.get(t.trialId)?.status
      return !running.has(t.trialId) && status !== undefined && FINAL_TRIAL_STATUSES.has(status)
        ? [{ trial: t, succeeded: status === "succeeded" }]
        : []
    })
    const control = yield* (options.control ?? studyControl())({ catalog: suiteCatalog, study, version, trials: toRun, ledger, settled })
    // nothing left to run (every trial settled for good): settle from what is stored
    if (toRun.length === 0) return yield* settle(prepared, null, control, catalog)
    // the declared metrics' output paths the loader could not check: checked against the
    // first succeeded pipeline's output; one that leads nowhere stops the run at once
    const checks = study.outputChecks ?? []
    const mismatch = yield* Deferred.make<ConfigError>()
    const userFinished = options.runOptions?.onPipelineFinished
    let checked = false
    // a declared objective's `from: { metric }` that no pipeline reports (tester16e F3): once the
    // run's first METRIC_CHECK_PIPELINES pipelines have succeeded and none of them reported it,
    // the study stops there, as for an output path that leads nowhere. The metrics the
    // pipelines report are seen through the window's observer; a pipeline that reported before
    // an interruption (its task restored from a checkpoint) is looked up in the store
    const metricChecks = metricChecksOf(study)
    const watch = new MetricWatch(metricChecks)
    const window = control.window === undefined || metricChecks.length === 0 ? control.window : {
      ...control.window,
      observe: {
        ...(control.window.observe ?? {}),
        metric: (id: string, name: string, value: unknown, pipelineId: PipelineId | null) =>
          Effect.suspend(() => {
            if (pipelineId !== null) watch.reported(pipelineId, name)
            const next = control.window?.observe?.metric
            return next === undefined ? Effect.void : next(id, name, value, pipelineId)
          })
      }
    }
    const watching = window !== control.window
    const storedMetrics = (pipelineId: string) =>
      Effect.gen(function*() {
        const store = yield* suiteCatalog.view()
        const names = new Set<string>()
        for (const r of yield* store.listRuns) {
          for (const m of yield* store.metrics({ runId: r.runId, pipelineId: pipelineId as PipelineId })) names.add(m.name)
        }
        return names
      }).pipe(Effect.orElseSucceed(() => new Set<string>()))
    const onPipelineFinished: Runner.OnPipelineFinished | undefined = checks.length === 0 && !watching ? userFinished : (record, output) =>
      Effect.suspend(() => {
        if (Option.isNone(output)) return Effect.void
        const outputCheck = checked || checks.length === 0 ? Effect.void : Effect.suspend(() => {
          checked = true
          const error = outputMismatch(checks, output.value, record.pipelineId)
          return error === null ? Effect.void : Deferred.succeed(mismatch, error)
        })
        const metricCheck = !watching || watch.done ? Effect.void : Effect.gen(function*() {
          const missing = watch.missingIn(record.pipelineId)
          const earlier = missing.length === 0 ? new Set<string>() : yield* storedMetrics(record.pipelineId)
          const error = watch.succeeded(record.pipelineId, earlier, study.reportingTasks ?? [])
          if (error !== null) yield* Deferred.succeed(mismatch, error)
        })
        return Effect.zipRight(outputCheck, metricCheck)
      }).pipe(Effect.zipRight(userFinished === undefined ? Effect.void : userFinished(record, output)))
    const handle = yield* Suite.start(suite, {
      ...(options.runOptions ?? {}),
      ...(onPipelineFinished === undefined ? {} : { onPipelineFinished }),
      experiments: toRun.map((t) => t.trialId),
      ...(window === undefined ? {} : { window })
    })
    if (checks.length > 0 || watching) {
      // a second stop does not wait for the in-flight attempts' grace
      yield* Effect.forkScoped(Deferred.await(mismatch).pipe(Effect.zipRight(handle.stop("metric_path")), Effect.zipRight(handle.stop("metric_path"))))
    }
    // the run's report and the members' facts of this run; not `awaitSuite`, whose figures per
    // member cost a read of every member's rows each (settlement reads them once for all)
    const runReport = yield* handle.await
    if (control.finish !== undefined) yield* control.finish
    const bad = yield* Deferred.poll(mismatch)
    if (Option.isSome(bad)) {
      // not settled: nothing is judged on a metric that cannot be read; resumable once fixed
      yield* catalog.setStatus(study.id, "interrupted", null, yield* Clock.currentTimeMillis)
      const error = yield* bad.value
      return yield* error
    }
    return yield* settle(prepared, runReport, control, catalog)
  }))

/** How many of a run's first succeeded pipelines must report none of a watched metric before the study stops (tester16e F3). */
const METRIC_CHECK_PIPELINES = 5

/** A declared metric read from a task-reported metric that an objective names: `at` its field path. */
interface MetricCheck {
  readonly at: string
  readonly name: string
  readonly metric: string
}

/**
 * What the run watches: the declared metrics with `from: { metric }` that some objective names,
 * and the objectives' metrics that are neither declared, built in nor a judge's (in a study
 * without `metrics:`, a metric a task is to report: tester16f F4), at `objectives[i].metric`.
 */
const metricChecksOf = (study: StudyInput): ReadonlyArray<MetricCheck> => {
  const declared = (study.metrics ?? []).flatMap((m, i) =>
    "metric" in m.from && study.objectives.some((o) => o.metric === m.name) ? [{ at: `metrics[${i}].from.metric`, name: m.name, metric: m.from.metric }] : []
  )
  const judged = new Set(study.judgeMetrics ?? [])
  const reported = study.objectives.flatMap((o, i) =>
    DomainStudy.BUILTIN_METRICS[o.metric] !== undefined || judged.has(o.metric) || (study.metrics ?? []).some((m) => m.name === o.metric) ||
      declared.some((c) => c.metric === o.metric)
      ? []
      : [{ at: `objectives[${i}].metric`, name: o.metric, metric: o.metric }]
  )
  return [...declared, ...reported]
}

/**
 * The run's watch on the task-reported metrics of {@link metricChecksOf}: which metrics the
 * running pipelines reported (until each is decided), and, as pipelines succeed, whether one of
 * the first {@link METRIC_CHECK_PIPELINES} reported each metric. Synchronous; one per run.
 */
class MetricWatch {
  private readonly watched: ReadonlySet<string>
  private readonly seen = new Map<string, Set<string>>()
  private readonly found = new Set<string>()
  private readonly first: Array<string> = []
  done: boolean
  constructor(private readonly checks: ReadonlyArray<MetricCheck>) {
    this.watched = new Set(checks.map((c) => c.metric))
    this.done = checks.length === 0
  }
  /** The other metrics the running pipelines reported (a did-you-mean for a watched one). */
  readonly others = new Set<string>()
  /** A pipeline stored metric `name`. */
  reported(pipelineId: string, name: string): void {
    if (!this.done && !this.watched.has(name) && this.others.size < 1000) this.others.add(name)
    if (this.done || !this.watched.has(name) || this.found.has(name)) return
    let s = this.seen.get(pipelineId)
    if (s === undefined) this.seen.set(pipelineId, s = new Set())
    s.add(name)
  }
  /** The watched metrics not yet found that this pipeline did not report in this run. */
  missingIn(pipelineId: string): ReadonlyArray<string> {
    const s = this.seen.get(pipelineId)
    return [...this.watched].filter((m) => !this.found.has(m) && s?.has(m) !== true)
  }
  /**
   * A pipeline succeeded (`earlier`: the metrics the store holds for it from an earlier run):
   * the error that stops the study when this was the last of the first pipelines and some
   * watched metric is still unreported, else `null`.
   */
  succeeded(pipelineId: string, earlier: ReadonlySet<string>, tasks: ReadonlyArray<string>): ConfigError | null {
    if (this.done) return null
    const s = this.seen.get(pipelineId)
    this.seen.delete(pipelineId)
    for (const m of this.watched) if (s?.has(m) === true || earlier.has(m)) this.found.add(m)
    this.first.push(pipelineId)
    if (this.found.size === this.watched.size) {
      this.done = true
      this.seen.clear()
      return null
    }
    if (this.first.length < METRIC_CHECK_PIPELINES) return null
    this.done = true
    this.seen.clear()
    const n = this.first.length
    // every metric the pipelines reported: the watched ones found as well (tester16g F10: a
    // list without them read as if they were missing, and lost the did-you-mean to them)
    const others = [...new Set([...this.found, ...this.others])].filter((m) => m !== SKIPPED_METRIC && m !== FAILURES_REACHED_METRIC)
    const issues = this.checks.filter((c) => !this.found.has(c.metric)).map((c) => {
      const objective = c.at.startsWith("objectives[")
      const near = closest(c.metric, others)
      return {
        path: c.at,
        message: `${objective ? "objective" : "metric"} "${c.name}": none of the first ${n} succeeded pipelines reported metric "${c.metric}" (${this.first.slice(0, 2).join(", ")}, …); the study stopped there. ` +
          `${
            objective ? `It is neither built in nor declared under metrics, so only a task can report it${others.length === 0 ? "" : ` (they reported ${others.slice(0, 8).map((m) => `"${m}"`).join(", ")})`}. ` : ""
          }` +
          `${tasks.length === 0 ? "No task of the experiment runs code of yours that could report it" : `A task reports it with \`yield* ctx.reportMetric("${c.metric}", value)\`: ${tasks.length === 1 ? "the task that could is" : "the tasks that could are"} ${tasks.join(", ")}`}; ` +
          `fix the task (or the ${objective ? "objective's" : "metric's"} name) and run again (a changed task or ${objective ? "objective" : "metric"} is a new protocol: --new-version). A metric reported for some cases only is fine once one of the first pipelines reports it`,
        ...(near === undefined ? {} : { suggestion: `did you mean "${near}"?` })
      }
    })
    return new ConfigError({ message: issues.map((i) => `${i.path}: ${i.message}${i.suggestion === undefined ? "" : ` (${i.suggestion})`}`).join("\n"), issues })
  }
}

/**
 * The `ConfigError` for declared output paths that lead nowhere in a succeeded pipeline's
 * output (`null` when every one is found): one issue per metric at its field path, with the
 * output's actual fields and a did-you-mean.
 */
const outputMismatch = (checks: ReadonlyArray<DomainStudy.OutputCheck>, value: unknown, pipelineId: string): ConfigError | null => {
  const issues = checks.flatMap((c) => {
    const r = OutputPath.checkValuePath(value, c.path)
    if (r._tag === "found") return []
    const suggestion = r.near !== undefined ? `did you mean "${[...c.path.split(".").slice(0, r.segment), r.near].join(".")}"?` : undefined
    return [{
      path: c.at,
      message: `metric "${c.name}": ${OutputPath.describeMissing(c.path, r, "the output")} in the first succeeded pipeline (${pipelineId}); ` +
        "the study stopped there. Fix the path and run again (a changed metric is a new protocol: --new-version); " +
        "if the field is only sometimes present, declare the final task's output schema so the path is checked against it instead",
      ...(suggestion === undefined ? {} : { suggestion })
    }]
  })
  if (issues.length === 0) return null
  return new ConfigError({
    message: issues.map((i) => `${i.path}: ${i.message}${i.suggestion === undefined ? "" : ` (${i.suggestion})`}`).join("\n"),
    issues
  })
}

/**
 * The per-trial budget figures `usage` went past, one phrase each (`cost $0.0009 of $0.0005,
 * 84% over`; `costUsd` within a relative 1e-9 of its limit is not past it); empty when none.
 *
 * @param usage a trial's usage
 * @param perTrial the study's per-trial budget
 * @returns the phrases (`TrialReport.overshoot`)
 * @since 0.9.0
 * @category settlement
 */
export const overshootOf = (usage: TrialUsage, perTrial: StudyControl.BudgetFigures): ReadonlyArray<string> =>
  StudyControl.overshoot(usage, perTrial)

/** One line per variant without a succeeded trial, with its trials' statuses (the report's too). */
const limitationsOf = (reports: ReadonlyArray<TrialReport>): ReadonlyArray<string> =>
  DomainStudy.noSucceededTrialLimitations(reports.map((r) => ({ variantId: r.variantId, assignment: r.assignment, status: r.status })))

const settle = (
  prepared: Prepared,
  runReport: Runner.RunReport | null,
  control: StudyControlHandle,
  catalog: StudyCatalogService
): Effect.Effect<StudyReport, StoreUnavailable | ConfigError, SuiteCatalog> =>
  Effect.gen(function*() {
    const membership = runReport === null ? [] : yield* Effect.flatMap(SuiteCatalog, (c) => c.membership(runReport.runId))
    const { study, trials, version } = prepared
    const stop = yield* control.fired
    const exhausted = yield* control.exhausted
    const notes = control.exhaustedNotes === undefined ? new Map<string, string>() : yield* control.exhaustedNotes
    const ran = new Set(prepared.toRun.map((t) => t.trialId))
    const interrupted = runReport !== null && runReport.status === "interrupted" && stop === null
    const ids = trials.map((t) => t.trialId)
    const figures = yield* trialFigures(study.id, ids)
    const usage = yield* catalog.ledger(study.id).usage(ids)
    const { judgeCostUsd, metrics: computed } = yield* withComputedMetrics(study, ids, figures.metrics, usage)
    const rows = new Map((yield* catalog.trials(study.id, version)).map((r) => [r.trialId, r]))
    const faults = yield* trialFaults(study.id, ids.filter((id) => ran.has(id) && count(figures.byState.get(id)?.failed) > 0))
    const outcome = new Map(membership.map((m) => [m.experimentId, m]))
    const now = yield* Clock.currentTimeMillis
    const settlements: Array<TrialSettlement> = []
    const reports: Array<TrialReport> = []
    const cacheByTrial = yield* trialCache(study.id, ids)
    for (const t of trials) {
      const row: TrialRecord | undefined = rows.get(t.trialId)
      const m = computed.get(t.trialId) ?? {}
      let status: TrialStatus = row?.status ?? "pending"
      let reason: string | null = row?.reason ?? null
      let byState: Readonly<Record<string, number>> = {}
      // its metrics cover every pipeline it planned: not partial, whatever its status (a trial
      // that broke a hard constraint or ended over its budget ran to its end)
      let complete = false
      if (ran.has(t.trialId)) {
        const o = outcome.get(t.trialId)
        const states = figures.byState.get(t.trialId) ?? { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
        const stored = Object.values(states).reduce((a, b) => a + b, 0)
        byState = Object.fromEntries(Object.entries(states).filter(([, n]) => n > 0))
        const settled = settleTrial({
          admitted: o?.admitted ?? 0,
          sourceExhausted: o?.sourceExhausted ?? false,
          sourceError: o?.sourceError ?? null,
          byState: states,
          metrics: m,
          budgetSpent: exhausted.get(t.trialId) ?? null,
          budgetNote: notes.get(t.trialId),
          overBudget: overshootOf(usage.get(t.trialId) ?? ZERO_USAGE, study.budget?.perTrial ?? {}),
          stop,
          // the window started it (its row's start) or it used a call: it began, even with nothing stored
          started: (row?.startedAt ?? null) !== null || (usage.get(t.trialId)?.calls ?? 0) > 0,
          planned: study.pipelinesPerTrial ?? null,
          endpointFaults: faults.get(t.trialId)
        }, study.objectives)
        status = settled.status
        reason = settled.reason
        complete = trialComplete({
          admitted: o?.admitted ?? 0,
          sourceExhausted: o?.sourceExhausted ?? false,
          sourceError: o?.sourceError ?? null,
          byState: states
        })
        const firstStart = stored > 0 ? (row?.startedAt ?? now) : null
        settlements.push({
          trialId: t.trialId,
          status,
          reason,
          metrics: status === "not_started" ? {} : m,
          startedAt: firstStart,
          // the end the control recorded when the trial's work ended (else now, settling it)
          endedAt: status === "incomplete" || status === "cancelled" || status === "not_started" ? null : (row?.endedAt ?? now),
          // the pipelines its metrics cover, as settled (study status shows them while the trial
          // runs again), and the judge's share of its cost
          settled: {
            metricsOver: { succeeded: count(states.succeeded), planned: study.pipelinesPerTrial ?? null },
            ...(judgeCostUsd.has(t.trialId) ? { judgeCostUsd: judgeCostUsd.get(t.trialId)! } : {})
          }
        })
      }
      if (!ran.has(t.trialId)) {
        // settled by an earlier run: complete when every pipeline it planned succeeded
        const st = figures.byState.get(t.trialId)
        const ok = count(st?.succeeded)
        complete = st !== undefined && ok > 0 && count(st.failed) + count(st.interrupted) + count(st.pending) + count(st.running) === 0 &&
          (study.pipelinesPerTrial === undefined || study.pipelinesPerTrial === null || ok >= study.pipelinesPerTrial)
      }
      const trialUsage = usage.get(t.trialId) ?? ZERO_USAGE
      // a trial that never started has no metrics (the built-in ones would read 0)
      const metrics = status === "not_started" ? {} : ran.has(t.trialId) ? m : (row?.metrics ?? {})
      const overshoot = overshootOf(trialUsage, study.budget?.perTrial ?? {})
      reports.push({
        trialId: t.trialId,
        variantId: t.variant.id,
        assignment: t.variant.assignment as Json,
        repeat: t.repeat,
        status,
        reason,
        usage: trialUsage,
        metrics,
        byState,
        ran: ran.has(t.trialId),
        ...(status !== "succeeded" && !complete && Object.keys(metrics).length > 0
          ? {
            partialMetrics: true,
            metricsOver: {
              succeeded: count(figures.byState.get(t.trialId)?.succeeded),
              planned: study.pipelinesPerTrial ?? null
            }
          }
          : {}),
        ...(overshoot.length > 0 ? { overshoot } : {}),
        ...(cacheByTrial.has(t.trialId) ? { cache: cacheByTrial.get(t.trialId) } : {})
      })
    }
    yield* catalog.settle(settlements, now)
    // a stop that left nothing unfinished (every trial ran to its settlement) ended nothing early;
    // the study's total stopping a trial's pipelines did (issue 16, N1)
    const stoppedEarly = isEarly(stop) &&
      reports.some((r) =>
        r.status === "not_started" || r.status === "cancelled" || r.status === "incomplete" || r.status === "pending" ||
        (r.status === "budget_exhausted" && (r.reason ?? "").startsWith("the study's total "))
      )
    // a budget stop's reason has the figures when it fired; running pipelines may have spent
    // more: the study's final use past the total is said too (never capped at the limit)
    const overTotal = overshootOf(
      reports.reduce((a, r) => StudyControl.addUsage(a, r.usage), ZERO_USAGE),
      study.budget?.total ?? {}
    )
    const shownStop: StopFired | null = stop !== null && stop.condition.when === "budget" && overTotal.length > 0
      ? { ...stop, reason: `${stop.reason}; in the end: ${overTotal.join("; ")}` }
      : stop
    const settledStudy = settleStudy({
      trials: reports.map((r) => ({
        status: r.status,
        metrics: r.metrics,
        brokeConstraint: r.status === "failed" && (r.reason ?? "").startsWith("hard constraint"),
        // this run's settlement or an earlier one's (a trial not run now keeps its reason)
        endpointFault: r.status === "incomplete" && (r.reason ?? "").startsWith(ENDPOINT_FAULT_REASON),
        label: `${r.variantId} r${r.repeat}`
      })),
      stoppedEarly,
      interrupted
    }, study.objectives)
    const limitations = limitationsOf(reports)
    // the status stays (the study ran to its end); the reason says what it cannot compare
    const reason = limitations.length > 0 && (settledStudy.status === "completed" || settledStudy.status === "stopped_with_results")
      ? `${settledStudy.reason}; ${Words.count(limitations.length, "variant")} without a succeeded trial (see the limitations)`
      : settledStudy.reason
    // a stop that ended nothing early (it fired at the natural end) is not the study's stop
    yield* catalog.setStatus(study.id, settledStudy.status, stoppedEarly ? shownStop : null, now)
    return makeReport({
      studyId: study.id,
      version,
      status: settledStudy.status,
      reason,
      stop: shownStop,
      trials: reports,
      eligible: reports.filter((r) => isEligible(r.status)).map((r) => r.trialId),
      notStarted: reports.filter((r) => r.status === "not_started").map((r) => r.trialId),
      limitations,
      stoppedEarly,
      run: runReport
    })
  })

/**
 * Prepares and runs a study version (see {@link prepare} and {@link execute}).
 *
 * @param study the loaded study
 * @param options new version, resume, trials, control, run options
 * @since 0.6.0
 * @category running
 */
export const run = (
  study: StudyInput,
  options: StudyRunOptions = {}
): Effect.Effect<StudyReport, Runner.RunError | StoreUnavailable | ConfigError, Runner.Runner | SuiteCatalog | StudyCatalog> =>
  Effect.flatMap(prepare(study, options), (p) => execute(p, options))

/**
 * A study's status as stored (study row, versions, the current version's trials), without
 * running anything: what `assay study status` prints.
 *
 * @since 0.6.0
 * @category reading
 */
export const status = (studyId: string) =>
  Effect.gen(function*() {
    const catalog = yield* StudyCatalog
    const row = yield* catalog.study(studyId)
    if (Option.isNone(row)) return Option.none()
    const versions = yield* catalog.versions(studyId)
    const trials = yield* catalog.trials(studyId, row.value.currentVersion)
    return Option.some({ study: row.value, versions, trials })
  })
