/**
 * The call cache in a Postgres database (see `services/CallCache.ts`): the `assay_call_cache`
 * table of a Postgres store (store migration 2), so that a run writing into Postgres keeps the
 * outputs of its cached tasks across runs, and so do the other processes writing the same
 * database (runners of a scale-out deployment share it).
 *
 * Same meaning as `SqliteCallCache`: one row per key; a write replaces the row of its key
 * (`INSERT … ON CONFLICT (key) DO UPDATE`: two processes that ran the same request at once both
 * write, the later write stays, never a half-written row); the namespace, usage and creation
 * time are stored with the payload, and expiry (the TTL, measured by the caller's `Clock`
 * against `createdAt`) and modes are the caller's. One client of its own (2 connections), each
 * read and write one autocommit statement.
 *
 * @since 0.8.0
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Layer, type Scope } from "effect"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import { CallCache, type CallCacheService } from "../services/CallCache.js"
import { makeWith as makeOnClient } from "./internal/pg/callCache.js"
import { unavailableOf } from "./internal/pg/driver.js"
import { CALL_CACHE_TABLE } from "./internal/pg/migrations.js"
import { redactUrl } from "./internal/pg/url.js"
import { makeClient } from "./PgStore.js"

/**
 * Options of the Postgres cache: `url` (a `postgres://` URL of a database migrated by
 * `assay migrate`).
 *
 * @since 0.8.0
 * @category models
 */
export interface PgCallCacheOptions {
  readonly url: string
}

/**
 * The cache over an open client (`url` only names the database in messages). Every failed
 * statement is a `StoreUnavailable` naming the database without its password.
 *
 * @since 0.8.0
 * @category constructors
 */
export const makeWith: (sql: SqlClient.SqlClient, url: string) => CallCacheService = makeOnClient

/**
 * Opens the cache on `options.url` in the current scope (its client closed with it). Fails with
 * `StoreUnavailable` when the server cannot be reached, `ConfigError` (exit 2) when the
 * database has no cache table (never migrated, or migrated by an assay without it: run
 * `assay migrate --database URL`).
 *
 * @since 0.8.0
 * @category constructors
 */
export const make = (
  options: PgCallCacheOptions
): Effect.Effect<CallCacheService, StoreUnavailable | ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* makeClient(options.url, { maxConnections: 2 })
    const [t] = yield* Effect.mapError(
      sql.unsafe<{ t: string | null }>(`SELECT to_regclass('${CALL_CACHE_TABLE}')::text AS t`),
      (e) => unavailableOf(options.url, "call cache open", e)
    )
    if (t?.t === null || t?.t === undefined) {
      const shown = redactUrl(options.url)
      const message = `the database ${shown} has no call cache table: run \`assay migrate --database ${shown}\` once`
      return yield* new ConfigError({
        message,
        issues: [{ path: "cache", message, suggestion: `assay migrate --database ${shown}` }]
      })
    }
    return makeWith(sql, options.url)
  })

/**
 * The Postgres cache as a layer. Hoist it into a module-level constant (each build opens a
 * client of its own).
 *
 * @since 0.8.0
 * @category layers
 */
export const layer = (options: PgCallCacheOptions): Layer.Layer<CallCache, StoreUnavailable | ConfigError> =>
  Layer.scoped(CallCache, make(options))
