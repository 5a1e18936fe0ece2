/**
 * Loading a declarative experiment: a JSON, TOML or YAML file, or a TypeScript module whose
 * default export is `defineExperiment({...})`, turned into pools, a pipeline template, a seed
 * source and run settings.
 *
 * Loading is the one validation entry point shared by `assay validate`, `assay run` and every
 * shard process: it parses the file (parser chosen by suffix), expands `${VAR}` and
 * `${VAR:-default}` in every string value, decodes the result with the experiment Schema
 * (every problem at once, unknown keys with a did-you-mean suggestion), then checks what the
 * Schema cannot: `use:` targets, pool references (including a task's own declared resource),
 * algorithm names and options, resources, the source and the run settings. Everything is
 * reported in one `ConfigError` whose `issues` carry field paths
 * (`pools.apis.resources[1].capacity`). Loading never opens a store; of a `jsonl` dataset it
 * reads only a bounded head (see {@link LoadOptions}) to check keys and find integers beyond
 * 2^53 (`warnings`).
 *
 * @since 0.1.0
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Duration, Effect, type Either, Option, type Stream } from "effect"
import type { ConfigError, ConfigIssue } from "../../domain/Errors.js"
import type { Json } from "../../domain/Json.js"
import type * as Pipeline from "../../domain/Pipeline.js"
import * as RunConfig from "../../domain/RunConfig.js"
import type * as Pool from "../../services/Pool.js"
import type { KeyScan, SourceError, SourceScan } from "../../tasks/Sources.js"
import type * as Plugins from "../../layers/Plugins.js"
import type { ExperimentDefinition as Definition, ExperimentInput } from "../Config.js"
import { check } from "./check.js"
import * as parse from "./parse.js"
import * as sources from "./sources.js"

/**
 * Identity helper for TypeScript experiments (`export default defineExperiment({...})`),
 * re-exported from `config/Config` so that `Experiment.defineExperiment` and
 * `Config.defineExperiment` are the same function. Checking happens in {@link load}.
 *
 * @since 0.1.0
 * @category loading
 */
export { defineExperiment } from "../Config.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * The file formats, chosen by suffix: `.json`; `.toml`; `.yaml` / `.yml`; `.ts` / `.mts` /
 * `.js` / `.mjs` (a module whose default export is the definition).
 *
 * @since 0.1.0
 * @category models
 */
export type Format = "json" | "toml" | "yaml" | "module"

/**
 * The resolved seed source: `range` (`n` integers `0..n-1`) or `jsonl` (an absolute `path`,
 * an optional row `limit`), plus `keyField` (explicit pipeline keys from that field of each
 * row) and `repeats` (pipelines per row, default 1).
 *
 * @since 0.1.0
 * @category models
 */
export type SourceSpec =
  & (
    | { readonly kind: "range"; readonly n: number }
    | {
      readonly kind: "jsonl"
      readonly path: string
      readonly limit: number | undefined
      /** How many rows loading checked the keys of, and whether that was the whole file. */
      readonly keyScan?: KeyScan | undefined
      /** What loading read of the file (keys checked, integers beyond 2^53 found). */
      readonly scan?: SourceScan | undefined
    }
  )
  & { readonly keyField: string | undefined; readonly repeats: number }

/**
 * Options of {@link load} / {@link fromDefinition}:
 * - `strictEnv`: an unresolved `${VAR}` is an error (default: it expands to `""` and is
 *   listed in `unresolvedEnv`);
 * - `env`: the variables to expand from (default `process.env`).
 *
 * @since 0.1.0
 * @category models
 */
export interface LoadOptions {
  readonly strictEnv?: boolean | undefined
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
  /**
   * How much of a `jsonl` source is read to check its keys when it has a `keyField` (every row
   * has one, none repeats) and, keyed or not, to find integers beyond 2^53 (a warning: tasks
   * receive them rounded): `"head"` (default, what `run` does) reads the first
   * {@link KEY_SCAN_HEAD_ROWS} rows; `"full"` (what `validate` does) reads the whole file when
   * it is under {@link KEY_SCAN_FULL_MAX_BYTES}, else the first {@link KEY_SCAN_LARGE_ROWS}
   * rows (the run checks the rest as it streams); `"none"` (what the store-only readers use:
   * `assay study report`, `evidence`, `export`, `template`) neither reads the file nor requires
   * it to exist, so results moved without their data set still load.
   */
  readonly scanKeys?: "head" | "full" | "none" | undefined
}

