/**
 * Crash safety, tested for real: child processes run the runner on a real SQLite file and are
 * killed (SIGKILL, SIGINT) at seeded-random moments, then resumed.
 */
import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import {
  committedVisits,
  executions,
  finalResults,
  killRepeatedly,
  program,
  pipelineStates,
  root,
  start,
  waitFor
} from "../support/killHarness.js"

const N = 240

describe("Runner crash safety (real processes, real SQLite)", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-kill-"))

  it("survives repeated SIGKILL: every pipeline succeeds once, no committed task runs again, same results", async () => {
    // The reference: one uninterrupted run.
    const refDb = path.join(dir, "ref.db")
    const ref = start(refDb, path.join(dir, "ref.log"), N, 0)
    expect(await ref.exited).toBe(0)
    const expected = finalResults(refDb)
    expect(expected.size).toBe(N)

    const db = path.join(dir, "killed.db")
    const log = path.join(dir, "killed.log")
    // Let each run make some progress, then kill it at a random moment.
    const { committedBefore, run } = await killRepeatedly(db, log, N, 20261130, (child) => child.progress() >= 1)
    const last = start(db, log, N, run)
    const code = await last.exited
    expect(code, last.stderr()).toBe(0)

    expect(pipelineStates(db).get("succeeded")).toBe(N)
    expect(finalResults(db)).toEqual(expected)

    // No task whose checkpoint was committed before a run started ran again in that run.
    const violations = executions(log).filter((e) => committedBefore[e.run - 1]?.has(e.key) === true)
    expect(violations).toEqual([])
    // Every task ran at least once; re-runs only for work that was in flight at a kill.
    const counts = new Map<string, number>()
    for (const e of executions(log)) counts.set(e.key, (counts.get(e.key) ?? 0) + 1)
    expect(counts.size).toBe(N * 3)
    const reruns = [...counts.values()].filter((c) => c > 1).length
    expect(reruns).toBeLessThanOrEqual(5 * 8)
  }, 240_000)

  it("after SIGKILL, pipelines that were only waiting for a worker slot get no invented attempt: one pipeline.abandoned event each", async () => {
    const db = path.join(dir, "waiting.db")
    const log = path.join(dir, "waiting.log")
    const starts = path.join(dir, "waiting.starts")
    // one worker slot, a long first task: one pipeline runs, the others are admitted (their
    // rows durable, `running`) and wait for the slot
    const child = spawn(process.execPath, [program("test/fixtures/runner/killable.ts"), db, log, "6", "1", "60000", "1"], {
      cwd: root,
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, KILLABLE_STARTS: starts }
    })
    const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()))
    const running = () => {
      if (!fs.existsSync(db)) return 0
      try {
        const conn = new Database(db, { readonly: true, fileMustExist: true })
        try {
          return (conn.prepare("SELECT count(*) AS n FROM pipelines WHERE state = 'running'").get() as { n: number }).n
        } finally {
          conn.close()
        }
      } catch {
        return 0
      }
    }
    await waitFor(() => (fs.existsSync(starts) && fs.readFileSync(starts, "utf8").length > 0 && running() >= 3) || child.exitCode !== null, 60_000)
    child.kill("SIGKILL")
    await exited
    await new Promise((r) => setTimeout(r, 600))
    const startedInRun1 = new Set(
      fs.readFileSync(starts, "utf8").trim().split("\n").map((l) => l.split(" ")).filter((w) => w[0] === "1").map((w) => `${w[1]} ${w[2]}`)
    )
    expect(startedInRun1.size).toBe(1)

    const resumed = start(db, log, 6, 2)
    expect(await resumed.exited, resumed.stderr()).toBe(0)
    expect(pipelineStates(db).get("succeeded")).toBe(6)
    const conn = new Database(db, { readonly: true })
    const rows = conn.prepare("SELECT count(*) AS n FROM attempts WHERE error_type = 'Abandoned'").get() as { n: number }
    const abandoned = (conn.prepare(
      "SELECT pipeline_id, data FROM events WHERE kind = 'pipeline.abandoned'"
    ).all() as Array<{ pipeline_id: string; data: string }>).map((e) => ({ pipeline_id: e.pipeline_id, ...JSON.parse(e.data) as { seq: number } }))
    const stillRunning = conn.prepare("SELECT count(*) AS n FROM pipelines WHERE state = 'running'").get() as { n: number }
    const [attempts, tasks] = ["attempts", "tasks"].map((t) => (conn.prepare(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n)
    conn.close()
    // the pipelines claimed from the dead run (the one running and those waiting for the slot):
    // no attempt row for any (nothing durable says which started), one event each
    expect(rows.n).toBe(0)
    const neverStarted = abandoned.filter((a) => !startedInRun1.has(`${a.pipeline_id} ${a.seq}`))
    expect(neverStarted.length).toBeGreaterThanOrEqual(2)
    expect(stillRunning.n).toBe(0)
    // attempts are what ran and was recorded: one per task (no retries)
    expect(attempts).toBe(tasks)
  }, 180_000)

  it("on SIGINT exits 130 with rows interrupted, and resume completes exactly the rest", async () => {
    const db = path.join(dir, "sigint.db")
    const log = path.join(dir, "sigint.log")
    const child = start(db, log, N, 1)
    await waitFor(() => child.progress() >= 5, 60_000)
    child.proc.kill("SIGINT")
    expect(await child.exited).toBe(130)
    const states = pipelineStates(db)
    expect(states.get("running") ?? 0).toBe(0)
    expect(states.get("interrupted") ?? 0).toBeGreaterThan(0)
    const committed = committedVisits(db)

    const resumed = start(db, log, N, 2)
    expect(await resumed.exited).toBe(0)
    expect(pipelineStates(db).get("succeeded")).toBe(N)
    const again = executions(log).filter((e) => e.run === 2 && committed.has(e.key))
    expect(again).toEqual([])
    // A second resume has nothing to do.
    const idle = start(db, log, N, 3)
    expect(await idle.exited).toBe(0)
    expect(executions(log).filter((e) => e.run === 3)).toEqual([])
  }, 120_000)
})

