/**
 * Issue 17 §3, `running: cancel` on the cluster engine: a run marked cancelled
 * (`cancelMarks.ts`; on Postgres a row of the store's `assay_meta`, key `cancel/<runId>`) stops
 * its pipelines on the runners at their next task boundary, or before their call once a lease
 * is granted; each settles `interrupted` at its cursor (its checkpoints kept: resumable).
 *
 * - in memory (`runTask`, a process's task environment): a task of a cancelled run starts no
 *   attempt; a lease granted after the cancel goes back and the task does not call;
 * - on the test harness's Postgres: a claimed window (window claims on, `window.ts`: the
 *   runners' default) whose pipelines' first task is in its call when the run is marked and the
 *   runner reads the marks: the call commits, the next task does not run, and the window
 *   answers `interrupted` for each.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer, Option, Redacted } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import * as CancelMarks from "../../src/services/internal/cluster/cancelMarks.js"
import { makeTaskEnv, runTask, type TaskEnv } from "../../src/services/internal/cluster/task.js"
import { runWindow } from "../../src/services/internal/cluster/window.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import { windowKey } from "../../src/services/internal/cluster/workflow.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import { type AnySpec, createClusterDatabase, markingAtLease, pgServicesOn, singleRunner, submitSpecs, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

/** Opens run `runId` in `store` and admits `specs` under it (their seeds included), written through. */
const admitAll = (store: StoreService, specs: ReadonlyArray<AnySpec>, runId: RunId) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
    yield* store.admit(specs.map((s) => Rows.admissionRow(s, 0, undefined, runId, now)), specs.map((s) => Rows.seedArtifact(s, runId, now)))
    yield* store.flush
  })

const rowOf = (store: StoreService, spec: AnySpec) =>
  Effect.map(store.getPipeline(spec.pipelineId), (row) => {
    const r = Option.getOrThrow(row)
    return [r.state, r.nTasksDone] as const
  })

describe("cluster: a cancelled run's tasks on a runner (issue 17 §3, in memory)", () => {
  it.scoped("at a task boundary: the next task of a cancelled run starts no attempt; its pipeline settles interrupted, the task before kept", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const a = Task.make("a", (n: number) => Effect.sync(() => (calls.push("a"), n + 1)))
      const b = Task.make("b", (n: number) => Effect.sync(() => (calls.push("b"), n * 2)))
      const spec: AnySpec = Pipeline.make("boundary", a, b).bind(1)
      const store = yield* Store
      const runId = "run-b" as RunId
      yield* admitAll(store, [spec], runId)
      const env = yield* makeTaskEnv({ store, pools: yield* Pool.Pools, bus: yield* makeBus, concurrency: 2 })
      assert.strictEqual(yield* runTask(env, spec, 0), "done")
      // the runner read the run's mark
      env.cancelled.set(runId, "study_stop:manual")
      assert.strictEqual(yield* runTask(env, spec, 1), "interrupted")
      assert.deepStrictEqual(calls, ["a"])
      assert.deepStrictEqual(yield* rowOf(store, spec), ["interrupted", 1])
      assert.isTrue(Option.isSome(yield* store.getArtifact(spec.pipelineId, 0)), "task a's checkpoint is kept")
      const events = yield* store.events({ pipelineId: spec.pipelineId, kind: "pipeline.interrupted" })
      assert.deepStrictEqual(events.map((e) => (e.data as { reason: unknown }).reason), ["study_stop:manual"])
      // asked again (a replay of its workflow), nothing of it runs
      assert.strictEqual(yield* runTask(env, spec, 1), "interrupted")
      assert.deepStrictEqual(calls, ["a"])
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))))

  it.scoped("before the call: a lease granted after the run was cancelled goes back at once, and the task does not call", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          calls.push("ask")
          yield* lease.report({ ok: true })
          return n
        }))
      const spec: AnySpec = Pipeline.make("leased", ask).bind(1)
      const store = yield* Store
      const pools = yield* Pool.Pools
      const runId = "run-l" as RunId
      yield* admitAll(store, [spec], runId)
      // the run's mark read while the attempt waited for its lease (here: as it is granted)
      let env: TaskEnv | undefined
      const marking = markingAtLease(pools, () => env!.cancelled.set(runId, "study_stop:manual"))
      env = yield* makeTaskEnv({ store, pools: marking, bus: yield* makeBus, concurrency: 2 })
      assert.strictEqual(yield* runTask(env, spec, 0), "interrupted")
      assert.deepStrictEqual(calls, [], "nothing was called under the lease")
      assert.deepStrictEqual(yield* rowOf(store, spec), ["interrupted", 0])
      // the lease went back: the pool's only slot is free
      const handle = yield* pools.get("llm")
      assert.strictEqual((yield* handle.snapshot).reduce((n, r) => n + r.active, 0), 0)
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("llm", [Resource.make("api", { id: "k", capacity: 1 })])])))
    ))
})

