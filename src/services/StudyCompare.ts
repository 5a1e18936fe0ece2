/**
 * The comparison of a study's variants: what `assay study report` and `assay study evidence`
 * print. {@link compare} reads a study's root (its study tables and its trials' pipelines, see
 * `StudyMetrics`) and returns a JSON-serializable {@link StudyComparison}; {@link renderText}
 * and {@link renderMarkdown} print it with the sections Design, Run, Compare, Evidence and
 * Conclusion; {@link evidence} lists the trials and pipelines behind one number.
 *
 * **The rules.**
 *
 * - Only `succeeded` trials of the protocol version are compared; a trial breaking a hard
 *   constraint (on its values as computed now) is excluded too and listed among the variant's
 *   breaches. Failed, cancelled, over-budget, incomplete and never-started trials are listed
 *   with their reason and never counted.
 * - **Per variant and metric**: the value of each repeat (`perRepeat`, `null` for a repeat
 *   that is not compared), their mean and median, and an interval: for a case-level metric a
 *   two-stage percentile bootstrap of the grand mean over cases and repeats (Efron &
 *   Tibshirani 1993); for a trial-level metric the same bootstrap over the repeats' values;
 *   `null` with fewer than two values.
 * - **Against the baseline** (every other variant), per metric: the paired difference
 *   (candidate − baseline) with its interval (paired bootstrap over the cases both have, or
 *   over the repeats both have for a trial-level metric), the cases each side wins, and for a
 *   binary case-level metric (every value 0 or 1) the exact McNemar test with the case as its
 *   unit: per case, each side's outcome averaged over its repeats; a case is discordant when
 *   the averages differ (candidate better, baseline better: the paired wins); the two-sided
 *   exact binomial sign test on those cases, which is McNemar's exact test with one repeat
 *   (McNemar 1947; Fagerland, Lydersen & Laake 2013; the cluster-level sign test, Agresti 2013,
 *   §10.1). Repeats are never counted as independent pairs. Per-case values equal up to
 *   `Statistics.nearlyEqual` (relative 1e-9) are ties, and a difference that small is 0. Below the sample minimum (`analysis.minPairedCases` paired cases, default 30, for a
 *   case-level claim; `analysis.minRepeats` repeats, default 3, for a repeat-level one) the
 *   comparison is marked "insufficient sample", its McNemar test is not given (`null`) and the
 *   report makes no significance statement. A line never says "significant" when its paired
 *   interval includes 0: when the interval and the test disagree, it says so and claims no
 *   difference.
 * - **Shared draws**: per metric, the variants that have every case (every repeat for a
 *   trial-level metric) are bootstrapped together (`Statistics.sharedBootstrap`: one case draw
 *   per resample for all of them, the paired differences read from the same resamples, seeded
 *   `seed + the metric's position`); a variant missing a case gets its own `bootstrapMean` /
 *   `pairedBootstrap`. Reading is done once (`StudyMetrics.read`, columns per trial), and each
 *   variant's cases are gathered once per metric, so the report grows linearly with the study.
 * - **Pareto candidates** over the objectives, among the variants with at least one compared
 *   trial and a value for every objective: the strict front (point estimates) and the
 *   uncertainty-aware front (a variant is dominated only when another is better beyond the
 *   intervals on one objective and worse beyond them on none: a lead within noise, either way,
 *   is a tie), so the two fronts can differ both ways (a variant ahead only within noise on one
 *   objective and beaten beyond noise on another is on the strict front, not the other); per
 *   dominated variant the deciding comparisons (`pareto.deciding`); a weighted ranking
 *   (`weight` of each objective, min-max normalized) only as a secondary view.
 * - **Conclusion**: with no compared trial, no candidate and no best; with exactly one, the
 *   "current highest-scoring candidate"; else the uncertainty-aware front (the variants the
 *   intervals cannot tell apart), worded "best for the declared objectives and constraints" —
 *   never a bare "best" — and second, when it differs, the strict front "on point estimates". A variant that lost repeats to a hard constraint gets a limitation saying its
 *   value is over the remaining repeats (survivorship).
 *
 * @since 0.6.0
 */
import { Effect, Option } from "effect"
import { roundUsd } from "../domain/Pricing.js"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import { closest } from "../domain/internal/suggest.js"
import * as Words from "../domain/internal/words.js"
import { canonicalJsonUnsafe, type Json } from "../domain/Json.js"
import * as DomainStudy from "../domain/Study.js"
import { formatCost, formatStudyUsd, STUDY_COST } from "./internal/money.js"
import * as Statistics from "../domain/Statistics.js"
import { StudyCatalog, type StudyRecordStatus, type TrialRecord } from "./StudyCatalog.js"
import * as StudyControl from "./StudyControl.js"
import * as StudyMetrics from "./StudyMetrics.js"
import type { SuiteCatalog } from "./SuiteCatalog.js"

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

/**
 * An objective as compared: its metric, direction, target (direction `target`), weight
 * (default 1) and hard constraint.
 *
 * @since 0.6.0
 * @category models
 */
export interface CompareObjective {
  readonly metric: string
  readonly direction: DomainStudy.Direction
  readonly target?: number | undefined
  readonly weight?: number | undefined
  readonly hardConstraint?: { readonly op: DomainStudy.Op; readonly value: number } | null | undefined
}

/**
 * What {@link compare} needs of a study (`config/Study.ts`'s `LoadedStudy` has it all): its
 * id, question, objectives, declared metrics, analysis settings, baseline variant id and
 * variants (id and assignment), variables (name and type), repeats and budget.
 *
 * @since 0.6.0
 * @category models
 */
export interface CompareInput {
  readonly id: string
  readonly question: string
  readonly hypothesis?: string | null | undefined
  readonly type?: string | undefined
  readonly objectives: ReadonlyArray<CompareObjective>
  readonly metrics?: ReadonlyArray<DomainStudy.MetricDecl> | undefined
  readonly analysis?: Partial<typeof DomainStudy.DEFAULT_ANALYSIS> | undefined
  readonly baseline: { readonly id: string }
  readonly variants: ReadonlyArray<{ readonly id: string; readonly assignment: Readonly<Record<string, Json>> }>
  readonly variables?: ReadonlyArray<{ readonly name: string; readonly type: string }> | undefined
  readonly repeats?: number | undefined
  readonly budget?: {
    readonly perTrial: { readonly calls?: number | undefined; readonly tokens?: number | undefined; readonly costUsd?: number | undefined; readonly timeMs?: number | undefined }
    readonly total: { readonly calls?: number | undefined; readonly tokens?: number | undefined; readonly costUsd?: number | undefined; readonly timeMs?: number | undefined }
  } | undefined
}

/**
 * Options of {@link compare}: the protocol `version` (default the current one), and overrides
 * of the study's analysis: `seed`, `level`, `resamples`, `minPairedCases`, `minRepeats`;
 * `evidenceCases`: worst and best cases kept per variant and metric (default 5).
 *
 * @since 0.6.0
 * @category models
 */
export interface CompareOptions {
  readonly version?: number | undefined
  readonly seed?: number | undefined
  readonly level?: number | undefined
  readonly resamples?: number | undefined
  readonly minPairedCases?: number | undefined
  readonly minRepeats?: number | undefined
  readonly evidenceCases?: number | undefined
}

/**
 * A metric on which every case of a variant has the same value (`value`, over `cases` cases):
 * no case is worse or better than another, so the evidence lists no worst or best case.
 *
 * @since 0.10.0
 * @category models
 */
export interface EvidenceTie {
  /**
   * The value every case has; for a `target` objective, `null` when the cases differ in value
   * but sit at the same distance from the target (0 and 1 around a target of 0.5).
   */
  readonly value: number | null
  readonly cases: number
  /** A `target` objective (since 0.12.0): its target and the distance every case shares. */
  readonly target?: number | undefined
  readonly distance?: number | undefined
}

/**
 * Every case alike in words: `all 40 cases have the value 1: a tie, no worst or best cases`;
 * for a `target` objective the tie is on the distance to the target: `all 48 cases are 0.5
 * from the target 0.5 (values 0 and 1): a tie, no worst or best cases`.
 *
 * @param tie the shared value (or distance) and the number of cases
 * @returns the phrase
 * @since 0.10.0
 * @category rendering
 */
export const tieText = (tie: EvidenceTie): string => {
  const all = `all ${tie.cases.toLocaleString("en-US")} cases`
  const end = ": a tie, no worst or best cases"
  if (tie.target === undefined || tie.distance === undefined) return `${all} have the value ${fmt(tie.value)}${end}`
  const values = tie.value === null ? `values ${fmt(tie.target - tie.distance)} and ${fmt(tie.target + tie.distance)}` : `value ${fmt(tie.value)}`
  return `${all} are ${fmt(tie.distance)} from the target ${fmt(tie.target)} (${values})${end}`
}

/**
 * A case's value in an evidence list, with its distance to the target for a `target` objective
 * (`0 (0.5 from the target)`): what ranks it.
 *
 * @param c the case
 * @returns the phrase
 * @since 0.12.0
 * @category rendering
 */
export const caseValueText = (c: EvidenceCase): string => `${fmt(c.value)}${c.distance === undefined ? "" : ` (${fmt(c.distance)} from the target)`}`

/**
 * One case in an evidence list: its key, the pipelines it came from (every repeat) and its
 * value (the mean over those repeats).
 *
 * @since 0.6.0
 * @category models
 */
export interface EvidenceCase {
  readonly caseKey: string
  readonly pipelineIds: ReadonlyArray<string>
  readonly value: number
  /** A `target` objective (since 0.12.0): the value's distance to the target, what ranks the cases (smaller is better). */
  readonly distance?: number | undefined
  /**
   * `study evidence` of a variant other than the baseline (since 0.16.0, fix16ac F2): the
   * baseline's value of the same case (the mean over its compared repeats), the `difference`
   * variant − baseline (0 when the two are equal up to `Statistics.nearlyEqual`) and the
   * baseline's pipelines of that case: the pairing the paired difference is made of. Absent
   * when the baseline has no value for the case.
   */
  readonly baseline?: {
    readonly variantId: string
    readonly value: number
    readonly difference: number
    readonly pipelineIds: ReadonlyArray<string>
    /**
     * When the two variants do not have the same compared repeats (a confirmation ran more of
     * one; since 0.16.0, tester16g F2): the variant's value of the case over the paired repeats
     * only (see {@link Evidence.pairing}), of which `difference` is made; the case's listed
     * `value` stays the variant's mean over all its repeats. Absent when the repeats are the same.
     */
    readonly variantValue?: number | undefined
  } | undefined
}

/**
 * A variant's value of one metric: the value of each repeat it has (`null`: not compared; a
 * repeat only another variant has, e.g. another's confirmation, is not listed), their
 * mean and median (`null` when none), the interval (`null` below two values) and how the
 * numbers were aggregated, in words.
 *
 * @since 0.6.0
 * @category models
 */
export interface MetricValue {
  readonly perRepeat: ReadonlyArray<number | null>
  readonly mean: number | null
  readonly median: number | null
  readonly interval: Statistics.Interval | null
  readonly aggregation: string
  /**
   * `tokensIn` / `tokensOut` only, when some of the compared trials' attempts had their tokens
   * estimated (the server gave no usage): how many (since 0.9.0; the `aggregation` says so too).
   */
  readonly estimatedAttempts?: number | undefined
  /**
   * `costUsd` only, when some compared trials had calls with tokens but no price: how many
   * calls (those trials have no value; since 0.9.0; the `aggregation` says so too).
   */
  readonly unpricedCalls?: number | undefined
  /**
   * `calls`, `tokens`, `tokensIn`, `tokensOut`, `costUsd` and `latencyP95Ms`, when some of the
   * compared trials' calls were served from the call cache: how many (since 0.9.0). The usage
   * metrics count them at the figures their cache entries recorded when the call was made;
   * `latencyP95Ms` leaves out the pipelines they served (the `aggregation` says so too).
   */
  readonly cacheHits?: number | undefined
  /**
   * `costUsd` only, in a study with evaluator tasks (`judge`) whose settlements recorded their
   * cost: the mean over the compared repeats of the part of the trial's cost the judge's calls
   * made (US dollars; `costUsd` includes it: it is what the trial cost; since 0.13.0, tester16b N7).
   */
  readonly judgeCostUsd?: number | undefined
}

/** The built-in metrics that say how many of the compared calls the call cache served. */
const CACHE_COUNTED: ReadonlySet<string> = new Set(["calls", "tokens", "tokensIn", "tokensOut", "costUsd", "latencyP95Ms"])

/**
 * A paired difference that has no interval: its `estimate` (candidate − baseline) with
 * `lower` and `upper` `null`, e.g. over one paired repeat, where the spread between repeats
 * cannot be estimated; `method` says why (`"one paired repeat: no interval"`).
 *
 * @since 0.11.0
 * @category models
 */
export interface PointDifference {
  readonly estimate: number
  readonly lower: null
  readonly upper: null
  readonly level: number
  readonly method: string
  readonly resamples: null
  readonly seed: null
}

/**
 * A paired comparison against the baseline: `Statistics.PairedDifference` whose `difference`
 * may be a {@link PointDifference} (no interval: `lower`/`upper` `null`) when the sample
 * cannot give one (since 0.11.0; before, such a difference had `lower = upper = estimate`).
 *
 * @since 0.11.0
 * @category models
 */
export interface PairedComparison extends Omit<Statistics.PairedDifference, "difference"> {
  readonly difference: Statistics.Interval | PointDifference
}

/**
 * Whether a paired difference has an interval (a {@link PointDifference} has none).
 *
 * @param d the difference
 * @returns true when `lower` and `upper` are numbers
 * @since 0.11.0
 * @category models
 */
export const hasInterval = (d: Statistics.Interval | PointDifference): d is Statistics.Interval => d.lower !== null && d.upper !== null

/**
 * A variant against the baseline on one metric: the paired difference (candidate − baseline;
 * `null` when nothing pairs), the exact McNemar test (binary case-level metrics with a
 * sufficient sample; else `null`) and its Holm-adjusted p-value (`adjustedPValue`, adjusted
 * over all the report's McNemar tests: many variants against one baseline), the sufficiency of the sample, and `claim`
 * (`case`: paired over cases, needs `minPairedCases`, and for a trial-level statistic of
 * per-pipeline values such as `latencyP95Ms` also `minRepeats`, its interval counting the
 * spread between repeats; `repeat`: a value only the trial has, needs `minRepeats`).
 *
 * @since 0.6.0
 * @category models
 */
export interface VersusBaseline {
  readonly paired: PairedComparison | null
  readonly mcnemar: Statistics.McNemar | null
  /** The McNemar p-value after Holm's adjustment over every McNemar test of the report (`null` without a test). */
  readonly adjustedPValue: number | null
  readonly sufficiency: Statistics.Sufficiency
  readonly claim: "case" | "repeat"
  /**
   * The objective's target when its direction is `target` (since 0.12.0, issue 16 N4): the
   * wins then count the cases (or repeats) where the candidate is higher / lower, not closer to
   * the target (a case's 0 or 1 says nothing about a mean's distance to 0.9); the variant
   * values and the Pareto front judge the distance.
   */
  readonly target?: number | undefined
}

/**
 * How many dominators of a variant get a {@link DecidingComparison} (the first ones of
 * `pareto.dominatedBy.uncertain`, which lists them all): 3.
 *
 * @since 0.16.0
 * @category constants
 */
export const DECIDING_MAX = 3

/**
 * One objective of a {@link DecidingComparison}: whether the dominator is better than the
 * dominated variant beyond noise on it (`beyondNoise`; `false`: within noise, a tie, whichever
 * point estimate is ahead), and what the front judged it on:
 *
 * - `basis: "paired"`: `difference`, the paired difference dominator − dominated in the
 *   metric's unit with its interval widened for the front's pairwise comparisons (Bonferroni:
 *   `level` is the widened level, `method` says by how much); `null` when the pair has no
 *   interval (e.g. one paired repeat of a trial-level metric: never beyond noise);
 * - `basis: "intervals"`: no paired difference to read (a `target` objective, or a variant
 *   without every case): `intervals`, the two variants' values with their widened intervals
 *   (`by` the dominator's, `variant` the dominated one's); beyond noise when they do not
 *   overlap (for a target, on the distance to it).
 *
 * @since 0.16.0
 * @category models
 */
export interface DecidingObjective {
  readonly metric: string
  readonly beyondNoise: boolean
  readonly basis: "paired" | "intervals"
  readonly difference?: Statistics.Interval | null | undefined
  readonly intervals?: {
    readonly by: { readonly estimate: number; readonly lower: number; readonly upper: number }
    readonly variant: { readonly estimate: number; readonly lower: number; readonly upper: number }
  } | undefined
}

/**
 * Why a variant is off the uncertainty-aware Pareto front: the dominator `by` and, per
 * objective in the study's order, the comparison the front made ({@link DecidingObjective}).
 * The dominator is better beyond noise on at least one objective and worse beyond noise on
 * none (a lead of the dominated variant within noise is a tie).
 *
 * @since 0.16.0
 * @category models
 */
export interface DecidingComparison {
  readonly by: string
  readonly objectives: ReadonlyArray<DecidingObjective>
}

/**
 * One variant in a {@link StudyComparison}.
 *
 * @since 0.6.0
 * @category models
 */
export interface VariantComparison {
  readonly variantId: string
  readonly assignment: Readonly<Record<string, Json>>
  readonly isBaseline: boolean
  readonly trials: ReadonlyArray<{
    readonly trialId: string
    readonly repeat: number
    readonly status: string
    readonly reason: string | null
    readonly compared: boolean
    /**
     * What the call cache did for the trial's pipelines (since 0.12.0), counted from its
     * attempt rows as `study run`'s per-trial line and `StoreStats.cache` count them: `hits`
     * (answers served from the cache) and `misses` (calls its cached tasks made). Absent when
     * the cache did nothing for it.
     */
    readonly cache?: { readonly hits: number; readonly misses: number } | undefined
  }>
  readonly succeeded: number
  readonly failed: number
  readonly values: Readonly<Record<string, MetricValue>>
  readonly vsBaseline: Readonly<Record<string, VersusBaseline>>
  readonly breaches: ReadonlyArray<string>
  /**
   * Why a variant with no compared trial is excluded by a hard constraint, per metric (since
   * 0.15.0; fix16aa): present when the mean over its judged repeats breaks the constraint and
   * its interval either includes the bound (`zeroWidth` false: `v01 excluded: accuracy 0.6875 <
   * 0.7000, but its 95% interval [0.5625, 0.8125] includes 0.7000: its exclusion is not beyond
   * noise`) or has zero width (`zeroWidth` true: every repeat, or every case, equal: no spread,
   * so the value is what it is: `v02 excluded: its tokens 4800 breaks tokens <= 4500 (its 95%
   * interval [4800, 4800] … has zero width)`). The same sentences as the conclusion's limitations.
   */
  readonly exclusions?: ReadonlyArray<{ readonly metric: string; readonly zeroWidth: boolean; readonly text: string }> | undefined
  /**
   * Pareto membership: on the strict front (point estimates), on the uncertainty-aware front
   * (either without the other: a lead within noise is a tie there); `dominatedBy` (since
   * 0.10.0): the variants that dominate it, `strict` on the point estimates and `uncertain`
   * beyond the (widened) intervals; empty on that front.
   */
  readonly pareto: {
    readonly strict: boolean
    readonly uncertain: boolean
    readonly dominatedBy: { readonly strict: ReadonlyArray<string>; readonly uncertain: ReadonlyArray<string> }
    /**
     * Off the uncertainty-aware front only (since 0.16.0, fix16ac): why, per dominator (the
     * first {@link DECIDING_MAX} of `dominatedBy.uncertain`), objective by objective.
     */
    readonly deciding?: ReadonlyArray<DecidingComparison> | undefined
    /**
     * Since 0.16.0 (tester16g F1): the variants (this one among them, in the study's order) that
     * beat one another in a circle beyond noise (a dominates b, b dominates … dominates a). The
     * uncertainty-aware front sets such a cycle aside: none of them removes another, so a member
     * may be on that front only because of it. Absent when the variant is in no cycle.
     */
    readonly cycle?: ReadonlyArray<string> | undefined
  }
  /** Weighted-ranking place (1 = highest score); equal scores share a place (1, 1, 3). */
  readonly rank: number | null
  readonly score: number | null
  readonly evidence: Readonly<
    Record<string, {
      readonly trials: ReadonlyArray<string>
      readonly worstCases: ReadonlyArray<EvidenceCase>
      readonly bestCases: ReadonlyArray<EvidenceCase>
      /** Every case has the same value (at least 2 cases; since 0.10.0): no case is worst or best, both lists are empty. */
      readonly tie?: EvidenceTie | undefined
    }>
  >
}

