import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Schema, Stream } from "effect"
import { createHash } from "node:crypto"
import { PipelineBuildError } from "../../src/domain/Errors.js"
import type { RetryPolicyInput } from "../../src/domain/RetryPolicy.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as SpecStream from "../../src/domain/internal/specStream.js"
import * as Task from "../../src/domain/Task.js"

const blake = (s: string) => createHash("blake2b512").update(Buffer.from(s, "utf8")).digest("hex").slice(0, 32)

// A definition whose identity does not depend on how the test file is transpiled: code digests
// are pinned with the `codeDigest` option.
const prepare = Task.sync("prepare", { codeDigest: "code-prepare" }, (s: { q: string }) => ({ prompt: s.q }))
const ask = Task.make(
  "ask",
  { resource: "llm", retry: { maxAttempts: 4 }, timeout: "60 seconds", codeDigest: "code-ask" },
  (r: { prompt: string }) => Effect.succeed(r.prompt.length)
)
const golden = Pipeline.make("golden", prepare, ask)

/** A one-task pipeline over `options`, for comparing spec digests. */
const digestWith = (options: Task.Options, body: (n: number) => number = (n) => n, includeCode = true) =>
  Pipeline.make("p", { includeCode }, Task.sync("t", options, body)).specDigest

const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (e) {
    return e
  }
  assert.fail("expected a throw")
}

describe("identity: golden vectors", () => {
  it("the spec digest is the digest of the canonical fingerprints with the format marker", () => {
    const fp = (name: string, extra: string, code: string) =>
      `{"algorithm":null,"children":[],"codeDigest":"${code}","config":{},"name":"${name}","parameters":{},` +
      `${extra}"timeoutMs":`
    const canonical = `{"format":"assay.spec/v1","tasks":[` +
      fp("prepare", `"resource":null,"retry":{"baseMs":500,"capMs":30000,"factor":2,"jitter":"full","maxAttempts":1},`, "code-prepare") +
      `null,"version":null},` +
      fp("ask", `"resource":"llm","retry":{"baseMs":500,"capMs":30000,"factor":2,"jitter":"full","maxAttempts":4},`, "code-ask") +
      `60000,"version":null}]}`
    assert.strictEqual(golden.specDigest, blake(canonical))
    assert.strictEqual(golden.specDigest, "0d82a5ae0db34b1cf564065a15017b73")
    assert.strictEqual(Pipeline.computeSpecDigest(golden.tasks), golden.specDigest)
  })

  it("same definition + same seed gives the same, pinned id", () => {
    const spec = golden.bind({ q: "2+2" })
    assert.strictEqual(spec.seedDigest, blake(`{"q":"2+2"}`))
    assert.strictEqual(spec.seedDigest, "ab5496d20a51443237aafb36d2dc0b40")
    assert.strictEqual(
      spec.pipelineId,
      blake(`["0d82a5ae0db34b1cf564065a15017b73","ab5496d20a51443237aafb36d2dc0b40",0]`)
    )
    assert.strictEqual(spec.pipelineId, "40c4bcb35944370fbd3f8a0a24c936f2")
    assert.strictEqual(golden.bind({ q: "2+2" }, { repeat: 1 }).pipelineId, "696bb248a7ff3ac70cc1f36c317bb920")
    assert.strictEqual(
      Pipeline.make("golden", { includeCode: false }, prepare, ask).specDigest,
      "a0b1995b2dc7b14eb62bfe499b634fe0"
    )
    // a template rebuilt from scratch (fresh task values, same definition) gives the same id
    const again = Pipeline.make(
      "golden",
      Task.sync("prepare", { codeDigest: "code-prepare" }, (s: { q: string }) => ({ prompt: s.q })),
      Task.make(
        "ask",
        { resource: "llm", retry: { maxAttempts: 4 }, timeout: 60_000, codeDigest: "code-ask" },
        (r: { prompt: string }) => Effect.succeed(r.prompt.length)
      )
    )
    assert.strictEqual(again.bind({ q: "2+2" }).pipelineId, spec.pipelineId)
  })

  it("the default id is the digest of [specDigest, seedDigest, repeat]", () => {
    const spec = golden.bind({ q: "x" }, { repeat: 2 })
    assert.strictEqual(spec.pipelineId, Pipeline.defaultPipelineId(golden.specDigest, spec.seedDigest, 2))
    assert.strictEqual(spec.key, spec.pipelineId)
    assert.isFalse(spec.explicitKey)
    assert.strictEqual(spec.specDigest, golden.specDigest)
    assert.strictEqual(spec.seedJson, `{"q":"x"}`)
    assert.strictEqual(spec.template, golden)
    assert.strictEqual(spec.template.nTasks, 2)
  })
})

