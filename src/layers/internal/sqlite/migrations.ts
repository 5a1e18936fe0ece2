/**
 * The SQLite schema of the store: migrations 1 to 16, the schema version and feature levels
 * this build knows, and the constants queries share (`UNADMITTED_PNO`, `TIMED_TERMINAL`).
 *
 * @since 0.1.0
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { defaultPipelineId } from "../../../domain/Pipeline.js"

/**
 * Schema version written by this build into `store_meta`.
 *
 * @since 0.1.0
 * @category constants
 */
export const SCHEMA_VERSION = 17

/**
 * The SQL condition of a terminal pipeline with a duration: the rows `stats` takes latency
 * percentiles from. Written exactly like this in the partial indexes of
 * {@link MIGRATION_0002} and in the queries that must use them (SQLite matches a partial
 * index only when the query's WHERE implies the index's).
 *
 * @since 0.1.0
 * @category constants
 */
export const TIMED_TERMINAL =
  "state IN ('succeeded', 'failed', 'interrupted') AND started_at IS NOT NULL AND ended_at IS NOT NULL"

/**
 * Feature levels this build understands. A store at any other level is refused.
 *
 * @since 0.1.0
 * @category constants
 */
export const KNOWN_FEATURE_LEVELS: ReadonlySet<string> = new Set(["base", "visits-v1"])

/**
 * The statements of migration 0001 (one statement each: better-sqlite3 prepares one at a time).
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATION_0001: ReadonlyArray<string> = [
  `CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
  `INSERT INTO store_meta (key, value) VALUES ('schema_version', '1'), ('feature_level', 'base')`,
  `CREATE TABLE store_writer (id INTEGER PRIMARY KEY CHECK (id = 1), pid INTEGER NOT NULL, host TEXT NOT NULL,
     run_id TEXT, since INTEGER NOT NULL)`,
  `CREATE TABLE runs (run_id TEXT PRIMARY KEY, label TEXT, status TEXT NOT NULL, config TEXT,
     started_at INTEGER NOT NULL, heartbeat_at INTEGER NOT NULL, ended_at INTEGER, stop_reason TEXT,
     notes TEXT, meta TEXT NOT NULL)`,
  `CREATE INDEX runs_started ON runs (started_at, run_id)`,
  `CREATE INDEX runs_status_heartbeat ON runs (status, heartbeat_at)`,
  `CREATE TABLE pipelines (pipeline_id TEXT PRIMARY KEY, key TEXT, name TEXT NOT NULL, state TEXT NOT NULL,
     n_tasks_done INTEGER NOT NULL, n_tasks_total INTEGER NOT NULL, spec_digest TEXT NOT NULL,
     seed_digest TEXT NOT NULL, tags TEXT NOT NULL, attempts_total INTEGER NOT NULL, run_id TEXT NOT NULL,
     created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, started_at INTEGER, ended_at INTEGER,
     failed_task TEXT, error_type TEXT, error_message TEXT, error_class TEXT) WITHOUT ROWID`,
  `CREATE INDEX pipelines_created ON pipelines (created_at, pipeline_id)`,
  `CREATE INDEX pipelines_run ON pipelines (run_id, created_at, pipeline_id)`,
  `CREATE INDEX pipelines_state ON pipelines (state, created_at, pipeline_id)`,
  `CREATE TABLE tasks (task_run_id TEXT PRIMARY KEY, pipeline_id TEXT NOT NULL, run_id TEXT NOT NULL,
     seq INTEGER NOT NULL, task_name TEXT NOT NULL, state TEXT NOT NULL, attempts_used INTEGER NOT NULL,
     started_at INTEGER NOT NULL, ended_at INTEGER, duration_ms REAL, error_type TEXT, error_message TEXT,
     error_class TEXT, lease_ids TEXT NOT NULL) WITHOUT ROWID`,
  `CREATE INDEX tasks_pipeline ON tasks (pipeline_id, seq, task_run_id)`,
  `CREATE INDEX tasks_run ON tasks (run_id, pipeline_id, seq, task_run_id)`,
  `CREATE TABLE attempts (attempt_id INTEGER PRIMARY KEY, pipeline_id TEXT NOT NULL, run_id TEXT NOT NULL,
     task_run_id TEXT NOT NULL, task_name TEXT NOT NULL, seq INTEGER NOT NULL, attempt_no INTEGER NOT NULL,
     outcome TEXT NOT NULL, error_class TEXT, error_type TEXT, error_message TEXT, decision TEXT,
     lease_ids TEXT NOT NULL, started_at INTEGER NOT NULL, ended_at INTEGER NOT NULL, duration_ms REAL NOT NULL)`,
  `CREATE INDEX attempts_pipeline ON attempts (pipeline_id, attempt_id)`,
  `CREATE INDEX attempts_run ON attempts (run_id, attempt_id)`,
  `CREATE TABLE artifacts (artifact_id INTEGER PRIMARY KEY, pipeline_id TEXT NOT NULL, run_id TEXT NOT NULL,
     seq INTEGER NOT NULL, task_name TEXT, type_name TEXT NOT NULL, codec TEXT NOT NULL, digest TEXT NOT NULL,
     size INTEGER NOT NULL, storage TEXT NOT NULL, blob_ref TEXT, payload BLOB, is_final INTEGER NOT NULL,
     created_at INTEGER NOT NULL)`,
  `CREATE INDEX artifacts_pipeline ON artifacts (pipeline_id, seq, artifact_id)`,
  `CREATE TABLE events (event_id INTEGER PRIMARY KEY, kind TEXT NOT NULL, pipeline_id TEXT, run_id TEXT,
     data TEXT, ts INTEGER NOT NULL)`,
  `CREATE INDEX events_pipeline ON events (pipeline_id, event_id)`,
  `CREATE INDEX events_run ON events (run_id, event_id)`,
  `CREATE INDEX events_kind ON events (kind, event_id)`,
  `CREATE TABLE metrics (run_id TEXT NOT NULL, scope TEXT NOT NULL, name TEXT NOT NULL, value TEXT,
     label TEXT, display TEXT NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (run_id, scope, name))`,
  `CREATE TABLE resources (pool TEXT NOT NULL, resource_id TEXT NOT NULL, kind TEXT NOT NULL, spec TEXT,
     health TEXT, updated_at INTEGER NOT NULL, PRIMARY KEY (pool, resource_id))`
]

/**
 * The statements of migration 0002 (schema version 2): read-side indexes, nothing else.
 *
 * - `pipelines_run_state (run_id, state, ended_at, started_at)`: counts by state of a run and
 *   the completion histogram, index-only (no row lookups in the WITHOUT ROWID table);
 * - `pipelines_run_latency (run_id, ended_at - started_at, …)` and `pipelines_latency
 *   (ended_at - started_at, …)`, partial on {@link TIMED_TERMINAL}: the latency percentiles
 *   read the k-th duration by `ORDER BY … LIMIT 1 OFFSET k` from the index (covering: the
 *   trailing columns let SQLite check the partial condition without the table).
 *
 * A store at version 1 opened read-only keeps working without them (slower `stats`).
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATION_0002: ReadonlyArray<string> = [
  `CREATE INDEX pipelines_run_state ON pipelines (run_id, state, ended_at, started_at)`,
  `CREATE INDEX pipelines_run_latency ON pipelines (run_id, (ended_at - started_at), state, ended_at, started_at)
     WHERE ${TIMED_TERMINAL}`,
  `CREATE INDEX pipelines_latency ON pipelines ((ended_at - started_at), state, ended_at, started_at)
     WHERE ${TIMED_TERMINAL}`,
  `UPDATE store_meta SET value = '2' WHERE key = 'schema_version'`
]

/**
 * The pipeline number of a child row (task, attempt, artifact, event) whose pipeline the
 * writer did not know when it wrote the row (never admitted, or not yet): such rows are
 * re-numbered when the pipeline is admitted (see {@link MIGRATION_0003}).
 *
 * @since 0.1.0
 * @category constants
 */
