import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Effect, Layer, TestClock } from "effect"
import * as fs from "node:fs"
import * as nodePath from "node:path"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as StoreResolver from "../../src/layers/StoreResolver.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import { Store } from "../../src/services/Store.js"
import * as Report from "../../src/services/Report.js"
import { buildStore, pid, storeFixture, tmpDir } from "./ExportFixture.js"
import { rid } from "../support/ids.js"

const dir = tmpDir()
const file = nodePath.join(dir, "r.db")
/** The store file, built once for this file's tests (a `layer()` fixture), and the store opener. */
const Built = storeFixture(buildStore(file, [{ n: 4, runId: "old", startedAt: 1000 }, { n: 10, runId: "new", startedAt: 9000, failEvery: 5 }], (s) =>
  Effect.gen(function*() {
    yield* s.openRun({ runId: rid("zombie"), startedAt: 20_000 })
    yield* s.finishRun(rid("zombie"), { status: "completed", endedAt: 20_001 })
    yield* s.reportMetric({ runId: rid("old"), pipelineId: null, name: "accuracy", value: 0.5, display: "percent", updatedAt: 2 })
    for (const phase of ["settle", "mark_final"]) {
      yield* s.emitEvent({ kind: "pipeline.terminal_repair_failed", pipelineId: pid(4), runId: rid("new"), data: { phase }, ts: 9500 })
    }
  })))

