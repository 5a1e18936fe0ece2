import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { allowedKeysAt, placesOfKey } from "../../src/domain/Config.js"
import type { ConfigError } from "../../src/domain/Errors.js"
import * as Task from "../../src/domain/Task.js"
import * as Experiment from "../../src/layers/Experiment.js"

const issuesOf = (e: ConfigError) => e.issues.map((i) => `${i.path}: ${i.message}${i.suggestion ? ` | ${i.suggestion}` : ""}`)

describe("Experiment loader", () => {
  it.effect("in-code definitions get the same checks: typos, unknown tasks, pools, overrides", () =>
    Effect.gen(function*() {
      const result = yield* Effect.either(Experiment.fromDefinition({
        run: { concurency: 4 } as never,
        pools: { apis: { resources: [{ capacity: 1 }] } },
        pipeline: {
          name: "x",
          resource: "apis",
          tasks: [{ use: "ecoh" }, { use: "delay", args: [5] }, { use: "echo", resource: "gpu" }]
        },
        source: { range: { n: 2 }, keyField: "id" }
      }))
      assert.isTrue(Either.isLeft(result))
      if (Either.isLeft(result)) {
        const lines = issuesOf(result.left)
        assert.deepStrictEqual(lines, [
          "run.concurency: unknown key \"concurency\" | did you mean concurrency?",
          "pipeline.tasks[0].use: unknown task \"ecoh\" | did you mean echo?",
          "pipeline.tasks[1].args[0]: a bare number (5) is not a duration | write a duration with a unit, for example \"300 millis\" or \"2 seconds\"",
          "pipeline.tasks[2].resource: no pool named \"gpu\" | pools: apis",
          "source.keyField: keyField needs rows that are objects: use it with a jsonl source"
        ])
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("config fields override the task: absent keeps, null clears, pipeline resource fills the gap", () =>
    Effect.gen(function*() {
      const base = Task.make("ask", { resource: "apis", timeout: "5 seconds", version: "v1" }, (n: number) => Effect.succeed(n))
      const e = yield* Experiment.fromDefinition({
        pools: { apis: { resources: [{ capacity: 1 }] }, other: { resources: [{ capacity: 1 }] } },
        pipeline: {
          name: "o",
          resource: "other",
          tasks: [
            { use: base },
            { use: base, name: "ask2", timeout: null, version: null, resource: null },
            { use: "echo" }
          ]
        },
        source: { range: { n: 1 } }
      })
      const [a, b, c] = e.template.tasks
      assert.strictEqual(a!.options.resource, "apis")
      assert.strictEqual(a!.options.version, "v1")
      assert.strictEqual(b!.name, "ask2")
      assert.isNull(b!.options.timeout)
      assert.isNull(b!.options.version)
      assert.isNull(b!.options.resource)
      assert.strictEqual(c!.options.resource, "other")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("jsonl source with keyField, repeats and limit", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-exp-"))
      fs.writeFileSync(path.join(dir, "rows.jsonl"), ["{\"id\":\"a\"}", "", "{\"id\":\"b\"}", "{\"id\":\"c\"}"].join("\n"))
      const e = yield* Experiment.fromDefinition({
        pipeline: { name: "j", tasks: [{ use: "echo" }] },
        source: { jsonl: { path: "rows.jsonl", limit: 2 }, keyField: "id", repeats: 2 }
      }, { baseDir: dir })
      const specs = Array.from(yield* Stream.runCollect(e.pipelines()))
      assert.deepStrictEqual(specs.map((s) => s.pipelineId), ["a#0", "a#1", "b#0", "b#1"])
      const one = Array.from(yield* Stream.runCollect(e.pipelines(1)))
      assert.strictEqual(one.length, 2)
    }).pipe(Effect.provide(NodeContext.layer)))

  it("env expansion: defaults, empty values, $$ escapes, unresolved paths", () => {
    const unresolved: Array<{ name: string; path: string }> = []
    const out = Experiment.expandEnv(
      { a: "${A}", b: ["${B:-x}", "${E:-y}"], c: { d: "$${A} and ${MISSING}" }, n: 3 },
      { A: "1", E: "" },
      unresolved
    )
    assert.deepStrictEqual(out, { a: "1", b: ["x", "y"], c: { d: "${A} and " }, n: 3 })
    assert.deepStrictEqual(unresolved, [{ name: "MISSING", path: "c.d" }])
  })

  it("keys per level and where a misplaced key belongs", () => {
    assert.include(allowedKeysAt(["run"]), "concurrency")
    assert.include(allowedKeysAt(["pools", "anyName", "resources", 3]), "capacity")
    assert.deepStrictEqual(placesOfKey("retry"), ["pipeline.tasks[].retry"])
    assert.strictEqual(Experiment.formatPath(["pools", "apis", "resources", 1, "capacity"]), "pools.apis.resources[1].capacity")
    assert.strictEqual(Experiment.closest("concurency", ["concurrency", "journal"]), "concurrency")
    assert.isUndefined(Experiment.closest("gpus", ["apis"]))
  })
})
