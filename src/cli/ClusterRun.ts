/**
 * What `assay runner` and `assay run --engine cluster` run once their flags are checked
 * (`ClusterCommand.ts`): imported only then, as it loads `@effect/cluster`,
 * `@effect/workflow` and `@effect/sql-pg`.
 *
 * @since 0.7.0
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as ShardId from "@effect/cluster/ShardId"
import * as Sharding from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SqlMessageStorage from "@effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as path from "node:path"
import { Cause, Chunk, Clock, Console, Context, Deferred, Duration, Effect, Either, Exit, Fiber, Layer, Option, Redacted, Scope, Stream } from "effect"
import * as StudyConfig from "../config/Study.js"
import * as SuiteConfig from "../config/Suite.js"
import type { RunId } from "../domain/Ids.js"
import type * as Pipeline from "../domain/Pipeline.js"
import { memberDigest, memberDigestOf, memberPath, tagSpec } from "../domain/Suite.js"
import * as Words from "../domain/internal/words.js"
import * as PgSuites from "../layers/internal/pg/suites.js"
import * as Prepared from "../layers/internal/pg/prepared.js"
import { shellQuote } from "../services/internal/processRunner.js"
import { connectionMessage, isConnectionProblem, isLoginRefused } from "../layers/internal/pg/connect.js"
import { hasPassword, PASSWORD_HINT, redactUrlsIn, scrub, withoutPassword } from "../layers/internal/pg/url.js"
import * as InternalSubmit from "../services/internal/cluster/submit.js"
import * as ClusterWorkflow from "../services/internal/cluster/workflow.js"
import { oneLine } from "../services/internal/suiteViews.js"
import * as Suite from "../services/Suite.js"
import { SuiteCatalog } from "../services/SuiteCatalog.js"
import * as Experiment from "../config/internal/experiment.js"
import { ConfigError, type ConfigIssue, StoreUnavailable } from "../domain/Errors.js"
import * as PgCallCache from "../layers/PgCallCache.js"
import * as CallCache from "../services/CallCache.js"
import * as Signals from "../services/Signals.js"
import * as Flags from "./Flags.js"
import * as ClusterEngine from "../layers/ClusterEngine.js"
import * as InFlight from "../services/internal/cluster/inflight.js"
import * as WindowClaims from "../services/internal/cluster/windowClaims.js"
import * as Watchdog from "../services/internal/cluster/watchdog.js"
import * as CancelMarks from "../services/internal/cluster/cancelMarks.js"
import * as StoreResolver from "../layers/internal/storeResolver.js"
import * as NodeProcessRunner from "../layers/NodeProcessRunner.js"
import * as PgPools from "../layers/PgPools.js"
import { checkDatabase, DEFAULT_LEASE_TTL, defaultRenewEvery, type LeaseTiming, redactUrl } from "./ClusterCommand.js"
import { ExitCode, ExitWith } from "./Exit.js"

type AnySpec = Pipeline.PipelineSpec<any, any, any, any>

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/**
 * What a runner or a submitter loaded: an experiment file, or a suite file (its members'
 * pipelines, re-keyed into the suite, and the suite's pools and `run` section).
 *
 * @internal
 */
export interface Hosted {
  /** `run.store` as written (an experiment's; a suite has none). */
  readonly written: unknown
  /** Whether a suite file was loaded (its store must be Postgres: a plugin store is refused). */
  readonly suite?: boolean | undefined
  readonly plugins: Experiment.Experiment["plugins"]
  readonly baseDir: string
  readonly run: Experiment.Experiment["run"]
  /** Whether a task of the hosted pipelines turns the call cache on for itself. */
  readonly taskCacheOn: boolean
  readonly pools: Experiment.Experiment["pools"]
}

const hostedOf = (experiment: Experiment.Experiment): Hosted => ({
  written: experiment.definition.run?.store,
  plugins: experiment.plugins,
  baseDir: experiment.baseDir,
  run: experiment.run,
  taskCacheOn: taskCacheOn([experiment]),
  pools: experiment.pools
})

const taskCacheOn = (experiments: ReadonlyArray<Experiment.Experiment>) =>
  experiments.some((e) => e.template.tasks.some((t) => t.options.cache?.mode !== undefined && t.options.cache.mode !== "off"))

/**
 * The shared store's layer: `--store`, else `run.store` when it is a URI, else the database URL.
 *
 * @internal
 */
export const sharedStoreLayer = (experiment: Hosted, store: Option.Option<string>, database: string) =>
  Effect.gen(function*() {
    const written: unknown = experiment.written
    const [spec, field] = Option.isSome(store)
      ? [store.value, "--store"]
      : typeof written === "string" && written.includes("://")
      ? [written, "run.store"]
      : [database, "--database"]
    const target = yield* StoreResolver.resolve(spec, experiment.plugins, field)
    if (target._tag === "Memory" || target._tag === "Sqlite") {
      return yield* configError(
        field,
        `the cluster engine needs a store every process writes (${
          experiment.suite === true ? "postgres://..., where a suite's members and runs are kept" : "postgres://..., or a plugin store"
        }), not ${
          target._tag === "Memory" ? ":memory:" : `the SQLite file ${target.filename}`
        }`
      )
    }
    const layer = StoreResolver.layerOf(target, {
      journal: "full",
      readOnly: false,
      baseDir: experiment.baseDir,
      registry: experiment.plugins
    })
    return { layer, target }
  }).pipe(
    // an unresolvable postgres:// store names the flag without the password
    Effect.mapError((e) =>
      e._tag === "ConfigError"
        ? new ConfigError({
          message: redactUrlsIn(e.message),
          issues: e.issues.map((i) => ({ ...i, message: redactUrlsIn(i.message) }))
        })
        : e
    )
  )

/**
 * The call cache of a runner's tasks: the experiment's `run.cache` resolved (its `db` against the
 * experiment's folder) and where the cache lives, as the embedded engine chooses it: the shared
 * cache database `run.cache.db` when named; else, when the cache is on for the run or for a task,
 * the shared store's database (`assay_call_cache` of a Postgres store, the table every runner and
 * a later embedded run over the same store read); else memory (nothing is ever stored in it).
 */
const runnerCache = (experiment: Hosted, target: StoreResolver.StoreTarget) =>
  Effect.gen(function*() {
    const issues: Array<ConfigIssue> = []
    const resolved = CallCache.resolveRunCache(experiment.run.cache, "run.cache", issues)
    if (issues.length > 0) return yield* configError(issues[0]!.path, issues[0]!.message)
    const db = resolved.db === undefined ? undefined : path.resolve(experiment.baseDir, resolved.db)
    const run: CallCache.RunCache = db === undefined ? resolved : { ...resolved, db }
    if (db !== undefined) yield* Flags.checkCacheDb(db, "run.cache.db", run.mode)
    const taskOn = experiment.taskCacheOn
    const layer: Layer.Layer<CallCache.CallCache, ConfigError | StoreUnavailable> = db !== undefined
      ? Flags.sharedCacheLayer(db, "run.cache.db", run.mode)
      : run.mode === "off" && !taskOn
      ? CallCache.layerMemory
      : target._tag === "Postgres"
      ? PgCallCache.layer({ url: target.url })
      : CallCache.layerMemory
    return { run, layer }
  })

/**
 * A `SqlClient` on the database URL (the runners' and the submitter's: the cluster's tables,
 * the pools', the window claims'). Not the preparing client of `internal/pg/prepared.ts`: on a
 * runner its statements ran too few times per connection to reach a cached plan (pgc17am), and
 * a chaos rehearsal with it saw a shard takeover late (C5, session 34): kept out until measured.
 *
 * @internal
 */
export const pgLayer = (database: string) => PgClient.layer(pgConfig(database))

/**
 * The configuration of {@link pgLayer}: `@effect/sql-pg`'s defaults but idle connections kept
 * for `Prepared.IDLE_TIMEOUT` (one minute), not 10 s: a connection opened again costs Postgres
 * tens of ms of CPU (BENCHMARKS.md pgp17an).
 *
 * @internal
 */
export const pgConfig = (database: string): PgClient.PgClientConfig => ({
  url: Redacted.make(database),
  idleTimeout: Prepared.IDLE_TIMEOUT
})

/** The cluster's own tables (`@effect/cluster`'s SQL message and runner storage). */
const LIBRARY_TABLES = ["cluster_messages", "cluster_replies", "cluster_runners", "cluster_locks"] as const

/** Every table of the cluster part: the library's, and the engine's in-flight markers. */
const CLUSTER_TABLES = [...LIBRARY_TABLES, InFlight.TABLE] as const

/**
 * What the cluster migration creates: {@link CLUSTER_TABLES} and the window claims' table,
 * `assay_cluster_pipeline_claims` (needed only by runners started with window claims, which
 * check it themselves; the per-window `assay_cluster_window_claims` of earlier versions is
 * dropped: `WindowClaims.migrate`).
 */
const MIGRATED_TABLES = [...CLUSTER_TABLES, WindowClaims.TABLE] as const

/** The advisory lock the cluster migration holds: "asy" and 3 (the store's holds 1, the pools' 2). */
const CLUSTER_MIGRATION_LOCK = [0x617379, 3] as const

/**
 * A failure on the cluster's tables as `StoreUnavailable`: the URL shown without its password
 * (the message as a whole is scrubbed: `redactUrl` of a message that merely contains the URL
 * masks nothing), with the server's own reason (down, no such database, …).
 */
const unavailable = (database: string, what: string) => (e: unknown) =>
  new StoreUnavailable({
    message: redactUrlsIn(scrub(
      `cluster tables of ${database}: ${what}: ${e instanceof Error ? e.message : Cause.isCause(e) ? Cause.pretty(e) : String(e)}`,
      database
    )),
    path: redactUrl(database)
  })

/**
 * A failure to reach the cluster's database, explained as `assay migrate` and `assay report`
 * explain it (`connectionMessage`: the server, the cause in words, what to do): a refused
 * login (SQLSTATE `28P01` / `28000`) as `ConfigError` (exit 2: the user or password is wrong,
 * a restart will not mend it), another connection problem as `StoreUnavailable`, anything else
 * as {@link unavailable} (`what` naming the step).
 *
 * @param database the cluster's database URL (never shown with its password)
 * @param what the step that failed, for a failure that is not a connection problem
 * @returns the typed error of `e`
 * @internal
 */
