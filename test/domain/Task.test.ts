import { assert, describe, it } from "@effect/vitest"
import { Context, Duration, Effect, Either, Exit, Fiber, Schema, Stream } from "effect"
import { ConfigError, FatalError } from "../../src/domain/Errors.js"
import { digest } from "../../src/domain/Json.js"
import { RetryPolicy } from "../../src/domain/RetryPolicy.js"
import * as Task from "../../src/domain/Task.js"
import type { TaskContext } from "../../src/domain/TaskContext.js"
import { unused } from "../support/unused.js"
import { pid, rid } from "../support/ids.js"

const ctx: TaskContext = {
  pipelineId: pid("p-1"),
  runId: rid("r-1"),
  taskName: "t",
  suiteId: null,
  experimentId: null,
  localKey: null,
  outputDir: null,
  variables: {},
  seq: 0,
  attempt: 2,
  visit: 0,
  seed: 7,
  meta: {},
  bus: unused("bus"),
  store: unused("store"),
  publishResource: () => Effect.dieMessage("no pools in this test"),
  revokeResource: () => Effect.dieMessage("no pools in this test"),
  subscribe: () => Stream.dieMessage("no pools in this test"),
  acquire: () => Effect.dieMessage("no pools in this test"),
  acquireLease: () => Effect.dieMessage("no pools in this test"),
  heldLeases: Effect.succeed([]),
  reclaimNow: Effect.void,
  emit: () => Effect.void,
  reportMetric: () => Effect.void
}

/** Runs a definition and returns the ConfigError it throws. */
const configErrorOf = (define: () => unknown): ConfigError => {
  const result = Task.tryDefine(define)
  assert.isTrue(Either.isLeft(result), "expected a definition error")
  const error = (result as Either.Left<ConfigError, unknown>).left
  assert.instanceOf(error, ConfigError)
  return error
}

const pathsOf = (e: ConfigError): Array<string> => e.issues.map((i) => i.path)

class Counter extends Context.Tag("test/Counter")<Counter, { readonly next: Effect.Effect<number> }>() {}

