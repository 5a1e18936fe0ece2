/**
 * The read side of a suite root: one `TaskStore` over several SQLite databases (the members of
 * a `byExperiment` root, or one combined database), optionally scoped to one member by its
 * pipeline-id prefix (a member of a `combined` root).
 *
 * - Per-pipeline reads are routed to the one database that holds the pipeline.
 * - Limited queries ask every database for at most N candidates (`events`: the latest N by
 *   `(ts, eventId)` from the `events_time` index, ids only; `errors`, `pipelinesPage`,
 *   limited `streamTasks`: N rows in the merged order), merge them, and decode only the
 *   selected rows (events) or the candidates (the others). Databases are visited one at a
 *   time, so this works with a single cached connection.
 * - Counts and statistics are SQL aggregates per database, summed; latency percentiles read the
 *   durations (numbers only) of every database. `loadBundles` spends one `payloadBytes` budget
 *   across databases.
 * - Streams come in one order across databases, the order of their limited form (a limit is a
 *   prefix): pipelines by (createdAt, pipelineId); tasks by (pipelineId, seq, visit, taskRunId);
 *   events by (ts, eventId), the catalog's first on ties; attempts by end time (each database's
 *   in the order it recorded them). Attempt, event and artifact ids are local to their
 *   database. Each database is read a page at a time, every page one `use` of it: no stream
 *   holds a member between pages (a consumer may write to any member meanwhile), and event and
 *   attempt streams stop at every database's high-water mark taken at the start. The feature
 *   level is the highest of any database's.
 *
 * @since 0.5.0
 */
