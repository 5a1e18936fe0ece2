/**
 * One chaos scenario's frame: a fresh provider and cluster (3 `assay runner` processes on a
 * fresh database), the submitter, and the teardown, so that a scenario file only says which
 * fault happens when.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import type { PgServer } from "../../support/pgServer.js"
import { type Cluster, type ClusterTimings, type ExperimentDecl, fastTimings, startCluster } from "./cluster.js"
import { committedCount } from "./invariants.js"
import { type FakeProvider, startProvider } from "./provider.js"

/** What a scenario body gets. */
export interface Scene {
  readonly cluster: Cluster
  readonly provider: FakeProvider
  readonly experiment: ExperimentDecl
  /** rows × tasks: the checkpoints of a complete run. */
  readonly tasks: number
}

/** The default load: 60 pipelines × 3 tasks of 150 ms on one resource of capacity 6. */
export const defaultExperiment: ExperimentDecl = { rows: 60, resources: [{ id: "r1", capacity: 6 }] }

/**
 * Runs `body` in a fresh scene on database `db` of `pg`; always stops the processes, the
 * provider, and (on failure) prints each runner's stderr tail.
 */
export const withScene = async <A>(
  pg: PgServer,
  db: string,
  options: {
    readonly experiment?: ExperimentDecl | undefined
    readonly timings?: ClusterTimings | undefined
    readonly latencyMs?: number | undefined
    /** The provider's failures (see `startProvider`'s `fail`). */
    readonly fail?: ((key: string, n: number) => number | undefined) | undefined
    readonly runners?: number | undefined
    readonly latencyOf?: ((key: string, n: number) => number | undefined) | undefined
  },
  body: (scene: Scene) => Promise<A>
): Promise<A> => {
  const provider = await startProvider({ latencyMs: options.latencyMs ?? 150, fail: options.fail, latencyOf: options.latencyOf })
  const experiment = options.experiment ?? defaultExperiment
  let cluster: Cluster | undefined
  try {
    cluster = await startCluster({ pg, db, provider, experiment, timings: options.timings ?? fastTimings, ...(options.runners === undefined ? {} : { runners: options.runners }) })
    return await body({ cluster, provider, experiment, tasks: experiment.rows * 3 })
  } catch (e) {
    if (cluster !== undefined) {
      // each process's stderr whole (a cut one hid the cause of pg17ad's options-mode failures),
      // the tail of its stdout (the cluster's own logs)
      for (const r of cluster.runners) {
        console.error(`--- runner ${r.index} (${db}) stderr ---\n${r.log()}\n--- runner ${r.index} stdout (tail) ---\n${r.proc.stdout().slice(-4000)}`)
      }
      for (const s of cluster.submitters) console.error(`--- submitter (${db}) stderr ---\n${s.stderr()}`)
      try {
        console.error(`checkpoints: ${committedCount(cluster)}`)
        console.error(`pipelines: ${cluster.sql("SELECT state, count(*) FROM assay_pipelines GROUP BY 1").replace(/\n/g, " ")}`)
        console.error(`unprocessed cluster messages: ${cluster.sql("SELECT count(*) FROM cluster_messages WHERE NOT processed").trim()}`)
      } catch {
        // the database may be down
      }
    }
    throw e
  } finally {
    if (cluster !== undefined) dumpLogs(db, cluster, provider)
    await cluster?.shutdown()
    await provider.close()
  }
}

/**
 * With `ASSAY_CHAOS_LOGS=DIR`, writes every process's stdout and stderr (the cluster's own logs
 * go to stdout), the provider's call log and the pipelines' states into `DIR/<db>-<time>/`:
 * what a failed scenario is diagnosed from.
 */
const dumpLogs = (db: string, cluster: Cluster, provider: FakeProvider): void => {
  const root = process.env.ASSAY_CHAOS_LOGS
  if (root === undefined || root === "") return
  const dir = path.join(root, `${db}-${new Date().toISOString().replace(/[:.]/g, "")}`)
  fs.mkdirSync(dir, { recursive: true })
  for (const r of cluster.runners) {
    fs.writeFileSync(path.join(dir, `runner${r.index}.stderr`), r.log())
    fs.writeFileSync(path.join(dir, `runner${r.index}.stdout`), r.proc.stdout())
  }
  cluster.submitters.forEach((s, i) => {
    fs.writeFileSync(path.join(dir, `submitter${i}.stdout`), s.stdout())
    fs.writeFileSync(path.join(dir, `submitter${i}.stderr`), s.stderr())
  })
  fs.writeFileSync(path.join(dir, "calls.json"), JSON.stringify(provider.calls))
  try {
    fs.writeFileSync(
      path.join(dir, "pipelines.txt"),
      cluster.sql("SELECT pipeline_id, state, n_tasks_done, failed_task, error_type, error_class, error_message FROM assay_pipelines ORDER BY 1")
    )
    // every attempt of a failed pipeline: what a failed run is diagnosed from (C9, 2026-12-03)
    fs.writeFileSync(
      path.join(dir, "failed-attempts.txt"),
      cluster.sql(
        "SELECT a.pipeline_id, a.task_name, a.attempt_no, a.outcome, a.error_class, a.error_type, a.error_message, a.decision, a.lease_ids FROM assay_attempts a JOIN assay_pipelines p USING (pipeline_id) WHERE p.state = 'failed' ORDER BY a.attempt_id"
      )
    )
  } catch {
    // the database may be down
  }
}
