/**
 * Test fixture: a real SQLite store written through the Store API (runs, pipelines with equal
 * createdAt across a page boundary, tasks, JSON artifacts, a failed pipeline, attempts with
 * lease ids, events, metrics, resources).
 */
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { PipelineId, RunId } from "../../src/domain/Ids.js"
import { digest } from "../../src/domain/Json.js"
import { PipelineRecord, TaskRecord } from "../../src/domain/Records.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as StoreResolver from "../../src/layers/StoreResolver.js"
import { type NewArtifact, Store, type StoreService } from "../../src/services/Store.js"

export const tmpDir = () => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-export-test-"))

const enc = new TextEncoder()
export const art = (id: PipelineId, runId: RunId, seq: number, value: unknown, isFinal: boolean, at: number): NewArtifact => {
  const payload = enc.encode(JSON.stringify(value))
  return { pipelineId: id, runId, seq, taskName: seq < 0 ? null : `t${seq}`, typeName: "json", codec: "json", digest: digest(payload), payload, isFinal, createdAt: at }
}

export const pid = (i: number): PipelineId => PipelineId.make(`p${String(i).padStart(5, "0")}`)

export interface FixtureOptions {
  readonly n: number
  readonly runId?: string
  readonly startedAt?: number
  /** pipelines i with i % failEvery === failEvery - 1 fail at t1 */
  readonly failEvery?: number
  readonly createdAt?: (i: number) => number
  readonly endedAt?: number
  readonly state?: (i: number) => PipelineRecord["state"]
}

/** Writes pipelines of 2 tasks each for one run into an open store. */
export const writeRun = (store: StoreService, o: FixtureOptions) =>
  Effect.gen(function*() {
    const runId = RunId.make(o.runId ?? "r1")
    const t0 = o.startedAt ?? 1000
    yield* store.openRun({ runId, startedAt: t0 })
    const failEvery = o.failEvery ?? 0
    const failed = (i: number) => failEvery > 0 && i % failEvery === failEvery - 1
    for (let i = 0; i < o.n; i++) {
      const id = pid(i)
      const at = o.createdAt?.(i) ?? t0
      const state = o.state?.(i) ?? (failed(i) ? "failed" : "succeeded")
      yield* store.admit([
        new PipelineRecord({
          pipelineId: id, key: null, name: "fx", state, nTasksDone: failed(i) ? 1 : 2, nTasksTotal: 2, specDigest: "s",
          seedDigest: `seed${i}`, tags: {}, attemptsTotal: failed(i) ? 3 : 2, runId, createdAt: at, updatedAt: at + 1,
          startedAt: at, endedAt: o.endedAt ?? at + 10 + (i % 7), failedTask: failed(i) ? "t1" : null,
          errorType: failed(i) ? "FatalError" : null, errorMessage: failed(i) ? `bad ${i}` : null, errorClass: failed(i) ? "fatal" : null
        })
      ], [art(id, runId, -1, { i }, false, at)])
      for (const seq of failed(i) ? [0] : [0, 1]) {
        yield* store.checkpoint({
          pipelineId: id,
          artifact: art(id, runId, seq, { i, seq, answer: `a,"${i}"\n` }, seq === 1, at),
          task: new TaskRecord({
            taskRunId: `${id}/${seq}/${runId}`, pipelineId: id, runId, seq, taskName: `t${seq}`, state: "succeeded", attemptsUsed: 1,
            startedAt: at, endedAt: at + 1, durationMs: 1, errorType: null, errorMessage: null, errorClass: null, leaseIds: ["llm/k1#1"]
          }),
          attempts: [{
            pipelineId: id, runId, taskRunId: `${id}/${seq}/${runId}`, taskName: `t${seq}`, seq, attemptNo: 1, outcome: "succeeded",
            errorClass: null, errorType: null, errorMessage: null, decision: null, leaseIds: ["llm/k1#1"], startedAt: at, endedAt: at + 1, durationMs: 1
          }],
          events: [{ kind: "task.succeeded", pipelineId: id, runId, data: { seq }, ts: at }]
        })
      }
      if (failed(i)) {
        yield* store.recordAttempt({
          pipelineId: id, runId, taskRunId: `${id}/1/${runId}`, taskName: "t1", seq: 1, attemptNo: 2, outcome: "failed",
          errorClass: "rate_limit", errorType: "RetryableError", errorMessage: "429", decision: { retry: false }, leaseIds: ["llm/k1#2"],
          startedAt: at, endedAt: at + 1, durationMs: 1
        })
      }
    }
    yield* store.flush
  })

