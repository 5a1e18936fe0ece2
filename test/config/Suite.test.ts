/**
 * The suite file (src/config/Suite.ts): its Schema and every rule of the loader, each through
 * `SuiteConfig.load` on files written to a temporary directory.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as TOML from "smol-toml"
import * as YAML from "yaml"
import * as Experiment from "../../src/config/Experiment.js"
import * as SuiteConfig from "../../src/config/Suite.js"
import * as Root from "../../src/index.js"
import { suiteJsonSchema } from "../../src/cli/SchemaCommand.js"
import type { ConfigError } from "../../src/domain/Errors.js"
import * as SuiteIdentity from "../../src/domain/Suite.js"

const lines = (e: ConfigError) => e.issues.map((i) => `${i.path}: ${i.message}${i.suggestion !== undefined ? ` | ${i.suggestion}` : ""}`)

/** A member experiment: a pool `apis` (its key from ${API_KEY}), an echo task on it, a range source. */
const member = (over: Record<string, unknown> = {}) => ({
  run: { concurrency: 2, label: "standalone", store: "member.db" },
  pools: { apis: { resources: [{ id: "k", capacity: 2, options: { token: "${API_KEY}" } }] } },
  pipeline: { name: "m", tasks: [{ use: "echo", resource: "apis" }] },
  source: { range: { n: 3 } },
  ...over
})

/** A suite sharing `shared` between two members a and b. */
const suite = (over: Record<string, unknown> = {}) => ({
  suite: { id: "cmp" },
  run: { concurrency: 4 },
  output: { root: "out/cmp", layout: "byExperiment" },
  pools: { shared: { resources: [{ id: "s", capacity: 3, options: { token: "${API_KEY}" } }] } },
  experiments: {
    a: { config: "members/a.json", poolBindings: { apis: "shared" }, label: "A" },
    b: { config: "members/b.json" }
  },
  ...over
})

/** Writes files (objects as JSON, strings as is) under a new temporary directory. */
const dirWith = (files: Record<string, unknown>): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-suite-"))
  for (const [name, content] of Object.entries(files)) {
    const file = path.join(dir, name)
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, typeof content === "string" ? content : JSON.stringify(content, null, 2))
  }
  return dir
}

const standard = (suiteOver: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) =>
  dirWith({ "suite.json": suite(suiteOver), "members/a.json": member(), "members/b.json": member(), ...extra })

const env = { API_KEY: "k-1" }
const load = (file: string, options: SuiteConfig.SuiteLoadOptions = {}) =>
  SuiteConfig.load(file, { env, ...options }).pipe(Effect.provide(NodeContext.layer))
const failure = (file: string, options: SuiteConfig.SuiteLoadOptions = {}) =>
  Effect.map(Effect.flip(load(file, options)), lines)
const digests = (file: string, options: SuiteConfig.SuiteLoadOptions = {}) =>
  Effect.map(load(file, options), (s) => Object.fromEntries(s.members.map((m) => [m.id, m.definitionDigest])))

describe("SuiteConfig.load: the members' price tables", () => {
  it.effect("merged into the suite run's one table; a model two members price differently is refused by path", () =>
    Effect.gen(function*() {
      const price = { inputPer1M: 1, outputPer1M: 2 }
      const ok = dirWith({
        "suite.json": suite(),
        "members/a.json": member({ pricing: { m1: price } }),
        "members/b.json": member({ pricing: { m1: price, m2: { inputPer1M: 3, outputPer1M: 4 } } })
      })
      const s = yield* load(path.join(ok, "suite.json"))
      assert.deepStrictEqual(s.run, { concurrency: 4, pricing: { m1: price, m2: { inputPer1M: 3, outputPer1M: 4 } } })
      const clash = dirWith({
        "suite.json": suite(),
        "members/a.json": member({ pricing: { m1: price } }),
        "members/b.json": member({ pricing: { m1: { inputPer1M: 1, outputPer1M: 5 } } })
      })
      const problems = yield* failure(path.join(clash, "suite.json"))
      assert.isTrue(problems.some((l) => l.startsWith("experiments.b.pricing.m1: model m1 is priced differently by member a")), problems.join("\n"))
    }))
})

