/**
 * The Postgres side of global pools: the schema (run by `@effect/sql`'s `Migrator`, table
 * `assay_pool_migrations`) and every statement the global pools issue. Times are taken from
 * the server's `now()` only; durations cross the wire in milliseconds, never as instants, so
 * runners need clocks that run at the same rate, not synchronised ones.
 *
 * Tables:
 * - `assay_pool_resource`: one row per (pool, resource): the global `capacity` (slots above it
 *   are never claimed), `state` (`ready` / `dead`), `cooldown_until`, `throttled_until`.
 * - `assay_pool_slot`: one row per unit of capacity; a slot is held while `holder` is set and
 *   `expires_at` is in the future (a lease with a TTL, claimed with `FOR UPDATE SKIP LOCKED`).
 * - `assay_pool_quota`: one row per (pool, resource, metric, window start): what was charged in
 *   that window (`date_bin` windows from 2000-01-01 UTC).
 * - `assay_pool_demand` (migration 2): one row per (pool, resource, runner) with block leases:
 *   the runner's demand for the resource (leases in use + local waiters) as its last renewal
 *   wrote it, counted while `expires_at` (the renewal's time plus the lease TTL) is in the
 *   future, so a dead runner's demand stops counting after one TTL. A row of demand 0 is a
 *   runner registered as live for the resource ({@link registerDemand}): counted by the first
 *   block guesses and the equal share a holder checks between renewals ({@link othersDemands}),
 *   not by the proportional shares.
 *
 * @internal
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { PREPARED } from "../../preparedMark.js"

/** The migrations bookkeeping table of the pool schema (separate from the store's). */
export const migrationsTable = "assay_pool_migrations"

const v1 = [
  `CREATE TABLE IF NOT EXISTS assay_pool_resource (
    pool text NOT NULL,
    resource text NOT NULL,
    capacity integer NOT NULL CHECK (capacity >= 0),
    state text NOT NULL DEFAULT 'ready',
    cooldown_until timestamptz,
    throttled_until timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool, resource)
  )`,
  `CREATE TABLE IF NOT EXISTS assay_pool_slot (
    pool text NOT NULL,
    resource text NOT NULL,
    slot integer NOT NULL,
    holder text,
    lease_id uuid,
    acquired_at timestamptz,
    expires_at timestamptz,
    PRIMARY KEY (pool, resource, slot)
  )`,
  `CREATE TABLE IF NOT EXISTS assay_pool_quota (
    pool text NOT NULL,
    resource text NOT NULL,
    metric text NOT NULL,
    window_start timestamptz NOT NULL,
    used double precision NOT NULL,
    PRIMARY KEY (pool, resource, metric, window_start)
  )`
]

/**
 * Creates or upgrades the pool tables (idempotent; run once before runners start, lesson L6).
 * Returns the migrations applied now.
 */
export const migrate: Effect.Effect<
  ReadonlyArray<readonly [id: number, name: string]>,
  Migrator.MigrationError | SqlError,
  SqlClient.SqlClient
> = Migrator.make({})({
  table: migrationsTable,
  loader: Migrator.fromRecord({
    "1_pools": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      for (const s of v1) yield* sql.unsafe(s)
    }),
    "2_demand": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      for (const s of v2) yield* sql.unsafe(s)
    })
  })
})

/** Migration 2 (issue 17 step 3, demand-proportional blocks): each runner's demand per resource. */
const v2 = [
  `CREATE TABLE IF NOT EXISTS assay_pool_demand (
    pool text NOT NULL,
    resource text NOT NULL,
    runner text NOT NULL,
    demand integer NOT NULL CHECK (demand >= 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (pool, resource, runner)
  )`
]

const secs = (ms: number) => ms / 1000

/**
 * Declares a resource: its row (capacity set to the declared one) and slot rows 1..capacity
 * (slots above a lowered capacity stay, unclaimable).
 */
export const declare = (sql: SqlClient.SqlClient, pool: string, resource: string, capacity: number) =>
  sql.withTransaction(Effect.zipRight(
    sql`INSERT INTO assay_pool_resource (pool, resource, capacity) VALUES (${pool}, ${resource}, ${capacity})
        ON CONFLICT (pool, resource) DO UPDATE SET capacity = EXCLUDED.capacity, updated_at = now()`,
    sql`INSERT INTO assay_pool_slot (pool, resource, slot)
        SELECT ${pool}, ${resource}, g FROM generate_series(1, ${capacity}::int) g
        ON CONFLICT DO NOTHING`
  ))

