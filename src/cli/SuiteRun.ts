/**
 * `assay run|resume|validate -c SUITE`: the suite side of those commands (a file whose document
 * has a top-level `suite` is a suite file; `RunCommand` / `ValidateCommand` hand it here).
 *
 * - `run` / `resume`: the suite file is loaded and checked (exit 2 before any store is opened),
 *   `--store`, `--shard`, `--shards` and `--jobs` are refused (exit 2: a suite's one storage
 *   entry is its output root, and separate processes cannot share live pool quotas), the
 *   suite's output root (`output.root`, or `--output-root` relative to the working directory)
 *   is opened with `SuiteStore` for the selected members only (`--experiment ID`, repeatable;
 *   the others' databases are not opened for writing), the members run round-robin under one
 *   runner, and the report is printed with one line per member. Exit 0 (every selected member's
 *   pipelines succeeded or were skipped), 1 (a pipeline failed or a member's source failed),
 *   2 (invalid configuration, a changed member definition) or 130 (stopped; resumable).
 * - `validate`: prints what the suite loader describes (ignored member run fields, effective
 *   run overrides, pool mapping per member), as text or `--json`.
 *
 * @since 0.5.0
 */
import * as Words from "../domain/internal/words.js"
import type * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Clock, Console, type Duration, Effect, Layer, Option, type Scope, Stream } from "effect"
import type { PipelineCursor, PipelinesPage } from "../domain/TaskStore.js"
import { SuiteCatalog } from "../services/SuiteCatalog.js"
import { CodecRegistry } from "../domain/Codec.js"
import { ConfigError, type ConfigIssue, type StoreUnavailable } from "../domain/Errors.js"
import { RunId } from "../domain/Ids.js"
import * as RunConfig from "../domain/RunConfig.js"
import { idKey, memberPath } from "../domain/Suite.js"
import * as SuiteConfig from "../config/Suite.js"
import * as NodeProcessRunner from "../layers/NodeProcessRunner.js"
import { definitionChangeMessage, matchesRegistered, registrationIssues } from "../layers/internal/suite/catalog.js"
import { missingMemberDbMessage } from "../layers/internal/suite/members.js"
import * as SuiteStore from "../layers/SuiteStore.js"
import * as CallCache from "../services/CallCache.js"
import * as Pool from "../services/Pool.js"
import * as Progress from "../services/Progress.js"
import * as Report from "../services/internal/report.js"
import { shellQuote } from "../services/internal/processRunner.js"
import * as Runner from "../services/Runner.js"
import { SKIPPED_METRIC } from "../services/internal/runner/run.js"
import { FAILURES_REACHED_METRIC } from "../services/internal/suite/metric.js"
import { oneLine } from "../services/internal/suiteViews.js"
import { Store } from "../services/Store.js"
import * as Suite from "../services/Suite.js"
import { PASSWORD_HINT, pasteable } from "../layers/internal/pg/url.js"
import { ExitCode, ExitWith, resumeCommandOf } from "./Exit.js"
import * as ValidateText from "./ValidateText.js"

/**
 * What the suite side of `run` / `resume` reads from the command line: the run overrides
 * (already checked and made into a `RunConfigInput`, without `store`), the flags a suite
 * refuses (to name them), the selection and the output root.
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteRunArgs {
  readonly config: string
  readonly overrides: RunConfig.RunConfigInput
  /**
   * Where the call cache lives (`--cache-db`: a shared cache database; default: memory, for
   * this process only); the cache setting itself is in `overrides.cache`.
   */
  readonly cacheLayer?: Layer.Layer<CallCache.CallCache, StoreUnavailable | ConfigError> | undefined
  readonly refused: ReadonlyArray<string>
  readonly experiments: ReadonlyArray<string>
  readonly outputRoot: Option.Option<string>
  /** Run even when a member's source no longer yields some of its stored pipelines. */
  readonly acceptChangedRows?: boolean | undefined
  readonly limit: Option.Option<number>
  readonly strictEnv: boolean
  readonly summary: "text" | "json"
  readonly quiet: boolean
  readonly progressInterval: Duration.Duration | undefined
  readonly argv: ReadonlyArray<string>
}

