/**
 * break39 F4 (b), through `submit`: a runner frozen with its connection up (SIGSTOP, hung)
 * answers neither the pings nor the polls of its windows' workflows, and the interruption of
 * either never ends while it stays frozen (the RPC client's teardown waits on the connection).
 * A follow that asked such a window for its result waited with it, so the runner watch's pings
 * were never read again: the runner was told only once its registration lapsed, as "left the
 * cluster" (+18 s in the chaos suite's D8). The follow now asks a window again at a later
 * follow when it does not answer in time, and the runner is told as not answering after two
 * ping timeouts. In process (`TestRunner`, a memory runner storage with two runners), on the
 * `TestClock`.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as Runner from "@effect/cluster/Runner"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as Runners from "@effect/cluster/Runners"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as TestRunner from "@effect/cluster/TestRunner"
import * as WorkflowEngine from "@effect/workflow/WorkflowEngine"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Stream, TestClock } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"
import type { AnySpec } from "../support/clusterRunner.js"

const a = RunnerAddress.make("10.0.0.1", 34431)
const b = RunnerAddress.make("10.0.0.2", 34431)
const runnerA = Runner.make({ address: a, groups: ["default"], weight: 1 })
const runnerB = Runner.make({ address: b, groups: ["default"], weight: 1 })

describe("ClusterEngine: a frozen runner through submit (break39 F4 b)", () => {
  it.scoped("a runner that answers neither pings nor its windows' polls is told as not answering; the follow goes on", () => {
    const open = Deferred.unsafeMake<void>(undefined as never)
    const thaw = Deferred.unsafeMake<void>(undefined as never)
    let frozen = false
    /** What a frozen peer does to a call: no answer, and an interruption that waits for the thaw. */
    const stuck = <A, E, R>(call: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      Effect.suspend(() => frozen ? Effect.zipRight(Deferred.await(thaw).pipe(Effect.onInterrupt(() => Deferred.await(thaw))), call) : call)
    const hold = Task.make("hold", (n: number) => Effect.as(Deferred.await(open), n))
    const specs: ReadonlyArray<AnySpec> = Array.from({ length: 16 }, (_, n) => Pipeline.make("frozen", hold).bind(n))
    const engine = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))
    const services = Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)
    const host = ClusterEngine.workflowLayer({ concurrency: 32, resourcesEvery: "1 hour" }).pipe(
      Layer.provideMerge(engine),
      Layer.provideMerge(services),
      Layer.provide(ClusterEngine.catalogLayer(specs))
    )
    const pings = Layer.effect(
      Runners.Runners,
      Effect.map(Runners.Runners, (r) => ({
        ...r,
        ping: (address: RunnerAddress.RunnerAddress) => String(address) === String(b) ? stuck(Effect.void) : Effect.void
      }))
    ).pipe(Layer.provide(Runners.layerNoop), Layer.provide(MessageStorage.layerNoop), Layer.provide(ShardingConfig.layer()))
    // the submitter's polls of the windows' workflows: none answers while b is frozen (a
    // stronger fault than b's windows only)
    const polls = Layer.effect(
      WorkflowEngine.WorkflowEngine,
      Effect.map(WorkflowEngine.WorkflowEngine, (e) => ({
        ...e,
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        poll: ((workflow: any, executionId: string) => stuck(e.poll(workflow, executionId))) as unknown as typeof e.poll
      }))
    )
    const cluster = Layer.mergeAll(
      Layer.effectDiscard(Effect.flatMap(RunnerStorage.RunnerStorage, (s) =>
        Effect.zipRight(s.register(runnerA, true), s.register(runnerB, true)))).pipe(Layer.provideMerge(RunnerStorage.layerMemory)),
      pings,
      polls,
      ShardingConfig.layer()
    )
    return Effect.gen(function*() {
      const store = yield* Store
      const warnings: Array<ClusterEngine.SubmitWarning> = []
      const submission = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), {
        maxAdmitted: 16,
        window: 2,
        pollInterval: "500 millis",
        onWarning: (w) => Effect.sync(() => warnings.push(w))
      }).pipe(Effect.provide(cluster)))
      const rows = () => store.getPipelines(specs.map((s) => s.pipelineId))
      for (let i = 0; i < 100 && (yield* rows()).size < 16; i++) yield* TestClock.adjust("100 millis")
      assert.strictEqual((yield* rows()).size, 16)
      for (let i = 0; i < 10; i++) yield* TestClock.adjust("500 millis")
      assert.deepStrictEqual(warnings, [], "nothing told while both answer")
      frozen = true
      // 20 s frozen: the runner stays registered (its registration would lapse later)
      for (let i = 0; i < 40; i++) yield* TestClock.adjust("500 millis")
      const left = warnings.filter((w) => w._tag === "RunnerLeft")
      assert.strictEqual(left.length, 1, `told: ${JSON.stringify(warnings)}`)
      assert.strictEqual(left[0]!.reason, "unanswered")
      assert.strictEqual(left[0]!.runner, "10.0.0.2:34431")
      // thawed: everything answers again, the run ends
      frozen = false
      yield* Deferred.succeed(thaw, undefined)
      yield* Deferred.succeed(open, undefined)
      for (let i = 0; i < 40; i++) yield* TestClock.adjust("500 millis")
      const report = yield* Fiber.join(submission)
      assert.strictEqual(report.succeeded, 16)
    }).pipe(
      // a failed check: thawed, so that the submission's interruption ends
      Effect.ensuring(Effect.zipRight(Deferred.succeed(thaw, undefined), Deferred.succeed(open, undefined))),
      Effect.provide(host)
    )
  })
})
