import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Fiber, FiberRef, Random, Schedule, Scope, TestClock } from "effect"
import * as Option from "effect/Option"
import { LeaseLost } from "../../../../src/services/internal/pool/pg/errors.js"
import { makeLossGuard } from "../../../../src/services/internal/cluster/lossGuard.js"
import { allExits } from "../../../../src/services/internal/cluster/window.js"
import { retryOnFailure } from "../../../../src/services/internal/cluster/task.js"
import {
  AttemptGenerator,
  attemptExit,
  attemptScoped,
  installAttemptServices
} from "../../../../src/services/internal/runner/attemptScope.js"

// The cluster task's hot path without the combinators it had per task (pg17z): the loss
// guard on one forked fiber instead of a race, the L5 retry built only after a failure, and
// the attempt services installed once in the execution's own fiber. Each keeps what the
// replaced combinator guaranteed.

const lost = new LeaseLost({ pool: "p", resourceId: "r", leaseId: "l", reason: "taken", errorClass: "retryable" })

describe("loss guard (one forked fiber per attempt)", () => {
  it.effect("a loss told during the call interrupts the body and fails the attempt with the LeaseLost", () =>
    Effect.gen(function*() {
      const guard = makeLossGuard()
      const started = yield* Deferred.make<void>()
      const log: Array<string> = []
      const body = Effect.zipRight(
        Deferred.succeed(started, undefined),
        Effect.onInterrupt(Effect.as(Effect.never, 1), () => Effect.sync(() => log.push("body interrupted")))
      )
      const fiber = yield* Effect.fork(guard.guard(body))
      yield* Deferred.await(started)
      guard.current()!(lost)
      const exit = yield* Fiber.await(fiber)
      assert.deepStrictEqual(exit, Exit.fail(lost))
      assert.deepStrictEqual(log, ["body interrupted"])
    }))

  it.effect("a body that ended first keeps its result; a loss told afterwards changes nothing", () =>
    Effect.gen(function*() {
      const guard = makeLossGuard()
      assert.strictEqual(yield* guard.guard(Effect.succeed(7)), 7)
      guard.current()!(lost)
      const failed = yield* Effect.exit(guard.guard(Effect.fail("boom" as const)))
      guard.current()!(lost)
      assert.deepStrictEqual(failed, Exit.fail("boom"))
      // a later attempt has a guard of its own: the earlier attempt's loss does not reach it
      assert.strictEqual(yield* guard.guard(Effect.succeed(8)), 8)
    }))

  it.effect("the caller interrupted: the body is interrupted and its finalizers ran before the caller's", () =>
    Effect.gen(function*() {
      const guard = makeLossGuard()
      const started = yield* Deferred.make<void>()
      const log: Array<string> = []
      const body = Effect.zipRight(
        Deferred.succeed(started, undefined),
        Effect.onInterrupt(Effect.never, () => Effect.sync(() => log.push("body")))
      )
      const fiber = yield* Effect.fork(Effect.ensuring(guard.guard(body), Effect.sync(() => log.push("caller"))))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(log, ["body", "caller"])
    }))

  it.effect("the body sees the caller's services and its FiberRef changes come back on success", () =>
    Effect.gen(function*() {
      const guard = makeLossGuard()
      const drawn = yield* guard.guard(Effect.withRandom(Random.nextInt, Random.make(3)))
      assert.strictEqual(drawn, yield* Effect.withRandom(Random.nextInt, Random.make(3)))
      const scope = yield* Scope.make()
      const seen = yield* Scope.extend(guard.guard(Effect.map(Effect.serviceOption(Scope.Scope), (s) => Option.isSome(s) && s.value === scope)), scope)
      assert.isTrue(seen)
    }))

  // ops17am: the guard awaits its body by one `Async` instead of `Fiber.join` inside an
  // `onInterrupt`; what the join gave is kept: the FiberRefs of a body that succeeded, not of
  // one that failed
  it.effect("a FiberRef set by the body comes back to the caller on success only", () =>
    Effect.gen(function*() {
      const guard = makeLossGuard()
      const ref = FiberRef.unsafeMake(0)
      yield* guard.guard(FiberRef.set(ref, 1))
      assert.strictEqual(yield* FiberRef.get(ref), 1)
      yield* Effect.exit(guard.guard(Effect.zipRight(FiberRef.set(ref, 2), Effect.fail("boom" as const))))
      assert.strictEqual(yield* FiberRef.get(ref), 1)
    }))

  // fib17an: the guard's join merges the body's FiberRefs but its service Context, whose merge
  // diffed the runner's whole Context once per attempt (`contextPatch.diff`): a service the body
  // installs for the rest of its fiber (not around an effect, as `Effect.provide*` do) stays in
  // the body's fiber; its other FiberRefs still come back
  it.effect("a service Context the body leaves installed does not come back to the caller (its other FiberRefs do)", () =>
    Effect.gen(function*() {
      const guard = makeLossGuard()
      const ref = FiberRef.unsafeMake(0)
      const Left = Context.GenericTag<"Left", string>("fib17an/Left")
      const seen = yield* guard.guard(Effect.gen(function*() {
        yield* FiberRef.set(ref, 1)
        yield* FiberRef.update(FiberRef.currentContext, Context.add(Left, "left"))
        return yield* Effect.serviceOption(Left)
      }))
      assert.strictEqual(Option.getOrUndefined(seen), "left")
      assert.strictEqual(yield* FiberRef.get(ref), 1)
      assert.isTrue(Option.isNone(yield* Effect.serviceOption(Left)))
    }))

  // pg17ac: the attempt fast path (`attemptExit`) takes a guarded body; the guard's fiber runs
  // inside the attempt, and the attempt's scope closes after it, with the guard's exit
  it.effect("inside attemptExit (the fast path): a loss interrupts the body, then the attempt's finalizers run with the LeaseLost, then its end", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const started = yield* Deferred.make<void>()
      const guard = makeLossGuard()
      const generator = new AttemptGenerator({ seed: 1 })
      // the body's Scope is the attempt's (installed services), added to from the guard's fiber
      const body = Effect.gen(function*() {
        yield* Effect.addFinalizer((exit) => Effect.sync(() => log.push(`finalizer ${exit._tag}`)))
        yield* Deferred.succeed(started, undefined)
        return yield* Effect.onInterrupt(Effect.never, () => Effect.sync(() => log.push("body interrupted")))
      }) as unknown as Effect.Effect<number>
      const attempt = yield* Effect.fork(Effect.zipRight(
        installAttemptServices,
        attemptExit(generator, () => guard.guard(body), (exit) => {
          log.push(`end ${exit._tag}`)
          return { exit }
        })
      ))
      yield* Deferred.await(started)
      guard.current()!(lost)
      const { exit } = yield* Fiber.join(attempt)
      assert.deepStrictEqual(exit, Exit.fail(lost))
      assert.deepStrictEqual(log, ["body interrupted", "finalizer Failure", "end Failure"])
    }))
})

