/**
 * The Store contract: one suite every store implementation must pass. Call
 * {@link storeContract} from a test file with a harness that builds the implementation.
 */
import { NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Cause, Chunk, Effect, Either, Exit, Layer, Option, Stream } from "effect"
import type * as Handoff from "../../src/domain/Handoff.js"
import * as Traversal from "../../src/domain/Traversal.js"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import type { PipelineId, RunId } from "../../src/domain/Ids.js"
import { digest } from "../../src/domain/Json.js"
import { PipelineRecord, TaskRecord } from "../../src/domain/Records.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import type { ArtifactBackend } from "../../src/services/ArtifactBackend.js"
import * as CallCache from "../../src/services/CallCache.js"
import type { LoadedArtifact, NewArtifact, NewAttempt, NewEvent, NewHandoff, StoreOptions } from "../../src/services/Store.js"
import { pipelineStatesOf, Store, takenPipelinesOf } from "../../src/services/Store.js"
import { checkpointNowOf } from "../../src/services/internal/store/front.js"
import { pid, rid } from "../support/ids.js"

/** What a store implementation provides to the contract. */
export interface StoreHarness {
  /** A fresh, empty store with these options and this backend (default inline). */
  readonly layer: (
    options?: StoreOptions,
    backend?: Layer.Layer<ArtifactBackend, unknown>
  ) => Layer.Layer<Store, unknown>
  /** Makes every subsequent write transaction fail (true) or succeed again (false). */
  readonly injectWriteFailure: (on: boolean) => Effect.Effect<void>
}

export const pipeline = (id: string, over: Partial<ConstructorParameters<typeof PipelineRecord>[0]> = {}) =>
  new PipelineRecord({
    pipelineId: pid(id),
    key: null,
    name: "demo",
    state: "running",
    nTasksDone: 0,
    nTasksTotal: 3,
    specDigest: "spec",
    seedDigest: `seed-${id}`,
    tags: { split: "test" },
    attemptsTotal: 0,
    runId: rid("run-1"),
    createdAt: 1000,
    updatedAt: 1000,
    startedAt: 1000,
    endedAt: null,
    failedTask: null,
    errorType: null,
    errorMessage: null,
    errorClass: null,
    ...over
  })

export const artifact = (pipelineId: string, seq: number, payload: Uint8Array, isFinal = false): NewArtifact => ({
  pipelineId: pid(pipelineId),
  runId: rid("run-1"),
  seq,
  taskName: seq < 0 ? null : `t${seq}`,
  typeName: "Json",
  codec: "json",
  digest: digest(payload),
  payload,
  isFinal,
  createdAt: 2000
})

export const task = (pipelineId: string, seq: number, state: TaskRecord["state"] = "succeeded") =>
  new TaskRecord({
    taskRunId: `${pipelineId}/${seq}`,
    pipelineId: pid(pipelineId),
    runId: rid("run-1"),
    seq,
    taskName: `t${seq}`,
    state,
    attemptsUsed: 1,
    startedAt: 1000,
    endedAt: 1010,
    durationMs: 10,
    errorType: null,
    errorMessage: null,
    errorClass: null,
    leaseIds: ["lease-1"]
  })

export const attempt = (pipelineId: string, seq: number, attemptNo = 1): NewAttempt => ({
  pipelineId: pid(pipelineId),
  runId: rid("run-1"),
  taskRunId: `${pipelineId}/${seq}`,
  taskName: `t${seq}`,
  seq,
  attemptNo,
  outcome: attemptNo === 1 ? "failed" : "succeeded",
  errorClass: attemptNo === 1 ? "timeout" : null,
  errorType: attemptNo === 1 ? "TimeoutException" : null,
  errorMessage: null,
  decision: attemptNo === 1 ? { retry: true, reason: "timeout", delayMs: 100 } : null,
  leaseIds: [],
  startedAt: 1000,
  endedAt: 1005,
  durationMs: 5
})

export const event = (kind: string, pipelineId: string | null = null, ts = 1000, runId = "run-1"): NewEvent => ({
  kind,
  pipelineId: pipelineId === null ? null : pid(pipelineId),
  runId: rid(runId),
  data: { n: ts },
  ts
})

/** Admits a 3-task control pipeline with its seed and initial traversal state. */
export const controlled = (store: Store["Type"], id: string, run = "run-1") =>
  Effect.as(
    store.admit(
      [pipeline(id, { runId: rid(run) })],
      [{ ...artifact(id, -1, new TextEncoder().encode("seed")), runId: rid(run) }],
      [{ pipelineId: pid(id), state: Traversal.initial(id, 3) }]
    ),
    Traversal.initial(id, 3)
  )

/** A ledger row. */
export const ledgerRow = (
  id: string,
  operation: Handoff.Operation,
  fromSeq: number,
  toSeq: number | null,
  entry: string,
  run = "run-1",
  ts = 2500
): NewHandoff => ({
  pipelineId: pid(id),
  runId: rid(run),
  fromSeq,
  fromTask: `t${fromSeq}`,
  toSeq,
  toTask: toSeq === null ? null : `t${toSeq}`,
  operation,
  entrySeq: Traversal.parseAddress(entry)!.seq,
  entryArtifactId: entry,
  entryReused: operation === "end",
  reason: "test",
  ts
})

/** Seq 1 of `id` rewinds to seq 0 with a new payload (at seq 3): one transition commit. */
export const rewindFrom = (store: Store["Type"], id: string, s1: Traversal.VisitState, run: string, ts = 2500) => {
  const s2 = Either.getOrThrow(Traversal.transition(s1, {
    operation: "rewind", fromSeq: 1, toSeq: 0, entry: `${id}:3`, payload: true, nTasks: 3, limit: 5
  }))
  const encoder = new TextEncoder()
  return store.checkpoint({
    pipelineId: pid(id),
    task: { ...task(id, 1, "handed_off"), runId: rid(run) },
    attempts: [{ ...attempt(id, 1, 1), runId: rid(run), outcome: "handed_off", decision: null, errorClass: null, errorType: null }],
    traversal: {
      expectedVersion: s1.version,
      state: s2,
      handoff: ledgerRow(id, "rewind", 1, 0, `${id}:3`, run, ts),
      entry: { ...artifact(id, 3, encoder.encode("feedback")), runId: rid(run), taskName: "t1" },
      invalidateFrom: 0
    }
  })
}

/**
 * A control pipeline `id` whose seq 0 succeeded ("a0") and whose seq 1 rewinds to seq 0 with a
 * payload; returns the state before the rewind (or, with `stopBefore`, without rewinding).
 */
export const controlledToRewind = (store: Store["Type"], id: string, run = "run-1", stopBefore = false, ts = 2500) =>
  Effect.gen(function*() {
    const s0 = yield* controlled(store, id, run)
    const s1 = Traversal.succeed(s0, 0, `${id}:0`, 3)
    yield* store.checkpoint({
      pipelineId: pid(id),
      artifact: { ...artifact(id, 0, new TextEncoder().encode("a0")), runId: rid(run) },
      task: { ...task(id, 0), runId: rid(run) },
      traversal: { expectedVersion: s0.version, state: s1 }
    })
    if (!stopBefore) yield* rewindFrom(store, id, s1, run, ts)
    return s1
  })

/**
 * Injects a real SQLite failure from a second connection into the store file `file` (on), or
 * removes it (off): triggers that abort every insert and update of the store's tables.
 */
export const setWriteFailure = (file: string, on: boolean) => {
  const db = new Database(file, { timeout: 5000 })
  try {
    for (const t of ["events", "attempts", "artifacts", "tasks", "pipelines"]) {
      for (const op of ["INSERT", "UPDATE"]) {
        const name = `fail_${t}_${op.toLowerCase()}`
        db.exec(
          on
            ? `CREATE TRIGGER IF NOT EXISTS ${name} BEFORE ${op} ON ${t} BEGIN SELECT RAISE(ABORT, 'injected failure'); END`
            : `DROP TRIGGER IF EXISTS ${name}`
        )
      }
    }
  } finally {
    db.close()
  }
}

const bytes = (s: string) => new TextEncoder().encode(s)

const tmpDir = () => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-blobs-"))

const filesUnder = (root: string): Array<string> =>
  fs.readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => nodePath.join(d.parentPath, d.name))

/**
 * How the contract names pipelines in a store: `pipelineId` turns a test's short name ("p1")
 * into the pipeline id written to the store (default: the name itself). A suite store routes
 * by member-shaped ids (`<12hex>-<32hex>`), so its harness maps names onto them. The mapping
 * must be injective and leave an id it made unchanged (tests pass both names and ids); it need
 * not keep the names' order: every expectation about order is stated over the mapped ids.
 */
export interface ContractOptions {
  readonly pipelineId?: ((name: string) => PipelineId) | undefined
  /**
   * Whether the store answers `pipelineStates` itself (the built-in drivers: default `true`);
   * `false`: the contract checks the `getPipelines` fallback of `pipelineStatesOf` instead.
   */
  readonly pipelineStates?: boolean | undefined
  /**
   * Whether the store answers `takenPipelines` itself (the built-in drivers: default `true`);
   * `false`: the contract checks the fallback of `takenPipelinesOf` (the run's rows) instead.
   */
  readonly takenPipelines?: boolean | undefined
}

const base = { pipeline, artifact, task, attempt, event, controlled, ledgerRow, rewindFrom, controlledToRewind }

