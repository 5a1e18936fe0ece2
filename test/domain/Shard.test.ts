import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, FastCheck as fc, Stream } from "effect"
import { ConfigError } from "../../src/domain/Errors.js"
import { inShard, parseShard, shardIndex, shardSpecs, shardStorePath } from "../../src/domain/Shard.js"

describe("shardIndex", () => {
  // Pinned literally: these equal int.from_bytes(blake2b(key).digest(), "big") % count, checked
  // with Python's hashlib. A change here re-shards every existing dataset.
  const golden: ReadonlyArray<readonly [string, ReadonlyArray<number>]> = [
    ["", [0, 2, 2, 2, 8, 518]],
    ["a", [0, 0, 0, 5, 0, 780]],
    ["pipeline-0", [0, 1, 0, 0, 4, 804]],
    ["pipeline-1", [0, 2, 0, 6, 4, 904]],
    ["pipeline-2", [0, 2, 0, 6, 2, 632]],
    ["0123456789abcdef0123456789abcdef", [1, 1, 1, 6, 1, 421]],
    ["é", [0, 2, 2, 2, 4, 454]]
  ]
  const counts = [2, 3, 4, 7, 10, 1000]

  for (const [key, expected] of golden) {
    it(`golden assignment of ${JSON.stringify(key)}`, () => {
      assert.deepStrictEqual(counts.map((c) => shardIndex(key, c)), expected)
    })
  }

  it.prop("is in range and deterministic", [fc.string({ unit: "grapheme" }), fc.integer({ min: 1, max: 10_000 })], ([key, count]) => {
    const i = shardIndex(key, count)
    assert.isTrue(Number.isInteger(i))
    assert.isAtLeast(i, 0)
    assert.isBelow(i, count)
    assert.strictEqual(shardIndex(key, count), i)
  })

  it.prop("inShard holds for exactly one index", [fc.string(), fc.integer({ min: 1, max: 16 })], ([key, count]) => {
    const owners = Array.from({ length: count }, (_, i) => i).filter((i) => inShard(key, i, count))
    assert.deepStrictEqual(owners, [shardIndex(key, count)])
  })

  it.prop("stable under a count that divides: shard mod k of the finer split", [fc.string(), fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 8 })], ([key, k, m]) => {
    // (h mod (k*m)) mod k == h mod k: a key's shard in k is determined by its shard in k*m
    assert.strictEqual(shardIndex(key, k * m) % k, shardIndex(key, k))
  })

  it("count 1 puts everything in shard 0", () => {
    assert.strictEqual(shardIndex("anything", 1), 0)
    assert.isTrue(inShard("anything", 0, 1))
  })

  it("refuses a count that is not an integer >= 1", () => {
    assert.throws(() => shardIndex("k", 0), RangeError)
    assert.throws(() => shardIndex("k", 2.5), RangeError)
    assert.throws(() => shardIndex("k", Number.NaN), RangeError)
  })

  it("balances statistically", () => {
    const counts = [0, 0, 0, 0]
    for (let i = 0; i < 4000; i++) counts[shardIndex(`pipeline-${i}`, 4)]! += 1
    for (const c of counts) {
      // expected 1000 each; a 5-sigma band (sigma ≈ 27) keeps this deterministic test meaningful
      assert.isAbove(c, 860)
      assert.isBelow(c, 1140)
    }
  })
})

