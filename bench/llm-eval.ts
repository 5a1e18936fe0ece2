/**
 * LLM evaluation benchmark: the spam evaluation of 2,000 SpamAssassin emails (stratified,
 * seed 0) through the pool `llm` against the mock server, once per acquire algorithm
 * (`wait`, `backoff`, `leastBusy`), in one run. Each algorithm gets a fresh mock server (fresh
 * token buckets) and a fresh in-memory store.
 *
 * Fixed profile: three endpoints whose binding limit is a per-key token bucket (`a` 40 req/s,
 * `b` 30 req/s, `c` 30 req/s, bursts equal to the rate; 429 with `Retry-After` = seconds until
 * the next token, at least 1), latency lognormal with median 20 ms / p95 60 ms, no background
 * errors, clean answers. Each resource allows 6 concurrent leases; the runner runs 24 attempts
 * at once; the `classify` task retries up to 10 attempts.
 *
 * The capacity on offer is the sum of the rates (100 requests/s). Printed JSON line per
 * algorithm:
 * - `makespan_s`: run duration; `throughput_per_s`: emails finished per second;
 * - `served`: requests answered 200 (from the mock's request log); `utilisation` = served /
 *   (capacity × makespan);
 * - `rate_429`: 429 answers / all requests; `requests`;
 * - `p95_ms`: 95th percentile of pipeline latency (start to end of each pipeline, from the
 *   store); `failed`: pipelines that did not succeed; `accuracy`.
 *
 * Run: `npx tsx bench/llm-eval.ts [--sample 2000] [--algorithms wait,backoff,leastBusy,adaptive]`
 *
 * `--scenario storm` (issue 20 §8) instead runs 1,000 emails against one endpoint (capacity
 * 16, concurrency 16, latency median 40 ms / p95 120 ms) with 5 % background 5xx and an error
 * storm (503 with probability 0.7) from 4 s to 9 s, once with the pool's circuit breaker off
 * (what assay did before) and once with its defaults, side by side. Printed per variant:
 * `storm_requests` (requests that arrived inside the storm window), `storm_5xx` (5xx answers
 * inside it), `requests`, `failed`, `makespan_s`, `cpu_s` (process CPU time of the variant)
 * and `cpu_ratio` / `wall_ratio` against the first variant.
 *
 * `--scenario cache` (issue 18 §1) runs the classification calls of the spam evaluation
 * (`--sample` emails, default 2,000: their prompts made once, untimed, by the pipeline's `load`
 * and `prompt`) twice through one `chat` task with `cache: true` (see below for the rest);
 * `--scenario cache-pipeline` runs the whole spam evaluation of `--sample` emails twice with the
 * call cache on (`chat` with `cache: true`, a shared SQLite cache file), each
 * run in a fresh in-memory store, against one mock (the endpoints' URLs are part of the key)
 * with the endpoints and limits of the default scenario (`leastBusy`): the first run asks every email; the rerun must ask nothing
 * and be at least 20 × faster. Printed per run: `run` (`first`, `rerun`), `requests` (what
 * the mock received), `cache_hits` / `cache_misses` and `tokens_saved` (the run's
 * `run.finished` figures), `makespan_s`, `cpu_s` (process CPU time), `failed`, `accuracy`, and
 * on the rerun `wall_ratio` / `cpu_ratio` (first ÷ rerun) and the load average.
 *
 * `--scenario hidden` (issue 18's benchmark over real HTTP): the spam evaluation of `--sample`
 * emails (default 2,000) against three `assay mock-llm` servers started as child processes on
 * 127.0.0.1 (`bin/assay`: run `npm run build` first), one endpoint each, whose limits assay's
 * configuration does not know (32 leases per resource, runner concurrency 96, the `classify`
 * task retrying up to 20 attempts, 250 ms base, ×2, 10 s cap, full jitter), as
 * `bench/adaptive.ts` does in simulated time:
 * - `a`: 20 requests/s per key (1,200/min), latency median 400 ms, OpenAI-style
 *   `x-ratelimit-*` headers on every answer and a 429 with `retry-after-ms`. With such headers
 *   the mock's bucket holds a minute of requests (1,200), as a provider's per-minute limit does,
 *   which a 2,000-email run would take at once: so before the run the bench **drains** it (as if
 *   a teammate had spent the key's minute: requests in rounds of 300 until one is refused,
 *   `drain_requests` in the output, left out of every figure), and the key then offers its
 *   refill, 20 requests/s, plus what refilled between the drain's first 429 and the run's
 *   first request, less the drain's own answers after that 429 (counted in the capacity on
 *   offer). `a` starts first, the others once it is drained, so
 *   `c`'s halving still falls 20 s after its own start;
 * - `b`: 10 requests/s (600/min), latency median 250 ms, a 429 with `Retry-After` in seconds;
 * - `c`: 15 requests/s (900/min) **halving to 7.5 at 20 s** after its start, latency median
 *   600 ms, a bare 429.
 * Latency p95 = 1.64 × median (the simulator's lognormal). Once per algorithm of
 * `--algorithms` (default `wait,leastBusy,adaptive`) with fresh servers (fresh buckets, the
 * halving 20 s after their start), the call cache on (`cache: true`, one SQLite file per
 * algorithm), then a rerun of the last algorithm against the same servers and cache file.
 * Printed per algorithm: `requests`, `rate_429`, `failed`, `utilisation` (answers / the
 * capacity on offer from the first request's arrival to the last answer, the bucket's burst
 * not counted), `utilisation_busy` (the same up to the arrival of the request whose answer was
 * the 90th percentile of answers), `per_endpoint` (utilisation over the busy part and 429
 * share), `wall_s` (the run's duration), `cpu_s` (this process), `servers_cpu_s` (the three
 * mock processes), `loop_lag_ms` (this process's event-loop delay, p50 / p99 / max, from
 * `perf_hooks`), the load average before and after; then the rerun: `requests` (0 expected),
 * `wall_s`, `speedup` (first ÷ rerun wall). `--job chat` runs the classification calls alone
 * instead (one `chat` per pipeline over the prompts of the sample, made untimed before the
 * servers start, as `--scenario cache` does): less of the client's CPU per call, so that a
 * loaded machine still makes the demand the endpoints' limits refuse; it also prints `pressed`
 * (the share of the busy part's seconds in which acquires waited for a lease: demand above
 * what the algorithm admitted) and, with `--trace`, the pool each second on stderr (acquires
 * waiting, each resource's leases and `adaptive` state).
 */
