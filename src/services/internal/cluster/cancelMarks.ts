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
 * `cancel/<runId>`, value the reason; a mark is never removed (a resume runs under a new run
 * id). {@link makeMemory} keeps them in memory, for runners and a submitter in one process
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
   * The pipelines marked cancelled among the runs `runIds`, by {@link pipelineKeyOf}, with their
   * reasons (one statement on PostgreSQL).
   */
  readonly readPipelines?:
    | ((runIds: ReadonlyArray<RunId>) => Effect.Effect<ReadonlyMap<string, string>, StoreUnavailable>)
    | undefined
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
 * `cancel/` and this): what {@link CancelMarksService.readPipelines} answers and
 * `TaskEnv.cancelledPipelines` holds.
 *
 * @internal
 */
export const pipelineKeyOf = (runId: RunId, pipelineId: PipelineId): string => `${runId}/${pipelineId}`

/** A `LIKE` pattern matching the strings that start with `prefix` (`\\`, `%` and `_` escaped). */
const startsWith = (prefix: string): string => `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`

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
    readPipelines: (runIds) =>
      Effect.sync(() => {
        const out = new Map<string, string>()
        for (const id of runIds) for (const [k, v] of pipelines.get(id) ?? []) out.set(k, v)
        return out
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
 * Marks as rows of `assay_meta` (key {@link keyOf}, value the reason) on `sql`, the database
 * holding the store's tables: one `INSERT … ON CONFLICT DO NOTHING` per mark, one `SELECT … WHERE
 * key = ANY($1)` per read.
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
  // the keys `cancel/<runId>/…` of the runs (`assay_meta` holds a few rows per study run: its
  // marks are the only ones added as runs go)
  readPipelines: (runIds) =>
    runIds.length === 0
      ? Effect.succeed(new Map<string, string>())
      : sql.unsafe<{ key: string; value: string }>(
        `SELECT key, value FROM assay_meta WHERE key LIKE ANY($1::text[])`,
        [runIds.map((id) => startsWith(`${keyOf(id)}/`))]
      ).pipe(
        Effect.map((rows) => new Map(rows.map((r) => [r.key.slice("cancel/".length), r.value] as const))),
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot read the pipelines' cancel marks: ${e.message}`, cause: e }))
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
 * Reads the marks of `runs` (one {@link CancelMarksService.read}) into `into` (run → reason),
 * and, given `pipelines` and when the marks have {@link CancelMarksService.readPipelines}, the
 * pipeline marks of those runs not marked as a whole into `pipelines` ({@link pipelineKeyOf} →
 * reason): what a runner process does once per heartbeat for the runs it has tasks of in flight
 * (`TaskEnv.cancelled`, `TaskEnv.cancelledPipelines`). A mark, once read, stays.
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
    const readPipelines = pipelines === undefined ? undefined : marks.readPipelines
    return Effect.map(
      Effect.all([marks.read(ids), readPipelines === undefined ? Effect.succeed(undefined) : readPipelines(ids)]),
      ([found, perPipeline]) => {
        for (const [runId, reason] of found) into.set(runId, reason)
        if (perPipeline !== undefined) for (const [key, reason] of perPipeline) pipelines!.set(key, reason)
      }
    )
  })

/** The environment variable that sets how often `assay runner` reads its runs' cancel marks. */
export const CANCEL_EVERY_ENV = "ASSAY_RUNNER_CANCEL_EVERY"

/**
 * How often a runner process reads the cancel marks of the runs it has work in flight of, from
 * `ASSAY_RUNNER_CANCEL_EVERY` (a positive duration with a unit, e.g. `"2 seconds"`): the bound on
 * how late a runner sees a cancel (two statements per read: the runs' marks, their pipelines'). Unset: `None` (the runner reads at
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
