/**
 * `assay merge STORE... -o OUT [--rows pipelines|results|...] [--format F]`: merges shard
 * stores (deduplicated by pipeline id, see `src/services/Merge.ts`), prints the merged summary
 * and writes the merged view to OUT atomically. The format defaults to OUT's suffix (`.csv`,
 * `.json`, else jsonl). Exit codes: 0 merged; 2 bad flags, a row without `attemptsTotal`, or
 * an OUT that is an input store or any existing SQLite file (nothing written);
 * 1 a missing store or a write failure. A STORE may be a plugin URI (`scheme://...`) whose
 * scheme a `--plugin SPEC` module (or `ASSAY_PLUGINS`) provides (exit 2 for an unknown one).
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Console, Effect, Option } from "effect"
import * as Export from "../services/internal/export.js"
import { mergeSources, readSource } from "../services/internal/merge.js"
import * as StoreArgs from "./StoreArgs.js"

const stores = Args.text({ name: "store" }).pipe(Args.atLeast(1), Args.withDescription("Store files (or plugin URIs) to merge."))
const output = Options.text("output").pipe(Options.withAlias("o"), Options.withDescription("Output file of the merged rows."))
const rows = StoreArgs.rowsOption("Row kind of the merged file.")
const format = StoreArgs.formatOption("Output format (default: from OUT's suffix).")


/**
 * The `merge` subcommand.
 *
 * @since 0.1.0
 * @category commands
 */
export const merge = Command.make("merge", { stores, output, rows, format, plugin: StoreArgs.pluginOption }, (o) =>
  Effect.gen(function*() {
    const chosen = yield* Export.resolveFormat(o.output, Option.getOrUndefined(o.format))
    // Never overwrite a database (an input store, or any SQLite file given as -o).
    yield* Export.checkOutput(o.output, o.stores)
    // As `Merge.mergeReports`, with stores opened by the resolver (paths or plugin URIs).
    const registry = yield* StoreArgs.registryFor(o.stores, o.plugin)
    const sources = yield* Effect.scoped(Effect.flatMap(
      StoreArgs.openWith(o.stores, registry),
      (opened) => Effect.forEach(opened, ({ source, store }) => readSource(source, store))
    ))
    const merged = yield* mergeSources(sources, StoreArgs.reopener(registry))
    const n = yield* merged.export(o.output, {
      kind: o.rows,
      format: chosen
    })
    yield* Console.log(merged.summary())
    yield* Console.log(`wrote ${n} ${o.rows} row(s) to ${o.output}`)
  })).pipe(Command.withDescription("Merge shard stores (dedupe by pipeline id) into one file and print the summary."))