const configError = (p: string, message: string) => new ConfigError({ message: `${p}: ${message}`, issues: [{ path: p, message }] })

const refusedReason: Readonly<Record<string, string>> = {
  "--store": "a suite's one storage entry is its output root (output.root, or --output-root)",
  "--shard": "separate processes cannot share a suite's live pool quotas",
  "--shards": "separate processes cannot share a suite's live pool quotas",
  "--jobs": "it only applies with --shards, which a suite refuses"
}

/** Stop reasons that are limits the user set (not aborts). */
const deliberateStops: Readonly<Record<string, string>> = {
  stop_after_failures: "--stop-after-failures / run.stopAfterFailures reached",
  stop_after: "--stop-after / run.stopAfter elapsed"
}


/**
 * Loads a suite file into a runnable {@link Suite.Suite}, with the loaded description.
 *
 * @since 0.5.0
 * @category loading
 */
export const loadSuite = (
  config: string,
  options: {
    readonly strictEnv: boolean
    readonly outputRoot?: string | undefined
    /** The members a run selects (see `SuiteConfig.SuiteLoadOptions.selected`). */
    readonly selected?: ReadonlyArray<string> | undefined
  }
) =>
  Effect.gen(function*() {
    const loaded = yield* SuiteConfig.load(config, {
      strictEnv: options.strictEnv,
      ...(options.outputRoot === undefined ? {} : { outputRoot: path.resolve(options.outputRoot) }),
      ...(options.selected === undefined ? {} : { selected: options.selected })
    })
    const suite = yield* Suite.fromLoaded(loaded)
    return { loaded, suite }
  })

/**
 * `assay run|resume -c SUITE`: see the module documentation.
 *
 * @since 0.5.0
 * @category commands
 */
