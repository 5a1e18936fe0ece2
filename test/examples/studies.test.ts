/**
 * examples/studies: the example study (6 variants x 2 repeats over 40 numbers) run through
 * `bin/assay study run` twice in two roots: it completes, the `coin` strategy never passes the
 * hard constraint (never eligible), the noiseless baseline is always right, and the seeded draws
 * make a trial's metrics the same in both roots while its two repeats differ.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, root, tempDir } from "../support/cli.js"

const study = path.join(root, "examples/studies/study.yaml")

const runIn = (dir: string) =>
  Effect.gen(function*() {
    const r = yield* assay(["study", "run", study, "--output-root", dir, "--json", "-q"])
    assert.strictEqual(r.code, 0, r.stderr)
    return JSON.parse(r.stdout.trim().split("\n").pop()!) as {
      readonly status: string
      readonly eligible: ReadonlyArray<string>
      readonly trials: ReadonlyArray<{ trialId: string; status: string; assignment: Record<string, unknown>; metrics: Record<string, number> }>
    }
  })

describe("examples/studies", () => {
  it.scoped("runs to completion; coin is never eligible; a trial's seeded metrics repeat in another root", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("study-example")
      const a = yield* runIn(path.join(dir, "a"))
      const b = yield* runIn(path.join(dir, "b"))
      assert.strictEqual(a.status, "completed")
      assert.strictEqual(a.trials.length, 12)
      for (const t of a.trials) {
        if (t.assignment.strategy === "coin") assert.notInclude(a.eligible, t.trialId)
      }
      const baseline = a.trials.filter((t) => t.assignment.strategy === "arithmetic" && t.assignment.noise === 0)
      assert.deepStrictEqual(baseline.map((t) => [t.status, t.metrics.accuracy]), [["succeeded", 1], ["succeeded", 1]])
      assert.deepStrictEqual(b.trials.map((t) => t.metrics), a.trials.map((t) => t.metrics))
      const noisy = a.trials.filter((t) => t.assignment.strategy === "arithmetic" && t.assignment.noise === 0.2)
      assert.notStrictEqual(noisy[0]!.metrics.accuracy, noisy[1]!.metrics.accuracy)
    }), 120_000)
})
