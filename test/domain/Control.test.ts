import { assert, describe, expect, it } from "@effect/vitest"
import { Either, Option } from "effect"
import * as Control from "../../src/domain/Control.js"
import * as Handoff from "../../src/domain/Handoff.js"

const names = ["generate", "validate", "report"]
const VALID = `the valid seqs are 0 ("generate"), 1 ("validate"), 2 ("report")`

const ok = (taskNames: ReadonlyArray<string>, decl: unknown): Control.ResolvedControl => {
  const r = Control.resolve(taskNames, decl)
  if (Either.isLeft(r)) assert.fail(JSON.stringify(r.left))
  return r.right
}

/** The issues of a refused declaration as `path: message` lines. */
const refused = (taskNames: ReadonlyArray<string>, decl: unknown): Array<string> => {
  const r = Control.resolve(taskNames, decl)
  if (Either.isRight(r)) assert.fail(`expected a refusal of ${JSON.stringify(decl)}`)
  return r.left.map((i) =>
    `${Control.formatIssuePath(i.path)}: ${i.message}${i.suggestion === undefined ? "" : ` (${i.suggestion})`}`
  )
}

describe("Control.resolve: what is accepted", () => {
  it("resolves names and seqs to seqs, with the budget and backward flag", () => {
    const c = ok(names, { edges: { validate: ["report", "end"] }, rewind: { validate: ["generate"] }, maxHandoffs: 3 })
    assert.deepStrictEqual([...c.edges.get(1)!], [2, "end"])
    assert.deepStrictEqual([...c.rewind.get(1)!], [0])
    assert.strictEqual(c.retryAll.size, 0)
    assert.strictEqual(c.maxHandoffs, 3)
    assert.isTrue(c.backward)
    assert.deepStrictEqual(c.taskNames, names)
    assert.deepStrictEqual(c.canonical, { edges: [[1, [2, "end"]]], rewind: [[1, [0]]], retryAll: [], maxHandoffs: 3 })
  })

  it("a forward-only block needs no budget", () => {
    const c = ok(names, { edges: { generate: ["report"] } })
    assert.isFalse(c.backward)
    assert.isNull(c.maxHandoffs)
    assert.deepStrictEqual(c.canonical, { edges: [[0, [2]]], rewind: [], retryAll: [], maxHandoffs: null })
  })

  it("names and seqs (numbers or numeric strings) give the same canonical form, sorted", () => {
    const byName = ok(names, { edges: { generate: ["end", "report", "validate"] }, retryAll: ["report", "generate"], maxHandoffs: 2 })
    const bySeq = ok(names, { edges: { "0": [2, 1, "end"] }, retryAll: [0, "2"], maxHandoffs: 2 })
    assert.deepStrictEqual(byName.canonical, bySeq.canonical)
    assert.deepStrictEqual(byName.canonical, {
      edges: [[0, [1, 2, "end"]]],
      rewind: [],
      retryAll: [0, 2],
      maxHandoffs: 2
    })
  })

  it("an exact task name wins over a numeric string", () => {
    const c = ok(["2", "a", "b"], { edges: { "2": ["b"] } })
    assert.deepStrictEqual([...c.edges.keys()], [0])
    const d = ok(["x", "0", "y"], { edges: { x: ["0"] } })
    assert.deepStrictEqual([...d.edges.get(0)!], [1])
  })

  it("a repeated name is addressed by seq", () => {
    const c = ok(["ask", "judge", "ask"], { edges: { "0": [2] } })
    assert.deepStrictEqual([...c.edges.get(0)!], [2])
  })

  it("retryAll may name the first task, also in a single-task pipeline", () => {
    const c = ok(["only"], { retryAll: ["only"], maxHandoffs: 1 })
    assert.deepStrictEqual([...c.retryAll], [0])
    assert.isTrue(c.backward)
  })

  it("a source written as a name and as a seq merges its targets", () => {
    const c = ok(names, { edges: { generate: ["validate"], "0": ["report"] } })
    assert.deepStrictEqual([...c.edges.get(0)!].sort(), [1, 2])
  })

  it("describe names the tasks", () => {
    const c = ok(names, { edges: { validate: ["report", "end"] }, rewind: { report: [0] }, retryAll: [2], maxHandoffs: 4 })
    assert.deepStrictEqual(Control.describe(c), {
      edges: ["validate(1) → report(2)", "validate(1) → end"],
      rewind: ["report(2) → generate(0)"],
      retryAll: ["report(2)"],
      maxHandoffs: 4,
      backward: true
    })
  })
})

