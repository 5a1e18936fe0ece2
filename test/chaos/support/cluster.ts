/**
 * The chaos suite's harness (issue 17, research/distributed.md §7): real `assay runner`
 * processes and a real `assay run --engine cluster` submitter on one Postgres database,
 * tasks calling the fake provider (`provider.ts`), and the faults the scenarios need:
 * kill -9, SIGSTOP / SIGCONT, restart of a runner, Postgres restart (`PgServer.restart`).
 *
 * The experiment (see {@link writeExperiment}) is `rows` pipelines of three `chat` tasks
 * `a`, `b`, `c` on the pool `llm`; each task's system message is its name and its user
 * message the row, so every provider call is keyed `"<task>|<row>"`.
 *
 * Timings are short so that a scenario takes well under a minute: the cluster's intervals come
 * from the environment (`@effect/cluster` reads `ShardingConfig` from constant-case
 * variables, see {@link clusterEnv}); the pool lease TTL is the runner's default (30 s; the
 * runners get no `--lease-ttl`: C5 pauses a runner past the shard lock expiry and within
 * that TTL).
 *
 * Every process started here is stopped by its own pid ({@link Cluster.shutdown}).
 */
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { spawnSync } from "node:child_process"
import { Duration } from "effect"
import { bin, type CliProcess, root, sleep, start, write } from "../../support/cli.js"
import type { PgServer } from "../../support/pgServer.js"
import type { FakeProvider } from "./provider.js"

/** The three tasks of every pipeline, in order (their seqs are 0, 1, 2). */
export const TASKS = ["a", "b", "c"] as const

/** Cluster settings for tests (lock expiry, polls) as the environment `@effect/cluster` reads. */
export interface ClusterTimings {
  readonly shardsPerGroup: number
  readonly lockRefresh: string
  readonly lockExpiration: string
  readonly poll: string
  readonly refreshAssignments: string
  /** `true`: shard locks are rows with an expiry (no advisory locks). */
  readonly disableAdvisory: boolean
}

/**
 * Timings for a loaded 2-core machine: short polls, and a shard lock refresh of 3 s with an
 * expiry of 10 s. `@effect/cluster` 0.60 gives each lock refresh (the statement with its
 * retries) one refresh interval, `min(refresh, expiry / 3)`, and when it is late releases
 * every shard of the runner (its activities are interrupted and run again once the shards are
 * back). The proof of concept's 1 s / 6 s timed out at load 20 and above (every scenario then
 * saw shards moving without a fault); 3 s of slack rides out the stalls seen at load 30-40.
 * `ASSAY_CHAOS_LOCK_REFRESH` and `ASSAY_CHAOS_LOCK_EXPIRATION` (durations, e.g. `5 seconds`)
 * override them. What production should use: docs/scale-out.md "Shard lock timings".
 */
export const fastTimings: ClusterTimings = {
  shardsPerGroup: 30,
  lockRefresh: process.env.ASSAY_CHAOS_LOCK_REFRESH ?? "3 seconds",
  lockExpiration: process.env.ASSAY_CHAOS_LOCK_EXPIRATION ?? "10 seconds",
  poll: "300 millis",
  refreshAssignments: "500 millis",
  disableAdvisory: false
}

/**
 * How the runners claim work (`ASSAY_CHAOS_CLAIMS`): `blocks`, the runner's default since
 * pg17af (window claims and block leases: no flag passed); `window`, window claims with a slot
 * claim per task (`--no-block-leases`); `per-task`, a claim, a fence and a slot claim per task
 * (`--no-window-claims`). Run the suite once per mode to cover each; the default covers what
 * users get. The spellings of before pg17af (`ASSAY_CHAOS_WINDOW_CLAIMS=1` with or without
 * `ASSAY_CHAOS_BLOCK_LEASES=1`, when the default was per-task) are no longer read.
 */
export type ClaimMode = "blocks" | "window" | "per-task"

/** The mode of this run (see {@link ClaimMode}); an unknown value fails the suite at once. */
export const claimMode: ClaimMode = (() => {
  const v = process.env.ASSAY_CHAOS_CLAIMS ?? "blocks"
  if (v === "blocks" || v === "window" || v === "per-task") return v
  throw new Error(`ASSAY_CHAOS_CLAIMS=${v}: expected blocks, window or per-task`)
})()

