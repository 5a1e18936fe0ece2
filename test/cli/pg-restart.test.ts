/**
 * An embedded `assay run --store postgres://…` while its database restarts (a fresh user's
 * report: a 1 s restart killed the run at `finishRun` with ECONNREFUSED, exit 1, and no way
 * on). Store reads and writes ride out an unreachable database for `ASSAY_STORE_RETRY`
 * (default 30 s); past that the run stops with an error naming the store problem and the
 * command that resumes it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as path from "node:path"
import * as PgStore from "../../src/layers/PgStore.js"
import { assay, tempDir, write } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"

const BIN = path.resolve(import.meta.dirname, "../../bin/assay")

const pg = usePostgres()

/** Runs `bin/assay args`; `during` is called once the database holds `after` checkpoints. */
const runThrough = (db: string, args: ReadonlyArray<string>, cwd: string, env: Record<string, string>, after: number, during: () => Promise<void>) =>
  Effect.gen(function*() {
    const proc = spawn(BIN, args, { cwd, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } })
    let out = ""
    let err = ""
    proc.stdout.on("data", (d) => (out += String(d)))
    proc.stderr.on("data", (d) => (err += String(d)))
    const exited = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)))
    yield* Effect.addFinalizer(() => Effect.sync(() => proc.kill("SIGKILL")))
    const start = Date.now()
    while (Number(pg.psql(db, "SELECT count(*) FROM assay_checkpoints").trim()) < after) {
      assert.isBelow(Date.now() - start, 60_000, `the run committed nothing in 60 s: ${err}`)
      yield* Effect.sleep("20 millis")
    }
    yield* Effect.promise(during)
    const code = yield* Effect.promise(() => exited)
    return { code, stdout: out, stderr: err }
  })

const experiment = (dir: string, n: number) =>
  write(dir, "exp.json", {
    run: { concurrency: 4 },
    pipeline: { name: "r", tasks: [0, 1].map(() => ({ use: "delay", args: ["60 millis"] })) },
    source: { range: { n } }
  })

describe("assay run --store postgres://… through a database restart", () => {
  it.scopedLive("a restart mid-run is ridden out: exit 0, every pipeline done once", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("pg-restart")
      const n = 60
      const exp = experiment(dir, n)
      yield* Effect.promise(() => pg.createDatabase("restart1"))
      const url = pg.url("restart1")
      yield* PgStore.migrate(url)
      const r = yield* runThrough("restart1", ["run", "--quiet", "-c", exp, "--store", url], dir, {}, 10, () => pg.restart("fast"))
      assert.strictEqual(r.code, 0, r.stderr)
      assert.notInclude(r.stderr, "DeprecationWarning")
      const count = (q: string) => Number(pg.psql("restart1", q).trim())
      assert.strictEqual(count("SELECT count(*) FROM assay_pipelines WHERE state = 'succeeded'"), n)
      assert.strictEqual(count("SELECT count(*) FROM assay_checkpoints"), 2 * n)
      assert.strictEqual(count("SELECT count(*) FROM assay_runs WHERE status = 'completed'"), 1)
    }), { timeout: 240_000 })

  it.scopedLive("a database down longer than ASSAY_STORE_RETRY: exit 1 naming the store problem and the resume command", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("pg-down")
      const n = 60
      const exp = experiment(dir, n)
      yield* Effect.promise(() => pg.createDatabase("down1"))
      const url = pg.url("down1")
      yield* PgStore.migrate(url)
      yield* Effect.addFinalizer(() => Effect.promise(() => pg.start().catch(() => undefined)))
      const r = yield* runThrough(
        "down1",
        ["run", "-c", exp, "--store", url],
        dir,
        { ASSAY_STORE_RETRY: "2 seconds" },
        10,
        () => pg.shutdown()
      )
      yield* Effect.promise(() => pg.start())
      assert.strictEqual(r.code, 1, r.stderr)
      // the store problem in words (where, what), and how to go on
      assert.include(r.stderr, "the run stopped: the store failed")
      assert.include(r.stderr, `the connection to 127.0.0.1:${pg.port} was refused`)
      const hint = /resume with: (.*)/.exec(r.stderr)
      assert.isNotNull(hint, r.stderr)
      assert.include(hint![1]!, `assay resume -c`)
      // the hint works: the run goes on from where it stopped (its heartbeat is old by now)
      const args = hint![1]!.split(" ").slice(1).map((a) => a.replace(/^'(.*)'$/, "$1"))
      const resumed = yield* assay([...args, "--quiet", "--stale-after", "1 second"], { cwd: dir, killAfterMs: 120_000 })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      assert.strictEqual(Number(pg.psql("down1", "SELECT count(*) FROM assay_pipelines WHERE state = 'succeeded'").trim()), n)
    }), { timeout: 240_000 })
})
