/**
 * A study trial's `calls` and the export's per-pipeline `calls` are the same quantity (tester16c
 * F5): the model calls sent, a judge's format repair being a second call inside one attempt. A
 * study run against the mock LLM whose first judge answer is malformed; the sum of the trial's
 * pipelines' `calls` in `assay export --rows pipelines` equals the trial's figure.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Stream } from "effect"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import { memberDigest, memberDigestOf } from "../../src/domain/Suite.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Export from "../../src/services/internal/export.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import * as Study from "../../src/services/Study.js"
import * as StudyCatalog from "../../src/services/StudyCatalog.js"
import * as Suite from "../../src/services/Suite.js"
import { chatClientFactory } from "../../src/tasks/Chat.js"
import { judge, type RubricInput } from "../../src/tasks/Judge.js"
import { fakeCatalog } from "./suiteFixture.js"

const KEY = "sk-study-calls-0a1b2c3d"

const rubric: RubricInput = {
  id: "label-check",
  version: 1,
  criteria: [{ name: "correct", description: "states the right label", scale: { min: 0, max: 1 } }]
}

interface Row {
  readonly id: string
  readonly answer: string
  readonly gold: string
}

const rows: ReadonlyArray<Row> = [
  { id: "m1", answer: "spam", gold: "spam" },
  { id: "m2", answer: "ham", gold: "spam" },
  { id: "m3", answer: "ham", gold: "ham" }
]

const template = Pipeline.make("judged", judge<Row>({ rubric, candidates: { answer: "answer" }, context: { reference: "gold" } }))

const variant: Study.StudyVariant = { id: "v01", assignment: {}, key: "only", digest: "d1", isBaseline: true }

const studyOf = (server: MockLlm.MockLlmServer): Study.StudyInput => {
  const trialsFor = (version: number): ReadonlyArray<Study.StudyTrial> => [{ trialId: `p${version}-v01-r1`, variant, repeat: 1 }]
  const parts = { experiment: "judged", repeats: "1" }
  return {
    id: "calls",
    question: "what does the judge cost?",
    type: "compare",
    objectives: [{ metric: "calls", direction: "minimize" }],
    stop: [{ when: "allTrialsTerminal" }],
    protocolDigest: JSON.stringify(parts),
    protocolParts: parts,
    describe: (): Json => ({ parts }),
    trialsFor,
    suiteFor: (version) => ({
      _tag: "Suite",
      id: "calls",
      experiments: trialsFor(version).map((t) =>
        Suite.member(t.trialId, () => template.map(rows, { keyOf: (r) => r.id }), { definitionDigest: t.trialId, poolAliases: { llm: "j" } })
      ),
      outputRoot: "/study-root",
      layout: "combined",
      pools: [
        Pool.make("j", [
          Resource.make("llm", {
            id: "j",
            capacity: 1,
            options: { baseUrl: server.endpoints[0]!.baseUrl, apiKey: KEY, model: "mock-judge" },
            factory: chatClientFactory()
          })
        ])
      ]
    })
  }
}

describe("a study trial's calls and the export's per-pipeline calls", () => {
  it.scopedLive("a judge's format repair is a second call in both: the pipelines' calls add up to the trial's", () =>
    Effect.gen(function*() {
      // the first judge request gets a malformed answer: its attempt asks again (one repair)
      const profile = yield* MockLlm.decodeProfile({ seed: 3, endpoints: [{ name: "j", latency: { medianMs: 0 }, judge: { invalidFirst: 1 } }] })
      const server = yield* MockLlm.serve({ profile, models: MockLlm.builtinModels }).pipe(Effect.provide(NodeContext.layer))
      const study = studyOf(server)
      const env = Layer.provideMerge(
        Layer.mergeAll(Runner.layer({ handleSignals: false, concurrency: 1, maxAdmitted: 1 }), fakeCatalog("calls"), StudyCatalog.layerMemory),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer(study.suiteFor(1).pools!))
      )
      yield* Effect.gen(function*() {
        const report = yield* Study.run(study)
        const trial = report.trials[0]!
        assert.strictEqual(trial.status, "succeeded", trial.reason ?? "")
        // 3 judge attempts, one of which made a repair request: 4 calls sent (the server saw 4)
        assert.strictEqual((yield* server.log).length, 4)
        assert.strictEqual(trial.usage.calls, 4)
        const store = yield* Store
        const exported = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind: "pipelines" })))
          .filter((r) => memberDigestOf(r.pipelineId as never) === memberDigest("calls", trial.trialId))
        assert.strictEqual(exported.length, 3)
        assert.strictEqual(exported.reduce((n, r) => n + (r.calls as number), 0), trial.usage.calls)
        // the repaired pipeline: one attempt, two calls
        const repaired = exported.filter((r) => r.calls === 2)
        assert.strictEqual(repaired.length, 1)
        assert.strictEqual(repaired[0]!.attemptsTotal, 1)
      }).pipe(Effect.provide(env))
    }))
})
