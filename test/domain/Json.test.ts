import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc, FastCheck } from "effect"
import * as Json from "../../src/domain/Json.js"
import {
  canonicalJson,
  CanonicalJsonError,
  canonicalJsonUnsafe,
  digest,
  digestFull,
  digestJson,
  isStrictJson
} from "../../src/domain/Json.js"

const canon = (u: unknown): string => canonicalJsonUnsafe(u)

/** JSON has no negative zero: canonical JSON writes -0 as 0, so compare against that. */
const withoutNegativeZero = (v: unknown): unknown =>
  Array.isArray(v)
    ? v.map(withoutNegativeZero)
    : v !== null && typeof v === "object"
    ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withoutNegativeZero(x)]))
    : Object.is(v, -0)
    ? 0
    : v

const failure = (u: unknown): CanonicalJsonError => {
  const r = canonicalJson(u)
  if (Either.isRight(r)) throw new Error(`expected a rejection, got ${r.right}`)
  return r.left
}

/** Rebuilds every object of a JSON value with its keys in a seeded random order. */
const shuffleKeys = (u: unknown, seed: number): unknown => {
  let state = seed >>> 0 || 1
  const next = () => {
    // xorshift32: any permutation source will do, it only has to vary with the seed
    state ^= state << 13
    state ^= state >>> 17
    state ^= state << 5
    return (state >>> 0) / 2 ** 32
  }
  const go = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(go)
    if (v !== null && typeof v === "object") {
      const entries = Object.entries(v)
      for (let i = entries.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1))
        const tmp = entries[i]!
        entries[i] = entries[j]!
        entries[j] = tmp
      }
      // Object.fromEntries defines own data properties, so a "__proto__" key stays a key
      return Object.fromEntries(entries.map(([k, x]) => [k, go(x)]))
    }
    return v
  }
  return go(u)
}

/**
 * A deliberately naive reference: JSON.stringify for leaves, keys sorted with the default
 * (UTF-16 code unit) order. Objects cannot be rebuilt in sorted order and handed to
 * JSON.stringify, because JS enumerates integer-like keys ("0", "10") first.
 */
const reference = (v: unknown): string => {
  if (Array.isArray(v)) return `[${v.map(reference).join(",")}]`
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>
    return `{${Object.keys(o).sort().map((k) => `${JSON.stringify(k)}:${reference(o[k])}`).join(",")}}`
  }
  return Object.is(v, -0) ? "0" : JSON.stringify(v)
}

