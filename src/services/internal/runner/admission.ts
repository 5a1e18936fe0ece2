/**
 * Admission decisions: what the runner does with a pipeline spec given what the store holds
 * for its id. A data type ({@link Admission}) and a pure function ({@link decide}); the run
 * loop performs the decision (loads a checkpoint, repairs a torn terminal state, writes
 * events).
 *
 * @internal
 */
import { Data } from "effect"
import { PipelineIdentityConflict } from "../../../domain/Errors.js"
import type { PipelineRecord, PipelineState } from "../../../domain/Records.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"

/**
 * Why a pipeline is skipped: it already `succeeded` (a resume), it came twice in this run
 * (`duplicate`), or another live run owns it (`owned_by_another_run`).
 *
 * @internal
 */
export type SkipReason = "succeeded" | "duplicate" | "owned_by_another_run"

/**
 * What the run knows of the run that last wrote a pipeline's row (looked up only when a
 * decision depends on it, see {@link needsOwner}):
 * - `live`: marked running, with a heartbeat younger than `staleAfter`;
 * - `finished`: its record says it is no longer running;
 * - `silent`: no record, or marked running with a stale heartbeat.
 *
 * @internal
 */
export type OwnerStatus = "live" | "finished" | "silent"

/**
 * The decision for one spec.
 *
 * - `Skip`: not run (`owner`: the owning run, for `owned_by_another_run`);
 * - `FromSeed`: run from task 0 with the seed as input; `isNew` when the store has no row
 *   (the seed is then stored), `abandonedTask` when an attempt of a dead owner was in flight
 *   (recorded as abandoned), `event` the event to record (restart);
 * - `Resume`: run from `cursor` (> 0) with the checkpoint at `cursor - 1` as input, once
 *   loaded (a missing or unusable one restarts from the seed); `claimedFrom`: the dead owner
 *   whose in-flight pipeline is claimed;
 * - `Repair`: every task is done but the terminal state was not settled (torn write);
 * - `Corrupt`: the stored cursor is past the last task;
 * - `Conflict`: the same id with another definition or seed (stored, or earlier in this run
 *   when `duplicateInRun`).
 *
 * @internal
 */
export type Admission = Data.TaggedEnum<{
  Skip: { readonly reason: SkipReason; readonly owner: string | undefined }
  FromSeed: {
    readonly isNew: boolean
    readonly abandonedTask: boolean
    readonly event: { readonly kind: string; readonly data: unknown } | undefined
  }
  Resume: { readonly cursor: number; readonly abandonedTask: boolean; readonly claimedFrom: string | undefined }
  Repair: { readonly record: PipelineRecord }
  Corrupt: { readonly record: PipelineRecord }
  Conflict: { readonly error: PipelineIdentityConflict; readonly duplicateInRun: boolean }
}>

/**
 * Constructors and matchers of {@link Admission}.
 *
 * @internal
 */
export const Admission = Data.taggedEnum<Admission>()

/**
 * The identity of a spec as admission compares it.
 *
 * @internal
 */
export interface SpecIdentity {
  readonly pipelineId: PipelineId
  readonly specDigest: string
  readonly seedDigest: string
  readonly nTasks: number
}

/**
 * The run's admission policy (from its `RunConfig` and its store).
 *
 * @internal
 */
export interface Policy {
  readonly runId: RunId
  readonly resume: boolean
  readonly freshRestart: boolean
  readonly retrySucceeded: boolean
  /** The store holds an exclusive writer lock: a run still marked running is provably dead. */
  readonly exclusiveWriter: boolean
}

/**
 * What {@link decide} reads.
 *
 * - `earlier`: a spec with the same id admitted earlier in this run (same batch or still in
 *   flight), if any;
 * - `stored`: the store's row for the id, if any;
 * - `owner`: the status of `stored.runId` (required when {@link needsOwner} says so).
 *
 * @internal
 */
export interface DecideInput {
  readonly spec: SpecIdentity
  readonly earlier: { readonly specDigest: string; readonly seedDigest: string } | undefined
  readonly stored: PipelineRecord | undefined
  readonly owner: OwnerStatus | undefined
  readonly policy: Policy
}

const conflictOf = (
  spec: SpecIdentity,
  other: { readonly specDigest: string; readonly seedDigest: string },
  duplicateInRun: boolean
): Admission =>
  Admission.Conflict({
    error: new PipelineIdentityConflict({
      pipelineId: spec.pipelineId,
      storedSpecDigest: other.specDigest,
      specDigest: spec.specDigest,
      storedSeedDigest: other.seedDigest,
      seedDigest: spec.seedDigest
    }),
    duplicateInRun
  })

const skip = (reason: SkipReason, owner?: string): Admission => Admission.Skip({ reason, owner })
const fromSeed = (
  isNew: boolean,
  abandonedTask: boolean,
  event?: { readonly kind: string; readonly data: unknown }
): Admission => Admission.FromSeed({ isNew, abandonedTask, event })
const NEW = fromSeed(true, false)
const SKIP_SUCCEEDED = skip("succeeded")
const SKIP_DUPLICATE = skip("duplicate")

