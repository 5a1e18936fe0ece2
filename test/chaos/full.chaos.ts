/**
 * The rest of the chaos suite (issue 17; research/distributed.md §7), run only by
 * `npm run test:chaos` (with `ci.test.ts`): C3 kill -9 and rejoin, C4 kill -9 of every runner
 * and a full restart, C5 with advisory locks (a runner frozen past the lock expiry), C7 a
 * tight quota over three runners, C8 a rolling restart, C9 a resource
 * that dies mid-run and a capacity lowered at run time. Same harness and invariants as
 * `ci.test.ts`.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { Effect, Redacted } from "effect"
import { describe, expect, it } from "vitest"
import * as PgPools from "../../src/layers/PgPools.js"
import { sleep } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"
import { blockLeases, fastTimings, timingMs } from "./support/cluster.js"
import { assertInvariants, atFault, type Snapshot, waitCommitted } from "./support/invariants.js"
import { pauseScenario } from "./support/pause.js"
import type { Call } from "./support/provider.js"
import { withScene } from "./support/scenario.js"

const pg = usePostgres()

const capacity = { r1: 6 }

/** Healthy runners registered now. */
const healthyRunners = (sql: (q: string) => string) => Number(sql("SELECT count(*) FROM cluster_runners WHERE healthy").trim())

/** Backends holding the cluster's shard locks (advisory mode: one reserved session per runner). */
const lockHolders = (sql: (q: string) => string) =>
  Number(sql("SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND granted").trim())

const waitUntil = async (check: () => boolean, what: string, timeoutMs = 60_000) => {
  const t0 = Date.now()
  while (!check()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await sleep(200)
  }
}

/** The highest number of `calls` in flight at once (an answered call's interval [start, end]). */
const peakOf = (calls: ReadonlyArray<Call>): number => {
  const edges: Array<[number, number]> = []
  for (const c of calls) {
    edges.push([c.start, 1])
    edges.push([c.end ?? Number.MAX_SAFE_INTEGER, -1])
  }
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1])
  let now = 0
  let peak = 0
  for (const [, d] of edges) {
    now += d
    peak = Math.max(peak, now)
  }
  return peak
}

