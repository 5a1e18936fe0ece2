import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Fiber, Layer, Option, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import type { PipelineId } from "../../src/domain/Ids.js"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type { PipelineRecord } from "../../src/domain/Records.js"
import * as Resource from "../../src/domain/Resource.js"
import { memberPipelineId } from "../../src/domain/Suite.js"
import * as Task from "../../src/domain/Task.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as Pool from "../../src/services/Pool.js"

import * as Runner from "../../src/services/Runner.js"
import * as Signals from "../../src/services/Signals.js"
import { Store } from "../../src/services/Store.js"
import * as StudyControl from "../../src/services/StudyControl.js"
import * as Suite from "../../src/services/Suite.js"
import { fakeCatalog, suiteEnv } from "./suiteFixture.js"

// ---------------------------------------------------------------------------------------------
// Fixtures: trials are suite members whose pipelines each take one lease ("a call") of the
// shared pool `llm`, report 100 prompt + 50 completion tokens, then work for 10 s (TestClock).
// ---------------------------------------------------------------------------------------------

const numbers = (n: number) => Array.from({ length: n }, (_, i) => i)

/** One call: a lease, a usage report, 10 s of work; reports `accuracy` (the trial's variable) first. */
const call = Task.make("call", { resource: "llm" }, (n: number, ctx) =>
  Effect.scoped(Effect.gen(function*() {
    const accuracy = ctx.variables.accuracy
    if (typeof accuracy === "number") yield* Effect.orDie(ctx.reportMetric("accuracy", accuracy))
    // one value per pipeline (the n-th pipeline reports the n-th)
    if (Array.isArray(accuracy) && typeof accuracy[n] === "number") yield* Effect.orDie(ctx.reportMetric("accuracy", accuracy[n]))
    const lease = yield* Effect.orDie(ctx.acquire())
    yield* lease.report({ ok: true, usage: { tokens: 150, promptTokens: 100, completionTokens: 50 } })
    yield* Effect.sleep("10 seconds")
    return n
  })))
const calls = Pipeline.make("calls", call)

const trial = (id: string, pipelines: number, variables: Record<string, Json> = {}) =>
  Suite.member(id, () => calls.map(numbers(pipelines)), {
    definitionDigest: id,
    poolAliases: { llm: "llm" },
    variables
  })

const env = (options: Runner.RunOptions = {}) =>
  suiteEnv("study", [Pool.make("llm", [Resource.make("api", { id: "k", capacity: 8 })])], {
    concurrency: 1,
    maxAdmitted: 1,
    grace: "1 second",
    ...options
  })

const suiteOf = (members: ReadonlyArray<Suite.Member<any, any, any>>) =>
  Suite.make({ id: "study", outputRoot: "r", experiments: members })

const studyOf = (
  ids: ReadonlyArray<string>,
  budget: Partial<StudyControl.StudyControlInput["budget"]> = {},
  stop: ReadonlyArray<StudyControl.StopCondition> = []
): StudyControl.StudyControlInput => ({
  trials: ids.map((trialId) => ({ trialId, price: { promptPer1k: 2.5, completionPer1k: 5 } })),
  budget: { perTrial: budget.perTrial ?? {}, total: budget.total ?? {} },
  stop
})

/** Moves the TestClock 5 s at a time until `fiber` is done, and joins it. */
const drive = <A, E>(fiber: Fiber.RuntimeFiber<A, E>) =>
  Effect.gen(function*() {
    while (Option.isNone(yield* Fiber.poll(fiber))) yield* TestClock.adjust("5 seconds")
    return yield* Fiber.join(fiber)
  })

/** Runs `suite` under `control`'s window, moving the TestClock until it ends. */
const runStudy = (
  suite: Suite.Suite<any, any, any>,
  handle: StudyControl.StudyControlHandle,
  options: Suite.SuiteRunOptions = {},
  during: Effect.Effect<void> = Effect.void
) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(Suite.run(suite, { ...options, window: handle.window }))
    yield* during
    return yield* drive(fiber)
  })

/** The pipelines of a member that ran in `runId` by state, from the store. */
const rowsOf = (ids: ReadonlyArray<string>, n: number) =>
  Effect.gen(function*() {
    const store = yield* Store
    const out = new Map<string, ReadonlyArray<PipelineRecord>>()
    for (const id of ids) {
      const pids = numbers(n).map((i) => memberPid(id, calls.bind(i).key))
      const rows = yield* store.getPipelines(pids)
      out.set(id, pids.flatMap((p) => rows.has(p) ? [rows.get(p)!] : []))
    }
    return out
  })

const memberPid = (id: string, key: string): PipelineId => memberPipelineId("study", id, key)


const skippedFor = (reason: string) =>
  Effect.flatMap(Store, (s) => s.events({ kind: "pipeline.skipped" })).pipe(
    Effect.map((es) => es.filter((e) => (e.data as { reason?: string }).reason === reason))
  )

// ---------------------------------------------------------------------------------------------
// The window
// ---------------------------------------------------------------------------------------------

