/**
 * Cancel marks of the cluster engine (issue 17 §3, `running: cancel` for studies): how a
 * submitter tells the runners that a run is cancelled, so that its running pipelines stop at
 * their next task boundary, settle `interrupted` (their checkpoints kept: resumable) and the
 * submitter sees them ended.
 *
 * - the submitter {@link CancelMarksService.mark marks} the run (`SubmitRunner`: a stop its hooks
 *   call a cancel, `RunHooks.stopCancels`);
 * - or marks one pipeline of a run ({@link CancelMarksService.markPipeline}: a trial's time
 *   budget ran out, `RunHooks.cancelWhen`; key `cancel/<runId>/<pipelineId>`);
 * - each runner process {@link CancelMarksService.read reads} the marks of the runs it has task
 *   executions of in flight (`TaskEnv.inFlight`), and their pipelines' marks, once per
 *   heartbeat (`workflow.ts`), into `TaskEnv.cancelled` / `TaskEnv.cancelledPipelines`;
 * - before each attempt (the first attempt of a task is the pipeline's task boundary), a task of
 *   a marked run (or pipeline) does not call: its pipeline's row is settled `interrupted` with the mark's
 *   reason, and the pipeline's verdict is `interrupted` (`task.ts`).
 *
 * On PostgreSQL ({@link makePg}) a mark is a row of the store's `assay_meta` table, key
 * `cancel/<runId>` (a pipeline's: `cancel/<runId>/<pipelineId>`), value the reason; a runner reads
 * them by the key's btree (one range per run, one statement per read), and the cluster-backed
 * runner prunes them when a run closes ({@link CancelMarksService.prune}: the marks of every
 * closed run with no pipeline `running` under it; a resume runs under a new run id, so a stale
 * mark never cancels it). {@link makeMemory} keeps them in memory, for runners and a submitter in one process
 * (the in-process tests).
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { Config, Context, Duration, Effect, Either, Layer, Option } from "effect"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"

/**
 * The cancel marks: `mark(runId, reason)` writes the mark of a run (idempotent; the first
 * reason stays), `read(runIds)` answers the marked ones among `runIds` with their reasons.
 * Both fail with `StoreUnavailable` when the database cannot be reached.
 *
 * @internal
 */
export interface CancelMarksService {
  readonly mark: (runId: RunId, reason: string) => Effect.Effect<void, StoreUnavailable>
  readonly read: (runIds: ReadonlyArray<RunId>) => Effect.Effect<ReadonlyMap<RunId, string>, StoreUnavailable>
  /**
   * Marks one pipeline of a run cancelled (a trial's time budget ran out: `RunHooks.cancelWhen`),
   * idempotent, the first reason staying; the run's other pipelines go on. Optional: marks
   * without it cancel whole runs only.
   */
  readonly markPipeline?: ((runId: RunId, pipelineId: PipelineId, reason: string) => Effect.Effect<void, StoreUnavailable>) | undefined
  /**
   * The marks of the runs `runIds` and of their pipelines, in one read (one statement on
   * PostgreSQL): `runs` the marked runs with their reasons, `pipelines` the marked pipelines by
   * {@link pipelineKeyOf} with theirs. Optional: marks without it cancel whole runs only.
   */
  readonly readAll?:
    | ((runIds: ReadonlyArray<RunId>) => Effect.Effect<Marks, StoreUnavailable>)
    | undefined
  /**
   * Removes the marks no pipeline can read any more: those of every closed run (its
   * `assay_runs` row not `running`) none of whose pipelines is `running` under it (a resume
   * runs under a new run id, so an old run's marks never apply to it). Answers how many were
   * removed. Optional (the marks in memory live as long as their process).
   */
  readonly prune?: (() => Effect.Effect<number, StoreUnavailable>) | undefined
}

/**
 * What {@link CancelMarksService.readAll} answers: the marked runs (run → reason) and the marked
 * pipelines ({@link pipelineKeyOf} → reason).
 *
 * @internal
 */
