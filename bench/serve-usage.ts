/**
 * The dashboard's refresh cost on a store of model calls (run: `npx tsx bench/serve-usage.ts`;
 * prints JSON lines).
 *
 * Builds (once; `BENCH_STORE` names the file, kept when given, so that two trees measure the
 * same file) a store of `BENCH_PIPELINES` (default 100,000) finished pipelines in one run, one
 * attempt each carrying tokens and a cost, leased on one of 8 resources of two pools (so the
 * snapshot reads the per-resource usage and shows pool subtotals). Then serves it read-only on
 * a loopback port as `assay serve` does and times `BENCH_ROUNDS` idle refreshes of `/stats`:
 * of the whole store alone (one open tab), then of the whole store and of the latest run in
 * turn (two open tabs), after one warm-up each: wall median and p95 per request, and the process's CPU time
 * per request (`process.cpuUsage`: server and client are this one process). Also times
 * `Store.resourceUsage` alone (what an uncached refresh adds). The machine's load is printed.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as Monitor from "../src/services/internal/monitor.js"
import * as StatsServer from "../src/services/StatsServer.js"
import type { PipelineFields } from "../src/services/Store.js"
import { Store } from "../src/services/Store.js"
import { PipelineId, RunId } from "../src/domain/Ids.js"

const N = Number(process.env.BENCH_PIPELINES ?? 100_000)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 20)
const TREE = process.env.BENCH_TREE ?? "this"
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-serve-usage-"))
const file = process.env.BENCH_STORE ?? nodePath.join(dir, "usage.db")
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))
const RUN = RunId.make("bench-run")
const T0 = 1_700_000_000_000
const TARGETS = ["llm/a", "llm/b", "llm/c", "llm/d", "llm/e", "llm/f", "judge/x", "judge/y"]

const pipeline = (i: number): PipelineFields => ({
  pipelineId: PipelineId.make(`p${String(i).padStart(8, "0")}`),
  key: null, name: "bench", state: "succeeded", nTasksDone: 1, nTasksTotal: 1, specDigest: "spec", seedDigest: `seed${i}`,
  tags: {}, attemptsTotal: 1, runId: RUN, createdAt: T0 + i, updatedAt: T0 + i + 50, startedAt: T0 + i, endedAt: T0 + i + 20,
  failedTask: null, errorType: null, errorMessage: null, errorClass: null
})

const build = Effect.gen(function*() {
  const s = yield* Store
  yield* s.openRun({ runId: RUN, startedAt: T0, meta: { total: N } })
  for (let from = 0; from < N; from += 1000) {
    const ps = Array.from({ length: Math.min(1000, N - from) }, (_, k) => pipeline(from + k))
    yield* s.admit(ps)
    yield* Effect.forEach(ps, (p, k) =>
      Effect.zipRight(
        s.putTask({
          taskRunId: `${p.pipelineId}:0`, pipelineId: p.pipelineId, runId: RUN, seq: 0, taskName: "ask", state: "succeeded",
          attemptsUsed: 1, startedAt: p.startedAt!, endedAt: p.endedAt, durationMs: 20, errorType: null, errorMessage: null, errorClass: null, leaseIds: []
        }),
        s.recordAttempt({
          pipelineId: p.pipelineId, runId: RUN, taskRunId: `${p.pipelineId}:0`, taskName: "ask", seq: 0, attemptNo: 1,
          outcome: "succeeded", errorClass: null, errorType: null, errorMessage: null, decision: null,
          leaseIds: [`${TARGETS[(from + k) % TARGETS.length]}#${from + k}`], startedAt: p.startedAt!, endedAt: p.endedAt!, durationMs: 20,
          tokensIn: 100 + (k % 50), tokensOut: 20 + (k % 7), costUsd: 0.0001, tokensEstimated: false
        })
      ), { concurrency: "unbounded", discard: true })
  }
  for (const t of TARGETS) {
    const [pool, id] = t.split("/") as [string, string]
    yield* s.putResource({ pool, resourceId: id, kind: "chat", spec: {}, health: { state: "ready" }, updatedAt: T0 })
  }
  yield* s.flush
  yield* s.finishRun(RUN, { status: "completed", endedAt: T0 + N + 200 })
}).pipe(Effect.provide(SqliteStore.layer({ filename: file })))

const summary = (xs: Array<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!
  return { median_ms: Number(at(0.5).toFixed(2)), p95_ms: Number(at(0.95).toFixed(2)) }
}

const get = (url: string) =>
  Effect.promise(async () => {
    const r = await fetch(url)
    if (r.status !== 200) throw new Error(`${url}: ${r.status}`)
    return (await r.json()) as any
  })

/** `ROUNDS` rounds of `effs` in turn: per effect, wall median/p95 and CPU ms per call. */
const timed = (effs: ReadonlyArray<readonly [string, Effect.Effect<unknown>]>) =>
  Effect.gen(function*() {
    const walls = effs.map(() => [] as Array<number>)
    const cpus = effs.map(() => 0)
    for (let i = 0; i < ROUNDS; i++) {
      for (let k = 0; k < effs.length; k++) {
        const c0 = process.cpuUsage()
        const t = performance.now()
        yield* effs[k]![1]
        walls[k]!.push(performance.now() - t)
        const c = process.cpuUsage(c0)
        cpus[k]! += (c.user + c.system) / 1000
      }
    }
    return effs.map(([name], k) => ({ name, ...summary(walls[k]!), cpu_ms: Number((cpus[k]! / ROUNDS).toFixed(2)) }))
  })

const measure = Effect.scoped(Effect.gen(function*() {
  const store = yield* Store
  const info = yield* StatsServer.serve({ store, reads: Monitor.storeReads(store), port: 0 })
  const whole = get(`${info.url}/stats?run_id=all`)
  const latest = get(`${info.url}/stats?run_id=latest`)
  const first = yield* whole
  if (first.pool_totals?.length !== 2) throw new Error("the store shows no pool subtotals")
  yield* latest
  // one open tab (the whole store), then two tabs in turn (the whole store, the latest run)
  const rows = [
    ...(yield* timed([["one_view.stats_whole_store_http", whole]])),
    ...(yield* timed([["two_views.stats_whole_store_http", whole], ["two_views.stats_latest_http", latest]])),
    ...(yield* timed([["store_resource_usage", Effect.orDie(store.resourceUsage(undefined))]]))
  ]
  for (const r of rows) emit({ bench: `serve_usage.${r.name}`, tree: TREE, pipelines: N, rounds: ROUNDS, ...r, name: undefined, load: os.loadavg()[0]!.toFixed(1) })
})).pipe(Effect.provide(SqliteStore.layerReadOnly(file)))

const program = Effect.gen(function*() {
  if (!fs.existsSync(file)) {
    const t = performance.now()
    yield* build
    emit({ bench: "serve_usage.build", pipelines: N, seconds: Number(((performance.now() - t) / 1000).toFixed(1)) })
  }
  yield* measure
})

Effect.runPromise(program).then(() => fs.rmSync(dir, { recursive: true, force: true }), (e) => {
  console.error(e)
  process.exit(1)
})
