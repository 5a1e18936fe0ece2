/**
 * claims37: the window claims' statements against the harness Postgres (`windowClaims.ts`): a
 * window's pipelines are claimed all or none, one row per pipeline, so two windows that share a
 * pipeline (a re-submission that grouped it another way, another lane) never both run it.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer, Option, Redacted, TestClock } from "effect"
import { migrateCluster } from "../../src/cli/ClusterRun.js"
import { FatalError, StoreUnavailable } from "../../src/domain/Errors.js"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import { makeTaskEnv } from "../../src/services/internal/cluster/task.js"
import { runWindow } from "../../src/services/internal/cluster/window.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import { windowKey } from "../../src/services/internal/cluster/workflow.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { type AnySpec, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

/** The window claims of one "process" on the client in context (table created). */
const claimsOn = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* WindowClaims.createTable
  return WindowClaims.make(sql, { ttl: "1 minute", heartbeat: "10 seconds", clock: yield* Effect.clock })!
})

/** The claim rows, `key=token`, in key order. */
const rows = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql.unsafe<{ pipeline_key: string; token: string | null }>(
      `SELECT pipeline_key, token FROM ${WindowClaims.TABLE} ORDER BY pipeline_key`
    ),
    (rs) => rs.map((r) => `${r.pipeline_key}=${r.token}`)
  ))

/** Ages the rows of `keys` past any TTL (as if their holder froze for an hour). */
const age = (keys: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe(`UPDATE ${WindowClaims.TABLE} SET expires_at = now() - interval '1 hour' WHERE pipeline_key = ANY($1::text[])`, [
      keys
    ]))

