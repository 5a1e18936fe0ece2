import { assert, describe, it } from "@effect/vitest"
import type { ConfigIssue } from "../../src/domain/Errors.js"
import * as CallCache from "../../src/domain/CallCache.js"

const task = (input: unknown) => {
  const issues: Array<ConfigIssue> = []
  return { cache: CallCache.resolveTaskCache(input, "cache", issues), issues }
}
const run = (input: unknown) => {
  const issues: Array<ConfigIssue> = []
  return { cache: CallCache.resolveRunCache(input, "run.cache", issues), issues }
}

describe("CallCache (domain)", () => {
  it("a task's declaration: true, false, a mode, { mode, ttl }; { mode: undefined } takes the run's", () => {
    assert.deepStrictEqual(task(true).cache, { mode: "readWrite", ttlMs: undefined })
    assert.deepStrictEqual(task(false).cache, { mode: "off", ttlMs: undefined })
    assert.deepStrictEqual(task("refresh").cache, { mode: "refresh", ttlMs: undefined })
    assert.deepStrictEqual(task({ ttl: "2 hours" }).cache, { mode: "readWrite", ttlMs: 7_200_000 })
    assert.deepStrictEqual(task({ mode: undefined }).cache, { mode: undefined, ttlMs: undefined })
    assert.isUndefined(task(undefined).cache)
  })

  it("bad declarations name their field", () => {
    assert.deepStrictEqual(task({ mode: "often" }).issues.map((i) => i.path), ["cache.mode"])
    assert.deepStrictEqual(task({ ttl: "soon" }).issues.map((i) => i.path), ["cache.ttl"])
    assert.deepStrictEqual(task({ ttl: 0 }).issues.map((i) => i.path), ["cache.ttl"])
    assert.deepStrictEqual(task({ mdoe: "readOnly" }).issues.map((i) => i.path), ["cache.mdoe"])
    assert.deepStrictEqual(task(3).issues.map((i) => i.path), ["cache"])
    assert.deepStrictEqual(run({ db: "" }).issues.map((i) => i.path), ["run.cache.db"])
  })

  it("effective mode: the task's off wins; a run's explicit mode overrides a declared readWrite; the default off does not", () => {
    const off = CallCache.runCacheOff
    const explicit = (mode: CallCache.CacheMode) => run(mode).cache
    const declared = task(true).cache!
    const inherits = task({ mode: undefined }).cache!
    assert.strictEqual(CallCache.effective(declared, off).mode, "readWrite")
    assert.strictEqual(CallCache.effective(inherits, off).mode, "off")
    assert.strictEqual(CallCache.effective(inherits, explicit("readWrite")).mode, "readWrite")
    assert.strictEqual(CallCache.effective(declared, explicit("refresh")).mode, "refresh")
    assert.strictEqual(CallCache.effective(declared, explicit("off")).mode, "off")
    assert.strictEqual(CallCache.effective(task("readOnly").cache!, explicit("readWrite")).mode, "readOnly")
    assert.strictEqual(CallCache.effective(task(false).cache!, explicit("readWrite")).mode, "off")
    // TTL: the task's, else the run's
    assert.strictEqual(CallCache.effective(declared, run({ ttl: 1000 }).cache).ttlMs, 1000)
    assert.strictEqual(CallCache.effective(task({ ttl: 5 }).cache!, run({ ttl: 1000 }).cache).ttlMs, 5)
  })

  it("the key depends on the material and on every part of the namespace", () => {
    const ns = { repeat: 0, visit: 0, variant: null }
    const k = CallCache.keyOf({ q: "x" }, ns)
    assert.match(k, /^[0-9a-f]{32}$/)
    assert.strictEqual(CallCache.keyOf({ q: "x" }, { ...ns }), k)
    const others = [
      CallCache.keyOf({ q: "y" }, ns),
      CallCache.keyOf({ q: "x" }, { ...ns, repeat: 1 }),
      CallCache.keyOf({ q: "x" }, { ...ns, visit: 1 }),
      CallCache.keyOf({ q: "x" }, { ...ns, variant: "v01-r0" })
    ]
    assert.strictEqual(new Set([k, ...others]).size, 5)
  })

  it("a study trial's variant leaves out the protocol version; other members have none", () => {
    assert.strictEqual(CallCache.variantOf("p3-v02-r1"), "v02-r1")
    assert.strictEqual(CallCache.variantOf("p12-prompt-a-r0"), "prompt-a-r0")
    assert.isNull(CallCache.variantOf("baseline"))
    assert.isNull(CallCache.variantOf(undefined))
  })

  it("usage is read from chat's form and from the wire form", () => {
    assert.deepStrictEqual(CallCache.usageOf({ usage: { promptTokens: 3, completionTokens: 4, totalTokens: 7 } }), {
      promptTokens: 3,
      completionTokens: 4,
      totalTokens: 7
    })
    assert.deepStrictEqual(CallCache.usageOf({ usage: { prompt_tokens: 1, completion_tokens: 2 } }), {
      promptTokens: 1,
      completionTokens: 2,
      totalTokens: 3
    })
    assert.isNull(CallCache.usageOf({ content: "x" }))
    assert.isNull(CallCache.usageOf("text"))
  })
})
