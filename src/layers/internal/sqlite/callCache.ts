/**
 * The call cache's statements on one better-sqlite3 connection (the `call_cache` table), shared
 * by the SQLite store (its own cache, on its writer connection) and `SqliteCallCache` (a
 * connection of its own), plus the registry of the caches of the stores open for writing in
 * this process, so that a cache pointed at a store's own file goes through that store's
 * connection instead of opening the file beside it.
 *
 * @since 0.7.0
 */
import Database from "better-sqlite3"
import * as fs from "node:fs"
import { Effect, Option, type Scope } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"
import { fileKey } from "../../../services/internal/fileKey.js"
import { entryParams } from "../callCacheRow.js"
import type { CacheEntry, CallCacheService } from "../../../services/CallCache.js"

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

/** A `StoreUnavailable` of the cache at `path` (`what`: what failed). */
export const cacheError = (path: string, what: string) => (cause: unknown) =>
  new StoreUnavailable({ message: `call cache ${path}: ${what}: ${describe(cause)}`, path, cause })

/**
 * The cache service over `db`, whose `call_cache` table exists. Each read and write is one
 * autocommit statement run synchronously (never a transaction held across a fiber yield).
 */
export const makeOn = (db: Database.Database, path: string): CallCacheService => {
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
        catch: cacheError(path, "read failed")
      }),
    put: (e) =>
      Effect.try({
        try: () =>
          void upsert.run(...entryParams(e)),
        catch: cacheError(path, "write failed")
      }),
    size: Effect.try({ try: () => count.get()!.n, catch: cacheError(path, "read failed") })
  }
}


/** The caches of the stores open for writing in this process, by file identity. */
const storeCaches = new Map<string, CallCacheService>()

/**
 * Registers `cache` as the cache of the store file `path` for as long as the current scope
 * (the store's) is open.
 */
export const registerStoreCache = (path: string, cache: CallCacheService): Effect.Effect<void, never, Scope.Scope> =>
  Effect.asVoid(Effect.acquireRelease(
    Effect.sync(() => {
      const key = fileKey(path)
      if (key !== undefined) storeCaches.set(key, cache)
      return key
    }),
    (key) =>
      Effect.sync(() => {
        if (key !== undefined && storeCaches.get(key) === cache) storeCaches.delete(key)
      })
  ))

/** The cache of the store open for writing in this process on the file `path`, if any. */
export const storeCacheOf = (path: string): CallCacheService | undefined => {
  const key = fileKey(path)
  return key === undefined ? undefined : storeCaches.get(key)
}

/**
 * Opens an existing SQLite file for reading only, writing nothing to it or beside it.
 *
 * A WAL-mode file (a shared cache is one) in a folder the user may not write cannot be
 * opened read-only by SQLite when its `-shm` file is missing: SQLite must create it
 * (`SQLITE_READONLY_DIRECTORY`), and the `immutable` URI parameter that would avoid it is
 * not available (better-sqlite3 is built without URIs). Then the file is read whole and
 * opened in memory (its WAL header bytes 18–19 set to rollback, read-only): nobody can be
 * writing it, since a writer would need that folder too.
 *
 * @param filename the database path
 * @param timeoutMs the busy timeout (ms)
 * @returns the read-only connection; throws SQLite's error when the file is not a database
 * @internal
 */
export const openReadOnlyDb = (filename: string, timeoutMs = 5000): Database.Database => {
  const d = new Database(filename, { readonly: true, fileMustExist: true, timeout: timeoutMs })
  try {
    d.prepare("SELECT count(*) FROM sqlite_master").get()
    return d
  } catch (e) {
    d.close()
    const code = e !== null && typeof e === "object" && "code" in e ? String((e as { code: unknown }).code) : ""
    if (code !== "SQLITE_READONLY_DIRECTORY" && code !== "SQLITE_CANTOPEN" && code !== "SQLITE_READONLY_CANTINIT") throw e
    const bytes = fs.readFileSync(filename)
    if (bytes.length >= 20 && bytes[18] === 2 && bytes[19] === 2) {
      bytes[18] = 1
      bytes[19] = 1
    }
    return new Database(bytes, { readonly: true })
  }
}
