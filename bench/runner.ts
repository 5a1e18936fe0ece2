/**
 * Runner benchmark (run: `npx tsx bench/runner.ts`; prints JSON lines).
 *
 * In one run, for N = 20,000 pipelines of 3 trivial tasks at concurrency 64 (in a child
 * process; BENCH_ROUNDS rounds, default 5, best round of each, wall and CPU time):
 * 1. raw: better-sqlite3 writing the same facts with prepared single-row statements in
 *    transactions of 256 pipelines (the definition shared with bench/store.ts), under the
 *    content-addressed ids assay gives these pipelines (also reported with sequential ids
 *    `p0, p1, …`, which make every index insert an append: `ratio_to_raw_sequential_ids`);
 * 2. assay on SqliteStore (file, journal full);
 * 3. assay on MemoryStore;
 * 4. a bare `Effect.forEach` over the same task functions, same concurrency;
 * 5. assay on SqliteStore where each task takes a lease from a pool of 4 resources × 8;
 * 6. assay on SqliteStore, a pipeline of 4 tasks that declares control and rewinds once:
 *    t0, t1, t2 → rewind to t1, t1, t2 → end (5 task executions, 2 transitions);
 * 7. only when BENCH_CASES names it (`sqlite_effect`): (5) without the pool, the same three
 *    steps as `Task.make` tasks that take no lease, which splits `pool_ratio`'s gap into what
 *    an Effect task costs beyond a `Task.sync` one (`cpu_effect_ratio` = CPU of (2) / (7)) and
 *    what its lease costs (`cpu_lease_ratio` = CPU of (7) / (5));
 * 8. assay on SqliteStore, (2)'s three steps in a pipeline that declares control and never uses
 *    it (`sqlite_control_idle`: t2 may rewind to t1 and never does): the same 3 executions on
 *    the controlled path, so (2) over (8) is what that path costs beyond the plain one;
 * 9, 10. only when BENCH_CASES names them (`sqlite_plain4`, `sqlite_control_idle4`): (2) and
 *    (8) with a fourth step. With 2, 6, 8, 9 and 10 all run, `runner.decomposition` prints the
 *    medians over rounds of: the CPU per task execution on each path (E: 4 steps less 3), per
 *    pipeline beyond its executions (F: the 3-step case less 3 E), and the rewinding case's own
 *    extra (H: (6) less (10) less one controlled E; (6) and (10) both have 4 tasks).
 * How the rounds run: first a warm-up (not measured) of (2), (6) and (8) at BENCH_WARMUP
 * pipelines (default N / 10), so the JIT's first compilations are not charged to whichever
 * case runs first; a full garbage collection before every measured case, so no case pays for
 * collecting what the one before it left; in each round, the other cases, then (2), (6) and (8)
 * back to back in an order rotated by one each round (none always first or last).
 * Keys: `ratio_to_raw` = (2)/(1) (target ≥ 0.5, issue 19), `pool_ratio` = (5)/(2) (target ≥ 0.7, issue 19; `cpu_pool_ratio` the same with CPU time),
 * `rewind_ratio` = pipelines/s of (6) / (2) (target ≥ 0.6), `cpu_rewind_ratio` the same with CPU
 * time, and both per task execution (`rewind_ratio_per_execution`: (2) runs 3, (6) runs 5).
 * These ratios divide the best round of one case by the best round of the other, which may be
 * different rounds. Beside them, each round has ratios of its own, of cases that ran back to
 * back: `rewind_ratio_round_median` and `cpu_rewind_ratio_round_median` are the medians over
 * rounds of (6) / (2) per round (wall and CPU), and `rewind_ratio_rounds` /
 * `cpu_rewind_ratio_rounds` list them in round order, so the noise between rounds shows; the
 * same for (8) / (2): `control_idle_ratio_round_median`, `cpu_control_idle_ratio_round_median`,
 * `control_idle_ratio_rounds`, `cpu_control_idle_ratio_rounds` (1: the controlled path costs
 * nothing beyond the plain one). On a shared machine, decide on the CPU medians.
 * Then, each in a child process of its own: peak RSS for 100k and 1M pipelines streamed from a
 * generator on SqliteStore (`rss_ratio_1m_to_100k`, target ≤ 1.3), and the speed of a resume
 * that skips 100k succeeded pipelines (`resume_skip_per_s`, target ≥ 150,000; issue 19).
 *
 * Environment: BENCH_SLICE_MS (unset: the runner's own time slice, 10 ms of synchronous work
 * between two turns of the event loop; a number of ms, or `Infinity` for no turns: every run of
 * the throughput cases uses it; each turn lets the store's group commit take what is queued, so
 * the slice sets how many pipelines share a commit, see BENCHMARKS.md perf13ah),
 * BENCH_PIPELINES (20000), BENCH_ROUNDS (5), BENCH_WARMUP (N / 10), BENCH_RSS_SMALL (100000), BENCH_RSS_BIG (1000000),
 * BENCH_RESUME (100000), BENCH_CASES (a comma-separated subset of raw, raw_sequential_ids, sqlite,
 * memory, bare_forEach, sqlite_pooled, sqlite_rewind_once, sqlite_control_idle, sqlite_effect, sqlite_plain4, sqlite_control_idle4, rss,
 * resume; default: all but sqlite_effect, sqlite_plain4 and sqlite_control_idle4; a ratio is printed only when both its cases ran).
 */
