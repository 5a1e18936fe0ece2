/**
 * The study file (src/config/Study.ts): the loader's rules through `StudyConfig.load` on the
 * fixtures of test/fixtures/studies and on files written to a temporary directory: formats,
 * variables, baseline, references, caps, budgets, the protocol digest, the plan, suiteFor.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as YAML from "yaml"
import { studyJsonSchema } from "../../src/cli/SchemaCommand.js"
import * as Experiment from "../../src/config/Experiment.js"
import { describeText } from "../../src/cli/StudyPlan.js"
import { runStudy } from "../../src/cli/StudyRun.js"
import * as StudyConfig from "../../src/config/Study.js"
import type { ConfigError } from "../../src/domain/Errors.js"
import * as Study from "../../src/domain/Study.js"
import * as Root from "../../src/index.js"
import * as StudyCatalog from "../../src/services/StudyCatalog.js"
import * as Suite from "../../src/services/Suite.js"
import { suiteEnv } from "../services/suiteFixture.js"

const fixtures = fileURLToPath(new URL("../fixtures/studies/", import.meta.url))
const lines = (e: ConfigError) => e.issues.map((i) => `${i.path}: ${i.message}${i.suggestion !== undefined ? ` | ${i.suggestion}` : ""}`)

const load = (file: string, options: StudyConfig.StudyLoadOptions = {}) =>
  StudyConfig.load(file, { env: {}, ...options }).pipe(Effect.provide(NodeContext.layer))
const failure = (file: string, options: StudyConfig.StudyLoadOptions = {}) => Effect.map(Effect.flip(load(file, options)), lines)

/** The base experiment: a chat task whose model, temperature and template are variables; a delay whose duration is one. */
const experiment = (over: Record<string, unknown> = {}) => ({
  pools: { llm: { resources: [{ id: "a", capacity: 2, options: { baseUrl: "http://127.0.0.1:9/v1", model: "base" } }] } },
  pipeline: {
    name: "classify",
    tasks: [
      {
        use: "chat",
        name: "classify",
        options: { resource: "llm", model: { $var: "model.model" }, temperature: { $var: "temperature" }, maxTokens: 10, template: { $var: "prompt" } },
        retry: { maxAttempts: 2 }
      },
      { use: "delay", name: "pause", args: [{ $var: "pause" }] }
    ]
  },
  source: { range: { n: 3 } },
  ...over
})

const study = (over: Record<string, unknown> = {}) => ({
  study: { id: "t", question: "Which?", type: "compare" },
  protocol: { experiment: "experiment.json" },
  output: { root: "out" },
  variables: [
    { name: "prompt", type: "prompt", values: { terse: "Spam? {{text}}", long: "Is this spam? Answer yes or no. {{text}}" } },
    { name: "model", type: "model", values: { small: { pool: "llm", model: "s-1" }, large: { pool: "llm", model: "l-1" } } },
    { name: "temperature", type: "range", start: 0, end: 1, step: 0.5 },
    { name: "pause", type: "enum", values: ["1 millis"] }
  ],
  baseline: { prompt: "terse", model: "small", temperature: 0, pause: "1 millis" },
  ...over
})

/** Writes files (objects as JSON, strings as is) under a new temporary directory; returns the study file's path. */
const write = (studyDoc: unknown, files: Record<string, unknown> = {}, name = "study.json"): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-study-"))
  const all: Record<string, unknown> = { "experiment.json": experiment(), [name]: studyDoc, ...files }
  for (const [n, content] of Object.entries(all)) {
    fs.writeFileSync(path.join(dir, n), typeof content === "string" ? content : JSON.stringify(content, null, 2))
  }
  return path.join(dir, name)
}

describe("StudyConfig.load: formats and the protocol digest", () => {
  it.effect("the same study in YAML, JSON, TOML and TypeScript (defineStudy) loads the same, with one protocol digest", () =>
    Effect.gen(function*() {
      const loaded = yield* Effect.forEach(["study.yaml", "study.json", "study.toml", "study.ts"], (f) => load(path.join(fixtures, f)))
      const digests = new Set(loaded.map((s) => s.protocolDigest))
      assert.strictEqual(digests.size, 1)
      assert.deepStrictEqual(loaded.map((s) => s.format), ["yaml", "json", "toml", "module"])
      for (const s of loaded) {
        assert.deepStrictEqual(s.protocolParts, loaded[0]!.protocolParts)
        assert.deepStrictEqual(s.variants.map((v) => v.key), loaded[0]!.variants.map((v) => v.key))
        assert.deepStrictEqual(s.plan, loaded[0]!.plan)
      }
    }))

  it.effect("a TypeScript study compiled as CommonJS (no \"type\": \"module\" nearby, not .mts) loads as written", () =>
    Effect.gen(function*() {
      // outside the repository: no package.json, so tsx compiles the file as CommonJS and
      // `export default` arrives wrapped as { default: ... }
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-cjs-study-"))
      const text = fs.readFileSync(path.join(fixtures, "study.ts"), "utf8")
        .replace(/^import \{ defineStudy \}.*$/m, "")
        .replace("defineStudy(", "(")
        .replace(`experiment: "./experiment.yaml"`, `experiment: ${JSON.stringify(path.join(fixtures, "experiment.yaml"))}`)
      assert.notMatch(text, /^import /m)
      fs.writeFileSync(path.join(dir, "study.ts"), text)
      const [yaml, cjs] = yield* Effect.forEach([path.join(fixtures, "study.yaml"), path.join(dir, "study.ts")], (f) => load(f))
      assert.strictEqual(cjs!.protocolDigest, yaml!.protocolDigest)
    }))

  it.effect("each protocol part changes the digest, and only that part's value changes", () =>
    Effect.gen(function*() {
      const before = yield* load(write(study()))
      const cases: Record<string, string> = {
        experiment: write(study(), { "experiment.json": experiment({ source: { range: { n: 4 } } }) }),
        variables: write(study({ variables: [...study().variables.slice(0, 3), { name: "pause", type: "enum", values: ["1 millis", "3 millis"] }] })),
        baseline: write(study({ baseline: { prompt: "long", model: "small", temperature: 0, pause: "1 millis" } })),
        repeats: write(study({ repeats: 2 })),
        budget: write(study({ budget: { perTrial: { calls: 10 } } })),
        stop: write(study({ stop: [{ when: "successfulTrials", count: 2 }] })),
        objectives: write(study({ objectives: [{ metric: "accuracy", direction: "maximize" }] }))
      }
      for (const [part, file] of Object.entries(cases)) {
        const after = yield* load(file)
        assert.notStrictEqual(after.protocolDigest, before.protocolDigest, part)
        assert.deepStrictEqual(Study.changedParts(before.protocolParts, after.protocolParts), [part], part)
      }
      // not in the protocol: the question, the output root, the run settings, the limits
      const same = yield* load(write(study({ study: { id: "t", question: "Other?", type: "compare" }, output: { root: "elsewhere" }, run: { concurrency: 3 }, limits: { maxTrials: 50 } })))
      assert.strictEqual(same.protocolDigest, before.protocolDigest)
    }))

  it.effect("the experiment's run section and its pools' capacities are not the protocol; a variable or a pool's model still is", () =>
    Effect.gen(function*() {
      const exp = experiment()
      const bare = yield* load(write(study(), { "experiment.json": { ...exp, pools: { llm: { resources: [{ id: "a", options: { baseUrl: "http://127.0.0.1:9/v1", model: "base" } }] } } } }))
      assert.deepStrictEqual(bare.previousProtocols, [], "an experiment without run or capacities has one digest")
      const pool = (capacity: number, model = "base") => ({
        llm: { capacity: capacity + 1, resources: [{ id: "a", capacity, options: { baseUrl: "http://127.0.0.1:9/v1", model } }] }
      })
      const withRun = yield* load(write(study(), { "experiment.json": { ...exp, run: { concurrency: 9, maxHandoffs: 3 }, pools: pool(7) } }))
      const otherRun = yield* load(write(study(), { "experiment.json": { ...exp, run: { concurrency: 1 }, pools: pool(1) } }))
      // the run section and capacities (pool-level and per resource) are left out of the digest
      assert.strictEqual(withRun.protocolDigest, otherRun.protocolDigest)
      assert.deepStrictEqual(Study.changedParts(withRun.protocolParts, otherRun.protocolParts), [])
      // what a previous build digested (the whole document) differs, and is offered as a previous digest
      assert.strictEqual(withRun.previousProtocols.length, 1)
      assert.notStrictEqual(withRun.previousProtocols[0]!.digest, otherRun.previousProtocols[0]!.digest)
      assert.isTrue(Study.protocolMatches(withRun.previousProtocols[0]!.digest, withRun))
      assert.isFalse(Study.protocolMatches(withRun.previousProtocols[0]!.digest, otherRun))
      // the legacy digest is the v1 digest of the document as written
      const legacy = Study.protocolDigest({ ...withRun.protocol, experiment: { ...(withRun.protocol.experiment as object), document: { ...exp, run: { concurrency: 9, maxHandoffs: 3 }, pools: pool(7) } } })
      assert.strictEqual(withRun.previousProtocols[0]!.digest, legacy)
      // a pool's identity (its resources' options) and a variable still change the protocol
      const otherModel = yield* load(write(study(), { "experiment.json": { ...exp, run: { concurrency: 9, maxHandoffs: 3 }, pools: pool(7, "other") } }))
      assert.deepStrictEqual(Study.changedParts(withRun.protocolParts, otherModel.protocolParts), ["experiment"])
      const otherVariable = yield* load(write(study({ variables: [...study().variables.slice(0, 3), { name: "pause", type: "enum", values: ["1 millis", "2 millis"] }] }), { "experiment.json": { ...exp, run: { concurrency: 9, maxHandoffs: 3 }, pools: pool(7) } }))
      assert.deepStrictEqual(Study.changedParts(withRun.protocolParts, otherVariable.protocolParts), ["variables"])
      assert.isFalse(Study.protocolMatches(withRun.protocolDigest, otherVariable))
    }))

  it.effect("a ${VAR} in the experiment is digested as written: a rotated value changes nothing", () =>
    Effect.gen(function*() {
      const exp = experiment()
      const withEnv = { ...exp, pools: { llm: { resources: [{ id: "a", options: { baseUrl: "${BASE_URL}", model: "base" } }] } } }
      const file = write(study(), { "experiment.json": withEnv })
      const a = yield* load(file, { env: { BASE_URL: "http://127.0.0.1:9/v1" } })
      const b = yield* load(file, { env: { BASE_URL: "http://127.0.0.1:10/v1" } })
      assert.strictEqual(a.protocolDigest, b.protocolDigest)
    }))
})

