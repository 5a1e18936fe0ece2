import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Exit, Fiber, Option, Scope, TestClock } from "effect"
import { classify, ConfigError, FatalError, RetryableError } from "../../src/domain/Errors.js"
import * as Resource from "../../src/domain/Resource.js"
import { decide, RetryPolicy } from "../../src/domain/RetryPolicy.js"
import * as Task from "../../src/domain/Task.js"
import * as Pool from "../../src/services/Pool.js"
import {
  boom,
  delay,
  drawFor,
  echo,
  echoOf,
  flaky,
  InvalidValueError,
  leaky,
  mockError,
  simulateLlm
} from "../../src/tasks/internal/mock.js"
import { type FakeContextOptions, makeFakeContext } from "./fakeContext.js"

/** Lets forked fibers run until they block. */
const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })

const withPools = <A, E>(
  configs: ReadonlyArray<Pool.PoolConfig>,
  f: (pools: Pool.PoolsService) => Effect.Effect<A, E, Pool.Pools | Scope.Scope>
) =>
  Effect.scoped(
    Effect.flatMap(Pool.makePools(configs), (pools) => Effect.provideService(f(pools), Pool.Pools, pools))
  )

/** Runs one attempt of a task with a fake context; returns the exit and the owner key. */
const attempt = <In, Out, E>(task: Task.Task<In, Out, E>, input: In, options: FakeContextOptions = {}) =>
  Effect.gen(function*() {
    const fake = yield* makeFakeContext({ task, ...options })
    const exit = yield* Effect.exit(task.run(input, fake.ctx))
    return { exit, owner: fake.owner }
  })

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const f = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (f === undefined) throw new Error(`expected a plain failure, got ${exit.cause._tag}`)
  return f
}

const fp = (t: Task.Any) => JSON.stringify(Task.fingerprint(t))

const configErrorOf = (define: () => unknown): ConfigError => {
  const r = Task.tryDefine(define)
  if (Either.isRight(r) || !(r.left instanceof ConfigError)) throw new Error("expected a ConfigError")
  return r.left
}

/** A pool of resources that stay healthy however many failures they see (health is not under test). */
const workers = (pool: string, capacity: number, ids: ReadonlyArray<string> = ["w1"]) =>
  Pool.make(pool, ids.map((id) => Resource.make("llm", { id, capacity, degradeAfter: 10_000, deadAfter: 20_000 })))

describe("echo", () => {
  it.effect("returns its input unchanged (same reference) and is one task value", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const row = { q: "why?", n: [1, 2] }
        const { exit } = yield* attempt(echo, row)
        assert.isTrue(Exit.isSuccess(exit))
        if (Exit.isSuccess(exit)) assert.strictEqual(exit.value, row)
        assert.strictEqual(echo.name, "echo")
        assert.deepStrictEqual(echo.parameters, {})
        assert.strictEqual(echoOf<{ q: string }>(), echo)
      })))
})

describe("delay", () => {
  it.effect("completes only once the Clock has moved by the duration", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const t = delay<string>("1 second")
        const fiber = yield* Effect.fork(attempt(t, "x"))
        yield* settle
        yield* TestClock.adjust("999 millis")
        assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        yield* TestClock.adjust("1 millis")
        const { exit } = yield* Fiber.join(fiber)
        assert.deepStrictEqual(exit, Exit.succeed("x"))
      })))

  it("records its duration: different durations change identity, equal ones do not", () => {
    assert.notStrictEqual(fp(delay("1 second")), fp(delay("2 seconds")))
    assert.strictEqual(fp(delay("1 second")), fp(delay(1000)))
    assert.deepStrictEqual(delay("250 millis").parameters, { delayMs: 250 })
    assert.strictEqual(delay(1, { name: "pause" }).name, "pause")
  })

  it("refuses a negative, infinite or unparseable duration", () => {
    assert.deepStrictEqual(configErrorOf(() => delay(-5)).issues.map((i) => i.path), ["duration"])
    assert.deepStrictEqual(configErrorOf(() => delay("-1 second")).issues.map((i) => i.path), ["duration"])
    assert.deepStrictEqual(configErrorOf(() => delay("forever" as never)).issues.map((i) => i.path), ["duration"])
    assert.deepStrictEqual(configErrorOf(() => delay(Infinity)).issues.map((i) => i.path), ["duration"])
  })
})

