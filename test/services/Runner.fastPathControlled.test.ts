/**
 * Issue 13 (benchmark) / issue 19 §5: a pipeline that declares `control` and whose tasks are
 * all `Task.sync` runs its steps and transitions without a fiber of its own
 * (`Controlled.runNow`), its one checkpoint submitted to the group commit with a callback, and
 * hands over to its fiber at the first attempt that is not a clean success or a committable
 * directive. It must write exactly what the general path (one fiber per pipeline) writes:
 * the same pipeline, task, attempt and artifact rows, the same events, the same traversal
 * state and handoff ledger, and the same report, for every kind of transition (rewind,
 * retryAll, `to` with and without a value, `end` with and without a value), a refused
 * directive, a spent budget (declared, and capped by the run's `maxHandoffs`), and a failure
 * retried after a rewind.
 *
 * Times are compared as present or absent only: the two paths schedule differently, so a
 * retried pipeline starts at another `TestClock` time.
 *
 * The general path is forced by a store that is a copy of the SQLite store's service (not the
 * object the store front built, so the runner finds no callback submission for it).
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"

interface Row {
  readonly n: number
  readonly a: number
  readonly b?: number
  readonly c?: number
}

/** What each seed does, by `n % 16` (see the module comment). */
const kind = (n: number) => n % 16

/** Every execution of a task body in the current run (seed, task, visit, attempt): none is repeated or skipped. */
let executions: Array<string> = []
const ran = (n: number, task: string, ctx: { readonly visit: number; readonly attempt: number }) =>
  executions.push(`${n}:${task}:${ctx.visit}:${ctx.attempt}`)

const t0 = Task.sync("t0", (n: number, ctx): Row => {
  ran(n, "t0", ctx)
  return { n, a: n + 1 }
})
const t1 = Task.sync(
  "t1",
  { retry: { maxAttempts: 2, base: "1 second", jitter: "none" } },
  (r: Row, ctx): Row => {
    ran(r.n, "t1", ctx)
    const k = kind(r.n)
    // a forward handoff, with a value and without one (the input reused)
    if (k === 1) return Handoff.to("t3", { ...r, b: -1 }) as unknown as Row
    if (k === 9) return Handoff.to("t3") as unknown as Row
    // the end, with a value and without one (the input reused, marked final)
    if (k === 2) return Handoff.end({ ...r, b: -2 }) as unknown as Row
    if (k === 10) return Handoff.end() as unknown as Row
    // an edge the declaration does not allow: refused, a fatal failure
    if (k === 3 || k === 11) return Handoff.to("t2") as unknown as Row
    // a failure after the rewind, retried
    if ((k === 4 || k === 12) && ctx.visit === 1 && ctx.attempt === 1) {
      throw new RetryableError({ message: "once after the rewind", errorClass: "upstream" })
    }
    return { ...r, b: r.a * 2 + ctx.visit }
  }
)
const t2 = Task.sync("t2", (r: Row, ctx): Row => {
  ran(r.n, "t2", ctx)
  const k = kind(r.n)
  // rewind once, then end with a value (the benchmark's pipeline)
  if (k === 0 || k === 8) {
    return (ctx.visit === 0 ? Handoff.rewind("t1", { n: r.n, a: 100 }) : Handoff.end({ ...r, c: 1 })) as unknown as Row
  }
  // rewind once, then go on (t1's second visit fails once first)
  if ((k === 4 || k === 12) && ctx.visit === 0) return Handoff.rewind("t1", { n: r.n, a: 200 }) as unknown as Row
  // retry everything once from the seed
  if ((k === 5 || k === 13) && ctx.visit === 0) return Handoff.retryAll() as unknown as Row
  // rewind until the budget is spent
  if (k === 6 || k === 14) return Handoff.rewind("t1", { n: r.n, a: ctx.visit }) as unknown as Row
  return { ...r, c: (r.b ?? 0) + ctx.visit }
})
const t3 = Task.sync("t3", (r: Row, ctx) => (ran(r.n, "t3", ctx), `done ${r.n} ${r.b ?? "-"} ${r.c ?? "-"} ${ctx.visit}`))
const template = Pipeline.make("fast-vs-general-control", t0, t1, t2, t3, {
  control: { edges: { t1: ["t3", "end"], t2: ["end"] }, rewind: { t2: ["t1"] }, retryAll: ["t2"], maxHandoffs: 3 }
})
const seeds = Array.from({ length: 48 }, (_, i) => i + 1)

