/**
 * break38's helpers over the chaos harness: submitters with any flags and their JSON summary,
 * a checker that collects every broken guarantee (rather than stopping at the first), and the
 * honesty checks of a submitter's summary and of `assay report`.
 */
import { spawnSync } from "node:child_process"
import { bin, type CliProcess, root, sleep, start } from "../../support/cli.js"
import { type Cluster, clusterEnv, fastTimings, TASKS } from "./cluster.js"
import { heldSlots, rowsOf, type Snapshot } from "./invariants.js"
import type { FakeProvider } from "./provider.js"

/** Starts `assay run --engine cluster --summary json` with `args` (registered for the cluster's shutdown). */
export const submitWith = (cluster: Cluster, args: ReadonlyArray<string>): CliProcess => {
  const p = start(["run", "-c", cluster.file, "--engine", "cluster", "--database", cluster.url, "--summary", "json", ...args], {
    cwd: cluster.dir,
    env: clusterEnv(fastTimings)
  })
  ;(cluster.submitters as Array<CliProcess>).push(p)
  return p
}

/** The JSON summary a submitter printed (its last JSON line on stdout), if any. */
export const summaryOf = (stdout: string): any => {
  const lines = stdout.split("\n").filter((l) => l.startsWith("{"))
  return lines.length === 0 ? undefined : JSON.parse(lines[lines.length - 1]!)
}

/** `assay report URL --run-id R --json`. */
export const reportOf = (cluster: Cluster, runId: string): any => {
  const r = spawnSync(bin, ["report", cluster.url, "--run-id", runId, "--json"], {
    cwd: root,
    env: { ...process.env, ...clusterEnv(fastTimings) },
    encoding: "utf8",
    timeout: 120_000
  })
  try {
    return JSON.parse(r.stdout)
  } catch {
    return { unparsed: r.stdout.slice(0, 2000), stderr: r.stderr.slice(0, 2000), code: r.status }
  }
}

/** What {@link verify} checks. */
export interface Checks {
  readonly rows: number
  readonly capacity: Readonly<Record<string, number>>
  readonly snapshots: ReadonlyArray<Snapshot>
  /** Rows allowed to end failed. */
  readonly failedAllowed?: number | undefined
  /** Wait for terminal rows at most this long before judging (ms; default 0). */
  readonly settleMs?: number | undefined
}

/**
 * Every broken guarantee, as text (empty: all held): terminal rows, one active output and one
 * succeeded task row per (pipeline, seq), no 200-answered call after a fault for a key committed
 * before it, every key answered 200 twice within some fault's allowance, peak ≤ capacity,
 * slots freed within a lease TTL, no live window claim left.
 */
