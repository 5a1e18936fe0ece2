/**
 * Vitest global setup: every temporary file or folder a test run makes goes under one folder
 * (`$TMPDIR/assay-tests-XXXXXX`), removed when the run ends. `TMPDIR` points there for the test
 * workers and every process they spawn (`os.tmpdir()` reads it), so a test that forgets its own
 * clean-up, or a child killed before its own, still leaves nothing behind.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

export default function setup(): () => void {
  const existing = process.env["ASSAY_TEST_TMP"]
  if (existing !== undefined && fs.existsSync(existing)) return () => fs.rmSync(existing, { recursive: true, force: true })
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-tests-"))
  process.env["ASSAY_TEST_TMP"] = dir
  process.env["TMPDIR"] = dir
  return () => fs.rmSync(dir, { recursive: true, force: true })
}
