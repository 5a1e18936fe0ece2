/**
 * `assay study confirm FILE VARIANT --repeats N` through `bin/assay` (needs `npm run build`), on
 * the fixture study test/fixtures/study-export (4 variants x 2 repeats over 40 cases):
 * confirmation trials continue the repeat numbering under the same protocol version and count
 * in the report.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { nextRepeats } from "../../src/cli/StudyConfirm.js"
import { exitCodeOfStatus, namedOutcome } from "../../src/cli/StudyRun.js"
import type * as StudyCompare from "../../src/services/StudyCompare.js"
import { assay, root, tempDir } from "../support/cli.js"

const study = path.join(root, "test/fixtures/study-export/study.yaml")

describe("assay study confirm", () => {
  it("numbers confirmation repeats after the declared ones and after earlier confirmations", () => {
    assert.deepStrictEqual(nextRepeats(2, [{ variantId: "v03", repeat: 1 }, { variantId: "v03", repeat: 2 }], "v03", 2), [3, 4])
    assert.deepStrictEqual(nextRepeats(2, [{ variantId: "v03", repeat: 4 }, { variantId: "v01", repeat: 7 }], "v03", 1), [5])
    assert.deepStrictEqual(nextRepeats(3, [], "v01", 1), [4])
  })

  it("a confirmation whose trials all failed exits 1 and says so, though the study had completed (issue 16 leftovers)", () => {
    const trials = [
      { trialId: "p1-v01-r1", status: "succeeded" as const, ran: false },
      { trialId: "p1-v06-r3", status: "failed" as const, ran: true },
      { trialId: "p1-v06-r4", status: "failed" as const, ran: true }
    ]
    const line = namedOutcome(trials, ["p1-v06-r3", "p1-v06-r4"], "confirmation trial")
    assert.strictEqual(line, "0 of 2 confirmation trials succeeded (p1-v06-r3 failed, p1-v06-r4 failed): exit 1")
    assert.strictEqual(exitCodeOfStatus("completed", line !== undefined), 1)
    // every named trial succeeded, or a plain run (no trial named): the study's status decides
    assert.isUndefined(namedOutcome([{ ...trials[1]!, status: "succeeded" }], ["p1-v06-r3"], "confirmation trial"))
    assert.isUndefined(namedOutcome(trials, [], "named trial"))
    assert.strictEqual(exitCodeOfStatus("completed"), 0)
    // interrupted stays 130: resumable
    assert.strictEqual(exitCodeOfStatus("interrupted", true), 130)
  })

  it.live("a missing argument or option is refused (exit 2) saying where to read what the command takes (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      const [noRepeats, noVariant, noOut] = yield* Effect.all([
        assay(["study", "confirm", study, "v03"]),
        assay(["study", "evidence", study, "accuracy"]),
        assay(["study", "template", study])
      ], { concurrency: 2 })
      for (const [r, command] of [[noRepeats, "study confirm"], [noVariant, "study evidence"], [noOut, "study template"]] as const) {
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, `see assay ${command} --help for the arguments and options it takes`)
      }
      assert.include(noRepeats.stderr, "--repeats")
    }), 60_000)

  it.live("appends trials of the variant under version 1, runs them, and the report compares them", () =>
    Effect.scoped(Effect.gen(function*() {
      const out = yield* tempDir("study-confirm")
      const never = yield* assay(["study", "confirm", study, "v03", "--repeats", "1", "--output-root", out])
      assert.strictEqual(never.code, 2)
      assert.include(never.stderr, "never run")
      const ran = yield* assay(["study", "run", study, "--output-root", out, "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)

      const c1 = yield* assay(["study", "confirm", study, "v03", "--repeats", "2", "--output-root", out, "--json"], { killAfterMs: 120_000 })
      assert.strictEqual(c1.code, 0, c1.stderr)
      const r1 = JSON.parse(c1.stdout) as { version: number; trials: Array<{ trialId: string; ran: boolean; status: string }> }
      assert.strictEqual(r1.version, 1)
      assert.deepStrictEqual(r1.trials.filter((t) => t.ran).map((t) => [t.trialId, t.status]), [["p1-v03-r3", "succeeded"], ["p1-v03-r4", "succeeded"]])
      const c2 = yield* assay(["study", "confirm", study, "v03", "--repeats", "1", "--output-root", out, "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(c2.code, 0, c2.stderr)
      assert.include(c2.stdout, "p1-v03-r5 succeeded")

      // a later plain run keeps them (nothing to run) and the report counts them
      const again = yield* assay(["study", "run", study, "--output-root", out, "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(again.code, 0, again.stderr)
      // resume and report tally the same trials, the confirmations among them (tester16 F10.1:
      // resume said 12 of 18 where report said 14 of 20)
      const resumed = yield* assay(["study", "resume", study, "--output-root", out, "--json", "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      const rj = JSON.parse(resumed.stdout) as { reason: string; trials: Array<{ trialId: string; status: string }> }
      const json = yield* assay(["study", "report", study, "--output-root", out, "--format", "json"])
      assert.strictEqual(json.code, 0, json.stderr)
      const c = JSON.parse(json.stdout) as StudyCompare.StudyComparison
      assert.strictEqual(c.version, 1)
      const v03 = c.variants.find((v) => v.variantId === "v03")!
      assert.deepStrictEqual(v03.trials.map((t) => [t.trialId, t.compared]), [
        ["p1-v03-r1", true], ["p1-v03-r2", true], ["p1-v03-r3", true], ["p1-v03-r4", true], ["p1-v03-r5", true]
      ])
      assert.strictEqual(v03.succeeded, 5)
      assert.strictEqual(v03.values.accuracy!.perRepeat.filter((x) => x !== null).length, 5)
      const v04 = c.variants.find((v) => v.variantId === "v04")!
      assert.strictEqual(v04.succeeded, 2)
      const reported = c.variants.flatMap((v) => v.trials.map((t) => t.trialId)).sort()
      assert.deepStrictEqual(rj.trials.map((t) => t.trialId).sort(), reported)
      const succeeded = c.variants.reduce((n, v) => n + v.succeeded, 0)
      assert.include(rj.reason, `${succeeded} of ${reported.length} trials succeeded`)

      const unknown = yield* assay(["study", "confirm", study, "v9", "--repeats", "1", "--output-root", out])
      assert.strictEqual(unknown.code, 2)
      assert.include(unknown.stderr, "unknown variant \"v9\"")
      const zero = yield* assay(["study", "confirm", study, "v03", "--repeats", "0", "--output-root", out])
      assert.strictEqual(zero.code, 2)
      assert.include(zero.stderr, "--repeats")
    })), 240_000)
})
