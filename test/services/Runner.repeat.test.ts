/**
 * Issue 19 §6: the runner stores each pipeline's repeat index (content-addressed ids and
 * explicit keys alike), so exports of a pass@k run can tell the samples of one seed apart.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Stream } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import { Store } from "../../src/services/Store.js"

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
      assert.strictEqual(byId.get("row-10#0"), 0)
      assert.strictEqual(byId.get("row-10#1"), 1)
      assert.strictEqual(rows.length, 8)
    }).pipe(Effect.provide(env())))
})
