import { assert, describe, it, expect } from "@effect/vitest"
import { Effect, Exit, Layer, Option, TestClock } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import type { PipelineState } from "../../src/domain/Records.js"
import * as Monitor from "../../src/services/internal/monitor.js"
import * as Dashboard from "../../src/services/Dashboard.js"
import { type PipelineFields, Store } from "../../src/services/Store.js"
import { pid, rid } from "../support/ids.js"

const row = (runId: string, i: number, state: PipelineState, endedAt: number | null, message?: string): PipelineFields => ({
  pipelineId: pid(`${runId}-p${String(i).padStart(3, "0")}`),
  key: null,
  name: "t",
  state,
  nTasksDone: state === "succeeded" ? 1 : 0,
  nTasksTotal: 1,
  specDigest: "s",
  seedDigest: `d${i}`,
  tags: {},
  attemptsTotal: 1,
  runId: rid(runId),
  createdAt: 1000 + i,
  updatedAt: endedAt ?? 1000 + i,
  startedAt: 1000 + i,
  endedAt,
  failedTask: state === "failed" ? "ask" : null,
  errorType: state === "failed" ? "FatalError" : null,
  errorMessage: state === "failed" ? (message ?? "bad") : null,
  errorClass: state === "failed" ? "fatal" : null
})

/** Run "old" (finished, 3 pipelines) and run "new" started at 1000 ms, 100 pipelines planned. */
const seed = Effect.gen(function*() {
  const store = yield* Store
  yield* store.openRun({ runId: rid("old"), startedAt: 0 })
  yield* store.admit([row("old", 0, "succeeded", 10), row("old", 1, "succeeded", 20), row("old", 2, "failed", 30)])
  yield* store.reportMetric({ runId: rid("old"), pipelineId: null, name: "acc", value: 0.5, display: "percent", updatedAt: 30 })
  yield* store.finishRun(rid("old"), { status: "completed", endedAt: 40 })
  yield* store.openRun({ runId: rid("new"), startedAt: 1000, meta: { total: 100 } })
  // 10 pipelines finished per second over the first 4 s; one failure with control characters
  const ps: Array<PipelineFields> = []
  for (let i = 0; i < 40; i++) {
    ps.push(row("new", i, i === 7 ? "failed" : "succeeded", 1000 + Math.floor(i / 10) * 1000 + 500, "boom\u001b[31m\nnext"))
  }
  ps.push(row("new", 40, "running", null), row("new", 41, "pending", null))
  yield* store.admit(ps)
  yield* store.reportMetric({ runId: rid("new"), pipelineId: null, name: "evaluated", value: 40, label: "Evaluated", updatedAt: 4000 })
  yield* store.reportMetric({ runId: rid("new"), pipelineId: pid("new-p001"), name: "score", value: 1, updatedAt: 4000 })
  return store
})

