/**
 * `assay study export FILE --summary` through `bin/assay` (needs `npm run build`), on the fixture
 * study test/fixtures/study-export (2 prompts x 2 levels x 2 repeats over 40 cases whose outputs
 * carry the prompt's and the case's text): the summary is redacted unless --include-content.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type * as StudyExport from "../../src/cli/StudyExport.js"
import { assay, root, tempDir } from "../support/cli.js"

const study = path.join(root, "test/fixtures/study-export/study.yaml")
const prompts = ["QUICK-PROMPT-TEXT answer fast", "CAREFUL-PROMPT-TEXT be careful and thorough, a mistake costs $5"]

describe("assay study export --summary", () => {
  it.live("no prompt, output or case text without --include-content; all of them with it", () =>
    Effect.scoped(Effect.gen(function*() {
      const out = yield* tempDir("study-export")
      const runRoot = path.join(out, "root")
      const ran = yield* assay(["study", "run", study, "--output-root", runRoot, "-q"], { killAfterMs: 120_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)

      const plain = yield* assay(["study", "export", study, "--summary", "--output-root", runRoot])
      assert.strictEqual(plain.code, 0, plain.stderr)
      for (const p of prompts) assert.notInclude(plain.stdout, p.split(" ")[0]!)
      assert.notInclude(plain.stdout, "SECRET-CASE-TEXT")
      assert.notInclude(plain.stdout, "quarterly invoice")
      const s = JSON.parse(plain.stdout) as StudyExport.StudySummary
      assert.strictEqual(s.format, "assay.study-summary/v1")
      assert.strictEqual(s.study.id, "export-fixture")
      assert.strictEqual(s.protocol.version, 1)
      assert.match(s.protocol.digest, /^[0-9a-f]{32}$/)
      assert.deepStrictEqual(Object.keys(s.protocol.parts).sort(), ["baseline", "budget", "experiment", "metrics", "modules", "objectives", "repeats", "stop", "variables"])
      const prompt = s.variables.find((v) => v.name === "prompt")!
      assert.deepStrictEqual((prompt.values as Array<{ name: string }>).map((v) => v.name), ["quick", "careful"])
      assert.isTrue((prompt.values as Array<{ digest: string }>).every((v) => /^[0-9a-f]{32}$/.test(v.digest)))
      assert.deepStrictEqual(s.variables.find((v) => v.name === "level")!.values, [1, 2])
      assert.deepStrictEqual(s.variants.map((v) => v.variantId), ["v01", "v02", "v03", "v04"])
      const v03 = s.variants[2]!
      assert.deepStrictEqual(v03.assignment, { prompt: "careful", level: 1 })
      assert.strictEqual(v03.values.accuracy!.perRepeat.length, 2)
      assert.isNotNull(v03.values.accuracy!.interval)
      assert.strictEqual(v03.vsBaseline.accuracy!.paired!.cases, 40)
      assert.isBoolean(v03.pareto.strict)
      assert.isAbove(s.conclusion.candidates.length, 0)
      assert.isUndefined(s.content)

      const file = path.join(out, "sub", "summary.json")
      const full = yield* assay(["study", "export", study, "--summary", "--include-content", "--out", file, "--output-root", runRoot])
      assert.strictEqual(full.code, 0, full.stderr)
      assert.strictEqual(full.stdout, "")
      const text = fs.readFileSync(file, "utf8")
      for (const p of prompts) assert.include(text, p)
      assert.include(text, "SECRET-CASE-TEXT")
      const c = JSON.parse(text) as StudyExport.StudySummary
      assert.isAbove(c.content!.cases.length, 0)
      // one pipeline per repeat of the case, each with its one task output
      assert.isTrue(c.content!.cases.every((k) => k.pipelines.length === 2 && k.pipelines.every((p) => p.outputs.length === 1)))

      const missing = yield* assay(["study", "export", study, "--output-root", runRoot])
      assert.strictEqual(missing.code, 2)
      assert.include(missing.stderr, "--summary")
    })), 180_000)
})