describe("flaky", () => {
  it.effect("fails exactly the first failTimes attempts of a pipeline, then returns its input", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const t = flaky<number>(2)
        const outcomes: Array<string> = []
        for (const n of [1, 2, 3, 4]) {
          const { exit } = yield* attempt(t, 7, { attempt: n })
          outcomes.push(Exit.isSuccess(exit) ? `ok:${exit.value}` : classify(failureOf(exit)))
        }
        assert.deepStrictEqual(outcomes, ["retryable", "retryable", "ok:7", "ok:7"])
        // the count is per attempt number, not a hidden counter: attempt 1 fails again
        const again = yield* attempt(t, 7, { attempt: 1, pipelineId: "another" })
        assert.isTrue(Exit.isFailure(again.exit))
      })))

  it.effect("carries the asked class: fatal is a FatalError, invalid is declined by a policy", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const fatal = failureOf((yield* attempt(flaky(1, { errorClass: "fatal" }), 0)).exit)
        assert.instanceOf(fatal, FatalError)
        const invalid = failureOf((yield* attempt(flaky(1, { errorClass: "invalid", message: "bad row" }), 0)).exit)
        assert.instanceOf(invalid, InvalidValueError)
        assert.strictEqual(classify(invalid), "invalid")
        assert.strictEqual(invalid.message, "bad row")
        const limited = failureOf((yield* attempt(flaky(1, { errorClass: "rate_limit" }), 0)).exit)
        assert.instanceOf(limited, RetryableError)
        assert.strictEqual(classify(limited), "rate_limit")
        const policy = RetryPolicy.make({ maxAttempts: 5 })
        assert.strictEqual((yield* decide(policy, invalid, 1, 0)).reason, "policy_declined")
        assert.strictEqual((yield* decide(policy, limited, 1, 0)).reason, "retryable")
      })))

  it.effect("with a policy allowing failTimes + 1 attempts, a retry loop ends in success", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const t = flaky<string>(3, { retry: { maxAttempts: 4, jitter: "none" } })
        let n = 1
        const decisions: Array<string> = []
        while (true) {
          const { exit } = yield* attempt(t, "done", { attempt: n })
          if (Exit.isSuccess(exit)) {
            assert.strictEqual(exit.value, "done")
            break
          }
          const d = yield* decide(t.options.retry, failureOf(exit), n, 0)
          decisions.push(d.reason)
          if (!d.retry) break
          n++
        }
        assert.strictEqual(n, 4)
        assert.deepStrictEqual(decisions, ["retryable", "retryable", "retryable"])
      })))

  it("records failTimes, class and message; validates them", () => {
    assert.deepStrictEqual(flaky().parameters, { failTimes: 2, errorClass: "retryable", message: null })
    assert.notStrictEqual(fp(flaky(1)), fp(flaky(2)))
    assert.notStrictEqual(fp(flaky(1)), fp(flaky(1, { errorClass: "fatal" })))
    assert.deepStrictEqual(configErrorOf(() => flaky(-1)).issues.map((i) => i.path), ["failTimes"])
    assert.deepStrictEqual(configErrorOf(() => flaky(1.5)).issues.map((i) => i.path), ["failTimes"])
    const bad = configErrorOf(() => flaky(1, { errorClass: "oops" as never }))
    assert.deepStrictEqual(bad.issues.map((i) => i.path), ["errorClass"])
  })
})

describe("boom", () => {
  it.effect("always fails, with the asked class", () =>
    withPools([], () =>
      Effect.gen(function*() {
        const classes = ["retryable", "fatal", "invalid", "timeout", "upstream", "unknown"] as const
        for (const c of classes) {
          const e = failureOf((yield* attempt(boom("kaput", { errorClass: c }), 1, { attempt: 9 })).exit)
          assert.strictEqual(classify(e), c)
          assert.strictEqual(e.message, "kaput")
        }
        const dflt = failureOf((yield* attempt(boom(), 1)).exit)
        assert.instanceOf(dflt, RetryableError)
        assert.strictEqual(dflt.message, "boom")
        assert.instanceOf(failureOf((yield* attempt(boom("x", { errorClass: "fatal" }), 1)).exit), FatalError)
      })))

  it("mockError maps every class so that classify gives it back", () => {
    for (const c of ["rate_limit", "timeout", "connection", "upstream", "retryable", "invalid", "fatal", "cancelled", "unknown"] as const) {
      assert.strictEqual(classify(mockError(c, "m")), c)
    }
  })

  it("records message and class", () => {
    assert.deepStrictEqual(boom().parameters, { message: "boom", errorClass: "retryable" })
    assert.notStrictEqual(fp(boom("a")), fp(boom("b")))
    assert.strictEqual(boom("x", { name: "kaboom" }).name, "kaboom")
  })
})