import type { FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Console, Data, Effect, Fiber, Layer } from "effect"
import * as ChildProcess from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import { monitorEventLoopDelay } from "node:perf_hooks"
import * as Readline from "node:readline"
import * as MemoryStore from "../src/layers/MemoryStore.js"
import * as SqliteCallCache from "../src/layers/SqliteCallCache.js"
import * as MockLlm from "../src/services/MockLlm.js"
import { runSpamEval } from "../examples/spam-eval/program.js"
import { corpusDirectory, loadIndex, sampleStratified } from "../examples/spam-eval/corpus.js"
import { load, prompt, seedOf } from "../examples/spam-eval/pipeline.js"
import * as Pipeline from "../src/domain/Pipeline.js"
import * as Resource from "../src/domain/Resource.js"
import * as Pool from "../src/services/Pool.js"
import * as Runner from "../src/services/Runner.js"
import * as Chat from "../src/tasks/Chat.js"

const argSample = process.argv.indexOf("--sample")
const SAMPLE = argSample >= 0 ? Number(process.argv[argSample + 1]) : 2000
const RATES = { a: 40, b: 30, c: 30 } as const
const CAPACITY_RPS = RATES.a + RATES.b + RATES.c
const argAlgorithms = process.argv.indexOf("--algorithms")
const ALGORITHMS: ReadonlyArray<string> = argAlgorithms >= 0
  ? process.argv[argAlgorithms + 1]!.split(",")
  : ["wait", "backoff", "leastBusy"]

const one = (algorithm: string, resultsDir: string) =>
  Effect.scoped(Effect.gen(function*() {
    const profile = yield* MockLlm.decodeProfile({
      seed: 0,
      endpoints: Object.entries(RATES).map(([name, rps]) => ({
        name,
        rps,
        burst: rps,
        latency: { medianMs: 20, p95Ms: 60 }
      }))
    })
    const server = yield* MockLlm.serve({ profile })
    const report = yield* runSpamEval({
      sample: SAMPLE,
      seed: 0,
      concurrency: 24,
      algorithm,
      storeLayer: MemoryStore.layer(),
      resultsPath: NodePath.join(resultsDir, `${algorithm}.jsonl`),
      endpoints: server.endpoints.map((e) => ({
        id: e.name,
        baseUrl: e.baseUrl,
        model: e.model,
        apiKey: `bench-key-${e.name}`,
        capacity: 6
      })),
      chat: { retry: { maxAttempts: 10, base: "200 millis", cap: "5 seconds" } }
    })
    const log = yield* server.log
    const served = log.filter((e) => e.status === 200).length
    const rateLimited = log.filter((e) => e.status === 429).length
    const makespanS = report.run.durationMs / 1000
    const line = {
      bench: "llm-eval",
      algorithm,
      emails: report.results.length,
      makespan_s: Number(makespanS.toFixed(2)),
      throughput_per_s: Number((report.results.length / makespanS).toFixed(2)),
      capacity_rps: CAPACITY_RPS,
      served,
      requests: log.length,
      utilisation: Number((served / (CAPACITY_RPS * makespanS)).toFixed(3)),
      rate_429: Number((rateLimited / Math.max(1, log.length)).toFixed(3)),
      p95_ms: Math.round(report.run.stats.latencyMs?.p95 ?? 0),
      failed: report.results.filter((r) => r.state !== "succeeded").length,
      accuracy: Number(report.metrics.accuracy.toFixed(4))
    }
    yield* Console.log(JSON.stringify(line))
  }))

