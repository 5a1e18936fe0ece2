/**
 * The study domain (src/domain/Study.ts): exact decimal ranges, the odometer expansion, variant
 * and trial identity, the Schemas of stop conditions and objectives, the protocol digest.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as fc from "fast-check"
import * as Study from "../../src/domain/Study.js"

const variables = (input: ReadonlyArray<unknown>): ReadonlyArray<Study.Variable> => Schema.decodeUnknownSync(Schema.Array(Study.Variable))(input)

describe("ranges in exact decimal steps", () => {
  it("0 to 1 by 0.1 gives 11 values, each the double of its decimal (0.3, never 0.30000000000000004)", () => {
    const values = Study.rangeValues(0, 1, 0.1)
    assert.deepStrictEqual(values, [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1])
    assert.strictEqual(Study.rangeCount(0, 1, 0.1), 11)
    assert.isTrue(Object.is(values[3], 0.3))
    assert.notStrictEqual(values[3], 0.1 * 3)
  })

  it("end is included only when reached exactly; negative starts; small exponents", () => {
    assert.deepStrictEqual(Study.rangeValues(0, 1, 0.3), [0, 0.3, 0.6, 0.9])
    assert.deepStrictEqual(Study.rangeValues(-0.5, 0.5, 0.25), [-0.5, -0.25, 0, 0.25, 0.5])
    assert.deepStrictEqual(Study.rangeValues(1e-7, 3e-7, 1e-7), [1e-7, 2e-7, 3e-7])
    assert.deepStrictEqual(Study.rangeValues(2, 2, 1), [2])
    assert.deepStrictEqual(Study.rangeValues(1, 0, 0.5), [])
  })

  it("property: value k is Number of the decimal start + k × step (integers scaled by 10^d)", () => {
    fc.assert(
      fc.property(fc.integer({ min: -1000, max: 1000 }), fc.integer({ min: 1, max: 50 }), fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 4 }), (s, t, n, d) => {
        const scale = 10 ** d
        const start = s / scale
        const step = t / scale
        const end = (s + n * t) / scale
        const values = Study.rangeValues(start, end, step)
        assert.strictEqual(values.length, n + 1)
        values.forEach((v, k) => assert.strictEqual(v, (s + k * t) / scale))
      }),
      { endOnFailure: true }
    )
  })
})

describe("expansion", () => {
  const vs = variables([
    { name: "prompt", type: "prompt", values: { terse: "T", detailed: "D" } },
    { name: "strict", type: "boolean" },
    { name: "t", type: "range", start: 0, end: 1, step: 0.5 }
  ])

  it("odometer order: variables in file order, the last fastest; ids v01.. in that order; count = product", () => {
    const variants = Study.expand(vs)
    assert.strictEqual(variants.length, 12)
    assert.strictEqual(Study.variantCount(vs), 12)
    assert.deepStrictEqual(variants.map((v) => v.id), ["v01", "v02", "v03", "v04", "v05", "v06", "v07", "v08", "v09", "v10", "v11", "v12"])
    assert.deepStrictEqual(variants.slice(0, 4).map((v) => v.assignment), [
      { prompt: "terse", strict: false, t: 0 },
      { prompt: "terse", strict: false, t: 0.5 },
      { prompt: "terse", strict: false, t: 1 },
      { prompt: "terse", strict: true, t: 0 }
    ])
    assert.deepStrictEqual(variants[11]!.assignment, { prompt: "detailed", strict: true, t: 1 })
    variants.forEach((v, i) => assert.deepStrictEqual(Study.variantAt(vs, i), v))
  })

  it("the same variables always expand to the same keys and digests; the baseline is marked", () => {
    const a = Study.expand(vs, { baselineIndex: 4 })
    const b = Study.expand(vs, { baselineIndex: 4 })
    assert.deepStrictEqual(a, b)
    assert.deepStrictEqual(a.filter((v) => v.isBaseline).map((v) => v.id), ["v05"])
    assert.strictEqual(a[0]!.key, "{\"prompt\":\"terse\",\"strict\":false,\"t\":0}")
    assert.match(a[0]!.digest, /^[0-9a-f]{16}$/)
    assert.strictEqual(new Set(a.map((v) => v.digest)).size, 12)
  })

  it("no variables: one variant v01 with the empty assignment; 100 variants: ids padded to 3 digits", () => {
    assert.deepStrictEqual(Study.expand([]).map((v) => [v.id, v.key]), [["v01", "{}"]])
    const many = Study.expand(variables([{ name: "n", type: "range", start: 1, end: 100, step: 1 }]))
    assert.deepStrictEqual([many[0]!.id, many[99]!.id], ["v001", "v100"])
  })

  it("each type: the assignment (value, name or index) and the bound value (value, text, profile, list)", () => {
    const [e, r, b, p, m, s] = variables([
      { name: "e", type: "enum", values: ["a", 2, { k: null }] },
      { name: "r", type: "range", start: 0.1, end: 0.3, step: 0.1 },
      { name: "b", type: "boolean" },
      { name: "p", type: "prompt", values: { short: "Say it.", long: "Say it at length." } },
      { name: "m", type: "model", values: { small: { model: "s-1", params: { temperature: 0 } } } },
      { name: "s", type: "set", values: [["x", "y"], ["x", "z"]] }
    ])
    assert.deepStrictEqual(Study.valuesOf(e!), [{ assignment: "a", value: "a" }, { assignment: 2, value: 2 }, { assignment: { k: null }, value: { k: null } }])
    assert.deepStrictEqual(Study.valuesOf(r!).map((c) => c.value), [0.1, 0.2, 0.3])
    assert.deepStrictEqual(Study.valuesOf(b!).map((c) => c.value), [false, true])
    assert.deepStrictEqual(Study.valuesOf(p!), [{ assignment: "short", value: "Say it." }, { assignment: "long", value: "Say it at length." }])
    assert.deepStrictEqual(Study.valuesOf(m!), [{ assignment: "small", value: { model: "s-1", params: { temperature: 0 } } }])
    assert.deepStrictEqual(Study.valuesOf(s!), [{ assignment: 0, value: ["x", "y"] }, { assignment: 1, value: ["x", "z"] }])
  })

  it("indexOfAssignment: a range's decimal, a set's index or list, names, JSON values; -1 for anything else", () => {
    const [e, r, s, p] = variables([
      { name: "e", type: "enum", values: [{ a: 1, b: 2 }, "x"] },
      { name: "r", type: "range", start: 0, end: 1, step: 0.1 },
      { name: "s", type: "set", values: [["x"], ["y"]] },
      { name: "p", type: "prompt", values: { short: "S" } }
    ])
    assert.strictEqual(Study.indexOfAssignment(r!, 0.3), 3)
    assert.strictEqual(Study.indexOfAssignment(r!, 0.35), -1)
    assert.strictEqual(Study.indexOfAssignment(r!, 1.1), -1)
    assert.strictEqual(Study.indexOfAssignment(s!, 1), 1)
    assert.strictEqual(Study.indexOfAssignment(s!, ["y"]), 1)
    assert.strictEqual(Study.indexOfAssignment(s!, 2), -1)
    assert.strictEqual(Study.indexOfAssignment(p!, "short"), 0)
    assert.strictEqual(Study.indexOfAssignment(p!, "S"), -1)
    assert.strictEqual(Study.indexOfAssignment(e!, { b: 2, a: 1 }), 0)
  })

  it("the Schema refuses a bad name, an empty enum, a step <= 0, an unknown type", () => {
    const bad = (u: unknown) => Either.isLeft(Schema.decodeUnknownEither(Study.Variable)(u))
    assert.isTrue(bad({ name: "1x", type: "boolean" }))
    assert.isTrue(bad({ name: "a.b", type: "boolean" }))
    assert.isTrue(bad({ name: "e", type: "enum", values: [] }))
    assert.isTrue(bad({ name: "r", type: "range", start: 0, end: 1, step: 0 }))
    assert.isTrue(bad({ name: "x", type: "sett", values: [[]] }))
    assert.isFalse(bad({ name: "_ok2", type: "boolean" }))
  })
})

describe("trial ids", () => {
  it("p<version>-<variant>-r<repeat>, parsed back; anything else is not a trial id", () => {
    assert.strictEqual(Study.trialId(1, "v03", 2), "p1-v03-r2")
    assert.deepStrictEqual(Study.parseTrialId("p12-v003-r10"), { version: 12, variantId: "v003", repeat: 10 })
    for (const id of ["p0-v01-r1", "p1-v1-r1", "p1-v01-r0", "p1-v01", "x1-v01-r1", "p1-v01-r1-"]) assert.isUndefined(Study.parseTrialId(id), id)
  })
})

describe("stop conditions and objectives", () => {
  const stop = Schema.decodeUnknownEither(Study.StopCondition)
  const objective = Schema.decodeUnknownEither(Study.Objective)

  it("running defaults to drain; each kind decodes; an unknown op or a bad date is refused", () => {
    assert.deepStrictEqual(Either.getOrThrow(stop({ when: "manual" })), { when: "manual", running: "drain" })
    assert.deepStrictEqual(Either.getOrThrow(stop({ when: "successfulTrials", count: 3, running: "cancel" })), { when: "successfulTrials", count: 3, running: "cancel" })
    assert.isTrue(Either.isRight(stop({ when: "metricThreshold", metric: "accuracy", op: ">=", value: 0.97 })))
    assert.isTrue(Either.isRight(stop({ when: "deadline", at: "2026-12-31T00:00:00Z" })))
    assert.isTrue(Either.isLeft(stop({ when: "metricThreshold", metric: "accuracy", op: "=>", value: 0.97 })))
    assert.isTrue(Either.isLeft(stop({ when: "deadline", at: "next tuesday" })))
    assert.isTrue(Either.isLeft(stop({ when: "successfulTrials", count: 0 })))
  })

  it("direction target needs a target, the others refuse one; weight defaults to 1", () => {
    assert.deepStrictEqual(Either.getOrThrow(objective({ metric: "accuracy", direction: "maximize" })), { metric: "accuracy", direction: "maximize", weight: 1 })
    assert.isTrue(Either.isRight(objective({ metric: "latencyMs", direction: "target", target: 800 })))
    assert.isTrue(Either.isLeft(objective({ metric: "latencyMs", direction: "target" })))
    assert.isTrue(Either.isLeft(objective({ metric: "accuracy", direction: "maximize", target: 1 })))
  })

  it("holds compares as written", () => {
    assert.deepStrictEqual(
      ([">", ">=", "<", "<=", "==", "!="] as const).map((op) => Study.holds(op, 1, 1)),
      [false, true, false, true, true, false]
    )
  })
})

describe("protocol digest", () => {
  const protocol: Study.Protocol = {
    experiment: { document: { a: 1 } },
    variables: [{ name: "x", type: "boolean" }],
    baseline: { x: false },
    repeats: 3,
    budget: { perTrial: { calls: 5 }, total: {} },
    stop: [],
    objectives: []
  }

  it("32 hex, independent of key order, changed by each part, and the changed part is named", () => {
    const d = Study.protocolDigest(protocol)
    assert.match(d, /^[0-9a-f]{32}$/)
    assert.strictEqual(Study.protocolDigest({ ...protocol, budget: { total: {}, perTrial: { calls: 5 } } }), d)
    const changes: Record<string, Study.Protocol> = {
      experiment: { ...protocol, experiment: { document: { a: 2 } } },
      variables: { ...protocol, variables: [{ name: "y", type: "boolean" }] },
      baseline: { ...protocol, baseline: { x: true } },
      repeats: { ...protocol, repeats: 4 },
      budget: { ...protocol, budget: { perTrial: { calls: 6 }, total: {} } },
      stop: { ...protocol, stop: [{ when: "manual", running: "drain" }] },
      objectives: { ...protocol, objectives: [{ metric: "m", direction: "maximize", weight: 1 }] }
    }
    for (const [part, changed] of Object.entries(changes)) {
      assert.notStrictEqual(Study.protocolDigest(changed), d, part)
      assert.deepStrictEqual(Study.changedParts(Study.protocolParts(protocol), Study.protocolParts(changed)), [part])
    }
    assert.strictEqual(Study.protocolParts(protocol)["repeats"], "3")
  })
})