describe("window claims per pipeline (claims37)", () => {
  it.scoped("two windows with a pipeline in common never both win; the loser holds nothing", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      assert.deepStrictEqual(yield* a.claim(["p1", "p2"], "A"), { won: true, tookOver: false })
      assert.deepStrictEqual(yield* b.claim(["p2", "p3"], "B"), { won: false, tookOver: false })
      // nothing of B written (p3 free), and B is not live
      assert.deepStrictEqual(yield* rows, ["p1=A", "p2=A"])
      assert.isFalse(b.live("B"))
      // another lane of A's window (the same pipelines, another token) does not win either
      assert.isFalse((yield* b.claim(["p1", "p2"], "A2")).won)
      // a window of p3 alone is free
      assert.deepStrictEqual(yield* b.claim(["p3"], "B"), { won: true, tookOver: false })
      assert.deepStrictEqual(yield* rows, ["p1=A", "p2=A", "p3=B"])
    }).pipe(Effect.provide(pgLayer("pclaims_overlap"))), 120_000)

  it.scoped("racing claims of overlapping windows on fresh rows: never both won, a loser leaves no row", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      for (let round = 0; round < 40; round++) {
        const k = (i: number) => `r${round}/${i}`
        // reversed orders on purpose: the statement sorts its locks itself
        const [wa, wb] = yield* Effect.all([a.claim([k(1), k(2)], `A${round}`), b.claim([k(3), k(2)], `B${round}`)], {
          concurrency: 2
        })
        assert.isFalse(wa.won && wb.won, `round ${round}: both won`)
        const mine = (yield* rows).filter((r) => r.startsWith(`r${round}/`))
        const expected = wa.won
          ? [`${k(1)}=A${round}`, `${k(2)}=A${round}`]
          : wb.won
          ? [`${k(2)}=B${round}`, `${k(3)}=B${round}`]
          : []
        assert.deepStrictEqual(mine, expected, `round ${round}`)
      }
    }).pipe(Effect.provide(pgLayer("pclaims_race"))), 120_000)

  it.scoped("a claim that wins only part of its rows (one inserted meanwhile by another claimer) wins nothing and holds nothing", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const a = yield* claimsOn
      yield* a.claim(["q0"], "A")
      const commit = yield* Deferred.make<void>()
      const inserted = yield* Deferred.make<void>()
      // another claimer's statement: q2 inserted, not committed yet
      const other = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(
          `INSERT INTO ${WindowClaims.TABLE} (pipeline_key, token, expires_at) VALUES ('q2', 'X', now() + interval '1 hour')`
        )
        yield* Deferred.succeed(inserted, undefined)
        yield* Deferred.await(commit)
      })))
      yield* Deferred.await(inserted)
      // A claims q1 and q2: it does not see q2 yet, inserts q1 and waits on q2's insert
      const claim = yield* Effect.fork(a.claim(["q1", "q2"], "A"))
      yield* Effect.repeat(
        Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
          (r) => r[0]!.n
        ),
        { until: (n) => n > 0 }
      )
      yield* Deferred.succeed(commit, undefined)
      yield* Fiber.join(other)
      assert.deepStrictEqual(yield* Fiber.join(claim), { won: false, tookOver: false })
      // q1 was never kept, and A's older row went too: A holds nothing
      assert.deepStrictEqual(yield* rows, ["q2=X"])
      assert.isFalse(a.live("A"))
    }).pipe(Effect.provide(pgLayer("pclaims_partial"))), 120_000)

  it.scoped("an expired holder is taken over (tookOver); its renewal renews its other rows and reports the loss", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      yield* a.claim(["p1", "p2"], "A")
      yield* age(["p1", "p2"])
      // B's window shares p2 with A's: A's claim of p2 expired, B takes it over
      assert.deepStrictEqual(yield* b.claim(["p2", "p3"], "B"), { won: true, tookOver: true })
      yield* a.renewAll
      assert.isFalse(a.live("A"), "a row taken over is a loss")
      const sql = yield* SqlClient.SqlClient
      const live = yield* sql<{ pipeline_key: string }>`SELECT pipeline_key FROM ${sql(WindowClaims.TABLE)}
        WHERE token = 'A' AND expires_at > now()`
      assert.deepStrictEqual(live.map((r) => r.pipeline_key), ["p1"], "A's other row renewed")
      // B's renewal renews both of its rows: live
      yield* age(["p2", "p3"])
      yield* b.renewAll
      assert.isTrue(b.live("B"))
      const bLive = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(WindowClaims.TABLE)}
        WHERE token = 'B' AND expires_at > now()`
      assert.strictEqual(bLive[0]!.n, 2)
    }).pipe(Effect.provide(pgLayer("pclaims_takeover"))), 120_000)

  it.scoped("the same token claiming again keeps only the rows of its new claim; one not won frees its rows", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      yield* a.claim(["p1", "p2", "p3"], "A")
      // the window goes round again with what is left (p1 ended): its own token wins it back
      assert.deepStrictEqual(yield* a.claim(["p2", "p3"], "A"), { won: true, tookOver: false })
      assert.deepStrictEqual(yield* rows, ["p2=A", "p3=A"])
      // a renewal counts the rows of the new claim: live
      yield* a.renewAll
      assert.isTrue(a.live("A"))
      // B holds p4; A's claim of p3 and p4 is not won: A holds nothing, p3 is free
      yield* b.claim(["p4"], "B")
      assert.isFalse((yield* a.claim(["p3", "p4"], "A")).won)
      assert.deepStrictEqual(yield* rows, ["p4=B"])
      assert.isFalse(a.live("A"))
    }).pipe(Effect.provide(pgLayer("pclaims_again"))), 120_000)

  it.scoped("release frees every row of the token (another's release is a no-op); the rows are free for the next claim", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      yield* a.claim(["p1", "p2", "p3"], "A")
      yield* b.release("B")
      assert.strictEqual((yield* rows).length, 3)
      yield* a.release("A")
      assert.deepStrictEqual(yield* rows, [])
      assert.isFalse(a.live("A"))
      assert.deepStrictEqual(yield* b.claim(["p1", "p2", "p3"], "B"), { won: true, tookOver: false })
    }).pipe(Effect.provide(pgLayer("pclaims_release"))), 120_000)

  it.scoped("a database without the pipeline claim table (migrated by an earlier version) is refused naming assay migrate", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // what the version before claims37 migrated: the window claim table only
      yield* sql.unsafe(`CREATE TABLE assay_cluster_window_claims (window_key text PRIMARY KEY, token text, expires_at timestamptz)`)
      const refused = yield* Effect.flip(WindowClaims.requireTable(sql))
      assert.strictEqual(refused._tag, "StoreUnavailable")
      assert.match(refused.message, /assay_cluster_pipeline_claims/)
      assert.match(refused.message, /assay migrate/)
      yield* WindowClaims.createTable
      yield* WindowClaims.requireTable(sql)
    }).pipe(Effect.provide(pgLayer("pclaims_unmigrated"))), 120_000)

  it("a pipeline's claim key carries the store's identity", () => {
    assert.strictEqual(WindowClaims.pipelineClaimKey("p1"), "p1")
    assert.strictEqual(WindowClaims.pipelineClaimKey("p1", "store-a"), "store-a/p1")
    assert.notStrictEqual(WindowClaims.pipelineClaimKey("p1", "store-a"), WindowClaims.pipelineClaimKey("p1", "store-b"))
  })

  it.scoped("a waiter's claim while the holder lives locks nothing: it is lost at once even while another session holds a lock on one of the rows (review37 F1)", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      assert.isTrue((yield* a.claim(["w1", "w2"], "A")).won)
      const sql = yield* SqlClient.SqlClient
      // another session holds w1's row lock (as a renewal or a release of A would, mid-statement)
      const locked = yield* Deferred.make<void>()
      const done = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(`SELECT 1 FROM ${WindowClaims.TABLE} WHERE pipeline_key = 'w1' FOR UPDATE`)
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(done)
      })))
      yield* Deferred.await(locked)
      // B waits for A's pipelines: its claim must not queue on the lock (it would have locked
      // w1 and w2 in key order and waited, and a renewal of A's could then wait on B)
      const out = yield* b.claim(["w2", "w1"], "B").pipe(Effect.timeout("10 seconds"), Effect.option)
      yield* Deferred.succeed(done, undefined)
      yield* Fiber.join(holder)
      assert.deepStrictEqual(Option.getOrUndefined(out), { won: false, tookOver: false })
      assert.deepStrictEqual(yield* rows, ["w1=A", "w2=A"])
    }).pipe(Effect.provide(pgLayer("pclaims_waiter"))), 120_000)

  it.scoped("a claim lost wholly to a concurrent claimer leaves the token holding nothing, its older rows freed too (review37 F2)", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const sql = yield* SqlClient.SqlClient
      // Z holds c
      assert.isTrue((yield* a.claim(["c"], "Z")).won)
      // W's claim of {d, e} is under way in another session: its rows inserted, not committed
      const inserted = yield* Deferred.make<void>()
      const commit = yield* Deferred.make<void>()
      const w = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(
          `INSERT INTO ${WindowClaims.TABLE} (pipeline_key, token, expires_at) VALUES ('d', 'W', now() + interval '1 hour'), ('e', 'W', now() + interval '1 hour')`
        )
        yield* Deferred.succeed(inserted, undefined)
        yield* Deferred.await(commit)
      })))
      yield* Deferred.await(inserted)
      // Z claims {d, e}: unseen by its snapshot, they conflict on insert and it waits for W
      const z = yield* Effect.fork(a.claim(["d", "e"], "Z"))
      const waiting = sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'`)
      yield* Effect.repeat(waiting, { until: (r) => (r[0]?.n ?? 0) > 0 })
      yield* Deferred.succeed(commit, undefined)
      yield* Fiber.join(w)
      // W won both: Z won nothing, and holds nothing (c freed), as a lost claim promises
      assert.deepStrictEqual(yield* Fiber.join(z), { won: false, tookOver: false })
      assert.deepStrictEqual(yield* rows, ["d=W", "e=W"])
      assert.isFalse(a.live("Z"))
    }).pipe(Effect.provide(pgLayer("pclaims_lostwhole"))), 120_000)
})

