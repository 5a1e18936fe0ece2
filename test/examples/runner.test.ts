import { assert, describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { program, RunnerLive, Scorer } from "../../examples/runner/requirements.js"
import { Store } from "../../src/services/Store.js"

const root = path.resolve(import.meta.dirname, "../..")
const loader = path.join(root, "node_modules/tsx/dist/loader.mjs")

describe("examples/runner", () => {
  it("quickstart runs, and a second run skips everything", () => {
    const db = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-quickstart-")), "q.db")
    const first = spawnSync(process.execPath, ["--conditions=assay-source", "--import", loader, "examples/runner/quickstart.ts", db], {
      cwd: root,
      encoding: "utf8"
    })
    expect(first.status, first.stderr).toBe(0)
    expect(first.stdout).toMatch(/pipelines: 200 \(succeeded 200\), skipped 0/)
    const second = spawnSync(process.execPath, ["--conditions=assay-source", "--import", loader, "examples/runner/quickstart.ts", db], {
      cwd: root,
      encoding: "utf8"
    })
    expect(second.status, second.stderr).toBe(0)
    expect(second.stdout).toMatch(/skipped 200/)
  }, 120_000)

  it.effect("requirements: a test swaps the Scorer for a scripted fake", () =>
    Effect.gen(function*() {
      const scored: Array<string> = []
      const Fake = Layer.succeed(Scorer, {
        score: (answer) => Effect.sync(() => (scored.push(answer), 1))
      })
      const report = yield* program.pipe(Effect.provide(Fake))
      assert.strictEqual(report.stats.byState.succeeded, 3)
      assert.deepStrictEqual(scored.sort(), [
        "the answer to everything",
        "the answer to life",
        "the answer to the universe"
      ])
      const store = yield* Store
      const finals = yield* Stream.runCollect(store.streamPipelines({ runId: report.runId }))
      assert.strictEqual(finals.length, 3)
    }).pipe(Effect.provide(RunnerLive)))
})
