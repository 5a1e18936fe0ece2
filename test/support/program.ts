/**
 * Child programs of the tests, run on plain `node`: a TypeScript file of the checkout bundled
 * into one ES module (see {@link program}).
 */
import * as esbuild from "esbuild"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"

/** The repository root. */
const root = path.resolve(import.meta.dirname, "../..")

const built = new Map<string, string>()

/**
 * A child program of the tests (a TypeScript file of the checkout, such as
 * `test/fixtures/runner/killable.ts`, importing `src/` by path; `fixture` is its path from the
 * checkout's root), bundled with esbuild into one ES module that plain `node` runs: the fixture and the
 * `src/` modules it imports, compiled as tsx would compile them, with the packages (`effect`,
 * `better-sqlite3`, ...) left as imports of the checkout's `node_modules`. A child started
 * under tsx instead loads every `src/` module through tsx's module hooks: about 5 s of CPU
 * per child, against about 2 s for the bundle (`BENCHMARKS.md`, ci30), and the crash tests
 * start ~20 children.
 *
 * Built once per test process, into `.tmp/test-programs/<name>-<digest>.mjs` (inside the
 * checkout, so that the packages resolve; written through a rename, so that two test files
 * building the same program at once never read half a file). Returns the bundle's path.
 */
export const program = (fixture: string): string => {
  const known = built.get(fixture)
  if (known !== undefined) return known
  const result = esbuild.buildSync({
    entryPoints: [path.join(root, fixture)],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    write: false,
    logLevel: "silent"
  })
  const code = result.outputFiles[0]!.contents
  const digest = crypto.createHash("sha256").update(code).digest("hex").slice(0, 16)
  const dir = path.join(root, ".tmp/test-programs")
  const file = path.join(dir, `${path.basename(fixture, ".ts")}-${digest}.mjs`)
  if (!fs.existsSync(file)) {
    fs.mkdirSync(dir, { recursive: true })
    const tmp = `${file}.${process.pid}.tmp`
    fs.writeFileSync(tmp, code)
    fs.renameSync(tmp, file)
  }
  built.set(fixture, file)
  return file
}
