/**
 * The study catalog on SQLite: the tables of migration 0009 (`studies`,
 * `study_protocol_versions`, `study_trials`, `study_stop_requests`) on the catalog database of
 * a suite root (see `services/StudyCatalog.ts` for the service and its rules). Writes are one
 * synchronous transaction each on the store's write connection (the freeze reads and writes in
 * the same transaction); reads go through its read client.
 *
 * {@link requestStopInFile} writes a stop request from another process (`assay study stop`):
 * the root's writer lock belongs to the running study, so the request is one short `INSERT`
 * through a connection of its own, waiting up to 5 s for SQLite's write lock (the writer's
 * transactions are short), never touching the writer's lock file.
 *
 * @since 0.6.0
 */
import Database from "better-sqlite3"
import { Effect, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import { type ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import type { Json } from "../../../domain/Json.js"
import {
  decideFreeze,
  type FreezeInput,
  type Frozen,
  type ProtocolVersionRecord,
  stopOfRequest,
  type StopRequest,
  type Settled,
  type StudyCatalogService,
  type StudyRecord,
  type StudyRecordStatus,
  type TrialLedger,
  type TrialRecord,
  type TrialStatus,
  type TrialUsage,
  ZERO_USAGE
} from "../../../services/StudyCatalog.js"
import { describeSqlError, type SqliteEnv } from "../sqlite/open.js"

type Row = Record<string, unknown>

const query = (env: SqliteEnv, text: string, params: ReadonlyArray<unknown> = []) =>
  env.sql.unsafe<Row>(text, params as Array<unknown>).pipe(
    Effect.mapError((e) => new StoreUnavailable({ message: `store ${env.path}: ${describeSqlError(e.cause)}`, path: env.path, cause: e }))
  )

const json = (u: unknown): Json | null => {
  if (typeof u !== "string") return null
  try {
    return JSON.parse(u) as Json
  } catch {
    return null
  }
}

const stringRecord = (u: unknown): Readonly<Record<string, string>> => {
  const v = json(u)
  return typeof v === "object" && v !== null && !Array.isArray(v)
    ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, typeof x === "string" ? x : JSON.stringify(x)]))
    : {}
}

const numberRecord = (u: unknown): Readonly<Record<string, number>> | null => {
  const v = json(u)
  return typeof v === "object" && v !== null && !Array.isArray(v)
    ? Object.fromEntries(Object.entries(v).flatMap(([k, x]) => (typeof x === "number" ? [[k, x]] : [])))
    : null
}

const numOrNull = (u: unknown): number | null => (u === null || u === undefined ? null : Number(u))

const toStudy = (r: Row): StudyRecord => ({
  studyId: String(r.study_id),
  question: String(r.question),
  type: String(r.type),
  createdAt: Number(r.created_at),
  currentVersion: Number(r.current_version),
  status: String(r.status) as StudyRecordStatus,
  stopReason: r.stop_reason === null || r.stop_reason === undefined ? null : String(r.stop_reason),
  stopCondition: json(r.stop_condition_json),
  stoppedAt: numOrNull(r.stopped_at),
  updatedAt: Number(r.updated_at)
})

const toVersion = (r: Row): ProtocolVersionRecord => ({
  studyId: String(r.study_id),
  version: Number(r.version),
  protocolDigest: String(r.protocol_digest),
  protocolParts: stringRecord(r.protocol_parts_json),
  protocol: json(r.protocol_json),
  createdAt: Number(r.created_at)
})

const toTrial = (r: Row): TrialRecord => ({
  trialId: String(r.trial_id),
  studyId: String(r.study_id),
  version: Number(r.version),
  variantId: String(r.variant_id),
  variantKey: String(r.variant_key),
  variant: json(r.variant_json),
  repeat: Number(r.repeat),
  seedable: Number(r.seedable) === 1,
  status: String(r.status) as TrialStatus,
  reason: r.reason === null || r.reason === undefined ? null : String(r.reason),
  usage: {
    calls: Number(r.calls),
    tokens: Number(r.tokens),
    costUsd: Number(r.cost_usd),
    timeMs: Number(r.time_ms),
    ...(Number(r.unpriced ?? 0) > 0 ? { unpriced: Number(r.unpriced) } : {})
  },
  metrics: numberRecord(r.metrics_json),
  startedAt: numOrNull(r.started_at),
  endedAt: numOrNull(r.ended_at),
  updatedAt: Number(r.updated_at),
  // schema version 15; a root not yet migrated has no such column
  ...(typeof r.settled_json === "string" ? { settled: settledOf(r.settled_json) } : {})
})

