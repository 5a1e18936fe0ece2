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
import * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Chunk, Duration, Effect, Either, Option, ParseResult, Schema, Stream } from "effect"
import { parse as parseToml } from "smol-toml"
import * as YAML from "yaml"
import {
  allowedKeysAt,
  ExperimentDefinition,
  type ExperimentDefinition as Definition,
  ExperimentFile,
  type ExperimentInput,
  FANOUT,
  placesOfKey
} from "../domain/Config.js"
import { ConfigError, type ConfigIssue, PipelineBuildError } from "../domain/Errors.js"
import type { Json } from "../domain/Json.js"
import type { AlgorithmInput } from "../domain/Lease.js"
import * as Pipeline from "../domain/Pipeline.js"
import * as Resource from "../domain/Resource.js"
import type { RetryPolicy } from "../domain/RetryPolicy.js"
import * as RunConfig from "../domain/RunConfig.js"
import * as Task from "../domain/Task.js"
import { type AcquireAlgorithm, resolveAlgorithm } from "../services/AcquireAlgorithm.js"
import * as Pool from "../services/Pool.js"
import { builtins, builtinTaskNames } from "../tasks/Builtins.js"
import * as Chat from "../tasks/Chat.js"
import { fanout, type FanoutOptions } from "../tasks/Fanout.js"
import {
  jsonlKeyedRows,
  jsonlSource,
  type KeyedRow,
  type KeyScan,
  rangeSource,
  scanSource,
  type SourceError,
  type SourceScan,
  unsafeIntegersWarning
} from "../tasks/Sources.js"
import * as SyntaxErrors from "./internal/syntaxErrors.js"
import * as Plugins from "./Plugins.js"
import * as PluginUri from "./PluginUri.js"
import * as StoreResolver from "./StoreResolver.js"

/**
 * Identity helper for TypeScript experiments (`export default defineExperiment({...})`),
 * re-exported from `domain/Config` so that `Experiment.defineExperiment` and
 * `Config.defineExperiment` are the same function. Checking happens in {@link load}.
 *
 * @since 0.1.0
 * @category loading
 */
export { defineExperiment } from "../domain/Config.js"

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
   * rows (the run checks the rest as it streams).
   */
  readonly scanKeys?: "head" | "full" | undefined
}

/**
 * Rows of a keyed `jsonl` source that loading reads by default to check the keys: 100.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_HEAD_ROWS = 100

/**
 * Largest keyed `jsonl` file (bytes) that `scanKeys: "full"` reads whole: 50 MiB.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_FULL_MAX_BYTES = 50 * 1024 * 1024

/**
 * Rows that `scanKeys: "full"` reads of a keyed `jsonl` file larger than
 * {@link KEY_SCAN_FULL_MAX_BYTES}: 100 000.
 *
 * @since 0.1.0
 * @category constants
 */
export const KEY_SCAN_LARGE_ROWS = 100_000

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
}

// ---------------------------------------------------------------------------------------------
// Helpers: paths, suggestions
// ---------------------------------------------------------------------------------------------

/**
 * Writes a Schema issue path the way users read it: `pools.apis.resources[1].capacity`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const formatPath = (segments: ReadonlyArray<PropertyKey>): string => {
  let out = ""
  for (const s of segments) {
    if (typeof s === "number") out += `[${s}]`
    else out += out === "" ? String(s) : `.${String(s)}`
  }
  return out
}

/**
 * Edit distance between two strings with insertions, deletions, substitutions and swaps of
 * two adjacent characters each costing 1 (the "optimal string alignment" variant of the
 * Damerau–Levenshtein distance; F. J. Damerau 1964, V. I. Levenshtein 1966), so `dealy` is
 * one edit from `delay`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const levenshtein = (a: string, b: string): number => {
  const d: Array<Array<number>> = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)))
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1)
      d[i]![j] = v
    }
  }
  return d[a.length]![b.length]!
}

/**
 * The closest candidate to `word` (case-insensitive {@link levenshtein}), if it is close enough to
 * be a plausible typo: distance at most `max(2, ⌊len/3⌋)` and below half the word's length.
 *
 * @since 0.1.0
 * @category formatting
 */
export const closest = (word: string, candidates: Iterable<string>): string | undefined => {
  let best: string | undefined
  let bestD = Infinity
  for (const c of candidates) {
    const d = levenshtein(word.toLowerCase(), c.toLowerCase())
    if (d < bestD) {
      best = c
      bestD = d
    }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(word.length / 3)) && bestD < word.length / 2 ? best : undefined
}

const issue = (p: string, message: string, suggestion?: string): ConfigIssue =>
  suggestion === undefined ? { path: p, message } : { path: p, message, suggestion }

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

/**
 * The format of a file from its suffix, or `undefined` for an unknown suffix.
 *
 * @since 0.1.0
 * @category parsing
 */
export const formatOf = (file: string): Format | undefined => {
  const ext = path.extname(file).toLowerCase()
  switch (ext) {
    case ".json":
      return "json"
    case ".toml":
      return "toml"
    case ".yaml":
    case ".yml":
      return "yaml"
    case ".ts":
    case ".mts":
    case ".js":
    case ".mjs":
      return "module"
    default:
      return undefined
  }
}

/** YAML 1.1 reads a bare `on`/`yes`/`off` key as a boolean: find keys that became "true"/"false". */
const yamlBooleanKeys = (value: unknown, at: ReadonlyArray<PropertyKey>, out: Array<ConfigIssue>): void => {
  if (Array.isArray(value)) value.forEach((v, i) => yamlBooleanKeys(v, [...at, i], out))
  else if (isRecord(value)) {
    for (const [k, v] of Object.entries(value)) {
      if (k === "true" || k === "false") {
        out.push(issue(
          formatPath([...at, k]),
          `a key was read as the boolean ${k}: YAML 1.1 turns a bare on/off/yes/no key into a boolean`,
          `quote the key, for example "on": [...] in a retry block`
        ))
      }
      yamlBooleanKeys(v, [...at, k], out)
    }
  }
}

