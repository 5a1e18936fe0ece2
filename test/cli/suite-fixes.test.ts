/**
 * Faults a fresh user found in suites, as that user meets them (spawned `bin/assay`):
 * - `--run-id` is checked by the one rule of plain runs and suites (exit 2 before anything);
 * - `resume` of a suite root (or a plain store) that does not exist is refused (exit 2), never
 *   a silent fresh start;
 * - a store or suite root held by another writer exits 75 (`ExitCode.Locked`), not 1 like a
 *   task failure, for a suite and a plain run alike;
 * - a pool's capacity is run configuration: raising or lowering it (shared or private) between
 *   runs changes no member's definition, while a resource's id still does (exit 2);
 * - a suite command pointed at something that is not a suite root (a member's database, the
 *   catalog, a folder inside a root, an unrelated directory, a file) says what it expected and
 *   what it found, and the root to give instead (exit 2); a new output root is never made
 *   inside another root or over a file;
 * - an input row edited (or removed) since a member's pipelines ran: `run`/`resume` refuse
 *   (exit 2, naming the member and the stale local keys, nothing recorded) unless
 *   `--accept-changed-rows`; a limit that left rows unread is no change;
 * - an accepted row change is remembered by the root (member, keys, time, new row digests):
 *   later runs and resumes need no flag, a new edit is refused again, and the old pipelines
 *   are superseded history: out of the cumulative report, export and dashboard totals, shown
 *   with a count, still in the earlier run's view; a row restored as it was counts again;
 * - a keyed row (`keyField`) edited in place is refused before anything is written (exit 2,
 *   naming the member and the key; no failed run recorded), with or without
 *   `--accept-changed-rows`;
 * - a suite file with a JSON key written twice is named a suite file ("invalid suite"), never an
 *   experiment; an invalid suite id is not offered back as an output root;
 * - a member file gone missing blocks only the runs that select it: `--experiment` of another
 *   member runs with a warning, the member's results stay readable;
 * - `--stop-after-failures` is the suite's: one member's failures stop every member's
 *   admission (documented, and said in `assay run --help`).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import Database from "better-sqlite3"
import { assay, query, start, tempDir, write } from "../support/cli.js"

const countIn = (db: string, sql: string) => Number(Object.values(query(db, sql)[0]!)[0])

const opts = (cwd: string) => ({ cwd, killAfterMs: 60_000 })

/** A suite of two members (alpha, beta), each a range of 3 rows through a 5 ms delay. */
const fixture = (dir: string, layout = "byExperiment") => {
  const member = write(dir, "a.json", {
    pipeline: { name: "p", tasks: [{ use: "delay", args: ["5 millis"] }] },
    source: { range: { n: 3 } }
  })
  const suite = write(dir, "suite.json", {
    suite: { id: "fixes" },
    output: { root: "out", layout },
    experiments: { alpha: { config: "a.json" }, beta: { config: "a.json" } }
  })
  return { member, suite, root: path.join(dir, "out") }
}

