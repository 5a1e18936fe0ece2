/**
 * Issue 17 §3: the cluster engine's durable path on PostgreSQL (the test harness's server):
 * `SingleRunner` with SQL message storage, the memory store standing in for the shared store.
 * A runner is stopped while some tasks are in flight; a new runner on the same database
 * replays the workflows: no task committed before the stop is called again, every pipeline
 * ends succeeded with one checkpoint per task, submitting again is safe, and each execution
 * the stop cut short is recorded as an abandoned attempt.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { Store } from "../../src/services/Store.js"
import { type AnySpec, createClusterDatabase, singleRunner } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** One runner's lifetime on database `db`: sharding + workflow engine + the pipeline workflow. */
const runnerOf = (db: string, specs: ReadonlyArray<AnySpec>) => singleRunner(pg, db, { specs })

describe("ClusterEngine on PostgreSQL message storage", () => {
  it.live("a runner stopped mid-run: its replacement re-runs no committed task and finishes every pipeline", () => {
    const calls = new Map<string, number>()
    const counted = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1)
    let blocking = true
    const release = Deferred.unsafeMake<void>(undefined as never)
    const a = Task.make("a", (n: number, ctx) => Effect.sync(() => (counted(`${ctx.pipelineId}/a`), n + 1)))
    // even seeds (b gets seed + 1) block in b while `blocking` (in flight when the runner stops)
    const b = Task.make("b", (n: number, ctx) =>
      Effect.suspend(() => {
        counted(`${ctx.pipelineId}/b`)
        return blocking && n % 2 === 1 ? Effect.as(Deferred.await(release), n * 10) : Effect.succeed(n * 10)
      }))
    const c = Task.make("c", (n: number, ctx) => Effect.sync(() => (counted(`${ctx.pipelineId}/c`), n + 7)))
    const template = Pipeline.make("replay", a, b, c)
    const specs = Array.from({ length: 10 }, (_, i) => template.bind(i))
    return Effect.gen(function*() {
      yield* createClusterDatabase(pg, "replay1")
      const store = yield* Store
      const committedNow = Effect.forEach(specs, (s) => Effect.map(store.getPipeline(s.pipelineId), (r) => Option.match(r, { onNone: () => 0, onSome: (x) => x.nTasksDone })))
      // phase 1: run until the even pipelines wait in b and the odd ones are done, then stop the runner
      const first = yield* Effect.gen(function*() {
        const submitter = yield* Effect.fork(ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "50 millis" }))
        let done: ReadonlyArray<number> = []
        for (let i = 0; i < 600; i++) {
          done = yield* committedNow
          if (done.every((n, j) => n === (j % 2 === 0 ? 1 : 3))) break
          yield* Effect.sleep("50 millis")
        }
        yield* Fiber.interrupt(submitter)
        return done
      }).pipe(Effect.provide(runnerOf("replay1", specs)))
      assert.deepStrictEqual(first, specs.map((_, j) => (j % 2 === 0 ? 1 : 3)))
      const before = new Map(calls)
      // phase 2: a new runner on the same database; submitting again re-finds the executions
      blocking = false
      const report = yield* ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "50 millis" }).pipe(
        Effect.provide(runnerOf("replay1", specs))
      )
      assert.strictEqual(report.succeeded + report.followed.succeeded + report.skipped, 10, JSON.stringify(report))
      for (const [j, spec] of specs.entries()) {
        const row = Option.getOrThrow(yield* store.getPipeline(spec.pipelineId))
        assert.strictEqual(row.state, "succeeded")
        const artifacts = yield* store.listArtifacts(spec.pipelineId)
        assert.deepStrictEqual(artifacts.map((x) => x.seq), [-1, 0, 1, 2])
        // committed before the stop: never called again
        assert.strictEqual(calls.get(`${spec.pipelineId}/a`), 1)
        if (j % 2 === 1) {
          assert.strictEqual(calls.get(`${spec.pipelineId}/b`), 1)
          assert.strictEqual(calls.get(`${spec.pipelineId}/c`), 1)
        } else {
          // in flight at the stop: called again once (at least once), then committed once
          assert.strictEqual(before.get(`${spec.pipelineId}/b`), 1)
          assert.strictEqual(calls.get(`${spec.pipelineId}/b`), 2)
          assert.strictEqual(calls.get(`${spec.pipelineId}/c`), 1)
        }
        // the execution cut short by the stop is recorded as an abandoned attempt, numbered as the
        // attempt it was on (1), as the embedded engine's resume records one; nothing else is.
        // The stopping runner gave its claim up: the replacement did not wait for it to go stale
        const attempts = yield* Stream.runCollect(store.streamAttempts({ pipelineId: spec.pipelineId }))
        const abandoned = Array.from(attempts).filter((x) => x.errorType === "Abandoned").map((x) => [x.seq, x.attemptNo, x.outcome])
        assert.deepStrictEqual(abandoned, j % 2 === 0 ? [[1, 1, "cancelled"]] : [], `pipeline ${j}`)
        assert.deepStrictEqual(
          Array.from(attempts).filter((x) => x.outcome === "succeeded").map((x) => x.seq),
          [0, 1, 2],
          `pipeline ${j}: one succeeded attempt per task`
        )
      }
    }).pipe(Effect.provide(MemoryStore.layer()))
  }, 120_000)
})
