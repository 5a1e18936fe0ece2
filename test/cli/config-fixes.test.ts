/**
 * Problems a new user met in experiment files, as they meet them: spawned `bin/assay`
 * processes. `validate` and `run` must refuse the same files with exit 2 (duplicate resource
 * ids, a `keyField` naming a missing field, a repeated key), and `validate --json` says
 * `"valid": true` with the absolute file. Spawns are few (each costs ~1.5 s of start-up).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

import { assay } from "../support/cli.js"

describe("validate and run refuse the same files", () => {
  it.live("duplicate ids and a missing keyField are refused by validate; a repeated key by validate and by run (exit 2)", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-config-fixes-"))
      fs.writeFileSync(path.join(dir, "rows.jsonl"), "{\"id\":\"a\",\"v\":1}\n{\"id\":\"b\",\"v\":2}\n")
      fs.writeFileSync(path.join(dir, "dup.jsonl"), "{\"id\":\"a\",\"v\":1}\n{\"id\":\"a\",\"v\":2}\n")
      fs.writeFileSync(path.join(dir, "bad.yaml"), [
        "pools: { apis: { resources: [ { id: a }, { id: a } ] } }",
        "pipeline: { name: p, tasks: [ { use: echo } ] }",
        "source: { jsonl: { path: rows.jsonl }, keyField: idd }"
      ].join("\n"))
      fs.writeFileSync(path.join(dir, "dup.yaml"), [
        "pipeline: { name: p, tasks: [ { use: echo } ] }",
        "source: { jsonl: { path: dup.jsonl }, keyField: id }"
      ].join("\n"))
      fs.writeFileSync(path.join(dir, "ok.yaml"), [
        "pipeline: { name: p, tasks: [ { use: echo } ] }",
        "source: { jsonl: { path: rows.jsonl }, keyField: id, repeats: 2 }"
      ].join("\n"))
      const [bad, dup, dupRun, ok, noStore] = yield* Effect.all([
        assay(["validate", "-c", "bad.yaml"], { cwd: dir }),
        assay(["validate", "-c", "dup.yaml"], { cwd: dir }),
        assay(["run", "-c", "dup.yaml", "--store", "dup.db"], { cwd: dir }),
        assay(["validate", "-c", "ok.yaml", "--json"], { cwd: dir }),
        assay(["run", "-c", "ok.yaml"], { cwd: dir })
      ], { concurrency: 5 })
      // no store named anywhere: the run works in memory and says that nothing is kept
      assert.strictEqual(noStore.code, 0, noStore.stderr)
      assert.include(noStore.stderr, "ok.yaml sets no run.store and no --store was given")
      assert.strictEqual(bad.code, 2, bad.stderr)
      assert.include(bad.stderr, "pools.apis.resources[1].id: duplicate resource id \"a\" in pool \"apis\"")
      assert.include(bad.stderr, "source.keyField: row 1 of rows.jsonl has no \"idd\" field (fields: id, v); did you mean \"id\"?")
      assert.strictEqual(dup.code, 2, dup.stderr)
      assert.include(dup.stderr, "source.keyField: key \"a\" appears on lines 1 and 2 of dup.jsonl")
      assert.strictEqual(dupRun.code, 2, dupRun.stderr)
      assert.include(dupRun.stderr, "source.keyField: key \"a\" appears on lines 1 and 2 of dup.jsonl")
      assert.strictEqual(ok.code, 0, ok.stderr)
      const json = JSON.parse(ok.stdout) as Record<string, any>
      assert.strictEqual(json["valid"], true)
      assert.strictEqual(json["file"], path.join(fs.realpathSync(dir), "ok.yaml"))
      assert.deepStrictEqual(json["source"]["keysChecked"], { rows: 2, wholeFile: true })
    }), 120_000)
  it.live("run.maxHandoffs written \"10\" or false: run and validate refuse it at its path with the budget's message (exit 2)", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-config-fixes-"))
      const file = (name: string, value: string) =>
        fs.writeFileSync(path.join(dir, name), [
          `run: { maxHandoffs: ${value} }`,
          "pipeline:",
          "  name: p",
          "  tasks: [ { use: echo, name: a }, { use: echo, name: b } ]",
          "  control: { rewind: { b: [a] }, maxHandoffs: 2 }",
          "source: { range: { n: 1 } }"
        ].join("\n"))
      file("quoted.yaml", "\"10\"")
      file("false.yaml", "false")
      const [quoted, off] = yield* Effect.all([
        assay(["run", "-c", "quoted.yaml", "--store", "q.db"], { cwd: dir }),
        assay(["validate", "-c", "false.yaml"], { cwd: dir })
      ], { concurrency: 2 })
      assert.strictEqual(quoted.code, 2, quoted.stderr)
      assert.include(
        quoted.stderr,
        `run.maxHandoffs: maxHandoffs must be a positive integer (an unquoted number such as 3), got the string "10" (write 10 without quotes)`
      )
      assert.notInclude(quoted.stderr, "Expected number")
      assert.isFalse(fs.existsSync(path.join(dir, "q.db")), "nothing written")
      assert.strictEqual(off.code, 2, off.stderr)
      assert.include(
        off.stderr,
        "run.maxHandoffs: maxHandoffs must be a positive integer (an unquoted number such as 3), got the boolean false"
      )
    }), 120_000)
})