describe("SuiteConfig.load: a valid suite", () => {
  it.effect("ids, output root relative to the suite file, shared and private pools, aliases, ignored run fields", () =>
    Effect.gen(function*() {
      const dir = standard()
      const s = yield* load(path.join(dir, "suite.json"))
      assert.strictEqual(s.id, "cmp")
      assert.deepStrictEqual(s.output, { root: path.join(dir, "out/cmp"), layout: "byExperiment" })
      assert.deepStrictEqual(s.run, { concurrency: 4 })
      assert.deepStrictEqual(s.pools.map((p) => p.name), ["shared", "experiment:b:apis"])
      assert.deepStrictEqual(s.sharedPools, ["shared"])
      assert.deepStrictEqual(s.members.map((m) => m.id), ["a", "b"])
      const [a, b] = s.members
      assert.deepStrictEqual(a!.poolAliases, { apis: "shared" })
      assert.deepStrictEqual(b!.poolAliases, { apis: "experiment:b:apis" })
      assert.strictEqual(a!.label, "A")
      assert.isUndefined(b!.label)
      assert.isUndefined(a!.limit)
      assert.strictEqual(a!.config, path.join(dir, "members/a.json"))
      assert.deepStrictEqual(a!.ignoredRunFields, ["concurrency", "label", "store"])
      assert.strictEqual(a!.memberDigest, SuiteIdentity.memberDigest("cmp", "a"))
      assert.match(a!.definitionDigest, /^[0-9a-f]{32}$/)
      assert.strictEqual(a!.outputDir, path.join(dir, "out/cmp/experiments/a"))
      // the private pool keeps its resources and its kind
      const priv = s.pools.find((p) => p.name === "experiment:b:apis")!
      assert.strictEqual(priv.options.kind, "apis")
      assert.strictEqual(priv.resources[0]!.capacity, 2)
      assert.deepStrictEqual(s.warnings, [])
    }))

  it.effect("a member's own paths keep their standalone meaning (relative to the member file)", () =>
    Effect.gen(function*() {
      const dir = dirWith({
        "suite.json": suite({ experiments: { a: { config: "members/a.json" } }, pools: {} }),
        "members/a.json": member({ source: { jsonl: { path: "rows.jsonl" } } }),
        "members/rows.jsonl": "{\"x\":1}\n"
      })
      const s = yield* load(path.join(dir, "suite.json"))
      const src = s.members[0]!.experiment.source
      assert.strictEqual(src.kind, "jsonl")
      if (src.kind === "jsonl") assert.strictEqual(src.path, path.join(dir, "members/rows.jsonl"))
    }))

  it.effect("combined layout: every member writes to the root; layout defaults to combined", () =>
    Effect.gen(function*() {
      const dir = standard({ output: { root: "out" } })
      const s = yield* load(path.join(dir, "suite.json"))
      assert.strictEqual(s.output.layout, "combined")
      assert.deepStrictEqual(s.members.map((m) => m.outputDir), [path.join(dir, "out"), path.join(dir, "out")])
    }))

  it.effect("the outputRoot option (--output-root) replaces output.root and is relative to the working directory", () =>
    Effect.gen(function*() {
      const dir = standard({ output: { layout: "combined" } })
      const s = yield* load(path.join(dir, "suite.json"), { outputRoot: "elsewhere/x" })
      assert.strictEqual(s.output.root, path.resolve("elsewhere/x"))
      const missing = yield* failure(path.join(dir, "suite.json"))
      assert.deepStrictEqual(missing, [
        "output.root: is missing | output: { root: runs/cmp } (relative to the suite file), or --output-root DIR"
      ])
    }))

  it.effect("YAML, TOML and a TypeScript module give the same suite and the same digests", () =>
    Effect.gen(function*() {
      const dir = standard()
      const doc = suite()
      fs.writeFileSync(path.join(dir, "suite.yaml"), YAML.stringify(doc))
      fs.writeFileSync(path.join(dir, "suite.toml"), TOML.stringify(doc))
      fs.writeFileSync(path.join(dir, "suite.mjs"), `export default ${JSON.stringify(doc)}\n`)
      const json = yield* digests(path.join(dir, "suite.json"))
      assert.deepStrictEqual(yield* digests(path.join(dir, "suite.yaml")), json)
      assert.deepStrictEqual(yield* digests(path.join(dir, "suite.toml")), json)
      assert.deepStrictEqual(yield* digests(path.join(dir, "suite.mjs")), json)
    }))

  it.effect("describe() lists the ignored run fields, the effective overrides and the pool mapping", () =>
    Effect.gen(function*() {
      const dir = standard()
      const d = (yield* load(path.join(dir, "suite.json"))).describe() as any
      assert.deepStrictEqual(d.suite.id, "cmp")
      assert.deepStrictEqual(d.output, { root: path.join(dir, "out/cmp"), layout: "byExperiment" })
      assert.strictEqual(d.run.concurrency, 4)
      const a = d.experiments[0]
      assert.deepStrictEqual(a.ignoredRunFields, ["concurrency", "label", "store"])
      assert.deepStrictEqual(a.runOverrides.concurrency, { member: 2, effective: 4 })
      assert.deepStrictEqual(a.runOverrides.label, { member: "standalone", effective: "" })
      assert.deepStrictEqual(a.runOverrides.store, { member: "member.db", effective: `output.root (${path.join(dir, "out/cmp")})` })
      assert.notProperty(d.run, "store")
      assert.deepStrictEqual(a.pools, { apis: "shared" })
      assert.deepStrictEqual(d.experiments[1].pools, { apis: "experiment:b:apis" })
      assert.deepStrictEqual(d.pools.map((p: any) => [p.name, p.shared, p.boundBy]), [
        ["shared", true, [{ experiment: "a", local: "apis" }]],
        ["experiment:b:apis", false, []]
      ])
      assert.strictEqual(a.experiment.pipeline.name, "m")
      assert.notInclude(JSON.stringify(d), "k-1", "no expanded secret in the description")
    }))
})

