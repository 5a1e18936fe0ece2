/**
 * Evaluator blindness: the `evaluator` task option and config field, the redaction of an
 * evaluator's input, and what the runner withholds from an evaluator's context inside a suite
 * of study trials (and inside a fanout), beside the same task not marked evaluator.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Stream } from "effect"
import * as Evaluator from "../../src/domain/Evaluator.js"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import type { TaskContext } from "../../src/domain/TaskContext.js"
import * as Pool from "../../src/services/Pool.js"
import * as Suite from "../../src/services/Suite.js"
import { fanout } from "../../src/tasks/Fanout.js"
import { suiteEnv } from "../services/suiteFixture.js"

describe("the evaluator option", () => {
  it("defaults to false; true is recorded in the fingerprint and describe only when set, so no other identity changes", () => {
    const body = (n: number) => n
    const plain = Task.sync("grade", body)
    const marked = Task.sync("grade", { evaluator: true }, body)
    assert.isFalse(plain.options.evaluator)
    assert.isTrue(marked.options.evaluator)
    assert.notProperty(Task.fingerprint(plain) as object, "evaluator")
    assert.strictEqual((Task.fingerprint(marked) as Record<string, Json>)["evaluator"], true)
    assert.notStrictEqual(Pipeline.make("p", plain).specDigest, Pipeline.make("p", marked).specDigest)
    assert.notProperty(Task.describe(plain) as object, "evaluator")
    assert.strictEqual((Task.describe(marked) as Record<string, Json>)["evaluator"], true)
    // an override sets and clears it; the original is untouched
    const over = Task.withOverrides(plain, { evaluator: true })
    assert.isTrue(over.options.evaluator)
    assert.isFalse(Task.withOverrides(marked, { evaluator: false }).options.evaluator)
    assert.isFalse(plain.options.evaluator)
  })

  it("a value that is not a boolean is refused with its field path", () => {
    const r = Task.tryDefine(() => Task.sync("grade", { evaluator: "yes" as unknown as boolean }, (n: number) => n))
    assert.isTrue(Either.isLeft(r))
    const e = (r as Either.Left<any, any>).left
    assert.deepStrictEqual(e.issues.map((i: { path: string }) => i.path), ["evaluator"])
    assert.include(e.message, "evaluator must be true or false, got string")
    const n = Task.tryDefine(() => Task.withOverrides(Task.sync("grade", (n: number) => n), { evaluator: null as unknown as boolean }))
    assert.include((n as Either.Left<any, any>).left.message, "evaluator cannot be null")
  })
})

describe("Evaluator.redact", () => {
  const values = Evaluator.withheldValues({
    variables: { prompt: "Spam? {{text}}", model: { model: "small-1", pool: "llm", params: { temperature: 0.5 } }, k: 3 },
    experimentId: "p1-v02-r1",
    outputDir: "/out/experiments/p1-v02-r1"
  })

  it("withholds every string inside the variables, the member id and its directory; numbers and booleans are not withheld", () => {
    assert.deepStrictEqual([...values].sort(), ["/out/experiments/p1-v02-r1", "Spam? {{text}}", "llm", "p1-v02-r1", "small-1"])
    assert.strictEqual(Evaluator.withheldValues({ variables: {}, experimentId: null, outputDir: null }).size, 0)
  })

  it("replaces whole string values at any depth of objects and arrays; keys, substrings and numbers stay; the input is not changed", () => {
    const input = {
      answer: "spam",
      model: "small-1",
      nested: { trial: "p1-v02-r1", list: ["llm", "as small-1, I think", 0.5], prompt: "Spam? {{text}}" },
      "small-1": "key stays",
      temperature: 0.5
    }
    const before = JSON.stringify(input)
    const r = Evaluator.redact(input, values)
    assert.strictEqual(r.withheld, 4)
    assert.deepStrictEqual(r.value, {
      answer: "spam",
      model: Evaluator.WITHHELD,
      nested: { trial: Evaluator.WITHHELD, list: [Evaluator.WITHHELD, "as small-1, I think", 0.5], prompt: Evaluator.WITHHELD },
      "small-1": "key stays",
      temperature: 0.5
    })
    assert.strictEqual(JSON.stringify(input), before)
    assert.strictEqual(Evaluator.countWithheld(r.value), 4)
    // nothing to withhold: the very same value comes back
    const clean = { answer: "ham", n: [1, 2] }
    assert.strictEqual(Evaluator.redact(clean, values).value, clean)
    assert.strictEqual(Evaluator.redact("small-1", values).value, Evaluator.WITHHELD)
  })
})

describe("Evaluator.blindContext", () => {
  it.effect("the withheld store fails every read with StoreUnavailable, naming the reason", () =>
    Effect.gen(function*() {
      const s = Evaluator.withheldStore
      const e1 = yield* Effect.flip(s.listRuns)
      assert.strictEqual(e1._tag, "StoreUnavailable")
      assert.include(e1.message, "withheld from evaluator tasks")
      const e2 = yield* Effect.flip(Stream.runCollect(s.streamTasks()))
      assert.strictEqual(e2._tag, "StoreUnavailable")
    }))
})

// ---------------------------------------------------------------------------------------------
// Through the runner: a suite whose members carry study variables
// ---------------------------------------------------------------------------------------------

interface Seen {
  readonly variables: unknown
  readonly suiteId: string | null
  readonly experimentId: string | null
  readonly localKey: string | null
  readonly outputDir: string | null
  readonly taskName: string
  readonly store: string
  readonly input: unknown
}

const look = (seen: Map<string, Seen>, label: string) => (input: unknown, ctx: TaskContext) =>
  Effect.gen(function*() {
    const store = yield* Effect.match(ctx.store.listRuns, { onFailure: (e) => `failed: ${e.message}`, onSuccess: () => "read" })
    seen.set(`${label}:${ctx.pipelineId}`, {
      variables: JSON.parse(JSON.stringify(ctx.variables)),
      suiteId: ctx.suiteId,
      experimentId: ctx.experimentId,
      localKey: ctx.localKey,
      outputDir: ctx.outputDir,
      taskName: ctx.taskName,
      store,
      input: JSON.parse(JSON.stringify(input))
    })
    return input
  })

describe("the runner runs an evaluator blind", () => {
  it.effect("in a study's trials: the same probe sees the variables when plain and nothing of the variant when an evaluator", () =>
    Effect.gen(function*() {
      const seen = new Map<string, Seen>()
      // a worker that copies what a careless pipeline would: the variables into its output
      const work = Task.make("work", (n: number, ctx) =>
        Effect.succeed({ n, answer: n % 2 === 0 ? "spam" : "ham", model: (ctx.variables.model as { model: string }).model, prompt: ctx.variables.prompt, trial: ctx.experimentId }))
      const plain = Task.make("plain", look(seen, "plain"))
      const blind = Task.make("blind", { evaluator: true }, look(seen, "blind"))
      const template = Pipeline.make("study", work, plain, blind)
      const variants = {
        "p1-v01-r1": { prompt: "Is this spam? {{text}}", model: { model: "small-1", pool: "llm" } },
        "p1-v02-r1": { prompt: "Read carefully, then answer spam or ham. {{text}}", model: { model: "large-1", pool: "llm" } }
      }
      const suite = yield* Suite.make({
        id: "blind-study",
        outputRoot: "/tmp/blind-study",
        experiments: Object.entries(variants).map(([id, variables], i) =>
          Suite.member(id, () => template.map([0, 1]), { definitionDigest: `d${i}`, variables })
        )
      })
      const report = yield* Suite.run(suite)
      assert.strictEqual(report.run.stats.byState.succeeded, 4)
      const strings = Object.values(variants).flatMap((v) => [v.prompt, v.model.model])
      let blinds = 0
      for (const [key, s] of seen) {
        if (key.startsWith("plain:")) {
          // not an evaluator: its trial's variables and labels, as before
          assert.include(Object.keys(variants), s.experimentId)
          assert.deepStrictEqual(s.variables, variants[s.experimentId as keyof typeof variants])
          assert.strictEqual(s.suiteId, "blind-study")
          assert.strictEqual(s.store, "read")
          assert.strictEqual((s.input as { model: string }).model, (variants[s.experimentId as keyof typeof variants]).model.model)
          continue
        }
        blinds++
        assert.deepStrictEqual(s.variables, {})
        assert.deepStrictEqual([s.suiteId, s.experimentId, s.localKey, s.outputDir], [null, null, null, null])
        assert.strictEqual(s.taskName, "blind")
        assert.include(s.store, "withheld from evaluator tasks")
        const input = s.input as Record<string, unknown>
        assert.deepStrictEqual([input["model"], input["prompt"], input["trial"]], [Evaluator.WITHHELD, Evaluator.WITHHELD, Evaluator.WITHHELD])
        assert.include(["spam", "ham"], input["answer"])
        const text = JSON.stringify(s)
        for (const v of [...strings, "p1-v01-r1", "p1-v02-r1", "pool"]) assert.notInclude(text, v === "pool" ? "\"llm\"" : v)
      }
      assert.strictEqual(blinds, 4)
    }).pipe(Effect.provide(suiteEnv("blind-study", [Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 4 })])]))))

  it.effect("an evaluator branch of a fanout is blind while its sibling is not; a blind group's branches are blind", () =>
    Effect.gen(function*() {
      const seen = new Map<string, Seen>()
      const echoRow = Task.make("row", look(seen, "row"))
      const grade = Task.make("grade", { evaluator: true }, look(seen, "grade"))
      const group = fanout(echoRow, grade)
      const blindGroup = Task.withOverrides(fanout(Task.make("inner", look(seen, "inner")), { name: "outer" }), { evaluator: true })
      const template = Pipeline.make("fan", Task.make("work", (n: number, ctx) => Effect.succeed({ n, model: ctx.variables.model })), group, blindGroup)
      const suite = yield* Suite.make({
        id: "fan-study",
        outputRoot: "/tmp/fan-study",
        experiments: [Suite.member("p1-v01-r1", () => template.map([0]), { definitionDigest: "d", variables: { model: "small-1" } })]
      })
      yield* Suite.run(suite)
      const byLabel = (l: string) => [...seen.entries()].find(([k]) => k.startsWith(`${l}:`))![1]
      assert.deepStrictEqual(byLabel("row").variables, { model: "small-1" })
      assert.deepStrictEqual((byLabel("row").input as { model: string }).model, "small-1")
      assert.deepStrictEqual(byLabel("grade").variables, {})
      assert.strictEqual(byLabel("grade").experimentId, null)
      assert.strictEqual((byLabel("grade").input as { model: string }).model, Evaluator.WITHHELD)
      // the blind group's branch: the group's input was redacted by the runner
      assert.deepStrictEqual(byLabel("inner").variables, {})
      const inner = byLabel("inner").input as { row: { model: string }; grade: { model: string } }
      assert.strictEqual(inner.row.model, Evaluator.WITHHELD)
    }).pipe(Effect.provide(suiteEnv("fan-study", [Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 4 })])]))))
})
