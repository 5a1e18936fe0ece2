/**
 * Chaos C5 (research/distributed.md §7): SIGSTOP of one runner past the shard lock expiry,
 * then SIGCONT. Shared by `ci.test.ts` (lock rows) and `full.chaos.ts` (advisory locks):
 *
 * - **lock rows** (`SHARD_LOCK_DISABLE_ADVISORY=true`): the paused runner's lock rows expire
 *   and the other two runners take its shards while it is still alive; the scenario waits for
 *   that takeover (every shard locked by the two others), then wakes the paused runner, a
 *   zombie that must be fenced: the test of a live owner losing its shards;
 * - **advisory locks** (the default): the paused runner's database session stays open, so it
 *   keeps its advisory locks through the pause (seen: three sessions holding 10, 8 and 12 of
 *   the 30 locks at the end of a 15 s pause); its shards wait for it, nothing moves. What this
 *   adds is a runner that freezes and comes back.
 *
 * The takeover (lock rows) is decided on one reading of the lock table: the scenario failed
 * once (CI of 2026-12-06) with the takeover seen at 9.6 s and, a moment later, the assertion's
 * own second reading showing 28 of the 30 shards (15 + 13). The two others were still
 * rebalancing: a shard one of them held and that the new ring gives to the other is unlocked
 * between its release and its new owner's next acquisition (see {@link takeoverBoundMs}).
 */
import { expect } from "vitest"
import { sleep } from "../../support/cli.js"
import type { PgServer } from "../../support/pgServer.js"
import { type Cluster, type ClusterTimings, fastTimings, timingMs } from "./cluster.js"
import { assertInvariants, atFault, LEASE_TTL_MS, waitCommitted } from "./invariants.js"
import { withScene } from "./scenario.js"

/** Shard locks held now per owner (lock rows: per runner address, live rows only; advisory: per session). */
export const lockOwners = (cluster: Cluster, rows: boolean): Map<string, number> => {
  const text = rows
    ? cluster.sql(
      `SELECT address, count(*) FROM cluster_locks WHERE acquired_at > now() - interval '${
        timingMs(fastTimings.lockExpiration) / 1000
      } seconds' GROUP BY 1 ORDER BY 1`
    )
    : cluster.sql(
      "SELECT pid, count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) GROUP BY 1 ORDER BY 1"
    )
  const out = new Map<string, number>()
  for (const line of text.split("\n")) {
    if (line === "") continue
    const [owner, n] = line.split("|")
    out.set(owner!, Number(n))
  }
  return out
}

/** The shards locked in all, in one reading of {@link lockOwners}. */
const lockTotal = (owners: Map<string, number>): number => Array.from(owners.values()).reduce((a, b) => a + b, 0)

/**
 * The longest a takeover of a stopped runner's shards should take with lock rows and timings
 * `t` (ms), as `@effect/cluster` 0.60 does it: the stopped runner's last lock refresh (which
 * also writes its heartbeat) came at most one refresh interval, `min(refresh, expiry / 3)`,
 * before the stop; its lock rows and its runner row (`getRunners` reads only runners with a
 * heartbeat younger than the expiry) go stale `lockExpiration` after that refresh; each other
 * runner drops it from its ring at its next assignments refresh and acquires the shards the
 * new ring gives it on its acquisition loop's next turn (every `poll`; the statement is cut
 * after a refresh interval and tried again). A shard the new ring moves between the two others
 * (most runs: its ring balances 15 + 15) waits for its holder to release it (its entities
 * closed) and then for the new owner's next turn, which sleeps 1 s after an acquisition.
 * Seen: 9.3–14.1 s at load 1–9 (chaos38 report).
 */
export const takeoverBoundMs = (t: ClusterTimings): number => {
  const interval = Math.min(timingMs(t.lockRefresh), timingMs(t.lockExpiration) / 3)
  return interval + timingMs(t.lockExpiration) + timingMs(t.refreshAssignments) + timingMs(t.poll) + interval + 1_000
}

/**
 * How long C5 with lock rows waits for the takeover (ms): 5 s short of the pool lease TTL, so
 * that the paused runner wakes while the leases it renewed last are still held by it (the
 * zombie's case). Timings whose {@link takeoverBoundMs} does not fit fail the scenario at once.
 */
export const takeoverWaitMs = LEASE_TTL_MS - 5_000

/** Runs C5 in one lock mode on database `db` of `pg` (see the module header). */
export const pauseScenario = async (pg: PgServer, disableAdvisory: boolean): Promise<void> => {
  const mode = disableAdvisory ? "lock rows" : "advisory locks"
  const timings = { ...fastTimings, disableAdvisory }
  const capacity = { r1: 6 }
  await withScene(pg, disableAdvisory ? "c5rows" : "c5adv", { timings }, async ({ cluster, provider, experiment, tasks }) => {
    const submitter = cluster.submit(20)
    await waitCommitted(cluster, Math.floor(tasks / 4))
    const snap = await atFault(cluster, provider, () => cluster.pause(1))
    // at least past the lock expiry and a refresh, within the pool lease TTL (30 s)
    const pauseMs = timingMs(timings.lockExpiration) + timingMs(timings.lockRefresh) + 2_000
    if (disableAdvisory) {
      // lock rows: wait for the takeover itself, decided and asserted on the same reading (a
      // second reading may fall in the two others' rebalancing: see the module header)
      const paused = `127.0.0.1:${cluster.runners[1]!.port}`
      const bound = takeoverBoundMs(timings)
      expect(bound, `the lock timings' takeover bound fits in C5's wait (${takeoverWaitMs} ms, within the lease TTL)`)
        .toBeLessThanOrEqual(takeoverWaitMs)
      const takenOver = (owners: Map<string, number>) => !owners.has(paused) && lockTotal(owners) === timings.shardsPerGroup
      let owners = lockOwners(cluster, true)
      while (!takenOver(owners) && Date.now() - snap.faultAt < takeoverWaitMs) {
        await sleep(250)
        owners = lockOwners(cluster, true)
      }
      const takeoverAfterMs = Date.now() - snap.faultAt
      console.log(JSON.stringify({ scenario: `C5 ${mode}`, takeoverAfterMs, boundMs: bound, locks: [...owners] }))
      expect(takenOver(owners), `the paused runner's shards taken by the others within ${takeoverWaitMs} ms: ${JSON.stringify([...owners])}`)
        .toBe(true)
    } else {
      await sleep(pauseMs)
    }
    console.log(JSON.stringify({ scenario: `C5 ${mode}`, locksDuringPause: [...lockOwners(cluster, disableAdvisory)] }))
    cluster.resume(1)
    const run = await submitter.done
    expect(run.code, run.stderr).toBe(0)
    const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity, snapshots: [snap] })
    console.log(JSON.stringify({ scenario: `C5 ${mode}`, heldAtFault: snap.heldSlots, ...out }))
  })
}
