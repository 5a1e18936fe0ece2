/**
 * `assay study plan FILE` and `assay validate -c STUDY`: a study file is loaded and checked
 * (the study, its base experiment with every variant's values bound, the caps) and its plan is
 * printed before anything runs.
 *
 * - `study plan`: the plan as text (or `--json`); a plan above a cap (`limits.maxTrials`, 200
 *   by default, or a declared `maxPipelines` / `maxCalls` / `maxTokens`) is printed and then
 *   refused: exit 2 with the caps exceeded, asking to reduce the variables. Any other problem of
 *   the file: exit 2 with every problem and its field path.
 * - `validate -c STUDY`: the same checks (a cap exceeded is an error like any other) and the
 *   study described: variables, variants, baseline, protocol digest and the plan.
 *
 * Neither opens the study's output root. Both print it and the store file in it that `assay
 * study run` opens (`--output-root DIR` resolved against the working directory, as `run` does).
 *
 * @since 0.6.0
 */
import * as Words from "../domain/internal/words.js"
import type * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Clock, Console, Effect } from "effect"
import * as StudyConfig from "../config/Study.js"
import { ConfigError } from "../domain/Errors.js"
import * as Study from "../domain/Study.js"
import * as Manifest from "../layers/internal/suite/manifest.js"
import { deadlineOf } from "../services/StudyControl.js"

/**
 * Options of {@link planStudy} and {@link validateStudy}.
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyPlanOptions {
  readonly strictEnv: boolean
  readonly json: boolean
  readonly outputRoot?: string | undefined
}

/**
 * The paths `assay study run` uses for a loaded study: its output root and the store file in
 * it (a study's root has the `combined` layout: one SQLite store, the catalog included).
 *
 * @param study the loaded study (its `outputRoot` already resolved, `--output-root` included)
 * @returns `root` and `store`, absolute
 * @since 0.9.0
 * @category formatting
 */
export const storePaths = (study: Pick<StudyConfig.LoadedStudy, "outputRoot">): { readonly root: string; readonly store: string } => ({
  root: study.outputRoot,
  store: path.join(study.outputRoot, Manifest.catalogOf("combined"))
})

/**
 * The study described in text: id, question, protocol digest, variables, baseline and the plan.
 *
 * @since 0.6.0
 * @category formatting
 */
export const describeText = (study: StudyConfig.LoadedStudy): string => {
  const lines = [
    `study ${study.id} (${study.file}): ${study.plan.caps.length === 0 ? "valid" : "over its caps"}`,
    `question: ${study.question}`,
    ...(study.hypothesis === null ? [] : [`hypothesis: ${study.hypothesis}`]),
    `type: ${study.type}`,
    `protocol: ${study.experimentFile} (digest ${study.protocolDigest})`,
    `output: ${study.outputRoot}`,
    `store: ${storePaths(study).store}`
  ]
  for (const v of study.variables) {
    // the first values and the count, never the whole list (a range may have billions)
    const { count, shown } = Study.firstValues(v, 10)
    lines.push(`variable ${v.name} (${v.type}): ${shown.join(", ")}${count > shown.length ? `, ... (${count.toLocaleString("en-US")} values)` : ""}`)
  }
  lines.push(`baseline: ${study.baseline.id}${study.variables.length === 0 ? "" : ` (${Study.describeAssignment(study.baseline.assignment)})`}`)
  const perTrial = budgetText(study.budget.perTrial)
  const total = budgetText(study.budget.total)
  lines.push(`budget: ${perTrial === "" && total === "" ? "none" : [perTrial === "" ? "" : `per trial ${perTrial}`, total === "" ? "" : `total ${total}`].filter((x) => x !== "").join("; ")}`)
  lines.push(`stop: ${study.stop.length === 0 ? "when every trial has ended" : study.stop.map(stopText).join("; ")}`)
  lines.push(`objectives: ${study.objectives.length === 0 ? "none (trials are settled, not ranked)" : study.objectives.map(objectiveText).join("; ")}`)
  lines.push(StudyConfig.planText(study.plan))
  return lines.join("\n")
}

/** A budget's figures in words (`40 calls, $0.05, 2 min`), or "" when it has none. */
const budgetText = (b: Study.BudgetFigures): string =>
  [
    b.calls === undefined ? "" : `${b.calls} calls`,
    b.tokens === undefined ? "" : `${b.tokens} tokens`,
    b.costUsd === undefined ? "" : `$${b.costUsd}`,
    b.timeMs === undefined ? "" : `${b.timeMs / 1000} s`
  ].filter((x) => x !== "").join(", ")