describe("Control.resolve: every refusal, with its field path", () => {
  it("a block that is not an object, or declares nothing", () => {
    assert.deepStrictEqual(refused(names, [1]), [
      ": control must be an object with edges, rewind, retryAll or maxHandoffs, got an array"
    ])
    assert.deepStrictEqual(refused(names, "x"), [
      `: control must be an object with edges, rewind, retryAll or maxHandoffs, got "x"`
    ])
    assert.deepStrictEqual(refused(names, {}), [
      ": control declares no operation: declare edges, rewind or retryAll (or remove control)"
    ])
  })

  it("unknown keys, with did-you-mean (snake_case spellings too)", () => {
    assert.deepStrictEqual(refused(names, { edges: { validate: ["report"] }, edgs: {}, max_handoffs: 3, whatever: 1 }), [
      `edgs: unknown key "edgs" (did you mean "edges"?)`,
      `max_handoffs: unknown key "max_handoffs" (did you mean "maxHandoffs"?)`,
      `whatever: unknown key "whatever"`
    ])
    // a misspelt backward section is reported once, without a knock-on about maxHandoffs
    assert.deepStrictEqual(refused(names, { rewnid: { report: ["generate"] }, maxHandoffs: 3 }), [
      `rewnid: unknown key "rewnid" (did you mean "rewind"?)`
    ])
  })

  it("unknown tasks, with did-you-mean; seqs out of range or not integers", () => {
    assert.deepStrictEqual(refused(names, { edges: { validat: ["report"], validate: ["reprot", 7, 1.5, -1, true] } }), [
      `edges.validat: unknown task "validat" (the tasks are "generate", "validate", "report") (did you mean "validate"?)`,
      `edges.validate[0]: unknown task "reprot" (the tasks are "generate", "validate", "report") (did you mean "report"?)`,
      `edges.validate[1]: seq 7 is out of range: the pipeline has 3 tasks, ${VALID}`,
      `edges.validate[2]: a seq is an integer >= 0, got 1.5 (${VALID})`,
      `edges.validate[3]: seq -1 is out of range: the pipeline has 3 tasks, ${VALID}`,
      "edges.validate[4]: a task is a name or a seq, got true"
    ])
  })

  it("a negative or out-of-range seq written as a key or a string is out of range, with the valid seqs (not an unknown task)", () => {
    assert.deepStrictEqual(refused(names, { edges: { "-1": ["report"], "3": ["end"], validate: ["-2", "9", "1.5"] } }), [
      `edges.3: seq 3 is out of range: the pipeline has 3 tasks, ${VALID}`,
      `edges.-1: seq -1 is out of range: the pipeline has 3 tasks, ${VALID}`,
      `edges.validate[0]: seq -2 is out of range: the pipeline has 3 tasks, ${VALID}`,
      `edges.validate[1]: seq 9 is out of range: the pipeline has 3 tasks, ${VALID}`,
      `edges.validate[2]: a seq is an integer >= 0, got 1.5 (${VALID})`
    ])
    assert.deepStrictEqual(refused(["only"], { retryAll: ["-1"], maxHandoffs: 1 }), [
      `retryAll[0]: seq -1 is out of range: the pipeline has 1 task, the valid seqs are 0 ("only")`
    ])
  })

  it("a repeated name says which seqs use it", () => {
    assert.deepStrictEqual(refused(["ask", "judge", "ask", "report"], { edges: { judge: ["ask"] } }), [
      `edges.judge[0]: task name "ask" is used by seqs 0, 2: address the task by its seq`
    ])
    assert.deepStrictEqual(refused(["ask", "judge", "ask"], { retryAll: ["ask"], maxHandoffs: 1 }), [
      `retryAll[0]: task name "ask" is used by seqs 0, 2: address the task by its seq`
    ])
  })

  it("edges go strictly forward; end is refused from the last task", () => {
    assert.deepStrictEqual(refused(names, { edges: { validate: ["generate", "validate"], report: ["end"] } }), [
      `edges.validate[0]: edges go strictly forward: "generate" (seq 0) is not after "validate" (seq 1) (declare going back in rewind)`,
      `edges.validate[1]: edges go strictly forward: "validate" (seq 1) is not after "validate" (seq 1) (declare going back in rewind)`,
      `edges.report[0]: "end" from the last task "report" (seq 2) changes nothing`
    ])
  })

  it("rewind goes strictly back: no self, no later task, no end", () => {
    assert.deepStrictEqual(refused(names, { rewind: { validate: ["validate", "report", "end"] }, maxHandoffs: 2 }), [
      `rewind.validate[0]: rewind goes strictly back: "validate" (seq 1) is not before "validate" (seq 1) (declare going forward in edges)`,
      `rewind.validate[1]: rewind goes strictly back: "report" (seq 2) is not before "validate" (seq 1) (declare going forward in edges)`,
      `rewind.validate[2]: "end" is not a rewind target: rewind goes to a strictly earlier task`
    ])
  })

  it("malformed sections and empty lists", () => {
    assert.deepStrictEqual(refused(names, { edges: ["report"], rewind: { validate: "generate" }, maxHandoffs: 2 }), [
      "edges: edges must be an object { source: [targets] }, got an array",
      `rewind.validate: expected a list of targets, got "generate"`
    ])
    assert.deepStrictEqual(refused(names, { edges: { validate: [] } }), [
      "edges.validate: the list of targets is empty: declare at least one or remove the source"
    ])
    assert.deepStrictEqual(refused(names, { retryAll: "report", maxHandoffs: 1 }), [
      `retryAll: retryAll must be a list of source tasks, got "report"`
    ])
    assert.deepStrictEqual(refused(names, { retryAll: [], maxHandoffs: 1 }), [
      "retryAll: the list of sources is empty: declare at least one or remove retryAll"
    ])
    assert.deepStrictEqual(refused(names, { edges: {}, rewind: {}, maxHandoffs: 1 }), [
      "edges: edges is empty: declare at least one source or remove edges",
      "rewind: rewind is empty: declare at least one source or remove rewind"
    ])
    assert.deepStrictEqual(refused(names, { maxHandoffs: 1 }), [
      "maxHandoffs: maxHandoffs requires backward operations (rewind or retryAll)"
    ])
  })

  it("maxHandoffs: required with backward operations, refused without, a positive integer", () => {
    assert.deepStrictEqual(refused(names, { rewind: { validate: ["generate"] } }), [
      "maxHandoffs: maxHandoffs is required when rewind or retryAll is declared (the loop budget)"
    ])
    assert.deepStrictEqual(refused(names, { retryAll: ["report"] }), [
      "maxHandoffs: maxHandoffs is required when rewind or retryAll is declared (the loop budget)"
    ])
    assert.deepStrictEqual(refused(names, { edges: { validate: ["report"] }, maxHandoffs: 3 }), [
      "maxHandoffs: maxHandoffs requires backward operations (rewind or retryAll)"
    ])
    for (const bad of [true, "3", 0, -2, 2.5, Number.NaN, Number.POSITIVE_INFINITY, null]) {
      const shown = typeof bad === "string" ? `"${bad}"` : String(bad)
      assert.deepStrictEqual(refused(names, { retryAll: [2], maxHandoffs: bad }), [
        `maxHandoffs: maxHandoffs must be a positive integer, got ${shown}`
      ])
    }
  })

  it("reports every problem at once", () => {
    assert.strictEqual(
      refused(names, { edges: { nope: ["report"], validate: ["generate"] }, rewind: { generate: ["report"] } }).length,
      4
    )
  })
})

