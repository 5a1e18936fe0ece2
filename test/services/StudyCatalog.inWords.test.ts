/**
 * `StudyCatalog.inWords`: a changed protocol part said in words, not as digests (issue 16's
 * trial: `repeats: 3f2a… -> 9c41…` told the reader nothing).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as StudyConfig from "../../src/config/Study.js"
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

describe("StudyCatalog.inWords: a judge's rubric (tester16f F5)", () => {
  const rubric = (over: Record<string, unknown> = {}) => ({
    id: "label-answer",
    version: 1,
    criteria: [{ name: "correct", description: "The same label as the reference.", scale: { min: 0, max: 1 } }],
    ...over
  })
  const experiment = (judgeRubric: Record<string, unknown>, template = "Spam? {{text}}") => ({
    pools: { llm: { resources: [{ id: "a", capacity: 2, options: { baseUrl: "http://127.0.0.1:9/v1", model: "base" } }] } },
    pipeline: {
      name: "judged",
      tasks: [
        { use: "chat", name: "answer", options: { model: { $var: "model" }, template, maxTokens: 5 } },
        { use: "judge", name: "grade", options: { model: "judge-1", rubric: judgeRubric, candidates: { answer: "content" }, metric: "quality" } }
      ]
    },
    source: { range: { n: 3 } }
  })
  const study = {
    study: { id: "judged", question: "Which?", type: "compare" },
    protocol: { experiment: "experiment.json" },
    output: { root: "out" },
    variables: [{ name: "model", type: "enum", values: ["small", "medium"] }],
    baseline: { model: "small" },
    objectives: [{ metric: "quality", direction: "maximize" }]
  }
  /** The description and parts of the study loaded with this experiment. */
  const loaded = (exp: unknown) =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-rubric-"))
      fs.writeFileSync(path.join(dir, "experiment.json"), JSON.stringify(exp))
      fs.writeFileSync(path.join(dir, "study.json"), JSON.stringify(study))
      const s = yield* StudyConfig.load(path.join(dir, "study.json"), { env: {} }).pipe(Effect.provide(NodeContext.layer))
      return { parts: s.protocolParts, description: s.describe() }
    })
  const change = (a: { parts: Record<string, string>; description: Json }, b: { parts: Record<string, string>; description: Json }) =>
    inWords(changedParts(a.parts, b.parts), a.description, b.description)

  it.effect("a new rubric version is named with its judge; criteria or scale changed without a version bump are named too", () =>
    Effect.gen(function*() {
      const v1 = yield* loaded(experiment(rubric()))
      assert.deepStrictEqual(change(v1, yield* loaded(experiment(rubric({ version: 2 })))), ["experiment: rubric of judge 'grade': version 1 -> 2"])
      assert.deepStrictEqual(change(v1, yield* loaded(experiment(rubric({ version: "2b" })))), ["experiment: rubric of judge 'grade': version 1 -> '2b'"])
      // the scale, a new criterion, the instructions: named, and the version that did not move
      const edited = rubric({
        criteria: [{ name: "correct", description: "The same label as the reference.", scale: { min: 1, max: 5 } }, { name: "clear", scale: { min: 1, max: 5 } }],
        instructions: "Be strict."
      })
      assert.deepStrictEqual(change(v1, yield* loaded(experiment(edited))), [
        "experiment: rubric of judge 'grade': criterion 'correct': scale 0..1 -> 1..5; criterion 'clear' added (scale 1..5); instructions changed, version 1 unchanged"
      ])
      // with a version bump, what changed in it too
      assert.deepStrictEqual(change(v1, yield* loaded(experiment({ ...edited, version: 2 }))), [
        "experiment: rubric of judge 'grade': version 1 -> 2 (criterion 'correct': scale 0..1 -> 1..5; criterion 'clear' added (scale 1..5); instructions changed)"
      ])
    }))

  it.effect("another change of the experiment beside the rubric is said too; without one, only the digests are", () =>
    Effect.gen(function*() {
      const v1 = yield* loaded(experiment(rubric()))
      const both = change(v1, yield* loaded(experiment(rubric({ version: 2 }), "Spam or ham? {{text}}")))
      assert.strictEqual(both.length, 1)
      assert.match(both[0]!, /^experiment: rubric of judge 'grade': version 1 -> 2; and the rest of the base experiment's document or its tasks' code changed \([0-9a-f]{12} -> [0-9a-f]{12}\)$/)
      const other = change(v1, yield* loaded(experiment(rubric(), "Spam or ham? {{text}}")))
      assert.match(other[0]!, /^experiment: the base experiment's document or its tasks' code changed \([0-9a-f]{12} -> [0-9a-f]{12}\)$/)
      // a version stored before the judges were recorded: the digests, as before
      const { judges: _j, ...old } = v1.description as Record<string, Json>
      const stored = change({ ...v1, description: old }, yield* loaded(experiment(rubric({ version: 2 }))))
      assert.match(stored[0]!, /^experiment: the base experiment's document or its tasks' code changed/)
    }))
})
