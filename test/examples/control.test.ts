/**
 * The two control-flow examples (examples/control/) run as a user runs them, each in its own
 * process against a fresh SQLite file: a validator rewinding a generator with a HistoryArtifact
 * payload, and a retry-all. A second run of the rewind example skips every pipeline and
 * changes nothing in the ledger.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { loader, query, root } from "../support/killHarness.js"

const runExample = (script: string, db: string) =>
  spawnSync(process.execPath, ["--conditions=assay-source", "--import", loader, script, db], { cwd: root, encoding: "utf8" })

describe("examples/control", () => {
  it("rewind: odd ids are sent back once with a restored HistoryArtifact; a second run skips all", () => {
    const db = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-example-rewind-")), "r.db")
    const first = runExample("examples/control/rewind.ts", db)
    expect(first.status, first.stderr).toBe(0)
    expect(first.stdout.match(/^handoff .*: validate -rewind-> generate \(answer is not JSON\)/gm)?.length).toBe(3)
    expect(first.stdout).toMatch(/result \{"id":1,"answer":\{"id":1,"prime":false\},"generations":2\}/)
    expect(first.stdout).toMatch(/result \{"id":2,"answer":\{"id":2,"prime":true\},"generations":1\}/)
    expect(first.stdout).toMatch(/pipelines: 6 \(succeeded 6\), skipped 0/)
    expect(first.stdout).toMatch(/^transitions: 3 \(3 against maxHandoffs, 0 ends\)$/m)
    // the rewound pipelines ran generate twice (visit 0 is history now), the others once
    const generated = query<{ visit: number; active: number; n: number }>(
      db,
      "SELECT visit, active, COUNT(*) AS n FROM tasks WHERE task_name = 'generate' GROUP BY visit, active ORDER BY visit, active"
    )
    expect(generated).toEqual([{ visit: 0, active: 0, n: 3 }, { visit: 0, active: 1, n: 3 }, { visit: 1, active: 1, n: 3 }])
    // the payload sent back is stored with the history-v1 codec of the registered class
    const payloads = query<{ type_name: string; codec: string }>(db, "SELECT type_name, codec FROM artifacts WHERE seq = 3")
    expect(payloads).toEqual(Array.from({ length: 3 }, () => ({ type_name: "examples/Draft", codec: "history-v1" })))
    const second = runExample("examples/control/rewind.ts", db)
    expect(second.status, second.stderr).toBe(0)
    expect(second.stdout).toMatch(/skipped 6/)
    expect(query<{ n: number }>(db, "SELECT COUNT(*) AS n FROM handoffs")[0]!.n).toBe(3)
  }, 120_000)

  it("retry-all: every third id starts over from the seed as visit 1 within a budget of one", () => {
    const db = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "assay-example-retry-all-")), "r.db")
    const run = runExample("examples/control/retry-all.ts", db)
    expect(run.status, run.stderr).toBe(0)
    const lines = run.stdout.split("\n")
    expect(lines.filter((l) => /counters \[2,2,2\], handoffs 1, ledger check -retryAll-> fetchContext/.test(l)).length).toBe(2)
    expect(lines.filter((l) => /counters \[1,1,1\], handoffs 0, ledger -$/.test(l)).length).toBe(4)
    expect(run.stdout).toMatch(/result \{"id":3,"answer":"9 \(from fresh context\)","visit":1\}/)
    expect(run.stdout).toMatch(/result \{"id":4,"answer":"16 \(from fresh context\)","visit":0\}/)
    expect(run.stdout).toMatch(/^transitions: 2 \(2 against maxHandoffs, 0 ends\)$/m)
    expect(query<{ operation: string; to_seq: number }>(db, "SELECT operation, to_seq FROM handoffs")).toEqual([
      { operation: "retryAll", to_seq: 0 },
      { operation: "retryAll", to_seq: 0 }
    ])
  }, 120_000)
})
