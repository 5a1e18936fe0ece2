/**
 * Opening an SQLite store file (the SQLite driver's first part): inspection through SQLite only
 * (never a descriptor of ours on a store file), compatibility checks, the writer's OS lock on
 * `<file>.lock`, the synchronous write connection and its close (checkpoint, back to a rollback
 * journal), the `@effect/sql` read client, and migrations. See `SqliteStore` for the design.
 *
 * @since 0.1.0
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import Database from "better-sqlite3"
import { Clock, Effect, type Scope } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import * as StoreFiles from "../../../services/StoreFiles.js"
import { DirectoryError, makeDirectories } from "../../../services/internal/directories.js"
import { ownerOfFile } from "../suite/manifest.js"
import type { SqliteStoreOptions } from "../../SqliteStore.js"
import { KNOWN_FEATURE_LEVELS, type Migration, MIGRATIONS, SCHEMA_VERSION } from "./migrations.js"

/**
 * An open SQLite store as the writer and the reads see it: the file `path`, the write
 * connection `db` (`undefined` when read-only), the `@effect/sql` read client `sql`, the schema
 * features the file has (`indexed`: version 2 read indexes; `numbered`: version 3 pipeline
 * numbers), the error of a write on a read-only open, and `tx` (one synchronous IMMEDIATE
 * transaction on the write connection).
 *
 * @since 0.1.0
 * @category models
 */
export interface SqliteEnv {
  readonly path: string
  readonly readOnly: boolean
  readonly db: Database.Database | undefined
  readonly sql: SqliteClient.SqliteClient
  readonly fromSql: (e: SqlError) => StoreUnavailable
  readonly indexed: boolean
  readonly numbered: boolean
  /** Version 6: visit and active columns, the traversal column and the handoff ledger. */
  readonly visits: boolean
  /** Version 12: token and cost accounting columns on attempts. */
  readonly accounting: boolean
  /**
   * Version 17: a transition's `pipeline.handoff` event is read from its ledger row (`handoffs`
   * rows with an `event_id`), not stored in `events` (see `MIGRATION_0017`).
   */
  readonly handoffEvents: boolean
  /** The feature level in `store_meta` at open. */
  readonly featureLevel: string
  readonly roError: StoreUnavailable
  readonly tx: <A>(f: (d: Database.Database) => A) => Effect.Effect<A, StoreUnavailable>
}

/**
 * What a file holds: whether it exists, its tables, its `store_meta`, and whether it is a
 * half-made store (see {@link isHalfMade}).
 */
export interface Inspection {
  readonly exists: boolean
  readonly tables: ReadonlySet<string>
  readonly meta: ReadonlyMap<string, string>
  readonly halfMade: boolean
}

/**
 * The bookkeeping table `@effect/sql`'s `Migrator` creates (and commits) before it runs the
 * migrations in one transaction: a writer killed in between leaves a file holding only it.
 */
export const MIGRATIONS_TABLE = "effect_sql_migrations"

/**
 * Whether an open database is a store whose creation was interrupted: its only table (beside
 * assay's call cache table) is the migrations bookkeeping table and that table has no rows (the first migration never
 * committed). Such a file holds no data of anyone, so a writer finishes creating it; any other
 * table, or any recorded migration, and it is not half-made.
 */
const isHalfMade = (db: Database.Database, tables: ReadonlySet<string>): boolean => {
  const own = tables.has(CACHE_TABLE) ? tables.size - 1 : tables.size
  if (own !== 1 || !tables.has(MIGRATIONS_TABLE)) return false
  const row = db.prepare(`SELECT count(*) AS n FROM ${MIGRATIONS_TABLE}`).get() as { n: number }
  return row.n === 0
}

/**
 * The table of assay's call cache (`SqliteCallCache`): a file holding only it (a cache opened
 * on the store's path before the store, or a shared cache database) is no other application's
 * database; a writer makes it a store around the table (migration 0010 keeps it as it is).
 */
const CACHE_TABLE = "call_cache"

/** A `StoreUnavailable` naming the store file. */
export const unavailable = (path: string, message: string, cause?: unknown) =>
  new StoreUnavailable(cause === undefined ? { message, path } : { message, path, cause })

