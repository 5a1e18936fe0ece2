/**
 * The suite views (src/services/internal/suiteViews.ts) over a fake suite: one memory store per
 * member plus a merged store holding the same rows (what `SuiteCatalog.view(ID)` and `view()`
 * answer), and a catalog of members and per-run membership facts.
 *
 * Story: suite `s1`, members `alpha` and `beta`. Run A: alpha/p1 succeeds, alpha/p2 fails,
 * beta/q1 and beta/q2 succeed. Run B (a resume): alpha/p2 is re-run and succeeds; every other
 * pipeline is skipped (already succeeded). Pools: `llm` shared, `experiment:beta:judge` private.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { PipelineId, RunId } from "../../src/domain/Ids.js"
import { PipelineRecord, TaskRecord } from "../../src/domain/Records.js"
import { layerInline } from "../../src/layers/ArtifactBackends.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Export from "../../src/services/internal/export.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as StatsServer from "../../src/services/internal/statsServer.js"
import * as SuiteViews from "../../src/services/internal/suiteViews.js"
import type { StoreService } from "../../src/services/Store.js"
import { art } from "./ExportFixture.js"

const A = RunId.make("runA")
const B = RunId.make("runB")
type State = PipelineRecord["state"]

interface Fake {
  readonly suite: SuiteViews.SuiteReads
  readonly merged: StoreService
  readonly members: Record<string, StoreService>
}

/** Writes one execution of a 2-task pipeline of `member` by `runId` into its member store and the merged one. */
const execute = (
  f: Fake,
  member: string,
  localKey: string,
  runId: RunId,
  state: State,
  at: number
) =>
  Effect.gen(function*() {
    const id = PipelineId.make(`${member.slice(0, 2)}0000000000-${localKey}`)
    const rec = new PipelineRecord({
      pipelineId: id, key: id, name: "demo", state, nTasksDone: state === "succeeded" ? 2 : 1, nTasksTotal: 2, specDigest: "s",
      seedDigest: `seed-${localKey}`, tags: {}, attemptsTotal: 2, runId, createdAt: 1000, updatedAt: at, startedAt: at - 5, endedAt: at,
      failedTask: state === "failed" ? "t1" : null, errorType: state === "failed" ? "FatalError" : null,
      errorMessage: state === "failed" ? `bad ${localKey}` : null, errorClass: state === "failed" ? "fatal" : null,
      repeat: 0, suiteId: "s1", experimentId: member, localKey
    })
    for (const store of [f.members[member]!, f.merged]) {
      yield* store.admit([rec], [art(id, runId, -1, { localKey }, false, at)])
      for (const seq of [0, 1]) {
        const taskState = seq === 1 && state === "failed" ? "failed" : "succeeded"
        yield* store.checkpoint({
          pipelineId: id,
          ...(taskState === "succeeded" ? { artifact: art(id, runId, seq, { localKey, seq, member }, seq === 1, at) } : {}),
          task: new TaskRecord({
            taskRunId: `${id}/${seq}/${runId}`, pipelineId: id, runId, seq, taskName: `t${seq}`, state: taskState, attemptsUsed: 1,
            startedAt: at, endedAt: at + 1, durationMs: 1, errorType: null, errorMessage: null, errorClass: null, leaseIds: ["llm/k1#1"]
          }),
          events: [{ kind: "task.finished", pipelineId: id, runId, data: { seq }, ts: at }]
        })
      }
      yield* store.flush
    }
  })

const membership = (runId: RunId, experimentId: string, admitted: number): SuiteViews.SuiteMembership => ({
  runId, experimentId, selected: true, admitted, sourceExhausted: experimentId === "alpha", sourceError: null,
  limitReached: experimentId === "beta", updatedAt: runId === A ? 10 : 20
})