describe("Suite window", () => {
  it.effect("at most `active` members submit at once, started in the suite's order", () =>
    Effect.gen(function*() {
      const started: Array<string> = []
      let submitting = 0
      let peak = 0
      const window: Suite.MemberWindow = {
        active: 2,
        mayStart: () => Effect.succeed(true),
        mayAdmit: () => Effect.succeed(true),
        observe: {
          memberStarted: (id) =>
            Effect.sync(() => {
              started.push(id)
              peak = Math.max(peak, ++submitting)
            }),
          memberSubmitted: () => Effect.sync(() => void submitting--)
        }
      }
      const suite = yield* suiteOf([trial("a", 3), trial("b", 1), trial("c", 2), trial("d", 2), trial("e", 1)])
      const fiber = yield* Effect.fork(Suite.run(suite, { window }))
      const report = yield* drive(fiber)
      assert.deepStrictEqual(started, ["a", "b", "c", "d", "e"])
      assert.strictEqual(peak, 2)
      assert.strictEqual(report.run.stats.byState.succeeded, 9)
      assert.isTrue(report.members.every((m) => m.started && m.sourceExhausted))
    }).pipe(Effect.provide(env({ concurrency: 4, maxAdmitted: 4 }))))

  it.effect("without a window every selected member starts with the run (today's behaviour)", () =>
    Effect.gen(function*() {
      const suite = yield* suiteOf([trial("a", 1), trial("b", 1)])
      const fiber = yield* Effect.fork(Suite.run(suite))
      const report = yield* drive(fiber)
      assert.isTrue(report.members.every((m) => m.started && !m.startRefused && !m.admitRefused))
      assert.strictEqual(report.run.stats.byState.succeeded, 2)
    }).pipe(Effect.provide(env())))

  it.effect("mayStart false: the member is never started, submits nothing and says so", () =>
    Effect.gen(function*() {
      const window: Suite.MemberWindow = {
        active: 1,
        mayStart: (id) => Effect.succeed(id !== "b"),
        mayAdmit: () => Effect.succeed(true)
      }
      const suite = yield* suiteOf([trial("a", 1), trial("b", 2), trial("c", 1)])
      const fiber = yield* Effect.fork(Suite.run(suite, { window }))
      const report = yield* drive(fiber)
      const b = report.members.find((m) => m.experimentId === "b")!
      assert.isFalse(b.started)
      assert.isTrue(b.startRefused)
      assert.strictEqual(b.admitted, 0)
      assert.include(report.summary(), "b: not started (a stop fired before its turn)")
      assert.strictEqual(report.run.stats.byState.succeeded, 2, "a and c ran")
      const rows = yield* rowsOf(["b"], 2)
      assert.strictEqual(rows.get("b")!.length, 0)
    }).pipe(Effect.provide(env())))

  it.effect("window.active must be an integer >= 1", () =>
    Effect.gen(function*() {
      const suite = yield* suiteOf([trial("a", 1)])
      const exit = yield* Effect.exit(
        Suite.run(suite, { window: { active: 0, mayStart: () => Effect.succeed(true), mayAdmit: () => Effect.succeed(true) } })
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.include(JSON.stringify(exit), "window.active")
    }).pipe(Effect.provide(env())))
})

// ---------------------------------------------------------------------------------------------
// Budgets
// ---------------------------------------------------------------------------------------------

describe("per-trial budgets", () => {
  // every pipeline: 1 call, 150 tokens, cost 100 × 2.5/1000 + 50 × 5/1000 = 0.5 USD, 10 s
  const cases: ReadonlyArray<readonly [StudyControl.BudgetFigure, number]> = [
    ["calls", 3],
    ["tokens", 450],
    ["costUsd", 1.5],
    // at 30 s the third pipeline has just ended: the fourth is not started
    ["timeMs", 30_000]
  ]
  for (const [figure, limit] of cases) {
    it.effect(`${figure}: exactly the limit is used, the next pipeline is not started (budget_exhausted)`, () =>
      Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { [figure]: limit } }), ledger)
        const suite = yield* suiteOf([trial("a", 6)])
        const report = yield* runStudy(suite, handle)
        const a = report.members[0]!
        const usage = (yield* handle.trialUsage).get("a")!
        assert.strictEqual((yield* handle.exhausted).get("a"), figure)
        assert.isTrue(a.admitRefused, "the trial submits nothing more")
        if (figure === "timeMs") {
          // the third pipeline ends at 30 s, exactly when the time runs out
          assert.strictEqual(usage.timeMs, 30_000)
          assert.isAtMost(report.run.stats.byState.succeeded ?? 0, 3)
          assert.isAtLeast(report.run.stats.byState.succeeded ?? 0, 2)
          assert.strictEqual(usage.calls, 3, "no fourth pipeline started")
        } else {
          assert.strictEqual(report.run.stats.byState.succeeded, 3)
          assert.deepStrictEqual(usage, { calls: 3, tokens: 450, costUsd: 1.5, timeMs: 30_000 })
        }
        assert.strictEqual(report.run.stats.byState.failed ?? 0, 0, "never failed")
        // the admitted pipeline that could not start is skipped, left pending (resumable); with
        // tokens and dollars the gate projects before submitting: the fourth is never submitted
        const skipped = yield* skippedFor("budget_exhausted")
        if (figure === "calls" || figure === "timeMs") assert.isAtLeast(skipped.length, 1)
        else {
          assert.strictEqual(skipped.length, 0)
          assert.strictEqual((yield* handle.exhaustedNotes).get("a"), figure === "costUsd"
            ? "is spent: $1.50 used of $1.50"
            : "is spent: 450 used of 450")
        }
        const rows = (yield* rowsOf(["a"], 6)).get("a")!
        for (const r of rows) assert.include(["succeeded", "pending", "interrupted"], r.state)
        assert.strictEqual(rows.filter((r) => r.state === "pending").length, skipped.length)
        // written to the ledger
        const written = (yield* ledger.usage(["a"])).get("a")!
        assert.strictEqual(written.calls, 3)
      })).pipe(Effect.provide(env())))
  }

  it.effect("costUsd counts the run's priced figures (the experiment's pricing), the cost each attempt records", () =>
    Effect.scoped(Effect.gen(function*() {
      // the call names its model: the run's table prices it at 100 × 5000/1e6 + 50 × 10000/1e6
      // = 1 USD (the trial's profile price would say 0.5): a 2 USD budget allows 2 calls, not 4
      const priced = Task.make("call", { resource: "llm" }, (n: number, ctx) =>
        Effect.scoped(Effect.gen(function*() {
          const lease = yield* Effect.orDie(ctx.acquire())
          yield* lease.report({ ok: true, model: "m", usage: { tokens: 150, promptTokens: 100, completionTokens: 50 } })
          yield* Effect.sleep("10 seconds")
          return n
        })))
      const member = Suite.member("a", () => Pipeline.make("calls", priced).map(numbers(6)), {
        definitionDigest: "a",
        poolAliases: { llm: "llm" }
      })
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { costUsd: 2 } }), ledger)
      const report = yield* runStudy(yield* suiteOf([member]), handle)
      assert.strictEqual(report.run.stats.byState.succeeded, 2)
      assert.strictEqual((yield* handle.exhausted).get("a"), "costUsd")
      assert.deepStrictEqual((yield* ledger.usage(["a"])).get("a")!.costUsd, 2)
      const store = yield* Store
      const attempts = yield* Effect.map(Stream.runCollect(store.streamAttempts({})), Chunk.toReadonlyArray)
      assert.deepStrictEqual(attempts.map((a) => [a.model, a.tokensIn, a.tokensOut, a.costUsd]), [["m", 100, 50, 1], ["m", 100, 50, 1]])
    })).pipe(Effect.provide(env({ pricing: { m: { inputPer1M: 5000, outputPer1M: 10000 } } }))))

  it.effect("a variant's model profile price prices calls to its model only: a judge's call on another model is priced by the table", () =>
    Effect.scoped(Effect.gen(function*() {
      // the candidate's call (model cand) at the profile's price: 100 × 2.5/1000 + 50 × 5/1000
      // = 0.5 USD; the judge's (model judge-m) at the table's: 100 × 5000/1e6 + 50 × 10000/1e6 = 1
      const callOf = (name: string, model: string) =>
        Task.make(name, { resource: "llm" }, (n: number, ctx) =>
          Effect.scoped(Effect.gen(function*() {
            const lease = yield* Effect.orDie(ctx.acquire())
            yield* lease.report({ ok: true, model, requestedModel: model, usage: { tokens: 150, promptTokens: 100, completionTokens: 50 } })
            return n
          })))
      const member = Suite.member("a", () => Pipeline.make("judged", callOf("answer", "cand"), callOf("grade", "judge-m")).map(numbers(1)), {
        definitionDigest: "a",
        poolAliases: { llm: "llm" },
        variables: { model: { model: "cand", price: { promptPer1k: 2.5, completionPer1k: 5 } } }
      })
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"]), ledger)
      yield* runStudy(yield* suiteOf([member]), handle)
      const store = yield* Store
      const attempts = yield* Effect.map(Stream.runCollect(store.streamAttempts({})), Chunk.toReadonlyArray)
      assert.deepStrictEqual(
        attempts.map((a) => [a.taskName, a.model, a.costUsd]).sort((x, y) => String(x[0]).localeCompare(String(y[0]))),
        [["answer", "cand", 0.5], ["grade", "judge-m", 1]]
      )
      assert.strictEqual((yield* ledger.usage(["a"])).get("a")!.costUsd, 1.5)
    })).pipe(Effect.provide(env({ pricing: { "judge-m": { inputPer1M: 5000, outputPer1M: 10000 } } }))))

  // a call that reports at its end (as a model call does): 0.5 USD after 10 s of work
  const lateReport = Task.make("call", { resource: "llm" }, (n: number, ctx) =>
    Effect.scoped(Effect.gen(function*() {
      const lease = yield* Effect.orDie(ctx.acquire())
      yield* Effect.sleep("10 seconds")
      yield* lease.report({ ok: true, usage: { tokens: 150, promptTokens: 100, completionTokens: 50 } })
      return n
    })))
  const lateMember = (n: number) =>
    Suite.member("a", () => Pipeline.make("calls", lateReport).map(numbers(n)), { definitionDigest: "a", poolAliases: { llm: "llm" } })

  // issue 16, F1: a budget of about N pipelines' cost runs about N pipelines, whatever the
  // concurrency, and never stops a trial for good while pipelines of it still run
  it.effect("concurrency 4: a budget of 10 pipelines' cost runs 10 of 40 pipelines, spending no more than the budget", () =>
    Effect.scoped(Effect.gen(function*() {
      // 40 pipelines of 0.5 USD each (reported at the call's end), a budget of 5.0: pipelines of
      // equal cost never pass it (the bound is 0); the gate says "not now" while 4 run
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { costUsd: 5 } }), ledger)
      const report = yield* runStudy(yield* suiteOf([lateMember(40)]), handle)
      const usage = (yield* handle.trialUsage).get("a")!
      assert.strictEqual(report.run.stats.byState.succeeded, 10)
      assert.strictEqual(usage.costUsd, 5)
      assert.strictEqual((yield* handle.exhausted).get("a"), "costUsd")
      assert.strictEqual(report.members[0]!.admitted, 10, "the eleventh is never submitted")
      assert.isTrue(report.members[0]!.admitRefused)
      // 4.25: 8 pipelines (4.0); the ninth would pass it, with nothing running: stopped, and the
      // reason says the figures
      const ledger2 = yield* StudyControl.memoryLedger()
      const h2 = yield* StudyControl.control(studyOf(["b"], { perTrial: { costUsd: 4.25 } }), ledger2)
      const member = Suite.member("b", () => Pipeline.make("calls", lateReport).map(numbers(40)), { definitionDigest: "b", poolAliases: { llm: "llm" } })
      const r2 = yield* runStudy(yield* suiteOf([member]), h2)
      assert.strictEqual(r2.run.stats.byState.succeeded, 8)
      assert.strictEqual((yield* h2.trialUsage).get("b")!.costUsd, 4)
      assert.strictEqual(
        (yield* h2.exhaustedNotes).get("b"),
        "has no room for another pipeline: $4.00 used of $4.25; the next is estimated at $0.500, the mean of 8 ended pipelines"
      )
    })).pipe(Effect.provide(env({ concurrency: 4, maxAdmitted: 8 }))))

  // issue 16, N1: the study's total is a gate on every trial's pipelines, not only on a trial's
  // start: two trials side by side never spend it past its limit
  it.effect("the study's total costUsd across 2 trials running side by side: 10 pipelines of 0.5 USD for 5 USD, then the budget stop", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a", "b", "c"], { total: { costUsd: 5 } }), ledger, { trialConcurrency: 2 })
      const member = (id: string) =>
        Suite.member(id, () => Pipeline.make("calls", lateReport).map(numbers(20)), { definitionDigest: id, poolAliases: { llm: "llm" } })
      const report = yield* runStudy(yield* suiteOf([member("a"), member("b"), member("c")]), handle)
      const usage = yield* handle.trialUsage
      const spent = [...usage.values()].reduce((a, u) => a + u.costUsd, 0)
      // pipelines of equal cost never pass it (the bound is 0)
      assert.strictEqual(spent, 5)
      assert.strictEqual(report.run.stats.byState.succeeded, 10)
      assert.deepStrictEqual(startedOf(report), ["a", "b"], "c never starts")
      const fired = (yield* handle.fired)!
      assert.strictEqual(fired.condition.when, "budget")
      assert.strictEqual(fired.reason, "the study's total cost budget is spent: $5.00 used of $5.00")
      const exhausted = yield* handle.exhausted
      assert.strictEqual(exhausted.get("a"), "costUsd")
      assert.strictEqual(exhausted.get("b"), "costUsd")
      assert.match((yield* handle.exhaustedNotes).get("a")!, /^the study's total cost budget is spent: \$5\.00 used of \$5\.00/)
    })).pipe(Effect.provide(env({ concurrency: 4, maxAdmitted: 8 }))))

  it.effect("the study's total tokens with a pipeline that does not fit: not now while others run, then stopped with the figures", () =>
    Effect.scoped(Effect.gen(function*() {
      // 150 tokens a pipeline; 1000 tokens fit 6 (900): the seventh would pass it
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a", "b"], { total: { tokens: 1000 } }), ledger, { trialConcurrency: 2 })
      const member = (id: string) =>
        Suite.member(id, () => Pipeline.make("calls", lateReport).map(numbers(20)), { definitionDigest: id, poolAliases: { llm: "llm" } })
      const report = yield* runStudy(yield* suiteOf([member("a"), member("b")]), handle)
      const usage = yield* handle.trialUsage
      assert.strictEqual([...usage.values()].reduce((a, u) => a + u.tokens, 0), 900)
      assert.strictEqual(report.run.stats.byState.succeeded, 6)
      const fired = (yield* handle.fired)!
      assert.strictEqual(fired.condition.when, "budget")
      assert.strictEqual(fired.reason, "the study's total tokens budget has no room for another pipeline: 900 used of 1000; the next is estimated at 150")
    })).pipe(Effect.provide(env({ concurrency: 4, maxAdmitted: 8 }))))

  it.effect("pipelines of uneven cost: the overshoot stays within the bound (the pipelines outstanding × what each costs past the mean)", () =>
    Effect.scoped(Effect.gen(function*() {
      // pipeline n costs 0.5 (even n) or 1.5 (odd n): mean 1.0; budget 10
      const uneven = Task.make("call", { resource: "llm" }, (n: number, ctx) =>
        Effect.scoped(Effect.gen(function*() {
          const lease = yield* Effect.orDie(ctx.acquire())
          yield* Effect.sleep("10 seconds")
          const k = n % 2 === 0 ? 1 : 3
          yield* lease.report({ ok: true, usage: { tokens: 150 * k, promptTokens: 100 * k, completionTokens: 50 * k } })
          return n
        })))
      const member = Suite.member("a", () => Pipeline.make("calls", uneven).map(numbers(40)), { definitionDigest: "a", poolAliases: { llm: "llm" } })
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { costUsd: 10 } }), ledger)
      const report = yield* runStudy(yield* suiteOf([member]), handle)
      const usage = (yield* handle.trialUsage).get("a")!
      assert.strictEqual((yield* handle.exhausted).get("a"), "costUsd")
      // at most maxAdmitted (4) pipelines outstanding at the last submission, each at most
      // 1.5 − 0.5 past a mean of at least 0.5: the bound is 4 × 1.0
      assert.isAtMost(usage.costUsd, 10 + 4 * 1.0)
      assert.isAtLeast(report.run.stats.byState.succeeded ?? 0, 8, "about budget / mean pipelines ran, not 1–2")
    })).pipe(Effect.provide(env({ concurrency: 4, maxAdmitted: 4 }))))

  it.effect("before any pipeline ended the trial runs one at a time (a plan's estimate is no prior), then by its mean", () =>
    Effect.scoped(Effect.gen(function*() {
      // the estimate says 5 USD a call (10 × the real cost, as a judge's maxTokens did in issue
      // 16 F1): before, the first gate refused the whole trial; now the first pipeline runs alone,
      // then the mean of 0.5 lets the rest run: 4 pipelines (2.0 of 2.25)
      const ledger = yield* StudyControl.memoryLedger()
      const input = studyOf(["a"], { perTrial: { costUsd: 2.25 } })
      const handle = yield* StudyControl.control({
        ...input,
        trials: input.trials.map((t) => ({ ...t, estimate: { costUsd: 5 } }))
      }, ledger)
      const fiber = yield* Effect.fork(Suite.run(yield* suiteOf([lateMember(12)]), { window: handle.window }))
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual((yield* handle.trialUsage).get("a")!.calls, 1, "one pipeline at a time before the first ended")
      const report = yield* drive(fiber)
      assert.strictEqual(report.run.stats.byState.succeeded, 4)
      assert.strictEqual((yield* handle.trialUsage).get("a")!.costUsd, 2)
    })).pipe(Effect.provide(env({ concurrency: 8, maxAdmitted: 8 }))))

  // two calls per pipeline, each reporting 0.5 USD at its end (10 s of work each)
  const secondCall = Task.make("call2", { resource: "llm" }, (n: number, ctx) =>
    Effect.scoped(Effect.gen(function*() {
      const lease = yield* Effect.orDie(ctx.acquire())
      yield* Effect.sleep("10 seconds")
      yield* lease.report({ ok: true, usage: { tokens: 150, promptTokens: 100, completionTokens: 50 } })
      return n
    })))
  const twoCalls = Pipeline.make("calls", lateReport, secondCall)
  const twoCallMember = (n: number) =>
    Suite.member("a", () => twoCalls.map(numbers(n)), { definitionDigest: "a", poolAliases: { llm: "llm" } })

  it.effect("multi-call pipelines at concurrency 8: the mean is per pipeline, whatever calls it makes", () =>
    Effect.scoped(Effect.gen(function*() {
      // 1 USD per pipeline (two calls), a budget of 3.25: 3 pipelines, 3.0
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { costUsd: 3.25 } }), ledger)
      const report = yield* runStudy(yield* suiteOf([twoCallMember(12)]), handle)
      assert.strictEqual(report.run.stats.byState.succeeded, 3)
      assert.strictEqual((yield* handle.trialUsage).get("a")!.costUsd, 3)
    })).pipe(Effect.provide(env({ concurrency: 8, maxAdmitted: 8 }))))

  it.effect("a budget smaller than one pipeline: that pipeline runs, nothing more, and the reason says the figures", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { costUsd: 0.3 } }), ledger)
      const report = yield* runStudy(yield* suiteOf([lateMember(12)]), handle)
      assert.strictEqual(report.run.stats.byState.succeeded, 1)
      assert.strictEqual((yield* handle.exhausted).get("a"), "costUsd")
      assert.strictEqual((yield* handle.exhaustedNotes).get("a"), "is spent: $0.500 used of $0.300")
    })).pipe(Effect.provide(env({ concurrency: 4, maxAdmitted: 4 }))))

  it.effect("a resume of a trial its cost budget stopped starts nothing more (the mean comes from the pipelines stored ended)", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const suite = yield* suiteOf([lateMember(12)])
      const input = studyOf(["a"], { perTrial: { costUsd: 2.25 } })
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* StudyControl.control(input, ledger)
        return yield* runStudy(suite, h)
      }))
      assert.strictEqual(first.run.stats.byState.succeeded, 4)
      const again = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* StudyControl.control({ ...input, trials: input.trials.map((t) => ({ ...t, endedBefore: 4 })) }, ledger)
        const r = yield* runStudy(suite, h)
        assert.strictEqual((yield* h.exhausted).get("a"), "costUsd")
        assert.strictEqual(
          (yield* h.exhaustedNotes).get("a"),
          "has no room for another pipeline: $2.00 used of $2.25; the next is estimated at $0.500, the mean of 4 ended pipelines"
        )
        return r
      }))
      assert.strictEqual(again.run.stats.byState.succeeded ?? 0, 0)
      assert.strictEqual((yield* ledger.usage(["a"])).get("a")!.costUsd, 2)
    })).pipe(Effect.provide(env({ concurrency: 4, maxAdmitted: 4 }))))

  it.effect("one under the limit: the pipeline at limit-1 still starts (calls: 4 → 4 run)", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 4 } }), ledger)
      const report = yield* runStudy(yield* suiteOf([trial("a", 6)]), handle)
      assert.strictEqual(report.run.stats.byState.succeeded, 4)
    })).pipe(Effect.provide(env())))

  it.effect("summed across resumes: a resume with the same budget starts nothing more; more budget runs the skipped rest", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const suite = yield* suiteOf([trial("a", 5)])
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 2 } }), ledger)
        return yield* runStudy(suite, h)
      }))
      assert.strictEqual(first.run.stats.byState.succeeded, 2)
      // the same budget again: the two calls recorded count, nothing runs
      const again = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 2 } }), ledger)
        const r = yield* runStudy(suite, h)
        assert.strictEqual((yield* h.trialUsage).get("a")!.calls, 2)
        return r
      }))
      assert.strictEqual(again.run.stats.byState.succeeded ?? 0, 0)
      const rows = (yield* rowsOf(["a"], 5)).get("a")!
      assert.strictEqual(rows.filter((r) => r.state === "succeeded").length, 2)
      // budget left: the pending pipelines run now
      const more = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 5 } }), ledger)
        return yield* runStudy(suite, h)
      }))
      assert.strictEqual(more.run.stats.byState.succeeded, 3)
      assert.strictEqual((yield* ledger.usage(["a"])).get("a")!.calls, 5)
    })).pipe(Effect.provide(env())))

  it.effect("the ledger holds what happened at any moment (what a kill -9 leaves): a call once it reported, with its tokens at once", () =>
    Effect.gen(function*() {
      // a call whose answer takes 10 s: acquire, wait, report, then 10 s more of work
      const late = Task.make("late", { resource: "llm" }, (n: number, ctx) =>
        Effect.scoped(Effect.gen(function*() {
          const lease = yield* Effect.orDie(ctx.acquire())
          yield* Effect.sleep("10 seconds")
          yield* lease.report({ ok: true, usage: { tokens: 150, promptTokens: 100, completionTokens: 50 } })
          yield* Effect.sleep("10 seconds")
          return n
        })))
      const suite = yield* suiteOf([Suite.member("a", () => Pipeline.make("late", late).map(numbers(2)), { definitionDigest: "a", poolAliases: { llm: "llm" } })])
      const ledger = yield* StudyControl.memoryLedger()
      const recorded = () => Effect.map(ledger.usage(["a"]), (u) => u.get("a") ?? StudyControl.emptyUsage)
      yield* Effect.scoped(Effect.gen(function*() {
        const handle = yield* StudyControl.control(studyOf(["a"]), ledger, { pollMs: 3000 })
        const fiber = yield* Effect.fork(Suite.run(suite, { window: handle.window }))
        yield* TestClock.adjust("5 seconds")
        // acquired, not answered yet: a kill now must not leave a call behind (the attempt runs
        // again on resume and is counted then)
        assert.strictEqual((yield* recorded()).calls, 0)
        assert.strictEqual((yield* handle.trialUsage).get("a")!.calls, 1, "the start gate counts it already")
        yield* TestClock.adjust("5500 millis")
        // answered at 10 s: call, tokens and cost are in the ledger before the task goes on
        const at = yield* recorded()
        assert.deepStrictEqual([at.calls, at.tokens, at.costUsd], [1, 150, 0.5])
        yield* drive(fiber)
        yield* handle.finish
      }))
      const end = yield* recorded()
      assert.deepStrictEqual([end.calls, end.tokens, end.costUsd, end.timeMs], [2, 300, 1, 40_000])
    }).pipe(Effect.provide(env())))

  it.effect("on a SQLite store: skipped pipelines are left pending, and a resume with budget left runs them", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-study-control-"))
      const sqliteEnv = Layer.provideMerge(
        Layer.merge(Runner.layer({ handleSignals: false, concurrency: 1, maxAdmitted: 2 }), fakeCatalog("study")),
        Layer.mergeAll(
          SqliteStore.layer({ filename: nodePath.join(dir, "state.db") }),
          Pool.layer([Pool.make("llm", [Resource.make("api", { id: "k", capacity: 8 })])])
        )
      )
      yield* Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const suite = yield* suiteOf([trial("a", 5)])
        const first = yield* Effect.scoped(Effect.gen(function*() {
          const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 2 } }), ledger)
          return yield* runStudy(suite, h)
        }))
        assert.strictEqual(first.run.stats.byState.succeeded, 2)
        assert.isAtLeast(first.run.stats.byState.pending ?? 0, 1)
        const more = yield* Effect.scoped(Effect.gen(function*() {
          const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 5 } }), ledger)
          return yield* runStudy(suite, h)
        }))
        assert.strictEqual(more.run.stats.byState.succeeded, 3)
        const rows = (yield* rowsOf(["a"], 5)).get("a")!
        assert.deepStrictEqual(rows.map((r) => r.state), Array(5).fill("succeeded"))
      })).pipe(Effect.provide(sqliteEnv), Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))))
    }))

  it.effect("on a SQLite store, a pipeline whose first task is synchronous: a skipped one is stored pending (its admission rides in the skip's commit)", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-study-control-"))
      const sqliteEnv = Layer.provideMerge(
        Layer.merge(Runner.layer({ handleSignals: false, concurrency: 1, maxAdmitted: 2 }), fakeCatalog("study")),
        Layer.mergeAll(
          SqliteStore.layer({ filename: nodePath.join(dir, "state.db") }),
          Pool.layer([Pool.make("llm", [Resource.make("api", { id: "k", capacity: 8 })])])
        )
      )
      const prepared = Pipeline.fromTasks("prepared", [Task.sync("prep", (n: number) => n), call])
      yield* Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const suite = yield* suiteOf([
          Suite.member("a", () => prepared.map(numbers(5)), { definitionDigest: "a", poolAliases: { llm: "llm" } })
        ])
        const first = yield* Effect.scoped(Effect.gen(function*() {
          const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 2 } }), ledger)
          return yield* runStudy(suite, h)
        }))
        assert.strictEqual(first.run.stats.byState.succeeded, 2)
        const store = yield* Store
        const pids = numbers(5).map((i) => memberPid("a", prepared.bind(i).key))
        const rows = yield* store.getPipelines(pids)
        const skipped = (yield* skippedFor("budget_exhausted")).map((e) => e.pipelineId)
        assert.isAtLeast(skipped.length, 1)
        for (const id of skipped) assert.strictEqual(rows.get(id!)?.state, "pending", "a skipped pipeline's row exists, pending")
      })).pipe(Effect.provide(sqliteEnv), Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))))
    }))

  it.effect("a pipeline that declares control is gated the same way, and resumes intact with budget left", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const controlled = Pipeline.fromTasks("ctl", [call, Task.sync("after", (n: number) => n + 100)], {
        control: { edges: { call: ["end"] } }
      })
      const member = Suite.member("a", () => controlled.map(numbers(3)), {
        definitionDigest: "a",
        poolAliases: { llm: "llm" }
      })
      const suite = yield* suiteOf([member])
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 1 } }), ledger)
        return yield* runStudy(suite, h)
      }))
      assert.strictEqual(first.run.stats.byState.succeeded, 1)
      assert.strictEqual(first.run.stats.byState.failed ?? 0, 0)
      assert.isAtLeast((yield* skippedFor("budget_exhausted")).length, 1)
      const more = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 3 } }), ledger)
        return yield* runStudy(suite, h)
      }))
      assert.strictEqual(more.run.stats.byState.succeeded, 2)
      assert.strictEqual(more.run.stats.byState.failed ?? 0, 0)
    })).pipe(Effect.provide(env())))

  it.effect("on a SQLite store, a control pipeline whose first task is synchronous: a skipped one is stored pending and resumes intact", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-study-control-"))
      const sqliteEnv = Layer.provideMerge(
        Layer.merge(Runner.layer({ handleSignals: false, concurrency: 1, maxAdmitted: 2 }), fakeCatalog("study")),
        Layer.mergeAll(
          SqliteStore.layer({ filename: nodePath.join(dir, "state.db") }),
          Pool.layer([Pool.make("llm", [Resource.make("api", { id: "k", capacity: 8 })])])
        )
      )
      const controlled = Pipeline.fromTasks("ctl-prep", [Task.sync("prep", (n: number) => n), call, Task.sync("after", (n: number) => n + 100)], {
        control: { edges: { call: ["end"] } }
      })
      yield* Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const suite = yield* suiteOf([
          Suite.member("a", () => controlled.map(numbers(4)), { definitionDigest: "a", poolAliases: { llm: "llm" } })
        ])
        const first = yield* Effect.scoped(Effect.gen(function*() {
          const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 1 } }), ledger)
          return yield* runStudy(suite, h)
        }))
        const store = yield* Store
        const pids = numbers(4).map((i) => memberPid("a", controlled.bind(i).key))
        const skipped = (yield* skippedFor("budget_exhausted")).map((e) => e.pipelineId)
        // (the gate is asked before the synchronous task, so the next pipeline may pass it
        // before the first one's call: a running pipeline can take a trial past its limit)
        assert.isAtLeast(skipped.length, 1)
        // every admitted pipeline either ran or was skipped; a spec the trial had not submitted
        // when its budget was spent is not submitted at all (the window's mayAdmit said no;
        // with chunks admitted as they come, issue 16, fewer are read ahead)
        assert.strictEqual(first.run.stats.byState.succeeded + skipped.length, first.members[0]!.admitted)
        assert.isAtMost(first.members[0]!.admitted, 4)
        const rows = yield* store.getPipelines(pids)
        for (const id of skipped) assert.strictEqual(rows.get(id!)?.state, "pending", "a skipped pipeline's row exists, pending")
        const more = yield* Effect.scoped(Effect.gen(function*() {
          const h = yield* StudyControl.control(studyOf(["a"], { perTrial: { calls: 4 } }), ledger)
          return yield* runStudy(suite, h)
        }))
        assert.strictEqual(more.run.stats.byState.failed ?? 0, 0)
        const after = yield* store.getPipelines(pids)
        assert.deepStrictEqual(pids.map((p) => after.get(p)?.state), Array(4).fill("succeeded"))
      })).pipe(Effect.provide(sqliteEnv), Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))))
    }))

  it.effect("every trial gets the same budget: a trial that leads gets no more", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger({ a: { calls: 2, tokens: 0, costUsd: 0, timeMs: 0 } })
      const handle = yield* StudyControl.control(studyOf(["a", "b"], { perTrial: { calls: 3 } }), ledger, {
        trialConcurrency: 2
      })
      const report = yield* runStudy(yield* suiteOf([trial("a", 5), trial("b", 5)]), handle, {}, Effect.void)
      const usage = yield* handle.trialUsage
      assert.strictEqual(usage.get("a")!.calls, 3)
      assert.strictEqual(usage.get("b")!.calls, 3)
      assert.strictEqual(report.run.stats.byState.succeeded, 4, "a: 1 more, b: 3")
    })).pipe(Effect.provide(env())))

  it.effect("time: reaching the limit also interrupts the trial's running pipeline (resumable)", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a"], { perTrial: { timeMs: 25_000 } }), ledger)
      const report = yield* runStudy(yield* suiteOf([trial("a", 6)]), handle)
      assert.strictEqual(report.run.stats.byState.succeeded, 2)
      assert.strictEqual(report.run.stats.byState.interrupted, 1, "the third, cut at 25 s")
      const rows = (yield* rowsOf(["a"], 6)).get("a")!
      assert.strictEqual(rows.filter((r) => r.state === "pending").length, 1, "the fourth: admitted, not started")
      assert.strictEqual(report.run.stats.byState.failed ?? 0, 0)
      assert.strictEqual((yield* handle.trialUsage).get("a")!.timeMs, 25_000)
      const cancelled = yield* Effect.flatMap(Store, (s) => s.events({ kind: "pipeline.cancelled" }))
      assert.strictEqual(cancelled.length, 1)
      assert.deepStrictEqual(cancelled[0]!.data, { reason: "budget_exhausted" })
    })).pipe(Effect.provide(env())))

  it.effect("config: a costUsd budget without a price, a budget stop without a total, a bad deadline are refused by path", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const unpriced = yield* Effect.exit(StudyControl.control({
        trials: [{ trialId: "a", price: null }],
        budget: { perTrial: { costUsd: 1 }, total: {} },
        stop: []
      }, ledger))
      assert.include(JSON.stringify(unpriced), "budget.perTrial.costUsd")
      const noTotal = yield* Effect.exit(StudyControl.control(studyOf(["a"], {}, [{ when: "budget" }]), ledger))
      assert.include(JSON.stringify(noTotal), "stop[0]")
      const badDate = yield* Effect.exit(
        StudyControl.control(studyOf(["a"], {}, [{ when: "deadline", at: "tomorrow-ish" }]), ledger)
      )
      assert.include(JSON.stringify(badDate), "stop[0].at")
      const noSettle = yield* Effect.exit(
        StudyControl.control(studyOf(["a"], {}, [{ when: "successfulTrials", count: 1 }]), ledger)
      )
      assert.include(JSON.stringify(noSettle), "trialSucceeded")
    })))
})

