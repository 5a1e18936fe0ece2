/**
 * @internal
 *
 * Loading a study file: the Schema decode, the variables and baseline, the variable references
 * of the base experiment, one checked experiment per variant (the base experiment's raw
 * document with the variant's values bound, checked by the experiment loader), the protocol
 * digest, the plan and its caps, and the suite of a protocol version.
 */
import { formatStudyUsd } from "../../services/internal/money.js"
import * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Duration, Effect, Either, ParseResult, Schema } from "effect"
import { ConfigError, type ConfigIssue } from "../../domain/Errors.js"
import { canonicalJsonUnsafe, digest, type Json } from "../../domain/Json.js"
import * as Control from "../../domain/Control.js"
import * as Pricing from "../../domain/Pricing.js"
import type { ResourceInfo, Selector } from "../../domain/Lease.js"
import * as Resource from "../../domain/Resource.js"
import * as RunConfig from "../../domain/RunConfig.js"
import * as OutputPath from "../../domain/internal/outputPath.js"
import * as Words from "../../domain/internal/words.js"
import * as Study from "../../domain/Study.js"
import * as Suite from "../../domain/Suite.js"
import type * as Task from "../../domain/Task.js"
import { builtinTaskNames } from "../../tasks/Builtins.js"
import { JudgeOutput } from "../../tasks/Judge.js"
import type { Experiment, Format, LoadOptions } from "../Experiment.js"
import { describeAlgorithm } from "./build.js"
import { check } from "./check.js"
import { expandEnv, hidingEnvValuesOf } from "./env.js"
import { closest, decodeIssues, formatPath, isRecord, issue, literalExpected } from "./issues.js"
import { fieldsOf } from "./documentFields.js"
import { findRefs, isPlain, VAR_KEY } from "./refs.js"
import * as parse from "./parse.js"
import * as sources from "./sources.js"
import {
  definitionDigest,
  definitionParts,
  type LoadedMember,
  type LoadedSuite,
  type MemberDefinition,
  plain,
  poolIdentity,
  previousDefinitionDigests
} from "./suite.js"
import { StudyFile } from "./studySchema.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link load}: those of `Experiment.load` (`strictEnv`, `env`, `scanKeys`, applied
 * to the study file and to the base experiment), plus:
 *
 * - `outputRoot`: replaces `output.root`, relative to the working directory (`--output-root`);
 * - `newVersion`: accepted for the run command's sake (`--new-version`); loading does not
 *   depend on it;
 * - `allowOverCap`: a plan above a cap is returned (with `plan.caps` listing what is exceeded)
 *   instead of failing; what `assay study plan` uses to print the plan before exiting 2. Such a
 *   study is never run: when the trials exceed `limits.maxTrials` only the baseline variant is
 *   built and `suiteFor` / `trialsFor` die.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyLoadOptions extends LoadOptions {
  readonly outputRoot?: string | undefined
  readonly newVersion?: boolean | undefined
  readonly allowOverCap?: boolean | undefined
  /**
   * Confirmation trials (`assay study confirm`): extra repeats of named variants, appended to
   * every version's trials (`trialsFor`, `suiteFor`) after the declared ones. Not part of the
   * protocol: its digest stays the same. An unknown variant id is ignored.
   */
  readonly extraTrials?: ReadonlyArray<{ readonly variantId: string; readonly repeat: number }> | undefined
}

/**
 * What a study will run and the most it may cost, computed before anything runs
 * (`assay study plan`, `validate`, the start of `study run`). Figures the study cannot know
 * are `null`.
 *
 * - `variants`, `repeats`, `trials` (= variants × repeats);
 * - `casesPerTrial`: the source's rows (`null` when it cannot be counted cheaply: a `jsonl`
 *   file over 64 MiB without a limit); `pipelines`: trials × cases × the source's `repeats`;
 * - `tasksPerPipeline`: the base pipeline's tasks (fanout branches counted);
 * - `maxModelCalls`: the most model calls, attempts included: for every trial, pipelines × the
 *   sum over its model-calling tasks of their `maxAttempts` (a fanout group's `maxAttempts`
 *   multiplies its branches'; a pipeline whose control flow can go backwards multiplies by
 *   1 + its handoff limit). Model-calling tasks are the `chat` task (config `use: chat` or
 *   `Chat.chat` in code, recognised by its code digest `assay.chat/v1`) and the `judge` task
 *   (`assay.judge/v1`, two calls per attempt at most: a format repair); a code task that
 *   calls a model itself is not counted;
 * - `maxTaskAttempts`: the same sum over every task;
 * - `tokens`: `min` = the model calls of one attempt each × the prompt estimate (the chat
 *   task's `system` + `template` text without its `{{field}}` placeholders, at 4 characters
 *   a token, OpenAI's rule of thumb for English; row values are not counted); `max` =
 *   `maxModelCalls` × (prompt estimate + the task's `maxTokens`) (a judge's attempt: 2 × its
 *   prompt estimate, its rubric as JSON, + 3 × `maxTokens`); `null` when a model-calling
 *   task has no `maxTokens`, or the cases cannot be counted;
 * - `costUsd`: the cost range in US dollars from the variants' model profile prices: `min` =
 *   the `tokens` minimum priced as prompt tokens; `max` = every model call's prompt estimate at
 *   `promptPer1k` plus its `maxTokens` at `completionPer1k`; `max` is `null` when a chat task has
 *   no `maxTokens`; the whole range is `null` without a model-calling task or when a profile has
 *   no price;
 * - `timeMs`: the wall time range (milliseconds): each pool used by model-calling tasks runs
 *   `min(capacity, run.concurrency)` calls at once (capacity = the sum of its resources');
 *   a call takes the variant's model profile `latency` (else the study's `estimate.latency`;
 *   with neither, the task's `timeout` bounds the longest call); a `requestsPerMinute`
 *   (profile, else `estimate`) bounds a pool's call rate. `min` = the largest over pools of
 *   max(one attempt per call × min latency / parallel calls, calls / rate); `max` = the sum
 *   over pools of max(every attempt × max latency / parallel calls, attempts / rate), `null`
 *   when a call has no upper bound. A per-trial `time` budget bounds `max` by
 *   ceil(trials / trialConcurrency) × that time, a total `time` budget by itself. `null` when
 *   nothing bounds either end. Retry delays and non-model tasks are not counted;
 * - `concurrency`: `pipelines` (the run's `concurrency`) and `trials` (`run.trialConcurrency`);
 * - `caps`: each cap exceeded (`maxTrials`, `maxPipelines`, `maxCalls`, `maxTokens`) with its
 *   limit and the planned figure; empty when the plan is within every cap;
 * - `notes`: the assumptions behind the figures, one line each.
 *
 * @since 0.6.0
 * @category models
 */
export interface Plan {
  readonly variants: number
  readonly repeats: number
  readonly trials: number
  readonly casesPerTrial: number | null
  readonly pipelines: number | null
  readonly tasksPerPipeline: number
  readonly maxModelCalls: number | null
  /**
   * The part of `maxModelCalls` made by `judge` tasks (since 0.10.0): an attempt of a judge
   * makes 2 calls when its first answer needs a format repair, so `maxModelCalls` can exceed
   * `maxTaskAttempts`; 0 without a judge, `null` when the cases cannot be counted.
   */
  readonly maxJudgeCalls?: number | null | undefined
  readonly maxTaskAttempts: number | null
  readonly tokens: { readonly min: number; readonly max: number } | null
  readonly costUsd: { readonly min: number; readonly max: number | null } | null
  readonly timeMs: { readonly min: number; readonly max: number | null } | null
  readonly concurrency: { readonly pipelines: number; readonly trials: number }
  readonly caps: ReadonlyArray<{ readonly name: string; readonly limit: number; readonly planned: number }>
  readonly notes: ReadonlyArray<string>
}

/**
 * One trial of a protocol version: its id (`p1-v03-r2`), its variant and its repeat (1-based).
 *
 * @since 0.6.0
 * @category models
 */
export interface Trial {
  readonly trialId: string
  readonly variant: Study.Variant
  readonly repeat: number
}

/**
 * A loaded, checked study.
 *
 * - `id`, `file`, `format`, `baseDir`, `question`, `hypothesis`, `type`: the study;
 * - `experimentFile`: the base experiment (absolute); `experiment`: it checked with the
 *   baseline's values;
 * - `variables`; `variants` (expansion order) and `baseline` (one of them);
 * - `repeats`; `budget` (`perTrial`, `total` as figures); `limits` (`maxTrials` defaulted);
 * - `stop` (the declared conditions, `running` defaulted to `drain`), `objectives`;
 * - `metrics`: the declared metrics (`metrics:`, empty when none); `analysis`: the
 *   comparison's settings with their defaults (`Study.DEFAULT_ANALYSIS`);
 * - `trialConcurrency` (default 3); `run`: the suite's run settings (no `store`);
 * - `outputRoot`: the absolute output root;
 * - `protocol`: the protocol's parts as JSON (what is digested; stored by `study run`): `experiment`
 *   is the base experiment's document as written (before `${VAR}` expansion, references
 *   unbound) and the code digests of its tasks; `variables`, `stop`, `objectives` as decoded
 *   (defaults applied); `baseline` the baseline's assignment; `budget` as figures;
 *   `protocolDigest` (32 hex), `protocolParts` (part → 12-hex digest, `repeats` as its number);
 *   the experiment's `run` section and its pools' run configuration (`capacity`, health
 *   thresholds: `POOL_RUN_FIELDS`) are not part of it (a study runs under its own `run`);
 *   `previousProtocols`: the digest and parts earlier builds gave the same protocol (with
 *   them), empty when they are the same: a version frozen with one is this protocol;
 * - `plan`: see {@link Plan}; `pipelinesPerTrial`: the pipelines planned per trial (cases ×
 *   the source's repeats; `null` when the source cannot be counted): what a trial's "N of M
 *   planned pipeline(s)" counts;
 * - `suiteFor(version)`: the suite to run for a protocol version: its members are the trials
 *   `p<version>-vNN-rK` in variant-major, repeat-minor order, each running the variant's
 *   experiment; every pool of the base experiment is a shared pool of the suite (one quota for
 *   all trials) under its own name; layout `combined` in `outputRoot`;
 * - `trialsFor(version)`: the same trials as data;
 * - `warnings`: one line each (an unused variable in a study whose tasks are code, a default
 *   baseline, the experiment's source warnings); `unresolvedEnv`: `${VAR}`s without a value;
 * - `describe()`: the JSON `assay validate` and `assay study plan --json` print (stored with
 *   each protocol version by `study run`); its `judges` (since 0.15.0) are the base
 *   experiment's judge tasks (`tasks`: `{ task, metric, rubric }` each) and `experimentOtherwise`,
 *   the 12-hex digest of the experiment part with the judges' rubrics left out, so that a
 *   version's change names a changed rubric; its `experimentFields` (since 0.16.0) are that
 *   same part field by field (`document`: leaf path -> value, nothing secret kept, see
 *   `documentFields.fieldsOf`; `code`: the 12-hex digest of the tasks' code), so that a
 *   version's change names the changed fields.
 *
 * @since 0.6.0
 * @category models
 */
export interface LoadedStudy {
  readonly id: string
  readonly file: string
  readonly format: Format
  readonly baseDir: string
  readonly question: string
  readonly hypothesis: string | null
  readonly type: Study.StudyType
  readonly experimentFile: string
  readonly experiment: Experiment
  readonly variables: ReadonlyArray<Study.Variable>
  readonly variants: ReadonlyArray<Study.Variant>
  readonly baseline: Study.Variant
  readonly repeats: number
  readonly budget: { readonly perTrial: Study.BudgetFigures; readonly total: Study.BudgetFigures }
  readonly limits: {
    readonly maxTrials: number
    readonly maxPipelines: number | null
    readonly maxCalls: number | null
    readonly maxTokens: number | null
  }
  readonly stop: ReadonlyArray<Study.StopCondition>
  readonly objectives: ReadonlyArray<Study.Objective>
  readonly metrics: ReadonlyArray<Study.MetricDecl>
  /**
   * The declared metrics' output paths that could not be checked against an output Schema when
   * loading (see `Study.OutputCheck`): `Study.execute` checks them at the first succeeded pipeline.
   */
  readonly outputChecks: ReadonlyArray<Study.OutputCheck>
  /**
   * The experiments' tasks whose code could report a metric (every task but the built-in
   * `chat` and `judge`), by name: `Study.execute` names them when no pipeline reports a declared
   * objective's `from: { metric }` (since 0.14.0).
   */
  readonly reportingTasks: ReadonlyArray<string>
  /**
   * The pipeline metrics the base experiment's judge tasks report (their `metric` option; see
   * `judgeMetrics`): `Study.execute` does not watch them (since 0.15.0).
   */
  readonly judgeMetrics: ReadonlyArray<string>
  readonly analysis: {
    readonly minPairedCases: number
    readonly minRepeats: number
    readonly level: number
    readonly resamples: number
    readonly seed: number
  }
  readonly trialConcurrency: number
  readonly run: RunConfig.RunConfigInput
  readonly outputRoot: string
  readonly protocol: Study.Protocol
  readonly protocolDigest: string
  readonly protocolParts: Readonly<Record<string, string>>
  readonly previousProtocols: ReadonlyArray<Study.PreviousProtocol>
  readonly plan: Plan
  readonly pipelinesPerTrial: number | null
  /**
   * The price of a variant's model calls (USD per 1000 tokens, the dearest input and output
   * price of its calls as the run prices them: a resource's own pricing, the model profile's
   * `price`, the experiment's `pricing`), or `null` when one of its calls has none: what a
   * trial's study control falls back on for a report the run could not price.
   */
  readonly variantPrice: (variantId: string) => { readonly promptPer1k: number; readonly completionPer1k: number } | null
  readonly suiteFor: (version: number) => LoadedSuite
  readonly trialsFor: (version: number) => ReadonlyArray<Trial>
  /**
   * The names of the base experiment's evaluator tasks (`judge` among them): the judge's share
   * of a trial's `costUsd` is the cost of their calls (since 0.13.0).
   */
  readonly evaluatorTasks: ReadonlyArray<string>
  readonly warnings: ReadonlyArray<string>
  readonly unresolvedEnv: ReadonlyArray<{ readonly name: string; readonly path: string }>
  /**
   * The model endpoints the study cannot call as configured (since 0.11.0): a resource whose
   * `apiKeyEnv` names an unset or empty variable, or whose `baseUrl` is empty (an unset
   * `${VAR}`); each at its path in the experiment, naming the variable, never a value.
   * `study plan` warns about them; `study run`, `resume` and `confirm` refuse to start (exit 2)
   * rather than fail every trial and settle them as results.
   */
  readonly endpointProblems: ReadonlyArray<ConfigIssue>
  readonly describe: () => Json
}

/**
 * The default of `run.trialConcurrency`: 3 trials at once.
 *
 * @since 0.6.0
 * @category constants
 */
export const DEFAULT_TRIAL_CONCURRENCY = 3

/**
 * The code digest that marks the built-in chat task (a model-calling task for the plan).
 *
 * @since 0.6.0
 * @category constants
 */
export const CHAT_CODE_DIGEST = "assay.chat/v1"

/**
 * The code digest of the built-in `judge` task (`Judge.judge`): it calls a model too, once per
 * attempt or twice with a format repair.
 *
 * @since 0.7.0
 * @category constants
 */
