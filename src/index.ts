/**
 * assay: run experiments as checkpointed, resumable pipelines over shared, rate-limited pools.
 *
 * The public API, re-exported by concept (`import { Pipeline, Runner, Task } from "assay"`).
 * `docs/tutorial.md` builds a first experiment step by step.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { MemoryStore, Pipeline, Pool, Runner, Task } from "assay"
 *
 * const double = Task.sync("double", (n: number) => n * 2)
 * const label = Task.sync("label", (n: number) => `#${n}`)
 *
 * // a chain whose types do not fit does not compile
 * const program = Runner.run(Pipeline.make("demo", double, label).map([1, 2, 3]))
 *
 * // the store and the pools are layers: a test swaps them without touching the job
 * const TestRunner = Runner.layer({ handleSignals: false }).pipe(
 *   Layer.provideMerge(Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))
 * )
 *
 * Effect.runPromise(program.pipe(Effect.provide(TestRunner))).then((report) => console.log(report.summary()))
 * ```
 *
 * @packageDocumentation
 * @since 0.1.0
 */

// domain
/** @since 0.1.0 */
export * as Codec from "./domain/Codec.js"
/** The `control` block of a pipeline: declared handoffs, rewinds and the loop budget. @since 0.1.0 */
export * as Control from "./domain/Control.js"
/** @since 0.1.0 */
export * as Errors from "./domain/Errors.js"
/** Control-flow directives a task returns (`Handoff.to/end/rewind/retryAll`) and the ledger row. @since 0.1.0 */
export * as Handoff from "./domain/Handoff.js"
/**
 * A payload with named, detached snapshots of application state (`HistoryArtifact.Class`,
 * `HistoryArtifact.register` for the `history-v1` codec). @since 0.4.0
 */
export * as HistoryArtifact from "./domain/HistoryArtifact.js"
/** Branded `RunId` and `PipelineId` (the store's two identities). @since 0.3.0 */
export * as Ids from "./domain/Ids.js"
/** @since 0.1.0 */
export * as Json from "./domain/Json.js"
/** @since 0.1.0 */
export * as Pipeline from "./domain/Pipeline.js"
/**
 * Evaluator blindness: what an `evaluator: true` task does not see (`blindContext`,
 * `withheldValues`, `redact`, `WITHHELD`). @since 0.7.0
 */
export * as Evaluator from "./domain/Evaluator.js"
/**
 * Token and cost accounting of model calls: price tables (USD per 1,000,000 tokens), pricing a
 * call (`priceFor`, `costOf`, `priceCall`) and estimating tokens (`estimateTokens`). @since 0.8.0
 */
export * as Pricing from "./domain/Pricing.js"
/** @since 0.1.0 */
export * as Records from "./domain/Records.js"
/** @since 0.1.0 */
export * as Resource from "./domain/Resource.js"
/** @since 0.1.0 */
export * as RetryPolicy from "./domain/RetryPolicy.js"
/** @since 0.1.0 */
export * as RunConfig from "./domain/RunConfig.js"
/** @since 0.1.0 */
export * as Shard from "./domain/Shard.js"
export * as Study from "./domain/Study.js"
/**
 * The numbers of a study comparison, pure and seeded: mean / median / type-7 quantiles,
 * two-stage percentile bootstrap intervals (`bootstrapMean`, `pairedBootstrap` with wins and
 * losses), the exact McNemar test, the "insufficient sample" rule, strict and
 * uncertainty-aware Pareto fronts and a weighted ranking. @since 0.6.0
 */
export * as Statistics from "./domain/Statistics.js"
/**
 * Suite identity: id rules (`checkId`), member pipeline ids (`memberPipelineId`,
 * `memberDigestOf`), `Membership` and `tagSpec`. @since 0.5.0
 */
export * as SuiteIdentity from "./domain/Suite.js"
/** @since 0.1.0 */
export * as Task from "./domain/Task.js"
/** @since 0.1.0 */
export type { AcquireOptions, AlgorithmInput, Lease, LeaseReport, Selector } from "./domain/Lease.js"
/** @since 0.1.0 */
export type { TaskContext } from "./domain/TaskContext.js"
/** The read-only store a task sees as `ctx.store` (writes go through the runner). @since 0.1.0 */
export type { TaskStore } from "./domain/TaskStore.js"
/** What a task may use of the run's bus (`ctx.bus`). @since 0.2.0 */
export type { BusMessage, TaskBus } from "./domain/TaskBus.js"

