/**
 * Issue 17 (chaos C6, Postgres restarted under three runners): what the cluster engine does
 * when `@effect/cluster` 0.60 meets a lost database connection or lets a shard go.
 *
 * - The engine's own request for an activity fails with a `PersistenceError` while Postgres
 *   restarts; `ClusterWorkflowEngine` dies on it (`Effect.orDie`) and the workflow would
 *   complete with the defect: the pipeline ended `failed` on an infrastructure error. The
 *   workflow now sends the request again once the database answers (same primary key: the same
 *   request).
 * - The engine interrupts an activity whose shard the runner lets go (a Postgres restart drops
 *   the advisory shard locks; a slow lock refresh force-releases every shard) and runs it again
 *   once the shard is back. The task execution is not cut: it goes on to its commit, and the
 *   second execution awaits it: the provider is called once.
 */
import { NodeContext } from "@effect/platform-node"
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import { PersistenceError } from "@effect/cluster/ClusterError"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as RunnerHealth from "@effect/cluster/RunnerHealth"
import * as Runners from "@effect/cluster/Runners"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Clock, Deferred, Effect, Exit, Fiber, Layer, Option, Stream, TestClock } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import * as Infra from "../../src/services/internal/cluster/infra.js"
import { makeTaskEnv, runTask } from "../../src/services/internal/cluster/task.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import * as Pool from "../../src/services/Pool.js"
import { Store } from "../../src/services/Store.js"

/** What the Postgres driver's error looks like when the server restarts (its cause chain). */
const connectionLost = () =>
  new PersistenceError({ cause: Object.assign(new Error("Connection terminated unexpectedly"), { name: "SqlError" }) })

/**
 * What a statement cancelled by the driver looks like (`@effect/sql-pg` cancels an interrupted
 * fiber's statement with `pg_cancel_backend`, best effort; when it lands late it cancels the
 * next statement run on that connection): SQLSTATE 57014 under an `SqlError`.
 */
const statementCancelled = () =>
  new PersistenceError({
    cause: Object.assign(new Error("Failed to execute statement"), {
      name: "SqlError",
      cause: Object.assign(new Error("canceling statement due to user request"), { code: "57014" })
    })
  })

/**
 * The in-memory cluster of `TestRunner`, with the message storage's `saveRequest` refusing
 * the first `failures` requests for activity `activity` with `error` (a lost connection by default).
 */
const flakyCluster = (activity: string, failures: number, error: () => PersistenceError = connectionLost, tag = "activity") => {
  let left = failures
  const storage = Layer.effect(
    MessageStorage.MessageStorage,
    Effect.map(MessageStorage.MessageStorage, (s) =>
      MessageStorage.MessageStorage.of({
        ...s,
        saveRequest: (message) =>
          Effect.suspend(() => {
            const name = (message.envelope.payload as { readonly name?: unknown } | undefined)?.name
            if (message.envelope.tag === tag && (tag !== "activity" || name === activity) && left > 0) {
              left--
              return Effect.fail(error())
            }
            return s.saveRequest(message)
          })
      }))
  ).pipe(Layer.provideMerge(MessageStorage.layerMemory))
  return Sharding.layer.pipe(
    Layer.provideMerge(Runners.layerNoop),
    Layer.provideMerge(storage),
    Layer.provide([RunnerStorage.layerMemory, RunnerHealth.layerNoop]),
    Layer.provide(ShardingConfig.layer())
  )
}

