/**
 * `assay run -c FILE` and `assay resume -c FILE`: load and check an experiment (exit 2 before
 * any store is opened when it is invalid), apply the command-line overrides, run it on the
 * store `run.store` / `--store` names (an SQLite file, `:memory:`, or a plugin URI resolved by
 * `StoreResolver`: an unknown scheme exits 2 before anything runs), print the report, and
 * exit 0 (all succeeded or skipped), 1 (some pipelines failed, or a plugin store could not be
 * opened), 2 (invalid configuration or identity conflict) or 130 (stopped by a signal;
 * resumable). A plugin store cannot be sharded (`--shard`/`--shards` refuse it, exit 2).
 *
 * Sharding: `--shard I/N` runs only shard I's pipelines into `store.shardIofN.db`;
 * `--shards N --jobs J` starts N child processes (`assay run --shard i/N`, at most J at once),
 * each on its own shard store (children always run as `resume`), and prints the merged report
 * (`mergeReports` over the shard stores: deduplicated by pipeline id, recounted). A child that
 * dies (no report, non-zero exit) is listed as `dead` and makes the exit code 1; re-running
 * the same command resumes its shard once the dead process's heartbeat is stale. SIGINT / SIGTERM
 * on the parent is forwarded to the running children (graceful stop), no new child starts, and
 * the merged partial report is printed before exiting 130.
 *
 * Suites: a suite file (`-c SUITE`, detected by its top-level `suite`) runs its members side by
 * side under one runner (see `SuiteRun.ts`): `--experiment ID` (repeatable) selects members,
 * `--output-root DIR` (relative to the working directory) replaces `output.root`; `--store`,
 * `--shard`, `--shards` and `--jobs` are refused (exit 2). `--experiment` and `--output-root`
 * are refused for an ordinary experiment file.
 *
 * @since 0.1.0
 */
import * as Words from "../domain/internal/words.js"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as PlatformCommand from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeCommandExecutor from "@effect/platform-node/NodeCommandExecutor"
import { constants as osConstants } from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Console, Duration, Effect, Either, Layer, Option, type Scope, Stream } from "effect"
import { CodecRegistry } from "../domain/Codec.js"
import * as CallCacheDomain from "../domain/CallCache.js"
import { ConfigError, type StoreUnavailable } from "../domain/Errors.js"
import { RunId } from "../domain/Ids.js"
import type { Journal, RunConfigInput } from "../domain/RunConfig.js"
import type { SeedError } from "../domain/Pipeline.js"
import { parseShard, shardSpecs, shardStorePath } from "../domain/Shard.js"
import * as ArtifactBackends from "../layers/ArtifactBackends.js"
import * as Experiment from "../config/internal/experiment.js"
import * as StudyConfig from "../config/Study.js"
import * as SuiteConfig from "../config/Suite.js"
import * as NodeProcessRunner from "../layers/NodeProcessRunner.js"
import * as Otel from "../layers/Otel.js"
import * as SqliteCallCache from "../layers/SqliteCallCache.js"
import { ttlMessage } from "../domain/CallCache.js"
import * as CallCache from "../services/CallCache.js"
import * as PluginUri from "../layers/PluginUri.js"
import * as StoreResolver from "../layers/internal/storeResolver.js"
import { mergeReports } from "../services/Merge.js"
import * as Pool from "../services/Pool.js"
import * as Progress from "../services/Progress.js"
import * as Report from "../services/internal/report.js"
import { ProcessRunner, shellQuote } from "../services/internal/processRunner.js"
import * as Runner from "../services/Runner.js"
import { SKIPPED_METRIC } from "../services/internal/runner/run.js"
import * as Signals from "../services/Signals.js"
import { Store } from "../services/Store.js"
import type { SourceError } from "../tasks/Sources.js"
import * as ClusterCommand from "./ClusterCommand.js"
import * as DefinitionMatch from "./DefinitionMatch.js"
import { ExitCode, ExitWith, resumeCommandOf } from "./Exit.js"
import { loadPgCallCache } from "../layers/internal/pg/load.js"
import { PASSWORD_HINT, pasteable, redactUrlsIn } from "../layers/internal/pg/url.js"
import * as Flags from "./Flags.js"
import * as StoreArgs from "./StoreArgs.js"
import * as SuiteRun from "./SuiteRun.js"
import { integerAtLeast } from "./Flags.js"
import { transitionsText } from "../domain/internal/transitions.js"

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

const configFile = Options.file("config", { exists: "either" }).pipe(
  Options.withAlias("c"),
  Options.withDescription(
    "The experiment file or suite file (.json, .toml, .yaml/.yml or .ts); a suite file has a top-level suite key."
  )
)
const optInt = (name: string, description: string) =>
  integerAtLeast(name, 1).pipe(Options.optional, Options.withDescription(description))
const optText = (name: string, description: string, placeholder = "text") =>
  Options.text(name).pipe(Options.withPseudoName(placeholder), Options.optional, Options.withDescription(description))
const flag = (name: string, description: string) => Options.boolean(name).pipe(Options.withDescription(description))

const runOptions = {
  config: configFile,
  store: optText(
    "store",
    "Store of the run (overrides run.store): an SQLite file, \":memory:\" for no file, or a plugin URI (scheme://...).",
    "store"
  ),
  concurrency: optInt("concurrency", "Attempts running at once (overrides run.concurrency)."),
  maxAdmitted: optInt("max-admitted", "Pipelines admitted at once (queued + running + waiting to retry)."),
  limit: integerAtLeast("limit", 0).pipe(
    Options.optional,
    Options.withDescription("Run at most this many rows of the source.")
  ),
  journal: Options.choice("journal", ["full", "summary"]).pipe(
    Options.optional,
    Options.withDescription("full: keep payloads (task-level resume); summary: metadata only.")
  ),
  label: optText("label", "Label recorded on the run.", "label"),
  runId: optText("run-id", "Explicit run id.", "id"),
  resume: flag("resume", "Claim pipelines abandoned by dead runs (stale heartbeat)."),
  retrySucceeded: flag("retry-succeeded", "Re-run pipelines that already succeeded."),
  freshRestart: flag("fresh-restart", "Discard checkpoints and start pipelines from their seed."),
  strictLeases: flag("strict-leases", "A leaked lease fails its task (LeaseLeakError)."),
  stopAfterFailures: optInt(
    "stop-after-failures",
    "Stop admitting after this many failed pipelines (in a suite: counted across all members, and every member stops; a member's own experiments.ID.stopAfterFailures stops only it)."
  ),
  stopAfter: optText("stop-after", "Stop admitting after this much wall time (\"10 minutes\").", "duration"),
  staleAfter: optText("stale-after", "A run whose heartbeat is older than this is dead (\"30 seconds\").", "duration"),
  grace: optText("grace", "How long in-flight attempts may finish after a stop (\"5 seconds\").", "duration"),
  artifactBackend: optText("artifact-backend", "Where payloads go: inline, null or file:///path.", "backend"),
  noSignals: flag("no-signals", "Do not install the runner's SIGINT/SIGTERM/SIGHUP handlers (Ctrl-C interrupts at once)."),
  strictEnv: flag("strict-env", "An unset ${VAR} in the experiment is an error."),
  otel: flag(
    "otel",
    "Export spans to an OpenTelemetry collector (OTLP/HTTP at OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318); also on with OTEL_TRACES_EXPORTER=otlp."
  ),
  summary: Options.choice("summary", ["text", "json"]).pipe(
    Options.withDescription("How the report is printed on stdout."),
    Flags.withDefault("text" as const)
  ),
  quiet: flag("quiet", "No progress display (stdout still gets the report)."),
  // the same flags, with the same meaning, as `study run` / `study resume`
  ...Flags.cacheOptions,
  progressInterval: optText(
    "progress-interval",
    "How often the progress line is redrawn on a terminal (default 200 millis); when piped, the longest gap between lines (default 10 seconds; the first comes after 1 s).",
    "duration"
  ),
  engine: Options.choice("engine", ["local", "cluster"]).pipe(
    Options.optional,
    Options.withDescription(
      "local (default): this process runs the experiment; cluster: submit it to `assay runner` processes (needs --database)."
    )
  ),
  database: optText("database", "With --engine cluster: the cluster's PostgreSQL database (postgres://user@host:port/db).", "URL"),
  shard: optText("shard", "Run only shard I of N (\"0/4\"), into its own store (qa.shard0of4.db).", "I/N"),
  shards: optInt("shards", "Run N shard processes, each on its own store, and merge their counts."),
  jobs: optInt("jobs", "With --shards: how many shard processes run at once (default: all)."),
  experiment: Flags.experiments("Suite only: run just this member; the others' state is left untouched."),
  outputRoot: Flags.outputRoot("Suite only: the output root, relative to the working directory (overrides output.root)."),
  acceptChangedRows: flag(
    "accept-changed-rows",
    "Suite only: run even though a member's source no longer yields some stored pipelines (edited or removed rows); they stay as superseded history, out of the cumulative totals. The root remembers it: later runs need no flag."
  )
}

