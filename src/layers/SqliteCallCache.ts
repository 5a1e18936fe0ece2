/**
 * The call cache in an SQLite file (see `services/CallCache.ts`): the `call_cache` table of a
 * run's store (migration 0010), or of a shared cache database that several experiments,
 * studies and processes use at once (`--cache-db PATH`, `run.cache.db`).
 *
 * **One connection of its own**, better-sqlite3, each read and write one autocommit statement
 * run synchronously (never a transaction held across a fiber yield, so it cannot deadlock
 * against the store's synchronous writer in the same thread, see docs/store.md). Concurrent
 * processes on one cache file are safe: the file is in WAL mode (readers never wait for the
 * writer), and a write that finds another process writing waits up to `busyTimeoutMs`
 * (default 5000) for the lock (SQLite's busy handler). Two processes that run the same request
 * at once both call the model and the later write replaces the earlier one (`INSERT OR
 * REPLACE`): the cache never holds a half-written row.
 *
 * Pointed at a run's store file (`shared` not set), it opens nothing until first used and then
 * goes through the connection of the store open on that file in this process (the store's own
 * cache, `Store.callCache`), so the order of the two layers does not matter; without such a
 * store it opens the file itself and leaves the journal mode to the store's writer. A runner
 * over an SQLite store needs no cache layer at all for this: it uses the store's own cache.
 *
 * @since 0.7.0
 */
import Database from "better-sqlite3"
import { Effect, Layer, Option, Scope } from "effect"
import type { StoreUnavailable } from "../domain/Errors.js"
import { CallCache, type CallCacheService, putFirst } from "../services/CallCache.js"
import { cacheError, isMissingFile, makeOn, openReadOnlyDb, storeCacheOf } from "./internal/sqlite/callCache.js"
import { CALL_CACHE_TABLE } from "./internal/sqlite/migrations.js"

/**
 * Options of the SQLite cache: `filename` (created when missing), `shared` (`true`: a cache
 * database of its own, put in WAL mode; `false`: a run's store file, whose journal mode is the
 * store's), `busyTimeoutMs` (how long a statement waits for another process's lock, ms,
 * default 5000), `readOnly` (`true`: the file is opened read-only, as `validate` opens it,
 * for a run whose cache mode is `readOnly`: nothing is created, no journal mode set, no table
 * made, so a file or folder the user may not write (chmod 444, a read-only mount) is served;
 * a missing file or one without the cache table is an empty cache; `put` fails).
 *
 * @since 0.7.0
 * @category models
 */
export interface SqliteCallCacheOptions {
  readonly filename: string
  readonly shared?: boolean | undefined
  readonly busyTimeoutMs?: number | undefined
  readonly readOnly?: boolean | undefined
}

/** A cache that holds nothing and stores nothing (a read-only cache whose file or table is missing). */
const emptyReadOnly = (filename: string): CallCacheService => ({
  kind: "sqlite",
  location: filename,
  get: () => Effect.succeed(Option.none()),
  put: () => Effect.fail(cacheError(filename, "write failed")("the cache is open read-only (mode readOnly)")),
  putFirst: () => Effect.fail(cacheError(filename, "write failed")("the cache is open read-only (mode readOnly)")),
  size: Effect.succeed(0)
})

/**
 * Opens the file read-only ({@link openReadOnlyDb}: SQLite writes nothing, not even a
 * journal mode, and creates nothing beside the file; a WAL file whose `-wal` or `-shm` is
 * missing is read from a snapshot, logged), closed with the scope; a missing file or table is
 * an empty cache.
 */
const openReadOnly = (options: SqliteCallCacheOptions): Effect.Effect<CallCacheService, StoreUnavailable, Scope.Scope> =>
  Effect.gen(function*() {
    const missing = yield* Effect.try({ try: () => isMissingFile(options.filename), catch: cacheError(options.filename, "cannot open") })
    if (missing) return emptyReadOnly(options.filename)
    const ro = yield* Effect.acquireRelease(
      Effect.try({ try: () => openReadOnlyDb(options.filename, options.busyTimeoutMs ?? 5000), catch: cacheError(options.filename, "cannot open") }),
      (ro) => Effect.sync(() => ro.close())
    )
    if (ro.snapshot !== undefined) yield* Effect.logInfo(`call cache ${options.filename}: ${ro.snapshot}`)
    const d = ro.db
    const hasTable = yield* Effect.try({
      try: () => d.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'call_cache'").get() !== undefined,
      catch: cacheError(options.filename, "cannot open")
    })
    if (!hasTable) return emptyReadOnly(options.filename)
    const on = makeOn(d, options.filename)
    const refuse = emptyReadOnly(options.filename)
    return { ...on, put: refuse.put, putFirst: refuse.putFirst } satisfies CallCacheService
  })

/** Opens a connection of the cache's own on the file, creating the table (closed with the scope). */
const openOwn = (options: SqliteCallCacheOptions): Effect.Effect<CallCacheService, StoreUnavailable, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(
      Effect.try({
        try: () => {
          const d = new Database(options.filename, { timeout: options.busyTimeoutMs ?? 5000 })
          try {
            if (options.shared === true) {
              d.pragma("journal_mode = WAL")
              d.pragma("synchronous = NORMAL")
            }
            d.exec(CALL_CACHE_TABLE)
          } catch (e) {
            d.close()
            throw e
          }
          return d
        },
        catch: cacheError(options.filename, "cannot open")
      }),
      (d) => Effect.sync(() => d.close())
    ),
    (d) => makeOn(d, options.filename)
  )

/**
 * Opens the cache on `options.filename` in the current scope (closed with it).
 *
 * - `readOnly: true`: opened at once, read-only (see {@link SqliteCallCacheOptions}); fails
 *   with `StoreUnavailable` when the file exists but is not an SQLite database.
 * - `shared: true` (a cache database of its own): opened at once; fails with
 *   `StoreUnavailable` when the file cannot be opened or the table cannot be created.
 * - otherwise (a run's store file): nothing is opened until the first read or write. If a
 *   store is then open for writing on that file in this process, the cache goes through the
 *   store's own connection (`Store.callCache`), so the layer may be built before or after the
 *   store's; else it opens a connection of its own (a failure then fails that read or write,
 *   which the runner counts as a miss).
 *
 * @since 0.7.0
 * @category constructors
 */
export const make = (options: SqliteCallCacheOptions): Effect.Effect<CallCacheService, StoreUnavailable, Scope.Scope> =>
  Effect.gen(function*() {
    if (options.readOnly === true) return yield* openReadOnly(options)
    if (options.shared === true) return yield* openOwn(options)
    const scope = yield* Effect.scope
    const resolve = yield* Effect.cached(Effect.suspend(() => {
      const ofStore = storeCacheOf(options.filename)
      return ofStore !== undefined ? Effect.succeed(ofStore) : Scope.extend(openOwn(options), scope)
    }))
    return {
      kind: "sqlite",
      location: options.filename,
      get: (key) => Effect.flatMap(resolve, (c) => c.get(key)),
      put: (entry) => Effect.flatMap(resolve, (c) => c.put(entry)),
      putFirst: (entry, ttlMs) => Effect.flatMap(resolve, (c) => putFirst(c, entry, ttlMs)),
      size: Effect.flatMap(resolve, (c) => c.size)
    } satisfies CallCacheService
  })

/**
 * The SQLite cache as a layer. Hoist it into a module-level constant (each build is one more
 * connection).
 *
 * @since 0.7.0
 * @category layers
 */
export const layer = (options: SqliteCallCacheOptions): Layer.Layer<CallCache, StoreUnavailable> =>
  Layer.scoped(CallCache, make(options))
