/// <reference path="./pgModule.d.ts" />
/**
 * Named prepared statements for assay's fixed-shape hot statements (the store's batched
 * checkpoint statements, the pools' and claims' per-lease ones).
 *
 * `@effect/sql-pg` sends every statement unnamed (`client.query(text, params)`): Postgres
 * parses and plans it on every call. A statement whose text starts with {@link PREPARED} (see
 * {@link prepared}) is sent by the clients of {@link makeClient} / {@link layer} as a named
 * statement instead (`{ name, text, values }`, the name a digest of the text): node-postgres
 * parses it once per connection (remembered only once the server's `ParseComplete` came, so a
 * statement whose first parse failed is parsed again next time), and Postgres caches its plan
 * (custom plans for the first five executions, then the generic plan unless it costs more:
 * `plan_cache_mode`). Only marked texts are named, and at most {@link MAX_NAMED} distinct ones per
 * process (any further marked text is sent unnamed): a one-off text never leaves a prepared
 * statement behind on a connection.
 *
 * - A new connection (after a server restart, a dropped connection) prepares again: the names
 *   are per connection.
 * - A table changed under a prepared statement (`assay migrate`, `ALTER TABLE`) makes Postgres
 *   re-plan it at its next execution; only a change of the statement's result columns would
 *   fail (`cached plan must not change result type`), and the marked statements return only
 *   columns of their own parameters or none.
 *
 * @since 0.19.0
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { SqlError } from "@effect/sql/SqlError"
import * as Reactivity from "@effect/experimental/Reactivity"
import { Context, Duration, Effect, Layer, Redacted, type Scope } from "effect"
import * as SqlClient from "@effect/sql/SqlClient"
import { createHash } from "node:crypto"
import * as Pg from "pg"
import { PREPARED } from "../../../services/internal/preparedMark.js"

export { PREPARED, prepared } from "../../../services/internal/preparedMark.js"

/**
 * How many distinct marked texts one process names (further ones are sent unnamed).
 *
 * @since 0.19.0
 * @category constants
 */
export const MAX_NAMED = 256

const names = new Map<string, string>()

/**
 * The statement name of a marked `text` (`assay_` and its SHA-1), or `undefined` for an
 * unmarked one or once {@link MAX_NAMED} texts were named.
 *
 * @param text - a statement text.
 * @returns the name to prepare it under, or `undefined` (send it unnamed).
 *
 * @since 0.19.0
 * @category naming
 */
export const nameOf = (text: string): string | undefined => {
  if (!text.startsWith(PREPARED)) return undefined
  const known = names.get(text)
  if (known !== undefined || names.size >= MAX_NAMED) return known
  const name = `assay_${createHash("sha1").update(text).digest("hex")}`
  names.set(text, name)
  return name
}

/** A node-postgres connection that sends marked texts as named statements. */
class PreparingClient extends Pg.Client {
  override query(config: unknown, values?: unknown, callback?: unknown): any {
    if (typeof config === "string" && typeof callback === "function") {
      const name = nameOf(config)
      if (name !== undefined) return super.query({ name, text: config, values }, callback)
    }
    return super.query(config, values, callback)
  }
}

/**
 * How long an idle connection of assay's pools stays open: one minute, not `pg`'s 10 s. A
 * connection opened again costs Postgres ~20–40 ms of CPU (a backend forked, its caches
 * filled, its prepared statements parsed again). With 10 s, the three runners of a 120 s
 * benchmark run at 3,000 pipelines opened 104–118 backends (a watchdog pinging every 10 s found
 * its connection closed each time): about half of Postgres's CPU (BENCHMARKS.md pgp17an).
 * Idle connections cost the server memory only.
 *
 * @since 0.19.0
 * @category constants
 */
export const IDLE_TIMEOUT: Duration.Duration = Duration.minutes(1)

/**
 * Options of {@link makeClient}: `maxConnections` (default 10, as `@effect/sql-pg`'s),
 * `connectTimeout` (default 5 s: the pool's connection timeout, and how long the first query
 * may take), `idleTimeout` (default {@link IDLE_TIMEOUT}: how long an idle connection stays
 * open) and `applicationName` (default `"assay"`).
 *
 * @since 0.19.0
 * @category models
 */
export interface ClientOptions {
  readonly maxConnections?: number | undefined
  readonly connectTimeout?: Duration.DurationInput | undefined
  readonly idleTimeout?: Duration.DurationInput | undefined
  readonly applicationName?: string | undefined
}

/**
 * The `pg` pool configuration {@link makeClient} uses for `url` and `options` (its connection,
 * idle and size settings; the preparing client class is added by {@link makeClient}).
 *
 * @param url - a `postgres://` URL.
 * @param options - see {@link ClientOptions}.
 * @returns the configuration: `idleTimeoutMillis` and `connectionTimeoutMillis` in milliseconds.
 *
 * @since 0.19.0
 * @category constructors
 */
export const poolConfig = (url: string, options: ClientOptions = {}) => ({
  connectionString: url,
  connectionTimeoutMillis: Duration.toMillis(Duration.decode(options.connectTimeout ?? "5 seconds")),
  idleTimeoutMillis: Duration.toMillis(Duration.decode(options.idleTimeout ?? IDLE_TIMEOUT)),
  max: options.maxConnections,
  application_name: options.applicationName ?? "assay"
})

/**
 * A `PgClient` on `url` (as `@effect/sql-pg`'s `PgClient.make`: checked with one query, its
 * pool ended with the scope) whose connections send {@link prepared} texts as named statements.
 * Fails with `SqlError` when the server cannot be reached within `connectTimeout`.
 *
 * @param url - a `postgres://` URL.
 * @param options - see {@link ClientOptions}.
 * @returns the client, in the current scope.
 *
 * @since 0.19.0
 * @category constructors
 */
export const makeClient = (
  url: string,
  options: ClientOptions = {}
): Effect.Effect<PgClient.PgClient, SqlError, Scope.Scope | Reactivity.Reactivity> => {
  const timeout = Duration.decode(options.connectTimeout ?? "5 seconds")
  const acquire = Effect.acquireRelease(
    Effect.sync(() => {
      const pool = new Pg.Pool({ ...poolConfig(url, options), Client: PreparingClient })
      pool.on("error", () => {})
      return pool
    }),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
  ).pipe(
    Effect.tap((pool) =>
      Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(Effect.timeoutFail({
        duration: timeout,
        onTimeout: () => new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
      }))
    )
  )
  return PgClient.fromPool({ acquire, applicationName: options.applicationName ?? "assay" })
}

/**
 * {@link makeClient} as a layer of `PgClient` and `SqlClient` (for the pools, the cluster's
 * claims and in-flight markers).
 *
 * @param url - a `postgres://` URL (never shown: errors are `SqlError`s).
 * @param options - see {@link ClientOptions}.
 * @returns the layer; fails with `SqlError` when the server cannot be reached.
 *
 * @since 0.19.0
 * @category layers
 */
export const layer = (
  url: Redacted.Redacted<string> | string,
  options: ClientOptions = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, SqlError> =>
  Layer.scopedContext(
    Effect.map(
      makeClient(Redacted.isRedacted(url) ? Redacted.value(url) : url, options),
      (client) => Context.make(PgClient.PgClient, client).pipe(Context.add(SqlClient.SqlClient, client))
    )
  ).pipe(Layer.provide(Reactivity.layer))