describe("identity: what changes the id", () => {
  it("the task body changes the id with includeCode (default), not without", () => {
    const f = (n: number) => n + 1
    const g = (n: number) => n + 2
    assert.notStrictEqual(digestWith({}, f), digestWith({}, g))
    assert.strictEqual(digestWith({}, f, false), digestWith({}, g, false))
    // and the same body source gives the same digest
    assert.strictEqual(digestWith({}, (n) => n * 7), digestWith({}, (n) => n * 7))
  })

  it("each retry timing field changes the id; on, retryUnknown, retryClassified and maxTotal do not", () => {
    const base = digestWith({ retry: {} })
    for (
      const retry of [{ maxAttempts: 2 }, { base: "1 second" }, { factor: 3 }, { cap: "10 seconds" }, {
        jitter: "none"
      }] satisfies Array<RetryPolicyInput>
    ) {
      assert.notStrictEqual(digestWith({ retry }), base, JSON.stringify(retry))
    }
    for (
      const retry of [{ on: ["RetryableError"] }, { retryUnknown: true }, { retryClassified: false }, {
        maxTotal: "2 minutes"
      }] satisfies Array<RetryPolicyInput>
    ) {
      assert.strictEqual(digestWith({ retry }), base, JSON.stringify(retry))
    }
  })

  it("timeout, resource, config, version, parameters and algorithm change the id", () => {
    const base = digestWith({})
    const variants: Array<Task.Options> = [
      { timeout: "5 seconds" },
      { resource: "gpu" },
      { config: { model: "a" } },
      { version: "v2" },
      { parameters: { k: 3 } },
      { algorithm: "backoff" },
      { algorithm: { name: "backoff", cap: "1 minute" } }
    ]
    const digests = variants.map((v) => digestWith(v))
    for (const d of digests) assert.notStrictEqual(d, base)
    assert.strictEqual(new Set(digests).size, variants.length)
    // config and parameters are recorded apart: the same object in each gives different ids
    assert.notStrictEqual(digestWith({ config: { k: 3 } }), digestWith({ parameters: { k: 3 } }))
    // a timeout written two ways is one identity
    assert.strictEqual(digestWith({ timeout: "5 seconds" }), digestWith({ timeout: 5000 }))
  })

  it("nested children affect the parent's fingerprint, code included only with includeCode", () => {
    const child = (k: number, body: (s: string) => string) => Task.sync("branch", { config: { k } }, body)
    const parent = (c: Task.Any, includeCode = true) =>
      Pipeline.make("p", { includeCode }, Task.sync("fanout", { children: [c], codeDigest: "fan" }, (s: string) => s))
        .specDigest
    const a = (s: string) => s + "a"
    const b = (s: string) => s + "b"
    assert.notStrictEqual(parent(child(1, a)), parent(child(2, a)))
    assert.notStrictEqual(parent(child(1, a)), parent(child(1, b)))
    assert.strictEqual(parent(child(1, a), false), parent(child(1, b), false))
    assert.notStrictEqual(parent(child(1, a), false), parent(child(2, a), false))
    // children order matters
    const two = (x: Task.Any, y: Task.Any) =>
      Pipeline.make("p", Task.sync("fanout", { children: [x, y], codeDigest: "fan" }, (s: string) => s)).specDigest
    assert.notStrictEqual(two(child(1, a), child(2, a)), two(child(2, a), child(1, a)))
  })

  it("repeat changes the id", () => {
    const ids = [0, 1, 2].map((repeat) => golden.bind({ q: "x" }, { repeat }).pipelineId)
    assert.strictEqual(new Set(ids).size, 3)
  })

  it("seeds equal up to key order have one id; different seeds differ", () => {
    const anySeed = Pipeline.make("any", Task.sync("t", { codeDigest: "t" }, (u: unknown) => u))
    const a = anySeed.bind({ q: "x", meta: { a: 1, b: [1, 2] } })
    const b = anySeed.bind({ meta: { b: [1, 2], a: 1 }, q: "x" })
    assert.strictEqual(a.pipelineId, b.pipelineId)
    assert.strictEqual(a.seedDigest, b.seedDigest)
    assert.notStrictEqual(anySeed.bind({ q: "x", meta: { a: 2, b: [1, 2] } }).pipelineId, a.pipelineId)
    assert.notStrictEqual(anySeed.bind({ q: "x", meta: { a: 1, b: [2, 1] } }).pipelineId, a.pipelineId)
  })

  it("the pipeline name and tags are not part of the identity", () => {
    const other = Pipeline.make("renamed", { tags: { bench: "mmlu" } }, prepare, ask)
    assert.strictEqual(other.specDigest, golden.specDigest)
    assert.strictEqual(other.bind({ q: "1" }).pipelineId, golden.bind({ q: "1" }).pipelineId)
  })

  it("withRetry on a task changes the spec digest", () => {
    const careful = Task.withRetry(ask, { maxAttempts: 6, cap: "60 seconds" })
    assert.notStrictEqual(Pipeline.make("g", prepare, careful).specDigest, golden.specDigest)
  })
})