const argScenario = process.argv.indexOf("--scenario")
const SCENARIO = argScenario >= 0 ? process.argv[argScenario + 1] : "algorithms"
const STORM = { fromS: 4, toS: 9, rate: 0.7 } as const

const stormRun = (variant: "breaker_off" | "breaker_on", resultsDir: string) =>
  Effect.scoped(Effect.gen(function*() {
    const profile = yield* MockLlm.decodeProfile({
      seed: 0,
      endpoints: [{
        name: "ep",
        latency: { medianMs: 40, p95Ms: 120 },
        errorRate: 0.05,
        storms: [{ fromS: STORM.fromS, toS: STORM.toS, status: 503, rate: STORM.rate }]
      }]
    })
    const server = yield* MockLlm.serve({ profile })
    const cpu0 = process.cpuUsage()
    const report = yield* runSpamEval({
      sample: SAMPLE_STORM,
      seed: 0,
      concurrency: 16,
      algorithm: "wait",
      breaker: variant === "breaker_off" ? false : undefined,
      storeLayer: MemoryStore.layer(),
      resultsPath: NodePath.join(resultsDir, `${variant}.jsonl`),
      endpoints: server.endpoints.map((e) => ({ id: e.name, baseUrl: e.baseUrl, model: e.model, apiKey: "bench-key", capacity: 16 })),
      chat: { retry: { maxAttempts: 10, base: "200 millis", cap: "5 seconds" } }
    })
    const cpu = process.cpuUsage(cpu0)
    const log = yield* server.log
    const inStorm = log.filter((e) => e.offsetMs >= STORM.fromS * 1000 && e.offsetMs < STORM.toS * 1000)
    return {
      bench: "llm-eval.storm",
      variant,
      emails: report.results.length,
      failed: report.results.filter((r) => r.state !== "succeeded").length,
      requests: log.length,
      storm_requests: inStorm.length,
      storm_5xx: inStorm.filter((e) => (e.status ?? 0) >= 500).length,
      all_5xx: log.filter((e) => (e.status ?? 0) >= 500).length,
      makespan_s: Number((report.run.durationMs / 1000).toFixed(2)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(2))
    }
  }))

/**
 * `--scenario throttled` (issue 20 §0): the run that hung before wake-ups re-armed. 1,000
 * emails against one endpoint limited to 20 requests/s (a token bucket, 429 with
 * `Retry-After` in whole seconds), capacity 16, concurrency 16, once per algorithm. Printed per
 * algorithm: `makespan_s` (≈ 50 s is the bound: 1,000 / 20), `failed`, `requests`, `rate_429`,
 * `cpu_s`. A hang shows as a run that never prints.
 */
const throttledRun = (algorithm: string, resultsDir: string) =>
  Effect.scoped(Effect.gen(function*() {
    const profile = yield* MockLlm.decodeProfile({
      seed: 0,
      endpoints: [{ name: "key", rps: 20, burst: 20, latency: { medianMs: 20, p95Ms: 60 } }]
    })
    const server = yield* MockLlm.serve({ profile })
    const cpu0 = process.cpuUsage()
    const report = yield* runSpamEval({
      sample: SAMPLE_STORM,
      seed: 0,
      concurrency: 16,
      algorithm,
      storeLayer: MemoryStore.layer(),
      resultsPath: NodePath.join(resultsDir, `throttled-${algorithm}.jsonl`),
      endpoints: server.endpoints.map((e) => ({ id: e.name, baseUrl: e.baseUrl, model: e.model, apiKey: "bench-key", capacity: 16 })),
      chat: { retry: { maxAttempts: 10, base: "200 millis", cap: "5 seconds" } }
    })
    const cpu = process.cpuUsage(cpu0)
    const log = yield* server.log
    return {
      bench: "llm-eval.throttled",
      algorithm,
      emails: report.results.length,
      failed: report.results.filter((r) => r.state !== "succeeded").length,
      requests: log.length,
      rate_429: Number((log.filter((e) => e.status === 429).length / Math.max(1, log.length)).toFixed(3)),
      makespan_s: Number((report.run.durationMs / 1000).toFixed(2)),
      bound_s: Number((report.results.length / 20).toFixed(1)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(2)),
      load: os.loadavg().map((x) => Number(x.toFixed(2)))
    }
  }))

