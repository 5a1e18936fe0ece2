/**
 * What the fast-path tests compare (test/services/Runner.fastPath*.test.ts): a run on SQLite
 * through the runner's fast path or, forced, through its general path, and every row it wrote.
 *
 * The general path is forced by a store that is a copy of the SQLite store's service (not the
 * object the store front built, so the runner finds no callback submission for it). Times are
 * compared as present or absent only: the two paths schedule differently, so a retried
 * pipeline starts at another `TestClock` time.
 */
import { Chunk, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
import type * as Pipeline from "../../src/domain/Pipeline.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"

/** Rows as sorted JSON lines, `drop`ped keys removed, times as `T`, the run id as `RUN`. */
const norm = (runId: string, rows: ReadonlyArray<unknown>, drop: ReadonlyArray<string>) =>
  rows.map((r) => {
    const o: Record<string, unknown> = { ...(r as Record<string, unknown>) }
    for (const k of drop) delete o[k]
    return JSON.stringify(o, (k, v) =>
      v instanceof Uint8Array
        ? Buffer.from(v).toString("base64")
        : typeof v === "number" && (/At$/.test(k) || k === "ts" || k === "durationMs")
        ? "T"
        : v)
      .split(runId).join("RUN")
      .replace(/(:RUN:)\d+/g, "$1T")
  }).sort()

/**
 * Every row and event of a store in a stable order; with `traversal`, each pipeline's
 * traversal state, the entry payload its pending entry names (read back by address, as a
 * resume reads it) and its handoff ledger too. Surrogate ids follow the commit order, which
 * differs between the paths: they are left out.
 */
export const dump = (store: StoreService, runId: string, traversal = false) =>
  Effect.gen(function*() {
    const all = <A>(s: Stream.Stream<A, unknown>) => Effect.map(Stream.runCollect(s), Chunk.toArray)
    const pipelines = yield* all(store.streamPipelines())
    const artifacts: Array<unknown> = []
    const states: Array<unknown> = []
    const ledger: Array<unknown> = []
    for (const p of pipelines) {
      artifacts.push(...(yield* all(store.streamArtifacts({ pipelineId: p.pipelineId }))))
      if (!traversal) continue
      const t = store.traversal!
      const vs = yield* t.visitState(p.pipelineId)
      states.push({ pipelineId: p.pipelineId, state: Option.getOrNull(vs) })
      ledger.push(...(yield* t.handoffs({ pipelineId: p.pipelineId })))
      if (Option.isSome(vs) && vs.value.pending !== null) {
        const entry = yield* t.getArtifactById(vs.value.pending.input)
        states.push({
          pipelineId: p.pipelineId,
          entry: Option.getOrNull(Option.map(entry, ({ artifact: { artifactId: _id, ...rest } }) => rest))
        })
      }
    }
    const events = yield* all(store.streamEvents())
    return {
      pipelines: norm(runId, pipelines, []),
      tasks: norm(runId, yield* all(store.streamTasks()), []),
      attempts: norm(runId, yield* all(store.streamAttempts()), ["attemptId", "id"]),
      artifacts: norm(runId, artifacts, ["artifactId", "id"]),
      events: norm(runId, events.filter((e) => e.pipelineId !== null), ["eventId", "id"]),
      states: norm(runId, states, []),
      ledger: norm(runId, ledger, ["handoffId", "id"])
    }
  })

/**
 * Runs `specs` on a SQLite file (concurrency 4, at most 8 admitted), through the fast path or
 * (`general`) the general path, advancing the `TestClock` 10 s; returns every row
 * ({@link dump}), the report without its run id and times, and the pipelines whose
 * checkpoints went through `store.checkpoint` (once per call: the fast path never calls it).
 */
export const runOn = (
  filename: string,
  general: boolean,
  specs: Stream.Stream<Pipeline.PipelineSpec<any, any, any, any>, unknown> | Iterable<Pipeline.PipelineSpec<any, any, any, any>>,
  options: Runner.RunOptions = {},
  traversal = false
) => {
  const calls: Array<string> = []
  // the same object the front built, its `checkpoint` counted
  const counted = Layer.effect(
    Store,
    Effect.map(Store, (s): StoreService => {
      const checkpoint = s.checkpoint
      const target: StoreService = general ? { ...s } : s
      ;(target as { checkpoint: StoreService["checkpoint"] }).checkpoint = (unit) => {
        calls.push(unit.pipelineId)
        return checkpoint(unit)
      }
      return target
    })
  ).pipe(Layer.provide(SqliteStore.layer({ filename })))
  const layer = Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4, maxAdmitted: 8 }),
    Layer.mergeAll(counted, Pool.layer([]))
  )
  return Effect.gen(function*() {
    const fiber = yield* Effect.fork(Runner.run(specs as Stream.Stream<Pipeline.PipelineSpec<any, any, any, any>>, options))
    yield* TestClock.adjust("10 seconds")
    const report = yield* Fiber.join(fiber)
    const store = yield* Store
    const rows = yield* dump(store, report.runId, traversal)
    const { durationMs: _d, runId: _r, startedAt: _s, ...summary } = report
    return { rows, summary: JSON.stringify(summary), calls }
  }).pipe(Effect.provide(layer))
}