describe("SuiteConfig.load: ids", () => {
  it.effect("a bad suite id is refused at suite.id", () =>
    Effect.gen(function*() {
      for (const [id, reason] of [["con", "reserved device name"], ["-x", "must start"], ["a b", "contains \" \""], ["", "must not be empty"]]) {
        const out = yield* failure(path.join(standard({ suite: { id } }), "suite.json"))
        assert.strictEqual(out.length, 1, String(out))
        assert.match(out[0]!, new RegExp(`^suite\\.id: .*${reason!.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`), id)
      }
    }))

  it.effect("bad member ids are refused at experiments.ID, each with its reason", () =>
    Effect.gen(function*() {
      const long = "x".repeat(81)
      const dir = standard({
        experiments: {
          "LPT1": { config: "members/a.json" },
          "_a": { config: "members/a.json" },
          "a.b": { config: "members/a.json" },
          [long]: { config: "members/a.json" }
        },
        pools: {}
      })
      const out = yield* failure(path.join(dir, "suite.json"))
      assert.deepStrictEqual(out, [
        "experiments.LPT1: member id \"LPT1\" is a reserved device name (LPT1) on Windows",
        "experiments._a: member id \"_a\" must start with an ASCII letter or digit",
        "experiments[\"a.b\"]: member id \"a.b\" contains \".\": only ASCII letters, digits, \"-\" and \"_\" are allowed",
        `experiments.${long}: member id "${long}" is longer than 80 characters (81)`
      ])
    }))

  it.effect("member ids are unique ignoring case", () =>
    Effect.gen(function*() {
      const dir = standard({
        experiments: { Base: { config: "members/a.json" }, base: { config: "members/b.json" } },
        pools: {}
      })
      const out = yield* failure(path.join(dir, "suite.json"))
      assert.deepStrictEqual(out, [
        "experiments.base: member id \"base\" is the same as \"Base\" ignoring case | member ids must differ ignoring case: they name directories"
      ])
    }))

  it.effect("a suite needs a member", () =>
    Effect.gen(function*() {
      const out = yield* failure(path.join(standard({ experiments: {}, pools: {} }), "suite.json"))
      assert.deepStrictEqual(out, ["experiments: a suite needs at least one member | experiments: { baseline: { config: baseline.yaml } }"])
    }))
})

