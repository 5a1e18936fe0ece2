import { assert, describe, it } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { Migrator, SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import Database from "better-sqlite3"
import { Chunk, Data, Effect, Either, Layer, Option, Stream } from "effect"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as StoreResolver from "../../src/layers/StoreResolver.js"
import { MIGRATIONS, SCHEMA_VERSION } from "../../src/layers/internal/sqlite/migrations.js"
import { defaultPipelineId } from "../../src/domain/Pipeline.js"
import { digest } from "../../src/domain/Json.js"
import * as Traversal from "../../src/domain/Traversal.js"
import * as Report from "../../src/services/Report.js"
import { Store } from "../../src/services/Store.js"
import {
  artifact,
  attempt,
  controlledToRewind,
  event,
  pipeline,
  setWriteFailure,
  type StoreHarness,
  storeContract,
  task
} from "./StoreContract.js"
import { pid, rid } from "../support/ids.js"
import { program } from "../support/program.js"

/** The `sqlite3` shell, when installed. */
const SQLITE3 = ["/usr/bin/sqlite3", "/usr/local/bin/sqlite3"].find((p) => fs.existsSync(p))

/** Runs SQL (or a dot-command) through the `sqlite3` shell on `file`: exit status, stdout and stderr, trimmed. */
const shell = (file: string, sql: string) => {
  const r = spawnSync(SQLITE3!, [file], { input: sql, encoding: "utf8" })
  return { status: r.status, out: r.stdout.trim(), err: r.stderr.trim() }
}

/** A fresh temporary store path (the directory is under os.tmpdir()). */
const tempStorePath = () => nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-store-")), "runs.db")


const sqliteHarness = (): StoreHarness => {
  const file = tempStorePath()
  return {
    layer: (options = {}, backend = ArtifactBackends.layerInline) =>
      SqliteStore.layerWith({ ...options, filename: file }).pipe(Layer.provide(backend)),
    injectWriteFailure: (on) => Effect.sync(() => setWriteFailure(file, on))
  }
}

storeContract("SqliteStore", sqliteHarness)

const open = (options: SqliteStore.SqliteStoreOptions) =>
  Effect.map(Layer.build(SqliteStore.layer(options)), (ctx) => ctx.unsafeMap.get(Store.key) as Store["Type"])

const snapshot = (file: string) => ({
  bytes: fs.readFileSync(file),
  mtime: fs.statSync(file).mtimeMs,
  siblings: fs.readdirSync(nodePath.dirname(file)).sort()
})

const populate = (file: string) =>
  Effect.scoped(Effect.gen(function*() {
    const store = yield* open({ filename: file })
    yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
    yield* store.admit([pipeline("p1"), pipeline("p2")])
    yield* store.checkpoint({
      pipelineId: pid("p1"),
      artifact: artifact("p1", 0, new Uint8Array([1, 2, 3]), true),
      task: task("p1", 0),
      pipeline: { nTasksDone: 1, updatedAt: 5 }
    })
    yield* store.emitEvent(event("k", "p1"))
  }))

const refusal = (options: SqliteStore.SqliteStoreOptions) =>
  Effect.flip(Effect.scoped(open(options)))

/** `schema_version` and the `pipelines_*` indexes of a store file. */
const storeMeta = (file: string) => {
  const db = new Database(file, { readonly: true })
  try {
    return {
      version: (db.prepare("SELECT value FROM store_meta WHERE key = 'schema_version'").get() as { value: string }).value,
      indexes: (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'pipelines_%' ORDER BY name").all() as Array<{ name: string }>).map((r) => r.name)
    }
  } finally {
    db.close()
  }
}

/**
 * A store as an older build left it: the real migrator with only the first `version`
 * migrations, then rows written with that version's SQL by `fill`.
 */
const buildOldStore = (file: string, version: number, fill: (db: Database.Database) => void) =>
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqliteClient.make({ filename: file })
    yield* Migrator.make({})({
      loader: Migrator.fromRecord(Object.fromEntries(MIGRATIONS.slice(0, version).map(([id, statements]) => [
        id,
        Effect.flatMap(SqlClient.SqlClient, (client) => Effect.forEach(statements, (st) => client.unsafe(st), { discard: true }))
      ])))
    }).pipe(Effect.provideService(SqlClient.SqlClient, sql))
  })).pipe(
    Effect.provide(Reactivity.layer),
    Effect.orDie,
    Effect.zipRight(Effect.sync(() => {
      const db = new Database(file)
      try {
        db.transaction(() => fill(db))()
        db.pragma("journal_mode = DELETE")
      } finally {
        db.close()
      }
    }))
  )

/** Inserts a pipeline row with the version 1–2 columns. */
const oldPipeline = (db: Database.Database, id: string, over: Record<string, unknown> = {}) => {
  const row: Record<string, unknown> = {
    pipeline_id: id, key: null, name: "demo", state: "succeeded", n_tasks_done: 3, n_tasks_total: 3, spec_digest: "spec",
    seed_digest: `seed-${id}`, tags: "{\"split\":\"test\"}", attempts_total: 3, run_id: "run-1", created_at: 1000,
    updated_at: 2000, started_at: 1000, ended_at: 1500, failed_task: null, error_type: null, error_message: null,
    error_class: null, ...over
  }
  const cols = Object.keys(row)
  db.prepare(`INSERT INTO pipelines (${cols.join(", ")}) VALUES (${cols.map((c) => `@${c}`).join(", ")})`).run(row)
}
const oldTask = (db: Database.Database, id: string, seq: number) =>
  db.prepare(
    "INSERT INTO tasks (task_run_id, pipeline_id, run_id, seq, task_name, state, attempts_used, started_at, ended_at, duration_ms, error_type, error_message, error_class, lease_ids) VALUES (?, ?, 'run-1', ?, ?, 'succeeded', 1, 1000, 1010, 10, NULL, NULL, NULL, '[\"l\"]')"
  ).run(`${id}/${seq}`, id, seq, `t${seq}`)
const oldAttempt = (db: Database.Database, id: string, seq: number) =>
  db.prepare(
    "INSERT INTO attempts (pipeline_id, run_id, task_run_id, task_name, seq, attempt_no, outcome, error_class, error_type, error_message, decision, lease_ids, started_at, ended_at, duration_ms) VALUES (?, 'run-1', ?, ?, ?, 1, 'succeeded', NULL, NULL, NULL, '{\"retry\":false}', '[]', 1000, 1005, 5)"
  ).run(id, `${id}/${seq}`, `t${seq}`, seq)
const oldArtifact = (db: Database.Database, id: string, seq: number, isFinal: number) =>
  db.prepare(
    "INSERT INTO artifacts (pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage, blob_ref, payload, is_final, created_at) VALUES (?, 'run-1', ?, ?, 'Json', 'json', 'd', 2, 'inline', NULL, ?, ?, 2000)"
  ).run(id, seq, seq < 0 ? null : `t${seq}`, Buffer.from([seq + 1, 7]), isFinal)