const cacheRun = (which: "first" | "rerun", server: MockLlm.MockLlmServer, cacheFile: string, resultsDir: string) =>
  Effect.scoped(Effect.gen(function*() {
    const before = (yield* server.log).length
    const cpu0 = process.cpuUsage()
    const report = yield* runSpamEval({
      sample: SAMPLE,
      seed: 0,
      concurrency: 24,
      algorithm: "leastBusy",
      storeLayer: MemoryStore.layer(),
      cacheLayer: SqliteCallCache.layer({ filename: cacheFile, shared: true }),
      resultsPath: NodePath.join(resultsDir, `cache-${which}.jsonl`),
      endpoints: server.endpoints.map((e) => ({
        id: e.name,
        baseUrl: e.baseUrl,
        model: e.model,
        apiKey: `bench-key-${e.name}`,
        capacity: 6
      })),
      chat: { retry: { maxAttempts: 10, base: "200 millis", cap: "5 seconds" }, cache: true }
    })
    const cpu = process.cpuUsage(cpu0)
    const log = (yield* server.log).slice(before)
    return {
      bench: "llm-eval-cache",
      run: which,
      emails: report.results.length,
      requests: log.length,
      makespan_s: Number((report.run.durationMs / 1000).toFixed(3)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(3)),
      failed: report.results.filter((r) => r.state !== "succeeded").length,
      accuracy: Number(report.metrics.accuracy.toFixed(4))
    }
  }))

/** One `llm` resource per endpoint (`name`, `baseUrl`, `model`), `capacity` leases each. */
const chatResources = (
  endpoints: ReadonlyArray<{ readonly name: string; readonly baseUrl: string; readonly model: string }>,
  capacity: number
) =>
  endpoints.map((e) =>
    Resource.make("llm", {
      id: e.name,
      capacity,
      options: { baseUrl: e.baseUrl, model: e.model, apiKey: `bench-key-${e.name}` },
      factory: Chat.chatClientFactory()
    })
  )

/** The spam evaluation's `classify` call alone, cached, with the given retry policy. */
const classifyTask = (retry: Chat.ChatOptions["retry"]) =>
  Chat.chat<{ readonly prompt: string }>({ name: "classify", temperature: 0, maxTokens: 5, cache: true, retry })

/**
 * The classification calls alone (`--scenario cache`): one `chat` task over the prompts of the
 * sampled emails (read and parsed once, before timing), so the rerun measures what the cache
 * saves and nothing else of the pipeline.
 */
const chatOnlyRun = (which: "first" | "rerun", server: MockLlm.MockLlmServer, cacheFile: string, _resultsDir: string) =>
  Effect.gen(function*() {
    const rows = yield* promptRows
    const before = (yield* server.log).length
    const resources = chatResources(server.endpoints, 6)
    const classify = classifyTask({ maxAttempts: 10, base: "200 millis", cap: "5 seconds" })
    const cpu0 = process.cpuUsage()
    const report = yield* Runner.run(Pipeline.make("spam-chat", classify).map(rows)).pipe(
      Effect.provide(Layer.provideMerge(
        Runner.layer({ concurrency: 24, handleSignals: false }),
        Layer.mergeAll(
          MemoryStore.layer(),
          Pool.layer([Pool.make("llm", resources, { algorithm: "leastBusy" })]),
          SqliteCallCache.layer({ filename: cacheFile, shared: true })
        )
      ))
    )
    const cpu = process.cpuUsage(cpu0)
    const finished = report.stats
    return {
      bench: "llm-eval-cache",
      scenario: "chat-only",
      run: which,
      emails: rows.length,
      requests: (yield* server.log).length - before,
      makespan_s: Number((report.durationMs / 1000).toFixed(3)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(3)),
      failed: finished.byState.failed + finished.byState.interrupted
    }
  })

/** The prompts of the sampled emails (what the spam pipeline's `load` and `prompt` make), once. */
let promptCache: ReadonlyArray<{ readonly prompt: string }> | undefined
const promptRows = Effect.suspend(() =>
  promptCache !== undefined ? Effect.succeed(promptCache) : Effect.gen(function*() {
    const dataDir = yield* corpusDirectory
    const entries = sampleStratified(yield* loadIndex, { size: SAMPLE, seed: 0 })
    const template = Pipeline.make("prep", load, prompt)
    const out: Array<{ readonly prompt: string }> = []
    yield* Runner.run(template.map(entries.map((e) => seedOf(e, dataDir))), {
      onPipelineFinished: (_record, output) =>
        Effect.sync(() => {
          if (output._tag === "Some") out.push({ prompt: (output.value as { readonly prompt: string }).prompt })
        })
    }).pipe(Effect.provide(Layer.provideMerge(
      Runner.layer({ handleSignals: false }),
      Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
    )))
    promptCache = out
    return out
  })
)

// ---------------------------------------------------------------------------------------------
// `--scenario hidden`: three mock-llm processes with hidden limits of different kinds
// ---------------------------------------------------------------------------------------------

