/**
 * `assay serve` latency benchmark (run: `npx tsx bench/serve.ts`; prints JSON lines).
 *
 * Builds two stores with one run each, of 1k and 100k finished pipelines (1 task row and 1
 * attempt each, 5% failed, a few run metrics), through the store's public operations. Then
 * serves each read-only on a loopback port (exactly as `assay serve` does: the read-only
 * `SqliteStore` + `Monitor.storeReads`, the `Store` port only) and measures over HTTP, `ROUNDS` requests each:
 *
 * - `/stats` (the whole snapshot: counts by state, latency percentiles, histogram, errors,
 *   resources, metrics), plus `Store.stats` alone and the completion histogram alone;
 * - `/pipelines?limit=50` first page, and a page at 90% depth (`after` = the cursor of the
 *   row at 90%);
 * - `/stats` of the whole store (the dashboard's default view: `run_id=all`);
 * - a download, `/export?rows=results&format=csv` (the export service writes a temporary file
 *   that is then streamed), beside `Export.exportStore` of the same rows to a file (what
 *   `assay export` does), in the same process: wall time, and the CPU-time ratio of the two.
 *
 * Reports median and p95 in ms, and `ratio_100k_to_1k` per endpoint.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as Export from "../src/services/Export.js"
import * as Monitor from "../src/services/internal/monitor.js"
import * as StatsServer from "../src/services/StatsServer.js"
import type { PipelineFields } from "../src/services/Store.js"
import { Store } from "../src/services/Store.js"
import { PipelineId, RunId } from "../src/domain/Ids.js"

const SIZES = (process.env.BENCH_SIZES ?? "1000,100000").split(",").map(Number)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 30)
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-serve-"))
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))
const RUN = RunId.make("bench-run")
const T0 = 1_700_000_000_000

const pipeline = (i: number): PipelineFields => {
  const failed = i % 20 === 7
  const created = T0 + i
  return {
    pipelineId: PipelineId.make(`p${String(i).padStart(8, "0")}`),
    key: null,
    name: "bench",
    state: failed ? "failed" : "succeeded",
    nTasksDone: failed ? 0 : 1,
    nTasksTotal: 1,
    specDigest: "spec",
    seedDigest: `seed${i}`,
    tags: {},
    attemptsTotal: 1,
    runId: RUN,
    createdAt: created,
    updatedAt: created + 50,
    startedAt: created,
    endedAt: created + 20 + (i % 100),
    failedTask: failed ? "ask" : null,
    errorType: failed ? "FatalError" : null,
    errorMessage: failed ? `bad row ${i}` : null,
    errorClass: failed ? "fatal" : null
  }
}

const build = (file: string, n: number) =>
  Effect.gen(function*() {
    const s = yield* Store
    yield* s.openRun({ runId: RUN, startedAt: T0, meta: { total: n } })
    const BATCH = 1000
    for (let from = 0; from < n; from += BATCH) {
      const ps = Array.from({ length: Math.min(BATCH, n - from) }, (_, k) => pipeline(from + k))
      yield* s.admit(ps)
      // one group commit carries the whole batch of task rows
      yield* Effect.forEach(ps, (p) =>
        s.putTask({
          taskRunId: `${p.pipelineId}:0`, pipelineId: p.pipelineId, runId: RUN, seq: 0, taskName: "ask",
          state: p.state === "failed" ? "failed" : "succeeded", attemptsUsed: 1, startedAt: p.startedAt!, endedAt: p.endedAt,
          durationMs: p.endedAt! - p.startedAt!, errorType: p.errorType, errorMessage: p.errorMessage, errorClass: p.errorClass, leaseIds: []
        }), { concurrency: "unbounded", discard: true })
      for (const p of ps) {
        yield* s.recordAttempt({
          pipelineId: p.pipelineId, runId: RUN, taskRunId: `${p.pipelineId}:0`, taskName: "ask", seq: 0, attemptNo: 1,
          outcome: p.state === "failed" ? "failed" : "succeeded", errorClass: p.errorClass, errorType: p.errorType,
          errorMessage: p.errorMessage, decision: null, leaseIds: [], startedAt: p.startedAt!, endedAt: p.endedAt!,
          durationMs: p.endedAt! - p.startedAt!
        })
      }
    }
    yield* s.reportMetric({ runId: RUN, pipelineId: null, name: "accuracy", value: 0.95, display: "percent", updatedAt: T0 + n })
    yield* s.reportMetric({ runId: RUN, pipelineId: null, name: "evaluated", value: n, updatedAt: T0 + n })
    yield* s.flush
    yield* s.finishRun(RUN, { status: "completed", endedAt: T0 + n + 200 })
  }).pipe(Effect.provide(SqliteStore.layer({ filename: file })))

const stats = (xs: Array<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!
  return { median_ms: Number(at(0.5).toFixed(2)), p95_ms: Number(at(0.95).toFixed(2)) }
}

const time = <A, E>(eff: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const xs: Array<number> = []
    for (let i = 0; i < ROUNDS; i++) {
      const t = performance.now()
      yield* eff
      xs.push(performance.now() - t)
    }
    return stats(xs)
  })

const get = (url: string) =>
  Effect.promise(async () => {
    const r = await fetch(url)
    if (r.status !== 200) throw new Error(`${url}: ${r.status}`)
    return (await r.json()) as any
  })

const measure = (file: string, n: number) =>
  Effect.scoped(Effect.gen(function*() {
    const store = yield* Store
    const reads = Monitor.storeReads(store)
    const info = yield* StatsServer.serve({ store, reads, port: 0 })
    const deep = Monitor.encodeCursor({ createdAt: T0 + Math.floor(n * 0.9), pipelineId: PipelineId.make(`p${String(Math.floor(n * 0.9)).padStart(8, "0")}`) })
    yield* get(`${info.url}/stats?run_id=latest`) // warm up
    const out: Record<string, { median_ms: number; p95_ms: number }> = {
      stats_http: yield* time(get(`${info.url}/stats?run_id=latest`)),
      stats_whole_store_http: yield* time(get(`${info.url}/stats`)),
      store_stats: yield* time(store.stats(RUN)),
      store_stats_whole_store: yield* time(store.stats(undefined)),
      histogram_whole_store: yield* time(reads.completions({ runId: undefined, originMs: T0, bucketMs: Monitor.bucketFor(n + 200) })),
      histogram: yield* time(reads.completions({ runId: RUN, originMs: T0, bucketMs: Monitor.bucketFor(n + 200) })),
      pipelines_first_http: yield* time(get(`${info.url}/pipelines?limit=50`)),
      pipelines_deep_http: yield* time(get(`${info.url}/pipelines?limit=50&after=${deep}`))
    }
    const page = yield* get(`${info.url}/pipelines?limit=50&after=${deep}`)
    if (page.rows.length !== 50) throw new Error("deep page is short")
    // a download beside the direct export of the same rows (fewer rounds: whole-store reads)
    const target = nodePath.join(dir, `direct-${n}.csv`)
    const exportRounds = Math.max(3, Math.round(ROUNDS / 5))
    const cpu = (eff: Effect.Effect<unknown, unknown>) =>
      Effect.gen(function*() {
        const xs: Array<number> = []
        const c0 = process.cpuUsage()
        for (let i = 0; i < exportRounds; i++) {
          const t = performance.now()
          yield* Effect.orDie(eff)
          xs.push(performance.now() - t)
        }
        const c = process.cpuUsage(c0)
        return { ...stats(xs), cpu_ms: (c.user + c.system) / 1000 / exportRounds }
      })
    const http = yield* cpu(Effect.promise(() => fetch(`${info.url}/export?rows=results&format=csv`).then((r) => r.arrayBuffer())))
    const direct = yield* cpu(Export.exportStore(store, target, { kind: "results", format: "csv" }))
    emit({
      bench: "serve.export_results_csv",
      pipelines: n,
      rounds: exportRounds,
      bytes: fs.statSync(target).size,
      http_median_ms: http.median_ms,
      direct_median_ms: direct.median_ms,
      http_cpu_ms: Number(http.cpu_ms.toFixed(1)),
      direct_cpu_ms: Number(direct.cpu_ms.toFixed(1)),
      cpu_ratio_http_to_direct: Number((http.cpu_ms / direct.cpu_ms).toFixed(2))
    })
    return out
  })).pipe(Effect.provide(SqliteStore.layerReadOnly(file)))

const program = Effect.gen(function*() {
  const results = new Map<number, Record<string, { median_ms: number; p95_ms: number }>>()
  for (const n of SIZES) {
    const file = nodePath.join(dir, `serve-${n}.db`)
    const t = performance.now()
    yield* build(file, n)
    emit({ bench: "serve.build", pipelines: n, seconds: Number(((performance.now() - t) / 1000).toFixed(1)) })
    const r = yield* measure(file, n)
    results.set(n, r)
    for (const [k, v] of Object.entries(r)) emit({ bench: `serve.${k}`, pipelines: n, rounds: ROUNDS, ...v })
  }
  const small = results.get(Math.min(...SIZES))
  const big = results.get(Math.max(...SIZES))
  if (small !== undefined && big !== undefined && small !== big) {
    for (const k of Object.keys(small)) {
      emit({ bench: `serve.${k}.ratio`, ratio_big_to_small: Number((big[k]!.median_ms / small[k]!.median_ms).toFixed(2)) })
    }
  }
})

Effect.runPromise(program).then(() => fs.rmSync(dir, { recursive: true, force: true }), (e) => {
  console.error(e)
  process.exit(1)
})
