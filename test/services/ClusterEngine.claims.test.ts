/**
 * Issue 17 (chaos C5 with lock rows): the cluster engine's task claims, one live execution of a
 * task across runners (`src/services/internal/cluster/inflight.ts`).
 *
 * What went wrong: a runner frozen past the shard lock expiry had an attempt waiting for a pool
 * lease; its shards moved and the new owner ran the same task; when the frozen runner woke up,
 * its attempt got its lease, re-read the checkpoint (not committed yet: the new owner's call was
 * in flight) and called the provider a second time. Here two task environments stand for the
 * two runners (one store, one pool, one Postgres for the claims); "frozen past the TTL" is the
 * first execution's claim aged in the database.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it, expect } from "@effect/vitest"
import { Clock, Effect, Either, Exit, Fiber, Layer, Option, Redacted, Scope, Stream, TestClock } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as PgPools from "../../src/layers/PgPools.js"
import { make as makeBus } from "../../src/services/Bus.js"
import * as Claims from "../../src/services/internal/cluster/inflight.js"
import { makeCallGate, makeTaskEnv, runTask } from "../../src/services/internal/cluster/task.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"
import { drive, freshClaims, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

const request = (token: string, over: Partial<Claims.ClaimRequest> = {}): Claims.ClaimRequest => ({
  pipelineId: "p1",
  seq: 0,
  runId: "run-1",
  token,
  taskRunId: `p1:0:run-1:${token}`,
  attempt: 1,
  startedAt: 1,
  ...over
})

/** Ages every claim past any TTL (as if its runner froze for an hour). */
const ageClaims = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql.unsafe(`UPDATE ${Claims.TABLE} SET heartbeat_at = now() - interval '1 hour' WHERE token IS NOT NULL`)
)

const tokenOf = (pipelineId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ token: string | null }>`SELECT token FROM ${sql(Claims.TABLE)} WHERE pipeline_id = ${pipelineId}`,
      (rows) => rows[0]?.token ?? undefined
    ))

/**
 * The claims table, a one-task pipeline `name` whose task leases "llm" and counts its calls, and
 * run `runId` opened with the pipeline admitted in the `Store` in context.
 */
const zombieSetup = (name: string, runId: string) =>
  Effect.gen(function*() {
    const { claims } = yield* freshClaims
    let calls = 0
    const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
      Effect.gen(function*() {
        const lease = yield* ctx.acquire()
        calls++
        yield* lease.report({ ok: true })
        return n * 10
      }))
    const spec = Pipeline.make(name, ask).bind(4)
    const store = yield* Store
    const now = yield* Clock.currentTimeMillis
    yield* store.openRun({ runId: runId as RunId, label: null, config: {}, startedAt: now, meta: undefined })
    yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId as RunId, now)], [Rows.seedArtifact(spec, runId as RunId, now)])
    return { claims, calls: () => calls, spec, store, runId: runId as RunId, now }
  })

/**
 * Global pools (Postgres slot rows) with one pool `llm` of one slot, held for an hour when not
 * given back, and that slot taken by a lease in `busy` (close it to give the slot back).
 */
const busyGlobalSlot = Effect.gen(function*() {
  yield* PgPools.migrate
  const pools = yield* PgPools.make([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })])], {
    runnerId: "r1",
    leaseTtl: "1 hour",
    renewEvery: "10 minutes"
  })
  const busy = yield* Scope.make()
  yield* Scope.extend(pools.acquire("llm"), busy)
  return { busy, pools }
})