export const runSuite = (args: SuiteRunArgs): Effect.Effect<void, unknown, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    // 1. Everything that can be refused is refused before the output root is opened.
    for (const flag of args.refused) {
      return yield* configError(flag, `refused in suite mode: ${refusedReason[flag] ?? "not supported for a suite"}`)
    }
    const { loaded, suite } = yield* loadSuite(args.config, {
      strictEnv: args.strictEnv,
      outputRoot: Option.getOrUndefined(args.outputRoot),
      ...(args.experiments.length === 0 ? {} : { selected: args.experiments })
    })
    for (const u of loaded.unresolvedEnv) {
      yield* Console.error(Words.unsetEnvWarning(u))
    }
    for (const w of loaded.warnings) yield* Console.error(w)
    const rootField = Option.isSome(args.outputRoot) ? "--output-root" : "output.root"
    if (!(yield* SuiteStore.isSuiteRoot(loaded.output.root))) {
      // `resume` continues a suite root: a missing one is a mistyped path, not a fresh start
      if (args.overrides.resume === true) {
        return yield* configError(
          rootField,
          `nothing to resume: there is no suite root at ${loaded.output.root} (no manifest.json); ` +
            "start the suite with `assay run -c SUITE_FILE`"
        )
      }
      // a new root is a directory of its own: never a file, never inside another suite's root
      const { found, root } = yield* SuiteStore.describePath(loaded.output.root)
      if (root !== undefined || found.startsWith("is a file")) {
        return yield* configError(
          rootField,
          `expected a suite root (a new or existing directory holding manifest.json): ${loaded.output.root} ${found}` +
            (root === undefined ? "" : `; a suite root is never created inside another (${root})`)
        )
      }
    }
    const selected = yield* Suite.select(suite, args.experiments.length === 0 ? undefined : args.experiments)
    const input: RunConfig.RunConfigInput = { ...loaded.run, ...args.overrides }
    const settings = yield* RunConfig.resolve(input)
    const limit = Option.getOrUndefined(args.limit)
    // the progress total: the selected members' sizes within their limits, when all are known
    let total: number | undefined = 0
    for (const m of loaded.members) {
      if (!selected.some((s) => s.id === m.id)) continue
      const size = yield* m.experiment.size(m.limit)
      total = size === undefined || total === undefined ? undefined : total + size
    }
    if (total !== undefined && limit !== undefined) total = Math.min(total, limit)
    let registry = CodecRegistry.default()
    for (const codec of loaded.plugins.codecs) registry = registry.register(codec)

    // 2. An existing root is checked read-only first (no lock taken, nothing written): what the
    // run would refuse is refused before any database is opened for writing, so a refused run
    // leaves every file of the root as it was (its writer rows included)
    const prechecked = yield* precheck(loaded, selected.map((m) => m.id), input.runId, args.acceptChangedRows === true)

    // 3. Open the output root (the selected members only) and run.
    const storeLayer = SuiteStore.layer({
      root: loaded.output.root,
      suiteId: loaded.id,
      layout: loaded.output.layout,
      members: loaded.members.map((m) => m.id),
      selected: selected.map((m) => m.id),
      journal: settings.journal,
      ...(settings.artifactBackend === undefined || settings.artifactBackend === null
        ? {}
        : { artifactBackend: settings.artifactBackend })
    })
    const tracked = Effect.scoped(Effect.gen(function*() {
      // a reused run id would only fail at openRun (a primary key): refused first (exit 2)
      if (input.runId !== undefined) {
        const existing = yield* Effect.flatMap(Store, (st) => st.getRun(RunId.make(input.runId!)))
        if (Option.isSome(existing)) {
          return yield* configError("--run-id", `run id ${input.runId} already exists in ${loaded.output.root}; choose another or omit --run-id`)
        }
      }
      const catalog = yield* SuiteCatalog
      // a changed member definition is refused by the run itself, before anything is written:
      // no acceptance is recorded ahead of that refusal, and its rows are not compared (a
      // content-addressed member's every stored pipeline would read as an edited row, and the
      // message would point at --accept-changed-rows, which cannot help)
      const registered = new Map((yield* catalog.members).map((r) => [r.experimentId, r]))
      const definitionsHold = loaded.members.every((m) => {
        const r = registered.get(m.id)
        return !selected.some((s) => s.id === m.id) || r === undefined || matchesRegistered(r, m)
      })
      // rows edited or removed since the root last saw them: refused unless accepted; an
      // acceptance is recorded in the root (the old pipelines superseded), so later runs and
      // resumes go on without the flag while a new edit is refused again
      // (already read by the read-only check when the root existed)
      const changed = !definitionsHold ? [] : prechecked !== undefined ? prechecked.changed : yield* changedRows(loaded, selected.map((m) => m.id))
      // a keyed row edited in place: its key names one pipeline, so no acceptance can keep both
      const refused = changedRowsRefusal(changed, args.acceptChangedRows === true)
      if (refused !== undefined) return yield* refused
      if (changed.length > 0) {
        const nowMs = yield* Clock.currentTimeMillis
        for (const c of changed) {
          if (catalog.acceptChangedRows === undefined) break
          const n = yield* catalog.acceptChangedRows({
            experimentId: c.experimentId,
            staleKeys: c.staleKeys,
            newKeys: c.addedKeys,
            revivedKeys: c.revivedKeys,
            nowMs
          })
          if (c.stale > 0) {
            yield* Console.error(
              `warning: member ${c.experimentId}: ${c.stale} input row(s) edited or removed since they ran ` +
                `(accepted by --accept-changed-rows, recorded in the root: later runs need no flag): ` +
                `their ${n} stored pipeline(s) are kept as superseded history, left out of the cumulative totals`
            )
          }
          if (c.revivedKeys.length > 0) {
            yield* Console.error(
              `note: member ${c.experimentId}: ${c.revivedKeys.length} row(s) are back as they were when they ran: ` +
                `their pipelines, superseded before, count again`
            )
          }
        }
      }
      const handle = yield* (Suite.start(suite, {
        registry,
        experiments: selected.map((m) => m.id),
        ...(limit === undefined ? {} : { limit })
      }) as Effect.Effect<Suite.SuiteRunHandle, ConfigError, Scope.Scope>)
      yield* Progress.track(handle, {
        total,
        quiet: args.quiet,
        ...Progress.stderrSink(),
        width: process.stderr.columns !== undefined && process.stderr.columns > 0 ? process.stderr.columns : 80,
        ...(args.progressInterval !== undefined ? { interval: args.progressInterval } : {})
      })
      const report = yield* handle.awaitSuite
      const st = yield* Store
      const metrics = yield* st.metrics({ runId: report.run.runId, pipelineId: null })
      return { report, metrics }
    })).pipe(
      Effect.withSpan("assay.command", {
        attributes: { "assay.command": "suite", "assay.config": path.basename(args.config), "assay.suite": loaded.id }
      })
    )
    const { metrics, report } = yield* tracked.pipe(
      Effect.provide(
        Runner.layer(input).pipe(
          Layer.provideMerge(Layer.mergeAll(
            storeLayer,
            Pool.layer(loaded.pools, { plugins: loaded.plugins.algorithms }),
            args.cacheLayer ?? CallCache.layerMemory
          )),
          Layer.merge(NodeProcessRunner.layer)
        )
      )
    )

    // 4. The report: the run's, a line per member, the metrics (member-scoped ones under their member).
    const runMetrics = metrics.filter((m) => m.name !== SKIPPED_METRIC && Suite.parseMemberMetric(m.name) === undefined)
    const byMember = new Map<string, Array<(typeof metrics)[number] & { shortName: string }>>()
    for (const m of metrics) {
      const parsed = Suite.parseMemberMetric(m.name)
      // the runner's per-member skip count and a member's budget stop are on the member's
      // line, not metrics of it
      if (parsed === undefined || parsed.name === SKIPPED_METRIC || parsed.name === FAILURES_REACHED_METRIC) continue
      const list = byMember.get(parsed.experimentId) ?? []
      list.push({ ...m, shortName: parsed.name })
      byMember.set(parsed.experimentId, list)
    }
    // members left out because their experiment file could not be loaded: listed with their
    // problem (the warning was printed once, before the run)
    const leftOut = loaded.leftOut ?? []
    if (args.summary === "json") {
      const json = report.toJSON()
      yield* Console.log(JSON.stringify({
        ...json,
        ...(leftOut.length === 0 ? {} : {
          members: [
            ...(json["members"] as ReadonlyArray<unknown>),
            ...leftOut.map((m) => ({ experimentId: m.id, label: m.label, selected: false, leftOut: m.problems.join("; ") }))
          ]
        }),
        root: loaded.output.root,
        layout: loaded.output.layout,
        metrics: Object.fromEntries(runMetrics.map((m) => [m.name, m.value])),
        memberMetrics: Object.fromEntries(
          [...byMember].map(([id, ms]) => [id, Object.fromEntries(ms.map((m) => [m.shortName, m.value]))])
        )
      }))
    } else {
      yield* Console.log(report.summary())
      for (const m of leftOut) {
        const name = oneLine(m.label === null ? m.id : `${m.id} (${m.label})`)
        yield* Console.log(`  ${name}: not selected, left out: ${oneLine(m.problems.join("; "))}`)
      }
      for (const [id, ms] of byMember) {
        yield* Console.log(
          `  ${id} metrics: ${ms.map((m) => `${m.label ?? m.shortName} ${Report.formatMetric(m.value, m.display)}`).join(" · ")}`
        )
      }
      if (runMetrics.length > 0) {
        yield* Console.log(
          `metrics: ${runMetrics.map((m) => `${m.label ?? m.name} ${Report.formatMetric(m.value, m.display)}`).join(" · ")}`
        )
      }
      yield* Console.log(`output: ${loaded.output.root} (${loaded.output.layout})`)
      yield* Console.log(`results: assay report ${shellQuote(loaded.output.root)}`)
    }
    const run = report.run
    if (run.status === "interrupted") {
      const why = run.stopReason === null ? undefined : deliberateStops[run.stopReason]
      if (why === undefined) {
        // a command to paste: any database URL in it without its password (as `run` prints it)
        const bare = pasteable(resumeCommandOf(args.argv))
        yield* Console.error(`resume with: ${bare.text}`)
        if (bare.removed) yield* Console.error(`  (${PASSWORD_HINT})`)
        return yield* Effect.fail(new ExitWith(ExitCode.Interrupted))
      }
      yield* Console.error(`run ${run.runId} stopped early (${why}); \`assay resume\` continues it`)
    }
    for (const m of report.members) {
      if (m.sourceError !== null) yield* Console.error(`error: member ${m.experimentId}: its source failed: ${m.sourceError}`)
    }
    const failed = (run.stats.byState.failed ?? 0) > 0 || run.repairFailures > 0 || report.sourceFailed
    if (failed) return yield* Effect.fail(new ExitWith(ExitCode.Failures))
  })

