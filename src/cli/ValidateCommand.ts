/**
 * `assay validate -c FILE [--strict-env] [--json]`: loads and checks an experiment exactly as
 * `run` does (same loader, same errors) and prints the effective experiment: pools, tasks,
 * source, run settings and unresolved environment variables. Exit 0 when valid, 2 with every
 * problem and its field path otherwise. Never opens a store. With `--json`, prints
 * `{ "valid": true, "file": <absolute path>, ... }` or `{ "valid": false, "file", "message",
 * "issues" }`. A `jsonl` source with a `keyField` is read to check its keys (the whole file
 * under 50 MiB, else the first 100 000 rows; see `Experiment.LoadOptions.scanKeys`); every
 * `jsonl` source is read within the same bounds for integers beyond 2^53, which tasks would
 * receive rounded (a `warning:` line on stderr, `warnings` in `--json`). With `--store PATH`, or
 * when `run.store` exists, it also says how many of the store's pipelines match this
 * definition when some are of another one (stderr; `store` in `--json`): see `DefinitionMatch`.
 * A suite file (a document with a top-level `suite`) is checked by the suite loader instead and
 * described (members, ignored run fields, effective overrides, pool mapping; see `SuiteRun.ts`);
 * `--store` is refused for it (exit 2). A study file (a top-level `study`) is checked by the
 * study loader and described with its plan (`StudyPlan.ts`); a cap exceeded is an error (exit 2).
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Console, Effect, Either, Option, Stream } from "effect"
import type { Json } from "../domain/Json.js"
import * as Experiment from "../config/internal/experiment.js"
import * as StudyConfig from "../config/Study.js"
import * as SuiteConfig from "../config/Suite.js"
import { ConfigError } from "../domain/Errors.js"
import * as PluginUri from "../layers/PluginUri.js"
import * as StoreResolver from "../layers/internal/storeResolver.js"
import * as DefinitionMatch from "./DefinitionMatch.js"
import * as Flags from "./Flags.js"
import * as StudyPlan from "./StudyPlan.js"
import * as SuiteRun from "./SuiteRun.js"
import { experimentText as text, unresolvedOf } from "./ValidateText.js"

/**
 * The store `validate` compares the definition with: `--store` when given, else `run.store`
 * when it names an existing file (or a plugin store); `undefined` for none or `:memory:`.
 * Read-only, one aggregate query. A store that cannot be read is a warning, not a failure
 * (the file itself is what validate checks).
 */
const storedDefinitions = (experiment: Experiment.Experiment, flag: string | undefined) =>
  Effect.gen(function*() {
    const written = flag ?? (typeof experiment.definition.run?.store === "string" && PluginUri.isUri(experiment.definition.run.store)
      ? experiment.definition.run.store
      : experiment.run.store)
    if (written === undefined || written === ":memory:") return undefined
    const spec = PluginUri.isUri(written) || flag === undefined ? written : path.resolve(written)
    const fs = yield* FileSystem.FileSystem
    if (!PluginUri.isUri(spec) && !(yield* Effect.orElseSucceed(fs.exists(spec), () => false))) {
      if (flag !== undefined) yield* Console.error(`warning: no store at ${spec}: nothing stored to compare with`)
      return undefined
    }
    const read = yield* Effect.either(Effect.scoped(Effect.flatMap(
      StoreResolver.openReadOnly(spec, { registry: experiment.plugins, baseDir: experiment.baseDir }),
      (s) => DefinitionMatch.read(s, experiment.template.specDigest)
    )))
    if (Either.isLeft(read)) {
      yield* Console.error(`warning: cannot read the store ${spec} to compare definitions: ${read.left.message}`)
      return undefined
    }
    const match = read.right
    const total = yield* experiment.size()
    return {
      notice: DefinitionMatch.message(match, {
        command: "validate",
        total,
        keyed: experiment.source.keyField !== undefined,
        store: spec
      }),
      json: {
        path: spec,
        specDigest: match.specDigest,
        stored: match.stored,
        matching: match.matching,
        otherDefinitions: match.others.map((c) => ({ specDigest: c.specDigest, pipelines: c.pipelines }))
      }
    }
  })

/**
 * `assay validate`.
 *
 * @since 0.1.0
 * @category commands
 */
