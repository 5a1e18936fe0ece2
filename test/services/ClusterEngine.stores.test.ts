/**
 * Issue 17: a pipeline's workflow identity includes the store that admitted it
 * (`Store.storeId`). Keyed by the pipeline id alone, a fresh store on the same cluster database
 * (a second experiment with colliding pipeline ids, or the same experiment into a new store)
 * was answered from the older store's stored replies: its submitter counted every pipeline
 * succeeded, no task ran, and the new store's rows stayed `running`. The same store still
 * finds its own executions, and a runner that writes another store than the submitter's
 * refuses the pipeline.
 *
 * On the durable path: `SingleRunner` with SQL message storage on the harness PostgreSQL; two
 * memory stores stand in for two shared stores.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Option, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as ClusterEngine from "../../src/layers/ClusterEngine.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { type AnySpec, createClusterDatabase, singleRunner } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** One runner on database `db` hosting `specs`, over the store in context. */
const runnerOf = (db: string, specs: ReadonlyArray<AnySpec>) => singleRunner(pg, db, { specs })

const createDatabase = (db: string) => createClusterDatabase(pg, db)

describe("ClusterEngine: one cluster database, several stores", () => {
  it.live("a fresh store on the same cluster database runs its pipelines; the first store's re-submission is answered from its own rows", () => {
    const calls = new Map<string, number>()
    const a = Task.make("a", (n: number, ctx) => Effect.sync(() => (calls.set(ctx.pipelineId, (calls.get(ctx.pipelineId) ?? 0) + 1), n + 1)))
    const template = Pipeline.make("twostores", a, Task.make("b", (n: number) => Effect.succeed(n * 2)))
    const specs = Array.from({ length: 4 }, (_, i) => template.bind(i))
    const submitAll = ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis", resultEvery: 1 })
    /** Submits into `store`, with a runner writing the same store. */
    const into = (store: StoreService) =>
      submitAll.pipe(Effect.provide(runnerOf("twostores", specs)), Effect.provideService(Store, store))
    return Effect.gen(function*() {
      yield* createDatabase("twostores")
      const first = yield* MemoryStore.make()
      const second = yield* MemoryStore.make()
      const one = yield* into(first)
      assert.strictEqual(one.succeeded, 4)
      // the same experiment into a fresh store, on the same cluster database
      const two = yield* into(second)
      assert.strictEqual(two.admitted, 4)
      assert.strictEqual(two.succeeded, 4)
      for (const spec of specs) {
        const row = Option.getOrThrow(yield* second.getPipeline(spec.pipelineId))
        assert.strictEqual(row.state, "succeeded", `${spec.pipelineId} in the second store`)
        assert.strictEqual(row.nTasksDone, 2)
        assert.isTrue(Option.isSome(yield* second.getArtifact(spec.pipelineId, 1)))
        // each store ran it once
        assert.strictEqual(calls.get(spec.pipelineId), 2)
      }
      // the first store again: everything is already done there, nothing runs
      const three = yield* into(first)
      assert.strictEqual(three.skipped, 4)
      for (const spec of specs) assert.strictEqual(calls.get(spec.pipelineId), 2)
    }).pipe(Effect.scoped, Effect.provide(ArtifactBackends.layerInline))
  }, 60_000)

  it.live("a runner that writes another store than the submitter's refuses the pipeline", () => {
    const template = Pipeline.make("otherstore", Task.make("a", (n: number) => Effect.succeed(n + 1)))
    const specs = Array.from({ length: 2 }, (_, i) => template.bind(i))
    return Effect.gen(function*() {
      yield* createDatabase("otherstore")
      const submitterStore = yield* MemoryStore.make()
      const runnerStore = yield* MemoryStore.make()
      const out = yield* Effect.either(
        ClusterEngine.submit(Stream.fromIterable(specs), { pollInterval: "20 millis", resultEvery: 1 }).pipe(
          Effect.provideService(Store, submitterStore),
          Effect.provide(runnerOf("otherstore", specs).pipe(Layer.provide(Layer.succeed(Store, runnerStore))))
        )
      )
      assert.isTrue(Either.isLeft(out))
      if (Either.isLeft(out)) assert.match(out.left.message, /this runner writes store/)
      for (const spec of specs) assert.isTrue(Option.isNone(yield* runnerStore.getPipeline(spec.pipelineId)))
    }).pipe(Effect.scoped, Effect.provide(ArtifactBackends.layerInline))
  }, 60_000)
})
