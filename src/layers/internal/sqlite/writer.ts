/**
 * The SQLite driver's writer: one synchronous better-sqlite3 connection, cached multi-row
 * prepared statements, pipeline numbers (`pno`) resolved through a bounded map of unfinished
 * pipelines, and the commit of one group-commit batch or one write-behind batch as one
 * IMMEDIATE transaction. See `SqliteStore` for the design and the measurements behind it.
 *
 * @since 0.1.0
 */
import type Database from "better-sqlite3"
import { Clock, Effect } from "effect"
import * as os from "node:os"
import type { StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId } from "../../../domain/Ids.js"
import type { PipelineRecord, PipelineState } from "../../../domain/Records.js"
import { settleToPatch } from "../../../services/internal/store/ops.js"
import { artifactRecordOf } from "../../../services/internal/store/shared.js"
import type {
  NewArtifact,
  NewAttempt,
  NewEvent,
  PipelineFields,
  PipelinePatch,
  PlacedArtifact,
  StoreDriver,
  StoreWrite,
  TraversalWrite
} from "../../../services/Store.js"
import { describeSqlError, type SqliteEnv, unavailable } from "./open.js"
import { UNADMITTED_PNO, VISITS_GUARD } from "./migrations.js"
import * as Traversal from "../../../domain/Traversal.js"
import * as TraversalText from "./traversalText.js"
import { BASE_LEVEL, conflict, needsVisits, VISITS_LEVEL } from "../../../services/internal/store/traversal.js"
import { ATTEMPT_COLUMNS, leaseIdsJson, PIPELINE_COLUMNS, pipelineParams, TASK_COLUMNS, taskParams, toPipeline } from "./rows.js"

/** A BLOB column as bytes (no copy), or `null`. */
export const toBytes = (u: unknown): Uint8Array | null =>
  u instanceof Uint8Array ? new Uint8Array(u.buffer, u.byteOffset, u.byteLength) : null

const CHUNKS = [128, 64, 32, 16, 8, 4, 2, 1]

/** Pipeline ids bound in one `pipeline_id IN (…)` lookup of {@link makeLookup} (shorter lists padded with `NULL`). */
export const LOOKUP_CHUNK = 256

/**
 * `getPipelines` on the writer's own connection: one cached statement of
 * {@link LOOKUP_CHUNK} bound ids (a shorter list padded with `NULL`, which matches no row).
 * Admission asks it for every batch of up to 256 specs; on the read connection each such
 * lookup went through `@effect/sql` and, after every group commit (which invalidates that
 * connection's page cache), read the random leaves of `pipelines_id` again from the WAL
 * (~6–8 µs CPU per admitted pipeline in bench/runner.ts), where the writer's cache holds them.
 * It sees what the read connection would: the writer's transactions are synchronous, so a
 * lookup never runs inside one, and every write is committed when it returns.
 */
const makeLookup = (db: Database.Database) => {
  const stmt = db.prepare(`SELECT * FROM pipelines WHERE pipeline_id IN (${Array(LOOKUP_CHUNK).fill("?").join(",")})`)
  const params: Array<string | null> = new Array(LOOKUP_CHUNK).fill(null)
  return (ids: ReadonlyArray<string>): Map<PipelineId, PipelineRecord> => {
    const out = new Map<PipelineId, PipelineRecord>()
    for (let i = 0; i < ids.length; i += LOOKUP_CHUNK) {
      const n = Math.min(LOOKUP_CHUNK, ids.length - i)
      for (let k = 0; k < LOOKUP_CHUNK; k++) params[k] = k < n ? ids[i + k]! : null
      for (const r of stmt.all(params) as Array<Record<string, unknown>>) {
        out.set(String(r.pipeline_id) as PipelineId, toPipeline(r))
      }
    }
    return out
  }
}

/** A multi-row INSERT helper with one cached statement per chunk size. */
const makeInserter = (db: Database.Database, table: string, columns: ReadonlyArray<string>, suffix = "") => {
  const cache = new Map<number, Database.Statement>()
  const row = `(${columns.map(() => "?").join(",")})`
  const stmt = (k: number) => {
    let s = cache.get(k)
    if (s === undefined) {
      s = db.prepare(`INSERT INTO ${table} (${columns.join(",")}) VALUES ${Array(k).fill(row).join(",")} ${suffix}`)
      cache.set(k, s)
    }
    return s
  }
  const width = columns.length
  /**
   * One parameter array per chunk size, reused by every statement of that size (an array of
   * `k · width` values per statement was ~7 % of the bytes a rewinding pipeline allocates, and
   * the batch's units are live while the writer allocates: see BENCHMARKS.md, perf13v);
   * emptied after each statement, so that it holds no payload.
   */
  const buffers = new Map<number, Array<unknown>>()
  return (rows: ReadonlyArray<ReadonlyArray<unknown>>, returned?: Array<unknown>) => {
    let i = 0
    while (i < rows.length) {
      const left = rows.length - i
      const k = CHUNKS.find((c) => c <= left) ?? 1
      let params = buffers.get(k)
      if (params === undefined) buffers.set(k, params = new Array(k * width).fill(null))
      let at = 0
      for (let j = i; j < i + k; j++) {
        const row = rows[j]!
        for (let c = 0; c < width; c++) params[at++] = row[c]
      }
      try {
        if (returned === undefined) stmt(k).run(params)
        else for (const r of stmt(k).all(params)) returned.push(r)
      } finally {
        params.fill(null)
      }
      i += k
    }
  }
}

/** Columns an upsert never overwrites with `NULL` (a re-admission that does not know it keeps it). */
const KEEP_KNOWN = new Set(["repeat", "traversal", "suite_id", "experiment_id", "local_key"])

/** The columns of a pipeline row as admission writes it: a control pipeline's initial traversal state too. */
const ADMIT_COLUMNS = [...PIPELINE_COLUMNS, "traversal"]

