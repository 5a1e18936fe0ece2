/**
 * Issue 19 §5: the runner's fast path evaluates an Effect task's attempt without a fiber
 * (`evalNow.ts`), stepping through Effect's primitives as a fiber's run loop does, and hands
 * what is left to a fiber at the first step that needs one. What a task relies on: the same
 * exit as on a fiber (values, failures, defects from throws), every side effect exactly once
 * and in order, and the rest (after a wait, a fiber's runtime, a long loop) run on a fiber
 * from the step it stopped at. These also pin the Effect internals the module reads: an
 * upgrade that changes them fails here.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Effect, Either, Equal, Exit, Option } from "effect"
import { type SyncHolder, withHolderNow } from "../../../../src/services/internal/holdNow.js"
import { evalNow, type HolderSource, layoutKnown, MAX_STEPS, Pending } from "../../../../src/services/internal/runner/evalNow.js"

class Answer extends Context.Tag("test/Answer")<Answer, number>() {}
const services = Context.make(Answer, 42)
const context = services as Context.Context<never>

/**
 * Runs `make()` both ways, each with a log of its side effects: on a fiber, and evaluated now
 * (its rest, if any, then on a fiber). Returns both exits and logs, and whether the evaluation
 * stopped before the end.
 */
const both = <A, E>(
  make: (log: Array<string>) => Effect.Effect<A, E, Answer>,
  holder?: HolderSource | undefined
) => {
  const fiberLog: Array<string> = []
  const onFiber = Effect.runSyncExit(Effect.provide(make(fiberLog), services))
  const nowLog: Array<string> = []
  const now = evalNow(make(nowLog) as Effect.Effect<A, E>, context, holder)
  const pending = now instanceof Pending
  const exit = now instanceof Pending ? Effect.runSyncExit(now.effect) : now
  return { onFiber, fiberLog, exit, nowLog, pending }
}

const assertSame = <A, E>(r: ReturnType<typeof both<A, E>>, pending: boolean) => {
  assert.strictEqual(r.pending, pending, pending ? "expected a rest on a fiber" : "expected an end at once")
  assert.isTrue(Equal.equals(r.exit, r.onFiber), `exits: ${String(r.exit)} vs ${String(r.onFiber)}`)
  assert.deepStrictEqual(r.nowLog, r.fiberLog)
}

const step = (log: Array<string>, name: string) => Effect.sync(() => void log.push(name))