export const UNADMITTED_PNO = 0

const PIPELINE_COLUMNS_SQL = `key TEXT, name TEXT NOT NULL, state TEXT NOT NULL,
     n_tasks_done INTEGER NOT NULL, n_tasks_total INTEGER NOT NULL, spec_digest TEXT NOT NULL,
     seed_digest TEXT NOT NULL, tags TEXT NOT NULL, attempts_total INTEGER NOT NULL, run_id TEXT NOT NULL,
     created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, started_at INTEGER, ended_at INTEGER,
     failed_task TEXT, error_type TEXT, error_message TEXT, error_class TEXT`
const PIPELINE_COPY = `pipeline_id, key, name, state, n_tasks_done, n_tasks_total, spec_digest, seed_digest, tags,
     attempts_total, run_id, created_at, updated_at, started_at, ended_at, failed_task, error_type, error_message,
     error_class`
const TASK_COPY = `task_run_id, pipeline_id, run_id, seq, task_name, state, attempts_used, started_at, ended_at,
     duration_ms, error_type, error_message, error_class, lease_ids`
const ATTEMPT_COPY = `attempt_id, pipeline_id, run_id, task_run_id, task_name, seq, attempt_no, outcome, error_class,
     error_type, error_message, decision, lease_ids, started_at, ended_at, duration_ms`
const ARTIFACT_COPY = `artifact_id, pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage,
     blob_ref, payload, is_final, created_at`
const EVENT_COPY = `event_id, kind, pipeline_id, run_id, data, ts`
/** `t.` before each column of a copy list (for the joins of the rebuild). */
const prefixed = (cols: string) => cols.split(",").map((c) => `t.${c.trim()}`).join(", ")
/** The pipeline number of the row `t` of an old child table, by its pipeline id. */
const PNO_OF = `coalesce((SELECT p.pno FROM pipelines_v3 p WHERE p.pipeline_id = t.pipeline_id), ${UNADMITTED_PNO})`

