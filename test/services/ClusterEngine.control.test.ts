/**
 * Pipelines that declare `control` on the cluster engine (issue 17 with issue 13): submitted
 * with the cluster engine, they end with exactly the rows, ledger, visit counters, budget and
 * artifacts the embedded engine writes for the same experiment; budget refusals, undeclared
 * edges and a missing pending payload behave as on the embedded engine. In one process
 * (`TestRunner`, memory stores): the default mode without claims. The Postgres modes (task
 * claims, window claims, block leases) and a runner killed mid-visit are in
 * ClusterEngine.controlPg.test.ts.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as TestRunner from "@effect/cluster/TestRunner"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Layer, Option, Stream } from "effect"
import { make as makeBus } from "../../src/services/Bus.js"
import { runControlled } from "../../src/services/internal/cluster/controlled.js"
import { makeTaskEnv, type TaskEnv } from "../../src/services/internal/cluster/task.js"
import type { RunId } from "../../src/domain/Ids.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as HistoryArtifact from "../../src/domain/HistoryArtifact.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as Traversal from "../../src/domain/Traversal.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { makeCallLog, picture, spender, strayer, travelling } from "../support/controlPicture.js"
import { type AnySpec, markingAtLease, racingStore } from "../support/clusterRunner.js"

/** A runner host in this process over a memory store, for `specs`. */
const hostOf = (specs: ReadonlyArray<AnySpec>) => {
  const engine = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))
  const services = Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)
  return ClusterEngine.workflowLayer({ concurrency: 8, resourcesEvery: "1 second" }).pipe(
    Layer.provideMerge(engine),
    Layer.provideMerge(services),
    Layer.provide(ClusterEngine.catalogLayer(specs))
  )
}

/** The embedded engine over a memory store. */
const embedded = Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))

const viaCluster = <A, E, R>(specs: ReadonlyArray<AnySpec>, after: (store: StoreService) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "10 millis" })
    return { report, after: yield* after(yield* Store) }
  }).pipe(Effect.provide(hostOf(specs))) as Effect.Effect<{ readonly report: ClusterEngine.SubmitReport; readonly after: A }, unknown>

const viaEmbedded = <A, E, R>(specs: ReadonlyArray<AnySpec>, after: (store: StoreService) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const report = yield* Runner.run(specs)
    return { report, after: yield* after(yield* Store) }
  }).pipe(Effect.provide(embedded)) as Effect.Effect<{ readonly report: unknown; readonly after: A }, unknown>

