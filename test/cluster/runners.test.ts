/**
 * Issue 17 §4 (first scenarios, in one process): three cluster runners with real sockets on
 * loopback and SQL runner + message storage on the harness PostgreSQL, a client-only
 * submitter, and the memory store standing in for the shared store (the Postgres store is not
 * merged yet: at merge, each runner gets its own `PgStore` on the same database instead, and
 * the runners can move to `assay runner` processes).
 *
 * - C1 (no fault): every pipeline ends succeeded with exactly one checkpoint per task, each
 *   task called once, and the work spread over more than one runner.
 * - C2 (one runner stopped mid-run, in process: its layer is torn down, so it gives its
 *   shards back at once rather than after the lock expiry of a kill -9): every pipeline still
 *   ends succeeded with one checkpoint per task; no task committed before the stop is called
 *   again; repeated calls are at most the calls in flight at the stop.
 * - Window placement (`submit.ts`, lanes): new windows spread evenly over the runners; the
 *   submitter's map of shards to runners (`shardRunners`) is the one the runners themselves
 *   hold (`hasShardId`); a re-submission while placed windows run joins their executions.
 *
 * The runners are forked in each test's scope: stopped when it ends, failed assertions included.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as ShardId from "@effect/cluster/ShardId"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as PgClient from "@effect/sql-pg/PgClient"
import { assert, describe, expect, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { Cause, Context, Effect, Fiber, FiberRef, Layer, Logger, LogLevel, Option, Redacted, Schedule, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as InFlight from "../../src/services/internal/cluster/inflight.js"
import { shardRunners } from "../../src/services/internal/cluster/submit.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { freePort, usePostgres } from "../support/postgres.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** Short cluster intervals, as in the research note's proof of concept. */
const sharding = {
  shardsPerGroup: 30,
  entityMessagePollInterval: "300 millis",
  refreshAssignmentsInterval: "500 millis",
  shardLockRefreshInterval: "1 second",
  shardLockExpiration: "6 seconds"
} as const

const quiet = Logger.minimumLogLevel(LogLevel.Error)

/** Which runner a call came from: set on each runner's fiber, inherited by its entities' fibers. */
const whoRef = FiberRef.unsafeMake(-1)

/** The ground truth: every call with its key (`pipeline/task`), who made it and when it ended. */
interface Call {
  readonly key: string
  readonly runner: number
  readonly start: number
  end: number | undefined
}

/**
 * A runner on `db`, listening on `port`, over the shared `store`; `onSharding` is given its
 * `Sharding` service once built (what it owns: `hasShardId`).
 */
const runnerOf = (
  db: string,
  port: number,
  store: StoreService,
  specs: ReadonlyArray<AnySpec>,
  onSharding: (sharding: Sharding.Sharding["Type"]) => void = () => {}
) =>
  ClusterEngine.workflowLayer({ concurrency: 4 }).pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(NodeClusterSocket.layer({
      storage: "sql",
      shardingConfig: { ...sharding, runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", port)) }
    })),
    Layer.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })),
    Layer.provide(Layer.mergeAll(Layer.succeed(Store, store), Pool.layer([]), NodeContext.layer)),
    Layer.provide(ClusterEngine.catalogLayer(specs)),
    Layer.provide(quiet),
    Layer.tap((context) => Effect.sync(() => onSharding(Context.get(context, Sharding.Sharding))))
  )

const clientOf = (db: string) =>
  ClusterWorkflowEngine.layer.pipe(
    Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: sharding })),
    Layer.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })),
    Layer.provide(quiet)
  )

/** A template of three tasks of `ms` (50) each recording every call in `calls`. */
const templateOf = (calls: Array<Call>, ms = 50) => {
  const call = (name: string) =>
    Task.make(name, (n: number, ctx) =>
      Effect.gen(function*() {
        const c: Call = { key: `${ctx.pipelineId}/${name}`, runner: yield* FiberRef.get(whoRef), start: Date.now(), end: undefined }
        calls.push(c)
        yield* Effect.sleep(`${ms} millis`)
        c.end = Date.now()
        return n + 1
      }))
  return Pipeline.make("chaos", call("a"), call("b"), call("c"))
}

/** Every pipeline succeeded with exactly one artifact per task. */
const assertAllDone = (store: StoreService, specs: ReadonlyArray<AnySpec>) =>
  Effect.forEach(specs, (spec) =>
    Effect.gen(function*() {
      const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
      assert.strictEqual(row.state, "succeeded", spec.pipelineId)
      const artifacts = yield* store.listArtifacts(spec.pipelineId)
      assert.deepStrictEqual(artifacts.map((a) => a.seq), [-1, 0, 1, 2])
    }), { discard: true })


