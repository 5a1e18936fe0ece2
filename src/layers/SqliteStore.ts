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
import { Effect, Layer, type Scope } from "effect"
import type { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import { ArtifactBackend } from "../services/ArtifactBackend.js"
import { checkOptions } from "../services/internal/store/shared.js"
import type { StoreDriver, StoreOptions, StoreService } from "../services/Store.js"
import { makeWith, Store } from "../services/Store.js"
import * as StoreFiles from "../services/StoreFiles.js"
import { layerInline } from "./ArtifactBackends.js"
import { makeDriverWithEnv } from "./internal/sqlite/driver.js"
import * as open from "./internal/sqlite/open.js"

/**
 * Options of the SQLite store.
 *
 * - `filename`: path of the store file (created when missing, unless read-only);
 * - `readonly`: open for reading only (report/watch/serve/export): no lock, no migration, no
 *   write; every write operation fails with `StoreUnavailable`;
 * - `busyTimeoutMs`: how long a statement waits for another process's lock, and how long the
 *   writer's close waits for readers before giving up on emptying the WAL (ms, default 5000);
 * - `suiteRoot`: set by `SuiteStore` only, the suite root whose database this is. A database
 *   inside a suite root (`ROOT/state.db`, `ROOT/suite.db`, `ROOT/experiments/ID/state.db`)
 *   is written only through its suite (the catalog accounts for its members): opening one for
 *   writing without it fails with `ConfigError` (path `store`). Read-only opens are allowed.
 *   A suite's database keeps the event time indexes its merged view reads (`events_time`,
 *   `events_run_time`); a plain store's writer drops them when it migrates the store to
 *   schema version 16 (docs/store.md).
 *
 * @since 0.1.0
 * @category models
 */
export interface SqliteStoreOptions extends StoreOptions {
  readonly filename: string
  readonly readonly?: boolean | undefined
  readonly busyTimeoutMs?: number | undefined
  readonly suiteRoot?: string | undefined
}

/**
 * The database path of the store open in this process that `path` is a file of (the database
 * itself, or its `-wal`, `-shm`, `-journal` or `.lock` sibling), else `undefined`: the
 * registry of `StoreFiles` (which this layer fills at every open), re-exported here.
 *
 * @since 0.1.0
 * @category files
 */
export const openStoreFileOf: (path: string) => string | undefined = StoreFiles.openStoreFileOf

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
export const isSqliteFile: (path: string) => boolean = open.isSqliteFile

/**
 * The SQLite driver (see `Store.StoreDriver`) in the current scope, using the
 * {@link ArtifactBackend} in context: the file opened (`internal/sqlite/open.ts`: inspection, lock,
 * connections, migrations), its writer (`internal/sqlite/writer.ts`) and its reads
 * (`internal/sqlite/reads.ts`). Fails as {@link make} (without the options check).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeDriver = (
  options: SqliteStoreOptions
): Effect.Effect<StoreDriver, StoreUnavailable | ConfigError, ArtifactBackend | Scope.Scope> =>
  Effect.map(makeDriverWithEnv(options), (d) => d.driver)


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
