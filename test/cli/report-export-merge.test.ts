import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { execFile, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { writeBudgetEndStore, writeControlStore } from "../services/ControlFixture.js"
import { buildPayloadStore, buildStore, tmpDir } from "../services/ExportFixture.js"

const bin = nodePath.resolve(__dirname, "../../bin/assay")
/** Runs the real CLI as a child process (async, so the test worker stays responsive). */
const run = (args: ReadonlyArray<string>, options: { readonly cwd?: string; readonly env?: NodeJS.ProcessEnv } = {}) =>
  Effect.async<{ code: number | null; out: string; err: string }>((resume) => {
    execFile(bin, args, { encoding: "utf8", timeout: 120_000, maxBuffer: 64 << 20, ...options }, (error, stdout, stderr) =>
      resume(Effect.succeed({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, out: stdout, err: stderr })))
  })
const dir = tmpDir()
const a = nodePath.join(dir, "a.db")
const b = nodePath.join(dir, "b.db")
/** The two store files, built once for this file's tests (a `layer()` fixture). */
const Built = Layer.effectDiscard(Effect.all([buildStore(a, [{ n: 6, failEvery: 3 }]), buildStore(b, [{ n: 8, runId: "r2" }])]))

layer(Built, { excludeTestServices: true, timeout: "120 seconds" })((it) => {
  describe("assay report / export / merge", { timeout: 120_000 }, () => {
    it.effect("report: text and --json, several stores merged, exit 0; store untouched", () =>
      Effect.gen(function*() {
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

    it.effect("export: writes the file, prints the count; exit 2 on bad kind, negative limit, unknown run", () =>
      Effect.gen(function*() {
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

    it.effect("--run-id latest: the most recently started run of each store, for report, export and watch alike (tester18d F8)", () =>
      Effect.gen(function*() {
        const two = nodePath.join(dir, "two-runs.db")
        yield* buildStore(two, [{ n: 3, runId: "old", startedAt: 1000 }, { n: 5, runId: "new", startedAt: 9000 }])
        // export: only the latest run's rows; over several stores, each store's latest
        const out = nodePath.join(dir, "latest.jsonl")
        const ex = yield* run(["export", two, out, "--rows", "attempts", "--run-id", "latest"])
        assert.strictEqual(ex.code, 0, ex.err)
        const rows = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { runId: string })
        assert.isAbove(rows.length, 0)
        assert.deepStrictEqual([...new Set(rows.map((r) => r.runId))], ["new"])
        const both = nodePath.join(dir, "latest-both.jsonl")
        assert.strictEqual((yield* run(["export", two, b, both, "--rows", "attempts", "--run-id", "latest"])).code, 0)
        const runs = new Set(fs.readFileSync(both, "utf8").trim().split("\n").map((l) => (JSON.parse(l) as { runId: string }).runId))
        assert.deepStrictEqual([...runs].sort(), ["new", "r2"])
        // report: the same run as without --run-id
        const rep = yield* run(["report", "--json", two, "--run-id", "latest"])
        assert.strictEqual(rep.code, 0, rep.err)
        assert.deepStrictEqual((JSON.parse(rep.out) as { runs: ReadonlyArray<{ runId: string }> }).runs.map((r) => r.runId), ["new"])
        // watch ends at once on a finished run, showing it
        const w = yield* run(["watch", two, "--run-id", "latest"])
        assert.strictEqual(w.code, 0, w.err)
        assert.include(w.out, "new")
      }))

    // exit 2, `store PATH: no such file`, as every missing path (ux38, newuser37 F10; exit 1 before)
    it.effect("a missing store file exits 2 with a clear message and creates nothing", () =>
      Effect.gen(function*() {
        const missing = nodePath.join(dir, "missing.db")
        const r = (yield* run(["report", missing]))
        assert.strictEqual(r.code, 2)
        assert.include(r.err, `error: store ${missing}: no such file`)
        assert.strictEqual((yield* run(["export", missing, nodePath.join(dir, "x.jsonl")])).code, 2)
        assert.isFalse(fs.existsSync(missing))
        assert.isFalse(fs.existsSync(nodePath.join(dir, "x.jsonl")))
      }))

    it.effect("merge: summary on stdout, deduplicated file, idempotent on the same store twice", () =>
      Effect.gen(function*() {
        const out = nodePath.join(dir, "merged.jsonl")
        const r = (yield* run(["merge", a, b, a, "-o", out]))
        assert.strictEqual(r.code, 0, r.err)
        assert.match(r.out, /merged 3 store\(s\): 8 pipeline\(s\)/)
        const ids = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l).pipelineId)
        assert.strictEqual(ids.length, 8)
        assert.strictEqual(new Set(ids).size, 8)
      }))
  })

  describe("assay export: where the rows go (OUT) and how they look", { timeout: 180_000 }, () => {
    it.effect("`-` streams to standard output (summary on standard error) and creates no file named -", () =>
      Effect.gen(function*() {
        const cwd = tmpDir()
        const r = yield* run(["export", a, "-", "--rows", "results", "--format", "jsonl"], { cwd })
        assert.strictEqual(r.code, 0, r.err)
        const rows = r.out.trim().split("\n").map((l) => JSON.parse(l))
        assert.strictEqual(rows.length, 6)
        assert.match(r.err, /exported 6 results row\(s\) to standard output/)
        assert.deepStrictEqual(fs.readdirSync(cwd), [])
        const noFormat = yield* run(["export", a, "-"], { cwd })
        assert.strictEqual(noFormat.code, 2)
        assert.match(noFormat.err, /pass --format/)
        // /dev/stdout is opened and streamed (appended), never replaced
        const dev = yield* run(["export", a, "/dev/stdout", "--rows", "results", "--format", "jsonl"], { cwd })
        assert.strictEqual(dev.code, 0, dev.err)
        assert.strictEqual(dev.out.split("\n").filter((l) => l.startsWith("{")).length, 6)
        assert.isTrue(fs.lstatSync("/dev/stdout").isSymbolicLink())
      }))

    it.effect("a symbolic link OUT: the target is written atomically, the link stays a link", () =>
      Effect.gen(function*() {
        const d = tmpDir()
        fs.mkdirSync(nodePath.join(d, "data"))
        fs.writeFileSync(nodePath.join(d, "data", "res.jsonl"), "old\n")
        fs.symlinkSync("data/res.jsonl", nodePath.join(d, "latest.jsonl"))
        const r = yield* run(["export", a, nodePath.join(d, "latest.jsonl"), "--rows", "results"])
        assert.strictEqual(r.code, 0, r.err)
        assert.isTrue(fs.lstatSync(nodePath.join(d, "latest.jsonl")).isSymbolicLink())
        assert.strictEqual(fs.readFileSync(nodePath.join(d, "data", "res.jsonl"), "utf8").trim().split("\n").length, 6)
        assert.deepStrictEqual(fs.readdirSync(nodePath.join(d, "data")), ["res.jsonl"])
        // a link to an input store is still refused
        fs.symlinkSync(a, nodePath.join(d, "store-link.jsonl"))
        assert.strictEqual((yield* run(["export", a, nodePath.join(d, "store-link.jsonl"), "--rows", "results"])).code, 2)
      }))

    it.effect("a FIFO OUT is streamed to its reader and stays a FIFO", () =>
      Effect.gen(function*() {
        const d = tmpDir()
        const fifo = nodePath.join(d, "rows.csv")
        execFileSync("mkfifo", [fifo])
        const reader = spawn("cat", [fifo])
        let got = ""
        reader.stdout.on("data", (x) => (got += String(x)))
        const closed = new Promise<void>((res) => reader.on("close", () => res()))
        const r = yield* run(["export", a, fifo, "--rows", "results"])
        yield* Effect.promise(() => closed)
        assert.strictEqual(r.code, 0, r.err)
        assert.strictEqual(got.trim().split("\n").length, 7)
        assert.isTrue(fs.lstatSync(fifo).isFIFO())
      }))

    it.effect("--time iso, --flatten, --csv-safe: spreadsheet-friendly CSV; bad combinations exit 2", () =>
      Effect.gen(function*() {
        const d = tmpDir()
        const out = nodePath.join(d, "res.csv")
        const r = yield* run(["export", a, out, "--rows", "results", "--time", "iso", "--flatten", "--csv-safe"])
        assert.strictEqual(r.code, 0, r.err)
        const [header, first] = fs.readFileSync(out, "utf8").split("\n")
        const columns = header!.split(",")
        assert.includeMembers(columns, ["payload.i", "payload.seq", "payload.answer", "startedAt", "endedAt"])
        const cells = first!.split(",")
        assert.match(cells[columns.indexOf("startedAt")]!, /^1970-01-01T00:00:01\.000Z$/)
        assert.strictEqual(cells[columns.indexOf("payload.i")], "0")
        // --flatten-depth implies --flatten; 0 is refused
        const depth = yield* run(["export", a, nodePath.join(d, "d1.jsonl"), "--rows", "pipelines", "--flatten-depth", "1", "--limit", "1"])
        assert.strictEqual(depth.code, 0, depth.err)
        assert.property(JSON.parse(fs.readFileSync(nodePath.join(d, "d1.jsonl"), "utf8")), "tags")
        assert.strictEqual((yield* run(["export", a, nodePath.join(d, "d0.jsonl"), "--flatten-depth", "0"])).code, 2)
        const safe = yield* run(["export", a, nodePath.join(d, "x.jsonl"), "--csv-safe"])
        assert.strictEqual(safe.code, 2)
        assert.match(safe.err, /--csv-safe applies to csv/)
        assert.isFalse(fs.existsSync(nodePath.join(d, "x.jsonl")))
        assert.strictEqual((yield* run(["export", a, out, "--time", "local"])).code, 2)
      }))
  })

  describe("assay export of large payloads", { timeout: 300_000 }, () => {
    const MB = 1024 * 1024
    const big = nodePath.join(dir, "big.db")
    // three 50 MB outputs and one 50 MB seed: 200 MB of payloads, four of them in one page
    const BigBuilt = Layer.effectDiscard(buildPayloadStore(big, [
      { sizes: [1024, 50 * MB] },
      { sizes: [50 * MB, 50 * MB] },
      { sizes: [1024, 50 * MB] }
    ]))
    const heap256 = { env: { ...process.env, NODE_OPTIONS: "--max-old-space-size=256" } }

    // the 200 MB store is built once, for these tests only
    it.layer(BigBuilt, { timeout: "300 seconds" })((it) => {
      it.effect("50 MB payloads export under --max-old-space-size=256 (pipelines jsonl, results csv, artifacts json)", () =>
        Effect.gen(function*() {
          const d = tmpDir()
          const jsonl = nodePath.join(d, "p.jsonl")
          const r = yield* run(["export", big, jsonl, "--rows", "pipelines"], heap256)
          assert.strictEqual(r.code, 0, r.err.slice(0, 2000))
          const lines = fs.readFileSync(jsonl, "utf8").trim().split("\n")
          assert.strictEqual(lines.length, 3)
          assert.deepStrictEqual(JSON.parse(lines[1]!).artifacts.map((x: any) => x.payload.text.length), [50 * MB, 50 * MB])
          const csv = yield* run(["export", big, nodePath.join(d, "r.csv"), "--rows", "results", "--flatten"], heap256)
          assert.strictEqual(csv.code, 0, csv.err.slice(0, 2000))
          assert.isAbove(fs.statSync(nodePath.join(d, "r.csv")).size, 150 * MB)
          const json = yield* run(["export", big, nodePath.join(d, "a.json"), "--rows", "artifacts"], heap256)
          assert.strictEqual(json.code, 0, json.err.slice(0, 2000))
          assert.deepStrictEqual(fs.readdirSync(d).sort(), ["a.json", "p.jsonl", "r.csv"])
        }))

      it.effect("Ctrl-C (SIGINT) during an export: exit 130, the temp file removed, an old OUT kept", () =>
        Effect.gen(function*() {
          const d = tmpDir()
          const out = nodePath.join(d, "p.jsonl")
          fs.writeFileSync(out, "old\n")
          const child = spawn(bin, ["export", big, out, "--rows", "pipelines"], { stdio: "ignore" })
          const exited = new Promise<number | null>((res) => child.on("exit", (code) => res(code)))
          const deadline = Date.now() + 60_000
          while (!fs.readdirSync(d).some((n) => n.includes(".assay-tmp-")) && Date.now() < deadline) {
            yield* Effect.sleep("20 millis")
          }
          child.kill("SIGINT")
          assert.strictEqual(yield* Effect.promise(() => exited), 130)
          assert.deepStrictEqual(fs.readdirSync(d), ["p.jsonl"])
          assert.strictEqual(fs.readFileSync(out, "utf8"), "old\n")
        }))

      it.effect("a killed export (SIGKILL) leaves its temp file; the next export to the same path removes it", () =>
        Effect.gen(function*() {
          const d = tmpDir()
          const out = nodePath.join(d, "p.jsonl")
          const child = spawn(bin, ["export", big, out, "--rows", "pipelines"], { stdio: "ignore" })
          const exited = new Promise<void>((res) => child.on("exit", () => res()))
          // wait for the temp file to appear, then kill the export without warning
          const deadline = Date.now() + 60_000
          while (!fs.readdirSync(d).some((n) => n.includes(".assay-tmp-")) && Date.now() < deadline) {
            yield* Effect.sleep("20 millis")
          }
          child.kill("SIGKILL")
          yield* Effect.promise(() => exited)
          const stale = fs.readdirSync(d)
          assert.deepStrictEqual(stale, [`.p.jsonl.assay-tmp-${child.pid}`])
          const r = yield* run(["export", big, out, "--rows", "results"])
          assert.strictEqual(r.code, 0, r.err)
          assert.deepStrictEqual(fs.readdirSync(d), ["p.jsonl"])
          assert.strictEqual(fs.readFileSync(out, "utf8").trim().split("\n").length, 3)
        }))
    })
  })
})

describe("assay report / export / merge on a store with control flow", { timeout: 120_000 }, () => {
  it.live("report shows Handoffs, export --rows handoffs writes the ledger, merge counts handoffs once per pipeline", () =>
    Effect.gen(function*() {
      const file = nodePath.join(dir, "control.db")
      yield* Effect.orDie(writeControlStore(file))
      const text = yield* run(["report", file])
      assert.strictEqual(text.code, 0, text.err)
      assert.match(text.out, /Transitions: 2 \(2 against maxHandoffs, 0 ends\)/)
      const json = yield* run(["report", "--json", file])
      assert.strictEqual(JSON.parse(json.out).handoffsTotal, 2)
      const out = nodePath.join(dir, "handoffs.jsonl")
      const exported = yield* run(["export", file, out, "--rows", "handoffs"])
      assert.strictEqual(exported.code, 0, exported.err)
      const rows = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.deepStrictEqual(rows.map((r) => r.operation), ["rewind", "rewind"])
      const merged = yield* run(["merge", file, file, "-o", nodePath.join(dir, "merged.jsonl")])
      assert.strictEqual(merged.code, 0, merged.err)
      assert.match(merged.out, /transitions 2 \(2 against maxHandoffs, 0 ends\), duplicates folded 5/)
    }), 120_000)

  it.live("run --shards: the merged line counts the shards' transitions as merge does (tester13h finding 7)", () =>
    Effect.gen(function*() {
      // each shard store already holds control pipelines (2 rewinds; 4 rewinds and 2 ends); the
      // shards then run a plain config (builtin tasks: no user code to load) beside them
      const base = nodePath.join(dir, "sh.db")
      yield* Effect.orDie(writeControlStore(nodePath.join(dir, "sh.shard0of2.db")))
      yield* Effect.orDie(writeBudgetEndStore(nodePath.join(dir, "sh.shard1of2.db")))
      const config = nodePath.join(dir, "sh.json")
      fs.writeFileSync(config, JSON.stringify({
        pipeline: { name: "plain", tasks: [{ use: "delay", args: ["1 millis"] }] },
        source: { range: { n: 2 } }
      }))
      const text = yield* run(["run", "-c", config, "--store", base, "--shards", "2"])
      assert.strictEqual(text.code, 0, text.err)
      assert.match(text.out, /^merged: pipelines 9 \(succeeded 9\), tasks 27, attempts 27, transitions 8 \(6 against maxHandoffs, 2 ends\)$/m)
      const merged = yield* run(["merge", base.replace(".db", ".shard0of2.db"), base.replace(".db", ".shard1of2.db"), "-o", nodePath.join(dir, "sh.jsonl")])
      assert.strictEqual(merged.code, 0, merged.err)
      assert.include(merged.out, "tasks 27, attempts 27, transitions 8 (6 against maxHandoffs, 2 ends),")
      const json = yield* run(["run", "-c", config, "--store", base, "--shards", "2", "--summary", "json"])
      assert.strictEqual(json.code, 0, json.err)
      const again = JSON.parse(json.out).merged
      assert.deepStrictEqual([again.handoffsTotal, again.handoffsBudgeted], [8, 6])
    }), 120_000)
})
