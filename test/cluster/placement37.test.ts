/**
 * break37 R3: two submitters of one experiment at once, three runners (in one process, real
 * sockets, SQL runner and message storage), window claims on, the Postgres store in the
 * cluster's database. Window placement makes the two submitters start the same window in two
 * lanes (each places by its own in-flight load); the second one's admission used the rows it
 * read before it waited for room (none), so it put the rows of pipelines the first submitter
 * had already run to the end back to `running` at cursor 0 with their checkpoint keys deleted,
 * and its lane, another execution under the same (free) window claim, ran every task again.
 *
 * Fails on break37's base (main 74312e35): each task of the window called twice, two artifacts
 * per seq. (Without lanes, both submitters' window was one execution: the rows stayed
 * `running` instead: `test/services/ClusterEngine.submitRaces.test.ts`.) Passes since the submitter admits with `Store.claimAdmissions`: the stale admission loses, and starts no window.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as EntityId from "@effect/cluster/EntityId"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Duration, Effect, Fiber, FiberId, Layer, Logger, LogLevel, Option, Redacted, Schedule, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { chooseLane, shardRunners, WINDOW_LANES } from "../../src/services/internal/cluster/submit.js"
import * as Pool from "../../src/services/Pool.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { type AnySpec, createClusterDatabase } from "../support/clusterRunner.js"
import { freePort, usePostgres } from "../support/postgres.js"

const pg = usePostgres()

const sharding = {
  shardsPerGroup: 30,
  entityMessagePollInterval: "300 millis",
  refreshAssignmentsInterval: "500 millis",
  shardLockRefreshInterval: "1 second",
  shardLockExpiration: "6 seconds"
} as const

const quiet = Logger.minimumLogLevel(LogLevel.Error)

const runnerOf = (db: string, port: number, store: StoreService, specs: ReadonlyArray<AnySpec>) =>
  ClusterEngine.workflowLayer({ concurrency: 16, windowClaims: true }).pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(NodeClusterSocket.layer({
      storage: "sql",
      shardingConfig: { ...sharding, runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", port)) }
    })),
    Layer.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })),
    Layer.provide(Layer.mergeAll(Layer.succeed(Store, store), Pool.layer([]), NodeContext.layer)),
    Layer.provide(ClusterEngine.catalogLayer(specs)),
    Layer.provide(quiet)
  )

const clientOf = (db: string) =>
  ClusterEngine.clientLayer({ shardingConfig: sharding }).pipe(
    Layer.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })),
    Layer.provide(quiet)
  )

const registered = (db: string, n: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* Effect.repeat(
      Effect.catchAll(sql<{ n: number }>`SELECT count(*)::int AS n FROM cluster_runners WHERE healthy`, () => Effect.succeed([{ n: 0 }])),
      { until: (rows) => (rows[0]?.n ?? 0) >= n, schedule: Schedule.spaced("100 millis") }
    ).pipe(Effect.timeout("60 seconds"), Effect.orDie)
  }).pipe(Effect.scoped, Effect.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })))

const waitFor = (what: string, check: Effect.Effect<boolean, unknown>, within: Duration.DurationInput = "60 seconds") =>
  Effect.repeat(Effect.zipLeft(check, Effect.sleep("20 millis")), { until: (ok) => ok }).pipe(
    Effect.timeoutFail({ duration: within, onTimeout: () => new Error(`waited ${Duration.format(within)} for ${what}`) }),
    Effect.orDie
  )

describe("break37 R3: two submitters, window placement", () => {
  it.live("two submitters at once: a stale admission plus a second lane of the same window runs its committed tasks again", () => {
    const calls = new Map<string, number>()
    const gate1 = Deferred.unsafeMake<void>(FiberId.none)
    const gate2 = Deferred.unsafeMake<void>(FiberId.none)
    const gated = new Map<string, Deferred.Deferred<void>>()
    const template = Pipeline.make(
      "twolanes",
      Task.make("a", (n: number, ctx) => Effect.sync(() => (calls.set(`${ctx.pipelineId}/a`, (calls.get(`${ctx.pipelineId}/a`) ?? 0) + 1), n + 1))),
      Task.make("b", (n: number, ctx) =>
        Effect.suspend(() => {
          calls.set(`${ctx.pipelineId}/b`, (calls.get(`${ctx.pipelineId}/b`) ?? 0) + 1)
          const g = gated.get(ctx.pipelineId)
          return g === undefined ? Effect.succeed(n * 2) : Effect.as(Deferred.await(g), n * 2)
        })),
      Task.make("c", (n: number, ctx) => Effect.sync(() => (calls.set(`${ctx.pipelineId}/c`, (calls.get(`${ctx.pipelineId}/c`) ?? 0) + 1), n + 1)))
    )
    const db = "break37_lanes"
    return Effect.gen(function*() {
      yield* createClusterDatabase(pg, db)
      yield* Effect.gen(function*() {
        const store = yield* Store
        const storeId = store.storeId === undefined ? undefined : yield* store.storeId
        // 6 pipelines per candidate offset; the runners host every candidate
        const candidates = Array.from({ length: 40 }, (_, o) => Array.from({ length: 6 }, (_, i) => template.bind(1000 + 6 * o + i)))
        const all = candidates.flat()
        const runners: Array<Fiber.RuntimeFiber<never, unknown>> = []
        for (let i = 0; i < 3; i++) {
          runners.push(yield* Effect.fork(Layer.launch(runnerOf(db, yield* Effect.promise(freePort), store, all))))
          yield* Effect.sleep(i === 0 ? "1500 millis" : "300 millis")
        }
        yield* registered(db, 3)
        yield* Effect.sleep("2 seconds") // the shards settle on the three runners
        // the offset where the submitters' lane choices differ for the third window: B places
        // [p0,p1] in lane 0 and [p2,p3] by its load; later, with [p2,p3] in flight, [p4,p5] in a
        // lane other than 0, where A (nothing placed in flight) starts it in lane 0
        const { specs, lanes } = yield* Effect.gen(function*() {
          const shard = yield* Sharding.Sharding
          const shards = shardRunners(yield* (yield* RunnerStorage.RunnerStorage).getRunners, sharding.shardsPerGroup)
          const runnerOfLanes = (ss: ReadonlyArray<AnySpec>) =>
            Effect.forEach(Array.from({ length: WINDOW_LANES }, (_, l) => l), (lane) =>
              Effect.map(
                ClusterEngine.WindowWorkflow.executionId({
                  pipelineIds: ss.map((s) => s.pipelineId),
                  specDigests: ss.map((s) => s.specDigest),
                  storeId,
                  ...(lane === 0 ? {} : { lane })
                }),
                (id) => shards[shard.getShardId(EntityId.make(id), "default").id - 1]
              ))
          for (const ss of candidates) {
            const w01 = yield* runnerOfLanes(ss.slice(0, 2))
            const l01 = chooseLane(w01, new Map())
            const w23 = yield* runnerOfLanes(ss.slice(2, 4))
            const l23 = chooseLane(w23, new Map([[w01[l01]!, 2]]))
            const w45 = yield* runnerOfLanes(ss.slice(4, 6))
            const lB = chooseLane(w45, new Map([[w23[l23]!, 2]]))
            const lA = chooseLane(w45, new Map())
            if (lA !== lB) return { specs: ss, lanes: { A: lA, B: lB } }
          }
          return yield* Effect.die(new Error("no candidate offset with diverging lanes"))
        }).pipe(Effect.provide(clientOf(db)), Effect.scoped)
        const ids = specs.map((s) => s.pipelineId as string)
        gated.set(ids[0]!, gate1).set(ids[1]!, gate1).set(ids[2]!, gate2).set(ids[3]!, gate2)
        // B: room for two windows of 2; its next batch ([p4,p5]) is read at once, then waits for room
        const b = yield* Effect.fork(
          ClusterEngine.submit(Stream.fromIterable(specs), { window: 2, maxAdmitted: 4, pollInterval: "100 millis" }).pipe(Effect.provide(clientOf(db)))
        )
        yield* waitFor("B's windows inside b", Effect.sync(() => ids.slice(0, 4).every((id) => calls.get(`${id}/b`) === 1)))
        yield* Effect.sleep("500 millis")
        // A: room for all three: runs [p4,p5] to the end
        const a = yield* Effect.fork(
          ClusterEngine.submit(Stream.fromIterable(specs), { window: 2, maxAdmitted: 6, pollInterval: "100 millis" }).pipe(Effect.provide(clientOf(db)))
        )
        yield* waitFor(
          "p4, p5 succeeded",
          Effect.map(Effect.forEach(specs.slice(4), (s) => store.getPipeline(s.pipelineId)), (rows) => rows.every((r) => Option.isSome(r) && r.value.state === "succeeded"))
        )
        const committedBefore = new Map(calls)
        // room for B: it admits [p4,p5] with the rows it read before (none), in its own lane
        yield* Deferred.succeed(gate1, undefined)
        yield* Effect.sleep("3 seconds")
        yield* Deferred.succeed(gate2, undefined)
        const [ra, rb] = yield* Effect.all([Fiber.join(a), Fiber.join(b)])
        yield* store.flush
        const rows = yield* Effect.forEach(specs, (spec) =>
          Effect.gen(function*() {
            const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
            const seqs = (yield* store.listArtifacts(spec.pipelineId)).map((x) => x.seq).sort((x, y) => x - y)
            return { id: spec.pipelineId as string, state: row.state, nTasksDone: row.nTasksDone, seqs }
          }))
        const detail = JSON.stringify({ lanes, a: ra.succeeded, b: rb.succeeded, rows, calls: Array.from(calls), committedBefore: Array.from(committedBefore) })
        for (const r of rows) assert.deepInclude(r, { state: "succeeded", nTasksDone: 3, seqs: [-1, 0, 1, 2] }, detail)
        const repeated = Array.from(calls).filter(([, n]) => n > 1)
        assert.deepStrictEqual(repeated, [], detail)
        yield* Effect.forEach(runners, Fiber.interrupt, { discard: true })
      }).pipe(Effect.provide(PgStore.layer({ url: pg.url(db), migrate: true })))
    }).pipe(Effect.tapErrorCause((c) => Effect.logError(Cause.pretty(c))))
  }, 180_000)

  it.live("held: a 4th runner joins while windows are placed from a map up to 2 s old, then runner 1 stops: nothing lost, no committed task called again", () => {
    const calls: Array<{ key: string; start: number; end: number | undefined }> = []
    const call = (name: string) =>
      Task.make(name, (n: number, ctx) =>
        Effect.gen(function*() {
          const c = { key: `${ctx.pipelineId}/${name}`, start: Date.now(), end: undefined as number | undefined }
          calls.push(c)
          yield* Effect.sleep("60 millis")
          c.end = Date.now()
          return n + 1
        }))
    const template = Pipeline.make("joinleave", call("a"), call("b"), call("c"))
    const specs = Array.from({ length: 90 }, (_, i) => template.bind(5000 + i))
    const db = "break37_join"
    return Effect.gen(function*() {
      yield* createClusterDatabase(pg, db)
      yield* Effect.gen(function*() {
        const store = yield* Store
        const runners: Array<Fiber.RuntimeFiber<never, unknown>> = []
        for (let i = 0; i < 3; i++) {
          runners.push(yield* Effect.fork(Layer.launch(runnerOf(db, yield* Effect.promise(freePort), store, specs))))
          yield* Effect.sleep(i === 0 ? "1500 millis" : "300 millis")
        }
        yield* registered(db, 3)
        yield* Effect.sleep("1500 millis")
        const submitter = yield* Effect.fork(
          ClusterEngine.submit(Stream.fromIterable(specs), { window: 3, maxAdmitted: 24, pollInterval: "100 millis" }).pipe(Effect.provide(clientOf(db)))
        )
        const committed = () =>
          Effect.map(
            Effect.forEach(specs, (s) => Effect.map(store.getPipeline(s.pipelineId), (r) => [s.pipelineId, Option.match(r, { onNone: () => 0, onSome: (x) => x.nTasksDone })] as const)),
            (rows) => rows.flatMap(([id, n]) => ["a", "b", "c"].slice(0, n).map((t) => `${id}/${t}`))
          )
        yield* waitFor("a sixth of the tasks committed", Effect.map(committed(), (k) => k.length >= 45))
        // join: a 4th runner while windows are being placed
        runners.push(yield* Effect.fork(Layer.launch(runnerOf(db, yield* Effect.promise(freePort), store, specs))))
        yield* waitFor("a third of the tasks committed", Effect.map(committed(), (k) => k.length >= 90))
        // leave: runner 1 stops (its layer torn down: shards given back at once)
        const before = new Set(yield* committed())
        const faultAt = Date.now()
        const inFlight = calls.filter((c) => c.end === undefined).length
        yield* Fiber.interrupt(runners[1]!)
        const report = yield* Fiber.join(submitter)
        yield* store.flush
        assert.strictEqual(report.succeeded, 90)
        for (const spec of specs) {
          const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
          assert.strictEqual(row.state, "succeeded")
          assert.deepStrictEqual((yield* store.listArtifacts(spec.pipelineId)).map((a) => a.seq).sort((x, y) => x - y), [-1, 0, 1, 2])
        }
        const late = calls.filter((c) => before.has(c.key) && c.start >= faultAt)
        assert.deepStrictEqual(late.map((c) => c.key), [])
        const perKey = new Map<string, number>()
        for (const c of calls) perKey.set(c.key, (perKey.get(c.key) ?? 0) + 1)
        const repeats = Array.from(perKey.values()).reduce((a, n) => a + n - 1, 0)
        console.log(JSON.stringify({ scenario: "join+leave", repeats, inFlight, keys: perKey.size }))
        assert.isAtMost(repeats, inFlight)
        yield* Effect.forEach(runners, Fiber.interrupt, { discard: true })
      }).pipe(Effect.provide(PgStore.layer({ url: pg.url(db), migrate: true })))
    })
  }, 240_000)
})
