/**
 * Issue 17: a runner's start-up checks never read "the database did not answer" as "no".
 *
 * With window claims and block leases on by default, a runner asks at its start whether the
 * global pools live in the claims' database (`Claims.checkSameDatabase`), whether the store
 * does (`Claims.holdsStore`) and whether the demand table exists. They answered `false` on any
 * database error, so a database briefly away at a runner's start left that one runner claiming
 * a slot per task (or reading the store apart) for its whole life while the others held
 * blocks — or refused it with "run `assay migrate`". They now fail with a `StoreUnavailable`
 * naming the database's error (the runner's start retries them, then fails with it); the task
 * path's `sameDatabase` keeps reading "unknown" as "no" and asks again next time.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import * as Claims from "../../src/services/internal/cluster/inflight.js"
import { freshClaims, pgServicesOn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** A client of database `db` (created here), scoped. */
const clientOf = (db: string) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => pg.createDatabase(db))
    const context = yield* Layer.build(PgClient.layer({ url: Redacted.make(pg.url(db)) }))
    return Context.get(context, SqlClient.SqlClient)
  })

/** Database `db` refuses connections from now on and its sessions are ended (a database gone away). */
const goAway = (db: string) =>
  Effect.sync(() =>
    pg.psql(
      "postgres",
      `ALTER DATABASE ${db} ALLOW_CONNECTIONS false; SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db}'`
    )
  )

describe("cluster runner start-up checks (issue 17)", () => {
  it.live("whether the pools share the claims' database: a database away fails with its error, not `false`", () =>
    Effect.gen(function*() {
      const { claims } = yield* freshClaims
      const other = yield* clientOf("start_pools")
      // answered while both answer: another database is not the claims' one
      assert.isFalse(yield* claims.checkSameDatabase(other))
      const third = yield* clientOf("start_pools_away")
      yield* goAway("start_pools_away")
      const failed = yield* Effect.flip(claims.checkSameDatabase(third))
      assert.strictEqual(failed._tag, "StoreUnavailable")
      assert.match(failed.message, /cannot read which database a client reaches: /)
      // the task path still takes "unknown" for "no" (and asks again next time)
      assert.isFalse(yield* claims.sameDatabase(third))
    }).pipe(Effect.scoped, Effect.provide(pgServicesOn(pg, "start_claims"))), 60_000)

  it.live("whether the store lives in the claims' database: a database away fails with its error, not `false`", () =>
    Effect.gen(function*() {
      const sql = yield* clientOf("start_store_away")
      yield* Claims.createTable.pipe(Effect.provideService(SqlClient.SqlClient, sql))
      const claims = Claims.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      // answered while the database answers: no store there
      assert.isFalse(yield* claims.holdsStore("some-store"))
      yield* goAway("start_store_away")
      const failed = yield* Effect.flip(claims.holdsStore("some-store"))
      assert.strictEqual(failed._tag, "StoreUnavailable")
      assert.match(failed.message, /cannot read whether the store lives in the cluster's database: /)
    }).pipe(Effect.scoped), 60_000)
})