/** A fresh database `db` with the engine's in-flight markers (what `assay migrate` creates beside the cluster's tables). */
const createDatabase = (db: string) =>
  Effect.zipRight(
    Effect.promise(() => pg.createDatabase(db)),
    InFlight.createTable.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })))
  )

/**
 * Waits until the `runners` are registered and healthy in `db`'s runner storage: a runner that
 * registers late (a loaded machine) finds every window of a short run already started on the
 * runners that were there. Fails at once, with its cause, when a runner's layer ended (e.g.
 * its port was taken: a wait for it would only meet the test's time-out), and after 60 s
 * with the count it saw.
 */
const registered = (db: string, runners: ReadonlyArray<Fiber.RuntimeFiber<never, unknown>>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const check = Effect.gen(function*() {
      for (const [i, runner] of runners.entries()) {
        const exit = yield* Fiber.poll(runner)
        if (Option.isSome(exit)) {
          return yield* Effect.die(new Error(`runner ${i} stopped before registering: ${exit.value._tag === "Failure" ? Cause.pretty(exit.value.cause) : "its layer ended"}`))
        }
      }
      const rows = yield* Effect.catchAll(sql<{ n: number }>`SELECT count(*)::int AS n FROM cluster_runners WHERE healthy`, () => Effect.succeed([{ n: 0 }]))
      return rows[0]?.n ?? 0
    })
    let seen = 0
    yield* Effect.repeat(Effect.tap(check, (n) => Effect.sync(() => void (seen = n))), {
      until: (up) => up >= runners.length,
      schedule: Schedule.spaced("100 millis")
    }).pipe(
      Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error(`${seen} of ${runners.length} runners registered after 60 s`) }),
      Effect.orDie
    )
  }).pipe(Effect.scoped, Effect.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })))

/** Three runners started by {@link threeRunners}: their fibers, ports and `Sharding` services, by index. */
interface Runners {
  readonly fibers: ReadonlyArray<Fiber.RuntimeFiber<never, unknown>>
  readonly ports: ReadonlyArray<number>
  readonly shardings: ReadonlyArray<Sharding.Sharding["Type"] | undefined>
}

/**
 * Three runners on `db` over `store` (each call tagged with its index by `whoRef`), the first
 * given time to create the cluster's tables before the others start (L6), all registered.
 * Forked in the test's scope: interrupted when the test ends, an assertion failure included.
 */
const threeRunners = (db: string, store: StoreService, specs: ReadonlyArray<AnySpec>) =>
  Effect.gen(function*() {
    const fibers: Array<Fiber.RuntimeFiber<never, unknown>> = []
    const ports: Array<number> = []
    const shardings: Array<Sharding.Sharding["Type"] | undefined> = [undefined, undefined, undefined]
    for (let i = 0; i < 3; i++) {
      const port = yield* Effect.promise(freePort)
      ports.push(port)
      fibers.push(yield* Effect.forkScoped(Layer.launch(runnerOf(db, port, store, specs, (s) => void (shardings[i] = s))).pipe(
        Effect.locally(whoRef, i)
      )))
      yield* Effect.sleep(i === 0 ? "1500 millis" : "300 millis")
    }
    yield* registered(db, fibers)
    return { fibers, ports, shardings } satisfies Runners
  })

/** A client-only submitter's layer on `db` with the cluster's runner storage and sharding config in context (what window placement reads). */
const placingClientOf = (db: string) =>
  ClusterEngine.clientLayer({ shardingConfig: sharding }).pipe(
    Layer.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })),
    Layer.provide(quiet)
  )

