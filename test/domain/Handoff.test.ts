import { assert, describe, it, expect } from "@effect/vitest"
import { Either, Option, Schema } from "effect"
import * as Handoff from "../../src/domain/Handoff.js"

describe("Handoff directives", () => {
  it("to: target, value, reason; an omitted value reuses the input", () => {
    const d = Handoff.to("report", { score: 1 }, { reason: "metrics not needed" })
    assert.isTrue(Handoff.isHandoff(d))
    assert.strictEqual(d.operation, "to")
    assert.strictEqual(d.target, "report")
    expect(d.value).toStrictEqual(Option.some({ score: 1 }))
    assert.strictEqual(d.reason, "metrics not needed")
    assert.isFalse(d.isEnd)
    assert.isFalse(d.reusesInput)

    const reuse = Handoff.to(2)
    assert.strictEqual(reuse.target, 2)
    assert.isTrue(Option.isNone(reuse.value))
    assert.isTrue(reuse.reusesInput)
    assert.strictEqual(reuse.reason, "")
    assert.isTrue(Handoff.to("report", undefined, { reason: "r" }).reusesInput)
  })

  it("null is a value, never a reuse", () => {
    const d = Handoff.to("report", null)
    expect(d.value).toStrictEqual(Option.some(null))
    assert.isFalse(d.reusesInput)
    expect(Handoff.end(null).value).toStrictEqual(Option.some(null))
    expect(Handoff.rewind(0, null).value).toStrictEqual(Option.some(null))
  })

  it("end: no target, isEnd; an omitted value reuses the input", () => {
    const d = Handoff.end(undefined, { reason: "already good" })
    assert.strictEqual(d.operation, "end")
    assert.isNull(d.target)
    assert.isTrue(d.isEnd)
    assert.isTrue(d.reusesInput)
    assert.strictEqual(d.reason, "already good")
    const v = Handoff.end({ report: "x" })
    assert.isFalse(v.reusesInput)
  })

  it("to(\"end\") is end, as \"end\" is in control.edges (value and reason kept)", () => {
    const d = Handoff.to("end", { verdict: "good" }, { reason: "done early" })
    assert.strictEqual(d.operation, "end")
    assert.isNull(d.target)
    assert.isTrue(d.isEnd)
    expect(d.value).toStrictEqual(Option.some({ verdict: "good" }))
    assert.strictEqual(d.reason, "done early")
    assert.isTrue(Handoff.to("end").reusesInput)
    assert.strictEqual(Handoff.to("End").operation, "to")
  })

  it("rewind keeps its explicit value; without one the value is None (refused by Control.check)", () => {
    const d = Handoff.rewind("generate", { feedback: "warmer" }, { reason: "invalid" })
    assert.strictEqual(d.operation, "rewind")
    assert.strictEqual(d.target, "generate")
    expect(d.value).toStrictEqual(Option.some({ feedback: "warmer" }))
    assert.isFalse(d.reusesInput)
    assert.isFalse(d.isEnd)
    assert.isTrue(Option.isNone(Handoff.rewind("generate", undefined).value))
  })

  it("retryAll takes no value; a non-options argument is kept as a value to be refused", () => {
    const d = Handoff.retryAll({ reason: "new preparation" })
    assert.strictEqual(d.operation, "retryAll")
    assert.isNull(d.target)
    assert.isTrue(Option.isNone(d.value))
    assert.isFalse(d.reusesInput)
    assert.strictEqual(d.reason, "new preparation")
    assert.strictEqual(Handoff.retryAll().reason, "")
    const untyped = Handoff.retryAll as (u: unknown) => Handoff.Handoff
    expect(untyped({ state: 1 }).value).toStrictEqual(Option.some({ state: 1 }))
    expect(untyped(7).value).toStrictEqual(Option.some(7))
  })

  it("directives are frozen, recognised by isHandoff only, and print readably", () => {
    const d = Handoff.to("report")
    assert.isTrue(Object.isFrozen(d))
    assert.isFalse(Handoff.isHandoff({ operation: "to", target: "report" }))
    assert.isFalse(Handoff.isHandoff(null))
    assert.isFalse(Handoff.isHandoff("to"))
    assert.strictEqual(String(d), `Handoff.to "report"`)
    assert.strictEqual(String(Handoff.retryAll()), "Handoff.retryAll")
    assert.deepStrictEqual(JSON.parse(JSON.stringify(Handoff.rewind(0, { a: 1 }, { reason: "r" }))), {
      _id: "Handoff",
      operation: "rewind",
      target: 0,
      value: { a: 1 },
      reason: "r"
    })
  })
})

describe("HandoffRecord", () => {
  const row = {
    handoffId: 3,
    pipelineId: "p1",
    runId: "r1",
    fromSeq: 1,
    fromTask: "validate",
    toSeq: 0,
    toTask: "generate",
    operation: "rewind" as const,
    entrySeq: 3,
    entryArtifactId: "p1:3",
    entryReused: false,
    reason: "invalid",
    ts: 1_000
  }

  it("round-trips through JSON; end has null target columns", () => {
    const decoded = Schema.decodeUnknownSync(Handoff.HandoffRecord)(row)
    assert.instanceOf(decoded, Handoff.HandoffRecord)
    assert.deepStrictEqual(Schema.encodeSync(Handoff.HandoffRecord)(decoded), row)
    const end = Schema.decodeUnknownSync(Handoff.HandoffRecord)({ ...row, toSeq: null, toTask: null, operation: "end" })
    assert.isNull(end.toSeq)
    const reused = Schema.decodeUnknownSync(Handoff.HandoffRecord)({ ...row, entrySeq: -1, entryReused: true })
    assert.strictEqual(reused.entrySeq, -1)
  })

  it("refuses an unknown operation, a fractional seq or a negative id", () => {
    const decode = Schema.decodeUnknownEither(Handoff.HandoffRecord)
    assert.isTrue(Either.isLeft(decode({ ...row, operation: "jump" })))
    assert.isTrue(Either.isLeft(decode({ ...row, fromSeq: 1.5 })))
    assert.isTrue(Either.isLeft(decode({ ...row, handoffId: -1 })))
    assert.isTrue(Either.isLeft(decode({ ...row, entrySeq: -2 })))
  })
})