describe("cluster: a run's cancel mark in assay_meta (issue 17 §3)", () => {
  it.scoped("a claimed window's pipelines stop at their next task boundary once the runner read the mark: interrupted, checkpoints kept", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // the store's meta table (a Postgres store's migration creates it; the store here is in memory)
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS assay_meta (key text COLLATE "C" PRIMARY KEY, value text NOT NULL)`)
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

  it.scoped("one pipeline's mark (a trial's time budget): that pipeline stops at its next task boundary, the other goes on; the runner reads the runs in flight only", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS assay_meta (key text COLLATE "C" PRIMARY KEY, value text NOT NULL)`)
      yield* WindowClaims.createTable
      const calls = new Map<string, number>()
      const add = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1)
      const gate = yield* Deferred.make<void>()
      const a = Task.make("a", (n: number, ctx) => Effect.zipRight(Effect.sync(() => add(`a/${ctx.pipelineId}`)), Effect.as(Deferred.await(gate), n + 1)))
      const b = Task.make("b", (n: number, ctx) => Effect.sync(() => (add(`b/${ctx.pipelineId}`), n * 2)))
      const specs: ReadonlyArray<AnySpec> = [1, 2].map((n) => Pipeline.make("timed", a, b).bind(n))
      const [cut, kept] = [specs[0]!, specs[1]!]
      const store = yield* Store
      // an underscore: a LIKE wildcard, escaped in the read (run `runXp`'s marks are not this run's)
      const runId = "run_p" as RunId
      yield* admitAll(store, specs, runId)
      const env = yield* makeTaskEnv({ store, pools: yield* Pool.Pools, bus: yield* makeBus, concurrency: 8 })
      const claims = WindowClaims.make(sql, { ttl: "1 hour", heartbeat: "1 second", clock: yield* Effect.clock })!
      const window = yield* Effect.fork(runWindow(env, claims, undefined, windowKey({ pipelineIds: specs.map((s) => s.pipelineId) }), specs))
      yield* Effect.repeat(turn, { until: () => calls.size === 2 })
      // the run has task executions in flight here (the ones whose marks a runner reads)
      assert.deepStrictEqual([...env.inFlight.keys()], [runId])

      const marks = CancelMarks.makePg(sql)
      yield* marks.markPipeline!(runId, cut.pipelineId, "budget_exhausted")
      yield* marks.markPipeline!(runId, cut.pipelineId, "other")
      yield* marks.markPipeline!("runXp" as RunId, kept.pipelineId, "budget_exhausted")
      yield* CancelMarks.refresh(marks, env.cancelled, env.inFlight.keys(), env.cancelledPipelines)
      assert.deepStrictEqual([...env.cancelled], [])
      assert.deepStrictEqual([...env.cancelledPipelines], [[CancelMarks.pipelineKeyOf(runId, cut.pipelineId), "budget_exhausted"]])

      // the calls under way commit; the marked pipeline's task b is not called, the other's is
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* Fiber.join(window), ["interrupted", "succeeded"])
      assert.deepStrictEqual([...calls.keys()].filter((k) => k.startsWith("b/")), [`b/${kept.pipelineId}`])
      assert.deepStrictEqual(yield* rowOf(store, cut), ["interrupted", 1])
      assert.deepStrictEqual(yield* rowOf(store, kept), ["succeeded", 2])
      // nothing in flight any more: the next read reads no run
      assert.deepStrictEqual([...env.inFlight.keys()], [])
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), pgLayer("cancel_pipeline")))), 180_000)

  it.live("durable engine: a submission whose run is marked ends with its pipelines interrupted; a re-submit runs only what was not committed", () => {
    const calls = new Map<string, number>()
    const count = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1)
    return Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const a = Task.make("a", (n: number, ctx) => Effect.zipRight(Effect.sync(() => count(`${ctx.pipelineId}/a`)), Effect.as(Deferred.await(gate), n + 1)))
      const b = Task.make("b", (n: number, ctx) => Effect.sync(() => (count(`${ctx.pipelineId}/b`), n * 2)))
      const specs: ReadonlyArray<AnySpec> = [1, 2].map((n) => Pipeline.make("resumed", a, b).bind(n))
      const runId = "run-d" as RunId
      // the runner's marks in memory; told once a read found the run's mark
      const memory = CancelMarks.makeMemory()
      const seen = yield* Deferred.make<void>()
      const marks: CancelMarks.CancelMarksService = {
        mark: memory.mark,
        read: (ids) => Effect.tap(memory.read(ids), (found) => found.has(runId) ? Deferred.succeed(seen, undefined) : Effect.void)
      }
      yield* createClusterDatabase(pg, "cancel_resubmit")
      const runner = singleRunner(pg, "cancel_resubmit", {
        catalog: ClusterEngine.catalogLayer(specs),
        workflow: { concurrency: 8, cancelEvery: "20 millis" },
        services: Layer.succeed(CancelMarks.CancelMarks, marks)
      })
      yield* Effect.gen(function*() {
        const first = yield* Effect.fork(submitSpecs(specs, { runId }))
        yield* Effect.repeat(Effect.sleep("10 millis"), { until: () => calls.size === 2 })
        yield* marks.mark(runId, "study_stop:manual")
        yield* Deferred.await(seen)
        yield* Deferred.succeed(gate, undefined)
        const report = yield* Fiber.join(first)
        assert.deepInclude(report, { admitted: 2, succeeded: 0, failed: 0, interrupted: 2 })
        const store = yield* Store
        for (const spec of specs) assert.deepStrictEqual(yield* rowOf(store, spec), ["interrupted", 1])
        // submitted again (a new run): only task b runs
        const again = yield* submitSpecs(specs)
        assert.deepInclude(again, { admitted: 2, succeeded: 2 })
        for (const spec of specs) {
          assert.strictEqual(calls.get(`${spec.pipelineId}/a`), 1)
          assert.strictEqual(calls.get(`${spec.pipelineId}/b`), 1)
        }
      }).pipe(Effect.provide(runner))
    }).pipe(Effect.provide(MemoryStore.layer()))
  }, 60_000)
})