describe("cluster task claims", () => {
  it.live("claim, renew, release: one winner; a stale claim is taken over with what it held; a later task overwrites an earlier one", () =>
    Effect.gen(function*() {
      const { claims } = yield* freshClaims
      // a free row: won
      const first = yield* claims.claim(request("A"))
      assert.isTrue(first.won)
      assert.isTrue(Option.isNone(first.previous))
      // another execution of the same task while A lives: lost, and it sees A
      const second = yield* claims.claim(request("B"))
      assert.isFalse(second.won)
      assert.strictEqual(Option.getOrThrow(second.previous).token, "A")
      assert.isFalse(Option.getOrThrow(second.previous).stale)
      // the holder claiming again (an L5 retry of its body): won
      assert.isTrue((yield* claims.claim(request("A"))).won)
      // renewals: the holder's succeed (and record its attempt), anyone else's do not
      assert.isTrue(yield* claims.renew("p1", "A", 3))
      assert.isFalse(yield* claims.renew("p1", "B", 1))
      // A freezes past the TTL: B takes the claim over and learns A's attempt and task run
      yield* ageClaims
      const takeover = yield* claims.claim(request("B"))
      assert.isTrue(takeover.won)
      const was = Option.getOrThrow(takeover.previous)
      assert.deepStrictEqual([was.token, was.attempt, was.taskRunId, was.stale], ["A", 3, "p1:0:run-1:A", true])
      // A wakes up: its renewal finds the claim taken over
      assert.isFalse(yield* claims.renew("p1", "A", 3))
      // the next task of the pipeline overwrites a live claim of an earlier one...
      assert.isTrue((yield* claims.claim(request("C", { seq: 1 }))).won)
      // ...but an earlier task never overwrites a live claim of a later one
      assert.isFalse((yield* claims.claim(request("D", { seq: 0 }))).won)
      // another run of the pipeline may claim it
      assert.isTrue((yield* claims.claim(request("E", { seq: 1, runId: "run-2" }))).won)
      // a release by someone else is a no-op; the holder's frees the row at once
      yield* claims.release("p1", "C")
      assert.isFalse((yield* claims.claim(request("F", { seq: 1, runId: "run-2" }))).won)
      yield* claims.release("p1", "E")
      assert.isTrue((yield* claims.claim(request("F", { seq: 1, runId: "run-2" }))).won)
    }).pipe(Effect.provide(pgLayer("claims_basic"))), 60_000)

  it.live("racing for one task: exactly one of twelve concurrent claims wins, on a free row and on a stale one", () =>
    Effect.gen(function*() {
      const { claims } = yield* freshClaims
      const race = (pipelineId: string) =>
        Effect.forEach(
          Array.from({ length: 12 }, (_, i) => `t${i}`),
          (token) => Effect.map(claims.claim(request(token, { pipelineId })), (r) => r.won),
          { concurrency: "unbounded" }
        )
      assert.strictEqual((yield* race("free")).filter(Boolean).length, 1)
      yield* ageClaims
      assert.strictEqual((yield* race("free")).filter(Boolean).length, 1)
    }).pipe(Effect.provide(pgLayer("claims_race"))), 60_000)

  it.live("an older claim table is refused, naming assay migrate; createTable upgrades it in place", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // the table as the previous version created it, with a marker in it
      yield* sql.unsafe(
        `CREATE TABLE ${Claims.TABLE} (pipeline_id text PRIMARY KEY, seq integer NOT NULL, run_id text NOT NULL, started_at bigint NOT NULL)`
      )
      yield* sql.unsafe(`INSERT INTO ${Claims.TABLE} VALUES ('p1', 0, 'run-1', 5)`)
      const refused = yield* Effect.flip(Claims.requireTable(sql))
      assert.match(refused.message, /older version/)
      assert.match(refused.message, /assay migrate/)
      yield* Claims.createTable
      yield* Claims.requireTable(sql)
      // the old marker reads as a claim of no one, stale: taken over, and reported
      const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      const r = yield* claims.claim(request("A"))
      assert.isTrue(r.won)
      expect(Option.map(r.previous, (p) => [p.token, p.attempt, p.stale])).toStrictEqual(Option.some([undefined, 0, true]))
    }).pipe(Effect.provide(pgLayer("claims_upgrade"))), 60_000)

  it.scoped("a zombie waiting for a lease when its claim was taken over does not call: it waits for the new owner's checkpoint", () =>
    Effect.gen(function*() {
      const { calls, claims, spec, store } = yield* zombieSetup("zombie", "run-z")
      const pools = yield* Pool.Pools
      // the pool's only slot is busy: the first execution will wait for it
      const blocker = yield* Effect.forkScoped(Effect.scoped(Effect.zipRight(pools.acquire("llm"), Effect.never)))
      const waitFor = (check: (token: string | undefined) => boolean) =>
        Effect.repeat(tokenOf(spec.pipelineId), { until: check }).pipe(Effect.zipLeft(Effect.yieldNow()))
      // (a clock past the epoch: a claim's start of 0 reads as unknown)
      yield* TestClock.setTime(1_000_000)
      // runner 1 claims the task, then waits for the lease
      const env1 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 2, claims })
      const zombie = yield* Effect.fork(runTask(env1, spec, 0))
      const token1 = yield* waitFor((t) => t !== undefined)
      const claimedAt = yield* Clock.currentTimeMillis
      // runner 1 freezes past the TTL; its shard moves to runner 2, which takes the claim over
      // (5 s later)
      yield* TestClock.adjust("5 seconds")
      yield* ageClaims
      const env2 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 2, claims })
      const owner = yield* Effect.fork(runTask(env2, spec, 0))
      yield* waitFor((t) => t !== undefined && t !== token1)
      // the slot frees: runner 1 (first in line) gets the lease, finds its claim gone and gives
      // the lease back without calling; runner 2 calls and commits
      yield* Fiber.interrupt(blocker)
      assert.strictEqual(yield* Fiber.join(owner), "done")
      // runner 1 looks again one heartbeat later: the checkpoint is there
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* Fiber.join(zombie), "done")
      assert.strictEqual(calls(), 1, "the provider was called once")
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ pipelineId: spec.pipelineId })))
      assert.deepStrictEqual(attempts.map((a) => [a.attemptNo, a.outcome]).sort(), [[1, "cancelled"], [1, "succeeded"]])
      // the execution cut short is on record (written by the new owner right after its claim, read
      // here once both executions ended): its attempt (1) and task run, "may not have called"
      const abandoned = attempts.filter((a) => a.errorType === "Abandoned")
      assert.deepStrictEqual(abandoned.map((a) => [a.attemptNo, a.outcome]), [[1, "cancelled"]])
      assert.match(abandoned[0]!.taskRunId, new RegExp(`^${spec.pipelineId}:0:run-z:`))
      assert.match(abandoned[0]!.errorMessage ?? "", /may not have called/)
      // it ran from runner 1's claim to its detection by runner 2, not 0 ms at the detection (F13)
      assert.deepStrictEqual(
        [abandoned[0]!.startedAt, abandoned[0]!.endedAt, abandoned[0]!.durationMs],
        [claimedAt, claimedAt + 5_000, 5_000]
      )
    }).pipe(
      Effect.provide(Layer.mergeAll(
        MemoryStore.layer(),
        Pool.layer([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })])]),
        pgLayer("claims_zombie")
      ))
    ), 60_000)

  /**
   * The same zombie on a global pool (one slot row in Postgres, an hour's TTL): the lease it was
   * granted after its claim was taken over is given back at once, since nothing was called under
   * it (the fence is the last step before the call). Left to the interruption (an unknown
   * outcome), its slot would stay held until its TTL, and every other runner would wait that
   * long for it (the default mode's twin of the draining window's case, pg17t).
   */
  it.scoped("a zombie stopped at its fence gives its global slot back at once (not after the lease's TTL)", () =>
    Effect.gen(function*() {
      const { claims, calls, now, runId, spec, store } = yield* zombieSetup("zombieslot", "run-zs")
      // the pool's only slot is busy: the execution will wait for it
      const { busy, pools } = yield* busyGlobalSlot
      const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 2, claims })
      yield* Effect.fork(runTask(env, spec, 0))
      const token1 = yield* Effect.repeat(Effect.zipLeft(tokenOf(spec.pipelineId), turn), { until: (t) => t !== undefined })
      // the runner freezes past the claim's TTL and another execution takes the claim over
      yield* ageClaims
      const takeover = yield* claims.claim({
        pipelineId: spec.pipelineId,
        seq: 0,
        runId,
        token: "other",
        taskRunId: `${spec.pipelineId}:0:${runId}:other`,
        attempt: 1,
        startedAt: now
      })
      assert.isTrue(takeover.won, `the claim of ${token1} is taken over`)
      // the busy slot comes back after a completed call: the zombie gets it, finds its claim
      // gone at its fence and does not call
      yield* Scope.close(busy, Exit.void)
      const next = yield* Effect.fork(Effect.either(Effect.scoped(pools.acquire({ pool: "llm", timeout: "1 minute" }))))
      const got = yield* drive(next, "1 second")
      assert.strictEqual(calls(), 0, "the zombie did not call")
      assert.isTrue(Either.isRight(got), `the slot granted to the zombie comes back at once: ${Either.isLeft(got) ? got.left._tag : ""}`)
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("claims_zombie_slot")))), 120_000)

  /**
   * A runner told to stop (chaos C8, a rolling restart: SIGTERM) closes its call gate before its
   * scopes close; a task of it that is granted its lease after that does not call (the call
   * could not commit before the process exits, and the task's next owner would call again: C8
   * saw a key called 2.4 s after its runner's SIGTERM and again by the new owner) and gives the
   * slot back at once; a task not started yet starts no attempt.
   */
  it.scoped("a runner told to stop starts no call: a task granted its lease after the stop gives it back at once, a new task starts no attempt", () =>
    Effect.gen(function*() {
      const { calls, claims, runId, spec, store } = yield* zombieSetup("stopping", "run-st")
      const { busy, pools } = yield* busyGlobalSlot
      const gate = makeCallGate()
      const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 2, claims, gate })
      const waiting = yield* Effect.fork(Effect.exit(runTask(env, spec, 0)))
      yield* Effect.repeat(Effect.zipLeft(tokenOf(spec.pipelineId), turn), { until: (t) => t !== undefined })
      // the runner is told to stop while its task waits for the pool's only slot
      gate.close()
      yield* Scope.close(busy, Exit.void)
      // the execution gives no verdict (it waits for the process's end; the task's next owner runs it)
      for (let i = 0; i < 20; i++) {
        yield* TestClock.adjust("100 millis")
        yield* turn
      }
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)), "no verdict")
      assert.strictEqual(calls(), 0, "no call after the stop")
      // its slot is free at once, not held for the lease's TTL (an hour)
      const next = yield* Effect.fork(Effect.either(Effect.scoped(pools.acquire({ pool: "llm", timeout: "1 minute" }))))
      const got = yield* drive(next, "1 second")
      assert.isTrue(Either.isRight(got), `the slot comes back at once: ${Either.isLeft(got) ? got.left._tag : ""}`)
      // a task started after the stop starts no attempt
      const spec2 = Pipeline.make("stopping2", spec.template.tasks[0]!).bind(5)
      const now = yield* Clock.currentTimeMillis
      yield* store.admit([Rows.admissionRow(spec2, 0, undefined, runId, now)], [Rows.seedArtifact(spec2, runId, now)])
      const later = yield* Effect.fork(Effect.exit(runTask(env, spec2, 0)))
      for (let i = 0; i < 20; i++) {
        yield* TestClock.adjust("100 millis")
        yield* turn
      }
      assert.isTrue(Option.isNone(yield* Fiber.poll(later)), "no verdict")
      assert.strictEqual(calls(), 0)
      // the process ends: its executions are interrupted with its scope
      yield* Fiber.interrupt(waiting)
      yield* Fiber.interrupt(later)
      const attempts = Array.from(yield* Stream.runCollect(store.streamAttempts({ pipelineId: spec.pipelineId })))
      assert.deepStrictEqual(attempts.filter((a) => a.outcome === "succeeded"), [], "nothing succeeded here")
      assert.strictEqual(Array.from(yield* Stream.runCollect(store.streamAttempts({ pipelineId: spec2.pipelineId }))).length, 0, "no attempt of the later task")
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("claims_stopping")))), 120_000)
})
