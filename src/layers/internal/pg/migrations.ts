/**
 * The PostgreSQL schema of the store (tables prefixed `assay_`), its migrations (run by
 * `@effect/sql`'s `Migrator`, bookkeeping in `assay_store_migrations`) and the check a store
 * makes when it opens a database.
 *
 * Migrating is an explicit step (`assay migrate --database URL`, or `PgStore.migrate`), run
 * once before any writer starts: several processes write one database, so none of them
 * changes its schema behind the others. Two migrations started at once are safe: each runs in
 * one transaction that first takes a transaction-scoped advisory lock (the two-int4 form, see
 * {@link MIGRATION_LOCK}), so the second waits, then finds nothing left to do. Without the
 * lock, two `CREATE TABLE`s of the bookkeeping table race and one fails on
 * `pg_type_typname_nsp_index`.
 *
 * @since 0.8.0
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Data, Effect } from "effect"

/**
 * The database was migrated by a newer assay (its schema `version` is above this build's
 * {@link SCHEMA_VERSION}): this build neither writes nor migrates it.
 *
 * @since 0.8.0
 * @category errors
 */
export class NewerSchema extends Data.TaggedError("NewerSchema")<{ readonly version: number }> {}

/**
 * The store schema version of this build: the id of the last migration in {@link MIGRATIONS}.
 *
 * @since 0.8.0
 * @category constants
 */
export const SCHEMA_VERSION = 4

/**
 * The migrator's bookkeeping table (one row per applied migration).
 *
 * @since 0.8.0
 * @category constants
 */
export const MIGRATIONS_TABLE = "assay_store_migrations"

/**
 * The advisory lock key migrations hold, as two int4 values (`pg_advisory_xact_lock(k1, k2)`):
 * that form cannot collide with the bigint keys `@effect/cluster` takes. `k1` spells "asy" in
 * ASCII; `k2` = 1 is the store (pools use their own key).
 *
 * @since 0.8.0
 * @category constants
 */
export const MIGRATION_LOCK = [0x617379, 1] as const

/**
 * Text columns that are keys or sort orders use the "C" collation: byte order, the order
 * JavaScript's `<` gives, whatever the database's locale.
 */
const K = `TEXT COLLATE "C"`

/**
 * The statements of migration 1: every table of the store.
 *
 * - `assay_meta` (`feature_level`: `base`, or `visits-v1` after the first revisit);
 * - `assay_runs`, `assay_pipelines` (with `traversal`, the state of a control pipeline, in
 *   the compact text of `sqlite/traversalText.ts`), `assay_tasks` (keyed by `task_run_id`),
 *   `assay_attempts`, `assay_artifacts`, `assay_events`, `assay_handoffs` (ids by identity
 *   columns), `assay_metrics`, `assay_resources`;
 * - `assay_checkpoints`: one row per committed task output, keyed `(pipeline_id, seq, visit)`:
 *   the first writer of a checkpoint inserts it, any later writer of the same key finds it and
 *   writes nothing of its unit but its attempts and events (see `PgStore`).
 *
 * Times are epoch ms (`BIGINT`), JSON is stored as text (written and read back exactly as the
 * SQLite store does), flags are 0/1 `SMALLINT`s.
 *
 * @since 0.8.0
 * @category migrations
 */
