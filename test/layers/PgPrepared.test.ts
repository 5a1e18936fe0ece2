/**
 * Named prepared statements (`internal/pg/prepared.ts`): the store's batched checkpoint
 * statements are parsed once per connection and planned from the plan cache; an unmarked text
 * leaves nothing behind; and the failure modes: a server restart, a table changed under an
 * open store, a statement whose first parse failed, an error inside a transaction.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Reactivity from "@effect/experimental/Reactivity"
import { Duration, Effect, Either, Exit, Layer, Option } from "effect"
import * as Pg from "pg"
import { afterAll, beforeAll, vi } from "vitest"
import * as ClusterRun from "../../src/cli/ClusterRun.js"
import * as PgStore from "../../src/layers/PgStore.js"
import * as Prepared from "../../src/layers/internal/pg/prepared.js"
import { Store } from "../../src/services/Store.js"
import { type PgServer, startPostgres } from "../support/pgServer.js"
import { artifact, pipeline, task } from "./StoreContract.js"

let pg: PgServer
beforeAll(async () => {
  pg = await startPostgres({
    serverOptions: ["-c shared_preload_libraries=pg_stat_statements", "-c pg_stat_statements.track_planning=on"]
  })
}, 120_000)
afterAll(async () => {
  await pg?.stop()
}, 60_000)

let databases = 0
/** A fresh, migrated database with `pg_stat_statements`. */
const fresh = Effect.promise(async () => {
  const db = `prep_${++databases}`
  await pg.createDatabase(db)
  pg.psql(db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
  return db
}).pipe(Effect.tap((db) => PgStore.migrate(pg.url(db))))

const open = (options: PgStore.PgStoreOptions) =>
  Effect.map(Layer.build(PgStore.layer(options)), (ctx) => ctx.unsafeMap.get(Store.key) as Store["Type"])

const bytes = (s: string) => new TextEncoder().encode(s)

/** Task `seq` of pipeline `name` done (its output, task row and cursor). */
const unit = (name: string, seq: number) => ({
  pipelineId: pipeline(name).pipelineId,
  artifact: artifact(name, seq, bytes(`${name}-${seq}`)),
  task: { ...task(name, seq), taskRunId: `${name}/${seq}` },
  pipeline: { nTasksDone: seq + 1, attemptsDelta: 1, updatedAt: 1100 + seq }
})

/** Admits `n` pipelines `prefix0…` and commits their first task one by one (one batch each). */
const work = (store: Store["Type"], prefix: string, n: number, seq = 0) =>
  Effect.forEach(Array.from({ length: n }, (_, i) => `${prefix}${i}`), (name) =>
    Effect.zipRight(
      seq === 0 ? store.admit([pipeline(name)]) : Effect.void,
      PgStore.commitCheckpoint(store, unit(name, seq))
    ), { discard: true })

/** `calls|plans` of the statements of `db` whose text contains `like`, summed. */
const stats = (db: string, like: string) => {
  const [calls, plans] = pg.psql(
    db,
    `SELECT coalesce(sum(calls), 0), coalesce(sum(plans), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '${db}' AND query LIKE '${like}'`
  ).trim().split("|").map(Number)
  return { calls: calls!, plans: plans! }
}

describe("PgStore: prepared statements", () => {
  it.live("the batched checkpoint statement is a named statement, planned once per connection and then from the plan cache", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* fresh
      const store = yield* open({ url: pg.url(db), maxConnections: 1 })
      yield* work(store, "p", 30)
      const claim = stats(db, "%WITH cl AS (SELECT * FROM unnest%")
      assert.isAtLeast(claim.calls, 30)
      // unnamed (parsed and planned per call): plans = calls; named: five custom plans, then the generic one
      assert.isAtMost(claim.plans, 10, `plans ${claim.plans} of ${claim.calls} calls`)
      // the pipeline patch is planned per call, never prepared: its generic plan (arrays of
      // unknown size) scans and hashes the whole table, ~7 ms a call at 20,000 pipelines against
      // ~0.3 for the plan made with the arrays' sizes (BENCHMARKS.md lead34b)
      const patch = stats(db, "UPDATE assay_pipelines p SET state = CASE%")
      assert.isAtLeast(patch.calls, 30)
      assert.strictEqual(patch.plans, patch.calls)
      // so is the commit fence's lock of the pipeline rows (fence39): prepared inside the
      // batched statement, its generic plan, made while the table was small, scanned the whole
      // table on every commit (BENCHMARKS.md lead39)
      const fence = stats(db, "SELECT pipeline_id, run_id, state FROM assay_pipelines WHERE pipeline_id = ANY%FOR UPDATE")
      assert.isAtLeast(fence.calls, 30)
      assert.strictEqual(fence.plans, fence.calls)
      assert.notInclude(pg.psql(db, "SELECT query FROM pg_stat_statements WHERE query LIKE '%WITH cl AS%' LIMIT 1"), "assay_pipelines")
      assert.include(pg.psql(db, "SELECT query FROM pg_stat_statements WHERE query LIKE '%WITH cl AS%' LIMIT 1"), Prepared.PREPARED.trim())
    })))

  it.live("a server restart: the new connections prepare again, and the store commits on", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* fresh
      const store = yield* open({ url: pg.url(db), maxConnections: 2 })
      yield* work(store, "a", 8)
      yield* Effect.promise(() => pg.restart("immediate"))
      yield* work(store, "a", 8, 1)
      yield* work(store, "b", 8)
      assert.strictEqual(pg.psql(db, "SELECT count(*) FROM assay_checkpoints").trim(), "24")
      assert.strictEqual(pg.psql(db, "SELECT sum(n_tasks_done) FROM assay_pipelines").trim(), "24")
    })))

  it.live("a migration changing the tables under an open store: the prepared statements are planned again, commits go on", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* fresh
      const store = yield* open({ url: pg.url(db), maxConnections: 1 })
      yield* work(store, "m", 8)
      pg.psql(
        db,
        "ALTER TABLE assay_pipelines ADD COLUMN extra int; ALTER TABLE assay_checkpoints ADD COLUMN extra text; ALTER TABLE assay_artifacts ADD COLUMN extra text; ALTER TABLE assay_tasks ADD COLUMN extra int; CREATE INDEX assay_test_extra ON assay_checkpoints (run_id)"
      )
      yield* work(store, "m", 8, 1)
      yield* work(store, "n", 8)
      assert.strictEqual(pg.psql(db, "SELECT count(*) FROM assay_checkpoints").trim(), "24")
      const row = Option.getOrThrow(yield* store.getPipeline(pipeline("m3").pipelineId))
      assert.strictEqual(row.nTasksDone, 2)
    })))

  it.live("a statement whose first parse failed (a missing table, its transaction rolled back) is parsed again once the table is back", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* fresh
      const store = yield* open({ url: pg.url(db), maxConnections: 1, retryFor: 0 })
      yield* store.admit([pipeline("f0"), pipeline("f1")])
      pg.psql(db, "ALTER TABLE assay_checkpoints RENAME TO assay_checkpoints_away")
      const failed = yield* Effect.exit(PgStore.commitCheckpoint(store, unit("f0", 0)))
      assert.isTrue(Exit.isFailure(failed))
      pg.psql(db, "ALTER TABLE assay_checkpoints_away RENAME TO assay_checkpoints")
      yield* PgStore.commitCheckpoint(store, unit("f0", 0))
      yield* PgStore.commitCheckpoint(store, unit("f1", 0))
      assert.strictEqual(pg.psql(db, "SELECT count(*) FROM assay_checkpoints").trim(), "2")
    })))

  it.live("an error inside a transaction after the statement was prepared: rolled back whole, the next commit reuses the statement", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* fresh
      const store = yield* open({ url: pg.url(db), maxConnections: 1, retryFor: 0 })
      yield* work(store, "e", 8)
      pg.psql(
        db,
        "CREATE FUNCTION assay_test_fail() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql; CREATE TRIGGER fail_tasks BEFORE INSERT ON assay_tasks FOR EACH ROW EXECUTE FUNCTION assay_test_fail()"
      )
      const failed = yield* Effect.either(PgStore.commitCheckpoint(store, unit("e0", 1)))
      assert.isTrue(Either.isLeft(failed))
      // nothing of the failed batch is stored (its claim was rolled back with it)
      assert.strictEqual(pg.psql(db, "SELECT count(*) FROM assay_checkpoints").trim(), "8")
      pg.psql(db, "DROP TRIGGER fail_tasks ON assay_tasks")
      yield* work(store, "e", 8, 1)
      assert.strictEqual(pg.psql(db, "SELECT count(*) FROM assay_checkpoints").trim(), "16")
      const claim = stats(db, "%WITH cl AS (SELECT * FROM unnest%")
      assert.isAtMost(claim.plans, 12, `plans ${claim.plans} of ${claim.calls} calls`)
    })))
})