export const databaseFailure = (database: string, what: string) => (e: unknown): ConfigError | StoreUnavailable =>
  isLoginRefused(e)
    ? new ConfigError({ message: connectionMessage(database, e), issues: [{ path: "--database", message: "the server refused the login (the user, the password or the database name)" }] })
    : isConnectionProblem(e)
    ? new StoreUnavailable({ message: connectionMessage(database, e), path: redactUrl(database) })
    : unavailable(database, what)(e)

/** Which of the cluster's tables exist in the database of `sql`. */
const clusterTablesPresent = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql.unsafe<{ readonly name: string }>(
      `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname IN (${MIGRATED_TABLES.map((t) => `'${t}'`).join(", ")})`
    ),
    (rows) => new Set(rows.map((r) => r.name))
  )

/**
 * Creates the cluster's tables (`cluster_messages`, `cluster_replies`, `cluster_runners`,
 * `cluster_locks`, and `cluster_migrations`, as `@effect/cluster`'s SQL storage defines them,
 * `assay_cluster_inflight`, the engine's in-flight markers, and `assay_cluster_pipeline_claims`,
 * its window claims, a row per pipeline; the per-window `assay_cluster_window_claims` of
 * versions before claims37 is dropped)
 * in the database at `database`, under a session advisory lock of its own so that two
 * processes migrating at once wait for each other. What `assay migrate` runs after the store's
 * and the pools' tables. Returns the tables it created, as `[n, name]` (none when up to date);
 * fails with `StoreUnavailable` (the URL without its password).
 *
 * @since 0.8.0
 * @category migrations
 */
export const migrateCluster = (database: string): Effect.Effect<ReadonlyArray<readonly [number, string]>, StoreUnavailable> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const conn = yield* sql.reserve
    yield* conn.executeRaw(`SELECT pg_advisory_lock(${CLUSTER_MIGRATION_LOCK[0]}, ${CLUSTER_MIGRATION_LOCK[1]})`, [])
    const before = yield* clusterTablesPresent(sql)
    if (LIBRARY_TABLES.some((t) => !before.has(t))) {
      // building the storages runs their migrations (and nothing else: no runner registers);
      // with lock rows enabled the runner storage creates `cluster_locks` as well, so either
      // lock mode finds its table
      yield* Effect.scoped(Layer.build(
        Layer.mergeAll(SqlMessageStorage.layer, SqlRunnerStorage.layer).pipe(
          Layer.provide(ShardingConfig.layer({ shardLockDisableAdvisory: true }))
        )
      )).pipe(Effect.catchAllDefect((d) => Effect.fail(d)))
    }
    yield* InFlight.createTable
    yield* WindowClaims.migrate
    const after = yield* clusterTablesPresent(sql)
    yield* conn.executeRaw(`SELECT pg_advisory_unlock(${CLUSTER_MIGRATION_LOCK[0]}, ${CLUSTER_MIGRATION_LOCK[1]})`, [])
    return MIGRATED_TABLES.filter((t) => after.has(t) && !before.has(t)).map((t, i) => [i + 1, t] as const)
  }).pipe(
    Effect.scoped,
    Effect.provide(PgClient.layer({ url: Redacted.make(database), maxConnections: 4 })),
    Effect.mapError(unavailable(database, "migration failed"))
  )

/**
 * Refuses a cluster database that `assay migrate` has not prepared, before anything is
 * created in it: `ConfigError` (exit 2) naming the command to run when a cluster table is
 * missing, `StoreUnavailable` when the database cannot be reached. What `assay runner` and
 * `assay run --engine cluster` check first (the cluster's storage would otherwise create its
 * tables on its own, and two runners starting at once can collide doing so).
 *
 * @since 0.8.0
 * @category migrations
 */
export const checkMigrated = (database: string): Effect.Effect<void, ConfigError | StoreUnavailable> =>
  Effect.gen(function*() {
    const present = yield* clusterTablesPresent(yield* SqlClient.SqlClient)
    const missing = CLUSTER_TABLES.filter((t) => !present.has(t))
    if (missing.length === 0) return
    // the command to paste gives the URL without its password (a masked one would log in with `***`)
    const message = `the database ${redactUrl(database)} has no cluster tables (${missing.join(", ")}): ` +
      `run \`assay migrate --database ${shellQuote(withoutPassword(database))}\` once before starting runners or submitting` +
      (hasPassword(database) ? ` (${PASSWORD_HINT})` : "")
    return yield* new ConfigError({ message, issues: [{ path: "--database", message: "not migrated for the cluster" }] })
  }).pipe(
    Effect.scoped,
    Effect.provide(PgClient.layer({ url: Redacted.make(database), maxConnections: 1 })),
    Effect.catchAll((e): Effect.Effect<never, ConfigError | StoreUnavailable> =>
      e._tag === "ConfigError" ? Effect.fail(e) : Effect.fail(databaseFailure(database, "cannot read")(e))
    )
  )

/**
 * What `assay runner` runs: `config` (the experiment file), `database` (checked URL),
 * `address` (where other runners reach it; default the library's), `store` (the `--store`
 * flag), `concurrency` (`--concurrency`: attempts at once in this process; absent: the file's
 * `run.concurrency`, else 64) and `lease` (the global pool slots'
 * TTL and renewal interval; default 30 s, renewed every 10 s).
 *
 * @since 0.7.0
 * @category models
 */
export interface RunnerArgs {
  readonly config: string
  readonly database: string
  readonly address: { readonly host: string; readonly port: number } | undefined
  readonly store: Option.Option<string>
  readonly concurrency?: number | undefined
  readonly lease?: LeaseTiming | undefined
  /**
   * Window claims (default on; `false`: `--no-window-claims`): each window claimed whole, with
   * local deadlines, in place of a claim, a fence and an input read per task
   * (docs/scale-out.md "Window claims").
   */
  readonly windowClaims?: boolean | undefined
  /**
   * Block leases (default on, `{}`, when window claims are; `false`: `--no-block-leases`, and
   * always off without window claims): each global pool resource's slots held as a block sized
   * to the runner's demand-proportional share of the capacity and handed to the window's tasks
   * in memory; `expectedRunners` (`--expected-runners N`) only sets the first block's size,
   * `⌊capacity ÷ N⌋` (docs/scale-out.md "Block leases").
   */
  readonly blockLeases?: { readonly expectedRunners?: number | undefined } | false | undefined
}

/**
 * What a runner hosts, from its `-c FILE`: an experiment file's pipelines, or, for a suite file
 * (a document with a top-level `suite`), the pipelines of every member of the suite re-keyed
 * into it (`Suite.tagSpec`: member-prefixed pipeline ids, the member's pool aliases and output
 * directory), the suite's pools (shared and private, as on the embedded engine) and its `run`
 * section. A member whose source fails is left out of the runner's catalog with a warning
 * (its pipelines are refused as not runnable); the others are served.
 */
const hostedFile = (config: string, database: string) =>
  Effect.gen(function*() {
    if (yield* StudyConfig.isStudyFile(config)) return yield* studyHosted(config, database)
    if (!(yield* SuiteConfig.isSuiteFile(config))) {
      const experiment = yield* Experiment.load(config)
      return {
        hosted: hostedOf(experiment),
        specs: experiment.pipelines() as Stream.Stream<AnySpec, { readonly message: string }, FileSystem.FileSystem>,
        reload: undefined,
        serving: `runner: experiment ${config}: serving the pipelines of "${experiment.template.name}"`
      }
    }
    const loaded = yield* SuiteConfig.load(config, { strictEnv: false })
    for (const w of loaded.warnings) yield* Console.error(w)
    return {
      hosted: suiteHosted(loaded),
      specs: suiteSpecs(loaded),
      reload: undefined,
      serving: `runner: suite ${loaded.id}: serving members ${loaded.members.map((m) => m.id).join(", ")}`
    }
  })

/**
 * What a runner hosts for a study file (`assay runner -c STUDY`): the trials (variants ×
 * repeats, and the confirmation trials recorded on the cluster: {@link recordedStudyTrials})
 * of every protocol version up to the study's current one on the cluster (the version its
 * submitter last ran, kept in the store's `assay_meta` under `study/ID/version`; 1 before any
 * submission), each trial a member of the version's suite, re-keyed as `Study.execute` keys
 * them. `reload`: the same trials again when the recorded confirmation trials changed since
 * (a `study confirm --engine cluster` after the runner started), else none; the runner's
 * catalog asks it when a pipeline is not found (`catalogFromStreamReloading`). A new protocol
 * version is not reloaded: its pools may differ (the runner refuses its pipelines; restart it).
 */
const studyHosted = (config: string, database: string) =>
  Effect.gen(function*() {
    const sql = pgLayer(database)
    const base = yield* StudyConfig.load(config, { strictEnv: false })
    const current = yield* currentStudyVersion(base.id).pipe(Effect.provide(sql), Effect.orElseSucceed(() => 1))
    const recorded = (): Effect.Effect<ReadonlyArray<StudyTrialRef>> =>
      recordedStudyTrials(base.id).pipe(Effect.provide(sql), Effect.orElseSucceed((): ReadonlyArray<StudyTrialRef> => []))
    const specsOf = (extraTrials: ReadonlyArray<StudyTrialRef>) =>
      Effect.gen(function*() {
        const loaded = extraTrials.length === 0 ? base : yield* StudyConfig.load(config, { strictEnv: false, extraTrials })
        const suites = Array.from({ length: current }, (_, i) => loaded.suiteFor(i + 1))
        return { last: suites[suites.length - 1]!, specs: Stream.concatAll(Chunk.fromIterable(suites.map(suiteSpecs))) }
      })
    let extras = yield* recorded()
    const { last, specs } = yield* specsOf(extras)
    for (const w of last.warnings) yield* Console.error(w)
    // said once the runner is up (`runnerMain`): the declared trials of each version (variants
    // × repeats of the file), and the confirmation trials recorded, which are served for any
    // version (they are recorded by variant and repeat)
    const serving = servingStudyLine(base.id, current, base.suiteFor(current).members.length, extras.length)
    const reload = Effect.gen(function*() {
      const now = yield* recorded()
      if (sameTrials(now, extras)) return Option.none()
      const next = yield* specsOf(now).pipe(
        Effect.mapError((e) => new StoreUnavailable({ message: `cannot load the study file again: ${e.message}` }))
      )
      extras = now
      yield* Console.error(`runner: study ${base.id}: now serving ${Words.count(now.length, "confirmation trial")} too`)
      return Option.some(next.specs)
    })
    return { hosted: suiteHosted(last), specs, reload, serving }
  })

