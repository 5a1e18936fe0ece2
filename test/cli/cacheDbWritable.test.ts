/**
 * Issue 18 trial, case 3: a shared cache that a run storing answers may not write (the folder
 * 555, `shared.db` 444, a root-owned `-shm`, an empty `-wal`), mode `readWrite`, as an ordinary
 * user: `validate` refused it (exit 2) but `run` went ahead (SQLite opened it read-only without
 * a word), warned "attempt to write a readonly database" once per call and stored nothing.
 * Both now go through one check (`Flags.cacheWriteProblem`) and give the same refusal; `run`
 * refuses before it creates anything.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as NodePath from "node:path"
import * as Flags from "../../src/cli/Flags.js"
import { CALL_CACHE_TABLE } from "../../src/layers/internal/sqlite/migrations.js"
import { asRoot, hasNobody, lastLine, runProbeAsNobody } from "../support/asNobody.js"

/** A folder another user can reach: in /tmp itself (the tests' own temporary root is 0700). */
const sharedTempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(NodePath.join("/tmp", "assay-rwcache-"))),
  (dir) =>
    Effect.sync(() => {
      fs.chmodSync(dir, 0o755)
      fs.rmSync(dir, { recursive: true, force: true })
    })
)

/** The trial's case 3: a WAL cache with its -shm and an empty -wal, all 444, in a 555 folder. */
const readOnlyCache = (dir: string): string => {
  const file = NodePath.join(dir, "shared.db")
  const d = new Database(file)
  d.pragma("journal_mode = WAL")
  d.exec(CALL_CACHE_TABLE)
  // keep the -wal and -shm as a writer leaves them while open: copy them aside, then back
  const wal = fs.readFileSync(`${file}-wal`)
  const shm = fs.readFileSync(`${file}-shm`)
  d.close()
  fs.writeFileSync(`${file}-wal`, wal.subarray(0, 0))
  fs.writeFileSync(`${file}-shm`, shm)
  for (const f of [file, `${file}-wal`, `${file}-shm`]) fs.chmodSync(f, 0o444)
  fs.chmodSync(dir, 0o555)
  return file
}


type Checks = Record<string, { readonly validate: string | null; readonly run: string | null }>

const outcome = (check: Effect.Effect<void, { readonly message: string }>) =>
  check.pipe(Effect.as(null), Effect.catchAll((e) => Effect.succeed(e.message)))

/** `{ [mode]: { validate, run } }` of the file for an ordinary user: `nobody` in a child when root, else this process. */
const checksOf = (file: string, modes: ReadonlyArray<string>): Effect.Effect<Checks> =>
  hasNobody
    ? Effect.sync(() => {
      const child = runProbeAsNobody("cacheDbCheckProbe.ts", [file, modes.join(",")])
      assert.strictEqual(child.status, 0, child.stderr)
      return JSON.parse(lastLine(child)) as Checks
    })
    : Effect.all(Object.fromEntries(modes.map((mode) => [mode, Effect.all({
      validate: outcome(Flags.probeCacheDb(file, "run.cache.db", mode)),
      run: outcome(Flags.checkCacheDb(file, "run.cache.db", mode))
    })])))

describe("run.cache.db a run may not write", () => {
  // as root nothing is unwritable; without a user `nobody` to switch to, root cannot check it
  it.scopedLive.skipIf(asRoot && !hasNobody)(
    "validate and run refuse it alike in readWrite and refresh (naming the file), accept it in readOnly; nothing is created",
    () =>
      Effect.gen(function*() {
        const dir = yield* sharedTempDir
        const file = readOnlyCache(dir)
        const before = fs.readdirSync(dir).sort()
        const checks = yield* checksOf(file, ["readWrite", "refresh", "readOnly"])
        for (const mode of ["readWrite", "refresh"]) {
          const got = checks[mode]!
          assert.isNotNull(got.validate, mode)
          assert.strictEqual(got.run, got.validate, mode)
          assert.include(got.validate!, `run.cache.db: cannot open the call cache database ${file}: the file is not writable`)
        }
        assert.deepStrictEqual(checks["readOnly"], { validate: null, run: null })
        assert.deepStrictEqual(fs.readdirSync(dir).sort(), before)
      })
  )

  it.scopedLive.skipIf(asRoot && !hasNobody)(
    "a file the user may not read (chmod 000) is refused in every mode naming the permission and the path, not SQLite's 'unable to open database file'",
    () =>
      Effect.gen(function*() {
        const dir = yield* sharedTempDir
        const file = NodePath.join(dir, "shared.db")
        const d = new Database(file)
        d.exec(CALL_CACHE_TABLE)
        d.close()
        fs.chmodSync(file, 0o000)
        fs.chmodSync(dir, 0o755)
        const checks = yield* checksOf(file, ["readOnly", "readWrite"])
        for (const mode of ["readOnly", "readWrite"]) {
          const got = checks[mode]!
          assert.strictEqual(got.run, got.validate, mode)
          assert.include(got.validate!, `run.cache.db: cannot open the call cache database ${file}: permission denied: cannot read ${file} (mode 000`, mode)
          assert.notInclude(got.validate!, "unable to open database file")
        }
      })
  )
})