export const MIGRATION_0001: ReadonlyArray<string> = [
  `CREATE TABLE assay_meta (key ${K} PRIMARY KEY, value TEXT NOT NULL)`,
  `INSERT INTO assay_meta (key, value) VALUES ('feature_level', 'base')`,
  `CREATE TABLE assay_runs (run_id ${K} PRIMARY KEY, label TEXT, status TEXT NOT NULL, config TEXT,
     started_at BIGINT NOT NULL, heartbeat_at BIGINT NOT NULL, ended_at BIGINT, stop_reason TEXT, notes TEXT,
     meta TEXT NOT NULL)`,
  `CREATE INDEX assay_runs_started ON assay_runs (started_at, run_id)`,
  `CREATE INDEX assay_runs_status ON assay_runs (status, heartbeat_at)`,
  `CREATE TABLE assay_pipelines (pipeline_id ${K} PRIMARY KEY, key TEXT, name TEXT NOT NULL, state TEXT NOT NULL,
     n_tasks_done INTEGER NOT NULL, n_tasks_total INTEGER NOT NULL, spec_digest ${K} NOT NULL,
     seed_digest TEXT NOT NULL, tags TEXT NOT NULL, attempts_total INTEGER NOT NULL, run_id ${K} NOT NULL,
     created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, started_at BIGINT, ended_at BIGINT, failed_task TEXT,
     error_type TEXT, error_message TEXT, error_class TEXT, repeat INTEGER, suite_id TEXT, experiment_id TEXT,
     local_key TEXT, traversal TEXT)`,
  `CREATE INDEX assay_pipelines_created ON assay_pipelines (created_at, pipeline_id)`,
  `CREATE INDEX assay_pipelines_run ON assay_pipelines (run_id, created_at, pipeline_id)`,
  `CREATE INDEX assay_pipelines_state ON assay_pipelines (state, created_at, pipeline_id)`,
  `CREATE INDEX assay_pipelines_spec ON assay_pipelines (spec_digest)`,
  `CREATE INDEX assay_pipelines_failed ON assay_pipelines (updated_at) WHERE state = 'failed'`,
  `CREATE TABLE assay_tasks (task_run_id ${K} PRIMARY KEY, pipeline_id ${K} NOT NULL, run_id ${K} NOT NULL,
     seq INTEGER NOT NULL, task_name TEXT NOT NULL, state TEXT NOT NULL, attempts_used INTEGER NOT NULL,
     started_at BIGINT NOT NULL, ended_at BIGINT, duration_ms DOUBLE PRECISION, error_type TEXT, error_message TEXT,
     error_class TEXT, lease_ids TEXT NOT NULL, visit INTEGER NOT NULL, active SMALLINT NOT NULL)`,
  `CREATE INDEX assay_tasks_pipeline ON assay_tasks (pipeline_id, seq, visit, task_run_id)`,
  `CREATE INDEX assay_tasks_run ON assay_tasks (run_id)`,
  `CREATE TABLE assay_attempts (attempt_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
     pipeline_id ${K} NOT NULL, run_id ${K} NOT NULL, task_run_id TEXT NOT NULL, task_name TEXT NOT NULL,
     seq INTEGER NOT NULL, attempt_no INTEGER NOT NULL, outcome TEXT NOT NULL, error_class TEXT, error_type TEXT,
     error_message TEXT, decision TEXT, lease_ids TEXT NOT NULL, started_at BIGINT NOT NULL, ended_at BIGINT NOT NULL,
     duration_ms DOUBLE PRECISION NOT NULL, visit INTEGER NOT NULL)`,
  `CREATE INDEX assay_attempts_pipeline ON assay_attempts (pipeline_id, attempt_id)`,
  `CREATE INDEX assay_attempts_run ON assay_attempts (run_id, attempt_id)`,
  `CREATE TABLE assay_artifacts (artifact_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
     pipeline_id ${K} NOT NULL, run_id ${K} NOT NULL, seq INTEGER NOT NULL, task_name TEXT, type_name TEXT NOT NULL,
     codec TEXT NOT NULL, digest TEXT NOT NULL, size BIGINT NOT NULL, storage TEXT NOT NULL, blob_ref TEXT,
     payload BYTEA, is_final SMALLINT NOT NULL, created_at BIGINT NOT NULL, visit INTEGER NOT NULL,
     active SMALLINT NOT NULL)`,
  `CREATE INDEX assay_artifacts_pipeline ON assay_artifacts (pipeline_id, seq, artifact_id)`,
  `CREATE TABLE assay_events (event_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, kind ${K} NOT NULL,
     pipeline_id ${K}, run_id ${K}, data TEXT, ts BIGINT NOT NULL)`,
  `CREATE INDEX assay_events_pipeline ON assay_events (pipeline_id, event_id)`,
  `CREATE INDEX assay_events_run ON assay_events (run_id, event_id)`,
  `CREATE INDEX assay_events_kind ON assay_events (kind, event_id)`,
  `CREATE TABLE assay_handoffs (handoff_id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
     pipeline_id ${K} NOT NULL, run_id ${K} NOT NULL, from_seq INTEGER NOT NULL, from_task TEXT NOT NULL,
     to_seq INTEGER, to_task TEXT, operation TEXT NOT NULL, entry_seq INTEGER NOT NULL, entry_artifact_id TEXT NOT NULL,
     entry_reused SMALLINT NOT NULL, reason TEXT NOT NULL, ts BIGINT NOT NULL)`,
  `CREATE INDEX assay_handoffs_pipeline ON assay_handoffs (pipeline_id, handoff_id)`,
  `CREATE INDEX assay_handoffs_run ON assay_handoffs (run_id, handoff_id)`,
  `CREATE TABLE assay_metrics (run_id ${K} NOT NULL, scope ${K} NOT NULL, name ${K} NOT NULL, value TEXT,
     label TEXT, display TEXT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (run_id, scope, name))`,
  `CREATE TABLE assay_resources (pool ${K} NOT NULL, resource_id ${K} NOT NULL, kind TEXT NOT NULL, spec TEXT,
     health TEXT, updated_at BIGINT NOT NULL, PRIMARY KEY (pool, resource_id))`,
  `CREATE TABLE assay_checkpoints (pipeline_id ${K} NOT NULL, seq INTEGER NOT NULL, visit INTEGER NOT NULL,
     run_id TEXT NOT NULL, digest TEXT NOT NULL, committed_at BIGINT NOT NULL, PRIMARY KEY (pipeline_id, seq, visit))`
]