export const JUDGE_CODE_DIGEST = "assay.judge/v1"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * What the shape's stand-ins put in doubt: the paths whose value was removed or stood in for
 * (their problem is the Schema's, already among `shape`), so that a later check's problem at
 * or under one of them (or at the baseline, when a variable was stood in for) is not shown.
 */
interface Guessed {
  readonly paths: ReadonlyArray<string>
  readonly shape: ReadonlySet<ConfigIssue>
  /**
   * The variables a stand-in changed (their baseline entry is judged against the stand-in:
   * not shown); `"all"` when a variable's name or the list itself was stood in for.
   */
  readonly variables?: ReadonlySet<string> | "all" | undefined
}

/** The variables of the decoded `variables` list that `guessed` paths lie in (see {@link Guessed}). */
const guessedVariables = (paths: ReadonlyArray<string>, variables: ReadonlyArray<{ readonly name: string }>): ReadonlySet<string> | "all" => {
  const out = new Set<string>()
  for (const g of paths) {
    if (!isUnderPath(g, "variables")) continue
    const m = /^variables\[(\d+)\]\.(.+)$/.exec(g)
    const v = m === null ? undefined : variables[Number(m[1])]
    if (m === null || v === undefined || m[2] === "name" || m[2]!.startsWith("name.") || m[2] === "type") return "all"
    out.add(v.name)
  }
  return out
}

const isUnderPath = (p: string, root: string): boolean => p === root || p.startsWith(`${root}.`) || p.startsWith(`${root}[`)

const invalid = (file: string, all: ReadonlyArray<ConfigIssue>, guessed?: Guessed): ConfigError => {
  const seen = new Set<string>()
  const variablesGuessed = guessed?.variables ?? (guessed?.paths.some((g) => isUnderPath(g, "variables")) === true ? "all" : new Set<string>())
  const issues = all.filter((i) => {
    const k = `${i.path}\u0000${i.message}`
    if (seen.has(k)) return false
    if (guessed !== undefined && !guessed.shape.has(i)) {
      if (guessed.paths.some((g) => isUnderPath(i.path, g))) return false
      if (variablesGuessed === "all" && isUnderPath(i.path, "baseline")) return false
      if (variablesGuessed !== "all" && [...variablesGuessed].some((name) => isUnderPath(i.path, `baseline.${name}`))) return false
    }
    seen.add(k)
    return true
  })
  return new ConfigError({
    message: `invalid study ${file}: ${issues.length} problem${issues.length === 1 ? "" : "s"}\n${
      issues.map((i) => `  ${i.path === "" ? "(file)" : i.path}: ${i.message}${i.suggestion !== undefined ? ` (${i.suggestion})` : ""}`)
        .join("\n")
    }`,
    issues
  })
}

const quoted = (names: ReadonlyArray<string>) => names.map((n) => JSON.stringify(n)).join(", ")

// ---------------------------------------------------------------------------------------------
// Variable references
// ---------------------------------------------------------------------------------------------

/** The value at a dotted path inside a variable's value (`undefined` when it leads nowhere). */
const valueAtPath = (value: Json, p: ReadonlyArray<string>): Json | undefined => {
  let v: Json | undefined = value
  for (const seg of p) {
    if (Array.isArray(v) && /^(0|[1-9][0-9]*)$/.test(seg)) v = (v as ReadonlyArray<Json>)[Number(seg)]
    else if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, seg)) {
      v = (v as Record<string, Json>)[seg]
    } else return undefined
    if (v === undefined) return undefined
  }
  return v
}

/** A value's strings with `$` doubled, so that the experiment loader's `${VAR}` expansion leaves them as they are. */
const escapeDollars = (v: Json): Json => {
  if (typeof v === "string") return v.replaceAll("$", () => "$$")
  if (Array.isArray(v)) return (v as ReadonlyArray<Json>).map(escapeDollars)
  if (v !== null && typeof v === "object") {
    const out: Record<string, Json> = {}
    for (const [k, x] of Object.entries(v)) out[k] = escapeDollars(x)
    return out
  }
  return v
}

/**
 * A copy of a document with every reference replaced by the variable's value (or the value at
 * its path) from `values`; strings of the bound values are escaped for the loader's `${VAR}`
 * expansion (a prompt may contain `$`). Task values and class instances are shared, not copied.
 *
 * @since 0.6.0
 * @category references
 */
export const bind = (doc: unknown, values: Readonly<Record<string, Json>>): unknown => {
  const visit = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(visit)
    if (isPlain(v)) {
      const target = v[VAR_KEY]
      if (typeof target === "string" && Object.keys(v).length === 1) {
        const [name, ...rest] = target.split(".")
        const value = values[name!]
        const at = value === undefined ? undefined : valueAtPath(value, rest)
        return at === undefined ? v : escapeDollars(at)
      }
      const out: Record<string, unknown> = {}
      for (const [k, x] of Object.entries(v)) out[k] = visit(x)
      return out
    }
    return v
  }
  return visit(doc)
}

/**
 * The base experiment's document as the protocol digests it: without its `run` section (a
 * study runs under its own) and with each pool reduced to its identity (no `capacity` or
 * other run configuration, `POOL_RUN_FIELDS`), as a suite member's definition digest does.
 */
const experimentIdentity = (document: Json): Json => {
  if (!isRecord(document)) return document
  const { run: _run, ...rest } = document as Record<string, Json>
  const pools = rest["pools"]
  if (!isRecord(pools)) return rest
  return { ...rest, pools: Object.fromEntries(Object.entries(pools as Record<string, Json>).map(([n, p]) => [n, poolIdentity(p)])) }
}

/**
 * The judges of a template (fanout branches included), as a study's description stores them
 * with each version: each judge task's name, the metric it reports (`null`: none) and its
 * rubric as its parameters record it (`{ id, version, criteria, instructions? }`), in task order.
 * What `StudyCatalog.inWords` compares to name a rubric's change (tester16f F5).
 */
const judgesOf = (tasks: ReadonlyArray<Task.Any>): ReadonlyArray<{ readonly task: string; readonly metric: Json; readonly rubric: Json }> =>
  tasks.flatMap((t) => {
    if (t.children.length > 0) return judgesOf(t.children)
    if (t.codeDigest !== JUDGE_CODE_DIGEST || !isRecord(t.parameters)) return []
    const p = t.parameters as Record<string, Json>
    return [{ task: t.name, metric: p["metric"] ?? null, rubric: p["rubric"] ?? null }]
  })

/**
 * The base experiment's document with each `use: judge` entry's rubric left out (its
 * `options.rubric`, or `args[0].rubric`; nested task lists too): what the experiment part of the
 * protocol is apart from its judges' rubrics, so that a rubric's change can be told from any
 * other change of the document.
 */
const withoutRubrics = (document: Json): Json => {
  const strip = (tasks: Json | undefined): Json | undefined =>
    Array.isArray(tasks)
      ? tasks.map((t) => {
        if (!isRecord(t)) return t
        const entry = t as Record<string, Json>
        if (entry["use"] !== "judge") return entry["tasks"] === undefined ? entry : { ...entry, tasks: strip(entry["tasks"]) ?? null }
        const options = entry["options"]
        const args = entry["args"]
        if (isRecord(options)) {
          const { rubric: _r, ...rest } = options as Record<string, Json>
          return { ...entry, options: rest }
        }
        if (Array.isArray(args) && isRecord(args[0])) {
          const { rubric: _r, ...rest } = args[0] as Record<string, Json>
          return { ...entry, args: [rest, ...args.slice(1)] }
        }
        return entry
      })
      : tasks
  if (!isRecord(document) || !isRecord(document["pipeline"])) return document
  const d = document as Record<string, Json>
  const pipeline = d["pipeline"] as Record<string, Json>
  return { ...d, pipeline: { ...pipeline, tasks: strip(pipeline["tasks"]) ?? null } }
}

/** Whether a pipeline of the raw experiment has a task that is code (not a built-in `use:` name). */
/** The pipeline metrics one judge task's parameters report: `metric` with one candidate, `metric.NAME` per candidate with several. */
const judgeMetricsOf = (parameters: unknown): ReadonlyArray<string> => {
  if (!isRecord(parameters)) return []
  const metric = parameters["metric"]
  if (typeof metric !== "string" || metric === "") return []
  const candidates = parameters["candidates"]
  const names = isRecord(candidates) ? Object.keys(candidates) : ["answer"]
  return names.length <= 1 ? [metric] : names.map((n) => `${metric}.${n}`)
}

/**
 * The pipeline metrics the judge tasks of a template report (fanout branches included): see
 * the judge's `metric` option (docs/judge.md).
 *
 * @param tasks a pipeline template's tasks
 * @returns the metric names, in task order
 * @since 0.9.0
 * @category metrics
 */
export const judgeMetrics = (tasks: ReadonlyArray<Task.Any>): ReadonlyArray<string> =>
  tasks.flatMap((t) => t.children.length > 0 ? judgeMetrics(t.children) : t.codeDigest === JUDGE_CODE_DIGEST ? judgeMetricsOf(t.parameters) : [])

/** The same read from an experiment document's `use: judge` entries (before it is built). */
const rawJudgeMetrics = (raw: unknown): ReadonlyArray<string> => {
  const visit = (tasks: unknown): ReadonlyArray<string> =>
    Array.isArray(tasks)
      ? tasks.flatMap((t) => {
        if (!isRecord(t)) return []
        if (t["use"] === "judge") return judgeMetricsOf(isRecord(t["options"]) ? t["options"] : Array.isArray(t["args"]) ? t["args"][0] : undefined)
        return visit(t["tasks"])
      })
      : []
  return isRecord(raw) && isRecord(raw["pipeline"]) ? visit(raw["pipeline"]["tasks"]) : []
}

/**
 * The output Schema of a judge task from its parameters: the verdict ({@link JudgeOutput})
 * with `scores`, `overall` and `reasons` narrowed to its candidates and rubric criteria, so a
 * metric's `from: { output: "overall.answer" }` is checked before the run; `undefined` when the
 * parameters do not say.
 */
const judgeOutputSchema = (parameters: Task.JsonObject): Schema.Schema.AnyNoContext | undefined => {
  const rubric = parameters["rubric"]
  const candidates = parameters["candidates"]
  if (!isRecord(rubric) || !Array.isArray(rubric["criteria"]) || !isRecord(candidates)) return undefined
  const criteria = rubric["criteria"].flatMap((c) => (isRecord(c) && typeof c["name"] === "string" ? [c["name"]] : []))
  const each = (value: Schema.Schema.AnyNoContext) => Schema.Struct(Object.fromEntries(Object.keys(candidates).map((n) => [n, value])))
  const score = Schema.NullOr(Schema.Number)
  return Schema.Struct({
    ...JudgeOutput.fields,
    scores: each(Schema.Struct(Object.fromEntries(criteria.map((c) => [c, score])))),
    overall: each(score),
    reasons: each(Schema.Struct(Object.fromEntries(criteria.map((c) => [c, Schema.String]))))
  })
}

/** Units that name a share from 0 to 1 (`unit: ratio`, the default unit of a `rate`). */
const SHARE_UNITS = new Set(["ratio", "share", "proportion", "fraction", "probability"])
/** Units that name a percentage, from 0 to 100. */
const PERCENT_UNITS = new Set(["%", "percent", "pct"])

/**
 * The values a metric can take, when the study knows them: a `rate` (a share of cases), the
 * `mean`, `p50` or `p95` of a boolean field (true counts 1, false 0), a metric declared with a
 * share's unit (`ratio`, `proportion`, ...) and a judge's overall score lie in [0, 1]; a
 * percentage's unit (`%`, `percent`) in [0, 100]; a built-in metric (a count, a cost, a
 * duration) and the `sum` of a boolean field are never below 0; `undefined` for any other
 * metric.
 */
const metricRange = (
  metric: string,
  declared: ReadonlyArray<Study.MetricDecl>,
  judged: ReadonlyArray<string>,
  booleans: ReadonlySet<string> = new Set()
): { readonly lo: number; readonly hi: number; readonly why: string } | undefined => {
  const d = declared.find((m) => m.name === metric)
  if (d !== undefined) {
    if (d.reducer === "rate") return { lo: 0, hi: 1, why: `a rate is a share of cases, from 0 to 1` }
    if (booleans.has(metric)) {
      const field = "output" in d.from ? `output.${d.from.output}` : `metric ${d.from.metric}`
      return d.reducer === "sum"
        ? { lo: 0, hi: Infinity, why: `a sum of the boolean ${field} counts the cases where it is true, never below 0` }
        : { lo: 0, hi: 1, why: `the ${d.reducer} of the boolean ${field} (true 1, false 0) is from 0 to 1` }
    }
    const unit = (d.unit ?? "").trim().toLowerCase()
    if (SHARE_UNITS.has(unit)) return { lo: 0, hi: 1, why: `a metric in unit ${d.unit} is a share, from 0 to 1` }
    if (PERCENT_UNITS.has(unit)) return { lo: 0, hi: 100, why: `a metric in unit ${d.unit} is a percentage, from 0 to 100` }
    return undefined
  }
  const builtin = Study.BUILTIN_METRICS[metric]
  if (builtin !== undefined) return { lo: 0, hi: Infinity, why: `a built-in metric (${builtin.unit}) is never below 0` }
  if (judged.includes(metric)) return { lo: 0, hi: 1, why: `a judge's overall score is from 0 to 1` }
  return undefined
}

/**
 * The declared metrics read from a boolean field of the final task's output, as its output
 * Schema says (`Task.make(..., { output })`); none when the pipeline's output has no schema.
 *
 * @param declared the study's declared metrics
 * @param schema the final task's output Schema, if any
 * @returns their names
 * @since 0.9.0
 * @category metrics
 */
export const booleanMetrics = (
  declared: ReadonlyArray<Study.MetricDecl>,
  schema: Schema.Schema.AnyNoContext | undefined
): ReadonlySet<string> =>
  new Set(
    schema === undefined
      ? []
      : declared.flatMap((m) => ("output" in m.from && m.reducer !== "rate" && OutputPath.isBooleanAt(schema, m.from.output) ? [m.name] : []))
  )

/**
 * A metric name that reads as pass@k (`pass@3`, `passAt5`, `pass_at_k`): a case passes when
 * any of its k attempts does. assay's reducers compute no such thing.
 */
const PASS_AT_K = /pass(?:@|_?at_?)(?:\d+|k)\b/i

/**
 * Warnings for a declared metric whose reducer does not compute what its name or its field
 * suggests, each saying what is computed instead:
 * - a metric named like pass@k (`pass@5`, `passAt5`) with any reducer: assay computes per
 *   pipeline (each repeat counted apart), so a `mean` or `rate` of a pass field is the share of
 *   pipelines that passed (pass@1 averaged over the trial's pipelines and then the repeats),
 *   never "any of k passed";
 * - `p50` or `p95` of a boolean field: a percentile of 0s and 1s is 0 or 1 (not a share): the
 *   share is `mean` (or `rate`).
 *
 * @param declared the study's declared metrics
 * @param booleans those read from a boolean field ({@link booleanMetrics})
 * @returns one `warning: metrics[i]...: ...` line per metric
 * @since 0.9.0
 * @category metrics
 */