/**
 * The runner's line saying which trials of a study it serves: the protocol versions (1 up to
 * the study's current one on the cluster), the declared trials of each (variants × repeats of
 * the file: the same count for every version) and the confirmation trials recorded on the
 * cluster (`study confirm`), counted once whatever the number of versions.
 *
 * @param studyId the study's id
 * @param current the study's current protocol version on the cluster (1 or more)
 * @param declared the declared trials of one version
 * @param confirmations the confirmation trials recorded
 * @returns the line (without a newline)
 * @internal
 */
export const servingStudyLine = (studyId: string, current: number, declared: number, confirmations: number): string =>
  `runner: study ${studyId}: serving the trials of protocol version${current === 1 ? " 1" : `s 1-${current}`} (${
    Words.count(declared, "declared trial")
  }${current === 1 ? "" : " per version"}${
    confirmations === 0 ? "" : `, and the ${Words.count(confirmations, "confirmation trial")} recorded by study confirm`
  })`

/** A trial of a study by variant and repeat (a confirmation trial recorded on the cluster). */
type StudyTrialRef = { readonly variantId: string; readonly repeat: number }

const trialKey = (t: StudyTrialRef) => `${t.variantId}\u0000${t.repeat}`

const sameTrials = (a: ReadonlyArray<StudyTrialRef>, b: ReadonlyArray<StudyTrialRef>): boolean => {
  if (a.length !== b.length) return false
  const keys = new Set(a.map(trialKey))
  return b.every((t) => keys.has(trialKey(t)))
}

/**
 * The `assay_meta` key of a study's trials beyond the declared ones on the cluster
 * (confirmation trials, `study confirm`): a JSON array of `{ variantId, repeat }`.
 *
 * @internal
 */
export const studyTrialsKey = (studyId: string): string => `study/${studyId}/trials`

/**
 * The confirmation trials of a study its submitters recorded on the cluster
 * ({@link studyTrialsKey}), in the order recorded; none when nothing is recorded (or the
 * value is not such an array).
 *
 * @internal
 */
export const recordedStudyTrials = (studyId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql.unsafe<{ readonly value: string }>(`SELECT value FROM assay_meta WHERE key = $1`, [studyTrialsKey(studyId)])
    if (rows[0] === undefined) return []
    const value: unknown = JSON.parse(rows[0].value)
    if (!Array.isArray(value)) return []
    return value.flatMap((t): ReadonlyArray<StudyTrialRef> =>
      typeof t === "object" && t !== null && typeof t.variantId === "string" && Number.isSafeInteger(t.repeat)
        ? [{ variantId: t.variantId, repeat: t.repeat }]
        : []
    )
  })

/**
 * Records a study's confirmation trials on the cluster ({@link studyTrialsKey}): `trials`
 * added to the ones recorded (never removed: a runner serving them goes on serving them), in
 * one statement that merges with a concurrent record. The runners serve them from their next
 * lookup of a pipeline they do not know.
 *
 * @param studyId the study
 * @param trials the trials beyond the declared repeats (`{ variantId, repeat }`)
 * @internal
 */
export const recordStudyTrials = (studyId: string, trials: ReadonlyArray<StudyTrialRef>) =>
  Effect.gen(function*() {
    if (trials.length === 0) return
    const sql = yield* SqlClient.SqlClient
    const known = yield* recordedStudyTrials(studyId)
    const keys = new Set(known.map(trialKey))
    const added = trials.filter((t) => !keys.has(trialKey(t)))
    if (added.length === 0) return
    // merged in the statement: a record written meanwhile by another submitter is kept
    yield* sql.unsafe(
      `INSERT INTO assay_meta (key, value) VALUES ($1, $2)
       ON CONFLICT (key) DO UPDATE SET value = (
         SELECT jsonb_agg(u.t)::text FROM (
           SELECT jsonb_array_elements(assay_meta.value::jsonb) AS t
           UNION SELECT jsonb_array_elements(EXCLUDED.value::jsonb)
         ) u
       )`,
      [studyTrialsKey(studyId), JSON.stringify([...known, ...added].map((t) => ({ variantId: t.variantId, repeat: t.repeat })))]
    )
  })

/**
 * The study's current protocol version on the cluster, as its submitter recorded it
 * (`assay_meta` key `study/ID/version`); 1 when none is recorded.
 *
 * @internal
 */
export const currentStudyVersion = (studyId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql.unsafe<{ readonly value: string }>(`SELECT value FROM assay_meta WHERE key = $1`, [studyVersionKey(studyId)])
    const n = rows[0] === undefined ? 1 : Number(JSON.parse(rows[0].value))
    return Number.isInteger(n) && n >= 1 ? n : 1
  })

/**
 * The `assay_meta` key of a study's current protocol version on the cluster.
 *
 * @internal
 */
export const studyVersionKey = (studyId: string): string => `study/${studyId}/version`

/** The specs of every member of a loaded suite, re-keyed into it; a member whose source fails is left out with a line. */
const suiteSpecs = (loaded: SuiteConfig.LoadedSuite) =>
    Stream.concatAll(Chunk.fromIterable(loaded.members.map((m) =>
      m.experiment.pipelines().pipe(
        Stream.map((spec) =>
          tagSpec(spec as AnySpec, {
            suiteId: loaded.id,
            experimentId: m.id,
            poolAliases: m.poolAliases,
            outputDir: m.outputDir,
            ...(m.variables === undefined ? {} : { variables: m.variables })
          })
        ),
        Stream.catchAll((e) =>
          Stream.fromEffect(Console.error(
            `runner: suite member "${m.id}": its source failed (${e.message}); its pipelines are not served`
          )).pipe(Stream.drain)
        )
      )
    ))) as Stream.Stream<AnySpec, { readonly message: string }, FileSystem.FileSystem>

/**
 * Runs a runner process until it is told to stop: loads the experiment or the suite (exit 2 when invalid),
 * opens the shared store, the pools and the cluster on `database`,
 * and hosts the pipeline workflow. The first stop signal (SIGTERM, SIGINT, SIGHUP) closes the
 * process's call gate (`ClusterEngine.CallGate`: no call starts any more) and then ends the
 * runner as an interruption (exit 130); a watchdog's failure ends it with exit 1.
 *
 * @since 0.7.0
 * @category commands
 */
