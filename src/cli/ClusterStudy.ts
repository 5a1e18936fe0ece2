/**
 * `assay study run|resume FILE --engine cluster --database URL`: a study whose pipelines run on
 * `assay runner -c FILE` processes (issue 17 §3). Loaded only by `StudyRun.ts` when
 * `--engine cluster` is given, through the `ModuleLoader` (the cluster packages stay out of the
 * CLI's fast start bundle, as for `ClusterRun.ts`).
 *
 * The study's driver stays in this process, unchanged: `Study.prepare` and `Study.execute` run
 * over the study's local root (its protocol versions, trials, ledger and settlement: the
 * `StudyCatalog` and the `SuiteCatalog` of `output.root`, one process per study as on the
 * embedded engine) with two services swapped:
 *
 * - the `Runner` is the cluster submitter (`services/internal/cluster/submitRunner.ts`): the
 *   trial window's specs are admitted in windows to the runners, the window learns each
 *   pipeline's end from its row;
 * - the catalog's read views (`SuiteCatalog.view`, what settlement, metrics, status and report
 *   read) are the Postgres store's, where the runners write the trials' pipelines.
 *
 * The root records that its pipelines live in Postgres (`cluster.json`, without the password):
 * `study report` / `compare` / `status` on such a root then need `--database` to read them.
 *
 * @internal
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as SqlClient from "@effect/sql/SqlClient"
import { Context, Duration, Effect, Layer, Option, type Scope } from "effect"
import * as nodePath from "node:path"
import type { LoadedSuite } from "../config/internal/suite.js"
import { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import type { RunConfigInput } from "../domain/RunConfig.js"
import { readOnlyView } from "../domain/TaskStore.js"
import * as ClusterEngine from "../layers/ClusterEngine.js"
import * as PgStore from "../layers/PgStore.js"
import * as SubmitRunner from "../services/internal/cluster/submitRunner.js"
import { Runner } from "../services/Runner.js"
import { Store } from "../services/Store.js"
import type * as Study from "../services/Study.js"
import { StudyCatalog } from "../services/StudyCatalog.js"
import { SuiteCatalog } from "../services/SuiteCatalog.js"
import { redactUrlsIn, scrub } from "../layers/internal/pg/url.js"
import { connectionMessage, isConnectionProblem, isLoginRefused } from "../layers/internal/pg/connect.js"
import { checkDatabase, redactUrl } from "./ClusterCommand.js"
import {
  checkMigrated,
  databaseFailure,
  currentStudyVersion,
  followProgress,
  pgLayer,
  recordStudyTrials,
  refuseRunFields,
  sharedStoreLayer,
  studyVersionKey,
  suiteHosted
} from "./ClusterRun.js"

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * The file in a study's output root that says its pipelines live in a Postgres store (the
 * cluster engine ran it): `{ engine: "cluster", database }` (the URL without its password).
 *
 * @internal
 */
export const MARKER = "cluster.json"

/**
 * What `--engine cluster` takes from `study run` / `resume`.
 *
 * @internal
 */
export interface ClusterStudyArgs {
  readonly file: string
  readonly database: string
  readonly maxAdmitted: Option.Option<number>
  readonly quiet: boolean
  /** The call cache flags given (refused: the runners read `run.cache` from the study file). */
  readonly cacheFlag: string | undefined
}

/**
 * Refuses (exit 2, naming the field or flag) what the cluster engine does not carry out for a
 * study: a `run` field other than the cluster submitter's (`ClusterRun.refuseRunFields`) and
 * the call cache flags. (`study` is read by none of them since a trial's time budget is carried
 * out: the runners stop its pipelines, `cancelMarks.ts`.)
 *
 * @internal
 */
export const refuse = (
  args: ClusterStudyArgs,
  study: Study.StudyInput,
  first: LoadedSuite
): Effect.Effect<void, ConfigError> =>
  Effect.gen(function*() {
    // `run.trialConcurrency` is the study's trial window: the driver's, carried out here;
    // `run.stopAfterFailures` / `run.stopAfter` are the submitter's (`submitterOptions`)
    const { trialConcurrency: _window, ...run } = first.run as Readonly<Record<string, unknown>>
    yield* refuseRunFields(run)
    if (args.cacheFlag !== undefined) {
      return yield* configError(
        args.cacheFlag,
        "the call cache flags do not apply with --engine cluster: the runners read run.cache from the study file"
      )
    }
  })

