import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, TestClock } from "effect"
import * as SlotGate from "../../../../src/services/internal/runner/slotGate.js"

// Each worker takes a slot, holds it for `holdMs` of (test) time, gives it back.
const worker = (gate: SlotGate.SlotGate, name: string, holdMs: number, log: Array<string>) =>
  Effect.gen(function*() {
    const hold = SlotGate.emptyHold()
    yield* gate.take(hold)
    log.push(`${name}+`)
    yield* Effect.sleep(holdMs)
    log.push(`${name}-`)
    gate.release(hold)
  })

describe("slot gate (FIFO)", () => {
  it.effect("at most n hold a slot; a released slot goes to the oldest waiter", () =>
    Effect.gen(function*() {
      const gate = SlotGate.make(2, () => false)
      const log: Array<string> = []
      // a and b take the two slots; c, d, e queue in that order
      const fibers: Array<Fiber.RuntimeFiber<void>> = []
      for (const [name, ms] of [["a", 30], ["b", 10], ["c", 10], ["d", 10], ["e", 10]] as const) {
        fibers.push(yield* Effect.fork(worker(gate, name, ms, log)))
        yield* Effect.yieldNow()
      }
      assert.deepStrictEqual(log, ["a+", "b+"])
      assert.strictEqual(gate.free(), 0)
      assert.strictEqual(gate.waiting(), 3)
      yield* TestClock.adjust("10 millis") // b ends: c (the oldest waiter) gets its slot
      assert.deepStrictEqual(log, ["a+", "b+", "b-", "c+"])
      yield* TestClock.adjust("10 millis") // c ends: d
      assert.deepStrictEqual(log.slice(4), ["c-", "d+"])
      yield* TestClock.adjust("10 millis") // a and d end: e, then one slot free
      yield* TestClock.adjust("10 millis")
      for (const f of fibers) yield* Fiber.join(f)
      assert.deepStrictEqual(log.filter((l) => l.endsWith("+")), ["a+", "b+", "c+", "d+", "e+"])
      assert.strictEqual(gate.free(), 2)
      assert.strictEqual(gate.waiting(), 0)
    }))

  it.effect("a newcomer never overtakes a waiter, even when a slot is free at that instant", () =>
    Effect.gen(function*() {
      const gate = SlotGate.make(1, () => false)
      const first = SlotGate.emptyHold()
      yield* gate.take(first)
      const log: Array<string> = []
      const waiter = yield* Effect.fork(worker(gate, "w", 5, log))
      yield* Effect.yieldNow()
      // the release hands the slot straight to the waiter: the free count never rises
      gate.release(first)
      assert.strictEqual(gate.free(), 0)
      const late = yield* Effect.fork(worker(gate, "late", 5, log))
      yield* Effect.yieldNow()
      assert.deepStrictEqual(log, ["w+"])
      yield* TestClock.adjust("5 millis")
      yield* TestClock.adjust("5 millis")
      yield* Fiber.join(waiter)
      yield* Fiber.join(late)
      assert.deepStrictEqual(log, ["w+", "w-", "late+", "late-"])
    }))

  it.effect("an interrupted waiter leaves the queue; interruptWaiters ends every wait; a stopping gate refuses", () =>
    Effect.gen(function*() {
      let stopping = false
      const gate = SlotGate.make(1, () => stopping)
      const held = SlotGate.emptyHold()
      yield* gate.take(held)
      const log: Array<string> = []
      const gone = yield* Effect.fork(worker(gate, "gone", 5, log))
      const next = yield* Effect.fork(worker(gate, "next", 5, log))
      yield* Effect.yieldNow()
      assert.strictEqual(gate.waiting(), 2)
      yield* Fiber.interrupt(gone)
      assert.strictEqual(gate.waiting(), 1)
      gate.release(held) // goes to `next`, not to the interrupted waiter
      yield* TestClock.adjust("5 millis")
      yield* Fiber.join(next)
      assert.deepStrictEqual(log, ["next+", "next-"])
      assert.strictEqual(gate.free(), 1)

      yield* gate.take(held)
      const parked = yield* Effect.fork(gate.take(SlotGate.emptyHold()))
      yield* Effect.yieldNow()
      gate.interruptWaiters()
      assert.isTrue(Exit.isInterrupted(yield* Fiber.await(parked)))
      stopping = true
      gate.release(held)
      assert.isTrue(Exit.isInterrupted(yield* Effect.exit(gate.take(SlotGate.emptyHold()))))
      assert.strictEqual(gate.free(), 1)
    }))
})