describe("Ctrl-C on an Effect program run as the process's main (issue 21)", () => {
  for (const mode of ["plain", "assay"] as const) {
    it(`${mode === "plain" ? "NodeRuntime.runMain" : "NodeMain.runMain"}: the run is closed interrupted and resumable${mode === "assay" ? ", exit 130" : ""}`, async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-main-"))
      try {
        const db = path.join(dir, "main.db")
        const proc = spawn(process.execPath, [program("test/fixtures/runner/mainProgram.ts"), db, mode], {
          cwd: root,
          stdio: ["ignore", "pipe", "pipe"]
        })
        let out = ""
        let err = ""
        proc.stdout!.on("data", (d: Buffer) => (out += d.toString()))
        proc.stderr!.on("data", (d: Buffer) => (err += d.toString()))
        const exited = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)))
        const t0 = Date.now()
        while (!out.includes("started")) {
          if (Date.now() - t0 > 30_000) throw new Error(`the program did not start: ${err}`)
          await new Promise((r) => setTimeout(r, 20))
        }
        proc.kill("SIGINT")
        const code = await exited
        // NodeRuntime.runMain's own teardown exits 0 after an interruption; assay's says 130
        expect(code).toBe(mode === "plain" ? 0 : 130)
        if (mode === "assay") expect(err).toContain("interrupted (resumable")
        const d = new Database(db, { readonly: true })
        try {
          const runs = d.prepare("SELECT status, stop_reason FROM runs").all() as Array<{ status: string; stop_reason: string | null }>
          expect(runs).toHaveLength(1)
          expect(runs[0]!.status).toBe("interrupted")
          expect(d.prepare("SELECT count(*) AS n FROM pipelines WHERE state = 'running'").get()).toEqual({ n: 0 })
          const done = (d.prepare("SELECT count(*) AS n FROM pipelines WHERE state = 'succeeded'").get() as { n: number }).n
          expect(done).toBeGreaterThan(0)
          expect(done).toBeLessThan(40)
        } finally {
          d.close()
        }
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }, 60_000)
  }
})