describe("usage meters", () => {
  it("tokens and cost of a lease report: split, total only (the higher price), no price", () => {
    const price = { promptPer1k: 1, completionPer1k: 3 }
    assert.deepStrictEqual(
      StudyControl.usageOfReport({ usage: { tokens: 300, promptTokens: 200, completionTokens: 100 } }, price),
      { tokens: 300, costUsd: 0.5, unpriced: 0 }
    )
    assert.deepStrictEqual(StudyControl.usageOfReport({ usage: { tokens: 1000 } }, price), { tokens: 1000, costUsd: 3, unpriced: 0 })
    // no price and no priced cost: the call's cost is unknown, counted as unpriced (not $0)
    assert.deepStrictEqual(StudyControl.usageOfReport({ usage: { promptTokens: 10, completionTokens: 5 } }, null), {
      tokens: 15,
      costUsd: 0,
      unpriced: 1
    })
    // a report the run priced is priced even without a model price
    assert.deepStrictEqual(StudyControl.usageOfReport({ usage: { tokens: 15 }, costUsd: 0.002 }, null), { tokens: 15, costUsd: 0.002, unpriced: 0 })
    assert.deepStrictEqual(StudyControl.usageOfReport({ ok: true }, price), { tokens: 0, costUsd: 0, unpriced: 0 })
    assert.deepStrictEqual(StudyControl.usageOfReport({ ok: true }, null), { tokens: 0, costUsd: 0, unpriced: 0 })
  })

  it("a trial's price comes from its model profile value", () => {
    assert.deepStrictEqual(
      StudyControl.priceOf({
        temperature: 0.5,
        model: { pool: "llm", model: "small", price: { promptPer1k: 0.5, completionPer1k: 1.5 } }
      }),
      { promptPer1k: 0.5, completionPer1k: 1.5 }
    )
    assert.isNull(StudyControl.priceOf({ model: { pool: "llm", model: "small" }, list: [1] }))
  })

  it("reached: the first figure at its limit; dollars summed in binary fractions still reach it exactly", () => {
    const u = (o: Partial<StudyControl.TrialUsage>) => ({ ...StudyControl.emptyUsage, ...o })
    assert.isUndefined(StudyControl.reached(u({ calls: 2 }), { calls: 3 }))
    assert.strictEqual(StudyControl.reached(u({ calls: 3 }), { calls: 3 }), "calls")
    assert.strictEqual(StudyControl.reached(u({ calls: 3, tokens: 10 }), { tokens: 10, calls: 3 }), "calls")
    const cost = [0.1, 0.1, 0.1].reduce((a, b) => a + b, 0) // 0.30000000000000004
    const under = [0.1, 0.2, 0.3, 0.4].reduce((a, b) => a + b, 0) - 1e-15 // 0.9999999999999999
    assert.strictEqual(StudyControl.reached(u({ costUsd: cost }), { costUsd: 0.3 }), "costUsd")
    assert.strictEqual(StudyControl.reached(u({ costUsd: under }), { costUsd: 1 }), "costUsd")
    assert.isUndefined(StudyControl.reached(u({ costUsd: 0.99 }), { costUsd: 1 }))
  })

  it.effect("wall time counts only while a trial is active, and is written to the ledger", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a", "b"]), ledger, { trialConcurrency: 1 })
      yield* runStudy(yield* suiteOf([trial("a", 2), trial("b", 1)]), handle)
      const usage = yield* handle.trialUsage
      // a: 0-20 s; b starts when a ended (its last pipeline, not only its last submission:
      // issue 16, t16c) and ends with its pipeline (20-30 s)
      assert.strictEqual(usage.get("a")!.timeMs, 20_000)
      assert.strictEqual(usage.get("b")!.timeMs, 10_000)
      yield* handle.finish
      assert.deepStrictEqual((yield* ledger.usage(["a"])).get("a"), { calls: 2, tokens: 300, costUsd: 1, timeMs: 20_000 })
    })).pipe(Effect.provide(env())))
})

