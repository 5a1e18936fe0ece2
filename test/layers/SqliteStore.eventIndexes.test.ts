/**
 * The indexes of `events` and `handoffs` (schema version 16): a plain store keeps the ones its
 * readers use and not the event time indexes, which only a suite's databases keep; the plans of
 * the queries the store's readers really send (captured from better-sqlite3's `prepare`) all use
 * an index; a version-15 store migrates without a row changing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { Migrator, SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import Database from "better-sqlite3"
import { Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { NodeFileSystem } from "@effect/platform-node"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as SuiteStore from "../../src/layers/SuiteStore.js"
import { HANDOFF_EVENT_DATA_SQL, MIGRATIONS, SCHEMA_VERSION, SUITE_ONLY_INDEXES } from "../../src/layers/internal/sqlite/migrations.js"
import { Store } from "../../src/services/Store.js"
import { pid, rid } from "../support/ids.js"
import { controlledToRewind, event } from "./StoreContract.js"
import { toVersion16 } from "../support/handoffEvents.js"

const tempStorePath = () => nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-evidx-")), "runs.db")

const open = (options: SqliteStore.SqliteStoreOptions) =>
  Effect.map(Layer.build(SqliteStore.layer(options)), (ctx) => ctx.unsafeMap.get(Store.key) as Store["Type"])

/** The index names of `events` and `handoffs` in a store file, sorted, and its schema version. */
const indexesOf = (file: string) => {
  const db = new Database(file, { readonly: true })
  try {
    return {
      version: (db.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get() as { value: string }).value,
      events: (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' ORDER BY name").all() as Array<{ name: string }>)
        .map((r) => r.name),
      handoffs: (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'handoffs' ORDER BY name").all() as Array<{ name: string }>)
        .map((r) => r.name)
    }
  } finally {
    db.close()
  }
}

/** Every row of `events` and `handoffs`, in id order. */
const rowsOf = (file: string) => {
  const db = new Database(file, { readonly: true })
  try {
    return {
      events: db.prepare("SELECT * FROM events ORDER BY event_id").all(),
      handoffs: db.prepare("SELECT * FROM handoffs ORDER BY handoff_id").all()
    }
  } finally {
    db.close()
  }
}

const PLAIN_EVENTS = ["events_kind", "events_pipeline", "events_run", "events_unadmitted"]
const SUITE_EVENTS = [...PLAIN_EVENTS, "events_run_time", "events_time"].sort()
const HANDOFFS = ["handoffs_pipeline", "handoffs_run"]
/** A suite's database also keeps the time index of the ledger's events (schema version 17). */
const SUITE_HANDOFFS = [...HANDOFFS, "handoffs_time"]

/** Events of two runs and two kinds, and a rewind (a ledger row and its `pipeline.handoff` event) in each run. */
const fill = (store: Store["Type"]) =>
  Effect.gen(function*() {
    for (const run of ["run-1", "run-2"]) {
      yield* store.openRun({ runId: rid(run), startedAt: 1 })
      yield* controlledToRewind(store, `c-${run}`, run)
      yield* store.emitEvent(event("pipeline.handoff", `c-${run}`, 2500, run))
      for (let i = 0; i < 20; i++) yield* store.emitEvent(event(i % 2 === 0 ? "k.even" : "k.odd", null, 1000 + i, run))
    }
  })

/** A store at version `version`, as that build's migrator left it (statements only, no data step). */
const buildOldStore = (file: string, version: number) =>
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqliteClient.make({ filename: file })
    yield* Migrator.make({})({
      loader: Migrator.fromRecord(Object.fromEntries(MIGRATIONS.slice(0, version).map(([id, statements]) => [
        id,
        Effect.flatMap(SqlClient.SqlClient, (client) => Effect.forEach(statements, (st) => client.unsafe(st), { discard: true }))
      ])))
    }).pipe(Effect.provideService(SqlClient.SqlClient, sql))
  })).pipe(Effect.provide(Reactivity.layer), Effect.orDie)

/**
 * Runs `f` while recording every SQL text better-sqlite3 prepares in this process (the store's
 * readers, through `@effect/sql`, and the suite view all prepare through it).
 */
const capturingSql = <A, E, R>(f: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => {
    const seen = new Set<string>()
    const proto = Database.prototype as unknown as { prepare: (sql: string) => unknown }
    const original = proto.prepare
    return Effect.ensuring(
      Effect.map(
        Effect.zipRight(
          Effect.sync(() => {
            proto.prepare = function(this: unknown, sql: string) {
              seen.add(sql)
              return original.call(this, sql)
            }
          }),
          f
        ),
        () => [...seen]
      ),
      Effect.sync(() => {
        proto.prepare = original
      })
    )
  })

