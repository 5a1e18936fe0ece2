/**
 * The same work has the same pipeline ids however assay runs it: the CLI's bundled fast start
 * (a YAML experiment), the CLI's unbundled runtime (the same experiment as a TypeScript file),
 * a TypeScript program run by tsx, and these tests (vitest's own transform of `src/`). Built-in
 * tasks carry an explicit code version (`assay.delay/v1`, ...), not a digest of their compiled
 * source, which differs between tsc, esbuild and vite.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Stream } from "effect"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as fs from "node:fs"
import * as path from "node:path"
import { Experiment } from "assay"
import { assay, exec, root, tempDir } from "../support/cli.js"

const storedIds = (file: string): ReadonlyArray<string> => {
  const db = new Database(file, { readonly: true })
  try {
    return (db.prepare("SELECT pipeline_id FROM pipelines ORDER BY pipeline_id").all() as Array<{ pipeline_id: string }>)
      .map((r) => r.pipeline_id)
  } finally {
    db.close()
  }
}

const idsOf = (file: string) =>
  Effect.gen(function*() {
    const experiment = yield* Experiment.load(file)
    const specs = yield* Stream.runCollect(experiment.pipelines())
    return [...specs].map((s) => s.pipelineId).sort()
  }).pipe(Effect.provide(NodeContext.layer))

const program = `import * as NodeContext from "@effect/platform-node/NodeContext"
import { Effect, Stream } from "effect"
import { Experiment } from "assay"
const ids = Effect.gen(function*() {
  const experiment = yield* Experiment.load(process.argv[2]!)
  const specs = yield* Stream.runCollect(experiment.pipelines())
  return [...specs].map((s) => s.pipelineId).sort()
})
Effect.runPromise(ids.pipe(Effect.provide(NodeContext.layer))).then((ids) => console.log(JSON.stringify(ids)))
`

describe("pipeline identity across runtimes", { timeout: 180_000 }, () => {
  it.scopedLive("bundled CLI, unbundled CLI, a tsx program and vitest agree on every pipeline id", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("identity")
      const yaml = path.join(root, "examples/experiments/delay.yaml")
      const ts = path.join(root, "examples/experiments/delay.ts")

      const bundled = yield* assay(["run", "-c", yaml, "--store", path.join(dir, "yaml.db"), "--quiet"])
      assert.strictEqual(bundled.code, 0, bundled.stderr)
      const unbundled = yield* assay(["run", "-c", ts, "--store", path.join(dir, "ts.db"), "--quiet"])
      assert.strictEqual(unbundled.code, 0, unbundled.stderr)

      const script = path.join(root, ".tmp", `identity-${process.pid}.ts`)
      fs.mkdirSync(path.dirname(script), { recursive: true })
      fs.writeFileSync(script, program)
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(script, { force: true })))
      const viaTsx = yield* exec(process.execPath, ["--conditions=assay-source", "--import", "tsx", script, yaml])
      assert.strictEqual(viaTsx.code, 0, viaTsx.stderr)

      const fromYaml = storedIds(path.join(dir, "yaml.db"))
      assert.strictEqual(fromYaml.length, 8)
      assert.deepStrictEqual(storedIds(path.join(dir, "ts.db")), fromYaml)
      assert.deepStrictEqual(JSON.parse(viaTsx.stdout) as Array<string>, fromYaml)
      assert.deepStrictEqual(yield* idsOf(yaml), fromYaml)
      assert.deepStrictEqual(yield* idsOf(ts), fromYaml)
    }))
})
