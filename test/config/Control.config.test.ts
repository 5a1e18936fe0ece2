/**
 * Issue 13: `pipeline.control` and `run.maxHandoffs` in JSON, TOML and YAML experiments:
 * the same pipeline (and spec digest) as `Pipeline.make(..., { control })` in code, and every
 * problem reported at its field path (a ConfigError: exit 2).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as TOML from "smol-toml"
import * as YAML from "yaml"
import * as Experiment from "../../src/config/internal/experiment.js"
import { type ConfigError, isConfigFamily } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import { echo } from "../../src/tasks/Mock.js"

const issuesOf = (e: ConfigError) => e.issues.map((i) => `${i.path}: ${i.message}${i.suggestion ? ` | ${i.suggestion}` : ""}`)

const writeAll = (dir: string, name: string, value: Record<string, unknown>): Record<"json" | "yaml" | "toml", string> => {
  const files = {
    json: path.join(dir, `${name}.json`),
    yaml: path.join(dir, `${name}.yaml`),
    toml: path.join(dir, `${name}.toml`)
  }
  fs.writeFileSync(files.json, JSON.stringify(value, null, 2))
  fs.writeFileSync(files.yaml, YAML.stringify(value))
  fs.writeFileSync(files.toml, TOML.stringify(value))
  return files
}

const experiment = (control: unknown, run: Record<string, unknown> = {}) => ({
  run,
  pipeline: {
    name: "gen",
    tasks: [{ use: "echo", name: "generate" }, { use: "echo", name: "validate" }, { use: "echo", name: "report" }],
    control
  },
  source: { range: { n: 2 } }
})

const named = (name: string) => Task.withOverrides(echo, { name })
const inCode = (control: Pipeline.MakeOptions["control"]) =>
  Pipeline.make("gen", named("generate"), named("validate"), named("report"), { control })

describe("pipeline.control in experiment files", () => {
  it.effect("JSON, YAML and TOML build the same pipeline as the control option in code (names or seqs)", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const control = { edges: { validate: ["report", "end"] }, rewind: { validate: ["generate"] }, maxHandoffs: 3 }
      const expected = inCode(control)
      const files = writeAll(dir, "gen", experiment(control, { maxHandoffs: 50 }))
      for (const [format, file] of Object.entries(files)) {
        const e = yield* Experiment.load(file)
        assert.strictEqual(e.template.specDigest, expected.specDigest, format)
        assert.strictEqual(e.template.control?.maxHandoffs, 3, format)
        assert.strictEqual(e.run.maxHandoffs, 50, format)
        const d = e.describe() as any
        assert.deepStrictEqual(d.pipeline.control, {
          edges: ["validate(1) → report(2)", "validate(1) → end"],
          rewind: ["validate(1) → generate(0)"],
          retryAll: [],
          maxHandoffs: 3,
          backward: true
        }, format)
        assert.strictEqual(d.run.maxHandoffs, 50, format)
      }
      const bySeq = writeAll(dir, "seq", experiment({ edges: { "1": [2, "end"] }, rewind: { "1": [0] }, maxHandoffs: 3 }))
      for (const file of Object.values(bySeq)) {
        assert.strictEqual((yield* Experiment.load(file)).template.specDigest, expected.specDigest)
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a file without control keeps the plain digest; run.maxHandoffs defaults to 1000", () =>
    Effect.gen(function*() {
      const e = yield* Experiment.fromDefinition({
        pipeline: { name: "gen", tasks: [{ use: "echo", name: "generate" }] },
        source: { range: { n: 1 } }
      })
      assert.isUndefined(e.template.control)
      assert.strictEqual(e.template.specDigest, Pipeline.make("gen", named("generate")).specDigest)
      assert.isUndefined((e.describe() as any).pipeline.control)
      assert.strictEqual((e.describe() as any).run.maxHandoffs, 1000)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("shape problems are refused by the Schema with pipeline.control.* paths and did-you-mean", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const files = writeAll(dir, "bad", experiment({ edges: { validate: ["report"] }, retry_all: ["report"], maxHandoff: 2 }))
      for (const [format, file] of Object.entries(files)) {
        const error = yield* Effect.flip(Experiment.load(file))
        assert.isTrue(isConfigFamily(error), "a config error: exit 2")
        assert.deepStrictEqual(issuesOf(error), [
          `pipeline.control.retry_all: unknown key "retry_all" | did you mean retryAll?`,
          `pipeline.control.maxHandoff: unknown key "maxHandoff" | did you mean maxHandoffs?`
        ], format)
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a control block that is not an object (null, a number, a list) names pipeline.control and says to omit it", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const yaml = path.join(dir, "null.yaml")
      fs.writeFileSync(yaml, YAML.stringify(experiment(null)))
      const fromFile = yield* Effect.flip(Experiment.load(yaml))
      assert.deepStrictEqual(issuesOf(fromFile), [
        "pipeline.control: pipeline.control must be an object with edges, rewind, retryAll or maxHandoffs, got null: " +
        "declare at least one of them, or omit pipeline.control for a pipeline without control flow"
      ])
      for (const [bad, shown] of [[3, "3"], ["x", "\"x\""], [[], "a list"]] as const) {
        const error = yield* Effect.flip(Experiment.fromDefinition(experiment(bad) as never))
        const lines = issuesOf(error)
        assert.strictEqual(lines.length, 1, lines.join("\n"))
        assert.include(lines[0]!, `pipeline.control must be an object with edges, rewind, retryAll or maxHandoffs, got ${shown}:`)
        assert.notInclude(lines[0]!, "ControlSection")
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("maxHandoffs: true, \"3\", 0 and negatives are refused at pipeline.control.maxHandoffs", () =>
    Effect.gen(function*() {
      for (const bad of [true, "3", 0, -1, 2.5]) {
        const error = yield* Effect.flip(Experiment.fromDefinition(experiment({ retryAll: ["report"], maxHandoffs: bad }) as never))
        const lines = issuesOf(error)
        assert.strictEqual(lines.length, 1, `${JSON.stringify(bad)}: ${lines.join("\n")}`)
        assert.match(lines[0]!, /^pipeline\.control\.maxHandoffs: /)
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("resolution problems come from Control.resolve, each at its pipeline.control.* path", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const files = writeAll(dir, "bad", experiment({
        edges: { validate: ["generate", "reprot"], report: ["end"] },
        rewind: { generate: ["report"] }
      }))
      for (const [format, file] of Object.entries(files)) {
        const error = yield* Effect.flip(Experiment.load(file))
        assert.deepStrictEqual(issuesOf(error), [
          `pipeline.control.edges.validate[0]: edges go strictly forward: "generate" (seq 0) is not after "validate" (seq 1) (declare going back in rewind)`,
          `pipeline.control.edges.validate[1]: unknown task "reprot" (the tasks are "generate", "validate", "report") | did you mean "report"?`,
          `pipeline.control.edges.report[0]: "end" from the last task "report" (seq 2) changes nothing`,
          `pipeline.control.rewind.generate[0]: rewind goes strictly back: "report" (seq 2) is not before "generate" (seq 0) (declare going forward in edges)`,
          "pipeline.control.maxHandoffs: maxHandoffs is required when rewind or retryAll is declared (the loop budget)"
        ], format)
      }
      const noBackward = yield* Effect.flip(
        Experiment.fromDefinition(experiment({ edges: { generate: ["report"] }, maxHandoffs: 3 }) as never)
      )
      assert.deepStrictEqual(issuesOf(noBackward), [
        "pipeline.control.maxHandoffs: maxHandoffs requires backward operations (rewind or retryAll)"
      ])
      const outOfRange = yield* Effect.flip(
        Experiment.fromDefinition(experiment({ edges: { "-1": ["report"], validate: [-1, 1.5] } }) as never)
      )
      const valid = `the valid seqs are 0 ("generate"), 1 ("validate"), 2 ("report")`
      assert.deepStrictEqual(issuesOf(outOfRange), [
        `pipeline.control.edges.-1: seq -1 is out of range: the pipeline has 3 tasks, ${valid}`,
        `pipeline.control.edges.validate[0]: seq -1 is out of range: the pipeline has 3 tasks, ${valid}`,
        `pipeline.control.edges.validate[1]: a seq is an integer >= 0, got 1.5 (${valid})`
      ])
      const repeated = yield* Effect.flip(Experiment.fromDefinition({
        pipeline: {
          name: "r",
          tasks: [{ use: "echo", name: "ask" }, { use: "echo", name: "judge" }, { use: "echo", name: "ask" }],
          control: { edges: { judge: ["ask"] } }
        },
        source: { range: { n: 1 } }
      } as never))
      assert.deepStrictEqual(issuesOf(repeated), [
        `pipeline.control.edges.judge[0]: task name "ask" is used by seqs 0, 2: address the task by its seq`
      ])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("control.maxHandoffs: true, \"3\", 0 are refused with a message that names what was given", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[unknown, string]> = [
        [true, "got the boolean true"],
        ["3", `got the string "3" (write 3 without quotes)`],
        ["three", `got the string "three"`],
        [0, "got 0"]
      ]
      for (const [bad, tail] of cases) {
        const error = yield* Effect.flip(Experiment.fromDefinition(experiment({ retryAll: ["report"], maxHandoffs: bad }) as never))
        assert.deepStrictEqual(issuesOf(error), [
          `pipeline.control.maxHandoffs: maxHandoffs must be a positive integer (an unquoted number such as 3), ${tail}`
        ], JSON.stringify(bad))
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("run.maxHandoffs is a positive integer, refused at run.maxHandoffs with control.maxHandoffs' message", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[unknown, string]> = [
        [0, "got 0"],
        [-3, "got -3"],
        [1.5, "got 1.5"],
        ["10", `got the string "10" (write 10 without quotes)`],
        ["ten", `got the string "ten"`],
        [false, "got the boolean false"],
        [true, "got the boolean true"]
      ]
      for (const [bad, tail] of cases) {
        const error = yield* Effect.flip(Experiment.fromDefinition(
          experiment({ retryAll: ["report"], maxHandoffs: 2 }, { maxHandoffs: bad }) as never
        ))
        assert.deepStrictEqual(issuesOf(error), [
          `run.maxHandoffs: maxHandoffs must be a positive integer (an unquoted number such as 3), ${tail}`
        ], JSON.stringify(bad))
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("3.0 (a float literal, which parses as 3) is refused in JSON, YAML and TOML, at its path", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const texts: Record<string, string> = {
        "f.json": JSON.stringify(experiment({ retryAll: ["report"], maxHandoffs: 3 }, { maxHandoffs: 10 }), null, 2)
          .replace(`"maxHandoffs": 3`, `"maxHandoffs": 3.0`)
          .replace(`"maxHandoffs": 10`, `"maxHandoffs": 1e1`),
        "f.yaml": YAML.stringify(experiment({ retryAll: ["report"], maxHandoffs: 3 }, { maxHandoffs: 10 }))
          .replace("maxHandoffs: 3", "maxHandoffs: 3.0")
          .replace("maxHandoffs: 10", "maxHandoffs: 1e1"),
        "f.toml": [
          "[run]",
          "maxHandoffs = 1e1",
          "[pipeline]",
          "name = \"gen\"",
          "control = { retryAll = [\"report\"], maxHandoffs = 3.0 }",
          "[[pipeline.tasks]]",
          "use = \"echo\"",
          "name = \"report\"",
          "[source.range]",
          "n = 1"
        ].join("\n"),
        "g.toml": [
          "[pipeline]",
          "name = \"gen\"",
          "[[pipeline.tasks]]",
          "use = \"echo\"",
          "name = \"report\"",
          "[pipeline.control]",
          "retryAll = [\"report\"]",
          "maxHandoffs = 3.0 # a float",
          "[source.range]",
          "n = 1"
        ].join("\n")
      }
      for (const [name, text] of Object.entries(texts)) {
        const file = path.join(dir, name)
        fs.writeFileSync(file, text)
        const error = yield* Effect.flip(Experiment.load(file))
        const expected = [
          ...(name === "g.toml" ? [] : ["run.maxHandoffs: maxHandoffs must be an integer, got the float 1e1 | write 10"]),
          "pipeline.control.maxHandoffs: maxHandoffs must be an integer, got the float 3.0 | write 3"
        ]
        assert.deepStrictEqual(issuesOf(error).sort(), expected.sort(), name)
      }
      // written as an integer, the same files load
      fs.writeFileSync(path.join(dir, "ok.toml"), texts["g.toml"]!.replace("3.0", "3"))
      assert.strictEqual((yield* Experiment.load(path.join(dir, "ok.toml"))).template.control?.maxHandoffs, 3)
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("pipeline.control messages (tester13h finding 8)", () => {
  const loadIssues = (dir: string, name: string, value: Record<string, unknown>) =>
    Effect.gen(function*() {
      const file = path.join(dir, `${name}.yaml`)
      fs.writeFileSync(file, YAML.stringify(value))
      return issuesOf(yield* Effect.flip(Experiment.load(file)))
    })

  it.effect("a seq key is a plain integer: \"1.0\", \"01\", \"+1\", \"1e0\" are refused, saying how a seq is written", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      for (const key of ["1.0", "01", "+1", "1e0"]) {
        const lines = yield* loadIssues(dir, "seq", experiment({ edges: { [key]: [2] } }))
        assert.strictEqual(lines.length, 1, lines.join("\n"))
        assert.include(lines[0]!, `"${key}" is not a seq: a seq is written as a plain integer`, key)
        assert.include(lines[0]!, `the valid seqs are 0 ("generate"), 1 ("validate"), 2 ("report")`, key)
      }
      // "1" still is seq 1
      const ok = path.join(dir, "ok.yaml")
      fs.writeFileSync(ok, YAML.stringify(experiment({ edges: { "1": [2] } })))
      assert.strictEqual((yield* Experiment.load(ok)).template.specDigest, inCode({ edges: { validate: ["report"] } }).specDigest)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("no cascaded second message: edges not a list, a misspelt rewind, a misspelt maxHandoffs", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      assert.deepStrictEqual(yield* loadIssues(dir, "notlist", experiment({ edges: { validate: "report" } })), [
        `pipeline.control.edges.validate: expected a list, got "report"`
      ])
      const rewinds = yield* loadIssues(dir, "rewinds", experiment({ rewinds: { validate: ["generate"] }, maxHandoffs: 2 }))
      assert.deepStrictEqual(rewinds, [`pipeline.control.rewinds: unknown key "rewinds" | did you mean rewind?`])
      const max = yield* loadIssues(dir, "max", experiment({ rewind: { validate: ["generate"] }, maxHandoff: 2 }))
      assert.deepStrictEqual(max, [`pipeline.control.maxHandoff: unknown key "maxHandoff" | did you mean maxHandoffs?`])
      // in code too: the misspelt maxHandoffs is the only problem
      const error = yield* Effect.flip(Effect.try({
        try: () => inCode({ rewind: { validate: ["generate"] }, maxHandoff: 2 } as never),
        catch: (e) => e as Error
      }))
      assert.notInclude(error.message, "maxHandoffs is required")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a fanout branch named in control says it is a branch of the fanout and cannot hand off", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-control-"))
      const lines = yield* loadIssues(dir, "fan", {
        pipeline: {
          name: "fan",
          tasks: [
            { use: "echo", name: "first" },
            { use: "fanout", name: "group", tasks: [{ use: "echo", name: "b1" }, { use: "echo", name: "b2" }] },
            { use: "echo", name: "last" }
          ],
          control: { edges: { b1: ["last"] } }
        },
        source: { range: { n: 1 } }
      })
      assert.deepStrictEqual(lines, [
        `pipeline.control.edges.b1: "b1" is a branch of the fanout "group", not a task of the chain: branches cannot ` +
        `hand off or be handed to (control addresses the fanout "group" as a whole)`
      ])
    }).pipe(Effect.provide(NodeContext.layer)))
})