describe("canonicalJson: golden vectors (ids must never drift across releases)", () => {
  // Digests cross-checked with Python's hashlib.blake2b over the same canonical UTF-8 bytes.
  const golden: ReadonlyArray<readonly [string, unknown, string, string]> = [
    ["null", null, "null", "7b8b2cb83a44fca258958d85f88051e4"],
    ["true", true, "true", "5c07e85b3afb949077f2fa42181bb049"],
    ["zero", 0, "0", "e9f11462495399c0b8d0d8ec7128df9c"],
    ["negative zero", -0, "0", "e9f11462495399c0b8d0d8ec7128df9c"],
    ["string", "hello", "\"hello\"", "bba7c4b7e86122d15b30287c02369a5a"],
    ["empty object", {}, "{}", "9327a492264ecac0806b031b780241d8"],
    ["empty array", [], "[]", "e15a8caac23994e7f1469a67b9debe54"],
    [
      "nested",
      { b: [1, 2.5, "x", null, false], a: { d: "é", c: -1e21 }, "": 1e-7 },
      "{\"\":1e-7,\"a\":{\"c\":-1e+21,\"d\":\"é\"},\"b\":[1,2.5,\"x\",null,false]}",
      "faff52abf59622400d83029e9f9e43b7"
    ],
    [
      "unicode",
      { "ü": "\u2028 \ud83d\ude00 \u0007 \"q\" \\", Z: 1, a: 2, "é": 3 },
      "{\"Z\":1,\"a\":2,\"é\":3,\"ü\":\"\u2028 \ud83d\ude00 \\u0007 \\\"q\\\" \\\\\"}",
      "df9af8ddaf864ef9784b2b377a6ae687"
    ],
    [
      "pipeline-like",
      { task: "ask", seed: { question: "What is 2+2?", id: 7 }, retry: { maxAttempts: 4 } },
      "{\"retry\":{\"maxAttempts\":4},\"seed\":{\"id\":7,\"question\":\"What is 2+2?\"},\"task\":\"ask\"}",
      "afb973a015ba33591a9f85e196495398"
    ]
  ]

  for (const [name, value, expected, hex] of golden) {
    it(name, () => {
      assert.strictEqual(canon(value), expected)
      assert.strictEqual(Either.getOrThrow(digestJson(value)), hex)
      assert.strictEqual(digest(expected), hex)
    })
  }

  it("digest is the first 16 bytes of BLAKE2b-512, in lowercase hex", () => {
    assert.strictEqual(digest(""), "786a02f742015903c6c6fd852552d272")
    assert.strictEqual(
      digestFull(""),
      "786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce"
    )
    assert.strictEqual(digest("abc"), "ba80a53f981c4d0d6a2797b69f12f6e9")
    assert.strictEqual(digest(new Uint8Array([0, 1, 2, 255])), "6b6209dbe60e718fbb8ae9d13c23a3ce")
    // strings are digested as their UTF-8 bytes
    assert.strictEqual(digest("é"), digest(new Uint8Array([0xc3, 0xa9])))
    assert.isTrue(digestFull("abc").startsWith(digest("abc")))
    assert.match(digestFull("x"), /^[0-9a-f]{128}$/)
  })
})

describe("canonicalJson: encoding rules", () => {
  it("sorts keys by UTF-16 code units, not by locale", () => {
    assert.strictEqual(canon({ b: 1, B: 2, a: 3, _: 4, "10": 5, "9": 6 }), "{\"10\":5,\"9\":6,\"B\":2,\"_\":4,\"a\":3,\"b\":1}")
    // U+FF5E (BMP) sorts after U+1F600's high surrogate U+D83D in code-unit order
    assert.strictEqual(canon({ "\uff5e": 1, "\ud83d\ude00": 2 }), "{\"\ud83d\ude00\":2,\"\uff5e\":1}")
  })

  it("puts integer-like keys in code-unit order too (unlike JS property order)", () => {
    assert.strictEqual(canon({ "0": "", "": false, "2": 1, "10": 2 }), "{\"\":false,\"0\":\"\",\"10\":2,\"2\":1}")
  })

  it("writes -0 as 0 everywhere", () => {
    assert.strictEqual(canon([-0, { x: -0 }]), "[0,{\"x\":0}]")
  })

  it("treats undefined properties as absent", () => {
    assert.strictEqual(canon({ a: 1, b: undefined }), canon({ a: 1 }))
  })

  it("accepts objects without a prototype and shared (non-cyclic) references", () => {
    const bare = Object.create(null) as Record<string, unknown>
    bare["k"] = 1
    assert.strictEqual(canon(bare), "{\"k\":1}")
    const shared = { v: 1 }
    assert.strictEqual(canon({ a: shared, b: [shared, shared] }), "{\"a\":{\"v\":1},\"b\":[{\"v\":1},{\"v\":1}]}")
  })

  it("escapes lone surrogates so the output is valid UTF-8", () => {
    assert.strictEqual(canon("\ud800"), "\"\\ud800\"")
  })

  it("keeps a __proto__ own key as a key", () => {
    const parsed = JSON.parse("{\"__proto__\":{\"x\":1},\"a\":2}") as unknown
    assert.strictEqual(canon(parsed), "{\"__proto__\":{\"x\":1},\"a\":2}")
  })
})