/** One resource as every runner sees it now. */
export interface GlobalRow {
  readonly pool: string
  readonly resource: string
  readonly capacity: number
  readonly state: string
  /** Milliseconds until the throttle ends (0 when none). */
  readonly throttleMs: number
  /** Milliseconds until the cooldown ends (0 when none). */
  readonly cooldownMs: number
  /** Live leases (held and not expired). */
  readonly inUse: number
}

/** The global view of the given pools' resources. */
export const view = (sql: SqlClient.SqlClient, pools: ReadonlyArray<string>) =>
  Effect.map(
    sql<{
      pool: string
      resource: string
      capacity: number
      state: string
      throttle_ms: number | string
      cooldown_ms: number | string
      in_use: number | string
    }>`SELECT r.pool, r.resource, r.capacity, r.state,
        COALESCE(GREATEST(0, extract(epoch FROM (r.throttled_until - now())) * 1000), 0)::float8 AS throttle_ms,
        COALESCE(GREATEST(0, extract(epoch FROM (r.cooldown_until - now())) * 1000), 0)::float8 AS cooldown_ms,
        (SELECT count(*) FROM assay_pool_slot s
          WHERE s.pool = r.pool AND s.resource = r.resource AND s.holder IS NOT NULL AND s.expires_at > now())::int AS in_use
      FROM assay_pool_resource r WHERE r.pool IN ${sql.in(pools)}`,
    (rows): ReadonlyArray<GlobalRow> =>
      rows.map((r) => ({
        pool: r.pool,
        resource: r.resource,
        capacity: Number(r.capacity),
        state: r.state,
        throttleMs: Number(r.throttle_ms),
        cooldownMs: Number(r.cooldown_ms),
        inUse: Number(r.in_use)
      }))
  )

/** A claimed slot. */
export interface Claimed {
  readonly slot: number
  readonly leaseId: string
}

/**
 * The slot claim's `UPDATE` (parameters `$1` pool, `$2` resource, `$3` holder, `$4` TTL in
 * seconds, `$5` lease ids): the first slot of ($1, $2) at or below the resource's capacity, of
 * a resource neither dead, cooling down nor throttled, that is free (never held, or its lease
 * expired) or held by one of the leases `$5` (the claimant's own releases not written yet,
 * handed over: one of those first), given to `$3` for `$4` seconds with a new lease id, only
 * when `when` holds too. Returns the slot and its new lease id.
 */
const slotClaim = (when: string | undefined) =>
  `UPDATE assay_pool_slot s
    SET holder = $3, lease_id = gen_random_uuid(), acquired_at = now(),
        expires_at = now() + make_interval(secs => $4::float8)
    WHERE (s.pool, s.resource, s.slot) = (
      SELECT sl.pool, sl.resource, sl.slot FROM assay_pool_slot sl
        JOIN assay_pool_resource r ON r.pool = sl.pool AND r.resource = sl.resource
      WHERE sl.pool = $1 AND sl.resource = $2 AND sl.slot <= r.capacity
        AND r.state <> 'dead'
        AND (r.cooldown_until IS NULL OR r.cooldown_until <= now())
        AND (r.throttled_until IS NULL OR r.throttled_until <= now())
        AND (sl.holder IS NULL OR sl.expires_at <= now() OR sl.lease_id = ANY($5::uuid[]))
      ORDER BY (sl.lease_id = ANY($5::uuid[])) IS TRUE DESC, sl.slot LIMIT 1
      FOR UPDATE OF sl SKIP LOCKED)${when === undefined ? "" : `
      AND ${when}`}
    RETURNING s.slot, s.lease_id::text AS lease_id`

/**
 * Claims one slot of a resource for `holder` for `ttlMs`: a slot at or below the resource's
 * capacity, of a resource neither dead, cooling down nor throttled, and free (never held, or
 * its lease expired) or held by one of the leases `handOver` (releases of this holder not
 * written yet: the slot passes to the new lease in the same statement, preferred to a free
 * one). `undefined` when there is none.
 */
export const claim = (
  sql: SqlClient.SqlClient,
  pool: string,
  resource: string,
  holder: string,
  ttlMs: number,
  handOver: ReadonlyArray<string> = []
) =>
  Effect.map(
    sql.unsafe<{ slot: number; lease_id: string }>(slotClaim(undefined), [pool, resource, holder, secs(ttlMs), handOver]),
    (rows): Claimed | undefined => rows[0] === undefined ? undefined : { slot: Number(rows[0].slot), leaseId: rows[0].lease_id }
  )

