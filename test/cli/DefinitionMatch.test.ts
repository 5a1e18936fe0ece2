/**
 * C16's notice (what run, resume and validate say when the store's pipelines are of another
 * definition), from the counts a store returns.
 */
import { assert, describe, it } from "@effect/vitest"
import * as DefinitionMatch from "../../src/cli/DefinitionMatch.js"

const NEW = "1a2b3c4d00000000000000000000000f"
const OLD = "9f8e7d6c00000000000000000000000e"

describe("DefinitionMatch", () => {
  it("none match: how many stored, how many start from their seed, the other definition", () => {
    const m = DefinitionMatch.matchOf([{ specDigest: OLD, pipelines: 10 }], NEW)
    assert.deepStrictEqual([m.matching, m.stored, m.others.length], [0, 10, 1])
    assert.strictEqual(
      DefinitionMatch.message(m, { command: "resume", total: 10, keyed: false }),
      "resume: 0 of 10 stored pipelines match this definition (spec 1a2b3c4d); 10 will start from their seed; " +
        "the store also holds 10 pipelines of another definition (spec 9f8e7d6c)"
    )
    assert.strictEqual(
      DefinitionMatch.message(m, { command: "validate", total: 10, keyed: false, store: "/x/runs/s.db" }),
      "validate: 0 of 10 stored pipelines in s.db match this definition (spec 1a2b3c4d); 10 would start from their seed; " +
        "the store also holds 10 pipelines of another definition (spec 9f8e7d6c)"
    )
  })

  it("nothing to say for an empty store or one holding only this definition", () => {
    assert.isUndefined(DefinitionMatch.message(DefinitionMatch.matchOf([], NEW), { command: "run", total: 5, keyed: false }))
    assert.isUndefined(
      DefinitionMatch.message(DefinitionMatch.matchOf([{ specDigest: NEW, pipelines: 4 }], NEW), { command: "resume", total: 10, keyed: false })
    )
  })

  it("some match: a lower bound of the new ones; an unknown total; several other definitions; a keyed source", () => {
    const m = DefinitionMatch.matchOf([{ specDigest: OLD, pipelines: 6 }, { specDigest: NEW, pipelines: 3 }, { specDigest: "abcdef1234", pipelines: 1 }], NEW)
    const text = DefinitionMatch.message(m, { command: "run", total: 10, keyed: false })!
    assert.include(text, "run: 3 of 10 stored pipelines match this definition (spec 1a2b3c4d); at least 7 will start from their seed")
    assert.include(text, "the store also holds 7 pipelines of 2 other definitions (spec 9f8e7d6c: 6, spec abcdef12: 1)")
    assert.include(DefinitionMatch.message(m, { command: "run", total: undefined, keyed: false })!, "the source's pipelines that are not among them will start")
    assert.include(DefinitionMatch.message(m, { command: "run", total: 2, keyed: false })!, "the source's pipelines that are not among them will start")
    const keyed = DefinitionMatch.message(m, { command: "resume", total: 10, keyed: true })!
    assert.include(keyed, "identity conflict (exit 2)")
    assert.include(keyed, "its own store")
  })
})
