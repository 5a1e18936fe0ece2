/**
 * Global pools on PostgreSQL: the same {@link Pools} service, with capacity and quotas held in
 * one database shared by every process and machine of a deployment (issue 17 §2).
 *
 * - **Capacity** is one `assay_pool_slot` row per unit, claimed with `FOR UPDATE SKIP LOCKED`
 *   for a TTL (`leaseTtl`) and renewed by a forked fiber every `renewEvery`. A renewal error
 *   is not a loss (it is asked again soon): the holder keeps its slot until its local deadline,
 *   counted from before the last successful renewal was sent, less a margin. A slot found
 *   taken, or the deadline passing, fails the lease's loss signal with {@link LeaseLost} (class
 *   `retryable`; see {@link guard}) and publishes the pool event `lease.lost` (`leaseId`,
 *   `reason`, `lateMs`, `runnerId`); a lost lease's slot is never given back early. The slot
 *   goes back early only after a completed call (a successful scope, `lease.releaseNow`, or a
 *   lease that got a `report`), at once: the cluster engine does not hold it until the task's
 *   checkpoint commits (nor a block lease's slot); after an unknown outcome (interruption, a failure with no
 *   report) it is kept until its TTL ends, so a call still running at the provider is never
 *   doubled by a new grant. Slots given back are written in batches (one statement per flush,
 *   at most `releaseDelay` after the first); until then the slot stays held, and this
 *   process's next acquire of the same resource takes it over in its claim statement.
 * - **Quotas** ({@link QuotaOptions}) are windows (`date_bin` from 2000-01-01 UTC) charged with a
 *   conditional upsert at the grant (the estimate, or 1 for `requests`), moved to the window
 *   the call goes out in by {@link confirmQuota} (or {@link guard}) when the grant's window has
 *   ended by then, and corrected by the real count once a report carries it (`usage[metric]`).
 * - **Health**: a 429's throttle window (Retry-After), a cooldown, death and revival reported
 *   on one runner are written to `assay_pool_resource`; every runner's next acquire skips the
 *   resource. `capacity` there is global: {@link resize} changes it for every runner.
 * - **Algorithms** are the local ones (`wait`, `immediate`, `backoff`, `leastBusy`,
 *   `failover`, `sticky`, `quotaAware`, `adaptive`, plugins): they choose among the resources
 *   free globally at the time of the acquire; rankers read this process's figures.
 * - **Waiting**: the acquire re-reads the global rows with a backoff from `Clock` (`pollMin` to
 *   `pollMax`, equal jitter from `Random`), bounded by the acquire's `timeout`.
 *
 * Tables are created by {@link migrate} (bookkeeping table `assay_pool_migrations`), once,
 * before the runners start (`assay migrate`). The declared capacity of each resource is written
 * when the service starts.
 *
 * ```ts
 * import { Effect } from "effect"
 * import { Pool, PgPools, Resource } from "assay"
 *
 * const PoolsLive = PgPools.layerUrl(
 *   [Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity: 4 })])],
 *   { url: "postgres://assay@127.0.0.1:5432/assay", runnerId: "host-a", leaseTtl: "30 seconds", renewEvery: "10 seconds" }
 * )
 * const program = Effect.void.pipe(Effect.provide(PoolsLive))
 * ```
 *
 * @since 0.7.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Migrator from "@effect/sql/Migrator"
import { Config, Deferred, Duration, Effect, Layer, Random } from "effect"
import type { Scope } from "effect"
import type { ConfigError } from "../domain/Errors.js"
import type { Lease } from "../domain/Lease.js"
import type { PoolConfig } from "../services/Pool.js"
import { Pools } from "../services/Pools.js"
import type { PoolsOptions, PoolsService } from "../services/Pools.js"
import { LeaseLost } from "../services/internal/pool/pg/errors.js"
import * as internal from "../services/internal/pool/pg/pools.js"
import * as Q from "../services/internal/pool/pg/sql.js"

export {
  /**
   * A global lease ended while its work may still run: `taken` (the renewal found the slot
   * given to another lease after its TTL) or `deadline` (renewals kept failing until the local
   * deadline). Carries `pool`, `resourceId`, `leaseId`, `reason` and `errorClass: "retryable"`
   * (the default retry policy retries it).
   *
   * @since 0.7.0
   * @category errors
   */
  LeaseLost
}

