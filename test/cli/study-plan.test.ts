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
import { assay, root, tempDir } from "../support/cli.js"

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
      assert.match(text.stdout, /\ncost: +\$0\.00686 \.\. \$0\.0840\n/)
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
        assert.include(all.stderr, `limits.${cap}: planned ${planned.toLocaleString("en-US")}, above the cap of ${limit.toLocaleString("en-US")}: reduce the variables (6 variants x 2 repeats)`)
      }
      assert.strictEqual(trials.code, 2, trials.stderr)
      assert.include(trials.stderr, "limits.maxTrials: planned 202, above the cap of 200: reduce the variables (101 variants x 2 repeats); a study is never sampled")
    }), 60_000)
})

describe("assay study plan: a file of many mistakes (tester16d F1)", () => {
  it.live("every problem in one run, at its field path, exit 2: the misspelt objectives section's too", () =>
    Effect.gen(function*() {
      const r = yield* assay(["study", "plan", fixture("many-mistakes.yaml")])
      assert.strictEqual(r.code, 2, r.stderr)
      assert.include(r.stderr, "many-mistakes.yaml: 20 problems")
      for (
        const line of [
          "objectivs: unknown key \"objectivs\" (did you mean objectives?)",
          "objectives[0].direction: expected \"maximize\", \"minimize\" or \"target\", got \"maximise\" (did you mean \"maximize\"?)",
          "objectives[1].target: is missing: direction target needs a target value",
          "objectives[2].target: only direction target takes a target (direction is minimize)",
          "variables[2].end: must be >= start (1), got 0",
          "baseline.model: \"large\" is not a value of variable \"model\"",
          "metrics[1].name: \"calls\" is a built-in metric",
          "objectives[0].metric: unknown metric \"acuracy\""
        ]
      ) assert.include(r.stderr, `  ${line}`)
    }), 60_000)
})

