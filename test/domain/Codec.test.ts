import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc, Schema } from "effect"
import { ArtifactCodecError } from "../../src/domain/Errors.js"
import {
  BytesCodec,
  type Codec,
  CodecRegistry,
  derivedTypeName,
  Encoded,
  JsonCodec,
  outputTypeName,
  SchemaCodec,
  schemaStructure,
  schemaTypeName
} from "../../src/domain/Codec.js"

const text = (data: Uint8Array) => new TextDecoder().decode(data)
const bytes = (s: string) => new TextEncoder().encode(s)

/** JSON has no negative zero: canonical JSON writes -0 as 0, so compare against that. */
const withoutNegativeZero = (v: unknown): unknown =>
  Array.isArray(v)
    ? v.map(withoutNegativeZero)
    : v !== null && typeof v === "object"
    ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withoutNegativeZero(x)]))
    : Object.is(v, -0)
    ? 0
    : v

const right = <A>(e: Either.Either<A, ArtifactCodecError>): A => {
  if (Either.isLeft(e)) throw new Error(`expected success, got ${e.left.message}`)
  return e.right
}
const left = <A>(e: Either.Either<A, ArtifactCodecError>): ArtifactCodecError => {
  if (Either.isRight(e)) throw new Error("expected an ArtifactCodecError")
  assert.instanceOf(e.left, ArtifactCodecError)
  return e.left
}

class Verdict extends Schema.Class<Verdict>("test/Verdict")({
  label: Schema.Literal("spam", "ham"),
  score: Schema.Number,
  at: Schema.DateFromString
}) {
  get isSpam(): boolean {
    return this.label === "spam"
  }
}

class Point {
  constructor(readonly x: number, readonly y: number) {}
}
class Point3 extends Point {
  constructor(x: number, y: number, readonly z: number) {
    super(x, y)
  }
}

/** A codec writing points as "x,y" text. */
const pointCodec = (name: string): Codec => ({
  name,
  canEncode: (u) => u instanceof Point,
  encode: (u) => Either.right(bytes(`${(u as Point).x},${(u as Point).y}`)),
  decode: (data) => {
    const m = /^(-?\d+),(-?\d+)$/.exec(text(data))
    return m === null
      ? Either.left(new ArtifactCodecError({ codec: name, typeName: "Point", message: "not x,y" }))
      : Either.right(new Point(Number(m[1]), Number(m[2])))
  },
  typeNameOf: () => "Point"
})

/** A codec that claims every object (a careless general-purpose codec). */
const greedyCodec: Codec = {
  name: "greedy",
  canEncode: (u) => typeof u === "object" && u !== null,
  encode: () => Either.right(bytes("greedy")),
  decode: () => Either.right("greedy"),
  typeNameOf: () => "any"
}

describe("built-in codecs", () => {
  it("JSON writes canonical UTF-8 bytes and reads them back", () => {
    const registry = CodecRegistry.default()
    const value = { b: [1, "é"], a: null }
    const encoded = right(registry.dump(value))
    assert.deepStrictEqual({ ...encoded, data: text(encoded.data) }, {
      typeName: "json",
      codec: "json",
      data: "{\"a\":null,\"b\":[1,\"é\"]}"
    })
    assert.deepStrictEqual(right(registry.load(encoded)), value)
  })

  it("JSON refuses non-strict values with the offending path", () => {
    const e = left(CodecRegistry.default().dump({ rows: [{ at: new Date(0) }] }))
    assert.strictEqual(e.codec, "json")
    assert.include(e.message, "$.rows[0].at")
    assert.include(left(JsonCodec.encode({ n: Number.NaN })).message, "$.n")
  })

  it("bytes round trip (Uint8Array and Buffer)", () => {
    const registry = CodecRegistry.default()
    const data = new Uint8Array([0, 1, 2, 254, 255])
    const encoded = right(registry.dump(data))
    assert.strictEqual(encoded.codec, "bytes")
    assert.strictEqual(encoded.typeName, "bytes")
    assert.deepStrictEqual(right(registry.load(encoded)), data)
    const buffer = Buffer.from("hello")
    const fromBuffer = right(registry.dump(buffer))
    assert.strictEqual(fromBuffer.codec, "bytes")
    assert.strictEqual(text(right(registry.load(fromBuffer)) as Uint8Array), "hello")
  })

  it.prop("bytes and JSON round trips", [fc.uint8Array(), fc.jsonValue({ maxDepth: 3 })], ([data, json]) => {
    const registry = CodecRegistry.default()
    assert.deepStrictEqual(right(registry.load(right(registry.dump(data)))), data)
    assert.deepStrictEqual(right(registry.load(right(registry.dump(json)))), withoutNegativeZero(json))
  })

  it("an empty registry has only the JSON fallback", () => {
    const registry = CodecRegistry.empty()
    assert.deepStrictEqual(registry.names(), ["json"])
    assert.strictEqual(registry.codecFor(new Uint8Array(1)), JsonCodec)
    assert.deepStrictEqual(CodecRegistry.default().names(), ["json", "bytes"])
    assert.strictEqual(CodecRegistry.default().codecFor(new Uint8Array(1)), BytesCodec)
  })

  it("Encoded is a Schema", () => {
    const e = { typeName: "json", codec: "json", data: new Uint8Array([49]) }
    assert.deepStrictEqual(Schema.decodeUnknownSync(Encoded)(e), e)
    assert.throws(() => Schema.decodeUnknownSync(Encoded)({ ...e, data: "1" }))
  })
})