/**
 * Other statements joined to a slot claim ({@link claimWith}): CTEs and result columns of
 * their own, their parameters (numbered from `$6`), and a condition over their CTEs under
 * which the slot is claimed (the cluster engine's fence, `cluster/inflight.ts`).
 */
export interface ClaimExtra {
  readonly ctes: ReadonlyArray<string>
  readonly cols: ReadonlyArray<string>
  readonly params: ReadonlyArray<unknown>
  readonly when: string
}

/** The first parameter number of a {@link ClaimExtra} (after the slot claim's own five). */
export const extraFirstParam = 6

/**
 * {@link claim} and `extra` in one statement: the slot is claimed only when `extra.when`
 * holds. Answers the slot claimed (`undefined`: none free, or `when` did not hold) and the
 * statement's row (`extra`'s columns).
 */
export const claimWith = (
  sql: SqlClient.SqlClient,
  pool: string,
  resource: string,
  holder: string,
  ttlMs: number,
  handOver: ReadonlyArray<string>,
  extra: ClaimExtra
) =>
  Effect.map(
    sql.unsafe<Record<string, unknown>>(
      `WITH ${extra.ctes.join(", ")}, slot_claim AS (${slotClaim(extra.when)})
      SELECT (SELECT slot FROM slot_claim) AS claimed_slot, (SELECT lease_id FROM slot_claim) AS claimed_lease_id, ${extra.cols.join(", ")}`,
      [pool, resource, holder, secs(ttlMs), handOver, ...extra.params]
    ),
    (rows): { readonly claimed: Claimed | undefined; readonly row: Record<string, unknown> | undefined } => {
      const row = rows[0]
      return {
        claimed: row === undefined || row.claimed_slot === null || row.claimed_slot === undefined
          ? undefined
          : { slot: Number(row.claimed_slot), leaseId: String(row.claimed_lease_id) },
        row
      }
    }
  )

/** Extends a live lease by `ttlMs` from the server's now; `false` when it is no longer ours. */
export const renew = (sql: SqlClient.SqlClient, pool: string, resource: string, c: Claimed, ttlMs: number) =>
  Effect.map(
    sql`UPDATE assay_pool_slot SET expires_at = now() + make_interval(secs => ${secs(ttlMs)}::float8)
        WHERE pool = ${pool} AND resource = ${resource} AND slot = ${c.slot}
          AND lease_id = ${c.leaseId}::uuid AND expires_at > now()
        RETURNING slot`,
    (rows) => rows.length > 0
  )

/** A slot to give back: its resource and the lease that holds it. */
export interface Release extends Claimed {
  readonly pool: string
  readonly resource: string
}

/**
 * Gives slots back in one statement, each only while its own lease holds it (a slot whose
 * lease expired and was claimed by another holder is left alone). Returns how many were
 * given back.
 */
export const releaseAll = (sql: SqlClient.SqlClient, releases: ReadonlyArray<Release>) =>
  Effect.map(
    sql<{ slot: number }>`UPDATE assay_pool_slot s SET holder = NULL, lease_id = NULL, expires_at = NULL, acquired_at = NULL
      FROM unnest(${releases.map((r) => r.pool)}::text[], ${releases.map((r) => r.resource)}::text[],
        ${releases.map((r) => r.slot)}::int[], ${releases.map((r) => r.leaseId)}::uuid[]) AS r(pool, resource, slot, lease_id)
      WHERE s.pool = r.pool AND s.resource = r.resource AND s.slot = r.slot AND s.lease_id = r.lease_id
      RETURNING s.slot`,
    (rows) => rows.length
  )

/**
 * Sets a resource's global capacity and adds the slot rows it needs (lowering keeps the rows);
 * `false`, with nothing written, when the resource has no row.
 */
export const resize = (sql: SqlClient.SqlClient, pool: string, resource: string, capacity: number) =>
  sql.withTransaction(Effect.flatMap(
    sql`UPDATE assay_pool_resource SET capacity = ${capacity}, updated_at = now() WHERE pool = ${pool} AND resource = ${resource}
        RETURNING resource`,
    (rows) =>
      rows.length === 0 ? Effect.succeed(false) : Effect.as(
        sql`INSERT INTO assay_pool_slot (pool, resource, slot)
            SELECT ${pool}, ${resource}, g FROM generate_series(1, ${capacity}::int) g
            ON CONFLICT DO NOTHING`,
        true
      )
  ))

