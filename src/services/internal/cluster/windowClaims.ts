/**
 * Window claims of the cluster engine (issue 17, step 1 of docs/scale-out.md "Design: windows
 * claimed whole"): a window of pipelines is run by one execution at a time across every runner
 * process, fenced by **local deadlines** instead of a claim, a fence and an input read per task.
 *
 * The claim is **per pipeline** (claims37): one row per pipeline in
 * `assay_cluster_pipeline_claims` (created by `assay migrate`, L6): the pipeline's key
 * ({@link pipelineClaimKey}: the store's identity and the pipeline id), the `token` of the
 * execution that holds it, and `expires_at`, on the database's clock; an index on `token`.
 * A window's execution claims all of its pipelines at once, so an execution runs a pipeline
 * only while it holds that pipeline, whatever window it is grouped in: a re-submission that
 * groups the pipelines another way (some of them already done, another `--max-admitted`,
 * another order), or another lane of the same window, waits for the execution that holds
 * them. (A row per window, keyed by the window's ids, let two groupings of one pipeline run
 * side by side: break37 R1.) The claim is a lease:
 *
 * - an execution {@link WindowClaims.claim claims} its window's pipelines in one statement,
 *   all or none: won when every row is free, is its own, or has expired; a claim that sees
 *   a row held live by another token locks nothing and is lost at once; otherwise the
 *   existing rows are locked in key order first, as the renewal and the release lock theirs
 *   (statements over shared rows wait on each other in one order, not in a cycle; a token
 *   re-claiming a subset of its own rows while its renewal runs is the one case left to the
 *   server's deadlock detection, whose victim is retried or, for a renewal, runs to its
 *   deadline: L3);
 *   a row inserted meanwhile by another claimer is caught by `ON CONFLICT … WHERE`, and a
 *   statement that won only part of the rows undoes itself (it fails on purpose). Two
 *   executions whose windows share a pipeline never both win;
 * - every claim a process holds is renewed by one statement per heartbeat
 *   ({@link WindowClaims.renewAll}, `token = ANY($1)` through the token index), with the
 *   block leases' `rider` in the same statement;
 * - each claim has a **local deadline** on the process's `Clock`: the local time read *before*
 *   the last statement that won or renewed it, plus the TTL, less a margin (a tenth of the TTL,
 *   at most 2 s). The database's expiry is counted from when that statement ran, so it comes
 *   later: another execution can take a pipeline over only after the holder's deadline has
 *   passed, provided both clocks run at the same rate (they need not agree). Before each call
 *   the holder checks its deadline in memory ({@link WindowClaims.live}); past it, it calls
 *   nothing more (a zombie thawed after a takeover stops before calling);
 * - L3: a renewal that fails (the database unreachable) is not a loss: the claim runs to its
 *   deadline; only an answer that a row is no longer this token's (fewer rows renewed than
 *   the claim holds: those it won, less those it gave up since) is a loss (the deadline is
 *   then passed at once).
 *
 * A pipeline that settles in its window gives its row up at once
 * ({@link WindowClaims.releasePipeline}, hygiene38: a re-submission that admitted it again need
 * not wait for the window's slowest sibling); the claim's expected row count follows it
 * exactly (a release not known to have committed is deleted by the next renewal, and not
 * counted). A finished execution releases what is left of its claim (its rows deleted); one
 * cut short leaves them to expire, and the expired rows are swept, long after their expiry
 * ({@link WindowClaims.sweep}, from the renewal fiber of every process, at a bounded cost).
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { type Clock, Duration, Effect, Option } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"
import { PREPARED } from "../preparedMark.js"

/**
 * The pipeline claim table: one row per pipeline claimed (its key, {@link pipelineClaimKey}),
 * the token of the execution that holds it and its expiry on the database's clock.
 */
export const TABLE = "assay_cluster_pipeline_claims"

/** The index of {@link TABLE} on `token`: renewals and releases by token touch only that token's rows. */
const TOKEN_INDEX = `${TABLE}_token`

/**
 * A pipeline's key in {@link TABLE}: the admitting store's identity (`Store.storeId`, none for
 * a store without one) and the pipeline id, as `windowKey` keys a window (the cluster's
 * database may serve several stores).
 *
 * @internal
 */