import { NodeContext } from "@effect/platform-node"
import { Effect, Layer, Stream } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import * as v8 from "node:v8"
import * as vm from "node:vm"
import * as Handoff from "../src/domain/Handoff.js"
import * as Pipeline from "../src/domain/Pipeline.js"
import * as Resource from "../src/domain/Resource.js"
import * as Task from "../src/domain/Task.js"
import * as MemoryStore from "../src/layers/MemoryStore.js"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as Pool from "../src/services/Pool.js"
import * as Runner from "../src/services/Runner.js"
import * as Slice from "../src/services/internal/runner/slice.js"
import { rawBound } from "./lib/raw.js"

const N = Number(process.env.BENCH_PIPELINES ?? 20_000)
const CASES = process.env.BENCH_CASES === undefined || process.env.BENCH_CASES.trim() === ""
  ? undefined
  : new Set(process.env.BENCH_CASES.split(",").map((c) => c.trim()))
/** Whether the case `name` runs (BENCH_CASES). */
const runs = (name: string) => CASES === undefined || CASES.has(name)
const CONCURRENCY = 64
/** BENCH_SLICE_MS: the runner's time slice for every run (unset: the runner's default). */
const SLICE_MS = process.env.BENCH_SLICE_MS === undefined || process.env.BENCH_SLICE_MS.trim() === ""
  ? Slice.AUTO
  : Number(process.env.BENCH_SLICE_MS)
if (SLICE_MS !== Slice.AUTO && !(SLICE_MS >= 0)) throw new Error(`BENCH_SLICE_MS must be a number of ms >= 0 or Infinity`)
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-runner-"))
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))

// The same three trivial steps for every variant.
const f1 = (row: { readonly i: number }) => ({ i: row.i, text: "lorem ipsum dolor sit amet" })
const f2 = (r: { readonly i: number; readonly text: string }) => ({ ...r, n: r.text.length * r.i })
const f3 = (r: { readonly i: number; readonly n: number }) => ({ i: r.i, score: r.n % 97 })

const plain = Pipeline.make("bench", Task.sync("t0", f1), Task.sync("t1", f2), Task.sync("t2", f3))

// The shape docs/runner.md teaches: the lease is scoped to the attempt (the runner's Scope).
const leased = <A, B>(name: string, f: (a: A) => B) =>
  Task.make(name, { resource: "pool" }, (a: A, ctx) => Effect.map(ctx.acquire(), () => f(a)))
const withLeases = Pipeline.make("bench-leased", leased("t0", f1), leased("t1", f2), leased("t2", f3))

// The same Effect tasks without the lease (case 7).
const effectTask = <A, B>(name: string, f: (a: A) => B) => Task.make(name, (a: A) => Effect.sync(() => f(a)))
const effects = Pipeline.make("bench-effect", effectTask("t0", f1), effectTask("t1", f2), effectTask("t2", f3))

// Every pipeline rewinds once: t2's first visit sends t1 back its input, its second ends.
const rewinding = Pipeline.make(
  "bench-rewind",
  Task.sync("t0", f1),
  Task.sync("t1", f2),
  Task.sync("t2", (r: { readonly i: number; readonly n: number }, ctx) =>
    ctx.visit === 0 ? Handoff.rewind("t1", { i: r.i, text: "again" }) : Handoff.end(f3(r))),
  Task.sync("t3", f3),
  { control: { rewind: { t2: ["t1"] }, edges: { t2: ["end"] }, maxHandoffs: 1 } }
)

