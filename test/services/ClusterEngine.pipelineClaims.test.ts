/**
 * claims37: the window claims' statements against the harness Postgres (`windowClaims.ts`): a
 * window's pipelines are claimed all or none, one row per pipeline, so two windows that share a
 * pipeline (a re-submission that grouped it another way, another lane) never both run it.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, Redacted } from "effect"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
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