describe("StudyConfig.load: variables and references", () => {
  it.effect("each variant's experiment has its values bound; a prompt's $ and ${...} are kept as written", () =>
    Effect.gen(function*() {
      // the study file is expanded once (`$${HOME}` is a literal `${HOME}` there); the bound
      // value is not expanded again by the experiment loader
      const prompt = "Costs $5? ${HOME} {{text}}"
      const s = yield* load(write(study({
        variables: [
          { name: "prompt", type: "prompt", values: { terse: "Costs $5? $${HOME} {{text}}" } },
          ...study().variables.slice(1)
        ],
        baseline: { prompt: "terse", model: "large", temperature: 0.5, pause: "1 millis" }
      })))
      assert.strictEqual(s.variants.length, 6)
      assert.strictEqual(s.baseline.id, "v05")
      assert.isTrue(s.baseline.isBaseline)
      const trial = s.suiteFor(1).members.find((m) => m.id === "p1-v05-r1")!
      const chat = trial.experiment.template.tasks[0]!
      assert.strictEqual(chat.parameters["model"], "l-1")
      assert.strictEqual(chat.parameters["temperature"], 0.5)
      assert.strictEqual(chat.parameters["template"], prompt)
    }))

  it.effect("an unknown variable or field is an error at the reference's path in the experiment file, with a did-you-mean", () =>
    Effect.gen(function*() {
      const exp = experiment()
      const tasks = exp.pipeline.tasks as Array<any>
      tasks[0].options.temperature = { $var: "temprature" }
      tasks[0].options.model = { $var: "model.modle" }
      const problems = yield* failure(write(study(), { "experiment.json": exp }))
      // the variable a misspelled reference meant is not also reported as unused
      assert.deepStrictEqual(problems, [
        "protocol.experiment: experiment.json: pipeline.tasks[0].options.model: modle is not in the value of variable \"model\" for \"small\", \"large\" | did you mean { $var: \"model.model\" }?",
        "protocol.experiment: experiment.json: pipeline.tasks[0].options.temperature: unknown variable \"temprature\" | did you mean \"temperature\"?"
      ])
    }))

  it.effect("a misspelled required key (typ: for a variable's type) is named beside the missing one", () =>
    Effect.gen(function*() {
      const doc = study()
      const variables = doc.variables as Array<Record<string, unknown>>
      const { type: _type, ...rest } = variables[0]!
      variables[0] = { ...rest, typ: "prompt" }
      const problems = yield* failure(write(doc, { "experiment.json": experiment() }))
      assert.include(problems, "variables[0].type: is missing | found \"typ\": did you mean type?")
    }))

  it.effect("a variable no reference names, not even misspelled, is still reported as unused", () =>
    Effect.gen(function*() {
      const exp = experiment()
      ;(exp.pipeline.tasks as Array<any>)[0].options.temperature = 0
      const problems = yield* failure(write(study(), { "experiment.json": exp }))
      assert.deepStrictEqual(problems, [
        "variables[2]: variable \"temperature\" is not used by the protocol: remove it or reference it with { $var: \"temperature\" } in experiment.json"
      ])
    }))

  it.effect("a path into a number or a boolean is an error", () =>
    Effect.gen(function*() {
      const exp = experiment()
      ;(exp.pipeline.tasks as Array<any>)[0].options.temperature = { $var: "temperature.value" }
      const problems = yield* failure(write(study(), { "experiment.json": exp }))
      assert.include(problems, "protocol.experiment: experiment.json: pipeline.tasks[0].options.temperature: variable \"temperature\" is a range: its value has no field value | { $var: \"temperature\" }")
    }))

  it.effect("a malformed reference and a reference outside the pipeline are errors", () =>
    Effect.gen(function*() {
      const exp = experiment({ source: { range: { n: { $var: "pause" } } } })
      ;(exp.pipeline.tasks as Array<any>)[1].args = [{ $var: "pause", default: "1 millis" }]
      const problems = yield* failure(write(study(), { "experiment.json": exp }))
      assert.deepStrictEqual(problems, [
        "protocol.experiment: experiment.json: pipeline.tasks[1].args[0]: a variable reference is an object with the one key $var and the variable's name | { $var: \"temperature\" } or { $var: \"model.params.temperature\" }",
        "protocol.experiment: experiment.json: source.range.n: a variable cannot be referenced under source: pools, source, run and plugins are shared by every trial | reference variables in the pipeline's tasks (args, options, resource)",
        "variables[3]: variable \"pause\" is not used by the protocol: remove it or reference it with { $var: \"pause\" } in experiment.json"
      ])
    }))

  it.effect("the base experiment loaded on its own (validate, run, a suite member) refuses its unbound references", () =>
    Effect.gen(function*() {
      const e = yield* Effect.flip(Experiment.load(path.join(fixtures, "experiment.yaml"), { env: {} }).pipe(Effect.provide(NodeContext.layer)))
      const refs = lines(e).filter((l) => l.includes("outside a study"))
      assert.deepStrictEqual(refs, [
        "pipeline.tasks[0].options.model: a study variable reference ({ $var: \"model.model\" }) outside a study | this experiment is a study's protocol: check and run it through its study file (assay study plan STUDY)",
        "pipeline.tasks[0].options.temperature: a study variable reference ({ $var: \"temperature\" }) outside a study | this experiment is a study's protocol: check and run it through its study file (assay study plan STUDY)",
        "pipeline.tasks[0].options.template: a study variable reference ({ $var: \"prompt\" }) outside a study | this experiment is a study's protocol: check and run it through its study file (assay study plan STUDY)",
        "pipeline.tasks[1].args[0]: a study variable reference ({ $var: \"pause\" }) outside a study | this experiment is a study's protocol: check and run it through its study file (assay study plan STUDY)"
      ])
    }))

  it.effect("an unused variable of an experiment whose tasks are code is a warning, not an error", () =>
    Effect.gen(function*() {
      const s = yield* load(path.join(fixtures, "study-code.yaml"))
      assert.deepStrictEqual(s.variants.map((v) => v.assignment), [{ loud: false }, { loud: true }])
      assert.isTrue(s.warnings.some((w) => w.includes("variables[0]: variable \"loud\" is not referenced by experiment-code.yaml")))
    }))

  it.effect("a variant whose bound experiment is invalid is reported with the variant", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        variables: [...study().variables.slice(0, 3), { name: "pause", type: "enum", values: ["1 millis", "soon"] }]
      })))
      // one problem of 12 variants is listed once with them
      assert.deepStrictEqual(problems, [
        "protocol.experiment: experiment.json: pipeline.tasks[1].args[0]: \"soon\" is not a finite, non-negative duration (12 variants: v02, v04, v06, v08, v10, ...) | write a duration with a unit, for example \"300 millis\" or \"2 seconds\""
      ])
      const one = yield* failure(write(study({
        variables: [...study().variables.slice(0, 2), { name: "temperature", type: "range", start: 0, end: 0, step: 1 }, { name: "pause", type: "enum", values: ["1 millis", "soon"] }],
        baseline: { prompt: "terse", model: "small", temperature: 0, pause: "1 millis" }
      })))
      assert.strictEqual(one.length, 1)
      assert.match(one[0]!, /\(4 variants: v02, v04, v06, v08\)/)
    }))

  it.effect("duplicate names, repeated enum values, a range ending before its start, an unknown model pool", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        variables: [
          ...study().variables.slice(0, 2),
          { name: "temperature", type: "range", start: 1, end: 0, step: 0.5 },
          { name: "pause", type: "enum", values: ["1 millis", "1 millis"] },
          { name: "pause", type: "boolean" },
          { name: "m2", type: "model", values: { x: { pool: "lml", model: "x" } } }
        ]
      })))
      assert.includeMembers(problems, [
        "variables[2].end: must be >= start (1), got 0",
        "variables[3].values[1]: repeats values[0] (\"1 millis\")",
        "variables[4].name: variable \"pause\" is declared twice (first at variables[3])",
        "variables[5].values.x.pool: experiment.json declares no pool \"lml\" | did you mean llm?"
      ])
    }))

  it.effect("Schema problems carry field paths and did-you-mean", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write({ ...study(), variabels: [], repeats: 0, variables: [{ name: "x", type: "rnage", values: [] }] }))
      assert.includeMembers(problems, [
        "variabels: unknown key \"variabels\" | did you mean variables?",
        "repeats: must be an integer >= 1"
      ])
      assert.include(problems, "variables[0].type: expected \"enum\", \"range\", \"boolean\", \"prompt\", \"model\" or \"set\", got \"rnage\" | did you mean \"range\"?")
    }))
})

describe("StudyConfig.load: the baseline", () => {
  it.effect("missing, unknown and not-a-variant values are errors with their paths", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({ baseline: { prompt: "tesre", model: "small", temperature: 0.25, pauze: "1 millis" } })))
      assert.deepStrictEqual(problems, [
        "baseline.pauze: no variable \"pauze\" | did you mean \"pause\"?",
        "baseline.prompt: \"tesre\" is not a value of variable \"prompt\": the baseline must be one of the variants | did you mean \"terse\"?",
        "baseline.temperature: 0.25 is not a value of variable \"temperature\": the baseline must be one of the variants | one of: 0, 0.5, 1",
        "baseline.pause: is missing: the baseline gives every variable a value | one of: \"1 millis\""
      ])
    }))

  it.effect("a compare study must name its baseline; another type defaults to v01 with a warning", () =>
    Effect.gen(function*() {
      const { baseline: _b, ...rest } = study()
      const problems = yield* failure(write(rest))
      assert.strictEqual(problems.length, 1)
      assert.match(problems[0]!, /^baseline: is missing: a compare study names its baseline/)
      const s = yield* load(write({ ...rest, study: { id: "t", question: "Which?", type: "explore" } }))
      assert.strictEqual(s.baseline.id, "v01")
      assert.isTrue(s.warnings.includes("warning: baseline: not given; the first variant (v01) is the baseline"))
    }))

  it.effect("a set's baseline is its index or the list", () =>
    Effect.gen(function*() {
      const exp = experiment()
      ;(exp.pipeline.tasks as Array<any>).push({ use: "echo", name: "experts", resource: null, config: { experts: { $var: "experts" } } })
      const variables = [...study().variables, { name: "experts", type: "set", values: [["a", "b"], ["a", "c"]] }]
      const base = { prompt: "terse", model: "small", temperature: 0, pause: "1 millis" }
      const byIndex = yield* load(write(study({ variables, baseline: { ...base, experts: 1 } }), { "experiment.json": exp }))
      const byList = yield* load(write(study({ variables, baseline: { ...base, experts: ["a", "c"] } }), { "experiment.json": exp }))
      assert.deepStrictEqual(byIndex.baseline.assignment["experts"], 1)
      assert.strictEqual(byIndex.baseline.id, byList.baseline.id)
      assert.deepStrictEqual(byIndex.baseline.values["experts"], ["a", "c"])
    }))
})

