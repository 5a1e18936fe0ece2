/**
 * The store's POSIX locks against outside connections, for real: a spawned `bin/assay run`
 * writes a store while another process opens it read-write and closes it every 100 ms, with
 * better-sqlite3 and with the `sqlite3` shell (when installed). An outside read-write
 * connection that closes while it believes it is alone checkpoints and deletes the WAL; before
 * issue 19 the writer had dropped its own locks (it read the file header through a descriptor
 * of its own and closed it), so that happened during runs and committed work was lost.
 *
 * The meddler samples, between its reads of the run's status, the writer's locks on the
 * database file (`/proc/locks`) and the WAL file (exists, same inode). A sample counts as
 * "during the run" when the run was still `running` after it was taken.
 *
 * `ASSAY_CHAOS_PIPELINES` sets the run's size (default: the 20,000, about 20 s on a
 * loaded 2-core machine).
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { root, start } from "../support/cli.js"

const N = Number(process.env.ASSAY_CHAOS_PIPELINES ?? 20_000)
const SQLITE3 = ["/usr/bin/sqlite3", "/usr/local/bin/sqlite3"].find((p) => fs.existsSync(p))

interface Sample {
  readonly via: "better-sqlite3" | "sqlite3"
  readonly running: boolean
  readonly writerLocks: number
  readonly walIno: number | null
  readonly pipelines: number
}

/** The meddler: a separate node process that opens the store read-write every 100 ms. */
const meddlerScript = (db: string, out: string) => `
import { createRequire } from "node:module"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
const Database = createRequire(${JSON.stringify(path.join(root, "package.json"))})("better-sqlite3")
const db = ${JSON.stringify(db)}
const sqlite3 = ${JSON.stringify(SQLITE3 ?? null)}
const out = fs.openSync(${JSON.stringify(out)}, "w")
const inode = (p) => { try { return fs.statSync(p).ino } catch { return null } }
/** Lock lines on the database file held by processes other than this one and its children. */
const writerLocks = (mine) => {
  const ino = inode(db)
  if (ino === null) return 0
  return fs.readFileSync("/proc/locks", "utf8").split("\\n").filter((l) => {
    const f = l.trim().split(/\\s+/)
    // "1: POSIX  ADVISORY  READ 1234 fe:00:5678 start end" (blocked waiters: "1: -> POSIX ...")
    const i = f[1] === "->" ? 1 : 0
    return f[5 + i] !== undefined && f[5 + i].endsWith(":" + ino) && !mine.has(Number(f[4 + i]))
  }).length
}
const status = (c) => { try { return c.prepare("SELECT status FROM runs ORDER BY started_at DESC LIMIT 1").pluck().get() ?? "none" } catch { return "none" } }
const shell = (sql) => spawnSync(sqlite3, ["-cmd", ".timeout 5000", db, sql], { encoding: "utf8" })
let stop = false
process.on("SIGTERM", () => { stop = true })
let n = 0
const tick = () => {
  if (stop) { fs.closeSync(out); process.exit(0) }
  n++
  try {
    if (sqlite3 !== null && n % 2 === 0) {
      // the shell in its default (read-write) mode: one connection per invocation
      const before = shell("SELECT status FROM runs ORDER BY started_at DESC LIMIT 1;").stdout.trim()
      const locks = writerLocks(new Set([process.pid]))
      const walIno = inode(db + "-wal")
      const after = shell("SELECT (SELECT status FROM runs ORDER BY started_at DESC LIMIT 1) || ' ' || (SELECT count(*) FROM pipelines);").stdout.trim().split(" ")
      fs.writeSync(out, JSON.stringify({ via: "sqlite3", running: before === "running" && after[0] === "running", writerLocks: locks, walIno, pipelines: Number(after[1] ?? 0) }) + "\\n")
    } else if (fs.existsSync(db)) {
      const c = new Database(db, { timeout: 5000 }) // read-write, like Python's sqlite3.connect
      try {
        const before = status(c)
        const locks = writerLocks(new Set([process.pid]))
        const walIno = inode(db + "-wal")
        const after = status(c)
        const pipelines = (() => { try { return c.prepare("SELECT count(*) FROM pipelines").pluck().get() } catch { return 0 } })()
        fs.writeSync(out, JSON.stringify({ via: "better-sqlite3", running: before === "running" && after === "running", writerLocks: locks, walIno, pipelines }) + "\\n")
      } finally {
        c.close()
      }
    }
  } catch (e) {
    fs.writeSync(out, JSON.stringify({ error: String(e) }) + "\\n")
  }
  setTimeout(tick, 100)
}
tick()
`

/** `bin/assay args` in `cwd`, to its end. */
const run = (args: ReadonlyArray<string>, cwd: string) => start(args, { cwd }).done

