/**
 * Issue 17 §3–§4 (a fresh user's findings), through `bin/assay` on the harness PostgreSQL:
 *
 * - a runner (or a submitter) on a database `assay migrate` has not prepared is refused
 *   (exit 2, naming the command) before it creates anything in it;
 * - `assay migrate --database URL` creates the cluster's tables too (and says so once: a
 *   second run finds them);
 * - a submitter with no runner up says so within a bounded time, with the command that starts
 *   one; Ctrl-C then stops it (exit 130), closes its run `interrupted` and leaves the admitted
 *   pipelines to be run by a later submission.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { assay, start, tempDir, write } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const experiment = (dir: string) =>
  write(dir, "exp.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 3 } } })

const clusterTables = (db: string) =>
  pg.psql(db, "SELECT tablename FROM pg_tables WHERE tablename LIKE 'cluster%' ORDER BY tablename").split("\n").filter((l) => l !== "")

/** Waits (real time, bounded) until `check` holds. */
const until = (check: () => boolean, ms: number) =>
  Effect.promise(async () => {
    const end = Date.now() + ms
    while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 100))
    return check()
  })

describe("cluster operations on the command line", () => {
  it.scopedLive("an unmigrated database is refused before anything is created; assay migrate creates the cluster tables", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-ops")
      const file = experiment(dir)
      yield* Effect.promise(() => pg.createDatabase("fresh"))
      const url = pg.url("fresh")
      for (const args of [["runner", "-c", file, "--database", url], ["run", "-c", file, "--engine", "cluster", "--database", url]]) {
        const r = yield* assay(args)
        assert.strictEqual(r.code, 2, r.stderr)
        assert.include(r.stderr, "assay migrate --database")
        assert.deepStrictEqual(clusterTables("fresh"), [], "nothing created")
      }
      const m = yield* assay(["migrate", "--database", url])
      assert.strictEqual(m.code, 0, m.stderr)
      assert.match(m.stdout, /cluster: .* migrated/)
      for (const t of ["cluster_locks", "cluster_messages", "cluster_replies", "cluster_runners"]) {
        assert.include(clusterTables("fresh"), t)
      }
      const again = yield* assay(["migrate", "--database", url])
      assert.strictEqual(again.code, 0, again.stderr)
      assert.match(again.stdout, /cluster: .* is up to date/)
    }), 120_000)

  it.scopedLive("no runner up: the submitter says so with the runner command; Ctrl-C stops it and leaves the run resumable", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-ops")
      const file = experiment(dir)
      yield* Effect.promise(() => pg.createDatabase("norunner"))
      const url = pg.url("norunner")
      const m = yield* assay(["migrate", "--database", url])
      assert.strictEqual(m.code, 0, m.stderr)
      const sub = start(["run", "-c", file, "--engine", "cluster", "--database", url])
      const warned = yield* until(() => sub.stderr().includes("no cluster runner"), 40_000)
      assert.isTrue(warned, sub.stderr())
      assert.include(sub.stderr(), `assay runner -c ${file} --database ${url}`)
      sub.child.kill("SIGINT")
      const r = yield* Effect.promise(() => sub.done)
      assert.strictEqual(r.code, 130, r.stderr)
      assert.include(r.stderr, "Run the same command again")
      assert.strictEqual(pg.psql("norunner", "SELECT status FROM assay_runs").trim(), "interrupted")
      // the admitted pipelines stay running in the store, to be followed by the next submission
      assert.strictEqual(pg.psql("norunner", "SELECT count(*) FROM assay_pipelines WHERE state = 'running'").trim(), "3")
    }), 120_000)

  it.scopedLive("end to end: migrate, one runner, submit; the run's events land in the store; a re-submit finds everything done", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-ops")
      const file = experiment(dir)
      yield* Effect.promise(() => pg.createDatabase("e2e"))
      const url = pg.url("e2e")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      const port = 39000 + Math.floor(Math.random() * 500)
      const runner = start(["runner", "-c", file, "--database", url, "--listen", `127.0.0.1:${port}`])
      yield* Effect.addFinalizer(() => Effect.sync(() => runner.child.kill("SIGKILL")))
      const sub = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url])
      assert.strictEqual(sub.code, 0, sub.stderr + runner.stderr())
      assert.match(sub.stdout, /3 succeeded, 0 failed/)
      const kinds = pg.psql("e2e", "SELECT DISTINCT kind FROM assay_events ORDER BY kind").split("\n")
      assert.include(kinds, "run.started")
      assert.include(kinds, "run.finished")
      const again = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url])
      assert.strictEqual(again.code, 0, again.stderr)
      assert.match(again.stdout, /0 succeeded, 0 failed, 3 already done/)
      runner.child.kill("SIGTERM")
      const stopped = yield* Effect.promise(() => runner.done)
      assert.notStrictEqual(stopped.signal, "SIGKILL")
    }), 180_000)
})
