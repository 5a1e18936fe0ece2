/**
 * Traversal state of a pipeline that declares `control`: which station runs next, on which
 * input, which results are currently valid, how many entries each station has had and how much
 * of the control budget is spent. Plain pipelines have none.
 *
 * The state is durable: the store keeps it with the pipeline row and replaces it only through
 * a version-checked checkpoint (`CheckpointUnit.traversal`). Every function here is pure and
 * returns the next state with `version + 1`; the runner computes the next state, the store
 * commits it atomically with the rows it describes.
 *
 * Vocabulary:
 * - a **station** is a task seq; each fresh entry into a station is a new **visit**
 *   (0 on the first entry, then 1, 2, ...); retries of a failed attempt stay in the same visit;
 * - an **occurrence address** names one artifact occurrence: `pipelineId:seq` for visit 0,
 *   `pipelineId:seq#visit` for later visits ({@link address}). The seed is `pipelineId:-1`;
 *   handoff payloads live at `seq = nTasks + k` (k = 0, 1, ... per pipeline, always visit 0);
 * - the **pending entry** is the next station to run with its exact input and the last attempt
 *   number reserved for it (attempt numbers are reserved durably before a task runs, so a kill
 *   leaves gaps but never reuses a number);
 * - **active slots** are the currently valid outputs, one per station at most; a rewind to `t`
 *   (or a retry-all, `t = 0`) drops the slots of `t` and later stations (they become history).
 *
 * @since 0.1.0
 */
import { Either, Schema } from "effect"
import type { Operation } from "./Handoff.js"

const Count = Schema.Int.pipe(Schema.nonNegative())

/**
 * The next station to run: its seq, the visit it will run as, the occurrence address of its
 * exact input and the highest attempt number reserved for it (1 when the entry is created).
 *
 * @since 0.1.0
 * @category models
 */
export const PendingEntry = Schema.Struct({
  seq: Count,
  visit: Count,
  input: Schema.String,
  attempts: Schema.Int.pipe(Schema.positive())
})

/**
 * @since 0.1.0
 * @category models
 */
export type PendingEntry = typeof PendingEntry.Type

/**
 * A currently valid station output: the station's seq, the visit that produced it and the
 * occurrence address of the artifact.
 *
 * @since 0.1.0
 * @category models
 */
export const ActiveSlot = Schema.Struct({
  seq: Count,
  visit: Count,
  artifact: Schema.String
})

/**
 * @since 0.1.0
 * @category models
 */
export type ActiveSlot = typeof ActiveSlot.Type

/**
 * The durable traversal state of one control pipeline.
 *
 * - `seed`: the occurrence address of the seed (`pipelineId:-1`), the entry of seq 0 on a
 *   start, a retry-all, a restart or a seed replay;
 * - `version`: incremented by every transition function; the store refuses a write whose
 *   expected version is not the stored one;
 * - `cursor`: the position: the seq of the pending entry, or `nTasks` once the traversal is
 *   complete (it is a position, not a count of finished tasks: it moves back on a rewind);
 * - `pending`: the next entry, `null` when complete;
 * - `active`: valid outputs, ascending by seq;
 * - `counters`: per seq, entries made so far (the next entry's visit); they only grow, also
 *   across restarts;
 * - `handoffs`: transitions consumed from the current budget (an `end` consumes none);
 * - `payloads`: handoff payloads written so far (the next payload's seq is `nTasks + payloads`);
 * - `ledger`: ledger rows this pipeline committed, over every budget lifetime;
 * - `floor`: the value of `ledger` at the last {@link freshRestart}: the pipeline's first
 *   `floor` ledger rows belong to earlier lifetimes.
 *
 * @since 0.1.0
 * @category models
 */
export const VisitState = Schema.Struct({
  seed: Schema.String,
  version: Count,
  cursor: Count,
  pending: Schema.NullOr(PendingEntry),
  active: Schema.Array(ActiveSlot),
  counters: Schema.Array(Count),
  handoffs: Count,
  payloads: Count,
  ledger: Count,
  floor: Count
})

/**
 * @since 0.1.0
 * @category models
 */
export type VisitState = typeof VisitState.Type

