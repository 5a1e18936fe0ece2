/**
 * The built-in `judge` task against the mock server through the runner: what a verdict
 * records, the candidates' order (stored, reproducible for a pipeline, different across
 * pipelines), the one format repair and the typed failure after it, a deterministic failure
 * that the judge never overrides, and the definition errors with their field paths (in code and
 * in a config file's `use: judge` entry).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Schema, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Experiment from "../../src/config/internal/experiment.js"
import { ConfigError, FatalError } from "../../src/domain/Errors.js"
import { PipelineId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { builtins } from "../../src/tasks/Builtins.js"
import { chatClientFactory } from "../../src/tasks/Chat.js"
import { judge, JudgeOutput, type JudgeOptions, type RubricInput } from "../../src/tasks/Judge.js"

const KEY = "sk-judge-test-0000"

const rubric: RubricInput = {
  id: "answer-quality",
  version: 3,
  criteria: [
    { name: "correct", description: "states the right label", scale: { min: 1, max: 5 } },
    { name: "clear", scale: { min: 0, max: 1 }, weight: 2 }
  ],
  instructions: "Be strict."
}

/** The mock with one endpoint (`judge` answers as configured) and the built-in model profiles, for the scope. */
const mock = (judgeAnswers: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const profile = yield* MockLlm.decodeProfile({ seed: 3, endpoints: [{ name: "j", latency: { medianMs: 0 }, judge: judgeAnswers }] })
    return yield* MockLlm.serve({ profile, models: MockLlm.builtinModels })
  }).pipe(Effect.provide(NodeContext.layer))

const envFor = (server: MockLlm.MockLlmServer) =>
  Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4 }),
    Layer.mergeAll(
      MemoryStore.layer(),
      Pool.layer([Pool.make("llm", [Resource.make("llm", {
        id: "j",
        capacity: 4,
        options: { baseUrl: server.endpoints[0]!.baseUrl, apiKey: KEY, model: "mock-judge" },
        factory: chatClientFactory()
      })])])
    )
  )

interface Row {
  readonly id: string
  readonly a: string
  readonly b: string
  readonly c?: string
  readonly gold: string
}

/** Runs `[judge, collect]` over `rows` keyed by id; the verdicts by key, and the run's errors. */
const runJudge = (server: MockLlm.MockLlmServer, rows: ReadonlyArray<Row>, options: Partial<JudgeOptions> = {}) =>
  Effect.gen(function*() {
    const verdicts = new Map<string, JudgeOutput>()
    const j = judge<Row>({ rubric, candidates: { first: "a", second: "b" }, context: { reference: "gold" }, ...options })
    const collect = Task.sync("collect", (v: JudgeOutput, ctx) => {
      verdicts.set(ctx.pipelineId, v)
      return v
    })
    const template = Pipeline.make("judged", j, collect)
    const report = yield* Runner.run(template.map(rows, { keyOf: (r) => r.id }))
    const store = yield* Store
    const errors = yield* store.errors({ runId: report.runId })
    const metrics = new Map<string, unknown>()
    for (const r of rows) {
      for (const m of yield* store.metrics({ runId: report.runId, pipelineId: PipelineId.make(r.id) })) metrics.set(`${r.id}/${m.name}`, m.value)
    }
    // the pipelines whose judge (seq 0) succeeded on a retried attempt
    const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts({ runId: report.runId })))
    const retried = new Set(attempts.filter((a) => a.seq === 0 && a.attemptNo > 1 && a.outcome === "succeeded").map((a) => String(a.pipelineId)))
    return { report, verdicts, errors, metrics, retried }
  }).pipe(Effect.provide(envFor(server)))