export const pipelineClaimKey = (pipelineId: string, storeId?: string | undefined): string =>
  storeId === undefined ? pipelineId : `${storeId}/${pipelineId}`

/** Creates the pipeline claim table and its token index when missing (idempotent; `assay migrate` runs it). */
export const createTable = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.zipRight(
    sql.unsafe(`CREATE TABLE IF NOT EXISTS ${TABLE} (
      pipeline_key text PRIMARY KEY,
      token text,
      expires_at timestamptz
    )`),
    sql.unsafe(`CREATE INDEX IF NOT EXISTS ${TOKEN_INDEX} ON ${TABLE} (token)`)
  ))

/**
 * The per-window claim table of the versions before claims37 (`window_key`, `token`,
 * `expires_at`), read by no runner of this version.
 */
export const OLD_TABLE = "assay_cluster_window_claims"

/**
 * What `assay migrate` runs for window claims (idempotent): {@link createTable}, then drops
 * {@link OLD_TABLE} when present (hygiene38). Its rows are leases, nothing to keep; and since
 * every runner of a database is upgraded together ("upgrade all runners together", before
 * `assay migrate`), no runner of this version reads it, while a runner of an earlier version
 * still running against the rule fails loudly on it (its claims cannot be written) instead of
 * claiming windows that this version's runners do not see. Going back to an earlier version
 * means running that version's `assay migrate`, which creates it again.
 */
export const migrate = Effect.zipRight(
  createTable,
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`DROP TABLE IF EXISTS ${OLD_TABLE}`))
)

/**
 * Fails with a {@link StoreUnavailable} naming `assay migrate` when the client is PostgreSQL and
 * the pipeline claim table is missing (a database migrated by a version before it); succeeds
 * at once on another dialect.
 */
export const requireTable = (sql: SqlClient.SqlClient): Effect.Effect<void, StoreUnavailable> =>
  sql.onDialectOrElse({
    pg: () =>
      sql<{ present: boolean }>`SELECT to_regclass(${TABLE}) IS NOT NULL AS present`.pipe(
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot check the pipeline claim table: ${e.message}`, cause: e })),
        Effect.flatMap((rows) =>
          rows[0]?.present === true
            ? Effect.void
            : Effect.fail(
              new StoreUnavailable({
                message: `the cluster database has no \`${TABLE}\` table (window claims): run \`assay migrate --database URL\` ` +
                  "once before starting runners with window claims"
              })
            )
        )
      ),
    orElse: () => Effect.void
  })

/** What {@link WindowClaims.claim} found: `won`, and `tookOver` (a row named another token before). */
export interface WindowClaimResult {
  readonly won: boolean
  /**
   * The claim was won from another execution's token (its claim of one of the pipelines had
   * expired, at least): that execution
   * may have had a call in flight when it stopped, whose late commit can win over this one's.
   */
  readonly tookOver: boolean
}

/**
 * The window claims of one process over one database (see the module comment).
 *
 * @internal
 */