export const runnerMain = (o: RunnerArgs): Effect.Effect<never, unknown, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const { hosted: experiment, reload, serving, specs } = yield* hostedFile(o.config, o.database)
    const watchdogs = yield* Watchdog.settingsFromEnv
    const cancelEvery = yield* CancelMarks.cancelEveryFromEnv
    const { layer: store, target } = yield* sharedStoreLayer(experiment, o.store, o.database)
    // the experiment's `run.cache` and `pricing` apply to the runner's tasks (the submitter's
    // cache flags are refused: the runners read the experiment file)
    const cache = yield* runnerCache(experiment, target)
    // an unmigrated database is refused before anything is created in it
    yield* checkMigrated(o.database)
    const address = o.address
    const lease = o.lease ?? { leaseTtl: DEFAULT_LEASE_TTL, renewEvery: defaultRenewEvery(DEFAULT_LEASE_TTL) }
    const concurrency = runnerConcurrency(o.concurrency, experiment.run.concurrency)
    // both on by default (pg17af); block leases ride on the window claims' renewal
    const windowClaims = o.windowClaims !== false
    const blockLeases = !windowClaims || o.blockLeases === false ? undefined : (o.blockLeases ?? {})
    // what the runner serves and where it listens, said once it does (its checks passed, its
    // socket open), never before a refusal (tester17af F11)
    const started = (listening: string | undefined) =>
      Console.error(
      `runner: cluster database ${redactUrl(o.database)}${
        listening === undefined ? "" : `, listening on ${listening}`
      }; ${concurrency.n} attempt(s) at once in this process (${concurrency.from}); pool slots held ${Duration.format(lease.leaseTtl)} without renewal, renewed every ${Duration.format(lease.renewEvery)}${
        windowClaims ? "; window claims on" : "; window claims off (a claim per task)"
      }${
        blockLeases === undefined
          ? "; block leases off (a slot claim per task)"
          : `; block leases on (shares by demand${
            blockLeases.expectedRunners === undefined ? "" : `, first blocks for ${blockLeases.expectedRunners} runners`
          })`
      }`
    )
    // closed at the first stop signal, before anything closes: no call starts from then on
    const callGate = ClusterEngine.makeCallGate()
    const host = ClusterEngine.workflowLayer({
      callGate,
      concurrency: concurrency.n,
      pricing: experiment.run.pricing,
      cache: cache.run,
      windowClaims,
      blockLeases,
      cancelEvery: Option.getOrUndefined(cancelEvery)
    }).pipe(
      Layer.provideMerge(ClusterEngine.runnerLayer({
        shardingConfig: address === undefined ? {} : { runnerAddress: Option.some(RunnerAddress.make(address.host, address.port)) }
      })),
      Layer.provide(pgLayer(o.database)),
      // a study's catalog grows with the confirmation trials recorded after the runner started
      Layer.provide(
        reload === undefined
          ? ClusterEngine.catalogStreamLayer(specs, (e) => e.message)
          : Layer.effect(ClusterEngine.SpecCatalog, ClusterWorkflow.catalogFromStreamReloading(specs, (e) => e.message, reload))
      ),
      Layer.provide(Layer.mergeAll(
        // the cache is opened after the store and closed before it (it may be the store's database)
        cache.layer.pipe(Layer.provideMerge(store)),
        // global pools: capacity, quotas and health shared by every runner through the database
        PgPools.layer(experiment.pools, {
          plugins: experiment.plugins.algorithms,
          leaseTtl: lease.leaseTtl,
          renewEvery: lease.renewEvery
        }).pipe(Layer.provide(pgLayer(o.database))),
        NodeProcessRunner.layer
      ))
    )
    // the runner, and beside it two watchdogs whose failure ends the process with exit 1, so
    // that its supervisor restarts it (and the restart gives its shards back)
    return yield* Effect.scoped(Effect.gen(function*() {
      // a stop signal (SIGTERM from a supervisor's rolling restart, Ctrl-C) closes the call gate
      // first, then stops the runner as an interruption (exit 130): its scopes close after no
      // task can start a call any more (a call started while the process winds down could not
      // commit, and the task's next owner would call again: chaos C8). A signal while the
      // runner is already stopping ends it at once (`again`): see `closeWithin`.
      const stopped = yield* Deferred.make<Signals.StopSignal>()
      const again = yield* Deferred.make<Signals.StopSignal>()
      // the host's own scope, closed by `closeWithin` (never as a plain finalizer: a close that
      // hangs must not hang the process); when the runner is interrupted while it starts too
      const hostScope = yield* Effect.acquireRelease(
        Scope.make(),
        (scope, exit) => closeWithin(scope, exit, { deadline: CLOSE_DEADLINE, again: Deferred.await(again), code: ExitCode.Interrupted })
      )
      const served = yield* Effect.exit(Effect.gen(function*() {
        // the watchdogs' clients (one connection each, kept between pings: every 10 s with
        // pg's 10 s idle timeout each ping opened a new connection, tens of ms of Postgres's CPU:
        // BENCHMARKS.md pgp17an), built before the runner (whose tasks start as soon as it is up,
        // so that the start line follows at once): a database gone after the start line is a
        // failed ping, ridden out up to `lostAfter` (newuser37 F7: built after that line, a
        // database gone at that moment ended the runner with a bare `PgClient: Failed to connect`)
        const watchdogSql = yield* Effect.all([
          Layer.buildWithScope(PgClient.layer({ ...pgConfig(o.database), maxConnections: 1 }), hostScope),
          Layer.buildWithScope(PgClient.layer({ ...pgConfig(o.database), maxConnections: 1 }), hostScope)
        ]).pipe(Effect.mapError(startFailure(o.database)))
        const context = yield* Layer.buildWithScope(host, hostScope).pipe(
          Effect.catchIf(isOpenFailure, (e) => Effect.fail(listenRefused(address, e.cause))),
          Effect.mapError(startFailure(o.database))
        )
        // where it listens: `--listen`, else the library's default address it opened
        const listening = address !== undefined
          ? `${address.host}:${address.port}`
          : Option.getOrUndefined(Option.map(
            Context.get(context, ShardingConfig.ShardingConfig).runnerAddress,
            (a) => `${a.host}:${a.port}`
          ))
        yield* Console.error(serving)
        yield* started(listening)
        const sharding = Context.get(context, Sharding.Sharding)
        const ping = Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe("SELECT 1"))
        yield* (yield* Signals.Signals).handle((signal) =>
          Effect.flatMap(Deferred.isDone(stopped), (stopping) =>
            stopping
              ? Deferred.succeed(again, signal)
              : Effect.sync(callGate.close).pipe(
                // said, as the embedded run says why it stopped: a signal is a stop, not a crash
                // (exit 130 for every stop signal, as the embedded `assay run`)
                Effect.zipRight(Console.error(
                  `runner: ${signal} received: stopping (no call starts any more; this runner leaves the cluster and ` +
                    `its shards go to the other runners; exit 130)`
                )),
                Effect.zipRight(Deferred.succeed(stopped, signal))
              )
          )
        )
        // a stop signal (left), or a watchdog's verdict (right)
        return yield* Effect.raceFirst(
          Effect.map(Deferred.await(stopped), Either.left),
          Effect.raceFirst(
            Watchdog.databaseLost(ping, watchdogs, redactUrl(o.database)).pipe(Effect.provide(watchdogSql[0])),
            Watchdog.shardsStalled(unreadOnOwnedShards(sharding, defaultShardsPerGroup), watchdogs).pipe(
              Effect.provide(watchdogSql[1])
            )
          ).pipe(Effect.flip, Effect.map(Either.right))
        )
      }))
      const verdict = Exit.isSuccess(served) ? Either.getRight(served.value) : Option.none()
      if (Option.isSome(verdict)) {
        // said now, before the runner closes (it was said only once the close was over, and a
        // close that hung said nothing: newuser37 F1); a signal from now on ends a stuck close
        yield* Deferred.succeed(stopped, "SIGTERM")
        yield* Effect.sync(callGate.close)
        yield* Console.error(verdict.value.message)
      }
      yield* closeWithin(hostScope, served, {
        // nothing the close does can reach a database that is gone: short
        deadline: Option.isSome(verdict) && verdict.value._tag === "StoreUnavailable" ? LOST_CLOSE_DEADLINE : CLOSE_DEADLINE,
        again: Deferred.await(again),
        // the code the process exits with (only said in the close's message): a watchdog's
        // verdict 1, a configuration mistake at start 2 (e.g. no such database), another
        // failure 1, a stop signal 130
        code: Option.isSome(verdict)
          ? ExitCode.Failures
          : Exit.isFailure(served) && !Exit.isInterrupted(served)
          ? (Option.getOrUndefined(Cause.failureOption(served.cause)) as { _tag?: unknown } | undefined)?._tag === "ConfigError"
            ? ExitCode.Invalid
            : ExitCode.Failures
          : ExitCode.Interrupted
      })
      if (Option.isSome(verdict)) return yield* Effect.fail(new ExitWith(ExitCode.Failures))
      if (Exit.isFailure(served)) return yield* Effect.failCause(served.cause)
      return yield* Effect.interrupt
    }))
  })

/**
 * How long a stopping runner waits for its cluster part to close (entities stopped, shard
 * locks released, the runner unregistered) before it exits anyway: 30 s, longer than
 * `@effect/cluster`'s entity termination timeout (15 s) so that a busy runner's entities end
 * first. When the watchdog found the database gone: 5 s (see {@link closeWithin}).
 */
const CLOSE_DEADLINE = Duration.seconds(30)
const LOST_CLOSE_DEADLINE = Duration.seconds(5)

/**
 * Closes the runner's host scope (`exit`: why it stops) on a fiber of its own and waits for it
 * at most `deadline`, or until a stop signal comes while it closes (`again`); past either it
 * says so and returns, and the process exits with `code` while the close goes on unfinished.
 *
 * Why a close can hang for good (newuser37 F1, reproduced and traced): `@effect/cluster` 0.60's
 * `Sharding` releases its shard locks in a scope finalizer (`runnerStorage.releaseAll`,
 * SqlRunnerStorage). With the database away longer than a lock refresh (10 s), the lock
 * connection's `ResourceRef` is left `Acquiring` after a failed rebuild (its latch closed), so
 * the release waits on `lockConn.await` for a rebuild that only a later failed lock operation
 * would start, and the library's own `Effect.timeout` around it cannot interrupt it: a
 * finalizer runs uninterruptibly, and so does the fiber it forks. Nothing it holds outlives
 * the exit: the shard locks are advisory locks of its (dead) session or rows that expire after
 * `SHARD_LOCK_EXPIRATION`, pool slots and window claims expire after their TTLs.
 */
const closeWithin = (
  scope: Scope.CloseableScope,
  exit: Exit.Exit<unknown, unknown>,
  o: { readonly deadline: Duration.Duration; readonly again: Effect.Effect<Signals.StopSignal>; readonly code: number }
) =>
  Effect.gen(function*() {
    const closing = yield* Effect.forkDaemon(Scope.close(scope, exit))
    // raced on a fiber of its own, interruptible: the caller may be uninterruptible (an
    // interrupted runner closes from its finalizer), where a race could not stop its losers
    const outcome = yield* Effect.raceAll([
      Effect.as(Fiber.await(closing), Option.none<string>()),
      Effect.as(
        Effect.sleep(o.deadline),
        Option.some(`runner: leaving the cluster did not finish within ${Duration.format(o.deadline)}; exiting anyway (exit ${o.code}); ` +
          `the shard locks, pool slots and claims it held free themselves when their time runs out`)
      ),
      Effect.map(o.again, (signal) =>
        Option.some(`runner: ${signal} received while stopping: exiting at once (exit ${o.code}); ` +
          `the shard locks, pool slots and claims it held free themselves when their time runs out`))
    ]).pipe(Effect.interruptible, Effect.forkDaemon, Effect.flatMap(Fiber.join))
    if (Option.isSome(outcome)) yield* Console.error(outcome.value)
  })

/**
 * A failure to start the runner's cluster part: a connection problem explained as
 * {@link databaseFailure} explains it (the server, the cause in words, what to do), instead of
 * the driver's bare `PgClient: Failed to connect`; any other failure as it is.
 */
const startFailure = (database: string) => <E>(e: E): E | ConfigError | StoreUnavailable =>
  (e as { _tag?: unknown } | null)?._tag === "SqlError" || isConnectionProblem(e) ? databaseFailure(database, "cannot start")(e) : e

/** Whether `e` is the runner's socket server failing to open (`SocketServerError`, reason `Open`). */
const isOpenFailure = <E>(e: E): e is E & { readonly _tag: "SocketServerError"; readonly reason: "Open"; readonly cause: unknown } =>
  (e as { _tag?: unknown } | null)?._tag === "SocketServerError" && (e as { reason?: unknown }).reason === "Open"

/**
 * The runner's socket server could not listen (`--listen`, else the library's
 * `localhost:34431`): a `ConfigError` (exit 2: a restart would fail the same way) naming the
 * address and why (in use, not allowed, not this machine's), instead of the server's bare `Open`.
 *
 * @param address the `--listen` address, if given
 * @param cause what `listen` failed with (a Node `SystemError` with `code`)
 * @returns the error naming `--listen`
 * @internal
 */
