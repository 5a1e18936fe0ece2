/**
 * `use: fanout` in experiment files, as a user runs it: spawned `bin/assay` processes on the
 * example examples/experiments/fanout.{yaml,ts} and on temp files, with the stored results
 * and task rows read back through `assay export`.
 *
 * Each spawn costs ~1.5 s of start-up on an idle machine (far more on a loaded one, hence the
 * generous timeout), so the tests share spawns where they can.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Experiment from "../../src/config/Experiment.js"

const root = fileURLToPath(new URL("../../", import.meta.url))
const bin = path.join(root, "bin/assay")
const example = (ext: string) => path.join(root, `examples/experiments/fanout.${ext}`)

interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const assay = (args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<Result>((resolve) => {
      const child = spawn(bin, [...args], { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
      child.on("close", (code) => resolve({ code, stdout, stderr }))
    })
  )

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "assay-fanout-cli-"))

/** `assay export STORE OUT.jsonl --rows KIND`, read back as objects. */
const exported = (store: string, kind: "results" | "tasks") =>
  Effect.gen(function*() {
    const out = path.join(path.dirname(store), `${path.basename(store)}.${kind}.jsonl`)
    const r = yield* assay(["export", store, out, "--rows", kind])
    assert.strictEqual(r.code, 0, r.stderr)
    return fs.readFileSync(out, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Record<string, any>)
  })

const isCollectedFailure = (v: any, errorClass: string) =>
  typeof v === "object" && v !== null && Object.keys(v).length === 1 && v.error?.class === errorClass &&
  typeof v.error.type === "string" && typeof v.error.message === "string"