/**
 * The comparison of a study version (JSON-serializable; what `assay study report --format
 * json` prints). See the module docs for the rules.
 *
 * - `studyId`, `version`, `question`, `hypothesis`, `baseline` (a variant id), `seed`, `level`,
 *   `resamples`, `minPairedCases`, `minRepeats`: the analysis;
 * - `objectives`, `metrics` (every metric compared: name, unit, direction, level, kind, source);
 * - `run`: the study's status and reason, the stop that fired, trials by status, usage totals
 *   and budgets;
 * - `variants`: see {@link VariantComparison};
 * - `weightedRanking`: the secondary view, best score first;
 * - `conclusion`: the status, the `wording` (`"best for the declared objectives and
 *   constraints"`, `"current highest-scoring candidate"`, `"the only variant meeting the
 *   constraints"` (one variant with compared trials: nothing compared), or `"no candidate"`), the
 *   `candidates` (with several compared variants at the minimums: the uncertainty-aware
 *   Pareto front, the variants the intervals cannot tell apart; below them, and with one
 *   compared trial: the top of the weighted ranking, ties listed, and `notRuledOut` the
 *   uncertainty-aware front), `pointEstimateFront` (the strict front on point
 *   estimates; not always a subset of the candidates: a variant ahead only within noise is on
 *   it; empty with fewer than two compared trials), a
 *   `summary` sentence that leads with the candidates, and the `limitations` (among them, per
 *   variant, repeats dropped for breaking a hard constraint: its value is over the rest).
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyComparison {
  readonly studyId: string
  readonly version: number
  readonly question: string
  readonly hypothesis: string | null
  readonly baseline: string
  readonly seed: number
  readonly level: number
  readonly resamples: number
  readonly minPairedCases: number
  readonly minRepeats: number
  readonly variables: ReadonlyArray<{ readonly name: string; readonly type: string }>
  readonly objectives: ReadonlyArray<{
    readonly metric: string
    readonly direction: DomainStudy.Direction
    readonly target?: number
    readonly weight: number
    readonly hardConstraint?: { readonly op: string; readonly value: number }
  }>
  readonly metrics: ReadonlyArray<{
    readonly name: string
    readonly unit: string
    readonly direction: DomainStudy.Direction
    readonly level: "case" | "trial"
    readonly kind: "declared" | "builtin" | "reported"
    readonly source: string
  }>
  readonly run: {
    /** The study's status; `null` when this comparison reads a protocol version that is not the current one (see `currentVersion`). */
    readonly status: StudyRecordStatus | null
    /**
     * With `status: null` only: the study's current protocol version, whose status the study
     * records (this version's trials were settled under it; since 0.13.0, tester16b N9).
     */
    readonly currentVersion?: number | undefined
    readonly stopReason: string | null
    readonly trialsByStatus: Readonly<Record<string, number>>
    /** `unpriced`: calls with tokens but no price (`costUsd` leaves them out; since 0.9.0). */
    /**
     * `judgeCostUsd`: the part of `costUsd` the evaluator tasks' (`judge`) calls made, summed over
     * the trials whose settlement recorded it; absent when none did (since 0.13.0, tester16b N7).
     */
    readonly usage: {
      readonly calls: number
      readonly tokens: number
      readonly costUsd: number
      readonly timeMs: number
      readonly unpriced?: number | undefined
      readonly judgeCostUsd?: number | undefined
    }
    readonly budget: Json
    /**
     * The study's usage past its total budget, one phrase per figure (`cost $0.0090 of
     * $0.0050, 80% over`; empty when within it; since 0.12.0, issue 16 N1).
     */
    readonly overTotal: ReadonlyArray<string>
    readonly notStarted: ReadonlyArray<string>
    /**
     * The call cache's hits and misses over the version's trials (since 0.12.0; each trial's
     * are in `variants[].trials[].cache`). Absent when the cache did nothing for any of them.
     */
    readonly cache?: { readonly hits: number; readonly misses: number } | undefined
    /**
     * The highest usage of one trial per figure (`calls`, `tokens`, `costUsd`, `timeMs`; each
     * figure's own maximum, possibly of different trials), what a per-trial budget is read
     * against (since 0.12.0, tester16c F12).
     */
    readonly highestTrial?: { readonly calls: number; readonly tokens: number; readonly costUsd: number; readonly timeMs: number } | undefined
  }
  readonly variants: ReadonlyArray<VariantComparison>
  readonly weightedRanking: ReadonlyArray<{ readonly variantId: string; readonly score: number }>
  readonly conclusion: {
    readonly status: StudyRecordStatus | null
    readonly wording: string
    readonly candidates: ReadonlyArray<string>
    readonly pointEstimateFront: ReadonlyArray<string>
    /**
     * Below the declared minimums only (wording "current highest-scoring candidate"): the
     * variants the sample cannot rule out (the uncertainty-aware front), of which `candidates`
     * is the top of the weighted ranking (since 0.11.0).
     */
    readonly notRuledOut?: ReadonlyArray<string> | undefined
    /**
     * Since 0.16.0 (tester16g F1): the candidates that beat one another in a circle beyond
     * noise, cycle by cycle (see `variants[].pareto.cycle`): candidates only because their
     * cycle is set aside, never called best. Absent when no candidate is in a cycle.
     */
    readonly cycles?: ReadonlyArray<ReadonlyArray<string>> | undefined
    readonly summary: string
    readonly limitations: ReadonlyArray<string>
  }
}

/**
 * The conclusion's wordings.
 *
 * @since 0.6.0
 * @category constants
 */
export const WORDING = {
  best: "best for the declared objectives and constraints",
  single: "current highest-scoring candidate",
  /** One variant left after the hard constraints (and failures): nothing was compared (since 0.12.0). */
  only: "the only variant meeting the constraints",
  /** Every candidate is in a dominance cycle beyond noise: none is shown best (since 0.16.0). */
  inseparable: "cannot be separated: they beat one another in a circle beyond noise",
  none: "no candidate"
} as const

/** The comparison that broke a hard constraint, in words: `>=` broken reads `<`. */
const BROKEN_OP: Readonly<Record<string, string>> = { ">=": "<", ">": "<=", "<=": ">", "<": ">=", "==": "!=", "!=": "==" }

// ---------------------------------------------------------------------------------------------
// Compare
// ---------------------------------------------------------------------------------------------

const OPS: Readonly<Record<DomainStudy.Op, (a: number, b: number) => boolean>> = {
  ">": (a, b) => a > b,
  ">=": (a, b) => a >= b,
  "<": (a, b) => a < b,
  "<=": (a, b) => a <= b,
  "==": (a, b) => a === b,
  "!=": (a, b) => a !== b
}

const finite = (xs: ReadonlyArray<number | null>): Array<number> => xs.filter((x): x is number => x !== null && Number.isFinite(x))

/**
 * One variant's values of one metric by case: `rows[c]` the values of case number `c` (see
 * `TrialValues.caseKeys`) in repeat order (empty when the variant has none), `present` how
 * many cases have a value, and `pipelinesOf(c)` the pipelines behind case `c` (every repeat).
 */
interface CaseMatrix {
  readonly rows: ReadonlyArray<ReadonlyArray<number>>
  readonly present: number
  readonly pipelinesOf: (c: number) => Array<string>
}

const caseMatrix = (
  byRepeat: ReadonlyArray<StudyMetrics.TrialValues | null>,
  metric: string,
  caseCount: number,
  // where the per-case values are: the metric's own (default), or a usage metric's per-pipeline shares
  from: "cases" | "perPipeline" = "cases"
): CaseMatrix => {
  const casesOf = (t: StudyMetrics.TrialValues | null | undefined) => from === "cases" ? t?.cases[metric] : t?.perPipeline?.[metric]
  const rows: Array<Array<number>> = Array.from({ length: caseCount }, () => [])
  let present = 0
  for (const t of byRepeat) {
    const cs = casesOf(t)
    if (cs === undefined) continue
    for (let k = 0; k < cs.value.length; k++) {
      const row = rows[cs.caseIndex[k]!]!
      if (row.length === 0) present++
      row.push(cs.value[k]!)
    }
  }
  const pipelinesOf = (c: number): Array<string> => {
    const ids: Array<string> = []
    for (const t of byRepeat) {
      const cs = casesOf(t)
      if (cs === undefined) continue
      for (let k = 0; k < cs.value.length; k++) if (cs.caseIndex[k] === c) ids.push(t!.pipelineId(cs.pipeline[k]!))
    }
    return ids
  }
  return { rows, present, pipelinesOf }
}

/**
 * A variant's worst and best cases of a metric (`keep` of each), the cases sorted best first by
 * `order` (ties by case key), each with its mean over its repeats and its pipelines; `tie` when
 * every case has the same value (none is worst or best, and a list would pick at random). A
 * worst case is worse than the best value, a best case better than the worst value: with one
 * wrong case of 12, the worst list holds that one only (tester16d F7), never a right one.
 */
const rankedCases = (
  m: CaseMatrix,
  caseKeys: ReadonlyArray<string>,
  goal: Goal,
  keep: number
): { readonly worstCases: Array<EvidenceCase>; readonly bestCases: Array<EvidenceCase>; readonly tie?: EvidenceTie } => {
  const list: Array<{ readonly c: number; readonly value: number; readonly good: number }> = []
  for (let c = 0; c < m.rows.length; c++) {
    if (m.rows[c]!.length === 0) continue
    const value = Statistics.mean(m.rows[c]!)
    list.push({ c, value, good: goodness(goal, value) })
  }
  // best first: the higher goodness (for a target, the smaller distance to it)
  list.sort((a, b) => b.good - a.good || (caseKeys[a.c]! < caseKeys[b.c]! ? -1 : caseKeys[a.c]! > caseKeys[b.c]! ? 1 : 0))
  const evidenceCase = (x: { readonly c: number; readonly value: number; readonly good: number }): EvidenceCase => ({
    caseKey: caseKeys[x.c]!,
    pipelineIds: m.pipelinesOf(x.c),
    value: x.value,
    ...(goal.direction === "target" ? { distance: Math.abs(x.good) } : {})
  })
  // a tie on goodness: for a target, every case at the same distance (their values may differ)
  const tied = list.length > 1 && Statistics.nearlyEqual(list[0]!.good, list[list.length - 1]!.good)
  const sameValue = list.length > 0 && list.every((x) => Statistics.nearlyEqual(x.value, list[0]!.value))
  const below = tied ? [] : list.filter((x) => !Statistics.nearlyEqual(x.good, list[0]!.good))
  const above = tied ? [] : list.filter((x) => !Statistics.nearlyEqual(x.good, list[list.length - 1]!.good))
  return {
    bestCases: above.slice(0, keep).map(evidenceCase),
    worstCases: below.slice(Math.max(0, below.length - keep)).reverse().map(evidenceCase),
    ...(tied
      ? {
        tie: goal.direction === "target"
          ? { value: sameValue ? list[0]!.value : null, cases: list.length, target: goal.target, distance: Math.abs(list[0]!.good) }
          : { value: list[0]!.value, cases: list.length }
      }
      : {})
  }
}

/**
 * Two variants' compared trials kept on the repeat numbers both have (repeat r of one pairs
 * with repeat r of the other; a repeat only one side has, e.g. a confirmation, pairs with
 * nothing); `same` when both have exactly the same repeats (nothing was dropped).
 */
const onCommonRepeats = (
  a: ReadonlyArray<StudyMetrics.TrialValues | null>,
  b: ReadonlyArray<StudyMetrics.TrialValues | null>
): { readonly a: Array<StudyMetrics.TrialValues | null>; readonly b: Array<StudyMetrics.TrialValues | null>; readonly common: number; readonly same: boolean } => {
  const n = Math.max(a.length, b.length)
  const both = (r: number) => (a[r] ?? null) !== null && (b[r] ?? null) !== null
  let common = 0
  let same = true
  for (let r = 0; r < n; r++) {
    if (both(r)) common++
    else if ((a[r] ?? null) !== null || (b[r] ?? null) !== null) same = false
  }
  return {
    a: Array.from({ length: n }, (_, r) => both(r) ? a[r]! : null),
    b: Array.from({ length: n }, (_, r) => both(r) ? b[r]! : null),
    common,
    same
  }
}

/**
 * One variant's per-repeat rows of a metric over the cases `union` (`at`: case number → its
 * position), `null` where a repeat has no value for a case: the input of
 * `Statistics.bootstrapReduced`.
 */
const reducedRows = (
  byRepeat: ReadonlyArray<StudyMetrics.TrialValues | null>,
  metric: string,
  at: ReadonlyMap<number, number>,
  width: number,
  casesOf: (t: StudyMetrics.TrialValues, metric: string) => StudyMetrics.TrialCases | undefined = (t, m) => t.cases[m]
): Array<Array<number | null>> =>
  byRepeat.flatMap((t) => {
    const cs = t === null ? undefined : casesOf(t, metric)
    if (cs === undefined) return []
    const row: Array<number | null> = Array.from({ length: width }, () => null)
    for (let k = 0; k < cs.value.length; k++) {
      const x = at.get(cs.caseIndex[k]!)
      if (x !== undefined) row[x] = cs.value[k]!
    }
    return [row]
  })

/**
 * How a metric's interval is computed: `case` (one value per case: the bootstrap of the mean
 * over cases and repeats), `reduced` (a trial-level statistic of per-pipeline values, a p50,
 * p95 or sum, or `latencyP95Ms`: recomputed over resampled cases and widened by the spread
 * between the repeats, `Statistics.bootstrapReduced`; a claim needs the minimum repeats too),
 * `trial` (a value only the trial has, e.g. `calls`, `costUsd`: Student's t over the repeats).
 */
const kindOf = (d: StudyMetrics.MetricDefinition): "case" | "reduced" | "trial" =>
  d.level === "case" ? "case" : d.decl !== undefined || d.name === "latencyP95Ms" ? "reduced" : "trial"

const reducerOf = (d: StudyMetrics.MetricDefinition): Statistics.TrialReducer => {
  const r = d.decl?.reducer
  return r === "p50" || r === "sum" || r === "mean" ? r : "p95"
}

/** Wins and ties of paired (baseline, candidate) values by direction, ties up to `Statistics.nearlyEqual`. */
const winsOf = (
  pairs: ReadonlyArray<readonly [number, number]>,
  dir: { readonly direction: DomainStudy.Direction; readonly target?: number }
): { candidateWins: number; baselineWins: number; ties: number } => {
  let candidateWins = 0
  let baselineWins = 0
  let ties = 0
  const good = (x: number) => dir.direction === "maximize" ? x : dir.direction === "minimize" ? -x : -Math.abs(x - (dir.target ?? 0))
  for (const [b, c] of pairs) {
    if (Statistics.nearlyEqual(b, c)) ties++
    else if (good(c) > good(b)) candidateWins++
    else baselineWins++
  }
  return { candidateWins, baselineWins, ties }
}

/** What a case's value is judged by: higher, lower, or its distance to a target (smaller is better). */
type Goal =
  | { readonly direction: "maximize" | "minimize" }
  | { readonly direction: "target"; readonly target: number }

/**
 * The goal of a metric for ranking its cases: the objective's direction when the metric is an
 * objective (a target objective with its target), else the metric's own; a `target` with no
 * target given ranks as `maximize` (as the comparison does, `directionOf`).
 */
const goalOf = (direction: DomainStudy.Direction, objective: { readonly direction: DomainStudy.Direction; readonly target?: number } | undefined): Goal => {
  const d = objective?.direction ?? direction
  if (d === "target") return objective?.target === undefined ? { direction: "maximize" } : { direction: "target", target: objective.target }
  return { direction: d }
}

/** How good a case's value is under `goal`, higher is better (a target: minus the distance to it). */
const goodness = (goal: Goal, value: number): number =>
  // a distance of float noise (0.1 + 0.2 against a target of 0.3) is 0 (fix16ac F6)
  goal.direction === "target" ? 0 - Math.abs(Statistics.difference(value, goal.target)) : goal.direction === "maximize" ? value : -value

/**
 * Compares the variants of a study version (see the module docs). Reads the `StudyCatalog`
 * (trials, usage, the study's status) and the `SuiteCatalog`'s merged view (pipelines,
 * outputs, metrics, attempts). Fails with `ConfigError` when the study never ran in the root
 * (path `study.id`) or the version does not exist (`--protocol-version`).
 *
 * @param study the loaded study (see {@link CompareInput})
 * @param options version, analysis overrides
 * @since 0.6.0
 * @category comparing
 */
export const compare = (
  study: CompareInput,
  options: CompareOptions = {}
): Effect.Effect<StudyComparison, StoreUnavailable | ConfigError, StudyCatalog | SuiteCatalog> =>
  Effect.map(collect(study, options), (c) => c.comparison)

interface Collected {
  readonly comparison: StudyComparison
  readonly values: ReadonlyMap<string, StudyMetrics.TrialValues>
  readonly rows: ReadonlyArray<TrialRecord>
}

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