describe("StudyConfig.load: unpriced models (tester16c F2)", () => {
  const priced = (small: boolean, large: boolean) => {
    const price = { promptPer1k: 0.001, completionPer1k: 0.002 }
    const base = study()
    const variables = (base.variables as Array<any>).map((v) =>
      v.name !== "model" ? v : {
        ...v,
        values: {
          small: { pool: "llm", model: "s-1", ...(small ? { price } : {}) },
          large: { pool: "llm", model: "l-1", ...(large ? { price } : {}) }
        }
      }
    )
    return write(study({ variables }), { "experiment.json": experiment({ pricing: { "judge-m": { inputPer1M: 1, outputPer1M: 2 } } }) })
  }
  const unpriced = (warnings: ReadonlyArray<string>) => warnings.filter((w) => w.includes("has no price"))

  it.effect("both model profiles priced: no warning (the experiment alone would warn about the baseline's model)", () =>
    Effect.gen(function*() {
      const s = yield* load(priced(true, true))
      assert.deepStrictEqual(unpriced(s.warnings), [])
    }))

  it.effect("one profile without a price: the warning names that model (and its variants), never the priced one", () =>
    Effect.gen(function*() {
      const s = yield* load(priced(true, false))
      const w = unpriced(s.warnings)
      assert.strictEqual(w.length, 1, w.join("\n"))
      assert.match(w[0]!, /^warning: model "l-1" has no price, so its calls will count as unpriced \(task classify on llm\/a; variants v\d+/)
      assert.include(w[0]!, `priced: "judge-m", "s-1"`)
      assert.notInclude(w[0]!, `model "s-1"`)
    }))

  it.effect("neither priced: one warning per model, both named", () =>
    Effect.gen(function*() {
      const w = unpriced((yield* load(priced(false, false))).warnings)
      assert.deepStrictEqual(w.map((x) => /model "([^"]+)"/.exec(x)?.[1]), ["s-1", "l-1"])
    }))
})

describe("StudyConfig.load: issue 16 trial, what plan knows of metrics", () => {
  /** The examples/judge study, with `over` merged into its study document and `metrics` declared when given. */
  const judged = (over: Record<string, unknown>) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-study-judge-"))
    const example = path.join(fileURLToPath(new URL("../../examples/judge/", import.meta.url)))
    for (const f of ["experiment.yaml", "emails.jsonl"]) fs.copyFileSync(path.join(example, f), path.join(dir, f))
    const doc = YAML.parse(fs.readFileSync(path.join(example, "study.yaml"), "utf8")) as Record<string, unknown>
    fs.writeFileSync(path.join(dir, "study.json"), JSON.stringify({ ...doc, output: { root: "out" }, ...over }))
    return path.join(dir, "study.json")
  }

  it.effect("a judge's metric and its verdict's fields are known: an objective or a stop on them is not unknown, a wrong verdict path is refused", () =>
    Effect.gen(function*() {
      const metrics = [{ name: "judgedRight", reducer: "mean", from: { output: "overall.answer" } }]
      const s = yield* load(judged({
        metrics,
        objectives: [{ metric: "judgeScore", direction: "maximize" }, { metric: "judgedRight", direction: "maximize" }],
        stop: [{ when: "metricThreshold", metric: "judgeScore", op: ">=", value: 0.99 }]
      }))
      assert.deepStrictEqual(s.warnings.filter((w) => /judgeScore|judgedRight|overall/.test(w)), [])
      // the verdict's shape is checked before the run: a path that leads nowhere is refused
      const wrong = yield* failure(judged({
        metrics: [{ name: "judgedRight", reducer: "mean", from: { output: "overall.anwser" } }],
        objectives: [{ metric: "judgeScor", direction: "maximize" }]
      }))
      // every problem in one pass (tester16 F6): the objective's metric and the verdict path
      assert.deepStrictEqual(wrong.map((p) => p.split(":")[0]), ["objectives[0].metric", "metrics[0].from.output"], wrong.join("\n"))
      assert.include(wrong[0], `unknown metric "judgeScor"`)
      assert.include(wrong[0], `did you mean "judgeScore"?`)
      // a judge of several candidates reports one score each: the refusal says which to name
      const two = judged({ metrics, objectives: [{ metric: "judgeScore", direction: "maximize" }] })
      const exp = path.join(path.dirname(two), "experiment.yaml")
      fs.writeFileSync(exp, fs.readFileSync(exp, "utf8").replace("candidates: { answer: content }", "candidates: { answer: content, label: label }"))
      const several = yield* failure(two)
      assert.deepStrictEqual(several, [
        `objectives[0].metric: unknown metric "judgeScore": not declared under metrics, not built in and not reported by a judge task | the judge reports one score per candidate: name one of "judgeScore.answer", "judgeScore.label", or declare a metric that reads them (metrics: [{ name: judgeScore, reducer: mean, from: { metric: judgeScore.answer } }])`
      ])
      const path_ = yield* failure(judged({ metrics: [{ name: "judgedRight", reducer: "mean", from: { output: "overall.anwser" } }] }))
      assert.strictEqual(path_.length, 1, path_.join("\n"))
      assert.match(path_[0]!, /^metrics\[0\]\.from\.output: metric "judgedRight": .*anwser.* \| did you mean "overall\.answer"\?$/)
    }))

  it.effect("an experiment with a YAML syntax error: the error alone, no false \"unknown metric\" for a judge's metric it cannot read (tester16c F11)", () =>
    Effect.gen(function*() {
      const file = judged({
        metrics: [{ name: "judgedRight", reducer: "mean", from: { output: "overall.answer" } }],
        objectives: [{ metric: "judgeScore", direction: "maximize" }, { metric: "judgedRight", direction: "maximize" }]
      })
      const exp = path.join(path.dirname(file), "experiment.yaml")
      fs.writeFileSync(exp, fs.readFileSync(exp, "utf8").replace("candidates: { answer: content }", "candidates: { answer: content"))
      const problems = yield* failure(file)
      assert.isTrue(problems.some((p) => p.startsWith("protocol.experiment: ") && /experiment\.yaml:\d+:\d+/.test(p)), problems.join("\n"))
      assert.notInclude(problems.join("\n"), "judgeScore", problems.join("\n"))
    }))

  it.effect("every problem of a study file in one pass, each at its field path: a misspelt key and choice, a baseline value, an objective's metric, an output path (tester16 F6)", () =>
    Effect.gen(function*() {
      const doc = YAML.parse(fs.readFileSync(path.join(fileURLToPath(new URL("../../examples/judge/", import.meta.url)), "study.yaml"), "utf8")) as Record<string, any>
      const problems = yield* failure(judged({
        study: { ...doc["study"], questoin: doc["study"].question, question: undefined, type: "compair" },
        baseline: Object.fromEntries(Object.entries(doc["baseline"] ?? {}).map(([k, v]) => [k, `${String(v)}x`])),
        metrics: [{ name: "judgedRight", reducer: "maen", from: { output: "overall.anwser" } }],
        objectives: [{ metric: "judgeScor", direction: "maximise" }]
      }))
      const paths = problems.map((p) => p.split(":")[0])
      for (
        const at of [
          "study.questoin",
          "study.type",
          "metrics[0].reducer",
          "objectives[0].direction",
          `baseline.${Object.keys(doc["baseline"] ?? {})[0]}`,
          "objectives[0].metric",
          "metrics[0].from.output"
        ]
      ) assert.include(paths, at, problems.join("\n"))
      // a value of the wrong type is removed for the later checks, which find nothing else here
      // (without a metrics section an unknown objective metric is not refused)
      const unrepaired = yield* failure(judged({ repeats: "three", objectives: [{ metric: "judgeScor", direction: "maximize" }] }))
      assert.deepStrictEqual(unrepaired.map((p) => p.split(":")[0]), ["repeats"], unrepaired.join("\n"))
    }))

  it.effect("an out-of-range value, a misspelt key and the references in one pass (tester16b N3): none hides another", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        repeats: 0, // out of range
        analysis: { level: 2 }, // out of range, optional: its default applies for the rest
        stop: [{ when: "successfulTrials", count: 0 }], // out of range, required: a stand-in for the rest
        metrics: [{ name: "accuracy", reducer: "mean", from: { output: "correct" } }],
        objectivs: [{ metric: "acuracy", direction: "maximize" }], // a misspelt key, its content checked as objectives
        baseline: { prompt: "terce", model: "small", temperature: 0, pause: "1 millis" } // not a value
      })))
      const paths = problems.map((p) => p.split(":")[0])
      assert.includeMembers(paths, ["repeats", "analysis.level", "stop[0].count", "objectivs", "objectives[0].metric", "baseline.prompt"], problems.join("\n"))
      assert.include(problems, "objectivs: unknown key \"objectivs\" | did you mean objectives?")
      assert.include(problems.find((p) => p.startsWith("objectives[0].metric")) ?? "", "did you mean \"accuracy\"?")
      // nothing about the stand-ins themselves
      assert.strictEqual(paths.length, 6, problems.join("\n"))
    }))

  it.effect("tester16d's file of about twenty mistakes: every one in one pass, a misspelt objectives section checked as objectives (F1), no empty choice list, each known metric once (F8)", () =>
    Effect.gen(function*() {
      const problems = yield* failure(path.join(fixtures, "many-mistakes.yaml"))
      const paths = problems.map((p) => p.split(":")[0])
      assert.deepStrictEqual([...paths].sort(), [
        "baseline.model",
        "baseline.temprature",
        "budget.perTrial.calls",
        "budget.perTrial.costUsd",
        "metrics[0].reducer",
        "metrics[1].name",
        "objectives[0].direction",
        "objectives[0].metric",
        "objectives[1].metric",
        "objectives[1].target",
        "objectives[2].hardConstraint.op",
        "objectives[2].target",
        "objectives[3].weight",
        "objectivs",
        "repeats",
        "run.concurency",
        "study.id",
        "study.type",
        "variables[2].end",
        "variables[2].step"
      ], problems.join("\n"))
      assert.include(problems, "objectives[0].direction: expected \"maximize\", \"minimize\" or \"target\", got \"maximise\" | did you mean \"maximize\"?")
      assert.include(problems, "objectives[2].target: only direction target takes a target (direction is minimize)")
      assert.include(problems, "variables[2].end: must be >= start (1), got 0")
      // the baseline's temperature has no value to name: the range's own problem says why
      assert.notInclude(problems.join("\n"), "one of: )")
      const known = problems.find((p) => p.startsWith("objectives[1].metric")) ?? ""
      assert.strictEqual(known.split("\"calls\"").length - 1, 1, known)
      // the minimal case: only the misspelt key and the one mistake inside it
      const minimal = yield* failure(write(study({
        metrics: [{ name: "accuracy", reducer: "mean", from: { output: "correct" } }],
        objectivs: [{ metric: "accuracy", direction: "maximise" }]
      })))
      assert.deepStrictEqual(minimal.map((p) => p.split(":")[0]), ["objectivs", "objectives[0].direction"], minimal.join("\n"))
    }))

  it.effect("a variable with no value asks the baseline for none (no empty \"one of\"); the known metrics name a declared built-in once (tester16d F8)", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        variables: [...study()["variables"] as Array<Record<string, unknown>>].map((v) => v["name"] === "temperature" ? { ...v, start: 1, end: 0 } : v),
        baseline: { prompt: "terse", model: "small", pause: "1 millis" },
        metrics: [{ name: "calls", reducer: "mean", from: { output: "correct" } }],
        objectives: [{ metric: "spamShare", direction: "maximize" }]
      })))
      assert.deepStrictEqual(problems.map((p) => p.split(":")[0]), ["variables[2].end", "metrics[0].name", "objectives[0].metric"], problems.join("\n"))
      const known = problems[2]!
      assert.strictEqual(known.split("\"calls\"").length - 1, 1, known)
    }))

  it.effect("a metric declared direction target with no objective giving it a target is warned about at its path (tester16d F2); with one, nothing is said", () =>
    Effect.gen(function*() {
      const share = { name: "spamShare", reducer: "mean", from: { metric: "predictedSpam" }, direction: "target" }
      const bare = yield* load(write(study({ metrics: [share], objectives: [{ metric: "calls", direction: "minimize" }] })))
      const said = bare.warnings.filter((w) => w.includes("direction target"))
      assert.deepStrictEqual(said, [
        "warning: metrics[0].direction: \"spamShare\" is declared direction target, but no objective gives it a target value: its comparisons and worst/best cases read higher as better (as maximize); give it an objective ({ metric: spamShare, direction: target, target: VALUE }) or declare direction maximize or minimize"
      ])
      const aimed = yield* load(write(study({ metrics: [share], objectives: [{ metric: "spamShare", direction: "target", target: 0.5 }] })))
      assert.deepStrictEqual(aimed.warnings.filter((w) => w.includes("direction target")), [])
    }))

  it.effect("a range variable's out-of-range step is reported; the baseline is not judged against the stand-in, the other checks still run", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        variables: [...study()["variables"] as Array<Record<string, unknown>>].map((v) => v["name"] === "temperature" ? { ...v, step: 0 } : v),
        metrics: [{ name: "accuracy", reducer: "mean", from: { output: "correct" } }],
        objectives: [{ metric: "acuracy", direction: "maximize" }]
      })))
      const paths = problems.map((p) => p.split(":")[0])
      assert.deepStrictEqual(paths, ["variables[2].step", "objectives[0].metric"], problems.join("\n"))
    }))

  it.effect("a hard constraint or a threshold no value can meet is warned about (a rate above 1, a cost below 0, a judge's score above 1); a reported metric nothing reports too", () =>
    Effect.gen(function*() {
      // a costUsd objective needs the judge's model priced (a profile's price prices its model only)
      const file = judged({
        metrics: [
          { name: "spamShare", reducer: "rate", from: { output: "overall.answer" }, equals: 1 },
          { name: "quality", reducer: "mean", from: { metric: "judgeScores" } }
        ],
        objectives: [
          { metric: "spamShare", direction: "maximize", hardConstraint: { op: ">", value: 1 } },
          { metric: "costUsd", direction: "minimize", hardConstraint: { op: "<", value: 0 } },
          { metric: "judgeScore", direction: "maximize", hardConstraint: { op: ">=", value: 0.5 } }
        ],
        stop: [{ when: "metricThreshold", metric: "judgeScore", op: ">=", value: 5 }]
      })
      const exp = path.join(path.dirname(file), "experiment.yaml")
      fs.writeFileSync(exp, `pricing: { mock-judge: { inputPer1M: 1, outputPer1M: 2 } }\n${fs.readFileSync(exp, "utf8")}`)
      const s = yield* load(file)
      const w = s.warnings.filter((x) => x.startsWith("warning: objectives") || x.startsWith("warning: stop") || x.startsWith("warning: metrics"))
      assert.deepStrictEqual(w, [
        "warning: objectives[0].hardConstraint: no value of \"spamShare\" can meet spamShare > 1 (a rate is a share of cases, from 0 to 1): every trial would break it and the study would have no candidate; loosen or remove the constraint",
        "warning: objectives[1].hardConstraint: no value of \"costUsd\" can meet costUsd < 0 (a built-in metric (USD) is never below 0): every trial would break it and the study would have no candidate; loosen or remove the constraint",
        "warning: stop[0]: judgeScore >= 5 can never hold (a judge's overall score is from 0 to 1): this condition never stops the study",
        "warning: metrics[1].from.metric: no task of experiment.yaml reports \"judgeScores\" (its judges report \"judgeScore\"): metric \"quality\" will have no value (did you mean \"judgeScore\"?)"
      ])
    }))
})

