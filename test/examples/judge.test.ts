/**
 * examples/judge and evaluator blindness in a real study run (`bin/assay study run`, against
 * the mock server started here):
 *
 * - the example study (2 prompts x 2 models over 6 emails, a blind judge scoring each answer
 *   against the gold label) completes, every trial with its `judgeScore` metric;
 * - the same experiment with two probes between the chat task and the judge: a plain code task
 *   sees its trial's variables and labels (and copies them into its output, as a careless
 *   pipeline would); the same kind of task marked `evaluator: true` sees `ctx.variables = {}`,
 *   no member labels, no store, and its input with every variable value withheld.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, root, tempDir, write } from "../support/cli.js"

const example = path.join(root, "examples/judge")

/** The mock with the built-in model profiles and one fast, error-free endpoint, for the scope. */
const mock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({ seed: 5, endpoints: [{ name: "e", latency: { medianMs: 0 } }] })
  return yield* MockLlm.serve({ profile, models: MockLlm.builtinModels })
}).pipe(Effect.provide(NodeContext.layer))

interface StudyJson {
  readonly status: string
  readonly trials: ReadonlyArray<{ trialId: string; status: string; assignment: Record<string, unknown>; metrics: Record<string, number> }>
}

const runStudy = (file: string, outputRoot: string, url: string, cwd?: string) =>
  Effect.gen(function*() {
    const r = yield* assay(["study", "run", file, "--output-root", outputRoot, "--json", "-q"], {
      env: { JUDGE_EXAMPLE_URL: `${url}/v1`, JUDGE_EXAMPLE_KEY: "test-key" },
      ...(cwd === undefined ? {} : { cwd })
    })
    assert.strictEqual(r.code, 0, r.stderr)
    return JSON.parse(r.stdout.trim().split("\n").pop()!) as StudyJson
  })

describe("examples/judge", () => {
  it.scopedLive("the judged study completes; every trial has its judgeScore from the blind judge", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("judge-example")
      const out = yield* runStudy(path.join(example, "study.yaml"), path.join(dir, "out"), server.url)
      assert.strictEqual(out.status, "completed")
      assert.deepStrictEqual(out.trials.map((t) => t.status), ["succeeded", "succeeded", "succeeded", "succeeded"])
      for (const t of out.trials) {
        assert.isAtLeast(t.metrics.judgeScore!, 0)
        assert.isAtMost(t.metrics.judgeScore!, 1)
      }
      const log = yield* server.log
      // 24 answers and 24 verdicts (the mock's endpoint neither fails nor answers badly)
      assert.strictEqual(log.filter((e) => e.reason === "judge").length, 24)
      assert.strictEqual(log.filter((e) => e.reason === "ok").length, 24)
    }), 120_000)
})

describe("the judge's share of a trial's cost (tester16b N7)", () => {
  it.scopedLive("costUsd includes the judge's calls; status and report show the judge's part beside it", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("judge-cost")
      const copy = path.join(dir, "study")
      fs.cpSync(example, copy, { recursive: true })
      // the judge's model priced, so that its calls cost something
      fs.appendFileSync(path.join(copy, "experiment.yaml"), "pricing:\n  mock-judge: { inputPer1M: 1, outputPer1M: 2 }\n")
      const env = { JUDGE_EXAMPLE_URL: `${server.url}/v1`, JUDGE_EXAMPLE_KEY: "test-key" }
      const ran = yield* assay(["study", "run", path.join(copy, "study.yaml"), "--output-root", path.join(dir, "out"), "-q"], { env })
      assert.strictEqual(ran.code, 0, ran.stderr)
      const report = yield* assay(["study", "report", path.join(copy, "study.yaml"), "--output-root", path.join(dir, "out"), "--format", "json"], { env })
      assert.strictEqual(report.code, 0, report.stderr)
      const usage = (JSON.parse(report.stdout) as { run: { usage: { costUsd: number; judgeCostUsd?: number } } }).run.usage
      assert.isAbove(usage.judgeCostUsd ?? 0, 0)
      assert.isBelow(usage.judgeCostUsd!, usage.costUsd)
      const text = yield* assay(["study", "report", path.join(copy, "study.yaml"), "--output-root", path.join(dir, "out")], { env })
      assert.match(text.stdout, /usage: .* · \$[0-9.]+ \(judge \$[0-9.]+\) · /)
      const status = yield* assay(["study", "status", path.join(copy, "study.yaml"), "--output-root", path.join(dir, "out")], { env })
      assert.match(status.stdout, /p1-v01-r1 .*\$[0-9.]+ \(judge \$[0-9.]+\)/)
      // one cost formatter in every study view (fix16x; tester16d F4: run printed $0.01 beside
      // $0.011 while status printed $0.0103): each trial's cost reads the same in run and
      // status, at 3 significant digits, and so do the report's usage and judge share
      const SIG3 = String.raw`\$0\.0*[1-9][0-9]{2}`
      const costIn = (text: string, line: RegExp) =>
        Object.fromEntries(text.split("\n").flatMap((l) => {
          const m = line.exec(l)
          return m === null ? [] : [[m[1]!, m[2]!]]
        }))
      const inRun = costIn(ran.stdout, /^\s+(p1-v\d+-r\d+) .* · tokens \d+ · (\S+) · /)
      const inStatus = costIn(status.stdout, /^(p1-v\d+-r\d+) .* (\$\S+) \(judge /)
      assert.strictEqual(Object.keys(inRun).length, 4, ran.stdout)
      assert.deepStrictEqual(inStatus, inRun, `${ran.stdout}\n${status.stdout}`)
      for (const c of Object.values(inRun)) assert.match(c, new RegExp(`^${SIG3}$`))
      assert.match(text.stdout, new RegExp(`usage: .* · ${SIG3} \\(judge ${SIG3}\\) · `))
    }), 120_000)
})

