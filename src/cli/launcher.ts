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
 *   user code all the same (a config file's `plugins:`) goes on on the unbundled runtime; one
 *   whose config files name a module file ({@link configsNameUserCode}) starts there at once.
 * - A cluster command ({@link runsCluster}) that names no user code starts from the cluster
 *   bundle `dist/bundle/cluster-<hash>.cjs` (`clusterStart.ts`: the fast start plus the
 *   cluster's modules, which the other bundle leaves out), the same way ({@link bundleOf}).
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

/** A file name that is a config file (an experiment, suite or study), not a JSON Schema. */
const configFile = /\.(?:jsonc?|ya?ml|toml)$/

/** The end of a file reference in a config's text: an export (`#`), a quote, a separator. */
const refEnd = String.raw`(?=[#"'\x60\s,\]}]|$)`

/** A module file named in a config's text (`use: "./tasks.ts#first"`, `plugins: [./p.js]`). */
const moduleRef = new RegExp(String.raw`[^\s"'\x60,:\[\]{}]*\.[mc]?[jt]s` + refEnd, "m")

/** A config file named in a config's text (a study's `experiment: ./experiment.json`, a suite's members). */
const configRef = new RegExp(String.raw`[^\s"'\x60,:\[\]{}]+\.(?:jsonc?|ya?ml|toml)` + refEnd, "gm")

/** Commands that read a config file but never load its user code (measured: no fallback). */
const neverLoads: ReadonlyArray<ReadonlyArray<string>> = [["study", "export"]]

/**
 * Whether a config file named on the command line (an argument, or an option's value, that is
 * an existing `.json`/`.jsonc`/`.yaml`/`.yml`/`.toml` file, relative to `cwd`), or a config
 * file it names in turn (a study's experiment, a suite's members: up to 3 levels, 32 files of at
 * most 1 MiB each), names a module file (`.ts`, `.js`, `.mts`, `.mjs`, `.cts`, `.cjs`): a
 * task's `use: ./tasks.ts#first`, a `plugins:` entry. Such a command would meet user code
 * once it reads the config, so the launcher starts it on the unbundled runtime at once
 * instead of starting the bundle only to leave it (about 0.5 s of CPU per process:
 * `BENCHMARKS.md`, ci20).
 *
 * A look at the text, not a parse: a false positive (a comment naming `notes.ts`) only
 * starts the command on the unbundled runtime, where every command runs the same way; a
 * false negative leaves it to the bundle's fallback. JSON Schemas (`*.schema.json`) are not
 * followed. Unreadable files count as naming nothing.
 *
 * @since 0.1.0
 * @category running
 */
export const configsNameUserCode = (argv: ReadonlyArray<string>, cwd: string = process.cwd()): boolean => {
  const words = argv.slice(2)
  if (neverLoads.some((command) => command.every((w, i) => words[i] === w))) return false
  const seen = new Set<string>()
  const visit = (file: string, depth: number): boolean => {
    if (seen.has(file) || seen.size >= 32 || file.endsWith("schema.json")) return false
    seen.add(file)
    let text: string
    try {
      const stat = fs.statSync(file)
      if (!stat.isFile() || stat.size > 1024 * 1024) return false
      text = fs.readFileSync(file, "utf8")
    } catch {
      return false
    }
    if (moduleRef.test(text)) return true
    if (depth >= 3) return false
    for (const match of text.matchAll(configRef)) {
      if (visit(path.resolve(path.dirname(file), match[0]), depth + 1)) return true
    }
    return false
  }
  return words.some((word) => {
    const value = word.startsWith("-") && word.includes("=") ? word.slice(word.indexOf("=") + 1) : word
    return configFile.test(value) && visit(path.resolve(cwd, value), 1)
  })
}

/**
 * Whether `argv` (as `process.argv`) is a cluster command: `runner`, `migrate`, or a command
 * given `--engine cluster` (`run`, `resume`, `study run`). Each loads `cli/ClusterRun.js` (or
 * `ClusterStudy.js`), which the fast-start bundle leaves out (it would make every other
 * command parse @effect/cluster, -workflow and -sql-pg) and refuses; such a command starts from
 * the cluster bundle instead ({@link bundleOf}; `BENCHMARKS.md`, bnd17an). Not with
 * `--help`/`-h` (help never loads the cluster's module).
 *
 * @param argv the command line, as `process.argv`
 *
 * @since 0.17.0
 * @category running
 */
export const runsCluster = (argv: ReadonlyArray<string>): boolean => {
  const words = argv.slice(2)
  if (words.some((w) => w === "--help" || w === "-h")) return false
  return words[0] === "runner" || words[0] === "migrate" ||
    words.some((w, i) => w === "--engine=cluster" || (w === "--engine" && words[i + 1] === "cluster"))
}

/**
 * Whether the launcher starts `argv` (as `process.argv`) on the unbundled runtime at once
 * rather than from a bundle ({@link bundleOf}): it names user code ({@link namesUserCode}) or
 * names a config file that names user code ({@link configsNameUserCode}, files relative to
 * `cwd`). A cluster command that names no user code starts from the cluster bundle.
 *
 * @since 0.17.0
 * @category running
 */
export const startsUnbundled = (argv: ReadonlyArray<string>, cwd: string = process.cwd()): boolean =>
  namesUserCode(argv) || configsNameUserCode(argv, cwd)

/**
 * The bundle a command line that does not start unbundled ({@link startsUnbundled}) starts
 * from: `cluster` (`dist/bundle/cluster-<hash>.cjs`, `clusterStart.ts`: the fast start with the
 * cluster's modules) for a cluster command ({@link runsCluster}), else `assay`
 * (`dist/bundle/assay-<hash>.cjs`, `fastStart.ts`, which leaves the cluster's modules out).
 *
 * @param argv the command line, as `process.argv`
 * @returns the bundle's kind (the prefix of its file name)
 * @since 0.17.0
 * @category running
 */
export const bundleOf = (argv: ReadonlyArray<string>): "assay" | "cluster" => runsCluster(argv) ? "cluster" : "assay"

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

/**
 * The path of the bundle `kind` (`assay`: the fast start; `cluster`: the cluster commands'),
 * or `undefined` when none was built (then the unbundled runtime runs).
 */
const bundlePath = (kind: "assay" | "cluster"): string | undefined => {
  const dir = path.join(here, "../bundle")
  const pattern = new RegExp(`^${kind}-[0-9a-f]+\\.cjs$`)
  try {
    const name = fs.readdirSync(dir).find((f) => pattern.test(f))
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
  const bundle = startsUnbundled(argv) ? undefined : bundlePath(bundleOf(argv))
  if (bundle === undefined) return full(argv)
  loadBundle(bundle).start(argv, () => full(argv))
}