type RunArgs = {
  readonly [K in keyof typeof runOptions]: (typeof runOptions)[K] extends Options.Options<infer A> ? A : never
}

const configError = (p: string, message: string, suggestion?: string) =>
  new ConfigError({
    message: `${p}: ${message}`,
    issues: [suggestion === undefined ? { path: p, message } : { path: p, message, suggestion }]
  })

const durationFlag = (name: string, value: Option.Option<string>) => Flags.durationFlag(name, value)

/** `--cache-ttl` must be longer than 0 (one line naming the flag, not the run schema's dump). */
const positiveTtl = (
  ttl: Duration.Duration | undefined,
  text: Option.Option<string>
): Either.Either<Duration.Duration | undefined, ConfigError> =>
  ttl === undefined || Duration.greaterThan(ttl, Duration.zero)
    ? Either.right(ttl)
    : Either.left(configError(
      "--cache-ttl",
      ttlMessage(Option.getOrElse(text, () => "")),
      "write a positive duration, e.g. \"7 days\""
    ))

const overridesOf = (args: RunArgs, resume: boolean): Either.Either<RunConfigInput, ConfigError> =>
  Either.gen(function*() {
    const stopAfter = yield* durationFlag("stop-after", args.stopAfter)
    const staleAfter = yield* durationFlag("stale-after", args.staleAfter)
    const grace = yield* durationFlag("grace", args.grace)
    const o: Record<string, unknown> = {
      store: Option.getOrUndefined(args.store),
      concurrency: Option.getOrUndefined(args.concurrency),
      maxAdmitted: Option.getOrUndefined(args.maxAdmitted),
      journal: Option.getOrUndefined(args.journal) as Journal | undefined,
      label: Option.getOrUndefined(args.label),
      runId: Option.getOrUndefined(args.runId),
      resume: resume || args.resume ? true : undefined,
      retrySucceeded: args.retrySucceeded ? true : undefined,
      freshRestart: args.freshRestart ? true : undefined,
      strictLeases: args.strictLeases ? true : undefined,
      stopAfterFailures: Option.getOrUndefined(args.stopAfterFailures),
      stopAfter,
      staleAfter,
      grace,
      artifactBackend: Option.getOrUndefined(args.artifactBackend),
      handleSignals: args.noSignals ? false : undefined
    }
    if (typeof o["store"] === "string") o["store"] = absoluteStore(o["store"])
    return o as RunConfigInput
  })

// ---------------------------------------------------------------------------------------------
// One process
// ---------------------------------------------------------------------------------------------

/** A store flag as the run records it: a path made absolute; `:memory:` and URIs as written. */
const absoluteStore = (spec: string): string => spec === ":memory:" || PluginUri.isUri(spec) ? spec : path.resolve(spec)

/**
 * The store spec of a run and the field it came from (for error paths): `--store` when given;
 * else `run.store` as written when it is a plugin URI (the loader resolves `run.store` against
 * the file's directory as if it were a path); else the resolved `run.store`.
 */
const storeSpecOf = (
  experiment: Experiment.Experiment,
  overrides: RunConfigInput,
  resolved: string
): { readonly spec: string; readonly field: string } => {
  if (overrides.store !== undefined) return { spec: overrides.store, field: "--store" }
  const written: unknown = experiment.definition.run?.store
  if (typeof written === "string" && PluginUri.isUri(written)) return { spec: written, field: "run.store" }
  return { spec: resolved, field: "run.store" }
}

const storeLayer = (
  target: StoreResolver.StoreTarget,
  experiment: Experiment.Experiment,
  journal: Journal,
  backend: RunConfigInput["artifactBackend"]
) =>
  StoreResolver.layerOf(target, {
    journal,
    readOnly: false,
    baseDir: experiment.baseDir,
    artifactBackend: backend,
    registry: experiment.plugins
  })

type CacheSetting = NonNullable<RunConfigInput["cache"]>

/**
 * The run's call cache setting: the experiment's `run.cache` (its `db` resolved against the
 * experiment's directory), or `under` when given (`resume`: the setting stored with the run it
 * resumes), with the flags laid over it field by field (`--cache` is mode `readWrite` unless
 * `--cache-mode` names another; `--cache-db`, `--cache-ttl`: each replaces only its own field);
 * `undefined` when neither says anything.
 */
const cacheSettingOf = (
  args: RunArgs,
  experiment: Experiment.Experiment,
  under?: CacheSetting | undefined
): Either.Either<CacheSetting | undefined, ConfigError> =>
  Either.gen(function*() {
    const written = under ?? experiment.run.cache
    const base: { mode?: CallCache.CacheMode | undefined; ttl?: Duration.DurationInput | null | undefined; db?: string | undefined } =
      written === undefined
        ? {}
        : typeof written === "boolean"
        ? { mode: written ? "readWrite" : "off" }
        : typeof written === "string"
        ? { mode: written }
        : {
          ...(written.mode !== undefined ? { mode: written.mode } : {}),
          ...(written.ttl !== undefined ? { ttl: written.ttl } : {}),
          ...(written.db !== undefined ? { db: path.resolve(experiment.baseDir, written.db) } : {})
        }
    const ttl = yield* positiveTtl(yield* durationFlag("cache-ttl", args.cacheTtl), args.cacheTtl)
    const flagged = args.cache || Option.isSome(args.cacheMode) || Option.isSome(args.cacheDb) || ttl !== undefined
    if (!flagged) return written === undefined ? undefined : { ...base }
    return {
      mode: Option.getOrElse(args.cacheMode, () => args.cache ? "readWrite" as const : base.mode ?? "readWrite"),
      ...(ttl !== undefined ? { ttl } : base.ttl !== undefined ? { ttl: base.ttl } : {}),
      ...(Option.isSome(args.cacheDb) ? { db: path.resolve(args.cacheDb.value) } : base.db !== undefined ? { db: base.db } : {})
    }
  })

