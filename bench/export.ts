/**
 * Export benchmark (run: `npx tsx bench/export.ts`; prints JSON lines).
 *
 * 1. Builds a store of `BENCH_PIPELINES` (default 100k) finished pipelines of 3 tasks each
 *    through the store API's batch writes (`admit` with seeds, then one `checkpoint` per task
 *    from 64 fibers, group-committed); one pipeline in 10 is `failed`.
 * 2. Exports every pipeline as `results` and as nested `pipelines`, to jsonl and csv, through
 *    `Export.exportStores` (read-only store + `Store.loadBundles`), and beside each kind a raw
 *    export: better-sqlite3 iterating the same rows (same joins, pages of 1000), `JSON.parse`
 *    of the payloads, `JSON.stringify` of each row, one buffered write stream. It reads the
 *    schema-v3 way: child rows by the page's pipeline numbers (`pno IN (…)`, the leading
 *    column of `tasks`' key and of `artifacts_pipeline`), in `pno, seq` order; `pipeline_id`
 *    is not indexed in those tables any more, so a `pipeline_id IN (…)` read would scan them.
 *    A store below schema version 3 is refused (delete it and let the bench rebuild it).
 *    `ratio_to_raw` = export rows/s ÷ raw rows/s of the same kind (the raw export is jsonl).
 *    `rss_peak_mb` is the peak resident set sampled every 20 ms during that export, beside
 *    `rss_start_mb`: memory is flat when the peak does not grow with the number of rows.
 *    `cpu_s` / `cpu_ratio_to_raw`: the same from `process.cpuUsage` (all threads), which a
 *    loaded machine disturbs less than the wall clock.
 * 3. `BENCH_ROUNDS` (default 1) repeats step 2; `BENCH_KINDS` / `BENCH_FORMATS` pick a subset.
 * 4. Memory (`BENCH_MEMORY=0` skips it, `BENCH_THROUGHPUT=0` skips steps 1–3): three stores of
 *    one run each, built through the store API, every pipeline a small seed plus outputs of a
 *    given size: `tiny` (1,000 pipelines, ~100 B outputs), `20kx50KB` (20,000 × 50 KB) and
 *    `500x4MB` (500 × 4 MB); `BENCH_MEM_SCALE=0.1` builds a tenth of the pipelines of the two
 *    big ones (same payload sizes). Each is exported by the real CLI (`bin/assay export`, or
 *    `BENCH_ASSAY_BIN` to measure another checkout) as `pipelines` jsonl, `results` csv and
 *    `artifacts` jsonl, one child process per export; `rss_peak_mb` is the child's `VmHWM`
 *    (peak resident set, read from `/proc/<pid>/status` every 20 ms), `ratio_to_tiny` its
 *    ratio to the tiny store's export of the same kind. `BENCH_MEM_DIR=dir` keeps the stores
 *    there between runs (built once).
 */
import Database from "better-sqlite3"
import { spawn } from "node:child_process"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { digest } from "../src/domain/Json.js"
import { PipelineRecord, TaskRecord } from "../src/domain/Records.js"
import * as SqliteStore from "../src/layers/SqliteStore.js"
import * as StoreResolver from "../src/layers/StoreResolver.js"
import * as Export from "../src/services/Export.js"
import type { NewArtifact } from "../src/services/Store.js"
import { Store } from "../src/services/Store.js"
import { PipelineId, RunId } from "../src/domain/Ids.js"

const N = Number(process.env.BENCH_PIPELINES ?? 100_000)
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-export-"))
/** `BENCH_STORE=path`: reuse (or build once and keep) a store file between runs. */
const keep = process.env.BENCH_STORE
const file = keep ?? nodePath.join(dir, "store.db")
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))
const mb = (b: number) => Math.round(b / 1048576)

const enc = new TextEncoder()
const artifact = (id: string, seq: number, value: unknown, isFinal: boolean, at: number): NewArtifact => {
  const payload = enc.encode(JSON.stringify(value))
  return {
    pipelineId: PipelineId.make(id), runId: RunId.make("bench"), seq, taskName: seq < 0 ? null : `t${seq}`, typeName: "json", codec: "json",
    digest: digest(payload), payload, isFinal, createdAt: at
  }
}

