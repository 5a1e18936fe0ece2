/**
 * ux39 (noticed): a stop between the submission's `openRun` and its body (while the run's
 * start event is written, or the set-up before admission) left the run's row `running` with
 * nothing submitting it: `report` and `watch` showed a live run forever. The run is closed
 * `interrupted` on every exit once it is opened. In process (`TestRunner` over a memory store).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Stream } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { type AnySpec, inProcessHost } from "../support/clusterRunner.js"

const hostOf = inProcessHost

describe("ClusterEngine: a stop right after the run is opened", () => {
  it.scoped("interrupted while the run's start event is written: the run is closed interrupted, not left running", () => {
    const specs: ReadonlyArray<AnySpec> = [0, 1].map((n) => Pipeline.make("opened", Task.make("t", (x: number) => Effect.succeed(x))).bind(n))
    const runId = "openstop-run" as RunId
    const writing = Deferred.unsafeMake<void>(undefined as never)
    // the run's start event never commits (a store that stopped answering right then)
    const wrap = (s: StoreService): StoreService => ({
      ...s,
      emitEvent: (e) => e.kind === "run.started" ? Effect.zipRight(Deferred.succeed(writing, undefined), Effect.never) : s.emitEvent(e)
    })
    return Effect.gen(function*() {
      const store = yield* Store
      const submission = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), { runId, maxAdmitted: 2 }))
      yield* Deferred.await(writing)
      yield* Fiber.interrupt(submission)
      const run = yield* store.getRun(runId)
      assert.isTrue(Option.isSome(run), "the run was opened")
      if (Option.isSome(run)) {
        assert.strictEqual(run.value.status, "interrupted")
        assert.strictEqual(run.value.stopReason, "user")
      }
    }).pipe(Effect.provide(hostOf(specs, wrap)))
  })
})