/**
 * The call cache's table (see `PgCallCache`): one row per request key, the output's bytes with
 * its type, codec, namespace (JSON), token usage (JSON or `NULL`) and creation time (epoch ms).
 *
 * @since 0.8.0
 * @category migrations
 */
export const CALL_CACHE_TABLE = "assay_call_cache"

/**
 * The statements of migration 2: the call cache table ({@link CALL_CACHE_TABLE}).
 *
 * @since 0.8.0
 * @category migrations
 */
export const MIGRATION_0002: ReadonlyArray<string> = [
  `CREATE TABLE ${CALL_CACHE_TABLE} (key ${K} PRIMARY KEY, task_name TEXT NOT NULL, namespace TEXT NOT NULL,
     type_name TEXT NOT NULL, codec TEXT NOT NULL, payload BYTEA NOT NULL, usage TEXT, created_at BIGINT NOT NULL)`
]

/**
 * The statements of migration 3: token and cost accounting on `assay_attempts` (the SQLite
 * store's migration 0012): `model`, `tokens_in`, `tokens_out`, `tokens_estimated` (0/1) and
 * `cost_usd` (US dollars), `NULL` on attempts written before.
 *
 * @since 0.8.0
 * @category migrations
 */
export const MIGRATION_0003: ReadonlyArray<string> = [
  `ALTER TABLE assay_attempts ADD COLUMN model TEXT, ADD COLUMN tokens_in BIGINT, ADD COLUMN tokens_out BIGINT,
     ADD COLUMN tokens_estimated SMALLINT NOT NULL DEFAULT 0, ADD COLUMN cost_usd DOUBLE PRECISION`
]

/**
 * The fill factor of `assay_pipelines` from migration 4 on (percent of a page filled by
 * inserts): the room left on each page is where a patch's new row version goes, so that the
 * update is HOT (heap-only: no index entry written, the old version pruned on the page).
 *
 * @since 0.8.0
 * @category constants
 */
export const PIPELINES_FILLFACTOR = 75

/**
 * The statements of migration 4: pipeline patches made HOT-able (issue 17, BENCHMARKS.md
 * pgw17ak). A patch of a running pipeline (every checkpoint but its last: `n_tasks_done`,
 * `attempts_total`, `updated_at`) changed an indexed column, `updated_at`, the key of
 * `assay_pipelines_failed`: every patch was a non-HOT update, a new index entry in each of the
 * table's six indexes and a dead row for vacuum.
 *
 * - `assay_pipelines_failed` (`updated_at` where failed) is dropped: the failed listing
 *   (the store's `errors`, newest first) reads the failed range of `assay_pipelines_state` and
 *   sorts it (a top-N sort of the failed rows);
 * - `assay_pipelines_spec` (`spec_digest`) is dropped: its one reader, the per-spec count of
 *   `pipelinesBySpec`, reads the whole table (an aggregate of every row, no range of the index);
 * - `assay_pipelines` gets `fillfactor` {@link PIPELINES_FILLFACTOR} (pages written after the
 *   migration keep room for the patches' row versions).
 *
 * No index of `assay_pipelines` then holds a column a running pipeline's patch writes (the
 * state changes only when a pipeline starts and ends).
 *
 * @since 0.8.0
 * @category migrations
 */
