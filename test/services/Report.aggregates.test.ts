/**
 * Issue 19 §4: `report` is built from the stores' aggregates (`stats`, `resourceUsage`) and
 * reads no pipeline or attempt rows but the failed ones of one store. Every figure must stay
 * what the streaming algorithm gave (test/support/reportReference.ts): compared field for
 * field on fixture stores (every state, retried, rate-limited, multi-lease and re-run
 * attempts, several resources and runs, a stale run, repair failures), one store and several
 * (overlapping ids, a store given twice), memory, SQLite and a suite root's views.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck as fc, Layer, Stream, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import type { PipelineState } from "../../src/domain/Records.js"
import { PipelineRecord } from "../../src/domain/Records.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as SqliteStore from "../../src/layers/SqliteStore.js"
import * as SuiteStore from "../../src/layers/SuiteStore.js"
import { memberPipelineId } from "../../src/domain/Suite.js"
import { NodeFileSystem } from "@effect/platform-node"
import * as Report from "../../src/services/Report.js"
import type { NewAttempt, StoreService, TaskStore } from "../../src/services/Store.js"
import { Store } from "../../src/services/Store.js"
import { pid, rid } from "../support/ids.js"
import { referenceReport } from "../support/reportReference.js"

const STATES: ReadonlyArray<PipelineState> = ["succeeded", "failed", "interrupted", "running", "pending", "succeeded", "failed"]

/**
 * Fills a store: runs r1 (completed), r2 (interrupted), r3 (running, heartbeat old: stale);
 * `n` pipelines from `from` spread over them in every state (ties in end times, failed rows
 * without an end), attempts on pool/a and pool/b (retried, rate-limited, two leases, a
 * re-run after a kill), resources a, b, c, a metric, repair failures.
 */