// Control declared, never used (case 8): the plain case's three steps on the controlled path;
// t2 may rewind to t1 but never does, so each pipeline runs 3 executions and no transition.
const controlIdle = Pipeline.make("bench-control-idle", Task.sync("t0", f1), Task.sync("t1", f2), Task.sync("t2", f3), {
  control: { rewind: { t2: ["t1"] }, maxHandoffs: 1 }
})

// Cases 9 and 10 (only when BENCH_CASES names them): (2) and (8) with a fourth step, so that
// the per-execution cost of each path (E) is the difference of the 4-step and 3-step cases and
// the per-pipeline cost (F) what is left; the rewinding case's own extra (H) is then (6) less (10)
// less one execution (its template has 4 tasks, like (10), and runs 5).
const f4 = (r: { readonly i: number; readonly score: number }) => ({ i: r.i, score: r.score + 1 })
const plain4 = Pipeline.make("bench4", Task.sync("t0", f1), Task.sync("t1", f2), Task.sync("t2", f3), Task.sync("t3", f4))
const controlIdle4 = Pipeline.make(
  "bench-control-idle4",
  Task.sync("t0", f1),
  Task.sync("t1", f2),
  Task.sync("t2", f3),
  Task.sync("t3", f4),
  { control: { rewind: { t2: ["t1"] }, edges: { t2: ["end"] }, maxHandoffs: 1 } }
)

function* seeds(n: number) {
  for (let i = 0; i < n; i++) yield { i }
}

const poolLayer = Pool.layer([
  Pool.make("pool", Array.from({ length: 4 }, (_, k) => Resource.make("worker", { id: `w${k}`, capacity: 8 })))
])

const runWith = (
  template: Pipeline.Template<any, any, any, never>,
  store: Layer.Layer<import("../src/services/Store.js").Store, unknown>,
  n: number,
  options: Runner.RunOptions = {}
) =>
  Effect.gen(function*() {
    const t0 = performance.now()
    const report = yield* Runner.run(template.map(seeds(n)), options)
    const ms = performance.now() - t0
    if (report.stats.byState.succeeded + report.skipped !== n) throw new Error(`only ${report.stats.byState.succeeded} succeeded`)
    return { ms, report }
  }).pipe(
    Effect.provideService(Slice.SliceMillis, SLICE_MS),
    Effect.provide(
      Runner.layer({ concurrency: CONCURRENCY, handleSignals: false }).pipe(
        Layer.provideMerge(Layer.mergeAll(store, poolLayer, NodeContext.layer))
      )
    )
  )

const bare = (n: number) =>
  Effect.gen(function*() {
    const t0 = performance.now()
    yield* Effect.forEach(seeds(n), (s) => Effect.sync(() => f3(f2(f1(s)))), { concurrency: CONCURRENCY, discard: true })
    return performance.now() - t0
  })

const rate = (n: number, ms: number) => Math.round(n / (ms / 1000))