/**
 * A global quota: at most `limit` units of `metric` per `window`, counted per resource (each
 * resource of `pool`, or only `resource`). `metric` is `"requests"` (1 charged per lease) or a
 * usage key the tasks report (`lease.report({ usage: { tokens: 812 } })`); `estimate` is what
 * an acquire charges before the real count is known (default 0 for a usage key: the acquire
 * then only checks the window is not already spent). A refused charge skips the resource until
 * its window ends.
 *
 * @since 0.7.0
 * @category models
 */
export interface QuotaOptions {
  readonly pool: string
  readonly resource?: string | undefined
  readonly metric: string
  readonly limit: number
  readonly window: Duration.DurationInput
  readonly estimate?: number | undefined
}

/**
 * Options of {@link make} / {@link layer}:
 * - `runnerId`: recorded as the holder of each slot (default: a random `runner-xxxxxxxx`);
 * - `leaseTtl` (default 30 s) and `renewEvery` (default a third of the TTL): the slot's TTL and
 *   how often it is renewed;
 * - `pollMin` (default 25 ms) and `pollMax` (default 1 s): the backoff range of a waiting
 *   acquire between two reads of the global rows;
 * - `quotas`: global quota windows ({@link QuotaOptions}), besides those each resource declares
 *   itself (`Resource.make({ quotas })`, the `quotas:` of a resource in an experiment file),
 *   which win for their metric;
 * - `quotaGuard` (default 2 s): the end of each quota window grants nothing; a charge needs
 *   `min(quotaGuard, window / 4)` of its window left, at the grant and again at
 *   {@link confirmQuota} just before the call, so that the call reaches the provider (which
 *   counts by arrival) inside the window it was charged to: what the guard covers is the time
 *   from the confirming statement to the provider (the event loop, the HTTP request). It only
 *   holds back a window whose quota is not spent by then (a busy window is spent at its start);
 * - `releaseDelay` (default 20 ms): how long a slot given back may wait to be written with the
 *   other releases of this process (one statement per flush); meanwhile it is still held (no
 *   runner can claim it) and this process's next acquire of the same resource takes it over
 *   in its own claim statement. The queue is written when the service's scope closes; a crash
 *   leaves the slots to their TTL, as for a held lease;
 * - `onEvent`, `plugins`: as for the local pools (`Pools.PoolsOptions`).
 *
 * @since 0.7.0
 * @category models
 */
export interface PgPoolsOptions extends PoolsOptions {
  readonly runnerId?: string | undefined
  readonly leaseTtl?: Duration.DurationInput | undefined
  readonly renewEvery?: Duration.DurationInput | undefined
  readonly pollMin?: Duration.DurationInput | undefined
  readonly pollMax?: Duration.DurationInput | undefined
  readonly quotas?: ReadonlyArray<QuotaOptions> | undefined
  readonly quotaGuard?: Duration.DurationInput | undefined
  readonly releaseDelay?: Duration.DurationInput | undefined
}

