/**
 * Suite identity (src/domain/Suite.ts): id rules, member digests and pipeline ids, routing by
 * prefix, and tagging a spec into a member.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck, Schema } from "effect"
import { canonicalJsonUnsafe, digest } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Suite from "../../src/domain/Suite.js"
import * as Task from "../../src/domain/Task.js"

describe("checkId", () => {
  it("accepts letters, digits, - and _, starting with a letter or digit, up to 80 characters", () => {
    for (const ok of ["a", "Z", "0", "baseline", "candidate-2", "gpt_4o-mini", "9lives", "x".repeat(80), "CONSOLE", "COM10", "LPTX", "nul_"]) {
      assert.isUndefined(Suite.checkId(ok), ok)
    }
  })

  it("refuses empty, too long, a bad first character and characters outside the set, saying which", () => {
    assert.strictEqual(Suite.checkId(""), "must not be empty")
    assert.strictEqual(Suite.checkId("x".repeat(81)), "is longer than 80 characters (81)")
    assert.strictEqual(Suite.checkId("-a"), "must start with an ASCII letter or digit")
    assert.strictEqual(Suite.checkId("_a"), "must start with an ASCII letter or digit")
    assert.match(Suite.checkId("a b")!, /contains " "/)
    assert.match(Suite.checkId("a/b")!, /contains "\/"/)
    assert.match(Suite.checkId("a.b")!, /contains "\."/)
    assert.match(Suite.checkId("ünï")!, /contains "ü"/)
    assert.match(Suite.checkId("a:b")!, /contains ":"/)
  })

  it("refuses the Windows device names in any case", () => {
    for (const bad of ["CON", "con", "Prn", "aux", "NUL", "COM1", "com9", "LPT1", "lpt9", "COM0", "LPT0"]) {
      assert.match(Suite.checkId(bad) ?? "", /reserved device name/, bad)
    }
  })

  it("is what the Id Schema checks, with the reason in the message", () => {
    assert.isTrue(Either.isRight(Schema.decodeUnknownEither(Suite.Id)("baseline")))
    const bad = Schema.decodeUnknownEither(Suite.Id)("con")
    assert.isTrue(Either.isLeft(bad))
    if (Either.isLeft(bad)) assert.include(bad.left.message, "reserved device name")
  })

  it("idKey folds case (uniqueness is case-insensitive)", () => {
    assert.strictEqual(Suite.idKey("Baseline"), Suite.idKey("baseLINE"))
    assert.notStrictEqual(Suite.idKey("a-b"), Suite.idKey("a_b"))
  })
})

describe("member pipeline ids", () => {
  it("memberDigest is 12 hex of the digest of [format, suite, member]", () => {
    const d = Suite.memberDigest("cmp", "baseline")
    assert.match(d, /^[0-9a-f]{12}$/)
    assert.strictEqual(d, digest(canonicalJsonUnsafe(["assay-suite-member-v1", "cmp", "baseline"])).slice(0, 12))
    assert.notStrictEqual(d, Suite.memberDigest("cmp", "candidate"))
    assert.notStrictEqual(d, Suite.memberDigest("cmp2", "baseline"))
    // no ambiguity from concatenation
    assert.notStrictEqual(Suite.memberDigest("ab", "c"), Suite.memberDigest("a", "bc"))
  })

  it("memberPipelineId = memberDigest + '-' + digest(localKey), routable by its prefix", () => {
    const id = Suite.memberPipelineId("cmp", "baseline", "k1")
    assert.strictEqual(id, `${Suite.memberDigest("cmp", "baseline")}-${digest("k1")}`)
    assert.strictEqual(id.length, 45)
    assert.strictEqual(Suite.memberDigestOf(id), Suite.memberDigest("cmp", "baseline"))
    assert.notStrictEqual(id, Suite.memberPipelineId("cmp", "candidate", "k1"))
    assert.notStrictEqual(id, Suite.memberPipelineId("cmp", "baseline", "k2"))
  })

  it("memberDigestOf is undefined for ids that are not suite-shaped", () => {
    for (const id of ["", "k1", digest("x"), `${"a".repeat(12)}-short`, `${"A".repeat(12)}-${digest("x")}`, `x${Suite.memberPipelineId("s", "e", "k")}`]) {
      assert.isUndefined(Suite.memberDigestOf(id), id)
    }
  })

  it("every member pipeline id routes back to its member (property)", () => {
    const id = FastCheck.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_-]{0,20}$/)
    FastCheck.assert(FastCheck.property(id, id, FastCheck.string(), (s, e, k) => {
      const pid = Suite.memberPipelineId(s, e, k)
      return Suite.memberDigestOf(pid) === Suite.memberDigest(s, e) && pid === Suite.memberPipelineId(s, e, k)
    }))
  })

  it("privatePoolName is experiment:ID:NAME", () => {
    assert.strictEqual(Suite.privatePoolName("baseline", "apis"), "experiment:baseline:apis")
  })
})

describe("tagSpec", () => {
  const double = Task.sync("double", (n: number) => n * 2)
  const template = Pipeline.make("numbers", double)
  const m = { suiteId: "numbers", experimentId: "first", poolAliases: { apis: "shared" }, outputDir: "/tmp/out" }

  it("re-keys the spec, keeps seed, repeat, template and explicitKey, records the local key", () => {
    const spec = template.bind(3, { repeat: 2 })
    const tagged = Suite.tagSpec(spec, m)
    const expected = Suite.memberPipelineId("numbers", "first", spec.key)
    assert.strictEqual(tagged.pipelineId, expected)
    assert.strictEqual(tagged.key, expected)
    assert.strictEqual(tagged.seed, 3)
    assert.strictEqual(tagged.repeat, 2)
    assert.strictEqual(tagged.template, template)
    assert.strictEqual(tagged.seedDigest, spec.seedDigest)
    assert.strictEqual(tagged.specDigest, spec.specDigest)
    assert.isFalse(tagged.explicitKey)
    assert.deepStrictEqual(tagged.member, { ...m, localKey: spec.key })
    assert.isTrue(Object.isFrozen(tagged))
    assert.isUndefined(spec.member, "the original is untouched")
    assert.strictEqual(spec.pipelineId, Pipeline.defaultPipelineId(spec.specDigest, spec.seedDigest, 2))
  })

  it("keeps an explicit key as the local key", () => {
    const tagged = Suite.tagSpec(template.bind(1, { key: "row-7" }), m)
    assert.isTrue(tagged.explicitKey)
    assert.strictEqual(tagged.member?.localKey, "row-7")
    assert.strictEqual(tagged.pipelineId, Suite.memberPipelineId("numbers", "first", "row-7"))
  })

  it("the same sample in two members gives two pipelines; a template rename changes nothing", () => {
    const a = Suite.tagSpec(template.bind(5), m)
    const b = Suite.tagSpec(template.bind(5), { ...m, experimentId: "second" })
    assert.notStrictEqual(a.pipelineId, b.pipelineId)
    const renamed = Pipeline.make("renamed", double)
    assert.strictEqual(Suite.tagSpec(renamed.bind(5), m).pipelineId, a.pipelineId)
  })

  it("tagging a tagged spec starts from the original local key", () => {
    const once = Suite.tagSpec(template.bind(4), m)
    const twice = Suite.tagSpec(once, { ...m, experimentId: "second" })
    assert.strictEqual(twice.member?.localKey, template.bind(4).key)
    assert.strictEqual(twice.pipelineId, Suite.memberPipelineId("numbers", "second", template.bind(4).key))
    assert.strictEqual(Suite.tagSpec(once, m).pipelineId, once.pipelineId)
  })
})