/** Runs the whole contract against one implementation. */
export const storeContract = (name: string, makeHarness: () => StoreHarness, contractOptions: ContractOptions = {}) => {
  const P = (id: string): PipelineId => (contractOptions.pipelineId ?? pid)(id)
  /** Pipeline ids in the stores' id order (the order of equal timestamps). */
  const ordered = (ids: ReadonlyArray<string>): Array<PipelineId> => ids.map(P).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  /** An artifact address of pipeline `id`. */
  const addr = (id: string, rest: string) => `${P(id)}:${rest}`
  const pipeline = (id: string, over: Parameters<typeof base.pipeline>[1] = {}) => base.pipeline(P(id), over)
  const artifact = (id: string, seq: number, payload: Uint8Array, isFinal = false) => base.artifact(P(id), seq, payload, isFinal)
  const task = (id: string, seq: number, state: TaskRecord["state"] = "succeeded") => base.task(P(id), seq, state)
  const attempt = (id: string, seq: number, attemptNo = 1) => base.attempt(P(id), seq, attemptNo)
  const event = (kind: string, id: string | null = null, ts = 1000, runId = "run-1") => base.event(kind, id === null ? null : P(id), ts, runId)
  const controlled = (store: Store["Type"], id: string, run = "run-1") => base.controlled(store, P(id), run)
  const ledgerRow = (id: string, operation: Handoff.Operation, fromSeq: number, toSeq: number | null, entry: string, run = "run-1") =>
    base.ledgerRow(P(id), operation, fromSeq, toSeq, entry, run)
  const rewindFrom = (store: Store["Type"], id: string, s1: Traversal.VisitState, run: string) => base.rewindFrom(store, P(id), s1, run)
  const controlledToRewind = (store: Store["Type"], id: string, run = "run-1", stopBefore = false, ts = 2500) =>
    base.controlledToRewind(store, P(id), run, stopBefore, ts)
  const withStore = <A, E>(
    body: (store: Store["Type"], h: StoreHarness) => Effect.Effect<A, E>,
    options?: StoreOptions,
    backend?: Layer.Layer<ArtifactBackend, unknown>
  ) => {
    const h = makeHarness()
    return Effect.scoped(Effect.flatMap(Layer.build(h.layer(options, backend)), (ctx) => body(ctx.unsafeMap.get(Store.key) as Store["Type"], h)))
  }

  describe(`Store contract: ${name}`, () => {
    it.effect("the repeat index is stored with the pipeline: read back everywhere, kept by a re-admission that lacks it", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const { repeat: _absent, ...noRepeat } = pipeline("r-none")
          yield* store.admit([pipeline("r0", { repeat: 0 }), pipeline("r3", { repeat: 3 }), noRepeat])
          const byId = yield* store.getPipelines([P("r0"), P("r3"), P("r-none")])
          assert.strictEqual(byId.get(P("r0"))!.repeat, 0)
          assert.strictEqual(byId.get(P("r3"))!.repeat, 3)
          assert.strictEqual(byId.get(P("r-none"))!.repeat, null)
          const streamed = Chunk.toArray(yield* Stream.runCollect(store.streamPipelines()))
          // equal createdAt: by pipeline id
          const repeats = new Map<string, number | null>([[P("r-none"), null], [P("r0"), 0], [P("r3"), 3]])
          assert.deepStrictEqual(streamed.map((p) => [p.pipelineId, p.repeat]), ordered(["r-none", "r0", "r3"]).map((id) => [id, repeats.get(id)]))
          const { repeat: _r, ...again } = pipeline("r3", { state: "succeeded", updatedAt: 2000 })
          yield* store.admit([again])
          const r3 = Option.getOrThrow(yield* store.getPipeline(P("r3")))
          assert.strictEqual(r3.repeat, 3)
          assert.strictEqual(r3.state, "succeeded")
          yield* store.updatePipeline(P("r3"), { state: "failed", updatedAt: 3000 })
          assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(P("r3"))).repeat, 3)
        })))

    it.effect("getPipelines over more ids than one lookup binds: exactly the stored ones, each as getPipeline reads it", () =>
      withStore((store) =>
        Effect.gen(function*() {
          // 601 ids (past two 256-id lookups, an uneven rest), every third one stored
          const ids = Array.from({ length: 601 }, (_, i) => `many-${i}`)
          const stored = ids.filter((_, i) => i % 3 === 0)
          yield* store.admit(stored.map((id, k) => pipeline(id, { createdAt: 1000 + k, updatedAt: 1000 + k })))
          const got = yield* store.getPipelines(ids.map(P))
          assert.deepStrictEqual([...got.keys()].sort(), stored.map(P).sort())
          for (const id of [stored[0]!, stored[100]!, stored[stored.length - 1]!]) {
            assert.deepStrictEqual(got.get(P(id)), Option.getOrThrow(yield* store.getPipeline(P(id))))
          }
          // a later write is seen by the next lookup
          yield* store.updatePipeline(P(stored[5]!), { state: "succeeded", updatedAt: 5000 })
          const again = yield* store.getPipelines([P(stored[5]!), P("many-1")])
          assert.strictEqual(again.size, 1)
          assert.strictEqual(again.get(P(stored[5]!))!.state, "succeeded")
          assert.strictEqual((yield* store.getPipelines([])).size, 0)
        })))

    it.effect("pipelineStates: the states of the stored pipelines among the ids (only those in `among`), as getPipelines reads them", () =>
      withStore((store) =>
        Effect.gen(function*() {
          if (contractOptions.pipelineStates !== false) assert.isDefined(store.pipelineStates, "every built-in store answers pipelineStates")
          const states = pipelineStatesOf(store)
          // 601 ids (past a 500-id chunk), every third one stored, in every state
          const ids = Array.from({ length: 601 }, (_, i) => `st-${i}`)
          const kinds = ["running", "succeeded", "failed", "interrupted", "pending"] as const
          const stored = ids.filter((_, i) => i % 3 === 0)
          // filed under two runs (a row another run admitted again is filed under that run)
          yield* store.admit(stored.map((id, k) =>
            pipeline(id, { state: kinds[k % kinds.length]!, createdAt: 1000 + k, updatedAt: 1000 + k, runId: rid(k % 2 === 0 ? "run-1" : "run-2") })
          ))
          const rows = yield* store.getPipelines(ids.map(P))
          assert.deepStrictEqual(new Set([...rows.values()].map((r) => r.runId)), new Set(["run-1", "run-2"]))
          const all = yield* states(ids.map(P))
          // each with the run its row is filed under
          assert.deepStrictEqual(
            [...all].sort(([a], [b]) => a.localeCompare(b)),
            [...rows].map(([id, r]) => [id, { state: r.state, runId: r.runId }] as const).sort(([a], [b]) => a.localeCompare(b))
          )
          assert.strictEqual(all.size, stored.length)
          // the ended ones only
          const ended = yield* states(ids.map(P), ["succeeded", "failed", "interrupted"])
          assert.deepStrictEqual(
            [...ended.keys()].sort(),
            [...rows].filter(([, r]) => r.state !== "running" && r.state !== "pending").map(([id]) => id).sort()
          )
          for (const [id, row] of ended) assert.deepStrictEqual(row, { state: rows.get(id)!.state, runId: rows.get(id)!.runId })
          // a later write is seen by the next read; an unknown id and an empty `among` read nothing
          yield* store.updatePipeline(P(stored[0]!), { state: "succeeded", updatedAt: 5000 })
          assert.deepStrictEqual([...(yield* states([P(stored[0]!), P("st-1")], ["succeeded"]))], [[P(stored[0]!), {
            state: "succeeded",
            runId: rows.get(P(stored[0]!))!.runId
          }]])
          assert.strictEqual((yield* states([P(stored[0]!)], [])).size, 0)
          assert.strictEqual((yield* states([])).size, 0)
        })))

    it.effect("takenPipelines: a run's pipelines filed under another run now, per that run: failed, or interrupted when the run stopped them (break39 F2)", () =>
      withStore((store) =>
        Effect.gen(function*() {
          if (contractOptions.takenPipelines !== false) assert.isDefined(store.takenPipelines, "every built-in store answers takenPipelines")
          const taken = takenPipelinesOf(store)
          const A = rid("run-A")
          const underA = { runId: A }
          // ran under A, failed there, admitted again by B (its row filed under B now)
          yield* store.admit([
            pipeline("tk-failed", { state: "succeeded", runId: rid("run-B") }),
            pipeline("tk-stopped", { state: "running", runId: rid("run-B") }),
            pipeline("tk-cancelled", { state: "interrupted", runId: rid("run-C") }),
            pipeline("tk-claimed", { state: "succeeded", runId: rid("run-B") }),
            pipeline("tk-attempt", { state: "failed", runId: rid("run-B") }),
            pipeline("tk-own", { state: "failed", runId: A }),
            pipeline("tk-other", { state: "failed", runId: rid("run-B") })
          ])
          yield* store.putTask({ ...task("tk-failed", 0, "failed"), ...underA })
          yield* store.recordAttempt({ ...attempt("tk-failed", 0), ...underA })
          // the run's own row: not taken
          yield* store.putTask({ ...task("tk-own", 0, "failed"), ...underA })
          // only an attempt row under A (its task row rewritten by B's run)
          yield* store.recordAttempt({ ...attempt("tk-attempt", 1), ...underA })
          yield* store.putTask({ ...task("tk-attempt", 1), runId: rid("run-B") })
          // stopped by A: an attempt and A's interrupted event
          yield* store.recordAttempt({ ...attempt("tk-stopped", 0), ...underA })
          yield* store.emitEvent(event("pipeline.interrupted", "tk-stopped", 1000, "run-A"))
          // cancelled by A before any attempt: the event alone (row filed under C now)
          yield* store.emitEvent(event("pipeline.interrupted", "tk-cancelled", 1000, "run-A"))
          // in flight when A died, claimed by B (B's `pipeline.abandoned` event names A)
          yield* store.putTask({ ...task("tk-claimed", 0), ...underA })
          yield* store.emitEvent({ ...event("pipeline.abandoned", "tk-claimed", 1100, "run-B"), data: { run: "run-A", task: "t1", seq: 1, attemptNo: 1 } })
          // B's own pipeline, B's interrupted event, another run's abandoned event: not A's
          yield* store.putTask({ ...task("tk-other", 0, "failed"), runId: rid("run-B") })
          yield* store.emitEvent(event("pipeline.interrupted", "tk-other", 1000, "run-B"))
          yield* store.emitEvent({ ...event("pipeline.abandoned", "tk-other", 1100, "run-B"), data: { run: "run-Z", task: "t0", seq: 0, attemptNo: 1 } })
          // a task row of A whose pipeline is not admitted: nothing is filed anywhere
          yield* store.putTask({ ...task("tk-unknown", 0, "failed"), ...underA })
          assert.deepStrictEqual(yield* taken(A), [
            { runId: rid("run-B"), failed: 2, interrupted: 2 },
            { runId: rid("run-C"), failed: 0, interrupted: 1 }
          ])
          // B's view: its rows are its own; C, a run with no rows, and an unknown run: nothing
          assert.deepStrictEqual(yield* taken(rid("run-B")), [])
          assert.deepStrictEqual(yield* taken(rid("run-C")), [])
          assert.deepStrictEqual(yield* taken(rid("run-none")), [])
          // A admits its failed pipeline again: filed under A, no longer taken
          yield* store.admit([pipeline("tk-failed", { state: "running", runId: A })])
          assert.deepStrictEqual(yield* taken(A), [
            { runId: rid("run-B"), failed: 1, interrupted: 2 },
            { runId: rid("run-C"), failed: 0, interrupted: 1 }
          ])
        })))

    it.effect("the member fields (suiteId, experimentId, localKey) are stored: read back, null by default, kept by a re-admission that lacks them", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const member = { suiteId: "cmp", experimentId: "baseline", localKey: "sample-7" }
          yield* store.admit([pipeline("m1", member), pipeline("plain")])
          const byId = yield* store.getPipelines([P("m1"), P("plain")])
          const m1 = byId.get(P("m1"))!
          assert.deepStrictEqual([m1.suiteId, m1.experimentId, m1.localKey], ["cmp", "baseline", "sample-7"])
          const plain = byId.get(P("plain"))!
          assert.deepStrictEqual([plain.suiteId, plain.experimentId, plain.localKey], [null, null, null])
          const streamed = Chunk.toArray(yield* Stream.runCollect(store.streamPipelines()))
          assert.deepStrictEqual(
            streamed.map((p) => [p.pipelineId, p.experimentId]),
            ordered(["m1", "plain"]).map((id) => [id, id === P("m1") ? "baseline" : null])
          )
          const { suiteId: _s, experimentId: _e, localKey: _l, ...again } = pipeline("m1", { state: "succeeded", updatedAt: 2000 })
          yield* store.admit([again])
          const after = Option.getOrThrow(yield* store.getPipeline(P("m1")))
          assert.deepStrictEqual([after.suiteId, after.experimentId, after.localKey, after.state], ["cmp", "baseline", "sample-7", "succeeded"])
        })))

    it.effect("pages across equal timestamps without loss or duplicates", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const ids = Array.from({ length: 2345 }, (_, i) => `p${String(i).padStart(5, "0")}`)
          // same createdAt for every row: only the unique key orders them
          yield* store.admit([...ids].reverse().map((id) => pipeline(id)))
          const got = Chunk.toArray(yield* Stream.runCollect(store.streamPipelines())).map((p) => p.pipelineId)
          assert.strictEqual(got.length, ids.length)
          assert.deepStrictEqual(got, ordered(ids))
          const tasks = ids.slice(0, 1200).flatMap((id) => [task(id, 0), { ...task(id, 0), taskRunId: `${P(id)}/0b` }])
          yield* Effect.forEach(tasks, (t) => store.putTask(new TaskRecord(t)), { concurrency: 16 })
          const gotTasks = Chunk.toArray(yield* Stream.runCollect(store.streamTasks()))
          assert.strictEqual(gotTasks.length, 2400)
          assert.strictEqual(new Set(gotTasks.map((t) => t.taskRunId)).size, 2400)
          // grouped by pipeline (in the store's pipeline order: by id in memory, by admission in
          // SQLite), then by seq and taskRunId
          const groups = gotTasks.map((t) => t.pipelineId).filter((id, i, all) => i === 0 || all[i - 1] !== id)
          assert.strictEqual(groups.length, 1200, "each pipeline's tasks are contiguous")
          for (let i = 0; i < gotTasks.length; i += 2) {
            const id = gotTasks[i]!.pipelineId
            assert.deepStrictEqual(gotTasks.slice(i, i + 2).map((t) => t.taskRunId), [`${id}/0`, `${id}/0b`])
          }
        })))

    it.effect("limits: none = all, 0 = empty, negative or non-integer = ConfigError", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit(Array.from({ length: 7 }, (_, i) => pipeline(`p${i}`, { createdAt: i })))
          for (let i = 0; i < 7; i++) yield* store.emitEvent(event("k", `p${i}`, i))
          assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamPipelines())), 7)
          assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamPipelines({ limit: 0 }))), 0)
          assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamPipelines({ limit: 3 }))), 3)
          assert.strictEqual((yield* store.events()).length, 7)
          assert.strictEqual((yield* store.events({ limit: 0 })).length, 0)
          for (const bad of [-1, 1.5, Number.NaN]) {
            const e1 = yield* Effect.flip(Stream.runCollect(store.streamPipelines({ limit: bad })))
            assert.strictEqual(e1._tag, "ConfigError")
            const e2 = yield* Effect.flip(store.events({ limit: bad }))
            assert.strictEqual(e2._tag, "ConfigError")
            const e3 = yield* Effect.flip(store.errors({ limit: bad }))
            assert.strictEqual(e3._tag, "ConfigError")
            const e4 = yield* Effect.flip(Stream.runCollect(store.streamEvents({ limit: bad })))
            assert.strictEqual(e4._tag, "ConfigError")
          }
        })))

    it.effect("event and attempt streams stop at the high-water mark taken at the start", () =>
      withStore((store) =>
        Effect.gen(function*() {
          for (let i = 0; i < 1500; i++) yield* store.emitEvent(event("k", null, i))
          for (let i = 0; i < 1100; i++) yield* store.recordAttempt(attempt(`p${i}`, 0))
          let injected = false
          const inject = Effect.suspend(() => {
            if (injected) return Effect.void
            injected = true
            return Effect.zipRight(
              Effect.forEach(Array.from({ length: 50 }, (_, i) => i), (i) =>
                Effect.zipRight(store.emitEvent(event("late", null, 5000 + i)), store.recordAttempt(attempt("late", 0)))),
              store.flush
            )
          })
          const evs = Chunk.toArray(yield* Stream.runCollect(Stream.tap(store.streamEvents(), () => inject)))
          assert.strictEqual(evs.length, 1500)
          assert.isTrue(evs.every((e) => e.kind === "k"))
          assert.isTrue(evs.every((e, i) => i === 0 || e.eventId > evs[i - 1]!.eventId))
          injected = false
          const before = (yield* store.stats()).attemptsTotal // 1100 + the 50 late ones above
          const atts = Chunk.toArray(yield* Stream.runCollect(Stream.tap(store.streamAttempts(), () => inject)))
          assert.strictEqual(atts.length, before)
          assert.strictEqual((yield* store.stats()).attemptsTotal, before + 50)
          // a new stream sees them
          assert.strictEqual(yield* store.countEvents({ kind: "late" }), 100)
          assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamAttempts())), before + 50)
        })))

    it.effect("reads flush the write-behind buffer first", () =>
      withStore(
        (store) =>
          Effect.gen(function*() {
            yield* store.emitEvent(event("a"))
            yield* store.recordAttempt(attempt("p1", 0))
            assert.strictEqual(yield* store.pending, 2)
            assert.strictEqual((yield* store.events()).length, 1)
            assert.strictEqual(yield* store.pending, 0)
            yield* store.emitEvent(event("b"))
            assert.strictEqual(yield* store.countEvents(), 2)
            const atts = Chunk.toArray(yield* Stream.runCollect(store.streamAttempts({ pipelineId: P("p1") })))
            assert.strictEqual(atts.length, 1)
            assert.deepStrictEqual(atts[0]!.decision, { retry: true, reason: "timeout", delayMs: 100 })
          }),
        { batchSize: 1000 }
      ))

    it.effect("a buffer reaching batchSize is written without a read", () =>
      withStore(
        (store) =>
          Effect.gen(function*() {
            for (let i = 0; i < 4; i++) yield* store.emitEvent(event("a"))
            assert.strictEqual(yield* store.pending, 1)
          }),
        { batchSize: 3 }
      ))

    it.effect("a failed flush stays buffered and is retried", () =>
      withStore(
        (store, h) =>
          Effect.gen(function*() {
            yield* store.emitEvent(event("x"))
            yield* store.recordAttempt(attempt("p1", 0))
            yield* h.injectWriteFailure(true)
            const err = yield* Effect.flip(store.flush)
            assert.strictEqual(err._tag, "StoreUnavailable")
            assert.strictEqual(yield* store.pending, 2)
            yield* h.injectWriteFailure(false)
            yield* store.flush
            assert.strictEqual(yield* store.pending, 0)
            assert.strictEqual(yield* store.countEvents({ kind: "x" }), 1)
            assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamAttempts())), 1)
          }),
        { batchSize: 1000 }
      ))

    it.effect("group commit: concurrent checkpoints are all durable and visible when they resolve", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const ids = Array.from({ length: 300 }, (_, i) => P(`g${i}`))
          yield* Effect.forEach(ids, (id) => store.admit([pipeline(id)]), { concurrency: 64 })
          yield* Effect.forEach(ids, (id) =>
            Effect.gen(function*() {
              for (let seq = 0; seq < 3; seq++) {
                yield* store.checkpoint({
                  pipelineId: P(id),
                  artifact: artifact(id, seq, bytes(`${id}:${seq}`), seq === 2),
                  task: task(id, seq),
                  pipeline: {
                    nTasksDone: seq + 1,
                    attemptsDelta: 1,
                    updatedAt: 1100 + seq,
                    ...(seq === 2 ? { state: "succeeded" as const, endedAt: 1200 } : {})
                  },
                  attempts: [{ ...attempt(id, seq, 2) }],
                  events: [event("task.done", id)]
                })
                // resolved ⇒ committed: another read sees the cursor at once
                const row = yield* store.getPipeline(P(id))
                assert.strictEqual(Option.getOrThrow(row).nTasksDone, seq + 1)
              }
            }), { concurrency: 64 })
          const got = yield* store.getPipelines(ids)
          assert.strictEqual(got.size, 300)
          for (const p of got.values()) {
            assert.strictEqual(p.state, "succeeded")
            assert.strictEqual(p.nTasksDone, 3)
            assert.strictEqual(p.attemptsTotal, 3)
          }
          const arts = yield* store.listArtifacts(P("g7"))
          assert.deepStrictEqual(arts.map((a) => [a.seq, a.isFinal]), [[0, false], [1, false], [2, true]])
          assert.strictEqual(yield* store.countEvents({ kind: "task.done" }), 900)
          assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamTasks({ pipelineId: P("g7") }))), 3)
        })))

    it.effect("a failed group commit fails its callers and leaves nothing visible", () =>
      withStore((store, h) =>
        Effect.gen(function*() {
          yield* store.admit([pipeline("f1")])
          yield* h.injectWriteFailure(true)
          const exit = yield* Effect.exit(store.checkpoint({
            pipelineId: P("f1"),
            artifact: artifact("f1", 0, bytes("x")),
            task: task("f1", 0),
            pipeline: { nTasksDone: 1, updatedAt: 2 },
            events: [event("e", "f1")]
          }))
          assert.isTrue(Exit.isFailure(exit))
          yield* h.injectWriteFailure(false)
          assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(P("f1"))).nTasksDone, 0)
          assert.strictEqual((yield* store.listArtifacts(P("f1"))).length, 0)
          assert.strictEqual(yield* store.countEvents(), 0)
        })))

    it.effect("a checkpoint leaves the caller's unit as it was (admission, earlier units, rows, payloads): once it committed, once it failed and was submitted again", () =>
      withStore((store, h) =>
        Effect.gen(function*() {
          // what the store front queues is its own: it empties its ops once their batch is
          // done (see front.ts's `spend`), never the caller's unit, its admission or its rows
          const unitOf = (id: string) => ({
            pipelineId: id as PipelineId,
            admission: { pipelines: [pipeline(id)], seeds: [artifact(id, -1, bytes(`seed ${id}`))] },
            before: [{
              pipelineId: id as PipelineId,
              artifact: artifact(id, 0, bytes(`${id}:0`)),
              task: task(id, 0),
              attempts: [attempt(id, 0, 2)]
            }],
            artifact: artifact(id, 1, bytes(`${id}:1`), true),
            task: task(id, 1),
            pipeline: { nTasksDone: 2, attemptsDelta: 2, updatedAt: 1100, state: "succeeded" as const, endedAt: 1100 },
            attempts: [attempt(id, 1, 2)],
            events: [event("task.done", id)]
          })
          const now = checkpointNowOf(store)
          for (const [key, viaNow] of [["k1", false], ["k2", true]] as const) {
            const id = P(key)
            const unit = unitOf(id)
            const before = structuredClone(unit)
            yield* h.injectWriteFailure(true)
            const failed = viaNow && now !== undefined
              ? yield* Effect.async<Exit.Exit<void, unknown>>((resume) => {
                if (!now(unit, (exit) => resume(Effect.succeed(exit)))) resume(Effect.succeed(Exit.void))
              })
              : yield* Effect.exit(store.checkpoint(unit))
            assert.isTrue(Exit.isFailure(failed) || !viaNow || now === undefined)
            assert.deepStrictEqual(unit, before)
            yield* h.injectWriteFailure(false)
            // submitted again unless the first submission committed after all (a store whose
            // file did not exist yet when the failure was injected: a suite member's database)
            if (Option.isNone(yield* store.getPipeline(id))) yield* store.checkpoint(unit)
            assert.deepStrictEqual(unit, before)
            const row = Option.getOrThrow(yield* store.getPipeline(id))
            assert.strictEqual(row.state, "succeeded")
            assert.strictEqual(row.nTasksDone, 2)
            assert.deepStrictEqual((yield* store.listArtifacts(id)).map((a) => [a.seq, a.isFinal]), [[-1, false], [0, false], [1, true]])
          }
        })))

    it.effect("artifacts: seed at -1, latest per seq, order by seq then id, markFinal idempotent", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit([pipeline("a1")])
          const seed = yield* store.putArtifact(artifact("a1", -1, bytes("seed")))
          assert.strictEqual(seed.seq, -1)
          yield* store.putArtifact(artifact("a1", 1, bytes("one")))
          yield* store.putArtifact(artifact("a1", 0, bytes("zero-old")))
          yield* store.putArtifact(artifact("a1", 0, bytes("zero-new")))
          const list = yield* store.listArtifacts(P("a1"))
          assert.deepStrictEqual(list.map((a) => a.seq), [-1, 0, 0, 1])
          assert.isTrue(list[1]!.artifactId < list[2]!.artifactId)
          const got = Option.getOrThrow(yield* store.getArtifact(P("a1"), 0))
          assert.deepStrictEqual(got.payload, bytes("zero-new"))
          assert.isTrue(got.artifact.available)
          assert.strictEqual(got.artifact.typeName, "Json")
          assert.isTrue(Option.isNone(yield* store.getArtifact(P("a1"), 5)))
          yield* store.markFinal(P("a1"), 1)
          yield* store.markFinal(P("a1"), 1)
          const finals = (yield* store.listArtifacts(P("a1"))).filter((a) => a.isFinal)
          assert.deepStrictEqual(finals.map((a) => a.seq), [1])
          yield* store.markFinal(P("a1"), 0)
          const finals2 = (yield* store.listArtifacts(P("a1"))).filter((a) => a.isFinal)
          assert.deepStrictEqual(finals2.map((a) => a.artifactId), [list[2]!.artifactId])
          const streamed = Chunk.toArray(yield* Stream.runCollect(store.streamArtifacts({ pipelineId: P("a1") })))
          assert.deepStrictEqual(streamed.map((a) => a.artifactId), list.map((a) => a.artifactId))
        })))

    it.effect("journal summary keeps metadata and drops payloads", () =>
      withStore(
        (store) =>
          Effect.gen(function*() {
            assert.strictEqual(store.journal, "summary")
            const p = bytes("payload")
            yield* store.putArtifact(artifact("s1", -1, p))
            yield* store.checkpoint({ pipelineId: P("s1"), artifact: artifact("s1", 0, p) })
            for (const seq of [-1, 0]) {
              const got = Option.getOrThrow(yield* store.getArtifact(P("s1"), seq))
              assert.isFalse(got.artifact.available)
              assert.isUndefined(got.payload)
              assert.strictEqual(got.artifact.digest, digest(p))
              assert.strictEqual(got.artifact.size, p.byteLength)
              assert.strictEqual(got.artifact.storage, "none")
            }
          }),
        { journal: "summary" }
      ))

    it.effect("file backend: spills large payloads atomically, dedupes, small stay inline, missing blob is unavailable", () => {
      const root = tmpDir()
      const backend = ArtifactBackends.layerFile({ root, minBytes: 1024 }).pipe(Layer.provide(NodeFileSystem.layer))
      return withStore(
        (store) =>
          Effect.gen(function*() {
            const big = new Uint8Array(4096).map((_, i) => i % 251)
            yield* store.putArtifact(artifact("b1", 0, big))
            yield* store.putArtifact(artifact("b2", 0, big))
            yield* store.putArtifact(artifact("b3", 0, bytes("small")))
            const files = filesUnder(root)
            assert.strictEqual(files.length, 1, "identical payloads share one file, no temp files left")
            assert.deepStrictEqual(new Uint8Array(fs.readFileSync(files[0]!)), big)
            const b1 = Option.getOrThrow(yield* store.getArtifact(P("b1"), 0))
            assert.strictEqual(b1.artifact.storage, "blob")
            assert.deepStrictEqual(b1.payload, big)
            const b3 = Option.getOrThrow(yield* store.getArtifact(P("b3"), 0))
            assert.strictEqual(b3.artifact.storage, "inline")
            fs.unlinkSync(files[0]!)
            const gone = Option.getOrThrow(yield* store.getArtifact(P("b2"), 0))
            assert.isFalse(gone.artifact.available)
            assert.isUndefined(gone.payload)
            assert.isFalse((yield* store.listArtifacts(P("b2")))[0]!.available)
          }),
        {},
        backend
      )
    })

    it.effect("null backend keeps digest and size, drops bytes", () =>
      withStore(
        (store) =>
          Effect.gen(function*() {
            const p = bytes("gone")
            yield* store.putArtifact(artifact("n1", 0, p))
            const got = Option.getOrThrow(yield* store.getArtifact(P("n1"), 0))
            assert.isFalse(got.artifact.available)
            assert.strictEqual(got.artifact.digest, digest(p))
            assert.strictEqual(got.artifact.size, 4)
          }),
        {},
        ArtifactBackends.layerNull
      ))

    it.effect("stats: counts, state distribution, latency percentiles, attempts and retries", () =>
      withStore((store) =>
        Effect.gen(function*() {
          // durations 1..100 ms
          yield* store.admit(Array.from({ length: 100 }, (_, i) =>
            pipeline(`d${i}`, { state: i % 10 === 0 ? "failed" : "succeeded", startedAt: 0, endedAt: i + 1 })))
          yield* store.admit([pipeline("other", { runId: rid("run-2") })])
          yield* store.recordAttempt(attempt("d1", 0, 1))
          yield* store.recordAttempt(attempt("d1", 0, 2))
          const s = yield* store.stats(rid("run-1"))
          assert.strictEqual(s.pipelines, 100)
          assert.strictEqual(s.byState.failed, 10)
          assert.strictEqual(s.byState.succeeded, 90)
          assert.strictEqual(s.attemptsTotal, 2)
          assert.strictEqual(s.retries, 1)
          assert.isNotNull(s.latencyMs)
          assert.closeTo(s.latencyMs!.p50, 50.5, 1e-9)
          assert.closeTo(s.latencyMs!.p95, 95.05, 1e-9)
          assert.closeTo(s.latencyMs!.p99, 99.01, 1e-9)
          const all = yield* store.stats()
          assert.strictEqual(all.pipelines, 101)
          assert.strictEqual(all.byState.running, 1)
          assert.isNull((yield* store.stats(rid("nobody"))).latencyMs)
        })))

    it.effect("stats: a retry is a retry decision, not an attempt number above 1 (a re-run after a kill is none)", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit([pipeline("k1"), pipeline("k2")])
          // k1: attempt 1 failed and the policy gave up; attempt 2 was killed (reserved, no row);
          // attempt 3 ran on the resume: a re-run, not a retry
          yield* store.recordAttempt({ ...attempt("k1", 0, 1), decision: { retry: false, reason: "fatal", delayMs: null } })
          yield* store.recordAttempt(attempt("k1", 0, 3))
          // k2: attempt 1 failed and was retried (one retry decision), attempt 2 succeeded
          yield* store.recordAttempt(attempt("k2", 0, 1))
          yield* store.recordAttempt(attempt("k2", 0, 2))
          const s = yield* store.stats(rid("run-1"))
          assert.strictEqual(s.attemptsTotal, 4)
          assert.strictEqual(s.retries, 1)
          assert.strictEqual((yield* store.stats()).retries, 1)
        })))

    it.effect("call cache figures from the attempt rows' cache notes (stats.cache, else the fold): hits, misses, failed writes and lookups, what the hits saved", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit(["c1", "c2", "c3", "c4", "c5"].map((id) => pipeline(id)))
          const noted = (id: string, attemptNo: number, outcome: NewAttempt["outcome"], cache: unknown, runId = "run-1"): NewAttempt => ({
            ...attempt(id, 0, attemptNo),
            runId: rid(runId),
            outcome,
            errorClass: outcome === "failed" ? "rate_limit" : null,
            decision: { retry: outcome === "failed", reason: outcome === "failed" ? "rate_limit" : "ok", cache }
          })
          const usage = { promptTokens: 10, completionTokens: 4, totalTokens: 14, costUsd: 0.125 }
          yield* store.recordAttempt(noted("c1", 1, "failed", { status: "miss", key: "k" }))
          yield* store.recordAttempt(noted("c1", 2, "succeeded", { status: "miss", key: "k", stored: false, lookupFailed: true }))
          yield* store.recordAttempt(noted("c2", 1, "cache_hit", { status: "hit", key: "k", usage }))
          yield* store.recordAttempt(noted("c3", 1, "cache_hit", { status: "hit", key: "k", usage: null }, "run-2"))
          yield* store.recordAttempt(noted("c4", 1, "succeeded", { status: "refresh", key: "k" }, "run-2"))
          yield* store.recordAttempt(noted("c5", 1, "succeeded", { status: "bypass", key: "k" }, "run-2"))
          // an attempt without a note (an uncached task) counts in nothing
          yield* store.recordAttempt({ ...attempt("c5", 1, 2), decision: null })
          const run1 = yield* CallCache.statsOfScope(store, rid("run-1"))
          assert.deepStrictEqual(run1, {
            hits: 1, misses: 2, refreshed: 0, bypassed: 0, writeFailures: 1, lookupFailures: 1,
            tokensSaved: { promptTokens: 10, completionTokens: 4, totalTokens: 14 }, costSavedUsd: 0.125,
            // answers stored: neither the failed miss nor the succeeded one whose write failed
            stored: 0
          })
          const run2 = yield* CallCache.statsOfScope(store, rid("run-2"))
          assert.deepStrictEqual([run2.hits, run2.misses, run2.refreshed, run2.bypassed, run2.costSavedUsd, run2.stored], [1, 0, 1, 1, null, 1])
          const all = yield* CallCache.statsOfScope(store, undefined)
          assert.deepStrictEqual(all, CallCache.sumStats(run1, run2))
        })))

    it.effect("resourceUsage: attempts per lease target (once per attempt), retries after a retry decision of the same task run in scope, rate limits", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit(["u1", "u2", "u3", "u4"].map((id) => pipeline(id)))
          const at = (id: string, seq: number, over: Partial<NewAttempt>): NewAttempt => ({
            ...attempt(id, seq, 2),
            decision: null,
            errorClass: null,
            ...over
          })
          const retry = { retry: true, reason: "rate_limit", delayMs: 1 }
          // u1 seq 0: a rate-limited attempt retried on pool/a; seq 1 holds a twice and b once
          yield* store.recordAttempt(at("u1", 0, { leaseIds: ["pool/a#1"], errorClass: "rate_limit", decision: retry }))
          yield* store.recordAttempt(at("u1", 0, { leaseIds: ["pool/a#2"] }))
          yield* store.recordAttempt(at("u1", 1, { leaseIds: ["pool/a#3", "pool/b#4", "pool/a#5"] }))
          // u2: a decision whose retry is the number 1 is no retry decision
          yield* store.recordAttempt(at("u2", 0, { leaseIds: ["pool/b#6"], decision: { retry: 1 } }))
          yield* store.recordAttempt(at("u2", 0, { leaseIds: ["pool/b#7"] }))
          // u3: retried in run-1, run again in run-2 (a retry for every run, none for run-2 alone)
          yield* store.recordAttempt(at("u3", 0, { leaseIds: ["pool/b#8"], decision: retry }))
          yield* store.recordAttempt(at("u3", 0, { leaseIds: ["pool/b#9"], runId: rid("run-2") }))
          // u4: the next attempt of another visit is no retry; ids without '#' or with several
          yield* store.recordAttempt(at("u4", 0, { leaseIds: ["plain"], decision: retry, visit: 0 }))
          yield* store.recordAttempt(at("u4", 0, { leaseIds: ["x#y#7"], visit: 1 }))
          const all = yield* store.resourceUsage()
          // no attempt carried token usage: the accounting figures are 0
          const z = { tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 }
          assert.deepStrictEqual(all, [
            { target: "plain", attempts: 1, retries: 0, rateLimited: 0, ...z },
            { target: "pool/a", attempts: 3, retries: 1, rateLimited: 1, ...z },
            { target: "pool/b", attempts: 5, retries: 1, rateLimited: 0, ...z },
            { target: "x#y", attempts: 1, retries: 0, rateLimited: 0, ...z }
          ])
          assert.deepStrictEqual(yield* store.resourceUsage(rid("run-2")), [
            { target: "pool/b", attempts: 1, retries: 0, rateLimited: 0, ...z }
          ])
          assert.deepStrictEqual(yield* store.resourceUsage(rid("nobody")), [])
        })))

    it.effect("accounting: an attempt's model, tokens, estimated flag and cost round-trip; resourceUsage sums them per target", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit(["t1", "t2"].map((id) => pipeline(id)))
          const at = (id: string, over: Partial<NewAttempt>): NewAttempt => ({
            ...attempt(id, 0, 1),
            decision: null,
            errorClass: null,
            ...over
          })
          yield* store.recordAttempt(at("t1", {
            leaseIds: ["llm/a#1"],
            model: "m-small",
            tokensIn: 120,
            tokensOut: 30,
            tokensEstimated: false,
            costUsd: 0.00015
          }))
          // estimated tokens, no known cost
          yield* store.recordAttempt(at("t2", { leaseIds: ["llm/a#2"], model: "m-x", tokensIn: 10, tokensOut: 5, tokensEstimated: true }))
          // no model call: every accounting field null
          yield* store.recordAttempt(at("t2", { leaseIds: ["llm/b#3"] }))
          yield* store.flush
          const rows = yield* Stream.runCollect(store.streamAttempts({}))
          const got = Chunk.toReadonlyArray(rows).map((a) => [a.model, a.tokensIn, a.tokensOut, a.tokensEstimated, a.costUsd])
          // (a store of several databases streams them database by database)
          assert.sameDeepMembers(got, [
            ["m-small", 120, 30, false, 0.00015],
            ["m-x", 10, 5, true, null],
            [null, null, null, false, null]
          ])
          const usage = yield* store.resourceUsage()
          assert.deepStrictEqual(usage.map((u) => [u.target, u.tokensIn, u.tokensOut, u.costUsd, u.estimated, u.unpriced]), [
            ["llm/a", 130, 35, 0.00015, 1, 1],
            ["llm/b", 0, 0, 0, 0, 0]
          ])
        })))

    it.effect("accounting aggregates: stats counts each call sent (each lease: a judge's repair is a second call), the tokens of each attempt once; pipelineAccounting per pipeline, ordered, cut, by ids and run", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit(["v1", "v2", "v3", "v4"].map((id) => pipeline(id)))
          const at = (id: string, over: Partial<NewAttempt>): NewAttempt => ({
            ...attempt(id, 0, 1),
            decision: null,
            errorClass: null,
            ...over
          })
          const call = (tokensIn: number, tokensOut: number, costUsd: number | null, leaseIds: ReadonlyArray<string>) => ({
            model: "m",
            tokensIn,
            tokensOut,
            tokensEstimated: false,
            costUsd,
            leaseIds
          })
          // v1: an attempt that leased twice (two calls, as a study trial meters them: a judge's
          // format repair, tester16c F5; its tokens counted once), then a cache hit of a task
          // that leases from pool llm (its note names the pool: a model call saved), and one
          // of a pure cached task (a hit, no model call saved)
          const hitNote = (pool?: string) =>
            ({
              retry: false,
              reason: "cache hit",
              cache: { status: "hit", key: "0123456789abcdef", ...(pool === undefined ? {} : { pool }) }
            }) as unknown as NewAttempt["decision"]
          yield* store.recordAttempt(at("v1", call(100, 10, 0.5, ["llm/a#1", "llm/b#2"])))
          yield* store.recordAttempt(at("v1", { outcome: "cache_hit", leaseIds: [], decision: hitNote("llm") }))
          yield* store.recordAttempt(at("v1", { outcome: "cache_hit", leaseIds: [], decision: hitNote() }))
          // v2: two calls, the second estimated and unpriced
          yield* store.recordAttempt(at("v2", call(300, 30, 0.25, ["llm/a#3"])))
          yield* store.recordAttempt(at("v2", { ...call(7, 3, null, ["llm/a#4"]), tokensEstimated: true }))
          // v3: no model call (it leased nothing: no figures, not listed); v4: a call in run-2
          yield* store.recordAttempt(at("v3", { leaseIds: [] }))
          yield* store.recordAttempt(at("v4", { ...call(5, 5, 1, ["llm/b#6"]), runId: rid("run-2") }))
          // calls sent and not answered (tester18c F4): v2 refused with a 429 and failed with a
          // 5xx on a resource; a 429 of a task that leased nothing is no call to a provider
          yield* store.recordAttempt(at("v2", { outcome: "failed", errorClass: "rate_limit", leaseIds: ["llm/a#7"] }))
          yield* store.recordAttempt(at("v2", { outcome: "failed", errorClass: "upstream", leaseIds: ["llm/a#8"] }))
          yield* store.recordAttempt(at("v3", { outcome: "failed", errorClass: "rate_limit", leaseIds: [] }))
          // one definition with a study trial's meter (fix16aa): a call answered with a 400 (class
          // fatal, no tokens) was sent, so it is a call (neither refused nor failed at the
          // endpoint); a connection that never reached the provider is none
          yield* store.recordAttempt(at("v2", { outcome: "failed", errorClass: "fatal", leaseIds: ["llm/a#9"] }))
          yield* store.recordAttempt(at("v3", { outcome: "failed", errorClass: "connection", leaseIds: ["llm/a#10"] }))
          const s1 = yield* store.stats(rid("run-1"))
          assert.deepStrictEqual(s1.accounting, {
            calls: 7,
            refused: 1,
            failedCalls: 1,
            cacheHits: 2,
            modelCallHits: 1,
            tokensIn: 407,
            tokensOut: 43,
            costUsd: 0.75,
            estimated: 1,
            unpriced: 1
          })
          assert.strictEqual((yield* store.stats()).accounting?.calls, 8)
          // the resources count v1's call on each of a and b: more than the total
          const usage = yield* store.resourceUsage(rid("run-1"))
          assert.strictEqual(usage.reduce((n, u) => n + u.tokensIn, 0), 507)
          // read again after resourceUsage (SQLite: its one scan's totals serve this stats)
          const s2 = yield* store.stats(rid("run-1"))
          assert.deepStrictEqual([s2.accounting?.calls, s2.accounting?.cacheHits, s2.accounting?.modelCallHits], [7, 2, 1])

          const v1 = { pipelineId: P("v1"), calls: 2, refused: 0, failedCalls: 0, cacheHits: 2, modelCallHits: 1, tokensIn: 100, tokensOut: 10, costUsd: 0.5, estimated: 0, unpriced: 0 }
          const v2 = { pipelineId: P("v2"), calls: 5, refused: 1, failedCalls: 1, cacheHits: 0, modelCallHits: 0, tokensIn: 307, tokensOut: 33, costUsd: 0.25, estimated: 1, unpriced: 1 }
          const v4 = { pipelineId: P("v4"), calls: 1, refused: 0, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 5, tokensOut: 5, costUsd: 1, estimated: 0, unpriced: 0 }
          // without an order: by pipeline id (a suite member's ids are prefixed: sorted here too)
          const byId = <A extends { readonly pipelineId: string }>(xs: ReadonlyArray<A>) =>
            [...xs].sort((a, b) => (a.pipelineId < b.pipelineId ? -1 : 1))
          assert.deepStrictEqual(yield* store.pipelineAccounting(), byId([v1, v2, v4]))
          assert.deepStrictEqual(yield* store.pipelineAccounting({ runId: rid("run-1") }), byId([v1, v2]))
          assert.deepStrictEqual(yield* store.pipelineAccounting({ orderBy: "cost" }), [v4, v1, v2])
          assert.deepStrictEqual(yield* store.pipelineAccounting({ orderBy: "tokens", limit: 2 }), [v2, v1])
          assert.deepStrictEqual(yield* store.pipelineAccounting({ pipelineIds: [P("v2"), P("v3"), P("v4")] }), byId([v2, v4]))
          assert.deepStrictEqual(yield* store.pipelineAccounting({ pipelineIds: [] }), [])
          assert.deepStrictEqual(yield* store.pipelineAccounting({ runId: rid("nobody") }), [])
        })))

    it.effect("succeededPipelines: succeeded ids; a keyless (content-addressed) row answers by id, a keyed row by its digests", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit([
            pipeline("c1", { state: "succeeded", specDigest: "s", seedDigest: "d1" }),
            pipeline("c2", { state: "failed", specDigest: "s", seedDigest: "d2" }),
            pipeline("k1", { key: "k1", state: "succeeded", specDigest: "s", seedDigest: "d3" }),
            pipeline("k2", { key: "k2", state: "running", specDigest: "s", seedDigest: "d4" })
          ])
          assert.isDefined(store.succeededPipelines)
          const index = yield* store.succeededPipelines!
          assert.strictEqual(index.size, 2)
          assert.isTrue(index.has(P("c1"), "s", "d1", true))
          assert.isFalse(index.has(P("c1"), "s", "d1", false)) // a keyed spec with that id: not known
          assert.isFalse(index.has(P("c2"), "s", "d2", true)) // failed: work left
          assert.isTrue(index.has(P("k1"), "s", "d3", false))
          assert.isTrue(index.has(P("k1"), "s", "d3", true))
          assert.isFalse(index.has(P("k1"), "s", "other", false)) // another seed under the key
          assert.isFalse(index.has(P("k1"), "other", "d3", false)) // another definition
          assert.isFalse(index.has(P("k2"), "s", "d4", false))
          assert.isFalse(index.has(P("nope"), "s", "d1", true))
          assert.strictEqual((yield* store.succeededPipelines!).size, 2)
        })))

    it.effect("stats: percentiles match the type-7 definition on random durations, per run and for all", () =>
      withStore((store) =>
        Effect.gen(function*() {
          // deterministic pseudo-random durations with ties, negatives excluded
          let x = 12345
          const next = () => (x = (x * 1103515245 + 12345) % 2147483648) % 997
          const rows = Array.from({ length: 777 }, (_, i) =>
            pipeline(`r${i}`, {
              runId: rid(i % 3 === 0 ? "run-b" : "run-a"),
              state: i % 7 === 0 ? "running" : i % 5 === 0 ? "interrupted" : "succeeded",
              startedAt: i % 11 === 0 ? null : 10_000 + i,
              endedAt: i % 7 === 0 ? null : 10_000 + i + next()
            }))
          yield* store.admit(rows)
          const expect = (runId: string | undefined) => {
            const ds = rows
              .filter((p) => (runId === undefined || p.runId === runId) && p.state !== "running" && p.startedAt !== null && p.endedAt !== null)
              .map((p) => p.endedAt! - p.startedAt!)
              .sort((a, b) => a - b)
            const q = (p: number) => {
              const h = (ds.length - 1) * p
              const lo = Math.floor(h)
              return ds[lo]! + (h - lo) * (ds[Math.min(lo + 1, ds.length - 1)]! - ds[lo]!)
            }
            return { p50: q(0.5), p95: q(0.95), p99: q(0.99) }
          }
          for (const runId of [rid("run-a"), rid("run-b"), undefined]) {
            const got = (yield* store.stats(runId)).latencyMs!
            const want = expect(runId)
            assert.closeTo(got.p50, want.p50, 1e-9)
            assert.closeTo(got.p95, want.p95, 1e-9)
            assert.closeTo(got.p99, want.p99, 1e-9)
          }
          // one timed pipeline: every percentile is its duration
          yield* store.admit([pipeline("solo", { runId: rid("run-c"), state: "failed", startedAt: 5, endedAt: 47 })])
          assert.deepStrictEqual((yield* store.stats(rid("run-c"))).latencyMs, { p50: 42, p95: 42, p99: 42 })
        })))

    it.effect("pipelinesPage: keyset pages across equal createdAt at a page boundary, filters, limits", () =>
      withStore((store) =>
        Effect.gen(function*() {
          // 25 pipelines; createdAt 100 for ids 05..14 so that pages of 7 split inside the tie
          const all = Array.from({ length: 25 }, (_, i) => {
            const id = `q${String(i).padStart(2, "0")}`
            return pipeline(id, {
              createdAt: i < 5 ? 50 + i : i < 15 ? 100 : 200 + i,
              runId: rid(i % 2 === 0 ? "run-1" : "run-2"),
              state: i % 4 === 0 ? "failed" : "succeeded"
            })
          })
          yield* store.admit([...all].reverse())
          // the order of the pages: (createdAt, pipelineId)
          const sorted = [...all].sort((a, b) => a.createdAt - b.createdAt || (a.pipelineId < b.pipelineId ? -1 : a.pipelineId > b.pipelineId ? 1 : 0))
          const walk = (o: { runId?: RunId; state?: "failed" }, limit: number) =>
            Effect.gen(function*() {
              const seen: Array<string> = []
              const sizes: Array<number> = []
              let after: { createdAt: number; pipelineId: PipelineId } | undefined
              for (;;) {
                const page = yield* store.pipelinesPage({ ...o, after, limit })
                seen.push(...page.pipelines.map((p) => p.pipelineId))
                sizes.push(page.pipelines.length)
                if (page.next === null) break
                const last = page.pipelines[page.pipelines.length - 1]!
                assert.deepStrictEqual(page.next, { createdAt: last.createdAt, pipelineId: last.pipelineId })
                after = page.next
              }
              return { seen, sizes }
            })
          const everything = yield* walk({}, 7)
          assert.deepStrictEqual(everything.seen, sorted.map((p) => p.pipelineId))
          assert.deepStrictEqual(everything.sizes, [7, 7, 7, 4])
          // the page boundary falls between the 7th and the 8th, both at createdAt 100
          const second = yield* store.pipelinesPage({ after: { createdAt: 100, pipelineId: sorted[6]!.pipelineId }, limit: 3 })
          assert.deepStrictEqual(second.pipelines.map((p) => p.pipelineId), sorted.slice(7, 10).map((p) => p.pipelineId))
          // exact fit: the last page knows there is no next one
          const exact = yield* walk({}, 5)
          assert.deepStrictEqual(exact.sizes, [5, 5, 5, 5, 5])
          const run2 = yield* walk({ runId: rid("run-2") }, 4)
          assert.deepStrictEqual(run2.seen, sorted.filter((p) => p.runId === "run-2").map((p) => p.pipelineId))
          const failed1 = yield* walk({ runId: rid("run-1"), state: "failed" }, 2)
          assert.deepStrictEqual(failed1.seen, sorted.filter((p) => p.runId === "run-1" && p.state === "failed").map((p) => p.pipelineId))
          const empty = yield* store.pipelinesPage({ limit: 0 })
          assert.deepStrictEqual(empty, { pipelines: [], next: null })
          const past = yield* store.pipelinesPage({ after: { createdAt: 1e12, pipelineId: P("") }, limit: 10 })
          assert.deepStrictEqual(past, { pipelines: [], next: null })
          for (const bad of [-1, 2.5, Number.NaN]) {
            assert.strictEqual((yield* Effect.flip(store.pipelinesPage({ limit: bad })))._tag, "ConfigError")
          }
          const one = (yield* store.pipelinesPage({ limit: 1 })).pipelines[0]!
          assert.instanceOf(one, PipelineRecord)
          assert.deepStrictEqual({ ...one }, { ...sorted[0]! })
        })))

    it.effect("completions: terminal pipelines per endedAt bucket, aligned on since, per run", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit([
            pipeline("c1", { state: "succeeded", endedAt: 1000 }),
            pipeline("c2", { state: "failed", endedAt: 1999 }),
            pipeline("c3", { state: "interrupted", endedAt: 2000 }),
            pipeline("c4", { state: "succeeded", endedAt: 4500 }),
            pipeline("c5", { state: "succeeded", endedAt: 999 }),
            pipeline("c6", { state: "running", endedAt: 1500 }), // not terminal
            pipeline("c7", { state: "succeeded", endedAt: null }), // no end time
            pipeline("c8", { state: "succeeded", endedAt: 1200, runId: rid("run-2") })
          ])
          assert.deepStrictEqual(yield* store.completions({ runId: rid("run-1"), bucketMs: 1000, since: 1000 }), [
            { startMs: 1000, count: 2 },
            { startMs: 2000, count: 1 },
            { startMs: 4000, count: 1 }
          ])
          // aligned on since (500): [500,1500) [1500,2500) [4500,5500)
          assert.deepStrictEqual(yield* store.completions({ runId: rid("run-1"), bucketMs: 1000, since: 500 }), [
            { startMs: 500, count: 2 },
            { startMs: 1500, count: 2 },
            { startMs: 4500, count: 1 }
          ])
          // no since: epoch-aligned, every run
          assert.deepStrictEqual(yield* store.completions({ bucketMs: 2000 }), [
            { startMs: 0, count: 4 },
            { startMs: 2000, count: 1 },
            { startMs: 4000, count: 1 }
          ])
          assert.deepStrictEqual(yield* store.completions({ runId: rid("nobody"), bucketMs: 10 }), [])
          for (const bad of [0, -5, 1.5]) {
            assert.strictEqual((yield* Effect.flip(store.completions({ bucketMs: bad })))._tag, "ConfigError")
          }
        })))

    it.effect("loadBundles: tasks and artifacts of many pipelines, payloads all / final / none", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const ids = Array.from({ length: 620 }, (_, i) => P(`b${String(i).padStart(4, "0")}`)) // > 500: two chunks
          yield* store.admit(ids.map((id) => pipeline(id)), ids.map((id) => artifact(id, -1, bytes(`"seed ${id}"`))))
          yield* Effect.forEach(ids, (id) =>
            Effect.forEach([1, 0], (seq) =>
              store.checkpoint({
                pipelineId: P(id),
                artifact: artifact(id, seq, bytes(`{"seq":${seq}}`), seq === 1),
                task: task(id, seq)
              })), { concurrency: 32, discard: true })
          // a superseded output at seq 0 of b0001: both versions are listed, each with its bytes
          yield* store.checkpoint({ pipelineId: P("b0001"), artifact: artifact("b0001", 0, bytes(`"again"`)) })
          const text = (u: Uint8Array | undefined) => (u === undefined ? undefined : new TextDecoder().decode(u))

          const full = yield* store.loadBundles([...ids, P("missing"), P("b0001")], { payloads: "all" })
          assert.strictEqual(full.size, 621)
          assert.deepStrictEqual(full.get(P("missing")), { pipelineId: P("missing"), tasks: [], artifacts: [] })
          const b1 = full.get(P("b0001"))!
          assert.deepStrictEqual(b1.tasks.map((t) => t.taskRunId), [`${P("b0001")}/0`, `${P("b0001")}/1`])
          assert.instanceOf(b1.tasks[0], TaskRecord)
          assert.deepStrictEqual(b1.artifacts.map((a) => [a.artifact.seq, text(a.payload), a.artifact.isFinal]), [
            [-1, `"seed ${P("b0001")}"`, false],
            [0, `{"seq":0}`, false],
            [0, `"again"`, false],
            [1, `{"seq":1}`, true]
          ])
          assert.deepStrictEqual(
            b1.artifacts.map((a) => a.artifact),
            yield* store.listArtifacts(P("b0001")),
            "the same metadata as listArtifacts"
          )
          assert.isTrue(ids.every((id) => full.get(P(id))!.tasks.length === 2 && full.get(P(id))!.artifacts.length >= 3))

          const finals = yield* store.loadBundles(ids.slice(0, 3), { payloads: "final" })
          assert.deepStrictEqual(finals.get(P("b0000"))!.artifacts.map((a) => [a.artifact.seq, text(a.payload)]), [
            [-1, undefined],
            [0, undefined],
            [1, `{"seq":1}`]
          ])
          assert.isTrue(finals.get(P("b0000"))!.artifacts.every((a) => a.artifact.available))

          const none = yield* store.loadBundles([P("b0002")], { payloads: "none", tasks: false })
          assert.deepStrictEqual(none.get(P("b0002"))!.tasks, [])
          assert.isTrue(none.get(P("b0002"))!.artifacts.every((a) => a.payload === undefined && a.artifact.available))

          const onlyFinal = yield* store.loadBundles([P("b0002"), P("b0003")], { payloads: "final", artifacts: "final", tasks: false })
          assert.deepStrictEqual(
            Array.from(onlyFinal.values()).map((b) => b.artifacts.map((a) => [a.artifact.pipelineId, a.artifact.seq, text(a.payload)])),
            [[[P("b0002"), 1, `{"seq":1}`]], [[P("b0003"), 1, `{"seq":1}`]]]
          )
          assert.strictEqual((yield* store.loadBundles([], { payloads: "all" })).size, 0)
        })))

    it.effect("loadBundles with payloadBytes: payloads up to the budget, always the first, the rest metadata only", () =>
      withStore((store) =>
        Effect.gen(function*() {
          // 620 pipelines (two SQLite chunks of 500) of three 10-byte payloads, the last final
          const names = Array.from({ length: 620 }, (_, i) => `q${String(i).padStart(4, "0")}`)
          const ids = names.map(P)
          const nameOf = new Map(names.map((n) => [P(n), n]))
          const ten = (id: string, seq: number) => bytes(JSON.stringify(`${nameOf.get(P(id))}:${seq}`.padEnd(8, "_")))
          yield* store.admit(ids.map((id) => pipeline(id)), ids.map((id) => artifact(id, -1, ten(id, -1))))
          yield* Effect.forEach(ids, (id) =>
            Effect.forEach([0, 1], (seq) =>
              store.checkpoint({ pipelineId: P(id), artifact: artifact(id, seq, ten(id, seq), seq === 1), task: task(id, seq) })), {
            concurrency: 32,
            discard: true
          })
          const text = (u: Uint8Array | undefined) => (u === undefined ? undefined : new TextDecoder().decode(u))
          const all = yield* store.loadBundles(ids, { payloads: "all", tasks: false })
          /** What a budgeted read returned: loaded payloads, and the structure the contract promises. */
          const check = (got: ReadonlyMap<string, { readonly artifacts: ReadonlyArray<LoadedArtifact> }>, final: boolean) => {
            let loaded = 0
            let partial = 0
            for (const id of ids) {
              const as = got.get(id)!.artifacts
              const full = all.get(P(id))!.artifacts.filter((a) => !final || a.artifact.isFinal)
              assert.deepStrictEqual(as.map((a) => a.artifact), full.map((a) => a.artifact), `every artifact listed (${id})`)
              assert.isTrue(as.every((a) => a.artifact.available), "available still true")
              const have = as.map((a) => a.payload !== undefined)
              const n = have.filter(Boolean).length
              assert.isTrue(have.every((h, i) => h === i < n), `a prefix of ${id}'s payloads`)
              if (n > 0 && n < as.length) partial++
              as.forEach((a, i) => {
                if (a.payload !== undefined) assert.strictEqual(text(a.payload), text(full[i]!.payload))
              })
              loaded += n
            }
            assert.isAtMost(partial, 1, "at most one pipeline partly loaded")
            return loaded
          }
          // all payloads are 10 bytes: a budget of b loads exactly floor(b / 10) of them (at least one)
          for (const budget of [0, 5, 10, 95, 4_000, 15_000, 18_590]) {
            const got = yield* store.loadBundles(ids, { payloads: "all", tasks: false, payloadBytes: budget })
            assert.strictEqual(check(got, false), Math.max(1, Math.floor(budget / 10)), `budget ${budget}`)
          }
          for (const budget of [18_600, 1e9, Infinity, undefined]) {
            const got = yield* store.loadBundles(ids, { payloads: "all", tasks: false, payloadBytes: budget })
            assert.strictEqual(check(got, false), 1860, `budget ${budget}`)
          }
          assert.strictEqual(check(yield* store.loadBundles(ids, { payloads: "all", tasks: false, payloadBytes: -1 }), false), 1)
          // only the payloads asked for count: finals only, listed with every artifact or only the finals
          const finals = yield* store.loadBundles(ids, { payloads: "final", tasks: false, payloadBytes: 3_000 })
          let finalsLoaded = 0
          for (const id of ids) {
            const as = finals.get(P(id))!.artifacts
            assert.strictEqual(as.length, 3)
            assert.isTrue(as.every((a) => a.payload === undefined || a.artifact.isFinal))
            finalsLoaded += as.filter((a) => a.payload !== undefined).length
          }
          assert.strictEqual(finalsLoaded, 300)
          const onlyFinal = yield* store.loadBundles(ids, { payloads: "final", artifacts: "final", tasks: false, payloadBytes: 5_555 })
          assert.strictEqual(check(onlyFinal, true), 555)
          // none asked for: the budget changes nothing
          const none = yield* store.loadBundles(ids.slice(0, 3), { payloads: "none", payloadBytes: 0 })
          assert.isTrue(Array.from(none.values()).every((b) => b.tasks.length === 2 && b.artifacts.every((a) => a.payload === undefined)))
        })))

    it.effect("loadBundles under journal summary: metadata without payloads", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit([pipeline("s1")], [artifact("s1", -1, bytes(`"seed"`))])
          yield* store.checkpoint({ pipelineId: P("s1"), artifact: artifact("s1", 0, bytes(`1`), true), task: task("s1", 0) })
          const b = (yield* store.loadBundles([P("s1")], { payloads: "all" })).get(P("s1"))!
          assert.deepStrictEqual(b.artifacts.map((a) => [a.artifact.seq, a.artifact.available, a.payload]), [
            [-1, false, undefined],
            [0, false, undefined]
          ])
          assert.strictEqual(b.tasks.length, 1)
        }), { journal: "summary" }))

    it.effect("errors lists failed pipelines latest first with their failure fields", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.admit([pipeline("e1"), pipeline("e2"), pipeline("ok")])
          const fail = (id: string, at: number) =>
            store.updatePipeline(P(id), {
              state: "failed",
              endedAt: at,
              updatedAt: at,
              error: { failedTask: "t1", errorType: "FatalError", errorMessage: `boom ${id}`, errorClass: "fatal" }
            })
          yield* fail("e1", 10)
          yield* fail("e2", 20)
          const rows = yield* store.errors()
          assert.deepStrictEqual(rows.map((r) => r.pipelineId), [P("e2"), P("e1")])
          assert.strictEqual(rows[0]!.errorMessage, "boom e2")
          assert.strictEqual(rows[0]!.failedTask, "t1")
          assert.strictEqual((yield* store.errors({ limit: 1 })).length, 1)
          assert.strictEqual((yield* store.errors({ runId: rid("run-9") })).length, 0)
          // settle clears the failure in one write
          yield* store.settlePipeline(P("e1"), { state: "succeeded", nTasksDone: 3, runId: rid("run-2"), endedAt: 30 })
          const e1 = Option.getOrThrow(yield* store.getPipeline(P("e1")))
          assert.strictEqual(e1.state, "succeeded")
          assert.strictEqual(e1.runId, "run-2")
          assert.strictEqual(e1.nTasksDone, 3)
          assert.isNull(e1.errorMessage)
          assert.isNull(e1.failedTask)
          assert.deepStrictEqual((yield* store.errors()).map((r) => r.pipelineId), [P("e2")])
        })))

    it.effect("events: latest N returned oldest first, filters, exact counts", () =>
      withStore((store) =>
        Effect.gen(function*() {
          for (let i = 0; i < 20; i++) {
            yield* store.emitEvent(event(i % 2 === 0 ? "even" : "odd", i < 10 ? "p1" : "p2", i, i < 15 ? "run-1" : "run-2"))
          }
          const last3 = yield* store.events({ limit: 3 })
          assert.deepStrictEqual(last3.map((e) => e.ts), [17, 18, 19])
          const even = yield* store.events({ kind: "even", limit: 2 })
          assert.deepStrictEqual(even.map((e) => e.ts), [16, 18])
          assert.deepStrictEqual((yield* store.events({ pipelineId: P("p1"), kind: "odd" })).map((e) => e.ts), [1, 3, 5, 7, 9])
          assert.strictEqual(yield* store.countEvents({ kind: "even" }), 10)
          assert.strictEqual(yield* store.countEvents({ runId: rid("run-2") }), 5)
          assert.strictEqual(yield* store.countEvents({ runId: rid("run-2"), kind: "odd", pipelineId: P("p2") }), 3)
          assert.strictEqual(yield* store.countEvents(), 20)
          assert.deepStrictEqual((yield* store.events({ limit: 1 }))[0]!.data, { n: 19 })
        })))

    it.effect("pipelinesBySpec: pipelines counted by definition, most first, every state and run; empty store empty", () =>
      withStore((store) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* store.pipelinesBySpec, [])
          yield* store.admit([
            ...Array.from({ length: 3 }, (_, i) => pipeline(`a${i}`, { specDigest: "aaaa", state: i === 0 ? "failed" : "succeeded" })),
            ...Array.from({ length: 5 }, (_, i) => pipeline(`b${i}`, { specDigest: "bbbb", runId: rid(i < 2 ? "run-1" : "run-2") })),
            pipeline("c0", { specDigest: "cccc", state: "pending" }),
            pipeline("d0", { specDigest: "0ddd", state: "interrupted" })
          ])
          assert.deepStrictEqual(yield* store.pipelinesBySpec, [
            { specDigest: "bbbb", pipelines: 5 },
            { specDigest: "aaaa", pipelines: 3 },
            { specDigest: "0ddd", pipelines: 1 },
            { specDigest: "cccc", pipelines: 1 }
          ])
          // a re-admission or a state change does not count a pipeline twice
          yield* store.admit([pipeline("b0", { specDigest: "bbbb", state: "succeeded", updatedAt: 2000 })])
          yield* store.settlePipeline(P("c0"), { state: "succeeded", nTasksDone: 3, runId: rid("run-2"), endedAt: 3000 })
          const after = yield* store.pipelinesBySpec
          assert.deepStrictEqual(after.map((s) => [s.specDigest, s.pipelines]), [["bbbb", 5], ["aaaa", 3], ["0ddd", 1], ["cccc", 1]])
        })))

    it.effect("runs: open, heartbeat, finish, latest, list, interruptStale", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const r1 = yield* store.openRun({ runId: rid("r1"), label: "first", config: { a: 1 }, startedAt: 100, meta: { host: "h" } })
          assert.strictEqual(r1.status, "running")
          yield* store.openRun({ runId: rid("r2"), startedAt: 200 })
          yield* store.openRun({ runId: rid("r3"), startedAt: 300 })
          yield* store.heartbeat(rid("r2"), 5000)
          yield* store.finishRun(rid("r3"), { status: "completed", endedAt: 400 })
          assert.strictEqual(Option.getOrThrow(yield* store.latestRun).runId, "r3")
          assert.deepStrictEqual((yield* store.listRuns).map((r) => r.runId), ["r1", "r2", "r3"])
          const stale = yield* store.interruptStale(1000, 5500)
          assert.deepStrictEqual(stale.map((r) => [r.runId, r.status, r.stopReason]), [["r1", "interrupted", "stale"]])
          const got = Option.getOrThrow(yield* store.getRun(rid("r1")))
          assert.deepStrictEqual(got.config, { a: 1 })
          assert.deepStrictEqual(got.meta, { host: "h" })
          assert.strictEqual(got.endedAt, 5500)
          assert.strictEqual(Option.getOrThrow(yield* store.getRun(rid("r3"))).status, "completed")
          assert.isTrue(Option.isNone(yield* store.getRun(rid("nope"))))
        })))

    it.effect("metrics upsert by run, scope and name", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.reportMetric({ runId: rid("r"), pipelineId: null, name: "acc", value: 0.5, display: "percent", updatedAt: 1 })
          yield* store.reportMetric({ runId: rid("r"), pipelineId: null, name: "acc", value: 0.75, display: "percent", updatedAt: 2 })
          yield* store.reportMetric({ runId: rid("r"), pipelineId: P("p1"), name: "acc", value: 1, updatedAt: 3 })
          yield* store.reportMetric({ runId: rid("r"), pipelineId: null, name: "phase", value: "scoring", label: "Phase", updatedAt: 4 })
          const run = yield* store.metrics({ runId: rid("r"), pipelineId: null })
          assert.deepStrictEqual(run.map((m) => [m.name, m.value, m.display]), [["acc", 0.75, "percent"], ["phase", "scoring", "text"]])
          assert.strictEqual((yield* store.metrics({ runId: rid("r") })).length, 3)
          assert.deepStrictEqual((yield* store.metrics({ runId: rid("r"), pipelineId: P("p1") })).map((m) => m.value), [1])
        })))

    it.effect("resource specs are stored with secrets masked", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* store.putResource({
            pool: "llm",
            resourceId: "r1",
            kind: "llm",
            spec: {
              options: { apiKey: "sk-1", baseUrl: "http://x", nested: { Authorization: "Bearer t", PASSWORD: "p" } },
              headers: [{ token: "abc" }],
              capacity: 2
            },
            health: { state: "ready", failures: 0 },
            updatedAt: 1
          })
          const [r] = yield* store.resources
          assert.deepStrictEqual(r!.spec, {
            options: { apiKey: "***", baseUrl: "http://x", nested: { Authorization: "***", PASSWORD: "***" } },
            headers: [{ token: "***" }],
            capacity: 2
          })
          assert.deepStrictEqual(r!.health, { state: "ready", failures: 0 })
          assert.strictEqual((yield* store.stats()).resources.length, 1)
          assert.isFalse(JSON.stringify(yield* store.resources).includes("sk-1"))
        })))

    // ---- the traversal capability ------------------------------------------------------------
    it.effect("traversal: plain rows read visit 0 and active; admit stores the initial state; base level", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const tv = store.traversal!
          yield* store.admit([pipeline("plain")], [artifact("plain", -1, bytes("s"))])
          yield* store.checkpoint({ pipelineId: P("plain"), artifact: artifact("plain", 0, bytes("a")), task: task("plain", 0) })
          const [seed, out] = yield* store.listArtifacts(P("plain"))
          assert.deepStrictEqual([seed!.visit, seed!.active, out!.visit, out!.active], [0, true, 0, true])
          const tasks = Chunk.toArray(yield* Stream.runCollect(store.streamTasks({ pipelineId: P("plain") })))
          assert.deepStrictEqual(tasks.map((t) => [t.visit, t.active]), [[0, true]])
          assert.isTrue(Option.isNone(yield* tv.visitState(P("plain"))))
          yield* controlled(store, "c0")
          assert.deepStrictEqual(Option.getOrThrow(yield* tv.visitState(P("c0"))), Traversal.initial(P("c0"), 3))
          assert.strictEqual(store.featureLevel, "base")
          assert.strictEqual((yield* store.stats()).handoffsTotal, 0)
        })))

    it.effect("traversal: a rewind commits atomically: handed_off source, payload, ledger, invalidation, state; visits-v1", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const tv = store.traversal!
          const s1 = yield* controlledToRewind(store, "c1")
          assert.strictEqual(store.featureLevel, "visits-v1")
          const vs = Option.getOrThrow(yield* tv.visitState(P("c1")))
          assert.strictEqual(vs.version, s1.version + 1)
          assert.deepStrictEqual(vs.pending, { seq: 0, visit: 1, input: addr("c1", "3"), attempts: 1 })
          // the output of seq 0 is history: not the station's output any more, still addressable
          assert.isTrue(Option.isNone(yield* store.getArtifact(P("c1"), 0)))
          const old = Option.getOrThrow(yield* tv.getArtifactById(addr("c1", "0")))
          assert.deepStrictEqual(old.payload, bytes("a0"))
          assert.isFalse(old.artifact.active)
          const payload = Option.getOrThrow(yield* tv.getArtifactById(addr("c1", "3")))
          assert.deepStrictEqual(payload.payload, bytes("feedback"))
          assert.isTrue(payload.artifact.active)
          const tasks = Chunk.toArray(yield* Stream.runCollect(store.streamTasks({ pipelineId: P("c1") })))
          assert.deepStrictEqual(tasks.map((t) => [t.seq, t.state, t.active]), [[0, "succeeded", false], [1, "handed_off", false]])
          const attempts = Chunk.toArray(yield* Stream.runCollect(store.streamAttempts({ pipelineId: P("c1") })))
          assert.deepStrictEqual(attempts.map((a) => a.outcome), ["handed_off"])
          const ledger = yield* tv.handoffs({ pipelineId: P("c1") })
          assert.strictEqual(ledger.length, 1)
          assert.deepStrictEqual(
            [ledger[0]!.operation, ledger[0]!.fromSeq, ledger[0]!.toSeq, ledger[0]!.entryArtifactId, ledger[0]!.entryReused],
            ["rewind", 1, 0, addr("c1", "3"), false]
          )
          assert.strictEqual((yield* store.stats()).handoffsTotal, 1)
          assert.strictEqual((yield* store.stats(rid("run-1"))).handoffsTotal, 1)
          assert.strictEqual((yield* store.stats(rid("run-other"))).handoffsTotal, 0)
          assert.strictEqual((yield* store.stats()).handoffsBudgeted, 1)
          // the revisit: a new occurrence, the station's output again; the old one unchanged
          const s3 = Traversal.succeed(vs, 0, addr("c1", "0#1"), 3)
          yield* store.checkpoint({
            pipelineId: P("c1"),
            artifact: { ...artifact("c1", 0, bytes("a0-again")), visit: 1 },
            task: { ...task("c1", 0), taskRunId: `${P("c1")}/0#1`, visit: 1 },
            traversal: { expectedVersion: vs.version, state: s3 }
          })
          const now = Option.getOrThrow(yield* store.getArtifact(P("c1"), 0))
          assert.deepStrictEqual([now.payload, now.artifact.visit], [bytes("a0-again"), 1])
          assert.deepStrictEqual(Option.getOrThrow(yield* tv.getArtifactById(addr("c1", "0#1"))).payload, bytes("a0-again"))
          assert.deepStrictEqual(Option.getOrThrow(yield* tv.getArtifactById(addr("c1", "0"))).payload, bytes("a0"))
          assert.isTrue(Option.isNone(yield* tv.getArtifactById(addr("c1", "0#2"))))
          assert.isTrue(Option.isNone(yield* tv.getArtifactById("not an address")))
          // an end at seq 1 reusing its input: the input becomes the only final artifact
          const end = Either.getOrThrow(Traversal.transition(s3, {
            operation: "end", fromSeq: 1, toSeq: "end", entry: addr("c1", "0#1"), payload: false, nTasks: 3, limit: 1
          }))
          yield* store.checkpoint({
            pipelineId: P("c1"),
            task: { ...task("c1", 1, "handed_off"), taskRunId: `${P("c1")}/1#1`, visit: 1 },
            pipeline: { state: "succeeded", updatedAt: 3000 },
            traversal: { expectedVersion: s3.version, state: end, handoff: ledgerRow("c1", "end", 1, null, addr("c1", "0#1")), final: addr("c1", "0#1") }
          })
          const finals = (yield* store.listArtifacts(P("c1"))).filter((a) => a.isFinal)
          assert.deepStrictEqual(finals.map((a) => [a.seq, a.visit]), [[0, 1]])
          assert.isNull(Option.getOrThrow(yield* tv.visitState(P("c1"))).pending)
          // the end is a ledger row (a transition) that spent no maxHandoffs budget
          const stats = yield* store.stats()
          assert.deepStrictEqual([stats.handoffsTotal, stats.handoffsBudgeted], [2, 1])
          const scoped = yield* store.stats(rid("run-1"))
          assert.deepStrictEqual([scoped.handoffsTotal, scoped.handoffsBudgeted], [2, 1])
        })))

    it.effect("traversal: a transition's handoffEvent records its pipeline.handoff event from the ledger row, after the unit's events; none when refused", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const s1 = yield* controlledToRewind(store, "he", "run-1", true)
          const s2 = Either.getOrThrow(Traversal.transition(s1, {
            operation: "rewind", fromSeq: 1, toSeq: 0, entry: addr("he", "3"), payload: true, nTasks: 3, limit: 5
          }))
          const unit = (expectedVersion: number) => ({
            pipelineId: P("he"),
            task: task("he", 1, "handed_off"),
            events: [event("own", "he", 2400)],
            traversal: {
              expectedVersion,
              state: s2,
              handoff: ledgerRow("he", "rewind", 1, 0, addr("he", "3")),
              entry: { ...artifact("he", 3, bytes("feedback")), taskName: "t1" },
              invalidateFrom: 0,
              handoffEvent: { visit: 0, handoffs: 1, limit: 5 }
            }
          })
          // refused (a stale version): neither the unit's events nor the transition's
          const refused = yield* Effect.flip(store.checkpoint(unit(s1.version + 3)))
          assert.isDefined(Traversal.conflictOf(refused))
          assert.strictEqual(yield* store.countEvents({ pipelineId: P("he") }), 0)
          yield* store.checkpoint(unit(s1.version))
          const events = yield* store.events({ pipelineId: P("he") })
          assert.deepStrictEqual(events.map((e) => [e.kind, e.pipelineId, e.runId, e.ts]), [
            ["own", P("he"), "run-1", 2400],
            ["pipeline.handoff", P("he"), "run-1", 2500]
          ])
          assert.isTrue(events[0]!.eventId < events[1]!.eventId)
          // the data, key order included (what a raw reader of the stored JSON sees)
          assert.strictEqual(
            JSON.stringify(events[1]!.data),
            JSON.stringify({
              operation: "rewind",
              fromSeq: 1,
              fromTask: "t1",
              visit: 0,
              toSeq: 0,
              toTask: "t0",
              entry: addr("he", "3"),
              entryReused: false,
              reason: "test",
              handoffs: 1,
              limit: 5
            })
          )
          assert.strictEqual(yield* store.countEvents({ kind: "pipeline.handoff" }), 1)
          // facts without a ledger row record nothing
          const s3 = Traversal.succeed(s2, 0, addr("he", "0#1"), 3)
          yield* store.checkpoint({
            pipelineId: P("he"),
            traversal: { expectedVersion: s2.version, state: s3, handoffEvent: { visit: 1, handoffs: 1, limit: 5 } }
          })
          assert.strictEqual(yield* store.countEvents({ pipelineId: P("he") }), 2)
        })))

    it.effect("traversal: task rows stream by station, then visit (0 first, numerically), then taskRunId", () =>
      withStore((store) =>
        Effect.gen(function*() {
          yield* controlledToRewind(store, "o1")
          // the revisits' run ids sort before visit 0's and "#10" before "#2" as text
          for (const visit of [10, 2, 1]) {
            yield* store.checkpoint({ pipelineId: P("o1"), task: { ...task("o1", 0), taskRunId: `${P("o1")}/0#${visit}`, visit } })
          }
          yield* store.checkpoint({ pipelineId: P("o1"), task: { ...task("o1", 1), taskRunId: `${P("o1")}/1#1`, visit: 1 } })
          const order = [[0, 0], [0, 1], [0, 2], [0, 10], [1, 0], [1, 1]]
          const streamed = Chunk.toArray(yield* Stream.runCollect(store.streamTasks({ pipelineId: P("o1") })))
          assert.deepStrictEqual(streamed.map((t) => [t.seq, t.visit]), order)
          assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(store.streamTasks())).map((t) => [t.seq, t.visit]), order)
          const bundle = (yield* store.loadBundles([P("o1")], { payloads: "none" })).get(P("o1"))!
          assert.deepStrictEqual(bundle.tasks.map((t) => [t.seq, t.visit]), order)
        })))

    it.effect("traversal: a stale version is refused with a typed conflict and writes nothing; other units commit", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const tv = store.traversal!
          const s0 = yield* controlled(store, "v1")
          yield* store.admit([pipeline("plain2")])
          const s1 = Traversal.succeed(s0, 0, addr("v1", "0"), 3)
          const stale = {
            pipelineId: P("v1"),
            artifact: artifact("v1", 0, bytes("late")),
            task: task("v1", 0),
            events: [event("late", "v1")],
            traversal: { expectedVersion: s0.version + 7, state: s1 }
          }
          // submitted together: the stale unit fails alone
          const [exit, plain] = yield* Effect.all([
            Effect.exit(store.checkpoint(stale)),
            Effect.exit(store.checkpoint({ pipelineId: P("plain2"), task: task("plain2", 0) }))
          ], { concurrency: "unbounded" })
          assert.isTrue(Exit.isSuccess(plain))
          assert.isTrue(Exit.isFailure(exit))
          const error = Exit.isFailure(exit) ? Option.getOrThrow(Cause.failureOption(exit.cause)) : undefined
          const c = Traversal.conflictOf(error)
          assert.isDefined(c)
          assert.deepStrictEqual([c!.expected, c!.actual], [s0.version + 7, s0.version])
          assert.deepStrictEqual(Option.getOrThrow(yield* tv.visitState(P("v1"))), s0)
          assert.deepStrictEqual((yield* store.listArtifacts(P("v1"))).map((a) => a.seq), [-1])
          assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamTasks({ pipelineId: P("v1") }))), 0)
          assert.strictEqual(yield* store.countEvents({ pipelineId: P("v1") }), 0)
          // a pipeline without a state: refused too
          const none = yield* Effect.flip(store.checkpoint({ pipelineId: P("plain2"), traversal: { expectedVersion: 0, state: s1 } }))
          assert.isNull(Traversal.conflictOf(none)!.actual)
          // two writes of one pipeline in one batch chain their versions
          const s2 = Traversal.reserveAttempt(s1)
          yield* Effect.all([
            store.checkpoint({ pipelineId: P("v1"), traversal: { expectedVersion: s0.version, state: s1 } }),
            store.checkpoint({ pipelineId: P("v1"), traversal: { expectedVersion: s1.version, state: s2 } })
          ], { concurrency: "unbounded" })
          assert.deepStrictEqual(Option.getOrThrow(yield* tv.visitState(P("v1"))), s2)
        })))

    it.effect("traversal: the ledger reads oldest first; limit keeps the newest N; filters by pipeline and run", () =>
      withStore((store) =>
        Effect.gen(function*() {
          const tv = store.traversal!
          yield* controlledToRewind(store, "l1")
          yield* controlledToRewind(store, "l2", "run-2", false, 2600)
          const all = yield* tv.handoffs()
          assert.deepStrictEqual(all.map((h) => h.pipelineId), [P("l1"), P("l2")])
          // oldest first by time (handoff ids are local to a database: a suite's members each count their own)
          assert.isTrue(all[0]!.ts < all[1]!.ts)
          assert.deepStrictEqual((yield* tv.handoffs({ limit: 1 })).map((h) => h.pipelineId), [P("l2")])
          assert.deepStrictEqual((yield* tv.handoffs({ limit: 5 })).map((h) => h.pipelineId), [P("l1"), P("l2")])
          assert.deepStrictEqual(yield* tv.handoffs({ limit: 0 }), [])
          assert.deepStrictEqual((yield* tv.handoffs({ pipelineId: P("l1") })).map((h) => h.pipelineId), [P("l1")])
          assert.deepStrictEqual((yield* tv.handoffs({ runId: rid("run-2") })).map((h) => h.pipelineId), [P("l2")])
          assert.strictEqual((yield* store.stats(rid("run-2"))).handoffsTotal, 1)
          const bad = yield* Effect.flip(tv.handoffs({ limit: -1 }))
          assert.strictEqual(bad._tag, "ConfigError")
        })))

    it.effect("traversal: a failed write changes nothing (state, ledger, level)", () =>
      withStore((store, h) =>
        Effect.gen(function*() {
          const tv = store.traversal!
          const s1 = yield* controlledToRewind(store, "f1", "run-1", true)
          yield* h.injectWriteFailure(true)
          const exit = yield* Effect.exit(rewindFrom(store, "f1", s1, "run-1"))
          yield* h.injectWriteFailure(false)
          assert.isTrue(Exit.isFailure(exit))
          assert.deepStrictEqual(Option.getOrThrow(yield* tv.visitState(P("f1"))), s1)
          assert.deepStrictEqual(yield* tv.handoffs(), [])
          assert.strictEqual(store.featureLevel, "base")
          assert.isTrue(Option.isSome(yield* store.getArtifact(P("f1"), 0)))
        })))

    it.effect("invalid options are a ConfigError", () => {
      const h = makeHarness()
      return Effect.gen(function*() {
        const e = yield* Effect.flip(Effect.scoped(Layer.build(h.layer({ batchSize: 0 }))))
        assert.strictEqual((e as { _tag: string })._tag, "ConfigError")
      })
    })
  })
}