/** Extends a resource's throttle to at least `ms` from now. */
export const throttle = (sql: SqlClient.SqlClient, pool: string, resource: string, ms: number) =>
  sql`UPDATE assay_pool_resource SET updated_at = now(),
        throttled_until = GREATEST(COALESCE(throttled_until, now()), now() + make_interval(secs => ${secs(ms)}::float8))
      WHERE pool = ${pool} AND resource = ${resource}`

/** Starts (or extends) a cooldown of `ms` from now. */
export const cooldown = (sql: SqlClient.SqlClient, pool: string, resource: string, ms: number) =>
  sql`UPDATE assay_pool_resource SET updated_at = now(),
        cooldown_until = GREATEST(COALESCE(cooldown_until, now()), now() + make_interval(secs => ${secs(ms)}::float8))
      WHERE pool = ${pool} AND resource = ${resource}`

/** Sets the health state (`ready` clears the cooldown too). */
export const setState = (sql: SqlClient.SqlClient, pool: string, resource: string, state: "ready" | "dead") =>
  state === "ready"
    ? sql`UPDATE assay_pool_resource SET state = 'ready', cooldown_until = NULL, updated_at = now()
          WHERE pool = ${pool} AND resource = ${resource} AND (state <> 'ready' OR cooldown_until IS NOT NULL)`
    : sql`UPDATE assay_pool_resource SET state = 'dead', updated_at = now() WHERE pool = ${pool} AND resource = ${resource}`

/** A charge accepted into a window. */
export interface Charged {
  /** The window's start, as the server's timestamp text (the correction goes to the same window). */
  readonly windowStart: string
  readonly used: number
  /** Milliseconds of the window left when the server accepted the charge (its clock). */
  readonly leftMs: number
}

const chargedOf = (rows: ReadonlyArray<{ window_start: string; used: number; left_ms: number | string }>): Charged | undefined =>
  rows[0] === undefined
    ? undefined
    : { windowStart: rows[0].window_start, used: Number(rows[0].used), leftMs: Math.max(0, Number(rows[0].left_ms)) }

/**
 * Charges `cost` to the current `windowMs` window of (pool, resource, metric) only if the
 * window's total stays within `limit` and at least `guardMs` of the window is left (so that
 * the call lands at the provider inside the window it was charged to); `undefined` when
 * refused.
 */
export const charge = (
  sql: SqlClient.SqlClient,
  key: { readonly pool: string; readonly resource: string; readonly metric: string },
  cost: number,
  limit: number,
  windowMs: number,
  guardMs = 0
) =>
  Effect.map(
    sql<{ window_start: string; used: number; left_ms: number | string }>`INSERT INTO assay_pool_quota AS q (pool, resource, metric, window_start, used)
      SELECT ${key.pool}, ${key.resource}, ${key.metric}, w.start, ${cost}::float8
      FROM (SELECT date_bin(make_interval(secs => ${secs(windowMs)}::float8), now(), timestamptz '2000-01-01 00:00:00+00') AS start) w
      WHERE ${cost}::float8 <= ${limit}::float8
        AND w.start + make_interval(secs => ${secs(windowMs)}::float8) - now() >= make_interval(secs => ${secs(guardMs)}::float8)
      ON CONFLICT (pool, resource, metric, window_start)
      DO UPDATE SET used = q.used + EXCLUDED.used WHERE q.used + EXCLUDED.used <= ${limit}::float8
      RETURNING q.window_start::text AS window_start, q.used,
        (extract(epoch FROM (q.window_start + make_interval(secs => ${secs(windowMs)}::float8) - now())) * 1000)::float8 AS left_ms`,
    chargedOf
  )

/**
 * Moves a charge of `cost` from the window that started at `from` (ended by now) to the
 * current window, in one statement: the current window is charged on the same conditions as
 * {@link charge} (within `limit`, at least `guardMs` left) and only when it is not `from`
 * itself; `from` is given its `cost` back only when that charge was accepted. `undefined`
 * when refused (the current window is full, in its last `guardMs`, or still `from`): nothing
 * changed.
 */
