/**
 * A refused suite run leaves the root as it was (issue 14, a fresh user's finding): what the run
 * would refuse — a reused `--run-id`, a changed member definition, input rows edited since they
 * ran — is checked on a read-only open before any database is opened for writing, so no file of
 * the root changes (bytes and modification time), the `store_writer` rows included. And
 * `assay report ROOT/suite.db` names the catalog for what it is and gives the command.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, query, tempDir, write } from "../support/cli.js"

const opts = (cwd: string) => ({ cwd, killAfterMs: 60_000 })

/** Every file under `dir` (recursively): its sha256 and modification time. */
const snapshot = (dir: string): Record<string, string> => {
  const out: Record<string, string> = {}
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else {
        const st = fs.statSync(p)
        out[path.relative(dir, p)] = `${crypto.createHash("sha256").update(fs.readFileSync(p)).digest("hex")} ${st.mtimeMs}`
      }
    }
  }
  walk(dir)
  return out
}

const writers = (root: string): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  const dbs = [path.join(root, "suite.db"), ...fs.readdirSync(path.join(root, "experiments")).map((m) => path.join(root, "experiments", m, "state.db"))]
  for (const db of dbs) out[path.relative(root, db)] = query(db, "SELECT pid, host, run_id, since FROM store_writer")
  return out
}

describe("a refused suite run touches nothing", () => {
  it.scoped("reused --run-id, changed definition, edited rows: exit 2, every file of the root unchanged", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("suite-refused")
      const rows = (texts: ReadonlyArray<string>) => write(dir, "rows.jsonl", texts.map((t) => JSON.stringify({ text: t })).join("\n") + "\n")
      rows(["a", "b", "c"])
      const member = (delay = "5 millis") =>
        write(dir, "a.json", { pipeline: { name: "p", tasks: [{ use: "delay", args: [delay] }] }, source: { jsonl: { path: "rows.jsonl" } } })
      member()
      const suite = write(dir, "suite.json", {
        suite: { id: "refused" },
        output: { root: "out", layout: "byExperiment" },
        experiments: { alpha: { config: "a.json" }, beta: { config: "a.json" } }
      })
      const root = path.join(dir, "out")
      const first = yield* assay(["run", "-c", suite, "--run-id", "first", "--quiet"], opts(dir))
      assert.strictEqual(first.code, 0, first.stderr)
      const files = snapshot(root)
      const writerRows = writers(root)
      assert.isAbove(Object.keys(files).length, 2)

      const refusals: ReadonlyArray<readonly [string, () => void, ReadonlyArray<string>, RegExp]> = [
        ["a reused --run-id", () => member(), ["--run-id", "first"], /--run-id: run id first already exists/],
        ["a changed definition", () => member("6 millis"), [], /experiments\.alpha: .*definition/],
        ["input rows edited since they ran", () => {
          member()
          rows(["a", "b, edited", "c"])
        }, [], /experiments\.alpha: the member's source no longer yields 1/]
      ]
      for (const [what, edit, extra, message] of refusals) {
        edit()
        // let a write, if any happened, show in the modification time
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
        const r = yield* assay(["run", "-c", suite, ...extra, "--quiet"], opts(dir))
        assert.strictEqual(r.code, 2, `${what}: ${r.stderr}`)
        assert.match(r.stderr, message, what)
        assert.deepStrictEqual(snapshot(root), files, `${what}: no file of the root changed`)
        assert.deepStrictEqual(writers(root), writerRows, `${what}: the store_writer rows are as they were`)
      }
      // accepted, the edited rows run (the root is written then)
      const accepted = yield* assay(["run", "-c", suite, "--accept-changed-rows", "--quiet"], opts(dir))
      assert.strictEqual(accepted.code, 0, accepted.stderr)

      // `report ROOT/suite.db`: the catalog holds no pipelines; the suite's report is shown, and
      // the note names the command to give next time
      const byRoot = yield* assay(["report", root], opts(dir))
      const byCatalog = yield* assay(["report", path.join(root, "suite.db")], opts(dir))
      assert.strictEqual(byCatalog.code, 0, byCatalog.stderr)
      assert.include(byCatalog.stderr, "is the catalog database of a suite")
      assert.include(byCatalog.stderr, `assay report ${root}`)
      assert.strictEqual(byCatalog.stdout, byRoot.stdout)
      assert.match(byCatalog.stdout, /alpha/)
      assert.match(byCatalog.stdout, /beta/)
    }), 120_000)
})