// ---------------------------------------------------------------------------------------------
// Stop conditions
// ---------------------------------------------------------------------------------------------

/**
 * Four trials of two pipelines each (10 s each), one worker. With a window of one trial, a
 * runs 0–20 s and b starts when a ended; with a window of two, a and b alternate on the
 * worker (a1, b1, a2, b2) and a ends at 30 s.
 */
const four = (variables: Record<string, Record<string, Json>> = {}) =>
  suiteOf(["a", "b", "c", "d"].map((id) => trial(id, 2, variables[id] ?? {})))

const succeededOf = (finished: Map<string, number>) => (id: string) => Effect.succeed((finished.get(id) ?? 0) === 2)
const tally = (finished: Map<string, number>): Runner.OnPipelineFinished => (record) =>
  Effect.sync(() => {
    if (record.state === "succeeded") finished.set(record.experimentId!, (finished.get(record.experimentId!) ?? 0) + 1)
  })

const startedOf = (report: Suite.SuiteReport) => report.members.filter((m) => m.started).map((m) => m.experimentId)

describe("stop conditions", () => {
  for (const running of ["drain", "cancel"] as const) {
    it.effect(`successfulTrials (${running})`, () =>
      Effect.scoped(Effect.gen(function*() {
        // a window of 2 (a trial holds its place until its last pipeline ended): a and b run
        // side by side on the one worker (a1, b1, a2, b2: 10 s each); a ends at 30 s
        const finished = new Map<string, number>()
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], {}, [{ when: "successfulTrials", count: 1, running }]),
          ledger,
          { trialConcurrency: 2, trialSucceeded: succeededOf(finished) }
        )
        const report = yield* runStudy(yield* four(), handle, { onPipelineFinished: tally(finished) })
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.condition.when, "successfulTrials")
        assert.strictEqual(fired.running, running)
        assert.strictEqual(fired.at, 30_000, "when a ended")
        assert.include(fired.reason, "1 trial succeeded")
        assert.deepStrictEqual(yield* ledger.stops, [fired])
        assert.deepStrictEqual(startedOf(report), ["a", "b"], "no trial starts after it fired")
        if (running === "drain") {
          assert.isTrue(report.members.find((m) => m.experimentId === "c")!.startRefused)
          // the drain left c and d not started: the run closes interrupted (tester17af F5)
          assert.strictEqual(report.run.status, "interrupted")
          assert.strictEqual(report.run.stopReason, "study_stop:successfulTrials")
          assert.strictEqual(finished.get("b"), 2, "the started trial finished")
        } else {
          assert.strictEqual(report.run.status, "interrupted")
          assert.strictEqual(report.run.stopReason, "study_stop:successfulTrials")
          assert.isBelow(finished.get("b") ?? 0, 2, "the running trial was cut")
          assert.strictEqual(report.run.stats.byState.failed ?? 0, 0)
        }
      })).pipe(Effect.provide(env())))

    it.effect(`successfulTrials (${running}) with a settlement slower than the trials: no trial starts before it is known`, () =>
      Effect.scoped(Effect.gen(function*() {
        // the study's settlement reads the store; here it takes 25 s (TestClock), longer than a
        // trial: a ends at 30 s (window of 2, as above) and is known to have succeeded at 55 s;
        // c would start at 30 s
        const finished = new Map<string, number>()
        const ledger = yield* StudyControl.memoryLedger()
        const slow = (id: string) => Effect.delay(succeededOf(finished)(id), "25 seconds")
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], {}, [{ when: "successfulTrials", count: 1, running }]),
          ledger,
          { trialConcurrency: 2, trialSucceeded: slow }
        )
        const report = yield* runStudy(yield* four(), handle, { onPipelineFinished: tally(finished) })
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.condition.when, "successfulTrials")
        assert.strictEqual(fired.at, 55_000, "when a's settlement was known")
        assert.deepStrictEqual(startedOf(report), ["a", "b"], "c waited for a's settlement, then was refused")
      })).pipe(Effect.provide(env())))

    it.effect(`metricThreshold (${running}): a trial's reported metric reaches it`, () =>
      Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], {}, [{ when: "metricThreshold", metric: "accuracy", op: ">=", value: 0.97, running }]),
          ledger,
          { trialConcurrency: 1 }
        )
        const suite = yield* four({ a: { accuracy: 0.5 }, b: { accuracy: 0.98 }, c: { accuracy: 0.99 } })
        const report = yield* runStudy(suite, handle)
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.condition.when, "metricThreshold")
        assert.strictEqual(fired.reason, "trial b: accuracy 0.98 >= 0.97")
        assert.strictEqual(fired.at, 40_000, "when b ended, not at its first pipeline's report")
        assert.includeMembers(startedOf(report), ["a", "b"])
        assert.notInclude(startedOf(report), "d")
        // drained or cancelled, the stop left d not started: the run closes interrupted (F5)
        assert.strictEqual(report.run.status, "interrupted")
        assert.strictEqual(report.run.stopReason, "study_stop:metricThreshold")
      })).pipe(Effect.provide(env())))

    it.effect(`metricThreshold (${running}): a running trial's partial average never fires it`, () =>
      Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], {}, [{ when: "metricThreshold", metric: "accuracy", op: ">=", value: 0.97, running }]),
          ledger,
          { trialConcurrency: 1 }
        )
        // b's first pipeline reports 1 (a running average of 1), its second 0.5: b ends at 0.75
        const report = yield* runStudy(yield* four({ b: { accuracy: [1, 0.5] } }), handle)
        assert.isNull(yield* handle.fired)
        assert.deepStrictEqual(startedOf(report), ["a", "b", "c", "d"])
        assert.strictEqual(report.run.stats.byState.succeeded, 8)
      })).pipe(Effect.provide(env())))

    it.effect(`metricThreshold (${running}): compares the trial's metric as stored (trialMetric), not what its tasks reported`, () =>
      Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const asked: Array<string> = []
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], {}, [{ when: "metricThreshold", metric: "accuracy", op: "<=", value: 0.3, running }]),
          ledger,
          {
            trialConcurrency: 1,
            // the store's value: 0.25 for b only (its tasks reported 1 throughout)
            trialMetric: (id, name) => Effect.sync(() => (asked.push(`${id}:${name}`), id === "b" ? 0.25 : 0.9))
          }
        )
        const report = yield* runStudy(yield* four({ a: { accuracy: 0.1 }, b: { accuracy: 1 } }), handle)
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.reason, "trial b: accuracy 0.25 <= 0.3", "a's reported 0.1 is not its stored 0.9")
        assert.strictEqual(fired.at, 40_000)
        assert.deepStrictEqual(asked.slice(0, 2), ["a:accuracy", "b:accuracy"], "asked once per ended trial")
        assert.notInclude(startedOf(report), "d")
      })).pipe(Effect.provide(env())))

    it.effect(`budget, the study total (${running})`, () =>
      Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], { total: { calls: 3 } }, [{ when: "budget", running }]),
          ledger,
          { trialConcurrency: 1 }
        )
        const report = yield* runStudy(yield* four(), handle)
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.condition.when, "budget")
        assert.include(fired.reason, "total calls budget is spent: 3 used of 3")
        assert.strictEqual(fired.at, 20_000, "b's first call")
        assert.deepStrictEqual(startedOf(report), ["a", "b"])
        const succeeded = report.run.stats.byState.succeeded ?? 0
        // the total gates every pipeline (issue 16, N1): b's second pipeline never starts, even
        // with drain (it would pass the total); with cancel b's first one is cut too
        if (running === "drain") assert.strictEqual(succeeded, 3)
        else assert.strictEqual(succeeded, 2)
        assert.strictEqual([...(yield* handle.trialUsage).values()].reduce((a, u) => a + u.calls, 0), 3)
      })).pipe(Effect.provide(env())))

    it.effect(`deadline (${running})`, () =>
      Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], {}, [{ when: "deadline", at: "1970-01-01T00:00:25Z", running }]),
          ledger,
          { trialConcurrency: 1 }
        )
        const report = yield* runStudy(yield* four(), handle)
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.condition.when, "deadline")
        assert.strictEqual(fired.at, 25_000)
        assert.strictEqual(fired.reason, "the deadline 1970-01-01T00:00:25.000Z passed")
        assert.deepStrictEqual(startedOf(report), ["a", "b"])
        if (running === "drain") assert.strictEqual(report.run.stats.byState.succeeded, 4)
        else {
          assert.strictEqual(report.run.stats.byState.succeeded, 2)
          assert.strictEqual(report.run.stats.byState.interrupted, 1, "b's first pipeline, resumable")
        }
      })).pipe(Effect.provide(env())))

    it.effect(`manual: a stop request in the ledger, picked up within a poll (${running})`, () =>
      Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(
          studyOf(["a", "b", "c", "d"], {}, [{ when: "manual", running: "drain" }]),
          ledger,
          { trialConcurrency: 1 }
        )
        const request = Effect.delay(
          ledger.request({ condition: { when: "manual" }, reason: "assay study stop", at: 24_500, running }),
          "24500 millis"
        )
        const report = yield* runStudy(yield* four(), handle, {}, Effect.asVoid(Effect.fork(request)))
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.condition.when, "manual")
        assert.strictEqual(fired.running, running, "the request's running wins")
        assert.strictEqual(fired.reason, "assay study stop")
        assert.strictEqual(fired.at, 25_000, "the next poll (1 s)")
        assert.deepStrictEqual(startedOf(report), ["a", "b"])
        // drained or cancelled, the stop left c and d not started: the run closes interrupted (F5)
        assert.strictEqual(report.run.status, "interrupted")
        assert.strictEqual(report.run.stopReason, "study_stop:manual")
      })).pipe(Effect.provide(env())))
  }

  it.effect("manual: Ctrl-C drains first, a second Ctrl-C cancels", () =>
    Effect.gen(function*() {
      const test = Signals.makeTest()
      yield* Effect.scoped(Effect.gen(function*() {
        const ledger = yield* StudyControl.memoryLedger()
        const handle = yield* StudyControl.control(studyOf(["a", "b", "c", "d"]), ledger, {
          trialConcurrency: 1,
          signals: true
        })
        const signals = Effect.zipRight(
          Effect.delay(test.send("SIGINT"), "25 seconds"),
          Effect.delay(test.send("SIGINT"), "5 seconds")
        )
        const report = yield* runStudy(yield* four(), handle, {}, Effect.asVoid(Effect.fork(signals)))
        const fired = (yield* handle.fired)!
        assert.strictEqual(fired.condition.when, "manual")
        assert.strictEqual(fired.running, "drain")
        assert.strictEqual(fired.reason, "SIGINT received")
        assert.strictEqual(fired.at, 25_000)
        assert.deepStrictEqual(startedOf(report), ["a", "b"])
        assert.strictEqual(report.run.status, "interrupted", "the second signal stopped the run")
        assert.strictEqual(report.run.stopReason, "study_stop:sigint")
      })).pipe(Effect.provideService(Signals.Signals, test.signals))
    }).pipe(Effect.provide(env())))

  it.effect("successfulTrials counts trials settled succeeded by an earlier run; met before the run: nothing starts", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(
        studyOf(["a", "b", "c"], {}, [{ when: "successfulTrials", count: 2 }]),
        ledger,
        { trialSucceeded: () => Effect.succeed(true), settled: new Map([["a", true], ["b", true]]) }
      )
      const fired = (yield* handle.fired)!
      assert.strictEqual(fired.condition.when, "successfulTrials")
      assert.strictEqual(fired.at, 0)
      const report = yield* runStudy(yield* suiteOf([trial("c", 1)]), handle)
      assert.deepStrictEqual(startedOf(report), [])
      assert.strictEqual(report.run.stats.byState.succeeded ?? 0, 0)
    })).pipe(Effect.provide(env())))

  it.effect("metricThreshold on resume: a settled trial's stored metric counts, the resumed trial's partial average does not", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(
        studyOf(["a", "b", "c"], {}, [{ when: "metricThreshold", metric: "accuracy", op: ">=", value: 0.97 }]),
        ledger,
        {
          trialMetric: (id) => Effect.succeed(id === "a" ? 0.5 : 0.75),
          settled: new Map([["a", true]])
        }
      )
      assert.isNull(yield* handle.fired, "a's stored 0.5 does not meet it")
      // b and c report 1 on their first pipeline (a running average of 1), 0.5 on their second
      const report = yield* runStudy(
        yield* suiteOf([trial("b", 2, { accuracy: [1, 0.5] }), trial("c", 2, { accuracy: [1, 0.5] })]),
        handle
      )
      assert.isNull(yield* handle.fired)
      assert.strictEqual(report.run.stats.byState.succeeded, 4)
    })).pipe(Effect.provide(env())))

  it.effect("allTrialsTerminal: the natural end is recorded as the stop", () =>
    Effect.scoped(Effect.gen(function*() {
      const ledger = yield* StudyControl.memoryLedger()
      const handle = yield* StudyControl.control(studyOf(["a", "b"], {}, [{ when: "allTrialsTerminal" }]), ledger)
      const report = yield* runStudy(yield* suiteOf([trial("a", 1), trial("b", 1)]), handle)
      yield* handle.finish
      assert.strictEqual(report.run.stats.byState.succeeded, 2)
      const fired = (yield* handle.fired)!
      assert.strictEqual(fired.condition.when, "allTrialsTerminal")
      assert.strictEqual(fired.reason, "all 2 trials ended")
    })).pipe(Effect.provide(env())))
})

