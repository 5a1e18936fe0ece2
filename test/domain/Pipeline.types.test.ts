/**
 * Type-level tests. `tsc --noEmit` is the real check: every `expectTypeOf` must hold and every
 * `@ts-expect-error` line must really be an error (tsc reports an unused directive otherwise),
 * so a broken chain check fails the type-check. The calls also run under vitest, where none of
 * them throws (no Schemas are declared on the mismatched tasks).
 */
import { Context, Effect, Schema, Stream } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { defineExperiment } from "../../src/config/Config.js"
import type * as Control from "../../src/domain/Control.js"
import * as Handoff from "../../src/domain/Handoff.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"

class Db extends Context.Tag("test/Db")<Db, { readonly q: (s: string) => Effect.Effect<number> }>() {}
class Llm extends Context.Tag("test/Llm")<Llm, { readonly chat: (s: string) => Effect.Effect<string> }>() {}
class Boom extends Schema.TaggedError<Boom>()("Boom", {}) {}
class Slow extends Schema.TaggedError<Slow>()("Slow", {}) {}
class Verdict extends Schema.Class<Verdict>("Verdict")({ label: Schema.Literal("spam", "ham") }) {}
const Label = Schema.Struct({ label: Schema.Literal("spam", "ham") })

// string -> number -> boolean -> string -> Verdict
const length = Task.make("length", (s: string) => Effect.succeed(s.length))
const positive = Task.make("positive", (n: number) => n >= 0 ? Effect.succeed(n > 0) : Effect.fail(new Boom()))
const lookup = Task.make("lookup", (b: boolean) => Effect.flatMap(Db, (db) => db.q(String(b))).pipe(Effect.map(String)))
const judge = Task.make(
  "judge",
  { output: Verdict },
  (s: string) =>
    Effect.flatMap(Llm, (llm) => llm.chat(s)).pipe(
      Effect.flatMap((a) => a === "" ? Effect.fail(new Slow()) : Effect.succeed(new Verdict({ label: "spam" })))
    )
)

describe("Task types", () => {
  it("infers In, Out, E and R from an Effect body", () => {
    expectTypeOf(length).toEqualTypeOf<Task.Task<string, number, never, never>>()
    expectTypeOf(positive).toEqualTypeOf<Task.Task<number, boolean, Boom, never>>()
    expectTypeOf(lookup).toEqualTypeOf<Task.Task<boolean, string, never, Db>>()
    expectTypeOf(judge).toEqualTypeOf<Task.Task<string, Verdict, Slow, Llm>>()
  })

  it("infers In and Out from input/output Schemas", () => {
    const a = Task.make("a", { input: Schema.String, output: Label }, (s) => Effect.succeed({ label: s === "x" ? "spam" : "ham" } as const))
    expectTypeOf(a).toEqualTypeOf<Task.Task<string, { readonly label: "spam" | "ham" }, never, never>>()
    const b = Task.sync("b", { input: Schema.Number, output: Label }, (n) => ({ label: n > 0 ? "spam" : "ham" }))
    expectTypeOf(b).toEqualTypeOf<Task.Task<number, { readonly label: "spam" | "ham" }, unknown, never>>()
    const c = Task.promise("c", { output: Label }, async (n: number) => ({ label: n > 0 ? "spam" : "ham" }))
    expectTypeOf(c).toEqualTypeOf<Task.Task<number, { readonly label: "spam" | "ham" }, unknown, never>>()
    const d = Task.sync("d", { input: Schema.Struct({ q: Schema.String }) }, (row) => row.q.length)
    expectTypeOf(d).toEqualTypeOf<Task.Task<{ readonly q: string }, number, unknown, never>>()
  })

  it("sync and promise fail with unknown (the raw thrown or rejected value)", () => {
    const s = Task.sync("s", (n: number) => n)
    expectTypeOf(s).toEqualTypeOf<Task.Task<number, number, unknown, never>>()
    const p = Task.promise("p", async (n: number, _ctx, signal) => signal.aborted ? 0 : n)
    expectTypeOf(p).toEqualTypeOf<Task.Task<number, number, unknown, never>>()
  })

  it("refuses a body that disagrees with its declared Schemas", () => {
    // @ts-expect-error the output Schema allows only "spam" | "ham"
    Task.sync("bad-out", { output: Label }, (n: number) => ({ label: n > 0 ? "spam" : "maybe" }))
    // @ts-expect-error the input Schema says string, the body says number
    Task.make("bad-in", { input: Schema.String }, (n: number) => Effect.succeed(n))
    // @ts-expect-error the Effect body must produce the output Schema's type
    Task.make("bad-effect", { output: Schema.Number }, (s: string) => Effect.succeed(s))
  })

  it("type helpers read a task's parameters", () => {
    expectTypeOf<Task.Input<typeof judge>>().toEqualTypeOf<string>()
    expectTypeOf<Task.Output<typeof judge>>().toEqualTypeOf<Verdict>()
    expectTypeOf<Task.Error<typeof judge>>().toEqualTypeOf<Slow>()
    expectTypeOf<Task.Context<typeof judge>>().toEqualTypeOf<Llm>()
  })

  it("overrides keep the task's type, and a new run must fit it", () => {
    expectTypeOf(Task.withOverrides(lookup, { resource: null })).toEqualTypeOf(lookup)
    expectTypeOf(lookup.pipe(Task.withRetry({ maxAttempts: 3 }))).toEqualTypeOf(lookup)
    // @ts-expect-error name is not nullable
    Task.tryDefine(() => Task.withOverrides(lookup, { name: null }))
    // @ts-expect-error config is not nullable (clear it with {})
    Task.tryDefine(() => Task.withOverrides(lookup, { config: null }))
    // @ts-expect-error a run of another type
    Task.withOverrides(length, { run: (n: number) => Effect.succeed(n) })
    Task.withOverrides(length, { version: Task.UNSET, timeout: null })
  })
})