// ---------------------------------------------------------------------------------------------
// Child modes: one measurement per process, so RSS and caches start clean.
// ---------------------------------------------------------------------------------------------
const mode = process.argv[2]
if (mode === "rss") {
  const n = Number(process.argv[3])
  const file = nodePath.join(dir, `rss-${n}.db`)
  let peak = 0
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss)
  }, 50)
  const single = Pipeline.make("bench-rss", Task.sync("t0", f1))
  Effect.runPromise(runWith(single as any, SqliteStore.layer({ filename: file }), n)).then(({ ms }) => {
    clearInterval(timer)
    peak = Math.max(peak, process.memoryUsage().rss)
    console.log(JSON.stringify({ n, ms, peak_rss_mb: Math.round(peak / 1e6) }))
  })
} else if (mode === "resume") {
  const n = Number(process.argv[3])
  const file = nodePath.join(dir, `resume-${n}.db`)
  Effect.runPromise(
    Effect.gen(function*() {
      const first = yield* runWith(plain, SqliteStore.layer({ filename: file }), n)
      const second = yield* runWith(plain, SqliteStore.layer({ filename: file }), n)
      return { first: first.ms, second: second.ms, skipped: second.report.skipped }
    })
  ).then((r) => console.log(JSON.stringify({ n, ...r })))
} else if (mode === "throughput") {
  // The variants, ROUNDS rounds interleaved, best round of each; wall clock and CPU time
  // (process.cpuUsage), since the machine may be shared.
  const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
  const best = (xs: ReadonlyArray<{ ms: number; cpuMs: number }>) => ({
    ms: Math.min(...xs.map((x) => x.ms)),
    cpuMs: Math.min(...xs.map((x) => x.cpuMs))
  })
  const timed = <A, E>(self: Effect.Effect<A, E>) =>
    Effect.suspend(() => {
      const c0 = process.cpuUsage()
      return Effect.map(self, (ms) => {
        const c = process.cpuUsage(c0)
        return { ms: ms as number, cpuMs: (c.user + c.system) / 1000 }
      })
    })
  const main = Effect.gen(function*() {
    // The ids assay gives these pipelines (content-addressed), so that the raw bound writes the
    // same facts under the same keys.
    const ids = Array.from(yield* Stream.runCollect(plain.map(seeds(N))), (s) => s.pipelineId)
    const raws: Array<{ ms: number; cpuMs: number }> = []
    const rawSeqs: Array<{ ms: number; cpuMs: number }> = []
    const sqlites: Array<{ ms: number; cpuMs: number }> = []
    const memories: Array<{ ms: number; cpuMs: number }> = []
    const pooleds: Array<{ ms: number; cpuMs: number }> = []
    const bares: Array<{ ms: number; cpuMs: number }> = []
    const rewinds: Array<{ ms: number; cpuMs: number }> = []
    const effectRuns: Array<{ ms: number; cpuMs: number }> = []
    const idles: Array<{ ms: number; cpuMs: number }> = []
    const plain4s: Array<{ ms: number; cpuMs: number }> = []
    const idle4s: Array<{ ms: number; cpuMs: number }> = []
    // A full collection before each measured case, so that a case is not charged for collecting
    // the garbage the previous case left.
    v8.setFlagsFromString("--expose-gc")
    const gc = vm.runInNewContext("gc") as () => void
    const collect = Effect.sync(gc)
    const measure = <E>(name: string, into: Array<{ ms: number; cpuMs: number }>, self: Effect.Effect<number, E>) =>
      runs(name) ? Effect.zipRight(collect, Effect.map(timed(self), (x) => void into.push(x))) : Effect.void
    const onSqlite = (template: Pipeline.Template<any, any, any, never>, file: string, n: number) =>
      Effect.map(runWith(template, SqliteStore.layer({ filename: nodePath.join(dir, file) }), n), (r) => r.ms)
    // Warm-up (not measured): the three compared SQLite cases once each at BENCH_WARMUP pipelines,
    // so that round 0 does not charge the JIT's first compilations to whichever case runs first.
    const warmup = Number(process.env.BENCH_WARMUP ?? Math.ceil(N / 10))
    if (warmup > 0) {
      if (runs("sqlite")) yield* onSqlite(plain, "warm-plain.db", warmup)
      if (runs("sqlite_rewind_once")) yield* onSqlite(rewinding, "warm-rewind.db", warmup)
      if (runs("sqlite_control_idle")) yield* onSqlite(controlIdle, "warm-idle.db", warmup)
    }
    for (let round = 0; round < rounds; round++) {
      yield* measure("raw", raws, Effect.sync(() => rawBound(nodePath.join(dir, `raw-${round}.db`), N, (i) => ids[i]!)))
      yield* measure("raw_sequential_ids", rawSeqs, Effect.sync(() => rawBound(nodePath.join(dir, `raw-seq-${round}.db`), N)))
      yield* measure("memory", memories, Effect.map(runWith(plain, MemoryStore.layer(), N), (r) => r.ms))
      yield* measure("bare_forEach", bares, bare(N))
      yield* measure("sqlite_pooled", pooleds, onSqlite(withLeases, `pooled-${round}.db`, N))
      if (CASES?.has("sqlite_effect") === true) {
        yield* measure("sqlite_effect", effectRuns, onSqlite(effects, `effect-${round}.db`, N))
      }
      // The compared cases back to back, their order rotated each round (so none always runs
      // first or last): each round's own ratios are taken from these.
      const compared = [
        measure("sqlite", sqlites, onSqlite(plain, `assay-${round}.db`, N)),
        measure("sqlite_rewind_once", rewinds, onSqlite(rewinding, `rewind-${round}.db`, N)),
        measure("sqlite_control_idle", idles, onSqlite(controlIdle, `idle-${round}.db`, N)),
        ...(CASES?.has("sqlite_plain4") === true ? [measure("sqlite_plain4", plain4s, onSqlite(plain4, `plain4-${round}.db`, N))] : []),
        ...(CASES?.has("sqlite_control_idle4") === true
          ? [measure("sqlite_control_idle4", idle4s, onSqlite(controlIdle4, `idle4-${round}.db`, N))]
          : [])
      ]
      for (let k = 0; k < compared.length; k++) yield* compared[(round + k) % compared.length]!
    }
    const [raw, rawSeq, sqlite, memory, pooled, bareB, rewind, effect, idle, p4, i4] = [
      raws,
      rawSeqs,
      sqlites,
      memories,
      pooleds,
      bares,
      rewinds,
      effectRuns,
      idles,
      plain4s,
      idle4s
    ].map((xs) => xs.length === 0 ? undefined : best(xs))
    const line = (name: string, x: { ms: number; cpuMs: number }) =>
      emit({
        bench: `runner.${name}`,
        ms: Math.round(x.ms),
        pipelines_per_s: rate(N, x.ms),
        cpu_us_per_pipeline: Math.round((x.cpuMs * 1000) / N)
      })
    const cases = { raw, raw_sequential_ids: rawSeq, sqlite, memory, bare_forEach: bareB, sqlite_pooled: pooled, sqlite_rewind_once: rewind, sqlite_effect: effect, sqlite_control_idle: idle,
      sqlite_plain4: p4, sqlite_control_idle4: i4 }
    for (const [name, x] of Object.entries(cases)) if (x !== undefined) line(name, x)
    const ratio = (a: { ms: number } | undefined, b: { ms: number } | undefined) =>
      a === undefined || b === undefined ? undefined : +(a.ms / b.ms).toFixed(3)
    const cpuRatio = (a: { cpuMs: number } | undefined, b: { cpuMs: number } | undefined) =>
      a === undefined || b === undefined ? undefined : +(a.cpuMs / b.cpuMs).toFixed(3)
    // per round: (2) and (6) ran back to back in the same round, so their ratio is that round's
    const perRound = (
      f: (x: { ms: number; cpuMs: number }) => number,
      other: ReadonlyArray<{ ms: number; cpuMs: number }> = rewinds
    ) =>
      sqlites.length === 0 || sqlites.length !== other.length
        ? undefined
        : sqlites.map((s, i) => +(f(s) / f(other[i]!)).toFixed(3))
    const median = (xs: ReadonlyArray<number> | undefined) => {
      if (xs === undefined) return undefined
      const sorted = [...xs].sort((a, b) => a - b)
      const mid = sorted.length >> 1
      return sorted.length % 2 === 1 ? sorted[mid] : +((sorted[mid - 1]! + sorted[mid]!) / 2).toFixed(3)
    }
    const rewindRounds = perRound((x) => x.ms)
    const cpuRewindRounds = perRound((x) => x.cpuMs)
    const idleRounds = perRound((x) => x.ms, idles)
    const cpuIdleRounds = perRound((x) => x.cpuMs, idles)
    emit({
      bench: "runner.ratios",
      ...(SLICE_MS === Slice.AUTO ? {} : { slice_ms: Number.isFinite(SLICE_MS) ? SLICE_MS : "Infinity" }),
      ratio_to_raw: ratio(raw, sqlite),
      ratio_to_raw_target: 0.5,
      cpu_ratio_to_raw: cpuRatio(raw, sqlite),
      ratio_to_raw_sequential_ids: ratio(rawSeq, sqlite),
      pool_ratio: ratio(sqlite, pooled),
      pool_ratio_target: 0.7,
      // CPU time per pipeline of the plain case over the pooled case's (the machine may be shared)
      cpu_pool_ratio: cpuRatio(sqlite, pooled),
      // pool_ratio's gap split (case 7): plain over Effect tasks, Effect tasks over leased ones
      cpu_effect_ratio: cpuRatio(sqlite, effect),
      cpu_lease_ratio: cpuRatio(effect, pooled),
      memory_to_sqlite: ratio(sqlite, memory),
      rewind_ratio: ratio(sqlite, rewind),
      rewind_ratio_target: 0.6,
      // CPU time per pipeline of the plain case over the rewinding case's (the machine may be shared)
      cpu_rewind_ratio: cpuRatio(sqlite, rewind),
      // the median over rounds of each round's own ratio (the two cases ran back to back in it)
      rewind_ratio_round_median: median(rewindRounds),
      cpu_rewind_ratio_round_median: median(cpuRewindRounds),
      rewind_ratio_rounds: rewindRounds,
      cpu_rewind_ratio_rounds: cpuRewindRounds,
      // control declared and never used over plain, per round (1 = the controlled path costs
      // nothing beyond the plain one for the same three executions)
      control_idle_ratio_round_median: median(idleRounds),
      cpu_control_idle_ratio_round_median: median(cpuIdleRounds),
      control_idle_ratio_rounds: idleRounds,
      cpu_control_idle_ratio_rounds: cpuIdleRounds,
      // per task execution (plain 3, rewinding 5): what the control path costs beyond the extra work
      rewind_ratio_per_execution: sqlite === undefined || rewind === undefined
        ? undefined
        : +((sqlite.ms / 3) / (rewind.ms / 5)).toFixed(3),
      cpu_rewind_ratio_per_execution: sqlite === undefined || rewind === undefined
        ? undefined
        : +((sqlite.cpuMs / 3) / (rewind.cpuMs / 5)).toFixed(3)
    })
    // F, E and H per round (CPU µs per pipeline) from cases 2, 8, 9, 10 and 6, which ran back
    // to back in each round, and their medians over rounds
    const all = [sqlites, plain4s, idles, idle4s, rewinds]
    if (all.every((xs) => xs.length === rounds && rounds > 0)) {
      const us = (x: { cpuMs: number }) => (x.cpuMs * 1000) / N
      const parts = sqlites.map((_, i) => {
        const [p3, p4r, c3, c4, rw] = all.map((xs) => us(xs[i]!)) as [number, number, number, number, number]
        const eP = p4r - p3
        const eC = c4 - c3
        return { eP, fP: p3 - 3 * eP, eC, fC: c3 - 3 * eC, h: rw - c4 - eC }
      })
      const med = (f: (x: (typeof parts)[number]) => number) => +median(parts.map(f))!.toFixed(1)
      emit({
        bench: "runner.decomposition",
        // per task execution, plain and controlled paths
        cpu_us_per_execution_plain: med((x) => x.eP),
        cpu_us_per_execution_controlled: med((x) => x.eC),
        // per pipeline, beyond its executions
        cpu_us_per_pipeline_fixed_plain: med((x) => x.fP),
        cpu_us_per_pipeline_fixed_controlled: med((x) => x.fC),
        // the rewinding case's own extra (its two transitions), beyond 5 controlled executions
        cpu_us_rewind_extra: med((x) => x.h)
      })
    }
  })
  Effect.runPromise(main).then(
    () => fs.rmSync(dir, { recursive: true, force: true }),
    (e) => {
      console.error(e)
      process.exit(1)
    }
  )
} else {
  const main = Effect.gen(function*() {
    emit({ bench: "runner.setup", pipelines: N, concurrency: CONCURRENCY, tasks: 3, node: process.version })
    // Throughput in a child process of its own (clean heap and caches).
    const t = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!, "throughput"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      maxBuffer: 1 << 20
    })
    if (t.status !== 0) throw new Error("throughput child failed")
    process.stdout.write(t.stdout)

    const child = (args: ReadonlyArray<string>) => {
      const r = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!, ...args], {
        encoding: "utf8",
        maxBuffer: 1 << 20
      })
      if (r.status !== 0) throw new Error(`child ${args.join(" ")} failed: ${r.stderr}`)
      return JSON.parse(r.stdout.trim().split("\n").pop()!)
    }
    if (runs("rss")) {
      const small = Number(process.env.BENCH_RSS_SMALL ?? 100_000)
      const big = Number(process.env.BENCH_RSS_BIG ?? 1_000_000)
      const a = child(["rss", String(small)])
      emit({ bench: "runner.rss", pipelines: small, peak_rss_mb: a.peak_rss_mb, ms: Math.round(a.ms) })
      const b = child(["rss", String(big)])
      emit({ bench: "runner.rss", pipelines: big, peak_rss_mb: b.peak_rss_mb, ms: Math.round(b.ms) })
      emit({ bench: "runner.rss_ratio", rss_ratio_1m_to_100k: +(b.peak_rss_mb / a.peak_rss_mb).toFixed(3), target: 1.3 })
    }
    if (!runs("resume")) return
    const resumeN = Number(process.env.BENCH_RESUME ?? 100_000)
    const r = child(["resume", String(resumeN)])
    emit({
      bench: "runner.resume",
      pipelines: resumeN,
      first_run_ms: Math.round(r.first),
      resume_ms: Math.round(r.second),
      skipped: r.skipped,
      resume_skip_per_s: rate(resumeN, r.second),
      target: 150_000
    })
  })
  Effect.runPromise(main).then(
    () => fs.rmSync(dir, { recursive: true, force: true }),
    (e) => {
      console.error(e)
      process.exit(1)
    }
  )
}
