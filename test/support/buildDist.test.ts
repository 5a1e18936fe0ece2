/**
 * The tests' build check (`buildDist.ts`): `dist/` is up to date only when the inputs are the
 * ones the last full build recorded, their digest taken before it started
 * (`scripts/buildInputs.mjs`). An edit made while a build ran has a modification time before
 * the bundle's, and a check by modification times kept the stale `dist/` (fix17ai).
 */
import { describe, expect, it } from "vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { BUILD_STAMP, inputsDigest } from "../../scripts/buildInputs.mjs"
import { distUpToDate } from "./buildDist.js"

/** Sets the modification time of `rel` to `ms` (epoch). */
const touch = (root: string, rel: string, ms: number) => fs.utimesSync(path.join(root, rel), ms / 1000, ms / 1000)

/** A checkout with one source file and a built `dist/` (entry point and one bundle). */
const checkout = () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "assay-builddist-"))
  const put = (rel: string, text: string) => {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true })
    fs.writeFileSync(path.join(root, rel), text)
  }
  put("src/a.ts", "export const a = 1\n")
  put("package.json", "{}\n")
  put("dist/index.js", "")
  put("dist/bundle/assay-0123.cjs", "")
  // the inputs written a minute before the build's bundle
  const start = Date.now() - 60_000
  touch(root, "src/a.ts", start)
  touch(root, "package.json", start)
  touch(root, "src", start)
  touch(root, "dist/bundle/assay-0123.cjs", start + 20_000)
  return { root, put, start }
}


describe("dist/ freshness (test/support/buildDist.ts)", () => {
  it("an edit made while the build ran (older than the bundle, newer than the recorded inputs) builds again", () => {
    const { put, root, start } = checkout()
    // the build recorded the inputs as they were when it started
    put(BUILD_STAMP, `${inputsDigest(root)}\n`)
    expect(distUpToDate(root)).toBe(true)
    // then the source was edited before the build wrote its bundle
    put("src/a.ts", "export const a = 2\n")
    touch(root, "src/a.ts", start + 10_000)
    expect(distUpToDate(root)).toBe(false)
    fs.rmSync(root, { recursive: true, force: true })
  })

  it("without a recorded digest (a partial build, or none) dist/ is not up to date", () => {
    const { root } = checkout()
    expect(distUpToDate(root)).toBe(false)
    fs.rmSync(root, { recursive: true, force: true })
  })
})
