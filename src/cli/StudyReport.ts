/**
 * `assay study report|evidence FILE`: the comparison of a study's variants, read-only (never
 * waits for the writer lock).
 *
 * - `report FILE [--format text|markdown|json] [--protocol-version N] [--seed N]`: the sections Design,
 *   Run, Compare, Evidence and Conclusion (`StudyCompare.renderText` / `renderMarkdown`), or
 *   the `StudyComparison` as one JSON object;
 * - `evidence FILE METRIC VARIANT [--worst N] [--best N] [--json]`: the trials and pipelines
 *   behind a variant's value of a metric, and its worst and best cases.
 *
 * Exit codes: 0; 2 for an invalid study file or flag, a study that never ran in its output
 * root, an unknown version, metric or variant; 1 when the root cannot be read.
 *
 * @since 0.6.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import * as nodePath from "node:path"
import { Console, Effect, Option } from "effect"
import * as StudyConfig from "../config/Study.js"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import * as DomainStudy from "../domain/Study.js"
import * as SuiteStore from "../layers/SuiteStore.js"
import { CLUSTER_MARKER, loadClusterStudy } from "./StudyRun.js"
import * as StudyCompare from "../services/StudyCompare.js"
import { StudyCatalog } from "../services/StudyCatalog.js"
import { SuiteCatalog } from "../services/SuiteCatalog.js"
import * as StudyView from "../services/internal/studyView.js"
import type { Json } from "../domain/Json.js"

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * The comparison input (`StudyCompare.CompareInput`) of a loaded study file: its identity,
 * objectives, metrics, analysis settings, baseline, variants, variables, repeats and budget.
 *
 * @param loaded the study file as `StudyConfig.load` returns it
 * @since 0.7.0
 * @category report
 */
export const inputOf = (loaded: StudyConfig.LoadedStudy): StudyCompare.CompareInput => ({
  id: loaded.id,
  question: loaded.question,
  hypothesis: loaded.hypothesis,
  type: loaded.type,
  objectives: loaded.objectives,
  metrics: loaded.metrics,
  analysis: loaded.analysis,
  baseline: { id: loaded.baseline.id },
  variants: loaded.variants.map((v) => ({ id: v.id, assignment: v.assignment })),
  variables: loaded.variables.map((v) => ({ name: v.name, type: v.type })),
  repeats: loaded.repeats,
  budget: loaded.budget
})

/**
 * The comparison input of the protocol version a view reports (`version`, default the study's
 * current one): the objectives, declared metrics, variants (ids and assignments), baseline,
 * variables and repeats frozen with that version, as the dashboard's `/study` reads them; only
 * the analysis settings (level, resamples, seed: not protocol) are the file's. A version-1
 * report therefore ranks by version 1's objectives even after the file's changed (issue 16's
 * trial found the report ranking an old version by the file's new objectives); the report's
 * Design section says so (`objectives (as frozen with protocol version 1)`). The file's variables are never re-expanded: once the file has changed
 * (a value added, say), its expansion numbers the variants differently from the trials that
 * ran, and the views would label old trials with another variant's assignment. A version the
 * root does not hold gives the file's input unchanged (the comparison refuses it, naming
 * `--protocol-version`).
 *
 * @param loaded the study file as `StudyConfig.load` returns it
 * @param version the protocol version reported (default: the current one)
 * @since 0.11.0
 * @category report
 */