/** The hidden endpoints (profiles of `assay mock-llm --profile`), as `bench/adaptive.ts`'s. */
const HIDDEN: ReadonlyArray<Record<string, unknown>> = [
  {
    name: "a",
    rps: 20,
    latency: { medianMs: 400, p95Ms: 656 },
    rateLimitHeaders: "openai",
    rateLimitSignal: "retry-after-ms"
  },
  { name: "b", rps: 10, latency: { medianMs: 250, p95Ms: 410 }, rateLimitSignal: "retry-after" },
  {
    name: "c",
    rps: 15,
    rpsSchedule: [{ atS: 0, rps: 15 }, { atS: 20, rps: 7.5 }],
    latency: { medianMs: 600, p95Ms: 984 },
    rateLimitSignal: "none"
  }
]

/** A mock-llm child process: its endpoint, log file and pid. */
interface MockProcess {
  readonly name: string
  readonly baseUrl: string
  readonly model: string
  readonly logFile: string
  readonly pid: number
  readonly profile: MockLlm.EndpointProfile
}

/** User + system CPU seconds of a live process (Linux `/proc/<pid>/stat`; 0 elsewhere). */
const procCpuS = (pid: number): number => {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
    return (Number(fields[11]) + Number(fields[12])) / 100
  } catch {
    return 0
  }
}

const ASSAY_BIN = NodePath.join(import.meta.dirname, "..", "bin", "assay")

/** A mock-llm child process that did not print its listening line. */
class MockStartError extends Data.TaggedError("MockStartError")<{ readonly message: string }> {}

/** Starts `assay mock-llm --profile` for one endpoint in this scope (SIGTERM on close). */
const mockProcess = (endpoint: Record<string, unknown>, dir: string, tag: string) =>
  Effect.gen(function*() {
    const name = String(endpoint["name"])
    const profileFile = NodePath.join(dir, `${tag}-${name}.json`)
    const logFile = NodePath.join(dir, `${tag}-${name}.jsonl`)
    const profileJson = { seed: 0, endpoints: [endpoint] }
    fs.writeFileSync(profileFile, JSON.stringify(profileJson))
    const profile = (yield* MockLlm.decodeProfile(profileJson)).endpoints[0]!
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        ChildProcess.spawn(process.execPath, [ASSAY_BIN, "mock-llm", "--profile", profileFile, "--log", logFile], {
          stdio: ["ignore", "pipe", "inherit"]
        })
      ),
      (c) =>
        Effect.async<void>((resume) => {
          if (c.exitCode !== null || c.signalCode !== null) return resume(Effect.void)
          c.once("exit", () => resume(Effect.void))
          c.kill("SIGTERM")
        })
    )
    const listening = yield* Effect.async<{ readonly endpoints: ReadonlyArray<{ name: string; model: string; baseUrl: string }> }, MockStartError>(
      (resume) => {
        const lines = Readline.createInterface({ input: child.stdout! })
        lines.once("line", (line) => resume(Effect.try({ try: () => JSON.parse(line), catch: (e) => new MockStartError({ message: String(e) }) })))
        child.once("exit", (code) => resume(Effect.fail(new MockStartError({ message: `mock-llm ${name} exited with ${code} before listening` }))))
      }
    )
    const ep = listening.endpoints[0]!
    return { name, baseUrl: ep.baseUrl, model: ep.model, logFile, pid: child.pid!, profile } satisfies MockProcess
  })

/** The entries of a mock's JSONL log (chat requests only). */
const readLog = (file: string): ReadonlyArray<MockLlm.RequestLogEntry> =>
  fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as MockLlm.RequestLogEntry)
    .filter((e) => e.path.endsWith("/chat/completions"))

/**
 * Requests the endpoint offers per key between two wall-clock times (ms), its burst not counted
 * (the header endpoint's bucket refill after its drain is added by the caller).
 */
const offered = (profile: MockLlm.EndpointProfile, serverStartMs: number, fromMs: number, toMs: number): number => {
  let sum = 0
  for (let t = fromMs; t < toMs; t += 50) {
    sum += ((MockLlm.rpsAt(profile, (t - serverStartMs) / 1000) ?? 0) * Math.min(50, toMs - t)) / 1000
  }
  return sum
}

/**
 * Empties the minute bucket of a header endpoint's key (`rateLimitHeaders` other than `none`:
 * the mock's bucket then holds `rps × 60` requests): rounds of 300 concurrent requests with the
 * run's key until one is refused with 429. Returns how many requests it took (the mock's log
 * says when the bucket ran dry); an endpoint without headers is left as it is.
 */
