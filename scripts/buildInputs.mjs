/**
 * What `dist/` is built from (`scripts/build.mjs`), and a digest of it: the build writes the
 * digest of its inputs as they were when it started to `dist/.build-inputs`, and the tests'
 * global setup (`test/support/buildDist.ts`) builds again unless the inputs' digest now is
 * that one. Taken before the build, an edit made while the build runs changes the digest, so
 * the next check builds again (a modification time compared with the build's output, written
 * at its end, would call that edit older than the build and keep the stale `dist/`).
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"

/** The inputs of the build, relative to the checkout's root (a folder stands for every file under it). */
export const BUILD_INPUTS = ["src", "scripts/build.mjs", "scripts/buildInputs.mjs", "tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json"]

/** Where the build records the digest of the inputs it was built from (relative to the root). */
export const BUILD_STAMP = "dist/.build-inputs"

/**
 * The SHA-256 (hex) of the build's inputs under `root`: every file's path (relative, `/`
 * separated) and bytes, in path order; a missing input counts as absent.
 *
 * @param {string} root the checkout's root
 * @returns {string}
 */
export const inputsDigest = (root) => {
  const hash = createHash("sha256")
  /** @param {string} rel */
  const visit = (rel) => {
    const abs = path.join(root, rel)
    let stat
    try {
      stat = fs.statSync(abs)
    } catch {
      return
    }
    if (stat.isDirectory()) {
      for (const name of fs.readdirSync(abs).sort()) visit(`${rel}/${name}`)
      return
    }
    hash.update(`${rel}\0${stat.size}\0`)
    hash.update(fs.readFileSync(abs))
  }
  for (const input of BUILD_INPUTS) visit(input)
  return hash.digest("hex")
}
