/**
 * examples/suites: two prompt styles of the spam evaluation as one suite sharing the pool "llm".
 * The suite file is checked in process (members, bindings, digests, each member still an
 * experiment that loads alone); then spawned `bin/assay` processes validate it, run it against
 * an in-process mock LLM server, resume one member, and export the results per member.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { writeSample } from "../../examples/spam-eval/sample.js"
import { subjectOnly } from "../../examples/suites/styles.js"
import * as Experiment from "../../src/config/Experiment.js"
import * as SuiteConfig from "../../src/config/Suite.js"
import * as MockLlm from "../../src/services/MockLlm.js"

const root = fileURLToPath(new URL("../../", import.meta.url))
const bin = NodePath.join(root, "bin/assay")
const suiteFile = NodePath.join(root, "examples/suites/suite.yaml")

/** Runs `bin/assay ...args`; a process still running after `limitMs` is killed (code null, said in stderr). */
const assay = (args: ReadonlyArray<string>, env: Record<string, string>, limitMs = 90_000) =>
  Effect.promise(() =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(bin, [...args], { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      const timer = setTimeout(() => {
        stderr += `\n[test] assay ${args.join(" ")} still running after ${limitMs} ms: killed`
        child.kill("SIGKILL")
      }, limitMs)
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
      child.on("close", (code) => {
        clearTimeout(timer)
        resolve({ code, stdout, stderr })
      })
    })
  )

/** A sample of `size` emails in a new temporary directory; the environment the example reads. */
const setup = (size: number) =>
  Effect.gen(function*() {
    const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-suites-"))
    const sample = NodePath.join(dir, "sample.jsonl")
    yield* writeSample({ size, seed: 7, out: sample })
    const env = (url: (name: string) => string): Record<string, string> => ({
      SPAM_EVAL_SAMPLE_FILE: sample,
      SPAM_EVAL_FAST_URL: url("fast"),
      SPAM_EVAL_STEADY_URL: url("steady"),
      SPAM_EVAL_LIMITED_URL: url("limited"),
      SPAM_EVAL_API_KEY: "test-key"
    })
    return { dir, sample, env }
  })

const readJsonl = (file: string): Array<Record<string, unknown>> =>
  fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as Record<string, unknown>)

describe("examples/suites (in process)", () => {
  it.effect("two members bound to the one shared pool llm; each member file still loads alone", () =>
    Effect.gen(function*() {
      const { dir, env } = yield* setup(6)
      const vars = env((n) => `http://127.0.0.1:9/e/${n}/v1`)
      const suite = yield* SuiteConfig.load(suiteFile, { env: vars })
      assert.strictEqual(suite.id, "spam-prompts")
      assert.deepStrictEqual(suite.output, { root: NodePath.join(root, "runs/spam-prompts"), layout: "byExperiment" })
      assert.deepStrictEqual(suite.pools.map((p) => p.name), ["llm"], "no private pool: both members are bound")
      assert.deepStrictEqual(suite.members.map((m) => [m.id, m.poolAliases]), [["full", { llm: "llm" }], ["subject", { llm: "llm" }]])
      assert.deepStrictEqual(suite.members.map((m) => m.ignoredRunFields), [["store", "concurrency"], ["store", "concurrency"]])
      const [full, subject] = suite.members
      assert.notStrictEqual(full!.definitionDigest, subject!.definitionDigest, "the prompt task differs")
      assert.notStrictEqual(full!.experiment.template.specDigest, subject!.experiment.template.specDigest)
      // the same source for both: the same local keys, different pipeline ids (member prefix)
      assert.deepStrictEqual(full!.experiment.source, subject!.experiment.source)
      // the member files run alone too (their own store and pool)
      for (const file of ["full.yaml", "subject.yaml"]) {
        const e = yield* Experiment.load(NodePath.join(root, "examples/suites", file), { env: vars })
        assert.deepStrictEqual(e.pools.map((p) => p.name), ["llm"])
        assert.match(String(e.run.store), /runs\/spam-prompts-(full|subject)\/state\.db$/)
      }
      // rotating the key variable or moving the endpoints changes no member's identity
      const moved = yield* SuiteConfig.load(suiteFile, { env: { ...env((n) => `http://10.0.0.1:1/${n}`), SPAM_EVAL_API_KEY: "rotated" } })
      assert.deepStrictEqual(moved.members.map((m) => m.definitionDigest), suite.members.map((m) => m.definitionDigest))
      fs.rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeContext.layer)))

  it("the subject style sends the subject line and nothing of the body or sender", () => {
    const prompt = subjectOnly({ subject: "WIN CASH NOW", from: "x@example.com", text: "body text" })
    assert.include(prompt, "Subject: WIN CASH NOW")
    assert.notInclude(prompt, "x@example.com")
    assert.notInclude(prompt, "body text")
  })
})