const build = Effect.gen(function*() {
  const store = yield* Store
  const t0 = performance.now()
  yield* store.openRun({ runId: RunId.make("bench"), startedAt: 1000 })
  const BATCH = 1000
  for (let from = 0; from < N; from += BATCH) {
    const ids = Array.from({ length: Math.min(BATCH, N - from) }, (_, k) => from + k)
    const failed = (i: number) => i % 10 === 9
    const at = (i: number) => 1000 + Math.floor(i / 3) // equal createdAt across pipelines
    yield* store.admit(
      ids.map((i) =>
        new PipelineRecord({
          pipelineId: PipelineId.make(`p${String(i).padStart(7, "0")}`), key: null, name: "bench", state: failed(i) ? "failed" : "succeeded",
          nTasksDone: failed(i) ? 2 : 3, nTasksTotal: 3, specDigest: "spec", seedDigest: `seed${i}`, tags: {},
          attemptsTotal: 3, runId: RunId.make("bench"), createdAt: at(i), updatedAt: at(i) + 5, startedAt: at(i), endedAt: at(i) + 5,
          failedTask: failed(i) ? "t2" : null, errorType: failed(i) ? "FatalError" : null,
          errorMessage: failed(i) ? "bad row" : null, errorClass: failed(i) ? "fatal" : null
        })
      ),
      ids.map((i) => artifact(`p${String(i).padStart(7, "0")}`, -1, { row: i, text: "lorem ipsum dolor sit amet" }, false, at(i)))
    )
    yield* Effect.forEach(
      ids.flatMap((i) => [0, 1, 2].filter((seq) => !(failed(i) && seq === 2)).map((seq) => [i, seq] as const)),
      ([i, seq]) => {
        const id = `p${String(i).padStart(7, "0")}`
        return store.checkpoint({
          pipelineId: PipelineId.make(id),
          artifact: artifact(id, seq, { row: i, seq, answer: `value ${i * seq}`, score: seq / 3 }, seq === 2, at(i)),
          task: new TaskRecord({
            taskRunId: `${id}/${seq}`, pipelineId: PipelineId.make(id), runId: RunId.make("bench"), seq, taskName: `t${seq}`, state: "succeeded",
            attemptsUsed: 1, startedAt: at(i), endedAt: at(i) + 1, durationMs: 1, errorType: null, errorMessage: null,
            errorClass: null, leaseIds: []
          })
        })
      },
      { concurrency: 64, discard: true }
    )
  }
  yield* store.finishRun(RunId.make("bench"), { status: "completed", endedAt: 2000 })
  emit({ bench: "build", pipelines: N, seconds: +((performance.now() - t0) / 1000).toFixed(2) })
})

const sampleRss = () => {
  let peak = process.memoryUsage().rss
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss)
  }, 20)
  return () => {
    clearInterval(timer)
    return Math.max(peak, process.memoryUsage().rss)
  }
}

