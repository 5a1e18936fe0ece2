/**
 * The spam evaluation as an Effect program: the same job as the example's config file,
 * written in TypeScript.
 *
 * It takes the endpoints from `SPAM_EVAL_ENDPOINTS` (a JSON array of `{ id, baseUrl, model,
 * apiKeyEnv, capacity }`; the key is read from the named environment variable, never from
 * the file) or, without it, starts the mock server in-process with its three preset endpoints
 * (fast but flaky, slow but steady, rate-limited). It puts them in a pool `llm`, evaluates a
 * stratified seeded sample of the SpamAssassin corpus through the pipeline of
 * `./pipeline.ts` with a SQLite store (default `runs/spam-eval/program.db`, so a second run
 * resumes), prints a report with the accuracy figures and per-endpoint attempts, retries and
 * 429s, and writes one JSON line per email to `runs/spam-eval/program-results.jsonl`. Its
 * defaults differ from the config's (`state.db`, `results.jsonl`): the program's pipeline
 * ids are its own (keyed by content, not by the file's `id` field), so sharing one store
 * would hold every email twice and each would overwrite the other's results.
 *
 * Run: `npx tsx examples/spam-eval/program.ts [--sample 1000] [--seed 0] [--concurrency 16]
 * [--algorithm wait] [--store runs/spam-eval/program.db] [--results runs/spam-eval/program-results.jsonl]`
 * (or the env vars `SPAM_EVAL_SAMPLE`, `SPAM_EVAL_SEED`, `SPAM_EVAL_CONCURRENCY`).
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Console, Duration, Effect, Fiber, Layer, Option, Schedule, Stream } from "effect"
import * as NodePath from "node:path"
import { type AlgorithmInput, type CallCache, Chat, Errors, type Ids, MockLlm, NodeMain, Pool, Resource, Runner, SqliteStore, Store } from "assay"
import { corpusDirectory, loadIndex, sampleStratified } from "./corpus.js"
import { addScore, emptyConfusion, type EmailSeed, makeLiveMetrics, makePipeline, metricsOf, type Score, seedOf, type SpamPipelineOptions } from "./pipeline.js"

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/**
 * One endpoint of the pool: resource `id`, OpenAI base URL, model, the key (`apiKey`, or
 * `apiKeyEnv`, an environment variable's name) and the resource's `capacity` (concurrent
 * requests).
 *
 * @since 0.1.0
 * @category models
 */
export interface EndpointSpec {
  readonly id: string
  readonly baseUrl: string
  readonly model: string
  readonly apiKey?: string | undefined
  readonly apiKeyEnv?: string | undefined
  readonly capacity: number
}

/**
 * Options of {@link runSpamEval}. Defaults: sample 1,000, seed 0, concurrency 16, algorithm
 * `"wait"`, store `runs/spam-eval/program.db`, results `runs/spam-eval/program-results.jsonl`, the
 * in-process mock with its presets (`mockProfile` replaces them), no progress display.
 * `storeLayer` replaces the SQLite store (e.g. `MemoryStore.layer()`); `chat` passes options
 * to the `classify` task.
 *
 * @since 0.1.0
 * @category models
 */
export interface SpamEvalOptions {
  readonly sample?: number | undefined
  readonly seed?: number | undefined
  readonly concurrency?: number | undefined
  readonly algorithm?: AlgorithmInput | undefined
  /** The pool's circuit breaker (`Pool.PoolOptions["breaker"]`); `false` turns it off. */
  readonly breaker?: Pool.PoolOptions["breaker"] | undefined
  readonly storePath?: string | undefined
  readonly storeLayer?: Layer.Layer<Store.Store, unknown> | undefined
  readonly resultsPath?: string | undefined
  readonly endpoints?: ReadonlyArray<EndpointSpec> | undefined
  readonly mockProfile?: MockLlm.MockProfile | undefined
  readonly progress?: boolean | undefined
  readonly label?: string | undefined
  /** Options of the `classify` (chat) task, e.g. its retry policy or `cache: true`. */
  readonly chat?: SpamPipelineOptions | undefined
  /**
   * Where the call cache lives (e.g. `SqliteCallCache.layer({ filename, shared: true })`) when
   * `chat.cache` turns it on; default: one in memory for this run.
   */
  readonly cacheLayer?: Layer.Layer<CallCache.CallCache, unknown> | undefined
}