export interface Marks {
  readonly runs: ReadonlyMap<RunId, string>
  readonly pipelines: ReadonlyMap<string, string>
}

/**
 * The cancel marks tag. A runner host (`workflowLayer`) and the cluster-backed runner
 * (`SubmitRunner.make`) take it from their context; without it they use {@link makePg} over
 * the `SqlClient` in context, and without either, a cancel stops admission only.
 *
 * @internal
 */
export class CancelMarks extends Context.Tag("assay/cluster/CancelMarks")<CancelMarks, CancelMarksService>() {}

/** The `assay_meta` key of a run's mark. */
export const keyOf = (runId: RunId): string => `cancel/${runId}`

/**
 * The key of one pipeline's mark in a run (`<runId>/<pipelineId>`; the `assay_meta` key is
 * `cancel/` and this): what {@link CancelMarksService.readAll} answers and
 * `TaskEnv.cancelledPipelines` holds.
 *
 * @internal
 */
export const pipelineKeyOf = (runId: RunId, pipelineId: PipelineId): string => `${runId}/${pipelineId}`

/**
 * Marks kept in memory (one process: runners and submitter sharing the service).
 *
 * @internal
 */
export const makeMemory = (): CancelMarksService => {
  const marks = new Map<RunId, string>()
  /** By run, then by {@link pipelineKeyOf}. */
  const pipelines = new Map<RunId, Map<string, string>>()
  return {
    mark: (runId, reason) =>
      Effect.sync(() => {
        if (!marks.has(runId)) marks.set(runId, reason)
      }),
    markPipeline: (runId, pipelineId, reason) =>
      Effect.sync(() => {
        let of = pipelines.get(runId)
        if (of === undefined) pipelines.set(runId, of = new Map())
        const key = pipelineKeyOf(runId, pipelineId)
        if (!of.has(key)) of.set(key, reason)
      }),
    readAll: (runIds) =>
      Effect.sync(() => {
        const runs = new Map<RunId, string>()
        const perPipeline = new Map<string, string>()
        for (const id of runIds) {
          const reason = marks.get(id)
          if (reason !== undefined) runs.set(id, reason)
          for (const [k, v] of pipelines.get(id) ?? []) perPipeline.set(k, v)
        }
        return { runs, pipelines: perPipeline }
      }),
    read: (runIds) =>
      Effect.sync(() => {
        const out = new Map<RunId, string>()
        for (const id of runIds) {
          const reason = marks.get(id)
          if (reason !== undefined) out.set(id, reason)
        }
        return out
      })
  }
}

/**
 * A layer of {@link makeMemory} marks (fresh per build).
 *
 * @internal
 */
export const layerMemory: Layer.Layer<CancelMarks> = Layer.sync(CancelMarks, makeMemory)

/**
 * The statement of {@link makePg}'s `readAll` (`$1`: the run ids): per run, the range of the
 * key's btree from `cancel/<runId>` to `cancel/<runId>0` (`0` follows `/` in byte order; the
 * bounds are "C", the key column's collation, so the range is byte order whatever the
 * database's locale, and the primary key's index serves it).
 *
 * @internal
 */
export const READ_ALL_SQL = `SELECT m.key, m.value FROM unnest($1::text[]) AS r(id) JOIN assay_meta m
  ON m.key >= ('cancel/' || r.id) COLLATE "C" AND m.key < ('cancel/' || r.id || '0') COLLATE "C"`

/**
 * The marks among `rows` (keys `cancel/…`) of the runs `runIds`: a key `cancel/<runId>` is the
 * run's mark, `cancel/<runId>/<pipelineId>` a pipeline's; any other key of the range read (a
 * longer run id sharing the prefix) is not theirs.
 */
