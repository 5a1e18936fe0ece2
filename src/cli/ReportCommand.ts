/**
 * `assay report STORE... [--run-id ID|all] [--errors N] [--json]`: the report of one or more
 * stores, opened read-only (see `src/services/Report.ts` and `docs/export.md`). Several stores
 * are merged (pipelines deduplicated by id). Exit codes: 0 printed; 2 bad flags or an unknown
 * run id or store scheme; 1 a store that is missing or not an assay store. A STORE may be a
 * plugin URI (`scheme://...`) whose scheme a `--plugin SPEC` module (or `ASSAY_PLUGINS`) provides.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Console, Effect, Option } from "effect"
import * as Report from "../services/Report.js"
import * as Flags from "./Flags.js"
import { integerAtLeast } from "./Flags.js"
import * as StoreArgs from "./StoreArgs.js"

const stores = Args.text({ name: "store" }).pipe(
  Args.atLeast(1),
  Args.withDescription("Store file(s) or plugin URI(s) to report on; several are merged.")
)
const runId = Flags.runId("Run to report: an id, or `all` (default: each store's most recent run).")
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
export const report = Command.make("report", { stores, runId, errors, json, plugin: StoreArgs.pluginOption }, (o) =>
  Effect.scoped(Effect.gen(function*() {
    const opened = yield* StoreArgs.openAll(o.stores, o.plugin)
    const data = yield* Report.buildReport(opened, {
      runId: Option.getOrUndefined(o.runId),
      errors: Option.getOrUndefined(o.errors)
    })
    yield* Console.log(o.json ? JSON.stringify(data, null, 2) : Report.renderText(data))
  }))).pipe(Command.withDescription("Report on one or more stores (read-only): runs, counts, latency, resources, metrics, errors."))