describe("leaky", () => {
  it.effect("leaves a raw lease that reclaim reports as leaked", () =>
    withPools([workers("apis", 2)], (pools) =>
      Effect.gen(function*() {
        const t = leaky<string>({ name: "leak" })
        const { exit, owner } = yield* attempt(t, "in", { pipelineId: "p1" })
        assert.deepStrictEqual(exit, Exit.succeed("in"))
        assert.strictEqual((yield* pools.heldBy(owner)).length, 1)
        assert.strictEqual((yield* pools.stats("apis")).active, 1)
        const leaked = yield* pools.reclaim(owner)
        assert.strictEqual(leaked.length, 1)
        assert.strictEqual(leaked[0]!.pool, "apis")
        assert.strictEqual(leaked[0]!.resourceId, "w1")
        assert.strictEqual(leaked[0]!.taskName, "leak")
        const stats = yield* pools.stats("apis")
        assert.strictEqual(stats.leakedTotal, 1)
        assert.strictEqual(stats.active, 0)
      })))

  it.effect("takes the lease from the named pool", () =>
    withPools([workers("a", 1, ["a1"]), workers("b", 1, ["b1"])], (pools) =>
      Effect.gen(function*() {
        const { owner } = yield* attempt(leaky({ pool: "b" }), 0)
        const leaked = yield* pools.reclaim(owner)
        assert.deepStrictEqual(leaked.map((l) => l.resourceId), ["b1"])
        assert.deepStrictEqual(leaky({ pool: "b" }).parameters, { pool: "b" })
        assert.notStrictEqual(fp(leaky({ pool: "a" })), fp(leaky({ pool: "b" })))
      })))
})