describe("StudyConfig.load: a target outside a metric's range, a boolean's mean read as a share or pass@k (issue 16 trial)", () => {
  /** A study over the fixture task `check` (output `{ correct: boolean, score: number }`), with `over` merged in. */
  const checked = (over: Record<string, unknown>) =>
    write(
      { study: { id: "chk", question: "Which?" }, protocol: { experiment: "experiment.json" }, output: { root: "out" }, repeats: 1, ...over },
      { "experiment.json": { pipeline: { name: "chk", tasks: [{ use: `${path.join(fixtures, "tasks.ts")}#check` }] }, source: { range: { n: 3 } } } }
    )
  const planWarnings = (s: { readonly warnings: ReadonlyArray<string> }) =>
    s.warnings.filter((x) => x.startsWith("warning: objectives") || x.startsWith("warning: stop") || x.startsWith("warning: metrics"))

  it.effect("a target or a constraint no value can meet: a boolean's mean above 1, a ratio below 0, a percentage above 100, a cost target below 0", () =>
    Effect.gen(function*() {
      const s = yield* load(checked({
        metrics: [
          { name: "accuracy", reducer: "mean", from: { output: "correct" } },
          { name: "share", reducer: "mean", from: { output: "score" }, unit: "ratio" },
          { name: "pct", reducer: "mean", from: { output: "score" }, unit: "%" },
          { name: "passes", reducer: "sum", from: { output: "correct" } }
        ],
        objectives: [
          { metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 1.2 } },
          { metric: "share", direction: "minimize", hardConstraint: { op: "<", value: 0 } },
          { metric: "pct", direction: "target", target: 120 },
          { metric: "costUsd", direction: "target", target: -1 },
          { metric: "passes", direction: "maximize", hardConstraint: { op: "<", value: 0 } }
        ]
      }))
      assert.deepStrictEqual(planWarnings(s), [
        "warning: objectives[0].hardConstraint: no value of \"accuracy\" can meet accuracy >= 1.2 (the mean of the boolean output.correct (true 1, false 0) is from 0 to 1): every trial would break it and the study would have no candidate; loosen or remove the constraint",
        "warning: objectives[1].hardConstraint: no value of \"share\" can meet share < 0 (a metric in unit ratio is a share, from 0 to 1): every trial would break it and the study would have no candidate; loosen or remove the constraint",
        "warning: objectives[2].target: pct cannot reach 120 (a metric in unit % is a percentage, from 0 to 100): no variant ever meets the target, and the objective ranks variants by their distance to it as if it were maximize (100 is the nearest value); set a target from 0 to 100, or use direction maximize",
        "warning: objectives[3].target: costUsd cannot reach -1 (a built-in metric (USD) is never below 0): no variant ever meets the target, and the objective ranks variants by their distance to it as if it were minimize (0 is the nearest value); set a target from 0 to ∞, or use direction minimize",
        "warning: objectives[4].hardConstraint: no value of \"passes\" can meet passes < 0 (a sum of the boolean output.correct counts the cases where it is true, never below 0): every trial would break it and the study would have no candidate; loosen or remove the constraint"
      ])
    }))

  it.effect("a boolean's mean is a share (no warning); pass@k names (passAt5) and a percentile of a boolean say what is computed; in-range targets warn nothing", () =>
    Effect.gen(function*() {
      const s = yield* load(checked({
        metrics: [
          { name: "accuracy", reducer: "mean", from: { output: "correct" }, unit: "ratio" },
          { name: "passAt5", reducer: "mean", from: { output: "correct" } },
          { name: "medianRight", reducer: "p50", from: { output: "correct" } },
          { name: "score", reducer: "mean", from: { output: "score" } }
        ],
        objectives: [
          { metric: "accuracy", direction: "target", target: 0.9, hardConstraint: { op: ">=", value: 0.5 } },
          { metric: "score", direction: "target", target: 1e6 },
          { metric: "costUsd", direction: "minimize", hardConstraint: { op: "<=", value: 0.5 } }
        ]
      }))
      assert.deepStrictEqual(planWarnings(s), [
        "warning: metrics[1].name: \"passAt5\" reads as pass@k, which assay does not compute: mean of output.correct is the share of pipelines that pass, each repeat counted apart (pass@1, averaged over cases and then repeats), not whether any of k attempts passed; name it for what it is (e.g. passRate)",
        "warning: metrics[2].reducer: the p50 of the boolean output.correct is 0 or 1 (a percentile of false/true), not a share; the share of cases where it is true is reducer mean (or rate)"
      ])
      // what the mean of a boolean computes is said in the plan's notes, not warned about
      assert.include(s.plan.notes, "metric accuracy is the mean of the boolean output.correct (true 1, false 0): per trial the share of its cases where it is true, from 0 to 1, then the mean over repeats (each repeat counted apart: pass@1, not pass@k)")
      assert.isFalse(s.plan.notes.some((n) => n.startsWith("metric score ")))
    }))

  it.effect("the examples' studies warn nothing about metric ranges or readings", () =>
    Effect.gen(function*() {
      for (const f of ["studies/study.yaml", "studies/spam-prompts/study.yaml", "judge/study.yaml"]) {
        const file = fileURLToPath(new URL(`../../examples/${f}`, import.meta.url))
        if (!fs.existsSync(file)) continue
        const sample = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-spam-sample-")), "sample.jsonl")
        fs.writeFileSync(sample, `{"id":"a"}\n`)
        const s = yield* load(file, { env: { SPAM_PROMPTS_API_KEY: "x", SPAM_PROMPTS_SAMPLE: sample } })
        assert.deepStrictEqual(planWarnings(s).filter((w) => / range|cannot reach|can never|pass@k|percentile of/.test(w)), [], f)
      }
    }))
})