/** Whether any call cache flag was given. */
const cacheFlagged = (args: RunArgs): boolean =>
  args.cache || Option.isSome(args.cacheMode) || Option.isSome(args.cacheDb) || Option.isSome(args.cacheTtl)

/** A cache setting in one form: mode, time to live in ms (`null`: none), shared database. */
const normalCache = (c: CacheSetting | undefined): { mode: string; ttlMs: number | null; db: string | null } => {
  if (c === undefined || c === false) return { mode: "off", ttlMs: null, db: null }
  if (c === true) return { mode: "readWrite", ttlMs: null, db: null }
  if (typeof c === "string") return { mode: c, ttlMs: null, db: null }
  return {
    mode: c.mode ?? "readWrite",
    ttlMs: c.ttl === undefined || c.ttl === null ? null : Duration.toMillis(Duration.decode(c.ttl)),
    db: c.db ?? null
  }
}

/** Whether two cache settings ask for the same cache. */
const sameCache = (a: CacheSetting | undefined, b: CacheSetting | undefined): boolean => {
  const x = normalCache(a)
  const y = normalCache(b)
  return x.mode === y.mode && x.ttlMs === y.ttlMs && x.db === y.db
}

/**
 * A cache setting in words, with where its answers are kept: `mode readWrite, db
 * /x/cache.db, ttl 7d`, or `mode readWrite, in the run's store` (a store-backed run without a
 * shared database: `resume`'s notices).
 */
const cacheText = (c: CacheSetting | undefined): string => {
  const n = normalCache(c)
  const where = n.db !== null ? `, db ${n.db}` : n.mode === "off" ? "" : ", in the run's store"
  return `mode ${n.mode}${where}${n.ttlMs === null ? "" : `, ttl ${Duration.format(Duration.millis(n.ttlMs))}`}`
}

/**
 * The call cache setting recorded with the latest run of the store `spec` (its `config.cache`,
 * as `RunConfig.toJson` writes it: a boolean, a mode, or `{ mode, ttlMs, db }`), and that run's
 * id; `undefined` when the store has no run, the run recorded none, or the store cannot be read
 * (the run that follows says why).
 */
const storedCacheOf = (spec: string): Effect.Effect<{ readonly runId: string; readonly setting: CacheSetting } | undefined> =>
  Effect.flatMap(Store, (store) => store.latestRun).pipe(
    Effect.map(Option.flatMap((run): Option.Option<{ readonly runId: string; readonly setting: CacheSetting }> => {
      const config = run.config
      const c = config !== null && typeof config === "object" ? (config as { readonly cache?: unknown }).cache : undefined
      if (typeof c === "boolean") return Option.some({ runId: run.runId, setting: c })
      if (typeof c === "string" && (CallCacheDomain.cacheModes as ReadonlyArray<string>).includes(c)) {
        return Option.some({ runId: run.runId, setting: c as CallCacheDomain.CacheMode })
      }
      if (c === null || typeof c !== "object") return Option.none()
      const o = c as { readonly mode?: unknown; readonly ttlMs?: unknown; readonly db?: unknown }
      const mode = typeof o.mode === "string" && (CallCacheDomain.cacheModes as ReadonlyArray<string>).includes(o.mode)
        ? o.mode as CallCacheDomain.CacheMode
        : "readWrite"
      return Option.some({
        runId: run.runId,
        setting: {
          mode,
          ...(typeof o.ttlMs === "number" && o.ttlMs > 0 ? { ttl: Duration.millis(o.ttlMs) } : {}),
          ...(typeof o.db === "string" ? { db: o.db } : {})
        }
      })
    })),
    Effect.map(Option.getOrUndefined),
    Effect.scoped,
    Effect.provide(StoreArgs.readLayer(spec, [])),
    Effect.orElseSucceed(() => undefined)
  )

/**
 * Where the run's call cache lives: a shared cache database when one is named; else the run's
 * SQLite store file (its `call_cache` table) or Postgres store database (`assay_call_cache`)
 * when the cache is on for the run or for a task of the pipeline; else memory (a memory or
 * plugin store: nothing outlives the process).
 */
const cacheLayerOf = (
  setting: CacheSetting | undefined,
  target: StoreResolver.StoreTarget,
  experiment: Experiment.Experiment,
  dbField: string
): Layer.Layer<CallCache.CallCache, StoreUnavailable | ConfigError> => {
  const db = typeof setting === "object" ? setting.db : undefined
  if (db !== undefined) return Flags.sharedCacheLayer(db, dbField, typeof setting === "object" ? setting.mode : undefined)
  const runOn = setting !== undefined && setting !== false && setting !== "off" &&
    !(typeof setting === "object" && setting.mode === "off")
  const taskOn = experiment.template.tasks.some((t) => t.options.cache?.mode !== undefined && t.options.cache.mode !== "off")
  if (!(runOn || taskOn)) return CallCache.layerMemory
  switch (target._tag) {
    case "Sqlite":
      return SqliteCallCache.layer({ filename: target.filename })
    case "Postgres":
      // the store's database (its `assay_call_cache` table), loaded on demand as the store is
      return Layer.unwrapEffect(Effect.map(loadPgCallCache, (PgCallCache) => PgCallCache.layer({ url: target.url })))
    default:
      return CallCache.layerMemory
  }
}

const printWarnings = (experiment: Experiment.Experiment) =>
  Effect.zipRight(
    Effect.forEach(
      experiment.unresolvedEnv,
      (u) => Console.error(Words.unsetEnvWarning(u)),
      { discard: true }
    ),
    // the source's own warnings (integers beyond 2^53 in the rows read at load)
    Effect.forEach(experiment.warnings, (w) => Console.error(w), { discard: true })
  )

