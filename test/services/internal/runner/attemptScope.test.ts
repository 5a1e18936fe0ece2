import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Random, Scope, TestClock } from "effect"
import { RetryableError } from "../../../../src/domain/Errors.js"
import * as Pipeline from "../../../../src/domain/Pipeline.js"
import * as Resource from "../../../../src/domain/Resource.js"
import * as Task from "../../../../src/domain/Task.js"
import * as MemoryStore from "../../../../src/layers/MemoryStore.js"
import * as Pool from "../../../../src/services/Pool.js"
import * as Runner from "../../../../src/services/Runner.js"
import {
  AttemptGenerator,
  attemptScoped,
  withAttemptServices
} from "../../../../src/services/internal/runner/attemptScope.js"

// The attempt's Scope and Random without a context change per attempt: what a task written
// with Effect's Scope API relies on (finalizers at the attempt's end, with its exit, on every
// exit path; forked fibers bound to it; a fiber forked inside it keeps its attempt).

const attempt = <A, E, R>(body: Effect.Effect<A, E, R>, seed = 1) =>
  attemptScoped(body, new AttemptGenerator({ seed }))

describe("attempt scope", () => {
  it.effect("finalizers and acquireRelease run at the attempt's end, last added first, with its exit", () =>
    withAttemptServices(Effect.gen(function*() {
      const log: Array<string> = []
      const body = Effect.gen(function*() {
        yield* Effect.addFinalizer((exit) => Effect.sync(() => log.push(`fin:${exit._tag}`)))
        yield* Effect.acquireRelease(Effect.sync(() => log.push("acquire")), (_, exit) =>
          Effect.sync(() => log.push(`release:${exit._tag}`)))
        log.push("body")
        return 1
      })
      assert.strictEqual(yield* attempt(body), 1)
      assert.deepStrictEqual(log, ["acquire", "body", "release:Success", "fin:Success"])
      log.length = 0
      const failed = yield* Effect.exit(attempt(Effect.zipRight(body, Effect.fail("boom"))))
      assert.isTrue(Exit.isFailure(failed))
      assert.deepStrictEqual(log, ["acquire", "body", "release:Failure", "fin:Failure"])
    })))

  it.effect("an interrupted attempt releases what it acquired; a fiber it forked scoped is interrupted", () =>
    withAttemptServices(Effect.gen(function*() {
      const log: Array<string> = []
      const started = yield* Deferred.make<void>()
      const body = Effect.gen(function*() {
        yield* Effect.acquireRelease(Effect.void, () => Effect.sync(() => log.push("released")))
        yield* Effect.forkScoped(Effect.onInterrupt(Effect.never, () => Effect.sync(() => log.push("child interrupted"))))
        yield* Deferred.succeed(started, undefined)
        return yield* Effect.never
      })
      const fiber = yield* Effect.fork(attempt(body))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      assert.sameMembers(log, ["released", "child interrupted"])
    })))

  it.effect("outside attempts the Scope is the one the run had; an attempt's finalizers never reach it", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const outer = yield* Scope.make()
      yield* withAttemptServices(Effect.gen(function*() {
        yield* attempt(Effect.addFinalizer(() => Effect.sync(() => log.push("attempt"))))
        assert.deepStrictEqual(log, ["attempt"])
        yield* Effect.addFinalizer(() => Effect.sync(() => log.push("outer")))
        assert.deepStrictEqual(log, ["attempt"])
      })).pipe(Scope.extend(outer))
      yield* Scope.close(outer, Exit.void)
      assert.deepStrictEqual(log, ["attempt", "outer"])
    }))

  it.effect("a fiber forked in an attempt keeps that attempt after a later one began: its Random and its (closed) Scope", () =>
    withAttemptServices(Effect.gen(function*() {
      const log: Array<string> = []
      const go = yield* Deferred.make<void>()
      const first = yield* attempt(Effect.fork(Effect.zipRight(
        Deferred.await(go),
        Effect.zipLeft(Random.next, Effect.addFinalizer(() => Effect.sync(() => log.push("late finalizer"))))
      )), 11)
      // the first attempt has ended; a second one runs on this fiber while the fork draws
      const drawn = yield* attempt(Effect.zipRight(Deferred.succeed(go, undefined), Fiber.join(first)), 22)
      // the late finalizer ran at once (its attempt's scope was closed), in no other attempt
      assert.deepStrictEqual(log, ["late finalizer"])
      assert.strictEqual(drawn, yield* Effect.withRandom(Random.next, Random.make(11)))
      // outside attempts the fiber's own Random is back
      assert.notStrictEqual(yield* Random.next, drawn)
    })))

  it.effect("nested attempts on one fiber: the inner one's end gives the outer one back", () =>
    withAttemptServices(Effect.gen(function*() {
      const [inner, outer] = yield* attempt(
        Effect.zip(attempt(Random.next, 2), Random.next),
        1
      )
      assert.strictEqual(inner, yield* Effect.withRandom(Random.next, Random.make(2)))
      assert.strictEqual(outer, yield* Effect.withRandom(Random.next, Random.make(1)))
    })))

  it.effect("outside a run (no services installed) an attempt still gets its own Scope and Random", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const drawn = yield* attempt(
        Effect.zipLeft(Random.next, Effect.addFinalizer(() => Effect.sync(() => log.push("fin")))),
        5
      )
      assert.deepStrictEqual(log, ["fin"])
      assert.strictEqual(drawn, yield* Effect.withRandom(Random.next, Random.make(5)))
    }))
})

