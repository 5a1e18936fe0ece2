/**
 * Pipelines that declare `control` on the cluster engine over PostgreSQL (the cluster's claims
 * and message storage; the memory store stands in for the shared store):
 *
 * - a zombie: a runner frozen past its window claim's deadline while a step's call is under
 *   way; another runner takes the window over, reserves the next attempt number at the pending
 *   entry and finishes the pipeline; the zombie's late step is refused (`TraversalConflict`)
 *   and nothing of it is stored: no committed visit called again, no attempt number used twice;
 * - a runner stopped mid-visit and its replacement, in both claim modes (task claims, the
 *   default; window claims): the budget, visit counters and ledger end as an uninterrupted
 *   run's (the embedded engine's), the visits committed before the stop are not called again,
 *   and the visit cut short runs again under the next attempt number.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer, Option, Redacted, Stream, TestClock } from "effect"
import * as Handoff from "../../src/domain/Handoff.js"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as Traversal from "../../src/domain/Traversal.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import { runControlledClaimed } from "../../src/services/internal/cluster/controlled.js"
import * as InFlight from "../../src/services/internal/cluster/inflight.js"
import { makeTaskEnv } from "../../src/services/internal/cluster/task.js"
import { runWindow } from "../../src/services/internal/cluster/window.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import { windowKey } from "../../src/services/internal/cluster/workflow.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"
import { createClusterDatabase, drive, singleRunner, turn } from "../support/clusterRunner.js"
import { makeCallLog, picture } from "../support/controlPicture.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

const until = (check: () => boolean) => Effect.repeat(turn, { until: check })

/**
 * `gen → check → report`: `check` (under a lease of pool `llm`) rewinds `gen` with a value on
 * its first visit and passes the draft on after; its first call of visit 1 (per pipeline)
 * waits for `gate` after its lease, when `hold` says so (a call under way).
 */
const rewinding = (
  log: ReturnType<typeof makeCallLog>,
  gate: Deferred.Deferred<void>,
  hold: (pipelineId: string) => boolean
) => {
  const held = new Set<string>()
  const gen = Task.make("gen", (row: { readonly n: number; readonly hint?: string }, ctx) =>
    Effect.sync(() => {
      log.add(ctx.pipelineId, "gen", ctx.visit, ctx.attempt)
      return { n: row.n, hint: row.hint ?? null, visit: ctx.visit }
    }))
  const check = Task.make("check", { resource: "llm" }, (draft: { readonly n: number; readonly hint: string | null }, ctx) =>
    Effect.gen(function*() {
      const lease = yield* ctx.acquire()
      log.add(ctx.pipelineId, "check", ctx.visit, ctx.attempt)
      if (ctx.visit === 1 && hold(ctx.pipelineId) && !held.has(ctx.pipelineId)) {
        held.add(ctx.pipelineId)
        yield* Deferred.await(gate)
      }
      yield* lease.report({ ok: true })
      return ctx.visit === 0 ? Handoff.rewind("gen", { n: draft.n, hint: "again" }, { reason: "first draft refused" }) : draft
    }))
  const report = Task.make("report", (draft: { readonly n: number }, ctx) =>
    Effect.sync(() => {
      log.add(ctx.pipelineId, "report", ctx.visit, ctx.attempt)
      return { ...draft, ok: true }
    }))
  return Pipeline.fromTasks("rewinding", [gen, check, report], { control: { rewind: { check: ["gen"] }, maxHandoffs: 3 } })
}

const llm = () => Pool.layer([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 8 })])])

/** The traversal, ledger and artifacts of `ids` (what an interruption must not change). */
const progressOf = (all: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(all).map(([id, p]) => {
    const { artifacts, handoffs, row, traversal } = p as Record<string, unknown>
    return [id, { artifacts, handoffs, state: (row as { state: string }).state, traversal }]
  }))