export const frozenInputOf = (
  loaded: StudyConfig.LoadedStudy,
  version: number | undefined
): Effect.Effect<StudyCompare.CompareInput, StoreUnavailable, StudyCatalog> =>
  Effect.gen(function*() {
    const fromFile = inputOf(loaded)
    const catalog = yield* StudyCatalog
    const row = yield* catalog.study(loaded.id)
    if (Option.isNone(row)) return fromFile
    const wanted = version ?? row.value.currentVersion
    const record = (yield* catalog.versions(loaded.id)).find((v) => v.version === wanted)
    if (record === undefined) return fromFile
    const seen = new Map<string, Readonly<Record<string, Json>>>()
    for (const t of yield* catalog.trials(loaded.id, wanted)) {
      if (!seen.has(t.variantId)) seen.set(t.variantId, (typeof t.variant === "object" && t.variant !== null ? t.variant : {}) as Record<string, Json>)
    }
    const frozen = StudyView.inputOf(row.value, record, Array.from(seen, ([id, assignment]) => ({ id, assignment })))
    // the version's own objectives and declared metrics (protocol parts frozen with it), not
    // the file's current ones: a version's report reads the same whatever the file says now
    // (as the dashboard's does); the analysis settings (not protocol) are the file's
    return {
      ...fromFile,
      objectives: frozen.objectives,
      metrics: frozen.metrics,
      baseline: frozen.baseline,
      variants: frozen.variants,
      variables: (frozen.variables ?? []).length > 0 ? frozen.variables : fromFile.variables,
      repeats: frozen.repeats ?? fromFile.repeats
    }
  })

const some = <A>(o: Option.Option<A>): A | undefined => Option.getOrUndefined(o)

/** Runs `f` over the study's root opened read-only. */
const withRoot = <A>(
  file: string,
  outputRoot: Option.Option<string>,
  database: Option.Option<string>,
  version: Option.Option<number>,
  f: (input: StudyCompare.CompareInput, loaded: StudyConfig.LoadedStudy) => Effect.Effect<A, unknown, StudyCatalog | SuiteCatalog>
): Effect.Effect<A, unknown, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const loaded = yield* StudyConfig.load(file, {
      allowOverCap: true,
      scanKeys: "none", // store-only: the data set is never read (it may have moved)
      ...(Option.isSome(outputRoot) ? { outputRoot: nodePath.resolve(outputRoot.value) } : {})
    })
    const root = loaded.outputRoot
    if (!(yield* SuiteStore.isSuiteRoot(root))) {
      return yield* configError("study.id", `study "${loaded.id}" has never run in ${root}: nothing to report (run assay study run first)`)
    }
    const h = yield* SuiteStore.makeRead(root)
    if (h.catalog.suiteId !== loaded.id) {
      return yield* configError("study.id", `the output root ${root} belongs to "${h.catalog.suiteId}", not study "${loaded.id}"`)
    }
    // a root the cluster engine ran keeps its pipelines in the cluster's Postgres store: read there (--database)
    let stores = { catalog: h.catalog, study: h.study }
    const fs = yield* FileSystem.FileSystem
    if (Option.isSome(database) || (yield* fs.exists(nodePath.join(root, CLUSTER_MARKER)).pipe(Effect.orElseSucceed(() => false)))) {
      const cluster = yield* loadClusterStudy
      const swap = yield* cluster.readViews(root, database)
      if (swap !== undefined) stores = swap(stores)
    }
    return yield* Effect.flatMap(frozenInputOf(loaded, some(version)), (input) => f(input, loaded)).pipe(
      Effect.provideService(StudyCatalog, stores.study),
      Effect.provideService(SuiteCatalog, stores.catalog)
    )
  }))

/**
 * `assay study report FILE` (see the module docs).
 *
 * @since 0.6.0
 * @category commands
 */
export const report = (args: {
  readonly file: string
  readonly outputRoot: Option.Option<string>
  /** `--database URL`: the cluster's store, for a study the cluster engine ran (since 0.15.0). */
  readonly database?: Option.Option<string> | undefined
  readonly format: "text" | "markdown" | "json"
  readonly version: Option.Option<number>
  readonly seed: Option.Option<number>
}): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  withRoot(args.file, args.outputRoot, args.database ?? Option.none(), args.version, (input, loaded) =>
    Effect.gen(function*() {
      const c = yield* StudyCompare.compare(input, { version: some(args.version), seed: some(args.seed) })
      // without --protocol-version the study's current version is shown: when the file's
      // protocol is another version's (or none's), say which is shown and why (on stderr, so
      // the JSON on stdout stays whole)
      if (Option.isNone(args.version)) {
        const list = yield* Effect.flatMap(StudyCatalog, (catalog) => catalog.versions(input.id))
        const current = list[list.length - 1]
        if (current !== undefined && !DomainStudy.protocolMatches(current.protocolDigest, loaded)) {
          const match = list.find((v) => DomainStudy.protocolMatches(v.protocolDigest, loaded))
          yield* Console.error(
            match !== undefined
              ? `note: this reports version ${current.version}, the study's current protocol version; the file's protocol is version ${match.version}'s (run with --protocol-version ${match.version} to report that one)`
              : `note: this reports version ${current.version}, the study's current protocol version; the file's protocol matches no stored version (it changed since; assay study versions ${args.file} says how)`
          )
        }
      }
      yield* Console.log(
        args.format === "json" ? JSON.stringify(c) : args.format === "markdown" ? StudyCompare.renderMarkdown(c) : StudyCompare.renderText(c)
      )
    }))