const marksOf = (runIds: ReadonlyArray<RunId>, rows: ReadonlyArray<{ key: string; value: string }>): Marks => {
  const ids = new Set<string>(runIds)
  const runs = new Map<RunId, string>()
  const pipelines = new Map<string, string>()
  for (const r of rows) {
    const rest = r.key.slice("cancel/".length)
    if (ids.has(rest)) runs.set(rest as RunId, r.value)
    else {
      const slash = rest.indexOf("/")
      if (slash > 0 && ids.has(rest.slice(0, slash))) pipelines.set(rest, r.value)
    }
  }
  return { runs, pipelines }
}

/**
 * Marks as rows of `assay_meta` (key {@link keyOf}, value the reason) on `sql`, the database
 * holding the store's tables: one `INSERT … ON CONFLICT DO NOTHING` per mark, one `SELECT` per read
 * (the key's btree, one range per run: `readAll`; exact keys: `read`), one `DELETE` per prune.
 *
 * @internal
 */
export const makePg = (sql: SqlClient.SqlClient): CancelMarksService => ({
  mark: (runId, reason) =>
    sql.unsafe(`INSERT INTO assay_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`, [keyOf(runId), reason]).pipe(
      Effect.asVoid,
      Effect.mapError((e) => new StoreUnavailable({ message: `cannot mark run ${runId} cancelled: ${e.message}`, cause: e }))
    ),
  markPipeline: (runId, pipelineId, reason) =>
    sql.unsafe(`INSERT INTO assay_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`, [
      `cancel/${pipelineKeyOf(runId, pipelineId)}`,
      reason
    ]).pipe(
      Effect.asVoid,
      Effect.mapError((e) => new StoreUnavailable({ message: `cannot mark pipeline ${pipelineId} cancelled: ${e.message}`, cause: e }))
    ),
  // one statement (`READ_ALL_SQL`: one btree range per run), kept when the key is the run's
  // mark or one of its pipelines' (`cancel/<runId>/…`)
  readAll: (runIds) =>
    runIds.length === 0
      ? Effect.succeed<Marks>({ runs: new Map(), pipelines: new Map() })
      : sql.unsafe<{ key: string; value: string }>(
        READ_ALL_SQL,
        [runIds]
      ).pipe(
        Effect.map((rows) => marksOf(runIds, rows)),
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot read the runs' cancel marks: ${e.message}`, cause: e }))
      ),
  // a closed run's marks once none of its pipelines runs under it: per run (not per mark), the
  // marked runs are read from the keys' range `cancel/` … `cancel0`
  prune: () =>
    sql.unsafe<{ n: number | string }>(
      `WITH marked AS (
         SELECT DISTINCT split_part(substr(key, 8), '/', 1) AS run_id FROM assay_meta
          WHERE key >= 'cancel/' COLLATE "C" AND key < 'cancel0' COLLATE "C"),
       done AS (
         SELECT m.run_id FROM marked m JOIN assay_runs r ON r.run_id = m.run_id AND r.status <> 'running'
          WHERE NOT EXISTS (SELECT 1 FROM assay_pipelines p WHERE p.run_id = m.run_id AND p.state = 'running')),
       gone AS (
         DELETE FROM assay_meta a USING done d
          WHERE a.key >= ('cancel/' || d.run_id) COLLATE "C" AND a.key < ('cancel/' || d.run_id || '0') COLLATE "C"
            AND (a.key = ('cancel/' || d.run_id) COLLATE "C" OR a.key >= ('cancel/' || d.run_id || '/') COLLATE "C")
          RETURNING 1)
       SELECT count(*) AS n FROM gone`
    ).pipe(
      Effect.map((rows) => Number(rows[0]?.n ?? 0)),
      Effect.mapError((e) => new StoreUnavailable({ message: `cannot prune the cancel marks: ${e.message}`, cause: e }))
    ),
  read: (runIds) =>
    runIds.length === 0
      ? Effect.succeed(new Map<RunId, string>())
      : sql.unsafe<{ key: string; value: string }>(
        `SELECT key, value FROM assay_meta WHERE key = ANY($1::text[])`,
        [runIds.map(keyOf)]
      ).pipe(
        Effect.map((rows) => {
          const out = new Map<RunId, string>()
          for (const r of rows) out.set(r.key.slice("cancel/".length) as RunId, r.value)
          return out
        }),
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot read the runs' cancel marks: ${e.message}`, cause: e }))
      )
})