/**
 * The options of the study's submitter (`SubmitRunner.make`) that come from the study file's
 * `run` section and `--max-admitted`: `maxAdmitted` (the flag, else `run.maxAdmitted`, else
 * the submitter's default), `label`, `notes`, and the run's stop rules as the embedded engine
 * reads them for a study (`Runner.layer` over the same `run` section): `stopAfterFailures`
 * (once that many of the study run's pipelines failed, across its trials, no more are
 * admitted) and `stopAfter` (a duration as written: once that much time has passed since the
 * run started, no more are admitted). Either ends the run `interrupted` with `stopReason`
 * `stop_after_failures` / `stop_after`, and the study settles `interrupted` (a resume admits
 * the rest), as on the embedded engine; the pipelines already admitted run to their end (the
 * cluster's stops act at admission: docs/scale-out.md, "Limits today").
 *
 * @param run the study's `run` section (of its suite for version 1)
 * @param maxAdmitted `--max-admitted`, if given
 * @internal
 */
export const submitterOptions = (
  run: RunConfigInput,
  maxAdmitted: Option.Option<number>
): SubmitRunner.SubmitRunnerOptions => ({
  ...(Option.isSome(maxAdmitted) ? { maxAdmitted: maxAdmitted.value } : run.maxAdmitted === undefined ? {} : { maxAdmitted: run.maxAdmitted }),
  ...(run.label === undefined ? {} : { label: run.label }),
  ...(run.notes === undefined ? {} : { notes: run.notes }),
  ...(run.stopAfterFailures === undefined ? {} : { stopAfterFailures: run.stopAfterFailures }),
  ...(run.stopAfter === undefined ? {} : { stopAfter: Duration.decode(run.stopAfter) })
})

/**
 * An open cluster session of a study run: the Postgres store and the cluster's client, and
 * `environment(stores, studyId, version, confirmations)`: the services `Study.execute` runs on
 * (the cluster-backed `Runner`, the root's catalogs with the store's read views), once the
 * study's version and its confirmation trials (the version's trials beyond the declared
 * repeats, `study confirm`) are recorded in the cluster's database for the runners
 * (`ClusterRun.studyVersionKey`, `ClusterRun.studyTrialsKey`).
 *
 * @internal
 */
export interface ClusterStudySession {
  readonly environment: (
    stores: Context.Context<SuiteCatalog | StudyCatalog>,
    studyId: string,
    version: number,
    confirmations: ReadonlyArray<{ readonly variantId: string; readonly repeat: number }>
  ) => Effect.Effect<Context.Context<Runner | SuiteCatalog | StudyCatalog>, StoreUnavailable>
}

/**
 * Opens the study's cluster session in the current scope (see {@link ClusterStudySession}):
 * the database must be migrated (`assay migrate`) and the store a Postgres one; records the
 * root's {@link MARKER}.
 *
 * @internal
 */
