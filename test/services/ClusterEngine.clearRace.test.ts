/**
 * break39 (code reading of `clearEnded`, submit.ts): a submission re-admitting failed rows first
 * polls their window's ended workflow and then clears its address (`MessageStorage.clearAddress`),
 * so that starting it again runs it again. Two submissions of the same failed rows (different
 * runs) can interleave: A polls (ended), B polls, clears, wins the rows' claim and starts the
 * window again, and only then does A's clear run, deleting B's fresh start. A then loses the
 * claim and withholds the rows; B follows rows `running` under its run whose window A cleared.
 *
 * Made deterministic here: A is held between its look at the ended workflow and its claim of
 * the rows (its `clearAddress` and its `claimAdmissions` both wait) until B has started the
 * window (B's `onAdmitted`). Fixed: a submission clears an ended window's workflow only after
 * its claim won the rows, right before it starts the window again, in the same uninterruptible
 * step; A's claim then loses and it clears nothing. One runner (`SingleRunner`, SQL message storage) with window claims, the
 * Postgres store in the cluster's database, as `ClusterEngine.ownerCount.test.ts`.
 */
import * as MessageStorage from "@effect/cluster/MessageStorage"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option } from "effect"
import { FatalError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, onPgRunner, submitSpecs } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

const pg = usePostgres()

const onRunner = <A, E>(db: string, specs: ReadonlyArray<AnySpec>, body: Effect.Effect<A, E, any>) => onPgRunner(pg, db, specs, body)

describe("ClusterEngine: two submissions re-admitting the same failed window (break39)", () => {
  it.live("A's clear of the ended window lands after B started it again: B's window still runs, every row ends", () => {
    let failing = true
    const template = Pipeline.make(
      "clearrace",
      Task.make("a", (n: number) => Effect.succeed(n + 1)),
      // the second time round (the re-run starts at b), b takes 1 s: a clear that lands once B
      // started the window lands while it runs
      Task.make("b", (n: number) =>
        Effect.suspend(() => failing ? Effect.fail(new FatalError({ message: "fails while failing" })) : Effect.as(Effect.sleep("1 second"), n * 2)))
    )
    const specs = [template.bind(1), template.bind(2)]
    return onRunner("break39_clearrace", specs, Effect.gen(function*() {
      const store = yield* Store
      const first = yield* submitSpecs(specs, { window: 2, maxAdmitted: 2 })
      assert.strictEqual(first.failed, 2, JSON.stringify(first))
      failing = false
      const storage = yield* MessageStorage.MessageStorage
      // A is held between its look at the ended window and its claim of the rows, wherever its
      // clear of the ended workflow comes in that stretch, until B has started the window
      const aWaiting = yield* Deferred.make<void>()
      const bStarted = yield* Deferred.make<void>()
      const hold = <X, E2, R2>(effect: Effect.Effect<X, E2, R2>) =>
        Deferred.succeed(aWaiting, undefined).pipe(Effect.zipRight(Deferred.await(bStarted)), Effect.zipRight(effect))
      // A's clears of window workflows: a submission whose claim lost the rows must clear none
      // (whether a late clear strands B's window depends on whether the runner read B's start
      // first: seen 1 in 4 runs; the clear itself is what must not happen)
      let aClears = 0
      const late: MessageStorage.MessageStorage["Type"] = {
        ...storage,
        clearAddress: (address) => hold(Effect.zipRight(Effect.sync(() => aClears++), storage.clearAddress(address)))
      }
      const claimAdmissions = store.claimAdmissions!
      const slowClaim: typeof store = { ...store, claimAdmissions: (op, expected) => hold(claimAdmissions(op, expected)) }
      const a = yield* Effect.fork(
        submitSpecs(specs, { window: 2, maxAdmitted: 2 }).pipe(
          Effect.provideService(MessageStorage.MessageStorage, late),
          Effect.provideService(Store, slowClaim)
        )
      )
      yield* Deferred.await(aWaiting)
      const b = yield* Effect.fork(
        submitSpecs(specs, { window: 2, maxAdmitted: 2, onAdmitted: () => Deferred.unsafeDone(bStarted, Exit.void) })
      )
      const rb = yield* Effect.either(Effect.timeoutFail(Fiber.join(b), { duration: "30 seconds", onTimeout: () => "B did not end within 30 s" }))
      const ra = yield* Effect.either(Effect.timeoutFail(Fiber.join(a), { duration: "10 seconds", onTimeout: () => "A did not end within 10 s" }))
      const rows = yield* Effect.forEach(specs, (s) => Effect.map(store.getPipeline(s.pipelineId), (r) => Option.map(r, (x) => `${x.state}@${x.runId}`)))
      const facts = JSON.stringify({ a: ra, b: rb, rows })
      assert.strictEqual(aClears, 0, `A cleared the window it lost: ${facts}`)
      assert.isTrue(rb._tag === "Right", `B: ${facts}`)
      assert.isTrue(ra._tag === "Right", `A: ${facts}`)
      for (const r of rows) assert.isTrue(Option.isSome(r) && r.value.startsWith("succeeded"), `rows: ${facts}`)
      if (rb._tag === "Right") assert.strictEqual(rb.right.succeeded, 2, `B's count: ${facts}`)
      if (ra._tag === "Right") assert.strictEqual(ra.right.withheld + ra.right.skipped, 2, `A: ${facts}`)
    }))
  }, 120_000)
})
