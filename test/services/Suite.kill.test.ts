/**
 * Suite crash safety, tested for real: `bin/assay run -c SUITE` on a suite of 3 members
 * sharing one pool (layout byExperiment: one SQLite file per member) is killed with SIGKILL at
 * seeded-random moments and resumed; one resume selects a single member. Every task execution
 * appends `<run> <member> <pipelineId> <seq>` to a log before it returns, so the test tells
 * which tasks ran again.
 *
 * Checked: nothing lost (every pipeline of every member succeeds, with the result of an
 * uninterrupted computation), nothing re-run (no task whose checkpoint was committed before a
 * run started runs again in that run), and a selective resume (`--experiment b`) leaves the
 * other members' files byte for byte as they were.
 */
import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { type ChildProcess, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../", import.meta.url))
const bin = path.join(root, "bin/assay")
const MEMBERS = ["a", "b", "c"] as const
const N = 40

interface Child {
  readonly proc: ChildProcess
  readonly exited: Promise<number | null>
  readonly stderr: () => string
}

const start = (args: ReadonlyArray<string>, run: number): Child => {
  const proc = spawn(bin, [...args], {
    cwd: root,
    env: { ...process.env, SUITE_KILL_RUN: String(run) },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let err = ""
  proc.stdout!.on("data", () => {})
  proc.stderr!.on("data", (d: Buffer) => (err += d.toString()))
  const exited = new Promise<number | null>((resolve) =>
    proc.on("exit", (code, signal) => resolve(code ?? (signal === "SIGKILL" ? -9 : null)))
  )
  return { proc, exited, stderr: () => err }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

// A small seeded generator so a failing run can be replayed (mulberry32).
const seeded = (seed: number) => () => {
  seed |= 0
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const read = <A>(db: string, sql: string): Array<A> => {
  if (!fs.existsSync(db)) return []
  const conn = new Database(db, { readonly: true, fileMustExist: true })
  try {
    return conn.prepare(sql).all() as Array<A>
  } finally {
    conn.close()
  }
}

const setup = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-suite-kill-"))
  const log = path.join(dir, "exec.log")
  fs.mkdirSync(path.join(dir, "lib"))
  fs.writeFileSync(path.join(dir, "lib/package.json"), JSON.stringify({ type: "module" }))
  fs.writeFileSync(
    path.join(dir, "lib/tasks.ts"),
    [
      `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
      `import * as fs from "node:fs"`,
      `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
      `const logged = (name: string, f: (n: number) => number) => (log: string) =>`,
      `  Task.make(name, (n: number, ctx) => Effect.scoped(Effect.gen(function*() {`,
      `    yield* ctx.acquire()`,
      `    yield* Effect.sleep("25 millis")`,
      `    fs.appendFileSync(log, [process.env.SUITE_KILL_RUN, ctx.experimentId, ctx.pipelineId, ctx.seq].join(" ") + "\\n")`,
      `    return f(n)`,
      `  })))`,
      `export const triple = logged("triple", (n) => n * 3)`,
      `export const plusOne = logged("plusOne", (n) => n + 1)`
    ].join("\n")
  )
  for (const m of MEMBERS) {
    fs.writeFileSync(
      path.join(dir, `${m}.json`),
      JSON.stringify({
        pools: { apis: { resources: [{ id: `own-${m}`, capacity: 1 }] } },
        pipeline: {
          name: m,
          tasks: [
            { use: "./lib/tasks.ts#triple", args: [log], resource: "apis" },
            { use: "./lib/tasks.ts#plusOne", args: [log], resource: "apis" }
          ]
        },
        source: { range: { n: N } }
      })
    )
  }
  const suite = path.join(dir, "suite.json")
  fs.writeFileSync(
    suite,
    JSON.stringify({
      suite: { id: "killable" },
      run: { concurrency: 6, heartbeat: "100 millis" },
      output: { root: "out", layout: "byExperiment" },
      pools: { shared: { resources: [{ id: "s", capacity: 3 }] } },
      experiments: Object.fromEntries(MEMBERS.map((m) => [m, { config: `${m}.json`, poolBindings: { apis: "shared" } }]))
    })
  )
  const dbOf = (m: string) => path.join(dir, "out/experiments", m, "state.db")
  return { dir, log, suite, dbOf }
}

const executions = (log: string) =>
  fs.existsSync(log)
    ? fs.readFileSync(log, "utf8").trim().split("\n").filter((l) => l !== "").map((l) => {
      const [run, member, pipelineId, seq] = l.split(" ")
      return { run: Number(run), member: member!, key: `${pipelineId} ${seq}` }
    })
    : []

/** Hash of every file of a member's directory (the database and its WAL/SHM files). */
const fingerprint = (dir: string): string => {
  if (!fs.existsSync(dir)) return "absent"
  const h = createHash("sha256")
  for (const name of fs.readdirSync(dir).sort()) {
    const p = path.join(dir, name)
    if (fs.statSync(p).isFile()) h.update(name).update(fs.readFileSync(p))
  }
  return h.digest("hex")
}

describe("Suite crash safety (real processes, one SQLite file per member)", () => {
  it("SIGKILL + resume on 3 members sharing one pool: nothing lost, nothing re-run; a selective resume touches only its member", async () => {
    const s = setup()
    const random = seeded(20261201)
    const committed = () => {
      const out = new Set<string>()
      for (const m of MEMBERS) {
        for (const r of read<{ pipeline_id: string; seq: number }>(s.dbOf(m), "SELECT pipeline_id, seq FROM tasks WHERE state = 'succeeded'")) {
          out.add(`${r.pipeline_id} ${r.seq}`)
        }
      }
      return out
    }
    const committedBefore = new Map<number, Set<string>>()
    const killAfterProgress = async (args: ReadonlyArray<string>, run: number) => {
      committedBefore.set(run, committed())
      const before = executions(s.log).length
      const child = start(args, run)
      const t0 = Date.now()
      while (executions(s.log).length < before + 6 && child.proc.exitCode === null) {
        if (Date.now() - t0 > 60_000) throw new Error(`no progress: ${child.stderr()}`)
        await sleep(10)
      }
      await sleep(Math.floor(random() * 200))
      child.proc.kill("SIGKILL")
      await child.exited
    }

    let run = 1
    await killAfterProgress(["run", "-c", s.suite], run++)
    await killAfterProgress(["resume", "-c", s.suite], run++)

    // a selective resume: b only; a's and c's files stay exactly as the kill left them
    await killAfterProgress(["resume", "-c", s.suite], run++)
    committedBefore.set(run, committed())
    // the kills left work in every member (so a resume of all would touch every file)
    for (const m of MEMBERS) {
      const done = read<{ n: number }>(s.dbOf(m), "SELECT count(*) AS n FROM pipelines WHERE state = 'succeeded'")[0]?.n ?? 0
      expect(done, m).toBeLessThan(N)
    }
    const others = { a: fingerprint(path.dirname(s.dbOf("a"))), c: fingerprint(path.dirname(s.dbOf("c"))) }
    const onlyB = start(["resume", "-c", s.suite, "--experiment", "b"], run)
    expect(await onlyB.exited, onlyB.stderr()).toBe(0)
    expect(executions(s.log).filter((e) => e.run === run && e.member !== "b")).toEqual([])
    expect(executions(s.log).filter((e) => e.run === run).length).toBeGreaterThan(0)
    expect(fingerprint(path.dirname(s.dbOf("a")))).toBe(others.a)
    expect(fingerprint(path.dirname(s.dbOf("c")))).toBe(others.c)
    run++

    // the rest
    committedBefore.set(run, committed())
    const last = start(["resume", "-c", s.suite], run)
    expect(await last.exited, last.stderr()).toBe(0)

    // nothing lost: every pipeline of every member succeeded with the uninterrupted result
    const expected = Array.from({ length: N }, (_, i) => String(i * 3 + 1)).sort()
    for (const m of MEMBERS) {
      const states = read<{ state: string; n: number }>(s.dbOf(m), "SELECT state, count(*) AS n FROM pipelines GROUP BY state")
      expect(states, m).toEqual([{ state: "succeeded", n: N }])
      const finals = read<{ payload: Buffer }>(s.dbOf(m), "SELECT payload FROM artifacts WHERE is_final = 1")
        .map((r) => r.payload.toString("utf8"))
        .sort()
      expect(finals, m).toEqual(expected)
    }
    // nothing re-run: no task committed before a run started ran again in that run
    const violations = executions(s.log).filter((e) => committedBefore.get(e.run)?.has(e.key) === true)
    expect(violations).toEqual([])
    // every task ran; re-runs only for work in flight at a kill (at most the 6 workers per kill)
    const counts = new Map<string, number>()
    for (const e of executions(s.log)) counts.set(e.key, (counts.get(e.key) ?? 0) + 1)
    expect(counts.size).toBe(MEMBERS.length * N * 2)
    expect([...counts.values()].filter((c) => c > 1).length).toBeLessThanOrEqual(3 * 6)
  }, 240_000)
})
