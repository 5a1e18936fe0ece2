import { assert, describe, it } from "@effect/vitest"
import { PipelineRecord, type PipelineState } from "../../../../src/domain/Records.js"
import {
  type Admission,
  decide,
  type DecideInput,
  decideSucceeded,
  needsOwner,
  type OwnerStatus,
  type Policy
} from "../../../../src/services/internal/runner/admission.js"
import { pid, rid } from "../../../support/ids.js"

const spec = { pipelineId: pid("p1"), specDigest: "spec-a", seedDigest: "seed-a", nTasks: 3 }
const policy: Policy = { runId: rid("run-now"), resume: false, freshRestart: false, retrySucceeded: false, exclusiveWriter: false }

const stored = (state: PipelineState, nTasksDone: number, over: Partial<PipelineRecord> = {}) =>
  new PipelineRecord({
    pipelineId: pid("p1"),
    key: null,
    name: "n",
    state,
    nTasksDone,
    nTasksTotal: 3,
    specDigest: "spec-a",
    seedDigest: "seed-a",
    tags: {},
    attemptsTotal: 1,
    runId: rid("run-old"),
    createdAt: 0,
    updatedAt: 0,
    startedAt: 0,
    endedAt: null,
    failedTask: null,
    errorType: null,
    errorMessage: null,
    errorClass: null,
    ...over
  })

const run = (over: Partial<DecideInput>): Admission =>
  decide({ spec, earlier: undefined, stored: undefined, owner: undefined, policy, ...over })

const tagOf = (a: Admission) => a._tag