const oldEvent = (db: Database.Database, kind: string, id: string | null) =>
  db.prepare("INSERT INTO events (kind, pipeline_id, run_id, data, ts) VALUES (?, ?, 'run-1', '{\"n\":1}', 1000)").run(kind, id)

/** Everything a reader sees of a store (the pipelines `m*` and `ghost` of the migration test). */
const readEverything = (store: Store["Type"]) =>
  Effect.gen(function*() {
    const all = <A, E>(s: Stream.Stream<A, E>) => Effect.map(Stream.runCollect(s), Chunk.toArray)
    const ids = (yield* all(store.streamPipelines())).map((p) => p.pipelineId)
    return {
      pipelines: yield* all(store.streamPipelines()),
      page: yield* store.pipelinesPage({ limit: 7, after: { createdAt: 1003, pipelineId: pid("m03") } }),
      tasks: yield* all(store.streamTasks()),
      tasksOf: yield* all(store.streamTasks({ pipelineId: pid("m05") })),
      attempts: yield* all(store.streamAttempts()),
      attemptsOf: yield* all(store.streamAttempts({ pipelineId: pid("m06") })),
      ghostAttempts: yield* all(store.streamAttempts({ pipelineId: pid("ghost") })),
      events: yield* all(store.streamEvents()),
      eventsOf: yield* store.events({ pipelineId: pid("m07") }),
      ghostEvents: yield* store.countEvents({ pipelineId: pid("ghost") }),
      artifacts: yield* Effect.forEach(ids, (id) => store.listArtifacts(id)),
      streamed: yield* all(store.streamArtifacts({ pipelineId: pid("m08") })),
      latest: Option.getOrNull(yield* store.getArtifact(pid("m09"), 2)),
      bundles: Array.from((yield* store.loadBundles(ids, { payloads: "all" })).entries()),
      stats: yield* store.stats(),
      errors: yield* store.errors()
    }
  })