/** Every row and event of a store, with each pipeline's traversal state and ledger, in a stable order, the run id replaced by `RUN`. */
const dump = (store: StoreService, runId: string) =>
  Effect.gen(function*() {
    const all = <A>(s: Stream.Stream<A, unknown>) => Effect.map(Stream.runCollect(s), Chunk.toArray)
    const pipelines = yield* all(store.streamPipelines())
    const tasks = yield* all(store.streamTasks())
    const attempts = yield* all(store.streamAttempts())
    const artifacts: Array<unknown> = []
    const states: Array<unknown> = []
    const ledger: Array<unknown> = []
    const traversal = store.traversal!
    for (const p of pipelines) {
      artifacts.push(...(yield* all(store.streamArtifacts({ pipelineId: p.pipelineId }))))
      states.push({ pipelineId: p.pipelineId, state: Option.getOrNull(yield* traversal.visitState(p.pipelineId)) })
      ledger.push(...(yield* traversal.handoffs({ pipelineId: p.pipelineId })))
      // an entry payload is read back by its occurrence address as a resume reads it
      const vs = yield* traversal.visitState(p.pipelineId)
      if (Option.isSome(vs) && vs.value.pending !== null) {
        const entry = yield* traversal.getArtifactById(vs.value.pending.input)
        // (its surrogate id follows the commit order, which differs between the paths)
        states.push({
          pipelineId: p.pipelineId,
          entry: Option.getOrNull(Option.map(entry, ({ artifact: { artifactId: _id, ...rest } }) => rest))
        })
      }
    }
    const events = yield* all(store.streamEvents())
    const norm = (rows: ReadonlyArray<unknown>, drop: ReadonlyArray<string>) =>
      rows.map((r) => {
        const o: Record<string, unknown> = { ...(r as Record<string, unknown>) }
        for (const k of drop) delete o[k]
        // times: when a pipeline is admitted depends on the schedule (the fast path ends its
        // pipelines sooner, so the retried ones start at another TestClock time)
        return JSON.stringify(o, (k, v) =>
          v instanceof Uint8Array
            ? Buffer.from(v).toString("base64")
            : typeof v === "number" && (/At$/.test(k) || k === "ts" || k === "durationMs")
            ? "T"
            : v)
          .split(runId).join("RUN")
          .replace(/(:RUN:)\d+/g, "$1T")
      }).sort()
    return {
      pipelines: norm(pipelines, []),
      tasks: norm(tasks, []),
      // surrogate ids follow the commit order, which differs between the paths
      attempts: norm(attempts, ["attemptId", "id"]),
      artifacts: norm(artifacts, ["artifactId", "id"]),
      events: norm(events.filter((e) => e.pipelineId !== null), ["eventId", "id"]),
      states: norm(states, []),
      ledger: norm(ledger, ["handoffId", "id"])
    }
  })

const runOn = (
  filename: string,
  general: boolean,
  options: Runner.RunOptions,
  specs: Stream.Stream<Pipeline.PipelineSpec<any, any, any, any>, unknown> = template.map(seeds)
) => {
  const calls: Array<string> = []
  // the same object the front built, its `checkpoint` counted (the fast path never calls it)
  const counted = Layer.effect(
    Store,
    Effect.map(Store, (s): StoreService => {
      const checkpoint = s.checkpoint
      const target: StoreService = general ? { ...s } : s
      ;(target as { checkpoint: StoreService["checkpoint"] }).checkpoint = (unit) => {
        calls.push(unit.pipelineId)
        return checkpoint(unit)
      }
      return target
    })
  ).pipe(Layer.provide(SqliteStore.layer({ filename })))
  const layer = Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 4, maxAdmitted: 8 }),
    Layer.mergeAll(counted, Pool.layer([]))
  )
  return Effect.gen(function*() {
    executions = []
    const fiber = yield* Effect.fork(Runner.run(specs, options))
    yield* TestClock.adjust("10 seconds")
    const report = yield* Fiber.join(fiber)
    const store = yield* Store
    const rows = yield* dump(store, report.runId)
    const { durationMs: _d, runId: _r, startedAt: _s, ...summary } = report
    return { rows, summary: JSON.stringify(summary), calls, executions: [...executions].sort() }
  }).pipe(Effect.provide(layer))
}