describe("ClusterEngine: a lost database connection, a shard let go", () => {
  it.live("the engine's request for an activity fails on a lost connection: the workflow sends it again, the pipeline succeeds, each task runs once", () => {
    const calls = new Map<string, number>()
    const count = (name: string) => (n: number) =>
      Effect.sync(() => {
        calls.set(name, (calls.get(name) ?? 0) + 1)
        return n + 1
      })
    const template = Pipeline.make("flaky", Task.make("a", count("a")), Task.make("b", count("b")), Task.make("c", count("c")))
    const spec = template.bind(1)
    const host = ClusterEngine.workflowLayer({ concurrency: 4 }).pipe(
      Layer.provideMerge(ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(flakyCluster("window", 3)))),
      Layer.provideMerge(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)),
      Layer.provide(ClusterEngine.catalogLayer([spec]))
    )
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.make(spec), { pollInterval: "20 millis", resultEvery: 1 })
      assert.deepStrictEqual(report.causes, [])
      assert.strictEqual(report.succeeded, 1)
      assert.strictEqual(report.failed, 0)
      const store = yield* Store
      const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
      assert.strictEqual(row.state, "succeeded")
      assert.deepStrictEqual(Object.fromEntries(calls), { a: 1, b: 1, c: 1 })
    }).pipe(Effect.provide(host))
  })

  it.scopedLive("a task execution whose activity is interrupted goes on to its commit; the activity run again awaits it: one call", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      let calls = 0
      const ask = Task.make("ask", (n: number) =>
        Effect.gen(function*() {
          calls++
          yield* Deferred.succeed(started, undefined)
          // the provider's answer is on its way
          yield* Deferred.await(gate)
          return n * 10
        }))
      const spec = Pipeline.make("cut", ask).bind(4)
      const store = yield* Store
      const now = yield* Clock.currentTimeMillis
      const runId = "run-cut" as RunId
      yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
      yield* store.admit([Rows.admissionRow(spec, 0, undefined, runId, now)], [Rows.seedArtifact(spec, runId, now)])
      const env = yield* makeTaskEnv({ store, pools: yield* Pool.Pools, bus: yield* makeBus, concurrency: 4 })
      // the activity runs the task, and is interrupted while the call is in flight (its shard
      // was let go)
      const first = yield* Effect.fork(runTask(env, spec, 0))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(first)
      // the engine runs the activity again once the shard is back; the answer then arrives
      const second = yield* Effect.fork(runTask(env, spec, 0))
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(second), "done")
      assert.strictEqual(calls, 1, "the provider was called once")
      assert.deepStrictEqual((yield* store.listArtifacts(spec.pipelineId)).map((a) => a.seq), [-1, 0])
      // once it ended, the task is committed: a later execution does not call again (L1)
      assert.strictEqual(yield* runTask(env, spec, 0), "done")
      assert.strictEqual(calls, 1)
    }).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))))

  it.effect("ridingOut: a lost connection, failed or died with, is tried again; anything else is what it was", () =>
    Effect.gen(function*() {
      let tries = 0
      const flaky = Effect.suspend(() => ++tries <= 2 ? Effect.die(connectionLost()) : Effect.succeed("ok"))
      const fiber = yield* Effect.fork(Infra.ridingOut(flaky))
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(yield* Fiber.join(fiber), "ok")
      assert.strictEqual(tries, 3)
      // a defect that is not a lost connection dies at once
      let other = 0
      const exit = yield* Effect.exit(Infra.ridingOut(Effect.suspend(() => (other++, Effect.die(new Error("bug"))))))
      assert.isTrue(Exit.causeOption(exit).pipe(Option.exists((c) => c._tag === "Die")), "a defect")
      assert.strictEqual(other, 1)
      // a lost connection that outlasts the budget is what it was (a defect stays a defect)
      const lasting = yield* Effect.fork(
        Infra.ridingOut(Effect.die(connectionLost()), Infra.ridingOutSchedule("1 second"))
      )
      yield* TestClock.adjust("1 minute")
      const lost = yield* Fiber.await(lasting)
      assert.isTrue(Exit.causeOption(lost).pipe(Option.exists((c) => c._tag === "Die")), "still a defect")
      // a typed failure that is a lost connection is retried too, and kept typed
      let typed = 0
      const failing = Effect.suspend(() => ++typed <= 1 ? Effect.fail(connectionLost()) : Effect.succeed(1))
      const f2 = yield* Effect.fork(Infra.ridingOut(failing))
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* Fiber.join(f2), 1)
    }))
  it.live("the engine's request for a window's activity fails on a cancelled statement (57014): the workflow sends it again, no defect, each task runs once", () => {
    const calls = new Map<string, number>()
    const count = (name: string) => (n: number) =>
      Effect.sync(() => {
        calls.set(name, (calls.get(name) ?? 0) + 1)
        return n + 1
      })
    const template = Pipeline.make("cancelled", Task.make("a", count("a")), Task.make("b", count("b")))
    const specs = [template.bind(1), template.bind(2)]
    const host = ClusterEngine.workflowLayer({ concurrency: 4 }).pipe(
      Layer.provideMerge(ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(flakyCluster("window", 2, statementCancelled)))),
      Layer.provideMerge(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)),
      Layer.provide(ClusterEngine.catalogLayer(specs))
    )
    return Effect.gen(function*() {
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis", resultEvery: 1 })
      assert.deepStrictEqual(report.causes, [])
      assert.strictEqual(report.succeeded, 2)
      assert.strictEqual(report.failed, 0)
      assert.deepStrictEqual(Object.fromEntries(calls), { a: 2, b: 2 })
    }).pipe(Effect.provide(host))
  })

  it.effect("the submitter's own retry budget (60 s) ending on a lost database is a typed StoreUnavailable naming what failed, never a defect", () => {
    const template = Pipeline.make("unreachable", Task.make("a", (n: number) => Effect.succeed(n + 1)))
    const spec = template.bind(1)
    // every start of a window's workflow meets a lost connection, for longer than the budget
    const host = ClusterEngine.workflowLayer({ concurrency: 4 }).pipe(
      Layer.provideMerge(ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(flakyCluster("", Infinity, connectionLost, "run")))),
      Layer.provideMerge(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), NodeContext.layer)),
      Layer.provide(ClusterEngine.catalogLayer([spec]))
    )
    return Effect.gen(function*() {
      const fiber = yield* Effect.fork(ClusterEngine.submit(Stream.make(spec), { pollInterval: "20 millis", resultEvery: 1 }))
      for (let i = 0; i < 30; i++) yield* TestClock.adjust("5 seconds")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit) && !Cause.isDie(exit.cause), "a failure, not a defect")
      const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      assert.isTrue(Option.isSome(failure))
      const error = Option.getOrThrow(failure) as { readonly _tag: string; readonly message: string }
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.match(error.message, /cannot start the workflow of a window: the cluster's database stayed unreachable for the submitter's 1m retry budget/)
      assert.match(error.message, /Connection terminated unexpectedly/)
      assert.match(error.message, /submit again/)
    }).pipe(Effect.provide(host))
  })

  it.effect("ridingOutTyped: a cancelled statement is tried again; one that outlasts the budget is a typed StoreUnavailable, never a defect", () =>
    Effect.gen(function*() {
      let tries = 0
      const flaky = Effect.suspend(() => ++tries <= 2 ? Effect.die(statementCancelled()) : Effect.succeed("ok"))
      const fiber = yield* Effect.fork(Infra.ridingOutTyped(flaky))
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(yield* Fiber.join(fiber), "ok")
      assert.strictEqual(tries, 3)
      const lasting = yield* Effect.fork(Infra.ridingOutTyped(Effect.die(statementCancelled()), Infra.ridingOutSchedule("1 second")))
      yield* TestClock.adjust("1 minute")
      const exit = yield* Fiber.await(lasting)
      assert.isTrue(Exit.isFailure(exit))
      const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      assert.isTrue(Option.isSome(failure) && (failure.value as { _tag?: string })._tag === "StoreUnavailable", "a typed StoreUnavailable")
      assert.isFalse(Exit.isFailure(exit) && Cause.isDie(exit.cause), "not a defect")
      // a defect that is not the storage's is still a defect
      const bug = yield* Effect.exit(Infra.ridingOutTyped(Effect.die(new Error("bug"))))
      assert.isTrue(Exit.isFailure(bug) && Cause.isDie(bug.cause))
    }))
})