describe("Task constructors: run behaviour", () => {
  it.effect("make runs an Effect body with the input and the context, and its requirements flow to run", () =>
    Effect.gen(function*() {
      const t = Task.make("count", (s: string, c) => Effect.map(Counter, (n) => n).pipe(
        Effect.flatMap((counter) => counter.next),
        Effect.map((n) => `${s}:${n}:${c.attempt}`)
      ))
      const out = yield* t.run("x", ctx).pipe(Effect.provideService(Counter, { next: Effect.succeed(41) }))
      assert.strictEqual(out, "x:41:2")
      assert.strictEqual(t._tag, "Task")
      assert.strictEqual(t.name, "count")
    }))

  it.effect("make: a typed failure stays in the error channel", () =>
    Effect.gen(function*() {
      const t = Task.make("fails", (n: number) => n > 0 ? Effect.succeed(n) : Effect.fail("negative" as const))
      assert.deepStrictEqual(yield* Effect.either(t.run(-1, ctx)), Either.left("negative" as const))
      assert.deepStrictEqual(yield* Effect.either(t.run(3, ctx)), Either.right(3))
    }))

  it.effect("make: a synchronous throw before returning an Effect is a defect, not a JS exception", () =>
    Effect.gen(function*() {
      const t = Task.make("throws", (_: number): Effect.Effect<number> => {
        throw new Error("bug")
      })
      const exit = yield* Effect.exit(t.run(1, ctx))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) assert.strictEqual(exit.cause._tag, "Die")
    }))

  it.effect("sync: success, and a throw becomes a failure carrying the thrown value unchanged", () =>
    Effect.gen(function*() {
      const thrown = { status: 429, message: "slow down" }
      const t = Task.sync("parse", (s: string, c) => {
        if (s === "bad") throw thrown
        return { n: s.length, seq: c.seq }
      })
      assert.deepStrictEqual(yield* t.run("abc", ctx), { n: 3, seq: 0 })
      const failure = yield* Effect.flip(t.run("bad", ctx))
      assert.strictEqual(failure, thrown)
    }))

  it.effect("sync: returning a Promise by mistake is a FatalError", () =>
    Effect.gen(function*() {
      const t = Task.sync("oops", (n: number) => Promise.resolve(n) as unknown as number)
      const failure = yield* Effect.flip(t.run(1, ctx))
      assert.instanceOf(failure, FatalError)
      assert.include((failure as FatalError).message, "Task.promise")
    }))

  it.effect("promise: success, rejection and a synchronous throw become failures with the raw value", () =>
    Effect.gen(function*() {
      const rejection = new TypeError("fetch failed")
      const t = Task.promise("fetch", async (n: number, c) => {
        if (n < 0) throw rejection
        return n + c.attempt
      })
      assert.strictEqual(yield* t.run(1, ctx), 3)
      assert.strictEqual(yield* Effect.flip(t.run(-1, ctx)), rejection)
      const syncThrow = Task.promise("syncThrow", (_: number): Promise<number> => {
        throw "plain string"
      })
      assert.strictEqual(yield* Effect.flip(syncThrow.run(0, ctx)), "plain string")
    }))

  it.effect("promise: interrupting the attempt aborts the signal given to the function", () =>
    Effect.gen(function*() {
      let seen: AbortSignal | undefined
      let markStarted!: () => void
      const started = new Promise<void>((resolve) => {
        markStarted = resolve
      })
      const t = Task.promise("hang", (_: number, _ctx, signal) => {
        seen = signal
        markStarted()
        return new Promise<number>(() => {}) // never settles by itself
      })
      const fiber = yield* Effect.fork(t.run(1, ctx))
      yield* Effect.promise(() => started)
      assert.isFalse(seen!.aborted)
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.isTrue(seen!.aborted)
    }))

  it("input/output Schemas are kept on the task", () => {
    const Out = Schema.Struct({ label: Schema.Literal("spam", "ham") })
    const t = Task.sync("label", { input: Schema.String, output: Out }, (s) => ({ label: s === "x" ? "spam" : "ham" }))
    assert.strictEqual(t.inputSchema, Schema.String)
    assert.strictEqual(t.outputSchema, Out)
    assert.strictEqual(Task.outputSchemaOf(t), Out)
    assert.strictEqual(Task.inputSchemaOf(t), Schema.String)
    const plain = Task.sync("plain", (n: number) => n)
    assert.isUndefined(plain.inputSchema)
    assert.isUndefined(plain.outputSchema)
  })
})

