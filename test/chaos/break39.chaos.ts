/**
 * break39: attacks on session 38's cluster fixes (uninterruptible admission, run-owned counting,
 * early claim release, the runner watch, the summary's `not admitted` and exit codes) with real
 * `assay runner` processes and real `assay run --engine cluster` submitters. Run one at a time:
 * `npx vitest run --config vitest.chaos.config.ts test/chaos/break39.chaos.ts -t NAME`.
 * Each test collects every broken guarantee and fails listing them.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { describe, expect, it } from "vitest"
import { type CliProcess, sleep } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"
import { honesty, reportOf, submitWith, summaryOf, verify } from "./support/break38.js"
import { type Cluster, fastTimings } from "./support/cluster.js"
import { atFault, type Snapshot, waitCommitted } from "./support/invariants.js"
import { withScene } from "./support/scenario.js"

const pg = usePostgres()

const log = (o: unknown) => console.log(JSON.stringify(o))

/** Rows filed under run `runId` by state (`state|n` lines joined). */
const rowsUnder = (cluster: Cluster, runId: string): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const line of cluster.sql(`SELECT state, count(*) FROM assay_pipelines WHERE run_id = '${runId}' GROUP BY 1`).split("\n")) {
    if (line === "") continue
    const [s, n] = line.split("|")
    out[s!] = Number(n)
  }
  return out
}

/**
 * The honesty of an interrupted (Ctrl-C) submitter, judged right after it exited and before any
 * other submission: every row filed under its run is one it counts as admitted (uninterruptible
 * admission: a row written is a window started and counted), and its own counts add up.
 */
const interruptedHonesty = (cluster: Cluster, name: string, ran: { code: number | null; stdout: string; stderr: string }): Array<string> => {
  const s = summaryOf(ran.stdout)
  if (s === undefined) return [`${name}: no JSON summary after Ctrl-C (exit ${ran.code}); stderr: ${ran.stderr.slice(-600)}`]
  const out: Array<string> = []
  const under = rowsUnder(cluster, s.runId)
  const total = Object.values(under).reduce((a, b) => a + b, 0)
  const own = s.stats.pipelines.byState
  if (total !== s.cluster.admitted) out.push(`${name}: ${total} rows filed under run ${s.runId} (${JSON.stringify(under)}), summary says ${s.cluster.admitted} admitted`)
  const ownSum = own.succeeded + own.failed + own.interrupted + s.cluster.running
  if (ownSum !== s.cluster.admitted) out.push(`${name}: own outcomes + running = ${ownSum}, admitted ${s.cluster.admitted}: ${JSON.stringify({ own, cluster: s.cluster })}`)
  return out
}

/**
 * The honesty of a finished submitter against `assay report --run-id` only (not the rows: a row
 * taken by another run is counted failed by the first run, by design): the summary's own
 * succeeded / failed / interrupted and the report's.
 */
const reportHonesty = (cluster: Cluster, name: string, ran: { code: number | null; stdout: string }): { problems: Array<string>; report: unknown } => {
  const s = summaryOf(ran.stdout)
  if (s === undefined) return { problems: [`${name}: no JSON summary (exit ${ran.code})`], report: undefined }
  const r = reportOf(cluster, s.runId)
  const byState = r?.byState ?? r?.pipelines?.byState ?? r?.stats?.pipelines?.byState ?? r?.summary?.pipelines?.byState
  const out: Array<string> = []
  if (byState === undefined) out.push(`${name}: report of ${s.runId} unread: ${JSON.stringify(r).slice(0, 400)}`)
  else {
    for (const st of ["succeeded", "failed", "interrupted"]) {
      const said = Number(s.stats.pipelines.byState[st] ?? 0)
      const rep = Number(byState[st] ?? 0)
      if (said !== rep) out.push(`${name}: summary of run ${s.runId} says ${said} ${st}, its report says ${rep} (rows now: ${JSON.stringify(rowsUnder(cluster, s.runId))})`)
    }
  }
  return { problems: out, report: byState }
}

/** Waits until no provider call has started for `quietMs` (at most `maxMs`). */
const quiet = async (provider: { calls: ReadonlyArray<unknown> }, quietMs: number, maxMs: number) => {
  let last = provider.calls.length
  let since = Date.now()
  const t0 = Date.now()
  while (Date.now() - since < quietMs && Date.now() - t0 < maxMs) {
    await sleep(250)
    if (provider.calls.length !== last) {
      last = provider.calls.length
      since = Date.now()
    }
  }
}

/** Submits again and again (a new run each time) until one exits 0, at most `n` times: each judged by `honesty`. */
const settleBySubmissions = async (cluster: Cluster, rows: number, n: number, args: ReadonlyArray<string>) => {
  const problems: Array<string> = []
  const runs: Array<unknown> = []
  for (let k = 0; k < n; k++) {
    const r = await submitWith(cluster, args).done
    runs.push({ code: r.code, s: summaryOf(r.stdout)?.stats?.pipelines?.byState, c: summaryOf(r.stdout)?.cluster, err: r.code === 0 || r.code === 1 ? undefined : r.stderr.slice(-800) })
    problems.push(...honesty(cluster, `final${k}`, r, rows))
    if (r.code === 0) break
  }
  return { problems, runs }
}

