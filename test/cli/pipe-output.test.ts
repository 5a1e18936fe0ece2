import { spawn } from "node:child_process"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { program } from "../support/program.js"

const root = path.resolve(import.meta.dirname, "../..")

/**
 * Runs the fixture (its path from the checkout's root, bundled by `program`, on plain node) with
 * stdout on a pipe nobody reads for a while (a slow reader such as `| jq` or `| less`), then
 * reads everything. Resolves with the byte count and exit code.
 */
const throughSlowPipe = (script: string): Promise<{ bytes: number; code: number | null }> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [program(script)], {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let bytes = 0
    child.stdout.pause()
    child.stdout.on("data", (chunk: Buffer) => {
      bytes += chunk.length
    })
    // the reader starts late: until then the child's writes fill the pipe and queue
    setTimeout(() => child.stdout.resume(), 1_500)
    child.on("error", reject)
    child.on("close", (code) => resolve({ bytes, code }))
  })

describe("output piped into a slow reader", () => {
  it("is written whole before the process exits with its code", async () => {
    const { bytes, code } = await throughSlowPipe("test/fixtures/pipe/bigOutput.ts")
    expect(code).toBe(1)
    expect(bytes).toBe(1_000_001)
  })
})
