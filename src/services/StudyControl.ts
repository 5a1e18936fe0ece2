/**
 * The running mechanics of a study inside its suite run (a study's trials are the suite's
 * members): the trial window, per-trial usage meters, equal per-trial budgets and the study's
 * stop conditions. {@link control} builds them for one run, in a scope; its
 * {@link StudyControlHandle.window} goes to `Suite.start` / `Suite.run`
 * (`SuiteRunOptions.window`), and nothing in the tasks changes.
 *
 * **Meters** (per trial, summed across runs through the {@link TrialLedger}):
 * - `calls`: leases acquired by the trial's tasks (scoped or raw), less those whose connection
 *   never reached the provider ({@link neverReachedProvider}: not a call, as the store's
 *   accounting and `assay export` count). The start gate counts a call at acquire (and gives it
 *   back when the lease reports a connection failure); the ledger at the lease's first report (written through with its tokens and
 *   cost before the report returns, so before the task's checkpoint), or, for a lease that
 *   never reports, when its trial is done in this run. After `kill -9`, the ledger holds
 *   exactly the calls that reported (a lease acquired by an attempt whose call never
 *   happened is not counted, and is counted once when the attempt runs again on resume) and
 *   every token and dollar they reported; only a lease that never reports and the last
 *   `pollMs` of `timeMs` can be lost;
 * - `tokens`: `usage.tokens` of each lease report, else `promptTokens + completionTokens`
 *   (the chat task reports all three);
 * - `costUsd`: the cost the run priced the report at (`LeaseReport.costUsd`, the figure the
 *   attempt records; see `Pricing`: a resource's own price, then the variant's model profile
 *   price, then the experiment's `pricing`, then the server's reported cost); for a report
 *   that carries none, `promptTokens × promptPer1k / 1000 + completionTokens × completionPer1k
 *   / 1000` with the trial's model price ({@link ModelPrice}), a report giving only `tokens`
 *   charged at the higher of the two prices (a budget never under-counts); no price: no cost;
 * - `timeMs`: wall time (Clock) while the trial is active: from its start in the window until
 *   every spec it submitted is done with in this run (or the run ends).
 *
 * **Budgets** (`budget.perTrial`, the same for every trial; no trial ever gets more): a gate
 * on the trial's pipelines. A trial whose figure reached its limit (`usage >= limit`) submits
 * nothing more and starts no more pipelines: its admitted pipelines that have not started are
 * skipped (reason `budget_exhausted`, left pending); pipelines already running finish. So a
 * trial may use exactly its budget: with `calls: N` and one call per pipeline, N pipelines run
 * and the N+1th is not started. `timeMs` is also a deadline: once reached, the trial's running
 * pipelines are interrupted too (resumable).
 *
 * **Pipelines' cost** (`tokens` and `costUsd`, since 0.11.0; issue 16, F1): tokens and dollars
 * arrive when a call reports, so before the trial submits a pipeline (`MemberWindow.admit`) the
 * gate projects what the pipelines it has not finished will still cost. `m` is the trial's
 * **mean cost of an ended pipeline** (every pipeline the start gate started and whose fiber
 * ended in this run, plus, on a resume, the pipelines stored ended with the usage recorded
 * before: `TrialInput.endedBefore`); the projection is `usage + Σ over started pipelines not
 * ended of max(0, m − what they reported so far) + m × (submitted, not yet started + 1)`:
 *
 * - it fits the limit (`<=`): the pipeline is submitted;
 * - it does not, and the trial still has a pipeline submitted and not ended: **not now** (the
 *   trial submits nothing this turn and is asked again when one of the suite's pipelines ends;
 *   it is not exhausted);
 * - it does not, and nothing of it is submitted or running: the trial is stopped
 *   (`budget_exhausted`), its reason saying the figures (`has no room for another pipeline:
 *   $0.000940 used of $0.00100; the next is estimated at $0.0000600, the mean of 15 ended
 *   pipelines`).
 *
 * Before any pipeline of the trial ended, `m` is unknown: the trial runs **one pipeline at a
 * time** until the first ends (no prior: a plan's estimate was shown wrong both ways, issue
 * 16 F1). The start gate (`mayStartPipeline`) starts a submitted pipeline unless a figure is
 * reached or, with nothing of the trial running, the projection of that one pipeline does not
 * fit (it is then skipped, pending, and the trial stopped as above); it never waits (it holds
 * a worker slot), so a pipeline submitted under an older, lower mean still starts.
 *
 * **The overshoot bound.** Let `m̂` be the mean when the trial's last pipeline was submitted
 * and `O` the trial's pipelines submitted and not ended then (that one included; at most the
 * runner's admitted pipelines, `maxAdmitted`). The projection fitted, so the trial's final
 * usage is at most `limit + Σ over p in O of max(0, c_p − m̂)`, `c_p` being what pipeline `p`
 * costs. Pipelines of equal cost never pass the limit; before the first one ended `O` holds
 * one pipeline, so a budget smaller than one pipeline is passed by at most that pipeline's
 * cost; in general the overshoot is at most `|O| × (c_max − m̂)`, less than `|O| × c_max` (with
 * `|O|` up to the run's concurrency plus the admitted pipelines waiting for a worker).
 * `calls` needs no projection: a call counts when its lease is acquired. Whatever ran, a
 * trial whose final usage is past a limit never settles `succeeded` (see `Study.settleTrial`).
 *
 * **Stop conditions**, evaluated when a trial ends, on each metric report, on usage, on the
 * Clock (every `pollMs`, default 1 s, and at a deadline) and on a manual request (the
 * ledger's `stopRequested`, polled every `pollMs`; Ctrl-C with `signals`). The first to hold
 * fires (in declared order); after it no trial starts; `running: "cancel"` also stops the
 * run (running pipelines interrupted after the run's grace, resumable), `"drain"` (the default)
 * lets the started trials finish. The fired condition and its reason are recorded through the
 * ledger and returned by {@link StudyControlHandle.fired}. `successfulTrials` and
 * `metricThreshold` hold only once an ended trial is settled (`trialSucceeded`, `trialMetric`:
 * store reads), so while such a condition is declared a trial starts only after every trial
 * that ended before it has been settled and the conditions checked (trials that end faster
 * than their settlement would otherwise all start before the condition could fire); the
 * conditions are checked after each settlement, and none is settled once one fired.
 *
 * Until the study file's domain types land (`domain/Study.ts`), {@link StopCondition} and
 * {@link BudgetFigures} are defined here with the same field names.
 *
 * @since 0.6.0
 */
