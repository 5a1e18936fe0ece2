import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { digest } from "../../../../src/domain/Json.js"
import { idSet } from "../../../../src/services/internal/store/idSet.js"

/** The 16 bytes of 32-lowercase-hex ids, one after the other (what SQL's `unhex` gives). */
const pack = (ids: ReadonlyArray<string>): Uint8Array => Buffer.from(ids.join(""), "hex")

const hexId = fc.stringMatching(/^[0-9a-f]{32}$/)
// ids that must not be confused with a packed one: other cases, lengths, characters
const otherId = fc.oneof(
  hexId.map((s) => s.toUpperCase()),
  hexId.map((s) => s.slice(1)),
  hexId.map((s) => `${s}0`),
  hexId.map((s) => `${s.slice(0, 31)}g`),
  fc.string({ maxLength: 40 })
)

describe("idSet", () => {
  it("answers exactly as a Set of the same ids, packed or not", () => {
    fc.assert(
      fc.property(
        fc.array(hexId, { maxLength: 60 }),
        fc.array(otherId, { maxLength: 10 }),
        fc.array(fc.oneof(hexId, otherId), { maxLength: 30 }),
        (packed, others, probes) => {
          const set = idSet(pack(packed), others)
          const reference = new Set([...packed, ...others])
          assert.strictEqual(set.size, reference.size)
          for (const id of [...reference, ...probes]) assert.strictEqual(set.has(id), reference.has(id), id)
        }
      ),
      { numRuns: 200, endOnFailure: true }
    )
  })

  it("answers exactly when asked in the blob's order, with other ids and repeats in between (the resume's order)", () => {
    // the set compares the id after the last one found first: a resume asks in the blob's
    // order; the answers must not depend on the order asked in
    fc.assert(
      fc.property(
        fc.array(hexId, { minLength: 1, maxLength: 60 }),
        fc.array(fc.oneof(hexId, otherId), { maxLength: 20 }),
        fc.array(fc.nat(), { maxLength: 80 }),
        (packed, strangers, cuts) => {
          const set = idSet(pack(packed), [])
          const reference = new Set(packed)
          // the blob's order, with strangers, repeats and jumps back and forth spliced in
          const probes: Array<string> = []
          packed.forEach((id, i) => {
            const c = cuts[i] ?? 0
            if (c % 5 === 1) probes.push(strangers[c % Math.max(1, strangers.length)] ?? "")
            if (c % 5 === 2) probes.push(packed[c % packed.length]!)
            probes.push(id)
            if (c % 5 === 3) probes.push(id)
          })
          for (const id of probes) assert.strictEqual(set.has(id), reference.has(id), id)
        }
      ),
      { numRuns: 200, endOnFailure: true }
    )
  })

  it("an id that differs from the next one of the blob in any word only is not found", () => {
    const ids = Array.from({ length: 6 }, (_, i) => digest(`next-${i}`))
    const set = idSet(pack(ids), [])
    assert.isTrue(set.has(ids[0]!))
    // the next id of the blob is ids[1]: change one hex digit in each of its four words
    for (const at of [0, 9, 17, 31]) {
      const c = ids[1]![at] === "0" ? "1" : "0"
      assert.isFalse(set.has(`${ids[1]!.slice(0, at)}${c}${ids[1]!.slice(at + 1)}`), `digit ${at}`)
    }
    assert.isTrue(set.has(ids[1]!))
    assert.isTrue(set.has(ids[5]!))
    assert.isTrue(set.has(ids[2]!))
    // past the end of the blob
    assert.isFalse(set.has(digest("next-6")))
  })

  it("keeps ids whose first 32 bits collide apart (one probe chain)", () => {
    const base = digest("x")
    const ids = Array.from({ length: 50 }, (_, i) => `${base.slice(0, 8)}${digest(`y${i}`).slice(8)}`)
    const set = idSet(pack(ids), [])
    assert.strictEqual(set.size, 50)
    for (const id of ids) assert.isTrue(set.has(id))
    assert.isFalse(set.has(`${base.slice(0, 8)}${digest("z").slice(8)}`))
    assert.isFalse(set.has(ids[0]!.toUpperCase()))
  })

  it("reads a blob at any byte offset (a view into a larger buffer)", () => {
    const ids = [digest("a"), digest("b")]
    const buffer = new Uint8Array(3 + 32)
    buffer.set(pack(ids), 3)
    const set = idSet(buffer.subarray(3), [])
    assert.isTrue(set.has(ids[0]!) && set.has(ids[1]!))
    assert.isFalse(set.has(digest("c")))
  })
})