/**
 * A member whose rows changed since the root saw them: stored (current, not superseded)
 * pipelines whose local key its source no longer yields, or superseded ones whose row is back.
 */
interface ChangedRows {
  readonly experimentId: string
  /** Local keys of stored pipelines the source does not yield now (edited or removed rows). */
  readonly stale: number
  readonly staleKeys: ReadonlyArray<string>
  /** Local keys the source yields that the root does not hold (the edited rows' new digests among them). */
  readonly added: number
  readonly addedKeys: ReadonlyArray<string>
  /** Local keys of superseded pipelines the source yields again (rows restored as they were). */
  readonly revivedKeys: ReadonlyArray<string>
  /** Explicit keys (`keyField`) whose row's content changed since its pipeline ran. */
  readonly keyedEdits: ReadonlyArray<string>
}

const keyedEditsMessage = (c: ChangedRows): string =>
  `${c.keyedEdits.length} input row(s) with an explicit key changed content since they ran (keys ${
    c.keyedEdits.slice(0, 5).join(", ")
  }${c.keyedEdits.length > 5 ? ", …" : ""}): a key names one pipeline for life in a root, so the edited row cannot run ` +
  "beside its old result (--accept-changed-rows cannot keep both); restore the rows, give the changed rows new keys, " +
  "or use a new member id or another output root"

