import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as Manifest from "../../src/layers/internal/suite/manifest.js"
import { DirectoryError, makeDirectories } from "../../src/services/internal/directories.js"

const tmp = () => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-dirs-"))

const thrown = (f: () => void): DirectoryError => {
  try {
    f()
  } catch (e) {
    if (e instanceof DirectoryError) return e
    throw e
  }
  throw new globalThis.Error("expected a DirectoryError")
}

describe("makeDirectories", () => {
  it("creates every missing level and accepts a folder that exists", () => {
    const root = tmp()
    const deep = nodePath.join(root, "a", "b", "c")
    makeDirectories(deep)
    expect(fs.statSync(deep).isDirectory()).toBe(true)
    makeDirectories(deep)
    makeDirectories(root)
    expect(fs.readdirSync(nodePath.join(root, "a"))).toEqual(["b"])
  })

  it("names a file standing where a folder is needed", () => {
    const root = tmp()
    fs.writeFileSync(nodePath.join(root, "afile"), "x")
    const e = thrown(() => makeDirectories(nodePath.join(root, "afile", "runs", "x")))
    expect(e.code).toBe("ENOTDIR")
    expect(e.message).toContain(`${nodePath.join(root, "afile")} is a file, not a folder`)
  })

  // Node 20's recursive mkdir never returns for a path under /proc (libuv loops on EEXIST /
  // ENOENT): this call has to answer at once, with the reason
  it.runIf(fs.existsSync("/proc/self"))("answers at once for a virtual file system (/proc) instead of looping", () => {
    const e = thrown(() => makeDirectories("/proc/assay-never/runs"))
    expect(e.code).toBe("ENOENT")
    expect(e.message).toContain("cannot create folder /proc/assay-never/runs")
    expect(e.message).toContain("refuses to create /proc/assay-never")
  })

  it.runIf(fs.existsSync("/proc/self"))("a suite or study root under /proc is a StoreUnavailable in words, not a hang", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Manifest.create("/proc/assay-never/root", {} as never))
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        const text = JSON.stringify(exit.cause)
        expect(text).toContain("StoreUnavailable")
        expect(text).toContain("refuses to create /proc/assay-never")
      }
    }).pipe(Effect.runPromise))
})