describe("bind and keys", () => {
  it("an explicit key is the id as given", () => {
    const spec = golden.bind({ q: "x" }, { key: "row-17", repeat: 3 })
    assert.strictEqual(spec.pipelineId, "row-17")
    assert.strictEqual(spec.key, "row-17")
    assert.isTrue(spec.explicitKey)
    assert.strictEqual(spec.repeat, 3)
    assert.strictEqual(spec.seedDigest, golden.bind({ q: "x" }).seedDigest)
  })

  it("a non-JSON seed, an empty key or a bad repeat throws a SeedError", () => {
    const template = Pipeline.make("p", Task.sync("t", (u: unknown) => u))
    const e = thrown(() => template.bind({ at: new Date(0) }))
    assert.instanceOf(e, Pipeline.SeedError)
    assert.include((e as Pipeline.SeedError).message, "$.at")
    assert.include((e as Pipeline.SeedError).message, "Date")
    assert.instanceOf(thrown(() => template.bind({ n: 1 }, { key: "" })), Pipeline.SeedError)
    assert.instanceOf(thrown(() => template.bind({ n: 1 }, { repeat: -1 })), Pipeline.SeedError)
    assert.instanceOf(thrown(() => template.bind({ n: 1 }, { repeat: 1.5 })), Pipeline.SeedError)
  })
})

