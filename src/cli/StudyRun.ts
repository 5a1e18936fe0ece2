/**
 * `assay study run|resume|versions|stop|status FILE`: running a study file and reading its
 * state (the `study` command group and `study plan` are `StudyCommand.ts`'s).
 *
 * - `run FILE [--new-version | --protocol-version N] [--output-root DIR] [--trial ID]... [--json]`: freezes the
 *   protocol (a changed protocol is refused, exit 2, naming the changed parts, unless
 *   `--new-version`), runs every trial of the current version not settled for good (or the
 *   named ones), settles them and the study, prints the study's report;
 * - `resume FILE`: the same for a study that already ran (refused, exit 2, when it never ran);
 *   both count the version's registered trials, the confirmation trials among them
 *   ({@link registeredTrials}), so their tally is `study report`'s;
 * - `versions FILE [--json]`: the frozen protocol versions with what changed from one to the
 *   next, and whether the file's protocol matches the current version;
 * - `stop FILE [--cancel]`: asks the process running the study to stop (running trials drain,
 *   or are cancelled with `--cancel`); it takes the request within about a second;
 * - `status FILE [--json]`: the study's status and its trials' table, read-only (never locks,
 *   never blocks a running study): each trial's live state (`running`, `ended` awaiting
 *   settlement, `interrupted` when the process running it died, or its settled status), its
 *   pipelines ended and admitted (admitted and not ended: running, or waiting for one of the
 *   run's `run.concurrency` worker slots; the store does not tell which, so the figure is
 *   called `admitted`, as in the run monitor), usage and metrics.
 *
 * Exit codes of `run` / `resume`: **0** the study `completed` or `stopped_with_results` (a
 * declared stop condition ended it with comparable results), or only named trials ran and
 * none of them failed (`pending`); **1** `failed`, `inconclusive` or `cancelled`, a named
 * trial (`--trial`, `study confirm`) that did not succeed (said on stderr), or the store failed, or another process runs the study (one process per study root); **2** an
 * invalid study file or flag, a changed protocol without `--new-version`; **130** Ctrl-C (or
 * SIGTERM, SIGHUP) stopped the run — the study's `manual` stop of a signal, which settles the
 * study as stopped and prints `continue with: assay study resume FILE` with the flags the run
 * needs (`--output-root`, ...: see {@link resumeCommand}) — or the run was
 * interrupted without a stop condition firing. `assay study stop` (no signal) exits as its
 * settled status says. `stop`: 0 when the request was
 * written, 1 when no process runs the study. `versions`, `status`: 0, or 2 when the study file
 * is invalid, 1 when the root cannot be read.
 *
 * @since 0.6.0
 */
import * as Words from "../domain/internal/words.js"
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type * as FileSystem from "@effect/platform/FileSystem"
import * as FileSystemTag from "@effect/platform/FileSystem"
import { Clock, Console, Context, Effect, Layer, Option } from "effect"
import * as os from "node:os"
import * as nodePath from "node:path"
import { CodecRegistry } from "../domain/Codec.js"
import { ConfigError, type ConfigIssue, StoreUnavailable } from "../domain/Errors.js"
import * as DomainStudy from "../domain/Study.js"
import * as RunConfig from "../domain/RunConfig.js"
import type { LoadedSuite } from "../config/internal/suite.js"
import * as NodeProcessRunner from "../layers/NodeProcessRunner.js"
import * as CallCache from "../services/CallCache.js"
import * as StudyTables from "../layers/internal/study/tables.js"
import * as Manifest from "../layers/internal/suite/manifest.js"
import * as SuiteStore from "../layers/SuiteStore.js"
import * as Pool from "../services/Pool.js"
import * as Runner from "../services/Runner.js"
import { Store } from "../services/Store.js"
import * as Study from "../services/Study.js"
import { changedParts, inWords, StudyCatalog, type StudyRecordStatus } from "../services/StudyCatalog.js"
import { SuiteCatalog } from "../services/SuiteCatalog.js"
import { callsServedText, formatCost, formatStudyUsd, STUDY_COST } from "../services/internal/money.js"
import { shellQuote } from "../services/internal/processRunner.js"
import { isRunnersRefused, REFUSAL_ADVICE } from "../services/internal/cluster/refusal.js"
import { ModuleLoader } from "../layers/ModuleLoader.js"
import * as PgUrl from "../layers/internal/pg/url.js"
import { ExitCode, ExitWith } from "./Exit.js"
import * as Flags from "./Flags.js"

// ---------------------------------------------------------------------------------------------
// What the study loader gives (`config/Study.ts`)
// ---------------------------------------------------------------------------------------------

/**
 * A loaded study file as these commands read it: a {@link Study.StudyInput} whose suite of a
 * version is the loaded suite (output root, run settings, pools, plugins), and its file.
 *
 * @since 0.6.0
 * @category models
 */
export interface LoadedStudyFile extends Study.StudyInput {
  readonly file: string
  readonly suiteFor: (version: number) => LoadedSuite
  /** Endpoints the study cannot call as configured (see `LoadedStudy.endpointProblems`): the run refuses to start. */
  readonly endpointProblems?: ReadonlyArray<ConfigIssue> | undefined
  /** The declared repeats (a trial of a higher repeat is a confirmation trial; since 0.15.0; absent: none is). */
  readonly repeats?: number | undefined
}

/**
 * Loads a study file (`config/Study.ts`'s `load`).
 *
 * @since 0.6.0
 * @category models
 */
export type LoadStudy = (
  file: string,
  options: {
    readonly outputRoot?: string | undefined
    readonly strictEnv?: boolean | undefined
    readonly newVersion?: boolean | undefined
    /** Trials registered beyond the declared repeats (confirmations: `StudyConfig.load`'s `extraTrials`; since 0.11.0). */
    readonly extraTrials?: ReadonlyArray<{ readonly variantId: string; readonly repeat: number }> | undefined
  }
) => Effect.Effect<LoadedStudyFile, ConfigError, FileSystem.FileSystem>

/**
 * The trials a version of a study has registered, read-only from the study's root: the
 * declared ones it ran and the confirmation trials `study confirm` added, the trials every
 * run, resume and report of the version counts. `version` is `null` (and `trials` empty) when
 * the study never ran there.
 *
 * @param root the study's output root
 * @param studyId the study
 * @param version the version (default: the study's current one)
 * @returns the version and its registered trials (variant id, repeat)
 * @since 0.11.0
 * @category models
 */
export const registeredTrials = (
  root: string,
  studyId: string,
  version?: number | undefined
): Effect.Effect<
  { readonly version: number | null; readonly trials: ReadonlyArray<{ readonly variantId: string; readonly repeat: number }> },
  StoreUnavailable | ConfigError,
  FileSystem.FileSystem
