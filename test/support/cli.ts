/**
 * Running the real `bin/assay` from a test, as a user would: a spawned child with piped
 * output, and a scoped temporary directory removed when the test's scope closes.
 */
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The checkout's root directory. */
export const root = fileURLToPath(new URL("../../", import.meta.url))
/** The CLI entry point. */
export const bin = path.join(root, "bin/assay")

/** What a finished `assay` process left: exit code (null when killed by a signal), output. */
export interface CliResult {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** A started `assay` process: the child and a promise of its result. */
export interface CliProcess {
  readonly child: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  readonly done: Promise<CliResult>
}

/** Starts `assay args` in `cwd` (default: the checkout) with `env` added to this process's environment. */
export const start = (
  args: ReadonlyArray<string>,
  options: { readonly cwd?: string; readonly env?: Record<string, string | undefined> } = {}
): CliProcess => {
  const child = spawn(bin, [...args], {
    cwd: options.cwd ?? root,
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stdout = ""
  let stderr = ""
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()))
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()))
  const done = new Promise<CliResult>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
  )
  return { child, stdout: () => stdout, stderr: () => stderr, done }
}

/** Runs `assay args` to its end. */
export const assay = (
  args: ReadonlyArray<string>,
  options: { readonly cwd?: string; readonly env?: Record<string, string | undefined> } = {}
): Effect.Effect<CliResult> => Effect.promise(() => start(args, options).done)

/** A temporary directory for the current scope, removed (recursively) when it closes. */
export const tempDir = (prefix = "assay-test-"): Effect.Effect<string, never, import("effect").Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), prefix))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/** Writes `text` to `dir/name` and returns the path. */
export const write = (dir: string, name: string, text: string): string => {
  const p = path.join(dir, name)
  fs.writeFileSync(p, text)
  return p
}