/**
 * The rows of a large `jsonl` source whose keys {@link load} checks (100): see
 * {@link LoadOptions}.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_HEAD_ROWS: number = sources.KEY_SCAN_HEAD_ROWS

/**
 * The largest `jsonl` source (bytes, 50 MiB) whose keys `validate` checks in full.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_FULL_MAX_BYTES: number = sources.KEY_SCAN_FULL_MAX_BYTES

/**
 * The rows of a larger `jsonl` source whose keys `validate` checks (100 000).
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_LARGE_ROWS: number = sources.KEY_SCAN_LARGE_ROWS

/**
 * Largest JSON Lines file (bytes) whose rows {@link sourceSize} counts when no limit bounds
 * the read: 64 MiB (one pass at disk speed, well under a second here).
 *
 * @since 0.1.0
 * @category constants
 */
export const COUNT_LINES_MAX_BYTES: number = sources.COUNT_LINES_MAX_BYTES

/**
 * The number of pipelines a source yields with an optional row `limit` (the CLI's
 * `--limit`), times `repeats`, when it is cheap to know:
 *
 * - `range`: `min(n, limit) × repeats`;
 * - `jsonl`: the non-blank lines are counted in one streaming pass that stops at the
 *   effective limit (`min(limit, source.limit)`), so a bounded count reads only that many
 *   rows; without any limit the file is counted only when it is at most
 *   {@link COUNT_LINES_MAX_BYTES}, else `undefined`. An unreadable file gives `undefined`
 *   (the run itself reports the error).
 *
 * Never fails. Used as the progress total and recorded as the run's `meta.total` (the ETA
 * of `serve` / `watch`).
 *
 * @since 0.1.0
 * @category loading
 */
export const sourceSize: (
  source: SourceSpec,
  limit?: number
) => Effect.Effect<number | undefined, never, FileSystem.FileSystem> = sources.sourceSize

/**
 * A loaded, checked experiment.
 *
 * - `file`, `format`, `baseDir`: where it came from (relative paths in the file resolve
 *   against `baseDir`);
 * - `definition`: the decoded sections;
 * - `template`: the pipeline template; `pools`: the pool declarations; `source`: the seeds;
 * - `run`: the run settings as a `RunConfigInput` (`store` resolved against `baseDir`);
 * - `plugins`: the plugins it lists (a plugin that failed to load is listed with its error);
 * - `unresolvedEnv`: the `${VAR}` references that had no value, with where they were;
 * - `seeds(limit?)`: the seed stream (lazy); `pipelines(limit?)`: the spec stream for the
 *   runner (`limit` counts rows of the source, before `repeats`). With a `keyField`, both fail
 *   with a `ConfigError` (path `source.keyField`, CLI exit 2) at the first row without a key
 *   or repeating an earlier key, which stops admission;
 * - `size(limit?)`: the number of pipelines `pipelines(limit)` yields, when it is cheap to
 *   know (see {@link sourceSize}), else `undefined`;
 * - `describe()`: a JSON summary (what `assay validate` prints).
 *
 * @since 0.1.0
 * @category models
 */
