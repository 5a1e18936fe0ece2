/**
 * The embedded default store: one SQLite file.
 *
 * - **Reads** go through `@effect/sql` (`@effect/sql-sqlite-node`'s `SqliteClient`), as
 *   keyset-paged queries (the client has no `.stream`).
 * - **Writes** go through one dedicated better-sqlite3 connection owned by the store, each
 *   transaction run synchronously (`BEGIN IMMEDIATE … COMMIT` without yielding), fed by the
 *   group-commit writer and the write-behind buffer, with cached multi-row prepared
 *   statements. `@effect/sql` costs ~35 µs per statement behind a one-permit semaphore, which
 *   cannot reach half of raw better-sqlite3's speed; and two writing connections in one
 *   thread could deadlock (an `@effect/sql` transaction spans fiber yields while a
 *   synchronous writer would block the thread on its lock), so every write uses the one
 *   synchronous connection. See docs/store.md.
 * - **Schema** through `Migrator.make({})` + `Migrator.fromRecord`; `store_meta` holds the
 *   schema version and feature level (`base`); an unknown level or a newer version is refused.
 *   Version 3 numbers pipelines at admission (`pno`, the rowid of `pipelines`) and keys every
 *   child table and per-pipeline index by that number, so a group commit touches the few pages
 *   of the pipelines in flight instead of random pages everywhere (see `MIGRATION_0003`). The
 *   writer resolves ids to numbers through a bounded map of unfinished pipelines. Reads by
 *   pipeline id go through `pno = (SELECT pno … WHERE pipeline_id = ?)`; child rows are
 *   grouped in admission order. A read-only open of a version 1–2 store reads by `pipeline_id`
 *   (and groups child rows by id), never migrating it.
 * - **One writer**: `<file>.lock` is held with an OS file lock (SQLite `BEGIN EXCLUSIVE` on a
 *   separate lock database), released by the kernel if the holder dies (even `kill -9`), and
 *   removed by the holder at close. A second writer fails fast naming the holder recorded in
 *   `store_writer`. Read-only opens take no lock and never migrate or write.
 * - **No descriptor of ours on a store file**: closing any descriptor of a file drops every
 *   POSIX lock the process holds on it, SQLite's included, after which an outside read-write
 *   connection may checkpoint and delete the live WAL. Files are inspected through SQLite only
 *   (see {@link openStoreFileOf}, {@link isSqliteFile}).
 * - WAL while a writer is open, `synchronous = NORMAL` (a commit survives a process crash; an
 *   OS crash or power loss may lose the last commits, never corrupt the file); on close the
 *   writer checkpoints the WAL into the file (`TRUNCATE`, waiting a bounded time for readers)
 *   and goes back to a rollback journal when it is alone, so a closed store is one
 *   self-contained file (what could not be checkpointed is recorded and reported).
 * - **Memory bounded by bytes**: group commits and the write queue have byte budgets, and big
 *   payloads are inserted one row per statement (see `insertArtifacts`).
 *
 * @since 0.1.0
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import Database from "better-sqlite3"
import { Chunk, Clock, Effect, Layer, Option, type Scope, Stream } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import * as os from "node:os"
import { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import {
  ArtifactRecord,
  type PipelineRecord,
  type PipelineState,
  type TaskRecord,
  type RunRecord,
  trusted
} from "../domain/Records.js"
import { ArtifactBackend, type ArtifactBackendService } from "../services/ArtifactBackend.js"
import type {
  CompletionBucket,
  ErrorRow,
  EventFilter,
  Latency,
  LoadedArtifact,
  PipelineBundle,
  PipelinesPage,
  PlacedArtifact,
  SpecCount,
  NewArtifact,
  NewAttempt,
  NewEvent,
  PipelineFields,
  PipelinePatch,
  StoreDriver,
  StoreOptions,
  StoreService,
  StoreStats,
  StoreWrite
} from "../services/Store.js"
import { errorRowOf, makeWith, PAGE_SIZE, Store } from "../services/Store.js"
import * as StoreFiles from "../services/StoreFiles.js"
import { layerInline } from "./ArtifactBackends.js"
import { settleToPatch } from "../services/internal/store/ops.js"
import {
  ARTIFACT_META,
  ATTEMPT_COLUMNS,
  KNOWN_FEATURE_LEVELS,
  type Migration,
  MIGRATIONS,
  PIPELINE_COLUMNS,
  pipelineParams,
  SCHEMA_VERSION,
  TASK_COLUMNS,
  taskParams,
  TIMED_TERMINAL,
  toArtifact,
  toArtifactValues,
  UNADMITTED_PNO,
  toAttempt,
  toEvent,
  toMetric,
  toPipeline,
  toResource,
  toRun,
  toTask
} from "./internal/sqlite/schema.js"
import {
  artifactRecordOf,
  checkOptions,
  latencyOf,
  loadPayload,
  quantileAt,
  quantileRanks
} from "../services/internal/store/shared.js"

/**
 * Options of the SQLite store.
 *
 * - `filename`: path of the store file (created when missing, unless read-only);
 * - `readonly`: open for reading only (report/watch/serve/export): no lock, no migration, no
 *   write; every write operation fails with `StoreUnavailable`;
 * - `busyTimeoutMs`: how long a statement waits for another process's lock, and how long the
 *   writer's close waits for readers before giving up on emptying the WAL (ms, default 5000).
 *
 * @since 0.1.0
 * @category models
 */
export interface SqliteStoreOptions extends StoreOptions {
  readonly filename: string
  readonly readonly?: boolean | undefined
  readonly busyTimeoutMs?: number | undefined
}

interface Inspection {
  readonly exists: boolean
  readonly tables: ReadonlySet<string>
  readonly meta: ReadonlyMap<string, string>
}

const unavailable = (path: string, message: string, cause?: unknown) =>
  new StoreUnavailable(cause === undefined ? { message, path } : { message, path, cause })

const describeSqlError = (cause: unknown): string => {
  const code = (cause as { code?: unknown } | null)?.code
  const msg = cause instanceof Error ? cause.message : String(cause)
  return typeof code === "string" ? `${code}: ${msg}` : msg
}