> =>
  Effect.scoped(Effect.gen(function*() {
    if (!(yield* SuiteStore.isSuiteRoot(root))) return { version: null, trials: [] }
    const h = yield* SuiteStore.makeRead(root)
    const row = yield* h.study.study(studyId)
    if (Option.isNone(row)) return { version: null, trials: [] }
    const v = version ?? row.value.currentVersion
    return { version: v, trials: (yield* h.study.trials(studyId, v)).map((t) => ({ variantId: t.variantId, repeat: t.repeat })) }
  }))

/**
 * The pieces the commands take from the study group: the loader, the plan's text printed
 * before a run (optional), and the control of a run (`StudyControl`; default none).
 *
 * @since 0.6.0
 * @category models
 */
export interface StudyCommandDeps {
  readonly load: LoadStudy
  readonly planText?: ((loaded: LoadedStudyFile) => string) | undefined
  readonly control?: ((loaded: LoadedStudyFile) => Study.StudyControlFactory) | undefined
}

// ---------------------------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------------------------

/**
 * The exit code of a settled study run (see the module docs): a run of named trials (`--trial`,
 * `study confirm`) exits 1 when one of them did not succeed, whatever the study settled to (the
 * other trials may have completed it earlier), unless it was interrupted (130).
 *
 * @param status the study's status after the run
 * @param namedTrialFailed a run of named trials only: whether one of them did not succeed
 * @since 0.6.0
 * @category exit codes
 */
export const exitCodeOfStatus = (status: StudyRecordStatus, namedTrialFailed = false): number => {
  if (namedTrialFailed && status !== "interrupted") return ExitCode.Failures
  switch (status) {
    case "completed":
    case "stopped_with_results":
      return ExitCode.Success
    case "pending":
      return ExitCode.Success
    case "interrupted":
      return ExitCode.Interrupted
    default:
      return ExitCode.Failures
  }
}

/**
 * Whether a study run was stopped by a signal (Ctrl-C, SIGTERM, SIGHUP): its stop is the
 * `manual` stop of a signal and it ended the study early (it left a trial unfinished), or a
 * signal cancelled the run after another stop fired. Such a run exits 130 whatever the study
 * settled to (`assay study resume FILE` continues it). A signal whose drain let every trial
 * finish stopped nothing: the run exits as its study settled.
 *
 * @since 0.6.0
 * @category exit codes
 */
export const stoppedBySignal = (report: Study.StudyReport): boolean =>
  (report.stop?.signal !== undefined && report.stoppedEarly) || /^study_stop:sig/.test(report.run?.stopReason ?? "")

// ---------------------------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------------------------

const configError = (path: string, message: string) => new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })

/** The root, layout and suite settings of a loaded study (the same for every version). */
const rootOf = (loaded: LoadedStudyFile) => loaded.suiteFor(1).output

/** Another process holds the root: said plainly (exit 1). */
const explainBusy = (loaded: LoadedStudyFile) => (e: StoreUnavailable | ConfigError) =>
  e._tag === "StoreUnavailable" && e.message.includes("already open for writing")
    ? new StoreUnavailable({
      message: `study "${loaded.id}" is already running in another process (${
        e.message.replace(/^.*already open for writing by /, "").replace(/; one writer.*$/, "")
      }); one process per study: see assay study status, or assay study stop`,
      ...(e.path === undefined ? {} : { path: e.path }),
      // exit 75 (ExitCode.Locked), like a plain run or a suite whose store is held
      locked: true
    })
    : e

/**
 * Options of {@link runStudy}.
 *
 * @since 0.6.0
 * @category models
 */
export interface RunStudyArgs {
  readonly file: string
  readonly resume: boolean
  readonly newVersion: boolean
  /** `--protocol-version N`: continue that existing version. */
  readonly version?: Option.Option<number> | undefined
  readonly outputRoot: Option.Option<string>
  readonly trials: ReadonlyArray<string>
  readonly strictEnv: boolean
  readonly json: boolean
  readonly quiet: boolean
  /** The call cache flags (`--cache`, `--cache-mode`, `--cache-db`, `--cache-ttl`), as `run` takes them. */
  readonly cache?: Flags.CacheFlags | undefined
  /** What the named `trials` are called in the exit line (default `named trial`; `confirmation trial` for `study confirm`). */
  readonly namedWhat?: string | undefined
  /**
   * `--engine cluster` (since 0.15.0; default `local`): the trials' pipelines run on `assay
   * runner -c FILE` processes, the study's driver in this process (`ClusterStudy.ts`).
   */
  readonly engine?: "local" | "cluster" | undefined
  /** `--database URL`: the cluster's PostgreSQL database (with `--engine cluster` only). */
  readonly database?: Option.Option<string> | undefined
  /** `--max-admitted N`: pipelines admitted to the cluster at once (with `--engine cluster` only). */
  readonly maxAdmitted?: Option.Option<number> | undefined
}

/**
 * The line a run of named trials (`--trial`, `study confirm`) prints on stderr when one of
 * them did not succeed (it then exits 1): how many succeeded, and each other one with its
 * status. `undefined` when no trial was named or every named trial that ran succeeded.
 *
 * @param trials the run's trial reports
 * @param named the trial ids named (empty: a plain run)
 * @param what what they are called (`named trial`, `confirmation trial`)
 * @returns the line, or `undefined`
 * @since 0.10.0
 * @category exit codes
 */
export const namedOutcome = (
  trials: ReadonlyArray<Pick<Study.TrialReport, "trialId" | "status" | "ran">>,
  named: ReadonlyArray<string>,
  what: string
): string | undefined => {
  if (named.length === 0) return undefined
  const ran = trials.filter((t) => t.ran && named.includes(t.trialId))
  const bad = ran.filter((t) => t.status !== "succeeded")
  if (bad.length === 0) return undefined
  return `${ran.length - bad.length} of ${Words.count(ran.length, what)} succeeded (${
    bad.map((t) => `${t.trialId} ${Words.statusWords(t.status)}`).join(", ")
  }): exit 1`
}

/**
 * The command that continues a study run stopped by a signal or interrupted: `assay study
 * resume FILE` with every flag of `args` the run needs to find and run the same trials again,
 * as the user gave them (shell-quoted): `--output-root`, `--protocol-version`, each `--trial`,
 * `--strict-env` and the call cache flags. `--new-version` is left out (the version it created
 * is the file's now), and so are the printing flags (`--json`, `--quiet`). A `--database` URL
 * is given without its password (a masked `user:***@` would log in with the password `***`):
 * {@link continueWith} says where the password must come from.
 *
 * @param args the flags the run was given
 * @returns one shell command line
 * @since 0.10.0
 * @category messages
 */