describe("cluster: cancel marks on Postgres, read by the key's index and pruned (fix17aj)", () => {
  it.scoped("one statement reads a run's mark and its pipelines' by the btree; a closed run's marks go once none of its pipelines runs", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const url = pg.url("cancel_prune")
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      const t = Task.sync("t", (n: number) => n)
      const [p1, p2, p3, p4] = [1, 2, 3, 4].map((n) => Pipeline.make("marked", t).bind(n)) as [AnySpec, AnySpec, AnySpec, AnySpec]
      // run-a: closed, its pipelines interrupted; run-a-b (its id starts with run-a's): open;
      // run-c: closed with a pipeline still running under it (a submitter that stopped following)
      const a = "run-a" as RunId
      const ab = "run-a-b" as RunId
      const c = "run-c" as RunId
      yield* admitAll(store, [p1, p2], a)
      yield* admitAll(store, [p3], ab)
      yield* admitAll(store, [p4], c)
      const marks = CancelMarks.makePg(sql)
      yield* marks.mark(a, "study_stop:manual")
      yield* marks.markPipeline!(a, p1.pipelineId, "budget_exhausted")
      yield* marks.mark(ab, "study_stop:sigint")
      yield* marks.markPipeline!(c, p4.pipelineId, "budget_exhausted")

      // one read: each run's own marks (run-a-b's keys share run-a's prefix and are not run-a's)
      const read = yield* marks.readAll!([a, c])
      assert.deepStrictEqual([...read.runs], [[a, "study_stop:manual"]])
      assert.deepStrictEqual(
        [...read.pipelines].sort(),
        [[CancelMarks.pipelineKeyOf(a, p1.pipelineId), "budget_exhausted"], [CancelMarks.pipelineKeyOf(c, p4.pipelineId), "budget_exhausted"]]
      )
      const env = new Map<RunId, string>()
      const perPipeline = new Map<string, string>()
      yield* CancelMarks.refresh(marks, env, [ab], perPipeline)
      assert.deepStrictEqual([[...env], [...perPipeline]], [[[ab, "study_stop:sigint"]], []])
      // the primary key's index serves the read (the table is tiny: sequential scans are turned off to ask)
      const plan = yield* sql.withTransaction(Effect.zipRight(
        sql.unsafe(`SET LOCAL enable_seqscan = off`),
        sql.unsafe<{ "QUERY PLAN": string }>(`EXPLAIN ${CancelMarks.READ_ALL_SQL}`, [[a, c]])
      ))
      const text = plan.map((r) => r["QUERY PLAN"]).join("\n")
      assert.include(text, "assay_meta_pkey", text)
      assert.notInclude(text, "Seq Scan on assay_meta", text)

      // nothing closed yet: nothing pruned
      assert.strictEqual(yield* marks.prune!(), 0)
      // run-a closed, its pipelines interrupted; run-c closed with its pipeline running
      const now = yield* Clock.currentTimeMillis
      for (const p of [p1, p2]) yield* store.checkpoint(Rows.interruptedUnit(p.pipelineId, a, 0, undefined, "study_stop:manual", now))
      yield* store.finishRun(a, { status: "interrupted", endedAt: now, stopReason: "study_stop:manual" })
      yield* store.finishRun(c, { status: "interrupted", endedAt: now, stopReason: "user" })
      yield* store.flush
      assert.strictEqual(yield* marks.prune!(), 2)
      const keys = () => Effect.map(sql<{ key: string }>`SELECT key FROM assay_meta WHERE key LIKE 'cancel/%' ORDER BY key`, (rows) => rows.map((r) => r.key))
      assert.deepStrictEqual(yield* keys(), [`cancel/${ab}`, `cancel/${c}/${p4.pipelineId}`])
      // run-c's pipeline resumed under a new run (its row now runs under that run): run-c's mark goes
      yield* store.admit([Rows.admissionRow(p4, 0, undefined, "run-d" as RunId, now)], [])
      yield* store.flush
      assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(p4.pipelineId)).runId, "run-d")
      assert.strictEqual(yield* marks.prune!(), 1)
      assert.deepStrictEqual(yield* keys(), [`cancel/${ab}`])
    }).pipe(Effect.provide(pgServicesOn(pg, "cancel_prune"))), 180_000)
})
