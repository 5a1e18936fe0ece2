import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Equal, Hash, Schema, Stream } from "effect"
import { CodecRegistry, type Encoded, utf8 } from "../../src/domain/Codec.js"
import { ArtifactCodecError } from "../../src/domain/Errors.js"
import * as History from "../../src/domain/HistoryArtifact.js"
import { HistoryArtifact, HistoryArtifactError } from "../../src/domain/HistoryArtifact.js"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import { SeedError } from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"

class GenerationState extends History.Class<GenerationState>("test/GenerationState") {
  get prompt(): string {
    return String(this.stateObject()["prompt"])
  }
}
class JudgeState extends History.Class<JudgeState>("test/JudgeState") {}
class Unregistered extends History.Class<Unregistered>("test/Unregistered") {}

/** Runs `f`, which must throw a HistoryArtifactError with `reason`; returns its message. */
const refused = (reason: History.HistoryErrorReason, f: () => unknown): string => {
  try {
    f()
  } catch (e) {
    assert.instanceOf(e, HistoryArtifactError)
    assert.strictEqual((e as HistoryArtifactError).reason, reason)
    return (e as HistoryArtifactError).message
  }
  throw new Error(`expected a HistoryArtifactError (${reason})`)
}

const right = <A>(e: Either.Either<A, ArtifactCodecError>): A => {
  if (Either.isLeft(e)) throw new Error(`expected success, got ${e.left.message}`)
  return e.right
}
const codecError = <A>(e: Either.Either<A, ArtifactCodecError>): ArtifactCodecError => {
  if (Either.isRight(e)) throw new Error("expected an ArtifactCodecError")
  assert.instanceOf(e.left, ArtifactCodecError)
  return e.left
}

const start = () => new GenerationState({ state: { prompt: "Return JSON", temperature: 0.2 } })

describe("HistoryArtifact: values", () => {
  it("starts with an empty history, nothing selected, ids from 0", () => {
    const a = new HistoryArtifact({ state: { n: 1 } })
    assert.deepStrictEqual(a.state, { n: 1 })
    assert.deepStrictEqual(a.history, [])
    assert.isNull(a.selected)
    assert.strictEqual(a.nextSnapshot, 0)
  })

  it("checkpoint appends a snapshot of the current state and leaves the receiver unchanged", () => {
    const a = start()
    const b = a.checkpoint("before", { step: "prepare" })
    assert.deepStrictEqual(a.history, [])
    assert.strictEqual(a.nextSnapshot, 0)
    assert.deepStrictEqual(b.history, [
      { id: 0, label: "before", state: { prompt: "Return JSON", temperature: 0.2 }, metadata: { step: "prepare" } }
    ])
    assert.strictEqual(b.nextSnapshot, 1)
    assert.isNull(b.checkpoint("again").snapshot("again").metadata, "metadata defaults to null")
  })

  it("every operation keeps the subclass", () => {
    const a = start().checkpoint("x")
    for (const v of [a, a.withState({ prompt: "p" }), a.restore("x"), a.checkpoint("y").prune("y")]) {
      assert.instanceOf(v, GenerationState)
    }
    assert.strictEqual(a.restore("x").prompt, "Return JSON")
  })

  it("withState replaces the state without a snapshot and keeps the selection", () => {
    const a = start().checkpoint("first").restore("first")
    const b = a.withState({ prompt: "other" })
    assert.deepStrictEqual(b.state, { prompt: "other" })
    assert.strictEqual(b.history.length, 1)
    assert.strictEqual(b.selected, 0)
    assert.strictEqual(b.nextSnapshot, 1)
  })

  it("restore selects the snapshot, sets its state, and keeps the whole history", () => {
    const s = start().checkpoint("before-generation")
    const t = s.withState({ ...s.stateObject(), answer: "invalid" }).checkpoint("after-generation")
    const r = t.restore("before-generation")
    assert.deepStrictEqual(r.state, { prompt: "Return JSON", temperature: 0.2 })
    assert.strictEqual(r.selected, 0)
    assert.deepStrictEqual(r.history.map((x) => x.label), ["before-generation", "after-generation"])
    assert.deepStrictEqual(r.restore(1).state, { prompt: "Return JSON", temperature: 0.2, answer: "invalid" })
    assert.strictEqual(r.restore("snapshot:1").selected, 1)
  })

  it("snapshot selects by id, by the stable form snapshot:N and by label", () => {
    const a = start().checkpoint("a").checkpoint("b")
    assert.strictEqual(a.snapshot(1).label, "b")
    assert.strictEqual(a.snapshot("snapshot:0").label, "a")
    assert.strictEqual(a.snapshot("b").id, 1)
    assert.isTrue(a.has("a"))
    assert.isFalse(a.has("c"))
    assert.isFalse(a.has(7))
  })

  it("unknown selectors are refused with the known snapshots in the message", () => {
    const a = start().checkpoint("a")
    assert.include(refused("unknownSnapshot", () => a.snapshot("nope")), `label "nope"`)
    assert.include(refused("unknownSnapshot", () => a.snapshot(3)), "id 3")
    assert.include(refused("unknownSnapshot", () => a.restore("snapshot:9")), `snapshots: 0 "a"`)
    assert.include(refused("unknownSnapshot", () => start().snapshot(0)), "the history is empty")
    refused("unknownSnapshot", () => a.prune("nope"))
  })

  it("equality is structural (same class, same JSON), hashing agrees", () => {
    const a = start().checkpoint("x")
    const b = start().checkpoint("x")
    assert.isTrue(Equal.equals(a, b))
    assert.strictEqual(Hash.hash(a), Hash.hash(b))
    assert.isFalse(Equal.equals(a, a.checkpoint("y")))
    assert.isFalse(Equal.equals(a, new JudgeState({ state: a.state, history: a.history, nextSnapshot: 1 })))
  })
})