describe("SqliteStore (SQLite only)", () => {
  it.effect("reopening after close sees everything, including buffered facts flushed on close", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* populate(file)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(pid("p1"))).nTasksDone, 1)
        assert.strictEqual(yield* store.countEvents({ kind: "k" }), 1)
        const a = Option.getOrThrow(yield* store.getArtifact(pid("p1"), 0))
        assert.deepStrictEqual(a.payload, new Uint8Array([1, 2, 3]))
        assert.isTrue(a.artifact.isFinal)
        assert.strictEqual(Option.getOrThrow(yield* store.latestRun).runId, "run-1")
        // ids keep growing after a reopen
        yield* store.emitEvent(event("k2"))
        const evs = yield* store.events()
        assert.isTrue(evs[1]!.eventId > evs[0]!.eventId)
      }))
    })
  })

  it.effect("succeededPipelines: 32-hex ids beside other ids (upper case, other lengths, keys) answer exactly", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* open({ filename: tempStorePath() })
      yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
      const hex = (n: number) => digest(`id-${n}`)
      const upper = hex(100).toUpperCase()
      const short = hex(102).slice(0, 31)
      const P = pid
      yield* store.admit([
        ...Array.from({ length: 40 }, (_, i) =>
          pipeline(hex(i), { state: i % 4 === 3 ? "failed" : "succeeded", specDigest: "s", seedDigest: `d${i}` })),
        pipeline(upper, { key: upper, state: "succeeded", specDigest: "s", seedDigest: "du" }),
        pipeline(hex(101), { key: hex(101), state: "succeeded", specDigest: "s", seedDigest: "dk" }),
        pipeline(short, { state: "succeeded", specDigest: "s", seedDigest: "ds" }),
        pipeline("plain-key", { key: "plain-key", state: "succeeded", specDigest: "s", seedDigest: "dp" })
      ])
      const index = yield* store.succeededPipelines!
      assert.strictEqual(index.size, 30 + 4)
      for (let i = 0; i < 40; i++) assert.strictEqual(index.has(P(hex(i)), "s", `d${i}`, true), i % 4 !== 3, hex(i))
      // the lower-case form of a stored upper-case key is another id
      assert.isFalse(index.has(P(hex(100)), "s", "du", true))
      assert.isTrue(index.has(P(upper), "s", "du", false))
      // a keyed row with a 32-hex id still compares its digests
      assert.isTrue(index.has(P(hex(101)), "s", "dk", true))
      assert.isFalse(index.has(P(hex(101)), "s", "other", true))
      assert.isTrue(index.has(P(short), "s", "ds", true))
      assert.isFalse(index.has(P(`${short}0`), "s", "ds", true))
      assert.isTrue(index.has(P("plain-key"), "s", "dp", false))
      assert.isFalse(index.has(P(hex(103)), "s", "x", true))
    })))

  it.effect("succeededPipelines: keyed rows come through the one scan with their digests, whatever their keys' characters", () =>
    Effect.scoped(Effect.gen(function*() {
      const file = tempStorePath()
      // keys and digests that JSON must escape (the scan returns the keyed rows as a JSON array)
      const keys = ['quote"key', "back\\slash", "new\nline", "tab\tand\u0001", "snow\u2603man", "emoji\u{1f600}", '["json",1]', digest("k")]
      const rows = keys.map((key, i) => pipeline(key, { key, state: i === 2 ? "failed" : "succeeded", specDigest: `s"${i}`, seedDigest: `d\\${i}` }))
      const answers = (store: Store["Type"]) =>
        Effect.map(store.succeededPipelines!, (index) => [
          index.size,
          ...keys.flatMap((key, i) => [
            index.has(pid(key), `s"${i}`, `d\\${i}`, false),
            // the same key with a changed seed or definition is not the stored pipeline
            index.has(pid(key), `s"${i}`, `d\\${i}x`, false),
            index.has(pid(key), `s"${i}x`, `d\\${i}`, false)
          ])
        ])
      const written = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
        yield* store.admit([...rows, pipeline(digest("plain"), { state: "succeeded", specDigest: "s", seedDigest: "d" })])
        return yield* answers(store)
      }))
      const read = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), answers))
      assert.deepStrictEqual(written, [keys.length, ...keys.flatMap((_, i) => [i !== 2, false, false])])
      assert.deepStrictEqual(read, written)
    })))

  const hexOf = (n: number) => digest(`sp-${n}`)
  for (
    const [what, ids] of [
      ["packed hex ids and the others", [...Array.from({ length: 30 }, (_, i) => hexOf(i)), hexOf(50).toUpperCase(), "k-1", hexOf(51).slice(0, 30)]],
      ["no hex id at all", ["k-1", "k-2", hexOf(50).toUpperCase(), "k-3", "k-4"]]
    ] as const
  )
  it.effect(`succeededPipelines: the writer's and a read-only open's indexes agree (${what})`, () => {
    const file = tempStorePath()
    const hex = hexOf
    const probes = [...ids, hex(50), hex(60), `${hex(51).slice(0, 30)}00`]
    return Effect.gen(function*() {
      const answers = (store: Store["Type"]) =>
        Effect.map(store.succeededPipelines!, (index) => [index.size, ...probes.map((id) => index.has(pid(id), "spec", `seed-${id}`, true))])
      const written = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
        yield* store.admit(ids.map((id, i) => pipeline(id, { state: i % 5 === 4 ? "failed" : "succeeded" })))
        return yield* answers(store)
      }))
      const read = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), answers))
      assert.deepStrictEqual(read, written)
      assert.deepStrictEqual(written, [
        ids.filter((_, i) => i % 5 !== 4).length,
        ...probes.map((id) => ids.includes(id) && ids.indexOf(id) % 5 !== 4)
      ])
    })
  })

  it.effect("read-only open never writes, never migrates, and refuses writes", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* populate(file)
      const before = snapshot(file)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file, readonly: true })
        assert.isTrue(store.readOnly)
        assert.strictEqual((yield* store.stats()).pipelines, 2)
        assert.strictEqual(Chunk.size(yield* Stream.runCollect(store.streamPipelines())), 2)
        assert.strictEqual(yield* store.countEvents(), 1)
        const e1 = yield* Effect.flip(store.admit([pipeline("p3")]))
        assert.include(e1.message, "read-only")
        const e2 = yield* Effect.flip(store.emitEvent(event("x")))
        assert.strictEqual(e2._tag, "StoreUnavailable")
        const e3 = yield* Effect.flip(store.openRun({ runId: rid("r"), startedAt: 1 }))
        assert.strictEqual(e3._tag, "StoreUnavailable")
      }))
      const after = snapshot(file)
      assert.isTrue(before.bytes.equals(after.bytes))
      assert.strictEqual(after.mtime, before.mtime)
      assert.deepStrictEqual(after.siblings, before.siblings, "no -wal, -shm or lock file created")
    })
  })

  it.effect("a version-1 store: read-only opens read it unchanged (slower stats path); a writer migrates it to the current version", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* buildOldStore(file, 1, (db) => {
        for (let i = 0; i < 50; i++) {
          oldPipeline(db, `v${String(i).padStart(2, "0")}`, {
            state: i % 4 === 0 ? "failed" : "succeeded",
            created_at: i,
            started_at: 100,
            ended_at: 100 + ((i * 37) % 50)
          })
        }
      })
      assert.strictEqual(storeMeta(file).version, "1")
      const before = snapshot(file)
      const old = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file, readonly: true })
        const page = yield* store.pipelinesPage({ runId: rid("run-1"), limit: 10 })
        assert.strictEqual(page.pipelines.length, 10)
        assert.strictEqual((yield* store.completions({ runId: rid("run-1"), bucketMs: 10, since: 100 })).reduce((a, b) => a + b.count, 0), 50)
        return yield* store.stats(rid("run-1"))
      }))
      assert.strictEqual(old.pipelines, 50)
      assert.isNotNull(old.latencyMs)
      const after = snapshot(file)
      assert.isTrue(before.bytes.equals(after.bytes), "a read-only open never migrates")
      assert.strictEqual(storeMeta(file).version, "1")
      yield* Effect.scoped(open({ filename: file }))
      assert.strictEqual(storeMeta(file).version, String(SCHEMA_VERSION))
      assert.includeMembers(storeMeta(file).indexes, ["pipelines_latency", "pipelines_run_latency", "pipelines_run_state"])
      const migrated = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), (s) => s.stats(rid("run-1"))))
      assert.deepStrictEqual(migrated, old, "the indexed path on version 3 computes the same stats")
      // version 5: the pipelines of each definition are counted from the index alone
      assert.includeMembers(storeMeta(file).indexes, ["pipelines_spec"])
      const bySpec = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), (s) => s.pipelinesBySpec))
      assert.strictEqual(bySpec.reduce((n, s) => n + s.pipelines, 0), 50)
      const db = new Database(file, { readonly: true })
      try {
        const plan = (db.prepare("EXPLAIN QUERY PLAN SELECT spec_digest, count(*) AS n FROM pipelines GROUP BY spec_digest ORDER BY n DESC, spec_digest").all() as Array<{ detail: string }>)
          .map((r) => r.detail).join("; ")
        assert.include(plan, "COVERING INDEX pipelines_spec", plan)
      } finally {
        db.close()
      }
    })
  })

  it.effect("a version-2 store: read-only opens read it unchanged; a writer rebuilds it (version 3 and up) and every read is identical", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* buildOldStore(file, 2, (db) => {
        // pipelines created in id order (the rebuild numbers them by createdAt, then id)
        for (let i = 0; i < 40; i++) {
          const id = `m${String(i).padStart(2, "0")}`
          oldPipeline(db, id, { created_at: 1000 + i, state: i % 3 === 0 ? "running" : "succeeded", ended_at: i % 3 === 0 ? null : 1500 + i })
          oldArtifact(db, id, -1, 0)
          for (let seq = 0; seq < 3; seq++) {
            oldTask(db, id, seq)
            oldArtifact(db, id, seq, seq === 2 ? 1 : 0)
            oldAttempt(db, id, seq)
            oldEvent(db, "task.succeeded", id)
          }
        }
        // rows of a pipeline that was never admitted, and an event of no pipeline
        oldAttempt(db, "ghost", 0)
        oldEvent(db, "ghost.event", "ghost")
        oldEvent(db, "run.event", null)
      })
      assert.strictEqual(storeMeta(file).version, "2")
      const before = snapshot(file)
      const v2 = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), readEverything))
      assert.isTrue(before.bytes.equals(snapshot(file).bytes), "a read-only open never migrates")
      assert.strictEqual(v2.tasks.length, 120)
      assert.strictEqual(v2.ghostAttempts.length, 1)

      yield* Effect.scoped(open({ filename: file }))
      const meta = storeMeta(file)
      assert.strictEqual(meta.version, String(SCHEMA_VERSION))
      assert.includeMembers(meta.indexes, ["pipelines_id", "pipelines_created", "pipelines_latency"])
      const v3 = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), readEverything))
      assert.deepStrictEqual(v3, v2, "every read is identical after the rebuild")
      const db = new Database(file, { readonly: true })
      try {
        const pnos = db.prepare("SELECT pipeline_id, pno FROM pipelines ORDER BY pno").all() as Array<{ pipeline_id: string; pno: number }>
        assert.deepStrictEqual(pnos.map((r) => r.pipeline_id), Array.from({ length: 40 }, (_, i) => `m${String(i).padStart(2, "0")}`))
        const unadmitted = db.prepare("SELECT count(*) AS n FROM attempts WHERE pno = 0").get() as { n: number }
        assert.strictEqual(unadmitted.n, 1, "the ghost's attempt waits for its pipeline")
        const wrong = db.prepare(
          "SELECT count(*) AS n FROM tasks t JOIN pipelines p USING (pno) WHERE p.pipeline_id <> t.pipeline_id"
        ).get() as { n: number }
        assert.strictEqual(wrong.n, 0, "every task carries its pipeline's number")
      } finally {
        db.close()
      }

      // the migrated store keeps working: a checkpoint of a migrated pipeline, and admitting the
      // ghost adopts its earlier rows
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* store.checkpoint({
          pipelineId: pid("m00"),
          artifact: artifact("m00", 3, new Uint8Array([9]), true),
          task: task("m00", 3),
          pipeline: { nTasksDone: 4, updatedAt: 9000 }
        })
        yield* store.admit([pipeline("ghost", { createdAt: 5000 })])
        yield* store.recordAttempt(attempt("ghost", 1, 2))
        assert.deepStrictEqual((yield* store.listArtifacts(pid("m00"))).filter((a) => a.isFinal).map((a) => a.seq), [3])
        const ghost = Chunk.toArray(yield* Stream.runCollect(store.streamAttempts({ pipelineId: pid("ghost") })))
        assert.deepStrictEqual(ghost.map((a) => a.attemptNo), [1, 2])
        assert.deepStrictEqual((yield* store.events({ pipelineId: pid("ghost") })).map((e) => e.kind), ["ghost.event"])
      }))
      const db2 = new Database(file, { readonly: true })
      try {
        assert.strictEqual((db2.prepare("SELECT count(*) AS n FROM attempts WHERE pno = 0").get() as { n: number }).n, 0)
        assert.strictEqual((db2.prepare("SELECT count(*) AS n FROM events WHERE pno = 0").get() as { n: number }).n, 0)
      } finally {
        db2.close()
      }
    })
  })

  it.effect("a version-3 store: read-only opens read it unchanged (repeat unknown); a writer migrates it (version 4 and up) and recovers the repeat of content-addressed pipelines", () => {
    const file = tempStorePath()
    const spec = "0123456789abcdef0123456789abcdef"
    const seedOf = (i: number) => `${String(i).padStart(2, "0")}${"ab".repeat(15)}`
    // 4 seeds x 3 repeats, content-addressed as the runner names them; one explicit key
    const rows = Array.from({ length: 12 }, (_, i) => ({
      id: defaultPipelineId(spec, seedOf(i % 4), Math.floor(i / 4)),
      seed: seedOf(i % 4),
      repeat: Math.floor(i / 4)
    }))
    return Effect.gen(function*() {
      yield* buildOldStore(file, 3, (db) => {
        rows.forEach((r, i) => oldPipeline(db, r.id, { spec_digest: spec, seed_digest: r.seed, created_at: 1000 + i }))
        oldPipeline(db, "my-key#1", { key: "my-key#1", spec_digest: spec, seed_digest: seedOf(0), created_at: 2000 })
      })
      assert.strictEqual(storeMeta(file).version, "3")
      const before = snapshot(file)
      const v3 = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), (s) => Stream.runCollect(s.streamPipelines())))
      assert.isTrue(before.bytes.equals(snapshot(file).bytes), "a read-only open never migrates")
      assert.deepStrictEqual(Chunk.toArray(v3).map((p) => p.repeat), Array(13).fill(null))

      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        const got = Chunk.toArray(yield* Stream.runCollect(store.streamPipelines()))
        assert.deepStrictEqual(got.map((p) => [p.pipelineId, p.repeat]), [
          ...rows.map((r) => [r.id, r.repeat]),
          [pid("my-key#1"), null] // an explicit key does not encode its repeat
        ])
        // new admissions store theirs; a re-admission that does not know it keeps it
        yield* store.admit([pipeline("k#2", { key: "k#2", repeat: 2 })])
        yield* store.admit([pipeline("k#2", { key: "k#2", state: "succeeded" })])
        const k = Option.getOrThrow(yield* store.getPipeline(pid("k#2")))
        assert.strictEqual(k.repeat, 2)
        assert.strictEqual(k.state, "succeeded")
        assert.deepStrictEqual(yield* store.pipelinesBySpec, [{ specDigest: spec, pipelines: 13 }, { specDigest: "spec", pipelines: 1 }])
      }))
      assert.strictEqual(storeMeta(file).version, String(SCHEMA_VERSION))
    })
  })

  it.effect("child rows are grouped in admission order; paging crosses pages without loss; pipelines stay by (createdAt, id)", () => {
    const file = tempStorePath()
    return Effect.scoped(Effect.gen(function*() {
      const store = yield* open({ filename: file })
      // admitted in reverse id order, in three admissions; z-ids are created first
      const ids = Array.from({ length: 900 }, (_, i) => `q${String(i).padStart(4, "0")}`)
      const order = [...ids].reverse()
      for (const part of [order.slice(0, 300), order.slice(300, 600), order.slice(600)]) {
        yield* store.admit(part.map((id) => pipeline(id, { createdAt: 1000 + Number(id.slice(1)) })))
      }
      // re-admitting keeps the pipeline's place
      yield* store.admit([pipeline("q0899", { createdAt: 1899, state: "running" })])
      yield* Effect.forEach(order, (id) => Effect.all([store.putTask(task(id, 1)), store.putTask(task(id, 0))]), { concurrency: 8 })
      const tasks = Chunk.toArray(yield* Stream.runCollect(store.streamTasks()))
      assert.strictEqual(tasks.length, 1800, "two pages of 1000, no loss")
      assert.deepStrictEqual(
        tasks.map((t) => t.taskRunId),
        order.flatMap((id) => [`${id}/0`, `${id}/1`]),
        "admission order, then seq"
      )
      const byRun = Chunk.toArray(yield* Stream.runCollect(store.streamTasks({ runId: rid("run-1") })))
      assert.deepStrictEqual(byRun.map((t) => t.taskRunId), tasks.map((t) => t.taskRunId))
      const one = Chunk.toArray(yield* Stream.runCollect(store.streamTasks({ pipelineId: pid("q0450") })))
      assert.deepStrictEqual(one.map((t) => t.seq), [0, 1])
      // pipelines keep their documented order whatever the admission order
      const ps = Chunk.toArray(yield* Stream.runCollect(store.streamPipelines())).map((p) => p.pipelineId)
      assert.deepStrictEqual(ps, ids)
      const page1 = yield* store.pipelinesPage({ limit: 500 })
      const page2 = yield* store.pipelinesPage({ limit: 500, after: page1.next! })
      assert.deepStrictEqual([...page1.pipelines, ...page2.pipelines].map((p) => p.pipelineId), ids)
      assert.isNull(page2.next)
      const bundles = yield* store.loadBundles([pid("q0001"), pid("q0898")], { payloads: "none" })
      assert.deepStrictEqual(bundles.get(pid("q0898"))!.tasks.map((t) => t.seq), [0, 1])
    }))
  })

  it.effect("rows written before their pipeline is admitted are found by pipeline id, before and after admission", () => {
    const file = tempStorePath()
    return Effect.scoped(Effect.gen(function*() {
      const store = yield* open({ filename: file })
      yield* store.admit([pipeline("other")])
      yield* store.putTask(task("early", 0))
      yield* store.putArtifact(artifact("early", 0, new Uint8Array([1]), true))
      yield* store.putArtifact(artifact("late", 0, new Uint8Array([2]), true))
      yield* store.emitEvent(event("k", "early"))
      const read = Effect.gen(function*() {
        return {
          tasks: Chunk.toArray(yield* Stream.runCollect(store.streamTasks({ pipelineId: pid("early") }))).map((t) => t.taskRunId),
          finals: (yield* store.listArtifacts(pid("early"))).filter((a) => a.isFinal).length,
          lateFinals: (yield* store.listArtifacts(pid("late"))).filter((a) => a.isFinal).length,
          events: yield* store.countEvents({ pipelineId: pid("early") })
        }
      })
      const expected = { tasks: ["early/0"], finals: 1, lateFinals: 1, events: 1 }
      assert.deepStrictEqual(yield* read, expected, "a final artifact of one unadmitted pipeline leaves another's alone")
      yield* store.admit([pipeline("early")])
      yield* store.checkpoint({ pipelineId: pid("early"), task: task("early", 1), pipeline: { nTasksDone: 2, updatedAt: 3000 } })
      assert.deepStrictEqual(yield* read, { ...expected, tasks: ["early/0", "early/1"] })
      assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(pid("early"))).nTasksDone, 2)
    }))
  })

  it.effect("payloads that are views into a larger buffer are stored as their own bytes, a big one among small ones in one commit", () => {
    const file = tempStorePath()
    return Effect.scoped(Effect.gen(function*() {
      const store = yield* open({ filename: file })
      // one buffer, three Uint8Array views at offsets (not Buffers): the writer binds them as
      // they are; the big one (≥ 256 KiB) goes in a statement of its own, between the others
      const whole = new Uint8Array(300_000).map((_, i) => (i * 7) % 251)
      const view = (from: number, length: number) => new Uint8Array(whole.buffer, from, length)
      const payloads = { v1: view(7, 5), v2: view(16, 256 * 1024 + 5), v3: view(3, 1) }
      yield* store.admit(Object.keys(payloads).map((id) => pipeline(id)))
      yield* Effect.all(
        Object.entries(payloads).map(([id, payload]) =>
          store.checkpoint({ pipelineId: pid(id), artifact: artifact(id, 0, payload, true), task: task(id, 0) })
        ),
        { concurrency: "unbounded", discard: true }
      )
      for (const [id, payload] of Object.entries(payloads)) {
        const got = Option.getOrThrow(yield* store.getArtifact(pid(id), 0))
        assert.deepStrictEqual(got.payload, Uint8Array.from(payload), id)
        assert.strictEqual(got.artifact.size, payload.byteLength, id)
      }
    }))
  })

  it.effect("read-only open of a missing or un-migrated file is a clear error and creates nothing", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      const e1 = yield* refusal({ filename: file, readonly: true })
      assert.include(e1.message, "no assay store")
      assert.isFalse(fs.existsSync(file))
      new Database(file).close() // an empty SQLite file: no tables
      fs.writeFileSync(file, fs.readFileSync(file))
      const db = new Database(file)
      db.exec("CREATE TABLE IF NOT EXISTS dummy_never (x)")
      db.exec("DROP TABLE dummy_never")
      db.close()
      const e2 = yield* refusal({ filename: file, readonly: true })
      assert.include(e2.message, "missing table store_meta")
    })
  })

  it.effect("files that are not assay stores are refused and left untouched", () => {
    const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-foreign-"))
    const random = nodePath.join(dir, "random.db")
    const text = nodePath.join(dir, "notes.txt")
    const foreign = nodePath.join(dir, "other-app.db")
    const corrupt = nodePath.join(dir, "corrupt.db")
    fs.writeFileSync(random, Buffer.from(Array.from({ length: 8192 }, (_, i) => (i * 7919) % 256)))
    fs.writeFileSync(text, "hello, this is not a database\n".repeat(100))
    const db = new Database(foreign)
    db.exec("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.exec("INSERT INTO users (name) VALUES ('ada')")
    db.close()
    // a real SQLite header followed by garbage pages
    const header = Buffer.from("SQLite format 3\u0000", "latin1")
    fs.writeFileSync(corrupt, Buffer.concat([header, Buffer.alloc(8192, 0xab)]))
    return Effect.gen(function*() {
      for (const [file, expected] of [
        [random, "not an SQLite database"],
        [text, "not an SQLite database"],
        [foreign, "another application"],
        [corrupt, "not a readable assay store"]
      ] as const) {
        const before = snapshot(file)
        for (const readonly of [false, true]) {
          const e = yield* refusal({ filename: file, readonly })
          assert.strictEqual(e._tag, "StoreUnavailable")
          assert.include(e.message, expected)
        }
        const after = snapshot(file)
        assert.isTrue(before.bytes.equals(after.bytes), `${file} unchanged`)
        assert.deepStrictEqual(after.siblings, before.siblings, "no lock or journal files created")
      }
    })
  })

  it.effect("a store from an unknown (newer) feature level is refused, read-only too", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* populate(file)
      const db = new Database(file)
      db.prepare("UPDATE store_meta SET value = 'visits-v9' WHERE key = 'feature_level'").run()
      db.close()
      for (const readonly of [false, true]) {
        const e = yield* refusal({ filename: file, readonly })
        assert.include(e.message, `feature level "visits-v9"`)
      }
    })
  })

  it.effect("visits: a reopened store keeps the traversal state, ledger, occurrences and level visits-v1", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      const before = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* controlledToRewind(store, "k1")
        return Option.getOrThrow(yield* store.traversal!.visitState(pid("k1")))
      }))
      for (const readonly of [false, true]) {
        yield* Effect.scoped(Effect.gen(function*() {
          const store = yield* open({ filename: file, readonly })
          assert.strictEqual(store.featureLevel, "visits-v1")
          assert.deepStrictEqual(Option.getOrThrow(yield* store.traversal!.visitState(pid("k1"))), before)
          assert.deepStrictEqual((yield* store.traversal!.handoffs()).map((h) => h.entryArtifactId), ["k1:3"])
          assert.isFalse(Option.getOrThrow(yield* store.traversal!.getArtifactById("k1:0")).artifact.active)
          assert.isTrue(Option.isNone(yield* store.getArtifact(pid("k1"), 0)))
        }))
      }
    })
  })

  it.effect("traversal versions: the writer's in-memory versions; a reopen reads the stored one, a rolled-back commit leaves none behind", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      const s1 = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        return yield* controlledToRewind(store, "w1", "run-1", true)
      }))
      const s2 = Traversal.reserveAttempt(s1)
      const s3 = Traversal.reserveAttempt(s2)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        // a new writer knows no version: it reads the stored one and refuses a stale write
        const stale = yield* Effect.flip(
          store.checkpoint({ pipelineId: pid("w1"), traversal: { expectedVersion: s1.version - 1, state: s2 } })
        )
        assert.deepStrictEqual([Traversal.conflictOf(stale)?.expected, Traversal.conflictOf(stale)?.actual], [
          s1.version - 1,
          s1.version
        ])
        yield* store.checkpoint({ pipelineId: pid("w1"), traversal: { expectedVersion: s1.version, state: s2 } })
        // a commit that fails after its version check passed is rolled back, version included
        setWriteFailure(file, true)
        const failed = yield* Effect.flip(
          store.checkpoint({
            pipelineId: pid("w1"),
            pipeline: { updatedAt: 5 },
            traversal: { expectedVersion: s2.version, state: s3 }
          })
        )
        assert.isUndefined(Traversal.conflictOf(failed))
        assert.include(failed.message, "injected failure")
        setWriteFailure(file, false)
        // ... so the stored version is still s2's: a write based on s3 is refused, one on s2 commits
        const ahead = yield* Effect.flip(
          store.checkpoint({ pipelineId: pid("w1"), traversal: { expectedVersion: s3.version, state: Traversal.reserveAttempt(s3) } })
        )
        assert.strictEqual(Traversal.conflictOf(ahead)?.actual, s2.version)
        yield* store.checkpoint({ pipelineId: pid("w1"), pipeline: { updatedAt: 6 }, traversal: { expectedVersion: s2.version, state: s3 } })
        assert.deepStrictEqual(Option.getOrThrow(yield* store.traversal!.visitState(pid("w1"))), s3)
        // a terminal pipeline's version is forgotten by the writer, never mistaken: read again
        const end = Either.getOrThrow(Traversal.transition(s3, {
          operation: "end", fromSeq: 1, toSeq: "end", entry: "w1:0", payload: false, nTasks: 3, limit: 1
        }))
        yield* store.checkpoint({
          pipelineId: pid("w1"),
          pipeline: { state: "succeeded", updatedAt: 7 },
          traversal: { expectedVersion: s3.version, state: end }
        })
        const afterEnd = yield* Effect.flip(
          store.checkpoint({ pipelineId: pid("w1"), traversal: { expectedVersion: s3.version, state: end } })
        )
        assert.strictEqual(Traversal.conflictOf(afterEnd)?.actual, end.version)
      }))
      // and the file holds what the last writer committed
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file, readonly: true })
        assert.strictEqual(Option.getOrThrow(yield* store.traversal!.visitState(pid("w1"))).version, s3.version + 1)
      }))
    })
  })

  it.effect("visits: at visits-v1 the guard aborts an insert without a visit (a writer unaware of visits); base has no guard", () => {
    const file = tempStorePath()
    const rawInsert = (id: string) => {
      const db = new Database(file, { timeout: 5000 })
      try {
        db.prepare(
          "INSERT INTO tasks (pno, seq, task_run_id, pipeline_id, run_id, task_name, state, attempts_used, started_at, lease_ids) VALUES (1, 0, ?, 'x', 'run-1', 't0', 'succeeded', 1, 1, '[]')"
        ).run(id)
        return "written"
      } catch (e) {
        return String(e)
      } finally {
        db.close()
      }
    }
    return Effect.gen(function*() {
      yield* populate(file)
      assert.strictEqual(rawInsert("old-writer-1"), "written")
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* controlledToRewind(store, "g1")
        // this build's writers always write the visit: unaffected by the guard
        yield* store.checkpoint({ pipelineId: pid("p2"), task: task("p2", 0), artifact: artifact("p2", 0, new Uint8Array([1])) })
        yield* store.recordAttempt(attempt("p2", 0))
        yield* store.flush
      }))
      assert.include(rawInsert("old-writer-2"), "does not record visits")
    })
  })

  it.effect.runIf(SQLITE3 !== undefined)("visits: the sqlite3 shell checks, vacuums and dumps a visits-v1 store, and a copy keeps the guard", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* populate(file)
      yield* Effect.scoped(Effect.flatMap(open({ filename: file }), (store) => controlledToRewind(store, "g1")))
      assert.deepStrictEqual(shell(file, "PRAGMA integrity_check;"), { status: 0, out: "ok", err: "" })
      assert.deepStrictEqual(shell(file, "VACUUM;"), { status: 0, out: "", err: "" })
      const copy = nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-dump-")), "copy.db")
      const dump = shell(file, ".dump")
      assert.strictEqual(dump.status, 0)
      assert.deepStrictEqual(shell(copy, dump.out), { status: 0, out: "", err: "" })
      for (const f of [file, copy]) {
        const refused = shell(
          f,
          "INSERT INTO tasks (pno, seq, task_run_id, pipeline_id, run_id, task_name, state, attempts_used, started_at, lease_ids) VALUES (1, 9, 'x', 'x', 'run-1', 't0', 'succeeded', 1, 1, '[]');"
        )
        assert.notStrictEqual(refused.status, 0)
        assert.include(refused.err, "does not record visits")
      }
      // the copy reads like the store: same rows, same level
      yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* open({ filename: file, readonly: true })
        const b = yield* open({ filename: copy, readonly: true })
        assert.strictEqual(b.featureLevel, "visits-v1")
        assert.deepStrictEqual(yield* b.traversal!.handoffs(), yield* a.traversal!.handoffs())
      }))
    })
  })

  it.effect("visits: a version-12 store at visits-v1 (trigger guard) migrates to the index guard; old rows read visit 0; writes go on", () => {
    const file = tempStorePath()
    const trigger = (table: string) =>
      `CREATE TRIGGER ${table}_visits_guard BEFORE INSERT ON ${table} WHEN NEW.visit IS NULL BEGIN SELECT RAISE(ABORT, 'assay store at feature level visits-v1: this writer does not record visits (use a newer assay)'); END`
    return Effect.gen(function*() {
      yield* buildOldStore(file, 12, (db) => {
        db.prepare(
          "INSERT INTO pipelines (pipeline_id, key, name, state, n_tasks_done, n_tasks_total, spec_digest, seed_digest, tags, attempts_total, run_id, created_at, updated_at) VALUES ('o1', NULL, 'demo', 'succeeded', 1, 1, 'spec', 'seed', '{}', 1, 'run-1', 1, 2)"
        ).run()
        // a row from before the visit columns (no visit), then the level move of a version-12 writer
        db.prepare(
          "INSERT INTO tasks (pno, seq, task_run_id, pipeline_id, run_id, task_name, state, attempts_used, started_at, lease_ids) VALUES (1, 0, 'o1/0', 'o1', 'run-1', 't0', 'succeeded', 1, 1, '[]')"
        ).run()
        db.prepare(
          "INSERT INTO artifacts (pno, pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage, payload, is_final, created_at) VALUES (1, 'o1', 'run-1', 0, 't0', 'Json', 'json', 'd', 1, 'inline', x'31', 1, 2)"
        ).run()
        db.prepare("UPDATE store_meta SET value = 'visits-v1' WHERE key = 'feature_level'").run()
        for (const t of ["tasks", "attempts", "artifacts"]) db.exec(trigger(t))
      })
      const objects = () => {
        const db = new Database(file, { readonly: true })
        try {
          return (db.prepare("SELECT type, name FROM sqlite_master WHERE name LIKE '%visits%' ORDER BY name").all() as Array<{ type: string; name: string }>)
            .map((r) => `${r.type} ${r.name}`)
        } finally {
          db.close()
        }
      }
      assert.deepStrictEqual(objects(), ["trigger artifacts_visits_guard", "trigger attempts_visits_guard", "trigger tasks_visits_guard"])
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        assert.strictEqual(store.featureLevel, "visits-v1")
        const t = Chunk.toArray(yield* Stream.runCollect(store.streamTasks()))
        assert.deepStrictEqual(t.map((r) => [r.visit, r.active]), [[0, true]])
        yield* controlledToRewind(store, "g1")
      }))
      assert.strictEqual(storeMeta(file).version, String(SCHEMA_VERSION))
      assert.deepStrictEqual(objects(), ["index artifacts_visits_required", "index attempts_visits_required", "index tasks_visits_required"])
      const db = new Database(file)
      try {
        assert.strictEqual((db.prepare("SELECT count(*) AS n FROM tasks WHERE visit IS NULL").get() as { n: number }).n, 0)
        assert.throws(
          () =>
            db.prepare(
              "INSERT INTO attempts (pno, pipeline_id, run_id, task_run_id, task_name, seq, attempt_no, outcome, lease_ids, started_at, ended_at, duration_ms) VALUES (1, 'o1', 'run-1', 'o1/0', 't0', 0, 2, 'succeeded', '[]', 1, 2, 1)"
            ).run(),
          /does not record visits/
        )
        assert.deepStrictEqual(db.pragma("integrity_check"), [{ integrity_check: "ok" }])
      } finally {
        db.close()
      }
    })
  })

  it.effect("visits: a version-5 store migrates without rewriting rows; its rows read visit 0 and active, read-only too", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* buildOldStore(file, 5, (db) => {
        db.prepare(
          "INSERT INTO pipelines (pipeline_id, key, name, state, n_tasks_done, n_tasks_total, spec_digest, seed_digest, tags, attempts_total, run_id, created_at, updated_at) VALUES ('o1', NULL, 'demo', 'succeeded', 1, 1, 'spec', 'seed', '{}', 1, 'run-1', 1, 2)"
        ).run()
        db.prepare(
          "INSERT INTO tasks (pno, seq, task_run_id, pipeline_id, run_id, task_name, state, attempts_used, started_at, lease_ids) VALUES (1, 0, 'o1/0', 'o1', 'run-1', 't0', 'succeeded', 1, 1, '[]')"
        ).run()
        db.prepare(
          "INSERT INTO artifacts (pno, pipeline_id, run_id, seq, task_name, type_name, codec, digest, size, storage, payload, is_final, created_at) VALUES (1, 'o1', 'run-1', 0, 't0', 'Json', 'json', 'd', 1, 'inline', x'31', 1, 2)"
        ).run()
      })
      for (const readonly of [true, false]) {
        yield* Effect.scoped(Effect.gen(function*() {
          const store = yield* open({ filename: file, readonly })
          const t = Chunk.toArray(yield* Stream.runCollect(store.streamTasks()))
          assert.deepStrictEqual(t.map((r) => [r.visit, r.active]), [[0, true]])
          const a = Option.getOrThrow(yield* store.getArtifact(pid("o1"), 0))
          assert.deepStrictEqual([a.artifact.visit, a.artifact.active], [0, true])
          assert.deepStrictEqual(Option.getOrThrow(yield* store.traversal!.getArtifactById("o1:0")).payload, a.payload)
          assert.isTrue(Option.isNone(yield* store.traversal!.visitState(pid("o1"))))
          assert.deepStrictEqual(yield* store.traversal!.handoffs(), [])
          assert.strictEqual((yield* store.stats()).handoffsTotal, 0)
          assert.strictEqual(store.featureLevel, "base")
        }))
      }
      assert.strictEqual(storeMeta(file).version, String(SCHEMA_VERSION))
    })
  })

  it.effect("a second writer in the same process fails fast; readers are allowed", () => {
    const file = tempStorePath()
    return Effect.scoped(Effect.gen(function*() {
      const first = yield* open({ filename: file })
      yield* first.openRun({ runId: rid("run-A"), startedAt: 1 })
      const e = yield* refusal({ filename: file })
      assert.include(e.message, "already open for writing")
      assert.include(e.message, `pid ${process.pid}`)
      assert.include(e.message, "run-A")
      const reader = yield* open({ filename: file, readonly: true })
      assert.strictEqual((yield* reader.listRuns).length, 1)
    }))
  })
})