/**
 * Parses the text of a JSON, TOML or YAML experiment. A syntax error fails with a
 * `ConfigError` whose message is, for each error, the compiler-style block of
 * `internal/syntaxErrors.ts` (`file:line:column: invalid JSON: reason`, the offending line
 * with its secrets masked, a caret under the column) and whose issues carry `line` and
 * `column` (1-based; path `""`). JSON errors are located from `JSON.parse`'s position or,
 * when its message has none, by `jsonc-parser`; TOML errors by `smol-toml`; YAML errors by
 * `yaml` (every error of the document, one block each). A YAML key read as a boolean fails
 * with an issue at its field path.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseText = (text: string, format: "json" | "toml" | "yaml", file: string): Either.Either<unknown, ConfigError> => {
  const syntax = (problems: ReadonlyArray<SyntaxErrors.SyntaxProblem>) =>
    Either.left(
      new ConfigError({
        message: problems.map((p) => p.rendered).join("\n"),
        issues: problems.map((p) => ({
          path: "",
          message: `${file}:${p.line}:${p.column}: invalid ${format.toUpperCase()}: ${p.reason}`,
          line: p.line,
          column: p.column
        }))
      })
    )
  switch (format) {
    case "json": {
      try {
        return Either.right(JSON.parse(text) as unknown)
      } catch (e) {
        return syntax([SyntaxErrors.jsonProblem(file, text, e)])
      }
    }
    case "toml": {
      try {
        return Either.right(parseToml(text) as unknown)
      } catch (e) {
        const located = SyntaxErrors.tomlProblem(file, text, e)
        if (located !== undefined) return syntax([located])
        const message = `invalid TOML: ${e instanceof Error ? e.message : String(e)}`
        return Either.left(new ConfigError({ message: `${file}: ${message}`, issues: [issue("", message)] }))
      }
    }
    case "yaml": {
      const doc = YAML.parseDocument(text, { prettyErrors: false, uniqueKeys: true })
      if (doc.errors.length > 0) return syntax(SyntaxErrors.yamlProblems(file, text, doc.errors))
      const value = doc.toJS({ mapAsMap: false }) as unknown
      const problems: Array<ConfigIssue> = []
      yamlBooleanKeys(value, [], problems)
      if (problems.length > 0) {
        return Either.left(new ConfigError({ message: `${file}: ${problems[0]!.message}`, issues: problems }))
      }
      return Either.right(value)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Environment expansion
// ---------------------------------------------------------------------------------------------

const envPattern = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g

/**
 * Expands `${VAR}` and `${VAR:-default}` in every string value of a parsed config (keys are
 * left alone; `$$` is a literal `$`). `${VAR:-default}` uses the default when the variable is
 * unset or empty; an unset `${VAR}` becomes `""` and is listed in `unresolved` with the path
 * where it appeared; a `${VAR}` set to `""` expands to `""` and is listed in `empty` (when
 * given), which `--strict-env` refuses too. Only strings are expanded: a number field cannot
 * take `${N:-3}`. Task values and functions (in TypeScript definitions) are not entered.
 *
 * @since 0.1.0
 * @category environment
 */
export const expandEnv = (
  value: unknown,
  env: Readonly<Record<string, string | undefined>>,
  unresolved: Array<{ name: string; path: string }>,
  at: ReadonlyArray<PropertyKey> = [],
  empty?: Array<{ name: string; path: string }>
): unknown => {
  if (typeof value === "string") {
    return value.replace(envPattern, (whole, name: string | undefined, fallback: string | undefined) => {
      if (whole === "$$") return "$"
      const v = env[name!]
      if (fallback !== undefined) return v === undefined || v === "" ? fallback : v
      if (v === undefined) {
        unresolved.push({ name: name!, path: formatPath(at) })
        return ""
      }
      if (v === "") empty?.push({ name: name!, path: formatPath(at) })
      return v
    })
  }
  if (Array.isArray(value)) return value.map((v, i) => expandEnv(v, env, unresolved, [...at, i], empty))
  if (isRecord(value) && !Task.isTask(value)) {
    const proto = Object.getPrototypeOf(value)
    if (proto !== Object.prototype && proto !== null) return value
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[k] = expandEnv(v, env, unresolved, [...at, k], empty)
    return out
  }
  return value
}

// ---------------------------------------------------------------------------------------------
// Schema decoding
// ---------------------------------------------------------------------------------------------

/**
 * Whether a Schema path is the first element of a task list (`pipeline.tasks[0]` or a
 * fanout's `...tasks[0]`): a missing one means the list is empty.
 */
const isEmptyTaskList = (p: ReadonlyArray<PropertyKey>): boolean =>
  p.length >= 3 && p[0] === "pipeline" && p[p.length - 1] === 0 && p[p.length - 2] === "tasks"

const isFanoutEntry = (entry: unknown): boolean => isRecord(entry) && entry["use"] === FANOUT

/** The value at a path of a parsed file (`undefined` when the path leads nowhere). */
const valueAt = (root: unknown, p: ReadonlyArray<PropertyKey>): unknown => {
  let v: unknown = root
  for (const seg of p) {
    if (Array.isArray(v) && typeof seg === "number") v = v[seg]
    else if (isRecord(v) && typeof seg === "string") v = v[seg]
    else return undefined
  }
  return v
}

