/**
 * `assay schema`: prints the JSON Schema of the experiment file, generated from the Effect
 * Schema (`ExperimentFile`), so that editors validate and complete configs (see
 * `docs/config.md` for how to reference it); `assay schema --suite` prints the suite file's
 * (`SuiteFile`, see `docs/suites.md`); `assay schema --study` the study file's (`StudyFile`, see
 * `docs/studies.md`).
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Console, Effect, JSONSchema, Schema } from "effect"
import { ConfigError } from "../domain/Errors.js"
import { ExperimentFile } from "../config/Config.js"
import { StudyFile } from "../config/Study.js"
import { SuiteFile } from "../config/Suite.js"

/**
 * The JSON Schema (draft-07) of an experiment file as written (durations as strings).
 *
 * @since 0.1.0
 * @category schema
 */
export const experimentJsonSchema = (): JSONSchema.JsonSchema7Root => {
  const root = JSONSchema.make(Schema.encodedSchema(ExperimentFile))
  return { ...root, title: "assay experiment", description: "An assay experiment file (JSON, TOML or YAML)." } as JSONSchema.JsonSchema7Root
}

/**
 * The JSON Schema (draft-07) of a suite file as written (durations as strings).
 *
 * @since 0.5.0
 * @category schema
 */
export const suiteJsonSchema = (): JSONSchema.JsonSchema7Root => {
  const root = JSONSchema.make(Schema.encodedBoundSchema(SuiteFile))
  return {
    ...root,
    title: "assay suite",
    description: "An assay suite file (JSON, TOML or YAML): several experiment files run as one suite."
  } as JSONSchema.JsonSchema7Root
}

/**
 * The JSON Schema (draft-07) of a study file as written (durations as strings).
 *
 * @since 0.6.0
 * @category schema
 */
export const studyJsonSchema = (): JSONSchema.JsonSchema7Root => {
  const root = JSONSchema.make(Schema.encodedBoundSchema(StudyFile))
  // an objective may be written as its metric's name alone (the loader reads it in the metric's
  // own direction before the Schema sees it: `StudyInput`), which the Schema itself never takes
  const properties = (root as { readonly properties?: Record<string, JSONSchema.JsonSchema7> }).properties
  const objectives = properties?.["objectives"] as { readonly type?: string; readonly items?: JSONSchema.JsonSchema7 } | undefined
  const withBare = objectives?.items === undefined ? properties : {
    ...properties,
    objectives: {
      ...objectives,
      items: {
        anyOf: [
          objectives.items,
          {
            type: "string",
            minLength: 1,
            description: "a metric's name alone: its objective in the metric's own direction (a built-in metric's, or the direction its metrics entry declares)"
          }
        ]
      }
    }
  }
  return {
    ...root,
    ...(withBare === undefined ? {} : { properties: withBare }),
    title: "assay study",
    description: "An assay study file (JSON, TOML or YAML): variants of an experiment run as isolated trials."
  } as JSONSchema.JsonSchema7Root
}

const study = Options.boolean("study").pipe(
  Options.withDescription("Print the JSON Schema of study files instead of experiment files.")
)

const suite = Options.boolean("suite").pipe(
  Options.withDescription("Print the JSON Schema of suite files instead of experiment files.")
)

/**
 * `assay schema [--suite]`.
 *
 * @since 0.1.0
 * @category commands
 */
export const schema = Command.make("schema", { suite, study }, ({ study, suite }) =>
  Effect.gen(function*() {
    if (suite && study) {
      return yield* new ConfigError({
        message: "--suite and --study: give one of them",
        issues: [{ path: "--study", message: "give --suite or --study, not both" }]
      })
    }
    const s = study ? studyJsonSchema() : suite ? suiteJsonSchema() : experimentJsonSchema()
    yield* Console.log(JSON.stringify(s, null, 2))
  })).pipe(
    Command.withDescription("Print the JSON Schema of experiment files (or, with --suite / --study, of suite / study files) for editors.")
  )