const settingsOf = (options: PgPoolsOptions): Effect.Effect<internal.Settings> =>
  Effect.gen(function*() {
    const ttl = Duration.toMillis(options.leaseTtl ?? "30 seconds")
    const runnerId = options.runnerId ?? `runner-${(yield* Random.nextIntBetween(0, 0xffffffff)).toString(16).padStart(8, "0")}`
    return {
      runnerId,
      leaseTtlMs: ttl,
      renewEveryMs: options.renewEvery === undefined ? ttl / 3 : Duration.toMillis(options.renewEvery),
      pollMinMs: Duration.toMillis(options.pollMin ?? "25 millis"),
      pollMaxMs: Duration.toMillis(options.pollMax ?? "1 second"),
      quotaGuardMs: Duration.toMillis(options.quotaGuard ?? "2 seconds"),
      releaseDelayMs: Duration.toMillis(options.releaseDelay ?? "20 millis"),
      // a debugging aid: one line per block and renewal (`internal.Settings.trace`)
      trace: yield* Effect.orElseSucceed(Config.boolean("ASSAY_BLOCK_TRACE").pipe(Config.withDefault(false)), () => false),
      quotas: (options.quotas ?? []).map((q) => ({
        pool: q.pool,
        resource: q.resource,
        metric: q.metric,
        limit: q.limit,
        windowMs: Duration.toMillis(q.window),
        estimate: q.estimate
      }))
    }
  })

/**
 * Builds the global pools service over the `SqlClient` in context (a Postgres client, e.g.
 * `@effect/sql-pg`'s `PgClient.layer`), for the enclosing scope. The pool tables must exist
 * ({@link migrate}). Writes each declared resource's capacity and slot rows. Fails with
 * `ConfigError` for invalid pools (as `Pools.makePools`) or `SqlError` when the rows cannot be
 * written.
 *
 * @param pools the pool declarations (`Pool.make`)
 * @param options see {@link PgPoolsOptions}
 * @returns the `Pools` service with global capacity, quotas and shared health
 * @since 0.7.0
 * @category constructors
 */
export const make = (
  pools: Iterable<PoolConfig>,
  options: PgPoolsOptions = {}
): Effect.Effect<PoolsService, ConfigError | SqlError, Scope.Scope | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* settingsOf(options)
    return yield* internal.make(sql, pools, settings, { onEvent: options.onEvent, plugins: options.plugins })
  })

/**
 * The {@link Pools} service with global semantics, as a scoped layer over the `SqlClient` in
 * context (see {@link make}).
 *
 * @since 0.7.0
 * @category layers
 */
export const layer = (
  pools: Iterable<PoolConfig>,
  options: PgPoolsOptions = {}
): Layer.Layer<Pools, ConfigError | SqlError, SqlClient.SqlClient> => Layer.scoped(Pools, make(pools, options))

/**
 * The {@link Pools} service with global semantics over its own Postgres client opened from
 * `url` (`postgres://user[:password]@host:port/database`; the password is never logged).
 * `@effect/sql-pg` (an optional peer dependency, pinned 0.53.0) is loaded when the layer is
 * built. Runs {@link migrate} first when `migrate: true` (default false: migrate once before
 * runners start).
 *
 * @since 0.7.0
 * @category layers
 */
export const layerUrl = (
  pools: Iterable<PoolConfig>,
  options: PgPoolsOptions & { readonly url: string; readonly migrate?: boolean | undefined }
): Layer.Layer<Pools, ConfigError | SqlError | Migrator.MigrationError> =>
  Layer.unwrapEffect(Effect.map(
    Effect.promise(() => import("./internal/pg/prepared.js")),
    (Prepared) => {
      const client = Prepared.layer(options.url)
      const pools$ = options.migrate === true
        ? Layer.scoped(Pools, Effect.zipRight(migrate, make(pools, options)))
        : layer(pools, options)
      return pools$.pipe(Layer.provide(client))
    }
  ))

/**
 * Creates or upgrades the pool tables (`assay_pool_resource`, `assay_pool_slot`,
 * `assay_pool_quota`; bookkeeping in `assay_pool_migrations`) over the `SqlClient` in context.
 * Idempotent. Run it once before runners start (two processes migrating an empty database at
 * the same instant can collide on `CREATE TABLE`). Returns the migrations applied now.
 *
 * @since 0.7.0
 * @category migrations
 */
export const migrate: Effect.Effect<
  ReadonlyArray<readonly [id: number, name: string]>,
  Migrator.MigrationError | SqlError,
  SqlClient.SqlClient
