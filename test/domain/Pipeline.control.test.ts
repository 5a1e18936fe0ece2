import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { PipelineBuildError } from "../../src/domain/Errors.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"

const blake = (s: string) => createHash("blake2b512").update(Buffer.from(s, "utf8")).digest("hex").slice(0, 32)

// the golden chain of Pipeline.test.ts (code digests pinned), plus a third task
const prepare = Task.sync("prepare", { codeDigest: "code-prepare" }, (s: { q: string }) => ({ prompt: s.q }))
const ask = Task.make(
  "ask",
  { resource: "llm", retry: { maxAttempts: 4 }, timeout: "60 seconds", codeDigest: "code-ask" },
  (r: { prompt: string }) => Effect.succeed(r.prompt.length)
)
const judge = Task.sync("judge", { codeDigest: "code-judge" }, (n: number) => n > 0 ? n : Handoff.rewind("prepare", { q: "again" }))
const report = Task.sync("report", { codeDigest: "code-report" }, (n: number) => String(n))

const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (e) {
    return e
  }
  assert.fail("expected a throw")
}

describe("control: identity", () => {
  it("a pipeline without control keeps exactly the digest and ids it had before control existed", () => {
    // pinned before control flow was added (see Pipeline.test.ts golden vectors)
    const plain = Pipeline.make("golden", prepare, ask)
    assert.strictEqual(plain.specDigest, "0d82a5ae0db34b1cf564065a15017b73")
    assert.strictEqual(plain.bind({ q: "2+2" }).pipelineId, "40c4bcb35944370fbd3f8a0a24c936f2")
    assert.isUndefined(plain.control)
    assert.isUndefined((plain.describe() as Record<string, unknown>)["control"])
    assert.strictEqual(Pipeline.computeSpecDigest(plain.tasks, { control: undefined }), plain.specDigest)
    assert.strictEqual(
      Pipeline.make("golden", { includeCode: false, control: undefined }, prepare, ask).specDigest,
      "a0b1995b2dc7b14eb62bfe499b634fe0"
    )
  })

  it("a control block folds its canonical (seq, sorted) form into the digest", () => {
    const controlled = Pipeline.make("golden", prepare, ask, { control: { edges: { prepare: ["end"] } } })
    const fp = (name: string, extra: string, code: string) =>
      `{"algorithm":null,"children":[],"codeDigest":"${code}","config":{},"name":"${name}","parameters":{},` +
      `${extra}"timeoutMs":`
    const canonical = `{"control":{"edges":[[0,["end"]]],"maxHandoffs":null,"retryAll":[],"rewind":[]},` +
      `"format":"assay.spec/v1","tasks":[` +
      fp("prepare", `"resource":null,"retry":{"baseMs":500,"capMs":30000,"factor":2,"jitter":"full","maxAttempts":1},`, "code-prepare") +
      `null,"version":null},` +
      fp("ask", `"resource":"llm","retry":{"baseMs":500,"capMs":30000,"factor":2,"jitter":"full","maxAttempts":4},`, "code-ask") +
      `60000,"version":null}]}`
    assert.strictEqual(controlled.specDigest, blake(canonical))
    assert.notStrictEqual(controlled.specDigest, "0d82a5ae0db34b1cf564065a15017b73")
    assert.notStrictEqual(controlled.bind({ q: "2+2" }).pipelineId, "40c4bcb35944370fbd3f8a0a24c936f2")
  })

  it("targets written as names or as seqs, in any order, are the same pipeline", () => {
    const byName = Pipeline.make("a", prepare, ask, judge, report, {
      control: { edges: { ask: ["end", "report"] }, rewind: { judge: ["prepare", "ask"] }, maxHandoffs: 3 }
    })
    const bySeq = Pipeline.make("b", {
      control: { maxHandoffs: 3, rewind: { "2": [1, 0] }, edges: { "1": [3, "end"] } }
    }, prepare, ask, judge, report)
    assert.strictEqual(byName.specDigest, bySeq.specDigest)
    assert.deepStrictEqual(byName.control?.canonical, bySeq.control?.canonical)
  })

  it("different declarations are different pipelines (edges, rewinds, budget)", () => {
    const digestOf = (control: Pipeline.MakeOptions["control"]) =>
      Pipeline.make("p", prepare, ask, judge, report, { control }).specDigest
    const base = digestOf({ edges: { ask: ["report"] } })
    assert.notStrictEqual(digestOf({ edges: { ask: ["end"] } }), base)
    assert.notStrictEqual(digestOf({ edges: { ask: ["report"] }, rewind: { judge: [0] }, maxHandoffs: 3 }), base)
    assert.notStrictEqual(
      digestOf({ rewind: { judge: [0] }, maxHandoffs: 3 }),
      digestOf({ rewind: { judge: [0] }, maxHandoffs: 4 })
    )
  })
})

