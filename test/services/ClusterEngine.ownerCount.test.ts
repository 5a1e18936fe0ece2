/**
 * break38 F2: a submission's follow counts a pipeline by the run that owns its row now. A row of
 * a run moves to another run only when another submission admits it again, after it ended
 * `failed` or `interrupted` here (a succeeded row is skipped, a running one followed): a row
 * the first submission finds ended under another run is counted as what it did under its own
 * run (failed, or interrupted when the run's cancel stopped it), with a cause naming the run
 * that took it, never as its success (before: `{ succeeded: 1, failed: 0 }`, exit 0, though
 * the pipeline failed under its run; with real processes, `test/chaos/break38.chaos.ts` B11).
 *
 * One runner (`SingleRunner`, SQL message storage) with window claims, the Postgres store in the
 * cluster's database, as `ClusterEngine.break38.test.ts` (/work/wt/break38) had them.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option } from "effect"
import { FatalError } from "../../src/domain/Errors.js"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as PgStore from "../../src/layers/PgStore.js"
import * as CancelMarks from "../../src/services/internal/cluster/cancelMarks.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, createClusterDatabase, singleRunner, submitSpecs } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** `body` with database `db` (cluster tables, claims), the Postgres store in it, and one runner with window claims. */
const onRunner = <A, E>(
  db: string,
  specs: ReadonlyArray<AnySpec>,
  body: Effect.Effect<A, E, any>,
  options: { readonly marks?: CancelMarks.CancelMarksService } = {}
) =>
  Effect.zipRight(
    createClusterDatabase(pg, db),
    Effect.suspend(() =>
      body.pipe(
        Effect.provide(
          singleRunner(pg, db, {
            specs,
            workflow: { concurrency: 16, windowClaims: true, ...(options.marks === undefined ? {} : { cancelEvery: "20 millis" }) },
            ...(options.marks === undefined ? {} : { services: Layer.succeed(CancelMarks.CancelMarks, options.marks) })
          }).pipe(
            Layer.provideMerge(PgStore.layer({ url: pg.url(db), migrate: true }))
          )
        )
      )
    )
  ) as Effect.Effect<A, unknown>

/** The counts of a report that F2 is about. */
const own = (r: { readonly succeeded: number; readonly failed: number; readonly interrupted: number }) => ({
  succeeded: r.succeeded,
  failed: r.failed,
  interrupted: r.interrupted
})

