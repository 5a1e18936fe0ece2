/**
 * A transition's `pipeline.handoff` event read from its ledger row (SQLite schema version 17):
 * the store no longer writes the event as a row of `events`, and every reader (`events` with
 * filters and limits, `countEvents`, `streamEvents` across pages, `stats`) sees what the memory
 * store, which stores the event, shows for the same run; a store written before version 17
 * shows its stored event rows once, and the events of later transitions after them.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as Handoff from "../../src/domain/Handoff.js"
import type { EventRecord } from "../../src/domain/Records.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { toVersion16 } from "../support/handoffEvents.js"

interface Row {
  readonly n: number
  readonly a?: number
}

// rewind once then end; go forward with `to`; retry from the seed; spend the budget (refused)
const t0 = Task.sync("t0", (r: { readonly n: number }): Row => ({ n: r.n }))
const t1 = Task.sync("t1", (r: Row): Row => ({ n: r.n, a: (r.a ?? 0) + 1 }))
const t2 = Task.sync("t2", (r: Row, ctx) => {
  const k = r.n % 4
  if (k === 0) return (ctx.visit === 0 ? Handoff.rewind("t1", { n: r.n, a: 10 }, { reason: "again" }) : Handoff.end({ n: r.n, a: 1 })) as unknown as Row
  if (k === 1) return Handoff.to("t3") as unknown as Row
  if (k === 2 && ctx.visit === 0) return Handoff.retryAll() as unknown as Row
  if (k === 3) return Handoff.rewind("t1", { n: r.n, a: ctx.visit }) as unknown as Row
  return r
})
const t3 = Task.sync("t3", (r: Row) => ({ done: r.n }))
const template = Pipeline.make("handoff-events", t0, t1, t2, t3, {
  control: { edges: { t2: ["t3", "end"] }, rewind: { t2: ["t1"] }, retryAll: ["t2"], maxHandoffs: 2 }
})

/** Enough pipelines for more than one page (1,000 rows) of ledger events. */
const SEEDS = Array.from({ length: 720 }, (_, i) => ({ n: i }))

const runOn = (store: Layer.Layer<Store, unknown>, seeds: ReadonlyArray<{ readonly n: number }>, then: (s: StoreService) => Effect.Effect<unknown, unknown>) =>
  Effect.gen(function*() {
    const report = yield* Runner.run(template.map(seeds))
    return { report, read: yield* Effect.flatMap(Store, then) }
  }).pipe(
    Effect.provide(
      Runner.layer({ concurrency: 8, handleSignals: false }).pipe(Layer.provideMerge(Layer.mergeAll(store, Pool.layer([]), NodeContext.layer)))
    )
  )

/** What every event reader shows (filters, limits, counts, the paged stream, the run's counts). */
const readings = (s: StoreService) =>
  Effect.gen(function*() {
    const all = yield* s.events({})
    const runId = all[0]!.runId!
    const somePipeline = all.find((e) => e.kind === "pipeline.handoff")!.pipelineId!
    const otherKind = all.find((e) => e.kind !== "pipeline.handoff")!.kind
    const filters = [
      {},
      { runId },
      { kind: "pipeline.handoff" },
      { runId, kind: "pipeline.handoff" },
      { pipelineId: somePipeline },
      { pipelineId: somePipeline, kind: "pipeline.handoff" },
      { kind: otherKind }
    ]
    const out: Array<unknown> = []
    for (const f of filters) {
      out.push(["events", f, yield* s.events(f)])
      for (const limit of [1, 3, 1500]) out.push(["latest", f, limit, yield* s.events({ ...f, limit })])
      out.push(["count", f, yield* s.countEvents(f)])
      out.push(["stream", f, Array.from(yield* Stream.runCollect(s.streamEvents(f)))])
    }
    out.push(["stats", (yield* s.stats(runId)).events, (yield* s.stats()).events])
    return { out, all }
  })

const tempDir = () => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-handoff-events-"))

const rawCounts = (file: string) => {
  const db = new Database(file, { readonly: true })
  try {
    return {
      eventRows: (db.prepare("SELECT count(*) AS n FROM events WHERE kind = 'pipeline.handoff'").get() as { n: number }).n,
      ledgerEvents: (db.prepare("SELECT name FROM pragma_table_info('handoffs') WHERE name = 'event_id'").get() === undefined
        ? 0
        : (db.prepare("SELECT count(*) AS n FROM handoffs WHERE event_id IS NOT NULL").get() as { n: number }).n),
      ledger: (db.prepare("SELECT count(*) AS n FROM handoffs").get() as { n: number }).n
    }
  } finally {
    db.close()
  }
}