describe("Control.check", () => {
  const control = ok(names, {
    edges: { generate: ["report"], validate: ["report", "end"] },
    rewind: { validate: ["generate"] },
    retryAll: ["report"],
    maxHandoffs: 3
  })
  const check = (fromSeq: number, d: Handoff.Handoff) => Control.check(control, 3, fromSeq, d)
  const refusal = (e: Either.Either<Control.Transition, string>): string => {
    if (Either.isRight(e)) assert.fail(`expected a refusal, got ${JSON.stringify(e.right)}`)
    return e.left
  }

  it("allows declared transitions, resolving names and seqs", () => {
    expect(check(1, Handoff.to("report", { a: 1 }, { reason: "skip" }))).toStrictEqual(Either.right({
      operation: "to" as const,
      fromSeq: 1,
      toSeq: 2,
      value: Option.some({ a: 1 }),
      reason: "skip"
    }))
    assert.deepStrictEqual(Either.map(check(1, Handoff.to(2)), (t) => [t.toSeq, Option.isNone(t.value)]), Either.right([2, true]))
    assert.deepStrictEqual(Either.getOrThrow(check(1, Handoff.to("2"))).toSeq, 2)
    assert.deepStrictEqual(Either.getOrThrow(check(1, Handoff.end())).toSeq, "end")
    expect(Either.map(check(1, Handoff.rewind("generate", null)), (t) => [t.toSeq, t.value])).toStrictEqual(
      Either.right([0, Option.some(null)])
    )
    assert.deepStrictEqual(
      Either.map(check(2, Handoff.retryAll({ reason: "again" })), (t) => [t.operation, t.toSeq, t.reason]),
      Either.right(["retryAll", 0, "again"])
    )
  })

  it("a directive used as a rewind or to value is refused: a directive cannot be a value", () => {
    assert.strictEqual(
      refusal(check(1, Handoff.rewind("generate", Handoff.end()))),
      `"validate" (seq 1) returned Handoff.rewind whose value is itself a Handoff directive: a directive cannot be a ` +
        `value (pass the target's entry state, e.g. Handoff.rewind(target, draft); to end, return Handoff.end(...) itself)`
    )
    assert.match(refusal(check(1, Handoff.to("report", Handoff.rewind("generate", 1)))), /a directive cannot be a value/)
  })

  it("no control block: refused", () => {
    assert.strictEqual(
      refusal(Control.check(undefined, 3, 1, Handoff.to("report"))),
      "the task at seq 1 returned Handoff.to, but the pipeline declares no control block"
    )
  })

  it("an undeclared edge is refused, naming the edge and what is declared", () => {
    assert.strictEqual(
      refusal(check(0, Handoff.to("validate"))),
      "undeclared edge generate → validate: control.edges allows generate → [report]"
    )
    assert.strictEqual(
      refusal(check(0, Handoff.end())),
      "undeclared edge generate → end: control.edges allows generate → [report]"
    )
    const backOnly = ok(names, { rewind: { report: ["validate"] }, maxHandoffs: 1 })
    assert.strictEqual(
      refusal(Control.check(backOnly, 3, 1, Handoff.to("report"))),
      "undeclared edge validate → report: control.edges declares nothing for validate"
    )
  })

  it("to: a backward or self target is refused (rewind is another operation)", () => {
    assert.strictEqual(
      refusal(check(1, Handoff.to("generate"))),
      `"validate" (seq 1) returned Handoff.to "generate" (seq 0), which is not after it: Handoff.to only goes forward (going back is Handoff.rewind, declared in control.rewind)`
    )
    assert.match(refusal(check(1, Handoff.to(1))), /which is not after it/)
  })

  it("a target that does not resolve is refused", () => {
    assert.strictEqual(
      refusal(check(1, Handoff.to("reprot"))),
      `"validate" (seq 1) returned Handoff.to with a bad target: unknown task "reprot" (the tasks are "generate", "validate", "report") (did you mean "report"?)`
    )
    assert.match(refusal(check(1, Handoff.to(9))), /seq 9 is out of range/)
    const repeated = ok(["ask", "judge", "ask"], { edges: { judge: [2] } })
    assert.strictEqual(
      refusal(Control.check(repeated, 3, 1, Handoff.to("ask"))),
      `"judge" (seq 1) returned Handoff.to with a bad target: task name "ask" is used by seqs 0, 2: address the task by its seq`
    )
    assert.isTrue(Either.isRight(Control.check(repeated, 3, 1, Handoff.to(2))))
  })

  it("\"end\" as a target is the end of the pipeline in edges and in Handoff.to; a task named end is addressed by seq", () => {
    expect(
      Either.map(check(1, Handoff.to("end", { verdict: 1 }, { reason: "good" })), (t): Array<unknown> => [t.operation, t.toSeq, t.value])
    ).toStrictEqual(Either.right<Array<unknown>>(["end", "end", Option.some({ verdict: 1 })]))
    assert.strictEqual(
      refusal(check(0, Handoff.to("end"))),
      "undeclared edge generate → end: control.edges allows generate → [report]"
    )
    const withEnd = ["ask", "end", "report"]
    const c = ok(withEnd, { edges: { ask: ["end", 1] }, rewind: { report: [1] }, maxHandoffs: 2 })
    assert.deepStrictEqual([...c.edges.get(0)!], ["end", 1])
    assert.deepStrictEqual(Either.getOrThrow(Control.check(c, 3, 0, Handoff.to("end"))).toSeq, "end")
    assert.deepStrictEqual(Either.getOrThrow(Control.check(c, 3, 0, Handoff.to(1))).toSeq, 1)
    assert.deepStrictEqual(refused(withEnd, { rewind: { report: ["end"] }, maxHandoffs: 2 }), [
      `rewind.report[0]: "end" is not a rewind target: rewind goes to a strictly earlier task ("end" as a target is the end of the pipeline: address the task named "end" by its seq 1)`
    ])
    assert.strictEqual(
      refusal(Control.check(c, 3, 2, Handoff.rewind("end", null))),
      `"report" (seq 2) returned Handoff.rewind("end"): "end" is not a rewind target: rewind goes to a strictly earlier task ("end" as a target is the end of the pipeline: address the task named "end" by its seq 1)`
    )
  })

  it("end from the last task is refused", () => {
    assert.strictEqual(
      refusal(check(2, Handoff.end())),
      `"report" (seq 2) is the last task: Handoff.end from it changes nothing and is refused`
    )
  })

  it("rewind: a value is required (null is one); strictly earlier; declared", () => {
    assert.strictEqual(
      refusal(check(1, Handoff.rewind("generate", undefined))),
      `"validate" (seq 1) returned Handoff.rewind without a value: rewind needs the target's explicit entry state (null is a value)`
    )
    assert.strictEqual(
      refusal(check(1, Handoff.rewind("report", 1))),
      `"validate" (seq 1) returned Handoff.rewind to "report" (seq 2), which is not before it: rewind goes strictly back`
    )
    assert.match(refusal(check(1, Handoff.rewind(1, 1))), /which is not before it/)
    assert.strictEqual(
      refusal(check(2, Handoff.rewind("generate", 1))),
      "undeclared rewind report → generate: control.rewind declares nothing for report"
    )
    const two = ok(["a", "b", "c", "d"], { rewind: { d: ["b"] }, maxHandoffs: 1 })
    assert.strictEqual(
      refusal(Control.check(two, 4, 3, Handoff.rewind("a", 1))),
      "undeclared rewind d → a: control.rewind allows d → [b]"
    )
  })

  it("retryAll: a value is refused; the source must be listed", () => {
    const withValue = (Handoff.retryAll as (u: unknown) => Handoff.Handoff)({ state: 1 })
    assert.strictEqual(
      refusal(check(2, withValue)),
      `"report" (seq 2) returned Handoff.retryAll with a value: retryAll replays the bound seed and takes none (to restart with a chosen state, use Handoff.rewind(0, state))`
    )
    assert.strictEqual(
      refusal(check(1, Handoff.retryAll())),
      `"validate" (seq 1) returned Handoff.retryAll, but control.retryAll does not list it`
    )
  })

  it("a reason that is not a string is refused", () => {
    assert.strictEqual(
      refusal(check(1, Handoff.to("report", 1, { reason: 42 as unknown as string }))),
      `"validate" (seq 1) returned Handoff.to with a reason that is not a string (42)`
    )
  })

  it("the value is kept as given (encoding is the runner's job)", () => {
    const v = { big: 1n }
    const t = check(1, Handoff.to("report", v))
    assert.isTrue(Either.isRight(t) && Option.getOrNull(t.right.value) === v)
  })
})

describe("Control.effectiveLimit", () => {
  it("is the smaller of the declared budget and the run's ceiling; the ceiling for forward-only", () => {
    const back = ok(names, { retryAll: [2], maxHandoffs: 3 })
    assert.strictEqual(Control.effectiveLimit(back, 1000), 3)
    assert.strictEqual(Control.effectiveLimit(back, 2), 2)
    const fwd = ok(names, { edges: { generate: ["end"] } })
    assert.strictEqual(Control.effectiveLimit(fwd, 1000), 1000)
  })
})
