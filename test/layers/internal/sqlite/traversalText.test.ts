/**
 * The stored form of a traversal state (`internal/sqlite/traversalText.ts`): the compact form
 * round-trips every state the transitions make (start, success, rewind, retry-all, end,
 * restart, replay, reserved attempts), leaves the pipeline id out, falls back to the object form
 * for a state that names another pipeline, and the object form of earlier builds still reads.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as Traversal from "../../../../src/domain/Traversal.js"
import * as TraversalText from "../../../../src/layers/internal/sqlite/traversalText.js"

const P = "0123456789abcdef0123456789abcdef"
const N = 4
const at = (seq: number, visit = 0) => Traversal.address(P, seq, visit)
const right = <A>(e: Either.Either<A, unknown>): A => Either.getOrThrow(e)
const valid = Schema.decodeUnknownSync(Traversal.VisitState)

/** The states of one traversal: succeed 0, 1, 2, rewind to 1 with a payload, succeed 1, retry-all, end. */
const journey = (): ReadonlyArray<Traversal.VisitState> => {
  const out: Array<Traversal.VisitState> = []
  let s = Traversal.initial(P, N)
  const push = (next: Traversal.VisitState) => {
    out.push(next)
    s = next
  }
  out.push(s)
  push(Traversal.reserveAttempt(s))
  push(Traversal.succeed(s, 0, at(0), N))
  push(Traversal.succeed(s, 1, at(1), N))
  push(right(Traversal.transition(s, {
    operation: "rewind", fromSeq: 2, toSeq: 1, entry: at(N), payload: true, nTasks: N, limit: 5
  })))
  push(Traversal.succeed(s, 1, at(1, 1), N))
  push(right(Traversal.transition(s, {
    operation: "retryAll", fromSeq: 2, toSeq: 0, entry: s.seed, payload: false, nTasks: N, limit: 5
  })))
  push(Traversal.seedReplay(s, N))
  push(Traversal.succeed(s, 0, at(0, 2), N))
  push(right(Traversal.transition(s, {
    operation: "end", fromSeq: 1, toSeq: "end", entry: at(0, 2), payload: false, nTasks: N, limit: 5
  })))
  push(Traversal.freshRestart(s, N))
  return out
}

describe("traversalText", () => {
  it("round-trips every state of a traversal in the compact form, without the pipeline id", () => {
    for (const s of journey()) {
      const text = TraversalText.encode(P, s)
      assert.isTrue(text.startsWith("["), text)
      assert.notInclude(text, P)
      assert.deepStrictEqual(valid(TraversalText.decode(P, text)), s)
      assert.strictEqual(TraversalText.versionOf(text), s.version)
    }
    // the end: version 9, cursor 4, complete, seq 0's visit 2 active, counters, 2 handoffs, 1 payload, 3 ledger rows
    assert.strictEqual(TraversalText.encode(P, journey()[9]!), "[9,4,null,[0,2],[3,3,2,0],2,1,3,0]")
  })

  it("writes a state naming another pipeline's occurrence (or a non-canonical address) as the object", () => {
    const s = Traversal.initial(P, N)
    const foreign: ReadonlyArray<Traversal.VisitState> = [
      { ...s, seed: "other:-1" },
      { ...s, pending: { ...s.pending!, input: "other:0" } },
      { ...s, pending: { ...s.pending!, input: `${P}:01` } },
      { ...s, pending: { ...s.pending!, input: `${P}:1#0` } },
      { ...s, active: [{ seq: 0, visit: 0, artifact: at(0, 1) }] }
    ]
    for (const f of foreign) {
      const text = TraversalText.encode(P, f)
      assert.deepStrictEqual(JSON.parse(text), f)
      assert.deepStrictEqual(valid(TraversalText.decode(P, text)), f)
      assert.strictEqual(TraversalText.versionOf(text), f.version)
    }
  })

  it("reads the object form of earlier builds; a damaged text does not validate", () => {
    const s = journey()[4]!
    assert.deepStrictEqual(valid(TraversalText.decode(P, JSON.stringify(s))), s)
    assert.throws(() => TraversalText.decode(P, "[1,2"))
    for (const bad of ["[1,2,null,[0],[1],0,0,0,0]", "[1,2,[0,0,-1,0],[],[1],0,0,0,0]", "[\"1\",0,null,[],[],0,0,0,0]", "7"]) {
      assert.throws(() => valid(TraversalText.decode(P, bad)), undefined, undefined, bad)
    }
    assert.isNull(TraversalText.versionOf("7"))
  })
})