/**
 * Whether {@link decide} needs the status of the stored row's owner run: the row is `running`
 * (or `pending`, unless `freshRestart`) and was written by another run.
 *
 * @internal
 */
export const needsOwner = (stored: PipelineRecord | undefined, policy: Policy): stored is PipelineRecord =>
  stored !== undefined && stored.runId !== policy.runId &&
  (stored.state === "running" || (!policy.freshRestart && stored.state === "pending"))

/**
 * Decides what to do with one spec. Pure: the same input always gives the same decision.
 *
 * Rules, in order: a repeat within the run is skipped (`duplicate`) or, with another
 * definition or seed, a conflict; no stored row: a new pipeline from its seed; another stored
 * definition or seed: a conflict; a row this run wrote: `duplicate`. With `freshRestart`:
 * succeeded rows are skipped unless `retrySucceeded`, rows of a live owner are skipped, every
 * other row restarts from the seed (`pipeline.restarted`). Otherwise by stored state:
 * `succeeded` is skipped unless `retrySucceeded` (then restarted); `running` / `pending` rows
 * of a live owner are skipped, and so are those of a silent owner when neither `resume` nor an
 * exclusive writer allows claiming them; else they resume from their cursor (a `running` one
 * records its in-flight attempt as abandoned); `failed` / `interrupted` rows resume from their
 * cursor, or are repaired when every task is done. A cursor past the last task is `Corrupt`;
 * at the last task, `Repair`; at 0, from the seed.
 *
 * @internal
 */
export const decide = (input: DecideInput): Admission => {
  const { earlier, policy, spec, stored } = input
  if (earlier !== undefined) {
    return earlier.specDigest !== spec.specDigest || earlier.seedDigest !== spec.seedDigest
      ? conflictOf(spec, earlier, true)
      : SKIP_DUPLICATE
  }
  if (stored === undefined) return NEW
  if (stored.specDigest !== spec.specDigest || stored.seedDigest !== spec.seedDigest) {
    return conflictOf(spec, stored, false)
  }
  // A row this run wrote: the same pipeline came again after the first finished.
  if (stored.runId === policy.runId) return SKIP_DUPLICATE
  const restarted = (previousState: PipelineState) =>
    fromSeed(false, false, { kind: "pipeline.restarted", data: { discardedCursor: stored.nTasksDone, previousState } })
  if (policy.freshRestart) {
    if (stored.state === "succeeded" && !policy.retrySucceeded) return SKIP_SUCCEEDED
    if (stored.state === "running" && input.owner === "live") return skip("owned_by_another_run", stored.runId)
    return restarted(stored.state)
  }
  switch (stored.state) {
    case "succeeded":
      return policy.retrySucceeded ? restarted("succeeded") : SKIP_SUCCEEDED
    case "running":
    case "pending": {
      if (input.owner === "live") return skip("owned_by_another_run", stored.runId)
      // The owner looks gone, but without an exclusive writer claiming needs an explicit
      // resume (with one, the owner is provably dead).
      if (!policy.resume && !policy.exclusiveWriter && input.owner !== "finished") {
        return skip("owned_by_another_run", stored.runId)
      }
      return resumeFrom(spec, stored, stored.state === "running")
    }
    case "failed":
    case "interrupted":
      if (stored.nTasksDone === spec.nTasks) return Admission.Repair({ record: stored })
      return resumeFrom(spec, stored, false)
  }
}

/**
 * {@link decide} for a spec whose stored row is known, without reading it, to be `succeeded`
 * with the spec's own digests and written by an earlier run (what the store's index of
 * succeeded pipelines says, loaded before this run admitted anything): a repeat within the run
 * is skipped (`duplicate`) or a conflict, as {@link decide} says; anything else is skipped as
 * `succeeded`. Only for a policy without `retrySucceeded` (which would restart the row from
 * its stored cursor).
 *
 * @internal
 */
export const decideSucceeded = (
  spec: SpecIdentity,
  earlier: DecideInput["earlier"]
): Admission => {
  if (earlier !== undefined) {
    return earlier.specDigest !== spec.specDigest || earlier.seedDigest !== spec.seedDigest
      ? conflictOf(spec, earlier, true)
      : SKIP_DUPLICATE
  }
  return SKIP_SUCCEEDED
}

const resumeFrom = (spec: SpecIdentity, stored: PipelineRecord, abandoned: boolean): Admission => {
  const cursor = stored.nTasksDone
  if (cursor > spec.nTasks || cursor < 0) return Admission.Corrupt({ record: stored })
  if (cursor === spec.nTasks) return Admission.Repair({ record: stored })
  if (cursor === 0) return fromSeed(false, abandoned)
  return Admission.Resume({ cursor, abandonedTask: abandoned, claimedFrom: abandoned ? stored.runId : undefined })
}