export const resumeCommand = (args: RunStudyArgs): string => {
  const out: Array<string> = ["assay", "study", "resume", args.file]
  if (Option.isSome(args.outputRoot)) out.push("--output-root", args.outputRoot.value)
  if (args.version !== undefined && Option.isSome(args.version)) out.push("--protocol-version", String(args.version.value))
  for (const t of args.trials) out.push("--trial", t)
  if (args.strictEnv) out.push("--strict-env")
  if (args.engine === "cluster") {
    out.push("--engine", "cluster")
    if (args.database !== undefined && Option.isSome(args.database)) out.push("--database", PgUrl.withoutPassword(args.database.value))
    if (args.maxAdmitted !== undefined && Option.isSome(args.maxAdmitted)) out.push("--max-admitted", String(args.maxAdmitted.value))
  }
  const c = args.cache
  if (c !== undefined) {
    if (c.cache) out.push("--cache")
    if (Option.isSome(c.cacheMode)) out.push("--cache-mode", c.cacheMode.value)
    if (Option.isSome(c.cacheDb)) out.push("--cache-db", c.cacheDb.value)
    if (Option.isSome(c.cacheTtl)) out.push("--cache-ttl", c.cacheTtl.value)
  }
  return out.map(shellQuote).join(" ")
}

/**
 * `continue with: CMD` ({@link resumeCommand}) and, when the run's `--database` URL had a
 * password (left out of CMD), a second line saying the password is to be given again
 * (`PGPASSWORD`, `~/.pgpass`, or the user's own URL).
 *
 * @param args the flags the run was given
 * @returns the text to print (one line, or two)
 * @since 0.14.0
 * @category messages
 */
export const continueWith = (args: RunStudyArgs): string =>
  `continue with: ${resumeCommand(args)}${
    args.engine === "cluster" && args.database !== undefined && Option.isSome(args.database) &&
      PgUrl.hasPassword(args.database.value)
      ? `\n  (${PgUrl.PASSWORD_HINT})`
      : ""
  }`

/**
 * The reason `study status` gives a trial: a settled trial's own; a trial not settled
 * (`running`, `pending`) has none of its own — a reason stored by an earlier settlement (`never
 * started: SIGINT received`, before a resume started it) is not shown — and one left behind by
 * a process that died (`state` `interrupted`) says so.
 *
 * @param t the trial's stored status and reason
 * @param state the state `study status` derived (`interrupted` for a dead process's trial)
 * @returns the reason to show, or null
 * @since 0.11.0
 * @category formatting
 */
export const statusReason = (t: { readonly status: string; readonly reason: string | null }, state: string): string | null =>
  t.status !== "running" && t.status !== "pending"
    ? t.reason
    : state === "interrupted"
    ? "interrupted: the process running it ended before settling it; resume continues it"
    : null

/**
 * `assay study run|resume FILE` (see the module docs).
 *
 * @since 0.6.0
 * @category commands
 */
export const runStudy = (deps: StudyCommandDeps, args: RunStudyArgs): Effect.Effect<void, unknown, FileSystem.FileSystem> => {
  // what a stop signal before the study's control claims the signals cuts short (tester16e F6:
  // Ctrl-C while loading exited with no word): the command is interrupted (exit 130) and says what is true
  let stage: { readonly at: "loading" } | { readonly at: "prepared"; readonly version: number } | { readonly at: "running" } = { at: "loading" }
  return runStudyStages(deps, args, (s) => {
    stage = s
  }).pipe(Effect.onInterrupt(() => Console.error(startupInterruptText(stage, args)).pipe(Effect.when(() => stage.at !== "running"))))
}

/**
 * What `study run` / `resume` says when a stop signal interrupts it before any trial started:
 * while loading, `stopped before any trial started; nothing was stored`; once the protocol
 * version is registered, that nothing ran and how to continue.
 *
 * @param stage where the command was
 * @param args the command's arguments (for the resume command)
 * @returns the line
 * @since 0.14.0
 * @category rendering
 */
export const startupInterruptText = (
  stage: { readonly at: "loading" } | { readonly at: "prepared"; readonly version: number } | { readonly at: "running" },
  args: RunStudyArgs
): string =>
  stage.at === "prepared"
    ? `stopped before any trial started: protocol version ${stage.version} is registered, nothing ran; ${continueWith(args)}`
    : "stopped before any trial started; nothing was stored"

/** The module that runs a study on the cluster engine (`ClusterStudy.ts`), as its URL next to this one. */
const clusterStudyUrl = (): string => {
  try {
    return new URL("./ClusterStudy.js", import.meta.url).href
  } catch {
    // inside the CLI's bundle (no module URL): its loader refuses any URL anyway
    return "assay:cluster-study"
  }
}

/**
 * `ClusterStudy.ts`, loaded through the `ModuleLoader` when `--engine cluster` is given, or a
 * study root the cluster engine ran is read (the cluster packages stay out of the CLI's fast
 * start bundle, as `ClusterCommand.loadClusterRun`).
 *
 * @internal
 */
export const loadClusterStudy: Effect.Effect<typeof import("./ClusterStudy.js"), unknown> = Effect.flatMap(
  ModuleLoader,
  (loader) => Effect.map(loader.load(clusterStudyUrl()), (m) => m as unknown as typeof import("./ClusterStudy.js"))
)

/** The first call cache flag given, by name (`undefined`: none). */
const cacheFlagGiven = (c: Flags.CacheFlags | undefined): string | undefined =>
  c === undefined
    ? undefined
    : c.cache
    ? "--cache"
    : Option.isSome(c.cacheMode)
    ? "--cache-mode"
    : Option.isSome(c.cacheDb)
    ? "--cache-db"
    : Option.isSome(c.cacheTtl)
    ? "--cache-ttl"
    : undefined

/** `--engine cluster`'s arguments: `--database` is required (exit 2 naming it). */
const clusterArgsOf = (args: RunStudyArgs) =>
  args.database === undefined || Option.isNone(args.database)
    ? Effect.fail(configError("--database", "--engine cluster needs --database postgres://user@host:port/db (the cluster's database)"))
    : Effect.succeed({
      file: args.file,
      database: args.database.value,
      maxAdmitted: args.maxAdmitted ?? Option.none(),
      quiet: args.quiet,
      cacheFlag: cacheFlagGiven(args.cache)
    })