const literalExpected = /^Expected ("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false), actual /

/**
 * Merges the "Expected "full", actual "ful"" / "Expected "summary", actual "ful"" pair that a
 * union of literals gives into one line: `expected "full" or "summary", got "ful"`, with a
 * did-you-mean.
 */
const mergeLiteralChoices = (p: string, messages: ReadonlyArray<string>, actual: unknown): ConfigIssue | undefined => {
  const literals: Array<string> = []
  for (const m of messages) {
    const match = literalExpected.exec(m)
    if (match === null) return undefined
    literals.push(match[1]!)
  }
  if (literals.length < 2) return undefined
  const choices = literals.length === 2
    ? `${literals[0]} or ${literals[1]}`
    : `${literals.slice(0, -1).join(", ")} or ${literals[literals.length - 1]}`
  const near = typeof actual === "string"
    ? closest(actual, literals.filter((l) => l.startsWith("\"")).map((l) => JSON.parse(l) as string))
    : undefined
  return issue(p, `expected ${choices}, got ${JSON.stringify(actual)}`, near === undefined ? undefined : `did you mean ${JSON.stringify(near)}?`)
}

/**
 * `args: "echo {value}"`: a task's `args` is a list of its arguments. For `shellRun` the
 * command is the first argument, so the message shows both of its forms.
 */
const argsNotAList = (p: string, text: string, task: unknown): ConfigIssue => {
  const use = typeof task === "object" && task !== null ? (task as { use?: unknown }).use : undefined
  if (use === "shellRun") {
    const argv = text.trim().split(/\s+/).filter((w) => w !== "")
    return issue(
      p,
      "is a list of the task's arguments, and shellRun's first argument is the command",
      `write the command as an argv list, one element per argument and no shell: args: [${JSON.stringify(argv)}]` +
        (text.includes("{value}") ? "" : `; or as one shell line: args: [${JSON.stringify(text)}]`)
    )
  }
  return issue(p, "is a list of the task's arguments, got a string", `args: [${JSON.stringify(text)}]`)
}

const decodeIssues = (error: ParseResult.ParseError, input: unknown): Array<ConfigIssue> => {
  const raw = ParseResult.ArrayFormatter.formatErrorSync(error)
  const byPath = new Map<string, number>()
  for (const i of raw) byPath.set(formatPath(i.path), (byPath.get(formatPath(i.path)) ?? 0) + 1)
  const out: Array<ConfigIssue> = []
  const seen = new Set<string>()
  const merged = new Set<string>()
  for (const i of raw) {
    const p = formatPath(i.path)
    // `NullOr(x)` adds "Expected null" next to the real problem: drop that noise.
    if (i.message.startsWith("Expected null") && (byPath.get(p) ?? 0) > 1) continue
    if (merged.has(p)) continue
    let entry: ConfigIssue
    const atPath = raw.filter((j) => formatPath(j.path) === p && j._tag === "Type").map((j) => j.message)
    const choice = i._tag === "Type" && atPath.length > 1 ? mergeLiteralChoices(p, atPath, valueAt(input, i.path)) : undefined
    if (choice !== undefined) {
      merged.add(p)
      entry = choice
    } else if (i._tag === "Missing" && isEmptyTaskList(i.path) && i.path.length > 3 && !isFanoutEntry(valueAt(input, i.path.slice(0, -2)))) {
      // `tasks: []` on an entry that is not a fanout: the loader says "only a use: fanout
      // entry takes nested tasks", which is the real problem.
      continue
    } else if (i._tag === "Unexpected") {
      const key = String(i.path[i.path.length - 1])
      const parent = i.path.slice(0, -1)
      const allowed = allowedKeysAt(parent)
      const near = closest(key, allowed)
      const places = placesOfKey(key).filter((pl) => pl !== formatPath(parent) && pl.split(".").length > 0)
      const suggestion = near !== undefined
        ? `did you mean ${near}?`
        : places.length > 0
        ? `${key} belongs under ${places.join(" or ")}`
        : allowed.length > 0
        ? `allowed keys here: ${allowed.join(", ")}`
        : undefined
      entry = issue(p, `unknown key "${key}"`, suggestion)
    } else if (i._tag === "Missing" && isEmptyTaskList(i.path)) {
      const list = i.path.slice(0, -1)
      entry = list.length === 2
        ? issue(formatPath(list), "is empty: a pipeline needs at least one task", "tasks: [{ use: echo }]")
        : issue(
          formatPath(list),
          "is empty: a fanout needs at least one task",
          "tasks: [{ use: echo, name: a }, { use: echo, name: b }]"
        )
    } else if (i._tag === "Missing") {
      entry = issue(p, "is missing")
    } else if (i._tag === "Type" && i.path[i.path.length - 1] === "args" && typeof valueAt(input, i.path) === "string") {
      entry = argsNotAList(p, String(valueAt(input, i.path)), valueAt(input, i.path.slice(0, -1)))
    } else {
      entry = issue(p, i.message)
    }
    const k = `${entry.path}\u0000${entry.message}`
    if (seen.has(k)) continue
    seen.add(k)
    out.push(entry)
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------------

type TaskSection = Definition["pipeline"]["tasks"][number]

const argPathFields = new Set(["command", "duration", "path", "message", "failTimes"])

const taskIssuePath = (base: string, p: string): string => {
  if (p === "" ) return base
  if (p.startsWith("args") || p.startsWith("options") || p.startsWith("tasks") || p === "onError") return `${base}.${p}`
  if (argPathFields.has(p)) return `${base}.args[0]`
  // an element of the first argument (shellRun's argv: command[2] → args[0][2])
  const element = /^(\w+)(\[\d+\].*)$/.exec(p)
  if (element !== null && argPathFields.has(element[1]!)) return `${base}.args[0]${element[2]}`
  if (p === "name" || p === "retry" || p === "timeout" || p === "version" || p === "config") return `${base}.${p}`
  return `${base}.options.${p}`
}

const definitionIssues = (e: unknown, base: string): Array<ConfigIssue> => {
  if (e instanceof ConfigError) {
    return e.issues.length > 0
      ? e.issues.map((i) => ({ ...i, path: taskIssuePath(base, i.path) }))
      : [issue(base, e.message)]
  }
  if (e instanceof PipelineBuildError) return [issue(base, e.message)]
  return [issue(base, `the task could not be built: ${e instanceof Error ? e.message : String(e)}`)]
}

/** Calls `define`, turning any throw into issues under `base`. */
const attempt = <A>(define: () => A, base: string, issues: Array<ConfigIssue>): A | undefined => {
  try {
    return define()
  } catch (e) {
    issues.push(...definitionIssues(e, base))
    return undefined
  }
}

const algorithmIssues = (e: unknown, base: string): Array<ConfigIssue> => {
  if (e instanceof ConfigError && e.issues.length > 0) {
    return e.issues.map((i) => ({ ...i, path: i.path.replace(/^algorithm/, base) }))
  }
  return [issue(base, e instanceof Error ? e.message : String((e as { message?: unknown })?.message ?? e))]
}

/** Resolves a `use:` target to a task (or a factory's result). */
const resolveUse = (
  section: TaskSection,
  base: string,
  baseDir: string,
  plugins: Plugins.PluginRegistry,
  issues: Array<ConfigIssue>
): Effect.Effect<Task.Any | undefined> =>
  Effect.gen(function*() {
    const use = section.use
    const args = section.args ?? []
    const options = section.options
    const instantiate = (value: unknown, what: string): Task.Any | undefined => {
      if (Task.isTask(value)) {
        if (section.args !== undefined || options !== undefined) {
          issues.push(issue(`${base}.${section.args !== undefined ? "args" : "options"}`, `${what} is a task, not a factory: it takes no args or options`))
          return undefined
        }
        return value
      }
      if (typeof value === "function") {
        const made = attempt(
          () => (value as (...a: Array<unknown>) => unknown)(...args, ...(options === undefined ? [] : [options])),
          base,
          issues
        )
        if (made === undefined) return undefined
        if (!Task.isTask(made)) {
          issues.push(issue(`${base}.use`, `${what} is a function that did not return a task`))
          return undefined
        }
        return made
      }
      issues.push(issue(`${base}.use`, `${what} is neither a task nor a task factory`))
      return undefined
    }
    if (typeof use !== "string") return instantiate(use, "the task value")
    const builtin = builtins.get(use)
    if (builtin !== undefined) return attempt(() => builtin.make(args, options, { baseDir }), base, issues)
    const hash = use.lastIndexOf("#")
    if (hash > 0 || use.startsWith(".") || path.isAbsolute(use)) {
      const spec = hash > 0 ? use.slice(0, hash) : use
      const exportName = hash > 0 ? use.slice(hash + 1) : "default"
      const mod = yield* Effect.either(Plugins.importModule(spec, baseDir))
      if (mod._tag === "Left") {
        issues.push(issue(`${base}.use`, `cannot load module "${spec}": ${mod.left}`))
        return undefined
      }
      if (!(exportName in mod.right)) {
        const near = closest(exportName, Object.keys(mod.right))
        issues.push(issue(
          `${base}.use`,
          `module "${spec}" has no export "${exportName}"`,
          near !== undefined ? `did you mean ${spec}#${near}?` : `exports: ${Object.keys(mod.right).join(", ")}`
        ))
        return undefined
      }
      return instantiate(mod.right[exportName], `"${use}"`)
    }
    const plugged = plugins.tasks.get(use)
    if (plugged !== undefined) return instantiate(plugged.value, `"${use}" (from plugin ${plugged.plugin})`)
    const builtinNames = [...new Set([FANOUT, ...builtinTaskNames])]
    const known = [...builtinNames, ...plugins.tasks.keys()]
    const near = closest(use, known)
    const broken = [...plugins.errors.entries()].map(([p, e]) => `${p} (${e})`)
    issues.push(issue(
      `${base}.use`,
      `unknown task "${use}"${broken.length > 0 ? `; plugins that failed to load: ${broken.join(", ")}` : ""}`,
      near !== undefined
        ? `did you mean ${near}?`
        : `use a built-in (${builtinNames.join(", ")}), a plugin task, "./file.ts#export" or "package#export"`
    ))
    return undefined
  })

const overridesOf = (section: TaskSection): Task.Overrides => {
  const o: Record<string, unknown> = {}
  if (section.name !== undefined) o["name"] = section.name
  if (section.resource !== undefined) o["resource"] = section.resource
  if (section.algorithm !== undefined) o["algorithm"] = section.algorithm
  if (section.timeout !== undefined) o["timeout"] = section.timeout
  if (section.retry !== undefined) o["retry"] = section.retry as RetryPolicy
  if (section.config !== undefined) o["config"] = section.config
  if (section.version !== undefined) o["version"] = section.version
  return o as Task.Overrides
}

const resourcesOf = (task: Task.Any): Array<string> => [
  ...(task.options.resource === null ? [] : [task.options.resource]),
  ...task.children.flatMap(resourcesOf)
]

const buildPools = (
  def: Definition,
  plugins: Plugins.PluginRegistry,
  issues: Array<ConfigIssue>
): Array<Pool.PoolConfig> => {
  const out: Array<Pool.PoolConfig> = []
  for (const [name, p] of Object.entries(def.pools ?? {})) {
    const base = `pools.${name}`
    let algorithm: AcquireAlgorithm | undefined
    if (p.algorithm !== undefined) {
      const r = resolveAlgorithm(p.algorithm as AlgorithmInput, plugins.algorithms)
      if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `${base}.algorithm`))
      else algorithm = r.right
    }
    if (p.resources.length === 0) {
      issues.push(issue(`${base}.resources`, "a pool needs at least one resource", "add { capacity: 1 }"))
    }
    const explicitIds = new Map<string, number>()
    p.resources.forEach((r, j) => {
      if (r.id === undefined) return
      const first = explicitIds.get(r.id)
      if (first === undefined) explicitIds.set(r.id, j)
      else {
        issues.push(issue(
          `${base}.resources[${j}].id`,
          `duplicate resource id "${r.id}" in pool "${name}" (also ${base}.resources[${first}])`,
          "give each resource a distinct id, or leave id out to get a generated one"
        ))
      }
    })
    const resources = p.resources.map((r, j) => {
      const res = Resource.make(r.kind ?? p.kind ?? name, {
        ...(r.id !== undefined ? { id: r.id } : {}),
        ...(r.options !== undefined ? { options: r.options } : {}),
        ...(r.tags !== undefined ? { tags: r.tags } : {}),
        capacity: r.capacity ?? p.capacity ?? 1,
        degradeAfter: r.degradeAfter ?? p.degradeAfter,
        deadAfter: r.deadAfter ?? p.deadAfter,
        ...(r.cooldown ?? p.cooldown) !== undefined ? { cooldown: (r.cooldown ?? p.cooldown)! } : {}
      })
      issues.push(...Resource.validate(res, `${base}.resources[${j}]`))
      return res
    })
    out.push(Pool.make(name, resources, {
      kind: p.kind ?? name,
      ...(algorithm !== undefined ? { algorithm } : {}),
      ...(p.deadlockWarn !== undefined ? { deadlockWarn: p.deadlockWarn } : {})
    }))
  }
  return out
}

const runInputOf = (def: Definition, baseDir: string): RunConfig.RunConfigInput => {
  const r = def.run ?? {}
  const out: Record<string, unknown> = { ...r }
  // a plugin URI (`vault://qa`) is not a path
  if (r.store !== undefined && r.store !== ":memory:" && !PluginUri.isUri(r.store)) out["store"] = path.resolve(baseDir, r.store)
  return out as RunConfig.RunConfigInput
}

/**
 * Reads the head (or, for `"full"`, all of a small file) of a `jsonl` source: with a
 * `keyField`, pushes the first key problem as an issue at `source.keyField`; in every row,
 * finds the integers beyond 2^53 (see `Sources.scanSource`). Returns what was read.
 */
const scanSourceRows = (
  file: string,
  keyField: string | undefined,
  mode: "head" | "full",
  issues: Array<ConfigIssue>
): Effect.Effect<SourceScan | undefined, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    let maxRows = KEY_SCAN_HEAD_ROWS
    if (mode === "full") {
      const size = yield* Effect.orElseSucceed(Effect.map(fs.stat(file), (i) => Number(i.size)), () => Infinity)
      maxRows = size < KEY_SCAN_FULL_MAX_BYTES ? Number.MAX_SAFE_INTEGER : KEY_SCAN_LARGE_ROWS
    }
    const hint = (fields: ReadonlyArray<string>): string | undefined => {
      if (keyField === undefined) return undefined
      const near = closest(keyField, fields)
      return near === undefined ? undefined : `did you mean "${near}"?`
    }
    const scanned = yield* Effect.either(scanSource(file, { keyField, maxRows, hint }))
    if (Either.isRight(scanned)) return scanned.right
    const e = scanned.left
    if (e._tag === "ConfigError") issues.push(...e.issues)
    else if (keyField !== undefined) issues.push(issue("source.jsonl.path", e.message))
    return undefined
  })