const runOne = (args: RunArgs, resume: boolean) =>
  Effect.gen(function*() {
    // 1. Everything that can be refused is refused before a store exists.
    yield* checkRunIdFlag(args)
    const experiment = yield* Experiment.load(args.config, { strictEnv: args.strictEnv })
    yield* printWarnings(experiment)
    // no store named anywhere: results live in memory only (and resume has nothing to resume)
    const noStore = Experiment.noStoreWarning(experiment, Option.getOrUndefined(args.store))
    if (noStore !== undefined) yield* Console.error(noStore)
    const overrides = yield* overridesOf(args, resume)
    let cacheSetting = yield* cacheSettingOf(args, experiment)
    const shard = yield* Option.match(args.shard, {
      onNone: () => Either.right(undefined),
      onSome: (text) => parseShard(text)
    })
    const settings = yield* Experiment.runSettings(experiment, overrides)
    const progressInterval = yield* durationFlag("progress-interval", args.progressInterval)
    const chosen = storeSpecOf(experiment, overrides, settings.store)
    const target0 = yield* StoreResolver.resolve(chosen.spec, experiment.plugins, chosen.field)
    if (shard !== undefined && target0._tag === "Plugin") {
      return yield* configError(
        "--shard",
        `a plugin store (${target0.scheme}://) cannot be split into shard stores; give --store a file path`
      )
    }
    const store = shard === undefined || target0._tag !== "Sqlite"
      ? chosen.spec
      : shardStorePath(target0.filename, shard.index, shard.count)
    const target: StoreResolver.StoreTarget = shard === undefined || target0._tag !== "Sqlite"
      ? target0
      : { _tag: "Sqlite", filename: store }
    // a suite root's databases are written only through the suite: the SQLite store refuses a
    // plain writer there (ConfigError, exit 2) when it opens, for the CLI and any program alike
    // `resume` continues a store: a missing one is a mistyped path, not a request to start
    // afresh (a shard child, started by `--shards` as `resume --shard i/N`, may create its own)
    if (overrides.resume === true && shard === undefined && target._tag === "Sqlite") {
      const fsys = yield* FileSystem.FileSystem
      if (!(yield* Effect.orElseSucceed(fsys.exists(target.filename), () => false))) {
        return yield* configError(
          chosen.field,
          `nothing to resume: there is no store at ${target.filename}; check the path, or start the run with \`assay run\``
        )
      }
    }
    // `resume` continues the call cache of the run it resumes (stored with that run), unless a
    // cache flag says otherwise; either way it says so once when the two differ
    let cacheDbField = Option.isSome(args.cacheDb) ? "--cache-db" : "run.cache.db"
    if (overrides.resume === true && shard === undefined && (target._tag === "Sqlite" || target._tag === "Postgres")) {
      const stored = yield* storedCacheOf(chosen.spec)
      if (stored !== undefined && cacheFlagged(args)) {
        // the flags are laid over the stored setting field by field, as `run` lays them over
        // the file's: `--cache-ttl` alone keeps the run's shared database (issue 18 trial F2)
        cacheSetting = yield* cacheSettingOf(args, experiment, stored.setting)
        if (Option.isNone(args.cacheDb)) cacheDbField = `the call cache of run ${stored.runId}`
      }
      if (stored !== undefined && !sameCache(stored.setting, cacheSetting)) {
        if (cacheFlagged(args)) {
          yield* Console.error(
            `resume: the cache flags given override the call cache of run ${stored.runId} (${cacheText(stored.setting)}); now ${
              cacheText(cacheSetting)
            }`
          )
        } else {
          cacheSetting = stored.setting
          cacheDbField = `the call cache of run ${stored.runId}`
          yield* Console.error(
            `resume: the call cache of run ${stored.runId} carries over (${
              cacheText(stored.setting)
            }); give --cache-mode off (or other cache flags) to change it`
          )
        }
      }
    }
    // a shared cache database that cannot be opened is refused before the store is created
    if (typeof cacheSetting === "object" && cacheSetting.db !== undefined) {
      yield* Flags.checkCacheDb(cacheSetting.db, cacheDbField, cacheSetting.mode)
    }
    if (settings.artifactBackend !== undefined && settings.artifactBackend !== null) {
      const bad = ArtifactBackends.check(settings.artifactBackend, experiment.plugins.artifactBackends)
      if (Option.isSome(bad)) return yield* bad.value
    }
    const limit = Option.getOrUndefined(args.limit)
    // The source size (a shard's share is not known without enumerating the ids): the
    // progress total, and `meta.total` for the ETA of `serve` / `watch`.
    const total = shard === undefined ? yield* experiment.size(limit) : undefined
    const meta = total === undefined ? experiment.run.meta : { ...experiment.run.meta, total }
    const input: RunConfigInput = {
      ...experiment.run,
      ...definedOnly(overrides),
      store,
      ...(meta !== undefined ? { meta } : {}),
      ...(cacheSetting !== undefined ? { cache: cacheSetting } : {})
    }

    // 2. Open the store and run.
    yield* StoreResolver.ensureParent(target)
    let registry = CodecRegistry.default()
    for (const codec of experiment.plugins.codecs) registry = registry.register(codec)
    const all = experiment.pipelines(limit)
    const specs = shard === undefined ? all : shardSpecs(all, shard.index, shard.count, (s) => s.pipelineId)
    // Progress on stderr (stdout keeps the report): a live line on a terminal, plain lines
    // otherwise, nothing with --quiet. Its scope ends with the run (last line written).
    // whether a run was opened in the store (a store failure after that leaves it resumable)
    let started = false
    const tracked = Effect.scoped(Effect.gen(function*() {
      // A reused run id would only fail at `openRun` (primary key): refuse it before anything runs.
      if (input.runId !== undefined) yield* refuseExistingRun(input.runId, store)
      // C16: a changed definition finds none of its stored pipelines again; say so first
      if (shard === undefined) {
        const match = yield* DefinitionMatch.read(yield* Store, experiment.template.specDigest)
        const notice = DefinitionMatch.message(match, {
          command: resume ? "resume" : "run",
          total,
          keyed: experiment.source.keyField !== undefined
        })
        if (notice !== undefined) yield* Console.error(notice)
      }
      const runner = yield* Runner.Runner
      // Built-in tasks need the subprocess runner and the file system; both are provided here.
      const run = yield* (runner.start(specs, { registry }) as Effect.Effect<
        Runner.RunHandle<SourceError | SeedError | ConfigError>,
        ConfigError,
        FileSystem.FileSystem | ProcessRunner | Scope.Scope
      >)
      started = true
      yield* Progress.track(run, {
        total,
        quiet: args.quiet,
        ...Progress.stderrSink(),
        // A pseudo-terminal without a size reports 0 columns: keep the default width then.
        width: process.stderr.columns !== undefined && process.stderr.columns > 0 ? process.stderr.columns : 80,
        ...(progressInterval !== undefined ? { interval: progressInterval } : {})
      })
      const report = yield* run.await
      // the run-scope metrics the tasks reported: the headline a user came for
      const st = yield* Store
      const metrics = yield* st.metrics({ runId: report.runId, pipelineId: null })
      return { report, metrics }
    })).pipe(
      // the command's span: the runner's `assay.run` span (run id, status) is its child
      Effect.withSpan("assay.command", {
        attributes: {
          "assay.command": resume ? "resume" : "run",
          "assay.config": path.basename(args.config),
          ...(shard === undefined ? {} : { "assay.shard": `${shard.index}/${shard.count}` })
        }
      })
    )
    const { metrics, report } = yield* tracked.pipe(
      Effect.provide(
        Runner.layer(input).pipe(
          // the cache is opened after the store and closed before it (it may be the store's file)
          Layer.provideMerge(Layer.provideMerge(
            cacheLayerOf(cacheSetting, target, experiment, cacheDbField),
            Layer.merge(
              storeLayer(target, experiment, settings.journal, settings.artifactBackend),
              Pool.layer(experiment.pools, { plugins: experiment.plugins.algorithms })
            )
          )),
          Layer.merge(NodeProcessRunner.layer)
        )
      ),
      // a database that stayed unreachable past the store's retries (ASSAY_STORE_RETRY): say
      // so, and how to go on once it is back
      Effect.catchTag("StoreUnavailable", (e) =>
        Effect.gen(function*(): Effect.fn.Return<never, StoreUnavailable | ExitWith> {
          if (!started || target._tag !== "Postgres") return yield* e
          const bare = pasteable(resumeCommandOf(process.argv.slice(2)))
          yield* Console.error(`error: the run stopped: the store failed: ${e.message}`)
          yield* Console.error(
            `its unfinished pipelines are kept; once the database is back, and the run's heartbeat is older than --stale-after (30 s by default), resume with: ${bare.text}`
          )
          if (bare.removed) yield* Console.error(`  (${PASSWORD_HINT})`)
          return yield* Effect.fail(new ExitWith(ExitCode.Failures))
        }))
    )
    const shown = metrics.filter((m) => m.name !== SKIPPED_METRIC)
    // a Postgres URL is shown without its password
    const storeShown = redactUrlsIn(store)
    if (args.summary === "json") {
      yield* Console.log(JSON.stringify({
        ...report.toJSON(),
        store: storeShown,
        metrics: Object.fromEntries(shown.map((m) => [m.name, m.value]))
      }))
    } else {
      yield* Console.log(report.summary())
      if (shown.length > 0) {
        yield* Console.log(
          `metrics: ${shown.map((m) => `${m.label ?? m.name} ${Report.formatMetric(m.value, m.display)}`).join(" · ")}`
        )
      }
      yield* Console.log(`store: ${storeShown}`)
      if (!(target._tag === "Memory")) {
        // commands to paste: the URL without its password (a masked one cannot log in)
        const bare = pasteable(store)
        yield* Console.log(
          `results: assay report ${shellQuote(bare.text)} · assay export ${shellQuote(bare.text)} results.jsonl`
        )
        if (bare.removed) yield* Console.log(`  (${PASSWORD_HINT})`)
      }
    }
    if (report.status === "interrupted" && target._tag !== "Memory") {
      const bare = pasteable(resumeCommandOf(process.argv.slice(2)))
      yield* Console.error(`resume with: ${bare.text}`)
      if (bare.removed) yield* Console.error(`  (${PASSWORD_HINT})`)
    }
    const failed = (report.stats.byState.failed ?? 0) > 0 || report.repairFailures > 0
    // An empty source is not a success: nothing ran, and the user most likely named the wrong
    // file or filtered every row away (a shard may own no rows; --limit 0 asked for none).
    if (
      shard === undefined && report.status === "completed" && report.stats.pipelines === 0 && report.skipped === 0 &&
      (limit === undefined || limit > 0)
    ) {
      yield* Console.error(`error: ${Experiment.emptySourceMessage(experiment)}: nothing ran`)
      return yield* Effect.fail(new ExitWith(ExitCode.Failures))
    }
    if (report.status === "interrupted") {
      const why = report.stopReason === null ? undefined : deliberateStops[report.stopReason]
      // A signal (or any other stop) is an abort: 130. A limit the user set is a deliberate
      // stop: the exit code follows the pipelines' outcome, the run stays resumable.
      if (why === undefined) return yield* Effect.fail(new ExitWith(ExitCode.Interrupted))
      yield* Console.error(
        `run ${report.runId} stopped early (${why}); its unfinished pipelines are kept: \`assay resume\` continues it`
      )
    }
    if (failed) {
      return yield* Effect.fail(new ExitWith(ExitCode.Failures))
    }
  })

