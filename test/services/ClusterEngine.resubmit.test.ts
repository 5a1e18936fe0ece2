/**
 * Issue 17 §3 (a fresh user's findings): submitting to the cluster again after something went
 * wrong, on the durable path (`SingleRunner` with SQL message storage on the harness
 * PostgreSQL; the memory store stands in for the shared store).
 *
 * - A runner started with another experiment file refuses the pipelines: the submitter stops
 *   admitting, ends with a `ConfigError` naming the cause, and once the runners host the
 *   experiment a re-submit runs every pipeline (the refused workflows are cleared, not
 *   answered from storage).
 * - A failed pipeline is failed, not "already done": a re-submit re-runs it from its failed
 *   task (as `resume` would), committed tasks are not called again.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Either, Fiber, Layer, Option, Stream } from "effect"
import { FatalError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { isRunnersRefused } from "../../src/services/internal/cluster/refusal.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, assertSucceeded, createClusterDatabase, singleRunner, submitSpecs } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** A catalog that hosts `specs` only while `hosting()` says so (a runner started on another file, then fixed). */
const switchableCatalog = (specs: ReadonlyArray<AnySpec>, hosting: () => boolean) => {
  const byId = new Map(specs.map((s) => [s.pipelineId as string, s]))
  return Layer.succeed(ClusterEngine.SpecCatalog, {
    lookup: (id) => Effect.sync(() => hosting() ? Option.fromNullable(byId.get(id)) : Option.none())
  })
}

/** One runner on database `db` (sharding + workflow engine + the pipeline workflow), over the store in context. */
const runnerOf = (db: string, catalog: Layer.Layer<typeof ClusterEngine.SpecCatalog.Identifier>) =>
  singleRunner(pg, db, { catalog })

/** A fresh database `db` with the engine's in-flight markers (what `assay migrate` creates beside the cluster's tables). */
const createDatabase = (db: string) => createClusterDatabase(pg, db)