const sourceOf = (
  def: Definition,
  baseDir: string,
  issues: Array<ConfigIssue>,
  scanMode: "head" | "full"
): Effect.Effect<SourceSpec | undefined, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const s = def.source
    const repeats = s.repeats ?? 1
    if (s.range !== undefined && s.jsonl !== undefined) {
      issues.push(issue("source", "a source is either range or jsonl, not both"))
      return undefined
    }
    if (s.range !== undefined) {
      if (s.keyField !== undefined) {
        issues.push(issue("source.keyField", "keyField needs rows that are objects: use it with a jsonl source"))
      }
      return { kind: "range", n: s.range.n, keyField: undefined, repeats }
    }
    if (s.jsonl !== undefined) {
      const p = path.resolve(baseDir, s.jsonl.path)
      const fs = yield* FileSystem.FileSystem
      const exists = yield* Effect.orElseSucceed(fs.exists(p), () => false)
      if (!exists) issues.push(issue("source.jsonl.path", `no such file: ${p}`))
      const scan = exists ? yield* scanSourceRows(p, s.keyField, scanMode, issues) : undefined
      const keyScan = scan !== undefined && s.keyField !== undefined ? { rows: scan.rows, complete: scan.complete } : undefined
      return { kind: "jsonl", path: p, limit: s.jsonl.limit, keyScan, scan, keyField: s.keyField, repeats }
    }
    issues.push(issue("source", "a source needs range or jsonl", "source: { range: { n: 10 } }"))
    return undefined
  })

const suggestPool = (name: string, pools: ReadonlyArray<string>): string => {
  const near = closest(name, pools)
  return near !== undefined
    ? `did you mean ${near}?`
    : pools.length > 0
    ? `pools: ${pools.join(", ")}`
    : `declare it under pools.${name}`
}

const describeAlgorithm = (a: unknown): Json =>
  a === undefined ? null : (JSON.parse(JSON.stringify(a)) as Json)