describe("ClusterEngine: control pipelines (in process)", () => {
  it.live("a forward handoff, a rewind with a value and a retry-all end with the embedded engine's rows, ledger, visits, budget and artifacts", () =>
    Effect.gen(function*() {
      const embeddedLog = makeCallLog()
      const clusterLog = makeCallLog()
      const seeds = [1, 2, 3, 4].map((n) => ({ n }))
      const ours = seeds.map((seed) => travelling(clusterLog).bind(seed))
      const theirs = seeds.map((seed) => travelling(embeddedLog).bind(seed))
      const ids = ours.map((s) => s.pipelineId)
      const cluster = yield* viaCluster(ours, (store) => picture(store, ids))
      const reference = yield* viaEmbedded(theirs, (store) => picture(store, ids))
      assert.strictEqual(cluster.report.succeeded, 4)
      assert.deepStrictEqual(cluster.after, reference.after)
      // each visit of each station called once, with the embedded engine's visits and attempts
      assert.deepStrictEqual([...clusterLog.calls].sort(), [...embeddedLog.calls].sort())
      // what the comparison covers: an odd pipeline rewound, retried all and handed off forward
      const odd = cluster.after[ids[0]!] as { handoffs: ReadonlyArray<string>; traversal: Traversal.VisitState }
      assert.deepStrictEqual(odd.handoffs.map((h) => h.split(" ")[1]), ["-rewind->", "-retryAll->", "-to->"])
      assert.strictEqual(odd.traversal.handoffs, 3)
      assert.deepStrictEqual(odd.traversal.counters, [3, 3, 0, 1])
    }))

  it.live("a spent budget (BudgetExceeded) and an undeclared edge (HandoffRefused) fail the pipeline as on the embedded engine", () =>
    Effect.gen(function*() {
      const specs = [spender.bind(1), strayer.bind(1)]
      const ids = specs.map((s) => s.pipelineId)
      const cluster = yield* viaCluster(specs, (store) => picture(store, ids))
      const reference = yield* viaEmbedded(specs, (store) => picture(store, ids))
      assert.strictEqual(cluster.report.failed, 2)
      assert.deepStrictEqual(cluster.after, reference.after)
      const spent = cluster.after[ids[0]!] as { row: { errorType: string }; traversal: Traversal.VisitState }
      assert.strictEqual(spent.row.errorType, "BudgetExceeded")
      assert.strictEqual(spent.traversal.handoffs, 2)
      assert.strictEqual((cluster.after[ids[1]!] as { row: { errorType: string } }).row.errorType, "HandoffRefused")
    }))

  it.live("a pending entry whose payload is missing replays the seed, keeping the budget and the visit counters, as the embedded engine's resume", () =>
    Effect.gen(function*() {
      const log = makeCallLog()
      const spec = travelling(log).bind({ n: 2 })
      const id = spec.pipelineId
      // a pipeline that rewound once (budget 1, gen entered twice) whose pending entry, the
      // rewind's payload at seq nTasks, was lost; its row failed under an earlier run
      const setUp = Effect.gen(function*() {
        const store = yield* Store
        const now = yield* Clock.currentTimeMillis
        const runId = "run-before" as RunId
        yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
        const base = Traversal.initial(id, 4)
        const state: Traversal.VisitState = {
          ...base,
          version: 3,
          cursor: 0,
          pending: { seq: 0, visit: 1, input: Traversal.address(id, 4, 0), attempts: 1 },
          counters: [2, 1, 0, 0],
          handoffs: 1,
          payloads: 1,
          ledger: 1
        }
        yield* store.admit(
          [{ ...Rows.admissionRow(spec, 0, undefined, runId, now), state: "failed", attemptsTotal: 2 }],
          [Rows.seedArtifact(spec, runId, now)],
          [{ pipelineId: id, state }]
        )
        yield* store.flush
      })
      const after = (store: StoreService) =>
        Effect.gen(function*() {
          const events = yield* Effect.map(
            Stream.runCollect(store.streamEvents({ pipelineId: id })),
            (c) => Array.from(c).map((e) => e.kind).filter((k) => k === "pipeline.checkpoint_missing")
          )
          const vs = Option.getOrThrow(yield* store.traversal!.visitState(id))
          return { events, vs: { ...vs, version: 0 }, picture: yield* picture(store, [id]) }
        })
      const cluster = yield* Effect.gen(function*() {
        yield* setUp
        const report = yield* ClusterEngine.submit(Stream.make(spec), { pollInterval: "10 millis" })
        assert.strictEqual(report.succeeded, 1)
        return yield* after(yield* Store)
      }).pipe(Effect.provide(hostOf([spec])))
      const reference = yield* Effect.gen(function*() {
        yield* setUp
        yield* Runner.run([spec], { resume: true })
        return yield* after(yield* Store)
      }).pipe(Effect.provide(embedded))
      assert.deepStrictEqual(cluster.events, ["pipeline.checkpoint_missing"])
      assert.deepStrictEqual(cluster, reference)
      // the budget spent before the replay is kept, and the counters: gen entered a third time
      assert.strictEqual(cluster.vs.handoffs, 1)
      assert.strictEqual(cluster.vs.counters[0], 3)
    }))
})

