/**
 * The run's temporary root (`tempRoot.ts`) is in force in the test workers and in the processes
 * they spawn: whatever a test makes under `os.tmpdir()` lands in the run's own folder, which the
 * global teardown removes, so no test can leak files into the system's temporary folder.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import * as os from "node:os"
import * as path from "node:path"

describe("temporary files of a test run", () => {
  it("os.tmpdir() is the run's own folder, here and in a spawned process", () => {
    const root = process.env["ASSAY_TEST_TMP"]
    assert.isDefined(root)
    assert.match(path.basename(root!), /^assay-tests-/)
    assert.strictEqual(os.tmpdir(), root)
    const child = execFileSync(process.execPath, ["-e", "process.stdout.write(require('node:os').tmpdir())"], { encoding: "utf8" })
    assert.strictEqual(child, root)
  })
})
