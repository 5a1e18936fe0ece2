/**
 * Test helper: a SQLite store of schema version 17 or later set back to how version 16 stored
 * the same facts (a transition's `pipeline.handoff` event as a row of `events`, no event
 * columns on the ledger), for tests of stores written by older builds.
 */
import type Database from "better-sqlite3"
import { HANDOFF_EVENT_DATA_SQL } from "../../src/layers/internal/sqlite/migrations.js"

/**
 * Moves every ledger event of the open store `db` into `events` (same id, kind, pipeline, run,
 * data and time), drops the ledger's event columns and `handoffs_time`, and records the store as
 * version 16 (the migration records of 17 and later removed), so that a writer migrates it again.
 *
 * @param db - a writable connection to a store of version 17 or later.
 */
export const toVersion16 = (db: Database.Database): void => {
  db.exec(
    `INSERT INTO events (event_id, kind, pno, pipeline_id, run_id, data, ts)
       SELECT event_id, 'pipeline.handoff', pno, pipeline_id, run_id, ${HANDOFF_EVENT_DATA_SQL}, ts
       FROM handoffs WHERE event_id IS NOT NULL`
  )
  db.exec("DROP INDEX IF EXISTS handoffs_time")
  for (const c of ["event_id", "event_visit", "event_handoffs", "event_limit"]) db.exec(`ALTER TABLE handoffs DROP COLUMN ${c}`)
  db.exec("UPDATE store_meta SET value = '16' WHERE key = 'schema_version'")
  db.exec("DELETE FROM effect_sql_migrations WHERE migration_id >= 17")
}
