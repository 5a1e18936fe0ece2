/**
 * The Postgres store: the Store contract against a fresh database per test (one throwaway
 * server for the file), plus what only a shared database has: first-writer-wins checkpoints
 * across two clients, explicit and concurrent migrations, schema refusals, typed errors and
 * passwords kept out of messages.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as PgStore from "../../src/layers/PgStore.js"
import * as Migrations from "../../src/layers/internal/pg/migrations.js"
import * as PgUrl from "../../src/layers/internal/pg/url.js"
import { Store } from "../../src/services/Store.js"
import type { PipelineRecord } from "../../src/domain/Records.js"
import type { RunId } from "../../src/domain/Ids.js"
import { usePostgres } from "../support/postgres.js"
import { artifact, pipeline, storeContract, type StoreHarness, task } from "./StoreContract.js"

const pg = usePostgres()

const TABLES = ["events", "attempts", "artifacts", "tasks", "pipelines", "checkpoints", "handoffs"]
/** Real failures from a second connection: triggers that abort every insert and update. */
const setWriteFailure = (db: string, on: boolean) =>
  pg.psql(
    db,
    on
      ? `CREATE OR REPLACE FUNCTION assay_test_fail() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql; ${
        TABLES.map((t) =>
          `CREATE OR REPLACE TRIGGER fail_${t} BEFORE INSERT OR UPDATE ON assay_${t} FOR EACH ROW EXECUTE FUNCTION assay_test_fail();`
        ).join(" ")
      }`
      : TABLES.map((t) => `DROP TRIGGER IF EXISTS fail_${t} ON assay_${t};`).join(" ")
  )

let databases = 0
const created = new Set<string>()
/** A fresh database (created on first use). */
const fresh = (db: string) =>
  Effect.promise(async () => {
    if (!created.has(db)) {
      created.add(db)
      await pg.createDatabase(db)
    }
  })

const pgHarness = (): StoreHarness => {
  const db = `contract_${++databases}`
  return {
    layer: (options = {}, backend = ArtifactBackends.layerInline) =>
      Layer.unwrapEffect(
        Effect.as(fresh(db), PgStore.layerWith({ ...options, url: pg.url(db), migrate: true }))
      ).pipe(Layer.provide(backend)),
    injectWriteFailure: (on) => Effect.sync(() => void setWriteFailure(db, on))
  }
}

storeContract("PgStore", pgHarness)

const open = (options: PgStore.PgStoreOptions) =>
  Effect.map(Layer.build(PgStore.layer(options)), (ctx) => ctx.unsafeMap.get(Store.key) as Store["Type"])

const bytes = (s: string) => new TextEncoder().encode(s)
const text = (u: Uint8Array | undefined) => new TextDecoder().decode(u)