/** A stop condition as written (`metricThreshold accuracy >= 0.97 (drain)`). */
const stopText = (c: Study.StopCondition): string => {
  const { running, when, ...rest } = c as Study.StopCondition & Record<string, unknown>
  const detail = "metric" in rest
    ? `${String(rest["metric"])} ${String(rest["op"])} ${String(rest["value"])}`
    : Object.entries(rest).map(([k, v]) => `${k} ${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ")
  return `${when}${detail === "" ? "" : ` ${detail}`} (${String(running)})`
}

/** An objective in words (`accuracy maximize, weight 1, hard constraint >= 0.6`). */
const objectiveText = (o: Study.Objective): string =>
  `${o.metric} ${o.direction}${o.target === undefined ? "" : ` ${o.target}`}${o.weight === 1 ? "" : `, weight ${o.weight}`}${
    o.hardConstraint === undefined ? "" : `, hard constraint ${o.hardConstraint.op} ${o.hardConstraint.value}`
  }`

/**
 * A warning per `deadline` stop condition already past at `now` (epoch ms): `assay study run`
 * refuses to start a version with it (nothing would start).
 *
 * @since 0.6.0
 * @category formatting
 */
export const pastDeadlines = (stop: ReadonlyArray<Study.StopCondition>, now: number): ReadonlyArray<string> =>
  stop.flatMap((c, i) => {
    if (c.when !== "deadline") return []
    const at = deadlineOf(c.at as string | number)
    return at !== undefined && at <= now
      ? [
        `warning: stop[${i}].at: the deadline ${new Date(at).toISOString()} has already passed: ` +
        `assay study run refuses to start a protocol version with it (nothing would start); move it later or remove it`
      ]
      : []
  })

/** The study's description (JSON) with the store file beside its output root. */
const describedWithStore = (study: StudyConfig.LoadedStudy): Record<string, unknown> => {
  const described = study.describe() as Record<string, unknown>
  const output = described["output"] as Record<string, unknown> | undefined
  return { ...described, output: { ...output, store: storePaths(study).store } }
}

/**
 * The warnings `study plan` and `validate -c STUDY` print, each once and in the order `study
 * run` gives them: an unset `${VAR}` (as `run` says it), the loader's warnings, a deadline
 * already past.
 *
 * @param study the loaded study
 * @param now epoch ms (from `Clock`)
 * @returns one line per warning, none repeated
 * @since 0.9.0
 * @category formatting
 */
export const warningsOf = (study: Pick<StudyConfig.LoadedStudy, "unresolvedEnv" | "warnings" | "stop">, now: number): ReadonlyArray<string> => [
  ...new Set([
    ...study.unresolvedEnv.map((u) => Words.unsetEnvWarning(u)),
    ...study.warnings,
    ...pastDeadlines(study.stop, now)
  ])
]

const load = (config: string, options: StudyPlanOptions, allowOverCap: boolean) =>
  StudyConfig.load(config, {
    strictEnv: options.strictEnv,
    allowOverCap,
    scanKeys: "full",
    ...(options.outputRoot === undefined ? {} : { outputRoot: path.resolve(options.outputRoot) })
  }).pipe(
    Effect.tapError((e) =>
      options.json
        ? Console.log(JSON.stringify({ valid: false, file: path.resolve(config), message: e.message, issues: e.issues }, null, 2))
        : Effect.void
    )
  )

/**
 * `assay study plan FILE [--json] [--strict-env] [--output-root DIR]`: see the module
 * documentation. Fails with `ConfigError` (exit 2) for an invalid file or a plan above a cap
 * (after printing the plan).
 *
 * @since 0.6.0
 * @category commands
 */
export const planStudy = (config: string, options: StudyPlanOptions): Effect.Effect<void, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const study = yield* load(config, options, true)
    const over = study.plan.caps
    yield* Console.log(
      options.json
        ? JSON.stringify({ valid: over.length === 0, file: study.file, ...describedWithStore(study) }, null, 2)
        : describeText(study)
    )
    for (const w of warningsOf(study, yield* Clock.currentTimeMillis)) yield* Console.error(w)
    if (over.length > 0) {
      const { repeats, variants } = study.plan
      const reduce = `reduce the variables (${variants} variant${variants === 1 ? "" : "s"} x ${repeats} repeat${repeats === 1 ? "" : "s"}); a study is never sampled`
      const issues = over.map((c) => ({
        path: `limits.${c.name}`,
        message: `planned ${c.planned.toLocaleString("en-US")}, above the cap of ${c.limit.toLocaleString("en-US")}: ${reduce}`
      }))
      return yield* new ConfigError({
        message: `study ${study.id} is over its caps:\n${issues.map((i) => `  ${i.path}: ${i.message}`).join("\n")}`,
        issues
      })
    }
  })

/**
 * `assay validate -c STUDY [--json] [--strict-env] [--output-root DIR]`: the study checked
 * (a cap exceeded is an error) and described with its plan.
 *
 * @since 0.6.0
 * @category commands
 */
export const validateStudy = (config: string, options: StudyPlanOptions): Effect.Effect<void, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const study = yield* load(config, options, false)
    yield* Console.log(
      options.json ? JSON.stringify({ valid: true, file: study.file, ...describedWithStore(study) }, null, 2) : describeText(study)
    )
    for (const w of warningsOf(study, yield* Clock.currentTimeMillis)) yield* Console.error(w)
  })
