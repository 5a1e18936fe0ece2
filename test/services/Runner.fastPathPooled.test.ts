/**
 * Issue 19 §5: a plain pipeline of Effect tasks (`Task.make`) whose attempts end at once (a
 * lease of a free slot, then a pure map) runs without a pipeline fiber (`Pipeline.runNow`: each
 * attempt on a fiber of its own started and ended at once). An attempt that does not end at
 * once (a lease wait, a sleep holding its lease) keeps its fiber, and the pipeline is handed to
 * a fiber of its own that first commits what the earlier tasks left uncommitted, then awaits
 * it. It must write exactly what the general path (one fiber per pipeline) writes: the same
 * pipeline, task (with their leases), attempt and artifact rows, the same events and the same
 * report, for leases granted at once, leases waited for, an acquire that fails, retried
 * attempts and a run stopped while attempts hold their leases (every lease released).
 *
 * Times are compared as present or absent only (the two paths schedule differently). The
 * general path is forced by a store that is a copy of the SQLite store's service (not the
 * object the store front built, so the runner finds no callback submission for it).
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Layer, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import { Pools } from "../../src/services/Pools.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { countedSqliteStore, dump as dumpStore } from "../support/fastPathRows.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })

/**
 * The three leased steps. `t1`, with `faults`: n % 5: an acquire from a pool that does not
 * exist (fails); n % 3: fails once after its lease (retried); then, when `holds(n)`, it holds
 * its lease `holdMs` (others wait for the pool's 2 slots meanwhile); otherwise a lease granted
 * at once. A holder's lease is of `holdPool`.
 */
const templateOf = (
  holdMs: number,
  holding: Set<string>,
  faults: boolean,
  holds: (n: number) => boolean,
  holdPool: string
) => {
  const t0 = Task.make("t0", { resource: "pool" }, (n: number, ctx) => Effect.map(ctx.acquire(), () => ({ n, a: n + 1 })))
  const t1 = Task.make(
    "t1",
    { resource: "pool", retry: { maxAttempts: 2, base: "1 second", jitter: "none" } },
    (r: { readonly n: number; readonly a: number }, ctx) =>
      Effect.gen(function*() {
        if (faults && r.n % 5 === 0) yield* ctx.acquire("missing")
        yield* ctx.acquire(holds(r.n) ? holdPool : "pool")
        if (faults && r.n % 3 === 0 && ctx.attempt === 1) {
          return yield* new RetryableError({ message: "once", errorClass: "upstream" })
        }
        if (holds(r.n)) {
          holding.add(ctx.pipelineId)
          yield* Effect.sleep(holdMs)
          holding.delete(ctx.pipelineId)
        }
        return { ...r, b: r.a * 2 }
      })
  )
  const t2 = Task.make("t2", { resource: "pool" }, (r: { readonly n: number }, ctx) => Effect.map(ctx.acquire(), () => `done ${r.n}`))
  return Pipeline.make("fast-vs-general-pooled", t0, t1, t2)
}
const seeds = Array.from({ length: 40 }, (_, i) => i + 1)
const everyFourth = (n: number) => n % 4 === 0

/**
 * Every row and event of a store, in a stable order (see `fastPathRows.dump`), lease ids masked: they
 * name the resource and count the pool's leases in the order granted.
 */
const dump = (store: StoreService, runId: string) =>
  dumpStore(store, runId, false, [[/"(pool|slow)\/[a-z]+#\d+"/g, "\"LEASE\""]])

interface Outcome {
  readonly rows: Effect.Effect.Success<ReturnType<typeof dump>>
  readonly summary: string
  readonly calls: ReadonlyArray<string>
  /** Leases the pool still held when the run had ended. */
  readonly active: number
  /** Pipelines holding a lease in t1 at 500 ms whose row or t0 task row was not stored then. */
  readonly notDurable: ReadonlyArray<string>
  readonly holdersSeen: number
}

interface Scenario {
  readonly seeds: ReadonlyArray<number>
  readonly holdMs: number
  readonly faults: boolean
  readonly holds: (n: number) => boolean
  readonly stop: boolean
  readonly concurrency: number
  readonly holdPool: string
}