/**
 * The statements of migration 0003 (schema version 3): the tables rebuilt for write locality.
 *
 * Versions 1–2 keyed everything by the content-addressed `pipeline_id` (a random hash):
 * `pipelines` and `tasks` were WITHOUT ROWID tables keyed by random ids and every per-pipeline
 * index led with `pipeline_id`, so each group commit dirtied a random leaf page per row and
 * index (WAL mode writes every dirty page in full). Version 3 numbers pipelines at admission:
 *
 * - `pipelines.pno INTEGER PRIMARY KEY` (the rowid, assigned in admission order; the rebuild
 *   numbers existing rows by `(created_at, pipeline_id)`), `pipeline_id` unique by the index
 *   `pipelines_id` (the one per-pipeline index that stays keyed by the random id: one insert
 *   per admission);
 * - `tasks`, `attempts`, `artifacts` and `events` carry `pno`, and their per-pipeline indexes
 *   lead with it (`tasks` is WITHOUT ROWID keyed `(pno, seq, task_run_id)`), so the rows of
 *   pipelines in flight (admitted together) share pages. `pipeline_id` stays as a plain column
 *   for readers and exports. A child row whose pipeline is not (yet) admitted gets
 *   {@link UNADMITTED_PNO}, found through small partial indexes on `pipeline_id` (only such
 *   rows are in them) and re-numbered by the writer when that pipeline is admitted. Events
 *   without a pipeline have `pno` NULL.
 *
 * Every other index of version 2 is kept (their leading columns are run ids, kinds, states
 * and times, which append). The rebuild runs inside the migrator's transaction.
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATION_0003: ReadonlyArray<string> = [
  `CREATE TABLE pipelines_v3 (pno INTEGER PRIMARY KEY, pipeline_id TEXT NOT NULL, ${PIPELINE_COLUMNS_SQL})`,
  `CREATE UNIQUE INDEX pipelines_id ON pipelines_v3 (pipeline_id)`,
  `INSERT INTO pipelines_v3 (${PIPELINE_COPY}) SELECT ${PIPELINE_COPY} FROM pipelines ORDER BY created_at, pipeline_id`,
  `CREATE TABLE tasks_v3 (pno INTEGER NOT NULL, seq INTEGER NOT NULL, task_run_id TEXT NOT NULL,
     pipeline_id TEXT NOT NULL, run_id TEXT NOT NULL, task_name TEXT NOT NULL, state TEXT NOT NULL,
     attempts_used INTEGER NOT NULL, started_at INTEGER NOT NULL, ended_at INTEGER, duration_ms REAL,
     error_type TEXT, error_message TEXT, error_class TEXT, lease_ids TEXT NOT NULL,
     PRIMARY KEY (pno, seq, task_run_id)) WITHOUT ROWID`,
  `INSERT INTO tasks_v3 (pno, ${TASK_COPY}) SELECT ${PNO_OF}, ${prefixed(TASK_COPY)} FROM tasks t`,
  `CREATE TABLE attempts_v3 (attempt_id INTEGER PRIMARY KEY, pno INTEGER NOT NULL, pipeline_id TEXT NOT NULL,
     run_id TEXT NOT NULL, task_run_id TEXT NOT NULL, task_name TEXT NOT NULL, seq INTEGER NOT NULL,
     attempt_no INTEGER NOT NULL, outcome TEXT NOT NULL, error_class TEXT, error_type TEXT, error_message TEXT,
     decision TEXT, lease_ids TEXT NOT NULL, started_at INTEGER NOT NULL, ended_at INTEGER NOT NULL,
     duration_ms REAL NOT NULL)`,
  `INSERT INTO attempts_v3 (pno, ${ATTEMPT_COPY}) SELECT ${PNO_OF}, ${prefixed(ATTEMPT_COPY)} FROM attempts t`,
  `CREATE TABLE artifacts_v3 (artifact_id INTEGER PRIMARY KEY, pno INTEGER NOT NULL, pipeline_id TEXT NOT NULL,
     run_id TEXT NOT NULL, seq INTEGER NOT NULL, task_name TEXT, type_name TEXT NOT NULL, codec TEXT NOT NULL,
     digest TEXT NOT NULL, size INTEGER NOT NULL, storage TEXT NOT NULL, blob_ref TEXT, payload BLOB,
     is_final INTEGER NOT NULL, created_at INTEGER NOT NULL)`,
  `INSERT INTO artifacts_v3 (pno, ${ARTIFACT_COPY}) SELECT ${PNO_OF}, ${prefixed(ARTIFACT_COPY)} FROM artifacts t`,
  `CREATE TABLE events_v3 (event_id INTEGER PRIMARY KEY, kind TEXT NOT NULL, pno INTEGER, pipeline_id TEXT,
     run_id TEXT, data TEXT, ts INTEGER NOT NULL)`,
  `INSERT INTO events_v3 (pno, ${EVENT_COPY}) SELECT CASE WHEN t.pipeline_id IS NULL THEN NULL ELSE ${PNO_OF} END,
     ${prefixed(EVENT_COPY)} FROM events t`,
  `DROP TABLE pipelines`,
  `DROP TABLE tasks`,
  `DROP TABLE attempts`,
  `DROP TABLE artifacts`,
  `DROP TABLE events`,
  `ALTER TABLE pipelines_v3 RENAME TO pipelines`,
  `ALTER TABLE tasks_v3 RENAME TO tasks`,
  `ALTER TABLE attempts_v3 RENAME TO attempts`,
  `ALTER TABLE artifacts_v3 RENAME TO artifacts`,
  `ALTER TABLE events_v3 RENAME TO events`,
  `CREATE INDEX pipelines_created ON pipelines (created_at, pipeline_id)`,
  `CREATE INDEX pipelines_run ON pipelines (run_id, created_at, pipeline_id)`,
  `CREATE INDEX pipelines_state ON pipelines (state, created_at, pipeline_id)`,
  ...MIGRATION_0002.slice(0, 3),
  `CREATE INDEX tasks_run ON tasks (run_id, pno, seq, task_run_id)`,
  `CREATE INDEX tasks_unadmitted ON tasks (pipeline_id) WHERE pno = ${UNADMITTED_PNO}`,
  `CREATE INDEX attempts_pipeline ON attempts (pno, attempt_id)`,
  `CREATE INDEX attempts_run ON attempts (run_id, attempt_id)`,
  `CREATE INDEX attempts_unadmitted ON attempts (pipeline_id) WHERE pno = ${UNADMITTED_PNO}`,
  `CREATE INDEX artifacts_pipeline ON artifacts (pno, seq, artifact_id)`,
  `CREATE INDEX artifacts_unadmitted ON artifacts (pipeline_id) WHERE pno = ${UNADMITTED_PNO}`,
  `CREATE INDEX events_pipeline ON events (pno, event_id)`,
  `CREATE INDEX events_run ON events (run_id, event_id)`,
  `CREATE INDEX events_kind ON events (kind, event_id)`,
  `CREATE INDEX events_unadmitted ON events (pipeline_id) WHERE pno = ${UNADMITTED_PNO}`,
  `UPDATE store_meta SET value = '3' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0004 (schema version 4): the repeat index of each pipeline
 * (`pipelines.repeat`, which of the `repeats` samples of its seed it is, from 0; `NULL` when
 * unknown). Versions 1–3 did not store it; {@link backfillRepeats} recovers it for the
 * content-addressed pipelines of an existing store.
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATION_0004: ReadonlyArray<string> = [
  `ALTER TABLE pipelines ADD COLUMN repeat INTEGER`,
  `UPDATE store_meta SET value = '4' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0005 (schema version 5): `pipelines_spec (spec_digest)`, so
 * that counting the pipelines of each definition (`Store.pipelinesBySpec`, what `resume` and
 * `validate` say before a run whose definition changed) is one `GROUP BY` read from the index
 * alone. A new pipeline appends at the end of its definition's range (its `pno` grows); state
 * changes do not touch it.
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATION_0005: ReadonlyArray<string> = [
  `CREATE INDEX pipelines_spec ON pipelines (spec_digest)`,
  `UPDATE store_meta SET value = '5' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0006 (schema version 6): visits and the handoff ledger, added
 * without rewriting a row.
 *
 * - `tasks.visit`, `attempts.visit`, `artifacts.visit`: the occurrence a row belongs to. The
 *   columns have no default: every writer of this build writes them, rows from before read as
 *   0 (`NULL`), and at feature level `visits-v1` the guard ({@link VISITS_GUARD})
 *   refuse an insert without one;
 * - `tasks.active`, `artifacts.active`: 0 once superseded by a rewind, a retry-all or a
 *   restart (`NULL`, from before, reads as active);
 * - `pipelines.traversal`: the traversal state (JSON) of a pipeline that declares control,
 *   `NULL` for the others;
 * - `handoffs`: the ledger, one row per committed transition (`handoffs_pipeline`,
 *   `handoffs_run` for the two filters).
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATION_0006: ReadonlyArray<string> = [
  `ALTER TABLE tasks ADD COLUMN visit INTEGER`,
  `ALTER TABLE tasks ADD COLUMN active INTEGER`,
  `ALTER TABLE attempts ADD COLUMN visit INTEGER`,
  `ALTER TABLE artifacts ADD COLUMN visit INTEGER`,
  `ALTER TABLE artifacts ADD COLUMN active INTEGER`,
  `ALTER TABLE pipelines ADD COLUMN traversal TEXT`,
  `CREATE TABLE handoffs (handoff_id INTEGER PRIMARY KEY, pno INTEGER NOT NULL, pipeline_id TEXT NOT NULL,
     run_id TEXT NOT NULL, from_seq INTEGER NOT NULL, from_task TEXT NOT NULL, to_seq INTEGER, to_task TEXT,
     operation TEXT NOT NULL, entry_seq INTEGER NOT NULL, entry_artifact_id TEXT NOT NULL,
     entry_reused INTEGER NOT NULL, reason TEXT NOT NULL, ts INTEGER NOT NULL)`,
  `CREATE INDEX handoffs_pipeline ON handoffs (pno, handoff_id)`,
  `CREATE INDEX handoffs_run ON handoffs (run_id, handoff_id)`,
  `UPDATE store_meta SET value = '6' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0007 (schema version 7): suites (see `domain/Suite.ts` and
 * `layers/SuiteStore.ts`), added without rewriting a row.
 *
 * - `pipelines.suite_id`, `pipelines.experiment_id`, `pipelines.local_key`: the member a
 *   pipeline belongs to and its key outside the suite (`NULL` outside suites and for rows from
 *   before); `pipelines_experiment (experiment_id, created_at, pipeline_id)` serves the
 *   per-member pipeline reads of a combined suite root;
 * - `events_time (ts, event_id)` and `events_run_time (run_id, ts, event_id)`: the latest
 *   events by time (what a suite's merged `events(limit)` asks every database for), read from
 *   the end of the index;
 * - the suite catalog: `suite_members` (each member's persisted definition digest, label and
 *   limit), `suite_membership` (per run and member: selection, admitted count, source facts),
 *   `suite_member_dbs` (the members whose own database a `byExperiment` root has created, so a
 *   missing one is an error, never silently recreated). Every store has the (empty) tables;
 *   only a suite root's catalog database fills them.
 *
 * @since 0.5.0
 * @category migrations
 */
