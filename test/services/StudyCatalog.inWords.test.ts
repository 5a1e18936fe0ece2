/**
 * `StudyCatalog.inWords`: a changed protocol part said in words, not as digests (issue 16's
 * trial: `repeats: 3f2a… -> 9c41…` told the reader nothing).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as StudyConfig from "../../src/config/Study.js"
import type { Json } from "../../src/domain/Json.js"
import * as Study from "../../src/domain/Study.js"
import * as SuiteStore from "../../src/layers/SuiteStore.js"
import { changedParts, inWords, StudyCatalog } from "../../src/services/StudyCatalog.js"

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
      assert.deepStrictEqual(both, ["experiment: rubric of judge 'grade': version 1 -> 2; and pipeline.tasks[0].options.template \"Spam? {{text}}\" -> \"Spam or ham? {{text}}\""])
      const other = change(v1, yield* loaded(experiment(rubric(), "Spam or ham? {{text}}")))
      assert.deepStrictEqual(other, ["experiment: pipeline.tasks[0].options.template \"Spam? {{text}}\" -> \"Spam or ham? {{text}}\""])
      // a version stored before the fields were recorded (tester16g F11): the digests, as before
      const { experimentFields: _f, ...noFields } = v1.description as Record<string, Json>
      const before16 = change({ ...v1, description: noFields }, yield* loaded(experiment(rubric({ version: 2 }), "Spam or ham? {{text}}")))
      assert.match(before16[0]!, /^experiment: rubric of judge 'grade': version 1 -> 2; and the rest of the base experiment's document or its tasks' code changed \([0-9a-f]{12} -> [0-9a-f]{12}\)$/)
      // a version stored before the judges were recorded: the digests, as before
      const { judges: _j, experimentFields: _e, ...old } = v1.description as Record<string, Json>
      const stored = change({ ...v1, description: old }, yield* loaded(experiment(rubric({ version: 2 }))))
      assert.match(stored[0]!, /^experiment: the base experiment's document or its tasks' code changed/)
    }))
})

describe("StudyCatalog.inWords: the changed fields of the base experiment (tester16g F11)", () => {
  const SECRET = "sk-live-F11-do-not-store-4242"
  const experiment = (over: { temperature?: number; template?: string; apiKey?: string; maxTokens?: number; extra?: Record<string, unknown> } = {}) => ({
    pools: {
      llm: {
        resources: [{
          id: "a",
          capacity: 2,
          options: { baseUrl: "http://127.0.0.1:9/v1", model: "base", apiKey: over.apiKey ?? SECRET, headers: { Authorization: `Bearer ${SECRET}`, "X-Title": "f11" } }
        }]
      }
    },
    pipeline: {
      name: "chatted",
      tasks: [
        { use: "chat", name: "answer", options: { model: { $var: "model" }, template: over.template ?? "Spam? {{text}}", maxTokens: over.maxTokens ?? 5, temperature: over.temperature ?? 0, ...over.extra } }
      ]
    },
    source: { range: { n: 3 } }
  })
  const study = {
    study: { id: "fields", question: "Which?", type: "compare" },
    protocol: { experiment: "experiment.json" },
    output: { root: "out" },
    variables: [{ name: "model", type: "enum", values: ["small", "medium"] }],
    baseline: { model: "small" },
    objectives: [{ metric: "accuracy", direction: "maximize" }]
  }
  const loaded = (exp: unknown) =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-fields-"))
      fs.writeFileSync(path.join(dir, "experiment.json"), JSON.stringify(exp))
      fs.writeFileSync(path.join(dir, "study.json"), JSON.stringify(study))
      const s = yield* StudyConfig.load(path.join(dir, "study.json"), { env: {} }).pipe(Effect.provide(NodeContext.layer))
      return { parts: s.protocolParts, description: s.describe(), digest: s.protocolDigest, previous: s.previousProtocols }
    })
  const change = (a: { parts: Record<string, string>; description: Json }, b: { parts: Record<string, string>; description: Json }) =>
    inWords(changedParts(a.parts, b.parts), a.description, b.description)

  it.effect("a changed option is named by its path with the two values; many changes: the first 3 and \"and N more\"", () =>
    Effect.gen(function*() {
      const v1 = yield* loaded(experiment())
      assert.deepStrictEqual(change(v1, yield* loaded(experiment({ temperature: 0.5 }))), ["experiment: pipeline.tasks[0].options.temperature 0 -> 0.5"])
      const many = change(v1, yield* loaded(experiment({ temperature: 0.5, maxTokens: 9, template: "Spam or ham? {{text}}", extra: { system: "Be brief.", requestTimeout: "5 seconds" } })))
      assert.deepStrictEqual(many, [
        "experiment: pipeline.tasks[0].options.template \"Spam? {{text}}\" -> \"Spam or ham? {{text}}\", pipeline.tasks[0].options.maxTokens 5 -> 9, pipeline.tasks[0].options.temperature 0 -> 0.5, and 2 more"
      ])
      // a long text: its length, never its words
      const long = "Classify the following message as spam or ham, answering with one word only: {{text}}"
      const longer = change(yield* loaded(experiment({ template: long })), yield* loaded(experiment({ template: `${long} Be brief.` })))
      assert.deepStrictEqual(longer, [`experiment: pipeline.tasks[0].options.template: text changed (${long.length} -> ${long.length + 10} characters)`])
      // a version frozen before the fields were recorded keeps the digests
      const { experimentFields: _f, ...old } = v1.description as Record<string, Json>
      assert.match(change({ ...v1, description: old }, yield* loaded(experiment({ temperature: 0.5 })))[0]!, /^experiment: the base experiment's document or its tasks' code changed \([0-9a-f]{12} -> [0-9a-f]{12}\)$/)
    }))

  it.effect("a secret is never in the description nor in the store: a changed key is said as changed, without its value", () =>
    Effect.gen(function*() {
      const v1 = yield* loaded(experiment())
      const text = JSON.stringify(v1.description)
      assert.notInclude(text, SECRET)
      assert.notInclude(text, "F11-do-not-store")
      const fields = ((v1.description as any).experimentFields.document) as Record<string, Json>
      assert.deepStrictEqual(Object.keys((fields["pools.llm.resources[0].options.apiKey"] as any)), ["secret"])
      assert.deepStrictEqual(Object.keys((fields["pools.llm.resources[0].options.headers.Authorization"] as any)), ["secret"])
      assert.strictEqual(fields["pools.llm.resources[0].options.headers.X-Title"], "f11")
      assert.strictEqual(fields["pools.llm.resources[0].options.baseUrl"], "http://127.0.0.1:9/v1")
      // not even a digest of it: the same marker whatever the value
      assert.deepStrictEqual(fields["pools.llm.resources[0].options.apiKey"], { secret: "not stored" })
      const rotated = change(v1, yield* loaded(experiment({ apiKey: "sk-live-other" })))
      assert.deepStrictEqual(rotated, ["experiment: a secret value changed (secret values are not stored, so which one is not said)"])
      assert.notInclude(rotated[0]!, "sk-live")
      // an inline key replaced by a reference is named
      const referenced = change(v1, yield* loaded(experiment({ apiKey: "${OPENAI_API_KEY}" })))
      assert.deepStrictEqual(referenced, ["experiment: pools.llm.resources[0].options.apiKey (secret, not stored) -> \"${OPENAI_API_KEY}\""])
      // a `${VAR}` reference is kept as written: the reference, never a value
      const env = yield* loaded(experiment({ apiKey: "${OPENAI_API_KEY}", extra: { system: "${SYSTEM_PROMPT}" } }))
      assert.strictEqual(((env.description as any).experimentFields.document)["pipeline.tasks[0].options.system"], "${SYSTEM_PROMPT}")
      // frozen in a store (a suite root's SQLite files): no byte of the secret anywhere
      const root = fs.mkdtempSync(path.join(os.tmpdir(), "assay-fields-store-"))
      yield* Effect.gen(function*() {
        const catalog = yield* StudyCatalog
        yield* catalog.freeze({ studyId: "fields", question: "Which?", type: "compare", protocolDigest: v1.digest, protocolParts: v1.parts, protocol: v1.description, newVersion: false }, 1)
      }).pipe(Effect.provide(SuiteStore.layer({ root, suiteId: "fields", layout: "combined", members: [] }).pipe(Layer.provideMerge(NodeContext.layer))), Effect.scoped)
      const files = fs.readdirSync(root, { recursive: true }).map(String).filter((f) => fs.statSync(path.join(root, f)).isFile())
      assert.isAbove(files.length, 0)
      for (const f of files) assert.notInclude(fs.readFileSync(path.join(root, f)).toString("latin1"), "F11-do-not-store", f)
    }))

  it.effect("a version frozen before the fields were stored is resumed as it is: the same digest, no new version", () =>
    Effect.gen(function*() {
      const now = yield* loaded(experiment())
      // the version as an earlier build froze it: its description without experimentFields
      const { experimentFields: _f, ...old } = now.description as Record<string, Json>
      const root = fs.mkdtempSync(path.join(os.tmpdir(), "assay-fields-resume-"))
      const [first, again, versions] = yield* Effect.gen(function*() {
        const catalog = yield* StudyCatalog
        const input = { studyId: "fields", question: "Which?", type: "compare", protocolDigest: now.digest, protocolParts: now.parts, previousProtocols: now.previous, newVersion: false }
        const first = yield* catalog.freeze({ ...input, protocol: old }, 1)
        const again = yield* catalog.freeze({ ...input, protocol: now.description }, 2)
        return [first, again, yield* catalog.versions("fields")] as const
      }).pipe(Effect.provide(SuiteStore.layer({ root, suiteId: "fields", layout: "combined", members: [] }).pipe(Layer.provideMerge(NodeContext.layer))), Effect.scoped)
      assert.deepStrictEqual(first, { version: 1, created: true })
      assert.deepStrictEqual(again, { version: 1, created: false })
      assert.strictEqual(versions.length, 1)
      assert.strictEqual(versions[0]!.protocolDigest, now.digest)
      // the description adds nothing to the digest: the digest of the protocol alone
      assert.notInclude(JSON.stringify(now.parts), "experimentFields")
    }))
})