describe("Monitor", () => {
  it.effect("latest run: counts, progress, throughput series, recent rate and ETA from Clock", () =>
    Effect.gen(function*() {
      const store = yield* seed
      yield* TestClock.setTime(5000)
      const s = yield* Monitor.readSnapshot(store)
      assert.strictEqual(s.run_id, "new")
      assert.strictEqual(s.selection, "latest")
      assert.isTrue(s.running)
      assert.strictEqual(s.done, 40)
      assert.strictEqual(s.total, 100)
      assert.strictEqual(s.progress, 0.4)
      assert.strictEqual(s.elapsed_ms, 4000)
      assert.strictEqual(s.throughput.bucket_ms, 1000)
      assert.deepStrictEqual(s.throughput.series, [[1000, 10], [2000, 10], [3000, 10], [4000, 10], [5000, 0]])
      assert.strictEqual(s.throughput.per_sec, 10)
      assert.strictEqual(s.throughput.recent_per_sec, 10)
      assert.strictEqual(s.eta_ms, 6000)
      assert.deepStrictEqual(s.metrics.map((m) => [m.name, m.value, m.pipeline_id]), [["evaluated", 40, null]])
      assert.strictEqual(s.recent_errors.length, 1)
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("accounting: the selection's tokens and cost (the dashboard's tokens / cost figure), absent without usage", () =>
    Effect.gen(function*() {
      const store = yield* seed
      yield* TestClock.setTime(5000)
      assert.isUndefined((yield* Monitor.readSnapshot(store)).accounting, "no attempt carried usage")
      const attempt = (runId: string, i: number, over: Record<string, unknown>) => ({
        pipelineId: pid(`${runId}-p${String(i).padStart(3, "0")}`),
        runId: rid(runId),
        taskRunId: `${runId}-${i}`,
        taskName: "ask",
        seq: 0,
        attemptNo: 1,
        outcome: "succeeded" as const,
        errorClass: null,
        errorType: null,
        errorMessage: null,
        decision: null,
        leaseIds: ["llm/k#1"],
        startedAt: 1000,
        endedAt: 1100,
        durationMs: 100,
        ...over
      })
      // a call the provider refused with a 429 (no tokens) is a call sent (tester18c F4)
      yield* store.recordAttempt(attempt("new", 0, { taskRunId: "new-0", outcome: "failed", errorClass: "rate_limit", leaseIds: ["llm/k#3"] }))
      // the first attempt leased two resources: two calls (each lease, as a study trial counts
      // them), its tokens once in the selection's figures
      yield* store.recordAttempt(
        attempt("new", 0, { model: "m", tokensIn: 100, tokensOut: 20, costUsd: 0.0004, leaseIds: ["llm/k#1", "llm/j#2"] })
      )
      yield* store.recordAttempt(attempt("new", 1, { model: "m", tokensIn: 8, tokensOut: 2, tokensEstimated: true }))
      yield* store.recordAttempt(attempt("new", 1, { taskRunId: "new-1b", outcome: "cache_hit", leaseIds: [] }))
      yield* store.recordAttempt(attempt("old", 0, { model: "m", tokensIn: 1000, tokensOut: 1000, costUsd: 1 }))
      for (const r of ["k", "j", "z"]) {
        yield* store.putResource({ pool: "llm", resourceId: r, kind: "llm", spec: {}, health: { state: "ready" }, updatedAt: 1 })
      }
      const latest = yield* Monitor.readSnapshot(store)
      assert.deepStrictEqual(latest.accounting, {
        calls: 4,
        refused: 1,
        failed_calls: 0,
        cache_hits: 1,
        model_call_hits: 0,
        tokens_in: 108,
        tokens_out: 22,
        cost_usd: 0.0004,
        estimated: 1,
        unpriced: 1
      })
      const page = Dashboard.renderDashboard(latest)
      assert.include(page, `<b id="cost">calls 4 (3 answered, 1 refused with 429) · 108 in / 22 out (1 estimated) · &gt;= $0.0004 (1 attempt unpriced)</b>`)
      // the page's script says the calls the same way when it refreshes
      assert.include(page, `" refused with 429"`)
      // watch: the same figures on a line of their own
      assert.include(
        Monitor.renderSnapshot(latest, { width: 200 }),
        "model calls 4 (3 answered, 1 refused with 429) · tokens in 108, out 22 (1 estimated) · cost >= $0.0004 (1 attempt unpriced)"
      )
      // each resource: what the selection's attempts that leased it spent (k: a priced and an
      // unpriced call, a lower bound; j: the priced one; z: none), in the pools table too
      assert.deepStrictEqual(latest.resources.map((r) => [r.resource_id, r.accounting]), [
        ["k", { attempts: 3, tokens_in: 108, tokens_out: 22, cost_usd: 0.0004, estimated: 1, unpriced: 1 }],
        ["j", { attempts: 1, tokens_in: 100, tokens_out: 20, cost_usd: 0.0004, estimated: 0, unpriced: 0 }],
        ["z", null]
      ])
      assert.include(page, `<td class="cost">108 in / 22 out · &gt;= $0.0004 (1 attempt unpriced)</td>`)
      assert.include(page, `<td class="cost">100 in / 20 out · $0.0004</td>`)
      assert.include(page, `<td class="cost">\u2013</td>`)
      // the pipelines view: each row's own figures (one aggregate per page); none without calls
      const rows = (yield* Monitor.storeReads(store).pipelinesPage({ runId: rid("new"), after: undefined, limit: 3 })).rows
      assert.deepStrictEqual(rows.map((r) => [r.pipeline_id, r.accounting]), [
        ["new-p000", { calls: 3, refused: 1, failed_calls: 0, cache_hits: 0, model_call_hits: 0, tokens_in: 100, tokens_out: 20, cost_usd: 0.0004, estimated: 0, unpriced: 0 }],
        // its only call had no price: its cost is unknown (null), not $0
        ["new-p001", { calls: 1, refused: 0, failed_calls: 0, cache_hits: 1, model_call_hits: 0, tokens_in: 8, tokens_out: 2, cost_usd: null, estimated: 1, unpriced: 1 }],
        ["new-p002", undefined]
      ])
      const all = yield* Monitor.readSnapshot(store, { runId: "all" })
      assert.strictEqual(all.accounting?.tokens_in, 1108)
      // the whole store: the old run's priced call on k too
      assert.deepStrictEqual(all.resources.find((r) => r.resource_id === "k")?.accounting, {
        attempts: 4, tokens_in: 1108, tokens_out: 1022, cost_usd: 1.0004, estimated: 1, unpriced: 1
      })
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("the dashboard's cache figure has the refreshed calls and the read-only misses, as report says them (tester18c F5)", () =>
    Effect.gen(function*() {
      const store = yield* seed
      yield* TestClock.setTime(5000)
      const note = (i: number, status: string) => ({
        pipelineId: pid(`new-p${String(i).padStart(3, "0")}`),
        runId: rid("new"),
        taskRunId: `new-${i}`,
        taskName: "ask",
        seq: 0,
        attemptNo: 1,
        outcome: "succeeded" as const,
        errorClass: null,
        errorType: null,
        errorMessage: null,
        decision: { cache: { status } },
        leaseIds: ["llm/k#1"],
        startedAt: 1000,
        endedAt: 1100,
        durationMs: 100
      })
      yield* store.recordAttempt(note(0, "miss"))
      yield* store.recordAttempt(note(1, "refresh"))
      yield* store.recordAttempt(note(2, "refresh"))
      yield* store.recordAttempt(note(3, "bypass"))
      const page = Dashboard.renderDashboard(yield* Monitor.readSnapshot(store))
      assert.include(page, `<b id="cache">0 / 1 · refreshed 2 · read-only misses 1 (0 tokens saved)</b>`)
      // and the page's script when it refreshes
      assert.include(page, `" · read-only misses "`)
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("explicit run, `all` without metrics, unknown run, empty store", () =>
    Effect.gen(function*() {
      const store = yield* seed
      yield* TestClock.setTime(5000)
      const old = yield* Monitor.readSnapshot(store, { runId: "old" })
      assert.strictEqual(old.selection, "run")
      assert.strictEqual(old.pipelines.total, 3)
      assert.isFalse(old.running)
      assert.isNull(old.eta_ms)
      assert.deepStrictEqual(old.metrics.map((m) => m.name), ["acc"])
      const all = yield* Monitor.readSnapshot(store, { runId: "all" })
      assert.strictEqual(all.run_id, "all")
      assert.strictEqual(all.pipelines.total, 45)
      // the whole store shows the metrics of its latest run that reported any
      assert.strictEqual(all.metrics_run_id, "new")
      assert.deepStrictEqual(all.metrics.map((m) => [m.run_id, m.name]), [["new", "evaluated"]])
      // the largest source size a run recorded
      assert.strictEqual(all.total, 100)
      assert.strictEqual(all.done, 43)
      assert.deepStrictEqual(all.recent_runs.map((r) => r.run_id), ["new", "old"])
      assert.strictEqual(all.latest_run?.run_id, "new")
      const exit = yield* Effect.exit(Monitor.readSnapshot(store, { runId: "nope" }))
      assert.isTrue(Exit.isFailure(exit) && JSON.stringify(exit).includes("UnknownRun"))
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("an empty store has no run: nothing selected, watch keeps waiting", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const s = yield* Monitor.readSnapshot(store)
      assert.isNull(s.run_id)
      assert.isFalse(Monitor.isOver(s))
      assert.strictEqual(Monitor.renderLine(s), "no run yet")
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("isOver: a finished run, or a running one whose heartbeat is older than staleAfter", () =>
    Effect.gen(function*() {
      const store = yield* seed
      yield* TestClock.setTime(5000)
      assert.isTrue(Monitor.isOver(yield* Monitor.readSnapshot(store, { runId: "old" })))
      assert.isFalse(Monitor.isOver(yield* Monitor.readSnapshot(store)))
      yield* TestClock.setTime(1000 + 31_000) // heartbeat at 1000, default staleAfter 30 s
      assert.isTrue(Monitor.isOver(yield* Monitor.readSnapshot(store)))
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("renderSnapshot: plain text without colour, control characters of stored text removed", () =>
    Effect.gen(function*() {
      const store = yield* seed
      yield* TestClock.setTime(5000)
      const s = yield* Monitor.readSnapshot(store)
      const plain = Monitor.renderSnapshot(s, { width: 120, color: false })
      assert.notInclude(plain, "\u001b")
      assert.include(plain, "40/100 40.0%")
      assert.include(plain, "ETA 6s")
      assert.include(plain, "pipelines 42: 39 succeeded · 1 failed · 0 interrupted · 1 admitted · 1 pending")
      assert.include(plain, "Evaluated: 40")
      assert.include(plain, "FatalError: boom [31m next")
      for (const line of plain.trimEnd().split("\n")) assert.isAtMost(line.length, 120)
      const colored = Monitor.renderSnapshot(s, { width: 120, color: true })
      assert.include(colored, "\u001b[32m39 succeeded\u001b[0m")
      assert.strictEqual(Monitor.renderLine(s), "run new running: 40/100 done (40.0%) · 1 failed · 1 admitted · 10.0/s · ETA 6s")
      assert.include(plain, "new-p007 ask: FatalError", "full pipeline ids")
      // admission to end includes waiting for a worker slot: never called the pipelines' latency
      assert.isNotNull(s.latency_ms)
      assert.match(plain, / · time in run \(incl\. queueing\) p50 \S+ p95 \S+ p99 \S+/)
      assert.notInclude(plain, "latency p50")
      const page = Dashboard.renderDashboard(s)
      assert.include(page, "time in run p50/p95/p99 (incl. queueing) <b id=\"latency\">")
      assert.notInclude(page, ">latency p50/p95/p99")
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("renderSnapshot (watch): each resource's learned adaptive rate and window, as report and the dashboard show them", () =>
    Effect.gen(function*() {
      const store = yield* seed
      const adaptive = { rate: 31.5, sustained: 24.6, concurrency: 6, phase: "avoidance", pacedBy: "aimd", decreases: 2, lastDecrease: { reason: "rate_limit", at: 3000 } }
      yield* store.putResource({
        pool: "llm", resourceId: "k1", kind: "chat", spec: {}, health: { state: "ready", active: 3, capacity: 8, algorithm: { adaptive } }, updatedAt: 4000
      })
      yield* store.putResource({ pool: "llm", resourceId: "k2", kind: "chat", spec: {}, health: { state: "ready", active: 0, capacity: 8 }, updatedAt: 4000 })
      yield* TestClock.setTime(5000)
      const s = yield* Monitor.readSnapshot(store)
      const plain = Monitor.renderSnapshot(s, { width: 200, color: false })
      const k1 = plain.split("\n").find((l) => l.includes("llm/k1"))!
      const k2 = plain.split("\n").find((l) => l.includes("llm/k2"))!
      assert.include(k1, s.resources.find((r) => r.resource_id === "k1")!.algorithm_text)
      assert.match(k1, / · adaptive delivered 24\.6 req\/s lately, allows 31\.5 req\/s now, 6 at once; cut 2× /)
      assert.notInclude(k2, "adaptive")
      // a piped watch prints this line every frame: it carries the state too, not only the
      // last frame's full picture (tester18c F8)
      const line = Monitor.renderLine(s)
      assert.include(line, ` · llm/k1 ${s.resources.find((r) => r.resource_id === "k1")!.algorithm_text}`)
      assert.notInclude(line, "llm/k2")
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("storeReads pages by key: pages are disjoint, ordered, complete, with pipeline metrics", () =>
    Effect.gen(function*() {
      const store = yield* seed
      const reads = Monitor.storeReads(store)
      const ids: Array<string> = []
      let after: Monitor.PipelineCursor | undefined
      do {
        const page = yield* reads.pipelinesPage({ runId: rid("new"), after, limit: 7 })
        ids.push(...page.rows.map((r) => r.pipeline_id))
        const one = page.rows.find((r) => r.pipeline_id === "new-p001")
        if (one !== undefined) assert.deepStrictEqual(one.reported_metrics.map((m) => m.name), ["score"])
        after = page.next ?? undefined
      } while (after !== undefined)
      assert.strictEqual(ids.length, 42)
      assert.deepStrictEqual(ids, [...ids].sort())
      const token = Monitor.encodeCursor({ createdAt: 1005, pipelineId: pid("new-p005") })
      expect(Monitor.decodeCursor(token)).toStrictEqual(Option.some({ createdAt: 1005, pipelineId: "new-p005" }))
      assert.isTrue(Option.isNone(Monitor.decodeCursor("garbage")))
      assert.isTrue(Option.isNone(Monitor.decodeCursor(Buffer.from("[1]").toString("base64url"))))
    }).pipe(Effect.provide(MemoryStore.layer())))
})

describe("Monitor: stale runs and interrupted pipelines", () => {
  it.effect("a run whose writer died shows as stale (as report does), never `running 0.00/s`", () =>
    Effect.gen(function*() {
      const store = yield* seed
      // the writer of "new" died at 4.5 s (its last heartbeat); 40 s later
      yield* store.heartbeat(rid("new"), 4500)
      yield* TestClock.setTime(44_500)
      const s = yield* Monitor.readSnapshot(store)
      assert.isFalse(s.running)
      assert.isTrue(s.stale)
      assert.isTrue(s.run?.stale)
      // the JSON (serve's /stats) never says `running` beside `stale: true`
      assert.deepStrictEqual([s.run?.status, s.run?.stored_status], ["stale", "running"])
      assert.deepStrictEqual([s.latest_run?.status, s.latest_run?.stale], ["stale", true])
      assert.isFalse(s.recent_runs.some((r) => r.status === "running"))
      assert.isNull(s.eta_ms, "no ETA for a dead run")
      assert.isTrue(Monitor.isOver(s))
      const line = Monitor.renderLine(s)
      assert.notInclude(line, "running")
      assert.notInclude(line, "0.00/s")
      assert.match(line, /^run new stale \(no heartbeat since \d\d:\d\d:\d\d: its writer is gone; resume continues it\): 40\/100 done/)
      // the rate is the run's own (up to its last heartbeat), not diluted by the time since:
      // 40 pipelines from its start (1 s) to its last heartbeat (4.5 s)
      assert.include(line, "11.4/s", line)
      const picture = Monitor.renderSnapshot(s, { width: 160 })
      assert.include(picture, "run new · stale (no heartbeat since")
      assert.notInclude(picture.split("\n")[0]!, "running")
      // the whole store: no run is alive
      const all = yield* Monitor.readSnapshot(store, { runId: "all" })
      assert.isFalse(all.running)
      assert.isTrue(all.stale)
      assert.include(Monitor.renderLine(all), "all runs (2) stale:")
    }).pipe(Effect.provide(MemoryStore.layer())))

  it.effect("interrupted pipelines are not done: a stopped run never reads 100%", () =>
    Effect.gen(function*() {
      const store = yield* Store
      yield* store.openRun({ runId: rid("stopped"), startedAt: 0, meta: { total: 16 } })
      yield* store.admit(Array.from({ length: 16 }, (_, i) => row("stopped", i, i < 4 ? "succeeded" : "interrupted", 100 + i)))
      yield* store.finishRun(rid("stopped"), { status: "interrupted", endedAt: 2000, stopReason: "sigint" })
      yield* TestClock.setTime(3000)
      const s = yield* Monitor.readSnapshot(store)
      assert.strictEqual(s.done, 4)
      assert.strictEqual(s.progress, 0.25)
      assert.strictEqual(s.pipelines.by_state.interrupted, 12)
      assert.strictEqual(Monitor.renderLine(s), "run stopped interrupted: 4/16 done (25.0%) · 0 failed · 12 interrupted · 0 admitted · 8.00/s")
    }).pipe(Effect.provide(MemoryStore.layer())))
})

describe("Monitor: resumed runs", () => {
  it.effect("pipelines a resumed run skipped count as done (progress 100% when all are done)", () =>
    Effect.gen(function*() {
      const template = Pipeline.make("resumed", Task.sync("inc", (n: number) => n + 1))
      yield* Runner.run(template.map([1, 2, 3]))
      const second = yield* Runner.run(template.map([1, 2, 3, 4, 5]), { meta: { total: 5 } })
      assert.strictEqual(second.skipped, 3)
      const store = yield* Store
      const snap = yield* Monitor.readSnapshot(store, { runId: second.runId }, Monitor.storeReads(store))
      assert.strictEqual(snap.skipped, 3)
      assert.strictEqual(snap.done, 5)
      assert.strictEqual(snap.total, 5)
      assert.strictEqual(snap.progress, 1)
    }).pipe(Effect.provide(Layer.provideMerge(
      Runner.layer({ handleSignals: false }),
      Layer.mergeAll(MemoryStore.layer(), Pool.layer([]))
    ))))
})

describe("formatUntil", () => {
  it("a clock time only for later today; a day-long wait (even a few ms short of 24 h) shows its date", () => {
    const now = new Date(2026, 10, 30, 9, 0, 0).getTime() // 09:00 local time
    assert.strictEqual(Monitor.formatUntil(now + 3_600_000, now), "10:00:00")
    assert.strictEqual(Monitor.formatUntil(now + 86_400_000, now), new Date(now + 86_400_000).toISOString())
    assert.strictEqual(Monitor.formatUntil(now + 86_399_990, now), new Date(now + 86_399_990).toISOString())
    // past midnight is another day, even 16 h ahead; 12 h or more is never shown as a bare time
    assert.strictEqual(Monitor.formatUntil(now + 16 * 3_600_000, now), new Date(now + 16 * 3_600_000).toISOString())
    assert.strictEqual(Monitor.formatUntil(now + 12 * 3_600_000, now), new Date(now + 12 * 3_600_000).toISOString())
  })
})
