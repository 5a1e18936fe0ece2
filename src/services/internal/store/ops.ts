/**
 * The write operations both stores commit through their group-commit writer, and the pure
 * helpers that apply a pipeline patch.
 *
 * @since 0.1.0
 */
import { PipelineRecord, trusted } from "../../../domain/Records.js"
import type { CheckpointUnit, InitialTraversal, NewArtifact, PipelineFields, PipelinePatch, SettleInput, TaskFields } from "../../Store.js"
import type { PlacedArtifact } from "./shared.js"

/**
 * One queued write. A checkpoint carries its artifact already placed by the backend.
 *
 * @since 0.1.0
 * @category models
 */
export type WriteOp =
  | {
    readonly _tag: "Admit"
    readonly pipelines: ReadonlyArray<PipelineFields>
    readonly seeds: ReadonlyArray<readonly [NewArtifact, PlacedArtifact]>
    readonly traversals: ReadonlyArray<InitialTraversal>
  }
  | {
    readonly _tag: "Checkpoint"
    readonly unit: CheckpointUnit
    readonly placed: PlacedArtifact | undefined
    /** The traversal entry payload, placed (only when `unit.traversal.entry` is set). */
    readonly entryPlaced?: PlacedArtifact | undefined
  }
  | { readonly _tag: "PutTask"; readonly task: TaskFields }
  | { readonly _tag: "Patch"; readonly pipelineId: string; readonly patch: PipelinePatch }
  | { readonly _tag: "Settle"; readonly pipelineId: string; readonly settle: SettleInput }
  | { readonly _tag: "MarkFinal"; readonly pipelineId: string; readonly seq: number }

/**
 * Turns a settle into the equivalent patch (error fields cleared).
 *
 * @since 0.1.0
 * @category models
 */
export const settleToPatch = (s: SettleInput): PipelinePatch => ({
  state: s.state,
  nTasksDone: s.nTasksDone,
  runId: s.runId,
  endedAt: s.endedAt,
  error: null,
  updatedAt: s.endedAt
})

/**
 * Applies a patch to a pipeline record (pure; the result is built with `trusted`).
 *
 * @since 0.1.0
 * @category models
 */
export const applyPatch = (p: PipelineRecord, patch: PipelinePatch): PipelineRecord => {
  const err = patch.error
  return trusted(PipelineRecord, {
    ...p,
    state: patch.state ?? p.state,
    nTasksDone: patch.nTasksDone ?? p.nTasksDone,
    runId: patch.runId ?? p.runId,
    startedAt: patch.startedAt !== undefined ? patch.startedAt : p.startedAt,
    endedAt: patch.endedAt !== undefined ? patch.endedAt : p.endedAt,
    failedTask: err === undefined ? p.failedTask : err === null ? null : err.failedTask,
    errorType: err === undefined ? p.errorType : err === null ? null : err.errorType,
    errorMessage: err === undefined ? p.errorMessage : err === null ? null : err.errorMessage,
    errorClass: err === undefined ? p.errorClass : err === null ? null : err.errorClass,
    attemptsTotal: p.attemptsTotal + (patch.attemptsDelta ?? 0),
    updatedAt: patch.updatedAt
  })
}