const collect = (
  study: CompareInput,
  options: CompareOptions,
  // `study evidence` of a usage metric that is no objective: its per-pipeline shares too (F2)
  evidenceMetric?: string
): Effect.Effect<Collected, StoreUnavailable | ConfigError, StudyCatalog | SuiteCatalog> =>
  Effect.gen(function*() {
    const catalog = yield* StudyCatalog
    const row = yield* catalog.study(study.id)
    if (Option.isNone(row)) return yield* configError("study.id", `study "${study.id}" has never run in this output root: nothing to report (run assay study run first)`)
    const version = options.version ?? row.value.currentVersion
    const versions = yield* catalog.versions(study.id)
    if (!versions.some((v) => v.version === version)) {
      return yield* configError("--protocol-version", `study "${study.id}" has no protocol version ${version} (${Words.noun(versions.length, "version")}: ${versions.map((v) => v.version).join(", ")})`)
    }
    const analysis = { ...DomainStudy.DEFAULT_ANALYSIS, ...(study.analysis ?? {}) }
    const seed = options.seed ?? analysis.seed
    const level = options.level ?? analysis.level
    const resamples = options.resamples ?? analysis.resamples
    const minPairedCases = options.minPairedCases ?? analysis.minPairedCases
    const minRepeats = options.minRepeats ?? analysis.minRepeats
    const keep = options.evidenceCases ?? 5
    if (!Number.isSafeInteger(seed) || seed < 0 || seed > 2 ** 31) return yield* configError("--seed", `must be an integer from 0 to 2^31, got ${seed}`)
    if (!(level > 0 && level < 1)) return yield* configError("analysis.level", `must be a number between 0 and 1, got ${level}`)
    if (!Number.isSafeInteger(resamples) || resamples < 1) return yield* configError("analysis.resamples", `must be a positive integer, got ${resamples}`)
    const rows = yield* catalog.trials(study.id, version)
    // each trial's judge share of its cost, as its settlement recorded it (tester16b N7)
    const judgeOf = new Map<string, number>()
    for (const r of rows) if (r.settled?.judgeCostUsd !== undefined) judgeOf.set(r.trialId, r.settled.judgeCostUsd)
    const judgeShareOf = (byRepeat: ReadonlyArray<StudyMetrics.TrialValues | null>): { readonly judgeCostUsd?: number } => {
      if (judgeOf.size === 0) return {}
      const xs = byRepeat.flatMap((t) => t === null || t.values["costUsd"] === undefined ? [] : [judgeOf.get(t.trialId) ?? 0])
      return xs.length === 0 ? {} : { judgeCostUsd: roundUsd(Statistics.mean(xs)) }
    }
    const defs = StudyMetrics.definitions(study.metrics ?? [], study.objectives)
    const usage = new Map(rows.map((r) => [r.trialId, r.usage]))
    // the usage objectives' per-pipeline shares: the Pareto front pairs them case by case
    const perPipeline = new Set([...study.objectives.map((o) => o.metric), ...(evidenceMetric === undefined ? [] : [evidenceMetric])].filter((m) => StudyMetrics.PER_PIPELINE_METRICS.has(m)))
    const values = yield* StudyMetrics.read({ studyId: study.id, trialIds: rows.map((r) => r.trialId), metrics: defs, usage, perPipeline })
    const objectives = study.objectives.map((o) => ({
      metric: o.metric,
      direction: o.direction,
      ...(o.target === undefined ? {} : { target: o.target }),
      weight: o.weight ?? 1,
      ...(o.hardConstraint === null || o.hardConstraint === undefined ? {} : { hardConstraint: { op: o.hardConstraint.op, value: o.hardConstraint.value } })
    }))
    const breachesOf = (v: Readonly<Record<string, number>>): Array<string> =>
      objectives.flatMap((o) => {
        const c = o.hardConstraint
        const x = v[o.metric]
        if (c === undefined || x === undefined) return []
        return OPS[c.op as DomainStudy.Op](x, c.value) ? [] : [`${o.metric} ${c.op} ${c.value} broken: ${fmt(x)}`]
      })
    const repeats = Math.max(study.repeats ?? 1, ...rows.map((r) => r.repeat))
    const variantOrder = study.variants.length > 0 ? study.variants : [...new Map(rows.map((r) => [r.variantId, { id: r.variantId, assignment: r.variant as Record<string, Json> }])).values()]
    const baselineId = study.baseline.id

    // compared trials per variant, by repeat index (0-based)
    const comparedOf = new Map<string, Array<StudyMetrics.TrialValues | null>>()
    const variantBase: Array<Omit<VariantComparison, "values" | "vsBaseline" | "pareto" | "rank" | "score" | "evidence">> = []
    for (const variant of variantOrder) {
      const trials = rows.filter((r) => r.variantId === variant.id).sort((a, b) => a.repeat - b.repeat)
      const byRepeat: Array<StudyMetrics.TrialValues | null> = Array.from({ length: repeats }, () => null)
      const breaches: Array<string> = []
      const listed = trials.map((t) => {
        const tv = values.get(t.trialId)
        let compared = t.status === "succeeded"
        if (t.status === "failed" && (t.reason ?? "").startsWith("hard constraint")) breaches.push(`${t.trialId}: ${t.reason}`)
        if (compared && tv !== undefined) {
          const broken = breachesOf(tv.values)
          if (broken.length > 0) {
            compared = false
            breaches.push(...broken.map((b) => `${t.trialId}: hard constraint ${b}`))
          }
        }
        if (compared && tv !== undefined) byRepeat[t.repeat - 1] = tv
        return {
          trialId: t.trialId,
          repeat: t.repeat,
          status: t.status,
          reason: t.reason,
          compared: compared && tv !== undefined,
          ...(tv?.cache === undefined ? {} : { cache: tv.cache })
        }
      })
      // Survivorship: dropping the repeats that broke a hard constraint and valuing the variant
      // over the rest biases it upward (a variant whose accuracy is 0.70 keeps its one lucky
      // 0.79 repeat). The constraint is also judged on the variant: the mean over every repeat
      // that has a value (succeeded, or failed only for breaking a constraint); when that mean
      // breaks it, no repeat of the variant is compared and it is never a candidate.
      for (const o of objectives) {
        const c = o.hardConstraint
        if (c === undefined) continue
        const all = trials.flatMap((t) => {
          const x = values.get(t.trialId)?.values[o.metric]
          const judged = t.status === "succeeded" || (t.status === "failed" && (t.reason ?? "").startsWith("hard constraint"))
          return judged && x !== undefined && Number.isFinite(x) ? [x] : []
        })
        if (all.length === 0) continue
        const mean = all.reduce((a, b) => a + b, 0) / all.length
        if (OPS[c.op as DomainStudy.Op](mean, c.value)) continue
        const kept = listed.filter((t) => t.compared)
        if (kept.length === 0) continue
        const survivors = kept.flatMap((t) => {
          const x = values.get(t.trialId)?.values[o.metric]
          return x === undefined ? [] : [x]
        })
        const survivorMean = survivors.length === 0 ? null : survivors.reduce((a, b) => a + b, 0) / survivors.length
        breaches.push(
          `${variant.id}: hard constraint ${o.metric} ${c.op} ${c.value} broken by the variant: mean ${fmt(mean)} over all ${Words.count(all.length, "repeat")}` +
            `${survivorMean === null ? "" : ` (the ${Words.count(kept.length, "repeat")} that passed alone read ${fmt(survivorMean)}: survivorship)`}; no repeat of it is compared`
        )
        for (const t of kept) (t as { compared: boolean }).compared = false
        for (let i = 0; i < byRepeat.length; i++) byRepeat[i] = null
      }
      comparedOf.set(variant.id, byRepeat)
      variantBase.push({
        variantId: variant.id,
        assignment: variant.assignment,
        isBaseline: variant.id === baselineId,
        trials: listed,
        succeeded: listed.filter((t) => t.compared).length,
        failed: listed.filter((t) => t.status !== "succeeded" && t.status !== "pending" && t.status !== "not_started").length,
        breaches
      })
    }

    // values, intervals, evidence. Per metric, the variants that have every case (case-level)
    // or every repeat (trial-level) are bootstrapped together with shared draws
    // (Statistics.sharedBootstrap: the comparisons against the baseline come from the same
    // resamples); any other variant gets its own bootstrapMean / pairedBootstrap.
    const caseKeys = [...values.values()][0]?.caseKeys ?? []
    const valueOf = new Map<string, Record<string, MetricValue>>()
    const evidenceOf = new Map<string, Record<string, VariantComparison["evidence"][string]>>()
    const vsOf = new Map<string, Record<string, VersusBaseline>>()
    for (const v of variantBase) {
      valueOf.set(v.variantId, {})
      evidenceOf.set(v.variantId, {})
      if (v.variantId !== baselineId) vsOf.set(v.variantId, {})
    }
    const directionOf = (d: StudyMetrics.MetricDefinition): { direction: DomainStudy.Direction; target?: number } => {
      const target = objectives.find((o) => o.metric === d.name)?.target
      if (d.direction !== "target") return { direction: d.direction }
      return target === undefined ? { direction: "maximize" } : { direction: "target", target }
    }
    const baseRepeats = comparedOf.get(baselineId) ?? []
    // the cases in a stable order (by case key), whatever order the store returned them in:
    // the bootstraps' draws index this order, so the same data and seed give the same interval
    const caseOrder = caseKeys.map((_, i) => i).sort((a, b) => caseKeys[a]! < caseKeys[b]! ? -1 : caseKeys[a]! > caseKeys[b]! ? 1 : 0)
    // per objective metric and variant, which cases it has (for the pairwise sample of the
    // Pareto front): one byte per case, not the case matrices (at 200 variants × 1,000 cases
    // those held every value of every metric in small arrays to the end of the comparison)
    const objectiveMetrics = new Set(objectives.map((o) => o.metric))
    const presentOf = new Map<string, Map<string, Uint8Array>>()
    // per objective metric, the paired difference b − a of any two variants (the Pareto front
    // compares every pair the way the report compares a variant with the baseline); undefined
    // when the pair has no paired comparison of that kind (a variant without every case)
    const pairedOf = new Map<string, (a: string, b: string) => Statistics.Interval | null | undefined>()
    let salt = 0
    defs.forEach((d, metricNo) => {
      const matrices = new Map<string, CaseMatrix>()
      for (const v of variantBase) matrices.set(v.variantId, caseMatrix(comparedOf.get(v.variantId)!, d.name, caseKeys.length))
      if (objectiveMetrics.has(d.name)) {
        presentOf.set(d.name, new Map(Array.from(matrices, ([id, m]) => [id, Uint8Array.from(m.rows, (r) => r.length > 0 ? 1 : 0)])))
      }
      const kind = kindOf(d)
      // case level: the shared bootstrap over the cases some compared variant has, among the
      // variants that have all of them
      const union: Array<number> = []
      if (kind !== "trial") {
        for (const c of caseOrder) if (variantBase.some((v) => matrices.get(v.variantId)!.rows[c]!.length > 0)) union.push(c)
      }
      const sharedIds: Array<string> = []
      const groups: Array<Array<Array<number>>> = []
      if (kind === "case") {
        for (const v of variantBase) {
          const m = matrices.get(v.variantId)!
          if (union.length === 0 || m.present !== union.length) continue
          const rows = union.map((c) => m.rows[c] as Array<number>)
          if (rows.length < 2 && rows[0]!.length < 2) continue
          sharedIds.push(v.variantId)
          groups.push(rows)
        }
      }
      const shared = groups.length === 0 ? null : Statistics.sharedBootstrap(groups, { seed: seed + metricNo, level, resamples })
      const sharedNo = new Map(sharedIds.map((id, i) => [id, i]))
      // a trial-level statistic of per-pipeline values (p50, p95, sum; latencyP95Ms): every
      // variant's value recomputed over the same resampled cases, repeat by repeat
      const reducedNo = new Map<string, number>()
      let reduced: Statistics.ReducedBootstrap | null = null
      const at = new Map(union.map((c, i) => [c, i]))
      if (kind === "reduced" && union.length > 0) {
        const vals = variantBase.map((v, i) => {
          reducedNo.set(v.variantId, i)
          return reducedRows(comparedOf.get(v.variantId)!, d.name, at, union.length)
        })
        // analysis.resamples, as every other bootstrap of the report (no cap of its own: the
        // user's setting is the one used; see docs/statistics.md, "How many resamples")
        reduced = Statistics.bootstrapReduced(vals, reducerOf(d), { seed: seed + metricNo, level, resamples })
      }

      // the per-pipeline shares of a usage objective (StudyMetrics.PER_PIPELINE_METRICS), built on
      // first use: the cases some variant has, and one shared bootstrap of every variant's sum
      let pipeShared: { readonly at: ReadonlyMap<number, number>; readonly width: number; readonly boot: Statistics.ReducedBootstrap; readonly no: ReadonlyMap<string, number> } | null | undefined
      const pipeRows = (byRepeat: ReadonlyArray<StudyMetrics.TrialValues | null>, pipeAt: ReadonlyMap<number, number>, width: number) =>
        reducedRows(byRepeat, d.name, pipeAt, width, (t, m) => t.perPipeline?.[m])
      const pipelinePaired = (a: string, b: string): Statistics.Interval | null | undefined => {
        if (kind !== "trial" || d.kind !== "builtin" || !StudyMetrics.PER_PIPELINE_METRICS.has(d.name)) return undefined
        const onCommon = onCommonRepeats(comparedOf.get(a) ?? [], comparedOf.get(b) ?? [])
        // the cases both have in a repeat both have
        const present = (ts: ReadonlyArray<StudyMetrics.TrialValues | null>) => {
          const has = new Uint8Array(caseKeys.length)
          for (const t of ts) {
            const cs = t?.perPipeline?.[d.name]
            if (cs !== undefined) for (let k = 0; k < cs.caseIndex.length; k++) has[cs.caseIndex[k]!] = 1
          }
          return has
        }
        const pa = present(onCommon.a)
        const pb = present(onCommon.b)
        let common = 0
        for (let c = 0; c < caseKeys.length; c++) common += pa[c]! & pb[c]!
        if (common < Math.max(2, minPairedCases)) return undefined
        if (pipeShared === undefined) {
          const any = new Uint8Array(caseKeys.length)
          for (const v of variantBase) {
            const has = present(comparedOf.get(v.variantId) ?? [])
            for (let c = 0; c < has.length; c++) any[c] = any[c]! | has[c]!
          }
          const cases = caseOrder.filter((c) => any[c] === 1)
          const pipeAt = new Map(cases.map((c, i) => [c, i]))
          const no = new Map(variantBase.map((v, i) => [v.variantId, i]))
          pipeShared = cases.length === 0 ? null : {
            at: pipeAt,
            width: cases.length,
            no,
            boot: Statistics.bootstrapReduced(variantBase.map((v) => pipeRows(comparedOf.get(v.variantId)!, pipeAt, cases.length)), "sum", { seed: seed + metricNo, level, resamples })
          }
        }
        if (pipeShared === null) return undefined
        const difference = onCommon.same
          ? pipeShared.boot.paired(pipeShared.no.get(a)!, pipeShared.no.get(b)!)
          : Statistics.bootstrapReduced([pipeRows(onCommon.a, pipeShared.at, pipeShared.width), pipeRows(onCommon.b, pipeShared.at, pipeShared.width)], "sum", { seed: seed + metricNo, level, resamples }).paired(0, 1)
        return difference ?? undefined
      }

      if (objectiveMetrics.has(d.name)) {
        const dirOf = directionOf(d)
        pairedOf.set(d.name, (a, b) => {
          // repeats pair by number: when the two differ in their repeats (a confirmation), the
          // difference is read over the repeats both have, with a bootstrap of its own
          const onCommon = onCommonRepeats(comparedOf.get(a) ?? [], comparedOf.get(b) ?? [])
          if (kind !== "trial" && !onCommon.same) {
            if (onCommon.common === 0 || union.length === 0) return undefined
            if (kind === "reduced") {
              const rows = [reducedRows(onCommon.a, d.name, at, union.length), reducedRows(onCommon.b, d.name, at, union.length)]
              return Statistics.bootstrapReduced(rows, reducerOf(d), { seed: seed + metricNo, level, resamples }).paired(0, 1)
            }
            const ma = caseMatrix(onCommon.a, d.name, caseKeys.length)
            const mb = caseMatrix(onCommon.b, d.name, caseKeys.length)
            const keys = caseOrder.filter((c) => ma.rows[c]!.length > 0 && mb.rows[c]!.length > 0)
            if (keys.length === 0) return undefined
            return Statistics.pairedBootstrap(keys.map((c) => ma.rows[c]!), keys.map((c) => mb.rows[c]!), { seed: seed + metricNo, level, resamples, ...dirOf })?.difference
          }
          if (kind === "case") {
            const ka = sharedNo.get(a)
            const kb = sharedNo.get(b)
            return shared === null || ka === undefined || kb === undefined ? undefined : shared.paired(ka, kb, dirOf).difference
          }
          if (kind === "reduced") {
            const ra = reducedNo.get(a)
            const rb = reducedNo.get(b)
            return reduced === null || ra === undefined || rb === undefined ? undefined : reduced.paired(ra, rb)
          }
          // a usage metric with per-pipeline shares (costUsd, tokens): paired case by case, as a
          // sum over the pipelines (the trial's figure) recomputed over the same drawn cases, with
          // the spread between the repeats added (Statistics.bootstrapReduced, as a declared `sum`
          // metric): a variant dearer on every case is beaten beyond noise even when its repeats
          // all cost the same (tester16e F1). Below the minimum paired cases, the repeats decide
          const byCase = pipelinePaired(a, b)
          if (byCase !== undefined) return byCase
          // one value per repeat: Student's t on the per-repeat differences, as against the
          // baseline; a difference within the tie tolerance of its two values is exactly 0
          const ta = comparedOf.get(a) ?? []
          const tb = comparedOf.get(b) ?? []
          const ds: Array<number> = []
          for (let r = 0; r < Math.min(ta.length, tb.length); r++) {
            const x = ta[r]?.values[d.name]
            const y = tb[r]?.values[d.name]
            if (x !== undefined && y !== undefined) ds.push(Statistics.nearlyEqual(x, y) ? 0 : y - x)
          }
          return studentOf(ds, level, "paired difference")
        })
      }

      for (const v of variantBase) {
        salt++
        const byRepeat = comparedOf.get(v.variantId)!
        // only the repeats the variant has: a confirmation's repeats 4 and 5 of another variant
        // never existed for this one, so they are not "not compared" (tester16c F8)
        const ownRepeats = Math.max(0, ...v.trials.map((t) => t.repeat))
        const perRepeat = byRepeat.slice(0, ownRepeats).map((t) => t === null ? null : t.values[d.name] ?? null)
        const xs = finite(perRepeat)
        const m = matrices.get(v.variantId)!
        const k = sharedNo.get(v.variantId)
        let interval: Statistics.Interval | null = null
        let aggregation: string
        if (kind === "case" && m.present > 0) {
          if (k !== undefined) interval = shared!.intervals[k]!
          else {
            const rows = caseOrder.map((c) => m.rows[c]!).filter((r) => r.length > 0)
            interval = rows.length >= 2 || (rows[0]?.length ?? 0) >= 2 ? Statistics.bootstrapMean(rows, { seed: seed + salt, level, resamples }) : null
          }
          // every case equal: a zero-width bootstrap interval is no certainty (tester16c F10)
          interval = markEqualCases(interval, m.present)
          aggregation = `per repeat: ${d.source}; across ${Words.count(xs.length, "repeat")}: mean and median; interval: ${interval?.method ?? "none (one value)"} (${Words.count(m.present, "case")})`
        } else if (kind === "reduced" && reduced !== null && m.present > 0) {
          interval = reduced.intervals[reducedNo.get(v.variantId)!] ?? null
          aggregation = `per repeat: ${d.source}; across ${Words.count(xs.length, "repeat")}: mean and median; interval: ${interval?.method ?? "none"} (${Words.count(m.present, "case")})`
        } else {
          interval = studentOf(xs, level, "repeat")
          aggregation = `per repeat: ${d.source}; across ${Words.count(xs.length, "repeat")}: mean and median; interval: ${interval?.method ?? "none (fewer than 2 repeats: insufficient repeats)"}`
        }
        // no compared repeat at all: say why instead of "across 0 repeats"
        const base = variantBase.find((b) => b.variantId === v.variantId)!
        if (base.trials.every((t) => !t.compared)) aggregation = `per repeat: ${d.source}; ${noComparedRepeat(base)}`
        // compared repeats, none with a value: the metric is missing, not aggregated "across 0 repeats"
        else if (xs.length === 0) {
          const compared = base.trials.filter((t) => t.compared).length
          aggregation = `per repeat: ${d.source}; not available: no value in ${compared === 1 ? "its compared repeat" : `any of its ${compared} compared repeats`}`
        }
        // a built-in metric counts or measures (calls, tokens, cost, time, attempts): it is never
        // below 0, so neither is its interval (Student's t over few repeats can reach below)
        if (interval !== null && d.kind === "builtin" && interval.lower < 0) {
          interval = { ...interval, lower: 0, method: `${interval.method}; lower bound truncated at 0 (the metric is never negative)` }
          aggregation += "; the interval's lower bound truncated at 0 (the metric is never negative)"
        }
        // tokens the server did not report are estimated: said so, with how many attempts
        let estimated = 0
        for (const t of byRepeat) estimated += t === null ? 0 : t.estimatedAttempts ?? 0
        const tokenMetric = d.kind === "builtin" && (d.name === "tokensIn" || d.name === "tokensOut")
        if (tokenMetric && estimated > 0) {
          aggregation += `; ${Words.count(estimated, "attempt")} with estimated tokens (the server gave no usage)`
        }
        // calls without a price: those trials have no costUsd (unknown, not $0)
        let unpricedCalls = 0
        let unpricedTrials = 0
        if (d.kind === "builtin" && d.name === "costUsd") {
          for (const t of byRepeat) {
            if (t !== null && (t.unpricedCalls ?? 0) > 0) {
              unpricedCalls += t.unpricedCalls!
              unpricedTrials++
            }
          }
          if (unpricedCalls > 0 && xs.length === 0) {
            // no repeat has a known cost: say it is missing, and why (not "across 0 repeats")
            aggregation = `per repeat: ${d.source}; no known cost: costUsd not available (${Words.count(unpricedCalls, "call")} had tokens but no price in ${
              unpricedTrials === 1 ? "its trial" : `each of its ${unpricedTrials} trials`
            }; cost unknown, not $0)`
          } else if (unpricedCalls > 0) {
            aggregation += `; ${Words.count(unpricedTrials, "trial")} left empty: ${Words.count(unpricedCalls, "call")} had tokens but no price (cost unknown, not $0)`
          }
        }
        // calls served from the call cache: counted at what they cost when made (StudyMetrics),
        // said with how many, so that a cached variant does not read as a cheaper one
        const hitMetric = d.kind === "builtin" && CACHE_COUNTED.has(d.name)
        let hits = 0
        let calls = 0
        if (hitMetric) {
          for (const t of byRepeat) {
            if (t === null) continue
            hits += t.cacheHits ?? 0
            calls += t.values["calls"] ?? 0
          }
        }
        if (hits > 0) {
          aggregation += d.name === "latencyP95Ms"
            ? `; ${Words.count(hits, "call")} served from the call cache: the pipelines they served are left out (a cache entry keeps no latency)`
            : `; ${hits}${calls >= hits ? ` of ${calls}` : ""} calls served from the call cache, counted at what the call cost when it was made (what this study paid: the Run section)`
        }
        valueOf.get(v.variantId)![d.name] = {
          perRepeat,
          mean: xs.length === 0 ? null : Statistics.mean(xs),
          median: xs.length === 0 ? null : Statistics.median(xs),
          interval,
          aggregation,
          ...(tokenMetric && estimated > 0 ? { estimatedAttempts: estimated } : {}),
          ...(unpricedCalls > 0 ? { unpricedCalls } : {}),
          ...(hits > 0 ? { cacheHits: hits } : {}),
          ...(d.kind === "builtin" && d.name === "costUsd" ? judgeShareOf(byRepeat) : {})
        }
        // evidence: the cases sorted best first (ties by case key); pipelines only for those kept
        evidenceOf.get(v.variantId)![d.name] = {
          trials: byRepeat.flatMap((t) => t === null ? [] : [t.trialId]),
          ...rankedCases(m, caseKeys, goalOf(d.direction, objectives.find((o) => o.metric === d.name)), keep)
        }
      }

      // against the baseline
      const baseK = sharedNo.get(baselineId)
      // a target objective: the wins count higher / lower (see VersusBaseline.target)
      const objective = objectives.find((o) => o.metric === d.name)
      const towardTarget = objective?.direction === "target" || d.direction === "target" ? objective?.target : undefined
      const dir = towardTarget !== undefined ? { direction: "maximize" as const } : directionOf(d)
      const targetField = towardTarget === undefined ? {} : { target: towardTarget }
      for (const v of variantBase) {
        if (v.variantId === baselineId) continue
        salt++
        const candRepeats = comparedOf.get(v.variantId)!
        const candK = sharedNo.get(v.variantId)
        const both = shared !== null && baseK !== undefined && candK !== undefined
        const vs = vsOf.get(v.variantId)!
        if (kind !== "trial") {
          // repeats pair by number (repeat r of the candidate with repeat r of the baseline): a
          // repeat only one side has (a confirmation) pairs with nothing, so when their repeats
          // differ both sides are read over the repeats they share, with a bootstrap of their own
          const onCommon = onCommonRepeats(baseRepeats, candRepeats)
          const base = onCommon.same ? matrices.get(baselineId) : caseMatrix(onCommon.a, d.name, caseKeys.length)
          const cand = onCommon.same ? matrices.get(v.variantId)! : caseMatrix(onCommon.b, d.name, caseKeys.length)
          const keys: Array<number> = []
          if (base !== undefined) for (const c of caseOrder) if (base.rows[c]!.length > 0 && cand.rows[c]!.length > 0) keys.push(c)
          const pairedRepeats = onCommon.common
          const caseSufficiency = Statistics.sufficiency({ pairedCases: keys.length, repeats: pairedRepeats }, { cases: minPairedCases, repeats: minRepeats }, "case")
          // a trial-level statistic (p95, sum; latencyP95Ms) is measured once per trial: the
          // repeats are its unit of replication, so a claim needs the minimum repeats as well
          const sufficiency = kind === "reduced" && caseSufficiency.sufficient
            ? Statistics.sufficiency({ pairedCases: keys.length, repeats: pairedRepeats }, { cases: minPairedCases, repeats: minRepeats }, "repeat")
            : caseSufficiency
          let paired: PairedComparison | null
          if (keys.length === 0) paired = null
          else if (kind === "reduced") {
            const difference = onCommon.same
              ? reduced!.paired(reducedNo.get(baselineId)!, reducedNo.get(v.variantId)!)
              : Statistics.bootstrapReduced(
                [reducedRows(onCommon.a, d.name, at, union.length), reducedRows(onCommon.b, d.name, at, union.length)],
                reducerOf(d),
                { seed: seed + salt, level, resamples }
              ).paired(0, 1)
            paired = difference === null ? null : { difference, cases: keys.length, ...winsOf(keys.map((c) => [Statistics.mean(base!.rows[c]!), Statistics.mean(cand.rows[c]!)]), dir) }
          } else {
            paired = both && onCommon.same
              ? shared.paired(baseK, candK, dir)
              : Statistics.pairedBootstrap(keys.map((c) => base!.rows[c]!), keys.map((c) => cand.rows[c]!), { seed: seed + salt, level, resamples, ...dir })
          }
          let mcnemar: Statistics.McNemar | null = null
          const binary = kind === "case" && keys.length > 0 && keys.every((c) => base!.rows[c]!.every((x) => x === 0 || x === 1) && cand.rows[c]!.every((x) => x === 0 || x === 1))
          if (binary && sufficiency.sufficient && paired !== null) {
            // the unit is the case, not the (case, repeat) pair: per case the two sides' outcomes
            // averaged over their repeats; a case is discordant when the averages differ (by the
            // metric's direction, up to Statistics.nearlyEqual), which is what the paired wins
            // count. b = baseline better, c = candidate better (see Statistics.mcnemarExact).
            mcnemar = Statistics.mcnemarExact(paired.baselineWins, paired.candidateWins)
          }
          vs[d.name] = { paired, mcnemar, adjustedPValue: null, sufficiency, claim: "case", ...targetField }
        } else {
          // one value per repeat: Student's t on the per-repeat differences (repeat r of each side)
          const pairs: Array<[number, number]> = []
          for (let r = 0; r < Math.min(baseRepeats.length, candRepeats.length); r++) {
            const b = baseRepeats[r]?.values[d.name]
            const c = candRepeats[r]?.values[d.name]
            if (b !== undefined && c !== undefined) pairs.push([b, c])
          }
          const sufficiency = Statistics.sufficiency({ pairedCases: pairs.length, repeats: pairs.length }, { cases: minPairedCases, repeats: minRepeats }, "repeat")
          // a difference of float noise (sums of 0.1s) is 0 (fix16ac F6)
          const diff = studentOf(pairs.map(([b, c]) => Statistics.difference(c, b)), level, "paired difference")
          const paired = pairs.length === 0 ? null : {
            difference: diff === null
              ? { estimate: Statistics.difference(pairs[0]![1], pairs[0]![0]), lower: null, upper: null, level, method: "one paired repeat: no interval", resamples: null, seed: null }
              : { ...diff, method: `paired ${diff.method.replace("repeat values", "per-repeat differences")}` },
            cases: pairs.length,
            ...winsOf(pairs, dir)
          }
          vs[d.name] = { paired, mcnemar: null, adjustedPValue: null, sufficiency, claim: "repeat", ...targetField }
        }
      }
    })

    // Holm's adjustment over every McNemar test of the report (many variants, one baseline)
    const tests: Array<{ readonly v: string; readonly m: string; readonly p: number }> = []
    for (const [v, r] of vsOf) for (const [m, x] of Object.entries(r)) if (x.mcnemar !== null) tests.push({ v, m, p: x.mcnemar.pValue })
    const adjusted = Statistics.holm(tests.map((t) => t.p))
    tests.forEach((t, i) => {
      const r = vsOf.get(t.v)!
      r[t.m] = { ...r[t.m]!, adjustedPValue: adjusted[i]! }
    })

    // Pareto and ranking over the objectives
    const paretoObjectives = objectives.map((o) => ({ direction: o.direction, ...(o.target === undefined ? {} : { target: o.target }) }))
    const points: Array<Statistics.ParetoPoint> = []
    for (const v of variantBase) {
      if (v.succeeded === 0 || objectives.length === 0) continue
      const vals = valueOf.get(v.variantId)!
      if (!objectives.every((o) => vals[o.metric]?.mean !== null && vals[o.metric] !== undefined)) continue
      points.push({ id: v.variantId, values: objectives.map((o) => vals[o.metric]!.interval ?? vals[o.metric]!.mean!) })
    }
    // the uncertainty-aware front: (1) a variant is dominated only by one it can be compared
    // with at the declared minimums (paired cases for a case-level or resampled-case metric,
    // repeats for a trial-level one, on every objective); (2) "better beyond noise" is decided
    // on the pair's paired difference (every pair, the baseline's like any other: all variants
    // ran the same cases), widened for the k(k − 1)/2 × objectives pairwise comparisons the
    // front makes (Bonferroni), so that among many equal variants none is dropped by chance
    const defOf = new Map(defs.map((d) => [d.name, d]))
    const comparedRepeats = new Map(variantBase.map((v) => [v.variantId, comparedOf.get(v.variantId)!.filter((t) => t !== null).length]))
    // the objectives some pair is below the minimums on (the conclusion names them: N5)
    const shortMetrics = new Set<string>()
    const pairSample = (a: string, b: string): { readonly ok: boolean; readonly reason: string | null } => {
      let first: string | null = null
      for (const o of objectives) {
        const d = defOf.get(o.metric)
        if (d === undefined) continue
        // the repeats both have (repeats pair by number)
        const r = Math.min(comparedRepeats.get(a) ?? 0, comparedRepeats.get(b) ?? 0, onCommonRepeats(comparedOf.get(a) ?? [], comparedOf.get(b) ?? []).common)
        let reason: string | null = null
        // a trial-level statistic of per-pipeline values needs both: cases and repeats
        if ((kindOf(d) === "trial" || kindOf(d) === "reduced") && r < minRepeats) reason = `${Words.count(r, "repeat")} (< ${minRepeats}) on ${o.metric}`
        else if (kindOf(d) !== "trial") {
          const ma = presentOf.get(o.metric)?.get(a)
          const mb = presentOf.get(o.metric)?.get(b)
          let common = 0
          if (ma !== undefined && mb !== undefined) for (let c = 0; c < ma.length; c++) common += ma[c]! & mb[c]!
          if (common < minPairedCases) reason = `${Words.count(common, "paired case")} (< ${minPairedCases}) on ${o.metric}`
        }
        if (reason === null) continue
        shortMetrics.add(o.metric)
        first ??= reason
      }
      return { ok: first === null, reason: first }
    }
    const shortPairs: Array<string> = []
    const comparable = new Map<string, boolean>()
    for (let i = 0; i < points.length; i++) {
      for (let j = i + 1; j < points.length; j++) {
        const s = pairSample(points[i]!.id, points[j]!.id)
        comparable.set(`${points[i]!.id}\u0000${points[j]!.id}`, s.ok)
        comparable.set(`${points[j]!.id}\u0000${points[i]!.id}`, s.ok)
        if (!s.ok && shortPairs.length < 3) shortPairs.push(`${points[i]!.id}–${points[j]!.id}: ${s.reason}`)
        else if (!s.ok) shortPairs.push("")
      }
    }
    const pairwise = (points.length * (points.length - 1)) / 2 * Math.max(1, objectives.length)
    const widened = points.map((p) => ({ id: p.id, values: p.values.map((x) => typeof x === "number" ? x : Statistics.bonferroniWiden(x, pairwise)) }))
    const strict = new Set(Statistics.paretoFront(points.map((p) => ({ id: p.id, values: p.values.map((x) => typeof x === "number" ? x : x.estimate) })), paretoObjectives))
    // every pair is judged on its paired difference (widened the same way): the pairing removes
    // the case-to-case variation the marginal intervals carry. Only when a pair has none (a
    // variant without every case) do the marginal intervals decide, except against the
    // baseline, whose comparison pairs the common cases
    // the pair's paired difference b − a on objective k, widened for the front's comparisons
    // (`null`: the pair has none with an interval; `undefined`: none to read, the marginal
    // intervals decide), memoized: the front asks a pair both ways (a lead beyond noise of
    // either side counts, fix16ac F1) and the deciding comparisons read it again
    const judgedMemo = new Map<string, { readonly diff: Statistics.Interval | null | undefined; readonly out: boolean | undefined }>()
    const judged = (a: string, b: string, k: number): { readonly diff: Statistics.Interval | null | undefined; readonly out: boolean | undefined } => {
      const o = objectives[k]!
      if (o.direction === "target") return { diff: undefined, out: undefined }
      const key = `${k}\u0000${a}\u0000${b}`
      const known = judgedMemo.get(key)
      if (known !== undefined) return known
      // the difference b − a, from the pair's paired comparison
      let diff = pairedOf.get(o.metric)?.(a, b)
      if (diff === undefined && (a === baselineId || b === baselineId)) {
        const x = vsOf.get(a === baselineId ? b : a)?.[o.metric]
        const base = x === undefined || x.paired === null || !x.sufficiency.sufficient || !hasInterval(x.paired.difference) ? null : x.paired.difference
        diff = base === null || a === baselineId ? base : { ...base, estimate: -base.estimate, lower: -base.upper, upper: -base.lower }
      }
      let out: boolean | undefined
      let wide: Statistics.Interval | null | undefined = diff
      // monotonic (tester16e F1): the more the repeats (or cases) agree, the easier a variant is
      // to beat, never harder. A zero-width interval over two or more values that all agree
      // (every paired difference equal: the mark of degenerateNote) is that difference exactly,
      // beyond noise when it is not 0 (the limit of the t interval as the spread goes to 0; the
      // significance wording against the baseline still says "no width: no difference shown").
      // With fewer than two paired repeats of a trial-only value there is no interval: unknown,
      // never beyond noise (a bare number would read as a certainty)
      const def = defOf.get(o.metric)
      if (diff === null && def !== undefined && kindOf(def) === "trial") out = false
      else if (diff === undefined || diff === null) out = undefined
      else {
        const d = Statistics.bonferroniWiden(diff, pairwise)
        wide = d
        // d = b − a (the vsBaseline difference is candidate − baseline); "good" is + for maximize: a is better when b − a is below 0 beyond noise
        out = o.direction === "maximize" ? d.upper < 0 : d.lower > 0
      }
      const r = { diff: wide, out }
      judgedMemo.set(key, r)
      return r
    }
    const separated = (a: string, b: string, k: number): boolean | undefined => judged(a, b, k).out
    /** Whether some two of `ids` differ in their compared repeats. */
    const unequalRepeats = (ids: ReadonlyArray<string>): boolean =>
      ids.some((a, i) => ids.slice(i + 1).some((b) => !onCommonRepeats(comparedOf.get(a) ?? [], comparedOf.get(b) ?? []).same))
    /** `a`'s point estimate of `metric` over the repeats it shares with `b` (the mean of their values). */
    const onShared = (a: string, b: string, metric: string): number | null => {
      const common = onCommonRepeats(comparedOf.get(a) ?? [], comparedOf.get(b) ?? [])
      const xs = finite(common.a.map((t) => t?.values[metric] ?? null))
      return xs.length === 0 ? null : Statistics.mean(xs)
    }
    /** `p` with its point estimates over the repeats it shares with `other`, its intervals keeping their width around them. */
    const shiftedTo = (p: Statistics.ParetoPoint, other: string, metrics: ReadonlyArray<string>): Statistics.ParetoPoint => ({
      id: p.id,
      values: p.values.map((x, k) => {
        const m = onShared(p.id, other, metrics[k]!) ?? (typeof x === "number" ? x : x.estimate)
        return typeof x === "number" ? m : { ...x, estimate: m, lower: x.lower + m - x.estimate, upper: x.upper + m - x.estimate }
      })
    })
    /**
     * Both fronts' dominators, pair by pair over the repeats each pair shares: the point
     * estimates are the pair's means over them; an interval (used only where the paired
     * difference gives no answer: a target objective) keeps its width around that mean.
     */
    const pairedDominators = (
      pts: ReadonlyArray<Statistics.ParetoPoint>,
      wide: ReadonlyArray<Statistics.ParetoPoint>,
      objs: ReadonlyArray<Statistics.ParetoObjective>,
      metrics: ReadonlyArray<string>,
      options: Statistics.UncertainFrontOptions
    ) => {
      const strictOut = new Map<string, Array<string>>()
      const uncertainOut = new Map<string, Array<string>>()
      const shifted = (p: Statistics.ParetoPoint, other: string) => shiftedTo(p, other, metrics)
      const estimateOf = (p: Statistics.ParetoPoint): Statistics.ParetoPoint => ({ id: p.id, values: p.values.map((x) => typeof x === "number" ? x : x.estimate) })
      for (let i = 0; i < pts.length; i++) {
        const sBy: Array<string> = []
        const uBy: Array<string> = []
        for (let j = 0; j < pts.length; j++) {
          if (i === j) continue
          const a = pts[i]!.id
          const b = pts[j]!.id
          const pair = [shifted(wide[j]!, a), shifted(wide[i]!, b)]
          if ((Statistics.paretoDominators(pair.map(estimateOf), objs, false).get(a) ?? []).length > 0) sBy.push(b)
          if ((Statistics.paretoDominators(pair, objs, true, options).get(a) ?? []).length > 0) uBy.push(b)
        }
        strictOut.set(pts[i]!.id, sBy)
        uncertainOut.set(pts[i]!.id, uBy)
      }
      // assembled pair by pair: the cycles "within noise" can form are set aside as the front does
      return {
        strict: strictOut as ReadonlyMap<string, ReadonlyArray<string>>,
        uncertain: Statistics.dropDominanceCycles(uncertainOut),
        cycles: Statistics.dominanceCycles(uncertainOut)
      }
    }
    const frontOptions: Statistics.UncertainFrontOptions = { comparable: (a, b) => comparable.get(`${a}\u0000${b}`) ?? false, separated }
    let uncertain = new Set(Statistics.paretoFrontUncertain(widened, paretoObjectives, frontOptions))
    const estimates = points.map((p) => ({ id: p.id, values: p.values.map((x) => typeof x === "number" ? x : x.estimate) }))
    let strictBy = Statistics.paretoDominators(estimates, paretoObjectives, false)
    let uncertainBy = Statistics.paretoDominators(widened, paretoObjectives, true, frontOptions)
    // the cycles set aside (tester16g F1): every view says a member is on the front only so
    let frontCycles = Statistics.paretoDominanceCycles(widened, paretoObjectives, frontOptions)
    // repeats pair by number (issue 16, N2): when two variants do not have the same repeats (a
    // confirmation ran more of one), whether one dominates the other is read on the repeats both
    // have (their means over those repeats; the paired differences already pair them), so a
    // confirmation run at another moment does not move a variant on or off the front
    if (unequalRepeats(points.map((p) => p.id))) {
      const pairwiseBy = pairedDominators(points, widened, paretoObjectives, objectives.map((o) => o.metric), frontOptions)
      strictBy = pairwiseBy.strict
      uncertainBy = pairwiseBy.uncertain
      frontCycles = pairwiseBy.cycles
      strict.clear()
      for (const p of points) if ((strictBy.get(p.id) ?? []).length === 0) strict.add(p.id)
      uncertain = new Set(points.filter((p) => (uncertainBy.get(p.id) ?? []).length === 0).map((p) => p.id))
    }
    // the deciding comparisons (fix16ac F2): for a variant off the uncertainty-aware front, per
    // dominator (the first DECIDING_MAX), per objective, what the front judged: the paired
    // difference dominator − dominated, widened as judged, or the two (widened) intervals
    const widenedOf = new Map(widened.map((p) => [p.id, p]))
    const unequal = unequalRepeats(points.map((p) => p.id))
    const objectiveNames = objectives.map((o) => o.metric)
    const asPair = (id: string, other: string): Statistics.ParetoPoint => unequal ? shiftedTo(widenedOf.get(id)!, other, objectiveNames) : widenedOf.get(id)!
    const negated = (d: Statistics.Interval): Statistics.Interval => ({ ...d, estimate: 0 - d.estimate, lower: 0 - d.upper, upper: 0 - d.lower })
    const bounds = (x: Statistics.Interval | number) => typeof x === "number" ? { estimate: x, lower: x, upper: x } : { estimate: x.estimate, lower: x.lower, upper: x.upper }
    const decidingOf = (v: string): ReadonlyArray<DecidingComparison> =>
      (uncertainBy.get(v) ?? []).slice(0, DECIDING_MAX).map((u) => {
        const pu = asPair(u, v)
        const pv = asPair(v, u)
        const leads = Statistics.objectiveLeads(pu, pv, paretoObjectives, true, frontOptions)
        return {
          by: u,
          objectives: objectives.map((o, k): DecidingObjective => {
            const beyondNoise = leads[k] === "a"
            // dominator − dominated: the front asked (u, v) (v − u) where u leads, (v, u) where v does
            const asked = judgedMemo.get(`${k}\u0000${u}\u0000${v}`)
            const diff = asked !== undefined ? (asked.diff === null || asked.diff === undefined ? asked.diff : negated(asked.diff)) : judged(v, u, k).diff
            return diff === undefined
              ? { metric: o.metric, beyondNoise, basis: "intervals", intervals: { by: bounds(pu.values[k]!), variant: bounds(pv.values[k]!) } }
              : { metric: o.metric, beyondNoise, basis: "paired", difference: diff }
          })
        }
      })
    const cycleOf = new Map(frontCycles.flatMap((ids) => ids.map((id) => [id, ids] as const)))
    const ranking = points.length === 0
      ? []
      : Statistics.weightedRanking(points, objectives.map((o, i) => ({ ...paretoObjectives[i]!, weight: o.weight })))
    // equal scores share a rank (standard competition ranking: 1, 1, 3): the ranking's order
    // among them is only the variants' order, which says nothing
    const rankOf = new Map<string, { readonly rank: number; readonly score: number }>()
    ranking.forEach((r, i) => {
      const prev = i === 0 ? undefined : ranking[i - 1]!
      const rank = prev !== undefined && Statistics.nearlyEqual(prev.score, r.score) ? rankOf.get(prev.id)!.rank : i + 1
      rankOf.set(r.id, { rank, score: r.score })
    })

    const variants: Array<VariantComparison> = variantBase.map((v) => ({
      ...v,
      values: valueOf.get(v.variantId)!,
      vsBaseline: vsOf.get(v.variantId) ?? {},
      pareto: {
        strict: strict.has(v.variantId),
        uncertain: uncertain.has(v.variantId),
        dominatedBy: { strict: strictBy.get(v.variantId) ?? [], uncertain: uncertainBy.get(v.variantId) ?? [] },
        ...((uncertainBy.get(v.variantId) ?? []).length === 0 ? {} : { deciding: decidingOf(v.variantId) }),
        ...(cycleOf.get(v.variantId) === undefined ? {} : { cycle: cycleOf.get(v.variantId) })
      },
      rank: rankOf.get(v.variantId)?.rank ?? null,
      score: rankOf.get(v.variantId)?.score ?? null,
      evidence: evidenceOf.get(v.variantId)!
    }))

    // run
    const trialsByStatus: Record<string, number> = {}
    for (const r of rows) trialsByStatus[r.status] = (trialsByStatus[r.status] ?? 0) + 1
    const summed = rows.reduce(
      (a, r) => ({ calls: a.calls + r.usage.calls, tokens: a.tokens + r.usage.tokens, costUsd: roundUsd(a.costUsd + r.usage.costUsd), timeMs: a.timeMs + r.usage.timeMs, unpriced: a.unpriced + (r.usage.unpriced ?? 0) }),
      { calls: 0, tokens: 0, costUsd: 0, timeMs: 0, unpriced: 0 }
    )
    // the judge's share of the cost, as the settlements recorded it (tester16b N7)
    const total = judgeOf.size === 0 ? summed : { ...summed, judgeCostUsd: roundUsd([...judgeOf.values()].reduce((a, b) => a + b, 0)) }

    // conclusion
    const comparedTrials = variants.reduce((a, v) => a + v.succeeded, 0)
    const limitations: Array<string> = []
    // calls served from the call cache, per variant: "n of N calls served from cache"
    const cached = variants.flatMap((v) => {
      const hits = v.values["calls"]?.cacheHits ?? v.values["costUsd"]?.cacheHits ?? v.values["latencyP95Ms"]?.cacheHits ?? 0
      if (hits === 0) return []
      const calls = v.values["calls"]?.perRepeat.reduce<number>((n, c) => n + (c ?? 0), 0)
      return [`${v.variantId} ${hits}${calls !== undefined && calls >= hits ? ` of ${calls}` : ""}`]
    })
    if (cached.length > 0) {
      limitations.push(
        `call cache: calls served from it (${cached.join(", ")}) count in calls, tokens and costUsd at what the call cost when it was made, and their pipelines are left out of latencyP95Ms; the money this study spent is the Run section's`
      )
    }
    const unpricedCalls = variants.reduce((n, v) => n + (v.values["costUsd"]?.unpricedCalls ?? 0), 0)
    if (unpricedCalls > 0) {
      limitations.push(
        `costUsd: ${Words.count(unpricedCalls, "model call")} had tokens but no price: the trials that made them have no cost (unknown, not $0); price their models (pricing:) to compare cost`
      )
    }
    // a variant excluded on a point estimate whose own interval includes the constraint's
    // value: the exclusion is not beyond noise, said so (tester16c F4); one whose interval has
    // no width (every repeat, or case, equal): no spread, so its value is what it is and breaks
    // the bound, said so (fix16aa; before, it too was "not beyond noise")
    interface Miss {
      readonly variantId: string
      readonly metric: string
      readonly zeroWidth: boolean
      readonly head: string
      readonly text: string
    }
    const nearMisses = (): Array<Miss> =>
      variants.flatMap((v): Array<Miss> => {
        if (v.succeeded > 0 || v.breaches.length === 0) return []
        const judged = v.trials.filter((t) => t.status === "succeeded" || (t.status === "failed" && (t.reason ?? "").startsWith("hard constraint")))
        return objectives.flatMap((o): Array<Miss> => {
          const c = o.hardConstraint
          const d = defs.find((x) => x.name === o.metric)
          if (c === undefined || d === undefined) return []
          const perTrial = judged.flatMap((t) => {
            const x = values.get(t.trialId)?.values[o.metric]
            return x !== undefined && Number.isFinite(x) ? [x] : []
          })
          if (perTrial.length === 0) return []
          const mean = Statistics.mean(perTrial)
          if (OPS[c.op as DomainStudy.Op](mean, c.value)) return []
          // the intervals the Compare section gives, marked alike when they have no width
          // (fix16x: a zero-width t interval here was unmarked and read as beyond noise)
          let interval: Statistics.Interval | null
          if (kindOf(d) === "case") {
            const m = caseMatrix(judged.map((t) => values.get(t.trialId) ?? null), o.metric, caseKeys.length)
            const rows = caseOrder.map((k) => m.rows[k]!).filter((r) => r.length > 0)
            interval = markEqualCases(rows.length >= 2 ? Statistics.bootstrapMean(rows, { seed, level, resamples }) : null, m.present)
          } else interval = studentOf(perTrial, level, "repeat")
          if (interval === null) return []
          const bound = `${o.metric} ${c.op} ${fmt(c.value)}`
          // no width: no spread to be noise; the value is what it is, and it breaks the bound
          if (degenerateNote(interval) !== "") {
            const text = `${v.variantId} excluded: its ${o.metric} ${fmt(mean)} breaks ${bound} (its ${pct(level)} interval${intervalText(interval)} has zero width: the value is what it is)`
            return [{ variantId: v.variantId, metric: o.metric, zeroWidth: true, head: text, text }]
          }
          if (!(interval.lower <= c.value && c.value <= interval.upper)) return []
          const head = `${v.variantId} excluded: ${o.metric} ${fmt(mean)} ${BROKEN_OP[c.op] ?? `not ${c.op}`} ${fmt(c.value)}, but its ${pct(level)} interval${
            intervalText(interval)
          } includes ${fmt(c.value)}`
          return [{ variantId: v.variantId, metric: o.metric, zeroWidth: false, head, text: `${head}: its exclusion is not beyond noise` }]
        })
      })
    const misses = nearMisses()
    const status = row.value.currentVersion === version ? row.value.status : null
    let wording: string
    let candidates: Array<string>
    let pointFront: Array<string> = []
    let notRuledOut: Array<string> | undefined
    let cycles: ReadonlyArray<ReadonlyArray<string>> | undefined
    let summary: string
    if (comparedTrials === 0) {
      wording = WORDING.none
      candidates = []
      summary = "no trial succeeded (or every successful one broke a hard constraint): nothing to compare, no candidate and no best"
    } else if (objectives.length === 0) {
      wording = WORDING.none
      candidates = []
      summary = "the study declares no objectives: the variants are described, none is chosen"
      limitations.push("no objectives: declare objectives to get Pareto candidates")
    } else if (comparedTrials === 1) {
      wording = WORDING.single
      candidates = variants.filter((v) => v.succeeded > 0).map((v) => v.variantId)
      summary = `${candidates[0]} is the ${WORDING.single}: only one trial succeeded, so nothing was compared`
      limitations.push("one successful trial: no comparison between variants and no spread between repeats (an interval shown resamples its cases only)")
    } else if (shortPairs.length > 0) {
      // below the declared minimums nothing is ranked beyond noise: the front removes nobody it
      // cannot compare, and the conclusion names the highest-scoring candidate(s), never a best
      // the candidates are the top of the weighted ranking (ties listed), as the wording says;
      // the variants the sample cannot rule out (the uncertainty-aware front) are listed apart
      // per objective (N5): the ones below the minimums claim nothing; the others' paired
      // comparisons shown above stand
      const short = objectives.filter((o) => shortMetrics.has(o.metric)).map((o) => o.metric)
      const enough = objectives.filter((o) => !shortMetrics.has(o.metric)).map((o) => o.metric)
      const shortWords = `the sample is below the declared minimums on ${short.join(", ")}, so no variant is shown better than another on ${
        short.length === 1 ? "it" : "them"
      } (not ruled out: ${variants.filter((v) => v.pareto.uncertain).map((v) => v.variantId).join(", ")})${
        enough.length === 0 ? "" : `; on ${enough.join(", ")} the comparisons shown above stand`
      }`
      const top = ranking.length === 0 ? [] : ranking.filter((r) => Statistics.nearlyEqual(r.score, ranking[0]!.score)).map((r) => r.id)
      wording = top.length === 0 ? WORDING.none : WORDING.single
      candidates = variants.filter((v) => top.includes(v.variantId)).map((v) => v.variantId)
      notRuledOut = variants.filter((v) => v.pareto.uncertain).map((v) => v.variantId)
      pointFront = variants.filter((v) => v.pareto.strict).map((v) => v.variantId)
      summary = top.length === 0
        ? "no variant has a value for every objective: no candidate"
        : `${candidates.length === 1 ? `${candidates[0]} is the ${WORDING.single}` : `${candidates.join(", ")} tie as the ${WORDING.single}s`} on point estimates; ${shortWords}`
      const shown = shortPairs.filter((x) => x !== "")
      limitations.push(
        `insufficient sample for ${shortPairs.length} of ${Words.count(pairwise / Math.max(1, objectives.length), "variant pair")} (${shown.join("; ")}${shortPairs.length > shown.length ? "; …" : ""}): no variant is removed from the Pareto candidates, and none is called best`
      )
    } else if (variants.filter((v) => v.succeeded > 0).length === 1) {
      // one variant left after the hard constraints and the failures: compared with nothing,
      // so it is not "best" of anything (tester16c F4)
      wording = WORDING.only
      candidates = variants.filter((v) => v.succeeded > 0).map((v) => v.variantId)
      pointFront = candidates
      summary = `${candidates[0]} is ${WORDING.only}: every other variant broke a hard constraint or has no succeeded trial, so nothing was compared and it is not shown better than any other`
      if (misses.length > 0) summary += `; ${misses.map((x) => x.head).join("; ")}`
    } else {
      wording = WORDING.best
      // lead with the uncertainty-aware front (what the intervals do not rule out); the strict
      // front on point estimates comes second
      const front = variants.filter((v) => v.pareto.strict).map((v) => v.variantId)
      candidates = variants.filter((v) => v.pareto.uncertain).map((v) => v.variantId)
      pointFront = front
      // the two fronts may differ both ways (fix16ac F1): a variant beaten only within noise is a
      // candidate off the strict front; one ahead only within noise and beaten beyond noise
      // elsewhere is on the strict front and no candidate
      const same = candidates.length === front.length && candidates.every((x) => front.includes(x))
      const onlyPoints = front.filter((x) => !candidates.includes(x))
      // candidates only because their dominance cycle is set aside (tester16g F1): never "best"
      const cyclic = [...new Map(variants.filter((v) => v.pareto.uncertain && v.pareto.cycle !== undefined).map((v) => [v.pareto.cycle!.join("\u0000"), v.pareto.cycle!])).values()]
        .map((g) => g.filter((x) => candidates.includes(x)))
      const inCycle = new Set(cyclic.flat())
      const plain = candidates.filter((x) => !inCycle.has(x))
      if (cyclic.length > 0) {
        cycles = cyclic
        if (plain.length === 0) wording = WORDING.inseparable
      }
      const cycleWords = cyclic.map((g) => `${g.join(", ")} cannot be separated: they beat one another in a circle beyond noise, so none of them can be ruled out by the others`).join("; ")
      summary = candidates.length === 0
        ? "no variant has a value for every objective: no candidate"
        : cyclic.length > 0
        ? `the Pareto candidates are ${candidates.join(", ")}: ${
          plain.length === 0 ? "" : `${plain.join(", ")} ${plain.length === 1 ? "is" : "are"} ${WORDING.best}; `
        }${cycleWords}${same ? "" : `; on point estimates alone the front is ${front.join(", ")}`}`
        : same
        ? `${candidates.length === 1 ? `${candidates[0]} is` : `${candidates.join(", ")} are the Pareto candidates,`} ${WORDING.best}`
        : `${candidates.length === 1 ? `the Pareto candidate, ${WORDING.best}, is ${candidates[0]}: no other variant beats it` : `the Pareto candidates, ${WORDING.best}, are ${candidates.join(", ")}: no other variant beats them`} beyond the intervals${
          candidates.length === 1 ? "" : " (some of them may differ from each other)"
        }; on point estimates alone the front is ${front.join(", ")}${
          onlyPoints.length === 0
            ? ""
            : ` (${onlyPoints.join(", ")} ${onlyPoints.length === 1 ? "is" : "are"} on it by a lead within noise only, and beaten beyond noise on another objective: see Compare)`
        }`
    }
    if (points.length > 2) {
      limitations.push(
        `multiple comparisons: ${points.length} variants, ${Words.count(pairwise, "pairwise comparison")} over ${Words.count(objectives.length, "objective")}: the Pareto front judges each pair on its paired difference, widened for them (Bonferroni); against the baseline, each paired interval is at ${pct(level)} for its own comparison (not adjusted)${tests.length > 0 ? `, and the ${tests.length} McNemar p-values are Holm-adjusted` : ""}`
      )
    }
    if (unequalRepeats(points.map((p) => p.id))) {
      const counts = new Map<number, Array<string>>()
      for (const p of points) {
        const n = comparedRepeats.get(p.id) ?? 0
        counts.set(n, [...(counts.get(n) ?? []), p.id])
      }
      limitations.push(
        `the variants do not have the same repeats (${[...counts].map(([n, ids]) => `${Words.count(n, "compared repeat")} for ${ids.join(", ")}`).join("; ")}): ` +
          `a variant's value is its mean over all its repeats, but the Pareto fronts and the paired differences compare each pair over the repeats both have (paired by repeat number); the weighted ranking uses the values over all repeats`
      )
    }
    if (status !== null && status !== "completed") limitations.push(`the study is ${Words.statusWords(status)}${row.value.stopReason === null ? "" : ` (${row.value.stopReason})`}`)
    const notCompared = rows.filter((r) => r.status !== "succeeded")
    if (notCompared.length > 0) limitations.push(`${notCompared.length} of ${Words.count(rows.length, "trial")} not compared (${[...new Set(notCompared.map((r) => Words.statusWords(r.status)))].join(", ")})`)
    // each variant with no succeeded trial, as study run's settlement says it (one source)
    limitations.push(...DomainStudy.noSucceededTrialLimitations(rows.map((r) => ({ variantId: r.variantId, assignment: r.variant, status: r.status }))))
    const baseline = variants.find((v) => v.variantId === baselineId)
    if (baseline === undefined || baseline.succeeded === 0) {
      // say why: no trial succeeded, or the ones that did are excluded by a hard constraint
      const succeededRaw = baseline?.trials.filter((t) => t.status === "succeeded").length ?? 0
      const onMean = baseline?.breaches.map((b) => /hard constraint (.* broken by the variant: mean .*? over all \d+ repeats?)/.exec(b)?.[1]).find((x) => x !== undefined)
      limitations.push(
        succeededRaw === 0
          ? `the baseline ${baselineId} has no successful trial: no paired comparison`
          : onMean !== undefined
          ? `the baseline ${baselineId} is excluded by a hard constraint on its mean (${onMean}): none of its ${Words.count(succeededRaw, "successful trial")} is compared, so there is no paired comparison`
          : `the baseline ${baselineId}'s ${Words.count(succeededRaw, "successful trial")} ${succeededRaw === 1 ? "breaks" : "break"} a hard constraint: none is compared, so there is no paired comparison`
      )
    }
    const insufficient = new Set<string>()
    for (const v of variants) {
      if (v.succeeded === 0) continue
      for (const [m, x] of Object.entries(v.vsBaseline)) {
        if (x.paired !== null && !x.sufficiency.sufficient && objectives.some((o) => o.metric === m)) {
          insufficient.add(`${v.variantId} vs ${baselineId} on ${m}: ${x.sufficiency.reason}`)
        }
      }
    }
    for (const s of insufficient) limitations.push(`${s}: no significance statement`)
    for (const n of misses) limitations.push(n.text)
    // a variant whose mean over all its repeats breaks a hard constraint: said loudly
    for (const v of variants) {
      for (const b of v.breaches) {
        if (b.startsWith(`${v.variantId}: `)) limitations.push(`${b}: ${v.variantId} is not a candidate`)
      }
    }
    // survivorship: a variant with a repeat dropped for breaking a hard constraint is valued
    // over the repeats that remain
    for (const v of variants) {
      if (v.succeeded === 0) continue
      const dropped = v.trials.filter((t) => !t.compared && v.breaches.some((b) => b.startsWith(`${t.trialId}: `)))
      if (dropped.length === 0) continue
      const named = objectives.flatMap((o) =>
        o.hardConstraint !== undefined && v.breaches.some((x) => x.includes(`${o.metric} ${o.hardConstraint!.op} ${o.hardConstraint!.value}`))
          ? [`${o.metric} ${o.hardConstraint.op} ${o.hardConstraint.value}`]
          : []
      )
      limitations.push(
        `${v.variantId}: ${dropped.length} of ${v.trials.length} repeats dropped for breaking ${named.length > 0 ? named.join(" / ") : "a hard constraint"}; its value is over the remaining repeats`
      )
    }
    for (const o of objectives) {
      const missing = variants.filter((v) => v.succeeded > 0 && v.values[o.metric]?.mean === null).map((v) => v.variantId)
      if (missing.length > 0) limitations.push(`objective ${o.metric} has no value for ${Words.labelled("variant", missing, { max: 20 })}`)
    }
    if (comparedTrials > 1 && ranking.length > 1) {
      limitations.push("the weighted ranking depends on the declared weights and the min-max scaling: a secondary view, not a choice")
    }

    const comparison: StudyComparison = {
      studyId: study.id,
      version,
      question: study.question,
      hypothesis: study.hypothesis ?? null,
      baseline: baselineId,
      seed,
      level,
      resamples,
      minPairedCases,
      minRepeats,
      variables: (study.variables ?? []).map((v) => ({ name: v.name, type: v.type })),
      objectives,
      metrics: defs.map((d) => ({ name: d.name, unit: d.unit, direction: d.direction, level: d.level, kind: d.kind, source: d.source })),
      run: {
        status,
        ...(status === null ? { currentVersion: row.value.currentVersion } : {}),
        stopReason: row.value.currentVersion === version ? row.value.stopReason : null,
        trialsByStatus,
        usage: total,
        budget: (study.budget ?? { perTrial: {}, total: {} }) as Json,
        overTotal: StudyControl.overshoot(total, study.budget?.total ?? {}),
        highestTrial: rows.reduce(
          (a, r) => ({ calls: Math.max(a.calls, r.usage.calls), tokens: Math.max(a.tokens, r.usage.tokens), costUsd: Math.max(a.costUsd, r.usage.costUsd), timeMs: Math.max(a.timeMs, r.usage.timeMs) }),
          { calls: 0, tokens: 0, costUsd: 0, timeMs: 0 }
        ),
        notStarted: rows.filter((r) => r.status === "not_started").map((r) => r.trialId),
        ...cacheTotal(values)
      },
      variants: variants.map((v) => {
        const exclusions = misses.filter((x) => x.variantId === v.variantId).map(({ metric, text, zeroWidth }) => ({ metric, zeroWidth, text }))
        return exclusions.length === 0 ? v : { ...v, exclusions }
      }),
      weightedRanking: ranking.map((r) => ({ variantId: r.id, score: r.score })),
      conclusion: { status, wording, candidates, pointEstimateFront: pointFront, ...(notRuledOut === undefined ? {} : { notRuledOut }), ...(cycles === undefined ? {} : { cycles }), summary, limitations }
    }
    return { comparison, values, rows }
  })

