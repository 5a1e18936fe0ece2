/**
 * Creating a store is safe against a writer killed half-way and against two writers creating
 * one file at once (issue: a `kill -9` early in a run left a file holding only the empty
 * `effect_sql_migrations` table, refused forever after as "another application's database").
 *
 * `@effect/sql`'s Migrator commits its bookkeeping table, then runs the migrations in one
 * transaction: the half-made file is made here by that very Migrator with a first migration
 * that fails (what a kill between the two leaves), then opened as a user would.
 */
import { assert, describe, it } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { Migrator, SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import Database from "better-sqlite3"
import { Data, Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import { assay, tempDir, write } from "../support/cli.js"

class Boom extends Data.TaggedError("Boom")<{}> {}

/** A file as a writer killed after the Migrator's bookkeeping table and before migration 1 leaves it. */
const halfMade = (file: string) =>
  Effect.scoped(
    Effect.gen(function*() {
      const sql = yield* SqliteClient.make({ filename: file }).pipe(Effect.provide(Reactivity.layer))
      yield* Migrator.make({})({
        loader: Migrator.fromRecord({ "0001_init": Effect.flatMap(SqlClient.SqlClient, () => Effect.fail(new Boom())) })
      }).pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.exit)
    })
  )

const tablesOf = (file: string): Array<string> => {
  const db = new Database(file, { readonly: true })
  try {
    return (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as Array<{ name: string }>)
      .map((r) => r.name)
  } finally {
    db.close()
  }
}

const openWriter = (file: string, readonly = false) =>
  Effect.scoped(
    Effect.flatMap(SqliteStore.make({ filename: file, readonly }), (s) => s.listRuns)
  ).pipe(Effect.provide(ArtifactBackends.layerInline), Effect.either)

describe("store creation interrupted", () => {
  it.scoped("a half-made store (only an empty migrations table) is finished by the next writer", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("creation")
      const file = path.join(dir, "state.db")
      yield* halfMade(file)
      assert.deepStrictEqual(tablesOf(file), ["effect_sql_migrations"])

      // a reader does not touch it, and says what it is
      const ro = yield* openWriter(file, true)
      assert.isTrue(ro._tag === "Left" && /creation was interrupted/.test(ro.left.message), JSON.stringify(ro))
      assert.deepStrictEqual(tablesOf(file), ["effect_sql_migrations"])

      const rw = yield* openWriter(file)
      assert.strictEqual(rw._tag, "Right", JSON.stringify(rw))
      assert.include(tablesOf(file), "store_meta")
      assert.include(tablesOf(file), "pipelines")
    }))

  it.scoped("a migrations table with rows, or beside another table, is still refused and left as it was", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("creation")
      const withRow = path.join(dir, "row.db")
      yield* halfMade(withRow)
      const d1 = new Database(withRow)
      d1.prepare("INSERT INTO effect_sql_migrations (migration_id, name) VALUES (1, 'theirs')").run()
      d1.close()
      const foreign = path.join(dir, "foreign.db")
      yield* halfMade(foreign)
      const d2 = new Database(foreign)
      d2.exec("CREATE TABLE notes (t TEXT)")
      d2.close()
      for (const [file, tables] of [[withRow, ["effect_sql_migrations"]], [foreign, ["effect_sql_migrations", "notes"]]] as const) {
        const r = yield* openWriter(file)
        assert.isTrue(r._tag === "Left" && /another application/.test(r.left.message), `${file}: ${JSON.stringify(r)}`)
        assert.deepStrictEqual(tablesOf(file), [...tables])
      }
    }))
})

describe("two writers creating at once (spawned bin/assay)", () => {
  const config = (dir: string) =>
    write(dir, "a.json", {
      run: { concurrency: 2 },
      pipeline: { name: "p", tasks: [{ use: "delay", args: ["300 millis"] }] },
      source: { range: { n: 4 } }
    })

  it.scoped("a half-made store file: `assay run` finishes creating it and runs", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("creation")
      const file = path.join(dir, "state.db")
      yield* halfMade(file)
      const r = yield* assay(["run", "-c", config(dir), "--store", file], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(r.code, 0, r.stderr)
      const db = new Database(file, { readonly: true })
      const n = (db.prepare("SELECT count(*) AS n FROM pipelines WHERE state = 'succeeded'").get() as { n: number }).n
      db.close()
      assert.strictEqual(n, 4)
    }), 90_000)

  it.scoped("on a fresh store path and a fresh suite root: one wins, the other is refused as busy (never 'another application')", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("creation")
      const cfg = config(dir)
      const suite = write(dir, "suite.json", {
        suite: { id: "s" },
        output: { root: "out/s", layout: "combined" },
        experiments: { a: { config: "a.json" } }
      })
      const runs = yield* Effect.all([
        assay(["run", "-c", cfg, "--store", path.join(dir, "fresh.db")], { cwd: dir, killAfterMs: 60_000 }),
        assay(["run", "-c", cfg, "--store", path.join(dir, "fresh.db")], { cwd: dir, killAfterMs: 60_000 }),
        assay(["run", "-c", suite], { cwd: dir, killAfterMs: 60_000 }),
        assay(["run", "-c", suite], { cwd: dir, killAfterMs: 60_000 })
      ], { concurrency: "unbounded" })
      for (const pair of [runs.slice(0, 2), runs.slice(2)]) {
        for (const r of pair) {
          assert.notMatch(r.stderr, /another application|not a suite root/)
          assert.isTrue(r.code === 0 || /already open for writing/.test(r.stderr), `exit ${r.code}: ${r.stderr}`)
        }
        assert.isTrue(pair.some((r) => r.code === 0), pair.map((r) => r.stderr).join("\n"))
      }
      assert.isTrue(fs.existsSync(path.join(dir, "out/s/state.db")))
    }), 120_000)
})
