/**
 * The runner's bounded close (`closeWithin` in src/cli/ClusterRun.ts; docs/scale-out.md
 * "Supervising runners"): a stop signal while the runner is already stopping ends it at once,
 * whatever its close is waiting for. Here the close hangs with the database up (a session
 * holds `cluster_runners` locked, which leaving the cluster must write: `support/stuckClose.ts`);
 * a second signal ends the runner with exit 130 and says why, long before the close's own
 * 30 s deadline. That deadline is tested in test/chaos/runner-close.chaos.ts (it takes 30 s).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { usePostgres } from "../support/postgres.js"
import { holdTableLock, startRunner, within } from "../support/stuckClose.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

describe("assay runner: a second stop signal while its close hangs", () => {
  for (const [first, second] of [["SIGTERM", "SIGINT"], ["SIGINT", "SIGTERM"]] as const) {
    it.scopedLive(`${first}, then ${second} while leaving the cluster hangs: exits 130 at once, saying so`, () =>
      Effect.gen(function*() {
        const db = `close_again_${first.toLowerCase()}`
        const { runner } = yield* startRunner(pg, db)
        yield* holdTableLock(pg, db, "cluster_runners")
        runner.child.kill(first)
        const stopping = `runner: ${first} received: stopping (no call starts any more; this runner leaves the cluster and its shards go to the other runners; exit 130)`
        // the first signal is said at once, and the runner keeps closing (stuck on the lock)
        const said = yield* within(new Promise<void>((resolve) => {
          const check = () => runner.stderr().includes(stopping) ? resolve() : setTimeout(check, 50)
          check()
        }), 30_000)
        assert.isTrue(said, runner.stderr())
        yield* Effect.sleep("2 seconds")
        assert.isNull(runner.child.exitCode, `the close did not hang: ${runner.stderr()}`)
        runner.child.kill(second)
        // well within the close's 30 s deadline: the second signal ended it, not the deadline
        const ended = yield* within(runner.done, 15_000)
        assert.isTrue(ended, `the runner did not exit 15 s after a second signal; its stderr:\n${runner.stderr()}`)
        const ran = yield* Effect.promise(() => runner.done)
        assert.strictEqual(ran.code, 130, ran.stderr)
        assert.include(
          ran.stderr,
          `runner: ${second} received while stopping: exiting at once (exit 130); the shard locks, pool slots and claims it held free themselves when their time runs out`
        )
        assert.notInclude(ran.stderr, "did not finish within", ran.stderr)
        // the stop is not reported as a failure
        assert.notMatch(ran.stderr, /^error:/m, ran.stderr)
      }), 90_000)
  }
})