> = Q.migrate

/**
 * Sets the global capacity of a resource for every runner (slot rows are added as needed; a
 * lowered capacity grants no slot above it, leases already held run to their release). The
 * next start of a service declaring the resource writes its declared capacity back. Returns
 * whether the resource exists (`false`: nothing was written).
 *
 * @since 0.7.0
 * @category operations
 */
export const resize = (pool: string, resourceId: string, capacity: number): Effect.Effect<boolean, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => Q.resize(sql, pool, resourceId, capacity))

/**
 * One resource as every runner sees it: `capacity`, `state` (`ready` / `dead`),
 * `throttleMs` and `cooldownMs` left (0 when none), `inUse` (live slots).
 *
 * @since 0.7.0
 * @category models
 */
export type GlobalResource = Q.GlobalRow

/**
 * The global state of the resources of the given pools, read now (times by the server's clock).
 *
 * @since 0.7.0
 * @category operations
 */
export const globalState = (pools: ReadonlyArray<string>): Effect.Effect<ReadonlyArray<GlobalResource>, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => pools.length === 0 ? Effect.succeed([]) : Q.view(sql, pools))

/**
 * Runs `work` (the call) under a lease's global slot: first {@link confirmQuota} (the lease's
 * quota charges moved to the window the call goes out in, waiting when that window is full);
 * then, when the lease is lost (see {@link LeaseLost}), the work is interrupted (an HTTP call
 * made with the `AbortSignal` of `Effect.tryPromise` is aborted) and the effect fails with
 * `LeaseLost`. A lease from local pools is run as is.
 *
 * @param lease the lease held (from `Pools.acquire`)
 * @returns a function wrapping the work
 * @since 0.7.0
 * @category combinators
 */
export const guard = (lease: Lease<any>) => <A, E, R>(work: Effect.Effect<A, E, R>): Effect.Effect<A, E | LeaseLost, R> =>
  internal.isPgLease(lease)
    ? Effect.zipRight(internal.confirm(lease), Effect.raceFirst(work, Deferred.await(lease.lost)))
    : work

/**
 * Call just before a lease's call goes out: a provider counts a call in the window it
 * arrives in, and a lease may wait between its grant (which charged its quota windows) and its
 * call. Every charge whose window ends within its guard (`min(quotaGuard, window / 4)`) is
 * moved to the window the call goes out in: it waits for the charged window's end, then
 * charges the current window with the same conditional upsert (never over the limit) and
 * gives the old window its charge back, in one statement; when the current window is full it
 * waits for the next. A charge still fresh costs nothing (no statement). Bound it with the
 * caller's timeout; a database that does not answer is asked again after a backoff. Nothing
 * for a lease from local pools, or one without quota windows. {@link guard} does it first.
 *
 * @param lease the lease held (from `Pools.acquire`)
 * @returns done once every charge is in the current window with its guard left
 * @since 0.7.0
 * @category operations
 */
export const confirmQuota = (lease: Lease<any>): Effect.Effect<void> => internal.confirm(lease)

/**
 * Whether a lease's global slot was lost (always `false` for a local lease).
 *
 * @since 0.7.0
 * @category operations
 */
export const isLost = (lease: Lease<any>): Effect.Effect<boolean> =>
  internal.isPgLease(lease) ? Deferred.isDone(lease.lost) : Effect.succeed(false)

/**
 * A standalone quota charge (the statement every acquire uses): adds `cost` to the current
 * `window` of (pool, resource, metric) only if the window's total stays within `limit`.
 * Returns the window's new total, or `undefined` when refused.
 *
 * @since 0.7.0
 * @category operations
 */
export const charge = (
  key: { readonly pool: string; readonly resource: string; readonly metric: string },
  cost: number,
  limit: number,
  window: Duration.DurationInput
): Effect.Effect<number | undefined, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(Q.charge(sql, key, cost, limit, Duration.toMillis(window)), (r) => r?.used))