const drainMinuteBucket = (m: MockProcess) =>
  Effect.gen(function*() {
    if (m.profile.rateLimitHeaders === "none") return { endMs: null, requests: 0 }
    let requests = 0
    for (let round = 0; round < 20; round++) {
      const statuses = yield* Effect.forEach(
        Array.from({ length: 300 }, (_, i) => i),
        (i) =>
          Effect.promise(() =>
            fetch(`${m.baseUrl}/chat/completions`, {
              method: "POST",
              headers: { "content-type": "application/json", authorization: `Bearer bench-key-${m.name}` },
              body: JSON.stringify({ model: m.model, messages: [{ role: "user", content: `drain ${round}-${i}` }] })
            }).then(async (r) => {
              await r.arrayBuffer()
              return r.status
            })
          ),
        { concurrency: "unbounded" }
      )
      requests += statuses.length
      if (statuses.includes(429)) return { requests }
    }
    return yield* Effect.dieMessage(`could not drain ${m.name}'s bucket in 6,000 requests`)
  })

const HIDDEN_RETRY = { maxAttempts: 20, base: "250 millis", factor: 2, cap: "10 seconds", jitter: "full" } as const

/** What one run of the hidden scenario's job gives: emails, failed pipelines, wall ms, accuracy. */
interface HiddenOutcome {
  readonly emails: number
  readonly failed: number
  readonly wallMs: number
  readonly accuracy: number | null
}

const TRACE = process.argv.includes("--trace")
const argJob = process.argv.indexOf("--job")
const JOB = argJob >= 0 ? process.argv[argJob + 1] : "pipeline"

/** The chat job's pool, sampled each second: acquires waiting, and each resource's leases and adaptive state. */
const hiddenSamples: Array<{ atS: number; waiting: number; resources: ReadonlyArray<{ id: string; active: number; state: unknown }> }> = []

const hiddenEval = (
  algorithm: string,
  mocks: ReadonlyArray<MockProcess>,
  cacheFile: string,
  resultsPath: string
): Effect.Effect<HiddenOutcome, unknown, FileSystem.FileSystem | Path.Path> =>
  JOB === "chat"
    ? Effect.gen(function*() {
      // the classification calls alone: one `chat` per pipeline over the prompts made untimed
      const rows = yield* promptRows
      const resources = chatResources(mocks, 32)
      const classify = classifyTask(HIDDEN_RETRY)
      const program = Effect.gen(function*() {
        const pools = yield* Pool.Pools
        const t0 = Date.now()
        const sampler = Effect.gen(function*() {
          for (;;) {
            yield* Effect.sleep("1 second")
            const stats = yield* pools.stats("llm")
            const snap = yield* pools.snapshot("llm")
            hiddenSamples.push({
              atS: Number(((Date.now() - t0) / 1000).toFixed(1)),
              waiting: stats.waiting,
              resources: snap.map((r) => ({ id: r.id, active: r.active, state: r.algorithm ?? null }))
            })
          }
        }).pipe(Effect.orDie)
        const fiber = yield* Effect.fork(sampler)
        const report = yield* Runner.run(Pipeline.make("spam-chat", classify).map(rows))
        yield* Fiber.interrupt(fiber)
        return report
      })
      const report = yield* program.pipe(
        Effect.provide(Layer.provideMerge(
          Runner.layer({ concurrency: 96, handleSignals: false }),
          Layer.mergeAll(
            MemoryStore.layer(),
            Pool.layer([Pool.make("llm", resources, { algorithm })]),
            SqliteCallCache.layer({ filename: cacheFile, shared: true })
          )
        ))
      )
      return {
        emails: rows.length,
        failed: report.stats.byState.failed + report.stats.byState.interrupted,
        wallMs: report.durationMs,
        accuracy: null
      }
    })
    : Effect.map(
      runSpamEval({
        sample: SAMPLE,
        seed: 0,
        concurrency: 96,
        algorithm,
        storeLayer: MemoryStore.layer(),
        cacheLayer: SqliteCallCache.layer({ filename: cacheFile, shared: true }),
        resultsPath,
        endpoints: mocks.map((m) => ({ id: m.name, baseUrl: m.baseUrl, model: m.model, apiKey: `bench-key-${m.name}`, capacity: 32 })),
        chat: { retry: HIDDEN_RETRY, cache: true }
      }),
      (report) => ({
        emails: report.results.length,
        failed: report.results.filter((r) => r.state !== "succeeded").length,
        wallMs: report.run.durationMs,
        accuracy: report.metrics.accuracy
      })
    )