import { Deferred, Duration, Effect, Exit, Option, Queue, Schedule, Scope } from "effect"
import type { PipelineId } from "../domain/Ids.js"
import { roundUsd } from "../domain/Pricing.js"
import { classify, ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import type { Lease, LeaseReport } from "../domain/Lease.js"
import type { AttemptRecord } from "../domain/Records.js"
import { formatStudyUsd } from "./internal/money.js"
import * as Pools from "./Pools.js"
import * as Signals from "./Signals.js"
import type * as Runner from "./Runner.js"
import type * as Suite from "./Suite.js"
import type { MemberWindow } from "./Suite.js"

// ---------------------------------------------------------------------------------------------
// Contract types
// ---------------------------------------------------------------------------------------------

/**
 * Budget figures, each optional: `calls` (leases), `tokens`, `costUsd` (US dollars) and
 * `timeMs` (wall milliseconds while active).
 *
 * @since 0.6.0
 * @category models
 */
export interface BudgetFigures {
  readonly calls?: number | undefined
  readonly tokens?: number | undefined
  readonly costUsd?: number | undefined
  readonly timeMs?: number | undefined
}

/**
 * One figure of a budget.
 *
 * @since 0.6.0
 * @category models
 */
export type BudgetFigure = keyof BudgetFigures

/**
 * A budget figure's name in words, for messages: `calls`, `tokens`, `cost`, `time` (never the
 * field names `costUsd` / `timeMs`).
 *
 * @param figure the figure
 * @returns its word
 * @since 0.9.0
 * @category formatting
 */
export const figureWord = (figure: BudgetFigure): string =>
  figure === "costUsd" ? "cost" : figure === "timeMs" ? "time" : figure

/**
 * A budget figure's value in words: dollars for `costUsd` as every study view prints them (`$0.0123`, `$0.500`: 3 significant digits), seconds for `timeMs`
 * (`12.3 s`; under a second in milliseconds, `20 ms`, never `0.0 s`), the count otherwise.
 *
 * @param figure the figure
 * @param value its value (USD, milliseconds, calls or tokens)
 * @returns the value with its unit
 * @since 0.9.0
 * @category formatting
 */
export const figureValue = (figure: BudgetFigure, value: number): string =>
  figure === "costUsd"
    ? formatStudyUsd(value)
    : figure === "timeMs"
    ? value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`
    : String(value)

/**
 * The figures in the order they are checked (the first reached is the one reported).
 *
 * @since 0.6.0
 * @category constants
 */
export const FIGURES: ReadonlyArray<BudgetFigure> = ["calls", "tokens", "costUsd", "timeMs"]

/**
 * What happens to running trials when a stop condition fires: `drain` lets them finish,
 * `cancel` interrupts their pipelines (resumable).
 *
 * @since 0.6.0
 * @category models
 */
export type StopRunning = "drain" | "cancel"

/**
 * A comparison of a metric with a threshold.
 *
 * @since 0.6.0
 * @category models
 */
export type ComparisonOp = ">" | ">=" | "<" | "<=" | "==" | "!="

/**
 * A study's stop condition (`running` defaults to `drain`):
 *
 * - `allTrialsTerminal`: every trial ended (the natural end);
 * - `successfulTrials`: `count` trials succeeded (as the caller's `trialSucceeded` says);
 * - `metricThreshold`: some ended trial's `metric` compares with `value` by `op` (only a
 *   trial's final value counts: a running trial's partial average never fires it);
 * - `budget`: the study total (`budget.total`) reached one of its figures;
 * - `deadline`: the Clock passed `at` (an ISO 8601 date-time, or epoch ms);
 * - `manual`: a stop request (the ledger's `stopRequested`, or Ctrl-C).
 *
 * @since 0.6.0
 * @category models
 */
export type StopCondition =
  | { readonly when: "allTrialsTerminal"; readonly running?: StopRunning | undefined }
  | { readonly when: "successfulTrials"; readonly count: number; readonly running?: StopRunning | undefined }
  | {
    readonly when: "metricThreshold"
    readonly metric: string
    readonly op: ComparisonOp
    readonly value: number
    readonly running?: StopRunning | undefined
  }
  | { readonly when: "budget"; readonly running?: StopRunning | undefined }
  | { readonly when: "deadline"; readonly at: string | number; readonly running?: StopRunning | undefined }
  | { readonly when: "manual"; readonly running?: StopRunning | undefined }

/**
 * A model profile's price, in US dollars per 1000 tokens.
 *
 * @since 0.6.0
 * @category models
 */
export interface ModelPrice {
  readonly promptPer1k: number
  readonly completionPer1k: number
}

/**
 * A trial's usage: leases acquired (`calls`), `tokens`, `costUsd` and wall `timeMs` while
 * active.
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialUsage {
  readonly calls: number
  readonly tokens: number
  readonly costUsd: number
  readonly timeMs: number
  /**
   * Calls that reported tokens but had no price (neither a priced `costUsd` in the report
   * nor a model price): `costUsd` leaves them out, so with any it is a lower bound (since
   * 0.9.0; absent: 0).
   */
  readonly unpriced?: number | undefined
}

/**
 * A fired stop condition: which (`condition`), why in words (`reason`), when (`at`, epoch
 * ms), what happens to running trials (`running`) and, for Ctrl-C, the `signal`.
 *
 * @since 0.6.0
 * @category models
 */
export interface StopFired {
  readonly condition: StopCondition
  readonly reason: string
  readonly at: number
  readonly running: StopRunning
  /** The signal (`SIGINT`, `SIGTERM`, `SIGHUP`) when the stop is a Ctrl-C (a `manual` stop). */
  readonly signal?: string | undefined
}

/**
 * Where a study's control keeps what outlives a run (the study store implements it on its
 * tables; {@link memoryLedger} is the in-memory one for tests):
 *
 * - `usage(ids)`: the usage recorded so far per trial (absent: none);
 * - `addUsage(id, delta, now)`: adds to a trial's usage (at each lease's report, then with
 *   batches: every `pollMs` and at the end);
 * - `recordStop(fired)`: the fired stop condition;
 * - `stopRequested`: a pending manual stop request (`assay study stop`), or `null`;
 * - `markTrial(id, phase, at)` (optional): a trial's start and end in this run (live status).
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialLedger {
  readonly usage: (trialIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyMap<string, TrialUsage>, StoreUnavailable>
  readonly addUsage: (trialId: string, delta: TrialUsage, now: number) => Effect.Effect<void, StoreUnavailable>
  readonly recordStop: (stop: StopFired) => Effect.Effect<void, StoreUnavailable>
  readonly stopRequested: Effect.Effect<StopFired | null, StoreUnavailable>
  /**
   * A trial started (`running`: its row reads `running`, its first start kept) or ended its
   * run's work (`ended`, written with the next batch) at `at` (epoch ms): what `assay study
   * status` shows while the study runs. Optional (the in-memory ledger has none).
   */
  readonly markTrial?: ((trialId: string, phase: "running" | "ended", at: number) => Effect.Effect<void, StoreUnavailable>) | undefined
}

/**
 * One trial as the control sees it: its id (the suite member's id) and the price of its model
 * profile (`null`: no price; a `costUsd` budget then refuses the control).
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialInput {
  readonly trialId: string
  readonly price?: ModelPrice | null | undefined
  /**
   * Its pipelines stored ended (succeeded or failed) by earlier runs, whose spend is in the
   * usage the ledger recorded (since 0.11.0; default 0): on a resume, the mean cost of an ended
   * pipeline starts from `recorded usage / endedBefore` (module docs).
   */
  readonly endedBefore?: number | undefined
}

/**
 * What {@link control} reads of the study: its trials in suite order, the per-trial and total
 * budgets, the stop conditions (objectives are not used here).
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyControlInput {
  readonly trials: ReadonlyArray<TrialInput>
  readonly budget: { readonly perTrial: BudgetFigures; readonly total: BudgetFigures }
  readonly stop: ReadonlyArray<StopCondition>
}

/**
 * Options of {@link control}:
 *
 * - `trialConcurrency`: trials running at once (the window; default 3): a trial holds its place
 *   from its start until every pipeline it submitted has ended (not only until it submitted
 *   its last one), so a stop decided on an ended trial's settlement is known before the next
 *   trial starts;
 * - `trialSucceeded(id)`: whether an ended trial succeeded (the study store's settlement);
 *   required by `successfulTrials`;
 * - `trialMetric(id, metric)`: a trial's metric as stored (the member-scoped run metric, else
 *   the mean over its pipelines), asked once when the trial ends (and once for each `settled`
 *   trial); given, it is the only value `metricThreshold` compares (`null`: the trial has
 *   none); without it, the values its tasks reported in this run are used, once it ended;
 * - `signals`: Ctrl-C (and SIGTERM, SIGHUP) is a manual stop for the life of the scope: the
 *   first with the `manual` condition's `running` (default drain), the next stops the run
 *   (cancel). Run the suite with `handleSignals: false` then (the runner's own claim would
 *   take the signals otherwise);
 * - `pollMs`: how often (Clock ms) the ledger is polled for a stop request and usage is
 *   written (default 1000);
 * - `settled`: trials settled by an earlier run (trial id → whether it succeeded), which this
 *   run need not start again: they count as ended (`allTrialsTerminal`) and, when they
 *   succeeded, toward `successfulTrials`. The conditions are evaluated once at the start, so a
 *   condition these already meet fires before any trial starts.
 *
 * @since 0.6.0
 * @category models
 */
export interface ControlOptions {
  readonly trialConcurrency?: number | undefined
  readonly trialSucceeded?: ((trialId: string) => Effect.Effect<boolean, StoreUnavailable>) | undefined
  readonly trialMetric?: ((trialId: string, metric: string) => Effect.Effect<number | null, StoreUnavailable>) | undefined
  readonly signals?: boolean | undefined
  readonly pollMs?: number | undefined
  readonly settled?: ReadonlyMap<string, boolean> | undefined
}

/**
 * What one trial's leases feed, by lease id: `acquired` once per lease granted, with the
 * pipeline holding it when known (the start gate counts the call at once), `reported` for each of its reports (the first report writes the
 * call, and every report its tokens and cost, to the ledger before it returns).
 *
 * @since 0.6.0
 * @category models
 */
export interface UsageMeter {
  readonly acquired: (leaseId: string, pipelineId?: string | undefined) => Effect.Effect<void>
  readonly reported: (leaseId: string, report: LeaseReport) => Effect.Effect<void>
}

/**
 * A study's control for one run (see the module docs).
 *
 * - `window`: for `SuiteRunOptions.window`;
 * - `meter(id)`: the meter of a trial (the window meters the trials' pools by itself);
 * - `fired`: the stop condition that fired, if any;
 * - `trialUsage`: every trial's usage (recorded before this run + this run);
 * - `exhausted`: the trials whose budget was reached, with the first figure reached;
 * - `exhaustedNotes` (since 0.11.0): for the same trials, why in words with the figures
 *   (`is spent: $0.0010 used of $0.0010`, `has no room for another pipeline: ...`);
 * - `requestStop(running, reason)`: a manual stop from code;
 * - `reportMetric(id, name, value)`: a trial's metric (e.g. an evaluator's member-scoped
 *   metric), for `metricThreshold`;
 * - `finish`: the run is over: closes the time of the trials still active, evaluates the
 *   conditions once more and writes the usage (also done when the scope closes).
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyControlHandle {
  readonly window: MemberWindow
  readonly meter: (trialId: string) => UsageMeter
  readonly fired: Effect.Effect<StopFired | null>
  readonly trialUsage: Effect.Effect<ReadonlyMap<string, TrialUsage>>
  readonly exhausted: Effect.Effect<ReadonlyMap<string, BudgetFigure>>
  readonly exhaustedNotes: Effect.Effect<ReadonlyMap<string, string>>
  readonly requestStop: (running: StopRunning, reason: string) => Effect.Effect<void>
  readonly reportMetric: (trialId: string, name: string, value: number) => Effect.Effect<void>
  readonly finish: Effect.Effect<void, StoreUnavailable>
}

// ---------------------------------------------------------------------------------------------
// Pure helpers
// ---------------------------------------------------------------------------------------------

/**
 * No usage.
 *
 * @since 0.6.0
 * @category constants
 */
export const emptyUsage: TrialUsage = Object.freeze({ calls: 0, tokens: 0, costUsd: 0, timeMs: 0 })

/**
 * The sum of two usages, figure by figure.
 *
 * @since 0.6.0
 * @category helpers
 */
export const addUsage = (a: TrialUsage, b: TrialUsage): TrialUsage => {
  const unpriced = (a.unpriced ?? 0) + (b.unpriced ?? 0)
  return {
    calls: a.calls + b.calls,
    tokens: a.tokens + b.tokens,
    costUsd: roundUsd(a.costUsd + b.costUsd),
    timeMs: a.timeMs + b.timeMs,
    ...(unpriced > 0 ? { unpriced } : {})
  }
}

/**
 * Whether `value op threshold` holds (`==` and `!=` compare numbers exactly).
 *
 * @since 0.6.0
 * @category helpers
 */
export const compare = (value: number, op: ComparisonOp, threshold: number): boolean => {
  switch (op) {
    case ">":
      return value > threshold
    case ">=":
      return value >= threshold
    case "<":
      return value < threshold
    case "<=":
      return value <= threshold
    case "==":
      return value === threshold
    case "!=":
      return value !== threshold
  }
}

const num = (u: Readonly<Record<string, number>> | undefined, key: string): number => {
  const v = u?.[key]
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? v : 0
}

/**
 * The tokens and cost (US dollars) of one lease report's usage with a model price (see the
 * module docs): tokens = `tokens`, else `promptTokens + completionTokens`; cost = the report's
 * priced `costUsd` when it carries one, else from the split when given, else all tokens at the
 * higher price; `null` price: cost 0 and `unpriced` 1 when the report carried tokens (the
 * call's cost is unknown, not nothing: see {@link TrialUsage}), else `unpriced` 0.
 *
 * @since 0.6.0
 * @category helpers
 */
export const usageOfReport = (
  report: LeaseReport,
  price: ModelPrice | null
): { readonly tokens: number; readonly costUsd: number; readonly unpriced: number } => {
  const u = report.usage
  const prompt = num(u, "promptTokens")
  const completion = num(u, "completionTokens")
  const tokens = num(u, "tokens") || prompt + completion
  // a report the run priced (`Pricing`, what the attempt records) counts as priced
  if (typeof report.costUsd === "number" && Number.isFinite(report.costUsd) && report.costUsd >= 0) {
    return { tokens, costUsd: report.costUsd, unpriced: 0 }
  }
  if (price === null || tokens === 0) return { tokens, costUsd: 0, unpriced: tokens > 0 ? 1 : 0 }
  const costUsd = prompt + completion > 0
    ? (prompt * price.promptPer1k + completion * price.completionPer1k) / 1000
    : (tokens * Math.max(price.promptPer1k, price.completionPer1k)) / 1000
  return { tokens, costUsd, unpriced: 0 }
}

/**
 * Whether a lease report says its call never reached the provider: it failed with an error of
 * class `connection` (a refused or reset connection, a name that does not resolve) and carries
 * no tokens. Such a lease is not a call (docs/llm.md: "A connection that never reached the
 * provider is not a call"), as the store's accounting and the export count it (fix16x: a trial
 * counted it, so its `calls` exceeded the sum of its pipelines' in `assay export`).
 *
 * @param report the lease's report
 * @returns `true` when the report is of a call that was never sent
 * @since 0.13.0
 * @category helpers
 */
export const neverReachedProvider = (report: LeaseReport): boolean =>
  report.error !== undefined && report.error !== null && usageOfReport(report, null).tokens === 0 &&
  classify(report.error) === "connection"

/**
 * The price of a trial from its variant's resolved values: the `price` of the first value
 * that is a model profile object carrying one (`{ promptPer1k, completionPer1k }`, numbers
 * ≥ 0), `null` when none does.
 *
 * @param values variable name → resolved value (a model variable's value is its profile)
 * @since 0.6.0
 * @category helpers
 */
export const priceOf = (values: Readonly<Record<string, unknown>>): ModelPrice | null => {
  for (const v of Object.values(values)) {
    if (v === null || typeof v !== "object" || Array.isArray(v)) continue
    const price = (v as { readonly price?: unknown }).price
    if (price === null || typeof price !== "object") continue
    const { completionPer1k, promptPer1k } = price as Record<string, unknown>
    if (
      typeof promptPer1k === "number" && typeof completionPer1k === "number" && promptPer1k >= 0 &&
      completionPer1k >= 0
    ) return { promptPer1k, completionPer1k }
  }
  return null
}

/**
 * The first figure of `usage` that reached its limit in `budget` (`usage >= limit`), if any.
 * Dollars are sums of binary fractions (0.1 + 0.2 is 0.30000000000000004): `costUsd` counts as
 * reached within a relative 1e-9 of its limit, so that spending exactly the budget in several
 * reports reaches it.
 *
 * @since 0.6.0
 * @category helpers
 */
export const reached = (usage: TrialUsage, budget: BudgetFigures): BudgetFigure | undefined =>
  FIGURES.find((f) => {
    const limit = budget[f]
    if (limit === undefined) return false
    return f === "costUsd" ? usage.costUsd >= limit - 1e-9 * Math.max(1, limit) : usage[f] >= limit
  })

/**
 * The epoch ms of a deadline's `at` (ISO 8601 or epoch ms), `undefined` when not a date.
 *
 * @since 0.6.0
 * @category helpers
 */
export const deadlineOf = (at: string | number): number | undefined => {
  const ms = typeof at === "number" ? at : Date.parse(at)
  return Number.isFinite(ms) ? ms : undefined
}

// ---------------------------------------------------------------------------------------------
// The in-memory ledger
// ---------------------------------------------------------------------------------------------

/**
 * The in-memory {@link TrialLedger} (tests, and runs without a study store), with what a test
 * needs: `request(stop)` files a manual stop request (as `assay study stop` does), `stops`
 * the recorded stops.
 *
 * @since 0.6.0
 * @category models
 */
export interface MemoryLedger extends TrialLedger {
  readonly request: (stop: StopFired | null) => Effect.Effect<void>
  readonly stops: Effect.Effect<ReadonlyArray<StopFired>>
}

/**
 * Builds an in-memory ledger, optionally with recorded usage.
 *
 * @param initial trial id → usage recorded before
 * @since 0.6.0
 * @category constructors
 */
export const memoryLedger = (initial: Readonly<Record<string, TrialUsage>> = {}): Effect.Effect<MemoryLedger> =>
  Effect.sync(() => {
    const usage = new Map(Object.entries(initial))
    const stops: Array<StopFired> = []
    let requested: StopFired | null = null
    return {
      usage: (ids) =>
        Effect.sync(() => new Map(ids.flatMap((id) => usage.has(id) ? [[id, usage.get(id)!] as const] : []))),
      addUsage: (id, delta) => Effect.sync(() => void usage.set(id, addUsage(usage.get(id) ?? emptyUsage, delta))),
      recordStop: (stop) => Effect.sync(() => void stops.push(stop)),
      stopRequested: Effect.sync(() => requested),
      request: (stop) => Effect.sync(() => void (requested = stop)),
      stops: Effect.sync(() => stops.slice())
    }
  })

// ---------------------------------------------------------------------------------------------
// The control
// ---------------------------------------------------------------------------------------------

type Mutable<T> = { -readonly [K in keyof T]: T[K] }

/** One trial's state in this run. */
interface Trial {
  readonly id: string
  readonly price: ModelPrice | null
  /** Recorded before this run (the ledger). */
  readonly base: TrialUsage
  /** This run's usage, time accrued up to `activeSince`. */
  readonly live: Mutable<TrialUsage>
  /** Not yet written to the ledger. */
  delta: Mutable<TrialUsage>
  /** Leases acquired whose call is not in the ledger yet (none of their reports came). */
  readonly openLeases: Set<string>
  phase: "waiting" | "active" | "ended" | "refused"
  activeSince: number | null
  /** Its source submits nothing more. */
  submittedAll: boolean
  /** Specs submitted and not yet done with. */
  outstanding: number
  exhausted: BudgetFigure | null
  /** Why it is exhausted, with the figures (see `exhaustedNotes`). */
  note: string | null
  /** Completed (with the reason) when its running pipelines must be interrupted. */
  readonly cancel: Deferred.Deferred<string>
  /** Its time budget ran out (`cancel` completed). */
  timeUp: boolean
  /** `trialSucceeded` said yes. */
  succeeded: boolean
  /** Settled by an earlier run (`settled`): its success is known. */
  fromEarlierRun: boolean
  /** When it ended in this run, until the ledger has it (`markTrial`). */
  endMark: number | null
  /** Ended and not yet settled by `trialSucceeded` / `trialMetric`. */
  unsettled: boolean
  /** Metrics: the trial's own (member scope, or reported through the handle). */
  readonly metrics: Map<string, number>
  /** Metrics as the caller's `trialMetric` gave them when the trial ended. */
  readonly stored: Map<string, number>
  /** Pipeline-scope metrics its tasks reported: name → pipeline id → value. */
  readonly perPipeline: Map<string, Map<string, number>>
  /** Pipelines the start gate started in this run that have not ended. */
  inFlight: number
  /** Leases acquired → the pipeline holding them (when the holder said), until it ends. */
  readonly leasePipeline: Map<string, string>
  /** Pipelines started in this run and not ended that acquired a lease → their leases. */
  readonly pipelineLeases: Map<string, Array<string>>
  /** Pipelines started in this run and not ended that reported → what they reported so far. */
  readonly pipelineSpend: Map<string, { tokens: number; costUsd: number }>
  /** Pipelines ended: stored before this run (`endedBefore`) and started and ended in this run. */
  ended: number
  /** What the pipelines that ended in this run reported (plus reports no pipeline claimed). */
  readonly endedSpend: { tokens: number; costUsd: number }
  /** Stored ended before this run (their spend is in `base`). */
  readonly endedBefore: number
  /**
   * Pipelines ended in this run whose usage is still to be read from the store (a runner that
   * meters nothing: the cluster submitter without budgets, `Runner.RunHooks.accounting`).
   */
  readonly unaccounted: Array<PipelineId>
}

const refuse = (path: string, message: string): ConfigError =>
  new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/** A count: a whole number ≥ 0, else 0. */
const wholeOrZero = (n: number | undefined): number => n !== undefined && Number.isInteger(n) && n > 0 ? n : 0

/**
 * Dollars in words for a budget's reason, as every study view says them (money.ts
 * `formatStudyUsd`: 3 significant digits, `$0.00102 used of $0.00100`).
 */
const usd = (v: number): string => formatStudyUsd(v)

const zero = (): Mutable<TrialUsage> => ({ calls: 0, tokens: 0, costUsd: 0, timeMs: 0 })

/**
 * The budget figures `usage` went past, one phrase each (`cost $0.0009 of $0.0005, 84% over`;
 * with the digits it takes for the two to differ: `cost $0.00042 of $0.00040, 5% over`;
 * `costUsd` within a relative 1e-9 of its limit is not past it); empty when none. A trial's
 * usage against `budget.perTrial` (`Study.overshootOf`), the study's against `budget.total`
 * (the report's Run section, issue 16 N1).
 *
 * @param usage the usage (a trial's, or the study's sum)
 * @param limits the budget figures
 * @returns the phrases
 * @since 0.12.0
 * @category budgets
 */
export const overshoot = (usage: TrialUsage, limits: BudgetFigures): ReadonlyArray<string> =>
  FIGURES.flatMap((f) => {
    const limit = limits[f]
    const used = usage[f]
    if (limit === undefined || !(used > limit + (f === "costUsd" ? 1e-9 * Math.max(1, limit) : 0))) return []
    const pct = limit > 0 ? `, ${Math.round(((used - limit) / limit) * 100)}% over` : ""
    const [u, l] = distinctFigures(f, used, limit)
    return [`${figureWord(f)} ${u} of ${l}${pct}`]
  })

/**
 * Two figures (used, limit) shown with enough digits to differ when they do (tester16c F9):
 * dollars with as many significant digits as it takes from 3 up to 12 (money.ts
 * `formatStudyUsd`: `$0.0004200 of $0.0004000` only when `$0.000420 of $0.000400` would not
 * differ), a time in milliseconds when its seconds read the same; otherwise {@link figureValue}.
 * Also the report's budget line (`cost $0.000220 (highest trial $0.000238, 108%)`, tester16d F4).
 *
 * @param f the figure
 * @param used the amount used
 * @param limit the limit
 * @returns `[used, limit]` as shown
 * @since 0.12.0
 * @category formatting
 */
export const distinctFigures = (f: BudgetFigure, used: number, limit: number): readonly [string, string] => {
  const plain = [figureValue(f, used), figureValue(f, limit)] as const
  if (plain[0] !== plain[1]) return plain
  if (f === "timeMs") return [`${Math.round(used)} ms`, `${Math.round(limit)} ms`]
  if (f !== "costUsd") return plain
  for (let d = 4; d <= 12; d++) {
    const [a, b] = [formatStudyUsd(used, d), formatStudyUsd(limit, d)]
    if (a !== b) return [a, b]
  }
  return plain
}

/**
 * The reason the runner gives a trial's pipelines it skips, and the word for a trial whose
 * budget is spent.
 *
 * @since 0.6.0
 * @category constants
 */
export const BUDGET_EXHAUSTED = "budget_exhausted"

/**
 * The checks of {@link control} without building it (nothing read or written): what a study
 * run asks before it writes any state. Fails with the same `ConfigError`s as {@link control};
 * returns each `deadline` condition's epoch ms.
 *
 * @param study the trials (suite order), budgets and stop conditions
 * @param options window size and poll period; `trialSucceeded` (only whether it is given)
 * @since 0.6.0
 * @category constructors
 */
export const validate = (
  study: StudyControlInput,
  options: ControlOptions = {}
): Effect.Effect<ReadonlyMap<StopCondition, number>, ConfigError> =>
  Effect.gen(function*() {
    const perTrial = study.budget.perTrial
    const total = study.budget.total
    const active = options.trialConcurrency ?? 3
    const pollMs = options.pollMs ?? 1000
    if (!(Number.isInteger(active) && active >= 1)) {
      return yield* refuse("run.trialConcurrency", `must be an integer >= 1, not ${active}`)
    }
    if (!(Number.isFinite(pollMs) && pollMs > 0)) return yield* refuse("pollMs", `must be a number > 0, not ${pollMs}`)
    for (const [name, figures] of [["perTrial", perTrial], ["total", total]] as const) {
      for (const f of FIGURES) {
        const v = figures[f]
        if (v !== undefined && !(typeof v === "number" && Number.isFinite(v) && v >= 0)) {
          return yield* refuse(`budget.${name}.${f}`, `must be a number >= 0, not ${v}`)
        }
      }
      if (figures.costUsd !== undefined) {
        const unpriced = study.trials.find((t) => t.price === null || t.price === undefined)
        if (unpriced !== undefined) {
          return yield* refuse(
            `budget.${name}.costUsd`,
            `a costUsd budget needs a price for every model profile (trial ${unpriced.trialId} has none)`
          )
        }
      }
    }
    const seen = new Set<string>()
    for (const [i, t] of study.trials.entries()) {
      if (seen.has(t.trialId)) return yield* refuse(`trials[${i}]`, `duplicate trial id ${t.trialId}`)
      seen.add(t.trialId)
    }
    const deadlines = new Map<StopCondition, number>()
    for (const [i, c] of study.stop.entries()) {
      if (c.when === "budget" && FIGURES.every((f) => total[f] === undefined)) {
        return yield* refuse(`stop[${i}]`, "a budget stop needs budget.total (calls, tokens, costUsd or time)")
      }
      if (c.when === "successfulTrials") {
        if (!(Number.isInteger(c.count) && c.count >= 1)) {
          return yield* refuse(`stop[${i}].count`, `must be an integer >= 1, not ${c.count}`)
        }
        if (options.trialSucceeded === undefined) {
          return yield* refuse(`stop[${i}]`, "successfulTrials needs the caller's trialSucceeded (settlement)")
        }
      }
      if (c.when === "deadline") {
        const at = deadlineOf(c.at)
        if (at === undefined) return yield* refuse(`stop[${i}].at`, `not a date: ${JSON.stringify(c.at)}`)
        deadlines.set(c, at)
      }
    }
    return deadlines
  })

/**
 * Builds the control of one run of a study (see the module docs), for the current scope: its
 * timers, its poll of the ledger, the claim on stop signals (`signals`) and the final write
 * of the usage live in it. Reads the recorded usage of every trial first.
 *
 * Fails with `ConfigError` (field path) for: duplicate trial ids (`trials[i]`), a
 * `trialConcurrency` that is not an integer ≥ 1, a budget figure that is not a number ≥ 0, a
 * `costUsd` budget with a trial without price, a `budget` stop without `budget.total`, a
 * `successfulTrials` stop without `trialSucceeded` (or a count that is not an integer ≥ 1), a
 * `deadline` whose `at` is not a date; with `StoreUnavailable` when the ledger cannot be read.
 *
 * @param study the trials (suite order), budgets and stop conditions
 * @param ledger where usage and stops are kept across runs
 * @param options window size, settlement and metric callbacks, signals, poll period
 * @returns the handle
 * @since 0.6.0
 * @category constructors
 */
export const control = (
  study: StudyControlInput,
  ledger: TrialLedger,
  options: ControlOptions = {}
): Effect.Effect<StudyControlHandle, ConfigError | StoreUnavailable, Scope.Scope> =>
  Effect.gen(function*() {
    const perTrial = study.budget.perTrial
    const total = study.budget.total
    const active = options.trialConcurrency ?? 3
    const pollMs = options.pollMs ?? 1000
    const deadlines = yield* validate(study, options)
    // a total budget is enforced even when no `budget` stop is declared (drain)
    const conditions: ReadonlyArray<StopCondition> = FIGURES.some((f) => total[f] !== undefined) &&
        !study.stop.some((c) => c.when === "budget")
      ? [...study.stop, { when: "budget", running: "drain" }]
      : study.stop
    const manual: StopCondition = study.stop.find((c) => c.when === "manual") ?? { when: "manual" }

    // ---- state ----------------------------------------------------------------------------
    const clock = yield* Effect.clock
    const now = () => clock.unsafeCurrentTimeMillis()
    const scope = yield* Effect.scope
    const recorded = yield* ledger.usage(study.trials.map((t) => t.trialId))
    const trials = new Map<string, Trial>()
    for (const t of study.trials) {
      trials.set(t.trialId, {
        id: t.trialId,
        price: t.price ?? null,
        base: recorded.get(t.trialId) ?? emptyUsage,
        live: zero(),
        delta: zero(),
        openLeases: new Set(),
        phase: "waiting",
        activeSince: null,
        submittedAll: false,
        outstanding: 0,
        exhausted: null,
        note: null,
        cancel: yield* Deferred.make<string>(),
        timeUp: false,
        succeeded: false,
        fromEarlierRun: false,
        endMark: null,
        unsettled: false,
        metrics: new Map(),
        stored: new Map(),
        perPipeline: new Map(),
        inFlight: 0,
        leasePipeline: new Map(),
        pipelineLeases: new Map(),
        pipelineSpend: new Map(),
        endedBefore: wholeOrZero(t.endedBefore),
        ended: wholeOrZero(t.endedBefore),
        endedSpend: { tokens: 0, costUsd: 0 },
        unaccounted: []
      })
    }
    for (const [id, succeeded] of options.settled ?? []) {
      const t = trials.get(id)
      if (t === undefined) continue
      t.phase = "ended"
      t.succeeded = succeeded
      t.fromEarlierRun = true
      // their stored metrics are asked once, at the first evaluation (metricThreshold)
      t.unsettled = options.trialMetric !== undefined &&
        study.stop.some((c) => c.when === "metricThreshold")
    }
    let fired: StopFired | null = null
    let stopRun: ((reason: string) => Effect.Effect<void>) | undefined = undefined
    let runStopped = false
    // evaluation requests coalesce: one pending wake is enough
    const wakes = yield* Effect.acquireRelease(Queue.sliding<void>(1), Queue.shutdown)
    const wake = (): void => void Queue.unsafeOffer(wakes, undefined)

    const accrue = (t: Trial, at: number): void => {
      if (t.activeSince !== null && at > t.activeSince) {
        const d = at - t.activeSince
        t.live.timeMs += d
        t.delta.timeMs += d
        t.activeSince = at
      }
    }
    const usageOf = (t: Trial): TrialUsage => addUsage(t.base, t.live)
    /** The calls of leases that never reported go to the ledger when their trial is done. */
    const closeLeases = (t: Trial): void => {
      t.delta.calls += t.openLeases.size
      t.openLeases.clear()
    }
    /** Checks the trial's budget now: records the first figure reached; time also cancels. */
    const checkBudget = (t: Trial, at: number): void => {
      accrue(t, at)
      const usage = usageOf(t)
      if (t.exhausted === null) {
        const f = reached(usage, perTrial)
        if (f !== undefined) {
          t.exhausted = f
          const value = (v: number) => f === "costUsd" ? usd(v) : figureValue(f, v)
          t.note = `is spent: ${value(usage[f])} used of ${value(perTrial[f]!)}`
        }
      }
      if (!t.timeUp && perTrial.timeMs !== undefined && usage.timeMs >= perTrial.timeMs) {
        t.timeUp = true
        Deferred.unsafeDone(t.cancel, Exit.succeed(BUDGET_EXHAUSTED))
      }
    }
    const perTrialProjected = perTrial.tokens !== undefined || perTrial.costUsd !== undefined
    const hasTotal = FIGURES.some((f) => total[f] !== undefined)
    // a trial runs one pipeline at a time until one ended when either budget projects
    const projected = perTrialProjected || total.tokens !== undefined || total.costUsd !== undefined
    /** The mean tokens and dollars of an ended pipeline of the trial (`undefined`: none ended yet). */
    const pipelineMean = (t: Trial): { readonly tokens: number; readonly costUsd: number } | undefined => {
      if (t.ended === 0) return undefined
      const before = t.endedBefore > 0 ? t.base : emptyUsage
      return {
        tokens: (before.tokens + t.endedSpend.tokens) / t.ended,
        costUsd: (before.costUsd + t.endedSpend.costUsd) / t.ended
      }
    }
    /**
     * The first of `tokens` / `costUsd` that the projection with `more` pipelines more at the
     * mean `m` would pass (module docs, "Pipelines' cost"), with the note saying so.
     */
    const wouldPass = (
      t: Trial,
      m: { readonly tokens: number; readonly costUsd: number },
      more: number
    ): { readonly figure: BudgetFigure; readonly note: string } | undefined => {
      const usage = usageOf(t)
      // started pipelines not ended: those that reported reserve what is left of the mean
      let reserved = { tokens: 0, costUsd: 0 }
      for (const spent of t.pipelineSpend.values()) {
        reserved = {
          tokens: reserved.tokens + Math.max(0, m.tokens - spent.tokens),
          costUsd: reserved.costUsd + Math.max(0, m.costUsd - spent.costUsd)
        }
      }
      const silent = Math.max(0, t.inFlight - t.pipelineSpend.size) + more
      for (const f of ["tokens", "costUsd"] as const) {
        const limit = perTrial[f]
        if (limit === undefined) continue
        const total = usage[f] + reserved[f] + silent * m[f]
        if (total > limit + 1e-9 * Math.max(1, limit)) {
          const mean = f === "costUsd" ? usd(m[f]) : String(Math.round(m[f]))
          return {
            figure: f,
            note: `has no room for another pipeline: ${f === "costUsd" ? usd(usage[f]) : usage[f]} used of ${
              f === "costUsd" ? usd(limit) : limit
            }; the next is estimated at ${mean}, the mean of ${t.ended} ended pipeline${t.ended === 1 ? "" : "s"}` +
              (t.inFlight > 0 ? ` (${t.inFlight} still running)` : "")
          }
        }
      }
      return undefined
    }
    // ---- the study's total (module docs, "The study's total") ----------------------------
    const totalProjected = total.tokens !== undefined || total.costUsd !== undefined
    /** Why the total refused a pipeline (the first refusal; the `budget` stop then fires). */
    let totalRefusal: string | null = null
    const studyUsage = (at: number): TrialUsage => {
      let sum = emptyUsage
      for (const x of trials.values()) {
        accrue(x, at)
        sum = addUsage(sum, usageOf(x))
      }
      return sum
    }
    /** The mean tokens and dollars of an ended pipeline over every trial (`undefined`: none ended). */
    const studyMean = (): { readonly tokens: number; readonly costUsd: number } | undefined => {
      let n = 0
      let tokens = 0
      let costUsd = 0
      for (const x of trials.values()) {
        if (x.ended === 0) continue
        const m = pipelineMean(x)!
        n += x.ended
        tokens += m.tokens * x.ended
        costUsd += m.costUsd * x.ended
      }
      return n === 0 ? undefined : { tokens: tokens / n, costUsd: costUsd / n }
    }
    /** The first total figure the study's usage reached, with the note saying the figures. */
    const totalReached = (at: number): { readonly figure: BudgetFigure; readonly note: string } | undefined => {
      const usage = studyUsage(at)
      const f = reached(usage, total)
      if (f === undefined) return undefined
      const value = (v: number) => f === "costUsd" ? usd(v) : figureValue(f, v)
      return { figure: f, note: `the study's total ${figureWord(f)} budget is spent: ${value(usage[f])} used of ${value(total[f]!)}` }
    }
    /** Pipelines of the study submitted and not done with (every trial). */
    const studyOutstanding = (): number => {
      let n = 0
      for (const x of trials.values()) n += x.outstanding
      return n
    }
    /**
     * The first total figure `t`'s next `more` pipelines would pass: a figure reached, or (tokens,
     * dollars) the study's usage plus what every trial's running and queued pipelines will still
     * cost at their trial's mean (the study's mean before one of the trial ended) plus `more`
     * pipelines at `t`'s mean; with the note saying so.
     */
    const totalWouldPass = (
      t: Trial,
      more: number,
      at: number,
      reserve = true
    ): { readonly figure: BudgetFigure; readonly note: string } | undefined => {
      const spent = totalReached(at)
      if (spent !== undefined) return spent
      if (!totalProjected) return undefined
      const usage = studyUsage(at)
      const all = studyMean()
      const mine = pipelineMean(t) ?? all
      if (mine === undefined) return undefined
      let reserved = { tokens: 0, costUsd: 0 }
      for (const x of reserve ? trials.values() : []) {
        const m = pipelineMean(x) ?? all!
        let spentSeen = 0
        for (const spent of x.pipelineSpend.values()) {
          spentSeen++
          reserved = {
            tokens: reserved.tokens + Math.max(0, m.tokens - spent.tokens),
            costUsd: reserved.costUsd + Math.max(0, m.costUsd - spent.costUsd)
          }
        }
        const waiting = Math.max(0, x.inFlight - spentSeen) + Math.max(0, x.outstanding - x.inFlight)
        reserved = { tokens: reserved.tokens + waiting * m.tokens, costUsd: reserved.costUsd + waiting * m.costUsd }
      }
      for (const g of ["tokens", "costUsd"] as const) {
        const limit = total[g]
        if (limit === undefined) continue
        if (usage[g] + reserved[g] + more * mine[g] > limit + 1e-9 * Math.max(1, limit)) {
          const show = (v: number) => g === "costUsd" ? usd(v) : String(Math.round(v))
          return {
            figure: g,
            note: `the study's total ${figureWord(g)} budget has no room for another pipeline: ${show(usage[g])} used of ${
              show(limit)
            }; the next is estimated at ${show(mine[g])}`
          }
        }
      }
      return undefined
    }
    /** The total refused `t` for good: it is stopped, and the `budget` stop fires. */
    const refuseByTotal = (t: Trial, pass: { readonly figure: BudgetFigure; readonly note: string }): void => {
      t.exhausted = pass.figure
      t.note = pass.note
      if (totalRefusal === null) totalRefusal = pass.note
      wake()
    }
    /** What the trial's next submission gets (module docs, "Pipelines' cost"). */
    const perTrialAdmission = (t: Trial): Suite.Admission => {
      if (!projected) return "admit"
      const m = pipelineMean(t)
      // before a pipeline ended: one at a time
      if (m === undefined) return t.outstanding > 0 ? "wait" : "admit"
      if (!perTrialProjected) return "admit"
      const queued = Math.max(0, t.outstanding - t.inFlight)
      const pass = wouldPass(t, m, queued + 1)
      if (pass === undefined) return "admit"
      if (t.outstanding > 0) return "wait"
      t.exhausted = pass.figure
      t.note = pass.note
      return "refuse"
    }
    const admission = (t: Trial, at: number): Suite.Admission => {
      checkBudget(t, at)
      if (t.exhausted !== null) return "refuse"
      const own = perTrialAdmission(t)
      if (own !== "admit" || !hasTotal) return own
      // the study's total: not now while any pipeline of the study is still to end
      const pass = totalWouldPass(t, 1, at)
      if (pass === undefined) return "admit"
      if (totalReached(at) === undefined && studyOutstanding() > 0) return "wait"
      refuseByTotal(t, pass)
      return "refuse"
    }
    /** The start gate: a figure reached, or nothing running and this pipeline does not fit. */
    const startable = (t: Trial, at: number): boolean => {
      checkBudget(t, at)
      if (t.exhausted !== null) return false
      if (hasTotal) {
        // the total: reached, or nothing of the study running and this pipeline does not fit
        let running = 0
        for (const x of trials.values()) running += x.inFlight
        const pass = running > 0 ? totalReached(at) : totalWouldPass(t, 1, at, false)
        if (pass !== undefined) {
          refuseByTotal(t, pass)
          return false
        }
      }
      if (!perTrialProjected || t.inFlight > 0) return true
      const m = pipelineMean(t)
      const pass = m === undefined ? undefined : wouldPass(t, m, 1)
      if (pass === undefined) return true
      t.exhausted = pass.figure
      t.note = pass.note
      return false
    }
    const maybeEnd = (t: Trial): void => {
      if (t.phase !== "active" || !t.submittedAll || t.outstanding > 0) return
      accrue(t, now())
      t.activeSince = null
      closeLeases(t)
      t.phase = "ended"
      t.endMark = now()
      t.unsettled = true
      wake()
    }

    const fire = (condition: StopCondition, reason: string, running?: StopRunning, signal?: string) =>
      Effect.suspend(() => {
        if (fired !== null) return Effect.void
        const stop: StopFired = {
          condition,
          reason,
          at: now(),
          running: running ?? condition.running ?? "drain",
          ...(signal === undefined ? {} : { signal })
        }
        fired = stop
        return Effect.zipRight(
          ledger.recordStop(stop).pipe(
            Effect.catchAll((e) => Effect.logWarning(`could not record the study's stop: ${e.message}`))
          ),
          stop.running === "cancel" ? cancelRun(`study_stop:${condition.when}`) : Effect.void
        )
      })
    const cancelRun = (reason: string) =>
      Effect.suspend(() => {
        runStopped = true
        return stopRun === undefined ? Effect.void : stopRun(reason)
      })

    // ---- evaluation -----------------------------------------------------------------------
    const meanOf = (values: Map<string, number> | undefined): number | null => {
      if (values === undefined || values.size === 0) return null
      let sum = 0
      for (const v of values.values()) sum += v
      return sum / values.size
    }
    /**
     * An ended trial's metric: as the store has it (`trialMetric`) when the caller gives one,
     * else what its tasks reported (member scope, else the mean over its pipelines); a trial
     * still running has none (a running average is not the trial's result).
     */
    const metricOf = (t: Trial, name: string): number | null => {
      if (t.phase !== "ended" || t.unsettled) return null
      if (options.trialMetric !== undefined) return t.stored.get(name) ?? null
      return t.metrics.get(name) ?? meanOf(t.perPipeline.get(name))
    }
    const metricNames = conditions.flatMap((c) => c.when === "metricThreshold" ? [c.metric] : [])
    const countsSuccess = conditions.some((c) => c.when === "successfulTrials")

    /** An ended trial's settlement (success, stored metrics), asked once per end. */
    const settle = (t: Trial) =>
      Effect.gen(function*() {
        if (countsSuccess && !t.succeeded && !t.fromEarlierRun) t.succeeded = yield* options.trialSucceeded!(t.id)
        if (options.trialMetric !== undefined) {
          for (const name of metricNames) {
            const v = yield* options.trialMetric(t.id, name)
            if (v !== null && Number.isFinite(v)) t.stored.set(name, v)
          }
        }
        t.unsettled = false
      }).pipe(Effect.catchAll((e) =>
        Effect.sync(() => {
          t.unsettled = true // asked again at the next evaluation
        }).pipe(Effect.zipLeft(Effect.logWarning(`could not settle trial ${t.id}: ${e.message}`)))
      ))

    const holds = (c: StopCondition, at: number): string | undefined => {
      switch (c.when) {
        case "allTrialsTerminal": {
          const all = [...trials.values()]
          return all.length > 0 && all.every((t) => t.phase === "ended") ? `all ${all.length} trials ended` : undefined
        }
        case "successfulTrials": {
          let n = 0
          for (const t of trials.values()) if (t.succeeded) n++
          return n >= c.count ? `${n} trial${n === 1 ? "" : "s"} succeeded (the condition asks for ${c.count})` : undefined
        }
        case "metricThreshold": {
          for (const t of trials.values()) {
            const v = metricOf(t, c.metric)
            if (v !== null && compare(v, c.op, c.value)) return `trial ${t.id}: ${c.metric} ${v} ${c.op} ${c.value}`
          }
          return undefined
        }
        case "budget":
          // the figures reached, else the total's first refusal of a pipeline
          return totalReached(at)?.note ?? totalRefusal ?? undefined
        case "deadline": {
          const d = deadlines.get(c)!
          return at >= d ? `the deadline ${new Date(d).toISOString()} passed` : undefined
        }
        case "manual":
          return undefined // a request, polled (see `poll`)
      }
    }

    /**
     * The store's reader of the run's usage, when the runner meters nothing itself (the cluster
     * submitter, for a study without budgets: `Runner.RunHooks.accounting`).
     */
    let accountingReader: Runner.RunAccountingReader | undefined = undefined
    /**
     * Reads the usage of the pipelines each trial ended in this run from the store, once per
     * trial when it ended (`all`: every trial with ended pipelines, at the run's end): one
     * aggregate read per trial, added to its usage and written to the ledger at the next flush.
     * A read that fails is tried again at the next evaluation.
     */
    const account = (all: boolean) =>
      Effect.gen(function*() {
        const read = accountingReader
        if (read === undefined) return
        for (const t of trials.values()) {
          if (t.unaccounted.length === 0 || (!all && t.phase !== "ended")) continue
          const ids = t.unaccounted.splice(0)
          const f = yield* Effect.option(read(ids).pipe(
            Effect.tapError((e) =>
              Effect.zipRight(
                Effect.sync(() => void t.unaccounted.push(...ids)),
                Effect.logWarning(`could not read the usage of trial ${t.id}: ${e.message}`)
              )
            )
          ))
          if (Option.isNone(f)) continue
          const { calls, costUsd, tokensIn, tokensOut, unpriced } = f.value
          const delta: TrialUsage = {
            calls,
            tokens: tokensIn + tokensOut,
            costUsd: roundUsd(costUsd),
            timeMs: 0,
            ...(unpriced > 0 ? { unpriced } : {})
          }
          t.live.calls += delta.calls
          t.live.tokens += delta.tokens
          t.live.costUsd = roundUsd(t.live.costUsd + delta.costUsd)
          if (unpriced > 0) t.live.unpriced = (t.live.unpriced ?? 0) + unpriced
          t.delta = { ...addUsage(t.delta, delta) }
        }
      })

    // one evaluation at a time: the evaluator fiber, the window's start check and the end may
    // all ask at once, and an ended trial is settled (store reads) once
    const evaluating = yield* Effect.makeSemaphore(1)
    const evaluate = evaluating.withPermits(1)(Effect.gen(function*() {
      yield* account(false)
      const at = now()
      for (const t of trials.values()) if (t.phase === "active") checkBudget(t, at)
      const check = Effect.suspend(() => {
        if (fired !== null) return Effect.void
        for (const c of conditions) {
          const reason = holds(c, at)
          if (reason !== undefined) return fire(c, reason)
        }
        return Effect.void
      })
      // each settlement may be what a condition waits for: checked after each one, so one
      // slow settlement does not hold back a stop another one already decided
      // (once a condition fired, nothing here needs a settlement any more)
      for (const t of trials.values()) {
        if (fired !== null) return
        if (!t.unsettled) continue
        yield* settle(t)
        yield* check
      }
      yield* check
    }))
    // conditions that hold only once an ended trial is settled (its success, its stored metric)
    const needsSettlement = conditions.some((c) => c.when === "successfulTrials" || c.when === "metricThreshold")

    const flush = Effect.gen(function*() {
      const at = now()
      for (const t of trials.values()) {
        if (t.endMark !== null && ledger.markTrial !== undefined) {
          yield* ledger.markTrial(t.id, "ended", t.endMark)
          t.endMark = null
        }
        accrue(t, at)
        const d = t.delta
        if (d.calls === 0 && d.tokens === 0 && d.costUsd === 0 && d.timeMs === 0) continue
        t.delta = zero()
        yield* ledger.addUsage(t.id, d, at).pipe(Effect.tapError(() =>
          Effect.sync(() => {
            // kept for the next write
            t.delta = { ...addUsage(t.delta, d) }
          })
        ))
      }
    })

    const poll = Effect.gen(function*() {
      if (fired === null) {
        const request = yield* ledger.stopRequested
        if (request !== null) yield* fire(manual, request.reason, request.running)
      }
      yield* flush
    }).pipe(Effect.catchAll((e) => Effect.logWarning(`study control: ${e.message}`)))

    // the evaluator, the poll, and the deadline timers live in the scope (a first evaluation
    // now: what earlier runs settled may already meet a condition)
    yield* evaluate
    yield* Effect.forkIn(Effect.forever(Effect.zipRight(Queue.take(wakes), evaluate)), scope)
    yield* Effect.forkIn(
      Effect.repeat(Effect.zipRight(poll, Effect.sync(wake)), Schedule.spaced(Duration.millis(pollMs))).pipe(
        Effect.delay(Duration.millis(pollMs))
      ),
      scope
    )
    for (const at of deadlines.values()) {
      yield* Effect.forkIn(Effect.delay(Effect.sync(wake), Duration.millis(Math.max(0, at - now()))), scope)
    }
    if (options.signals === true) {
      const signals = yield* Signals.Signals
      yield* Scope.extend(
        signals.handle((signal) =>
          fired === null ? fire(manual, `${signal} received`, undefined, signal) : cancelRun(`study_stop:${signal.toLowerCase()}`)
        ),
        scope
      )
    }
    const finish = Effect.gen(function*() {
      const at = now()
      for (const t of trials.values()) {
        accrue(t, at)
        t.activeSince = null
        closeLeases(t)
      }
      yield* account(true)
      yield* evaluate
      yield* flush
    })
    yield* Effect.addFinalizer(() =>
      finish.pipe(Effect.catchAll((e) => Effect.logWarning(`could not write the trials' usage: ${e.message}`)))
    )

    // ---- the window and the meters --------------------------------------------------------
    const meter = (id: string): UsageMeter => {
      const t = trials.get(id)
      if (t === undefined) return { acquired: () => Effect.void, reported: () => Effect.void }
      const watchTotal = conditions.some((c) => c.when === "budget")
      return {
        // the start gate counts the call now; the ledger when the call reports (below) or when
        // its trial ends (a lease that never reports)
        acquired: (leaseId, pipelineId) =>
          Effect.sync(() => {
            t.live.calls++
            t.openLeases.add(leaseId)
            if (pipelineId !== undefined && pipelineId !== "") {
              t.leasePipeline.set(leaseId, pipelineId)
              const leases = t.pipelineLeases.get(pipelineId)
              if (leases === undefined) t.pipelineLeases.set(pipelineId, [leaseId])
              else leases.push(leaseId)
            }
            if (watchTotal) wake()
          }),
        reported: (leaseId, report) =>
          Effect.suspend(() => {
            // a lease whose connection never reached the provider is no call: the start gate
            // counted it at acquire and gives it back; the ledger never counts it
            const open = t.openLeases.delete(leaseId)
            const unsent = open && neverReachedProvider(report)
            if (unsent) t.live.calls = Math.max(0, t.live.calls - 1)
            const calls = open && !unsent ? 1 : 0
            const { costUsd, tokens, unpriced } = usageOfReport(report, t.price)
            if (calls === 0 && tokens === 0 && costUsd === 0) return Effect.void
            t.live.tokens += tokens
            t.live.costUsd = roundUsd(t.live.costUsd + costUsd)
            // the pipeline's spend so far (the mean of ended pipelines counts it at its end); a
            // report no running pipeline claims counts as spent by an ended one (a higher mean)
            const pid = t.leasePipeline.get(leaseId)
            if (pid === undefined) {
              t.endedSpend.tokens += tokens
              t.endedSpend.costUsd += costUsd
            } else {
              let spent = t.pipelineSpend.get(pid)
              if (spent === undefined) t.pipelineSpend.set(pid, spent = { tokens: 0, costUsd: 0 })
              spent.tokens += tokens
              spent.costUsd += costUsd
            }
            if (unpriced > 0) t.live.unpriced = (t.live.unpriced ?? 0) + unpriced
            if (watchTotal) wake()
            // written through, before the task goes on (so before its checkpoint): a call the
            // store's attempts record is never missing from the ledger after a kill
            const delta: TrialUsage = { calls, tokens, costUsd, timeMs: 0, ...(unpriced > 0 ? { unpriced } : {}) }
            return ledger.addUsage(t.id, delta, now()).pipe(
              Effect.catchAll(() =>
                Effect.sync(() => {
                  t.delta = { ...addUsage(t.delta, delta) } // kept for the next write
                })
              )
            )
          })
      }
    }
    const leaseMeter = (id: string): Pools.LeaseMeter => {
      const m = meter(id)
      return {
        acquired: (lease: Lease, holder?: Pools.Holder) => m.acquired(lease.id, holder?.pipelineId),
        reported: (lease: Lease, report) => m.reported(lease.id, report)
      }
    }
    /**
     * A settled pipeline's stored attempts as the leases' meter would have counted them (the
     * cluster submitter tells them: the leases were taken on the runners): one call per lease
     * an attempt held (none for a cache hit, nor for a lease whose connection never reached the
     * provider), its tokens, its cost as the run priced it, else at the trial's price. Told
     * before the pipeline's end (`pipelineEnded` counts its spend in the trial's mean).
     */
    const attemptsMeter = (id: string, pipelineId: string, attempts: ReadonlyArray<AttemptRecord>) =>
      Effect.suspend(() => {
        const t = trials.get(id)
        if (t === undefined) return Effect.void
        const m = meter(id)
        return Effect.forEach(attempts, (a, k) => {
          if (a.outcome === "cache_hit") return Effect.void
          const usage = a.tokensIn === null && a.tokensOut === null
            ? undefined
            : { promptTokens: a.tokensIn ?? 0, completionTokens: a.tokensOut ?? 0 }
          // a connection that never reached the provider is no call (`neverReachedProvider`)
          if (a.errorClass === "connection" && usage === undefined) return Effect.void
          const leases = a.leaseIds.map((l) => `${l}#${a.attemptId}`)
          const report: LeaseReport = {
            ...(usage === undefined ? {} : { usage }),
            ...(a.costUsd === null ? {} : { costUsd: a.costUsd })
          }
          // the attempt's usage is reported on its first lease (the others count their call)
          const first = leases[0] ?? `attempt#${a.attemptId}:${k}`
          return Effect.zipRight(
            Effect.forEach(leases, (l) => m.acquired(l, pipelineId), { discard: true }),
            Effect.zipRight(
              Effect.forEach(leases.slice(1), (l) => m.reported(l, {}), { discard: true }),
              leases.length === 0 && usage === undefined ? Effect.void : m.reported(first, report)
            )
          )
        }, { discard: true })
      })
    const onTrial = (id: string, f: (t: Trial) => void) =>
      Effect.sync(() => {
        const t = trials.get(id)
        if (t !== undefined) f(t)
      })

    const window: MemberWindow = {
      active,
      // a trial starts only once every ended trial has been settled and the conditions that
      // depend on it evaluated: the settlement reads the store, and trials that end faster than
      // it would otherwise all start before `successfulTrials` or `metricThreshold` can fire
      mayStart: (id) =>
        Effect.suspend(() => {
          const decide = () => fired === null || !trials.has(id)
          if (fired !== null || !needsSettlement) return Effect.sync(decide)
          for (const t of trials.values()) {
            if (t.phase === "ended" && t.unsettled) return Effect.map(evaluate, decide)
          }
          return Effect.sync(decide)
        }),
      mayAdmit: (id) =>
        Effect.sync(() => {
          const t = trials.get(id)
          if (t === undefined) return true
          checkBudget(t, now())
          return t.exhausted === null
        }),
      // the runner's start gate: a figure reached, or nothing running and this pipeline does not fit
      mayStartPipeline: (id) =>
        Effect.sync(() => {
          const t = trials.get(id)
          if (t === undefined) return true
          if (!startable(t, now())) return false
          t.inFlight++
          return true
        }),
      // what the trial's next submission gets: now, not now, or never (module docs)
      admit: (id) =>
        Effect.sync(() => {
          const t = trials.get(id)
          return t === undefined ? "admit" : admission(t, now())
        }),
      observe: {
        attach: (stop) =>
          Effect.suspend(() => {
            stopRun = stop
            // a cancel that fired before the run started stops it now
            return runStopped ? stop(`study_stop:${fired?.condition.when ?? "manual"}`) : Effect.void
          }),
        memberStarted: (id) =>
          Effect.suspend(() => {
            const t = trials.get(id)
            if (t === undefined) return Effect.void
            t.phase = "active"
            t.activeSince = now()
            checkBudget(t, t.activeSince)
            const mark = ledger.markTrial === undefined ? Effect.void : ledger.markTrial(id, "running", t.activeSince).pipe(
              Effect.catchAll((e) => Effect.logWarning(`could not mark trial ${id} running: ${e.message}`))
            )
            const limit = perTrial.timeMs
            if (limit === undefined) return mark
            // wakes the evaluator when the trial's time budget runs out (it cancels then)
            const left = Math.max(0, limit - usageOf(t).timeMs)
            return Effect.zipRight(mark, Effect.asVoid(Effect.forkIn(Effect.delay(Effect.sync(wake), Duration.millis(left)), scope)))
          }),
        memberSubmitted: (id) =>
          onTrial(id, (t) => {
            t.submittedAll = true
            if (t.phase === "waiting") t.phase = "refused"
            else maybeEnd(t)
          }),
        pools: (id, view) => trials.has(id) ? Pools.metered(view, leaseMeter(id)) : view,
        metric: (id, name, value, pipelineId) =>
          onTrial(id, (t) => {
            if (typeof value !== "number" || !Number.isFinite(value)) return
            if (pipelineId === null) t.metrics.set(name, value)
            else {
              let m = t.perPipeline.get(name)
              if (m === undefined) t.perPipeline.set(name, m = new Map())
              m.set(pipelineId, value)
            }
            wake()
          }),
        specSubmitted: (id) => {
          const t = trials.get(id)
          if (t !== undefined) t.outstanding++
        },
        pipelineSettled: (id) => {
          const t = trials.get(id)
          if (t === undefined) return
          t.outstanding--
          maybeEnd(t)
        },
        pipelineEnded: (id, pipelineId) => {
          const t = trials.get(id)
          if (t === undefined) return
          t.inFlight = Math.max(0, t.inFlight - 1)
          t.ended++
          if (pipelineId === undefined) return
          if (accountingReader !== undefined) t.unaccounted.push(pipelineId as PipelineId)
          const spent = t.pipelineSpend.get(pipelineId)
          if (spent !== undefined) {
            t.endedSpend.tokens += spent.tokens
            t.endedSpend.costUsd += spent.costUsd
            t.pipelineSpend.delete(pipelineId)
          }
          for (const lease of t.pipelineLeases.get(pipelineId) ?? []) t.leasePipeline.delete(lease)
          t.pipelineLeases.delete(pipelineId)
        },
        cancelled: (id) => {
          const t = trials.get(id)
          // a pipeline admitted once the time is up is left to the start gate (skipped, pending)
          return t === undefined || perTrial.timeMs === undefined || t.timeUp ? undefined : Deferred.await(t.cancel)
        },
        // a stop that left a trial of the run not started or unfinished closes the run
        // `interrupted`, named as a cancel names it (`study_stop:manual`, `study_stop:sigint`): a
        // drain ends the suite's source early, and the run would otherwise read `completed`
        // the cluster's meter (budgets only): the stored attempts of each settled pipeline
        // and without budgets, a reader of the run's usage in the store, read once per trial
        // when it ended (`account`): the report's calls, tokens and cost, as the embedded meter
        ...(FIGURES.some((f) => perTrial[f] !== undefined || total[f] !== undefined)
          ? { pipelineAttempts: attemptsMeter }
          : {
            accounting: (read: Runner.RunAccountingReader) => {
              accountingReader = read
            }
          }),
        stoppedEarly: () => {
          if (fired === null || fired.condition.when === "allTrialsTerminal") return undefined
          for (const t of trials.values()) {
            if (t.phase !== "ended") return `study_stop:${fired.signal?.toLowerCase() ?? fired.condition.when}`
          }
          return undefined
        }
      }
    }

    return {
      window,
      meter,
      fired: Effect.sync(() => fired),
      trialUsage: Effect.sync(() => {
        const at = now()
        const out = new Map<string, TrialUsage>()
        for (const t of trials.values()) {
          accrue(t, at)
          out.set(t.id, usageOf(t))
        }
        return out
      }),
      exhausted: Effect.sync(() => {
        const out = new Map<string, BudgetFigure>()
        for (const t of trials.values()) if (t.exhausted !== null) out.set(t.id, t.exhausted)
        return out
      }),
      exhaustedNotes: Effect.sync(() => {
        const out = new Map<string, string>()
        for (const t of trials.values()) if (t.exhausted !== null && t.note !== null) out.set(t.id, t.note)
        return out
      }),
      requestStop: (running, reason) => fire(manual, reason, running),
      reportMetric: (id, name, value) =>
        onTrial(id, (t) => {
          if (!Number.isFinite(value)) return
          t.metrics.set(name, value)
          wake()
        }),
      finish
    }
  })
