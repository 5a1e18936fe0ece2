/**
 * The confirmation trials a study's submitter records on the cluster (`assay_meta` key
 * `study/<id>/trials`, `ClusterRun.recordStudyTrials`), which its runners read
 * (`ClusterRun.recordedStudyTrials`): added to, merged with what is there, never shrunk; a
 * study's record is its own. On the harness PostgreSQL.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { recordedStudyTrials, recordStudyTrials } from "../../src/cli/ClusterRun.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

describe("ClusterRun: a study's confirmation trials recorded on the cluster", () => {
  it.effect("recorded, merged with an earlier record (never shrunk), read back; another study's is apart", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`CREATE TABLE assay_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`)
      assert.deepStrictEqual(yield* recordedStudyTrials("s"), [])
      yield* recordStudyTrials("s", [{ variantId: "v02", repeat: 3 }])
      assert.deepStrictEqual(yield* recordedStudyTrials("s"), [{ variantId: "v02", repeat: 3 }])
      // a second confirmation (and a submitter that knows only part of the record) adds to it
      yield* recordStudyTrials("s", [{ variantId: "v01", repeat: 3 }, { variantId: "v01", repeat: 4 }])
      yield* recordStudyTrials("s", [{ variantId: "v01", repeat: 4 }])
      yield* recordStudyTrials("s", [])
      const key = (t: { readonly variantId: string; readonly repeat: number }) => `${t.variantId}/${t.repeat}`
      assert.deepStrictEqual((yield* recordedStudyTrials("s")).map(key).sort(), ["v01/3", "v01/4", "v02/3"])
      assert.deepStrictEqual(yield* recordedStudyTrials("other"), [])
      // a record another process rewrote meanwhile: what it holds is kept beside the new trial
      yield* sql.unsafe(`UPDATE assay_meta SET value = $1 WHERE key = 'study/s/trials'`, [JSON.stringify([{ variantId: "v03", repeat: 5 }])])
      yield* recordStudyTrials("s", [{ variantId: "v04", repeat: 3 }])
      assert.deepStrictEqual((yield* recordedStudyTrials("s")).map(key).sort(), ["v03/5", "v04/3"])
    }).pipe(Effect.provide(pgLayer("studytrials"))), 60_000)
})
