import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as TOML from "smol-toml"
import * as YAML from "yaml"
import { allowedKeysAt, placesOfKey } from "../../src/config/internal/keys.js"
import type { ConfigError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Experiment from "../../src/config/internal/experiment.js"
import { expandEnv } from "../../src/config/internal/env.js"
import { closest, formatPath } from "../../src/config/internal/issues.js"
import { fanout } from "../../src/tasks/Fanout.js"
import { delay, echo, simulateLlm } from "../../src/tasks/Mock.js"

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
    const out = expandEnv(
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
    assert.strictEqual(formatPath(["pools", "apis", "resources", 1, "capacity"]), "pools.apis.resources[1].capacity")
    assert.strictEqual(closest("concurency", ["concurrency", "journal"]), "concurrency")
    assert.isUndefined(closest("gpus", ["apis"]))
  })
})

// ---------------------------------------------------------------------------------------------
// use: fanout with nested tasks
// ---------------------------------------------------------------------------------------------

const writeAll = (dir: string, name: string, value: Record<string, unknown>): Record<"json" | "yaml" | "toml", string> => {
  const files = {
    json: path.join(dir, `${name}.json`),
    yaml: path.join(dir, `${name}.yaml`),
    toml: path.join(dir, `${name}.toml`)
  }
  fs.writeFileSync(files.json, JSON.stringify(value, null, 2))
  fs.writeFileSync(files.yaml, YAML.stringify(value))
  fs.writeFileSync(files.toml, TOML.stringify(value))
  return files
}

const judges = {
  pools: { apis: { resources: [{ id: "k", capacity: 2 }] }, other: { resources: [{ capacity: 1 }] } },
  pipeline: {
    name: "fan",
    tasks: [
      { use: "echo", name: "prepare" },
      {
        use: "fanout",
        name: "judges",
        onError: "collect",
        retry: { maxAttempts: 3, base: "10 millis" },
        tasks: [
          { use: "simulateLlm", name: "a", options: { resource: "apis", latency: "5 millis" } },
          { use: "echo", name: "b" },
          { use: "fanout", name: "inner", tasks: [{ use: "delay", args: ["1 millis"], name: "c" }] }
        ]
      }
    ]
  },
  source: { range: { n: 3 } }
}

/** The same pipeline built in TypeScript, as a program would. */
const judgesInCode = () =>
  Pipeline.make(
    "fan",
    Task.withOverrides(echo, { name: "prepare" }),
    fanout(
      Task.withOverrides(simulateLlm({ resource: "apis", latency: "5 millis" }), { name: "a" }),
      Task.withOverrides(echo, { name: "b" }),
      fanout(Task.withOverrides(delay("1 millis"), { name: "c" }), { name: "inner" }),
      { name: "judges", onError: "collect", retry: { maxAttempts: 3, base: "10 millis" } }
    )
  )

const loadIssues = (file: string) =>
  Effect.map(Effect.flip(Experiment.load(file)), issuesOf)