// ---------------------------------------------------------------------------------------------
// ctx.variables
// ---------------------------------------------------------------------------------------------

describe("ctx.variables", () => {
  it.effect("a trial's tasks see only its own variables, deeply frozen; {} outside studies", () =>
    Effect.gen(function*() {
      const seen = new Map<string, unknown>()
      const probe = Task.sync("probe", (n: number, ctx) => {
        const v = ctx.variables
        let mutated: string
        try {
          ;(v as any).model = "other"
          mutated = "no error"
        } catch (e) {
          mutated = (e as Error).constructor.name
        }
        let deep = "no list"
        try {
          if (Array.isArray(v.list)) (v.list as Array<number>).push(9)
        } catch (e) {
          deep = (e as Error).constructor.name
        }
        seen.set(`${ctx.experimentId}:${n}`, { v: JSON.parse(JSON.stringify(v)), frozen: Object.isFrozen(v), mutated, deep })
        return n
      })
      const t = Pipeline.make("probe", probe)
      const mine = { model: "small", list: [1, 2] }
      const suite = yield* Suite.make({
        id: "study",
        outputRoot: "r",
        experiments: [
          Suite.member("p1-v01-r1", () => t.map([0, 1]), { definitionDigest: "1", variables: mine }),
          Suite.member("p1-v02-r1", () => t.map([0]), { definitionDigest: "2", variables: { model: "large" } })
        ]
      })
      // the caller's object is copied, not frozen nor shared
      mine.model = "changed later"
      mine.list.push(3)
      assert.isFalse(Object.isFrozen(mine))
      yield* Suite.run(suite)
      for (const n of [0, 1]) {
        assert.deepStrictEqual(seen.get(`p1-v01-r1:${n}`), {
          v: { model: "small", list: [1, 2] },
          frozen: true,
          mutated: "TypeError",
          deep: "TypeError"
        })
      }
      assert.deepStrictEqual(seen.get("p1-v02-r1:0"), { v: { model: "large" }, frozen: true, mutated: "TypeError", deep: "no list" })
    }).pipe(Effect.provide(env({ concurrency: 2, maxAdmitted: 8 }))))

  it.effect("outside studies ctx.variables is {} and frozen", () =>
    Effect.gen(function*() {
      let out: unknown = undefined
      const probe = Task.sync("probe", (n: number, ctx) => {
        out = { v: ctx.variables, frozen: Object.isFrozen(ctx.variables) }
        return n
      })
      yield* Runner.run(Pipeline.make("probe", probe).map([1]))
      assert.deepStrictEqual(out, { v: {}, frozen: true })
    }).pipe(Effect.provide(env())))
})

describe("StudyControl.overshoot: both figures readable (tester16c F9)", () => {
  it("an overshoot smaller than the shown digits gets the digits it takes for the two figures to differ", () => {
    assert.deepStrictEqual(StudyControl.overshoot({ calls: 0, tokens: 0, costUsd: 0.000419, timeMs: 0 }, { costUsd: 0.0004 }), ["cost $0.000419 of $0.000400, 5% over"])
    assert.deepStrictEqual(StudyControl.overshoot({ calls: 0, tokens: 0, costUsd: 0.0009, timeMs: 0 }, { costUsd: 0.0005 }), ["cost $0.000900 of $0.000500, 80% over"])
    // two figures alike at the study views' 3 significant digits get more (fix16x)
    assert.deepStrictEqual(StudyControl.overshoot({ calls: 0, tokens: 0, costUsd: 0.00040004, timeMs: 0 }, { costUsd: 0.0004 }), ["cost $0.00040004 of $0.00040000, 0% over"])
    assert.deepStrictEqual(StudyControl.overshoot({ calls: 0, tokens: 0, costUsd: 0, timeMs: 12_340 }, { timeMs: 12_300 }), ["time 12340 ms of 12300 ms, 0% over"])
  })
})