describe("suite CLI fixes", () => {
  it.scoped("--run-id: the plain run's rule in suite mode too (exit 2, nothing written)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const f = fixture(dir)
      for (const [id, why] of [["", /empty/], ["a\nb", /control character \(U\+000A/], [" x", /starts or ends with a space/], ["x".repeat(201), /at most 200/]] as const) {
        for (const c of [f.suite, f.member]) {
          const r = yield* assay(["run", "-c", c, "--run-id", id, "--store", path.join(dir, "plain.db")].slice(0, c === f.suite ? 5 : 7), opts(dir))
          assert.strictEqual(r.code, 2, `${JSON.stringify(id)} ${c}: ${r.stderr}`)
          assert.match(r.stderr, /--run-id: /)
          assert.match(r.stderr, why)
        }
      }
      assert.isFalse(fs.existsSync(f.root), "nothing created")
      assert.isFalse(fs.existsSync(path.join(dir, "plain.db")), "nothing created")
      const ok = yield* assay(["run", "-c", f.suite, "--run-id", "my-run.1", "--quiet"], opts(dir))
      assert.strictEqual(ok.code, 0, ok.stderr)
    }), 120_000)

  it.scoped("resume of a missing suite root or plain store is refused (exit 2), then works once it exists", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const f = fixture(dir)
      const r = yield* assay(["resume", "-c", f.suite, "--quiet"], opts(dir))
      assert.strictEqual(r.code, 2, r.stderr)
      assert.match(r.stderr, /output\.root: nothing to resume: there is no suite root at .*out/)
      assert.isFalse(fs.existsSync(f.root), "nothing created")
      const other = yield* assay(["resume", "-c", f.suite, "--output-root", "elsewhere", "--quiet"], opts(dir))
      assert.strictEqual(other.code, 2, other.stderr)
      assert.match(other.stderr, /--output-root: nothing to resume/)
      const plain = path.join(dir, "plain.db")
      const p = yield* assay(["run", "--resume", "-c", f.member, "--store", plain, "--quiet"], opts(dir))
      assert.strictEqual(p.code, 2, p.stderr)
      assert.match(p.stderr, /--store: nothing to resume: there is no store at .*plain\.db/)
      assert.isFalse(fs.existsSync(plain))

      const run = yield* assay(["run", "-c", f.suite, "--quiet"], opts(dir))
      assert.strictEqual(run.code, 0, run.stderr)
      const again = yield* assay(["resume", "-c", f.suite, "--quiet"], opts(dir))
      assert.strictEqual(again.code, 0, again.stderr)
    }), 120_000)

  it.scoped("a root or store held by another writer: exit 75 with the holder named, for a suite and a plain run", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const f = fixture(dir)
      const plain = path.join(dir, "plain.db")
      for (const args of [["run", "-c", f.suite], ["run", "-c", f.member, "--store", plain]]) {
        const first = yield* assay([...args, "--quiet"], opts(dir))
        assert.strictEqual(first.code, 0, first.stderr)
      }
      // hold the writer locks from this process, as another run would
      const held = [path.join(f.root, "suite.db.lock"), `${plain}.lock`].map((file) =>
        Effect.acquireRelease(
          Effect.sync(() => {
            const d = new Database(file, { timeout: 0 })
            d.exec("BEGIN EXCLUSIVE")
            return d
          }),
          (d) => Effect.sync(() => d.close())
        )
      )
      yield* Effect.all(held)
      for (const args of [["resume", "-c", f.suite], ["run", "-c", f.suite, "--experiment", "beta"], ["resume", "-c", f.member, "--store", plain]]) {
        const r = yield* assay([...args, "--quiet"], opts(dir))
        assert.strictEqual(r.code, 75, `${args.join(" ")}: ${r.stderr}`)
        assert.match(r.stderr, /is already open for writing by/)
      }
    }), 120_000)

  it.scoped("a pool's capacity changes on resume, up and down, shared and private; a resource id change is still refused", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const member = (capacity: number, id = "k") => ({
        pools: { apis: { resources: [{ id, capacity }] } },
        pipeline: { name: "p", tasks: [{ use: "delay", args: ["5 millis"], resource: "apis" }] },
        source: { range: { n: 3 } }
      })
      const suite = (capacity: number) =>
        write(dir, "suite.json", {
          suite: { id: "pools" },
          output: { root: "out", layout: "combined" },
          pools: { shared: { resources: [{ id: "s", capacity }] } },
          experiments: { alpha: { config: "a.json", poolBindings: { apis: "shared" } }, beta: { config: "b.json" } }
        })
      write(dir, "a.json", member(1))
      write(dir, "b.json", member(1))
      const file = suite(2)
      const first = yield* assay(["run", "-c", file, "--quiet"], opts(dir))
      assert.strictEqual(first.code, 0, first.stderr)
      const db = path.join(dir, "out/state.db")
      const pipelines = () => query<{ n: number }>(db, "SELECT count(*) AS n FROM pipelines")[0]!.n
      const attempts = () => query<{ n: number }>(db, "SELECT count(*) AS n FROM attempts")[0]!.n
      assert.strictEqual(pipelines(), 6)
      const attemptsBefore = attempts()
      for (const capacity of [8, 1]) {
        suite(capacity)
        write(dir, "b.json", member(capacity + 1))
        const v = yield* assay(["validate", "-c", file], opts(dir))
        assert.strictEqual(v.code, 0, v.stderr)
        assert.include(v.stdout, "existing root: 2 member(s) match (alpha, beta), 0 new (none)")
        const r = yield* assay(["resume", "-c", file, "--summary", "json"], opts(dir))
        assert.strictEqual(r.code, 0, `capacity ${capacity}: ${r.stderr}`)
        assert.strictEqual(JSON.parse(r.stdout).skipped, 6, "every pipeline found again: no identity changed")
      }
      assert.strictEqual(pipelines(), 6, "no new pipeline")
      assert.strictEqual(attempts(), attemptsBefore, "nothing re-run")
      write(dir, "b.json", member(2, "k2"))
      const refused = yield* assay(["resume", "-c", file, "--quiet"], opts(dir))
      assert.strictEqual(refused.code, 2, refused.stderr)
      assert.match(refused.stderr, /experiments\.beta: the definition of member "beta" changed: its pool "apis" \(declaration, field resources\[0\]\.id: /)
    }), 120_000)

  it.scoped("a path that is not a suite root: what was expected, what was found, and the root to give (exit 2)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const f = fixture(dir)
      const first = yield* assay(["run", "-c", f.suite, "--quiet"], opts(dir))
      assert.strictEqual(first.code, 0, first.stderr)
      fs.mkdirSync(path.join(dir, "random"))
      fs.writeFileSync(path.join(dir, "random/notes.txt"), "hi")
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
        [["report", "out/experiments/alpha/state.db", "--experiment", "alpha"],
          /only a suite root \(a directory holding manifest\.json\) has members; out\/experiments\/alpha\/state\.db is the database of member "alpha" of suite "fixes", not its root: give the root, .*\/out$/m],
        [["report", "out/experiments", "--experiment", "alpha"], /out\/experiments is a folder inside the root of suite "fixes", not the root itself: give the root, /],
        [["report", "random"], /expected a store file or a suite root \(a directory holding manifest\.json\): random is a directory without manifest\.json/],
        [["report", "out/experiments/beta"], /expected a store file or a suite root .*: out\/experiments\/beta is a folder inside the root of suite "fixes"/],
        [["watch", "random"], /expected a store file or a suite root .*: random is a directory without manifest\.json/],
        [["serve", "out/experiments", "--port", "0"], /expected a store file or a suite root .*: out\/experiments is a folder inside the root of suite "fixes"/],
        [["report", "missing", "--experiment", "alpha"], /missing does not exist/],
        [["export", "out/suite.db", "split", "--by-experiment"], /give a suite root .*; out\/suite\.db is the catalog database of suite "fixes", not its root: give the root, /],
        [["run", "-c", f.suite, "--output-root", "out/experiments/alpha/nested"],
          /--output-root: expected a suite root .*nested does not exist \(it would be inside the root of suite "fixes"\); a suite root is never created inside another/],
        [["run", "-c", f.suite, "--output-root", "random/notes.txt"], /--output-root: expected a suite root .*notes\.txt is a file, not a directory/]
      ]
      for (const [args, expected] of cases) {
        const r = yield* assay([...args, "--quiet"].filter((a) => a !== "--quiet" || args[0] === "run"), opts(dir))
        assert.strictEqual(r.code, 2, `${args.join(" ")}: ${r.stderr}`)
        assert.match(r.stderr, expected, args.join(" "))
      }
      assert.isFalse(fs.existsSync(path.join(dir, "out/experiments/alpha/nested")), "no root made inside a root")
      assert.isFalse(fs.existsSync(path.join(dir, "split")))
    }), 120_000)

  it.scoped("--stop-after-failures counts across members: one member's failure stops every member's admission", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      write(dir, "bad.json", { pipeline: { name: "b", tasks: [{ use: "boom" }] }, source: { range: { n: 20 } } })
      write(dir, "good.json", { pipeline: { name: "g", tasks: [{ use: "delay", args: ["20 millis"] }] }, source: { range: { n: 200 } } })
      const suite = write(dir, "suite.json", {
        suite: { id: "stops" },
        run: { concurrency: 1, maxAdmitted: 2 },
        output: { root: "out", layout: "byExperiment" },
        experiments: { bad: { config: "bad.json" }, good: { config: "good.json" } }
      })
      const r = yield* assay(["run", "-c", suite, "--stop-after-failures", "1", "--quiet"], opts(dir))
      assert.strictEqual(r.code, 1, r.stderr)
      assert.include(r.stderr, "stopped early (--stop-after-failures / run.stopAfterFailures reached)")
      const good = countIn(path.join(dir, "out/experiments/good/state.db"), "SELECT count(*) FROM pipelines")
      assert.isBelow(good, 200, "the member without failures stopped admitting too")
      assert.isBelow(countIn(path.join(dir, "out/experiments/bad/state.db"), "SELECT count(*) FROM pipelines"), 20)
      const help = yield* assay(["run", "--help"], opts(dir))
      assert.match(help.stdout.replace(/\s+/g, " "), /in a suite: counted across all members, and every member stops/)
    }), 120_000)

  it.scoped("an edited input row: refused with the member and its stale keys (exit 2) unless --accept-changed-rows; a limit is no change", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const rows = (texts: ReadonlyArray<string>) => write(dir, "rows.jsonl", texts.map((t) => JSON.stringify({ text: t })).join("\n") + "\n")
      rows(["a", "b", "c"])
      write(dir, "m.json", { pipeline: { name: "p", tasks: [{ use: "delay", args: ["1 millis"] }] }, source: { jsonl: { path: "rows.jsonl" } } })
      const suite = write(dir, "suite.json", {
        suite: { id: "rows" },
        output: { root: "out", layout: "combined" },
        experiments: { x: { config: "m.json" } }
      })
      const db = path.join(dir, "out/state.db")
      // a limit leaves rows unread: the next run is not a change
      const limited = yield* assay(["run", "-c", suite, "--limit", "1", "--quiet"], opts(dir))
      assert.strictEqual(limited.code, 0, limited.stderr)
      const full = yield* assay(["resume", "-c", suite, "--quiet"], opts(dir))
      assert.strictEqual(full.code, 0, full.stderr)
      const before = { runs: countIn(db, "SELECT count(*) FROM runs"), pipelines: countIn(db, "SELECT count(*) FROM pipelines") }
      assert.deepStrictEqual(before, { runs: 2, pipelines: 3 })
      const staleKey = String(query<{ local_key: string }>(db, "SELECT local_key FROM pipelines ORDER BY created_at LIMIT 1 OFFSET 1")[0]!.local_key)

      const same = yield* assay(["validate", "-c", suite], opts(dir))
      assert.strictEqual(same.code, 0, same.stderr)
      assert.include(same.stdout, "existing root: 1 member(s) match (x)")
      rows(["a", "b, edited", "c"])
      // validate says what run would say (exit 2, naming the member), never "1 member(s) match"
      for (const command of ["validate", "resume", "run"]) {
        const r = yield* assay([command, "-c", suite, ...(command === "validate" ? [] : ["--quiet"])], opts(dir))
        assert.strictEqual(r.code, 2, `${command}: ${r.stdout}${r.stderr}`)
        assert.match(r.stderr, /experiments\.x: the member's source no longer yields 1 of its stored pipeline\(s\) \(local keys [0-9a-f]+\) and yields 1 the root does not hold/)
        assert.include(r.stderr, "--accept-changed-rows")
        assert.notInclude(r.stdout, "member(s) match")
      }
      const asJson = JSON.parse((yield* assay(["validate", "-c", suite, "--json"], opts(dir))).stdout)
      assert.isFalse(asJson.valid)
      assert.deepStrictEqual(asJson.root.changedRows, [{ experimentId: "x", keyedEdits: 0, stale: 1, added: 1, restored: 0 }])
      assert.deepStrictEqual({ runs: countIn(db, "SELECT count(*) FROM runs"), pipelines: countIn(db, "SELECT count(*) FROM pipelines") }, before, "nothing recorded")
      const accepted = yield* assay(["resume", "-c", suite, "--accept-changed-rows", "--quiet"], opts(dir))
      assert.strictEqual(accepted.code, 0, accepted.stderr)
      assert.match(accepted.stderr, /warning: member x: 1 input row\(s\) edited or removed since they ran/)
      assert.strictEqual(countIn(db, "SELECT count(*) FROM pipelines"), 4, "the edited row ran as a new pipeline; the old one stays as history")
      assert.strictEqual(countIn(db, `SELECT count(*) FROM pipelines WHERE local_key = '${staleKey}'`), 1)
      const plain = yield* assay(["run", "-c", path.join(dir, "m.json"), "--accept-changed-rows"], opts(dir))
      assert.strictEqual(plain.code, 2, plain.stderr)
      assert.include(plain.stderr, "--accept-changed-rows needs -c SUITE")
    }), 120_000)
  it.scoped("an accepted row change is remembered: no flag needed later, a new edit refused, old pipelines superseded out of the cumulative views", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const rows = (texts: ReadonlyArray<string>) => write(dir, "rows.jsonl", texts.map((t) => JSON.stringify({ text: t })).join("\n") + "\n")
      rows(["a", "b", "c"])
      write(dir, "other.jsonl", ["p", "q"].map((t) => JSON.stringify({ text: t })).join("\n") + "\n")
      write(dir, "x.json", { pipeline: { name: "p", tasks: [{ use: "delay", args: ["1 millis"] }] }, source: { jsonl: { path: "rows.jsonl" } } })
      write(dir, "y.json", { pipeline: { name: "p", tasks: [{ use: "delay", args: ["1 millis"] }] }, source: { jsonl: { path: "other.jsonl" } } })
      const suite = write(dir, "suite.json", {
        suite: { id: "accept" },
        output: { root: "out", layout: "byExperiment" },
        experiments: { x: { config: "x.json" }, y: { config: "y.json" } }
      })
      const root = path.join(dir, "out")
      const xdb = path.join(root, "experiments/x/state.db")
      const catalog = path.join(root, "suite.db")
      const first = yield* assay(["run", "-c", suite, "--summary", "json"], opts(dir))
      assert.strictEqual(first.code, 0, first.stderr)
      const firstRun = JSON.parse(first.stdout).runId as string
      const keysNow = () => new Set(query<{ local_key: string }>(xdb, "SELECT local_key FROM pipelines").map((r) => r.local_key))
      const oldB = [...keysNow()]
      assert.strictEqual(oldB.length, 3)

      rows(["a", "b, edited", "c"])
      const refused = yield* assay(["run", "-c", suite, "--quiet"], opts(dir))
      assert.strictEqual(refused.code, 2, refused.stderr)
      const accepted = yield* assay(["run", "-c", suite, "--accept-changed-rows", "--quiet"], opts(dir))
      assert.strictEqual(accepted.code, 0, accepted.stderr)
      assert.match(accepted.stderr, /warning: member x: 1 input row\(s\) edited or removed .*recorded in the root: later runs need no flag\): their 1 stored pipeline\(s\) are kept as superseded history/)
      const after = keysNow()
      assert.strictEqual(after.size, 4)
      const newKey = [...after].find((k) => !oldB.includes(k))!
      const staleKey = String(query<{ local_key: string }>(xdb, "SELECT local_key FROM suite_superseded")[0]!.local_key)
      assert.include(oldB, staleKey)
      // the acceptance in the catalog: member, keys, time, new row digests
      const acc = query<{ experiment_id: string; stale_keys: string; new_keys: string; accepted_at: number; pipelines: number }>(catalog, "SELECT * FROM suite_row_acceptances")
      assert.strictEqual(acc.length, 1)
      assert.strictEqual(acc[0]!.experiment_id, "x")
      assert.deepStrictEqual(JSON.parse(acc[0]!.stale_keys), [staleKey])
      assert.deepStrictEqual(JSON.parse(acc[0]!.new_keys), [newKey])
      assert.strictEqual(acc[0]!.pipelines, 1)
      assert.isAbove(acc[0]!.accepted_at, 0)

      // later runs and resumes: no flag, nothing re-run
      const attempts = countIn(xdb, "SELECT count(*) FROM attempts")
      for (const command of ["resume", "run"]) {
        const r = yield* assay([command, "-c", suite, "--summary", "json"], opts(dir))
        assert.strictEqual(r.code, 0, `${command}: ${r.stderr}`)
        assert.notInclude(r.stderr, "warning")
        assert.strictEqual(JSON.parse(r.stdout).skipped, 5)
      }
      assert.strictEqual(countIn(xdb, "SELECT count(*) FROM attempts"), attempts, "nothing re-run")

      // the cumulative report: the superseded pipeline apart, with a count
      const report = yield* assay(["report", root, "--json"], opts(dir))
      assert.strictEqual(report.code, 0, report.stderr)
      const rep = JSON.parse(report.stdout)
      assert.strictEqual(rep.pipelines, 5)
      assert.strictEqual(rep.byState.succeeded, 5)
      assert.strictEqual(rep.superseded, 1)
      assert.deepStrictEqual(rep.members.map((m: any) => [m.experimentId, m.pipelines, m.superseded]), [["x", 3, 1], ["y", 2, 0]])
      const text = yield* assay(["report", root], opts(dir))
      assert.include(text.stdout, "Pipelines: 5 (pending 0, running 0, succeeded 5")
      assert.include(text.stdout, "Superseded: 1 pipeline(s) of input rows edited or removed since they ran (accepted; kept as history, not counted above)")
      assert.match(text.stdout, /  x: 3 pipeline\(s\) .*, superseded 1;/)
      const member = JSON.parse((yield* assay(["report", root, "--experiment", "x", "--json"], opts(dir))).stdout)
      assert.deepStrictEqual([member.pipelines, member.superseded], [3, 1])
      // the first run's view still shows what it did
      const old = JSON.parse((yield* assay(["report", root, "--run-id", firstRun, "--json"], opts(dir))).stdout)
      assert.strictEqual(old.pipelines, 5)
      assert.strictEqual(old.byState.succeeded, 5)

      // exports: the current rows only
      const out = path.join(dir, "results.jsonl")
      const exp = yield* assay(["export", root, out, "--rows", "results"], opts(dir))
      assert.strictEqual(exp.code, 0, exp.stderr)
      const exported = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.strictEqual(exported.length, 5)
      assert.isFalse(exported.some((r) => r.localKey === staleKey))
      assert.isTrue(exported.some((r) => r.localKey === newKey))
      const tasksOut = path.join(dir, "tasks.jsonl")
      assert.strictEqual((yield* assay(["export", root, tasksOut, "--rows", "tasks", "--experiment", "x"], opts(dir))).code, 0)
      assert.strictEqual(fs.readFileSync(tasksOut, "utf8").trim().split("\n").length, 3)

      // the dashboard's suite view
      const served = start(["serve", root, "--port", "0"], { cwd: dir })
      yield* Effect.addFinalizer(() => Effect.sync(() => served.child.kill("SIGTERM")))
      const url = yield* Effect.promise(() =>
        new Promise<string>((resolve, reject) => {
          const check = () => {
            const m = /at (http:\/\/127\.0\.0\.1:\d+)\//.exec(served.stdout())
            if (m !== null) resolve(m[1]!)
          }
          served.child.stdout!.on("data", check)
          served.child.on("close", (code) => reject(new Error(`serve exited ${code}: ${served.stderr()}`)))
        })
      )
      const get = (route: string) => Effect.promise(() => fetch(`${url}${route}`).then((r) => r.text()))
      const members = JSON.parse(yield* get("/experiments"))
      assert.deepStrictEqual(members.rows.map((m: any) => [m.experiment_id, m.pipelines, m.superseded]), [["x", 3, 1], ["y", 2, 0]])
      const stats = JSON.parse(yield* get("/stats"))
      assert.strictEqual(stats.pipelines.total, 5)
      assert.include(yield* get("/"), "<th title=\"pipelines of input rows edited or removed since they ran (accepted): kept as history, not counted in pipelines\">superseded</th>")

      // a new edit is refused again, naming only the new stale key
      rows(["a", "b, edited", "c, edited"])
      const again = yield* assay(["resume", "-c", suite, "--quiet"], opts(dir))
      assert.strictEqual(again.code, 2, again.stderr)
      assert.match(again.stderr, /experiments\.x: the member's source no longer yields 1 of its stored pipeline\(s\) \(local keys [0-9a-f]+\)/)
      assert.notInclude(again.stderr, staleKey)
      assert.notInclude(again.stderr, "experiments.y")

      // the rows restored as they first were: the old pipelines count again (nothing re-run), the edited one is superseded
      rows(["a", "b", "c"])
      const restored = yield* assay(["run", "-c", suite, "--accept-changed-rows", "--summary", "json"], opts(dir))
      assert.strictEqual(restored.code, 0, restored.stderr)
      assert.match(restored.stderr, /note: member x: 1 row\(s\) are back as they were when they ran/)
      assert.strictEqual(JSON.parse(restored.stdout).skipped, 5)
      assert.strictEqual(countIn(xdb, "SELECT count(*) FROM attempts"), attempts, "nothing re-run")
      assert.deepStrictEqual(query<{ local_key: string }>(xdb, "SELECT local_key FROM suite_superseded").map((r) => r.local_key), [newKey])
      const back = JSON.parse((yield* assay(["report", root, "--json"], opts(dir))).stdout)
      assert.deepStrictEqual([back.pipelines, back.superseded], [5, 1])
    }), 180_000)
  it.scoped("a member's own stopAfterFailures stops only that member (the others go on, resume continues it); bad values name the field", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      write(dir, "bad.json", { pipeline: { name: "b", tasks: [{ use: "boom" }] }, source: { range: { n: 200 } } })
      write(dir, "good.json", { pipeline: { name: "g", tasks: [{ use: "delay", args: ["2 millis"] }] }, source: { range: { n: 30 } } })
      const suiteWith = (bad: Record<string, unknown>) => write(dir, "suite.json", {
        suite: { id: "budgets" },
        run: { concurrency: 6 },
        output: { root: "out", layout: "byExperiment" },
        experiments: { bad: { config: "bad.json", ...bad }, good: { config: "good.json" } }
      })
      for (const [value, expected] of [
        [{ stopAfterFailures: 0 }, /experiments\.bad\.stopAfterFailures: must be an integer >= 1/],
        [{ stopAfterFailures: 1.5 }, /experiments\.bad\.stopAfterFailures: expected an integer, got 1\.5/],
        [{ stopAfterFailure: 2 }, /experiments\.bad\.stopAfterFailure: unknown key "stopAfterFailure" \(did you mean stopAfterFailures\?\)/]
      ] as const) {
        const file = suiteWith(value)
        const r = yield* assay(["run", "-c", file, "--quiet"], opts(dir))
        assert.strictEqual(r.code, 2, `${JSON.stringify(value)}: ${r.stderr}`)
        assert.match(r.stderr, expected)
      }
      assert.isFalse(fs.existsSync(path.join(dir, "out")), "nothing created")

      const suite = suiteWith({ stopAfterFailures: 2 })
      const v = yield* assay(["validate", "-c", suite, "--json"], opts(dir))
      assert.strictEqual(v.code, 0, v.stderr)
      assert.deepStrictEqual(JSON.parse(v.stdout).experiments.map((m: any) => [m.id, m.stopAfterFailures]), [["bad", 2], ["good", null]])
      const badDb = path.join(dir, "out/experiments/bad/state.db")
      const goodDb = path.join(dir, "out/experiments/good/state.db")
      const r = yield* assay(["run", "-c", suite, "--summary", "json"], opts(dir))
      assert.strictEqual(r.code, 1, r.stderr)
      const report = JSON.parse(r.stdout)
      assert.strictEqual(report.status, "completed", "no suite-wide stop")
      const bad = report.members.find((m: any) => m.experimentId === "bad")
      assert.isTrue(bad.failuresReached)
      assert.isFalse(bad.sourceExhausted)
      const first = countIn(badDb, "SELECT count(*) FROM pipelines")
      assert.isBelow(first, 200, "the member stopped admitting")
      // once its 2nd failure was decided none of its pipelines started: at most 2 + concurrency - 1
      // failed, its other admitted pipelines are pending (a resume runs them)
      const failed = countIn(badDb, "SELECT count(*) FROM pipelines WHERE state = 'failed'")
      assert.isAtLeast(failed, 2)
      assert.isAtMost(failed, 2 + 6 - 1)
      assert.strictEqual(countIn(badDb, "SELECT count(*) FROM pipelines WHERE state NOT IN ('failed', 'pending')"), 0)
      assert.strictEqual(countIn(goodDb, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 30, "the other member went on to its end")
      // the views read the stop from the root later on, never "source not exhausted"
      const shown = yield* assay(["report", path.join(dir, "out")], opts(dir))
      assert.strictEqual(shown.code, 0, shown.stderr)
      const badLine = shown.stdout.split("\n").find((l) => /^\s*bad\b/.test(l)) ?? ""
      assert.include(badLine, "stopped by its own stopAfterFailures", shown.stdout)
      assert.notInclude(badLine, "source not exhausted")
      const json = JSON.parse((yield* assay(["report", path.join(dir, "out"), "--json"], opts(dir))).stdout)
      assert.strictEqual(json.members.find((m: any) => m.experimentId === "bad").sourceStatus, "failures")
      const attemptsBefore = countIn(badDb, "SELECT count(*) FROM attempts")
      const text = yield* assay(["resume", "-c", suite], opts(dir))
      assert.strictEqual(text.code, 1, text.stderr)
      assert.include(text.stdout, "bad: submitted")
      assert.include(text.stdout, "stopped by its own stopAfterFailures (source not exhausted; resume continues it)")
      // resume went on with the member, with a fresh budget: it made new attempts (a spent budget
      // would start none). Which pipelines it ran first (its failed ones again, its pending ones,
      // rows admitted anew) is a race between its admission and its first calls
      assert.isAbove(
        countIn(badDb, "SELECT count(*) FROM attempts"),
        attemptsBefore,
        `resume went on with the member, with a fresh budget: ${text.stdout}${text.stderr}`
      )
      assert.isAtLeast(countIn(badDb, "SELECT count(*) FROM pipelines"), first)

      // the suite-wide flag still counts every member together and stops them all
      const all = yield* assay(["run", "-c", suite, "--output-root", "out2", "--stop-after-failures", "1", "--quiet"], opts(dir))
      assert.strictEqual(all.code, 1, all.stderr)
      assert.include(all.stderr, "stopped early (--stop-after-failures / run.stopAfterFailures reached)")
      assert.isBelow(countIn(path.join(dir, "out2/experiments/good/state.db"), "SELECT count(*) FROM pipelines"), 30)
    }), 180_000)
  it.scoped("a keyed row edited in place: refused before anything is written, naming member and key, even with --accept-changed-rows", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const rows = (texts: ReadonlyArray<string>) =>
        write(dir, "rows.jsonl", texts.map((t, i) => JSON.stringify({ id: `row-${i}`, text: t })).join("\n") + "\n")
      rows(["a", "b", "c"])
      write(dir, "m.json", {
        pipeline: { name: "p", tasks: [{ use: "delay", args: ["1 millis"] }] },
        source: { jsonl: { path: "rows.jsonl" }, keyField: "id" }
      })
      const suite = write(dir, "suite.json", { suite: { id: "keyed" }, output: { root: "out", layout: "combined" }, experiments: { x: { config: "m.json" } } })
      const db = path.join(dir, "out/state.db")
      const first = yield* assay(["run", "-c", suite, "--quiet"], opts(dir))
      assert.strictEqual(first.code, 0, first.stderr)
      rows(["a", "b, edited", "c"])
      const checked = yield* assay(["validate", "-c", suite], opts(dir))
      assert.strictEqual(checked.code, 2, checked.stdout + checked.stderr)
      assert.include(checked.stderr, "experiments.x: 1 input row(s) with an explicit key changed content since they ran (keys row-1)")
      assert.notInclude(checked.stdout, "member(s) match")
      for (const extra of [[], ["--accept-changed-rows"]]) {
        const r = yield* assay(["resume", "-c", suite, "--quiet", ...extra], opts(dir))
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, "experiments.x: 1 input row(s) with an explicit key changed content since they ran (keys row-1)")
        assert.notInclude(r.stderr, "stored definition differs")
      }
      assert.strictEqual(countIn(db, "SELECT count(*) FROM runs"), 1, "no run recorded")
      rows(["a", "b", "c"])
      const back = yield* assay(["resume", "-c", suite, "--quiet"], opts(dir))
      assert.strictEqual(back.code, 0, back.stderr)
    }), 120_000)
  it.scoped("bad suite files as a user writes them: a duplicate JSON key is a suite's problem, typos and a missing member file named by field path", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      write(dir, "m.json", { pipeline: { name: "p", tasks: [{ use: "delay", args: ["1 millis"] }] }, source: { range: { n: 3 } } })
      write(dir, "dup.json", `{"suite":{"id":"t"},"output":{"root":"out"},"experiments":{"a":{"config":"m.json"},"a":{"config":"m.json","limit":2}}}`)
      for (const command of ["run", "validate"]) {
        const r = yield* assay([command, "-c", "dup.json"], opts(dir))
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, `invalid suite ${path.join(dir, "dup.json")}: 1 problem`)
        assert.include(r.stderr, `experiments.a: the key "a" is written twice in one object`)
      }
      write(dir, "typos.yaml", [
        "suite: { id: \"bad id!\" }",
        "ouput: { root: out }",
        "experiments:",
        "  a: { config: m.json, lable: x }",
        "  b: { config: missing.json }"
      ].join("\n"))
      const r = yield* assay(["run", "-c", "typos.yaml"], opts(dir))
      assert.strictEqual(r.code, 2, r.stderr)
      assert.include(r.stderr, "invalid suite")
      assert.include(r.stderr, `ouput: unknown key "ouput" (did you mean output?)`)
      assert.include(r.stderr, `experiments.a.lable: unknown key "lable" (did you mean label?)`)
      assert.match(r.stderr, /experiments\.b\.config: missing\.json: no such file: .*missing\.json/)
      assert.include(r.stderr, "output.root: is missing (output: { root: runs/my-suite }")
      assert.notInclude(r.stderr, "runs/bad id!")
      assert.isFalse(fs.existsSync(path.join(dir, "out")))
    }), 120_000)
  it.scoped("--accept-changed-rows with a changed member definition: the definition is refused and no acceptance is recorded", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const rows = (texts: ReadonlyArray<string>) => write(dir, "rows.jsonl", texts.map((t) => JSON.stringify({ text: t })).join("\n") + "\n")
      const member = (delay: string) =>
        write(dir, "m.json", { pipeline: { name: "p", tasks: [{ use: "delay", args: [delay] }] }, source: { jsonl: { path: "rows.jsonl" } } })
      rows(["a", "b"])
      member("1 millis")
      const suite = write(dir, "suite.json", { suite: { id: "defs" }, output: { root: "out", layout: "combined" }, experiments: { x: { config: "m.json" } } })
      const db = path.join(dir, "out/state.db")
      assert.strictEqual((yield* assay(["run", "-c", suite, "--quiet"], opts(dir))).code, 0)
      rows(["a", "b, edited"])
      member("2 millis")
      const r = yield* assay(["run", "-c", suite, "--accept-changed-rows", "--quiet"], opts(dir))
      assert.strictEqual(r.code, 2, r.stderr)
      assert.match(r.stderr, /the definition of member "x" changed/)
      assert.strictEqual(countIn(db, "SELECT count(*) FROM suite_row_acceptances"), 0)
      assert.strictEqual(countIn(db, "SELECT count(*) FROM suite_superseded"), 0)
      assert.strictEqual(countIn(db, "SELECT count(*) FROM runs"), 1)
    }), 120_000)
  it.scoped("a changed member definition (content-addressed rows) is refused as a definition change, never as edited rows", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const member = (delay: string) =>
        write(dir, "m.json", { pipeline: { name: "p", tasks: [{ use: "delay", args: [delay] }] }, source: { range: { n: 3 } } })
      member("1 millis")
      const suite = write(dir, "suite.json", { suite: { id: "defs2" }, output: { root: "out", layout: "combined" }, experiments: { x: { config: "m.json" } } })
      assert.strictEqual((yield* assay(["run", "-c", suite, "--quiet"], opts(dir))).code, 0)
      member("2 millis")
      for (const command of ["run", "resume"]) {
        const r = yield* assay([command, "-c", suite, "--quiet"], opts(dir))
        assert.strictEqual(r.code, 2, r.stderr)
        assert.match(r.stderr, /the definition of member "x" changed/)
        assert.notInclude(r.stderr, "--accept-changed-rows")
        assert.notInclude(r.stderr, "no longer yields")
      }
    }), 120_000)

  it.scoped("a missing member file blocks only runs that select that member; --experiment of another goes on with a warning", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-fixes")
      const f = fixture(dir)
      write(dir, "b.json", fs.readFileSync(f.member, "utf8"))
      const suite = write(dir, "suite.json", {
        suite: { id: "gone" },
        output: { root: "out", layout: "byExperiment" },
        experiments: { alpha: { config: "a.json" }, beta: { config: "b.json" } }
      })
      assert.strictEqual((yield* assay(["run", "-c", suite, "--quiet"], opts(dir))).code, 0)
      fs.rmSync(path.join(dir, "b.json"))
      const alone = yield* assay(["resume", "-c", suite, "--experiment", "alpha", "--summary", "json"], opts(dir))
      assert.strictEqual(alone.code, 0, alone.stderr)
      assert.match(alone.stderr, /warning: experiments\.beta\.config: b\.json: no such file: .*b\.json; member beta is not selected, so this run leaves it out/)
      assert.strictEqual(alone.stderr.split("leaves it out").length - 1, 1, "warned once")
      assert.strictEqual(JSON.parse(alone.stdout).skipped, 3)
      // the summary lists it, with its problem (text and JSON)
      assert.deepStrictEqual(
        JSON.parse(alone.stdout).members.map((m: any) => [m.experimentId, m.selected, m.leftOut ?? null]),
        [["alpha", true, null], ["beta", false, `experiments.beta.config: b.json: no such file: ${path.join(dir, "b.json")}`]]
      )
      const text = yield* assay(["resume", "-c", suite, "--experiment", "alpha"], opts(dir))
      assert.strictEqual(text.code, 0, text.stderr)
      assert.match(text.stdout, /\n  beta: not selected, left out: experiments\.beta\.config: b\.json: no such file/)
      assert.strictEqual(text.stderr.split("leaves it out").length - 1, 1, "warned once")
      // a file with several problems: still one warning for the member, naming them all
      fs.writeFileSync(path.join(dir, "b.yaml"), "pipeline: [\n  bad: : :\n")
      const yamlSuite = write(dir, "suite-yaml.json", {
        suite: { id: "gone" },
        output: { root: "out-yaml", layout: "byExperiment" },
        experiments: { alpha: { config: "a.json" }, beta: { config: "b.yaml" } }
      })
      const broken = yield* assay(["run", "-c", yamlSuite, "--experiment", "alpha", "--quiet"], opts(dir))
      assert.strictEqual(broken.code, 0, broken.stderr)
      assert.strictEqual(broken.stderr.split("leaves it out").length - 1, 1, broken.stderr)
      assert.isAbove(broken.stderr.split("invalid YAML").length - 1, 1, "every problem named")
      for (const args of [["--experiment", "beta"], []]) {
        const r = yield* assay(["resume", "-c", suite, ...args, "--quiet"], opts(dir))
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, "experiments.beta.config: b.json: no such file")
      }
      const report = JSON.parse((yield* assay(["report", f.root, "--json"], opts(dir))).stdout)
      assert.deepStrictEqual(report.members.map((m: any) => [m.experimentId, m.pipelines]), [["alpha", 3], ["beta", 3]])
    }), 120_000)
})