const changedRowsMessage = (c: ChangedRows): string =>
  `the member's source no longer yields ${c.stale} of its stored pipeline(s) (local keys ${c.staleKeys.slice(0, 5).join(", ")}${
    c.stale > 5 ? ", …" : ""
  }) and yields ${c.added} the root does not hold: input rows were edited or removed since they ran. ` +
  "Run as is, the old pipelines would stay in the member's totals beside the new ones; restore the rows, " +
  "use a new member id or another output root, or pass --accept-changed-rows once to keep them as superseded history " +
  "(the root remembers it)"

/**
 * The refusal a run owes for rows changed since they ran, or `undefined` when it may go on:
 * keyed rows edited in place are always refused (a key names one pipeline for life, so no
 * acceptance can keep both), other edited or removed rows unless `acceptChangedRows`. One
 * issue per member, at its `members[i]` path. Shared by `run`'s read-only pre-check and its
 * check after the root is opened.
 */
const changedRowsRefusal = (
  changed: ReadonlyArray<ChangedRows>,
  acceptChangedRows: boolean
): ConfigError | undefined => {
  const refusal = (
    rows: ReadonlyArray<ChangedRows>,
    message: (c: ChangedRows) => string,
    suggestion: string
  ) =>
    new ConfigError({
      message: rows.map((c) => `${memberPath(c.experimentId)}: ${message(c)}`).join("\n"),
      issues: rows.map((c) => ({ path: memberPath(c.experimentId), message: message(c), suggestion }))
    })
  const rekeyed = changed.filter((c) => c.keyedEdits.length > 0)
  if (rekeyed.length > 0) {
    return refusal(
      rekeyed,
      keyedEditsMessage,
      "restore the rows, give the changed rows new keys, or use a new member id or another output root"
    )
  }
  const edited = changed.filter((c) => c.stale > 0)
  if (edited.length > 0 && !acceptChangedRows) {
    return refusal(
      edited,
      changedRowsMessage,
      "restore the rows, use a new member id or another output root, or pass --accept-changed-rows"
    )
  }
  return undefined
}