export const MIGRATION_0007: ReadonlyArray<string> = [
  `ALTER TABLE pipelines ADD COLUMN suite_id TEXT`,
  `ALTER TABLE pipelines ADD COLUMN experiment_id TEXT`,
  `ALTER TABLE pipelines ADD COLUMN local_key TEXT`,
  `CREATE INDEX pipelines_experiment ON pipelines (experiment_id, created_at, pipeline_id)`,
  `CREATE INDEX events_time ON events (ts, event_id)`,
  `CREATE INDEX events_run_time ON events (run_id, ts, event_id)`,
  `CREATE TABLE suite_members (experiment_id TEXT PRIMARY KEY, definition_digest TEXT NOT NULL, label TEXT,
     member_limit INTEGER, created_at INTEGER NOT NULL)`,
  `CREATE TABLE suite_membership (run_id TEXT NOT NULL, experiment_id TEXT NOT NULL, selected INTEGER NOT NULL,
     admitted INTEGER NOT NULL, source_exhausted INTEGER NOT NULL, source_error TEXT, limit_reached INTEGER NOT NULL,
     updated_at INTEGER NOT NULL, PRIMARY KEY (run_id, experiment_id))`,
  `CREATE TABLE suite_member_dbs (experiment_id TEXT PRIMARY KEY, created_at INTEGER NOT NULL)`,
  `UPDATE store_meta SET value = '7' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0008 (schema version 8): `suite_members.definition_parts`, the
 * parts a member's definition digest covers (JSON object: part name -> value or short digest),
 * so a refused definition change can name what changed. `NULL` for members registered before.
 *
 * @since 0.5.0
 * @category migrations
 */
export const MIGRATION_0008: ReadonlyArray<string> = [
  `ALTER TABLE suite_members ADD COLUMN definition_parts TEXT`,
  `UPDATE store_meta SET value = '8' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0009 (schema version 9): studies (see `services/Study.ts` and
 * `services/StudyCatalog.ts`), added without rewriting a row. Every store has the (empty)
 * tables; only the catalog database of a study's suite root fills them.
 *
 * - `studies`: one row per study id: question, type, the current protocol version, the
 *   study's status (`pending` … `inconclusive`, or `interrupted`), the stop that fired (its
 *   reason, the condition as JSON, when) and when the row last changed;
 * - `study_protocol_versions`: each frozen protocol version: its digest, its parts (JSON
 *   object: part -> short digest or value, what a refused change names) and the protocol's
 *   description (JSON);
 * - `study_trials`: one row per trial (`p<version>-<variant>-r<repeat>`): its variant (id,
 *   key, assignment as JSON), repeat, whether its pipelines are seedable, its settled status
 *   and reason, its usage so far (calls, tokens, cost in USD, active wall time in ms, summed
 *   across resumes), its metrics at settlement (JSON), when it started and ended;
 *   `study_trials_version (study_id, version, trial_id)` lists one version's trials;
 * - `study_stop_requests`: manual stop requests (`assay study stop`), written by another
 *   process while the study runs: when, `drain` or `cancel`, who, and when the running
 *   process took it (`handled_at`, NULL until then).
 *
 * @since 0.6.0
 * @category migrations
 */