/** An SQLite error as text (`CODE: message`). */
export const describeSqlError = (cause: unknown): string => {
  const code = (cause as { code?: unknown } | null)?.code
  const msg = cause instanceof Error ? cause.message : String(cause)
  return typeof code === "string" ? `${code}: ${msg}` : msg
}

/**
 * Why a store's folder refuses the lock file, in words (` (the folder X is on a read-only file
 * system)`), or "" when it is writable or the reason is unknown: SQLite itself only says
 * `SQLITE_CANTOPEN`.
 */
const unwritableFolder = (path: string): string => {
  const dir = nodePath.dirname(nodePath.resolve(path))
  try {
    fs.accessSync(dir, fs.constants.W_OK)
    return ""
  } catch (e) {
    const code = codeOf(e)
    return code === "EROFS"
      ? ` (the folder ${dir} is on a read-only file system)`
      : code === "EACCES" || code === "EPERM"
      ? ` (no permission to write in the folder ${dir})`
      : ""
  }
}

/** The SQLite error code of a thrown value, or "". */
export const codeOf = (cause: unknown): string => {
  const code = (cause as { code?: unknown } | null)?.code
  return typeof code === "string" ? code : ""
}

// ---------------------------------------------------------------------------------------------
// Files of the stores open in this process
// ---------------------------------------------------------------------------------------------

/**
 * The database path of the store open in this process that `path` is a file of (the database
 * itself, or its `-wal`, `-shm`, `-journal` or `.lock` sibling), else `undefined`: the
 * registry of `StoreFiles` (which this layer fills at every open), re-exported here.
 *
 * @since 0.1.0
 * @category files
 */
const openStoreFileOf: (path: string) => string | undefined = StoreFiles.openStoreFileOf

/** The device and inode of a file (stat(2), no descriptor), or `undefined`. */
export const fileKey = (path: string): string | undefined => {
  try {
    const st = fs.statSync(path) // stat(2): no descriptor is opened
    return `${st.dev}:${st.ino}`
  } catch {
    return undefined
  }
}

/**
 * Whether `path` is an SQLite database, asked of SQLite itself (a read-only connection that
 * reads the catalogue), never by reading the file through a descriptor of ours: safe beside open
 * stores (SQLite's own connections in one process share their descriptors and locks). A file of
 * a store open in this process (see {@link openStoreFileOf}) answers without being opened at all:
 * `true` for the database, `false` for its siblings. A missing or unreadable file is `false`.
 *
 * @since 0.1.0
 * @category files
 */
export const isSqliteFile = (path: string): boolean => {
  const open = openStoreFileOf(path)
  if (open !== undefined) return fileKey(open) === fileKey(path)
  let size = 0
  try {
    size = fs.statSync(path).size
  } catch {
    return false
  }
  if (size === 0) return false
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true })
    try {
      db.prepare("SELECT count(*) FROM sqlite_master").get()
      return true
    } finally {
      db.close()
    }
  } catch {
    return false
  }
}

/** Counts `path` as open in this process until the scope closes. */
export const registerOpen = StoreFiles.registerOpen

/**
 * Reads the file's catalogue without writing anything. Everything goes through SQLite (a
 * read-only connection): the file is never opened by a descriptor of ours, so the POSIX locks
 * of this process's connections to it survive (see {@link openStoreFileOf}).
 */
export const inspect = (path: string): Effect.Effect<Inspection, StoreUnavailable> =>
  Effect.try({
    try: (): Inspection => {
      let size = 0
      try {
        size = fs.statSync(path).size
      } catch {
        return { exists: false, tables: new Set(), meta: new Map(), halfMade: false }
      }
      if (size === 0) return { exists: false, tables: new Set(), meta: new Map(), halfMade: false }
      const db = new Database(path, { readonly: true, fileMustExist: true })
      try {
        return catalogue(db)
      } finally {
        db.close()
      }
    },
    catch: (cause) =>
      unavailable(
        path,
        codeOf(cause) === "SQLITE_NOTADB"
          ? `${path} is not a readable assay store: not an SQLite database, or a corrupt one (${describeSqlError(cause)})`
          : `${path} is not a readable assay store: ${describeSqlError(cause)}`,
        cause
      )
  })

