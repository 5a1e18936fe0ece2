/**
 * Two promises of `assay study` about what it reads and spends (needs `npm run build`):
 *
 * - a declared metric's output path that leads nowhere (`from: { output: corect }` where the
 *   tasks output `correct`) is found before anything is spent: by `study plan` (and `run`)
 *   when the final task declares an output Schema; otherwise `plan` warns, and `run` stops at
 *   the first succeeded pipeline with exit 2, the field path and a did-you-mean;
 * - `study report`, `export` and `template` read the study's store, never its data set: they
 *   work after the source file was moved away.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, count, root, tempDir, write } from "../support/cli.js"

const TASKS = `import { Schema } from "effect"
import { Task } from "assay"
const Out = Schema.Struct({ n: Schema.Number, correct: Schema.Boolean, score: Schema.Number }).annotations({ identifier: "Answer" })
const body = (noise: number) => (row: { readonly n: number }, ctx: { readonly seed: number }) => ({
  n: row.n,
  correct: ((row.n * 7919 + ctx.seed) % 1000) / 1000 >= noise,
  score: 1 - noise
})
export const typed = (noise: number) => Task.sync("answer", { parameters: { noise }, output: Out }, body(noise))
export const untyped = (noise: number) => Task.sync("answer", { parameters: { noise } }, body(noise))
`

/** A study directory: tasks, a jsonl data set of 30 rows, an experiment using task `task`, a study whose accuracy reads `field`. */
const studyDir = (dir: string, task: "typed" | "untyped", field: string): string => {
  write(dir, "tasks.ts", TASKS)
  // the task module imports effect: resolved from this checkout's node_modules
  write(dir, "package.json", { type: "module" })
  if (!fs.existsSync(path.join(dir, "node_modules"))) fs.symlinkSync(path.join(root, "node_modules"), path.join(dir, "node_modules"), "dir")
  write(dir, "data.jsonl", Array.from({ length: 30 }, (_, i) => JSON.stringify({ id: `c${i}`, n: i })).join("\n") + "\n")
  write(dir, "experiment.yaml", [
    "pipeline:",
    "  name: answers",
    "  tasks:",
    `    - use: ./tasks.ts#${task}`,
    "      args: [{ $var: noise }]",
    "source:",
    "  jsonl: { path: ./data.jsonl }",
    "  keyField: id"
  ].join("\n") + "\n")
  return write(dir, "study.yaml", [
    "study: { id: paths, question: Which noise?, type: compare }",
    "protocol: { experiment: ./experiment.yaml }",
    "output: { root: ./runs }",
    "run: { concurrency: 1, trialConcurrency: 1 }",
    "variables:",
    "  - { name: noise, type: enum, values: [0.1, 0.3] }",
    "baseline: { noise: 0.1 }",
    "repeats: 2",
    "metrics:",
    `  - { name: accuracy, reducer: mean, from: { output: ${field} }, unit: ratio, direction: maximize }`,
    "objectives:",
    "  - { metric: accuracy, direction: maximize }",
    "analysis: { resamples: 200, seed: 3, minPairedCases: 10, minRepeats: 2 }"
  ].join("\n") + "\n")
}

describe("assay study: a metric's output path is checked before the study spends", () => {
  it.live("with an output Schema: plan and run refuse the misspelt path at once (exit 2, did-you-mean), nothing runs", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("study-path-typed")
      const file = studyDir(dir, "typed", "corect")
      for (const cmd of ["plan", "run"]) {
        const r = yield* assay(["study", cmd, file, "-q"].filter((a) => cmd === "run" || a !== "-q"), { killAfterMs: 120_000 })
        assert.strictEqual(r.code, 2, `${cmd}: ${r.stdout}${r.stderr}`)
        assert.include(r.stderr, "metrics[0].from.output")
        assert.include(r.stderr, "\"corect\" is not a field of the output of task answer (its fields: n, correct, score)")
        assert.include(r.stderr, "did you mean \"correct\"?")
      }
      assert.isFalse(fs.existsSync(path.join(dir, "runs")), "nothing was written")
      // spelt right, the plan has no warning about it
      const ok = studyDir(dir, "typed", "correct")
      const plan = yield* assay(["study", "plan", ok])
      assert.strictEqual(plan.code, 0, plan.stderr)
      assert.notInclude(plan.stdout + plan.stderr, "cannot be checked before the run")
    })), 240_000)

  it.live("without one: plan warns; run stops at the first succeeded pipeline with exit 2 and the field path", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("study-path-untyped")
      const file = studyDir(dir, "untyped", "corect")
      const plan = yield* assay(["study", "plan", file])
      assert.strictEqual(plan.code, 0, plan.stderr)
      assert.include(plan.stdout + plan.stderr, "metrics[0].from.output: \"corect\" cannot be checked before the run")
      const run = yield* assay(["study", "run", file, "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(run.code, 2, run.stdout + run.stderr)
      assert.include(run.stderr, "metrics[0].from.output")
      assert.include(run.stderr, "\"corect\" is not a field of the output (its fields: n, correct, score) in the first succeeded pipeline")
      assert.include(run.stderr, "did you mean \"correct\"?")
      // stopped there: 4 trials x 30 pipelines planned, far fewer run
      const db = path.join(dir, "runs", "state.db")
      const ended = count(db, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'")
      assert.isAtLeast(ended, 1)
      assert.isBelow(ended, 30, "the first trial did not run to its end")
      const status = yield* assay(["study", "status", file])
      assert.include(status.stdout, "interrupted")
    })), 240_000)
})

describe("assay study report, export and template read the store only", () => {
  it.live("after the data set is moved away, report (the same JSON as before), export and template succeed", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("study-store-only")
      const file = studyDir(dir, "typed", "correct")
      const run = yield* assay(["study", "run", file, "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(run.code, 0, run.stdout + run.stderr)
      const report = ["study", "report", file, "--format", "json"]
      const before = yield* assay(report)
      assert.strictEqual(before.code, 0, before.stderr)
      // the output, stored with its Schema's codec, is read by the declared metric
      const c = JSON.parse(before.stdout) as { variants: Array<{ values: Record<string, { mean: number | null }> }> }
      for (const v of c.variants) assert.isNotNull(v.values["accuracy"]!.mean)
      fs.renameSync(path.join(dir, "data.jsonl"), path.join(dir, "elsewhere.jsonl"))
      const commands = [report, ["study", "export", file, "--summary"], ["study", "template", file, "--out", path.join(dir, "template.yaml")]]
      const after = yield* Effect.forEach(commands, (cmd) => assay(cmd))
      after.forEach((r, i) => assert.strictEqual(r.code, 0, `${commands[i]!.join(" ")}: ${r.stderr}`))
      assert.strictEqual(after[0]!.stdout, before.stdout)
      assert.include(fs.readFileSync(path.join(dir, "template.yaml"), "utf8"), "protocol")
      // the run itself still needs the data set
      const again = yield* assay(["study", "plan", file])
      assert.strictEqual(again.code, 2)
      assert.include(again.stderr, "no such file")
    })), 480_000)
})