export interface WindowClaims {
  /** A claim not renewed for this long may be taken over (the shard lock expiry by default). */
  readonly ttl: Duration.Duration
  /** How often the process renews its claims (the shard lock refresh by default). */
  readonly heartbeat: Duration.Duration
  /**
   * Claims the pipelines `keys` ({@link pipelineClaimKey}) for execution `token`, all or none,
   * in one statement; on a win its local deadline is set and `token` holds exactly `keys`
   * (its rows of other pipelines are freed). Not won, `token` holds nothing any more.
   */
  readonly claim: (keys: ReadonlyArray<string>, token: string) => Effect.Effect<WindowClaimResult, StoreUnavailable>
  /**
   * Renews every claim this process holds, in one statement: each one renewed gets a new
   * deadline; one of which the database no longer gives every row it holds (as it was when
   * the statement was sent) to its token is lost (deadline passed: a row was taken over).
   * Rows given up ({@link WindowClaims.releasePipeline}) whose deletion is not known to have
   * committed are deleted in the same statement and not counted. An error changes nothing
   * (L3: the claims run to their deadlines) and is not raised. Then, when due, the sweep
   * ({@link WindowClaims.sweep}; its error is logged, not raised).
   */
  readonly renewAll: Effect.Effect<void>
  /** Whether `token`'s claim is within its local deadline now (in memory, no statement). */
  readonly live: (token: string) => boolean
  /** The local deadline of `token`'s claim (epoch ms on the process's clock), if it holds one. */
  readonly deadline: (token: string) => number | undefined
  /** Gives `token`'s claim up (every row still this token's deleted) and stops renewing it. */
  readonly release: (token: string) => Effect.Effect<void, StoreUnavailable>
  /**
   * Gives up `token`'s row of pipeline `key` alone (the pipeline settled in the window, its
   * terminal row committed), so that another execution may claim it while the window's other
   * pipelines run on. The claim's renewal stops counting it at once: the renewal's loss
   * detection stays exact whatever became of the statement (a release that failed, or whose
   * answer was lost, is deleted by the next renewal and never counted as a loss, nor hides
   * one). Releases of the process are sent one statement at a time, together (those that
   * settle while one is under way, or while a renewal is, go in the next statement), and
   * never while a renewal is under way. Never fails (a release that fails is retried by the
   * renewal); a key the claim does not hold is a no-op.
   */
  readonly releasePipeline: (token: string, key: string) => Effect.Effect<void>
  /**
   * Deletes at most `sweepLimit` rows whose expiry passed more than `sweepAfter` ago (rows of
   * executions cut short that nobody claimed again: a runner killed and never replaced, a run
   * abandoned), skipping rows locked by another statement; returns how many it deleted. The
   * renewal runs it every `sweepEvery` (first at the process's first renewal).
   */
  readonly sweep: Effect.Effect<number, StoreUnavailable>
  /** Stops renewing `token`'s claim without a statement (its rows expire on their own). */
  readonly forget: (token: string) => void
}

/** Options of {@link make}: `ttl` (default 35 s), `heartbeat` (default 10 s; a third of `ttl` or less is wise), the process's `clock`. */
export interface WindowClaimOptions {
  readonly ttl?: Duration.DurationInput | undefined
  readonly heartbeat?: Duration.DurationInput | undefined
  readonly clock: Clock.Clock
  /**
   * Other claims of the process renewed in the same statement (block leases: the global
   * pools' blocks, `PgPools` `Gate.blockRider`): its CTEs and columns join the renewal, and
   * it settles from the statement's row. A renewal that fails settles nothing (L3).
   */
  readonly rider?: Rider | undefined
  /**
   * How long after its expiry an abandoned row is swept ({@link WindowClaims.sweep}; default
   * one hour, never less than three TTLs): the row of an execution taken over is what tells
   * the next claimer that it took over (`tookOver`: the first outputs read back, L4), so it is
   * kept long past any takeover of a holder merely late.
   */
  readonly sweepAfter?: Duration.DurationInput | undefined
  /** How often the renewal sweeps (default 5 minutes). */
  readonly sweepEvery?: Duration.DurationInput | undefined
  /** The most rows one sweep deletes (default 1,000). */
  readonly sweepLimit?: number | undefined
}

/**
 * Other claims renewed in the window claims' statement: `parts(first)` gives CTEs, columns and
 * parameters (numbered from `first`), or `undefined` when it has nothing to renew now;
 * `settle(row, sent)` reads the statement's row (`sent`: the local time before it was sent).
 */
export interface Rider {
  readonly parts: (first: number) => {
    readonly ctes: ReadonlyArray<string>
    readonly cols: ReadonlyArray<string>
    readonly params: ReadonlyArray<unknown>
  } | undefined
  readonly settle: (row: Record<string, unknown> | undefined, sent: number) => Effect.Effect<void>
}

/**
 * The margin kept between a claim's local deadline and its expiry in the database: a tenth
 * of the TTL, at most 2 s.
 *
 * @internal
 */
export const marginMs = (ttlMs: number): number => Math.min(ttlMs / 10, 2_000)

const unavailable = (what: string) => (e: { readonly message: string }) =>
  new StoreUnavailable({ message: `cannot ${what} the window claim: ${e.message}`, cause: e })

/** What the claim statement raises (a cast that fails) when only part of the pipelines was won: the statement is undone. */
const PARTIAL = "assay-claim-partly-won"