/** The tables and `store_meta` of an open database. */
export const catalogue = (db: Database.Database): Inspection => {
  const tables = new Set(
    (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((r) => r.name)
  )
  const meta = new Map<string, string>()
  if (tables.has("store_meta")) {
    for (const r of db.prepare("SELECT key, value FROM store_meta").all() as Array<{ key: string; value: string }>) {
      meta.set(r.key, r.value)
    }
  }
  return { exists: true, tables, meta, halfMade: isHalfMade(db, tables) }
}

/**
 * Refuses another application's database, an unknown feature level or a newer schema. An empty
 * database, a file holding only assay's call cache table and a half-made store (whose creation
 * a killed writer interrupted) pass: a writer
 * creates or finishes them.
 */
export const checkCompatible = (path: string, info: Inspection): Effect.Effect<void, StoreUnavailable> => {
  if (!info.exists) return Effect.void
  if (!info.tables.has("store_meta")) {
    return info.tables.size === 0 || info.halfMade || (info.tables.size === 1 && info.tables.has(CACHE_TABLE))
      ? Effect.void
      : Effect.fail(
        unavailable(
          path,
          `${path} is an SQLite database of another application (no store_meta table; tables: ${
            Array.from(info.tables).slice(0, 5).join(", ")
          }); refusing to touch it`
        )
      )
  }
  const level = info.meta.get("feature_level") ?? "(missing)"
  if (!KNOWN_FEATURE_LEVELS.has(level)) {
    return Effect.fail(
      unavailable(
        path,
        `store ${path} has feature level "${level}", which this build does not support (known: ${
          Array.from(KNOWN_FEATURE_LEVELS).join(", ")
        }); use a newer assay`
      )
    )
  }
  const version = Number(info.meta.get("schema_version") ?? "0")
  if (!(version <= SCHEMA_VERSION)) {
    return Effect.fail(
      unavailable(path, `store ${path} has schema version ${version}, newer than this build's ${SCHEMA_VERSION}`)
    )
  }
  return Effect.void
}

/** Who holds the writer lock, as `store_writer` records it. */
export const holderOf = (path: string): string => {
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true })
    try {
      const row = db.prepare("SELECT pid, host, run_id, since FROM store_writer WHERE id = 1").get() as
        | { pid: number; host: string; run_id: string | null; since: number }
        | undefined
      if (row === undefined) return "another writer (not yet recorded)"
      return `pid ${row.pid} on host ${row.host}${row.run_id === null ? "" : ` (run ${row.run_id})`} since ${
        new Date(row.since).toISOString()
      }`
    } finally {
      db.close()
    }
  } catch {
    return "another writer (holder unknown)"
  }
}

/** How many times a writer retries taking a lock file that its holder removed meanwhile. */
export const LOCK_ATTEMPTS = 8

/**
 * Takes the OS lock of `<path>.lock` (SQLite `BEGIN EXCLUSIVE` on a separate, empty lock
 * database, `timeout` 0): the kernel releases it if the holder dies, even by `kill -9`.
 *
 * The holder removes the file at close (so a closed store leaves no `.lock` beside it), which
 * opens a race: a waiter may lock the file just removed while a third writer creates and locks
 * a new one. So after locking, a probe connection checks that the path still names the file
 * held: its own `BEGIN EXCLUSIVE` must fail as busy (in one process SQLite's connections share a
 * file's locks and see each other's); if it succeeds or the file is gone, the held file is
 * stale and the lock is taken again. The probe is an SQLite connection, whose close keeps the
 * holder's POSIX lock (SQLite defers closing a descriptor of a locked file).
 */
export const lockOnce = (lockPath: string): Database.Database | "stale" => {
  const lock = new Database(lockPath, { timeout: 0 })
  try {
    lock.exec("BEGIN EXCLUSIVE")
  } catch (e) {
    lock.close()
    throw e
  }
  let probe: Database.Database | undefined
  try {
    probe = new Database(lockPath, { timeout: 0, fileMustExist: true })
    probe.exec("BEGIN EXCLUSIVE")
    probe.exec("ROLLBACK")
  } catch (e) {
    if (codeOf(e).startsWith("SQLITE_BUSY")) {
      probe?.close()
      return lock
    }
    // gone (SQLITE_CANTOPEN) or unreadable: the held file is not the one at the path
  }
  probe?.close()
  lock.close()
  return "stale"
}