export const MIGRATION_0004: ReadonlyArray<string> = [
  `DROP INDEX IF EXISTS assay_pipelines_failed`,
  `DROP INDEX IF EXISTS assay_pipelines_spec`,
  `ALTER TABLE assay_pipelines SET (fillfactor = ${PIPELINES_FILLFACTOR})`
]

/**
 * The migrations in order, as `Migrator.fromRecord` takes them (`<id>_<name>`).
 *
 * @since 0.8.0
 * @category migrations
 */
export const MIGRATIONS: Readonly<Record<string, ReadonlyArray<string>>> = {
  "1_store": MIGRATION_0001,
  "2_call_cache": MIGRATION_0002,
  "3_attempt_accounting": MIGRATION_0003,
  "4_hot_pipeline_patches": MIGRATION_0004
}

/**
 * Why a database cannot be used by this build: `unmigrated` (no store schema: run
 * `assay migrate`), `older` (a migration of this build is missing) or `newer` (the database
 * was migrated by a newer assay).
 *
 * @since 0.8.0
 * @category models
 */
export type SchemaProblem =
  | { readonly _tag: "unmigrated" }
  | { readonly _tag: "older"; readonly version: number }
  | { readonly _tag: "newer"; readonly version: number }

/**
 * The schema version a database holds: `0` when it has no bookkeeping table (never migrated),
 * else the largest applied migration id.
 *
 * @since 0.8.0
 * @category migrations
 */
export const schemaVersion = (sql: SqlClient.SqlClient): Effect.Effect<number, SqlError> =>
  Effect.gen(function*() {
    const [t] = yield* sql.unsafe<{ t: string | null }>(`SELECT to_regclass('${MIGRATIONS_TABLE}')::text AS t`)
    if (t?.t === null || t?.t === undefined) return 0
    const [m] = yield* sql.unsafe<{ m: unknown }>(`SELECT coalesce(max(migration_id), 0) AS m FROM ${MIGRATIONS_TABLE}`)
    return Number(m?.m ?? 0)
  })

/**
 * What keeps this build from using a database at `version` ({@link schemaVersion}), or
 * `undefined` when it is exactly this build's {@link SCHEMA_VERSION}.
 *
 * @since 0.8.0
 * @category migrations
 */
export const problemOf = (version: number): SchemaProblem | undefined =>
  version === 0
    ? { _tag: "unmigrated" }
    : version < SCHEMA_VERSION
    ? { _tag: "older", version }
    : version > SCHEMA_VERSION
    ? { _tag: "newer", version }
    : undefined

/**
 * Brings the database to {@link SCHEMA_VERSION} in one transaction under the migration lock
 * (see the module docs); returns the migrations it applied (`[id, name]`, empty when there was
 * nothing to do). Fails with `newer` (left untouched) when the database is ahead of this build,
 * else with the `SqlError` or `MigrationError` of the step that failed (nothing applied).
 *
 * @since 0.8.0
 * @category migrations
 */
export const migrate = (
  sql: SqlClient.SqlClient
): Effect.Effect<
  ReadonlyArray<readonly [number, string]>,
  SqlError | Migrator.MigrationError | NewerSchema
> =>
  sql.withTransaction(Effect.gen(function*() {
    yield* sql.unsafe(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK[0]}, ${MIGRATION_LOCK[1]})`)
    // created here, under the lock, so that the migrator finds it (its own create is not
    // safe against a concurrent one)
    yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (migration_id integer PRIMARY KEY,
      created_at timestamptz NOT NULL DEFAULT now(), name text NOT NULL)`)
    const version = yield* schemaVersion(sql)
    if (version > SCHEMA_VERSION) return yield* new NewerSchema({ version })
    const loader = Migrator.fromRecord(
      Object.fromEntries(
        Object.entries(MIGRATIONS).map(([id, statements]) => [
          id,
          Effect.forEach(statements, (s) => sql.unsafe(s), { discard: true })
        ])
      )
    )
    return yield* Effect.provideService(
      Migrator.make({})({ loader, table: MIGRATIONS_TABLE }),
      SqlClient.SqlClient,
      sql
    )
  }))