describe("canonicalJson: rejections name the path", () => {
  class Point {
    constructor(readonly x: number) {}
  }
  const sparse = [1, , 3] // eslint-disable-line no-sparse-arrays
  const cyclic: Record<string, unknown> = { a: { b: 1 } }
  ;(cyclic["a"] as Record<string, unknown>)["self"] = cyclic
  const cyclicArray: Array<unknown> = [1]
  cyclicArray.push(cyclicArray)

  const rows: ReadonlyArray<readonly [string, unknown, string, RegExp]> = [
    ["function", { a: { f: () => 1 } }, "$.a.f", /function is not JSON/],
    ["Date", { when: new Date(0) }, "$.when", /instance of Date/],
    ["Map", { m: new Map() }, "$.m", /instance of Map/],
    ["Set", [new Set([1])], "$[0]", /instance of Set/],
    ["NaN", { n: Number.NaN }, "$.n", /non-finite number NaN/],
    ["Infinity", { xs: [1, Number.POSITIVE_INFINITY] }, "$.xs[1]", /non-finite number Infinity/],
    ["-Infinity", Number.NEGATIVE_INFINITY, "$", /non-finite/],
    ["bigint", { big: 1n }, "$.big", /bigint is not JSON/],
    ["cycle", cyclic, "$.a.self", /cycle/],
    ["array cycle", cyclicArray, "$[1]", /cycle/],
    ["symbol key", { o: { [Symbol("s")]: 1 } }, "$.o", /symbol keys/],
    ["symbol value", { s: Symbol("s") }, "$.s", /symbol is not JSON/],
    ["sparse array", { xs: sparse }, "$.xs[1]", /sparse/],
    ["class instance", { p: new Point(1) }, "$.p", /instance of Point/],
    ["undefined", undefined, "$", /undefined/],
    ["undefined in an array", [undefined], "$[0]", /undefined/],
    ["boxed string", { s: new String("x") }, "$.s", /instance of String/],
    ["typed array", { b: new Uint8Array(1) }, "$.b", /plain/],
    ["quoted key path", { "a b": { "c-d": Number.NaN } }, "$[\"a b\"][\"c-d\"]", /NaN/]
  ]

  for (const [name, value, path, reason] of rows) {
    it(name, () => {
      const e = failure(value)
      assert.instanceOf(e, CanonicalJsonError)
      assert.strictEqual(e.path, path)
      assert.match(e.reason, reason)
      assert.include(e.message, path)
      assert.isFalse(isStrictJson(value))
      assert.isTrue(Either.isLeft(digestJson(value)))
    })
  }

  it("canonicalJsonUnsafe throws the CanonicalJsonError", () => {
    assert.throws(() => canonicalJsonUnsafe({ d: new Date(0) }), /not strict JSON at \$\.d/)
  })
})

describe("canonicalJson: values already in canonical order", () => {
  // such values are written by the native serializer (see isNativeCanonical); each case here
  // must come out exactly as the writer makes it, which the key-reversed copy goes through
  const reversed = (u: unknown): unknown =>
    Array.isArray(u)
      ? u.map(reversed)
      : u !== null && typeof u === "object"
      ? Object.fromEntries(Object.entries(u).reverse().map(([k, v]) => [k, reversed(v)]))
      : u

  it("gives the same text as the same value with its keys in another order", () => {
    let deep: unknown = { leaf: [1, "x", null] }
    for (let i = 0; i < 40; i++) deep = { a: deep, b: i }
    const samples: Array<unknown> = [
      { a: 1, b: "two", c: [true, false, null], d: { e: -0, f: 1.5e-7, g: "\u2028\"\\\n" } },
      { "": 0, " ": 1, A: 2, a: 3, "\u00e9": 4, "\ud83d\ude00": 5 },
      { "1": "one", "10": "ten", "2": "two" },
      Object.fromEntries([["__proto__", 1], ["z", 2]]),
      deep,
      [{ x: [], y: {} }, [[[]]]]
    ]
    for (const v of samples) assert.strictEqual(canon(v), canon(reversed(v)))
    assert.strictEqual(canon({ "1": "one", "10": "ten", "2": "two" }), "{\"1\":\"one\",\"10\":\"ten\",\"2\":\"two\"}")
    assert.strictEqual(canon({ a: -0 }), "{\"a\":0}")
  })

  it("still rejects what is not strict JSON, with its path", () => {
    assert.strictEqual(failure({ a: 1, b: [1, Number.NaN] }).path, "$.b[1]")
    assert.strictEqual(failure({ a: 1, b: undefined, c: () => 1 }).path, "$.c")
    const cyclic: Record<string, unknown> = { a: 1 }
    cyclic.b = cyclic
    assert.strictEqual(failure(cyclic).reason, "cycle")
    assert.strictEqual(failure({ a: 1, [Symbol("s")]: 2 }).reason, "symbol keys are not JSON")
    assert.strictEqual(canon({ a: 1, b: undefined }), "{\"a\":1}")
  })
})