/** The raw export: better-sqlite3, same rows and joins, JSON.stringify, one buffered stream. */
const raw = async (kind: "results" | "pipelines", out: string): Promise<number> => {
  const db = new Database(file, { readonly: true })
  const ws = fs.createWriteStream(out, { highWaterMark: 1 << 20 })
  const write = (s: string) => (ws.write(s) ? Promise.resolve() : new Promise<void>((r) => ws.once("drain", () => r())))
  const page = db.prepare("SELECT * FROM pipelines WHERE (created_at, pipeline_id) > (?, ?) ORDER BY created_at, pipeline_id LIMIT 1000")
  const marks = "?,".repeat(999) + "?"
  // schema v3: child rows by pipeline number, the leading column of their per-pipeline keys
  const finals = db.prepare(`SELECT pipeline_id, payload FROM artifacts WHERE pno IN (${marks}) AND is_final = 1`)
  const tasks = db.prepare(`SELECT * FROM tasks WHERE pno IN (${marks}) ORDER BY pno, seq, task_run_id`)
  const arts = db.prepare(`SELECT * FROM artifacts WHERE pno IN (${marks}) ORDER BY pno, seq, artifact_id`)
  const dec = new TextDecoder()
  let n = 0
  let cursor: [number, string] = [-1, ""]
  for (;;) {
    const ps = page.all(...cursor) as Array<Record<string, any>>
    if (ps.length === 0) break
    // pad with -1: never a pipeline number (0 is the number of unadmitted child rows); `pno`
    // is left out of the output (`undefined`), so the raw rows are the same as before v3
    const padded = ps.map((p) => p.pno as number).concat(Array(1000 - ps.length).fill(-1))
    let s = ""
    if (kind === "results") {
      const f = new Map((finals.all(...padded) as Array<any>).map((r) => [r.pipeline_id, JSON.parse(dec.decode(r.payload))]))
      for (const p of ps) s += JSON.stringify({ ...p, pno: undefined, tags: JSON.parse(p.tags), payload: f.get(p.pipeline_id) ?? null }) + "\n"
    } else {
      const byT = new Map<string, Array<any>>()
      for (const t of tasks.all(...padded) as Array<any>) {
        const l = byT.get(t.pipeline_id) ?? []
        l.push({ ...t, pno: undefined, lease_ids: JSON.parse(t.lease_ids) })
        byT.set(t.pipeline_id, l)
      }
      const byA = new Map<string, Array<any>>()
      for (const a of arts.all(...padded) as Array<any>) {
        const l = byA.get(a.pipeline_id) ?? []
        l.push({ ...a, pno: undefined, payload: a.payload === null ? null : JSON.parse(dec.decode(a.payload)) })
        byA.set(a.pipeline_id, l)
      }
      for (const p of ps) {
        s += JSON.stringify({ ...p, pno: undefined, tags: JSON.parse(p.tags), tasks: byT.get(p.pipeline_id) ?? [], artifacts: byA.get(p.pipeline_id) ?? [] }) + "\n"
      }
    }
    n += ps.length
    await write(s)
    const last = ps[ps.length - 1]!
    cursor = [last.created_at, last.pipeline_id]
  }
  await new Promise<void>((r) => ws.end(() => r()))
  db.close()
  return n
}

/** Kinds, formats and rounds to run (`BENCH_KINDS=results,pipelines`, `BENCH_FORMATS=jsonl,csv`, `BENCH_ROUNDS=1`). */
const list = (v: string | undefined, all: ReadonlyArray<string>) => (v === undefined ? all : v.split(",").filter((x) => all.includes(x)))
const KINDS = list(process.env.BENCH_KINDS, ["results", "pipelines"]) as ReadonlyArray<"results" | "pipelines">
const FORMATS = list(process.env.BENCH_FORMATS, ["jsonl", "csv"]) as ReadonlyArray<"jsonl" | "csv">
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1)

/** Runs `f`, returning rows, wall seconds, CPU seconds of this process (user + system) and the RSS peak. */
const measure = async (f: () => Promise<number>) => {
  const rssStart = process.memoryUsage().rss
  const stop = sampleRss()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const rows = await f()
  const sec = (performance.now() - t0) / 1000
  const c = process.cpuUsage(c0)
  return { rows, sec, cpu: (c.user + c.system) / 1e6, rssStart, rssPeak: stop() }
}

