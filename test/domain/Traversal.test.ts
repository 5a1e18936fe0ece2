import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc, Schema } from "effect"
import * as Traversal from "../../src/domain/Traversal.js"

const id = "p1"
const n = 3
const right = <A>(e: Either.Either<A, unknown>): A => {
  if (Either.isLeft(e)) throw new Error(`expected Right, got Left(${String(e.left)})`)
  return e.right
}

const rewindTo = (s: Traversal.VisitState, toSeq: number, limit: number, payload = true) =>
  Traversal.transition(s, {
    operation: "rewind",
    fromSeq: s.pending!.seq,
    toSeq,
    entry: Traversal.address(id, n + s.payloads, 0),
    payload,
    nTasks: n,
    limit
  })

describe("Traversal", () => {
  it("address: visit 0 without suffix, revisits with #visit; parseAddress inverts it", () => {
    assert.strictEqual(Traversal.address("a:b", 2, 0), "a:b:2")
    assert.strictEqual(Traversal.address("a:b", 2, 3), "a:b:2#3")
    assert.strictEqual(Traversal.address("a", -1, 0), "a:-1")
    assert.deepStrictEqual(Traversal.parseAddress("a:b:2#3"), { pipelineId: "a:b", seq: 2, visit: 3 })
    assert.deepStrictEqual(Traversal.parseAddress("a:-1"), { pipelineId: "a", seq: -1, visit: 0 })
    assert.isUndefined(Traversal.parseAddress("a:2#0"))
    assert.isUndefined(Traversal.parseAddress("a:02"))
    assert.isUndefined(Traversal.parseAddress(":2"))
    assert.isUndefined(Traversal.parseAddress("nocolon"))
  })

  it("initial: seq 0 visit 0 on the seed, attempt 1 reserved", () => {
    const s = Traversal.initial(id, n)
    assert.deepStrictEqual(s.pending, { seq: 0, visit: 0, input: "p1:-1", attempts: 1 })
    assert.deepStrictEqual(s.counters, [1, 0, 0])
    assert.strictEqual(s.version, 0)
    assert.strictEqual(s.cursor, 0)
    assert.strictEqual(s.seed, "p1:-1")
    assert.isTrue(Schema.is(Traversal.VisitState)(s))
  })

  it("reserveAttempt and succeed walk the stations; the last success completes", () => {
    let s = Traversal.reserveAttempt(Traversal.initial(id, n))
    assert.strictEqual(s.pending!.attempts, 2)
    s = Traversal.succeed(s, 0, "p1:0", n)
    assert.deepStrictEqual(s.pending, { seq: 1, visit: 0, input: "p1:0", attempts: 1 })
    assert.strictEqual(s.cursor, 1)
    s = Traversal.succeed(Traversal.succeed(s, 1, "p1:1", n), 2, "p1:2", n)
    assert.isNull(s.pending)
    assert.strictEqual(s.cursor, n)
    assert.deepStrictEqual(s.active.map((a) => a.artifact), ["p1:0", "p1:1", "p1:2"])
    assert.strictEqual(s.version, 4)
    assert.throws(() => Traversal.reserveAttempt(s))
    assert.throws(() => Traversal.succeed(Traversal.initial(id, n), 1, "p1:1", n))
  })

  it("rewind invalidates target..end and enters the target as a new visit on the payload", () => {
    let s = Traversal.succeed(Traversal.succeed(Traversal.initial(id, n), 0, "p1:0", n), 1, "p1:1", n)
    s = right(rewindTo(s, 1, 5))
    assert.deepStrictEqual(s.active.map((a) => a.seq), [0])
    assert.deepStrictEqual(s.pending, { seq: 1, visit: 1, input: "p1:3", attempts: 1 })
    assert.strictEqual(s.cursor, 1)
    assert.strictEqual(s.handoffs, 1)
    assert.strictEqual(s.payloads, 1)
    assert.strictEqual(s.ledger, 1)
    assert.isTrue(Traversal.hasRevisit(s))
  })

  it("budget: exactly N transitions allowed, the N+1th refused before anything changes; end at the limit", () => {
    const limit = 2
    let s = Traversal.succeed(Traversal.initial(id, n), 0, "p1:0", n)
    s = right(rewindTo(s, 0, limit))
    s = Traversal.succeed(s, 0, "p1:0#1", n)
    s = right(rewindTo(s, 0, limit))
    s = Traversal.succeed(s, 0, "p1:0#2", n)
    assert.strictEqual(s.handoffs, 2)
    assert.deepStrictEqual(rewindTo(s, 0, limit), Either.left("budget"))
    const ended = right(Traversal.transition(s, {
      operation: "end",
      fromSeq: 1,
      toSeq: "end",
      entry: "p1:0#2",
      payload: false,
      nTasks: n,
      limit
    }))
    assert.isNull(ended.pending)
    assert.strictEqual(ended.cursor, n)
    assert.strictEqual(ended.handoffs, 2)
    assert.strictEqual(ended.ledger, 3)
  })

  it("retryAll restarts at seq 0 on the seed; forward 'to' keeps active slots", () => {
    let s = Traversal.succeed(Traversal.initial(id, n), 0, "p1:0", n)
    const fwd = right(Traversal.transition(s, {
      operation: "to", fromSeq: 1, toSeq: 2, entry: "p1:0", payload: false, nTasks: n, limit: 9
    }))
    assert.deepStrictEqual(fwd.active.map((a) => a.seq), [0])
    assert.deepStrictEqual(fwd.pending, { seq: 2, visit: 0, input: "p1:0", attempts: 1 })
    s = right(Traversal.transition(s, {
      operation: "retryAll", fromSeq: 1, toSeq: 0, entry: s.seed, payload: false, nTasks: n, limit: 9
    }))
    assert.deepStrictEqual(s.pending, { seq: 0, visit: 1, input: "p1:-1", attempts: 1 })
    assert.deepStrictEqual(s.active, [])
    assert.strictEqual(s.payloads, 0)
  })

  it("freshRestart: new budget, floor at the ledger, counters kept; seedReplay keeps the budget", () => {
    let s = Traversal.succeed(Traversal.initial(id, n), 0, "p1:0", n)
    s = right(rewindTo(s, 0, 9))
    const replay = Traversal.seedReplay(s, n)
    assert.strictEqual(replay.handoffs, 1)
    assert.strictEqual(replay.floor, 0)
    assert.deepStrictEqual(replay.pending, { seq: 0, visit: 2, input: "p1:-1", attempts: 1 })
    assert.deepStrictEqual(replay.active, [])
    const fresh = Traversal.freshRestart(s, n)
    assert.strictEqual(fresh.handoffs, 0)
    assert.strictEqual(fresh.floor, 1)
    assert.strictEqual(fresh.ledger, 1)
    assert.deepStrictEqual(fresh.counters, [3, 1, 0])
    assert.strictEqual(fresh.cursor, 0)
  })

  // a random walk of legal moves: the invariants that hold after every one of them
  const Move = fc.oneof(
    fc.constant({ _tag: "retry" as const }),
    fc.constant({ _tag: "succeed" as const }),
    fc.record({ _tag: fc.constant("rewind" as const), to: fc.nat(n - 1), payload: fc.boolean() }),
    fc.record({ _tag: fc.constant("forward" as const), by: fc.integer({ min: 1, max: n }) }),
    fc.constant({ _tag: "retryAll" as const }),
    fc.constant({ _tag: "end" as const }),
    fc.constant({ _tag: "fresh" as const }),
    fc.constant({ _tag: "replay" as const })
  )

  it("property: counters and versions only grow, visits match counters, budget never exceeds the limit", () => {
    fc.assert(
      fc.property(fc.array(Move, { maxLength: 40 }), fc.integer({ min: 0, max: 6 }), (moves, limit) => {
        let s = Traversal.initial(id, n)
        for (const m of moves) {
          const before = s
          let next: Traversal.VisitState | "budget" | undefined
          const p = s.pending
          if (m._tag === "fresh") next = Traversal.freshRestart(s, n)
          else if (m._tag === "replay") next = Traversal.seedReplay(s, n)
          else if (p === null) continue
          else if (m._tag === "retry") next = Traversal.reserveAttempt(s)
          else if (m._tag === "succeed") next = Traversal.succeed(s, p.seq, Traversal.address(id, p.seq, p.visit), n)
          else {
            const t: Traversal.TransitionInput | undefined = m._tag === "rewind" ?
              (m.to < p.seq ?
                {
                  operation: "rewind",
                  fromSeq: p.seq,
                  toSeq: m.to,
                  entry: m.payload ? Traversal.address(id, n + s.payloads, 0) : s.seed,
                  payload: m.payload,
                  nTasks: n,
                  limit
                } :
                undefined) :
              m._tag === "forward" ?
              (p.seq + m.by < n ?
                { operation: "to", fromSeq: p.seq, toSeq: p.seq + m.by, entry: p.input, payload: false, nTasks: n, limit } :
                undefined) :
              m._tag === "retryAll" ?
              { operation: "retryAll", fromSeq: p.seq, toSeq: 0, entry: s.seed, payload: false, nTasks: n, limit } :
              p.seq < n - 1 ?
              { operation: "end", fromSeq: p.seq, toSeq: "end", entry: p.input, payload: false, nTasks: n, limit } :
              undefined
            if (t === undefined) continue
            const r = Traversal.transition(s, t)
            next = Either.isLeft(r) ? "budget" : r.right
            if (next === "budget") {
              // refused only when the budget is spent, never for `end`
              if (t.toSeq === "end" || s.handoffs < limit) return false
              continue
            }
          }
          s = next
          if (s.version !== before.version + 1) return false
          if (s.counters.some((c, i) => c < (before.counters[i] ?? 0))) return false
          if (s.ledger < before.ledger || s.payloads < before.payloads) return false
          if (s.handoffs > Math.max(limit, before.handoffs)) return false
          if (s.pending !== null && s.pending.visit !== s.counters[s.pending.seq]! - 1) return false
          if (s.pending !== null && s.cursor !== s.pending.seq) return false
          if (s.active.some((a) => a.seq >= s.cursor)) return false
          if (s.floor > s.ledger) return false
          if (!Schema.is(Traversal.VisitState)(s)) return false
        }
        return true
      }),
      { numRuns: 300 }
    )
  })
})