/**
 * The claim statement ($1 the keys, $2 the token, $3 the TTL in ms). `pre` reads the keys'
 * rows without a lock: when one is held live by another token (the common case of a waiting
 * execution, once per heartbeat), nothing is locked or written and the claim is lost at once,
 * so a waiter never queues on the holder's rows (nor the holder's renewal on the waiter's
 * locks: review37 F1). Otherwise `locked` locks the existing rows of the keys in key order
 * (every statement that writes this table locks its rows in key order: two of them never wait
 * on each other in a cycle) and `seen` counts, on the locked (latest) rows, those held live by
 * another token (`held`) and those naming another token at all (`others`: a takeover when
 * won). Only when `held` is 0 does `up` write the keys (a row inserted meanwhile by another
 * claimer, unseen by `locked`, is caught by `ON CONFLICT … WHERE` and not counted). `mine` and
 * `dropped` free the token's rows of other pipelines when every key was won, and every row of
 * the token when not (review37 F2: a claim lost wholly to a concurrent claimer held its older
 * rows on). Won in part (a row inserted by a concurrent claimer), the statement fails on a
 * cast, which undoes everything it wrote.
 */
const CLAIM = `WITH pre AS (
    SELECT count(*) FILTER (WHERE token IS NOT NULL AND token <> $2 AND expires_at IS NOT NULL AND expires_at >= now()) AS held
    FROM ${TABLE} WHERE pipeline_key = ANY($1::text[])
  ), locked AS MATERIALIZED (
    SELECT pipeline_key, token, expires_at FROM ${TABLE}
    WHERE pipeline_key = ANY($1::text[]) AND (SELECT held FROM pre) = 0 ORDER BY pipeline_key FOR UPDATE
  ), seen AS (
    SELECT GREATEST((SELECT held FROM pre),
        count(*) FILTER (WHERE token IS NOT NULL AND token <> $2 AND expires_at IS NOT NULL AND expires_at >= now())) AS held,
      count(*) FILTER (WHERE token IS NOT NULL AND token <> $2) AS others
    FROM locked
  ), up AS (
    INSERT INTO ${TABLE} AS c (pipeline_key, token, expires_at)
    SELECT k, $2, now() + $3::int * interval '1 millisecond' FROM unnest($1::text[]) AS k
    WHERE (SELECT held FROM seen) = 0
    ORDER BY k
    ON CONFLICT (pipeline_key) DO UPDATE SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
    WHERE c.token IS NULL OR c.token = EXCLUDED.token OR c.expires_at IS NULL OR c.expires_at < now()
    RETURNING 1
  ), won AS (
    SELECT count(*) AS n FROM up
  ), mine AS MATERIALIZED (
    SELECT pipeline_key FROM ${TABLE}
    WHERE token = $2 AND ((SELECT n FROM won) < cardinality($1::text[]) OR NOT (pipeline_key = ANY($1::text[])))
    ORDER BY pipeline_key FOR UPDATE
  ), dropped AS (
    DELETE FROM ${TABLE} AS d USING mine WHERE d.pipeline_key = mine.pipeline_key AND d.token = $2 RETURNING 1
  )
  SELECT won.n::int AS won, seen.others::int AS others, (SELECT count(*) FROM dropped)::int AS dropped,
    CASE WHEN won.n > 0 AND won.n < cardinality($1::text[]) THEN CAST('${PARTIAL} ' || won.n AS int) ELSE 0 END AS partial
  FROM won, seen`

/**
 * The renewal's CTEs ($1 the TTL in ms, $2 the tokens, $3/$4 the pipelines released by those
 * tokens whose deletion is not known to have committed: token and key, pairwise): every row of
 * the tokens locked in key order (`window_lock`), the released ones deleted (`window_gone`: a
 * release that failed or whose answer was lost is done here), the others' expiry moved $1 ms
 * past now (`window_renew`, returning each row's token: the count of rows renewed per token,
 * released rows not counted).
 */
