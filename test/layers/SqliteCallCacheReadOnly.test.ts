/**
 * Issue 18 trial: `--cache-mode readOnly` over a cache file the user may not write (chmod 444,
 * a read-only folder) failed, because the cache was opened for writing (WAL journal mode set,
 * table created). In `readOnly` the cache is opened read-only, as `validate` opens it: it
 * serves what is stored and writes nothing, not a byte of the file and nothing beside it.
 *
 * Second trial: a WAL cache left with answers only in its `-wal` (a writer killed before it
 * checkpointed, or a copy of a cache in use) and no `-shm`, in a read-only folder: as an
 * ordinary user those answers were silently ignored (only the main file was read), and as
 * root SQLite created `-shm` beside the file. Such a file is now read from a snapshot of the
 * file and its `-wal`: every answer served, nothing created beside it.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Exit, Logger, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as NodePath from "node:path"
import * as SqliteCallCache from "../../src/layers/SqliteCallCache.js"
import type { CacheEntry } from "../../src/services/CallCache.js"
import { asRoot, hasNobody, lastLine, runProbeAsNobody } from "../support/asNobody.js"

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

const keyOf = (i: number) => i.toString(16).padStart(4, "0").padEnd(32, "a")

/** A folder another user can reach: in /tmp itself (the tests' own temporary root is 0700). */
const sharedTempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(NodePath.join("/tmp", "assay-rocache-"))),
  (dir) =>
    Effect.sync(() => {
      fs.chmodSync(dir, 0o755)
      fs.rmSync(dir, { recursive: true, force: true })
    })
)

/**
 * A WAL cache copied while its writer is open (as a copy of a cache in use, or what a writer
 * killed with -9 leaves): `inFile` answers checkpointed into the file, then `inWal` more only
 * in the `-wal`; no `-shm`. Returns the keys of all of them.
 */
const walOnlyCopy = (source: string, target: string, inFile: number, inWal: number) =>
  Effect.scoped(Effect.gen(function*() {
    const cache = yield* SqliteCallCache.make({ filename: source, shared: true })
    for (let i = 0; i < inFile; i++) yield* cache.put({ ...entry, key: keyOf(i) })
    const d = new Database(source)
    d.pragma("wal_checkpoint(TRUNCATE)")
    d.close()
    for (let i = inFile; i < inFile + inWal; i++) yield* cache.put({ ...entry, key: keyOf(i) })
    fs.copyFileSync(source, target)
    fs.copyFileSync(`${source}-wal`, `${target}-wal`)
    assert.isAbove(fs.statSync(`${target}-wal`).size, 0)
    return Array.from({ length: inFile + inWal }, (_, i) => keyOf(i))
  }))

describe("SqliteCallCache readOnly, answers only in the -wal", () => {
  it.scopedLive("serves every answer of the -wal from a snapshot and creates nothing beside the file (any user)", () =>
    Effect.gen(function*() {
      const src = yield* tempDir
      const dir = yield* tempDir
      const file = NodePath.join(dir, "shared.db")
      const keys = yield* walOnlyCopy(NodePath.join(src, "shared.db"), file, 28, 7)
      const before = [fs.readFileSync(file), fs.readFileSync(`${file}-wal`)]
      const logs: Array<string> = []
      yield* Effect.scoped(Effect.gen(function*() {
        const cache = yield* SqliteCallCache.make({ filename: file, shared: true, readOnly: true })
        assert.strictEqual(yield* cache.size, 35)
        for (const key of keys) assert.isTrue(Option.isSome(yield* cache.get(key)), key)
        assert.isTrue(Exit.isFailure(yield* Effect.exit(cache.put({ ...entry, key: "f".repeat(32) }))))
      })).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => void logs.push(String(message))))))
      // nothing created beside it (as root SQLite made shared.db-shm here), nothing written
      assert.deepStrictEqual(fs.readdirSync(dir).sort(), ["shared.db", "shared.db-wal"])
      assert.isTrue(fs.readFileSync(file).equals(before[0]!))
      assert.isTrue(fs.readFileSync(`${file}-wal`).equals(before[1]!))
      // the log says a snapshot was read
      assert.isTrue(logs.some((l) => l.includes("read a snapshot of") && l.includes("shared.db-wal")), logs.join("\n"))
    }))

  // permissions do not bind root: the probe runs as `nobody` in a child process
  if (!asRoot) {
    it.scopedLive("as this ordinary user, a chmod 444 file + -wal in a 555 folder serves all 35 answers", () =>
      Effect.gen(function*() {
        const src = yield* tempDir
        const dir = yield* tempDir
        const file = NodePath.join(dir, "shared.db")
        const keys = yield* walOnlyCopy(NodePath.join(src, "shared.db"), file, 28, 7)
        fs.chmodSync(file, 0o444)
        fs.chmodSync(`${file}-wal`, 0o444)
        fs.chmodSync(dir, 0o555)
        yield* Effect.scoped(Effect.gen(function*() {
          const cache = yield* SqliteCallCache.make({ filename: file, shared: true, readOnly: true })
          for (const key of keys) assert.isTrue(Option.isSome(yield* cache.get(key)), key)
        }))
      }))
  }
  // skipped when this process is not root (it cannot switch to another user: the case above
  // runs as this user instead) or has no user `nobody` (uid 65534)
  it.scopedLive.skipIf(!hasNobody)(
    "as an ordinary user (nobody, child process), a chmod 444 file + -wal in a 555 folder serves all 35 answers (needs root to switch user)",
    () =>
      Effect.gen(function*() {
        const src = yield* tempDir
        const dir = yield* sharedTempDir
        const file = NodePath.join(dir, "shared.db")
        const keys = yield* walOnlyCopy(NodePath.join(src, "shared.db"), file, 28, 7)
        fs.chmodSync(file, 0o444)
        fs.chmodSync(`${file}-wal`, 0o444)
        fs.chmodSync(dir, 0o555)
        const child = runProbeAsNobody("readOnlyCacheProbe.ts", [file, keys.join(",")])
        const line = lastLine(child)
        assert.strictEqual(child.status, 0, `${child.stderr}\n${child.stdout}`)
        const result = JSON.parse(line) as { size?: number; keys?: Array<string>; error?: string }
        assert.deepStrictEqual(result, { size: 35, keys: keys.map((k) => k.slice(0, 16)) })
        assert.include(child.stdout, "read a snapshot of")
        assert.deepStrictEqual(fs.readdirSync(dir).sort(), ["shared.db", "shared.db-wal"])
      })
  )
})
