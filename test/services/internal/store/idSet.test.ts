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
