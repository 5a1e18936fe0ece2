/**
 * The experiment Schema's fanout entries: a task entry's nested `tasks` (recursive, through
 * `Schema.suspend`), the keys offered for did-you-mean at every depth, and the JSON Schema
 * that `assay schema` prints and docs/experiment.schema.json copies.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either, ParseResult, Schema } from "effect"
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"
import { experimentJsonSchema } from "../../src/cli/SchemaCommand.js"
import { ExperimentDefinition, ExperimentFile } from "../../src/config/Config.js"
import { allowedKeysAt, placesOfKey } from "../../src/config/internal/keys.js"
import { echo } from "../../src/tasks/Mock.js"

const decode = (u: unknown) =>
  Schema.decodeUnknownEither(ExperimentFile, { errors: "all", onExcessProperty: "error" })(u)

const problems = (u: unknown): Array<string> => {
  const r = decode(u)
  if (Either.isRight(r)) return []
  return ParseResult.ArrayFormatter.formatErrorSync(r.left).map((i) => `${i.path.join("/")}: ${i._tag}`)
}

const experiment = (tasks: ReadonlyArray<unknown>) => ({ pipeline: { name: "p", tasks }, source: { range: { n: 1 } } })

describe("Config: fanout entries", () => {
  it("nested entries decode recursively, with durations and retry policies decoded at every depth", () => {
    const r = decode(experiment([{
      use: "fanout",
      name: "outer",
      onError: "collect",
      retry: { maxAttempts: 3 },
      tasks: [
        { use: "echo", name: "a", timeout: "2 seconds" },
        { use: "fanout", name: "inner", tasks: [{ use: "delay", args: ["5 millis"], retry: { maxAttempts: 2 } }] }
      ]
    }]))
    assert.isTrue(Either.isRight(r))
    if (Either.isRight(r)) {
      const group = r.right.pipeline.tasks[0]
      assert.strictEqual(group.onError, "collect")
      assert.strictEqual(group.retry?.maxAttempts, 3)
      const [a, inner] = group.tasks ?? []
      assert.strictEqual(a?.timeout?.toString(), "Duration(2s)")
      assert.strictEqual(inner?.tasks?.[0].retry?.maxAttempts, 2)
    }
  })

  it("refuses an empty nested list, a wrong onError (one issue), unknown and mistyped keys deep down, each at its path", () => {
    assert.deepStrictEqual(
      problems(experiment([
        { use: "fanout", tasks: [] },
        { use: "fanout", onError: "ignore", tasks: [{ use: "echo", retyr: 1 }, { use: "fanout", tasks: [{ use: 3 }] }] }
      ])),
      [
        "pipeline/tasks/0/tasks/0: Missing",
        "pipeline/tasks/1/onError: Composite",
        "pipeline/tasks/1/tasks/0/retyr: Unexpected",
        "pipeline/tasks/1/tasks/1/tasks/0/use: Type"
      ]
    )
  })

  it("a TypeScript definition takes task values at any depth; a file does not", () => {
    const nested = experiment([{ use: "fanout", tasks: [{ use: echo, name: "a" }, { use: "echo", name: "b" }] }])
    const asDefinition = Schema.decodeUnknownEither(ExperimentDefinition, { onExcessProperty: "error" })(nested)
    assert.isTrue(Either.isRight(asDefinition))
    assert.deepStrictEqual(problems(nested), ["pipeline/tasks/0/tasks/0/use: Type"])
  })

  it("did-you-mean knows the keys of nested entries at any depth, and where onError and tasks belong", () => {
    const keys = allowedKeysAt(["pipeline", "tasks", 0, "tasks", 1, "tasks", 0])
    assert.includeMembers([...keys], ["use", "name", "args", "options", "resource", "retry", "onError", "tasks"])
    assert.deepStrictEqual(placesOfKey("retry"), ["pipeline.tasks[].retry"])
    assert.deepStrictEqual(placesOfKey("onError"), ["pipeline.tasks[].onError"])
    assert.deepStrictEqual(placesOfKey("tasks"), ["pipeline.tasks", "pipeline.tasks[].tasks"])
  })
})

describe("Config: JSON Schema", () => {
  const schema = experimentJsonSchema() as unknown as {
    readonly $defs: Record<string, { properties: Record<string, any>; required: Array<string> }>
    readonly properties: { pipeline: { properties: { tasks: any } } }
  }

  it("describes a task entry once, recursively: pipeline.tasks and a fanout's tasks refer to it", () => {
    const entry = schema.$defs["TaskSectionEncoded"]
    assert.isDefined(entry)
    assert.deepStrictEqual(entry!.required, ["use"])
    assert.deepStrictEqual(entry!.properties["onError"], { $ref: "#/$defs/OnError" })
    assert.deepStrictEqual(schema.$defs["OnError"]?.["enum" as never], ["raise", "collect"] as never)
    const nested = entry!.properties["tasks"]
    assert.strictEqual(nested.type, "array")
    assert.strictEqual(nested.minItems, 1)
    assert.deepStrictEqual(nested.additionalItems, { $ref: "#/$defs/TaskSectionEncoded" })
    const top = schema.properties.pipeline.properties.tasks
    assert.strictEqual(top.minItems, 1)
    assert.deepStrictEqual(top.additionalItems, { $ref: "#/$defs/TaskSectionEncoded" })
    // A timeout is written as a string with a unit, at every depth.
    assert.deepStrictEqual(entry!.properties["timeout"], { anyOf: [{ type: "string" }, { type: "null" }] })
  })

  it("docs/experiment.schema.json is exactly what assay schema prints (regenerate it: assay schema > docs/experiment.schema.json)", () => {
    const file = fileURLToPath(new URL("../../docs/experiment.schema.json", import.meta.url))
    assert.deepStrictEqual(JSON.parse(fs.readFileSync(file, "utf8")), JSON.parse(JSON.stringify(experimentJsonSchema())))
  })
})