describe("SuiteConfig.load: shape, run, output", () => {
  it.effect("unknown keys at every level, with did-you-mean", () =>
    Effect.gen(function*() {
      const s = suite() as any
      const doc = {
        ...s,
        experiment: {},
        suite: { id: "cmp", name: "x" },
        output: { root: "out", layuot: "combined" },
        experiments: { a: { config: "members/a.json", poolBinding: { apis: "shared" } }, b: { config: "members/b.json" } }
      }
      const out = yield* failure(path.join(dirWith({ "suite.json": doc, "members/a.json": member(), "members/b.json": member() }), "suite.json"))
      assert.deepStrictEqual(out, [
        "experiment: unknown key \"experiment\" | did you mean experiments?",
        "suite.name: unknown key \"name\" | name belongs under pools.<name>.algorithm.name",
        "output.layuot: unknown key \"layuot\" | did you mean layout?",
        "experiments.a.poolBinding: unknown key \"poolBinding\" | did you mean poolBindings?"
      ])
    }))

  it.effect("a bad layout, a bad limit, a missing config", () =>
    Effect.gen(function*() {
      const out = yield* failure(path.join(
        standard({
          output: { root: "out", layout: "by_experiment" },
          experiments: { a: { config: "members/a.json", limit: -1 }, b: { label: "no config" } },
          pools: {}
        }),
        "suite.json"
      ))
      assert.deepStrictEqual(out, [
        "output.layout: expected \"combined\" or \"byExperiment\", got \"by_experiment\" | did you mean \"byExperiment\"?",
        "experiments.a.limit: must be an integer >= 0",
        "experiments.b.config: is missing"
      ])
    }))

  it.effect("run.store is refused in a suite; the rest of run is checked as an experiment's", () =>
    Effect.gen(function*() {
      const out = yield* failure(path.join(standard({ run: { store: "x.db", concurency: 2, journal: "ful" } }), "suite.json"))
      assert.deepStrictEqual(out, [
        "run.concurency: unknown key \"concurency\" | did you mean concurrency?",
        "run.journal: expected \"full\" or \"summary\", got \"ful\" | did you mean \"full\"?",
        "run.store: is refused in a suite: output.root is the suite's one storage entry | remove run.store and set output.root"
      ])
    }))

  it.effect("run.artifactBackend: file is the layout-owned artifacts/ (accepted); an unknown backend is still refused", () =>
    Effect.gen(function*() {
      const loaded = yield* load(path.join(standard({ run: { artifactBackend: "file" } }), "suite.json"))
      assert.strictEqual(loaded.run.artifactBackend, "file")
      const out = yield* failure(path.join(standard({ run: { artifactBackend: "fyle" } }), "suite.json"))
      assert.strictEqual(out.length, 1)
      assert.match(out[0]!, /^run\.artifactBackend: unknown artifact backend "fyle"/)
    }))

  it.effect("${VAR} in the suite file: expanded; unresolved under strictEnv is an error at its path", () =>
    Effect.gen(function*() {
      const dir = standard({ output: { root: "${OUT_DIR:-out}/x" } })
      const s = yield* load(path.join(dir, "suite.json"))
      assert.strictEqual(s.output.root, path.join(dir, "out/x"))
      const out = yield* failure(path.join(dir, "suite.json"), { strictEnv: true, env: {} })
      assert.include(out, "pools.shared.resources[0].options.token: environment variable API_KEY is not set (--strict-env) | export API_KEY=... or write ${API_KEY:-default}")
    }))
})