export const move = (
  sql: SqlClient.SqlClient,
  key: { readonly pool: string; readonly resource: string; readonly metric: string },
  from: string,
  cost: number,
  limit: number,
  windowMs: number,
  guardMs: number
) =>
  Effect.map(
    sql<{ window_start: string; used: number; left_ms: number | string }>`WITH ins AS (
      INSERT INTO assay_pool_quota AS q (pool, resource, metric, window_start, used)
      SELECT ${key.pool}, ${key.resource}, ${key.metric}, w.start, ${cost}::float8
      FROM (SELECT date_bin(make_interval(secs => ${secs(windowMs)}::float8), now(), timestamptz '2000-01-01 00:00:00+00') AS start) w
      WHERE ${cost}::float8 <= ${limit}::float8
        AND w.start <> ${from}::timestamptz
        AND w.start + make_interval(secs => ${secs(windowMs)}::float8) - now() >= make_interval(secs => ${secs(guardMs)}::float8)
      ON CONFLICT (pool, resource, metric, window_start)
      DO UPDATE SET used = q.used + EXCLUDED.used WHERE q.used + EXCLUDED.used <= ${limit}::float8
      RETURNING q.window_start, q.used
    ), back AS (
      UPDATE assay_pool_quota SET used = used - ${cost}::float8
      WHERE pool = ${key.pool} AND resource = ${key.resource} AND metric = ${key.metric}
        AND window_start = ${from}::timestamptz AND EXISTS (SELECT 1 FROM ins)
    )
    SELECT window_start::text AS window_start, used,
      (extract(epoch FROM (window_start + make_interval(secs => ${secs(windowMs)}::float8) - now())) * 1000)::float8 AS left_ms
    FROM ins`,
    chargedOf
  )

/** Adds `delta` (may be negative) to a window already charged, unconditionally. */
export const correct = (
  sql: SqlClient.SqlClient,
  key: { readonly pool: string; readonly resource: string; readonly metric: string },
  windowStart: string,
  delta: number
) =>
  sql`UPDATE assay_pool_quota SET used = used + ${delta}::float8
      WHERE pool = ${key.pool} AND resource = ${key.resource} AND metric = ${key.metric}
        AND window_start = ${windowStart}::timestamptz`

/** Milliseconds until the current `windowMs` window ends, by the server's clock. */
export const windowLeftMs = (sql: SqlClient.SqlClient, windowMs: number) =>
  Effect.map(
    sql<{ ms: number | string }>`SELECT (extract(epoch FROM (date_bin(make_interval(secs => ${secs(windowMs)}::float8), now(),
        timestamptz '2000-01-01 00:00:00+00') + make_interval(secs => ${secs(windowMs)}::float8) - now())) * 1000)::float8 AS ms`,
    (rows) => Math.max(0, Number(rows[0]?.ms ?? 0))
  )

/**
 * What {@link claimBlock} answers: the resource's global capacity (`undefined`: no row, or
 * dead), the block size the claim aimed at, the slots claimed, and how many other runners
 * have a live demand row of the resource (0 included: registered runners).
 */
export interface BlockClaim {
  readonly capacity: number | undefined
  readonly size: number
  readonly claimed: ReadonlyArray<Claimed>
  readonly liveOthers: number
}

/**
 * Claims a block of slots of a resource for `holder`, in one statement (block leases, issue 17
 * steps 2 and 3): up to `size − held` free slots (never held, or expired) at or below the
 * resource's global capacity, of a resource not dead, each with a new lease id and a TTL of
 * `ttlMs`; `FOR UPDATE SKIP LOCKED`, so concurrent claims never take the same row. `size` is
 * `target` when given (the demand-proportional share of the last renewal, capped by the
 * capacity); otherwise the first guess: `⌊capacity ÷ runners⌋` with `runners` given, else
 * `⌊capacity ÷ (1 + the other live runners of the resource)⌋`, a live runner being one with a
 * demand row not expired, whatever its demand (a runner with block leases writes a row of
 * demand 0 for every resource of its pools when it starts, {@link registerDemand}, and renews
 * it with its blocks: so the first runner to claim does not take the whole capacity while
 * the others, started but not yet asking, would find nothing until its next renewal). With `demand`,
 * the same statement writes it as `holder`'s demand for the resource (counted for `ttlMs`), so
 * that the other runners see a runner that needs the resource at their next renewal, not one
 * renewal of its own later. Answers the capacity it read, the size it used and the number of
 * other live runners it counted.
 */
