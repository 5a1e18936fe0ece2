/**
 * `assay export STORE... OUT --rows KIND --format jsonl|json|csv [--limit N] [--run-id ID]
 * [--time ms|iso] [--flatten [--flatten-depth N]] [--csv-safe]`: writes the rows of one kind of
 * one or more stores (opened read-only, concatenated, `limit` per store) into OUT (see
 * `src/services/Export.ts` and `docs/export.md`): a file atomically (a symbolic link's target
 * likewise, the link kept), `-` to standard output (streamed; the summary line then goes to
 * standard error), a device or FIFO streamed. Prints the number of rows written. Exit codes:
 * 0 written; 2 bad flags (unknown kind or format, a negative limit, fewer than two paths, an
 * unknown store scheme, a `--run-id` no store has, an OUT that is an input store or any
 * existing SQLite file, `--csv-safe` for a format other than csv); 1 a missing store or a
 * write failure (a file OUT untouched). `--run-id all` means every run (no filter). A STORE
 * may be a plugin URI (`scheme://...`) whose scheme a `--plugin SPEC` module (or
 * `ASSAY_PLUGINS`) provides.
 *
 * On a suite root (a directory holding `manifest.json`, given as the only store): the rows of
 * the cumulative suite view (or `--experiment ID`'s), `results` rows with `suiteId`,
 * `experimentId`, `localKey` and `repeat`, audit rows with member identity (a shared pool's
 * events with `experimentId: null`); `--by-experiment` treats OUT as a directory and writes
 * `OUT/ID/ROWS.FORMAT` per member (members in id order, each file atomic; FORMAT from
 * `--format`, default jsonl). `--by-experiment` without a suite root is refused (exit 2).
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Chunk, Console, Context, Effect, Layer, Option, Stream } from "effect"
import * as fs from "node:fs"
import { ConfigError } from "../domain/Errors.js"
import { RunId } from "../domain/Ids.js"
import * as Export from "../services/internal/export.js"
import * as SuiteViews from "../services/internal/suiteViews.js"
import { Store, type StoreService } from "../services/Store.js"
import * as Flags from "./Flags.js"
import { integerAtLeast } from "./Flags.js"
import * as SuiteStore from "../layers/SuiteStore.js"
import * as StoreArgs from "./StoreArgs.js"

const paths = Args.text({ name: "path" }).pipe(
  Args.atLeast(1),
  Args.withDescription("STORE... OUT: the store file(s) or plugin URI(s), or one suite root (a directory with manifest.json), then the output file (- = standard output; a directory with --by-experiment).")
)
const rows = StoreArgs.rowsOption("Row kind: pipelines (nested), tasks, attempts, events, artifacts, results, handoffs (the control-flow ledger), resources and pools (token and cost totals per pool resource and per pool; with --run-id, of that run).")
const format = StoreArgs.formatOption("Output format: jsonl, json or csv (default: from OUT's suffix).")
const limit = integerAtLeast("limit", 0).pipe(
  Options.optional,
  Options.withDescription("At most this many rows per store (0 = none; default all).")
)
const time = Options.choice("time", ["ms", "iso"] as const).pipe(
  Options.withDescription("Times as epoch milliseconds (ms, as stored) or ISO-8601 UTC strings (iso)."),
  Flags.withDefault("ms" as const)
)
const flatten = Options.boolean("flatten").pipe(
  Options.withDescription("Spread nested objects (payload fields, tags, ...) into dotted columns, e.g. payload.label.")
)
const flattenDepth = integerAtLeast("flatten-depth", 1).pipe(
  Options.optional,
  Options.withDescription(`With --flatten (implied): at most this many dots per column name (default ${Export.DEFAULT_FLATTEN_DEPTH}).`)
)
const csvSafe = Options.boolean("csv-safe").pipe(
  Options.withDescription("CSV only: prefix cells starting with = + - @ tab or CR with ' so spreadsheets do not run them as formulas.")
)
const runId = Flags.runId(
  "Only rows of this run (exit 2 when no store has it); `latest`: each store's most recently started run; `all`: every run (the default)."
)
const byExperiment = Options.boolean("by-experiment").pipe(
  Options.withDescription("Suite roots only: OUT is a directory; write OUT/ID/ROWS.FORMAT per member (members in id order, each file atomic).")
)

/** Fails with `ConfigError` (exit 2) when `runId` is a run of none of the opened stores. */
const checkRunId = (runId: RunId, opened: ReadonlyArray<{ readonly source: string; readonly store: StoreService }>) =>
  Effect.gen(function*() {
    for (const { store } of opened) {
      if (Option.isSome(yield* store.getRun(runId))) return
    }
    return yield* new ConfigError({
      message: `run ${runId} is in none of the stores (${opened.map((s) => s.source).join(", ")})`,
      issues: [{ path: "--run-id", message: `unknown run ${runId}` }]
    })
  })

/**
 * `--run-id latest`: each store's most recently started run (`undefined` for a store without
 * one: it has no row to export); exit 2 when no store has a run.
 */
const latestRuns = (opened: ReadonlyArray<{ readonly source: string; readonly store: StoreService }>) =>
  Effect.gen(function*() {
    const latest = yield* Effect.forEach(opened, ({ store }) => Effect.map(store.latestRun, (r) => Option.getOrUndefined(r)?.runId))
    if (latest.every((r) => r === undefined)) {
      return yield* new ConfigError({
        message: `--run-id latest: no run in ${opened.map((s) => s.source).join(", ")}`,
        issues: [{ path: "--run-id", message: "no run to be the latest" }]
      })
    }
    return latest
  })