export const verify = async (cluster: Cluster, provider: FakeProvider, c: Checks): Promise<Array<string>> => {
  const out: Array<string> = []
  const t0 = Date.now()
  const nonTerminal = () => Number(cluster.sql("SELECT count(*) FROM assay_pipelines WHERE state NOT IN ('succeeded','failed')").trim())
  while (nonTerminal() > 0 && Date.now() - t0 < (c.settleMs ?? 0)) await sleep(500)
  const states = cluster.sql("SELECT state, count(*) FROM assay_pipelines GROUP BY 1 ORDER BY 1").replace(/\n/g, " ")
  const total = Number(cluster.sql("SELECT count(*) FROM assay_pipelines").trim())
  if (total !== c.rows) out.push(`I1 rows: ${total} of ${c.rows} (${states})`)
  if (nonTerminal() > 0) {
    out.push(`I1 not terminal: ${states}; ${cluster.sql("SELECT pipeline_id, state, run_id, n_tasks_done FROM assay_pipelines WHERE state NOT IN ('succeeded','failed') ORDER BY 1 LIMIT 10").replace(/\n/g, "; ")}`)
  }
  const failed = Number(cluster.sql("SELECT count(*) FROM assay_pipelines WHERE state = 'failed'").trim())
  if (failed > (c.failedAllowed ?? 0)) out.push(`I1 failed rows: ${failed} > ${c.failedAllowed ?? 0} (${states})`)
  const badSucceeded = cluster.sql(
    `SELECT p.pipeline_id, p.n_tasks_done, (SELECT count(*) FROM assay_artifacts a WHERE a.pipeline_id = p.pipeline_id AND a.active = 1 AND a.seq >= 0) FROM assay_pipelines p WHERE p.state = 'succeeded' AND (p.n_tasks_done <> ${TASKS.length} OR (SELECT count(*) FROM assay_artifacts a WHERE a.pipeline_id = p.pipeline_id AND a.active = 1 AND a.seq >= 0) <> ${TASKS.length})`
  )
  if (badSucceeded !== "") out.push(`I1 succeeded rows without every output: ${badSucceeded.replace(/\n/g, "; ")}`)
  const dupArtifacts = cluster.sql("SELECT pipeline_id, seq, count(*) FROM assay_artifacts WHERE active = 1 AND seq >= 0 GROUP BY 1, 2 HAVING count(*) > 1")
  if (dupArtifacts !== "") out.push(`I2 duplicate active outputs: ${dupArtifacts.replace(/\n/g, "; ")}`)
  const allArtifacts = cluster.sql("SELECT pipeline_id, seq, count(*) FROM assay_artifacts WHERE seq >= 0 GROUP BY 1, 2 HAVING count(*) > 1")
  if (allArtifacts !== "") out.push(`I2 several outputs (active or not) per task seq: ${allArtifacts.replace(/\n/g, "; ").slice(0, 600)}`)
  const dupTasks = cluster.sql("SELECT pipeline_id, seq, count(*) FROM assay_tasks WHERE active = 1 AND state = 'succeeded' GROUP BY 1, 2 HAVING count(*) > 1")
  if (dupTasks !== "") out.push(`I2 duplicate succeeded task rows: ${dupTasks.replace(/\n/g, "; ")}`)
  const served = provider.calls.filter((x) => x.status === 200)
  for (const s of c.snapshots) {
    const late = served.filter((x) => x.start > s.faultAt && s.committed.has(x.key)).map((x) => `${x.key}@+${x.start - s.faultAt}ms`)
    if (late.length > 0) out.push(`I2 committed before the fault at ${s.faultAt}, called after: ${late.join(", ")}`)
  }
  const perKey = new Map<string, number>()
  for (const x of served) perKey.set(x.key, (perKey.get(x.key) ?? 0) + 1)
  const allowance = new Set<string>()
  for (const s of c.snapshots) for (const k of s.allowance) allowance.add(k)
  const outside = Array.from(perKey.entries()).filter(([k, n]) => n > 1 && !allowance.has(k))
  if (outside.length > 0) {
    const rows = rowsOf(cluster)
    const byRow = new Map(Array.from(rows.entries()).map(([id, row]) => [row, id]))
    out.push(`I2 keys served more than once outside every fault's allowance: ${
      outside.map(([k, n]) =>
        `${k}×${n} [${byRow.get(k.split("|")[1]!)}] (${provider.calls.filter((x) => x.key === k).map((x) => `${x.status}@${x.start}`).join(", ")})`
      ).join("; ")
    }`)
  }
  for (const [id, cap] of Object.entries(c.capacity)) {
    if (provider.peak(id) > cap) out.push(`I3 peak in flight on ${id}: ${provider.peak(id)} > ${cap}`)
  }
  const t1 = Date.now()
  while (heldSlots(cluster) > 0 && Date.now() - t1 < 35_000) await sleep(250)
  if (heldSlots(cluster) > 0) out.push(`I5 slots still held ${Date.now() - t1} ms after the run: ${heldSlots(cluster)}`)
  return out
}

/**
 * The honesty of a finished submitter: its summary's counts add up to the rows it read, its own
 * succeeded / failed match the rows filed under its run, its exit code says its failures
 * (own or followed), and `assay report` of its run says what the rows say.
 */
export const honesty = (cluster: Cluster, name: string, ran: { code: number | null; stdout: string; stderr: string }, rows: number): Array<string> => {
  const out: Array<string> = []
  const s = summaryOf(ran.stdout)
  if (s === undefined) return [`${name}: no JSON summary (exit ${ran.code}); stderr: ${ran.stderr.slice(-800)}`]
  const own = s.stats.pipelines.byState
  const f = s.cluster.followed
  const sum = own.succeeded + own.failed + own.interrupted + s.skipped + s.cluster.withheld + f.succeeded + f.failed + f.interrupted +
    (s.cluster.running ?? 0) + (f.running ?? 0)
  if (ran.code !== 130 && sum !== rows) out.push(`${name}: counts add up to ${sum}, not ${rows}: ${JSON.stringify({ own, skipped: s.skipped, cluster: s.cluster })}`)
  const db = (state: string) => Number(cluster.sql(`SELECT count(*) FROM assay_pipelines WHERE run_id = '${s.runId}' AND state = '${state}'`).trim())
  if (ran.code !== 130) {
    if (db("succeeded") !== own.succeeded) out.push(`${name}: says ${own.succeeded} succeeded of its own, rows of run ${s.runId}: ${db("succeeded")}`)
    if (db("failed") !== own.failed) out.push(`${name}: says ${own.failed} failed of its own, rows of run ${s.runId}: ${db("failed")}`)
    const shouldFail = own.failed > 0 || f.failed > 0
    if ((ran.code === 1) !== shouldFail) out.push(`${name}: exit ${ran.code} with ${own.failed} failed and ${f.failed} followed failed`)
  }
  const r = reportOf(cluster, s.runId)
  const text = JSON.stringify(r)
  const byState = r?.byState ?? r?.pipelines?.byState ?? r?.stats?.pipelines?.byState ?? r?.summary?.pipelines?.byState
  if (byState === undefined) out.push(`${name}: report of ${s.runId} unread: ${text.slice(0, 400)}`)
  else {
    for (const st of ["succeeded", "failed"]) {
      if (Number(byState[st] ?? 0) !== db(st)) out.push(`${name}: report of ${s.runId} says ${st} ${byState[st]}, rows say ${db(st)}`)
    }
  }
  return out
}
