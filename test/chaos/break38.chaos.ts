/**
 * break38: attacks on the per-pipeline window claims and the admission claims (claims37) with
 * real `assay runner` processes and real `assay run --engine cluster` submitters. Run one at a
 * time: `npx vitest run --config vitest.chaos.config.ts test/chaos/break38.chaos.ts -t NAME`.
 * Each test collects every broken guarantee (`verify`, `honesty`) and fails listing them.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { describe, expect, it } from "vitest"
import { type CliProcess, sleep, start } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"
import { clusterEnv, fastTimings, timingMs } from "./support/cluster.js"
import { honesty, submitWith, summaryOf, verify } from "./support/break38.js"
import { atFault, committedCount, type Snapshot, waitCommitted } from "./support/invariants.js"
import { withScene } from "./support/scenario.js"

const pg = usePostgres()
const capacity = { r1: 6 }

const log = (o: unknown) => console.log(JSON.stringify(o))

describe("break38: window claims and admission claims under real faults", () => {
  it("B1: many small windows (2 pipelines), kill -9 of a runner mid-claims, restart, a 4th runner joins", async () => {
    const experiment = { rows: 150, resources: [{ id: "r1", capacity: 6 }] }
    await withScene(pg, "b1", { experiment, latencyMs: 30 }, async ({ cluster, provider, tasks }) => {
      const sub = submitWith(cluster, ["--max-admitted", "8"])
      const snaps: Array<Snapshot> = []
      await waitCommitted(cluster, Math.floor(tasks / 5))
      snaps.push(await atFault(cluster, provider, () => cluster.kill9(1)))
      await sleep(1_500)
      await cluster.restart(1)
      await waitCommitted(cluster, Math.floor(tasks / 2))
      snaps.push(await atFault(cluster, provider, () => cluster.kill9(1)))
      await cluster.restart(1)
      await cluster.join()
      const ran = await sub.done
      const problems = [...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps }), ...honesty(cluster, "submitter", ran, experiment.rows)]
      log({ b1: summaryOf(ran.stdout), code: ran.code, claimsLeft: cluster.sql("SELECT count(*) FROM assay_cluster_pipeline_claims").trim() })
      expect(problems).toEqual([])
    })
  }, 400_000)

  it("B2: SIGSTOP of a runner past the claim TTL while a regrouping re-submission takes its pipelines over, then SIGCONT (the zombie)", async () => {
    const experiment = { rows: 90, resources: [{ id: "r1", capacity: 6 }] }
    await withScene(pg, "b2", { experiment, latencyMs: 300 }, async ({ cluster, provider, tasks }) => {
      const first = submitWith(cluster, ["--max-admitted", "24"])
      const snaps: Array<Snapshot> = []
      await waitCommitted(cluster, Math.floor(tasks / 6))
      snaps.push(await atFault(cluster, provider, () => cluster.pause(2)))
      // Ctrl-C of the first submitter, and a regrouping re-submission (windows of 5, not 6)
      first.child.kill("SIGINT")
      const r1 = await first.done
      const second = submitWith(cluster, ["--max-admitted", "20"])
      // past the claim TTL (the shard lock expiry, 10 s) and a heartbeat
      await sleep(timingMs(fastTimings.lockExpiration) + timingMs(fastTimings.lockRefresh) + 3_000)
      snaps.push(await atFault(cluster, provider, () => cluster.resume(2)))
      const ran = await second.done
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps, settleMs: 60_000 }),
        ...honesty(cluster, "second", ran, experiment.rows)
      ]
      log({ b2: { first: { code: r1.code, s: summaryOf(r1.stdout) }, second: { code: ran.code, s: summaryOf(ran.stdout) } } })
      expect(problems).toEqual([])
    })
  }, 400_000)

  it("B3: Ctrl-C and an immediate re-submission, three times, with rows failing once (re-admitted)", async () => {
    const experiment = { rows: 80, resources: [{ id: "r1", capacity: 6 }] }
    // task b of every 7th row answers 400 (fatal) on its first call: the pipeline fails; re-admitted, it succeeds
    const fail = (key: string, n: number) => key.startsWith("b|") && Number(key.split("|")[1]) % 7 === 0 && n === 1 ? 400 : undefined
    await withScene(pg, "b3", { experiment, latencyMs: 80, fail }, async ({ cluster, provider, tasks }) => {
      const snaps: Array<Snapshot> = []
      const runs: Array<unknown> = []
      let sub = submitWith(cluster, ["--max-admitted", "12"])
      for (let k = 1; k <= 3; k++) {
        await waitCommitted(cluster, Math.floor((tasks * k) / 6))
        sub.child.kill("SIGINT")
        const r = await sub.done
        runs.push({ code: r.code, s: summaryOf(r.stdout) })
        snaps.push(await atFault(cluster, provider, () => undefined))
        sub = submitWith(cluster, ["--max-admitted", String(12 + 3 * k)])
      }
      const last = await sub.done
      runs.push({ code: last.code, s: summaryOf(last.stdout), err: last.stderr.slice(-600) })
      // judged before the next submission re-admits its failed rows (under its own run)
      const lastHonest = honesty(cluster, "last", last, experiment.rows)
      // the failed rows of the last run's own are admitted once more: they succeed (their 2nd call)
      const again = await submitWith(cluster, ["--max-admitted", "12"]).done
      runs.push({ code: again.code, s: summaryOf(again.stdout) })
      log({ b3: runs })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps, failedAllowed: 0, settleMs: 60_000 }),
        ...lastHonest,
        ...honesty(cluster, "again", again, experiment.rows)
      ]
      expect(problems).toEqual([])
    })
  }, 500_000)

  it("B4: two submitters started together, then a third with other windows while they run, rows failing once", async () => {
    const experiment = { rows: 90, resources: [{ id: "r1", capacity: 6 }] }
    const fail = (key: string, n: number) => key.startsWith("c|") && Number(key.split("|")[1]) % 9 === 0 && n === 1 ? 400 : undefined
    await withScene(pg, "b4", { experiment, latencyMs: 60, fail }, async ({ cluster, provider, tasks }) => {
      const a = submitWith(cluster, ["--max-admitted", "16"])
      const b = submitWith(cluster, ["--max-admitted", "16"])
      await waitCommitted(cluster, Math.floor(tasks / 3))
      const c = submitWith(cluster, ["--max-admitted", "30"])
      const [ra, rb, rc] = await Promise.all([a.done, b.done, c.done])
      const abc = [...honesty(cluster, "a", ra, experiment.rows), ...honesty(cluster, "b", rb, experiment.rows), ...honesty(cluster, "c", rc, experiment.rows)]
      const d = await submitWith(cluster, ["--max-admitted", "16"]).done
      log({ b4: [ra, rb, rc, d].map((r) => ({ code: r.code, s: summaryOf(r.stdout) })) })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: [], failedAllowed: 0, settleMs: 30_000 }),
        ...abc,
        ...honesty(cluster, "d", d, experiment.rows)
      ]
      expect(problems).toEqual([])
    })
  }, 500_000)

  it("B5: Postgres restarted fast during admission (large batches admitted), then the run completes", async () => {
    const experiment = { rows: 600, resources: [{ id: "r1", capacity: 12 }] }
    await withScene(pg, "b5", { experiment, latencyMs: 20 }, async ({ cluster, provider, tasks }) => {
      const sub = submitWith(cluster, ["--max-admitted", "200"])
      // the first admissions' writes: restart while the submitter admits batch after batch
      const t0 = Date.now()
      while (Number(cluster.sql("SELECT count(*) FROM assay_pipelines").trim()) < 50 && Date.now() - t0 < 60_000) await sleep(20)
      const snap = await atFault(cluster, provider, () => pg.restart("fast"))
      const ran = await sub.done
      log({ b5: { code: ran.code, s: summaryOf(ran.stdout), err: ran.stderr.slice(-1500) }, committed: committedCount(cluster), tasks })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 12 }, snapshots: [snap], settleMs: 60_000 }),
        ...honesty(cluster, "submitter", ran, experiment.rows)
      ]
      expect(problems).toEqual([])
    })
  }, 500_000)

  it("B6: kill -9 of a runner, Ctrl-C at once, a regrouping re-submission while its windows wait on the dead runner's claims, restart, a 4th joins", async () => {
    const experiment = { rows: 120, resources: [{ id: "r1", capacity: 6 }] }
    const fail = (key: string, n: number) => key.startsWith("b|") && Number(key.split("|")[1]) % 8 === 3 && n === 1 ? 400 : undefined
    await withScene(pg, "b6", { experiment, latencyMs: 100, fail }, async ({ cluster, provider, tasks }) => {
      const snaps: Array<Snapshot> = []
      const first = submitWith(cluster, ["--max-admitted", "24"])
      await waitCommitted(cluster, Math.floor(tasks / 5))
      snaps.push(await atFault(cluster, provider, () => cluster.kill9(1)))
      first.child.kill("SIGINT")
      const r1 = await first.done
      const second = submitWith(cluster, ["--max-admitted", "15"])
      await sleep(4_000)
      await cluster.restart(1)
      await sleep(4_000)
      await cluster.join()
      const r2 = await second.done
      const h2 = honesty(cluster, "second", r2, experiment.rows)
      const r3 = await submitWith(cluster, ["--max-admitted", "15"]).done
      log({ b6: [r1, r2, r3].map((r) => ({ code: r.code, s: summaryOf(r.stdout) })) })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps, settleMs: 60_000 }),
        ...h2,
        ...honesty(cluster, "third", r3, experiment.rows)
      ]
      expect(problems).toEqual([])
    })
  }, 500_000)

  it("B7: a second submitter a moment after the first (its reads stale): what it withholds, its text summary and exit code", async () => {
    const experiment = { rows: 60, resources: [{ id: "r1", capacity: 6 }] }
    // every 6th row fails for good (task a answers 400 every time)
    const fail = (key: string) => key.startsWith("a|") && Number(key.split("|")[1]) % 6 === 5 ? 400 : undefined
    await withScene(pg, "b7", { experiment, latencyMs: 150, fail }, async ({ cluster, provider }) => {
      const first = submitWith(cluster, ["--max-admitted", "12"])
      await sleep(300)
      const p = start(["run", "-c", cluster.file, "--engine", "cluster", "--database", cluster.url, "--max-admitted", "12"], {
        cwd: cluster.dir,
        env: clusterEnv(fastTimings)
      })
      ;(cluster.submitters as Array<CliProcess>).push(p)
      const [r1, r2] = await Promise.all([first.done, p.done])
      log({ b7: { first: { code: r1.code, s: summaryOf(r1.stdout) }, second: { code: r2.code, out: r2.stdout, err: r2.stderr.slice(-1500) } } })
      const problems = [...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: [], failedAllowed: 10, settleMs: 30_000 })]
      // (its exit code is its own pipelines' and its followed ones': the ones it withheld are the
      // first submitter's, which follows them and exits 1 for their failures: docs/scale-out.md)
      const failedOwn = Number(cluster.sql(`SELECT count(*) FROM assay_pipelines WHERE state = 'failed' AND run_id = '${/cluster run (\S+):/.exec(r2.stdout)?.[1] ?? ""}'`).trim())
      if (failedOwn > 0 && r2.code === 0) problems.push(`second submitter exit 0 (${r2.stdout.trim()}) while ${failedOwn} pipelines of its run ended failed`)
      // the text summary's numbers: own succeeded, failed, already done, followed N
      const m = /: (\d+) succeeded, (\d+) failed, (?:.*?)(\d+) already done(?:; followed (\d+))?/.exec(r2.stdout)
      const told = m === null ? 0 : Number(m[1]) + Number(m[2]) + Number(m[3]) + Number(m[4] ?? 0)
      if (told < experiment.rows && !/withheld|not admitted|left to/.test(r2.stdout + r2.stderr)) {
        problems.push(`text summary accounts for ${told} of the ${experiment.rows} pipelines read, and says nothing of the other ${experiment.rows - told} (withheld): ${r2.stdout.trim()}`)
      }
      expect(problems).toEqual([])
    })
  }, 500_000)

  it("B8: lock rows (shards move while the runner lives): SIGSTOP past the lock expiry with windows of 2 and short tasks, SIGCONT", async () => {
    const experiment = { rows: 120, resources: [{ id: "r1", capacity: 6 }] }
    const timings = { ...fastTimings, disableAdvisory: true }
    await withScene(pg, "b8", { experiment, latencyMs: 40, timings }, async ({ cluster, provider, tasks }) => {
      const sub = submitWith(cluster, ["--max-admitted", "8"])
      const snaps: Array<Snapshot> = []
      await waitCommitted(cluster, Math.floor(tasks / 4))
      snaps.push(await atFault(cluster, provider, () => cluster.pause(1)))
      await sleep(timingMs(timings.lockExpiration) + timingMs(timings.lockRefresh) + 4_000)
      snaps.push(await atFault(cluster, provider, () => cluster.resume(1)))
      const ran = await sub.done
      log({ b8: { code: ran.code, s: summaryOf(ran.stdout) } })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps, settleMs: 30_000 }),
        ...honesty(cluster, "submitter", ran, experiment.rows)
      ]
      expect(problems).toEqual([])
    })
  }, 500_000)

  it("B9: churn with lock rows: three rounds of kill -9 of a runner + Ctrl-C + the same command again at once, restarts", async () => {
    const experiment = { rows: 120, resources: [{ id: "r1", capacity: 6 }] }
    const timings = { ...fastTimings, disableAdvisory: true }
    const fail = (key: string, n: number) => key.startsWith("c|") && Number(key.split("|")[1]) % 10 === 4 && n === 1 ? 400 : undefined
    await withScene(pg, "b9", { experiment, latencyMs: 80, timings, fail }, async ({ cluster, provider, tasks }) => {
      const snaps: Array<Snapshot> = []
      const runs: Array<unknown> = []
      let sub = submitWith(cluster, ["--max-admitted", "16"])
      for (let k = 0; k < 3; k++) {
        await waitCommitted(cluster, Math.floor((tasks * (k + 1)) / 5), 180_000)
        snaps.push(await atFault(cluster, provider, () => cluster.kill9(k)))
        sub.child.kill("SIGINT")
        const r = await sub.done
        runs.push({ code: r.code, s: summaryOf(r.stdout) })
        sub = submitWith(cluster, ["--max-admitted", "16"])
        await sleep(2_000)
        await cluster.restart(k)
      }
      const last = await sub.done
      runs.push({ code: last.code, s: summaryOf(last.stdout) })
      const h = honesty(cluster, "last", last, experiment.rows)
      const again = await submitWith(cluster, ["--max-admitted", "16"]).done
      runs.push({ code: again.code, s: summaryOf(again.stdout) })
      log({ b9: runs })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps, settleMs: 60_000 }),
        ...h,
        ...honesty(cluster, "again", again, experiment.rows)
      ]
      expect(problems).toEqual([])
    })
  }, 600_000)

  it("B10: Ctrl-C of submitters at random moments of admission (no failures): no row left running with nothing running it", async () => {
    const experiment = { rows: 240, resources: [{ id: "r1", capacity: 8 }] }
    await withScene(pg, "b10", { experiment, latencyMs: 150 }, async ({ cluster, provider }) => {
      const runs: Array<unknown> = []
      const delays = [1500, 1600, 1700, 1800, 1550, 1650, 1750, 1900]
      for (const d of delays) {
        const sub = submitWith(cluster, ["--max-admitted", "48"])
        await sleep(d)
        sub.child.kill("SIGINT")
        const r = await sub.done
        runs.push({ code: r.code, s: summaryOf(r.stdout)?.cluster })
      }
      // quiet: no call for 8 s (every window the runners have has run)
      let last = provider.calls.length
      let quietSince = Date.now()
      const t0 = Date.now()
      while (Date.now() - quietSince < 8_000 && Date.now() - t0 < 120_000) {
        await sleep(500)
        if (provider.calls.length !== last) {
          last = provider.calls.length
          quietSince = Date.now()
        }
      }
      const stranded = cluster.sql("SELECT pipeline_id, run_id, n_tasks_done, updated_at FROM assay_pipelines WHERE state = 'running' ORDER BY 2, 1")
      const states = cluster.sql("SELECT state, count(*) FROM assay_pipelines GROUP BY 1").replace(/\n/g, " ")
      const claims = cluster.sql("SELECT count(*), count(*) FILTER (WHERE expires_at > now()) FROM assay_cluster_pipeline_claims").trim()
      const runRows = cluster.sql("SELECT r.run_id, r.status, r.stop_reason, (SELECT count(*) FROM assay_pipelines p WHERE p.run_id = r.run_id AND p.state = 'running') FROM assay_runs r ORDER BY 1").replace(/\n/g, "; ")
      log({ b10: runs, states, claims, stranded: stranded.split("\n").filter((l) => l !== "").length, runRows })
      const problems: Array<string> = []
      if (stranded !== "") problems.push(`rows running with no call for 8 s after the last Ctrl-C (${states}): ${stranded.replace(/\n/g, "; ").slice(0, 1500)}`)
      // a final submission follows or admits them all
      const fin = await submitWith(cluster, ["--max-admitted", "48"]).done
      log({ b10final: { code: fin.code, s: summaryOf(fin.stdout) } })
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 8 }, snapshots: [], settleMs: 30_000 }))
      problems.push(...honesty(cluster, "final", fin, experiment.rows))
      expect(problems).toEqual([])
    })
  }, 600_000)

  it("B11: a 4th runner joins mid-run (shards move under live windows) while a second submitter with other windows races the first", async () => {
    const experiment = { rows: 150, resources: [{ id: "r1", capacity: 6 }] }
    const fail = (key: string, n: number) => key.startsWith("b|") && Number(key.split("|")[1]) % 11 === 2 && n === 1 ? 400 : undefined
    await withScene(pg, "b11", { experiment, latencyMs: 60, fail }, async ({ cluster, provider, tasks }) => {
      const a = submitWith(cluster, ["--max-admitted", "12"])
      await waitCommitted(cluster, Math.floor(tasks / 4))
      const snap = await atFault(cluster, provider, async () => {
        await cluster.join()
      })
      const b = submitWith(cluster, ["--max-admitted", "20"])
      await waitCommitted(cluster, Math.floor(tasks / 2))
      // a graceful stop of runner 0 and its start again (a rolling restart step)
      const snap2 = await atFault(cluster, provider, () => void cluster.runners[0]!.proc.child.kill("SIGTERM"))
      await cluster.restart(0)
      const [ra, rb] = await Promise.all([a.done, b.done])
      const hab = [...honesty(cluster, "a", ra, experiment.rows), ...honesty(cluster, "b", rb, experiment.rows)]
      const c = await submitWith(cluster, ["--max-admitted", "12"]).done
      log({ b11: [ra, rb, c].map((r) => ({ code: r.code, s: summaryOf(r.stdout) })) })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: [snap, snap2], settleMs: 60_000 }),
        ...hab,
        ...honesty(cluster, "c", c, experiment.rows)
      ]
      expect(problems).toEqual([])
    })
  }, 600_000)

  it("B12: Postgres restarted (fast ×3, then immediate) while windows of 2 are claimed and admitted every few ms, a Ctrl-C and re-submission between", async () => {
    const experiment = { rows: 200, resources: [{ id: "r1", capacity: 6 }] }
    await withScene(pg, "b12", { experiment, latencyMs: 30 }, async ({ cluster, provider, tasks }) => {
      const snaps: Array<Snapshot> = []
      let sub = submitWith(cluster, ["--max-admitted", "8"])
      const first = sub
      await waitCommitted(cluster, Math.floor(tasks / 8))
      for (let k = 0; k < 3; k++) {
        snaps.push(await atFault(cluster, provider, () => pg.restart("fast")))
        await sleep(2_500)
        if (k === 1) {
          sub.child.kill("SIGINT")
          await sub.done
          sub = submitWith(cluster, ["--max-admitted", "10"])
        }
      }
      snaps.push(await atFault(cluster, provider, () => pg.restart("immediate")))
      const r1 = await first.done
      const ran = await sub.done
      log({ b12: [r1, ran].map((r) => ({ code: r.code, s: summaryOf(r.stdout), err: r.stderr.slice(-800) })) })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps, settleMs: 60_000 }),
        ...honesty(cluster, "second", ran, experiment.rows)
      ]
      if (ran.code !== 0) problems.push(`second submitter exit ${ran.code}`)
      expect(problems).toEqual([])
    })
  }, 600_000)

  it("B13: a tight quota (10 calls / 5 s) over runners that churn: a 4th joins, one is killed -9 and restarted, the submitter Ctrl-C'd and re-submitted", async () => {
    const quota = { limit: 10, windowMs: 5_000 }
    const experiment = { rows: 30, resources: [{ id: "r1", capacity: 6 }], resourceExtra: { quotas: [{ limit: quota.limit, window: "5 seconds" }] } }
    await withScene(pg, "b13", { experiment, latencyMs: 100 }, async ({ cluster, provider, tasks }) => {
      const snaps: Array<Snapshot> = []
      const first = submitWith(cluster, ["--max-admitted", "8"])
      await waitCommitted(cluster, 12)
      await cluster.join()
      await waitCommitted(cluster, 25)
      snaps.push(await atFault(cluster, provider, () => cluster.kill9(2)))
      first.child.kill("SIGINT")
      await first.done
      const second = submitWith(cluster, ["--max-admitted", "10"])
      await sleep(3_000)
      await cluster.restart(2)
      const ran = await second.done
      const windows = Array.from(provider.perWindow("r1", quota.windowMs).entries())
      log({ b13: { code: ran.code, s: summaryOf(ran.stdout), windows: windows.map(([, n]) => n), tasks } })
      const problems = [
        ...await verify(cluster, provider, { rows: experiment.rows, capacity, snapshots: snaps, settleMs: 60_000 }),
        ...honesty(cluster, "second", ran, experiment.rows)
      ]
      const over = windows.filter(([, n]) => n > quota.limit)
      if (over.length > 0) problems.push(`I4 calls per 5 s window over the quota of 10: ${JSON.stringify(over)}`)
      expect(problems).toEqual([])
    })
  }, 600_000)

  it("B14: a zombie's late commit of the last task, after the pipeline was taken over, failed there, and was re-admitted by another submission", async () => {
    const experiment = { rows: 1, resources: [{ id: "r1", capacity: 6 }] }
    // lock rows: the frozen runner's shards move while it lives, so its window is replayed elsewhere
    const timings = { ...fastTimings, disableAdvisory: true }
    // task c's calls take 3 s; its 2nd call (the one after the takeover) fails for good (400)
    const latencyOf = (key: string) => key.startsWith("c|") ? 3_000 : undefined
    const fail = (key: string, n: number) => key.startsWith("c|") && n === 2 ? 400 : undefined
    await withScene(pg, "b14", { experiment, latencyMs: 50, timings, fail, latencyOf }, async ({ cluster, provider }) => {
      const until = async (what: string, check: () => boolean, ms = 90_000) => {
        const t0 = Date.now()
        while (!check()) {
          if (Date.now() - t0 > ms) throw new Error(`timed out: ${what}`)
          await sleep(20)
        }
      }
      const cCalls = () => provider.calls.filter((x) => x.key.startsWith("c|"))
      const s1 = submitWith(cluster, ["--max-admitted", "1"])
      await until("c's first call in flight", () => cCalls().length >= 1)
      const zi = runnerOfPort(cluster, cCalls()[0]!.remotePort!)
      const snap = await atFault(cluster, provider, () => cluster.pause(zi))
      const r1 = await s1.done
      const afterFail = cluster.sql("SELECT run_id, state, n_tasks_done FROM assay_pipelines").trim()
      const s2 = submitWith(cluster, ["--max-admitted", "1"])
      await until("c's third call in flight (the re-admitted run's)", () => cCalls().length >= 3)
      await sleep(300)
      const snap2 = await atFault(cluster, provider, () => cluster.resume(zi))
      const r2 = await s2.done
      const facts = {
        zombie: zi,
        cCalls: cCalls().map((x) => ({ n: x.status, at: x.start - snap.faultAt })),
        afterFail,
        s1: { code: r1.code, s: summaryOf(r1.stdout)?.stats },
        s2: { code: r2.code, s: summaryOf(r2.stdout)?.stats, run: summaryOf(r2.stdout)?.runId },
        row: cluster.sql("SELECT run_id, state, n_tasks_done FROM assay_pipelines").trim(),
        outputs: cluster.sql("SELECT seq, active, artifact_id, run_id FROM assay_artifacts WHERE seq >= 0 ORDER BY seq, artifact_id").replace(/\n/g, "; "),
        tasks: cluster.sql("SELECT seq, state, active, run_id FROM assay_tasks ORDER BY seq").replace(/\n/g, "; "),
        attempts: cluster.sql("SELECT seq, attempt_no, outcome, run_id FROM assay_attempts ORDER BY attempt_id").replace(/\n/g, "; ")
      }
      log({ b14: facts })
      const problems = [
        ...await verify(cluster, provider, { rows: 1, capacity, snapshots: [snap, snap2], settleMs: 30_000 }),
        ...honesty(cluster, "s2", r2, 1)
      ]
      expect(problems).toEqual([])
    })
  }, 600_000)
})

/** The index of the runner whose process has a TCP socket on local port `port` (`ss`). */
const runnerOfPort = (cluster: { runners: ReadonlyArray<{ index: number; proc: CliProcess }> }, port: number): number => {
  const out = spawnSync("ss", ["-tnpH", `( sport = :${port} )`], { encoding: "utf8" }).stdout
  const pids = Array.from(out.matchAll(/pid=(\d+)/g)).map((m) => Number(m[1]))
  const ppid = (pid: number) => Number(fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[1])
  for (const r of cluster.runners) {
    for (const pid of pids) if (r.proc.child.pid === pid || r.proc.child.pid === ppid(pid)) return r.index
  }
  throw new Error(`no runner has local port ${port}: ${out}`)
}