/**
 * The `export` subcommand.
 *
 * @since 0.1.0
 * @category commands
 */
export const exportCommand = Command.make("export", {
  paths,
  rows,
  format,
  limit,
  runId,
  time,
  flatten,
  flattenDepth,
  csvSafe,
  plugin: StoreArgs.pluginOption,
  experiment: StoreArgs.experimentOption,
  byExperiment
}, (o) =>
  Effect.scoped(Effect.gen(function*() {
    if (o.paths.length < 2) {
      return yield* new ConfigError({ message: "export needs at least one store and an output path: assay export STORE... OUT" })
    }
    const out = o.paths[o.paths.length - 1]!
    const stores = o.paths.slice(0, -1)
    const experiment = Option.getOrUndefined(o.experiment)
    const root = yield* StoreArgs.suiteRootOf(stores, experiment)
    if (o.byExperiment && (root === undefined || out === "-")) {
      const found = root === undefined ? (yield* Effect.forEach(stores, SuiteStore.notARootMessage)).join("; ") : ""
      return yield* new ConfigError({
        message: root === undefined
          ? `--by-experiment splits a suite root's rows by member: give a suite root (a directory with manifest.json); ${found}`
          : "--by-experiment writes files under OUT: OUT must be a directory, not -",
        issues: [{ path: "--by-experiment", message: root === undefined ? "not a suite root" : "OUT is -" }]
      })
    }
    // a split export's OUT is a directory (made when missing): an existing file there is refused
    if (o.byExperiment && fs.statSync(out, { throwIfNoEntry: false })?.isDirectory() === false) {
      return yield* new ConfigError({
        message: `--by-experiment writes OUT/ID/${o.rows}.FORMAT: OUT (${out}) is an existing file, not a directory; ` +
          `give a directory (it is created when missing) or drop --by-experiment to write one file`,
        issues: [{ path: "OUT", message: "an existing file, not a directory" }]
      })
    }
    // a split export's OUT is a directory: the format is --format's (default jsonl)
    const chosen = o.byExperiment
      ? Option.getOrElse(o.format, () => "jsonl" as const)
      : yield* Export.resolveFormat(out, Option.getOrUndefined(o.format))
    // `all` (as in `report --run-id all`) is every run: the same as no filter; `latest` is
    // resolved per store below
    const selection = Flags.runSelection(o.runId)
    if (o.csvSafe && chosen !== "csv") {
      return yield* new ConfigError({
        message: `--csv-safe applies to csv output, not ${chosen}`,
        issues: [{ path: "--csv-safe", message: `not with --format ${chosen}` }]
      })
    }
    const depth = Option.getOrUndefined(o.flattenDepth)
    let options: Export.ExportOptions = {
      kind: o.rows,
      format: chosen,
      limit: Option.getOrUndefined(o.limit),
      runId: selection._tag === "run" ? selection.runId : undefined,
      time: o.time,
      flatten: o.flatten || depth !== undefined ? depth ?? Export.DEFAULT_FLATTEN_DEPTH : undefined,
      csvSafe: o.csvSafe
    }
    yield* Export.checkLimit(options.limit)
    if (root !== undefined) {
      const { store, suite } = yield* StoreArgs.openSuite(root)
      if (options.runId !== undefined) yield* checkRunId(options.runId, [{ source: root, store }])
      if (selection._tag === "latest") options = { ...options, runId: (yield* latestRuns([{ source: root, store }]))[0] }
      if (o.byExperiment) {
        const split = yield* SuiteViews.exportByExperiment(suite, out, { ...options, experiment })
        return yield* Console.log(`exported ${split.rows} ${o.rows} row(s) to ${split.files.length} file(s) under ${out}: ${
          split.files.map((f) => `${f.experimentId} ${f.rows}`).join(", ")
        }`)
      }
      yield* Export.checkOutput(out, [])
      const n = yield* Export.writeRows(SuiteViews.suiteRowItems(suite, { ...options, experiment }), out, options)
      const summary = `exported ${n} ${o.rows} row(s) to ${out === "-" ? "standard output" : out}`
      return yield* out === "-" ? Console.error(summary) : Console.log(summary)
    }
    // Never overwrite a database (an input store, or any SQLite file given as OUT).
    yield* Export.checkOutput(out, stores)
    // Concatenated in the given order, `limit` per store (as `Export.exportStores`).
    // a Postgres store's suite member (--experiment ID): its rows alone, read as a store
    const opened = experiment === undefined
      ? yield* StoreArgs.openAll(stores, o.plugin)
      : [{
        source: StoreArgs.displayOf(stores[0]!),
        store: Context.get(yield* Layer.build(StoreArgs.readLayer(stores[0]!, o.plugin, experiment)), Store)
      }]
    if (options.runId !== undefined) yield* checkRunId(options.runId, opened)
    const latest = selection._tag === "latest" ? yield* latestRuns(opened) : undefined
    const rows = Stream.concatAll(Chunk.fromIterable(opened.map(({ store }, i) =>
      Export.rowItems(store, latest === undefined ? options : { ...options, runId: latest[i] })
    )))
    const n = yield* Export.writeRows(rows, out, options)
    // with `-` the rows are standard output: the summary goes to standard error
    const summary = `exported ${n} ${o.rows} row(s) to ${out === "-" ? "standard output" : out}`
    yield* out === "-" ? Console.error(summary) : Console.log(summary)
  }))).pipe(Command.withDescription("Export rows of one or more stores, or of a suite root (read-only), to a jsonl, json or csv file."))