const fill = (
  store: StoreService,
  from: number,
  n: number,
  shift: number,
  member?: (i: number) => { readonly id: string; readonly suiteId: string; readonly experimentId: string; readonly localKey: string },
  known = false
) =>
  Effect.gen(function*() {
    const idOf = (i: number) => pid(member === undefined ? `p${i}` : member(i).id)
    yield* store.openRun({ runId: rid("r1"), startedAt: 1000 })
    yield* store.finishRun(rid("r1"), { status: "completed", endedAt: 5000 })
    yield* store.openRun({ runId: rid("r2"), startedAt: 6000 })
    yield* store.finishRun(rid("r2"), { status: "interrupted", endedAt: 7000, stopReason: "signal" })
    yield* store.openRun({ runId: rid("r3"), startedAt: 8000 })
    const runs = [rid("r1"), rid("r2"), rid("r3")]
    const rows: Array<PipelineRecord> = []
    for (let i = from; i < from + n; i++) {
      const state = STATES[(i + shift) % STATES.length]!
      const runId = runs[i % 3]!
      const terminal = state === "succeeded" || state === "failed" || state === "interrupted"
      const m = member?.(i)
      rows.push(
        new PipelineRecord({
          ...(m === undefined ? {} : { suiteId: m.suiteId, experimentId: m.experimentId, localKey: m.localKey }),
          pipelineId: idOf(i),
          key: i % 4 === 0 ? `k${i}` : null,
          name: "demo",
          state,
          nTasksDone: terminal ? 2 : 1,
          nTasksTotal: 2,
          specDigest: "spec",
          seedDigest: `seed${i}`,
          tags: {},
          attemptsTotal: 1 + (i % 3),
          runId,
          createdAt: 100 + (i % 5),
          updatedAt: 3000 + ((i * 7 + shift) % 11),
          startedAt: i % 9 === 0 ? null : 1000 + i,
          // ties on purpose (i % 6), and failed rows without an end every so often
          endedAt: !terminal || (state === "failed" && i % 2 === 0) ? null : 2000 + (i % 6) * 10 + shift,
          failedTask: state === "failed" ? "t1" : null,
          errorType: state === "failed" ? "Boom" : null,
          errorMessage: state === "failed" ? `failed ${i}` : null,
          errorClass: state === "failed" ? "upstream" : null
        })
      )
    }
    yield* store.admit(rows)
    for (const p of rows) {
      yield* store.putTask({
        taskRunId: `${p.pipelineId}/0`, pipelineId: p.pipelineId, runId: p.runId, seq: 0, taskName: "t0", state: "succeeded",
        attemptsUsed: 1, startedAt: 1000, endedAt: 1001, durationMs: 1, errorType: null, errorMessage: null, errorClass: null, leaseIds: []
      })
      const i = rows.indexOf(p) + from
      const at = (attemptNo: number, over: Partial<NewAttempt>): NewAttempt => ({
        pipelineId: p.pipelineId, runId: p.runId, taskRunId: `${p.pipelineId}/0`, taskName: "t0", seq: 0, attemptNo,
        outcome: "succeeded", errorClass: null, errorType: null, errorMessage: null, decision: null,
        leaseIds: [`pool/${i % 2 === 0 ? "a" : "b"}#${i * 10 + attemptNo}`], startedAt: 1000, endedAt: 1001, durationMs: 1, ...over
      })
      if (i % 3 === 0) {
        // a 429 retried, then success on the other resource
        yield* store.recordAttempt(at(1, { outcome: "failed", errorClass: "rate_limit", decision: { retry: true, reason: "rate_limit", delayMs: 5 } }))
        yield* store.recordAttempt(at(2, known
          // a model call on the retry: tokens, a cost every other time, estimated every fourth
          ? { leaseIds: [`pool/b#${i}9`], tokensIn: 100 + i, tokensOut: i, costUsd: i % 2 === 0 ? 0.0001 * i : null, tokensEstimated: i % 4 === 0 }
          : { leaseIds: [`pool/b#${i}x`] }))
      } else if (i % 3 === 1) {
        // two leases on a, one on b; then a re-run after a kill (not a retry), in the next run
        yield* store.recordAttempt(at(1, { leaseIds: [`pool/a#${i}1`, `pool/a#${i}2`, `pool/b#${i}3`], outcome: "failed", decision: { retry: false, reason: "fatal", delayMs: null } }))
        yield* store.recordAttempt(at(3, { runId: runs[(i + 1) % 3]! }))
      } else {
        yield* store.recordAttempt(at(1, {}))
      }
    }
    for (const r of ["a", "b", "c"]) {
      yield* store.putResource({ pool: "pool", resourceId: r, kind: "worker", spec: {}, health: { state: "ready" }, updatedAt: 1 })
    }
    yield* store.reportMetric({ runId: rid("r1"), pipelineId: null, name: "acc", value: 0.25, display: "percent", updatedAt: 1 })
    yield* store.reportMetric({ runId: rid("r3"), pipelineId: idOf(from), name: "n", value: 3, updatedAt: 1 })
    for (const [id, runId, phase] of [[idOf(from), "r1", "settle"], [idOf(from + 1), "r3", "mark_final"], [idOf(from + 2), "r9", "settle"]] as const) {
      yield* store.emitEvent({ kind: "pipeline.terminal_repair_failed", pipelineId: pid(id), runId: rid(runId), data: { phase }, ts: 9000 })
    }
    // a pipeline no store holds (a suite routes pipeline events by member: none there)
    if (member === undefined) {
      yield* store.emitEvent({ kind: "pipeline.terminal_repair_failed", pipelineId: pid("ghost"), runId: rid("r9"), data: { phase: "settle" }, ts: 9000 })
    }
    yield* store.flush
  })

const OPTIONS: ReadonlyArray<Report.ReportOptions> = [
  {},
  { runId: "all" },
  { runId: "r1" },
  { runId: "r2", errors: 2 },
  { runId: "all", errors: 0 },
  { runId: "all", errors: 100 }
]

const tmp = () => fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-report-agg-"))

/** The same report from the aggregates and from the reference, for each option set. */
const sameReports = (
  stores: ReadonlyArray<{ readonly source: string; readonly store: TaskStore }>,
  options: ReadonlyArray<Report.ReportOptions> = OPTIONS
) =>
  Effect.gen(function*() {
    yield* TestClock.setTime(100_000) // r3's heartbeat (8000) is stale by then
    for (const o of options) {
      const got = yield* Report.buildReport(stores, o)
      const want = yield* referenceReport(stores, o)
      assert.deepStrictEqual(got, want, JSON.stringify(o))
      assert.strictEqual(Report.renderText(got), Report.renderText(want))
    }
  })

const sqliteAt = (file: string) => SqliteStore.layer({ filename: file })
const storeIn = <A, E>(layer: Layer.Layer<Store, unknown>, f: (s: StoreService) => Effect.Effect<A, E>) =>
  Effect.scoped(Effect.flatMap(Layer.build(layer), (ctx) => f(ctx.unsafeMap.get(Store.key) as StoreService)))