describe("judge through the runner", () => {
  it.scopedLive("a verdict records the rubric version, the model, the order, sub-scores, overall, reasons and the evidence shown", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const rows: Array<Row> = [
        { id: "r1", a: "This message is spam.", b: "I think it is ham.", gold: "spam" },
        { id: "r2", a: "ham, clearly", b: "SPAM", gold: "spam" }
      ]
      const { metrics, report, verdicts } = yield* runJudge(server, rows, { metric: "quality" })
      assert.strictEqual(report.stats.byState.succeeded, 2)
      // with a metric name, each candidate's overall score is a pipeline metric
      assert.deepStrictEqual(Object.fromEntries(metrics), {
        "r1/quality.first": 1,
        "r1/quality.second": 0,
        "r2/quality.first": 0,
        "r2/quality.second": 1
      })
      const v1 = verdicts.get("r1")!
      // the output is what its Schema says
      assert.isTrue(Either.isRight(Schema.decodeUnknownEither(JudgeOutput)(v1)))
      assert.strictEqual(v1.rubricId, "answer-quality")
      assert.strictEqual(v1.rubricVersion, "3")
      assert.strictEqual(v1.judgeModel, "mock-judge")
      assert.sameMembers([...v1.order], ["first", "second"])
      // the mock scores a response containing the reference at the top of each scale: the scores
      // are mapped back from labels to names whatever the order shown
      assert.deepStrictEqual(v1.scores, { first: { correct: 5, clear: 1 }, second: { correct: 1, clear: 0 } })
      assert.deepStrictEqual(v1.overall, { first: 1, second: 0 })
      assert.deepStrictEqual(verdicts.get("r2")!.scores, { first: { correct: 1, clear: 0 }, second: { correct: 5, clear: 1 } })
      // (the mapping is exercised: at least one of them was shown in the other order)
      assert.isTrue([v1, verdicts.get("r2")!].some((v) => v.order[0] === "second"))
      assert.strictEqual(v1.reasons["first"]!["correct"], "The response states the reference answer.")
      assert.strictEqual(v1.formatRepair, null)
      // the evidence summary: labels in presentation order, lengths and digests, no text
      assert.deepStrictEqual(v1.evidenceSummary.candidates.map((c) => [c.name, c.label]), v1.order.map((n, i) => [n, "AB"[i]]))
      const first = v1.evidenceSummary.candidates.find((c) => c.name === "first")!
      assert.strictEqual(first.chars, rows[0]!.a.length)
      assert.match(first.digest, /^[0-9a-f]{32}$/)
      assert.deepStrictEqual(v1.evidenceSummary.context.map((c) => [c.name, c.chars]), [["reference", 4]])
      assert.strictEqual(v1.evidenceSummary.withheld, 0)
      assert.notInclude(JSON.stringify(v1.evidenceSummary), "spam")
      // one model call per verdict, answered by the judge rule
      const log = yield* server.log
      assert.deepStrictEqual(log.map((e) => e.reason), ["judge", "judge"])
    }))

  it.scopedLive("the order is drawn per pipeline, stored, the same on a fresh run of the same pipelines, and not the same for all", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const rows = Array.from({ length: 16 }, (_, i): Row => ({ id: `case-${i}`, a: `a${i}`, b: `b${i}`, c: `c${i}`, gold: "x" }))
      const options = { candidates: { first: "a", second: "b", third: "c" } }
      const one = yield* runJudge(server, rows, options)
      const two = yield* runJudge(server, rows, options)
      assert.strictEqual(one.report.stats.byState.succeeded, 16)
      const orders = rows.map((r) => one.verdicts.get(r.id)!.order.join(","))
      // reproducible: a fresh store, the same pipelines, the same orders
      assert.deepStrictEqual(rows.map((r) => two.verdicts.get(r.id)!.order.join(",")), orders)
      // each is a permutation of the candidates, and they differ across pipelines
      for (const o of orders) assert.sameMembers(o.split(","), ["first", "second", "third"])
      assert.isAtLeast(new Set(orders).size, 3)
      // what the judge was shown follows the stored order
      for (const r of rows) {
        const v = one.verdicts.get(r.id)!
        assert.deepStrictEqual(v.evidenceSummary.candidates.map((c) => c.name), [...v.order])
      }
    }))

  it.scopedLive("a retried judge attempt shows the same order as the first (the order derives from the pipeline, not the attempt; tester16c F6)", () =>
    Effect.gen(function*() {
      const rows = Array.from({ length: 16 }, (_, i): Row => ({ id: `case-${i}`, a: `a${i}`, b: `b${i}`, c: `c${i}`, gold: "x" }))
      const options = { candidates: { first: "a", second: "b", third: "c" }, retry: { maxAttempts: 30, base: "1 millis", cap: "20 millis", jitter: "none" } } as const
      // 30 attempts: at 50 % errors, 10 failed in a row happened in about one run of four (the
      // mock's seeded stream, the last pipeline retrying alone), and the pipeline failed
      const clean = yield* runJudge(yield* mock(), rows, options)
      // an endpoint that fails half of its requests with a 5xx: some judges are retried
      const profile = yield* MockLlm.decodeProfile({ seed: 5, endpoints: [{ name: "j", latency: { medianMs: 0 }, errorRate: 0.5, judge: {} }] })
      const flaky = yield* MockLlm.serve({ profile, models: MockLlm.builtinModels }).pipe(Effect.provide(NodeContext.layer))
      const retried = yield* runJudge(flaky, rows, options)
      assert.strictEqual(retried.report.stats.byState.succeeded, 16, JSON.stringify(retried.errors.map((e) => [e.errorClass, e.errorMessage])))
      assert.strictEqual(clean.retried.size, 0)
      assert.isAtLeast(retried.retried.size, 3, "some verdicts came from a retried attempt")
      for (const r of rows) assert.deepStrictEqual(retried.verdicts.get(r.id)!.order, clean.verdicts.get(r.id)!.order, r.id)
    }))

  it.scopedLive("a malformed first answer gets one repair request, recorded in formatRepair; the verdict comes from the second", () =>
    Effect.gen(function*() {
      const server = yield* mock({ invalidFirst: 1 })
      const { report, verdicts } = yield* runJudge(server, [{ id: "r1", a: "spam!", b: "ham", gold: "spam" }])
      assert.strictEqual(report.stats.byState.succeeded, 1)
      const v = verdicts.get("r1")!
      assert.isNotNull(v.formatRepair)
      assert.include(v.formatRepair!, "is not valid JSON")
      assert.include(v.formatRepair!, "first answer: \"Response A reads well overall")
      assert.deepStrictEqual(v.scores["first"], { correct: 5, clear: 1 })
      const log = yield* server.log
      assert.deepStrictEqual(log.map((e) => e.reason), ["judge_malformed", "judge"])
    }))

  it.scopedLive("a second malformed answer is a JudgeError of class invalid: the pipeline fails, not retried, no verdict", () =>
    Effect.gen(function*() {
      const server = yield* mock({ invalidFirst: 2 })
      const { errors, report, verdicts } = yield* runJudge(server, [{ id: "r1", a: "spam!", b: "ham", gold: "spam" }])
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.strictEqual(verdicts.size, 0)
      assert.strictEqual(errors.length, 1)
      assert.strictEqual(errors[0]!.errorType, "JudgeError")
      assert.strictEqual(errors[0]!.errorClass, "invalid")
      assert.include(errors[0]!.errorMessage!, "malformed again after one repair request")
      const log = yield* server.log
      assert.deepStrictEqual(log.map((e) => e.reason), ["judge_malformed", "judge_malformed"])
    }))

  it.scopedLive("a judge never overrides a deterministic failure: after a failed check the pipeline is failed and the judge never runs", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const verdicts = new Map<string, JudgeOutput>()
      // the deterministic check fails its task when the answer names no label
      const check = Task.make("check", (r: Row) =>
        /spam|ham/i.test(r.a) ? Effect.succeed(r) : Effect.fail(new FatalError({ message: "no label in the answer" })))
      const collect = Task.sync("collect", (v: JudgeOutput, ctx) => {
        verdicts.set(ctx.pipelineId, v)
        return v
      })
      const template = Pipeline.make("checked", check, judge<Row>({ rubric, candidates: { first: "a", second: "b" } }), collect)
      const rows: Array<Row> = [
        { id: "ok", a: "spam", b: "ham", gold: "spam" },
        { id: "bad", a: "I cannot tell.", b: "ham", gold: "spam" }
      ]
      const { errors, report } = yield* Effect.gen(function*() {
        const report = yield* Runner.run(template.map(rows, { keyOf: (r) => r.id }))
        return { report, errors: yield* (yield* Store).errors({ runId: report.runId }) }
      }).pipe(Effect.provide(envFor(server)))
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.deepStrictEqual(errors.map((e) => [e.pipelineId, e.failedTask]), [["bad", "check"]])
      assert.deepStrictEqual([...verdicts.keys()], ["ok"])
      // one judge call: the failed pipeline's judge never ran
      assert.strictEqual((yield* server.log).length, 1)
    }))

  it.scopedLive("a judge run without blindness (evaluator overridden to false) refuses to judge (class fatal)", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const seeing = Task.withOverrides(judge<Row>({ rubric, candidates: "a" }), { evaluator: false })
      const { errors, report } = yield* Effect.gen(function*() {
        const report = yield* Runner.run(Pipeline.make("seeing", seeing).map([{ id: "r", a: "x", b: "y", gold: "z" }]))
        return { report, errors: yield* (yield* Store).errors({ runId: report.runId }) }
      }).pipe(Effect.provide(envFor(server)))
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.strictEqual(errors[0]!.errorClass, "fatal")
      assert.include(errors[0]!.errorMessage!, "runs only as an evaluator")
      assert.strictEqual((yield* server.log).length, 0)
    }))

  it.scopedLive("a candidate missing from the input is a JudgeError of class invalid naming the path", () =>
    Effect.gen(function*() {
      const server = yield* mock()
      const { errors } = yield* runJudge(server, [{ id: "r", a: "x", b: "y", gold: "z" }], { candidates: { first: "a", other: "answer.text" } })
      assert.strictEqual(errors[0]!.errorClass, "invalid")
      assert.include(errors[0]!.errorMessage!, "candidate \"other\": no value at the input's path \"answer.text\"")
    }))
})