export const listenRefused = (address: { readonly host: string; readonly port: number } | undefined, cause: unknown): ConfigError => {
  const code = (cause as { code?: unknown } | null)?.code
  const where = address === undefined ? "localhost:34431 (the default; give --listen HOST:PORT)" : `${address.host}:${address.port}`
  const why = code === "EADDRINUSE"
    ? "the address is already in use (another runner or program listens there): give --listen a free HOST:PORT"
    : code === "EACCES"
    ? "not allowed (ports below 1024 need privileges): give --listen a port of 1024 or more"
    : code === "EADDRNOTAVAIL"
    ? "the host is not an address of this machine: give --listen one of its addresses"
    : code === "ENOTFOUND" || code === "EAI_AGAIN"
    ? "the host name cannot be resolved"
    : cause instanceof Error
    ? cause.message
    : String(cause)
  const message = `--listen: the runner cannot listen on ${where}: ${why}`
  return new ConfigError({ message, issues: [{ path: "--listen", message: why }] })
}

/**
 * The attempts a runner process runs at once, and where the number comes from: `--concurrency`,
 * else the file's `run.concurrency` (an experiment's, or a suite's: the same meaning as on the
 * embedded engine, attempts at once in one process; each runner applies it to itself, so N
 * runners run up to N times as many, and the pools bound them all), else 64.
 */
const runnerConcurrency = (flag: number | undefined, written: number | undefined) =>
  flag !== undefined
    ? { n: flag, from: "--concurrency" }
    : written !== undefined
    ? { n: written, from: "run.concurrency" }
    : { n: 64, from: "the default" }

/** The library's default shards per group (the runner does not change it). */
const defaultShardsPerGroup = 300

/**
 * The unread, deliverable, unprocessed messages of the shards this runner holds (at most
 * 1,000 ids; none when it holds no shard or the read fails): what the stalled-shard watchdog
 * compares from one period to the next (research/distributed.md §5: Effect-TS/effect#6248, a
 * runner that stays healthy while its storage loop stops reading). The library's own guards
 * stay in place (a lock not refreshed within `shardLockExpiration` is taken over;
 * `RunnerHealth` pings drop an unreachable runner from the ring); this covers the case they
 * do not see.
 */
const unreadOnOwnedShards = (sharding: Sharding.Sharding["Type"], shardsPerGroup: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const owned: Array<string> = []
    for (let i = 1; i <= shardsPerGroup; i++) {
      const id = ShardId.make("default", i)
      if (sharding.hasShardId(id)) owned.push(id.toString())
    }
    if (owned.length === 0) return { shards: 0, ids: [] as ReadonlyArray<string> }
    const now = yield* Clock.currentTimeMillis
    const rows = yield* sql.unsafe<{ readonly id: string }>(
      `SELECT id::text AS id FROM cluster_messages
       WHERE processed = false AND last_read IS NULL AND (deliver_at IS NULL OR deliver_at <= $1)
         AND shard_id = ANY($2) LIMIT 1000`,
      [now, owned]
    ).pipe(Effect.orElseSucceed(() => []))
    return { shards: owned.length, ids: rows.map((r) => r.id) }
  })

export {
  /**
   * The stalled-shard watchdog's verdict: messages on this runner's shards stayed unread for a
   * whole check period (`ASSAY_RUNNER_STALL_AFTER`, 3 minutes by default). Ends `assay runner`
   * with exit 1 (its supervisor restarts it).
   *
   * @since 0.8.0
   * @category errors
   */
  ShardsStalled
} from "../services/internal/cluster/watchdog.js"

/**
 * What a suite's runner and submitter host: the suite's plugins, run section and pools, every member's cache use.
 *
 * @internal
 */
export const suiteHosted = (loaded: SuiteConfig.LoadedSuite): Hosted => ({
  written: undefined,
  suite: true,
  plugins: loaded.plugins,
  baseDir: loaded.baseDir,
  run: loaded.run,
  taskCacheOn: taskCacheOn(loaded.members.map((m) => m.experiment)),
  pools: loaded.pools
})

/**
 * A submission's report as the submitter prints it: on a stop signal, `stopReason` is the
 * signal's name in lower case (`sigint`, `sigterm`, `sighup`), as the embedded run says it.
 *
 * @internal
 */
export type Shown = Omit<InternalSubmit.SubmitReport, "stopReason"> & { readonly stopReason: string | null }

/**
 * A submission's outcome as {@link withStopSignals} gives it: the report, whether a stop signal
 * stopped it (`stopped`), what `gather` gave (`None` when a signal cut it short) and whether a
 * signal came after the submission had ended (`late`: the summary is printed, the exit is 130).
 *
 * @internal
 */
export interface StopOutcome<G> {
  readonly report: Shown
  readonly stopped: boolean
  readonly gathered: Option.Option<G>
  readonly late: boolean
}

/**
 * Runs `submit` with the stop signals claimed: the first one interrupts it (admission stops,
 * the run is closed `interrupted`; its admitted pipelines go on on the runners), and the
 * submitter then prints what it had seen, as the embedded run prints its report on Ctrl-C
 * (tester17ad F4). The claim is held until `show` has printed the summary (break39 F3): the
 * client layer's teardown comes after it, and a signal there (a second Ctrl-C) still ends the
 * process (the main program's claim, exit 130), with the summary printed already.
 *
 * - `gather(report)` (optional: the suite's members' outcomes, read from the store) runs under
 *   the claim; a signal during it cuts it short (`gathered` `None`) and the summary is printed
 *   with what is known;
 * - `show(outcome)` prints; a signal then waits for it (printing takes no time);
 * - `onClaimed` is told once the signals are claimed (before anything is submitted: a signal
 *   before it interrupts the program, and nothing was submitted, break39 F5);
 * - `onNotAdmitted` is told when a signal stopped the submission before it admitted anything
 *   (no report: its run was being opened), then the interruption goes on.
 *
 * Succeeds with {@link StopOutcome}, or, after a signal, with the report the submission gave
 * `onInterrupted` (its `stopReason` the signal's name) and `stopped: true`; any other failure or
 * interruption is the submission's own.
 *
 * @internal
 */
export const withStopSignals = <G, E, R, E2, R2>(
  submit: (onInterrupted: (r: InternalSubmit.SubmitReport) => Effect.Effect<void>) => Effect.Effect<InternalSubmit.SubmitReport, E, R>,
  options: {
    readonly gather?: ((report: Shown) => Effect.Effect<G, E2, R2>) | undefined
    readonly show: (outcome: StopOutcome<G>) => Effect.Effect<void, never, R2>
    readonly onClaimed?: (() => void) | undefined
    readonly onNotAdmitted?: Effect.Effect<void> | undefined
  }
): Effect.Effect<StopOutcome<G>, E | E2, R | R2> =>
  Effect.scoped(Effect.gen(function*() {
    let signal: Signals.StopSignal | undefined
    let partial: InternalSubmit.SubmitReport | undefined
    /** What a signal interrupts: the submission, then `gather`; none while `show` prints. */
    let target: Fiber.RuntimeFiber<unknown, unknown> | undefined
    /** A signal came after the submission ended. */
    let late = false
    let ended = false
    yield* (yield* Signals.Signals).handle((s) =>
      Effect.suspend(() => {
        if (ended) late = true
        else signal ??= s
        // a second signal while the submission winds down (its run closed, its report made)
        // has nothing more to stop: the summary follows at once
        return target === undefined ? Effect.void : Fiber.interruptFork(target)
      })
    )
    options.onClaimed?.()
    const fiber = yield* Effect.fork(submit((r) => Effect.sync(() => void (partial = r))))
    target = fiber
    // a signal that came before the fork (its handler ran first)
    if (signal !== undefined) yield* Fiber.interruptFork(fiber)
    const exit = yield* Fiber.await(fiber)
    ended = true
    target = undefined
    let outcome: { readonly report: Shown; readonly stopped: boolean }
    if (Exit.isSuccess(exit)) outcome = { report: exit.value, stopped: false }
    else if (signal !== undefined && partial !== undefined && Exit.isInterrupted(exit)) {
      outcome = { report: { ...partial, stopReason: signal.toLowerCase() }, stopped: true }
    } else {
      if (signal !== undefined && partial === undefined && Exit.isInterrupted(exit) && options.onNotAdmitted !== undefined) {
        yield* options.onNotAdmitted
      }
      return yield* Effect.failCause(exit.cause)
    }
    let gathered = Option.none<G>()
    if (options.gather !== undefined && !late) {
      const gather = yield* Effect.fork(options.gather(outcome.report))
      target = gather
      if (late) yield* Fiber.interruptFork(gather)
      const g = yield* Fiber.await(gather)
      target = undefined
      if (Exit.isSuccess(g)) gathered = Option.some(g.value)
      else if (!(late && Exit.isInterrupted(g))) return yield* Effect.failCause(g.cause)
    }
    const done: StopOutcome<G> = { ...outcome, gathered, late }
    yield* options.show(done)
    return { ...done, late }
  }))

/**
 * What a stop signal before the submission claimed the signals says (break39 F5): start-up
 * (the file, the database, the cluster's client) had not submitted anything yet.
 */
const NOTHING_SUBMITTED_MESSAGE = "stopped before anything was submitted: no run was created."

/**
 * What a stop signal that came while the submission was opening its run says: nothing was
 * admitted (the run's row, if it was written, has no pipeline).
 */
const notAdmittedMessage = (runId: RunId) =>
  `stopped before anything was admitted (run ${runId} was being opened): nothing was submitted. Run the same command again to submit.`

/** What Ctrl-C on a submitter says (an experiment's or a suite's). */
const STOPPED_MESSAGE =
  "stopped: no more pipelines are admitted; the admitted ones go on on the runners. Run the same command again to follow them and admit the rest."

/**
 * The submitter's progress line on stderr (none with `--quiet`; told after every poll, printed
 * only when it differs from the last one printed; the pipelines a cancel left `interrupted`
 * are counted once there are some) and its warning when no runner
 * is up (said even with `--quiet`: nothing moves until a runner is up), naming the command that
 * starts one with the file given (an experiment's or a suite's) and the database URL without its
 * password (pasteable: a masked `user:***@` would log in with `***`), followed, when the URL had
 * one, by a line saying the password is to be given again (`PGPASSWORD`, `~/.pgpass`). A runner
 * that left with windows in flight (which one, how many, when its shard locks expire) and the
 * moment their work ran again are said too, as `cluster: …` lines (newuser37 F4).
 *
 * @internal
 */