describe("SuiteConfig.load: members", () => {
  it.effect("a member's problems are listed under experiments.ID.config with its file and field path", () =>
    Effect.gen(function*() {
      const dir = dirWith({
        "suite.json": suite(),
        "members/a.json": member({ pipeline: { name: "m", tasks: [{ use: "ecoh", resource: "apis" }] } }),
        "members/b.json": member()
      })
      const out = yield* failure(path.join(dir, "suite.json"))
      assert.deepStrictEqual(out, [
        `experiments.a.config: ${path.join("members", "a.json")}: pipeline.tasks[0].use: unknown task "ecoh" | did you mean echo?`
      ])
    }))

  it.effect("a pricing mistake in a shared pool or in a member file has the experiment's exact path and did-you-mean", () =>
    Effect.gen(function*() {
      const typo = { inputPer1M: -1, outputPr1M: 2 }
      const dir = dirWith({
        "suite.json": suite({ pools: { shared: { resources: [{ id: "s", capacity: 3, options: { token: "${API_KEY}" }, pricing: typo }] } } }),
        "members/a.json": member(),
        "members/b.json": member({ pools: { apis: { resources: [{ id: "k", capacity: 2, options: { token: "${API_KEY}" }, pricing: typo }] } } })
      })
      const out = yield* failure(path.join(dir, "suite.json"))
      const b = `experiments.b.config: ${path.join("members", "b.json")}: `
      for (const prefix of ["pools.shared.resources[0].pricing", `${b}pools.apis.resources[0].pricing`]) {
        assert.include(out, `${prefix}.outputPr1M: unknown key "outputPr1M" | did you mean outputPer1M?`, out.join("\n"))
        assert.include(out, `${prefix}.inputPer1M: inputPer1M must be >= 0, got -1`, out.join("\n"))
      }
    }))

  it.effect("a missing member file, a member that is a suite, the suite itself as a member", () =>
    Effect.gen(function*() {
      const dir = dirWith({
        "suite.json": suite({
          experiments: { a: { config: "nope.json" }, b: { config: "inner.json" }, c: { config: "suite.json" } },
          pools: {}
        }),
        "inner.json": suite()
      })
      const out = yield* failure(path.join(dir, "suite.json"))
      assert.deepStrictEqual(out, [
        `experiments.a.config: nope.json: no such file: ${path.join(dir, "nope.json")}`,
        "experiments.b.config: inner.json is a suite file: suites do not nest",
        "experiments.c.config: is the suite file itself: a member is an experiment file"
      ])
    }))

  it.effect("an out-of-range value, a misspelt key and a binding in one pass (tester16b N3): none hides another", () =>
    Effect.gen(function*() {
      const dir = standard({
        run: { concurrency: 0 },
        experiments: {
          a: { config: "members/a.json", poolBindings: { apis: "shared" }, stopAfterFailures: 0 },
          b: { config: "members/b.json", lable: "B", poolBindings: { apis: "shraed" } }
        }
      })
      const out = yield* failure(path.join(dir, "suite.json"))
      assert.sameMembers(out.map((l) => l.split(":")[0]), [
        "run.concurrency",
        "experiments.a.stopAfterFailures",
        "experiments.b.lable",
        "experiments.b.poolBindings.apis"
      ], out.join("\n"))
      assert.include(out, "experiments.b.lable: unknown key \"lable\" | did you mean label?")
      assert.include(out, "experiments.b.poolBindings.apis: no top-level pool \"shraed\" | did you mean shared?")
    }))

  it.effect("bindings: the local name must be a member's pool, the target a top-level pool (did-you-mean)", () =>
    Effect.gen(function*() {
      const dir = standard({
        experiments: {
          a: { config: "members/a.json", poolBindings: { apsi: "shared" } },
          b: { config: "members/b.json", poolBindings: { apis: "shraed" } }
        }
      })
      const out = yield* failure(path.join(dir, "suite.json"))
      assert.deepStrictEqual(out, [
        "experiments.a.poolBindings.apsi: members/a.json declares no pool \"apsi\" | did you mean apis?",
        "experiments.b.poolBindings.apis: no top-level pool \"shraed\" | did you mean shared?"
      ])
    }))

  it.effect("a top-level pool cannot take a private pool's name", () =>
    Effect.gen(function*() {
      const dir = standard({ pools: { "experiment:b:apis": { resources: [{ capacity: 1 }] } }, experiments: { b: { config: "members/b.json" } } })
      const out = yield* failure(path.join(dir, "suite.json"))
      assert.deepStrictEqual(out, ["pools.experiment:b:apis: names starting with \"experiment:\" are reserved for members' private pools | rename the pool"])
    }))

  it.effect("unbound pools of the same name stay private to each member; a shared pool bound by nobody is a warning", () =>
    Effect.gen(function*() {
      const dir = standard({ experiments: { a: { config: "members/a.json" }, b: { config: "members/b.json" } } })
      const s = yield* load(path.join(dir, "suite.json"))
      assert.deepStrictEqual(s.pools.map((p) => p.name), ["shared", "experiment:a:apis", "experiment:b:apis"])
      assert.deepStrictEqual(s.warnings, ["warning: pools.shared is bound by no member"])
    }))
})

