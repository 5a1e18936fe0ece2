/**
 * A task whose output Schema has no `identifier` (a plain `Schema.Struct`), used from a config
 * file through `bin/assay` processes (needs `npm run build`): the run does not crash; its
 * checkpoints are recorded under the type name derived from the task's name and the schema's
 * structure, and a resume in another process reads them back (the task does not run again);
 * a study's declared metric reads `from: { output }` of such a task.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, count, query, root, tempDir, write } from "../support/cli.js"

/** `answer` (output: a Struct without identifier; logs each execution) and `check` (fails while OUTSCHEMA_FAIL=1). */
const tasks = (log: string) => `import { Schema } from "effect"
import * as fs from "node:fs"
import { Task } from "assay"
const Answer = Schema.Struct({ n: Schema.Number, correct: Schema.Boolean, label: Schema.optional(Schema.String) })
export const answer = (noise: number) =>
  Task.sync("answer", { parameters: { noise }, output: Answer }, (row: { readonly n: number }) => {
    fs.appendFileSync(${JSON.stringify(log)}, row.n + "\\n")
    return { n: row.n, correct: (row.n * 37) % 100 >= noise * 100 }
  })
export const check = Task.sync("check", (a: typeof Answer.Type) => {
  if (process.env.OUTSCHEMA_FAIL === "1") throw new Error("not yet")
  if (typeof a.correct !== "boolean") throw new Error("the checkpoint came back without its fields")
  return a
})
`

const setup = (dir: string) => {
  const log = path.join(dir, "answer.log")
  write(dir, "tasks.ts", tasks(log))
  write(dir, "package.json", { type: "module" })
  fs.symlinkSync(path.join(root, "node_modules"), path.join(dir, "node_modules"), "dir")
  write(dir, "data.jsonl", Array.from({ length: 12 }, (_, i) => JSON.stringify({ id: `c${i}`, n: i })).join("\n") + "\n")
  return log
}

describe("an output Schema without an identifier, from a config file", () => {
  it.live("run (second task failing), then resume in another process: checkpoints read back, nothing re-executed", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("outschema-run")
      const log = setup(dir)
      const file = write(dir, "experiment.yaml", [
        "pipeline:",
        "  name: answers",
        "  tasks:",
        "    - use: ./tasks.ts#answer",
        "      args: [0.3]",
        "    - use: ./tasks.ts#check",
        "      retry: { maxAttempts: 1 }",
        "source:",
        "  jsonl: { path: ./data.jsonl }",
        "  keyField: id"
      ].join("\n") + "\n")
      const store = path.join(dir, "s.db")
      const first = yield* assay(["run", "-c", file, "--store", store], { env: { OUTSCHEMA_FAIL: "1" }, killAfterMs: 120_000 })
      assert.strictEqual(first.code, 1, first.stderr)
      assert.notInclude(first.stderr, "SchemaCodec")
      assert.notInclude(first.stderr, "WorkerCrashed")
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'failed'"), 12)
      const names = query<{ type_name: string; codec: string }>(store, "SELECT DISTINCT type_name, codec FROM artifacts WHERE seq = 0")
      assert.strictEqual(names.length, 1)
      assert.strictEqual(names[0]!.codec, "schema")
      assert.match(names[0]!.type_name, /^answer:output:[0-9a-f]{12}$/)
      const second = yield* assay(["resume", "-c", file, "--store", store], { env: { OUTSCHEMA_FAIL: "0" }, killAfterMs: 120_000 })
      assert.strictEqual(second.code, 0, second.stderr)
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 12)
      assert.strictEqual(count(store, "SELECT count(*) FROM events WHERE kind = 'pipeline.checkpoint_unusable'"), 0)
      // `answer` ran once per row: the resume started at `check` with the decoded checkpoint
      assert.strictEqual(fs.readFileSync(log, "utf8").trim().split("\n").length, 12)
    })), 300_000)

  it.live("a study's metric reads `from: { output }` of such a task: plan without warning, run and report", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("outschema-study")
      setup(dir)
      write(dir, "experiment.yaml", [
        "pipeline:",
        "  name: answers",
        "  tasks:",
        "    - use: ./tasks.ts#answer",
        "      args: [{ $var: noise }]",
        "source:",
        "  jsonl: { path: ./data.jsonl }",
        "  keyField: id"
      ].join("\n") + "\n")
      const file = write(dir, "study.yaml", [
        "study: { id: outschema, question: Which noise?, type: compare }",
        "protocol: { experiment: ./experiment.yaml }",
        "output: { root: ./runs }",
        "variables:",
        "  - { name: noise, type: enum, values: [0.1, 0.5] }",
        "baseline: { noise: 0.1 }",
        "repeats: 1",
        "metrics:",
        "  - { name: accuracy, reducer: mean, from: { output: correct }, unit: ratio, direction: maximize }",
        "objectives:",
        "  - { metric: accuracy, direction: maximize }"
      ].join("\n") + "\n")
      const plan = yield* assay(["study", "plan", file])
      assert.strictEqual(plan.code, 0, plan.stderr)
      assert.notInclude(plan.stdout + plan.stderr, "cannot be checked before the run")
      const run = yield* assay(["study", "run", file, "-q"], { killAfterMs: 180_000 })
      assert.strictEqual(run.code, 0, run.stdout + run.stderr)
      const report = yield* assay(["study", "report", file, "--format", "json"])
      assert.strictEqual(report.code, 0, report.stderr)
      const c = JSON.parse(report.stdout) as { variants: Array<{ values: Record<string, { mean: number | null }> }> }
      assert.strictEqual(c.variants.length, 2)
      // rows 0..11: (n * 37) % 100 is 0,37,74,11,48,85,22,59,96,33,70,7: >= 10 for 10 of them, >= 50 for 5
      assert.sameMembers(c.variants.map((v) => v.values["accuracy"]!.mean), [10 / 12, 5 / 12])
    })), 300_000)
})