// fib17an: a window's pipeline fibers, forked and awaited (not joined: no FiberRefs merged back
// into the window's fiber), as the concurrent `forEach` of `Effect.exit`s they replace
describe("allExits (a window's pipeline fibers)", () => {
  it.effect("every effect's exit, a failure interrupting none of the others", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const exits = yield* allExits<number, string>([
        Effect.fail("boom"),
        Effect.as(Deferred.await(gate), 2),
        Effect.zipRight(Deferred.succeed(gate, undefined), Effect.succeed(3))
      ])
      assert.deepStrictEqual(exits.map((e) => Exit.isSuccess(e) ? e.value : "failed"), ["failed", 2, 3])
    }))

  it.effect("the caller interrupted: every fiber is interrupted and its finalizers ran before the caller's", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const started = yield* Deferred.make<void>()
      const body = (name: string) =>
        Effect.ensuring(Effect.zipRight(Deferred.succeed(started, undefined), Effect.never), Effect.sync(() => log.push(name)))
      const fiber = yield* Effect.fork(Effect.ensuring(allExits([body("a"), body("b")]), Effect.sync(() => log.push("caller"))))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(log.slice().sort(), ["a", "b", "caller"])
      assert.strictEqual(log[2], "caller")
    }))
})

describe("retryOnFailure (L5 without a schedule driver per success)", () => {
  const flaky = (failures: number, log: Array<number>) => {
    let n = 0
    return Effect.suspend(() => {
      log.push(n)
      return n++ < failures ? Effect.fail(`e${n}` as const) : Effect.succeed("ok" as const)
    })
  }
  const schedule = Schedule.exponential(Duration.millis(200), 2).pipe(Schedule.upTo(Duration.millis(1_000)))

  it.effect("the same tries at the same times as Effect.retry, and the same last error once the budget is spent", () =>
    Effect.gen(function*() {
      for (const failures of [0, 1, 3, 10]) {
        const times: Record<string, Array<number>> = { ours: [], theirs: [] }
        const run = (name: "ours" | "theirs") =>
          Effect.gen(function*() {
            const log: Array<number> = []
            const t0 = yield* TestClock.currentTimeMillis
            const timed = Effect.zipRight(
              Effect.flatMap(TestClock.currentTimeMillis, (t) => Effect.sync(() => times[name]!.push(t - t0))),
              flaky(failures, log)
            )
            const fiber = yield* Effect.fork(
              Effect.exit(name === "ours" ? retryOnFailure(timed, schedule) : Effect.retry(timed, schedule))
            )
            yield* TestClock.adjust(Duration.seconds(10))
            return yield* Fiber.join(fiber)
          })
        const ours = yield* run("ours")
        const theirs = yield* run("theirs")
        assert.deepStrictEqual(ours, theirs, `${failures} failures`)
        assert.deepStrictEqual(times["ours"], times["theirs"], `${failures} failures`)
      }
    }))

  it.effect("a defect is not retried", () =>
    Effect.gen(function*() {
      let tries = 0
      const exit = yield* Effect.exit(retryOnFailure(Effect.suspend(() => {
        tries++
        return Effect.die("bug")
      }), Schedule.recurs(3)))
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual(tries, 1)
    }))
})

describe("installAttemptServices (a task execution's own fiber)", () => {
  it.effect("an attempt in a fiber with the services installed gets its own Scope and seeded Random, as under withAttemptServices", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const before = yield* Effect.serviceOption(Scope.Scope)
      const fiber = yield* Effect.fork(Effect.zipRight(
        installAttemptServices,
        Effect.gen(function*() {
          const a = yield* attemptScoped(
            Effect.zipRight(Effect.addFinalizer(() => Effect.sync(() => log.push("fin 1"))), Random.nextInt),
            new AttemptGenerator({ seed: 5 })
          )
          log.push("between")
          const b = yield* attemptScoped(Random.nextInt, new AttemptGenerator({ seed: 5 }))
          return [a, b] as const
        })
      ))
      // awaited, not joined (a join would take the fiber's FiberRefs over): as the runner
      // awaits a task execution (through a Deferred its observer settles)
      const [a, b] = yield* Effect.flatten(Fiber.await(fiber))
      assert.strictEqual(a, b)
      assert.deepStrictEqual(log, ["fin 1", "between"])
      // the forking fiber's own services are untouched
      const after = yield* Effect.serviceOption(Scope.Scope)
      assert.isTrue(Option.getEquivalence((x: Scope.Scope, y: Scope.Scope) => x === y)(before, after))
    }))
})