/**
 * The occurrence address of an artifact: `pipelineId:seq` for visit 0, `pipelineId:seq#visit`
 * for a revisit. `address(id, -1, 0)` is the seed.
 *
 * @param pipelineId - the pipeline id.
 * @param seq - the station (or payload) seq; `-1` for the seed.
 * @param visit - the visit, 0 for the first entry.
 * @returns the address string.
 *
 * @since 0.1.0
 * @category constructors
 */
export const address = (pipelineId: string, seq: number, visit: number): string =>
  visit === 0 ? `${pipelineId}:${seq}` : `${pipelineId}:${seq}#${visit}`

/**
 * Splits an occurrence address into its pipeline id, seq and visit (the inverse of
 * {@link address}); `undefined` when the text is not an address. Pipeline ids may
 * contain `:`, so the seq is the text after the last `:`.
 *
 * @param text - an occurrence address.
 * @returns `{ pipelineId, seq, visit }`, or `undefined` for a malformed address.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseAddress = (
  text: string
): { readonly pipelineId: string; readonly seq: number; readonly visit: number } | undefined => {
  const colon = text.lastIndexOf(":")
  if (colon <= 0) return undefined
  const rest = text.slice(colon + 1)
  const m = /^(-1|0|[1-9][0-9]*)(?:#([1-9][0-9]*))?$/.exec(rest)
  if (m === null) return undefined
  return { pipelineId: text.slice(0, colon), seq: Number(m[1]), visit: m[2] === undefined ? 0 : Number(m[2]) }
}

/**
 * The state of a control pipeline before its first task: the pending entry is seq 0, visit 0,
 * on the seed (`pipelineId:-1`), attempt 1 reserved; nothing active; budget untouched.
 *
 * @param pipelineId - the pipeline id (names the seed address).
 * @param nTasks - the number of tasks (≥ 1).
 * @returns the initial state, version 0.
 *
 * @since 0.1.0
 * @category constructors
 */
export const initial = (pipelineId: string, nTasks: number): VisitState => ({
  seed: address(pipelineId, -1, 0),
  version: 0,
  cursor: 0,
  pending: { seq: 0, visit: 0, input: address(pipelineId, -1, 0), attempts: 1 },
  active: [],
  counters: Array.from({ length: nTasks }, (_, i) => (i === 0 ? 1 : 0)),
  handoffs: 0,
  payloads: 0,
  ledger: 0,
  floor: 0
})

const cover = (counters: ReadonlyArray<number>, nTasks: number): ReadonlyArray<number> =>
  counters.length >= nTasks ? counters : [...counters, ...Array.from({ length: nTasks - counters.length }, () => 0)]

const bump = (counters: ReadonlyArray<number>, seq: number): ReadonlyArray<number> => {
  const next = counters.slice()
  while (next.length <= seq) next.push(0)
  next[seq] = next[seq]! + 1
  return next
}

/** A new pending entry at `seq` on `input` (visit = entries made so far); counters advanced. */
const enter = (
  counters: ReadonlyArray<number>,
  seq: number,
  input: string
): { readonly pending: PendingEntry; readonly counters: ReadonlyArray<number> } => ({
  pending: { seq, visit: counters[seq] ?? 0, input, attempts: 1 },
  counters: bump(counters, seq)
})

const requirePending = (s: VisitState, what: string): PendingEntry => {
  if (s.pending === null) throw new Error(`Traversal.${what}: the traversal has no pending entry (it is complete)`)
  return s.pending
}

/**
 * Reserves the next attempt number of the pending entry (a retry, or a resume that is about
 * to run the entry again).
 *
 * @param s - a state with a pending entry (a complete traversal is a caller bug: throws).
 * @returns the state with `pending.attempts + 1`.
 *
 * @since 0.1.0
 * @category transitions
 */
export const reserveAttempt = (s: VisitState): VisitState => {
  const p = requirePending(s, "reserveAttempt")
  return { ...s, version: s.version + 1, pending: { ...p, attempts: p.attempts + 1 } }
}