export const misreadMetrics = (
  declared: ReadonlyArray<Study.MetricDecl>,
  booleans: ReadonlySet<string>
): ReadonlyArray<string> =>
  declared.flatMap((m, i) => {
    const field = "output" in m.from ? `output.${m.from.output}` : `metric ${m.from.metric}`
    if (PASS_AT_K.test(m.name)) {
      return [
        `warning: metrics[${i}].name: "${m.name}" reads as pass@k, which assay does not compute: ${m.reducer} of ${field} is ` +
          (m.reducer === "mean" || m.reducer === "rate"
            ? `the share of pipelines that pass, each repeat counted apart (pass@1, averaged over cases and then repeats)`
            : `the ${m.reducer} of ${field} over a trial's pipelines`) +
          `, not whether any of k attempts passed; name it for what it is (e.g. passRate)`
      ]
    }
    if ((m.reducer === "p50" || m.reducer === "p95") && booleans.has(m.name)) {
      return [
        `warning: metrics[${i}].reducer: the ${m.reducer} of the boolean ${field} is 0 or 1 (a percentile of false/true), not a share; ` +
          `the share of cases where it is true is reducer mean (or rate)`
      ]
    }
    return []
  })

/**
 * Warnings for the hard constraints and `metricThreshold` stops that no value of their metric
 * can meet (`accuracy >= 1.2` on a rate, `costUsd < 0`): every trial would break the
 * constraint (no candidate), or the stop would never fire. Issue 16's trial: `plan` accepted
 * them silently.
 *
 * @param objectives the study's objectives
 * @param stop its stop conditions
 * @param declared its declared metrics
 * @param judged the metrics its judge tasks report
 * @returns one `warning: PATH: ...` line per impossible condition
 * @since 0.9.0
 * @category metrics
 */
export const impossibleConstraints = (
  objectives: ReadonlyArray<Study.Objective>,
  stop: ReadonlyArray<Study.StopCondition>,
  declared: ReadonlyArray<Study.MetricDecl>,
  judged: ReadonlyArray<string>,
  booleans: ReadonlySet<string> = new Set()
): ReadonlyArray<string> => {
  const out: Array<string> = []
  const never = (metric: string, c: { readonly op: Study.Op; readonly value: number }) => {
    const r = metricRange(metric, declared, judged, booleans)
    if (r === undefined) return undefined
    const meetable = Study.constraintsCompatible(c, { op: ">=", value: r.lo }) && Study.constraintsCompatible(c, { op: "<=", value: r.hi })
    return meetable ? undefined : r.why
  }
  objectives.forEach((o, i) => {
    // a target outside the metric's values: no variant ever reaches it, the nearest bound wins
    if (o.direction === "target" && o.target !== undefined) {
      const r = metricRange(o.metric, declared, judged, booleans)
      if (r !== undefined && (o.target < r.lo || o.target > r.hi)) {
        const nearest = o.target < r.lo ? r.lo : r.hi
        out.push(
          `warning: objectives[${i}].target: ${o.metric} cannot reach ${o.target} (${r.why}): no variant ever meets the target, ` +
            `and the objective ranks variants by their distance to it as if it were ${o.target < r.lo ? "minimize" : "maximize"} (${nearest} is the nearest value); ` +
            `set a target from ${r.lo} to ${r.hi === Infinity ? "∞" : r.hi}, or use direction ${o.target < r.lo ? "minimize" : "maximize"}`
        )
      }
    }
    const c = o.hardConstraint
    if (c === undefined || c === null) return
    const why = never(o.metric, c)
    if (why !== undefined) {
      out.push(
        `warning: objectives[${i}].hardConstraint: no value of "${o.metric}" can meet ${o.metric} ${c.op} ${c.value} (${why}): ` +
          `every trial would break it and the study would have no candidate; loosen or remove the constraint`
      )
    }
  })
  stop.forEach((c, i) => {
    if (c.when !== "metricThreshold") return
    const why = never(c.metric, c)
    if (why !== undefined) {
      out.push(`warning: stop[${i}]: ${c.metric} ${c.op} ${c.value} can never hold (${why}): this condition never stops the study`)
    }
  })
  return out
}

const hasCodeTasks = (raw: unknown): boolean => {
  const visit = (tasks: unknown): boolean =>
    Array.isArray(tasks) &&
    tasks.some((t) => {
      if (!isRecord(t)) return false
      const use = t["use"]
      if (typeof use !== "string") return use !== undefined
      if (!builtinTaskNames.includes(use)) return true
      return visit(t["tasks"])
    })
  return isRecord(raw) && isRecord(raw["pipeline"]) && visit(raw["pipeline"]["tasks"])
}

/**
 * The code digests of a template's tasks, branches nested: what the protocol's `experiment` part
 * adds to the base document (a code task's body is not in the document). Independent of the
 * variables' values, which enter a task's parameters, not its code.
 */
/** File extensions of code a config may load (`use: ./tasks.ts#answer`, a source or algorithm module). */
const CODE_FILE = /\.(?:[cm]?[jt]s|tsx|jsx)$/

/**
 * The local code files a base experiment loads, with the digest of each file's content, by
 * path relative to the experiment's directory (sorted): every string of the experiment document
 * that names a file path (`./x`, `../x` or absolute, before any `#export`) with a code
 * extension and exists, and the experiment file itself when it is a module. Task functions
 * are also digested by their own source (`Task.codeDigest`), but that misses the constants and
 * helpers they use; the file's content does not. Not covered: what those files import (other
 * local files, packages), data files read at run time, environment variables.
 */
const moduleDigests = (
  raw: unknown,
  baseDir: string,
  experimentFile: string,
  isModule: boolean
): Effect.Effect<Record<string, string>, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const files = new Set<string>()
    if (isModule) files.add(experimentFile)
    const walk = (v: unknown): void => {
      if (typeof v === "string") {
        const spec = v.includes("#") ? v.slice(0, v.lastIndexOf("#")) : v
        if ((spec.startsWith("./") || spec.startsWith("../") || path.isAbsolute(spec)) && CODE_FILE.test(spec)) files.add(path.resolve(baseDir, spec))
      } else if (Array.isArray(v)) {
        for (const x of v) walk(x)
      } else if (isRecord(v)) {
        for (const x of Object.values(v)) walk(x)
      }
    }
    walk(raw)
    const out: Record<string, string> = {}
    for (const f of [...files].sort()) {
      const bytes = yield* Effect.option(fs.readFile(f))
      if (bytes._tag === "None") continue
      out[path.relative(baseDir, f) || path.basename(f)] = digest(bytes.value).slice(0, 16)
    }
    return out
  })

/** The names of the evaluator tasks (`judge`, a task made with `evaluator: true`), at any depth. */
const evaluatorNames = (tasks: ReadonlyArray<Task.Any>): Array<string> =>
  tasks.flatMap((t) => t.children.length > 0 ? evaluatorNames(t.children) : t.options.evaluator ? [t.name] : [])

const codeDigests = (tasks: ReadonlyArray<Task.Any>): Json =>
  tasks.map((t) => (t.children.length > 0 ? [t.codeDigest, codeDigests(t.children)] : t.codeDigest))

/**
 * The path a misspelled `{ $var: NAME.path }` probably meant: the first value's fields walked
 * along `path`, the first missing segment replaced by its closest field name; `undefined` when
 * no field is close.
 */
const nearestField = (values: ReadonlyArray<unknown>, path: ReadonlyArray<string>): ReadonlyArray<string> | undefined => {
  for (const value of values) {
    let at: unknown = value
    const out: Array<string> = []
    for (const segment of path) {
      if (typeof at !== "object" || at === null) break
      const fields = Object.keys(at)
      const key = fields.includes(segment) ? segment : closest(segment, fields)
      if (key === undefined) break
      out.push(key)
      at = (at as Record<string, unknown>)[key]
    }
    if (out.length === path.length && out.some((k, i) => k !== path[i])) return out
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------------------------

/** Per pipeline of one variant: model calls, attempts, tokens, per pool. */
interface PipelineFigures {
  readonly tasks: number
  readonly callsMin: number
  readonly callsMax: number
  /** the judge tasks' part of `callsMax` */
  readonly judgeCallsMax: number
  readonly attemptsMax: number
  readonly tokensMin: number
  readonly tokensMax: number | null
  /** the prompt part of `tokensMax` (always known) */
  readonly promptTokensMax: number
  /** the completion part of `tokensMax` (`null` when a chat task has no `maxTokens`) */
  readonly completionTokensMax: number | null
  /** pool -> { callsMin, callsMax, timeoutMs (the largest per-attempt timeout, or null) } */
  readonly pools: ReadonlyMap<string, { callsMin: number; callsMax: number; timeoutMs: number | null }>
}

const promptEstimate = (parameters: Task.JsonObject): number => {
  const text = (u: Json | undefined) => (typeof u === "string" ? u.replace(/\{\{[^}]*\}\}/g, "") : "")
  return Math.ceil((text(parameters["system"]) + text(parameters["template"])).length / 4)
}

/** The judge's fixed prompt: its rubric as JSON (candidates and context are row values, not counted). */
const judgePromptEstimate = (parameters: Task.JsonObject): number =>
  Math.ceil(JSON.stringify(parameters["rubric"] ?? "").length / 4)

const figuresOf = (experiment: Experiment, runMaxHandoffs: number): PipelineFigures => {
  const template = experiment.template
  const control = template.control
  const loop = control !== undefined && control.backward ? 1 + Control.effectiveLimit(control, runMaxHandoffs) : 1
  let tasks = 0
  let callsMin = 0
  let callsMax = 0
  let judgeCallsMax = 0
  let attemptsMax = 0
  let tokensMin = 0
  let tokensMax: number | null = 0
  let promptTokensMax = 0
  let completionTokensMax: number | null = 0
  const pools = new Map<string, { callsMin: number; callsMax: number; timeoutMs: number | null }>()
  const visit = (list: ReadonlyArray<Task.Any>, mult: number) => {
    for (const t of list) {
      const attempts = t.options.retry.maxAttempts
      if (t.children.length > 0) {
        visit(t.children, mult * attempts)
        continue
      }
      tasks++
      attemptsMax += attempts * mult * loop
      // the judge makes one call per attempt, two when its first answer needs a repair (whose
      // prompt also holds the first answer)
      const isJudge = t.codeDigest === JUDGE_CODE_DIGEST
      if (t.codeDigest !== CHAT_CODE_DIGEST && !isJudge) continue
      const max = attempts * mult * loop * (isJudge ? 2 : 1)
      const once = control === undefined ? 1 : 0
      callsMin += once
      callsMax += max
      if (isJudge) judgeCallsMax += max
      const prompt = isJudge ? judgePromptEstimate(t.parameters) : promptEstimate(t.parameters)
      tokensMin += once * prompt
      const maxTokens = t.parameters["maxTokens"]
      tokensMax = tokensMax === null || typeof maxTokens !== "number"
        ? null
        : tokensMax + (isJudge ? (max / 2) * (2 * prompt + 3 * maxTokens) : max * (prompt + maxTokens))
      // a judge's repair prompt holds the first answer: prompt tokens, priced as such
      promptTokensMax += max * prompt + (isJudge && typeof maxTokens === "number" ? (max / 2) * maxTokens : 0)
      completionTokensMax = completionTokensMax === null || typeof maxTokens !== "number" ? null : completionTokensMax + max * maxTokens
      const pool = t.options.resource ?? "llm"
      const p = pools.get(pool) ?? { callsMin: 0, callsMax: 0, timeoutMs: 0 }
      const timeoutMs = t.options.timeout === null ? null : Duration.toMillis(t.options.timeout)
      pools.set(pool, {
        callsMin: p.callsMin + once,
        callsMax: p.callsMax + max,
        timeoutMs: p.timeoutMs === null || timeoutMs === null ? null : Math.max(p.timeoutMs, timeoutMs)
      })
    }
  }
  visit(template.tasks, 1)
  return { tasks, callsMin, callsMax, judgeCallsMax, attemptsMax, tokensMin, tokensMax, promptTokensMax, completionTokensMax, pools }
}

/**
 * The model profile of a variant whose price its calls to the profile's model take: the last
 * model variable's (`model` the name sent, `price` or `null`), or `null` when the study has no
 * model variable.
 */
const priceOfVariant = (variables: ReadonlyArray<Study.Variable>, variant: Study.Variant) => {
  let out: {
    readonly model: string
    readonly price: { readonly promptPer1k: number; readonly completionPer1k: number } | null
  } | null = null
  for (const v of variables) {
    if (v.type !== "model") continue
    const profile = variant.values[v.name] as unknown as Study.ModelProfile
    out = { model: profile.model, price: profile.price === undefined ? null : profile.price }
  }
  return out
}

/**
 * One model call a variant's experiment can make, priced as the run will price it (see
 * `Pricing` and `AttemptContext.priceReport`): a model-calling task (`chat`, `judge`) on one
 * resource of its pool, asking `model` (the task's `model` parameter, else the resource's
 * `options.model`); `price` the resource's own pricing, else the variant's model profile
 * `price` when `model` is the profile's model (or no model is named: a judge on another model
 * is not priced at the candidate's price), else the experiment's `pricing` table for that model; `undefined`: no price.
 */
interface PricedCall {
  readonly task: string
  readonly target: string
  readonly model: string | undefined
  readonly price: Pricing.ModelPrice | undefined
}

/** The model calls of `experiment` with their prices (see {@link PricedCall}). */
const pricedCalls = (
  experiment: Experiment,
  variantProfile: ReturnType<typeof priceOfVariant>
): ReadonlyArray<PricedCall> => {
  const table = experiment.run.pricing as Pricing.PriceTable | undefined
  const profilePrice = variantProfile?.price ?? null
  const profileFor = (model: string | undefined) =>
    profilePrice === null || (model !== undefined && model !== variantProfile!.model)
      ? undefined
      : { inputPer1M: profilePrice.promptPer1k * 1000, outputPer1M: profilePrice.completionPer1k * 1000 }
  const out: Array<PricedCall> = []
  const visit = (list: ReadonlyArray<Task.Any>) => {
    for (const t of list) {
      if (t.children.length > 0) {
        visit(t.children)
        continue
      }
      if (t.codeDigest !== CHAT_CODE_DIGEST && t.codeDigest !== JUDGE_CODE_DIGEST) continue
      const pool = t.options.resource ?? "llm"
      const asked = typeof t.parameters["model"] === "string" ? t.parameters["model"] : undefined
      const resources = experiment.pools.find((p) => p.name === pool)?.resources ?? []
      for (const r of resources) {
        const fromResource = (r.options as Record<string, unknown> | undefined)?.["model"]
        const model = asked ?? (typeof fromResource === "string" ? fromResource : undefined)
        const price = Pricing.priceFor([model], undefined, r) ?? profileFor(model) ?? Pricing.priceFor([model], table)
        out.push({ task: t.name, target: `${pool}/${r.id}`, model, price })
      }
    }
  }
  visit(experiment.template.tasks)
  return out
}

/** An experiment's warning that a resource's model has no price (`unpricedModelWarnings` in build.ts). */
const EXPERIMENT_UNPRICED = /^warning: pools\.\S+\.resources\[\d+\] \(.*\): model .* has no price, so its calls will count as unpriced/

/**
 * One `warning:` line per model some variant calls without a price (no resource pricing, no
 * model profile price for it, not in the experiment's `pricing`), naming the tasks, targets
 * and variants, and the models that are priced (with a did-you-mean). Every variant's calls
 * are read as the run prices them ({@link pricedCalls}), so a model priced by its profile is
 * never named (tester16c F2). `table`: the models of the experiment's `pricing`. Empty when
 * nothing is priced at all (costs may then come from what the servers report).
 */
const unpricedModels = (
  variants: ReadonlyArray<Study.Variant>,
  pricedOf: (v: Study.Variant) => ReadonlyArray<PricedCall>,
  table: ReadonlyArray<string>
): Array<string> => {
  const priced = new Set<string>(table)
  const missing = new Map<string, { readonly where: Set<string>; readonly variants: Array<string> }>()
  for (const v of variants) {
    for (const c of pricedOf(v)) {
      if (c.price !== undefined) {
        if (c.model !== undefined) priced.add(c.model)
        continue
      }
      if (c.model === undefined) continue
      const entry = missing.get(c.model) ?? { where: new Set<string>(), variants: [] }
      entry.where.add(`task ${c.task} on ${c.target}`)
      if (!entry.variants.includes(v.id)) entry.variants.push(v.id)
      missing.set(c.model, entry)
    }
  }
  if (priced.size === 0) return []
  const names = [...priced].sort()
  return Array.from(missing, ([model, m]) => {
    const near = closest(model, names)
    return `warning: model "${model}" has no price, so its calls will count as unpriced (${[...m.where].join(", ")}; ${
      Words.labelled("variant", m.variants, { max: 5 })
    }; priced: ${names.length === 0 ? "none" : names.map((n) => `"${n}"`).join(", ")})${near === undefined ? "" : `; did you mean "${near}"?`}`
  })
}

/**
 * The cheapest and the dearest price of a variant's model calls (input and output apart: the
 * plan's cost range stays a bound), or `null` when one of them has no price.
 */
const priceRange = (
  calls: ReadonlyArray<PricedCall>
): { readonly min: Pricing.ModelPrice; readonly max: Pricing.ModelPrice } | null => {
  if (calls.length === 0 || calls.some((c) => c.price === undefined)) return null
  const prices = calls.map((c) => c.price!)
  return {
    min: { inputPer1M: Math.min(...prices.map((p) => p.inputPer1M)), outputPer1M: Math.min(...prices.map((p) => p.outputPer1M)) },
    max: { inputPer1M: Math.max(...prices.map((p) => p.inputPer1M)), outputPer1M: Math.max(...prices.map((p) => p.outputPer1M)) }
  }
}

/** The latency and rate estimate of a variant's model calls: its model profile's, else the study's `estimate`. */
const estimateOf = (
  variables: ReadonlyArray<Study.Variable>,
  variant: Study.Variant,
  estimate: { readonly latency?: { readonly min: string; readonly max: string } | undefined; readonly requestsPerMinute?: number | undefined } | undefined
) => {
  let latency = estimate?.latency
  let rpm = estimate?.requestsPerMinute
  for (const v of variables) {
    if (v.type !== "model") continue
    const profile = variant.values[v.name] as unknown as Study.ModelProfile
    if (profile.latency !== undefined) latency = profile.latency
    if (profile.requestsPerMinute !== undefined) rpm = profile.requestsPerMinute
  }
  const ms = (s: string) => Duration.toMillis(Duration.decode(s as Duration.DurationInput))
  return {
    latency: latency === undefined ? undefined : { min: ms(latency.min), max: ms(latency.max) },
    rpm
  }
}


// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/**
 * Whether a file is a study file: its document has a top-level `study` (read as
 * `parse.hasTopLevelKey` reads it: a file refused only for a duplicate key still counts).
 * Never fails.
 *
 * @since 0.6.0
 * @category loading
 */
export const isStudyFile = (file: string): Effect.Effect<boolean, never, FileSystem.FileSystem> =>
  parse.hasTopLevelKey(file, "study")

/**
 * The study file's own hint for an entry written as a bare name where an object belongs
 * (`objectives: [costUsd]`): `write { metric: costUsd, direction: minimize }` (a built-in
 * metric's direction, else maximize); `metrics: [accuracy]`: `write { name: accuracy, reducer:
 * mean, from: { output: FIELD } }`. Any other issue is returned as it is.
 */
const bareEntryHint = (doc: unknown) => (i: ConfigIssue): ConfigIssue => {
  const direction = /^objectives\[(\d+)\]\.direction$/.exec(i.path)
  if (direction !== null && i.message === "is missing" && i.suggestion === undefined) return missingDirectionHint(doc, Number(direction[1]), i)
  const m = /^(objectives|metrics)\[(\d+)\]$/.exec(i.path)
  if (m === null || i.suggestion !== undefined || !i.message.startsWith("expected an object")) return i
  const list = isRecord(doc) ? doc[m[1]!] : undefined
  const name = Array.isArray(list) ? list[Number(m[2])] as unknown : undefined
  if (typeof name !== "string" || name === "") {
    // (tester16g F9: a number or a list where an objective belongs: the other form is said too)
    return m[1] === "objectives" && typeof name !== "string"
      ? { ...i, message: i.message.replace(/^expected (an object \{[^}]*\})/, "expected $1 or a metric's name alone (its own direction)") }
      : i
  }
  return {
    ...i,
    suggestion: m[1] === "objectives"
      ? `write { metric: ${name}, direction: ${Study.BUILTIN_METRICS[name]?.direction ?? "maximize"} }`
      : `write { name: ${name}, reducer: mean, from: { output: FIELD } }`
  }
}