const upsertSuffix = (keys: ReadonlyArray<string>, columns: ReadonlyArray<string>) =>
  `ON CONFLICT(${keys.join(", ")}) DO UPDATE SET ${
    columns.filter((c) => !keys.includes(c)).map((c) =>
      KEEP_KNOWN.has(c) ? `${c} = coalesce(excluded.${c}, ${c})` : `${c} = excluded.${c}`
    ).join(", ")
  }`

/** The columns of an artifact row as the writer inserts it. */
export const ARTIFACT_COLUMNS = [
  "artifact_id", "pno", "pipeline_id", "run_id", "seq", "task_name", "type_name", "codec", "digest", "size", "storage",
  "blob_ref", "payload", "is_final", "created_at", "visit", "active"
]
/** Index of `payload` in {@link ARTIFACT_COLUMNS}. */
const ARTIFACT_PAYLOAD = ARTIFACT_COLUMNS.indexOf("payload")
/** Indexes of `seq` and `active` in {@link ARTIFACT_COLUMNS} and in `TASK_COLUMNS`. */
const ARTIFACT_SEQ = ARTIFACT_COLUMNS.indexOf("seq")
const ARTIFACT_ACTIVE = ARTIFACT_COLUMNS.indexOf("active")
const TASK_SEQ = TASK_COLUMNS.indexOf("seq")
/** Indexes of `pipeline_id` in {@link ARTIFACT_COLUMNS} and in `TASK_COLUMNS`. */
const ARTIFACT_PIPELINE = ARTIFACT_COLUMNS.indexOf("pipeline_id")
const TASK_PIPELINE = TASK_COLUMNS.indexOf("pipeline_id")
const TASK_ACTIVE = TASK_COLUMNS.indexOf("active")

/**
 * Where the rows of a control pipeline admitted new in a commit begin in its generation's task
 * and artifact lists (`-1`: none queued yet; see `commitTx`).
 */
interface FreshRows {
  tasks: number
  artifacts: number
}

/** Payloads of at least this many bytes (256 KiB) are inserted one row per statement. */
const BIG_PAYLOAD = 256 * 1024

/** Whether an artifact row's payload is inserted in a statement of its own (see {@link BIG_PAYLOAD}). */
const isBig = (row: ReadonlyArray<unknown>): boolean => {
  const payload = row[ARTIFACT_PAYLOAD] as Uint8Array | null
  return payload !== null && payload.byteLength >= BIG_PAYLOAD
}

/** Artifact ids bound in one `artifact_id IN (…)` payload read (below SQLite's 32,766 variables). */
export const ROWID_CHUNK = 5000

const EVENT_COLUMNS = ["event_id", "kind", "pno", "pipeline_id", "run_id", "data", "ts"]

/**
 * A ledger row's columns: the transition, then (schema version 17) the event it stands for
 * (`event_id` and the event's facts beyond the ledger, `NULL` when it records none): see
 * `MIGRATION_0017`.
 */
const HANDOFF_COLUMNS = [
  "pno", "pipeline_id", "run_id", "from_seq", "from_task", "to_seq", "to_task", "operation", "entry_seq",
  "entry_artifact_id", "entry_reused", "reason", "ts", "event_id", "event_visit", "event_handoffs", "event_limit"
]
/** Where a ledger row's `event_id` sits in {@link HANDOFF_COLUMNS}. */
const HANDOFF_EVENT_ID = 13

/** How many pipeline numbers the writer keeps in memory (admitted, not yet terminal). */
const PNO_CACHE = 65_536

/**
 * The pipeline patch writer: one cached UPDATE per patch shape (which fields are present), so
 * that a cursor-only checkpoint SETs no indexed column and SQLite leaves every index of
 * `pipelines` alone (it maintains the indexes whose columns appear in the SET list). A control
 * pipeline's traversal state (`traversal`, see `traversalText.ts`) rides in the same statement.
 */
const makePatcher = (db: Database.Database) => {
  const cache = new Map<number, Database.Statement>()
  /** The statement of one patch shape (built on its first use). */
  const prepare = (shape: number): Database.Statement => {
    const sets: Array<string> = []
    if (shape & 1) sets.push("state = ?")
    if (shape & 2) sets.push("n_tasks_done = ?")
    if (shape & 4) sets.push("run_id = ?")
    if (shape & 8) sets.push("started_at = ?")
    if (shape & 16) sets.push("ended_at = ?")
    if (shape & 32) sets.push("failed_task = ?", "error_type = ?", "error_message = ?", "error_class = ?")
    if (shape & 64) sets.push("attempts_total = attempts_total + ?")
    if (shape & 128) sets.push("traversal = ?")
    sets.push("updated_at = ?")
    const stmt = db.prepare(`UPDATE pipelines SET ${sets.join(", ")} WHERE pno = ?`)
    cache.set(shape, stmt)
    return stmt
  }
  // the parameters in the order of `prepare`'s SET list; no SQL text built per call
  return (pno: number, p: PipelinePatch, traversal?: string): void => {
    const params: Array<unknown> = []
    let shape = 0
    if (p.state !== undefined) {
      shape |= 1
      params.push(p.state)
    }
    if (p.nTasksDone !== undefined) {
      shape |= 2
      params.push(p.nTasksDone)
    }
    if (p.runId !== undefined) {
      shape |= 4
      params.push(p.runId)
    }
    if (p.startedAt !== undefined) {
      shape |= 8
      params.push(p.startedAt)
    }
    if (p.endedAt !== undefined) {
      shape |= 16
      params.push(p.endedAt)
    }
    if (p.error !== undefined) {
      shape |= 32
      params.push(p.error?.failedTask ?? null, p.error?.errorType ?? null, p.error?.errorMessage ?? null, p.error?.errorClass ?? null)
    }
    if (p.attemptsDelta !== undefined && p.attemptsDelta !== 0) {
      shape |= 64
      params.push(p.attemptsDelta)
    }
    if (traversal !== undefined) {
      shape |= 128
      params.push(traversal)
    }
    params.push(p.updatedAt, pno)
    ;(cache.get(shape) ?? prepare(shape)).run(params)
  }
}

