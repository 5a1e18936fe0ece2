/**
 * Window claims of the cluster engine (issue 17, step 1 of docs/scale-out.md "Design: windows
 * claimed whole"): a window of pipelines is run by one execution at a time across every runner
 * process, fenced by **local deadlines** instead of a claim, a fence and an input read per task.
 *
 * One row per window in `assay_cluster_window_claims` (created by `assay migrate`, L6): the
 * window's key (`windowKey`), the `token` of the execution that holds it, and `expires_at`, on
 * the database's clock. The claim is a lease:
 *
 * - an execution {@link WindowClaims.claim claims} its window in one statement
 *   (`INSERT … ON CONFLICT DO UPDATE … WHERE`): won when the row is free, is its own, or has
 *   expired; two executions racing for one window never both win;
 * - every claim a process holds is renewed by one statement per heartbeat
 *   ({@link WindowClaims.renewAll}, `token = ANY($1)`);
 * - each claim has a **local deadline** on the process's `Clock`: the local time read *before*
 *   the last statement that won or renewed it, plus the TTL, less a margin (a tenth of the TTL,
 *   at most 2 s). The database's expiry is counted from when that statement ran, so it comes
 *   later: another execution can take the window over only after the holder's deadline has
 *   passed, provided both clocks run at the same rate (they need not agree). Before each call
 *   the holder checks its deadline in memory ({@link WindowClaims.live}); past it, it calls
 *   nothing more (a zombie thawed after a takeover stops before calling);
 * - L3: a renewal that fails (the database unreachable) is not a loss: the claim runs to its
 *   deadline; only an answer that the row is no longer this token's is a loss (the deadline
 *   is then passed at once).
 *
 * A finished execution releases its claim (the next replay of the window finds it free); one
 * cut short leaves it to expire.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { type Clock, Duration, Effect, Option } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"
import { PREPARED } from "../preparedMark.js"

/** The window claim table (one row per window). */
export const TABLE = "assay_cluster_window_claims"

/** Creates the window claim table when missing (idempotent; `assay migrate` runs it). */
export const createTable = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql.unsafe(`CREATE TABLE IF NOT EXISTS ${TABLE} (
    window_key text PRIMARY KEY,
    token text,
    expires_at timestamptz
  )`))

/**
 * Fails with a {@link StoreUnavailable} naming `assay migrate` when the client is PostgreSQL and
 * the window claim table is missing; succeeds at once on another dialect.
 */
