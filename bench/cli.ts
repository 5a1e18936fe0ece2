/**
 * CLI start-up benchmark (run: `npm run bench:cli`; prints JSON lines).
 *
 * Cold start of `bin/assay` as a user runs it, each command spawned as a fresh process, side
 * by side in one run with `node -e 0` (bare Node's own start): `--help`, `validate -c
 * examples/experiments/delay.yaml`, `report STORE` (a small store of 8 pipelines made first).
 * For comparison, the same three on the unbundled runtime (`dist/cli/bin.js`, what commands
 * that load user code use) and a TypeScript experiment (`validate -c delay.ts`, which takes
 * that path and registers tsx).
 *
 * Each case runs BENCH_RUNS times (default 10) after one warm-up (file cache), interleaved with
 * the other cases; the best run counts. Wall time from `performance.now()` around the spawn;
 * CPU time (user + system) of the child from bash's `times`. Keys: `best_wall_ms`,
 * `median_wall_ms`, `best_cpu_ms`, `ratio_to_node` (best wall / bare node's best wall),
 * `cpu_ratio_to_node`, `target_ms` (250, for the three fast-start commands) and `load1` (the
 * machine's 1-minute load average when the case finished: other processes inflate wall time).
 *
 * Needs `npm run build` first (bin/assay runs dist/).
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const runs = Number(process.env["BENCH_RUNS"] ?? 10)
const bin = path.join(root, "bin/assay")
const yaml = path.join(root, "examples/experiments/delay.yaml")
const tsExperiment = path.join(root, "examples/experiments/delay.ts")
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "assay-bench-cli-"))
const store = path.join(tmp, "small.db")

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`
const unbundled = (args: ReadonlyArray<string>) => [
  process.execPath,
  "--input-type=module",
  "-e",
  `const m = await import(${JSON.stringify(path.join(root, "dist/cli/bin.js"))}); m.runFull(["node", "assay", ...process.argv.slice(1)])`,
  "--",
  ...args
]

interface Case {
  readonly name: string
  readonly argv: ReadonlyArray<string>
  readonly target?: number
}

const cases: ReadonlyArray<Case> = [
  { name: "node -e 0", argv: [process.execPath, "-e", "0"] },
  { name: "assay --help", argv: [bin, "--help"], target: 250 },
  { name: "assay validate -c delay.yaml", argv: [bin, "validate", "-c", yaml], target: 250 },
  { name: "assay report STORE", argv: [bin, "report", store], target: 250 },
  { name: "unbundled --help", argv: unbundled(["--help"]) },
  { name: "unbundled validate -c delay.yaml", argv: unbundled(["validate", "-c", yaml]) },
  { name: "unbundled report STORE", argv: unbundled(["report", store]) },
  { name: "assay validate -c delay.ts (tsx)", argv: [bin, "validate", "-c", tsExperiment] }
]

/** One cold start: wall ms, and the child's CPU ms from bash's `times` (children's line). */
const once = (argv: ReadonlyArray<string>): { wall: number; cpu: number } => {
  const script = `${argv.map(quote).join(" ")} >/dev/null 2>&1; s=$?; times; exit $s`
  const start = performance.now()
  const r = spawnSync("bash", ["-c", script], { encoding: "utf8", cwd: tmp })
  const wall = performance.now() - start
  if (r.status !== 0) throw new Error(`${argv.join(" ")} exited ${r.status}: ${r.stderr}`)
  const line = r.stdout.trim().split("\n")[1] ?? ""
  const secs = [...line.matchAll(/(\d+)m([\d.]+)s/g)].map((m) => Number(m[1]) * 60 + Number(m[2]))
  return { wall, cpu: (secs[0]! + secs[1]!) * 1000 }
}

try {
  const made = spawnSync(bin, ["run", "-c", yaml, "--store", store, "--quiet"], { encoding: "utf8" })
  if (made.status !== 0) throw new Error(`cannot make the store: ${made.stderr}`)
  const samples = new Map<string, Array<{ wall: number; cpu: number }>>(cases.map((c) => [c.name, []]))
  for (const c of cases) once(c.argv) // warm-up: file cache
  for (let i = 0; i < runs; i++) {
    for (const c of cases) samples.get(c.name)!.push(once(c.argv))
  }
  const best = (name: string, key: "wall" | "cpu") => Math.min(...samples.get(name)!.map((s) => s[key]))
  const nodeWall = best("node -e 0", "wall")
  const nodeCpu = best("node -e 0", "cpu")
  for (const c of cases) {
    const walls = samples.get(c.name)!.map((s) => s.wall).sort((a, b) => a - b)
    const line = {
      bench: "cli",
      case: c.name,
      runs,
      best_wall_ms: Math.round(best(c.name, "wall")),
      median_wall_ms: Math.round(walls[Math.floor(walls.length / 2)]!),
      best_cpu_ms: Math.round(best(c.name, "cpu")),
      ratio_to_node: Number((best(c.name, "wall") / nodeWall).toFixed(2)),
      cpu_ratio_to_node: Number((best(c.name, "cpu") / Math.max(1, nodeCpu)).toFixed(2)),
      ...(c.target !== undefined ? { target_ms: c.target, within_target: best(c.name, "wall") <= c.target } : {}),
      load1: Number(os.loadavg()[0]!.toFixed(2)),
      cores: os.cpus().length
    }
    process.stdout.write(`${JSON.stringify(line)}\n`)
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true })
}