/**
 * Whether an admission writes the row of `pipelineId` (an admission holds one row or a few:
 * a loop, not a Set per admission).
 */
const admitsRow = (op: Extract<StoreWrite, { _tag: "Admit" }>, pipelineId: string): boolean => {
  const ps = op.pipelines
  for (let i = 0; i < ps.length; i++) if (ps[i]!.pipelineId === pipelineId) return true
  return false
}

/** Whether an admission writes the seed of `pipelineId` (see {@link admitsRow}). */
const seedsOf = (op: Extract<StoreWrite, { _tag: "Admit" }>, pipelineId: string): boolean => {
  const ss = op.seeds
  for (let i = 0; i < ss.length; i++) if (ss[i]![0].pipelineId === pipelineId) return true
  return false
}

/** JSON text of a value, `null` for `undefined`. */
export const jsonOrNull = (u: unknown): string | null => (u === undefined ? null : JSON.stringify(u))

/**
 * The writer of an open store (see the module docs): `commit` (one group-commit batch),
 * `writeFacts` (one write-behind batch) and `putArtifact`, each one transaction, and
 * `lookupPipelines` (the admission's `getPipelines` on this connection). On a read-only
 * open every write fails with the open's read-only error. Fails with `StoreUnavailable` when
 * the statements cannot be prepared.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWriter = (
  env: SqliteEnv
): Effect.Effect<
  Pick<StoreDriver, "commit" | "writeFacts" | "putArtifact"> & {
    readonly featureLevel: () => string
    /** `getPipelines` on the writer's connection (see {@link makeLookup}); `undefined` on a read-only open. */
    readonly lookupPipelines: StoreDriver["getPipelines"] | undefined
  },
  StoreUnavailable