/**
 * One line of `results.jsonl`: the email, its gold label, the pipeline's state, and either
 * the prediction (`predicted`, `correct`, `resourceId`) or the failure (`errorClass`,
 * `error`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ResultRow {
  readonly id: string
  readonly group: string
  readonly gold: string
  readonly state: string
  readonly predicted: string | null
  readonly correct: boolean | null
  readonly resourceId: string | null
  readonly attempts: number
  readonly errorClass: string | null
  readonly error: string | null
}

/**
 * Per-endpoint figures from the store's attempts of the `classify` task: attempts, successes,
 * retries (failed attempts the policy retried), 429s (`rate_limit`), other failures by class.
 *
 * @since 0.1.0
 * @category models
 */
export interface EndpointFigures {
  readonly resourceId: string
  readonly attempts: number
  readonly succeeded: number
  readonly retries: number
  readonly rateLimited: number
  readonly failuresByClass: Readonly<Record<string, number>>
}

/**
 * What {@link runSpamEval} returns: the run report, one {@link ResultRow} per sampled email
 * (sample order), the accuracy figures computed from those rows, and per-endpoint figures.
 *
 * @since 0.1.0
 * @category models
 */
export interface SpamEvalReport {
  readonly run: Runner.RunReport
  readonly results: ReadonlyArray<ResultRow>
  readonly metrics: ReturnType<typeof metricsOf>
  readonly endpoints: ReadonlyArray<EndpointFigures>
  readonly resultsPath: string
}

// ---------------------------------------------------------------------------------------------
// The program
// ---------------------------------------------------------------------------------------------

const capacities: Record<string, number> = { fast: 8, steady: 4, limited: 5 }

const resourcesOf = (endpoints: ReadonlyArray<EndpointSpec>) =>
  endpoints.map((e) =>
    Resource.make("llm", {
      id: e.id,
      capacity: e.capacity,
      options: {
        baseUrl: e.baseUrl,
        model: e.model,
        ...(e.apiKey !== undefined ? { apiKey: e.apiKey } : {}),
        ...(e.apiKeyEnv !== undefined ? { apiKeyEnv: e.apiKeyEnv } : {})
      },
      factory: Chat.chatClientFactory()
    })
  )

const resourceOfLease = (leaseId: string): string => {
  const m = /^[^/]+\/(.+)#\d+$/.exec(leaseId)
  return m === null ? leaseId : m[1]!
}

const loadResults = (seeds: ReadonlyArray<EmailSeed>, ids: ReadonlyArray<Ids.PipelineId>) =>
  Effect.gen(function*() {
    const store = yield* Store.Store
    const rows: Array<ResultRow> = []
    for (let i = 0; i < seeds.length; i++) {
      const seed = seeds[i]!
      const record = yield* store.getPipeline(ids[i]!)
      if (Option.isNone(record)) {
        rows.push({
          id: seed.id,
          group: seed.group,
          gold: seed.label,
          state: "missing",
          predicted: null,
          correct: null,
          resourceId: null,
          attempts: 0,
          errorClass: null,
          error: null
        })
        continue
      }
      const r = record.value
      let scoreRow: Score | undefined
      if (r.state === "succeeded") {
        const art = yield* store.getArtifact(r.pipelineId, r.nTasksTotal - 1)
        if (Option.isSome(art) && art.value.payload !== undefined && art.value.payload !== null) {
          scoreRow = JSON.parse(new TextDecoder().decode(art.value.payload)) as Score
        }
      }
      rows.push({
        id: seed.id,
        group: seed.group,
        gold: seed.label,
        state: r.state,
        predicted: scoreRow?.predicted ?? null,
        correct: scoreRow?.correct ?? null,
        resourceId: scoreRow?.resourceId ?? null,
        attempts: r.attemptsTotal,
        errorClass: r.errorClass,
        error: r.errorMessage
      })
    }
    return rows
  })