describe("ClusterEngine: a submission counts its pipelines by the run that owns their rows (break38 F2)", () => {
  it.live("a pipeline that failed under a submission and was re-admitted and run to success by another before the first looked: the first counts it failed, not succeeded", () => {
    let calls = 0
    const template = Pipeline.make(
      "recount",
      Task.make("a", (n: number) => Effect.succeed(n + 1)),
      // b fails (fatal) on its first call only
      Task.make("b", (n: number) => Effect.suspend(() => ++calls === 1 ? Effect.fail(new FatalError({ message: "first call fails" })) : Effect.succeed(n * 2)))
    )
    const specs = [template.bind(1)]
    return onRunner("owner38_recount", specs, Effect.gen(function*() {
      const store = yield* Store
      // submitter B follows its rows every 4 s
      const b = yield* Effect.fork(submitSpecs(specs, { window: 1, maxAdmitted: 1, pollInterval: "4 seconds", roomPollInterval: "4 seconds", resultEvery: 1000 }))
      yield* Effect.repeat(Effect.zipLeft(store.getPipeline(specs[0]!.pipelineId), Effect.sleep("50 millis")), {
        until: (r) => Option.isSome(r) && r.value.state === "failed"
      })
      // submitter A, before B looks again: re-admits the failed row and runs it to success
      const a = yield* submitSpecs(specs, { window: 1, maxAdmitted: 1 })
      assert.strictEqual(a.succeeded, 1)
      const reportB = yield* Fiber.join(b)
      const row = Option.getOrThrow(yield* store.getPipeline(specs[0]!.pipelineId))
      assert.deepStrictEqual([row.runId, row.state], [a.runId, "succeeded"], "the row is A's now")
      // the pipeline failed under B's run (its row is A's now): B's own count says so
      assert.deepStrictEqual(
        own(reportB),
        { succeeded: 0, failed: 1, interrupted: 0 },
        `B's report ${JSON.stringify(reportB)}; the row: run ${row.runId} (A ${a.runId}, B ${reportB.runId}), ${row.state}`
      )
      assert.strictEqual(reportB.admitted, 1)
      assert.strictEqual(reportB.running, 0)
      // its cause names the run that took it
      assert.isTrue(
        reportB.causes.some((c) => c.startsWith(`${specs[0]!.pipelineId}: failed under this run`) && c.includes(`admitted again by run ${a.runId}`)),
        JSON.stringify(reportB.causes)
      )
    }))
  }, 120_000)

  it.live("a pipeline a cancel of its run stopped, re-admitted and run to success by another before the first looked: the first counts it interrupted", () => {
    const calls = new Map<string, number>()
    const count = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1)
    const runB = "owner38-run-b" as RunId
    return Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const template = Pipeline.make(
        "recancel",
        // a's first call waits for the gate (the run's cancel is read meanwhile)
        Task.make("a", (n: number) => Effect.zipRight(Effect.sync(() => count("a")), Effect.as(Deferred.await(gate), n + 1))),
        Task.make("b", (n: number) => Effect.sync(() => (count("b"), n * 2)))
      )
      const specs = [template.bind(1)]
      // the runner's marks in memory; told once a read found B's mark
      const memory = CancelMarks.makeMemory()
      const seen = yield* Deferred.make<void>()
      const marks: CancelMarks.CancelMarksService = {
        mark: memory.mark,
        read: (ids) => Effect.tap(memory.read(ids), (found) => found.has(runB) ? Deferred.succeed(seen, undefined) : Effect.void)
      }
      yield* onRunner("owner38_recancel", specs, Effect.gen(function*() {
        const store = yield* Store
        // submitter B follows its rows every 6 s
        const b = yield* Effect.fork(submitSpecs(specs, {
          runId: runB,
          window: 1,
          maxAdmitted: 1,
          pollInterval: "6 seconds",
          roomPollInterval: "6 seconds",
          resultEvery: 1000
        }))
        yield* Effect.repeat(Effect.sleep("10 millis"), { until: () => calls.get("a") === 1 })
        // B's run is cancelled: a's call commits, the pipeline stops before b, `interrupted`
        yield* marks.mark(runB, "study_stop:manual")
        yield* Deferred.await(seen)
        yield* Deferred.succeed(gate, undefined)
        yield* Effect.repeat(Effect.zipLeft(store.getPipeline(specs[0]!.pipelineId), Effect.sleep("50 millis")), {
          until: (r) => Option.isSome(r) && r.value.state === "interrupted"
        })
        // submitter A, before B looks again: re-admits the interrupted row, runs b to success
        const a = yield* submitSpecs(specs, { window: 1, maxAdmitted: 1 })
        assert.strictEqual(a.succeeded, 1)
        assert.deepStrictEqual([calls.get("a"), calls.get("b")], [1, 1])
        const reportB = yield* Fiber.join(b)
        const row = Option.getOrThrow(yield* store.getPipeline(specs[0]!.pipelineId))
        assert.deepStrictEqual([row.runId, row.state], [a.runId, "succeeded"], "the row is A's now")
        assert.deepStrictEqual(
          own(reportB),
          { succeeded: 0, failed: 0, interrupted: 1 },
          `B's report ${JSON.stringify(reportB)}; the row: run ${row.runId} (A ${a.runId}), ${row.state}`
        )
        assert.isTrue(
          reportB.causes.some((c) => c.startsWith(`${specs[0]!.pipelineId}: interrupted under this run`) && c.includes(`admitted again by run ${a.runId}`)),
          JSON.stringify(reportB.causes)
        )
      }), { marks })
    })
  }, 120_000)
})
