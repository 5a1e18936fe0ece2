/**
 * Issue 18 trial: `--cache-mode readOnly` over a cache file the user may not write (chmod 444,
 * a read-only folder) failed, because the cache was opened for writing (WAL journal mode set,
 * table created). In `readOnly` the cache is opened read-only, as `validate` opens it: it
 * serves what is stored and writes nothing, not a byte of the file and nothing beside it.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Exit, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import type { CacheEntry } from "../../src/services/CallCache.js"

const entry: CacheEntry = {
  key: "0123456789abcdef0123456789abcdef",
  taskName: "chat",
  namespace: { repeat: 0, visit: 0, variant: null },
  typeName: "Json",
  codec: "json",
  data: new TextEncoder().encode(`{"content":"stored"}`),
  usage: null,
  createdAt: 1
}

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(NodePath.join(os.tmpdir(), "assay-rocache-"))),
  (dir) =>
    Effect.sync(() => {
      fs.chmodSync(dir, 0o755)
      fs.rmSync(dir, { recursive: true, force: true })
    })
)

/** A cache file holding `entry`, in rollback-journal mode (opening it for writing as a shared cache would change its header). */
const filledCache = (file: string) =>
  Effect.scoped(Effect.gen(function*() {
    const cache = yield* SqliteCallCache.make({ filename: file })
    yield* cache.put(entry)
  })).pipe(Effect.tap(() => {
    const d = new Database(file)
    const mode = d.pragma("journal_mode", { simple: true })
    d.close()
    assert.strictEqual(mode, "delete")
  }))

describe("SqliteCallCache readOnly", () => {
  it.scopedLive("serves what is stored, refuses to store, and leaves the file byte for byte as it was (nothing beside it)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = NodePath.join(dir, "cache.db")
      yield* filledCache(file)
      const before = fs.readFileSync(file)
      yield* Effect.scoped(Effect.gen(function*() {
        const cache = yield* SqliteCallCache.make({ filename: file, shared: true, readOnly: true })
        const got = yield* cache.get(entry.key)
        assert.isTrue(Option.isSome(got))
        assert.strictEqual(new TextDecoder().decode(Option.getOrThrow(got).data), `{"content":"stored"}`)
        assert.strictEqual(yield* cache.size, 1)
        const put = yield* Effect.exit(cache.put({ ...entry, key: "f".repeat(32) }))
        assert.isTrue(Exit.isFailure(put))
      }))
      assert.isTrue(fs.readFileSync(file).equals(before), "the cache file was written")
      assert.deepStrictEqual(fs.readdirSync(dir), ["cache.db"])
    }))

  it.scopedLive("a missing file is an empty cache and is not created", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = NodePath.join(dir, "none.db")
      yield* Effect.scoped(Effect.gen(function*() {
        const cache = yield* SqliteCallCache.make({ filename: file, shared: true, readOnly: true })
        assert.isTrue(Option.isNone(yield* cache.get(entry.key)))
        assert.strictEqual(yield* cache.size, 0)
      }))
      assert.deepStrictEqual(fs.readdirSync(dir), [])
    }))

  // permissions do not bind root: this case runs for an ordinary user (checked as `nobody`)
  for (const journal of ["delete", "wal"] as const) it.scopedLive.skipIf(process.getuid?.() === 0)(`a chmod 444 ${journal}-journal file in a read-only folder is served`, () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = NodePath.join(dir, "cache.db")
      yield* filledCache(file)
      if (journal === "wal") {
        // a shared cache is in WAL mode: SQLite cannot make its -shm file in a read-only folder
        const d = new Database(file)
        d.pragma("journal_mode = WAL")
        d.close()
      }
      fs.chmodSync(file, 0o444)
      fs.chmodSync(dir, 0o555)
      const got = yield* Effect.scoped(Effect.gen(function*() {
        const cache = yield* SqliteCallCache.make({ filename: file, shared: true, readOnly: true })
        return yield* cache.get(entry.key)
      }))
      assert.isTrue(Option.isSome(got))
    }))
})