describe("chaos (full): three assay runner processes on PostgreSQL", () => {
  // Failed twice on harness timing (shards still moving at the start; then the killed runner's
  // last request counted after the fault); passed since both were fixed (0 repeats, 32 s).
  it("C3: kill -9 of one runner, restarted 5 s later: it rejoins and shards spread over three runners again", async () => {
    await withScene(pg, "c3", {}, async ({ cluster, provider, experiment, tasks }) => {
      const submitter = cluster.submit(20)
      await waitCommitted(cluster, Math.floor(tasks / 4))
      const snap = await atFault(cluster, provider, () => cluster.kill9(1))
      await sleep(5_000)
      await cluster.restart(1)
      await waitUntil(() => healthyRunners(cluster.sql) === 3, "the restarted runner to register")
      await waitUntil(() => lockHolders(cluster.sql) === 3, "three runners holding shard locks")
      const run = await submitter.done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity, snapshots: [snap] })
      console.log(JSON.stringify({ scenario: "C3", heldAtFault: snap.heldSlots, ...out }))
    })
  }, 300_000)

  // Failed once before the settled-shards wait (keys called twice ≥ 100 s after the kill);
  // passed since (6 repeats, all within the allowance, 56 s).
  it("C4: kill -9 of every runner, then all started again: a full crash resumes, no committed task called again", async () => {
    await withScene(pg, "c4", {}, async ({ cluster, provider, experiment, tasks }) => {
      const submitter = cluster.submit(20)
      await waitCommitted(cluster, Math.floor(tasks / 3))
      const snap = await atFault(cluster, provider, async () => {
        await Promise.all([0, 1, 2].map((i) => cluster.kill9(i)))
      })
      await sleep(2_000)
      await cluster.restart(0)
      await waitUntil(() => healthyRunners(cluster.sql) >= 1, "the first runner back")
      await cluster.restart(1)
      await cluster.restart(2)
      const run = await submitter.done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity, snapshots: [snap] })
      console.log(JSON.stringify({ scenario: "C4", heldAtFault: snap.heldSlots, ...out }))
    })
  }, 300_000)

  // Moved here from ci.test.ts on 2026-12-02 (the CI budget): with advisory locks (the
  // default) the paused runner keeps its locks through the pause and nothing moves, so this
  // adds no fencing case to the lock-rows variant in ci.test.ts; it is the default lock mode
  // with a runner that freezes and comes back. Passed (0 repeats) at load 23 with the 3 s /
  // 10 s lock timings.
  it("C5 (advisory locks): SIGSTOP of one runner past the lock expiry, then SIGCONT: its shards wait for it, nothing lost or repeated", async () => {
    await pauseScenario(pg, false)
  }, 300_000)

  // The quota is declared on the resource in the experiment file (`quotas:`), as a user writes
  // it; the runners' global pools charge every grant into a shared Postgres window.
  // Failed 3 of 3 runs at load 20-40 before 2026-12-02 (23 calls in a window of 20, then
  // 11 of 10 with the end-of-window guard): a call charged at its grant reached the provider in
  // the next window when its execution waited between the grant and the call (the L4 read,
  // a slow event loop). The charge is now moved to the window the call goes out in, just
  // before the call (`PgPools.confirmQuota`); passed 3 of 3 at load 13-17, the ledger equal to
  // the provider's count in every window.
  it("C7: a tight quota (10 calls / 5 s) over three runners: calls per window ≤ quota", async () => {
    const quota = { limit: 10, windowMs: 5_000 }
    const experiment = {
      rows: 20,
      resources: [{ id: "r1", capacity: 6 }],
      resourceExtra: { quotas: [{ limit: quota.limit, window: "5 seconds" }] }
    }
    await withScene(pg, "c7", { experiment }, async ({ cluster, provider, tasks }) => {
      const run = await cluster.submit(20).done
      expect(run.code, run.stderr).toBe(0)
      // for a failure's diagnosis: each window's calls (ms into the window) and the ledger
      const byWindow = new Map<number, Array<number>>()
      for (const c of provider.calls) {
        const w = Math.floor(c.start / quota.windowMs) * quota.windowMs
        byWindow.set(w, [...(byWindow.get(w) ?? []), c.start - w])
      }
      console.log(JSON.stringify({
        windows: Array.from(byWindow.entries()).map(([w, ms]) => ({ w, n: ms.length, first: Math.min(...ms), last: Math.max(...ms) })),
        ledger: cluster.sql("SELECT extract(epoch FROM window_start) * 1000, used FROM assay_pool_quota ORDER BY 1").trim().split("\n")
      }))
      const out = await assertInvariants(cluster, provider, {
        rows: experiment.rows,
        capacity,
        snapshots: [],
        quota: { r1: quota }
      })
      expect(out.repeats).toBe(0)
      expect(out.keys).toBe(tasks)
      // the quota, not the capacity, was the bound: 60 calls of 150 ms on 6 slots would take
      // about 1.5 s unthrottled; some window was filled to the limit
      const windows = provider.perWindow("r1", quota.windowMs)
      expect(Math.max(...windows.values())).toBe(quota.limit)
      expect(windows.size).toBeGreaterThanOrEqual(Math.ceil(tasks / quota.limit))
      // the shared ledger counted every call (each grant is charged before its call, in the
      // window the call goes out in)
      const used = Number(cluster.sql("SELECT COALESCE(sum(used), 0) FROM assay_pool_quota WHERE pool = 'llm' AND resource = 'r1' AND metric = 'requests'").trim())
      expect(used).toBeGreaterThanOrEqual(provider.calls.filter((c) => c.resource === "r1").length)
      const perRow = cluster.sql("SELECT max(used) FROM assay_pool_quota WHERE pool = 'llm' AND resource = 'r1'").trim()
      expect(Number(perRow)).toBeLessThanOrEqual(quota.limit)
      console.log(JSON.stringify({ scenario: "C7", windows: Array.from(windows.values()), used, ...out }))
    })
  }, 300_000)

  // Failed once before the settled-shards wait (6 keys called twice); passed since (0 repeats, 32 s).
  it("C8: rolling restart (SIGTERM, start again, one runner at a time): no stall, no terminal failure", async () => {
    await withScene(pg, "c8", { experiment: { rows: 90, resources: [{ id: "r1", capacity: 6 }] } }, async ({ cluster, provider, experiment, tasks }) => {
      const submitter = cluster.submit(20)
      const snaps: Array<Snapshot> = []
      for (const i of [0, 1, 2]) {
        await waitCommitted(cluster, Math.floor((tasks * (i + 1)) / 6))
        snaps.push(await atFault(cluster, provider, () => void cluster.runners[i]!.proc.child.kill("SIGTERM")))
        await cluster.restart(i)
        await waitUntil(() => healthyRunners(cluster.sql) === 3, `runner ${i} back`)
      }
      const run = await submitter.done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps })
      console.log(JSON.stringify({ scenario: "C8", ...out }))
    })
  }, 300_000)

  // Passed on the last run (peak 2 on r2 after the resize, 24 s). Seen before: (1) one run (at
  // load ~25, before the settled-shards wait) stalled once r1 answered 500: 23 of 180
  // checkpoints, 20 pipelines running, no progress for 120 s; (2) `PgPools.resize` answers
  // false although it resized (Q.resize returns the rows of its INSERT … ON CONFLICT DO NOTHING,
  // which has no RETURNING): the test reads the row instead.
  it("C9: a resource dies mid-run (failover to the other), then the other's capacity is lowered: never above it", async () => {
    const experiment = {
      rows: 60,
      resources: [{ id: "r1", capacity: 4 }, { id: "r2", capacity: 4 }],
      algorithm: "failover",
      resourceExtra: { degradeAfter: 2, deadAfter: 4, cooldown: "60 seconds" }
    }
    await withScene(pg, "c9", { experiment }, async ({ cluster, provider, tasks }) => {
      const submitter = cluster.submit(20)
      await waitCommitted(cluster, Math.floor(tasks / 4))
      const snap = await atFault(cluster, provider, () => provider.kill("r1"))
      await waitCommitted(cluster, Math.floor(tasks / 2))
      const lowerAt = Date.now()
      await Effect.runPromise(
        PgPools.resize("llm", "r2", 2).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(cluster.url) })))
      )
      // (resize's boolean is not checked: it answers false even when it resized, see the report
      // of the chaos suite; the row says what every runner reads)
      expect(cluster.sql("SELECT capacity FROM assay_pool_resource WHERE pool = 'llm' AND resource = 'r2'").trim()).toBe("2")
      const run = await submitter.done
      expect(run.code, run.stderr).toBe(0)
      const out = await assertInvariants(cluster, provider, {
        rows: experiment.rows,
        capacity: { r1: 4, r2: 4 },
        snapshots: [snap]
      })
      // granted after the resize: at most 2 at once on r2 (a call granted before it reaches the
      // provider well within a second); with block leases, blocks shrink at the runners' next
      // renewal (every lock refresh: one interval more)
      const settle = 1_000 + (blockLeases ? timingMs(fastTimings.lockRefresh) : 0)
      const after = provider.calls.filter((c) => c.resource === "r2" && c.start > lowerAt + settle)
      expect(peakOf(after)).toBeLessThanOrEqual(2)
      // r1 died: after it was killed, only its failures were answered there
      expect(provider.calls.filter((c) => c.resource === "r1" && c.start > snap.faultAt && c.status === 200)).toEqual([])
      console.log(JSON.stringify({ scenario: "C9", peakAfterResize: peakOf(after), ...out }))
    })
  }, 300_000)
})
