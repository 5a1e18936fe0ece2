/**
 * C15–C17 of ../shared/cases/README.md: edge inputs that must not change an outcome, through
 * the real `bin/assay` as a user meets them.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, tempDir, write } from "../support/cli.js"

const echoExperiment = (source: unknown, store: string) =>
  JSON.stringify({
    run: { store },
    pipeline: { name: "edges", tasks: [{ use: "echo" }] },
    source
  })

describe("edge inputs (C15–C17)", () => {
  it.scopedLive("C17a: an empty source is not a silent success (validate warns, run exits 1 and says so)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      write(dir, "rows.jsonl", "\n\n")
      const config = write(dir, "empty.json", echoExperiment({ jsonl: { path: "rows.jsonl" } }, path.join(dir, "s.db")))
      const validated = yield* assay(["validate", "-c", config])
      assert.strictEqual(validated.code, 0, validated.stderr)
      assert.include(validated.stderr, "warning: the source produced no rows")
      assert.include(validated.stderr, "rows.jsonl")
      const json = yield* assay(["validate", "-c", config, "--json"])
      assert.strictEqual(JSON.parse(json.stdout).sourceEmpty, true)

      const ran = yield* assay(["run", "-c", config])
      assert.strictEqual(ran.code, 1, ran.stdout + ran.stderr)
      assert.include(ran.stderr, "the source produced no rows")
      assert.include(ran.stderr, "nothing ran")

      // not for a source with rows, nor for --limit 0 (the user asked for none)
      write(dir, "one.jsonl", `{"x":1}\n`)
      const one = write(dir, "one.json", echoExperiment({ jsonl: { path: "one.jsonl" } }, path.join(dir, "one.db")))
      const fine = yield* assay(["validate", "-c", one])
      assert.notInclude(fine.stderr, "no rows")
      assert.strictEqual((yield* assay(["run", "-c", one])).code, 0)
      // a second run finds the row done (skipped): still a success
      assert.strictEqual((yield* assay(["run", "-c", one])).code, 0)
      assert.strictEqual((yield* assay(["run", "-c", one, "--limit", "0"])).code, 0)
    }), { timeout: 60_000 })
})

describe("config mistakes read plainly (issue 21)", () => {
  it.scopedLive("a string args, two args to flaky, and {value} inside an interpreter's code: each named with its fix (exit 2)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const config = write(dir, "bad.yaml", [
        "pipeline:",
        "  name: plain",
        "  tasks:",
        "    - use: shellRun",
        "      args: \"echo {value}\"",
        "    - use: flaky",
        "      args: [2, 3]",
        "    - use: shellRun",
        "      name: inline",
        "      args: [[\"bash\", \"-c\", \"echo {value}\"]]",
        "source: { range: { n: 2 } }",
        ""
      ].join("\n"))
      for (const command of ["validate", "run"]) {
        const r = yield* assay([command, "-c", config])
        assert.strictEqual(r.code, 2, r.stdout + r.stderr)
        // the string form: what args is, and the argv form written out for this command
        assert.include(r.stderr, `pipeline.tasks[0].args: is a list of the task's arguments, and shellRun's first argument is the command`)
        assert.include(r.stderr, `args: [["echo","{value}"]]`)
        assert.include(r.stderr, "pipeline.tasks[1].args: flaky takes one argument, how many attempts fail before one succeeds; got 2 arguments: [2,3]")
        assert.include(r.stderr, "pipeline.tasks[2].args[0][2]: the code bash -c runs contains {value}")
      }
    }), { timeout: 60_000 })
})