export const followProgress = (
  args: { readonly quiet: boolean; readonly config: string },
  database: string
): Pick<ClusterEngine.SubmitOptions, "onProgress" | "onWarning"> => {
  // the line is told after every poll (each second): printed only when it changed, so that a
  // log keeps the other lines (no runner up, the stop) in sight (tester17af F12)
  let last: string | undefined
  return {
    onProgress: (p) =>
      Effect.suspend(() => {
        const line = `cluster run ${p.runId}: ${p.admitted} admitted, ${p.running} running, ${p.succeeded} succeeded, ${p.failed} failed, ${
          interruptedText(p)
        }${p.skipped} already done${followedText(p)}`
        if (args.quiet || line === last) return Effect.void
        last = line
        return Console.error(line)
      }),
    // a runner that left, and when its windows ran again: said as they are (even with --quiet)
    onWarning: (w) =>
      w._tag === "RunnerLeft" || w._tag === "RunnerResumed" ? Console.error(`cluster: ${w.message}`) : Console.error(
        `${w.message}. Start one (or several) with: assay runner -c ${shellQuote(args.config)} --database ${
          shellQuote(withoutPassword(database))
        }${hasPassword(database) ? `\n  (${PASSWORD_HINT})` : ""}`
      )
  }
}

// ---------------------------------------------------------------------------------------------
// assay run --engine cluster
// ---------------------------------------------------------------------------------------------

/**
 * What `run --engine cluster` passes on: the experiment file, the database, the store flag,
 * `--max-admitted` (else `run.maxAdmitted`, else 1,024), `--limit`, `--label` (else `run.label`),
 * `--stop-after-failures` (else `run.stopAfterFailures`), `--stop-after` (else `run.stopAfter`),
 * `--quiet`.
 *
 * @since 0.7.0
 * @category models
 */
export interface SubmitArgs {
  readonly config: string
  readonly database: string
  readonly store: Option.Option<string>
  readonly maxAdmitted: Option.Option<number>
  readonly limit: Option.Option<number>
  readonly label: Option.Option<string>
  readonly quiet: boolean
  readonly strictEnv: boolean
  /** `--stop-after-failures` (since 0.12.0; absent: none given). */
  readonly stopAfterFailures?: Option.Option<number> | undefined
  /** `--stop-after`, parsed (since 0.12.0; absent: none given). */
  readonly stopAfter?: Duration.Duration | undefined
  /** `--summary` (since 0.12.0; default `text`): `json` prints {@link clusterJson} on stdout. */
  readonly summary?: "text" | "json" | undefined
}

/**
 * The interrupted pipelines of a submission as its lines say them (`3 interrupted (3 refused
 * by the runners), `; nothing when none): the rows the runners refused are left `interrupted`.
 */
const interruptedText = (p: Pick<InternalSubmit.SubmitProgress, "interrupted" | "refused">): string =>
  p.interrupted > 0 ? `${p.interrupted} interrupted${p.refused > 0 ? ` (${p.refused} refused by the runners)` : ""}, ` : ""

/**
 * The pipelines of earlier runs a submission followed, as its lines say them (`; followed 884
 * of run R: 880 succeeded, 4 failed, 12 still running`; nothing when none): they are filed
 * under run R, not this one (`SubmitProgress.followed`).
 */
const followedText = (p: Pick<InternalSubmit.SubmitProgress, "followed">): string => {
  const f = p.followed
  const total = f.running + f.succeeded + f.failed + f.interrupted
  if (total === 0) return ""
  const parts = [`${f.succeeded} succeeded`, `${f.failed} failed`]
  if (f.interrupted > 0) parts.push(`${f.interrupted} interrupted`)
  if (f.running > 0) parts.push(`${f.running} still running`)
  return `; followed ${total} of run ${f.runIds.join(", ")}: ${parts.join(", ")}`
}

/**
 * The last line of a cluster submission (`--summary text`, stdout): its own pipelines by
 * outcome, those already done, those still running on the runners after a stop signal, those
 * withheld (read and not admitted: a stop rule stopped admission first, or another submission
 * of the same pipelines admitted them: that one follows them, break38 F3), then the followed
 * ones of earlier runs, and the time taken (ms).
 */
export const summaryLine = (report: Shown): string =>
  `cluster run ${report.runId}: ${report.succeeded} succeeded, ${report.failed} failed, ${
    interruptedText(report)
  }${report.skipped} already done${
    // on a stop signal: the admitted pipelines go on on the runners
    report.running > 0 ? `, ${report.running} still running on the runners` : ""
  }${
    report.withheld > 0
      ? `, ${report.withheld} not admitted (a stop came first, or another submission admitted them)`
      : ""
  }${followedText(report)} (${report.durationMs} ms)`

/**
 * The `--summary json` object of a cluster submission: the embedded run's fields that exist on
 * the cluster (`runId`, `status`, `durationMs`, `stopReason`, `skipped`, `stats.pipelines`: this
 * submission's pipelines by outcome, `succeeded` / `failed` / `interrupted`, as their rows
 * are), and the cluster's own under `cluster` (`admitted`, `refused`: the `interrupted` ones
 * runners refused, `withheld`, `running`: still running on the runners when a stop signal
 * ended the submission, `followed`: the pipelines of earlier runs it followed, by outcome, and
 * the runs they are filed under, `causes`), plus `engine: "cluster"` and the store (without
 * its password).
 *
 * @internal
 */
export const clusterJson = (report: Shown, store: string): Record<string, unknown> => ({
  runId: report.runId,
  engine: "cluster",
  status: report.status,
  durationMs: report.durationMs,
  stopReason: report.stopReason,
  skipped: report.skipped,
  stats: {
    pipelines: {
      total: report.succeeded + report.failed + report.interrupted,
      byState: { succeeded: report.succeeded, failed: report.failed, interrupted: report.interrupted }
    }
  },
  cluster: {
    admitted: report.admitted,
    refused: report.refused,
    withheld: report.withheld,
    running: report.running,
    followed: report.followed,
    causes: report.causes
  },
  store: redactUrl(store)
})

/**
 * The fields of a `run` section the cluster engine carries out: `store`, `maxAdmitted`,
 * `label`, `notes`, `meta`, `stopAfterFailures` and `stopAfter` (the submitter's), `cache`,
 * `pricing` and `concurrency` (the runners read them from the same file: `concurrency` is each
 * runner's attempts at once unless its `--concurrency` says otherwise). Any other field is refused (exit 2), never ignored.
 */
const CLUSTER_RUN_FIELDS: ReadonlySet<string> = new Set([
  "store",
  "maxAdmitted",
  "label",
  "notes",
  "meta",
  "stopAfterFailures",
  "stopAfter",
  "concurrency",
  "cache",
  "pricing"
])

/** Why a `run` field is not carried out on the cluster engine (the refusal's wording). */
const runFieldWhy: Readonly<Record<string, string>> = {
  journal: "the cluster's store keeps full payloads",
  runId: "the submitter names the run"
}

/**
 * Refuses (exit 2, at `run.FIELD`) the first field of a `run` section (`run` as written) the
 * cluster engine does not carry out ({@link CLUSTER_RUN_FIELDS}).
 *
 * @internal
 */
export const refuseRunFields = (run: Readonly<Record<string, unknown>>) =>
  Effect.suspend(() => {
    const field = Object.keys(run).find((k) => run[k] !== undefined && !CLUSTER_RUN_FIELDS.has(k))
    if (field === undefined) return Effect.void
    const why = runFieldWhy[field]
    return Effect.fail(configError(
      `run.${field}`,
      `run.${field} is not supported on the cluster engine yet${why === undefined ? "" : ` (${why})`}: ` +
        "remove it to run on --engine cluster, or run on the embedded engine"
    ))
  })

/**
 * The submitter's wall-time stop: `--stop-after` (parsed by `run`), else the file's
 * `run.stopAfter` (a duration as written: `"10 minutes"`, or milliseconds).
 */
const stopAfterOf = (flag: Duration.Duration | undefined, written: Duration.DurationInput | undefined) =>
  flag ?? (written === undefined ? undefined : Duration.decode(written))

/** The message said when `stopAfter` (`d`) stopped admission. */
const stoppedAfterMessage = (d: Duration.Duration) =>
  `stopped: --stop-after / run.stopAfter (${Duration.format(d)}) elapsed: no more pipelines were admitted; ` +
  "the ones admitted before it still ran to their end. Run the same command again to admit the rest."

/** The message said when `stopAfterFailures` (`n`) stopped admission. */
const stoppedMessage = (n: number, failed: number) =>
  `stopped: ${failed} pipeline(s) failed (stopAfterFailures ${n}): no more pipelines were admitted; ` +
  "the ones admitted before the count was reached still ran to their end. Run the same command again to admit the rest."

/**
 * Says on stderr which stop rule stopped admission, if one did. A stop is deliberate, as on
 * the embedded engine: the exit code follows the pipelines' outcome (1 when some failed).
 */
const stopSaid = (
  report: Shown,
  stopAfterFailures: number | undefined,
  stopAfter: Duration.Duration | undefined
) =>
  report.stopReason === "stop_after_failures"
    ? Console.error(stoppedMessage(stopAfterFailures ?? 0, report.failed))
    : report.stopReason === "stop_after" && stopAfter !== undefined
    ? Console.error(stoppedAfterMessage(stopAfter))
    : Effect.void

/**
 * `assay run -c FILE --engine cluster --database URL`: loads the experiment (exit 2 when
 * invalid, or when it declares control and the store keeps no traversal state), registers the
 * run in the shared store, admits pipelines in windows through client-only sharding, prints progress on stderr and the
 * counts on stdout. Exit 0 when every pipeline succeeded (or was already done), 1 when some
 * failed (its own, or an earlier run's it followed), 130 when interrupted (admission stops;
 * admitted pipelines go on on the runners, and running the same command again follows them:
 * counted apart, as `followed`, since they stay filed under their run; and admits the rest).
 *
 * @since 0.7.0
 * @category commands
 */
