/**
 * A validator that rewinds to its generator with a HistoryArtifact, from a config file through a
 * `bin/assay` process (needs `npm run build`): the generator declaring the class as its output
 * Schema is enough, with no plugin and no registry (tester13h, finding 1).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, count, root, tempDir, write } from "../support/cli.js"

const tasks = `import { Effect } from "effect"
import { Handoff, HistoryArtifact, Task } from "assay"
export class Draft extends HistoryArtifact.Class<Draft>("cli/HandoffDraft") {}
export const generate = Task.make("generate", { output: Draft }, (input: unknown, ctx: { readonly visit: number }) =>
  Effect.sync(() => {
    const d = input instanceof Draft ? input : new Draft({ state: { id: input, temp: 0 } })
    return d.checkpoint(\`v\${ctx.visit}\`)
  }))
export const validate = Task.sync("validate", (d: Draft) =>
  d.stateObject().temp === 1
    ? { final: d.stateObject(), labels: d.history.map((h) => h.label) }
    : Handoff.rewind("generate", d.withState({ ...d.stateObject(), temp: 1 }), { reason: "cold" }))
`

describe("a HistoryArtifact rewind payload, from a config file", () => {
  it.live("the generator's output Schema is enough: both pipelines succeed, one rewind each", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("handoff-history")
      write(dir, "tasks.ts", tasks)
      write(dir, "package.json", { type: "module" })
      fs.symlinkSync(path.join(root, "node_modules"), path.join(dir, "node_modules"), "dir")
      const file = write(dir, "experiment.yaml", [
        "pipeline:",
        "  name: h",
        "  tasks:",
        "    - { use: ./tasks.ts#generate, name: generate }",
        "    - { use: ./tasks.ts#validate, name: validate }",
        "  control: { rewind: { validate: [generate] }, maxHandoffs: 2 }",
        "source: { range: { n: 2 } }"
      ].join("\n") + "\n")
      const store = path.join(dir, "s.db")
      const ran = yield* assay(["run", "-c", file, "--store", store], { killAfterMs: 120_000 })
      assert.strictEqual(ran.code, 0, ran.stderr)
      assert.notInclude(ran.stderr, "ArtifactCodecError")
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 2)
      assert.strictEqual(count(store, "SELECT count(*) FROM handoffs WHERE operation = 'rewind'"), 2)
    })), 300_000)
})
