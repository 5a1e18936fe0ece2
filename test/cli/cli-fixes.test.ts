/**
 * CLI problems a new user found, each checked on spawned `bin/assay` processes in a temp dir:
 * export / merge never overwrite a store; export's `--run-id` (unknown → exit 2, `all` = every
 * run); a reused or empty `--run-id` is refused before anything runs; a run stopped by
 * `--stop-after-failures` / `--stop-after` exits by its outcome (not 130) and stays resumable;
 * numeric flag errors name the flag; `--jobs` needs `--shards`; Ctrl-C on a `--shards` parent
 * stops its children gracefully and prints the merged partial report.
 *
 * Each spawn costs ~2 s of start-up: the tests share spawns where the assertions allow.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

import { assay, count, query, start, waitFor, write } from "../support/cli.js"

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "assay-cli-fixes-"))

const delayExperiment = (n: number, ms: number, concurrency: number) =>
  JSON.stringify({
    run: { concurrency },
    pipeline: { name: "sleepy", tasks: [{ use: "delay", args: [`${ms} millis`] }] },
    source: { range: { n } }
  })

const failingExperiment = (n: number) =>
  JSON.stringify({
    run: { concurrency: 1, maxAdmitted: 1 },
    pipeline: {
      name: "failing",
      tasks: [{ use: "shellRun", args: [["node", "-e", "process.exit(3)"]], retry: { maxAttempts: 1 } }]
    },
    source: { range: { n } }
  })

describe("export / merge / run ids", () => {
  it.live("export and merge refuse to overwrite a store; export --run-id unknown → 2, all = every run; a reused or empty --run-id → 2", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "e.json", delayExperiment(4, 1, 2))
      const store = path.join(dir, "a.db")
      const r1 = yield* assay(["run", "-c", file, "--store", store, "--run-id", "myrun1", "--quiet"])
      assert.strictEqual(r1.code, 0, r1.stderr)

      // A reused run id is refused up front, naming the run, the store and its start.
      const again = yield* assay(["run", "-c", file, "--store", store, "--run-id", "myrun1", "--quiet"])
      assert.strictEqual(again.code, 2, again.stderr)
      assert.include(again.stderr, `run id myrun1 already exists in ${store} (started `)
      assert.include(again.stderr, "choose another or omit --run-id")
      assert.notInclude(again.stderr, "SQLITE_CONSTRAINT")
      assert.strictEqual(count(store, "SELECT count(*) FROM runs"), 1)
      const empty = yield* assay(["run", "-c", file, "--store", store, "--run-id", "", "--quiet"])
      assert.strictEqual(empty.code, 2, empty.stderr)
      assert.include(empty.stderr, "--run-id")
      assert.strictEqual(count(store, "SELECT count(*) FROM runs"), 1)

      // Another existing store given as OUT: refused, untouched.
      const other = path.join(dir, "b.db")
      fs.copyFileSync(store, other)
      const before = fs.readFileSync(other)
      const e1 = yield* assay(["export", store, other, "--rows", "results", "--format", "csv"])
      assert.strictEqual(e1.code, 2, e1.stderr)
      assert.include(e1.stderr, "SQLite database")
      assert.isTrue(fs.readFileSync(other).equals(before))
      // merge -o its own input (written differently): refused, untouched.
      const m1 = yield* assay(["merge", "a.db", "-o", "./a.db", "--format", "json"], { cwd: dir })
      assert.strictEqual(m1.code, 2, m1.stderr)
      assert.include(m1.stderr, "input store")
      assert.isTrue(fs.readFileSync(store).subarray(0, 15).equals(Buffer.from("SQLite format 3")))
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines"), 4)

      // An unknown run id: exit 2 naming it, nothing written.
      const out = path.join(dir, "out.jsonl")
      const e2 = yield* assay(["export", store, out, "--rows", "results", "--run-id", "nope"])
      assert.strictEqual(e2.code, 2, e2.stderr)
      assert.include(e2.stderr, "nope")
      assert.isFalse(fs.existsSync(out))
      // `all`: every run's rows.
      const e3 = yield* assay(["export", store, out, "--rows", "results", "--run-id", "all"])
      assert.strictEqual(e3.code, 0, e3.stderr)
      assert.strictEqual(fs.readFileSync(out, "utf8").trim().split("\n").length, 4)
    }))
})

describe("deliberate stops", () => {
  it.live("--stop-after-failures exits 1 (not 130), says why and that resume continues; --stop-after with no failure exits 0 and resume finishes", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const failing = write(dir, "f.json", failingExperiment(8))
      const fstore = path.join(dir, "f.db")
      const f = yield* assay(["run", "-c", failing, "--store", fstore, "--stop-after-failures", "2", "--quiet"])
      assert.strictEqual(f.code, 1, f.stderr)
      assert.include(f.stderr, "stopped early")
      assert.include(f.stderr, "stop-after-failures")
      assert.include(f.stderr, "assay resume")
      const run = query(fstore, "SELECT status, stop_reason FROM runs")[0]!
      assert.deepStrictEqual([run["status"], run["stop_reason"]], ["interrupted", "stop_after_failures"])
      assert.isAtLeast(count(fstore, "SELECT count(*) FROM pipelines WHERE state = 'failed'"), 2)
      assert.isBelow(count(fstore, "SELECT count(*) FROM pipelines"), 8, "not every pipeline was admitted")

      const slow = write(dir, "s.json", delayExperiment(30, 100, 1))
      const sstore = path.join(dir, "s.db")
      const s = yield* assay(["run", "-c", slow, "--store", sstore, "--stop-after", "300 millis", "--quiet"])
      assert.strictEqual(s.code, 0, s.stderr)
      assert.include(s.stderr, "stopped early")
      const srun = query(sstore, "SELECT status, stop_reason FROM runs")[0]!
      assert.deepStrictEqual([srun["status"], srun["stop_reason"]], ["interrupted", "stop_after"])
      const done1 = count(sstore, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'")
      assert.isBelow(done1, 30)
      const r = yield* assay(["resume", "-c", slow, "--store", sstore, "--quiet"])
      assert.strictEqual(r.code, 0, r.stderr)
      assert.strictEqual(count(sstore, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 30)
    }))
})

describe("flag errors", () => {
  it.live("numeric flags out of range name the flag (exit 2); --jobs without --shards is refused", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "e.json", delayExperiment(2, 1, 1))
      const store = path.join(dir, "n.db")
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["--limit", "-1"], "error: --limit must be an integer >= 0 (got -1)"],
        [["--concurrency", "0"], "error: --concurrency must be an integer >= 1 (got 0)"],
        [["--shards", "0"], "error: --shards must be an integer >= 1 (got 0)"],
        [["--stop-after-failures", "0"], "error: --stop-after-failures must be an integer >= 1 (got 0)"],
        [["--jobs", "2"], "--jobs only applies with --shards"]
      ]
      for (const [flags, message] of cases) {
        const r = yield* assay(["run", "-c", file, "--store", store, ...flags])
        assert.strictEqual(r.code, 2, `${flags.join(" ")}: ${r.stderr}`)
        assert.include(r.stdout + r.stderr, message)
        assert.notInclude(r.stdout + r.stderr, "Predicate refinement")
      }
      assert.isFalse(fs.existsSync(store), "nothing ran")
      const rep = yield* assay(["report", store, "--errors", "-1"])
      assert.strictEqual(rep.code, 2, rep.stderr)
      assert.include(rep.stdout + rep.stderr, "--errors must be an integer >= 0 (got -1)")
    }))
})

describe("shards and signals", () => {
  it.live("SIGINT on a --shards parent: children stop gracefully (runs interrupted), merged partial report, exit 130; the same command resumes", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "slow.json", delayExperiment(24, 250, 1))
      const base = path.join(dir, "sh.db")
      const stores = [0, 1].map((i) => path.join(dir, `sh.shard${i}of2.db`))
      const argv = ["run", "-c", file, "--store", base, "--shards", "2", "--jobs", "2", "--summary", "json"]
      const p = start(argv)
      yield* Effect.promise(() =>
        waitFor(
          () => stores.every((s) => fs.existsSync(s) && count(s, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'") > 0),
          "both shards under way"
        )
      )
      p.child.kill("SIGINT")
      const r = yield* Effect.promise(() => p.done)
      assert.strictEqual(r.code, 130, r.stderr)
      const report = JSON.parse(r.stdout.trim().split("\n").pop()!)
      assert.deepStrictEqual(report.dead, [])
      assert.deepStrictEqual(report.shards.map((s: { status: string }) => s.status), ["interrupted", "interrupted"])
      assert.deepStrictEqual(report.shards.map((s: { exitCode: number }) => s.exitCode), [130, 130])
      for (const s of stores) assert.deepStrictEqual(query(s, "SELECT status FROM runs"), [{ status: "interrupted" }])
      const done = stores.reduce((n, s) => n + count(s, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 0)
      assert.isBelow(done, 24)
      assert.strictEqual(report.merged.byState.succeeded, done)
      // Interrupted (not dead, not left `running`): the same command resumes at once.
      const again = yield* assay(argv)
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(JSON.parse(again.stdout.trim().split("\n").pop()!).merged.byState.succeeded, 24)
    }))
})

describe("the resume command printed after a stop", () => {
  it("is the same command line with run → resume, --run-id and --stop-after dropped, quoted for a shell", async () => {
    const { resumeCommandOf } = await import("../../src/cli/RunCommand.js")
    const { shellQuote } = await import("../../src/services/internal/processRunner.js")
    assert.strictEqual(
      resumeCommandOf(["run", "-c", "exp.yaml", "--store", "runs/a b.db", "--run-id", "r1", "--stop-after", "5 minutes", "--concurrency", "8"]),
      "assay resume -c exp.yaml --store 'runs/a b.db' --concurrency 8"
    )
    assert.strictEqual(resumeCommandOf(["resume", "--run-id=x", "-c", "e.json"]), "assay resume -c e.json")
    assert.strictEqual(shellQuote("it's"), `'it'"'"'s'`)
    assert.strictEqual(shellQuote("$HOME"), `'$HOME'`)
    assert.strictEqual(shellQuote("a/b-c_d.json"), "a/b-c_d.json")
  })
})
