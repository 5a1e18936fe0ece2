/**
 * `assay report STORE... [--run-id ID|all] [--errors N] [--top-pipelines N] [--pipelines-by cost|tokens] [--json]`: the report of one or more
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
 * On a study's output root a header comes first: the study, its protocol version, status and
 * trials by status, and the command that reports the study itself (`assay study report FILE`;
 * src/services/internal/studyHeader.ts); in JSON, the `study` key.
 *
 * On one Postgres store (`postgres://...`) that holds suites run on the cluster engine, the
 * report ends with a section per suite: a line per member with its pipelines in the store by
 * state and its facts in the suite's latest run (in JSON, the `suites` key).
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Console, Context, Effect, Layer, Option } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import * as StudyTables from "../layers/internal/study/tables.js"
import * as PgLoad from "../layers/internal/pg/load.js"
import * as PgUrl from "../layers/internal/pg/url.js"
import * as PgSuites from "../layers/internal/pg/suites.js"
import * as Manifest from "../layers/internal/suite/manifest.js"
import * as Report from "../services/Report.js"
import { Store } from "../services/Store.js"
import * as StudyHeader from "../services/internal/studyHeader.js"
import * as SuiteViews from "../services/internal/suiteViews.js"
import * as Flags from "./Flags.js"
import { integerAtLeast } from "./Flags.js"
import * as StoreArgs from "./StoreArgs.js"
import { CLUSTER_MARKER } from "./StudyRun.js"

const stores = Args.text({ name: "store" }).pipe(
  Args.atLeast(1),
  Args.withDescription("Store file(s) or plugin URI(s) to report on; several are merged. Or one suite root (a directory with manifest.json).")
)
const runId = Flags.runId(
  "Run to report: an id, `latest` (each store's most recently started run: the default) or `all`; on a suite root the default is the cumulative view, `latest` the root's latest run, and an id shows that run's durable outcomes."
)
const errors = integerAtLeast("errors", 0).pipe(
  Options.optional,
  Options.withDescription("How many recent errors to list (default 10).")
)
const topPipelines = integerAtLeast("top-pipelines", 0).pipe(
  Options.optional,
  Options.withDescription("How many pipelines the per-pipeline token and cost list shows (default 10; 0: none).")
)
const pipelinesBy = Options.choice("pipelines-by", ["cost", "tokens"] as const).pipe(
  Options.optional,
  Options.withDescription("Order of the per-pipeline token and cost list: cost (default) or tokens (in + out).")
)
const json = Options.boolean("json").pipe(Options.withDescription("Print the report as one JSON object."))

/**
 * The `report` subcommand.
 *
 * @since 0.1.0
 * @category commands
 */
/**
 * The Postgres store a study root the cluster engine ran names in its `cluster.json` (the URL
 * as recorded, without the password: given back with none, to be pasted, and whether it had
 * one); `undefined` for a root the embedded engine ran (no such file, or not readable).
 */
const clusterDatabaseOf = (root: string): Effect.Effect<{ readonly url: string; readonly hadPassword: boolean } | undefined> =>
  Effect.sync(() => {
    try {
      const marker = JSON.parse(fs.readFileSync(nodePath.join(root, CLUSTER_MARKER), "utf8")) as { readonly database?: unknown }
      const recorded = marker.database
      return typeof recorded === "string" && recorded !== ""
        ? { url: PgUrl.withoutPassword(recorded), hadPassword: PgUrl.hasPassword(recorded) }
        : undefined
    } catch {
      return undefined
    }
  })