const endpointFigures = (pipelineIds: ReadonlySet<string>) =>
  Effect.gen(function*() {
    const store = yield* Store.Store
    const by = new Map<string, { attempts: number; succeeded: number; retries: number; failuresByClass: Record<string, number> }>()
    yield* Stream.runForEach(store.streamAttempts(), (a) =>
      Effect.sync(() => {
        if (a.taskName !== "classify" || !pipelineIds.has(a.pipelineId)) return
        const id = a.leaseIds[0] === undefined ? "(no lease)" : resourceOfLease(a.leaseIds[0])
        const f = by.get(id) ?? { attempts: 0, succeeded: 0, retries: 0, failuresByClass: {} }
        f.attempts++
        if (a.outcome === "succeeded") f.succeeded++
        else {
          const c = a.errorClass ?? "unknown"
          f.failuresByClass[c] = (f.failuresByClass[c] ?? 0) + 1
          if ((a.decision as { retry?: unknown } | null)?.retry === true) f.retries++
        }
        by.set(id, f)
      }))
    return [...by.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([resourceId, f]): EndpointFigures => ({
      resourceId,
      ...f,
      rateLimited: f.failuresByClass["rate_limit"] ?? 0
    }))
  })

/**
 * Runs the whole evaluation (see the module header) and returns its {@link SpamEvalReport}.
 * Needs the Node platform (`NodeContext.layer`). Fails with the run's errors, a
 * `ConfigError`, the corpus' `CorpusError`, or the mock server's `ServeError`.
 *
 * @since 0.1.0
 * @category program
 */
/**
 * The program's default store and results files (relative to the working directory). They
 * are not the config's (`runs/spam-eval/state.db`, `results.jsonl`): the program keys its
 * pipelines by content, the config by the sample's `id`, so one shared store would hold every
 * email twice.
 *
 * @since 0.1.0
 * @category models
 */
export const defaultPaths = {
  store: "runs/spam-eval/program.db",
  results: "runs/spam-eval/program-results.jsonl"
} as const

export const runSpamEval = (options: SpamEvalOptions = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const sample = options.sample ?? 1000
    const seed = options.seed ?? 0
    const storePath = options.storePath ?? defaultPaths.store
    const resultsPath = options.resultsPath ?? defaultPaths.results
    // endpoints: given, or the in-process mock's
    let endpoints = options.endpoints
    if (endpoints === undefined) {
      const profile = options.mockProfile ?? (yield* MockLlm.decodeProfile({
        seed: 0,
        endpoints: MockLlm.presetEndpoints(3).map((e) => MockLlm.EndpointProfile.make(e))
      }))
      const server = yield* MockLlm.serve({ profile })
      endpoints = server.endpoints.map((e) => ({
        id: e.name,
        baseUrl: e.baseUrl,
        model: e.model,
        apiKey: `demo-key-${e.name}`,
        capacity: capacities[e.name] ?? 4
      }))
    }
    // the sample
    const dataDir = yield* corpusDirectory
    const entries = sampleStratified(yield* loadIndex, { size: sample, seed })
    const seeds = entries.map((e) => seedOf(e, dataDir))
    const template = makePipeline(options.chat)
    const ids = seeds.map((s) => template.bind(s).pipelineId)
    // the store
    if (options.storeLayer === undefined) yield* fs.makeDirectory(NodePath.dirname(storePath), { recursive: true })
    const storeLayer = options.storeLayer ?? SqliteStore.layer({ filename: storePath })
    const poolLayer = Pool.layer([
      Pool.make("llm", resourcesOf(endpoints), { algorithm: options.algorithm ?? "wait", breaker: options.breaker })
    ])
    const env = Layer.provideMerge(
      Runner.layer({ concurrency: options.concurrency ?? 16, label: options.label ?? "spam-eval", store: storePath }),
      options.cacheLayer === undefined
        ? Layer.merge(storeLayer, poolLayer)
        : Layer.mergeAll(storeLayer, poolLayer, options.cacheLayer)
    )
    return yield* Effect.gen(function*() {
      const live = yield* makeLiveMetrics
      const runner = yield* Runner.Runner
      const progress = options.progress === true
        ? yield* Effect.fork(
          Effect.gen(function*() {
            const s = yield* runner.stats
            const m = metricsOf(yield* live.current)
            yield* Console.error(
              `[spam-eval] ${s.counters.succeeded + s.counters.failed}/${seeds.length} done, ` +
                `${s.inFlight} in flight, ${s.delayed} waiting to retry, ${s.counters.retries} retries, ` +
                `accuracy ${(m.accuracy * 100).toFixed(1)}% of ${m.evaluated}`
            )
          }).pipe(Effect.repeat(Schedule.spaced(Duration.seconds(2))))
        )
        : undefined
      const run = yield* runner.run(template.map(seeds), { onPipelineFinished: live.onPipelineFinished, resume: true })
      if (progress !== undefined) yield* Fiber.interrupt(progress)
      const results = yield* loadResults(seeds, ids)
      let confusion = emptyConfusion
      for (const r of results) {
        if (r.predicted !== null) confusion = addScore(confusion, { gold: r.gold as Score["gold"], predicted: r.predicted as Score["predicted"] })
        else if (r.errorClass === "invalid") confusion = { ...confusion, invalid: confusion.invalid + 1 }
        else confusion = { ...confusion, failed: confusion.failed + 1 }
      }
      const endpointsFigures = yield* endpointFigures(new Set(ids))
      yield* fs.makeDirectory(NodePath.dirname(resultsPath), { recursive: true })
      const tmp = `${resultsPath}.tmp`
      yield* fs.writeFileString(tmp, results.map((r) => JSON.stringify(r)).join("\n") + (results.length > 0 ? "\n" : ""))
      yield* fs.rename(tmp, resultsPath)
      return { run, results, metrics: metricsOf(confusion), endpoints: endpointsFigures, resultsPath } satisfies SpamEvalReport
    }).pipe(Effect.provide(env))
  }))

