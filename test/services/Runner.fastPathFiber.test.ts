/**
 * Issue 19 §5: on the fast path (`Pipeline.runNow`), the first attempt of each Effect task
 * (`Task.make`) of a plain pipeline is evaluated at once without a fiber (`evalNow.ts`); an
 * attempt that reaches a step needing a fiber (its fiber id, an error handler) goes on on a
 * fiber of its own, and one that waits (`Effect.yieldNow`, a sleep) hands the pipeline to its
 * own fiber at that attempt. Whatever the body is made of, the rows, events and report are the
 * general path's, and a pipeline whose attempts all ended at once makes no checkpoint call of
 * its own.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber, Layer, Option, type Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { countedSqliteStore, dump } from "../support/fastPathRows.js"

/**
 * A mixed pipeline: `Task.sync` t0 and t2, Effect tasks t1 and t3. t1 is a generator that
 * yields what the evaluation steps through (a sync step, a nested generator, `Either.right`,
 * `Option.some`), and, by seed: n % 4 == 1: its fiber id (a step that needs a fiber); n % 4 == 2:
 * a failure it catches itself (an error handler); n % 5 == 3: a throw (a defect: the pipeline fails);
 * `waits(n)`: `Effect.yieldNow` (the pipeline is handed over there). t3 maps a sync step.
 */
const templateOf = (waits: (n: number) => boolean) =>
  Pipeline.make(
    "fast-fiber",
    Task.sync("t0", (n: number) => ({ n })),
    Task.make(
      "t1",
      (r: { readonly n: number }) =>
        Effect.gen(function*() {
          const a = yield* Effect.sync(() => r.n + 1)
          const b = yield* Effect.gen(function*() {
            const x = yield* Either.right(a)
            return x + (yield* Option.some(1))
          })
          if (r.n % 4 === 1) yield* Effect.asVoid(Effect.fiberId)
          const c = r.n % 4 === 2 ? yield* Effect.catchAll(Effect.fail("no"), () => Effect.succeed(1)) : 0
          if (r.n % 5 === 3) throw new Error(`thrown ${r.n}`)
          if (waits(r.n)) yield* Effect.yieldNow()
          return { n: r.n, a, b: b + c }
        })
    ),
    Task.sync("t2", (r: { readonly n: number; readonly a: number; readonly b: number }) => ({ ...r, c: r.a * 2 })),
    Task.make("t3", (r: { readonly n: number; readonly c: number }) => Effect.map(Effect.sync(() => r.c), (c) => `done ${r.n + c}`))
  )
const seeds = Array.from({ length: 24 }, (_, i) => i + 1)

/**
 * Runs `specs` on a SQLite file through the fast path or (`general`) the general path (see
 * `fastPathRows.runOn`) with the fibers' op budget `ops` (`Effect.withMaxOpsBeforeYield`: a
 * small one makes fibers yield every few steps, wherever they are), advancing the clock a
 * little at a time until the run ends.
 */
const runYielding = (
  filename: string,
  general: boolean,
  specs: Stream.Stream<Pipeline.PipelineSpec<any, any, any, any>, unknown>,
  ops: number
) => {
  const calls: Array<string> = []
  const layer = Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4, maxAdmitted: 8 }),
    Layer.mergeAll(countedSqliteStore(filename, general, calls), Pool.layer([]))
  )
  return Effect.gen(function*() {
    const fiber = yield* Effect.fork(Effect.withMaxOpsBeforeYield(Runner.run(specs), ops))
    let report = yield* Fiber.poll(fiber)
    for (let i = 0; i < 400 && Option.isNone(report); i++) {
      yield* Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })
      yield* TestClock.adjust("100 millis")
      report = yield* Fiber.poll(fiber)
    }
    const done = yield* Fiber.join(fiber)
    const rows = yield* dump(yield* Store, done.runId)
    const { durationMs: _d, runId: _r, startedAt: _s, ...summary } = done
    return { rows, summary: JSON.stringify(summary), calls }
  }).pipe(Effect.provide(layer))
}

const tmpDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-fastpath-fiber-"))),
  (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
)

const never = () => false
const idOf = (n: number) => templateOf(never).bind(n).pipelineId as string

describe("Runner: the fast path evaluates Effect attempts without a fiber", () => {
  it.scoped("whatever an Effect task's body is made of: the general path's rows, events and report", () =>
    Effect.gen(function*() {
      const dir = yield* tmpDir
      const fast = yield* runYielding(nodePath.join(dir, "fast.db"), false, templateOf(never).map(seeds), 2048)
      const general = yield* runYielding(nodePath.join(dir, "general.db"), true, templateOf(never).map(seeds), 2048)
      assert.deepStrictEqual(fast.rows, general.rows)
      assert.strictEqual(fast.summary, general.summary)
      // (a throw is a defect: not retried, its pipeline fails)
      assert.include(fast.summary, `"succeeded":${seeds.filter((n) => n % 5 !== 3).length}`)
      // a pipeline whose attempts all succeeded at once (on a fiber of their own or none) makes
      // no checkpoint call of its own unless no worker slot was free at its admission; one
      // whose attempt threw (a defect) is handed over
      const once = seeds.filter((n) => n % 5 !== 3)
      assert.isAbove(once.filter((n) => !fast.calls.includes(idOf(n))).length, once.length / 2)
      // (those that stop at a step needing a fiber, then end at once, too)
      assert.isAbove(once.filter((n) => n % 4 === 1 && !fast.calls.includes(idOf(n))).length, 0)
      for (const n of seeds.filter((n) => n % 5 === 3)) assert.include(fast.calls, idOf(n))
      for (const n of seeds) assert.include(general.calls, idOf(n))
    }))

  it.scoped("an attempt that waits hands the pipeline over at that attempt, with the general path's rows", () =>
    Effect.gen(function*() {
      const dir = yield* tmpDir
      const waits = (n: number) => n % 3 === 0
      const few = seeds.slice(0, 12)
      const general = yield* runYielding(nodePath.join(dir, "general.db"), true, templateOf(waits).map(few), 2048)
      // (and with a small op budget: fibers then yield wherever they are)
      for (const ops of [16, 2048]) {
        const fast = yield* runYielding(nodePath.join(dir, `fast-${ops}.db`), false, templateOf(waits).map(few), ops)
        assert.deepStrictEqual(fast.rows, general.rows, `op budget ${ops}`)
        assert.strictEqual(fast.summary, general.summary, `op budget ${ops}`)
        for (const n of few.filter(waits)) assert.include(fast.calls, idOf(n), `op budget ${ops}`)
      }
    }))
})
