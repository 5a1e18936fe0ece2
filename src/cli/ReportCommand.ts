/**
 * `assay report STORE... [--run-id ID|all] [--errors N] [--json]`: the report of one or more
 * stores, opened read-only (see `src/services/Report.ts` and `docs/export.md`). Several stores
 * are merged (pipelines deduplicated by id). Exit codes: 0 printed; 2 bad flags or an unknown
 * run id or store scheme; 1 a store that is missing or not an assay store. A STORE may be a
 * plugin URI (`scheme://...`) whose scheme a `--plugin SPEC` module (or `ASSAY_PLUGINS`) provides.
 *
 * `assay report ROOT [--experiment ID] [--run-id ID]` on a suite root (a directory holding
 * `manifest.json`, read alone): the cumulative suite view by default (skips of later runs
 * counted), one member with `--experiment`, one invocation's durable outcomes with `--run-id`;
 * the members with their counts, source status and member metrics; pools marked shared or
 * private (see src/services/internal/suiteViews.ts). Exit 2 for an unknown member or run.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Console, Effect, Option } from "effect"
import * as Report from "../services/Report.js"
import * as SuiteViews from "../services/internal/suiteViews.js"
import * as Flags from "./Flags.js"
import { integerAtLeast } from "./Flags.js"
import * as StoreArgs from "./StoreArgs.js"

const stores = Args.text({ name: "store" }).pipe(
  Args.atLeast(1),
  Args.withDescription("Store file(s) or plugin URI(s) to report on; several are merged. Or one suite root (a directory with manifest.json).")
)
const runId = Flags.runId(
  "Run to report: an id, or `all` (default: each store's most recent run; on a suite root: the cumulative view, and an id shows that run's durable outcomes)."
)
const errors = integerAtLeast("errors", 0).pipe(
  Options.optional,
  Options.withDescription("How many recent errors to list (default 10).")
)
const json = Options.boolean("json").pipe(Options.withDescription("Print the report as one JSON object."))

/**
 * The `report` subcommand.
 *
 * @since 0.1.0
 * @category commands
 */
export const report = Command.make("report", { stores, runId, errors, json, plugin: StoreArgs.pluginOption, experiment: StoreArgs.experimentOption }, (o) =>
  Effect.scoped(Effect.gen(function*() {
    const experiment = Option.getOrUndefined(o.experiment)
    const root = yield* StoreArgs.suiteRootOf(o.stores, experiment)
    if (root !== undefined) {
      const { suite } = yield* StoreArgs.openSuite(root)
      const data = yield* SuiteViews.buildSuiteReport(suite, {
        experiment,
        runId: Option.getOrUndefined(o.runId),
        errors: Option.getOrUndefined(o.errors)
      })
      return yield* Console.log(o.json ? JSON.stringify(data, null, 2) : SuiteViews.renderSuiteText(data))
    }
    const opened = yield* StoreArgs.openAll(o.stores, o.plugin)
    const data = yield* Report.buildReport(opened, {
      runId: Option.getOrUndefined(o.runId),
      errors: Option.getOrUndefined(o.errors)
    })
    yield* Console.log(o.json ? JSON.stringify(data, null, 2) : Report.renderText(data))
  }))).pipe(Command.withDescription("Report on one or more stores, or on one suite root (read-only): runs, counts, latency, resources, metrics, errors; a suite root adds its members."))
