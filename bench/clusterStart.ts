/**
 * The start of a cluster command, isolated (BENCHMARKS.md start17am; run: `npx tsx
 * --conditions=assay-source bench/clusterStart.ts`; prints JSON lines): on a throwaway Postgres
 * 15 (test/support/pgServer.ts), migrated once, the wall time and CPU (user + system, from
 * `/usr/bin/time`) of
 *
 * - `assay run -c exp.json --engine cluster --database URL --limit 0 --quiet`: the submitter's
 *   whole start (runtime, config, connection and checks, the run's row), nothing admitted;
 * - `assay migrate --database URL` on the migrated database.
 *
 * Environment: `BENCH_START_TREES` (comma-separated checkouts whose `bin/assay` run, each built;
 * default this one: give a base worktree and this one to compare, the cases alternate per
 * round), `BENCH_START_ROUNDS` (default 5). Per round one line per tree, then the medians.
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { startPostgres } from "../test/support/pgServer.js"

const root = path.resolve(import.meta.dirname, "..")
const trees = (process.env.BENCH_START_TREES ?? root).split(",").filter((t) => t !== "")
const ROUNDS = Number(process.env.BENCH_START_ROUNDS ?? 5)
const load = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).map(Number)
const median = (xs: ReadonlyArray<number>) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]

const pg = await startPostgres()
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-cluster-start-"))
try {
  await pg.createDatabase("bench")
  const url = pg.url("bench")
  const file = path.join(dir, "exp.json")
  fs.writeFileSync(file, JSON.stringify({
    pools: { cpu: { resources: [{ id: "slots", capacity: 64 }] } },
    pipeline: { name: "bench", tasks: [{ use: "simulateLlm", name: "a", options: { resource: "cpu", latency: "50 millis" } }] },
    source: { range: { n: 10 } }
  }))
  execFileSync(path.join(trees[0]!, "bin/assay"), ["migrate", "--database", url], { stdio: "ignore" })
  /** Wall ms and CPU s of `bin args`; throws when it does not exit 0. */
  const time = (bin: string, args: ReadonlyArray<string>) => {
    const timeFile = path.join(dir, "time")
    const t0 = performance.now()
    const r = spawnSync("/usr/bin/time", ["-o", timeFile, "-f", "%U %S", bin, ...args], { cwd: dir, encoding: "utf8" })
    const ms = performance.now() - t0
    if (r.status !== 0) throw new Error(`${bin} ${args.join(" ")}: exit ${r.status}: ${r.stderr}`)
    const [u, s] = fs.readFileSync(timeFile, "utf8").trim().split("\n").pop()!.split(" ").map(Number)
    return { ms: Math.round(ms), cpu_s: +((u ?? 0) + (s ?? 0)).toFixed(2) }
  }
  const submit = ["run", "-c", file, "--engine", "cluster", "--database", url, "--limit", "0", "--quiet"]
  const seen = new Map<string, Array<{ ms: number; cpu_s: number }>>()
  const note = (key: string, v: { ms: number; cpu_s: number }) => seen.set(key, [...(seen.get(key) ?? []), v])
  for (let round = 1; round <= ROUNDS; round++) {
    for (const tree of trees) {
      const bin = path.join(tree, "bin/assay")
      const s = time(bin, submit)
      const m = time(bin, ["migrate", "--database", url])
      note(`${tree} submit`, s)
      note(`${tree} migrate`, m)
      console.log(JSON.stringify({ bench: "cluster_start.round", round, tree, submit: s, migrate: m, load: load() }))
    }
  }
  for (const [key, v] of seen) {
    console.log(JSON.stringify({ bench: "cluster_start.median", case: key, ms: median(v.map((x) => x.ms)), cpu_s: median(v.map((x) => x.cpu_s)), load: load() }))
  }
} finally {
  await pg.stop()
  fs.rmSync(dir, { recursive: true, force: true })
}