/**
 * The file a study root the cluster engine ran holds (`ClusterStudy.MARKER`): its pipelines are
 * in the cluster's Postgres store.
 *
 * @internal
 */
export const CLUSTER_MARKER = "cluster.json"

/**
 * Refuses (exit 2, at `--engine`) to run a study root on the other engine than the one that
 * ran it: the cluster's root keeps its pipelines in Postgres (an embedded run would run them
 * again in the root), an embedded root keeps them in the root (the cluster would not see them).
 */
const refuseOtherEngine = (root: string, cluster: boolean) =>
  Effect.gen(function*() {
    const fs = yield* FileSystemTag.FileSystem
    const marked = yield* fs.exists(nodePath.join(root, CLUSTER_MARKER)).pipe(Effect.orElseSucceed(() => false))
    if (!cluster && marked) {
      return yield* configError(
        "--engine",
        `the study in ${root} ran on the cluster engine (its pipelines are in the cluster's store): continue it with --engine cluster --database URL`
      )
    }
    if (cluster && !marked && (yield* SuiteStore.isSuiteRoot(root))) {
      return yield* configError(
        "--engine",
        `the study in ${root} ran on the embedded engine (its pipelines are in that root): continue it without --engine cluster, or give another --output-root`
      )
    }
  })

/** `--database` and `--max-admitted` apply to `--engine cluster` only (exit 2 naming the flag). */
const refuseClusterFlags = (args: RunStudyArgs) =>
  args.database !== undefined && Option.isSome(args.database)
    ? Effect.fail(configError("--database", "--database applies with --engine cluster only"))
    : args.maxAdmitted !== undefined && Option.isSome(args.maxAdmitted)
    ? Effect.fail(configError("--max-admitted", "--max-admitted applies with --engine cluster only (the embedded engine reads run.maxAdmitted)"))
    : Effect.void

const runStudyStages = (
  deps: StudyCommandDeps,
  args: RunStudyArgs,
  reached: (stage: { readonly at: "prepared"; readonly version: number } | { readonly at: "running" }) => void
): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const loadOptions = {
      strictEnv: args.strictEnv,
      newVersion: args.newVersion,
      ...(Option.isSome(args.outputRoot) ? { outputRoot: nodePath.resolve(args.outputRoot.value) } : {})
    }
    const cluster = args.engine === "cluster" ? yield* clusterArgsOf(args) : undefined
    if (cluster === undefined) yield* refuseClusterFlags(args)
    let loaded = yield* deps.load(args.file, loadOptions)
    // the confirmation trials registered beyond the declared ones are the version's trials too
    if (!args.newVersion) {
      // the version's confirmation trials are its trials too: run, resume and report tally the
      // same ones (tester16 F10.1: resume said 12 of 18 where report said 14 of 20)
      const version = args.version !== undefined && Option.isSome(args.version) ? args.version.value : undefined
      // a root another process is creating or holds cannot be read yet: no extra trials here
      // (opening it for writing below then says it is busy: exit 75, not a read error)
      const registered = yield* registeredTrials(rootOf(loaded).root, loaded.id, version).pipe(
        Effect.orElseSucceed(() => ({ version: null, trials: [] }))
      )
      if (registered.version !== null) {
        const known = new Set(loaded.trialsFor(registered.version).map((t) => `${t.variant.id}\u0000${t.repeat}`))
        const extra = registered.trials.filter((t) => !known.has(`${t.variantId}\u0000${t.repeat}`))
        if (extra.length > 0) loaded = yield* deps.load(args.file, { ...loadOptions, extraTrials: [...registered.trials] })
      }
    }
    // an endpoint the study cannot call (its key's variable unset, its URL empty): refused
    // before anything is frozen or run, rather than failing every trial and settling them
    const ps = loaded.endpointProblems ?? []
    if (ps.length > 0) {
      return yield* new ConfigError({
        message: `study ${loaded.id} cannot call its model endpoints as configured: ${Words.count(ps.length, "problem")} (nothing was run)\n${
          ps.map((i) => `  ${i.path}: ${i.message}${i.suggestion === undefined ? "" : ` (${i.suggestion})`}`).join("\n")
        }`,
        issues: ps
      })
    }
    const first = loaded.suiteFor(1)
    // what the cluster engine does not carry out is refused before anything is frozen or run
    const clusterStudy = cluster === undefined ? undefined : yield* loadClusterStudy
    if (clusterStudy !== undefined && cluster !== undefined) yield* clusterStudy.refuse(cluster, loaded, first)
    // one engine per root: its pipelines are in the cluster's store, or in the root
    yield* refuseOtherEngine(first.output.root, cluster !== undefined)
    for (const u of first.unresolvedEnv) {
      yield* Console.error(Words.unsetEnvWarning(u))
    }
    for (const w of first.warnings) yield* Console.error(w)
    // Ctrl-C (SIGINT, SIGTERM, SIGHUP) is the study's manual stop, claimed by its control
    // the call cache flags, as for a suite run: in memory for this process unless --cache-db
    const cache = args.cache === undefined ? undefined : yield* Flags.cacheFlagsOf(args.cache)
    if (cache?.db !== undefined) yield* Flags.checkCacheDb(cache.db, "--cache-db", cache.setting.mode)
    if (cache !== undefined && cache.db === undefined && !args.quiet) {
      yield* Console.error("note: a study run keeps its call cache in memory (this process only); give --cache-db PATH to keep it")
    }
    const input: RunConfig.RunConfigInput = { ...first.run, handleSignals: false, ...(cache !== undefined ? { cache: cache.setting } : {}) }
    const settings = yield* RunConfig.resolve(input)
    let registry = CodecRegistry.default()
    for (const codec of first.plugins.codecs) registry = registry.register(codec)

    const report = yield* Effect.scoped(Effect.gen(function*() {
      const session = clusterStudy === undefined || cluster === undefined ? undefined : yield* clusterStudy.open(cluster, first)
      const h = yield* SuiteStore.make({
        root: first.output.root,
        suiteId: loaded.id,
        layout: first.output.layout,
        members: [],
        journal: settings.journal,
        ...(settings.artifactBackend === undefined || settings.artifactBackend === null
          ? {}
          : { artifactBackend: settings.artifactBackend })
      }).pipe(Effect.mapError(explainBusy(loaded)))
      const stores = Context.make(Store, h.store).pipe(Context.add(SuiteCatalog, h.catalog), Context.add(StudyCatalog, h.study))
      const options: Study.StudyRunOptions = {
        newVersion: args.newVersion,
        ...(args.version !== undefined && Option.isSome(args.version) ? { version: args.version.value } : {}),
        resume: args.resume,
        trials: args.trials,
        control: deps.control === undefined ? Study.studyControl({ signals: true }) : deps.control(loaded),
        runOptions: { registry }
      }
      const prepared = yield* Study.prepare(loaded, options).pipe(Effect.provide(stores))
      reached({ at: "prepared", version: prepared.version })
      // the plan once the study may run (lock held, protocol accepted): a refusal stays one line
      if (deps.planText !== undefined && !args.quiet) yield* Console.error(deps.planText(loaded))
      if (!args.quiet) {
        yield* Console.error(
          `study ${loaded.id}: protocol version ${prepared.version}${prepared.created ? " (new)" : ""}; ` +
            Study.toRunText(prepared)
        )
      }
      if (session !== undefined) {
        // the cluster engine: the submitter is the runner, the store's views the catalog's (ClusterStudy.ts)
        const context = yield* session.environment(
          Context.make(SuiteCatalog, h.catalog).pipe(Context.add(StudyCatalog, h.study)),
          loaded.id,
          prepared.version,
          // the version's confirmation trials: the runners serve them from the cluster's record
          prepared.trials.filter((t) => loaded.repeats !== undefined && t.repeat > loaded.repeats).map((t) => ({ variantId: t.variant.id, repeat: t.repeat }))
        )
        reached({ at: "running" })
        return yield* Study.execute(prepared, options).pipe(
          Effect.provide(context),
          // runners that refused the version's pipelines were started before it (or before the
          // file changed): they need a restart, said once, with the command that continues
          Effect.mapError((e) => isRunnersRefused(e) ? refusedByRunners(e, prepared.version, args) : e)
        )
      }
      // the pools of the version's suite (shared by every trial), the runner on the root's store
      const env = Runner.layer(input).pipe(
        Layer.provideMerge(Layer.mergeAll(
          Layer.succeedContext(stores),
          Pool.layer(prepared.suite.pools, { plugins: first.plugins.algorithms }),
          cache?.db !== undefined ? Flags.sharedCacheLayer(cache.db, "--cache-db", cache.setting.mode) : CallCache.layerMemory
        )),
        Layer.merge(NodeProcessRunner.layer)
      )
      // from here the study's control claims the stop signals (its manual stop): it says what it stopped
      reached({ at: "running" })
      return yield* Study.execute(prepared, options).pipe(Effect.provide(env))
    }))

    // Ctrl-C (the manual stop of a signal, or a signal after another stop): exit 130, resumable
    const signalled = stoppedBySignal(report)
    if (args.json) yield* Console.log(JSON.stringify({ ...report.toJSON(), root: first.output.root, signalled }))
    else {
      // the study's report only: the trials' suite run line ("completed") would contradict it
      yield* Console.log(report.summary())
      yield* Console.log(`output: ${first.output.root}`)
    }
    if (report.status === "interrupted" || signalled) {
      yield* Console.error(
        `${signalled ? "stopped by a signal; " : ""}${continueWith(args)}`
      )
    } else if (report.trials.some((t) => t.status === "incomplete" && (t.reason ?? "").startsWith(Study.ENDPOINT_FAULT_REASON))) {
      // not results: the endpoint refused them; resume runs their failed pipelines again
      yield* Console.error(`a model endpoint failed some trials (see their reasons): fix it, then ${continueWith(args)}`)
    }
    const named = namedOutcome(report.trials, args.trials, args.namedWhat ?? "named trial")
    if (named !== undefined && !signalled) yield* Console.error(named)
    const code = signalled ? ExitCode.Interrupted : exitCodeOfStatus(report.status, named !== undefined)
    if (code !== ExitCode.Success) return yield* Effect.fail(new ExitWith(code))
  })