/** Whether the runners run with window claims ({@link claimMode} `blocks` or `window`). */
export const windowClaims = claimMode !== "per-task"

/** Whether the runners also hold block leases ({@link claimMode} `blocks`). */
export const blockLeases = claimMode === "blocks"

/** The `assay runner` flags of {@link claimMode}. */
export const claimFlags: ReadonlyArray<string> = claimMode === "per-task"
  ? ["--no-window-claims"]
  : claimMode === "window"
  ? ["--no-block-leases"]
  : []

/** A duration of {@link ClusterTimings} in milliseconds. */
export const timingMs = (d: string): number => Duration.toMillis(Duration.decode(d as Duration.DurationInput))

/** The environment variables of {@link ClusterTimings} (constant case, as `ShardingConfig.layerFromEnv` reads them). */
export const clusterEnv = (t: ClusterTimings): Record<string, string> => ({
  SHARDS_PER_GROUP: String(t.shardsPerGroup),
  SHARD_LOCK_REFRESH_INTERVAL: t.lockRefresh,
  SHARD_LOCK_EXPIRATION: t.lockExpiration,
  ENTITY_MESSAGE_POLL_INTERVAL: t.poll,
  REFRESH_ASSIGNMENTS_INTERVAL: t.refreshAssignments,
  RUNNER_HEALTH_CHECK_INTERVAL: "1 second",
  SHARD_LOCK_DISABLE_ADVISORY: String(t.disableAdvisory),
  CHAOS_KEY: "sk-chaos-not-a-secret"
})

/** One resource of the pool `llm`. */
export interface ResourceDecl {
  readonly id: string
  readonly capacity: number
}

/** What {@link writeExperiment} writes. */
export interface ExperimentDecl {
  readonly rows: number
  readonly resources: ReadonlyArray<ResourceDecl>
  readonly algorithm?: string | undefined
  /** Extra resource fields (e.g. `degradeAfter`, `deadAfter`, `cooldown`). */
  readonly resourceExtra?: Record<string, unknown> | undefined
  /**
   * Pipelines that declare `control` (see {@link writeExperiment}): task `b` (no call)
   * rewinds `a` once with the value `"<row>#1"`, then passes `{ input: row }` on.
   */
  readonly control?: boolean | undefined
}

/**
 * The plugin of a control experiment: task `rewinder` (the built-in `judge` would win over a
 * plugin's task of that name), which rewinds `a` on its first visit (a's second visit is
 * called with `"<row>#1"`, keyed `a|<row>#1`) and passes the row on after.
 */