describe("canonicalJson: properties", () => {
  const json = fc.jsonValue({ maxDepth: 4 })

  it.prop("key order does not matter", [json, fc.integer()], ([value, seed]) => {
    assert.strictEqual(canon(shuffleKeys(value, seed)), canon(value))
    assert.strictEqual(Either.getOrThrow(digestJson(shuffleKeys(value, seed))), Either.getOrThrow(digestJson(value)))
  }, { fastCheck: { numRuns: 300 } })

  it.prop("round trip: JSON.parse(canonical(x)) deep-equals x", [json], ([value]) => {
    assert.deepStrictEqual(JSON.parse(canon(value)), withoutNegativeZero(value))
  }, { fastCheck: { numRuns: 300 } })

  it.prop("agrees with a naive sorted-keys JSON.stringify reference", [json], ([value]) => {
    assert.strictEqual(canon(value), reference(value))
  }, { fastCheck: { numRuns: 300 } })

  it.prop("is idempotent and its digest deterministic", [json], ([value]) => {
    const c = canon(value)
    assert.strictEqual(canon(JSON.parse(c)), c)
    assert.strictEqual(Either.getOrThrow(digestJson(value)), digest(c))
    assert.strictEqual(Either.getOrThrow(digestJson(structuredClone(value))), digest(c))
    assert.match(digest(c), /^[0-9a-f]{32}$/)
  }, { fastCheck: { numRuns: 300 } })

  it.prop("different canonical forms have different digests", [json, json], ([a, b]) => {
    fc.pre(canon(a) !== canon(b))
    assert.notStrictEqual(Either.getOrThrow(digestJson(a)), Either.getOrThrow(digestJson(b)))
  }, { fastCheck: { numRuns: 200 } })
})

describe("canonicalJsonBytes (issue 19 §3: no intermediate copy of big strings)", () => {
  const big = (n: number, fill: string) => fill.repeat(Math.ceil(n / fill.length)).slice(0, n)
  const same = (v: unknown) => {
    const bytes = Either.getOrThrow(Json.canonicalJsonBytes(v))
    const text = Either.getOrThrow(Json.canonicalJson(v))
    assert.isTrue(Buffer.from(bytes).equals(Buffer.from(text, "utf8")))
  }

  it.prop("the same bytes as the UTF-8 of canonicalJson", [FastCheck.jsonValue()], ([v]) => {
    same(v)
    return true
  })

  it("big strings, escaped or not, ASCII or not, nested, keyed, in arrays", () => {
    const samples = [
      big(70_000, "a"),
      big(70_000, "é漢"),
      big(70_000, "a\"b"),
      big(70_000, "line\n"),
      big(70_000, "\u0001"),
      big(70_000, "😀"),
      big(70_000, "x") + "\ud800",
      { text: big(100_000, "z"), n: 1, list: [big(65_536, "q"), "small", big(80_000, "\\")] },
      [big(65_536, "k"), { [big(70_000, "key")]: big(70_000, "v") }]
    ]
    for (const v of samples) same(v)
    const e = Json.canonicalJsonBytes({ a: [big(70_000, "a"), () => 1] })
    assert.isTrue(Either.isLeft(e))
  })
})
