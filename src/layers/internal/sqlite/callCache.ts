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
import * as os from "node:os"
import * as nodePath from "node:path"
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
  // the first answer is kept (`putFirst`): an existing row is replaced only when it expired
  const insertFirst = db.prepare(
    `INSERT INTO call_cache (key, task_name, namespace, type_name, codec, payload, usage, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (key) DO UPDATE SET task_name = excluded.task_name, namespace = excluded.namespace,
       type_name = excluded.type_name, codec = excluded.codec, payload = excluded.payload, usage = excluded.usage,
       created_at = excluded.created_at
     WHERE ? IS NOT NULL AND excluded.created_at - call_cache.created_at >= ?`
  )
  const count = db.prepare<[], { readonly n: number }>("SELECT count(*) AS n FROM call_cache")
  const entryOf = (key: string, row: Row): CacheEntry => ({
    key,
    taskName: row.task_name,
    namespace: JSON.parse(row.namespace) as CacheEntry["namespace"],
    typeName: row.type_name,
    codec: row.codec,
    data: new Uint8Array(row.payload.buffer, row.payload.byteOffset, row.payload.byteLength),
    usage: row.usage === null ? null : JSON.parse(row.usage) as CacheEntry["usage"],
    createdAt: row.created_at
  })
  return {
    kind: "sqlite",
    location: path,
    get: (key) =>
      Effect.try({
        try: () => {
          const row = select.get(key)
          return row === undefined ? Option.none() : Option.some(entryOf(key, row))
        },
        catch: cacheError(path, "read failed")
      }),
    put: (e) =>
      Effect.try({
        try: () =>
          void upsert.run(...entryParams(e)),
        catch: cacheError(path, "write failed")
      }),
    putFirst: (e, ttlMs) =>
      Effect.try({
        try: () => {
          // one statement: atomic against every other connection on the file
          if (insertFirst.run(...entryParams(e), ttlMs, ttlMs).changes > 0) return e
          const row = select.get(e.key)
          return row === undefined ? e : entryOf(e.key, row)
        },
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
 * A read-only connection from {@link openReadOnlyDb}: `db`, how it was opened (`snapshot`:
 * undefined when SQLite reads the file itself; else a sentence saying which files were copied
 * and why, for the log) and `close`, which closes it and removes the private copy, if any.
 *
 * @internal
 */
export interface ReadOnlyDb {
  readonly db: Database.Database
  readonly snapshot: string | undefined
  readonly close: () => void
}

const errnoCode = (e: unknown): string =>
  e !== null && typeof e === "object" && "code" in e ? String((e as { code: unknown }).code) : ""

/**
 * The first 100 bytes of `filename` (its SQLite header, shorter for a short file). Throws an
 * error naming the permission problem and the path when the user may not read it (SQLite would
 * say only "unable to open database file").
 */
const readHeader = (filename: string): Buffer => {
  let fd: number
  try {
    fd = fs.openSync(filename, "r")
  } catch (e) {
    const code = errnoCode(e)
    if (code === "EACCES" || code === "EPERM") {
      const st = fs.statSync(filename)
      throw new Error(
        `permission denied: cannot read ${filename} (mode ${(st.mode & 0o777).toString(8).padStart(3, "0")}, owner uid ${st.uid}, ` +
          `this process runs as uid ${process.getuid?.() ?? "?"}); give the user read access to the file`
      )
    }
    throw e
  }
  try {
    const header = Buffer.alloc(100)
    const n = fs.readSync(fd, header, 0, 100, 0)
    return header.subarray(0, n)
  } finally {
    fs.closeSync(fd)
  }
}

/**
 * Whether `filename` does not exist (`ENOENT`, or a path through a file). Throws an error
 * naming the permission problem and the path when it cannot be known (a folder on the way the
 * user may not search): such a cache is not "missing", and must not be served as empty.
 *
 * @internal
 */
export const isMissingFile = (filename: string): boolean => {
  try {
    fs.statSync(filename)
    return false
  } catch (e) {
    const code = errnoCode(e)
    if (code === "ENOENT" || code === "ENOTDIR") return true
    if (code === "EACCES" || code === "EPERM") {
      throw new Error(
        `permission denied: cannot reach ${filename} (a folder on its path may not be searched by uid ${process.getuid?.() ?? "?"}); give the user access to the folder`
      )
    }
    throw e
  }
}

const isSqliteHeader = (h: Buffer): boolean => h.length === 100 && h.toString("latin1", 0, 16) === "SQLite format 3\u0000"

const exists = (path: string): boolean => fs.existsSync(path)

/**
 * A consistent snapshot of the WAL-mode file `filename` taken without SQLite touching the file or
 * its folder: the file and its `-wal` (when there is one) are copied into a private temporary
 * folder (`os.tmpdir()`, mode 0700) and opened there, where SQLite replays the WAL as after a
 * crash; the copy is made query-only and removed by `close`. Costs a copy of the two files
 * (disk in the temporary folder, time proportional to their size); nothing is held in memory.
 */
const openSnapshot = (filename: string, why: string): ReadOnlyDb => {
  const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-cache-snapshot-"))
  const remove = () => fs.rmSync(dir, { recursive: true, force: true })
  try {
    const copy = nodePath.join(dir, "cache.db")
    // the file first: frames a checkpoint would move into it meanwhile are still in the -wal
    fs.copyFileSync(filename, copy)
    const wal = `${filename}-wal`
    const walBytes = exists(wal) ? fs.statSync(wal).size : 0
    if (walBytes > 0) fs.copyFileSync(wal, `${copy}-wal`)
    const db = new Database(copy, { fileMustExist: true })
    try {
      db.prepare("SELECT count(*) FROM sqlite_master").get()
      db.pragma("query_only = ON")
    } catch (e) {
      db.close()
      throw e
    }
    // the log line already names the file (`call cache PATH: `): said once (issue 18)
    const what = walBytes > 0
      ? `the file and its ${nodePath.basename(filename)}-wal (${walBytes} bytes of answers not yet checkpointed)`
      : "the file"
    return {
      db,
      snapshot: `read a snapshot of ${what}, copied into a private temporary folder: ${why}`,
      close: () => {
        try {
          db.close()
        } finally {
          remove()
        }
      }
    }
  } catch (e) {
    remove()
    throw e
  }
}

/**
 * Opens an existing SQLite file for reading only, creating nothing beside it.
 *
 * A WAL-mode file (a shared cache is one) can be opened read-only by SQLite only when its
 * `-wal` and `-shm` files exist or can be created (sqlite.org/wal.html, "read-only
 * databases"); the `immutable` URI parameter that would avoid it is not available
 * (better-sqlite3 is built without URIs). So when either is missing — in a read-only folder
 * SQLite cannot create them and would refuse or, for root, would create them there — the file
 * is not opened by SQLite at all: a snapshot of the file and its `-wal` is taken
 * ({@link openSnapshot}), so every answer in the `-wal` is served. No writer can be using
 * the file then: a WAL writer keeps a `-shm` beside it. With both present, SQLite reads them as
 * any reader does (it may update the reader marks in the `-shm` it did not create); if it
 * still cannot (a `-shm` it may not read), the snapshot is taken.
 *
 * @param filename the database path
 * @param timeoutMs the busy timeout (ms)
 * @returns the read-only connection; throws SQLite's error when the file is not a database,
 *   and an error naming the path and the permission when the user may not read it
 * @internal
 */
export const openReadOnlyDb = (filename: string, timeoutMs = 5000): ReadOnlyDb => {
  const header = readHeader(filename)
  const wal = isSqliteHeader(header) && (header[18] === 2 || header[19] === 2)
  if (wal && !(exists(`${filename}-wal`) && exists(`${filename}-shm`))) {
    return openSnapshot(
      filename,
      `the file is in WAL mode and its ${exists(`${filename}-shm`) ? "-wal" : "-shm"} file is missing, which SQLite would have to create beside it`
    )
  }
  const d = new Database(filename, { readonly: true, fileMustExist: true, timeout: timeoutMs })
  try {
    d.prepare("SELECT count(*) FROM sqlite_master").get()
    return { db: d, snapshot: undefined, close: () => d.close() }
  } catch (e) {
    d.close()
    const code = errnoCode(e)
    if (!wal || (code !== "SQLITE_READONLY_DIRECTORY" && code !== "SQLITE_CANTOPEN" && code !== "SQLITE_READONLY_CANTINIT")) throw e
    return openSnapshot(filename, `SQLite could not read its -wal and -shm files in place (${code})`)
  }
}