describe("assay study plan: each message once; the paths run uses (issue 16 leftovers)", () => {
  /** The lines of a process's stdout and stderr (blank lines left out) that appear more than once. */
  const repeated = (r: { readonly stdout: string; readonly stderr: string }) => {
    const lines = `${r.stdout}\n${r.stderr}`.split("\n").map((l) => l.trim()).filter((l) => l !== "")
    return lines.filter((l, i) => lines.indexOf(l) !== i)
  }

  it.live("the examples' studies, a study drawing every warning and one over every cap: no line printed twice", () =>
    Effect.gen(function*() {
      const files = [
        path.join(root, "examples/studies/study.yaml"),
        path.join(root, "examples/studies/spam-prompts/study.yaml"),
        path.join(root, "examples/judge/study.yaml"),
        fixture("warn-all.yaml"),
        fixture("warn-metrics.yaml"),
        fixture("over-caps.yaml")
      ]
      const runs = yield* Effect.all(files.map((f) => assay(["study", "plan", f], { env: { ASSAY_TEST_UNSET_MODEL: undefined } })), { concurrency: 2 })
      runs.forEach((r, i) => assert.deepStrictEqual(repeated(r), [], `${files[i]}:\n${r.stdout}\n${r.stderr}`))
      const [warnAll, warnMetrics, over] = runs.slice(3)
      assert.strictEqual(warnAll!.code, 0, warnAll!.stderr)
      // every warning, the unset variable included (as study run says it)
      for (
        const at of [
          "warning: environment variable ASSAY_TEST_UNSET_MODEL is not set (at pipeline.tasks[0].options.model)",
          "warning: baseline:",
          "warning: variables[0]:",
          "warning: stop[0].count:",
          "warning: stop[1]:",
          "warning: stop[2].metric:",
          "warning: stop[3].at:",
          "warning: objectives[0].target:",
          "warning: objectives[1].hardConstraint:",
          "warning: model \"x\" has no price"
        ]
      ) assert.include(warnAll!.stderr, at)
      for (const at of ["warning: metrics[0].name:", "warning: metrics[0].from.output:", "warning: metrics[1].from.output:"]) assert.include(warnMetrics!.stderr, at)
      // above the caps: the plan says so once in its header, each cap is named once (in the refusal)
      assert.strictEqual(over!.code, 2)
      assert.match(over!.stdout, /^study over-caps \(.*\): over its caps\n/)
      for (const cap of ["maxTrials", "maxPipelines", "maxCalls", "maxTokens"]) {
        assert.strictEqual(`${over!.stdout}${over!.stderr}`.split(`limits.${cap}`).length - 1, 1, cap)
      }
      assert.include(over!.stderr, "limits.maxTokens: planned 1,728, above the cap of 1,000")
    }), 120_000)

  it.live("an unset key variable: plan warns once, in the words validate uses, and run refuses with the same words (tester18d F7)", () =>
    Effect.scoped(Effect.gen(function*() {
      const cwd = yield* tempDir("plan-key")
      fs.writeFileSync(path.join(cwd, "rows.jsonl"), "{\"id\": \"a\", \"prompt\": \"hi\"}\n")
      fs.writeFileSync(path.join(cwd, "sexp.yaml"), [
        "pools:",
        "  llm:",
        "    resources:",
        "      - { id: steady, capacity: 2, options: { baseUrl: \"http://127.0.0.1:9/v1\", apiKeyEnv: ASSAY_TEST_F7_KEY, model: m } }",
        "pipeline:",
        "  name: q",
        "  tasks:",
        "    - { use: chat, name: ask, options: { temperature: { $var: temp }, maxTokens: 5 } }",
        "source: { jsonl: { path: ./rows.jsonl }, keyField: id }"
      ].join("\n"))
      fs.writeFileSync(path.join(cwd, "study.yaml"), [
        "study: { id: f7, question: \"does temperature matter?\", type: compare }",
        "protocol: { experiment: ./sexp.yaml }",
        "output: { root: ./out }",
        "variables:",
        "  - { name: temp, type: enum, values: [0, 1] }",
        "baseline: { temp: 0 }",
        "repeats: 1"
      ].join("\n"))
      const env = { ASSAY_TEST_F7_KEY: undefined }
      const [plan, validate, run] = yield* Effect.all([
        assay(["study", "plan", "study.yaml"], { cwd, env }),
        assay(["validate", "-c", "study.yaml"], { cwd, env }),
        assay(["study", "run", "study.yaml", "-q"], { cwd, env })
      ], { concurrency: 2 })
      const about = (text: string) => text.split("\n").filter((l) => l.includes("ASSAY_TEST_F7_KEY"))
      assert.strictEqual(plan.code, 0, plan.stderr)
      const said = "protocol.experiment: sexp.yaml: pools.llm.resources[0].options.apiKeyEnv: environment variable ASSAY_TEST_F7_KEY (the key) is not set: every call to this endpoint would fail (export ASSAY_TEST_F7_KEY=...)"
      assert.deepStrictEqual(about(`${plan.stdout}\n${plan.stderr}`), [`warning: ${said}; study run refuses to start`])
      assert.deepStrictEqual(about(`${validate.stdout}\n${validate.stderr}`), about(plan.stderr))
      assert.strictEqual(run.code, 2, run.stderr)
      assert.deepStrictEqual(about(run.stderr).map((l) => l.trim()), [said])
      assert.isFalse(fs.existsSync(path.join(cwd, "out")))
    })), 120_000)

  it.live("--output-root: plan prints the output root and the store file run opens, resolved against the working directory as run resolves them", () =>
    Effect.scoped(Effect.gen(function*() {
      const cwd = yield* tempDir("plan-root")
      const study = path.join(root, "examples/studies/study.yaml")
      const [text, json] = yield* Effect.all([
        assay(["study", "plan", study, "--output-root", "elsewhere/multiples"], { cwd }),
        assay(["study", "plan", study, "--output-root", "elsewhere/multiples", "--json"], { cwd })
      ], { concurrency: 2 })
      const expected = path.join(fs.realpathSync(cwd), "elsewhere/multiples")
      assert.strictEqual(text.code, 0, text.stderr)
      const printed = (name: string) => text.stdout.split("\n").find((l) => l.startsWith(`${name}: `))?.slice(name.length + 2)
      assert.strictEqual(printed("output"), expected)
      assert.strictEqual(printed("store"), path.join(printed("output")!, "state.db"))
      assert.deepStrictEqual(JSON.parse(json.stdout).output, { root: printed("output"), store: printed("store") })
      // the run with the same flag writes exactly there
      const ran = yield* assay(["study", "run", study, "--output-root", "elsewhere/multiples", "-q"], { cwd })
      assert.strictEqual(ran.code, 0, ran.stderr)
      assert.isTrue(fs.existsSync(printed("store")!))
      assert.include(ran.stdout, `output: ${printed("output")}`)
    })), 120_000)
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