/** Builds a closed SQLite store file with `writeRun` (plus a resource and a metric). */
export const buildStore = (file: string, runs: ReadonlyArray<FixtureOptions>, extra?: (s: StoreService) => Effect.Effect<void, unknown>) =>
  Effect.scoped(
    Effect.gen(function*() {
      const store = yield* Store
      for (const r of runs) {
        yield* writeRun(store, r)
      }
      yield* store.putResource({ pool: "llm", resourceId: "k1", kind: "llm", spec: { apiKey: "secret" }, health: { state: "ready" }, updatedAt: 1 })
      const last = runs[runs.length - 1]
      if (last !== undefined) {
        yield* store.reportMetric({ runId: RunId.make(last.runId ?? "r1"), pipelineId: null, name: "accuracy", value: 0.875, display: "percent", updatedAt: 1 })
      }
      if (extra !== undefined) yield* extra(store)
      for (const r of runs) yield* store.finishRun(RunId.make(r.runId ?? "r1"), { status: "completed", endedAt: (r.startedAt ?? 1000) + 100 })
    }).pipe(Effect.provide(Layer.fresh(SqliteStore.layer({ filename: file }))))
  )

/** One pipeline of {@link buildPayloadStore}: the byte lengths of its artifacts' text fields, seed first. */
export interface PayloadPipeline {
  /** `[seedBytes, output0Bytes, output1Bytes, …]`: each artifact is `{ i, seq, text: "x" × bytes }`. */
  readonly sizes: ReadonlyArray<number>
}

/**
 * Builds a closed SQLite store of one run whose pipelines carry payloads of the given sizes
 * (JSON `{ i, seq, text }`, the last artifact final), for export memory tests.
 */
export const buildPayloadStore = (file: string, pipelines: ReadonlyArray<PayloadPipeline>, runId = RunId.make("r1")) =>
  Effect.scoped(
    Effect.gen(function*() {
      const store = yield* Store
      yield* store.openRun({ runId, startedAt: 1000 })
      for (let i = 0; i < pipelines.length; i++) {
        const id = pid(i)
        const sizes = pipelines[i]!.sizes
        const outputs = sizes.length - 1
        yield* store.admit([
          new PipelineRecord({
            pipelineId: id, key: null, name: "big", state: "succeeded", nTasksDone: outputs, nTasksTotal: outputs, specDigest: "s",
            seedDigest: `seed${i}`, tags: {}, attemptsTotal: outputs, runId, createdAt: 1000 + i, updatedAt: 1001 + i,
            startedAt: 1000 + i, endedAt: 1002 + i, failedTask: null, errorType: null, errorMessage: null, errorClass: null
          })
        ], [art(id, runId, -1, { i, seq: -1, text: "x".repeat(sizes[0]!) }, outputs === 0, 1000 + i)])
        for (let seq = 0; seq < outputs; seq++) {
          yield* store.checkpoint({
            pipelineId: id,
            artifact: art(id, runId, seq, { i, seq, text: "y".repeat(sizes[seq + 1]!) }, seq === outputs - 1, 1000 + i),
            task: new TaskRecord({
              taskRunId: `${id}/${seq}/${runId}`, pipelineId: id, runId, seq, taskName: `t${seq}`, state: "succeeded", attemptsUsed: 1,
              startedAt: 1000 + i, endedAt: 1001 + i, durationMs: 1, errorType: null, errorMessage: null, errorClass: null, leaseIds: []
            })
          })
        }
      }
      yield* store.finishRun(runId, { status: "completed", endedAt: 5000 })
    }).pipe(Effect.provide(Layer.fresh(SqliteStore.layer({ filename: file }))))
  )

/**
 * A `layer()` fixture (@effect/vitest): builds the store files once for the tests of a file
 * (`build`), then provides the read side's store opener (`StoreResolver.layerOpener`, as the
 * CLI opens store arguments). The stores are only read by the tests that share it.
 */
export const storeFixture = <E>(build: Effect.Effect<unknown, E>) =>
  Layer.merge(Layer.effectDiscard(build), StoreResolver.layerOpener())