describe("HistoryArtifact: detachment", () => {
  it("changing the object passed in never changes the artifact or its past", () => {
    const state = { prompt: "p", tags: ["a"] }
    const a = new HistoryArtifact({ state }).checkpoint("one")
    state.prompt = "changed"
    state.tags.push("b")
    assert.deepStrictEqual(a.state, { prompt: "p", tags: ["a"] })
    assert.deepStrictEqual(a.snapshot("one").state, { prompt: "p", tags: ["a"] })

    const metadata = { notes: ["x"] }
    const b = a.checkpoint("two", metadata)
    metadata.notes.push("y")
    assert.deepStrictEqual(b.snapshot("two").metadata, { notes: ["x"] })

    const next = { prompt: "q", tags: ["c"] }
    const c = b.withState(next)
    next.tags.push("d")
    assert.deepStrictEqual(c.state, { prompt: "q", tags: ["c"] })
  })

  it("nothing read out can be changed: values, snapshots, history and the instance are frozen", () => {
    const a = new HistoryArtifact({ state: { nested: { list: [1, 2] } } }).checkpoint("one", { m: [1] })
    const snap = a.snapshot("one")
    const attempts: ReadonlyArray<() => void> = [
      () => ((a.state as any).nested.list as Array<number>).push(3),
      () => ((snap.state as any).nested.x = 1),
      () => ((snap as any).label = "two"),
      () => ((snap.metadata as Array<number> as any).m.push(2)),
      () => (a.history as Array<unknown>).push(snap),
      () => ((a as any).state = null),
      () => ((a as any).selected = 0)
    ]
    for (const mutate of attempts) assert.throws(mutate, TypeError)
    assert.isTrue(Object.isFrozen(a))
    assert.deepStrictEqual(a.state, { nested: { list: [1, 2] } })
  })

  it("changing the current state (withState from a copy) never changes a snapshot", () => {
    const a = start().checkpoint("before")
    const b = a.withState({ ...a.stateObject(), temperature: 0.9 })
    assert.deepStrictEqual(b.snapshot("before").state, { prompt: "Return JSON", temperature: 0.2 })
    assert.deepStrictEqual(b.restore("before").state, { prompt: "Return JSON", temperature: 0.2 })
  })

  it("history given to the constructor is copied too", () => {
    const history = [{ id: 0, label: "a", state: { v: [1] }, metadata: null }]
    const a = new HistoryArtifact({ state: null, history, nextSnapshot: 1 })
    ;(history[0]!.state.v as Array<number>).push(2)
    history[0]!.label = "changed"
    assert.deepStrictEqual(a.snapshot("a").state, { v: [1] })
  })
})