/** The call cache's hits and misses over the trials (`{}` when it did nothing for any). */
const cacheTotal = (values: ReadonlyMap<string, StudyMetrics.TrialValues>): { readonly cache?: { readonly hits: number; readonly misses: number } } => {
  let hits = 0
  let misses = 0
  for (const v of values.values()) {
    hits += v.cache?.hits ?? 0
    misses += v.cache?.misses ?? 0
  }
  return hits + misses === 0 ? {} : { cache: { hits, misses } }
}

// ---------------------------------------------------------------------------------------------
// Evidence
// ---------------------------------------------------------------------------------------------

/**
 * The evidence behind one number (what `assay study evidence` prints): the metric, the variant
 * and its value, each of the variant's trials (repeat, status, whether compared, its value and
 * every pipeline of it) and the variant's worst and best cases with their pipelines.
 *
 * @since 0.6.0
 * @category models
 */
export interface Evidence {
  readonly studyId: string
  readonly version: number
  readonly metric: StudyComparison["metrics"][number]
  readonly variantId: string
  readonly assignment: Readonly<Record<string, Json>>
  readonly value: MetricValue
  readonly trials: ReadonlyArray<{
    readonly trialId: string
    readonly repeat: number
    readonly status: string
    readonly compared: boolean
    readonly value: number | null
    readonly pipelines: ReadonlyArray<string>
    /** `tokensIn` / `tokensOut` only: the trial's attempts whose tokens were estimated (since 0.9.0). */
    readonly estimatedAttempts?: number | undefined
  }>
  readonly worstCases: ReadonlyArray<EvidenceCase>
  readonly bestCases: ReadonlyArray<EvidenceCase>
  /** Every case has the same value (since 0.10.0): no worst or best case, both lists empty. */
  readonly tie?: EvidenceTie | undefined
  /**
   * `"pipeline shares"` (since 0.16.0, fix16ac F2): the metric is a usage figure measured per
   * trial (`costUsd`, `tokens`, `tokensIn`, `tokensOut`) and the cases' values are their
   * pipelines' shares of it (each case's attempts summed, the mean over the repeats), e.g. the
   * per-case cost in US dollars. Absent when the values are the metric's own per-case values.
   */
  readonly perCase?: "pipeline shares" | undefined
  /**
   * The repeats the per-case differences pair (since 0.16.0, tester16g F2), present when the
   * variant and the baseline do not have the same compared repeats (a confirmation): `repeats`,
   * the repeat numbers both have, which every case's `baseline` value and `difference` are read
   * over (as the paired difference against the baseline is); `variantRepeats` and
   * `baselineRepeats`, each side's own compared repeats (the listed values are the variant's
   * means over all of its). Absent when the two have the same repeats, or nothing is paired.
   */
  readonly pairing?: {
    readonly baselineId: string
    readonly repeats: ReadonlyArray<number>
    readonly variantRepeats: ReadonlyArray<number>
    readonly baselineRepeats: ReadonlyArray<number>
  } | undefined
  /**
   * A variant with no compared trial (every one broke a hard constraint, or failed; since
   * 0.11.0): the worst and best cases are read from `trials`, which are not compared, and
   * `breaches` lists the constraints they broke; `trials` is empty when the metric has no
   * per-case values and the variant is there for its `exclusion`.
   */
  readonly notCompared?: {
    readonly trials: ReadonlyArray<string>
    readonly breaches: ReadonlyArray<string>
    /**
     * Why the variant is excluded on this metric when its interval cannot settle it (since
     * 0.15.0): {@link VariantComparison.exclusions}' sentence for the metric (an interval that
     * includes the bound, or one of zero width). Absent otherwise.
     */
    readonly exclusion?: string | undefined
  } | undefined
}

