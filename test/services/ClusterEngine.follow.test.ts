/**
 * Submitting again while the first submission's pipelines still run (found by newuser37): the
 * scale-out doc's recovery after Ctrl-C on the submitter is "run the same command again: it
 * skips what succeeded, follows what is running". The pipelines it follows stay filed under the
 * first run (their windows write their tasks under it), so the second submission counts them
 * apart (`followed`, with the runs they belong to), never as its own: before, it said "884
 * succeeded" while `assay report` of its run showed `Pipelines: 0`.
 *
 * The invariant asserted: what a submission says it ran is what the store files under its run
 * id, and what it followed is said with the run it belongs to.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { Store } from "../../src/services/Store.js"
import { createClusterDatabase, singleRunner, submitSpecs, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

describe("ClusterEngine: submitting again while the first submission's pipelines still run", () => {
  it.live("the pipelines a re-submission follows to their end are filed under its run, as its summary counts them", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const template = Pipeline.make(
        "followed",
        Task.make("a", (n: number) => Effect.as(Deferred.await(gate), n + 1))
      )
      const specs = Array.from({ length: 4 }, (_, i) => template.bind(i))
      yield* createClusterDatabase(pg, "follow")
      yield* Effect.gen(function*() {
        const store = yield* Store
        const stateOf = (id: (typeof specs)[number]["pipelineId"]) =>
          Effect.map(store.getPipeline(id), Option.map((row) => row.state))
        // submission A admits every pipeline; they start on the runner and wait at the gate
        const first = yield* Effect.fork(submitSpecs(specs, { runId: "run-a" as RunId }))
        yield* Effect.repeat(
          Effect.zipRight(turn, Effect.forEach(specs, (s) => stateOf(s.pipelineId))),
          { until: (states) => states.every((s) => Option.getOrUndefined(s) === "running") }
        )
        // Ctrl-C on A: the pipelines go on on the runner
        yield* Fiber.interrupt(first)
        // the same command again (B): it follows the running pipelines; they end while it follows
        let polled = false
        const second = yield* Effect.fork(submitSpecs(specs, {
          runId: "run-b" as RunId,
          onProgress: () => Effect.sync(() => void (polled = true))
        }))
        yield* Effect.repeat(turn, { until: () => polled })
        yield* Deferred.succeed(gate, undefined)
        const report = yield* Fiber.join(second)
        const rows = yield* Effect.forEach(specs, (s) => Effect.map(store.getPipeline(s.pipelineId), Option.getOrThrow))
        assert.deepStrictEqual(rows.map((r) => r.state), specs.map(() => "succeeded"))
        const filedUnderB = rows.filter((r) => r.runId === "run-b").length
        // seen before any fix: B says 4 succeeded, its run holds 0 rows (they stay run-a's)
        expect(report.followed).toStrictEqual({ running: 0, succeeded: 4, failed: 0, interrupted: 0, runIds: ["run-a"] })
        expect(report.admitted).toBe(0)
        assert.strictEqual(
          report.succeeded,
          filedUnderB,
          `submission B counts ${report.succeeded} succeeded, the store files ${filedUnderB} under run-b (runIds: ${
            rows.map((r) => r.runId).join(", ")
          })`
        )
      }).pipe(Effect.provide(singleRunner(pg, "follow", { catalog: ClusterEngine.catalogLayer(specs) })))
    }).pipe(Effect.provide(MemoryStore.layer())), 60_000)
})