describe("HistoryArtifact: ids and labels", () => {
  it("ids are never reused, not even after pruning the newest snapshot", () => {
    const a = start().checkpoint("a").checkpoint("b")
    const pruned = a.prune("b")
    assert.strictEqual(pruned.nextSnapshot, 2)
    const c = pruned.checkpoint("c")
    assert.strictEqual(c.snapshot("c").id, 2)
    refused("unknownSnapshot", () => c.snapshot(1))
    assert.deepStrictEqual(c.history.map((s) => s.id), [0, 2])
  })

  it("labels are unique", () => {
    const a = start().checkpoint("dup")
    assert.include(refused("duplicateLabel", () => a.checkpoint("dup")), `"dup"`)
    // a pruned label is free again (it selects nothing any more)
    assert.strictEqual(a.checkpoint("other").prune("dup").checkpoint("dup").snapshot("dup").id, 2)
  })

  it("the snapshot: prefix is reserved, empty and non-string labels are refused", () => {
    const a = start()
    assert.include(refused("reservedLabel", () => a.checkpoint("snapshot:0")), "reserved")
    refused("reservedLabel", () => a.checkpoint("snapshot:later"))
    refused("invalidLabel", () => a.checkpoint(""))
    refused("invalidLabel", () => a.checkpoint(3 as unknown as string))
    assert.strictEqual(a.checkpoint("Snapshot:0").history.length, 1, "the prefix is case-sensitive")
  })

  it("a label that looks like a number is a label; a number selects an id", () => {
    const a = start().checkpoint("first").checkpoint("0")
    assert.strictEqual(a.snapshot("0").id, 1)
    assert.strictEqual(a.snapshot(0).label, "first")
  })
})

describe("HistoryArtifact: prune", () => {
  it("removes the chosen snapshots and keeps the others in order", () => {
    const a = start().checkpoint("a").checkpoint("b").checkpoint("c").checkpoint("d")
    const p = a.prune("a", 2, "snapshot:3")
    assert.deepStrictEqual(p.history.map((s) => s.label), ["b"])
    assert.strictEqual(a.history.length, 4, "the receiver is unchanged")
    assert.strictEqual(a.prune(), a)
  })

  it("refuses the selected snapshot, whichever way it is named, and removes nothing", () => {
    const a = start().checkpoint("a").checkpoint("b").restore("a")
    for (const sel of ["a", 0, "snapshot:0"] as const) {
      assert.include(refused("selectedSnapshot", () => a.prune("b", sel)), `snapshot 0 "a" is the selected snapshot`)
    }
    assert.deepStrictEqual(a.prune("b").history.map((s) => s.label), ["a"])
    // after restoring another snapshot, the old one can go
    assert.deepStrictEqual(a.restore("b").prune("a").history.map((s) => s.label), ["b"])
  })
})

