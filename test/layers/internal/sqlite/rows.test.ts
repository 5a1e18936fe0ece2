/**
 * The SQLite driver's hand-written row mappers (`internal/sqlite/rows.ts`, kept for speed: they
 * build records with `trusted`, no Schema decode) round-trip against the record Schemas of
 * `domain/Records.ts`: every record written through the store and read back (1) decodes again
 * from its encoded form with its Schema (no field outside its schema: a number read as a
 * string, a missing field, a JSON column left as text) and (2) encodes to exactly what was
 * written. Edge values: nulls, unicode, empty and nested JSON, fractional and 2^53 − 1 numbers.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Option, Schema, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import {
  ArtifactRecord,
  AttemptRecord,
  EventRecord,
  MetricRecord,
  PipelineRecord,
  ResourceRecord,
  RunRecord,
  TaskRecord
} from "../../../../src/domain/Records.js"
import * as SqliteStore from "../../../../src/layers/SqliteStore.js"
import { type NewArtifact, Store } from "../../../../src/services/Store.js"
import { pid, rid } from "../../../support/ids.js"

const BIG = Number.MAX_SAFE_INTEGER

/** (1) the record decodes again from its encoded form; (2) it encodes as `expected` does. */
const roundTrips = <A, I>(schema: Schema.Schema<A, I>, got: A, expected: A) => {
  const encoded = Schema.encodeSync(schema)(got)
  Schema.decodeUnknownSync(schema, { onExcessProperty: "error" })(encoded)
  assert.deepStrictEqual(encoded, Schema.encodeSync(schema)(expected))
}

const pipelines = [
  new PipelineRecord({
    pipelineId: pid("p-full"), key: "row-1#2", name: "naïve — 評価", state: "failed", nTasksDone: 2, nTasksTotal: 3,
    specDigest: "spec", seedDigest: "seed", tags: { a: "1", "ü": "ß", empty: "" }, attemptsTotal: BIG, runId: rid("r1"),
    createdAt: 1.5, updatedAt: BIG, startedAt: 2, endedAt: 3.25, failedTask: "t", errorType: "E", errorMessage: "m\n\"q\"",
    errorClass: "upstream", repeat: 2
  }),
  new PipelineRecord({
    pipelineId: pid("p-nulls"), key: null, name: "", state: "pending", nTasksDone: 0, nTasksTotal: 0, specDigest: "s",
    seedDigest: "d", tags: {}, attemptsTotal: 0, runId: rid("r1"), createdAt: 0, updatedAt: 0, startedAt: null, endedAt: null,
    failedTask: null, errorType: null, errorMessage: null, errorClass: null, repeat: null
  })
]

const tasks = [
  new TaskRecord({
    taskRunId: "p-full:0", pipelineId: pid("p-full"), runId: rid("r1"), seq: 0, taskName: "t", state: "failed", attemptsUsed: 3,
    startedAt: 1, endedAt: 2.5, durationMs: 1.5, errorType: "E", errorMessage: "ü", errorClass: "c", leaseIds: ["l1", "l2"]
  }),
  new TaskRecord({
    taskRunId: "p-nulls:0", pipelineId: pid("p-nulls"), runId: rid("r1"), seq: 0, taskName: "t", state: "running", attemptsUsed: 0,
    startedAt: BIG, endedAt: null, durationMs: null, errorType: null, errorMessage: null, errorClass: null, leaseIds: []
  })
]

const attempts = [
  {
    pipelineId: pid("p-full"), runId: rid("r1"), taskRunId: "p-full:0", taskName: "t", seq: 0, attemptNo: 1, outcome: "failed" as const,
    errorClass: "c", errorType: "E", errorMessage: "m", decision: { retry: true, delayMs: 1000, nested: [1, { x: null }] },
    leaseIds: ["l1"], startedAt: 1, endedAt: 2, durationMs: 1
  },
  {
    pipelineId: pid("p-nulls"), runId: rid("r1"), taskRunId: "p-nulls:0", taskName: "t", seq: 0, attemptNo: 2, outcome: "succeeded" as const,
    errorClass: null, errorType: null, errorMessage: null, decision: null, leaseIds: [], startedAt: 0.5, endedAt: BIG, durationMs: 0
  }
]

const events = [
  { kind: "k", pipelineId: pid("p-full"), runId: rid("r1"), data: { a: [1, "ü", true, null], b: {} }, ts: 1.25 },
  { kind: "run.note", pipelineId: null, runId: null, data: null, ts: BIG }
]

const artifact = (seq: number, isFinal: boolean, taskName: string | null): NewArtifact => ({
  pipelineId: pid("p-full"), runId: rid("r1"), seq, taskName, typeName: "Json", codec: "json", digest: `d${seq}`,
  payload: new TextEncoder().encode(JSON.stringify({ seq })), isFinal, createdAt: 10 + seq
})