export const MIGRATION_0009: ReadonlyArray<string> = [
  `CREATE TABLE studies (study_id TEXT PRIMARY KEY, question TEXT NOT NULL, type TEXT NOT NULL,
     created_at INTEGER NOT NULL, current_version INTEGER NOT NULL, status TEXT NOT NULL, stop_reason TEXT,
     stop_condition_json TEXT, stopped_at INTEGER, updated_at INTEGER NOT NULL)`,
  `CREATE TABLE study_protocol_versions (study_id TEXT NOT NULL, version INTEGER NOT NULL, protocol_digest TEXT NOT NULL,
     protocol_parts_json TEXT NOT NULL, protocol_json TEXT NOT NULL, created_at INTEGER NOT NULL,
     PRIMARY KEY (study_id, version))`,
  `CREATE TABLE study_trials (trial_id TEXT PRIMARY KEY, study_id TEXT NOT NULL, version INTEGER NOT NULL,
     variant_id TEXT NOT NULL, variant_key TEXT NOT NULL, variant_json TEXT NOT NULL, repeat INTEGER NOT NULL,
     seedable INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT, calls INTEGER NOT NULL DEFAULT 0,
     tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0, time_ms REAL NOT NULL DEFAULT 0,
     metrics_json TEXT, started_at INTEGER, ended_at INTEGER, updated_at INTEGER NOT NULL)`,
  `CREATE INDEX study_trials_version ON study_trials (study_id, version, trial_id)`,
  `CREATE TABLE study_stop_requests (id INTEGER PRIMARY KEY, study_id TEXT NOT NULL, at INTEGER NOT NULL,
     running TEXT NOT NULL, by TEXT NOT NULL, handled_at INTEGER)`,
  `UPDATE store_meta SET value = '9' WHERE key = 'schema_version'`
]

/**
 * The message a write without a visit fails with on a store at feature level `visits-v1`
 * (inside SQLite's "bad JSON path" error: see {@link VISITS_GUARD}).
 *
 * @since 0.9.0
 * @category constants
 */
export const VISITS_GUARD_MESSAGE =
  "assay store at feature level visits-v1: this writer does not record visits (use a newer assay)"

/** The tables whose rows carry a visit (the guarded ones). */
const VISIT_TABLES = ["tasks", "attempts", "artifacts"] as const

/**
 * The guard of a store at feature level `visits-v1`, created in the transaction that moves it
 * there: a row of `tasks`, `attempts` or `artifacts` without a `visit` (written by a writer
 * built before visits, which does not know the column) cannot be stored, so that such a
 * writer cannot silently write rows whose occurrence nobody knows.
 *
 * The statements, per table: rows from before the visit columns get visit 0 (what readers
 * already read for `NULL`, so nothing a reader sees changes), then a partial index on
 * `visit IS NULL` whose condition goes on to call SQLite's own `json_extract` with
 * {@link VISITS_GUARD_MESSAGE} as the JSON path. SQLite evaluates a partial index's condition
 * for every row it inserts (and for every row an `UPDATE` of `visit` changes): for a row with a
 * visit the condition stops at `visit IS NULL` (false, one column test, the index stays
 * empty); for a row without one, `json_extract` fails ("bad JSON path: '<message>'", or "JSON
 * path error near '<message>'" in older SQLite) and the statement aborts. Only built-in
 * functions: the `sqlite3` shell runs `PRAGMA integrity_check`, `VACUUM` and a replayed
 * `.dump` on such a store, and backups and copies keep the guard.
 *
 * Until schema version 13 the guard was a `BEFORE INSERT` trigger per table (`WHEN NEW.visit
 * IS NULL`): SQLite runs a trigger as a sub-program for every inserted row, ~0.6–1 µs per row
 * (~13 µs per pipeline of the rewind-once benchmark); {@link MIGRATION_0013} replaces them.
 *
 * @since 0.1.0
 * @category migrations
 */
export const VISITS_GUARD: ReadonlyArray<string> = VISIT_TABLES.flatMap((table) => [
  `UPDATE ${table} SET visit = 0 WHERE visit IS NULL`,
  `CREATE INDEX IF NOT EXISTS ${table}_visits_required ON ${table} (visit)
     WHERE visit IS NULL AND json_extract('{}', iif(visit IS NULL, '${VISITS_GUARD_MESSAGE}', '$')) IS NULL`
])

/**
 * The statements of migration 0013 (schema version 13): the guard of `visits-v1` stores as
 * partial indexes ({@link VISITS_GUARD}) instead of triggers. The triggers are dropped (on a
 * `base` store there are none); {@link visitsGuardStep}, the data step, creates the indexes
 * when the store is at `visits-v1`. A `base` store: no row is read or written.
 *
 * @since 0.9.0
 * @category migrations
 */
