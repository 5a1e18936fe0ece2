/**
 * Vitest global setup of the integration tests: brings `dist/` (what `bin/assay` runs) up to
 * date with `src/` before any test spawns the CLI, so those tests exercise the current sources
 * as compiled, never a stale build. `npm run build` is incremental (tsc's build info) but
 * always bundles and warms the fast start again; so when no input of the build is newer than
 * the last bundle (as right after `npm ci`, whose `prepare` built it), the build is skipped.
 * `ASSAY_TEST_BUILD=always` builds anyway.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The newest modification time (ms) of a file, or of any file under a folder; 0 when missing. */
const newest = (entry: string): number => {
  let stat: fs.Stats
  try {
    stat = fs.statSync(entry)
  } catch {
    return 0
  }
  if (!stat.isDirectory()) return stat.mtimeMs
  let max = stat.mtimeMs
  for (const name of fs.readdirSync(entry)) max = Math.max(max, newest(path.join(entry, name)))
  return max
}

/**
 * Whether `dist/` was built from the current inputs: its entry point and bundle exist and no
 * input of `scripts/build.mjs` (the sources, the build script and configs, the dependencies'
 * lock) changed after the bundle, the build's last output, was written.
 */
export const distUpToDate = (root: string): boolean => {
  const bundleDir = path.join(root, "dist/bundle")
  const bundles = fs.existsSync(bundleDir) ? fs.readdirSync(bundleDir).filter((f) => /^assay-.*\.cjs$/.test(f)) : []
  if (bundles.length !== 1 || !fs.existsSync(path.join(root, "dist/index.js"))) return false
  const built = fs.statSync(path.join(bundleDir, bundles[0]!)).mtimeMs
  const inputs = ["src", "scripts/build.mjs", "tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json"]
  return inputs.every((input) => newest(path.join(root, input)) < built)
}

export default function setup(): void {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
  if (process.env["ASSAY_TEST_BUILD"] !== "always" && distUpToDate(root)) {
    process.stdout.write("assay tests: dist/ is up to date with src/ (no build)\n")
    return
  }
  process.stdout.write("assay tests: building dist/ for the CLI tests (npm run build, incremental)\n")
  execFileSync(process.execPath, [path.join(root, "scripts/build.mjs")], { cwd: root, stdio: "inherit" })
}