describe("map", () => {
  const echo = Pipeline.make("echo", Task.sync("echo", (u: { i: number }) => u))

  it.effect("is lazy over a generator: nothing is read before the stream runs, and only what is taken", () =>
    Effect.gen(function*() {
      let pulled = 0
      let closed = false
      function* tenMillionLines() {
        try {
          for (let i = 0; i < 10_000_000; i++) {
            pulled++
            yield { i }
          }
        } finally {
          closed = true
        }
      }
      const specs = echo.map(tenMillionLines(), { chunkSize: 1 })
      assert.strictEqual(pulled, 0)
      const taken = yield* Stream.runCollect(Stream.take(specs, 3))
      assert.deepStrictEqual(Chunk.toArray(taken).map((s) => s.seed), [{ i: 0 }, { i: 1 }, { i: 2 }])
      assert.strictEqual(pulled, 3)
      assert.isTrue(closed, "the generator is closed when the stream stops early")
    }))

  it.effect("with the default chunk size it reads at most one chunk ahead", () =>
    Effect.gen(function*() {
      let pulled = 0
      function* lines() {
        for (let i = 0; i < 10_000_000; i++) {
          pulled++
          yield { i }
        }
      }
      const taken = yield* Stream.runCollect(Stream.take(echo.map(lines()), 5))
      assert.strictEqual(Chunk.size(taken), 5)
      assert.isAtMost(pulled, 16)
    }))

  it.effect("is lazy over an AsyncIterable and closes it when stopped early", () =>
    Effect.gen(function*() {
      let pulled = 0
      let closed = false
      async function* remote() {
        try {
          for (let i = 0; i < 10_000_000; i++) {
            pulled++
            yield { i }
          }
        } finally {
          closed = true
        }
      }
      const specs = echo.map(remote())
      assert.strictEqual(pulled, 0)
      const taken = yield* Stream.runCollect(Stream.take(specs, 4))
      assert.deepStrictEqual(Chunk.toArray(taken).map((s) => s.seed.i), [0, 1, 2, 3])
      assert.isAtMost(pulled, 5)
      assert.isTrue(closed)
    }))

  it.effect("maps a Stream of seeds, each repeated `repeats` times in seed order", () =>
    Effect.gen(function*() {
      const specs = Chunk.toArray(
        yield* Stream.runCollect(echo.map(Stream.make({ i: 1 }, { i: 2 }), { repeats: 3 }))
      )
      assert.deepStrictEqual(specs.map((s) => [s.seed.i, s.repeat]), [[1, 0], [1, 1], [1, 2], [2, 0], [2, 1], [2, 2]])
      assert.strictEqual(new Set(specs.map((s) => s.pipelineId)).size, 6)
      for (const s of specs) {
        assert.strictEqual(s.pipelineId, echo.bind(s.seed, { repeat: s.repeat }).pipelineId)
        assert.isFalse(s.explicitKey)
      }
    }))

  it.effect("keyOf gives the user's key, suffixed #repeat only when repeats > 1", () =>
    Effect.gen(function*() {
      const keyOf = (s: { i: number }) => `q${s.i}`
      const one = Chunk.toArray(yield* Stream.runCollect(echo.map([{ i: 1 }, { i: 2 }], { keyOf })))
      assert.deepStrictEqual(one.map((s) => s.pipelineId), ["q1", "q2"])
      assert.isTrue(one.every((s) => s.explicitKey && s.key === s.pipelineId))
      const many = Chunk.toArray(yield* Stream.runCollect(echo.map([{ i: 1 }], { keyOf, repeats: 2 })))
      assert.deepStrictEqual(many.map((s) => s.pipelineId), ["q1#0", "q1#1"])
      assert.deepStrictEqual(many.map((s) => s.repeat), [0, 1])
    }))

  it.effect("a non-JSON seed fails the stream with a SeedError carrying its index", () =>
    Effect.gen(function*() {
      const seeds = [{ i: 0 }, { i: 1 }, { i: Number.POSITIVE_INFINITY }]
      const error = yield* Stream.runCollect(echo.map(seeds)).pipe(Effect.flip)
      assert.instanceOf(error, Pipeline.SeedError)
      assert.strictEqual(error.index, 2)
      assert.include(error.message, "$.i")
    }))

  it.effect("a failing source, a throwing keyOf or an empty key are SeedErrors", () =>
    Effect.gen(function*() {
      function* broken() {
        yield { i: 0 }
        throw new Error("disk gone")
      }
      const e1 = yield* Stream.runCollect(echo.map(broken(), { chunkSize: 1 })).pipe(Effect.flip)
      assert.instanceOf(e1, Pipeline.SeedError)
      assert.include(e1.message, "disk gone")
      async function* brokenAsync() {
        yield { i: 0 }
        throw new Error("socket gone")
      }
      const e2 = yield* Stream.runCollect(echo.map(brokenAsync())).pipe(Effect.flip)
      assert.include(e2.message, "socket gone")
      const e3 = yield* Stream.runCollect(echo.map([{ i: 0 }], {
        keyOf: () => {
          throw new Error("no id column")
        }
      })).pipe(Effect.flip)
      assert.include(e3.message, "no id column")
      assert.strictEqual(e3.index, 0)
      const e4 = yield* Stream.runCollect(echo.map([{ i: 0 }], { keyOf: () => "" })).pipe(Effect.flip)
      assert.instanceOf(e4, Pipeline.SeedError)
    }))

  it.effect("read ahead for the runner: the same specs from a map stream, nothing for a stream made from it", () =>
    Effect.gen(function*() {
      let pulled = 0
      function* seeds(n: number) {
        for (let i = 0; i < n; i++) {
          pulled++
          yield { i: i % 7 }
        }
      }
      const ids = (specs: Stream.Stream<Pipeline.PipelineSpec<{ i: number }, unknown, unknown, unknown>, unknown>) =>
        Effect.map(Stream.runCollect(specs), (c) => Chunk.toArray(c).map((s) => [s.pipelineId, s.repeat, s.seedJson]))
      const direct = yield* ids(echo.map(seeds(600), { repeats: 2 }))
      const ahead = SpecStream.withReadAhead(echo.map(seeds(600), { repeats: 2 }), 256)
      assert.isDefined(ahead)
      assert.deepStrictEqual(yield* ids(ahead!), direct)
      // it reads 256 seeds per chunk: taking one spec pulls one chunk
      pulled = 0
      yield* Stream.runCollect(Stream.take(SpecStream.withReadAhead(echo.map(seeds(1000)), 256)!, 1))
      assert.strictEqual(pulled, 256)
      // a stream made from a map stream is read as it is
      assert.isUndefined(SpecStream.withReadAhead(Stream.take(echo.map(seeds(10)), 3), 256))
      assert.isUndefined(SpecStream.withReadAhead(Stream.fromIterable([1, 2]), 256))
      // a larger chunk size of its own is kept; a bad seed fails with its index either way
      const bad = [{ i: 1 }, { i: 2 }, { i: Number.NaN }]
      const e = yield* Stream.runCollect(SpecStream.withReadAhead(echo.map(bad, { chunkSize: 1000 }), 256)!).pipe(Effect.flip)
      assert.instanceOf(e, Pipeline.SeedError)
      assert.strictEqual((e as Pipeline.SeedError).index, 2)
    }))

  it("refuses invalid repeats and chunk sizes at once", () => {
    assert.instanceOf(thrown(() => echo.map([], { repeats: 0 })), Pipeline.SeedError)
    assert.instanceOf(thrown(() => echo.map([], { chunkSize: 0 })), Pipeline.SeedError)
  })

  it.effect("the same source can be run twice (a fresh iteration and index per run)", () =>
    Effect.gen(function*() {
      const seeds = [{ i: 1 }, { i: Number.NaN }]
      const specs = echo.map(seeds)
      const e1 = yield* Stream.runCollect(specs).pipe(Effect.flip)
      const e2 = yield* Stream.runCollect(specs).pipe(Effect.flip)
      assert.strictEqual(e1.index, 1)
      assert.strictEqual(e2.index, 1)
    }))
})

