/**
 * Cluster benchmark (issue 17; run: `npm run bench:cluster`; prints JSON lines).
 *
 * The experiment: `BENCH_CLUSTER_PIPELINES` pipelines (default 20,000) × 3 `simulateLlm` tasks
 * of 50 ms, each task holding a slot of the pool `cpu` (one resource of capacity 64). The bound is
 * capacity ÷ task time = 1,280 tasks/s.
 *
 * 1. `sqlite`: one process, `assay run --store FILE` (the embedded engine, run.concurrency 64);
 * 2. `cluster`: three `assay runner` processes and the `assay run --engine cluster` submitter
 *    (its default `--max-admitted`, or `BENCH_CLUSTER_MAX_ADMITTED`) on a throwaway Postgres 15 (test/support/pgServer.ts; fsync off),
 *    the pool global (PgPools slot rows) and the store `PgStore`.
 *
 * Printed per round: wall time, tasks/s, the ratio to the bound (target ≥ 0.8) and to the
 * SQLite round of the same run (target ≥ 0.7); CPU seconds of every process (assay processes
 * from /proc or `/usr/bin/time`, Postgres: the postmaster and its backends); messages per
 * second through the engine (rows inserted into `cluster_messages` + `cluster_replies`);
 * Postgres writes per pipeline (`pg_stat_database` deltas: commits, rows inserted / updated /
 * deleted); a `cluster.tables` line: per pipeline, each `assay_*` table's rows inserted, updated
 * (of them HOT) and deleted, and each `assay_*` index's scans (`pg_stat_user_tables`,
 * `pg_stat_user_indexes` deltas: BENCHMARKS.md pgw17ak); bytes per pipeline in the tables
 * (assay_* and cluster_*, with indexes and TOAST) and their extrapolation to 10⁶ pipelines. `uptime` before and after: the machine is shared.
 *
 * Environment: `BENCH_CLUSTER_PIPELINES` (default 20000), `BENCH_CLUSTER_ROUNDS` (default 1;
 * rounds alternate sqlite, cluster), `BENCH_CLUSTER_ONLY` (`sqlite`, `cluster` or `embedded-pg`),
 * `BENCH_CLUSTER_PG_OPTIONS` (further server options of the cluster round's Postgres, `;`-separated, e.g.
 * `-c shared_preload_libraries=pg_stat_statements,auto_explain;-c auto_explain.log_min_duration=5;-c logging_collector=on;-c log_directory=/tmp/pglog`
 * to log the plans of slow statements),
 * `BENCH_CLUSTER_STATEMENTS=1` (Postgres with `pg_stat_statements`: the statements per
 * pipeline, in all and the top ones by calls and by execution time, with their planning time,
 * over the submitter's run; and a `cluster.postgres` line: Postgres's CPU per pipeline per
 * process kind, client backends told apart by the process at the other end of their connection
 * (runner, submitter, other), autovacuum workers, walwriter, checkpointer, …, sampled every
 * quarter second from /proc (bench/lib/pgProcesses.ts), and the client backends' CPU outside what
 * pg_stat_statements accounts to statements (the protocol), per statement: BENCHMARKS.md pgp17an),
 * `BENCH_CLUSTER_PROFILE=DIR` (the runners and the submitter run with `node --cpu-prof`, their
 * profiles written to DIR/runner0, …, DIR/submitter; the runners are stopped with SIGTERM so that theirs are written;
 * `npx tsx bench/lib/cpuprofile.ts FILE` summarizes one), `BENCH_CLUSTER_IDLE_S` (default 0:
 * seconds of the runners' CPU measured while idle before the submission, reported per second
 * so that the per-pipeline figure can be read without the time-proportional part),
 * `BENCH_CLUSTER_EMBEDDED_PG=1` (after each cluster round, an `embedded_pg` round: the same
 * experiment run by the embedded engine writing the Postgres store, no cluster, each process
 * with a local pool; `BENCH_CLUSTER_EMBEDDED_PROCS` processes at once, default 1, each with
 * 1/N of the pipelines, the capacity and `run.concurrency`: the floor of what a runner that
 * runs a whole window on the embedded engine would cost per pipeline, BENCHMARKS.md pg17n),
 * `BENCH_CLUSTER_CLAIMS` (how the runners claim work: unset, their default, window claims and
 * block leases since pg17af; `window`, `--no-block-leases`; `per-task`, `--no-window-claims`: a
 * claim and a fence per task, the default before pg17af),
 * `BENCH_CLUSTER_WINDOW_CLAIMS=1` (the runners run with `--window-claims`: each window claimed
 * whole, with local deadlines, instead of a claim and a fence per task; BENCHMARKS.md pg17o; a
 * tree before pg17af needs it),
 * `BENCH_CLUSTER_BLOCK_LEASES=1` (with window claims: the runners also run with `--block-leases
 * --expected-runners 3`, each holding a block of every resource's slots and serving its tasks
 * from it in memory; BENCHMARKS.md pg17r; a tree before pg17af needs it), `BENCH_CLUSTER_RUNNER_LOGS=DIR` (each runner's standard
 * error written whole to DIR/runner0.log, …; with `ASSAY_BLOCK_TRACE=1` in the environment they
 * hold one `block trace` line per block and renewal, BENCHMARKS.md pg17u), `BENCH_CLUSTER_OPS=1` (the
 * runners and the submitter count the Effect operations they evaluate, `bench/lib/effectOps.mjs`
 * through NODE_OPTIONS: a `cluster.ops` line with operations per task per process kind over the
 * submission, the runners' also less their idle rate, measured for 3 s before the submission;
 * `BENCH_CLUSTER_OPS_TOP=N` adds the N continuations most evaluated by the runners, sampled 1 in 97:
 * BENCHMARKS.md pg17z, pg17ac. A steadier measure than CPU per pipeline on a loaded machine;
 * `BENCH_OPS_STACKS=UpdateRuntimeFlags,…` (opcodes) adds `runners_stacks_per_task`: where those
 * ops' instructions were built, per task, from JavaScript stacks sampled at construction, 1 in
 * `BENCH_OPS_STACKS_EVERY` (default 31); see the header of `bench/lib/effectOps.mjs`, BENCHMARKS.md ops17ak),
 * `BENCH_CLUSTER_MAX_ADMITTED` (the submitter's `--max-admitted`; unset: not given, the
 * submitter's default, 1,024 since pg17ad, 256 before),
 * `BENCH_CLUSTER_SLOTS=1` (the runners trace their blocks, `ASSAY_BLOCK_TRACE=1`; a `cluster.slots`
 * line: per runner, over its renewal intervals after the first, the rows its block held, the share
 * of that row time a lease held them (`utilization`: the rest the slot sat free in the block), the
 * mean time a lease held its slot for its 50 ms call, and the share of grants that waited;
 * BENCHMARKS.md lead35),
 * `BENCH_CLUSTER_EVENT_LOOP=1` (each runner preloads bench/lib/eventLoop.cjs; a `cluster.event_loop`
 * line: per runner, the mean over the seconds it worked of its event-loop delay (mean, p90, p99:
 * how late a 10 ms timer ran) and utilization; BENCHMARKS.md lead35),
 * `BENCH_CLUSTER_LATENCY=1` (a `cluster.latency` line: where a pipeline's time in flight goes,
 * from the rows the run left (see {@link LATENCY_SQL}), and the pipelines in flight on average;
 * BENCHMARKS.md pg17ad), `BENCH_CLUSTER_BIN` (the `bin/assay` the bench runs, default this tree's: another
 * worktree's build, for base/branch pairs run by the same bench),
 * `BENCH_CLUSTER_RUNNER_NODE_ARGS="--trace-gc …"` (the runners run as `node ARGS bin/assay runner …`,
 * Node options NODE_OPTIONS refuses; with `BENCH_CLUSTER_RUNNER_LOGS` their standard output goes to
 * the logs too; they are stopped with SIGTERM so that what they write at exit is written;
 * `--import bench/lib/heapSampler.mjs` samples their allocations: BENCHMARKS.md gen17am;
 * `--import bench/lib/fiberForks.mjs` with `BENCH_FIBERS_DIR` counts the fibers they fork and join
 * and their Context diffs, with the sites: BENCHMARKS.md fib17an).
 * The `cluster.cluster` line gives each runner's resident set at the end of the submission and its
 * peak (`runners_rss_mb`, `runners_peak_rss_mb`, from /proc).
 *
 * The clock of a cluster round starts as the submitter is spawned (its process's own start,
 * runtime choice, config, connection and checks are in the wall time). A `cluster.timeline` line
 * every second for the first 15 s, then every 5 s (pipelines running and succeeded, the runners'
 * and Postgres's CPU since the clock started); after the run, a `cluster.start` line: ms from the
 * clock's start to the first of each step, read from the rows the run left (the run's row, the
 * first pipeline admitted, the first window's start message and its activity (snowflake ids of
 * `cluster_messages`), the first attempt started and ended, the first pipeline succeeded, the
 * 1,000th), the tasks ended in each of the first 15 seconds, and the submitter's whole CPU
 * (BENCHMARKS.md start17am).
 */
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { startPostgres } from "../test/support/pgServer.js"
import { autovacuumCpu, type Owner, pgProcessSampler } from "./lib/pgProcesses.js"