describe("leases of a run's attempts", () => {
  // One slot in the pool: a lease kept past its attempt would block every later acquire.
  const env = Layer.provideMerge(
    Runner.layer({ handleSignals: false, concurrency: 3 }),
    Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("one", [Resource.make("w", { id: "w0", capacity: 1 })])]))
  )

  const leased = <A, B>(name: string, options: Task.Options, f: (a: A, attempt: number) => Effect.Effect<B, RetryableError>) =>
    Task.make(name, { resource: "one", ...options }, (a: A, ctx) => Effect.flatMap(ctx.acquire(), () => f(a, ctx.attempt)))
  const slotFree = Effect.gen(function*() {
    const pools = yield* Pool.Pools
    const snapshot = yield* pools.snapshot("one")
    return snapshot[0]!.active === 0 && snapshot[0]!.leases.length === 0
  })

  it.effect("go back on success, on a retried failure and on a timeout", () =>
    Effect.gen(function*() {
      const template = Pipeline.make(
        "leases",
        leased("ok", {}, (n: number) => Effect.succeed(n)),
        leased("flaky", { retry: { maxAttempts: 2, base: "10 millis", jitter: "none" } }, (n: number, k) =>
          k === 1 ? Effect.fail(new RetryableError({ message: "busy", errorClass: "upstream" })) : Effect.succeed(n)),
        leased("slow", { timeout: "1 second", retry: { maxAttempts: 1 } }, (n: number) =>
          n === 0 ? Effect.never : Effect.as(Effect.sleep("10 millis"), n))
      )
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map([0, 1, 2, 3])))
      yield* TestClock.adjust("1 minute")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.succeeded, 3) // every lease went back: nobody waited forever
      assert.strictEqual(report.stats.byState.failed, 1) // 0: timed out holding the lease
      assert.isTrue(yield* slotFree)
    }).pipe(Effect.provide(env)))

  it.effect("a lease taken at once goes back after the finalizers added after it, on success and on failure", () =>
    Effect.gen(function*() {
      const pools = yield* Pool.Pools
      const seen: Array<string> = []
      // the lease is granted synchronously (a free slot) and held by the attempt without a
      // Scope; a finalizer added after it makes the attempt's Scope, which must still run the
      // lease's release last
      const task = Task.make("fin-after-lease", { resource: "one", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          yield* ctx.acquire()
          yield* Effect.addFinalizer((exit) =>
            Effect.flatMap(Effect.orDie(pools.snapshot("one")), (snap) =>
              Effect.sync(() => seen.push(`${n}:${exit._tag}:active=${snap[0]!.active}`))))
          return n === 1 ? yield* Effect.fail(new RetryableError({ message: "no", errorClass: "upstream" })) : n
        }))
      const runner = yield* Runner.Runner
      const report = yield* runner.run(Pipeline.make("fin-after-lease", task).map([0, 1]))
      assert.strictEqual(report.stats.byState.succeeded, 1)
      assert.strictEqual(report.stats.byState.failed, 1)
      assert.sameMembers(seen, ["0:Success:active=1", "1:Failure:active=1"])
      assert.isTrue(yield* slotFree)
    }).pipe(Effect.provide(env)))

  it.effect("two leases of one attempt (the first held without a Scope) are both held, and both go back", () =>
    Effect.gen(function*() {
      // capacity 2: the first lease is held without a Scope, the second goes through the
      // attempt's Scope; both are released at the attempt's end
      const two = Layer.provideMerge(
        Runner.layer({ handleSignals: false, concurrency: 1 }),
        Layer.mergeAll(MemoryStore.layer(), Pool.layer([Pool.make("two", [Resource.make("w", { id: "w0", capacity: 2 })])]))
      )
      yield* Effect.gen(function*() {
        const pools = yield* Pool.Pools
        const held: Array<number> = []
        const task = Task.make("two-leases", { resource: "two" }, (n: number, ctx) =>
          Effect.gen(function*() {
            yield* ctx.acquire()
            yield* ctx.acquire()
            held.push((yield* pools.snapshot("two"))[0]!.active)
            return n
          }))
        const runner = yield* Runner.Runner
        const report = yield* runner.run(Pipeline.make("two-leases", task).map([0, 1, 2]))
        assert.strictEqual(report.stats.byState.succeeded, 3)
        assert.deepStrictEqual(held, [2, 2, 2])
        assert.strictEqual((yield* pools.snapshot("two"))[0]!.active, 0)
      }).pipe(Effect.provide(two))
    }))

  it.effect("go back when a stop interrupts an attempt holding one", () =>
    Effect.gen(function*() {
      const template = Pipeline.make("leases-stop", leased("hang", {}, (_: number) => Effect.never))
      const runner = yield* Runner.Runner
      const fiber = yield* Effect.fork(runner.run(template.map([0, 1])))
      yield* TestClock.adjust("1 second")
      yield* runner.stop("sigint")
      yield* TestClock.adjust("1 minute")
      const report = yield* Fiber.join(fiber)
      assert.strictEqual(report.stats.byState.interrupted, 2) // one held the lease, one waited for it
      assert.isTrue(yield* slotFree)
    }).pipe(Effect.provide(env)))
})