export interface Experiment {
  readonly file: string
  readonly format: Format
  readonly baseDir: string
  readonly definition: Definition
  readonly template: Pipeline.AnyTemplate
  readonly pools: ReadonlyArray<Pool.PoolConfig>
  readonly source: SourceSpec
  readonly run: RunConfig.RunConfigInput
  readonly plugins: Plugins.PluginRegistry
  readonly unresolvedEnv: ReadonlyArray<{ readonly name: string; readonly path: string }>
  readonly seeds: (limit?: number) => Stream.Stream<unknown, SourceError | ConfigError, FileSystem.FileSystem>
  readonly pipelines: (
    limit?: number
  ) => Stream.Stream<
    Pipeline.PipelineSpec<any, any, any, any>,
    SourceError | ConfigError | Pipeline.SeedError,
    FileSystem.FileSystem
  >
  readonly size: (limit?: number) => Effect.Effect<number | undefined, never, FileSystem.FileSystem>
  readonly describe: () => Json
  /**
   * Warnings about the source found while loading (one line each, printed by `validate` and
   * `run` on stderr before anything runs): integers beyond 2^53 in the rows read, which
   * tasks receive rounded (see `Sources.unsafeIntegersWarning`).
   */
  readonly warnings: ReadonlyArray<string>
  /**
   * The shared call cache database `run.cache.db` names (since 0.12.0): `path` resolved
   * against `baseDir` (absolute), `written` its text in the file (a `${VAR}` as written);
   * absent when the file names none. What `validate` shows (tester18c F9: it showed the
   * relative or expanded text only).
   */
  readonly cacheDb?: { readonly path: string; readonly written: string } | undefined
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

/**
 * An experiment file read and parsed but not yet checked (see {@link read}).
 *
 * @since 0.1.0
 * @category loading
 */
export interface RawExperiment {
  /** The absolute path of the file. */
  readonly file: string
  /** Its format, from its suffix. */
  readonly format: Format
  /** The folder relative paths inside the file resolve against. */
  readonly baseDir: string
  /** The parsed document (or a module's default export), not yet decoded. */
  readonly raw: unknown
  /**
   * Problems only the text shows (an integer field written as a float literal, `3.0`, which
   * parses as the number 3), reported with the Schema's by `load`.
   */
  readonly literalIssues?: ReadonlyArray<ConfigIssue> | undefined
}

/**
 * Reads and parses an experiment file without checking it against the Schema: the first half
 * of {@link load}, shared with `assay plugins` (which only needs the `plugins` list). Fails
 * with the same `ConfigError`s as `load`: unknown suffix, missing or unreadable file, a module
 * that cannot be imported or has no default export, a syntax error (compiler-style, with line
 * and column).
 *
 * @since 0.1.0
 * @category loading
 */
export const read: (file: string) => Effect.Effect<RawExperiment, ConfigError, FileSystem.FileSystem> = parse.read

/**
 * Loads and checks an experiment file (`.json`, `.toml`, `.yaml`/`.yml`, or a `.ts`/`.mts`/
 * `.js`/`.mjs` module whose default export is the definition). Relative paths inside the file
 * (`source.jsonl.path`, `run.store`, `use: "./tasks.ts#ask"`, plugins, `writeJsonl`'s path)
 * resolve against the file's directory. Fails with a `ConfigError` listing every problem with
 * its field path; never opens a store, and reads only a bounded head of a `jsonl` dataset
 * (see {@link LoadOptions}).
 *
 * @since 0.1.0
 * @category loading
 */
export const load = (
  file: string,
  options: LoadOptions = {}
): Effect.Effect<Experiment, ConfigError, FileSystem.FileSystem> =>
  Effect.flatMap(
    read(file),
    ({ baseDir, file: abs, format, literalIssues, raw }) => check(raw, { file: abs, baseDir, format, literalIssues }, options)
  )

/**
 * Checks and builds an experiment from an in-code definition (what a TypeScript experiment
 * exports), with relative paths resolved against `baseDir` (default: the current directory).
 * Same checks and errors as {@link load}.
 *
 * @since 0.1.0
 * @category loading
 */
export const fromDefinition = (
  definition: ExperimentInput,
  options: LoadOptions & { readonly baseDir?: string | undefined; readonly name?: string | undefined } = {}
): Effect.Effect<Experiment, ConfigError, FileSystem.FileSystem> => {
  const baseDir = path.resolve(options.baseDir ?? ".")
  return check(definition, { file: options.name ?? "<definition>", format: "module", baseDir }, options)
}

/**
 * The run settings of an experiment with command-line overrides applied on top (a key whose
 * value is `undefined` keeps the file's value). Fails with `ConfigError` (paths `run.<field>`)
 * when the result is invalid.
 *
 * @since 0.1.0
 * @category loading
 */
export const runSettings = (
  experiment: Experiment,
  overrides: RunConfig.RunConfigInput
): Either.Either<RunConfig.RunConfig, ConfigError> => {
  const merged: Record<string, unknown> = { ...experiment.run }
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) merged[k] = v
  return RunConfig.resolve(merged as RunConfig.RunConfigInput)
}

/**
 * "the source produced no rows (rows.jsonl)": what `run` (exit 1) and `validate` (a
 * warning) say about an experiment whose source is empty.
 *
 * @since 0.1.0
 * @category loading
 */
export const emptySourceMessage = (experiment: Experiment): string => {
  const src = experiment.source
  const where = src.kind === "jsonl" ? path.relative(process.cwd(), src.path) || src.path : `range n=${src.n}`
  return `the source produced no rows (${where})`
}

/**
 * The one-line stderr warning `run` / `resume` print when the run has no store at all (no
 * `run.store` in the file and no `--store` flag, so the in-memory store is used): results are
 * not kept and there is nothing to resume. `undefined` when a store was named (an explicit
 * `":memory:"` is a choice and gets no warning).
 *
 * @since 0.1.0
 * @category loading
 */
export const noStoreWarning = (experiment: Experiment, storeFlag: string | undefined): string | undefined =>
  storeFlag !== undefined || experiment.run.store !== undefined
    ? undefined
    : `warning: ${path.basename(experiment.file)} sets no run.store and no --store was given: the store is ":memory:", ` +
      "so results are not kept and there is nothing to resume"

/**
 * A duration written in a CLI flag (`"30 seconds"`), or `None` when it does not parse.
 *
 * @since 0.1.0
 * @category loading
 */
export const parseDuration = (text: string): Option.Option<Duration.Duration> =>
  Option.filter(Duration.decodeUnknown(text.trim()), Duration.isFinite)