/** Opens run `runId` in `store` and admits `specs` under it (their seeds included), written through. */
const admitAll = (store: StoreService, specs: ReadonlyArray<AnySpec>, runId: RunId) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
    yield* store.admit(
      specs.map((spec) => Rows.admissionRow(spec, 0, undefined, runId, now)),
      specs.map((spec) => Rows.seedArtifact(spec, runId, now))
    )
    yield* store.flush
  })

/** Turns until `check` holds. */
const until = (check: () => boolean) => Effect.repeat(turn, { until: check })

/** The token holding `key`'s row, if any. */
const tokenOf = (key: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql.unsafe<{ token: string }>(`SELECT token FROM ${WindowClaims.TABLE} WHERE pipeline_key = $1`, [key]),
      (rs) => rs[0]?.token
    ))

/**
 * Makes every DELETE of the claim table fail while `assay_h38_refuse` holds a row (a release
 * statement that fails: the database refuses it, nothing of it commits).
 */
const refuseDeletes = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.all([
    sql.unsafe(`CREATE TABLE assay_h38_refuse (x int)`),
    sql.unsafe(`CREATE FUNCTION assay_h38_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF EXISTS (SELECT 1 FROM assay_h38_refuse) THEN RAISE EXCEPTION 'refused (test)'; END IF; RETURN OLD; END $$`),
    sql.unsafe(`CREATE TRIGGER assay_h38_refuse BEFORE DELETE ON ${WindowClaims.TABLE} FOR EACH ROW EXECUTE FUNCTION assay_h38_refuse()`)
  ], { discard: true }))