const RENEW_CTES = `window_lock AS MATERIALIZED (
    SELECT pipeline_key FROM ${TABLE} WHERE token = ANY($2::text[]) ORDER BY pipeline_key FOR UPDATE
  ), window_leave AS (
    SELECT t, k FROM unnest($3::text[], $4::text[]) AS u(t, k)
  ), window_gone AS (
    DELETE FROM ${TABLE} AS g USING window_lock, window_leave
    WHERE g.pipeline_key = window_lock.pipeline_key AND g.pipeline_key = window_leave.k AND g.token = window_leave.t RETURNING 1
  ), window_renew AS (
    UPDATE ${TABLE} AS r SET expires_at = now() + $1::int * interval '1 millisecond' FROM window_lock
    WHERE r.pipeline_key = window_lock.pipeline_key AND r.token = ANY($2::text[])
      AND NOT EXISTS (SELECT 1 FROM window_leave WHERE window_leave.t = r.token AND window_leave.k = r.pipeline_key)
    RETURNING r.token
  )`

/**
 * The release of single pipelines ($1 the tokens, $2 the keys, pairwise): each row still its
 * token's deleted, locked in key order first (as every writer of the table locks its rows).
 */
const RELEASE_PIPELINES = `WITH u AS (
    SELECT t, k FROM unnest($1::text[], $2::text[]) AS u(t, k)
  ), l AS MATERIALIZED (
    SELECT c.pipeline_key FROM ${TABLE} AS c JOIN u ON c.pipeline_key = u.k AND c.token = u.t
    ORDER BY c.pipeline_key FOR UPDATE OF c
  )
  DELETE FROM ${TABLE} AS d USING l, u WHERE d.pipeline_key = l.pipeline_key AND d.pipeline_key = u.k AND d.token = u.t`

/**
 * The sweep ($1 how long past its expiry a row is swept, in ms; $2 the most rows deleted):
 * rows locked by another statement (a claim taking them over, a renewal) are skipped, so the
 * sweep never waits on nor races a writer; the expiry is checked again after the lock.
 */
const SWEEP = `WITH s AS MATERIALIZED (
    SELECT pipeline_key FROM ${TABLE}
    WHERE expires_at < now() - $1::float8 * interval '1 millisecond' LIMIT $2::int FOR UPDATE SKIP LOCKED
  ), d AS (
    DELETE FROM ${TABLE} AS d USING s
    WHERE d.pipeline_key = s.pipeline_key AND d.expires_at < now() - $1::float8 * interval '1 millisecond' RETURNING 1
  )
  SELECT count(*)::int AS n FROM d`

/**
 * A claim this process holds: its local deadline, the pipelines it holds (a renewal must renew
 * every one of them), and those it gave up whose deletion is not known to have committed
 * (`leaving`: a renewal deletes them and does not count them).
 */
interface Held {
  deadline: number
  readonly keys: Set<string>
  readonly leaving: Set<string>
}

/**
 * The window claims over a Postgres client (`undefined` on another dialect).
 *
 * @internal
 */