describe("evalNow: an attempt's Effect without a fiber", () => {
  it("ends at once with the fiber's value: sync, suspend, flatMap, map, gen, services, Either and Option", () => {
    assertSame(both((log) => Effect.map(step(log, "a"), () => 1)), false)
    assertSame(both(() => Effect.succeed("x")), false)
    assertSame(
      both((log) =>
        Effect.suspend(() => Effect.flatMap(step(log, "a"), () => Effect.zipRight(step(log, "b"), Effect.succeed(2))))
      ),
      false
    )
    assertSame(
      both((log) =>
        Effect.gen(function*() {
          yield* step(log, "a")
          const inner = yield* Effect.gen(function*() {
            yield* step(log, "inner")
            return yield* Effect.succeed(3)
          })
          const answer = yield* Answer
          const right = yield* Either.right(4)
          const some = yield* Option.some(5)
          const exit = yield* Exit.succeed(6)
          log.push(`sum ${inner + answer + right + some + exit}`)
          return inner + answer + right + some + exit
        })
      ),
      false
    )
  })

  it("fails as the fiber fails: a failure, Either.left, Option.none, a failure inside gen", () => {
    assertSame(both((log) => Effect.zipRight(step(log, "a"), Effect.fail("no"))), false)
    assertSame(both(() => Effect.flatMap(Either.left("left"), () => Effect.succeed(1))), false)
    assertSame(
      both((log) =>
        Effect.gen(function*() {
          yield* step(log, "a")
          // the step after a failure must not run: the generator goes on past it on purpose
          // @effect-diagnostics-next-line missingReturnYieldStar:off
          yield* Effect.fail("stop")
          log.push("never")
        })
      ),
      false
    )
    // (an object error is captured by the fiber: that step runs on it)
    const error = new Error("typed")
    assertSame(both(() => Effect.fail(error)), true)
    const none = both(() => Effect.asVoid(Option.none()))
    assert.isTrue(Exit.isFailure(none.exit) && Cause.isFailType(none.exit.cause) &&
      Cause.isNoSuchElementException(none.exit.cause.error))
    assert.isTrue(Exit.isFailure(none.onFiber) && Cause.isFailType(none.onFiber.cause) &&
      Cause.isNoSuchElementException(none.onFiber.cause.error))
  })

  it("a throw is the fiber's defect, wherever user code throws", () => {
    const boom = "boom"
    const thrower = (): never => {
      throw boom
    }
    assertSame(both(() => Effect.sync((): number => thrower())), false)
    assertSame(both((log) => Effect.flatMap(step(log, "a"), thrower)), false)
    assertSame(both(() => Effect.suspend(thrower)), false)
    assertSame(
      both((log) =>
        Effect.gen(function*() {
          yield* step(log, "a")
          thrower()
        })
      ),
      false
    )
    // an Error object: the fiber attaches its span to it, so that step runs on a fiber
    const error = new Error("thrown")
    assertSame(both(() => Effect.sync((): number => { throw error })), true)
    const interrupted = both(() => Effect.sync((): number => { throw new Cause.InterruptedException() }))
    assert.isTrue(Exit.isFailure(interrupted.exit) && Cause.isInterrupted(interrupted.exit.cause))
    assert.isTrue(Exit.isFailure(interrupted.exit) && Cause.isDie(interrupted.exit.cause))
    assert.isTrue(Exit.isFailure(interrupted.onFiber) && Cause.isInterrupted(interrupted.onFiber.cause))
  })

  it("stops at a step that needs a fiber; the rest runs there, each side effect once and in order", () => {
    // a wait in a chain of flatMaps
    assertSame(
      both((log) =>
        step(log, "a").pipe(
          Effect.zipRight(Effect.yieldNow()),
          Effect.zipRight(step(log, "b")),
          Effect.flatMap(() => Effect.map(step(log, "c"), () => "done"))
        )
      ),
      true
    )
    // the fiber's runtime, inside a generator inside a generator
    assertSame(
      both((log) =>
        Effect.gen(function*() {
          yield* step(log, "a")
          const inner = yield* Effect.gen(function*() {
            yield* step(log, "inner a")
            yield* Effect.asVoid(Effect.fiberId)
            yield* step(log, "inner b")
            return 1
          })
          yield* step(log, "b")
          const again = yield* Effect.gen(function*() {
            yield* Effect.yieldNow()
            return 2
          })
          log.push(`sum ${inner + again}`)
          return inner + again
        })
      ),
      true
    )
    // an error handler (the rest handles the failure)
    assertSame(
      both((log) => Effect.zipRight(step(log, "a"), Effect.catchAll(Effect.fail("x"), (e) => Effect.succeed(`caught ${e}`)))),
      true
    )
  })

  it(`a body that loops without waiting stops after ${MAX_STEPS} steps and goes on on a fiber`, () => {
    const loop = (log: Array<string>, n: number): Effect.Effect<number> =>
      n === 0 ? Effect.sync(() => log.length) : Effect.flatMap(step(log, `${n}`), () => loop(log, n - 1))
    const r = both((log) => loop(log, MAX_STEPS))
    assertSame(r, true)
    assert.isTrue(Exit.isSuccess(r.exit) && r.exit.value === MAX_STEPS)
    assertSame(both((log) => loop(log, 10)), false)
  })

  it("runs a step marked with withHolderNow with the holder it is given, and leaves it to a fiber without one", () => {
    const held: Array<() => void> = []
    const holder: SyncHolder = { hold: (release) => void held.push(release) }
    const acquire = (log: Array<string>) =>
      withHolderNow((sync) =>
        Effect.sync(() => {
          log.push(sync === undefined ? "no holder" : "held")
          sync?.hold(() => log.push("released"))
          return "lease"
        })
      )
    const given = evalNow(Effect.map(acquire([]), (l) => `${l}!`), context, { holderNow: () => holder })
    assert.isTrue(Exit.isExit(given) && Exit.isSuccess(given) && given.value === "lease!")
    assert.strictEqual(held.length, 1)
    // without a holder source the step needs a fiber (which finds no holder in its Scope)
    const log: Array<string> = []
    const left = evalNow(Effect.map(acquire(log), (l) => `${l}!`), context, undefined)
    assert.instanceOf(left, Pending)
    assert.deepStrictEqual(log, [])
    const exit = Effect.runSyncExit((left as Pending<string, never>).effect)
    assert.isTrue(Exit.isSuccess(exit) && exit.value === "lease!")
    assert.deepStrictEqual(log, ["no holder"])
  })
})

describe("evalNow: the Effect build's primitive layout", () => {
  it("is the one the module reads (else every attempt would go to a fiber whole)", () => {
    assert.isTrue(layoutKnown)
  })
})