/**
 * What to write for an objective `{ metric }` without a direction (tester16g F9: a bare "is
 * missing" before): the three directions, and, when the metric has a direction of its own (a
 * built-in metric's, or its `metrics:` entry's), that its name alone reads that direction.
 */
const missingDirectionHint = (doc: unknown, index: number, i: ConfigIssue): ConfigIssue => {
  const objectives = isRecord(doc) ? doc["objectives"] : undefined
  const entry = Array.isArray(objectives) ? objectives[index] as unknown : undefined
  const metric = isRecord(entry) && typeof entry["metric"] === "string" ? entry["metric"] : undefined
  if (metric === undefined) return i
  const declared = isRecord(doc) && Array.isArray(doc["metrics"]) ? doc["metrics"].filter(isRecord).find((m) => m["name"] === metric) : undefined
  const own = declared === undefined ? Study.BUILTIN_METRICS[metric]?.direction : declared["direction"]
  return {
    ...i,
    message: `is missing: which way "${metric}" is better is not given`,
    suggestion: `write direction: maximize, minimize, or target with target: VALUE` +
      (own === "maximize" || own === "minimize" ? ` (or the objective as "${metric}" alone: its metric's own direction, ${own})` : "")
  }
}

/**
 * The objectives written as a metric's name alone (`objectives: [accuracy, costUsd]`), read as
 * that metric's objective in the metric's own direction (tester16f F3): a built-in metric's
 * (`costUsd`, `latencyP95Ms`, ... minimize), or the `direction` its entry under `metrics:`
 * declares (`maximize` or `minimize`). A name whose metric declares no direction (a metric a
 * task reports, one declared without `direction`, a judge's score) is refused at
 * `objectives[i]` with what to write; so is one declared `direction: target` (a bare name
 * gives no target value). Each refused entry is stood in for by `{ metric, direction:
 * maximize }` so that the checks after the shape still run on it (an unknown name is said
 * too). Runs on the document as written, before its Schema: every other entry is left as it is.
 *
 * @returns the document with the bare names replaced, and the refusals
 */
const readBareObjectives = (doc: unknown): { readonly doc: unknown; readonly issues: ReadonlyArray<ConfigIssue> } => {
  if (!isRecord(doc) || !Array.isArray(doc["objectives"]) || !doc["objectives"].some((o) => typeof o === "string" && o !== "")) {
    return { doc, issues: [] }
  }
  const declared = Array.isArray(doc["metrics"]) ? doc["metrics"].filter(isRecord) : []
  const issues: Array<ConfigIssue> = []
  const objectives = (doc["objectives"] as ReadonlyArray<unknown>).map((o, i) => {
    if (typeof o !== "string" || o === "") return o
    const at = `objectives[${i}]`
    const entry = declared.find((m) => m["name"] === o)
    const own = entry === undefined ? Study.BUILTIN_METRICS[o]?.direction : entry["direction"]
    if (own === "maximize" || own === "minimize") return { metric: o, direction: own }
    const write = `write { metric: ${o}, direction: maximize } or { metric: ${o}, direction: minimize }`
    const near = entry === undefined
      ? closest(o, [...Object.keys(Study.BUILTIN_METRICS), ...declared.map((m) => m["name"]).filter((n): n is string => typeof n === "string")])
      : undefined
    if (own === "target") {
      issues.push(issue(at, `"${o}" alone: metric "${o}" is declared direction target, and a name alone gives no target value`, `write { metric: ${o}, direction: target, target: VALUE }`))
    } else if (entry !== undefined) {
      issues.push(issue(
        at,
        `"${o}" alone: metric "${o}" declares no direction (its metrics entry has none), so which way is better is not known`,
        `${write}, or give its metrics entry a direction`
      ))
    } else if (near !== undefined) {
      // a misspelt metric (`costusd`): the name it misspells first, not a direction for a metric
      // nothing may report (tester16g F3). With a metrics section the check of every objective's
      // metric says it (`unknown metric …: did you mean …?`, once judges are read): not twice
      if (doc["metrics"] === undefined) {
        issues.push(issue(
          at,
          `"${o}" alone: no built-in or declared metric is named "${o}"`,
          `did you mean ${near}? (if a task or judge reports "${o}", ${write})`
        ))
      }
    } else {
      issues.push(issue(
        at,
        `"${o}" alone: metric "${o}" declares no direction (it is not a built-in metric nor declared with a direction under metrics), so which way is better is not known`,
        `${write}, or declare it under metrics with a direction`
      ))
    }
    return { metric: o, direction: "maximize" }
  })
  return { doc: { ...doc, objectives }, issues }
}

/**
 * What a template's tasks can lease: each task's pool (its `resource`, the pipeline's when it
 * names none; fanout branches included) and, for a task that gives one, its `selector` (the
 * `chat` and `judge` tasks' option): a resource of another pool, or one the selector does not
 * match, is never leased by that task.
 */
export const leasesOf = (tasks: ReadonlyArray<Task.Any>): Array<{ readonly pool: string; readonly selector: Selector | undefined }> =>
  tasks.flatMap((t) => {
    const own = t.options.resource === null ? [] : [{
      pool: t.options.resource,
      selector: ((t.parameters as { readonly selector?: Selector | null } | null)?.selector) ?? undefined
    }]
    return [...own, ...leasesOf(t.children)]
  })

/**
 * The endpoints of an experiment's pools that cannot be called as configured: `apiKeyEnv`
 * (`api_key_env`) naming an unset or empty variable of `env`; a `baseUrl` (`base_url`) that is
 * empty, with the unset variable that emptied it when `unresolved` names one under it. Only
 * the resources some task can lease (`leases`, see {@link leasesOf}: its pool, and its selector
 * when it has one) are looked at: a pool no task uses is never called.
 */
export const endpointProblems = (
  pools: ReadonlyArray<{ readonly name: string; readonly resources: ReadonlyArray<ResourceInfo> }>,
  env: Readonly<Record<string, string | undefined>>,
  unresolved: ReadonlyArray<{ readonly name: string; readonly path: string }>,
  rel: string,
  leases: ReadonlyArray<{ readonly pool: string; readonly selector: Selector | undefined }>
): Array<ConfigIssue> => {
  // one problem per unset key variable, naming every resource that reads it (tester16b N9):
  // its message is written once every resource has been seen
  const unsetKeys = new Map<string, { readonly places: Array<string>; readonly set: boolean }>()
  const keyIssue = (name: string, entry: { readonly places: Array<string>; readonly set: boolean }): ConfigIssue => ({
    path: "protocol.experiment",
    get message() {
      return `${rel}: ${entry.places.join(", ")}: environment variable ${name} (the key) is ${entry.set ? "empty" : "not set"}: every call to ${
        entry.places.length === 1 ? "this endpoint" : `these ${entry.places.length} endpoints`
      } would fail`
    },
    suggestion: `export ${name}=...`
  })
  return pools.flatMap((pool) =>
    pool.resources.flatMap((r, j) => {
      const leased = leases.some((l) => l.pool === pool.name && (l.selector === undefined || Resource.matches(l.selector, r)))
      if (!leased) return []
      const at = `pools.${pool.name}.resources[${j}].options`
      const out: Array<ConfigIssue> = []
      for (const k of ["apiKeyEnv", "api_key_env"]) {
        const name = r.options[k]
        if (typeof name !== "string" || name === "") continue
        const value = env[name]
        if (value === undefined || value === "") {
          const seen = unsetKeys.get(name)
          if (seen !== undefined) {
            seen.places.push(`${at}.${k}`)
            continue
          }
          const entry = { places: [`${at}.${k}`], set: value !== undefined }
          unsetKeys.set(name, entry)
          out.push(keyIssue(name, entry))
        }
      }
      for (const k of ["baseUrl", "base_url"]) {
        if (r.options[k] !== "") continue
        const why = unresolved.find((u) => u.path.endsWith(`.${k}`) || u.path.includes(`.${k}.`))
        out.push(issue(
          "protocol.experiment",
          `${rel}: ${at}.${k}: is empty${why === undefined ? "" : ` (environment variable ${why.name} is not set)`}: every call to this endpoint would fail`,
          why === undefined ? undefined : `export ${why.name}=http://...`
        ))
      }
      return out
    })
  ).map((i) => ({ ...i }))
}

/** `variables[1].vals` → ["variables", 1, "vals"] (the paths `decodeIssues` writes). */
const pathSegments = (p: string): Array<string | number> =>
  Array.from(p.matchAll(/([^.[\]]+)|\[(\d+)\]/g), (m) => m[2] !== undefined ? Number(m[2]) : m[1]!)

/**
 * The study document with its shape problems repaired as their suggestions say, so that the
 * checks after the shape (references, the experiment, output paths) can run in the same pass
 * and every problem of the file is reported at once: an unknown key is dropped, or renamed to
 * the missing key it misspells (`questoin` → `question`); a value outside its choices takes the
 * suggested one (`compair` → `compare`). A problem with no such repair is left as it is, for
 * `standIn`; `undefined` when the document cannot be copied. The repaired document is never
 * run: the issues stay, and the load fails with them.
 */