describe("SuiteConfig.load: definition digest", () => {
  const file = (dir: string) => path.join(dir, "suite.json")

  it.effect("stable under a rotated ${API_KEY}, a label change, member order and an added member", () =>
    Effect.gen(function*() {
      const dir = standard()
      const base = yield* digests(file(dir))
      assert.notStrictEqual(base["a"], base["b"], "bound vs private pools differ")
      assert.deepStrictEqual(yield* digests(file(dir), { env: { API_KEY: "k-2-rotated" } }), base)
      const s = suite() as any
      const relabeled = standard({ experiments: { a: { ...s.experiments.a, label: "renamed" }, b: { ...s.experiments.b, label: "B" } } })
      assert.deepStrictEqual(yield* digests(file(relabeled)), base)
      const reordered = standard({ experiments: { b: s.experiments.b, a: s.experiments.a } })
      assert.deepStrictEqual(yield* digests(file(reordered)), base)
      const added = standard({ experiments: { ...s.experiments, c: { config: "members/a.json" } } })
      const withC = yield* digests(file(added))
      assert.strictEqual(withC["a"], base["a"])
      assert.strictEqual(withC["b"], base["b"])
      // a renamed template is no identity either
      const renamed = dirWith({ "suite.json": suite(), "members/a.json": member({ pipeline: { name: "other", tasks: [{ use: "echo", resource: "apis" }] } }), "members/b.json": member() })
      assert.strictEqual((yield* digests(file(renamed)))["a"], base["a"])
      // nor the member's run block
      const rerun = dirWith({ "suite.json": suite(), "members/a.json": member({ run: { concurrency: 9 } }), "members/b.json": member() })
      assert.strictEqual((yield* digests(file(rerun)))["a"], base["a"])
    }))

  it.effect("changed by a literal change of a shared or private pool, a binding, the limit, the source or the tasks", () =>
    Effect.gen(function*() {
      const base = yield* digests(file(standard()))
      const s = suite() as any
      const sharedId = yield* digests(file(standard({ pools: { shared: { resources: [{ id: "s2", capacity: 3, options: { token: "${API_KEY}" } }] } } })))
      assert.notStrictEqual(sharedId["a"], base["a"])
      assert.strictEqual(sharedId["b"], base["b"], "b does not use the shared pool")
      const sharedVar = yield* digests(file(standard({ pools: { shared: { resources: [{ id: "s", capacity: 3, options: { token: "${OTHER_KEY}" } }] } } })))
      assert.notStrictEqual(sharedVar["a"], base["a"], "another variable name is a literal change")
      const privateCap = dirWith({
        "suite.json": suite(),
        "members/a.json": member(),
        "members/b.json": member({ pools: { apis: { resources: [{ id: "k", capacity: 2, options: { token: "${API_KEY}", model: "m2" } }] } } })
      })
      const pc = yield* digests(file(privateCap))
      assert.notStrictEqual(pc["b"], base["b"])
      assert.strictEqual(pc["a"], base["a"], "a's own apis declaration is replaced by the shared pool")
      const twoShared = {
        shared: (s.pools as any).shared,
        other: { resources: [{ id: "s", capacity: 3, options: { token: "${API_KEY}" } }] }
      }
      const rebound = yield* digests(file(standard({
        pools: twoShared,
        experiments: { a: { config: "members/a.json", poolBindings: { apis: "other" } }, b: s.experiments.b }
      })))
      assert.notStrictEqual(rebound["a"], base["a"], "bound to another pool with the same declaration")
      const unbound = yield* digests(file(standard({ experiments: { a: { config: "members/a.json" }, b: s.experiments.b } })))
      assert.notStrictEqual(unbound["a"], base["a"])
      const limited = yield* digests(file(standard({ experiments: { a: { ...s.experiments.a, limit: 10 }, b: s.experiments.b } })))
      assert.notStrictEqual(limited["a"], base["a"])
      const source = dirWith({ "suite.json": suite(), "members/a.json": member({ source: { range: { n: 4 } } }), "members/b.json": member() })
      assert.notStrictEqual((yield* digests(file(source)))["a"], base["a"])
      const tasks = dirWith({ "suite.json": suite(), "members/a.json": member({ pipeline: { name: "m", tasks: [{ use: "echo", resource: "apis", version: "2" }] } }), "members/b.json": member() })
      assert.notStrictEqual((yield* digests(file(tasks)))["a"], base["a"])
    }))

  it.effect("not changed by a pool's run configuration (capacity, health and deadlock timings), up or down, shared or private", () =>
    Effect.gen(function*() {
      const base = yield* digests(file(standard()))
      for (const capacity of [1, 4, 100]) {
        const shared = yield* digests(file(standard({
          pools: {
            shared: {
              capacity: capacity + 1,
              cooldown: "5 seconds",
              degradeAfter: 2,
              deadAfter: 9,
              deadlockWarn: "1 minute",
              resources: [{ id: "s", capacity, cooldown: "1 second", options: { token: "${API_KEY}" } }]
            }
          }
        })))
        assert.deepStrictEqual(shared, base, `shared capacity ${capacity}`)
        const priv = dirWith({
          "suite.json": suite(),
          "members/a.json": member(),
          "members/b.json": member({ pools: { apis: { resources: [{ id: "k", capacity, degradeAfter: 3, options: { token: "${API_KEY}" } }] } } })
        })
        assert.deepStrictEqual(yield* digests(file(priv)), base, `private capacity ${capacity}`)
      }
    }))

  it("a definition's v1 digest (pools with their run configuration) is among its previous digests", () => {
    const pool = { bound: "shared", declaration: { resources: [{ id: "s", capacity: 3 }] } }
    const d = { task: "t", source: { range: { n: 1 } }, pools: { apis: pool }, limit: null }
    const bigger = { ...d, pools: { apis: { ...pool, declaration: { resources: [{ id: "s", capacity: 9 }] } } } }
    assert.strictEqual(SuiteConfig.definitionDigest(d), SuiteConfig.definitionDigest(bigger))
    const [v1] = SuiteConfig.previousDefinitionDigests(d)
    assert.notStrictEqual(v1, SuiteConfig.definitionDigest(d))
    assert.notStrictEqual(v1, SuiteConfig.previousDefinitionDigests(bigger)[0], "v1 digested the capacity")
    assert.notInclude(Object.keys(SuiteConfig.definitionParts(d)).join(" "), "capacity")
  })

  it("definitionDigest is the digest of [format, definition]", () => {
    const d = { task: "t", source: { range: { n: 1 } }, pools: {}, limit: null }
    assert.match(SuiteConfig.definitionDigest(d), /^[0-9a-f]{32}$/)
    assert.notStrictEqual(SuiteConfig.definitionDigest(d), SuiteConfig.definitionDigest({ ...d, limit: 1 }))
  })
})