const N = Number(process.env.BENCH_CLUSTER_PIPELINES ?? 20_000)
const ROUNDS = Number(process.env.BENCH_CLUSTER_ROUNDS ?? 1)
const ONLY = process.env.BENCH_CLUSTER_ONLY
const STATEMENTS = process.env.BENCH_CLUSTER_STATEMENTS === "1"
/** Further server options of the cluster round's Postgres (`BENCH_CLUSTER_PG_OPTIONS`, `;`-separated `-c name=value`s; a later one wins). */
const PG_OPTIONS = (process.env.BENCH_CLUSTER_PG_OPTIONS ?? "").split(";").map((o) => o.trim()).filter((o) => o !== "")
const PROFILE = process.env.BENCH_CLUSTER_PROFILE
const IDLE_S = Number(process.env.BENCH_CLUSTER_IDLE_S ?? 0)
const EMBEDDED_PG = process.env.BENCH_CLUSTER_EMBEDDED_PG === "1"
const EMBEDDED_PROCS = Number(process.env.BENCH_CLUSTER_EMBEDDED_PROCS ?? 1)
const CLAIMS = process.env.BENCH_CLUSTER_CLAIMS
if (CLAIMS !== undefined && CLAIMS !== "window" && CLAIMS !== "per-task") throw new Error(`BENCH_CLUSTER_CLAIMS=${CLAIMS}: expected window or per-task`)
const WINDOW_CLAIMS = process.env.BENCH_CLUSTER_WINDOW_CLAIMS === "1"
const BLOCK_LEASES = WINDOW_CLAIMS && process.env.BENCH_CLUSTER_BLOCK_LEASES === "1"
const RUNNER_LOGS = process.env.BENCH_CLUSTER_RUNNER_LOGS
const OPS = process.env.BENCH_CLUSTER_OPS === "1"
/** The submitter's `--max-admitted`; unset: the flag is not given (the submitter's default). */
const MAX_ADMITTED = process.env.BENCH_CLUSTER_MAX_ADMITTED === undefined ? undefined : Number(process.env.BENCH_CLUSTER_MAX_ADMITTED)
const OPS_TOP = Number(process.env.BENCH_CLUSTER_OPS_TOP ?? 0)
const LATENCY = process.env.BENCH_CLUSTER_LATENCY === "1"
/** Runners with `ASSAY_BLOCK_TRACE=1`; a `cluster.slots` line from their block traces. */
const SLOTS = process.env.BENCH_CLUSTER_SLOTS === "1"
/** Each runner preloads bench/lib/eventLoop.cjs; a `cluster.event_loop` line at the end. */
const EVENT_LOOP = process.env.BENCH_CLUSTER_EVENT_LOOP === "1"
const RUNNER_NODE_ARGS = (process.env.BENCH_CLUSTER_RUNNER_NODE_ARGS ?? "").split(" ").filter((a) => a !== "")
if (RUNNER_LOGS !== undefined) fs.mkdirSync(RUNNER_LOGS, { recursive: true })
/** How to start `bin/assay` (under `node --cpu-prof` when profiling: Node 20 refuses it in NODE_OPTIONS). */
const assayCommand = (name: string, args: ReadonlyArray<string>): [string, Array<string>] =>
  PROFILE === undefined
    ? [bin, [...args]]
    // one folder per process, Node's own file names: the ESM loader's worker thread writes a
    // profile of its own, which a fixed --cpu-prof-name would overwrite the main thread's with
    : [process.execPath, ["--cpu-prof", `--cpu-prof-dir=${path.join(PROFILE, name)}`, bin, ...args]]
/** How to start a runner: as {@link assayCommand}, under `node RUNNER_NODE_ARGS` when given. */
const runnerCommand = (name: string, args: ReadonlyArray<string>): [string, Array<string>] => {
  const [command, argv] = assayCommand(name, args)
  if (RUNNER_NODE_ARGS.length === 0) return [command, argv]
  return command === bin ? [process.execPath, [...RUNNER_NODE_ARGS, bin, ...argv]] : [command, [...RUNNER_NODE_ARGS, ...argv]]
}
/** The resident set (`VmRSS`) and its peak (`VmHWM`) of `pid`, in MiB; 0 when gone. */
const rssOf = (pid: number): { readonly rss: number; readonly peak: number } => {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8")
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? 0)
    return { rss: Math.round(kb("VmRSS") / 1024), peak: Math.round(kb("VmHWM") / 1024) }
  } catch {
    return { rss: 0, peak: 0 }
  }
}
const CAPACITY = 64
const TASK_MS = 50
const TASKS = 3
const BOUND = CAPACITY / (TASK_MS / 1000)
const root = path.resolve(import.meta.dirname, "..")
const bin = process.env.BENCH_CLUSTER_BIN ?? path.join(root, "bin/assay")
const TICK = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100