// ---------------------------------------------------------------------------------------------
// Definition errors
// ---------------------------------------------------------------------------------------------

const refused = (f: () => unknown): ConfigError => {
  try {
    f()
  } catch (e) {
    if (e instanceof ConfigError) return e
    throw e
  }
  throw new Error("expected a ConfigError")
}

describe("judge definition", () => {
  it("is always an evaluator, and its identity records the rubric (a new version is a new pipeline)", () => {
    const j = judge({ rubric, candidates: { answer: "content" } })
    assert.isTrue(j.options.evaluator)
    assert.strictEqual(j.name, "judge")
    assert.strictEqual(j.options.resource, "llm")
    assert.deepStrictEqual((j.parameters["rubric"] as { version: unknown }).version, 3)
    const next = judge({ rubric: { ...rubric, version: 4 }, candidates: { answer: "content" } })
    assert.notStrictEqual(Pipeline.make("p", j).specDigest, Pipeline.make("p", next).specDigest)
  })

  it("refuses a missing or malformed rubric and candidates, each with its path", () => {
    const none = refused(() => judge({} as unknown as JudgeOptions))
    assert.sameMembers(none.issues.map((i) => i.path), ["rubric", "candidates"])
    const bad = refused(() =>
      judge({
        rubric: {
          id: "",
          version: 1,
          criteria: [{ name: "ok", scale: { min: 5, max: 1 } }, { name: "ok", scale: { min: 0, max: 1 } }, { name: "2bad", scale: { min: 0, max: 1 } }]
        },
        candidates: { answer: "", "x.y": "a" },
        colour: "red"
      } as unknown as JudgeOptions)
    )
    const lines = bad.issues.map((i) => `${i.path}: ${i.message}`)
    assert.sameMembers(bad.issues.map((i) => i.path), [
      "colour",
      "rubric.id",
      "rubric.criteria[0].scale.max",
      "rubric.criteria[2].name",
      "candidates.answer",
      "candidates.x.y"
    ])
    assert.isTrue(lines.some((l) => l.startsWith("rubric.criteria[0].scale.max: max (1) must be greater than min (5)")))
    const dup = refused(() =>
      judge({ rubric: { ...rubric, criteria: [rubric.criteria[0]!, rubric.criteria[0]!] }, candidates: "content" })
    )
    assert.deepStrictEqual(dup.issues.map((i) => `${i.path}: ${i.message}`), ["rubric.criteria[1].name: duplicate criterion name \"correct\""])
    const extra = refused(() => judge({ rubric: { ...rubric, scale: 5 } as never, candidates: "content" }))
    assert.deepStrictEqual(extra.issues.map((i) => i.path), ["rubric.scale"])
  })

  it("the config built-in: registered, its problems at paths inside the task section", () => {
    const b = builtins.get("judge")!
    const t = b.make([], { rubric, candidates: { answer: "content" }, name: "grade" }, { baseDir: "/tmp" })
    assert.strictEqual(t.name, "grade")
    assert.isTrue(t.options.evaluator)
    const e = refused(() => b.make([], { rubric: { ...rubric, criteria: [{ name: "c", scale: { min: 2, max: 2 } }] }, candidates: "content", requestTimeout: 30 }, { baseDir: "/tmp" }))
    assert.sameMembers(e.issues.map((i) => i.path), ["options.requestTimeout"])
    const e2 = refused(() => b.make([], { rubric: { ...rubric, criteria: [{ name: "c", scale: { min: 2, max: 2 } }] }, candidates: "content" }, { baseDir: "/tmp" }))
    assert.deepStrictEqual(e2.issues.map((i) => i.path), ["options.rubric.criteria[0].scale.max"])
  })
})