describe("evaluator blindness in a study run", () => {
  it.scopedLive("a plain task sees its variant; the same task marked evaluator sees none of it, in its context or its input", () =>
    Effect.gen(function*() {
      const server = yield* mock
      const dir = yield* tempDir("judge-blind")
      const seen = path.join(dir, "seen.jsonl")
      write(dir, "package.json", JSON.stringify({ type: "module" }))
      write(dir, "emails.jsonl", fs.readFileSync(path.join(example, "emails.jsonl"), "utf8"))
      write(dir, "probes.ts", [
        `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
        `import * as fs from "node:fs"`,
        `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
        `const look = (who: string, input: unknown, ctx: any) => Effect.gen(function*() {`,
        `  const store = yield* Effect.match(ctx.store.listRuns, { onFailure: (e: any) => "failed: " + e.message, onSuccess: () => "read" })`,
        `  fs.appendFileSync(${JSON.stringify(seen)}, JSON.stringify({ who, variables: ctx.variables, suiteId: ctx.suiteId,`,
        `    experimentId: ctx.experimentId, localKey: ctx.localKey, outputDir: ctx.outputDir, taskName: ctx.taskName, store, input }) + "\\n")`,
        `})`,
        `// copies the variant into its output, as a careless pipeline would`,
        `export const carry = Task.make("carry", (out: any, ctx) => Effect.gen(function*() {`,
        `  yield* look("carry", out, ctx)`,
        `  return { answer: out.content, gold: out.input.label, model: out.model, prompt: ctx.variables.prompt,`,
        `    profile: ctx.variables.model, trial: ctx.experimentId }`,
        `}))`,
        `export const inspect = Task.make("inspect", (row: any, ctx) => Effect.gen(function*() {`,
        `  yield* look("inspect", row, ctx)`,
        `  return row`,
        `}))`
      ].join("\n"))
      const base = fs.readFileSync(path.join(example, "experiment.yaml"), "utf8")
      const experiment = base
        .replace("    - use: judge\n", "    - use: ./probes.ts#carry\n    - use: ./probes.ts#inspect\n      evaluator: true\n    - use: judge\n")
        .replace("candidates: { answer: content }", "candidates: { answer: answer }")
        .replace("context: { reference: input.label }", "context: { reference: gold }")
      assert.include(experiment, "evaluator: true")
      write(dir, "experiment.yaml", experiment)
      const study = fs.readFileSync(path.join(example, "study.yaml"), "utf8")
      write(dir, "study.yaml", study)
      const out = yield* runStudy(path.join(dir, "study.yaml"), path.join(dir, "out"), server.url, dir)
      assert.strictEqual(out.status, "completed")

      const lines = fs.readFileSync(seen, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      const carried = lines.filter((l) => l.who === "carry")
      const inspected = lines.filter((l) => l.who === "inspect")
      assert.strictEqual(carried.length, 24)
      assert.strictEqual(inspected.length, 24)
      // not an evaluator: the trial's variables and labels
      const prompts = new Set(carried.map((l) => l.variables.prompt))
      assert.strictEqual(prompts.size, 2)
      assert.sameMembers([...new Set(carried.map((l) => l.variables.model.model))], ["small", "medium"])
      assert.sameMembers([...new Set(carried.map((l) => l.experimentId))], ["p1-v01-r1", "p1-v02-r1", "p1-v03-r1", "p1-v04-r1"])
      assert.isTrue(carried.every((l) => l.suiteId === "judged-answers" && l.store === "read"))
      // an evaluator: nothing of the variant in its context
      for (const l of inspected) {
        assert.deepStrictEqual(l.variables, {})
        assert.deepStrictEqual([l.suiteId, l.experimentId, l.localKey, l.outputDir], [null, null, null, null])
        assert.strictEqual(l.taskName, "inspect")
        assert.include(l.store, "withheld from evaluator tasks")
        // its input: the variant's values withheld, the answer and the gold label kept
        assert.deepStrictEqual([l.input.model, l.input.prompt, l.input.trial, l.input.profile.model], [
          "[withheld]",
          "[withheld]",
          "[withheld]",
          "[withheld]"
        ])
        assert.include(["spam", "ham"], l.input.gold)
        const text = JSON.stringify(l)
        for (const v of [...prompts, "\"small\"", "\"medium\"", "p1-v0", "judged-answers"]) assert.notInclude(text, v)
      }
      // the judge scored every answer
      for (const t of out.trials) assert.isAtLeast(t.metrics.judgeScore!, 0)
    }), 120_000)
})
