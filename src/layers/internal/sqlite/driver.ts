/**
 * The SQLite driver (`Store.StoreDriver`) built from an opened file: `SqliteStore.makeDriver`
 * and the suite store (which also needs the opened file itself for its catalog and its merged
 * reads) share it.
 *
 * @since 0.5.0
 */
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Option, type Scope } from "effect"
import type { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import type { RunId } from "../../../domain/Ids.js"
import type { RunRecord } from "../../../domain/Records.js"
import { ArtifactBackend, type ArtifactBackendService } from "../../../services/ArtifactBackend.js"
import type { StoreDriver } from "../../../services/Store.js"
import type { SqliteStoreOptions } from "../../SqliteStore.js"
import { makeOn as makeCallCache, registerStoreCache } from "./callCache.js"
import * as open from "./open.js"
import { makeReads } from "./reads.js"
import { jsonOrNull, makeWriter } from "./writer.js"

/**
 * Opens the file (`open.openSqlite`) in the current scope and builds its driver, using the
 * `ArtifactBackend` in context; returns both. Fails as `SqliteStore.makeDriver`.
 *
 * @since 0.5.0
 * @category constructors
 */
export const makeDriverWithEnv = (
  options: SqliteStoreOptions
): Effect.Effect<{ readonly driver: StoreDriver; readonly env: open.SqliteEnv }, StoreUnavailable | ConfigError, ArtifactBackend | Scope.Scope> =>
  Effect.gen(function*() {
    const backend: ArtifactBackendService = yield* ArtifactBackend
    const env = yield* open.openSqlite(options)
    const { readOnly, roError, tx } = env
    const writer = yield* makeWriter(env)
    const reads = makeReads(env, backend)
    const getRun = reads.getRun
    // the store's own call cache: its `call_cache` table through the writer connection (each
    // statement synchronous, between the writer's transactions); a read-only open has none
    const callCache = env.db === undefined ? undefined : makeCallCache(env.db, env.path)
    if (callCache !== undefined) yield* registerStoreCache(env.path, callCache)
    const { featureLevel, lookupPipelines, ...writes } = writer
    const driver: StoreDriver = {
      ...reads,
      ...writes,
      // the admission's lookups on the writer's connection (its page cache is warm), else the read side's
      getPipelines: lookupPipelines ?? reads.getPipelines,
      kind: "sqlite",
      get featureLevel() {
        // a read-only open keeps the level it found
        return readOnly ? env.featureLevel : featureLevel()
      },
      readOnlyError: readOnly ? roError : undefined,
      // a writer holds the file's OS lock: no other process writes while it is open
      exclusiveWriter: !readOnly,
      callCache,
      // one read transaction on the reading connection (never the writer's): a WAL snapshot
      consistentReads: (reads) =>
        env.sql.withTransaction(reads).pipe(
          Effect.mapError((e) => (e instanceof SqlError ? env.fromSql(e) : e) as Effect.Effect.Error<typeof reads> | StoreUnavailable)
        ),
      openRun: (run) =>
        Effect.flatMap(
          tx((d) => {
            d.prepare(
              "INSERT INTO runs (run_id, label, status, config, started_at, heartbeat_at, ended_at, stop_reason, notes, meta) VALUES (?, ?, 'running', ?, ?, ?, NULL, NULL, ?, ?)"
            ).run(run.runId, run.label ?? null, jsonOrNull(run.config ?? null), run.startedAt, run.startedAt, run.notes ?? null, JSON.stringify(run.meta ?? {}))
            d.prepare("UPDATE store_writer SET run_id = ? WHERE id = 1").run(run.runId)
          }),
          () => Effect.map(getRun(run.runId), (o) => Option.getOrThrow(o) as RunRecord)
        ),
      heartbeat: (runId, nowMs) =>
        tx((d) => void d.prepare("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?").run(nowMs, runId)),
      finishRun: (runId, finish) =>
        tx((d) =>
          void d.prepare("UPDATE runs SET status = ?, ended_at = ?, stop_reason = ? WHERE run_id = ?").run(
            finish.status,
            finish.endedAt,
            finish.stopReason ?? null,
            runId
          )
        ),
      interruptStale: (staleAfterMs, nowMs) =>
        Effect.flatMap(
          tx((d) => {
            const ids = (d.prepare("SELECT run_id FROM runs WHERE status = 'running' AND heartbeat_at < ?").all(
              nowMs - staleAfterMs
            ) as Array<{ run_id: RunId }>).map((r) => r.run_id)
            const upd = d.prepare("UPDATE runs SET status = 'interrupted', ended_at = ?, stop_reason = 'stale' WHERE run_id = ?")
            for (const id of ids) upd.run(nowMs, id)
            return ids
          }),
          (ids) => Effect.map(Effect.forEach(ids, getRun), (rs) => rs.flatMap((o) => Option.toArray(o)))
        ),

      reportMetric: (m) =>
        tx((d) =>
          void d.prepare(
            "INSERT INTO metrics (run_id, scope, name, value, label, display, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run_id, scope, name) DO UPDATE SET value = excluded.value, label = excluded.label, display = excluded.display, updated_at = excluded.updated_at"
          ).run(
            m.runId,
            m.pipelineId ?? "",
            m.name,
            jsonOrNull(m.value),
            m.label,
            m.display,
            m.updatedAt
          )
        ),
      putResource: (r) =>
        tx((d) =>
          void d.prepare(
            "INSERT INTO resources (pool, resource_id, kind, spec, health, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(pool, resource_id) DO UPDATE SET kind = excluded.kind, spec = excluded.spec, health = excluded.health, updated_at = excluded.updated_at"
          ).run(r.pool, r.resourceId, r.kind, jsonOrNull(r.spec), jsonOrNull(r.health), r.updatedAt)
        ),
    }
    return { driver, env }
  })
