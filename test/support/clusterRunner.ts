/**
 * Test support for the cluster engine on its durable path (issue 17): one `SingleRunner` with SQL
 * message storage on a database of the test file's PostgreSQL server (`usePostgres`), the
 * engine's workflow layer over the store in context, and the fresh databases those tests start
 * from, the claim table with a claims service over it, and a submit-and-check of pipelines.
 * Used by test/services/ClusterEngine.{stores,replay,resubmit,accounting,fence,claims}.test.ts,
 * which each built the same layers before.
 */
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as SingleRunner from "@effect/cluster/SingleRunner"
import * as TestRunner from "@effect/cluster/TestRunner"
import { NodeContext } from "@effect/platform-node"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert } from "@effect/vitest"
import { Clock, type Duration, Effect, Fiber, Layer, Logger, LogLevel, Option, Redacted, Stream, TestClock } from "effect"
import type { PipelineId, RunId } from "../../src/domain/Ids.js"
import type * as Pipeline from "../../src/domain/Pipeline.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as PgStore from "../../src/layers/PgStore.js"
import * as InFlight from "../../src/services/internal/cluster/inflight.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import type { PoolsService } from "../../src/services/Pools.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import type { PgServer } from "./pgServer.js"

/** A pipeline spec of any types. */
export type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

/**
 * Options of {@link singleRunner}: what the runner hosts (`specs`, or a `catalog` layer of its
 * own), its workflow layer's options (default `{ concurrency: 8 }`), its pools (default none)
 * and extra services its tasks need (e.g. a `CallCache`).
 */
export interface SingleRunnerOptions<S = never> {
  readonly specs?: ReadonlyArray<AnySpec> | undefined
  readonly catalog?: ReturnType<typeof ClusterEngine.catalogLayer> | undefined
  readonly workflow?: ClusterEngine.WorkflowLayerOptions | undefined
  readonly pools?: ReadonlyArray<ReturnType<typeof Pool.make>> | undefined
  readonly services?: Layer.Layer<S> | undefined
}

/**
 * One runner's lifetime on database `db` of `pg`: `SingleRunner` (runner storage in memory, SQL
 * message storage; messages polled every 200 ms, 30 shards; at its stop, requests still under way
 * get 1 s to end instead of @effect/cluster's 15 s `entityTerminationTimeout`: the tests stop
 * runners with tasks blocked that never end, so every such stop waited the whole 15 s), the
 * `ClusterWorkflowEngine`, and the engine's pipeline workflow over the `Store` in context. The
 * cluster's own warnings (no healthy runner while the next one starts) are silenced: they are
 * noise in these tests.
 *
 * @param pg the test file's server
 * @param db the database (created before, e.g. by {@link createClusterDatabase})
 * @param options see {@link SingleRunnerOptions}; `specs` or `catalog` is needed
 */
export const singleRunner = <S = never>(pg: PgServer, db: string, options: SingleRunnerOptions<S>) =>
  ClusterEngine.workflowLayer(options.workflow ?? { concurrency: 8 }).pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(SingleRunner.layer({
      runnerStorage: "memory",
      shardingConfig: {
        entityMessagePollInterval: "200 millis",
        shardsPerGroup: 30,
        entityTerminationTimeout: "1 second"
      }
    })),
    Layer.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })),
    Layer.provideMerge(Layer.mergeAll(
      Pool.layer(options.pools ?? []),
      options.services ?? (Layer.empty as Layer.Layer<S>),
      NodeContext.layer
    )),
    Layer.provide(options.catalog ?? ClusterEngine.catalogLayer(options.specs ?? [])),
    Layer.provide(Logger.minimumLogLevel(LogLevel.Error))
  )

/**
 * Creates database `db` on `pg` with the engine's claim table (what `assay migrate` creates
 * beside the cluster's tables).
 */
export const createClusterDatabase = (pg: PgServer, db: string) =>
  Effect.zipRight(
    Effect.promise(() => pg.createDatabase(db)),
    Effect.zipRight(InFlight.createTable, WindowClaims.createTable).pipe(
      Effect.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) }))
    )
  )

/** A fresh database `db` on `pg` (created when the layer is built), its `SqlClient`, and inline artifacts. */
export const pgServicesOn = (pg: PgServer, db: string) =>
  Layer.mergeAll(
    ArtifactBackends.layerInline,
    Layer.unwrapEffect(Effect.promise(async () => {
      await pg.createDatabase(db)
      return PgClient.layer({ url: Redacted.make(pg.url(db)) })
    }))
  )

/** Opens run `runId` in `store` and admits `spec` under it (its seed artifact included), written through. */
export const admitUnder = (store: StoreService, spec: AnySpec, runId: RunId) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
    yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
    yield* store.flush
  })

/**
 * The engine's claim table created on the `SqlClient` in context, and a claims service over it
 * (TTL 1 minute, heartbeat 1 second), with that client.
 */