/**
 * Holds `<path>.lock` with an OS-level lock for the scope and removes the file when the scope
 * closes (while still holding the lock); fails fast when another writer holds it.
 */
export const acquireWriterLock = (path: string): Effect.Effect<Database.Database, StoreUnavailable, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.try({
      try: () => {
        // A writer creates the store's folder (`runs/` in a fresh checkout), as the CLI does.
        makeDirectories(nodePath.dirname(nodePath.resolve(path)))
        for (let i = 0; i < LOCK_ATTEMPTS; i++) {
          const held = lockOnce(`${path}.lock`)
          if (held !== "stale") return held
        }
        throw new Error(`the lock file ${path}.lock kept being replaced while locking it`)
      },
      catch: (cause) =>
        codeOf(cause).startsWith("SQLITE_BUSY")
          ? new StoreUnavailable({
            message: `store ${path} is already open for writing by ${holderOf(path)}; one writer per store (read-only opens are allowed)`,
            path,
            cause,
            locked: true
          })
          : cause instanceof DirectoryError
          ? unavailable(path, `cannot create store ${path}: ${cause.message}`, cause)
          : unavailable(path, `cannot lock store ${path}: ${describeSqlError(cause)}${unwritableFolder(path)}`, cause)
    }),
    (lock) =>
      Effect.sync(() => {
        try {
          fs.rmSync(`${path}.lock`, { force: true }) // unlink(2) while locked: no descriptor opened
        } catch {
          // a read-only folder: the empty lock file stays, harmless (it holds no lock once closed)
        }
        lock.close()
      })
  )

/** The key of `store_meta` that records WAL frames a writer could not checkpoint at close. */
export const WAL_PENDING = "wal_pending_frames"

/** One `wal_checkpoint` of the write connection. */
export const checkpoint = (d: Database.Database, mode: "TRUNCATE" | "PASSIVE") =>
  (d.pragma(`wal_checkpoint(${mode})`) as Array<{ busy: number; log: number; checkpointed: number }>)[0] ??
    { busy: 0, log: 0, checkpointed: 0 }

/**
 * Closes the write connection so that the store is one self-contained file: a
 * `wal_checkpoint(TRUNCATE)` copies every committed page into the database file and empties the
 * WAL, retried every 25 ms (a `Clock` sleep) for up to `waitMs` while a reader in another
 * process is in the middle of a query (readers hold no transaction between queries); then the
 * file goes back to a rollback journal when no other connection is open (SQLite then removes
 * `-wal` and `-shm`).
 *
 * If readers kept the checkpoint from completing, the number of frames still only in the WAL is
 * recorded in `store_meta` (`wal_pending_frames`, itself in the WAL), which `stats` reports as
 * {@link StoreStats.walPendingFrames}: the `-wal` must then be copied with the database.
 */
