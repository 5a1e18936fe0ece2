/**
 * Log lines go to standard error; standard output carries only what a command prints (issue
 * 18: `run --summary json` on a readOnly cache read from a snapshot printed Effect's log line,
 * `timestamp=… level=INFO … message="call cache …: read a snapshot …"`, on stdout before the
 * JSON). Each command asked for JSON on stdout is run through `bin/assay` and its stdout parsed.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as NodePath from "node:path"
import { assay, tempDir, write } from "../support/cli.js"

/** A WAL-mode file without its -wal and -shm (a copy of a closed cache): a readOnly run reads a snapshot and logs it. */
const closedWalCache = (dir: string): string => {
  const cache = NodePath.join(dir, "cache.db")
  const d = new Database(cache)
  d.pragma("journal_mode = WAL")
  d.exec("CREATE TABLE t (x)")
  d.close()
  return cache
}

describe("stdout carries only the JSON asked for", () => {
  it.scopedLive("run --summary json, report --json, export to -, validate --json: stdout parses, the log line is on stderr", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("stdout-json")
      const cache = closedWalCache(dir)
      const exp = write(dir, "exp.json", {
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 2 } },
        run: { cache: { mode: "readOnly", db: cache } }
      })

      const run = yield* assay(["run", "-c", exp, "--store", "s.db", "--summary", "json"], { cwd: dir })
      assert.strictEqual(run.code, 0, run.stderr)
      // the log line that came before the JSON (the snapshot of the readOnly cache) is on stderr
      assert.include(run.stderr, "read a snapshot of the file")
      assert.notInclude(run.stdout, "level=")
      const summary = JSON.parse(run.stdout) as { status: string }
      assert.strictEqual(summary.status, "completed")

      const report = yield* assay(["report", "s.db", "--json"], { cwd: dir })
      assert.strictEqual(report.code, 0, report.stderr)
      assert.isArray((JSON.parse(report.stdout) as { runs: ReadonlyArray<unknown> }).runs)

      const exported = yield* assay(["export", "s.db", "-", "--format", "json"], { cwd: dir })
      assert.strictEqual(exported.code, 0, exported.stderr)
      assert.lengthOf(JSON.parse(exported.stdout) as ReadonlyArray<unknown>, 2)

      const validate = yield* assay(["validate", "-c", exp, "--json"], { cwd: dir })
      assert.strictEqual(validate.code, 0, validate.stderr)
      assert.strictEqual((JSON.parse(validate.stdout) as { valid: boolean }).valid, true)
    }))
})
