/**
 * ux38 (newuser37 F10, F11): every path a command is given that names nothing is refused with
 * `error: … no such file` and exit 2 (no bare `Path … must exist` from @effect/cli); a run whose
 * calls a simulated provider (`simulateLlm`) answered counts them as answered calls, in the run's
 * summary and in `report`; `validate` says which `maxAdmitted` each engine will use.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { CLUSTER_MAX_ADMITTED } from "../../src/cli/ValidateText.js"
import * as InternalSubmit from "../../src/services/internal/cluster/submit.js"
import { assay, tempDir, write } from "../support/cli.js"

describe("a missing path, in every command family (newuser37 F10)", () => {
  it.scopedLive("is `error: … no such file`, exit 2, never `Path … must exist`", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("ux38-paths")
      const missing = path.join(dir, "nope.yaml")
      const store = path.join(dir, "nope.db")
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["run", "-c", missing], `no such file: ${missing}`],
        [["resume", "-c", missing], `no such file: ${missing}`],
        [["validate", "-c", missing], `no such file: ${missing}`],
        [["plugins", "-c", missing], `no such file: ${missing}`],
        [["report", store], `error: store ${store}: no such file`],
        [["export", store, path.join(dir, "out.jsonl")], `error: store ${store}: no such file`],
        [["merge", store, "-o", path.join(dir, "out.jsonl")], `error: store ${store}: no such file`],
        [["study", "plan", missing], `no such file: ${missing}`],
        [["study", "run", missing], `no such file: ${missing}`],
        [["study", "status", missing], `no such file: ${missing}`],
        [["study", "report", missing], `no such file: ${missing}`],
        [["study", "export", missing, "--summary"], `no such file: ${missing}`],
        [["study", "template", missing, "--out", path.join(dir, "t.yaml")], `no such file: ${missing}`],
        [["study", "confirm", missing, "v1", "--repeats", "1"], `no such file: ${missing}`],
        [["mock-llm", "--profile", missing], `error: mock-llm profile ${missing}: no such file`],
        [["mock-llm", "--models", missing], `error: mock-llm model profiles ${missing}: no such file`]
      ]
      for (const [args, expected] of cases) {
        const r = yield* assay(args)
        const what = args.slice(0, 2).join(" ")
        assert.strictEqual(r.code, 2, `${what}: ${r.stderr}`)
        assert.include(r.stderr, "error: ", `${what}: ${r.stderr}`)
        assert.include(r.stderr, expected, `${what}: ${r.stderr}`)
        assert.notInclude(r.stderr, "must exist", `${what}: ${r.stderr}`)
      }
    }), 120_000)
})

describe("simulateLlm's answers are answered calls (newuser37 F11)", () => {
  it.scopedLive("the run's summary and report count them; validate names both engines' maxAdmitted", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("ux38-sim")
      const config = write(
        dir,
        "sim.yaml",
        `run: { concurrency: 8 }
pools: { llm: { resources: [ { id: key-a, capacity: 4 } ] } }
pipeline:
  name: sim
  tasks:
    - { use: simulateLlm, name: ask, options: { resource: llm, latency: 1 millis, failRate: 0.3 }, retry: { maxAttempts: 6, base: 1 millis } }
source: { range: { n: 20 } }
`
      )
      const store = path.join(dir, "sim.db")
      const run = yield* assay(["run", "-c", config, "--store", store])
      assert.strictEqual(run.code, 0, run.stderr)
      const all = run.stdout + run.stderr
      const m = /model calls: (\d+) \((\d+) answered, (\d+) refused with 429\)/.exec(all)
      assert.isNotNull(m, all)
      assert.strictEqual(Number(m![2]), 20, "each pipeline's one answered call")
      assert.isAbove(Number(m![3]), 0, "some simulated 429s (failRate 0.3)")
      const report = yield* assay(["report", store])
      assert.strictEqual(report.code, 0, report.stderr)
      assert.include(report.stdout, `(20 answered, ${m![3]} refused with 429)`)
      assert.notInclude(report.stdout, "no call was answered")
      const validate = yield* assay(["validate", "-c", config])
      assert.strictEqual(validate.code, 0, validate.stderr)
      const embedded = /"maxAdmitted":(\d+)/.exec(validate.stdout)?.[1]
      assert.include(
        validate.stdout,
        `maxAdmitted: ${embedded} on the embedded engine (its default); ${InternalSubmit.DEFAULT_MAX_ADMITTED} with --engine cluster`
      )
      const written = write(dir, "sim2.yaml", fs.readFileSync(config, "utf8").replace("concurrency: 8", "concurrency: 8, maxAdmitted: 200"))
      const again = yield* assay(["validate", "-c", written])
      assert.include(again.stdout, "maxAdmitted: 200 (run.maxAdmitted) on either engine")
    }), 120_000)

  it("validate's figure of the cluster's default is the submitter's", () => {
    assert.strictEqual(CLUSTER_MAX_ADMITTED, InternalSubmit.DEFAULT_MAX_ADMITTED)
  })
})