describe("Task definition: options, snapshots, errors", () => {
  it("defaults: no resource, algorithm, timeout or version; one attempt; empty config, parameters, children", () => {
    const t = Task.sync("t", (n: number) => n)
    assert.deepStrictEqual(t.options.resource, null)
    assert.deepStrictEqual(t.options.algorithm, null)
    assert.deepStrictEqual(t.options.timeout, null)
    assert.deepStrictEqual(t.options.version, null)
    assert.strictEqual(t.options.retry, RetryPolicy.default)
    assert.deepStrictEqual(t.options.config, {})
    assert.deepStrictEqual(t.parameters, {})
    assert.deepStrictEqual(t.children, [])
  })

  it("resolves options: retry input into a RetryPolicy, timeout into a Duration", () => {
    const t = Task.sync("t", {
      resource: "llm",
      retry: { maxAttempts: 4, base: "250 millis" },
      timeout: "60 seconds",
      version: "prompt-v2"
    }, (n: number) => n)
    assert.instanceOf(t.options.retry, RetryPolicy)
    assert.strictEqual(t.options.retry.maxAttempts, 4)
    assert.strictEqual(Duration.toMillis(t.options.retry.base), 250)
    assert.strictEqual(Duration.toMillis(t.options.timeout!), 60_000)
    assert.strictEqual(t.options.resource, "llm")
    assert.strictEqual(t.options.version, "prompt-v2")
    const policy = RetryPolicy.make({ maxAttempts: 2 })
    assert.strictEqual(Task.sync("u", { retry: policy }, (n: number) => n).options.retry, policy)
  })

  it("codeDigest is the digest of the function source; a different body gives a different digest", () => {
    const f = (n: number) => n + 1
    const g = (n: number) => n + 2
    assert.strictEqual(Task.sync("t", f).codeDigest, digest(f.toString()))
    assert.notStrictEqual(Task.sync("t", f).codeDigest, Task.sync("t", g).codeDigest)
    assert.strictEqual(Task.sync("t", { codeDigest: "pinned" }, f).codeDigest, "pinned")
    // make and promise digest the user's function, not the wrapper
    const e = (n: number) => Effect.succeed(n)
    assert.strictEqual(Task.make("t", e).codeDigest, digest(e.toString()))
    const p = async (n: number) => n
    assert.strictEqual(Task.promise("t", p).codeDigest, digest(p.toString()))
  })

  it("config is snapshotted at definition: mutating the original afterwards changes nothing", () => {
    const config = { model: "m-a", sampling: { temperature: 0.2, stop: ["\n"] } }
    const t = Task.sync("t", { config, parameters: { k: [1, 2] } }, (n: number) => n)
    const before = Task.fingerprint(t)
    config.model = "m-b"
    config.sampling.temperature = 0.9
    config.sampling.stop.push("END")
    assert.deepStrictEqual(t.options.config, { model: "m-a", sampling: { temperature: 0.2, stop: ["\n"] } })
    assert.deepStrictEqual(Task.fingerprint(t), before)
    // and the snapshot itself is frozen
    assert.isTrue(Object.isFrozen(t.options.config))
    assert.isTrue(Object.isFrozen((t.options.config["sampling"] as { stop: unknown }).stop))
    assert.throws(() => {
      ;(t.options.config as Record<string, unknown>)["model"] = "m-c"
    })
  })

  it("a non-JSON config or parameters is a ConfigError naming each path", () => {
    const e = configErrorOf(() =>
      Task.sync("t", {
        config: { when: new Date(0) as unknown as string, ok: { xs: [1, 2] } },
        parameters: { f: (() => 1) as unknown as string }
      }, (n: number) => n)
    )
    assert.deepStrictEqual(pathsOf(e), ["config.when", "parameters.f"])
    assert.include(e.message, "task \"t\"")
    assert.include(e.message, "Date")
    const nan = configErrorOf(() => Task.sync("t", { config: { xs: [1, Number.NaN] } }, (n: number) => n))
    assert.deepStrictEqual(pathsOf(nan), ["config.xs[1]"])
    const arr = configErrorOf(() => Task.sync("t", { config: [1] as unknown as Task.JsonObject }, (n: number) => n))
    assert.deepStrictEqual(pathsOf(arr), ["config"])
  })

  it("reports every definition problem at once, each with its path", () => {
    const e = configErrorOf(() =>
      Task.sync("t", {
        timeout: "soon",
        retry: { maxAttempts: 0 },
        resource: "",
        bogus: 1
      } as unknown as Task.Options, (n: number) => n)
    )
    assert.sameMembers(pathsOf(e), ["bogus", "resource", "retry", "timeout"])
    assert.include(e.message, "maxAttempts")
  })

  it("refuses an empty name, a non-function body, unknown retry fields, and non-positive timeouts", () => {
    assert.deepStrictEqual(pathsOf(configErrorOf(() => Task.sync("", (n: number) => n))), ["name"])
    assert.deepStrictEqual(
      pathsOf(configErrorOf(() => Task.sync("t", 42 as unknown as (n: number) => number))),
      ["run"]
    )
    assert.deepStrictEqual(
      pathsOf(configErrorOf(() => Task.sync("t", { retry: { maxAtempts: 3 } as never }, (n: number) => n))),
      ["retry.maxAtempts"]
    )
    assert.deepStrictEqual(pathsOf(configErrorOf(() => Task.sync("t", { timeout: 0 }, (n: number) => n))), ["timeout"])
    assert.deepStrictEqual(
      pathsOf(configErrorOf(() => Task.sync("t", { timeout: Duration.infinity }, (n: number) => n))),
      ["timeout"]
    )
    assert.deepStrictEqual(
      pathsOf(configErrorOf(() => Task.sync("t", { input: 1 as never }, (n: number) => n))),
      ["input"]
    )
  })

  it("normalises the algorithm to strict JSON: a name and { name } have one identity", () => {
    const byName = Task.sync("t", { algorithm: "backoff" }, (n: number) => n)
    const byObject = Task.sync("t", { algorithm: { name: "backoff" } }, (n: number) => n)
    assert.deepStrictEqual(byName.options.algorithm, { name: "backoff" })
    assert.deepStrictEqual(Task.fingerprint(byName), Task.fingerprint(byObject))
    const options = { name: "backoff", cap: "60 seconds", steps: [1, 2] }
    const t = Task.sync("t", { algorithm: options }, (n: number) => n)
    options.steps.push(3)
    assert.deepStrictEqual(t.options.algorithm, { name: "backoff", cap: "60 seconds", steps: [1, 2] })
    assert.deepStrictEqual(
      pathsOf(configErrorOf(() => Task.sync("t", { algorithm: { name: "" } }, (n: number) => n))),
      ["algorithm.name"]
    )
    assert.deepStrictEqual(
      pathsOf(configErrorOf(() =>
        Task.sync("t", { algorithm: { name: "x", when: new Date() } as never }, (n: number) => n)
      )),
      ["algorithm.when"]
    )
  })

  it("a custom algorithm needs a fingerprint() or a task version", () => {
    const withFp = { _tag: "AcquireAlgorithm" as const, name: "mine", fingerprint: () => ({ k: 2 }) }
    const t = Task.sync("t", { algorithm: withFp }, (n: number) => n)
    assert.deepStrictEqual(t.options.algorithm, { name: "mine", fingerprint: { k: 2 } })
    assert.strictEqual(t.options.algorithmInstance, withFp)
    const bare = { _tag: "AcquireAlgorithm" as const, name: "bare" }
    const e = configErrorOf(() => Task.sync("t", { algorithm: bare }, (n: number) => n))
    assert.deepStrictEqual(pathsOf(e), ["algorithm"])
    assert.isDefined(e.issues[0]!.suggestion)
    const versioned = Task.sync("t", { algorithm: bare, version: "algo-1" }, (n: number) => n)
    assert.deepStrictEqual(versioned.options.algorithm, { name: "bare", custom: true })
    // clearing the version afterwards re-validates and refuses
    assert.deepStrictEqual(pathsOf(configErrorOf(() => Task.withOverrides(versioned, { version: null }))), ["algorithm"])
  })

  it("a custom algorithm's fingerprint is captured at definition and kept by overrides", () => {
    const state = { k: 1 }
    const algo = { _tag: "AcquireAlgorithm" as const, name: "mine", fingerprint: () => ({ k: state.k }) }
    const t = Task.sync("t", { algorithm: algo }, (n: number) => n)
    state.k = 2
    assert.deepStrictEqual(t.options.algorithm, { name: "mine", fingerprint: { k: 1 } })
    const o = Task.withOverrides(t, { version: "v9" })
    assert.deepStrictEqual(o.options.algorithm, { name: "mine", fingerprint: { k: 1 } })
    assert.strictEqual(o.options.algorithmInstance, algo)
    // giving the algorithm again re-captures it
    assert.deepStrictEqual(Task.withOverrides(t, { algorithm: algo }).options.algorithm, {
      name: "mine",
      fingerprint: { k: 2 }
    })
  })

  it("children must be tasks", () => {
    const e = configErrorOf(() =>
      Task.sync("t", { children: [Task.sync("c", (n: number) => n), "x" as never] }, (n: number) => n)
    )
    assert.deepStrictEqual(pathsOf(e), ["children[1]"])
  })

  it("tryDefine returns a Left for definition errors and rethrows anything else", () => {
    assert.isTrue(Either.isRight(Task.tryDefine(() => Task.sync("t", (n: number) => n))))
    assert.throws(() =>
      Task.tryDefine(() => {
        throw new RangeError("a bug")
      }), RangeError)
  })
})

