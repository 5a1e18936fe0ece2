/**
 * StoreFiles: the registry of stores open in this process, and checks that never open one of
 * their files by descriptor (closing it would drop the SQLite locks the process holds on it,
 * issue 19 §1). `Export.checkOutput` goes through it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Export from "../../src/services/internal/export.js"
import { Store } from "../../src/services/Store.js"
import * as StoreFiles from "../../src/services/StoreFiles.js"
import { rid } from "../support/ids.js"

const tempStorePath = () => nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-storefiles-")), "runs.db")

const open = (options: SqliteStore.SqliteStoreOptions) =>
  Effect.map(Layer.build(SqliteStore.layer(options)), (ctx) => ctx.unsafeMap.get(Store.key) as Store["Type"])

/** POSIX lock lines of this process on `file` (by inode), from /proc/locks. */
const myLocks = (file: string) => {
  const ino = fs.statSync(file).ino
  return fs.readFileSync("/proc/locks", "utf8").split("\n").filter((l) => {
    const f = l.trim().split(/\s+/)
    return f[5]?.endsWith(`:${ino}`) === true && Number(f[4]) === process.pid
  })
}

describe("StoreFiles", () => {
  it.effect("checkOutput refuses every file of an open store and keeps the writer's SQLite locks", () => {
    const file = tempStorePath()
    const link = `${file}.link`
    return Effect.scoped(Effect.gen(function*() {
      const store = yield* open({ filename: file })
      yield* store.openRun({ runId: rid("run-1"), startedAt: 1 })
      fs.symlinkSync(file, link)
      assert.isAbove(myLocks(file).length, 0, "the writer holds its lock on the database file")
      assert.isAbove(myLocks(`${file}-shm`).length, 0)
      // the store is not among the inputs: only the registry (or a header read) can tell
      for (const out of [file, link, `${file}-wal`, `${file}-shm`, `${file}.lock`]) {
        const e = yield* Effect.flip(Export.checkOutput(out, []))
        assert.strictEqual(e._tag, "ConfigError")
        assert.include(e.message, "refusing to write")
      }
      assert.isTrue(StoreFiles.isSqliteFile(file))
      assert.isTrue(StoreFiles.isSqliteFile(link))
      assert.isFalse(StoreFiles.isSqliteFile(`${file}-wal`))
      assert.strictEqual(StoreFiles.openStoreFileOf(link), file)
      assert.strictEqual(StoreFiles.openStoreFileOf(`${file}-shm`), file)
      yield* store.openRun({ runId: rid("run-2"), startedAt: 2 })
      assert.isAbove(myLocks(file).length, 0, "still locked after every check")
      assert.isAbove(myLocks(`${file}-shm`).length, 0)
    }))
  })

  it.effect("a closed store leaves the registry; its file is then recognised by its header", () => {
    const file = tempStorePath()
    return Effect.gen(function*() {
      yield* Effect.scoped(Effect.asVoid(open({ filename: file })))
      assert.isUndefined(StoreFiles.openStoreFileOf(file))
      assert.isTrue(StoreFiles.isSqliteFile(file))
      const e = yield* Effect.flip(Export.checkOutput(file, []))
      assert.include(e.message, "existing SQLite database")
      // the sibling of an input store (not open yet) is refused too
      const wal = yield* Effect.flip(Export.checkOutput(`${file}-wal`, [file]))
      assert.include(wal.message, "-wal file of the input store")
      const text = nodePath.join(nodePath.dirname(file), "out.csv")
      fs.writeFileSync(text, "a,b\n")
      assert.isFalse(StoreFiles.isSqliteFile(text))
      assert.isFalse(StoreFiles.isSqliteFile(nodePath.join(nodePath.dirname(file), "missing")))
      yield* Export.checkOutput(text, [file])
    })
  })

  it.effect("registrations nest: a file stays registered until its last open closes", () => {
    const file = tempStorePath()
    fs.writeFileSync(file, "")
    return Effect.gen(function*() {
      yield* Effect.scoped(Effect.gen(function*() {
        yield* StoreFiles.registerOpen(file)
        yield* Effect.scoped(StoreFiles.registerOpen(file))
        assert.strictEqual(StoreFiles.openStoreFileOf(file), file, "one open left")
      }))
      assert.isUndefined(StoreFiles.openStoreFileOf(file))
      yield* Effect.scoped(StoreFiles.registerOpen(`${file}.missing`))
      assert.isUndefined(StoreFiles.openStoreFileOf(`${file}.missing`))
    })
  })
})
