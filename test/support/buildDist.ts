/**
 * Vitest global setup of the integration tests: brings `dist/` (what `bin/assay` runs) up to
 * date with `src/` before any test spawns the CLI, so those tests exercise the current sources
 * as compiled, never a stale build. `npm run build` is incremental (tsc's build info): a few
 * seconds when nothing changed.
 */
import { execFileSync } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export default function setup(): void {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
  process.stdout.write("assay tests: building dist/ for the CLI tests (npm run build, incremental)\n")
  execFileSync(process.execPath, [path.join(root, "scripts/build.mjs")], { cwd: root, stdio: "inherit" })
}
