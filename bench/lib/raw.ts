/**
 * The raw bound shared by the store and runner benchmarks: plain better-sqlite3 writing the
 * rows one pipeline of 3 tasks needs (pipeline, seed + 3 artifacts, 3 task rows, 3 attempts,
 * 3 events, 3 cursor updates) with prepared single-row statements, in transactions of 256
 * pipelines, on the store's own schema (version 3: the same rows the store writes, `pno` included).
 */
import Database from "better-sqlite3"
import { performance } from "node:perf_hooks"
import { MIGRATIONS, PLAIN_STORE_STATEMENTS } from "../../src/layers/internal/sqlite/migrations.js"

export const payload = (i: number, seq: number) => Buffer.from(JSON.stringify({ row: i, seq, text: "lorem ipsum dolor sit amet" }))

export const freshSchema = (file: string) => {
  const db = new Database(file)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  for (const [, statements] of MIGRATIONS) for (const s of statements) db.exec(s)
  // a plain store's schema (migration 0016's data step on a store that is no suite's)
  for (const s of PLAIN_STORE_STATEMENTS) db.exec(s)
  return db
}

// ---------------------------------------------------------------------------------------------
// 1. raw bound
// ---------------------------------------------------------------------------------------------
/**
 * Writes `n` pipelines into a fresh store at `file`; returns the elapsed milliseconds.
 * `idOf(i)` names pipeline `i` (default `p${i}`, sequential keys: every index insert appends).
 * The runner benchmark passes the content-addressed ids assay itself gives the same pipelines,
 * whose random order spreads index inserts over the whole B-tree.
 */
export const rawBound = (file: string, n: number, idOf: (i: number) => string = (i) => `p${i}`): number => {
  const db = freshSchema(file)
  const insP = db.prepare(
    "INSERT INTO pipelines (pipeline_id, key, name, state, n_tasks_done, n_tasks_total, spec_digest, seed_digest, tags, attempts_total, run_id, created_at, updated_at, started_at, ended_at, failed_task, error_type, error_message, error_class) VALUES (?, NULL, 'bench', 'running', 0, 3, 'spec', ?, '{}', 0, 'run', ?, ?, ?, NULL, NULL, NULL, NULL, NULL)"
  )
  const insA = db.prepare(
    "INSERT INTO artifacts (artifact_id, pno, pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage, blob_ref, payload, is_final, created_at) VALUES (?, ?, ?, 'run', ?, ?, 'Json', 'json', 'd', ?, 'inline', NULL, ?, ?, ?)"
  )
  const insT = db.prepare(
    "INSERT INTO tasks (pno, task_run_id, pipeline_id, run_id, seq, task_name, state, attempts_used, started_at, ended_at, duration_ms, error_type, error_message, error_class, lease_ids) VALUES (?, ?, ?, 'run', ?, ?, 'succeeded', 1, ?, ?, 1, NULL, NULL, NULL, '[]')"
  )
  const insAt = db.prepare(
    "INSERT INTO attempts (attempt_id, pno, pipeline_id, run_id, task_run_id, task_name, seq, attempt_no, outcome, error_class, error_type, error_message, decision, lease_ids, started_at, ended_at, duration_ms) VALUES (?, ?, ?, 'run', ?, ?, ?, 1, 'succeeded', NULL, NULL, NULL, NULL, '[]', ?, ?, 1)"
  )
  const insE = db.prepare("INSERT INTO events (event_id, kind, pno, pipeline_id, run_id, data, ts) VALUES (?, 'task.succeeded', ?, ?, 'run', ?, ?)")
  const upd = db.prepare(
    "UPDATE pipelines SET n_tasks_done = ?, state = ?, ended_at = ?, attempts_total = attempts_total + 1, updated_at = ? WHERE pno = ?"
  )
  let aid = 1
  let atid = 1
  let eid = 1
  const one = (i: number) => {
    const id = idOf(i)
    const now = 1000 + i
    const pno = Number(insP.run(id, `seed${i}`, now, now, now).lastInsertRowid)
    const seed = payload(i, -1)
    insA.run(aid++, pno, id, -1, null, seed.length, seed, 0, now)
    for (let seq = 0; seq < 3; seq++) {
      const out = payload(i, seq)
      insA.run(aid++, pno, id, seq, `t${seq}`, out.length, out, seq === 2 ? 1 : 0, now)
      insT.run(pno, `${id}/${seq}`, id, seq, `t${seq}`, now, now + 1)
      insAt.run(atid++, pno, id, `${id}/${seq}`, `t${seq}`, seq, now, now + 1)
      insE.run(eid++, pno, id, `{"seq":${seq}}`, now)
      upd.run(seq + 1, seq === 2 ? "succeeded" : "running", seq === 2 ? now + 1 : null, now + 1, pno)
    }
  }
  const batch = db.transaction((from: number, to: number) => {
    for (let i = from; i < to; i++) one(i)
  })
  const t0 = performance.now()
  for (let i = 0; i < n; i += 256) batch.immediate(i, Math.min(n, i + 256))
  const ms = performance.now() - t0
  db.close()
  return ms
}