describe("simulateLlm", () => {
  it.effect("acquires, waits on Clock, reports usage, returns a typed answer and releases", () =>
    withPools([workers("apis", 1)], (pools) =>
      Effect.gen(function*() {
        const t = simulateLlm<{ q: string }>({ resource: "apis", latency: "40 millis", tokens: 7 })
        assert.strictEqual(t.options.resource, "apis")
        assert.strictEqual(t.name, "simulateLlm")
        const fiber = yield* Effect.fork(attempt(t, { q: "hi" }, { seed: 11 }))
        yield* settle
        assert.strictEqual((yield* pools.stats("apis")).active, 1)
        yield* TestClock.adjust("40 millis")
        const { exit } = yield* Fiber.join(fiber)
        assert.isTrue(Exit.isSuccess(exit))
        if (Exit.isSuccess(exit)) {
          assert.deepStrictEqual(exit.value.input, { q: "hi" })
          assert.strictEqual(exit.value.tokens, 7)
          assert.strictEqual(exit.value.resourceId, "w1")
          assert.strictEqual(exit.value.latencyMs, 40)
          assert.isString(exit.value.answer)
        }
        const stats = yield* pools.stats("apis")
        assert.strictEqual(stats.active, 0)
        assert.strictEqual(stats.okTotal, 1)
        assert.strictEqual(stats.failedTotal, 0)
        assert.deepStrictEqual(stats.usage, { tokens: 7 })
        const [snap] = yield* pools.snapshot("apis")
        assert.strictEqual(snap!.latencyEmaMs, 40)
      })))

  it.effect("failRate 1 always fails with the class, reports the failure and releases the lease", () =>
    withPools([workers("apis", 1)], (pools) =>
      Effect.gen(function*() {
        for (const seed of [0, 1, 2]) {
          const t = simulateLlm({ failRate: 1, latency: 0 })
          const e = failureOf((yield* attempt(t, null, { seed })).exit)
          assert.instanceOf(e, RetryableError)
          assert.strictEqual(classify(e), "rate_limit")
        }
        const upstream = failureOf((yield* attempt(simulateLlm({ failRate: 1, latency: 0, errorClass: "upstream" }), 0)).exit)
        assert.strictEqual(classify(upstream), "upstream")
        const stats = yield* pools.stats("apis")
        assert.strictEqual(stats.failedTotal, 4)
        assert.strictEqual(stats.okTotal, 0)
        assert.strictEqual(stats.active, 0)
        assert.deepStrictEqual(stats.usage, {})
      })))

  it.effect("failRate 0 never fails", () =>
    withPools([workers("apis", 1)], (pools) =>
      Effect.gen(function*() {
        const t = simulateLlm({ latency: 0, tokens: 2 })
        for (let seed = 0; seed < 100; seed++) {
          assert.isTrue(Exit.isSuccess((yield* attempt(t, seed, { seed })).exit))
        }
        const stats = yield* pools.stats("apis")
        assert.strictEqual(stats.okTotal, 100)
        assert.deepStrictEqual(stats.usage, { tokens: 200 })
      })))

  it.effect("the outcome is a pure function of the seed: same seed, same outcome; the rate is honoured", () =>
    withPools([workers("apis", 1)], () =>
      Effect.gen(function*() {
        const t = simulateLlm({ latency: 0, failRate: 0.3 })
        const outcomes = (seeds: ReadonlyArray<number>) =>
          Effect.forEach(seeds, (seed) => Effect.map(attempt(t, 0, { seed }), (r) => Exit.isFailure(r.exit)))
        const seeds = Array.from({ length: 400 }, (_, i) => i * 7919)
        const first = yield* outcomes(seeds)
        const second = yield* outcomes(seeds)
        assert.deepStrictEqual(first, second)
        for (let i = 0; i < seeds.length; i++) {
          assert.strictEqual(first[i], (yield* drawFor(seeds[i]!)) < 0.3)
        }
        const failures = first.filter(Boolean).length
        // 400 draws at p = 0.3: mean 120, standard deviation ~9.2; the band is about ±5σ
        assert.isAbove(failures, 75)
        assert.isBelow(failures, 165)
      })))

  it.effect("never exceeds the pool's capacity; waiters run as leases are released", () =>
    withPools([workers("apis", 2)], (pools) =>
      Effect.gen(function*() {
        const t = simulateLlm({ latency: "100 millis", tokens: 1 })
        const fibers = yield* Effect.forEach(
          [0, 1, 2, 3, 4],
          (i) => Effect.fork(attempt(t, i, { pipelineId: `p${i}`, seed: i })),
          { concurrency: "unbounded" }
        )
        yield* settle
        let s = yield* pools.stats("apis")
        assert.strictEqual(s.active, 2)
        assert.strictEqual(s.waiting, 3)
        yield* TestClock.adjust("100 millis")
        yield* settle
        s = yield* pools.stats("apis")
        assert.strictEqual(s.active, 2)
        assert.strictEqual(s.okTotal, 2)
        yield* TestClock.adjust("200 millis")
        const results = yield* Effect.forEach(fibers, (f) => Fiber.join(f))
        assert.isTrue(results.every((r) => Exit.isSuccess(r.exit)))
        s = yield* pools.stats("apis")
        assert.strictEqual(s.active, 0)
        assert.strictEqual(s.leasesTotal, 5)
        assert.deepStrictEqual(s.usage, { tokens: 5 })
      })))

  it.effect("honours the selector and the resource pool", () =>
    withPools([workers("other", 1, ["o1"]), workers("apis", 1, ["a1", "a2"])], () =>
      Effect.gen(function*() {
        const t = simulateLlm({ resource: "apis", selector: { id: "a2" }, latency: 0 })
        const { exit } = yield* attempt(t, 0)
        assert.isTrue(Exit.isSuccess(exit) && exit.value.resourceId === "a2")
        assert.deepStrictEqual(t.parameters["selector"], { id: "a2" })
      })))

  it.effect("an interrupted call gives its lease back", () =>
    withPools([workers("apis", 1)], (pools) =>
      Effect.gen(function*() {
        const fiber = yield* Effect.fork(attempt(simulateLlm({ latency: "10 seconds" }), 0))
        yield* settle
        assert.strictEqual((yield* pools.stats("apis")).active, 1)
        yield* Fiber.interrupt(fiber)
        assert.strictEqual((yield* pools.stats("apis")).active, 0)
      })))

  it("records its behaviour in parameters and validates it", () => {
    assert.deepStrictEqual(simulateLlm().parameters, {
      latencyMs: 5,
      failRate: 0,
      errorClass: "rate_limit",
      tokens: 32,
      selector: {}
    })
    assert.notStrictEqual(fp(simulateLlm({ failRate: 0.1 })), fp(simulateLlm({ failRate: 0.2 })))
    assert.notStrictEqual(fp(simulateLlm({ tokens: 1 })), fp(simulateLlm({ tokens: 2 })))
    assert.notStrictEqual(fp(simulateLlm({ resource: "a" })), fp(simulateLlm({ resource: "b" })))
    assert.strictEqual(simulateLlm({ name: "ask" }).name, "ask")
    const bad = configErrorOf(() => simulateLlm({ failRate: 1.5, tokens: -1, latency: "soon" as never }))
    assert.deepStrictEqual(bad.issues.map((i) => i.path), ["latency", "failRate", "tokens"])
    const typo = configErrorOf(() => simulateLlm({ failrate: 0.5 } as never))
    assert.deepStrictEqual(typo.issues.map((i) => i.path), ["failrate"])
    assert.deepStrictEqual(configErrorOf(() => delay(1, { pool: "x" } as never)).issues.map((i) => i.path), ["pool"])
    const where = configErrorOf(() => simulateLlm({ selector: { where: () => true } as never }))
    assert.deepStrictEqual(where.issues.map((i) => i.path), ["selector.where"])
  })
})
