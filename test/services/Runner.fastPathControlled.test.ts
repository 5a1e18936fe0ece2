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
 * How the two runs are made and compared: `test/support/fastPathRows.ts`; every task body
 * also notes each execution here, so an attempt run twice or skipped shows.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { RetryableError } from "../../src/domain/Errors.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import type * as Runner from "../../src/services/Runner.js"
import { runOn } from "../support/fastPathRows.js"

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

/** `run` with the task executions it made (sorted). */
const counting = <A extends object, E, R>(run: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => {
    executions = []
    return Effect.map(run, (r) => ({ ...r, executions: [...executions].sort() }))
  })

const compare = (options: Runner.RunOptions, budget: number) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-fastpath-control-"))),
      (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
    )
    const fast = yield* counting(runOn(nodePath.join(dir, "fast.db"), false, template.map(seeds), options, true))
    const general = yield* counting(runOn(nodePath.join(dir, "general.db"), true, template.map(seeds), options, true))
    // the fast path ran: a pipeline whose attempts all succeed or hand off at once never calls
    // `checkpoint` (one submission with a callback) unless no worker slot was free when it was
    // admitted (then it gets its fiber), while the general path always calls it
    const clean = seeds.filter((n) => [0, 1, 2, 5, 7, 8, 9, 10, 13, 15].includes(kind(n)))
      .map((n) => template.bind(n).pipelineId as string)
    assert.isAbove(clean.length, 20)
    assert.isTrue(clean.every((id) => general.calls.includes(id)))
    assert.isAbove(clean.filter((id) => !fast.calls.includes(id)).length, clean.length / 2)
    // pipelines, tasks, attempts, artifacts, events, traversal states and entries, ledger
    for (const k of Object.keys(general.rows) as Array<keyof typeof general.rows>) {
      assert.deepStrictEqual(fast.rows[k], general.rows[k], k)
    }
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
      const fast = yield* runOn(nodePath.join(dir, "fast.db"), false, specs(), {}, true)
      const general = yield* runOn(nodePath.join(dir, "general.db"), true, specs(), {}, true)
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
