import { assert, describe, it } from "@effect/vitest"
import { Equal, FastCheck, Hash, Schema } from "effect"
import { ArtifactRecord, PipelineRecord, type PipelineState, TaskRecord, trusted } from "../../src/domain/Records.js"
import { pid, rid } from "../support/ids.js"

const pipelineArb = FastCheck.record({
  pipelineId: FastCheck.string().map(pid),
  key: FastCheck.option(FastCheck.string(), { nil: null }),
  name: FastCheck.string(),
  state: FastCheck.constantFrom("pending", "running", "succeeded", "failed", "interrupted") as FastCheck.Arbitrary<PipelineState>,
  nTasksDone: FastCheck.nat(),
  nTasksTotal: FastCheck.nat(),
  specDigest: FastCheck.string(),
  seedDigest: FastCheck.string(),
  // A "__proto__" key is excluded: a validated Schema construction rebuilds the record with
  // ordinary assignment and drops an own "__proto__" key, while `trusted` keeps exactly what the
  // store wrote, so the two forms differ on that one key by design.
  tags: FastCheck.dictionary(FastCheck.string().filter((k) => k !== "__proto__"), FastCheck.string()),
  attemptsTotal: FastCheck.nat(),
  runId: FastCheck.string().map(rid),
  createdAt: FastCheck.integer(),
  updatedAt: FastCheck.integer(),
  startedAt: FastCheck.option(FastCheck.integer(), { nil: null }),
  endedAt: FastCheck.option(FastCheck.integer(), { nil: null }),
  failedTask: FastCheck.option(FastCheck.string(), { nil: null }),
  errorType: FastCheck.option(FastCheck.string(), { nil: null }),
  errorMessage: FastCheck.option(FastCheck.string(), { nil: null }),
  errorClass: FastCheck.option(FastCheck.string(), { nil: null }),
  repeat: FastCheck.option(FastCheck.nat(), { nil: null }),
  // the suite member columns: the stores always give them (null outside a suite)
  suiteId: FastCheck.option(FastCheck.string(), { nil: null }),
  experimentId: FastCheck.option(FastCheck.string(), { nil: null }),
  localKey: FastCheck.option(FastCheck.string(), { nil: null })
})

describe("Records.trusted", () => {
  it.prop("equals the constructed instance: instanceof, Equal, Hash, own keys, Schema encoding", [pipelineArb], ([fields]) => {
    // `true`: validation off, as the stores did. A validated construction copies nested objects
    // (`tags`), and Data equality compares nested plain objects by reference.
    const built = new PipelineRecord(fields, true)
    const fast = trusted(PipelineRecord, fields)
    assert.instanceOf(fast, PipelineRecord)
    assert.isTrue(Equal.equals(fast, built))
    assert.isTrue(Equal.equals(built, fast))
    assert.strictEqual(Hash.hash(fast), Hash.hash(built))
    assert.deepStrictEqual(Object.keys(fast).sort(), Object.keys(built).sort())
    assert.deepStrictEqual(Schema.encodeSync(PipelineRecord)(fast), Schema.encodeSync(PipelineRecord)(built))
    assert.deepStrictEqual({ ...fast }, { ...built })
    assert.deepStrictEqual({ ...fast }, { ...new PipelineRecord(fields) }, "same fields as a validated construction")
  })

  it("differs from an instance with other field values, and copies its input", () => {
    const fields = {
      taskRunId: "t", pipelineId: pid("p"), runId: rid("r"), seq: 0, taskName: "a", state: "succeeded" as const, attemptsUsed: 1,
      startedAt: 1, endedAt: 2, durationMs: 1, errorType: null, errorMessage: null, errorClass: null, leaseIds: ["l"]
    }
    const a = trusted(TaskRecord, fields)
    assert.isFalse(Equal.equals(a, trusted(TaskRecord, { ...fields, seq: 1 })))
    assert.isFalse(Equal.equals(a, new ArtifactRecord({
      artifactId: 1, pipelineId: pid("p"), runId: rid("r"), seq: 0, taskName: null, typeName: "x", codec: "json", digest: "d",
      size: 0, storage: "none", blobRef: null, isFinal: false, available: false, createdAt: 0
    })))
    fields.seq = 5
    assert.strictEqual(a.seq, 0)
  })
})