const repairShape = (doc: unknown, issues: ReadonlyArray<ConfigIssue>): unknown => {
  let copy: unknown
  try {
    copy = structuredClone(doc)
  } catch {
    return undefined
  }
  const parentOf = (segs: ReadonlyArray<string | number>): Record<string, unknown> | undefined => {
    let at: unknown = copy
    for (const s of segs.slice(0, -1)) at = isRecord(at) || Array.isArray(at) ? (at as Record<string | number, unknown>)[s] : undefined
    return isRecord(at) ? at : Array.isArray(at) ? at as unknown as Record<string, unknown> : undefined
  }
  const renamed = new Set<string>()
  // first the renames a missing key asks for (`found "typ": did you mean type?`)
  for (const i of issues) {
    const found = /^found "([^"]+)": did you mean ([\w$]+)\?$/.exec(i.suggestion ?? "")
    if (i.message !== "is missing") continue
    const segs = pathSegments(i.path)
    const parent = parentOf(segs)
    const key = String(segs[segs.length - 1])
    const unknownNear = found?.[1] ?? issues.find((j) => j.message.startsWith("unknown key") && j.suggestion === `did you mean ${key}?` && pathSegments(j.path).slice(0, -1).join("\u0000") === segs.slice(0, -1).join("\u0000"))?.path
    // else the one unknown key beside it (`vals` where `values` is missing)
    const beside = issues.filter((j) => j.message.startsWith("unknown key") && pathSegments(j.path).slice(0, -1).join("\u0000") === segs.slice(0, -1).join("\u0000"))
    const only = unknownNear ?? (beside.length === 1 ? beside[0]!.path : undefined)
    const stray = found !== null && found !== undefined ? found[1] : only === undefined ? undefined : String(pathSegments(only).at(-1))
    // no stray key to read it from: left to standIn
    if (parent === undefined || stray === undefined || !(stray in parent)) continue
    parent[key] = parent[stray]
    delete parent[stray]
    renamed.add(formatPath([...segs.slice(0, -1), stray]))
  }
  for (const i of issues) {
    if (i.message === "is missing") continue
    const segs = pathSegments(i.path)
    const parent = parentOf(segs)
    if (parent === undefined) return undefined
    const key = segs[segs.length - 1]!
    // an unknown key, or one another kind of entry takes (`values` on a boolean variable)
    if (i.message.startsWith("unknown key") || /^an? .* takes no \S+$/.test(i.message)) {
      // a misspelt optional key (`objectivs`) is read as the key it misspells, when that one is
      // not written too, so that what it holds is checked in the same pass
      const meant = /^did you mean ([\w$]+)\?$/.exec(i.suggestion ?? "")?.[1]
      if (!renamed.has(i.path) && meant !== undefined && !(meant in parent)) parent[meant] = parent[key as string]
      if (!renamed.has(i.path)) delete parent[key as string]
      continue
    }
    const suggested = /^did you mean ("(?:[^"\\]|\\.)*")\?$/.exec(i.suggestion ?? "")
    // no suggestion (a value out of its range, a number where a list belongs): left to standIn
    if (suggested === null) continue
    parent[key as string] = JSON.parse(suggested[1]!) as unknown
  }
  return copy
}

/** What tells two problems apart: their path and message. */
const issueKey = (i: ConfigIssue): string => `${i.path}\u0000${i.message}`

/** Stand-ins for a required value removed by `standIn`, tried in order. */
const STAND_INS: ReadonlyArray<unknown> = [1, "x", true, [], {}]

/**
 * The document with every value its Schema still refuses removed (an optional field: its
 * default applies) or stood in for (a required one: the first of `STAND_INS` its Schema takes),
 * so that the checks after the shape run on what is left: `repeats: 0` beside a misspelt
 * baseline value reports both. Returns the paths removed or stood in for (problems a later check
 * finds at or under them are the stand-in's, not the file's, and are not shown) and `later`: the
 * problems the Schema finds only once a value is removed or stood in for (an object's own rule,
 * which runs once its fields decode), except those at or under a removed path or beside a
 * stand-in; or `undefined` when a problem sits in a list's element or has no path (nothing
 * sensible to stand in).
 */
const standIn = (
  doc: unknown,
  decode: (u: unknown) => Either.Either<unknown, ParseResult.ParseError>
): { readonly doc: unknown; readonly guessed: ReadonlyArray<string>; readonly later: ReadonlyArray<ConfigIssue> } | undefined => {
  const guessed: Array<string> = []
  // stood in for (a required value): a later problem beside or under one is the stand-in's
  const stood: Array<string> = []
  const later: Array<ConfigIssue> = []
  const choicesAt = new Map<string, ReadonlyArray<unknown>>()
  for (let round = 0; round < 8; round++) {
    const r = decode(doc)
    if (Either.isRight(r)) return { doc, guessed, later }
    if (round > 0) {
      for (const i of decodeIssues(r.left, doc, StudyFile)) {
        const parent = formatPath(pathSegments(i.path).slice(0, -1))
        if (guessed.some((g) => isUnderPath(i.path, g)) || stood.some((g) => isUnderPath(g, parent) && parent !== "")) continue
        later.push(i)
      }
    }
    const all = ParseResult.ArrayFormatter.formatErrorSync(r.left)
    // a union of choices refuses a value once per choice (`Expected "explore", actual
    // "comparison"`, `Expected "compare", …`): the value is removed once, and a required one
    // stands in with one of those choices (no generic stand-in is a choice)
    const done = new Set<string>()
    for (const i of all) {
      if (i.path.length === 0) return undefined
      const at = formatPath(i.path)
      if (done.has(at)) continue
      done.add(at)
      const choices = choicesAt.get(at) ?? all.flatMap((j) => {
        if (formatPath(j.path) !== at) return []
        // `Expected "a", actual …` once per choice, or a tagged union's `Expected "a" | "b", actual …`
        const one = literalExpected.exec(j.message)
        if (one !== null) return [JSON.parse(one[1]!) as unknown]
        const many = /^Expected ("(?:[^"\\]|\\.)*"(?: \| "(?:[^"\\]|\\.)*")+), actual /.exec(j.message)
        return many === null ? [] : many[1]!.split(" | ").map((l) => JSON.parse(l) as unknown)
      })
      // kept for the next round, where the removed value is "missing"
      if (choices.length > 0) choicesAt.set(at, choices)
      const last = i.path[i.path.length - 1]!
      let parent: unknown = doc
      for (const s of i.path.slice(0, -1)) parent = isRecord(parent) || Array.isArray(parent) ? (parent as Record<PropertyKey, unknown>)[s] : undefined
      if (!isRecord(parent) || typeof last !== "string") return undefined
      if (i._tag === "Missing" || !(last in parent)) {
        // a required value (missing, or removed by this repair; or one an object's own rule
        // asks for, a target objective's `target`): the first stand-in its Schema takes at
        // that path (an object's own fields are stood in for in the next round)
        const fits = [...STAND_INS, ...choices].find((v) => {
          parent[last] = v
          const again = decode(doc)
          return Either.isRight(again) || !ParseResult.ArrayFormatter.formatErrorSync(again.left).some((j) => formatPath(j.path) === at)
        })
        if (fits === undefined) return undefined
        parent[last] = fits
        if (!guessed.includes(at)) guessed.push(at)
        if (!stood.includes(at)) stood.push(at)
      } else {
        if (!guessed.includes(at)) guessed.push(at)
        delete parent[last]
      }
    }
  }
  return undefined
}

const shown = (u: unknown): string => {
  const s = typeof u === "string" ? JSON.stringify(u) : Either.getOrElse(Either.try(() => canonicalJsonUnsafe(u)), () => String(u))
  return s.length > 60 ? `${s.slice(0, 57)}...` : s
}

/** The choices of a variable as the baseline writes them, for messages. */
const choicesText = (v: Study.Variable): string => {
  const n = Study.valueCount(v)
  const first = Array.from({ length: Math.min(n, 8) }, (_, k) => shown(Study.choiceAt(v, k).assignment))
  return `${first.join(", ")}${n > 8 ? `, ... (${n} values)` : ""}`
}

/**
 * Loads and checks a study file and its base experiment, and plans it. See `config/Study.ts`
 * and `docs/studies.md` for the rules; every problem is reported at once in one `ConfigError`
 * with field paths (a problem of the base experiment under `protocol.experiment`, naming the
 * experiment file and its own field path).
 *
 * @since 0.6.0
 * @category loading
 */
