import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { buildStore, tmpDir } from "../services/ExportFixture.js"

const bin = nodePath.resolve(__dirname, "../../bin/assay")
/** Runs the real CLI as a child process (async, so the test worker stays responsive). */
const run = (args: ReadonlyArray<string>) =>
  Effect.async<{ code: number | null; out: string; err: string }>((resume) => {
    execFile(bin, args, { encoding: "utf8", timeout: 60_000 }, (error, stdout, stderr) =>
      resume(Effect.succeed({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, out: stdout, err: stderr })))
  })
const dir = tmpDir()
const a = nodePath.join(dir, "a.db")
const b = nodePath.join(dir, "b.db")
const built = Effect.runPromise(Effect.all([buildStore(a, [{ n: 6, failEvery: 3 }]), buildStore(b, [{ n: 8, runId: "r2" }])]))

describe("assay report / export / merge", { timeout: 120_000 }, () => {
  it.live("report: text and --json, several stores merged, exit 0; store untouched", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => built)
      const bytes = fs.readFileSync(a)
      const text = (yield* run(["report", a, "--errors", "1"]))
      assert.strictEqual(text.code, 0, text.err)
      assert.match(text.out, /Pipelines: 6 \(.*failed 2/)
      const json = (yield* run(["report", "--json", "--run-id", "all", a, b]))
      assert.strictEqual(json.code, 0, json.err)
      const data = JSON.parse(json.out)
      assert.strictEqual(data.pipelines, 8)
      assert.strictEqual(data.duplicates, 6)
      assert.isTrue(bytes.equals(fs.readFileSync(a)))
    }))

  it.live("export: writes the file, prints the count; exit 2 on bad kind, negative limit, unknown run", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => built)
      const out = nodePath.join(dir, "res.csv")
      const ok = (yield* run(["export", a, b, out, "--rows", "results", "--format", "csv", "--limit", "5"]))
      assert.strictEqual(ok.code, 0, ok.err)
      assert.match(ok.out, /exported 10 results/)
      assert.strictEqual(fs.readFileSync(out, "utf8").trim().split("\n").length, 11)
      assert.strictEqual((yield* run(["export", a, out, "--rows", "nope"])).code, 2)
      const neg = (yield* run(["export", a, out, "--limit", "-1"]))
      assert.strictEqual(neg.code, 2)
      assert.match(neg.err, /limit/)
      assert.strictEqual((yield* run(["export", a])).code, 2)
      // The format follows OUT's suffix; a contradiction or an unknown suffix is refused.
      const bySuffix = nodePath.join(dir, "by-suffix.csv")
      assert.strictEqual((yield* run(["export", a, bySuffix, "--rows", "results"])).code, 0)
      assert.match(fs.readFileSync(bySuffix, "utf8").split("\n")[0]!, /^pipelineId,key,name,/)
      const clash = yield* run(["export", a, nodePath.join(dir, "clash.csv"), "--format", "jsonl"])
      assert.strictEqual(clash.code, 2)
      assert.match(clash.err, /does not match/)
      assert.strictEqual((yield* run(["export", a, nodePath.join(dir, "out.txt")])).code, 2)
      assert.isFalse(fs.existsSync(nodePath.join(dir, "out.txt")))
      assert.strictEqual((yield* run(["report", a, "--run-id", "missing"])).code, 2)
    }))

  it.live("a missing store file exits 1 with a clear message and creates nothing", () =>
    Effect.gen(function*() {
      const missing = nodePath.join(dir, "missing.db")
      const r = (yield* run(["report", missing]))
      assert.strictEqual(r.code, 1)
      assert.match(r.err, /no assay store at/)
      assert.strictEqual((yield* run(["export", missing, nodePath.join(dir, "x.jsonl")])).code, 1)
      assert.isFalse(fs.existsSync(missing))
      assert.isFalse(fs.existsSync(nodePath.join(dir, "x.jsonl")))
    }))

  it.live("merge: summary on stdout, deduplicated file, idempotent on the same store twice", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => built)
      const out = nodePath.join(dir, "merged.jsonl")
      const r = (yield* run(["merge", a, b, a, "-o", out]))
      assert.strictEqual(r.code, 0, r.err)
      assert.match(r.out, /merged 3 store\(s\): 8 pipeline\(s\)/)
      const ids = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l).pipelineId)
      assert.strictEqual(ids.length, 8)
      assert.strictEqual(new Set(ids).size, 8)
    }))
})