describe("shardSpecs", () => {
  const specs = Array.from({ length: 60 }, (_, i) => ({ id: `pipeline-${i}` }))

  it.effect("the shards of a stream partition it, keeping order", () =>
    Effect.gen(function*() {
      const shards: Array<Array<string>> = []
      for (let index = 0; index < 4; index++) {
        const got = yield* Stream.runCollect(shardSpecs(Stream.fromIterable(specs), index, 4, (s) => s.id))
        const ids = Chunk.toReadonlyArray(got).map((s) => s.id)
        for (const id of ids) assert.strictEqual(shardIndex(id, 4), index)
        shards.push(ids)
      }
      const all = shards.flat()
      assert.strictEqual(all.length, specs.length)
      assert.deepStrictEqual([...all].sort(), specs.map((s) => s.id).sort())
      for (const ids of shards) {
        const positions = ids.map((id) => specs.findIndex((s) => s.id === id))
        assert.deepStrictEqual(positions, [...positions].sort((a, b) => a - b))
      }
    }))

  it.effect("keeps the stream's errors", () =>
    Effect.gen(function*() {
      const failing = Stream.concat(Stream.fromIterable(specs), Stream.fail("boom" as const))
      const result = yield* Effect.either(Stream.runCollect(shardSpecs(failing, 0, 2, (s) => s.id)))
      assert.deepStrictEqual(result, Either.left("boom"))
    }))
})

describe("parseShard", () => {
  it("parses INDEX/COUNT", () => {
    assert.deepStrictEqual(parseShard("0/4"), Either.right({ index: 0, count: 4 }))
    assert.deepStrictEqual(parseShard("3/4"), Either.right({ index: 3, count: 4 }))
    assert.deepStrictEqual(parseShard(" 1 / 2 "), Either.right({ index: 1, count: 2 }))
    assert.deepStrictEqual(parseShard("0/1"), Either.right({ index: 0, count: 1 }))
  })

  const refused: ReadonlyArray<readonly [string, RegExp]> = [
    ["4/4", /between 0 and 3/],
    ["5/4", /between 0 and 3/],
    ["0/0", /at least 1/],
    ["-1/4", /INDEX\/COUNT/],
    ["1.5/4", /INDEX\/COUNT/],
    ["a/4", /INDEX\/COUNT/],
    ["4", /INDEX\/COUNT/],
    ["0/4/8", /INDEX\/COUNT/],
    ["", /INDEX\/COUNT/],
    ["99999999999999999999/100000000000000000000", /too large/]
  ]
  for (const [text, message] of refused) {
    it(`refuses ${JSON.stringify(text)} with a ConfigError`, () => {
      const r = parseShard(text)
      assert.isTrue(Either.isLeft(r))
      if (Either.isLeft(r)) {
        assert.instanceOf(r.left, ConfigError)
        assert.match(r.left.message, message)
        assert.include(r.left.message, JSON.stringify(text))
        assert.strictEqual(r.left.issues[0]?.path, "shard")
        assert.include(r.left.issues[0]?.suggestion ?? "", "0/4")
      }
    })
  }
})

describe("shardStorePath", () => {
  const cases: ReadonlyArray<readonly [string, number, number, string]> = [
    ["runs/qa.db", 0, 4, "runs/qa.shard0of4.db"],
    ["runs/qa.db", 3, 4, "runs/qa.shard3of4.db"],
    ["qa.db", 1, 2, "qa.shard1of2.db"],
    ["runs/qa", 0, 4, "runs/qa.shard0of4"],
    ["runs.v2/qa", 0, 4, "runs.v2/qa.shard0of4"],
    ["runs.v2/qa.sqlite", 2, 3, "runs.v2/qa.shard2of3.sqlite"],
    ["/abs/path.d/store.db", 0, 2, "/abs/path.d/store.shard0of2.db"],
    [".cache/.store", 0, 2, ".cache/.store.shard0of2"],
    ["archive.tar.gz", 0, 2, "archive.tar.shard0of2.gz"],
    ["C:\\runs.x\\qa.db", 1, 2, "C:\\runs.x\\qa.shard1of2.db"],
    [":memory:", 0, 4, ":memory:"]
  ]
  for (const [base, index, count, expected] of cases) {
    it(`${base} → ${expected}`, () => {
      assert.strictEqual(shardStorePath(base, index, count), expected)
    })
  }

  it("gives each shard its own path", () => {
    const paths = new Set(Array.from({ length: 8 }, (_, i) => shardStorePath("runs/qa.db", i, 8)))
    assert.strictEqual(paths.size, 8)
  })
})
