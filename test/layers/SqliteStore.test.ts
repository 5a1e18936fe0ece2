import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Chunk, Data, Effect, Layer, Option, Stream } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import { Store } from "../../src/services/Store.js"
import { artifact, event, pipeline, type StoreHarness, storeContract, task } from "./StoreContract.js"

/** A fresh temporary store path (the directory is under os.tmpdir()). */
const tempStorePath = () => nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-store-")), "runs.db")

/**
 * Injects a real SQLite failure from a second connection: triggers that abort every insert
 * and update of the store's tables.
 */
const setWriteFailure = (file: string, on: boolean) => {
  const db = new Database(file, { timeout: 5000 })
  try {
    for (const t of ["events", "attempts", "artifacts", "tasks", "pipelines"]) {
      for (const op of ["INSERT", "UPDATE"]) {
        const name = `fail_${t}_${op.toLowerCase()}`
        db.exec(
          on
            ? `CREATE TRIGGER IF NOT EXISTS ${name} BEFORE ${op} ON ${t} BEGIN SELECT RAISE(ABORT, 'injected failure'); END`
            : `DROP TRIGGER IF EXISTS ${name}`
        )
      }
    }
  } finally {
    db.close()
  }
}

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
    yield* store.openRun({ runId: "run-1", startedAt: 1 })
    yield* store.admit([pipeline("p1"), pipeline("p2")])
    yield* store.checkpoint({
      pipelineId: "p1",
      artifact: artifact("p1", 0, new Uint8Array([1, 2, 3]), true),
      task: task("p1", 0),
      pipeline: { nTasksDone: 1, updatedAt: 5 }
    })
    yield* store.emitEvent(event("k", "p1"))
  }))

const refusal = (options: SqliteStore.SqliteStoreOptions) =>
  Effect.flip(Effect.scoped(open(options)))

describe("SqliteStore (SQLite only)", () => {
  it.effect("reopening after close sees everything, including buffered facts flushed on close", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* populate(file)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        assert.strictEqual(Option.getOrThrow(yield* store.getPipeline("p1")).nTasksDone, 1)
        assert.strictEqual(yield* store.countEvents({ kind: "k" }), 1)
        const a = Option.getOrThrow(yield* store.getArtifact("p1", 0))
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
        const e3 = yield* Effect.flip(store.openRun({ runId: "r", startedAt: 1 }))
        assert.strictEqual(e3._tag, "StoreUnavailable")
      }))
      const after = snapshot(file)
      assert.isTrue(before.bytes.equals(after.bytes))
      assert.strictEqual(after.mtime, before.mtime)
      assert.deepStrictEqual(after.siblings, before.siblings, "no -wal, -shm or lock file created")
    })
  })

  it.effect("a version-1 store: read-only opens read it unchanged (slower stats path); a writer migrates it to version 2", () => {
    const file = tempStorePath()
    const meta = () => {
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
    return Effect.gen(function*() {
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file })
        yield* store.admit(Array.from({ length: 50 }, (_, i) =>
          pipeline(`v${i}`, { state: i % 4 === 0 ? "failed" : "succeeded", startedAt: 100, endedAt: 100 + ((i * 37) % 50) })))
      }))
      const current = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), (s) => s.stats("run-1")))
      assert.strictEqual(meta().version, "2")
      assert.includeMembers(meta().indexes, ["pipelines_latency", "pipelines_run_latency", "pipelines_run_state"])
      // turn it back into a version-1 store, as an older build left it
      const db = new Database(file)
      db.exec(`DROP INDEX pipelines_run_state; DROP INDEX pipelines_run_latency; DROP INDEX pipelines_latency;
        UPDATE store_meta SET value = '1' WHERE key = 'schema_version';
        DELETE FROM effect_sql_migrations WHERE migration_id = 2;`)
      db.close()
      const before = snapshot(file)
      const old = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* open({ filename: file, readonly: true })
        const page = yield* store.pipelinesPage({ runId: "run-1", limit: 10 })
        assert.strictEqual(page.pipelines.length, 10)
        assert.strictEqual((yield* store.completions({ runId: "run-1", bucketMs: 10, since: 100 })).reduce((a, b) => a + b.count, 0), 50)
        return yield* store.stats("run-1")
      }))
      assert.deepStrictEqual(old, current, "the fallback computes the same stats")
      const after = snapshot(file)
      assert.isTrue(before.bytes.equals(after.bytes), "a read-only open never migrates")
      assert.strictEqual(meta().version, "1")
      yield* Effect.scoped(open({ filename: file }))
      assert.strictEqual(meta().version, "2")
      assert.includeMembers(meta().indexes, ["pipelines_latency", "pipelines_run_latency", "pipelines_run_state"])
      const migrated = yield* Effect.scoped(Effect.flatMap(open({ filename: file, readonly: true }), (s) => s.stats("run-1")))
      assert.deepStrictEqual(migrated, current)
    })
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
      db.prepare("UPDATE store_meta SET value = 'visits-v1' WHERE key = 'feature_level'").run()
      db.close()
      for (const readonly of [false, true]) {
        const e = yield* refusal({ filename: file, readonly })
        assert.include(e.message, `feature level "visits-v1"`)
      }
    })
  })

  it.effect("a second writer in the same process fails fast; readers are allowed", () => {
    const file = tempStorePath()
    return Effect.scoped(Effect.gen(function*() {
      const first = yield* open({ filename: file })
      yield* first.openRun({ runId: "run-A", startedAt: 1 })
      const e = yield* refusal({ filename: file })
      assert.include(e.message, "already open for writing")
      assert.include(e.message, `pid ${process.pid}`)
      assert.include(e.message, "run-A")
      const reader = yield* open({ filename: file, readonly: true })
      assert.strictEqual((yield* reader.listRuns).length, 1)
    }))
  })
})

const holderScript = (file: string) => `
import { Effect, Layer } from "effect"
import * as SqliteStore from ${JSON.stringify(nodePath.resolve("src/layers/SqliteStore.ts"))}
import { Store } from ${JSON.stringify(nodePath.resolve("src/services/Store.ts"))}
const program = Effect.gen(function*() {
  const store = yield* Store
  yield* store.openRun({ runId: "child-run", startedAt: Date.now() })
  process.stdout.write("ready\\n")
  yield* Effect.never
})
Effect.runFork(program.pipe(Effect.provide(SqliteStore.layer({ filename: ${JSON.stringify(file)} }))))
`

class HolderExited extends Data.TaggedError("HolderExited")<{ readonly code: number | null; readonly stderr: string }> {}

const spawnHolder = (file: string) =>
  Effect.async<{ readonly pid: number; readonly kill: () => Promise<void> }, HolderExited>((resume) => {
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "--eval", holderScript(file)], { stdio: ["ignore", "pipe", "pipe"] })
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