export const closeWriter = (d: Database.Database, waitMs: number) =>
  Effect.gen(function*() {
    const attempt = Effect.sync(() => {
      try {
        return checkpoint(d, "TRUNCATE")
      } catch {
        return { busy: 1, log: -1, checkpointed: -1 }
      }
    })
    const ok = yield* Effect.try(() => {
      d.pragma("busy_timeout = 0") // waits are paced below, by Clock
      d.prepare("DELETE FROM store_meta WHERE key = ?").run(WAL_PENDING)
      return true
    }).pipe(Effect.orElseSucceed(() => false))
    const start = yield* Clock.currentTimeMillis
    let r = yield* attempt
    while (ok && r.busy !== 0 && (yield* Clock.currentTimeMillis) - start < waitMs) {
      yield* Effect.sleep(25)
      r = yield* attempt
    }
    yield* Effect.sync(() => {
      try {
        if (r.busy === 0) d.pragma("journal_mode = DELETE")
        else if (r.log > r.checkpointed) {
          d.prepare("INSERT INTO store_meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
            .run(WAL_PENDING, String(r.log - r.checkpointed))
          checkpoint(d, "PASSIVE")
        }
      } catch {
        // another connection still reads it: the file stays in WAL mode (its WAL is empty)
      }
      d.close()
    })
  })

/** Whether `path` names an existing directory (never throws). */
const isDirectory = (path: string): boolean => {
  try {
    return fs.statSync(path).isDirectory()
  } catch {
    return false
  }
}

/**
 * Opens the file in the current scope (see the module docs): inspects and checks it, takes the
 * writer lock and opens the write connection (unless read-only), opens the read client and
 * migrates (unless read-only). Fails with `StoreUnavailable` when the file is not an SQLite
 * store, is corrupt, belongs to another application, is from an unknown feature level or a
 * newer schema, is held by another writer, or cannot be opened; with `ConfigError` for
 * `:memory:`, an empty path or a directory (issue path `store`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const openSqlite = (
  options: SqliteStoreOptions
): Effect.Effect<SqliteEnv, StoreUnavailable | ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const path = options.filename
    const readOnly = options.readonly === true
    if (path === ":memory:" || path === "") {
      return yield* new ConfigError({ message: "SqliteStore needs a file path; use MemoryStore for an in-memory store" })
    }
    // a directory is no store file: refused as the mistyped path it is, before anything is
    // created beside it (SQLite would only fail with an I/O error)
    if (isDirectory(path)) {
      const root = fs.existsSync(nodePath.join(path, "manifest.json"))
      const message = root
        ? `${path} is a directory (a suite's output root), not a store file: run the suite with \`assay run -c SUITE_FILE\`, ` +
          "read it with `assay report` on the directory"
        : `${path} is a directory, not a store file: give a file path for the store (for example ${nodePath.join(path, "state.db")})`
      return yield* new ConfigError({ message, issues: [{ path: "store", message, suggestion: "give the path of a store file" }] })
    }

    // a suite root's databases are written only through the suite (its catalog accounts for
    // its members): a plain writer is refused before the lock is even taken
    if (!readOnly && options.suiteRoot === undefined) {
      const owner = ownerOfFile(path)
      if (owner !== undefined) {
        const suite = owner.suiteId === undefined ? "a suite" : `suite "${owner.suiteId}"`
        const message = `${path} belongs to ${suite} (output root ${owner.root}): a plain store must not write into a ` +
          "suite's databases; write through the suite (`assay run -c SUITE_FILE`, with --experiment ID for one member; " +
          "in code `Suite.run` over `SuiteStore.layer`). Reading the file (report, export, a read-only open) is fine"
        return yield* new ConfigError({
          message,
          issues: [{
            path: "store",
            message,
            suggestion: "give another store path for a plain run"
          }]
        })
      }
    }
    // a writer takes the lock first: a second writer starting at the same moment must be told
    // the store is held, not judge a file the first is still creating (half-migrated)
    if (!readOnly) yield* acquireWriterLock(path)
    const info = yield* inspect(path)
    yield* checkCompatible(path, info)
    if (readOnly && !info.exists) {
      return yield* unavailable(path, `no assay store at ${path} (missing or empty file); read-only opens never create one`)
    }
    if (readOnly && info.halfMade) {
      return yield* unavailable(
        path,
        `${path} is an assay store whose creation was interrupted (no run was ever recorded in it); open it for writing (run) to finish creating it`
      )
    }
    if (readOnly && !info.tables.has("store_meta")) {
      return yield* unavailable(path, `${path} is an SQLite file without the assay tables (missing table store_meta): not an initialized store`)
    }

    // --- writer side: lock, then the synchronous write connection -----------------------------
    let db: Database.Database | undefined
    if (!readOnly) {
      db = yield* Effect.acquireRelease(
        Effect.try({
          try: () => {
            const d = new Database(path, { timeout: options.busyTimeoutMs ?? 5000 })
            d.pragma("journal_mode = WAL")
            d.pragma("synchronous = NORMAL")
            // statement journals (multi-row upserts) in memory: as temporary files they were
            // written on every group commit (a 20k-pipeline run wrote 713 MB with them, 266 MB without)
            d.pragma("temp_store = MEMORY")
            // group commits are small and frequent: keep hot index pages cached (64 MiB) and
            // checkpoint the WAL every ~40 MB instead of every ~4 MB (fewer fsyncs)
            d.pragma("cache_size = -65536")
            d.pragma("wal_autocheckpoint = 10000")
            return d
          },
          catch: (cause) => unavailable(path, `cannot open store ${path}: ${describeSqlError(cause)}`, cause)
        }),
        (d) => closeWriter(d, options.busyTimeoutMs ?? 5000)
      )
      yield* registerOpen(path)
    }

    // --- read side: @effect/sql ----------------------------------------------------------------
    const sql = yield* SqliteClient.make({ filename: path, readonly: readOnly, disableWAL: readOnly }).pipe(
      Effect.provide(Reactivity.layer),
      Effect.catchAllDefect((cause) => Effect.fail(unavailable(path, `cannot open store ${path}: ${describeSqlError(cause)}`, cause)))
    )
    if (readOnly) {
      // a reader's queries are scans and short index walks: a 2 MiB page cache (SQLite's own
      // default; the driver's is 16 MiB) keeps a report of a large store small in memory
      yield* sql.unsafe("PRAGMA cache_size = -2048").pipe(Effect.mapError((e) => unavailable(path, `cannot open store ${path}: ${describeSqlError(e.cause)}`, e)))
      yield* registerOpen(path)
    }
    const fromSql = (e: SqlError) => unavailable(path, `store ${path}: ${describeSqlError(e.cause)}`, e)

    // a read-only open of an older store keeps its version: reads fall back to slower queries
    let schemaVersion = Number(info.meta.get("schema_version") ?? "0")
    let featureLevel = info.meta.get("feature_level") ?? "base"
    if (!readOnly) {
      const migration = ([, statements, data]: Migration) =>
        Effect.gen(function*() {
          const client = yield* SqlClient.SqlClient
          for (const statement of statements) yield* client.unsafe(statement)
          if (data !== undefined) yield* data(client, { suiteDatabase: options.suiteRoot !== undefined })
        })
      yield* Migrator.make({})({
        loader: Migrator.fromRecord(Object.fromEntries(MIGRATIONS.map((m) => [m[0], migration(m)])))
      }).pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.mapError((cause) => unavailable(path, `cannot migrate store ${path}: ${String(cause.message)}`, cause))
      )
      // re-check after migrating (a concurrent opener cannot exist: we hold the lock), through
      // the write connection: never a descriptor of ours on a file SQLite holds locks on
      const migrated = yield* Effect.try({
        try: () => catalogue(db!),
        catch: (cause) => unavailable(path, `cannot read store ${path}: ${describeSqlError(cause)}`, cause)
      })
      yield* checkCompatible(path, migrated)
      schemaVersion = Number(migrated.meta.get("schema_version") ?? "0")
      featureLevel = migrated.meta.get("feature_level") ?? featureLevel
    }
    /** Version 2 has the read-side indexes (`stats` percentiles by rank, covering counts). */
    const indexed = schemaVersion >= 2
    /**
     * Version 3 numbers pipelines (`pno`) and indexes child rows by that number; a read-only
     * open of an older store reads by `pipeline_id` (see {@link byPipeline}).
     */
    const numbered = schemaVersion >= 3
    const visits = schemaVersion >= 6
    const accounting = schemaVersion >= 12
    const handoffEvents = schemaVersion >= 17

    const w = db
    const roError = unavailable(path, `store ${path} is open read-only`)
    /** Runs `f` as one synchronous IMMEDIATE transaction on the write connection. */
    // one transaction wrapper, prepared once (better-sqlite3 builds its BEGIN/COMMIT per wrapper)
    const runTx = w === undefined ? undefined : w.transaction((f: (d: Database.Database) => unknown) => f(w))
    const tx = <A>(f: (d: Database.Database) => A): Effect.Effect<A, StoreUnavailable> =>
      w === undefined || runTx === undefined
        ? Effect.fail(roError)
        : Effect.try({
          try: () => runTx.immediate(f) as A,
          catch: (cause) => unavailable(path, `write to store ${path} failed: ${describeSqlError(cause)}`, cause)
        })
    return { path, readOnly, db: w, sql, fromSql, indexed, numbered, visits, accounting, handoffEvents, featureLevel, roError, tx }
  })