const storeLayer = () =>
  SqliteStore.layer({ filename: nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-rows-")), "rows.db") })

describe("SQLite row mappers round-trip against the record Schemas", () => {
  it.scoped("pipelines, tasks, attempts, events, artifacts, runs, metrics, resources", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const run = yield* store.openRun({
        runId: rid("r1"), label: "ü", config: { nested: { a: [1, 2] } }, startedAt: 1.5, notes: null, meta: { k: "v", n: 1 }
      })
      roundTrips(RunRecord, run, new RunRecord({
        runId: rid("r1"), label: "ü", status: "running", config: { nested: { a: [1, 2] } }, startedAt: 1.5, heartbeatAt: 1.5,
        endedAt: null, stopReason: null, notes: null, meta: { k: "v", n: 1 }
      }))
      yield* store.admit(pipelines)
      for (const p of pipelines) roundTrips(PipelineRecord, Option.getOrThrow(yield* store.getPipeline(p.pipelineId)), p)
      const page = yield* store.pipelinesPage({ limit: 10 })
      for (const p of page.pipelines) roundTrips(PipelineRecord, p, pipelines.find((x) => x.pipelineId === p.pipelineId)!)

      for (const t of tasks) yield* store.putTask(t)
      const readTasks = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamTasks()))
      assert.strictEqual(readTasks.length, tasks.length)
      for (const t of readTasks) roundTrips(TaskRecord, t, tasks.find((x) => x.taskRunId === t.taskRunId)!)

      for (const a of attempts) yield* store.recordAttempt(a)
      for (const e of events) yield* store.emitEvent(e)
      const readAttempts = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamAttempts()))
      readAttempts.forEach((a, i) => roundTrips(AttemptRecord, a, new AttemptRecord({ ...attempts[i]!, attemptId: a.attemptId })))
      const readEvents = yield* store.events()
      readEvents.forEach((e, i) => roundTrips(EventRecord, e, new EventRecord({ ...events[i]!, eventId: e.eventId })))

      const seed = yield* store.putArtifact(artifact(-1, false, null))
      yield* store.checkpoint({ pipelineId: pid("p-full"), artifact: artifact(0, true, "t") })
      const listed = yield* store.listArtifacts(pid("p-full"))
      assert.deepStrictEqual(listed.map((a) => a.seq), [-1, 0])
      const expectedArtifact = (a: NewArtifact, artifactId: number) =>
        new ArtifactRecord({
          artifactId, pipelineId: a.pipelineId, runId: a.runId, seq: a.seq, taskName: a.taskName, typeName: a.typeName,
          codec: a.codec, digest: a.digest, size: a.payload.byteLength, storage: "inline", blobRef: null, isFinal: a.isFinal,
          available: true, createdAt: a.createdAt
        })
      roundTrips(ArtifactRecord, seed, expectedArtifact(artifact(-1, false, null), seed.artifactId))
      roundTrips(ArtifactRecord, listed[0]!, expectedArtifact(artifact(-1, false, null), seed.artifactId))
      roundTrips(ArtifactRecord, listed[1]!, expectedArtifact(artifact(0, true, "t"), listed[1]!.artifactId))
      // the metadata-only mapper of bundle reads (`toArtifactValues`) agrees with `toArtifact`
      const bundles = yield* store.loadBundles([pid("p-full")], { payloads: "none", payloadBytes: 1 << 20 })
      const bundled = bundles.get(pid("p-full"))!.artifacts.map((l) => l.artifact)
      bundled.forEach((a, i) => roundTrips(ArtifactRecord, a, listed[i]!))
      const loaded = Option.getOrThrow(yield* store.getArtifact(pid("p-full"), 0))
      roundTrips(ArtifactRecord, loaded.artifact, listed[1]!)

      yield* store.reportMetric({ runId: rid("r1"), pipelineId: null, name: "acc", value: 0.875, display: "percent", updatedAt: 5 })
      yield* store.reportMetric({ runId: rid("r1"), pipelineId: pid("p-full"), name: "note", value: { x: ["ü"] }, label: "L", updatedAt: BIG })
      const metrics = yield* store.metrics({ runId: rid("r1") })
      roundTrips(MetricRecord, metrics[0]!, new MetricRecord({
        runId: rid("r1"), pipelineId: null, name: "acc", value: 0.875, label: null, display: "percent", updatedAt: 5
      }))
      roundTrips(MetricRecord, metrics[1]!, new MetricRecord({
        runId: rid("r1"), pipelineId: pid("p-full"), name: "note", value: { x: ["ü"] }, label: "L", display: "text", updatedAt: BIG
      }))

      yield* store.putResource({ pool: "llm", resourceId: "k1", kind: "llm", spec: { model: "m" }, health: null, updatedAt: 3 })
      const [resource] = yield* store.resources
      roundTrips(ResourceRecord, resource!, new ResourceRecord({
        pool: "llm", resourceId: "k1", kind: "llm", spec: { model: "m" }, health: null, updatedAt: 3
      }))

      yield* store.finishRun(rid("r1"), { status: "failed", endedAt: BIG, stopReason: "x" })
      roundTrips(RunRecord, Option.getOrThrow(yield* store.getRun(rid("r1"))), new RunRecord({
        runId: rid("r1"), label: "ü", status: "failed", config: { nested: { a: [1, 2] } }, startedAt: 1.5, heartbeatAt: 1.5,
        endedAt: BIG, stopReason: "x", notes: null, meta: { k: "v", n: 1 }
      }))
    }).pipe(Effect.provide(Layer.fresh(storeLayer()))))
})