describe("control: the options position and the template", () => {
  const control = { edges: { ask: ["report", "end"] }, rewind: { judge: ["prepare"] }, maxHandoffs: 3 }

  it("options are accepted first (after the name) or last, with the same template", () => {
    const last = Pipeline.make("gen", prepare, ask, judge, report, { control, tags: { k: "v" } })
    const first = Pipeline.make("gen", { control, tags: { k: "v" } }, prepare, ask, judge, report)
    assert.strictEqual(last.specDigest, first.specDigest)
    assert.deepStrictEqual(last.taskNames, ["prepare", "ask", "judge", "report"])
    assert.strictEqual(last.nTasks, 4)
    assert.deepStrictEqual(last.tags, { k: "v" })
    assert.strictEqual(last.control?.maxHandoffs, 3)
    assert.isTrue(last.control?.backward)
    assert.deepStrictEqual((last.describe() as Record<string, unknown>)["control"], {
      edges: ["ask(1) → report(3)", "ask(1) → end"],
      rewind: ["judge(2) → prepare(0)"],
      retryAll: [],
      maxHandoffs: 3,
      backward: true
    })
  })

  it("fromTasks takes control in its options", () => {
    const t = Pipeline.fromTasks("gen", [prepare, ask, judge, report], { control })
    assert.strictEqual(t.specDigest, Pipeline.make("gen", prepare, ask, judge, report, { control }).specDigest)
    assert.deepStrictEqual([...t.control!.rewind.get(2)!], [0])
  })

  it("options given twice, or a non-object in the last position, are refused", () => {
    const twice = thrown(() => (Pipeline.make as Function)("p", { tags: {} }, prepare, ask, { control }))
    assert.instanceOf(twice, PipelineBuildError)
    assert.strictEqual(
      (twice as PipelineBuildError).message,
      `pipeline "p": options are given twice (first and last): pass one options object`
    )
    const notTask = thrown(() => (Pipeline.make as Function)("p", prepare, ask, "x"))
    assert.strictEqual((notTask as PipelineBuildError).message, `pipeline "p": argument 3 is not a task`)
  })

  it("a malformed control block throws PipelineBuildError listing every issue with its path", () => {
    const e = thrown(() =>
      Pipeline.make("p", prepare, ask, judge, report, {
        control: { edges: { ask: ["prepare"] }, rewind: { judge: ["report"] } }
      })
    )
    assert.instanceOf(e, PipelineBuildError)
    assert.strictEqual(
      (e as PipelineBuildError).message,
      `pipeline "p": control.edges.ask[0]: edges go strictly forward: "prepare" (seq 0) is not after "ask" (seq 1) ` +
        `(declare going back in rewind); control.rewind.judge[0]: rewind goes strictly back: "report" (seq 3) is not ` +
        `before "judge" (seq 2) (declare going forward in edges); control.maxHandoffs: maxHandoffs is required when ` +
        `rewind or retryAll is declared (the loop budget)`
    )
    const unknown = thrown(() => (Pipeline.make as Function)("p", { control: { edge: {} } }, prepare))
    assert.strictEqual(
      (unknown as PipelineBuildError).message,
      `pipeline "p": control.edge: unknown key "edge" (did you mean "edges"?)`
    )
    const badOption = thrown(() => (Pipeline.make as Function)("p", { controls: {} }, prepare))
    assert.strictEqual(
      (badOption as PipelineBuildError).message,
      `pipeline "p": unknown option "controls" (the options are tags, includeCode and control)`
    )
  })

  it("retryAll is allowed in a single-task pipeline", () => {
    const t = Pipeline.make("one", prepare, { control: { retryAll: ["prepare"], maxHandoffs: 2 } })
    assert.deepStrictEqual([...t.control!.retryAll], [0])
  })
})