describe("Pipeline chain types", () => {
  it("infers Seed, Out, E and R for chains of 1 to 4 tasks", () => {
    expectTypeOf(Pipeline.make("p1", length)).toEqualTypeOf<Pipeline.Template<string, number, never, never>>()
    expectTypeOf(Pipeline.make("p2", length, positive)).toEqualTypeOf<Pipeline.Template<string, boolean, Boom, never>>()
    expectTypeOf(Pipeline.make("p3", length, positive, lookup)).toEqualTypeOf<
      Pipeline.Template<string, string, Boom, Db>
    >()
    expectTypeOf(Pipeline.make("p4", length, positive, lookup, judge)).toEqualTypeOf<
      Pipeline.Template<string, Verdict, Boom | Slow, Db | Llm>
    >()
    expectTypeOf(Pipeline.make("p4o", { tags: { k: 1 }, includeCode: false }, length, positive, lookup, judge))
      .toEqualTypeOf<Pipeline.Template<string, Verdict, Boom | Slow, Db | Llm>>()
  })

  it("accepts a next input that is wider than the previous output", () => {
    const wide = Task.sync("wide", (n: number) => ({ a: String(n), b: n, c: true as const }))
    const narrow = Task.sync("narrow", (x: { a: string }) => x.a)
    const anything = Task.sync("anything", (u: unknown) => typeof u)
    const literal = Task.sync("literal", (_: number) => "yes" as const)
    const str = Task.sync("str", (s: string) => s.length)
    expectTypeOf(Pipeline.make("w", wide, narrow, anything)).toEqualTypeOf<
      Pipeline.Template<number, "string" | "number" | "bigint" | "boolean" | "symbol" | "undefined" | "object" | "function", unknown, never>
    >()
    expectTypeOf(Pipeline.make("l", literal, str)).toEqualTypeOf<Pipeline.Template<number, number, unknown, never>>()
  })

  it("refuses a task whose input does not accept the previous output, at any position", () => {
    // @ts-expect-error position 2: number is not boolean
    Pipeline.make("bad2", length, lookup)
    // @ts-expect-error position 3: boolean is not number
    Pipeline.make("bad3", length, positive, positive)
    // @ts-expect-error position 4: string is not boolean
    Pipeline.make("bad4", length, positive, lookup, lookup)
    // @ts-expect-error with options too
    Pipeline.make("bad-opts", { tags: {} }, length, judge)
    const narrow = Task.sync("narrow", (x: { a: string; b: number }) => x.a)
    const partial = Task.sync("partial", (n: number) => ({ a: String(n) }))
    // @ts-expect-error the next input needs a field the previous output does not have
    Pipeline.make("missing-field", partial, narrow)
  })

  it("refuses an empty chain and malformed options", () => {
    // @ts-expect-error no task
    Task.tryDefine(() => Pipeline.make("empty"))
    // @ts-expect-error options but no task
    Task.tryDefine(() => Pipeline.make("empty", { tags: {} }))
    // @ts-expect-error includeCode is a boolean
    Task.tryDefine(() => Pipeline.make("opts", { includeCode: "no" }, length))
  })

  it("specs and seeds carry the template's types", () => {
    const template = Pipeline.make("p", length, positive, lookup)
    const spec = template.bind("hello")
    expectTypeOf(spec).toEqualTypeOf<Pipeline.PipelineSpec<string, string, Boom, Db>>()
    expectTypeOf(spec.seed).toEqualTypeOf<string>()
    // @ts-expect-error the seed must be the first task's input
    Task.tryDefine(() => template.bind(42))
    expectTypeOf(template.map(["a", "b"])).toEqualTypeOf<
      Stream.Stream<Pipeline.PipelineSpec<string, string, Boom, Db>, Pipeline.SeedError>
    >()
    class SourceError extends Schema.TaggedError<SourceError>()("SourceError", {}) {}
    const source: Stream.Stream<string, SourceError, Llm> = Stream.make("a")
    expectTypeOf(template.map(source, { repeats: 2, keyOf: (s) => s })).toEqualTypeOf<
      Stream.Stream<Pipeline.PipelineSpec<string, string, Boom, Db>, SourceError | Pipeline.SeedError, Llm>
    >()
    // @ts-expect-error seeds of the wrong type
    Task.tryDefine(() => template.map([1, 2]))
  })
})