// services
/** @since 0.1.0 */
export * as AcquireAlgorithm from "./services/AcquireAlgorithm.js"
/** @since 0.1.0 */
export * as ArtifactBackend from "./services/ArtifactBackend.js"
/** @since 0.1.0 */
export * as Bus from "./services/Bus.js"
/** Streaming export of a store's rows (jsonl / json / csv). @since 0.1.0 */
export * as Export from "./services/Export.js"
/** `mergeReports(paths)`: shard stores merged, deduplicated by pipeline id. @since 0.1.0 */
export * as Merge from "./services/Merge.js"
/** @since 0.1.0 */
export * as MockLlm from "./services/MockLlm.js"
/** The monitoring picture of a store (what `serve` and `watch` show). @since 0.1.0 */
export * as Monitor from "./services/Monitor.js"
/** A pool declaration (`Pool.make`); also re-exports the service's `layer`. @since 0.1.0 */
export * as Pool from "./services/Pool.js"
/** The pools of a run, as a service (`Pools.Pools`, `Pools.layer`). @since 0.2.0 */
export * as Pools from "./services/Pools.js"
/** @since 0.1.0 */
export * as ProcessRunner from "./services/ProcessRunner.js"
/** The progress display of a run (`Progress.track`). @since 0.1.0 */
export * as Progress from "./services/Progress.js"
/** The report of one or more stores (what `assay report` prints). @since 0.1.0 */
export * as Report from "./services/Report.js"
/** @since 0.1.0 */
export * as Runner from "./services/Runner.js"
/** The read-only HTTP server of `assay serve` (JSON endpoints and the dashboard). @since 0.1.0 */
export * as StatsServer from "./services/StatsServer.js"
/**
 * The one owner of the process's stop signals (SIGINT, SIGTERM, SIGHUP): claims nest, the
 * newest gets them; `makeTest` for tests. @since 0.1.0
 */
export * as Signals from "./services/Signals.js"
/** @since 0.1.0 */
export * as Store from "./services/Store.js"
/**
 * The model-call cache: modes, keys and namespaces, the `CallCache` service (memory layer) and
 * a run's cache figures (`statsOf`). @since 0.7.0
 */
export * as CallCache from "./services/CallCache.js"
/**
 * The suite catalog port: members and their definition digests, per-run membership facts,
 * read views of one member or all (`SuiteCatalog` tag). @since 0.5.0
 */
export * as SuiteCatalog from "./services/SuiteCatalog.js"
/**
 * Suites at run time: `Suite.member` / `Suite.make`, round-robin admission of the members
 * (`Suite.pipelines`, facts per member in the catalog), `Suite.run` / `Suite.start` with a
 * report per member, member-scoped metric names. @since 0.5.0
 */
export * as Suite from "./services/Suite.js"
/**
 * A study's running mechanics inside its suite run: the trial window, usage meters, equal
 * per-trial budgets, stop conditions (`StudyControl.control`), the `TrialLedger` port and an
 * in-memory ledger. @since 0.6.0
 */
export * as StudyControl from "./services/StudyControl.js"
/**
 * The metrics of a study's trials: declared reducers over outputs or reported metrics, the
 * built-in runtime metrics, case keys that pair variants (`StudyMetrics.read`). @since 0.6.0
 */
export * as StudyMetrics from "./services/StudyMetrics.js"
/**
 * The comparison of a study's variants: intervals, paired differences against the baseline,
 * exact McNemar tests, Pareto candidates, the conclusion and its evidence
 * (`StudyCompare.compare`, `evidence`, `renderText`, `renderMarkdown`). @since 0.6.0
 */
export * as StudyCompare from "./services/StudyCompare.js"

// config: the experiment compiler (beside the layers; its code is in config/internal/)
/**
 * The experiment file's Schema (`ExperimentFile`, `ExperimentDefinition`) and
 * `defineExperiment` for TypeScript experiments.
 *
 * @since 0.1.0
 */
