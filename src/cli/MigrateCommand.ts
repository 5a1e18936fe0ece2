/**
 * `assay migrate --database URL`: brings the assay schema of a PostgreSQL database up to this
 * build's version, once, before any runner or writer starts (stores never create or change
 * their schema on their own). Safe to run again (nothing to do) and from several processes at
 * once (they serialize on an advisory lock). Each part of the schema is one step (today: the
 * store's tables); the URL is printed without its password.
 *
 * Exit codes: 0 migrated or up to date; 2 the URL is not a Postgres URL; 1 the database cannot
 * be reached, a migration failed (nothing of it applied) or the database is newer than this build.
 *
 * @since 0.8.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { Console, Effect } from "effect"
import * as SqlClient from "@effect/sql/SqlClient"
import { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import { loadPgStore } from "../layers/internal/pg/load.js"
import * as PgUrl from "../layers/internal/pg/url.js"
import * as PgPools from "../layers/PgPools.js"
import { loadClusterRun } from "./ClusterCommand.js"

/**
 * One part of the schema `assay migrate` brings up to date: its name (as printed) and the
 * effect migrating it on the database at a URL (the migrations it applied, `[id, name]`).
 *
 * @since 0.8.0
 * @category models
 */
export interface MigrationStep {
  readonly name: string
  readonly run: (url: string) => Effect.Effect<ReadonlyArray<readonly [number, string]>, StoreUnavailable | ConfigError>
}

/**
 * The cluster engine's tables (`cluster_*`, `@effect/cluster`'s SQL storage), created by the
 * cluster's own module (`ClusterRun.ts`, loaded only here: the cluster packages stay out of
 * every other command) under an advisory lock of its own.
 */
const clusterStep: MigrationStep = {
  name: "cluster",
  run: (url) =>
    Effect.flatMap(
      Effect.mapError(loadClusterRun, (e) =>
        new ConfigError({
          message: `cluster tables: cannot load the cluster engine (@effect/cluster 0.60.2, @effect/sql-pg 0.53.0): ${
            e instanceof Error ? e.message : String(e)
          }`,
          issues: [{ path: "--database", message: "the cluster engine's packages are missing" }]
        })),
      (m) => m.migrateCluster(url)
    )
}

/**
 * The steps `assay migrate` runs, in order: the store's tables (`PgStore.migrate`), the
 * global pools' tables (`PgPools.migrate`, under an advisory lock of its own), then the
 * cluster engine's tables (`cluster_*`, under an advisory lock of its own). A step fails with
 * `ConfigError` when `@effect/sql-pg` (or, for the cluster step, `@effect/cluster`) is not
 * installed.
 *
 * @since 0.8.0
 * @category migrations
 */
export const steps: ReadonlyArray<MigrationStep> = [
  // loaded on demand: @effect/sql-pg is an optional peer dependency
  { name: "store", run: (url) => Effect.flatMap(loadPgStore, (PgStore) => PgStore.migrate(url)) },
  {
    name: "pools",
    run: (url) =>
      Effect.flatMap(loadPgStore, (PgStore) =>
        Effect.scoped(Effect.flatMap(PgStore.makeClient(url, { maxConnections: 1 }), (sql) =>
          // one transaction under the pools' own advisory lock (the store's key with k2 = 2):
          // runners migrating at once wait for each other instead of racing the Migrator
          sql.withTransaction(
            Effect.zipRight(
              Effect.zipRight(
                sql.unsafe(`SELECT pg_advisory_xact_lock(${POOLS_MIGRATION_LOCK[0]}, ${POOLS_MIGRATION_LOCK[1]})`),
                // made here, under the lock: the Migrator probes for its table with a statement
                // that fails when the table is missing, which would abort this transaction
                sql.unsafe(`CREATE TABLE IF NOT EXISTS assay_pool_migrations (migration_id integer PRIMARY KEY,
                  created_at timestamptz NOT NULL DEFAULT now(), name text NOT NULL)`)
              ),
              PgPools.migrate
            )
          ).pipe(
            Effect.provideService(SqlClient.SqlClient, sql),
            Effect.mapError((e) =>
              new StoreUnavailable({
                message: `pool tables of ${PgUrl.redactUrl(url)}: migration failed: ${e.message}`,
                path: PgUrl.redactUrl(url)
              })
            )
          ))))
  },
  clusterStep
]

/** The advisory lock the pool migration holds: "asy" and 2 (the store's migration holds 1). */
const POOLS_MIGRATION_LOCK = [0x617379, 2] as const

/**
 * Runs `steps` on the database at `url` and says what each did, one line per step; fails with
 * `ConfigError` (exit 2) when `url` is not a `postgres://` / `postgresql://` URL, else with the
 * `StoreUnavailable` of the first step that fails.
 *
 * @since 0.8.0
 * @category migrations
 */
export const migrateDatabase = (
  url: string,
  with_: ReadonlyArray<MigrationStep> = steps
): Effect.Effect<void, ConfigError | StoreUnavailable> =>
  Effect.gen(function*() {
    if (!PgUrl.isPostgresUrl(url)) {
      const message = `--database: expected a postgres:// or postgresql:// URL, got ${JSON.stringify(PgUrl.redactUrl(url))}`
      return yield* new ConfigError({
        message,
        issues: [{ path: "--database", message, suggestion: "postgres://user@host:5432/assay" }]
      })
    }
    const shown = PgUrl.redactUrl(url)
    for (const step of with_) {
      const applied = yield* step.run(url)
      yield* Console.log(
        applied.length === 0
          ? `${step.name}: ${shown} is up to date`
          : `${step.name}: ${shown} migrated (${applied.map(([id, name]) => `${id}_${name}`).join(", ")})`
      )
    }
  })

const database = Options.text("database").pipe(
  Options.withDescription(
    "The PostgreSQL database to migrate, as a URL (postgres://user@host:5432/db). A password may be given in the URL or in PGPASSWORD; it is never printed."
  )
)

/**
 * The `migrate` subcommand.
 *
 * @since 0.8.0
 * @category commands
 */
export const migrate = Command.make("migrate", { database }, (o) =>
  // the cluster step's module first: in the CLI's fast-start bundle it cannot load, and the
  // command starts over on the full runtime (a defect, not caught here) before any step has
  // run or printed; a failure to load it (packages missing) is the cluster step's to report
  Effect.zipRight(Effect.ignore(loadClusterRun), migrateDatabase(o.database))).pipe(
  Command.withDescription(
    "Create or update the assay tables of a PostgreSQL database (run once, before runners start)."
  )
)