/**
 * The marks in context: the {@link CancelMarks} service, else {@link makePg} over the
 * `SqlClient` in context when it is PostgreSQL, else none.
 *
 * @internal
 */
export const fromContext: Effect.Effect<CancelMarksService | undefined> = Effect.gen(function*() {
  const own = yield* Effect.serviceOption(CancelMarks)
  if (Option.isSome(own)) return own.value
  const sql = yield* Effect.serviceOption(SqlClient.SqlClient)
  if (Option.isNone(sql)) return undefined
  return sql.value.onDialectOrElse({ pg: () => makePg(sql.value), orElse: () => undefined })
})

/**
 * Reads the marks of `runs` into `into` (run → reason), and, given `pipelines` and when the marks
 * have {@link CancelMarksService.readAll}, the pipeline marks of those runs into `pipelines`
 * ({@link pipelineKeyOf} → reason), in one read (one statement on PostgreSQL; without `pipelines`
 * or `readAll`, one {@link CancelMarksService.read}): what a runner process does once per
 * heartbeat for the runs it has tasks of in flight (`TaskEnv.cancelled`,
 * `TaskEnv.cancelledPipelines`). The runs already read cancelled are not read again. A mark, once
 * read, stays.
 *
 * @internal
 */
export const refresh = (
  marks: CancelMarksService,
  into: Map<RunId, string>,
  runs: Iterable<RunId>,
  pipelines?: Map<string, string> | undefined
): Effect.Effect<void, StoreUnavailable> =>
  Effect.suspend(() => {
    const ids = Array.from(runs).filter((id) => !into.has(id))
    if (ids.length === 0) return Effect.void
    const readAll = pipelines === undefined ? undefined : marks.readAll
    if (readAll === undefined) {
      return Effect.map(marks.read(ids), (found) => {
        for (const [runId, reason] of found) into.set(runId, reason)
      })
    }
    return Effect.map(readAll(ids), (found) => {
      for (const [runId, reason] of found.runs) into.set(runId, reason)
      for (const [key, reason] of found.pipelines) pipelines!.set(key, reason)
    })
  })

/** The environment variable that sets how often `assay runner` reads its runs' cancel marks. */
export const CANCEL_EVERY_ENV = "ASSAY_RUNNER_CANCEL_EVERY"

/**
 * How often a runner process reads the cancel marks of the runs it has work in flight of, from
 * `ASSAY_RUNNER_CANCEL_EVERY` (a positive duration with a unit, e.g. `"2 seconds"`): the bound on
 * how late a runner sees a cancel (one statement per read: the runs' marks and their pipelines'). Unset: `None` (the runner reads at
 * its claims' heartbeat, 10 s by default). An invalid value fails with `ConfigError` naming the
 * variable (exit 2).
 *
 * @internal
 */
export const cancelEveryFromEnv: Effect.Effect<Option.Option<Duration.Duration>, ConfigError> = Effect.flatMap(
  Effect.either(Config.option(Config.duration(CANCEL_EVERY_ENV).pipe(
    Config.validate({ message: "must be a positive duration", validation: (d) => Duration.toMillis(d) > 0 })
  ))),
  (r) =>
    Either.isRight(r) ? Effect.succeed(r.right) : Effect.fail(
      new ConfigError({
        message: `${CANCEL_EVERY_ENV}: must be a positive duration with a unit, e.g. "2 seconds"`,
        issues: [{ path: CANCEL_EVERY_ENV, message: "must be a positive duration with a unit, e.g. \"2 seconds\"" }]
      })
    )
)
