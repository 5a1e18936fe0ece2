/**
 * A suite root's databases against plain runs and lost member files, as a user meets them
 * (spawned `bin/assay`):
 * - `assay run -c PLAIN --store` on a suite's `suite.db`, a member's `experiments/ID/state.db`
 *   or a combined root's `state.db` is refused (exit 2, naming the suite and `-c SUITE`),
 *   nothing written; reading that file (report) still works;
 * - a deleted member database: a run of the other members proceeds (exit 0) with a warning
 *   naming the file, `report ROOT` reports the rest and names it in its body (the member's line,
 *   `databaseMissing` in `--json`), and a run selecting that
 *   member is refused before anything is recorded (exit 2); `validate` refuses it the same way.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, query, tempDir, write } from "../support/cli.js"

const fixture = (dir: string) => {
  const member = write(dir, "a.json", {
    run: { concurrency: 2 },
    pipeline: { name: "p", tasks: [{ use: "delay", args: ["5 millis"] }] },
    source: { range: { n: 3 } }
  })
  const suite = (layout: string, root: string) =>
    write(dir, `suite-${layout}.json`, {
      suite: { id: "guarded" },
      output: { root, layout },
      experiments: { alpha: { config: "a.json" }, beta: { config: "a.json" } }
    })
  return { member, by: suite("byExperiment", "out/by"), combined: suite("combined", "out/combined") }
}

const runsIn = (db: string) => query<{ n: number }>(db, "SELECT count(*) AS n FROM runs")[0]!.n
const pipelinesIn = (db: string) => query<{ n: number }>(db, "SELECT count(*) AS n FROM pipelines")[0]!.n

describe("--store paths that are no store file", () => {
  it.scoped("a directory is refused (exit 2, naming the path, nothing created); a missing folder is created; a non-SQLite file is reported and left as it was", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-guard")
      const f = fixture(dir)
      const folder = path.join(dir, "a-folder")
      fs.mkdirSync(folder)
      // the suite's --store is refused in suite mode; a plain run's --store DIR is a plain refusal
      for (const args of [["run", "-c", f.member], ["resume", "-c", f.member], ["run", "-c", f.by]]) {
        const r = yield* assay([...args, "--store", folder, "--quiet"], { cwd: dir, killAfterMs: 60_000 })
        assert.strictEqual(r.code, 2, `${args.join(" ")}: ${r.stderr}`)
        assert.notInclude(r.stderr, "SQLITE_")
        if (args[2] === f.member) assert.include(r.stderr, `${folder} is a directory, not a store file`)
        else assert.include(r.stderr, "--store: refused in suite mode")
      }
      assert.deepStrictEqual(fs.readdirSync(folder), [], "nothing written in it")
      assert.isFalse(fs.existsSync(`${folder}.lock`), "nothing written beside it")
      // a suite's output root named as a plain store: told what it is
      assert.strictEqual((yield* assay(["run", "-c", f.by, "--quiet"], { cwd: dir, killAfterMs: 60_000 })).code, 0)
      const onRoot = yield* assay(["run", "-c", f.member, "--store", path.join(dir, "out/by"), "--quiet"], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(onRoot.code, 2, onRoot.stderr)
      assert.include(onRoot.stderr, "is a directory (a suite's output root), not a store file")
      // a new store in a folder that does not exist yet: the folder is made, as for any new store
      const fresh = path.join(dir, "new/folder/state.db")
      const made = yield* assay(["run", "-c", f.member, "--store", fresh, "--quiet"], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(made.code, 0, made.stderr)
      assert.strictEqual(pipelinesIn(fresh), 3)
      // a file that is not a store: reported (never recreated, never touched), for run and resume
      const junk = path.join(dir, "notes.db")
      fs.writeFileSync(junk, "these are notes, not a database\n".repeat(50))
      const bytes = fs.readFileSync(junk)
      for (const command of ["run", "resume"]) {
        const r = yield* assay([command, "-c", f.member, "--store", junk, "--quiet"], { cwd: dir, killAfterMs: 60_000 })
        assert.strictEqual(r.code, 1, r.stderr)
        assert.include(r.stderr, `${junk} is not a readable assay store: not an SQLite database`)
        assert.isTrue(fs.readFileSync(junk).equals(bytes), "left as it was")
      }
      assert.deepStrictEqual(fs.readdirSync(dir).filter((n) => n.startsWith("notes.db")), ["notes.db"], "no lock or journal left")
    }), 120_000)
})

describe("suite databases", () => {
  it.scoped("a plain run on a suite's database is refused (exit 2) and writes nothing; reading it is fine", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-guard")
      const f = fixture(dir)
      for (const s of [f.by, f.combined]) {
        const r = yield* assay(["run", "-c", s, "--quiet"], { cwd: dir, killAfterMs: 60_000 })
        assert.strictEqual(r.code, 0, r.stderr)
      }
      const targets = [
        path.join(dir, "out/by/experiments/alpha/state.db"),
        path.join(dir, "out/by/suite.db"),
        path.join(dir, "out/combined/state.db")
      ]
      for (const db of targets) {
        const before = { runs: runsIn(db), pipelines: pipelinesIn(db) }
        const r = yield* assay(["run", "-c", f.member, "--store", db], { cwd: dir, killAfterMs: 60_000 })
        assert.strictEqual(r.code, 2, `${db}: ${r.stderr}`)
        assert.match(r.stderr, /suite "guarded"/)
        assert.match(r.stderr, /assay run -c SUITE_FILE/)
        assert.deepStrictEqual({ runs: runsIn(db), pipelines: pipelinesIn(db) }, before, db)
        const rep = yield* assay(["report", db], { cwd: dir, killAfterMs: 60_000 })
        assert.strictEqual(rep.code, 0, rep.stderr)
      }
      // a plain store elsewhere is still a plain store
      const ok = yield* assay(["run", "-c", f.member, "--store", path.join(dir, "plain.db"), "--quiet"], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(ok.code, 0, ok.stderr)
    }), 120_000)

  it.scoped("a deleted member database: the other members run and report, a run selecting it is refused first", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-guard")
      const f = fixture(dir)
      const root = path.join(dir, "out/by")
      const first = yield* assay(["run", "-c", f.by, "--quiet"], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(first.code, 0, first.stderr)
      const beta = path.join(root, "experiments/beta/state.db")
      fs.rmSync(beta)
      const catalog = path.join(root, "suite.db")

      const alpha = yield* assay(["run", "-c", f.by, "--experiment", "alpha", "--quiet"], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(alpha.code, 0, alpha.stderr)
      assert.match(alpha.stderr, /warning: .*member "beta".*missing/)
      assert.include(alpha.stderr, beta)
      assert.notMatch(alpha.stderr, /^error/m)
      assert.isFalse(fs.existsSync(beta), "never recreated")
      assert.strictEqual(runsIn(catalog), 2)

      const rep = yield* assay(["report", root], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(rep.code, 0, rep.stderr)
      assert.include(rep.stderr, beta)
      assert.match(rep.stdout, /alpha: 3 pipeline/)
      // in the report body too (text and JSON), not only a warning on stderr
      const betaLine = rep.stdout.split("\n").find((l) => l.startsWith("  beta"))
      assert.isDefined(betaLine, rep.stdout)
      assert.include(betaLine!, `DATABASE MISSING (${beta}): reads as empty`)
      assert.notInclude(rep.stdout.split("\n").find((l) => l.startsWith("  alpha"))!, "MISSING")
      const json = yield* assay(["report", root, "--json"], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(json.code, 0, json.stderr)
      const members = JSON.parse(json.stdout).members as Array<{ experimentId: string; databaseMissing: string | null }>
      assert.deepStrictEqual(members.map((m) => [m.experimentId, m.databaseMissing]), [["alpha", null], ["beta", beta]])

      // validate refuses wherever run would (same message, exit 2), never counting beta as matching
      for (const json of [[], ["--json"]]) {
        const checked = yield* assay(["validate", "-c", f.by, ...json], { cwd: dir, killAfterMs: 60_000 })
        assert.strictEqual(checked.code, 2, checked.stdout + checked.stderr)
        assert.match(checked.stderr, /experiments\.beta: the database of member "beta".*missing.*never recreated/)
        assert.notInclude(checked.stdout, "member(s) match")
        assert.notMatch(checked.stdout, /"valid": true/)
      }
      assert.isFalse(fs.existsSync(beta), "validate never recreates it")

      for (const args of [["--experiment", "beta"], []]) {
        const refused = yield* assay(["run", "-c", f.by, ...args, "--quiet"], { cwd: dir, killAfterMs: 60_000 })
        assert.strictEqual(refused.code, 2, refused.stderr)
        assert.match(refused.stderr, /experiments\.beta: the database of member "beta".*missing/)
        assert.strictEqual(runsIn(catalog), 2, "nothing recorded")
        assert.isFalse(fs.existsSync(beta), "never recreated")
      }
    }), 120_000)
})
