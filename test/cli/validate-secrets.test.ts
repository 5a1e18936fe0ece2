/**
 * What `validate` prints of study, suite and experiment files (issue 18, tester18b): a value
 * that came from `${VAR}` is never printed by the study and suite loaders' exit-2 messages
 * (the experiment loader's rule), and the top-level `pricing` table is printed at its own level,
 * not inside `run:`. Spawned `bin/assay` processes (few: each costs ~1.5 s of start-up).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, tempDir } from "../support/cli.js"

const SECRET = "sk-t18t-secret-5f4e3d2c1b0a"

const experiment = [
  "pools:",
  "  llm:",
  "    resources:",
  "      - { id: a, capacity: 2, options: { baseUrl: \"http://127.0.0.1:9/v1\", model: base } }",
  "pipeline:",
  "  name: classify",
  "  tasks:",
  "    - { use: chat, name: classify, options: { resource: llm, model: { $var: model }, temperature: { $var: temperature } } }",
  "source: { range: { n: 2 } }"
].join("\n")

describe("validate: values from ${VAR} and the pricing table", () => {
  it.scopedLive("a study file and a suite file with a ${KEY} where a number belongs: exit 2, the path named, the value in no output", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("validate-secrets")
      fs.writeFileSync(path.join(dir, "experiment.yaml"), experiment)
      fs.writeFileSync(path.join(dir, "study.yaml"), [
        "study: { id: s, question: \"q?\", type: compare }",
        "protocol: { experiment: ./experiment.yaml }",
        "output: { root: ./out }",
        "run: { concurrency: \"${KEY}\" }",
        "variables:",
        "  - { name: temperature, type: enum, values: [\"${KEY}\", 1] }",
        "  - { name: model, type: enum, values: [small] }",
        "repeats: 1"
      ].join("\n"))
      fs.writeFileSync(path.join(dir, "member.yaml"), "pipeline: { name: p, tasks: [ { use: echo } ] }\nsource: { range: { n: 2 } }\n")
      fs.writeFileSync(path.join(dir, "suite.yaml"), [
        "suite: { id: cmp }",
        "run: { concurrency: \"${KEY}\" }",
        "output: { root: out/cmp }",
        "experiments: { a: { config: member.yaml } }"
      ].join("\n"))
      const env = { KEY: SECRET }
      const [study, suite] = yield* Effect.all([
        assay(["validate", "-c", "study.yaml"], { cwd: dir, env }),
        assay(["validate", "-c", "suite.yaml"], { cwd: dir, env })
      ], { concurrency: 2 })
      for (const [name, r] of [["study", study], ["suite", suite]] as const) {
        assert.strictEqual(r.code, 2, `${name}: ${r.stderr}`)
        assert.include(r.stderr, "run.concurrency: expected a number, got \"${KEY}\"", name)
        assert.notInclude(r.stdout + r.stderr, SECRET, name)
      }
    }))

  it.scopedLive("the top-level pricing is printed on a line of its own, not inside run:", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("validate-pricing")
      fs.writeFileSync(
        path.join(dir, "e.yaml"),
        "pipeline: { name: p, tasks: [ { use: echo } ] }\nsource: { range: { n: 2 } }\npricing: { m1: { inputPer1M: 1, outputPer1M: 2 } }\n"
      )
      const [text, json] = yield* Effect.all([
        assay(["validate", "-c", "e.yaml"], { cwd: dir }),
        assay(["validate", "-c", "e.yaml", "--json"], { cwd: dir })
      ], { concurrency: 2 })
      assert.strictEqual(text.code, 0, text.stderr)
      const lines = text.stdout.split("\n")
      const run = lines.find((l) => l.startsWith("run: "))
      assert.isDefined(run)
      assert.notInclude(run!, "pricing")
      assert.include(lines, "pricing: {\"m1\":{\"inputPer1M\":1,\"outputPer1M\":2}}")
      const described = JSON.parse(json.stdout) as { run: Record<string, unknown>; pricing?: unknown }
      assert.notProperty(described.run, "pricing")
      assert.deepStrictEqual(described.pricing, { m1: { inputPer1M: 1, outputPer1M: 2 } })
    }))
})
