/**
 * The Postgres store as a person uses it: `assay migrate --database URL` (once, and twice at
 * the same time), `assay run --store postgres://…` into it, then `report`, `export`, `watch`
 * and `serve` reading it; an unmigrated database refused with exit 2; the password of the URL
 * never printed. One throwaway server for the file (test/support/postgres.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { usePostgres } from "../support/postgres.js"

const BIN = path.resolve(import.meta.dirname, "../../bin/assay")
const EXPERIMENT = path.resolve(import.meta.dirname, "../../examples/experiments/delay.json")
/** The server trusts loopback logins, so any password works: this one must never be printed. */
const SECRET = "pg-Secret-7f3a"

const pg = usePostgres()

const urlOf = (db: string) => `postgres://${pg.user}:${SECRET}@127.0.0.1:${pg.port}/${db}`

interface Child {
  readonly proc: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  readonly exit: Effect.Effect<number | null>
}

/** Spawns `bin/assay args`; killed by pid if still alive when the scope closes. */
const spawnAssay = (args: ReadonlyArray<string>, cwd?: string) =>
  Effect.acquireRelease(
    Effect.sync((): Child => {
      const proc = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"], cwd })
      let out = ""
      let err = ""
      proc.stdout!.on("data", (d) => (out += String(d)))
      proc.stderr!.on("data", (d) => (err += String(d)))
      const done = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)))
      return { proc, stdout: () => out, stderr: () => err, exit: Effect.promise(() => done) }
    }),
    (c) =>
      Effect.sync(() => {
        if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill("SIGKILL")
      })
  )

/** Runs `bin/assay args` to its end. */
const assay = (args: ReadonlyArray<string>, cwd?: string) =>
  Effect.scoped(Effect.gen(function*() {
    const c = yield* spawnAssay(args, cwd)
    const code = yield* c.exit
    return { code, stdout: c.stdout(), stderr: c.stderr() }
  }))

const waitFor = (what: string, check: () => boolean, timeoutMs = 30_000) =>
  Effect.gen(function*() {
    const start = Date.now()
    while (!check()) {
      if (Date.now() - start > timeoutMs) return yield* Effect.dieMessage(`timed out waiting for ${what}`)
      yield* Effect.sleep("50 millis")
    }
  })

const noSecret = (...texts: ReadonlyArray<string>) => {
  for (const t of texts) assert.notInclude(t, SECRET)
}