/**
 * The cluster submitter's refusal (runners refused pipelines) said for a study: the runners
 * serve the protocol versions (and the file) as they were when they started, so a runner up
 * before `--new-version` (or before the study's experiment changed) needs a restart; the
 * refused pipelines are left interrupted, and the command that continues the study follows
 * (`continueWith`: the URL without its password). Still a `ConfigError` (exit 2).
 *
 * @param e the submitter's refusal (`refusal.ts` `isRunnersRefused`)
 * @param version the protocol version the study ran
 * @param args the command's arguments, for the command that continues it
 * @returns the refusal with the study's advice in place of the submitter's
 * @internal
 */
export const refusedByRunners = (e: ConfigError, version: number, args: RunStudyArgs): ConfigError => {
  const advice = `The runners up serve the study as it was when they started (its protocol versions then, and its files): ` +
    `restart every runner (assay runner -c ${shellQuote(args.file)} --database ${
      args.database !== undefined && Option.isSome(args.database) ? shellQuote(PgUrl.withoutPassword(args.database.value)) : "URL"
    }) so that it serves protocol version ${version}; ` +
    `the refused pipelines are left interrupted. Then ${continueWith(args)}`
  const message = e.message.includes(REFUSAL_ADVICE) ? e.message.replace(REFUSAL_ADVICE, advice) : `${e.message} ${advice}`
  return new ConfigError({ message, issues: e.issues })
}

/** Opens the study's root read-only; `undefined` when the study never ran there. */
const openRead = (loaded: LoadedStudyFile) =>
  Effect.gen(function*() {
    const { root } = rootOf(loaded)
    if (!(yield* SuiteStore.isSuiteRoot(root))) return undefined
    const h = yield* SuiteStore.makeRead(root)
    if (h.catalog.suiteId !== loaded.id) {
      return yield* configError("study.id", `the output root ${root} belongs to "${h.catalog.suiteId}", not study "${loaded.id}"`)
    }
    return h
  })

/**
 * `assay study versions FILE` (see the module docs).
 *
 * @since 0.6.0
 * @category commands
 */
