/**
 * Issue 17: the cluster engine fences a task's call with the global pool lease too, not only
 * with the task's claim. A runner that lost its pool slot between the grant and the call (it
 * froze, or was cut off, past the lease's TTL: the slot expired and another runner claimed it)
 * used to call anyway, so the provider saw more calls at once than the pool's capacity. Now the
 * step right after each lease renews the slot (only the same lease id, only while not
 * expired), in the same statement as the claim's renewal and the checkpoint re-read when the
 * pools and the store live in the claims' database; a slot found lost is given up and another
 * lease acquired before the call.
 *
 * One Postgres database holds the claims, the global pool (capacity 1) and the store; "lost its
 * slot" is the slot row handed to another holder right after the grant.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Context, Deferred, DefaultServices, Effect, Fiber, Option, Tracer } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as PgPools from "../../src/layers/PgPools.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import * as Claims from "../../src/services/internal/cluster/inflight.js"
import { makeTaskEnv, newClaim, runTask } from "../../src/services/internal/cluster/task.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import type { PoolsService } from "../../src/services/Pools.js"
import { pgServicesOn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pools = [Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })])]

/** A fresh database `db` (its client) and inline artifacts. */
const servicesOn = (db: string) => pgServicesOn(pg, db)

/**
 * The database at `url` migrated (claims, global pools, store), its client, the Postgres store
 * and the global pools of runner `r1` (`options`: their timing).
 */
const migrated = (url: string, options: Partial<Parameters<typeof PgPools.make>[1]> = {}) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* Claims.createTable
    yield* PgPools.migrate
    yield* PgStore.migrate(url)
    const store = yield* PgStore.make({ url })
    const global = yield* PgPools.make(pools, { runnerId: "r1", leaseTtl: "20 seconds", ...options })
    return { sql, store, global }
  })

/** A tracer that records the text of every SQL statement executed under it (`db.query.text`), in order. */
const recordingSql = (seen: Array<string>) => {
  const native = Context.get(DefaultServices.liveServices, Tracer.Tracer)
  return Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      const span = native.span(name, parent, context, links, startTime, kind, options)
      const attribute = span.attribute.bind(span)
      span.attribute = (key, value) => {
        if (key === "db.query.text") seen.push(String(value).replace(/\s+/g, " "))
        attribute(key, value)
      }
      return span
    },
    context: native.context
  })
}

