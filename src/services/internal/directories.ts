/**
 * Creating a folder and its missing parents, with an error a user can act on.
 *
 * Node's `fs.mkdirSync(dir, { recursive: true })` (and so `FileSystem.makeDirectory` with
 * `recursive`) never returns for a path under `/proc` on Linux (Node 20: libuv's `mkdir -p`
 * loop sees `EEXIST` for `/proc`, then `ENOENT` for the child, and starts over), and reports a
 * read-only mount as `ENOENT`. {@link makeDirectories} walks up to the nearest existing
 * ancestor, checks it is a folder, and creates each missing level with one plain `mkdir`, so
 * every failure is one system call's answer, named in words.
 *
 * @internal
 */
import * as fs from "node:fs"
import * as nodePath from "node:path"

/**
 * A folder that could not be created: `message` says which path, which level failed and why
 * (in words, with the system error code), `code` is that code (`EROFS`, `EACCES`, `ENOTDIR`, …).
 *
 * @internal
 */
export class DirectoryError extends Error {
  readonly code: string
  readonly path: string
  constructor(message: string, code: string, path: string) {
    super(message)
    this.name = "DirectoryError"
    this.code = code
    this.path = path
  }
}

const codeOf = (e: unknown): string => (e as { code?: unknown } | null)?.code?.toString() ?? "EUNKNOWN"

const why = (code: string, at: string): string => {
  switch (code) {
    case "EROFS":
      return `the file system holding ${at} is read-only`
    case "EACCES":
    case "EPERM":
      return `permission denied to create ${at}`
    case "ENOTDIR":
      return `${at} is not a folder`
    case "ENOENT":
      return `the file system refuses to create ${at} (a virtual file system such as /proc or /sys?)`
    case "ENOSPC":
      return `no space left on the device to create ${at}`
    default:
      return `cannot create ${at}`
  }
}

/**
 * Makes `dir` and its missing parents (like `mkdir -p`), without Node's recursive mode: a
 * folder that exists already is fine; a file in the way, a read-only or virtual file system or a
 * missing permission throws a {@link DirectoryError} naming `dir`, the level that failed and the
 * reason in words (e.g. `cannot create folder /mnt/ro/runs: the file system holding /mnt/ro/runs
 * is read-only (EROFS)`). A concurrent creator of the same level is tolerated.
 *
 * @param dir the folder to make (relative paths resolve against the working directory)
 * @throws DirectoryError when a level cannot be created or is not a folder
 * @internal
 */
export const makeDirectories = (dir: string): void => {
  const target = nodePath.resolve(dir)
  const missing: Array<string> = []
  let at = target
  for (;;) {
    let stat: fs.Stats | undefined
    try {
      stat = fs.statSync(at)
    } catch (e) {
      const code = codeOf(e)
      // ENOTDIR: a level above is a file; keep walking up to name it
      if (code !== "ENOENT" && code !== "ENOTDIR") throw new DirectoryError(`cannot create folder ${target}: ${why(code, at)} (${code})`, code, target)
    }
    if (stat !== undefined) {
      if (!stat.isDirectory()) throw new DirectoryError(`cannot create folder ${target}: ${at} is a file, not a folder (ENOTDIR)`, "ENOTDIR", target)
      break
    }
    const parent = nodePath.dirname(at)
    if (parent === at) break
    missing.push(at)
    at = parent
  }
  for (let i = missing.length - 1; i >= 0; i--) {
    const level = missing[i]!
    try {
      fs.mkdirSync(level)
    } catch (e) {
      const code = codeOf(e)
      if (code === "EEXIST" && isDirectory(level)) continue
      throw new DirectoryError(`cannot create folder ${target}: ${why(code, level)} (${code})`, code, target)
    }
  }
}

const isDirectory = (p: string): boolean => {
  try {
    return fs.statSync(p).isDirectory()
  } catch {
    return false
  }
}