/** What {@link buildEntry} needs besides the entry. */
interface EntryContext {
  readonly baseDir: string
  readonly plugins: Plugins.PluginRegistry
  readonly poolNames: ReadonlyArray<string>
  readonly pipelineResource: string | undefined
}

/** How an entry's `use:` reads in a message: `"echo"` or `the task value "ask"`. */
const useLabel = (use: TaskSection["use"]): string =>
  typeof use === "string" ? `"${use}"` : `the task value "${use.name}"`

/**
 * Refuses `tasks` / `onError` on an entry that is not `use: fanout`. Returns whether the
 * entry is clean.
 */
const fanoutKeysOnlyOnFanout = (section: TaskSection, base: string, issues: Array<ConfigIssue>): boolean => {
  let clean = true
  if (section.tasks !== undefined) {
    clean = false
    issues.push(issue(
      `${base}.tasks`,
      `only a "use: ${FANOUT}" entry takes nested tasks; ${useLabel(section.use)} is not a fanout`,
      `to run these tasks concurrently on the same input, write use: ${FANOUT} here and put ${useLabel(section.use)} among the nested tasks`
    ))
  }
  if (section.onError !== undefined) {
    clean = false
    issues.push(issue(
      `${base}.onError`,
      `only a "use: ${FANOUT}" entry takes onError; ${useLabel(section.use)} is not a fanout`,
      "remove it, or make this entry a fanout"
    ))
  }
  return clean
}

/**
 * Builds a `use: fanout` entry: each nested entry with {@link buildEntry} (paths
 * `<base>.tasks[j]`), then `fanout(...branches, { name, onError, retry, version, config })`
 * exactly as a TypeScript program would call it (so both give the same identity), then the
 * entry's `resource`, `algorithm` and `timeout` as overrides of the group.
 */
const buildFanout = (
  section: TaskSection,
  base: string,
  ctx: EntryContext,
  issues: Array<ConfigIssue>
): Effect.Effect<Task.Any | undefined, never, never> =>
  Effect.gen(function*() {
    let ok = true
    for (const key of ["args", "options"] as const) {
      if (section[key] !== undefined) {
        ok = false
        issues.push(issue(
          `${base}.${key}`,
          `${FANOUT} takes no ${key}: its branches are the entries under tasks, its settings are fields of this entry`,
          "onError: collect, retry: { maxAttempts: 3 }, tasks: [{ use: echo, name: a }, ...]"
        ))
      }
    }
    if (section.tasks === undefined) {
      issues.push(issue(
        `${base}.tasks`,
        `is missing: a ${FANOUT} runs the task entries listed under tasks`,
        "tasks: [{ use: echo, name: a }, { use: echo, name: b }]"
      ))
      return undefined
    }
    const children: Array<Task.Any> = []
    for (let j = 0; j < section.tasks.length; j++) {
      const child = yield* buildEntry(section.tasks[j]!, `${base}.tasks[${j}]`, ctx, issues)
      if (child === undefined) ok = false
      else children.push(child)
    }
    if (!ok) return undefined
    const seen = new Map<string, number>()
    children.forEach((c, j) => {
      const previous = seen.get(c.name)
      if (previous === undefined) {
        seen.set(c.name, j)
        return
      }
      ok = false
      issues.push(issue(
        `${base}.tasks[${j}]${section.tasks![j]!.name !== undefined ? ".name" : ""}`,
        `duplicate branch name "${c.name}" (also ${base}.tasks[${previous}]): a fanout returns its branches' values by name`,
        "give each branch a distinct name: name: ..."
      ))
    })
    if (!ok) return undefined
    const options: FanoutOptions = {
      ...(section.name !== undefined ? { name: section.name } : {}),
      ...(section.onError !== undefined ? { onError: section.onError } : {}),
      ...(section.retry !== undefined ? { retry: section.retry as RetryPolicy } : {}),
      ...(section.version !== undefined ? { version: section.version } : {}),
      ...(section.config !== undefined ? { config: section.config as Task.JsonObject } : {})
    }
    const group = attempt(
      () => (fanout as (...args: ReadonlyArray<unknown>) => Task.Any)(...children, options),
      base,
      issues
    )
    if (group === undefined) return undefined
    const overrides: Record<string, unknown> = {}
    if (section.resource !== undefined) overrides["resource"] = section.resource
    if (section.algorithm !== undefined) overrides["algorithm"] = section.algorithm
    if (section.timeout !== undefined) overrides["timeout"] = section.timeout
    if (Object.keys(overrides).length === 0) return group
    return attempt(() => Task.withOverrides(group, overrides as Task.Overrides), base, issues)
  })

/**
 * Builds one task entry at `base` (`pipeline.tasks[1]`, `pipeline.tasks[1].tasks[0]`):
 * resolves `use:` (or builds a fanout from its nested `tasks`), applies the entry's
 * overrides, gives a task without a resource `pipeline.resource` (a fanout group takes its
 * resource from its branches, which got the default themselves), and checks its pools and
 * algorithm. Every problem is pushed to `issues` with its full path; `undefined` when the
 * entry could not be built.
 */
const buildEntry = (
  section: TaskSection,
  base: string,
  ctx: EntryContext,
  issues: Array<ConfigIssue>
): Effect.Effect<Task.Any | undefined, never, never> =>
  Effect.gen(function*() {
    const poolNames = ctx.poolNames
    const isFanout = section.use === FANOUT
    if (isFanout) {
      const group = yield* buildFanout(section, base, ctx, issues)
      if (group === undefined) return undefined
      if (section.resource !== undefined && section.resource !== null && !poolNames.includes(section.resource)) {
        issues.push(issue(`${base}.resource`, `no pool named "${section.resource}"`, suggestPool(section.resource, poolNames)))
      }
      if (section.algorithm !== undefined && section.algorithm !== null) {
        const r = resolveAlgorithm(section.algorithm as AlgorithmInput, ctx.plugins.algorithms)
        if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `${base}.algorithm`))
      }
      return group
    }
    const clean = fanoutKeysOnlyOnFanout(section, base, issues)
    let task = yield* resolveUse(section, base, ctx.baseDir, ctx.plugins, issues)
    if (task === undefined) return undefined
    const t0 = task
    task = attempt(() => Task.withOverrides(t0, overridesOf(section)), base, issues)
    if (task === undefined) return undefined
    if (task.options.resource === null && section.resource === undefined && ctx.pipelineResource !== undefined) {
      const t1 = task
      task = attempt(() => Task.withOverrides(t1, { resource: ctx.pipelineResource! }), base, issues)
      if (task === undefined) return undefined
    }
    for (const r of resourcesOf(task)) {
      if (!poolNames.includes(r)) {
        const own = section.resource === undefined && ctx.pipelineResource !== r
        const near = closest(r, poolNames)
        issues.push(issue(
          section.resource !== undefined ? `${base}.resource` : own ? `${base}.use` : "pipeline.resource",
          own
            ? `no pool named "${r}": task "${task.name}" declares it as its resource`
            : `no pool named "${r}"`,
          near !== undefined
            ? `did you mean ${near}?`
            : poolNames.length > 0
            ? `pools: ${poolNames.join(", ")}`
            : `declare it under pools.${r}`
        ))
      }
    }
    if (task.options.algorithmInstance === null && task.options.algorithm !== null) {
      const r = resolveAlgorithm(task.options.algorithm as AlgorithmInput, ctx.plugins.algorithms)
      if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `${base}.algorithm`))
    }
    return clean ? task : undefined
  })