describe("examples/suites (bin/assay)", () => {
  it.live("assay schema --suite prints the suite file's JSON Schema (docs/suite.schema.json); assay schema the experiment's", () =>
    Effect.gen(function*() {
      const suite = yield* assay(["schema", "--suite"], {})
      assert.strictEqual(suite.code, 0, suite.stderr)
      assert.deepStrictEqual(JSON.parse(suite.stdout), JSON.parse(fs.readFileSync(NodePath.join(root, "docs/suite.schema.json"), "utf8")))
      const experiment = yield* assay(["schema"], {})
      assert.deepStrictEqual(JSON.parse(experiment.stdout), JSON.parse(fs.readFileSync(NodePath.join(root, "docs/experiment.schema.json"), "utf8")))
    }), 60_000)

  it.live("validate, run against the mock server, resume one member, export per member", () =>
    Effect.scoped(Effect.gen(function*() {
      const size = 12
      const { dir, env } = yield* setup(size)
      const profile = yield* MockLlm.decodeProfile({
        seed: 5,
        endpoints: ["fast", "steady", "limited"].map((name) => ({ name, latency: { medianMs: 2 }, answers: { invalidRate: 0 } }))
      })
      const mock = yield* MockLlm.serve({ profile })
      const vars = env((name) => mock.endpoints.find((e) => e.name === name)!.baseUrl)
      const out = NodePath.join(dir, "out")

      const validate = yield* assay(["validate", "-c", suiteFile], vars)
      assert.strictEqual(validate.code, 0, validate.stderr)
      assert.include(validate.stdout, "shared pool llm: algorithm \"wait\", bound by full, subject")
      assert.include(validate.stdout, "  run fields ignored (the suite's apply): store (")
      assert.notInclude(validate.stdout, "test-key")

      const run = yield* assay(["run", "-c", suiteFile, "--output-root", out], vars)
      assert.strictEqual(run.code, 0, run.stderr)
      const manifest = JSON.parse(fs.readFileSync(NodePath.join(out, "manifest.json"), "utf8"))
      assert.strictEqual(manifest.suiteId, "spam-prompts")
      assert.strictEqual(manifest.layout, "byExperiment")
      assert.notInclude(JSON.stringify(manifest), "test-key")
      for (const id of ["full", "subject"]) assert.isTrue(fs.existsSync(NodePath.join(out, "experiments", id, "state.db")), id)
      // both members asked the one shared pool: every email once per member
      const asked = (yield* mock.log).filter((e) => e.status === 200)
      assert.strictEqual(asked.length, 2 * size)

      // resuming one member leaves the other's database as it was, byte for byte
      const fullFiles = () =>
        fs.readdirSync(NodePath.join(out, "experiments", "full")).filter((f) => f === "state.db" || f === "state.db-wal").sort()
          .map((f) => [f, fs.readFileSync(NodePath.join(out, "experiments", "full", f)).toString("base64")])
      const before = fullFiles()
      const resumed = yield* assay(["resume", "-c", suiteFile, "--output-root", out, "--experiment", "subject"], vars)
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      assert.strictEqual((yield* mock.log).filter((e) => e.status === 200).length, 2 * size, "nothing asked again")
      assert.deepStrictEqual(fullFiles(), before, "the unselected member's database is untouched")

      const split = NodePath.join(dir, "split")
      const exported = yield* assay(["export", out, split, "--rows", "results", "--by-experiment"], vars)
      assert.strictEqual(exported.code, 0, exported.stderr)
      const rows = { full: readJsonl(NodePath.join(split, "full", "results.jsonl")), subject: readJsonl(NodePath.join(split, "subject", "results.jsonl")) }
      for (const [id, rs] of Object.entries(rows)) {
        assert.strictEqual(rs.length, size, id)
        for (const r of rs) {
          assert.strictEqual(r["suiteId"], "spam-prompts")
          assert.strictEqual(r["experimentId"], id)
          assert.strictEqual(r["state"], "succeeded")
          assert.strictEqual(r["repeat"], 0)
        }
      }
      // the same emails (local keys) in both members, under different pipeline ids
      const keys = (rs: ReadonlyArray<Record<string, unknown>>) => rs.map((r) => r["localKey"]).sort()
      assert.deepStrictEqual(keys(rows.full), keys(rows.subject))
      assert.strictEqual(new Set([...rows.full, ...rows.subject].map((r) => r["pipelineId"])).size, 2 * size)
      fs.rmSync(dir, { recursive: true, force: true })
    })).pipe(Effect.provide(NodeContext.layer)), 180_000)
})