describe("codec selection", () => {
  it("JSON is the fallback", () => {
    assert.strictEqual(CodecRegistry.default().codecFor({ a: 1 }), JsonCodec)
    assert.strictEqual(CodecRegistry.default().codecFor(new Point(1, 2)), JsonCodec)
    // ...and refuses what it cannot write: never a silent wrong value
    const e = left(CodecRegistry.default().dump(new Point(1, 2)))
    assert.include(e.message, "instance of Point")
  })

  it("a claiming codec beats the JSON fallback", () => {
    const registry = CodecRegistry.default().register(pointCodec("point"))
    const encoded = right(registry.dump(new Point(3, -4)))
    assert.deepStrictEqual({ ...encoded, data: text(encoded.data) }, { typeName: "Point", codec: "point", data: "3,-4" })
    const back = right(registry.load(encoded))
    assert.instanceOf(back, Point)
    assert.deepStrictEqual(back, new Point(3, -4))
    // values it does not claim still go to JSON
    assert.strictEqual(registry.codecFor({ x: 1 }), JsonCodec)
  })

  it("a claiming codec beats even JSON on strict-JSON values, so it is never dead code", () => {
    const registry = CodecRegistry.default().register(greedyCodec)
    assert.strictEqual(registry.codecFor({ a: 1 }).name, "greedy")
  })

  it("the latest claiming registration wins", () => {
    const a = pointCodec("point-a")
    const b = pointCodec("point-b")
    assert.strictEqual(CodecRegistry.default().register(a).register(b).codecFor(new Point(0, 0)), b)
    assert.strictEqual(CodecRegistry.default().register(b).register(a).codecFor(new Point(0, 0)), a)
    // a later general codec beats an earlier specialised one too
    assert.strictEqual(CodecRegistry.default().register(a).register(greedyCodec).codecFor(new Point(0, 0)), greedyCodec)
  })

  it("an explicit forTypes binding beats every claim, whatever the order", () => {
    const bound = pointCodec("point-bound")
    const registry = CodecRegistry.default().register(bound, { forTypes: [Point] }).register(greedyCodec)
    assert.strictEqual(registry.codecFor(new Point(1, 1)), bound)
    // the binding applies to subclasses through the prototype chain
    assert.strictEqual(registry.codecFor(new Point3(1, 1, 1)), bound)
    // other objects go to the claiming codec
    assert.strictEqual(registry.codecFor({ a: 1 }), greedyCodec)
  })

  it("a binding to the exact constructor beats one to an ancestor", () => {
    const forBase = pointCodec("base")
    const forSub = pointCodec("sub")
    const registry = CodecRegistry.default().register(forSub, { forTypes: [Point3] }).register(forBase, {
      forTypes: [Point]
    })
    assert.strictEqual(registry.codecFor(new Point3(1, 1, 1)), forSub)
    assert.strictEqual(registry.codecFor(new Point(1, 1)), forBase)
  })

  it("a binding applies even when the codec does not claim the value", () => {
    const picky: Codec = { ...pointCodec("picky"), canEncode: () => false }
    const registry = CodecRegistry.default().register(picky, { forTypes: [Point] })
    assert.strictEqual(registry.codecFor(new Point(1, 1)), picky)
  })

  it("registries are immutable values", () => {
    const base = CodecRegistry.default()
    const extended = base.register(pointCodec("point"))
    assert.strictEqual(base.codecFor(new Point(1, 1)), JsonCodec)
    assert.strictEqual(extended.codecFor(new Point(1, 1)).name, "point")
  })

  it("typeNameOf: the codec's type name, else the constructor name", () => {
    const noTypeName: Codec = { ...pointCodec("pt"), typeNameOf: undefined }
    const registry = CodecRegistry.default().register(noTypeName)
    assert.strictEqual(registry.typeNameOf(new Point3(1, 2, 3)), "Point3")
    assert.strictEqual(registry.typeNameOf({ a: 1 }), "json")
    assert.strictEqual(registry.typeNameOf(new Uint8Array()), "bytes")
    assert.strictEqual(right(registry.dump(new Point(1, 2))).typeName, "Point")
  })

  it("a codec that throws becomes an ArtifactCodecError", () => {
    const throwing: Codec = {
      name: "throwing",
      canEncode: (u) => u instanceof Point,
      encode: () => {
        throw new Error("kaboom")
      },
      decode: () => {
        throw new Error("kaboom on read")
      }
    }
    const registry = CodecRegistry.default().register(throwing)
    assert.include(left(registry.dump(new Point(1, 1))).message, "kaboom")
    const e = left(registry.load({ codec: "throwing", typeName: "Point", data: new Uint8Array() }))
    assert.include(e.message, "kaboom on read")
  })
})