describe("Report from aggregates", () => {
  it.effect("one memory store: every figure as the streaming report's", () =>
    storeIn(MemoryStore.layer(), (s) =>
      Effect.gen(function*() {
        yield* fill(s, 0, 60, 0)
        yield* sameReports([{ source: "mem", store: s }])
      })))

  it.effect("one SQLite store: every figure as the streaming report's", () =>
    storeIn(sqliteAt(nodePath.join(tmp(), "one.db")), (s) =>
      Effect.gen(function*() {
        yield* fill(s, 0, 60, 0)
        yield* sameReports([{ source: "one.db", store: s }])
      })))

  it.effect("one SQLite store whose leases are all on its resources (usage in one scan), with token and cost figures", () =>
    storeIn(sqliteAt(nodePath.join(tmp(), "known.db")), (s) =>
      Effect.gen(function*() {
        yield* fill(s, 0, 60, 0, undefined, true)
        yield* sameReports([{ source: "known.db", store: s }])
        const usage = yield* s.resourceUsage(undefined)
        assert.isTrue(usage.some((u) => u.retries > 0 && u.tokensIn > 0 && u.rateLimited > 0), JSON.stringify(usage))
      })))

  // the one scan settles a one-lease text of a known resource by comparing it with the
  // resource's prefix, and a "retry":false decision by its text: any other text (a lease of
  // another target that shares the prefix, several leases, escapes, no lease, another key
  // order) must give what parsing every row gives; one run in the store (its attempts read in
  // table order)
  const KNOWN_LEASES: ReadonlyArray<ReadonlyArray<string>> = [
    ["pool/a#1"], ["pool/a#12345"], ["pool/a#"], ["pool/ab#7"], ["pool/a\"b#3"], ["pool/é#4"],
    ["pool/a#1", "pool/a#2"], ["pool/a#1", "pool/ab#2"], ["pool/ab#1", "pool/a#2", "pool/a\"b#9"], []
  ]
  // a lease on another target: the whole scope is grouped instead (rare, so that most stores
  // are settled by the one scan)
  const OTHER_LEASES: ReadonlyArray<ReadonlyArray<string>> = [["pool/a#1x"], ["pool/a#1#2"], ["pool/a"], ["pool/c#2"], ["other/a#1"]]
  const DECISIONS = [
    null,
    { retry: false, reason: "ok", delayMs: 0 },
    { retry: true, reason: "retryable", delayMs: 1 },
    { reason: "other order", retry: true },
    { retry: false }
  ] as const
  it.effect.prop(
    "one SQLite store of one run: one-lease texts and decisions settled without parsing, as the streaming report's",
    {
      attempts: fc.array(
        fc.record({
          leases: fc.oneof(
            { arbitrary: fc.constantFrom(...KNOWN_LEASES), weight: 30 },
            { arbitrary: fc.constantFrom(...OTHER_LEASES), weight: 1 }
          ),
          decision: fc.constantFrom(...DECISIONS),
          rateLimited: fc.boolean()
        }),
        { minLength: 1, maxLength: 12 }
      )
    },
    ({ attempts }) =>
      storeIn(sqliteAt(nodePath.join(tmp(), "one-run.db")), (s) =>
        Effect.gen(function*() {
          yield* s.openRun({ runId: rid("r1"), startedAt: 1000 })
          for (const r of ["a", "ab", "a\"b", "é"]) {
            yield* s.putResource({ pool: "pool", resourceId: r, kind: "worker", spec: {}, health: { state: "ready" }, updatedAt: 1 })
          }
          const rows = attempts.map((_, i) =>
            new PipelineRecord({
              pipelineId: pid(`p${i}`), key: null, name: "demo", state: "succeeded", nTasksDone: 1, nTasksTotal: 1,
              specDigest: "spec", seedDigest: `seed${i}`, tags: {}, attemptsTotal: 2, runId: rid("r1"), createdAt: 100,
              updatedAt: 3000, startedAt: 1000, endedAt: 1001 + i, failedTask: null, errorType: null, errorMessage: null,
              errorClass: null
            })
          )
          yield* s.admit(rows)
          for (const [i, a] of attempts.entries()) {
            for (const attemptNo of [1, 2]) {
              yield* s.recordAttempt({
                pipelineId: pid(`p${i}`), runId: rid("r1"), taskRunId: `p${i}/0`, taskName: "t0", seq: 0, attemptNo,
                outcome: attemptNo === 1 && a.rateLimited ? "failed" : "succeeded",
                errorClass: attemptNo === 1 && a.rateLimited ? "rate_limit" : null, errorType: null, errorMessage: null,
                decision: attemptNo === 1 ? a.decision : null, leaseIds: a.leases, startedAt: 1000, endedAt: 1001, durationMs: 1
              })
            }
          }
          yield* s.finishRun(rid("r1"), { status: "completed", endedAt: 5000 })
          yield* s.flush
          yield* sameReports([{ source: "one-run.db", store: s }], [{}, { runId: "all" }, { runId: "r1", errors: 0 }])
        })),
    { fastCheck: { numRuns: 10, endOnFailure: true } }
  )

  it.effect("several stores: overlapping ids deduplicated, a store given twice, as the streaming report's", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const a = nodePath.join(dir, "a.db")
      const b = nodePath.join(dir, "b.db")
      yield* storeIn(sqliteAt(a), (s) => fill(s, 0, 40, 0))
      yield* storeIn(sqliteAt(b), (s) => fill(s, 25, 40, 3)) // p25..p39 in both, other states and times
      yield* storeIn(sqliteAt(a), (sa) =>
        storeIn(sqliteAt(b), (sb) =>
          Effect.gen(function*() {
            yield* sameReports([{ source: a, store: sa }, { source: b, store: sb }])
            yield* sameReports([{ source: a, store: sa }, { source: a, store: sa }])
            const r = yield* Report.buildReport([{ source: a, store: sa }, { source: b, store: sb }], { runId: "all" })
            assert.strictEqual(r.duplicates, 15)
            assert.strictEqual(r.pipelines, 65)
          })))
    }))

  it.effect("a store without resourceUsage (a plugin written before it, in JavaScript): its attempts are folded, same report", () =>
    storeIn(MemoryStore.layer(), (s) =>
      Effect.gen(function*() {
        yield* fill(s, 0, 30, 0)
        const { resourceUsage: _, ...older } = s
        yield* sameReports([{ source: "old", store: older as unknown as TaskStore }])
      })))

  it.effect("one store reads no attempt and no pipeline row but its failed ones", () =>
    storeIn(MemoryStore.layer(), (s) =>
      Effect.gen(function*() {
        yield* fill(s, 0, 60, 0)
        const read = { pipelines: 0, attempts: 0, byState: new Map<string, number>() }
        const counted: TaskStore = {
          ...s,
          streamPipelines: (o = {}) =>
            Stream.tap(s.streamPipelines(o), (p) =>
              Effect.sync(() => {
                read.pipelines++
                read.byState.set(p.state, (read.byState.get(p.state) ?? 0) + 1)
              })),
          streamAttempts: (o = {}) => Stream.tap(s.streamAttempts(o), () => Effect.sync(() => void read.attempts++)),
          streamTasks: () => Stream.die("report must not stream tasks")
        }
        yield* TestClock.setTime(100_000)
        const r = yield* Report.buildReport([{ source: "mem", store: counted }], { runId: "all" })
        assert.strictEqual(r.pipelines, 60)
        assert.isAbove(r.attempts, 60)
        assert.strictEqual(read.attempts, 0)
        assert.deepStrictEqual([...read.byState.keys()], ["failed"])
        assert.strictEqual(read.pipelines, r.byState.failed)
      })))

  it.effect.each(["combined", "byExperiment"] as const)("a suite root (%s): the cumulative view and one member's, as the streaming report's", (layout) =>
    Effect.scoped(
      Effect.gen(function*() {
        const members = ["a", "b", "c"]
        const h = yield* SuiteStore.make({ root: nodePath.join(tmp(), "root"), suiteId: "s", layout, members, flushIntervalMs: 0 })
        yield* fill(h.store, 0, 45, 0, (i) => {
          const experimentId = members[i % 3]!
          return { id: memberPipelineId("s", experimentId, `k${i}`), suiteId: "s", experimentId, localKey: `k${i}` }
        })
        yield* sameReports([{ source: "root", store: yield* h.catalog.view() }])
        yield* sameReports([{ source: "root [b]", store: yield* h.catalog.view("b") }])
      })
    ).pipe(Effect.provide(NodeFileSystem.layer)))
})