describe("StudyConfig.load: caps, budgets, stop conditions", () => {
  it.effect("more trials than limits.maxTrials (default 200) is refused at limits.maxTrials, asking to reduce the variables", () =>
    Effect.gen(function*() {
      const problems = yield* failure(path.join(fixtures, "too-many-trials.yaml"))
      assert.deepStrictEqual(problems, [
        "limits.maxTrials: the plan has 202 trials, above the cap of 200: reduce the variables (101 variants x 2 repeats) | studies are never sampled: narrow a range, drop values, or lower repeats"
      ])
    }))

  it.effect("a range of a billion steps is refused by its count, without being listed", () =>
    Effect.gen(function*() {
      const variables = [...study().variables.slice(0, 2), { name: "temperature", type: "range", start: 0, end: 1e9, step: 1 }, study().variables[3]]
      const problems = yield* failure(write(study({ variables, baseline: { prompt: "terse", model: "small", temperature: 0.5, pause: "1 millis" } })))
      assert.deepStrictEqual(problems, [
        "baseline.temperature: 0.5 is not a value of variable \"temperature\": the baseline must be one of the variants | one of: 0, 1, 2, 3, 4, 5, 6, 7, ... (1000000001 values)"
      ])
      const over = yield* failure(write(study({ variables, baseline: { prompt: "terse", model: "small", temperature: 1, pause: "1 millis" } })))
      assert.deepStrictEqual(over.map((p) => p.split(" | ")[0]), [
        "limits.maxTrials: the plan has 4000000004 trials, above the cap of 200: reduce the variables (4000000004 variants x 1 repeat)"
      ])
    }))

  it.effect("issue 16 trial: the plan of a billion-step range shows its first values and its count, never the list", () =>
    Effect.gen(function*() {
      const variables = [...study().variables.slice(0, 2), { name: "temperature", type: "range", start: 0, end: 1e9, step: 1 }, study().variables[3]]
      const s = yield* load(write(study({ variables, baseline: { prompt: "terse", model: "small", temperature: 1, pause: "1 millis" } })), { allowOverCap: true })
      assert.strictEqual(s.plan.variants, 4_000_000_004)
      const text = describeText(s)
      assert.include(text, "\nvariable temperature (range): 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (1,000,000,001 values)\n")
      assert.include(text, "\nvariable pause (enum): 1 millis\n")
    }))

  it.effect("issue 16 trial: a raised limits.maxTrials does not make the loader expand more than MAX_EXPANDED_VARIANTS variants", () =>
    Effect.gen(function*() {
      // 2 prompts x 2 models x 2,501 temperatures = 10,004 variants, within a maxTrials of a million
      const variables = [...study().variables.slice(0, 2), { name: "temperature", type: "range", start: 0, end: 2500, step: 1 }, study().variables[3]]
      const problems = yield* failure(write(study({ variables, limits: { maxTrials: 1_000_000 } })), { allowOverCap: true })
      assert.deepStrictEqual(problems, [
        "variables: 10,004 variants, above the 10,000 a study expands (limits.maxTrials 1,000,000 allows them, but each variant is an experiment built and checked before anything runs) | studies are never sampled: narrow a range, drop values, or split the study"
      ])
    }))

  it.effect("each declared cap is refused; with allowOverCap the plan lists them instead", () =>
    Effect.gen(function*() {
      const file = path.join(fixtures, "over-caps.yaml")
      const problems = yield* failure(file)
      assert.deepStrictEqual(problems.map((p) => p.split(":")[0]), ["limits.maxTrials", "limits.maxPipelines", "limits.maxCalls", "limits.maxTokens"])
      const s = yield* load(file, { allowOverCap: true })
      assert.deepStrictEqual(s.plan.caps, [
        { name: "maxTrials", limit: 10, planned: 12 },
        { name: "maxPipelines", limit: 40, planned: 48 },
        { name: "maxCalls", limit: 100, planned: 144 },
        { name: "maxTokens", limit: 1000, planned: 1728 }
      ])
      // each cap alone
      for (const [cap, limit] of [["maxPipelines", 17], ["maxCalls", 35], ["maxTokens", 200]] as const) {
        const alone = yield* failure(write(study({ limits: { [cap]: limit } })))
        assert.strictEqual(alone.length, 1, cap)
        assert.match(alone[0]!, new RegExp(`^limits\\.${cap}: the plan has \\d+ .*above the cap of ${limit}: reduce the variables \\(12 variants x 1 repeat\\)`))
      }
    }))

  it.effect("one objective per metric: a metric named twice is refused at its path, and contradictory hard constraints are named", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        objectives: [
          { metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.9 } },
          { metric: "accuracy", direction: "maximize", hardConstraint: { op: "<=", value: 0.5 } },
          { metric: "calls", direction: "minimize" },
          { metric: "calls", direction: "minimize" }
        ]
      })))
      assert.deepStrictEqual(problems, [
        "objectives[1].metric: metric \"accuracy\" is already an objective (objectives[0]), and the two hard constraints contradict each other (accuracy >= 0.9 and accuracy <= 0.5: no value meets both) | give each metric one objective, with at most one hardConstraint",
        "objectives[3].metric: metric \"calls\" is already an objective (objectives[2]) | give each metric one objective, with at most one hardConstraint"
      ])
    }))

  it.effect("a costUsd budget or objective needs a price for every model the study can call, from the pricing tables; a budget stop needs budget.total", () =>
    Effect.gen(function*() {
      const stopOnly = yield* failure(write(study({ budget: { perTrial: { calls: 5 } }, stop: [{ when: "budget" }] })))
      assert.deepStrictEqual(stopOnly, [
        "stop[0]: a budget stop condition needs budget.total (calls, tokens, costUsd or time) | budget: { total: { calls: 10000 } }"
      ])
      // no price anywhere: the budget and the objective are refused by path, naming the models
      const costed = study({
        budget: { perTrial: { costUsd: 0.5 } },
        objectives: [{ metric: "costUsd", direction: "minimize" }]
      })
      const problems = yield* failure(write(costed))
      assert.deepStrictEqual(problems.map((p) => p.split(":")[0]), ["budget.perTrial.costUsd", "objectives[0].metric"])
      assert.include(problems[0]!, "needs a price for every model the study can call; none for model s-1 (task classify on llm/a), variants ")
      assert.include(problems[0]!, "model l-1 (task classify on llm/a)")
      assert.include(problems[0]!, "| add the model to the experiment's pricing")
      // the experiment's pricing table prices one model: the other is still named
      const half = yield* failure(write(costed, { "experiment.json": experiment({ pricing: { "s-1": { inputPer1M: 1, outputPer1M: 2 } } }) }))
      assert.notInclude(half[0]!, "model s-1")
      assert.include(half[0]!, "model l-1")
      // every model priced by the table (no profile price): loaded, the trials priced by it
      const table = { "s-1": { inputPer1M: 1, outputPer1M: 2 }, "l-1": { inputPer1M: 10, outputPer1M: 20 } }
      const priced = yield* load(write(costed, { "experiment.json": experiment({ pricing: table }) }))
      assert.deepStrictEqual(priced.budget.perTrial, { costUsd: 0.5 })
      const small = priced.variants.find((v) => v.assignment["model"] === "small")!
      assert.deepStrictEqual(priced.variantPrice(small.id), { promptPer1k: 0.001, completionPer1k: 0.002 })
      // a resource's own pricing prices every model it serves
      const own = experiment()
      ;(own.pools as any).llm.resources[0].pricing = { inputPer1M: 3, outputPer1M: 4 }
      const byResource = yield* load(write(costed, { "experiment.json": own }))
      assert.deepStrictEqual(byResource.variantPrice(small.id), { promptPer1k: 0.003, completionPer1k: 0.004 })
      assert.isNotNull(byResource.plan.costUsd)
      const s = yield* load(write(study({ budget: { perTrial: { calls: 7, time: "2 minutes" }, total: { tokens: 1000 } }, stop: [{ when: "budget", running: "cancel" }] })))
      assert.deepStrictEqual(s.budget, { perTrial: { calls: 7, timeMs: 120_000 }, total: { tokens: 1000 } })
      assert.deepStrictEqual(s.stop, [{ when: "budget", running: "cancel" }])
    }))

  it.effect("a model profile's price prices calls to the profile's model only: a judge on another model needs its own price for a costUsd budget", () =>
    Effect.gen(function*() {
      const profiles = {
        small: { pool: "llm", model: "s-1", price: { promptPer1k: 0.001, completionPer1k: 0.002 } },
        large: { pool: "llm", model: "l-1", price: { promptPer1k: 0.01, completionPer1k: 0.02 } }
      }
      const base = study()
      const priced = study({
        variables: base.variables.map((v: any) => v.name === "model" ? { ...v, values: profiles } : v),
        budget: { perTrial: { costUsd: 0.5 } }
      })
      // a second model-calling task on a fixed model (as a judge is): not the variant's model
      const judged = (over: Record<string, unknown> = {}) => {
        const e = experiment(over) as any
        e.pipeline.tasks.push({ use: "chat", name: "grade", options: { resource: "llm", model: "judge-m", maxTokens: 10, template: "Grade: {{text}}" } })
        return e
      }
      const problems = yield* failure(write(priced, { "experiment.json": judged() }))
      assert.strictEqual(problems.length, 1)
      assert.include(problems[0]!, "budget.perTrial.costUsd: a cost in US dollars needs a price for every model the study can call; none for model judge-m (task grade on llm/a)")
      assert.notInclude(problems[0]!, "model s-1")
      // the judge's model priced by the experiment's table: loaded, the variant's dearest price is the judge's
      const ok = yield* load(write(priced, { "experiment.json": judged({ pricing: { "judge-m": { inputPer1M: 5, outputPer1M: 50 } } }) }))
      const small = ok.variants.find((v) => v.assignment["model"] === "small")!
      assert.deepStrictEqual(ok.variantPrice(small.id), { promptPer1k: 0.005, completionPer1k: 0.05 })
    }))

  it.effect("run.store is refused; output.root is required (or --output-root)", () =>
    Effect.gen(function*() {
      const { output: _o, ...rest } = study()
      const problems = yield* failure(write({ ...rest, run: { store: "x.db" } }))
      assert.deepStrictEqual(problems.map((p) => p.split(":")[0]), ["run.store", "output.root"])
      const s = yield* load(write(rest), { outputRoot: "/tmp/elsewhere" })
      assert.strictEqual(s.outputRoot, "/tmp/elsewhere")
    }))
})