export const freshClaims = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* InFlight.createTable
  return { sql, claims: InFlight.make(sql, { ttl: "1 minute", heartbeat: "1 second" })! }
})

/** Submits `specs` to the cluster (polled every 20 ms, each workflow's result asked at every poll). */
export const submitSpecs = (specs: ReadonlyArray<AnySpec>, options: ClusterEngine.SubmitOptions = {}) =>
  ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis", resultEvery: 1, ...options })

/** Asserts that every one of `specs` is stored `succeeded` in the `Store` in context. */
export const assertSucceeded = (specs: ReadonlyArray<AnySpec>) =>
  Effect.gen(function*() {
    const store = yield* Store
    for (const spec of specs) assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(spec.pipelineId)).state, "succeeded")
  })

/** A macrotask turn: lets the database's answers arrive (no time passes on any clock). */
export const turn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/** Moves the test clock by `step` and turns, until `fiber` has ended; then joins it. */
export const drive = <A, E>(fiber: Fiber.Fiber<A, E>, step: Duration.DurationInput) =>
  Effect.zipRight(
    Effect.repeat(
      Effect.zipRight(Effect.zipRight(TestClock.adjust(step), turn), Effect.map(Fiber.poll(fiber), Option.isSome)),
      { until: (ended) => ended }
    ),
    Fiber.join(fiber)
  )

/**
 * The pools `pools`, calling `onGranted` each time a lease is granted (before the caller gets
 * it): the cancel tests mark their run there, as a runner's mark read landing while an attempt
 * waited for its lease.
 */
export const markingAtLease = (pools: PoolsService, onGranted: () => void): PoolsService => ({
  ...pools,
  acquire: <Client,>(o?: Parameters<PoolsService["acquire"]>[0], h?: Parameters<PoolsService["acquire"]>[1]) =>
    Effect.tap(pools.acquire<Client>(o, h), () => Effect.sync(onGranted))
})

/**
 * The store `store`, where a new owner commits a step of pipeline `id` (its traversal's version
 * + 1) just before the first `interrupted` row of it is written, then `onRaced` runs (the
 * execution's ownership is gone from then on): a zombie's interrupted write racing a takeover.
 * `newOwner()` is the version the new owner wrote (`undefined`: no race happened).
 */
export const racingStore = (store: StoreService, id: PipelineId, onRaced: () => void) => {
  let newOwner: number | undefined
  const racing: StoreService = {
    ...store,
    checkpoint: (unit) =>
      Effect.gen(function*() {
        if (unit.pipeline?.state === "interrupted" && newOwner === undefined) {
          const vs = Option.getOrThrow(yield* store.traversal!.visitState(id))
          newOwner = vs.version + 1
          yield* store.checkpoint({ pipelineId: id, traversal: { expectedVersion: vs.version, state: { ...vs, version: newOwner } } })
          onRaced()
        }
        return yield* store.checkpoint(unit)
      })
  }
  return { store: racing, newOwner: () => newOwner }
}

/**
 * `body` with database `db` on `pg` (the cluster's tables and claims), the Postgres store in it
 * (migrated), and one runner with window claims serving `specs` (concurrency 16): what the
 * submission-race tests run on. The runner's services are provided: nothing is left required.
 */
export const onPgRunner = <A, E>(pg: PgServer, db: string, specs: ReadonlyArray<Pipeline.PipelineSpec<any, any, any, any>>, body: Effect.Effect<A, E, any>) =>
  Effect.zipRight(
    createClusterDatabase(pg, db),
    Effect.suspend(() =>
      body.pipe(
        Effect.provide(
          singleRunner(pg, db, { specs, workflow: { concurrency: 16, windowClaims: true } }).pipe(
            Layer.provideMerge(PgStore.layer({ url: pg.url(db), migrate: true }))
          )
        )
      )
    )
  ) as Effect.Effect<A, unknown>

/**
 * A runner host in this process (`TestRunner`, @effect/cluster's in-memory runner and storages)
 * over a memory store as `wrap` changes it, serving `specs` (concurrency 8): what the in-process
 * submission tests (TestClock) run on.
 */
export const inProcessHost = (specs: ReadonlyArray<AnySpec>, wrap: (s: StoreService) => StoreService = (s) => s) => {
  const engine = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))
  const store = Layer.effect(Store, Effect.map(Store, wrap)).pipe(Layer.provide(MemoryStore.layer()))
  const services = Layer.mergeAll(store, Pool.layer([]), NodeContext.layer)
  return ClusterEngine.workflowLayer({ concurrency: 8, resourcesEvery: "1 hour" }).pipe(
    Layer.provideMerge(engine),
    Layer.provideMerge(services),
    Layer.provide(ClusterEngine.catalogLayer(specs))
  )
}
