import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Either, Exit, Fiber, Option, Scope, TestClock } from "effect"
import { classifyCause, ConfigError, FatalError } from "../../src/domain/Errors.js"
import * as Resource from "../../src/domain/Resource.js"
import { identityFields, RetryPolicy } from "../../src/domain/RetryPolicy.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import { branchContext, branchSeed, fanout, isBranchFailure, mostPermissiveRetry } from "../../src/tasks/internal/fanout.js"
import { boom, delay, echo, flaky, leaky, simulateLlm } from "../../src/tasks/Mock.js"
import { type FakeContextOptions, makeFakeContext } from "./fakeContext.js"

const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pool.PoolsService) => Effect.Effect<A, E, Pool.Pools | Scope.Scope>
) =>
  Effect.scoped(
    Effect.flatMap(Pool.makePools(configs), (pools) => Effect.provideService(f(pools), Pool.Pools, pools))
  )

const attempt = <In, Out, E>(task: Task.Task<In, Out, E>, input: In, options: FakeContextOptions = {}) =>
  Effect.gen(function*() {
    const fake = yield* makeFakeContext({ task, ...options })
    const exit = yield* Effect.exit(task.run(input, fake.ctx))
    return { exit, owner: fake.owner }
  })

const fp = (t: Task.Any) => JSON.stringify(Task.fingerprint(t))

const configErrorOf = (define: () => unknown): ConfigError => {
  const r = Task.tryDefine(define)
  if (Either.isRight(r) || !(r.left instanceof ConfigError)) throw new Error("expected a ConfigError")
  return r.left
}

const workers = (pool: string, capacity: number, ids: ReadonlyArray<string>) =>
  Pool.make(pool, ids.map((id) => Resource.make("llm", { id, capacity, degradeAfter: 10_000, deadAfter: 20_000 })))

/** A task that records when it started and ended on the Clock. */
const timed = (name: string, ms: number, log: Array<string>) =>
  Task.make(name, (input: number) =>
    Effect.gen(function*() {
      log.push(`${name}:start@${yield* TestClock.currentTimeMillis}`)
      yield* Effect.sleep(Duration.millis(ms))
      log.push(`${name}:end@${yield* TestClock.currentTimeMillis}`)
      return input * 2
    }))

describe("fanout: running", () => {
  it.effect("runs the branches concurrently and returns their values by name, in order", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const log: Array<string> = []
        const group = fanout(timed("a", 1000, log), timed("b", 1000, log), delay<number>(500, { name: "c" }))
        const fiber = yield* Effect.fork(attempt(group, 21))
        yield* settle
        yield* TestClock.adjust("999 millis")
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        // run one after the other the branches would need 2.5 s; together they need 1 s
        yield* TestClock.adjust("1 millis")
        const { exit } = yield* Fiber.join(fiber)
        assert.isTrue(Exit.isSuccess(exit))
        if (Exit.isSuccess(exit)) {
          assert.deepStrictEqual(exit.value, { a: 42, b: 42, c: 21 })
          assert.deepStrictEqual(Object.keys(exit.value), ["a", "b", "c"])
        }
        assert.deepStrictEqual([...log].sort(), ["a:end@1000", "a:start@0", "b:end@1000", "b:start@0"])
      })))

  it.effect("raise: the first failure fails the group and interrupts the other branches", () =>
    withPools([workers("apis", 1, ["w1"])], (pools) =>
      Effect.gen(function*() {
        const group = fanout(
          simulateLlm({ latency: "10 seconds" }),
          delay("10 seconds"),
          boom("nope", { errorClass: "fatal" })
        )
        // no clock movement at all: the group ends because the sleeping branches are interrupted
        const { exit } = yield* attempt(group, 0)
        assert.isTrue(Exit.isFailure(exit))
        const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
        assert.isTrue(Option.isSome(failure) && failure.value instanceof FatalError)
        assert.isTrue(Exit.isFailure(exit) && Option.isNone(Cause.dieOption(exit.cause)))
        assert.strictEqual((yield* pools.stats("apis")).active, 0)
        assert.strictEqual(group.parameters["onError"], "raise")
      })))

  it.effect("collect: failed branches become error entries and the group succeeds", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const group = fanout(echo, boom("bad row", { errorClass: "invalid" }), flaky(1, { name: "shaky" }), {
          onError: "collect"
        })
        const { exit } = yield* attempt(group, "x")
        assert.isTrue(Exit.isSuccess(exit))
        if (!Exit.isSuccess(exit)) return
        assert.deepStrictEqual(exit.value, {
          echo: "x",
          boom: { error: { type: "InvalidValueError", message: "bad row", class: "invalid" } },
          shaky: { error: { type: "RetryableError", message: "flaky: attempt 1 of 1 failing", class: "retryable" } }
        })
        assert.isTrue(isBranchFailure(exit.value["boom"]))
        assert.isFalse(isBranchFailure(exit.value["echo"]))
        // the next attempt of the group re-runs every branch; flaky now succeeds
        const second = yield* attempt(group, "x", { attempt: 2 })
        assert.deepStrictEqual(
          Exit.map(second.exit, (v) => v["shaky"]),
          Exit.succeed("x")
        )
      })))

  it.effect("a branch failure under raise keeps its class for the group's retry decision", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const group = fanout(echo, flaky(1, { errorClass: "rate_limit" }))
        const first = yield* attempt(group, 1)
        assert.isTrue(Exit.isFailure(first.exit))
        if (Exit.isFailure(first.exit)) assert.strictEqual(classifyCause(first.exit.cause), "rate_limit")
        const second = yield* attempt(group, 1, { attempt: 2 })
        assert.deepStrictEqual(second.exit, Exit.succeed({ echo: 1, flaky: 1 }))
      })))

  it.effect("branches share the parent's leases owner and task name, and acquire from their own pools", () =>
    withPools([workers("a", 2, ["a1"]), workers("b", 2, ["b1"])], (pools) =>
      Effect.gen(function*() {
        const group = fanout(
          simulateLlm({ resource: "a", name: "askA", latency: 0 }),
          simulateLlm({ resource: "b", name: "askB", latency: 0 }),
          leaky({ name: "leakA", pool: "a" }),
          leaky({ name: "leakB", resource: "b" }),
          { name: "judges" }
        )
        assert.strictEqual(group.options.resource, null)
        const { exit, owner } = yield* attempt(group, 0)
        assert.isTrue(Exit.isSuccess(exit))
        if (Exit.isSuccess(exit)) {
          assert.strictEqual((exit.value["askA"] as { resourceId: string }).resourceId, "a1")
          assert.strictEqual((exit.value["askB"] as { resourceId: string }).resourceId, "b1")
        }
        const leaked = yield* pools.reclaim(owner)
        assert.deepStrictEqual(leaked.map((l) => [l.pool, l.taskName]).sort(), [["a", "judges"], ["b", "judges"]])
        assert.strictEqual((yield* pools.stats("a")).okTotal, 1)
        assert.strictEqual((yield* pools.stats("b")).okTotal, 1)
      })))

  it.effect("each branch gets its own deterministic seed derived from the group's", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const seedOf = (name: string) => Task.make(name, (_: unknown, ctx) => Effect.succeed(ctx.seed))
        const group = fanout(seedOf("x"), seedOf("y"))
        const { exit } = yield* attempt(group, 0, { seed: 1234 })
        assert.deepStrictEqual(exit, Exit.succeed({ x: branchSeed(1234, "x"), y: branchSeed(1234, "y") }))
        assert.notStrictEqual(branchSeed(1234, "x"), branchSeed(1234, "y"))
        assert.notStrictEqual(branchSeed(1234, "x"), branchSeed(1235, "x"))
      })))
})