export const MIGRATION_0013: ReadonlyArray<string> = [
  ...VISIT_TABLES.map((table) => `DROP TRIGGER IF EXISTS ${table}_visits_guard`),
  `UPDATE store_meta SET value = '13' WHERE key = 'schema_version'`
]

/**
 * The data step of migration 0013, in the migrator's transaction after its statements: on a
 * store at feature level `visits-v1`, runs {@link VISITS_GUARD} (one scan of each guarded
 * table for the backfill, one for the index; the index stays empty).
 *
 * @since 0.9.0
 * @category migrations
 */
export const visitsGuardStep = (client: SqlClient.SqlClient): Effect.Effect<void, SqlError> =>
  Effect.gen(function*() {
    const level = yield* client.unsafe<{ value: string }>(`SELECT value FROM store_meta WHERE key = 'feature_level'`)
    if (level[0]?.value !== "visits-v1") return
    for (const statement of VISITS_GUARD) yield* client.unsafe(statement)
  })

/**
 * The largest repeat index {@link repeatOfContentAddress} tries (exclusive).
 *
 * @since 0.1.0
 * @category constants
 */
export const REPEAT_SEARCH_LIMIT = 1024

/**
 * The repeat index of a content-addressed pipeline, recovered from its identity: the `r` in
 * `[0, REPEAT_SEARCH_LIMIT)` with `defaultPipelineId(specDigest, seedDigest, r) === pipelineId`
 * (src/domain/Pipeline.ts), else `null` (an explicit key, or more repeats than the limit).
 *
 * @since 0.1.0
 * @category migrations
 */
export const repeatOfContentAddress = (pipelineId: string, specDigest: string, seedDigest: string): number | null => {
  for (let r = 0; r < REPEAT_SEARCH_LIMIT; r++) {
    if (defaultPipelineId(specDigest, seedDigest, r) === pipelineId) return r
  }
  return null
}

/**
 * The data step of migration 0004, run in the migrator's transaction after its statements:
 * fills `pipelines.repeat` for content-addressed pipelines (`key IS NULL`) by
 * {@link repeatOfContentAddress}, 5,000 rows at a time (keyset by `pno`), one `UPDATE … WHERE
 * pno IN (…)` per repeat value and page. Rows with an explicit key keep `NULL`: their id does
 * not encode the repeat.
 *
 * @since 0.1.0
 * @category migrations
 */
export const backfillRepeats = (client: SqlClient.SqlClient): Effect.Effect<void, SqlError> =>
  Effect.gen(function*() {
    let after = -1
    for (;;) {
      const page = yield* client.unsafe<{ pno: number; pipeline_id: string; spec_digest: string; seed_digest: string }>(
        `SELECT pno, pipeline_id, spec_digest, seed_digest FROM pipelines WHERE key IS NULL AND pno > ? ORDER BY pno LIMIT 5000`,
        [after]
      )
      if (page.length === 0) return
      const byRepeat = new Map<number, Array<number>>()
      for (const r of page) {
        const repeat = repeatOfContentAddress(r.pipeline_id, r.spec_digest, r.seed_digest)
        if (repeat === null) continue
        const list = byRepeat.get(repeat) ?? []
        list.push(Number(r.pno))
        byRepeat.set(repeat, list)
      }
      for (const [repeat, pnos] of byRepeat) {
        for (let i = 0; i < pnos.length; i += 500) {
          const chunk = pnos.slice(i, i + 500)
          yield* client.unsafe(`UPDATE pipelines SET repeat = ? WHERE pno IN (${chunk.map(() => "?").join(",")})`, [repeat, ...chunk])
        }
      }
      after = Number(page[page.length - 1]!.pno)
    }
  })

/**
 * What a migration's data step may know about the store it migrates, beyond its rows:
 * `suiteDatabase` is `true` when the writer opening it is a suite's (`SqliteStoreOptions.suiteRoot`
 * set: a suite root's catalog database or a member's database), `false` for a plain store.
 *
 * @since 0.16.0
 * @category migrations
 */
export interface MigrationContext {
  readonly suiteDatabase: boolean
}

/**
 * One migration: its id (recorded by the migrator in `effect_sql_migrations`), its statements,
 * and an optional data step run after them in the same transaction (on an empty store it does
 * nothing), given the {@link MigrationContext} of the open.
 *
 * @since 0.1.0
 * @category migrations
 */
export type Migration = readonly [
  id: string,
  statements: ReadonlyArray<string>,
  data?: (client: SqlClient.SqlClient, context: MigrationContext) => Effect.Effect<void, SqlError>
]

/**
 * The call cache table (see `CallCache`), one row per stored output: `key` (32 hex, the
 * digest of the request and its namespace), the task's name, the namespace (JSON: repeat,
 * visit, variant), the encoded output (`type_name`, `codec`, `payload`), the token usage of
 * the call that made it (JSON or `NULL`) and `created_at` (epoch ms, what a TTL is measured
 * from). Also what a shared cache database (`--cache-db`) holds, created there with the same
 * statement.
 *
 * @since 0.7.0
 * @category migrations
 */
export const CALL_CACHE_TABLE = `CREATE TABLE IF NOT EXISTS call_cache (key TEXT PRIMARY KEY, task_name TEXT NOT NULL,
     namespace TEXT NOT NULL, type_name TEXT NOT NULL, codec TEXT NOT NULL, payload BLOB NOT NULL, usage TEXT,
     created_at INTEGER NOT NULL)`

/**
 * The statements of migration 0010 (schema version 10): the call cache table
 * ({@link CALL_CACHE_TABLE}), so a run's store can keep the outputs its cached tasks made.
 *
 * @since 0.7.0
 * @category migrations
 */
