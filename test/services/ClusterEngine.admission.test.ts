/**
 * The submitter's admission pace (issue 17, pg17ad): while admission waits for room (a window's
 * worth of `maxAdmitted` to come free), the rows of the running pipelines are read every
 * `roomPollInterval`, so the next window is admitted soon after pipelines end, not a whole
 * `pollInterval` later; the rest of the follow (`onProgress`, the heartbeat) keeps to
 * `pollInterval`. In one process (`TestRunner`, memory store), on the `TestClock`.
 */
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, Stream, TestClock } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { type AnySpec, inProcessHost } from "../support/clusterRunner.js"

const hostOf = inProcessHost

describe("ClusterEngine: admission pace (in process, TestClock)", () => {
  it.scoped("a window waiting for room is admitted within roomPollInterval of the pipelines ending, though pollInterval is 5 s; progress keeps to pollInterval", () => {
    const first = Deferred.unsafeMake<void>(undefined as never)
    // the first window's pipelines wait for `first`; the later ones end at once
    const hold = Task.make("hold", (n: number) => n < 2 ? Effect.as(Deferred.await(first), n) : Effect.succeed(n))
    const specs: ReadonlyArray<AnySpec> = [0, 1, 2, 3].map((n) => Pipeline.make("held", hold).bind(n))
    return Effect.gen(function*() {
      const store = yield* Store
      let progress = 0
      const submission = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), {
        maxAdmitted: 2,
        window: 2,
        pollInterval: "5 seconds",
        roomPollInterval: "100 millis",
        onProgress: () => Effect.sync(() => progress++)
      }))
      const rows = () => store.getPipelines(specs.map((s) => s.pipelineId))
      // the first window is admitted; the second waits for room (maxAdmitted 2)
      for (let i = 0; i < 50 && (yield* rows()).size < 2; i++) yield* TestClock.adjust("10 millis")
      assert.strictEqual((yield* rows()).size, 2, "the first window admitted")
      yield* Deferred.succeed(first, undefined)
      // the first window's rows settle; within a few room polls (not 5 s) the next is admitted
      let waited = 0
      while (waited < 2_000 && (yield* rows()).size < 4) {
        yield* TestClock.adjust("10 millis")
        waited += 10
      }
      assert.strictEqual((yield* rows()).size, 4, "the second window admitted after the first ended")
      assert.isBelow(waited, 1_000)
      assert.strictEqual(progress, 0, "no whole follow before pollInterval has passed")
      // the tail is followed at pollInterval: once every row has ended, one whole follow ends the submission
      const ended = () => Effect.map(rows(), (m) => [...m.values()].filter((r) => r.state === "succeeded").length)
      for (let i = 0; i < 200 && (yield* ended()) < 4; i++) yield* TestClock.adjust("10 millis")
      assert.strictEqual(progress, 0, "no whole follow before pollInterval has passed")
      yield* TestClock.adjust("5 seconds")
      const report = yield* Fiber.join(submission)
      assert.strictEqual(report.succeeded, 4)
      assert.isAtLeast(progress, 1)
    }).pipe(Effect.provide(hostOf(specs)))
  })

  it.scoped("window placement with a runner storage that never answers: admission goes on without it after 2 s (lane 0), and the submission ends", () => {
    const specs: ReadonlyArray<AnySpec> = [0, 1, 2, 3].map((n) => Pipeline.make("placed", Task.make("t", (x: number) => Effect.succeed(x))).bind(n))
    // the cluster's runner storage, its `getRunners` hanging (a database that stopped answering)
    const hanging = Layer.effect(
      RunnerStorage.RunnerStorage,
      Effect.map(RunnerStorage.RunnerStorage, (storage) => ({ ...storage, getRunners: Effect.never }))
    ).pipe(Layer.provide(RunnerStorage.layerMemory))
    return Effect.gen(function*() {
      const submission = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), {
        maxAdmitted: 4,
        window: 2,
        pollInterval: "100 millis",
        onWarning: () => Effect.void
      }).pipe(Effect.provide(Layer.merge(hanging, ShardingConfig.layer()))))
      let exit = yield* Fiber.poll(submission)
      for (let i = 0; i < 300 && Option.isNone(exit); i++) {
        yield* TestClock.adjust("100 millis")
        exit = yield* Fiber.poll(submission)
      }
      assert.isTrue(Option.isSome(exit), "the submission still waits on the runner storage after 30 s")
      const report = yield* Fiber.join(submission)
      assert.strictEqual(report.succeeded, 4)
    }).pipe(Effect.provide(hostOf(specs)))
  })

  it.scoped("a room poll reads the states of the 2 × window pipelines admitted first only, a whole follow of every running one: the ended ones' states, never whole rows", () => {
    const open = Deferred.unsafeMake<void>(undefined as never)
    const hold = Task.make("hold", (n: number) => Effect.as(Deferred.await(open), n))
    const specs: ReadonlyArray<AnySpec> = Array.from({ length: 12 }, (_, n) => Pipeline.make("held", hold).bind(n))
    // every read of pipelines the store gets: whole rows (`getPipelines`) or states, with the
    // number of ids and the states asked for
    const reads: Array<{ readonly rows: boolean; readonly ids: number; readonly among?: ReadonlyArray<string> | undefined }> = []
    const wrap = (s: StoreService): StoreService => ({
      ...s,
      getPipelines: (ids) => Effect.zipRight(Effect.sync(() => reads.push({ rows: true, ids: ids.length })), s.getPipelines(ids)),
      pipelineStates: (ids, among) =>
        Effect.zipRight(Effect.sync(() => reads.push({ rows: false, ids: ids.length, among })), s.pipelineStates!(ids, among)),
      streamAttempts: (filter) => Stream.unwrap(Effect.sync(() => {
        attemptStreams++
        return s.streamAttempts(filter)
      }))
    })
    let attemptStreams = 0
    return Effect.gen(function*() {
      const store = yield* Store
      let progress = 0
      const submission = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), {
        maxAdmitted: 8,
        window: 2,
        admitBatch: 2,
        pollInterval: "5 seconds",
        roomPollInterval: "100 millis",
        onProgress: () => Effect.sync(() => progress++)
      }))
      // 8 admitted, the rest wait for room: room polls only until the first whole follow
      for (let i = 0; i < 40; i++) yield* TestClock.adjust("100 millis")
      assert.strictEqual(progress, 0)
      const follows = reads.filter((r) => !r.rows)
      assert.isAbove(follows.length, 6)
      assert.isAtMost(Math.max(...follows.map((r) => r.ids)), 4, "a room poll reads 2 × window states (8 are running)")
      // whole rows: only admission's (its 2-spec batches' rows, before the first room poll:
      // a stored row is admitted again from where it is); the follow reads states alone
      const rowReads = reads.filter((r) => r.rows)
      assert.isTrue(rowReads.every((r) => r.ids === 2), "admission's batches only")
      assert.isAtMost(rowReads.length, 6, "no whole row read by the room polls")
      for (const r of follows) assert.deepStrictEqual(r.among, ["succeeded", "failed", "interrupted"])
      yield* TestClock.adjust("1 second")
      assert.strictEqual(progress, 1)
      assert.deepStrictEqual(reads[reads.length - 1], { rows: false, ids: 8, among: ["succeeded", "failed", "interrupted"] }, "a whole follow reads the state of every running pipeline that ended")
      yield* Deferred.succeed(open, undefined)
      for (let i = 0; i < 20 && submission.unsafePoll() === null; i++) yield* TestClock.adjust("5 seconds")
      const report = yield* Fiber.join(submission)
      assert.strictEqual(report.succeeded, 12)
      // the run's cache figures (run.finished) come from the store's aggregate, not from
      // streaming every attempt of the run into the submitter after its last task
      assert.strictEqual(attemptStreams, 0)
      void store
    }).pipe(
      // a failed assertion lets the held tasks end, so the host's scope closes (no hang)
      Effect.onExit(() => Deferred.succeed(open, undefined)),
      Effect.provide(hostOf(specs, wrap))
    )
  })

  it.scoped("by default up to 1,024 pipelines are admitted at once (DEFAULT_MAX_ADMITTED; 256 before pg17ad)", () => {
    const open = Deferred.unsafeMake<void>(undefined as never)
    // every pipeline waits for `open`: what is admitted before it opens is the admission limit
    const hold = Task.make("hold", (n: number) => Effect.as(Deferred.await(open), n))
    const specs: ReadonlyArray<AnySpec> = Array.from({ length: 320 }, (_, n) => Pipeline.make("held", hold).bind(n))
    return Effect.gen(function*() {
      const store = yield* Store
      const submission = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "5 seconds" }))
      const admitted = () => Effect.map(store.getPipelines(specs.map((s) => s.pipelineId)), (m) => m.size)
      for (let i = 0; i < 100 && (yield* admitted()) < specs.length; i++) yield* TestClock.adjust("10 millis")
      assert.strictEqual(yield* admitted(), 320, "every pipeline admitted before any ended")
      yield* Deferred.succeed(open, undefined)
      for (let i = 0; i < 20; i++) {
        yield* TestClock.adjust("5 seconds")
        if (submission.unsafePoll() !== null) break
      }
      const report = yield* Fiber.join(submission)
      assert.strictEqual(report.succeeded, 320)
    }).pipe(Effect.provide(hostOf(specs)))
  })
})