/** Semantic checks and construction from a decoded definition. */
const build = (
  def: Definition,
  ctx: {
    readonly file: string
    readonly format: Format
    readonly baseDir: string
    readonly plugins: Plugins.PluginRegistry
    readonly unresolved: ReadonlyArray<{ name: string; path: string }>
    readonly scanKeys: "head" | "full"
  },
  issues: Array<ConfigIssue>
): Effect.Effect<Experiment | undefined, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const poolNames = Object.keys(def.pools ?? {})
    const before = issues.length
    const pools = buildPools(def, ctx.plugins, issues)
    if (!issues.slice(before).some((i) => i.path.startsWith("pools"))) {
      // Backstop: whatever else the pool service would refuse at run time is refused here.
      const made = yield* Effect.either(Effect.scoped(Pool.makePools(pools, { plugins: ctx.plugins.algorithms })))
      if (Either.isLeft(made)) issues.push(...made.left.issues)
    }
    const entryCtx: EntryContext = {
      baseDir: ctx.baseDir,
      plugins: ctx.plugins,
      poolNames,
      pipelineResource: def.pipeline.resource
    }
    const tasks: Array<Task.Any> = []
    let allBuilt = true
    for (let i = 0; i < def.pipeline.tasks.length; i++) {
      const task = yield* buildEntry(def.pipeline.tasks[i]!, `pipeline.tasks[${i}]`, entryCtx, issues)
      if (task === undefined) allBuilt = false
      else tasks.push(task)
    }
    const source = yield* sourceOf(def, ctx.baseDir, issues, ctx.scanKeys)
    const run = runInputOf(def, ctx.baseDir)
    const resolvedRun = RunConfig.resolve(run)
    if (Either.isLeft(resolvedRun)) issues.push(...resolvedRun.left.issues)
    if (!allBuilt || tasks.length === 0) return undefined
    const options: Pipeline.MakeOptions = {
      ...(def.pipeline.tags !== undefined ? { tags: def.pipeline.tags as Task.JsonObject } : {}),
      ...(def.pipeline.includeCode !== undefined ? { includeCode: def.pipeline.includeCode } : {})
    }
    const template = attempt(
      () => (Pipeline.make as unknown as (name: string, ...args: Array<unknown>) => Pipeline.AnyTemplate)(def.pipeline.name, options, ...tasks),
      "pipeline",
      issues
    )
    if (template === undefined || source === undefined || Either.isLeft(resolvedRun)) return undefined

    const seeds = (limit?: number): Stream.Stream<unknown, SourceError | ConfigError, FileSystem.FileSystem> => {
      const all: Stream.Stream<unknown, SourceError | ConfigError, FileSystem.FileSystem> = source.kind === "range"
        ? rangeSource(limit === undefined ? source.n : Math.min(limit, source.n))
        : jsonlSource(source.path, {
          limit: limit === undefined ? source.limit : Math.min(limit, source.limit ?? limit),
          // rows without a key and repeated keys fail the stream (ConfigError, exit 2)
          keyField: source.keyField
        })
      return all
    }
    const keyField = source.keyField
    // A keyed jsonl source keys each row as its line writes the key (an integer beyond 2^53
    // is not rounded), so its pipelines are bound from the keyed rows; `template.map` would
    // only see the parsed (rounded) row.
    const keyedPipelines = (
      file: string,
      rows: Stream.Stream<KeyedRow, SourceError | ConfigError, FileSystem.FileSystem>
    ): Stream.Stream<Pipeline.PipelineSpec<any, any, any, any>, SourceError | ConfigError | Pipeline.SeedError, FileSystem.FileSystem> =>
      Stream.mapChunksEffect(rows, (chunk) =>
        Effect.suspend(() => {
          const out: Array<Pipeline.PipelineSpec<any, any, any, any>> = []
          for (const r of chunk) {
            for (let repeat = 0; repeat < source.repeats; repeat++) {
              try {
                out.push(template.bind(r.value, { key: source.repeats > 1 ? `${r.key}#${repeat}` : r.key, repeat }))
              } catch (e) {
                const reason = e instanceof Error ? e.message : String(e)
                return Effect.fail(new Pipeline.SeedError({ message: `row ${r.row} (line ${r.line}) of ${path.basename(file)}: ${reason}`, index: r.row - 1 }))
              }
            }
          }
          return Effect.succeed(Chunk.unsafeFromArray(out))
        }))
    const pipelines = (limit?: number) =>
      source.kind === "jsonl" && keyField !== undefined
        ? keyedPipelines(source.path, jsonlKeyedRows(source.path, {
          limit: limit === undefined ? source.limit : Math.min(limit, source.limit ?? limit),
          keyField
        }))
        : template.map(seeds(limit), { repeats: source.repeats })
    const warnings = source.kind === "jsonl" && source.scan !== undefined
      ? [unsafeIntegersWarning(source.path, source.scan, keyField)].filter((w): w is string => w !== undefined)
      : []
    const experiment: Experiment = {
      file: ctx.file,
      format: ctx.format,
      baseDir: ctx.baseDir,
      definition: def,
      template,
      pools,
      source,
      run,
      plugins: ctx.plugins,
      unresolvedEnv: ctx.unresolved,
      seeds,
      pipelines,
      warnings,
      size: (limit) => sourceSize(source, limit),
      describe: () => ({
        file: ctx.file,
        format: ctx.format,
        pipeline: template.describe(),
        pools: pools.map((p) => ({
          name: p.name,
          algorithm: describeAlgorithm(def.pools?.[p.name]?.algorithm ?? "wait"),
          resources: p.resources.map((r) => Resource.spec(r))
        })),
        source: source.kind === "range"
          ? { kind: "range", n: source.n, keyField: null, repeats: source.repeats }
          : {
            kind: "jsonl",
            path: source.path,
            limit: source.limit ?? null,
            keyField: source.keyField ?? null,
            repeats: source.repeats,
            ...(source.keyScan !== undefined ? { keysChecked: { rows: source.keyScan.rows, wholeFile: source.keyScan.complete } } : {}),
            ...(source.scan !== undefined && source.scan.unsafeRows > 0
              ? {
                unsafeIntegers: {
                  rows: source.scan.unsafeRows,
                  first: source.scan.unsafeIntegers.map((u) => ({ ...u }))
                }
              }
              : {})
          },
        run: JSON.parse(JSON.stringify(RunConfig.toJson(resolvedRun.right))) as Json,
        plugins: ctx.plugins.plugins.map((p) => ({ ...p })) as unknown as Json,
        unresolvedEnv: ctx.unresolved.map((u) => ({ ...u }))
      })
    }
    return experiment
  })