export const make = (sql: SqlClient.SqlClient, options: WindowClaimOptions): WindowClaims | undefined => {
  const ttl = Duration.decode(options.ttl ?? Duration.seconds(35))
  const heartbeat = Duration.decode(options.heartbeat ?? Duration.seconds(10))
  const ttlMs = Math.max(1, Math.round(Duration.toMillis(ttl)))
  const keep = ttlMs - marginMs(ttlMs)
  const sweepAfterMs = Math.max(3 * ttlMs, Duration.toMillis(Duration.decode(options.sweepAfter ?? Duration.hours(1))))
  const sweepEveryMs = Duration.toMillis(Duration.decode(options.sweepEvery ?? Duration.minutes(5)))
  const sweepLimit = Math.max(1, Math.floor(options.sweepLimit ?? 1_000))
  const clock = options.clock
  /** Every claim this process holds, by token. */
  const held = new Map<string, Held>()
  /** Pipelines given up (each also in its claim's `leaving`) whose release statement is not sent yet. */
  let queued: Array<{ readonly claim: Held; readonly token: string; readonly key: string }> = []
  /**
   * Renewals and single-pipeline releases, one statement at a time: a renewal's count is then
   * never changed under it by a release of this process (only by another's takeover).
   */
  const lock = Effect.unsafeMakeSemaphore(1)
  /** The local time of the next sweep (the first renewal sweeps). */
  let nextSweep = Number.NEGATIVE_INFINITY
  /** What a renewal is sent for: each claim, its expected row count and its rows leaving, as they were when it was sent. */
  const snapshot = () =>
    Array.from(held, ([token, claim]) => ({ token, claim, expected: claim.keys.size, leaving: Array.from(claim.leaving) }))
  type Snapshot = ReturnType<typeof snapshot>
  /** The renewal's parameters $2–$4 for a snapshot. */
  const renewParams = (snap: Snapshot) => {
    const leaveTokens: Array<string> = []
    const leaveKeys: Array<string> = []
    for (const s of snap) {
      for (const k of s.leaving) {
        leaveTokens.push(s.token)
        leaveKeys.push(k)
      }
    }
    return [snap.map((s) => s.token), leaveTokens, leaveKeys] as const
  }
  /** The claims' new deadlines from a renewal's answer (`renewed`: the rows the database renewed, per token). */
  const renewedAs = (snap: Snapshot, renewed: ReadonlyMap<string, number>, sent: number) => {
    for (const s of snap) {
      // a claim released or claimed again meanwhile is left as it is (its own statement is later)
      if (held.get(s.token) !== s.claim) continue
      // only the database's answer that a row is another's is a loss (L3); the rows leaving
      // were deleted by the renewal (not counted either way)
      s.claim.deadline = (renewed.get(s.token) ?? 0) >= s.expected ? sent + keep : 0
      for (const k of s.leaving) s.claim.leaving.delete(k)
    }
    // the releases the renewal did need no statement of their own
    queued = queued.filter((q) => !snap.some((s) => s.claim === q.claim && s.leaving.includes(q.key)))
  }
  /** The claims and the rider's claims renewed in one statement. */
  const renewWith = (
    snap: Snapshot,
    rider: { readonly ctes: ReadonlyArray<string>; readonly cols: ReadonlyArray<string>; readonly params: ReadonlyArray<unknown> }
  ): Effect.Effect<void> =>
    Effect.suspend(() => {
      const sent = clock.unsafeCurrentTimeMillis()
      return sql.unsafe<Record<string, unknown>>(
        PREPARED + `WITH ${RENEW_CTES}, ${rider.ctes.join(", ")}
        SELECT (SELECT COALESCE(json_object_agg(token, n), '{}'::json)
          FROM (SELECT token, count(*) AS n FROM window_renew GROUP BY token) AS g) AS window_renewed, ${rider.cols.join(", ")}`,
        [ttlMs, ...renewParams(snap), ...rider.params]
      ).pipe(
        Effect.flatMap((rows) => {
          const raw = rows[0]?.window_renewed ?? {}
          const counts = (typeof raw === "string" ? JSON.parse(raw) : raw) as Record<string, number>
          renewedAs(snap, new Map(Object.entries(counts).map(([t, n]) => [t, Number(n)])), sent)
          return options.rider!.settle(rows[0], sent)
        }),
        Effect.catchAll((e) => Effect.logDebug(`claims not renewed (they run to their deadlines): ${e.message}`))
      )
    })
  const renewOnce: Effect.Effect<void> = Effect.suspend(() => {
    const snap = snapshot()
    const rider = options.rider?.parts(5)
    if (rider !== undefined) return renewWith(snap, rider)
    if (snap.length === 0) return Effect.void
    const sent = clock.unsafeCurrentTimeMillis()
    return sql.unsafe<{ token: string; n: number }>(
      PREPARED + `WITH ${RENEW_CTES} SELECT token, count(*)::int AS n FROM window_renew GROUP BY token`,
      [ttlMs, ...renewParams(snap)]
    ).pipe(
      Effect.map((rows) => renewedAs(snap, new Map(rows.map((r) => [r.token, Number(r.n)])), sent)),
      Effect.catchAll((e) => Effect.logDebug(`window claims not renewed (they run to their deadlines): ${e.message}`))
    )
  })
  /** Sends the queued single-pipeline releases in one statement (under `lock`). */
  const flushQueued: Effect.Effect<void> = Effect.suspend(() => {
    if (queued.length === 0) return Effect.void
    const batch = queued
    queued = []
    return sql.unsafe(PREPARED + RELEASE_PIPELINES, [batch.map((b) => b.token), batch.map((b) => b.key)]).pipe(
      // committed: no longer leaving (the renewal neither deletes nor counts them)
      Effect.map(() => batch.forEach((b) => b.claim.leaving.delete(b.key))),
      // not known to have committed: left `leaving`, the next renewal deletes them
      Effect.catchAll((e) => Effect.logDebug(`pipeline claims not released (the next renewal deletes them): ${e.message}`))
    )
  })
  const sweep: Effect.Effect<number, StoreUnavailable> = sql.unsafe<{ n: number }>(PREPARED + SWEEP, [sweepAfterMs, sweepLimit]).pipe(
    Effect.map((rows) => Number(rows[0]?.n ?? 0)),
    Effect.mapError(unavailable("sweep"))
  )
  const sweepDue: Effect.Effect<void> = Effect.suspend(() => {
    const now = clock.unsafeCurrentTimeMillis()
    if (now < nextSweep) return Effect.void
    nextSweep = now + sweepEveryMs
    return sweep.pipe(
      Effect.flatMap((n) => n > 0 ? Effect.logDebug(`window claims: ${n} abandoned rows swept`) : Effect.void),
      Effect.catchAll((e) => Effect.logDebug(`window claims not swept (the next sweep tries again): ${e.message}`))
    )
  })
  const release = (token: string) =>
    Effect.suspend(() => {
      held.delete(token)
      queued = queued.filter((q) => q.token !== token)
      // its rows locked in key order first, as every writer of the table locks them
      return Effect.asVoid(sql.unsafe(
        PREPARED + `WITH l AS MATERIALIZED (SELECT pipeline_key FROM ${TABLE} WHERE token = $1 ORDER BY pipeline_key FOR UPDATE)
          DELETE FROM ${TABLE} AS d USING l WHERE d.pipeline_key = l.pipeline_key AND d.token = $1`,
        [token]
      )).pipe(
        Effect.mapError(unavailable("release"))
      )
    })
  return sql.onDialectOrElse({
    pg: (): WindowClaims | undefined => ({
      ttl,
      heartbeat,
      claim: (keys, token) =>
        Effect.suspend(() => {
          const unique = Array.from(new Set(keys))
          // read before the statement is sent: the database's expiry is counted from later
          const sent = clock.unsafeCurrentTimeMillis()
          return sql.unsafe<{ won: number; others: number }>(PREPARED + CLAIM, [unique, token, ttlMs]).pipe(
            Effect.map((rows): WindowClaimResult => {
              const won = Number(rows[0]?.won ?? 0) === unique.length
              if (!won) {
                // nothing written, and the token's other rows freed: it holds nothing
                held.delete(token)
                return { won: false, tookOver: false }
              }
              // its rows of other pipelines (those leaving included) were deleted by the claim
              held.set(token, { deadline: sent + keep, keys: new Set(unique), leaving: new Set() })
              return { won: true, tookOver: Number(rows[0]?.others ?? 0) > 0 }
            }),
            Effect.catchIf(
              (e) => e.message.includes(PARTIAL) || String((e as { cause?: unknown }).cause).includes(PARTIAL),
              // won in part: the statement was undone; the token's older rows (if any) go too
              () => Effect.as(Effect.ignore(release(token)), { won: false, tookOver: false })
            ),
            Effect.mapError(unavailable("write"))
          )
        }),
      renewAll: Effect.zipRight(lock.withPermits(1)(renewOnce), sweepDue),
      live: (token) => {
        const claim = held.get(token)
        return claim !== undefined && clock.unsafeCurrentTimeMillis() < claim.deadline
      },
      deadline: (token) => Option.getOrUndefined(Option.map(Option.fromNullable(held.get(token)), (c) => c.deadline)),
      release,
      releasePipeline: (token, key) =>
        Effect.suspend(() => {
          const claim = held.get(token)
          if (claim === undefined || !claim.keys.delete(key)) return Effect.void
          // not counted by a renewal sent from now on; deleted by the next statement of the lock
          claim.leaving.add(key)
          queued.push({ claim, token, key })
          return lock.withPermits(1)(flushQueued)
        }),
      sweep,
      forget: (token) => {
        held.delete(token)
        queued = queued.filter((q) => q.token !== token)
      }
    }),
    orElse: () => undefined
  })
}