/**
 * The evidence of one metric of one variant (see {@link Evidence}). Fails with `ConfigError`
 * for an unknown metric (path `METRIC`, with a did-you-mean) or variant (`VARIANT`), besides
 * {@link compare}'s failures.
 *
 * @param study the loaded study
 * @param metric a metric name (declared, built-in, or named by an objective)
 * @param variantId a variant id (`v03`)
 * @param options {@link CompareOptions}; `worst` and `best`: how many cases (default 5 each)
 * @since 0.6.0
 * @category comparing
 */
export const evidence = (
  study: CompareInput,
  metric: string,
  variantId: string,
  options: CompareOptions & { readonly worst?: number | undefined; readonly best?: number | undefined } = {}
): Effect.Effect<Evidence, StoreUnavailable | ConfigError, StudyCatalog | SuiteCatalog> =>
  Effect.gen(function*() {
    const worst = options.worst ?? 5
    const best = options.best ?? 5
    const collected = yield* collect(study, { ...options, evidenceCases: Math.max(worst, best) }, metric)
    return yield* evidenceOf(collected, metric, variantId, worst, best)
  })

/** The evidence of one metric of one variant from a collected comparison (no recomputation). */
const evidenceOf = (
  { comparison, values }: Collected,
  metric: string,
  variantId: string,
  worst: number,
  best: number
): Effect.Effect<Evidence, ConfigError> =>
  Effect.gen(function*() {
    const m = comparison.metrics.find((x) => x.name === metric)
    if (m === undefined) {
      const names = comparison.metrics.map((x) => x.name)
      const near = closest(metric, names)
      return yield* configError("METRIC", `unknown metric "${metric}"${near === undefined ? "" : ` (did you mean "${near}"?)`}; ${Words.noun(names.length, "metric")}: ${names.join(", ")}`)
    }
    const v = comparison.variants.find((x) => x.variantId === variantId)
    if (v === undefined) {
      // "v3" for "v03": the ids are zero-padded, which an edit distance alone misses
      const ids = comparison.variants.map((x) => x.variantId)
      const digits = /^v0*([0-9]+)$/i.exec(variantId)?.[1]
      const near = (digits === undefined ? undefined : ids.find((id) => /^v0*([0-9]+)$/.exec(id)?.[1] === digits)) ?? closest(variantId, ids)
      return yield* configError("VARIANT", `unknown variant "${variantId}"${near === undefined ? "" : ` (did you mean "${near}"?)`}; ${Words.noun(comparison.variants.length, "variant")}: ${comparison.variants.map((x) => x.variantId).join(", ")}`)
    }
    // a variant with no compared trial (every one broke a hard constraint, or failed): its
    // cases are still the evidence a user wants, read from the trials that have values and
    // marked "not compared", with the constraints they broke
    let ev: { readonly worstCases: ReadonlyArray<EvidenceCase>; readonly bestCases: ReadonlyArray<EvidenceCase>; readonly tie?: EvidenceTie | undefined } = v.evidence[metric]!
    let notCompared: Evidence["notCompared"]
    const caseKeys = [...values.values()][0]?.caseKeys ?? []
    if (v.succeeded === 0) {
      const byRepeat = v.trials.map((t) => values.get(t.trialId) ?? null)
      const matrix = caseMatrix(byRepeat, metric, caseKeys.length)
      const exclusion = v.exclusions?.find((x) => x.metric === metric)?.text
      // a metric without per-case values (tokens, wallMs): no cases, but the exclusion stands
      if (matrix.present === 0 && exclusion !== undefined) notCompared = { trials: [], breaches: v.breaches, exclusion }
      if (matrix.present > 0) {
        ev = rankedCases(matrix, caseKeys, goalOf(m.direction, comparison.objectives.find((o) => o.metric === metric)), Math.max(worst, best))
        notCompared = {
          trials: v.trials.filter((t) => values.get(t.trialId)?.cases[metric] !== undefined).map((t) => t.trialId),
          breaches: v.breaches,
          ...(exclusion === undefined ? {} : { exclusion })
        }
      }
    }
    // a usage metric without per-case values (costUsd, tokens…): each case's share, its
    // pipelines' attempts summed (StudyMetrics.TrialValues.perPipeline), ranked as a case's value
    const comparedTrials = (x: VariantComparison) => x.trials.filter((t) => t.compared).map((t) => values.get(t.trialId) ?? null)
    let perPipeline = false
    if (v.succeeded > 0 && ev.tie === undefined && ev.worstCases.length === 0 && ev.bestCases.length === 0 && m.kind === "builtin" && StudyMetrics.PER_PIPELINE_METRICS.has(metric)) {
      const shares = caseMatrix(comparedTrials(v), metric, caseKeys.length, "perPipeline")
      if (shares.present > 0) {
        ev = rankedCases(shares, caseKeys, goalOf(m.direction, comparison.objectives.find((o) => o.metric === metric)), Math.max(worst, best))
        perPipeline = true
      }
    }
    // each listed case beside the baseline's value of the same case and its pipelines: the
    // pairing behind the paired difference against the baseline (fix16ac F2). Repeats pair by
    // number, as in the comparison: when the two sides' compared repeats differ (a
    // confirmation), the baseline's value and the difference are read over the repeats both
    // have, so the per-case differences average to the paired difference (tester16g F2)
    const base = comparison.variants.find((x) => x.variantId === comparison.baseline)
    const byRepeatOf = (x: VariantComparison): Array<StudyMetrics.TrialValues | null> => {
      const out: Array<StudyMetrics.TrialValues | null> = []
      for (const t of x.trials) if (t.compared) out[t.repeat - 1] = values.get(t.trialId) ?? null
      return Array.from({ length: out.length }, (_, r) => out[r] ?? null)
    }
    let pairing: Evidence["pairing"]
    const paired = (list: ReadonlyArray<EvidenceCase>): ReadonlyArray<EvidenceCase> => {
      if (base === undefined || base.variantId === variantId || base.succeeded === 0 || v.succeeded === 0) return list
      const from = perPipeline ? "perPipeline" as const : "cases" as const
      const onCommon = onCommonRepeats(byRepeatOf(base), byRepeatOf(v))
      const bm = caseMatrix(onCommon.a, metric, caseKeys.length, from)
      const vm = onCommon.same ? undefined : caseMatrix(onCommon.b, metric, caseKeys.length, from)
      if (bm.present === 0) return list
      if (vm !== undefined) {
        const numbers = (xs: ReadonlyArray<StudyMetrics.TrialValues | null>) => xs.flatMap((t, r) => t === null ? [] : [r + 1])
        pairing = { baselineId: base.variantId, repeats: numbers(onCommon.a), variantRepeats: numbers(byRepeatOf(v)), baselineRepeats: numbers(byRepeatOf(base)) }
      }
      const at = new Map(caseKeys.map((k, i) => [k, i]))
      return list.map((x) => {
        const c = at.get(x.caseKey)
        const row = c === undefined ? undefined : bm.rows[c]
        const own = c === undefined || vm === undefined ? undefined : vm.rows[c]
        if (c === undefined || row === undefined || row.length === 0 || (own !== undefined && own.length === 0)) return x
        const value = Statistics.mean(row)
        const variantValue = own === undefined ? x.value : Statistics.mean(own)
        return {
          ...x,
          baseline: {
            variantId: base.variantId,
            value,
            difference: Statistics.difference(variantValue, value),
            pipelineIds: bm.pipelinesOf(c),
            ...(own === undefined ? {} : { variantValue })
          }
        }
      })
    }
    const worstCases = paired(ev.worstCases.slice(0, worst))
    const bestCases = paired(ev.bestCases.slice(0, best))
    return {
      studyId: comparison.studyId,
      version: comparison.version,
      metric: m,
      variantId,
      assignment: v.assignment,
      value: v.values[metric]!,
      trials: v.trials.map((t) => ({
        trialId: t.trialId,
        repeat: t.repeat,
        status: t.status,
        compared: t.compared,
        value: values.get(t.trialId)?.values[metric] ?? null,
        pipelines: values.get(t.trialId)?.pipelines() ?? [],
        ...((metric === "tokensIn" || metric === "tokensOut") && m.kind === "builtin" && (values.get(t.trialId)?.estimatedAttempts ?? 0) > 0
          ? { estimatedAttempts: values.get(t.trialId)!.estimatedAttempts! }
          : {})
      })),
      worstCases,
      bestCases,
      ...(perPipeline ? { perCase: "pipeline shares" as const } : {}),
      ...(pairing === undefined ? {} : { pairing }),
      ...(ev.tie === undefined ? {} : { tie: ev.tie }),
      ...(notCompared === undefined ? {} : { notCompared })
    }
  })

