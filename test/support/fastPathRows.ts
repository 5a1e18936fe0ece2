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

/** A string pattern and what each match becomes in a dump (e.g. lease ids, granted in schedule order). */
export type Mask = readonly [RegExp, string]

/**
 * Rows as sorted JSON lines, `drop`ped keys removed, times (`…At`, `ts`, `durationMs`,
 * `heldMs`) as `T`, the run id as `RUN`, each `masks` pattern replaced.
 */
const norm = (runId: string, rows: ReadonlyArray<unknown>, drop: ReadonlyArray<string>, masks: ReadonlyArray<Mask>) =>
  rows.map((r) => {
    const o: Record<string, unknown> = { ...(r as Record<string, unknown>) }
    for (const k of drop) delete o[k]
    let line = JSON.stringify(o, (k, v) =>
      v instanceof Uint8Array
        ? Buffer.from(v).toString("base64")
        : typeof v === "number" && (/At$/.test(k) || k === "ts" || k === "durationMs" || k === "heldMs")
        ? "T"
        : v)
      .split(runId).join("RUN")
      .replace(/(:RUN:)\d+/g, "$1T")
    for (const [pattern, replacement] of masks) line = line.replace(pattern, replacement)
    return line
  }).sort()

/**
 * Every row and event of a store in a stable order; with `traversal`, each pipeline's
 * traversal state, the entry payload its pending entry names (read back by address, as a
 * resume reads it) and its handoff ledger too. Surrogate ids follow the commit order, which
 * differs between the paths: they are left out.
 */
export const dump = (store: StoreService, runId: string, traversal = false, masks: ReadonlyArray<Mask> = []) =>
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
    const n = (rows: ReadonlyArray<unknown>, drop: ReadonlyArray<string>) => norm(runId, rows, drop, masks)
    return {
      pipelines: n(pipelines, []),
      tasks: n(yield* all(store.streamTasks()), []),
      attempts: n(yield* all(store.streamAttempts()), ["attemptId", "id"]),
      artifacts: n(artifacts, ["artifactId", "id"]),
      events: n(events.filter((e) => e.pipelineId !== null), ["eventId", "id"]),
      states: n(states, []),
      ledger: n(ledger, ["handoffId", "id"])
    }
  })

/**
 * A SQLite store at `filename` whose `checkpoint` calls are recorded in `calls` (their pipeline
 * ids). `general`: the service is a copy of the store front's object, so the runner finds no
 * callback submission for it and takes its general path (one fiber per pipeline); otherwise
 * it is the front's own object (the fast path never calls `checkpoint` for a pipeline it ends).
 */
export const countedSqliteStore = (filename: string, general: boolean, calls: Array<string>) =>
  Layer.effect(
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
  const counted = countedSqliteStore(filename, general, calls)
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