describe("ClusterEngine: a controlled pipeline cancelled on the runners (issue 17 §3, cancel marks)", () => {
  it.live("stopped at an entry after its rewind: its row ends interrupted, the traversal kept; resumed, it ends as an uncancelled one", () =>
    Effect.gen(function*() {
      // the run is marked cancelled (as a runner's read of the marks sets it) once gen's second
      // visit ran: gen, check (rewinds gen), gen again
      let env: TaskEnv | undefined
      const runId = "run-cx" as RunId
      const base = makeCallLog()
      const log = {
        calls: base.calls,
        add: (pipelineId: string, task: string, visit: number, attempt: number) => {
          const n = base.add(pipelineId, task, visit, attempt)
          if (n === 3) env!.cancelled.set(runId, "study_stop:manual")
          return n
        }
      }
      const spec = travelling(log).bind({ n: 1 })
      const id = spec.pipelineId
      const cancelled = yield* Effect.gen(function*() {
        const store = yield* Store
        const now = yield* Clock.currentTimeMillis
        yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
        yield* store.admit(
          [Rows.admissionRow(spec, 0, undefined, runId, now)],
          [Rows.seedArtifact(spec, runId, now)],
          [{ pipelineId: id, state: Traversal.initial(id, 4) }]
        )
        yield* store.flush
        env = yield* makeTaskEnv({ store, pools: yield* Pool.Pools, bus: yield* makeBus, concurrency: 4 })
        const verdict = yield* runControlled(env, spec, { live: () => true })
        yield* store.flush
        const row = Option.getOrThrow(yield* store.getPipeline(id))
        const vs = Option.getOrThrow(yield* store.traversal!.visitState(id))
        const interruptedEvents = yield* store.events({ pipelineId: id, kind: "pipeline.interrupted" })
        const calls = [...base.calls]
        // a replay of the settled row runs nothing
        const replay = yield* runControlled(env, spec, { live: () => true })
        // resumed (the embedded engine over the same store: the row and traversal it reads are the ones it writes)
        yield* Runner.run([spec], { resume: true })
        return { verdict, replay, row, vs, interruptedEvents, calls, after: yield* picture(store, [id]) }
      }).pipe(Effect.scoped, Effect.provide(embedded))
      assert.strictEqual(cancelled.verdict, "interrupted")
      assert.strictEqual(cancelled.replay, "interrupted")
      assert.deepStrictEqual([cancelled.row.state, cancelled.row.errorType], ["interrupted", "Interrupted"])
      assert.deepStrictEqual(cancelled.interruptedEvents.map((e) => (e.data as { reason?: unknown }).reason), ["study_stop:manual"])
      // stopped at check's second visit, before it ran; the rewind kept (a resume continues the visit)
      assert.deepStrictEqual(cancelled.calls.map((c) => c.slice(id.length + 1)), ["gen#0@1", "check#0@1", "gen#1@1"])
      assert.deepStrictEqual([cancelled.vs.pending?.seq, cancelled.vs.pending?.visit, cancelled.vs.handoffs], [1, 1, 1])
      // an uncancelled run of the same pipeline, on the embedded engine
      const reference = yield* viaEmbedded([travelling(makeCallLog()).bind({ n: 1 })], (store) => picture(store, [id]))
      // the same rows, outputs, handoffs and traversal; the entry resumed runs under a new attempt
      // number (the resume reserves one at the pending entry, as after any interruption)
      const numbersOff = (after: Record<string, unknown>) => {
        const p = after[id] as { tasks: ReadonlyArray<string>; attempts: ReadonlyArray<string>; row: object }
        return {
          ...p,
          row: { ...p.row, attemptsTotal: undefined },
          tasks: p.tasks.map((t) => t.replace(/used=\d+/, "")),
          attempts: p.attempts.map((a) => a.replace(/@\d+/, ""))
        }
      }
      assert.deepStrictEqual(numbersOff(cancelled.after), numbersOff(reference.after))
      assert.include((cancelled.after[id] as { attempts: ReadonlyArray<string> }).attempts, "1#1@2 check handed_off ")
      // each visit called once: nothing committed ran again
      assert.strictEqual(new Set(base.calls.map((c) => c.replace(/@\d+$/, ""))).size, base.calls.length, JSON.stringify(base.calls))
    }))
})