describe("a JSON key written twice", () => {
  it.effect("is refused in a suite file and in a member's experiment file, at its field path, by the experiment loader's one check", () =>
    Effect.gen(function*() {
      const suiteText = JSON.stringify(suite(), null, 2).replace(
        `"config": "members/b.json"`,
        `"config": "members/b.json", "limit": 1, "limit": 2`
      )
      const dir = dirWith({ "suite.json": suiteText, "members/a.json": member(), "members/b.json": member() })
      const bySuite = yield* failure(path.join(dir, "suite.json"))
      assert.strictEqual(bySuite.length, 1, bySuite.join("\n"))
      assert.match(bySuite[0]!, /^experiments\.b\.limit: the key "limit" is written twice in one object \(line \d+, then line \d+ column \d+\); JSON would keep only the last value \| remove one of them$/)
      // a member file: reported under the member, with the member file's field path
      const memberText = `{ "source": { "range": { "n": 3 } },` + JSON.stringify(member()).slice(1)
      const dir2 = dirWith({ "suite.json": suite(), "members/a.json": member(), "members/b.json": memberText })
      const byMember = (yield* failure(path.join(dir2, "suite.json"))).join("\n")
      assert.match(byMember, /experiments\.b\.config/)
      assert.include(byMember, "source: the key \"source\" is written twice")
      // the experiment loader itself, alone
      const alone = yield* Effect.flip(Experiment.load(path.join(dir2, "members/b.json"), { env }).pipe(Effect.provide(NodeContext.layer)))
      assert.deepStrictEqual(alone.issues.map((i) => i.path), ["source"])
    }))
})

