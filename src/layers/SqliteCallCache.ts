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
 * Opened on a run's store file, it leaves the journal mode to the store's writer (which holds
 * WAL while it is open): build it after the store and close it before (the CLI does, see
 * `cli/RunCommand.ts`), so the store's close can fold the WAL back into the file.
 *
 * @since 0.7.0
 */
import Database from "better-sqlite3"
import { Effect, Layer, Option, type Scope } from "effect"
import { StoreUnavailable } from "../domain/Errors.js"
import { type CacheEntry, CallCache, type CallCacheService } from "../services/CallCache.js"
import { CALL_CACHE_TABLE } from "./internal/sqlite/migrations.js"

/**
 * Options of the SQLite cache: `filename` (created when missing), `shared` (`true`: a cache
 * database of its own, put in WAL mode; `false`: a run's store file, whose journal mode is the
 * store's), `busyTimeoutMs` (how long a statement waits for another process's lock, ms,
 * default 5000).
 *
 * @since 0.7.0
 * @category models
 */
export interface SqliteCallCacheOptions {
  readonly filename: string
  readonly shared?: boolean | undefined
  readonly busyTimeoutMs?: number | undefined
}

interface Row {
  readonly task_name: string
  readonly namespace: string
  readonly type_name: string
  readonly codec: string
  readonly payload: Buffer
  readonly usage: string | null
  readonly created_at: number
}

const describe = (cause: unknown): string =>
  cause !== null && typeof cause === "object" && "message" in cause ? String((cause as { message: unknown }).message) : String(cause)

/**
 * Opens the cache on `options.filename` in the current scope (closed with it). Fails with
 * `StoreUnavailable` when the file cannot be opened or the table cannot be created.
 *
 * @since 0.7.0
 * @category constructors
 */
export const make = (options: SqliteCallCacheOptions): Effect.Effect<CallCacheService, StoreUnavailable, Scope.Scope> =>
  Effect.gen(function*() {
    const path = options.filename
    const fail = (what: string) => (cause: unknown) =>
      new StoreUnavailable({ message: `call cache ${path}: ${what}: ${describe(cause)}`, path, cause })
    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const d = new Database(path, { timeout: options.busyTimeoutMs ?? 5000 })
          if (options.shared === true) {
            d.pragma("journal_mode = WAL")
            d.pragma("synchronous = NORMAL")
          }
          d.exec(CALL_CACHE_TABLE)
          return d
        },
        catch: fail("cannot open")
      }),
      (d) => Effect.sync(() => d.close())
    )
    const select = db.prepare<[string], Row>(
      "SELECT task_name, namespace, type_name, codec, payload, usage, created_at FROM call_cache WHERE key = ?"
    )
    const upsert = db.prepare(
      `INSERT OR REPLACE INTO call_cache (key, task_name, namespace, type_name, codec, payload, usage, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
    )
    const count = db.prepare<[], { readonly n: number }>("SELECT count(*) AS n FROM call_cache")
    return {
      kind: "sqlite",
      location: path,
      get: (key) =>
        Effect.try({
          try: () => {
            const row = select.get(key)
            if (row === undefined) return Option.none()
            return Option.some<CacheEntry>({
              key,
              taskName: row.task_name,
              namespace: JSON.parse(row.namespace) as CacheEntry["namespace"],
              typeName: row.type_name,
              codec: row.codec,
              data: new Uint8Array(row.payload.buffer, row.payload.byteOffset, row.payload.byteLength),
              usage: row.usage === null ? null : JSON.parse(row.usage) as CacheEntry["usage"],
              createdAt: row.created_at
            })
          },
          catch: fail("read failed")
        }),
      put: (e) =>
        Effect.try({
          try: () =>
            void upsert.run(
              e.key,
              e.taskName,
              JSON.stringify(e.namespace),
              e.typeName,
              e.codec,
              Buffer.from(e.data.buffer, e.data.byteOffset, e.data.byteLength),
              e.usage === null ? null : JSON.stringify(e.usage),
              e.createdAt
            ),
          catch: fail("write failed")
        }),
      size: Effect.try({ try: () => count.get()!.n, catch: fail("read failed") })
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
