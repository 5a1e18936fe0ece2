/**
 * C14 of ../shared/cases/README.md: the terminal closes (SIGHUP), or a service manager stops
 * the run (SIGTERM): the same as Ctrl-C. Through the real `bin/assay`, with real process trees.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { start, tempDir, write } from "../support/cli.js"

/** Pids of live (not zombie) processes whose command line contains `marker`, and their children. */
const treeOf = (marker: string): Array<number> => {
  const out: Array<number> = []
  const all = fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d))
  const alive = (pid: string) => {
    try {
      return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, "utf8"))
    } catch {
      return false
    }
  }
  const roots = new Set<string>()
  for (const pid of all) {
    try {
      if (fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker) && alive(pid)) roots.add(pid)
    } catch {
      // gone
    }
  }
  for (const pid of all) {
    try {
      const ppid = fs.readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^\d+ \(.*\) /, "").split(" ")[1]!
      if ((roots.has(pid) || roots.has(ppid)) && alive(pid)) out.push(Number(pid))
    } catch {
      // gone
    }
  }
  return out
}

const waitUntil = (check: () => boolean, what: string, timeoutMs = 30_000) =>
  Effect.promise(async () => {
    const t0 = Date.now()
    while (!check()) {
      if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
      await new Promise((r) => setTimeout(r, 50))
    }
  })

describe("C14: the terminal closes", () => {
  for (const signal of ["SIGHUP", "SIGTERM"] as const) {
    it.scopedLive(`${signal} to assay run: process trees reaped, run interrupted and resumable, exit 130`, () =>
      Effect.gen(function*() {
        const dir = yield* tempDir()
        const marker = `c14-${randomUUID()}`
        const store = path.join(dir, "c14.db")
        const config = write(dir, "c14.json", JSON.stringify({
          run: { concurrency: 2, grace: "1 second" },
          pipeline: { name: "c14", tasks: [{ use: "shellRun", args: [["sh", "-c", `sleep 30; echo ${marker}`]] }] },
          source: { range: { n: 2 } }
        }))
        const p = start(["run", "-c", config, "--store", store])
        // both shells and their sleeps are up
        yield* waitUntil(() => treeOf(marker).length >= 4, "two process trees")
        p.child.kill(signal)
        const r = yield* Effect.promise(() => p.done)
        assert.strictEqual(r.code, 130, r.stderr)
        assert.deepStrictEqual(treeOf(marker), [], "every shell and sleep is gone")
        const db = new Database(store, { readonly: true })
        try {
          const run = db.prepare("SELECT status, stop_reason FROM runs").get() as { status: string; stop_reason: string }
          assert.deepStrictEqual(run, { status: "interrupted", stop_reason: signal.toLowerCase() })
          const states = db.prepare("SELECT state FROM pipelines").all() as Array<{ state: string }>
          assert.deepStrictEqual(states.map((s) => s.state), ["interrupted", "interrupted"])
        } finally {
          db.close()
        }
        assert.include(r.stderr, "resume with: assay resume")
      }), { timeout: 60_000 })
  }
})
