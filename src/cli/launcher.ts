/**
 * What `bin/assay` runs first (plain Node, built-in modules only): it picks the runtime of the
 * command line and starts it.
 *
 * - A command line that names user code (a `--plugin`, a JavaScript or TypeScript file) runs on
 *   the unbundled runtime (`./bin.js`: `dist/` as tsc built it, sharing `effect` and `assay`
 *   with the user's modules).
 * - Everything else runs on the fast start: the one-file bundle `dist/bundle/assay-<hash>.cjs`
 *   (`fastStart.ts`), compiled with V8's code cache (`<bundle>.cache`, written by the build's
 *   warm-up, and again by a run whose cache V8 rejected, e.g. under another Node version;
 *   `ASSAY_CODE_CACHE=write` forces the write, `=off` disables the cache). A command that meets
 *   user code all the same (a config file's `plugins:`) goes on on the unbundled runtime.
 *
 * The bundle's file name carries a digest of its content: V8 checks a cache only against the
 * source's length, so a cache is never read for another bundle.
 *
 * @since 0.1.0
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as vm from "node:vm"

const moduleFile = /\.[mc]?[jt]s$/

/**
 * Whether `argv` (as `process.argv`) names user code on the command line: a `--plugin`
 * option, or a JavaScript or TypeScript file (the `-c` of `run` or `validate`, the `plugins`
 * command's files).
 *
 * @since 0.1.0
 * @category running
 */
export const namesUserCode = (argv: ReadonlyArray<string>): boolean =>
  argv.slice(2).some((a) => a === "--plugin" || a.startsWith("--plugin=") || moduleFile.test(a))

const here = path.dirname(fileURLToPath(import.meta.url))

/** Runs `argv` on the unbundled runtime. */
const full = (argv: ReadonlyArray<string>): void => {
  import("./bin.js").then(
    (m) => m.runFull(argv),
    (error: unknown) => {
      process.stderr.write(`assay: cannot load the CLI (${String(error)})\n`)
      process.exit(1)
    }
  )
}

/** The bundle's path, or `undefined` when none was built (then the unbundled runtime runs). */
const bundlePath = (): string | undefined => {
  const dir = path.join(here, "../bundle")
  try {
    const name = fs.readdirSync(dir).find((f) => /^assay-[0-9a-f]+\.cjs$/.test(f))
    return name === undefined ? undefined : path.join(dir, name)
  } catch {
    return undefined
  }
}

/** Writes `data` to `file` through a temporary file and a rename; gives up silently. */
const writeAtomically = (file: string, data: Uint8Array): void => {
  const tmp = `${file}.${process.pid}.tmp`
  try {
    fs.writeFileSync(tmp, data)
    fs.renameSync(tmp, file)
  } catch {
    fs.rmSync(tmp, { force: true })
  }
}

/** Compiles and evaluates the bundle (CommonJS) with V8's code cache; gives its exports. */
const loadBundle = (file: string): { readonly start: (argv: ReadonlyArray<string>, fallback: () => void) => void } => {
  const mode = process.env["ASSAY_CODE_CACHE"]
  const cacheFile = `${file}.cache`
  let cachedData: Buffer | undefined
  if (mode !== "off") {
    try {
      cachedData = fs.readFileSync(cacheFile)
    } catch {
      // no cache yet
    }
  }
  const source = fs.readFileSync(file, "utf8")
  const script = new vm.Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, {
    filename: file,
    ...(cachedData !== undefined ? { cachedData } : {}),
    // lets the bundle's own import() calls (none on its paths) load modules as usual
    ...(vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER !== undefined
      ? { importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER }
      : {})
  })
  if (mode === "write" || (mode !== "off" && (cachedData === undefined || script.cachedDataRejected === true))) {
    // at exit, when the functions this command ran are compiled too
    process.once("exit", () => writeAtomically(cacheFile, script.createCachedData()))
  }
  const module = { exports: {} as Record<string, unknown> }
  const wrapper = script.runInThisContext() as (...args: ReadonlyArray<unknown>) => void
  wrapper(module.exports, createRequire(file), module, file, path.dirname(file))
  return module.exports as ReturnType<typeof loadBundle>
}

/**
 * Starts the CLI for `argv` (as `process.argv`) on the runtime it needs.
 *
 * @since 0.1.0
 * @category running
 */
export const launch = (argv: ReadonlyArray<string>): void => {
  const bundle = namesUserCode(argv) ? undefined : bundlePath()
  if (bundle === undefined) return full(argv)
  loadBundle(bundle).start(argv, () => full(argv))
}