describe("defineSuite and a suite file missing its suite key", () => {
  it("defineSuite is exported from the package root, the same function as SuiteConfig.defineSuite", () => {
    assert.strictEqual(Root.defineSuite, SuiteConfig.defineSuite)
    const doc = suite() as unknown as Parameters<typeof Root.defineSuite>[0]
    assert.strictEqual(Root.defineSuite(doc), doc)
  })

  it.effect("a file with experiments but no suite key is loaded as an experiment, with a hint that it looks like a suite", () =>
    Effect.gen(function*() {
      const { suite: _, ...headless } = suite()
      const dir = standard({}, { "headless.json": headless })
      const file = path.join(dir, "headless.json")
      assert.isFalse(yield* SuiteConfig.isSuiteFile(file).pipe(Effect.provide(NodeContext.layer)))
      const e = yield* Effect.flip(Experiment.load(file).pipe(Effect.provide(NodeContext.layer)))
      const hint = e._tag === "ConfigError" ? e.issues.find((i) => i.path === "experiments") : undefined
      assert.isDefined(hint)
      assert.include(hint!.suggestion ?? "", "looks like a suite file missing its suite.id")
    }))
})

describe("SuiteConfig.isSuiteFile and the JSON Schema", () => {
  it.effect("a file with a top-level suite is a suite file; an experiment or an unreadable file is not", () =>
    Effect.gen(function*() {
      const dir = standard()
      const is = (f: string) => SuiteConfig.isSuiteFile(path.join(dir, f)).pipe(Effect.provide(NodeContext.layer))
      assert.isTrue(yield* is("suite.json"))
      assert.isFalse(yield* is("members/a.json"))
      assert.isFalse(yield* is("nope.json"))
      fs.writeFileSync(path.join(dir, "broken.json"), "{")
      assert.isFalse(yield* is("broken.json"))
      // refused only for a key written twice: still a suite file (its errors are then a suite's)
      fs.writeFileSync(path.join(dir, "dup.yaml"), "suite: { id: s }\nexperiments: {}\nexperiments: {}\n")
      assert.isTrue(yield* is("dup.yaml"))
    }))

  it("docs/suite.schema.json is exactly what assay schema --suite prints (regenerate: assay schema --suite > docs/suite.schema.json)", () => {
    const file = fileURLToPath(new URL("../../docs/suite.schema.json", import.meta.url))
    assert.deepStrictEqual(JSON.parse(fs.readFileSync(file, "utf8")), JSON.parse(JSON.stringify(suiteJsonSchema())))
  })

  it("the JSON Schema describes the sections and the id pattern, and refuses unknown keys", () => {
    const s = suiteJsonSchema() as any
    const root = s.$defs?.AssaySuite ?? s.definitions?.AssaySuite ?? s
    assert.deepStrictEqual(Object.keys(root.properties).sort(), ["$schema", "experiments", "output", "pools", "run", "suite"])
    assert.deepStrictEqual(root.required.sort(), ["experiments", "suite"])
    assert.include(JSON.stringify(s), "^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$")
    assert.isFalse(root.additionalProperties)
  })

  it("the Schema alone refuses a bad suite id with the reason", () => {
    const r = Schema.decodeUnknownEither(SuiteConfig.SuiteFile)({ suite: { id: "aux" }, experiments: {} })
    assert.isTrue(Either.isLeft(r))
    if (Either.isLeft(r)) assert.include(r.left.message, "\"aux\" is a reserved device name (AUX) on Windows")
  })
})