/** `study_trials.settled_json` read back: only the fields of the right shape. */
const settledOf = (text: string): Settled => {
  const j = json(text) as Record<string, unknown> | null
  if (j === null || typeof j !== "object") return {}
  const over = j["metricsOver"] as Record<string, unknown> | undefined
  const judge = j["judgeCostUsd"]
  return {
    ...(over !== undefined && over !== null && typeof over["succeeded"] === "number"
      ? { metricsOver: { succeeded: over["succeeded"], planned: typeof over["planned"] === "number" ? over["planned"] : null } }
      : {}),
    ...(typeof judge === "number" && Number.isFinite(judge) ? { judgeCostUsd: judge } : {})
  }
}

const toRequest = (r: Row): StopRequest => ({
  id: Number(r.id),
  studyId: String(r.study_id),
  at: Number(r.at),
  running: r.running === "cancel" ? "cancel" : "drain",
  by: String(r.by),
  handledAt: numOrNull(r.handled_at)
})

/**
 * The study catalog of an open store (see the module docs).
 *
 * @param env the open catalog database of the suite root
 * @returns the service
 * @since 0.6.0
 * @category constructors
 */
export const make = (env: SqliteEnv): StudyCatalogService => {
  const freeze = (input: FreezeInput, now: number) =>
    Effect.flatMap(
      env.tx((d) => {
        const all = (d.prepare("SELECT * FROM study_protocol_versions WHERE study_id = ? ORDER BY version").all(input.studyId) as Array<Row>)
          .map(toVersion)
        const decided = decideFreeze(all[all.length - 1], input, all)
        if (decided._tag === "Refused") return decided
        const { frozen } = decided
        if (frozen.created) {
          d.prepare(
            `INSERT INTO study_protocol_versions (study_id, version, protocol_digest, protocol_parts_json, protocol_json, created_at)
             VALUES (?, ?, ?, ?, ?, ?)`
          ).run(input.studyId, frozen.version, input.protocolDigest, JSON.stringify(input.protocolParts), JSON.stringify(input.protocol), now)
        }
        if (frozen.upgraded === true) {
          // frozen with a previous digest of the same protocol: the record takes the current one
          d.prepare(
            `UPDATE study_protocol_versions SET protocol_digest = ?, protocol_parts_json = ?, protocol_json = ?
             WHERE study_id = ? AND version = ?`
          ).run(input.protocolDigest, JSON.stringify(input.protocolParts), JSON.stringify(input.protocol), input.studyId, frozen.version)
        }
        d.prepare(
          `INSERT INTO studies (study_id, question, type, created_at, current_version, status, updated_at)
           VALUES (?, ?, ?, ?, ?, 'pending', ?)
           ON CONFLICT(study_id) DO UPDATE SET question = excluded.question, type = excluded.type,
             current_version = excluded.current_version, updated_at = excluded.updated_at`
        ).run(input.studyId, input.question, input.type, now, frozen.version, now)
        if (frozen.created) {
          d.prepare(
            `UPDATE studies SET status = 'pending', stop_reason = NULL, stop_condition_json = NULL, stopped_at = NULL
             WHERE study_id = ?`
          ).run(input.studyId)
        }
        return decided
      }),
      (decided): Effect.Effect<Frozen, ConfigError> =>
        decided._tag === "Refused" ? Effect.fail(decided.error) : Effect.succeed(decided.frozen)
    )

  const recordStopTx = (studyId: string) => (stop: Parameters<TrialLedger["recordStop"]>[0]) =>
    env.tx((d) => {
      d.prepare(
        `UPDATE studies SET stop_reason = ?, stop_condition_json = ?, stopped_at = ?, updated_at = ? WHERE study_id = ?`
      ).run(stop.reason, JSON.stringify(stop.condition), stop.at, stop.at, studyId)
      d.prepare(`UPDATE study_stop_requests SET handled_at = ? WHERE study_id = ? AND handled_at IS NULL`).run(stop.at, studyId)
    })

  const ledger = (studyId: string): TrialLedger => ({
    usage: (ids) =>
      Effect.gen(function*() {
        const out = new Map<string, TrialUsage>(ids.map((id) => [id, ZERO_USAGE]))
        for (let i = 0; i < ids.length; i += 500) {
          const chunk = ids.slice(i, i + 500)
          const rows = yield* query(
            env,
            // every column: `unpriced` (schema version 14) is absent from a root not yet migrated
            `SELECT * FROM study_trials WHERE trial_id IN (${chunk.map(() => "?").join(",")})`,
            chunk
          )
          for (const r of rows) {
            out.set(String(r.trial_id), {
              calls: Number(r.calls),
              tokens: Number(r.tokens),
              costUsd: Number(r.cost_usd),
              timeMs: Number(r.time_ms),
              ...(Number(r.unpriced ?? 0) > 0 ? { unpriced: Number(r.unpriced) } : {})
            })
          }
        }
        return out
      }),
    addUsage: (trialId, delta, now) =>
      env.tx((d) =>
        void d.prepare(
          `UPDATE study_trials SET calls = calls + ?, tokens = tokens + ?, cost_usd = cost_usd + ?, time_ms = time_ms + ?,
             unpriced = unpriced + ?, updated_at = ? WHERE trial_id = ?`
        ).run(delta.calls, delta.tokens, delta.costUsd, delta.timeMs, delta.unpriced ?? 0, now, trialId)
      ),
    markTrial: (trialId, phase, at) =>
      env.tx((d) =>
        void (phase === "running"
          ? d.prepare(
            `UPDATE study_trials SET status = CASE WHEN status IN ('succeeded', 'failed', 'budget_exhausted') THEN status ELSE 'running' END,
               started_at = COALESCE(started_at, ?), ended_at = NULL, updated_at = ? WHERE trial_id = ?`
          ).run(at, at, trialId)
          : d.prepare(`UPDATE study_trials SET ended_at = ?, updated_at = ? WHERE trial_id = ?`).run(at, at, trialId))
      ),
    recordStop: recordStopTx(studyId),
    stopRequested: Effect.map(
      query(env, "SELECT * FROM study_stop_requests WHERE study_id = ? AND handled_at IS NULL ORDER BY id LIMIT 1", [studyId]),
      (rs) => (rs.length === 0 ? null : stopOfRequest(toRequest(rs[0]!)))
    )
  })

  return {
    study: (studyId) =>
      Effect.map(query(env, "SELECT * FROM studies WHERE study_id = ?", [studyId]), (rs) =>
        rs.length === 0 ? Option.none() : Option.some(toStudy(rs[0]!))),
    versions: (studyId) =>
      Effect.map(
        query(env, "SELECT * FROM study_protocol_versions WHERE study_id = ? ORDER BY version", [studyId]),
        (rs) => rs.map(toVersion)
      ),
    freeze,
    registerTrials: (studyId, trials, now) =>
      env.tx((d) => {
        const insert = d.prepare(
          `INSERT INTO study_trials (trial_id, study_id, version, variant_id, variant_key, variant_json, repeat, seedable,
             status, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?) ON CONFLICT(trial_id) DO NOTHING`
        )
        for (const t of trials) {
          insert.run(t.trialId, studyId, t.version, t.variantId, t.variantKey, JSON.stringify(t.variant), t.repeat, t.seedable ? 1 : 0, now)
        }
      }),
    trials: (studyId, version) =>
      Effect.map(
        version === undefined
          ? query(env, "SELECT * FROM study_trials WHERE study_id = ? ORDER BY trial_id", [studyId])
          : query(env, "SELECT * FROM study_trials WHERE study_id = ? AND version = ? ORDER BY trial_id", [studyId, version]),
        (rs) => rs.map(toTrial)
      ),
    settle: (settlements, now) =>
      env.tx((d) => {
        const update = d.prepare(
          `UPDATE study_trials SET status = ?, reason = ?, metrics_json = ?, started_at = COALESCE(started_at, ?), ended_at = ?,
             updated_at = ?, settled_json = ? WHERE trial_id = ?`
        )
        for (const s of settlements) {
          update.run(
            s.status,
            s.reason,
            s.metrics === null ? null : JSON.stringify(s.metrics),
            s.startedAt,
            s.endedAt,
            now,
            s.settled === undefined ? null : JSON.stringify(s.settled),
            s.trialId
          )
        }
      }),
    setStatus: (studyId, status, stop, now) =>
      env.tx((d) => {
        d.prepare("UPDATE studies SET status = ?, updated_at = ? WHERE study_id = ?").run(status, now, studyId)
        if (stop !== undefined) {
          d.prepare("UPDATE studies SET stop_reason = ?, stop_condition_json = ?, stopped_at = ? WHERE study_id = ?").run(
            stop?.reason ?? null,
            stop === null ? null : JSON.stringify(stop.condition),
            stop?.at ?? null,
            studyId
          )
        }
      }),
    ledger,
    requestStop: (studyId, request, now) =>
      env.tx((d) =>
        void d.prepare("INSERT INTO study_stop_requests (study_id, at, running, by) VALUES (?, ?, ?, ?)").run(
          studyId,
          now,
          request.running,
          request.by
        )
      ),
    stopRequests: (studyId) =>
      Effect.map(query(env, "SELECT * FROM study_stop_requests WHERE study_id = ? ORDER BY id", [studyId]), (rs) => rs.map(toRequest)),
    pipelineStates: (suiteId) =>
      Effect.map(
        query(env, "SELECT experiment_id, state, count(*) AS n FROM pipelines WHERE suite_id = ? GROUP BY experiment_id, state", [suiteId]),
        (rs) => {
          const out = new Map<string, Record<string, number>>()
          for (const r of rs) {
            const id = String(r.experiment_id)
            const m = out.get(id) ?? {}
            m[String(r.state)] = Number(r.n)
            out.set(id, m)
          }
          return out
        }
      ),
    dropStopRequests: (studyId, now) =>
      env.tx((d) => void d.prepare("UPDATE study_stop_requests SET handled_at = ? WHERE study_id = ? AND handled_at IS NULL").run(now, studyId))
  }
}

