/**
 * The harness of the crash-safety tests (Runner.kill.test.ts, Runner.kill.control.test.ts):
 * starts the child program `test/fixtures/runner/killable.ts` (plain or control mode) on a
 * real SQLite file, watches its progress, and reads the store and the execution log back.
 */
import Database from "better-sqlite3"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { program } from "./program.js"

export { program }

/** The repository root, and the tsx loader of the examples' tests (which run them as users do). */
export const root = path.resolve(import.meta.dirname, "../..")
export const loader = path.join(root, "node_modules/tsx/dist/loader.mjs")

/** A running child: its process, `progress` lines seen, exit code (-9 for SIGKILL), output. */
export interface Child {
  readonly proc: ChildProcess
  readonly progress: () => number
  readonly exited: Promise<number | null>
  readonly stdout: () => string
  readonly stderr: () => string
}

/**
 * Starts the child on `db`, appending its task executions to `log`: `n` pipelines, 8 at a
 * time, 15 ms per task, tagged with `runIndex`.
 */
export const start = (db: string, log: string, n: number, runIndex: number, mode: "plain" | "control" = "plain"): Child => {
  const proc = spawn(process.execPath, [program("test/fixtures/runner/killable.ts"), db, log, String(n), "8", "15", String(runIndex), mode], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"]
  })
  let out = ""
  let err = ""
  let progress = 0
  proc.stdout!.on("data", (d: Buffer) => {
    const text = d.toString()
    out += text
    progress += text.split("\n").filter((l) => l === "progress").length
  })
  proc.stderr!.on("data", (d: Buffer) => {
    err += d.toString()
  })
  const exited = new Promise<number | null>((resolve) =>
    proc.on("exit", (code, signal) => resolve(code ?? (signal === "SIGKILL" ? -9 : null)))
  )
  return { proc, progress: () => progress, exited, stdout: () => out, stderr: () => err }
}

/** Polls `cond` every 10 ms; fails after `timeoutMs`. */
export const waitFor = async (cond: () => boolean, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("timed out waiting for the child")
    await new Promise((r) => setTimeout(r, 10))
  }
}

/** A small seeded generator so a failing run can be replayed (mulberry32). */
export const seeded = (seed: number) => () => {
  seed |= 0
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/** The rows of one read-only query on a store file. */
export const query = <A>(db: string, sql: string): Array<A> => {
  const conn = new Database(db, { readonly: true, fileMustExist: true })
  try {
    return conn.prepare(sql).all() as Array<A>
  } finally {
    conn.close()
  }
}

/** `pipelineId seq visit` of every task execution whose result (or handoff) is committed. */
export const committedVisits = (db: string): Set<string> =>
  new Set(
    query<{ pipeline_id: string; seq: number; visit: number | null }>(
      db,
      "SELECT pipeline_id, seq, visit FROM tasks WHERE state IN ('succeeded', 'handed_off')"
    ).map((r) => `${r.pipeline_id} ${r.seq} ${r.visit ?? 0}`)
  )

/** Each pipeline's final payload, as text. */
export const finalResults = (db: string): Map<string, string> =>
  new Map(
    query<{ pipeline_id: string; payload: Buffer }>(db, "SELECT pipeline_id, payload FROM artifacts WHERE is_final = 1")
      .map((r) => [r.pipeline_id, r.payload.toString("utf8")])
  )

/** Pipelines by state. */
export const pipelineStates = (db: string): Map<string, number> =>
  new Map(query<{ state: string; n: number }>(db, "SELECT state, COUNT(*) AS n FROM pipelines GROUP BY state").map((r) => [r.state, r.n]))

/** The execution log: `{ run, key: "pipelineId seq visit" }` per line. */
export const executions = (log: string) =>
  fs.existsSync(log)
    ? fs.readFileSync(log, "utf8").trim().split("\n").filter((l) => l !== "").map((l) => {
      const [run, pipelineId, seq, visit] = l.split(" ")
      return { run: Number(run), key: `${pipelineId} ${seq} ${visit}` }
    })
    : []

/**
 * Kills a child five times with SIGKILL at seeded-random moments after `started(child, run)`
 * holds, waiting past the stale threshold (400 ms) after each so the next run may claim the
 * dead run's rows. Returns the committed visits before each run (index = run - 1), the exit
 * codes of the killed runs and the next run index.
 */
export const killRepeatedly = async (
  db: string,
  log: string,
  n: number,
  seed: number,
  started: (child: Child, run: number) => boolean,
  mode: "plain" | "control" = "plain"
) => {
  const random = seeded(seed)
  const committedBefore: Array<Set<string>> = [new Set()]
  const codes: Array<number | null> = []
  let run = 1
  for (let kill = 0; kill < 5; kill++, run++) {
    const child = start(db, log, n, run, mode)
    await waitFor(() => started(child, run) || child.proc.exitCode !== null, 60_000)
    await new Promise((r) => setTimeout(r, Math.floor(random() * 400)))
    child.proc.kill("SIGKILL")
    codes.push(await child.exited)
    committedBefore.push(committedVisits(db))
    await new Promise((r) => setTimeout(r, 600))
  }
  return { committedBefore, codes, run }
}
