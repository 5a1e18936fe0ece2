/**
 * @internal
 *
 * The suite file's Schema: one Schema for JSON, TOML, YAML and TypeScript suite files
 * (re-exported by `config/Suite.ts`).
 */
import { Schema } from "effect"
import * as RunConfig from "../../domain/RunConfig.js"
import * as Suite from "../../domain/Suite.js"
import { PoolSection } from "../Config.js"

const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optionalWith(s, { exact: true })

/**
 * `suite`: the suite's stable identity (`id`, see `SuiteIdentity.checkId`).
 *
 * @since 0.5.0
 * @category schemas
 */
export const SuiteSection = Schema.Struct({
  id: Suite.Id.annotations({ description: "the suite's stable id (1-80 ASCII letters, digits, - or _)" })
}).annotations({ identifier: "SuiteSection" })

/**
 * `run`: the experiment file's `run` fields without `store` (`output.root` is the suite's one
 * storage entry; the loader refuses `run.store` with that reason).
 *
 * @since 0.5.0
 * @category schemas
 */
export const SuiteRunSection = RunConfig.RunSection.pipe(Schema.omit("store")).annotations({
  identifier: "SuiteRunSection",
  description: "the suite's run settings (an experiment's run fields without store)"
})

/**
 * `output`: where the suite's state goes. `root` is relative to the suite file (the CLI's
 * `--output-root` replaces it and is relative to the working directory); `layout` is
 * `"combined"` (default) or `"byExperiment"`.
 *
 * @since 0.5.0
 * @category schemas
 */
export const OutputSection = Schema.Struct({
  root: opt(Schema.String.pipe(Schema.minLength(1)).annotations({
    description: "the output directory, relative to the suite file",
    message: () => "must be a non-empty path"
  })),
  layout: opt(Suite.SuiteLayout)
}).annotations({ identifier: "OutputSection" })

/**
 * One member of `experiments`:
 *
 * - `config`: the member's experiment file, relative to the suite file;
 * - `poolBindings`: the member's local pool name → a top-level pool of the suite (shared);
 * - `label`: a display name (not part of any identity);
 * - `limit`: the most pipelines (repeats included) this member submits per run;
 * - `stopAfterFailures`: this member stops admitting once N of its pipelines failed in a run
 *   (the others go on); run configuration, not part of the member's definition.
 *
 * @since 0.5.0
 * @category schemas
 */
export const MemberSection = Schema.Struct({
  config: Schema.String.pipe(Schema.minLength(1)).annotations({
    description: "the member's experiment file, relative to the suite file",
    message: () => "must be a non-empty path"
  }),
  poolBindings: opt(Schema.Record({ key: Schema.String, value: Schema.String }).annotations({
    description: "the member's local pool name -> a top-level pool of the suite"
  })),
  label: opt(Schema.String.annotations({ description: "display only" })),
  limit: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(0)).annotations({
    description: "the most pipelines (repeats included) this member submits per run",
    message: () => "must be an integer >= 0"
  })),
  stopAfterFailures: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({
    description: "this member stops admitting once this many of its pipelines failed in a run; the other members go on " +
      "(the suite-wide run.stopAfterFailures counts every member's failures together)",
    message: () => "must be an integer >= 1"
  }))
}).annotations({ identifier: "MemberSection" })

/**
 * The suite file: `suite.id`, the suite-owned `run` block (the experiment file's `run`
 * fields; `run.store` is refused by the loader, `output.root` being the one storage entry),
 * `output`, the shared `pools` (the experiment file's pool shape) and the `experiments` (at
 * least one). Its JSON Schema is what `assay schema --suite` prints.
 *
 * @since 0.5.0
 * @category schemas
 */
export const SuiteFile = Schema.Struct({
  $schema: opt(Schema.String),
  suite: SuiteSection,
  run: opt(SuiteRunSection),
  output: opt(OutputSection),
  pools: opt(Schema.Record({ key: Schema.String, value: PoolSection })),
  experiments: Schema.Record({ key: Schema.String, value: MemberSection }).annotations({
    description: "the members: member id -> { config, poolBindings, label, limit, stopAfterFailures }"
  })
}).annotations({ identifier: "AssaySuite" })

/**
 * The suite file as written (what `defineSuite` takes).
 *
 * @since 0.5.0
 * @category models
 */
export type SuiteInput = typeof SuiteFile.Encoded

/**
 * The decoded suite file.
 *
 * @since 0.5.0
 * @category models
 */
export type SuiteFile = typeof SuiteFile.Type

/**
 * The identity function that types a TypeScript suite file: `export default defineSuite({
 * suite: { id }, output: { root }, experiments: { ... } })`. Checking happens when the file is
 * loaded.
 *
 * @since 0.5.0
 * @category constructors
 */
export const defineSuite = (definition: SuiteInput): SuiteInput => definition
