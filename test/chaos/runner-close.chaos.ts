/**
 * The runner's bounded close (`closeWithin` in src/cli/ClusterRun.ts; docs/scale-out.md
 * "Supervising runners"), its 30 s deadline: a runner told to stop whose close hangs with the
 * database up (a session holds `cluster_runners` locked, which leaving the cluster must write:
 * `test/support/stuckClose.ts`) exits 130 once 30 s have passed, saying that leaving the
 * cluster did not finish and that what it held frees itself. In the chaos config because it
 * waits out those 30 s; the second signal (at once) and the lost database (5 s) are tested in
 * the suite (test/cluster/runner-close.test.ts, runner-db-lost.test.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { usePostgres } from "../support/postgres.js"
import { holdTableLock, startRunner, within } from "../support/stuckClose.js"

const pg = usePostgres()

describe("assay runner: a close that hangs while the database is up", () => {
  it.scopedLive("SIGTERM while leaving the cluster hangs: exits 130 after the close's 30 s deadline, saying so", () =>
    Effect.gen(function*() {
      const { runner } = yield* startRunner(pg, "close_deadline")
      yield* holdTableLock(pg, "close_deadline", "cluster_runners")
      runner.child.kill("SIGTERM")
      // not before the deadline: still closing well into it
      yield* Effect.sleep("20 seconds")
      assert.isNull(runner.child.exitCode, `the close did not hang: ${runner.stderr()}`)
      // 30 s of deadline, 10 s more for a loaded machine; 60 s is a generous limit
      const ended = yield* within(runner.done, 60_000)
      assert.isTrue(ended, `the runner did not exit 80 s after SIGTERM; its stderr:\n${runner.stderr()}`)
      const ran = yield* Effect.promise(() => runner.done)
      assert.strictEqual(ran.code, 130, ran.stderr)
      assert.include(
        ran.stderr,
        "runner: SIGTERM received: stopping (no call starts any more; this runner leaves the cluster and its shards go to the other runners; exit 130)"
      )
      assert.include(
        ran.stderr,
        "runner: leaving the cluster did not finish within 30s; exiting anyway (exit 130); the shard locks, pool slots and claims it held free themselves when their time runs out",
        ran.stderr
      )
      assert.notInclude(ran.stderr, "received while stopping", ran.stderr)
      assert.notMatch(ran.stderr, /^error:/m, ran.stderr)
    }), 150_000)
})
