/**
 * Help output as a user sees it when piping it (to a pager, a file, a CI log): plain text,
 * no ANSI escape sequences. Spawned `bin/assay` processes with stdout as a pipe.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../", import.meta.url))
const bin = path.join(root, "bin/assay")

const assay = (args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<{ code: number | null; stdout: string }>((resolve) => {
      const child = spawn(bin, [...args], { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
      child.on("close", (code) => resolve({ code, stdout }))
    })
  )

describe("assay --help through a pipe", { timeout: 120_000 }, () => {
  it.live("root and subcommand help are plain text listing the commands and options", () =>
    Effect.gen(function*() {
      const root = yield* assay(["--help"])
      assert.strictEqual(root.code, 0)
      assert.notInclude(root.stdout, "\u001b[")
      for (const command of ["validate", "run", "resume", "report", "export", "merge", "plugins", "schema"]) {
        assert.include(root.stdout, command)
      }
      const run = yield* assay(["run", "--help"])
      assert.strictEqual(run.code, 0)
      assert.notInclude(run.stdout, "\u001b[")
      assert.include(run.stdout, "--max-admitted")
    }))
})
