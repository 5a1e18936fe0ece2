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
import { Cause, Clock, Console, Context, Deferred, Duration, Effect, Layer, Option, Redacted } from "effect"
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
import * as StoreResolver from "../layers/internal/storeResolver.js"
import * as NodeProcessRunner from "../layers/NodeProcessRunner.js"
import * as PgPools from "../layers/PgPools.js"
import { checkDatabase, DEFAULT_LEASE_TTL, defaultRenewEvery, type LeaseTiming, redactUrl } from "./ClusterCommand.js"
import { ExitCode, ExitWith } from "./Exit.js"

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/** The shared store's layer: `--store`, else `run.store` when it is a URI, else the database URL. */
const sharedStoreLayer = (experiment: Experiment.Experiment, store: Option.Option<string>, database: string) =>
  Effect.gen(function*() {
    const written: unknown = experiment.definition.run?.store
    const [spec, field] = Option.isSome(store)
      ? [store.value, "--store"]
      : typeof written === "string" && written.includes("://")
      ? [written, "run.store"]
      : [database, "--database"]
    const target = yield* StoreResolver.resolve(spec, experiment.plugins, field)
    if (target._tag === "Memory" || target._tag === "Sqlite") {
      return yield* configError(
        field,
        `the cluster engine needs a store every process writes (postgres://..., or a plugin store), not ${
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
          message: redactUrl(e.message),
          issues: e.issues.map((i) => ({ ...i, message: redactUrl(i.message) }))
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
const runnerCache = (experiment: Experiment.Experiment, target: StoreResolver.StoreTarget) =>
  Effect.gen(function*() {
    const issues: Array<ConfigIssue> = []
    const resolved = CallCache.resolveRunCache(experiment.run.cache, "run.cache", issues)
    if (issues.length > 0) return yield* configError(issues[0]!.path, issues[0]!.message)
    const db = resolved.db === undefined ? undefined : path.resolve(experiment.baseDir, resolved.db)
    const run: CallCache.RunCache = db === undefined ? resolved : { ...resolved, db }
    if (db !== undefined) yield* Flags.checkCacheDb(db, "run.cache.db", run.mode)
    const taskOn = experiment.template.tasks.some((t) => t.options.cache?.mode !== undefined && t.options.cache.mode !== "off")
    const layer: Layer.Layer<CallCache.CallCache, ConfigError | StoreUnavailable> = db !== undefined
      ? Flags.sharedCacheLayer(db, "run.cache.db", run.mode)
      : run.mode === "off" && !taskOn
      ? CallCache.layerMemory
      : target._tag === "Postgres"
      ? PgCallCache.layer({ url: target.url })
      : CallCache.layerMemory
    return { run, layer }
  })

const pgLayer = (database: string) => PgClient.layer({ url: Redacted.make(database) })

/** The cluster's own tables (`@effect/cluster`'s SQL message and runner storage). */
const LIBRARY_TABLES = ["cluster_messages", "cluster_replies", "cluster_runners", "cluster_locks"] as const

/** Every table of the cluster part: the library's, and the engine's in-flight markers. */
const CLUSTER_TABLES = [...LIBRARY_TABLES, InFlight.TABLE] as const

/**
 * What the cluster migration creates: {@link CLUSTER_TABLES} and the window claims' table
 * (needed only by runners started with window claims, which check it themselves).
 */
const MIGRATED_TABLES = [...CLUSTER_TABLES, WindowClaims.TABLE] as const

/** The advisory lock the cluster migration holds: "asy" and 3 (the store's holds 1, the pools' 2). */
const CLUSTER_MIGRATION_LOCK = [0x617379, 3] as const

const unavailable = (database: string, what: string) => (e: unknown) =>
  new StoreUnavailable({
    message: redactUrl(`cluster tables of ${database}: ${what}: ${e instanceof Error ? e.message : Cause.isCause(e) ? Cause.pretty(e) : String(e)}`),
    path: redactUrl(database)
  })

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
 * `assay_cluster_inflight`, the engine's in-flight markers, and `assay_cluster_window_claims`,
 * its window claims)
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
    yield* WindowClaims.createTable
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
    const message = `the database ${redactUrl(database)} has no cluster tables (${missing.join(", ")}): ` +
      `run \`assay migrate --database ${redactUrl(database)}\` once before starting runners or submitting`
    return yield* new ConfigError({ message, issues: [{ path: "--database", message: "not migrated for the cluster" }] })
  }).pipe(
    Effect.scoped,
    Effect.provide(PgClient.layer({ url: Redacted.make(database), maxConnections: 1 })),
    Effect.catchAll((e): Effect.Effect<never, ConfigError | StoreUnavailable> =>
      e._tag === "ConfigError" ? Effect.fail(e) : Effect.fail(unavailable(database, "cannot read")(e))
    )
  )

/**
 * What `assay runner` runs: `config` (the experiment file), `database` (checked URL),
 * `address` (where other runners reach it; default the library's), `store` (the `--store`
 * flag), `concurrency` (attempts at once in this process) and `lease` (the global pool slots'
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
  readonly concurrency: number
  readonly lease?: LeaseTiming | undefined
  /**
   * Window claims (`--window-claims`; default off): each window claimed whole, with local
   * deadlines, in place of a claim, a fence and an input read per task (docs/scale-out.md).
   */
  readonly windowClaims?: boolean | undefined
  /**
   * Block leases (`--block-leases [--expected-runners N]`; default off; needs window claims):
   * each global pool resource's slots held as a block sized to the runner's
   * demand-proportional share of the capacity and handed to the window's tasks in memory; `N`
   * only sets the first block's size, `⌊capacity ÷ N⌋` (docs/scale-out.md "Block leases").
   */
  readonly blockLeases?: { readonly expectedRunners?: number | undefined } | undefined
}

/**
 * Runs a runner process until it is told to stop: loads the experiment (exit 2 when invalid),
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
    const experiment = yield* Experiment.load(o.config)
    const watchdogs = yield* Watchdog.settingsFromEnv
    const { layer: store, target } = yield* sharedStoreLayer(experiment, o.store, o.database)
    // the experiment's `run.cache` and `pricing` apply to the runner's tasks (the submitter's
    // cache flags are refused: the runners read the experiment file)
    const cache = yield* runnerCache(experiment, target)
    // an unmigrated database is refused before anything is created in it
    yield* checkMigrated(o.database)
    const address = o.address
    const lease = o.lease ?? { leaseTtl: DEFAULT_LEASE_TTL, renewEvery: defaultRenewEvery(DEFAULT_LEASE_TTL) }
    yield* Console.error(
      `runner: cluster database ${redactUrl(o.database)}${
        address === undefined ? "" : `, listening on ${address.host}:${address.port}`
      }; pool slots held ${Duration.format(lease.leaseTtl)} without renewal, renewed every ${Duration.format(lease.renewEvery)}${
        o.windowClaims === true ? "; window claims on" : ""
      }${
        o.blockLeases === undefined
          ? ""
          : `; block leases on (shares by demand${
            o.blockLeases.expectedRunners === undefined ? "" : `, first blocks for ${o.blockLeases.expectedRunners} runners`
          })`
      }`
    )
    // closed at the first stop signal, before anything closes: no call starts from then on
    const callGate = ClusterEngine.makeCallGate()
    const host = ClusterEngine.workflowLayer({
      callGate,
      concurrency: o.concurrency,
      pricing: experiment.run.pricing,
      cache: cache.run,
      windowClaims: o.windowClaims === true,
      blockLeases: o.blockLeases
    }).pipe(
      Layer.provideMerge(ClusterEngine.runnerLayer({
        shardingConfig: address === undefined ? {} : { runnerAddress: Option.some(RunnerAddress.make(address.host, address.port)) }
      })),
      Layer.provide(pgLayer(o.database)),
      Layer.provide(ClusterEngine.catalogStreamLayer(experiment.pipelines(), (e) => e.message)),
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
      const context = yield* Layer.build(host)
      const sharding = Context.get(context, Sharding.Sharding)
      const ping = Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe("SELECT 1"))
      // a stop signal (SIGTERM from a supervisor's rolling restart, Ctrl-C) closes the call gate
      // first, then stops the runner as an interruption (exit 130): its scopes close after no
      // task can start a call any more (a call started while the process winds down could not
      // commit, and the task's next owner would call again: chaos C8)
      const stopped = yield* Deferred.make<Signals.StopSignal>()
      yield* (yield* Signals.Signals).handle((signal) =>
        Effect.zipRight(Effect.sync(callGate.close), Deferred.succeed(stopped, signal))
      )
      yield* Effect.raceFirst(
        Deferred.await(stopped),
        Effect.raceFirst(
          Watchdog.databaseLost(ping, watchdogs, redactUrl(o.database)).pipe(
            Effect.provide(PgClient.layer({ url: Redacted.make(o.database), maxConnections: 1 }))
          ),
          Watchdog.shardsStalled(unreadOnOwnedShards(sharding, defaultShardsPerGroup), watchdogs).pipe(
            Effect.provide(PgClient.layer({ url: Redacted.make(o.database), maxConnections: 1 }))
          )
        )
      )
      return yield* Effect.interrupt
    }))
  })

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

// ---------------------------------------------------------------------------------------------
// assay run --engine cluster
// ---------------------------------------------------------------------------------------------

/**
 * What `run --engine cluster` passes on: the experiment file, the database, the store flag,
 * `--max-admitted` (else `run.maxAdmitted`, else 256), `--limit`, `--label`, `--quiet`.
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
}

/**
 * `assay run -c FILE --engine cluster --database URL`: loads the experiment (exit 2 when
 * invalid, or when it declares control and the store keeps no traversal state), registers the
 * run in the shared store, admits pipelines in windows through client-only sharding, prints progress on stderr and the
 * counts on stdout. Exit 0 when every pipeline succeeded (or was already done), 1 when some
 * failed, 130 when interrupted (admission stops; admitted pipelines go on on the runners, and
 * running the same command again follows them and admits the rest).
 *
 * @since 0.7.0
 * @category commands
 */
export const submitRun = (args: SubmitArgs): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const database = yield* checkDatabase(args.database)
    const experiment = yield* Experiment.load(args.config, { strictEnv: args.strictEnv })
    const { layer: store } = yield* sharedStoreLayer(experiment, args.store, database)
    yield* checkMigrated(database)
    const maxAdmitted = Option.getOrElse(args.maxAdmitted, () => experiment.run.maxAdmitted ?? 256)
    const report = yield* ClusterEngine.submit(experiment.pipelines(Option.getOrUndefined(args.limit)), {
      maxAdmitted,
      label: Option.getOrUndefined(args.label),
      pollInterval: Duration.seconds(1),
      onProgress: (p) =>
        args.quiet ? Effect.void : Console.error(
          `cluster run ${p.runId}: ${p.admitted} admitted, ${p.running} running, ${p.succeeded} succeeded, ${p.failed} failed, ${p.skipped} already done`
        ),
      // said even with --quiet: nothing moves until a runner is up
      onWarning: (w) =>
        Console.error(
          `${w.message}. Start one (or several) with: assay runner -c ${args.config} --database ${redactUrl(database)}`
        )
    }).pipe(
      Effect.onInterrupt(() =>
        Console.error(
          "stopped: no more pipelines are admitted; the admitted ones go on on the runners. Run the same command again to follow them and admit the rest."
        )
      ),
      Effect.provide(Layer.merge(ClusterEngine.clientLayer().pipe(Layer.provide(pgLayer(database))), store))
    )
    yield* Console.log(
      `cluster run ${report.runId}: ${report.succeeded} succeeded, ${report.failed} failed, ${report.skipped} already done (${report.durationMs} ms)`
    )
    for (const cause of report.causes) yield* Console.error(`  ${cause}`)
    if (report.failed > 0) return yield* Effect.fail(new ExitWith(ExitCode.Failures))
  })