export { resumeCommandOf } from "./Exit.js"

/** Stop reasons that are limits the user set (not aborts), with the words that explain them. */
const deliberateStops: Readonly<Record<string, string>> = {
  stop_after_failures: "--stop-after-failures / run.stopAfterFailures reached",
  stop_after: "--stop-after / run.stopAfter elapsed"
}

/** The longest `--run-id` accepted, in characters. */
const RUN_ID_MAX = 200

/**
 * What is wrong with a `--run-id` value, or `undefined`: the one rule of plain runs and suites
 * (both check it before anything is opened). A run id is printed on one line (summaries, `resume
 * with:`), passed back as `--run-id` to the views and stored as a key, so it is non-empty, at
 * most {@link RUN_ID_MAX} characters, without control characters (line breaks, tabs) and without
 * leading or trailing spaces.
 */
export const runIdProblem = (runId: string): string | undefined => {
  if (runId.trim() === "") return "the run id is empty: give a non-empty id or omit --run-id"
  if (runId.length > RUN_ID_MAX) return `the run id is ${runId.length} characters long; at most ${RUN_ID_MAX} are allowed`
  const control = /[\u0000-\u001f\u007f]/.exec(runId)
  if (control !== null) {
    return `the run id contains a control character (U+${
      control[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")
    } at index ${control.index}); use letters, digits and punctuation`
  }
  if (runId.trim() !== runId) return `the run id ${JSON.stringify(runId)} starts or ends with a space; remove it`
  return undefined
}

/** Fails with `ConfigError` (exit 2, path `--run-id`) when the flag's value breaks {@link runIdProblem}. */
const checkRunIdFlag = (args: { readonly runId: Option.Option<string> }) =>
  Option.match(Option.flatMap(args.runId, (id) => Option.fromNullable(runIdProblem(id))), {
    onNone: () => Effect.void,
    onSome: (problem) => Effect.fail(configError("--run-id", problem))
  })

/**
 * Fails with `ConfigError` (exit 2) when `runId` (the user's `--run-id` or `run.runId`, plain
 * text, branded here) is already a run of the store.
 */
const refuseExistingRun = (runId: string, store: string) =>
  Effect.gen(function*() {
    const s = yield* Store
    const existing = yield* s.getRun(RunId.make(runId))
    if (Option.isSome(existing)) {
      return yield* configError(
        "--run-id",
        `run id ${runId} already exists in ${redactUrlsIn(store)} (started ${
          new Date(existing.value.startedAt).toISOString()
        }); choose another or omit --run-id`
      )
    }
  })

const definedOnly = (o: RunConfigInput): RunConfigInput => {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v
  return out as RunConfigInput
}

// ---------------------------------------------------------------------------------------------
// Shard processes
// ---------------------------------------------------------------------------------------------

/**
 * The `bin/assay` script of this checkout, used to start shard processes.
 *
 * @since 0.1.0
 * @category sharding
 */
export const assayBin: string = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../bin/assay")

/** The flags a shard child gets: every override of the parent, none of the shard flags. */
const childFlags = (args: RunArgs): Array<string> => {
  const out: Array<string> = []
  const text = (name: string, o: Option.Option<string | number>) => {
    if (Option.isSome(o)) out.push(`--${name}`, String(o.value))
  }
  const bool = (name: string, b: boolean) => {
    if (b) out.push(`--${name}`)
  }
  if (Option.isSome(args.store)) out.push("--store", absoluteStore(args.store.value))
  text("concurrency", args.concurrency)
  text("max-admitted", args.maxAdmitted)
  text("limit", args.limit)
  text("journal", args.journal)
  text("label", args.label)
  bool("retry-succeeded", args.retrySucceeded)
  bool("fresh-restart", args.freshRestart)
  bool("strict-leases", args.strictLeases)
  text("stop-after-failures", args.stopAfterFailures)
  text("stop-after", args.stopAfter)
  text("stale-after", args.staleAfter)
  text("grace", args.grace)
  text("artifact-backend", args.artifactBackend)
  bool("no-signals", args.noSignals)
  bool("strict-env", args.strictEnv)
  bool("otel", args.otel)
  bool("cache", args.cache)
  text("cache-mode", args.cacheMode)
  if (Option.isSome(args.cacheDb)) out.push("--cache-db", path.resolve(args.cacheDb.value))
  text("cache-ttl", args.cacheTtl)
  // Children report through their JSON summary; their progress would only fill the
  // captured stderr that explains a dead shard.
  out.push("--quiet")
  return out
}