> =>
  Effect.gen(function*() {
    const { path, tx } = env
    const w = env.db
    // --- prepared write statements ------------------------------------------------------------
    let nextAttemptId = 1
    let nextEventId = 1
    let nextArtifactId = 1
    /**
     * The largest pipeline number this writer has seen: an admission whose row comes back
     * with a larger one inserted a new row (an upsert of an existing row keeps its number).
     */
    let topPno = 0
    let write: {
      pipelines: (rows: ReadonlyArray<ReadonlyArray<unknown>>, returned: Array<unknown>) => void
      tasks: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      artifacts: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      attempts: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      events: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      handoffs: (rows: ReadonlyArray<ReadonlyArray<unknown>>) => void
      patch: (pno: number, p: PipelinePatch, traversal?: string) => void
      pnoOf: Database.Statement
      adopt: ReadonlyArray<Database.Statement>
      clearFinal: Database.Statement
      latestAt: Database.Statement
      setFinal: Database.Statement
      traversalOf: Database.Statement
      setTraversal: Database.Statement
      invalidateTasks: Database.Statement
      invalidateArtifacts: Database.Statement
      occurrence: Database.Statement
      setLevel: Database.Statement
    } | undefined
    let lookup: ((ids: ReadonlyArray<string>) => Map<PipelineId, PipelineRecord>) | undefined
    /** The feature level; moved to `visits-v1` by the commit of the first revisit. */
    let level = env.featureLevel
    /** Some child row has {@link UNADMITTED_PNO} (checked at open, set when one is written). */
    let unadmitted = false
    if (w !== undefined) {
      const openedAt = yield* Clock.currentTimeMillis
      yield* Effect.try({
        try: () => {
          const max = (t: string, c: string) => Number((w.prepare(`SELECT coalesce(max(${c}), 0) AS m FROM ${t}`).get() as { m: number }).m)
          nextAttemptId = max("attempts", "attempt_id") + 1
          // (the ledger's rows carry the ids of their events: schema version 17)
          nextEventId = Math.max(max("events", "event_id"), max("handoffs", "event_id")) + 1
          nextArtifactId = max("artifacts", "artifact_id") + 1
          topPno = max("pipelines", "pno")
          const CHILDREN = ["tasks", "attempts", "artifacts", "events"]
          unadmitted = CHILDREN.some((t) => w.prepare(`SELECT 1 FROM ${t} WHERE pno = ${UNADMITTED_PNO} LIMIT 1`).get() !== undefined)
          w.prepare(
            "INSERT INTO store_writer (id, pid, host, run_id, since) VALUES (1, ?, ?, NULL, ?) ON CONFLICT(id) DO UPDATE SET pid = excluded.pid, host = excluded.host, run_id = NULL, since = excluded.since"
          ).run(process.pid, os.hostname(), openedAt)
          write = {
            pipelines: makeInserter(
              w,
              "pipelines",
              ADMIT_COLUMNS,
              `${upsertSuffix(["pipeline_id"], ADMIT_COLUMNS)} RETURNING pipeline_id, pno, state`
            ),
            // a task run id names its pipeline and seq, so (pno, seq, task_run_id) is as unique
            tasks: makeInserter(w, "tasks", TASK_COLUMNS, upsertSuffix(["pno", "seq", "task_run_id"], TASK_COLUMNS)),
            artifacts: makeInserter(w, "artifacts", ARTIFACT_COLUMNS),
            attempts: makeInserter(w, "attempts", ATTEMPT_COLUMNS),
            events: makeInserter(w, "events", EVENT_COLUMNS),
            handoffs: makeInserter(w, "handoffs", HANDOFF_COLUMNS),
            patch: makePatcher(w),
            pnoOf: w.prepare("SELECT pno FROM pipelines WHERE pipeline_id = ?").pluck(),
            adopt: CHILDREN.map((t) =>
              w.prepare(`UPDATE ${t} SET pno = ? WHERE pno = ${UNADMITTED_PNO} AND pipeline_id = ?`)
            ),
            clearFinal: w.prepare(
              "UPDATE artifacts SET is_final = 0 WHERE pno = ? AND pipeline_id = ? AND is_final = 1 AND artifact_id <> ?"
            ),
            latestAt: w.prepare(
              "SELECT max(artifact_id) AS id FROM artifacts WHERE pno = ? AND pipeline_id = ? AND seq = ? AND active IS NOT 0"
            ),
            setFinal: w.prepare("UPDATE artifacts SET is_final = 1 WHERE artifact_id = ? AND is_final = 0"),
            traversalOf: w.prepare("SELECT traversal FROM pipelines WHERE pno = ?").pluck(),
            setTraversal: w.prepare("UPDATE pipelines SET traversal = ? WHERE pno = ?"),
            invalidateTasks: w.prepare("UPDATE tasks SET active = 0 WHERE pno = ? AND seq >= ? AND active IS NOT 0"),
            invalidateArtifacts: w.prepare(
              "UPDATE artifacts SET active = 0 WHERE pno = ? AND seq >= ? AND seq < ? AND active IS NOT 0"
            ),
            occurrence: w.prepare(
              "SELECT max(artifact_id) AS id FROM artifacts WHERE pno = ? AND pipeline_id = ? AND seq = ? AND coalesce(visit, 0) = ?"
            ),
            setLevel: w.prepare("UPDATE store_meta SET value = ? WHERE key = 'feature_level'")
          }
          lookup = makeLookup(w)
        },
        catch: (cause) => unavailable(path, `cannot prepare store ${path}: ${describeSqlError(cause)}`, cause)
      })
    }

    /**
     * Pipeline numbers the writer has seen (admitted or looked up) and whose pipeline is not
     * terminal yet, in insertion order: at most {@link PNO_CACHE} (the oldest is dropped; a
     * miss costs one lookup in the unique index on `pipeline_id`).
     */
    const pnos = new Map<string, number>()
    const remember = (pipelineId: string, pno: number) => {
      if (pnos.size >= PNO_CACHE && !pnos.has(pipelineId)) {
        const oldest = pnos.keys().next()
        if (oldest.done !== true) pnos.delete(oldest.value)
      }
      pnos.set(pipelineId, pno)
    }
    /** The number of `pipelineId`, or {@link UNADMITTED_PNO} (runs inside a write transaction). */
    const pnoOf = (pipelineId: string): number => {
      const known = pnos.get(pipelineId)
      if (known !== undefined) return known
      const found = write!.pnoOf.get(pipelineId) as number | undefined
      if (found === undefined) {
        unadmitted = true
        return UNADMITTED_PNO
      }
      remember(pipelineId, found)
      return found
    }
    /**
     * The traversal version of each pipeline whose state this writer has accepted in the
     * current transaction or committed in an earlier one, at most {@link PNO_CACHE} (the
     * oldest is dropped), forgotten once the pipeline is terminal. The store's file lock makes
     * this writer the only one of the file, so what it wrote is what is stored: the version
     * check reads the stored state only on a miss (a pipeline admitted by an earlier writer, a
     * dropped entry). Cleared whole when a transaction fails (it may hold versions that were
     * rolled back).
     */
    const versions = new Map<string, number>()
    /**
     * Pipelines this writer admitted new (their seed written with the row) that have no final
     * artifact yet: the first final one of such a pipeline has no older final to clear,
     * so its `clearFinal` (a scan of the pipeline's artifacts) is skipped. Any other final write
     * (`markFinal`, `putArtifact`) and a terminal state take the pipeline out; cleared whole
     * when a transaction fails; at most {@link PNO_CACHE} (past that, pipelines are not added).
     */
    const unfinalized = new Set<string>()
    const rememberVersion = (pipelineId: string, version: number) => {
      if (versions.size >= PNO_CACHE && !versions.has(pipelineId)) {
        const oldest = versions.keys().next()
        if (oldest.done !== true) versions.delete(oldest.value)
      }
      versions.set(pipelineId, version)
    }
    /** The traversal version of `pipelineId` as stored (`null`: none), inside the write transaction. */
    const versionOf = (pipelineId: string): number | null => {
      const known = versions.get(pipelineId)
      return known !== undefined ? known : storedVersion(pnoOf(pipelineId))
    }
    const isTerminal = (state: PipelinePatch["state"]) => state === "succeeded" || state === "failed" || state === "interrupted"
    /**
     * Applies a patch by pipeline number (with the traversal state's JSON, when given);
     * forgets the number and the traversal version once the pipeline is terminal.
     */
    const patchPipeline = (pipelineId: string, patch: PipelinePatch, traversal?: string) => {
      const known = pnos.get(pipelineId)
      const pno = known ?? (write!.pnoOf.get(pipelineId) as number | undefined)
      if (pno === undefined) return
      write!.patch(pno, patch, traversal)
      if (isTerminal(patch.state)) {
        pnos.delete(pipelineId)
        versions.delete(pipelineId)
        unfinalized.delete(pipelineId)
      } else if (known === undefined) remember(pipelineId, pno)
    }

    /**
     * The JSON of the frozen decision last written, by identity: the runner shares one
     * frozen decision for every first-attempt success (see `succeededAs`), so most attempt
     * rows cost no `JSON.stringify` of their decision (a decision that is not frozen is
     * written each time: it could have changed since).
     */
    let lastDecision: unknown = undefined
    let lastDecisionJson: string | null = null
    const decisionJson = (d: unknown): string | null => {
      if (d === undefined || d === null || !Object.isFrozen(d)) return jsonOrNull(d)
      if (d !== lastDecision) {
        lastDecisionJson = JSON.stringify(d)
        lastDecision = d
      }
      return lastDecisionJson
    }
    const attemptRow = (a: NewAttempt): Array<unknown> => [
      nextAttemptId++, pnoOf(a.pipelineId), a.pipelineId, a.runId, a.taskRunId, a.taskName, a.seq, a.attemptNo, a.outcome,
      a.errorClass, a.errorType, a.errorMessage, decisionJson(a.decision), leaseIdsJson(a.leaseIds), a.startedAt, a.endedAt,
      a.durationMs, a.visit ?? 0, a.model ?? null, a.tokensIn ?? null, a.tokensOut ?? null, a.tokensEstimated === true ? 1 : 0,
      a.costUsd ?? null
    ]
    const eventRow = (e: NewEvent): Array<unknown> => [
      nextEventId++, e.kind, e.pipelineId === null ? null : pnoOf(e.pipelineId), e.pipelineId, e.runId, jsonOrNull(e.data), e.ts
    ]
    const artifactRow = (id: number, pno: number, a: NewArtifact, placed: PlacedArtifact): Array<unknown> => [
      id, pno, a.pipelineId, a.runId, a.seq, a.taskName, a.typeName, a.codec, a.digest, a.payload.byteLength,
      // (bytes bound as they are: better-sqlite3 binds any Uint8Array as a BLOB, no Buffer view needed)
      placed.storage, placed.blobRef, placed.payload, a.isFinal ? 1 : 0, a.createdAt, a.visit ?? 0, 1
    ]
    /**
     * Inserts (or replaces) pipeline rows with the traversal states in `states` (JSON, by
     * pipeline; a row without one keeps its stored state), learns their numbers, adopts their
     * unadmitted rows.
     */
    /** Pipelines admitted terminal by the commit under way (forgotten when it ends). */
    let admittedTerminal: Array<string> | undefined
    const admitRows = (
      ps: ReadonlyArray<PipelineFields>,
      states: ReadonlyMap<string, string> | undefined,
      inserted?: Set<string>
    ) => {
      const returned: Array<unknown> = []
      write!.pipelines(
        ps.map((p) => {
          const row = pipelineParams(p)
          row.push(states?.get(p.pipelineId) ?? null)
          return row
        }),
        returned
      )
      for (const r of returned as Array<{ pipeline_id: string; pno: number; state: PipelineState }>) {
        // a row admitted terminal (its checkpoints in this same commit) is known until the
        // commit ends, so that its child rows below find their number without a lookup
        remember(r.pipeline_id, r.pno)
        if (r.pno > topPno) {
          topPno = r.pno
          inserted?.add(r.pipeline_id)
        }
        if (isTerminal(r.state)) (admittedTerminal ??= []).push(r.pipeline_id)
        if (unadmitted) for (const s of write!.adopt) s.run(r.pno, r.pipeline_id)
      }
    }
    /** Appends an artifact row (and clears the older final one when it is final). */
    const addArtifact = (
      rows: Array<Array<unknown>>,
      ordered: Array<() => void>,
      a: NewArtifact,
      placed: PlacedArtifact
    ): number => {
      const id = nextArtifactId++
      const pno = pnoOf(a.pipelineId)
      rows.push(artifactRow(id, pno, a, placed))
      // (the first final artifact of a traversal this writer admitted new has nothing to clear)
      if (a.isFinal && !unfinalized.delete(a.pipelineId)) ordered.push(() => write!.clearFinal.run(pno, a.pipelineId, id))
      return id
    }
    /**
     * Inserts artifact rows: small ones in multi-row statements, each payload of at least
     * {@link BIG_PAYLOAD} bytes in a statement of its own, so that SQLite holds one big bound
     * copy at a time (better-sqlite3 binds blobs as `SQLITE_TRANSIENT`: SQLite copies them, and
     * a 16-row statement of 4 MB outputs held 64 MB of copies at once).
     */
    const insertArtifacts = (rows: ReadonlyArray<ReadonlyArray<unknown>>) => {
      // (no copy of the list when every payload is small, as almost always)
      let big = false
      for (const r of rows) if (isBig(r)) big = true
      if (!big) return write!.artifacts(rows)
      const small: Array<ReadonlyArray<unknown>> = []
      for (const r of rows) {
        if (isBig(r)) write!.artifacts([r])
        else small.push(r)
      }
      if (small.length > 0) write!.artifacts(small)
    }
    /** The stored traversal version of a pipeline (`null`: none), inside the write transaction. */
    const storedVersion = (pno: number): number | null => {
      const text = write!.traversalOf.get(pno) as string | null | undefined
      return typeof text === "string" ? TraversalText.versionOf(text) : null
    }
    /** The first revisit moves the store to `visits-v1` and arms the guard. */
    const levelFor = (d: Database.Database, state: Traversal.VisitState) => {
      if (level === BASE_LEVEL && needsVisits(state)) {
        write!.setLevel.run(VISITS_LEVEL)
        for (const statement of VISITS_GUARD) d.exec(statement)
        level = VISITS_LEVEL
      }
    }
    /** Stores a traversal state (see {@link levelFor}). */
    const putState = (d: Database.Database, pipelineId: string, state: Traversal.VisitState) => {
      write!.setTraversal.run(TraversalText.encode(pipelineId, state), pnoOf(pipelineId))
      levelFor(d, state)
    }
    /**
     * The traversal part of a checkpoint (after the unit's rows, its ledger row among them):
     * invalidation, final, then the state, in the same UPDATE as the unit's pipeline patch when
     * it has one.
     */
    const applyTraversal = (
      d: Database.Database,
      pipelineId: string,
      t: TraversalWrite,
      patch: PipelinePatch | undefined,
      superseded: boolean,
      invalidated: boolean
    ) => {
      const s = write!
      const pno = pnoOf(pipelineId)
      if (t.invalidateFrom !== undefined && !invalidated) {
        s.invalidateTasks.run(pno, t.invalidateFrom)
        s.invalidateArtifacts.run(pno, t.invalidateFrom, t.state.counters.length)
      }
      if (t.final !== undefined) {
        const at = Traversal.parseAddress(t.final)
        const row = at === undefined ? undefined : s.occurrence.get(pno, pipelineId, at.seq, at.visit) as { id: number | null }
        if (row !== undefined && row.id !== null) {
          s.setFinal.run(row.id)
          if (!unfinalized.delete(pipelineId)) s.clearFinal.run(pno, pipelineId, row.id)
        }
      }
      if (superseded) {
        // a later step of this pipeline in the same commit writes the state
        if (patch !== undefined) patchPipeline(pipelineId, patch)
        levelFor(d, t.state)
      } else if (patch === undefined) putState(d, pipelineId, t.state)
      else {
        patchPipeline(pipelineId, patch, TraversalText.encode(pipelineId, t.state))
        levelFor(d, t.state)
      }
    }
    const commit = (ops: ReadonlyArray<StoreWrite>) => {
      const levelBefore = level
      admittedTerminal = undefined
      return Effect.ensuring(
        Effect.tapError(commitTx(ops), () =>
          Effect.sync(() => {
            // rolled back: the level did not move, the versions accepted in it were not stored,
            // the numbers learnt in it may not exist
            level = levelBefore
            pnos.clear()
            versions.clear()
            unfinalized.clear()
          })),
        Effect.sync(() => {
          if (admittedTerminal !== undefined) {
            for (const id of admittedTerminal) {
              pnos.delete(id)
              versions.delete(id)
              unfinalized.delete(id)
            }
            admittedTerminal = undefined
          }
        })
      )
    }
    const commitTx = (ops: ReadonlyArray<StoreWrite>) =>
      tx((d) => {
        const s = write!
        let refused: Array<readonly [number, StoreUnavailable]> | undefined
        /**
         * Control pipelines admitted new in this commit, with where their rows begin in
         * generation 0's task and artifact lists (-1: none queued yet): every stored row of such
         * a pipeline is queued in this commit from there on (its units never move to a later
         * generation), so an invalidation marks them inactive before they are inserted, and no
         * UPDATE runs.
         */
        let fresh: Map<string, FreshRows> | undefined
        /**
         * A pipeline admitted here whose steps in this commit form one unbroken chain of
         * versions gets the last step's state in its INSERT (`stateInRow`: that step's index),
         * and none of its steps writes a state of its own.
         */
        let stateInRow: Map<string, number> | undefined
        // pipelines first (as before), so that the child rows below resolve their numbers.
        // The initial states of control admissions first: each admitted row's state rides in
        // its INSERT (any other by an UPDATE below)
        // Every admission's rows in one multi-row upsert, in order (a statement per admitted
        // pipeline was ~6 % of a trivial run's profile, and ~10 µs per control pipeline),
        // unless an admission also carries the state of a pipeline it does not admit (stored
        // by an UPDATE between admissions) or admits a pipeline another one does: then the
        // admissions with states keep one statement each, in order, as before (`controlApart`).
        let controlApart = false
        {
          const seen = new Set<string>()
          for (const op of ops) {
            if (op._tag !== "Admit") continue
            for (const p of op.pipelines) {
              if (seen.has(p.pipelineId)) controlApart = true
              seen.add(p.pipelineId)
            }
            for (const t of op.traversals) if (!admitsRow(op, t.pipelineId)) controlApart = true
          }
        }
        /**
         * The admitted rows' states (JSON, by pipeline): one map for the whole commit
         * (`mergedStates`), or, with `controlApart`, one per admission (`statesByOp`).
         */
        let statesByOp: Map<StoreWrite, Map<string, string>> | undefined
        let mergedStates: Map<string, string> | undefined
        /**
         * Built only when this commit admits a control pipeline, in one pass over the commit:
         * for each pipeline admitted here, the index of the last step that follows on from its
         * admission's state (-1: no step yet; -2: not one chain: a step before the admission,
         * a second admission, a version that does not follow), and that step's state.
         */
        let chainAt: Map<string, number> | undefined
        let chainState: Map<string, Traversal.VisitState> | undefined
        for (const op of ops) {
          if (op._tag !== "Admit" || op.traversals.length === 0 || op.pipelines.length === 0) continue
          if (chainAt === undefined) {
            const at = chainAt = new Map()
            const last = chainState = new Map()
            for (let i = 0; i < ops.length; i++) {
              const o = ops[i]!
              if (o._tag === "Admit") {
                for (const t of o.traversals) {
                  if (!admitsRow(o, t.pipelineId)) continue
                  if (at.has(t.pipelineId)) at.set(t.pipelineId, -2)
                  else {
                    at.set(t.pipelineId, -1)
                    last.set(t.pipelineId, t.state)
                  }
                }
                continue
              }
              if (o._tag !== "Checkpoint") continue
              const step = o.unit.traversal
              if (step === undefined) continue
              const pid = o.unit.pipelineId
              const k = at.get(pid)
              if (k === -2) continue
              if (k === undefined || step.expectedVersion !== last.get(pid)!.version) at.set(pid, -2)
              else {
                at.set(pid, i)
                last.set(pid, step.state)
              }
            }
          }
          let states = controlApart ? undefined : mergedStates
          for (const t of op.traversals) {
            if (!admitsRow(op, t.pipelineId)) continue
            const lastAt = chainAt.get(t.pipelineId)!
            let last = t.state
            if (lastAt >= 0) {
              last = chainState!.get(t.pipelineId)!
              ;(stateInRow ??= new Map()).set(t.pipelineId, lastAt)
              levelFor(d, last)
            }
            ;(states ??= new Map()).set(t.pipelineId, TraversalText.encode(t.pipelineId, last))
          }
          if (!controlApart) mergedStates = states
          else if (states !== undefined) (statesByOp ??= new Map()).set(op, states)
        }
        /** The states of the rows `op` admits (see `mergedStates`); `undefined`: none. */
        const statesOf = (op: Extract<StoreWrite, { _tag: "Admit" }>): Map<string, string> | undefined =>
          controlApart
            ? statesByOp?.get(op)
            : op.traversals.length > 0 && op.pipelines.length > 0
            ? mergedStates
            : undefined
        let batched: Array<PipelineFields> | undefined
        const insertedTogether = mergedStates === undefined ? undefined : new Set<string>()
        for (const op of ops) {
          if (op._tag !== "Admit") continue
          if (op.traversals.length === 0 || !controlApart) for (const p of op.pipelines) (batched ??= []).push(p)
        }
        if (batched !== undefined) admitRows(batched, mergedStates, insertedTogether)
        for (const op of ops) {
          if (op._tag !== "Admit") continue
          const states = statesOf(op)
          const inserted = states === undefined ? undefined : insertedTogether ?? new Set<string>()
          if (controlApart && op.pipelines.length > 0 && op.traversals.length > 0) admitRows(op.pipelines, states, inserted)
          // a plain pipeline admitted new (its seed written with its row, no orphan rows that
          // could be its own) has no final artifact yet: its first final one clears nothing
          if (!unadmitted) {
            for (const [a] of op.seeds) {
              if (
                unfinalized.size < PNO_CACHE && states?.has(a.pipelineId) !== true && admitsRow(op, a.pipelineId)
              ) {
                unfinalized.add(a.pipelineId)
              }
            }
          }
          for (const t of op.traversals) {
            if (states?.has(t.pipelineId) === true) {
              levelFor(d, t.state)
              // admitted new (its seed in this admission, no orphan rows that could be its own)
              if (!unadmitted && seedsOf(op, t.pipelineId)) {
                if (unfinalized.size < PNO_CACHE) unfinalized.add(t.pipelineId)
                // (a row that existed before keeps its number: its rows may be stored already)
                if (inserted?.has(t.pipelineId) === true) (fresh ??= new Map()).set(t.pipelineId, { tasks: -1, artifacts: -1 })
              }
            }
            else putState(d, t.pipelineId, t.state)
            rememberVersion(t.pipelineId, t.state.version)
          }
        }
        /**
         * Rows and ordered steps queued by generation: a pipeline's unit goes to the generation
         * after its last invalidation in this batch (a group of consecutive steps may rewind and
         * go on), so that an invalidation covers the rows of that pipeline written before it and
         * never those of its later steps. Each generation writes its rows in multi-row
         * statements, then runs its ordered steps; almost every row is in generation 0.
         */
        interface Generation {
          readonly tasks: Array<Array<unknown>>
          readonly artifacts: Array<Array<unknown>>
          readonly attempts: Array<Array<unknown>>
          readonly events: Array<Array<unknown>>
          readonly ordered: Array<() => void>
        }
        const generation = (): Generation => ({ tasks: [], artifacts: [], attempts: [], events: [], ordered: [] })
        /**
         * The ledger rows of the whole commit, in the order of its transitions (no generation:
         * no statement of the commit updates a ledger row), so that `handoff_id` follows the
         * order in which their events get their ids (see `MIGRATION_0017`).
         */
        const handoffs: Array<Array<unknown>> = []
        const generations: Array<Generation> = [generation()]
        /** The generation of each pipeline that invalidated in this batch (others: 0). */
        let genOf: Map<string, number> | undefined
        const genFor = (pipelineId: string): Generation => {
          const g = genOf?.get(pipelineId)
          return g === undefined ? generations[0]! : generations[g]!
        }
        /** Later units of `pipelineId` go to the next generation. */
        const nextGen = (pipelineId: string) => {
          const g = (genOf?.get(pipelineId) ?? 0) + 1
          ;(genOf ??= new Map()).set(pipelineId, g)
          while (generations.length <= g) generations.push(generation())
        }
        // Several traversal steps of one pipeline in this commit (a group of consecutive
        // steps): only the last accepted one writes the traversal state (known once every
        // version check of the commit has run, which is before any ordered step runs).
        let lastAccepted: Map<string, number> | undefined
        {
          let steps: Set<string> | undefined
          for (const op of ops) {
            if (op._tag !== "Checkpoint" || op.unit.traversal === undefined) continue
            if (steps?.has(op.unit.pipelineId) === true) {
              lastAccepted = new Map()
              break
            }
            ;(steps ??= new Set()).add(op.unit.pipelineId)
          }
        }
        for (let i = 0; i < ops.length; i++) {
          const op = ops[i]!
          switch (op._tag) {
            case "Admit":
              for (const [a, placed] of op.seeds) {
                const g = genFor(a.pipelineId)
                const queued = fresh?.get(a.pipelineId)
                if (queued !== undefined && queued.artifacts < 0) queued.artifacts = g.artifacts.length
                addArtifact(g.artifacts, g.ordered, a, placed)
              }
              break
            case "Checkpoint": {
              const u = op.unit
              const t = u.traversal
              const { artifacts, attempts, events, ordered, tasks } = genFor(u.pipelineId)
              const queued = fresh?.get(u.pipelineId)
              let ledger: Array<unknown> | undefined
              const artifactsBefore = artifacts.length
              const tasksBefore = tasks.length
              if (t !== undefined) {
                // the version check, before any row of the unit is queued: a refused unit writes nothing
                // (a version accepted earlier in this batch counts: `versions` has it)
                const pid = u.pipelineId
                const actual = versionOf(pid)
                if (actual !== t.expectedVersion) {
                  ;(refused ??= []).push([i, conflict(pid, t.expectedVersion, actual)])
                  break
                }
                rememberVersion(pid, t.state.version)
                lastAccepted?.set(pid, i)
                const h = t.handoff
                if (h !== undefined) {
                  // (the event's id and facts are set below, after the unit's own events)
                  handoffs.push(ledger = [
                    pnoOf(pid), h.pipelineId, h.runId, h.fromSeq, h.fromTask, h.toSeq, h.toTask, h.operation, h.entrySeq,
                    h.entryArtifactId, h.entryReused ? 1 : 0, h.reason, h.ts, null, null, null, null
                  ])
                }
                if (t.entry !== undefined && op.entryPlaced !== undefined) {
                  addArtifact(artifacts, ordered, t.entry, op.entryPlaced)
                }
              }
              if (u.artifact !== undefined && op.placed !== undefined) addArtifact(artifacts, ordered, u.artifact, op.placed)
              if (u.task !== undefined) tasks.push(taskParams(u.task, pnoOf(u.task.pipelineId)))
              for (const a of u.attempts ?? []) attempts.push(attemptRow(a))
              for (const e of u.events ?? []) events.push(eventRow(e))
              // (a refused unit left the switch above: `t` is accepted here.) The transition's
              // `pipeline.handoff` event is its ledger row's: the id it has among the events (the
              // next one, after the unit's own) and its facts (schema version 17)
              const f = t?.handoffEvent
              if (f !== undefined && ledger !== undefined) {
                ledger[HANDOFF_EVENT_ID] = nextEventId++
                ledger[HANDOFF_EVENT_ID + 1] = f.visit
                ledger[HANDOFF_EVENT_ID + 2] = f.handoffs
                // (as the event's JSON wrote it: a limit that is not a finite number is `null`)
                ledger[HANDOFF_EVENT_ID + 3] = Number.isFinite(f.limit) ? f.limit : null
              }
              if (queued !== undefined) {
                if (queued.artifacts < 0 && artifacts.length > artifactsBefore) queued.artifacts = artifactsBefore
                if (queued.tasks < 0 && tasks.length > tasksBefore) queued.tasks = tasksBefore
              }
              if (t !== undefined) {
                const patch = u.pipeline
                const accepted = lastAccepted
                const pid = u.pipelineId
                // a pipeline admitted new in this commit: its rows so far (this unit's among
                // them) are all queued here, so the invalidation marks them, and no UPDATE runs
                const from = t.invalidateFrom
                const invalidated = from !== undefined && queued !== undefined
                if (invalidated) {
                  const end = t.state.counters.length
                  if (queued.tasks >= 0) {
                    for (let k = queued.tasks; k < tasks.length; k++) {
                      const r = tasks[k]!
                      if (r[TASK_PIPELINE] === pid && (r[TASK_SEQ] as number) >= from) r[TASK_ACTIVE] = 0
                    }
                  }
                  if (queued.artifacts >= 0) {
                    for (let k = queued.artifacts; k < artifacts.length; k++) {
                      const r = artifacts[k]!
                      const seq = r[ARTIFACT_SEQ] as number
                      if (r[ARTIFACT_PIPELINE] === pid && seq >= from && seq < end) r[ARTIFACT_ACTIVE] = 0
                    }
                  }
                }
                // A step of a chain whose last state rides in the admitted row, with no patch,
                // final or invalidation of its own, has nothing to apply (its level is the last
                // state's, set with the row: visit counters only grow): no closure.
                if (
                  stateInRow?.has(pid) !== true || patch !== undefined || t.final !== undefined ||
                  (from !== undefined && !invalidated)
                ) {
                  ordered.push(() =>
                    applyTraversal(
                      d,
                      pid,
                      t,
                      patch,
                      (accepted !== undefined && accepted.get(pid) !== i) || stateInRow?.get(pid) === i,
                      invalidated
                    )
                  )
                }
                // an invalidation covers the rows written so far, never those of a later unit
                // of the same pipeline in this batch (see `Generation`)
                if (from !== undefined && !invalidated) nextGen(u.pipelineId)
              } else if (u.pipeline !== undefined) {
                const patch = u.pipeline
                ordered.push(() => patchPipeline(u.pipelineId, patch))
              }
              break
            }
            case "PutTask": {
              const row = taskParams(op.task, pnoOf(op.task.pipelineId))
              const g = genFor(op.task.pipelineId)
              const queued = fresh?.get(op.task.pipelineId)
              if (queued !== undefined && queued.tasks < 0) queued.tasks = g.tasks.length
              g.tasks.push(row)
              break
            }
            case "Patch": {
              genFor(op.pipelineId).ordered.push(() => patchPipeline(op.pipelineId, op.patch))
              break
            }
            case "Settle": {
              const patch = settleToPatch(op.settle)
              genFor(op.pipelineId).ordered.push(() => patchPipeline(op.pipelineId, patch))
              break
            }
            case "MarkFinal":
              unfinalized.delete(op.pipelineId)
              genFor(op.pipelineId).ordered.push(() => {
                const pno = pnoOf(op.pipelineId)
                const row = s.latestAt.get(pno, op.pipelineId, op.seq) as { id: number | null }
                if (row.id === null) return
                s.setFinal.run(row.id)
                s.clearFinal.run(pno, op.pipelineId, row.id)
              })
              break
          }
        }
        for (const g of generations) {
          if (g.tasks.length > 0) s.tasks(g.tasks)
          if (g.artifacts.length > 0) insertArtifacts(g.artifacts)
          if (g.attempts.length > 0) s.attempts(g.attempts)
          if (g.events.length > 0) s.events(g.events)
          for (const f of g.ordered) f()
        }
        if (handoffs.length > 0) s.handoffs(handoffs)
        return refused
      })

    const lookupWith = lookup
    return {
      commit,
      featureLevel: () => level,
      lookupPipelines: lookupWith === undefined ? undefined : (ids) =>
        ids.length === 0 ? Effect.succeed(new Map()) : Effect.try({
          try: () => lookupWith(ids),
          catch: (cause) => unavailable(path, `read of store ${path} failed: ${describeSqlError(cause)}`, cause)
        }),
      writeFacts: (as, es) =>
        tx(() => {
          if (as.length > 0) write!.attempts(as.map(attemptRow))
          if (es.length > 0) write!.events(es.map(eventRow))
        }),

      putArtifact: (a, placed) =>
        tx(() => {
          unfinalized.delete(a.pipelineId)
          const rows: Array<Array<unknown>> = []
          const ordered: Array<() => void> = []
          const id = addArtifact(rows, ordered, a, placed)
          write!.artifacts(rows)
          for (const f of ordered) f()
          return artifactRecordOf(id, a, placed)
        }),
    }
  })