describe("schema codecs", () => {
  const verdict = new Verdict({ label: "spam", score: 0.93, at: new Date("2025-01-02T03:04:05.000Z") })

  it("the type name is the schema's identifier", () => {
    assert.strictEqual(schemaTypeName(Verdict), "test/Verdict")
    assert.strictEqual(schemaTypeName(Schema.Struct({ a: Schema.Number }).annotations({ identifier: "A" })), "A")
    assert.isUndefined(schemaTypeName(Schema.Struct({ a: Schema.Number })))
    assert.throws(() => SchemaCodec(Schema.Struct({ a: Schema.Number })), /identifier/)
    assert.strictEqual(SchemaCodec(Schema.Struct({ a: Schema.Number }), { typeName: "Anon" }).typeName, "Anon")
  })

  it("a Schema.Class round trip returns an instance of the class", () => {
    const registry = CodecRegistry.default().registerSchema(Verdict)
    const encoded = right(registry.dump(verdict))
    assert.strictEqual(encoded.codec, "schema")
    assert.strictEqual(encoded.typeName, "test/Verdict")
    assert.strictEqual(text(encoded.data), "{\"at\":\"2025-01-02T03:04:05.000Z\",\"label\":\"spam\",\"score\":0.93}")
    const back = right(registry.load(encoded))
    assert.instanceOf(back, Verdict)
    assert.isTrue((back as Verdict).isSpam)
    assert.instanceOf((back as Verdict).at, Date)
    assert.deepStrictEqual(back, verdict)
  })

  it("without registration a class instance is refused, not flattened to a dict", () => {
    const e = left(CodecRegistry.default().dump(verdict))
    assert.include(e.message, "instance of Verdict")
  })

  it("an unregistered schema type name cannot be loaded", () => {
    const encoded = right(CodecRegistry.default().registerSchema(Verdict).dump(verdict))
    const e = left(CodecRegistry.default().load(encoded))
    assert.strictEqual(e.codec, "schema")
    assert.strictEqual(e.typeName, "test/Verdict")
    assert.include(e.message, "no schema registered")
  })

  it("bytes that do not decode as the schema are refused", () => {
    const registry = CodecRegistry.default().registerSchema(Verdict)
    const wrongShape = left(registry.load({ codec: "schema", typeName: "test/Verdict", data: bytes("{\"label\":\"x\"}") }))
    assert.include(wrongShape.message, "cannot decode as test/Verdict")
    const notJson = left(registry.load({ codec: "schema", typeName: "test/Verdict", data: bytes("{nope") }))
    assert.include(notJson.message, "JSON")
  })

  it("a value the schema cannot encode is refused", () => {
    const registry = CodecRegistry.default().registerSchema(Verdict)
    const bad = new Verdict({ label: "maybe" as "ham", score: 1, at: new Date(0) }, { disableValidation: true })
    assert.include(left(registry.dump(bad)).message, "cannot encode as test/Verdict")
  })

  it("registering the same schema twice is a no-op", () => {
    const once = CodecRegistry.default().registerSchema(Verdict)
    assert.strictEqual(once.registerSchema(Verdict), once)
  })

  it("a struct schema claims matching plain values; the latest schema wins", () => {
    const A = Schema.Struct({ n: Schema.Number }).annotations({ identifier: "A" })
    const B = Schema.Struct({ n: Schema.Number, s: Schema.optional(Schema.String) }).annotations({ identifier: "B" })
    const registry = CodecRegistry.default().registerSchema(A).registerSchema(B)
    assert.strictEqual(right(registry.dump({ n: 1 })).typeName, "B")
    assert.strictEqual(right(registry.dump({ other: 1 })).codec, "json")
    // a value with more fields than the schema declares is not claimed (nothing is trimmed)
    const richer = right(registry.dump({ n: 1, extra: true }))
    assert.strictEqual(richer.codec, "json")
    assert.deepStrictEqual(right(registry.load(richer)), { n: 1, extra: true })
    // payloads of both stay loadable by their recorded type names
    const encodedA = right(CodecRegistry.default().registerSchema(A).dump({ n: 2 }))
    assert.deepStrictEqual(right(registry.load(encodedA)), { n: 2 })
  })
})