describe("admission decide (pure)", () => {
  it("a pipeline the store has never seen starts from its seed, as new", () => {
    const d = run({})
    assert.deepStrictEqual(d, run({}))
    assert.strictEqual(d._tag, "FromSeed")
    if (d._tag === "FromSeed") {
      assert.isTrue(d.isNew)
      assert.isFalse(d.abandonedTask)
      assert.isUndefined(d.event)
    }
  })

  it("a repeat within the run: identical is a duplicate skip, another definition or seed a conflict", () => {
    assert.deepInclude(run({ earlier: { specDigest: "spec-a", seedDigest: "seed-a" } }), { _tag: "Skip", reason: "duplicate" })
    const c = run({ earlier: { specDigest: "spec-b", seedDigest: "seed-a" } })
    assert.strictEqual(c._tag, "Conflict")
    if (c._tag === "Conflict") {
      assert.isTrue(c.duplicateInRun)
      assert.strictEqual(c.error.storedSpecDigest, "spec-b")
      assert.strictEqual(c.error.specDigest, "spec-a")
    }
  })

  it("a stored row with another definition or seed is a conflict (not in-run)", () => {
    const c = run({ stored: stored("succeeded", 3, { seedDigest: "seed-z" }) })
    assert.strictEqual(c._tag, "Conflict")
    if (c._tag === "Conflict") {
      assert.isFalse(c.duplicateInRun)
      assert.strictEqual(c.error.storedSeedDigest, "seed-z")
    }
  })

  it("a row this run wrote is a duplicate", () => {
    assert.deepInclude(run({ stored: stored("running", 1, { runId: rid("run-now") }) }), { _tag: "Skip", reason: "duplicate" })
  })

  it("succeeded: skipped, or restarted from the seed with retrySucceeded", () => {
    assert.deepInclude(run({ stored: stored("succeeded", 3) }), { _tag: "Skip", reason: "succeeded" })
    const d = run({ stored: stored("succeeded", 3), policy: { ...policy, retrySucceeded: true } })
    assert.strictEqual(d._tag, "FromSeed")
    if (d._tag === "FromSeed") {
      assert.isFalse(d.isNew)
      assert.deepStrictEqual(d.event, { kind: "pipeline.restarted", data: { discardedCursor: 3, previousState: "succeeded" } })
    }
  })

  it("running / pending rows: a live owner keeps them; a silent one only with resume or an exclusive writer; a finished one always", () => {
    const row = stored("running", 2)
    const owned = { _tag: "Skip", reason: "owned_by_another_run", owner: "run-old" } as const
    assert.deepInclude(run({ stored: row, owner: "live", policy: { ...policy, resume: true } }), owned)
    assert.deepInclude(run({ stored: row, owner: "silent" }), owned)
    for (const [owner, p] of [
      ["silent", { ...policy, resume: true }],
      ["silent", { ...policy, exclusiveWriter: true }],
      ["finished", policy]
    ] as const) {
      const d = run({ stored: row, owner: owner as OwnerStatus, policy: p })
      assert.deepStrictEqual(
        { tag: d._tag, ...(d._tag === "Resume" ? { cursor: d.cursor, abandoned: d.abandonedTask, from: d.claimedFrom } : {}) },
        { tag: "Resume", cursor: 2, abandoned: true, from: "run-old" }
      )
    }
    // a pending row had no attempt in flight: nothing abandoned, nothing claimed
    const pending = run({ stored: stored("pending", 1), owner: "finished" })
    assert.deepInclude(pending, { _tag: "Resume", cursor: 1, abandonedTask: false, claimedFrom: undefined })
  })

  it("failed / interrupted rows resume from their cursor, at 0 from the seed; all tasks done is a repair", () => {
    assert.deepInclude(run({ stored: stored("interrupted", 1) }), { _tag: "Resume", cursor: 1, abandonedTask: false })
    assert.deepInclude(run({ stored: stored("failed", 0) }), { _tag: "FromSeed", isNew: false, abandonedTask: false })
    assert.strictEqual(tagOf(run({ stored: stored("failed", 3) })), "Repair")
    assert.strictEqual(tagOf(run({ stored: stored("running", 3), owner: "finished" })), "Repair")
  })

  it("a cursor past the last task (or negative) is corrupt", () => {
    assert.strictEqual(tagOf(run({ stored: stored("interrupted", 4) })), "Corrupt")
    assert.strictEqual(tagOf(run({ stored: stored("running", -1), owner: "finished" })), "Corrupt")
  })

  it("freshRestart: every row restarts from the seed, except succeeded ones and those of a live owner", () => {
    const fresh = { ...policy, freshRestart: true }
    assert.deepInclude(run({ stored: stored("succeeded", 3), policy: fresh }), { _tag: "Skip", reason: "succeeded" })
    assert.deepInclude(run({ stored: stored("running", 2), owner: "live", policy: fresh }), {
      _tag: "Skip",
      reason: "owned_by_another_run"
    })
    const d = run({ stored: stored("interrupted", 2), policy: fresh })
    assert.strictEqual(d._tag, "FromSeed")
    if (d._tag === "FromSeed") {
      assert.deepStrictEqual(d.event, { kind: "pipeline.restarted", data: { discardedCursor: 2, previousState: "interrupted" } })
    }
    assert.strictEqual(tagOf(run({ stored: stored("succeeded", 3), policy: { ...fresh, retrySucceeded: true } })), "FromSeed")
  })

  it("needsOwner: only another run's running rows (and pending ones unless freshRestart)", () => {
    assert.isTrue(needsOwner(stored("running", 1), policy))
    assert.isTrue(needsOwner(stored("pending", 1), policy))
    assert.isFalse(needsOwner(stored("pending", 1), { ...policy, freshRestart: true }))
    assert.isFalse(needsOwner(stored("running", 1, { runId: rid("run-now") }), policy))
    assert.isFalse(needsOwner(stored("failed", 1), policy))
    assert.isFalse(needsOwner(undefined, policy))
  })
})

describe("admission decideSucceeded (a row the store's succeeded index vouches for)", () => {
  it("gives what decide gives for a succeeded row of an earlier run with the spec's digests, for every repeat and policy without retrySucceeded", () => {
    const earliers = [
      undefined,
      { specDigest: "spec-a", seedDigest: "seed-a" },
      { specDigest: "spec-b", seedDigest: "seed-a" },
      { specDigest: "spec-a", seedDigest: "seed-b" }
    ]
    let checked = 0
    for (const earlier of earliers) {
      for (const resume of [false, true]) {
        for (const freshRestart of [false, true]) {
          for (const exclusiveWriter of [false, true]) {
            for (const nTasksDone of [0, 2, 3]) {
              const p: Policy = { ...policy, resume, freshRestart, exclusiveWriter }
              const want = decide({ spec, earlier, stored: stored("succeeded", nTasksDone), owner: undefined, policy: p })
              assert.deepStrictEqual(decideSucceeded(spec, earlier), want)
              checked++
            }
          }
        }
      }
    }
    assert.strictEqual(checked, 96)
    assert.deepInclude(decideSucceeded(spec, undefined), { _tag: "Skip", reason: "succeeded" })
  })
})