/** A copy of the plain objects and arrays of a parsed file (task values and functions shared). */
const cloneShape = (v: unknown): unknown => {
  if (Array.isArray(v)) return v.map(cloneShape)
  if (isRecord(v) && !Task.isTask(v)) {
    const proto = Object.getPrototypeOf(v)
    if (proto !== Object.prototype && proto !== null) return v
    const out: Record<string, unknown> = {}
    for (const [k, x] of Object.entries(v)) out[k] = cloneShape(x)
    return out
  }
  return v
}

const PLACEHOLDER = "assay-placeholder"

/** Stand-ins for a missing required field, by key, so that the rest can still be built. */
const fillers: Record<string, () => unknown> = {
  name: () => PLACEHOLDER,
  resources: () => [],
  path: () => "",
  n: () => 0,
  use: () => "echo",
  tasks: () => [{ use: "echo", name: PLACEHOLDER }],
  pipeline: () => ({ name: PLACEHOLDER, tasks: [{ use: "echo", name: PLACEHOLDER }] }),
  source: () => ({ range: { n: 0 } })
}

/**
 * When the Schema refuses a file, repairs a copy so that the checks of everything else can
 * still run: a value of the wrong type is removed (a task entry or resource of the wrong type
 * becomes a harmless stand-in), a missing required field gets a stand-in, an empty task list
 * gets one stand-in task. Repeats up to 8 rounds. Returns the decoded repaired definition and
 * the paths that were repaired (problems found at or under them were already reported by the
 * Schema and are dropped), or `undefined` when the file cannot be repaired that way.
 */
const repairedDecode = (
  input: unknown,
  schema: Schema.Schema<Definition, unknown>
): { readonly def: Definition; readonly repaired: ReadonlyArray<string> } | undefined => {
  const copy = cloneShape(input)
  if (!isRecord(copy)) return undefined
  const repaired: Array<string> = []
  const decode = Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "ignore" })
  for (let round = 0; round < 8; round++) {
    const r = decode(copy)
    if (Either.isRight(r)) return { def: r.right, repaired }
    for (const i of ParseResult.ArrayFormatter.formatErrorSync(r.left)) {
      if (i.path.length === 0) return undefined
      const parentPath = i.path.slice(0, -1)
      const last = i.path[i.path.length - 1]!
      const parent = valueAt(copy, parentPath)
      if (i._tag === "Missing" && isEmptyTaskList(i.path) && Array.isArray(parent)) {
        parent.push({ use: "echo", name: PLACEHOLDER })
        // a non-fanout entry's `tasks: []` stays visible to the loader ("only a fanout ...")
        if (i.path.length <= 3 || isFanoutEntry(valueAt(copy, i.path.slice(0, -2)))) repaired.push(formatPath(parentPath))
      } else if (i._tag === "Missing" && isRecord(parent) && typeof last === "string" && fillers[last] !== undefined) {
        parent[last] = fillers[last]()
        repaired.push(formatPath(i.path))
      } else if (i._tag === "Unexpected" && isRecord(parent) && typeof last === "string") {
        delete parent[last]
      } else if (isRecord(parent) && typeof last === "string") {
        delete parent[last]
        repaired.push(formatPath(i.path))
      } else if (Array.isArray(parent) && typeof last === "number" && (parentPath.at(-1) === "tasks" || parentPath.at(-1) === "resources")) {
        parent[last] = parentPath.at(-1) === "tasks" ? { use: "echo", name: `${PLACEHOLDER}-${last}` } : {}
        repaired.push(formatPath(i.path))
      } else return undefined
    }
  }
  return undefined
}

/** Whether `p` is `root` or a path under it (`root.x`, `root[0]`). */
const isUnder = (p: string, root: string): boolean =>
  p === root || p.startsWith(`${root}.`) || p.startsWith(`${root}[`)

const failWith = (file: string, all: ReadonlyArray<ConfigIssue>): ConfigError => {
  // One problem reached along several routes (two branches defaulting to the same missing
  // pool) is reported once.
  const seen = new Set<string>()
  const issues = all.filter((i) => {
    const k = `${i.path}\u0000${i.message}`
    if (seen.has(k)) return false
    seen.add(k)
    return true
  })
  return new ConfigError({
    message: `invalid experiment ${file}: ${issues.length} problem${issues.length === 1 ? "" : "s"}\n${
      issues.map((i) => `  ${i.path === "" ? "(file)" : i.path}: ${i.message}${i.suggestion !== undefined ? ` (${i.suggestion})` : ""}`)
        .join("\n")
    }`,
    issues
  })
}