describe("HistoryArtifact: JSON only", () => {
  const notJson: ReadonlyArray<readonly [string, unknown, string]> = [
    ["a Date", { at: new Date(0) }, "state.at"],
    ["a function", { f: () => 1 }, "state.f"],
    ["a Map", new Map(), "state"],
    ["NaN", { x: [1, Number.NaN] }, "state.x[1]"],
    ["a bigint", 1n, "state"],
    ["undefined", undefined, "state"],
    ["a class instance", { client: new (class Client {})() }, "state.client"]
  ]
  for (const [what, value, path] of notJson) {
    it(`refuses ${what} as state, naming ${path}`, () => {
      const message = refused("notJson", () => new HistoryArtifact({ state: value as Json }))
      assert.include(message, `${path} is not strict JSON`)
      refused("notJson", () => start().withState(value as Json))
      refused("notJson", () => new GenerationState({ state: value as Json }))
    })
  }

  it("refuses non-JSON metadata and cycles", () => {
    assert.include(refused("notJson", () => start().checkpoint("x", { lease: new Date() } as never)), "metadata.lease")
    const cyclic: Record<string, unknown> = {}
    cyclic["self"] = cyclic
    assert.include(refused("notJson", () => start().withState(cyclic as Json)), "cycle")
  })

  it.effect("inside an Effect the thrown error becomes a typed failure with Effect.try", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Effect.try({
          try: () => start().checkpoint("snapshot:1"),
          catch: (e) => e as HistoryArtifactError
        })
      )
      assert.strictEqual(error._tag, "HistoryArtifactError")
      assert.strictEqual(error.reason, "reservedLabel")
    }))
})

describe("HistoryArtifact: constructor invariants", () => {
  const snap = (id: number, label: string) => ({ id, label, state: null, metadata: null })
  const cases: ReadonlyArray<readonly [string, ConstructorParameters<typeof HistoryArtifact>[0], History.HistoryErrorReason, string]> = [
    ["decreasing ids", { state: 1, history: [snap(1, "a"), snap(0, "b")] }, "invalidHistory", "history[1].id 0"],
    ["a negative id", { state: 1, history: [snap(-1, "a")] }, "invalidHistory", "history[0].id"],
    ["duplicate labels", { state: 1, history: [snap(0, "a"), snap(1, "a")] }, "duplicateLabel", "history[1].label"],
    ["a reserved label", { state: 1, history: [snap(0, "snapshot:0")] }, "reservedLabel", "history[0].label"],
    ["nextSnapshot at an id", { state: 1, history: [snap(0, "a"), snap(3, "b")], nextSnapshot: 3 }, "invalidHistory", "nextSnapshot 3"],
    ["selected not in the history", { state: 1, history: [snap(0, "a")], selected: 4 }, "invalidHistory", "selected 4"],
    ["non-JSON snapshot state", { state: 1, history: [{ id: 0, label: "a", state: new Date() as never, metadata: null }] }, "notJson", "history[0].state"]
  ]
  for (const [what, props, reason, where] of cases) {
    it(`refuses ${what}`, () => {
      assert.include(refused(reason, () => new HistoryArtifact(props)), where)
    })
  }

  it("nextSnapshot defaults to one above the last id", () => {
    assert.strictEqual(new HistoryArtifact({ state: 1, history: [snap(0, "a"), snap(5, "b")] }).nextSnapshot, 6)
  })
})

describe("HistoryArtifact: Schema", () => {
  it("the class is a Schema whose encoded side is the plain fields", () => {
    const a = start().checkpoint("a").restore("a")
    const encoded = Schema.encodeSync(GenerationState)(a)
    assert.deepStrictEqual(encoded, {
      state: { prompt: "Return JSON", temperature: 0.2 },
      history: [{ id: 0, label: "a", state: { prompt: "Return JSON", temperature: 0.2 }, metadata: null }],
      selected: 0,
      nextSnapshot: 1
    })
    const decoded = Schema.decodeUnknownSync(GenerationState)(encoded)
    assert.instanceOf(decoded, GenerationState)
    assert.isTrue(Equal.equals(decoded, a))
    assert.isTrue(Object.isFrozen(decoded.state))
  })

  it("Class needs a non-empty identifier", () => {
    refused("invalidLabel", () => History.Class<GenerationState>(""))
  })
})

