/**
 * Read-side benchmark at store scale (issue 19 §4; run: `npx tsx bench/readside.ts`; prints
 * JSON lines). What `report` and `resume` cost on a store of BENCH_STORE_PIPELINES (200,000)
 * pipelines of which 10 are left to do.
 *
 * 1. `make FILE N`: the store, made by assay itself on SqliteStore: N pipelines of two tasks
 *    that lease from a pool of 4 resources; every 50th pipeline's first attempt fails with a
 *    rate limit and is retried; the last 10 fail for good (what a resume has to run again).
 *    Cached: BENCH_STORE (default `$TMPDIR/assay-readside-N.db`) is made once and reused.
 * 2. `report`: `bin/assay report STORE` (needs `npm run build`) as a user runs it, BENCH_RUNS
 *    (3) times: wall time and peak RSS from `/usr/bin/time` (targets ≤ 1,000 ms, ≤ 150 MB).
 * 3. `resume FILE`: a resume of the same N specs on a copy of the store (in a child process):
 *    `first_pending_ms`, from the moment the store is open to the first task of a pipeline
 *    that was not finished (target ≤ 1,000 ms; the 10 are the last in the source, the worst
 *    case), and `resume_skip_per_s`, finished pipelines skipped per second of the resume
 *    (target ≥ 150,000); beside each, the CPU time of the process over the same span
 *    (`first_pending_cpu_ms`, `resume_cpu_ms`, `resume_skip_per_cpu_s`).
 *
 * Environment: BENCH_STORE_PIPELINES (200000), BENCH_STORE (path of the cached store),
 * BENCH_RUNS (3), BENCH_CASES (`report`, `resume`; default both). Each line carries `load1`
 * (the 1-minute load average when the case ended).
 */
import { NodeContext } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"
import { RetryableError } from "../src/domain/Errors.js"
import * as Pipeline from "../src/domain/Pipeline.js"
import * as Resource from "../src/domain/Resource.js"
import * as Task from "../src/domain/Task.js"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as Pool from "../src/services/Pool.js"
import * as Runner from "../src/services/Runner.js"

const root = nodePath.resolve(nodePath.dirname(fileURLToPath(import.meta.url)), "..")
const N = Number(process.env.BENCH_STORE_PIPELINES ?? 200_000)
const STORE = process.env.BENCH_STORE ?? nodePath.join(os.tmpdir(), `assay-readside-${N}.db`)
const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const CASES = process.env.BENCH_CASES === undefined || process.env.BENCH_CASES.trim() === ""
  ? undefined
  : new Set(process.env.BENCH_CASES.split(",").map((c) => c.trim()))
const runs = (name: string) => CASES === undefined || CASES.has(name)
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify({ ...o, load1: +os.loadavg()[0]!.toFixed(2) }))
const LEFT = 10

/** Whether this process makes the store (the last LEFT pipelines fail) or resumes it. */
let making = true
/** performance.now() and the process's CPU ms at the first task of a left-over pipeline (resume). */
let firstPending: number | undefined
let firstPendingCpu: number | undefined
const cpuMs = () => {
  const c = process.cpuUsage()
  return (c.user + c.system) / 1000
}

const leased = <A, B>(name: string, f: (a: A) => B, fails: (a: A, attempt: number) => RetryableError | undefined) =>
  Task.make(name, { resource: "pool", retry: { maxAttempts: 2, base: "1 millis", jitter: "none" } }, (a: A, ctx) =>
    Effect.flatMap(ctx.acquire(), () => {
      const e = fails(a, ctx.attempt)
      return e === undefined ? Effect.succeed(f(a)) : Effect.fail(e)
    }))

const template = Pipeline.make(
  "readside",
  leased("t0", (row: { readonly i: number }) => {
    if (!making && row.i >= N - LEFT && firstPending === undefined) {
      firstPending = performance.now()
      firstPendingCpu = cpuMs()
    }
    return { i: row.i, text: "lorem ipsum dolor sit amet" }
  }, (row, attempt) =>
    making && row.i >= N - LEFT
      ? new RetryableError({ message: `left for the resume (${row.i})`, errorClass: "upstream" })
      : row.i % 50 === 0 && attempt === 1
      ? new RetryableError({ message: "429 Too Many Requests", errorClass: "rate_limit" })
      : undefined),
  leased("t1", (r: { readonly i: number; readonly text: string }) => ({ i: r.i, n: r.text.length * r.i }), () => undefined)
)

function* seeds(n: number) {
  for (let i = 0; i < n; i++) yield { i }
}