describe("use: judge in an experiment file", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-judge-config-"))
  const write = (name: string, text: string) => {
    const file = path.join(dir, name)
    fs.writeFileSync(file, text)
    return file
  }
  const head = [
    "pools:",
    "  llm:",
    "    resources: [{ id: j, options: { baseUrl: \"http://127.0.0.1:9/v1\", apiKeyEnv: JUDGE_KEY } }]",
    "pipeline:",
    "  name: judged",
    "  tasks:",
    "    - use: chat",
    "      options: { template: \"Spam or ham? {{text}}\", maxTokens: 5 }"
  ]
  const tail = ["source: { range: { n: 1 } }"]
  const load = (file: string) => Experiment.load(file, { env: {} }).pipe(Effect.provide(NodeContext.layer))
  const problems = (file: string) =>
    Effect.map(Effect.flip(load(file)), (e) => e.issues.map((i) => `${i.path}: ${i.message}`))

  it.effect("a valid entry loads as a blind judge task", () =>
    Effect.gen(function*() {
      const file = write("ok.yaml", [
        ...head,
        "    - use: judge",
        "      options:",
        "        rubric: { id: q, version: 1, criteria: [{ name: correct, scale: { min: 1, max: 5 } }] }",
        "        candidates: { answer: content }",
        "        context: { email: input.text }",
        ...tail
      ].join("\n"))
      const e = yield* load(file)
      const j = e.template.tasks[1]!
      assert.strictEqual(j.name, "judge")
      assert.isTrue(j.options.evaluator)
      assert.deepStrictEqual(j.parameters["context"], { email: "input.text" })
    }))

  it.effect("problems of the judge's options are reported at their field paths", () =>
    Effect.gen(function*() {
      const file = write("bad.yaml", [
        ...head,
        "    - use: judge",
        "      options:",
        "        rubric: { id: q, version: 1, criteria: [{ name: correct, scale: { min: 1 } }] }",
        "        candidates: { answer: content }",
        ...tail
      ].join("\n"))
      const lines = yield* problems(file)
      assert.isTrue(lines.some((l) => l.startsWith("pipeline.tasks[1].options.rubric.criteria[0].scale.max: is missing")), lines.join("\n"))
    }))

  it.effect("evaluator: false on a judge is refused at its path; evaluator must be a boolean", () =>
    Effect.gen(function*() {
      const off = write("off.yaml", [...head, "    - use: judge", "      evaluator: false", "      options: { rubric: { id: q, version: 1, criteria: [{ name: c, scale: { min: 0, max: 1 } }] }, candidates: content }", ...tail].join("\n"))
      const lines = yield* problems(off)
      assert.deepStrictEqual(lines.filter((l) => l.startsWith("pipeline.tasks[1]")), [
        "pipeline.tasks[1].evaluator: the judge is always an evaluator: it runs blind to the variant (its score must not depend on it)"
      ])
      const notBool = write("yes.yaml", [...head, "    - use: echo", "      evaluator: \"yes\"", ...tail].join("\n"))
      const l2 = yield* problems(notBool)
      assert.isTrue(l2.some((l) => l.startsWith("pipeline.tasks[1].evaluator")), l2.join("\n"))
      // and on any other task it makes the task an evaluator
      const grader = write("grader.yaml", [...head, "    - use: echo", "      evaluator: true", ...tail].join("\n"))
      const e = yield* load(grader)
      assert.isTrue(e.template.tasks[1]!.options.evaluator)
    }))
})