const compare = (options: Runner.RunOptions, budget: number) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-fastpath-control-"))),
      (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
    )
    const fast = yield* runOn(nodePath.join(dir, "fast.db"), false, options)
    const general = yield* runOn(nodePath.join(dir, "general.db"), true, options)
    // the fast path ran: a pipeline whose attempts all succeed or hand off at once never calls
    // `checkpoint` (one submission with a callback) unless no worker slot was free when it was
    // admitted (then it gets its fiber), while the general path always calls it
    const clean = seeds.filter((n) => [0, 1, 2, 5, 7, 8, 9, 10, 13, 15].includes(kind(n)))
      .map((n) => template.bind(n).pipelineId as string)
    assert.isAbove(clean.length, 20)
    for (const id of clean) assert.include(general.calls, id)
    assert.isAbove(clean.filter((id) => !fast.calls.includes(id)).length, clean.length / 2)
    assert.deepStrictEqual(fast.rows.pipelines, general.rows.pipelines)
    assert.deepStrictEqual(fast.rows.tasks, general.rows.tasks)
    assert.deepStrictEqual(fast.rows.attempts, general.rows.attempts)
    assert.deepStrictEqual(fast.rows.artifacts, general.rows.artifacts)
    assert.deepStrictEqual(fast.rows.events, general.rows.events)
    assert.deepStrictEqual(fast.rows.states, general.rows.states)
    assert.deepStrictEqual(fast.rows.ledger, general.rows.ledger)
    assert.strictEqual(fast.summary, general.summary)
    // every attempt ran once, on both paths (a handed-over attempt is not run again)
    assert.deepStrictEqual(fast.executions, general.executions)
    assert.strictEqual(new Set(fast.executions).size, fast.executions.length)
    // what the seeds do happened: refused edges and spent budgets fail, the rest succeed
    const failing = seeds.filter((n) => [3, 11, 6, 14].includes(kind(n))).length
    assert.include(fast.summary, `"succeeded":${seeds.length - failing}`)
    assert.include(fast.summary, `"failed":${failing}`)
    const spent = fast.rows.pipelines.filter((p) => p.includes("BudgetExceeded"))
    assert.strictEqual(spent.length, seeds.filter((n) => [6, 14].includes(kind(n))).length)
    for (const p of spent) assert.include(p, `after ${budget} of ${budget} transitions`)
    assert.strictEqual(fast.rows.pipelines.filter((p) => p.includes("HandoffRefused")).length, 6)
    // the retried attempt after the rewind is there (visit 1 of t1, attempt 1 failed then 2)
    assert.isAbove(fast.rows.attempts.filter((a) => a.includes("once after the rewind")).length, 0)
  })

describe("Runner: the controlled synchronous fast path", () => {
  it.scoped("writes the same rows, events, traversal state, ledger and report as the general path (declared budget spent)", () =>
    compare({}, 3))

  it.scoped("the same under the run's maxHandoffs cap (budget capped to 2 by run.maxHandoffs)", () =>
    compare({ maxHandoffs: 2 }, 2))

  it.scoped("a long traversal commits where the general path commits (every MAX_UNCOMMITTED steps), with the same rows", () =>
    Effect.gen(function*() {
      // 2 tasks, `b` rewinding to `a` until its 40th visit: 81 steps, more than one commit holds
      const a = Task.sync("a", (n: number, ctx) => n * 1000 + ctx.visit)
      const b = Task.sync("b", (m: number, ctx) => ctx.visit < 40 ? Handoff.rewind("a", Math.floor(m / 1000)) : m)
      const looping = Pipeline.make("long-loop", a, b, { control: { rewind: { b: ["a"] }, maxHandoffs: 50 } })
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-fastpath-control-"))),
        (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
      )
      const specs = () => looping.map([1, 2, 3])
      const fast = yield* runOn(nodePath.join(dir, "fast.db"), false, {}, specs())
      const general = yield* runOn(nodePath.join(dir, "general.db"), true, {}, specs())
      // the general path commits each pipeline twice (64 steps, then the rest); the fast path
      // hands over before the 65th step and its fiber commits the same way
      for (const spec of [1, 2, 3].map((n) => looping.bind(n).pipelineId as string)) {
        assert.strictEqual(general.calls.filter((id) => id === spec).length, 2)
        assert.strictEqual(fast.calls.filter((id) => id === spec).length, 2)
      }
      assert.deepStrictEqual(fast.rows, general.rows)
      assert.strictEqual(fast.summary, general.summary)
      assert.include(fast.summary, `"succeeded":3`)
    }))
})