/**
 * Writes a manual stop request into the catalog database `file` of a study's root from a
 * process that is not its writer (see the module docs). Fails with `StoreUnavailable` when the
 * file is missing, has no study tables (a root never run by a build with studies) or stays
 * locked for 5 s.
 *
 * @param file the catalog database (`state.db` / `suite.db` of the root)
 * @param request the study, how running trials end, who asks, when (epoch ms)
 * @since 0.6.0
 * @category stop
 */
export const requestStopInFile = (
  file: string,
  request: { readonly studyId: string; readonly running: "drain" | "cancel"; readonly by: string; readonly at: number }
): Effect.Effect<void, StoreUnavailable> =>
  Effect.try({
    try: () => {
      if (!fs.existsSync(file)) throw new StoreUnavailable({ message: `no study store at ${file}`, path: file })
      const db = new Database(file, { timeout: 5000, fileMustExist: true })
      try {
        const has = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'study_stop_requests'").get()
        if (has === undefined) {
          throw new StoreUnavailable({ message: `${file} has no study tables: the study never ran with this build`, path: file })
        }
        db.prepare("INSERT INTO study_stop_requests (study_id, at, running, by) VALUES (?, ?, ?, ?)").run(
          request.studyId,
          request.at,
          request.running,
          request.by
        )
      } finally {
        db.close()
      }
    },
    catch: (cause) =>
      cause instanceof StoreUnavailable
        ? cause
        : new StoreUnavailable({ message: `cannot write a stop request to ${file}: ${describeSqlError(cause)}`, path: file, cause })
  })

