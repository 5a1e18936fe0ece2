/**
 * Races between submissions of the same pipelines on the cluster engine (found by break37),
 * one runner (`SingleRunner`, SQL message storage) with window claims on (the runners'
 * default), the Postgres store in the cluster's database:
 *
 * - a re-submission after Ctrl-C while a window still runs, once one of the window's pipelines
 *   has succeeded, groups the rest into another window (another execution): the window claims
 *   are per pipeline (claims37), so it waits for the first execution instead of calling every
 *   task not yet committed a second time (before: b and c of 3 pipelines called twice);
 * - two submitters at once: the second admits a batch with the rows it read before it waited
 *   for room, by when the first submitter may have run those pipelines to the end. Its
 *   admission is a claim (`Store.claimAdmissions`): written only where the row is still as
 *   read, so it leaves them to the first (before: the rows were put back to `running` at
 *   cursor 0, checkpoint keys deleted, a second seed artifact, and stayed `running` for good).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, FiberId, Option } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, onPgRunner, submitSpecs } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** Calls per key (`pipeline/task`). */
const counter = () => {
  const calls = new Map<string, number>()
  return {
    calls,
    add: (key: string) => void calls.set(key, (calls.get(key) ?? 0) + 1),
    of: (key: string) => calls.get(key) ?? 0
  }
}

/** Polls `check` every 20 ms until it holds (fails after `within`). */
const waitFor = (what: string, check: Effect.Effect<boolean, unknown>, within: Duration.DurationInput = "30 seconds") =>
  Effect.repeat(Effect.zipLeft(check, Effect.sleep("20 millis")), { until: (ok) => ok }).pipe(
    Effect.timeoutFail({ duration: within, onTimeout: () => new Error(`waited ${Duration.format(within)} for ${what}`) }),
    Effect.orDie
  )

/** The store's artifacts' seqs of each spec, and each row's state and cursor. */
const stored = (specs: ReadonlyArray<AnySpec>) =>
  Effect.gen(function*() {
    const store = yield* Store
    yield* store.flush
    return yield* Effect.forEach(specs, (spec) =>
      Effect.gen(function*() {
        const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
        const seqs = (yield* store.listArtifacts(spec.pipelineId)).map((a) => a.seq).sort((x, y) => x - y)
        return { id: spec.pipelineId as string, state: row.state, nTasksDone: row.nTasksDone, seqs }
      }))
  })

/** `body` on database `db` with one runner and the Postgres store (`onPgRunner`). */
const onRunner = <A, E>(db: string, specs: ReadonlyArray<AnySpec>, body: Effect.Effect<A, E, any>) => onPgRunner(pg, db, specs, body)