describe("ClusterEngine: control pipelines' handoff payloads use every task's codecs (as the embedded engine, tester13h finding 1)", () => {
  class Draft extends HistoryArtifact.Class<Draft>("test/ClusterHandoffDraft") {}
  /** generate declares Draft as its output; validate rewinds to it once with a new Draft. */
  const draftSpecs = (seen: Array<[number, unknown]>) => {
    const generate = Task.make("generate", { output: Draft }, (input: unknown, ctx) =>
      Effect.sync(() => {
        const d = input instanceof Draft ? input : new Draft({ state: { id: input as number, temp: 0 } })
        seen.push([ctx.visit, d.stateObject()])
        return d.checkpoint(`v${ctx.visit}`)
      }))
    const validate = Task.sync("validate", (d: Draft) =>
      d.stateObject().temp === 1
        ? { final: d.stateObject() }
        : Handoff.rewind("generate", d.withState({ ...d.stateObject(), temp: 1 }), { reason: "cold" }))
    const template = Pipeline.fromTasks("cluster-handoff-draft", [generate, validate], {
      control: { rewind: { validate: ["generate"] }, maxHandoffs: 2 }
    })
    return [1, 2].map((n) => template.bind(n))
  }

  it.live("a validator's rewind payload of the generator's HistoryArtifact class is encoded and decoded on the cluster path, no registry given", () =>
    Effect.gen(function*() {
      const clusterSeen: Array<[number, unknown]> = []
      const embeddedSeen: Array<[number, unknown]> = []
      const ours = draftSpecs(clusterSeen)
      const ids = ours.map((s) => s.pipelineId)
      const cluster = yield* viaCluster(ours, (store) => picture(store, ids))
      const reference = yield* viaEmbedded(draftSpecs(embeddedSeen), (store) => picture(store, ids))
      assert.strictEqual(cluster.report.succeeded, 2, JSON.stringify(cluster.report.causes))
      assert.deepStrictEqual(cluster.after, reference.after)
      // the revisit ran on the decoded payload (temp 1), as on the embedded engine
      const sorted = (xs: ReadonlyArray<[number, unknown]>) => xs.map((x) => JSON.stringify(x)).sort()
      assert.deepStrictEqual(sorted(clusterSeen), sorted(embeddedSeen))
      assert.includeDeepMembers(clusterSeen, [[1, { id: 1, temp: 1 }], [1, { id: 2, temp: 1 }]])
    }))
})


