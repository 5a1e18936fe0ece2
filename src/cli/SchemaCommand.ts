/**
 * `assay schema`: prints the JSON Schema of the experiment file, generated from the Effect
 * Schema (`ExperimentFile`), so that editors validate and complete configs (see
 * `docs/config.md` for how to reference it).
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import { Console, Effect, JSONSchema, Schema } from "effect"
import { ExperimentFile } from "../config/Config.js"

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
 * `assay schema`.
 *
 * @since 0.1.0
 * @category commands
 */
export const schema = Command.make("schema", {}, () =>
  Effect.flatMap(Effect.sync(experimentJsonSchema), (s) => Console.log(JSON.stringify(s, null, 2)))).pipe(
    Command.withDescription("Print the JSON Schema of experiment files (for editors).")
  )