export const validate = Command.make(
  "validate",
  {
    config: Options.file("config", { exists: "either" }).pipe(
      Options.withAlias("c"),
      Options.withDescription(
        "The experiment, suite or study file (.json, .toml, .yaml/.yml or .ts); a suite file has a top-level suite key, a study file a study key."
      )
    ),
    strictEnv: Options.boolean("strict-env").pipe(Options.withDescription("An unset ${VAR} is an error.")),
    json: Options.boolean("json").pipe(Options.withDescription("Print the effective experiment as JSON.")),
    store: Options.text("store").pipe(
      Options.optional,
      Options.withDescription(
        "A store to compare with (default: run.store when it exists): how many of its pipelines match this definition."
      )
    ),
    outputRoot: Flags.outputRoot(
      "A suite or study file only: its output root, relative to the working directory (overrides output.root)."
    )
  },
  ({ config, json, outputRoot, store, strictEnv }) =>
    Effect.gen(function*() {
      // a study file: the study, its variants and its plan (StudyPlan.ts)
      if (yield* StudyConfig.isStudyFile(config)) {
        if (Option.isSome(store)) {
          return yield* new ConfigError({
            message: "--store: refused for a study: a study's one storage entry is its output root",
            issues: [{ path: "--store", message: "refused for a study: a study's one storage entry is its output root" }]
          })
        }
        return yield* StudyPlan.validateStudy(config, { strictEnv, json, outputRoot: Option.getOrUndefined(outputRoot) })
      }
      // a suite file: its members, ignored run fields, overrides and pool mapping
      if (yield* SuiteConfig.isSuiteFile(config)) {
        if (Option.isSome(store)) {
          return yield* new ConfigError({
            message: "--store: refused in suite mode: a suite's one storage entry is its output root",
            issues: [{ path: "--store", message: "refused in suite mode: a suite's one storage entry is its output root" }]
          })
        }
        return yield* SuiteRun.validateSuite(config, { strictEnv, json, outputRoot: Option.getOrUndefined(outputRoot) })
      }
      if (Option.isSome(outputRoot)) {
        return yield* new ConfigError({
          message: "--output-root: only a suite file has an output root; an experiment names its store (run.store or --store)",
          issues: [{ path: "--output-root", message: "only a suite file has an output root" }]
        })
      }
      // validate reads a keyed jsonl source whole (up to a size bound) to find repeated keys
      const experiment = yield* Experiment.load(config, { strictEnv, scanKeys: "full" }).pipe(
        // a shared call cache database the run could not open is refused as the run refuses
        // it (exit 2), checked without creating anything
        Effect.tap((e) => {
          const cache = e.run.cache
          return typeof cache === "object" && cache !== null && cache.db !== undefined
            ? Flags.probeCacheDb(path.resolve(e.baseDir, cache.db), "run.cache.db", cache.mode)
            : Effect.void
        }),
        // With --json an invalid file is also described on stdout, for tools and editors:
        // `{ "valid": false, "issues": [{ "path", "message", "suggestion"? }] }` (still exit 2).
        Effect.tapError((e) =>
          json
            ? Console.log(JSON.stringify({ valid: false, file: path.resolve(config), message: e.message, issues: e.issues }, null, 2))
            : Effect.void
        )
      )
      const described = experiment.describe() as Record<string, Json>
      // An empty source is valid but would make `run` exit 1: say so now (a source that cannot
      // be read is `run`'s to report, with its line numbers).
      const first = yield* Effect.either(Stream.runHead(experiment.seeds(1)))
      const empty = Either.isRight(first) && Option.isNone(first.right)
      // C16: against an existing store, whether its pipelines are of this definition
      const stored = yield* storedDefinitions(experiment, Option.getOrUndefined(store))
      yield* Console.log(
        json
          ? JSON.stringify(
            {
              valid: true,
              ...described,
              // the key variables unset too, as the text says (F6); the cache file resolved (F9)
              unresolvedEnv: unresolvedOf(experiment).map((u) => ({ ...u })),
              ...(experiment.cacheDb === undefined ? {} : { cacheDb: { ...experiment.cacheDb } }),
              sourceEmpty: empty,
              warnings: experiment.warnings,
              ...(stored === undefined ? {} : { store: stored.json })
            },
            null,
            2
          )
          : text(experiment)
      )
      if (stored?.notice !== undefined) yield* Console.error(stored.notice)
      // integers beyond 2^53 in the rows: tasks would receive them rounded
      for (const w of experiment.warnings) yield* Console.error(w)
      if (empty) yield* Console.error(`warning: ${Experiment.emptySourceMessage(experiment)}: \`assay run\` would exit 1 with nothing to do`)
    })
).pipe(Command.withDescription(
    "Check an experiment, suite or study file and print the effective experiment, suite or study plan (exit 2 when invalid)."
  ))
