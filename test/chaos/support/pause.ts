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
 */
import { expect } from "vitest"
import { sleep } from "../../support/cli.js"
import type { PgServer } from "../../support/pgServer.js"
import { type Cluster, fastTimings, timingMs } from "./cluster.js"
import { assertInvariants, atFault, waitCommitted } from "./invariants.js"
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
      // lock rows: wait for the takeover itself (no longer than 25 s, inside the lease TTL)
      const paused = `127.0.0.1:${cluster.runners[1]!.port}`
      const takenOver = () => {
        const owners = lockOwners(cluster, true)
        return !owners.has(paused) && Array.from(owners.values()).reduce((a, b) => a + b, 0) === timings.shardsPerGroup
      }
      const t0 = Date.now()
      while (!takenOver() && Date.now() - snap.faultAt < 25_000) await sleep(250)
      console.log(JSON.stringify({ scenario: `C5 ${mode}`, takeoverAfterMs: Date.now() - snap.faultAt, polledMs: Date.now() - t0 }))
      expect(takenOver(), `the paused runner's shards taken by the others: ${JSON.stringify([...lockOwners(cluster, true)])}`).toBe(true)
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