/** The `cluster: runner …` lines a submitter printed. */
const watchLines = (p: CliProcess): Array<string> => p.stderr().split("\n").filter((l) => l.startsWith("cluster: "))

describe("break39: admission, counting, claims and the runner watch under real faults", () => {
  it("D1: Ctrl-C of submitters swept 0.2–3 s in small steps, rows failing (windows with stored rows re-admitted), then clean submissions", async () => {
    const experiment = { rows: 400, resources: [{ id: "r1", capacity: 8 }] }
    // b of every 5th row fails on its first two calls; a of every 7th on its first one
    const fail = (key: string, n: number) => {
      const row = Number(key.split("|")[1])
      if (key.startsWith("b|") && row % 5 === 1 && n <= 2) return 400
      if (key.startsWith("a|") && row % 7 === 3 && n === 1) return 400
      return undefined
    }
    await withScene(pg, "d1", { experiment, latencyMs: 200, fail }, async ({ cluster, provider }) => {
      const problems: Array<string> = []
      const runs: Array<unknown> = []
      const delays: Array<number> = []
      for (let d = 300; d <= 3_300; d += 150) delays.push(d)
      let k = 0
      let silent = 0
      let killed = 0
      for (const d of delays) {
        const sub = submitWith(cluster, ["--max-admitted", String(16 + (k % 3) * 4)])
        await sleep(d)
        sub.child.kill("SIGINT")
        const r = await sub.done
        const s = summaryOf(r.stdout)
        runs.push({ d, code: r.code, admitted: s?.cluster?.admitted, running: s?.cluster?.running, withheld: s?.cluster?.withheld, f: s?.cluster?.followed?.running, own: s?.stats?.pipelines?.byState })
        // killed by the signal before its handler was installed (node's default): nothing of it ran
        if (r.code === null && r.signal === "SIGINT") {
          killed++
          continue
        }
        if (r.code !== 130 && r.code !== 0 && r.code !== 1) problems.push(`submitter at ${d} ms: exit ${r.code}: ${r.stderr.slice(-600)}`)
        // Ctrl-C during start-up (before the submission began): exit 130 and nothing printed; its
        // run row must not exist either (checked below: run rows = summaries printed)
        if (r.code === 130 && s === undefined) {
          silent++
          continue
        }
        if (r.code === 130) problems.push(...interruptedHonesty(cluster, `ctrl-c@${d}`, r))
        k++
      }
      await quiet(provider, 6_000, 120_000)
      const stranded = cluster.sql("SELECT pipeline_id, run_id, n_tasks_done FROM assay_pipelines WHERE state = 'running' ORDER BY 2, 1")
      const states = cluster.sql("SELECT state, count(*) FROM assay_pipelines GROUP BY 1").replace(/\n/g, " ")
      if (stranded !== "") problems.push(`rows running with no call for 6 s after the last Ctrl-C (${states}): ${stranded.replace(/\n/g, "; ").slice(0, 1200)}`)
      const openRuns = cluster.sql("SELECT run_id, status, stop_reason FROM assay_runs WHERE status NOT IN ('completed', 'interrupted', 'failed')")
      if (openRuns !== "") problems.push(`runs left open after their submitter exited: ${openRuns.replace(/\n/g, "; ")}`)
      const runCount = cluster.sql("SELECT count(*) FROM assay_runs").trim()
      runs.push({ runRows: runCount, submitters: delays.length, silent, killed })
      if (Number(runCount) !== delays.length - silent - killed) problems.push(`${runCount} run rows for ${delays.length - silent - killed} submitters that printed a summary`)
      const fin = await settleBySubmissions(cluster, experiment.rows, 4, ["--max-admitted", "24"])
      log({ d1: runs, states, fin: fin.runs })
      problems.push(...fin.problems)
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 8 }, snapshots: [], failedAllowed: 0, settleMs: 30_000 }))
      expect(problems).toEqual([])
    })
  }, 900_000)

  it("D2: three submitters of different runs over the same rows, failures and re-admissions while each follows: summaries vs report --run-id", async () => {
    const experiment = { rows: 90, resources: [{ id: "r1", capacity: 6 }] }
    const fail = (key: string, n: number) => {
      const row = Number(key.split("|")[1])
      if (key.startsWith("b|") && row % 4 === 1 && n <= 2) return 400
      if (key.startsWith("c|") && row % 6 === 2 && n === 1) return 400
      return undefined
    }
    await withScene(pg, "d2", { experiment, latencyMs: 70, fail }, async ({ cluster, provider, tasks }) => {
      const a = submitWith(cluster, ["--max-admitted", "12"])
      await waitCommitted(cluster, Math.floor(tasks / 8))
      const b = submitWith(cluster, ["--max-admitted", "15"])
      await waitCommitted(cluster, Math.floor(tasks / 4))
      const c = submitWith(cluster, ["--max-admitted", "18"])
      const [ra, rb, rc] = await Promise.all([a.done, b.done, c.done])
      const problems: Array<string> = []
      const reports: Array<unknown> = []
      for (const [name, r] of [["a", ra], ["b", rb], ["c", rc]] as const) {
        const h = reportHonesty(cluster, name, r)
        problems.push(...h.problems)
        reports.push({ name, code: r.code, own: summaryOf(r.stdout)?.stats?.pipelines?.byState, cl: summaryOf(r.stdout)?.cluster, report: h.report })
        const s = summaryOf(r.stdout)
        if (s !== undefined) {
          const failed = s.stats.pipelines.byState.failed + s.cluster.followed.failed
          if ((r.code === 1) !== (failed > 0)) problems.push(`${name}: exit ${r.code} with ${failed} failures (own + followed)`)
          const sum = s.stats.pipelines.byState.succeeded + s.stats.pipelines.byState.failed + s.stats.pipelines.byState.interrupted + s.skipped + s.cluster.withheld +
            s.cluster.followed.succeeded + s.cluster.followed.failed + s.cluster.followed.interrupted
          if (sum !== experiment.rows) problems.push(`${name}: counts add up to ${sum} of ${experiment.rows}: ${JSON.stringify({ own: s.stats.pipelines.byState, skipped: s.skipped, cl: s.cluster })}`)
        }
      }
      const fin = await settleBySubmissions(cluster, experiment.rows, 4, ["--max-admitted", "15"])
      log({ d2: reports, fin: fin.runs })
      problems.push(...fin.problems)
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 6 }, snapshots: [], failedAllowed: 0, settleMs: 30_000 }))
      expect(problems).toEqual([])
    })
  }, 900_000)

  it("D3: kill -9 of a runner while pipelines settle (claims released early, short tasks), Ctrl-C and a regrouping re-submission right after, twice; the watch lines", async () => {
    const experiment = { rows: 160, resources: [{ id: "r1", capacity: 8 }] }
    const fail = (key: string, n: number) => key.startsWith("c|") && Number(key.split("|")[1]) % 9 === 4 && n === 1 ? 400 : undefined
    await withScene(pg, "d3", { experiment, latencyMs: 25, fail }, async ({ cluster, provider, tasks }) => {
      const snaps: Array<Snapshot> = []
      const runs: Array<unknown> = []
      const problems: Array<string> = []
      let sub = submitWith(cluster, ["--max-admitted", "10"])
      // watch lines before any fault: none may say a runner left
      await waitCommitted(cluster, Math.floor(tasks / 6))
      const early = watchLines(sub)
      if (early.length > 0) problems.push(`watch lines before any fault: ${early.join(" | ")}`)
      for (let k = 0; k < 2; k++) {
        await waitCommitted(cluster, Math.floor((tasks * (k + 2)) / 6), 180_000)
        const victim = k + 1
        const port = cluster.runners[victim]!.port
        snaps.push(await atFault(cluster, provider, () => cluster.kill9(victim)))
        // give the watch time to see it (two pings)
        await sleep(4_000)
        const lines = watchLines(sub)
        sub.child.kill("SIGINT")
        const r = await sub.done
        runs.push({ code: r.code, s: summaryOf(r.stdout)?.cluster, lines })
        if (r.code === 130) problems.push(...interruptedHonesty(cluster, `ctrl-c ${k}`, r))
        const said = lines.some((l) => l.includes(`:${port} `))
        const claims = cluster.sql("SELECT count(*) FROM assay_cluster_pipeline_claims WHERE expires_at > now()").trim()
        runs.push({ victim, port, said, liveClaims: claims })
        sub = submitWith(cluster, ["--max-admitted", String(k === 0 ? 9 : 12)])
        await sleep(1_500)
        await cluster.restart(victim)
      }
      const last = await sub.done
      const lastLines = watchLines(sub)
      runs.push({ code: last.code, s: summaryOf(last.stdout)?.cluster, lines: lastLines })
      problems.push(...honesty(cluster, "last", last, experiment.rows))
      const fin = await settleBySubmissions(cluster, experiment.rows, 3, ["--max-admitted", "10"])
      log({ d3: runs, fin: fin.runs })
      problems.push(...fin.problems)
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 8 }, snapshots: snaps, failedAllowed: 0, settleMs: 60_000 }))
      expect(problems).toEqual([])
    })
  }, 900_000)
  it("D4: the runner watch against SIGSTOP (short, then past the lock expiry) and a busy-but-alive cluster: does it say so, and only then", async () => {
    const experiment = { rows: 150, resources: [{ id: "r1", capacity: 8 }] }
    await withScene(pg, "d4", { experiment, latencyMs: 120 }, async ({ cluster, provider, tasks }) => {
      const problems: Array<string> = []
      const snaps: Array<Snapshot> = []
      const sub = submitWith(cluster, ["--max-admitted", "24"])
      const timeline: Array<unknown> = []
      const t0 = Date.now()
      const mark = (what: string) => timeline.push({ at: Date.now() - t0, what, lines: watchLines(sub).length })
      await waitCommitted(cluster, Math.floor(tasks / 6))
      const quietLines = watchLines(sub)
      if (quietLines.length > 0) problems.push(`watch lines before any fault: ${quietLines.join(" | ")}`)
      // a short freeze (5 s, under the 10 s lock expiry)
      const port1 = cluster.runners[1]!.port
      snaps.push(await atFault(cluster, provider, () => cluster.pause(1)))
      mark("SIGSTOP r1")
      await sleep(5_000)
      const during1 = watchLines(sub).filter((l) => l.includes(`:${port1} `))
      mark("SIGCONT r1")
      snaps.push(await atFault(cluster, provider, () => cluster.resume(1)))
      // (by design: two pings in a row unanswered, each timing out after 3 s: a 5 s freeze is not told)
      mark(`short freeze told: ${during1.length > 0}`)
      await sleep(4_000)
      mark("after short freeze")
      // a long freeze (past the lock expiry)
      const port2 = cluster.runners[2]!.port
      snaps.push(await atFault(cluster, provider, () => cluster.pause(2)))
      mark("SIGSTOP r2")
      await sleep(16_000)
      const during2 = watchLines(sub).filter((l) => l.includes(`:${port2} `))
      mark("SIGCONT r2")
      snaps.push(await atFault(cluster, provider, () => cluster.resume(2)))
      if (during2.length === 0) problems.push(`runner 2 (:${port2}) frozen 16 s: the watch said nothing (${watchLines(sub).join(" | ")})`)
      const ran = await sub.done
      const all = watchLines(sub)
      log({ d4: { code: ran.code, s: summaryOf(ran.stdout)?.stats, timeline, lines: all } })
      // the runner that never stopped must never be said gone
      const port0 = cluster.runners[0]!.port
      const lies = all.filter((l) => l.includes(`:${port0} `))
      if (lies.length > 0) problems.push(`runner 0 (:${port0}) never stopped, the watch said: ${lies.join(" | ")}`)
      problems.push(...honesty(cluster, "submitter", ran, experiment.rows))
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 8 }, snapshots: snaps, settleMs: 60_000 }))
      expect(problems).toEqual([])
    })
  }, 900_000)
  it("D5: a failed row of run A re-admitted by run B while A still runs (A kept alive by one slow row): A's summary vs report --run-id A", async () => {
    const experiment = { rows: 30, resources: [{ id: "r1", capacity: 6 }] }
    // b of every 3rd row fails on its first call; row 29's c takes 25 s (A follows it that long)
    const fail = (key: string, n: number) => key.startsWith("b|") && Number(key.split("|")[1]) % 3 === 0 && n === 1 ? 400 : undefined
    const latencyOf = (key: string) => key === "c|29" ? 25_000 : undefined
    await withScene(pg, "d5", { experiment, latencyMs: 60, fail, latencyOf }, async ({ cluster, provider }) => {
      const problems: Array<string> = []
      const a = submitWith(cluster, ["--max-admitted", "30"])
      // the 10 failures committed under A, A still running (row 29)
      const t0 = Date.now()
      while (Number(cluster.sql("SELECT count(*) FROM assay_pipelines WHERE state = 'failed'").trim()) < 10 && Date.now() - t0 < 60_000) await sleep(200)
      const b = submitWith(cluster, ["--max-admitted", "30"])
      // B's re-admission of A's failed rows (their rows move to B's run) while A still runs
      const t1 = Date.now()
      while (Number(cluster.sql("SELECT count(DISTINCT run_id) FROM assay_pipelines").trim()) < 2 && Date.now() - t1 < 60_000) await sleep(100)
      const stillA = a.child.exitCode === null
      const rb = await b.done
      const ra = await a.done
      const sa = summaryOf(ra.stdout)
      const sb = summaryOf(rb.stdout)
      const ha = reportHonesty(cluster, "A", ra)
      const hb = reportHonesty(cluster, "B", rb)
      log({ d5: { aRunningWhileBRan: stillA, a: { code: ra.code, own: sa?.stats?.pipelines?.byState, cl: sa?.cluster, report: ha.report }, b: { code: rb.code, own: sb?.stats?.pipelines?.byState, cl: sb?.cluster, report: hb.report } } })
      if (!stillA) problems.push("A ended before B: the scenario did not overlap")
      problems.push(...ha.problems, ...hb.problems)
      expect(problems).toEqual([])
    })
  }, 300_000)
  it("D6: Ctrl-C (single, double, SIGTERM) while re-admissions wait on ending windows (a fails fast, c is slow): rows left as they were, counts honest", async () => {
    const experiment = { rows: 200, resources: [{ id: "r1", capacity: 10 }] }
    // a of every 4th row fails on its first two calls (at once); every c takes 1.5 s: the windows of the failed rows end late
    const fail = (key: string, n: number) => key.startsWith("a|") && Number(key.split("|")[1]) % 4 === 0 && n <= 2 ? 400 : undefined
    const latencyOf = (key: string) => key.startsWith("c|") ? 1_500 : undefined
    await withScene(pg, "d6", { experiment, latencyMs: 60, fail, latencyOf }, async ({ cluster, provider }) => {
      const problems: Array<string> = []
      const runs: Array<unknown> = []
      let silent = 0
      let killed = 0
      let n = 0
      for (let d = 600; d <= 3_600; d += 200) {
        const sub = submitWith(cluster, ["--max-admitted", String(20 + (n % 3) * 5)])
        await sleep(d)
        const how = n % 3 === 0 ? "double" : n % 3 === 1 ? "single" : "term"
        if (how === "term") sub.child.kill("SIGTERM")
        else {
          sub.child.kill("SIGINT")
          if (how === "double") {
            await sleep(40)
            if (sub.child.exitCode === null) sub.child.kill("SIGINT")
          }
        }
        const r = await sub.done
        n++
        const s = summaryOf(r.stdout)
        runs.push({ d, how, code: r.code, signal: r.signal, admitted: s?.cluster?.admitted, running: s?.cluster?.running, withheld: s?.cluster?.withheld, f: s?.cluster?.followed?.running, own: s?.stats?.pipelines?.byState })
        if (r.code === null && r.signal !== null) {
          killed++
          continue
        }
        if (r.code === 130 && s === undefined) {
          silent++
          continue
        }
        if (r.code !== 130 && r.code !== 0 && r.code !== 1) problems.push(`submitter at ${d} ms (${how}): exit ${r.code}: ${r.stderr.slice(-600)}`)
        if (r.code === 130) problems.push(...interruptedHonesty(cluster, `${how}@${d}`, r))
      }
      await quiet(provider, 6_000, 120_000)
      const stranded = cluster.sql("SELECT pipeline_id, run_id, n_tasks_done FROM assay_pipelines WHERE state = 'running' ORDER BY 2, 1")
      const states = cluster.sql("SELECT state, count(*) FROM assay_pipelines GROUP BY 1").replace(/\n/g, " ")
      if (stranded !== "") problems.push(`rows running with no call for 6 s after the last stop (${states}): ${stranded.replace(/\n/g, "; ").slice(0, 1200)}`)
      const runCount = Number(cluster.sql("SELECT count(*) FROM assay_runs").trim())
      if (runCount !== n - silent - killed) problems.push(`${runCount} run rows for ${n - silent - killed} submitters that printed a summary`)
      const fin = await settleBySubmissions(cluster, experiment.rows, 4, ["--max-admitted", "25"])
      log({ d6: runs, states, silent, killed, fin: fin.runs })
      problems.push(...fin.problems)
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 10 }, snapshots: [], failedAllowed: 0, settleMs: 30_000 }))
      expect(problems).toEqual([])
    })
  }, 900_000)

  it("D7: a second Ctrl-C shortly after the first (a user pressing it twice), once the submitter admitted: its summary and the stop line still printed", async () => {
    const experiment = { rows: 1200, resources: [{ id: "r1", capacity: 8 }] }
    await withScene(pg, "d7", { experiment, latencyMs: 400 }, async ({ cluster }) => {
      const problems: Array<string> = []
      const runs: Array<any> = []
      const gaps: Array<number> = []
      // (a sweep 0–450 ms in steps of 15 hit it at 15 ms only: the window is the client layer's teardown)
      for (let k = 0; k < 3; k++) for (let g = 5; g <= 45; g += 5) gaps.push(g)
      for (const gap of gaps) {
        const sub = submitWith(cluster, ["--max-admitted", "16"])
        // admitted: its first progress line is out
        const t0 = Date.now()
        while (!sub.stderr().includes("admitted") && sub.child.exitCode === null && Date.now() - t0 < 60_000) await sleep(20)
        sub.child.kill("SIGINT")
        const first = Date.now()
        await sleep(gap)
        if (sub.child.exitCode === null) sub.child.kill("SIGINT")
        const r = await sub.done
        const exitAfter = Date.now() - first
        const s = summaryOf(r.stdout)
        const stopLine = r.stderr.includes("stopped: no more pipelines are admitted")
        const run = /cluster run (\S+):/.exec(r.stderr)?.[1]
        const rowsOfRun = run === undefined ? undefined : rowsUnder(cluster, run)
        const runRow = run === undefined ? undefined : cluster.sql(`SELECT status, stop_reason FROM assay_runs WHERE run_id = '${run}'`).trim()
        runs.push({ gap, exitAfter, code: r.code, signal: r.signal, summary: s !== undefined, stopLine, run, rowsOfRun, runRow })
        if (s === undefined || !stopLine) {
          problems.push(`second Ctrl-C ${gap} ms after the first: exit ${r.code ?? r.signal}, summary ${s === undefined ? "missing" : "printed"}, stop line ${stopLine ? "printed" : "missing"}; run ${run} (row: ${runRow}) has rows ${JSON.stringify(rowsOfRun)}`)
        }
      }
      log({ d7: runs })
      expect(problems).toEqual([])
    })
  }, 600_000)
  it("D8: the watch's promise for a frozen runner (advisory locks, the default): 'they resume on the other runners within ~N s' vs when they resumed", async () => {
    const experiment = { rows: 120, resources: [{ id: "r1", capacity: 8 }] }
    await withScene(pg, "d8", { experiment, latencyMs: 150 }, async ({ cluster, provider, tasks }) => {
      const problems: Array<string> = []
      const sub = submitWith(cluster, ["--max-admitted", "30"])
      await waitCommitted(cluster, Math.floor(tasks / 6))
      // the victim: the runner of a call in flight now (it has windows of this run)
      const inFlight = provider.calls.filter((c) => c.end === undefined && c.remotePort !== undefined)
      const victim = inFlight.length === 0 ? 1 : runnerOfPort(cluster, inFlight[inFlight.length - 1]!.remotePort!)
      const port = cluster.runners[victim]!.port
      const snaps: Array<Snapshot> = [await atFault(cluster, provider, () => cluster.pause(victim))]
      const frozenAt = Date.now()
      // timestamp the watch lines as they come, for 40 s of freeze
      const seen = new Map<string, number>()
      while (Date.now() - frozenAt < 40_000) {
        for (const l of watchLines(sub)) if (!seen.has(l)) seen.set(l, Date.now() - frozenAt)
        await sleep(200)
      }
      snaps.push(await atFault(cluster, provider, () => cluster.resume(victim)))
      const thawedAt = Date.now() - frozenAt
      const t1 = Date.now()
      while (Date.now() - t1 < 15_000 && sub.child.exitCode === null) {
        for (const l of watchLines(sub)) if (!seen.has(l)) seen.set(l, Date.now() - frozenAt)
        await sleep(200)
      }
      const ran = await sub.done
      for (const l of watchLines(sub)) if (!seen.has(l)) seen.set(l, Date.now() - frozenAt)
      const lines = Array.from(seen.entries()).map(([l, at]) => ({ at, l }))
      log({ d8: { victim, port, thawedAt, lines, code: ran.code } })
      const left = lines.find((x) => x.l.includes(`runner 127.0.0.1:${port} stopped answering`) || x.l.includes(`runner 127.0.0.1:${port} left the cluster`))
      const resumed = lines.find((x) => x.l.includes(`runner 127.0.0.1:${port} had in flight run again`))
      const promised = left === undefined ? undefined : Number((/within ~(\d+) s/.exec(left.l) ?? /within SHARD_LOCK_EXPIRATION, (\d+) s/.exec(left.l))?.[1])
      if (left === undefined) problems.push(`runner :${port} frozen 40 s: never said (${JSON.stringify(lines)})`)
      // two pings in a row unanswered (every 1 s, 3 s timeout each): told within ~8 s, not when its registration lapses
      else if (left.at > 10_000) problems.push(`runner :${port} frozen at +0 ms was told only at +${left.at} ms (${left.l.includes("left the cluster") ? "as 'left the cluster': its registration lapsed, the pings never counted" : "by the pings"})`)
      else if (promised !== undefined && (resumed === undefined || resumed.at > left.at + (promised + 5) * 1000)) {
        problems.push(
          `the watch said at +${left.at} ms that the windows resume on the other runners within ~${promised} s; they ran again ${resumed === undefined ? "never said" : `at +${resumed.at} ms`} (the runner was thawed at +${thawedAt} ms): with advisory locks a stopped runner keeps its shards`
        )
      }
      problems.push(...honesty(cluster, "submitter", ran, experiment.rows))
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 8 }, snapshots: snaps, settleMs: 60_000 }))
      expect(problems).toEqual([])
    })
  }, 600_000)
  it("D8b: the watch's promise for a frozen runner with lock rows (SHARD_LOCK_DISABLE_ADVISORY): 'they resume on the other runners within ~N s' vs when they resumed", async () => {
    const experiment = { rows: 120, resources: [{ id: "r1", capacity: 8 }] }
    await withScene(pg, "d8b", { experiment, latencyMs: 150, timings: { ...fastTimings, disableAdvisory: true } }, async ({ cluster, provider, tasks }) => {
      const problems: Array<string> = []
      const sub = submitWith(cluster, ["--max-admitted", "30"])
      await waitCommitted(cluster, Math.floor(tasks / 6))
      // the victim: the runner of a call in flight now (it has windows of this run)
      const inFlight = provider.calls.filter((c) => c.end === undefined && c.remotePort !== undefined)
      const victim = inFlight.length === 0 ? 1 : runnerOfPort(cluster, inFlight[inFlight.length - 1]!.remotePort!)
      const port = cluster.runners[victim]!.port
      const snaps: Array<Snapshot> = [await atFault(cluster, provider, () => cluster.pause(victim))]
      const frozenAt = Date.now()
      // timestamp the watch lines as they come, for 40 s of freeze
      const seen = new Map<string, number>()
      while (Date.now() - frozenAt < 40_000) {
        for (const l of watchLines(sub)) if (!seen.has(l)) seen.set(l, Date.now() - frozenAt)
        await sleep(200)
      }
      snaps.push(await atFault(cluster, provider, () => cluster.resume(victim)))
      const thawedAt = Date.now() - frozenAt
      const t1 = Date.now()
      while (Date.now() - t1 < 15_000 && sub.child.exitCode === null) {
        for (const l of watchLines(sub)) if (!seen.has(l)) seen.set(l, Date.now() - frozenAt)
        await sleep(200)
      }
      const ran = await sub.done
      for (const l of watchLines(sub)) if (!seen.has(l)) seen.set(l, Date.now() - frozenAt)
      const lines = Array.from(seen.entries()).map(([l, at]) => ({ at, l }))
      log({ d8b: { victim, port, thawedAt, lines, code: ran.code } })
      const left = lines.find((x) => x.l.includes(`runner 127.0.0.1:${port} stopped answering`) || x.l.includes(`runner 127.0.0.1:${port} left the cluster`))
      const resumed = lines.find((x) => x.l.includes(`runner 127.0.0.1:${port} had in flight run again`))
      const promised = left === undefined ? undefined : Number((/within ~(\d+) s/.exec(left.l) ?? /within SHARD_LOCK_EXPIRATION, (\d+) s/.exec(left.l))?.[1])
      if (left === undefined) problems.push(`runner :${port} frozen 40 s: never said (${JSON.stringify(lines)})`)
      // two pings in a row unanswered (every 1 s, 3 s timeout each): told within ~8 s, not when its registration lapses
      else if (left.at > 10_000) problems.push(`runner :${port} frozen at +0 ms was told only at +${left.at} ms (${left.l.includes("left the cluster") ? "as 'left the cluster': its registration lapsed, the pings never counted" : "by the pings"})`)
      else if (promised !== undefined && (resumed === undefined || resumed.at > left.at + (promised + 5) * 1000)) {
        problems.push(
          `the watch said at +${left.at} ms that the windows resume on the other runners within ~${promised} s; they ran again ${resumed === undefined ? "never said" : `at +${resumed.at} ms`} (the runner was thawed at +${thawedAt} ms): with advisory locks a stopped runner keeps its shards`
        )
      }
      problems.push(...honesty(cluster, "submitter", ran, experiment.rows))
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 8 }, snapshots: snaps, settleMs: 60_000 }))
      expect(problems).toEqual([])
    })
  }, 600_000)
  it("D9: churn: Ctrl-C sweep with re-admissions while a 4th runner joins and one runner is killed -9 and restarted mid-sweep", async () => {
    const experiment = { rows: 240, resources: [{ id: "r1", capacity: 10 }] }
    const fail = (key: string, n: number) => {
      const row = Number(key.split("|")[1])
      if (key.startsWith("a|") && row % 5 === 0 && n <= 2) return 400
      if (key.startsWith("c|") && row % 7 === 3 && n === 1) return 400
      return undefined
    }
    const latencyOf = (key: string) => key.startsWith("c|") ? 900 : undefined
    await withScene(pg, "d9", { experiment, latencyMs: 80, fail, latencyOf }, async ({ cluster, provider }) => {
      const problems: Array<string> = []
      const runs: Array<unknown> = []
      const snaps: Array<Snapshot> = []
      let n = 0
      let printed = 0
      for (let d = 900; d <= 3_300; d += 200) {
        const sub = submitWith(cluster, ["--max-admitted", String(20 + (n % 4) * 5)])
        if (n === 3) await cluster.join()
        if (n === 6) snaps.push(await atFault(cluster, provider, () => cluster.kill9(0)))
        if (n === 8) await cluster.restart(0)
        await sleep(d)
        sub.child.kill("SIGINT")
        const r = await sub.done
        n++
        const s = summaryOf(r.stdout)
        runs.push({ d, code: r.code, admitted: s?.cluster?.admitted, running: s?.cluster?.running, f: s?.cluster?.followed?.running, own: s?.stats?.pipelines?.byState, causes: s?.cluster?.causes?.length })
        if (s !== undefined) printed++
        if (r.code === 130 && s !== undefined) problems.push(...interruptedHonesty(cluster, `ctrl-c@${d}`, r))
        else if (r.code !== 130 && r.code !== 0 && r.code !== 1) problems.push(`submitter at ${d} ms: exit ${r.code ?? r.signal}: ${r.stderr.slice(-600)}`)
      }
      await quiet(provider, 8_000, 120_000)
      const stranded = cluster.sql("SELECT pipeline_id, run_id, n_tasks_done FROM assay_pipelines WHERE state = 'running' ORDER BY 2, 1")
      const states = cluster.sql("SELECT state, count(*) FROM assay_pipelines GROUP BY 1").replace(/\n/g, " ")
      if (stranded !== "") problems.push(`rows running with no call for 8 s after the last stop (${states}): ${stranded.replace(/\n/g, "; ").slice(0, 1200)}`)
      const fin = await settleBySubmissions(cluster, experiment.rows, 4, ["--max-admitted", "25"])
      log({ d9: runs, printed, states, fin: fin.runs })
      problems.push(...fin.problems)
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 10 }, snapshots: snaps, failedAllowed: 0, settleMs: 60_000 }))
      expect(problems).toEqual([])
    })
  }, 900_000)

  it("D10: the text summary (not admitted, already done, followed) adds up and the exit codes: --stop-after-failures with a second submitter racing the first", async () => {
    const experiment = { rows: 80, resources: [{ id: "r1", capacity: 6 }] }
    const fail = (key: string) => key.startsWith("b|") && Number(key.split("|")[1]) % 10 === 7 ? 400 : undefined
    await withScene(pg, "d10", { experiment, latencyMs: 120, fail }, async ({ cluster }) => {
      const problems: Array<string> = []
      const { start } = await import("../support/cli.js")
      const { clusterEnv } = await import("./support/cluster.js")
      const text = (args: ReadonlyArray<string>) => {
        const p = start(["run", "-c", cluster.file, "--engine", "cluster", "--database", cluster.url, ...args], { cwd: cluster.dir, env: clusterEnv(fastTimings) })
        ;(cluster.submitters as Array<CliProcess>).push(p)
        return p
      }
      const a = text(["--max-admitted", "12", "--stop-after-failures", "3"])
      await sleep(400)
      const b = text(["--max-admitted", "12"])
      const [ra, rb] = await Promise.all([a.done, b.done])
      const c = await text(["--max-admitted", "12"]).done
      const lines: Array<unknown> = []
      for (const [name, r] of [["a", ra], ["b", rb], ["c", c]] as const) {
        const line = r.stdout.trim().split("\n").pop() ?? ""
        const m = /: (\d+) succeeded, (\d+) failed, (?:(\d+) interrupted[^,]*, )?(\d+) already done(?:, (\d+) still running on the runners)?(?:, (\d+) not admitted[^;(]*\([^)]*\))?(?:; followed (\d+) of run)?/.exec(line)
        lines.push({ name, code: r.code, line })
        if (m === null) {
          problems.push(`${name}: summary line not parsed: ${line}`)
          continue
        }
        const told = [1, 2, 3, 4, 5, 6, 7].reduce((acc, i) => acc + Number(m[i] ?? 0), 0)
        if (told !== experiment.rows) problems.push(`${name}: text summary accounts for ${told} of ${experiment.rows}: ${line}`)
        const run = /cluster run (\S+):/.exec(line)?.[1]
        const own = rowsUnder(cluster, run ?? "")
        if (Number(m[2]) > 0 !== (r.code === 1) && !(Number(m[7] ?? 0) > 0 && r.code === 1)) problems.push(`${name}: exit ${r.code} with ${m[2]} failed of its own: ${line}`)
        lines.push({ name, rowsNow: own })
      }
      log({ d10: lines })
      expect(problems).toEqual([])
    })
  }, 600_000)
  it("D11: the sweep of abandoned claim rows by a runner started again (≤ 1,000 rows expired > 1 h; younger ones and live claims kept) while a run goes on", async () => {
    const experiment = { rows: 60, resources: [{ id: "r1", capacity: 6 }] }
    await withScene(pg, "d11", { experiment, latencyMs: 100 }, async ({ cluster, provider, tasks }) => {
      const problems: Array<string> = []
      cluster.sql(`INSERT INTO assay_cluster_pipeline_claims (pipeline_key, token, expires_at)
        SELECT 'old-' || g, 'dead-token-' || (g % 7), now() - interval '2 hours' FROM generate_series(1, 2500) g`)
      cluster.sql(`INSERT INTO assay_cluster_pipeline_claims (pipeline_key, token, expires_at)
        SELECT 'young-' || g, 'dead-token-y', now() - interval '30 minutes' FROM generate_series(1, 5) g`)
      const sub = submitWith(cluster, ["--max-admitted", "12"])
      await waitCommitted(cluster, Math.floor(tasks / 4))
      const snap = await atFault(cluster, provider, () => cluster.kill9(0))
      await cluster.restart(0)
      const t0 = Date.now()
      const old = () => Number(cluster.sql("SELECT count(*) FROM assay_cluster_pipeline_claims WHERE pipeline_key LIKE 'old-%'").trim())
      while (old() > 1_500 && Date.now() - t0 < 60_000) await sleep(250)
      await sleep(3_000)
      const left = old()
      const young = Number(cluster.sql("SELECT count(*) FROM assay_cluster_pipeline_claims WHERE pipeline_key LIKE 'young-%'").trim())
      const ran = await sub.done
      log({ d11: { oldLeft: left, young, code: ran.code } })
      if (left !== 1_500) problems.push(`one sweep by the restarted runner: ${2_500 - left} old rows deleted (expected 1,000)`)
      if (young !== 5) problems.push(`rows expired 30 min ago swept: ${5 - young} of 5`)
      problems.push(...honesty(cluster, "submitter", ran, experiment.rows))
      problems.push(...await verify(cluster, provider, { rows: experiment.rows, capacity: { r1: 6 }, snapshots: [snap], settleMs: 30_000 }))
      expect(problems).toEqual([])
    })
  }, 600_000)
})

/** The index of the runner whose process has a TCP socket on local port `port` (`ss`; as break38's). */
const runnerOfPort = (cluster: Cluster, port: number): number => {
  const out = spawnSync("ss", ["-tnpH", `( sport = :${port} )`], { encoding: "utf8" }).stdout
  const pids = Array.from(out.matchAll(/pid=(\d+)/g)).map((m) => Number(m[1]))
  const ppid = (pid: number) => Number(fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[1])
  for (const r of cluster.runners) {
    for (const pid of pids) if (r.proc.child.pid === pid || r.proc.child.pid === ppid(pid)) return r.index
  }
  throw new Error(`no runner has local port ${port}: ${out}`)
}
