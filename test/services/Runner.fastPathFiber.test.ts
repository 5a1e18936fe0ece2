/**
 * Issue 19 §5: on the fast path (`Pipeline.runNow`), the attempts of a pipeline's Effect tasks
 * (`Task.make`) run on one fiber started at its first Effect task, one after the other, as a
 * pipeline fiber runs them (a fiber per attempt was a large part of a trivial Effect task's
 * cost). When that fiber does not end at once (here: Effect's op budget makes it yield), the
 * pipeline is handed to its own fiber at the attempt the attempts' fiber is in, and the rows
 * are the general path's.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, type Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { countedSqliteStore, dump, runOn } from "../support/fastPathRows.js"

/**
 * A mixed pipeline: `Task.sync` t0 and t2, Effect tasks t1 and t3, each Effect task recording
 * the fiber its attempt ran on in `fibers` (by pipeline id).
 */
const templateOf = (fibers: Map<string, Array<string>>) => {
  const seen = (ctx: { readonly pipelineId: string }) =>
    Effect.flatMap(Effect.fiberId, (id) =>
      Effect.sync(() => {
        const ids = fibers.get(ctx.pipelineId) ?? []
        ids.push(JSON.stringify(id))
        fibers.set(ctx.pipelineId, ids)
      }))
  return Pipeline.make(
    "fast-fiber",
    Task.sync("t0", (n: number) => ({ n })),
    Task.make("t1", (r: { readonly n: number }, ctx) => Effect.as(seen(ctx), { n: r.n, a: r.n + 1 })),
    Task.sync("t2", (r: { readonly n: number; readonly a: number }) => ({ ...r, b: r.a * 2 })),
    Task.make("t3", (r: { readonly n: number; readonly b: number }, ctx) => Effect.as(seen(ctx), `done ${r.n + r.b}`))
  )
}
const seeds = Array.from({ length: 24 }, (_, i) => i + 1)

/**
 * {@link runOn} with the fibers' op budget `ops` (`Effect.withMaxOpsBeforeYield`): the run's
 * fibers yield every `ops` steps, so the clock is advanced a little at a time until it ends.
 */
const runYielding = (
  filename: string,
  specs: Stream.Stream<Pipeline.PipelineSpec<any, any, any, any>, unknown>,
  ops: number
) => {
  const calls: Array<string> = []
  const layer = Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4, maxAdmitted: 8 }),
    Layer.mergeAll(countedSqliteStore(filename, false, calls), Pool.layer([]))
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

describe("Runner: the fast path runs a pipeline's Effect attempts on one fiber", () => {
  it.scoped("the Effect tasks of a pipeline that ends at once share one fiber; rows as on the general path", () =>
    Effect.gen(function*() {
      const dir = yield* tmpDir
      const fibers = new Map<string, Array<string>>()
      const template = templateOf(fibers)
      const fast = yield* runOn(nodePath.join(dir, "fast.db"), false, template.map(seeds))
      const general = yield* runOn(nodePath.join(dir, "general.db"), true, templateOf(new Map()).map(seeds))
      assert.deepStrictEqual(fast.rows, general.rows)
      assert.strictEqual(fast.summary, general.summary)
      assert.include(fast.summary, `"succeeded":${seeds.length}`)
      // the pipelines the fast path ended (no `checkpoint` call of their own)
      const ended = seeds.map((n) => template.bind(n).pipelineId as string).filter((id) => !fast.calls.includes(id))
      assert.isAbove(ended.length, seeds.length / 2)
      for (const id of ended) {
        const ids = fibers.get(id)!
        assert.strictEqual(ids.length, 2)
        assert.strictEqual(ids[0], ids[1], `t1 and t3 of ${id} on one fiber`)
      }
    }))

  it.scoped("an attempts' fiber that yields hands the pipeline over, with the general path's rows", () =>
    Effect.gen(function*() {
      const dir = yield* tmpDir
      const template = templateOf(new Map())
      const few = seeds.slice(0, 8)
      const general = yield* runOn(nodePath.join(dir, "general.db"), true, template.map(few))
      // a small op budget: fibers yield every few steps, wherever they are (16: the attempts'
      // fibers of these pipelines yield, and every pipeline is handed over; 64: they do not)
      let handedOver = 0
      for (const ops of [16, 64]) {
        const fast = yield* runYielding(nodePath.join(dir, `fast-${ops}.db`), template.map(few), ops)
        assert.deepStrictEqual(fast.rows, general.rows, `op budget ${ops}`)
        assert.strictEqual(fast.summary, general.summary, `op budget ${ops}`)
        handedOver += fast.calls.length
      }
      assert.isAbove(handedOver, 0)
    }))
})
