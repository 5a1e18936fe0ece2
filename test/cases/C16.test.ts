/**
 * C16 of ../shared/cases/README.md: resume after the definition changed. A jsonl source
 * without keyField; `run`; one task option changes (`delay`'s duration); then `validate` and
 * `resume` say, before anything runs, that none of the stored pipelines matches the new
 * definition and that all will start from their seed. Through the real `bin/assay`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, tempDir, write } from "../support/cli.js"

const config = (duration: string, keyed: boolean) =>
  [
    "run: { store: c16.db }",
    "pipeline:",
    "  name: c16",
    "  tasks:",
    "    - use: delay",
    `      args: ["${duration}"]`,
    `source: { jsonl: { path: rows.jsonl }${keyed ? ", keyField: id" : ""} }`,
    ""
  ].join("\n")

const specOf = (stdout: string): string => /\(spec ([0-9a-f]{32})/.exec(stdout)![1]!

describe("C16: resume after the definition changed", () => {
  it.scopedLive("validate and resume say that 0 of 10 stored pipelines match and 10 start from their seed, before the run", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      write(dir, "rows.jsonl", Array.from({ length: 10 }, (_, i) => JSON.stringify({ id: i, text: `row ${i}` })).join("\n") + "\n")
      const file = write(dir, "c16.yaml", config("1 millis", false))
      const first = yield* assay(["run", "-c", file, "--quiet"])
      assert.strictEqual(first.code, 0, first.stderr)
      assert.notInclude(first.stderr, "stored pipelines", "a fresh store: nothing to say")
      const oldSpec = specOf((yield* assay(["validate", "-c", file])).stdout)
      // the same definition again: an ordinary resume, nothing to say
      const same = yield* assay(["resume", "-c", file, "--quiet"])
      assert.strictEqual(same.code, 0)
      assert.notInclude(same.stderr, "stored pipelines")

      write(dir, "c16.yaml", config("2 millis", false))
      const validated = yield* assay(["validate", "-c", file])
      assert.strictEqual(validated.code, 0, validated.stderr)
      const newSpec = specOf(validated.stdout)
      assert.notStrictEqual(newSpec, oldSpec)
      const expected = (command: string, would: string, where: string) =>
        `${command}: 0 of 10 stored pipelines${where} match this definition (spec ${newSpec.slice(0, 8)}); ` +
        `10 ${would}start from their seed; the store also holds 10 pipelines of another definition (spec ${oldSpec.slice(0, 8)})`
      assert.include(validated.stderr, expected("validate", "would ", " in c16.db"))
      const json = JSON.parse((yield* assay(["validate", "-c", file, "--json"])).stdout)
      assert.deepStrictEqual(json.store, {
        path: path.join(dir, "c16.db"),
        specDigest: newSpec,
        stored: 10,
        matching: 0,
        otherDefinitions: [{ specDigest: oldSpec, pipelines: 10 }]
      })
      // --store names another store explicitly; a missing one is said, not an error
      const missing = yield* assay(["validate", "-c", file, "--store", path.join(dir, "nope.db")])
      assert.strictEqual(missing.code, 0)
      assert.include(missing.stderr, "no store at")
      assert.isFalse(fs.existsSync(path.join(dir, "nope.db")), "validate creates no store")

      const resumed = yield* assay(["resume", "-c", file, "--summary", "json"])
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      // said on stderr before the run started (the first line), and true: 10 new pipelines ran
      assert.strictEqual(resumed.stderr.split("\n")[0], expected("resume", "will ", ""))
      const report = JSON.parse(resumed.stdout.trim().split("\n").at(-1)!)
      assert.strictEqual(report.stats.pipelines.total, 10)
      assert.strictEqual(report.skipped, 0)
      // afterwards both definitions are stored: 10 of 20 match
      const after = yield* assay(["resume", "-c", file, "--quiet"])
      assert.include(after.stderr, `resume: 10 of 20 stored pipelines match this definition (spec ${newSpec.slice(0, 8)})`)
    }), { timeout: 180_000 })

  it.scopedLive("a keyed source: the notice says a stored key under another definition is an identity conflict, and it is (exit 2)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      write(dir, "rows.jsonl", Array.from({ length: 4 }, (_, i) => JSON.stringify({ id: `k${i}` })).join("\n") + "\n")
      const file = write(dir, "c16.yaml", config("1 millis", true))
      assert.strictEqual((yield* assay(["run", "-c", file, "--quiet"])).code, 0)
      write(dir, "c16.yaml", config("2 millis", true))
      const resumed = yield* assay(["resume", "-c", file, "--quiet"])
      assert.include(resumed.stderr.split("\n")[0]!, "resume: 0 of 4 stored pipelines match this definition")
      assert.include(resumed.stderr, "identity conflict (exit 2)")
      assert.strictEqual(resumed.code, 2, resumed.stderr)
    }), { timeout: 120_000 })
})