export const report = Command.make("report", {
  stores,
  runId,
  errors,
  topPipelines,
  pipelinesBy,
  json,
  plugin: StoreArgs.pluginOption,
  experiment: StoreArgs.experimentOption
}, (o) =>
  Effect.scoped(Effect.gen(function*() {
    const experiment = Option.getOrUndefined(o.experiment)
    // a suite's catalog database holds no pipelines: its root is what the user means
    const catalogRoot = o.stores.length === 1 ? yield* StoreArgs.catalogRootOf(o.stores[0]!) : undefined
    if (catalogRoot !== undefined) {
      yield* Console.error(
        `note: ${o.stores[0]} is the catalog database of a suite (its members and runs, none of their pipelines): ` +
          `showing the suite's report; next time give its root: assay report ${catalogRoot}`
      )
    }
    const root = yield* StoreArgs.suiteRootOf(catalogRoot === undefined ? o.stores : [catalogRoot], experiment)
    // `--run-id` as every read command parses it (`latest` too: tester18d F8)
    const selection = Flags.runSelection(o.runId)
    if (root !== undefined) {
      const { store, study, suite } = yield* StoreArgs.openSuite(root)
      // on a suite root no id is the cumulative view: `latest` names the root's latest run
      const latest = selection._tag === "latest" ? Option.getOrUndefined(yield* store.latestRun)?.runId : undefined
      const data = yield* SuiteViews.buildSuiteReport(suite, {
        experiment,
        runId: selection._tag === "run" ? selection.runId : selection._tag === "all" ? "all" : latest,
        errors: Option.getOrUndefined(o.errors)
      })
      // a study's root: its suite view is the trials' pipelines; the header names the study and
      // the command that reports it
      const abs = nodePath.resolve(root)
      const alive = StudyTables.writerAlive(nodePath.join(abs, Manifest.catalogOf(suite.layout)))
      // a root the cluster engine ran keeps none of its trials' pipelines: they are in the
      // Postgres store its `cluster.json` names (without the password), which the header
      // names, with the commands to type (tester17af F6)
      const cluster = yield* clusterDatabaseOf(abs)
      const header = Option.getOrUndefined(yield* StudyHeader.studyHeaderOf(study.study, suite.suiteId, root, alive, cluster?.url))
      if (header !== undefined && cluster !== undefined) {
        if (o.json) return yield* Console.log(JSON.stringify({ study: header }, null, 2))
        yield* Console.log(StudyHeader.renderStudyHeader(header))
        if (cluster.hadPassword) yield* Console.log(`  (${PgUrl.PASSWORD_HINT})`)
        return
      }
      if (o.json) return yield* Console.log(JSON.stringify(header === undefined ? data : { study: header, ...data }, null, 2))
      const text = SuiteViews.renderSuiteText(data)
      return yield* Console.log(header === undefined ? text : `${StudyHeader.renderStudyHeader(header)}\n\n${text}`)
    }
    // a Postgres store's suite member (--experiment ID): its pipelines alone, read as a store
    // (an unknown or ambiguous member is refused, exit 2), as export, watch and serve show it
    const member = StoreArgs.pgMember(o.stores, experiment) ? experiment : undefined
    const opened = member === undefined
      ? yield* StoreArgs.openAll(o.stores, o.plugin)
      : [{
        source: `${StoreArgs.displayOf(o.stores[0]!)} [member ${member}]`,
        store: Context.get(yield* Layer.build(StoreArgs.readLayer(o.stores[0]!, o.plugin, member)), Store)
      }]
    const data = yield* Report.buildReport(opened, {
      // no id is each store's latest run already
      runId: selection._tag === "run" ? selection.runId : selection._tag === "all" ? "all" : undefined,
      errors: Option.getOrUndefined(o.errors),
      topPipelines: Option.getOrUndefined(o.topPipelines),
      pipelinesBy: Option.getOrUndefined(o.pipelinesBy)
    })
    // a Postgres store that holds suites run on the cluster engine: their members, each with its
    // pipelines by state and its facts in the suite's latest run (`layers/internal/pg/suites.ts`)
    const url = o.stores.length === 1 && /^postgres(ql)?:\/\//.test(o.stores[0]!) ? o.stores[0]! : undefined
    const every = url === undefined ? [] : yield* Effect.flatMap(PgLoad.loadPgSuiteReport, (m) => m.readSuites(url))
    // with --experiment, the suite section keeps that member's line alone (`ID` or `SUITE/ID`,
    // resolved as the store's view resolved it)
    const picked = member === undefined || url === undefined
      ? undefined
      : yield* Effect.flatMap(PgLoad.loadPgStore, (PgStore) => PgStore.memberOf(url, member))
    const suites = picked === undefined ? every : every.flatMap((s) => {
      if (s.suiteId !== picked.suiteId) return []
      const members = s.members.filter((m) => m.experimentId === picked.experimentId)
      return members.length === 0 ? [] : [{ ...s, members }]
    })
    if (o.json) return yield* Console.log(JSON.stringify(suites.length === 0 ? data : { ...data, suites }, null, 2))
    const text = Report.renderText(data)
    yield* Console.log(suites.length === 0 ? text : `${text}\n\n${PgSuites.renderSummaries(suites)}`)
  }))).pipe(Command.withDescription("Report on one or more stores, or on one suite root (read-only): runs, counts, latency, resources, metrics, errors; a suite root adds its members."))
