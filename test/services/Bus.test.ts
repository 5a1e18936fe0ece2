import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Queue, Stream, TestClock } from "effect"
import * as Bus from "../../src/services/Bus.js"
import * as Hub from "../../src/services/internal/hub.js"

describe("Bus", () => {
  it.scoped("publish returns the number of subscribers reached: the topic's plus '*'", () =>
    Effect.gen(function*() {
      const bus = yield* Bus.make
      assert.strictEqual(yield* bus.publish("found", { qid: 1 }), 0)
      const found = yield* bus.subscribeScoped("found")
      const all = yield* bus.subscribeScoped("*")
      const other = yield* bus.subscribeScoped("other")
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual(yield* bus.publish("found", { qid: 2 }), 2)
      assert.strictEqual(yield* bus.publish("other"), 2)
      assert.strictEqual(yield* bus.publish("*", { x: 1 }), 1)
      const m = yield* Queue.take(found)
      assert.deepStrictEqual(m, { topic: "found", data: { qid: 2 }, ts: 5000 })
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(all)).map((x) => x.topic), ["found", "other", "*"])
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(other)).map((x) => x.topic), ["other"])
      assert.strictEqual(yield* Queue.size(found), 0)
    }))

  it.effect("a subscription ends with its scope and is no longer counted", () =>
    Effect.gen(function*() {
      const bus = yield* Bus.make
      yield* Effect.scoped(Effect.gen(function*() {
        const queue = yield* bus.subscribeScoped("t")
        assert.isFalse(yield* Queue.isShutdown(queue))
        assert.strictEqual(yield* bus.subscribers("t"), 1)
      }))
      assert.strictEqual(yield* bus.subscribers("t"), 0)
      assert.strictEqual(yield* bus.publish("t"), 0)
    }))

  it.effect("subscribe is a Stream of the topic's messages in order", () =>
    Effect.gen(function*() {
      const bus = yield* Bus.make
      const fiber = yield* Effect.fork(Stream.runCollect(Stream.take(bus.subscribe("t"), 3)))
      while ((yield* bus.subscribers("t")) === 0) yield* Effect.yieldNow()
      for (const n of [1, 2, 3]) yield* bus.publish("t", { n })
      const got = Chunk.toReadonlyArray(yield* Fiber.join(fiber))
      assert.deepStrictEqual(got.map((m) => m.data["n"]), [1, 2, 3])
      assert.strictEqual(yield* bus.subscribers("t"), 0)
    }))

  it.effect("is available as a layer", () =>
    Effect.gen(function*() {
      const bus = yield* Bus.Bus
      assert.strictEqual(yield* bus.publish("x"), 0)
    }).pipe(Effect.provide(Bus.layer)))
})

describe("topic hub (shared by the bus and the pools' events)", () => {
  it.scoped("a message reaches its topic's and the every-topic subscribers whose predicate accepts it", () =>
    Effect.gen(function*() {
      const hub = Hub.make<{ readonly kind: string; readonly n: number }>(16)
      const a = yield* hub.subscribe("a")
      const aOdd = yield* hub.subscribe("a", (m) => m.n % 2 === 1)
      const every = yield* hub.subscribe(Hub.all)
      const everyX = yield* hub.subscribe(Hub.all, (m) => m.kind === "x")
      assert.strictEqual(yield* hub.publish("a", { kind: "x", n: 1 }), 4)
      assert.strictEqual(yield* hub.publish("a", { kind: "y", n: 2 }), 2)
      assert.strictEqual(yield* hub.publish("b", { kind: "y", n: 3 }), 1)
      const ns = (q: Queue.Dequeue<{ readonly n: number }>) => Effect.map(Queue.takeAll(q), (c) => Chunk.toReadonlyArray(c).map((m) => m.n))
      assert.deepStrictEqual(yield* ns(a), [1, 2])
      assert.deepStrictEqual(yield* ns(aOdd), [1])
      assert.deepStrictEqual(yield* ns(every), [1, 2, 3])
      assert.deepStrictEqual(yield* ns(everyX), [1])
      assert.strictEqual(hub.size("a"), 2)
      assert.strictEqual(hub.size(Hub.all), 2)
      assert.strictEqual(hub.size("b"), 0)
    }))

  it.scoped("a subscriber that falls behind loses its oldest messages; publishing never blocks", () =>
    Effect.gen(function*() {
      const hub = Hub.make<number>(2)
      const q = yield* hub.subscribe("t")
      for (const n of [1, 2, 3, 4]) assert.strictEqual(yield* hub.publish("t", n), 1)
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(q)), [3, 4])
    }))
})