interface ShardOutcome {
  readonly index: number
  readonly store: string
  readonly exitCode: number
  readonly signal: string | null
  readonly report: Record<string, any> | null
  readonly stderr: string
  /** `false` for a shard not started because the parent was stopped by a signal first. */
  readonly started: boolean
}

const lastJsonLine = (stdout: string): Record<string, any> | null => {
  const lines = stdout.trim().split("\n").reverse()
  for (const line of lines) {
    try {
      const v = JSON.parse(line) as unknown
      if (typeof v === "object" && v !== null) return v as Record<string, any>
    } catch {
      // not JSON
    }
  }
  return null
}

/**
 * The parent's stop signals while shard children run (in the current scope): the relay claims
 * them from `Signals` (so they do not interrupt the parent), and each signal is sent on to every
 * running child (`kill(pid, signal)`: the child's own runner stops it gracefully, a second
 * signal at once). `signal()` is the first signal received, if any.
 */
const signalRelay = Effect.gen(function*() {
  const pids = new Set<number>()
  let received: Signals.StopSignal | undefined
  const signals = yield* Signals.Signals
  yield* signals.handle((signal) =>
    Effect.sync(() => {
      received ??= signal
      for (const pid of pids) {
        try {
          process.kill(pid, signal)
        } catch {
          // already gone: its exit is being collected
        }
      }
    })
  )
  return {
    pids,
    signal: (): Signals.StopSignal | undefined => received
  }
})

const signalPattern = /signal: (SIG[A-Z0-9]+)/

/**
 * Runs `bin/assay ARGS...` as a child (its own process group, as the executor spawns it),
 * registered with the relay while it runs, and collects its stdout, stderr and exit status (a
 * child killed by a signal reports `128 + n` and the signal's name). If the parent is
 * interrupted, the executor's finalizer sends the child SIGTERM (a graceful stop) and waits.
 */
const runChild = (
  args: ReadonlyArray<string>,
  relay: { readonly pids: Set<number>; readonly signal: () => NodeJS.Signals | undefined }
): Effect.Effect<{ exitCode: number; signal: string | null; stdout: string; stderr: string }, never, CommandExecutor.CommandExecutor> =>
  Effect.scoped(Effect.gen(function*() {
    const proc = yield* PlatformCommand.start(PlatformCommand.make(assayBin, ...args))
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        relay.pids.add(proc.pid)
        // A signal that arrived while the child was being spawned.
        const pending = relay.signal()
        if (pending !== undefined) {
          try {
            process.kill(proc.pid, pending)
          } catch {
            // gone
          }
        }
      }),
      () => Effect.sync(() => relay.pids.delete(proc.pid))
    )
    const text = (stream: typeof proc.stdout) => stream.pipe(Stream.decodeText(), Stream.mkString)
    const [stdout, stderr, status] = yield* Effect.all([
      text(proc.stdout),
      text(proc.stderr),
      proc.exitCode.pipe(
        Effect.map((code) => ({ exitCode: code as number, signal: null as string | null })),
        Effect.catchAll((error) => {
          const signal = signalPattern.exec(error.message)?.[1]
          const n = signal === undefined ? undefined : (osConstants.signals as Record<string, number>)[signal]
          return Effect.succeed({ exitCode: n === undefined ? ExitCode.Failures : 128 + n, signal: signal ?? null })
        })
      )
    ], { concurrency: "unbounded" })
    return { ...status, stdout, stderr }
  })).pipe(
    // A child that cannot even be spawned is reported like a dead one (no report, exit 1).
    Effect.catchAll((error) =>
      Effect.succeed({ exitCode: ExitCode.Failures, signal: null, stdout: "", stderr: `cannot start a shard process: ${error.message}` })
    )
  )