describe("fanout: declared behaviour", () => {
  it("a branch context reads the parent's getters that use private state (the runner's attempt context)", () => {
    // The runner's attempt context is a class whose getters read `#private` fields: a branch
    // made with Object.create(ctx) threw "Cannot read private member" on ctx.emit etc.
    const emitted: Array<string> = []
    class Ctx {
      readonly #emitted = emitted
      readonly seed = 7
      get emit() {
        return (kind: string) => Effect.sync(() => void this.#emitted.push(kind))
      }
      get acquire() {
        return () => Effect.succeed("parent")
      }
    }
    const branch = branchContext(new Ctx() as never, { ...echo, name: "child" } as never)
    Effect.runSync(branch.emit("hello"))
    assert.deepStrictEqual(emitted, ["hello"])
    assert.strictEqual(branch.seed, branchSeed(7, "child"))
    assert.isTrue("emit" in branch)
  })

  it("uses the most permissive child retry policy unless retry is given", () => {
    const a = Task.make("a", { retry: { maxAttempts: 2, base: "100 millis", jitter: "none" } }, (x: number) =>
      Effect.succeed(x))
    const b = Task.make(
      "b",
      { retry: { maxAttempts: 4, base: "50 millis", cap: "10 seconds", factor: 3, on: ["Oops"], retryUnknown: true } },
      (x: number) => Effect.succeed(x)
    )
    const group = fanout(a, b, echo)
    const r = group.options.retry
    assert.strictEqual(r.maxAttempts, 4)
    assert.strictEqual(Duration.toMillis(r.base), 500) // echo's default base (0.5 s) is the largest
    assert.strictEqual(r.factor, 3)
    assert.strictEqual(Duration.toMillis(r.cap), 30_000)
    assert.strictEqual(r.jitter, "full")
    assert.deepStrictEqual(r.on, ["Oops"])
    assert.isTrue(r.retryUnknown)
    assert.isTrue(r.retryClassified)
    const given = fanout(a, b, { retry: { maxAttempts: 9 } })
    assert.strictEqual(given.options.retry.maxAttempts, 9)
    assert.deepStrictEqual(fanout(echo, delay(1)).options.retry, RetryPolicy.default)
  })

  it("mostPermissiveRetry: total budget unbounded if any child is, else the largest; agreed jitter kept", () => {
    const p1 = RetryPolicy.make({ maxAttempts: 2, maxTotal: "1 minute", jitter: "equal" })
    const p2 = RetryPolicy.make({ maxAttempts: 3, maxTotal: "2 minutes", jitter: "equal", retryClassified: false })
    const merged = mostPermissiveRetry([p1, p2])
    assert.strictEqual(Duration.toMillis(merged.maxTotal!), 120_000)
    assert.strictEqual(merged.jitter, "equal")
    assert.isTrue(merged.retryClassified)
    assert.isUndefined(mostPermissiveRetry([p1, RetryPolicy.make({})]).maxTotal)
    assert.strictEqual(mostPermissiveRetry([p1]), p1)
    assert.strictEqual(mostPermissiveRetry([]), RetryPolicy.default)
    assert.deepStrictEqual(identityFields(mostPermissiveRetry([RetryPolicy.default, RetryPolicy.default])), identityFields(RetryPolicy.default))
  })

  it("takes resource, algorithm and timeout from the children only when they all agree", () => {
    const ask = (name: string, resource: string, algorithm: string, timeout: Duration.DurationInput) =>
      simulateLlm({ name, resource, algorithm, timeout })
    const same = fanout(ask("x", "apis", "backoff", "5 seconds"), ask("y", "apis", "backoff", 5000))
    assert.strictEqual(same.options.resource, "apis")
    assert.deepStrictEqual(same.options.algorithm, { name: "backoff" })
    assert.strictEqual(Duration.toMillis(same.options.timeout!), 5000)
    const mixed = fanout(ask("x", "apis", "backoff", "5 seconds"), ask("y", "other", "wait", "6 seconds"))
    assert.strictEqual(mixed.options.resource, null)
    assert.strictEqual(mixed.options.algorithm, null)
    assert.strictEqual(mixed.options.timeout, null)
    // a custom algorithm identified only by the children's version stays with the branches
    const custom = { _tag: "AcquireAlgorithm" as const, name: "mine" }
    const viaVersion = (name: string) => Task.make(name, { algorithm: custom, version: "v1" }, (x: number) => Effect.succeed(x))
    const group = fanout(viaVersion("x"), viaVersion("y"))
    assert.strictEqual(group.options.algorithm, null)
    assert.deepStrictEqual(fanout(viaVersion("x"), viaVersion("y"), { version: "g1" }).options.algorithm, { name: "mine", custom: true })
    // one child without a resource is a disagreement too
    assert.strictEqual(fanout(ask("x", "apis", "wait", 1), echo).options.resource, null)
  })

  it("records the children in order: a changed child, order or onError changes the identity", () => {
    const base = fp(fanout(delay(1000), echo))
    assert.strictEqual(fp(fanout(delay("1 second"), echo)), base)
    assert.notStrictEqual(fp(fanout(delay(2000), echo)), base)
    assert.notStrictEqual(fp(fanout(echo, delay(1000))), base)
    assert.notStrictEqual(fp(fanout(delay(1000), echo, { onError: "collect" })), base)
    assert.notStrictEqual(fp(fanout(delay(1000), echo, { name: "other" })), base)
    const group = fanout(delay(1000), echo)
    assert.deepStrictEqual(group.children.map((c) => c.name), ["delay", "echo"])
    assert.deepStrictEqual(group.parameters, { onError: "raise" })
    assert.strictEqual(group.name, "fanout")
  })

  it("refuses duplicate branch names, no branches, non-tasks and bad options", () => {
    const dup = configErrorOf(() => fanout(echo, delay(1), echo))
    assert.deepStrictEqual(dup.issues.map((i) => i.path), ["tasks[2]"])
    assert.include(dup.message, "duplicate branch name \"echo\"")
    assert.deepStrictEqual(configErrorOf(() => (fanout as any)()).issues.map((i: any) => i.path), ["tasks"])
    assert.deepStrictEqual(
      configErrorOf(() => (fanout as any)(echo, 42, {})).issues.map((i: any) => i.path),
      ["tasks[1]"]
    )
    const bad = configErrorOf(() => fanout(echo, { onError: "ignore" as never, when: 1 } as never))
    assert.deepStrictEqual(bad.issues.map((i) => i.path).sort(), ["onError", "when"])
  })
})

describe("fanout: types", () => {
  it("accepts an input every child accepts and keeps the children's output types", () => {
    const len = Task.make("len", (x: { q: string }) => Effect.succeed(x.q.length))
    const id = Task.make("id", (x: { id: number }) => Effect.succeed(String(x.id)))
    const group = fanout(len, id, echo)
    const ok: Task.Input<typeof group> = { q: "a", id: 1 }
    // @ts-expect-error: "id" is required by the second branch
    const missing: Task.Input<typeof group> = { q: "a" }
    const typed = fanout(len, id)
    const out: Task.Output<typeof typed> = { len: 1, id: "1" }
    // @ts-expect-error: a boolean is no child's output
    const wrong: Task.Output<typeof typed> = { len: true }
    const collected: Task.Output<ReturnType<typeof collectOf>> = { len: { error: { type: "T", message: "m", class: "fatal" } } }
    assert.isDefined([ok, missing, out, wrong, collected])
  })
})

const collectOf = () =>
  fanout(Task.make("len", (x: string) => Effect.succeed(x.length)), echo, { onError: "collect" })
