/**
 * The chaos scenarios that run with every test run (issue 17; research/distributed.md §7):
 * C1 no fault, C2 kill -9 of one runner, C5 SIGSTOP of one runner past the shard lock expiry
 * (lock rows: its shards taken over while it lives), C6 Postgres restarted `fast` then
 * `immediate`. Three real `assay runner` processes and a real `assay run --engine cluster`
 * submitter on one Postgres database; the fake provider is the ground truth. The others (C3,
 * C4, C5 with advisory locks, C7, C8, C9) are in `full.chaos.ts`, run by `npm run test:chaos`
 * with these.
 *
 * After each scenario: every pipeline terminal, no duplicate checkpoint, no call for a key
 * committed before the fault, repeated calls within the allowance snapshotted at the fault,
 * peak in-flight ≤ capacity, all slots free within one lease TTL (`support/invariants.ts`).
 *
 * The runners claim work as `assay runner` does by default (window claims and block leases);
 * run the file again with `ASSAY_CHAOS_CLAIMS=per-task` (and `window`) for the other modes
 * (`support/cluster.ts` `ClaimMode`).
 */
import { describe, expect, it } from "vitest"
import { usePostgres } from "../support/postgres.js"
import { assertInvariants, atFault, waitCommitted } from "./support/invariants.js"
import { pauseScenario } from "./support/pause.js"
import { withScene } from "./support/scenario.js"

const pg = usePostgres()

const capacity = { r1: 6 }

describe("chaos: three assay runner processes on PostgreSQL", () => {
  it("C1: no fault: every pipeline succeeds, each task called once, capacity held", async () => {
    await withScene(pg, "c1", {}, async ({ cluster, provider, experiment }) => {
      const run = await cluster.submit(20).done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity, snapshots: [] })
      expect(out.repeats).toBe(0)
      expect(out.keys).toBe(experiment.rows * 3)
      console.log(JSON.stringify({ scenario: "C1", ...out }))
    })
  }, 240_000)

  // Before the harness waited for the shards to settle over the three runners, this failed in
  // 2 of 3 runs with keys called twice outside any fault window (a shard moving while its
  // workflow ran re-runs the activity in flight on the new owner; see the report). With the
  // wait: passed (0 repeats, 30 s).
  it("C2: kill -9 of one runner mid-run: nothing lost, nothing committed re-run, its slots back within a TTL", async () => {
    await withScene(pg, "c2", {}, async ({ cluster, provider, experiment, tasks }) => {
      const submitter = cluster.submit(20)
      await waitCommitted(cluster, Math.floor(tasks / 4))
      const snap = await atFault(cluster, provider, () => cluster.kill9(1))
      const run = await submitter.done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity, snapshots: [snap] })
      console.log(JSON.stringify({ scenario: "C2", heldAtFault: snap.heldSlots, ...out }))
    })
  }, 240_000)

  // Lock rows (the paused runner's shards move to the others while it lives: the zombie case;
  // the advisory-lock variant, where the paused runner keeps its locks and nothing moves, is in
  // full.chaos.ts). Passed (0 repeats) before and after the harness's lock timings became 3 s /
  // 10 s (takeover then seen within the 15 s pause at load 23). Failed in 3 of 3 CI runs on
  // 2026-12-02 and at once on a quiet machine: the frozen runner's attempts waiting for a pool
  // lease got one when it woke up and called tasks the new owner was running (two starts ~80 ms
  // apart, neither in flight at the fault). Fixed by the task claims (cluster/inflight.ts):
  // passed 3 of 3 right after, repeats 0–2, all within the allowance. Failed once more (CI of
  // 2026-12-06) on the test's own second reading of the lock table: the takeover seen at 9.6 s,
  // then 28 of 30 shards locked while the two others rebalanced; it is now decided and asserted
  // on one reading (chaos38: takeover 8.3–14.1 s at load 1–12, within a bound of 17.8 s).
  it("C5 (lock rows): SIGSTOP of one runner past the lock expiry, its shards taken over, then SIGCONT: a zombie is fenced", async () => {
    await pauseScenario(pg, true)
  }, 240_000)

  // Failed before 2026-12-01 21:00 (three engine faults, fixed in src/services/internal/cluster):
  // pipelines ended failed on a PersistenceError (the engine's request for the next activity
  // died on the lost connection and the workflow completed with the defect: the workflow now
  // sends it again once the database answers); keys called twice by the same runner, at the
  // restart and once before any fault (the engine interrupts the activities of shards it lets
  // go, when the advisory locks die with the restart or a lock refresh is slow, and re-runs
  // them: a task execution is now never cut between its call and its commit, and the re-run
  // awaits it); earlier, the submitter died at the fast restart (its calls now ride it out).
  it("C6: Postgres restarted fast, then immediate (crash recovery): no pipeline fails on infrastructure errors", async () => {
    await withScene(pg, "c6", {}, async ({ cluster, provider, experiment, tasks }) => {
      const submitter = cluster.submit(20)
      await waitCommitted(cluster, Math.floor(tasks / 4))
      const fast = await atFault(cluster, provider, () => pg.restart("fast"))
      await waitCommitted(cluster, Math.floor(tasks / 2))
      const immediate = await atFault(cluster, provider, () => pg.restart("immediate"))
      console.log(`C6 faults: fast at ${fast.faultAt}, immediate at ${immediate.faultAt}`)
      const run = await submitter.done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity, snapshots: [fast, immediate] })
      console.log(JSON.stringify({ scenario: "C6", ...out }))
    })
  }, 300_000)
})
