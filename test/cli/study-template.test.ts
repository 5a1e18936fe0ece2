/**
 * `assay study template FILE --out PATH` through `bin/assay` (needs `npm run build`): the
 * written study file loads back with the frozen version's protocol digest (YAML and JSON, a
 * prompt with a `$`, a range variable, stop conditions), and nothing else happens.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, root, tempDir } from "../support/cli.js"

const digestOf = (file: string, outputRoot: string) =>
  Effect.map(assay(["study", "plan", file, "--json", "--output-root", outputRoot]), (r) => {
    assert.strictEqual(r.code, 0, r.stderr)
    return (JSON.parse(r.stdout) as { study: never; protocol: { digest: string } }).protocol.digest
  })

describe("assay study template", () => {
  for (const [name, file, out] of [
    ["the export fixture (prompts with a $, enum)", "test/fixtures/study-export/study.yaml", "t/template.yaml"],
    ["the multiples example (range, stop, hard constraint)", "examples/studies/study.yaml", "template.json"]
  ] as const) {
    it.live(`${name}: the template loads back with the frozen digest`, () =>
      Effect.scoped(Effect.gen(function*() {
        const dir = yield* tempDir("study-template")
        const runRoot = path.join(dir, "root")
        const study = path.join(root, file)
        const ran = yield* assay(["study", "run", study, "--output-root", runRoot, "-q"], { killAfterMs: 120_000 })
        assert.strictEqual(ran.code, 0, ran.stderr)
        const frozen = yield* digestOf(study, runRoot)

        const target = path.join(dir, out)
        const t = yield* assay(["study", "template", study, "--out", target, "--output-root", runRoot])
        assert.strictEqual(t.code, 0, t.stderr)
        assert.include(t.stderr, `digest ${frozen}`)
        // only the template was written beside the root: no temporary file left
        assert.deepStrictEqual(fs.readdirSync(path.dirname(target)).filter((f) => f !== "root").sort(), [path.basename(target)])
        assert.strictEqual(yield* digestOf(target, runRoot), frozen)
        // the template's own output.root is the study's root: its versions read "current"
        const versions = yield* assay(["study", "versions", target, "--json"])
        assert.strictEqual(versions.code, 0, versions.stderr)
        assert.include(versions.stdout, frozen)
        if (file.includes("export")) assert.include(fs.readFileSync(target, "utf8"), "costs $$5")
        // the study file's run settings are kept (they are not protocol, and a template without
        // them would run differently)
        else assert.deepStrictEqual(JSON.parse(fs.readFileSync(target, "utf8")).run, { concurrency: 8, trialConcurrency: 3 })

        const unknown = yield* assay(["study", "template", study, "--out", path.join(dir, "x.yaml"), "--output-root", runRoot, "--protocol-version", "9"])
        assert.strictEqual(unknown.code, 2)
        assert.include(unknown.stderr, "no protocol version 9")
        assert.isFalse(fs.existsSync(path.join(dir, "x.yaml")))
      })), 180_000)
  }
})
