/**
 * Issue 17 §3–§4 (a fresh user's findings), through `bin/assay` on the harness PostgreSQL:
 *
 * - a runner (or a submitter) on a database `assay migrate` has not prepared is refused
 *   (exit 2, naming the command) before it creates anything in it;
 * - `assay migrate --database URL` creates the cluster's tables too (and says so once: a
 *   second run finds them);
 * - a submitter with no runner up says so within a bounded time, with the command that starts
 *   one; Ctrl-C then stops it (exit 130), closes its run `interrupted` and leaves the admitted
 *   pipelines to be run by a later submission;
 * - `assay runner --lease-ttl` reaches the global pools: a slot held by a runner started with
 *   a 2 s TTL is renewed past its first TTL, and once the runner is killed it comes back within
 *   2 s of the kill (by the database's clock), not the default 30 s.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { assay, start, stderrShows, tempDir, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

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
      const sub = start(["run", "-c", file, "--engine", "cluster", "--database", url, "--summary", "json"])
      // the warning comes `noRunnerAfter` (10 s) after the submitter started following: waited
      // for as it is printed (a start slowed by load took more than a fixed 40 s budget once)
      const warned = yield* stderrShows(sub, "no cluster runner")
      assert.isTrue(warned, sub.stderr())
      assert.include(sub.stderr(), `assay runner -c ${file} --database ${url}`)
      sub.child.kill("SIGINT")
      const r = yield* Effect.promise(() => sub.done)
      assert.strictEqual(r.code, 130, r.stderr)
      assert.include(r.stderr, "Run the same command again")
      // what it had seen is printed, as the embedded run prints its report on Ctrl-C (tester17ad F4)
      const summary = JSON.parse(r.stdout) as { status: string; stopReason: string; cluster: { admitted: number } }
      assert.deepStrictEqual([summary.status, summary.stopReason, summary.cluster.admitted], ["interrupted", "sigint", 3])
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
      const port = yield* Effect.promise(freePort)
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
      // the signal closes the runner's call gate and stops it as an interruption
      assert.strictEqual(stopped.code, 130, runner.stderr())
      // and says so (tester17ad F12): 130 for every stop signal, as the embedded `assay run`
      assert.include(stopped.stderr, "runner: SIGTERM received: stopping (no call starts any more")
    }), 180_000)

  it.scopedLive("--lease-ttl 2 seconds: the runner's held slot is renewed, and a kill -9 frees it within 2 s", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-ops")
      // one pipeline whose task holds the only slot of `cpu` far longer than the test
      const file = write(dir, "exp.json", {
        pools: { cpu: { resources: [{ id: "only", capacity: 1 }] } },
        pipeline: { name: "p", tasks: [{ use: "simulateLlm", name: "long", options: { resource: "cpu", latency: "10 minutes" } }] },
        source: { range: { n: 1 } }
      })
      yield* Effect.promise(() => pg.createDatabase("leasettl"))
      const url = pg.url("leasettl")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      const sql = (q: string) => pg.psql("leasettl", q).trim()
      const port = yield* Effect.promise(freePort)
      const runner = start(["runner", "-c", file, "--database", url, "--listen", `127.0.0.1:${port}`, "--lease-ttl", "2 seconds"])
      yield* Effect.addFinalizer(() => Effect.sync(() => runner.child.kill("SIGKILL")))
      const sub = start(["run", "-c", file, "--engine", "cluster", "--database", url, "--quiet"])
      yield* Effect.addFinalizer(() => Effect.sync(() => sub.child.kill("SIGKILL")))
      const held = () => sql("SELECT count(*) FROM assay_pool_slot WHERE holder IS NOT NULL AND expires_at > now()") === "1"
      assert.isTrue(yield* until(held, 90_000), runner.stderr() + sub.stderr())
      assert.include(runner.stderr(), "pool slots held 2s without renewal, renewed every 666ms")
      const lease = sql("SELECT lease_id FROM assay_pool_slot WHERE holder IS NOT NULL")
      // never more than one TTL ahead of the database's clock. Read against clock_timestamp()
      // (the time the expression is evaluated, after the statement's snapshot), not now() (the
      // transaction's start, taken a moment before the snapshot): a renewal that begins and
      // commits in between is visible with a now() later than ours (CI saw 2.0025 s ahead)
      for (let i = 0; i < 3; i++) {
        const ahead = Number(sql("SELECT extract(epoch FROM expires_at - clock_timestamp()) FROM assay_pool_slot WHERE holder IS NOT NULL"))
        assert.isAtMost(ahead, 2, "expires_at is at most one TTL ahead")
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 1_000)))
      }
      // held past its first TTL: the renewals (every 666 ms) kept it
      assert.strictEqual(sql("SELECT lease_id FROM assay_pool_slot WHERE holder IS NOT NULL AND expires_at > now()"), lease)
      assert.isAbove(Number(sql("SELECT extract(epoch FROM now() - acquired_at) FROM assay_pool_slot WHERE holder IS NOT NULL")), 2)
      // killed: nothing renews it any more, so it expires within one TTL of the kill
      runner.child.kill("SIGKILL")
      yield* Effect.promise(() => runner.done)
      const killedAt = sql("SELECT now()")
      assert.isAtMost(
        Number(sql(`SELECT extract(epoch FROM expires_at - '${killedAt}'::timestamptz) FROM assay_pool_slot WHERE lease_id = '${lease}'`)),
        2
      )
      assert.isTrue(yield* until(() => sql("SELECT count(*) FROM assay_pool_slot WHERE expires_at > now()") === "0", 10_000))
    }), 180_000)
})
