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
 *   the claim won) is a loss (the deadline is then passed at once).
 *
 * A finished execution releases its claim (its rows deleted: the table holds the live claims
 * and those of executions cut short, which expire); one cut short leaves them to expire.
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
   * deadline; one of which the database no longer gives every row to its token is lost
   * (deadline passed: a row was taken over). An
   * error changes nothing (L3: the claims run to their deadlines) and is not raised.
   */
  readonly renewAll: Effect.Effect<void>
  /** Whether `token`'s claim is within its local deadline now (in memory, no statement). */
  readonly live: (token: string) => boolean
  /** The local deadline of `token`'s claim (epoch ms on the process's clock), if it holds one. */
  readonly deadline: (token: string) => number | undefined
  /** Gives `token`'s claim up (every row still this token's deleted) and stops renewing it. */
  readonly release: (token: string) => Effect.Effect<void, StoreUnavailable>
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
 * The renewal's CTEs: every row of the tokens $2 locked in key order (`window_lock`), then its
 * expiry moved $1 ms past now (`window_renew`, returning each row's token: the count of rows
 * renewed per token).
 */
const RENEW_CTES = `window_lock AS MATERIALIZED (
    SELECT pipeline_key FROM ${TABLE} WHERE token = ANY($2::text[]) ORDER BY pipeline_key FOR UPDATE
  ), window_renew AS (
    UPDATE ${TABLE} AS r SET expires_at = now() + $1::int * interval '1 millisecond' FROM window_lock
    WHERE r.pipeline_key = window_lock.pipeline_key AND r.token = ANY($2::text[]) RETURNING r.token
  )`

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
  const clock = options.clock
  /** Every claim this process holds, by token: its local deadline and how many rows it won. */
  const held = new Map<string, { deadline: number; readonly rows: number }>()
  /** The claims' new deadlines from a renewal's answer (`renewed`: the rows the database renewed, per token). */
  const renewedAs = (tokens: ReadonlyArray<string>, renewed: ReadonlyMap<string, number>, sent: number) => {
    for (const token of tokens) {
      const claim = held.get(token)
      // a claim released meanwhile is not brought back
      if (claim === undefined) continue
      // only the database's answer that a row is another's is a loss (L3)
      claim.deadline = (renewed.get(token) ?? 0) >= claim.rows ? sent + keep : 0
    }
  }
  /** The claims and the rider's claims renewed in one statement. */
  const renewWith = (
    tokens: ReadonlyArray<string>,
    rider: { readonly ctes: ReadonlyArray<string>; readonly cols: ReadonlyArray<string>; readonly params: ReadonlyArray<unknown> }
  ): Effect.Effect<void> =>
    Effect.suspend(() => {
      const sent = clock.unsafeCurrentTimeMillis()
      return sql.unsafe<Record<string, unknown>>(
        PREPARED + `WITH ${RENEW_CTES}, ${rider.ctes.join(", ")}
        SELECT (SELECT COALESCE(json_object_agg(token, n), '{}'::json)
          FROM (SELECT token, count(*) AS n FROM window_renew GROUP BY token) AS g) AS window_renewed, ${rider.cols.join(", ")}`,
        [ttlMs, tokens, ...rider.params]
      ).pipe(
        Effect.flatMap((rows) => {
          const raw = rows[0]?.window_renewed ?? {}
          const counts = (typeof raw === "string" ? JSON.parse(raw) : raw) as Record<string, number>
          renewedAs(tokens, new Map(Object.entries(counts).map(([t, n]) => [t, Number(n)])), sent)
          return options.rider!.settle(rows[0], sent)
        }),
        Effect.catchAll((e) => Effect.logDebug(`claims not renewed (they run to their deadlines): ${e.message}`))
      )
    })
  const release = (token: string) =>
    Effect.suspend(() => {
      held.delete(token)
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
              held.set(token, { deadline: sent + keep, rows: unique.length })
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
      renewAll: Effect.suspend(() => {
        const tokens = Array.from(held.keys())
        const rider = options.rider?.parts(3)
        if (rider !== undefined) return renewWith(tokens, rider)
        if (tokens.length === 0) return Effect.void
        const sent = clock.unsafeCurrentTimeMillis()
        return sql.unsafe<{ token: string; n: number }>(
          PREPARED + `WITH ${RENEW_CTES} SELECT token, count(*)::int AS n FROM window_renew GROUP BY token`,
          [ttlMs, tokens]
        ).pipe(
          Effect.map((rows) => renewedAs(tokens, new Map(rows.map((r) => [r.token, Number(r.n)])), sent)),
          Effect.catchAll((e) => Effect.logDebug(`window claims not renewed (they run to their deadlines): ${e.message}`))
        )
      }),
      live: (token) => {
        const claim = held.get(token)
        return claim !== undefined && clock.unsafeCurrentTimeMillis() < claim.deadline
      },
      deadline: (token) => Option.getOrUndefined(Option.map(Option.fromNullable(held.get(token)), (c) => c.deadline)),
      release,
      forget: (token) => {
        held.delete(token)
      }
    }),
    orElse: () => undefined
  })
}
