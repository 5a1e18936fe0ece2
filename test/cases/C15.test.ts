/**
 * C15 of ../shared/cases/README.md: keys that JSON numbers cannot hold. `keyField: id` with
 * ids beyond 2^53 that JSON.parse rounds to one double: the keys are kept exactly as the file
 * writes them, no error names a key that is not in the file, and `validate` and `run` warn
 * that tasks receive the number rounded. Through the real `bin/assay`.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, tempDir, write } from "../support/cli.js"

const experiment = (rows: string, store: string) =>
  JSON.stringify({
    run: { store },
    pipeline: { name: "c15", tasks: [{ use: "echo" }] },
    source: { jsonl: { path: rows }, keyField: "id" }
  })

describe("C15: keys beyond 2^53", () => {
  it.scopedLive("two ids JSON.parse rounds alike: validate and run keep both keys as written, and warn", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      write(dir, "big.jsonl", `{"id": 1311112222333344445}\n{"id": 1311112222333344446}\n`)
      const store = path.join(dir, "c15.db")
      const config = write(dir, "c15.json", experiment("big.jsonl", store))

      const validated = yield* assay(["validate", "-c", config])
      assert.strictEqual(validated.code, 0, validated.stdout + validated.stderr)
      assert.include(validated.stdout, "keys: all 2 rows have a distinct id")
      assert.include(validated.stderr, "warning: big.jsonl line 1: id is 1311112222333344445, an integer beyond 2^53")
      assert.include(validated.stderr, "rounded to 1311112222333344500")
      assert.include(validated.stderr, `write it as a string ("1311112222333344445")`)
      const json = JSON.parse((yield* assay(["validate", "-c", config, "--json"])).stdout)
      assert.strictEqual(json.source.unsafeIntegers.rows, 2)
      assert.lengthOf(json.warnings, 1)

      const ran = yield* assay(["run", "-c", config, "--summary", "json"])
      assert.strictEqual(ran.code, 0, ran.stdout + ran.stderr)
      assert.include(ran.stderr, "warning: big.jsonl line 1: id is 1311112222333344445")
      const report = JSON.parse(ran.stdout.trim().split("\n").at(-1)!)
      assert.strictEqual(report.stats.pipelines.total, 2)
      const db = new Database(store, { readonly: true })
      try {
        const rows = db.prepare("SELECT key, pipeline_id FROM pipelines ORDER BY key").all() as Array<{ key: string; pipeline_id: string }>
        assert.deepStrictEqual(rows.map((r) => r.key), ["1311112222333344445", "1311112222333344446"])
        assert.deepStrictEqual(rows.map((r) => r.pipeline_id), ["1311112222333344445", "1311112222333344446"])
      } finally {
        db.close()
      }
      // the same keys again: both found done, nothing re-run
      const again = yield* assay(["run", "-c", config, "--summary", "json"])
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(JSON.parse(again.stdout.trim().split("\n").at(-1)!).skipped, 2)
    }), { timeout: 120_000 })

  it.scopedLive("a big key that really repeats is refused naming the key as written and both lines (exit 2, no store)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      write(dir, "dup.jsonl", `{"id": 1311112222333344445}\n{"id": 1311112222333344446}\n{"id": 1311112222333344445}\n`)
      const store = path.join(dir, "dup.db")
      const config = write(dir, "dup.json", experiment("dup.jsonl", store))
      for (const command of ["validate", "run"]) {
        const r = yield* assay([command, "-c", config])
        assert.strictEqual(r.code, 2, `${command}: ${r.stdout}${r.stderr}`)
        assert.include(r.stderr, `source.keyField: key "1311112222333344445" appears on lines 1 and 3 of dup.jsonl`)
        // no error names a key that is not in the file
        assert.notInclude(r.stderr, "1311112222333344500\"")
      }
      assert.isFalse(fs.existsSync(store))
    }), { timeout: 60_000 })
})
