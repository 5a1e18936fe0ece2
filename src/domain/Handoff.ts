/**
 * Handoffs: control-flow directives a task returns instead of a value, and the ledger row the
 * store keeps for every transition.
 *
 * A task of a pipeline that declares `control` (see `Control`) may succeed with a directive:
 * - {@link to}: continue at a strictly later task (a declared `control.edges` edge);
 * - {@link end}: finish the pipeline here (a declared `"end"` edge);
 * - {@link rewind}: run a strictly earlier task again with an explicit state (declared in
 *   `control.rewind`);
 * - {@link retryAll}: restart at seq 0 from the seed captured at binding (declared in
 *   `control.retryAll`).
 *
 * A directive is a return, never a failure: the retry policy is not consulted. Whether the
 * pipeline allows it is decided by `Control.check`; a refused directive is a fatal
 * `HandoffRefused`. Constructors never throw: whatever a task returns is judged in one place.
 *
 * The payload (`value`) is not type-checked against the target's input: it is an arbitrary
 * value, encoded like any artifact by the runner.
 *
 * @since 0.1.0
 */
import { Option, Predicate, Schema } from "effect"
import { PipelineId, RunId } from "./Ids.js"

/**
 * The brand that marks a {@link Handoff}.
 *
 * @since 0.1.0
 * @category type ids
 */
export const HandoffTypeId: unique symbol = Symbol.for("assay/Handoff")

/**
 * @since 0.1.0
 * @category type ids
 */
export type HandoffTypeId = typeof HandoffTypeId

/**
 * The kind of a transition: `to` (forward jump), `end` (finish here), `rewind` (run an earlier
 * task again), `retryAll` (restart from the bound seed).
 *
 * @since 0.1.0
 * @category models
 */
export const Operation = Schema.Literal("to", "end", "rewind", "retryAll")

/**
 * @since 0.1.0
 * @category models
 */
export type Operation = typeof Operation.Type

/**
 * How a directive names a task: its name (unique in the pipeline) or its seq (0-based
 * position). An exact task name wins over a numeric string. The word `"end"` is never a task
 * name as a target: it is the end of the pipeline (a task named `end` is addressed by its seq).
 *
 * @since 0.1.0
 * @category models
 */
export type Target = string | number

/**
 * Options of every constructor: `reason`, free text recorded in the ledger and the
 * `pipeline.handoff` event (default `""`).
 *
 * @since 0.1.0
 * @category models
 */
export interface HandoffOptions {
  readonly reason?: string | undefined
}

/**
 * A control-flow directive, returned by a task in place of its value.
 *
 * - `operation`: see {@link Operation};
 * - `target`: the task as written (name or seq), `null` for `end` and `retryAll`;
 * - `value`: the target's entry state. `None` means "reuse the input this task received" for
 *   `to`/`end`; `rewind` must carry `Some` (`null` is a value); `retryAll` carries `None`;
 * - `reason`: free text for the ledger;
 * - `isEnd`: whether the directive finishes the pipeline;
 * - `reusesInput`: whether the target enters with this task's own input artifact.
 *
 * @since 0.1.0
 * @category models
 */
export interface Handoff {
  readonly [HandoffTypeId]: HandoffTypeId
  readonly operation: Operation
  readonly target: Target | null
  readonly value: Option.Option<unknown>
  readonly reason: string
  readonly isEnd: boolean
  readonly reusesInput: boolean
}

const HandoffProto = {
  [HandoffTypeId]: HandoffTypeId,
  toJSON(this: Handoff) {
    return {
      _id: "Handoff",
      operation: this.operation,
      target: this.target,
      value: Option.isSome(this.value) ? this.value.value : "<reuse input>",
      reason: this.reason
    }
  },
  toString(this: Handoff & { toJSON(): unknown }) {
    const where = this.operation === "end" || this.operation === "retryAll" ? "" : ` ${JSON.stringify(this.target)}`
    return `Handoff.${this.operation}${where}`
  }
}

// The keys of an options object other than `reason` (a typo from untyped code: `{ reasn }`),
// kept on the directive under this key (not enumerable) so that `Control.check` refuses it.
const unknownOptionsKey = Symbol.for("assay/Handoff/unknownOptions")

const unknownKeys = (options: unknown): ReadonlyArray<string> =>
  Predicate.isObject(options) && !Array.isArray(options) ? Object.keys(options).filter((k) => k !== "reason") : []

const makeDirective = (
  operation: Operation,
  target: Target | null,
  value: Option.Option<unknown>,
  reason: unknown,
  options?: unknown
): Handoff => {
  const self = Object.create(HandoffProto) as { -readonly [K in keyof Handoff]: Handoff[K] }
  const unknown = options === undefined ? [] : unknownKeys(options)
  if (unknown.length > 0) Object.defineProperty(self, unknownOptionsKey, { value: unknown, enumerable: false })
  self.operation = operation
  self.target = target
  self.value = value
  // a non-string reason is kept as given so that `Control.check` can refuse it with a message
  self.reason = reason === undefined ? "" : (reason as string)
  self.isEnd = operation === "end"
  self.reusesInput = (operation === "to" || operation === "end") && Option.isNone(value)
  return Object.freeze(self)
}