export const load = (
  file: string,
  options: StudyLoadOptions = {}
): Effect.Effect<LoadedStudy, ConfigError, FileSystem.FileSystem> =>
  // the strings that took a value from `${VAR}` are hidden again in any problem it fails with
  hidingEnvValuesOf(options.env ?? process.env, (interpolated) =>
  Effect.gen(function*() {
    const abs = path.resolve(file)
    if (parse.formatOf(abs) === undefined) {
      return yield* invalid(abs, [issue("", `unknown study format "${path.extname(abs)}"`, "use .json, .toml, .yaml/.yml or .ts")])
    }
    const read = yield* Effect.mapError(parse.read(abs), (e) => e.issues.some((i) => i.line !== undefined) ? e : invalid(abs, e.issues))
    const { baseDir, format } = read
    const env = options.env ?? process.env
    const issues: Array<ConfigIssue> = []
    const warnings: Array<string> = []
    const unresolved: Array<{ name: string; path: string }> = []
    const emptyEnv: Array<{ name: string; path: string }> = []
    const expanded = expandEnv(read.raw, env, unresolved, [], emptyEnv, interpolated)
    if (options.strictEnv === true) {
      for (const u of unresolved) issues.push(issue(u.path, `environment variable ${u.name} is not set (--strict-env)`))
      for (const u of emptyEnv) issues.push(issue(u.path, `environment variable ${u.name} is set but empty (--strict-env)`))
    }
    if (!isRecord(expanded)) {
      return yield* invalid(abs, [issue("", "a study file is an object with study, protocol, variables, ...")])
    }
    if (expanded["study"] === undefined) {
      const kind = expanded["suite"] !== undefined ? "a suite file" : expanded["pipeline"] !== undefined ? "an experiment file" : undefined
      if (kind !== undefined) {
        return yield* invalid(abs, [issue("study", `is missing: this is ${kind}, not a study file`, "a study file has study: { id, question }, protocol: { experiment: FILE } and variables")])
      }
    }
    const rawRun = isRecord(expanded["run"]) ? expanded["run"] : undefined
    const runStore = rawRun?.["store"]
    // an objective written as a metric's name alone is read in the metric's own direction (F3)
    const bare = readBareObjectives(runStore === undefined ? expanded : { ...expanded, run: Object.fromEntries(Object.entries(rawRun!).filter(([k]) => k !== "store")) })
    const shaped = bare.doc
    if (runStore !== undefined) {
      issues.push(issue("run.store", "is refused in a study: output.root is the study's one storage entry", "remove run.store and set output.root"))
    }
    issues.push(...bare.issues)
    const decode = Schema.decodeUnknownEither(StudyFile, { errors: "all", onExcessProperty: "error" })
    let strict = decode(shaped)
    // shape problems first; when each has an obvious repair (a misspelt key or choice), the
    // checks after the shape run on the repaired document too, so that one pass reports every
    // problem of the file (a typo in study.type and one in an objective's metric at once)
    // a value out of its range (`repeats: 0`) or of the wrong type has no obvious repair: it is
    // removed or stood in for, and what a later check finds there is not shown (`guessed`)
    let guessed: Guessed | undefined
    if (Either.isLeft(strict)) {
      const shapeIssues = decodeIssues(strict.left, shaped, StudyFile).map(bareEntryHint(shaped))
      const said = new Set(shapeIssues.map(issueKey))
      // repaired round by round: a section read under the key it misspells (`objectivs:`) is
      // decoded only once renamed, and an object's own rule (a target on a minimize objective)
      // runs only once its fields decode: what each round newly finds is the file's too (F1)
      let current: unknown = shaped
      let round: ReadonlyArray<ConfigIssue> = shapeIssues
      for (let k = 0; k < 6; k++) {
        const repaired = repairShape(current, round)
        if (repaired === undefined) break
        current = repaired
        const again = decode(repaired)
        if (Either.isRight(again)) break
        round = decodeIssues(again.left, repaired, StudyFile).map(bareEntryHint(repaired))
        const fresh = round.filter((i) => !said.has(issueKey(i)))
        if (fresh.length === 0) break
        for (const i of fresh) said.add(issueKey(i))
        shapeIssues.push(...fresh)
      }
      const stood = standIn(current, decode)
      // what the Schema finds only once a value is removed or stood in for (an object's rule,
      // a later field): the file's own, unless it sits beside or under a stand-in
      if (stood !== undefined) {
        for (const i of stood.later) {
          if (said.has(issueKey(i))) continue
          said.add(issueKey(i))
          shapeIssues.push(i)
        }
      }
      issues.push(...shapeIssues)
      strict = stood === undefined ? strict : decode(stood.doc)
      if (stood !== undefined && stood.guessed.length > 0) {
        const variables = Either.isRight(strict) ? guessedVariables(stood.guessed, strict.right.variables ?? []) : "all"
        guessed = { paths: stood.guessed, shape: new Set(shapeIssues), variables }
      }
    }
    if (Either.isLeft(strict)) return yield* invalid(abs, issues, guessed)
    const doc = strict.right
    const studyId = doc.study.id
    const variables = doc.variables ?? []
    const repeats = doc.repeats ?? 1
    const type = doc.study.type ?? "explore"

    // variables: unique names, distinct values, ranges that go somewhere
    const seenNames = new Map<string, number>()
    variables.forEach((v, i) => {
      const at = `variables[${i}]`
      const first = seenNames.get(v.name)
      if (first !== undefined) issues.push(issue(`${at}.name`, `variable "${v.name}" is declared twice (first at variables[${first}])`))
      else seenNames.set(v.name, i)
      switch (v.type) {
        case "range":
          if (v.end < v.start) issues.push(issue(`${at}.end`, `must be >= start (${v.start}), got ${v.end}`))
          break
        case "prompt":
        case "model":
          if (Object.keys(v.values).length === 0) issues.push(issue(`${at}.values`, `a ${v.type} variable needs at least one named value`))
          break
        case "enum":
        case "set": {
          const seen = new Map<string, number>()
          v.values.forEach((x, k) => {
            const key = canonicalJsonUnsafe(x)
            const j = seen.get(key)
            if (j !== undefined) issues.push(issue(`${at}.values[${k}]`, `repeats values[${j}] (${shown(x)})`))
            else seen.set(key, k)
          })
        }
      }
    })
    const names = variables.map((v) => v.name)

    // baseline
    let baselinePositions: Array<number> | undefined
    if (doc.baseline !== undefined) {
      const positions: Array<number> = []
      let ok = true
      for (const key of Object.keys(doc.baseline)) {
        if (!names.includes(key)) {
          ok = false
          const near = closest(key, names)
          issues.push(issue(`baseline.${key}`, `no variable "${key}"`, near !== undefined ? `did you mean "${near}"?` : names.length > 0 ? `variables: ${quoted(names)}` : "declare it under variables"))
        }
      }
      for (const v of variables) {
        const value = doc.baseline[v.name]
        // a variable with no value (a range whose end is below its start) has its own problem:
        // no baseline value can be checked against it, nor its choices listed (F8)
        if (Study.valueCount(v) === 0) {
          ok = false
          continue
        }
        if (value === undefined) {
          ok = false
          issues.push(issue(`baseline.${v.name}`, "is missing: the baseline gives every variable a value", `one of: ${choicesText(v)}`))
          continue
        }
        const k = Study.indexOfAssignment(v, value)
        if (k === -1) {
          ok = false
          const strings = v.type === "prompt" || v.type === "model"
            ? Object.keys(v.values)
            : v.type === "enum"
            ? v.values.filter((a): a is string => typeof a === "string")
            : []
          const near = typeof value === "string" ? closest(value, strings) : undefined
          issues.push(issue(
            `baseline.${v.name}`,
            `${shown(value)} is not a value of variable "${v.name}": the baseline must be one of the variants`,
            near !== undefined ? `did you mean ${JSON.stringify(near)}?` : `one of: ${choicesText(v)}${v.type === "set" ? " (a set takes the index or the list)" : ""}`
          ))
        }
        positions.push(k)
      }
      if (ok) baselinePositions = positions
    } else if (variables.length > 0) {
      if (type === "compare") {
        // a value is suggested only from a variable that has one (never from a range whose end
        // is below its start, reported above): the others are named, to be filled in once fixed
        const valid = variables.filter((v) => Study.valueCount(v) > 0)
        const pending = variables.filter((v) => Study.valueCount(v) === 0).map((v) => v.name)
        issues.push(issue(
          "baseline",
          "is missing: a compare study names its baseline (variable name -> value)",
          `baseline: { ${valid.map((v) => `${v.name}: ${shown(Study.choiceAt(v, 0).assignment)}`).join(", ")} }${
            pending.length === 0 ? "" : `, and a value of ${pending.join(", ")} once ${pending.length === 1 ? "its values are" : "their values are"} fixed`
          }`
        ))
      } else {
        warnings.push("warning: baseline: not given; the first variant (v01) is the baseline")
        baselinePositions = variables.map(() => 0)
      }
    } else baselinePositions = []

    // budgets, stop conditions
    const perTrial = Study.budgetFigures(doc.budget?.perTrial)
    const total = Study.budgetFigures(doc.budget?.total)
    const models = variables.filter((v): v is Extract<Study.Variable, { type: "model" }> => v.type === "model")
    // a costUsd budget or objective needs a price for every model the study can call: checked
    // once the variants' experiments are built (their pools and pricing), below
    const costPaths = [
      ...(["perTrial", "total"] as const).flatMap((which) => (which === "perTrial" ? perTrial : total).costUsd === undefined ? [] : [`budget.${which}.costUsd`]),
      ...(doc.objectives ?? []).flatMap((o, i) => (o.metric === "costUsd" ? [`objectives[${i}].metric`] : []))
    ]
    const stop = doc.stop ?? []
    stop.forEach((s, i) => {
      if (s.when === "budget" && Object.keys(total).length === 0) {
        issues.push(issue(`stop[${i}]`, "a budget stop condition needs budget.total (calls, tokens, costUsd or time)", "budget: { total: { calls: 10000 } }"))
      }
    })

    // metrics, objectives
    const declaredMetrics = doc.metrics ?? []
    const metricNames = new Map<string, number>()
    declaredMetrics.forEach((m, i) => {
      const at = `metrics[${i}]`
      if (Study.BUILTIN_METRICS[m.name] !== undefined) {
        issues.push(issue(`${at}.name`, `"${m.name}" is a built-in metric (${Study.BUILTIN_METRIC_NAMES.join(", ")}): objectives name it without declaring it`))
      }
      const first = metricNames.get(m.name)
      if (first !== undefined) issues.push(issue(`${at}.name`, `metric "${m.name}" is declared twice (first at metrics[${first}])`))
      else metricNames.set(m.name, i)
    })
    // a declared metric's own `direction: target` has no value to aim at: only an objective
    // gives one, and without it the comparison and its worst/best cases read higher as better
    // (tester16d F2): said at the metric's path, with the objective that would give the target
    declaredMetrics.forEach((m, i) => {
      if (m.direction !== "target" || (doc.objectives ?? []).some((o) => o.metric === m.name)) return
      warnings.push(
        `warning: metrics[${i}].direction: "${m.name}" is declared direction target, but no objective gives it a target value: ` +
          `its comparisons and worst/best cases read higher as better (as maximize); give it an objective ` +
          `({ metric: ${m.name}, direction: target, target: VALUE }) or declare direction maximize or minimize`
      )
    })
    // a metric a judge task reports (its `metric` option) is known too: the problems of a
    // metric not otherwise known wait until the base experiment's judges are read
    const unknownMetrics: Array<{ readonly metric: string; readonly report: (reported: ReadonlyArray<string>) => void }> = []
    const settleUnknownMetrics = (reported: ReadonlyArray<string>) => {
      for (const u of unknownMetrics.splice(0)) if (!reported.includes(u.metric)) u.report(reported)
    }
    if (doc.metrics !== undefined) {
      // with a metrics section, every objective names a declared, built-in or judge's metric
      // (each name once: a declared metric may take a built-in's name, refused above)
      const known = [...new Set([...metricNames.keys(), ...Study.BUILTIN_METRIC_NAMES])]
      ;(doc.objectives ?? []).forEach((o, i) => {
        if (known.includes(o.metric)) return
        unknownMetrics.push({
          metric: o.metric,
          report: (reported) => {
            const near = closest(o.metric, [...known, ...reported])
            const perCandidate = reported.filter((r) => r.startsWith(`${o.metric}.`))
            issues.push(issue(
              `objectives[${i}].metric`,
              `unknown metric "${o.metric}": not declared under metrics, not built in and not reported by a judge task`,
              perCandidate.length > 0
                ? `the judge reports one score per candidate: name one of ${quoted(perCandidate)}, or declare a metric that reads them (metrics: [{ name: ${o.metric}, reducer: mean, from: { metric: ${perCandidate[0]} } }])`
                : near !== undefined
                ? `did you mean "${near}"?`
                : `declare it under metrics (metrics: [{ name: ${o.metric}, reducer: mean, from: { output: FIELD } }]) or give a judge task metric: ${o.metric}; known: ${quoted([...new Set([...known, ...reported])])}`
            ))
          }
        })
      })
    }
    // one objective per metric: a metric named twice would count twice in the Pareto front and
    // the ranking, and two hard constraints on it may contradict each other (>= 0.9 and <= 0.5:
    // every trial would break one): refused, with the constraints when both have one
    {
      const firstAt = new Map<string, number>()
      ;(doc.objectives ?? []).forEach((o, i) => {
        const first = firstAt.get(o.metric)
        if (first === undefined) {
          firstAt.set(o.metric, i)
          return
        }
        const a = doc.objectives![first]!.hardConstraint
        const b = o.hardConstraint
        const both = a !== undefined && a !== null && b !== undefined && b !== null
        const contradict = both && !Study.constraintsCompatible(a, b)
        issues.push(issue(
          `objectives[${i}].metric`,
          `metric "${o.metric}" is already an objective (objectives[${first}])${
            contradict ? `, and the two hard constraints contradict each other (${o.metric} ${a.op} ${a.value} and ${o.metric} ${b.op} ${b.value}: no value meets both)` : ""
          }`,
          "give each metric one objective, with at most one hardConstraint"
        ))
      })
    }
    // a metricThreshold stop names a metric as an objective does (a misspelt one could never fire)
    {
      const objectiveMetrics = (doc.objectives ?? []).map((o) => o.metric)
      const known = doc.metrics !== undefined
        ? [...new Set([...metricNames.keys(), ...Study.BUILTIN_METRIC_NAMES])]
        : [...new Set([...objectiveMetrics, ...Study.BUILTIN_METRIC_NAMES])]
      stop.forEach((c, i) => {
        if (c.when !== "metricThreshold" || known.includes(c.metric)) return
        unknownMetrics.push({
          metric: c.metric,
          report: (reported) => {
            const near = closest(c.metric, [...known, ...reported])
            if (doc.metrics !== undefined) {
              issues.push(issue(
                `stop[${i}].metric`,
                `unknown metric "${c.metric}": not declared under metrics, not built in and not reported by a judge task (the condition could never fire)`,
                near !== undefined ? `did you mean "${near}"?` : `metrics: ${quoted([...new Set([...known, ...reported])])}`
              ))
            } else {
              // without a metrics section a task may report any name: a warning, not a refusal
              warnings.push(
                `warning: stop[${i}].metric: "${c.metric}" is neither built in nor an objective's metric; it fires only if a task reports it` +
                  (near !== undefined ? ` (did you mean "${near}"?)` : "")
              )
            }
          }
        })
      })
    }

    // run, output
    const { trialConcurrency: trialConcurrencyRaw, ...runRest } = doc.run ?? {}
    const run = runRest as RunConfig.RunConfigInput
    const resolvedRun = RunConfig.resolve(run)
    if (Either.isLeft(resolvedRun)) issues.push(...resolvedRun.left.issues)
    const trialConcurrency = trialConcurrencyRaw ?? DEFAULT_TRIAL_CONCURRENCY
    let outputRoot: string | undefined
    if (options.outputRoot !== undefined) outputRoot = path.resolve(options.outputRoot)
    else if (doc.output?.root !== undefined) outputRoot = path.resolve(baseDir, doc.output.root)
    else issues.push(issue("output.root", "is missing", `output: { root: runs/${studyId} } (relative to the study file), or --output-root DIR`))

    // the base experiment: read, references
    const experimentFile = path.resolve(baseDir, doc.protocol.experiment)
    const rel = path.relative(baseDir, experimentFile) || experimentFile
    const expIssue = (p: string, message: string, suggestion?: string) =>
      issue("protocol.experiment", `${rel}: ${p === "" ? "(file)" : p}: ${message}`, suggestion)
    if (experimentFile === abs) {
      issues.push(issue("protocol.experiment", "is the study file itself: the protocol's experiment is an experiment file"))
      settleUnknownMetrics([])
      return yield* invalid(abs, issues, guessed)
    }
    const rawExp = yield* Effect.either(parse.read(experimentFile))
    if (Either.isLeft(rawExp)) {
      for (const i of rawExp.left.issues) issues.push(i.line !== undefined ? issue("protocol.experiment", i.message) : expIssue(i.path, i.message, i.suggestion))
      // an experiment that cannot be read reports no judge's metric: a metric only its judges
      // could know is held back, not called unknown (tester16c F11)
      unknownMetrics.splice(0)
      return yield* invalid(abs, issues, guessed)
    }
    const base = rawExp.right
    for (const key of ["study", "suite"]) {
      if (isRecord(base.raw) && base.raw[key] !== undefined) {
        issues.push(issue("protocol.experiment", `${rel} is a ${key} file: the protocol's experiment is an experiment file`))
        settleUnknownMetrics([])
        return yield* invalid(abs, issues, guessed)
      }
    }
    const found = findRefs(base.raw)
    for (const m of found.malformed) issues.push(expIssue(m.path, m.message, m.suggestion))
    const used = new Set<string>()
    const meant = new Set<string>()
    for (const r of found.refs) {
      const at = formatPath(r.at)
      if (r.at[0] !== "pipeline") {
        issues.push(expIssue(at, `a variable cannot be referenced under ${String(r.at[0])}: pools, source, run and plugins are shared by every trial`, "reference variables in the pipeline's tasks (args, options, resource)"))
        continue
      }
      const variable = variables.find((v) => v.name === r.name)
      if (variable === undefined) {
        const near = closest(r.name, names)
        // the variable this reference probably meant is not also reported as unused
        if (near !== undefined) meant.add(near)
        issues.push(expIssue(at, `unknown variable "${r.name}"`, near !== undefined ? `did you mean "${near}"?` : names.length > 0 ? `variables: ${quoted(names)}` : "declare it under variables in the study file"))
        continue
      }
      used.add(r.name)
      if (r.path.length > 0 && (variable.type === "range" || variable.type === "boolean")) {
        issues.push(expIssue(at, `variable "${r.name}" is a ${variable.type}: its value has no field ${r.path.join(".")}`, `{ $var: "${r.name}" }`))
      } else if (r.path.length > 0) {
        const missing = Study.valuesOf(variable).filter((c) => valueAtPath(c.value, r.path) === undefined).map((c) => shown(c.assignment))
        if (missing.length > 0) {
          const near = nearestField(Study.valuesOf(variable).map((c) => c.value), r.path)
          issues.push(expIssue(
            at,
            `${r.path.join(".")} is not in the value of variable "${r.name}" for ${missing.slice(0, 5).join(", ")}${missing.length > 5 ? ", ..." : ""}`,
            near === undefined ? undefined : `did you mean { $var: "${[r.name, ...near].join(".")}" }?`
          ))
        }
      }
    }
    const code = base.format === "module" || hasCodeTasks(base.raw)
    variables.forEach((v, i) => {
      if (used.has(v.name) || meant.has(v.name)) return
      if (code) {
        warnings.push(`warning: variables[${i}]: variable "${v.name}" is not referenced by ${rel}; its tasks are code and may read ctx.variables`)
      } else {
        issues.push(issue(`variables[${i}]`, `variable "${v.name}" is not used by the protocol: remove it or reference it with { $var: "${v.name}" } in ${rel}`))
      }
    })
    const declaredPools = isRecord(base.raw) && isRecord(base.raw["pools"]) ? Object.keys(base.raw["pools"]) : []
    variables.forEach((v, i) => {
      if (v.type !== "model") return
      for (const [n, p] of Object.entries(v.values)) {
        if (p.pool !== undefined && !declaredPools.includes(p.pool)) {
          const near = closest(p.pool, declaredPools)
          issues.push(issue(`variables[${i}].values.${n}.pool`, `${rel} declares no pool "${p.pool}"`, near !== undefined ? `did you mean ${near}?` : declaredPools.length > 0 ? `pools: ${declaredPools.join(", ")}` : undefined))
        }
      }
    })
    // with problems so far, the baseline's experiment is still built and checked (its problems
    // and the declared metrics' output paths reported in the same pass) when none of them is
    // about the experiment, the variables or the run: a misspelt baseline value checks the
    // experiment with each variable's first value
    const onlyElsewhere = issues.every((i) => !/^(protocol|variables|run)\b/.test(i.path)) && Either.isRight(resolvedRun)
    let earlier = issues.length
    if (earlier > 0 && onlyElsewhere && baselinePositions === undefined) baselinePositions = variables.map(() => 0)
    if ((issues.length > 0 && !onlyElsewhere) || baselinePositions === undefined || Either.isLeft(resolvedRun) || (outputRoot === undefined && earlier === 0)) {
      // refused before the experiment is built: the judges as the document declares them
      settleUnknownMetrics(rawJudgeMetrics(base.raw))
      return yield* invalid(abs, issues.length > 0 ? issues : [issue("", "the study could not be loaded")], guessed)
    }

    // one experiment per variant: the base document with the variant's values bound
    const count = Study.variantCount(variables)
    const baselineIndex = Study.indexOfPositions(variables, baselinePositions)
    const trials = count * repeats
    stop.forEach((c, i) => {
      if (c.when === "successfulTrials" && c.count > trials) {
        warnings.push(
          `warning: stop[${i}].count: ${Words.count(c.count, "successful trial")} ${c.count === 1 ? "is" : "are"} more than the ${trials} planned (${Words.count(count, "variant")} x ${Words.count(repeats, "repeat")}): ` +
            "it can never hold, so it never stops the study early (it runs to its natural end)"
        )
      }
    })
    const maxTrials = doc.limits?.maxTrials ?? Study.DEFAULT_MAX_TRIALS
    const overTrials = trials > maxTrials
    // over the trials cap, the plan is printed and refused: the variants are still expanded
    // when they are few (no more experiments built than an allowed study builds); only more
    // variants than the cap are planned from the baseline alone (truncated)
    const unexpanded = overTrials && count > maxTrials
    if (!overTrials && count > Study.MAX_EXPANDED_VARIANTS) {
      // a raised maxTrials does not make assay build and check millions of experiments
      issues.push(issue(
        "variables",
        `${int(count)} variants, above the ${int(Study.MAX_EXPANDED_VARIANTS)} a study expands (limits.maxTrials ${int(maxTrials)} allows them, but each variant is an experiment built and checked before anything runs)`,
        "studies are never sampled: narrow a range, drop values, or split the study"
      ))
      return yield* invalid(abs, issues, guessed)
    }
    const ctx = { file: base.file, baseDir: base.baseDir, format: base.format, literalIssues: base.literalIssues }
    // the source is the same for every variant (references are refused outside the pipeline):
    // the baseline's check reads it as asked, the others read only its head
    const checkVariant = (variant: Study.Variant, scanKeys = options.scanKeys) =>
      Effect.either(check(bind(base.raw, variant.values), ctx, { ...options, scanKeys }))
    const baseline = Study.variantAt(variables, baselineIndex, baselineIndex)
    const baselineExp = yield* checkVariant(baseline)
    if (Either.isLeft(baselineExp)) {
      const more = variables.length > 0 ? ` (with the baseline ${baseline.id}: ${Study.describeAssignment(baseline.assignment)})` : ""
      for (const i of baselineExp.left.issues) {
        issues.push(i.line !== undefined ? issue("protocol.experiment", i.message) : expIssue(i.path, `${i.message}${more}`, i.suggestion))
      }
      settleUnknownMetrics(rawJudgeMetrics(base.raw))
      return yield* invalid(abs, issues, guessed)
    }
    // the metrics the experiment's judge tasks report: known to objectives and stop conditions
    const judged = judgeMetrics(baselineExp.right.template.tasks)
    settleUnknownMetrics(judged)
    // an unknown objective metric does not stop the output paths' check below (one pass)
    earlier = issues.length
    // the declared metrics read from a boolean field, as the final task's output schema says
    const booleans = (() => {
      const tasks = baselineExp.right.template.tasks
      const last = baselineExp.right.template.control === undefined ? tasks[tasks.length - 1] : undefined
      return booleanMetrics(declaredMetrics, last?.outputSchema)
    })()
    warnings.push(...impossibleConstraints(doc.objectives ?? [], stop, declaredMetrics, judged, booleans))
    warnings.push(...misreadMetrics(declaredMetrics, booleans))
    // a declared metric read from a pipeline metric no task reports never has a value (its
    // share or mean has nothing to divide by): without code tasks only the judges report any
    if (!code) {
      declaredMetrics.forEach((m, i) => {
        if (!("metric" in m.from) || judged.includes(m.from.metric)) return
        const near = closest(m.from.metric, judged)
        warnings.push(
          `warning: metrics[${i}].from.metric: no task of ${rel} reports "${m.from.metric}" (${
            judged.length === 0 ? "its tasks are built in and report no metric" : `its judges report ${quoted(judged)}`
          }): metric "${m.name}" will have no value${near !== undefined ? ` (did you mean "${near}"?)` : ""}`
        )
      })
    }
    const variants = unexpanded ? [baseline] : Study.expand(variables, { baselineIndex })
    const experiments = new Map<string, Experiment>([[baseline.id, baselineExp.right]])
    // one problem shared by several variants is reported once, with the variants it concerns
    const byProblem = new Map<string, { readonly issue: ConfigIssue; readonly variants: Array<Study.Variant> }>()
    // (with problems found before the build, only the baseline's experiment is checked)
    for (const v of earlier === 0 ? variants : []) {
      if (experiments.has(v.id)) continue
      const e = yield* checkVariant(v, options.scanKeys === "none" ? "none" : "head")
      if (Either.isLeft(e)) {
        for (const i of e.left.issues) {
          const k = `${i.path}\u0000${i.message}\u0000${i.suggestion ?? ""}`
          const entry = byProblem.get(k) ?? { issue: i, variants: [] }
          entry.variants.push(v)
          byProblem.set(k, entry)
        }
      } else experiments.set(v.id, e.right)
    }
    for (const { issue: i, variants: vs } of byProblem.values()) {
      const which = vs.length === 1
        ? `variant ${vs[0]!.id}: ${Study.describeAssignment(vs[0]!.assignment)}`
        : `${vs.length} variants: ${vs.slice(0, 5).map((v) => v.id).join(", ")}${vs.length > 5 ? ", ..." : ""}`
      issues.push(expIssue(i.path, `${i.message} (${which})`, i.suggestion))
    }
    if (issues.length > 0 && earlier === 0) return yield* invalid(abs, issues, guessed)
    const experiment = baselineExp.right
    // the experiment's own unset-key warnings are said below, once per variable, for the
    // endpoints a task can call (tester16b N9: the same variable was warned about twice); its
    // "model has no price" lines know the baseline's calls only, without its model profile's
    // price: the study's own (below, every variant's calls) replace them
    warnings.push(...experiment.warnings.filter((w) =>
      !/^warning: \S.*: environment variable \S+ \(the key\) is (?:not set|empty)/.test(w) && !EXPERIMENT_UNPRICED.test(w)
    ))
    // endpoints that cannot be called as configured: warned here (plan), refused by run
    // the resources some task of some variant can lease (a variable may pick the pool or a selector)
    const leases = [experiment, ...experiments.values()].flatMap((e) => leasesOf(e.template.tasks))
    const endpoints = endpointProblems(experiment.pools, env, [...unresolved, ...experiment.unresolvedEnv], rel, leases)
    for (const i of endpoints) warnings.push(`warning: ${i.path}: ${i.message}${i.suggestion === undefined ? "" : ` (${i.suggestion})`}; study run refuses to start`)

    // a declared metric's output path, checked before anything is spent: against the final
    // task's output Schema when it declares one; else at the first succeeded pipeline of the run
    // (Study.execute stops the study there when the path leads nowhere)
    const outputChecks: Array<Study.OutputCheck> = []
    {
      const tasks = experiment.template.tasks
      const last = experiment.template.control === undefined ? tasks[tasks.length - 1] : undefined
      // a final judge task's verdict has a known shape (its candidates and rubric criteria)
      const schema = last?.outputSchema ?? (last?.codeDigest === JUDGE_CODE_DIGEST ? judgeOutputSchema(last.parameters) : undefined)
      declaredMetrics.forEach((m, i) => {
        if (!("output" in m.from)) return
        const at = `metrics[${i}].from.output`
        const p = m.from.output
        if (schema === undefined) {
          if (p === "") return
          outputChecks.push({ at, name: m.name, path: p })
          warnings.push(
            `warning: ${at}: "${p}" cannot be checked before the run (${
              last === undefined ? "the pipeline's control flow decides which task's output is final" : `the final task ${last.name} declares no output schema`
            }): it is checked against the first succeeded pipeline's output, and a path that leads nowhere stops the study there`
          )
          return
        }
        const r = OutputPath.checkSchemaPath(schema, p)
        if (r._tag === "missing") {
          issues.push(issue(
            at,
            `metric "${m.name}": ${OutputPath.describeMissing(p, r, `the output of task ${last!.name}`)}`,
            r.near !== undefined ? `did you mean "${[...p.split(".").slice(0, r.segment), r.near].join(".")}"?` : undefined
          ))
        }
      })
      if (issues.length > 0) return yield* invalid(abs, issues, guessed)
    }
    // the tasks whose code could report a declared metric's `from: { metric }` (Study.execute
    // names them when the first succeeded pipelines report none of it)
    const reportingTasks = new Set<string>()
    const codeTasks = (ts: ReadonlyArray<Task.Any>): void => {
      for (const t of ts) {
        if (t.children.length > 0) codeTasks(t.children)
        else if (t.codeDigest !== CHAT_CODE_DIGEST && t.codeDigest !== JUDGE_CODE_DIGEST) reportingTasks.add(t.name)
      }
    }
    for (const e of [experiment, ...experiments.values()]) codeTasks(e.template.tasks)
    if (outputRoot === undefined) return yield* invalid(abs, [issue("output.root", "is missing")], guessed)

    // the prices of every variant's model calls (the pricing tables the accounting uses)
    const callsOf = new Map<string, ReadonlyArray<PricedCall>>()
    const pricedOf = (v: Study.Variant) => {
      let calls = callsOf.get(v.id)
      if (calls === undefined) {
        calls = pricedCalls(experiments.get(v.id) ?? experiment, priceOfVariant(variables, v))
        callsOf.set(v.id, calls)
      }
      return calls
    }
    warnings.push(...unpricedModels(unexpanded ? [baseline] : variants, pricedOf, Object.keys(experiment.run.pricing ?? {})))
    if (costPaths.length > 0) {
      const missing = new Map<string, Array<string>>()
      // the variants were not expanded (too many): the baseline's calls, and each model
      // profile's model by its own price, its pool's resources or the table
      if (unexpanded) {
        const table = experiment.run.pricing as Pricing.PriceTable | undefined
        for (const m of models) {
          for (const [name, profile] of Object.entries(m.values)) {
            const resources = experiment.pools.find((p) => p.name === (profile.pool ?? "llm"))?.resources ?? []
            const priced = profile.price !== undefined ||
              (resources.length > 0 && resources.every((r) => Pricing.priceFor([profile.model], table, r) !== undefined)) ||
              (resources.length === 0 && Pricing.priceFor([profile.model], table) !== undefined)
            if (!priced) {
              const what = `model ${profile.model} (profile ${m.name}.${name})`
              missing.set(what, missing.get(what) ?? [])
            }
          }
        }
      }
      for (const v of unexpanded ? [baseline] : variants) {
        for (const c of pricedOf(v)) {
          if (c.price !== undefined) continue
          const what = `${c.model === undefined ? "a model not named (no model parameter, no resource options.model)" : `model ${c.model}`} (task ${c.task} on ${c.target})`
          const list = missing.get(what) ?? []
          list.push(v.id)
          missing.set(what, list)
        }
      }
      if (missing.size > 0) {
        const list = Array.from(missing, ([what, vs]) =>
          vs.length === 0 ? what : `${what}, ${Words.labelled("variant", vs, { max: 5 })}`
        )
        for (const at of costPaths) {
          issues.push(issue(
            at,
            `a cost in US dollars needs a price for every model the study can call; none for ${list.join("; ")}`,
            "add the model to the experiment's pricing: { MODEL: { inputPer1M, outputPer1M } } (or a resource's pricing, or the model profile's price)"
          ))
        }
        return yield* invalid(abs, issues, guessed)
      }
    }

    // the plan
    const runConfig = resolvedRun.right
    const notes: Array<string> = []
    // what the mean of a boolean computes: a share, per trial, then over repeats (never pass@k)
    for (const m of declaredMetrics) {
      if (m.reducer === "mean" && booleans.has(m.name) && "output" in m.from) {
        notes.push(
          `metric ${m.name} is the mean of the boolean output.${m.from.output} (true 1, false 0): per trial the share of its cases where it is true, ` +
            `from 0 to 1, then the mean over repeats (each repeat counted apart: pass@1, not pass@k)`
        )
      }
    }
    // store-only readers (scanKeys "none") never count the data set: it may have been moved away
    const cases = options.scanKeys === "none" ? undefined : yield* sources.sourceSize({ ...experiment.source, repeats: 1 })
    const casesPerTrial = cases ?? null
    const perCase = experiment.source.repeats
    const pipelinesPerTrial = casesPerTrial === null ? null : casesPerTrial * perCase
    const pipelines = pipelinesPerTrial === null ? null : trials * pipelinesPerTrial
    if (casesPerTrial === null && options.scanKeys !== "none") notes.push("the source cannot be counted cheaply (a jsonl file over 64 MiB without a limit): pipelines, calls and tokens are unknown")
    if (unexpanded) notes.push(`figures from the baseline variant times ${int(count)} variants: the variants were not expanded, ${int(count)} is above limits.maxTrials ${int(maxTrials)}`)
    const capacityOf = new Map<string, number>(experiment.pools.map((p) => [p.name, p.resources.reduce((n, r) => n + (r.capacity ?? 1), 0)]))
    let callsMax = 0
    let judgeCallsMax = 0
    let attemptsMax = 0
    let tokensMin = 0
    let tokensMax: number | null = 0
    let costMin: number | null = 0
    let costMax: number | null = 0
    const poolWork = new Map<string, { minMs: number | null; maxMs: number | null }>()
    let tasksPerPipeline = 0
    const plannedVariants = unexpanded ? [{ variant: baseline, weight: count }] : variants.map((v) => ({ variant: v, weight: 1 }))
    for (const { variant, weight } of plannedVariants) {
      const f = figuresOf(experiments.get(variant.id)!, runConfig.maxHandoffs)
      tasksPerPipeline = Math.max(tasksPerPipeline, f.tasks)
      if (pipelinesPerTrial === null) continue
      const n = weight * repeats * pipelinesPerTrial
      callsMax += n * f.callsMax
      judgeCallsMax += n * f.judgeCallsMax
      attemptsMax += n * f.attemptsMax
      tokensMin += n * f.tokensMin
      tokensMax = tokensMax === null || f.tokensMax === null ? null : tokensMax + n * f.tokensMax
      const range = priceRange(pricedOf(variant))
      costMin = costMin === null || range === null ? null : costMin + (n * f.tokensMin * range.min.inputPer1M) / 1e6
      costMax = costMax === null || range === null || f.completionTokensMax === null
        ? null
        : costMax + (n * (f.promptTokensMax * range.max.inputPer1M + f.completionTokensMax * range.max.outputPer1M)) / 1e6
      const est = estimateOf(variables, variant, doc.estimate)
      for (const [pool, c] of f.pools) {
        const parallel = Math.max(1, Math.min(capacityOf.get(pool) ?? 1, runConfig.concurrency))
        const rateMin = est.rpm === undefined ? 0 : (n * c.callsMin / est.rpm) * 60_000
        const rateMax = est.rpm === undefined ? 0 : (n * c.callsMax / est.rpm) * 60_000
        const lmin = est.latency?.min
        const lmax = est.latency?.max ?? c.timeoutMs ?? undefined
        const minMs = lmin === undefined && est.rpm === undefined ? null : Math.max((n * c.callsMin * (lmin ?? 0)) / parallel, rateMin)
        const maxMs = lmax === undefined ? null : Math.max((n * c.callsMax * lmax) / parallel, rateMax)
        // min: the known lower bounds add up (unknown = none yet); max: one unbounded call makes it unbounded
        const w = poolWork.get(pool) ?? { minMs: null, maxMs: 0 }
        poolWork.set(pool, {
          minMs: w.minMs === null ? minMs : minMs === null ? w.minMs : w.minMs + minMs,
          maxMs: w.maxMs === null || maxMs === null ? null : w.maxMs + maxMs
        })
      }
    }
    const anyModel = [...poolWork.keys()].length > 0
    if (pipelinesPerTrial !== null && !anyModel) notes.push("no model-calling task (chat): model calls, tokens and cost are 0")
    if (pipelinesPerTrial !== null && anyModel && tokensMax === null) notes.push("a chat task has no maxTokens: the token range has no upper bound")
    const tokens = pipelinesPerTrial === null || tokensMax === null ? null : { min: Math.round(tokensMin), max: Math.round(tokensMax) }
    // no model-calling task: nothing is priced, and nothing is spent ($0, not unknown)
    const costUsd = pipelinesPerTrial !== null && !anyModel ? { min: 0, max: 0 } : pipelinesPerTrial === null || costMin === null ? null : { min: costMin, max: costMax }
    if (pipelinesPerTrial !== null && anyModel && costMin === null) notes.push("a model call has no price (the experiment's pricing, a resource's pricing or a model profile's price): the cost is unknown")
    // time
    const mins = [...poolWork.values()].map((w) => w.minMs)
    const maxs = [...poolWork.values()].map((w) => w.maxMs)
    let timeMin: number | null = mins.some((m) => m !== null) ? Math.max(...mins.map((m) => m ?? 0)) : null
    const minUnknown = anyModel && timeMin === null
    let timeMax: number | null = anyModel && maxs.every((m) => m !== null) ? maxs.reduce<number>((a, m) => a + m!, 0) : null
    const budgetBound = [
      perTrial.timeMs === undefined ? undefined : Math.ceil(trials / trialConcurrency) * perTrial.timeMs,
      total.timeMs
    ].filter((x): x is number => x !== undefined)
    if (budgetBound.length > 0) {
      const b = Math.min(...budgetBound)
      timeMax = timeMax === null ? b : Math.min(timeMax, b)
      timeMin = timeMin === null ? 0 : Math.min(timeMin, b)
    }
    if (minUnknown && timeMax !== null) notes.push("no latency estimate or rate limit: the shortest time is unknown (shown as 0; set estimate.latency)")
    if (anyModel && timeMin === null && timeMax === null) notes.push("no latency estimate, rate limit, task timeout or time budget: the time range is unknown (set estimate.latency)")
    const timeMs = timeMin === null && timeMax === null ? null : { min: Math.round(timeMin ?? 0), max: timeMax === null ? null : Math.round(timeMax) }
    const maxModelCalls = pipelinesPerTrial === null ? null : callsMax
    const maxTaskAttempts = pipelinesPerTrial === null ? null : attemptsMax
    const maxJudgeCalls = pipelinesPerTrial === null ? null : judgeCallsMax

    // caps
    const caps: Array<{ name: string; limit: number; planned: number }> = []
    const reduce = `reduce the variables (${count} variant${count === 1 ? "" : "s"} x ${repeats} repeat${repeats === 1 ? "" : "s"})`
    if (overTrials) caps.push({ name: "maxTrials", limit: maxTrials, planned: trials })
    const capOf = (name: "maxPipelines" | "maxCalls" | "maxTokens", planned: number | null, unknown: string) => {
      const limit = doc.limits?.[name]
      if (limit === undefined) return
      if (planned === null) issues.push(issue(`limits.${name}`, `cannot be checked: ${unknown}`, "remove the cap or make the figure known"))
      else if (planned > limit) caps.push({ name, limit, planned })
    }
    capOf("maxPipelines", pipelines, "the source cannot be counted")
    capOf("maxCalls", maxModelCalls, "the source cannot be counted")
    capOf("maxTokens", tokens === null ? null : tokens.max, "the token range has no upper bound (set maxTokens on the chat tasks)")
    if (issues.length > 0) return yield* invalid(abs, issues, guessed)
    const what: Record<string, string> = { maxTrials: "trials", maxPipelines: "pipelines", maxCalls: "model calls", maxTokens: "tokens" }
    if (caps.length > 0 && options.allowOverCap !== true) {
      return yield* invalid(abs, caps.map((c) => issue(`limits.${c.name}`, `the plan has ${c.planned} ${what[c.name]}, above the cap of ${c.limit}: ${reduce}`, "studies are never sampled: narrow a range, drop values, or lower repeats")), guessed)
    }
    const plan: Plan = {
      variants: count,
      repeats,
      trials,
      casesPerTrial,
      pipelines,
      tasksPerPipeline,
      maxModelCalls,
      maxJudgeCalls,
      maxTaskAttempts,
      tokens,
      costUsd,
      timeMs,
      concurrency: { pipelines: runConfig.concurrency, trials: trialConcurrency },
      caps,
      notes
    }

    // the protocol
    const budgetJson = { perTrial: perTrial as Json, total: total as Json }
    const taskCode = codeDigests(experiment.template.tasks)
    const modules = yield* moduleDigests(base.raw, base.baseDir, base.file, base.format === "module")
    const hasModules = Object.keys(modules).length > 0
    const protocol: Study.Protocol = {
      experiment: { document: experimentIdentity(plain(base.raw)), code: taskCode },
      variables: plain(variables),
      baseline: baseline.assignment,
      repeats,
      budget: plain(budgetJson),
      stop: plain(stop),
      objectives: plain(doc.objectives ?? []),
      ...(doc.metrics === undefined ? {} : { metrics: plain(doc.metrics) }),
      ...(hasModules ? { modules: modules as Json } : {})
    }
    const digestOfProtocol = Study.protocolDigest(protocol)
    const parts = Study.protocolParts(protocol)
    // the judges' rubrics, and the experiment part without them: stored with each version's
    // description, so that a changed rubric is named (`StudyCatalog.inWords`, tester16f F5)
    const judges: Json = plain({
      tasks: judgesOf(experiment.template.tasks),
      experimentOtherwise: digest(canonicalJsonUnsafe({ document: withoutRubrics(experimentIdentity(plain(base.raw))), code: taskCode })).slice(0, 12)
    })
    // the same experiment part field by field (nothing secret kept, see documentFields): stored
    // with each version's description, so that a later change names the fields (tester16g F11);
    // the description is not digested, so a version frozen before keeps its digest
    const experimentFields: Json = plain({
      document: fieldsOf(withoutRubrics(experimentIdentity(plain(base.raw)))),
      code: digest(canonicalJsonUnsafe(taskCode)).slice(0, 12)
    })
    // before 0.9.0 the code files' contents were not digested: a version frozen then is still
    // this protocol (its files' contents were never recorded, so a change to them cannot be told)
    const { modules: _modules, ...withoutModules } = protocol
    // before 0.7.0 the whole document was digested (its run section and pool capacities too)
    const legacy: Study.Protocol = { ...withoutModules, experiment: { document: plain(base.raw), code: taskCode } }
    const legacyDigest = Study.protocolDigest(legacy)
    const previousProtocols: ReadonlyArray<Study.PreviousProtocol> = [
      ...(hasModules ? [{ digest: Study.protocolDigest(withoutModules), parts: Study.protocolParts(withoutModules) }] : []),
      ...(legacyDigest === digestOfProtocol ? [] : [{ digest: legacyDigest, parts: Study.protocolParts(legacy) }])
    ]

    // trials and suites
    const rawPools = isRecord(base.raw) && isRecord(base.raw["pools"]) ? base.raw["pools"] : {}
    const poolNames = experiment.pools.map((p) => p.name)
    const aliases = Object.fromEntries(poolNames.map((n) => [n, n]))
    const declared: Record<string, { bound: string; declaration: Json }> = {}
    for (const n of [...poolNames].sort()) declared[n] = { bound: n, declaration: plain(rawPools[n]) }
    const ignoredRunFields = Object.keys(isRecord(base.raw) && isRecord(base.raw["run"]) ? base.raw["run"] : {})
    const root = outputRoot
    const trialsFor = (version: number): ReadonlyArray<Trial> => {
      if (overTrials) throw new Error(`study ${studyId} is over limits.maxTrials: it is never run`)
      const out: Array<Trial> = []
      for (const variant of variants) for (let r = 1; r <= repeats; r++) out.push({ trialId: Study.trialId(version, variant.id, r), variant, repeat: r })
      for (const x of options.extraTrials ?? []) {
        const variant = variants.find((v) => v.id === x.variantId)
        if (variant === undefined || x.repeat <= repeats || out.some((t) => t.variant.id === x.variantId && t.repeat === x.repeat)) continue
        out.push({ trialId: Study.trialId(version, variant.id, x.repeat), variant, repeat: x.repeat })
      }
      return out
    }
    const suites = new Map<number, LoadedSuite>()
    const suiteFor = (version: number): LoadedSuite => {
      const cached = suites.get(version)
      if (cached !== undefined) return cached
      const members: Array<LoadedMember> = trialsFor(version).map((t) => {
        const e = experiments.get(t.variant.id)!
        const definition: MemberDefinition = { task: e.template.specDigest, source: plain(e.definition.source), pools: declared, limit: null }
        return {
          id: t.trialId,
          label: `${t.variant.id} r${t.repeat}`,
          limit: undefined,
          config: e.file,
          experiment: e,
          memberDigest: Suite.memberDigest(studyId, t.trialId),
          definitionDigest: definitionDigest(definition),
          definitionParts: definitionParts(definition),
          previousDigests: previousDefinitionDigests(definition),
          poolAliases: aliases,
          ignoredRunFields,
          outputDir: root,
          variables: t.variant.values
        }
      })
      const suite: LoadedSuite = {
        id: studyId,
        file: abs,
        format,
        baseDir,
        // the base experiment's price table prices every trial's calls (see `Pricing`)
        run: experiment.definition.pricing === undefined ? run : { ...run, pricing: experiment.definition.pricing },
        output: { root, layout: "combined" },
        pools: experiment.pools,
        sharedPools: poolNames,
        members,
        plugins: experiment.plugins,
        unresolvedEnv: [...unresolved, ...experiment.unresolvedEnv],
        warnings,
        describe: () =>
          plain({
            suite: { id: studyId, file: abs, format, study: true },
            output: { root, layout: "combined" },
            pools: experiment.pools.map((p) => ({
              name: p.name,
              shared: true,
              algorithm: describeAlgorithm(experiment.definition.pools?.[p.name]?.algorithm ?? "wait"),
              resources: p.resources.map((r) => Resource.spec(r))
            })),
            experiments: members.map((m) => ({ id: m.id, label: m.label ?? null, memberDigest: m.memberDigest, definitionDigest: m.definitionDigest }))
          })
      }
      suites.set(version, suite)
      return suite
    }
    const limits = {
      maxTrials,
      maxPipelines: doc.limits?.maxPipelines ?? null,
      maxCalls: doc.limits?.maxCalls ?? null,
      maxTokens: doc.limits?.maxTokens ?? null
    }
    const loaded: LoadedStudy = {
      id: studyId,
      file: abs,
      format,
      baseDir,
      question: doc.study.question,
      hypothesis: doc.study.hypothesis ?? null,
      type,
      experimentFile,
      experiment,
      variables,
      variants,
      baseline,
      repeats,
      budget: { perTrial, total },
      limits,
      stop,
      objectives: doc.objectives ?? [],
      metrics: declaredMetrics,
      outputChecks,
      reportingTasks: [...reportingTasks],
      judgeMetrics: judged,
      analysis: { ...Study.DEFAULT_ANALYSIS, ...(doc.analysis ?? {}) },
      trialConcurrency,
      run,
      outputRoot: root,
      protocol,
      protocolDigest: digestOfProtocol,
      protocolParts: parts,
      previousProtocols,
      plan,
      pipelinesPerTrial,
      variantPrice: (variantId: string) => {
        const v = variants.find((x) => x.id === variantId) ?? (variantId === baseline.id ? baseline : undefined)
        const range = v === undefined ? null : priceRange(pricedOf(v))
        return range === null ? null : { promptPer1k: range.max.inputPer1M / 1000, completionPer1k: range.max.outputPer1M / 1000 }
      },
      suiteFor,
      trialsFor,
      evaluatorTasks: evaluatorNames(experiment.template.tasks),
      warnings,
      unresolvedEnv: [...unresolved, ...experiment.unresolvedEnv],
      endpointProblems: endpoints,
      describe: () =>
        plain({
          study: { id: studyId, file: abs, format, question: doc.study.question, hypothesis: doc.study.hypothesis ?? null, type },
          protocol: { experiment: experimentFile, digest: digestOfProtocol, parts },
          output: { root },
          variables,
          variants: unexpanded ? null : variants.map((v) => ({ id: v.id, assignment: v.assignment, digest: v.digest, isBaseline: v.isBaseline })),
          baseline: { id: baseline.id, assignment: baseline.assignment },
          repeats,
          budget: budgetJson,
          limits,
          stop,
          objectives: doc.objectives ?? [],
          ...(doc.metrics === undefined ? {} : { metrics: doc.metrics }),
          ...(hasModules ? { modules } : {}),
          judges,
          experimentFields,
          ...(doc.analysis === undefined ? {} : { analysis: doc.analysis }),
          trialConcurrency,
          plan,
          warnings,
          unresolvedEnv: [...unresolved, ...experiment.unresolvedEnv]
        })
    }
    return loaded
  }))

