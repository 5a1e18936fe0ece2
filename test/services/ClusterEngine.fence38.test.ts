/**
 * fence38 (break38 F4): a zombie's late commit must not take a re-admitted row back to its old
 * run. A checkpoint unit is written only while its pipeline's row is `running` under the
 * unit's run (the Postgres driver's commit, both its plain and its unit-by-unit path); a late
 * commit of an execution that lost the pipeline writes its attempts and events only.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer, Option, Redacted } from "effect"
import { FatalError } from "../../src/domain/Errors.js"
import type { PipelineId, RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as Traversal from "../../src/domain/Traversal.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import { makeTaskEnv } from "../../src/services/internal/cluster/task.js"
import { runWindow } from "../../src/services/internal/cluster/window.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import { windowKey } from "../../src/services/internal/cluster/workflow.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import type { CheckpointUnit, StoreService } from "../../src/services/Store.js"
import { artifact, attempt, controlled, pipeline, task } from "../layers/StoreContract.js"
import { type AnySpec, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

/** The window claims of one "process" on the client in context (table created). */
const claimsOn = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* WindowClaims.createTable
  return WindowClaims.make(sql, { ttl: "1 minute", heartbeat: "10 seconds", clock: yield* Effect.clock })!
})

/** Ages the claim rows of `keys` past any TTL (as if their holder froze for an hour). */
const age = (keys: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe(`UPDATE ${WindowClaims.TABLE} SET expires_at = now() - interval '1 hour' WHERE pipeline_key = ANY($1::text[])`, [
      keys
    ]))

/** Opens run `runId` in `store`. */
const openRun = (store: StoreService, runId: RunId) =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined }))

/** The pipeline's row as `run|state|cursor`. */
const rowOf = (store: StoreService, id: string) =>
  Effect.map(store.getPipeline(id as PipelineId), (r) => {
    const p = Option.getOrThrow(r)
    return `${p.runId}|${p.state}|${p.nTasksDone}`
  })

/** The pipeline's task rows as `seq|state|active|run`, in seq and write order. */
const tasksOf = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql.unsafe<{ seq: number; state: string; active: number; run_id: string }>(
        `SELECT seq, state, active, run_id FROM assay_tasks WHERE pipeline_id = $1 ORDER BY seq, ended_at, task_run_id`,
        [id]
      ),
      (rs) => rs.map((r) => `${r.seq}|${r.state}|${r.active}|${r.run_id}`)
    ))

/** The decoded JSON output at `seq` (`undefined`: none). */
const outputAt = (store: StoreService, id: string, seq: number) =>
  Effect.map(store.getArtifact(id as never, seq), (a) =>
    Option.getOrUndefined(Option.map(a, (x) => JSON.parse(new TextDecoder().decode(x.payload!)) as unknown)))

/** Turns until `check` holds. */
const until = (check: () => boolean) => Effect.repeat(turn, { until: check })

const R1 = "run-f38-1" as RunId
const R2 = "run-f38-2" as RunId