/**
 * `assay study evidence FILE METRIC VARIANT` (see the module docs).
 *
 * @since 0.6.0
 * @category commands
 */
export const evidence = (args: {
  readonly file: string
  readonly metric: string
  readonly variant: string
  readonly outputRoot: Option.Option<string>
  /** `--database URL`: the cluster's store, for a study the cluster engine ran (since 0.15.0). */
  readonly database?: Option.Option<string> | undefined
  readonly version: Option.Option<number>
  readonly worst: number
  readonly best: number
  readonly json: boolean
}): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  withRoot(args.file, args.outputRoot, args.database ?? Option.none(), args.version, (input) =>
    Effect.gen(function*() {
      const e = yield* StudyCompare.evidence(input, args.metric, args.variant, {
        version: some(args.version),
        worst: args.worst,
        best: args.best
      })
      yield* Console.log(args.json ? JSON.stringify(e) : StudyCompare.renderEvidence(e))
    }))

const file = Args.file({ name: "FILE", exists: "either" }).pipe(Args.withDescription("The study file (YAML, JSON, TOML or TypeScript)."))
const outputRoot = Options.text("output-root").pipe(
  Options.withDescription("The study's output root, relative to the working directory (overrides output.root)."),
  Options.optional
)
// not `--version`: @effect/cli reads that flag anywhere on the line as "print assay's version"
const version = Options.integer("protocol-version").pipe(
  Options.withDescription("The protocol version to report (default: the current one)."),
  Options.optional
)
const database = Options.text("database").pipe(
  Options.withPseudoName("URL"),
  Options.optional,
  Options.withDescription("For a study run with --engine cluster: the cluster's PostgreSQL database, where its pipelines are.")
)
const count = (name: string, what: string) =>
  Options.integer(name).pipe(Options.withDescription(`How many ${what} cases to list (default 5).`), Options.withDefault(5))

/**
 * The subcommands `report` and `evidence` of `assay study`.
 *
 * @since 0.6.0
 * @category commands
 */
export const subcommands = [
  Command.make("report", {
    file,
    outputRoot,
    database,
    version,
    format: Options.choice("format", ["text", "markdown", "json"]).pipe(
      Options.withDescription("text (default), markdown, or json (the StudyComparison)."),
      Options.withDefault("text" as const)
    ),
    seed: Options.integer("seed").pipe(Options.withDescription("The bootstrap seed (default: analysis.seed of the study, else 1)."), Options.optional)
  }, (o) => report(o)).pipe(
    Command.withDescription("Compare the variants of a study: Design, Run, Compare (intervals, paired deltas, Pareto), Evidence, Conclusion.")
  ),
  Command.make("evidence", {
    file,
    metric: Args.text({ name: "METRIC" }).pipe(Args.withDescription("A metric: declared, built in, or named by an objective.")),
    variant: Args.text({ name: "VARIANT" }).pipe(Args.withDescription("A variant id, e.g. v02.")),
    outputRoot,
    database,
    version,
    worst: count("worst", "worst"),
    best: count("best", "best"),
    json: Options.boolean("json").pipe(Options.withDescription("Print one JSON object."))
  }, (o) => evidence(o)).pipe(
    Command.withDescription("List the trials and pipelines behind a variant's value of a metric, with its worst and best cases.")
  )
] as const