describe("assay with a Postgres store (bin/assay)", { timeout: 180_000 }, () => {
  it.live("migrate once (twice at once is fine), run into Postgres, read it with report, export, watch and serve", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Effect.promise(() => pg.createDatabase("cli1"))
      const url = urlOf("cli1")
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-pg-"))

      // a store is never created implicitly: run on an unmigrated database says what to do
      const refused = yield* assay(["run", "-c", EXPERIMENT, "--store", url])
      assert.strictEqual(refused.code, 2, refused.stderr)
      assert.include(refused.stderr, "assay migrate --database postgres://")
      assert.include(refused.stderr, ":***@127.0.0.1")
      noSecret(refused.stdout, refused.stderr)

      // two migrations started together both succeed; the schema is applied once
      const [m1, m2] = yield* Effect.all([assay(["migrate", "--database", url]), assay(["migrate", "--database", url])], {
        concurrency: 2
      })
      assert.strictEqual(m1.code, 0, m1.stderr)
      assert.strictEqual(m2.code, 0, m2.stderr)
      assert.strictEqual([m1.stdout, m2.stdout].filter((o) => /store: .* migrated \(1_store, 2_call_cache, 3_attempt_accounting, 4_hot_pipeline_patches\)/.test(o)).length, 1)
      assert.strictEqual([m1.stdout, m2.stdout].filter((o) => /store: .* is up to date/.test(o)).length, 1, `${m1.stdout}\n---\n${m2.stdout}`)
      noSecret(m1.stdout, m1.stderr, m2.stdout, m2.stderr)
      assert.strictEqual(pg.psql("cli1", "SELECT count(*) FROM assay_store_migrations").trim(), "4")
      // the global pools' tables too, once, whichever process got there first
      assert.strictEqual([m1.stdout, m2.stdout].filter((o) => /pools: .* migrated \(/.test(o)).length, 1)
      assert.strictEqual(pg.psql("cli1", "SELECT count(*) FROM assay_pool_slot").trim(), "0")

      const ran = yield* assay(["run", "-c", EXPERIMENT, "--store", url])
      assert.strictEqual(ran.code, 0, ran.stderr)
      noSecret(ran.stdout, ran.stderr)
      // the commands to paste carry the URL without its password (not `:***@`, which cannot log
      // in), and say where the password comes from
      assert.match(ran.stdout, new RegExp(`results: assay report '?postgres://${pg.user}@127\\.0\\.0\\.1:${pg.port}/cli1'? `))
      assert.include(ran.stdout, "PGPASSWORD")
      assert.strictEqual(pg.psql("cli1", "SELECT count(*) FROM assay_pipelines WHERE state = 'succeeded'").trim(), "8")
      assert.strictEqual(pg.psql("cli1", "SELECT count(*) FROM assay_checkpoints").trim(), "16")

      const report = yield* assay(["report", url])
      assert.strictEqual(report.code, 0, report.stderr)
      assert.match(report.stdout, /Pipelines: 8/)
      noSecret(report.stdout, report.stderr)
      const json = yield* assay(["report", "--json", url])
      assert.strictEqual(json.code, 0, json.stderr)
      const data = JSON.parse(json.stdout)
      assert.strictEqual(data.pipelines, 8)
      noSecret(json.stdout)

      const out = path.join(dir, "rows.jsonl")
      const exported = yield* assay(["export", url, out, "--rows", "results"])
      assert.strictEqual(exported.code, 0, exported.stderr)
      assert.match(exported.stdout, /exported 8 results/)
      assert.strictEqual(fs.readFileSync(out, "utf8").trim().split("\n").length, 8)
      noSecret(exported.stdout, exported.stderr)

      // the run is finished: watch draws once and ends by itself
      const watch = yield* assay(["watch", url, "--interval", "0.2"])
      assert.strictEqual(watch.code, 0, watch.stderr)
      assert.match(watch.stdout, /8/)
      noSecret(watch.stdout, watch.stderr)

      const serve = yield* spawnAssay(["serve", url, "--port", "0"])
      yield* waitFor("serve to listen", () => serve.stdout().includes("http://"))
      const base = /(http:\/\/127\.0\.0\.1:\d+)\//.exec(serve.stdout())![1]!
      const stats = yield* Effect.promise(() => fetch(`${base}/stats`).then((r) => r.json() as Promise<any>))
      assert.strictEqual(stats.pipelines.total, 8)
      noSecret(serve.stdout(), serve.stderr(), JSON.stringify(stats))
      serve.proc.kill("SIGTERM")
      yield* serve.exit
    })))

  it.live("migrate refuses a URL that is not Postgres (exit 2) and names an unreachable server without its password (exit 1)", () =>
    Effect.gen(function*() {
      const bad = yield* assay(["migrate", "--database", "runs/qa.db"])
      assert.strictEqual(bad.code, 2)
      assert.include(bad.stderr, "--database")
      const down = yield* assay(["migrate", "--database", `postgres://u:${SECRET}@127.0.0.1:1/x`])
      assert.strictEqual(down.code, 1)
      assert.include(down.stderr, "postgres://u:***@127.0.0.1:1/x")
      // the cause in words, and what to do (not a bare "Failed to connect")
      assert.include(down.stderr, "the connection to 127.0.0.1:1 was refused")
      assert.include(down.stderr, "check the host and port")
      noSecret(down.stdout, down.stderr)
      const noDb = yield* assay(["run", "-c", EXPERIMENT, "--store", `postgres://${pg.user}:${SECRET}@127.0.0.1:${pg.port}/nosuchdb`])
      // only a person can create it: exit 2, as for a refused login, so that a supervisor's
      // restart loop stops (newuser37 F8), on every command that connects
      assert.strictEqual(noDb.code, 2, noDb.stderr)
      assert.include(noDb.stderr, `the database "nosuchdb" does not exist on 127.0.0.1:${pg.port}`)
      assert.include(noDb.stderr, "createdb nosuchdb")
      noSecret(noDb.stdout, noDb.stderr)
      const noDbUrl = `postgres://${pg.user}:${SECRET}@127.0.0.1:${pg.port}/nosuchdb`
      for (
        const args of [
          ["migrate", "--database", noDbUrl],
          ["report", noDbUrl],
          ["runner", "-c", EXPERIMENT, "--database", noDbUrl],
          ["run", "-c", EXPERIMENT, "--engine", "cluster", "--database", noDbUrl]
        ]
      ) {
        const r = yield* assay(args)
        assert.strictEqual(r.code, 2, `${args[0]}: ${r.stderr}`)
        assert.include(r.stderr, `the database "nosuchdb" does not exist`, `${args[0]}: ${r.stderr}`)
        noSecret(r.stdout, r.stderr)
      }
      const noRole = yield* assay(["report", `postgres://nobody_here:${SECRET}@127.0.0.1:${pg.port}/postgres`])
      // a refused login is a configuration mistake: exit 2 on every command (tester17af)
      assert.strictEqual(noRole.code, 2, noRole.stderr)
      assert.include(noRole.stderr, `refused the login of user "nobody_here" (no such role)`)
      assert.include(noRole.stderr, "PGPASSWORD")
      noSecret(noRole.stdout, noRole.stderr)
    }))
})
