/**
 * newuser37 F1 (fixed in runnerlife37). docs/scale-out.md "Supervising runners": a runner exits 1
 * once its database has not answered for `ASSAY_RUNNER_DB_LOST_AFTER` (90 s by default), so
 * that its supervisor restarts it. It used to hang for good when the database stayed away past
 * the shard-lock refresh's timeout (the library logs "Shard lock storage is unhealthy", ~20 s
 * in): `@effect/cluster`'s Sharding finalizer releasing the shard locks waited forever on the
 * lock connection (see `closeWithin` in src/cli/ClusterRun.ts). Now it says so at once and
 * exits 1, its close bounded. 15 s of `lostAfter` keeps the test short and still past that
 * timeout; a failed ping every 5 s.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { assay, start, stderrShows, tempDir, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** Whether `done` settles within `ms` of real time (a wait limit for another process, not a measure). */
const within = <A>(done: Promise<A>, ms: number) =>
  Effect.promise(() =>
    Promise.race([done.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms))])
  )

describe("assay runner: the database lost for longer than ASSAY_RUNNER_DB_LOST_AFTER", () => {
  it.scopedLive("exits 1 naming the database, for its supervisor to restart it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("runner-db-lost")
      yield* Effect.promise(() => pg.createDatabase("lost"))
      const url = pg.url("lost")
      const migrated = yield* assay(["migrate", "--database", url])
      assert.strictEqual(migrated.code, 0, migrated.stderr)
      const file = write(dir, "exp.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 2 } } })
      const port = yield* Effect.promise(() => freePort())
      const runner = start(["runner", "-c", file, "--database", url, "--listen", `127.0.0.1:${port}`], {
        env: { ASSAY_RUNNER_DB_LOST_AFTER: "15 seconds" }
      })
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          if (runner.child.exitCode === null && runner.child.signalCode === null) runner.child.kill("SIGKILL")
          await pg.start().catch(() => undefined)
        })
      )
      assert.isTrue(yield* stderrShows(runner, "runner: cluster database"), runner.stderr())
      // past the first ping (every 5 s): the database answered once
      yield* Effect.sleep("6 seconds")
      yield* Effect.promise(() => pg.shutdown())
      // 15 s of lostAfter, pings every 5 s, a 5 s bound on the close: the exit is due by ~25 s;
      // 60 s is a generous limit
      const ended = yield* within(runner.done, 60_000)
      assert.isTrue(ended, `the runner did not exit 60 s after its database went away; its stderr:\n${runner.stderr()}`)
      const ran = yield* Effect.promise(() => runner.done)
      assert.strictEqual(ran.code, 1, ran.stderr)
      assert.match(ran.stderr, /runner: the cluster database postgres:\/\/\S+ has not answered for \d+ s; stopping \(exit 1\)/, ran.stderr)
      // said once, before the close, not again as an `error:` line after it
      assert.notInclude(ran.stderr, "error: runner: the cluster database", ran.stderr)
    }), 120_000)

  it.scopedLive("a database gone just after the start line is ridden out; the start line names what it serves and where it listens", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("runner-db-blip")
      yield* Effect.promise(() => pg.createDatabase("blip"))
      const url = pg.url("blip")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      const file = write(dir, "exp.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 2 } } })
      const port = yield* Effect.promise(() => freePort())
      // no --listen: the library's address, here from its HOST / PORT environment (newuser37 F6)
      const runner = start(["runner", "-c", file, "--database", url], {
        env: { ASSAY_RUNNER_DB_LOST_AFTER: "20 seconds", HOST: "127.0.0.1", PORT: String(port) }
      })
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          if (runner.child.exitCode === null && runner.child.signalCode === null) runner.child.kill("SIGKILL")
          await pg.start().catch(() => undefined)
        })
      )
      assert.isTrue(yield* stderrShows(runner, "runner: cluster database"), runner.stderr())
      // at once after the start line (newuser37 F7: it ended the runner with a bare
      // "error: PgClient: Failed to connect"), and back well within lostAfter
      yield* Effect.promise(() => pg.shutdown())
      yield* Effect.sleep("3 seconds")
      yield* Effect.promise(() => pg.start())
      yield* Effect.sleep("10 seconds")
      assert.isNull(runner.child.exitCode, runner.stderr())
      runner.child.kill("SIGTERM")
      const ended = yield* within(runner.done, 60_000)
      assert.isTrue(ended, runner.stderr())
      const ran = yield* Effect.promise(() => runner.done)
      assert.strictEqual(ran.code, 130, ran.stderr)
      assert.notInclude(ran.stderr, "Failed to connect", ran.stderr)
      assert.include(ran.stderr, `runner: experiment ${file}: serving the pipelines of "p"`)
      assert.include(ran.stderr, `, listening on 127.0.0.1:${port};`)
    }), 120_000)
})
