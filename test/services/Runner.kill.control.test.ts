/**
 * Crash safety of control flow, tested for real: child processes run pipelines that rewind
 * and retry-all on a real SQLite file, are killed with SIGKILL at seeded-random moments five
 * times, and resumed each time. The end state must equal an uninterrupted run's.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type Child, executions, finalResults, killRepeatedly, query, start } from "../support/killHarness.js"

const states = (child: Child): Record<string, { handoffs: number; counters: Array<number> }> => {
  const line = child.stdout().trim().split("\n").reverse().find((l) => l.startsWith("{\"states\""))!
  return JSON.parse(line).states
}

const N = 60

describe("Runner control-flow crash safety (real processes, real SQLite)", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-kill-control-"))

  it("survives repeated SIGKILL: terminal once, same budgets and visit counters, no committed visit recomputed", async () => {
    const refDb = path.join(dir, "ref.db")
    const ref = start(refDb, path.join(dir, "ref.log"), N, 0, "control")
    expect(await ref.exited, ref.stderr()).toBe(0)
    const expectedResults = finalResults(refDb)
    const expectedStates = states(ref)
    expect(expectedResults.size).toBe(N)
    expect(Object.values(expectedStates)[0]).toEqual({ handoffs: 2, counters: [2, 3, 3, 1] })

    const db = path.join(dir, "killed.db")
    const log = path.join(dir, "killed.log")
    const { codes, committedBefore, run } = await killRepeatedly(
      db,
      log,
      N,
      20261201,
      (_, run) => executions(log).some((e) => e.run === run),
      "control"
    )
    // the kills landed while the runs were working (a run that already finished is no test)
    expect(codes.filter((c) => c === -9).length).toBeGreaterThanOrEqual(3)
    const last = start(db, log, N, run, "control")
    expect(await last.exited, last.stderr()).toBe(0)

    // every pipeline terminal exactly once, with the uninterrupted run's result
    const byState = query<{ state: string; n: number }>(db, "SELECT state, COUNT(*) AS n FROM pipelines GROUP BY state")
    expect(byState).toEqual([{ state: "succeeded", n: N }])
    expect(finalResults(db)).toEqual(expectedResults)
    // consumed budgets and visit counters equal the uninterrupted run's
    expect(states(last)).toEqual(expectedStates)
    // no visit whose result was committed before a run started ran again in that run
    const violations = executions(log).filter((e) => committedBefore[e.run - 1]?.has(e.key) === true)
    expect(violations).toEqual([])
    // the killed runs' attempts in flight are pipeline.abandoned events naming the numbers
    // reserved for them (never 0), not attempt rows (issue 18 F3); no station visit's attempt
    // number is recorded twice (a resume takes the next number)
    const attempts = query<{ pipeline_id: string; seq: number; visit: number; attempt_no: number; error_type: string | null }>(
      db,
      "SELECT pipeline_id, seq, coalesce(visit, 0) AS visit, attempt_no, error_type FROM attempts"
    )
    expect(attempts.filter((a) => a.error_type === "Abandoned")).toEqual([])
    const abandoned = query<{ data: string }>(db, "SELECT data FROM events WHERE kind = 'pipeline.abandoned'")
      .map((e) => JSON.parse(e.data) as { attemptNo: number; seq: number })
    expect(abandoned.length).toBeGreaterThan(0)
    expect(abandoned.filter((a) => !(a.attemptNo >= 1))).toEqual([])
    expect(attempts.filter((a) => a.attempt_no < 1)).toEqual([])
    const numbers = attempts.map((a) => `${a.pipeline_id} ${a.seq} ${a.visit} ${a.attempt_no}`)
    expect(numbers.filter((k, i) => numbers.indexOf(k) !== i)).toEqual([])
    // the ledger agrees with the task rows: one handed_off source per ledger row
    const ledger = query<{ n: number }>(db, "SELECT COUNT(*) AS n FROM handoffs")[0]!.n
    const handedOff = query<{ n: number }>(db, "SELECT COUNT(*) AS n FROM tasks WHERE state = 'handed_off'")[0]!.n
    expect(ledger).toBe(2 * N)
    expect(handedOff).toBe(ledger)
    // row by row: per pipeline, a rewind judge→gen then a retry-all judge→prep, each with a
    // handed_off judge row of its visit (0, then 1) and an entry artifact that exists
    const rows = query<{ pipeline_id: string; operation: string; from_seq: number; to_seq: number; entry_artifact_id: string; entry_reused: number }>(
      db,
      "SELECT pipeline_id, operation, from_seq, to_seq, entry_artifact_id, entry_reused FROM handoffs ORDER BY handoff_id"
    )
    const handedOffRows = new Set(
      query<{ pipeline_id: string; seq: number; visit: number }>(db, "SELECT pipeline_id, seq, visit FROM tasks WHERE state = 'handed_off'")
        .map((r) => `${r.pipeline_id} ${r.seq} ${r.visit}`)
    )
    const artifactAddresses = new Set(
      query<{ pipeline_id: string; seq: number; visit: number }>(db, "SELECT pipeline_id, seq, coalesce(visit, 0) AS visit FROM artifacts")
        .map((r) => (r.visit === 0 ? `${r.pipeline_id}:${r.seq}` : `${r.pipeline_id}:${r.seq}#${r.visit}`))
    )
    const byPipeline = new Map<string, Array<(typeof rows)[number]>>()
    for (const r of rows) byPipeline.set(r.pipeline_id, [...(byPipeline.get(r.pipeline_id) ?? []), r])
    expect(byPipeline.size).toBe(N)
    for (const [pipelineId, own] of byPipeline) {
      expect(own.map((r) => [r.operation, r.from_seq, r.to_seq])).toEqual([["rewind", 2, 1], ["retryAll", 2, 0]])
      own.forEach((_, visit) => expect(handedOffRows.has(`${pipelineId} 2 ${visit}`)).toBe(true))
      expect(own.map((r) => r.entry_artifact_id)).toEqual([`${pipelineId}:4`, `${pipelineId}:-1`])
      for (const r of own) expect(artifactAddresses.has(r.entry_artifact_id)).toBe(true)
    }
  }, 300_000)
})