export const claimBlock = (
  sql: SqlClient.SqlClient,
  pool: string,
  resource: string,
  holder: string,
  ttlMs: number,
  runners: number | undefined,
  held: number,
  target?: number | undefined,
  demand?: number | undefined
) =>
  Effect.map(
    sql.unsafe<{ capacity: number | null; size: number | null; live_others: number | null; claimed: ReadonlyArray<{ slot: number; lease_id: string }> | string | null }>(
      PREPARED + `WITH r AS (
        SELECT capacity FROM assay_pool_resource WHERE pool = $1 AND resource = $2 AND state <> 'dead'
      ), live AS (
        SELECT count(*)::int AS n FROM assay_pool_demand d
        WHERE d.pool = $1 AND d.resource = $2 AND d.runner <> $3 AND d.expires_at > now()
      ), sz AS (
        SELECT CASE
          WHEN $7::int >= 0 THEN LEAST($7::int, COALESCE((SELECT capacity FROM r), 0))
          WHEN $5::int > 0 THEN COALESCE((SELECT capacity FROM r), 0) / $5::int
          ELSE COALESCE((SELECT capacity FROM r), 0) / (1 + (SELECT n FROM live))::int
        END AS size
      ), demand AS (
        INSERT INTO assay_pool_demand (pool, resource, runner, demand, expires_at)
        SELECT $1, $2, $3, $8::int, now() + make_interval(secs => $4::float8) WHERE $8::int >= 0
        ON CONFLICT (pool, resource, runner) DO UPDATE SET demand = EXCLUDED.demand, expires_at = EXCLUDED.expires_at
        RETURNING 1
      ), pick AS (
        SELECT sl.pool, sl.resource, sl.slot FROM assay_pool_slot sl
        WHERE sl.pool = $1 AND sl.resource = $2 AND sl.slot <= COALESCE((SELECT capacity FROM r), 0)
          AND (sl.holder IS NULL OR sl.expires_at <= now())
        ORDER BY sl.slot
        LIMIT GREATEST(0, (SELECT size FROM sz) - $6::int)
        FOR UPDATE OF sl SKIP LOCKED
      ), up AS (
        UPDATE assay_pool_slot s SET holder = $3, lease_id = gen_random_uuid(), acquired_at = now(),
          expires_at = now() + make_interval(secs => $4::float8)
        FROM pick WHERE s.pool = pick.pool AND s.resource = pick.resource AND s.slot = pick.slot
        RETURNING s.slot, s.lease_id::text AS lease_id
      )
      SELECT (SELECT capacity FROM r) AS capacity, (SELECT size FROM sz) AS size, (SELECT n FROM live) AS live_others,
        (SELECT COALESCE(json_agg(json_build_object('slot', slot, 'lease_id', lease_id) ORDER BY slot), '[]'::json) FROM up) AS claimed`,
      [
        pool,
        resource,
        holder,
        secs(ttlMs),
        runners === undefined ? 0 : Math.max(1, Math.floor(runners)),
        Math.max(0, Math.floor(held)),
        target === undefined ? -1 : Math.max(0, Math.floor(target)),
        demand === undefined ? -1 : Math.max(0, Math.floor(demand))
      ]
    ),
    (rows): BlockClaim => {
      const row = rows[0]
      const raw = row?.claimed ?? []
      const list = (typeof raw === "string" ? JSON.parse(raw) : raw) as ReadonlyArray<{ slot: number; lease_id: string }>
      return {
        capacity: row === undefined || row.capacity === null ? undefined : Number(row.capacity),
        size: Number(row?.size ?? 0),
        claimed: list.map((c) => ({ slot: Number(c.slot), leaseId: String(c.lease_id) })),
        liveOthers: Number(row?.live_others ?? 0)
      }
    }
  )

/** A runner's demand for one resource, as written to (and read from) `assay_pool_demand`. */
export interface Demand {
  readonly pool: string
  readonly resource: string
  readonly demand: number
}

/**
 * The block leases' part of a runner's renewal statement (joined to its window claims' renewal,
 * `cluster/windowClaims.ts`): CTEs `block_renew` (every slot in `slots` extended by `ttlMs`
 * from the server's now, only while its own lease holds it and it has not expired),
 * `block_rows` (the state of every resource of `pools`), `block_demand` (writes this runner's
 * `demands`, each counted until now + `ttlMs`) and `block_demands` (the other runners' live
 * demand rows for the resources of `pools`, those of 0 included: a registered runner counts as
 * live for the equal share, not for the proportional one; the statement's snapshot, so this
 * runner's own write is not among them), and the three JSON columns the statement selects from them
 * (`block_renewed`, `block_resources`, `block_demands`). Parameters from `first`.
 */