import Database from "better-sqlite3"
import { Chunk, Effect, Option, type Scope, Stream } from "effect"
import { type ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import {
  type AttemptRecord,
  EventRecord,
  type MetricRecord,
  type PipelineRecord,
  type PipelineState,
  type TaskRecord,
  trusted
} from "../../../domain/Records.js"
import {
  type BundleOptions,
  type CompletionBucket,
  type ErrorRow,
  errorRowOf,
  type EventFilter,
  type PipelineBundle,
  type PipelinesPage,
  type ResourceUsage,
  type SpecCount,
  type StoreStats,
  type PipelineAccounting,
  type TaskStore,
  type TraversalStore
} from "../../../domain/TaskStore.js"
import type { HandoffRecord } from "../../../domain/Handoff.js"
import type { SupersededRecord } from "../../../services/SuiteCatalog.js"
import {
  checkBucket,
  checkLimit,
  latencyOf,
  PAGE_SIZE,
  usageAccumulator,
  sumUsage,
  zeroUsage,
  ACCOUNTED_CONDITION,
  ACCOUNTED_CONDITION_V11,
  ACCOUNTING_COLUMNS,
  ACCOUNTING_COLUMNS_V11,
  accountingOrderSql,
  figuresOfRow,
  orderPipelineAccounting,
  sumFigures,
  zeroFigures
} from "../../../services/internal/store/shared.js"
import type { StoreService } from "../../../services/Store.js"
import { HANDOFF_EVENT_DATA_SQL, KNOWN_FEATURE_LEVELS, TIMED_TERMINAL, UNADMITTED_PNO } from "../sqlite/migrations.js"
import type { SqliteEnv } from "../sqlite/open.js"
import { describeSqlError } from "../sqlite/open.js"
import { toAttempt, toEvent, toPipeline, toTask } from "../sqlite/rows.js"

type Row = Record<string, unknown>

/**
 * One open database as the view reads it: its store service, its opened file, the
 * pipeline-id prefix that scopes it to one member (`undefined`: every row), and `all`, a
 * synchronous query on a plain SQLite connection with cached prepared statements (the write
 * connection of a writer, a read-only connection otherwise): the merged reads run a few small
 * queries per database, where `@effect/sql`'s per-statement cost would dominate.
 *
 * @since 0.5.0
 * @category models
 */
export interface Db {
  readonly service: StoreService
  readonly env: SqliteEnv
  readonly prefix: string | undefined
  readonly all: (sql: string, params: ReadonlyArray<unknown>) => ReadonlyArray<Row>
  /** As `all`, each row an array of its column values (no object built per row). */
  readonly values: (sql: string, params: ReadonlyArray<unknown>) => ReadonlyArray<ReadonlyArray<unknown>>
}

/**
 * The {@link Db} of an opened store in the current scope: reads go through the write connection
 * of a writer, or a read-only connection of their own (closed with the scope).
 *
 * @since 0.5.0
 * @category constructors
 */
export const makeDb = (service: StoreService, env: SqliteEnv): Effect.Effect<Db, StoreUnavailable, Scope.Scope> =>
  Effect.gen(function*() {
    const conn = env.db ?? (yield* Effect.acquireRelease(
      Effect.try({
        try: () => new Database(env.path, { readonly: true, fileMustExist: true }),
        catch: (cause) => new StoreUnavailable({ message: `cannot open store ${env.path}: ${describeSqlError(cause)}`, path: env.path, cause })
      }),
      (d) => Effect.sync(() => d.close())
    ))
    const cache = new Map<string, Database.Statement>()
    const statement = (sql: string, raw: boolean) => {
      const key = raw ? `raw:${sql}` : sql
      let st = cache.get(key)
      if (st === undefined) {
        st = conn.prepare(sql)
        if (raw) st.raw(true)
        if (cache.size > 256) cache.clear()
        cache.set(key, st)
      }
      return st
    }
    return {
      service,
      env,
      prefix: undefined,
      all: (sql, params) => statement(sql, false).all(...params) as ReadonlyArray<Row>,
      values: (sql, params) => statement(sql, true).all(...params) as ReadonlyArray<ReadonlyArray<unknown>>
    }
  })

/**
 * A database of the view, opened on demand: `use(f)` runs `f` with it open (and holds it for
 * `f`'s duration), or returns `empty` when the database does not exist (a member that never
 * ran); nothing holds it between two uses. `name` is the member
 * id (`""` for the catalog or a combined root).
 *
 * @since 0.5.0
 * @category models
 */
export interface Source {
  readonly name: string
  readonly use: <A, E>(f: (db: Db) => Effect.Effect<A, E>, empty: A) => Effect.Effect<A, E | StoreUnavailable>
  /** Whether the database is open now (a cached member; absent: always open). */
  readonly isOpen?: (() => boolean) | undefined
  /** The database's feature level now (`"base"` when it has none), read without opening it. */
  readonly featureLevel: () => string
}

/** The feature levels in the order they are reached; a level this build does not know ranks above them. */
const LEVELS: ReadonlyArray<string> = Array.from(KNOWN_FEATURE_LEVELS)
const levelRank = (level: string) => (LEVELS.includes(level) ? LEVELS.indexOf(level) : LEVELS.length)

/**
 * The highest of some feature levels (`"base"` for none): a merged view is at the level of its
 * most advanced database.
 *
 * @since 0.5.0
 * @category models
 */
export const highestLevel = (levels: Iterable<string>): string => {
  let best = "base"
  for (const l of levels) if (levelRank(l) > levelRank(best)) best = l
  return best
}

/**
 * What a view is made of: `runs` (the database of runs, resources and run-scope metrics: the
 * catalog), `extraEvents` (a database whose events without a pipeline belong to the view: the
 * catalog of a byExperiment root in the merged view; `undefined` otherwise), `sources` (the
 * databases of the pipelines, in member id order), `route` (the source of a pipeline id,
 * `undefined` when it belongs to none), `memberMetricPrefix` (a member view: only run-scope
 * metrics named `experiment:ID:` belong to it).
 *
 * @since 0.5.0
 * @category models
 */
export interface ViewParts {
  readonly runs: Source
  readonly extraEvents: Source | undefined
  readonly sources: ReadonlyArray<Source>
  readonly route: (pipelineId: string) => Source | undefined
  readonly memberMetricPrefix: string | undefined
  readonly readOnly: boolean
  readonly journal: "full" | "summary"
}

/**
 * A suite view: the {@link TaskStore} of the whole suite or one member, and its `superseded`
 * pipelines (kept as history of accepted input-row edits, left out of the cumulative reads),
 * by member, local key, pipeline id.
 *
 * @since 0.7.0
 * @category models
 */
export interface SuiteView extends TaskStore {
  readonly superseded: Effect.Effect<ReadonlyArray<SupersededRecord>, StoreUnavailable>
}

/** The SQL condition (and its parameters) of a pipeline-id prefix: a half-open range. */
const prefixCond = (prefix: string | undefined, column = "pipeline_id"): [string, Array<unknown>] => {
  if (prefix === undefined) return ["", []]
  const last = prefix.charCodeAt(prefix.length - 1)
  const upper = prefix.slice(0, -1) + String.fromCharCode(last + 1)
  return [` AND ${column} >= ? AND ${column} < ?`, [prefix, upper]]
}

/** The databases seen to hold the `suite_superseded` table (a writer never drops it). */
const withSupersededTable = new WeakSet<SqliteEnv>()

/**
 * Whether a database holds superseded pipelines (see `MIGRATION_0011`): a store older than
 * schema 11 (a member another build left unmigrated) has none.
 */
const supersededTable = (db: Db): boolean => {
  try {
    if (!withSupersededTable.has(db.env)) {
      if (db.all("SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = 'suite_superseded'", []).length === 0) return false
      withSupersededTable.add(db.env)
    }
    return true
  } catch {
    return false
  }
}

const hasSuperseded = (db: Db): boolean => {
  try {
    return supersededTable(db) && db.all("SELECT 1 AS x FROM suite_superseded LIMIT 1", []).length > 0
  } catch {
    return false
  }
}

/**
 * The SQL condition of the pipelines a view shows: its member's (pipeline-id prefix) and, in
 * the cumulative view (no run given), not superseded (an accepted edit of its input row keeps
 * the old pipeline as history only). One run's view shows what that run did, superseded or not.
 */
const scopeCond = (db: Db, runId: RunId | undefined, column = "pipeline_id"): [string, Array<unknown>] => {
  const [pc, pp] = prefixCond(db.prefix, column)
  return runId === undefined && hasSuperseded(db)
    ? [`${pc} AND ${column} NOT IN (SELECT pipeline_id FROM suite_superseded)`, pp]
    : [pc, pp]
}

/** One query on a database (see {@link Db}). */
const query = (db: Db, text: string, params: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<Row>, StoreUnavailable> =>
  Effect.try({
    try: () => db.all(text, params),
    catch: (cause) => new StoreUnavailable({ message: `store ${db.env.path}: ${describeSqlError(cause)}`, path: db.env.path, cause })
  })

/** Writes buffered attempts and events of a writable database before an aggregate read. */
const flushed = (db: Db) => (db.service.readOnly ? Effect.void : db.service.flush)

const runCond = (runId: RunId | undefined): [string, Array<unknown>] =>
  runId === undefined ? ["", []] : [" AND run_id = ?", [runId]]

const eventConds = (db: Db, f: EventFilter, withPrefix: boolean): [string, Array<unknown>] => {
  const parts: Array<string> = ["1 = 1"]
  const params: Array<unknown> = []
  if (f.pipelineId !== undefined) {
    parts.push("pipeline_id = ?")
    params.push(f.pipelineId)
  }
  if (f.runId !== undefined) {
    parts.push("run_id = ?")
    params.push(f.runId)
  }
  if (f.kind !== undefined) {
    parts.push("kind = ?")
    params.push(f.kind)
  }
  const [pc, pp] = withPrefix ? prefixCond(db.prefix) : ["", []]
  return [parts.join(" AND ") + pc, [...params, ...pp]]
}

const STATES: ReadonlyArray<PipelineState> = ["pending", "running", "succeeded", "failed", "interrupted"]

/** The columns of an event row, in `events`' shape. */
const EVENT_ROW = "event_id, kind, pno, pipeline_id, run_id, data, ts"

/**
 * `SELECT ${cols} FROM events WHERE ${w}${extra}${tail}` over a database's events: `events`,
 * and from schema version 17 the ledger's events too (a transition's `pipeline.handoff` event is
 * its `handoffs` row: see `MIGRATION_0017`), as one compound statement (`UNION ALL`) whose
 * `tail` (`ORDER BY`, `LIMIT`) orders both sides together, each read in its own index's order
 * and merged (a subquery in `FROM` would be sorted whole). `cols` are names of `events`
 * columns; `extra` (with `extraParams`) is a condition on them added to both sides.
 */
const eventsSelect = (
  db: Db,
  cols: ReadonlyArray<string>,
  f: EventFilter,
  prefixed: boolean,
  extra: string,
  extraParams: ReadonlyArray<unknown>,
  tail: string,
  tailParams: ReadonlyArray<unknown>
): [string, Array<unknown>] => {
  const [w, p] = eventConds(db, f, prefixed)
  const stored = `SELECT ${cols.join(", ")} FROM events WHERE ${w}${extra}`
  if (!db.env.handoffEvents || (f.kind !== undefined && f.kind !== "pipeline.handoff")) {
    return [`${stored}${tail}`, [...p, ...extraParams, ...tailParams]]
  }
  const [lw, lp] = eventConds(db, { ...f, kind: undefined }, prefixed)
  const ledgerCol = (c: string) =>
    c === "kind" ? "'pipeline.handoff' AS kind" : c === "data" ? `${HANDOFF_EVENT_DATA_SQL} AS data` : c
  const ledger = `SELECT ${cols.map(ledgerCol).join(", ")} FROM handoffs WHERE event_id IS NOT NULL AND ${lw}${extra}`
  return [`${stored} UNION ALL ${ledger}${tail}`, [...p, ...extraParams, ...lp, ...extraParams, ...tailParams]]
}

/**
 * The largest event id of a database (0: none), `events` and the ledger's (see {@link eventsSelect}:
 * among ledger rows with an event, `handoff_id` order is `event_id` order).
 */
const maxEventIdOf = (db: Db): string =>
  db.env.handoffEvents
    ? "SELECT max(coalesce((SELECT max(event_id) FROM events), 0), coalesce((SELECT event_id FROM handoffs WHERE event_id IS NOT NULL ORDER BY handoff_id DESC LIMIT 1), 0)) AS m"
    : "SELECT coalesce(max(event_id), 0) AS m FROM events"

/**
 * An event candidate: its key (ts, id) in its database (`src`, an index of the view's event
 * sources) and its raw columns (ts, event_id, kind, pipeline_id, run_id, data).
 */
interface Candidate {
  readonly ts: number
  readonly id: number
  readonly src: number
  readonly row: ReadonlyArray<unknown>
}

const byEventDesc = (a: Candidate, b: Candidate) =>
  b.ts - a.ts || b.id - a.id || a.src - b.src

const cmpStr = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/** The merged order of task rows: (pipelineId, seq, visit, taskRunId). */
type TaskKey = readonly [string, number, number, string]

/**
 * Builds the merged read view of `parts` (see the module docs).
 *
 * @since 0.5.0
 * @category constructors
 */
export const makeView = (parts: ViewParts): SuiteView => {
  const { sources, route } = parts
  /** Sources of event reads: the catalog's pipeline-less events first (merged view of a byExperiment root). */
  const eventSources: ReadonlyArray<{ readonly source: Source; readonly prefixed: boolean }> = [
    ...(parts.extraEvents !== undefined ? [{ source: parts.extraEvents, prefixed: false }] : []),
    ...sources.map((source) => ({ source, prefixed: true }))
  ]
  const runSource = parts.runs
  const none = <A>() => Effect.succeed(Option.none<A>())
  const inScope = (db: Db, pipelineId: string) => db.prefix === undefined || pipelineId.startsWith(db.prefix)
  /** Runs `f` on the database of `pipelineId`, or returns `empty`. */
  const onPipeline = <A, E>(pipelineId: string, f: (db: Db) => Effect.Effect<A, E>, empty: A) => {
    const source = route(pipelineId)
    return source === undefined
      ? Effect.succeed(empty)
      : source.use((db) => (inScope(db, pipelineId) ? f(db) : Effect.succeed(empty)), empty)
  }
  // the open databases first (results still in source order): a pass over more members than
  // the member cache holds then reopens only the closed ones, not every one of them
  const forEachSource = <A, E>(f: (db: Db, index: number) => Effect.Effect<A, E>) =>
    Effect.suspend(() => {
      const order = sources.map((_, i) => i)
      const closed = (i: number) => (sources[i]!.isOpen?.() ?? true) ? 0 : 1
      order.sort((a, b) => closed(a) - closed(b) || a - b)
      const rs = new Array<Option.Option<A>>(sources.length)
      return Effect.as(
        Effect.forEach(order, (i) =>
          Effect.map(sources[i]!.use((db) => Effect.map(f(db, i), Option.some), Option.none<A>()), (r) => {
            rs[i] = r
          }), { discard: true }),
        rs
      )
    }).pipe(Effect.map((rs) => rs.flatMap(Option.toArray)))

  // --- runs, resources, metrics ----------------------------------------------------------------
  const runsFrom = <A>(f: (s: StoreService) => Effect.Effect<A, StoreUnavailable>, empty: A) =>
    runSource.use((db) => f(db.service), empty)

  const metrics: TaskStore["metrics"] = (f) =>
    Effect.gen(function*() {
      if (f.pipelineId !== undefined && f.pipelineId !== null) {
        return yield* onPipeline(f.pipelineId, (db) => db.service.metrics(f), [] as ReadonlyArray<MetricRecord>)
      }
      const out: Array<MetricRecord> = []
      const runScope = yield* runsFrom((s) => s.metrics({ runId: f.runId, pipelineId: null }), [] as ReadonlyArray<MetricRecord>)
      const prefix = parts.memberMetricPrefix
      for (const m of runScope) if (prefix === undefined || m.name.startsWith(prefix)) out.push(m)
      if (f.pipelineId === undefined) {
        const perSource = yield* forEachSource((db) =>
          Effect.map(db.service.metrics({ runId: f.runId }), (ms) => ms.filter((m) => m.pipelineId !== null && inScope(db, m.pipelineId)))
        )
        for (const ms of perSource) out.push(...ms)
      }
      return out.sort((a, b) => cmpStr(a.pipelineId ?? "", b.pipelineId ?? "") || cmpStr(a.name, b.name))
    })

  // --- statistics --------------------------------------------------------------------------------
  const countsOf = (db: Db, runId: RunId | undefined) =>
    Effect.gen(function*() {
      yield* flushed(db)
      const [rc, rp] = runCond(runId)
      const [pc, pp] = scopeCond(db, runId)
      const states = yield* query(db, `SELECT state, count(*) AS n FROM pipelines WHERE 1 = 1${rc}${pc} GROUP BY state`, [...rp, ...pp])
      const [tasks] = yield* query(db, `SELECT count(*) AS n FROM tasks WHERE 1 = 1${rc}${pc}`, [...rp, ...pp])
      const [att] = yield* query(
        db,
        // a retry is the retry policy's decision (as a single store counts it), never a re-run after a kill
        `SELECT count(*) AS n, coalesce(sum(json_extract(decision, '$.retry') IS 1), 0) AS r, ${
          db.env.accounting ? ACCOUNTING_COLUMNS : ACCOUNTING_COLUMNS_V11
        } FROM attempts WHERE 1 = 1${rc}${pc}`,
        [...rp, ...pp]
      )
      const [ho] = db.env.visits
        ? yield* query(db, `SELECT count(*) AS n, count(to_seq) AS b FROM handoffs WHERE 1 = 1${rc}${pc}`, [...rp, ...pp])
        : [undefined]
      // numbers only (no row objects): every terminal pipeline's duration
      const durations = yield* Effect.try({
        try: () => db.values(`SELECT ended_at - started_at FROM pipelines WHERE ${TIMED_TERMINAL}${rc}${pc}`, [...rp, ...pp]),
        catch: (cause) => new StoreUnavailable({ message: `store ${db.env.path}: ${describeSqlError(cause)}`, path: db.env.path, cause })
      })
      return {
        byState: new Map(states.map((r) => [String(r.state), Number(r.n)])),
        tasks: Number(tasks?.n ?? 0),
        attempts: Number(att?.n ?? 0),
        retries: Number(att?.r ?? 0),
        handoffs: Number(ho?.n ?? 0),
        // (an `end` row has no to_seq)
        handoffsBudgeted: Number(ho?.b ?? 0),
        accounting: figuresOfRow(att),
        durations: durations.map((r) => Number(r[0]))
      }
    })

  /**
   * Token and cost figures per pipeline: each database's aggregate over its attempts in
   * scope (a pipeline lives in one database), merged, then ordered and cut once.
   */
  const pipelineAccounting: TaskStore["pipelineAccounting"] = (o = {}) =>
    Effect.gen(function*() {
      if (o.pipelineIds !== undefined && o.pipelineIds.length === 0) return []
      if (o.limit !== undefined && o.limit <= 0) return []
      const per = yield* forEachSource((db) =>
        Effect.gen(function*() {
          yield* flushed(db)
          const [rc, rp] = runCond(o.runId)
          const [pc, pp] = scopeCond(db, o.runId)
          const ids = o.pipelineIds === undefined
            ? ["", []] as const
            : db.env.numbered
            ? [" AND pno IN (SELECT pno FROM pipelines WHERE pipeline_id IN (SELECT value FROM json_each(?)))", [JSON.stringify(o.pipelineIds)]] as const
            : [" AND pipeline_id IN (SELECT value FROM json_each(?))", [JSON.stringify(o.pipelineIds)]] as const
          const found = yield* query(
            db,
            `SELECT pipeline_id, ${db.env.accounting ? ACCOUNTING_COLUMNS : ACCOUNTING_COLUMNS_V11} FROM attempts WHERE ${
              db.env.accounting ? ACCOUNTED_CONDITION : ACCOUNTED_CONDITION_V11
            }${rc}${pc}${ids[0]} GROUP BY pipeline_id ORDER BY ${accountingOrderSql(o.orderBy)}${
              o.limit === undefined ? "" : ` LIMIT ${Math.floor(o.limit)}`
            }`,
            [...rp, ...pp, ...ids[1]]
          )
          return found.map((r): PipelineAccounting => ({ pipelineId: String(r.pipeline_id) as PipelineId, ...figuresOfRow(r) }))
        })
      )
      return orderPipelineAccounting(per.flat(), o)
    })

  const countEventsIn = (db: Db, f: EventFilter, prefixed: boolean) =>
    Effect.gen(function*() {
      yield* flushed(db)
      const [text, params] = eventsSelect(db, ["count(*) AS n"], f, prefixed, "", [], "", [])
      const counts = yield* query(db, text, params)
      return counts.reduce((a, r) => a + Number(r.n ?? 0), 0)
    })

  const countEvents: TaskStore["countEvents"] = (f = {}) =>
    Effect.map(
      Effect.forEach(eventSources, ({ prefixed, source }) =>
        (f.pipelineId !== undefined && prefixed && route(f.pipelineId) !== source)
          ? Effect.succeed(0)
          : source.use((db) => countEventsIn(db, f, prefixed), 0)),
      (ns) => ns.reduce((a, b) => a + b, 0)
    )

  const stats: TaskStore["stats"] = (runId) =>
    Effect.gen(function*() {
      const per = yield* forEachSource((db) => countsOf(db, runId))
      const byState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
      let pipelines = 0, tasks = 0, attemptsTotal = 0, retries = 0, handoffsTotal = 0, handoffsBudgeted = 0
      let accounting = zeroFigures()
      const durations: Array<number> = []
      for (const c of per) {
        accounting = sumFigures(accounting, c.accounting)
        for (const s of STATES) {
          const n = c.byState.get(s) ?? 0
          byState[s] += n
          pipelines += n
        }
        tasks += c.tasks
        attemptsTotal += c.attempts
        retries += c.retries
        handoffsTotal += c.handoffs
        handoffsBudgeted += c.handoffsBudgeted
        for (const d of c.durations) durations.push(d)
      }
      durations.sort((a, b) => a - b)
      const events = yield* countEvents(runId === undefined ? {} : { runId })
      const resources = yield* resourcesRead
      const out: StoreStats = {
        pipelines,
        byState,
        tasks,
        attemptsTotal,
        retries,
        events,
        handoffsTotal,
        handoffsBudgeted,
        latencyMs: latencyOf(durations),
        resources,
        accounting
      }
      return out
    })

  const resourcesRead = runsFrom((s) => s.resources, [])

  /**
   * Usage per lease target, summed over the databases (a task run lives in one database, so
   * its retries are found there): a database's own aggregate, or, scoped to a member of a
   * combined root, its in-scope attempts folded in attempt order.
   */
  const resourceUsage: TaskStore["resourceUsage"] = (runId) =>
    Effect.gen(function*() {
      const per = yield* forEachSource((db) =>
        db.prefix === undefined
          ? db.service.resourceUsage(runId)
          : Effect.suspend(() => {
            const acc = usageAccumulator()
            return Stream.runForEach(
              Stream.filter(db.service.streamAttempts({ runId }), (a) => inScope(db, a.pipelineId)),
              (a) => Effect.sync(() => acc.add(a))
            ).pipe(
              // no limit is given: the stream cannot fail with a limit error
              Effect.catchTag("ConfigError", (e) => Effect.die(e)),
              Effect.map(() => acc.result())
            )
          })
      )
      const sum = new Map<string, Omit<ResourceUsage, "target">>()
      for (const usage of per) {
        for (const u of usage) {
          const { target: _, ...figures } = u
          sum.set(u.target, sumUsage(sum.get(u.target) ?? zeroUsage(), figures))
        }
      }
      return Array.from(sum, ([target, u]) => ({ target, ...u })).sort((a, b) =>
        a.target < b.target ? -1 : a.target > b.target ? 1 : 0
      )
    })

  // --- limited reads ---------------------------------------------------------------------------
  const errors: TaskStore["errors"] = (o = {}) =>
    Effect.gen(function*() {
      const limit = yield* checkLimit(o.limit ?? 20)
      if (limit === 0) return []
      const [rc, rp] = runCond(o.runId)
      const per = yield* forEachSource((db) => {
        const [pc, pp] = scopeCond(db, o.runId)
        return query(
          db,
          `SELECT * FROM pipelines WHERE state = 'failed'${rc}${pc} ORDER BY updated_at DESC, pipeline_id${limit === undefined ? "" : " LIMIT ?"}`,
          [...rp, ...pp, ...(limit === undefined ? [] : [limit])]
        )
      })
      const all = per.flat().map(toPipeline).sort((a, b) => b.updatedAt - a.updatedAt || cmpStr(a.pipelineId, b.pipelineId))
      const rows: ReadonlyArray<ErrorRow> = (limit === undefined ? all : all.slice(0, limit)).map(errorRowOf)
      return rows
    })

  const events: TaskStore["events"] = (o = {}) =>
    Effect.gen(function*() {
      const limit = yield* checkLimit(o.limit)
      if (limit === 0) return []
      // candidates: the latest rows of each database as raw column values (no object, no JSON
      // parse: only the chosen rows are decoded). Pages of `page` rows per database, a bit more
      // than an even share; a database is asked for more only while its last candidate is
      // among the best `limit` so far (its next rows rank below it), and never for more than
      // `limit` in all: O(limit) candidates per database.
      const candidates: Array<Candidate> = []
      const active = eventSources.flatMap(({ prefixed, source }, src) =>
        o.pipelineId !== undefined && prefixed && route(o.pipelineId) !== source ? [] : [src]
      )
      const page = limit === undefined
        ? undefined
        : Math.min(limit, Math.max(8, Math.ceil((1.25 * limit) / Math.max(1, active.length)) + 2))
      const state = new Map<number, { last: Candidate | undefined; taken: number; done: boolean }>()
      const fetch = (src: number) =>
        eventSources[src]!.source.use((db) => {
          const first = !state.has(src)
          // one synchronous read (no fiber work per database beyond the flush of a writer's buffer)
          const read = Effect.try({
            try: () => {
              const st = state.get(src) ?? { last: undefined, taken: 0, done: false }
              state.set(src, st)
              const n = limit === undefined || page === undefined ? undefined : Math.min(page, limit - st.taken)
              const rows = db.values(...eventsSelect(
                db,
                ["ts", "event_id", "kind", "pipeline_id", "run_id", "data"],
                o,
                eventSources[src]!.prefixed,
                st.last === undefined ? "" : " AND (ts, event_id) < (?, ?)",
                st.last === undefined ? [] : [st.last.ts, st.last.id],
                ` ORDER BY ts DESC, event_id DESC${n === undefined ? "" : " LIMIT ?"}`,
                n === undefined ? [] : [n]
              ))
              for (const r of rows) {
                const c: Candidate = { ts: Number(r[0]), id: Number(r[1]), src, row: r }
                candidates.push(c)
                st.last = c
              }
              st.taken += rows.length
              st.done = n === undefined || rows.length < n || (limit !== undefined && st.taken >= limit)
            },
            catch: (cause) => new StoreUnavailable({ message: `store ${db.env.path}: ${describeSqlError(cause)}`, path: db.env.path, cause })
          })
          return first && !db.service.readOnly ? Effect.zipRight(db.service.flush, read) : read
        }, undefined)
      for (const src of active) yield* fetch(src)
      for (;;) {
        candidates.sort(byEventDesc)
        if (limit === undefined) break
        const top = new Set(candidates.slice(0, limit))
        const more = active.filter((src) => {
          const st = state.get(src)
          return st !== undefined && !st.done && (candidates.length < limit || (st.last !== undefined && top.has(st.last)))
        })
        if (more.length === 0) break
        for (const src of more) yield* fetch(src)
      }
      const chosen = limit === undefined ? candidates : candidates.slice(0, limit)
      const out: Array<EventRecord> = []
      for (let i = chosen.length - 1; i >= 0; i--) {
        const r = chosen[i]!.row
        out.push(trusted(EventRecord, {
          eventId: Number(r[1]),
          kind: String(r[2]),
          pipelineId: r[3] === null ? null : String(r[3]) as PipelineId,
          runId: r[4] === null ? null : String(r[4]) as RunId,
          data: typeof r[5] === "string" ? JSON.parse(r[5]) : null,
          ts: Number(r[0])
        }))
      }
      return out
    })

  const pipelinesBySpec: TaskStore["pipelinesBySpec"] = Effect.map(
    forEachSource((db) => {
      const [pc, pp] = scopeCond(db, undefined)
      return query(db, `SELECT spec_digest, count(*) AS n FROM pipelines WHERE 1 = 1${pc} GROUP BY spec_digest`, pp)
    }),
    (per) => {
      const counts = new Map<string, number>()
      for (const rows of per) for (const r of rows) counts.set(String(r.spec_digest), (counts.get(String(r.spec_digest)) ?? 0) + Number(r.n))
      return Array.from(counts, ([specDigest, pipelines]): SpecCount => ({ specDigest, pipelines }))
        .sort((a, b) => b.pipelines - a.pipelines || cmpStr(a.specDigest, b.specDigest))
    }
  )

  const page = (o: {
    readonly runId?: RunId | undefined
    readonly state?: PipelineState | undefined
    readonly after?: { readonly createdAt: number; readonly pipelineId: PipelineId } | undefined
    readonly limit: number
  }) =>
    Effect.gen(function*() {
      const per = yield* forEachSource((db) => {
        const conds: Array<string> = ["1 = 1"]
        const params: Array<unknown> = []
        if (o.runId !== undefined) conds.push("run_id = ?"), params.push(o.runId)
        if (o.state !== undefined) conds.push("state = ?"), params.push(o.state)
        if (o.after !== undefined) conds.push("(created_at, pipeline_id) > (?, ?)"), params.push(o.after.createdAt, o.after.pipelineId)
        const [pc, pp] = scopeCond(db, o.runId)
        return query(
          db,
          `SELECT * FROM pipelines WHERE ${conds.join(" AND ")}${pc} ORDER BY created_at, pipeline_id LIMIT ?`,
          [...params, ...pp, o.limit + 1]
        )
      })
      const all = per.flat().map(toPipeline).sort((a, b) => a.createdAt - b.createdAt || cmpStr(a.pipelineId, b.pipelineId))
      const pipelines = all.slice(0, o.limit)
      const last = pipelines[pipelines.length - 1]
      const out: PipelinesPage = {
        pipelines,
        next: all.length > o.limit && last !== undefined ? { createdAt: last.createdAt, pipelineId: last.pipelineId } : null
      }
      return out
    })

  const pipelinesPage: TaskStore["pipelinesPage"] = (o) =>
    Effect.flatMap(checkLimit(o.limit), (limit = 0) =>
      limit === 0 ? Effect.succeed<PipelinesPage>({ pipelines: [], next: null }) : page({ ...o, limit }))

  const completions: TaskStore["completions"] = (o) =>
    Effect.gen(function*() {
      const bucketMs = yield* checkBucket(o.bucketMs)
      const origin = Math.trunc(o.since ?? 0)
      const per = yield* forEachSource((db) => {
        const conds = ["state IN ('succeeded', 'failed', 'interrupted')", "ended_at IS NOT NULL"]
        const params: Array<unknown> = [origin, origin, bucketMs, origin, bucketMs, bucketMs]
        if (o.runId !== undefined) conds.push("run_id = ?"), params.push(o.runId)
        if (o.since !== undefined) conds.push("ended_at >= ?"), params.push(o.since)
        const [pc, pp] = scopeCond(db, o.runId)
        return query(
          db,
          `SELECT b, count(*) AS n FROM (SELECT CASE WHEN ended_at >= CAST(? AS INTEGER) THEN (ended_at - CAST(? AS INTEGER)) / CAST(? AS INTEGER) ELSE -((CAST(? AS INTEGER) - ended_at + CAST(? AS INTEGER) - 1) / CAST(? AS INTEGER)) END AS b FROM pipelines WHERE ${
            conds.join(" AND ")
          }${pc}) GROUP BY b`,
          [...params, ...pp]
        )
      })
      const buckets = new Map<number, number>()
      for (const rows of per) for (const r of rows) buckets.set(Number(r.b), (buckets.get(Number(r.b)) ?? 0) + Number(r.n))
      return Array.from(buckets, ([b, count]): CompletionBucket => ({ startMs: origin + b * bucketMs, count }))
        .sort((a, b) => a.startMs - b.startMs)
    })

  // --- per-pipeline reads ------------------------------------------------------------------------
  const getPipelines: TaskStore["getPipelines"] = (ids) =>
    Effect.gen(function*() {
      const groups = new Map<Source, Array<PipelineId>>()
      for (const id of ids) {
        const s = route(id)
        if (s === undefined) continue
        const list = groups.get(s) ?? []
        list.push(id)
        groups.set(s, list)
      }
      const out = new Map<PipelineId, PipelineRecord>()
      for (const [s, list] of groups) {
        yield* s.use((db) =>
          Effect.map(db.service.getPipelines(list.filter((id) => inScope(db, id))), (m) => {
            for (const [k, v] of m) out.set(k, v)
          }), undefined)
      }
      return out as ReadonlyMap<PipelineId, PipelineRecord>
    })

  const loadBundles: TaskStore["loadBundles"] = (ids, options) =>
    Effect.gen(function*() {
      const out = new Map<PipelineId, PipelineBundle>()
      for (const id of ids) out.set(id, { pipelineId: id, tasks: [], artifacts: [] })
      const groups = new Map<Source, Array<PipelineId>>()
      for (const id of out.keys()) {
        const s = route(id)
        if (s === undefined) continue
        const list = groups.get(s) ?? []
        list.push(id)
        groups.set(s, list)
      }
      const load = (s: Source, list: ReadonlyArray<PipelineId>, o: BundleOptions) =>
        s.use((db) =>
          Effect.map(db.service.loadBundles(list.filter((id) => inScope(db, id)), o), (m) => {
            for (const [k, v] of m) out.set(k, v)
          }), undefined)
      const budget = options.payloadBytes
      if (groups.size <= 1 || options.payloads === "none" || budget === undefined || !(budget < Infinity)) {
        for (const [s, list] of groups) yield* load(s, list, options)
        return out as ReadonlyMap<PipelineId, PipelineBundle>
      }
      // one payload budget across databases: every bundle without payloads first, then the
      // payloads the budget allows in (database, pipeline, artifact) order, as a single store
      // spends it (always the first; a prefix of each pipeline's; at most one pipeline in part)
      for (const [s, list] of groups) yield* load(s, list, { ...options, payloads: "none", payloadBytes: undefined })
      let spent = 0
      let over = false
      for (const [s, list] of groups) {
        const full: Array<PipelineId> = []
        for (const id of list) {
          if (over) break
          let mine = 0
          let all = true
          for (const a of out.get(id)?.artifacts ?? []) {
            if (!a.artifact.available || (options.payloads === "final" && !a.artifact.isFinal)) continue
            if (spent + a.artifact.size <= budget || spent === 0) {
              spent += a.artifact.size
              mine += a.artifact.size
            } else {
              over = true
              all = false
              break
            }
          }
          if (all) full.push(id)
          else if (mine > 0) {
            // the pipeline at the budget's edge: exactly the payloads that fit
            const tasks = out.get(id)!.tasks
            yield* load(s, [id], { ...options, tasks: false, payloadBytes: mine })
            out.set(id, { ...out.get(id)!, tasks })
          }
        }
        if (full.length > 0) {
          const tasks = new Map(full.map((id) => [id, out.get(id)!.tasks]))
          yield* load(s, full, { ...options, tasks: false, payloadBytes: undefined })
          for (const [id, ts] of tasks) out.set(id, { ...out.get(id)!, tasks: ts })
        }
        if (over) break
      }
      return out as ReadonlyMap<PipelineId, PipelineBundle>
    })

  const traversal: TraversalStore = {
    visitState: (pipelineId) =>
      onPipeline(pipelineId, (db) => db.service.traversal?.visitState(pipelineId) ?? none(), Option.none()),
    getArtifactById: (address) => {
      const pipelineId = address.slice(0, Math.max(0, address.lastIndexOf(":")))
      return onPipeline(pipelineId, (db) => db.service.traversal?.getArtifactById(address) ?? none(), Option.none())
    },
    handoffs: (o = {}) =>
      Effect.gen(function*() {
        const limit = yield* checkLimit(o.limit)
        if (limit === 0) return []
        if (o.pipelineId !== undefined) {
          const pid = o.pipelineId
          return yield* onPipeline(pid, (db) => db.service.traversal?.handoffs(o) ?? Effect.succeed([]), [] as ReadonlyArray<HandoffRecord>)
        }
        const per = yield* forEachSource((db) =>
          Effect.map(db.service.traversal?.handoffs({ runId: o.runId, limit }) ?? Effect.succeed([]), (hs) =>
            hs.filter((h) => inScope(db, h.pipelineId)))
        )
        // (ts, handoffId); on exact ties later members are selected
        const all = per.flatMap((hs, src) => hs.map((h) => ({ h, src })))
          .sort((a, b) => a.h.ts - b.h.ts || a.h.handoffId - b.h.handoffId || a.src - b.src)
        return (limit === undefined ? all : all.slice(Math.max(0, all.length - limit))).map((x) => x.h)
      })
  }

  // --- streams -----------------------------------------------------------------------------------
  /**
   * A merged stream over `feeds`: each database is read in pages of its own order (`page`: the
   * rows after the key `after`, at most `n`, each with its key), and the heads are merged by
   * `cmp`, then the feed's index. Every page is one `use` of its database: nothing is held
   * between pages, so a consumer may write to any member while it reads (with the member
   * cache's `maxOpen`, a held database could leave a write waiting forever for a connection).
   * Heads are compared only across feeds, so `cmp` need not order a feed's own rows (attempts:
   * their recording order, merged by end time). `init` runs once per feed before its first page
   * (its high-water mark), for every feed at the start of the stream (the first page of each is
   * read before the first row is emitted).
   */
  const merged = <K, A, S = void, F extends { readonly source: Source } = { readonly source: Source; readonly prefixed: boolean }>(
    feeds: ReadonlyArray<F>,
    init: (db: Db) => Effect.Effect<S, StoreUnavailable>,
    page: (db: Db, after: K | undefined, n: number, init: S, feed: F) => Effect.Effect<ReadonlyArray<readonly [K, A]>, StoreUnavailable>,
    cmp: (a: K, b: K) => number,
    pageSize: number
  ): Stream.Stream<A, StoreUnavailable> =>
    Stream.suspend(() => {
      interface Feed {
        rows: ReadonlyArray<readonly [K, A]>
        pos: number
        after: K | undefined
        done: boolean
        init: { readonly value: S } | undefined
      }
      const state: Array<Feed> = feeds.map(() => ({ rows: [], pos: 0, after: undefined, done: false, init: undefined }))
      const fill = (i: number) => {
        const f = state[i]!
        return Effect.map(
          feeds[i]!.source.use((db) =>
            Effect.gen(function*() {
              if (f.init === undefined) f.init = { value: yield* init(db) }
              const rows = yield* page(db, f.after, pageSize, f.init.value, feeds[i]!)
              f.rows = rows
              f.pos = 0
              if (rows.length > 0) f.after = rows[rows.length - 1]![0]
              if (rows.length < pageSize) f.done = true
              return true
            }), false),
          (found) => {
            if (!found) f.done = true // no database: nothing to read
          }
        )
      }
      let started = false
      const pull = Effect.gen(function*() {
        if (!started) {
          started = true
          for (let i = 0; i < state.length; i++) yield* fill(i)
        }
        const out: Array<A> = []
        while (out.length < pageSize) {
          let best = -1
          for (let i = 0; i < state.length; i++) {
            const f = state[i]!
            if (f.pos >= f.rows.length) {
              if (f.done) continue
              yield* fill(i)
              if (f.pos >= f.rows.length) continue
            }
            if (best < 0) {
              best = i
              continue
            }
            const b = state[best]!
            // on equal keys the earlier feed first
            if (cmp(f.rows[f.pos]![0], b.rows[b.pos]![0]) < 0) best = i
          }
          if (best < 0) break
          const b = state[best]!
          out.push(b.rows[b.pos++]![1])
        }
        return out
      })
      return Stream.paginateChunkEffect(undefined, () =>
        Effect.map(pull, (out) => [Chunk.unsafeFromArray(out), out.length < pageSize ? Option.none<undefined>() : Option.some(undefined)] as const))
    })
  /** A writer's buffered facts flushed, then the largest id of a table: what a stream started now may read. */
  const highWater = (db: Db, text: string) =>
    Effect.zipRight(flushed(db), Effect.map(query(db, text, []), (rows) => Number(rows[0]?.m ?? 0)))
  /** `s(pageSize)` taken to the checked limit (pages no larger than the limit). */
  const limited = <A, E>(limit: number | undefined, s: (pageSize: number) => Stream.Stream<A, E>) =>
    Stream.unwrap(Effect.map(checkLimit(limit), (l) =>
      l === 0 ? Stream.empty : l === undefined ? s(PAGE_SIZE) : Stream.take(s(Math.min(l, PAGE_SIZE)), l)))
  /**
   * The stream of the database of one pipeline (empty when none holds it): one pipeline's rows,
   * read whole while the database is in use and emitted after it is released, so a consumer
   * that writes (to any member) never waits for a connection the stream holds.
   */
  const pipelineStream = <A>(pipelineId: string, f: (db: Db) => Stream.Stream<A, ConfigError | StoreUnavailable>) => {
    const source = route(pipelineId)
    return source === undefined ? Stream.empty : Stream.unwrap(
      Effect.map(
        source.use((db) => (inScope(db, pipelineId) ? Stream.runCollect(f(db)) : Effect.succeed(Chunk.empty<A>())), Chunk.empty<A>()),
        (rows) => Stream.fromChunk(rows)
      )
    )
  }

  const streamPipelines: TaskStore["streamPipelines"] = (o = {}) =>
    limited(o.limit, () =>
      Stream.paginateChunkEffect(undefined as PipelinesPage["next"] | undefined, (after) =>
        Effect.map(page({ runId: o.runId, state: o.state, after: after ?? undefined, limit: PAGE_SIZE }), (p) =>
          [Chunk.unsafeFromArray(p.pipelines), p.next === null ? Option.none() : Option.some(p.next)] as const)))

  const streamTasks: TaskStore["streamTasks"] = (o = {}) => {
    if (o.pipelineId !== undefined) {
      const pid = o.pipelineId
      return limited(o.limit, () => pipelineStream(pid, (db) => db.service.streamTasks({ pipelineId: pid, runId: o.runId })))
    }
    // (pipelineId, seq, visit, taskRunId) across every database, as the limited form. A store
    // of schema version 3+ keys tasks by pipeline number: its admitted pipelines' tasks are read
    // through the pipeline-id index (each page an index range, not a sort of every task), its
    // tasks of no admitted pipeline (number 0) as a second feed; an older store in one query
    return limited(o.limit, (n) =>
      merged<TaskKey, TaskRecord, void, { readonly source: Source; readonly unadmitted: boolean }>(
        sources.flatMap((source) => [{ source, unadmitted: false }, { source, unadmitted: true }]),
        () => Effect.void,
        (db, after, n, _, { unadmitted }) => {
          if (unadmitted && !db.env.numbered) return Effect.succeed([])
          const joined = db.env.numbered && !unadmitted
          const t = joined ? "t." : ""
          const pipelineCol = joined ? "p.pipeline_id" : "pipeline_id"
          const order = `${pipelineCol}, ${t}seq, ${db.env.visits ? `coalesce(${t}visit, 0)` : "0"}, ${t}task_run_id`
          const [pc, pp] = scopeCond(db, o.runId, pipelineCol)
          const [ac, ap] = after === undefined
            ? ["", []]
            : [` AND ${pipelineCol} >= ? AND (${order}) > (?, ?, ?, ?)`, [after[0], after[0], after[1], after[2], after[3]]]
          const [rc, rp] = o.runId === undefined ? ["", []] : [` AND ${t}run_id = ?`, [o.runId]]
          const from = joined
            ? "pipelines p JOIN tasks t ON t.pno = p.pno"
            : unadmitted
            ? `tasks WHERE pno = ${UNADMITTED_PNO}`
            : "tasks"
          const where = from.includes("WHERE") ? "" : " WHERE 1 = 1"
          return Effect.map(
            query(db, `SELECT ${t}* FROM ${from}${where}${rc}${pc}${ac} ORDER BY ${order} LIMIT ?`, [...rp, ...pp, ...ap, n]),
            (rows) =>
              rows.map((r) => {
                const t = toTask(r)
                return [[t.pipelineId, t.seq, t.visit, t.taskRunId] as TaskKey, t] as const
              })
          )
        },
        (a, b) => cmpStr(a[0], b[0]) || a[1] - b[1] || a[2] - b[2] || cmpStr(a[3], b[3]),
        n
      ))
  }

  const streamAttempts: TaskStore["streamAttempts"] = (o = {}) => {
    if (o.pipelineId !== undefined) {
      const pid = o.pipelineId
      return limited(o.limit, () => pipelineStream(pid, (db) => db.service.streamAttempts({ pipelineId: pid, runId: o.runId })))
    }
    const [rc, rp] = runCond(o.runId)
    // each database's attempts in the order they were recorded (up to its high-water mark at the
    // start), interleaved by end time
    return limited(o.limit, (n) =>
      merged<readonly [number, number], AttemptRecord, number>(
        sources.map((source) => ({ source, prefixed: true })),
        (db) => highWater(db, "SELECT coalesce(max(attempt_id), 0) AS m FROM attempts"),
        (db, after, n, hwm) => {
          const [pc, pp] = scopeCond(db, o.runId)
          return Effect.map(
            query(
              db,
              `SELECT * FROM attempts WHERE attempt_id > ? AND attempt_id <= ?${rc}${pc} ORDER BY attempt_id LIMIT ?`,
              [after?.[1] ?? 0, hwm, ...rp, ...pp, n]
            ),
            (rows) =>
              rows.map((r) => {
                const a = toAttempt(r)
                return [[a.endedAt, a.attemptId] as const, a] as const
              })
          )
        },
        (a, b) => a[0] - b[0],
        n
      ))
  }

  const streamEvents: TaskStore["streamEvents"] = (o = {}) =>
    limited(o.limit, (n) =>
      merged<readonly [number, number], EventRecord, number>(
        eventSources.filter(({ prefixed, source }) => !(o.pipelineId !== undefined && prefixed && route(o.pipelineId) !== source)),
        (db) => highWater(db, maxEventIdOf(db)),
        (db, after, n, hwm, { prefixed }) => {
          const [ac, ap] = after === undefined ? ["", []] : [" AND (ts, event_id) > (?, ?)", [after[0], after[1]]]
          return Effect.map(
            query(db, ...eventsSelect(db, EVENT_ROW.split(", "), o, prefixed, ` AND event_id <= ?${ac}`, [hwm, ...ap], " ORDER BY ts, event_id LIMIT ?", [n])),
            (rows) =>
              rows.map((r) => {
                const e = toEvent(r)
                return [[e.ts, e.eventId] as const, e] as const
              })
          )
        },
        (a, b) => a[0] - b[0] || a[1] - b[1],
        n
      ))

  const superseded: SuiteView["superseded"] = Effect.map(
    forEachSource((db) => {
      if (!supersededTable(db)) return Effect.succeed([] as ReadonlyArray<Row>)
      const [pc, pp] = prefixCond(db.prefix)
      return query(db, `SELECT * FROM suite_superseded WHERE 1 = 1${pc} ORDER BY experiment_id, local_key, pipeline_id`, pp)
    }),
    (per) =>
      per.flat().map((r): SupersededRecord => ({
        pipelineId: String(r.pipeline_id) as PipelineId,
        experimentId: String(r.experiment_id),
        localKey: String(r.local_key),
        supersededAt: Number(r.superseded_at)
      }))
  )

  const view: SuiteView = {
    superseded,
    kind: "suite",
    get featureLevel() {
      return highestLevel([runSource, ...sources].map((s) => s.featureLevel()))
    },
    readOnly: parts.readOnly,
    journal: parts.journal,
    traversal,
    getRun: (runId) => runsFrom((s) => s.getRun(runId), Option.none()),
    latestRun: runsFrom((s) => s.latestRun, Option.none()),
    listRuns: runsFrom((s) => s.listRuns, []),
    getPipelines,
    getPipeline: (id) => onPipeline(id, (db) => db.service.getPipeline(id), Option.none()),
    getArtifact: (pipelineId, seq) => onPipeline(pipelineId, (db) => db.service.getArtifact(pipelineId, seq), Option.none()),
    listArtifacts: (pipelineId) => onPipeline(pipelineId, (db) => db.service.listArtifacts(pipelineId), []),
    metrics,
    resources: resourcesRead,
    stats,
    resourceUsage,
    pipelineAccounting,
    errors,
    events,
    countEvents,
    pipelinesBySpec,
    pipelinesPage,
    completions,
    loadBundles,
    streamPipelines,
    streamTasks,
    streamAttempts,
    streamEvents,
    streamArtifacts: (o) =>
      pipelineStream(o.pipelineId, (db) => db.service.streamArtifacts(o))
  }
  return view
}