/** The schema version of the store file (`store_meta.schema_version`). */
const schemaVersion = (path: string): number => {
  const db = new Database(path, { readonly: true, fileMustExist: true })
  try {
    return Number((db.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").pluck().get() as string | undefined) ?? 0)
  } finally {
    db.close()
  }
}

// ---------------------------------------------------------------------------------------------
// Memory: peak RSS of CLI exports of stores with small and large payloads
// ---------------------------------------------------------------------------------------------

const MEM_SCALE = Number(process.env.BENCH_MEM_SCALE ?? 1)
const memDir = process.env.BENCH_MEM_DIR ?? nodePath.join(dir, "mem")
const assayBin = process.env.BENCH_ASSAY_BIN ?? nodePath.resolve(import.meta.dirname, "../bin/assay")

interface MemStore {
  readonly name: string
  readonly pipelines: number
  /** Length of each output's text field. */
  readonly bytes: number
}
const MEM_STORES: ReadonlyArray<MemStore> = [
  { name: "tiny", pipelines: 1000, bytes: 100 },
  { name: "20kx50KB", pipelines: Math.max(1, Math.round(20_000 * MEM_SCALE)), bytes: 50 * 1024 },
  { name: "500x4MB", pipelines: Math.max(1, Math.round(500 * MEM_SCALE)), bytes: 4 * 1024 * 1024 }
]

/** Builds a store of `m.pipelines` pipelines: a seed of ~50 B, one output of `m.bytes` (final). */
const buildMem = (m: MemStore, path: string) =>
  Effect.scoped(Effect.provide(
    Effect.gen(function*() {
      const store = yield* Store
      yield* store.openRun({ runId: RunId.make("mem"), startedAt: 1000 })
      const BATCH = 100
      for (let from = 0; from < m.pipelines; from += BATCH) {
        const ids = Array.from({ length: Math.min(BATCH, m.pipelines - from) }, (_, k) => from + k)
        const idOf = (i: number) => PipelineId.make(`m${String(i).padStart(7, "0")}`)
        yield* store.admit(
          ids.map((i) =>
            new PipelineRecord({
              pipelineId: idOf(i), key: null, name: "mem", state: "succeeded", nTasksDone: 1, nTasksTotal: 1, specDigest: "spec",
              seedDigest: `seed${i}`, tags: {}, attemptsTotal: 1, runId: RunId.make("mem"), createdAt: 1000 + i, updatedAt: 1001 + i,
              startedAt: 1000 + i, endedAt: 1001 + i, failedTask: null, errorType: null, errorMessage: null, errorClass: null
            })
          ),
          ids.map((i) => ({ ...artifact(idOf(i), -1, { row: i, text: "seed" }, false, 1000 + i), runId: RunId.make("mem") }))
        )
        yield* Effect.forEach(ids, (i) =>
          store.checkpoint({
            pipelineId: idOf(i),
            artifact: { ...artifact(idOf(i), 0, { row: i, text: String(i % 10).repeat(m.bytes) }, true, 1000 + i), runId: RunId.make("mem") },
            task: new TaskRecord({
              taskRunId: `${idOf(i)}/0`, pipelineId: idOf(i), runId: RunId.make("mem"), seq: 0, taskName: "t0", state: "succeeded",
              attemptsUsed: 1, startedAt: 1000 + i, endedAt: 1001 + i, durationMs: 1, errorType: null, errorMessage: null,
              errorClass: null, leaseIds: []
            })
          }), { concurrency: 20, discard: true })
      }
      yield* store.finishRun(RunId.make("mem"), { status: "completed", endedAt: 5000 })
    }),
    SqliteStore.layer({ filename: path })
  ))

/** The peak resident set (`VmHWM`, bytes) of a live process, or 0 once it is gone. */
const vmHwm = (pid: number): number => {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))
    return m === null ? 0 : Number(m[1]) * 1024
  } catch {
    return 0
  }
}

/** Runs `bin/assay export …` as a child; returns its exit code, wall seconds and peak RSS. */
const cliExport = (args: ReadonlyArray<string>) =>
  new Promise<{ code: number | null; sec: number; peak: number; err: string }>((resolve) => {
    const t0 = performance.now()
    const child = spawn(assayBin, ["export", ...args], { stdio: ["ignore", "ignore", "pipe"] })
    let peak = 0
    let err = ""
    child.stderr.on("data", (d) => (err += String(d)))
    const timer = setInterval(() => (peak = Math.max(peak, vmHwm(child.pid!))), 20)
    child.on("exit", (code) => {
      clearInterval(timer)
      resolve({ code, sec: (performance.now() - t0) / 1000, peak, err: err.slice(-500) })
    })
  })

const MEM_EXPORTS: ReadonlyArray<{ readonly kind: string; readonly format: string }> = [
  { kind: "pipelines", format: "jsonl" },
  { kind: "results", format: "csv" },
  { kind: "artifacts", format: "jsonl" }
]

