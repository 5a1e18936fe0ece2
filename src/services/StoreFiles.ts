/**
 * StoreFiles: which files are the stores open in this process, and a lock-safe test of whether
 * a path is an SQLite database, for code that must not touch a store's files (an export that
 * would overwrite one, a header check).
 *
 * POSIX record locks belong to a process and a file: closing *any* descriptor of a file drops
 * every lock the process holds on it, the ones SQLite's connections hold included (see the
 * "POSIX advisory locks are broken by design" note in https://www.sqlite.org/howtocorrupt.html
 * §2.2). After that, another process's read-write connection may believe it is the last user,
 * checkpoint and delete the live WAL. So nothing may open a file of a store open here (its
 * database, `-wal`, `-shm`, `-journal` or `.lock`) by descriptor. The store layer registers
 * every store it opens ({@link registerOpen}); {@link openStoreFileOf} and
 * {@link isSqliteFile} answer from that registry without opening such a file.
 *
 * Plain `node:fs` (`stat`, which opens no descriptor), so services can use it without a
 * platform layer and without the SQLite driver.
 *
 * @since 0.1.0
 */
import { Effect, type Scope } from "effect"
import * as fs from "node:fs"
import { fileKey } from "./internal/fileKey.js"

/**
 * The 16-byte header every SQLite 3 database file starts with (`"SQLite format 3\0"`), see
 * https://www.sqlite.org/fileformat.html §1.3.
 *
 * @since 0.1.0
 * @category constants
 */
export const SQLITE_HEADER: Uint8Array = new TextEncoder().encode("SQLite format 3\0")

/**
 * The files SQLite keeps beside a database (`-wal`, `-shm`, `-journal`), and the store's own
 * writer lock (`.lock`), as suffixes of the database path.
 *
 * @since 0.1.0
 * @category constants
 */
export const STORE_SIBLINGS: ReadonlyArray<string> = ["-wal", "-shm", "-journal", ".lock"]

/** The database files (`dev:ino`) of the stores open in this process, with their open count. */
const openFiles = new Map<string, { readonly path: string; count: number }>()


/**
 * Counts the database file `path` as a store open in this process until the scope closes
 * (open counts nest: two opens of one file stay registered until both close). Call it once the
 * file exists, i.e. after the first SQLite connection to it is open. A missing file is not
 * registered.
 *
 * @param path the database file
 * @since 0.1.0
 * @category files
 */
export const registerOpen = (path: string): Effect.Effect<void, never, Scope.Scope> =>
  Effect.asVoid(Effect.acquireRelease(
    Effect.sync(() => {
      const key = fileKey(path)
      if (key === undefined) return undefined
      const entry = openFiles.get(key)
      if (entry === undefined) openFiles.set(key, { path, count: 1 })
      else entry.count++
      return key
    }),
    (key) =>
      Effect.sync(() => {
        if (key === undefined) return
        const entry = openFiles.get(key)
        if (entry !== undefined && --entry.count === 0) openFiles.delete(key)
      })
  ))

/**
 * The database path of the store open in this process that `path` is a file of (the database
 * itself, or its `-wal`, `-shm`, `-journal` or `.lock` sibling), else `undefined`. Files are
 * compared by device and inode (`stat`, no descriptor), so links and other spellings of the
 * path are found too.
 *
 * Use it before opening any file by descriptor (reading a header, writing an export): closing
 * a descriptor of an open store's file drops the POSIX locks SQLite holds on it.
 *
 * @param path any path (need not exist)
 * @since 0.1.0
 * @category files
 */
export const openStoreFileOf = (path: string): string | undefined => {
  const direct = fileKey(path)
  if (direct !== undefined && openFiles.has(direct)) return openFiles.get(direct)!.path
  for (const suffix of STORE_SIBLINGS) {
    if (!path.endsWith(suffix)) continue
    const key = fileKey(path.slice(0, -suffix.length))
    if (key !== undefined && openFiles.has(key)) return openFiles.get(key)!.path
  }
  return undefined
}

/** Whether `a` and `b` are the same existing file (device and inode). */
const sameFile = (a: string, b: string): boolean => {
  const k = fileKey(a)
  return k !== undefined && k === fileKey(b)
}

/**
 * Whether `path` is an SQLite database: a regular file that starts with {@link SQLITE_HEADER}.
 * Lock-safe: a file of a store open in this process (see {@link openStoreFileOf}) is answered
 * from the registry without being opened (`true` for the database, `false` for its siblings);
 * any other file has no SQLite lock of this process to lose, and its first 16 bytes are read
 * (only a regular file is opened: opening a FIFO would wait for a writer). A missing or
 * unreadable file is `false`.
 *
 * @param path any path
 * @since 0.1.0
 * @category files
 */
export const isSqliteFile = (path: string): boolean => {
  const open = openStoreFileOf(path)
  if (open !== undefined) return sameFile(open, path)
  let fd: number | undefined
  try {
    if (!fs.statSync(path).isFile()) return false
    fd = fs.openSync(path, "r")
    const head = Buffer.alloc(SQLITE_HEADER.length)
    const n = fs.readSync(fd, head, 0, head.length, 0)
    return n === SQLITE_HEADER.length && head.equals(SQLITE_HEADER)
  } catch {
    return false
  } finally {
    if (fd !== undefined) fs.closeSync(fd)
  }
}