const poolLayer = Pool.layer([
  Pool.make("pool", Array.from({ length: 4 }, (_, k) => Resource.make("worker", { id: `w${k}`, capacity: 4 })))
])

/** One run of the N specs on `file`; `opened` is performance.now() once the store is open. */
const runOn = (file: string, options: Runner.RunOptions) =>
  Effect.gen(function*() {
    const opened = performance.now()
    const openedCpu = cpuMs()
    const report = yield* Runner.run(template.map(seeds(N)), options)
    return { opened, openedCpu, ms: performance.now() - opened, cpu: cpuMs() - openedCpu, report }
  }).pipe(
    Effect.provide(
      Runner.layer({ concurrency: 64, handleSignals: false }).pipe(
        Layer.provideMerge(Layer.mergeAll(SqliteStore.layer({ filename: file }), poolLayer, NodeContext.layer))
      )
    )
  )

const mode = process.argv[2]
if (mode === "make") {
  const file = process.argv[3]!
  const t0 = performance.now()
  Effect.runPromise(runOn(file, {})).then((r) =>
    console.log(JSON.stringify({
      made: file,
      ms: Math.round(performance.now() - t0),
      succeeded: r.report.stats.byState.succeeded,
      failed: r.report.stats.byState.failed
    }))
  )
} else if (mode === "resume") {
  making = false
  const file = process.argv[3]!
  Effect.runPromise(runOn(file, { resume: true })).then((r) => {
    const skipped = r.report.skipped
    console.log(JSON.stringify({
      resume_ms: Math.round(r.ms),
      first_pending_ms: firstPending === undefined ? null : Math.round(firstPending - r.opened),
      first_pending_cpu_ms: firstPendingCpu === undefined ? null : Math.round(firstPendingCpu - r.openedCpu),
      resume_cpu_ms: Math.round(r.cpu),
      skipped,
      succeeded: r.report.stats.byState.succeeded,
      resume_skip_per_s: Math.round(skipped / (r.ms / 1000)),
      // the same per CPU second (the machine may be shared)
      resume_skip_per_cpu_s: Math.round(skipped / (r.cpu / 1000))
    }))
  })
} else {
  const child = (args: ReadonlyArray<string>) => {
    const r = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!, ...args], { encoding: "utf8", maxBuffer: 1 << 22 })
    if (r.status !== 0) throw new Error(`child ${args.join(" ")} failed: ${r.stderr}`)
    return JSON.parse(r.stdout.trim().split("\n").pop()!)
  }
  if (!fs.existsSync(STORE)) emit({ bench: "readside.make", pipelines: N, ...child(["make", STORE]) })
  const copy = nodePath.join(os.tmpdir(), `assay-readside-copy-${process.pid}.db`)
  if (runs("report")) {
    const walls: Array<number> = []
    const rss: Array<number> = []
    for (let k = 0; k < RUNS; k++) {
      const t0 = performance.now()
      const r = spawnSync("/usr/bin/time", ["-f", "%M %U %S", nodePath.join(root, "bin/assay"), "report", STORE], { encoding: "utf8", maxBuffer: 1 << 22 })
      const wall = performance.now() - t0
      if (r.status !== 0) throw new Error(`report failed: ${r.stderr}`)
      const [kb, user, sys] = r.stderr.trim().split("\n").pop()!.split(" ").map(Number)
      walls.push(wall)
      rss.push(kb! / 1024)
      emit({ bench: "readside.report_run", pipelines: N, wall_ms: Math.round(wall), cpu_ms: Math.round((user! + sys!) * 1000), peak_rss_mb: Math.round(kb! / 1024) })
    }
    emit({
      bench: "readside.report",
      pipelines: N,
      best_wall_ms: Math.round(Math.min(...walls)),
      median_wall_ms: Math.round(walls.sort((a, b) => a - b)[Math.floor(walls.length / 2)]!),
      peak_rss_mb: Math.round(Math.max(...rss)),
      target_ms: 1000,
      target_rss_mb: 150
    })
  }
  if (runs("resume")) {
    for (let k = 0; k < RUNS; k++) {
      fs.copyFileSync(STORE, copy)
      const r = child(["resume", copy])
      emit({ bench: "readside.resume", pipelines: N, left: LEFT, ...r, target_first_pending_ms: 1000, target_skip_per_s: 150_000 })
      for (const f of [copy, `${copy}-wal`, `${copy}-shm`]) fs.rmSync(f, { force: true })
    }
  }
}
