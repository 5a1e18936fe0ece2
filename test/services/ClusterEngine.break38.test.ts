/**
 * break38 F1: a submission interrupted (Ctrl-C) after its admission claim committed and before
 * the windows of the rows it won were started leaves those rows `running` under its run with
 * nothing running them (no workflow, no window claim), and its report says it admitted none.
 * Found with real processes (`test/chaos/break38.chaos.ts` B10: 24 new rows of one Ctrl-C'd
 * submitter left `running` at cursor 0, its summary `admitted 0, running 0`); here made
 * deterministic: the claim's answer comes back 2 s after its commit (an interruptible wait, as
 * a round trip on a slow link), and the submission is interrupted inside it.
 *
 * One runner (`SingleRunner`, SQL message storage) with window claims, the Postgres store in the
 * cluster's database, as `ClusterEngine.submitRaces.test.ts`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, FiberId, Layer, Option } from "effect"
import { FatalError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as PgStore from "../../src/layers/PgStore.js"
import type { SubmitProgress } from "../../src/services/internal/cluster/submit.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, createClusterDatabase, singleRunner, submitSpecs } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

const pg = usePostgres()

/** `body` with database `db` (cluster tables, claims), the Postgres store in it, and one runner with window claims. */
const onRunner = <A, E>(db: string, specs: ReadonlyArray<AnySpec>, body: Effect.Effect<A, E, any>) =>
  Effect.zipRight(
    createClusterDatabase(pg, db),
    Effect.suspend(() =>
      body.pipe(
        Effect.provide(
          singleRunner(pg, db, { specs, workflow: { concurrency: 16, windowClaims: true } }).pipe(
            Layer.provideMerge(PgStore.layer({ url: pg.url(db), migrate: true }))
          )
        )
      )
    )
  ) as Effect.Effect<A, unknown>

describe("ClusterEngine: a submission interrupted around its admission claim (break38)", () => {
  it.live("interrupted after the claim committed, before the windows started: no row is left running with nothing running it", () => {
    const template = Pipeline.make(
      "strand",
      Task.make("a", (n: number) => Effect.succeed(n + 1)),
      Task.make("b", (n: number) => Effect.succeed(n * 2))
    )
    const specs = Array.from({ length: 4 }, (_, i) => template.bind(i))
    return onRunner("break38_strand", specs, Effect.gen(function*() {
      const store = yield* Store
      const claimed = Deferred.unsafeMake<void>(FiberId.none)
      // the claim commits; its answer reaches the submitter 2 s later (interruptible)
      const slow = {
        ...store,
        claimAdmissions: (write: any, expected: any) =>
          store.claimAdmissions!(write, expected).pipe(
            Effect.tap(() => Deferred.succeed(claimed, undefined)),
            Effect.zipLeft(Effect.sleep("2 seconds"))
          )
      }
      let told: SubmitProgress | undefined
      const submission = yield* Effect.fork(
        submitSpecs(specs, { window: 2, maxAdmitted: 4, onInterrupted: (p) => Effect.sync(() => void (told = p)) }).pipe(
          Effect.provideService(Store, slow as any)
        )
      )
      yield* Deferred.await(claimed)
      // Ctrl-C
      yield* Fiber.interrupt(submission)
      // every row written is run by the runner (or was never written): terminal within 15 s
      const states = () =>
        Effect.map(Effect.forEach(specs, (s) => store.getPipeline(s.pipelineId)), (rows) =>
          rows.map((r) => (Option.isSome(r) ? r.value.state : "absent")))
      const settled = yield* Effect.exit(
        Effect.repeat(Effect.zipLeft(states(), Effect.sleep("200 millis")), {
          until: (xs) => xs.every((s) => s === "absent" || s === "succeeded" || s === "failed")
        }).pipe(Effect.timeoutFail({ duration: Duration.seconds(15), onTimeout: () => "timeout" }))
      )
      const now = yield* states()
      assert.isTrue(Exit.isSuccess(settled), `rows after the interrupted submission, 15 s on: ${JSON.stringify(now)}`)
      // what the interrupted submission said: it admitted the rows it wrote under its run
      const written = now.filter((s) => s !== "absent").length
      assert.strictEqual(told?.admitted ?? 0, written, `admitted said ${told?.admitted}, rows written ${written}`)
    }))
  }, 120_000)

  it.live("a pipeline that failed under a submission and was re-admitted and run to success by another before the first looked: the first counts it failed, not succeeded", () => {
    let calls = 0
    const template = Pipeline.make(
      "recount",
      Task.make("a", (n: number) => Effect.succeed(n + 1)),
      // b fails (fatal) on its first call only
      Task.make("b", (n: number) => Effect.suspend(() => ++calls === 1 ? Effect.fail(new FatalError({ message: "first call fails" })) : Effect.succeed(n * 2)))
    )
    const specs = [template.bind(1)]
    return onRunner("break38_recount", specs, Effect.gen(function*() {
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
      // the pipeline failed under B's run (its row is A's now): B's own count says so
      assert.deepInclude(
        { succeeded: reportB.succeeded, failed: reportB.failed },
        { succeeded: 0, failed: 1 },
        `B's report ${JSON.stringify({ admitted: reportB.admitted, succeeded: reportB.succeeded, failed: reportB.failed })}; the row: run ${row.runId} (A ${a.runId}, B ${reportB.runId}), ${row.state}`
      )
    }))
  }, 120_000)
})