/**
 * The pending station succeeded with a plain value: its output becomes the active slot of
 * `seq`, the cursor moves to `seq + 1` and the next station is entered on that output (or the
 * traversal is complete after the last task).
 *
 * @param s - a state whose pending entry is `seq` (anything else is a caller bug: throws).
 * @param seq - the station that succeeded.
 * @param artifact - the occurrence address of its output (`address(id, seq, pending.visit)`).
 * @param nTasks - the number of tasks.
 * @returns the next state.
 *
 * @since 0.1.0
 * @category transitions
 */
export const succeed = (s: VisitState, seq: number, artifact: string, nTasks: number): VisitState => {
  const p = requirePending(s, "succeed")
  if (p.seq !== seq) throw new Error(`Traversal.succeed: seq ${seq} is not the pending entry (seq ${p.seq})`)
  // the slots stay ordered by seq: the new one replaces its seq's slot or goes before the first later one
  const slot = { seq, visit: p.visit, artifact }
  // sized once (an array grown by `push` from empty reserves 17 slots, ~150 bytes, at every
  // step of every control pipeline): the slots plus this one, less the one it replaces
  const before = s.active
  let replaced = 0
  for (let i = 0; i < before.length; i++) if (before[i]!.seq === seq) replaced++
  const active: Array<ActiveSlot> = new Array(before.length + 1 - replaced)
  let k = 0
  let placed = false
  for (let i = 0; i < before.length; i++) {
    const a = before[i]!
    if (!placed && a.seq >= seq) {
      active[k++] = slot
      placed = true
    }
    if (a.seq !== seq) active[k++] = a
  }
  if (!placed) active[k++] = slot
  // (a state decoded from elsewhere whose slots were out of order comes out sorted)
  for (let i = 1; i < active.length; i++) {
    if (active[i - 1]!.seq > active[i]!.seq) {
      active.sort((a, b) => a.seq - b.seq)
      break
    }
  }
  if (seq + 1 >= nTasks) {
    return { ...s, version: s.version + 1, cursor: nTasks, pending: null, active }
  }
  // (one literal: this runs once per step of every control pipeline)
  const next = seq + 1
  return {
    seed: s.seed,
    version: s.version + 1,
    cursor: next,
    pending: { seq: next, visit: s.counters[next] ?? 0, input: artifact, attempts: 1 },
    active,
    counters: bump(s.counters, next),
    handoffs: s.handoffs,
    payloads: s.payloads,
    ledger: s.ledger,
    floor: s.floor
  }
}

/**
 * One control transition, as checked by `Control.check`.
 *
 * - `operation`, `fromSeq`, `toSeq` (`"end"` for `end`);
 * - `entry`: the occurrence address of the target's input (a new payload, the source's own
 *   input reused, or the seed for `retryAll`); for `end` the pipeline's final artifact;
 * - `payload`: whether `entry` is a new payload (then `payloads` grows by one);
 * - `nTasks`; `limit`: the effective `maxHandoffs`.
 *
 * @since 0.1.0
 * @category models
 */
export interface TransitionInput {
  readonly operation: Operation
  readonly fromSeq: number
  readonly toSeq: number | "end"
  readonly entry: string
  readonly payload: boolean
  readonly nTasks: number
  readonly limit: number
}

/**
 * Applies a control transition. Every transition except `end` consumes one unit of budget:
 * with `limit = N`, exactly N transitions are allowed and the (N+1)th is refused with
 * `Left("budget")` before anything changes; `end` is allowed at the limit and consumes nothing.
 * `rewind` and `retryAll` drop the active slots of the target and later stations (they become
 * history); the target is entered as a new visit on `entry`. `end` completes the traversal.
 *
 * @param s - a state with a pending entry at `fromSeq` (anything else is a caller bug: throws).
 * @param t - the transition.
 * @returns the next state, or `Left("budget")` when the budget is spent.
 *
 * @since 0.1.0
 * @category transitions
 */