describe("HistoryArtifact: codec", () => {
  const registry = History.register(CodecRegistry.default(), GenerationState, JudgeState)

  it("round trips a registered subclass through the CodecRegistry as history-v1", () => {
    const s = start().checkpoint("before-generation")
    const value = s.withState({ ...s.stateObject(), answer: "invalid" }).checkpoint("after-generation", { score: 0.1 })
      .restore("before-generation").prune("after-generation").checkpoint("retry")
    const encoded = right(registry.dump(value))
    assert.strictEqual(encoded.codec, "history-v1")
    assert.strictEqual(encoded.typeName, "test/GenerationState")
    assert.strictEqual(registry.typeNameOf(value), "test/GenerationState")
    const loaded = right(registry.load(encoded))
    assert.instanceOf(loaded, GenerationState)
    const back = loaded as GenerationState
    assert.isTrue(Equal.equals(back, value))
    assert.strictEqual(back.selected, 0)
    assert.strictEqual(back.nextSnapshot, 3, "the id counter survives, so pruned ids stay unused after a resume")
    assert.strictEqual(back.checkpoint("next").snapshot("next").id, 3)
    assert.isTrue(Object.isFrozen(back.state) && Object.isFrozen(back.history[0]!.state))
  })

  it("each registered class comes back as itself; the base class is always known", () => {
    const judge = right(registry.load(right(registry.dump(new JudgeState({ state: [1, 2] }).checkpoint("j")))))
    assert.instanceOf(judge, JudgeState)
    const base = right(registry.load(right(registry.dump(new HistoryArtifact({ state: "plain" })))))
    assert.strictEqual((base as object).constructor, HistoryArtifact)
    assert.deepStrictEqual(registry.load(right(registry.dump({ plain: "json" }))), Either.right({ plain: "json" }))
  })

  it("registering again adds to the known classes and is idempotent", () => {
    const one = History.register(CodecRegistry.default(), GenerationState)
    const two = History.register(one, JudgeState)
    assert.deepStrictEqual([...History.codecOf(two)!.types.keys()], [
      "assay/HistoryArtifact",
      "test/GenerationState",
      "test/JudgeState"
    ])
    assert.strictEqual(History.register(two, GenerationState, JudgeState), two)
    assert.instanceOf(right(two.load(right(one.dump(start())))), GenerationState)
    assert.isUndefined(History.codecOf(CodecRegistry.default()))
  })

  it("wins over a Schema codec registered for the same class (the runner registers output schemas)", () => {
    const withSchema = registry.registerSchema(GenerationState)
    const encoded = right(withSchema.dump(start()))
    assert.strictEqual(encoded.codec, "history-v1")
    assert.instanceOf(right(withSchema.load(encoded)), GenerationState)
  })

  it("registerSchema of a HistoryArtifact class (the runner's output registration) gives it the history-v1 codec", () => {
    const auto = CodecRegistry.default().registerSchema(GenerationState)
    const encoded = right(auto.dump(start().checkpoint("a")))
    assert.strictEqual(encoded.codec, "history-v1")
    assert.strictEqual(encoded.typeName, "test/GenerationState")
    assert.instanceOf(right(auto.load(encoded)), GenerationState)
    // an output declared as the base class: a subclass instance is refused, never stored as the base
    const base = CodecRegistry.default().registerSchema(HistoryArtifact)
    assert.include(codecError(base.dump(new JudgeState({ state: 1 }))).message, "HistoryArtifact.register(registry, JudgeState)")
  })

  it("a registry without any history codec names the missing registration (not 'not a plain object')", () => {
    const error = codecError(CodecRegistry.default().dump(new JudgeState({ state: 1 })))
    assert.strictEqual(error.typeName, "JudgeState")
    assert.isTrue(error.unregistered)
    assert.include(error.message, "HistoryArtifact.register(registry, JudgeState)")
    assert.notInclude(error.message, "plain object")
  })

  it("an unregistered subclass fails to encode, naming the class and the fix", () => {
    const error = codecError(registry.dump(new Unregistered({ state: 1 })))
    assert.strictEqual(error.codec, "history-v1")
    assert.strictEqual(error.typeName, "test/Unregistered")
    assert.include(error.message, "HistoryArtifact subtype Unregistered is not registered")
    assert.include(error.message, "HistoryArtifact.register(registry, Unregistered)")
  })

  it("a payload of an unregistered subtype fails to decode instead of coming back as the base class", () => {
    const writer = History.register(CodecRegistry.default(), Unregistered)
    const encoded = right(writer.dump(new Unregistered({ state: { x: 1 } })))
    const error = codecError(registry.load(encoded))
    assert.strictEqual(error.typeName, "test/Unregistered")
    assert.include(error.message, "not registered in this CodecRegistry")
    assert.include(error.message, "registered: assay/HistoryArtifact, test/GenerationState, test/JudgeState")
    // and a registry without the history codec names the codec
    assert.include(codecError(CodecRegistry.default().load(encoded)).message, `no codec named "history-v1"`)
  })

  it("a subclass that shares its parent's identifier cannot be registered next to it", () => {
    class Child extends GenerationState {}
    assert.include(refused("invalidHistory", () => History.register(registry, Child)), "share the identifier")
    refused("invalidHistory", () => History.register(registry, Date as never))
  })

  const payload = (fields: Record<string, unknown>, typeName = "test/GenerationState"): Encoded => ({
    codec: "history-v1",
    typeName,
    data: utf8(JSON.stringify(fields))
  })
  const valid = { format: "history-v1", type: "test/GenerationState", state: 1, history: [], selected: null, nextSnapshot: 0 }

  it("refuses another format version in the encoded form", () => {
    assert.include(
      codecError(registry.load(payload({ ...valid, format: "history-v2" }))).message,
      `unsupported HistoryArtifact format "history-v2" (this build reads history-v1)`
    )
    assert.include(codecError(registry.load(payload({ ...valid, format: undefined }))).message, `no "format" field`)
    assert.include(
      codecError(registry.load({ ...payload(valid), codec: "history-v2" })).message,
      `no codec named "history-v2"`
    )
    assert.instanceOf(right(registry.load(payload(valid))), GenerationState)
  })

  it("refuses a payload whose type disagrees with the recorded type name, bad bytes and broken invariants", () => {
    assert.include(codecError(registry.load(payload(valid, "test/JudgeState"))).message, "recorded as")
    assert.include(codecError(registry.load({ ...payload(valid), data: utf8("{not json") })).message, "UTF-8 JSON")
    assert.include(codecError(registry.load(payload([1] as never))).message, "expected a JSON object")
    assert.include(codecError(registry.load(payload({ ...valid, extra: 1 }))).message, "extra")
    assert.include(
      codecError(registry.load(payload({ ...valid, history: [{ id: 0, label: "snapshot:0", state: 1, metadata: null }], nextSnapshot: 1 })))
        .message,
      "reserved"
    )
    assert.include(
      codecError(registry.load(payload({ ...valid, selected: 2 }))).message,
      "selected 2"
    )
  })
})

describe("HistoryArtifact as a seed", () => {
  class Draft extends History.Class<Draft>("test/SeedDraft") {}
  const first = Task.sync("first", (d: unknown) => d)
  const template = Pipeline.make("seeded", first)

  it.effect("is refused at bind with a SeedError that says why and what to bind instead (bind, and a mapped source)", () =>
    Effect.gen(function*() {
      const draft = new Draft({ state: { prompt: "p" } }).checkpoint("start")
      const bound = Either.try({ try: () => template.bind(draft), catch: (e) => e })
      if (Either.isRight(bound)) return assert.fail("a HistoryArtifact seed was bound")
      const error = bound.left as SeedError
      assert.instanceOf(error, SeedError)
      assert.include(error.message, "the seed is a HistoryArtifact (Draft), which cannot be a seed")
      assert.include(error.message, "artifact.stateObject()")
      const mapped = yield* Effect.flip(Stream.runCollect(template.map([{ prompt: "ok" }, draft])))
      assert.include(mapped.message, "seed #1 is a HistoryArtifact (Draft)")
      assert.strictEqual(mapped.index, 1)
      // its state binds
      assert.strictEqual(template.bind(draft.stateObject()).seedJson, `{"prompt":"p"}`)
    }))
})