describe("fence38: a late commit of an execution that lost its pipeline leaves the row alone (break38 F4)", () => {
  it.live("a zombie thawed after a takeover, a failure under run 1 and a re-admission by run 2 commits its call: the row stays run 2's, run 2's own call wins", () =>
    Effect.gen(function*() {
      const thaw = yield* Deferred.make<void>()
      const gate3 = yield* Deferred.make<void>()
      let cCalls = 0
      const a = Task.make("a", (n: number) => Effect.succeed(n + 1))
      const b = Task.make("b", (n: number) => Effect.succeed(n * 2))
      // task c: the 1st call (runner Z, run 1) freezes inside it and answers +100 once thawed;
      // the 2nd (runner 2, run 1, after the takeover) fails for good (a 400); the 3rd (runner
      // 3, run 2, after the re-admission) answers +200 once let go
      const c = Task.make("c", (n: number) =>
        Effect.suspend(() => {
          cCalls++
          if (cCalls === 1) return Effect.as(Deferred.await(thaw), n + 100)
          if (cCalls === 2) return Effect.fail(new FatalError({ message: "400 (test)" }))
          return Effect.as(Deferred.await(gate3), n + 200)
        }))
      const specs: ReadonlyArray<AnySpec> = [Pipeline.make("zombie", a, b, c).bind(1)]
      const spec = specs[0]!
      const id = spec.pipelineId
      const url = pg.url("f38_zombie")
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      const sql = yield* SqlClient.SqlClient
      const pools = yield* Pool.Pools
      const now = yield* Clock.currentTimeMillis
      yield* openRun(store, R1)
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, R1, now)], [Rows.seedArtifact(spec, R1, now)])
      yield* store.flush
      const key = windowKey({ pipelineIds: [id] })
      // 1. runner Z freezes inside c's first call
      const envZ = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      const wcZ = yield* claimsOn
      const zombie = yield* Effect.fork(runWindow(envZ, wcZ, sql, key, specs))
      yield* until(() => cCalls === 1)
      // 2. its claim expires; runner 2 takes the window over and c fails: p fails under run 1
      yield* age([id])
      const env2 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      assert.deepStrictEqual(yield* runWindow(env2, yield* claimsOn, sql, key, specs), ["failed"])
      assert.strictEqual(yield* rowOf(store, id), `${R1}|failed|2`)
      // Z's renewal learns of the takeover (its deadline passes)
      yield* wcZ.renewAll
      // 3. run 2 admits p again at its cursor, and runner 3's window calls c (held)
      yield* openRun(store, R2)
      const stored = Option.getOrThrow(yield* store.getPipeline(id))
      yield* store.admit([Rows.admissionRow(spec, 2, stored, R2, yield* Clock.currentTimeMillis)])
      yield* store.flush
      const env3 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      const third = yield* Effect.fork(runWindow(env3, yield* claimsOn, sql, key, specs))
      yield* until(() => cCalls === 3)
      assert.strictEqual(yield* rowOf(store, id), `${R2}|running|2`)
      // 4. Z thaws: its call under way answers and it commits c (its window ends)
      yield* Deferred.succeed(thaw, undefined)
      yield* Fiber.join(zombie)
      yield* store.flush
      // the row is still run 2's, running at 2: not taken back to run 1, not succeeded
      assert.strictEqual(yield* rowOf(store, id), `${R2}|running|2`, "the row after the zombie's commit")
      // no task row nor output of Z at seq 2 (run 2's submitter would report it as its own)
      assert.deepStrictEqual(yield* tasksOf(id), [`0|succeeded|1|${R1}`, `1|succeeded|1|${R1}`, `2|failed|1|${R1}`])
      assert.isUndefined(yield* outputAt(store, id, 2), "no output at seq 2")
      // 5. run 2's own call answers: it wins the checkpoint, the row ends succeeded under run 2
      yield* Deferred.succeed(gate3, undefined)
      assert.deepStrictEqual(yield* Fiber.join(third), ["succeeded"])
      assert.strictEqual(yield* rowOf(store, id), `${R2}|succeeded|3`)
      assert.deepStrictEqual(yield* outputAt(store, id, 2), (1 + 1) * 2 + 200)
      assert.deepStrictEqual(yield* tasksOf(id), [
        `0|succeeded|1|${R1}`,
        `1|succeeded|1|${R1}`,
        `2|failed|1|${R1}`,
        `2|succeeded|1|${R2}`
      ])
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(ArtifactBackends.layerInline, Pool.layer([]), pgLayer("f38_zombie")))), 180_000)
})

/** `value` as stored JSON. */
const enc = (value: string) => new TextEncoder().encode(JSON.stringify(value))
const P = (s: string) => s as PipelineId

/** A late unit of run `run`: `id`'s task `seq` succeeded with `value`, the last (`succeeded`, owner `run`). */
const lateUnit = (id: string, seq: number, value: string, run: RunId, extra: Partial<CheckpointUnit> = {}): CheckpointUnit => ({
  pipelineId: P(id),
  artifact: { ...artifact(id, seq, enc(value), true), runId: run },
  task: { ...task(id, seq), taskRunId: `${id}/${seq}/${run}`, runId: run },
  pipeline: { nTasksDone: seq + 1, state: "succeeded", runId: run, endedAt: 3000, updatedAt: 3000, error: null, attemptsDelta: 1 },
  attempts: [{ ...attempt(id, seq, 1), taskRunId: `${id}/${seq}/${run}`, runId: run }],
  ...extra
})

/** The attempts of `id` as `seq|run`. */
const attemptsOf = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql.unsafe<{ seq: number; run_id: string }>(
        `SELECT seq, run_id FROM assay_attempts WHERE pipeline_id = $1 ORDER BY attempt_id`,
        [id]
      ),
      (rs) => rs.map((r) => `${r.seq}|${r.run_id}`)
    ))