// TestClock moves the "now" a stale run is judged against: this test keeps the test services.
// It is declared before the `layer()` block: @effect/vitest's `layer()` reassigns the shared
// `it.effect` to its own (here without the test services) for everything declared after it.
describe("Report (stale runs)", () => {
  it.effect("a running run with an old heartbeat is shown as interrupted (stale), not rewritten", () =>
    Effect.gen(function*() {
      const stale = nodePath.join(dir, "stale.db")
      yield* buildStore(stale, [])
      // write a running run directly (no finishRun)
      const Database = (yield* Effect.promise(() => import("better-sqlite3"))).default
      const db = new Database(stale)
      db.prepare("INSERT INTO runs (run_id, label, status, config, started_at, heartbeat_at, ended_at, stop_reason, notes, meta) VALUES ('live', NULL, 'running', NULL, 1000, 1000, NULL, NULL, NULL, '{}')").run()
      db.close()
      yield* TestClock.setTime(1000 + 10_000)
      const fresh = yield* Report.reportPaths([stale])
      assert.strictEqual(fresh.runs[0]!.shownStatus, "running")
      yield* TestClock.setTime(1000 + 31_000)
      const old = yield* Report.reportPaths([stale])
      assert.strictEqual(old.runs[0]!.status, "running")
      assert.strictEqual(old.runs[0]!.shownStatus, "interrupted")
      assert.match(Report.renderText(old), /interrupted \(stale/)
    }).pipe(Effect.provide(StoreResolver.layerOpener())))
})

describe("Report (retries)", () => {
  it.effect("Retries counts the retry policy's decisions, not attempts re-run after a kill (total and per resource)", () =>
    Effect.gen(function*() {
      const retries = nodePath.join(dir, "retries.db")
      yield* buildStore(retries, [], (s) =>
        Effect.gen(function*() {
          const runId = rid("k")
          yield* s.openRun({ runId, startedAt: 1000 })
          const att = (id: string, attemptNo: number, decision: unknown, lease: string) => ({
            pipelineId: pid(Number(id)), runId, taskRunId: `${id}/0`, taskName: "t0", seq: 0, attemptNo,
            outcome: decision === null ? "succeeded" as const : "failed" as const, errorClass: decision === null ? null : "rate_limit" as const,
            errorType: null, errorMessage: null, decision, leaseIds: [lease], startedAt: 1000, endedAt: 1001, durationMs: 1
          })
          // pipeline 0: a 429 retried once (attempt 2 runs on k1 because of the decision)
          yield* s.recordAttempt(att("0", 1, { retry: true, reason: "rate_limit", delayMs: 10 }, "llm/k1#1"))
          yield* s.recordAttempt(att("0", 2, null, "llm/k1#2"))
          // pipeline 1: attempt 1 given up, attempt 2 killed in flight (no row), attempt 3 run on the resume
          yield* s.recordAttempt(att("1", 1, { retry: false, reason: "fatal", delayMs: null }, "llm/k1#3"))
          yield* s.recordAttempt(att("1", 3, null, "llm/k1#4"))
          yield* s.finishRun(runId, { status: "completed", endedAt: 2000 })
        }))
      const r = yield* Report.reportPaths([retries], { runId: "k" })
      assert.strictEqual(r.attempts, 4)
      assert.strictEqual(r.retries, 1)
      assert.deepStrictEqual(r.resources.map((x) => [x.resourceId, x.attempts, x.retries]), [["k1", 4, 1]])
      assert.match(Report.renderText(r), /Attempts: 4 {2}Retries: 1/)
    }).pipe(Effect.provide(StoreResolver.layerOpener())))
})

describe("Report (a run's pipelines another run admitted again, break39 F2)", () => {
  it.effect("--run-id A counts A's failed and interrupted pipelines filed under run B now, shown apart (text and JSON); B and all count each row once", () =>
    Effect.gen(function*() {
      const file = nodePath.join(dir, "taken.db")
      // run A: 6 pipelines, p2 and p5 fail; p4 is interrupted by A (its event); then run B
      // admits p2, p4 and p5 again and they succeed: their rows are filed under B now
      yield* buildStore(file, [{ n: 6, runId: "A", startedAt: 1000, failEvery: 3 }], (s) =>
        Effect.gen(function*() {
          yield* s.emitEvent({ kind: "pipeline.interrupted", pipelineId: pid(4), runId: rid("A"), data: { reason: "user" }, ts: 1050 })
          yield* s.updatePipeline(pid(4), { state: "interrupted", updatedAt: 1050 })
          yield* s.openRun({ runId: rid("B"), startedAt: 2000 })
          for (const i of [2, 4, 5]) {
            yield* s.updatePipeline(pid(i), { runId: rid("B"), state: "succeeded", startedAt: 2000, endedAt: 2010, error: null, updatedAt: 2010 })
          }
          yield* s.finishRun(rid("B"), { status: "completed", endedAt: 2100 })
        }))
      const a = yield* Report.reportPaths([file], { runId: "A" })
      assert.strictEqual(a.pipelines, 6)
      assert.deepStrictEqual(a.byState, { pending: 0, running: 0, succeeded: 3, failed: 2, interrupted: 1 })
      assert.deepStrictEqual(a.taken, [{ source: file, runId: "A", filedUnder: "B", failed: 2, interrupted: 1 }])
      const text = Report.renderText(a)
      assert.include(text, "Pipelines: 6 (pending 0, running 0, succeeded 3, failed 2, interrupted 1)")
      assert.include(text, "  2 failed, 1 interrupted (admitted again by run B: filed under it now)")
      const json = JSON.parse(JSON.stringify(a)) as { taken: unknown; byState: { failed: number } }
      assert.deepStrictEqual(json.taken, [{ source: file, runId: "A", filedUnder: "B", failed: 2, interrupted: 1 }])
      assert.strictEqual(json.byState.failed, 2)
      // B's report: its three rows, nothing taken from it
      const b = yield* Report.reportPaths([file], { runId: "B" })
      assert.strictEqual(b.pipelines, 3)
      assert.deepStrictEqual(b.byState, { pending: 0, running: 0, succeeded: 3, failed: 0, interrupted: 0 })
      assert.deepStrictEqual(b.taken, [])
      assert.notInclude(Report.renderText(b), "admitted again")
      // every run: each row once, under the run it is filed under
      const all = yield* Report.reportPaths([file], { runId: "all" })
      assert.strictEqual(all.pipelines, 6)
      assert.deepStrictEqual(all.byState, { pending: 0, running: 0, succeeded: 6, failed: 0, interrupted: 0 })
      assert.deepStrictEqual(all.taken, [])
      // two copies of the store: each pipeline once
      const twice = yield* Report.reportPaths([file, file], { runId: "A" })
      assert.strictEqual(twice.pipelines, 6)
      assert.deepStrictEqual(twice.byState, { pending: 0, running: 0, succeeded: 3, failed: 2, interrupted: 1 })
      assert.deepStrictEqual(twice.taken, [{ source: file, runId: "A", filedUnder: "B", failed: 2, interrupted: 1 }])
    }).pipe(Effect.provide(StoreResolver.layerOpener())))
})

describe("Report (pipelines in flight when a run died, issue 18 F3)", () => {
  it.effect("per dead run: how many, and at most its concurrency may have had a call in progress; no attempt counted", () =>
    Effect.gen(function*() {
      const killed = nodePath.join(dir, "killed.db")
      yield* buildStore(killed, [], (s) =>
        Effect.gen(function*() {
          // the dead run (kill -9: never finished), then the run that claimed its pipelines
          yield* s.openRun({ runId: rid("dead"), startedAt: 1000, config: { concurrency: 3 } })
          yield* s.openRun({ runId: rid("resume"), startedAt: 5000, config: { concurrency: 3 } })
          for (let i = 0; i < 5; i++) {
            yield* s.emitEvent({
              kind: "pipeline.abandoned",
              pipelineId: pid(i),
              runId: rid("resume"),
              data: { run: "dead", task: "t0", seq: 0, attemptNo: 1 },
              ts: 5001
            })
          }
          // a dead run whose record is gone: its concurrency is unknown
          yield* s.emitEvent({
            kind: "pipeline.abandoned",
            pipelineId: pid(7),
            runId: rid("resume"),
            data: { run: "vanished", task: "t0", seq: 0, attemptNo: 2 },
            ts: 5002
          })
          yield* s.finishRun(rid("resume"), { status: "completed", endedAt: 6000 })
        }))
      const latest = yield* Report.reportPaths([killed])
      assert.deepStrictEqual(latest.inFlightAtStop, [
        { source: killed, runId: "dead", pipelines: 5, concurrency: 3, leasedPools: [], poolCapacity: null, mayHaveCalled: 3, claimedBy: ["resume"], legacyRows: 0 },
        { source: killed, runId: "vanished", pipelines: 1, concurrency: null, leasedPools: [], poolCapacity: null, mayHaveCalled: 1, claimedBy: ["resume"], legacyRows: 0 }
      ])
      assert.strictEqual(latest.attempts, 0)
      const text = Report.renderText(latest)
      assert.include(
        text,
        "In flight when run dead stopped: 5 pipelines (claimed by run resume, which ran them again); up to 3 of them (the run's " +
          "concurrency is 3) may have had a call in progress, made and maybe paid for, its answer lost; no attempt is recorded for them"
      )
      assert.include(text, "In flight when run vanished stopped: 1 pipeline (claimed by run resume, which ran them again); each of them")
      // the dead run's own report says it too (the events are the claiming run's)
      const dead = yield* Report.reportPaths([killed], { runId: "dead" })
      assert.deepStrictEqual(dead.inFlightAtStop.map((f) => [f.runId, f.pipelines]), [["dead", 5]])
    }).pipe(Effect.provide(StoreResolver.layerOpener())))

  it.effect("bounded by the capacity of the pools its calls leased when that is below its concurrency (2 leases, concurrency 8)", () =>
    Effect.gen(function*() {
      const narrow = nodePath.join(dir, "killed-narrow.db")
      yield* buildStore(narrow, [], (s) =>
        Effect.gen(function*() {
          const dead = rid("dead")
          yield* s.openRun({ runId: dead, startedAt: 1000, config: { concurrency: 8 } })
          for (const r of ["k1", "k2"]) {
            yield* s.putResource({ pool: "llm", resourceId: r, kind: "chat", spec: { capacity: 1 }, health: { state: "ready", capacity: 1 }, updatedAt: 1 })
          }
          yield* s.recordAttempt({
            pipelineId: pid(9), runId: dead, taskRunId: "9/0", taskName: "ask", seq: 0, attemptNo: 1, outcome: "succeeded",
            errorClass: null, errorType: null, errorMessage: null, decision: null, leaseIds: ["llm/k1#1"], startedAt: 1000, endedAt: 1001, durationMs: 1
          })
          yield* s.openRun({ runId: rid("resume"), startedAt: 5000, config: { concurrency: 8 } })
          for (let i = 0; i < 6; i++) {
            yield* s.emitEvent({ kind: "pipeline.abandoned", pipelineId: pid(i), runId: rid("resume"), data: { run: "dead", task: "ask", seq: 0, attemptNo: 1 }, ts: 5001 })
          }
          yield* s.finishRun(rid("resume"), { status: "completed", endedAt: 6000 })
        }))
      const r = yield* Report.reportPaths([narrow])
      assert.deepStrictEqual(
        r.inFlightAtStop.map((f) => [f.runId, f.pipelines, f.concurrency, f.leasedPools, f.poolCapacity, f.mayHaveCalled]),
        [["dead", 6, 8, ["llm"], 2, 2]]
      )
      assert.include(
        Report.renderText(r),
        "up to 2 of them (the pool llm its calls leased holds 2 leases at once; the run's concurrency is 8) may have had a call in progress"
      )
    }).pipe(Effect.provide(StoreResolver.layerOpener())))

  it.effect("a store written before (Abandoned attempt rows, no event): reported the same way, not counted as attempts", () =>
    Effect.gen(function*() {
      const legacy = nodePath.join(dir, "legacy.db")
      const abandonedRow = (runId: ReturnType<typeof rid>, i: number) => ({
        pipelineId: pid(i), runId, taskRunId: `p${i}:0:abandoned:5000`, taskName: "t0", seq: 0, attemptNo: 1,
        outcome: "cancelled" as const, errorClass: "cancelled" as const, errorType: "Abandoned",
        errorMessage: "attempt abandoned: its run died (no heartbeat) with this attempt next; it may not have started",
        decision: null, leaseIds: [], startedAt: 5000, endedAt: 5000, durationMs: 0
      })
      const ran = (runId: ReturnType<typeof rid>, i: number) => ({
        ...abandonedRow(runId, i), taskRunId: `p${i}:0`, outcome: "succeeded" as const, errorClass: null, errorType: null,
        errorMessage: null, leaseIds: [`llm/k1#${i}`]
      })
      yield* buildStore(legacy, [], (s) =>
        Effect.gen(function*() {
          yield* s.openRun({ runId: rid("dead"), startedAt: 1000, config: { concurrency: 2 } })
          const resume = rid("old-resume")
          yield* s.openRun({ runId: resume, startedAt: 5000 })
          // what a resume before 0.12 wrote: the stale run marked, one Abandoned row per claimed pipeline
          yield* s.emitEvent({ kind: "run.stale_interrupted", pipelineId: null, runId: resume, data: { staleRunId: "dead", heartbeatAt: 1500 }, ts: 5000 })
          for (let i = 0; i < 3; i++) {
            yield* s.recordAttempt(abandonedRow(resume, i))
            yield* s.recordAttempt(ran(resume, i))
          }
          yield* s.finishRun(resume, { status: "completed", endedAt: 6000 })
        }))
      const r = yield* Report.reportPaths([legacy])
      assert.strictEqual(r.attempts, 3)
      assert.deepStrictEqual(r.inFlightAtStop, [
        { source: legacy, runId: "dead", pipelines: 3, concurrency: 2, leasedPools: [], poolCapacity: null, mayHaveCalled: 2, claimedBy: ["old-resume"], legacyRows: 3 }
      ])
      assert.include(
        Report.renderText(r),
        "In flight when run dead stopped: 3 pipelines (claimed by run old-resume, which ran them again); up to 2 of them (the run's " +
          "concurrency is 2) may have had a call in progress, made and maybe paid for, its answer lost; an earlier assay recorded 3 " +
          "Abandoned attempt row(s) for them, not counted in Attempts above (an export lists them)"
      )
      assert.match(Report.renderText(r), /Attempts: 3 /)
      // the dead run's own report: the line, and nothing subtracted from its own attempts
      const dead = yield* Report.reportPaths([legacy], { runId: "dead" })
      assert.strictEqual(dead.attempts, 0)
      assert.deepStrictEqual(dead.inFlightAtStop.map((f) => [f.runId, f.pipelines, f.legacyRows]), [["dead", 3, 3]])
    }).pipe(Effect.provide(StoreResolver.layerOpener())))
})

describe("Report (call cache figures from the attempt rows, issue 18 N2)", () => {
  it.effect("a run killed with kill -9: its hits and misses are its rows, not its last heartbeat; --run-id all keeps them after a resume; /stats and watch agree", () =>
    Effect.gen(function*() {
      const killed = nodePath.join(dir, "cache-killed.db")
      const note = (status: string, extra: Record<string, unknown> = {}) => ({ status, key: "0123456789abcdef", ...extra })
      const att = (runId: ReturnType<typeof rid>, i: number, attemptNo: number, outcome: "succeeded" | "failed" | "cache_hit", decision: unknown) => ({
        pipelineId: pid(i), runId, taskRunId: `${i}/0`, taskName: "ask", seq: 0, attemptNo, outcome,
        errorClass: outcome === "failed" ? "rate_limit" as const : null, errorType: null, errorMessage: null, decision,
        leaseIds: outcome === "cache_hit" ? [] : ["llm/k1#1"], startedAt: 1000, endedAt: 1001, durationMs: 1
      })
      const hitUsage = { promptTokens: 10, completionTokens: 5, totalTokens: 15, costUsd: 0.25 }
      yield* buildStore(killed, [], (s) =>
        Effect.gen(function*() {
          const dead = rid("dead")
          yield* s.openRun({ runId: dead, startedAt: 1000, config: { concurrency: 8 } })
          // the killed run: 4 calls made (one failed with a 429, then retried), 1 hit, 1 write that failed
          yield* s.recordAttempt(att(dead, 0, 1, "succeeded", { retry: false, reason: "ok", cache: note("miss") }))
          yield* s.recordAttempt(att(dead, 1, 1, "failed", { retry: true, reason: "rate_limit", delayMs: 10, cache: note("miss") }))
          yield* s.recordAttempt(att(dead, 1, 2, "succeeded", { retry: false, reason: "ok", cache: note("miss", { stored: false }) }))
          yield* s.recordAttempt(att(dead, 2, 1, "cache_hit", { retry: false, reason: "ok", cache: note("hit", { usage: hitUsage }) }))
          // a heartbeat's figures as runs before 0.12.0 wrote them (one behind: what report showed
          // before it counted the attempt rows; no run writes this event any more)
          yield* s.emitEvent({ kind: "cache.stats", pipelineId: null, runId: dead, data: { cache: { hits: 0, misses: 1 } }, ts: 1500 })
          const resume = rid("resume")
          yield* s.openRun({ runId: resume, startedAt: 5000, config: { concurrency: 8 } })
          yield* s.recordAttempt(att(resume, 3, 1, "succeeded", { retry: false, reason: "ok", cache: note("miss") }))
          yield* s.recordAttempt(att(resume, 4, 1, "cache_hit", { retry: false, reason: "ok", cache: note("hit", { usage: hitUsage }) }))
          yield* s.emitEvent({ kind: "run.finished", pipelineId: null, runId: resume, data: { cache: { hits: 1, misses: 1 } }, ts: 6000 })
          yield* s.finishRun(resume, { status: "completed", endedAt: 6000 })
        }))
      const dead = yield* Report.reportPaths([killed], { runId: "dead" })
      assert.deepStrictEqual(
        [dead.cache.hits, dead.cache.misses, dead.cache.writeFailures, dead.cache.costSavedUsd, dead.cache.tokensSaved.totalTokens],
        [1, 3, 1, 0.25, 15]
      )
      assert.include(Report.renderText(dead), "Call cache: hits 1, misses 3")
      const all = yield* Report.reportPaths([killed], { runId: "all" })
      assert.deepStrictEqual([all.cache.hits, all.cache.misses, all.cache.costSavedUsd], [2, 4, 0.5])
      assert.include(Report.renderText(all), "Call cache: hits 2, misses 4")
      assert.strictEqual(JSON.parse(JSON.stringify(all)).cache.misses, 4)
      // what /stats serves and watch draws, from the same rows
      const snap = yield* Effect.scoped(
        Effect.flatMap(
          Effect.flatMap(Layer.build(SqliteStore.layerReadOnly(killed)), (ctx) => Effect.succeed(Context.get(ctx, Store))),
          (store) => Effect.zip(Monitor.readSnapshot(store, { runId: "all" }), Monitor.readSnapshot(store, { runId: "dead" }))
        )
      )
      assert.deepStrictEqual([snap[0].cache?.hits, snap[0].cache?.misses], [2, 4])
      assert.deepStrictEqual([snap[1].cache?.hits, snap[1].cache?.misses, snap[1].cache?.write_failures], [1, 3, 1])
      assert.include(Monitor.renderSnapshot(snap[0], { width: 200 }), "call cache: hits 2 · misses 4")
    }).pipe(Effect.provide(StoreResolver.layerOpener())))
})

layer(Built, { excludeTestServices: true })("Report", (it) => {
  it.effect("latest run by default, an explicit run, all runs; unknown run is a ConfigError", () =>
    Effect.gen(function*() {
      const latest = yield* Report.reportPaths([file])
      assert.deepStrictEqual(latest.runs.map((r) => r.runId), ["zombie"])
      const one = yield* Report.reportPaths([file], { runId: "new" })
      assert.strictEqual(one.pipelines, 10)
      assert.strictEqual(one.byState.failed, 2)
      // the fixture's failed attempts are numbered 2 but follow no decision to retry: no retries
      assert.strictEqual(one.retries, 0)
      assert.deepStrictEqual(one.resources.map((r) => [r.resourceId, r.rateLimited, r.retries]), [["k1", 2, 0]])
      assert.deepStrictEqual(one.metrics.map((m) => m.text), ["87.5%"])
      assert.strictEqual(one.errors.length, 2)
      assert.deepStrictEqual(one.repairFailures, { count: 1, pipelines: [{ pipelineId: pid(4), phases: ["mark_final", "settle"], source: file }] })
      const text = Report.renderText(one)
      assert.match(text, /Terminal repair failures: 1 pipeline\(s\)/)
      assert.match(text, /87\.5%/)
      const all = yield* Report.reportPaths([file], { runId: "all" })
      assert.deepStrictEqual(all.runs.map((r) => r.runId), ["old", "new", "zombie"])
      assert.strictEqual(all.pipelines, 10) // p0..p3 re-owned by "new"
      // metrics of several runs say which run they belong to; a one-run report does not
      const allText = Report.renderText(all)
      assert.match(allText, /accuracy \(run old\): 50\.0%/)
      assert.match(allText, /accuracy \(run new\): 87\.5%/)
      assert.notInclude(text, "(run ")
      const e = yield* Effect.flip(Report.reportPaths([file], { runId: "nope" }))
      assert.strictEqual(e._tag, "ConfigError")
      // JSON output shape
      assert.deepStrictEqual(Object.keys(JSON.parse(JSON.stringify(one))).sort(), [
        "accounting", "attempts", "byState", "cache", "duplicates", "errors", "handoffsBudgeted", "handoffsTotal", "inFlightAtStop", "latencyMs", "leasesLost", "metrics", "pipelines", "repairFailures", "resources", "retries", "runs", "selection", "stores", "taken", "tasks", "walPending"
      ])
    }))

  it.effect("two copies of one store: pipelines and repair failures counted once", () =>
    Effect.gen(function*() {
      const r = yield* Report.reportPaths([file, file], { runId: "new" })
      assert.strictEqual(r.pipelines, 10)
      assert.strictEqual(r.duplicates, 10)
      assert.strictEqual(r.repairFailures.count, 1)
    }))

  it.effect("report never modifies the store file", () =>
    Effect.gen(function*() {
      const bytes = fs.readFileSync(file)
      const mtime = fs.statSync(file).mtimeMs
      yield* Report.reportPaths([file], { runId: "all" })
      assert.isTrue(bytes.equals(fs.readFileSync(file)))
      assert.strictEqual(fs.statSync(file).mtimeMs, mtime)
    }))
})