/**
 * A human report of a {@link SpamEvalReport}: run status and duration, the accuracy figures,
 * and one line per endpoint with attempts, successes, retries and 429s.
 *
 * @since 0.1.0
 * @category program
 */
export const formatReport = (r: SpamEvalReport): string => {
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`
  const m = r.metrics
  const lines = [
    `spam-eval: run ${r.run.runId} ${r.run.status} in ${(r.run.durationMs / 1000).toFixed(1)} s`,
    `  emails ${r.results.length}: evaluated ${m.evaluated}, no label ${m.invalid}, failed ${m.failed}`,
    `  accuracy ${pct(m.accuracy)}  precision ${pct(m.precision)}  recall ${pct(m.recall)}  F1 ${m.f1.toFixed(3)}`,
    "  endpoint      attempts  ok     retries  429s   other failures"
  ]
  for (const e of r.endpoints) {
    const other = Object.entries(e.failuresByClass).filter(([c]) => c !== "rate_limit").map(([c, n]) => `${c} ${n}`).join(", ")
    lines.push(
      `  ${e.resourceId.padEnd(13)} ${String(e.attempts).padEnd(9)} ${String(e.succeeded).padEnd(6)} ${
        String(e.retries).padEnd(8)
      } ${String(e.rateLimited).padEnd(6)} ${other === "" ? "-" : other}`
    )
  }
  lines.push(`  results: ${r.resultsPath}`)
  return lines.join("\n")
}

const flag = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? process.argv[i + 1] : undefined
}

const intOption = (name: string, env: string, fallback: number): Effect.Effect<number, Errors.ConfigError> => {
  const raw = flag(name) ?? process.env[env]
  if (raw === undefined) return Effect.succeed(fallback)
  const n = Number(raw)
  return Number.isInteger(n) && n >= 0
    ? Effect.succeed(n)
    : Effect.fail(new Errors.ConfigError({ message: `--${name}: expected a non-negative integer, got ${raw}` }))
}

const endpointsFromEnv = (): Effect.Effect<ReadonlyArray<EndpointSpec> | undefined, Errors.ConfigError> => {
  const raw = process.env["SPAM_EVAL_ENDPOINTS"]
  if (raw === undefined || raw.trim() === "") return Effect.succeed(undefined)
  return Effect.try({
    try: () => JSON.parse(raw) as ReadonlyArray<EndpointSpec>,
    catch: () => new Errors.ConfigError({ message: "SPAM_EVAL_ENDPOINTS is not a JSON array of endpoints" })
  })
}

const main = Effect.gen(function*() {
  const sample = yield* intOption("sample", "SPAM_EVAL_SAMPLE", 1000)
  const seed = yield* intOption("seed", "SPAM_EVAL_SEED", 0)
  const concurrency = yield* intOption("concurrency", "SPAM_EVAL_CONCURRENCY", 16)
  const endpoints = yield* endpointsFromEnv()
  const report = yield* runSpamEval({
    sample,
    seed,
    concurrency,
    endpoints,
    algorithm: flag("algorithm") ?? "wait",
    storePath: flag("store"),
    resultsPath: flag("results"),
    progress: true
  })
  yield* Console.log(formatReport(report))
})

if (process.argv[1] !== undefined && import.meta.url === `file://${NodePath.resolve(process.argv[1])}`) {
  NodeMain.runMain(main.pipe(Effect.provide(NodeContext.layer)))
}
