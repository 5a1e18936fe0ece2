/**
 * The store front's `spend`: what a queued op lets go of once its batch is done (the group
 * commit's `spent`), so that a dead op V8 allocated in its old generation keeps no unit, row or
 * payload alive through the next scavenge (BENCHMARKS.md, perf13ad).
 */
import { assert, describe, it } from "@effect/vitest"
import type { CheckpointUnit, PipelineFields } from "../../../../src/services/Store.js"
import type { QueuedOp } from "../../../../src/services/internal/store/front.js"
import { spend } from "../../../../src/services/internal/store/front.js"
import type { PlacedArtifact } from "../../../../src/services/internal/store/shared.js"
import { artifact, pipeline, task } from "../../../layers/StoreContract.js"

const bytes = (s: string) => new TextEncoder().encode(s)
const placed = (s: string): PlacedArtifact => ({ storage: "inline", blobRef: null, payload: bytes(s) } as unknown as PlacedArtifact)

describe("front spend", () => {
  it("empties a checkpoint, an admission and every op of a group, never the unit or rows they held", () => {
    const unit: CheckpointUnit = {
      pipelineId: pipeline("p").pipelineId,
      artifact: artifact("p", 0, bytes("out")),
      task: task("p", 0),
      traversal: undefined
    }
    const unitBefore = structuredClone(unit)
    const row: PipelineFields = pipeline("p")
    const pipelines = [row]
    const seeds = [[artifact("p", -1, bytes("seed")), placed("seed")] as const]
    const checkpoint = { _tag: "Checkpoint", unit, placed: placed("out"), entryPlaced: placed("entry") } as const
    const admit = { _tag: "Admit", pipelines, seeds, traversals: [] } as const
    const group: QueuedOp = { _tag: "Group", ops: [admit, checkpoint] }
    spend(group)
    assert.deepStrictEqual({ ...checkpoint }, { _tag: "Checkpoint", unit: undefined, placed: undefined, entryPlaced: undefined })
    assert.deepStrictEqual({ ...admit }, { _tag: "Admit", pipelines: [], seeds: [], traversals: [] })
    // the group keeps its (emptied) ops; the caller's unit, row and arrays are untouched
    assert.strictEqual(group.ops.length, 2)
    assert.deepStrictEqual(unit, unitBefore)
    assert.strictEqual(pipelines.length, 1)
    assert.strictEqual(pipelines[0], row)
    assert.strictEqual(seeds.length, 1)
    // a single checkpoint op, and ops that hold nothing worth dropping, are fine too
    const alone: QueuedOp = { _tag: "Checkpoint", unit, placed: undefined }
    spend(alone)
    assert.isUndefined((alone as { unit?: unknown }).unit)
    const patch: QueuedOp = { _tag: "Patch", pipelineId: "p", patch: { updatedAt: 1 } }
    spend(patch)
    assert.deepStrictEqual(patch, { _tag: "Patch", pipelineId: "p", patch: { updatedAt: 1 } })
  })
})