const hiddenRun = (algorithm: string, dir: string, rerun: boolean) =>
  Effect.scoped(Effect.gen(function*() {
    const load0 = os.loadavg()
    if (JOB === "chat") yield* promptRows // made before the servers start (their limit halves 20 s after)
    // header endpoints first, drained (see `drainMinuteBucket`), then the others
    const headed = HIDDEN.filter((e) => e["rateLimitHeaders"] !== undefined && e["rateLimitHeaders"] !== "none")
    const headedMocks = yield* Effect.all(headed.map((e) => mockProcess(e, dir, algorithm)), { concurrency: "unbounded" })
    const drains = yield* Effect.forEach(headedMocks, drainMinuteBucket)
    const rest = yield* Effect.all(
      HIDDEN.filter((e) => !headed.includes(e)).map((e) => mockProcess(e, dir, algorithm)),
      { concurrency: "unbounded" }
    )
    const mocks = [...headedMocks, ...rest]
    const drainRequests = drains.reduce((a, d) => a + d.requests, 0)
    const runStartMs = Date.now()
    const cacheFile = NodePath.join(dir, `hidden-cache-${algorithm}.db`)
    const lag = monitorEventLoopDelay({ resolution: 10 })
    lag.enable()
    const cpu0 = process.cpuUsage()
    const servers0 = mocks.map((m) => procCpuS(m.pid))
    hiddenSamples.length = 0
    const report = yield* hiddenEval(algorithm, mocks, cacheFile, NodePath.join(dir, `hidden-${algorithm}.jsonl`))
    const cpu = process.cpuUsage(cpu0)
    const samples = hiddenSamples.slice()
    if (TRACE) for (const x of samples) yield* Console.error(JSON.stringify({ algorithm, ...x }))
    lag.disable()
    const serversCpu = mocks.reduce((a, m, i) => a + procCpuS(m.pid) - servers0[i]!, 0)
    const rawLength = mocks.reduce((a, m) => a + readLog(m.logFile).length, 0)
    // a drained key's bucket was empty at the drain's first refusal; its refill from then to the
    // run's first request, less the drain's answers after that refusal, is capacity on offer too
    const drainedAt = new Map(headedMocks.map((m) => {
      const drain = readLog(m.logFile).filter((e) => e.atMs < runStartMs)
      const refusedAt = Math.min(...drain.filter((e) => e.status === 429).map((e) => e.atMs))
      return [m.name, { refusedAt, answeredAfter: drain.filter((e) => e.status === 200 && e.atMs > refusedAt).length }]
    }))
    const logs = mocks.map((m) => ({ m, log: readLog(m.logFile).filter((e) => e.atMs >= runStartMs) }))
    const all = logs.flatMap((l) => l.log)
    const served = all.filter((e) => e.status === 200)
    const t0 = Math.min(...all.map((e) => e.atMs))
    const t1 = Math.max(...served.map((e) => e.atMs + e.latencyMs))
    const byArrival = served.map((e) => e.atMs).sort((x, y) => x - y)
    const tBusy = byArrival[Math.floor(0.9 * byArrival.length) - 1] ?? t1
    const within = (from: number, to: number) => {
      let offer = 0
      let answers = 0
      const per: Record<string, { utilisation: number; rate_429: number; requests: number }> = {}
      for (const { m, log } of logs) {
        const start = log.length === 0 ? t0 : log[0]!.atMs - log[0]!.offsetMs
        const drained = drainedAt.get(m.name)
        // a drained bucket's refill between the drain and the run's first request (at most the bucket)
        const refill = drained === undefined
          ? 0
          : Math.max(
            0,
            Math.min(
              Math.max(1, Math.round((MockLlm.rpsAt(m.profile, 0) ?? 0) * 60)),
              ((MockLlm.rpsAt(m.profile, (from - start) / 1000) ?? 0) * Math.max(0, from - drained.refusedAt)) / 1000
            ) - drained.answeredAfter
          )
        const o = offered(m.profile, start, from, to) + refill
        const inside = log.filter((e) => e.atMs >= from && e.atMs <= to)
        const ok = inside.filter((e) => e.status === 200).length
        offer += o
        answers += ok
        per[m.name] = {
          utilisation: Number((ok / o).toFixed(3)),
          rate_429: Number((inside.filter((e) => e.status === 429).length / Math.max(1, inside.length)).toFixed(3)),
          requests: inside.length
        }
      }
      return { utilisation: answers / offer, per }
    }
    const whole = within(t0, t1)
    const busy = within(t0, tBusy)
    const ms = (x: number) => Number((x / 1e6).toFixed(1))
    const first = {
      bench: "llm-eval.hidden",
      job: JOB,
      algorithm,
      emails: report.emails,
      failed: report.failed,
      requests: all.length,
      drain_requests: drainRequests,
      rate_429: Number((all.filter((e) => e.status === 429).length / Math.max(1, all.length)).toFixed(4)),
      utilisation: Number(whole.utilisation.toFixed(3)),
      utilisation_busy: Number(busy.utilisation.toFixed(3)),
      per_endpoint: busy.per,
      calls_s: Number(((t1 - t0) / 1000).toFixed(2)),
      busy_s: Number(((tBusy - t0) / 1000).toFixed(2)),
      wall_s: Number((report.wallMs / 1000).toFixed(2)),
      cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(2)),
      servers_cpu_s: Number(serversCpu.toFixed(2)),
      // the chat job: the share of seconds (up to the busy part's end) with acquires waiting
      // for a lease: demand above what the algorithm admitted (null for the pipeline job)
      pressed: samples.length === 0
        ? null
        : Number((samples.filter((x) => x.atS <= (tBusy - t0) / 1000 && x.waiting > 0).length /
          Math.max(1, samples.filter((x) => x.atS <= (tBusy - t0) / 1000).length)).toFixed(2)),
      loop_lag_ms: { p50: ms(lag.percentile(50)), p99: ms(lag.percentile(99)), max: ms(lag.max) },
      accuracy: report.accuracy === null ? null : Number(report.accuracy.toFixed(4)),
      load: [load0, os.loadavg()].map((l) => l.map((x) => Number(x.toFixed(2))))
    }
    yield* Console.log(JSON.stringify(first))
    if (!rerun) return
    const before = rawLength
    const cpuR = process.cpuUsage()
    const again = yield* hiddenEval(algorithm, mocks, cacheFile, NodePath.join(dir, `hidden-${algorithm}-rerun.jsonl`))
    const cpuAgain = process.cpuUsage(cpuR)
    const after = logs.reduce((a, { m }) => a + readLog(m.logFile).length, 0)
    const wallAgain = again.wallMs / 1000
    yield* Console.log(JSON.stringify({
      bench: "llm-eval.hidden",
      job: JOB,
      algorithm,
      run: "rerun",
      emails: again.emails,
      failed: again.failed,
      requests: after - before,
      wall_s: Number(wallAgain.toFixed(3)),
      cpu_s: Number(((cpuAgain.user + cpuAgain.system) / 1e6).toFixed(3)),
      speedup: Number((first.wall_s / wallAgain).toFixed(1)),
      accuracy: again.accuracy === null ? null : Number(again.accuracy.toFixed(4)),
      load: os.loadavg().map((x) => Number(x.toFixed(2)))
    }))
  }))