const valueOf = (value: unknown): Option.Option<unknown> => value === undefined ? Option.none() : Option.some(value)

/**
 * Continue at a strictly later task, declared in `control.edges` for this task.
 *
 * The word `"end"` as a target means the end of the pipeline here as it does in
 * `control.edges`: `to("end", value?, options?)` is {@link end}`(value?, options?)` (a task
 * named `end` is addressed by its seq).
 *
 * @param target - the task's unique name or its seq; `"end"` for the end of the pipeline.
 * @param value - the target's entry state; omitted (or `undefined`) reuses this task's own
 *   input; `null` is a value.
 * @param options - `reason` for the ledger.
 * @returns the directive to return from the task.
 *
 * @since 0.1.0
 * @category constructors
 */
export const to = (target: Target, value?: unknown, options?: HandoffOptions): Handoff =>
  target === END_WORD ?
    makeDirective("end", null, valueOf(value), options?.reason, options) :
    makeDirective("to", target, valueOf(value), options?.reason, options)

/** The word for the end of the pipeline as a target (`Control.END`). */
const END_WORD = "end"

/**
 * Finish the pipeline at this task, declared as an `"end"` edge in `control.edges`; refused
 * from the last task (where it would change nothing).
 *
 * @param value - the pipeline's final value; omitted (or `undefined`) reuses this task's own
 *   input; `null` is a value.
 * @param options - `reason` for the ledger.
 * @returns the directive to return from the task.
 *
 * @since 0.1.0
 * @category constructors
 */
export const end = (value?: unknown, options?: HandoffOptions): Handoff =>
  makeDirective("end", null, valueOf(value), options?.reason, options)

/**
 * Run a strictly earlier task again (a new visit) with an explicit entry state, declared in
 * `control.rewind` for this task. The target's and every later task's results become history.
 *
 * @param target - the earlier task's unique name or its seq (`0` restarts with a chosen state).
 * @param value - the target's entry state: required (`undefined` is refused by
 *   `Control.check`); `null` is a value.
 * @param options - `reason` for the ledger.
 * @returns the directive to return from the task.
 *
 * @since 0.1.0
 * @category constructors
 */
export const rewind = (target: Target, value: unknown, options?: HandoffOptions): Handoff =>
  makeDirective("rewind", target, valueOf(value), options?.reason, options)

/**
 * Restart the pipeline at seq 0 from the seed captured at binding, declared in
 * `control.retryAll` for this task. It takes no value: to restart with a chosen state, use
 * `rewind(0, state)`.
 *
 * An argument that is not an options object (for callers without the compiler) is kept as a
 * value so that `Control.check` refuses it instead of ignoring it.
 *
 * @param options - `reason` for the ledger.
 * @returns the directive to return from the task.
 *
 * @since 0.1.0
 * @category constructors
 */
export const retryAll = (options?: HandoffOptions): Handoff => {
  const isOptions = options === undefined ||
    (Predicate.isObject(options) && !Array.isArray(options) && Object.keys(options).every((k) => k === "reason"))
  return isOptions ?
    makeDirective("retryAll", null, Option.none(), options?.reason) :
    makeDirective("retryAll", null, Option.some(options), undefined)
}

/**
 * Whether a value is a {@link Handoff} directive.
 *
 * @since 0.1.0
 * @category guards
 */
export const isHandoff = (u: unknown): u is Handoff => Predicate.hasProperty(u, HandoffTypeId)

// ---------------------------------------------------------------------------------------------
// Ledger
// ---------------------------------------------------------------------------------------------

/**
 * One row of the handoff ledger: one committed transition, written in the same store
 * transaction as the source task's `handed_off` end, the entry artifact, the invalidation and
 * the new pending entry.
 *
 * - `handoffId`: per-store increasing integer, never reused;
 * - `pipelineId`, `runId`: the pipeline and the run that committed it;
 * - `fromSeq`, `fromTask`: the source task (seq and name);
 * - `toSeq`, `toTask`: the target task, `null` for `end`;
 * - `operation`: see {@link Operation};
 * - `entrySeq`: the seq of the entry artifact (the reused input's seq, or `nTasks + k` for the
 *   k-th payload of the pipeline);
 * - `entryArtifactId`: the occurrence address of the entry artifact
 *   (`pipelineId:seq` or `pipelineId:seq#visit`);
 * - `entryReused`: whether the entry is the source task's own input (no new payload);
 * - `reason`: the directive's reason;
 * - `ts`: commit time, epoch milliseconds (from `Clock`).
 *
 * @since 0.1.0
 * @category records
 */
export class HandoffRecord extends Schema.Class<HandoffRecord>("assay/HandoffRecord")({
  handoffId: Schema.Int.pipe(Schema.nonNegative()),
  pipelineId: PipelineId,
  runId: RunId,
  fromSeq: Schema.Int.pipe(Schema.nonNegative()),
  fromTask: Schema.String,
  toSeq: Schema.NullOr(Schema.Int.pipe(Schema.nonNegative())),
  toTask: Schema.NullOr(Schema.String),
  operation: Operation,
  entrySeq: Schema.Int.pipe(Schema.greaterThanOrEqualTo(-1)),
  entryArtifactId: Schema.String,
  entryReused: Schema.Boolean,
  reason: Schema.String,
  ts: Schema.Number
}) {}