describe("ClusterEngine: a controlled pipeline cancelled at a lease, and a zombie's interrupted row (fix17aj)", () => {
  /** `first` (no resource) then `ask` (a lease of pool `llm`, one slot), declaring a rewind. */
  const leasedControl = (calls: Array<string>) =>
    Pipeline.fromTasks("leasedControl", [
      Task.make("first", (n: number) => Effect.zipRight(Effect.yieldNow(), Effect.sync(() => (calls.push("first"), n + 1)))),
      Task.make("ask", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          calls.push("ask")
          yield* lease.report({ ok: true })
          return n
        }))
    ], { control: { rewind: { ask: ["first"] }, maxHandoffs: 1 } })

  const admitControlled = (store: StoreService, spec: AnySpec, runId: RunId, nTasks: number) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit(
        [Rows.admissionRow(spec, 0, undefined, runId, now)],
        [Rows.seedArtifact(spec, runId, now)],
        [{ pipelineId: spec.pipelineId, state: Traversal.initial(spec.pipelineId, nTasks) }]
      )
      yield* store.flush
    })

  it.live("a lease granted once the run is cancelled goes back and nothing is called: the row ends interrupted at that entry; resumed, only that entry runs", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const spec = leasedControl(calls).bind(1)
      const id = spec.pipelineId
      const runId = "run-lc" as RunId
      const store = yield* Store
      const pools = yield* Pool.Pools
      yield* admitControlled(store, spec, runId, 2)
      // the run's mark read while `ask` waited for its lease (here: as it is granted)
      let env: TaskEnv | undefined
      const marking = markingAtLease(pools, () => env!.cancelled.set(runId, "study_stop:manual"))
      env = yield* makeTaskEnv({ store, pools: marking, bus: yield* makeBus, concurrency: 2 })
      assert.strictEqual(yield* runControlled(env, spec, { live: () => true }), "interrupted")
      // nothing was called under the lease (it called once more before: then it succeeded)
      assert.deepStrictEqual(calls, ["first"])
      yield* store.flush
      const row = Option.getOrThrow(yield* store.getPipeline(id))
      assert.deepStrictEqual([row.state, row.nTasksDone, row.errorType], ["interrupted", 1, "Interrupted"])
      const vs = Option.getOrThrow(yield* store.traversal!.visitState(id))
      assert.deepStrictEqual([vs.cursor, vs.pending?.seq, vs.pending?.visit], [1, 1, 0])
      const events = yield* store.events({ pipelineId: id, kind: "pipeline.interrupted" })
      assert.deepStrictEqual(events.map((e) => (e.data as { reason?: unknown }).reason), ["study_stop:manual"])
      // the lease went back: the pool's only slot is free
      const handle = yield* pools.get("llm")
      assert.strictEqual((yield* handle.snapshot).reduce((n, r) => n + r.active, 0), 0)
      // a replay of the settled row runs nothing; resumed, only `ask` runs
      assert.strictEqual(yield* runControlled(env, spec, { live: () => true }), "interrupted")
      yield* Runner.run([spec], { resume: true })
      assert.deepStrictEqual(calls, ["first", "ask"])
      assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(id)).state, "succeeded")
    }).pipe(
      Effect.scoped,
      Effect.provide(Layer.provideMerge(
        Runner.layer({ handleSignals: false }),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("llm", [Resource.make("api", { id: "k", capacity: 1 })])]))
      ))
    ))

  it.live("at a lease too: a zombie's interrupted row does not land over a new owner's step", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const spec: AnySpec = leasedControl(calls).bind(1)
      const id = spec.pipelineId
      const runId = "run-lcz" as RunId
      const store = yield* Store
      const pools = yield* Pool.Pools
      yield* admitControlled(store, spec, runId, 2)
      let env: TaskEnv | undefined
      const marking = markingAtLease(pools, () => env!.cancelled.set(runId, "study_stop:manual"))
      let live = true
      const { newOwner, store: racing } = racingStore(store, id, () => {
        live = false
      })
      env = yield* makeTaskEnv({ store: racing, pools: marking, bus: yield* makeBus, concurrency: 2 })
      assert.strictEqual(yield* runControlled(env, spec, { live: () => live }), "lost")
      yield* store.flush
      assert.deepStrictEqual(calls, ["first"])
      assert.isDefined(newOwner())
      assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(id)).state, "running")
      assert.strictEqual(Option.getOrThrow(yield* store.traversal!.visitState(id)).version, newOwner())
    }).pipe(
      Effect.scoped,
      Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("llm", [Resource.make("api", { id: "k", capacity: 1 })])])))
    ))

  it.live("a zombie (its ownership lost between its check and its commit) does not move the row back over a new owner's step", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const runId = "run-lz" as RunId
      let env: TaskEnv | undefined
      // `a` then `b`, neither synchronous (each step commits at once); the run is marked once `a` ran
      const spec: AnySpec = Pipeline.fromTasks("zombie", [
        Task.make("a", (n: number) =>
          Effect.zipRight(Effect.yieldNow(), Effect.sync(() => (calls.push("a"), env!.cancelled.set(runId, "study_stop:manual"), n + 1)))),
        Task.make("b", (n: number) => Effect.zipRight(Effect.yieldNow(), Effect.sync(() => (calls.push("b"), n))))
      ], { control: { rewind: { b: ["a"] }, maxHandoffs: 1 } }).bind(1)
      const id = spec.pipelineId
      const store = yield* Store
      yield* admitControlled(store, spec, runId, 2)
      // the execution owns the pipeline when it checks; a new owner commits a step before its
      // interrupted row commits (its ownership is gone from then on)
      let live = true
      const { newOwner, store: racing } = racingStore(store, id, () => {
        live = false
      })
      env = yield* makeTaskEnv({ store: racing, pools: yield* Pool.Pools, bus: yield* makeBus, concurrency: 2 })
      const verdict = yield* runControlled(env, spec, { live: () => live })
      yield* store.flush
      assert.deepStrictEqual(calls, ["a"])
      assert.isDefined(newOwner(), "the cancel was seen at b's entry")
      // the zombie's write was refused: the row is the new owner's (running, its version), not interrupted
      assert.strictEqual(verdict, "lost")
      const row = Option.getOrThrow(yield* store.getPipeline(id))
      assert.strictEqual(row.state, "running")
      assert.strictEqual(Option.getOrThrow(yield* store.traversal!.visitState(id)).version, newOwner())
      assert.deepStrictEqual(yield* store.events({ pipelineId: id, kind: "pipeline.interrupted" }), [])
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))))
})
