/**
 * Where a runner case's SQL time goes, statement by statement (run:
 * `BENCH_CASES=sqlite_rewind_once BENCH_ROUNDS=1 npx tsx bench/sql-cost.ts throughput`;
 * prints JSON lines after the runner's own).
 *
 * Wraps better-sqlite3's `Statement.run`/`all`/`get` with `process.cpuUsage`, then runs
 * `bench/runner.ts` in this same process (its `throughput` mode: pass `throughput` as the
 * first argument; its environment — BENCH_PIPELINES, BENCH_ROUNDS, BENCH_CASES — applies). At
 * exit, one line per statement text (its first 90 characters), the most expensive first:
 * `per_pipeline` (executions per pipeline) and `cpu_us_per_pipeline` (CPU µs per pipeline,
 * BENCH_PIPELINES × BENCH_ROUNDS pipelines). Run one case at a time: the figures sum over
 * every case that ran.
 *
 * Caveat: `process.cpuUsage` is the whole process's CPU, so a statement's figure includes
 * what V8's background threads (concurrent marking, parallel scavenges) did meanwhile; a case
 * that allocates more reads a little dearer on every statement. Compare cases' figures as
 * upper bounds, and statements within one case.
 */
import Database from "better-sqlite3"

const N = Number(process.env.BENCH_PIPELINES ?? 20_000) * Number(process.env.BENCH_ROUNDS ?? 2)
type Method = "run" | "all" | "get"
const proto = Object.getPrototypeOf(new Database(":memory:").prepare("SELECT 1")) as Record<
  Method,
  (this: Database.Statement, ...args: Array<unknown>) => unknown
>
const spent = new Map<string, { n: number; us: number }>()
for (const m of ["run", "all", "get"] as const) {
  const original = proto[m]
  proto[m] = function(this: Database.Statement, ...args: Array<unknown>) {
    const text = `${m} ${this.source.replace(/\s+/g, " ").slice(0, 90)}`
    const t0 = process.cpuUsage()
    try {
      return original.apply(this, args)
    } finally {
      const d = process.cpuUsage(t0)
      const s = spent.get(text) ?? { n: 0, us: 0 }
      s.n++
      s.us += d.user + d.system
      spent.set(text, s)
    }
  }
}
process.on("exit", () => {
  for (const [statement, s] of [...spent].sort((a, b) => b[1].us - a[1].us).slice(0, 20)) {
    console.log(JSON.stringify({
      bench: "sql_cost.statement",
      statement,
      per_pipeline: +(s.n / N).toFixed(4),
      cpu_us_per_pipeline: +(s.us / N).toFixed(2)
    }))
  }
})
await import("./runner.js")