export const requireTable = (sql: SqlClient.SqlClient): Effect.Effect<void, StoreUnavailable> =>
  sql.onDialectOrElse({
    pg: () =>
      sql<{ present: boolean }>`SELECT to_regclass(${TABLE}) IS NOT NULL AS present`.pipe(
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot check the window claim table: ${e.message}`, cause: e })),
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

/** What {@link WindowClaims.claim} found: `won`, and `tookOver` (the row named another token before). */
export interface WindowClaimResult {
  readonly won: boolean
  /**
   * The claim was won from another execution's token (its claim had expired): that execution
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
  /** Claims window `key` for execution `token` (one statement); on a win its local deadline is set. */
  readonly claim: (key: string, token: string) => Effect.Effect<WindowClaimResult, StoreUnavailable>
  /**
   * Renews every claim this process holds, in one statement: each one renewed gets a new
   * deadline; one the database no longer gives to its token is lost (deadline passed). An
   * error changes nothing (L3: the claims run to their deadlines) and is not raised.
   */
  readonly renewAll: Effect.Effect<void>
  /** Whether `token`'s claim is within its local deadline now (in memory, no statement). */
  readonly live: (token: string) => boolean
  /** The local deadline of `token`'s claim (epoch ms on the process's clock), if it holds one. */
  readonly deadline: (token: string) => number | undefined
  /** Gives a claim up (the database row freed when still this token's) and stops renewing it. */
  readonly release: (key: string, token: string) => Effect.Effect<void, StoreUnavailable>
  /** Stops renewing `token`'s claim without a statement (the row expires on its own). */
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
  /** The local deadline of every claim this process holds, by token. */
  const deadlines = new Map<string, number>()
  /** The window claims' new deadlines from a renewal's answer (`renewed`: the tokens the database renewed). */
  const renewedAs = (tokens: ReadonlyArray<string>, renewed: ReadonlySet<string>, sent: number) => {
    for (const token of tokens) {
      // a claim released meanwhile is not brought back
      if (!deadlines.has(token)) continue
      // only the database's answer that the row is another's is a loss (L3)
      deadlines.set(token, renewed.has(token) ? sent + keep : 0)
    }
  }
  /** The window claims and the rider's claims renewed in one statement. */
  const renewWith = (
    tokens: ReadonlyArray<string>,
    rider: { readonly ctes: ReadonlyArray<string>; readonly cols: ReadonlyArray<string>; readonly params: ReadonlyArray<unknown> }
  ): Effect.Effect<void> =>
    Effect.suspend(() => {
      const sent = clock.unsafeCurrentTimeMillis()
      return sql.unsafe<Record<string, unknown>>(
        PREPARED + `WITH window_renew AS (
          UPDATE ${TABLE} SET expires_at = now() + $1::int * interval '1 millisecond' WHERE token = ANY($2::text[]) RETURNING token
        ), ${rider.ctes.join(", ")}
        SELECT (SELECT COALESCE(json_agg(token), '[]'::json) FROM window_renew) AS window_renewed, ${rider.cols.join(", ")}`,
        [ttlMs, tokens, ...rider.params]
      ).pipe(
        Effect.flatMap((rows) => {
          const raw = rows[0]?.window_renewed ?? []
          const list = (typeof raw === "string" ? JSON.parse(raw) : raw) as ReadonlyArray<string>
          renewedAs(tokens, new Set(list), sent)
          return options.rider!.settle(rows[0], sent)
        }),
        Effect.catchAll((e) => Effect.logDebug(`claims not renewed (they run to their deadlines): ${e.message}`))
      )
    })
  return sql.onDialectOrElse({
    pg: (): WindowClaims | undefined => ({
      ttl,
      heartbeat,
      claim: (key, token) =>
        Effect.suspend(() => {
          // read before the statement is sent: the database's expiry is counted from later
          const sent = clock.unsafeCurrentTimeMillis()
          // `prev` is read (and its row locked) before the upsert writes it: the token it held
          return Effect.map(
            sql<{ won: boolean; prev: string | null }>`${sql.literal(PREPARED)}WITH prev AS (
                SELECT token FROM ${sql(TABLE)} WHERE window_key = ${key} FOR UPDATE
              ), up AS (
                INSERT INTO ${sql(TABLE)} AS t (window_key, token, expires_at)
                VALUES (${key}, ${token}, now() + ${ttlMs} * interval '1 millisecond')
                ON CONFLICT (window_key) DO UPDATE SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
                WHERE t.token IS NULL OR t.token = EXCLUDED.token OR t.expires_at IS NULL OR t.expires_at < now()
                RETURNING 1
              )
              SELECT EXISTS (SELECT 1 FROM up) AS won, prev.token AS prev FROM (SELECT 1) AS one LEFT JOIN prev ON true`,
            (rows): WindowClaimResult => {
              const won = rows[0]?.won === true
              const prev = rows[0]?.prev ?? null
              if (won) deadlines.set(token, sent + keep)
              return { won, tookOver: won && prev !== null && prev !== token }
            }
          ).pipe(Effect.mapError(unavailable("write")))
        }),
      renewAll: Effect.suspend(() => {
        const tokens = Array.from(deadlines.keys())
        const rider = options.rider?.parts(3)
        if (rider !== undefined) return renewWith(tokens, rider)
        if (tokens.length === 0) return Effect.void
        const sent = clock.unsafeCurrentTimeMillis()
        return sql.unsafe<{ token: string }>(
          PREPARED + `UPDATE ${TABLE} SET expires_at = now() + $1::int * interval '1 millisecond' WHERE token = ANY($2::text[]) RETURNING token`,
          [ttlMs, tokens]
        ).pipe(
          Effect.map((rows) => {
            const renewed = new Set(rows.map((r) => r.token))
            for (const token of tokens) {
              // a claim released meanwhile is not brought back
              if (!deadlines.has(token)) continue
              // only the database's answer that the row is another's is a loss (L3)
              deadlines.set(token, renewed.has(token) ? sent + keep : 0)
            }
          }),
          Effect.catchAll((e) => Effect.logDebug(`window claims not renewed (they run to their deadlines): ${e.message}`))
        )
      }),
      live: (token) => {
        const d = deadlines.get(token)
        return d !== undefined && clock.unsafeCurrentTimeMillis() < d
      },
      deadline: (token) => Option.getOrUndefined(Option.fromNullable(deadlines.get(token))),
      release: (key, token) =>
        Effect.suspend(() => {
          deadlines.delete(token)
          return Effect.asVoid(
            sql`${sql.literal(PREPARED)}UPDATE ${sql(TABLE)} SET token = NULL, expires_at = NULL WHERE window_key = ${key} AND token = ${token}`
          ).pipe(Effect.mapError(unavailable("release")))
        }),
      forget: (token) => {
        deadlines.delete(token)
      }
    }),
    orElse: () => undefined
  })
}