export const transition = (s: VisitState, t: TransitionInput): Either.Either<VisitState, "budget"> => {
  const p = requirePending(s, "transition")
  if (p.seq !== t.fromSeq) {
    throw new Error(`Traversal.transition: seq ${t.fromSeq} is not the pending entry (seq ${p.seq})`)
  }
  const toSeq = t.toSeq
  if (toSeq !== "end" && s.handoffs >= t.limit) return Either.left("budget")
  // (one literal per case, no spread: this runs at every transition of every control pipeline)
  if (toSeq === "end") {
    return Either.right({
      seed: s.seed,
      version: s.version + 1,
      cursor: t.nTasks,
      pending: null,
      active: s.active,
      counters: s.counters,
      handoffs: s.handoffs,
      payloads: s.payloads + (t.payload ? 1 : 0),
      ledger: s.ledger + 1,
      floor: s.floor
    })
  }
  const backward = t.operation === "rewind" || t.operation === "retryAll"
  const active = backward ? s.active.filter((a) => a.seq < toSeq) : s.active
  return Either.right({
    seed: s.seed,
    version: s.version + 1,
    cursor: toSeq,
    pending: { seq: toSeq, visit: s.counters[toSeq] ?? 0, input: t.entry, attempts: 1 },
    active,
    counters: bump(s.counters, toSeq),
    handoffs: s.handoffs + 1,
    payloads: s.payloads + (t.payload ? 1 : 0),
    ledger: s.ledger + 1,
    floor: s.floor
  })
}

/**
 * A deliberate restart from the seed (`freshRestart`, or restarting a succeeded pipeline):
 * nothing active, seq 0 entered as a new visit on the seed, a new budget (`handoffs = 0`),
 * the ledger floor moved to the current ledger count. Counters and the payload count are
 * kept, so every earlier occurrence stays addressable.
 *
 * @param s - the persisted state (complete or not).
 * @param nTasks - the number of tasks (the counters cover every station).
 * @returns the restarted state.
 *
 * @since 0.1.0
 * @category transitions
 */
export const freshRestart = (s: VisitState, nTasks: number): VisitState => ({
  ...s,
  version: s.version + 1,
  cursor: 0,
  active: [],
  handoffs: 0,
  floor: s.ledger,
  ...enter(cover(s.counters, nTasks), 0, s.seed)
})

/**
 * The pending entry's payload is missing: replay the seed. Seq 0 is entered as a new visit on
 * the seed, nothing active, cursor 0; the budget, counters, payload count and ledger are kept.
 *
 * @param s - the persisted state.
 * @param nTasks - the number of tasks (the counters cover every station).
 * @returns the replaying state.
 *
 * @since 0.1.0
 * @category transitions
 */
export const seedReplay = (s: VisitState, nTasks: number): VisitState => ({
  ...s,
  version: s.version + 1,
  cursor: 0,
  active: [],
  ...enter(cover(s.counters, nTasks), 0, s.seed)
})

/**
 * Whether a state records any revisit (a station entered more than once): the store's feature
 * level moves to `visits-v1` when such a state is first committed.
 *
 * @param s - a state.
 * @returns `true` when some counter exceeds 1.
 *
 * @since 0.1.0
 * @category predicates
 */
export const hasRevisit = (s: VisitState): boolean => s.counters.some((c) => c > 1)

/**
 * A traversal write refused because the stored state's version is not the one the write was
 * based on (another writer moved the traversal, or the state is missing: `actual` null).
 * Nothing of the refused checkpoint is written. The store fails the checkpoint with
 * `StoreUnavailable` carrying this error as its `cause` (see {@link conflictOf}).
 *
 * @since 0.1.0
 * @category errors
 */
export class TraversalConflict extends Schema.TaggedError<TraversalConflict>("assay/TraversalConflict")(
  "TraversalConflict",
  {
    pipelineId: Schema.String,
    expected: Schema.Int,
    actual: Schema.NullOr(Schema.Int),
    message: Schema.String
  }
) {}

/**
 * The {@link TraversalConflict} behind a failed checkpoint, if that is why it failed.
 *
 * @param error - the error of a failed `checkpoint` (any value).
 * @returns the conflict, or `undefined`.
 *
 * @since 0.1.0
 * @category errors
 */
export const conflictOf = (error: unknown): TraversalConflict | undefined => {
  const cause = typeof error === "object" && error !== null ? (error as { readonly cause?: unknown }).cause : undefined
  return cause instanceof TraversalConflict ? cause : undefined
}