describe("fence38: the Postgres driver's checkpoint fence", () => {
  it.live("a unit of another run, or of a row no longer running, writes its attempts only; the row's own run, and an admission riding its unit, are written", () =>
    Effect.gen(function*() {
      const url = pg.url("f38_store")
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      // re-admitted by run 2 at cursor 2: run 1's late success of seq 2 is fenced
      yield* store.admit([pipeline("re", { runId: R1, nTasksDone: 2 })])
      yield* store.admit([pipeline("re", { runId: R2, nTasksDone: 2, updatedAt: 2000 })])
      yield* store.checkpoint(lateUnit("re", 2, "late", R1))
      assert.strictEqual(yield* rowOf(store, "re"), `${R2}|running|2`)
      assert.deepStrictEqual(yield* tasksOf("re"), [])
      assert.isUndefined(yield* outputAt(store, "re", 2))
      yield* store.flush
      assert.deepStrictEqual(yield* attemptsOf("re"), [`2|${R1}`], "the late unit's attempt is kept (what happened)")
      // run 2's own commit of seq 2 is not a first-writer loser: the key was not claimed
      yield* store.checkpoint(lateUnit("re", 2, "own", R2))
      assert.strictEqual(yield* rowOf(store, "re"), `${R2}|succeeded|3`)
      assert.deepStrictEqual(yield* outputAt(store, "re", 2), "own")
      // a late failure (no output, no key) of run 1 on a row run 2 holds: fenced too
      yield* store.admit([pipeline("rf", { runId: R2, nTasksDone: 1 })])
      yield* store.checkpoint(Rows.failedUnit(
        { pipelineId: P("rf"), runId: R1, taskRunId: "rf/1/r1", taskName: "t1", seq: 1, visit: 0 },
        1,
        1000,
        3000,
        Rows.errorColumns(new FatalError({ message: "late (test)" })),
        [],
        { ...attempt("rf", 1, 1), runId: R1 },
        "fatal"
      ))
      assert.strictEqual(yield* rowOf(store, "rf"), `${R2}|running|1`)
      assert.deepStrictEqual(yield* tasksOf("rf"), [])
      // a late success under the row's own run, but the row already failed: fenced
      yield* store.admit([pipeline("fa", { runId: R1, nTasksDone: 2, state: "failed" })])
      yield* store.checkpoint(lateUnit("fa", 2, "late", R1))
      assert.strictEqual(yield* rowOf(store, "fa"), `${R1}|failed|2`)
      assert.deepStrictEqual(yield* tasksOf("fa"), [])
      // the row's own run while running (a zombie of the same run: first writer wins as before)
      yield* store.admit([pipeline("ok", { runId: R1, nTasksDone: 2 })])
      yield* store.checkpoint(lateUnit("ok", 2, "mine", R1))
      assert.strictEqual(yield* rowOf(store, "ok"), `${R1}|succeeded|3`)
      assert.deepStrictEqual(yield* outputAt(store, "ok", 2), "mine")
      // an admission riding its unit, written already settled: the admission's own, not fenced
      yield* store.checkpoint(lateUnit("ad", 2, "folded", R1, {
        pipeline: undefined,
        admission: { pipelines: [pipeline("ad", { runId: R1, nTasksDone: 3, state: "succeeded", endedAt: 3000 })] }
      }))
      assert.strictEqual(yield* rowOf(store, "ad"), `${R1}|succeeded|3`)
      assert.deepStrictEqual(yield* tasksOf("ad"), [`2|succeeded|1|${R1}`])
      assert.deepStrictEqual(yield* outputAt(store, "ad", 2), "folded")
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(ArtifactBackends.layerInline, pgLayer("f38_store")))), 120_000)

  it.live("the unit-by-unit path (a traversal write): a control pipeline's late unit of run 1 after run 2 admitted it again is fenced", () =>
    Effect.gen(function*() {
      const url = pg.url("f38_traversal")
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      const s0 = yield* controlled(store, "ct", R1)
      // run 2 admits it again (its traversal from the start)
      yield* store.admit(
        [pipeline("ct", { runId: R2, updatedAt: 2000 })],
        [],
        [{ pipelineId: P("ct"), state: Traversal.initial("ct", 3) }]
      )
      const s1 = Traversal.succeed(s0, 0, "ct:0", 3)
      const unit = (run: RunId, value: string): CheckpointUnit => ({
        pipelineId: P("ct"),
        artifact: { ...artifact("ct", 0, enc(value)), runId: run },
        task: { ...task("ct", 0), taskRunId: `ct/0/${run}`, runId: run },
        pipeline: { nTasksDone: 1, runId: run, updatedAt: 3000, attemptsDelta: 1 },
        traversal: { expectedVersion: s0.version, state: s1 }
      })
      yield* store.checkpoint(unit(R1, "late"))
      assert.strictEqual(yield* rowOf(store, "ct"), `${R2}|running|0`)
      assert.deepStrictEqual(yield* tasksOf("ct"), [])
      assert.isUndefined(yield* outputAt(store, "ct", 0))
      // run 2's own unit is written (the traversal version unchanged by the fenced one)
      yield* store.checkpoint(unit(R2, "own"))
      assert.strictEqual(yield* rowOf(store, "ct"), `${R2}|running|1`)
      assert.deepStrictEqual(yield* outputAt(store, "ct", 0), "own")
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(ArtifactBackends.layerInline, pgLayer("f38_traversal")))), 120_000)
})
