/**
 * Fixes of a fresh user's findings on the cluster CLI (tester17af):
 *
 * - `study run|resume|confirm --max-admitted 0` (or negative) is refused as `run --engine
 *   cluster` refuses it (exit 2, `--max-admitted must be an integer >= 1 (got 0)`).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, root } from "../support/cli.js"

const study = path.join(root, "examples/studies/study.yaml")
const url = "postgres://nobody@127.0.0.1:1/none"

describe("study --max-admitted", () => {
  it.live("0 or a negative value is refused (exit 2) by study run, resume and confirm", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["study", "run", study, "--max-admitted", "0"], "0"],
        [["study", "resume", study, "--max-admitted", "-3"], "-3"],
        [["study", "confirm", study, "v01", "--repeats", "2", "--max-admitted", "0"], "0"]
      ]
      for (const [argv, got] of cases) {
        const r = yield* assay([...argv, "--engine", "cluster", "--database", url])
        assert.strictEqual(r.code, 2, `${argv.join(" ")}: ${r.stdout}${r.stderr}`)
        assert.include(r.stdout + r.stderr, `--max-admitted must be an integer >= 1 (got ${got})`)
      }
    }), 120_000)
})