describe("Experiment loader: use: fanout", () => {
  it.effect("JSON, YAML and TOML build the same group as fanout(...) in TypeScript: same spec digest, same ids", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-fanout-"))
      const files = writeAll(dir, "judges", judges)
      const inCode = judgesInCode()
      for (const [format, file] of Object.entries(files)) {
        const e = yield* Experiment.load(file)
        assert.strictEqual(e.template.specDigest, inCode.specDigest, format)
        const group = e.template.tasks[1]!
        assert.strictEqual(group.name, "judges")
        assert.deepStrictEqual(group.parameters, { onError: "collect" })
        assert.strictEqual(group.options.retry.maxAttempts, 3)
        assert.deepStrictEqual(group.children.map((c) => c.name), ["a", "b", "inner"])
        assert.deepStrictEqual(group.children[2]!.children.map((c) => c.name), ["c"])
        const ids = Array.from(yield* Stream.runCollect(e.pipelines())).map((s) => s.pipelineId)
        const expected = Array.from(yield* Stream.runCollect(inCode.map(Stream.make(0, 1, 2)))).map((s) => s.pipelineId)
        assert.deepStrictEqual(ids, expected)
      }
      // The TypeScript definition form, with task values among the nested entries.
      const def = yield* Experiment.fromDefinition({
        ...judges,
        pipeline: {
          name: "fan",
          tasks: [
            { use: echo, name: "prepare" },
            {
              use: "fanout",
              name: "judges",
              onError: "collect",
              retry: { maxAttempts: 3, base: "10 millis" },
              tasks: [
                { use: simulateLlm({ resource: "apis", latency: "5 millis" }), name: "a" },
                { use: "echo", name: "b" },
                { use: "fanout", name: "inner", tasks: [{ use: delay("1 millis"), name: "c" }] }
              ]
            }
          ]
        }
      })
      assert.strictEqual(def.template.specDigest, inCode.specDigest)
      // A different onError is a different pipeline.
      const raise = yield* Experiment.fromDefinition({
        ...judges,
        pipeline: { ...judges.pipeline, tasks: [judges.pipeline.tasks[0]!, { ...judges.pipeline.tasks[1]!, onError: "raise" }] }
      } as never)
      assert.notStrictEqual(raise.template.specDigest, inCode.specDigest)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("the effective experiment (validate) shows the group with its branches, in order", () =>
    Effect.gen(function*() {
      const e = yield* Experiment.fromDefinition(judges as never)
      const d = e.describe() as any
      const group = d.pipeline.tasks[1]
      assert.strictEqual(group.name, "judges")
      assert.deepStrictEqual(group.parameters, { onError: "collect" })
      assert.strictEqual(group.resource, null) // the branches disagree (apis / none)
      assert.deepStrictEqual(group.children.map((c: any) => c.name), ["a", "b", "inner"])
      assert.strictEqual(group.children[0].resource, "apis")
      assert.deepStrictEqual(group.children[2].children.map((c: any) => c.name), ["c"])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("branches get pipeline.resource like any task; the group's own fields override it", () =>
    Effect.gen(function*() {
      const e = yield* Experiment.fromDefinition({
        pools: { apis: { resources: [{ capacity: 1 }] }, other: { resources: [{ capacity: 1 }] } },
        pipeline: {
          name: "r",
          resource: "apis",
          tasks: [
            { use: "fanout", tasks: [{ use: "echo", name: "a" }, { use: "echo", name: "b" }] },
            { use: "fanout", name: "g2", resource: "other", timeout: "5 seconds", tasks: [{ use: "echo" }] }
          ]
        },
        source: { range: { n: 1 } }
      })
      const [g1, g2] = e.template.tasks
      assert.strictEqual(g1!.name, "fanout")
      assert.deepStrictEqual(g1!.children.map((c) => c.options.resource), ["apis", "apis"])
      assert.strictEqual(g1!.options.resource, "apis") // every branch agrees
      assert.strictEqual(g2!.options.resource, "other")
      assert.strictEqual(g2!.children[0]!.options.resource, "apis")
      assert.strictEqual(g2!.options.timeout === null ? null : String(g2!.options.timeout), "Duration(5s)")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("every problem of nested entries is reported at once with its full path, in each format", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-fanout-bad-"))
      const bad = {
        pools: { apis: { resources: [{ capacity: 1 }] } },
        pipeline: {
          name: "bad",
          tasks: [
            { use: "echo", tasks: [{ use: "echo" }], onError: "collect" },
            {
              use: "fanout",
              tasks: [
                { use: "echo", retyr: { maxAttempts: 2 } },
                { use: "ecoh", name: "x" },
                { use: "simulateLlm", name: "y", options: { resource: "gpu" } },
                { use: "echo", name: "z", resource: "apiz" },
                { use: "fanout", tasks: [{ use: "delay", args: [5] }] }
              ]
            },
            { use: "fanout", args: [1], tasks: [{ use: "echo", name: "same" }, { use: "echo", name: "same" }] },
            { use: "fanout" },
            { use: "fanot", tasks: [{ use: "echo" }] }
          ]
        },
        source: { range: { n: 1 } }
      }
      const expected = [
        "pipeline.tasks[1].tasks[0].retyr: unknown key \"retyr\" | did you mean retry?",
        "pipeline.tasks[0].tasks: only a \"use: fanout\" entry takes nested tasks; \"echo\" is not a fanout | to run these tasks concurrently on the same input, write use: fanout here and put \"echo\" among the nested tasks",
        "pipeline.tasks[0].onError: only a \"use: fanout\" entry takes onError; \"echo\" is not a fanout | remove it, or make this entry a fanout",
        "pipeline.tasks[1].tasks[1].use: unknown task \"ecoh\" | did you mean echo?",
        "pipeline.tasks[1].tasks[2].use: no pool named \"gpu\": task \"y\" declares it as its resource | pools: apis",
        "pipeline.tasks[1].tasks[3].resource: no pool named \"apiz\" | did you mean apis?",
        "pipeline.tasks[1].tasks[4].tasks[0].args[0]: a bare number (5) is not a duration | write a duration with a unit, for example \"300 millis\" or \"2 seconds\"",
        "pipeline.tasks[2].args: fanout takes no args: its branches are the entries under tasks, its settings are fields of this entry | onError: collect, retry: { maxAttempts: 3 }, tasks: [{ use: echo, name: a }, ...]",
        "pipeline.tasks[3].tasks: is missing: a fanout runs the task entries listed under tasks | tasks: [{ use: echo, name: a }, { use: echo, name: b }]",
        "pipeline.tasks[4].tasks: only a \"use: fanout\" entry takes nested tasks; \"fanot\" is not a fanout | to run these tasks concurrently on the same input, write use: fanout here and put \"fanot\" among the nested tasks",
        "pipeline.tasks[4].use: unknown task \"fanot\" | did you mean fanout?"
      ]
      for (const [format, file] of Object.entries(writeAll(dir, "bad", bad))) {
        assert.deepStrictEqual(yield* loadIssues(file), expected, format)
      }
      // Duplicate branch names (once the args are gone), with both paths.
      const dup = writeAll(dir, "dup", {
        ...bad,
        pipeline: { name: "dup", tasks: [{ use: "fanout", tasks: [{ use: "echo", name: "same" }, { use: "echo", name: "same" }, { use: "echo" }] }] }
      })
      assert.deepStrictEqual(yield* loadIssues(dup.yaml), [
        "pipeline.tasks[0].tasks[1].name: duplicate branch name \"same\" (also pipeline.tasks[0].tasks[0]): a fanout returns its branches' values by name | give each branch a distinct name: name: ..."
      ])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("an empty tasks list, a wrong onError, a bare-number timeout: refused by the Schema with paths, nested use: and fanout-only keys still checked", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-fanout-shape-"))
      const files = writeAll(dir, "shape", {
        pipeline: {
          name: "shape",
          tasks: [
            { use: "fanout", tasks: [] },
            { use: "fanout", onError: "ignore", tasks: [{ use: "echo", timeout: 3 }, { use: "fanout", tasks: [{ use: "dealy" }] }] },
            { use: "echo", onError: "collect" }
          ]
        },
        source: { range: { n: 1 } }
      })
      const expected = [
        "pipeline.tasks[0].tasks: is empty: a fanout needs at least one task | tasks: [{ use: echo, name: a }, { use: echo, name: b }]",
        "pipeline.tasks[1].onError: onError must be \"raise\" or \"collect\"",
        "pipeline.tasks[1].tasks[0].timeout: a bare number (3) is not a duration: write a duration with a unit, for example \"500 millis\", \"2 seconds\" or \"1 minute\"",
        // The shape is broken, yet nested `use:` targets are still checked.
        "pipeline.tasks[1].tasks[1].tasks[0].use: unknown task \"dealy\" | did you mean delay?",
        "pipeline.tasks[2].onError: only a \"use: fanout\" entry takes onError; \"echo\" is not a fanout | remove it, or make this entry a fanout"
      ]
      for (const [format, file] of Object.entries(files)) {
        assert.deepStrictEqual(yield* loadIssues(file), expected, format)
      }
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("Experiment loader: refuses at load what a run would refuse", () => {
  const dirOf = () => fs.mkdtempSync(path.join(os.tmpdir(), "assay-refuse-"))

  it.effect("duplicate explicit resource ids, and an explicit id that clashes with a generated one", () =>
    Effect.gen(function*() {
      const issues = issuesOf(yield* Effect.flip(Experiment.fromDefinition({
        pools: { apis: { resources: [{ id: "a" }, { id: "a" }] } },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      })))
      assert.deepStrictEqual(issues, [
        "pools.apis.resources[1].id: duplicate resource id \"a\" in pool \"apis\" (also pools.apis.resources[0]) | give each resource a distinct id, or leave id out to get a generated one"
      ])
      // Generated ids are made unique by the pool; an explicit id equal to an earlier generated
      // one is refused by the pool service, and so by the loader.
      const generated = yield* Experiment.fromDefinition({
        pools: { apis: { resources: [{}, {}] } },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      })
      const ids = generated.pools[0]!.resources.map((r) => r.id)
      const clash = issuesOf(yield* Effect.flip(Experiment.fromDefinition({
        pools: { apis: { resources: [{}, { id: ids[0]! }] } },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      })))
      assert.deepStrictEqual(clash, [`pools.apis.resources[1].id: duplicate resource id "${ids[0]}" in pool "apis"`])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a resource's quotas reach its definition (for the cluster's global pools); a bad one is refused at its path", () =>
    Effect.gen(function*() {
      const experiment = yield* Experiment.fromDefinition({
        pools: { llm: { resources: [{ id: "k", capacity: 4, quotas: [{ limit: 20, window: "5 seconds" }] }] } },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      })
      assert.deepStrictEqual(Resource.quotas(experiment.pools[0]!.resources[0]!), [{ metric: "requests", limit: 20, windowMs: 5_000 }])
      const refused = (quotas: ReadonlyArray<unknown>) =>
        Effect.map(Effect.flip(Experiment.fromDefinition({
          pools: { llm: { resources: [{ quotas }] } },
          pipeline: { name: "p", tasks: [{ use: "echo" }] },
          source: { range: { n: 1 } }
        } as never)), issuesOf)
      // a shape error (the Schema), then a rule the resource checks
      const shape = yield* refused([{ limit: 0, window: "5 seconds" }])
      assert.strictEqual(shape.length, 1, shape.join("\n"))
      assert.match(shape[0]!, /^pools\.llm\.resources\[0\]\.quotas\[0\]\.limit: /)
      const rule = yield* refused([{ metric: "tokens", limit: 5, window: "1 minute", estimate: 9 }])
      assert.deepStrictEqual(rule.map((i) => i.split(" | ")[0]), [
        "pools.llm.resources[0].quotas[0].estimate: estimate 9 is above the limit 5: no lease could ever be granted"
      ])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("keyField naming a missing field is refused from the first row, with a did-you-mean", () =>
    Effect.gen(function*() {
      const dir = dirOf()
      fs.writeFileSync(path.join(dir, "rows.jsonl"), "{\"id\":\"a\",\"v\":1}\n{\"id\":\"b\",\"v\":2}\n")
      const definition = Experiment.defineExperiment({
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { jsonl: { path: "rows.jsonl" }, keyField: "idd" }
      })
      const issues = issuesOf(yield* Effect.flip(Experiment.fromDefinition(definition, { baseDir: dir })))
      assert.deepStrictEqual(issues, [
        "source.keyField: row 1 of rows.jsonl has no \"idd\" field (fields: id, v); did you mean \"id\"?"
      ])
      const ok = yield* Experiment.fromDefinition({ ...definition, source: { ...definition.source, keyField: "id" } }, { baseDir: dir })
      assert.deepStrictEqual((ok.describe() as any).source.keysChecked, { rows: 2, wholeFile: true })
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a repeated key: validate's full scan finds it anywhere; the run's stream stops at it with a ConfigError", () =>
    Effect.gen(function*() {
      const dir = dirOf()
      const rows = Array.from({ length: 150 }, (_, i) => JSON.stringify({ id: `k${i}`, v: i }))
      rows.push(JSON.stringify({ id: "k3", v: -1 }), JSON.stringify({ v: 0 }))
      fs.writeFileSync(path.join(dir, "dup.jsonl"), rows.join("\n") + "\n")
      const definition = Experiment.defineExperiment({
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { jsonl: { path: "dup.jsonl" }, keyField: "id", repeats: 2 }
      })
      // The default (run) scan reads only the head, which is clean.
      const e = yield* Experiment.fromDefinition(definition, { baseDir: dir })
      const full = issuesOf(yield* Effect.flip(Experiment.fromDefinition(definition, { baseDir: dir, scanKeys: "full" })))
      assert.deepStrictEqual(full, ["source.keyField: key \"k3\" appears on lines 4 and 151 of dup.jsonl"])
      // The run's stream: the first 150 rows give 300 pipelines (repeats make distinct ids),
      // then the repeated key fails the stream.
      const specs: Array<string> = []
      const failure = yield* Effect.flip(Stream.runForEach(e.pipelines(), (s) => Effect.sync(() => specs.push(s.pipelineId))))
      assert.strictEqual(specs.length, 300)
      assert.strictEqual(new Set(specs).size, 300)
      assert.strictEqual(failure._tag, "ConfigError")
      assert.strictEqual(failure.message, "source.keyField: key \"k3\" appears on lines 4 and 151 of dup.jsonl")
      // A later row without the key: a ConfigError naming its line, not a keyOf defect.
      fs.writeFileSync(path.join(dir, "dup.jsonl"), [...rows.slice(0, 150), JSON.stringify({ v: 0 })].join("\n") + "\n")
      const missing = yield* Effect.flip(Stream.runDrain(e.pipelines()))
      assert.strictEqual(missing.message, "source.keyField: row 151 of dup.jsonl has no \"id\" field (fields: v)")
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("Experiment loader: every problem at once", () => {
  it.effect("type errors, empty and missing fanout tasks, duplicate branches, empty pools, bad algorithm options, duplicate ids: all reported together", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-all-"))
      const file = path.join(dir, "multi.yaml")
      fs.writeFileSync(file, [
        "run: { journal: ful, concurrency: \"x\" }",
        "pools:",
        "  apis: { resources: [] }",
        "  gpus: { algorithm: { name: backoff, bogus: 1 }, resources: [ {id: a}, {id: a} ] }",
        "pipeline:",
        "  name: m",
        "  tasks:",
        "    - { use: fanout, tasks: [] }",
        "    - { use: fanout }",
        "    - use: fanout",
        "      tasks: [ { use: echo, name: x }, { use: echo, name: x } ]",
        "    - { use: echo, tasks: [] }",
        "    - { use: delay, args: [\"soon\"] }",
        "source: { range: { n: 2 } }"
      ].join("\n"))
      const lines = (yield* loadIssues(file)).map((l) => l.split(" | ")[0]!)
      assert.sameMembers(lines, [
        "run.journal: expected \"full\" or \"summary\", got \"ful\"",
        "run.concurrency: expected a number, got \"x\"",
        "pipeline.tasks[0].tasks: is empty: a fanout needs at least one task",
        "pools.apis.resources: a pool needs at least one resource",
        "pools.gpus.algorithm.bogus: unknown option \"bogus\" of algorithm backoff",
        "pools.gpus.resources[1].id: duplicate resource id \"a\" in pool \"gpus\" (also pools.gpus.resources[0])",
        "pipeline.tasks[1].tasks: is missing: a fanout runs the task entries listed under tasks",
        "pipeline.tasks[2].tasks[1].name: duplicate branch name \"x\" (also pipeline.tasks[2].tasks[0]): a fanout returns its branches' values by name",
        "pipeline.tasks[3].tasks: only a \"use: fanout\" entry takes nested tasks; \"echo\" is not a fanout",
        "pipeline.tasks[4].args[0]: \"soon\" is not a finite, non-negative duration"
      ])
      const all = yield* loadIssues(file)
      assert.include(all, "run.journal: expected \"full\" or \"summary\", got \"ful\" | did you mean \"full\"?")
      assert.include(all, "pipeline.tasks[4].args[0]: \"soon\" is not a finite, non-negative duration | write a duration with a unit, for example \"300 millis\" or \"2 seconds\"")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a misspelt required key, an out-of-range value and a reference in one pass (tester16b N3): the misspelt pipeline is still checked", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-all-"))
      const file = path.join(dir, "three.yaml")
      fs.writeFileSync(file, [
        "pools:",
        "  llm: { resources: [ { id: a, capacity: 2 } ] }",
        "run: { concurrency: 0 }",
        "pipelin:",
        "  name: m",
        "  tasks:",
        "    - { use: simulateLlm, name: a, options: { resource: lmm } }",
        "source: { range: { n: 2 } }"
      ].join("\n"))
      const lines = yield* loadIssues(file)
      assert.sameMembers(lines.map((l) => l.split(":")[0]!), ["pipelin", "run.concurrency", "pipeline.tasks[0].use"], lines.join("\n"))
      assert.include(lines, "pipelin: unknown key \"pipelin\" | did you mean pipeline?")
      assert.include(lines.find((l) => l.startsWith("pipeline.tasks[0].use")) ?? "", "no pool named \"lmm\"")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a literal of a mixed union misspelled by case (run.cache: readwrite): one line naming every form, with a did-you-mean", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-case-"))
      const file = path.join(dir, "case.yaml")
      fs.writeFileSync(file, ["run: { cache: readwrite }", "pipeline: { name: m, tasks: [ { use: echo } ] }", "source: { range: { n: 1 } }"].join("\n"))
      const all = yield* loadIssues(file)
      assert.deepStrictEqual(all, [
        "run.cache: expected \"readWrite\", \"readOnly\", \"refresh\", \"off\", a boolean or an object, got \"readwrite\" | did you mean \"readWrite\"?"
      ])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a mistake inside a run.cache object: one line at its own path, not the union's `expected … got {…}` nor `Expected undefined`", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-cacheobj-"))
      const cases: ReadonlyArray<readonly [string, ReadonlyArray<string>]> = [
        ["{ mode: readwrite }", ["run.cache.mode: expected \"readWrite\", \"readOnly\", \"refresh\" or \"off\", got \"readwrite\" | did you mean \"readWrite\"?"]],
        ["{ mode: readWrite, tll: 7 days }", ["run.cache.tll: unknown key \"tll\" | did you mean ttl?"]],
        ["{ mode: readWrite, ttl: 7 dayz }", ["run.cache.ttl: must be a positive duration such as \"7 days\", got \"7 dayz\""]],
        // issue 18: "is negative: a duration is 0 or more" here, "must be longer than 0" for 0 seconds
        ["{ mode: readWrite, ttl: -5 seconds }", ["run.cache.ttl: must be a positive duration such as \"7 days\", got \"-5 seconds\""]],
        ["{ mode: readWrite, ttl: 0 seconds }", ["run.cache.ttl: must be a positive duration such as \"7 days\", got \"0 seconds\""]]
      ]
      for (const [cache, expected] of cases) {
        const file = path.join(dir, "c.yaml")
        fs.writeFileSync(file, [`run: { cache: ${cache} }`, "pipeline: { name: m, tasks: [ { use: echo } ] }", "source: { range: { n: 1 } }"].join("\n"))
        const all = yield* loadIssues(file)
        // the ttl line carries its own hint after ": write a duration …"
        assert.deepStrictEqual(all.map((l) => l.startsWith("run.cache.ttl:") ? l.split(": write")[0]! : l), expected, cache)
      }
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("pricing that is not a table says what is expected, not the schema's name (issue 18: \"Expected PriceTable, actual 5\")", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-pricing-"))
      const file = path.join(dir, "p.yaml")
      fs.writeFileSync(file, ["pricing: 5", "pipeline: { name: m, tasks: [ { use: echo } ] }", "source: { range: { n: 1 } }"].join("\n"))
      const all = yield* loadIssues(file)
      assert.deepStrictEqual(all, ["pricing: expected a table of model name → { inputPer1M, outputPer1M } (USD per 1,000,000 tokens), got 5"])
      // a problem inside the table keeps its own message and path
      fs.writeFileSync(file, ["pricing: { m1: { inputPer1M: -1, outputPer1M: 2 } }", "pipeline: { name: m, tasks: [ { use: echo } ] }", "source: { range: { n: 1 } }"].join("\n"))
      const inner = yield* loadIssues(file)
      assert.isTrue(inner.length > 0 && inner.every((l) => l.startsWith("pricing.m1.inputPer1M")), inner.join("\n"))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("--strict-env refuses a variable that is set but empty; without it the empty value is used", () =>
    Effect.gen(function*() {
      const definition = Experiment.defineExperiment({
        run: { label: "${LABEL}" },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      })
      const strict = issuesOf(yield* Effect.flip(Experiment.fromDefinition(definition, { strictEnv: true, env: { LABEL: "" } })))
      assert.deepStrictEqual(strict, [
        "run.label: environment variable LABEL is set but empty (--strict-env) | export LABEL=... with a value, or write ${LABEL:-default}"
      ])
      const lax = yield* Experiment.fromDefinition(definition, { env: { LABEL: "" } })
      assert.strictEqual(lax.run.label, "")
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("docs/config.md", () => {
  it.effect("the main YAML example loads as written (with a stand-in tasks.ts and my-plugin.ts next to it)", () =>
    Effect.gen(function*() {
      const doc = fs.readFileSync(path.join(__dirname, "../../docs/config.md"), "utf8")
      const yaml = /```yaml\n([\s\S]*?)```/.exec(doc)![1]!
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-docs-"))
      const src = path.join(__dirname, "../../src")
      fs.writeFileSync(path.join(dir, "tasks.ts"), [
        "import { Effect } from \"effect\"",
        `import * as Task from ${JSON.stringify(path.join(src, "domain/Task.js"))}`,
        "export const score = Task.make(\"score\", {}, (x: unknown) => Effect.succeed(x))"
      ].join("\n"))
      fs.writeFileSync(path.join(dir, "my-plugin.ts"), "export const tasks = {}\n")
      fs.writeFileSync(path.join(dir, "experiment.yaml"), yaml)
      const e = yield* Experiment.load(path.join(dir, "experiment.yaml"), { strictEnv: true, env: { OPENAI_KEY: "sk-test" } })
      assert.deepStrictEqual(e.template.tasks.map((t) => t.name), ["delay", "simulateLlm", "score"])
      assert.strictEqual(e.run.store, path.join(dir, "runs/demo.db"))
      assert.strictEqual(yield* e.size(), 8)
      // A store is named: no warning. None at all: the in-memory store, and a warning.
      assert.isUndefined(Experiment.noStoreWarning(e, undefined))
      const bare = yield* Experiment.fromDefinition({ pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 1 } } })
      assert.include(Experiment.noStoreWarning(bare, undefined), "results are not kept and there is nothing to resume")
      assert.isUndefined(Experiment.noStoreWarning(bare, ":memory:"))
    }).pipe(Effect.provide(NodeContext.layer)))
})