describe("Task.fingerprint", () => {
  const body = (n: number) => n
  const full = Task.sync("ask", {
    resource: "llm",
    algorithm: { name: "backoff", cap: "60 seconds" },
    retry: { maxAttempts: 4, base: "500 millis", factor: 3, cap: "20 seconds", jitter: "equal", on: ["X"] },
    timeout: "90 seconds",
    config: { model: "m" },
    version: "v2",
    parameters: { k: 1 },
    children: [Task.sync("child", { codeDigest: "c0de" }, (s: string) => s)],
    codeDigest: "abc"
  }, body)

  it("covers name, resource, timeout (ms), retry timing fields, algorithm, config, version, parameters, children, code", () => {
    assert.deepStrictEqual(Task.fingerprint(full), {
      name: "ask",
      resource: "llm",
      timeoutMs: 90_000,
      retry: { maxAttempts: 4, baseMs: 500, factor: 3, capMs: 20_000, jitter: "equal" },
      algorithm: { name: "backoff", cap: "60 seconds" },
      config: { model: "m" },
      version: "v2",
      parameters: { k: 1 },
      children: [{
        name: "child",
        resource: null,
        timeoutMs: null,
        retry: { maxAttempts: 1, baseMs: 500, factor: 2, capMs: 30_000, jitter: "full" },
        algorithm: null,
        config: {},
        version: null,
        parameters: {},
        children: [],
        codeDigest: "c0de"
      }],
      codeDigest: "abc"
    })
  })

  it("includeCode: false drops the code digest recursively", () => {
    const fp = Task.fingerprint(full, { includeCode: false }) as Record<string, unknown>
    assert.isFalse("codeDigest" in fp)
    assert.isFalse("codeDigest" in (fp["children"] as Array<Record<string, unknown>>)[0]!)
  })
})