describe("Prepared.makeClient", () => {
  const client = (db: string) => Effect.provide(Prepared.makeClient(pg.url(db), { maxConnections: 1 }), Reactivity.layer)

  it.live("a marked text is prepared under its digest, an unmarked one is not", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* fresh
      const sql = yield* client(db)
      for (let i = 0; i < 7; i++) {
        const [r] = yield* sql.unsafe<{ x: number }>(Prepared.prepared("SELECT $1::int + 1 AS x"), [i])
        assert.strictEqual(r!.x, i + 1)
        yield* sql.unsafe("SELECT $1::int + 2 AS y", [i])
      }
      const rows = yield* sql.unsafe<{ name: string; statement: string; generic_plans: number; custom_plans: number }>(
        "SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY name"
      )
      assert.deepStrictEqual(rows.map((r) => r.name), [Prepared.nameOf(Prepared.prepared("SELECT $1::int + 1 AS x"))])
      assert.match(rows[0]!.name, /^assay_[0-9a-f]{40}$/)
      assert.strictEqual(Number(rows[0]!.generic_plans) + Number(rows[0]!.custom_plans), 7)
      assert.isUndefined(Prepared.nameOf("SELECT 1"))
    })))

  it.live("why `SELECT *` is never marked: a column added under a prepared `SELECT *` fails it (cached plan must not change result type)", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* fresh
      const sql = yield* client(db)
      pg.psql(db, "CREATE TABLE t (a int); INSERT INTO t VALUES (1)")
      yield* sql.unsafe(Prepared.prepared("SELECT * FROM t"))
      pg.psql(db, "ALTER TABLE t ADD COLUMN b int")
      const after = yield* Effect.either(sql.unsafe(Prepared.prepared("SELECT * FROM t")))
      assert.isTrue(Either.isLeft(after))
      assert.include(String((after as Either.Left<any, unknown>).left.cause), "cached plan must not change result type")
      // an explicit column list stays valid
      yield* sql.unsafe(Prepared.prepared("SELECT a FROM t"))
      pg.psql(db, "ALTER TABLE t ADD COLUMN c int")
      const [r] = yield* sql.unsafe<{ a: number }>(Prepared.prepared("SELECT a FROM t"))
      assert.strictEqual(r!.a, 1)
    })))
})

