/**
 * A study re-submitted while pipelines of its earlier run still run on the runners (review37 F5):
 * the re-submission follows them (they stay filed under the earlier run: their rows, tasks and
 * attempts), so what the study's hooks do for a pipeline must name that run:
 *
 * - a trial's time-budget cancel (`RunHooks.cancelWhen`) marks `cancel/<earlierRun>/<id>`, the
 *   mark the runner running it reads: the followed pipeline stops at its next task boundary,
 *   `interrupted` (it was marked under the new run: the runner never saw it, the pipeline ran on);
 * - its usage (`RunHooks.settledAttempts`) is its attempts under the earlier run (it was read
 *   under the new run: none, metered as 0).
 *
 * On the durable path (`SingleRunner` with SQL message storage on the harness PostgreSQL; the
 * memory store and cancel marks in memory shared by the runner and the submitter).
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Option, Stream } from "effect"
import type { PipelineId, RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as CancelMarks from "../../src/services/internal/cluster/cancelMarks.js"
import * as SubmitRunner from "../../src/services/internal/cluster/submitRunner.js"
import { Store } from "../../src/services/Store.js"
import { createClusterDatabase, singleRunner, submitSpecs, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

describe("ClusterEngine: a study's hooks on the pipelines a re-submission follows", () => {
  it.live("a time-budget cancel stops a followed pipeline at its next task boundary, and its usage is metered from its earlier run's attempts", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const secondCalls = new Map<string, number>()
      const entered = new Set<string>()
      const template = Pipeline.make(
        "followstudy",
        Task.make("a", (n: number, ctx) => Effect.zipRight(Effect.sync(() => void entered.add(ctx.pipelineId)), Effect.as(Deferred.await(gate), n + 1))),
        Task.make("b", (n: number, ctx) => Effect.sync(() => (secondCalls.set(ctx.pipelineId, (secondCalls.get(ctx.pipelineId) ?? 0) + 1), n * 2)))
      )
      const specs = Array.from({ length: 3 }, (_, i) => template.bind(i))
      yield* createClusterDatabase(pg, "followstudy")
      yield* Effect.gen(function*() {
        const store = yield* Store
        const marks = yield* CancelMarks.CancelMarks
        const stateOf = (id: PipelineId) => Effect.map(store.getPipeline(id), Option.map((row) => row.state))
        // run A admits every pipeline; they start on the runner and all wait at the gate in task a
        const first = yield* Effect.fork(submitSpecs(specs, { runId: "run-a" as RunId }))
        yield* Effect.repeat(
          Effect.zipRight(turn, Effect.forEach(specs, (s) => stateOf(s.pipelineId))),
          { until: (states) => states.every((s) => Option.getOrUndefined(s) === "running") && entered.size === specs.length }
        )
        // Ctrl-C on A: the pipelines go on on the runner
        yield* Fiber.interrupt(first)
        // the study again, on the submitter as a Runner: every pipeline's time budget is spent at once
        const runner = yield* SubmitRunner.make({ pollInterval: "20 millis" })
        const metered = new Map<string, number>()
        const handle = yield* runner.start(Stream.fromIterable(specs), {
          hooks: {
            cancelWhen: () => Effect.succeed("time budget"),
            settledAttempts: (spec, attempts) => Effect.sync(() => void metered.set(spec.pipelineId, attempts.length))
          }
        })
        // the marks are written (under the run each pipeline runs under), then read by the runner
        // (every 10 ms) before task a ends
        yield* Effect.repeat(
          Effect.zipRight(turn, marks.readAll!(["run-a" as RunId, handle.runId])),
          { until: (m) => m.pipelines.size >= specs.length }
        ).pipe(Effect.timeout(Duration.seconds(20)), Effect.orElse(() => Effect.void))
        yield* Effect.sleep(Duration.millis(500))
        yield* Deferred.succeed(gate, undefined)
        const report = yield* handle.await
        const rows = yield* Effect.forEach(specs, (s) => Effect.map(store.getPipeline(s.pipelineId), Option.getOrThrow))
        // before: marked under the new run, which the runner never reads for them: task b ran, succeeded
        assert.deepStrictEqual(rows.map((r) => [r.state, r.nTasksDone, r.runId]), specs.map(() => ["interrupted", 1, "run-a"]), JSON.stringify(rows.map((r) => [r.state, r.nTasksDone, r.runId])))
        assert.deepStrictEqual([...secondCalls], [])
        // before: read under the new run: no attempt, metered 0
        for (const spec of specs) expect(metered.get(spec.pipelineId), spec.pipelineId).toBeGreaterThanOrEqual(1)
        expect(report.runId).toBe(handle.runId)
      }).pipe(
        Effect.ensuring(Deferred.succeed(gate, undefined)),
        Effect.scoped,
        Effect.provide(singleRunner(pg, "followstudy", {
          catalog: ClusterEngine.catalogLayer(specs),
          services: CancelMarks.layerMemory,
          workflow: { concurrency: 8, cancelEvery: Duration.millis(10) }
        }))
      )
    }).pipe(Effect.provide(MemoryStore.layer())), 60_000)
})
