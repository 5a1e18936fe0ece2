/**
 * The in-flight marker of the cluster engine: which task of each pipeline an executor started
 * last, so that an execution cut short (its runner killed, lost, or its shard moved away) is
 * recorded as an abandoned attempt when the engine runs the activity again elsewhere, as the
 * embedded engine's `resume` records one for a pipeline its dead run left `running`.
 *
 * One row per pipeline in `assay_cluster_inflight` (next to the cluster's own tables, created
 * by `assay migrate`), overwritten when a task's activity starts to run attempts: one write
 * per task, and the write answers with the marker it replaced. A marker naming the same task
 * under the same run means an earlier execution of that task started and never committed
 * (the store's checkpoint, read first, says the task is not done). Nothing clears a marker: a
 * task whose checkpoint is committed is never run again, so its marker is never read.
 *
 * PostgreSQL only (the cluster's storage); on another dialect no marker is kept.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Option } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"

/** The marker table (one row per pipeline). */
export const TABLE = "assay_cluster_inflight"

/** Creates the marker table when missing (idempotent; `assay migrate` runs it). */
export const createTable = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql.unsafe(`CREATE TABLE IF NOT EXISTS ${TABLE} (
    pipeline_id text PRIMARY KEY,
    seq integer NOT NULL,
    run_id text NOT NULL,
    started_at bigint NOT NULL
  )`))

/**
 * Fails with a {@link StoreUnavailable} naming `assay migrate` when the client is PostgreSQL and
 * the marker table is missing (a library user who built the engine on a database that was never
 * migrated): without the check, every task start would fail its marker write and the engine would
 * retry it for ever. Succeeds at once on another dialect (no marker is kept there).
 */
export const requireTable = (sql: SqlClient.SqlClient): Effect.Effect<void, StoreUnavailable> =>
  sql.onDialectOrElse({
    pg: () =>
      sql<{ present: boolean }>`SELECT to_regclass(${TABLE}) IS NOT NULL AS present`.pipe(
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot check the in-flight marker table: ${e.message}`, cause: e })),
        Effect.flatMap((rows) =>
          rows[0]?.present === true
            ? Effect.void
            : Effect.fail(
              new StoreUnavailable({
                message: `the cluster database has no \`${TABLE}\` table: run \`assay migrate --database URL\` once before ` +
                  "starting runners (or create it with the engine's `InFlight.createTable`)"
              })
            )
        )
      ),
    orElse: () => Effect.void
  })

/** A marker as it was before an execution replaced it. */
export interface Marker {
  readonly seq: number
  readonly runId: string
  /** Epoch ms, by the clock of the executor that wrote it. */
  readonly startedAt: number
}

/**
 * Writes the in-flight marker of task `seq` of a pipeline; answers with the marker it
 * replaced, if any.
 */
export interface InFlight {
  readonly mark: (
    pipelineId: string,
    seq: number,
    runId: string,
    startedAt: number
  ) => Effect.Effect<Option.Option<Marker>, StoreUnavailable>
}

/** The marker over a Postgres client (`undefined` on another dialect). */
export const make = (sql: SqlClient.SqlClient): InFlight | undefined =>
  sql.onDialectOrElse({
    pg: (): InFlight | undefined => ({
      mark: (pipelineId, seq, runId, startedAt) =>
        Effect.map(
          sql<{ seq: number; run_id: string; started_at: string | number }>`WITH prev AS (
              SELECT seq, run_id, started_at FROM ${sql(TABLE)} WHERE pipeline_id = ${pipelineId}
            ), up AS (
              INSERT INTO ${sql(TABLE)} (pipeline_id, seq, run_id, started_at) VALUES (${pipelineId}, ${seq}, ${runId}, ${startedAt})
              ON CONFLICT (pipeline_id) DO UPDATE SET seq = EXCLUDED.seq, run_id = EXCLUDED.run_id, started_at = EXCLUDED.started_at
            )
            SELECT seq, run_id, started_at FROM prev`,
          (rows) =>
            rows[0] === undefined
              ? Option.none<Marker>()
              : Option.some({ seq: Number(rows[0].seq), runId: rows[0].run_id, startedAt: Number(rows[0].started_at) })
        ).pipe(
          Effect.mapError((e) => new StoreUnavailable({ message: `cannot write the in-flight marker: ${e.message}`, cause: e }))
        )
    }),
    orElse: () => undefined
  })