/**
 * For each selected member that the root already holds pipelines of: the stored pipelines whose
 * local key its current source (read in full, limits ignored: a limit leaves rows unread, it
 * does not change them) no longer yields, leaving out the pipelines an earlier accepted change
 * superseded, and the superseded ones whose row is back. One keyset walk of the member's
 * stored pipelines and one pass over its source; nothing is written. A member the root holds
 * nothing of costs one count.
 */
const changedRows = (loaded: SuiteConfig.LoadedSuite, selected: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    const out: Array<ChangedRows> = []
    for (const m of loaded.members) {
      if (!selected.includes(m.id)) continue
      const view = yield* catalog.view(m.id)
      const superseded = new Set((catalog.superseded === undefined ? [] : yield* catalog.superseded(m.id)).map((s) => s.localKey))
      if ((yield* view.stats()).pipelines === 0 && superseded.size === 0) continue
      // each stored local key with the seed digest its pipeline ran from
      const stored = new Map<string, string>()
      let after: PipelineCursor | undefined
      for (;;) {
        const page: PipelinesPage = yield* view.pipelinesPage({ limit: 1000, ...(after === undefined ? {} : { after }) })
        for (const p of page.pipelines) if (p.experimentId === m.id && p.localKey !== null) stored.set(p.localKey, p.seedDigest)
        if (page.next === null) break
        after = page.next
      }
      const current = new Set<string>()
      const keyedEdits = new Set<string>()
      // a source that fails here fails that member in the run itself, as usual: no verdict now
      const read = yield* Effect.either(
        Stream.runForEach(m.experiment.pipelines(), (spec) =>
          Effect.sync(() => {
            const key = spec.member?.localKey ?? spec.key
            current.add(key)
            // a content address changes with the row; an explicit key keeps it while the seed changes
            const seed = stored.get(key)
            if (seed !== undefined && seed !== spec.seedDigest) keyedEdits.add(key)
          }))
      )
      if (read._tag === "Left") continue
      const staleKeys = [...stored.keys()].filter((k) => !current.has(k))
      const revivedKeys = [...superseded].filter((k) => current.has(k) && !stored.has(k))
      if (staleKeys.length === 0 && revivedKeys.length === 0 && keyedEdits.size === 0) continue
      const addedKeys = [...current].filter((k) => !stored.has(k) && !superseded.has(k))
      out.push({
        experimentId: m.id,
        stale: staleKeys.length,
        staleKeys,
        added: addedKeys.length,
        addedKeys,
        revivedKeys,
        keyedEdits: [...keyedEdits]
      })
    }
    return out
  })

/**
 * `assay validate -c SUITE`: prints the loaded suite's description (`--json`: as JSON).
 *
 * @since 0.5.0
 * @category commands
 */