/** The query plan of `sql` on `file` (every `?` bound to NULL: without statistics the plan does not depend on values). */
const planOf = (db: Database.Database, sql: string) => {
  const params = (sql.replace(/'[^']*'/g, "").match(/\?/g) ?? []).map(() => null)
  return (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params) as Array<{ detail: string }>).map((r) => r.detail)
}

describe("SqliteStore: the indexes of events and handoffs", () => {
  it.effect("a plain store has no event time index; a suite's database (suiteRoot) keeps both", () =>
    Effect.gen(function*() {
      const plain = tempStorePath()
      yield* Effect.scoped(open({ filename: plain }))
      assert.deepStrictEqual(indexesOf(plain), { version: String(SCHEMA_VERSION), events: PLAIN_EVENTS, handoffs: HANDOFFS })
      const suite = tempStorePath()
      yield* Effect.scoped(open({ filename: suite, suiteRoot: nodePath.dirname(suite) }))
      assert.deepStrictEqual(indexesOf(suite), { version: String(SCHEMA_VERSION), events: SUITE_EVENTS, handoffs: SUITE_HANDOFFS })
      assert.deepStrictEqual([...SUITE_ONLY_INDEXES].sort(), ["events_run_time", "events_time"])
    }))

  it.effect("a suite root's database, opened through SuiteStore, keeps the time indexes", () =>
    Effect.gen(function*() {
      const root = nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-evidx-suite-")), "root")
      yield* Effect.scoped(SuiteStore.make({ root, suiteId: "demo", layout: "combined", members: [], flushIntervalMs: 0 }))
      const file = fs.readdirSync(root).map((f) => nodePath.join(root, f)).find((f) => f.endsWith("state.db"))!
      assert.deepStrictEqual(indexesOf(file), { version: String(SCHEMA_VERSION), events: SUITE_EVENTS, handoffs: SUITE_HANDOFFS })
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("a version-15 store with events and a ledger: a plain writer drops the time indexes, a suite's keeps them; no row changes", () =>
    Effect.gen(function*() {
      for (const suite of [false, true]) {
        const file = tempStorePath()
        // rows written by this build, then the store set back to version 15 (the indexes it had)
        yield* Effect.scoped(Effect.flatMap(open({ filename: file, suiteRoot: nodePath.dirname(file) }), fill))
        const db = new Database(file)
        // (version 17's ledger events back as event rows: see `toVersion16`)
        toVersion16(db)
        db.exec(`UPDATE store_meta SET value = '15' WHERE key = 'schema_version'`)
        db.exec(`DELETE FROM effect_sql_migrations WHERE migration_id = 16`)
        db.close()
        assert.deepStrictEqual(indexesOf(file), { version: "15", events: SUITE_EVENTS, handoffs: HANDOFFS })
        const before = rowsOf(file)
        assert.strictEqual(before.events.length, 42)
        assert.strictEqual(before.handoffs.length, 2)
        // a read-only open leaves it as it is
        yield* Effect.scoped(open({ filename: file, readonly: true }))
        assert.strictEqual(indexesOf(file).version, "15")
        yield* Effect.scoped(open(suite ? { filename: file, suiteRoot: nodePath.dirname(file) } : { filename: file }))
        assert.deepStrictEqual(indexesOf(file), {
          version: String(SCHEMA_VERSION),
          events: suite ? SUITE_EVENTS : PLAIN_EVENTS,
          handoffs: suite ? SUITE_HANDOFFS : HANDOFFS
        })
        // (version 17 adds the ledger's event columns, empty on the rows from before)
        const after = rowsOf(file)
        assert.deepStrictEqual(after.events, before.events)
        assert.deepStrictEqual(
          after.handoffs.map((r) => {
            const { event_handoffs, event_id, event_limit, event_visit, ...rest } = r as Record<string, unknown>
            assert.deepStrictEqual([event_id, event_visit, event_handoffs, event_limit], [null, null, null, null])
            return rest
          }),
          before.handoffs
        )
      }
    }))

  it.effect("a fresh migration from version 15 (the migrator's own path) gives the plain schema", () =>
    Effect.gen(function*() {
      const file = tempStorePath()
      yield* buildOldStore(file, 15)
      assert.deepStrictEqual(indexesOf(file), { version: "15", events: SUITE_EVENTS, handoffs: HANDOFFS })
      yield* Effect.scoped(open({ filename: file }))
      assert.deepStrictEqual(indexesOf(file), { version: String(SCHEMA_VERSION), events: PLAIN_EVENTS, handoffs: HANDOFFS })
    }))

  it.effect("every query a plain store's readers send to events and handoffs, filtered, reads through an index", () =>
    Effect.gen(function*() {
      const file = tempStorePath()
      yield* Effect.scoped(Effect.flatMap(open({ filename: file }), fill))
      const sqls = yield* capturingSql(Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file, readonly: true })
        const filters = [
          { runId: rid("run-1") },
          { kind: "k.odd" },
          { pipelineId: pid("c-run-1") },
          { runId: rid("run-2"), kind: "pipeline.handoff" }
        ]
        for (const f of filters) {
          yield* store.events(f)
          yield* store.events({ ...f, limit: 5 })
          yield* store.countEvents(f)
          yield* Stream.runDrain(store.streamEvents(f))
        }
        yield* store.stats(rid("run-1"))
        yield* store.traversal!.handoffs({ runId: rid("run-1") })
        yield* store.traversal!.handoffs({ runId: rid("run-1"), limit: 1 })
        yield* store.traversal!.handoffs({ pipelineId: pid("c-run-1") })
      })))
      const filtered = sqls.filter((s) => /\b(FROM|UPDATE|INTO)\s+("?)(events|handoffs)\2\b/i.test(s) && /\b(run_id|kind|pno|pipeline_id)\b/.test(s))
      // the reads above: events by run, kind, pipeline and run+kind (rows, latest, count, stream), the run's counts, the ledger
      assert.isAtLeast(filtered.length, 10, sqls.join("\n"))
      const db = new Database(file, { readonly: true })
      try {
        for (const sql of filtered) {
          const plan = planOf(db, sql)
          for (const line of plan) {
            assert.notMatch(line, /^SCAN (events|handoffs)\b/, `${sql}\n${plan.join("\n")}`)
          }
          assert.isTrue(plan.some((l) => /^SEARCH (events|handoffs) USING (COVERING )?INDEX/.test(l)), `${sql}\n${plan.join("\n")}`)
        }
      } finally {
        db.close()
      }
    }))

  it.effect("a suite's database: the time-ordered reads of its merged view use the time indexes", () =>
    Effect.gen(function*() {
      const file = tempStorePath()
      yield* Effect.scoped(Effect.flatMap(open({ filename: file, suiteRoot: nodePath.dirname(file) }), fill))
      const db = new Database(file, { readonly: true })
      try {
        // the shapes of src/layers/internal/suite/view.ts (`events`, `streamEvents`): latest by (ts, event_id), keyset after
        const cols = "ts, event_id, kind, pipeline_id, run_id, data"
        const cases: Array<[string, string]> = [
          [`SELECT ${cols} FROM events WHERE 1 = 1 ORDER BY ts DESC, event_id DESC LIMIT ?`, "events_time"],
          [`SELECT ${cols} FROM events WHERE 1 = 1 AND (ts, event_id) < (?, ?) ORDER BY ts DESC, event_id DESC LIMIT ?`, "events_time"],
          [`SELECT ${cols} FROM events WHERE 1 = 1 AND run_id = ? ORDER BY ts DESC, event_id DESC LIMIT ?`, "events_run_time"],
          [`SELECT * FROM events WHERE 1 = 1 AND event_id <= ? AND (ts, event_id) > (?, ?) ORDER BY ts, event_id LIMIT ?`, "events_time"],
          [`SELECT * FROM events WHERE 1 = 1 AND run_id = ? AND event_id <= ? AND (ts, event_id) > (?, ?) ORDER BY ts, event_id LIMIT ?`, "events_run_time"]
        ]
        for (const [sql, index] of cases) {
          const plan = planOf(db, sql)
          assert.isTrue(plan.some((l) => l.includes(`INDEX ${index}`)), `${sql}\n${plan.join("\n")}`)
          assert.isFalse(plan.some((l) => l.includes("TEMP B-TREE")), `${sql}\n${plan.join("\n")}`)
        }
        // schema version 17: the same reads over the events and the ledger's events, as the view
        // sends them (one compound statement), each side through its time index, merged without a sort
        for (const [sql] of cases.filter(([q]) => !q.includes("run_id = ?"))) {
          const at = sql.indexOf(" ORDER BY")
          const side = sql.slice(0, at)
          const ledger = side
            .replace("FROM events WHERE", "FROM handoffs WHERE event_id IS NOT NULL AND")
            .replace(", kind,", ", 'pipeline.handoff' AS kind,")
            .replace("SELECT *", "SELECT event_id, 'pipeline.handoff' AS kind, pno, pipeline_id, run_id, data, ts")
            .replace(", data", `, ${HANDOFF_EVENT_DATA_SQL} AS data`)
          const both = `${side.replace("SELECT *", "SELECT event_id, kind, pno, pipeline_id, run_id, data, ts")} UNION ALL ${ledger}${sql.slice(at)}`
          const plan = planOf(db, both)
          for (const index of ["events_time", "handoffs_time"]) {
            assert.isTrue(plan.some((l) => l.includes(`INDEX ${index}`)), `${both}\n${plan.join("\n")}`)
          }
          assert.isFalse(plan.some((l) => l.includes("TEMP B-TREE")), `${both}\n${plan.join("\n")}`)
        }
      } finally {
        db.close()
      }
    }))
})
