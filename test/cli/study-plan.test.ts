/**
 * `assay study plan`, `assay validate -c STUDY`, `assay schema --study` and `assay run -c STUDY`
 * as a user runs them: spawned `bin/assay` processes on the fixtures of test/fixtures/studies.
 * Exit 0 for a plan within its caps, 2 (with the plan printed first) above a cap or for an
 * invalid study.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, root } from "../support/cli.js"

const fixtures = path.join(root, "test/fixtures/studies")
const fixture = (name: string) => path.join(fixtures, name)

describe("assay study plan", () => {
  it.live("prints the plan of a study within its caps (exit 0), the same figures as --json", () =>
    Effect.gen(function*() {
      const [text, json] = yield* Effect.all([
        assay(["study", "plan", fixture("study.yaml")]),
        assay(["study", "plan", fixture("study.toml"), "--json"])
      ], { concurrency: 2 })
      assert.strictEqual(text.code, 0, text.stderr)
      assert.include(text.stdout, "study small-study")
      assert.match(text.stdout, /trials: +48 \(24 variants x 2 repeats\)/)
      assert.match(text.stdout, /max model calls: +576/)
      assert.match(text.stdout, /tokens: +1,248 \.\. 9,504/)
      assert.match(text.stdout, /concurrency: +4 pipelines, 2 trials at once/)
      // what it may cost and the rules it runs under, before anything runs
      assert.match(text.stdout, /\ncost: +\$0\.0069 \.\. \$0\.084\n/)
      assert.include(text.stdout, "\nbudget: per trial 100 calls, $0.5, 600 s\n")
      assert.include(text.stdout, "\nstop: allTrialsTerminal (drain); metricThreshold accuracy >= 0.97 (drain)\n")
      assert.include(text.stdout, "\nobjectives: accuracy maximize; costUsd minimize, weight 0.5\n")
      assert.strictEqual(json.code, 0, json.stderr)
      const described = JSON.parse(json.stdout)
      assert.strictEqual(described.valid, true)
      assert.strictEqual(described.plan.trials, 48)
      assert.strictEqual(described.plan.maxModelCalls, 576)
      assert.strictEqual(described.variants.length, 24)
      assert.match(text.stdout, new RegExp(`digest ${described.protocol.digest}`))
    }), 60_000)

  it.live("above each cap: the plan is printed, then exit 2 naming every cap exceeded and asking to reduce the variables", () =>
    Effect.gen(function*() {
      const [all, trials] = yield* Effect.all([
        assay(["study", "plan", fixture("over-caps.yaml")]),
        assay(["study", "plan", fixture("too-many-trials.yaml")])
      ], { concurrency: 2 })
      assert.strictEqual(all.code, 2, all.stderr)
      assert.match(all.stdout, /trials: +12 \(6 variants x 2 repeats\)/)
      for (const [cap, planned, limit] of [["maxTrials", 12, 10], ["maxPipelines", 48, 40], ["maxCalls", 144, 100], ["maxTokens", 1728, 1000]] as const) {
        assert.include(all.stderr, `limits.${cap}: planned ${planned}, above the cap of ${limit}: reduce the variables (6 variants x 2 repeats)`)
      }
      assert.strictEqual(trials.code, 2, trials.stderr)
      assert.include(trials.stderr, "limits.maxTrials: planned 202, above the cap of 200: reduce the variables (101 variants x 2 repeats); a study is never sampled")
    }), 60_000)
})

describe("validate, schema and run on a study file", () => {
  it.live("validate -c STUDY describes it (exit 0) and refuses one over its caps (exit 2); schema --study prints docs/study.schema.json; run -c STUDY points to assay study run", () =>
    Effect.gen(function*() {
      const [ok, over, schema, run] = yield* Effect.all([
        assay(["validate", "-c", fixture("study.json")]),
        assay(["validate", "-c", fixture("over-caps.yaml"), "--json"]),
        assay(["schema", "--study"]),
        assay(["run", "-c", fixture("study.yaml")])
      ], { concurrency: 2 })
      assert.strictEqual(ok.code, 0, ok.stderr)
      assert.match(ok.stdout, /^study small-study \(.*study\.json\): valid/)
      assert.include(ok.stdout, "baseline: v01 (prompt=terse, model=small, temperature=0, pause=1 millis)")
      assert.strictEqual(over.code, 2)
      const refused = JSON.parse(over.stdout)
      assert.strictEqual(refused.valid, false)
      assert.deepStrictEqual(refused.issues.map((i: { path: string }) => i.path), ["limits.maxTrials", "limits.maxPipelines", "limits.maxCalls", "limits.maxTokens"])
      assert.strictEqual(schema.code, 0)
      assert.deepStrictEqual(JSON.parse(schema.stdout), JSON.parse(fs.readFileSync(path.join(root, "docs/study.schema.json"), "utf8")))
      assert.strictEqual(run.code, 2)
      assert.include(run.stderr, "is a study file: run it with `assay study run")
    }), 90_000)
})