export const validateSuite = (
  config: string,
  options: { readonly strictEnv: boolean; readonly json: boolean; readonly outputRoot?: string | undefined }
): Effect.Effect<void, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const { loaded } = yield* loadSuite(config, options).pipe(
      Effect.tapError((e) =>
        options.json
          ? Console.log(JSON.stringify({ valid: false, file: path.resolve(config), message: e.message, issues: e.issues }, null, 2))
          : Effect.void
      )
    )
    const root = yield* compareWithRoot(loaded)
    const fail = (e: ConfigError) =>
      Effect.zipRight(
        options.json
          ? Console.log(JSON.stringify({ valid: false, file: loaded.file, message: e.message, issues: e.issues, root }, null, 2))
          : Effect.void,
        Effect.fail(e)
      )
    if (root.issues.length > 0) {
      return yield* fail(new ConfigError({ message: root.issues.map((i) => `${i.path}: ${i.message}`).join("\n"), issues: root.issues }))
    }
    const described = loaded.describe() as Record<string, unknown>
    if (options.json) {
      yield* Console.log(JSON.stringify({ valid: true, file: loaded.file, ...described, root }, null, 2))
      return
    }
    yield* Console.log(ValidateText.suiteText(loaded))
    if (root.exists) {
      yield* Console.log(
        `existing root: ${root.matching.length} member(s) match (${root.matching.join(", ") || "none"}), ` +
          `${root.added.length} new (${root.added.join(", ") || "none"})`
      )
    }
    for (const w of loaded.warnings) yield* Console.error(w)
  })

/**
 * The refusals of a suite run on an existing root, checked on a read-only open (no lock, no
 * migration, nothing written) before the run opens anything for writing: a reused `--run-id`, a
 * selected member whose recorded database is gone, a member id differing only in case or a
 * changed member definition (as the registration words them), a keyed row edited in place, and
 * rows edited or removed without `--accept-changed-rows` (same messages as the run's own
 * checks). Returns the changed rows read (the run records their acceptance), or `undefined`
 * when there is no root, it belongs to another suite or layout (the store refuses those before
 * opening any database), or it cannot be read this way (an older format: the run's own checks,
 * after the open, decide then).
 */
const precheck = (
  loaded: SuiteConfig.LoadedSuite,
  selected: ReadonlyArray<string>,
  runId: string | undefined,
  acceptChangedRows: boolean
) =>
  Effect.gen(function*() {
    if (!(yield* SuiteStore.isSuiteRoot(loaded.output.root))) return undefined
    const read = yield* Effect.either(Effect.scoped(Effect.gen(function*() {
      const { catalog, store } = yield* SuiteStore.makeRead(loaded.output.root)
      if (catalog.suiteId !== loaded.id || catalog.layout !== loaded.output.layout) return undefined
      const existingRun = runId === undefined ? false : Option.isSome(yield* store.getRun(RunId.make(runId)))
      const registered = yield* catalog.members
      const chosen = loaded.members.filter((m) => selected.includes(m.id))
      const issues = registrationIssues(registered, chosen.map((m) => ({
        experimentId: m.id,
        definitionDigest: m.definitionDigest,
        definitionParts: m.definitionParts,
        previousDigests: m.previousDigests
      })))
      const changed = issues.length > 0 ? [] : yield* Effect.provideService(changedRows(loaded, selected), SuiteCatalog, catalog)
      return { existingRun, missing: catalog.missingDatabases ?? [], issues, changed }
    })))
    if (read._tag === "Left" || read.right === undefined) return undefined
    const { changed, existingRun, issues, missing } = read.right
    const gone = missing.find((x) => selected.includes(x.experimentId))
    if (gone !== undefined) {
      const path = memberPath(gone.experimentId)
      const message = missingMemberDbMessage(gone.experimentId, gone.file)
      return yield* new ConfigError({ message: `${path}: ${message}`, issues: [{ path, message }] })
    }
    if (existingRun) {
      return yield* configError("--run-id", `run id ${runId} already exists in ${loaded.output.root}; choose another or omit --run-id`)
    }
    if (issues.length > 0) {
      return yield* new ConfigError({ message: issues.map((i) => `${i.path}: ${i.message}`).join("\n"), issues })
    }
    const refused = changedRowsRefusal(changed, acceptChangedRows)
    if (refused !== undefined) return yield* refused
    return { changed }
  })