/**
 * The store's tables' and indexes' counters (`pg_stat_user_tables`: rows inserted, updated, of
 * them HOT, deleted; `pg_stat_user_indexes`: scans), `assay_*` only, keyed by name.
 */
const tableStats = (sql: (q: string) => string): Map<string, ReadonlyArray<number>> => {
  const out = new Map<string, ReadonlyArray<number>>()
  const read = (q: string) => {
    for (const l of sql(q).split("\n").filter((l) => l !== "")) {
      const [name, ...v] = l.split("|")
      out.set(name!, v.map(Number))
    }
  }
  read("SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relname LIKE 'assay\\_%'")
  read("SELECT 'index ' || indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes WHERE relname LIKE 'assay\\_%'")
  return out
}

/**
 * Per pipeline, the deltas of {@link tableStats} between two snapshots: a table's rows
 * inserted / updated (HOT) / deleted, an index's scans (an index scanned 0 times in the run
 * still costs every insert into its table).
 */
const tableDeltas = (before: Map<string, ReadonlyArray<number>>, after: Map<string, ReadonlyArray<number>>, n: number) => {
  const per = (a: number, b: number | undefined) => +((a - (b ?? 0)) / n).toFixed(3)
  const tables: Record<string, unknown> = {}
  const indexes: Record<string, number> = {}
  for (const [name, v] of after) {
    const b = before.get(name) ?? []
    if (name.startsWith("index ")) indexes[name.slice(6)] = per(v[0]!, b[0])
    else if (v.some((x, i) => x !== (b[i] ?? 0))) {
      tables[name] = { ins: per(v[0]!, b[0]), upd: per(v[1]!, b[1]), hot: per(v[2]!, b[2]), del: per(v[3]!, b[3]) }
    }
  }
  return { tables_per_pipeline: tables, index_scans_per_pipeline: indexes }
}

/** What `bench/lib/effectOps.mjs` writes: a process's Effect operations so far. */
interface OpsCount {
  readonly pid: number
  readonly ops: number
  readonly byOp: Record<string, number>
  readonly top: ReadonlyArray<[number, string]>
  /** With `BENCH_OPS_STACKS`: where the chosen ops' instructions were built, estimated counts. */
  readonly stacks?: ReadonlyArray<[number, string]>
}

const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))
const uptime = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).map(Number)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** utime + stime (+ children's when `children`) of `pid`, in seconds; 0 when gone. */
const cpuOf = (pid: number, children = false): number => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    // fields after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    const own = Number(f[11]) + Number(f[12])
    return (own + (children ? Number(f[13]) + Number(f[14]) : 0)) / TICK
  } catch {
    return 0
  }
}

/** The postmaster's CPU with its children's (exited: cutime; live: their own). */
const pgCpu = (postmaster: number): number => {
  let total = cpuOf(postmaster, true)
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      if (ppid === postmaster) total += cpuOf(Number(d))
    } catch {
      // gone
    }
  }
  return total
}

/** Runs `bin/assay args` under `/usr/bin/time`; returns its wall ms and CPU seconds. */
const timed = (args: ReadonlyArray<string>, env: Record<string, string>, cwd: string, name = "assay") =>
  new Promise<{ code: number | null; ms: number; cpu: number; stderr: string; stdout: string }>((resolve) => {
    const timeFile = path.join(cwd, `time-${Date.now()}`)
    const t0 = performance.now()
    const [command, argv] = assayCommand(name, args)
    const child = spawn("/usr/bin/time", ["-o", timeFile, "-f", "%U %S", command, ...argv], { cwd, env: { ...process.env, ...env } })
    let stderr = ""
    let stdout = ""
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
    child.on("close", (code) => {
      const ms = performance.now() - t0
      const [u, s] = fs.readFileSync(timeFile, "utf8").trim().split("\n").pop()!.split(" ").map(Number)
      resolve({ code, ms, cpu: (u ?? 0) + (s ?? 0), stderr: stderr.slice(-2000), stdout })
    })
  })

/**
 * The experiment file. `cluster`: without `run.concurrency`, which the cluster engine refuses
 * (each runner's `--concurrency` sets its attempts at once).
 */
const experiment = (dir: string, part?: { readonly index: number; readonly of: number }, cluster = false) => {
  const file = path.join(dir, part === undefined ? "exp.json" : `exp-${part.index}.json`)
  const capacity = part === undefined ? CAPACITY : Math.floor(CAPACITY / part.of)
  fs.writeFileSync(file, JSON.stringify({
    ...(cluster ? {} : { run: { concurrency: capacity } }),
    pools: { cpu: { resources: [{ id: "slots", capacity }] } },
    pipeline: {
      name: "bench",
      tasks: ["a", "b", "c"].map((name) => ({ use: "simulateLlm", name, options: { resource: "cpu", latency: `${TASK_MS} millis` } }))
    },
    // a part's seeds are its own (the pipeline ids follow the seeds, not the pipeline's name)
    source: part === undefined ? { range: { n: N } } : { jsonl: { path: partSeeds(dir, part) } }
  }))
  return file
}

/** A JSONL file of part `index`'s seeds: `{ "i": … }` rows no other part has. */
const partSeeds = (dir: string, part: { readonly index: number; readonly of: number }): string => {
  const file = path.join(dir, `seeds-${part.index}.jsonl`)
  const n = Math.floor(N / part.of)
  fs.writeFileSync(file, Array.from({ length: n }, (_, k) => JSON.stringify({ i: part.index * n + k })).join("\n") + "\n")
  return file
}

const sqliteRound = async (round: number): Promise<number> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-cluster-sqlite-"))
  const file = experiment(dir)
  const load = uptime()
  const r = await timed(["run", "-c", file, "--store", path.join(dir, "s.db"), "--quiet"], {}, dir)
  if (r.code !== 0) throw new Error(`sqlite run failed: ${r.stderr}`)
  const tasksPerS = (N * TASKS) / (r.ms / 1000)
  emit({
    bench: "cluster.sqlite",
    round,
    pipelines: N,
    tasks: N * TASKS,
    ms: Math.round(r.ms),
    tasks_per_s: Math.round(tasksPerS),
    ratio_to_bound: +(tasksPerS / BOUND).toFixed(3),
    cpu_s: +r.cpu.toFixed(1),
    load_before: load,
    load_after: uptime()
  })
  fs.rmSync(dir, { recursive: true, force: true })
  return tasksPerS
}