/** The fake suite, written with the story above. */
const makeFake = Effect.gen(function*() {
  const merged = yield* MemoryStore.make()
  const members = { alpha: yield* MemoryStore.make(), beta: yield* MemoryStore.make() }
  const facts = [membership(A, "alpha", 2), membership(A, "beta", 2), membership(B, "alpha", 2), membership(B, "beta", 2)]
  const suite: SuiteViews.SuiteReads = {
    suiteId: "s1",
    layout: "byExperiment",
    root: "/tmp/suite-root",
    // registered out of order: views sort them
    members: Effect.succeed([
      { experimentId: "beta", definitionDigest: "d-beta", label: "Beta", limit: 2, createdAt: 1 },
      { experimentId: "alpha", definitionDigest: "d-alpha", label: null, limit: null, createdAt: 1 }
    ]),
    membership: (runId) => Effect.succeed(facts.filter((m) => runId === undefined || m.runId === runId)),
    view: (id) => Effect.succeed(id === undefined ? merged : members[id as "alpha" | "beta"])
  }
  const f: Fake = { suite, merged, members }
  const all = [merged, members.alpha, members.beta]
  for (const s of all) yield* s.openRun({ runId: A, startedAt: 900 })
  yield* execute(f, "alpha", "p1", A, "succeeded", 1100)
  yield* execute(f, "alpha", "p2", A, "failed", 1200)
  yield* execute(f, "beta", "q1", A, "succeeded", 1300)
  yield* execute(f, "beta", "q2", A, "succeeded", 1400)
  for (const s of all) yield* s.finishRun(A, { status: "completed", endedAt: 1500 })
  for (const s of all) yield* s.openRun({ runId: B, startedAt: 2000 })
  yield* execute(f, "alpha", "p2", B, "succeeded", 2100)
  // resources: the shared pool and beta's private one (a pool event of no member)
  for (const s of all) {
    yield* s.putResource({ pool: "llm", resourceId: "k1", kind: "llm", spec: {}, health: { state: "ready" }, updatedAt: 1 })
    yield* s.putResource({ pool: "experiment:beta:judge", resourceId: "j1", kind: "llm", spec: {}, health: { state: "ready" }, updatedAt: 1 })
    yield* s.emitEvent({ kind: "pool.throttled", pipelineId: null, runId: B, data: { pool: "llm" }, ts: 2050 })
  }
  // member-scoped metrics (`reportMetric(…, { experiment })`) and a suite-level one no member owns
  yield* merged.reportMetric({ runId: B, pipelineId: null, name: "experiment:alpha:accuracy", value: 0.75, display: "percent", updatedAt: 2200 })
  yield* merged.reportMetric({ runId: A, pipelineId: null, name: "experiment:beta:accuracy", value: 0.5, display: "percent", updatedAt: 1500 })
  yield* merged.reportMetric({ runId: B, pipelineId: null, name: "cost", value: 3, display: "number", updatedAt: 2200 })
  // the runner's skip counts of run B: the run's and each member's (`experiment:ID:skipped`)
  yield* merged.reportMetric({ runId: B, pipelineId: null, name: "skipped", value: 3, display: "number", updatedAt: 2200 })
  yield* merged.reportMetric({ runId: B, pipelineId: null, name: "experiment:alpha:skipped", value: 1, display: "number", updatedAt: 2200 })
  yield* merged.reportMetric({ runId: B, pipelineId: null, name: "experiment:beta:skipped", value: 2, display: "number", updatedAt: 2200 })
  for (const s of all) yield* s.finishRun(B, { status: "completed", endedAt: 2300 })
  for (const s of all) yield* s.flush
  return f
}).pipe(Effect.provide(layerInline))