describe("Task.withOverrides", () => {
  const base = Task.sync("ask", {
    resource: "llm",
    algorithm: "backoff",
    retry: { maxAttempts: 3 },
    timeout: "10 seconds",
    config: { model: "a" },
    version: "v1",
    parameters: { p: 1 }
  }, (n: number) => n * 2)

  it("an absent key keeps the current value", () => {
    const t = Task.withOverrides(base, { resource: "gpu" })
    assert.strictEqual(t.options.resource, "gpu")
    assert.deepStrictEqual(t.options.algorithm, { name: "backoff" })
    assert.strictEqual(t.options.retry, base.options.retry)
    assert.strictEqual(Duration.toMillis(t.options.timeout!), 10_000)
    assert.deepStrictEqual(t.options.config, { model: "a" })
    assert.strictEqual(t.options.version, "v1")
    assert.deepStrictEqual(t.parameters, { p: 1 })
    assert.strictEqual(t.codeDigest, base.codeDigest)
    assert.strictEqual(t.name, "ask")
    // undefined is "absent" too
    assert.strictEqual(Task.withOverrides(base, { resource: undefined } as never).options.resource, "llm")
  })

  it("an explicit null clears each nullable field", () => {
    const t = Task.withOverrides(base, { resource: null, algorithm: null, timeout: null, version: null })
    assert.strictEqual(t.options.resource, null)
    assert.strictEqual(t.options.algorithm, null)
    assert.strictEqual(t.options.timeout, null)
    assert.strictEqual(t.options.version, null)
    const fp = Task.fingerprint(t) as Record<string, unknown>
    assert.strictEqual(fp["resource"], null)
    assert.strictEqual(fp["timeoutMs"], null)
  })

  it("UNSET means not given even when the key is present (a builder forwarding a full dict)", () => {
    const forwarded: Task.Overrides = {
      name: Task.UNSET,
      resource: Task.UNSET,
      algorithm: Task.UNSET,
      retry: Task.UNSET,
      timeout: Task.UNSET,
      config: Task.UNSET,
      version: "v2",
      parameters: Task.UNSET,
      children: Task.UNSET,
      run: Task.UNSET,
      codeDigest: Task.UNSET
    }
    const t = Task.withOverrides(base, forwarded)
    assert.strictEqual(t.options.version, "v2")
    const expected = { ...(Task.fingerprint(base) as Record<string, unknown>), version: "v2" }
    assert.deepStrictEqual(Task.fingerprint(t), expected)
  })

  it("null for a non-nullable field is a ConfigError, with the way to clear it", () => {
    for (const key of ["name", "retry", "config", "parameters", "children", "run", "codeDigest"]) {
      const e = configErrorOf(() => Task.withOverrides(base, { [key]: null } as never))
      assert.deepStrictEqual(pathsOf(e), [key], key)
    }
    assert.include(configErrorOf(() => Task.withOverrides(base, { config: null } as never)).message, "{}")
    assert.include(configErrorOf(() => Task.withOverrides(base, { children: null } as never)).message, "[]")
    assert.deepStrictEqual(pathsOf(configErrorOf(() => Task.withOverrides(base, { tiemout: 1 } as never))), ["tiemout"])
  })

  it("clearing config, parameters and children uses {} and []", () => {
    const withChild = Task.withOverrides(base, { children: [base] })
    assert.strictEqual(withChild.children.length, 1)
    const t = Task.withOverrides(withChild, { config: {}, parameters: {}, children: [] })
    assert.deepStrictEqual(t.options.config, {})
    assert.deepStrictEqual(t.parameters, {})
    assert.deepStrictEqual(t.children, [])
  })

  it.effect("returns a new task and never mutates the original; a new run gets its own digest", () =>
    Effect.gen(function*() {
      const before = Task.fingerprint(base)
      const run = (n: number) => Effect.succeed(n * 3)
      const t = Task.withOverrides(base, { run, config: { model: "b" } })
      assert.notStrictEqual(t, base)
      assert.deepStrictEqual(Task.fingerprint(base), before)
      assert.deepStrictEqual(base.options.config, { model: "a" })
      assert.strictEqual(yield* t.run(2, ctx), 6)
      assert.strictEqual(yield* base.run(2, ctx), 4)
      assert.strictEqual(t.codeDigest, digest(run.toString()))
      assert.strictEqual(Task.withOverrides(base, { run, codeDigest: "fixed" }).codeDigest, "fixed")
      // invalid values are validated like at definition
      assert.deepStrictEqual(pathsOf(configErrorOf(() => Task.withOverrides(base, { timeout: "later" as never }))), ["timeout"])
    }))

  it("keeps the Schemas and the type (also in pipe form)", () => {
    const s = Task.sync("s", { input: Schema.Number }, (n) => n)
    const t = s.pipe(Task.withOverrides({ version: "x" }))
    assert.strictEqual(t.inputSchema, Schema.Number)
    assert.strictEqual(t.options.version, "x")
  })

  it("withRetry replaces the policy (defaults for fields not given)", () => {
    const t = Task.withRetry(base, { maxAttempts: 6, cap: "60 seconds" })
    assert.strictEqual(t.options.retry.maxAttempts, 6)
    assert.strictEqual(Duration.toMillis(t.options.retry.cap), 60_000)
    assert.strictEqual(Duration.toMillis(t.options.retry.base), 500)
    assert.strictEqual(base.options.retry.maxAttempts, 3)
    const piped = base.pipe(Task.withRetry(RetryPolicy.make({ maxAttempts: 2 })))
    assert.strictEqual(piped.options.retry.maxAttempts, 2)
    assert.deepStrictEqual(pathsOf(configErrorOf(() => Task.withRetry(base, { maxAttempts: 0 }))), ["retry"])
  })
})

describe("Task.describe", () => {
  it("summarises the resolved options as JSON", () => {
    const t = Task.sync("t", {
      resource: "llm",
      retry: { maxAttempts: 2 },
      timeout: 1500,
      output: Schema.Number,
      codeDigest: "d"
    }, (n: number) => n)
    assert.deepStrictEqual(Task.describe(t), {
      name: "t",
      resource: "llm",
      algorithm: null,
      retry: {
        maxAttempts: 2,
        on: [],
        retryClassified: true,
        retryUnknown: false,
        base: "500 millis",
        factor: 2,
        cap: "30000 millis",
        jitter: "full"
      },
      timeoutMs: 1500,
      config: {},
      version: null,
      parameters: {},
      codeDigest: "d",
      inputSchema: false,
      outputSchema: true,
      children: []
    })
  })
})