describe("SqliteStore: a transition's pipeline.handoff event is read from its ledger row", () => {
  it.effect("no event row is stored; every reader shows what the memory store (which stores it) shows for the same run", () =>
    Effect.gen(function*() {
      const file = nodePath.join(tempDir(), "runs.db")
      const memory = yield* runOn(MemoryStore.layer(), SEEDS, readings)
      const sqlite = yield* runOn(SqliteStore.layer({ filename: file }), SEEDS, readings)
      const m = memory.read as Effect.Effect.Success<ReturnType<typeof readings>>
      const q = sqlite.read as Effect.Effect.Success<ReturnType<typeof readings>>
      const handoffs = m.all.filter((e) => e.kind === "pipeline.handoff")
      assert.isAbove(handoffs.length, 1000)
      // the event's JSON, key order included
      const first = handoffs.find((e) => (e.data as { operation: string }).operation === "rewind")!
      assert.deepStrictEqual(Object.keys(first.data as object), [
        "operation", "fromSeq", "fromTask", "visit", "toSeq", "toTask", "entry", "entryReused", "reason", "handoffs", "limit"
      ])
      // (run ids and times differ between the two runs: compare with them masked)
      const mask = (x: unknown): unknown =>
        JSON.parse(JSON.stringify(x, (k, v) => (k === "runId" ? "run" : k === "ts" ? 0 : v)))
      assert.strictEqual(m.out.length, q.out.length)
      for (let i = 0; i < m.out.length; i++) {
        assert.deepStrictEqual(mask(q.out[i]), mask(m.out[i]), JSON.stringify((m.out[i] as Array<unknown>).slice(0, 3)).slice(0, 200))
      }
      // the data's JSON text, key order included (the stores order a record's own fields differently)
      const text = (es: ReadonlyArray<EventRecord>) => es.map((e) => [e.eventId, e.kind, e.pipelineId, JSON.stringify(e.data)].join(" "))
      assert.deepStrictEqual(text(q.all), text(m.all))
      // what SQLite stores: the ledger rows carry the events, `events` holds none of them
      const raw = rawCounts(file)
      assert.deepStrictEqual(raw, { eventRows: 0, ledgerEvents: handoffs.length, ledger: handoffs.length })
    }))

  it.effect("a store from before version 17: its event rows are read once, later transitions' events from the ledger, in id order", () =>
    Effect.gen(function*() {
      const file = nodePath.join(tempDir(), "runs.db")
      const early = SEEDS.slice(0, 40)
      const late = SEEDS.slice(40, 80)
      // the same two runs on one memory store (the reference) and on a SQLite store set back to
      // version 16 between them
      const reference = yield* Effect.gen(function*() {
        yield* Runner.run(template.map(early))
        yield* Runner.run(template.map(late))
        return yield* Effect.flatMap(Store, (s) => s.events({}))
      }).pipe(
        Effect.provide(
          Runner.layer({ concurrency: 8, handleSignals: false }).pipe(Layer.provideMerge(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)))
        )
      )
      yield* runOn(SqliteStore.layer({ filename: file }), early, () => Effect.void)
      const db = new Database(file)
      toVersion16(db)
      db.close()
      const before = rawCounts(file)
      assert.isAbove(before.eventRows, 0)
      // a read-only open of the version-16 store reads its event rows as they are
      const old = yield* Effect.scoped(Effect.flatMap(Layer.build(SqliteStore.layer({ filename: file, readonly: true })), (ctx) =>
        (ctx.unsafeMap.get(Store.key) as StoreService).events({})))
      // a writer migrates it; the second run's events come from the ledger
      const after = yield* runOn(SqliteStore.layer({ filename: file }), late, (s) =>
        Effect.all([s.events({}), s.countEvents({ kind: "pipeline.handoff" }), s.events({ kind: "pipeline.handoff", limit: 5 })]))
      const [all, count, latest] = after.read as unknown as [ReadonlyArray<EventRecord>, number, ReadonlyArray<EventRecord>]
      const raw = rawCounts(file)
      assert.strictEqual(raw.eventRows, before.eventRows)
      assert.strictEqual(raw.ledger, before.ledger + raw.ledgerEvents)
      assert.isAbove(raw.ledgerEvents, 0)
      const mask = (x: unknown): unknown =>
        JSON.parse(JSON.stringify(x, (k, v) => (k === "runId" ? "run" : k === "ts" ? 0 : v)))
      assert.deepStrictEqual(mask(old), mask(reference.slice(0, old.length)))
      assert.deepStrictEqual(mask(all), mask(reference))
      assert.strictEqual(count, before.eventRows + raw.ledgerEvents)
      assert.deepStrictEqual(mask(latest), mask(reference.filter((e) => e.kind === "pipeline.handoff").slice(-5)))
      // ids strictly increase: no event is read twice
      for (let i = 1; i < all.length; i++) assert.isAbove(all[i]!.eventId, all[i - 1]!.eventId)
    }))
})