describe("ClusterEngine: submissions of the same pipelines racing", () => {
  it.live("a re-submission after Ctrl-C, one pipeline of a running window succeeded: no task is called twice", () => {
    const count = counter()
    const gate = Deferred.unsafeMake<void>(FiberId.none)
    // pipeline 0 runs through at once; the others' task b waits at the gate (a long call)
    const template = Pipeline.make(
      "regroup",
      Task.make("a", (n: number, ctx) => Effect.sync(() => (count.add(`${ctx.pipelineId}/a`), n + 1))),
      Task.make("b", (n: number, ctx) =>
        Effect.suspend(() => {
          count.add(`${ctx.pipelineId}/b`)
          return n === 1 ? Effect.succeed(n * 2) : Effect.as(Deferred.await(gate), n * 2)
        })),
      Task.make("c", (n: number, ctx) => Effect.sync(() => (count.add(`${ctx.pipelineId}/c`), n + 1)))
    )
    const specs = Array.from({ length: 4 }, (_, i) => template.bind(i))
    const ids = specs.map((s) => s.pipelineId as string)
    return onRunner("break37_regroup", specs, Effect.gen(function*() {
      const store = yield* Store
      // the first submission: one window of the 4 pipelines
      const first = yield* Effect.fork(submitSpecs(specs, { window: 4, maxAdmitted: 4 }))
      yield* waitFor(
        "pipeline 0 succeeded and the others inside their call of b",
        Effect.map(
          store.getPipeline(specs[0]!.pipelineId),
          (row) => Option.isSome(row) && row.value.state === "succeeded" && ids.slice(1).every((id) => count.of(`${id}/b`) === 1)
        )
      )
      // Ctrl-C: the first submission stops; its window goes on on the runner
      yield* Fiber.interrupt(first)
      // submitted again: pipeline 0 is skipped, the other three are admitted again
      const second = yield* Effect.fork(submitSpecs(specs, { window: 4, maxAdmitted: 4 }))
      // (a second call of b, if any, comes within a few polls; 5 s is plenty)
      // (Effect.exit: the wait's time-out is a defect, which Effect.ignore would let through)
      yield* Effect.exit(waitFor("a second call of b", Effect.sync(() => count.of(`${ids[1]}/b`) > 1), "5 seconds"))
      yield* Deferred.succeed(gate, undefined)
      const report = yield* Fiber.join(second)
      assert.strictEqual(report.skipped, 1)
      const rows = yield* stored(specs)
      for (const r of rows) assert.deepInclude(r, { state: "succeeded", seqs: [-1, 0, 1, 2] }, r.id)
      // no runner fault: each task called exactly once
      const repeated = Array.from(count.calls).filter(([, n]) => n > 1)
      assert.deepStrictEqual(repeated, [], `tasks called more than once: ${JSON.stringify(repeated)}`)
    }))
  }, 120_000)


  it.live("two submitters at once: the second's admission with rows read before its wait for room leaves no row running", () => {
    const count = counter()
    const gate = Deferred.unsafeMake<void>(FiberId.none)
    // pipelines 0 and 1 wait at the gate in task b; 2 and 3 run through at once
    const template = Pipeline.make(
      "twosubmitters",
      Task.make("a", (n: number, ctx) => Effect.sync(() => (count.add(`${ctx.pipelineId}/a`), n + 1))),
      Task.make("b", (n: number, ctx) =>
        Effect.suspend(() => {
          count.add(`${ctx.pipelineId}/b`)
          return n <= 2 ? Effect.as(Deferred.await(gate), n * 2) : Effect.succeed(n * 2)
        })),
      Task.make("c", (n: number, ctx) => Effect.sync(() => (count.add(`${ctx.pipelineId}/c`), n + 1)))
    )
    const specs = Array.from({ length: 4 }, (_, i) => template.bind(i))
    const ids = specs.map((s) => s.pipelineId as string)
    return onRunner("break37_two", specs, Effect.gen(function*() {
      const store = yield* Store
      // submitter B: room for one window of 2: admits 0 and 1, reads the rows of 2 and 3 (none
      // yet) and waits for room
      const b = yield* Effect.fork(submitSpecs(specs, { window: 2, maxAdmitted: 2 }))
      yield* waitFor("B's first window inside b", Effect.sync(() => count.of(`${ids[0]}/b`) === 1 && count.of(`${ids[1]}/b`) === 1))
      yield* Effect.sleep("500 millis") // B's read of the next batch's rows (none yet) is done
      // submitter A: room for both windows: runs 2 and 3 to the end
      const a = yield* Effect.fork(submitSpecs(specs, { window: 2, maxAdmitted: 4 }))
      yield* waitFor(
        "pipelines 2 and 3 succeeded",
        Effect.map(
          Effect.forEach(specs.slice(2), (s) => store.getPipeline(s.pipelineId)),
          (rows) => rows.every((r) => Option.isSome(r) && r.value.state === "succeeded")
        )
      )
      // B's room comes: it admits 2 and 3 with the rows it read before
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(a)
      yield* Fiber.join(b)
      const rows = yield* stored(specs)
      // every pipeline terminal, one artifact per seq (the seed's included), each task called once
      for (const r of rows) assert.deepInclude(r, { state: "succeeded", nTasksDone: 3, seqs: [-1, 0, 1, 2] }, JSON.stringify(r))
      const repeated = Array.from(count.calls).filter(([, n]) => n > 1)
      assert.deepStrictEqual(repeated, [], `tasks called more than once: ${JSON.stringify(repeated)}`)
    }))
  }, 120_000)
})
