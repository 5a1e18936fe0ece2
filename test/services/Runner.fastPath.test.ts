/**
 * Issue 19 §5: a plain pipeline of synchronous tasks runs without a fiber of its own
 * (`Pipeline.runNow`), its one checkpoint submitted to the group commit with a callback. It
 * must write exactly what the general path (one fiber per pipeline) writes: the same pipeline,
 * task, attempt and artifact rows, the same events and the same report, for pipelines that
 * succeed at once and for those it hands to a fiber part-way (a retried attempt, a fatal
 * failure, a refused directive).
 *
 * Times are compared as present or absent only: the two paths schedule differently, so a
 * retried pipeline starts at another `TestClock` time.
 *
 * The general path is forced by a store that is a copy of the SQLite store's service (not the
 * object the store front built, so the runner finds no callback submission for it).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { countedSqliteStore, dumpStore } from "../support/storeDump.js"

const t0 = Task.sync("t0", (n: number) => ({ n, a: n + 1 }))
const t1 = Task.sync(
  "t1",
  { retry: { maxAttempts: 2, base: "1 second", jitter: "none" } },
  (r: { readonly n: number; readonly a: number }, ctx) => {
    if (r.n % 5 === 0) throw new Error(`bad ${r.n}`)
    if (r.n % 3 === 0 && ctx.attempt === 1) throw new RetryableError({ message: "once", errorClass: "upstream" })
    if (r.n % 7 === 0) return Handoff.end(r) as unknown as typeof r
    return { ...r, b: r.a * 2 }
  }
)
const t2 = Task.sync("t2", (r: { readonly n: number }) => `done ${r.n}`)
const template = Pipeline.make("fast-vs-general", t0, t1, t2)
const seeds = Array.from({ length: 40 }, (_, i) => i + 1)

/** Every row and event of a store, in a stable order, the run id replaced by `RUN`. */
const dump = (store: StoreService, runId: string) => dumpStore(store, runId)

const runOn = (filename: string, general: boolean) => {
  const calls: Array<string> = []
  // the same object the front built, its `checkpoint` counted (the fast path never calls it)
  const counted = countedSqliteStore(filename, general, calls)
  const layer = Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4, maxAdmitted: 8 }),
    Layer.mergeAll(counted, Pool.layer([]))
  )
  return Effect.gen(function*() {
    const fiber = yield* Effect.fork(Runner.run(template.map(seeds)))
    yield* TestClock.adjust("10 seconds")
    const report = yield* Fiber.join(fiber)
    const store = yield* Store
    const rows = yield* dump(store, report.runId)
    const { durationMs: _d, runId: _r, startedAt: _s, ...summary } = report
    return { rows, summary: JSON.stringify(summary), calls }
  }).pipe(Effect.provide(layer))
}

describe("Runner: the plain synchronous fast path", () => {
  it.scoped("writes the same rows, events and report as the general path (pipelines that succeed, retry, fail, hand off)", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-fastpath-"))),
        (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
      )
      const fast = yield* runOn(nodePath.join(dir, "fast.db"), false)
      const general = yield* runOn(nodePath.join(dir, "general.db"), true)
      // the fast path ran: a pipeline that succeeds at its first attempts never calls
      // `checkpoint` (one submission with a callback) unless no worker slot was free when it
      // was admitted (then it gets its fiber), while the general path always calls it
      const clean = seeds.filter((n) => n % 3 !== 0 && n % 5 !== 0 && n % 7 !== 0).map((n) => template.bind(n).pipelineId as string)
      assert.isAbove(clean.length, 10)
      for (const id of clean) assert.include(general.calls, id)
      assert.isAbove(clean.filter((id) => !fast.calls.includes(id)).length, clean.length / 2)
      assert.deepStrictEqual(fast.rows.pipelines, general.rows.pipelines)
      assert.deepStrictEqual(fast.rows.tasks, general.rows.tasks)
      assert.deepStrictEqual(fast.rows.attempts, general.rows.attempts)
      assert.deepStrictEqual(fast.rows.artifacts, general.rows.artifacts)
      assert.deepStrictEqual(fast.rows.events, general.rows.events)
      assert.strictEqual(fast.summary, general.summary)
      assert.include(fast.summary, `"succeeded":${seeds.length - seeds.filter((n) => n % 5 === 0 || (n % 7 === 0)).length}`)
    }))
})