export const MIGRATION_0010: ReadonlyArray<string> = [
  CALL_CACHE_TABLE,
  `UPDATE store_meta SET value = '10' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0011 (schema version 11): accepted changes of a suite member's
 * input rows (see `SuiteCatalog.acceptChangedRows`), added without rewriting a row.
 *
 * - `suite_superseded`: in the database that holds the pipelines (a combined root's
 *   `state.db`, a byExperiment member's `state.db`), one row per pipeline whose input row was
 *   edited or removed and the change accepted: kept as history, left out of the cumulative
 *   views;
 * - `suite_row_acceptances`: in the catalog, one row per accepted change (member, when, the
 *   stale local keys, the new row digests the source yields instead, both JSON arrays).
 *
 * Every store has the (empty) tables; only suite roots fill them.
 *
 * @since 0.7.0
 * @category migrations
 */
export const MIGRATION_0011: ReadonlyArray<string> = [
  `CREATE TABLE suite_superseded (pipeline_id TEXT PRIMARY KEY, experiment_id TEXT NOT NULL, local_key TEXT NOT NULL,
     superseded_at INTEGER NOT NULL) WITHOUT ROWID`,
  `CREATE TABLE suite_row_acceptances (acceptance_id INTEGER PRIMARY KEY AUTOINCREMENT, experiment_id TEXT NOT NULL,
     accepted_at INTEGER NOT NULL, stale_keys TEXT NOT NULL, new_keys TEXT NOT NULL, pipelines INTEGER NOT NULL)`,
  `UPDATE store_meta SET value = '11' WHERE key = 'schema_version'`
]

/**
 * The statements of migration 0012 (schema version 12): token and cost accounting on
 * `attempts` (see `Pricing` and `AttemptRecord`): `model` (TEXT), `tokens_in` and `tokens_out`
 * (INTEGER), `tokens_estimated` (INTEGER 0/1, default 0) and `cost_usd` (REAL, US dollars),
 * all `NULL` on the attempts written before (nothing to backfill: no figure was recorded).
 *
 * @since 0.8.0
 * @category migrations
 */
export const MIGRATION_0012: ReadonlyArray<string> = [
  `ALTER TABLE attempts ADD COLUMN model TEXT`,
  `ALTER TABLE attempts ADD COLUMN tokens_in INTEGER`,
  `ALTER TABLE attempts ADD COLUMN tokens_out INTEGER`,
  `ALTER TABLE attempts ADD COLUMN tokens_estimated INTEGER NOT NULL DEFAULT 0`,
  `ALTER TABLE attempts ADD COLUMN cost_usd REAL`,
  `UPDATE store_meta SET value = '12' WHERE key = 'schema_version'`
]

/**
 * Schema version 14 (issue 18): `study_trials.unpriced`, how many of a trial's model calls
 * reported tokens but no cost and had no price (their cost is unknown: `cost_usd` leaves them
 * out, so a trial with any is a lower bound, never a `$0` that reads as free). Trials written
 * before it read 0.
 *
 * @since 0.9.0
 * @category migrations
 */
export const MIGRATION_0014: ReadonlyArray<string> = [
  `ALTER TABLE study_trials ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0`,
  `UPDATE store_meta SET value = '14' WHERE key = 'schema_version'`
]

/**
 * Schema version 15 (tester16b N9): `study_trials.settled_json`, what a trial's settlement
 * counted beside its metrics (JSON, `null` before it was settled, and in rows written before):
 * `metricsOver` (`{ succeeded, planned }`: the pipelines its metrics cover, so that `study status`
 * shows the settlement's count, not the live one, while the trial runs again) and
 * `judgeCostUsd` (the part of its cost the evaluator tasks' calls made, `judge` among them).
 * A root not yet migrated reads none of them: its views say what they said before.
 *
 * @since 0.13.0
 * @category migrations
 */
export const MIGRATION_0015: ReadonlyArray<string> = [
  `ALTER TABLE study_trials ADD COLUMN settled_json TEXT`,
  `UPDATE store_meta SET value = '15' WHERE key = 'schema_version'`
]

/**
 * The indexes only a suite's databases keep: `events_time (ts, event_id)` and `events_run_time
 * (run_id, ts, event_id)` ({@link MIGRATION_0007}). Only a suite's merged view reads events in
 * time order (the latest events over all of a suite's databases, by `(ts, event_id)`); a plain
 * store's readers (`events`, `countEvents`, `streamEvents`, `stats`, export, merge, serve, watch,
 * report) read them in `event_id` order, by run through `events_run`, by kind through
 * `events_kind`, by pipeline through `events_pipeline`, so in a plain store these two indexes
 * served no query and cost every event row two B-tree inserts.
 *
 * @since 0.16.0
 * @category migrations
 */
export const SUITE_ONLY_INDEXES: ReadonlyArray<string> = ["events_time", "events_run_time"]

/**
 * The statements that make a plain store's schema from the statements of {@link MIGRATIONS}:
 * what {@link suiteIndexesStep} does to a plain store (for benchmarks that build the schema with
 * plain better-sqlite3 from the statements alone).
 *
 * @since 0.16.0
 * @category migrations
 */
export const PLAIN_STORE_STATEMENTS: ReadonlyArray<string> = SUITE_ONLY_INDEXES.map((name) => `DROP INDEX IF EXISTS ${name}`)

/**
 * Schema version 16 (issue 13): the event time indexes ({@link SUITE_ONLY_INDEXES}) kept only in
 * a suite's databases. The statements only move the version; the data step,
 * {@link suiteIndexesStep}, drops the two indexes from a plain store. A suite's database keeps
 * them (no rebuild). Builds before this version refuse a version-16 store (a newer schema), so
 * none of them writes into a plain store without the indexes.
 *
 * @since 0.16.0
 * @category migrations
 */
export const MIGRATION_0016: ReadonlyArray<string> = [
  `UPDATE store_meta SET value = '16' WHERE key = 'schema_version'`
]

/**
 * The data step of migration 0016: on a plain store (`context.suiteDatabase` false), drops the
 * indexes of {@link SUITE_ONLY_INDEXES} ({@link PLAIN_STORE_STATEMENTS}); on a suite's database,
 * nothing. No row is read or written.
 *
 * @since 0.16.0
 * @category migrations
 */
export const suiteIndexesStep = (client: SqlClient.SqlClient, context: MigrationContext): Effect.Effect<void, SqlError> =>
  context.suiteDatabase ? Effect.void : Effect.forEach(PLAIN_STORE_STATEMENTS, (st) => client.unsafe(st), { discard: true })

/**
 * Schema version 17 (issue 13): a transition's `pipeline.handoff` event is no longer a row of
 * `events`: its ledger row in `handoffs` carries what the event says beyond the ledger
 * (`event_visit`, `event_handoffs`, `event_limit`) and the id the event has among the store's
 * events (`event_id`), and readers build the event from it ({@link HANDOFF_EVENT_DATA_SQL}).
 *
 * - `event_id`: `NULL` for a ledger row whose transition records no event, and for every row
 *   written before this version (their events are rows of `events`, so none is read twice);
 * - a writer assigns event ids in the order of the transitions and writes ledger rows in that
 *   order, so among rows with an `event_id`, `handoff_id` order is `event_id` order: the ledger's
 *   own indexes (`handoffs_run`, `handoffs_pipeline`, the rowid) read its events in id order;
 * - a suite's databases also get `handoffs_time (ts, event_id)` ({@link suiteHandoffIndexStep}),
 *   for the suite view's time-ordered reads, as `events_time` serves the event rows.
 *
 * Builds before this version refuse a version-17 store (a newer schema), so none of them writes
 * a transition without its event row.
 *
 * @since 0.17.0
 * @category migrations
 */
export const MIGRATION_0017: ReadonlyArray<string> = [
  `ALTER TABLE handoffs ADD COLUMN event_id INTEGER`,
  `ALTER TABLE handoffs ADD COLUMN event_visit INTEGER`,
  `ALTER TABLE handoffs ADD COLUMN event_handoffs INTEGER`,
  `ALTER TABLE handoffs ADD COLUMN event_limit INTEGER`,
  `UPDATE store_meta SET value = '17' WHERE key = 'schema_version'`
]

/**
 * The index only a suite's databases keep on the ledger's events (schema version 17): their
 * `(ts, event_id)` order, which the suite view reads (see {@link SUITE_ONLY_INDEXES}).
 *
 * @since 0.17.0
 * @category migrations
 */
export const SUITE_HANDOFF_EVENT_INDEX =
  `CREATE INDEX IF NOT EXISTS handoffs_time ON handoffs (ts, event_id) WHERE event_id IS NOT NULL`

/**
 * The data step of migration 0017: on a suite's database, creates
 * {@link SUITE_HANDOFF_EVENT_INDEX}; on a plain store, nothing. No row is read or written.
 *
 * @since 0.17.0
 * @category migrations
 */
export const suiteHandoffIndexStep = (
  client: SqlClient.SqlClient,
  context: MigrationContext
): Effect.Effect<void, SqlError> => context.suiteDatabase ? client.unsafe(SUITE_HANDOFF_EVENT_INDEX) : Effect.void

/**
 * The `data` of the `pipeline.handoff` event a ledger row with an `event_id` stands for, as a
 * SQL expression over the `handoffs` columns: the JSON object `handoffEventOf` builds, with its
 * keys in the same order (`entryReused` a boolean, a missing target `null`), so a reader that
 * parses it gets the object the event row held before version 17.
 *
 * @since 0.17.0
 * @category migrations
 */
export const HANDOFF_EVENT_DATA_SQL =
  `json_object('operation', operation, 'fromSeq', from_seq, 'fromTask', from_task, 'visit', event_visit, ` +
  `'toSeq', to_seq, 'toTask', to_task, 'entry', entry_artifact_id, ` +
  `'entryReused', json(CASE WHEN entry_reused THEN 'true' ELSE 'false' END), 'reason', reason, ` +
  `'handoffs', event_handoffs, 'limit', event_limit)`

/**
 * The migrations in order: what a writer applies to bring a store to {@link SCHEMA_VERSION},
 * and what benchmarks apply to build the same schema with plain better-sqlite3 (the statements;
 * the data steps have nothing to do on a fresh file).
 *
 * @since 0.1.0
 * @category migrations
 */
export const MIGRATIONS: ReadonlyArray<Migration> = [
  ["0001_base", MIGRATION_0001],
  ["0002_read_indexes", MIGRATION_0002],
  ["0003_pipeline_numbers", MIGRATION_0003],
  ["0004_pipeline_repeat", MIGRATION_0004, backfillRepeats],
  ["0005_pipelines_by_spec", MIGRATION_0005],
  ["0006_visits", MIGRATION_0006],
  ["0007_suites", MIGRATION_0007],
  ["0008_suite_definition_parts", MIGRATION_0008],
  ["0009_studies", MIGRATION_0009],
  ["0010_call_cache", MIGRATION_0010],
  ["0011_suite_superseded", MIGRATION_0011],
  ["0012_attempt_accounting", MIGRATION_0012],
  ["0013_visits_guard_index", MIGRATION_0013, visitsGuardStep],
  ["0014_study_trials_unpriced", MIGRATION_0014],
  ["0015_study_trials_settled", MIGRATION_0015],
  ["0016_suite_only_time_indexes", MIGRATION_0016, suiteIndexesStep],
  ["0017_handoff_events_from_ledger", MIGRATION_0017, suiteHandoffIndexStep]
]