describe("assay with use: fanout in the experiment file", { timeout: 300_000 }, () => {
  it.live("examples/experiments/fanout.yaml: validate shows the branches; run stores each judge's value by name in one checkpoint", () =>
    Effect.gen(function*() {
      const v = yield* assay(["validate", "-c", example("yaml"), "--json"])
      assert.strictEqual(v.code, 0, v.stderr)
      const described = JSON.parse(v.stdout)
      const group = described.pipeline.tasks[1]
      assert.strictEqual(group.name, "judges")
      assert.deepStrictEqual(group.parameters, { onError: "collect" })
      assert.deepStrictEqual(group.children.map((c: any) => [c.name, c.resource]), [
        ["judge-a", "apis"],
        ["judge-b", "apis"],
        ["judge-c", "apis"]
      ])

      // the plain-text form lists the branches under their group
      const t = yield* assay(["validate", "-c", example("yaml")])
      assert.strictEqual(t.code, 0, t.stderr)
      assert.match(t.stdout, /\n {2}task judges: .*3 branches\n {4}branch judge-a: resource apis.*\n {4}branch judge-b: .*\n {4}branch judge-c: /)

      const dir = tmp()
      const store = path.join(dir, "yaml.db")
      const run = yield* assay(["run", "-c", example("yaml"), "--store", store, "--summary", "json"])
      assert.strictEqual(run.code, 0, run.stderr) // collect: a failed judge never fails the pipeline
      assert.strictEqual(JSON.parse(run.stdout).stats.pipelines.byState.succeeded, 6)

      const results = yield* exported(store, "results")
      assert.strictEqual(results.length, 6)
      const inputs: Array<number> = []
      for (const r of results) {
        assert.strictEqual(r["state"], "succeeded")
        const p = r["payload"]
        assert.deepStrictEqual(Object.keys(p).sort(), ["judge-a", "judge-b", "judge-c"])
        // Every branch saw the same input (the row, passed on by `prepare`).
        assert.strictEqual(p["judge-b"].input, p["judge-a"].input)
        assert.strictEqual(p["judge-a"].tokens, 32)
        assert.strictEqual(p["judge-b"].tokens, 64)
        const c = p["judge-c"]
        assert.isTrue(isCollectedFailure(c, "rate_limit") || c.input === p["judge-a"].input, JSON.stringify(c))
        inputs.push(p["judge-a"].input)
      }
      assert.deepStrictEqual(inputs.sort(), [0, 1, 2, 3, 4, 5])

      const tasks = yield* exported(store, "tasks")
      assert.strictEqual(tasks.length, 12) // prepare + judges per pipeline: the branches are not tasks of their own
      const groups = tasks.filter((t) => t["taskName"] === "judges")
      assert.strictEqual(groups.length, 6)
      for (const g of groups) {
        assert.strictEqual(g["state"], "succeeded")
        assert.strictEqual(g["attemptsUsed"], 1)
        assert.strictEqual(g["leaseIds"].length, 3) // one lease per branch, recorded under the group
      }
    }))

  it.live("the TypeScript example, whose fanout is built with fanout(...), runs the same pipelines (same ids) as the files", () =>
    Effect.gen(function*() {
      // JSON, TOML and YAML: the same spec digest (in-process, no spawn needed).
      const digests = new Set<string>()
      for (const ext of ["json", "toml", "yaml"]) {
        const e = yield* Experiment.load(example(ext)).pipe(Effect.provide(NodeContext.layer))
        digests.add(e.template.specDigest)
      }
      assert.strictEqual(digests.size, 1)
      const dir = tmp()
      const ids: Array<Array<string>> = []
      for (const ext of ["yaml", "ts"]) {
        const store = path.join(dir, `${ext}.db`)
        const r = yield* assay(["run", "-c", example(ext), "--store", store])
        assert.strictEqual(r.code, 0, r.stderr)
        ids.push((yield* exported(store, "results")).map((row) => row["pipelineId"] as string).sort())
      }
      assert.strictEqual(ids[0]!.length, 6)
      assert.deepStrictEqual(ids[0], ids[1])
    }))

  it.live("group retry and onError from a YAML file: a flaky branch re-runs the whole group; a failed branch is collected", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = path.join(dir, "groups.yaml")
      fs.writeFileSync(
        file,
        [
          "pipeline:",
          "  name: groups",
          "  tasks:",
          "    - use: fanout",
          "      name: retried",
          "      retry: { maxAttempts: 3, base: 10 millis }",
          "      tasks:",
          "        - { use: flaky, args: [2], name: shaky }   # fails attempts 1 and 2",
          "        - { use: echo, name: steady }",
          "    - use: fanout",
          "      name: collected",
          "      onError: collect",
          "      tasks:",
          "        - { use: boom, args: [judge down], options: { errorClass: upstream }, name: down }",
          "        - { use: echo, name: up }",
          "source: { range: { n: 3 } }",
          ""
        ].join("\n")
      )
      const store = path.join(dir, "groups.db")
      const r = yield* assay(["run", "-c", file, "--store", store])
      assert.strictEqual(r.code, 0, r.stderr)
      const results = yield* exported(store, "results")
      assert.deepStrictEqual(
        results.map((row) => row["payload"]).sort((a, b) => a.up.steady - b.up.steady),
        [0, 1, 2].map((i) => ({
          down: { error: { class: "upstream", message: "judge down", type: "RetryableError" } },
          up: { shaky: i, steady: i }
        }))
      )
      const tasks = yield* exported(store, "tasks")
      const used = (name: string) => tasks.filter((t) => t["taskName"] === name).map((t) => t["attemptsUsed"])
      assert.deepStrictEqual(used("retried"), [3, 3, 3])
      assert.deepStrictEqual(used("collected"), [1, 1, 1])
    }))

  it.live("a broken fanout entry exits 2 with the full field paths, before any store exists", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = path.join(dir, "bad.yaml")
      fs.writeFileSync(
        file,
        [
          "pipeline:",
          "  name: bad",
          "  tasks:",
          "    - use: fanout",
          "      tasks:",
          "        - { use: echo, retyr: { maxAttempts: 2 } }",
          "        - { use: ecoh, name: b }",
          "    - use: echo",
          "      tasks: [{ use: echo }]",
          "    - use: fanout",
          "      tasks: []",
          "source: { range: { n: 1 } }",
          ""
        ].join("\n")
      )
      const store = path.join(dir, "never.db")
      const r = yield* assay(["run", "-c", file, "--store", store])
      assert.strictEqual(r.code, 2, r.stderr)
      assert.include(r.stderr, "pipeline.tasks[0].tasks[0].retyr: unknown key \"retyr\" (did you mean retry?)")
      assert.include(r.stderr, "pipeline.tasks[0].tasks[1].use: unknown task \"ecoh\" (did you mean echo?)")
      assert.include(r.stderr, "pipeline.tasks[1].tasks: only a \"use: fanout\" entry takes nested tasks")
      assert.include(r.stderr, "pipeline.tasks[2].tasks: is empty: a fanout needs at least one task")
      assert.isFalse(fs.existsSync(store))
    }))
})