const codeOf = (cause: unknown): string => {
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
export const openStoreFileOf: (path: string) => string | undefined = StoreFiles.openStoreFileOf

const fileKey = (path: string): string | undefined => {
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
const registerOpen = StoreFiles.registerOpen

/**
 * Reads the file's catalogue without writing anything. Everything goes through SQLite (a
 * read-only connection): the file is never opened by a descriptor of ours, so the POSIX locks
 * of this process's connections to it survive (see {@link openStoreFileOf}).
 */
const inspect = (path: string): Effect.Effect<Inspection, StoreUnavailable> =>
  Effect.try({
    try: (): Inspection => {
      let size = 0
      try {
        size = fs.statSync(path).size
      } catch {
        return { exists: false, tables: new Set(), meta: new Map() }
      }
      if (size === 0) return { exists: false, tables: new Set(), meta: new Map() }
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
const catalogue = (db: Database.Database): Inspection => {
  const tables = new Set(
    (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((r) => r.name)
  )
  const meta = new Map<string, string>()
  if (tables.has("store_meta")) {
    for (const r of db.prepare("SELECT key, value FROM store_meta").all() as Array<{ key: string; value: string }>) {
      meta.set(r.key, r.value)
    }
  }
  return { exists: true, tables, meta }
}

const checkCompatible = (path: string, info: Inspection): Effect.Effect<void, StoreUnavailable> => {
  if (!info.exists) return Effect.void
  if (!info.tables.has("store_meta")) {
    return info.tables.size === 0
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

const holderOf = (path: string): string => {
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
const LOCK_ATTEMPTS = 8

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
const lockOnce = (lockPath: string): Database.Database | "stale" => {
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
const acquireWriterLock = (path: string) =>
  Effect.acquireRelease(
    Effect.try({
      try: () => {
        // A writer creates the store's folder (`runs/` in a fresh checkout), as the CLI does.
        fs.mkdirSync(nodePath.dirname(nodePath.resolve(path)), { recursive: true })
        for (let i = 0; i < LOCK_ATTEMPTS; i++) {
          const held = lockOnce(`${path}.lock`)
          if (held !== "stale") return held
        }
        throw new Error(`the lock file ${path}.lock kept being replaced while locking it`)
      },
      catch: (cause) =>
        codeOf(cause).startsWith("SQLITE_BUSY")
          ? unavailable(path, `store ${path} is already open for writing by ${holderOf(path)}; one writer per store (read-only opens are allowed)`, cause)
          : unavailable(path, `cannot lock store ${path}: ${describeSqlError(cause)}`, cause)
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
const WAL_PENDING = "wal_pending_frames"

const checkpoint = (d: Database.Database, mode: "TRUNCATE" | "PASSIVE") =>
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
const closeWriter = (d: Database.Database, waitMs: number) =>
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

const toBuffer = (u: Uint8Array | null): Buffer | null =>
  u === null ? null : Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength)

const toBytes = (u: unknown): Uint8Array | null =>
  u instanceof Uint8Array ? new Uint8Array(u.buffer, u.byteOffset, u.byteLength) : null

const CHUNKS = [128, 64, 32, 16, 8, 4, 2, 1]

/** A multi-row INSERT helper with one cached statement per chunk size. */
const makeInserter = (db: Database.Database, table: string, columns: ReadonlyArray<string>, suffix = "") => {
  const cache = new Map<number, Database.Statement>()
  const row = `(${columns.map(() => "?").join(",")})`
  const stmt = (k: number) => {
    let s = cache.get(k)
    if (s === undefined) {
      s = db.prepare(`INSERT INTO ${table} (${columns.join(",")}) VALUES ${Array(k).fill(row).join(",")} ${suffix}`)
      cache.set(k, s)
    }
    return s
  }
  return (rows: ReadonlyArray<ReadonlyArray<unknown>>, returned?: Array<unknown>) => {
    let i = 0
    while (i < rows.length) {
      const left = rows.length - i
      const k = CHUNKS.find((c) => c <= left) ?? 1
      const params: Array<unknown> = []
      for (let j = i; j < i + k; j++) for (const v of rows[j]!) params.push(v)
      if (returned === undefined) stmt(k).run(params)
      else for (const r of stmt(k).all(params)) returned.push(r)
      i += k
    }
  }
}

/** Columns an upsert never overwrites with `NULL` (a re-admission that does not know it keeps it). */
const KEEP_KNOWN = new Set(["repeat"])

const upsertSuffix = (keys: ReadonlyArray<string>, columns: ReadonlyArray<string>) =>
  `ON CONFLICT(${keys.join(", ")}) DO UPDATE SET ${
    columns.filter((c) => !keys.includes(c)).map((c) =>
      KEEP_KNOWN.has(c) ? `${c} = coalesce(excluded.${c}, ${c})` : `${c} = excluded.${c}`
    ).join(", ")
  }`

const ARTIFACT_COLUMNS = [
  "artifact_id", "pno", "pipeline_id", "run_id", "seq", "task_name", "type_name", "codec", "digest", "size", "storage",
  "blob_ref", "payload", "is_final", "created_at"
]
/** Index of `payload` in {@link ARTIFACT_COLUMNS}. */
const ARTIFACT_PAYLOAD = ARTIFACT_COLUMNS.indexOf("payload")

/** Payloads of at least this many bytes (256 KiB) are inserted one row per statement. */
const BIG_PAYLOAD = 256 * 1024

/** Artifact ids bound in one `artifact_id IN (…)` payload read (below SQLite's 32,766 variables). */
const ROWID_CHUNK = 5000

const EVENT_COLUMNS = ["event_id", "kind", "pno", "pipeline_id", "run_id", "data", "ts"]

/** How many pipeline numbers the writer keeps in memory (admitted, not yet terminal). */
const PNO_CACHE = 65_536

/**
 * The pipeline patch writer: one cached UPDATE per patch shape (which fields are present), so
 * that a cursor-only checkpoint SETs no indexed column and SQLite leaves every index of
 * `pipelines` alone (it maintains the indexes whose columns appear in the SET list).
 */
const makePatcher = (db: Database.Database) => {
  const cache = new Map<number, Database.Statement>()
  return (pno: number, p: PipelinePatch): void => {
    const sets: Array<string> = []
    const params: Array<unknown> = []
    let shape = 0
    const set = (bit: number, column: string, value: unknown) => {
      shape |= bit
      sets.push(`${column} = ?`)
      params.push(value)
    }
    if (p.state !== undefined) set(1, "state", p.state)
    if (p.nTasksDone !== undefined) set(2, "n_tasks_done", p.nTasksDone)
    if (p.runId !== undefined) set(4, "run_id", p.runId)
    if (p.startedAt !== undefined) set(8, "started_at", p.startedAt)
    if (p.endedAt !== undefined) set(16, "ended_at", p.endedAt)
    if (p.error !== undefined) {
      set(32, "failed_task", p.error?.failedTask ?? null)
      sets.push("error_type = ?", "error_message = ?", "error_class = ?")
      params.push(p.error?.errorType ?? null, p.error?.errorMessage ?? null, p.error?.errorClass ?? null)
    }
    if (p.attemptsDelta !== undefined && p.attemptsDelta !== 0) {
      shape |= 64
      sets.push("attempts_total = attempts_total + ?")
      params.push(p.attemptsDelta)
    }
    sets.push("updated_at = ?")
    params.push(p.updatedAt, pno)
    let stmt = cache.get(shape)
    if (stmt === undefined) {
      stmt = db.prepare(`UPDATE pipelines SET ${sets.join(", ")} WHERE pno = ?`)
      cache.set(shape, stmt)
    }
    stmt.run(params)
  }
}

const jsonOrNull = (u: unknown): string | null => (u === undefined ? null : JSON.stringify(u))

/**
 * Opens the SQLite store in the current scope, using the {@link ArtifactBackend} in context.
 * Closing the scope flushes buffered facts, commits queued writes, releases the connections
 * and the writer lock; a failed final flush is re-raised as a defect carrying the
 * `StoreUnavailable` (call `flush` before closing to handle it as a typed error).
 *
 * Fails with `StoreUnavailable` when the file is not an SQLite store, is corrupt, belongs to
 * another application, is from an unknown feature level or newer schema, is held by another
 * writer, or cannot be opened; with `ConfigError` on invalid options.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeDriver = (options: SqliteStoreOptions) =>
  Effect.gen(function*() {
    const backend: ArtifactBackendService = yield* ArtifactBackend
    const path = options.filename
    const readOnly = options.readonly === true
    if (path === ":memory:" || path === "") {
      return yield* new ConfigError({ message: "SqliteStore needs a file path; use MemoryStore for an in-memory store" })
    }

    const info = yield* inspect(path)
    yield* checkCompatible(path, info)
    if (readOnly && !info.exists) {
      return yield* unavailable(path, `no assay store at ${path} (missing or empty file); read-only opens never create one`)
    }
    if (readOnly && !info.tables.has("store_meta")) {
      return yield* unavailable(path, `${path} is an SQLite file without the assay tables (missing table store_meta): not an initialized store`)
    }

    // --- writer side: lock, then the synchronous write connection -----------------------------
    let db: Database.Database | undefined
    if (!readOnly) {
      yield* acquireWriterLock(path)
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
    if (readOnly) yield* registerOpen(path)
    const fromSql = (e: SqlError) => unavailable(path, `store ${path}: ${describeSqlError(e.cause)}`, e)

    // a read-only open of an older store keeps its version: reads fall back to slower queries
    let schemaVersion = Number(info.meta.get("schema_version") ?? "0")
    if (!readOnly) {
      const migration = ([, statements, data]: Migration) =>
        Effect.gen(function*() {
          const client = yield* SqlClient.SqlClient
          for (const statement of statements) yield* client.unsafe(statement)
          if (data !== undefined) yield* data(client)
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
    }
    /** Version 2 has the read-side indexes (`stats` percentiles by rank, covering counts). */
    const indexed = schemaVersion >= 2
    /**
     * Version 3 numbers pipelines (`pno`) and indexes child rows by that number; a read-only
     * open of an older store reads by `pipeline_id` (see {@link byPipeline}).
     */
    const numbered = schemaVersion >= 3

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

    // --- prepared write statements ------------------------------------------------------------
    let nextAttemptId = 1
    let nextEventId = 1
    let nextArtifactId = 1
    let write: {
      pipelines: (rows: ReadonlyArray<ReadonlyArray<unknown>>, returned: Array<unknown>) => void
      tasks: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      artifacts: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      attempts: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      events: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      patch: (pno: number, p: PipelinePatch) => void
      pnoOf: Database.Statement
      adopt: ReadonlyArray<Database.Statement>
      clearFinal: Database.Statement
      latestAt: Database.Statement
      setFinal: Database.Statement
    } | undefined
    /** Some child row has {@link UNADMITTED_PNO} (checked at open, set when one is written). */
    let unadmitted = false
    if (w !== undefined) {
      const openedAt = yield* Clock.currentTimeMillis
      yield* Effect.try({
        try: () => {
          const max = (t: string, c: string) => Number((w.prepare(`SELECT coalesce(max(${c}), 0) AS m FROM ${t}`).get() as { m: number }).m)
          nextAttemptId = max("attempts", "attempt_id") + 1
          nextEventId = max("events", "event_id") + 1
          nextArtifactId = max("artifacts", "artifact_id") + 1
          const CHILDREN = ["tasks", "attempts", "artifacts", "events"]
          unadmitted = CHILDREN.some((t) => w.prepare(`SELECT 1 FROM ${t} WHERE pno = ${UNADMITTED_PNO} LIMIT 1`).get() !== undefined)
          w.prepare(
            "INSERT INTO store_writer (id, pid, host, run_id, since) VALUES (1, ?, ?, NULL, ?) ON CONFLICT(id) DO UPDATE SET pid = excluded.pid, host = excluded.host, run_id = NULL, since = excluded.since"
          ).run(process.pid, os.hostname(), openedAt)
          write = {
            pipelines: makeInserter(
              w,
              "pipelines",
              PIPELINE_COLUMNS,
              `${upsertSuffix(["pipeline_id"], PIPELINE_COLUMNS)} RETURNING pipeline_id, pno, state`
            ),
            // a task run id names its pipeline and seq, so (pno, seq, task_run_id) is as unique
            tasks: makeInserter(w, "tasks", TASK_COLUMNS, upsertSuffix(["pno", "seq", "task_run_id"], TASK_COLUMNS)),
            artifacts: makeInserter(w, "artifacts", ARTIFACT_COLUMNS),
            attempts: makeInserter(w, "attempts", ATTEMPT_COLUMNS),
            events: makeInserter(w, "events", EVENT_COLUMNS),
            patch: makePatcher(w),
            pnoOf: w.prepare("SELECT pno FROM pipelines WHERE pipeline_id = ?").pluck(),
            adopt: CHILDREN.map((t) =>
              w.prepare(`UPDATE ${t} SET pno = ? WHERE pno = ${UNADMITTED_PNO} AND pipeline_id = ?`)
            ),
            clearFinal: w.prepare(
              "UPDATE artifacts SET is_final = 0 WHERE pno = ? AND pipeline_id = ? AND is_final = 1 AND artifact_id <> ?"
            ),
            latestAt: w.prepare(
              "SELECT max(artifact_id) AS id FROM artifacts WHERE pno = ? AND pipeline_id = ? AND seq = ?"
            ),
            setFinal: w.prepare("UPDATE artifacts SET is_final = 1 WHERE artifact_id = ? AND is_final = 0")
          }
        },
        catch: (cause) => unavailable(path, `cannot prepare store ${path}: ${describeSqlError(cause)}`, cause)
      })
    }

    /**
     * Pipeline numbers the writer has seen (admitted or looked up) and whose pipeline is not
     * terminal yet, in insertion order: at most {@link PNO_CACHE} (the oldest is dropped; a
     * miss costs one lookup in the unique index on `pipeline_id`).
     */
    const pnos = new Map<string, number>()
    const remember = (pipelineId: string, pno: number) => {
      if (pnos.size >= PNO_CACHE && !pnos.has(pipelineId)) {
        const oldest = pnos.keys().next()
        if (oldest.done !== true) pnos.delete(oldest.value)
      }
      pnos.set(pipelineId, pno)
    }
    /** The number of `pipelineId`, or {@link UNADMITTED_PNO} (runs inside a write transaction). */
    const pnoOf = (pipelineId: string): number => {
      const known = pnos.get(pipelineId)
      if (known !== undefined) return known
      const found = write!.pnoOf.get(pipelineId) as number | undefined
      if (found === undefined) {
        unadmitted = true
        return UNADMITTED_PNO
      }
      remember(pipelineId, found)
      return found
    }
    const isTerminal = (state: PipelinePatch["state"]) => state === "succeeded" || state === "failed" || state === "interrupted"
    /** Applies a patch by pipeline number; forgets the number once the pipeline is terminal. */
    const patchPipeline = (pipelineId: string, patch: PipelinePatch) => {
      const known = pnos.get(pipelineId)
      const pno = known ?? (write!.pnoOf.get(pipelineId) as number | undefined)
      if (pno === undefined) return
      write!.patch(pno, patch)
      if (isTerminal(patch.state)) pnos.delete(pipelineId)
      else if (known === undefined) remember(pipelineId, pno)
    }

    const attemptRow = (a: NewAttempt): Array<unknown> => [
      nextAttemptId++, pnoOf(a.pipelineId), a.pipelineId, a.runId, a.taskRunId, a.taskName, a.seq, a.attemptNo, a.outcome,
      a.errorClass, a.errorType, a.errorMessage, jsonOrNull(a.decision), JSON.stringify(a.leaseIds), a.startedAt, a.endedAt,
      a.durationMs
    ]
    const eventRow = (e: NewEvent): Array<unknown> => [
      nextEventId++, e.kind, e.pipelineId === null ? null : pnoOf(e.pipelineId), e.pipelineId, e.runId, jsonOrNull(e.data), e.ts
    ]
    const artifactRow = (id: number, pno: number, a: NewArtifact, placed: PlacedArtifact): Array<unknown> => [
      id, pno, a.pipelineId, a.runId, a.seq, a.taskName, a.typeName, a.codec, a.digest, a.payload.byteLength,
      placed.storage, placed.blobRef, toBuffer(placed.payload), a.isFinal ? 1 : 0, a.createdAt
    ]
    /** Inserts (or replaces) pipeline rows, learns their numbers, adopts their unadmitted rows. */
    const admitRows = (ps: ReadonlyArray<PipelineFields>) => {
      const returned: Array<unknown> = []
      write!.pipelines(ps.map(pipelineParams), returned)
      for (const r of returned as Array<{ pipeline_id: string; pno: number; state: PipelineState }>) {
        if (!isTerminal(r.state)) remember(r.pipeline_id, r.pno)
        if (unadmitted) for (const s of write!.adopt) s.run(r.pno, r.pipeline_id)
      }
    }
    /** Appends an artifact row (and clears the older final one when it is final). */
    const addArtifact = (
      rows: Array<Array<unknown>>,
      ordered: Array<() => void>,
      a: NewArtifact,
      placed: PlacedArtifact
    ): number => {
      const id = nextArtifactId++
      const pno = pnoOf(a.pipelineId)
      rows.push(artifactRow(id, pno, a, placed))
      if (a.isFinal) ordered.push(() => write!.clearFinal.run(pno, a.pipelineId, id))
      return id
    }
    /**
     * Inserts artifact rows: small ones in multi-row statements, each payload of at least
     * {@link BIG_PAYLOAD} bytes in a statement of its own, so that SQLite holds one big bound
     * copy at a time (better-sqlite3 binds blobs as `SQLITE_TRANSIENT`: SQLite copies them, and
     * a 16-row statement of 4 MB outputs held 64 MB of copies at once).
     */
    const insertArtifacts = (rows: ReadonlyArray<ReadonlyArray<unknown>>) => {
      const small: Array<ReadonlyArray<unknown>> = []
      for (const r of rows) {
        const payload = r[ARTIFACT_PAYLOAD] as Buffer | null
        if (payload !== null && payload.byteLength >= BIG_PAYLOAD) write!.artifacts([r])
        else small.push(r)
      }
      if (small.length > 0) write!.artifacts(small)
    }
    const commit = (ops: ReadonlyArray<StoreWrite>) =>
      tx(() => {
        const s = write!
        // pipelines first (as before), so that the child rows below resolve their numbers
        for (const op of ops) if (op._tag === "Admit" && op.pipelines.length > 0) admitRows(op.pipelines)
        const tasks: Array<Array<unknown>> = []
        const artifacts: Array<Array<unknown>> = []
        const attempts: Array<Array<unknown>> = []
        const events: Array<Array<unknown>> = []
        const ordered: Array<() => void> = []
        for (const op of ops) {
          switch (op._tag) {
            case "Admit":
              for (const [a, placed] of op.seeds) addArtifact(artifacts, ordered, a, placed)
              break
            case "Checkpoint": {
              const u = op.unit
              if (u.artifact !== undefined && op.placed !== undefined) addArtifact(artifacts, ordered, u.artifact, op.placed)
              if (u.task !== undefined) tasks.push(taskParams(u.task, pnoOf(u.task.pipelineId)))
              for (const a of u.attempts ?? []) attempts.push(attemptRow(a))
              for (const e of u.events ?? []) events.push(eventRow(e))
              if (u.pipeline !== undefined) {
                const patch = u.pipeline
                ordered.push(() => patchPipeline(u.pipelineId, patch))
              }
              break
            }
            case "PutTask":
              tasks.push(taskParams(op.task, pnoOf(op.task.pipelineId)))
              break
            case "Patch": {
              ordered.push(() => patchPipeline(op.pipelineId, op.patch))
              break
            }
            case "Settle": {
              const patch = settleToPatch(op.settle)
              ordered.push(() => patchPipeline(op.pipelineId, patch))
              break
            }
            case "MarkFinal":
              ordered.push(() => {
                const pno = pnoOf(op.pipelineId)
                const row = s.latestAt.get(pno, op.pipelineId, op.seq) as { id: number | null }
                if (row.id === null) return
                s.setFinal.run(row.id)
                s.clearFinal.run(pno, op.pipelineId, row.id)
              })
              break
          }
        }
        if (tasks.length > 0) s.tasks(tasks)
        if (artifacts.length > 0) insertArtifacts(artifacts)
        if (attempts.length > 0) s.attempts(attempts)
        if (events.length > 0) s.events(events)
        for (const f of ordered) f()
      })

    const q = <A>(e: Effect.Effect<A, SqlError>) => Effect.mapError(e, fromSql)
    const rows = (e: Effect.Effect<ReadonlyArray<unknown>, SqlError>) =>
      q(e as Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>)

    const refine = (a: ArtifactRecord): Effect.Effect<ArtifactRecord, StoreUnavailable> =>
      a.storage === "blob" && a.blobRef !== null
        ? Effect.map(backend.exists(a.blobRef), (ok) => ok ? a : trusted(ArtifactRecord, { ...a, available: false }))
        : Effect.succeed(a)

    /** Keyset pager: `fetch(cursor)` returns one page (at most PAGE_SIZE rows) after `cursor`. */
    const pager = <C, A>(
      fetch: (cursor: C | undefined) => Effect.Effect<ReadonlyArray<Record<string, unknown>>, StoreUnavailable>,
      cursorOf: (row: Record<string, unknown>) => C,
      map: (row: Record<string, unknown>) => A
    ): Stream.Stream<A, StoreUnavailable> =>
      Stream.paginateChunkEffect(undefined as C | undefined, (cursor) =>
        Effect.map(fetch(cursor), (page) => {
          const last = page[page.length - 1]
          return [
            Chunk.unsafeFromArray(page.map(map)),
            page.length < PAGE_SIZE || last === undefined ? Option.none() : Option.some(cursorOf(last) as C | undefined)
          ] as const
        }))

    /**
     * The rows of one pipeline in a child table. Version 3: by its number (the leading column
     * of every per-pipeline index), or among the unadmitted rows when it has none; older
     * versions: by `pipeline_id`.
     */
    const byPipeline = (pipelineId: string) =>
      numbered
        ? sql`pno = coalesce((SELECT pno FROM pipelines WHERE pipeline_id = ${pipelineId}), ${UNADMITTED_PNO}) AND pipeline_id = ${pipelineId}`
        : sql`pipeline_id = ${pipelineId}`
    /** The rows of admitted pipelines among `ids` in a child table (as {@link byPipeline}). */
    const byPipelines = (ids: ReadonlyArray<string>) =>
      numbered
        ? sql`pno IN (SELECT pno FROM pipelines WHERE ${sql.in("pipeline_id", ids)})`
        : sql.in("pipeline_id", ids)
    /** Pipeline grouping of child-table orders: admission order (version 3) or pipeline id. */
    const pipelineKey = numbered ? "pno" : "pipeline_id"

    const eventConds = (f: EventFilter) => {
      const c = []
      if (f.pipelineId !== undefined) c.push(byPipeline(f.pipelineId))
      if (f.runId !== undefined) c.push(sql`run_id = ${f.runId}`)
      if (f.kind !== undefined) c.push(sql`kind = ${f.kind}`)
      return c
    }

    const getRun = (runId: string) =>
      Effect.map(rows(sql`SELECT * FROM runs WHERE run_id = ${runId}`), (r) => Option.map(Option.fromNullable(r[0]), toRun))


    const PERCENTILES = [0.5, 0.95, 0.99] as const
    /**
     * p50/p95/p99 of `endedAt - startedAt` over terminal pipelines. Schema version 2: a count
     * and, per needed rank, one `LIMIT 1 OFFSET k` read of the covering partial index on the
     * duration (from whichever end is nearer), so only a few values leave SQLite. Version 1
     * (a read-only open of an un-migrated store): every duration, sorted by SQLite.
     */
    const latency = (runId: string | undefined): Effect.Effect<Latency | null, StoreUnavailable> =>
      Effect.gen(function*() {
        const where = runId === undefined
          ? sql`${sql.literal(TIMED_TERMINAL)}`
          : sql`run_id = ${runId} AND ${sql.literal(TIMED_TERMINAL)}`
        if (!indexed) {
          const durations = yield* q(sql`SELECT ended_at - started_at AS d FROM pipelines WHERE ${where} ORDER BY d`.values)
          return latencyOf(durations.map((d) => Number(d[0])))
        }
        const [c] = yield* rows(sql`SELECT count(*) AS n FROM pipelines WHERE ${where}`)
        const n = Number(c?.n ?? 0)
        if (n === 0) return null
        const values = new Map<number, number>()
        for (const k of quantileRanks(n, PERCENTILES)) {
          const fromTop = k > (n - 1) / 2
          const [r] = yield* rows(
            sql`SELECT ended_at - started_at AS d FROM pipelines WHERE ${where} ORDER BY ended_at - started_at ${
              sql.literal(fromTop ? "DESC" : "ASC")
            } LIMIT 1 OFFSET ${fromTop ? n - 1 - k : k}`
          )
          values.set(k, Number(r?.d ?? 0))
        }
        const at = (k: number) => values.get(k) ?? 0
        return { p50: quantileAt(n, at, 0.5), p95: quantileAt(n, at, 0.95), p99: quantileAt(n, at, 0.99) }
      })

    /** Loads the payloads asked for (inline bytes from the row, blobs from the backend). */
    const bundleArtifact = (row: Record<string, unknown>, wanted: boolean): Effect.Effect<LoadedArtifact, StoreUnavailable> =>
      loadedArtifact(toArtifact(row), wanted, row.payload)

    /**
     * An artifact with its payload when `wanted`: an inline payload is `inlineBytes` (the
     * column the caller read), a blob is read from the backend; when not wanted, the metadata
     * with a blob's availability refined.
     */
    const loadedArtifact = (
      meta: ArtifactRecord,
      wanted: boolean,
      inlineBytes: unknown
    ): Effect.Effect<LoadedArtifact, StoreUnavailable> => {
      if (!wanted) return Effect.map(refine(meta), (artifact) => ({ artifact, payload: undefined }))
      if (meta.storage === "inline") return Effect.succeed({ artifact: meta, payload: toBytes(inlineBytes) ?? undefined })
      return Effect.map(loadPayload(meta.storage, null, meta.blobRef, backend), (payload) => ({
        artifact: meta.available === (payload !== undefined) ? meta : trusted(ArtifactRecord, { ...meta, available: payload !== undefined }),
        payload
      }))
    }

    /**
     * Frames the last writer could not checkpoint into the database file at close (recorded by
     * {@link closeWriter}), when its WAL still holds them (a later writer or checkpointer that
     * emptied the WAL makes them moot): 0 otherwise.
     */
    const walPending = Effect.map(
      rows(sql`SELECT value FROM store_meta WHERE key = ${WAL_PENDING}`),
      (r) => {
        const n = Number(r[0]?.value ?? 0)
        if (!(n > 0)) return 0
        let walBytes = 0
        try {
          walBytes = fs.statSync(`${path}-wal`).size // stat(2): no descriptor opened
        } catch {
          walBytes = 0
        }
        return walBytes > 0 ? n : 0
      }
    )

    const driver: StoreDriver = {
      kind: "sqlite",
      featureLevel: "base",
      readOnlyError: readOnly ? roError : undefined,
      // a writer holds the file's OS lock: no other process writes while it is open
      exclusiveWriter: !readOnly,
      commit,
      writeFacts: (as, es) =>
        tx(() => {
          if (as.length > 0) write!.attempts(as.map(attemptRow))
          if (es.length > 0) write!.events(es.map(eventRow))
        }),

      openRun: (run) =>
        Effect.flatMap(
          tx((d) => {
            d.prepare(
              "INSERT INTO runs (run_id, label, status, config, started_at, heartbeat_at, ended_at, stop_reason, notes, meta) VALUES (?, ?, 'running', ?, ?, ?, NULL, NULL, ?, ?)"
            ).run(run.runId, run.label ?? null, jsonOrNull(run.config ?? null), run.startedAt, run.startedAt, run.notes ?? null, JSON.stringify(run.meta ?? {}))
            d.prepare("UPDATE store_writer SET run_id = ? WHERE id = 1").run(run.runId)
          }),
          () => Effect.map(getRun(run.runId), (o) => Option.getOrThrow(o) as RunRecord)
        ),
      heartbeat: (runId, nowMs) =>
        tx((d) => void d.prepare("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?").run(nowMs, runId)),
      finishRun: (runId, finish) =>
        tx((d) =>
          void d.prepare("UPDATE runs SET status = ?, ended_at = ?, stop_reason = ? WHERE run_id = ?").run(
            finish.status,
            finish.endedAt,
            finish.stopReason ?? null,
            runId
          )
        ),
      getRun,
      latestRun: Effect.map(
        rows(sql`SELECT * FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1`),
        (r) => Option.map(Option.fromNullable(r[0]), toRun)
      ),
      listRuns: Effect.map(rows(sql`SELECT * FROM runs ORDER BY started_at, run_id`), (r) => r.map(toRun)),
      interruptStale: (staleAfterMs, nowMs) =>
        Effect.flatMap(
          tx((d) => {
            const ids = (d.prepare("SELECT run_id FROM runs WHERE status = 'running' AND heartbeat_at < ?").all(
              nowMs - staleAfterMs
            ) as Array<{ run_id: string }>).map((r) => r.run_id)
            const upd = d.prepare("UPDATE runs SET status = 'interrupted', ended_at = ?, stop_reason = 'stale' WHERE run_id = ?")
            for (const id of ids) upd.run(nowMs, id)
            return ids
          }),
          (ids) => Effect.map(Effect.forEach(ids, getRun), (rs) => rs.flatMap((o) => Option.toArray(o)))
        ),

      getPipelines: (ids) =>
        Effect.map(
          Effect.forEach(
            Array.from({ length: Math.ceil(ids.length / 500) }, (_, i) => ids.slice(i * 500, (i + 1) * 500)),
            (chunk) => rows(sql`SELECT * FROM pipelines WHERE ${sql.in("pipeline_id", chunk)}`)
          ),
          (pages) => {
            const out = new Map<string, PipelineRecord>()
            for (const page of pages) for (const r of page) out.set(String(r.pipeline_id), toPipeline(r))
            return out
          }
        ),
      getPipeline: (id) =>
        Effect.map(rows(sql`SELECT * FROM pipelines WHERE pipeline_id = ${id}`), (r) => Option.map(Option.fromNullable(r[0]), toPipeline)),

      putArtifact: (a, placed) =>
        tx(() => {
          const rows: Array<Array<unknown>> = []
          const ordered: Array<() => void> = []
          const id = addArtifact(rows, ordered, a, placed)
          write!.artifacts(rows)
          for (const f of ordered) f()
          return artifactRecordOf(id, a, placed)
        }),
      getArtifact: (pipelineId, seq) =>
        Effect.flatMap(
          rows(sql`SELECT ${sql.literal(ARTIFACT_META)}, payload FROM artifacts WHERE ${byPipeline(pipelineId)} AND seq = ${seq} ORDER BY artifact_id DESC LIMIT 1`),
          (r) => {
            const row = r[0]
            if (row === undefined) return Effect.succeed(Option.none())
            const meta = toArtifact(row)
            return Effect.map(loadPayload(meta.storage, toBytes(row.payload), meta.blobRef, backend), (payload) =>
              Option.some({
                artifact: meta.available === (payload !== undefined)
                  ? meta
                  : trusted(ArtifactRecord, { ...meta, available: payload !== undefined }),
                payload
              }))
          }
        ),
      listArtifacts: (pipelineId) =>
        Effect.flatMap(
          rows(sql`SELECT ${sql.literal(ARTIFACT_META)} FROM artifacts WHERE ${byPipeline(pipelineId)} ORDER BY seq, artifact_id`),
          (r) => Effect.forEach(r, (row) => refine(toArtifact(row)))
        ),

      reportMetric: (m) =>
        tx((d) =>
          void d.prepare(
            "INSERT INTO metrics (run_id, scope, name, value, label, display, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run_id, scope, name) DO UPDATE SET value = excluded.value, label = excluded.label, display = excluded.display, updated_at = excluded.updated_at"
          ).run(
            m.runId,
            m.pipelineId ?? "",
            m.name,
            jsonOrNull(m.value),
            m.label,
            m.display,
            m.updatedAt
          )
        ),
      metrics: (f) =>
        Effect.map(
          rows(
            f.pipelineId === undefined
              ? sql`SELECT * FROM metrics WHERE run_id = ${f.runId} ORDER BY scope, name`
              : sql`SELECT * FROM metrics WHERE run_id = ${f.runId} AND scope = ${f.pipelineId ?? ""} ORDER BY scope, name`
          ),
          (r) => r.map(toMetric)
        ),
      putResource: (r) =>
        tx((d) =>
          void d.prepare(
            "INSERT INTO resources (pool, resource_id, kind, spec, health, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(pool, resource_id) DO UPDATE SET kind = excluded.kind, spec = excluded.spec, health = excluded.health, updated_at = excluded.updated_at"
          ).run(r.pool, r.resourceId, r.kind, jsonOrNull(r.spec), jsonOrNull(r.health), r.updatedAt)
        ),
      resources: Effect.map(rows(sql`SELECT * FROM resources ORDER BY pool, resource_id`), (r) => r.map(toResource)),

      stats: (runId) =>
        Effect.gen(function*() {
          const byRun = (col = "run_id") => runId === undefined ? sql`1=1` : sql`${sql(col)} = ${runId}`
          const states = yield* rows(sql`SELECT state, count(*) AS n FROM pipelines WHERE ${byRun()} GROUP BY state`)
          const byState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
          let n = 0
          for (const r of states) {
            byState[r.state as PipelineState] = Number(r.n)
            n += Number(r.n)
          }
          const latencyMs = yield* latency(runId)
          const [tasks] = yield* rows(sql`SELECT count(*) AS n FROM tasks WHERE ${byRun()}`)
          const [att] = yield* rows(sql`SELECT count(*) AS n, coalesce(sum(attempt_no > 1), 0) AS r FROM attempts WHERE ${byRun()}`)
          const [ev] = yield* rows(sql`SELECT count(*) AS n FROM events WHERE ${byRun()}`)
          const resources = yield* Effect.map(rows(sql`SELECT * FROM resources ORDER BY pool, resource_id`), (r) => r.map(toResource))
          const walPendingFrames = yield* walPending
          return {
            pipelines: n,
            byState,
            tasks: Number(tasks?.n ?? 0),
            attemptsTotal: Number(att?.n ?? 0),
            retries: Number(att?.r ?? 0),
            events: Number(ev?.n ?? 0),
            latencyMs,
            resources,
            ...(walPendingFrames > 0 ? { walPendingFrames } : {})
          } satisfies StoreStats
        }),
      errors: (o) =>
        Effect.map(
          rows(sql`SELECT * FROM pipelines WHERE state = 'failed' ${o.runId === undefined ? sql`` : sql`AND run_id = ${o.runId}`} ORDER BY updated_at DESC, pipeline_id ${o.limit === undefined ? sql`` : sql`LIMIT ${o.limit}`}`),
          (r) => r.map((row): ErrorRow => errorRowOf(toPipeline(row)))
        ),
      events: (o, limit) =>
        limit === undefined
          ? Effect.map(rows(sql`SELECT * FROM events WHERE ${sql.and(eventConds(o))} ORDER BY event_id`), (r) => r.map(toEvent))
          : Effect.map(
            rows(sql`SELECT * FROM events WHERE ${sql.and(eventConds(o))} ORDER BY event_id DESC LIMIT ${limit}`),
            (r) => r.map(toEvent).reverse()
          ),
      countEvents: (f = {}) =>
        Effect.map(rows(sql`SELECT count(*) AS n FROM events WHERE ${sql.and(eventConds(f))}`), (r) => Number(r[0]?.n ?? 0)),
      pipelinesBySpec: Effect.map(
        rows(sql`SELECT spec_digest, count(*) AS n FROM pipelines GROUP BY spec_digest ORDER BY n DESC, spec_digest`),
        (r) => r.map((row): SpecCount => ({ specDigest: String(row["spec_digest"]), pipelines: Number(row["n"]) }))
      ),

      pipelinesPage: (o) =>
        Effect.suspend(() => {
          const limit = o.limit
          const conds = []
          if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
          if (o.state !== undefined) conds.push(sql`state = ${o.state}`)
          if (o.after !== undefined) conds.push(sql`(created_at, pipeline_id) > (${o.after.createdAt}, ${o.after.pipelineId})`)
          return Effect.map(
            rows(sql`SELECT * FROM pipelines WHERE ${sql.and(conds)} ORDER BY created_at, pipeline_id LIMIT ${limit + 1}`),
            (r): PipelinesPage => {
              const pipelines = r.slice(0, limit).map(toPipeline)
              const last = pipelines[pipelines.length - 1]
              return {
                pipelines,
                next: r.length > limit && last !== undefined ? { createdAt: last.createdAt, pipelineId: last.pipelineId } : null
              }
            }
          )
        }),
      completions: (o) =>
        Effect.suspend(() => {
          const bucketMs = o.bucketMs
          const origin = Math.trunc(o.since ?? 0)
          const conds = [sql`state IN ('succeeded', 'failed', 'interrupted')`, sql`ended_at IS NOT NULL`]
          if (o.runId !== undefined) conds.unshift(sql`run_id = ${o.runId}`)
          if (o.since !== undefined) conds.push(sql`ended_at >= ${o.since}`)
          // floor division on integers: bound numbers arrive as REAL, hence the casts, and
          // SQLite's integer `/` truncates toward zero, hence the negative branch
          const o0 = sql`CAST(${origin} AS INTEGER)`
          const w = sql`CAST(${bucketMs} AS INTEGER)`
          return Effect.map(
            rows(
              sql`SELECT b, count(*) AS n FROM (SELECT CASE WHEN ended_at >= ${o0} THEN (ended_at - ${o0}) / ${w} ELSE -((${o0} - ended_at + ${w} - 1) / ${w}) END AS b FROM pipelines WHERE ${
                sql.and(conds)
              }) GROUP BY b ORDER BY b`
            ),
            (r) => r.map((x): CompletionBucket => ({ startMs: origin + Number(x.b) * bucketMs, count: Number(x.n) }))
          )
        }),
      loadBundles: (ids, o) =>
        Effect.gen(function*() {
          const out = new Map<string, { pipelineId: string; tasks: Array<TaskRecord>; artifacts: Array<LoadedArtifact> }>()
          for (const id of ids) out.set(id, { pipelineId: id, tasks: [], artifacts: [] })
          const unique = Array.from(out.keys())
          const onlyFinal = o.artifacts === "final"
          const payloadCol = o.payloads === "all"
            ? sql`, payload`
            : o.payloads === "final"
            ? sql`, CASE WHEN is_final = 1 THEN payload END AS payload`
            : sql``
          const budget = o.payloadBytes === undefined || o.payloadBytes === Infinity
            ? undefined
            : Number.isNaN(o.payloadBytes) ? 0 : Math.max(0, o.payloadBytes)
          /** Stored bytes of the wanted, available payloads met so far (the budget's running total). */
          let spent = 0
          for (let i = 0; i < unique.length; i += 500) {
            const chunk = unique.slice(i, i + 500)
            if (o.tasks !== false) {
              const ts = yield* rows(sql`SELECT * FROM tasks WHERE ${byPipelines(chunk)} ORDER BY ${sql(pipelineKey)}, seq, task_run_id`)
              for (const r of ts) out.get(String(r.pipeline_id))?.tasks.push(toTask(r))
            }
            const where = sql`${byPipelines(chunk)}${onlyFinal ? sql` AND is_final = 1` : sql``}`
            if (budget === undefined || o.payloads === "none") {
              const as = yield* rows(
                sql`SELECT ${sql.literal(ARTIFACT_META)}${payloadCol} FROM artifacts WHERE ${where} ORDER BY ${
                  sql(pipelineKey)
                }, seq, artifact_id`
              )
              for (const r of as) {
                const wanted = o.payloads === "all" || (o.payloads === "final" && Number(r.is_final) === 1)
                const loaded = r.storage === "blob" || !wanted
                  ? yield* bundleArtifact(r, wanted)
                  : { artifact: toArtifact(r), payload: toBytes(r.payload) ?? undefined }
                out.get(loaded.artifact.pipelineId)?.artifacts.push(loaded)
              }
              continue
            }
            // with a budget: the metadata in read order, the running total of the wanted, available
            // sizes kept here, then the inline payloads that fit read by rowid (measured faster than
            // one query with a window sum and a payload subquery: bench/export.ts, BENCHMARKS.md)
            const metas = (yield* q(
              sql`SELECT ${sql.literal(ARTIFACT_META)} FROM artifacts WHERE ${where} ORDER BY ${sql(pipelineKey)}, seq, artifact_id`
                .values
            )).map(toArtifactValues)
            const fits: Array<boolean> = new Array(metas.length)
            const inline: Array<number> = []
            for (let k = 0; k < metas.length; k++) {
              const meta = metas[k]!
              let fit = false
              if ((o.payloads === "all" || meta.isFinal) && meta.available) {
                fit = spent + meta.size <= budget || spent === 0
                spent += meta.size
              }
              fits[k] = fit
              if (fit && meta.storage === "inline") inline.push(meta.artifactId)
            }
            const payloads = new Map<number, Uint8Array | undefined>()
            for (let j = 0; j < inline.length; j += ROWID_CHUNK) {
              const got = yield* q(
                sql`SELECT artifact_id, payload FROM artifacts WHERE ${sql.in("artifact_id", inline.slice(j, j + ROWID_CHUNK))}`
                  .values
              )
              for (const r of got) payloads.set(Number(r[0]), toBytes(r[1]) ?? undefined)
            }
            for (let k = 0; k < metas.length; k++) {
              const meta = metas[k]!
              const loaded = meta.storage === "blob" || !fits[k]
                ? yield* loadedArtifact(meta, fits[k]!, null)
                : { artifact: meta, payload: payloads.get(meta.artifactId) }
              out.get(meta.pipelineId)?.artifacts.push(loaded)
            }
          }
          return out as ReadonlyMap<string, PipelineBundle>
        }),

      streamPipelines: (o) =>
        pager<readonly [number, string], PipelineRecord>(
            (c) => {
              const conds = []
              if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
              if (o.state !== undefined) conds.push(sql`state = ${o.state}`)
              if (c !== undefined) conds.push(sql`(created_at, pipeline_id) > (${c[0]}, ${c[1]})`)
              return rows(sql`SELECT * FROM pipelines WHERE ${sql.and(conds)} ORDER BY created_at, pipeline_id LIMIT ${PAGE_SIZE}`)
            },
            (r) => [Number(r.created_at), String(r.pipeline_id)] as const,
            toPipeline
          ),
      streamTasks: (o) =>
          pager<readonly [string | number, number, string], ReturnType<typeof toTask>>(
            (c) => {
              const conds = []
              if (o.pipelineId !== undefined) conds.push(byPipeline(o.pipelineId))
              if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
              if (c !== undefined) conds.push(sql`(${sql(pipelineKey)}, seq, task_run_id) > (${c[0]}, ${c[1]}, ${c[2]})`)
              return rows(sql`SELECT * FROM tasks WHERE ${sql.and(conds)} ORDER BY ${sql(pipelineKey)}, seq, task_run_id LIMIT ${PAGE_SIZE}`)
            },
            (r) => [numbered ? Number(r.pno) : String(r.pipeline_id), Number(r.seq), String(r.task_run_id)] as const,
            toTask
          ),
      streamAttempts: (o) =>
          Stream.unwrap(
            Effect.map(
              rows(sql`SELECT coalesce(max(attempt_id), 0) AS m FROM attempts`),
              (m) => {
                const hwm = Number(m[0]?.m ?? 0)
                return pager<number, ReturnType<typeof toAttempt>>(
                  (c) => {
                    const conds = [sql`attempt_id > ${c ?? 0}`, sql`attempt_id <= ${hwm}`]
                    if (o.pipelineId !== undefined) conds.push(byPipeline(o.pipelineId))
                    if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
                    return rows(sql`SELECT * FROM attempts WHERE ${sql.and(conds)} ORDER BY attempt_id LIMIT ${PAGE_SIZE}`)
                  },
                  (r) => Number(r.attempt_id),
                  toAttempt
                )
              }
            )
          ),
      streamEvents: (o) =>
          Stream.unwrap(
            Effect.map(
              rows(sql`SELECT coalesce(max(event_id), 0) AS m FROM events`),
              (m) => {
                const hwm = Number(m[0]?.m ?? 0)
                return pager<number, ReturnType<typeof toEvent>>(
                  (c) =>
                    rows(
                      sql`SELECT * FROM events WHERE ${sql.and([sql`event_id > ${c ?? 0}`, sql`event_id <= ${hwm}`, ...eventConds(o)])} ORDER BY event_id LIMIT ${PAGE_SIZE}`
                    ),
                  (r) => Number(r.event_id),
                  toEvent
                )
              }
            )
          ),
      streamArtifacts: (o) =>
          Stream.mapEffect(
            pager<readonly [number, number], ArtifactRecord>(
              (c) =>
                rows(
                  c === undefined
                    ? sql`SELECT ${sql.literal(ARTIFACT_META)} FROM artifacts WHERE ${byPipeline(o.pipelineId)} ORDER BY seq, artifact_id LIMIT ${PAGE_SIZE}`
                    : sql`SELECT ${sql.literal(ARTIFACT_META)} FROM artifacts WHERE ${byPipeline(o.pipelineId)} AND (seq, artifact_id) > (${c[0]}, ${c[1]}) ORDER BY seq, artifact_id LIMIT ${PAGE_SIZE}`
                ),
              (r) => [Number(r.seq), Number(r.artifact_id)] as const,
              toArtifact
            ),
            refine
          )
    }
    return driver
  })

/**
 * Opens the SQLite store in the current scope: the SQLite driver ({@link makeDriver}) behind
 * the store front (`Store.makeWith`), using the {@link ArtifactBackend} in context. Closing the
 * scope flushes buffered facts, commits queued writes, releases the connections and the writer
 * lock; a failed final flush is re-raised as a defect carrying the `StoreUnavailable` (call
 * `flush` before closing to handle it as a typed error).
 *
 * Fails as {@link makeDriver}, and with `ConfigError` on invalid options.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: SqliteStoreOptions
): Effect.Effect<StoreService, StoreUnavailable | ConfigError, ArtifactBackend | Scope.Scope> =>
  Effect.flatMap(
    // options are checked before the file is touched
    Effect.zipRight(checkOptions(options), makeDriver(options)),
    (driver) => makeWith(driver, options)
  )

/**
 * The SQLite store as a layer, using the {@link ArtifactBackend} in context. Hoist the layer
 * into a module-level constant: two builds would be two writers on one file (the second is
 * refused).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWith = (
  options: SqliteStoreOptions
): Layer.Layer<Store, StoreUnavailable | ConfigError, ArtifactBackend> => Layer.scoped(Store, make(options))

/**
 * The SQLite store with the inline artifact backend.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: SqliteStoreOptions): Layer.Layer<Store, StoreUnavailable | ConfigError> =>
  layerWith(options).pipe(Layer.provide(layerInline))

/**
 * A read-only SQLite store (for report, watch, serve, export): never migrates, never writes,
 * takes no writer lock.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerReadOnly = (filename: string): Layer.Layer<Store, StoreUnavailable | ConfigError> =>
  layer({ filename, readonly: true })