export const versions = (
  deps: StudyCommandDeps,
  args: { readonly file: string; readonly outputRoot: Option.Option<string>; readonly json: boolean }
): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const loaded = yield* deps.load(args.file, Option.isSome(args.outputRoot) ? { outputRoot: nodePath.resolve(args.outputRoot.value) } : {})
    const h = yield* openRead(loaded)
    const list = h === undefined ? [] : yield* h.study.versions(loaded.id)
    const current = list[list.length - 1]
    const fileMatches = current !== undefined && DomainStudy.protocolMatches(current.protocolDigest, loaded)
    const earlier = fileMatches ? undefined : list.find((v) => DomainStudy.protocolMatches(v.protocolDigest, loaded))
    const rows = list.map((v, i) => ({
      version: v.version,
      protocolDigest: v.protocolDigest,
      createdAt: new Date(v.createdAt).toISOString(),
      // in words where the stored descriptions allow: the code files by name, the objectives
      changed: i === 0 ? [] : inWords(changedParts(list[i - 1]!.protocolParts, v.protocolParts), list[i - 1]!.protocol, v.protocol)
    }))
    const pendingChange = current === undefined || fileMatches
      ? []
      : inWords(changedParts(current.protocolParts, DomainStudy.comparableParts(current.protocolParts, loaded)), current.protocol, loaded.describe())
    if (args.json) {
      yield* Console.log(JSON.stringify({
        studyId: loaded.id,
        versions: rows,
        file: { protocolDigest: loaded.protocolDigest, matchesCurrent: fileMatches, matchesVersion: earlier?.version ?? (fileMatches ? current!.version : null), changed: pendingChange }
      }))
      return
    }
    if (rows.length === 0) {
      yield* Console.log(`study ${loaded.id}: no protocol version yet (the study has not run in ${rootOf(loaded).root})`)
      return
    }
    for (const r of rows) {
      yield* Console.log(`version ${r.version} (${r.createdAt}, protocol ${r.protocolDigest.slice(0, 12)})${r.version === 1 ? "" : ":"}`)
      for (const c of r.changed) yield* Console.log(`  ${c}`)
    }
    yield* Console.log(
      fileMatches
        ? `the file's protocol is version ${current!.version}`
        : earlier !== undefined
        ? `the file's protocol is version ${earlier.version}'s (an earlier version): run or resume with --protocol-version ${earlier.version} to continue it`
        : `the file's protocol differs from version ${current!.version} (run --new-version to start version ${current!.version + 1}):\n${
          pendingChange.map((c) => `  ${c}`).join("\n")
        }`
    )
  }))

const pad = (s: string, n: number) => (s.length >= n ? s : s + " ".repeat(n - s.length))

/**
 * A trial's pipeline progress as `assay study status` prints it: `N of P ended, A admitted`
 * (`of P` only when the plan's count is known), or `-` when it has no stored pipeline. `A`
 * counts the pipelines admitted and not ended: running, or waiting for a worker slot (with
 * `run.concurrency: 8` a trial may have 16 admitted and at most 8 running), so it is never
 * called "running".
 *
 * @param p the trial's stored pipelines: `ended` (succeeded or failed), `admitted` (admitted,
 *   not ended), `pending` (pending or interrupted), `planned` (the plan's count, `null` or absent: unknown)
 * @returns the phrase
 * @since 0.9.0
 * @category commands
 */
export const progressText = (
  p: { readonly ended: number; readonly admitted: number; readonly pending: number; readonly planned?: number | null | undefined }
): string =>
  p.ended + p.admitted + p.pending === 0
    ? "-"
    : `${p.ended}${p.planned === null || p.planned === undefined ? "" : ` of ${p.planned}`} ended, ${p.admitted} admitted`

/** The states `study status` shows for a trial not settled since its pipelines last changed. */
const UNSETTLED_STATES: ReadonlySet<string> = new Set(["running", "ended", "interrupted", "pending"])

/**
 * A trial's metrics cell in `assay study status`: `k=v` pairs, prefixed `partial: ` when they
 * are partial, the rule of a run's report (`TrialReport.partialMetrics`): the trial has not
 * succeeded and not every planned pipeline of it ended (it is running, ended early, or was
 * interrupted), so its figures cover only some of its pipelines (its succeeded ones, as of its
 * last settlement), never a result. With `pipelines.succeeded` the prefix of a settled trial
 * counts them: `partial (2 of 40 pipelines): ` (`Study.partialLabel`; since 0.11.0); a trial not
 * settled since its pipelines changed (`running`, `ended`, `interrupted`, `pending`) shows its
 * last settlement's metrics as `partial, as last settled: ` (the live counts, in the pipelines
 * column, are not what they cover). With the counts the settlement stored (`settled.metricsOver`,
 * schema version 15) the prefix counts those: `partial (2 of 40 pipelines): `, or `partial, as
 * last settled (2 of 40 pipelines): ` while the trial runs again.
 *
 * @param t the row: its shown state, its stored metrics and its pipelines (`ended`, `planned`,
 *   `succeeded`)
 * @returns `partial` and the cell's `text` (empty without metrics)
 * @since 0.10.0
 * @category commands
 */
export const metricsCell = (
  t: {
    readonly state: string
    readonly metrics: Readonly<Record<string, number>> | null | undefined
    readonly pipelines: {
      readonly ended: number
      readonly planned?: number | null | undefined
      readonly succeeded?: number | undefined
    }
    /** What the last settlement counted (schema version 15): the pipelines its metrics cover. */
    readonly settled?: { readonly metricsOver?: { readonly succeeded: number; readonly planned: number | null } | undefined } | undefined
  }
): { readonly partial: boolean; readonly text: string } => {
  const pairs = Object.entries(t.metrics ?? {}).map(([k, v]) => `${k}=${Words.figure(v)}`).join(" ")
  const planned = t.pipelines.planned
  // the stored metrics are its last settlement's: while it runs again (or its process died)
  // the live counts are not what they cover, so they are labelled by when, not by a count
  const since = UNSETTLED_STATES.has(t.state)
  const complete = !since && planned !== null && planned !== undefined && t.pipelines.ended >= planned
  const partial = pairs !== "" && t.state !== "succeeded" && !complete
  // the count the settlement stored (tester16b: a live count does not say what the metrics
  // cover); a trial settled before schema version 15 has none: the live count when settled,
  // no count while it runs again
  const over = t.settled?.metricsOver
  const label = since
    ? over === undefined ? "partial, as last settled" : Study.partialLabel(over).replace(/^partial/, "partial, as last settled")
    : Study.partialLabel(over ?? (t.pipelines.succeeded === undefined ? undefined : { succeeded: t.pipelines.succeeded, planned }))
  return { partial, text: partial ? `${label}: ${pairs}` : pairs }
}

/**
 * The judge's share beside a trial's cost in `assay study status` (` (judge $0.0030)`), as its
 * last settlement recorded it (` (judge $0.0030, as last settled)` while it runs again); empty
 * without one (tester16b N7).
 */
const judgeCell = (t: { readonly state: string; readonly settled?: { readonly judgeCostUsd?: number | undefined } | undefined }): string =>
  t.settled?.judgeCostUsd === undefined
    ? ""
    : ` (judge ${formatStudyUsd(t.settled.judgeCostUsd)}${UNSETTLED_STATES.has(t.state) ? ", as last settled" : ""})`

/**
 * `assay study status FILE` (see the module docs).
 *
 * @since 0.6.0
 * @category commands
 */
