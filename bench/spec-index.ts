/**
 * The `pipelines_spec` index of schema version 5 (run: `npx tsx bench/spec-index.ts`; prints
 * JSON lines). C16 counts a store's pipelines by definition before a run
 * (`Store.pipelinesBySpec`: `SELECT spec_digest, count(*) … GROUP BY spec_digest`). This
 * measures both sides of the index, side by side in one process:
 *
 * 1. write cost: `BENCH_PIPELINES` (default 200k) pipeline rows admitted and updated three
 *    times each (as the runner's cursor updates do), transactions of 256 pipelines, plain
 *    better-sqlite3 on the store's schema, with the index and with it dropped; `ratio` = with ÷
 *    without (wall), `cpu_ratio` the same in process CPU time;
 * 2. read cost: the count by definition on that store (two definitions) from the index
 *    (covering) and from a full scan (`NOT INDEXED`, what a version-4 store opened read-only
 *    does), the best of `BENCH_ROUNDS` (default 5).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { freshSchema } from "./lib/raw.js"

const N = Number(process.env.BENCH_PIPELINES ?? 200_000)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-spec-"))
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))

const write = (file: string, withIndex: boolean) => {
  const db = freshSchema(file)
  if (!withIndex) db.exec("DROP INDEX pipelines_spec")
  const ins = db.prepare(
    "INSERT INTO pipelines (pipeline_id, key, name, state, n_tasks_done, n_tasks_total, spec_digest, seed_digest, tags, attempts_total, run_id, created_at, updated_at, started_at, ended_at, failed_task, error_type, error_message, error_class) VALUES (?, NULL, 'bench', 'running', 0, 3, ?, ?, '{}', 0, 'run', ?, ?, ?, NULL, NULL, NULL, NULL, NULL)"
  )
  const upd = db.prepare("UPDATE pipelines SET n_tasks_done = ?, state = ?, updated_at = ? WHERE pno = ?")
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  for (let from = 0; from < N; from += 256) {
    db.transaction(() => {
      for (let i = from; i < Math.min(N, from + 256); i++) {
        // two definitions, as after one changed option: the first half and the second half
        const spec = i < N / 2 ? "f0826e26aaaaaaaaaaaaaaaaaaaaaaaa" : "800cd7bbbbbbbbbbbbbbbbbbbbbbbbbb"
        const pno = Number(ins.run(`p${i}`, spec, `seed${i}`, i, i, i).lastInsertRowid)
        for (let seq = 1; seq <= 3; seq++) upd.run(seq, seq === 3 ? "succeeded" : "running", i + seq, pno)
      }
    })()
  }
  const ms = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  return { db, ms, cpuMs: (cpu.user + cpu.system) / 1000 }
}

const best = (f: () => void) => {
  let ms = Infinity
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now()
    f()
    ms = Math.min(ms, performance.now() - t0)
  }
  return ms
}

emit({ bench: "spec-index", pipelines: N, load: os.loadavg().map((l) => Math.round(l * 100) / 100) })
const without = write(nodePath.join(dir, "without.db"), false)
const withIdx = write(nodePath.join(dir, "with.db"), true)
emit({
  step: "write",
  without_ms: Math.round(without.ms),
  with_ms: Math.round(withIdx.ms),
  ratio: Math.round((withIdx.ms / without.ms) * 100) / 100,
  cpu_ratio: Math.round((withIdx.cpuMs / without.cpuMs) * 100) / 100
})
const q = "SELECT spec_digest, count(*) AS n FROM pipelines GROUP BY spec_digest ORDER BY n DESC, spec_digest"
const indexed = withIdx.db.prepare(q)
const scanned = withIdx.db.prepare(q.replace("FROM pipelines", "FROM pipelines NOT INDEXED"))
emit({
  step: "count by definition",
  plan: (withIdx.db.prepare(`EXPLAIN QUERY PLAN ${q}`).all() as Array<{ detail: string }>).map((r) => r.detail).join("; "),
  index_ms: Math.round(best(() => indexed.all()) * 10) / 10,
  scan_ms: Math.round(best(() => scanned.all()) * 10) / 10,
  rows: indexed.all()
})
without.db.close()
withIdx.db.close()
fs.rmSync(dir, { recursive: true, force: true })