describe("PgStore", () => {
  it.live("first writer wins: two stores (two clients) commit the same checkpoint; both get the winner's value, one row is stored", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("fww")
      const url = pg.url("fww")
      yield* PgStore.migrate(url)
      const a = yield* open({ url })
      const b = yield* open({ url })
      yield* a.admit([pipeline("w1")])
      const unit = (value: string, runner: string) => ({
        pipelineId: pipeline("w1").pipelineId,
        artifact: artifact("w1", 0, bytes(value)),
        task: { ...task("w1", 0), taskRunId: `w1/0/${runner}` },
        pipeline: { nTasksDone: 1, attemptsDelta: 1, updatedAt: 1100 }
      })
      const [fromA, fromB] = yield* Effect.all(
        [PgStore.commitCheckpoint(a, unit("from-a", "a")), PgStore.commitCheckpoint(b, unit("from-b", "b"))],
        { concurrency: 2 }
      )
      const va = text(Option.getOrThrow(fromA).payload)
      const vb = text(Option.getOrThrow(fromB).payload)
      assert.strictEqual(va, vb, "both writers return the stored (winner's) value")
      assert.include(["from-a", "from-b"], va)
      // one output, one task row, the cursor moved once
      const arts = yield* a.listArtifacts(pipeline("w1").pipelineId)
      assert.deepStrictEqual(arts.map((x) => x.seq), [0])
      const row = Option.getOrThrow(yield* b.getPipeline(pipeline("w1").pipelineId))
      assert.strictEqual(row.nTasksDone, 1)
      assert.strictEqual(row.attemptsTotal, 1)
      assert.strictEqual(pg.psql("fww", "SELECT count(*) FROM assay_tasks").trim(), "1")
      // a later writer (a zombie coming back) changes nothing either
      const late = yield* PgStore.commitCheckpoint(a, unit("late", "c"))
      assert.strictEqual(text(Option.getOrThrow(late).payload), va)
      assert.strictEqual((yield* b.listArtifacts(pipeline("w1").pipelineId)).length, 1)
    })))

  it.live("a store's identity: every writer of one database reads the same id, at once; another database has another; a read-only open has none", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("sid1")
      yield* fresh("sid2")
      yield* PgStore.migrate(pg.url("sid1"))
      yield* PgStore.migrate(pg.url("sid2"))
      const a = yield* open({ url: pg.url("sid1") })
      const b = yield* open({ url: pg.url("sid1") })
      const c = yield* open({ url: pg.url("sid2") })
      const [ida, idb] = yield* Effect.all([a.storeId!, b.storeId!], { concurrency: 2 })
      assert.strictEqual(ida, idb)
      assert.notStrictEqual(yield* c.storeId!, ida)
      assert.strictEqual(yield* a.storeId!, ida, "kept once read")
      const ro = yield* Effect.map(Layer.build(PgStore.layerReadOnly(pg.url("sid1"))), (ctx) => ctx.unsafeMap.get(Store.key) as Store["Type"])
      assert.isUndefined(ro.storeId)
    })))

  it.live("first writer wins inside one store too: the same task committed twice at once (one batch) stores one output", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("fww1")
      const store = yield* open({ url: pg.url("fww1"), migrate: true })
      const id = pipeline("d1").pipelineId
      yield* store.admit([pipeline("d1")])
      const unit = (value: string, n: number) => ({
        pipelineId: id,
        artifact: artifact("d1", 0, bytes(value)),
        task: { ...task("d1", 0), taskRunId: `d1/0/${n}` },
        pipeline: { nTasksDone: 1, attemptsDelta: 1, updatedAt: 1100 + n }
      })
      const got = yield* Effect.all(
        Array.from({ length: 8 }, (_, n) => PgStore.commitCheckpoint(store, unit(`v${n}`, n))),
        { concurrency: 8 }
      )
      const values = new Set(got.map((o) => text(Option.getOrThrow(o).payload)))
      assert.strictEqual(values.size, 1)
      assert.strictEqual((yield* store.listArtifacts(id)).length, 1)
      assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(id)).attemptsTotal, 1)
    })))

  it.live("two stores racing over the same 40 pipelines in opposite orders: no deadlock, one output per task, each cursor moved once", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("race2")
      const url = pg.url("race2")
      yield* PgStore.migrate(url)
      const a = yield* open({ url })
      const b = yield* open({ url })
      const names = Array.from({ length: 40 }, (_, i) => `q${String(i).padStart(2, "0")}`)
      yield* a.admit(names.map((n) => pipeline(n)))
      const commitAll = (store: Store["Type"], order: ReadonlyArray<string>, who: string) =>
        Effect.forEach(order, (n) =>
          store.checkpoint({
            pipelineId: pipeline(n).pipelineId,
            artifact: artifact(n, 0, bytes(`${who}:${n}`)),
            task: { ...task(n, 0), taskRunId: `${n}/0/${who}` },
            pipeline: { nTasksDone: 1, attemptsDelta: 1, updatedAt: 1100 }
          }), { concurrency: 40, discard: true })
      yield* Effect.all([commitAll(a, names, "a"), commitAll(b, [...names].reverse(), "b")], { concurrency: 2 })
      const rows = yield* b.getPipelines(names.map((n) => pipeline(n).pipelineId))
      for (const p of rows.values()) {
        assert.strictEqual(p.nTasksDone, 1)
        assert.strictEqual(p.attemptsTotal, 1)
      }
      assert.strictEqual(pg.psql("race2", "SELECT count(*) FROM assay_artifacts WHERE seq = 0").trim(), "40")
      assert.strictEqual(pg.psql("race2", "SELECT count(*) FROM assay_tasks").trim(), "40")
    })))

  it.live("a restart from the seed (re-admission at cursor 0) lets the task be committed again", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("restart")
      const store = yield* open({ url: pg.url("restart"), migrate: true })
      const id = pipeline("r1").pipelineId
      yield* store.admit([pipeline("r1")])
      yield* store.checkpoint({ pipelineId: id, artifact: artifact("r1", 0, bytes("old")), task: task("r1", 0) })
      yield* store.admit([pipeline("r1", { nTasksDone: 0, runId: pipeline("r1").runId })])
      const got = yield* PgStore.commitCheckpoint(store, { pipelineId: id, artifact: artifact("r1", 0, bytes("new")), task: task("r1", 0) })
      assert.strictEqual(text(Option.getOrThrow(got).payload), "new")
    })))

  it.live("an unmigrated database is refused with a ConfigError naming `assay migrate`; nothing is created", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("empty")
      const exit = yield* Effect.exit(open({ url: pg.url("empty") }))
      assert.isTrue(Exit.isFailure(exit))
      const err = Exit.isFailure(exit) ? Option.getOrThrow(Exit.causeOption(exit).pipe(Option.flatMap((c) => Option.fromNullable((c as any).error)))) : undefined
      assert.strictEqual((err as { _tag?: string })._tag, "ConfigError")
      assert.include((err as { message: string }).message, "assay migrate --database")
      assert.strictEqual(pg.psql("empty", "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'assay_%'").trim(), "0")
    })))

  it.live("two migrations at once both succeed and apply the schema once", () =>
    Effect.gen(function*() {
      yield* fresh("race")
      const url = pg.url("race")
      const [a, b, c] = yield* Effect.all([PgStore.migrate(url), PgStore.migrate(url), PgStore.migrate(url)], { concurrency: 3 })
      assert.deepStrictEqual(
        [a.length, b.length, c.length].sort(),
        [0, 0, 4],
        "exactly one of them applied the migrations (store, call cache, attempt accounting, HOT pipeline patches)"
      )
      assert.strictEqual(pg.psql("race", "SELECT count(*) FROM assay_store_migrations").trim(), "4")
      assert.deepStrictEqual(yield* PgStore.migrate(url), [])
    }))

  it.live("schema 4: a version 3 database migrates; a running pipeline's patch is a HOT update (no index holds a column it writes)", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("v3")
      const url = pg.url("v3")
      // a database as a build of schema 3 left it, with a failed pipeline in it
      pg.psql("v3", `CREATE TABLE ${Migrations.MIGRATIONS_TABLE} (migration_id integer PRIMARY KEY,
        created_at timestamptz NOT NULL DEFAULT now(), name text NOT NULL)`)
      for (const s of [...Migrations.MIGRATION_0001, ...Migrations.MIGRATION_0002, ...Migrations.MIGRATION_0003]) pg.psql("v3", s)
      pg.psql("v3", `INSERT INTO ${Migrations.MIGRATIONS_TABLE} (migration_id, name) VALUES (1, 'store'), (2, 'call_cache'), (3, 'attempt_accounting')`)
      const refused = yield* Effect.exit(open({ url }))
      assert.match(String(Exit.isFailure(refused) ? refused.cause : ""), /schema version 3, older than this build/)
      assert.deepStrictEqual(yield* PgStore.migrate(url), [[4, "hot_pipeline_patches"]])
      const indexes = pg.psql("v3", "SELECT indexdef FROM pg_indexes WHERE tablename = 'assay_pipelines'").split("\n")
      for (const column of ["updated_at", "n_tasks_done", "attempts_total"]) {
        assert.isFalse(indexes.some((d) => d.includes(column)), `${column} in ${indexes.join("; ")}`)
      }
      assert.include(pg.psql("v3", "SELECT reloptions::text FROM pg_class WHERE relname = 'assay_pipelines'"), "fillfactor=75")
      // the patch of a running pipeline's checkpoint leaves its old row version HOT-updated
      const store = yield* open({ url })
      yield* store.admit([pipeline("h1", { state: "running" })])
      yield* store.checkpoint({
        pipelineId: pipeline("h1").pipelineId,
        artifact: artifact("h1", 0, bytes("x")),
        task: task("h1", 0),
        pipeline: { nTasksDone: 1, updatedAt: 5, attemptsDelta: 1 }
      })
      assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(pipeline("h1").pipelineId)).nTasksDone, 1)
      pg.psql("v3", "CREATE EXTENSION IF NOT EXISTS pageinspect")
      // HEAP_HOT_UPDATED (0x4000 of t_infomask2) on the first version, HEAP_ONLY_TUPLE (0x8000) on the second
      const versions = pg.psql(
        "v3",
        "SELECT (t_infomask2 & 16384 <> 0)::text || '/' || (t_infomask2 & 32768 <> 0)::text FROM heap_page_items(get_raw_page('assay_pipelines', 0)) WHERE t_infomask2 IS NOT NULL ORDER BY lp"
      ).trim().split("\n")
      assert.deepStrictEqual(versions, ["true/false", "false/true"])
    })))

  it.live("a database migrated by a newer assay is refused, for writing and for reading", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("newer")
      const url = pg.url("newer")
      yield* PgStore.migrate(url)
      pg.psql("newer", "INSERT INTO assay_store_migrations (migration_id, name) VALUES (999, 'future')")
      for (const readonly of [false, true]) {
        const exit = yield* Effect.exit(open({ url, readonly }))
        assert.isTrue(Exit.isFailure(exit))
        assert.match(String(Exit.isFailure(exit) ? exit.cause : ""), /schema version 999, newer than this build/)
      }
      const again = yield* Effect.exit(PgStore.migrate(url))
      assert.match(String(Exit.isFailure(again) ? again.cause : ""), /newer than this build/)
    })))

  it.live("a read-only store refuses writes with a typed error", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("ro")
      const url = pg.url("ro")
      yield* PgStore.migrate(url)
      const store = yield* open({ url, readonly: true })
      const exit = yield* Effect.exit(store.admit([pipeline("x")]))
      assert.isTrue(Exit.isFailure(exit))
      assert.match(String(Exit.isFailure(exit) ? exit.cause : ""), /read-only/)
    })))

  it.live("SQL failures are typed StoreUnavailable (not defects), and the password never shows", () =>
    Effect.gen(function*() {
      const url = `postgres://assay:s3cr%40t-pw@127.0.0.1:${pg.port}/no_such_db`
      const exit = yield* Effect.exit(Effect.scoped(open({ url })))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const failure = Option.getOrThrow(Exit.causeOption(exit).pipe(Option.flatMap((c) => Option.fromNullable((c as any).error))))
        assert.strictEqual((failure as { _tag: string })._tag, "StoreUnavailable")
        const shown = JSON.stringify(failure) + String(exit.cause) + (failure as { message: string }).message
        assert.notInclude(shown, "s3cr")
        assert.include((failure as { message: string }).message, "postgres://assay:***@127.0.0.1")
      }
      // a server that is down: typed too
      const down = yield* Effect.exit(Effect.scoped(open({ url: "postgres://u:hunter2@127.0.0.1:1/x" })))
      assert.isTrue(Exit.isFailure(down) && Option.isSome(Exit.causeOption(down)) && !String(down.cause).includes("hunter2"))
      assert.match(String(Exit.isFailure(down) ? down.cause : ""), /StoreUnavailable/)
    }))

  it.live("a failed statement and a Postgres crash-restart are typed StoreUnavailable failures (never defects); the store works again after", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("crash")
      const url = pg.url("crash")
      const store = yield* open({ url, migrate: true })
      const id = pipeline("c1").pipelineId
      yield* store.admit([pipeline("c1")])
      const typed = (exit: Exit.Exit<unknown, unknown>) =>
        Exit.isSuccess(exit) || Option.getOrUndefined(Cause.failureOption(exit.cause)) !== undefined &&
          !Cause.isDie(exit.cause) && (Option.getOrThrow(Cause.failureOption(exit.cause)) as { _tag: string })._tag === "StoreUnavailable"
      setWriteFailure("crash", true)
      const failed = yield* Effect.exit(store.checkpoint({ pipelineId: id, artifact: artifact("c1", 0, bytes("x")), task: task("c1", 0) }))
      assert.isTrue(Exit.isFailure(failed) && typed(failed), String(Exit.isFailure(failed) ? failed.cause : ""))
      assert.match(String(Exit.isFailure(failed) ? failed.cause : ""), /injected failure/)
      setWriteFailure("crash", false)
      yield* Effect.promise(() => pg.restart("immediate"))
      // every call while the pool reconnects either works or fails typed; one soon works again
      let ok = false
      for (let i = 0; i < 50 && !ok; i++) {
        const exit = yield* Effect.exit(store.getPipeline(id))
        assert.isTrue(typed(exit), String(Exit.isFailure(exit) ? exit.cause : ""))
        ok = Exit.isSuccess(exit)
        if (!ok) yield* Effect.sleep("100 millis")
      }
      assert.isTrue(ok)
      yield* store.checkpoint({ pipelineId: id, artifact: artifact("c1", 0, bytes("after")), task: task("c1", 0), pipeline: { nTasksDone: 1, updatedAt: 3 } })
      assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(id)).nTasksDone, 1)
    })))

  it.live("admission claims: of two stores admitting one pipeline at once exactly one wins; a claim on a row changed since it was read loses", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("claims")
      const url = pg.url("claims")
      yield* PgStore.migrate(url)
      const a = yield* open({ url })
      const b = yield* open({ url })
      const row = (run: string, over: Partial<ConstructorParameters<typeof PipelineRecord>[0]> = {}) =>
        pipeline("c1", { runId: run as RunId, ...over })
      // new pipeline, two claimers at once: one row, one winner; the loser sees the winner's run
      const [ca, cb] = yield* Effect.all(
        [a.claimAdmission!({ pipelines: [row("run-a")] }, undefined), b.claimAdmission!({ pipelines: [row("run-b")] }, undefined)],
        { concurrency: 2 }
      )
      assert.deepStrictEqual([ca._tag, cb._tag].sort(), ["Lost", "Won"])
      const lost = ca._tag === "Lost" ? ca : cb._tag === "Lost" ? cb : undefined
      const winner = ca._tag === "Won" ? "run-a" : "run-b"
      assert.strictEqual(lost?.current?.runId, winner)
      assert.strictEqual(Option.getOrThrow(yield* a.getPipeline(pipeline("c1").pipelineId)).runId, winner)
      // the winner's run died: two resumers claim it from the row they both read; one wins
      const stored = Option.getOrThrow(yield* a.getPipeline(pipeline("c1").pipelineId))
      const seen = { runId: stored.runId, state: stored.state, nTasksDone: stored.nTasksDone, updatedAt: stored.updatedAt }
      const [ra, rb] = yield* Effect.all(
        [
          a.claimAdmission!({ pipelines: [row("run-c", { updatedAt: 2000 })] }, seen),
          b.claimAdmission!({ pipelines: [row("run-d", { updatedAt: 2001 })] }, seen)
        ],
        { concurrency: 2 }
      )
      assert.deepStrictEqual([ra._tag, rb._tag].sort(), ["Lost", "Won"])
      // a claim from a stale read (the row changed since) loses, and changes nothing
      const now = Option.getOrThrow(yield* a.getPipeline(pipeline("c1").pipelineId))
      const stale = yield* a.claimAdmission!({ pipelines: [row("run-e", { updatedAt: 3000 })] }, seen)
      assert.strictEqual(stale._tag, "Lost")
      assert.deepStrictEqual(Option.getOrThrow(yield* a.getPipeline(pipeline("c1").pipelineId)).runId, now.runId)
    })))

  it.live("batch admission claims: each pipeline of two overlapping batches is won by exactly one store; seeds and rows only for the winners; a stale expectation loses and changes nothing", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* fresh("claimsbatch")
      const url = pg.url("claimsbatch")
      yield* PgStore.migrate(url)
      const a = yield* open({ url })
      const b = yield* open({ url })
      const row = (id: string, run: string, over: Partial<ConstructorParameters<typeof PipelineRecord>[0]> = {}) =>
        pipeline(id, { runId: run as RunId, ...over })
      const seed = (id: string) => artifact(pipeline(id).pipelineId, -1, bytes(`seed ${id}`))
      // x1, x2 new in both batches; y1 only in a's, y2 only in b's
      const batch = (run: string, ids: ReadonlyArray<string>) => ({ pipelines: ids.map((id) => row(id, run)), seeds: ids.map(seed) })
      const [ca, cb] = yield* Effect.all(
        [
          a.claimAdmissions!(batch("run-a", ["x1", "x2", "y1"]), [undefined, undefined, undefined]),
          b.claimAdmissions!(batch("run-b", ["x2", "x1", "y2"]), [undefined, undefined, undefined])
        ],
        { concurrency: 2 }
      )
      const wonBy = (id: string) =>
        [ca[["x1", "x2", "y1"].indexOf(id)]?._tag === "Won" ? "run-a" : undefined, cb[["x2", "x1", "y2"].indexOf(id)]?._tag === "Won" ? "run-b" : undefined]
          .filter((w) => w !== undefined)
      for (const id of ["x1", "x2"]) {
        const winners = wonBy(id)
        expect(winners.length, id).toBe(1)
        const stored = Option.getOrThrow(yield* a.getPipeline(pipeline(id).pipelineId))
        expect(stored.runId).toBe(winners[0])
        // one seed: the loser's was not written
        expect((yield* a.listArtifacts(pipeline(id).pipelineId)).map((x) => x.seq)).toStrictEqual([-1])
      }
      expect(wonBy("y1")).toStrictEqual(["run-a"])
      expect(wonBy("y2")).toStrictEqual(["run-b"])
      // a loser is answered with the row as the winner left it
      const lostX1 = [ca[0], cb[1]].find((o) => o?._tag === "Lost")
      expect(lostX1?._tag === "Lost" ? lostX1.current?.runId : undefined).toBe(wonBy("x1")[0])
      // taking stored rows over: one expectation current, one stale (the row changed since)
      const y1 = Option.getOrThrow(yield* a.getPipeline(pipeline("y1").pipelineId))
      const seenY1 = { runId: y1.runId, state: y1.state, nTasksDone: y1.nTasksDone, updatedAt: y1.updatedAt }
      const y2 = Option.getOrThrow(yield* a.getPipeline(pipeline("y2").pipelineId))
      const staleY2 = { runId: y2.runId, state: y2.state, nTasksDone: y2.nTasksDone, updatedAt: y2.updatedAt - 1 }
      const out = yield* a.claimAdmissions!(
        { pipelines: [row("y1", "run-c", { updatedAt: 5000 }), row("y2", "run-c", { updatedAt: 5000 })] },
        [seenY1, staleY2]
      )
      expect(out.map((o) => o._tag)).toStrictEqual(["Won", "Lost"])
      expect(Option.getOrThrow(yield* a.getPipeline(pipeline("y1").pipelineId)).runId).toBe("run-c")
      expect(Option.getOrThrow(yield* a.getPipeline(pipeline("y2").pipelineId)).runId).toBe("run-b")
      // an empty batch writes nothing
      expect(yield* a.claimAdmissions!({ pipelines: [] }, [])).toStrictEqual([])
    })))

  it("redactUrl masks userinfo passwords and password parameters", () => {
    assert.strictEqual(PgStore.redactUrl("postgres://u:p%40ss@h:5432/db?sslmode=require"), "postgres://u:***@h:5432/db?sslmode=require")
    assert.strictEqual(PgStore.redactUrl("postgresql://u@h/db?password=x&a=1"), "postgresql://u@h/db?password=***&a=1")
    // a raw '@' in the password (the driver reads up to the last '@'): nothing of it shown
    assert.strictEqual(PgStore.redactUrl("postgres://bob:top@Secret99@127.0.0.1:5432/a"), "postgres://bob:***@127.0.0.1:5432/a")
    assert.isTrue(PgStore.isPostgresUrl("PostgreSQL://h/db"))
    assert.isFalse(PgStore.isPostgresUrl("runs/qa.db"))
  })

  it("a command to paste gets the URL without its password (a masked one cannot log in), and says so", () => {
    assert.strictEqual(PgUrl.withoutPassword("postgres://bob:top@Secret99@127.0.0.1:5432/a"), "postgres://bob@127.0.0.1:5432/a")
    assert.strictEqual(PgUrl.withoutPassword("postgresql://u@h/db?password=x&a=1"), "postgresql://u@h/db?a=1")
    assert.strictEqual(PgUrl.withoutPassword("postgresql://u@h/db?a=1&password=x"), "postgresql://u@h/db?a=1")
    assert.strictEqual(PgUrl.withoutPassword("postgres://u@h/db"), "postgres://u@h/db")
    const cmd = PgUrl.pasteable("assay resume -c e.json --store 'postgres://u:s3cret@h:5432/db'")
    assert.deepStrictEqual(cmd, { text: "assay resume -c e.json --store 'postgres://u@h:5432/db'", removed: true })
    assert.isFalse(PgUrl.pasteable("assay report postgres://u@h/db").removed)
    assert.include(PgUrl.PASSWORD_HINT, "PGPASSWORD")
  })
})
