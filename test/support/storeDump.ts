/**
 * Every row and event of a store in a stable, schedule-free form, to compare what two runs
 * wrote (the runner's fast path against its general path: test/services/Runner.fastPath*.ts).
 */
import { Chunk, Effect, Layer, Stream } from "effect"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import { Store, type StoreService } from "../../src/services/Store.js"

/**
 * The rows of `store` (pipelines, tasks, attempts, artifacts, events of pipelines), each as
 * JSON, sorted: the run id `runId` replaced by `RUN`, times (`…At`, `ts`, `durationMs`,
 * `heldMs`) by `T`, surrogate ids dropped (they follow the commit order), and each string
 * matching one of `masks` replaced by its replacement (`[pattern, replacement]`).
 */
export const dumpStore = (
  store: StoreService,
  runId: string,
  masks: ReadonlyArray<readonly [RegExp, string]> = []
) =>
  Effect.gen(function*() {
    const all = <A>(s: Stream.Stream<A, unknown>) => Effect.map(Stream.runCollect(s), Chunk.toArray)
    const pipelines = yield* all(store.streamPipelines())
    const tasks = yield* all(store.streamTasks())
    const attempts = yield* all(store.streamAttempts())
    const artifacts: Array<unknown> = []
    for (const p of pipelines) artifacts.push(...(yield* all(store.streamArtifacts({ pipelineId: p.pipelineId }))))
    const events = yield* all(store.streamEvents())
    const norm = (rows: ReadonlyArray<unknown>, drop: ReadonlyArray<string>) =>
      rows.map((r) => {
        const o: Record<string, unknown> = { ...(r as Record<string, unknown>) }
        for (const k of drop) delete o[k]
        // times: when a pipeline is admitted depends on the schedule (the fast path ends its
        // pipelines sooner, so the retried ones start at another TestClock time)
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
    return {
      pipelines: norm(pipelines, []),
      tasks: norm(tasks, []),
      // surrogate ids follow the commit order, which differs between the paths
      attempts: norm(attempts, ["attemptId", "id"]),
      artifacts: norm(artifacts, ["artifactId", "id"]),
      events: norm(events.filter((e) => e.pipelineId !== null), ["eventId", "id"])
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