describe("StudyConfig.load: the plan", () => {
  it.effect("figures of the small fixture: 24 variants x 2 repeats x 4 cases, 3 attempts of one chat task each", () =>
    Effect.gen(function*() {
      const s = yield* load(path.join(fixtures, "study.yaml"))
      const { costUsd, ...figures } = s.plan
      // prices: small 0.001 / 0.002, large 0.01 / 0.02 per 1k (prompt / completion); per model
      // 96 pipelines, 48 per prompt. min: one attempt's prompt estimate, (48·2 + 48·11) = 624
      // tokens per model; max: 3 attempts × (prompt + 10 completion tokens)
      assert.closeTo(costUsd!.min, (624 * 0.001 + 624 * 0.01) / 1000, 1e-12)
      assert.closeTo(costUsd!.max!, ((1872 * 0.001 + 2880 * 0.002) + (1872 * 0.01 + 2880 * 0.02)) / 1000, 1e-12)
      assert.deepStrictEqual(figures, {
        variants: 24,
        repeats: 2,
        trials: 48,
        casesPerTrial: 4,
        pipelines: 192,
        tasksPerPipeline: 2,
        maxModelCalls: 192 * 3,
        maxJudgeCalls: 0,
        maxTaskAttempts: 192 * 4,
        // prompt estimate: "Spam? " = 2 tokens, "Read the message and answer spam or ham: " = 11; maxTokens 10
        tokens: { min: 96 * 2 + 96 * 11, max: 96 * 3 * (2 + 10) + 96 * 3 * (11 + 10) },
        // pool llm runs min(3, concurrency 4) calls at once; small 100 ms..2 s, large 300 ms..4 s
        timeMs: { min: (96 * 100 + 96 * 300) / 3, max: (96 * 3 * 2000 + 96 * 3 * 4000) / 3 },
        concurrency: { pipelines: 4, trials: 2 },
        caps: [],
        notes: []
      })
      // what a trial's "N of P planned pipeline(s)" counts against
      assert.strictEqual(s.pipelinesPerTrial, 4)
      assert.match(StudyConfig.planText(s.plan), /trials: +48 \(24 variants x 2 repeats\)\n/)
      // in the study views' dollars (3 significant digits, fix16x)
      assert.match(StudyConfig.planText(s.plan), /\ncost: +\$0\.00686 \.\. \$0\.0840\n/)
      // one of a kind is said in the singular (issue 16 leftovers: "1 trials at once")
      assert.match(StudyConfig.planText({ ...s.plan, concurrency: { pipelines: 1, trials: 1 } }), /\nconcurrency: +1 pipeline, 1 trial at once(\n|$)/)
      assert.match(StudyConfig.planText(s.plan), /\nconcurrency: +4 pipelines, 2 trials at once(\n|$)/)
    }))

  it.effect("the plan's text: one column of values, whatever the label (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      const s = yield* load(path.join(fixtures, "study.yaml"))
      const figures = StudyConfig.planText(s.plan).split("\n").filter((l) => !l.startsWith("note: "))
      assert.include(figures, "tasks per pipeline: 2")
      const columns = new Set(figures.map((l) => /^[a-z ]+: +/.exec(l)![0].length))
      assert.deepStrictEqual([...columns], [20], figures.join("\n"))
    }))

  it.effect("over limits.maxTrials by repeats, a few variants are still expanded: the 'not expanded' note only when the cap truncated them (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      // 12 variants x 20 repeats = 240 trials, above the default cap of 200: planned from every variant
      const many = yield* load(write(study({ repeats: 20 })), { allowOverCap: true })
      assert.deepStrictEqual(many.plan.caps.map((c) => c.name), ["maxTrials"])
      assert.strictEqual(many.variants.length, 12)
      assert.isFalse(many.plan.notes.some((n) => n.includes("not expanded")), many.plan.notes.join("\n"))
      assert.strictEqual((many.describe() as { variants: Array<unknown> }).variants.length, 12)
      // more variants than the cap: planned from the baseline alone, and the note says why
      const truncated = yield* load(write(study({ limits: { maxTrials: 10 } })), { allowOverCap: true })
      assert.include(truncated.plan.notes.join("\n"), "figures from the baseline variant times 12 variants: the variants were not expanded, 12 is above limits.maxTrials 10")
      // the same figures either way: the baseline's times the variants when they share a shape
      assert.strictEqual(truncated.plan.maxTaskAttempts, many.plan.maxTaskAttempts! / 20)
    }))

  it.effect("a judge study: the plan counts the judges' calls apart, and the most calls exceed the most attempts by the format repairs (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-study-judge-plan-"))
      const example = path.join(fileURLToPath(new URL("../../examples/judge/", import.meta.url)))
      for (const f of ["experiment.yaml", "emails.jsonl"]) fs.copyFileSync(path.join(example, f), path.join(dir, f))
      const doc = YAML.parse(fs.readFileSync(path.join(example, "study.yaml"), "utf8")) as Record<string, unknown>
      fs.writeFileSync(path.join(dir, "study.json"), JSON.stringify({ ...doc, output: { root: "out" } }))
      const s = yield* load(path.join(dir, "study.json"))
      // 4 variants x 1 repeat x 6 emails = 24 pipelines; chat and judge, 6 attempts each (the
      // chat retry policy): 24 x 2 x 6 = 288 attempts; a chat attempt is 1 call, a judge attempt
      // 2 at most (the first answer, then one format repair): 24 x 6 + 24 x 6 x 2 = 432 calls
      assert.strictEqual(s.plan.pipelines, 24)
      assert.strictEqual(s.plan.maxTaskAttempts, 288)
      assert.strictEqual(s.plan.maxJudgeCalls, 288)
      assert.strictEqual(s.plan.maxModelCalls, 432)
      assert.include(
        StudyConfig.planText(s.plan),
        "max model calls:    432 (288 of them by judges: a judge attempt makes 2 calls when its answer needs a format repair)\nmax task attempts:  288"
      )
    }))

  it.effect("a per-trial time budget bounds the longest time: ceil(trials / trialConcurrency) x the budget", () =>
    Effect.gen(function*() {
      const s = yield* load(write(study({ budget: { perTrial: { time: "1 second" } }, run: { trialConcurrency: 5 } })))
      // 12 trials, 5 at once: 3 waves of at most 1 s; no latency estimate, so the shortest is unknown
      assert.deepStrictEqual(s.plan.timeMs, { min: 0, max: 3000 })
      assert.isTrue(s.plan.notes.some((n) => n.startsWith("no latency estimate or rate limit")))
    }))
})

describe("StudyConfig.load: trials and suiteFor", () => {
  it.effect("members are the trials p<version>-vNN-rK, variant-major; every pool shared under its name; one output root", () =>
    Effect.gen(function*() {
      const s = yield* load(write(study({ repeats: 2 })))
      const suite = s.suiteFor(1)
      assert.strictEqual(suite.id, "t")
      assert.deepStrictEqual(suite.members.slice(0, 3).map((m) => m.id), ["p1-v01-r1", "p1-v01-r2", "p1-v02-r1"])
      assert.strictEqual(suite.members.length, 24)
      assert.deepStrictEqual(suite.pools.map((p) => p.name), ["llm"])
      assert.deepStrictEqual(suite.sharedPools, ["llm"])
      for (const m of suite.members) {
        assert.deepStrictEqual(m.poolAliases, { llm: "llm" })
        assert.strictEqual(m.outputDir, s.outputRoot)
      }
      assert.strictEqual(new Set(suite.members.map((m) => m.memberDigest)).size, 24)
      assert.deepStrictEqual(suite.output, { root: s.outputRoot, layout: "combined" })
      // the two repeats of a variant run the same experiment under different member ids
      assert.strictEqual(suite.members[0]!.experiment, suite.members[1]!.experiment)
      assert.strictEqual(suite.members[0]!.definitionDigest, suite.members[1]!.definitionDigest)
      assert.notStrictEqual(suite.members[0]!.definitionDigest, suite.members[2]!.definitionDigest)
      // bound values follow the odometer: v02 is temperature 0.5
      assert.strictEqual(suite.members[2]!.experiment.template.tasks[0]!.parameters["temperature"], 0.5)
      // each trial carries its variant's values: its tasks read them as ctx.variables
      assert.deepStrictEqual(suite.members[2]!.variables, s.variants[1]!.values)
      assert.strictEqual(suite.members[2]!.variables!["temperature"], 0.5)
      const v2 = s.suiteFor(2)
      assert.deepStrictEqual(v2.members.slice(0, 2).map((m) => m.id), ["p2-v01-r1", "p2-v01-r2"])
      assert.deepStrictEqual(s.trialsFor(2).slice(0, 3).map((t) => [t.trialId, t.variant.id, t.repeat]), [["p2-v01-r1", "v01", 1], ["p2-v01-r2", "v01", 2], ["p2-v02-r1", "v02", 1]])
      assert.strictEqual(s.suiteFor(1), suite)
    }))
})

