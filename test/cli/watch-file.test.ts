/**
 * Issue 18 trial: `assay watch` writing to a file (not a terminal) cut its final picture at
 * 100 columns, so the pool line ended "… 8 at once;…". Written to a file or a pipe, no line is
 * cut.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, tempDir, write } from "../support/cli.js"

describe("assay watch, not a terminal", () => {
  it.scopedLive("prints every line of the final picture whole (a 150-character resource id is not cut)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const store = path.join(dir, "w.db")
      const id = `r${"x".repeat(149)}`
      const conf = write(dir, "w.json", JSON.stringify({
        pools: { cpu: { resources: [{ id, capacity: 1 }] } },
        pipeline: { name: "w", tasks: [{ use: "simulateLlm", name: "t", options: { resource: "cpu", latency: "1 millis" } }] },
        source: { range: { n: 2 } }
      }))
      const r = yield* assay(["run", "-c", conf, "--store", store, "--quiet"])
      assert.strictEqual(r.code, 0, r.stderr)
      const w = yield* assay(["watch", store, "--interval", "0.2"])
      assert.strictEqual(w.code, 0, w.stderr)
      const line = w.stdout.split("\n").find((l) => l.includes(`cpu/${id}`))
      assert.isDefined(line, w.stdout)
      assert.notInclude(line!, "…")
    }), { timeout: 60_000 })
})