const check = (
  raw: unknown,
  ctx: { readonly file: string; readonly format: Format; readonly baseDir: string },
  options: LoadOptions
): Effect.Effect<Experiment, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const issues: Array<ConfigIssue> = []
    const unresolved: Array<{ name: string; path: string }> = []
    const emptyEnv: Array<{ name: string; path: string }> = []
    const expanded = expandEnv(raw, options.env ?? process.env, unresolved, [], emptyEnv)
    if (options.strictEnv === true) {
      for (const u of unresolved) {
        issues.push(issue(u.path, `environment variable ${u.name} is not set (--strict-env)`, `export ${u.name}=... or write \${${u.name}:-default}`))
      }
      for (const u of emptyEnv) {
        issues.push(issue(u.path, `environment variable ${u.name} is set but empty (--strict-env)`, `export ${u.name}=... with a value, or write \${${u.name}:-default}`))
      }
    }
    const schema = (ctx.format === "module" ? ExperimentDefinition : ExperimentFile) as unknown as Schema.Schema<Definition, unknown>
    const strict = Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "error" })(expanded)
    if (Either.isLeft(strict)) issues.push(...decodeIssues(strict.left, expanded))
    const lenient = Either.isRight(strict)
      ? strict
      : Schema.decodeUnknownEither(schema, { errors: "all", onExcessProperty: "ignore" })(expanded)
    const specifiers = Either.isRight(lenient)
      ? lenient.right.plugins ?? []
      : isRecord(expanded) && Array.isArray(expanded["plugins"])
      ? expanded["plugins"].filter((p): p is string => typeof p === "string")
      : []
    const plugins = specifiers.length === 0 ? Plugins.empty : yield* Plugins.load(specifiers, ctx.baseDir)
    // The store and artifact backend specs resolve against built-ins and these plugins'
    // schemes: `validate` refuses what `run` would.
    const rawRun = isRecord(expanded) && isRecord(expanded["run"]) ? expanded["run"] : undefined
    issues.push(...Option.toArray(StoreResolver.checkStoreSpec(rawRun?.["store"], plugins)))
    issues.push(...Option.getOrElse(StoreResolver.checkArtifactBackendSpec(rawRun?.["artifactBackend"], plugins), () => []))
    const rawPools = isRecord(expanded) && isRecord(expanded["pools"])
      ? expanded["pools"]
      : isRecord(expanded) && expanded["pools"] === undefined
      ? {}
      : undefined
    let experiment: Experiment | undefined
    const repair = Either.isRight(lenient) ? undefined : repairedDecode(expanded, schema)
    if (Either.isRight(lenient)) {
      experiment = yield* build(lenient.right, { ...ctx, plugins, unresolved, scanKeys: options.scanKeys ?? "head" }, issues)
    } else if (repair !== undefined) {
      // The Schema refused the file, but a repaired copy decodes: run every other check on
      // it, dropping what it finds where the Schema already complained.
      const more: Array<ConfigIssue> = []
      yield* build(repair.def, { ...ctx, plugins, unresolved, scanKeys: options.scanKeys ?? "head" }, more)
      issues.push(...more.filter((i) => !repair.repaired.some((r) => isUnder(i.path, r))))
    } else if (isRecord(expanded) && isRecord(expanded["pipeline"]) && Array.isArray(expanded["pipeline"]["tasks"])) {
      // The shape is too broken to build; still check every `use:` (nested fanout entries
      // too) so that all problems show at once.
      const visit = (tasks: ReadonlyArray<unknown>, at: string): Effect.Effect<void> =>
        Effect.gen(function*() {
          for (let i = 0; i < tasks.length; i++) {
            const t = tasks[i]
            const base = `${at}[${i}]`
            if (!isRecord(t)) continue
            if (t["use"] === FANOUT) {
              if (Array.isArray(t["tasks"])) yield* visit(t["tasks"], `${base}.tasks`)
              continue
            }
            if (typeof t["use"] !== "string" && !Task.isTask(t["use"])) continue
            fanoutKeysOnlyOnFanout(t as TaskSection, base, issues)
            const section = {
              use: t["use"],
              ...(Array.isArray(t["args"]) ? { args: t["args"] } : {}),
              ...(isRecord(t["options"]) ? { options: t["options"] } : {})
            } as TaskSection
            const task = yield* resolveUse(section, base, ctx.baseDir, plugins, issues)
            const own = task === undefined ? [] : resourcesOf(task)
            const declared = typeof t["resource"] === "string" ? [t["resource"]] : []
            for (const r of [...own, ...declared]) {
              if (rawPools !== undefined && !(r in rawPools)) {
                issues.push(issue(
                  declared.includes(r) ? `${base}.resource` : `${base}.use`,
                  `no pool named "${r}"`,
                  suggestPool(r, Object.keys(rawPools))
                ))
              }
            }
          }
        })
      yield* visit(expanded["pipeline"]["tasks"] as Array<unknown>, "pipeline.tasks")
    }
    if (Either.isLeft(lenient) && repair === undefined && isRecord(expanded)) {
      for (const [name, p] of Object.entries(rawPools ?? {})) {
        if (!isRecord(p) || p["algorithm"] === undefined) continue
        const r = resolveAlgorithm(p["algorithm"] as AlgorithmInput, plugins.algorithms)
        if (Either.isLeft(r)) issues.push(...algorithmIssues(r.left, `pools.${name}.algorithm`))
      }
      const src = expanded["source"]
      if (isRecord(src) && isRecord(src["jsonl"]) && typeof src["jsonl"]["path"] === "string") {
        const p = path.resolve(ctx.baseDir, src["jsonl"]["path"])
        const fs = yield* FileSystem.FileSystem
        if (!(yield* Effect.orElseSucceed(fs.exists(p), () => false))) issues.push(issue("source.jsonl.path", `no such file: ${p}`))
      }
    }
    // Credentials: a key with a trailing newline, an unset key variable under --strict-env, …
    for (const [name, p] of Object.entries(rawPools ?? {})) {
      if (!isRecord(p) || !Array.isArray(p["resources"])) continue
      p["resources"].forEach((r: unknown, j: number) => {
        if (isRecord(r) && isRecord(r["options"])) {
          issues.push(...Chat.credentialIssues(r["options"], `pools.${name}.resources[${j}].options`, options.env ?? process.env, options.strictEnv === true))
        }
      })
    }
    if (issues.length > 0 || experiment === undefined) {
      return yield* failWith(ctx.file, issues.length > 0 ? issues : [issue("", "the experiment could not be built")])
    }
    return experiment
  })

// ---------------------------------------------------------------------------------------------
// Source size
// ---------------------------------------------------------------------------------------------

/**
 * Largest JSON Lines file (bytes) whose rows {@link sourceSize} counts when no limit bounds
 * the read: 64 MiB (one pass at disk speed, well under a second here).
 *
 * @since 0.1.0
 * @category constants
 */
export const COUNT_LINES_MAX_BYTES = 64 * 1024 * 1024

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
export const sourceSize = (
  source: SourceSpec,
  limit?: number
): Effect.Effect<number | undefined, never, FileSystem.FileSystem> => {
  if (source.kind === "range") {
    return Effect.succeed(Math.max(0, Math.floor(limit === undefined ? source.n : Math.min(limit, source.n))) * source.repeats)
  }
  const bound = limit === undefined ? source.limit : Math.min(limit, source.limit ?? limit)
  return Effect.gen(function*() {
    if (bound === 0) return 0
    if (bound === undefined) {
      const fs = yield* FileSystem.FileSystem
      const info = yield* fs.stat(source.path)
      if (Number(info.size) > COUNT_LINES_MAX_BYTES) return undefined
    }
    const rows = yield* Stream.unwrap(Effect.map(FileSystem.FileSystem, (fs) => fs.stream(source.path))).pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.filter((line) => line.trim() !== ""),
      (s) => (bound === undefined ? s : Stream.take(s, bound)),
      Stream.runCount
    )
    return rows * source.repeats
  }).pipe(Effect.orElseSucceed(() => undefined))
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
export const read = (file: string): Effect.Effect<RawExperiment, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const abs = path.resolve(file)
    const format = formatOf(abs)
    const baseDir = path.dirname(abs)
    if (format === undefined) {
      return yield* failWith(abs, [
        issue("", `unknown experiment format "${path.extname(abs)}"`, "use .json, .toml, .yaml/.yml or .ts")
      ])
    }
    const fs = yield* FileSystem.FileSystem
    if (!(yield* Effect.orElseSucceed(fs.exists(abs), () => false))) {
      return yield* failWith(abs, [issue("", `no such file: ${abs}`)])
    }
    if (format === "module") {
      const mod = yield* Effect.either(Plugins.importModule(abs, baseDir))
      if (mod._tag === "Left") return yield* failWith(abs, [issue("", `cannot load module: ${mod.left}`)])
      if (!("default" in mod.right)) {
        return yield* failWith(abs, [
          issue("", "the module has no default export", "export default defineExperiment({ ... })")
        ])
      }
      return { file: abs, format, baseDir, raw: mod.right["default"] }
    }
    const text = yield* Effect.mapError(
      fs.readFileString(abs),
      (e) => failWith(abs, [issue("", `cannot read the file: ${e.message}`)])
    )
    const parsed = parseText(text, format, abs)
    if (Either.isLeft(parsed)) {
      // a syntax error is already written like a compiler's (file:line:column, the line, a caret)
      const located = parsed.left.issues.some((i) => i.line !== undefined)
      return yield* (located ? parsed.left : failWith(abs, parsed.left.issues))
    }
    return { file: abs, format, baseDir, raw: parsed.right }
  })

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
  Effect.flatMap(read(file), ({ baseDir, file: abs, format, raw }) => check(raw, { file: abs, baseDir, format }, options))

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