const clusterRound = async (round: number, sqliteTasksPerS: number | undefined): Promise<void> => {
  const pg = await startPostgres({
    serverOptions: [
      ...(STATEMENTS
        ? ["-c shared_preload_libraries=pg_stat_statements", "-c pg_stat_statements.track=all", "-c pg_stat_statements.track_planning=on", "-c log_autovacuum_min_duration=0"]
        : []),
      ...PG_OPTIONS
    ]
  })
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-cluster-"))
  try {
    await pg.createDatabase("bench")
    const url = pg.url("bench")
    const sql = (q: string) => pg.psql("bench", q).trim()
    const file = experiment(dir, undefined, true)
    const opsDir = path.join(dir, "ops")
    if (OPS) fs.mkdirSync(opsDir)
    const clusterEnv = {
      SHARDS_PER_GROUP: "300",
      ENTITY_MESSAGE_POLL_INTERVAL: "1 second",
      REFRESH_ASSIGNMENTS_INTERVAL: "1 second"
    }
    execFileSync(bin, ["migrate", "--database", url], { env: { ...process.env, ...clusterEnv }, stdio: "ignore" })
    const env: Record<string, string> = OPS
      ? {
        ...clusterEnv,
        NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --import=${path.join(root, "bench/lib/effectOps.mjs")}`.trim(),
        BENCH_OPS_DIR: opsDir,
        BENCH_OPS_TOP: String(OPS_TOP)
      }
      : clusterEnv
    if (STATEMENTS) sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    const runners: Array<ReturnType<typeof spawn>> = []
    /** Per runner, its `block trace` lines (`BENCH_CLUSTER_SLOTS`). */
    const blockTraces: Array<Array<Record<string, number>>> = []
    const startRunner = async () => {
      const port = await new Promise<number>((resolve) => {
        const s = net.createServer()
        s.listen(0, "127.0.0.1", () => {
          const a = s.address()
          const p = typeof a === "object" && a !== null ? a.port : 0
          s.close(() => resolve(p))
        })
      })
      const [command, argv] = runnerCommand(`runner${runners.length}`, [
        "runner",
        "-c",
        file,
        "--database",
        url,
        "--listen",
        `127.0.0.1:${port}`,
        "--concurrency",
        String(CAPACITY),
        ...(WINDOW_CLAIMS ? ["--window-claims"] : []),
        ...(BLOCK_LEASES ? ["--block-leases", "--expected-runners", "3"] : []),
        ...(CLAIMS === "per-task" ? ["--no-window-claims"] : CLAIMS === "window" ? ["--no-block-leases"] : [])
      ])
      const loopFile = path.join(dir, `eventloop-${runners.length}.jsonl`)
      const child = spawn(command, argv, {
        cwd: dir,
        env: {
          ...process.env,
          ...env,
          ...(SLOTS ? { ASSAY_BLOCK_TRACE: "1" } : {}),
          ...(EVENT_LOOP
            ? {
              NODE_OPTIONS: `${env.NODE_OPTIONS ?? process.env.NODE_OPTIONS ?? ""} --require=${path.join(root, "bench/lib/eventLoop.cjs")}`.trim(),
              ASSAY_BENCH_EVENT_LOOP: loopFile
            }
            : {})
        },
        stdio: ["ignore", RUNNER_LOGS !== undefined && RUNNER_NODE_ARGS.length > 0 ? "pipe" : "ignore", "pipe"]
      })
      let err = ""
      let partial = ""
      const traced: Array<Record<string, number>> = []
      blockTraces.push(traced)
      const log = RUNNER_LOGS === undefined ? undefined : fs.createWriteStream(path.join(RUNNER_LOGS, `runner${runners.length}.log`))
      child.stdout?.on("data", (d: Buffer) => log?.write(d))
      child.stderr!.on("data", (d: Buffer) => {
        log?.write(d)
        err = (err + d.toString()).slice(-4000)
        if (!SLOTS) return
        const lines = (partial + d.toString()).split("\n")
        partial = lines.pop()!
        for (const line of lines) {
          const m = line.match(/block trace (\{.*\})"?\s*$/)
          if (m !== null) traced.push(JSON.parse(m[1]!.replace(/\\"/g, "\"")) as Record<string, number>)
        }
      })
      child.on("exit", (code, signal) => {
        if (signal !== "SIGKILL" && signal !== "SIGTERM") console.error(`runner exited ${code ?? signal}: ${err}`)
      })
      runners.push(child)
    }
    const healthy = () => {
      try {
        return Number(sql("SELECT count(*) FROM cluster_runners WHERE healthy") || 0)
      } catch {
        return 0 // the first runner has not created the table yet
      }
    }
    await startRunner()
    for (let i = 0; i < 600 && healthy() < 1; i++) await sleep(200)
    await startRunner()
    await startRunner()
    for (let i = 0; i < 600 && healthy() < 3; i++) await sleep(200)
    await sleep(3_000) // shard assignment settles
    // the runners' operation counts now: written by each runner on SIGUSR2
    const opsOf = async (pids: ReadonlyArray<number>): Promise<Array<OpsCount>> => {
      for (const pid of pids) fs.rmSync(path.join(opsDir, `${pid}.json`), { force: true })
      for (const pid of pids) process.kill(pid, "SIGUSR2")
      const out: Array<OpsCount> = []
      for (const pid of pids) {
        const f = path.join(opsDir, `${pid}.json`)
        for (let i = 0; i < 200 && !fs.existsSync(f); i++) await sleep(25)
        out.push(JSON.parse(fs.readFileSync(f, "utf8")) as OpsCount)
      }
      return out
    }
    const runnerPids = runners.map((r) => r.pid!)
    let idleOpsPerS = 0
    if (OPS) {
      const a = await opsOf(runnerPids)
      const ta = performance.now()
      await sleep(3_000)
      const b = await opsOf(runnerPids)
      idleOpsPerS = b.reduce((s, c, i) => s + c.ops - a[i]!.ops, 0) / ((performance.now() - ta) / 1000)
    }
    const ops0 = OPS ? await opsOf(runnerPids) : []
    let idleRunnerCpuPerS: number | undefined
    if (IDLE_S > 0 && STATEMENTS) sql("SELECT pg_stat_statements_reset()")
    if (IDLE_S > 0) {
      const c0 = runners.map((r) => cpuOf(r.pid!))
      const p0 = pgCpu(pg.pid())
      await sleep(IDLE_S * 1000)
      const runnersIdle = runners.reduce((a, r, i) => a + cpuOf(r.pid!) - c0[i]!, 0)
      idleRunnerCpuPerS = runnersIdle / IDLE_S
      emit({
        bench: "cluster.idle",
        seconds: IDLE_S,
        runners_cpu_ms_per_s: Math.round(idleRunnerCpuPerS * 1000),
        postgres_cpu_ms_per_s: Math.round((pgCpu(pg.pid()) - p0) / IDLE_S * 1000),
        // what the idle runners send: statements per second by kind
        statements_per_s: STATEMENTS
          ? sql(
            `SELECT round(calls::numeric / ${IDLE_S}, 2), regexp_replace(left(query, 100), '\\s+', ' ', 'g') FROM pg_stat_statements
             WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC LIMIT 12`
          ).split("\n").filter((l) => l !== "")
          : null
      })
    }
    if (STATEMENTS) sql("SELECT pg_stat_statements_reset()")
    const stats = () => {
      const [commits, ins, upd, del, sessions] = sql(
        "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, sessions FROM pg_stat_database WHERE datname = 'bench'"
      ).split("|").map(Number)
      return { commits: commits!, ins: ins!, upd: upd!, del: del!, sessions: sessions! }
    }
    const before = stats()
    const tables0 = tableStats(sql)
    const postmaster = pg.pid()
    const pgCpu0 = pgCpu(postmaster)
    const runnerCpu0 = runners.map((r) => cpuOf(r.pid!))
    // with the statements: Postgres's CPU per process kind, sampled every second
    let submitterPid: number | undefined
    const owners = (): Array<Owner> => {
      if (submitterPid === undefined) {
        // the submitter: the child of the /usr/bin/time this process spawned
        const stats = fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d)).flatMap((d) => {
          try {
            const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8")
            return [{ pid: Number(d), comm: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")), ppid: Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) }]
          } catch {
            return []
          }
        })
        const time = stats.find((p) => p.ppid === process.pid && p.comm === "time")
        submitterPid = time === undefined ? undefined : stats.find((p) => p.ppid === time.pid)?.pid
      }
      return [...runners.map((r) => ({ pid: r.pid!, label: "runner" })), ...(submitterPid === undefined ? [] : [{ pid: submitterPid, label: "submitter" }])]
    }
    const pgProcs = STATEMENTS ? pgProcessSampler(postmaster, owners) : undefined
    const pgLog = path.join(path.dirname(pg.dataDir), "log")
    const pgLogStart = STATEMENTS ? fs.statSync(pgLog).size : 0
    const pgProcsTick = pgProcs === undefined ? undefined : setInterval(() => pgProcs.sample(), 250)
    const load = uptime()
    // every second for the first 15 s (the start), then every 5 s: pipelines running and
    // succeeded, runners' and Postgres's CPU since the start (does the cost per pipeline grow
    // with the backlog admitted?)
    const t0 = performance.now()
    const t0Epoch = Date.now()
    let tick = 0
    const timeline = setInterval(() => {
      tick++
      if (tick > 15 && tick % 5 !== 0) return
      try {
        const [running, succeeded] = sql(
          "SELECT count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'succeeded') FROM assay_pipelines"
        ).split("|").map(Number)
        emit({
          bench: "cluster.timeline",
          s: Math.round((performance.now() - t0) / 1000),
          running,
          succeeded,
          runners_cpu_s: +runners.reduce((a, r, i) => a + cpuOf(r.pid!) - runnerCpu0[i]!, 0).toFixed(1),
          postgres_cpu_s: +(pgCpu(postmaster) - pgCpu0).toFixed(1)
        })
      } catch {
        // the table is not there yet
      }
    }, 1_000)
    const sub = await timed(
      ["run", "-c", file, "--engine", "cluster", "--database", url, ...(MAX_ADMITTED === undefined ? [] : ["--max-admitted", String(MAX_ADMITTED)]), "--quiet"],
      env,
      dir,
      "submitter"
    )
    clearInterval(timeline)
    {
      // the start: ms from the clock's start (the submitter's spawn) to the first of each step
      const steps = ["run_registered", "first_admitted", "first_start_sent", "first_activity", "first_attempt_started", "first_attempt_ended", "first_succeeded", "succeeded_1000"]
      const at = sql(
        `SELECT (SELECT min(started_at) FROM assay_runs), (SELECT min(created_at) FROM assay_pipelines),
           (SELECT min((id >> 22) + 1735689600000) FROM cluster_messages WHERE tag = 'run'),
           (SELECT min((id >> 22) + 1735689600000) FROM cluster_messages WHERE tag = 'activity'),
           (SELECT min(started_at) FROM assay_attempts), (SELECT min(ended_at) FROM assay_attempts),
           (SELECT min(ended_at) FROM assay_pipelines WHERE state = 'succeeded'),
           (SELECT ended_at FROM assay_pipelines WHERE state = 'succeeded' ORDER BY ended_at OFFSET 999 LIMIT 1)`
      ).split("|")
      emit({
        bench: "cluster.start",
        pipelines: N,
        ms_from_spawn: Object.fromEntries(steps.map((k, i) => [k, at[i] === undefined || at[i] === "" ? null : Number(at[i]) - t0Epoch])),
        // tasks (attempts) ended in each second of the first 15 after the spawn: how fast the
        // 64 slots fill (the pool's FIFO serves every admitted pipeline's first task before any
        // second one, so the first successes lag the slots' use)
        tasks_ended_by_second: (() => {
          const counts = new Map(sql(
            `SELECT floor((ended_at - ${t0Epoch}) / 1000.0)::int AS s, count(*) FROM assay_attempts
             WHERE ended_at IS NOT NULL AND ended_at < ${t0Epoch} + 15000 GROUP BY 1`
          ).split("\n").filter((l) => l !== "").map((l) => l.split("|").map(Number) as [number, number]))
          return Array.from({ length: 15 }, (_, i) => counts.get(i) ?? 0)
        })(),
        submitter_ms: Math.round(sub.ms),
        submitter_cpu_s: +sub.cpu.toFixed(2),
        load_before: load
      })
    }
    const ops1 = OPS ? await opsOf(runnerPids) : []
    const runnerCpu = runners.map((r, i) => cpuOf(r.pid!) - runnerCpu0[i]!)
    const runnerRss = runners.map((r) => rssOf(r.pid!))
    const pgCpuS = pgCpu(postmaster) - pgCpu0
    if (pgProcsTick !== undefined) clearInterval(pgProcsTick)
    const pgSplit = pgProcs?.stop()
    const autovacuum = STATEMENTS ? autovacuumCpu(fs.readFileSync(pgLog, "utf8").slice(pgLogStart)) : undefined
    if (sub.code !== 0) throw new Error(`cluster run failed (${sub.code}): ${sub.stderr}`)
    await sleep(1_500) // statistics are flushed by the backends within a second
    const after = stats()
    emit({ bench: "cluster.tables", pipelines: N, ...tableDeltas(tables0, tableStats(sql), N) })
    const inserted = (table: string) => Number(sql(`SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = '${table}'`) || 0)
    const messages = inserted("cluster_messages")
    const replies = inserted("cluster_replies")
    const bytes = (pattern: string) =>
      Number(sql(`SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE '${pattern}'`))
    const assayBytes = bytes("assay\\_%")
    const clusterBytes = bytes("cluster\\_%")
    const done = Number(sql("SELECT count(*) FROM assay_pipelines WHERE state = 'succeeded'"))
    const leased = Number(sql("SELECT count(*) FROM assay_attempts WHERE lease_ids <> '[]'"))
    const tasksPerS = (N * TASKS) / (sub.ms / 1000)
    const s = sub.ms / 1000
    emit({
      bench: "cluster.cluster",
      round,
      pipelines: N,
      succeeded: done,
      attempts_with_lease: leased,
      runners: 3,
      ms: Math.round(sub.ms),
      tasks_per_s: Math.round(tasksPerS),
      ratio_to_bound: +(tasksPerS / BOUND).toFixed(3),
      ratio_to_sqlite: sqliteTasksPerS === undefined ? null : +(tasksPerS / sqliteTasksPerS).toFixed(3),
      cpu_s: {
        runners: runnerCpu.map((c) => +c.toFixed(1)),
        submitter: +sub.cpu.toFixed(1),
        postgres: +pgCpuS.toFixed(1),
        total: +(runnerCpu.reduce((a, b) => a + b, 0) + sub.cpu + pgCpuS).toFixed(1)
      },
      cpu_ms_per_pipeline: {
        runners: +(runnerCpu.reduce((a, b) => a + b, 0) * 1000 / N).toFixed(1),
        runners_less_idle: idleRunnerCpuPerS === undefined
          ? null
          : +((runnerCpu.reduce((a, b) => a + b, 0) - idleRunnerCpuPerS * s) * 1000 / N).toFixed(1),
        submitter: +(sub.cpu * 1000 / N).toFixed(1),
        postgres: +(pgCpuS * 1000 / N).toFixed(1),
        total: +((runnerCpu.reduce((a, b) => a + b, 0) + sub.cpu + pgCpuS) * 1000 / N).toFixed(1)
      },
      runners_rss_mb: runnerRss.map((r) => r.rss),
      runners_peak_rss_mb: runnerRss.map((r) => r.peak),
      engine_messages: messages,
      engine_replies: replies,
      engine_rows_per_s: Math.round((messages + replies) / s),
      pg_per_pipeline: {
        commits: +((after.commits - before.commits) / N).toFixed(2),
        rows_inserted: +((after.ins - before.ins) / N).toFixed(2),
        rows_updated: +((after.upd - before.upd) / N).toFixed(2),
        rows_deleted: +((after.del - before.del) / N).toFixed(2),
        // connections opened (each a backend forked and initialized; the bench's psql ones included)
        sessions: +((after.sessions - before.sessions) / N).toFixed(3)
      },
      sessions: after.sessions - before.sessions,
      bytes_per_pipeline: { assay: Math.round(assayBytes / N), cluster: Math.round(clusterBytes / N) },
      extrapolated_1e6_gb: +(((assayBytes + clusterBytes) / N) * 1e6 / 1e9).toFixed(1),
      load_before: load,
      load_after: uptime()
    })
    if (OPS) {
      const tasks = N * TASKS
      const runnerOps = ops1.map((c, i) => c.ops - ops0[i]!.ops)
      const runnersTotal = runnerOps.reduce((a, b) => a + b, 0)
      // the submitter wrote its count at exit: the one file that is not a runner's
      const submitter = fs.readdirSync(opsDir)
        .filter((f) => !runnerPids.some((pid) => f === `${pid}.json`))
        .map((f) => JSON.parse(fs.readFileSync(path.join(opsDir, f), "utf8")) as OpsCount)
        .reduce((a, c) => a + c.ops, 0)
      const byOp: Record<string, number> = {}
      for (const [i, c] of ops1.entries()) {
        for (const [op, k] of Object.entries(c.byOp)) byOp[op] = (byOp[op] ?? 0) + k - (ops0[i]!.byOp[op] ?? 0)
      }
      const sites = new Map<string, number>()
      for (const [i, c] of ops1.entries()) {
        const before = new Map(ops0[i]!.top.map(([k, site]) => [site, k]))
        for (const [k, site] of c.top) sites.set(site, (sites.get(site) ?? 0) + k - (before.get(site) ?? 0))
      }
      const stacks = new Map<string, number>()
      for (const [i, c] of ops1.entries()) {
        const before = new Map((ops0[i]!.stacks ?? []).map(([k, site]) => [site, k]))
        for (const [k, site] of c.stacks ?? []) stacks.set(site, (stacks.get(site) ?? 0) + k - (before.get(site) ?? 0))
      }
      emit({
        bench: "cluster.ops",
        pipelines: N,
        tasks,
        ops_per_task: {
          runners: Math.round(runnersTotal / tasks),
          runners_less_idle: Math.round((runnersTotal - idleOpsPerS * s) / tasks),
          // the whole process, start to exit (0: it ran on the CLI bundle, which is not counted)
          submitter: Math.round(submitter / tasks)
        },
        runners_ops: runnerOps,
        runners_idle_ops_per_s: Math.round(idleOpsPerS),
        runners_by_op_per_task: Object.fromEntries(Object.entries(byOp).map(([op, k]) => [op, +(k / tasks).toFixed(1)])),
        ...(OPS_TOP > 0
          ? { runners_top_per_task: [...sites].sort((a, b) => b[1] - a[1]).slice(0, OPS_TOP).map(([site, k]) => [+(k / tasks).toFixed(2), site]) }
          : {}),
        ...(stacks.size > 0
          ? { runners_stacks_per_task: [...stacks].sort((a, b) => b[1] - a[1]).slice(0, Math.max(OPS_TOP, 40)).map(([site, k]) => [+(k / tasks).toFixed(2), site]) }
          : {})
      })
    }
    if (STATEMENTS) {
      const rows = (order: string) =>
        sql(
          `SELECT calls, round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1), plans, regexp_replace(left(query, 160), '\\s+', ' ', 'g') FROM pg_stat_statements
           WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY ${order} DESC LIMIT 25`
        ).split("\n").filter((l) => l !== "").map((l) => {
          const [calls, ms, planMs, plans, ...q] = l.split("|")
          return { per_pipeline: +(Number(calls) / N).toFixed(2), exec_ms: Number(ms), plan_ms: Number(planMs), plans_per_call: +(Number(plans) / Math.max(1, Number(calls))).toFixed(2), query: q.join("|") }
        })
      const [calls, ms, planMs, plans] = sql("SELECT sum(calls), round(sum(total_exec_time)::numeric, 1), round(sum(total_plan_time)::numeric, 1), sum(plans) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'").split("|").map(Number)
      if (pgSplit !== undefined) {
        // the client backends' CPU against what pg_stat_statements accounts to statements
        // (execution + planning): the rest is the protocol (parse, bind, describe, sync, the
        // socket) and the transaction control statements' own share, per statement sent
        const [txCalls, txMs] = sql(
          "SELECT coalesce(sum(calls), 0), coalesce(round(sum(total_exec_time)::numeric, 1), 0) FROM pg_stat_statements WHERE query IN ('BEGIN', 'COMMIT', 'ROLLBACK') OR query LIKE 'SAVEPOINT%' OR query LIKE 'RELEASE%'"
        ).split("|").map(Number)
        const clientS = Object.entries(pgSplit.by_kind).filter(([k]) => k.startsWith("client:")).reduce((a, [, v]) => a + v, 0)
        const perPipeline = (x: number) => +(x * 1000 / N).toFixed(3)
        emit({
          bench: "cluster.postgres",
          pipelines: N,
          cpu_s: pgSplit.total,
          cpu_ms_per_pipeline: Object.fromEntries([
            ...Object.entries(pgSplit.by_kind).map(([k, v]) => [k, perPipeline(v)]),
            ["postmaster", perPipeline(pgSplit.postmaster)],
            ["exited_unseen", perPipeline(pgSplit.exited_unseen)],
            ["total", perPipeline(pgSplit.total)]
          ]),
          processes: pgSplit.processes,
          // exact, from the server log (each automatic vacuum/analyze reports its CPU)
          autovacuum_ms_per_pipeline: perPipeline(autovacuum!.total),
          autovacuum_ms_per_pipeline_by_table: Object.fromEntries(Object.entries(autovacuum!.by_table).map(([k, v]) => [k, perPipeline(v)])),
          autovacuum_runs: autovacuum!.runs,
          client_backends_ms_per_pipeline: perPipeline(clientS),
          statements_exec_plan_ms_per_pipeline: +((ms! + planMs!) / N).toFixed(3),
          outside_statements_ms_per_pipeline: +((clientS * 1000 - ms! - planMs!) / N).toFixed(3),
          outside_statements_us_per_statement: +((clientS * 1000 - ms! - planMs!) * 1000 / Math.max(1, calls!)).toFixed(1),
          transaction_control: { per_pipeline: +(txCalls! / N).toFixed(2), exec_ms: txMs }
        })
      }
      emit({ bench: "cluster.statements", pipelines: N, per_pipeline: +(calls! / N).toFixed(1), plans_per_pipeline: +(plans! / N).toFixed(2), exec_ms_per_pipeline: +(ms! / N).toFixed(2), plan_ms_per_pipeline: +(planMs! / N).toFixed(2), by_calls: rows("calls"), by_time: rows("total_exec_time") })
    }
    if (LATENCY) {
      const steps = sql(LATENCY_SQL).split("\n").filter((l) => l !== "").map((l) => {
        const [step, mean, p50, p90, max] = l.split("|")
        return { step, mean_ms: Number(mean), p50_ms: Number(p50), p90_ms: Number(p90), max_ms: Number(max) }
      })
      // Little's law over the rows: pipelines admitted and not ended, on average over the run
      const [inFlight, spanS] = sql(
        "SELECT sum(ended_at - created_at)::float / nullif(max(ended_at) - min(created_at), 0), (max(ended_at) - min(created_at)) / 1000.0 FROM assay_pipelines"
      ).split("|").map(Number)
      emit({ bench: "cluster.latency", pipelines: N, max_admitted: MAX_ADMITTED ?? "default", in_flight_avg: Math.round(inFlight!), span_s: spanS, steps })
    }
    if (SLOTS) {
      // per runner, the intervals between two of its traces (the first has no start)
      const perRunner = blockTraces.map((lines) => {
        let rowMs = 0
        let heldMs = 0
        let held = 0
        let returned = 0
        let granted = 0
        let waited = 0
        for (let i = 1; i < lines.length; i++) {
          const dt = lines[i]!.t! - lines[i - 1]!.t!
          rowMs += lines[i]!.held! * dt
          held += lines[i]!.held!
          heldMs += lines[i]!.holdMs!
          returned += lines[i]!.returned!
          granted += lines[i]!.granted!
          waited += lines[i]!.waited!
        }
        const n = Math.max(0, lines.length - 1)
        return {
          intervals: n,
          held_mean: n === 0 ? null : +(held / n).toFixed(1),
          utilization: rowMs === 0 ? null : +(heldMs / rowMs).toFixed(3),
          hold_ms_per_lease: returned === 0 ? null : +(heldMs / returned).toFixed(1),
          waited_share: granted === 0 ? null : +(waited / granted).toFixed(3)
        }
      })
      emit({ bench: "cluster.slots", pipelines: N, runners: perRunner })
    }
    if (EVENT_LOOP) {
      // per runner, over the seconds it recorded while pipelines ran (elu above 0.05)
      const perRunner = runners.map((_, i) => {
        const file = path.join(dir, `eventloop-${i}.jsonl`)
        const lines = fs.existsSync(file)
          ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Record<string, number>)
          : []
        const busy = lines.filter((l) => l.elu! > 0.05)
        const avg = (k: string) => busy.length === 0 ? null : +(busy.reduce((a, l) => a + l[k]!, 0) / busy.length).toFixed(2)
        return { seconds: busy.length, delay_mean_ms: avg("mean"), delay_p90_ms: avg("p90"), delay_p99_ms: avg("p99"), elu: avg("elu") }
      })
      emit({ bench: "cluster.event_loop", pipelines: N, runners: perRunner })
    }
    // SIGTERM: a profiled runner writes its profile as it exits
    const exited = runners.map((r) => new Promise<void>((resolve) => r.exitCode !== null ? resolve() : r.once("exit", () => resolve())))
    for (const r of runners) r.kill(PROFILE === undefined && RUNNER_NODE_ARGS.length === 0 ? "SIGKILL" : "SIGTERM")
    await Promise.race([Promise.all(exited), sleep(60_000)])
    for (const r of runners) if (r.exitCode === null && r.signalCode === null) r.kill("SIGKILL")
  } finally {
    await pg.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * The embedded engine on the Postgres store (`assay run --store URL`, no cluster): each of
 * `EMBEDDED_PROCS` processes runs 1/N of the pipelines with a local pool of 1/N of the
 * capacity; CPU per pipeline of the processes and of Postgres, statements per pipeline.
 */
const embeddedPgRound = async (round: number, sqliteTasksPerS: number | undefined): Promise<void> => {
  const pg = await startPostgres(
    STATEMENTS ? { serverOptions: ["-c shared_preload_libraries=pg_stat_statements", "-c pg_stat_statements.track=all", "-c pg_stat_statements.track_planning=on"] } : {}
  )
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-cluster-embedded-"))
  try {
    await pg.createDatabase("bench")
    const url = pg.url("bench")
    const sql = (q: string) => pg.psql("bench", q).trim()
    execFileSync(bin, ["migrate", "--database", url], { stdio: "ignore" })
    if (STATEMENTS) sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    const files = Array.from({ length: EMBEDDED_PROCS }, (_, index) => experiment(dir, { index, of: EMBEDDED_PROCS }))
    const n = Math.floor(N / EMBEDDED_PROCS) * EMBEDDED_PROCS
    if (STATEMENTS) sql("SELECT pg_stat_statements_reset()")
    const postmaster = pg.pid()
    const pgCpu0 = pgCpu(postmaster)
    const load = uptime()
    const t0 = performance.now()
    const runs = await Promise.all(
      files.map((file, i) => timed(["run", "-c", file, "--store", url, "--quiet"], {}, dir, `embedded${i}`))
    )
    const ms = performance.now() - t0
    const pgCpuS = pgCpu(postmaster) - pgCpu0
    const failed = runs.filter((r) => r.code !== 0)
    if (failed.length > 0) throw new Error(`embedded-pg run failed: ${failed[0]!.stderr}`)
    const cpu = runs.reduce((a, r) => a + r.cpu, 0)
    const tasksPerS = (n * TASKS) / (ms / 1000)
    emit({
      bench: "cluster.embedded_pg",
      round,
      processes: EMBEDDED_PROCS,
      pipelines: n,
      succeeded: Number(sql("SELECT count(*) FROM assay_pipelines WHERE state = 'succeeded'")),
      ms: Math.round(ms),
      tasks_per_s: Math.round(tasksPerS),
      ratio_to_bound: +(tasksPerS / BOUND).toFixed(3),
      ratio_to_sqlite: sqliteTasksPerS === undefined ? null : +(tasksPerS / sqliteTasksPerS).toFixed(3),
      cpu_ms_per_pipeline: {
        processes: +(cpu * 1000 / n).toFixed(2),
        postgres: +(pgCpuS * 1000 / n).toFixed(2),
        total: +((cpu + pgCpuS) * 1000 / n).toFixed(2)
      },
      statements_per_pipeline: STATEMENTS
        ? +(Number(sql("SELECT sum(calls) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'")) / n).toFixed(2)
        : null,
      load_before: load,
      load_after: uptime()
    })
  } finally {
    await pg.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * Where a pipeline's time in flight goes (`BENCH_CLUSTER_LATENCY=1`), from the rows a cluster
 * run leaves: its admission (`assay_pipelines.created_at`, the submitter's clock), the start of
 * its window's workflow and of the window's activity (the snowflake ids of the `run` and
 * `activity` requests in `cluster_messages`: their time of creation, by the submitter and by
 * the runner), each task's first attempt (`assay_attempts.started_at`: before its lease, so
 * `attempt` is the lease's wait and the call) and its end (the checkpoint's unit is built
 * then; the next attempt starts once it committed: `commit → next attempt` is the commit's
 * latency and the next task's start), the row's end (`ended_at`), and the window's reply
 * (the snowflake of its `cluster_replies` row: when its last pipeline ended). One process's
 * clock for each pair but the admission/start and the runner's steps, all on this host.
 * Mean, median, 90th percentile and maximum in ms, per step.
 */
const LATENCY_SQL = `
WITH w AS (
  SELECT m.id AS msg, m.entity_id, (m.id >> 22) + 1735689600000 AS run_ts, x.pid AS pipeline_id
  FROM cluster_messages m, jsonb_array_elements_text(m.payload::jsonb -> 'pipelineIds') AS x(pid) WHERE m.tag = 'run'),
act AS (SELECT entity_id, min((id >> 22) + 1735689600000) AS act_ts FROM cluster_messages WHERE tag = 'activity' GROUP BY 1),
rep AS (SELECT request_id, min((id >> 22) + 1735689600000) AS rep_ts FROM cluster_replies GROUP BY 1),
a AS (SELECT pipeline_id, seq, min(started_at) s, max(ended_at) e FROM assay_attempts GROUP BY 1, 2),
x AS (
  SELECT p.created_at adm, w.run_ts, act.act_ts, rep.rep_ts, p.ended_at pend, a0.s s0, a0.e e0, a1.s s1, a1.e e1, a2.s s2, a2.e e2
  FROM assay_pipelines p JOIN w USING (pipeline_id) LEFT JOIN act USING (entity_id) LEFT JOIN rep ON rep.request_id = w.msg
  LEFT JOIN a a0 ON a0.pipeline_id = p.pipeline_id AND a0.seq = 0
  LEFT JOIN a a1 ON a1.pipeline_id = p.pipeline_id AND a1.seq = 1
  LEFT JOIN a a2 ON a2.pipeline_id = p.pipeline_id AND a2.seq = 2
  WHERE p.state = 'succeeded'),
g AS (
  SELECT 1 o, 'admitted → start sent' k, run_ts - adm v FROM x UNION ALL
  SELECT 2, 'start sent → activity', act_ts - run_ts FROM x UNION ALL
  SELECT 3, 'activity → attempt 0', s0 - act_ts FROM x UNION ALL
  SELECT 4, 'attempt 0 (lease + call)', e0 - s0 FROM x UNION ALL
  SELECT 5, 'commit → attempt 1', s1 - e0 FROM x UNION ALL
  SELECT 6, 'attempt 1', e1 - s1 FROM x UNION ALL
  SELECT 7, 'commit → attempt 2', s2 - e1 FROM x UNION ALL
  SELECT 8, 'attempt 2', e2 - s2 FROM x UNION ALL
  SELECT 9, 'attempt 2 → row ended', pend - e2 FROM x UNION ALL
  SELECT 10, 'row ended → window reply', rep_ts - pend FROM x UNION ALL
  SELECT 11, 'admitted → row ended', pend - adm FROM x)
SELECT k, round(avg(v)), percentile_disc(0.5) WITHIN GROUP (ORDER BY v), percentile_disc(0.9) WITHIN GROUP (ORDER BY v), max(v)
FROM g GROUP BY o, k ORDER BY o`

emit({ bench: "cluster.setup", pipelines: N, max_admitted: MAX_ADMITTED ?? "default", tasks: N * TASKS, claims: CLAIMS ?? "default", window_claims: WINDOW_CLAIMS, block_leases: BLOCK_LEASES, capacity: CAPACITY, task_ms: TASK_MS, bound_tasks_per_s: BOUND, cores: os.cpus().length, load: uptime() })
for (let round = 1; round <= ROUNDS; round++) {
  const sqlite = ONLY === "cluster" ? undefined : await sqliteRound(round)
  if (ONLY !== "sqlite" && ONLY !== "embedded-pg") await clusterRound(round, sqlite)
  if (EMBEDDED_PG || ONLY === "embedded-pg") await embeddedPgRound(round, sqlite)
}