describe("ClusterEngine: three runners on PostgreSQL (in one process)", () => {
  it.scopedLive("C1: no fault: every pipeline succeeds once, work spread over the runners", () => {
    const calls: Array<Call> = []
    const template = templateOf(calls)
    const specs = Array.from({ length: 30 }, (_, i) => template.bind(i))
    return Effect.gen(function*() {
      yield* createDatabase("c1")
      const store = yield* Store
      // the first runner creates the cluster's tables before the others start (L6)
      yield* threeRunners("c1", store, specs)
      // windows of 3 (a quarter of --max-admitted): four at once, over the runners' shards
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { maxAdmitted: 12, pollInterval: "100 millis" }).pipe(
        Effect.provide(clientOf("c1"))
      )
      assert.strictEqual(report.succeeded, 30)
      yield* assertAllDone(store, specs)
      const perKey = new Map<string, number>()
      for (const c of calls) perKey.set(c.key, (perKey.get(c.key) ?? 0) + 1)
      assert.strictEqual(perKey.size, 90)
      assert.deepStrictEqual(Array.from(new Set(perKey.values())), [1])
      // more than one runner did work
      assert.isAbove(new Set(calls.map((c) => c.runner)).size, 1, JSON.stringify(Array.from(new Set(calls.map((c) => c.runner)))))
    }).pipe(Effect.provide(MemoryStore.layer()))
  }, 120_000)

  it.scopedLive("window placement: new windows go to the runner with the least work (a lane each), so 60 windows at once fall 20 to each of 3 runners, not as their ids hash", () => {
    const calls: Array<Call> = []
    const template = templateOf(calls)
    const specs = Array.from({ length: 60 }, (_, i) => template.bind(i + 200))
    return Effect.gen(function*() {
      yield* createDatabase("place")
      const store = yield* Store
      yield* threeRunners("place", store, specs)
      // the runners take their shards (every refreshAssignmentsInterval)
      yield* Effect.sleep("1500 millis")
      // windows of one pipeline, all admitted at once (one batch): 60 placement decisions
      // against the loads they add up. By their ids alone, 60 windows on 3 runners fall
      // 20/20/20 with probability 1.4 %; placed, only a lane miss on the last window (all 16
      // lanes on the two fuller runners: (2/3)^16 = 0.15 %) leaves them 21/20/19
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { maxAdmitted: 60, window: 1, pollInterval: "100 millis" }).pipe(
        Effect.provide(placingClientOf("place"))
      )
      assert.strictEqual(report.succeeded, 60)
      yield* assertAllDone(store, specs)
      const perRunner = [0, 1, 2].map((r) => new Set(calls.filter((c) => c.runner === r).map((c) => c.key.split("/")[0])).size)
      expect(perRunner).toStrictEqual([20, 20, 20])
    }).pipe(Effect.provide(MemoryStore.layer()))
  }, 120_000)

  it.scopedLive("window placement computes each shard's runner as the runners do: shardRunners from the runner storage matches every runner's own hasShardId", () => {
    const template = templateOf([])
    const specs = [template.bind(0)]
    return createDatabase("owners").pipe(Effect.zipRight(Effect.gen(function*() {
      const store = yield* Store
      const runners = yield* threeRunners("owners", store, specs)
      const addresses = runners.ports.map((port) => String(RunnerAddress.make("127.0.0.1", port)))
      const storage = yield* RunnerStorage.RunnerStorage
      // the runners take their shards (acquired every refreshAssignmentsInterval): until
      // every shard of the group is owned by exactly one runner
      const owners = () =>
        Array.from({ length: sharding.shardsPerGroup }, (_, i) => {
          const shard = ShardId.make("default", i + 1)
          return runners.shardings.flatMap((s, r) => (s?.hasShardId(shard) === true ? [addresses[r]!] : []))
        })
      // (a state where two runners own every shard, before the third registered, is not the
      // settled one: the wait is for all three to hold shards, on a loaded machine too)
      const settledOwners = () => {
        const now = owners()
        return now.every((o) => o.length === 1) && new Set(now.map((o) => o[0])).size === 3
      }
      for (let i = 0; i < 300 && !settledOwners(); i++) yield* Effect.sleep("100 millis")
      const owned = owners()
      expect(owned.filter((o) => o.length !== 1)).toStrictEqual([])
      const computed = shardRunners(yield* storage.getRunners, sharding.shardsPerGroup)
      expect(computed).toStrictEqual(owned.map((o) => o[0]))
      // all three hold shards (else the comparison above would say little)
      expect(new Set(computed).size).toBe(3)
    }).pipe(Effect.provide(placingClientOf("owners")))), Effect.provide(MemoryStore.layer()))
  }, 120_000)

  it.scopedLive("a re-submission while the first submission's placed windows run joins their executions in whatever lane they are: one execution per window", () => {
    const calls: Array<Call> = []
    // tasks of 300 ms: the windows are still running when the first submitter is stopped
    const template = templateOf(calls, 300)
    const specs = Array.from({ length: 30 }, (_, i) => template.bind(i + 400))
    return createDatabase("rejoin").pipe(Effect.zipRight(Effect.gen(function*() {
      const store = yield* Store
      yield* threeRunners("rejoin", store, specs)
      yield* Effect.sleep("1500 millis")
      const options = { maxAdmitted: 30, window: 1, pollInterval: "100 millis" } as const
      let admitted = 0
      const first = yield* Effect.fork(
        ClusterEngine.submit(Stream.fromIterable(specs), { ...options, onAdmitted: () => void admitted++ }).pipe(
          Effect.provide(placingClientOf("rejoin"))
        )
      )
      while (admitted < 30) yield* Effect.sleep("20 millis")
      // Ctrl-C of the first submitter: its windows go on on the runners
      yield* Fiber.interrupt(first)
      const sql = yield* SqlClient.SqlClient
      const executions = () =>
        Effect.map(
          sql<{ entity_id: string }>`SELECT DISTINCT entity_id FROM cluster_messages WHERE tag = 'run' AND entity_type LIKE 'Workflow/%'`,
          (rows) => rows.map((r) => r.entity_id)
        )
      const before = yield* executions()
      expect(before.length).toBe(30)
      const running = Array.from((yield* store.getPipelines(specs.map((s) => s.pipelineId))).values()).filter((row) => row.state === "running").length
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), options).pipe(
        Effect.provide(placingClientOf("rejoin"))
      )
      assert.strictEqual(report.succeeded + report.followed.succeeded + report.skipped, 30)
      // the ones still running were the first run's: followed, not taken over
      expect(report.admitted).toBe(0)
      yield* assertAllDone(store, specs)
      // the windows still running when submitted again were joined, none started twice
      assert.isAbove(running, 0, "no window was still running at the re-submission")
      expect((yield* executions()).sort()).toStrictEqual([...before].sort())
      // and each task ran once
      const perKey = new Map<string, number>()
      for (const c of calls) perKey.set(c.key, (perKey.get(c.key) ?? 0) + 1)
      expect(perKey.size).toBe(90)
      expect(Array.from(new Set(perKey.values()))).toStrictEqual([1])
    }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(pg.url("rejoin")) })))), Effect.provide(MemoryStore.layer()))
  }, 120_000)

  it.scopedLive("C2: a runner stopped mid-run: nothing lost, no committed task called again, repeats within the in-flight allowance", () => {
    const calls: Array<Call> = []
    const template = templateOf(calls)
    const specs = Array.from({ length: 30 }, (_, i) => template.bind(i + 100))
    return Effect.gen(function*() {
      yield* createDatabase("c2")
      const store = yield* Store
      const runners = yield* threeRunners("c2", store, specs)
      const submitter = yield* Effect.fork(
        ClusterEngine.submit(Stream.fromIterable(specs), { maxAdmitted: 12, pollInterval: "100 millis" }).pipe(
          Effect.provide(clientOf("c2"))
        )
      )
      // the fault: once a third of the tasks are committed and runner 1 has work in flight
      const committedKeys = () =>
        Effect.map(
          Effect.forEach(specs, (s) => Effect.map(store.getPipeline(s.pipelineId), (r) => [s.pipelineId, Option.match(r, { onNone: () => 0, onSome: (x) => x.nTasksDone })] as const)),
          (rows) => rows.flatMap(([id, n]) => ["a", "b", "c"].slice(0, n).map((t) => `${id}/${t}`))
        )
      let before: ReadonlyArray<string> = []
      for (let i = 0; i < 400; i++) {
        before = yield* committedKeys()
        if (before.length >= 30 && calls.some((c) => c.runner === 1 && c.end === undefined)) break
        yield* Effect.sleep("25 millis")
      }
      const faultAt = Date.now()
      const inFlight = calls.filter((c) => c.end === undefined).length
      yield* Fiber.interrupt(runners.fibers[1]!)
      const report = yield* Fiber.join(submitter)
      assert.strictEqual(report.succeeded, 30)
      yield* assertAllDone(store, specs)
      // committed before the fault: never called again
      const committed = new Set(before)
      const late = calls.filter((c) => committed.has(c.key) && c.start >= faultAt)
      assert.deepStrictEqual(late.map((c) => c.key), [])
      // each task called once, except calls in flight at the fault (at least once)
      const perKey = new Map<string, number>()
      for (const c of calls) perKey.set(c.key, (perKey.get(c.key) ?? 0) + 1)
      assert.strictEqual(perKey.size, 90)
      const repeats = Array.from(perKey.values()).reduce((a, n) => a + n - 1, 0)
      assert.isAtMost(repeats, inFlight)
    }).pipe(Effect.provide(MemoryStore.layer()))
  }, 180_000)
})