describe("make: template and build checks", () => {
  it("exposes the chain, tags and a JSON description", () => {
    const template = Pipeline.make("qa", { tags: { bench: "mmlu", k: [1] } }, prepare, ask)
    assert.strictEqual(template._tag, "PipelineTemplate")
    assert.strictEqual(template.name, "qa")
    assert.deepStrictEqual(template.tags, { bench: "mmlu", k: [1] })
    assert.isTrue(Object.isFrozen(template.tags))
    assert.strictEqual(template.nTasks, 2)
    assert.deepStrictEqual(template.taskNames, ["prepare", "ask"])
    assert.deepStrictEqual(template.tasks, [prepare, ask])
    assert.isTrue(template.includeCode)
    const d = template.describe() as Record<string, unknown>
    assert.strictEqual(d["name"], "qa")
    assert.strictEqual(d["specDigest"], template.specDigest)
    assert.deepStrictEqual(d["tags"], { bench: "mmlu", k: [1] })
    assert.deepStrictEqual(d["tasks"], [Task.describe(prepare), Task.describe(ask)])
    assert.strictEqual(((d["tasks"] as Array<Record<string, unknown>>)[1]!)["timeoutMs"], 60_000)
    assert.isTrue(Pipeline.isTemplate(template))
    assert.isTrue(Pipeline.isPipelineSpec(template.bind({ q: "1" })))
  })

  it("tags are snapshotted", () => {
    const tags = { bench: "a" }
    const template = Pipeline.make("qa", { tags }, prepare)
    tags.bench = "b"
    assert.deepStrictEqual(template.tags, { bench: "a" })
  })

  it("malformed declarations throw PipelineBuildError", () => {
    const bad: Array<() => unknown> = [
      () => (Pipeline.make as (...a: Array<unknown>) => unknown)("p"),
      () => (Pipeline.make as (...a: Array<unknown>) => unknown)("", prepare),
      () => (Pipeline.make as (...a: Array<unknown>) => unknown)("p", prepare, "ask"),
      () => (Pipeline.make as (...a: Array<unknown>) => unknown)("p", { tgas: {} }, prepare),
      () => (Pipeline.make as (...a: Array<unknown>) => unknown)("p", { tags: { when: new Date() } }, prepare),
      () => (Pipeline.make as (...a: Array<unknown>) => unknown)("p", { includeCode: "yes" }, prepare)
    ]
    for (const f of bad) assert.instanceOf(thrown(f), PipelineBuildError)
    const e = thrown(bad[4]!) as PipelineBuildError
    assert.include(e.message, "tags.when")
    assert.isTrue(Either.isLeft(Task.tryDefine(bad[0]!)))
  })

  it("compatible Schemas pass the build check", () => {
    const Full = Schema.Struct({ a: Schema.String, b: Schema.Number })
    const Part = Schema.Struct({ a: Schema.String })
    const produce = Task.sync("produce", { output: Full }, (n: number) => ({ a: String(n), b: n }))
    const consume = Task.sync("consume", { input: Part }, (x) => x.a)
    assert.strictEqual(Pipeline.make("ok", produce, consume).nTasks, 2)
    // identical schemas take the shortcut
    const same = Task.sync("same", { input: Full }, (x) => x.b)
    assert.strictEqual(Pipeline.make("ok", produce, same).nTasks, 2)
    // a Class output read through a Struct of the same fields
    class Verdict extends Schema.Class<Verdict>("Verdict")({ label: Schema.Literal("spam", "ham") }) {}
    const judge = Task.sync("judge", { output: Verdict }, (s: string) => new Verdict({ label: s === "x" ? "spam" : "ham" }))
    const count = Task.sync("count", { input: Schema.Struct({ label: Schema.String }) }, (v) => v.label.length)
    assert.strictEqual(Pipeline.make("ok", judge, count).nTasks, 2)
    // only one side declared: nothing to check at build time
    assert.strictEqual(Pipeline.make("ok", produce, Task.sync("any", (x: { a: string }) => x)).nTasks, 2)
  })

  it("incompatible Schemas throw PipelineBuildError naming both tasks and a refused value", () => {
    const text = Task.sync("text", { output: Schema.String }, (n: number) => String(n))
    const needsNonEmpty = Task.sync("title", { input: Schema.NonEmptyString }, (s) => s.toUpperCase())
    const e = thrown(() => Pipeline.make("bad", text, needsNonEmpty))
    assert.instanceOf(e, PipelineBuildError)
    const message = (e as PipelineBuildError).message
    assert.include(message, "\"title\"")
    assert.include(message, "\"text\"")
    assert.include(message, "pipeline \"bad\"")
    const num = Task.sync("num", { output: Schema.Number }, (s: string) => s.length)
    const int = Task.sync("int", { input: Schema.Int }, (n) => n * 2)
    assert.include((thrown(() => Pipeline.make("bad", num, int)) as PipelineBuildError).message, "integer")
    // the verdict is deterministic
    assert.strictEqual(
      Pipeline.checkSchemas(Schema.String, Schema.NonEmptyString),
      Pipeline.checkSchemas(Schema.String, Schema.NonEmptyString)
    )
    assert.isUndefined(Pipeline.checkSchemas(Schema.NonEmptyString, Schema.String))
  })

  it("fromTasks builds a chain known only at run time, with the same identity and checks", () => {
    const steps: Array<Task.Any> = [prepare]
    steps.push(ask)
    const dynamic = Pipeline.fromTasks("golden", steps)
    assert.strictEqual(dynamic.specDigest, golden.specDigest)
    assert.strictEqual(dynamic.bind({ q: "2+2" }).pipelineId, "40c4bcb35944370fbd3f8a0a24c936f2")
    assert.strictEqual(
      Pipeline.fromTasks("g", steps, { includeCode: false }).specDigest,
      "a0b1995b2dc7b14eb62bfe499b634fe0"
    )
    const text = Task.sync("text", { output: Schema.String }, (n: number) => String(n))
    const title = Task.sync("title", { input: Schema.NonEmptyString }, (s) => s)
    assert.instanceOf(thrown(() => Pipeline.fromTasks("bad", [text, title])), PipelineBuildError)
    assert.instanceOf(thrown(() => Pipeline.fromTasks("bad", [])), PipelineBuildError)
  })

  it("includeCode: false drops code digests recursively, children included", () => {
    const leaf = (body: (s: string) => string) => Task.sync("leaf", body)
    const build = (body: (s: string) => string, includeCode: boolean) =>
      Pipeline.make("p", { includeCode }, Task.sync("fan", { children: [leaf(body)] }, (s: string) => s))
    const x = (s: string) => s + "x"
    const y = (s: string) => s + "y"
    assert.strictEqual(build(x, false).specDigest, build(y, false).specDigest)
    assert.notStrictEqual(build(x, true).specDigest, build(y, true).specDigest)
    assert.isFalse(build(x, false).includeCode)
  })
})