export const blockRenewalParts = (
  first: number,
  slots: ReadonlyArray<Release>,
  pools: ReadonlyArray<string>,
  ttlMs: number,
  runner: string,
  demands: ReadonlyArray<Demand>
): { readonly ctes: ReadonlyArray<string>; readonly cols: ReadonlyArray<string>; readonly params: ReadonlyArray<unknown> } => {
  const p = (k: number) => `$${first + k}`
  return {
    ctes: [
      `block_renew AS (
        UPDATE assay_pool_slot s SET expires_at = now() + make_interval(secs => ${p(0)}::float8)
        FROM unnest(${p(1)}::text[], ${p(2)}::text[], ${p(3)}::int[], ${p(4)}::uuid[]) AS b(pool, resource, slot, lease_id)
        WHERE s.pool = b.pool AND s.resource = b.resource AND s.slot = b.slot AND s.lease_id = b.lease_id AND s.expires_at > now()
        RETURNING s.pool, s.resource, s.slot
      )`,
      `block_rows AS (
        SELECT r.pool, r.resource, r.capacity, r.state,
          COALESCE(GREATEST(0, extract(epoch FROM (r.throttled_until - now())) * 1000), 0)::float8 AS throttle_ms,
          COALESCE(GREATEST(0, extract(epoch FROM (r.cooldown_until - now())) * 1000), 0)::float8 AS cooldown_ms
        FROM assay_pool_resource r WHERE r.pool = ANY(${p(5)}::text[])
      )`,
      `block_demand AS (
        INSERT INTO assay_pool_demand (pool, resource, runner, demand, expires_at)
        SELECT d.pool, d.resource, ${p(6)}::text, d.demand, now() + make_interval(secs => ${p(0)}::float8)
        FROM unnest(${p(7)}::text[], ${p(8)}::text[], ${p(9)}::int[]) AS d(pool, resource, demand)
        ON CONFLICT (pool, resource, runner) DO UPDATE SET demand = EXCLUDED.demand, expires_at = EXCLUDED.expires_at
        RETURNING 1
      )`,
      `block_demands AS (
        SELECT d.pool, d.resource, d.runner, d.demand FROM assay_pool_demand d
        WHERE d.pool = ANY(${p(5)}::text[]) AND d.runner <> ${p(6)}::text AND d.expires_at > now()
      )`
    ],
    cols: [
      `(SELECT COALESCE(json_agg(json_build_object('pool', pool, 'resource', resource, 'slot', slot)), '[]'::json) FROM block_renew) AS block_renewed`,
      `(SELECT COALESCE(json_agg(json_build_object('pool', pool, 'resource', resource, 'capacity', capacity, 'state', state,
          'throttle_ms', throttle_ms, 'cooldown_ms', cooldown_ms)), '[]'::json) FROM block_rows) AS block_resources`,
      `(SELECT COALESCE(json_agg(json_build_object('pool', pool, 'resource', resource, 'runner', runner, 'demand', demand)), '[]'::json)
          FROM block_demands) AS block_demands`
    ],
    params: [
      secs(ttlMs),
      slots.map((s) => s.pool),
      slots.map((s) => s.resource),
      slots.map((s) => s.slot),
      slots.map((s) => s.leaseId),
      pools,
      runner,
      demands.map((d) => d.pool),
      demands.map((d) => d.resource),
      demands.map((d) => Math.max(0, Math.floor(d.demand)))
    ]
  }
}

/** What the block part of a renewal answered: the slots renewed, the resources' state, the other runners' demands. */
export interface BlockRenewal {
  readonly renewed: ReadonlyArray<{ readonly pool: string; readonly resource: string; readonly slot: number }>
  /** Each blocked resource's global state (as {@link GlobalRow}, without the lease count). */
  readonly resources: ReadonlyArray<Pick<GlobalRow, "pool" | "resource" | "capacity" | "state" | "throttleMs" | "cooldownMs">>
  /** The other runners' live demands, 0 included (registered runners; `runner`: their runner id). */
  readonly demands: ReadonlyArray<Demand & { readonly runner: string }>
}

const jsonList = (u: unknown): ReadonlyArray<Record<string, unknown>> =>
  (typeof u === "string" ? JSON.parse(u) : u ?? []) as ReadonlyArray<Record<string, unknown>>

/** Reads the columns of {@link blockRenewalParts} from the renewal statement's row. */
export const blockRenewalOf = (row: Record<string, unknown> | undefined): BlockRenewal => ({
  renewed: jsonList(row?.block_renewed).map((r) => ({ pool: String(r.pool), resource: String(r.resource), slot: Number(r.slot) })),
  resources: jsonList(row?.block_resources).map((r) => ({
    pool: String(r.pool),
    resource: String(r.resource),
    capacity: Number(r.capacity),
    state: String(r.state),
    throttleMs: Number(r.throttle_ms),
    cooldownMs: Number(r.cooldown_ms)
  })),
  demands: jsonList(row?.block_demands).map((r) => ({
    pool: String(r.pool),
    resource: String(r.resource),
    runner: String(r.runner),
    demand: Number(r.demand)
  }))
})