describe("cluster fence: the pool lease", () => {
  for (const storeHere of [true, false]) {
    it.live(`a slot lost between the grant and the call is never called under; another lease is taken first (checkpoint re-read ${storeHere ? "in the fence statement" : "by the store"})`, () => {
      const db = `fence_${storeHere ? "here" : "apart"}`
      const url = pg.url(db)
      return Effect.gen(function*() {
        // with the store here the fence is the slot claim itself (one statement): a slot can
        // then be lost before the call only by the process freezing past the lease's TTL
        // right after the claim (the slot expires, another runner claims it); apart, the
        // fence is a statement after the grant and catches the slot taken at once
        const { global, sql, store } = yield* migrated(url, {
          pollMin: "50 millis",
          pollMax: "200 millis",
          ...(storeHere ? { leaseTtl: "2 seconds" } : {})
        })
        const holders: Array<string> = []
        const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
          Effect.gen(function*() {
            const lease = yield* ctx.acquire()
            // the provider's view: who holds the pool's only slot while this call runs
            const rows = yield* Effect.orDie(sql<{ holder: string | null }>`SELECT holder FROM assay_pool_slot WHERE pool = 'llm' AND expires_at > now()`)
            holders.push(rows.map((r) => r.holder ?? "-").join(","))
            yield* lease.report({ ok: true })
            return n * 10
          }))
        const spec = Pipeline.make("fence", ask).bind(4)
        // right after the first grant, the slot lapses and another runner claims it for 1.5 s
        let stolen = false
        const stealing: PoolsService = {
          ...global,
          acquire: <Client,>(o?: Parameters<PoolsService["acquire"]>[0], h?: Parameters<PoolsService["acquire"]>[1]) =>
            Effect.tap(global.acquire<Client>(o, h), () =>
              stolen ? Effect.void : Effect.zipRight(
                Effect.sync(() => stolen = true),
                Effect.zipRight(
                  Effect.orDie(sql`UPDATE assay_pool_slot SET holder = 'r2', lease_id = gen_random_uuid(),
                    expires_at = now() + interval '1500 milliseconds' WHERE pool = 'llm'`),
                  // the process frozen (nothing of it runs, its renewal fiber neither) past the TTL
                  storeHere ? Effect.sync(() => {
                    const end = Date.now() + 2_200
                    while (Date.now() < end) { /* frozen */ }
                  }) : Effect.void
                )
              ))
        }
        const runId = "run-f" as RunId
        const now = yield* Clock.currentTimeMillis
        yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
        yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
        const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
        // the store is in this database: found by its identity (the other case reads it on its own)
        assert.isTrue(yield* claims.holdsStore(yield* store.storeId!))
        const env = yield* makeTaskEnv({ store, pools: stealing, bus: yield* makeBus, concurrency: 2, claims, storeHere })
        assert.strictEqual(yield* runTask(env, spec, 0), "done")
        assert.isTrue(stolen)
        assert.deepStrictEqual(holders, ["r1"], "the call went out only under a slot held by this runner")
      }).pipe(
        Effect.scoped,
        Effect.provide(servicesOn(db))
      )
    }, 60_000)
  }

  it.live("round trips: an uncontended acquire claims its slot without reading the global view (wait), in the same statement as the fence (none after it)", () => {
    const db = "fence_count"
    const url = pg.url(db)
    return Effect.gen(function*() {
      const { global, sql, store } = yield* migrated(url)
      const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          yield* Effect.orDie(sql`SELECT 'the call' AS probe`)
          yield* lease.report({ ok: true })
          return n * 10
        }))
      const spec = Pipeline.make("count", ask).bind(4)
      const runId = "run-c" as RunId
      const now = yield* Clock.currentTimeMillis
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
      const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      const storeHere = yield* claims.holdsStore(yield* store.storeId!)
      assert.isTrue(storeHere)
      const env = yield* makeTaskEnv({ store, pools: global, bus: yield* makeBus, concurrency: 2, claims, storeHere })
      // the database identity of the pools' client is compared once, before the counting
      yield* claims.sameDatabase(sql)
      const seen: Array<string> = []
      assert.strictEqual(yield* runTask(env, spec, 0).pipe(Effect.withTracer(recordingSql(seen))), "done")
      const grant = seen.findIndex((q) => q.includes("UPDATE assay_pool_slot s SET holder = $3"))
      const call = seen.findIndex((q) => q.includes("the call"))
      assert.isAtLeast(grant, 0, seen.join("\n"))
      assert.deepStrictEqual(seen.filter((q) => q.includes("FROM assay_pool_resource r WHERE r.pool IN")), [], "no global view read")
      // the grant is the fence: the claim renewed and the checkpoint re-read (L4) in the
      // statement that claims the slot, and nothing between it and the call
      assert.match(seen[grant]!, /assay_cluster_inflight/)
      assert.match(seen[grant]!, /assay_pipelines/)
      const between = seen.slice(grant + 1, call)
      assert.strictEqual(between.length, 0, `no statement between the grant and the call:\n${between.join("\n")}`)
    }).pipe(
      Effect.scoped,
      Effect.provide(servicesOn(db))
    )
  }, 60_000)

  it.live("round trips: with the store in the claims' database, a task's first read (L1) is its claim's statement, no read of its own", () => {
    const db = "claim_count"
    const url = pg.url(db)
    return Effect.gen(function*() {
      const { global, sql, store } = yield* migrated(url)
      const inc = Task.make("inc", (n: number) => Effect.succeed(n + 1))
      const spec = Pipeline.make("count2", inc, Task.make("twice", (n: number) => Effect.succeed(n * 2))).bind(4)
      const runId = "run-l1" as RunId
      const now = yield* Clock.currentTimeMillis
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
      const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      const env = yield* makeTaskEnv({ store, pools: global, bus: yield* makeBus, concurrency: 2, claims, storeHere: true })
      const seen: Array<string> = []
      assert.strictEqual(yield* runTask(env, spec, 0).pipe(Effect.withTracer(recordingSql(seen))), "done")
      assert.strictEqual(yield* runTask(env, spec, 1).pipe(Effect.withTracer(recordingSql(seen))), "done")
      assert.deepStrictEqual(seen.filter((q) => q.startsWith("SELECT * FROM assay_pipelines WHERE pipeline_id")), [], seen.join("\n"))
      const claimed = seen.filter((q) => q.includes("INSERT INTO \"assay_cluster_inflight\""))
      assert.strictEqual(claimed.length, 2, seen.join("\n"))
      for (const q of claimed) assert.match(q, /assay_pipelines/)
      // the task-run id the claim wrote is the one the task's rows carry
      const marker = yield* sql<{ task_run_id: string; seq: number }>`SELECT task_run_id, seq FROM assay_cluster_inflight WHERE pipeline_id = ${spec.pipelineId}`
      const tasks = yield* sql<{ task_run_id: string }>`SELECT task_run_id FROM assay_tasks WHERE pipeline_id = ${spec.pipelineId} AND seq = 1`
      assert.strictEqual(marker[0]!.seq, 1)
      assert.strictEqual(marker[0]!.task_run_id, tasks[0]!.task_run_id)
      // a committed task is reported, not claimed: running it again writes no claim and calls nothing
      const again = yield* claims.claimRunnable({ pipelineId: spec.pipelineId, seq: 0, token: "other", attempt: 1, startedAt: now })
      assert.isFalse(again.won)
      assert.deepStrictEqual(again.pipeline, { runId, state: "succeeded", nTasksDone: 2 })
      const after = yield* sql<{ token: string | null }>`SELECT token FROM assay_cluster_inflight WHERE pipeline_id = ${spec.pipelineId}`
      assert.notStrictEqual(after[0]!.token, "other")
      const missing = yield* claims.claimRunnable({ pipelineId: "no-such", seq: 0, token: "t", attempt: 1, startedAt: now })
      assert.deepStrictEqual([missing.won, missing.pipeline], [false, null])
    }).pipe(
      Effect.scoped,
      Effect.provide(servicesOn(db))
    )
  }, 60_000)
  /** A pipeline of three leased tasks (pool `llm2`, capacity 2), each adding 1; `seed` its seed. */
  const threeLeased = (name: string, onCall: (seq: number, input: number) => Effect.Effect<void> = () => Effect.void, seed = 10) => {
    const step = (seq: number) =>
      Task.make(`t${seq}`, { resource: "llm2", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          yield* onCall(seq, n)
          yield* lease.report({ ok: true })
          return n + 1
        }))
    return Pipeline.make(name, step(0), step(1), step(2)).bind(seed)
  }
  const pools2 = [Pool.make("llm2", [Resource.make("llm2", { id: "k", capacity: 2 })])]

  it.live("one claim per pipeline: carried from task to task, each leased task's fence is its slot claim, the next input is not read back", () => {
    const db = "carried_count"
    const url = pg.url(db)
    return Effect.gen(function*() {
      const { sql, store } = yield* migrated(url)
      const global = yield* PgPools.make(pools2, { runnerId: "r1", leaseTtl: "20 seconds" })
      const calls: Array<[number, number]> = []
      const spec = threeLeased("carried", (seq, n) => Effect.sync(() => void calls.push([seq, n])))
      const runId = "run-k" as RunId
      const now = yield* Clock.currentTimeMillis
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
      const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      const env = yield* makeTaskEnv({ store, pools: global, bus: yield* makeBus, concurrency: 2, claims, storeHere: true })
      yield* claims.sameDatabase(sql)
      // a first pipeline of the same tasks teaches this process that they take fenced leases
      const warm = spec.template.bind(20)
      yield* store.admit([Rows.admissionRow(warm, 0, undefined, runId, now)], [Rows.seedArtifact(warm, runId, now)])
      const warmClaim = yield* newClaim
      for (const seq of [0, 1, 2]) assert.strictEqual(yield* runTask(env, warm, seq, warmClaim), "done")
      calls.length = 0
      const seen: Array<string> = []
      const claim = yield* newClaim
      for (const seq of [0, 1, 2]) {
        assert.strictEqual(yield* runTask(env, spec, seq, claim).pipe(Effect.withTracer(recordingSql(seen))), "done")
      }
      assert.deepStrictEqual(calls, [[0, 10], [1, 11], [2, 12]])
      const all = seen.join("\n")
      assert.strictEqual(seen.filter((q) => q.includes("INSERT INTO \"assay_cluster_inflight\"")).length, 1, `one claim statement:\n${all}`)
      assert.deepStrictEqual(seen.filter((q) => q.includes("FROM assay_artifacts")), [], `no input read back:\n${all}`)
      const grants = seen.filter((q) => q.includes("UPDATE assay_pool_slot s SET holder = $3"))
      assert.strictEqual(grants.length, 3, all)
      for (const q of grants) assert.match(q, /assay_cluster_inflight/)
      // tasks 1 and 2 check the input they took from memory against the stored digest
      assert.strictEqual(grants.filter((q) => q.includes("FROM assay_checkpoints")).length, 2, all)
      assert.deepStrictEqual(seen.filter((q) => q.startsWith("WITH c AS (UPDATE assay_cluster_inflight") && !q.includes("slot_claim")), [], `no fence of its own:\n${all}`)
      // the claim row names the last task run (what a takeover would record as abandoned)
      const marker = yield* sql<{ task_run_id: string; seq: number }>`SELECT task_run_id, seq FROM assay_cluster_inflight WHERE pipeline_id = ${spec.pipelineId}`
      const task2 = yield* sql<{ task_run_id: string }>`SELECT task_run_id FROM assay_tasks WHERE pipeline_id = ${spec.pipelineId} AND seq = 2`
      assert.strictEqual(marker[0]!.seq, 2)
      assert.strictEqual(marker[0]!.task_run_id, task2[0]!.task_run_id)
      const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
      assert.deepStrictEqual([row.state, row.nTasksDone], ["succeeded", 3])
    }).pipe(
      Effect.scoped,
      Effect.provide(servicesOn(db))
    )
  }, 60_000)

  it.live("a carried input the store did not keep (another execution's commit won) is not used: the next task runs on the stored value", () => {
    const db = "carried_stale"
    const url = pg.url(db)
    return Effect.gen(function*() {
      const { sql, store } = yield* migrated(url)
      const global = yield* PgPools.make(pools2, { runnerId: "r1", leaseTtl: "20 seconds" })
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      let calls = 0
      const inputs: Array<number> = []
      const first = Task.make("first", { resource: "llm2", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          const call = ++calls
          if (call === 1) {
            // this execution's call: its answer comes after the other execution committed
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(gate)
          }
          yield* lease.report({ ok: true })
          return n * 10 + call
        }))
      const second = Task.make("second", { resource: "llm2", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          inputs.push(n)
          yield* lease.report({ ok: true })
          return n + 1
        }))
      const spec = Pipeline.make("stale", first, second).bind(4)
      const runId = "run-s" as RunId
      const now = yield* Clock.currentTimeMillis
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
      const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      const env1 = yield* makeTaskEnv({ store, pools: global, bus: yield* makeBus, concurrency: 2, claims, storeHere: true })
      const claim = yield* newClaim
      const ours = yield* Effect.fork(runTask(env1, spec, 0, claim))
      yield* Deferred.await(started)
      // this execution froze past the claim's TTL mid-call: another took the task over and committed 42
      yield* sql`UPDATE assay_cluster_inflight SET heartbeat_at = now() - interval '10 minutes'`
      const env2 = yield* makeTaskEnv({ store, pools: global, bus: yield* makeBus, concurrency: 2, claims, storeHere: true })
      assert.strictEqual(yield* runTask(env2, spec, 0), "done")
      // the first answer (41) arrives: its commit loses (first writer wins)
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(ours), "done")
      const stored = Option.getOrThrow(yield* store.getArtifact(spec.pipelineId, 0))
      assert.strictEqual(JSON.parse(new TextDecoder().decode(stored.payload!)), 42)
      // the pipeline goes on with its carried claim: the next task runs on 42, not on 41
      assert.strictEqual(yield* runTask(env1, spec, 1, claim), "done")
      assert.deepStrictEqual(inputs, [42])
      const out = Option.getOrThrow(yield* store.getArtifact(spec.pipelineId, 1))
      assert.strictEqual(JSON.parse(new TextDecoder().decode(out.payload!)), 43)
    }).pipe(
      Effect.scoped,
      Effect.provide(servicesOn(db))
    )
  }, 60_000)

  it.live("a carried claim taken over between two tasks: the next task does not call while the other holds it, and runs once it is released", () => {
    const db = "carried_taken"
    const url = pg.url(db)
    return Effect.gen(function*() {
      const { sql, store } = yield* migrated(url)
      const global = yield* PgPools.make(pools2, { runnerId: "r1", leaseTtl: "20 seconds" })
      const calls: Array<number> = []
      const spec = threeLeased("taken", (seq) => Effect.sync(() => void calls.push(seq)))
      const runId = "run-t" as RunId
      const now = yield* Clock.currentTimeMillis
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
      const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      const env = yield* makeTaskEnv({ store, pools: global, bus: yield* makeBus, concurrency: 2, claims, storeHere: true })
      const claim = yield* newClaim
      assert.strictEqual(yield* runTask(env, spec, 0, claim), "done")
      // another execution (a replay of the window elsewhere) claimed the next task: it holds the
      // pipeline's claim now (live: renewed just now)
      yield* sql`UPDATE assay_cluster_inflight SET token = 'other', seq = 1, heartbeat_at = now() WHERE pipeline_id = ${spec.pipelineId}`
      const next = yield* Effect.fork(runTask(env, spec, 1, claim))
      yield* Effect.sleep("2500 millis")
      assert.deepStrictEqual(calls, [0], "no call while another execution holds the claim")
      assert.isTrue(Option.isNone(yield* Fiber.poll(next)))
      // the other execution lets it go: this one claims the task again and runs it
      yield* sql`UPDATE assay_cluster_inflight SET token = NULL, heartbeat_at = NULL WHERE pipeline_id = ${spec.pipelineId}`
      assert.strictEqual(yield* Fiber.join(next), "done")
      assert.deepStrictEqual(calls, [0, 1])
      // releases are queued and written in one statement per flush (pg17m, `releaseDelay`
      // 20 ms): the slot comes back within a flush, not at the join
      const held = sql<{ n: number }>`SELECT count(*)::int AS n FROM assay_pool_slot WHERE pool = 'llm2' AND holder IS NOT NULL AND expires_at > now()`
      let n = (yield* held)[0]!.n
      for (let i = 0; i < 40 && n > 0; i++) {
        yield* Effect.sleep("50 millis")
        n = (yield* held)[0]!.n
      }
      assert.strictEqual(n, 0, "no slot left held")
    }).pipe(
      Effect.scoped,
      Effect.provide(servicesOn(db))
    )
  }, 60_000)
})