const rewinderPlugin = [
  `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
  `import * as Handoff from ${JSON.stringify(path.join(root, "src/domain/Handoff.ts"))}`,
  `export const tasks = {`,
  `  rewinder: Task.sync("rewinder", (answer: any, ctx: any) => {`,
  `    const row = String(answer.input).split("#")[0]`,
  `    return ctx.visit === 0 ? Handoff.rewind("a", row + "#1", { reason: "first answer refused" }) : { input: row }`,
  `  })`,
  `}`
].join("\n")

/**
 * Writes the experiment file of the suite into `dir` (see the module header); with
 * `decl.control`, `a → b → c` where `b` is the `rewinder` of {@link rewinderPlugin} (written
 * beside it) and `c` is called with the row.
 */
export const writeExperiment = (dir: string, provider: FakeProvider, decl: ExperimentDecl): string => {
  if (decl.control === true) write(dir, "rewinder.ts", rewinderPlugin)
  return write(dir, "exp.json", {
    ...(decl.control === true ? { plugins: ["./rewinder.ts"] } : {}),
    pools: {
      llm: {
        ...(decl.algorithm === undefined ? {} : { algorithm: decl.algorithm }),
        resources: decl.resources.map((r) => ({
          id: r.id,
          capacity: r.capacity,
          ...decl.resourceExtra,
          options: { baseUrl: provider.baseUrl(r.id), model: "fake-1", apiKeyEnv: "CHAOS_KEY" }
        }))
      }
    },
    pipeline: decl.control === true
      ? {
        name: "chaos-control",
        tasks: [
          { use: "chat", name: "a", options: { system: "a", template: "{{.}}" } },
          { use: "rewinder", name: "b" },
          { use: "chat", name: "c", options: { system: "c", template: "{{input}}" } }
        ],
        control: { rewind: { b: ["a"] }, maxHandoffs: 2 }
      }
      : {
        name: "chaos",
        tasks: [
          { use: "chat", name: "a", options: { system: "a", template: "{{.}}" } },
          { use: "chat", name: "b", options: { system: "b", template: "{{input}}" } },
          { use: "chat", name: "c", options: { system: "c", template: "{{input.input}}" } }
        ]
      },
    source: { range: { n: decl.rows } }
  })
}

/** A runner process of the harness. */
export interface RunnerProc {
  readonly index: number
  readonly port: number
  proc: CliProcess
  /** Every stderr line of every incarnation of this runner (for diagnostics). */
  readonly log: () => string
}

/** A running cluster: its runners, the experiment, and the faults. */
export interface Cluster {
  readonly url: string
  readonly db: string
  readonly file: string
  readonly dir: string
  readonly runners: Array<RunnerProc>
  /** Starts one more runner (a runner joining the cluster); its index. */
  readonly join: () => Promise<number>
  /** Starts runner `i` again (after a kill), on its port. */
  readonly restart: (i: number) => Promise<void>
  /** kill -9 of runner `i`; resolves once the process is gone (its last request may land just before). */
  readonly kill9: (i: number) => Promise<void>
  readonly pause: (i: number) => void
  readonly resume: (i: number) => void
  /** The submitters started so far. */
  readonly submitters: ReadonlyArray<CliProcess>
  /** Starts the submitter (`assay run --engine cluster`), with `--max-admitted`. */
  readonly submit: (maxAdmitted: number) => CliProcess
  /** SQL on the cluster's database (psql, `-At`). */
  readonly sql: (query: string) => string
  /** Stops every process this cluster started (by pid), SIGCONT first for a paused one. */
  readonly shutdown: () => Promise<void>
}

/** Runs `bin/assay args` to completion (synchronously), failing with its output when it fails. */
const assaySync = (args: ReadonlyArray<string>, env: Record<string, string>): string => {
  const r = spawnSync(bin, [...args], { cwd: root, env: { ...process.env, ...env }, encoding: "utf8", timeout: 180_000 })
  if (r.status !== 0) throw new Error(`assay ${args[0]} failed (${r.status ?? r.signal}): ${r.stderr}${r.stdout}`)
  return r.stdout
}

/**
 * What a runner that exited during its start-up left, for the test's error: its exit code or
 * signal and its whole stderr and stdout (the cluster's own logs), read once the process has
 * closed its pipes. `exitCode` is set at the process's exit, before the last of its output is
 * read: a report made then cut the runner's error message short (pg17af).
 */
export const exitReport = async (index: number, proc: CliProcess): Promise<string> => {
  const ran = await proc.done
  return `runner ${index} exited (${ran.code ?? ran.signal}) during start-up\n--- stderr ---\n${ran.stderr}\n--- stdout ---\n${ran.stdout}`
}

/** A port free on loopback now (the kernel's choice: a fixed range collides with other processes' sockets). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * Creates database `db`, migrates it (`assay migrate`, L6), writes the experiment, starts `n`
 * runners at once and waits until they have registered and hold every shard between them.
 */
export const startCluster = async (options: {
  readonly pg: PgServer
  readonly db: string
  readonly provider: FakeProvider
  readonly experiment: ExperimentDecl
  readonly runners?: number
  readonly timings?: ClusterTimings
}): Promise<Cluster> => {
  const { pg, db } = options
  await pg.createDatabase(db)
  const url = pg.url(db)
  const env = clusterEnv(options.timings ?? fastTimings)
  assaySync(["migrate", "--database", url], env)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `chaos-${db}-`))
  const file = writeExperiment(dir, options.provider, options.experiment)
  const sql = (query: string) => pg.psql(db, query)
  const runners: Array<RunnerProc> = []
  const ports: Array<number> = []
  for (let i = 0; i < (options.runners ?? 3); i++) ports.push(await freePort())
  const spawnRunner = (i: number, port: number): CliProcess =>
    start([
      "runner",
      "-c",
      file,
      "--database",
      url,
      "--listen",
      `127.0.0.1:${port}`,
      "--concurrency",
      "64",
      ...claimFlags
    ], { cwd: dir, env })
  const logs: Array<Array<CliProcess>> = []
  const launch = (i: number) => {
    const proc = spawnRunner(i, ports[i]!)
    ;(logs[i] ??= []).push(proc)
    return proc
  }
  const n = options.runners ?? 3
  const registered = () => {
    try {
      return Number(sql("SELECT count(*) FROM cluster_runners WHERE healthy").trim())
    } catch {
      return 0
    }
  }
  // all at once: `assay migrate` created every table, so no runner creates any (as in production)
  for (let i = 0; i < n; i++) {
    const proc = launch(i)
    runners.push({ index: i, port: ports[i]!, proc, log: () => (logs[i] ?? []).map((p) => p.stderr()).join("\n--- restart ---\n") })
  }
  const waitReady = async () => {
    const t0 = Date.now()
    while (registered() < n) {
      if (Date.now() - t0 > 90_000) throw new Error(`only ${registered()} of ${n} runners registered`)
      const exited = runners.find((r) => r.proc.child.exitCode !== null || r.proc.child.signalCode !== null)
      if (exited !== undefined) {
        const report = await exitReport(exited.index, exited.proc)
        // printed whole as well: a test runner may shorten an error's message
        console.error(report)
        throw new Error(report)
      }
      await sleep(200)
    }
    // wait for the shards to settle (every shard locked, by n runners): a shard that moves while
    // a workflow runs on it re-runs that workflow's activity in flight on its new owner, which the
    // scenarios would count as a repeat before any fault
    const timings = options.timings ?? fastTimings
    const settled = () => {
      try {
        const [owners, locks] = (timings.disableAdvisory
          ? sql("SELECT count(DISTINCT address), count(*) FROM cluster_locks")
          : sql(
            "SELECT count(DISTINCT pid), count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
          )).trim().split("|").map(Number)
        return owners === n && locks === timings.shardsPerGroup
      } catch {
        return false
      }
    }
    const t1 = Date.now()
    while (!settled()) {
      if (Date.now() - t1 > 90_000) throw new Error("the shards did not settle over the runners within 90 s")
      await sleep(250)
    }
  }
  try {
    await waitReady()
  } catch (e) {
    // a cluster that never got ready is stopped here: the scene has no cluster to shut down, and
    // runners left alive (seen: nine of them after a run at load 30) load every later scenario
    for (const r of runners) {
      if (r.proc.child.exitCode === null && r.proc.child.signalCode === null) r.proc.child.kill("SIGKILL")
    }
    await Promise.all(runners.map((r) => r.proc.done))
    fs.rmSync(dir, { recursive: true, force: true })
    throw e
  }
  const signal = (i: number, sig: NodeJS.Signals) => {
    const child = runners[i]!.proc.child
    if (child.exitCode === null && child.signalCode === null) child.kill(sig)
  }
  const submitters: Array<CliProcess> = []
  return {
    url,
    db,
    file,
    dir,
    runners,
    submitters,
    sql,
    kill9: async (i) => {
      signal(i, "SIGKILL")
      await runners[i]!.proc.done
    },
    pause: (i) => signal(i, "SIGSTOP"),
    resume: (i) => signal(i, "SIGCONT"),
    join: async () => {
      const i = runners.length
      ports[i] = await freePort()
      const proc = launch(i)
      runners.push({ index: i, port: ports[i]!, proc, log: () => (logs[i] ?? []).map((p) => p.stderr()).join("\n--- restart ---\n") })
      return i
    },
    restart: async (i) => {
      await runners[i]!.proc.done
      runners[i]!.proc = launch(i)
    },
    submit: (maxAdmitted) => {
      const p = start(["run", "-c", file, "--engine", "cluster", "--database", url, "--max-admitted", String(maxAdmitted)], {
        cwd: dir,
        env
      })
      submitters.push(p)
      return p
    },
    shutdown: async () => {
      const all = [...runners.map((r) => r.proc), ...submitters]
      for (const p of all) {
        if (p.child.exitCode === null && p.child.signalCode === null) {
          p.child.kill("SIGCONT")
          p.child.kill("SIGKILL")
        }
      }
      await Promise.all(all.map((p) => p.done))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}
