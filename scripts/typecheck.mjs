/**
 * `npm run typecheck`: the type check and the Effect language service's diagnostics in one
 * TypeScript program.
 *
 * `tsc` alone does not run the language-service plugin configured in tsconfig.json, and
 * `effect-language-service diagnostics --project` builds a new program for every 50 files (about
 * 12 programs for this repository: ~230 s of CPU against ~45 s for one `tsc`). The plugin's
 * documented alternative is a TypeScript whose `tsc` is patched to report the Effect
 * diagnostics (`effect-language-service patch`: the plugin's README, "Why do diagnostics not
 * appear at compile time?"). This script patches a private copy (in a temporary directory, so the installed
 * `typescript` that editors, TypeDoc and other tools load is never modified), runs its `tsc
 * --noEmit -p tsconfig.json` once, and exits with its code.
 *
 * What fails: a TypeScript error, or an Effect diagnostic whose severity tsconfig.json sets to
 * `error`; Effect warnings are printed but do not change the exit code
 * (`ignoreEffectWarningsInTscExitCode`), suggestions are not printed (`includeSuggestionsInTsc`),
 * both set in tsconfig.json's plugin entry.
 *
 * Exit codes: tsc's (0 clean, 1/2 diagnostics), or 1 when the copy or the patch failed.
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const require = createRequire(path.join(root, "package.json"))
const installed = path.dirname(require.resolve("typescript/package.json"))
const cli = path.join(path.dirname(require.resolve("@effect/language-service/package.json")), "cli.js")

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-typecheck-"))
let code = 1
try {
  const copy = path.join(dir, "typescript")
  fs.cpSync(installed, copy, { recursive: true })
  execFileSync(process.execPath, [cli, "patch", "--dir", copy, "--module", "tsc"], { stdio: ["ignore", "ignore", "inherit"] })
  const result = spawnSync(process.execPath, [path.join(copy, "lib", "tsc.js"), "--noEmit", "-p", path.join(root, "tsconfig.json")], {
    cwd: root,
    stdio: "inherit"
  })
  code = result.status ?? 1
} catch (e) {
  console.error(`typecheck: could not prepare the patched TypeScript: ${e instanceof Error ? e.message : String(e)}`)
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
process.exit(code)
