/**
 * Helpers of the tests that run assay as a user does: a spawned `bin/assay` (or any command)
 * with its output collected, temporary folders that are removed when the test's scope closes
 * (the run's `tempRoot.ts` removes whatever is left under `$TMPDIR` too), files written into
 * them, and read-only looks into the store files the processes leave.
 */
import Database from "better-sqlite3"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The checkout's root folder. */
export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

/** The checkout's `bin/assay`. */
export const bin = path.join(root, "bin/assay")

/** What a finished process left: its exit code (`null` when a signal ended it) and output. */
export interface Ran {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs `command args` in `cwd` (default: the checkout) with `env` added to this process's
 * environment, and waits for it to end. Never fails: a command that cannot start ends with
 * code `null` and the error in `stderr`.
 */
export const exec = (
  command: string,
  args: ReadonlyArray<string>,
  options: ExecOptions & { readonly input?: string } = {}
): Effect.Effect<Ran> =>
  Effect.async<Ran>((resume) => {
    const child = spawn(command, [...args], {
      cwd: options.cwd ?? root,
      env: { ...process.env, ...options.env },
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"]
    })
    // a command that hangs fails the test instead of outliving it
    const guard = options.killAfterMs === undefined ? undefined : setTimeout(() => child.kill("SIGKILL"), options.killAfterMs)
    child.on("close", () => clearTimeout(guard))
    let stdout = ""
    let stderr = ""
    child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()))
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()))
    if (options.input !== undefined) child.stdin?.end(options.input)
    child.on("error", (e) => (stderr += String(e)))
    child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/**
 * Where and how a command runs: `cwd` (default: the checkout), `env` added to this process's
 * environment (a key set to `undefined` is removed), and `killAfterMs`, after which a command
 * still running is killed (SIGKILL: it ends with `signal` set).
 */
export interface ExecOptions {
  readonly cwd?: string | undefined
  readonly env?: Record<string, string | undefined> | undefined
  readonly killAfterMs?: number | undefined
}

/** Runs the checkout's `bin/assay` with `args` (see {@link exec}). */
export const assay = (args: ReadonlyArray<string>, options: ExecOptions = {}): Effect.Effect<Ran> => exec(bin, args, options)

/**
 * A new empty folder under the system's temporary folder, removed with everything in it when
 * the enclosing scope closes.
 */
export const tempDir = (prefix = "test") =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), `assay-${prefix}-`))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/** A started `assay` process: the child, its output so far, and a promise of its result. */
export interface CliProcess {
  readonly child: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  readonly done: Promise<Ran>
}

/**
 * Waits until the stderr of `proc` shows `text`, or `proc` ended: `true` once it showed it,
 * `false` when the process ended without it. Told by the process's output as it comes (no
 * polling, and no time budget of its own: the test's timeout bounds the wait), so a slow start
 * under load is waited for, and a process that never says it still fails the test.
 */
export const stderrShows = (proc: CliProcess, text: string): Effect.Effect<boolean> =>
  Effect.async<boolean>((resume) => {
    let over = false
    const finish = (shown: boolean) => {
      if (over) return
      over = true
      proc.child.stderr?.off("data", onData)
      resume(Effect.succeed(shown))
    }
    // registered after `start`'s own listener: `proc.stderr()` already holds the chunk
    const onData = () => {
      if (proc.stderr().includes(text)) finish(true)
    }
    if (proc.stderr().includes(text)) {
      finish(true)
      return
    }
    proc.child.stderr?.on("data", onData)
    void proc.done.then(() => finish(proc.stderr().includes(text)))
    return Effect.sync(() => {
      over = true
      proc.child.stderr?.off("data", onData)
    })
  })

/**
 * Starts `bin/assay args` without waiting for it (to signal or kill it while it runs), in
 * `cwd` (default: the checkout) with `env` added to this process's environment.
 */
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
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()))
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()))
  const done = new Promise<Ran>((resolve) => child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr })))
  return { child, stdout: () => stdout, stderr: () => stderr, done }
}

/**
 * Writes `content` to `dir/name` (its folders made as needed; a value other than a string as
 * indented JSON) and returns the path.
 */
export const write = (dir: string, name: string, content: unknown): string => {
  const p = path.join(dir, name)
  fs.mkdirSync(path.dirname(p), { recursive: true })
  fs.writeFileSync(p, typeof content === "string" ? content : JSON.stringify(content, null, 2))
  return p
}

/** The rows of `sql` (with `params`) on the SQLite file `db`, opened read-only for the query. */
export const query = <A = Record<string, unknown>>(db: string, sql: string, ...params: Array<unknown>): Array<A> => {
  const d = new Database(db, { readonly: true, fileMustExist: true })
  try {
    return d.prepare(sql).all(...params) as Array<A>
  } finally {
    d.close()
  }
}

/** The first column of the first row of `sql` on `db`, as a number (a `count(*)`). */
export const count = (db: string, sql: string, ...params: Array<unknown>): number =>
  Number(Object.values(query(db, sql, ...params)[0]!)[0])

/** Resolves after `ms` real milliseconds (spawned processes run on real time). */
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * Polls `check` every 20 ms until it holds (a throw counts as not yet: a store being created),
 * failing with "timed out waiting for `what`" after `timeoutMs`: what a test waits for in a
 * process it started.
 */
export const waitFor = async (check: () => boolean, what: string, timeoutMs = 30_000): Promise<void> => {
  const t0 = Date.now()
  const safe = () => {
    try {
      return check()
    } catch {
      return false
    }
  }
  while (!safe()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

/**
 * Waits in real time, polling every 200 ms, until `check` holds or `ms` passed; succeeds with
 * whether it holds (for end-to-end tests watching other processes: a log, a database row).
 */
export const untilReal = (check: () => boolean, ms: number): Effect.Effect<boolean> =>
  Effect.promise(async () => {
    const end = Date.now() + ms
    while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 200))
    return check()
  })

/**
 * The lines of the log file `log` (none while it does not exist), each split on spaces: the
 * call logs the end-to-end tests' task files append to.
 */
export const logLines = (log: string): Array<Array<string>> =>
  fs.existsSync(log)
    ? fs.readFileSync(log, "utf8").trim().split("\n").filter((l) => l !== "").map((l) => l.split(" "))
    : []