export * as Config from "./config/Config.js"
/**
 * Loading and checking experiments (`Experiment.load(file)`, `Experiment.fromDefinition`).
 *
 * @since 0.1.0
 */
export * as Experiment from "./config/Experiment.js"
/**
 * The suite file: `SuiteConfig.load(file)` (members loaded as experiments, shared pools,
 * bindings, definition digests), `SuiteConfig.isSuiteFile`, `defineSuite`. @since 0.5.0
 */
export * as SuiteConfig from "./config/Suite.js"
/**
 * `export default defineSuite({...})`: the default export of a TypeScript suite file (the
 * same function as `SuiteConfig.defineSuite`; it only types the definition). @since 0.5.0
 */
export { defineSuite } from "./config/Suite.js"
export * as StudyConfig from "./config/Study.js"
export { defineStudy } from "./config/Study.js"

// layers
/** @since 0.1.0 */
export * as ArtifactBackends from "./layers/ArtifactBackends.js"
/** @since 0.1.0 */
export * as MemoryStore from "./layers/MemoryStore.js"
/**
 * OpenTelemetry span export (OTLP/HTTP JSON) from the standard `OTEL_*` variables or explicit
 * settings. @since 0.1.0
 */
export * as Otel from "./layers/Otel.js"
/**
 * Running a program as the process's main with assay's exit codes (`NodeMain.runMain`).
 *
 * @since 0.1.0
 */
export * as NodeMain from "./layers/NodeMain.js"
/**
 * How user modules (TypeScript/JavaScript experiments, plugins) are imported; the CLI provides
 * its own. @since 0.1.0
 */
export * as ModuleLoader from "./layers/ModuleLoader.js"
/** @since 0.1.0 */
export * as NodeProcessRunner from "./layers/NodeProcessRunner.js"
/** Plugin loading (`plugins` of an experiment): tasks, algorithms, codecs. @since 0.1.0 */
export * as Plugins from "./layers/Plugins.js"
/**
 * Global pools on PostgreSQL: the `Pools` service with capacity, quotas and health shared by
 * every process of a deployment (`PgPools.layer`, `PgPools.layerUrl`, `PgPools.migrate`).
 *
 * @since 0.7.0
 */
export * as PgPools from "./layers/PgPools.js"
/** @since 0.1.0 */
export * as SqliteStore from "./layers/SqliteStore.js"
/** The call cache in an SQLite file: a run's store or a shared cache database. @since 0.7.0 */
export * as SqliteCallCache from "./layers/SqliteCallCache.js"
/**
 * The store of a suite root, `combined` or `byExperiment` (`SuiteStore.layer` for a run,
 * `SuiteStore.layerRead` for report/watch/serve/export, `SuiteStore.isSuiteRoot`). @since 0.5.0
 */
export * as SuiteStore from "./layers/SuiteStore.js"
/**
 * Opening stores by name as the CLI does (a path, a `file:` URI or a plugin URI):
 * `StoreResolver.layerOpener({ registry, baseDir })` is the `StoreOpener` that `Export`,
 * `Report` and `Merge` read through; `StoreResolver.layer(spec)` opens one store as a layer.
 *
 * @since 0.1.0
 */
export * as StoreResolver from "./layers/StoreResolver.js"

// built-in tasks and sources
/** echo, delay, flaky, boom, leaky, simulateLlm. @since 0.1.0 */
export * as Mock from "./tasks/Mock.js"
/** @since 0.1.0 */
export * as Fanout from "./tasks/Fanout.js"
/** `shellRun(command, options)`: a subprocess per item, its process group reaped. @since 0.1.0 */
export * as ShellRun from "./tasks/ShellRun.js"
/** `writeJsonl(path, { mode })`. @since 0.1.0 */
export * as WriteJsonl from "./tasks/WriteJsonl.js"
/** `rangeSource(n)`, `jsonlSource(path, { limit })`. @since 0.1.0 */
export * as Sources from "./tasks/Sources.js"
/** The OpenAI-compatible chat task. @since 0.1.0 */
export * as Chat from "./tasks/Chat.js"
/** The blind LLM-as-judge task with a versioned rubric. @since 0.7.0 */
export * as Judge from "./tasks/Judge.js"