describe("idle connections (pgp17an)", () => {
  /**
   * Two connections opened by two queries at once, then the pool left idle for `idleMs` of
   * faked timer time (pg-pool closes an idle connection from a `setTimeout`): the connections
   * the pool still holds.
   */
  const heldAfterIdle = async (config: Record<string, unknown>, idleMs: number) => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const pool = new Pg.Pool(config)
    try {
      await Promise.all([pool.query("SELECT pg_sleep(0.05)"), pool.query("SELECT pg_sleep(0.05)")])
      assert.strictEqual(pool.totalCount, 2)
      vi.advanceTimersByTime(idleMs)
      return pool.totalCount
    } finally {
      vi.useRealTimers()
      await pool.end()
    }
  }

  it("the store's pools keep an idle connection for a minute, not pg's 10 s: a connection opened again costs Postgres tens of ms of CPU", async () => {
    const db = "idle_1"
    await pg.createDatabase(db)
    assert.strictEqual(Duration.toMillis(Prepared.IDLE_TIMEOUT), 60_000)
    // pg's default (what main's pools had): closed after 10 s idle
    assert.strictEqual(await heldAfterIdle({ connectionString: pg.url(db), max: 4 }, 30_000), 0)
    assert.strictEqual(await heldAfterIdle(Prepared.poolConfig(pg.url(db), { maxConnections: 4 }), 30_000), 2)
    assert.strictEqual(await heldAfterIdle(Prepared.poolConfig(pg.url(db), { maxConnections: 4 }), 61_000), 0)
  }, 60_000)

  it("the runners' and the submitter's cluster client keeps idle connections as long", () => {
    const config = ClusterRun.pgConfig("postgres://u@127.0.0.1:1/db")
    assert.isDefined(config.idleTimeout)
    assert.strictEqual(Duration.toMillis(Duration.decode(config.idleTimeout!)), Duration.toMillis(Prepared.IDLE_TIMEOUT))
  })
})