export const submitRun = (args: SubmitArgs): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.suspend(() => {
  /** The submission claimed the stop signals: a signal before it finds nothing submitted (break39 F5). */
  let claimed = false
  return Effect.gen(function*() {
    const database = yield* checkDatabase(args.database)
    const experiment = yield* Experiment.load(args.config, { strictEnv: args.strictEnv })
    yield* refuseRunFields(experiment.run)
    const { layer: store, target } = yield* sharedStoreLayer(hostedOf(experiment), args.store, database)
    yield* checkMigrated(database)
    const maxAdmitted = Option.getOrElse(args.maxAdmitted, () => experiment.run.maxAdmitted ?? InternalSubmit.DEFAULT_MAX_ADMITTED)
    const stopAfterFailures = Option.getOrElse(args.stopAfterFailures ?? Option.none(), () => experiment.run.stopAfterFailures)
    const stopAfter = stopAfterOf(args.stopAfter, experiment.run.stopAfter)
    const storeShown = target._tag === "Postgres" ? target.url : Option.getOrElse(args.store, () => database)
    const summarize = (report: Shown) =>
      args.summary === "json"
        ? Console.log(JSON.stringify(clusterJson(report, storeShown)))
        : Console.log(summaryLine(report))
    const runId = yield* InternalSubmit.makeRunId(yield* Clock.currentTimeMillis)
    const { late, report, stopped } = yield* withStopSignals((onInterrupted) =>
      ClusterEngine.submit(experiment.pipelines(Option.getOrUndefined(args.limit)), {
        runId,
        maxAdmitted,
        label: Option.getOrElse(args.label, () => experiment.run.label),
        notes: experiment.run.notes,
        meta: experiment.run.meta,
        stopAfterFailures,
        stopAfter,
        pollInterval: Duration.seconds(1),
        onInterrupted,
        // runners refused pipelines: the summary (as the run's row closes it), then the refusal (exit 2)
        onRefused: (r) => summarize({ ...r, stopReason: "submit_failed" }),
        ...followProgress(args, database)
      }), {
      onClaimed: () => void (claimed = true),
      onNotAdmitted: Console.error(notAdmittedMessage(runId)),
      // printed while the signals are still claimed: before the client layer's teardown
      // (break39 F3: a second Ctrl-C there lost the summary)
      show: ({ report, stopped }) =>
        Effect.gen(function*() {
          yield* summarize(report)
          for (const cause of report.causes) yield* Console.error(`  ${cause}`)
          // a stop signal: what was seen is printed above, then the stop is said (exit 130)
          if (stopped) yield* Console.error(STOPPED_MESSAGE)
        })
    }).pipe(
      Effect.provide(Layer.merge(ClusterEngine.clientLayer().pipe(Layer.provide(pgLayer(database))), store))
    )
    if (stopped || late) return yield* Effect.fail(new ExitWith(ExitCode.Interrupted))
    yield* stopSaid(report, stopAfterFailures, stopAfter)
    // a followed pipeline of an earlier run that failed is a failure of the experiment too
    if (report.failed > 0 || report.followed.failed > 0) return yield* Effect.fail(new ExitWith(ExitCode.Failures))
  }).pipe(Effect.onInterrupt(() => claimed ? Effect.void : Console.error(NOTHING_SUBMITTED_MESSAGE)))
  })

// ---------------------------------------------------------------------------------------------
// assay run -c SUITE --engine cluster
// ---------------------------------------------------------------------------------------------

/**
 * What `run -c SUITE --engine cluster` passes on: {@link SubmitArgs} and the members selected
 * (`--experiment`, repeatable; none: every member).
 *
 * @since 0.12.0
 * @category models
 */
export interface SuiteSubmitArgs extends SubmitArgs {
  readonly experiments: ReadonlyArray<string>
}

/**
 * Refuses (exit 2, at `experiments.ID`) a selected member whose source no longer yields some of
 * its stored pipelines (rows edited or removed since they ran) or yields an explicit key whose
 * row changed: one read of the member's stored keys and one pass over its source, for the
 * members the store holds pipelines of. A source that fails here is left to the run (which
 * records the failure for the member).
 */
const refuseChangedRows = (loaded: SuiteConfig.LoadedSuite, selected: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (const m of loaded.members) {
      if (!selected.includes(m.id)) continue
      const stored = yield* PgSuites.storedKeys(sql, loaded.id, m.id)
      if (stored.size === 0) continue
      const current = new Set<string>()
      const edited: Array<string> = []
      const read = yield* Effect.either(Stream.runForEach(m.experiment.pipelines(), (spec) =>
        Effect.sync(() => {
          const key = spec.member?.localKey ?? spec.key
          current.add(key)
          const seed = stored.get(key)
          if (seed !== undefined && seed !== spec.seedDigest) edited.push(key)
        })))
      if (read._tag === "Left") continue
      const stale = [...stored.keys()].filter((k) => !current.has(k))
      if (stale.length === 0 && edited.length === 0) continue
      const keys = [...edited, ...stale]
      const field = memberPath(m.id)
      const message = `${keys.length} of the member's stored pipeline(s) no longer match its source (local keys ${
        keys.slice(0, 5).join(", ")
      }${keys.length > 5 ? ", …" : ""}): input rows were edited or removed since they ran. ` +
        "Accepting changed rows (--accept-changed-rows) is not supported on the cluster engine yet: " +
        "restore the rows, or use a new member id or another store"
      return yield* new ConfigError({ message: `${field}: ${message}`, issues: [{ path: field, message }] })
    }
  })

/**
 * `assay run -c SUITE --engine cluster --database URL [--experiment ID ...]`: loads the suite
 * (exit 2 when invalid), refuses what the cluster engine does not carry out yet (a `run` field
 * other than store, maxAdmitted, label, notes, meta, stopAfterFailures, cache, pricing: exit 2
 * naming the field), opens the shared store (it must be a Postgres store: the suite's catalog lives in it,
 * `layers/internal/pg/suites.ts`), registers the selected members (a member whose definition
 * changed since the store registered it is refused, exit 2, before anything is admitted), then
 * admits the members' pipelines round-robin (`Suite.pipelines`, recording each member's facts for
 * the run) through the cluster submitter, and prints the run's counts and one line per member.
 * A suite-wide `stopAfterFailures` (`--stop-after-failures`, else `run.stopAfterFailures`) stops
 * admitting every member once that many pipelines failed; a member's own `stopAfterFailures`
 * stops admitting that member only (its source is read no further, its specs already read are
 * withheld); pipelines admitted before either count was reached still run. The run record carries the suite id and the selected members (`meta.suite`). Exit 0 when every
 * selected member's pipelines succeeded (or were already done), 1 when a pipeline failed or a
 * member's source failed, 130 when interrupted (resumable by submitting again), 2 when runners
 * refused pipelines (the summary first, the refused ones counted `interrupted` in their member's
 * line, then the runners' reason; submitting again once they serve the suite runs them).
 *
 * @since 0.12.0
 * @category commands
 */
