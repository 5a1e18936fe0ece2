/**
 * `assay study ...`: the study command group. Each subcommand is declared in its own module and
 * listed in {@link subcommands}; the group routes `assay study NAME` to it and gives it its
 * own help screen (`assay study NAME --help`).
 *
 * - `assay study plan FILE`: the plan before anything runs (see `StudyPlan.ts`);
 * - `assay study run|resume|versions|stop|status FILE`: running a study and reading its state
 *   (see `StudyRun.ts`);
 * - `assay study report|evidence FILE`: the comparison of the variants and the evidence behind
 *   its numbers (see `StudyReport.ts`);
 * - `assay study export FILE --summary`: a redacted JSON summary (see `StudyExport.ts`);
 * - `assay study template FILE --out PATH`: a protocol version as a study file (see `StudyTemplate.ts`);
 * - `assay study confirm FILE VARIANT --repeats N`: confirmation trials (see `StudyConfirm.ts`).
 *
 * @since 0.6.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Flags from "./Flags.js"
import * as Help from "./Help.js"
import * as StudyConfig from "../config/Study.js"
import { planStudy } from "./StudyPlan.js"
import * as StudyConfirm from "./StudyConfirm.js"
import * as StudyExport from "./StudyExport.js"
import * as StudyReport from "./StudyReport.js"
import * as StudyRun from "./StudyRun.js"
import * as StudyTemplate from "./StudyTemplate.js"

/**
 * The study file argument shared by the subcommands.
 *
 * @since 0.6.0
 * @category options
 */
export const studyFile = Args.file({ name: "study", exists: "either" }).pipe(
  Args.withDescription("The study file (.json, .toml, .yaml/.yml or .ts): a document with a top-level study key.")
)

/**
 * `--strict-env`: an unset `${VAR}` in the study or its experiment is an error.
 *
 * @since 0.6.0
 * @category options
 */
export const strictEnv = Options.boolean("strict-env").pipe(Options.withDescription("An unset ${VAR} is an error."))

/**
 * `assay study plan FILE [--json] [--strict-env] [--output-root DIR]`.
 *
 * @since 0.6.0
 * @category commands
 */
export const plan = Command.make(
  "plan",
  {
    study: studyFile,
    json: Options.boolean("json").pipe(Options.withDescription("Print the study and its plan as JSON.")),
    strictEnv,
    outputRoot: Flags.outputRoot("The study's output root, relative to the working directory (overrides output.root).")
  },
  ({ json, outputRoot, strictEnv, study }) =>
    planStudy(study, { json, strictEnv, outputRoot: outputRoot._tag === "Some" ? outputRoot.value : undefined })
).pipe(Command.withDescription(
  "Print what a study would run (variants, trials, pipelines, model calls, tokens, time) before anything runs; exit 2 above a cap."
))

/**
 * The subcommands of `assay study`, in help order. A new subcommand is added here (and in
 * nothing else of this file's structure).
 *
 * @since 0.6.0
 * @category commands
 */
export const subcommands = [
  plan,
  ...StudyRun.subcommands({
    load: StudyConfig.load,
    planText: (loaded) => StudyConfig.planText((loaded as StudyConfig.LoadedStudy).plan)
  }),
  ...StudyReport.subcommands,
  ...StudyExport.subcommands,
  ...StudyTemplate.subcommands,
  ...StudyConfirm.subcommands
] as const

/**
 * `assay study`: the command group.
 *
 * @since 0.6.0
 * @category commands
 */
export const study = Help.group(
  Command.make("study").pipe(
    Command.withDescription("Studies: variants of an experiment run as isolated trials, planned and capped before anything runs."),
    Command.withSubcommands(subcommands)
  ),
  subcommands
)
