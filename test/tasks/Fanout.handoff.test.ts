/**
 * Issue 13: a fanout branch can never hand off. A branch returning a `Handoff` directive fails
 * the group with a fatal `HandoffRefused` naming the group and the branch, in both `onError`
 * modes, and no retry policy retries it (nor a spent handoff budget).
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import { BudgetExceeded, classify, HandoffRefused } from "../../src/domain/Errors.js"
import * as Handoff from "../../src/domain/Handoff.js"
import { isRetryable, RetryPolicy } from "../../src/domain/RetryPolicy.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import { fanout } from "../../src/tasks/internal/fanout.js"
import { makeFakeContext } from "./fakeContext.js"

const attempt = <In, Out, E>(task: Task.Task<In, Out, E>, input: In) =>
  Effect.scoped(
    Effect.flatMap(Pool.makePools([]), (pools) =>
      Effect.provideService(
        Effect.gen(function*() {
          const fake = yield* makeFakeContext({ task })
          return yield* Effect.exit(task.run(input, fake.ctx))
        }),
        Pool.Pools,
        pools
      ))
  ).pipe(Effect.orDie)

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) assert.fail(`expected a failure, got ${JSON.stringify(exit.value)}`)
  const f = Cause.failureOption(exit.cause)
  if (Option.isNone(f)) assert.fail(`expected a typed failure, got ${Cause.pretty(exit.cause)}`)
  return f.value
}

const plain = Task.sync("plain", (n: number) => n + 1)
const jumper = Task.sync("jumper", (n: number) => n > 0 ? Handoff.to("report", n) : n)

describe("fanout refuses a branch directive", () => {
  it.effect("raise: the group fails with HandoffRefused naming the group and the branch", () =>
    Effect.gen(function*() {
      const group = fanout(plain, jumper, { name: "judges" })
      const e = failureOf(yield* attempt(group, 1))
      assert.instanceOf(e, HandoffRefused)
      const refused = e as HandoffRefused
      assert.strictEqual(refused.task, "judges")
      assert.strictEqual(
        refused.message,
        `fanout "judges": branch "jumper" returned Handoff.to "report", but a fanout branch cannot hand off (the group is one step, so a control transition cannot belong to one of its concurrent branches): return the directive from a task of its own, after the group`
      )
      assert.strictEqual(classify(refused), "fatal")
      // a branch that returns a plain value passes as before
      const ok = yield* attempt(group, 0)
      assert.deepStrictEqual(ok, Exit.succeed({ plain: 1, jumper: 0 }))
    }))

  it.effect("collect: the directive is not collected as a branch failure; the group fails", () =>
    Effect.gen(function*() {
      const group = fanout(plain, jumper, { name: "judges", onError: "collect" })
      const e = failureOf(yield* attempt(group, 1))
      assert.instanceOf(e, HandoffRefused)
      assert.include((e as HandoffRefused).message, `branch "jumper" returned Handoff.to "report"`)
    }))

  it.effect("a nested group's refusal propagates through a collecting parent", () =>
    Effect.gen(function*() {
      const inner = fanout(jumper, { name: "inner" })
      const outer = fanout(plain, inner, { name: "outer", onError: "collect" })
      const e = failureOf(yield* attempt(outer, 2))
      assert.instanceOf(e, HandoffRefused)
      assert.include((e as HandoffRefused).message, `fanout "inner": branch "jumper" returned`)
    }))
})

describe("refused directives and spent budgets are never retried", () => {
  it("whatever the policy names in `on`", () => {
    const p = RetryPolicy.make({
      maxAttempts: 5,
      retryUnknown: true,
      on: ["HandoffRefused", "BudgetExceeded", "fatal"]
    })
    assert.isFalse(isRetryable(p, new HandoffRefused({ message: "undeclared edge validate → report" })))
    assert.isFalse(isRetryable(p, new BudgetExceeded({ budget: "handoffs", message: "3 of 3 used" })))
    assert.strictEqual(classify(new HandoffRefused({ message: "x" })), "fatal")
    assert.strictEqual(classify(new BudgetExceeded({ budget: "handoffs", message: "x" })), "fatal")
  })
})