const runShards = (args: RunArgs, resume: boolean, count: number) =>
  Effect.gen(function*() {
    if (Option.isSome(args.shard)) return yield* configError("--shards", "--shards and --shard are exclusive")
    if (Option.isSome(args.runId)) {
      return yield* configError("--run-id", "each shard process has its own run: --run-id cannot be used with --shards")
    }
    // Refuse an invalid experiment here, once, before any child or store exists.
    const experiment = yield* Experiment.load(args.config, { strictEnv: args.strictEnv })
    const overrides = yield* overridesOf(args, resume)
    const settings = yield* Experiment.runSettings(experiment, overrides)
    if (settings.store === ":memory:") {
      return yield* configError("--store", "--shards needs a store file (each shard writes its own, merged afterwards)")
    }
    const chosen = storeSpecOf(experiment, overrides, settings.store)
    const target = yield* StoreResolver.resolve(chosen.spec, experiment.plugins, chosen.field)
    if (target._tag !== "Sqlite") {
      return yield* configError(
        chosen.field,
        `--shards needs a store file (each shard writes its own, merged afterwards), not ${
          target._tag === "Plugin"
            ? `a plugin store (${target.scheme}://)`
            : target._tag === "Postgres"
            ? "a Postgres database (several processes already share one: run without --shards)"
            : "\":memory:\""
        }`
      )
    }
    const jobs = Option.getOrElse(args.jobs, () => count)
    const flags = childFlags(args)
    // Ctrl-C / SIGTERM on the parent: forwarded to every running child (each stops
    // gracefully, or at once on a second signal, and reports), no new child starts, and the
    // merged partial report is printed before exiting 130.
    const relay = yield* signalRelay
    const outcomes = yield* Effect.forEach(
      Array.from({ length: count }, (_, i) => i),
      (index): Effect.Effect<ShardOutcome, never, CommandExecutor.CommandExecutor> => {
        const store = shardStorePath(target.filename, index, count)
        if (relay.signal() !== undefined) {
          return Effect.succeed({ index, store, exitCode: ExitCode.Interrupted, signal: null, report: null, stderr: "", started: false })
        }
        const argv = [
          // Always `resume`: a shard whose previous process died (stale heartbeat) is
          // claimed and continued; on a fresh store it is the same as `run`.
          "resume",
          "-c",
          path.resolve(args.config),
          "--shard",
          `${index}/${count}`,
          ...flags,
          "--summary",
          "json"
        ]
        return Effect.map(runChild(argv, relay), (result) => ({
          index,
          store,
          exitCode: result.exitCode,
          signal: result.signal,
          report: lastJsonLine(result.stdout),
          stderr: result.stderr,
          started: true
        }))
      },
      { concurrency: jobs }
    )
    const signalled = relay.signal()
    // A shard is dead when its process ended without a report (killed, crashed).
    // A child the forwarded signal killed before its own handler was installed (still starting)
    // is interrupted, not dead: it had nothing to report.
    const killedByRelay = (o: ShardOutcome) => signalled !== undefined && o.signal === signalled
    const dead = outcomes.filter((o) =>
      o.started && o.report === null && o.exitCode !== ExitCode.Invalid && !killedByRelay(o)
    )
    const fs = yield* FileSystem.FileSystem
    const present: Array<string> = []
    for (const o of outcomes) {
      if (yield* Effect.orElseSucceed(fs.exists(o.store), () => false)) present.push(o.store)
    }
    // The merged view is read back from the shard stores (deduplicated by pipeline id and
    // recounted), so it includes what a dead shard committed before it died.
    // A store a dead child left half-created cannot be read: say so instead of failing.
    const read = present.length === 0 ? null : yield* Effect.either(mergeReports(present).pipe(Effect.provide(StoreResolver.layerOpener())))
    const merged = read === null || Either.isLeft(read) ? null : read.right.stats()
    const mergeError = read !== null && Either.isLeft(read) ? read.left.message : null
    const shardsJson = outcomes.map((o) => ({
      index: o.index,
      store: o.store,
      exitCode: o.exitCode,
      signal: o.signal,
      status: (o.report?.["status"] as string | undefined) ??
        (!o.started ?
          "not started" :
          o.exitCode === ExitCode.Invalid ?
          "invalid" :
          killedByRelay(o) ?
          "interrupted" :
          "dead"),
      runId: (o.report?.["runId"] as string | undefined) ?? null,
      error: o.report === null && o.started ? o.stderr.trim().split("\n").slice(-5).join("\n") : null
    }))
    const complete = outcomes.every((o) => o.exitCode === 0)
    const json = {
      complete,
      dead: dead.map((o) => o.index),
      mergeError,
      shards: shardsJson,
      merged: merged === null
        ? null
        : {
          pipelines: merged.pipelines,
          byState: merged.byState,
          tasks: merged.tasks,
          attemptsTotal: merged.attemptsTotal,
          handoffsTotal: merged.handoffsTotal,
          handoffsBudgeted: merged.handoffsBudgeted,
          duplicates: merged.duplicates,
          latencyMs: merged.latencyMs,
          sources: merged.sources
        }
    }
    const deadHint = `${dead.length} shard process(es) died (${
      dead.map((o) => `shard ${o.index}/${count}`).join(", ")
    }): run the same command again to resume them once their heartbeat is stale (run.staleAfter)`
    if (args.summary === "json") {
      yield* Console.log(JSON.stringify(json))
    } else {
      for (const s of shardsJson) {
        yield* Console.log(
          `shard ${s.index}/${count}: ${s.status} (exit ${s.exitCode}${s.signal === null ? "" : `, ${s.signal}`}) → ${s.store}`
        )
        if (s.error !== null && s.error !== "") yield* Console.log(`  ${s.error.replace(/\n/g, "\n  ")}`)
      }
      if (merged === null) {
        yield* Console.log(`merged: ${mergeError ?? "no shard store was written"}`)
      } else {
        const by = Object.entries(merged.byState).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(", ")
        yield* Console.log(
          `merged: pipelines ${merged.pipelines}${by === "" ? "" : ` (${by})`}, tasks ${merged.tasks}, attempts ${merged.attemptsTotal}${
            // as `assay merge` says it (tester13h finding 7)
            merged.handoffsTotal > 0 ? `, transitions ${transitionsText(merged.handoffsTotal, merged.handoffsBudgeted ?? undefined)}` : ""}`
        )
      }
    }
    if (dead.length > 0) yield* Console.error(deadHint)
    const codes = outcomes.map((o) => o.exitCode)
    if (codes.includes(ExitCode.Invalid)) return yield* Effect.fail(new ExitWith(ExitCode.Invalid))
    if (signalled !== undefined) {
      yield* Console.error(
        `stopped by ${signalled}: the shard runs are interrupted; run the same command again to resume them`
      )
      return yield* Effect.fail(new ExitWith(ExitCode.Interrupted))
    }
    if (dead.length > 0) return yield* Effect.fail(new ExitWith(ExitCode.Failures))
    if (codes.includes(ExitCode.Interrupted)) return yield* Effect.fail(new ExitWith(ExitCode.Interrupted))
    if (codes.some((c) => c !== 0)) return yield* Effect.fail(new ExitWith(ExitCode.Failures))
  }).pipe(Effect.scoped, Effect.provide(NodeCommandExecutor.layer))

/** `run` / `resume` on a suite file (see `SuiteRun.ts`). */
const suiteRun = (args: RunArgs, resume: boolean): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const refused: Array<string> = []
    if (Option.isSome(args.store)) refused.push("--store")
    if (Option.isSome(args.shard)) refused.push("--shard")
    if (Option.isSome(args.shards)) refused.push("--shards")
    if (Option.isSome(args.jobs)) refused.push("--jobs")
    yield* checkRunIdFlag(args)
    const { store: _store, ...overrides } = yield* overridesOf(args, resume)
    // the call cache of a suite run: the flags (a suite's own run section keeps its run.cache);
    // kept in a shared cache database when one is named, else in memory for this process
    const ttl = yield* durationFlag("cache-ttl", args.cacheTtl)
    const flagged = args.cache || Option.isSome(args.cacheMode) || Option.isSome(args.cacheDb) || ttl !== undefined
    const db = Option.map(args.cacheDb, (p) => path.resolve(p))
    if (flagged && Option.isNone(db)) {
      yield* Console.error("note: a suite run keeps its call cache in memory (this process only); give --cache-db PATH to keep it")
    }
    const suiteMode = Option.getOrUndefined(args.cacheMode)
    if (Option.isSome(db)) yield* Flags.checkCacheDb(db.value, "--cache-db", suiteMode)
    return yield* SuiteRun.runSuite({
      config: args.config,
      overrides: definedOnly({
        ...overrides,
        ...(flagged
          ? {
            cache: {
              mode: Option.getOrElse(args.cacheMode, () => "readWrite" as const),
              ...(ttl !== undefined ? { ttl } : {})
            }
          }
          : {})
      }),
      ...(Option.isSome(db) ? { cacheLayer: Flags.sharedCacheLayer(db.value, "--cache-db", suiteMode) } : {}),
      refused,
      experiments: args.experiment,
      outputRoot: args.outputRoot,
      acceptChangedRows: args.acceptChangedRows,
      limit: args.limit,
      strictEnv: args.strictEnv,
      summary: args.summary,
      quiet: args.quiet,
      progressInterval: yield* durationFlag("progress-interval", args.progressInterval),
      argv: process.argv.slice(2)
    })
  })

const experimentHandler = (resume: boolean) => (args: RunArgs): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  args.experiment.length > 0
    ? Effect.fail(configError("--experiment", "only a suite file has members: --experiment needs -c SUITE"))
    : Option.isSome(args.outputRoot)
    ? Effect.fail(configError("--output-root", "only a suite file has an output root: --output-root needs -c SUITE"))
    : args.acceptChangedRows
    ? Effect.fail(configError("--accept-changed-rows", "only a suite run checks its members' rows against the root: --accept-changed-rows needs -c SUITE"))
    : Option.match(args.shards, {
    onNone: (): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
      Option.isSome(args.jobs)
        ? Effect.fail(configError("--jobs", "--jobs only applies with --shards N (how many shard processes run at once)"))
        : runOne(args, resume),
    onSome: (n): Effect.Effect<void, unknown, FileSystem.FileSystem> => runShards(args, resume, n)
  })

/**
 * `--engine cluster`: the flags it needs and refuses (exit 2 naming the flag), then the
 * cluster submitter, imported only here (the embedded engine never loads the cluster modules).
 */
const clusterHandler = (args: RunArgs, resume: boolean): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.flatMap(
    Effect.zip(SuiteConfig.isSuiteFile(args.config), StudyConfig.isStudyFile(args.config)),
    ([suite, study]) =>
      study
        ? Effect.fail(configError(
          "--engine",
          `${args.config} is a study file: a study runs through its own command, on either engine (assay study run ${args.config} --engine cluster --database URL); run --engine cluster runs an experiment or a suite`
        ))
        : clusterSubmit(args, resume, suite)
  )

/**
 * The run flags that `--engine cluster` does not carry out yet (for an experiment or a suite):
 * refused (exit 2, naming the flag), never ignored. What it carries out: `--store`,
 * `--max-admitted`, `--limit`, `--label`, `--stop-after-failures` and `--stop-after` (the submitter
 * stops admitting; what is admitted goes on), `--summary`, `--quiet`, `--strict-env`, and for a
 * suite `--experiment`.
 */
const clusterNotYet = (args: RunArgs): string | undefined =>
  (
    [
      ["--journal", Option.isSome(args.journal)],
      ["--run-id", Option.isSome(args.runId)],
      ["--strict-leases", args.strictLeases],
      ["--stale-after", Option.isSome(args.staleAfter)],
      ["--grace", Option.isSome(args.grace)],
      ["--artifact-backend", Option.isSome(args.artifactBackend)],
      ["--no-signals", args.noSignals],
      ["--progress-interval", Option.isSome(args.progressInterval)],
      ["--otel", args.otel],
      ["--accept-changed-rows", args.acceptChangedRows]
    ] as const
  ).find(([, given]) => given)?.[0]

const clusterSubmit = (args: RunArgs, resume: boolean, suite: boolean): Effect.Effect<void, unknown, FileSystem.FileSystem> => {
  if (Option.isNone(args.database)) {
    return Effect.fail(configError("--database", "--engine cluster needs --database postgres://user@host:port/db (the cluster's database)"))
  }
  // each refused flag with the reason that holds for it (tester17ad F9)
  const spread = "the runners share the pipelines: start more `assay runner` processes to run more at once"
  const again = "submitting again resumes what is unfinished"
  const refused = (
    [
      ["--shard", Option.isSome(args.shard), spread],
      ["--shards", Option.isSome(args.shards), spread],
      ["--jobs", Option.isSome(args.jobs), spread],
      // a suite selects its members with it; an experiment file has none
      ["--experiment", !suite && args.experiment.length > 0, `it selects a suite's members, and ${args.config} is an experiment file`],
      // a suite's storage on the cluster engine is the Postgres store, not an output root
      [
        "--output-root",
        Option.isSome(args.outputRoot),
        "a suite's members and runs are kept in the --database store; to keep a suite apart, use another database"
      ],
      ["--resume", resume || args.resume, again],
      ["--fresh-restart", args.freshRestart, again],
      ["--retry-succeeded", args.retrySucceeded, `${again}; failed pipelines are admitted again, succeeded ones are kept`]
    ] as const
  ).find(([, given]) => given)
  if (refused !== undefined) {
    return Effect.fail(configError(refused[0], `${refused[0]} does not apply with --engine cluster (${refused[2]})`))
  }
  // the runners run the tasks with the experiment file's `run.cache`: a flag given to the
  // submitter would reach none of them
  const cacheFlag = (
    [
      ["--cache", args.cache],
      ["--cache-mode", Option.isSome(args.cacheMode)],
      ["--cache-db", Option.isSome(args.cacheDb)],
      ["--cache-ttl", Option.isSome(args.cacheTtl)]
    ] as const
  ).find(([, given]) => given)
  if (cacheFlag !== undefined) {
    return Effect.fail(
      configError(
        cacheFlag[0],
        `${cacheFlag[0]} does not apply with --engine cluster: the runners read the experiment file; set run.cache (mode, ttl, db) there`
      )
    )
  }
  // the runners run the attempts: a number given to the submitter would reach none of them
  if (Option.isSome(args.concurrency)) {
    return Effect.fail(configError(
      "--concurrency",
      "--concurrency does not apply with --engine cluster: each runner runs the attempts; " +
        "set run.concurrency in the file, or give --concurrency to assay runner"
    ))
  }
  const database = args.database.value
  const notYet = clusterNotYet(args)
  if (notYet !== undefined) {
    return Effect.fail(configError(
      notYet,
      `${notYet} is not supported on the cluster engine yet (remove it, or run on the embedded engine)`
    ))
  }
  // a deadline of 0 would stop at once: refused as the run config refuses it
  const stopAfter = durationFlag("stop-after", args.stopAfter)
  if (Either.isLeft(stopAfter)) return Effect.fail(stopAfter.left)
  if (stopAfter.right !== undefined && !Duration.greaterThan(stopAfter.right, Duration.zero)) {
    return Effect.fail(configError("--stop-after", "must be longer than 0"))
  }
  const submit = {
    config: args.config,
    database,
    store: args.store,
    maxAdmitted: args.maxAdmitted,
    limit: args.limit,
    label: args.label,
    quiet: args.quiet,
    strictEnv: args.strictEnv,
    stopAfterFailures: args.stopAfterFailures,
    stopAfter: stopAfter.right,
    summary: args.summary
  }
  return Effect.flatMap(ClusterCommand.loadClusterRun, (m) =>
    suite ? m.submitSuite({ ...submit, experiments: args.experiment }) : m.submitRun(submit))
}

const handler = (resume: boolean) => (args: RunArgs): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Option.getOrUndefined(args.engine) === "cluster"
    ? clusterHandler(args, resume)
    : Option.isSome(args.database)
    ? Effect.fail(configError("--database", "--database is the cluster's database: it needs --engine cluster"))
    : Effect.flatMap(
    Effect.zip(SuiteConfig.isSuiteFile(args.config), StudyConfig.isStudyFile(args.config)),
    ([suite, study]): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
      study
        ? Effect.fail(configError("--config", `${args.config} is a study file: run it with \`assay study ${resume ? "resume" : "run"} ${args.config}\``))
        : suite
        ? suiteRun(args, resume)
        : experimentHandler(resume)(args)
  ).pipe(
    // spans (the run's, its attempts') go to the collector while the command runs; the last
    // batch is sent when it ends
    Effect.provide(Otel.layerFromEnv(args.otel))
  )

/**
 * `assay run -c FILE [overrides]`.
 *
 * @since 0.1.0
 * @category commands
 */
export const run = Command.make("run", runOptions, handler(false)).pipe(
  Command.withDescription("Run an experiment or a suite (exit 0 ok, 1 failures, 2 invalid configuration, 75 store held by another writer, 130 interrupted).")
)

/**
 * `assay resume -c FILE [overrides]`: `run` with `--resume` (claims the work of dead runs;
 * finished pipelines are skipped, interrupted ones continue from their last checkpoint).
 *
 * @since 0.1.0
 * @category commands
 */
export const resume = Command.make("resume", runOptions, handler(true)).pipe(
  Command.withDescription("Resume an experiment or a suite: finished pipelines are skipped, the rest continue from their checkpoints.")
)