/**
 * A comparison computed once, with the evidence of any number read from it without
 * recomputing anything (what `assay serve` caches per store change): `comparison` is
 * {@link compare}'s result; `evidence(metric, variantId)` is {@link evidence}'s, with at most
 * `options.evidenceCases` (default 5) worst and best cases, failing with `ConfigError` for an
 * unknown metric (`METRIC`) or variant (`VARIANT`).
 *
 * @since 0.7.0
 * @category models
 */
export interface Analysis {
  readonly comparison: StudyComparison
  readonly evidence: (metric: string, variantId: string) => Effect.Effect<Evidence, ConfigError>
}

/**
 * Compares once and keeps what {@link evidence} needs (see {@link Analysis}); same failures
 * as {@link compare}.
 *
 * @param study the loaded study (see {@link CompareInput})
 * @param options version, analysis overrides, `evidenceCases`
 * @since 0.7.0
 * @category comparing
 */
export const analyse = (
  study: CompareInput,
  options: CompareOptions = {}
): Effect.Effect<Analysis, StoreUnavailable | ConfigError, StudyCatalog | SuiteCatalog> =>
  Effect.map(collect(study, options), (collected) => {
    const n = options.evidenceCases ?? 5
    return { comparison: collected.comparison, evidence: (metric, variantId) => evidenceOf(collected, metric, variantId, n, n) }
  })

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/**
 * A number for people: integers as they are, others with 4 significant digits.
 *
 * @since 0.6.0
 * @category rendering
 */
export const fmt = (x: number | null | undefined): string => Words.figure(x)

const BUILTIN = new Set(DomainStudy.BUILTIN_METRIC_NAMES)

const pct = (level: number) => `${Math.round(level * 1000) / 10}%`

const intervalText = (i: Statistics.Interval | null) => i === null ? "" : ` ${Words.range(i.lower, i.upper)}${degenerateNote(i)}`

/** What marks a zero-width bootstrap interval of a case-level metric (every case equal) in its `method`. */
const DEGENERATE = "every case equal: the bootstrap cannot show uncertainty"

/** What marks a zero-width Student's t interval (every repeat, or paired difference, equal) in its `method`. */
const DEGENERATE_T = "Student's t cannot show uncertainty"

/**
 * A bootstrap interval over `present` cases, its method marked when it has no width (every case
 * equal: no certainty; tester16c F10), as {@link degenerateNote} reads it.
 */
const markEqualCases = (interval: Statistics.Interval | null, present: number): Statistics.Interval | null =>
  interval !== null && interval.lower === interval.upper && present >= 2
    ? { ...interval, method: `${interval.method}; ${DEGENERATE}; n = ${present.toLocaleString("en-US")}` }
    : interval

/**
 * Student's t interval over `xs` (see `Statistics.studentInterval`); when every value is equal
 * (up to `Statistics.nearlyEqual`) it is [x, x] and its method says so (`every repeat equal:
 * Student's t cannot show uncertainty; n = 3`): the sample's spread is 0, which says nothing of
 * the next repeat's (tester16d F3).
 */
const studentOf = (xs: ReadonlyArray<number>, level: number, unit: "repeat" | "paired difference"): Statistics.Interval | null => {
  const i = Statistics.studentInterval(xs, level)
  if (i === null || !xs.every((x) => Statistics.nearlyEqual(x, xs[0]!))) return i
  return { ...i, lower: i.estimate, upper: i.estimate, method: `${i.method}; every ${unit} equal: ${DEGENERATE_T}; n = ${xs.length}` }
}

/**
 * A variant's Pareto membership in words, as the text report and the Study page say it:
 * `front` (on both fronts), `front within noise (behind v01 on the point estimates only)`,
 * `dominated beyond noise by v02 (on the strict front by a lead within noise only)`, off both
 * fronts `dominated by v02 (on both fronts)` or, when the fronts' dominators differ, `dominated
 * beyond noise by v02; on the point estimates by v02, v03` (tester16g F6), `not compared`, or
 * {@link unplacedText}'s words.
 *
 * @param c the comparison
 * @param v one of its variants
 * @returns the words
 * @since 0.16.0
 * @category rendering
 */
