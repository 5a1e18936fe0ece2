/**
 * Vitest global setup of the integration tests: brings `dist/` (what `bin/assay` runs) up to
 * date with `src/` before any test spawns the CLI, so those tests exercise the current sources
 * as compiled, never a stale build. `npm run build` is incremental (tsc's build info) but
 * always bundles and warms the fast start again; so when the inputs of the build are the ones
 * the last full build recorded (their digest: `scripts/buildInputs.mjs`; as right after
 * `npm ci`, whose `prepare` built it), the build is skipped. `ASSAY_TEST_BUILD=always` builds
 * anyway.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { BUILD_STAMP, inputsDigest } from "../../scripts/buildInputs.mjs"

/**
 * Whether `dist/` was built from the current inputs: its entry point and bundle exist, and the
 * digest of the inputs the last full build recorded (`dist/.build-inputs`, taken before that
 * build started: `scripts/buildInputs.mjs`) is the digest of the inputs now. So an edit made
 * while a build ran, which a build time compared with modification times would call older
 * than the bundle, makes the next check build again.
 */
export const distUpToDate = (root: string): boolean => {
  const bundleDir = path.join(root, "dist/bundle")
  const bundles = fs.existsSync(bundleDir) ? fs.readdirSync(bundleDir).filter((f) => /^assay-.*\.cjs$/.test(f)) : []
  if (bundles.length !== 1 || !fs.existsSync(path.join(root, "dist/index.js"))) return false
  let recorded: string
  try {
    recorded = fs.readFileSync(path.join(root, BUILD_STAMP), "utf8").trim()
  } catch {
    return false
  }
  return recorded === inputsDigest(root)
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