describe("suiteFor runs as a suite", () => {
  it.effect("Suite.fromLoaded accepts it as it does a suite file; every trial runs its cases under its own pipeline ids", () =>
    Effect.gen(function*() {
      const file = write({
        study: { id: "run-me", question: "Does the level matter?" },
        protocol: { experiment: "experiment.json" },
        output: { root: "out" },
        variables: [{ name: "level", type: "enum", values: [1, 2] }],
        repeats: 2
      }, {
        "experiment.json": {
          pipeline: { name: "levels", tasks: [{ use: "echo", name: "e", config: { level: { $var: "level" } } }] },
          source: { range: { n: 3 } }
        }
      })
      const loaded = yield* load(file)
      const study = loaded.suiteFor(1)
      const suite = yield* Suite.fromLoaded(study)
      const report = yield* Suite.run(suite).pipe(Effect.provide(suiteEnv("run-me", study.pools)))
      assert.strictEqual(report.run.stats.byState.succeeded, 12)
      assert.deepStrictEqual(report.members.map((m) => [m.experimentId, m.admitted]), [["p1-v01-r1", 3], ["p1-v01-r2", 3], ["p1-v02-r1", 3], ["p1-v02-r2", 3]])
      // the two repeats of a variant compute the same thing under different ids (and seeds)
      const [r1, r2] = study.members
      assert.strictEqual(r1!.definitionDigest, r2!.definitionDigest)
      assert.notStrictEqual(r1!.memberDigest, r2!.memberDigest)
      assert.deepStrictEqual(study.members.map((m) => m.experiment.template.tasks[0]!.options.config), [{ level: 1 }, { level: 1 }, { level: 2 }, { level: 2 }])
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("the study file's Schema and the package root", () => {
  it("docs/study.schema.json is exactly what assay schema --study prints (regenerate: assay schema --study > docs/study.schema.json)", () => {
    const file = fileURLToPath(new URL("../../docs/study.schema.json", import.meta.url))
    assert.deepStrictEqual(JSON.parse(fs.readFileSync(file, "utf8")), JSON.parse(JSON.stringify(studyJsonSchema())))
  })

  it("defineStudy and the Study namespace are exported at the package root", () => {
    assert.strictEqual(Root.defineStudy, StudyConfig.defineStudy)
    assert.strictEqual(Root.Study.trialId, Study.trialId)
    const input = { study: { id: "x", question: "?" }, protocol: { experiment: "e.yaml" } }
    assert.strictEqual(Root.defineStudy(input), input)
  })

  it.effect("isStudyFile: a top-level study key; an experiment, a suite or a broken file is not one", () =>
    Effect.gen(function*() {
      const file = write(study())
      const dir = path.dirname(file)
      fs.writeFileSync(path.join(dir, "broken.yaml"), "study: [")
      fs.writeFileSync(path.join(dir, "suite.yaml"), YAML.stringify({ suite: { id: "s" }, experiments: {} }))
      const is = (f: string) => StudyConfig.isStudyFile(path.join(dir, f)).pipe(Effect.provide(NodeContext.layer))
      assert.deepStrictEqual(yield* Effect.all([is("study.json"), is("experiment.json"), is("suite.yaml"), is("broken.yaml")]), [true, false, false, false])
    }))

  it.effect("isStudyFile: a study file refused only for a key written twice (JSON or YAML) is still a study file, so its errors are a study's", () =>
    Effect.gen(function*() {
      const file = write(study())
      const dir = path.dirname(file)
      fs.writeFileSync(path.join(dir, "dup.json"), `{"study":{"id":"x","question":"?"},"repeats":2,"repeats":3}`)
      fs.writeFileSync(path.join(dir, "dup.yaml"), "study: { id: x, question: '?' }\nrepeats: 2\nrepeats: 3\n")
      fs.writeFileSync(path.join(dir, "dup-experiment.yaml"), "source: { range: { n: 1 } }\nsource: { range: { n: 2 } }\n")
      const is = (f: string) => StudyConfig.isStudyFile(path.join(dir, f)).pipe(Effect.provide(NodeContext.layer))
      assert.deepStrictEqual(yield* Effect.all([is("dup.json"), is("dup.yaml"), is("dup-experiment.yaml")]), [true, true, false])
      // and the loader reports the repeated key, at its path, as a study's problem
      const e = yield* Effect.flip(StudyConfig.load(path.join(dir, "dup.json")).pipe(Effect.provide(NodeContext.layer)))
      assert.include(e.message, "repeats")
      assert.include(e.message, "written twice")
    }))
})

describe("StudyConfig.load: the code files are part of the protocol (issue 16)", () => {
  it.effect("editing a constant a task uses (not its function) is a protocol change naming the file; the unchanged file is the same protocol", () =>
    Effect.gen(function*() {
      // under test/ so the task file's import of the sources resolves as the fixtures' does
      const dir = fs.mkdtempSync(path.join(path.dirname(fixtures.replace(/\/$/, "")), "..", ".tmp-modules-"))
      try {
        fs.copyFileSync(path.join(fixtures, "study-code.yaml"), path.join(dir, "study.yaml"))
        fs.copyFileSync(path.join(fixtures, "experiment-code.yaml"), path.join(dir, "experiment-code.yaml"))
        const source = (factor: number) =>
          `import * as Task from "../../src/domain/Task.js"\nconst FACTOR = ${factor}\n` +
          `export const shout = Task.sync("shout", (input: unknown) => String(input).repeat(FACTOR).toUpperCase())\n`
        fs.writeFileSync(path.join(dir, "tasks.ts"), source(1))
        const before = yield* load(path.join(dir, "study.yaml"))
        assert.deepStrictEqual(Object.keys(before.describe() as Record<string, unknown>).includes("modules"), true)
        const frozen: StudyCatalog.ProtocolVersionRecord = {
          studyId: before.id,
          version: 1,
          protocolDigest: before.protocolDigest,
          protocolParts: before.protocolParts,
          protocol: before.describe(),
          createdAt: 0
        }
        const input = (s: typeof before) => ({
          studyId: s.id,
          question: s.question,
          type: s.type,
          protocolDigest: s.protocolDigest,
          protocolParts: s.protocolParts,
          previousProtocols: s.previousProtocols,
          protocol: s.describe(),
          newVersion: false
        })
        // unchanged: the same version
        const again = yield* load(path.join(dir, "study.yaml"))
        assert.strictEqual(StudyCatalog.decideFreeze(frozen, input(again))._tag, "Run")
        // FACTOR is outside the task's function: its own source digest does not see it
        fs.writeFileSync(path.join(dir, "tasks.ts"), source(2))
        const after = yield* load(path.join(dir, "study.yaml"))
        assert.strictEqual(JSON.stringify(after.protocolParts["experiment"]), JSON.stringify(before.protocolParts["experiment"]))
        const decided = StudyCatalog.decideFreeze(frozen, input(after))
        assert.strictEqual(decided._tag, "Refused")
        if (decided._tag === "Refused") {
          assert.include(decided.error.message, "code files: tasks.ts edited")
          assert.include(decided.error.message, "--new-version")
        }
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }))
})

describe("StudyConfig.load: endpoints the study cannot call (tester16 F7)", () => {
  const unset = () =>
    write(study(), {
      "experiment.json": experiment({
        pools: { llm: { resources: [{ id: "a", capacity: 2, options: { baseUrl: "${T16Q_URL}", apiKeyEnv: "T16Q_KEY", model: "base" } }] } }
      })
    })

  it.effect("a key variable unset and a URL emptied by an unset ${VAR}: plan warns about both, at their paths, naming the variables", () =>
    Effect.gen(function*() {
      const s = yield* load(unset())
      assert.deepStrictEqual(s.endpointProblems.map((i) => i.message), [
        "experiment.json: pools.llm.resources[0].options.apiKeyEnv: environment variable T16Q_KEY (the key) is not set: every call to this endpoint would fail",
        "experiment.json: pools.llm.resources[0].options.baseUrl: is empty (environment variable T16Q_URL is not set): every call to this endpoint would fail"
      ])
      assert.isTrue(s.warnings.some((w) => w.includes("T16Q_KEY (the key) is not set") && w.endsWith("study run refuses to start")), s.warnings.join("\n"))
      // both set: nothing to say
      const ok = yield* load(unset(), { env: { T16Q_URL: "http://127.0.0.1:9/v1", T16Q_KEY: "k" } })
      assert.deepStrictEqual(ok.endpointProblems, [])
    }))

  it.effect("a key variable two resources share is warned about once, naming both places (tester16b N9)", () =>
    Effect.gen(function*() {
      const file = write(study(), {
        "experiment.json": experiment({
          pools: {
            llm: {
              resources: [
                { id: "a", capacity: 2, options: { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "T16T_KEY", model: "base" } },
                { id: "b", capacity: 1, options: { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "T16T_KEY", model: "base" } }
              ]
            }
          }
        })
      })
      const s = yield* load(file)
      const about = s.warnings.filter((w) => w.includes("T16T_KEY"))
      assert.strictEqual(about.length, 1, about.join("\n"))
      assert.include(about[0]!, "pools.llm.resources[0].options.apiKeyEnv, pools.llm.resources[1].options.apiKeyEnv: environment variable T16T_KEY (the key) is not set: every call to these 2 endpoints would fail")
      assert.strictEqual(s.endpointProblems.length, 1)
      // the experiment alone (validate, run) says it once too
      const plain = path.join(path.dirname(file), "plain.json")
      const pools = (JSON.parse(fs.readFileSync(path.join(path.dirname(file), "experiment.json"), "utf8")) as { pools: unknown }).pools
      fs.writeFileSync(plain, JSON.stringify({ pools, pipeline: { name: "p", tasks: [{ use: "chat", name: "c", options: { resource: "llm", template: "x {{text}}", maxTokens: 5 } }] }, source: { range: { n: 1 } } }))
      const e = yield* Experiment.load(plain, { env: {} }).pipe(Effect.provide(NodeContext.layer), Effect.either)
      const ws = Either.isRight(e) ? e.right.warnings.filter((w) => w.includes("T16T_KEY")) : ["refused"]
      assert.strictEqual(ws.length, 1, ws.join("\n"))
      assert.include(ws[0]!, "every call to these 2 resources will fail")
    }))

  it.effect("only resources a task can lease are looked at: a pool no task uses, a resource the chat task's selector leaves out (issue 16 item 4)", () =>
    Effect.gen(function*() {
      const base = experiment() as { pipeline: { tasks: Array<Record<string, any>> } }
      const chat = base.pipeline.tasks[0]!
      const file = write(study(), {
        "experiment.json": {
          ...base,
          pools: {
            llm: {
              resources: [
                { id: "a", capacity: 2, options: { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "T16R_KEY_A", model: "base" } },
                { id: "b", capacity: 2, options: { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "T16R_KEY_B", model: "base" } }
              ]
            },
            spare: { resources: [{ id: "s", capacity: 1, options: { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "T16R_KEY_S" } }] }
          },
          pipeline: { ...base.pipeline, tasks: [{ ...chat, options: { ...chat.options, selector: { id: "a" } } }, ...base.pipeline.tasks.slice(1)] }
        }
      })
      const s = yield* load(file, { env: {} })
      assert.deepStrictEqual(s.endpointProblems.map((i) => i.message), [
        "experiment.json: pools.llm.resources[0].options.apiKeyEnv: environment variable T16R_KEY_A (the key) is not set: every call to this endpoint would fail"
      ])
    }))

  it.effect("study run refuses to start (a ConfigError, exit 2) before anything is frozen: no output root is created", () =>
    Effect.gen(function*() {
      const file = unset()
      const e = yield* Effect.flip(runStudy(
        { load: (f, o) => StudyConfig.load(f, { ...o, env: {} }) },
        { file, resume: false, newVersion: false, outputRoot: Option.none(), trials: [], strictEnv: false, json: false, quiet: true }
      ))
      assert.strictEqual((e as ConfigError)._tag, "ConfigError")
      assert.include((e as ConfigError).message, "cannot call its model endpoints as configured: 2 problems (nothing was run)")
      assert.include((e as ConfigError).message, "(export T16Q_KEY=...)")
      assert.isFalse(fs.existsSync(path.join(path.dirname(file), "out")))
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("StudyConfig.load: the plan of a study without model calls (tester16 F10.7)", () => {
  it.effect("no model-calling task: the cost is $0, not unknown", () =>
    Effect.gen(function*() {
      const s = yield* load(path.join(fixtures, "study-code.yaml"))
      assert.strictEqual(s.plan.maxModelCalls, 0)
      assert.deepStrictEqual(s.plan.costUsd, { min: 0, max: 0 })
      const cost = StudyConfig.planText(s.plan).split("\n").find((l) => l.startsWith("cost:"))!
      assert.notInclude(cost, "unknown")
      assert.match(cost, /^cost: +\$0/)
    }))
})

describe("StudyConfig.load: tester16e's study files (F2, F5): one pass, a user's wording", () => {
  const t16e = (f: string) => failure(path.join(fixtures, "tester16e", f), { env: { T16E_KEY: "x" } })
  const paths = (problems: ReadonlyArray<string>) => problems.map((p) => p.split(":")[0])

  it.effect("a refused study.type without did-you-mean (5) is reported and the rest checked in the same pass, as with a misspelt one (F2)", () =>
    Effect.gen(function*() {
      const rest = ["baseline.temperature", "objectives[3].metric", "metrics[0].from.output"]
      for (const f of ["bad7.yaml", "bad7c.yaml", "bad7d.yaml"]) {
        const problems = yield* t16e(f)
        assert.deepStrictEqual([...paths(problems)].sort(), ["study.type", ...rest].sort(), `${f}\n${problems.join("\n")}`)
      }
      // `comparison` is read as the `compare` it extends; bad6a's only other mistake is the baseline
      assert.include(yield* t16e("bad7.yaml"), "study.type: expected \"explore\", \"compare\", \"optimize\" or \"replay\", got \"comparison\" | did you mean \"compare\"?")
      assert.deepStrictEqual(paths(yield* t16e("bad6a.yaml")), ["study.type", "baseline.temperature"])
    }))

  it.effect("every enum-valued field refused without did-you-mean leaves the other checks running: direction, reducer, op, when, running, a variable's type", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        metrics: [{ name: "accuracy", reducer: "average?", from: { output: "correct" } }],
        objectives: [{ metric: "acuracy", direction: "upward" }, { metric: "calls", direction: "minimize", hardConstraint: { op: "~", value: 1 } }],
        stop: [{ when: "whenever", count: 1 }, { when: "successfulTrials", count: 2, running: "stroll" }],
        baseline: { prompt: "terce", model: "small", temperature: 0, pause: "1 millis" }
      })))
      assert.includeMembers(paths(problems), [
        "metrics[0].reducer",
        "objectives[0].direction",
        "objectives[1].hardConstraint.op",
        "stop[0].when",
        "stop[1].running",
        "objectives[0].metric",
        "baseline.prompt"
      ], problems.join("\n"))
      const kind = yield* failure(write(study({
        variables: [...study()["variables"] as Array<Record<string, unknown>>, { name: "extra", type: "colour", values: [1] }],
        objectives: [{ metric: "cals", direction: "minimize" }],
        metrics: []
      })))
      assert.includeMembers(paths(kind), ["variables[4].type", "objectives[0].metric"], kind.join("\n"))
    }))

  it.effect("a boolean variable with values: said so, never \"did you mean values?\" (F5a)", () =>
    Effect.gen(function*() {
      const problems = yield* t16e("bad3.yaml")
      assert.include(problems, "variables[0].values: a boolean variable takes no values | its values are always false and true: remove values")
      assert.notMatch(problems.join("\n"), /did you mean values\?/)
      // the variable itself stays: the baseline is still asked for its value
      assert.include(paths(problems), "baseline.flag")
    }))

  it.effect("an objective written as a bare name is read in its metric's direction (F5b, since tester16f F3: `costUsd` minimizes); a value of the wrong type in words", () =>
    Effect.gen(function*() {
      const problems = yield* t16e("bad5.yaml")
      assert.notInclude(paths(problems), "objectives[2]", problems.join("\n"))
      assert.include(problems, "repeats: expected an integer, got 2.5")
      assert.include(problems, "objectives[3].hardConstraint.value: expected a number, got \"half\"")
      assert.notMatch(problems.join("\n"), /Expected |Encoded side|Struct|actual /)
      const bad1 = yield* t16e("bad1.yaml")
      assert.notMatch(bad1.join("\n"), /Expected |actual /)
      assert.include(bad1, "objectives[2].weight: expected a positive number, got -1")
    }))

  it.effect("a misspelt required key is read as the key it misspells: no \"is missing\" beside its did-you-mean, and its value is checked as that key (F5c)", () =>
    Effect.gen(function*() {
      const problems = yield* t16e("bad9.yaml")
      assert.deepStrictEqual(paths(problems), ["variables[0].valuse", "variables[1].nmae", "stop[0].when", "stop[0].metric"], problems.join("\n"))
      const checked = yield* failure(write(study({
        variables: [
          { name: "prompt", type: "prompt", valuse: { terse: "Spam? {{text}}", long: 5 } },
          ...(study()["variables"] as Array<Record<string, unknown>>).slice(1)
        ]
      })))
      assert.include(paths(checked), "variables[0].values.long", checked.join("\n"))
      assert.notInclude(checked.join("\n"), "is missing")
    }))

  it.effect("the suggested baseline takes no value from a variable the same pass reports invalid (F5d); an id names every character not allowed (F5e)", () =>
    Effect.gen(function*() {
      const problems = yield* t16e("bad1.yaml")
      assert.include(problems, "baseline: is missing: a compare study names its baseline (variable name -> value) | baseline: { prompt: \"terse\", model: \"small\" }, and a value of temperature once its values are fixed")
      assert.include(problems, "study.id: \"bad study!\" contains \" \" and \"!\": only ASCII letters, digits, \"-\" and \"_\" are allowed")
    }))
})

describe("StudyConfig.load: an objective written as its metric's name alone (tester16f F3)", () => {
  const paths = (problems: ReadonlyArray<string>) => problems.map((p) => p.split(":")[0])
  const declared = [
    { name: "accuracy", reducer: "mean", from: { metric: "correct" }, direction: "maximize" },
    { name: "errors", reducer: "sum", from: { metric: "wrong" }, direction: "minimize" }
  ]
  it.effect("is that metric's objective in its own direction: a declared metric's, a built-in's; the protocol is the explicit form's", () =>
    Effect.gen(function*() {
      const bare = yield* load(write(study({ metrics: declared, objectives: ["accuracy", "errors", "latencyP95Ms", { metric: "calls", direction: "minimize", weight: 2 }] })))
      assert.deepStrictEqual(bare.objectives, [
        { metric: "accuracy", direction: "maximize", weight: 1 },
        { metric: "errors", direction: "minimize", weight: 1 },
        { metric: "latencyP95Ms", direction: "minimize", weight: 1 },
        { metric: "calls", direction: "minimize", weight: 2 }
      ])
      const explicit = yield* load(write(study({
        metrics: declared,
        objectives: [
          { metric: "accuracy", direction: "maximize" },
          { metric: "errors", direction: "minimize" },
          { metric: "latencyP95Ms", direction: "minimize" },
          { metric: "calls", direction: "minimize", weight: 2 }
        ]
      })))
      assert.strictEqual(bare.protocolDigest, explicit.protocolDigest)
      // in YAML too, without a metrics section for a built-in metric
      const yaml = yield* load(write(YAML.stringify(study({ objectives: ["tokens"] })), {}, "study.yaml"))
      assert.deepStrictEqual(yaml.objectives, [{ metric: "tokens", direction: "minimize", weight: 1 }])
    }))

  it.effect("a metric that declares no direction is refused at objectives[i], saying to write { metric, direction }", () =>
    Effect.gen(function*() {
      // reported by a task, no metrics section (JSON)
      const reported = yield* failure(write(study({ objectives: ["accuracy"] })))
      assert.deepStrictEqual(reported, [
        "objectives[0]: \"accuracy\" alone: metric \"accuracy\" declares no direction (it is not a built-in metric nor declared with a direction under metrics), so which way is better is not known" +
        " | write { metric: accuracy, direction: maximize } or { metric: accuracy, direction: minimize }, or declare it under metrics with a direction"
      ])
      // declared without a direction, or with direction target (a name gives no target value); with another problem of the file
      const undirected = yield* failure(write(study({
        metrics: [{ name: "accuracy", reducer: "mean", from: { metric: "correct" } }, { name: "share", reducer: "mean", from: { metric: "spam" }, direction: "target" }],
        objectives: ["calls", "accuracy", "share"],
        repeats: 0
      })))
      assert.includeMembers(paths(undirected), ["objectives[1]", "objectives[2]", "repeats"], undirected.join("\n"))
      assert.notInclude(paths(undirected), "objectives[0]")
      assert.include(undirected.join("\n"), "objectives[1]: \"accuracy\" alone: metric \"accuracy\" declares no direction (its metrics entry has none)")
      assert.include(undirected.join("\n"), "write { metric: share, direction: target, target: VALUE }")
      assert.notMatch(undirected.join("\n"), /expected an object/)
    }))

  it.effect("a mistyped metric's name alone gets a did-you-mean at objectives[i], not advice to give it a direction (tester16g F3)", () =>
    Effect.gen(function*() {
      // no metrics section: the built-in it misspells
      const typo = yield* failure(write(study({ objectives: ["accuracy", "costusd"] })))
      const at1 = typo.filter((l) => l.startsWith("objectives[1]"))
      assert.deepStrictEqual(at1, [
        "objectives[1]: \"costusd\" alone: no built-in or declared metric is named \"costusd\" | did you mean costUsd? (if a task or judge reports \"costusd\", write { metric: costusd, direction: maximize } or { metric: costusd, direction: minimize })"
      ])
      // with a metrics section: the declared metric it misspells, said once, with no advice to give it a direction
      const declared = yield* failure(write(study({
        metrics: [{ name: "quality", reducer: "mean", from: { metric: "q" }, direction: "maximize" }],
        objectives: ["qualty"]
      })))
      assert.deepStrictEqual(declared, [
        "objectives[0].metric: unknown metric \"qualty\": not declared under metrics, not built in and not reported by a judge task | did you mean \"quality\"?"
      ])
    }))

  it.effect("an objective of the wrong type says a name is allowed; one without a direction says what to write (tester16g F9)", () =>
    Effect.gen(function*() {
      const problems = yield* failure(write(study({
        metrics: declared,
        objectives: ["accuracy", 42, { metric: "errors" }, { metric: "costUsd" }, { metric: "fromTask" }]
      })))
      const at = (p: string) => problems.filter((l) => l.startsWith(`${p}:`))
      assert.deepStrictEqual(at("objectives[1]"), [
        "objectives[1]: expected an object { metric, direction, target, weight, hardConstraint } or a metric's name alone (its own direction), got 42"
      ], problems.join("\n"))
      assert.deepStrictEqual(at("objectives[2].direction"), [
        "objectives[2].direction: is missing: which way \"errors\" is better is not given | write direction: maximize, minimize, or target with target: VALUE (or the objective as \"errors\" alone: its metric's own direction, minimize)"
      ])
      assert.deepStrictEqual(at("objectives[3].direction"), [
        "objectives[3].direction: is missing: which way \"costUsd\" is better is not given | write direction: maximize, minimize, or target with target: VALUE (or the objective as \"costUsd\" alone: its metric's own direction, minimize)"
      ])
      // a metric with no direction of its own: the three directions only
      assert.deepStrictEqual(at("objectives[4].direction"), [
        "objectives[4].direction: is missing: which way \"fromTask\" is better is not given | write direction: maximize, minimize, or target with target: VALUE"
      ])
    }))

  it("the JSON Schema takes a metric's name where an objective belongs", () => {
    const items = (studyJsonSchema() as any).properties.objectives.items
    assert.deepStrictEqual(items.anyOf.map((x: any) => x.type), ["object", "string"])
  })
})