describe("load failures", () => {
  it("an unknown codec name", () => {
    const e = left(CodecRegistry.default().load({ codec: "npy", typeName: "ndarray", data: new Uint8Array() }))
    assert.strictEqual(e.codec, "npy")
    assert.include(e.message, "no codec named \"npy\"")
  })

  it("corrupt JSON bytes: invalid UTF-8 and invalid JSON", () => {
    const registry = CodecRegistry.default()
    assert.include(left(registry.load({ codec: "json", typeName: "json", data: new Uint8Array([0xff, 0xfe]) })).message, "JSON")
    assert.include(left(registry.load({ codec: "json", typeName: "json", data: bytes("{\"a\":") })).message, "JSON")
  })

  it("a custom codec's own decode failure", () => {
    const registry = CodecRegistry.default().register(pointCodec("point"))
    const e = left(registry.load({ codec: "point", typeName: "Point", data: bytes("nope") }))
    assert.strictEqual(e.message, "not x,y")
  })
})

describe("type names derived for a task's output Schema without an identifier", () => {
  const answer = () => Schema.Struct({ n: Schema.Number, correct: Schema.Boolean, label: Schema.optional(Schema.String) })

  it("are fixed for a given task name and structure (a resumed run in another process reads the same name)", () => {
    // the literal pins the derivation: changing it would make every stored checkpoint of such a
    // task unreadable by the next release
    assert.strictEqual(derivedTypeName("answer", answer()), "answer:output:247d5ecb07b3")
    assert.strictEqual(derivedTypeName("answer", answer()), derivedTypeName("answer", answer()))
    // titles and descriptions are not structure
    assert.strictEqual(
      derivedTypeName("answer", answer().annotations({ description: "one answer" })),
      derivedTypeName("answer", answer())
    )
  })

  it("differ by task name and by any change of structure", () => {
    const base = derivedTypeName("answer", answer())
    const variants = [
      derivedTypeName("judge", answer()),
      derivedTypeName("answer", Schema.Struct({ n: Schema.Number, correct: Schema.Boolean, label: Schema.String })),
      derivedTypeName("answer", Schema.Struct({ n: Schema.Number, right: Schema.Boolean, label: Schema.optional(Schema.String) })),
      derivedTypeName("answer", Schema.Struct({ n: Schema.Int, correct: Schema.Boolean, label: Schema.optional(Schema.String) })),
      derivedTypeName("answer", Schema.Struct({ n: Schema.NumberFromString, correct: Schema.Boolean, label: Schema.optional(Schema.String) })),
      derivedTypeName("answer", Schema.Struct({ n: Schema.Number, correct: Schema.Literal(true), label: Schema.optional(Schema.String) }))
    ]
    assert.strictEqual(new Set([base, ...variants]).size, variants.length + 1)
  })

  it("terminate on a recursive schema", () => {
    interface Tree {
      readonly name: string
      readonly kids: ReadonlyArray<Tree>
    }
    const Tree: Schema.Schema<Tree> = Schema.Struct({ name: Schema.String, kids: Schema.Array(Schema.suspend(() => Tree)) })
    assert.include(schemaStructure(Tree), "^0")
    assert.match(derivedTypeName("tree", Tree), /^tree:output:[0-9a-f]{12}$/)
  })

  it("are used only when the schema has no name of its own", () => {
    class Verdict extends Schema.Class<Verdict>("Verdict")({ label: Schema.String }) {}
    assert.strictEqual(outputTypeName("judge", Verdict), "Verdict")
    assert.strictEqual(outputTypeName("judge", answer().annotations({ identifier: "Answer" })), "Answer")
    assert.strictEqual(outputTypeName("answer", answer()), derivedTypeName("answer", answer()))
  })

  it("a payload written under an earlier structure reads as unusable bytes, not as a missing registration", () => {
    const old = CodecRegistry.default().registerSchema(answer(), { typeName: outputTypeName("answer", answer()) })
    const encoded = right(old.dump({ n: 1, correct: true }))
    const changed = Schema.Struct({ n: Schema.Number, correct: Schema.Boolean, score: Schema.optional(Schema.Number) })
    const now = CodecRegistry.default().registerSchema(changed, { typeName: outputTypeName("answer", changed) })
    const e = left(now.load(encoded))
    assert.isFalse(e.unregistered === true)
    assert.include(e.message, "earlier structure of task answer's output Schema")
    // a registry that knows no schema of that task: a registration left out
    assert.isTrue(left(CodecRegistry.default().load(encoded)).unregistered)
    // the same structure, rebuilt: read back
    const again = CodecRegistry.default().registerSchema(answer(), { typeName: outputTypeName("answer", answer()) })
    assert.deepStrictEqual(right(again.load(encoded)), { n: 1, correct: true })
  })
})
