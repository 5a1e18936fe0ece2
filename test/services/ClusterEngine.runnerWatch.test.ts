/**
 * newuser37 F4: after `kill -9` of a runner its windows wait for its shard locks to expire
 * (`SHARD_LOCK_EXPIRATION`, 35 s) before another runner takes them over; the submitter now says
 * that a runner left (which one, its windows in flight, in about how long they resume) and when
 * their work ran again. The watch on its own (fake pings), then through `submit` (in process,
 * `TestRunner`, a memory runner storage with two registered runners), on the `TestClock`.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as Runner from "@effect/cluster/Runner"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as Runners from "@effect/cluster/Runners"
import { RunnerUnavailable } from "@effect/cluster/ClusterError"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as TestRunner from "@effect/cluster/TestRunner"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
import type { PipelineId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"
import * as RunnerWatch from "../../src/services/internal/cluster/runnerWatch.js"
import type { AnySpec } from "../support/clusterRunner.js"

const a = RunnerAddress.make("10.0.0.1", 34431)
const b = RunnerAddress.make("10.0.0.2", 34431)
const runnerA = Runner.make({ address: a, groups: ["default"], weight: 1 })
const runnerB = Runner.make({ address: b, groups: ["default"], weight: 1 })

/** `Runners` whose ping fails for the addresses in `dead`. */
const pinging = (dead: Set<string>) =>
  Layer.effect(
    Runners.Runners,
    Effect.map(Runners.Runners, (r) => ({
      ...r,
      ping: (address: RunnerAddress.RunnerAddress) =>
        dead.has(String(address)) ? Effect.fail(new RunnerUnavailable({ address })) : Effect.void
    }))
  ).pipe(Layer.provide(Runners.layerNoop), Layer.provide(MessageStorage.layerNoop), Layer.provide(ShardingConfig.layer()))