const memory = async () => {
  fs.mkdirSync(memDir, { recursive: true })
  const tinyPeak = new Map<string, number>()
  for (const m of MEM_STORES) {
    const path = nodePath.join(memDir, `${m.name}-${m.pipelines}.db`)
    if (!fs.existsSync(path)) {
      const t0 = performance.now()
      await Effect.runPromise(buildMem(m, path))
      emit({ bench: "export-memory-build", store: m.name, pipelines: m.pipelines, output_bytes: m.bytes, seconds: +((performance.now() - t0) / 1000).toFixed(1), store_mb: mb(fs.statSync(path).size) })
    }
    for (const e of MEM_EXPORTS) {
      const out = nodePath.join(memDir, `out-${m.name}.${e.format}`)
      const r = await cliExport([path, out, "--rows", e.kind, "--format", e.format])
      if (m.name === "tiny") tinyPeak.set(e.kind, r.peak)
      const temps = fs.readdirSync(memDir).filter((n) => n.includes(".assay-tmp-") || n.endsWith(".tmp"))
      emit({
        bench: "export-memory", store: m.name, pipelines: m.pipelines, output_bytes: m.bytes, kind: e.kind, format: e.format,
        exit: r.code, seconds: +r.sec.toFixed(1), rss_peak_mb: mb(r.peak),
        ratio_to_tiny: +(r.peak / (tinyPeak.get(e.kind) ?? r.peak)).toFixed(2), out_mb: fs.existsSync(out) ? mb(fs.statSync(out).size) : null,
        temp_files_left: temps.length, ...(r.code === 0 ? {} : { stderr: r.err })
      })
      fs.rmSync(out, { force: true })
      for (const t of temps) fs.rmSync(nodePath.join(memDir, t), { force: true })
    }
  }
  emit({ bench: "export-memory-summary", scale: MEM_SCALE, target_rss_mb: 300, target_ratio_to_tiny: 1.5, bin: assayBin })
}

const main = async () => {
  if (process.env.BENCH_THROUGHPUT !== "0") await throughput()
  if (process.env.BENCH_MEMORY !== "0") await memory()
  fs.rmSync(dir, { recursive: true, force: true })
}

const throughput = async () => {
  if (!(keep !== undefined && fs.existsSync(keep))) {
    await Effect.runPromise(Effect.scoped(Effect.provide(build, SqliteStore.layer({ filename: file }))))
  }
  const version = schemaVersion(file)
  if (version < 3) {
    throw new Error(`${file} has schema version ${version}; the raw export reads schema 3: delete it and rerun to rebuild`)
  }
  const results: Array<Record<string, unknown>> = []
  for (let round = 1; round <= ROUNDS; round++) {
    for (const kind of KINDS) {
      const rawOut = nodePath.join(dir, `raw-${kind}.jsonl`)
      if (round === 1) await raw(kind, rawOut) // warm-up: page cache and JIT, so the raw figure is not understated
      const r = await measure(() => raw(kind, rawOut))
      const rawRate = r.rows / r.sec
      const rawCpuRate = r.rows / r.cpu
      emit({
        bench: "export", round, kind, format: "raw-jsonl", rows: r.rows, seconds: +r.sec.toFixed(2), cpu_s: +r.cpu.toFixed(2),
        rows_per_s: Math.round(rawRate), rss_start_mb: mb(r.rssStart), rss_peak_mb: mb(r.rssPeak), bytes: fs.statSync(rawOut).size
      })
      fs.rmSync(rawOut)
      for (const format of FORMATS) {
        const out = nodePath.join(dir, `out-${kind}.${format}`)
        const m = await measure(() => Effect.runPromise(Export.exportStores([file], out, { kind, format }).pipe(Effect.provide(StoreResolver.layerOpener()))))
        const line = {
          bench: "export", round, kind, format, rows: m.rows, seconds: +m.sec.toFixed(2), cpu_s: +m.cpu.toFixed(2),
          rows_per_s: Math.round(m.rows / m.sec), ratio_to_raw: +((m.rows / m.sec) / rawRate).toFixed(2),
          cpu_ratio_to_raw: +((m.rows / m.cpu) / rawCpuRate).toFixed(2),
          rss_start_mb: mb(m.rssStart), rss_peak_mb: mb(m.rssPeak), bytes: fs.statSync(out).size
        }
        results.push(line)
        emit(line)
        fs.rmSync(out)
      }
    }
  }
  emit({
    bench: "export-summary", pipelines: N, rounds: ROUNDS, min_ratio_to_raw: Math.min(...results.map((r) => r.ratio_to_raw as number)),
    min_cpu_ratio_to_raw: Math.min(...results.map((r) => r.cpu_ratio_to_raw as number)), target: 0.5
  })
}

main().catch((e) => {
  console.error(e)
  fs.rmSync(dir, { recursive: true, force: true })
  process.exit(1)
})
