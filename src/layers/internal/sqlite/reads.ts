/**
 * The SQLite driver's reads: typed queries and keyset-paged streams through `@effect/sql`
 * (the client has no `.stream`), by pipeline number on schema version 3 and by pipeline id on a
 * read-only open of an older file. Limits arrive validated and attempts and events flushed (the
 * store front does both).
 *
 * @since 0.1.0
 */
import type { SqlError } from "@effect/sql/SqlError"
import type { Fragment } from "@effect/sql/Statement"
import { Chunk, Effect, Either, Option, Schema, Stream } from "effect"
import * as Traversal from "../../../domain/Traversal.js"
import * as TraversalText from "./traversalText.js"
import * as fs from "node:fs"
import type { StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import {
  ArtifactRecord,
  type EventRecord,
  type PipelineRecord,
  type PipelineState,
  type TaskRecord,
  trusted
} from "../../../domain/Records.js"
import type { ArtifactBackendService } from "../../../services/ArtifactBackend.js"
import {
  latencyOf,
  leaseTarget,
  loadPayload,
  quantileAt,
  quantileRanks,
  succeededIndexOf,
  zeroUsage,
  ACCOUNTED_CONDITION,
  ACCOUNTED_CONDITION_V11,
  ACCOUNTING_COLUMNS,
  cacheFiguresOfRow,
  sqliteCacheFigures,
  ACCOUNTING_COLUMNS_V11,
  SQLITE_POOLED_HIT,
  accountingOrderSql,
  figuresOfRow
} from "../../../services/internal/store/shared.js"
import type {
  CompletionBucket,
  ErrorRow,
  EventFilter,
  Latency,
  LoadedArtifact,
  PipelineAccounting,
  PipelineBundle,
  PipelinesPage,
  SpecCount,
  ResourceUsage,
  StoreDriver,
  StoreStats
} from "../../../services/Store.js"
import { PAGE_SIZE, type PipelineStateAndRun, PROVIDER_ANSWERED_SQL } from "../../../services/internal/store/shared.js"
import { idSet, type IdSet } from "../../../services/internal/store/idSet.js"
import { errorRowOf } from "../../../domain/TaskStore.js"
import { describeSqlError, type SqliteEnv, unavailable, WAL_PENDING } from "./open.js"
import { HANDOFF_EVENT_DATA_SQL, TIMED_TERMINAL, UNADMITTED_PNO } from "./migrations.js"
import {
  ARTIFACT_META,
  ARTIFACT_META_V5,
  toArtifact,
  toArtifactValues,
  toAttempt,
  toEvent,
  toHandoff,
  toMetric,
  toPipeline,
  toResource,
  toRun,
  toTask
} from "./rows.js"
import { ROWID_CHUNK, toBytes } from "./writer.js"

/**
 * The ids of the succeeded pipelines (`succeededPipelines`), one row per id: the fallback of
 * `SUCCEEDED_SCAN` (with `SUCCEEDED_KEYED`) for a store too big for its one-row answer.
 */
const SUCCEEDED_IDS = "SELECT pipeline_id FROM pipelines WHERE state = 'succeeded'"
/**
 * What `succeededPipelines` reads first, in one row from one scan of the table in rowid order
 * (~0.09 s of CPU for 200,000 rows, where the state index's packed ids plus the separate scan
 * for the keyed rows cost ~0.10 s): the count of succeeded pipelines; the content-addressed
 * ids (32 lowercase hex characters) as one blob of 16 bytes each, **in the order the rows were
 * written** (a resume asks for them in its source's order, which is that order: the id set
 * then finds each one at the next position instead of probing its table, see `idSet`); and the
 * `[pipeline_id, spec_digest, seed_digest]` of the rows stored with an explicit key, as a JSON
 * array. The ids that are not 32 lowercase hex characters (explicit keys) come from
 * `SUCCEEDED_OTHER_IDS`, read only when the count says there are some. A store too big for one
 * row (SQLite's 1 GB string limit, ~30 million ids) falls back to `SUCCEEDED_IDS` and
 * `SUCCEEDED_KEYED`.
 */
const HEX_ID = "length(pipeline_id) = 32 AND lower(pipeline_id) = pipeline_id AND unhex(pipeline_id) IS NOT NULL"
const SUCCEEDED_SCAN = `SELECT count(*), unhex(group_concat(CASE WHEN ${HEX_ID} THEN pipeline_id END, '')), ` +
  "json_group_array(json_array(pipeline_id, spec_digest, seed_digest)) FILTER (WHERE key IS NOT NULL) " +
  "FROM pipelines NOT INDEXED WHERE state = 'succeeded'"
const SUCCEEDED_OTHER_IDS = `SELECT pipeline_id FROM pipelines WHERE state = 'succeeded' AND NOT (${HEX_ID})`

/**
 * The id set of a `SUCCEEDED_SCAN` row (`[count, blob | null, …]`), reading the other ids
 * with `others` when the blob holds fewer than `count`.
 */
const packedIds = (row: ReadonlyArray<unknown> | undefined, others: () => ReadonlyArray<unknown>): IdSet => {
  const bytes = row?.[1]
  const packed = bytes instanceof Uint8Array ? bytes : new Uint8Array(0)
  return idSet(packed, Number(row?.[0] ?? 0) > packed.length / 16 ? others().map(String) : [])
}
/** The keyed rows of a `SUCCEEDED_SCAN` row: its JSON array of `[id, specDigest, seedDigest]`. */
const keyedRows = (row: ReadonlyArray<unknown> | undefined): ReadonlyArray<ReadonlyArray<unknown>> => {
  const text = row?.[2]
  return typeof text === "string" && text !== "[]" ? JSON.parse(text) as ReadonlyArray<ReadonlyArray<unknown>> : []
}
// the fallback's keyed rows: `key` is in no index, so a scan of the table in rowid order
const SUCCEEDED_KEYED =
  "SELECT pipeline_id, spec_digest, seed_digest FROM pipelines NOT INDEXED WHERE key IS NOT NULL AND state = 'succeeded'"

/**
 * The most resources whose usage `resourceUsage` sums in one scan of the attempts (each adds
 * a few filtered aggregates to every row); beyond it, rows are grouped (sorted) by lease.
 */
const KNOWN_GROUPS_MAX = 24

/** The bit of `UNKNOWN_GROUP` in a lease mask (above every known group's bit, see `KNOWN_GROUPS_MAX`). */
const UNKNOWN_BIT = KNOWN_GROUPS_MAX
/** A lease mask's bit for a lease on a target that is not a known resource. */
const UNKNOWN_GROUP = 2 ** UNKNOWN_BIT

/** One scope's attempt totals, as `stats` reads them (columns of `ACCOUNTING_COLUMNS`, `n`, `r`). */
type AttemptFigures = {
  readonly n: number
  readonly r: number
  readonly calls: number
  readonly refused: number
  readonly failed_calls: number
  readonly cache_hits: number
  readonly model_call_hits: number
  readonly tokens_in: number
  readonly tokens_out: number
  readonly cost_usd: number
  readonly estimated: number
  readonly unpriced: number
}

/**
 * The reads of the SQLite driver (see `Store.StoreDriver`) of an open store, using `backend`
 * for blob payloads.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeReads = (
  env: SqliteEnv,
  backend: ArtifactBackendService
): Pick<StoreDriver, "getRun" | "latestRun" | "listRuns" | "getPipelines" | "getPipeline" | "pipelineStates" | "takenPipelines" | "getArtifact" | "listArtifacts" | "metrics" | "resources" | "stats" | "resourceUsage" | "pipelineAccounting" | "succeededPipelines" | "errors" | "events" | "countEvents" | "pipelinesBySpec" | "pipelinesPage" | "completions" | "loadBundles" | "streamPipelines" | "streamTasks" | "streamAttempts" | "streamEvents" | "streamArtifacts"> & { readonly traversal: NonNullable<StoreDriver["traversal"]> } => {
  const { accounting, fromSql, handoffEvents, indexed, numbered, path, sql, visits } = env
  /** Artifact columns: an older schema (read-only) has no visit columns. */
  const META = visits ? ARTIFACT_META : ARTIFACT_META_V5
  /** Only the active occurrence of a station (every row of an older schema is). */
  const activeOnly = visits ? sql` AND active IS NOT 0` : sql``
  const q = <A>(e: Effect.Effect<A, SqlError>) => Effect.mapError(e, fromSql)
  const rows = (e: Effect.Effect<ReadonlyArray<unknown>, SqlError>) =>
    q(e as Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>)

  const refine = (a: ArtifactRecord): Effect.Effect<ArtifactRecord, StoreUnavailable> =>
    a.storage === "blob" && a.blobRef !== null
      ? Effect.map(backend.exists(a.blobRef), (ok) => ok ? a : trusted(ArtifactRecord, { ...a, available: false }))
      : Effect.succeed(a)

  /** Keyset pager: `fetch(cursor)` returns one page (at most PAGE_SIZE rows) after `cursor`. */
  const pager = <C, A>(
    fetch: (cursor: C | undefined) => Effect.Effect<ReadonlyArray<Record<string, unknown>>, StoreUnavailable>,
    cursorOf: (row: Record<string, unknown>) => C,
    map: (row: Record<string, unknown>) => A
  ): Stream.Stream<A, StoreUnavailable> =>
    Stream.paginateChunkEffect(undefined as C | undefined, (cursor) =>
      Effect.map(fetch(cursor), (page) => {
        const last = page[page.length - 1]
        return [
          Chunk.unsafeFromArray(page.map(map)),
          page.length < PAGE_SIZE || last === undefined ? Option.none() : Option.some(cursorOf(last) as C | undefined)
        ] as const
      }))

  /**
   * The rows of one pipeline in a child table. Version 3: by its number (the leading column
   * of every per-pipeline index), or among the unadmitted rows when it has none; older
   * versions: by `pipeline_id`.
   */
  const byPipeline = (pipelineId: string) =>
    numbered
      ? sql`pno = coalesce((SELECT pno FROM pipelines WHERE pipeline_id = ${pipelineId}), ${UNADMITTED_PNO}) AND pipeline_id = ${pipelineId}`
      : sql`pipeline_id = ${pipelineId}`
  /** The rows of admitted pipelines among `ids` in a child table (as {@link byPipeline}). */
  const byPipelines = (ids: ReadonlyArray<string>) =>
    numbered
      ? sql`pno IN (SELECT pno FROM pipelines WHERE ${sql.in("pipeline_id", ids)})`
      : sql.in("pipeline_id", ids)
  /** Pipeline grouping of child-table orders: admission order (version 3) or pipeline id. */
  const pipelineKey = numbered ? "pno" : "pipeline_id"
  /** Task rows in station order, each station's visits in order (0 first), then taskRunId. */
  const taskOrder = visits ?
    sql`${sql(pipelineKey)}, seq, coalesce(visit, 0), task_run_id` :
    sql`${sql(pipelineKey)}, seq, task_run_id`

  /** The first row (artifact metadata and `payload`) with its payload loaded, or `None`. */
  const loadedRow = (r: ReadonlyArray<Record<string, unknown>>): Effect.Effect<Option.Option<LoadedArtifact>, StoreUnavailable> => {
    const row = r[0]
    if (row === undefined) return Effect.succeed(Option.none())
    const meta = toArtifact(row)
    return Effect.map(loadPayload(meta.storage, toBytes(row.payload), meta.blobRef, backend), (payload) =>
      Option.some({
        artifact: meta.available === (payload !== undefined)
          ? meta
          : trusted(ArtifactRecord, { ...meta, available: payload !== undefined }),
        payload
      }))
  }

  const validState = Schema.decodeUnknownEither(Traversal.VisitState)
  /** The stored text of a pipeline's state (either form, see `traversalText.ts`), validated. */
  const decodeState = (pipelineId: string, text: string) =>
    Either.flatMap(
      Either.try({ try: () => TraversalText.decode(pipelineId, text), catch: (e) => ({ message: String(e) }) }),
      (u) => validState(u)
    )
  /** The traversal reads (schema version 6; an older schema has no traversal: empty answers). */
  const traversal: NonNullable<StoreDriver["traversal"]> = {
    visitState: (pipelineId) =>
      !visits ? Effect.succeed(Option.none()) : Effect.flatMap(
        rows(sql`SELECT traversal FROM pipelines WHERE pipeline_id = ${pipelineId}`),
        (r) => {
          const text = r[0]?.traversal
          if (typeof text !== "string") return Effect.succeed(Option.none())
          const decoded = decodeState(pipelineId, text)
          return Either.isRight(decoded) ? Effect.succeed(Option.some(decoded.right)) : Effect.fail(
            unavailable(path, `store ${path}: the traversal state of pipeline ${pipelineId} is corrupt: ${decoded.left.message}`)
          )
        }
      ),
    handoffs: (o) => {
      if (!visits) return Effect.succeed([])
      const conds = [sql`1=1`]
      if (o.pipelineId !== undefined) conds.push(byPipeline(o.pipelineId))
      if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
      const query = o.limit === undefined ?
        sql`SELECT * FROM handoffs WHERE ${sql.and(conds)} ORDER BY handoff_id` :
        sql`SELECT * FROM (SELECT * FROM handoffs WHERE ${sql.and(conds)} ORDER BY handoff_id DESC LIMIT ${o.limit}) ORDER BY handoff_id`
      return Effect.map(rows(query), (r) => r.map(toHandoff))
    },
    getArtifactById: (address) => {
      const at = Traversal.parseAddress(address)
      if (at === undefined) return Effect.succeed(Option.none())
      return Effect.flatMap(
        rows(
          sql`SELECT ${sql.literal(META)}, payload FROM artifacts WHERE ${byPipeline(at.pipelineId)} AND seq = ${at.seq} AND ${
            visits ? sql`coalesce(visit, 0) = ${at.visit}` : sql`${at.visit} = 0`
          } ORDER BY artifact_id DESC LIMIT 1`
        ),
        loadedRow
      )
    }
  }

  const eventConds = (f: EventFilter) => {
    const c = []
    if (f.pipelineId !== undefined) c.push(byPipeline(f.pipelineId))
    if (f.runId !== undefined) c.push(sql`run_id = ${f.runId}`)
    if (f.kind !== undefined) c.push(sql`kind = ${f.kind}`)
    return c
  }

  // ---- the ledger's events (schema version 17, see `MIGRATION_0017`) -----------------------
  // A transition's `pipeline.handoff` event is its ledger row (`handoffs` with an `event_id`),
  // read with the rows of `events` and merged by event id. Among such ledger rows `handoff_id`
  // order is `event_id` order, so the ledger's own indexes (by run, by pipeline, the rowid)
  // read them in event order; `handoff_id` is the keyset cursor of the ledger's side.
  /** Whether events matching `f` may be ledger rows. */
  const fromLedger = (f: EventFilter) => handoffEvents && (f.kind === undefined || f.kind === "pipeline.handoff")
  const ledgerConds = (f: EventFilter) => {
    const c = [sql`event_id IS NOT NULL`]
    if (f.pipelineId !== undefined) c.push(byPipeline(f.pipelineId))
    if (f.runId !== undefined) c.push(sql`run_id = ${f.runId}`)
    return c
  }
  /** A ledger row as the row of `events` its event was (and its `handoff_id`). */
  const LEDGER_EVENT = sql.literal(
    `event_id, 'pipeline.handoff' AS kind, pipeline_id, run_id, ${HANDOFF_EVENT_DATA_SQL} AS data, ts, handoff_id`
  )
  /** Two lists of events, each in event id order, as one. */
  const byEventId = (a: ReadonlyArray<EventRecord>, b: ReadonlyArray<EventRecord>): Array<EventRecord> => {
    const out: Array<EventRecord> = []
    let i = 0
    let k = 0
    while (i < a.length && k < b.length) out.push(a[i]!.eventId < b[k]!.eventId ? a[i++]! : b[k++]!)
    while (i < a.length) out.push(a[i++]!)
    while (k < b.length) out.push(b[k++]!)
    return out
  }
  /** The number of events matching `f`, in `events` and in the ledger. */
  const countOf = (f: EventFilter, conds: ReadonlyArray<Fragment>) =>
    Effect.map(
      Effect.zip(
        rows(sql`SELECT count(*) AS n FROM events WHERE ${sql.and(conds)}`),
        fromLedger(f) ? rows(sql`SELECT count(*) AS n FROM handoffs WHERE ${sql.and(ledgerConds(f))}`) : Effect.succeed([])
      ),
      ([a, b]) => Number(a[0]?.n ?? 0) + Number(b[0]?.n ?? 0)
    )
  /**
   * The events matching `o` in event id order, from two keyset-paged sides (`events` by
   * `event_id`, the ledger by `handoff_id`), up to `hwm`.
   */
  const mergedEventStream = (o: EventFilter, hwm: number): Stream.Stream<EventRecord, StoreUnavailable> => {
    interface Side {
      readonly rows: ReadonlyArray<EventRecord>
      readonly at: number
      readonly cursor: number
      readonly done: boolean
    }
    const start: Side = { rows: [], at: 0, cursor: 0, done: false }
    const fill = (side: Side, ledger: boolean): Effect.Effect<Side, StoreUnavailable> =>
      side.at < side.rows.length || side.done
        ? Effect.succeed(side)
        : Effect.map(
          ledger
            ? rows(
              sql`SELECT ${LEDGER_EVENT} FROM handoffs WHERE ${
                sql.and([sql`handoff_id > ${side.cursor}`, sql`event_id <= ${hwm}`, ...ledgerConds(o)])
              } ORDER BY handoff_id LIMIT ${PAGE_SIZE}`
            )
            : rows(
              sql`SELECT * FROM events WHERE ${
                sql.and([sql`event_id > ${side.cursor}`, sql`event_id <= ${hwm}`, ...eventConds(o)])
              } ORDER BY event_id LIMIT ${PAGE_SIZE}`
            ),
          (page) => ({
            rows: page.map(toEvent),
            at: 0,
            cursor: page.length === 0 ? side.cursor : Number(page[page.length - 1]![ledger ? "handoff_id" : "event_id"]),
            done: page.length < PAGE_SIZE
          })
        )
    return Stream.paginateChunkEffect({ stored: start, ledger: start }, (state) =>
      Effect.map(Effect.zip(fill(state.stored, false), fill(state.ledger, true)), ([a, b]) => {
        const out: Array<EventRecord> = []
        let i = a.at
        let k = b.at
        for (;;) {
          const hasA = i < a.rows.length
          const hasB = k < b.rows.length
          if (hasA && hasB) out.push(a.rows[i]!.eventId < b.rows[k]!.eventId ? a.rows[i++]! : b.rows[k++]!)
          else if (hasA && b.done) out.push(a.rows[i++]!)
          else if (hasB && a.done) out.push(b.rows[k++]!)
          else break
        }
        const next = { stored: { ...a, at: i }, ledger: { ...b, at: k } }
        const finished = a.done && b.done && i >= a.rows.length && k >= b.rows.length
        return [Chunk.unsafeFromArray(out), finished ? Option.none() : Option.some(next)] as const
      }))
  }

  const getRun = (runId: string) =>
    Effect.map(rows(sql`SELECT * FROM runs WHERE run_id = ${runId}`), (r) => Option.map(Option.fromNullable(r[0]), toRun))


  const PERCENTILES = [0.5, 0.95, 0.99] as const
  /**
   * p50/p95/p99 of `endedAt - startedAt` over terminal pipelines. Schema version 2: a count
   * and, per needed rank, one `LIMIT 1 OFFSET k` read of the covering partial index on the
   * duration (from whichever end is nearer), so only a few values leave SQLite. Version 1
   * (a read-only open of an un-migrated store): every duration, sorted by SQLite.
   */
  const latency = (runId: string | undefined): Effect.Effect<Latency | null, StoreUnavailable> =>
    Effect.gen(function*() {
      const where = runId === undefined
        ? sql`${sql.literal(TIMED_TERMINAL)}`
        : sql`run_id = ${runId} AND ${sql.literal(TIMED_TERMINAL)}`
      if (!indexed) {
        const durations = yield* q(sql`SELECT ended_at - started_at AS d FROM pipelines WHERE ${where} ORDER BY d`.values)
        return latencyOf(durations.map((d) => Number(d[0])))
      }
      const [c] = yield* rows(sql`SELECT count(*) AS n FROM pipelines WHERE ${where}`)
      const n = Number(c?.n ?? 0)
      if (n === 0) return null
      const values = new Map<number, number>()
      for (const k of quantileRanks(n, PERCENTILES)) {
        const fromTop = k > (n - 1) / 2
        const [r] = yield* rows(
          sql`SELECT ended_at - started_at AS d FROM pipelines WHERE ${where} ORDER BY ended_at - started_at ${
            sql.literal(fromTop ? "DESC" : "ASC")
          } LIMIT 1 OFFSET ${fromTop ? n - 1 - k : k}`
        )
        values.set(k, Number(r?.d ?? 0))
      }
      const at = (k: number) => values.get(k) ?? 0
      return { p50: quantileAt(n, at, 0.5), p95: quantileAt(n, at, 0.95), p99: quantileAt(n, at, 0.99) }
    })

  /** Loads the payloads asked for (inline bytes from the row, blobs from the backend). */
  const bundleArtifact = (row: Record<string, unknown>, wanted: boolean): Effect.Effect<LoadedArtifact, StoreUnavailable> =>
    loadedArtifact(toArtifact(row), wanted, row.payload)

  /**
   * An artifact with its payload when `wanted`: an inline payload is `inlineBytes` (the
   * column the caller read), a blob is read from the backend; when not wanted, the metadata
   * with a blob's availability refined.
   */
  const loadedArtifact = (
    meta: ArtifactRecord,
    wanted: boolean,
    inlineBytes: unknown
  ): Effect.Effect<LoadedArtifact, StoreUnavailable> => {
    if (!wanted) return Effect.map(refine(meta), (artifact) => ({ artifact, payload: undefined }))
    if (meta.storage === "inline") return Effect.succeed({ artifact: meta, payload: toBytes(inlineBytes) ?? undefined })
    return Effect.map(loadPayload(meta.storage, null, meta.blobRef, backend), (payload) => ({
      artifact: meta.available === (payload !== undefined) ? meta : trusted(ArtifactRecord, { ...meta, available: payload !== undefined }),
      payload
    }))
  }

  /**
   * Frames the last writer could not checkpoint into the database file at close (recorded by
   * {@link closeWriter}), when its WAL still holds them (a later writer or checkpointer that
   * emptied the WAL makes them moot): 0 otherwise.
   */
  const walPending = Effect.map(
    rows(sql`SELECT value FROM store_meta WHERE key = ${WAL_PENDING}`),
    (r) => {
      const n = Number(r[0]?.value ?? 0)
      if (!(n > 0)) return 0
      let walBytes = 0
      try {
        walBytes = fs.statSync(`${path}-wal`).size // stat(2): no descriptor opened
      } catch {
        walBytes = 0
      }
      return walBytes > 0 ? n : 0
    }
  )

  // --- per-resource usage (`resourceUsage`) ------------------------------------------------
  /** Attempts (as `t`) in a scope: every attempt, or one run's. */
  const usageScope = (runId: string | undefined, t: string) => runId === undefined ? sql`1=1` : sql`${sql(t)}.run_id = ${runId}`
  const visitOf = (t: string) => visits ? sql`coalesce(${sql(t)}.visit, 0)` : sql`0`
  // the same task run (pipeline, seq, visit), by the leading column of attempts_pipeline
  const sameRun = numbered
    ? sql`b.pno = p.pno AND b.pipeline_id = p.pipeline_id`
    : sql`b.pipeline_id = p.pipeline_id`
  /**
   * The retries of some retry decisions (`p`, the attempts `decisions` selects): each the
   * next attempt in scope of its task run after one whose decision was to retry.
   */
  const retriedAfter = (runId: string | undefined, decisions: Fragment) =>
    sql`SELECT id FROM (SELECT (SELECT min(b.attempt_id) FROM attempts b WHERE ${sameRun} AND b.seq = p.seq AND ${
      visitOf("b")
    } = ${visitOf("p")} AND b.attempt_id > p.attempt_id AND ${usageScope(runId, "b")}) AS id FROM attempts p WHERE ${decisions}) WHERE id IS NOT NULL`
  // a lease id's target is everything before its last '#' (`leaseTarget`); SQLite has no
  // last-index function, so rows are grouped by the id without its trailing digits (the
  // `#n` of a lease id; ids without '#' as they are), whose target is the same, and the
  // few groups are named in JavaScript
  const group = sql`CASE WHEN instr(j.value, '#') > 0 THEN rtrim(j.value, '0123456789') ELSE j.value END`
  // an attempt counts once per target: a lease on a target one of its earlier leases had
  // is skipped (that target computed in SQL: rtrim drops every trailing character but
  // '#', then the '#' goes)
  const targetOf = (v: string) =>
    sql`CASE WHEN instr(${sql.literal(v)}, '#') = 0 THEN ${sql.literal(v)} ELSE substr(rtrim(${sql.literal(v)}, replace(${
      sql.literal(v)
    }, '#', '')), 1, length(rtrim(${sql.literal(v)}, replace(${sql.literal(v)}, '#', ''))) - 1) END`
  const first = sql`CASE WHEN j.key = 0 THEN 1 ELSE NOT EXISTS (SELECT 1 FROM json_each(a.lease_ids) k WHERE k.key < j.key AND ${
    targetOf("k.value")
  } = ${targetOf("j.value")}) END`
  /**
   * An attempt's lease groups (`a.lease_ids`) as a bit mask over `known` (bit `i` for
   * `known[i]`, {@link UNKNOWN_GROUP} for a lease of any other group; each group once, as
   * `first` counts a target once; 0 without leases). A text that is exactly
   * `["` + the JSON string of `known[i]` without its closing quote + digits + `"]` (what the
   * writer stores for one lease of a known resource) is one lease of group `i`, found by
   * comparing the text with the group's prefix range: no JSON is parsed and no function
   * called but two GLOBs. The check is on the text alone (any other text, even an equivalent
   * JSON, takes the `json_each` path), so the answer is the same as parsing every row.
   */
  const leaseMask = (known: ReadonlyArray<string>) => {
    const maskOfJson = known.length === 0
      ? sql`(SELECT sum(DISTINCT ${sql.literal(String(UNKNOWN_GROUP))}) FROM json_each(a.lease_ids) j)`
      : sql`(SELECT sum(DISTINCT 1 << CASE ${group} ${
        sql.join(" ", false)(known.map((g, i) => sql`WHEN ${g} THEN ${sql.literal(String(i))}`))
      } ELSE ${sql.literal(String(UNKNOWN_BIT))} END) FROM json_each(a.lease_ids) j)`
    // a known group ends with '#': its texts are those from `["<group>` up to, not including,
    // the same prefix with '#' raised to '$' (byte order); "one '#', then only digits up to
    // the closing `"]`" holds when the text ends with `"]` and no '#' is followed by a
    // non-digit before it
    const ranges = known.map((g, i) => {
      const lo = `[${JSON.stringify(g).slice(0, -1)}`
      return sql`WHEN a.lease_ids >= ${lo} AND a.lease_ids < ${`${lo.slice(0, -1)}$`} THEN ${sql.literal(String(2 ** i))}`
    })
    return sql`CASE WHEN a.lease_ids = '[]' THEN 0 WHEN NOT a.lease_ids GLOB '*"]' OR a.lease_ids GLOB '*#*[^0-9]*"]' THEN ${maskOfJson} ${
      sql.join(" ", false)(ranges)
    } ELSE ${maskOfJson} END`
  }
  /** The retries of `retried` (ids of retry attempts) per lease group: `[g, n]` rows. */
  const retriesByGroup = (retried: Fragment) =>
    q(
      sql`SELECT ${group} AS g, count(*) FROM (${retried}) r JOIN attempts a ON a.attempt_id = r.id, json_each(a.lease_ids) j WHERE ${first} GROUP BY g`
        .values
    )
  /** Usage per target, from usage per lease group (`g` as SQL gives it), sorted by target. */
  const usageByTarget = () => {
    const out = new Map<string, ReturnType<typeof zeroUsage>>()
    return {
      entry: (g: unknown) => {
        const target = leaseTarget(String(g))
        let u = out.get(target)
        if (u === undefined) {
          u = zeroUsage()
          out.set(target, u)
        }
        return u
      },
      result: (): ReadonlyArray<ResourceUsage> =>
        Array.from(out, ([target, u]): ResourceUsage => ({ target, ...u })).sort((a, b) =>
          a.target < b.target ? -1 : a.target > b.target ? 1 : 0
        )
    }
  }

  /**
   * Per-target usage of the attempts in scope by `GROUP BY` over every (attempt, lease) row:
   * any lease ids, at the price of a sort of all those rows (see {@link usageInOneScan}).
   */
  const usageGrouped = (runId: string | undefined): Effect.Effect<ReadonlyArray<ResourceUsage>, StoreUnavailable> =>
    Effect.gen(function*() {
      // token and cost accounting (schema version 12): sums over the same rows
      const figures = accounting
        ? sql`, coalesce(sum(a.tokens_in), 0), coalesce(sum(a.tokens_out), 0), coalesce(sum(a.cost_usd), 0), count(*) FILTER (WHERE a.tokens_estimated = 1), count(*) FILTER (WHERE a.cost_usd IS NULL AND coalesce(a.tokens_in, 0) + coalesce(a.tokens_out, 0) > 0)`
        : sql``
      const counts = yield* q(
        sql`SELECT ${group} AS g, count(*), count(*) FILTER (WHERE a.error_class = 'rate_limit')${figures} FROM attempts a, json_each(a.lease_ids) j WHERE ${
          usageScope(runId, "a")
        } AND ${first} GROUP BY g`.values
      )
      // the retry decisions (`json_type` 'true': JSON true only, as `decision.retry === true`),
      // from which the (few) retries are found rather than by ordering every attempt
      const retries = yield* retriesByGroup(
        retriedAfter(runId, sql`${usageScope(runId, "p")} AND p.decision IS NOT NULL AND json_type(p.decision, '$.retry') = 'true'`)
      )
      const out = usageByTarget()
      for (const [g, n, limited, tin, tout, cost, estimated, unpriced] of counts) {
        const u = out.entry(g)
        u.attempts += Number(n)
        u.rateLimited += Number(limited)
        if (accounting) {
          u.tokensIn += Number(tin)
          u.tokensOut += Number(tout)
          u.costUsd += Number(cost)
          u.estimated += Number(estimated)
          u.unpriced += Number(unpriced)
        }
      }
      for (const [g, n] of retries) out.entry(g).retries += Number(n)
      return out.result()
    })

  /**
   * Per-target usage of the attempts in scope in one scan of them, without a sort, when every
   * lease is on a resource of the `resources` table (`known`: their lease groups
   * `pool/resourceId#`, in order). The scan (a co-routine, so each row's values are computed
   * once) gives each attempt the set of its known groups as a bit mask (bit `i`: `known[i]`;
   * bit {@link UNKNOWN_GROUP}: a lease on another target); the aggregate counts each known
   * group's attempts and rate limits under a filter, beside the scope's own totals (what
   * `stats` counts, kept in {@link stash}) and the ids of the retry decisions, whose retries a
   * second query finds by id. Token and cost figures come from a grouped query over the
   * attempts that carry any (none read when no attempt does). `undefined` when some lease is
   * on another target (the caller then groups every row).
   *
   * The usual attempt, one lease, is settled without parsing its JSON (see {@link leaseMask});
   * `whole`: the scope is (nearly) the whole table, read in table order rather than through
   * the run index.
   */
  const usageInOneScan = (
    runId: string | undefined,
    known: ReadonlyArray<string>,
    whole: boolean
  ): Effect.Effect<{ readonly usage: ReadonlyArray<ResourceUsage>; readonly figures: AttemptFigures } | undefined, StoreUnavailable> =>
    Effect.gen(function*() {
      // an attempt with a model call, a token count or a cost (schema version 12)
      const carries = "(a.tokens_in IS NOT NULL OR a.tokens_out IS NOT NULL OR a.cost_usd IS NOT NULL OR a.tokens_estimated = 1)"
      // a call sent and not answered: on a pool resource, no tokens, not a cache hit (see `ACCOUNTING_COLUMNS`)
      const unanswered = "(a.tokens_in IS NULL AND a.tokens_out IS NULL AND a.outcome <> 'cache_hit' AND a.lease_ids <> '[]')"
      // a decision the runner wrote for an attempt it did not retry (its first member, which
      // `json_extract` reads, is `"retry":false`): settled by comparing its text, not parsing it
      const kept = sql.literal(`(a.decision >= '{"retry":false,' AND a.decision < '{"retry":false-')`)
      const scope = whole && runId !== undefined ? sql`+a.run_id = ${runId}` : usageScope(runId, "a")
      // `OFFSET 0`: the subquery is not flattened into the aggregate (its values computed once per row)
      const scan = sql`SELECT ${leaseMask(known)} AS m,
        CASE WHEN ${kept} THEN 0 ELSE json_extract(a.decision, '$.retry') IS 1 END AS r,
        CASE WHEN ${kept} THEN NULL WHEN a.decision IS NOT NULL AND json_type(a.decision, '$.retry') = 'true' THEN a.attempt_id END AS rid,
        a.error_class = 'rate_limit' AS rl, a.outcome = 'cache_hit' AS hit, ${sql.literal(accounting ? carries : "0")} AS acc,
        ${sql.literal(accounting ? unanswered : "0")} AS un, a.error_class IN ('upstream', 'timeout') AS ef,
        coalesce(a.error_class IN (${sql.literal(PROVIDER_ANSWERED_SQL)}), 0) AS pa,
        ${sql.literal(accounting ? `CASE WHEN ${unanswered} AND NOT ${carries} THEN json_array_length(a.lease_ids) END` : "NULL")} AS ul,
        CASE WHEN a.outcome = 'cache_hit' THEN ${sql.literal(SQLITE_POOLED_HIT.replace("decision", "a.decision"))} ELSE 0 END AS mch
        FROM attempts a WHERE ${scope} LIMIT -1 OFFSET 0`
      const perGroup = known.map((_, i) => `, count(*) FILTER (WHERE m & ${2 ** i}), count(*) FILTER (WHERE m & ${2 ** i} AND rl)`).join("")
      const [row] = yield* q(
        sql`SELECT count(*), coalesce(sum(r), 0), count(*) FILTER (WHERE acc), count(*) FILTER (WHERE hit),
          count(*) FILTER (WHERE m & ${sql.literal(String(UNKNOWN_GROUP))}),
          '[' || coalesce(group_concat(rid), '') || ']', count(*) FILTER (WHERE un AND rl), count(*) FILTER (WHERE un AND ef),
          coalesce(sum(ul) FILTER (WHERE pa), 0)${
          sql.literal(perGroup)
        }, count(*) FILTER (WHERE mch) FROM (${scan})`.values
      )
      if (row === undefined || Number(row[4]) > 0) return undefined
      const out = usageByTarget()
      known.forEach((g, i) => {
        const n = Number(row[9 + 2 * i])
        if (n === 0) return
        const u = out.entry(g)
        u.attempts += n
        u.rateLimited += Number(row[10 + 2 * i])
      })
      const carried = Number(row[2])
      let totals: Record<string, unknown> = {}
      if (carried > 0) {
        // the attempts with token or cost figures: their totals (each attempt once, summed in
        // the order `stats` sums them) and their figures per lease group (each attempt once per
        // target), grouped as in {@link usageGrouped}
        const [t] = yield* rows(
          sql`SELECT ${sql.literal(ACCOUNTING_COLUMNS)} FROM attempts a WHERE ${usageScope(runId, "a")} AND ${sql.literal(carries)}`
        )
        totals = t ?? {}
        const found = yield* rows(
          sql`SELECT ${group} AS g, coalesce(sum(a.tokens_in), 0) AS tokens_in, coalesce(sum(a.tokens_out), 0) AS tokens_out,
            coalesce(sum(a.cost_usd), 0) AS cost_usd, count(*) FILTER (WHERE a.tokens_estimated = 1) AS estimated,
            count(*) FILTER (WHERE a.cost_usd IS NULL AND coalesce(a.tokens_in, 0) + coalesce(a.tokens_out, 0) > 0) AS unpriced
            FROM attempts a, json_each(a.lease_ids) j WHERE ${usageScope(runId, "a")} AND ${sql.literal(carries)} AND ${first} GROUP BY g`
        )
        for (const r of found) {
          const u = out.entry(r.g)
          u.tokensIn += Number(r.tokens_in)
          u.tokensOut += Number(r.tokens_out)
          u.costUsd += Number(r.cost_usd)
          u.estimated += Number(r.estimated)
          u.unpriced += Number(r.unpriced)
        }
      }
      const figures: AttemptFigures = {
        n: Number(row[0]),
        r: Number(row[1]),
        // the calls sent: those of the attempts with tokens, and each lease of an attempt whose
        // call got no tokens (outside `carries`) and failed with a class a provider's answer gets (a 429, a 5xx, a timeout, a 400), from the scan
        calls: Number(totals.calls ?? 0) + Number(row[8]),
        refused: Number(row[6]),
        failed_calls: Number(row[7]),
        cache_hits: Number(row[3]),
        model_call_hits: Number(row[9 + 2 * known.length]),
        tokens_in: Number(totals.tokens_in ?? 0),
        tokens_out: Number(totals.tokens_out ?? 0),
        cost_usd: Number(totals.cost_usd ?? 0),
        estimated: Number(totals.estimated ?? 0),
        unpriced: Number(totals.unpriced ?? 0)
      }
      const ids = String(row[5])
      if (ids !== "[]") {
        const retries = yield* retriesByGroup(retriedAfter(runId, sql`p.attempt_id IN (SELECT value FROM json_each(${ids}))`))
        for (const [g, n] of retries) out.entry(g).retries += Number(n)
      }
      return { usage: out.result(), figures }
    })

  /** SQLite's `data_version` of the read connection: changes when another connection commits. */
  const dataVersion = Effect.map(q(sql`PRAGMA data_version`.values), (r) => Number(r[0]?.[0] ?? 0))
  /**
   * The scope totals of the last one-scan `resourceUsage` (see {@link usageInOneScan}), taken
   * by the next `stats` of the same scope when nothing was committed since (the same
   * `data_version`): `report` reads both, and the attempts are scanned once.
   */
  let stash: { readonly runId: string | undefined; readonly version: number; readonly figures: AttemptFigures } | undefined
  /** The stashed totals of `runId`'s scope when still current (taken: used once), else `undefined`. */
  const takeStash = (runId: string | undefined): Effect.Effect<AttemptFigures | undefined, StoreUnavailable> =>
    Effect.suspend(() => {
      const s = stash
      stash = undefined
      if (s === undefined || s.runId !== runId) return Effect.succeed(undefined)
      return Effect.map(dataVersion, (v) => (v === s.version ? s.figures : undefined))
    })

  return {
    traversal,
    getRun,
    latestRun: Effect.map(
      rows(sql`SELECT * FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1`),
      (r) => Option.map(Option.fromNullable(r[0]), toRun)
    ),
    listRuns: Effect.map(rows(sql`SELECT * FROM runs ORDER BY started_at, run_id`), (r) => r.map(toRun)),
    getPipelines: (ids) =>
      Effect.map(
        Effect.forEach(
          Array.from({ length: Math.ceil(ids.length / 500) }, (_, i) => ids.slice(i * 500, (i + 1) * 500)),
          (chunk) => rows(sql`SELECT * FROM pipelines WHERE ${sql.in("pipeline_id", chunk)}`)
        ),
        (pages) => {
          const out = new Map<PipelineId, PipelineRecord>()
          for (const page of pages) for (const r of page) out.set(String(r.pipeline_id) as PipelineId, toPipeline(r))
          return out
        }
      ),
    getPipeline: (id) =>
      Effect.map(rows(sql`SELECT * FROM pipelines WHERE pipeline_id = ${id}`), (r) => Option.map(Option.fromNullable(r[0]), toPipeline)),
    pipelineStates: (ids, among) =>
      Effect.map(
        Effect.forEach(
          Array.from({ length: Math.ceil(ids.length / 500) }, (_, i) => ids.slice(i * 500, (i + 1) * 500)),
          (chunk) =>
            rows(
              among === undefined
                ? sql`SELECT pipeline_id, state, run_id FROM pipelines WHERE ${sql.in("pipeline_id", chunk)}`
                : among.length === 0
                ? sql`SELECT pipeline_id, state, run_id FROM pipelines WHERE 0`
                : sql`SELECT pipeline_id, state, run_id FROM pipelines WHERE ${sql.in("pipeline_id", chunk)} AND ${sql.in("state", among)}`
            )
        ),
        (pages) => {
          const out = new Map<PipelineId, PipelineStateAndRun>()
          for (const page of pages) {
            for (const r of page) {
              out.set(String(r.pipeline_id) as PipelineId, { state: r.state as PipelineState, runId: String(r.run_id) as RunId })
            }
          }
          return out
        }
      ),

    // the run's pipelines (its task rows, attempt rows, `pipeline.interrupted` events: each
    // through its run-id index) whose row is filed under another run now, per that run; the
    // ones it stopped (its interrupted events, and the `pipeline.abandoned` events of runs that
    // claimed them after it died: through the kind index) are interrupted
    takenPipelines: (runId) => {
      // schema version 3 on: by pipeline number (the run-id index of tasks covers it, and the
      // union sorts integers: about twice as fast as by id over 10^6 rows); before, by id
      const k = sql.literal(numbered ? "pno" : "pipeline_id")
      return Effect.map(
        rows(sql`WITH ran AS (
            SELECT ${k} AS k FROM tasks WHERE run_id = ${runId}
            UNION SELECT ${k} FROM attempts WHERE run_id = ${runId}
            UNION SELECT ${k} FROM events WHERE run_id = ${runId} AND kind = 'pipeline.interrupted' AND pipeline_id IS NOT NULL
          ), stopped AS (
            SELECT ${k} AS k FROM events WHERE run_id = ${runId} AND kind = 'pipeline.interrupted' AND pipeline_id IS NOT NULL
            UNION SELECT ${k} FROM events
              WHERE kind = 'pipeline.abandoned' AND pipeline_id IS NOT NULL AND json_extract(data, '$.run') = ${runId}
          )
          SELECT p.run_id AS run_id,
            sum(CASE WHEN s.k IS NULL THEN 1 ELSE 0 END) AS failed,
            sum(CASE WHEN s.k IS NULL THEN 0 ELSE 1 END) AS interrupted
          FROM ran JOIN pipelines p ON p.${k} = ran.k
          LEFT JOIN stopped s ON s.k = ran.k
          WHERE p.run_id <> ${runId}
          GROUP BY p.run_id ORDER BY p.run_id`),
        (r) => r.map((row) => ({ runId: String(row.run_id) as RunId, failed: Number(row.failed), interrupted: Number(row.interrupted) }))
      )
    },

    getArtifact: (pipelineId, seq) =>
      Effect.flatMap(
        rows(sql`SELECT ${sql.literal(META)}, payload FROM artifacts WHERE ${byPipeline(pipelineId)} AND seq = ${seq}${activeOnly} ORDER BY artifact_id DESC LIMIT 1`),
        loadedRow
      ),
    listArtifacts: (pipelineId) =>
      Effect.flatMap(
        rows(sql`SELECT ${sql.literal(META)} FROM artifacts WHERE ${byPipeline(pipelineId)} ORDER BY seq, artifact_id`),
        (r) => Effect.forEach(r, (row) => refine(toArtifact(row)))
      ),

    metrics: (f) =>
      Effect.map(
        rows(
          f.pipelineId === undefined
            ? sql`SELECT * FROM metrics WHERE run_id = ${f.runId} ORDER BY scope, name`
            : sql`SELECT * FROM metrics WHERE run_id = ${f.runId} AND scope = ${f.pipelineId ?? ""} ORDER BY scope, name`
        ),
        (r) => r.map(toMetric)
      ),
    resources: Effect.map(rows(sql`SELECT * FROM resources ORDER BY pool, resource_id`), (r) => r.map(toResource)),

    stats: (runId) =>
      Effect.gen(function*() {
        const byRun = (col = "run_id") => runId === undefined ? sql`1=1` : sql`${sql(col)} = ${runId}`
        const states = yield* rows(sql`SELECT state, count(*) AS n FROM pipelines WHERE ${byRun()} GROUP BY state`)
        const byState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
        let n = 0
        for (const r of states) {
          byState[r.state as PipelineState] = Number(r.n)
          n += Number(r.n)
        }
        const latencyMs = yield* latency(runId)
        const [tasks] = yield* rows(sql`SELECT count(*) AS n FROM tasks WHERE ${byRun()}`)
        // a retry is the retry policy's decision (`decision.retry`), never a re-run after a kill
        const att = (yield* takeStash(runId)) ?? (yield* rows(
          sql`SELECT count(*) AS n, coalesce(sum(json_extract(decision, '$.retry') IS 1), 0) AS r, ${
            sql.literal(accounting ? ACCOUNTING_COLUMNS : ACCOUNTING_COLUMNS_V11)
          } FROM attempts WHERE ${byRun()}`
        ))[0]
        // the call cache's figures, from the attempt rows' cache notes
        const [cache] = yield* rows(
          runId === undefined ? sql.unsafe(sqliteCacheFigures("1=1")) : sql.unsafe(sqliteCacheFigures("run_id = ?"), [runId])
        )
        const events = yield* countOf(runId === undefined ? {} : { runId: runId as RunId }, [byRun()])
        const [ho] = visits ? yield* rows(sql`SELECT count(*) AS n, count(to_seq) AS b FROM handoffs WHERE ${byRun()}`) : [undefined]
        const resources = yield* Effect.map(rows(sql`SELECT * FROM resources ORDER BY pool, resource_id`), (r) => r.map(toResource))
        const walPendingFrames = yield* walPending
        return {
          pipelines: n,
          byState,
          tasks: Number(tasks?.n ?? 0),
          attemptsTotal: Number(att?.n ?? 0),
          retries: Number(att?.r ?? 0),
          events,
          handoffsTotal: Number(ho?.n ?? 0),
          // (an `end` row has no to_seq)
          handoffsBudgeted: Number(ho?.b ?? 0),
          latencyMs,
          resources,
          accounting: figuresOfRow(att),
          cache: cacheFiguresOfRow(cache as Record<string, unknown> | undefined),
          ...(walPendingFrames > 0 ? { walPendingFrames } : {})
        } satisfies StoreStats
      }),
    // the writer's own connection when there is one: 200k ids as plain strings, without the
    // SQL client's per-row work
    succeededPipelines: env.db === undefined
      ? Effect.orElse(
        Effect.flatMap(q(sql.unsafe(SUCCEEDED_SCAN).values), (rows) => {
          const row = rows[0]
          const packed = row?.[1]
          const keyed = keyedRows(row)
          return Number(row?.[0] ?? 0) > (packed instanceof Uint8Array ? packed.length / 16 : 0)
            ? Effect.map(
              q(sql.unsafe(SUCCEEDED_OTHER_IDS).values),
              (others) => succeededIndexOf(packedIds(row, () => others.map((r) => r[0])), keyed)
            )
            : Effect.succeed(succeededIndexOf(packedIds(row, () => []), keyed))
        }),
        () =>
          Effect.map(
            Effect.zip(q(sql.unsafe(SUCCEEDED_IDS).values), q(sql.unsafe(SUCCEEDED_KEYED).values)),
            ([ids, keyed]) => succeededIndexOf(ids.map((r) => r[0]), keyed)
          )
      )
      : Effect.try({
        try: () => {
          const db = env.db!
          let ids: IdSet | ReadonlyArray<unknown>
          let keyed: ReadonlyArray<ReadonlyArray<unknown>>
          try {
            const row = db.prepare(SUCCEEDED_SCAN).raw(true).get() as ReadonlyArray<unknown> | undefined
            ids = packedIds(row, () => db.prepare(SUCCEEDED_OTHER_IDS).pluck().all())
            keyed = keyedRows(row)
          } catch {
            // too many ids (or keyed rows) for one row: one row per id
            ids = db.prepare(SUCCEEDED_IDS).pluck().all()
            keyed = db.prepare(SUCCEEDED_KEYED).raw(true).all() as ReadonlyArray<ReadonlyArray<unknown>>
          }
          return succeededIndexOf(ids, keyed)
        },
        catch: (cause) => unavailable(path, `read of store ${path} failed: ${describeSqlError(cause)}`, cause)
      }),
    pipelineAccounting: (o = {}) =>
      Effect.gen(function*() {
        if (o.pipelineIds !== undefined && o.pipelineIds.length === 0) return []
        if (o.limit !== undefined && o.limit <= 0) return []
        // only attempts with a model call or a cache hit (the others add nothing), grouped by
        // pipeline: one aggregate over the run's attempts (or the pipelines' own, by index)
        const conds: Array<Fragment> = [sql.literal(accounting ? ACCOUNTED_CONDITION : ACCOUNTED_CONDITION_V11)]
        if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
        if (o.pipelineIds !== undefined) conds.push(byPipelines(o.pipelineIds))
        const found = yield* rows(
          sql`SELECT pipeline_id, ${sql.literal(accounting ? ACCOUNTING_COLUMNS : ACCOUNTING_COLUMNS_V11)} FROM attempts WHERE ${
            sql.and(conds)
          } GROUP BY pipeline_id ORDER BY ${sql.literal(accountingOrderSql(o.orderBy))}${
            o.limit === undefined ? sql`` : sql` LIMIT ${o.limit}`
          }`
        )
        return found.map((r): PipelineAccounting => ({ pipelineId: String(r.pipeline_id) as PipelineId, ...figuresOfRow(r) }))
      }),
    resourceUsage: (runId) =>
      Effect.gen(function*() {
        const version = yield* dataVersion
        const known = (yield* q(sql`SELECT pool, resource_id FROM resources ORDER BY pool, resource_id`.values)).map((
          [pool, resourceId]
        ) => `${String(pool)}/${String(resourceId)}#`)
        if (known.length <= KNOWN_GROUPS_MAX) {
          // one run in the store: its attempts are the table, read in table order
          const whole = runId !== undefined && Number((yield* q(sql`SELECT count(*) FROM runs`.values))[0]?.[0] ?? 0) <= 1
          const fast = yield* usageInOneScan(runId, known, whole)
          if (fast !== undefined) {
            stash = { runId, version, figures: fast.figures }
            return fast.usage
          }
        }
        return yield* usageGrouped(runId)
      }),
    errors: (o) =>
      Effect.map(
        rows(sql`SELECT * FROM pipelines WHERE state = 'failed' ${o.runId === undefined ? sql`` : sql`AND run_id = ${o.runId}`} ORDER BY updated_at DESC, pipeline_id ${o.limit === undefined ? sql`` : sql`LIMIT ${o.limit}`}`),
        (r) => r.map((row): ErrorRow => errorRowOf(toPipeline(row)))
      ),
    events: (o, limit) => {
      const stored = limit === undefined
        ? Effect.map(rows(sql`SELECT * FROM events WHERE ${sql.and(eventConds(o))} ORDER BY event_id`), (r) => r.map(toEvent))
        : Effect.map(
          rows(sql`SELECT * FROM events WHERE ${sql.and(eventConds(o))} ORDER BY event_id DESC LIMIT ${limit}`),
          (r) => r.map(toEvent).reverse()
        )
      if (!fromLedger(o)) return stored
      const ledger = limit === undefined
        ? Effect.map(
          rows(sql`SELECT ${LEDGER_EVENT} FROM handoffs WHERE ${sql.and(ledgerConds(o))} ORDER BY handoff_id`),
          (r) => r.map(toEvent)
        )
        : Effect.map(
          rows(sql`SELECT ${LEDGER_EVENT} FROM handoffs WHERE ${sql.and(ledgerConds(o))} ORDER BY handoff_id DESC LIMIT ${limit}`),
          (r) => r.map(toEvent).reverse()
        )
      return Effect.map(Effect.zip(stored, ledger), ([a, b]) => {
        const all = byEventId(a, b)
        return limit === undefined || all.length <= limit ? all : all.slice(all.length - limit)
      })
    },
    countEvents: (f = {}) => countOf(f, eventConds(f)),
    pipelinesBySpec: Effect.map(
      rows(sql`SELECT spec_digest, count(*) AS n FROM pipelines GROUP BY spec_digest ORDER BY n DESC, spec_digest`),
      (r) => r.map((row): SpecCount => ({ specDigest: String(row["spec_digest"]), pipelines: Number(row["n"]) }))
    ),

    pipelinesPage: (o) =>
      Effect.suspend(() => {
        const limit = o.limit
        const conds = []
        if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
        if (o.state !== undefined) conds.push(sql`state = ${o.state}`)
        if (o.after !== undefined) conds.push(sql`(created_at, pipeline_id) > (${o.after.createdAt}, ${o.after.pipelineId})`)
        return Effect.map(
          rows(sql`SELECT * FROM pipelines WHERE ${sql.and(conds)} ORDER BY created_at, pipeline_id LIMIT ${limit + 1}`),
          (r): PipelinesPage => {
            const pipelines = r.slice(0, limit).map(toPipeline)
            const last = pipelines[pipelines.length - 1]
            return {
              pipelines,
              next: r.length > limit && last !== undefined ? { createdAt: last.createdAt, pipelineId: last.pipelineId } : null
            }
          }
        )
      }),
    completions: (o) =>
      Effect.suspend(() => {
        const bucketMs = o.bucketMs
        const origin = Math.trunc(o.since ?? 0)
        const conds = [sql`state IN ('succeeded', 'failed', 'interrupted')`, sql`ended_at IS NOT NULL`]
        if (o.runId !== undefined) conds.unshift(sql`run_id = ${o.runId}`)
        if (o.since !== undefined) conds.push(sql`ended_at >= ${o.since}`)
        // floor division on integers: bound numbers arrive as REAL, hence the casts, and
        // SQLite's integer `/` truncates toward zero, hence the negative branch
        const o0 = sql`CAST(${origin} AS INTEGER)`
        const w = sql`CAST(${bucketMs} AS INTEGER)`
        return Effect.map(
          rows(
            sql`SELECT b, count(*) AS n FROM (SELECT CASE WHEN ended_at >= ${o0} THEN (ended_at - ${o0}) / ${w} ELSE -((${o0} - ended_at + ${w} - 1) / ${w}) END AS b FROM pipelines WHERE ${
              sql.and(conds)
            }) GROUP BY b ORDER BY b`
          ),
          (r) => r.map((x): CompletionBucket => ({ startMs: origin + Number(x.b) * bucketMs, count: Number(x.n) }))
        )
      }),
    loadBundles: (ids, o) =>
      Effect.gen(function*() {
        const out = new Map<PipelineId, { pipelineId: PipelineId; tasks: Array<TaskRecord>; artifacts: Array<LoadedArtifact> }>()
        for (const id of ids) out.set(id, { pipelineId: id, tasks: [], artifacts: [] })
        const unique = Array.from(out.keys())
        const onlyFinal = o.artifacts === "final"
        const payloadCol = o.payloads === "all"
          ? sql`, payload`
          : o.payloads === "final"
          ? sql`, CASE WHEN is_final = 1 THEN payload END AS payload`
          : sql``
        const budget = o.payloadBytes === undefined || o.payloadBytes === Infinity
          ? undefined
          : Number.isNaN(o.payloadBytes) ? 0 : Math.max(0, o.payloadBytes)
        /** Stored bytes of the wanted, available payloads met so far (the budget's running total). */
        let spent = 0
        for (let i = 0; i < unique.length; i += 500) {
          const chunk = unique.slice(i, i + 500)
          if (o.tasks !== false) {
            const ts = yield* rows(sql`SELECT * FROM tasks WHERE ${byPipelines(chunk)} ORDER BY ${taskOrder}`)
            for (const r of ts) out.get(String(r.pipeline_id) as PipelineId)?.tasks.push(toTask(r))
          }
          const where = sql`${byPipelines(chunk)}${onlyFinal ? sql` AND is_final = 1` : sql``}`
          if (budget === undefined || o.payloads === "none") {
            const as = yield* rows(
              sql`SELECT ${sql.literal(META)}${payloadCol} FROM artifacts WHERE ${where} ORDER BY ${
                sql(pipelineKey)
              }, seq, artifact_id`
            )
            for (const r of as) {
              const wanted = o.payloads === "all" || (o.payloads === "final" && Number(r.is_final) === 1)
              const loaded = r.storage === "blob" || !wanted
                ? yield* bundleArtifact(r, wanted)
                : { artifact: toArtifact(r), payload: toBytes(r.payload) ?? undefined }
              out.get(loaded.artifact.pipelineId)?.artifacts.push(loaded)
            }
            continue
          }
          // with a budget: the metadata in read order, the running total of the wanted, available
          // sizes kept here, then the inline payloads that fit read by rowid (measured faster than
          // one query with a window sum and a payload subquery: bench/export.ts, BENCHMARKS.md)
          const metas = (yield* q(
            sql`SELECT ${sql.literal(META)} FROM artifacts WHERE ${where} ORDER BY ${sql(pipelineKey)}, seq, artifact_id`
              .values
          )).map(toArtifactValues)
          const fits: Array<boolean> = new Array(metas.length)
          const inline: Array<number> = []
          for (let k = 0; k < metas.length; k++) {
            const meta = metas[k]!
            let fit = false
            if ((o.payloads === "all" || meta.isFinal) && meta.available) {
              fit = spent + meta.size <= budget || spent === 0
              spent += meta.size
            }
            fits[k] = fit
            if (fit && meta.storage === "inline") inline.push(meta.artifactId)
          }
          const payloads = new Map<number, Uint8Array | undefined>()
          for (let j = 0; j < inline.length; j += ROWID_CHUNK) {
            const got = yield* q(
              sql`SELECT artifact_id, payload FROM artifacts WHERE ${sql.in("artifact_id", inline.slice(j, j + ROWID_CHUNK))}`
                .values
            )
            for (const r of got) payloads.set(Number(r[0]), toBytes(r[1]) ?? undefined)
          }
          for (let k = 0; k < metas.length; k++) {
            const meta = metas[k]!
            const loaded = meta.storage === "blob" || !fits[k]
              ? yield* loadedArtifact(meta, fits[k]!, null)
              : { artifact: meta, payload: payloads.get(meta.artifactId) }
            out.get(meta.pipelineId)?.artifacts.push(loaded)
          }
        }
        return out as ReadonlyMap<PipelineId, PipelineBundle>
      }),

    streamPipelines: (o) =>
      pager<readonly [number, string], PipelineRecord>(
          (c) => {
            const conds = []
            if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
            if (o.state !== undefined) conds.push(sql`state = ${o.state}`)
            if (c !== undefined) conds.push(sql`(created_at, pipeline_id) > (${c[0]}, ${c[1]})`)
            return rows(sql`SELECT * FROM pipelines WHERE ${sql.and(conds)} ORDER BY created_at, pipeline_id LIMIT ${PAGE_SIZE}`)
          },
          (r) => [Number(r.created_at), String(r.pipeline_id)] as const,
          toPipeline
        ),
    streamTasks: (o) =>
        pager<readonly [string | number, number, number, string], ReturnType<typeof toTask>>(
          (c) => {
            const conds = []
            if (o.pipelineId !== undefined) conds.push(byPipeline(o.pipelineId))
            if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
            // the (pipeline, seq) bound lets the index start the page; the visit is sorted within
            // each station by SQLite's partial sort (the index gives the leading two terms)
            if (c !== undefined && visits) {
              conds.push(sql`(${sql(pipelineKey)}, seq) >= (${c[0]}, ${c[1]})`)
              conds.push(sql`(${sql(pipelineKey)}, seq, coalesce(visit, 0), task_run_id) > (${c[0]}, ${c[1]}, ${c[2]}, ${c[3]})`)
            } else if (c !== undefined) {
              conds.push(sql`(${sql(pipelineKey)}, seq, task_run_id) > (${c[0]}, ${c[1]}, ${c[3]})`)
            }
            return rows(sql`SELECT * FROM tasks WHERE ${sql.and(conds)} ORDER BY ${taskOrder} LIMIT ${PAGE_SIZE}`)
          },
          (r) => [numbered ? Number(r.pno) : String(r.pipeline_id), Number(r.seq), r.visit == null ? 0 : Number(r.visit), String(r.task_run_id)] as const,
          toTask
        ),
    streamAttempts: (o) =>
        Stream.unwrap(
          Effect.map(
            rows(sql`SELECT coalesce(max(attempt_id), 0) AS m FROM attempts`),
            (m) => {
              const hwm = Number(m[0]?.m ?? 0)
              return pager<number, ReturnType<typeof toAttempt>>(
                (c) => {
                  const conds = [sql`attempt_id > ${c ?? 0}`, sql`attempt_id <= ${hwm}`]
                  if (o.pipelineId !== undefined) conds.push(byPipeline(o.pipelineId))
                  if (o.runId !== undefined) conds.push(sql`run_id = ${o.runId}`)
                  return rows(sql`SELECT * FROM attempts WHERE ${sql.and(conds)} ORDER BY attempt_id LIMIT ${PAGE_SIZE}`)
                },
                (r) => Number(r.attempt_id),
                toAttempt
              )
            }
          )
        ),
    streamEvents: (o) =>
        Stream.unwrap(
          Effect.map(
            rows(
              fromLedger(o)
                // (the ledger's latest event is its latest row with one: `handoff_id` order)
                ? sql`SELECT max(coalesce((SELECT max(event_id) FROM events), 0), coalesce((SELECT event_id FROM handoffs WHERE event_id IS NOT NULL ORDER BY handoff_id DESC LIMIT 1), 0)) AS m`
                : sql`SELECT coalesce(max(event_id), 0) AS m FROM events`
            ),
            (m) => {
              const hwm = Number(m[0]?.m ?? 0)
              if (fromLedger(o)) return mergedEventStream(o, hwm)
              return pager<number, ReturnType<typeof toEvent>>(
                (c) =>
                  rows(
                    sql`SELECT * FROM events WHERE ${sql.and([sql`event_id > ${c ?? 0}`, sql`event_id <= ${hwm}`, ...eventConds(o)])} ORDER BY event_id LIMIT ${PAGE_SIZE}`
                  ),
                (r) => Number(r.event_id),
                toEvent
              )
            }
          )
        ),
    streamArtifacts: (o) =>
        Stream.mapEffect(
          pager<readonly [number, number], ArtifactRecord>(
            (c) =>
              rows(
                c === undefined
                  ? sql`SELECT ${sql.literal(META)} FROM artifacts WHERE ${byPipeline(o.pipelineId)} ORDER BY seq, artifact_id LIMIT ${PAGE_SIZE}`
                  : sql`SELECT ${sql.literal(META)} FROM artifacts WHERE ${byPipeline(o.pipelineId)} AND (seq, artifact_id) > (${c[0]}, ${c[1]}) ORDER BY seq, artifact_id LIMIT ${PAGE_SIZE}`
              ),
            (r) => [Number(r.seq), Number(r.artifact_id)] as const,
            toArtifact
          ),
          refine
        )
  }
}