/**
 * Whether a process holds the writer lock of the store `file`, read without touching the lock:
 * the writer a store records in its `store_writer` row (pid and host, written when it opened
 * for writing) is alive when it runs on this host and its pid exists (`kill(pid, 0)`; a process
 * killed with `kill -9` leaves a row whose pid is gone). A writer recorded on another host is
 * judged by a lock probe (an exclusive lock attempt released at once), the only test there is;
 * on this host nothing is locked, so a `status` started while a run opens its store never takes
 * the lock the run is about to take.
 *
 * @param file the store file (the catalog database of a study root)
 * @since 0.6.0
 * @category stop
 */
export const writerAlive = (file: string): boolean => {
  const lockPath = `${file}.lock`
  if (!fs.existsSync(lockPath) || !fs.existsSync(file)) return false
  let writer: { pid: number; host: string } | undefined
  try {
    const db = new Database(file, { readonly: true, fileMustExist: true, timeout: 1000 })
    try {
      writer = db.prepare("SELECT pid, host FROM store_writer WHERE id = 1").get() as { pid: number; host: string } | undefined
    } finally {
      db.close()
    }
  } catch {
    writer = undefined
  }
  if (writer === undefined) return false
  if (writer.host === os.hostname() && Number(writer.pid) !== process.pid) return pidAlive(Number(writer.pid))
  return lockHeld(lockPath)
}

const pidAlive = (pid: number): boolean => {
  if (!(Number.isInteger(pid) && pid > 0)) return false
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    // EPERM: it exists, owned by another user
    return (e as { code?: unknown } | null)?.code === "EPERM"
  }
}

const lockHeld = (lockPath: string): boolean => {
  let probe: Database.Database | undefined
  try {
    probe = new Database(lockPath, { timeout: 0, fileMustExist: true })
    probe.exec("BEGIN EXCLUSIVE")
    probe.exec("ROLLBACK")
    return false
  } catch (e) {
    return String((e as { code?: unknown } | null)?.code ?? "").startsWith("SQLITE_BUSY")
  } finally {
    probe?.close()
  }
}