const runOn = (filename: string, general: boolean, sc: Scenario) => {
  const calls: Array<string> = []
  const holding = new Set<string>()
  const template = templateOf(sc.holdMs, holding, sc.faults, sc.holds, sc.holdPool)
  const stop = sc.stop
  const counted = countedSqliteStore(filename, general, calls)
  const pools = Pool.layer([
    Pool.make("pool", [Resource.make("r", { id: "a", capacity: 1 }), Resource.make("r", { id: "b", capacity: 1 })]),
    Pool.make("slow", [Resource.make("r", { id: "s", capacity: 2 })])
  ])
  const layer = Layer.provideMerge(
    Runner.layer({
      handleSignals: false,
      concurrency: sc.concurrency,
      maxAdmitted: 8,
      grace: "2 seconds",
      ...(stop ? { stopAfter: "3 seconds" } : {})
    }),
    Layer.mergeAll(counted, pools)
  )
  return Effect.gen(function*() {
    const store = yield* Store
    const fiber = yield* Effect.fork(Runner.run(template.map(sc.seeds)))
    let notDurable: Array<string> = []
    let holdersSeen = 0
    for (let i = 0; i < 200; i++) {
      yield* settle
      if (i === 1) {
        // while attempts hold their leases: what the general path committed before them
        holdersSeen = holding.size
        const tasks = yield* Effect.map(Stream.runCollect(store.streamTasks()), Chunk.toArray)
        const pipelines = yield* Effect.map(Stream.runCollect(store.streamPipelines()), Chunk.toArray)
        notDurable = [...holding].filter((id) =>
          !pipelines.some((p) => p.pipelineId === id) ||
          !tasks.some((t) => t.pipelineId === id && t.seq === 0 && t.state === "succeeded")
        )
      }
      yield* TestClock.adjust("250 millis")
    }
    const report = yield* Fiber.join(fiber)
    const rows = yield* dump(store, report.runId)
    const pools = yield* Pools
    const snapshot = [...(yield* pools.snapshot("pool")), ...(yield* pools.snapshot("slow"))]
    const { durationMs: _d, runId: _r, startedAt: _s, ...summary } = report
    return {
      rows,
      summary: JSON.stringify(summary),
      calls,
      active: snapshot.reduce((n, r) => n + r.active, 0),
      notDurable,
      holdersSeen
    } satisfies Outcome
  }).pipe(Effect.provide(layer))
}

const both = (sc: Scenario) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-fastpath-pooled-"))),
      (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
    )
    const fast = yield* runOn(nodePath.join(dir, "fast.db"), false, sc)
    const general = yield* runOn(nodePath.join(dir, "general.db"), true, sc)
    return { fast, general }
  })

const assertSame = (fast: Outcome, general: Outcome) => {
  assert.deepStrictEqual(fast.rows.pipelines, general.rows.pipelines)
  assert.deepStrictEqual(fast.rows.tasks, general.rows.tasks)
  assert.deepStrictEqual(fast.rows.attempts, general.rows.attempts)
  assert.deepStrictEqual(fast.rows.artifacts, general.rows.artifacts)
  assert.deepStrictEqual(fast.rows.events, general.rows.events)
  // (the pools' resource times follow the schedule; their run ids, the run's start)
  const timeless = (summary: string) =>
    JSON.parse(summary, (k, v) => (/At$/.test(k) && typeof v === "number") || k === "runId" ? "T" : v)
  assert.deepStrictEqual(timeless(fast.summary), timeless(general.summary))
}

describe("Runner: the fast path of Effect tasks with leases", () => {
  it.scoped("writes the same rows, events and report as the general path (leases at once, waited for, failing, retried)", () =>
    Effect.gen(function*() {
      const template = templateOf(0, new Set(), true, everyFourth, "pool")
      const { fast, general } = yield* both({ seeds, holdMs: 1000, faults: true, holds: everyFourth, stop: false, concurrency: 4, holdPool: "pool" })
      // the fast path ran: a pipeline whose attempts all end at once never calls `checkpoint`
      // unless no worker slot was free when it was admitted; the general path always does
      const clean = seeds.filter((n) => n % 3 !== 0 && n % 4 !== 0 && n % 5 !== 0).map((n) =>
        template.bind(n).pipelineId as string
      )
      assert.isAbove(clean.length, 10)
      for (const id of clean) assert.include(general.calls, id)
      assert.isAbove(clean.filter((id) => !fast.calls.includes(id)).length, clean.length / 2)
      assertSame(fast, general)
      assert.include(fast.summary, `"succeeded":${seeds.filter((n) => n % 5 !== 0).length}`)
      // every task that succeeded names its leases (t1's across its attempts)
      const succeeded = fast.rows.tasks.filter((t) => t.includes(`"state":"succeeded"`))
      assert.isAbove(succeeded.length, 90)
      assert.isTrue(succeeded.every((t) => t.includes("LEASE")))
      assert.strictEqual(fast.active, 0)
      assert.strictEqual(general.active, 0)
      // an attempt that waits: what its pipeline did before it is durable meanwhile (its row,
      // its first task), as on the general path
      assert.isAbove(fast.holdersSeen, 0)
      assert.deepStrictEqual(fast.notDurable, [])
      assert.deepStrictEqual(general.notDurable, [])
    }))

  it.scoped("a stop while attempts hold their leases: the same interrupted rows and report, every lease released", () =>
    Effect.gen(function*() {
      // every t1 holds its lease past the stop (3 s) and its grace (2 s): two are interrupted
      // holding their leases, six while waiting for one
      const { fast, general } = yield* both({
        seeds: seeds.slice(0, 8),
        holdMs: 60_000,
        faults: false,
        holds: () => true,
        stop: true,
        // a worker slot for each (the paths give slots back at different points between tasks)
        concurrency: 8,
        // (t0 and t2 lease at once from "pool", which the waits of t1 leave free)
        holdPool: "slow"
      })
      assertSame(fast, general)
      assert.include(fast.summary, `"interrupted":8`)
      assert.strictEqual(fast.holdersSeen, 2)
      assert.strictEqual(fast.active, 0)
      assert.strictEqual(general.active, 0)
    }))
})