const refusing = (on: boolean) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe(on ? `INSERT INTO assay_h38_refuse VALUES (1)` : `DELETE FROM assay_h38_refuse`))

describe("window claims released per pipeline, swept (hygiene38)", () => {
  it.scoped("assay migrate's cluster step drops the per-window claim table of earlier versions, and runs again harmlessly", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // a database migrated by a version before claims37, with a claim of an old runner in it
      yield* sql.unsafe(`CREATE TABLE ${WindowClaims.OLD_TABLE} (window_key text PRIMARY KEY, token text, expires_at timestamptz)`)
      yield* sql.unsafe(`INSERT INTO ${WindowClaims.OLD_TABLE} VALUES ('w', 'T', now() + interval '1 minute')`)
      const present = (table: string) =>
        Effect.map(sql<{ p: boolean }>`SELECT to_regclass(${table}) IS NOT NULL AS p`, (r) => r[0]!.p)
      const url = pg.url("h38_migrate")
      const created = yield* migrateCluster(url)
      assert.isTrue(created.some(([, t]) => t === WindowClaims.TABLE))
      assert.isFalse(yield* present(WindowClaims.OLD_TABLE), "dropped")
      assert.isTrue(yield* present(WindowClaims.TABLE))
      assert.deepStrictEqual(yield* migrateCluster(url), [], "up to date")
      assert.isFalse(yield* present(WindowClaims.OLD_TABLE))
    }).pipe(Effect.provide(pgLayer("h38_migrate"))), 120_000)

  it.scoped("a pipeline released alone is free for another claim at once; the holder's renewal counts the rows it still holds (no loss), and a later takeover is still a loss", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      assert.isTrue((yield* a.claim(["p1", "p2", "p3"], "A")).won)
      yield* a.releasePipeline("A", "p2")
      assert.deepStrictEqual(yield* rows, ["p1=A", "p3=A"])
      assert.deepStrictEqual(yield* b.claim(["p2"], "B"), { won: true, tookOver: false })
      // a key the claim does not hold (any more) is a no-op: B's row stays
      yield* a.releasePipeline("A", "p2")
      yield* a.releasePipeline("X", "p1")
      assert.deepStrictEqual(yield* rows, ["p1=A", "p2=B", "p3=A"])
      // A's renewal renews 2 rows of the 2 it holds now: live
      yield* TestClock.adjust("30 seconds")
      yield* a.renewAll
      assert.isTrue(a.live("A"))
      assert.strictEqual(a.deadline("A"), 30_000 + 60_000 - 2_000)
      // p3 taken over (A froze): the renewal's count (1 of 2) is a loss
      yield* age(["p3"])
      assert.isTrue((yield* b.claim(["p3"], "C")).won)
      yield* a.renewAll
      assert.isFalse(a.live("A"))
    }).pipe(Effect.provide(pgLayer("h38_release_one"))), 120_000)

  it.scoped("a pipeline released while a renewal is under way: the release waits for it, the renewal's count is of the rows held when it was sent (no loss)", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const a = yield* claimsOn
      assert.isTrue((yield* a.claim(["p1", "p2", "p3"], "A")).won)
      // another session holds p1's row: A's renewal (p1, p2, p3 locked in key order) waits on
      // it before it locks p2
      const locked = yield* Deferred.make<void>()
      const done = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(`SELECT 1 FROM ${WindowClaims.TABLE} WHERE pipeline_key = 'p1' FOR UPDATE`)
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(done)
      })))
      yield* Deferred.await(locked)
      yield* TestClock.adjust("30 seconds")
      const renewal = yield* Effect.fork(a.renewAll)
      yield* Effect.repeat(
        Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
          (r) => r[0]!.n
        ),
        { until: (n) => n > 0 }
      )
      // p2 settles meanwhile: its release waits for the renewal (one statement at a time; its
      // delete, committed first, would have made the renewal count 2 rows of the 3 it was sent for)
      const release = yield* Effect.fork(a.releasePipeline("A", "p2"))
      for (let i = 0; i < 20; i++) yield* turn
      const during = yield* rows
      yield* Deferred.succeed(done, undefined)
      yield* Fiber.join(holder)
      yield* Fiber.join(renewal)
      yield* Fiber.join(release)
      // the renewal renewed the 3 rows it was sent for (p2 released after it was sent): live
      assert.isTrue(a.live("A"), "no loss")
      assert.deepStrictEqual(during, ["p1=A", "p2=A", "p3=A"], "the release waited for the renewal")
      assert.strictEqual(a.deadline("A"), 30_000 + 60_000 - 2_000)
      assert.deepStrictEqual(yield* rows, ["p1=A", "p3=A"])
      // the next renewal counts 2 of 2
      yield* a.renewAll
      assert.isTrue(a.live("A"))
    }).pipe(Effect.provide(pgLayer("h38_release_renewing"))), 120_000)

  it.scoped("a release that fails is deleted by the next renewal and is not a loss; nor does it hide a row taken over", () =>
    Effect.gen(function*() {
      const a = yield* claimsOn
      const b = yield* claimsOn
      yield* refuseDeletes
      // 1. refused, then the renewal (deletes allowed again) deletes it and counts p1, p3: live
      assert.isTrue((yield* a.claim(["p1", "p2", "p3"], "A")).won)
      yield* refusing(true)
      yield* a.releasePipeline("A", "p2")
      assert.deepStrictEqual(yield* rows, ["p1=A", "p2=A", "p3=A"], "the release failed: p2 still A's")
      yield* refusing(false)
      yield* a.renewAll
      assert.isTrue(a.live("A"), "the row left behind is not counted: no loss")
      assert.deepStrictEqual(yield* rows, ["p1=A", "p3=A"], "the renewal deleted it")
      // 2. refused again (q2), and q3 taken over meanwhile: the renewal's count (q1 of q1, q3;
      // q2 not counted though still A's) is a loss (a count lowered by the release alone would
      // have counted q1 and q2: 2 of 2)
      assert.isTrue((yield* a.claim(["q1", "q2", "q3"], "A")).won)
      yield* refusing(true)
      yield* a.releasePipeline("A", "q2")
      yield* refusing(false)
      yield* age(["q3"])
      assert.isTrue((yield* b.claim(["q3"], "C")).won)
      yield* a.renewAll
      assert.isFalse(a.live("A"), "the row taken over is a loss")
      assert.deepStrictEqual(yield* rows, ["q1=A", "q3=C"])
    }).pipe(Effect.provide(pgLayer("h38_release_fails"))), 120_000)

  it.scoped("the sweep deletes rows expired long ago only, at most its limit, skipping a row another statement holds; the renewal sweeps at start and then every sweepEvery", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* WindowClaims.createTable
      const wc = WindowClaims.make(sql, {
        ttl: "1 minute",
        heartbeat: "10 seconds",
        clock: yield* Effect.clock,
        sweepAfter: "1 hour",
        sweepEvery: "5 minutes",
        sweepLimit: 2
      })!
      const put = (key: string, expires: string) =>
        sql.unsafe(`INSERT INTO ${WindowClaims.TABLE} VALUES ($1, 'Z', now() + $2::interval)`, [key, expires])
      // three rows of runs cut short 2 hours ago, one that expired 10 minutes ago (a takeover may
      // still come for it), one live
      yield* put("old1", "-2 hours")
      yield* put("old2", "-2 hours")
      yield* put("old3", "-2 hours")
      yield* put("recent", "-10 minutes")
      yield* put("live", "1 minute")
      // old1 is locked by another statement (a claim taking it over): skipped, not waited on
      const locked = yield* Deferred.make<void>()
      const done = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(`SELECT 1 FROM ${WindowClaims.TABLE} WHERE pipeline_key = 'old1' FOR UPDATE`)
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(done)
      })))
      yield* Deferred.await(locked)
      assert.strictEqual(yield* wc.sweep.pipe(Effect.timeout("10 seconds"), Effect.orDie), 2)
      assert.deepStrictEqual(yield* rows, ["live=Z", "old1=Z", "recent=Z"])
      yield* Deferred.succeed(done, undefined)
      yield* Fiber.join(holder)
      // the renewal (no claim held) sweeps at its first run
      yield* wc.renewAll
      assert.deepStrictEqual(yield* rows, ["live=Z", "recent=Z"])
      // another row cut short: not swept before sweepEvery has passed, then swept
      yield* put("old4", "-2 hours")
      yield* TestClock.adjust("4 minutes")
      yield* wc.renewAll
      assert.deepStrictEqual(yield* rows, ["live=Z", "old4=Z", "recent=Z"])
      yield* TestClock.adjust("1 minute")
      yield* wc.renewAll
      assert.deepStrictEqual(yield* rows, ["live=Z", "recent=Z"])
    }).pipe(Effect.provide(pgLayer("h38_sweep"))), 120_000)

  it.scoped("a window whose pipeline settles early gives that pipeline's row up at once: another execution claims it while the siblings still run (and keep theirs, renewed without a loss)", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const called = new Set<string>()
      const a = Task.make("a", { retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.suspend(() => {
          called.add(ctx.pipelineId)
          return n === 1 ? Effect.fail(new FatalError({ message: "early (test)" })) : Effect.as(Deferred.await(gate), n + 1)
        }))
      const b = Task.make("b", (n: number) => Effect.succeed(n * 2))
      const specs: ReadonlyArray<AnySpec> = [1, 2, 3].map((n) => Pipeline.make("early", a, b).bind(n))
      const ids: ReadonlyArray<string> = specs.map((s) => s.pipelineId)
      const [p1, p2, p3] = [ids[0]!, ids[1]!, ids[2]!]
      const store = yield* Store
      yield* admitAll(store, specs, "run-e" as RunId)
      const env = yield* makeTaskEnv({ store, pools: yield* Pool.Pools, bus: yield* makeBus, concurrency: 8 })
      const r1 = yield* claimsOn
      const r2 = yield* claimsOn
      const window = yield* Effect.fork(runWindow(env, r1, undefined, windowKey({ pipelineIds: [p1, p2, p3] }), specs))
      yield* until(() => called.size === 3)
      const p1Row = store.getPipeline(p1 as never).pipe(Effect.map((r) => Option.getOrUndefined(r)?.state))
      yield* Effect.repeat(Effect.zipRight(turn, p1Row), { until: (state) => state === "failed" })
      // p1 failed (its row committed): another execution claiming p1 alone wins it at once,
      // while p2 and p3 run on under the window's claim (before: held until the window's end)
      const again = yield* Effect.repeat(Effect.zipRight(turn, r2.claim([p1], "B")), { until: (r) => r.won, times: 200 })
      assert.deepStrictEqual(again, { won: true, tookOver: false })
      assert.isFalse((yield* r2.claim([p2], "B2")).won, "the siblings' rows are still held")
      const token = yield* tokenOf(p2)
      assert.isDefined(token)
      assert.strictEqual(yield* tokenOf(p3), token)
      yield* r1.renewAll
      assert.isTrue(r1.live(token!), "the renewal counts the two rows left: no loss")
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* Fiber.join(window), ["failed", "succeeded", "succeeded"])
      assert.deepStrictEqual(yield* rows, [`${p1}=B`])
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), pgLayer("h38_window_early")))), 120_000)

  it.live("review37 F3: a claim retried after its answer was lost (the takeover committed) counts as a takeover: the first output is read back, so a zombie's late commit is the next task's input", () =>
    Effect.gen(function*() {
      const thaw = yield* Deferred.make<void>()
      const zombieCommitted = yield* Deferred.make<void>()
      let bCalls = 0
      const a = Task.make("a", (n: number) => Effect.succeed(n + 1))
      // task b: the first call (runner 1) froze inside it, thawed later with 3×; the second
      // (runner 2, after the takeover) answers 2× once the zombie's commit is in
      const b = Task.make("b", (n: number) =>
        Effect.suspend(() => {
          bCalls++
          return bCalls === 1 ? Effect.as(Deferred.await(thaw), n * 3) : Effect.as(Deferred.await(zombieCommitted), n * 2)
        }))
      const c = Task.make("c", (n: number) => Effect.succeed(n + 100))
      const specs: ReadonlyArray<AnySpec> = [Pipeline.make("retried", a, b, c).bind(1)]
      const id = specs[0]!.pipelineId
      const url = pg.url("h38_retried")
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      const sql = yield* SqlClient.SqlClient
      const pools = yield* Pool.Pools
      yield* admitAll(store, specs, "run-r" as RunId)
      const key = windowKey({ pipelineIds: [id] })
      const env1 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      const wc1 = yield* claimsOn
      const frozen = yield* Effect.fork(runWindow(env1, wc1, sql, key, specs))
      yield* until(() => bCalls === 1)
      // runner 1 froze inside b; its claim expires; runner 2 takes the window over, and the
      // answer of its first claim (which took the row over and committed) is lost
      yield* age([id])
      const env2 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      const real = yield* claimsOn
      let lost = false
      const wc2: WindowClaims.WindowClaims = {
        ...real,
        claim: (keys, token) =>
          Effect.flatMap(real.claim(keys, token), (r) =>
            lost ? Effect.succeed(r) : Effect.suspend(() => {
              lost = true
              return Effect.fail(new StoreUnavailable({ message: "Connection terminated (test: the answer lost)" }))
            }))
      }
      const second = yield* Effect.fork(runWindow(env2, wc2, sql, key, specs))
      yield* until(() => bCalls === 2)
      assert.isTrue(lost, "the first answer was lost")
      // runner 1 learns of the takeover (its deadline passed), then thaws: its call under way
      // finishes and commits b first (3×), and it calls nothing more
      yield* wc1.renewAll
      yield* Deferred.succeed(thaw, undefined)
      yield* Effect.repeat(
        Effect.zipRight(turn, Effect.map(store.getPipeline(id as never), (r) => Option.getOrThrow(r).nTasksDone)),
        { until: (n) => n >= 2 }
      )
      yield* Deferred.succeed(zombieCommitted, undefined)
      assert.deepStrictEqual(yield* Fiber.join(second), ["succeeded"])
      // c's input is the stored b (the zombie's 3×2 = 6), not runner 2's own 2×2 = 4
      const out = Option.getOrThrow(yield* store.getArtifact(id as never, 2))
      assert.strictEqual(JSON.parse(new TextDecoder().decode(out.payload!)), (1 + 1) * 3 + 100)
      yield* Fiber.interrupt(frozen)
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(ArtifactBackends.layerInline, Pool.layer([]), pgLayer("h38_retried")))), 180_000)
})