/**
 * Registers a runner with block leases as live for the given resources (`keys`: pool and
 * resource), before it has any demand: a row of demand 0 for each, counted for `ttlMs`, not
 * overwriting a demand already written (its expiry is extended). The first guess of the
 * others' block claims ({@link claimBlock}) counts it; the demand-proportional shares do not
 * (a demand of 0 has no share). The renewal keeps the rows live (it writes the demand of every
 * block, the empty ones too).
 */
export const registerDemand = (
  sql: SqlClient.SqlClient,
  runner: string,
  ttlMs: number,
  keys: ReadonlyArray<{ readonly pool: string; readonly resource: string }>
) =>
  sql.unsafe(
    `INSERT INTO assay_pool_demand (pool, resource, runner, demand, expires_at)
     SELECT k.pool, k.resource, $1::text, 0, now() + make_interval(secs => $2::float8)
     FROM unnest($3::text[], $4::text[]) AS k(pool, resource)
     ON CONFLICT (pool, resource, runner) DO UPDATE SET expires_at = GREATEST(assay_pool_demand.expires_at, EXCLUDED.expires_at)`,
    [runner, secs(ttlMs), keys.map((k) => k.pool), keys.map((k) => k.resource)]
  )

/**
 * The other runners' live demand rows (0 included: registered runners) for the resources of
 * `pools` (block leases: what a holder above its equal share reads between renewals, see
 * `Gate.shedCheck`). One index range read of `assay_pool_demand`, nothing written.
 */
export const othersDemands = (sql: SqlClient.SqlClient, runner: string, pools: ReadonlyArray<string>) =>
  Effect.map(
    sql<{ pool: string; resource: string; runner: string; demand: number }>`SELECT pool, resource, runner, demand
      FROM assay_pool_demand WHERE pool = ANY(${pools}::text[]) AND runner <> ${runner} AND expires_at > now()`,
    (rows): ReadonlyArray<Demand & { readonly runner: string }> =>
      rows.map((r) => ({ pool: r.pool, resource: r.resource, runner: r.runner, demand: Number(r.demand) }))
  )

/** Forgets a runner's demands (a runner stopping): its share goes to the others at their next renewal. */
export const forgetDemand = (sql: SqlClient.SqlClient, runner: string) =>
  sql`DELETE FROM assay_pool_demand WHERE runner = ${runner}`

/** Whether the demand table exists (`assay migrate` of this version was run). */
export const demandTablePresent = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<{ present: boolean }>`SELECT to_regclass('assay_pool_demand') IS NOT NULL AS present`,
    (rows) => rows[0]?.present === true
  )

/**
 * The demand-proportional share of one runner (issue 17 step 3; Google's Doorman calls its
 * version "proportional share": https://github.com/youtube/doorman, doc/algorithms.md): of
 * `capacity` slots, runner `me` gets `capacity × own demand ÷ total demand`, over every runner
 * with a demand above 0 (`demands`, by runner id). Every runner computes the whole split from
 * the same demands the same way, so the shares never sum above the capacity: each share is
 * rounded down, the slots left by rounding go one each to the largest remainders (ties by
 * runner id), and when the capacity covers every runner with a demand, a runner whose share
 * rounded to 0 gets 1, taken from the largest share. 0 for a runner with no demand. Unlike
 * Doorman's, which first gives each client its equal share or what it wants, this one is
 * proportional throughout, spare capacity included (a runner's block leaves room for its
 * next burst).
 */
export const proportionalShare = (capacity: number, demands: ReadonlyMap<string, number>, me: string): number => {
  const cap = Math.max(0, Math.floor(capacity))
  const live = [...demands].filter(([, d]) => d > 0).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  if ((demands.get(me) ?? 0) <= 0 || cap === 0) return 0
  const total = live.reduce((n, [, d]) => n + d, 0)
  const shares = live.map(([runner, d]) => {
    const exact = (cap * d) / total
    return { runner, share: Math.floor(exact), rest: exact - Math.floor(exact) }
  })
  let left = cap - shares.reduce((n, s) => n + s.share, 0)
  for (const s of [...shares].sort((a, b) => b.rest - a.rest || (a.runner < b.runner ? -1 : 1))) {
    if (left <= 0) break
    s.share++
    left--
  }
  if (cap >= shares.length) {
    for (const s of shares) {
      if (s.share > 0) continue
      const largest = shares.reduce((m, x) => (x.share > m.share ? x : m))
      largest.share--
      s.share = 1
    }
  }
  return shares.find((s) => s.runner === me)?.share ?? 0
}