/** The files beside a store file (its directory's entries), with their sizes. */
const filesBeside = (file: string) =>
  Object.fromEntries(fs.readdirSync(nodePath.dirname(file)).sort().map((f) => [f, fs.statSync(nodePath.join(nodePath.dirname(file), f)).size]))

/** Copies the database file alone (no `-wal`, no `-shm`) into a fresh directory. */
const copyAlone = (file: string) => {
  const copy = nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-copy-")), "copy.db")
  fs.copyFileSync(file, copy)
  return copy
}

/** POSIX lock lines of this process on `file` (by inode), from /proc/locks. */
const myLocks = (file: string) => {
  const ino = fs.statSync(file).ino
  return fs.readFileSync("/proc/locks", "utf8").split("\n").filter((l) => {
    const f = l.trim().split(/\s+/)
    return f[5]?.endsWith(`:${ino}`) === true && Number(f[4]) === process.pid
  })
}

describe("SqliteStore: the process keeps its SQLite locks", () => {
  it.effect("opening writers and readers, and asking which files are stores, never drops the locks SQLite holds", () => {
    const file = tempStorePath()
    return Effect.scoped(Effect.gen(function*() {
      const store = yield* open({ filename: file })
      yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
      assert.isAbove(myLocks(file).length, 0, "the writer holds its lock on the database file")
      assert.isAbove(myLocks(`${file}-shm`).length, 0, "and on the shared-memory file")
      // every reader opener in this process (report, watch, serve, export) goes through a read-only open
      const reader = yield* open({ filename: file, readonly: true })
      assert.strictEqual((yield* reader.stats()).pipelines, 0)
      assert.isTrue(SqliteStore.isSqliteFile(file))
      assert.isFalse(SqliteStore.isSqliteFile(`${file}-wal`))
      assert.isFalse(SqliteStore.isSqliteFile(`${file}-shm`))
      assert.strictEqual(SqliteStore.openStoreFileOf(`${file}-shm`), file)
      assert.strictEqual(SqliteStore.openStoreFileOf(`${file}.lock`), file)
      assert.isUndefined(SqliteStore.openStoreFileOf(`${file}.other`))
      yield* store.admit([pipeline("p1")])
      assert.isAbove(myLocks(file).length, 0, "still locked after every open and check")
      assert.isAbove(myLocks(`${file}-shm`).length, 0)
    }))
  })
})

