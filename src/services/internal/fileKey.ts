/**
 * The identity of a file on this machine, for telling whether two paths name the same file.
 *
 * @internal
 */
import * as fs from "node:fs"

/**
 * `dev:ino` of `path` through `stat(2)` (no descriptor is opened; symlinks followed), or
 * `undefined` when it does not exist or cannot be read.
 *
 * @internal
 */
export const fileKey = (path: string): string | undefined => {
  try {
    const st = fs.statSync(path)
    return `${st.dev}:${st.ino}`
  } catch {
    return undefined
  }
}
