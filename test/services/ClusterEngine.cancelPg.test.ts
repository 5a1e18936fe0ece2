/**
 * Issue 17 §3, `running: cancel` on the cluster engine: a run marked cancelled in the store's
 * `assay_meta` (`cancelMarks.ts`, key `cancel/<runId>`) stops its pipelines on the runners at
 * their next task boundary. Here a claimed window (window claims on, `window.ts`: the runners'
 * default) over the test harness's Postgres: its pipelines' first task is in its call when the
 * run is marked and the runner reads the marks; the call commits, the next task does not run,
 * each row settles `interrupted` at its cursor (its checkpoint kept: resumable), and the
 * window answers `interrupted` for each.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer, Option, Redacted } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import * as CancelMarks from "../../src/services/internal/cluster/cancelMarks.js"
import { makeTaskEnv } from "../../src/services/internal/cluster/task.js"
import { runWindow } from "../../src/services/internal/cluster/window.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import { windowKey } from "../../src/services/internal/cluster/workflow.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

describe("cluster: a run's cancel mark in assay_meta (issue 17 §3)", () => {
  it.scoped("a claimed window's pipelines stop at their next task boundary once the runner read the mark: interrupted, checkpoints kept", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // the store's meta table (a Postgres store's migration creates it; the store here is in memory)
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS assay_meta (key text PRIMARY KEY, value text NOT NULL)`)
      yield* WindowClaims.createTable
      const calls = new Map<string, number>()
      const add = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1)
      const gate = yield* Deferred.make<void>()
      const a = Task.make("a", (n: number, ctx) => Effect.zipRight(Effect.sync(() => add(`a/${ctx.pipelineId}`)), Effect.as(Deferred.await(gate), n + 1)))
      const b = Task.make("b", (n: number, ctx) => Effect.sync(() => (add(`b/${ctx.pipelineId}`), n * 2)))
      const specs: ReadonlyArray<AnySpec> = [1, 2].map((n) => Pipeline.make("cancelled", a, b).bind(n))
      const store = yield* Store
      const runId = "run-c" as RunId
      const now = yield* Clock.currentTimeMillis
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit(specs.map((s) => Rows.admissionRow(s, 0, undefined, runId, now)), specs.map((s) => Rows.seedArtifact(s, runId, now)))
      yield* store.flush
      const env = yield* makeTaskEnv({ store, pools: yield* Pool.Pools, bus: yield* makeBus, concurrency: 8 })
      const claims = WindowClaims.make(sql, { ttl: "1 hour", heartbeat: "1 second", clock: yield* Effect.clock })!
      const key = windowKey({ pipelineIds: specs.map((s) => s.pipelineId) })
      const window = yield* Effect.fork(runWindow(env, claims, undefined, key, specs))
      yield* Effect.repeat(turn, { until: () => calls.size === 2 })

      // the submitter marks the run (the first reason stays); the runner reads the marks of its runs
      const marks = CancelMarks.makePg(sql)
      yield* marks.mark(runId, "study_stop:manual")
      yield* marks.mark(runId, "study_stop:sigint")
      yield* CancelMarks.refresh(marks, env.cancelled, [runId, "run-other" as RunId])
      assert.deepStrictEqual([...env.cancelled], [[runId, "study_stop:manual"]])
      const stored = yield* sql<{ key: string; value: string }>`SELECT key, value FROM assay_meta WHERE key LIKE 'cancel/%'`
      assert.deepStrictEqual(stored.map((r) => [r.key, r.value]), [[`cancel/${runId}`, "study_stop:manual"]])

      // the calls under way commit; task b is not called
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* Fiber.join(window), ["interrupted", "interrupted"])
      assert.deepStrictEqual([...calls.keys()].filter((k) => k.startsWith("b/")), [])
      for (const spec of specs) {
        const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
        assert.deepStrictEqual([row.state, row.nTasksDone, row.runId], ["interrupted", 1, runId])
        assert.isTrue(Option.isSome(yield* store.getArtifact(spec.pipelineId, 0)), "task a's checkpoint is kept")
      }
      // the window run again (a replay) runs nothing of a pipeline settled so
      assert.deepStrictEqual(yield* runWindow(env, claims, undefined, key, specs), ["interrupted", "interrupted"])
      assert.strictEqual(calls.size, 2)
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), pgLayer("cancel_window")))), 180_000)
})