export const submitSuite = (args: SuiteSubmitArgs): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.suspend(() => {
  /** The submission claimed the stop signals: a signal before it finds nothing submitted (break39 F5). */
  let claimed = false
  return Effect.gen(function*() {
    const database = yield* checkDatabase(args.database)
    const selection = args.experiments.length === 0 ? undefined : args.experiments
    const loaded = yield* SuiteConfig.load(args.config, {
      strictEnv: args.strictEnv,
      ...(selection === undefined ? {} : { selected: selection })
    })
    const suite = yield* Suite.fromLoaded(loaded)
    for (const u of loaded.unresolvedEnv) yield* Console.error(Words.unsetEnvWarning(u))
    for (const w of loaded.warnings) yield* Console.error(w)
    const selected = yield* Suite.select(suite, selection)
    yield* refuseRunFields(loaded.run)
    // the suite-wide budget stops admitting every member; a member's own stops only it
    const stopAfterFailures = Option.getOrElse(args.stopAfterFailures ?? Option.none(), () => loaded.run.stopAfterFailures)
    // wall time is suite-wide only (a member has no stopAfter of its own, as embedded)
    const stopAfter = stopAfterOf(args.stopAfter, loaded.run.stopAfter)
    const budgetOf = new Map(selected.flatMap((m) => m.stopAfterFailures == null ? [] : [[m.id, m.stopAfterFailures] as const]))
    const hosted = suiteHosted(loaded)
    const { layer: store, target } = yield* sharedStoreLayer(hosted, args.store, database)
    if (target._tag !== "Postgres") {
      return yield* configError(
        Option.isSome(args.store) ? "--store" : "--database",
        "a suite on the cluster engine needs a Postgres store (its members and runs are kept in it); a plugin store is not supported yet"
      )
    }
    yield* checkMigrated(database)
    const maxAdmitted = Option.getOrElse(args.maxAdmitted, () => loaded.run.maxAdmitted ?? InternalSubmit.DEFAULT_MAX_ADMITTED)
    const limit = Option.getOrUndefined(args.limit)
    const byDigest = new Map(suite.experiments.map((m) => [memberDigest(suite.id, m.id), m.id]))
    // (`interrupted`: pipelines the runners refused, left `interrupted`; a suite run never cancels)
    const outcome = new Map(selected.map((m) => [m.id, { succeeded: 0, failed: 0, skipped: 0, interrupted: 0 }]))
    /** Whether member `id`'s own budget is spent (its failures in this submission, from `onSettled`). */
    const memberReached = (id: string) => {
      const budget = budgetOf.get(id)
      return budget !== undefined && (outcome.get(id)?.failed ?? 0) >= budget
    }
    /** Specs of each member read from its source but not admitted (any stop, or its own budget spent). */
    const withheldOf = new Map<string, number>()
    /** Pipelines of each member this submission admitted (rows written, workflows started). */
    const admittedOf = new Map<string, number>()
    /**
     * The summary on stdout (`--summary json`: one object): the run's counts, the suite's line and
     * one line per member (`report`: the submission's, or what it saw when runners refused).
     */
    const summarize = (report: Shown, members: ReadonlyArray<PgSuites.ClusterMembership>) =>
      Effect.gen(function*() {
      const facts = new Map(members.map((m) => [m.experimentId, m]))
      // what each member read and this submission neither admitted, skipped nor withheld by a
      // stop rule: the specs in hand when Ctrl-C interrupted it, withheld too (tester17af F4), so
      // that submitted = admitted + already done + withheld for every member, and the members'
      // figures add up to the run's
      for (const [id, c] of outcome) {
        const inHand = (facts.get(id)?.admitted ?? 0) - (admittedOf.get(id) ?? 0) - c.skipped - (withheldOf.get(id) ?? 0)
        if (inHand > 0) withheldOf.set(id, (withheldOf.get(id) ?? 0) + inHand)
      }
      const withheldAll = [...withheldOf.values()].reduce((a, b) => a + b, 0)
      if (args.summary === "json") {
        // the embedded suite's member fields that exist on the cluster, and its left-out members
        const run = clusterJson(report, target.url)
        const json = {
          ...run,
          // the members' withheld specs, those in hand at Ctrl-C included
          cluster: { ...(run["cluster"] as Record<string, unknown>), withheld: withheldAll },
          suiteId: loaded.id,
          members: [
            ...suite.experiments.map((m) => {
              const f = facts.get(m.id)
              const c = outcome.get(m.id)
              const selected = f !== undefined && f.selected && c !== undefined
              return {
                experimentId: m.id,
                label: m.label,
                selected,
                // read from its source (its line's `submitted`): admitted + skipped + withheld
                submitted: f?.admitted ?? 0,
                // admitted by this submission: the members' sum is `cluster.admitted`
                admitted: admittedOf.get(m.id) ?? 0,
                sourceExhausted: f?.sourceExhausted ?? false,
                sourceError: f?.sourceError ?? null,
                limitReached: f?.limitReached ?? false,
                failuresReached: selected && memberReached(m.id),
                byState: selected ? { succeeded: c.succeeded, failed: c.failed, interrupted: c.interrupted } : null,
                skipped: c?.skipped ?? 0,
                withheld: withheldOf.get(m.id) ?? 0
              }
            }),
            ...(loaded.leftOut ?? []).map((m) => ({ experimentId: m.id, label: m.label, selected: false, leftOut: m.problems.join("; ") }))
          ]
        }
        yield* Console.log(JSON.stringify(json))
      } else {
        yield* Console.log(
          `cluster run ${report.runId}: ${report.succeeded} succeeded, ${report.failed} failed, ${
            interruptedText(report)
          }${report.skipped} already done (${report.durationMs} ms)`
        )
        // (interrupted: refused by the runners, the only way a suite's pipeline ends so here)
        const line = (c: { readonly succeeded: number; readonly failed: number; readonly skipped: number; readonly interrupted: number }) =>
          `succeeded ${c.succeeded} · failed ${c.failed}${
            c.interrupted > 0 ? ` · interrupted ${c.interrupted} (refused by the runners)` : ""
          } · already done ${c.skipped}`
        const total = { submitted: 0, succeeded: 0, failed: 0, skipped: 0, interrupted: 0 }
        for (const [id, c] of outcome) {
          total.submitted += facts.get(id)?.admitted ?? 0
          total.succeeded += c.succeeded
          total.failed += c.failed
          total.skipped += c.skipped
          total.interrupted += c.interrupted
        }
        const heldAll = withheldAll
        yield* Console.log(`suite ${oneLine(loaded.id)}: submitted ${total.submitted} · ${line(total)}${heldAll > 0 ? ` · withheld ${heldAll}` : ""}`)
        for (const m of suite.experiments) {
          const name = oneLine(m.label === null ? m.id : `${m.id} (${m.label})`)
          const f = facts.get(m.id)
          const c = outcome.get(m.id)
          if (f === undefined || !f.selected || c === undefined) {
            yield* Console.log(`  ${name}: not selected`)
            continue
          }
          const withheld = withheldOf.get(m.id) ?? 0
          const source = f.sourceError !== null
            ? `source failed: ${oneLine(f.sourceError)}`
            : memberReached(m.id)
            ? `stopped by its own stopAfterFailures (${budgetOf.get(m.id)}; pipelines admitted before still ran; submitting again continues it)`
            : f.sourceExhausted
            ? "source exhausted"
            : f.limitReached
            ? "limit reached (source not exhausted)"
            : "source not exhausted"
          // submitted = succeeded + failed + already done + withheld (+ still running on a stop)
          const held = withheld > 0 ? ` · withheld ${withheld} (read, not admitted: submitting again admits them)` : ""
          yield* Console.log(`  ${name}: submitted ${f.admitted} · ${line(c)}${held} · ${source}`)
        }
        for (const m of loaded.leftOut ?? []) {
          yield* Console.log(`  ${oneLine(m.label === null ? m.id : `${m.id} (${m.label})`)}: not selected, left out: ${oneLine(m.problems.join("; "))}`)
        }
      }
      })
    const body = Effect.gen(function*() {
      const catalog = PgSuites.make(yield* SqlClient.SqlClient, {
        suiteId: loaded.id,
        root: loaded.output.root,
        layout: loaded.output.layout,
        outputDirOf: (id) => loaded.members.find((m) => m.id === id)?.outputDir ?? loaded.output.root
      })
      /** Each member's outcome recorded under the run, then the run's memberships (with their facts). */
      const closeMembers = (runId: RunId) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          for (const [id, c] of outcome) {
            yield* catalog.recordOutcome(runId, id, { succeeded: c.succeeded, failed: c.failed, skipped: c.skipped }, now)
          }
          return yield* catalog.runMembership(runId)
        })
      // a changed member definition is refused before anything is admitted (exit 2)
      yield* catalog.registerMembers(
        selected.map((m) => ({
          experimentId: m.id,
          definitionDigest: m.definitionDigest,
          definitionParts: m.definitionParts,
          previousDigests: m.previousDigests,
          label: m.label,
          limit: m.limit
        })),
        yield* Clock.currentTimeMillis
      )
      // input rows edited or removed since their pipelines ran: the embedded suite refuses them
      // (or keeps the old pipelines as superseded history with --accept-changed-rows); a
      // Postgres store keeps no superseded history yet, so they are refused here (exit 2)
      yield* refuseChangedRows(loaded, selected.map((m) => m.id))
      const runId = yield* InternalSubmit.makeRunId(yield* Clock.currentTimeMillis)
      const specs = Suite.pipelines(suite, {
        runId,
        experiments: selected.map((m) => m.id),
        ...(limit === undefined ? {} : { limit }),
        ...(budgetOf.size === 0 ? {} : { failuresReached: memberReached })
      }).pipe(Stream.provideService(SuiteCatalog, catalog))
      return yield* withStopSignals((onInterrupted) => ClusterEngine.submit(specs, {
        runId,
        onInterrupted,
        maxAdmitted,
        label: Option.getOrElse(args.label, () => loaded.run.label),
        notes: loaded.run.notes,
        meta: { ...loaded.run.meta, suite: { id: loaded.id, members: selected.map((m) => m.id) } },
        stopAfterFailures,
        stopAfter,
        // specs of a member already read when its budget was spent are withheld
        ...(budgetOf.size === 0 ? {} : {
          mayAdmit: (spec: AnySpec) => {
            const id = spec.member?.experimentId
            return id === undefined || !memberReached(id)
          }
        }),
        // every spec read but not admitted, by member (tester17ad F5: the members' figures add up)
        onWithheld: (spec: AnySpec) => {
          const id = spec.member?.experimentId
          if (id !== undefined) withheldOf.set(id, (withheldOf.get(id) ?? 0) + 1)
        },
        onAdmitted: (spec: AnySpec) => {
          const id = spec.member?.experimentId
          if (id !== undefined) admittedOf.set(id, (admittedOf.get(id) ?? 0) + 1)
        },
        pollInterval: Duration.seconds(1),
        onSettled: (pipelineId, o) => {
          const id = byDigest.get(memberDigestOf(pipelineId) ?? "")
          const c = id === undefined ? undefined : outcome.get(id)
          // (`interrupted`: refused by the runners; a suite run never asks for a cancel)
          if (c !== undefined) c[o]++
        },
        // runners refused pipelines: the members' outcomes recorded and the summary printed (as
        // the run's row closes it), then the refusal (exit 2), as for an experiment
        onRefused: (r) =>
          closeMembers(r.runId).pipe(
            Effect.catchAll((e) =>
              Effect.as(Console.error(`warning: the members' outcomes were not recorded: ${e.message}`), [] as ReadonlyArray<PgSuites.ClusterMembership>)
            ),
            Effect.flatMap((members) => summarize({ ...r, stopReason: "submit_failed" }, members))
          ),
        ...followProgress(args, database)
      }), {
        onClaimed: () => void (claimed = true),
        onNotAdmitted: Console.error(notAdmittedMessage(runId)),
        // the members' outcomes, recorded and read under the signals' claim: a second signal
        // cuts it short, and the run's own line is printed (break39 F3)
        gather: (report) => closeMembers(report.runId),
        // printed before the client layer's teardown (break39 F3)
        show: ({ gathered, report, stopped }) =>
          Effect.gen(function*() {
            if (Option.isSome(gathered)) yield* summarize(report, gathered.value)
            else {
              yield* args.summary === "json"
                ? Console.log(JSON.stringify({ ...clusterJson(report, target.url), suiteId: loaded.id }))
                : Console.log(summaryLine(report))
              yield* Console.error(
                "the members' outcomes were not recorded: a second stop signal cut it short (submitting again records them for the new run)"
              )
            }
            for (const cause of report.causes) yield* Console.error(`  ${cause}`)
            // a stop signal: what was seen is printed above, then the stop is said (exit 130)
            if (stopped) yield* Console.error(STOPPED_MESSAGE)
          })
      })
    })
    const { gathered, late, report, stopped } = yield* body.pipe(
      Effect.provide(Layer.mergeAll(
        ClusterEngine.clientLayer().pipe(Layer.provide(pgLayer(database))),
        store,
        pgLayer(target.url)
      ))
    )
    if (stopped || late) return yield* Effect.fail(new ExitWith(ExitCode.Interrupted))
    const members = Option.getOrElse(gathered, () => [] as ReadonlyArray<PgSuites.ClusterMembership>)
    yield* stopSaid(report, stopAfterFailures, stopAfter)
    for (const m of members) {
      if (m.sourceError !== null) yield* Console.error(`error: member ${m.experimentId}: its source failed: ${m.sourceError}`)
    }
    if (report.failed > 0 || members.some((m) => m.sourceError !== null)) return yield* Effect.fail(new ExitWith(ExitCode.Failures))
  }).pipe(Effect.onInterrupt(() => claimed ? Effect.void : Console.error(NOTHING_SUBMITTED_MESSAGE)))
  })
