/**
 * `assay study report|evidence` through `bin/assay` (needs `npm run build`), on the example
 * study (examples/studies: 2 strategies x 3 noise levels x 2 repeats over 40 numbers) run into
 * a temporary output root: the three formats, the evidence of a number, and the refusals.
 * The study runs once, before the tests (one output root they only read: `study report`,
 * `evidence`, `export` and `report` write nothing there); the changed study files each test
 * writes go in its own directory.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as nodeFs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import type * as StudyCompare from "../../src/services/StudyCompare.js"
import { assay, root, tempDir } from "../support/cli.js"

const study = path.join(root, "examples/studies/study.yaml")

/** The output root the study ran into (once, in `beforeAll`). */
const out = nodeFs.mkdtempSync(path.join(os.tmpdir(), "assay-study-report-"))
beforeAll(async () => {
  const ran = await Effect.runPromise(assay(["study", "run", study, "--output-root", out, "-q"], { killAfterMs: 120_000 }))
  assert.strictEqual(ran.code, 0, ran.stderr)
}, 240_000)
afterAll(() => nodeFs.rmSync(out, { recursive: true, force: true }))

describe("assay study report and evidence", () => {
  it.live("issue 16 trial: a version's report uses the objectives frozen with it, not the file's current ones, and says so", () =>
    Effect.scoped(Effect.gen(function*() {
      const own = yield* tempDir("study-report-frozen")
      // the same study with other objectives (the experiment stays where its task code resolves)
      const changed = path.join(own, "changed.yaml")
      nodeFs.writeFileSync(
        changed,
        nodeFs.readFileSync(study, "utf8")
          .replace("protocol: { experiment: ./experiment.yaml }", `protocol: { experiment: ${JSON.stringify(path.join(root, "examples/studies/experiment.yaml"))} }`)
          .replace(/objectives:\n(  - .*\n)+/, "objectives:\n  - { metric: calls, direction: minimize }\n")
      )
      const json = yield* assay(["study", "report", changed, "--output-root", out, "--format", "json"])
      assert.strictEqual(json.code, 0, json.stderr)
      const c = JSON.parse(json.stdout) as StudyCompare.StudyComparison
      assert.deepStrictEqual(c.objectives.map((o) => [o.metric, o.direction]), [["accuracy", "maximize"]])
      const text = yield* assay(["study", "report", changed, "--output-root", out])
      assert.strictEqual(text.code, 0, text.stderr)
      assert.include(text.stdout, "objectives (as frozen with protocol version 1): accuracy ↑ [>= 0.7]")
    })), 240_000)

  it.live("report in text, markdown and JSON; evidence lists the trials, pipelines and worst cases", () =>
    Effect.scoped(Effect.gen(function*() {
      const own = yield* tempDir("study-report")
      const never = yield* assay(["study", "report", study, "--output-root", own])
      assert.strictEqual(never.code, 2, never.stderr)
      assert.include(never.stderr, "has never run")

      const text = yield* assay(["study", "report", study, "--output-root", out, "--seed", "3"])
      assert.strictEqual(text.code, 0, text.stderr)
      const sections = ["DESIGN", "RUN", "COMPARE", "EVIDENCE", "CONCLUSION"].map((s) => text.stdout.indexOf(`\n${s}\n`))
      assert.isTrue(sections.every((i, k) => i > 0 && (k === 0 || i > sections[k - 1]!)), text.stdout)
      assert.include(text.stdout, "baseline: v01 (strategy=arithmetic, noise=0)")
      assert.include(text.stdout, "v01 is best for the declared objectives and constraints")

      const md = yield* assay(["study", "report", study, "--output-root", out, "--format", "markdown"])
      assert.strictEqual(md.code, 0, md.stderr)
      for (const s of ["## Design", "## Run", "## Compare", "## Evidence", "## Conclusion", "| variant | accuracy"]) assert.include(md.stdout, s)

      const json = yield* assay(["study", "report", study, "--output-root", out, "--format", "json", "--seed", "3"])
      assert.strictEqual(json.code, 0, json.stderr)
      const c = JSON.parse(json.stdout) as StudyCompare.StudyComparison
      assert.strictEqual(c.studyId, "multiples")
      assert.strictEqual(c.seed, 3)
      assert.strictEqual(c.baseline, "v01")
      assert.deepStrictEqual(c.variants.map((v) => v.variantId), ["v01", "v02", "v03", "v04", "v05", "v06"])
      assert.deepStrictEqual(c.conclusion.candidates, ["v01"])
      assert.strictEqual(c.conclusion.wording, "best for the declared objectives and constraints")
      // the coin variants break the hard constraint accuracy >= 0.7: never compared
      for (const v of c.variants.slice(3)) {
        assert.strictEqual(v.succeeded, 0)
        assert.isAbove(v.breaches.length, 0)
      }
      const v02 = c.variants[1]!
      assert.strictEqual(v02.values.accuracy!.perRepeat.length, 2)
      assert.strictEqual(v02.vsBaseline.accuracy!.paired!.cases, 40)
      assert.isNotNull(v02.vsBaseline.accuracy!.mcnemar)
      // the same seed gives the same numbers
      const again = yield* assay(["study", "report", study, "--output-root", out, "--format", "json", "--seed", "3"])
      assert.strictEqual(again.stdout, json.stdout)

      const ev = yield* assay(["study", "evidence", study, "accuracy", "v02", "--output-root", out, "--worst", "2", "--best", "1", "--json"])
      assert.strictEqual(ev.code, 0, ev.stderr)
      const e = JSON.parse(ev.stdout) as StudyCompare.Evidence
      assert.deepStrictEqual(e.trials.map((t) => [t.trialId, t.compared, t.pipelines.length]), [["p1-v02-r1", true, 40], ["p1-v02-r2", true, 40]])
      assert.strictEqual(e.worstCases.length, 2)
      assert.strictEqual(e.bestCases.length, 1)
      assert.isAtMost(e.worstCases[0]!.value, e.bestCases[0]!.value)
      for (const w of e.worstCases) for (const p of w.pipelineIds) assert.isTrue(e.trials.some((t) => t.pipelines.includes(p)))
      const evText = yield* assay(["study", "evidence", study, "accuracy", "v02", "--output-root", out])
      assert.strictEqual(evText.code, 0, evText.stderr)
      assert.include(evText.stdout, "p1-v02-r1 r1 succeeded")
      assert.include(evText.stdout, "worst cases:")

      const unknown = yield* assay(["study", "evidence", study, "acuracy", "v02", "--output-root", out])
      assert.strictEqual(unknown.code, 2)
      assert.include(unknown.stderr, "did you mean \"accuracy\"?")
      const noVariant = yield* assay(["study", "evidence", study, "accuracy", "v99", "--output-root", out])
      assert.strictEqual(noVariant.code, 2)
      const noVersion = yield* assay(["study", "report", study, "--output-root", out, "--protocol-version", "4"])
      assert.strictEqual(noVersion.code, 2)
      assert.include(noVersion.stderr, "no protocol version 4")

      // the study file changed since (one more noise value: its expansion would number 8
      // variants, v04 = arithmetic/0.3): version 1's views still label each trial with the
      // variant it ran, read from the frozen protocol (v04 ran coin at noise 0)
      const grown = path.join(own, "grown.yaml")
      yield* Effect.sync(() =>
        nodeFs.writeFileSync(
          grown,
          nodeFs.readFileSync(study, "utf8").replace("./experiment.yaml", path.join(root, "examples/studies/experiment.yaml")).replace("end: 0.2", "end: 0.3")
        )
      )
      const changed = yield* assay(["study", "report", grown, "--output-root", out, "--format", "json", "--seed", "3"])
      assert.strictEqual(changed.code, 0, changed.stderr)
      assert.include(changed.stderr, "this reports version 1")
      const cc = JSON.parse(changed.stdout) as StudyCompare.StudyComparison
      assert.deepStrictEqual(cc.variants.map((v) => [v.variantId, v.assignment]), c.variants.map((v) => [v.variantId, v.assignment]))
      assert.deepStrictEqual(cc.variants[3]!.assignment, { strategy: "coin", noise: 0 })
      assert.deepStrictEqual(cc.variants.map((v) => v.trials.length), [2, 2, 2, 2, 2, 2])
      const changedText = yield* assay(["study", "report", grown, "--output-root", out])
      assert.include(changedText.stdout, "v04: strategy=coin, noise=0 ")
      const exported = yield* assay(["study", "export", grown, "--summary", "--output-root", out])
      assert.strictEqual(exported.code, 0, exported.stderr)
      const summary = JSON.parse(exported.stdout) as { variants: ReadonlyArray<{ variantId: string; assignment: unknown }> }
      assert.deepStrictEqual(summary.variants.map((v) => [v.variantId, v.assignment]), c.variants.map((v) => [v.variantId, v.assignment]))
      const changedEv = yield* assay(["study", "evidence", grown, "accuracy", "v04", "--output-root", out, "--json"])
      assert.strictEqual(changedEv.code, 0, changedEv.stderr)
      assert.deepStrictEqual((JSON.parse(changedEv.stdout) as StudyCompare.Evidence).trials.map((t) => t.trialId), ["p1-v04-r1", "p1-v04-r2"])

      // `assay report ROOT` on the study's root: a header names the study and the command that reports it
      const suiteView = yield* assay(["report", out])
      assert.strictEqual(suiteView.code, 0, suiteView.stderr)
      const lines = suiteView.stdout.split("\n")
      assert.match(lines[0]!, /^Study multiples \(protocol version 1 of 1, digest [0-9a-f]{12}\): completed$/)
      assert.match(suiteView.stdout, /\n {2}trials \(version 1\): succeeded \d+ · failed \d+\n/)
      // the command names the root given (the file's output.root is another)
      assert.include(suiteView.stdout, `the study's comparison, trials and limitations: assay study report ${study} --output-root ${out}`)
      assert.isAbove(suiteView.stdout.indexOf("\nSuite multiples (combined)"), 0, "the suite view follows")
      const suiteJson = yield* assay(["report", out, "--json"])
      assert.strictEqual(suiteJson.code, 0, suiteJson.stderr)
      const sj = JSON.parse(suiteJson.stdout)
      assert.deepStrictEqual([sj.study.studyId, sj.study.version, sj.study.status, sj.study.file], ["multiples", 1, "completed", study])
      assert.strictEqual(sj.study.trials.succeeded + sj.study.trials.failed, 12)
      assert.strictEqual(sj.study.trials.succeeded, c.variants.reduce((n, v) => n + v.succeeded, 0))
      assert.strictEqual(sj.study.command, `assay study report ${study} --output-root ${out}`)
      assert.isDefined(sj.suite, "the suite view is kept")
    })), 240_000)

  it.live("the help lists report and evidence", () =>
    Effect.gen(function*() {
      const help = yield* assay(["study", "--help"])
      assert.include(help.stdout, "report")
      assert.include(help.stdout, "evidence")
      const sub = yield* assay(["study", "report", "--help"])
      assert.include(sub.stdout, "--format")
    }))
})
