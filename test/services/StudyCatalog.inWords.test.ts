/**
 * `StudyCatalog.inWords`: a changed protocol part said in words, not as digests (issue 16's
 * trial: `repeats: 3f2a… -> 9c41…` told the reader nothing).
 */
import { assert, describe, it } from "@effect/vitest"
import type { Json } from "../../src/domain/Json.js"
import * as Study from "../../src/domain/Study.js"
import { changedParts, inWords } from "../../src/services/StudyCatalog.js"

const protocolOf = (over: Record<string, Json>): Record<string, Json> => ({
  variables: [
    { name: "prompt", type: "prompt", values: { terse: "Spam? {{text}}", long: "Is it spam? {{text}}" } },
    { name: "temperature", type: "range", start: 0, end: 1, step: 0.5 }
  ],
  baseline: { id: "v01", assignment: { prompt: "terse", temperature: 0 } },
  repeats: 2,
  budget: { perTrial: { calls: 100 }, total: {} },
  stop: [{ when: "allTrialsTerminal", running: "drain" }],
  objectives: [{ metric: "accuracy", direction: "maximize", weight: 1 }],
  ...over
})

const partsOf = (p: Record<string, Json>) =>
  Study.protocolParts({
    experiment: { document: {}, code: [] },
    variables: p["variables"]!,
    baseline: (p["baseline"] as Record<string, Json>)["assignment"]!,
    repeats: p["repeats"]!,
    budget: p["budget"]!,
    stop: p["stop"]!,
    objectives: p["objectives"]!
  } as Study.Protocol)

describe("StudyCatalog.inWords", () => {
  it("repeats, baseline, variables, budget and stop changes are said in words; no part is left as two digests", () => {
    const before = protocolOf({})
    const after = protocolOf({
      variables: [
        { name: "prompt", type: "prompt", values: { terse: "Spam? {{text}}", long: "Is it spam? {{text}}" } },
        { name: "temperature", type: "range", start: 0, end: 1, step: 0.25 },
        { name: "model", type: "model", values: { small: { model: "s" } } }
      ],
      baseline: { id: "v02", assignment: { prompt: "long", temperature: 0, model: "small" } },
      repeats: 3,
      budget: { perTrial: { calls: 200 }, total: {} },
      stop: [{ when: "allTrialsTerminal", running: "cancel" }]
    })
    const said = inWords(changedParts(partsOf(before), partsOf(after)), before, after)
    assert.deepStrictEqual(said, [
      "baseline: prompt=terse, temperature=0 -> prompt=long, temperature=0, model=small",
      "budget: {\"perTrial\":{\"calls\":100},\"total\":{}} -> {\"perTrial\":{\"calls\":200},\"total\":{}}",
      "repeats: 2 -> 3",
      "stop: [{\"running\":\"drain\",\"when\":\"allTrialsTerminal\"}] -> [{\"running\":\"cancel\",\"when\":\"allTrialsTerminal\"}]",
      "variables: temperature: range 0..1 step 0.5 -> range 0..1 step 0.25; model added (model {small})"
    ])
    for (const s of said) assert.notMatch(s, /[0-9a-f]{16}/, s)
  })
})

describe("StudyCatalog.inWords: a changed prompt text (tester16c F7)", () => {
  it("says which prompt's text changed, with the digests of the two texts, never `prompt {a, b} -> prompt {a, b}`", () => {
    const before = protocolOf({})
    const after = protocolOf({
      variables: [
        { name: "prompt", type: "prompt", values: { terse: "Spam or ham? {{text}}", long: "Is it spam? {{text}}" } },
        { name: "temperature", type: "range", start: 0, end: 1, step: 0.5 }
      ]
    })
    const said = inWords(changedParts(partsOf(before), partsOf(after)), before, after)
    assert.deepStrictEqual(said.length, 1)
    assert.match(said[0]!, /^variables: prompt: the text of 'terse' changed \(digest [0-9a-f]{8} -> [0-9a-f]{8}\)$/)
    assert.notInclude(said[0]!, "prompt {terse, long} -> prompt {terse, long}")
  })
})
