/**
 * `npm run build`: compiles `src/` to `dist/` (ES modules, `.d.ts`, source maps) with tsc
 * (`tsconfig.build.json`), copies the CLI's resolution hooks (`src/cli/resolveHooks.mjs`), then
 * bundles the CLI's fast start (`src/cli/fastStart.ts` → `dist/bundle/`, one chunk per command)
 * with esbuild. `dist/` is what the package exports and what `bin/assay` runs.
 *
 * `--no-tsc` skips the compile (only the bundle); `--no-bundle` skips the bundle.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const args = new Set(process.argv.slice(2))
const started = performance.now()

if (!args.has("--no-tsc")) {
  const tsc = path.join(root, "node_modules/typescript/bin/tsc")
  execFileSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.build.json")], { stdio: "inherit", cwd: root })
  fs.copyFileSync(path.join(root, "src/cli/resolveHooks.mjs"), path.join(root, "dist/cli/resolveHooks.mjs"))
}

if (!args.has("--no-bundle")) {
  const esbuild = await import("esbuild")
  const outdir = path.join(root, "dist/bundle")
  fs.rmSync(outdir, { recursive: true, force: true })
  await esbuild.build({
    absWorkingDir: root,
    entryPoints: ["src/cli/fastStart.ts"],
    outdir,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    // native addon, and the TypeScript loader (never used by the bundle: it loads no user code)
    external: ["better-sqlite3", "tsx", "tsx/*"],
    // CommonJS dependencies inside an ES module bundle call require() for Node built-ins
    banner: { js: "import { createRequire as __assayCreateRequire } from \"node:module\"; const require = __assayCreateRequire(import.meta.url);" },
    minifySyntax: true,
    minifyWhitespace: true,
    legalComments: "none",
    logLevel: "warning"
  })
}

process.stdout.write(`assay: built dist/ in ${((performance.now() - started) / 1000).toFixed(1)} s\n`)