describe("ClusterEngine: the submitter's watch on the runners (newuser37 F4)", () => {
  it.effect("a runner that stops answering is told once, with its windows in flight and the lock expiry; then when they ran again", () =>
    Effect.gen(function*() {
      const dead = new Set<string>()
      const runners = yield* Effect.provide(Runners.Runners, pinging(dead))
      // lock rows (SHARD_LOCK_DISABLE_ADVISORY): the locks expire, so the wait has a bound
      const watch = yield* RunnerWatch.make({
        runners: Option.some(runners),
        lockExpiration: "35 seconds",
        pingEvery: "1 second",
        advisoryLocks: false
      })
      const ids = ["p1", "p2", "p3", "p4"].map((id) => id as PipelineId)
      const running = new Set<PipelineId>(ids)
      // two windows on b, one on a (by execution id)
      const windows = [
        { executionId: "w1", ids: [ids[0]!] },
        { executionId: "w2", ids: [ids[1]!, ids[2]!] },
        { executionId: "w3", ids: [ids[3]!] }
      ]
      const assignment = [String(a), String(b)]
      const runnerOf = (asg: ReadonlyArray<string>, executionId: string) => executionId === "w1" ? asg[0] : asg[1]
      const all = [[runnerA, true], [runnerB, true]] as const
      let now = 0
      const check = () => watch.check({ now, runners: all, assignment, windows, running, runnerOf })
      const events: Array<RunnerWatch.RunnerLeft | RunnerWatch.RunnerResumed> = []
      // up and answering: nothing to tell
      for (let i = 0; i < 5; i++) {
        events.push(...(yield* check()))
        yield* TestClock.adjust("500 millis")
        now += 500
      }
      assert.deepStrictEqual(events, [])
      // b is killed: two unanswered pings in a row, told once
      dead.add(String(b))
      for (let i = 0; i < 20; i++) {
        events.push(...(yield* check()))
        yield* TestClock.adjust("500 millis")
        now += 500
      }
      assert.strictEqual(events.length, 1, JSON.stringify(events))
      const leftEvent = events[0]!
      assert.strictEqual(leftEvent._tag, "RunnerLeft")
      if (leftEvent._tag !== "RunnerLeft") return
      assert.strictEqual(leftEvent.runner, "10.0.0.2:34431")
      assert.strictEqual(leftEvent.reason, "unanswered")
      assert.strictEqual(leftEvent.windows, 2)
      assert.strictEqual(leftEvent.pipelines, 3)
      assert.isAtMost(leftEvent.resumeInMs, 35_000)
      assert.isAbove(leftEvent.resumeInMs, 25_000)
      assert.match(leftEvent.message, /runner 10\.0\.0\.2:34431 stopped answering .* 2 window\(s\) .*\(3 pipeline\(s\)\).* resume on the other runners once its shard locks expire, within ~\d+ s/)
      // a pipeline of a's window ending says nothing; one of b's windows ending says they run again
      running.delete(ids[0]!)
      assert.deepStrictEqual(yield* check(), [])
      now += 30_000
      running.delete(ids[2]!)
      const resumed = yield* check()
      assert.strictEqual(resumed.length, 1)
      assert.strictEqual(resumed[0]!._tag, "RunnerResumed")
      assert.isAtLeast((resumed[0] as RunnerWatch.RunnerResumed).afterMs, 30_000)
      assert.match(resumed[0]!.message, /the windows runner 10\.0\.0\.2:34431 had in flight run again, \d+ s after it left/)
      // told once: no more events while it stays away
      for (let i = 0; i < 5; i++) {
        assert.deepStrictEqual(yield* check(), [])
        yield* TestClock.adjust("1 second")
        now += 1000
      }
    }))

  it.effect("break39 F4 (b): a frozen runner (connection up, no answer, a ping's interruption that never ends) is told as not answering after two ping timeouts", () =>
    Effect.gen(function*() {
      const frozen = new Set<string>()
      let toFrozen = 0
      let ended = 0
      // a frozen peer: the ping never answers, and its interruption (the scoped RPC client's
      // teardown over a connection nobody reads) never ends either
      const runners = {
        ping: (address: RunnerAddress.RunnerAddress) =>
          Effect.suspend(() => {
            if (frozen.has(String(address))) toFrozen++
            return frozen.has(String(address))
              ? Effect.never.pipe(Effect.onInterrupt(() => Effect.never), Effect.ensuring(Effect.sync(() => void ended++)))
              : Effect.void
          })
      } as unknown as Runners.Runners["Type"]
      const watch = yield* RunnerWatch.make({
        runners: Option.some(runners),
        lockExpiration: "35 seconds",
        pingEvery: "1 second",
        pingTimeout: "3 seconds"
      })
      const running = new Set<PipelineId>(["p1" as PipelineId])
      const windows = [{ executionId: "w1", ids: ["p1" as PipelineId] }]
      const assignment = [String(b)]
      const all = [[runnerA, true], [runnerB, true]] as const
      let now = 0
      const check = () => watch.check({ now, runners: all, assignment, windows, running, runnerOf: (asg) => asg[0] })
      for (let i = 0; i < 4; i++) {
        assert.deepStrictEqual(yield* check(), [])
        yield* TestClock.adjust("500 millis")
        now += 500
      }
      frozen.add(String(b))
      const frozenAt = now
      let told: RunnerWatch.RunnerLeft | undefined
      for (let i = 0; i < 40 && told === undefined; i++) {
        const events = yield* check()
        told = events.find((e): e is RunnerWatch.RunnerLeft => e._tag === "RunnerLeft")
        yield* TestClock.adjust("500 millis")
        now += 500
      }
      assert.isDefined(told, "never told: the timed-out ping waited for its interruption")
      assert.strictEqual(told!.reason, "unanswered")
      assert.strictEqual(told!.runner, "10.0.0.2:34431")
      // two ping timeouts and a round apart (no wall-clock figure: the TestClock's)
      assert.isAtMost(now - frozenAt, 10_000, `told after ${now - frozenAt} ms`)
      // with advisory locks (the default) no bound is promised for a paused runner: it keeps its shards
      assert.notMatch(told!.message, /within/)
      assert.match(told!.message, /a runner paused or hung keeps its shards \(advisory locks\) until it answers again or its database session ends/)
      // no pile of hanging pings to the frozen runner: one at a time
      assert.strictEqual(toFrozen, 1, "a second ping to the frozen runner started while the first still hung")
      assert.strictEqual(ended, 0)
    }))

  it.effect("break39 F4 (a): the resume promise follows the lock mode (advisory: no bound for a paused runner; lock rows: the expiry)", () =>
    Effect.gen(function*() {
      const say = (advisoryLocks: boolean | undefined, reason: "unregistered" | "unanswered", config?: Partial<ShardingConfig.ShardingConfig["Type"]>) =>
        Effect.gen(function*() {
          const dead = new Set<string>()
          const runners = yield* Effect.provide(Runners.Runners, pinging(dead))
          const watch = yield* RunnerWatch.make({ runners: Option.some(runners), lockExpiration: "10 seconds", advisoryLocks }).pipe(
            config === undefined ? (x) => x : Effect.provide(ShardingConfig.layer(config))
          )
          const running = new Set<PipelineId>(["p1" as PipelineId])
          const windows = [{ executionId: "w1", ids: ["p1" as PipelineId] }]
          let now = 0
          const check = (runners: ReadonlyArray<readonly [Runner.Runner, boolean]>) =>
            watch.check({ now, runners, assignment: [String(b)], windows, running, runnerOf: (asg) => asg[0] })
          yield* check([[runnerA, true], [runnerB, true]])
          if (reason === "unregistered") return (yield* check([[runnerA, true]]))[0] as RunnerWatch.RunnerLeft
          dead.add(String(b))
          for (let i = 0; i < 20; i++) {
            yield* TestClock.adjust("500 millis")
            now += 500
            const events = yield* check([[runnerA, true], [runnerB, true]])
            if (events.length > 0) return events[0] as RunnerWatch.RunnerLeft
          }
          return undefined
        })
      const advisoryUnanswered = yield* say(undefined, "unanswered")
      // advisory locks: a bound only for a process that died (its windows' claims expire)
      assert.notMatch(advisoryUnanswered!.message, /within/)
      assert.match(
        advisoryUnanswered!.message,
        /if its process died, once its windows' claims expire, in ~\d+ s \(SHARD_LOCK_EXPIRATION 10 s after it last answered\); a runner paused or hung keeps its shards \(advisory locks\) until it answers again or its database session ends/
      )
      const advisoryLeft = yield* say(undefined, "unregistered")
      assert.notMatch(advisoryLeft!.message, /within/)
      assert.match(advisoryLeft!.message, /left the cluster .*soon for a runner that stopped .*a runner paused or hung keeps its shards \(advisory locks\)/)
      // lock rows, from the context's ShardingConfig (SHARD_LOCK_DISABLE_ADVISORY=true)
      const rowsUnanswered = yield* say(undefined, "unanswered", { shardLockDisableAdvisory: true })
      assert.match(rowsUnanswered!.message, /once its shard locks expire, within ~\d+ s \(SHARD_LOCK_EXPIRATION 10 s after it last answered\)/)
      assert.isAbove(rowsUnanswered!.resumeInMs, 0)
      const rowsLeft = yield* say(false, "unregistered")
      assert.match(rowsLeft!.message, /within SHARD_LOCK_EXPIRATION, 10 s, for one that did not/)
    }))

  it.effect("a runner that unregisters (stopped) is told as having left the cluster; one with no window of the run is not told", () =>
    Effect.gen(function*() {
      const watch = yield* RunnerWatch.make({ runners: Option.none(), lockExpiration: "35 seconds" })
      const running = new Set<PipelineId>(["p1" as PipelineId])
      const windows = [{ executionId: "w1", ids: ["p1" as PipelineId] }]
      const runnerOf = (asg: ReadonlyArray<string>) => asg[0]
      const input = (runners: ReadonlyArray<readonly [Runner.Runner, boolean]>, assignment: ReadonlyArray<string>) => ({
        now: 0,
        runners,
        assignment,
        windows,
        running,
        runnerOf
      })
      assert.deepStrictEqual(yield* watch.check(input([[runnerA, true], [runnerB, true]], [String(a)])), [])
      // b leaves: it had nothing of the run
      assert.deepStrictEqual(yield* watch.check(input([[runnerA, true]], [String(a)])), [])
      // a leaves (its window in flight), no runner left: said so
      const events = yield* watch.check(input([], []))
      assert.strictEqual(events.length, 1)
      const e = events[0] as RunnerWatch.RunnerLeft
      assert.strictEqual(e.reason, "unregistered")
      assert.strictEqual(e.windows, 1)
      assert.strictEqual(e.resumeInMs, 0)
      assert.match(e.message, /runner 10\.0\.0\.1:34431 left the cluster with 1 window\(s\).*on the next runner that is up/)
    }))

  it.scoped("through submit: a runner that stops answering is told to onWarning with the windows placed on it", () => {
    const open = Deferred.unsafeMake<void>(undefined as never)
    const hold = Task.make("hold", (n: number) => Effect.as(Deferred.await(open), n))
    const specs: ReadonlyArray<AnySpec> = Array.from({ length: 16 }, (_, n) => Pipeline.make("watched", hold).bind(n))
    const engine = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))
    const services = Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)
    const host = ClusterEngine.workflowLayer({ concurrency: 32, resourcesEvery: "1 hour" }).pipe(
      Layer.provideMerge(engine),
      Layer.provideMerge(services),
      Layer.provide(ClusterEngine.catalogLayer(specs))
    )
    const dead = new Set<string>()
    // the cluster as the submitter sees it: two runners registered, pings answered unless dead
    const cluster = Layer.mergeAll(
      Layer.effectDiscard(Effect.flatMap(RunnerStorage.RunnerStorage, (s) =>
        Effect.zipRight(s.register(runnerA, true), s.register(runnerB, true)))).pipe(Layer.provideMerge(RunnerStorage.layerMemory)),
      pinging(dead),
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
      dead.add(String(b))
      for (let i = 0; i < 20; i++) yield* TestClock.adjust("500 millis")
      const left = warnings.filter((w) => w._tag === "RunnerLeft")
      assert.strictEqual(left.length, 1, JSON.stringify(warnings))
      assert.strictEqual(left[0]!.runner, "10.0.0.2:34431")
      assert.isAbove(left[0]!.windows, 0, "placement put windows on both runners")
      assert.strictEqual(left[0]!.pipelines, 2 * left[0]!.windows)
      yield* Deferred.succeed(open, undefined)
      for (let i = 0; i < 20; i++) yield* TestClock.adjust("500 millis")
      const report = yield* Fiber.join(submission)
      assert.strictEqual(report.succeeded, 16)
      assert.strictEqual(warnings.filter((w) => w._tag === "RunnerResumed").length, 1, JSON.stringify(warnings))
    }).pipe(Effect.provide(host))
  })
})