describe("SqliteStore: a closed store is one file", () => {
  it.effect("a writer leaves no .lock beside the store; a closed store with no reader is the .db alone", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
        assert.isTrue(fs.existsSync(`${file}.lock`), "the lock file exists while the writer is open")
      }))
      assert.deepStrictEqual(Object.keys(filesBeside(file)), ["runs.db"])
      // and the next writer takes the lock again (a fresh lock file)
      yield* Effect.scoped(Effect.flatMap(open({ filename: file }), (s) => s.listRuns))
      assert.deepStrictEqual(Object.keys(filesBeside(file)), ["runs.db"])
    })
  })

  it.effect("with a reader still connected at close, the WAL is emptied into the file: a copy of the .db alone has everything", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      const reader = yield* Effect.acquireRelease(
        Effect.sync(() => ({ current: undefined as Database.Database | undefined })),
        (r) => Effect.sync(() => r.current?.close())
      )
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
        // an outside reader (like `watch`) connected while the writer closes
        reader.current = new Database(file, { readonly: true })
        assert.strictEqual(reader.current.prepare("SELECT count(*) FROM runs").pluck().get(), 1)
        yield* store.admit(Array.from({ length: 300 }, (_, i) => pipeline(`p${i}`)))
        yield* store.finishRun(rid("run-1"), { status: "completed", endedAt: 9 })
      }))
      const files = filesBeside(file)
      assert.isUndefined(files["runs.db.lock"], "no lock file")
      assert.strictEqual(files["runs.db-wal"] ?? 0, 0, "no bytes left in the WAL")
      const copy = copyAlone(file)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: copy, readonly: true })
        const stats = yield* store.stats()
        assert.strictEqual(stats.pipelines, 300)
        assert.isUndefined(stats.walPendingFrames)
        assert.strictEqual(Option.getOrThrow(yield* store.latestRun).status, "completed")
      }))
    }).pipe(Effect.scoped)
  })

  it.live("a reader inside a read transaction past the bounded wait: the pending WAL frames are recorded and reported", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      const reader = yield* Effect.acquireRelease(
        Effect.sync(() => ({ db: undefined as Database.Database | undefined, rows: undefined as IterableIterator<unknown> | undefined })),
        (r) =>
          Effect.sync(() => {
            r.rows?.return?.()
            r.db?.close()
          })
      )
      const t0 = Date.now()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file, busyTimeoutMs: 300 })
        yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
        reader.db = new Database(file, { readonly: true })
        // a read transaction held open (an iterator not run to its end) on an old snapshot
        reader.rows = reader.db.prepare("SELECT * FROM runs").iterate()
        reader.rows.next()
        yield* store.admit(Array.from({ length: 50 }, (_, i) => pipeline(`p${i}`)))
        yield* store.finishRun(rid("run-1"), { status: "completed", endedAt: 9 })
      }))
      assert.isAtLeast(Date.now() - t0, 300, "the writer waited for the reader")
      assert.isAbove(filesBeside(file)["runs.db-wal"] ?? 0, 0)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file, readonly: true })
        const stats = yield* store.stats()
        assert.strictEqual(stats.pipelines, 50)
        assert.isAbove(stats.walPendingFrames ?? 0, 0)
      }))
      const text = Report.renderText(yield* Report.reportPaths([file]).pipe(Effect.provide(StoreResolver.layerOpener())))
      assert.match(text, /WAL of .*runs\.db holds \d+ page\(s\) not yet in the database file: copy .*runs\.db-wal with it/)
      // once the reader is gone, the next writer's close completes the checkpoint
      reader.rows?.return?.()
      reader.db?.close()
      reader.db = undefined
      yield* Effect.scoped(Effect.flatMap(open({ filename: file }), (s) => s.listRuns))
      assert.deepStrictEqual(Object.keys(filesBeside(file)), ["runs.db"])
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: copyAlone(file), readonly: true })
        const stats = yield* store.stats()
        assert.strictEqual(stats.pipelines, 50)
        assert.isUndefined(stats.walPendingFrames)
      }))
    }).pipe(Effect.scoped)
  })
})