// ---------------------------------------------------------------------------------------------
// Plan text
// ---------------------------------------------------------------------------------------------

const int = (n: number) => n.toLocaleString("en-US")

/** A duration in milliseconds for people: `850 ms`, `12.5 s`, `3.2 min`, `1.4 h`. */
const human = (ms: number): string =>
  ms < 1000 ? `${Math.round(ms)} ms` : ms < 60_000 ? `${(ms / 1000).toFixed(1)} s` : ms < 3_600_000 ? `${(ms / 60_000).toFixed(1)} min` : `${(ms / 3_600_000).toFixed(1)} h`

/**
 * The plan as lines of text (what `assay study plan` prints): counts, the largest model calls,
 * the token and time ranges, the concurrency, the notes. The caps exceeded are not among them:
 * `assay study plan` names each once, in its refusal (exit 2), with what to do.
 *
 * @since 0.6.0
 * @category plan
 */
export const planText = (plan: Plan): string => {
  const unknown = "unknown"
  const judge = plan.maxJudgeCalls ?? 0
  const rows: ReadonlyArray<readonly [string, string]> = [
    ["variants", int(plan.variants)],
    ["repeats", String(plan.repeats)],
    ["trials", `${int(plan.trials)} (${int(plan.variants)} variant${plan.variants === 1 ? "" : "s"} x ${plan.repeats} repeat${plan.repeats === 1 ? "" : "s"})`],
    ["cases per trial", plan.casesPerTrial === null ? unknown : int(plan.casesPerTrial)],
    ["pipelines", plan.pipelines === null ? unknown : int(plan.pipelines)],
    ["tasks per pipeline", String(plan.tasksPerPipeline)],
    [
      "max model calls",
      plan.maxModelCalls === null
        ? unknown
        : `${int(plan.maxModelCalls)}${
          judge === 0 ? "" : ` (${int(judge)} of them by judges: a judge attempt makes 2 calls when its answer needs a format repair)`
        }`
    ],
    ["max task attempts", plan.maxTaskAttempts === null ? unknown : int(plan.maxTaskAttempts)],
    ["tokens", plan.tokens === null ? unknown : `${int(plan.tokens.min)} .. ${int(plan.tokens.max)}`],
    ["cost", plan.costUsd === null ? unknown : `${formatStudyUsd(plan.costUsd.min)} .. ${plan.costUsd.max === null ? "unbounded" : formatStudyUsd(plan.costUsd.max)}`],
    ["time", plan.timeMs === null ? unknown : `${human(plan.timeMs.min)} .. ${plan.timeMs.max === null ? "unbounded" : human(plan.timeMs.max)}`],
    ["concurrency", `${Words.count(plan.concurrency.pipelines, "pipeline")}, ${Words.count(plan.concurrency.trials, "trial")} at once`]
  ]
  // one column for the values, after the longest label
  const width = Math.max(...rows.map(([label]) => label.length)) + 2
  const lines = rows.map(([label, value]) => `${`${label}:`.padEnd(width)}${value}`)
  for (const n of plan.notes) lines.push(`note: ${n}`)
  return lines.join("\n")
}
