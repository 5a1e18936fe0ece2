/**
 * A runner whose close hangs while its database is up (the runner's bounded close,
 * `closeWithin` in src/cli/ClusterRun.ts): a real `assay runner` process on a fresh database,
 * and a `psql` session that holds a table of the cluster locked (`ACCESS EXCLUSIVE`, in an open
 * transaction) from just before the runner is told to stop. Leaving the cluster deletes the
 * runner's row of `cluster_runners` (`@effect/cluster`'s Sharding finalizer), which then waits
 * for the lock for as long as the session holds it: a stuck close with the database answering,
 * as a lock left by an operator's session or a stuck migration would make it.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import { Effect, type Scope } from "effect"
import { assay, type CliProcess, start, stderrShows, tempDir, write } from "./cli.js"
import { findPgBin, freePort, type PgServer } from "./postgres.js"

/** Whether `done` settles within `ms` of real time (a wait limit for another process, not a measure). */
export const within = <A>(done: Promise<A>, ms: number): Effect.Effect<boolean> =>
  Effect.promise(() =>
    Promise.race([done.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms))])
  )

/**
 * Starts an idle `assay runner` (a two-row `echo` experiment, nothing submitted) on a fresh,
 * migrated database `db` of `pg`, and waits for its start line. The runner is killed (SIGKILL)
 * when the scope closes, if it still runs.
 */
export const startRunner = (pg: PgServer, db: string): Effect.Effect<{ readonly runner: CliProcess; readonly url: string }, never, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = yield* tempDir(`runner-${db}`)
    yield* Effect.promise(() => pg.createDatabase(db))
    const url = pg.url(db)
    const migrated = yield* assay(["migrate", "--database", url])
    if (migrated.code !== 0) return yield* Effect.die(new Error(`assay migrate failed: ${migrated.stderr}`))
    const file = write(dir, "exp.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 2 } } })
    const port = yield* Effect.promise(() => freePort())
    const runner = start(["runner", "-c", file, "--database", url, "--listen", `127.0.0.1:${port}`])
    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        if (runner.child.exitCode === null && runner.child.signalCode === null) runner.child.kill("SIGKILL")
        await runner.done
      })
    )
    if (!(yield* stderrShows(runner, "runner: cluster database"))) {
      return yield* Effect.die(new Error(`the runner did not start:\n${runner.stderr()}`))
    }
    return { runner, url }
  })

/**
 * Locks `table` of database `db` (`ACCESS EXCLUSIVE`) in a transaction of a `psql` session of
 * its own, held until the scope closes (the session then rolls it back and ends).
 * Resolves once the lock is granted.
 */
export const holdTableLock = (pg: PgServer, db: string, table: string): Effect.Effect<void, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<ChildProcess>((resume) => {
      const bin = findPgBin()
      if (bin === undefined) {
        resume(Effect.die(new Error("psql not found")))
        return
      }
      const child = spawn(path.join(bin, "psql"), ["-h", pg.host, "-p", String(pg.port), "-U", pg.user, "-d", db, "-At", "-v", "ON_ERROR_STOP=1"], {
        stdio: ["pipe", "pipe", "pipe"]
      })
      let out = ""
      let err = ""
      child.stderr.on("data", (d: Buffer) => (err += d.toString()))
      child.stdout.on("data", (d: Buffer) => {
        out += d.toString()
        if (out.includes("locked")) resume(Effect.succeed(child))
      })
      child.on("close", (code) => resume(Effect.die(new Error(`psql ended (${code}) before the lock was granted: ${err}`))))
      // the marker is printed only once LOCK TABLE returned (psql runs the lines in order)
      child.stdin.write(`BEGIN;\nLOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE;\nSELECT 'locked';\n`)
    }),
    (child) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve()
          child.on("close", () => resolve())
          // psql ends at the end of its input, its transaction rolled back
          child.stdin?.end("ROLLBACK;\n")
        })
      )
  ).pipe(Effect.asVoid)
