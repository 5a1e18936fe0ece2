/**
 * One chaos scenario's frame: a fresh provider and cluster (3 `assay runner` processes on a
 * fresh database), the submitter, and the teardown, so that a scenario file only says which
 * fault happens when.
 */
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
  },
  body: (scene: Scene) => Promise<A>
): Promise<A> => {
  const provider = await startProvider({ latencyMs: options.latencyMs ?? 150 })
  const experiment = options.experiment ?? defaultExperiment
  let cluster: Cluster | undefined
  try {
    cluster = await startCluster({ pg, db, provider, experiment, timings: options.timings ?? fastTimings })
    return await body({ cluster, provider, experiment, tasks: experiment.rows * 3 })
  } catch (e) {
    if (cluster !== undefined) {
      for (const r of cluster.runners) console.error(`--- runner ${r.index} (${db}) ---\n${r.log().slice(-3000)}`)
      for (const s of cluster.submitters) console.error(`--- submitter (${db}) ---\n${s.stderr().slice(-1500)}`)
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
    await cluster?.shutdown()
    await provider.close()
  }
}