export const open = (
  args: ClusterStudyArgs,
  first: LoadedSuite
): Effect.Effect<ClusterStudySession, ConfigError | StoreUnavailable, Scope.Scope | FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const database = yield* checkDatabase(args.database)
    const { layer: store, target } = yield* sharedStoreLayer(suiteHosted(first), Option.none(), database)
    if (target._tag !== "Postgres") {
      return yield* configError("--database", "a study on the cluster engine needs a Postgres store")
    }
    yield* checkMigrated(database)
    const context = yield* Layer.build(Layer.mergeAll(
      ClusterEngine.clientLayer().pipe(Layer.provide(pgLayer(database))),
      store,
      pgLayer(database)
    )).pipe(
      Effect.mapError((e) =>
        e instanceof ConfigError || e instanceof StoreUnavailable
          ? e
          : isConnectionProblem(e)
          ? databaseFailure(database, "cannot read")(e)
          : new StoreUnavailable({ message: redactUrlsIn(scrub(`cannot reach the cluster's database ${redactUrl(database)}: ${String(e)}`, database)) })
      )
    )
    const fs = yield* FileSystem.FileSystem
    const root = first.output.root
    yield* fs.makeDirectory(root, { recursive: true }).pipe(
      Effect.zipRight(fs.writeFileString(nodePath.join(root, MARKER), JSON.stringify({ engine: "cluster", database: redactUrl(database) }) + "\n")),
      Effect.mapError((e) => new StoreUnavailable({ message: `cannot write ${nodePath.join(root, MARKER)}: ${e.message}` }))
    )
    const pg = Context.get(context, Store)
    const sql = Context.get(context, SqlClient.SqlClient)
    return {
      environment: (stores, studyId, version, confirmations) =>
        Effect.gen(function*() {
          // the runners serve every version up to the one recorded here (never lowered)
          const recorded = yield* currentStudyVersion(studyId).pipe(Effect.provideService(SqlClient.SqlClient, sql))
          yield* sql.unsafe(
            `INSERT INTO assay_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
            [studyVersionKey(studyId), JSON.stringify(Math.max(recorded, version))]
          )
          // the runners serve the declared trials from the study file, the confirmation trials from this record
          yield* recordStudyTrials(studyId, confirmations).pipe(Effect.provideService(SqlClient.SqlClient, sql))
          const runner = yield* SubmitRunner.make({
            ...submitterOptions(first.run, args.maxAdmitted),
            pollInterval: Duration.millis(500),
            meta: { ...first.run.meta, study: { id: studyId, version } },
            ...followProgress({ quiet: args.quiet, config: args.file }, database)
          }).pipe(Effect.provide(context))
          const view = readOnlyView(pg)
          const catalog = Context.get(stores, SuiteCatalog)
          const studyCatalog = Context.get(stores, StudyCatalog)
          return Context.make(Runner, runner).pipe(
            Context.add(SuiteCatalog, { ...catalog, view: () => Effect.succeed(view) }),
            // the root's own aggregate counts its own (empty) pipeline table: read the store's view instead
            Context.add(StudyCatalog, { ...studyCatalog, pipelineStates: undefined })
          )
        }).pipe(
          Effect.catchTag("SqlError", (e) =>
            Effect.fail(new StoreUnavailable({ message: `cannot record the study's version or trials in the cluster's database: ${e.message}` })))
        )
    }
  })

/**
 * The read views of a study root whose pipelines the cluster engine ran: when the root has a
 * {@link MARKER}, `--database` must be given (`ConfigError` at `--database` otherwise) and the
 * returned function swaps the catalogs' read views for the Postgres store's (the suite view,
 * and the study catalog's `pipelineStates` aggregate); `undefined` when the root ran on the
 * embedded engine (and `--database` was not given).
 *
 * @internal
 */
export const readViews = (
  root: string,
  database: Option.Option<string>
): Effect.Effect<
  | ((stores: { readonly catalog: Context.Tag.Service<SuiteCatalog>; readonly study: Context.Tag.Service<StudyCatalog> }) => {
    readonly catalog: Context.Tag.Service<SuiteCatalog>
    readonly study: Context.Tag.Service<StudyCatalog>
  })
  | undefined,
  ConfigError | StoreUnavailable,
  Scope.Scope | FileSystem.FileSystem
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const marked = yield* fs.exists(nodePath.join(root, MARKER)).pipe(Effect.orElseSucceed(() => false))
    if (!marked && Option.isNone(database)) return undefined
    if (Option.isNone(database)) {
      return yield* configError(
        "--database",
        `the study in ${root} ran on the cluster engine: its pipelines are in the cluster's Postgres store; give --database postgres://… to read them`
      )
    }
    const url = yield* checkDatabase(database.value)
    const context = yield* Layer.build(Layer.merge(PgStore.layerReadOnly(url), pgLayer(url))).pipe(
      Effect.mapError((e) =>
        e instanceof ConfigError || e instanceof StoreUnavailable
          ? e
          : isConnectionProblem(e)
          // explained as \`assay report\` explains it; a refused login exits 2, as everywhere
          ? new StoreUnavailable({
            message: connectionMessage(url, e),
            path: redactUrl(url),
            ...(isLoginRefused(e) ? { loginRefused: true } : {})
          })
          : new StoreUnavailable({ message: redactUrlsIn(scrub(`cannot reach the cluster's database ${redactUrl(url)}: ${String(e)}`, url)) })
      )
    )
    const view = readOnlyView(Context.get(context, Store))
    const sql = Context.get(context, SqlClient.SqlClient)
    return (stores) => ({
      catalog: { ...stores.catalog, view: () => Effect.succeed(view) },
      study: { ...stores.study, pipelineStates: pipelineStatesOf(sql) }
    })
  })

/**
 * The stored pipelines of a suite's members by state, member id → state → count, from the
 * cluster's Postgres store (one aggregate read, as the root's own `pipelineStates` reads its
 * SQLite tables): what `study status` shows as a cluster root's live pipeline counts.
 */
const pipelineStatesOf = (sql: SqlClient.SqlClient) => (suiteId: string) =>
  sql.unsafe<{ readonly experiment_id: string | null; readonly state: string; readonly n: string | number }>(
    `SELECT experiment_id, state, count(*) AS n FROM assay_pipelines WHERE suite_id = $1 GROUP BY experiment_id, state`,
    [suiteId]
  ).pipe(
    Effect.map((rows) => {
      const out = new Map<string, Record<string, number>>()
      for (const r of rows) {
        if (r.experiment_id === null) continue
        const m = out.get(r.experiment_id) ?? {}
        m[r.state] = Number(r.n)
        out.set(r.experiment_id, m)
      }
      return out as ReadonlyMap<string, Readonly<Record<string, number>>>
    }),
    Effect.mapError((e) => new StoreUnavailable({ message: `cannot read the study's pipelines from the cluster's store: ${e.message}` }))
  )
