/**
 * The stored form of `pipeline.handoff` event data and ledger entries
 * (`internal/sqlite/eventText.ts`): the runner's data is stored compactly and reads back exactly
 * as its JSON would (same keys, same order, the entry address rebuilt); every other value of
 * that kind, and every other kind, reads back as `JSON.parse` of its JSON, arrays included.
 */
import { assert, describe, it } from "@effect/vitest"
import * as EventText from "../../../../src/layers/internal/sqlite/eventText.js"

const P = "0123456789abcdef0123456789abcdef"
const K = EventText.HANDOFF_EVENT_KIND

/** The data the runner writes for a transition (controlled.ts, `handOff`). */
const runnerData = (over: Record<string, unknown> = {}) => ({
  operation: "rewind",
  fromSeq: 2,
  fromTask: "t2",
  visit: 0,
  toSeq: 1,
  toTask: "t1",
  entry: `${P}:4`,
  entryReused: false,
  reason: "",
  handoffs: 1,
  limit: 1,
  ...over
})

/** Stores and reads back; asserts the result is what `JSON.parse(JSON.stringify(data))` gives, key order included. */
const roundTrip = (kind: string, pipelineId: string | null, data: unknown) => {
  const text = EventText.encodeEventData(kind, pipelineId, data)
  const back = EventText.decodeEventData(kind, pipelineId, text, true)
  const expected = data === undefined ? null : JSON.parse(JSON.stringify(data))
  assert.deepStrictEqual(back, expected)
  assert.strictEqual(JSON.stringify(back), JSON.stringify(expected))
  return text
}

describe("eventText: pipeline.handoff data", () => {
  it("the runner's data is stored positionally without the pipeline id and reads back as its JSON", () => {
    const text = roundTrip(K, P, runnerData())
    assert.strictEqual(text, `[1,"rewind",2,"t2",0,1,"t1",4,false,"",1,1]`)
    assert.isBelow(text!.length, JSON.stringify(runnerData()).length / 3)
    // the end of a traversal, the seed as entry, a reason with quotes and non-ASCII text
    roundTrip(K, P, runnerData({ operation: "end", toSeq: null, toTask: null, entry: `${P}:5`, reason: "done \"ok\" — é" }))
    assert.include(roundTrip(K, P, runnerData({ operation: "retryAll", entry: `${P}:-1`, entryReused: true })), ",-1,true,")
  })

  it("an entry that is not `<pipeline>:<seq>` of the event's own pipeline is kept whole", () => {
    for (const entry of [`${P}:3#2`, `other:4`, `${P}:04`, `${P}:`, `${P}x:4`, "4"]) {
      const text = roundTrip(K, P, runnerData({ entry }))
      assert.include(text!, JSON.stringify(entry))
    }
    // an event without a pipeline keeps the address too
    assert.include(roundTrip(K, null, runnerData())!, JSON.stringify(`${P}:4`))
  })

  it("other data of the kind is stored as JSON, arrays tagged, and reads back unchanged", () => {
    const values: ReadonlyArray<unknown> = [
      [1, "rewind", 2],
      [0, 1],
      [],
      [[1]],
      { a: 1 },
      { ...runnerData(), extra: true },
      // the same keys in another order, a missing key, a value that is not a scalar
      Object.fromEntries(Object.entries(runnerData()).reverse()),
      (({ limit: _limit, ...rest }) => rest)(runnerData()),
      runnerData({ reason: { text: "nested" } }),
      runnerData({ limit: Number.POSITIVE_INFINITY }),
      runnerData({ entry: 4 }),
      "text",
      12,
      true,
      null,
      undefined
    ]
    for (const v of values) {
      const text = roundTrip(K, P, v)
      if (Array.isArray(v)) assert.strictEqual(text, `[0,${JSON.stringify(v)}]`)
    }
    class Box {
      constructor(readonly operation: string) {}
    }
    roundTrip(K, P, new Box("rewind"))
  })

  it("other kinds are JSON as before, arrays untagged", () => {
    assert.strictEqual(roundTrip("pipeline.other", P, [1, 2]), "[1,2]")
    assert.strictEqual(roundTrip("pipeline.other", P, runnerData()), JSON.stringify(runnerData()))
  })

  it("a store before version 16 (not compact) reads its arrays of the kind as they are", () => {
    assert.deepStrictEqual(EventText.decodeEventData(K, P, "[1,2,3]", false), [1, 2, 3])
    assert.deepStrictEqual(EventText.decodeEventData(K, P, "[0,[1,2,3]]", true), [1, 2, 3])
    assert.isNull(EventText.decodeEventData(K, P, null, true))
  })
})

describe("eventText: ledger entries", () => {
  it("`<pipeline>:<entry_seq>` is stored empty and rebuilt; any other address is kept", () => {
    assert.strictEqual(EventText.encodeEntry(P, 4, `${P}:4`), "")
    assert.strictEqual(EventText.decodeEntry(P, 4, ""), `${P}:4`)
    assert.strictEqual(EventText.encodeEntry(P, -1, `${P}:-1`), "")
    assert.strictEqual(EventText.decodeEntry(P, -1, ""), `${P}:-1`)
    for (const [seq, address] of [[3, `${P}:3#1`], [4, `${P}:5`], [4, `other:4`]] as const) {
      assert.strictEqual(EventText.encodeEntry(P, seq, address), address)
      assert.strictEqual(EventText.decodeEntry(P, seq, address), address)
    }
  })
})