export const paretoText = (c: StudyComparison, v: VariantComparison): string =>
  v.succeeded === 0
    ? "not compared"
    : v.pareto.strict && v.pareto.uncertain
    ? `front${cycleNote(v)}`
    : v.pareto.uncertain
    ? `front within noise (behind ${v.pareto.dominatedBy.strict.join(", ")} on the point estimates only)${cycleNote(v)}`
    : unplacedText(c, v) ??
      (v.pareto.strict
        ? `dominated beyond noise by ${v.pareto.dominatedBy.uncertain.join(", ")} (on the strict front by a lead within noise only)`
        : dominatedOnBothText(v.pareto.dominatedBy))

/**
 * Off both fronts: whose dominators are whose (tester16g F6), as the Study page's two columns
 * list them: `dominated by v02, v03 (on both fronts)` when the lists agree, else `dominated
 * beyond noise by v01, v02, v03; on the point estimates by v02, v03`.
 */
const dominatedOnBothText = (by: VariantComparison["pareto"]["dominatedBy"]): string => {
  const [u, st] = [by.uncertain.join(", "), by.strict.join(", ")]
  if (st === "" || u === st) return `dominated by ${u}${st === "" ? " (beyond noise)" : " (on both fronts)"}`
  return `dominated beyond noise by ${u}; on the point estimates by ${st}`
}

/**
 * When a variant has more dominators than deciding comparisons shown (the first
 * {@link DECIDING_MAX}; tester16g F7): `(3 of 5 shown; not explained: v06, v07)`, else `""`.
 *
 * @param v a variant of a comparison
 * @returns the words, or `""`
 * @since 0.16.0
 * @category rendering
 */
export const decidingShown = (v: VariantComparison): string => {
  const shown = v.pareto.deciding ?? []
  const all = v.pareto.dominatedBy.uncertain
  if (shown.length === 0 || all.length <= shown.length) return ""
  const by = new Set(shown.map((d) => d.by))
  return `(${shown.length} of ${all.length} shown; not explained: ${all.filter((x) => !by.has(x)).join(", ")})`
}

/** What a dominance cycle means, after its members' ids. */
const cycleClause = "beat one another in a circle beyond noise: none of them can be ruled out by the others"

/**
 * Why a variant on the uncertainty-aware front is there when it is in a dominance cycle
 * (tester16g F1): ` (on the front only because v01, v02, v03 beat one another in a circle
 * beyond noise: none of them can be ruled out by the others)`, else `""`.
 *
 * @param v a variant of a comparison
 * @returns the words, with a leading space, or `""`
 * @since 0.16.0
 * @category rendering
 */
export const cycleNote = (v: VariantComparison): string =>
  v.pareto.uncertain && v.pareto.cycle !== undefined ? ` (on the front only because ${v.pareto.cycle.join(", ")} ${cycleClause})` : ""

/** A level with the decimals it takes not to read 100 % (99.8%, 99.99978%). */
const widenedPct = (level: number) => level >= 1 ? "100%" : `${Number((level * 100).toFixed(Math.max(1, -Math.floor(Math.log10(1 - level)) - 1)))}%`

const signed = (x: number) => `${x > 0 ? "+" : ""}${fmt(x)}`

/** An objective as {@link decidingText} reads it: its metric, direction and target. */
type DecidingObjectiveOf = { readonly metric: string; readonly direction: DomainStudy.Direction; readonly target?: number | undefined }

/**
 * A {@link DecidingComparison} in words, one phrase per objective saying which way the
 * dominator leans in words (tester16g F5): `v01 over v03: accuracy Δ +0.2000 [0.1000, 0.3000]:
 * v01 ahead beyond noise; costUsd Δ +0.001000 [-0.002000, 0.004000]: v01 behind, within noise;
 * calls equal`. An objective judged on the two intervals (a `target` one, with its target)
 * reads `a v01 5.900 [5.535, 6.265] vs v03 4.975 [4.610, 5.340] (target 5): v01 ahead beyond
 * noise`. What Δ and the intervals are is said once per report ({@link decidingNote}), not
 * per line. Without `objectives` the direction is not known: `better beyond noise` / `within
 * noise`.
 *
 * @param d the deciding comparison
 * @param variantId the dominated variant
 * @param objectives the comparison's objectives (`StudyComparison.objectives`)
 * @returns the sentence
 * @since 0.16.0
 * @category rendering
 */
export const decidingText = (d: DecidingComparison, variantId: string, objectives?: ReadonlyArray<DecidingObjectiveOf>): string => {
  const parts = d.objectives.map((o) => {
    const of = objectives?.find((x) => x.metric === o.metric)
    // > 0: the dominator ahead (higher for maximize, lower for minimize, nearer a target)
    const lean = (by: number, other: number): number => {
      if (of === undefined) return Number.NaN
      if (of.direction === "target" && of.target !== undefined) return Math.abs(other - of.target) - Math.abs(by - of.target)
      return of.direction === "minimize" ? other - by : by - other
    }
    const verdict = (l: number) =>
      o.beyondNoise
        ? of === undefined ? "better beyond noise" : `${d.by} ahead beyond noise`
        : Number.isNaN(l)
        ? "within noise"
        : Statistics.nearlyEqual(l, 0)
        ? "level on the estimates, within noise"
        : `${d.by} ${l > 0 ? "ahead" : "behind"}, within noise`
    const sep = of === undefined ? " " : ": "
    if (o.basis === "intervals" && o.intervals !== undefined) {
      const iv = (x: { readonly estimate: number; readonly lower: number; readonly upper: number }) => `${fmt(x.estimate)} ${Words.range(x.lower, x.upper)}`
      const target = of?.direction === "target" && of.target !== undefined ? ` (target ${fmt(of.target)})` : ""
      return `${o.metric} ${d.by} ${iv(o.intervals.by)} vs ${variantId} ${iv(o.intervals.variant)}${target}${sep}${verdict(lean(o.intervals.by.estimate, o.intervals.variant.estimate))}`
    }
    const x = o.difference
    if (x === null || x === undefined) return `${o.metric} no paired interval${sep}${verdict(Number.NaN)}`
    // every paired difference 0: an exact tie, said as such (not `Δ 0 [0, 0] within noise`)
    if (!o.beyondNoise && x.estimate === 0 && x.lower === 0 && x.upper === 0) return `${o.metric} equal`
    return `${o.metric} Δ ${signed(x.estimate)} ${Words.range(x.lower, x.upper)}${sep}${verdict(lean(x.estimate, 0))}`
  })
  return `${d.by} over ${variantId}: ${parts.join("; ")}`
}

/**
 * What the "why" lines' figures are, said once per report (tester16g F5): `why: Δ is the paired
 * difference dominator − dominated, its interval at 99.58% (widened for 12 comparisons); an
 * objective without a paired difference (a target) compares the two variants' intervals`;
 * `""` when no variant has a deciding comparison.
 *
 * @param c the comparison
 * @returns the sentence, or `""`
 * @since 0.16.0
 * @category rendering
 */
export const decidingNote = (c: StudyComparison): string => {
  const all = c.variants.flatMap((v) => (v.pareto.deciding ?? []).flatMap((d) => d.objectives))
  if (all.length === 0) return ""
  const levels = new Map<string, string>()
  for (const o of all) {
    const x = o.basis === "paired" ? o.difference : undefined
    if (x === null || x === undefined) continue
    const widened = /widened for (\d+) comparisons/.exec(x.method)?.[1]
    const text = `${widenedPct(x.level)}${widened === undefined ? "" : ` (widened for ${widened} comparisons)`}`
    levels.set(text, text)
  }
  const paired = levels.size === 0 ? "" : `Δ is the paired difference dominator − dominated, its interval at ${[...levels.values()].join(" or ")}`
  const intervals = all.some((o) => o.basis === "intervals" || o.difference === null || o.difference === undefined)
    ? `${paired === "" ? "" : "; "}an objective without a paired difference (a target, say) compares the two variants' intervals`
    : ""
  return `${paired}${intervals}; a lead within noise is a tie`
}

/**
 * Why a variant with a compared trial is neither on a Pareto front nor dominated, in words, as
 * the text report and the Study page say it (tester18c F7, never "dominated by" an empty
 * list): `none (no objectives to place it by)` when the study declares no objectives, `not
 * placed (no value for ghost)` when it has no value for an objective, `not placed` when no
 * variant dominates it; `null` when it is dominated (or has no compared trial).
 *
 * @param c the comparison
 * @param v one of its variants
 * @returns the words, or `null`
 * @since 0.13.0
 * @category rendering
 */
export const unplacedText = (c: StudyComparison, v: VariantComparison): string | null => {
  if (v.succeeded === 0) return null
  if (c.objectives.length === 0) return "none (no objectives to place it by)"
  const unvalued = c.objectives.filter((o) => (v.values[o.metric]?.mean ?? null) === null).map((o) => o.metric)
  if (unvalued.length > 0) return `not placed (no value for ${unvalued.join(", ")})`
  return v.pareto.dominatedBy.uncertain.length === 0 ? "not placed" : null
}

/**
 * The mark of a zero-width interval over cases that all have the same value (` (every case
 * equal: the bootstrap cannot show uncertainty; n = 12)`), or `""`. A percentile bootstrap
 * resamples the observed values only, so when every case is equal each resample is too and
 * the interval is [x, x] whatever the number of cases (Efron & Tibshirani, "An Introduction to
 * the Bootstrap", 1993, ch. 13: the percentile interval's range is the observed values'); it
 * is not a certainty. The same for Student's t over repeats (or paired differences) that are
 * all equal (` (every repeat equal: Student's t cannot show uncertainty; n = 3)`): their spread
 * is 0, so is the interval's width. See docs/statistics.md.
 *
 * @param i an interval (its `method` carries the mark)
 * @returns the parenthesis, with a leading space, or `""`
 * @since 0.12.0
 * @category rendering
 */
export const degenerateNote = (i: { readonly lower: number | null; readonly upper: number | null; readonly method: string } | null): string => {
  if (i === null || i.lower !== i.upper) return ""
  const at = i.method.indexOf(DEGENERATE)
  if (at >= 0) return ` (${i.method.slice(at)})`
  const t = /every (?:repeat|paired difference) equal: /.exec(i.method)
  return t === null || !i.method.includes(DEGENERATE_T) ? "" : ` (${i.method.slice(t.index)})`
}

/**
 * A paired difference in words, as `assay study report` and the Study page print it:
 * `Δ +0.05 [0.01, 0.09]`; `Δ 0 (equal on every pair)` when the difference and its interval
 * are all 0; `Δ -28 (one paired repeat: no interval)` when it has no interval.
 *
 * @param d the difference (candidate − baseline)
 * @returns the phrase
 * @since 0.11.0
 * @category rendering
 */
export const deltaText = (d: Statistics.Interval | PointDifference): string => {
  const sign = d.estimate > 0 ? "+" : ""
  if (!hasInterval(d)) return `Δ ${sign}${fmt(d.estimate)} (${d.method})`
  return d.estimate === 0 && d.lower === 0 && d.upper === 0 ? "Δ 0 (equal on every pair)" : `Δ ${sign}${fmt(d.estimate)}${intervalText(d)}`
}

const assignmentText = (a: Readonly<Record<string, Json>>) =>
  Object.entries(a).map(([k, v]) => `${k}=${typeof v === "string" ? v : canonicalJsonUnsafe(v)}`).join(", ")

/**
 * One comparison against the baseline in words: the paired difference and its interval, the
 * wins, then either "insufficient sample: ... (no significance statement)" or what the
 * interval and the McNemar test say at the comparison's level (the test's significance read
 * from its Holm-adjusted p-value when there is one; a zero difference on every pair prints
 * `Δ 0 (equal on every pair)`) (its discordant cases in the
 * wins' order, candidate first). "significant" is printed only when the interval excludes 0
 * too; when the two disagree the line says so and claims no difference.
 *
 * @since 0.6.0
 * @category rendering
 */
export const versusText = (x: VersusBaseline, level: number): string => {
  if (x.paired === null) return "nothing pairs with the baseline"
  const p = x.paired
  const unit = x.claim === "case" ? "paired case" : "paired repeat"
  const d = p.difference
  const delta = deltaText(d)
  // a target objective: higher / lower per case, the distance to the target is the values' (N4)
  const target = x.target
  const head = target === undefined
    ? `${delta} over ${Words.count(p.cases, unit)} (candidate better in ${p.candidateWins}, baseline in ${p.baselineWins}, ties ${p.ties})`
    : `${delta} over ${Words.count(p.cases, unit)} (candidate higher in ${p.candidateWins}, lower in ${p.baselineWins}, ties ${p.ties}; ` +
      `per ${x.claim}, not toward the target ${target}: the variants' values and the Pareto front judge the distance to it)`
  if (!x.sufficiency.sufficient) return `${head}; ${x.sufficiency.reason} (no significance statement)`
  if (!hasInterval(d)) return `${head}; no interval: no difference shown`
  // a zero-width interval over equal repeats claims nothing (tester16d F3)
  if (degenerateNote(d) !== "" && x.mcnemar === null) return `${head}; the ${pct(level)} interval has no width: no difference shown`
  const excludes = d.lower > 0 || d.upper < 0
  if (x.mcnemar === null) {
    return `${head}; ${excludes ? `the ${pct(level)} interval excludes 0` : `the ${pct(level)} interval includes 0: no difference shown`}`
  }
  const adjusted = x.adjustedPValue ?? null
  const significant = (adjusted ?? x.mcnemar.pValue) < 1 - level
  const test = `exact McNemar p = ${fmt(x.mcnemar.pValue)}${adjusted === null || adjusted === x.mcnemar.pValue ? "" : ` (Holm-adjusted ${fmt(adjusted)})`} (${target === undefined ? `candidate better in ${x.mcnemar.c} vs baseline in ${x.mcnemar.b}` : `candidate higher in ${x.mcnemar.c} vs lower in ${x.mcnemar.b}`} discordant cases)`
  const parts = significant === excludes
    ? [
      excludes ? `the ${pct(level)} interval excludes 0` : `the ${pct(level)} interval includes 0: no difference shown`,
      `${test}, ${significant ? "significant" : "not significant"} at ${pct(level)}`
    ]
    : [
      `the ${pct(level)} interval ${excludes ? "excludes" : "includes"} 0`,
      `${test} ${significant ? "<" : ">="} ${String(Math.round((1 - level) * 1e6) / 1e6)}`,
      // why they disagree, so that the user knows what the line does and does not say
      `the interval and the test disagree: no difference claimed (${
        excludes && adjusted !== null && x.mcnemar.pValue < 1 - level
          ? "the interval is this comparison's alone; the test's p-value is adjusted for all the report's exact tests (Holm), " +
            "which keeps one of many comparisons from looking different by chance: more cases would settle it"
          : "the interval resamples the mean difference over every paired case, the exact test counts the discordant cases only; " +
            "near the threshold they can fall on different sides: more cases would settle it"
      })`
    ]
  return `${head}; ${parts.join("; ")}`
}

// the part of a bootstrap's method that differs between variants: what it resamples
const RESAMPLED = /^((?:paired )?percentile bootstrap) over (cases and repeats|cases \(each with its repeats\)|cases)(.*)$/

/**
 * A metric's interval methods in words, each method named once with the variants it applies
 * to: `percentile bootstrap, 10000 resamples, seed 10 (case draws shared by 3 variants): over
 * cases and repeats for v01, v02; over cases for v03`. A variant with one compared repeat is
 * resampled over its cases only, so the bootstraps of one metric differ in what they resample
 * and nothing else; they are one method. Other methods (a Student's t interval) are listed
 * apart, with their variants when the metric has more than one method.
 *
 * @param methods each variant's interval method (variants without an interval left out)
 * @returns the phrase; "no interval (fewer than two values)" when no variant has one
 */
const intervalMethodsText = (methods: ReadonlyArray<{ readonly variantId: string; readonly method: string }>): string => {
  if (methods.length === 0) return "no interval (fewer than two values)"
  // a method without what it resamples -> what it resamples ("" for another method) -> variants
  const groups = new Map<string, { readonly head: string; readonly rest: string; readonly byOver: Map<string, Array<string>> }>()
  for (const { method, variantId } of methods) {
    const m = RESAMPLED.exec(method)
    const [head, over, rest] = m === null ? [method, "", ""] : [m[1]!, m[2]!, m[3]!]
    const group = groups.get(head + rest) ?? { head, rest, byOver: new Map<string, Array<string>>() }
    group.byOver.set(over, [...(group.byOver.get(over) ?? []), variantId])
    groups.set(head + rest, group)
  }
  const several = groups.size > 1
  const texts = [...groups.values()].map(({ byOver, head, rest }) => {
    const entries = [...byOver]
    if (entries.length === 1) {
      const [over, ids] = entries[0]!
      const named = over === "" ? head : `${head} over ${over}${rest}`
      return several ? `${named} for ${ids.join(", ")}` : named
    }
    const overs = entries.map(([over, ids]) => `over ${over} for ${ids.join(", ")}`).join("; ")
    return several ? `${head}${rest} [${overs}]` : `${head}${rest}: ${overs}`
  })
  return texts.slice(0, 3).join("; ") + (texts.length > 3 ? `; and ${texts.length - 3} more` : "")
}

/**
 * The judge's share beside a cost (` (judge $1.00)`), or nothing without one: a trial's
 * `costUsd` includes its evaluator tasks' calls (tester16b N7).
 *
 * @param judgeCostUsd the judge's part, US dollars (`undefined`: none recorded)
 * @returns the phrase, with its leading space
 * @since 0.13.0
 * @category rendering
 */
export const judgeShareText = (judgeCostUsd: number | undefined): string =>
  judgeCostUsd === undefined ? "" : ` (judge ${formatStudyUsd(judgeCostUsd)})`

/**
 * The study's status in words; for a comparison of a protocol version that is not the current
 * one (no status of its own), what that means: `not recorded for version 1: its trials were
 * settled under protocol version 1 (current 2), and the study's status is version 2's`.
 *
 * @since 0.13.0
 * @category rendering
 */
export const statusWordsOf = (c: Pick<StudyComparison, "version" | "run">, status: StudyRecordStatus | null): string =>
  status !== null
    ? Words.statusWords(status)
    : `not recorded for version ${c.version}: its trials were settled under protocol version ${c.version}${
      c.run.currentVersion === undefined ? "" : ` (current ${c.run.currentVersion}), and the study's status is version ${c.run.currentVersion}'s`
    }`

