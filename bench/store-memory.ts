/**
 * Run memory with big outputs (issue 19 §3; run: `npx tsx bench/store-memory.ts`; prints JSON
 * lines). Each case runs in its own child process so that its peak RSS (`VmHWM` of
 * /proc/self/status, the kernel's high-water mark) is its own:
 *
 * - `tiny`: the same run with 1 KB outputs (what the runtime itself costs);
 * - `json-4mb`: every pipeline's one task returns a fresh 4 MB string (JSON codec);
 * - `bytes-4mb`: every task returns a fresh 4 MB `Uint8Array` (bytes codec).
 *
 * `BENCH_OUTPUTS` (default 500) pipelines at `BENCH_CONCURRENCY` (default 20), SqliteStore on a
 * temp file. Each line: peak RSS (MB), wall and CPU time (ms), and `cpu_ratio` = CPU / wall.
 */
import { Effect, Layer } from "effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"
import * as Pipeline from "../src/domain/Pipeline.js"
import * as Task from "../src/domain/Task.js"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as Pool from "../src/services/Pool.js"
import * as Runner from "../src/services/Runner.js"

const N = Number(process.env.BENCH_OUTPUTS ?? 500)
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 20)
const MB = 1024 * 1024
const CASES = ["tiny", "json-4mb", "bytes-4mb"] as const
type Case = typeof CASES[number]

const peakRssMb = () => {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync("/proc/self/status", "utf8"))
  return m === null ? NaN : Number(m[1]) / 1024
}

/** A fresh flat string of `size` ASCII characters, distinct per `i` (as a task gets one from a body). */
const text = (i: number, size: number) => {
  const b = Buffer.alloc(size, 97 + (i % 26))
  b.write(`${i}:`, 0, "latin1")
  return b.toString("latin1")
}

const output = (c: Case): Task.Task<number, unknown, unknown> => {
  switch (c) {
    case "tiny":
      return Task.sync("tiny", (i: number) => text(i, 1024))
    case "json-4mb":
      return Task.sync("json4", (i: number) => text(i, 4 * MB))
    case "bytes-4mb":
      return Task.sync("bytes4", (i: number) => {
        const b = new Uint8Array(4 * MB)
        b.fill(97 + (i % 26))
        b[0] = i & 0xff
        return b
      })
  }
}

const child = async (c: Case) => {
  const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-mem-"))
  const file = nodePath.join(dir, "mem.db")
  const template = Pipeline.make(`mem-${c}`, output(c))
  const seeds = Array.from({ length: N }, (_, i) => i)
  // what holds the memory: sampled as each pipeline finishes (V8 heap, buffers outside it, RSS)
  const peak = { heap: 0, external: 0, rss: 0 }
  const sample = () =>
    Effect.sync(() => {
      const m = process.memoryUsage()
      peak.heap = Math.max(peak.heap, m.heapTotal)
      peak.external = Math.max(peak.external, m.external)
      peak.rss = Math.max(peak.rss, m.rss)
      if (process.env.BENCH_GC === "1") (globalThis as { gc?: () => void }).gc?.()
    })
  const layer = Layer.provideMerge(
    Runner.layer({ concurrency: CONCURRENCY, handleSignals: false, onPipelineFinished: sample }),
    Layer.mergeAll(SqliteStore.layer({ filename: file }), Pool.layer([]))
  )
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const report = await Effect.runPromise(Effect.scoped(Runner.run(template.map(seeds)).pipe(Effect.provide(layer))))
  const wallMs = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  const cpuMs = (cpu.user + cpu.system) / 1000
  const dbMb = fs.statSync(file).size / MB
  fs.rmSync(dir, { recursive: true, force: true })
  console.log(JSON.stringify({
    bench: "run-memory",
    case: c,
    outputs: N,
    concurrency: CONCURRENCY,
    succeeded: report.stats.byState.succeeded,
    peak_rss_mb: Math.round(peakRssMb()),
    heap_total_mb: Math.round(peak.heap / MB),
    external_mb: Math.round(peak.external / MB),
    wall_ms: Math.round(wallMs),
    cpu_ms: Math.round(cpuMs),
    cpu_ratio: Number((cpuMs / wallMs).toFixed(2)),
    db_mb: Math.round(dbMb)
  }))
}

const which = process.argv[2] as Case | undefined
if (which !== undefined) {
  await child(which)
} else {
  console.log(JSON.stringify({ bench: "run-memory", load: os.loadavg().map((x) => Number(x.toFixed(2))), cores: os.cpus().length }))
  const self = fileURLToPath(import.meta.url)
  for (const c of CASES) {
    const r = spawnSync(process.execPath, ["--import", "tsx", self, c], { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" })
    process.stdout.write(r.stdout)
  }
}
