/**
 * `npm run build`: compiles `src/` to `dist/` (ES modules, `.d.ts`, source maps) with tsc
 * (`tsconfig.build.json`), copies the CLI's resolution hooks (`src/cli/resolveHooks.mjs`), then
 * bundles the CLI's fast start (`src/cli/fastStart.ts` → `dist/bundle/assay-<hash>.cjs`) and the
 * cluster commands' (`src/cli/clusterStart.ts` → `dist/bundle/cluster-<hash>.cjs`) with esbuild
 * and warms their V8 code caches (see `src/cli/launcher.ts`). `dist/` is what the package
 * exports and what `bin/assay` runs.
 *
 * `--no-tsc` skips the compile; `--no-bundle` skips the bundle; `--no-warm` the code cache. A
 * full build (both) records the digest of its inputs, taken before it started, in
 * `dist/.build-inputs` (`scripts/buildInputs.mjs`: what the tests' setup checks `dist/` with).
 */
import { execFileSync, spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { BUILD_STAMP, inputsDigest } from "./buildInputs.mjs"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const args = new Set(process.argv.slice(2))
const started = performance.now()
// the inputs as they are now, before anything is compiled: recorded once the build is done
// (an edit made meanwhile is then seen as a change: `buildInputs.mjs`)
const full = !args.has("--no-tsc") && !args.has("--no-bundle")
const digest = full ? inputsDigest(root) : undefined
fs.rmSync(path.join(root, BUILD_STAMP), { force: true })

if (!args.has("--no-tsc")) {
  const tsc = path.join(root, "node_modules/typescript/bin/tsc")
  execFileSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.build.json")], { stdio: "inherit", cwd: root })
  fs.copyFileSync(path.join(root, "src/cli/resolveHooks.mjs"), path.join(root, "dist/cli/resolveHooks.mjs"))
}

if (!args.has("--no-bundle")) {
  const esbuild = await import("esbuild")
  const outdir = path.join(root, "dist/bundle")
  fs.rmSync(outdir, { recursive: true, force: true })
  /**
   * Bundles `entry` into `dist/bundle/<kind>-<hash>.cjs`; `external`: packages left to
   * `require` at run time (besides the native addon and tsx).
   */
  const bundle = async (kind, entry, external) => {
    const built = await esbuild.build({
      absWorkingDir: root,
      entryPoints: [entry],
      bundle: true,
      write: false,
      // one CommonJS file: V8 caches the compiled code of a script (vm.Script), not of an ES module
      format: "cjs",
      platform: "node",
      target: "node20",
      // ES module builds first: a UMD "main" with dynamic requires (jsonc-parser's) cannot be bundled
      mainFields: ["module", "main"],
      // the native addon, and the TypeScript loader (the bundle loads no user code)
      external: ["better-sqlite3", "tsx", "tsx/*", ...external],
      define: { "import.meta.url": "__assayImportMetaUrl" },
      banner: { js: "var __assayImportMetaUrl = require(\"node:url\").pathToFileURL(__filename).href;" },
      minifySyntax: true,
      minifyWhitespace: true,
      legalComments: "none",
      logLevel: "warning"
    })
    const code = built.outputFiles[0].contents
    const hash = createHash("sha256").update(code).digest("hex").slice(0, 16)
    fs.mkdirSync(outdir, { recursive: true })
    fs.writeFileSync(path.join(outdir, `${kind}-${hash}.cjs`), code)
  }
  await bundle("assay", "src/cli/fastStart.ts", [])
  // the cluster commands' start (`src/cli/clusterStart.ts`): the fast start plus the cluster's
  // modules; `pg` (an optional peer, plain CommonJS that shares nothing with effect) stays a
  // `require` of assay's installation, so a missing `pg` fails as it does unbundled
  await bundle("cluster", "src/cli/clusterStart.ts", ["pg", "pg-native"])
  if (!args.has("--no-warm")) warm()
}

/**
 * Writes the bundles' V8 code caches by running commands on them (each run adds the functions it
 * compiled): the help of every command, a `migrate` that finds no server (the cluster bundle),
 * and, in a checkout, a validate, a run and a report of the example experiment. Commands that fail here only leave a smaller cache.
 */
function warm() {
  const bin = path.join(root, "bin/assay")
  const env = { ...process.env, ASSAY_CODE_CACHE: "write", NO_COLOR: "1" }
  const run = (...argv) => spawnSync(process.execPath, [bin, ...argv], { env, stdio: "ignore", cwd: root })
  run("--help")
  // the cluster bundle: a migrate that loads the cluster's module and finds no server
  run("migrate", "--database", "postgres://assay@127.0.0.1:1/warm")
  const example = path.join(root, "examples/experiments/delay.yaml")
  if (!fs.existsSync(example)) return
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "assay-build-"))
  try {
    const store = path.join(tmp, "warm.db")
    run("validate", "-c", example)
    run("run", "-c", example, "--store", store, "--quiet")
    run("report", store)
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true })
  }
}

if (digest !== undefined) fs.writeFileSync(path.join(root, BUILD_STAMP), `${digest}\n`)

process.stdout.write(`assay: built dist/ in ${((performance.now() - started) / 1000).toFixed(1)} s\n`)