const sectionsOf = (c: StudyComparison, md: boolean) => {
  const h = (s: string) => md ? `## ${s}` : s.toUpperCase()
  const lines: Array<string> = []
  const bullet = md ? "- " : "  "
  // Design
  lines.push(md ? `# Study ${c.studyId}` : `STUDY ${c.studyId}`, "", h("Design"))
  lines.push(`${bullet}question: ${c.question}`)
  if (c.hypothesis !== null) lines.push(`${bullet}hypothesis: ${c.hypothesis}`)
  lines.push(`${bullet}protocol version: ${c.version}`)
  lines.push(`${bullet}variables: ${c.variables.length === 0 ? "none" : c.variables.map((v) => `${v.name} (${v.type})`).join(", ")}`)
  const base = c.variants.find((v) => v.variantId === c.baseline)
  lines.push(`${bullet}baseline: ${c.baseline}${base === undefined ? "" : ` (${assignmentText(base.assignment)})`}`)
  lines.push(`${bullet}objectives (as frozen with protocol version ${c.version}): ${c.objectives.length === 0 ? "none" : c.objectives.map((o) => `${o.metric} ${o.direction === "target" ? `→ ${o.target}` : o.direction === "maximize" ? "↑" : "↓"}${o.weight !== 1 ? ` (weight ${o.weight})` : ""}${o.hardConstraint === undefined ? "" : ` [${o.hardConstraint.op} ${o.hardConstraint.value}]`}`).join(", ")}`)
  lines.push(`${bullet}analysis: level ${pct(c.level)}, ${c.resamples} bootstrap resamples, seed ${c.seed}; minimum ${c.minPairedCases} paired cases, ${c.minRepeats} repeats`)
  lines.push("", h("Run"))
  lines.push(`${bullet}status: ${statusWordsOf(c, c.run.status)}${c.run.stopReason === null ? "" : ` — stop: ${c.run.stopReason}`}`)
  lines.push(`${bullet}trials: ${Object.entries(c.run.trialsByStatus).map(([s, n]) => `${Words.statusWords(s)} ${n}`).join(" · ")}`)
  lines.push(`${bullet}usage: ${c.run.usage.calls} calls · ${c.run.usage.tokens} tokens · ${formatCost(c.run.usage.costUsd, c.run.usage.unpriced ?? 0, STUDY_COST)}${judgeShareText(c.run.usage.judgeCostUsd)} · ${(c.run.usage.timeMs / 1000).toFixed(1)} s`)
  const budget = c.run.budget as { perTrial?: Record<string, number>; total?: Record<string, number> }
  // each figure with its unit (`time 20 ms`, `cost $0.5000`), as the run's lines say them, with
  // what was used against it: the study's usage for the total (and its share), the highest
  // trial's for the per-trial limit (tester16c F12)
  const budgetText = (b: Record<string, number> | undefined, used: Partial<Record<string, number>> | undefined, whose: string) =>
    b === undefined || Object.keys(b).length === 0 ? "none" : Object.entries(b).map(([k, v]) => {
      const f = StudyControl.FIGURES.find((x) => x === k)
      if (f === undefined) return `${k} ${v}`
      const u = used?.[f]
      // the limit and the use with the digits it takes for them to differ (tester16d F4)
      const [us, ls] = u === undefined ? [undefined, StudyControl.figureValue(f, v)] : StudyControl.distinctFigures(f, u, v)
      return `${StudyControl.figureWord(f)} ${ls}${us === undefined ? "" : ` (${whose} ${us}${v > 0 ? `, ${Math.round((u! / v) * 100)}%` : ""})`}`
    }).join(", ")
  lines.push(`${bullet}budget: per trial ${budgetText(budget.perTrial, c.run.highestTrial, "highest trial")}; total ${budgetText(budget.total, c.run.usage, "used")}`)
  if (c.run.overTotal.length > 0) lines.push(`${bullet}over the total budget: ${c.run.overTotal.join("; ")}`)
  if (c.run.cache !== undefined) {
    // each trial's, as `study run` and `study status` show them
    const perTrial = c.variants.flatMap((v) => v.trials.flatMap((t) => t.cache === undefined ? [] : [`${t.trialId} ${t.cache.hits}/${t.cache.misses}`]))
    lines.push(`${bullet}call cache: ${Words.count(c.run.cache.hits, "hit")}, ${Words.count(c.run.cache.misses, "miss", "misses")}; per trial (hits/misses): ${perTrial.join(" · ")}`)
  }
  if (c.run.notStarted.length > 0) lines.push(`${bullet}never started (left out): ${c.run.notStarted.join(", ")}`)
  for (const v of c.variants) {
    for (const t of v.trials) if (!t.compared) lines.push(`${bullet}${t.trialId}: ${Words.statusWords(t.status)}${t.reason === null ? "" : ` (${t.reason})`} — not compared`)
  }
  // Compare
  lines.push("", h("Compare"))
  const chosen = c.metrics.filter((m) => c.objectives.some((o) => o.metric === m.name) || !BUILTIN.has(m.name))
  const shown = chosen.length > 0 ? chosen : c.metrics.filter((m) => m.name === "calls" || m.name === "costUsd" || m.name === "latencyP95Ms")
  if (md) {
    lines.push("", `- per metric: mean of the repeats [${pct(c.level)} interval]; median; the value of each repeat in order (— = not compared)`)
    lines.push("", `| variant | ${shown.map((m) => `${m.name}${m.unit === "" ? "" : ` (${m.unit})`}`).join(" | ")} | Pareto | rank |`)
    lines.push(`| --- | ${shown.map(() => "---").join(" | ")} | --- | --- |`)
  } else {
    lines.push(`${bullet}per metric: mean of the repeats [${pct(c.level)} interval] (per-repeat values) median`)
  }
  for (const v of c.variants) {
    // a variant missing an objective's value is on no front, and dominated by nobody
    const pareto = paretoText(c, v)
    if (md) {
      lines.push(`| ${v.variantId}${v.isBaseline ? " (baseline)" : ""} | ${shown.map((m) => {
        const x = v.values[m.name]!
        return `${fmt(x.mean)}${judgeShareText(x.judgeCostUsd)}${intervalText(x.interval)}; median ${fmt(x.median)}; repeats ${x.perRepeat.map(fmt).join(", ")}`
      }).join(" | ")} | ${pareto} | ${v.rank ?? "—"} |`)
    } else {
      lines.push(`${bullet}${v.variantId}${v.isBaseline ? " (baseline)" : ""}: ${assignmentText(v.assignment)} — ${Words.count(v.succeeded, "compared trial")}; Pareto: ${pareto}; weighted rank ${v.rank ?? "—"}`)
      if (v.succeeded === 0) continue
      for (const d of v.pareto.deciding ?? []) lines.push(`      why: ${decidingText(d, v.variantId, c.objectives)}`)
      if (decidingShown(v) !== "") lines.push(`      why: ${decidingShown(v)}`)
      for (const m of shown) {
        const x = v.values[m.name]!
        lines.push(`      ${m.name}: ${fmt(x.mean)}${judgeShareText(x.judgeCostUsd)}${intervalText(x.interval)} (${x.perRepeat.map(fmt).join(", ")}) median ${fmt(x.median)}`)
      }
    }
  }
  // what the why lines' figures are: once, not on every line (tester16g F5)
  if (!md && decidingNote(c) !== "") lines.push(`${bullet}why lines: ${decidingNote(c)}`)
  // why each dominated variant is dominated (the table has no room for it)
  const deciding = c.variants.filter((v) => (v.pareto.deciding ?? []).length > 0)
  if (md && deciding.length > 0) {
    lines.push("", "### Why dominated (beyond noise; a lead within noise is a tie)", "", decidingNote(c), "")
    for (const v of deciding) {
      for (const d of v.pareto.deciding!) lines.push(`- ${v.variantId}: ${decidingText(d, v.variantId, c.objectives)}`)
      if (decidingShown(v) !== "") lines.push(`- ${v.variantId}: ${decidingShown(v)}`)
    }
  }
  // the interval methods, in full, once per section: a method shared by every variant once, and
  // metrics whose methods differ only by their seed (each metric draws its own) on one line
  // (tester16b N8: the same long line was printed once per metric)
  lines.push(md ? "\n### Interval methods" : `${bullet}interval methods:`)
  const byMethod = new Map<string, { readonly names: Array<string>; readonly seeds: Array<string>; readonly text: string }>()
  for (const m of shown) {
    const methods = c.variants.flatMap((v) => {
      const method = v.values[m.name]?.interval?.method
      return method === undefined ? [] : [{ variantId: v.variantId, method }]
    })
    const text = intervalMethodsText(methods)
    const seeds = [...text.matchAll(/\bseed (\d+)/g)].map((x) => x[1]!)
    const key = seeds.length === 1 ? text.replace(/\bseed \d+/, "seed #") : text
    const group = byMethod.get(key) ?? { names: [], seeds: [], text }
    group.names.push(m.name)
    group.seeds.push(seeds[0] ?? "")
    byMethod.set(key, group)
  }
  for (const [key, g] of byMethod) {
    const text = g.names.length === 1 ? g.text : key.replace("seed #", `seeds ${g.seeds.join(", ")} (one per metric, in that order)`)
    lines.push(`${md ? "- " : "    "}${g.names.join(", ")}: ${text}`)
  }
  if (md) lines.push("")
  lines.push(md ? "### Against the baseline" : `${bullet}against the baseline ${c.baseline} (paired: candidate − baseline):`)
  const versusStart = lines.length
  for (const v of c.variants) {
    if (v.isBaseline || v.succeeded === 0) continue
    for (const m of shown) {
      const x = v.vsBaseline[m.name]
      if (x === undefined) continue
      lines.push(`${md ? "- " : "    "}${v.variantId} ${m.name}: ${versusText(x, c.level)}`)
    }
  }
  if (lines.length === versusStart) {
    // say why the section is empty rather than leave a heading with nothing under it
    const others = c.variants.filter((v) => !v.isBaseline && v.succeeded > 0).length
    lines.push(`${md ? "- " : "    "}${
      (base?.succeeded ?? 0) === 0
        ? `nothing to compare: the baseline ${c.baseline} has no compared trial`
        : others === 0
        ? "nothing to compare: no other variant has a compared trial"
        : "nothing to compare on the metrics shown"
    }`)
  }
  const breaches = c.variants.flatMap((v) => v.breaches)
  lines.push(md ? "\n### Constraint breaches" : `${bullet}constraint breaches:`)
  lines.push(breaches.length === 0 ? `${md ? "- " : "    "}none` : breaches.map((b) => `${md ? "- " : "    "}${b}`).join("\n"))
  if (c.weightedRanking.length > 0) {
    lines.push(md ? "\n### Weighted ranking (secondary view)" : `${bullet}weighted ranking (secondary view): ${c.weightedRanking.map((r) => `${r.variantId} ${fmt(r.score)}`).join(", ")}`)
    // tied scores share a rank (1, 1, 3), as in the table; a Markdown ordered list would renumber them
    const rankOf = new Map(c.variants.map((v) => [v.variantId, v.rank]))
    if (md) lines.push(c.weightedRanking.map((r, i) => `- rank ${rankOf.get(r.variantId) ?? i + 1}: ${r.variantId} (${fmt(r.score)})`).join("\n"))
  }
  // Evidence
  lines.push("", h("Evidence"))
  lines.push(`${bullet}every number above comes from the compared trials below; assay study evidence FILE METRIC VARIANT lists their pipelines and the worst and best cases`)
  for (const v of c.variants) {
    if (v.succeeded === 0) continue
    const trials = Object.values(v.evidence)[0]?.trials ?? []
    lines.push(`${bullet}${v.variantId}: ${Words.labelled("trial", trials, { max: Number.POSITIVE_INFINITY })}`)
    for (const o of c.objectives) {
      const e = v.evidence[o.metric]
      if (e?.tie !== undefined) {
        lines.push(`${md ? "  - " : "    "}${o.metric}: ${tieText(e.tie)}`)
        continue
      }
      if (e === undefined || e.worstCases.length === 0) continue
      lines.push(`${md ? "  - " : "    "}${o.metric} worst: ${e.worstCases.slice(0, 3).map((w) => `${w.caseKey.slice(0, 18)} ${caseValueText(w)}`).join("; ")}`)
    }
  }
  // Conclusion
  lines.push("", h("Conclusion"))
  lines.push(`${bullet}status: ${statusWordsOf(c, c.conclusion.status)}`)
  lines.push(`${bullet}${c.conclusion.summary}`)
  const inCycle = new Set((c.conclusion.cycles ?? []).flat())
  const plain = c.conclusion.candidates.filter((x) => !inCycle.has(x))
  if (inCycle.size === 0) {
    if (c.conclusion.candidates.length > 0) lines.push(`${bullet}${Words.noun(c.conclusion.candidates.length, "candidate")} (${c.conclusion.wording}): ${c.conclusion.candidates.join(", ")}`)
  } else {
    // a candidate in a dominance cycle is never listed under "best" (tester16g F1)
    if (plain.length > 0) lines.push(`${bullet}${Words.noun(plain.length, "candidate")} (${WORDING.best}): ${plain.join(", ")}`)
    for (const g of c.conclusion.cycles ?? []) lines.push(`${bullet}candidates (${WORDING.inseparable}): ${g.join(", ")}`)
  }
  if (c.conclusion.notRuledOut !== undefined) lines.push(`${bullet}not ruled out (the sample is below the declared minimums): ${c.conclusion.notRuledOut.join(", ")}`)
  lines.push(`${bullet}limitations:${c.conclusion.limitations.length === 0 ? " none noted" : ""}`)
  for (const l of c.conclusion.limitations) lines.push(`${md ? "  - " : "    "}${l}`)
  return lines.join("\n")
}

/**
 * The comparison as plain text with the sections DESIGN, RUN, COMPARE, EVIDENCE and
 * CONCLUSION (what `assay study report` prints).
 *
 * @since 0.6.0
 * @category rendering
 */
export const renderText = (c: StudyComparison): string => sectionsOf(c, false)

/**
 * The comparison as Markdown (`## Design`, `## Run`, `## Compare` with a table, `## Evidence`,
 * `## Conclusion`).
 *
 * @since 0.6.0
 * @category rendering
 */
export const renderMarkdown = (c: StudyComparison): string => sectionsOf(c, true)

/**
 * Why a variant has no compared repeat, in words for its values' aggregation: `no compared
 * repeat: every trial broke a hard constraint (accuracy >= 0.9)`, or `no compared repeat: no
 * trial succeeded (2 failed)`.
 */
const noComparedRepeat = (v: { readonly trials: ReadonlyArray<{ readonly status: string }>; readonly breaches: ReadonlyArray<string> }): string => {
  const broken = [...new Set(v.breaches.flatMap((b) => {
    const m = /hard constraint (\S+ (?:>=|<=|==|!=|>|<) [^\s:;,]+)/.exec(b)
    return m === null ? [] : [m[1]!]
  }))]
  if (broken.length > 0) {
    const onMean = v.breaches.some((b) => b.includes("broken by the variant"))
    return `no compared repeat: ${onMean ? "the variant broke" : "every trial with a value broke"} the hard constraint${broken.length === 1 ? "" : "s"} ${broken.join(", ")}${onMean ? " on its mean over its repeats" : ""}`
  }
  if (v.trials.length === 0) return "no compared repeat: no trial ran"
  const byStatus = new Map<string, number>()
  for (const t of v.trials) byStatus.set(t.status, (byStatus.get(t.status) ?? 0) + 1)
  return `no compared repeat: no trial succeeded (${[...byStatus].map(([k, n]) => `${n} ${Words.statusWords(k)}`).join(", ")})`
}

/**
 * Repeat numbers in words, runs joined: `[1, 2, 3, 5]` → `1–3, 5`.
 *
 * @param repeats repeat numbers, ascending
 * @returns the phrase
 * @since 0.16.0
 * @category rendering
 */
export const repeatsText = (repeats: ReadonlyArray<number>): string => {
  const runs: Array<string> = []
  for (let i = 0; i < repeats.length;) {
    let j = i
    while (j + 1 < repeats.length && repeats[j + 1] === repeats[j]! + 1) j++
    runs.push(j === i ? `${repeats[i]}` : j === i + 1 ? `${repeats[i]}, ${repeats[j]}` : `${repeats[i]}–${repeats[j]}`)
    i = j + 1
  }
  return runs.join(", ")
}

/**
 * An {@link Evidence.pairing} in words (tester16g F2): `paired with the baseline v01 over
 * repeats 1–2 (the repeats both have; v02 has 1–3, v01 1–2): each case's value is v02's mean
 * over all its repeats, its baseline value and Δ are over the paired repeats, as the paired
 * difference is`.
 *
 * @param variantId the variant the evidence is of
 * @param p the pairing
 * @returns the sentence
 * @since 0.16.0
 * @category rendering
 */
export const pairingText = (variantId: string, p: NonNullable<Evidence["pairing"]>): string =>
  `paired with the baseline ${p.baselineId} over ${Words.noun(p.repeats.length, "repeat")} ${repeatsText(p.repeats)} (the repeats both have; ${variantId} has ${
    repeatsText(p.variantRepeats)
  }, ${p.baselineId} ${repeatsText(p.baselineRepeats)}): each case's value is ${variantId}'s mean over all its repeats, its baseline value and Δ are over the paired repeats, as the paired difference is`

/**
 * An {@link Evidence} as text: the value, each trial and its first 3 pipelines (the count of
 * the rest; `evidence --json` lists every one), the worst and best cases (for a variant with
 * no compared trial, those of its trials not compared, with the constraints they broke).
 *
 * @since 0.6.0
 * @category rendering
 */
export const renderEvidence = (e: Evidence): string => {
  const EVIDENCE_PIPELINES = 3
  const lines = [
    `${e.metric.name} of ${e.variantId} (${assignmentText(e.assignment)}), study ${e.studyId} version ${e.version}`,
    // no value (no compared repeat): one dash, then why in parentheses (tester16e F6: not "— —")
    e.value.mean === null ? `value: — (${e.value.aggregation})` : `value: ${fmt(e.value.mean)}${intervalText(e.value.interval)} — ${e.value.aggregation}`,
    "trials:"
  ]
  for (const t of e.trials) {
    lines.push(`  ${t.trialId} r${t.repeat} ${Words.statusWords(t.status)}${t.compared ? "" : " (not compared)"} value ${fmt(t.value)}${
      t.estimatedAttempts === undefined ? "" : ` (${Words.count(t.estimatedAttempts, "attempt")} with estimated tokens)`
    } · ${Words.count(t.pipelines.length, "pipeline")}`)
    // a few ids per trial: every one of them is in --json (40 cases × 3 repeats would be 120 lines)
    for (const p of t.pipelines.slice(0, EVIDENCE_PIPELINES)) lines.push(`    ${p}`)
    if (t.pipelines.length > EVIDENCE_PIPELINES) lines.push(`    … and ${t.pipelines.length - EVIDENCE_PIPELINES} more (--json lists every pipeline)`)
  }
  const cases = (title: string, list: ReadonlyArray<EvidenceCase>) => {
    lines.push(`${title}:`)
    if (list.length === 0) lines.push("  (no per-case values)")
    for (const c of list) {
      lines.push(`  ${c.caseKey} ${caseValueText(c)} · ${c.pipelineIds.join(", ")}`)
      // the baseline's value of the same case beside it: the pairing of the paired difference
      // (over the paired repeats only when the two sides' repeats differ: tester16g F2)
      if (c.baseline !== undefined) {
        const own = c.baseline.variantValue === undefined ? "" : `${e.variantId} ${fmt(c.baseline.variantValue)} over the paired repeats, `
        lines.push(`    baseline ${c.baseline.variantId}: ${fmt(c.baseline.value)} (${own}Δ ${signed(c.baseline.difference)}) · ${c.baseline.pipelineIds.join(", ")}`)
      }
    }
  }
  if (e.pairing !== undefined) lines.push(pairingText(e.variantId, e.pairing))
  if (e.perCase !== undefined) lines.push(`per case: each case's share of ${e.metric.name} (its pipelines' attempts summed; the mean over the repeats)`)
  if (e.notCompared !== undefined) {
    if (e.notCompared.exclusion !== undefined) lines.push(e.notCompared.exclusion)
    const why = e.notCompared.breaches.length === 0 ? "" : ` (${e.notCompared.breaches.join("; ")})`
    lines.push(e.notCompared.trials.length === 0 ? `not compared${why}` : `cases of ${Words.labelled("trial", e.notCompared.trials)}, not compared${why}:`)
  }
  if (e.tie !== undefined) lines.push(`worst and best cases: ${tieText(e.tie)}`)
  else {
    cases("worst cases", e.worstCases)
    cases("best cases", e.bestCases)
  }
  return lines.join("\n")
}
