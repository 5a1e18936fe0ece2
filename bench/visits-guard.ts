/**
 * What the `visits-v1` guard of schema 13 costs to make on a big store (issue 13): a store of
 * `BENCH_PIPELINES` pipelines (default 200,000; 3 tasks each: 1 pipeline, 4 artifact, 3 task,
 * 3 attempt and 3 event rows, written by the raw bound's statements), then {@link VISITS_GUARD}
 * in one transaction, as the first committed revisit of a `base` store or migration 0013 of a
 * trigger-guarded store runs it. Two variants: rows with a visit (what this build and every
 * build since schema 6 writes: the backfill finds nothing, scans only) and rows without one
 * (a store from before schema 6: every row rewritten). Prints one JSON line per variant.
 *
 * Run: `npx tsx bench/visits-guard.ts` (`BENCH_PIPELINES` to change the size).
 */
import Database from "better-sqlite3"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { VISITS_GUARD } from "../src/layers/internal/sqlite/migrations.js"
import { rawBound } from "./lib/raw.js"

const N = Number(process.env.BENCH_PIPELINES ?? 200_000)
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-visits-guard-"))
const base = nodePath.join(dir, "base.db")
rawBound(base, N)
for (const variant of ["visits", "no_visits"] as const) {
  const file = nodePath.join(dir, `${variant}.db`)
  fs.copyFileSync(base, file)
  const db = new Database(file)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  if (variant === "visits") for (const t of ["tasks", "attempts", "artifacts"]) db.exec(`UPDATE ${t} SET visit = 0`)
  db.pragma("wal_checkpoint(TRUNCATE)")
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  db.transaction(() => {
    for (const s of VISITS_GUARD) db.exec(s)
  }).immediate()
  const ms = performance.now() - t0
  const c = process.cpuUsage(c0)
  const walBytes = fs.statSync(`${file}-wal`).size
  const check = db.pragma("integrity_check", { simple: true })
  db.close()
  console.log(JSON.stringify({
    bench: `visits_guard.${variant}`,
    pipelines: N,
    rows: N * 10,
    ms: Math.round(ms),
    cpu_ms: Math.round((c.user + c.system) / 1000),
    db_bytes: fs.statSync(file).size,
    wal_bytes: walBytes,
    integrity_check: check
  }))
}
fs.rmSync(dir, { recursive: true, force: true })
