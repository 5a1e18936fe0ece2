/**
 * Issue 17 (a library user's setup): the engine's in-flight markers live in
 * `assay_cluster_inflight`, which `assay migrate` creates. A runner built with
 * `ClusterEngine.workflowLayer` on a Postgres database that was never migrated must fail at
 * once with a `StoreUnavailable` naming `assay migrate`, not hang while every task start fails
 * its marker write and the engine retries it. With the table, the same layer builds.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as SingleRunner from "@effect/cluster/SingleRunner"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as InFlight from "../../src/services/internal/cluster/inflight.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import * as Pool from "../../src/services/Pool.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const runnerOf = (db: string, windowClaims = false) =>
  ClusterEngine.workflowLayer({ concurrency: 2, windowClaims }).pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(SingleRunner.layer({ runnerStorage: "memory", shardingConfig: { shardsPerGroup: 4 } })),
    Layer.provide(PgClient.layer({ url: Redacted.make(pg.url(db)) })),
    Layer.provideMerge(Layer.mergeAll(Pool.layer([]), NodeContext.layer, MemoryStore.layer())),
    Layer.provide(Layer.succeed(ClusterEngine.SpecCatalog, { lookup: () => Effect.succeed(Option.none()) })),
    Layer.provide(Logger.minimumLogLevel(LogLevel.Error))
  )

describe("ClusterEngine.workflowLayer on an unmigrated database", () => {
  it.live("fails at layer start with a StoreUnavailable naming assay migrate; builds once the table exists", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("unmigrated"))
      const error = yield* Effect.flip(Effect.scoped(Layer.build(runnerOf("unmigrated"))))
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.match(error.message, /assay_cluster_inflight/)
      assert.match(error.message, /assay migrate/)
      // what `assay migrate` creates beside the cluster's tables
      yield* InFlight.createTable.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(pg.url("unmigrated")) })))
      const after = yield* Effect.exit(Effect.scoped(Layer.build(runnerOf("unmigrated"))))
      assert.isTrue(Exit.isSuccess(after))
    }), 120_000)

  it.live("with window claims, a database migrated by an earlier version (no pipeline claim table) fails at layer start naming assay migrate", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("unmigrated_claims"))
      const client = PgClient.layer({ url: Redacted.make(pg.url("unmigrated_claims")) })
      // what the version before claims37 migrated: the in-flight markers and the window claim table
      yield* Effect.zipRight(
        InFlight.createTable,
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql.unsafe(`CREATE TABLE assay_cluster_window_claims (window_key text PRIMARY KEY, token text, expires_at timestamptz)`))
      ).pipe(Effect.provide(client))
      const error = yield* Effect.flip(Effect.scoped(Layer.build(runnerOf("unmigrated_claims", true))))
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.match(error.message, /assay_cluster_pipeline_claims/)
      assert.match(error.message, /assay migrate/)
      yield* WindowClaims.createTable.pipe(Effect.provide(client))
      const after = yield* Effect.exit(Effect.scoped(Layer.build(runnerOf("unmigrated_claims", true))))
      assert.isTrue(Exit.isSuccess(after))
    }), 120_000)
})