describe("Handoff directives in a chain", () => {
  interface Sample {
    readonly prompt: string
    readonly ok: boolean
  }
  const generate = Task.make("generate", (prompt: string) => Effect.succeed<Sample>({ prompt, ok: prompt !== "" }))
  const validate = Task.make("validate", (row: Sample) =>
    row.ok ?
      Effect.succeed(row) :
      Effect.succeed(Handoff.rewind("generate", { prompt: row.prompt, feedback: "warmer" }, { reason: "invalid" })))
  const report = Task.sync("report", (row: Sample) => row.prompt.length)

  it("a task returning Sample | Handoff keeps the directive in its own type, not in its output", () => {
    expectTypeOf(validate).toEqualTypeOf<Task.Task<Sample, Sample | Handoff.Handoff, never, never>>()
    expectTypeOf<Task.Output<typeof validate>>().toEqualTypeOf<Sample>()
  })

  it("the next task's Sample input accepts it, with the options first or last", () => {
    const control = { edges: { validate: ["report", "end"] }, rewind: { validate: ["generate"] }, maxHandoffs: 3 }
    expectTypeOf(Pipeline.make("gen", generate, validate, report, { control }))
      .toEqualTypeOf<Pipeline.Template<string, number, never, never>>()
    expectTypeOf(Pipeline.make("gen", { control }, generate, validate, report))
      .toEqualTypeOf<Pipeline.Template<string, number, never, never>>()
    // @ts-expect-error options last still check the chain
    Task.tryDefine(() => Pipeline.make("bad-last", generate, report, validate, { control }))
  })

  it("a misspelt key in control or in the options does not compile (options first or last, and in defineExperiment)", () => {
    // @ts-expect-error maxHandof is not a control key (options last)
    Task.tryDefine(() => Pipeline.make("typo", generate, validate, report, { control: { rewind: { validate: [0] }, maxHandof: 3 } }))
    // @ts-expect-error retry_all is not a control key (options first)
    Task.tryDefine(() => Pipeline.make("typo", { control: { retry_all: ["report"], maxHandoffs: 1 } }, generate, validate, report))
    // @ts-expect-error tagz is not an option
    Task.tryDefine(() => Pipeline.make("typo", generate, validate, report, { tagz: {} }))
    defineExperiment({
      // @ts-expect-error maxHandof is not a control key of pipeline.control
      pipeline: { name: "typo", tasks: [{ use: "echo" }], control: { retryAll: [0], maxHandof: 1 } },
      source: { range: { n: 1 } }
    })
    // the exact keys still compile, with a control block held in a variable or typed as ControlDecl
    const decl: Control.ControlDecl = { retryAll: ["report"], maxHandoffs: 1 }
    expectTypeOf(Pipeline.make("exact", generate, validate, report, { control: decl, includeCode: false }))
      .toEqualTypeOf<Pipeline.Template<string, number, never, never>>()
    expectTypeOf(Pipeline.make("exact", { control: { edges: { validate: ["end"] } }, tags: { k: 1 } }, generate, validate, report))
      .toEqualTypeOf<Pipeline.Template<string, number, never, never>>()
  })

  it("a task that only hands off has output never, which any next task accepts", () => {
    const skip = Task.sync("skip", (_: Sample) => Handoff.end(null, { reason: "done" }))
    expectTypeOf<Task.Output<typeof skip>>().toEqualTypeOf<never>()
    const t = Pipeline.make("skipper", generate, skip, report, { control: { edges: { skip: ["end"] } } })
    expectTypeOf(t).toEqualTypeOf<Pipeline.Template<string, number, unknown, never>>()
  })

  it("a task with an output Schema may still return a directive", () => {
    const checked = Task.make("checked", { output: Verdict }, (s: string) =>
      s === "" ? Effect.succeed(Handoff.to("report")) : Effect.succeed(new Verdict({ label: "ham" })))
    expectTypeOf<Task.Output<typeof checked>>().toEqualTypeOf<Verdict>()
    const sync = Task.sync("checked-sync", { output: Label }, (s: string) =>
      s === "" ? Handoff.end() : { label: "spam" as const })
    expectTypeOf<Task.Output<typeof sync>>().toEqualTypeOf<{ readonly label: "spam" | "ham" }>()
  })
})
