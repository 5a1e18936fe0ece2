/**
 * What the runner hands the store (issue 19):
 * - §6: each pipeline's repeat index (content-addressed ids and explicit keys alike), so exports
 *   of a pass@k run can tell the samples of one seed apart;
 * - §3: big outputs waiting for their checkpoint are bounded by `concurrency`, not by
 *   `maxAdmitted` (a run's memory bounded by bytes).
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Option, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { pid } from "../support/ids.js"

const env = () =>
  Layer.provideMerge(Runner.layer({ handleSignals: false }), Layer.mergeAll(MemoryStore.layer(), Pool.layer([])))

const inc = Task.sync("inc", (n: number) => n + 1)

describe("Runner: repeat index", () => {
  it.effect("every pipeline of a run with repeats stores its repeat (content-addressed and keyed)", () =>
    Effect.gen(function*() {
      const template = Pipeline.make("pass-at-k", inc)
      yield* Runner.run(template.map([1, 2], { repeats: 3 }))
      yield* Runner.run(template.map([10], { repeats: 2, keyOf: (n) => `row-${n}` }))
      const store = yield* Store
      const rows = Chunk.toArray(yield* Stream.runCollect(store.streamPipelines()))
      const byId = new Map(rows.map((p) => [p.pipelineId, p.repeat]))
      for (const seed of [1, 2]) {
        for (let r = 0; r < 3; r++) assert.strictEqual(byId.get(template.bind(seed, { repeat: r }).pipelineId), r)
      }
      assert.strictEqual(byId.get(pid("row-10#0")), 0)
      assert.strictEqual(byId.get(pid("row-10#1")), 1)
      assert.strictEqual(rows.length, 8)
    }).pipe(Effect.provide(env())))
})

describe("Runner: big outputs and the store", () => {
  it.effect("outputs of 256 KiB or more waiting for their checkpoint never outnumber the worker slots", () => {
    let pending = 0
    let maxPending = 0
    // a store whose checkpoints of big artifacts take a while (other fibers run meanwhile)
    const slowStore = Layer.effect(
      Store,
      Effect.map(Store, (s): StoreService => ({
        ...s,
        checkpoint: (unit) =>
          (unit.artifact?.payload.byteLength ?? 0) < 256 * 1024
            ? s.checkpoint(unit)
            : Effect.gen(function*() {
              pending++
              maxPending = Math.max(maxPending, pending)
              for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
              yield* s.checkpoint(unit)
              pending--
            })
      }))
    ).pipe(Layer.provide(MemoryStore.layer()))
    const big = Task.sync("big", (n: number) => `${n}:${"x".repeat(300 * 1024)}`)
    const layer = Layer.provideMerge(
      Runner.layer({ handleSignals: false, concurrency: 2, maxAdmitted: 8 }),
      Layer.mergeAll(slowStore, Pool.layer([]))
    )
    return Effect.gen(function*() {
      const template = Pipeline.make("big-outputs", big)
      const report = yield* Runner.run(template.map(Array.from({ length: 12 }, (_, i) => i)))
      assert.strictEqual(report.stats.byState.succeeded, 12)
      assert.isAtLeast(maxPending, 1)
      assert.isAtMost(maxPending, 2, "big outputs waiting for the store are bounded by concurrency")
      const store = yield* Store
      const one = Option.getOrThrow(yield* store.getArtifact(template.bind(3).pipelineId, 0))
      assert.isAbove(one.payload!.byteLength, 300 * 1024)
    }).pipe(Effect.provide(layer))
  })
})