describe("SuiteViews", () => {
  it.scoped("runOutcomes: a failure in run A stays failed after run B re-ran it successfully", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const a = yield* SuiteViews.runOutcomes(f.merged, A)
      assert.deepStrictEqual(a.byState, { pending: 0, running: 0, succeeded: 3, failed: 1, interrupted: 0 })
      assert.strictEqual(a.pipelines, 4)
      assert.deepStrictEqual(a.failed.map(String), ["al0000000000-p2"])
      const b = yield* SuiteViews.runOutcomes(f.merged, B)
      assert.deepStrictEqual(b.byState, { pending: 0, running: 0, succeeded: 1, failed: 0, interrupted: 0 })
    }))

  it.scoped("report: cumulative by default, members in id order with source status, shared pools shared", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const r = yield* SuiteViews.buildSuiteReport(f.suite)
      assert.strictEqual(r.selection, "cumulative")
      assert.strictEqual(r.pipelines, 4)
      assert.strictEqual(r.byState.succeeded, 4)
      assert.strictEqual(r.skipped, null)
      assert.deepStrictEqual(r.members.map((m) => [m.experimentId, m.pipelines, m.byState.succeeded, m.sourceStatus]), [
        ["alpha", 2, 2, "exhausted"],
        ["beta", 2, 2, "limit"]
      ])
      // member metrics: each member's latest, never averaged into a suite value
      assert.deepStrictEqual(r.members.map((m) => m.metrics.map((x) => x.text)), [["75.0%"], ["50.0%"]])
      assert.deepStrictEqual(r.resources.map((x) => [x.pool, x.shared, x.experimentId]), [
        ["llm", true, null],
        ["experiment:beta:judge", false, "beta"]
      ])
      const text = SuiteViews.renderSuiteText(r)
      assert.match(text, /Suite s1 \(byExperiment\).*all members, cumulative view/)
      assert.match(text, /alpha: 2 pipeline\(s\).*source exhausted \(2 admitted\)/)
      assert.match(text, /beta \[Beta\]: 2 pipeline\(s\).*limit reached \(2 admitted\); limit 2/)
      assert.match(text, /llm\/k1 \(shared pool; kind llm\)/)
      assert.match(text, /experiment:beta:judge\/j1 \(pool private to beta; kind llm\)/)
    }))

  it.scoped("report --run-id: durable outcomes of each invocation, skips counted", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const a = yield* SuiteViews.buildSuiteReport(f.suite, { runId: "runA" })
      assert.strictEqual(a.selection, "runA")
      assert.strictEqual(a.byState.failed, 1)
      assert.strictEqual(a.byState.succeeded, 3)
      assert.deepStrictEqual(a.members.map((m) => [m.experimentId, m.byState.failed, m.skipped]), [["alpha", 1, 0], ["beta", 0, 0]])
      // run A's failure is still listed, from its own task row (the pipeline row is run B's now)
      assert.deepStrictEqual(a.errors.map((e) => [String(e.pipelineId), e.runId, e.failedTask]), [["al0000000000-p2", "runA", "t1"]])
      const b = yield* SuiteViews.buildSuiteReport(f.suite, { runId: "runB" })
      assert.strictEqual(b.pipelines, 1)
      assert.strictEqual(b.byState.succeeded, 1)
      assert.strictEqual(b.skipped, 3)
      assert.deepStrictEqual(b.members.map((m) => [m.experimentId, m.pipelines, m.skipped]), [["alpha", 1, 1], ["beta", 0, 2]])
      assert.match(SuiteViews.renderSuiteText(b), /run runB \(durable outcomes\)[\s\S]*skipped 3 \(already done\)/)
      // a suite pipeline's error is printed once (its key is its id), naming its member and local key
      assert.deepStrictEqual(a.errors.map((e) => [e.experimentId, e.localKey]), [["alpha", "p2"]])
      const errorLine = SuiteViews.renderSuiteText(a).split("\n").filter((l) => l.includes("al0000000000-p2"))
      assert.strictEqual(errorLine.length, 1)
      assert.match(errorLine[0]!, /^ {2}al0000000000-p2 \[member alpha, local key p2\] at t1: /)
      const e = yield* Effect.flip(SuiteViews.buildSuiteReport(f.suite, { runId: "nope" }))
      assert.strictEqual(e._tag, "ConfigError")
      assert.match(e.message, /run nope is not a run of suite s1/)
    }))

  it.scoped("an interrupted run on a fresh root: no skips invented, done not inflated, source not 'running'", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const C = RunId.make("runC")
      // run C: alpha's source handed it 5 specs, one ran (interrupted) before Ctrl-C, nothing was skipped
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.openRun({ runId: C, startedAt: 3000 })
      yield* execute(f, "alpha", "p3", C, "interrupted", 3100)
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.finishRun(C, { status: "interrupted", endedAt: 3200 })
      const facts = [{ ...membership(C, "alpha", 5), sourceExhausted: false, updatedAt: 30 }]
      const suite: SuiteViews.SuiteReads = {
        ...f.suite,
        membership: (runId) => Effect.map(f.suite.membership(runId), (xs) => [...xs, ...facts.filter((m) => runId === undefined || m.runId === runId)])
      }
      const r = yield* SuiteViews.buildSuiteReport(suite, { runId: "runC" })
      assert.strictEqual(r.skipped, 0)
      assert.deepStrictEqual(r.members.map((m) => [m.experimentId, m.pipelines, m.skipped, m.sourceStatus]), [["alpha", 1, 0, "interrupted"]].concat(
        [["beta", 0, null, "unknown"]] as any
      ))
      assert.match(SuiteViews.renderSuiteText(r), /Pipelines: 1 \(.*\), skipped 0 \(already done\)/)
      assert.match(SuiteViews.renderSuiteText(r), /alpha: .*source not exhausted \(5 admitted; run runC ended\)/)
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite })
      const json = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).json() as Promise<any>)
      const ex = yield* json("/experiments?run_id=runC")
      assert.deepStrictEqual(ex.rows.map((m: any) => [m.experiment_id, m.skipped, m.source_status]), [["alpha", 0, "interrupted"], ["beta", null, "unknown"]])
      const st = yield* json("/stats?run_id=runC")
      assert.strictEqual(st.skipped, 0)
      assert.strictEqual(st.done, 0)
      // the runner's per-member skip counts are not listed as metrics
      const stB = yield* json("/stats?run_id=runB")
      assert.strictEqual(stB.skipped, 3)
      assert.isFalse(stB.metrics.some((m: any) => String(m.name).endsWith(":skipped")))
      // skips belong to one run: the cumulative /stats (whole suite or one member) has no skip count
      for (const route of ["/stats", "/stats?experiment=beta", "/stats?run_id=all"]) {
        const cumulative = yield* json(route)
        assert.strictEqual(cumulative.run_id, "all", route)
        assert.strictEqual(cumulative.skipped, null, route)
      }
    }))

  it.scoped("a member the run did not select reads 'not selected' in that run's views, not 'interrupted'", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const C = RunId.make("runC")
      // run C selects beta only (the catalog records alpha as not selected) and ends
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.openRun({ runId: C, startedAt: 3000 })
      yield* execute(f, "beta", "q3", C, "succeeded", 3100)
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.finishRun(C, { status: "completed", endedAt: 3200 })
      const facts = [
        { ...membership(C, "alpha", 0), selected: false, sourceExhausted: false, updatedAt: 30 },
        { ...membership(C, "beta", 1), limitReached: false, sourceExhausted: true, updatedAt: 30 }
      ]
      const suite: SuiteViews.SuiteReads = {
        ...f.suite,
        membership: (runId) => Effect.map(f.suite.membership(runId), (xs) => [...xs, ...facts.filter((m) => runId === undefined || m.runId === runId)])
      }
      const r = yield* SuiteViews.buildSuiteReport(suite, { runId: "runC" })
      assert.deepStrictEqual(r.members.map((m) => [m.experimentId, m.sourceStatus, m.admitted, m.skipped]), [["alpha", "not_selected", null, null], ["beta", "exhausted", 1, 0]])
      const text = SuiteViews.renderSuiteText(r)
      assert.match(text, /\n  alpha: 0 pipeline\(s\) .*; not selected \(run runC\)/)
      assert.notMatch(text, /alpha: .*(source not exhausted|skipped)/)
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite })
      const json = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).json() as Promise<any>)
      const ex = yield* json("/experiments?run_id=runC")
      assert.deepStrictEqual(ex.rows.map((m: any) => [m.experiment_id, m.source_status, m.source.selected, m.source.admitted]), [
        ["alpha", "not_selected", false, null],
        ["beta", "exhausted", true, 1]
      ])
      // the cumulative view has no skip count (skips belong to a run), and says nothing is missing
      const cum = yield* json("/experiments")
      assert.deepStrictEqual(cum.rows.map((m: any) => [m.skipped, m.skipped_recorded]), [[null, true], [null, true]])
      // watch --experiment: the one-line form says whose figures these are
      const one = yield* SuiteViews.suiteSnapshot(suite, { _tag: "Run", run: (yield* f.merged.listRuns).find((x) => x.runId === C)! } as any, {
        errors: 5,
        experiment: "beta"
      })
      assert.match(Monitor.renderLine(one), /^run runC \[member beta\] \w+: 1\/1 done/)
      const snap = yield* SuiteViews.suiteSnapshot(suite, { _tag: "Run", run: (yield* f.merged.listRuns).find((x) => x.runId === C)! } as any, { errors: 5 })
      assert.match(Monitor.renderSnapshot(snap), /\n  alpha: 0 .* · not selected/)
    }))

  it.scoped("the cumulative report leaves superseded pipelines out of its counts but says its spend and pool attempts include them", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const cumulative = yield* SuiteViews.buildSuiteReport(f.suite)
      const spend = { calls: 4, refused: 0, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 1200, tokensOut: 300, costUsd: 0.5, estimated: 0, unpriced: 0 }
      const withSpend = (superseded: number, runId: string | null) => ({
        ...cumulative,
        superseded,
        suite: { ...cumulative.suite, runId },
        accounting: { ...cumulative.accounting, total: spend, runs: [], pools: [], pipelines: { by: "cost" as const, limit: 10, rows: [] } }
      })
      const lineOf = (text: string, prefix: string) => text.split("\n").find((l) => l.startsWith(prefix)) ?? ""
      const text = SuiteViews.renderSuiteText(withSpend(2, null))
      assert.match(lineOf(text, "Tokens and cost"), /includes the attempts of 2 superseded pipeline\(s\)/)
      assert.match(lineOf(text, "Pools"), /include the attempts of 2 superseded pipeline\(s\)/)
      // no superseded pipeline, or one run's view (which shows them as that run left them): no note
      for (const quiet of [withSpend(0, null), withSpend(2, "runB")]) {
        const t = SuiteViews.renderSuiteText(quiet)
        assert.include(t, "Tokens and cost (each attempt once): ")
        assert.notInclude(t, "superseded pipeline(s)")
      }
    }))

  it.scoped("report's Metrics section names the member of each member-scoped metric; skip counts are no metrics: none in the cumulative view, a run's view gives them as its figures", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      // what the runner writes: one skip count per member and the run's total, all labelled alike
      for (const [name, value] of [["experiment:alpha:skipped", 4], ["experiment:beta:skipped", 5], ["skipped", 9]] as const) {
        yield* f.merged.reportMetric({ runId: B, pipelineId: null, name, value, label: "Skipped (already done)", display: "number", updatedAt: 2250 })
      }
      const lines = (t: string) => t.split("\n").slice(t.split("\n").indexOf("Metrics:") + 1).filter((l) => l.startsWith("  "))
      const cumulative = yield* SuiteViews.buildSuiteReport(f.suite)
      const text = SuiteViews.renderSuiteText(cumulative)
      // skips belong to one run: the cumulative view (text and JSON) prints no skip count
      assert.notInclude(text, "Skipped")
      assert.notMatch(text, /skipped \d/)
      assert.isFalse(JSON.stringify(cumulative.metrics).includes("skipped"))
      assert.isTrue(lines(text).some((l) => /^  accuracy \[member alpha\] \(run runB\): 75/.test(l)))
      // the run's view: its skips as figures of the run and of each member, not as metrics
      const ofRun = SuiteViews.renderSuiteText(yield* SuiteViews.buildSuiteReport(f.suite, { runId: "runB" }))
      assert.notInclude(ofRun, "Skipped (already done)")
      assert.match(ofRun, /skipped 9 \(already done\)/)
      assert.match(ofRun, /\n  alpha: .*skipped 4/)
      assert.match(ofRun, /\n  beta \[Beta\]: .*skipped 5/)
      // one member's view: the other members' metrics are not its own
      const alpha = SuiteViews.renderSuiteText(yield* SuiteViews.buildSuiteReport(f.suite, { experiment: "alpha" }))
      assert.notMatch(alpha, /\[member beta\]/)
    }))

  it.scoped("admitted while a run is live and after it died: the store's count, never the recorded 0", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const D = RunId.make("runD")
      // run D (beta) runs q3 and q4 and skips one already done; its recorded admitted count is
      // still the 0 written when it started (the count is written when the source ends or the run stops)
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.openRun({ runId: D, startedAt: 3000, config: { staleAfterMs: 100 } })
      yield* execute(f, "beta", "q3", D, "running", 3100)
      yield* execute(f, "beta", "q4", D, "succeeded", 3110)
      yield* f.merged.reportMetric({ runId: D, pipelineId: null, name: "experiment:beta:skipped", value: 1, display: "number", updatedAt: 3120 })
      const facts = [{ ...membership(D, "beta", 0), limitReached: false, updatedAt: 30 }]
      const suite: SuiteViews.SuiteReads = {
        ...f.suite,
        membership: (runId) => Effect.map(f.suite.membership(runId), (xs) => [...xs, ...facts.filter((m) => runId === undefined || m.runId === runId)])
      }
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.heartbeat(D, 3150)
      yield* TestClock.setTime(3200) // D is alive
      const beta = (r: SuiteViews.SuiteReportData) => r.members.find((m) => m.experimentId === "beta")!
      for (const runId of [undefined, "runD"]) {
        const live = yield* SuiteViews.buildSuiteReport(suite, { runId })
        assert.deepStrictEqual([beta(live).sourceStatus, beta(live).admitted, beta(live).admittedFrom], ["running", 3, "store"])
        assert.match(SuiteViews.renderSuiteText(live), /beta \[Beta\]: .*source not exhausted yet \(at least 3 admitted \(as stored\), run runD running\)/)
      }
      yield* TestClock.setTime(3500) // killed: no heartbeat within its staleAfter, nothing recorded
      const dead = yield* SuiteViews.buildSuiteReport(suite, { runId: "runD" })
      assert.deepStrictEqual([beta(dead).sourceStatus, beta(dead).admitted], ["interrupted", 3])
      assert.match(SuiteViews.renderSuiteText(dead), /source not exhausted \(at least 3 admitted \(as stored\); run runD ended\)/)
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite })
      const json = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).json() as Promise<any>)
      const ex = yield* json("/experiments")
      const b = ex.rows.find((m: any) => m.experiment_id === "beta")
      assert.deepStrictEqual([b.source.admitted, b.source.admitted_from], [3, "store"])
    }))

  it.scoped("pipelines left running by a run that is no longer running (stale) read as interrupted; a live run's stay running", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const D = RunId.make("runD")
      // run D (beta) dies with q3 running: nothing is written afterwards, the rows stay as it left them
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.openRun({ runId: D, startedAt: 3000, config: { staleAfterMs: 100 } })
      yield* execute(f, "beta", "q3", D, "running", 3100)
      const facts = [{ ...membership(D, "beta", 3), limitReached: false, updatedAt: 30 }]
      const suite: SuiteViews.SuiteReads = {
        ...f.suite,
        membership: (runId) => Effect.map(f.suite.membership(runId), (xs) => [...xs, ...facts.filter((m) => runId === undefined || m.runId === runId)])
      }
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.heartbeat(D, 3150)
      yield* TestClock.setTime(3200) // D is alive (heartbeat 50 ms ago): its pipeline is running
      const live = yield* SuiteViews.buildSuiteReport(suite)
      assert.deepStrictEqual([live.byState.running, live.byState.interrupted], [1, 0])
      assert.strictEqual(live.members.find((m) => m.experimentId === "beta")!.sourceStatus, "running")
      yield* TestClock.setTime(3500) // no heartbeat within its staleAfter (100 ms): D is stale
      const r = yield* SuiteViews.buildSuiteReport(suite)
      assert.deepStrictEqual([r.byState.running, r.byState.interrupted], [0, 1])
      const beta = r.members.find((m) => m.experimentId === "beta")!
      assert.deepStrictEqual([beta.byState.running, beta.byState.interrupted, beta.sourceStatus], [0, 1, "interrupted"])
      assert.notMatch(SuiteViews.renderSuiteText(r), /running [1-9]/)
      const d = yield* SuiteViews.buildSuiteReport(suite, { runId: "runD" })
      assert.deepStrictEqual([d.byState.running, d.byState.interrupted], [0, 1])
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite })
      const json = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).json() as Promise<any>)
      const st = yield* json("/stats?run_id=all")
      assert.deepStrictEqual([st.pipelines.by_state.running, st.pipelines.by_state.interrupted], [0, 1])
      const rows = (yield* json("/pipelines?run_id=runD")).rows
      assert.deepStrictEqual(rows.map((r: any) => [r.local_key, r.state, r.stored_state]), [["q3", "interrupted", "running"]])
      // the member's database is not modified
      const row = yield* f.members["beta"]!.getPipeline(PipelineId.make("be0000000000-q3"))
      assert.strictEqual(row._tag === "Some" ? row.value.state : undefined, "running")
    }))

  it.scoped("serve's ?state= filter, its rows and exports agree on the read state: running rows of a run no longer running are interrupted", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const D = RunId.make("runD")
      const all = [f.merged, f.members["alpha"]!, f.members["beta"]!]
      for (const s of all) yield* s.openRun({ runId: D, startedAt: 3000, config: { staleAfterMs: 100 } })
      // run D dies with q3 running and q4 stored interrupted
      yield* execute(f, "beta", "q3", D, "running", 3100)
      yield* execute(f, "beta", "q4", D, "interrupted", 3100)
      for (const s of all) yield* s.heartbeat(D, 3150)
      yield* TestClock.setTime(3500) // no heartbeat within 100 ms: D is stale
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite: f.suite })
      const get = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).text())
      const page = (state: string, extra = "") =>
        Effect.map(get(`/pipelines?run_id=all&state=${state}${extra}`), (t) => {
          const p = JSON.parse(t)
          return { rows: p.rows.map((r: any) => [r.local_key, r.state, r.stored_state ?? null]), next: p.next }
        })
      assert.deepStrictEqual((yield* page("running")).rows, [])
      assert.deepStrictEqual((yield* page("interrupted")).rows, [["q3", "interrupted", "running"], ["q4", "interrupted", null]])
      // paged: the merged filter keeps its order across pages
      const first = yield* page("interrupted", "&limit=1")
      assert.deepStrictEqual(first.rows, [["q3", "interrupted", "running"]])
      assert.deepStrictEqual((yield* page("interrupted", `&limit=1&after=${encodeURIComponent(first.next)}`)).rows, [["q4", "interrupted", null]])
      // exports: the state column is the read state, and serve's export filters on it
      const lines = (t: string) => t.trim().split("\n").filter((l) => l !== "").map((l) => JSON.parse(l))
      const exported = lines(yield* get("/export?rows=results&format=jsonl&run_id=all&state=interrupted"))
      assert.deepStrictEqual(exported.map((r: any) => [r.localKey, r.state]), [["q3", "interrupted"], ["q4", "interrupted"]])
      assert.deepStrictEqual(lines(yield* get("/export?rows=pipelines&format=jsonl&run_id=all&state=running")), [])
      for (const kind of ["results", "pipelines"] as const) {
        const rows = yield* Stream.runCollect(Stream.mapEffect(SuiteViews.suiteRowItems(f.suite, { kind, experiment: "beta" }), Export.materialize))
        assert.deepStrictEqual(Array.from(rows).map((r) => [r["localKey"], r["state"]]), [["q1", "succeeded"], ["q2", "succeeded"], ["q3", "interrupted"], ["q4", "interrupted"]])
      }
      // a live run's running rows stay running (and are what ?state=running shows)
      for (const s of all) yield* s.heartbeat(D, 3480)
      assert.deepStrictEqual((yield* page("running")).rows, [["q3", "running", null]])
      assert.deepStrictEqual((yield* page("interrupted")).rows, [["q4", "interrupted", null]])
      assert.deepStrictEqual(lines(yield* get("/export?rows=results&format=jsonl&run_id=all&state=running")).map((r: any) => r.localKey), ["q3"])
    }))

  it.scoped("a run from before per-member skip counts: members read 'skipped: not recorded' (not 0); the suite's total is the run's own count", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const C = RunId.make("runC")
      const E = RunId.make("runE")
      const all = [f.merged, f.members["alpha"]!, f.members["beta"]!]
      // run C (an older assay) resumed both members and skipped 4 pipelines: only the run's count
      // is recorded; run E resumed beta alone and skipped 2
      for (const [runId, at, n] of [[C, 3000, 4], [E, 4000, 2]] as const) {
        for (const s of all) yield* s.openRun({ runId, startedAt: at })
        yield* f.merged.reportMetric({ runId, pipelineId: null, name: "skipped", value: n, display: "number", updatedAt: at + 100 })
        for (const s of all) yield* s.finishRun(runId, { status: "completed", endedAt: at + 200 })
      }
      const facts = [membership(C, "alpha", 2), membership(C, "beta", 2), membership(E, "beta", 2)]
      const suite: SuiteViews.SuiteReads = {
        ...f.suite,
        membership: (runId) => Effect.map(f.suite.membership(runId), (xs) => [...xs, ...facts.filter((m) => runId === undefined || m.runId === runId)])
      }
      const c = yield* SuiteViews.buildSuiteReport(suite, { runId: "runC" })
      assert.deepStrictEqual(c.members.map((m) => [m.experimentId, m.skipped, m.skippedRecorded]), [["alpha", null, false], ["beta", null, false]])
      assert.deepStrictEqual([c.skipped, c.skippedRecorded], [4, true])
      const text = SuiteViews.renderSuiteText(c)
      assert.match(text, /skipped 4 \(already done\)/)
      assert.match(text, /  alpha: 0 pipeline\(s\) \([^)]*\), skipped: not recorded;/)
      assert.notMatch(text, /skipped 0/)
      const alpha = yield* SuiteViews.buildSuiteReport(suite, { runId: "runC", experiment: "alpha" })
      assert.deepStrictEqual([alpha.skipped, alpha.skippedRecorded], [null, false])
      assert.match(SuiteViews.renderSuiteText(alpha), /Pipelines: 0 \([^)]*\), skipped: not recorded/)
      // the only member run E selected: the run's count is beta's
      const e = yield* SuiteViews.buildSuiteReport(suite, { runId: "runE" })
      assert.deepStrictEqual(e.members.map((m) => [m.experimentId, m.skipped, m.skippedRecorded]), [["alpha", null, true], ["beta", 2, true]])
      // run B recorded per-member counts: as recorded
      const b = yield* SuiteViews.buildSuiteReport(suite, { runId: "runB" })
      assert.deepStrictEqual(b.members.map((m) => [m.skipped, m.skippedRecorded]), [[1, true], [2, true]])
      // the same in serve: /experiments and the dashboard
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite })
      const get = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).text())
      const ex = JSON.parse(yield* get("/experiments?run_id=runC"))
      assert.deepStrictEqual(ex.rows.map((m: any) => [m.experiment_id, m.skipped, m.skipped_recorded]), [["alpha", null, false], ["beta", null, false]])
      assert.strictEqual(JSON.parse(yield* get("/stats?run_id=runC")).skipped, 4)
      assert.include(yield* get("/?run_id=runC"), "<td>not recorded</td>")
    }))

  it.scoped("report --experiment: one member, its private pools and the shared ones; unknown member refused", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const r = yield* SuiteViews.buildSuiteReport(f.suite, { experiment: "alpha", runId: "runA" })
      assert.deepStrictEqual(r.members.map((m) => m.experimentId), ["alpha"])
      assert.strictEqual(r.pipelines, 2)
      assert.strictEqual(r.byState.failed, 1)
      assert.deepStrictEqual(r.resources.map((x) => x.pool), ["llm"])
      // member ids are unique ignoring case: ALPHA is the member alpha (its canonical id shown)
      const upper = yield* SuiteViews.buildSuiteReport(f.suite, { experiment: "ALPHA", runId: "runA" })
      assert.deepStrictEqual([upper.suite.experiment, upper.pipelines, upper.members.map((m) => m.experimentId)], ["alpha", 2, ["alpha"]])
      const rows = Array.from(yield* Stream.runCollect(SuiteViews.suiteRowItems(f.suite, { kind: "results", experiment: "Beta" })))
      assert.strictEqual(rows.length, 2)
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite: f.suite })
      const st = yield* Effect.promise(async () => (await fetch(`${info.url}/stats?experiment=BETA`)).json() as Promise<any>)
      assert.strictEqual(st.suite.experiment, "beta")
      const snap = yield* SuiteViews.suiteSnapshot(f.suite, { _tag: "All", runs: [] }, { experiment: "bEtA", errors: 1 })
      assert.strictEqual(snap.suite?.experiment, "beta")
      const e = yield* Effect.flip(SuiteViews.buildSuiteReport(f.suite, { experiment: "gamma" }))
      assert.strictEqual(e._tag, "ConfigError")
      assert.match(e.message, /no member "gamma" \(members: alpha, beta\)/)
    }))

  it.scoped("export: results rows carry suite, member, local key and repeat; audit rows keep member identity", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const results = yield* Stream.runCollect(Stream.mapEffect(SuiteViews.suiteRowItems(f.suite, { kind: "results" }), Export.materialize))
      const rows = Array.from(results)
      assert.deepStrictEqual(rows.map((r) => [r["suiteId"], r["experimentId"], r["localKey"], r["repeat"], r["state"]]), [
        ["s1", "alpha", "p1", 0, "succeeded"],
        ["s1", "alpha", "p2", 0, "succeeded"],
        ["s1", "beta", "q1", 0, "succeeded"],
        ["s1", "beta", "q2", 0, "succeeded"]
      ])
      const events = Array.from(yield* Stream.runCollect(Stream.mapEffect(SuiteViews.suiteRowItems(f.suite, { kind: "events" }), Export.materialize)))
      const pool = events.find((e) => e["kind"] === "pool.throttled")!
      assert.strictEqual(pool["experimentId"], null) // no member made up for a shared pool's event
      assert.strictEqual(pool["suiteId"], "s1")
      const taskEvents = events.filter((e) => e["kind"] === "task.finished")
      assert.isTrue(taskEvents.length > 0 && taskEvents.every((e) => e["experimentId"] === (String(e["pipelineId"]).startsWith("al") ? "alpha" : "beta")))
      const tasks = Array.from(yield* Stream.runCollect(Stream.mapEffect(SuiteViews.suiteRowItems(f.suite, { kind: "tasks", experiment: "beta" }), Export.materialize)))
      assert.isTrue(tasks.length === 4 && tasks.every((t) => t["experimentId"] === "beta"))
    }))

  it.scoped("export --by-experiment: OUT/ID/ROWS.FORMAT per member, in id order", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const out = nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-suite-views-")), "split")
      const done = yield* SuiteViews.exportByExperiment(f.suite, out, { kind: "results", format: "jsonl" })
      assert.deepStrictEqual(done.files.map((x) => [x.experimentId, nodePath.relative(out, x.path), x.rows]), [
        ["alpha", nodePath.join("alpha", "results.jsonl"), 2],
        ["beta", nodePath.join("beta", "results.jsonl"), 2]
      ])
      const alpha = fs.readFileSync(nodePath.join(out, "alpha", "results.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.deepStrictEqual(alpha.map((r) => [r.experimentId, r.localKey]), [["alpha", "p1"], ["alpha", "p2"]])
      // no temporary file left beside the outputs
      assert.deepStrictEqual(fs.readdirSync(nodePath.join(out, "beta")), ["results.jsonl"])
      const csv = yield* SuiteViews.exportByExperiment(f.suite, out, { kind: "attempts", format: "csv", experiment: "beta" })
      assert.deepStrictEqual(csv.files.map((x) => x.experimentId), ["beta"])
      assert.isTrue(fs.existsSync(nodePath.join(out, "beta", "attempts.csv")))
    }))

  it.scoped("serve: /experiments, ?experiment= with run_id, shared pools, member links on the dashboard", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite: f.suite })
      const get = (route: string) =>
        Effect.promise(async () => {
          const r = await fetch(`${info.url}${route}`)
          const body = await r.text()
          return { status: r.status, body, json: r.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(body) : undefined }
        })
      const ex = yield* get("/experiments")
      assert.strictEqual(ex.status, 200)
      assert.strictEqual(ex.json.suite_id, "s1")
      assert.deepStrictEqual(ex.json.rows.map((m: any) => [m.experiment_id, m.pipelines, m.source_status, m.metrics.map((x: any) => x.value)]), [
        ["alpha", 2, "exhausted", [0.75]],
        ["beta", 2, "limit", [0.5]]
      ])
      const exA = yield* get("/experiments?run_id=runA&experiment=alpha")
      assert.deepStrictEqual(exA.json.rows.map((m: any) => [m.experiment_id, m.by_state.failed, m.source.run_id]), [["alpha", 1, "runA"]])
      // one member's snapshot for one run: its durable outcomes (p2 stays failed in run A)
      const st = yield* get("/stats?experiment=alpha&run_id=runA")
      assert.strictEqual(st.json.pipelines.total, 2)
      assert.strictEqual(st.json.pipelines.by_state.failed, 1)
      assert.strictEqual(st.json.suite.experiment, "alpha")
      const whole = yield* get("/stats")
      assert.strictEqual(whole.json.run_id, "all")
      assert.strictEqual(whole.json.pipelines.by_state.succeeded, 4)
      assert.deepStrictEqual(whole.json.suite.pools, [
        { pool: "llm", shared: true, experiment_id: null },
        { pool: "experiment:beta:judge", shared: false, experiment_id: "beta" }
      ])
      const res = yield* get("/resources?experiment=alpha")
      assert.deepStrictEqual(res.json.rows.map((r: any) => [r.pool, r.shared]), [["llm", true]])
      const pipes = yield* get("/pipelines?experiment=beta")
      assert.isTrue(pipes.json.rows.length === 2 && pipes.json.rows.every((r: any) => String(r.pipeline_id).startsWith("be")))
      // /pipelines and /errors rows name the member and the local key
      assert.deepStrictEqual(pipes.json.rows.map((r: any) => [r.experiment_id, r.local_key]), [["beta", "q1"], ["beta", "q2"]])
      // a current failure: beta/q9 fails in run E
      const E = RunId.make("runE")
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.openRun({ runId: E, startedAt: 5000 })
      yield* execute(f, "beta", "q9", E, "failed", 5100)
      for (const s of [f.merged, f.members["alpha"]!, f.members["beta"]!]) yield* s.finishRun(E, { status: "completed", endedAt: 5200 })
      const errs = yield* get("/errors?run_id=runE")
      assert.deepStrictEqual(errs.json.rows.map((r: any) => [r.pipeline_id, r.experiment_id, r.local_key]), [["be0000000000-q9", "beta", "q9"]])
      const recent = yield* get("/stats?run_id=runE")
      assert.deepStrictEqual(recent.json.recent_errors.map((r: any) => [r.experiment_id, r.local_key]), [["beta", "q9"]])
      const rep = SuiteViews.renderSuiteText(yield* SuiteViews.buildSuiteReport(f.suite))
      assert.include(rep, "  be0000000000-q9 [member beta, local key q9] at t1: FatalError [fatal] bad q9")
      assert.notInclude(rep, "be0000000000-q9 (be0000000000-q9)")
      const exp = yield* get("/export?experiment=beta&rows=events&format=jsonl")
      const events = exp.body.trim().split("\n").map((l) => JSON.parse(l))
      assert.isTrue(events.filter((e) => e.pipelineId !== null).every((e) => e.experimentId === "beta"))
      assert.strictEqual((yield* get("/stats?experiment=gamma")).status, 404)
      // the dashboard lists the members, each linking to its detail view
      const page = yield* get("/?run_id=runB")
      assert.include(page.body, `href="/?run_id=runB&amp;experiment=alpha"`)
      assert.include(page.body, `href="/?run_id=runB&amp;experiment=beta"`)
      assert.include(page.body, `llm/k1 <span class="muted">(shared)</span>`)
      assert.include(page.body, `experiment:beta:judge/j1 <span class="muted">(private to beta)</span>`)
      const detail = yield* get("/?experiment=beta")
      assert.include(detail.body, `id="whole-suite" href="/"`)
      assert.include(detail.body, `"experiment":"beta"`)
    }))

  it.scoped("serve --experiment: that member by default, others still one parameter away", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite: f.suite, experiment: "beta" })
      const body = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).text())
      assert.strictEqual(JSON.parse(yield* body("/stats")).suite.experiment, "beta")
      assert.deepStrictEqual(JSON.parse(yield* body("/experiments")).rows.map((m: any) => m.experiment_id), ["beta"])
      assert.strictEqual(JSON.parse(yield* body("/stats?experiment=alpha")).suite.experiment, "alpha")
      const page = yield* body("/")
      assert.include(page, `"experiment":"beta"`)
      assert.notInclude(page, `id="whole-suite"`)
    }))

  it.scoped("serve: ?experiment= on an ordinary store is refused; /experiments is not there", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0 })
      const status = (route: string) => Effect.promise(async () => (await fetch(`${info.url}${route}`)).status)
      assert.strictEqual(yield* status("/stats?experiment=alpha"), 400)
      assert.strictEqual(yield* status("/experiments"), 404)
      assert.strictEqual(yield* status("/stats"), 200)
    }))

  it.scoped("the dashboard escapes member ids, labels and source errors", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const evil: SuiteViews.SuiteReads = {
        ...f.suite,
        suiteId: "<s1>",
        members: Effect.succeed([{ experimentId: "alpha", definitionDigest: "d", label: "<img src=x onerror=alert(1)>", limit: null, createdAt: 1 }]),
        membership: () => Effect.succeed([{ ...membership(A, "alpha", 2), sourceError: "<script>alert(2)</script>" }])
      }
      const info = yield* StatsServer.serve({ store: f.merged, reads: Monitor.storeReads(f.merged), port: 0, suite: evil })
      const body = yield* Effect.promise(async () => (await fetch(`${info.url}/`)).text())
      assert.notInclude(body, "<img src=x")
      assert.notInclude(body, "<script>alert(2)")
      assert.include(body, "&lt;img src=x onerror=alert(1)&gt;")
      assert.include(body, "&lt;s1&gt;")
    }))

  it.scoped("report: a label or source error holding a line break stays on its member's one line (escaped)", () =>
    Effect.gen(function*() {
      const f = yield* makeFake
      const odd: SuiteViews.SuiteReads = {
        ...f.suite,
        members: Effect.succeed([{ experimentId: "alpha", definitionDigest: "d", label: "first\nsecond", limit: null, createdAt: 1 }]),
        membership: () => Effect.succeed([{ ...membership(A, "alpha", 2), sourceError: "line 1\r\nline 2" }])
      }
      const text = SuiteViews.renderSuiteText(yield* SuiteViews.buildSuiteReport(odd))
      const lines = text.split("\n")
      const members = lines.slice(lines.indexOf("Members:") + 1, lines.indexOf("Pools:")).filter((l) => /^  \S/.test(l))
      assert.deepStrictEqual(members.length, 1, text)
      assert.include(members[0]!, "  alpha [first\\nsecond]: ")
      assert.include(members[0]!, "source error: line 1\\r\\nline 2")
    }))
})