const argSampleStorm = process.argv.indexOf("--sample")
const SAMPLE_STORM = argSampleStorm >= 0 ? Number(process.argv[argSampleStorm + 1]) : 1000

const main = Effect.scoped(Effect.gen(function*() {
  const dir = fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-llm-eval-"))
  if (SCENARIO === "storm") {
    const lines = []
    for (const variant of ["breaker_off", "breaker_on"] as const) lines.push(yield* stormRun(variant, dir))
    const base = lines[0]!
    for (const l of lines) {
      yield* Console.log(JSON.stringify({
        ...l,
        wall_ratio: Number((l.makespan_s / base.makespan_s).toFixed(3)),
        cpu_ratio: Number((l.cpu_s / base.cpu_s).toFixed(3)),
        load: os.loadavg().map((x) => Number(x.toFixed(2)))
      }))
    }
  } else if (SCENARIO === "cache" || SCENARIO === "cache-pipeline") {
    // one server for both runs: the endpoints' URLs are part of the cache key
    const profile = yield* MockLlm.decodeProfile({
      seed: 0,
      endpoints: Object.entries(RATES).map(([name, rps]) => ({ name, rps, burst: rps, latency: { medianMs: 20, p95Ms: 60 } }))
    })
    const server = yield* MockLlm.serve({ profile })
    const cacheFile = NodePath.join(dir, "cache.db")
    const runOnce = SCENARIO === "cache" ? chatOnlyRun : cacheRun
    const first = yield* runOnce("first", server, cacheFile, dir)
    yield* Console.log(JSON.stringify(first))
    const rerun = yield* runOnce("rerun", server, cacheFile, dir)
    yield* Console.log(JSON.stringify({
      ...rerun,
      wall_ratio: Number((first.makespan_s / rerun.makespan_s).toFixed(1)),
      cpu_ratio: Number((first.cpu_s / rerun.cpu_s).toFixed(1)),
      load: os.loadavg().map((x) => Number(x.toFixed(2)))
    }))
  } else if (SCENARIO === "hidden") {
    const algorithms = argAlgorithms >= 0 ? ALGORITHMS : ["wait", "leastBusy", "adaptive"]
    for (const [i, algorithm] of algorithms.entries()) yield* hiddenRun(algorithm, dir, i === algorithms.length - 1)
  } else if (SCENARIO === "throttled") {
    for (const algorithm of ALGORITHMS) yield* Console.log(JSON.stringify(yield* throttledRun(algorithm, dir)))
  } else {
    for (const algorithm of ALGORITHMS) yield* one(algorithm, dir)
  }
  fs.rmSync(dir, { recursive: true, force: true })
}))

Effect.runPromise(main.pipe(Effect.provide(NodeContext.layer))).catch((e) => {
  console.error(e)
  process.exit(1)
})