/**
 * What `validate` finds in the suite's existing output root, opened read-only (nothing is
 * created or migrated; no root, nothing to compare): the members whose registered definition
 * matches, the new ones, and the problems `run` would refuse (another suite id or layout, a
 * changed definition naming the changed parts, a member id differing only in case, a member
 * whose recorded database is gone).
 */
const compareWithRoot = (loaded: SuiteConfig.LoadedSuite) =>
  Effect.gen(function*() {
    const none = {
      exists: false,
      matching: [] as Array<string>,
      added: [] as Array<string>,
      changedRows: [] as Array<{ experimentId: string; keyedEdits: number; stale: number; added: number; restored: number }>,
      issues: [] as Array<ConfigIssue>
    }
    if (!(yield* SuiteStore.isSuiteRoot(loaded.output.root))) return none
    const opened = yield* Effect.either(Effect.scoped(Effect.gen(function*() {
      const { catalog } = yield* SuiteStore.makeRead(loaded.output.root)
      const members = yield* catalog.members
      // the rows `run` would check (members whose definition holds; only then are rows compared)
      const registered = new Map(members.map((r) => [r.experimentId, r]))
      const holding = loaded.members.filter((m) => {
        const r = registered.get(m.id)
        return r !== undefined && matchesRegistered(r, m)
      })
      const changed = yield* Effect.provideService(changedRows(loaded, holding.map((m) => m.id)), SuiteCatalog, catalog)
      return { suiteId: catalog.suiteId, layout: catalog.layout, members, changed, missing: catalog.missingDatabases ?? [] }
    })))
    if (opened._tag === "Left") {
      const e = opened.left
      return { ...none, exists: true, issues: e._tag === "ConfigError" ? [...e.issues] : [{ path: "output.root", message: e.message }] }
    }
    const { changed, layout, members, missing, suiteId } = opened.right
    const issues: Array<ConfigIssue> = []
    if (suiteId !== loaded.id) {
      issues.push({ path: "suite.id", message: `the output root ${loaded.output.root} belongs to suite "${suiteId}", not "${loaded.id}"` })
    }
    if (layout !== loaded.output.layout) {
      issues.push({ path: "output.layout", message: `the output root ${loaded.output.root} has layout ${layout}, not ${loaded.output.layout}` })
    }
    const known = new Map(members.map((m) => [idKey(m.experimentId), m]))
    const missingDb = new Map(missing.map((x) => [x.experimentId, x.file]))
    const matching: Array<string> = []
    const added: Array<string> = []
    for (const m of loaded.members) {
      const k = known.get(idKey(m.id))
      if (k === undefined) added.push(m.id)
      else if (k.experimentId !== m.id) {
        issues.push({
          path: memberPath(m.id),
          message: `the member id "${m.id}" differs only in letter case from the registered member "${k.experimentId}"`
        })
      } else if (!matchesRegistered(k, m)) issues.push({ path: memberPath(m.id), message: definitionChangeMessage(m.id, k, m) })
      else if (missingDb.has(m.id)) {
        // `run` selects every member of the file and refuses one whose recorded database is gone
        issues.push({ path: memberPath(m.id), message: missingMemberDbMessage(m.id, missingDb.get(m.id)!) })
      } else {
        // its input rows, as `run` checks them: a keyed row edited in place, or rows edited or
        // removed since they ran (refused by `run` without --accept-changed-rows)
        const c = changed.find((x) => x.experimentId === m.id)
        if (c !== undefined && c.keyedEdits.length > 0) {
          issues.push({ path: memberPath(m.id), message: keyedEditsMessage(c) })
        } else if (c !== undefined && c.stale > 0) {
          issues.push({ path: memberPath(m.id), message: changedRowsMessage(c) })
        } else matching.push(m.id)
      }
    }
    const rows = changed.map((c) => ({
      experimentId: c.experimentId,
      keyedEdits: c.keyedEdits.length,
      stale: c.stale,
      added: c.added,
      restored: c.revivedKeys.length
    }))
    return { exists: true, matching, added, changedRows: rows, issues }
  })