describe("SqliteStore: outside read-write connections during a run", () => {
  it.live(`a run of ${N} pipelines keeps its lock and its WAL; every pipeline and the run's close are stored`, () =>
    Effect.promise(async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-locks-"))
      const db = path.join(dir, "chaos.db")
      const samples = path.join(dir, "samples.jsonl")
      const config = path.join(dir, "chaos.json")
      fs.writeFileSync(config, JSON.stringify({
        run: { concurrency: 64 },
        pipeline: { name: "chaos", tasks: [{ use: "echo" }, { use: "echo" }] },
        source: { range: { n: N } }
      }))
      const script = path.join(dir, "meddler.mjs")
      fs.writeFileSync(script, meddlerScript(db, samples))
      const meddler = spawn(process.execPath, [script], { stdio: ["ignore", "ignore", "inherit"] })
      const result = await run(["run", "-c", config, "--store", db], dir)
      await new Promise<void>((resolve) => {
        if (meddler.exitCode !== null) return resolve()
        meddler.once("exit", () => resolve())
        meddler.kill("SIGTERM")
      })
      assert.strictEqual(meddler.exitCode, 0, "the meddler failed")
      assert.strictEqual(result.code, 0, `run failed: ${result.stderr}`)

      const lines = fs.readFileSync(samples, "utf8").trim().split("\n").filter((l) => l !== "").map((l) => JSON.parse(l))
      const errors = lines.filter((l) => "error" in l)
      const during = (lines.filter((l) => !("error" in l)) as Array<Sample>).filter((s) => s.running)
      assert.isAtLeast(during.length, 5, `too few samples during the run (${lines.length} in all): ${JSON.stringify(lines.slice(0, 5))}`)
      if (SQLITE3 !== undefined) assert.isAtLeast(during.filter((s) => s.via === "sqlite3").length, 2, "the sqlite3 shell met the run")
      assert.isAtLeast(during.filter((s) => s.via === "better-sqlite3").length, 2, "better-sqlite3 met the run")
      // the writer held its POSIX lock on the database file throughout
      const unlocked = during.filter((s) => s.writerLocks === 0)
      assert.strictEqual(unlocked.length, 0, `writer without a lock in ${unlocked.length} of ${during.length} samples`)
      // the WAL never disappeared (nor was replaced) while the run was running
      const walInodes = new Set(during.map((s) => s.walIno))
      assert.isFalse(walInodes.has(null), "the WAL file disappeared during the run")
      assert.strictEqual(walInodes.size, 1, `the WAL file was replaced during the run (inodes ${[...walInodes].join(", ")})`)
      assert.deepStrictEqual(errors.filter((e) => /malformed|corrupt/i.test(String(e.error))), [], "outside readers saw a damaged store")

      const d = new Database(db)
      try {
        assert.strictEqual(d.pragma("integrity_check", { simple: true }), "ok")
        assert.strictEqual(d.prepare("SELECT count(*) FROM pipelines").pluck().get(), N)
        assert.strictEqual(d.prepare("SELECT count(*) FROM pipelines WHERE state = 'succeeded'").pluck().get(), N)
        assert.strictEqual(d.prepare("SELECT count(*) FROM tasks WHERE state = 'succeeded'").pluck().get(), 2 * N)
        const runs = d.prepare("SELECT status, ended_at FROM runs").all() as Array<{ status: string; ended_at: number | null }>
        assert.strictEqual(runs.length, 1)
        assert.strictEqual(runs[0]!.status, "completed")
        assert.isNotNull(runs[0]!.ended_at)
      } finally {
        d.close()
      }
    }), { timeout: 180_000 })
})


describe("SqliteStore: a run watched to its end leaves one file", () => {
  it.live("`run` with a concurrent `watch`: only the .db remains (no WAL bytes, no .lock), and a copy of the .db alone reports the whole run", () =>
    Effect.promise(async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-watched-"))
      const db = path.join(dir, "watched.db")
      const config = path.join(dir, "watched.json")
      const n = 3000
      fs.writeFileSync(config, JSON.stringify({
        run: { concurrency: 32 },
        pipeline: { name: "watched", tasks: [{ use: "delay", args: ["2 millis"] }, { use: "echo" }] },
        source: { range: { n } }
      }))
      const running = run(["run", "-c", config, "--store", db], dir)
      // watch starts once the run has opened the store, and follows it to its end
      const t0 = Date.now()
      const hasRun = () => {
        try {
          const d = new Database(db, { readonly: true, fileMustExist: true })
          try {
            return d.prepare("SELECT count(*) FROM runs").pluck().get() === 1
          } finally {
            d.close()
          }
        } catch {
          return false
        }
      }
      while (!hasRun()) {
        if (Date.now() - t0 > 60_000) throw new Error("the run never opened its store")
        await new Promise((r) => setTimeout(r, 50))
      }
      const watching = run(["watch", db, "--interval", "0.2"], dir)
      const [r, w] = await Promise.all([running, watching])
      assert.strictEqual(r.code, 0, `run failed: ${r.stderr}`)
      assert.strictEqual(w.code, 0, `watch failed: ${w.stderr}`)
      const beside = Object.fromEntries(fs.readdirSync(dir).map((f) => [f, fs.statSync(path.join(dir, f)).size]))
      assert.strictEqual(beside["watched.db-wal"] ?? 0, 0, "no bytes left in the WAL")
      assert.isUndefined(beside["watched.db.lock"], "no lock file")

      const copyDir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-watched-copy-"))
      fs.copyFileSync(db, path.join(copyDir, "copy.db"))
      const rep = await run(["report", path.join(copyDir, "copy.db"), "--json"], copyDir)
      assert.strictEqual(rep.code, 0, rep.stderr)
      const data = JSON.parse(rep.stdout) as { pipelines: number; byState: { succeeded: number }; runs: Array<{ status: string }>; walPending: Array<unknown> }
      assert.strictEqual(data.pipelines, n)
      assert.strictEqual(data.byState.succeeded, n)
      assert.deepStrictEqual(data.runs.map((x) => x.status), ["completed"])
      assert.deepStrictEqual(data.walPending, [])
    }), { timeout: 120_000 })
})