describe("ClusterEngine: control pipelines on PostgreSQL", () => {
  it.scoped("a zombie's step under way when its window was taken over is refused (TraversalConflict): no committed visit called again, no attempt number used twice", () =>
    Effect.gen(function*() {
      const log = makeCallLog()
      const gate = yield* Deferred.make<void>()
      const spec = rewinding(log, gate, () => true).bind({ n: 1 })
      const id = spec.pipelineId
      const store = yield* Store
      const pools = yield* Pool.Pools
      const now = yield* TestClock.currentTimeMillis
      const runId = "run-z" as RunId
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)], [{
        pipelineId: id,
        state: Traversal.initial(id, spec.template.nTasks)
      }])
      yield* store.flush
      yield* WindowClaims.createTable
      const sql = yield* SqlClient.SqlClient
      const key = windowKey({ pipelineIds: [id] })
      const runner = Effect.gen(function*() {
        const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 4 })
        const claims = WindowClaims.make(sql, { ttl: "1 hour", heartbeat: "10 seconds", clock: yield* Effect.clock })!
        return { env, claims }
      })
      const a = yield* runner
      const zombie = yield* Effect.fork(runWindow(a.env, a.claims, undefined, key, [spec]))
      // gen and check's rewind committed, gen's second visit committed; check's second visit is in its call
      yield* until(() => log.calls.includes(`${id}/check#1@1`))
      const before = Option.getOrThrow(yield* store.traversal!.visitState(id))
      assert.deepStrictEqual([before.handoffs, before.pending?.seq, before.pending?.visit], [1, 1, 1])
      // the runner freezes past its local deadline; its row expires; another runner takes the window over
      yield* TestClock.adjust("3599 seconds")
      yield* sql.unsafe(`UPDATE ${WindowClaims.TABLE} SET expires_at = now() - interval '1 hour' WHERE token IS NOT NULL`)
      const b = yield* runner
      assert.deepStrictEqual(yield* drive(yield* Effect.fork(runWindow(b.env, b.claims, undefined, key, [spec])), "10 seconds"), [
        "succeeded"
      ])
      // the zombie's call returns: its step is refused, it calls nothing more and ends with the stored verdict
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* drive(zombie, "10 seconds"), ["succeeded"])
      assert.deepStrictEqual(log.calls, [
        `${id}/gen#0@1`,
        `${id}/check#0@1`,
        `${id}/gen#1@1`,
        `${id}/check#1@1`,
        // the new owner: the pending entry under the next attempt number, then on
        `${id}/check#1@2`,
        `${id}/report#0@1`
      ])
      const p = (yield* picture(store, [id]))[id] as Record<string, any>
      // nothing of the zombie's step is stored: one attempt row for check's second visit (number 2)
      assert.deepStrictEqual(p.attempts.filter((s: string) => s.startsWith("1#1")), ["1#1@2 check succeeded "])
      assert.deepStrictEqual(p.handoffs.length, 1)
      assert.deepStrictEqual([p.traversal.handoffs, p.traversal.counters, p.traversal.cursor], [1, [2, 2, 1], 3])
      assert.strictEqual(p.row.state, "succeeded")
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), llm(), pgLayer("control_zombie")))), 180_000)

  it.live("task claims: a zombie whose pipeline claim went stale during its call is fenced by TraversalConflict and its claim; the new owner's visits stand", () =>
    Effect.gen(function*() {
      const log = makeCallLog()
      const gate = yield* Deferred.make<void>()
      const spec = rewinding(log, gate, () => true).bind({ n: 3 })
      const id = spec.pipelineId
      const store = yield* Store
      const pools = yield* Pool.Pools
      const now = yield* Clock.currentTimeMillis
      const runId = "run-cz" as RunId
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)], [{
        pipelineId: id,
        state: Traversal.initial(id, spec.template.nTasks)
      }])
      yield* store.flush
      yield* InFlight.createTable
      const sql = yield* SqlClient.SqlClient
      // the zombie renews its claim once an hour (it is frozen, as far as the claim can tell)
      const frozen = InFlight.make(sql, { ttl: "1 minute", heartbeat: "1 hour" })!
      const live = InFlight.make(sql, { ttl: "1 minute", heartbeat: "1 second" })!
      const a = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 4, claims: frozen })
      const b = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 4, claims: live })
      const zombie = yield* Effect.fork(runControlledClaimed(a, spec))
      yield* until(() => log.calls.includes(`${id}/check#1@1`))
      // its claim goes stale; another runner claims the pipeline and finishes it
      yield* sql.unsafe(`UPDATE ${InFlight.TABLE} SET heartbeat_at = now() - interval '1 hour'`)
      assert.strictEqual(yield* runControlledClaimed(b, spec), "succeeded")
      // the zombie's call returns: its step is refused, its claim found gone; it ends with the stored verdict
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(zombie), "succeeded")
      assert.deepStrictEqual(log.calls, [
        `${id}/gen#0@1`,
        `${id}/check#0@1`,
        `${id}/gen#1@1`,
        `${id}/check#1@1`,
        `${id}/check#1@2`,
        `${id}/report#0@1`
      ])
      const p = (yield* picture(store, [id]))[id] as Record<string, any>
      assert.deepStrictEqual(p.attempts.filter((x: string) => x.startsWith("1#1")), ["1#1@2 check succeeded "])
      assert.deepStrictEqual([p.handoffs.length, p.traversal.handoffs, p.traversal.counters], [1, 1, [2, 2, 1]])
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(MemoryStore.layer(), llm(), pgLayer("control_claim_zombie")))), 180_000)

  for (const mode of ["task claims", "window claims"] as const) {
    it.live(`${mode}: a runner stopped mid-visit, replaced: budget, visits, ledger and artifacts as an uninterrupted run's; committed visits not called again; the cut visit under a new attempt number`, () => {
      const db = mode === "task claims" ? "control_stop_tasks" : "control_stop_windows"
      const log = makeCallLog()
      const gate = Deferred.unsafeMake<void>(undefined as never)
      const template = rewinding(log, gate, () => blocking)
      let blocking = true
      const specs = [1, 2, 3, 4].map((n) => template.bind({ n }))
      const ids = specs.map((s) => s.pipelineId)
      const workflow = { concurrency: 8, windowClaims: mode === "window claims" }
      const runnerOf = () => singleRunner(pg, db, { specs, workflow, pools: [Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 8 })])] })
      return Effect.gen(function*() {
        yield* createClusterDatabase(pg, db)
        const store = yield* Store
        // phase 1: every pipeline in check's second visit (its call under way), then the runner stops
        yield* Effect.gen(function*() {
          const submitter = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "50 millis", window: 2 }))
          for (let i = 0; i < 600 && !ids.every((id) => log.calls.includes(`${id}/check#1@1`)); i++) yield* Effect.sleep("50 millis")
          yield* Fiber.interrupt(submitter)
        }).pipe(Effect.provide(runnerOf()))
        for (const id of ids) assert.include(log.calls, `${id}/check#1@1`)
        const before = [...log.calls]
        // phase 2: a new runner; submitting again finishes every pipeline
        blocking = false
        const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "50 millis", window: 2 }).pipe(
          Effect.provide(runnerOf())
        )
        // the pipelines still running under the first run are followed to their end (filed under it)
        assert.strictEqual(report.succeeded + report.followed.succeeded, 4, JSON.stringify(report))
        for (const id of ids) {
          const mine = log.calls.filter((c) => c.startsWith(`${id}/`))
          // committed before the stop: called once; the visit cut short: again under attempt 2
          assert.deepStrictEqual(mine, [
            `${id}/gen#0@1`,
            `${id}/check#0@1`,
            `${id}/gen#1@1`,
            `${id}/check#1@1`,
            `${id}/check#1@2`,
            `${id}/report#0@1`
          ], `${id}: ${JSON.stringify(before)}`)
        }
        const cluster = progressOf(yield* picture(store, ids))
        // the reference: the embedded engine, uninterrupted
        const refLog = makeCallLog()
        const refGate = yield* Deferred.make<void>()
        const refSpecs = [1, 2, 3, 4].map((n) => rewinding(refLog, refGate, () => false).bind({ n }))
        const reference = yield* Effect.gen(function*() {
          yield* Runner.run(refSpecs)
          return progressOf(yield* picture(yield* Store, ids))
        }).pipe(Effect.provide(Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(MemoryStore.layer(), llm()))))
        assert.deepStrictEqual(cluster, reference)
      }).pipe(Effect.provide(MemoryStore.layer()))
    }, 180_000)
  }
})