export const status = (
  deps: StudyCommandDeps,
  args: {
    readonly file: string
    readonly outputRoot: Option.Option<string>
    readonly json: boolean
    /**
     * `--database URL` (since 0.15.0): a root the cluster engine runs keeps its pipelines in the
     * cluster's Postgres store; with it the trials' live pipeline counts (and call cache
     * figures) are read there (without it, such a root shows the trials' settled state).
     */
    readonly database?: Option.Option<string> | undefined
  }
): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const loaded = yield* deps.load(args.file, Option.isSome(args.outputRoot) ? { outputRoot: nodePath.resolve(args.outputRoot.value) } : {})
    const opened = yield* openRead(loaded)
    // a cluster root's pipelines are in the cluster's store: read there with --database
    const database = args.database ?? Option.none()
    const swap = opened === undefined || Option.isNone(database) ? undefined : yield* Effect.flatMap(
      loadClusterStudy,
      (cluster) => cluster.readViews(rootOf(loaded).root, database)
    )
    const h = opened === undefined || swap === undefined ? opened : { ...opened, ...swap({ catalog: opened.catalog, study: opened.study }) }
    const state = h === undefined ? Option.none() : yield* Study.status(loaded.id).pipe(Effect.provideService(StudyCatalog, h.study))
    if (Option.isNone(state)) {
      if (args.json) yield* Console.log(JSON.stringify({ studyId: loaded.id, status: null, trials: [] }))
      else yield* Console.log(`study ${loaded.id}: not run yet (no state in ${rootOf(loaded).root})`)
      return
    }
    const { study, trials } = state.value
    const live = StudyTables.writerAlive(nodePath.join(rootOf(loaded).root, Manifest.catalogOf(rootOf(loaded).layout)))
    // a row left `running` by a process that died (kill -9) reads as interrupted
    const shown: StudyRecordStatus = study.status === "running" && !live ? "interrupted" : study.status
    // the trials' stored pipelines by state (one aggregate read): live progress
    const states = h?.study.pipelineStates === undefined ? new Map() : yield* h.study.pipelineStates(loaded.id)
    // the call cache's hits and misses per trial, from the attempt rows (as `study run` shows them)
    const cacheByTrial = h === undefined
      ? new Map<string, { readonly hits: number; readonly misses: number; readonly costSavedUsd: number | null }>()
      : yield* Study.trialCache(loaded.id, trials.map((t) => t.trialId)).pipe(Effect.provideService(SuiteCatalog, h.catalog))
    const rows = trials.map((t) => {
      const p: Readonly<Record<string, number>> = states.get(t.trialId) ?? {}
      const pipelines = {
        ended: (p.succeeded ?? 0) + (p.failed ?? 0),
        // what its pipeline-level metrics cover (a partial trial's cell counts them)
        succeeded: p.succeeded ?? 0,
        // admitted and not ended: running or waiting for a worker slot (the store does not say which)
        admitted: p.running ?? 0,
        /** @deprecated the same figure as `admitted` (it never meant "running"): kept for JSON readers */
        running: p.running ?? 0,
        pending: (p.pending ?? 0) + (p.interrupted ?? 0),
        // the plan's pipelines per trial (null: the source cannot be counted): "N of P" counts against it
        planned: loaded.pipelinesPerTrial
      }
      // a trial row left `running` (or one whose pipelines were left running) by a dead process
      const state = t.status === "running"
        ? t.endedAt !== null ? "ended" : live ? "running" : "interrupted"
        : t.status === "pending" && pipelines.ended + pipelines.running > 0
        ? live && study.status === "running" ? "running" : "interrupted"
        : t.status
      // the per-trial budget figures its usage went past, as `run --json` has them
      const overshoot = Study.overshootOf(t.usage, loaded.budget?.perTrial ?? {})
      const partial = metricsCell({ state, metrics: t.metrics, pipelines }).partial
      const cache = cacheByTrial.get(t.trialId)
      return {
        ...t,
        reason: statusReason(t, state),
        state,
        pipelines,
        ...(overshoot.length > 0 ? { overshoot } : {}),
        ...(partial ? { partialMetrics: true } : {}),
        ...(cache === undefined ? {} : { cache })
      }
    })
    if (args.json) {
      yield* Console.log(
        JSON.stringify({ studyId: study.studyId, version: study.currentVersion, status: shown, running: live, stopReason: study.stopReason, trials: rows })
      )
      return
    }
    yield* Console.log(`study ${study.studyId} (protocol version ${study.currentVersion}): ${Words.statusWords(shown)}${live ? " (a process is running it)" : ""}`)
    if (study.stopReason !== null) yield* Console.log(`stop: ${study.stopReason}`)
    // the cache column only when the call cache did something for some trial: hits/misses
    const cached = cacheByTrial.size > 0
    // the calls in `study run`'s wording (money.ts callsServedText): "0 calls (3 served from
    // cache)" (issue 18: status printed a bare 0 beside the hit/miss column)
    const callsCells = rows.map((t) => callsServedText(t.usage.calls, t.cache?.hits ?? 0, t.cache?.costSavedUsd ?? null))
    const callsWidth = Math.max(7, ...callsCells.map((c) => c.length))
    yield* Console.log(
      `${pad("trial", 16)} ${pad("status", 17)} ${pad("pipelines", 30)} ${pad("calls", callsWidth)} ${cached ? `${pad("cache hit/miss", 15)} ` : ""}${pad("tokens", 9)} ${pad("cost", 9)} metrics`
    )
    for (const [i, t] of rows.entries()) {
      const metrics = metricsCell(t).text
      const progress = progressText(t.pipelines)
      const cache = cached ? `${pad(t.cache === undefined ? "—" : `${t.cache.hits}/${t.cache.misses}`, 15)} ` : ""
      yield* Console.log(
        `${pad(t.trialId, 16)} ${pad(Words.statusWords(t.state), 17)} ${pad(progress, 30)} ${pad(callsCells[i]!, callsWidth)} ${cache}${pad(String(t.usage.tokens), 9)} ${
          pad(`${formatCost(t.usage.costUsd, t.usage.unpriced ?? 0, STUDY_COST)}${judgeCell(t)}`, 9)
        } ${metrics}`
      )
    }
  }))

/**
 * `assay study stop FILE [--cancel]` (see the module docs).
 *
 * @since 0.6.0
 * @category commands
 */