describe("ClusterEngine: submitting again", () => {
  it.live("a runner that does not host the experiment: the submitter stops admitting and names the cause; a re-submit runs them once runners host it", () => {
    const template = Pipeline.make("hosted", Task.make("a", (n: number) => Effect.succeed(n + 1)))
    const specs = Array.from({ length: 8 }, (_, i) => template.bind(i))
    let hosting = false
    return createDatabase("refused").pipe(Effect.zipRight(Effect.gen(function*() {
      // the runner loaded another experiment file: every pipeline is refused
      const outcomes: Array<string> = []
      let last: ClusterEngine.SubmitProgress | undefined
      const out = yield* Effect.either(submitSpecs(specs, {
        maxAdmitted: 3,
        onSettled: (_, outcome) => void outcomes.push(outcome),
        onProgress: (p) => Effect.sync(() => void (last = p))
      }))
      assert.isTrue(Either.isLeft(out))
      if (Either.isLeft(out)) {
        assert.strictEqual(out.left._tag, "ConfigError")
        assert.match(out.left.message, /refused by the runners/)
        assert.match(out.left.message, /is not among the pipelines this runner serves/)
        assert.match(out.left.message, /assay runner -c FILE --database URL/)
        // what to do is said once, and names the restart a runner needs once its file changed (F7)
        assert.strictEqual(out.left.message.split("runner -c").length, 2, out.left.message)
        assert.include(out.left.message, "restart them if they were started before the file changed")
        assert.isTrue(isRunnersRefused(out.left))
      }
      const store = yield* Store
      // admission stopped at the first refusals: the window, not the whole experiment
      const admitted = yield* Effect.filter(specs, (s) => Effect.map(store.getPipeline(s.pipelineId), Option.isSome))
      assert.isAtMost(admitted.length, 3)
      // nothing runs them: left interrupted (resumable), not running (tester17af F7)
      const states = yield* Effect.forEach(admitted, (s) => Effect.map(store.getPipeline(s.pipelineId), (r) => Option.getOrThrow(r).state))
      assert.deepStrictEqual(states, admitted.map(() => "interrupted"))
      // and counted so, as their rows say: interrupted (refused), never failed (fix17ai)
      assert.deepStrictEqual(outcomes, admitted.map(() => "interrupted"))
      // with a `pipeline.interrupted` event of the refused run beside each row, committed with it
      // (the evidence another submission's follow counts a row taken from that run by: without
      // it, a refused pipeline admitted again by a third run reads as failed)
      const runIds = yield* Effect.forEach(admitted, (s) => Effect.map(store.getPipeline(s.pipelineId), (r) => Option.getOrThrow(r).runId))
      const interruptedEvents = yield* Effect.forEach(admitted, (s, i) =>
        store.countEvents({ pipelineId: s.pipelineId, runId: runIds[i]!, kind: "pipeline.interrupted" }))
      assert.deepStrictEqual(interruptedEvents, admitted.map(() => 1))
      assert.deepInclude(last, { admitted: admitted.length, failed: 0, interrupted: admitted.length, refused: admitted.length, running: 0 })
      // the runners are fixed: submitting again runs every pipeline (the refused workflows do not answer for them)
      hosting = true
      const report = yield* submitSpecs(specs, { maxAdmitted: 3 })
      assert.deepInclude(report, { succeeded: 8, failed: 0 })
      yield* assertSucceeded(specs)
    }).pipe(Effect.provide(runnerOf("refused", switchableCatalog(specs, () => hosting))))), Effect.provide(MemoryStore.layer()))
  }, 60_000)

  it.live("a re-submit re-runs failed pipelines from their failed task (as resume does); they count as failed, not as done", () => {
    const calls = new Map<string, number>()
    const count = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1)
    let broken = true
    const a = Task.make("a", (n: number, ctx) => Effect.sync(() => (count(`${ctx.pipelineId}/a`), n + 1)))
    const b = Task.make("b", (n: number, ctx) =>
      Effect.suspend(() => {
        count(`${ctx.pipelineId}/b`)
        return broken ? Effect.fail(new FatalError({ message: "broken" })) : Effect.succeed(n * 2)
      }))
    const template = Pipeline.make("refail", a, b)
    const specs = Array.from({ length: 4 }, (_, i) => template.bind(i))
    return createDatabase("refail").pipe(Effect.zipRight(Effect.gen(function*() {
      const first = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis" })
      assert.strictEqual(first.failed, 4)
      // still broken: a re-submit runs them again and reports them failed again (not "already done")
      const second = yield* submitSpecs(specs)
      assert.deepInclude(second, { skipped: 0, admitted: 4, failed: 4 })
      broken = false
      const third = yield* submitSpecs(specs)
      assert.deepInclude(third, { admitted: 4, succeeded: 4 })
      yield* assertSucceeded(specs)
      for (const spec of specs) {
        // the committed first task is kept: never called again; the failed one ran each time
        assert.strictEqual(calls.get(`${spec.pipelineId}/a`), 1)
        assert.strictEqual(calls.get(`${spec.pipelineId}/b`), 3)
      }
      const fourth = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis" })
      assert.strictEqual(fourth.skipped, 4)
      assert.strictEqual(fourth.admitted, 0)
    }).pipe(Effect.provide(runnerOf("refail", ClusterEngine.catalogLayer(specs))))), Effect.provide(MemoryStore.layer()))
  }, 60_000)

  it.live("a re-submit right after a failure waits for the failed workflow to end, then runs the pipeline again (never joins the ending one)", () => {
    const calls = new Map<string, number>()
    let broken = true
    const b = Task.make("b", (n: number, ctx) =>
      Effect.suspend(() => {
        calls.set(ctx.pipelineId, (calls.get(ctx.pipelineId) ?? 0) + 1)
        return broken ? Effect.fail(new FatalError({ message: "broken" })) : Effect.succeed(n * 2)
      }))
    const template = Pipeline.make("slowend", Task.make("a", (n: number) => Effect.succeed(n + 1)), b)
    const specs = Array.from({ length: 3 }, (_, i) => template.bind(i))
    // the workflow settles the row `failed`, then takes 1.5 s to end: the submitter sees the
    // failed row first, returns, and the re-submit starts while the workflow is still ending
    const slowEnd = Layer.effect(
      Store,
      Effect.map(Store, (store) => ({
        ...store,
        checkpoint: (unit: Parameters<typeof store.checkpoint>[0]) =>
          unit.pipeline?.state === "failed"
            ? Effect.zipLeft(store.checkpoint(unit), Effect.sleep(Duration.millis(1500)))
            : store.checkpoint(unit)
      }))
    ).pipe(Layer.provide(MemoryStore.layer()))
    return createDatabase("slowend").pipe(Effect.zipRight(Effect.gen(function*() {
      const first = yield* submitSpecs(specs)
      assert.strictEqual(first.failed, 3)
      broken = false
      const second = yield* submitSpecs(specs)
      assert.deepInclude(second, { admitted: 3, succeeded: 3 })
      yield* assertSucceeded(specs)
      for (const spec of specs) assert.strictEqual(calls.get(spec.pipelineId), 2)
    }).pipe(Effect.provide(runnerOf("slowend", ClusterEngine.catalogLayer(specs))))), Effect.provide(slowEnd))
  }, 60_000)

  it.live("a re-submit stopped while it waits for a failed window's workflow to end writes nothing: the rows stay failed, resumable (review37 F4)", () => {
    const calls = new Map<string, number>()
    let broken = true
    const b = Task.make("b", (n: number, ctx) =>
      Effect.suspend(() => {
        calls.set(ctx.pipelineId, (calls.get(ctx.pipelineId) ?? 0) + 1)
        return broken ? Effect.fail(new FatalError({ message: "broken" })) : Effect.succeed(n * 2)
      }))
    const template = Pipeline.make("stuckend", Task.make("a", (n: number) => Effect.succeed(n + 1)), b)
    const specs = Array.from({ length: 3 }, (_, i) => template.bind(i))
    return Effect.gen(function*() {
      // the workflow settles the row `failed`, then cannot end until `ended` is opened
      const ended = yield* Deferred.make<void>()
      const stuckEnd = Layer.effect(
        Store,
        Effect.map(Store, (store) => ({
          ...store,
          checkpoint: (unit: Parameters<typeof store.checkpoint>[0]) =>
            unit.pipeline?.state === "failed"
              ? Effect.zipLeft(store.checkpoint(unit), Deferred.await(ended))
              : store.checkpoint(unit)
        }))
      ).pipe(Layer.provide(MemoryStore.layer()))
      yield* createDatabase("stuckend").pipe(Effect.zipRight(Effect.gen(function*() {
        const store = yield* Store
        const first = yield* submitSpecs(specs)
        assert.strictEqual(first.failed, 3)
        broken = false
        // the re-submit waits for the ending workflow; the user stops it (Ctrl-C) meanwhile
        const second = yield* Effect.fork(submitSpecs(specs))
        yield* Effect.sleep(Duration.millis(1500))
        yield* Fiber.interrupt(second)
        // nothing was written for them: still failed under the first run, not `running` with no window
        for (const spec of specs) {
          const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
          assert.strictEqual(row.state, "failed", spec.pipelineId)
        }
        // the old workflow ends; a third submission runs them once more and they succeed
        yield* Deferred.succeed(ended, undefined)
        const third = yield* submitSpecs(specs)
        assert.deepInclude(third, { admitted: 3, succeeded: 3 })
        yield* assertSucceeded(specs)
        for (const spec of specs) assert.strictEqual(calls.get(spec.pipelineId), 2)
      }).pipe(
        // on any exit (a failed assertion included) the old workflow may end: the runner can close
        Effect.ensuring(Deferred.succeed(ended, undefined)),
        Effect.provide(runnerOf("stuckend", ClusterEngine.catalogLayer(specs)))
      )), Effect.provide(stuckEnd))
    })
  }, 60_000)
})
