/**
 * A study trial's `calls` and the export's per-pipeline `calls` are the same quantity (tester16c
 * F5): the model calls sent, a judge's format repair being a second call inside one attempt. A
 * study run against the mock LLM whose first judge answer is malformed; the sum of the trial's
 * pipelines' `calls` in `assay export --rows pipelines` equals the trial's figure. A connection
 * that never reached the provider is a call in neither (fix16x, docs/llm.md): a chat trial
 * behind a proxy that resets its first connections.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as net from "node:net"
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
import { chat, chatClientFactory } from "../../src/tasks/Chat.js"
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

/**
 * A TCP proxy on 127.0.0.1 to `port` that resets its first `refuse` connections before a byte
 * reaches the server (the client sees ECONNRESET: class `connection`); its URL's port.
 */
const resettingProxy = (port: number, refuse: number) =>
  Effect.acquireRelease(
    Effect.async<net.Server>((resume) => {
      let seen = 0
      const server = net.createServer((socket) => {
        socket.on("error", () => socket.destroy())
        if (seen++ < refuse) return void socket.resetAndDestroy()
        const upstream = net.connect(port, "127.0.0.1")
        upstream.on("error", () => socket.destroy())
        socket.pipe(upstream)
        upstream.pipe(socket)
        socket.on("close", () => upstream.destroy())
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  ).pipe(Effect.map((server) => (server.address() as net.AddressInfo).port))

const studyOf = (
  server: MockLlm.MockLlmServer,
  options: { readonly baseUrl?: string; readonly chat?: boolean; readonly model?: string; readonly rows?: ReadonlyArray<Row> } = {}
): Study.StudyInput => {
  const data = options.rows ?? rows
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
        Suite.member(
          t.trialId,
          () =>
            options.chat === true
              ? Pipeline.make("asked", chat<Row>({ template: "is {{answer}} right?" })).map(data, { keyOf: (r) => r.id })
              : template.map(data, { keyOf: (r) => r.id }),
          { definitionDigest: t.trialId, poolAliases: { llm: "j" } }
        )
      ),
      outputRoot: "/study-root",
      layout: "combined",
      pools: [
        Pool.make("j", [
          Resource.make("llm", {
            id: "j",
            capacity: 1,
            options: { baseUrl: options.baseUrl ?? server.endpoints[0]!.baseUrl, apiKey: KEY, model: options.model ?? (options.chat === true ? "small" : "mock-judge") },
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

  it.scopedLive("a 400 after the request was sent is a call in both, beside a judge's format repair: the pipelines' calls add up to the trial's", () =>
    Effect.gen(function*() {
      // the first judge request gets a malformed answer (one repair); the 4th row's prompt is
      // longer than the model's context window ("small": 8192 tokens): the server answers 400
      const profile = yield* MockLlm.decodeProfile({ seed: 3, endpoints: [{ name: "j", latency: { medianMs: 0 }, judge: { invalidFirst: 1 } }] })
      const server = yield* MockLlm.serve({ profile, models: MockLlm.builtinModels }).pipe(Effect.provide(NodeContext.layer))
      const long: Row = { id: "m4", answer: "spam ".repeat(10_000), gold: "spam" }
      const study = studyOf(server, { model: "small", rows: [...rows, long] })
      const env = Layer.provideMerge(
        Layer.mergeAll(Runner.layer({ handleSignals: false, concurrency: 1, maxAdmitted: 1 }), fakeCatalog("calls"), StudyCatalog.layerMemory),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer(study.suiteFor(1).pools!))
      )
      yield* Effect.gen(function*() {
        const report = yield* Study.run(study)
        const trial = report.trials[0]!
        const log = yield* server.log
        // 3 judge attempts answered, one of them repaired (4 requests), and one refused with a 400
        assert.strictEqual(log.length, 5)
        assert.strictEqual(log.filter((e) => e.status === 400).length, 1)
        assert.strictEqual(trial.usage.calls, 5)
        const store = yield* Store
        const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind: "attempts" })))
        assert.deepStrictEqual(attempts.filter((a) => a.outcome !== "succeeded").map((a) => a.errorClass), ["fatal"])
        const exported = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind: "pipelines" })))
          .filter((r) => memberDigestOf(r.pipelineId as never) === memberDigest("calls", trial.trialId))
        assert.strictEqual(exported.length, 4)
        assert.strictEqual(exported.reduce((n, r) => n + (r.calls as number), 0), trial.usage.calls)
        // the store's summary says the same
        const stats = yield* store.stats()
        assert.strictEqual(stats.accounting?.calls, 5)
      }).pipe(Effect.provide(env))
    }))

  it.scopedLive("a connection that never reached the provider is a call in neither: the pipelines' calls add up to the trial's", () =>
    Effect.gen(function*() {
      const profile = yield* MockLlm.decodeProfile({ seed: 3, endpoints: [{ name: "j", latency: { medianMs: 0 } }] })
      const server = yield* MockLlm.serve({ profile, models: MockLlm.builtinModels }).pipe(Effect.provide(NodeContext.layer))
      const upstream = new URL(server.endpoints[0]!.baseUrl)
      // the first 2 connections are reset before the server sees a byte: the first pipeline's
      // first 2 attempts fail (class connection) and its third is answered, as are the others
      const port = yield* resettingProxy(Number(upstream.port), 2)
      const study = studyOf(server, { chat: true, baseUrl: `http://127.0.0.1:${port}${upstream.pathname}` })
      const env = Layer.provideMerge(
        Layer.mergeAll(Runner.layer({ handleSignals: false, concurrency: 1, maxAdmitted: 1 }), fakeCatalog("calls"), StudyCatalog.layerMemory),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer(study.suiteFor(1).pools!))
      )
      yield* Effect.gen(function*() {
        const report = yield* Study.run(study)
        const trial = report.trials[0]!
        assert.strictEqual((yield* server.log).length, 3, "3 requests reached the server")
        const store = yield* Store
        const attempts = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind: "attempts" })))
        assert.strictEqual(attempts.filter((a) => a.errorClass === "connection").length, 2, "2 attempts never reached it")
        const exported = Chunk.toReadonlyArray(yield* Stream.runCollect(Export.iterRows(store, { kind: "pipelines" })))
          .filter((r) => memberDigestOf(r.pipelineId as never) === memberDigest("calls", trial.trialId))
        assert.strictEqual(exported.length, 3)
        assert.strictEqual(exported.reduce((n, r) => n + (r.calls as number), 0), 3)
        assert.strictEqual(trial.usage.calls, 3, "the trial counts the calls sent, not the 2 reset connections")
      }).pipe(Effect.provide(env))
    }))
})
