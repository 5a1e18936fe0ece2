/**
 * Issue 12 §7: the run config is declared once (`RunConfig.fieldsWith`); the file's `run`
 * section, the code's `RunConfigInput` (the runner's `RunOptions`) and the resolved
 * `RunConfig` are derived from that one declaration, and `resolve` validates with it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Either, ParseResult, Schema } from "effect"
import * as Config from "../../src/config/Config.js"
import * as CallCache from "../../src/domain/CallCache.js"
import * as RunConfig from "../../src/domain/RunConfig.js"

const fieldNames = Object.keys(RunConfig.fieldsWith(RunConfig.DurationFromInput)).sort()

const keysOf = (schema: Schema.Schema.Any): Array<string> => {
  const ast = schema.ast
  assert.strictEqual(ast._tag, "TypeLiteral")
  return (ast as { propertySignatures: ReadonlyArray<{ name: PropertyKey }> }).propertySignatures.map((p) => String(p.name))
    .sort()
}

describe("RunConfig: one Schema", () => {
  it("the file's run section, the code input and the resolved config have exactly the declared fields", () => {
    assert.isAbove(fieldNames.length, 20)
    // `pricing` is the experiment file's top-level table, not a `run` field
    assert.deepStrictEqual(keysOf(RunConfig.RunSection), fieldNames.filter((f) => f !== "pricing"))
    assert.deepStrictEqual(keysOf(RunConfig.RunConfigInput), fieldNames)
    assert.strictEqual(Config.RunSection, RunConfig.RunSection, "the experiment Schema uses the same section")
    const resolved = Either.getOrThrow(RunConfig.resolve({}))
    assert.deepStrictEqual(Object.keys(resolved).sort(), fieldNames)
  })

  it("defaults: 16 workers, 4 × concurrency admitted, 5 s heartbeat, write-behind of 128 every second", () => {
    const c = Either.getOrThrow(RunConfig.resolve({ concurrency: 3 }))
    assert.strictEqual(c.maxAdmitted, 12)
    assert.strictEqual(c.journal, "full")
    assert.strictEqual(c.store, ":memory:")
    assert.isTrue(Duration.equals(c.heartbeat, Duration.seconds(5)))
    assert.isTrue(Duration.equals(c.staleAfter, Duration.seconds(30)))
    assert.strictEqual(c.writeBatch, 128)
    assert.isTrue(Duration.equals(c.flushInterval, Duration.seconds(1)))
    assert.isUndefined(c.stopAfter)
    assert.isUndefined(c.runId)
    assert.strictEqual(Either.getOrThrow(RunConfig.resolve()).concurrency, 16)
  })

  it("code durations are DurationInput (ms, strings, Duration values); undefined means not set", () => {
    const c = Either.getOrThrow(RunConfig.resolve({
      heartbeat: 250,
      grace: "2 seconds",
      stopAfter: Duration.minutes(1),
      label: undefined
    }))
    assert.strictEqual(Duration.toMillis(c.heartbeat), 250)
    assert.strictEqual(Duration.toMillis(c.grace), 2000)
    assert.strictEqual(Duration.toMillis(c.stopAfter!), 60_000)
    assert.strictEqual(c.label, "")
  })

  it("every bad field is reported at once with its run.<field> path", () => {
    const r = RunConfig.resolve({
      concurrency: 0,
      writeBatch: 1.5,
      journal: "ful" as RunConfig.Journal,
      heartbeat: Duration.infinity,
      stopAfter: "soon" as Duration.DurationInput
    })
    assert.isTrue(Either.isLeft(r))
    const issues = Either.isLeft(r) ? r.left.issues : []
    assert.deepStrictEqual(issues.map((i) => i.path).sort(), [
      "run.concurrency",
      "run.heartbeat",
      "run.journal",
      "run.stopAfter",
      "run.writeBatch"
    ])
    const byPath = new Map(issues.map((i) => [i.path, i.message]))
    assert.strictEqual(byPath.get("run.concurrency"), "must be an integer >= 1")
    assert.strictEqual(byPath.get("run.journal"), "expected \"full\" or \"summary\", got \"ful\"")
    assert.include(byPath.get("run.heartbeat"), "must be a finite duration")
    assert.include(byPath.get("run.stopAfter"), "\"soon\"")
    assert.include(Either.isLeft(r) ? r.left.message : "", "invalid run configuration: ")
  })

  it("a negative duration is refused, not clamped to 0; a period or deadline of 0 is refused (file and code)", () => {
    const code = RunConfig.resolve({ heartbeat: "0 millis", flushInterval: "-5 seconds", grace: -5, stopAfter: 0, staleAfter: "-3 seconds" })
    const issues = Either.isLeft(code) ? code.left.issues : []
    const byPath = new Map(issues.map((i) => [i.path, i.message]))
    assert.strictEqual(byPath.get("run.heartbeat"), "must be longer than 0")
    assert.strictEqual(byPath.get("run.stopAfter"), "must be longer than 0")
    assert.include(byPath.get("run.flushInterval"), "is negative")
    assert.include(byPath.get("run.grace"), "is negative")
    assert.include(byPath.get("run.staleAfter"), "is negative")
    const file = Schema.decodeUnknownEither(RunConfig.RunSection)({ grace: "-1 seconds", heartbeat: "0 seconds" })
    assert.isTrue(Either.isLeft(file))
    // 0 stays a valid grace (stop at once)
    assert.isTrue(Either.isRight(RunConfig.resolve({ grace: 0 })))
  })

  it("a bad TTL has one wording wherever it is given: a config's run.cache.ttl, a task's cache.ttl (issue 18: three wordings)", () => {
    const expected = (got: string) => `must be a positive duration such as "7 days", got ${JSON.stringify(got)}`
    for (const ttl of ["-5 seconds", "0 seconds", "soon"]) {
      // the file form (what a config's run section decodes with) and the code form
      const file = Schema.decodeUnknownEither(RunConfig.RunSection, { errors: "all" })({ cache: { ttl } })
      assert.isTrue(Either.isLeft(file), ttl)
      const issues = Either.isLeft(file) ? ParseResult.ArrayFormatter.formatErrorSync(file.left) : []
      assert.strictEqual(issues.find((i) => i.path.join(".") === "cache.ttl")?.message, expected(ttl), ttl)
      const code = RunConfig.resolve({ cache: { ttl } })
      assert.isTrue(Either.isLeft(code) && code.left.issues.some((i) => i.path === "run.cache.ttl" && i.message.startsWith(expected(ttl))), ttl)
      const task: Array<{ path: string; message: string }> = []
      CallCache.resolveTaskCache({ ttl }, "cache", task)
      assert.deepStrictEqual(task.map((i) => [i.path, i.message]), [["cache.ttl", expected(ttl)]], ttl)
    }
  })

  it("the file form refuses a bare number for a duration; the code form takes it as milliseconds", () => {
    const file = Schema.decodeUnknownEither(RunConfig.RunSection)({ heartbeat: 5 })
    assert.isTrue(Either.isLeft(file))
    const fromFile = Schema.decodeUnknownEither(RunConfig.RunSection)({ heartbeat: "5 seconds", concurrency: 2 })
    assert.isTrue(Either.isRight(fromFile))
    // what the loader hands to resolve (durations already decoded) resolves unchanged
    const c = Either.getOrThrow(RunConfig.resolve(Either.getOrThrow(fromFile)))
    assert.strictEqual(Duration.toMillis(c.heartbeat), 5000)
    assert.strictEqual(c.concurrency, 2)
  })

  it("keys that are not run config fields (the runner's own options) are ignored", () => {
    const input: RunConfig.RunConfigInput & { readonly registry: unknown } = { concurrency: 2, registry: {} }
    const c = Either.getOrThrow(RunConfig.resolve(input))
    assert.notProperty(c, "registry")
  })
})

describe("RunConfig.toJson (what a run row stores)", () => {
  it("never stores a store URL's user or password; a file path is kept as given", () => {
    const url = Either.getOrThrow(RunConfig.resolve({ store: "postgres://assay:s3cret@db.internal:5432/qa" }))
    assert.strictEqual(RunConfig.toJson(url)["store"], "postgres://***:***@db.internal:5432/qa")
    assert.notInclude(JSON.stringify(RunConfig.toJson(url)), "s3cret")
    const file = Either.getOrThrow(RunConfig.resolve({ store: "runs/qa.db" }))
    assert.strictEqual(RunConfig.toJson(file)["store"], "runs/qa.db")
  })
})

describe("RunConfig.maxHandoffs (issue 13)", () => {
  it("defaults to 1000 and is recorded on the run", () => {
    assert.strictEqual(Either.getOrThrow(RunConfig.resolve()).maxHandoffs, 1000)
    const c = Either.getOrThrow(RunConfig.resolve({ maxHandoffs: 5 }))
    assert.strictEqual(c.maxHandoffs, 5)
    assert.strictEqual(RunConfig.toJson(c)["maxHandoffs"], 5)
  })

  it("is a positive integer: 0, negatives, fractions, booleans and strings are refused at run.maxHandoffs", () => {
    for (const bad of [0, -1, 2.5, true, "3", Number.POSITIVE_INFINITY]) {
      const r = RunConfig.resolve({ maxHandoffs: bad as number })
      assert.isTrue(Either.isLeft(r), String(bad))
      const issues = Either.isLeft(r) ? r.left.issues : []
      assert.deepStrictEqual(issues.map((i) => i.path), ["run.maxHandoffs"])
      assert.match(issues[0]!.message, /integer|Expected number/)
    }
  })
})