class HolderExited extends Data.TaggedError("HolderExited")<{ readonly code: number | null; readonly stderr: string }> {}

const spawnHolder = (file: string) =>
  Effect.async<{ readonly pid: number; readonly kill: () => Promise<void> }, HolderExited>((resume) => {
    const child = spawn(process.execPath, [program("test/fixtures/store/holder.ts"), file], { stdio: ["ignore", "pipe", "pipe"] })
    let err = ""
    child.stderr.on("data", (d) => (err += String(d)))
    child.stdout.on("data", (d) => {
      if (String(d).includes("ready")) {
        resume(Effect.succeed({
          pid: child.pid!,
          kill: () =>
            new Promise<void>((res) => {
              child.once("exit", () => res())
              child.kill("SIGKILL")
            })
        }))
      }
    })
    child.once("exit", (code) => resume(Effect.fail(new HolderExited({ code, stderr: err }))))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

describe("SqliteStore across processes", () => {
  it.live("a writer in another process is named in the refusal; after kill -9 the store opens", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      const holder = yield* spawnHolder(file)
      const e = yield* refusal({ filename: file })
      assert.include(e.message, "already open for writing")
      assert.include(e.message, `pid ${holder.pid}`)
      assert.include(e.message, "child-run")
      // readers are always allowed
      yield* Effect.scoped(Effect.gen(function*() {
        const reader = yield* open({ filename: file, readonly: true })
        assert.strictEqual(Option.getOrThrow(yield* reader.latestRun).runId, "child-run")
      }))
      yield* Effect.promise(holder.kill)
      // the kernel released the crashed holder's lock: the next writer gets in and can mark it stale
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        const stale = yield* store.interruptStale(0, Date.now() + 1)
        assert.deepStrictEqual(stale.map((r) => r.runId), ["child-run"])
      }))
    })
  }, 30_000)
})