export const stop = (
  deps: StudyCommandDeps,
  args: { readonly file: string; readonly outputRoot: Option.Option<string>; readonly cancel: boolean }
): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const loaded = yield* deps.load(args.file, Option.isSome(args.outputRoot) ? { outputRoot: nodePath.resolve(args.outputRoot.value) } : {})
    const { layout, root } = rootOf(loaded)
    const file = nodePath.join(root, Manifest.catalogOf(layout))
    if (!StudyTables.writerAlive(file)) {
      yield* Console.error(`no process is running study ${loaded.id} (${root}): nothing to stop`)
      return yield* Effect.fail(new ExitWith(ExitCode.Failures))
    }
    const running = args.cancel ? "cancel" : "drain"
    const at = yield* Clock.currentTimeMillis
    yield* StudyTables.requestStopInFile(file, { studyId: loaded.id, running, by: `pid ${process.pid} on ${os.hostname()}`, at })
    const onCluster = yield* Effect.flatMap(FileSystemTag.FileSystem, (fs) => fs.exists(nodePath.join(root, CLUSTER_MARKER))).pipe(
      Effect.orElseSucceed(() => false)
    )
    yield* Console.log(stopRequestedLine(loaded.id, running, onCluster))
  })

/**
 * What `assay study stop` says once the request is written: how the running trials stop
 * (drain, or cancelled), and, on a root the cluster engine runs (`onCluster`), what a cancel
 * is there: no more of the running trials' pipelines are admitted, the runners stop the ones
 * admitted at their next task boundary (`cancelMarks.ts`), and the trials cut short settle
 * `cancelled` (resumable).
 *
 * @param studyId the study
 * @param running `drain` or `cancel` (`--cancel`)
 * @param onCluster whether the study's root is a cluster engine's ({@link CLUSTER_MARKER})
 * @returns the line
 * @internal
 */
export const stopRequestedLine = (studyId: string, running: "drain" | "cancel", onCluster: boolean): string =>
  `stop requested for study ${studyId}: running trials ${
    running === "drain"
      ? "drain"
      : onCluster
      ? "are cancelled (cluster engine: no more of their pipelines are admitted; the runners stop the admitted ones at their next task boundary, a call under way finishing first; the trials cut short settle cancelled, resumable)"
      : "are cancelled"
  }; the running process takes the request within about a second`

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

// the same argument and flag as `study plan` (a missing file is the loader's error, in words,
// exit 2, like every other problem with the file)
const file = Args.file({ name: "study", exists: "either" }).pipe(
  Args.withDescription("The study file (.json, .toml, .yaml/.yml or .ts): a document with a top-level study key.")
)
const outputRoot = Flags.outputRoot("The study's output root, relative to the working directory (overrides output.root).")
const json = Options.boolean("json").pipe(Options.withDescription("Print one JSON object."))
const strictEnv = Options.boolean("strict-env").pipe(Options.withDescription("An unset ${VAR} is an error."))
const quiet = Options.boolean("quiet").pipe(Options.withAlias("q"), Options.withDescription("Print no plan or progress lines."))
const trial = Options.text("trial").pipe(
  Options.repeated,
  Options.withDescription("Run only this trial (p<version>-<variant>-r<repeat>).")
)
const newVersion = Options.boolean("new-version").pipe(
  Options.withDescription("Start a new protocol version when the protocol changed (the old trials are kept, never compared).")
)
const version = Options.integer("protocol-version").pipe(
  Options.optional,
  Options.withDescription("Continue this earlier protocol version (the file's protocol must be that version's).")
)
const engine = Options.choice("engine", ["local", "cluster"]).pipe(
  Options.withDefault("local" as const),
  Options.withDescription(
    "local (default): this process runs the trials; cluster: the trials' pipelines run on `assay runner -c FILE` processes (needs --database)."
  )
)
const database = Options.text("database").pipe(
  Options.withPseudoName("URL"),
  Options.optional,
  Options.withDescription("With --engine cluster: the cluster's PostgreSQL database (postgres://user@host:port/db).")
)
const maxAdmitted = Flags.integerAtLeast("max-admitted", 1).pipe(
  Options.optional,
  Options.withDescription("With --engine cluster: pipelines admitted to the cluster at once (default run.maxAdmitted, else 1024).")
)
/**
 * The cluster engine's flags of the study commands that run trials (`run`, `resume`,
 * `confirm`): `--engine`, `--database`, `--max-admitted`.
 *
 * @internal
 */
export const clusterFlags = { engine, database, maxAdmitted } as const

const cancel = Options.boolean("cancel").pipe(Options.withDescription("Cancel the running trials (resumable) instead of letting them finish."))

/**
 * The subcommands `run`, `resume`, `versions`, `stop` and `status` of `assay study`, over the
 * given loader (the study group adds them beside `plan`:
 * `Command.withSubcommands([plan, ...StudyRun.subcommands({ load, planText, control })])`).
 *
 * @since 0.6.0
 * @category commands
 */
export const subcommands = (deps: StudyCommandDeps) => {
  const runLike = (resume: boolean) =>
    Command.make(resume ? "resume" : "run", { file, newVersion, version, outputRoot, trial, strictEnv, json, quiet, engine, database, maxAdmitted, ...Flags.cacheOptions }, (o) =>
      runStudy(deps, {
        file: o.file,
        resume,
        newVersion: o.newVersion,
        version: o.version,
        outputRoot: o.outputRoot,
        trials: o.trial,
        strictEnv: o.strictEnv,
        json: o.json,
        quiet: o.quiet,
        cache: { cache: o.cache, cacheMode: o.cacheMode, cacheDb: o.cacheDb, cacheTtl: o.cacheTtl },
        engine: o.engine,
        database: o.database,
        maxAdmitted: o.maxAdmitted
      })).pipe(
        Command.withDescription(
          resume
            ? "Continue a study that already ran: unsettled trials resume at their checkpoints; settled ones are skipped."
            : "Run a study: freeze its protocol, run its trials, settle them and the study."
        )
      )
  return [
    runLike(false),
    runLike(true),
    Command.make("versions", { file, outputRoot, json }, (o) => versions(deps, o)).pipe(
      Command.withDescription("List the study's protocol versions and what changed between them.")
    ),
    Command.make("stop", { file, outputRoot, cancel }, (o) => stop(deps, o)).pipe(
      Command.withDescription("Ask the process running the study to stop (drain, or --cancel).")
    ),
    Command.make("status", {
      file,
      outputRoot,
      json,
      database: Options.text("database").pipe(
        Options.withPseudoName("URL"),
        Options.optional,
        Options.withDescription("A study the cluster engine runs: its database (postgres://…), for the trials' live pipeline counts.")
      )
    }, (o) => status(deps, o)).pipe(
      Command.withDescription("Print the study's status and its trials (read-only).")
    )
  ] as const
}
