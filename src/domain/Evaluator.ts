/**
 * Evaluator blindness: what a task marked `evaluator: true` (`Task.make(name, { evaluator:
 * true }, fn)`, or `evaluator: true` on a task entry of a config file) does not get to see.
 *
 * An evaluator scores the work of other tasks (the built-in `judge`, a custom grader). In a
 * study, the variants differ by their variables (prompt text, model profile, parameters); a
 * grader that could read them could let the variant, not the work, decide the score. The
 * runner therefore runs an evaluator **blind**:
 *
 * | context field | an evaluator sees | why |
 * | --- | --- | --- |
 * | `variables` | `{}` | the trial's variable values (prompt text, model profile, numbers) |
 * | `experimentId` | `null` | the suite member id: a study trial id `p1-v03-r2` names the variant |
 * | `suiteId` | `null` | the suite (study) id: not a variant label, withheld with the rest of the membership |
 * | `localKey` | `null` | the pipeline's key inside its member (a content address over the variant's task definitions) |
 * | `outputDir` | `null` | `ROOT/experiments/<trial id>` in the `byExperiment` layout |
 * | `store` | a store whose every read fails with `StoreUnavailable` | earlier outputs (a chat output's `model`), run and pipeline records, events |
 * | `taskName` | the name, or {@link WITHHELD} when it equals a withheld value | a name written as `{ $var: ... }` |
 *
 * Unchanged: `pipelineId` (a digest; it is the checkpoint key, so it must stay; it names no
 * variant, but it is not a secret: its first 12 hex digits are a digest of the suite id and the
 * member id, which anyone who knows both can recompute), `runId` (the suite run's id, shared by
 * every trial run together), `seq`, `attempt`, `visit`, `seed` (derived from the pipeline id),
 * `meta`, `bus` (what other tasks publish there is theirs; the runner puts nothing of the
 * variant on it), the pool functions (`acquire`, `subscribe`, ...: the pools are shared by
 * every trial of a study, and an evaluator's own leases are its own), `emit` and
 * `reportMetric` (write-only).
 *
 * **The input is redacted** ({@link redact}): every string value, at any depth of plain
 * objects and arrays, that is exactly equal to one of the withheld values is replaced by
 * {@link WITHHELD}. The withheld values ({@link withheldValues}) are every string inside the
 * trial's variables (a prompt's text; a model profile's `model`, `pool`, selector strings,
 * ...), the member id and the member's output directory. Honest limits:
 *
 * - only **whole** string values: a model name inside a longer text ("as small-1, I think...")
 *   or a prompt quoted inside an answer is not found; neither are object keys;
 * - only strings: a numeric or boolean variable (a temperature of 0.5) is not redacted (it
 *   would erase every 0.5 in the input);
 * - a server that answers with another spelling of the model (`gpt-4o-2024-08-06` for
 *   `gpt-4o`) is not matched;
 * - a legitimate value that happens to equal a variable's value (an enum variable `["yes",
 *   "no"]` and an answer `"yes"`) is withheld too, and the evaluator sees the marker;
 * - values inside class instances, `Map`s, typed arrays and other non-plain objects are left
 *   as they are.
 *
 * Blindness is a guard against accidental use (a grader that reads `ctx.variables`, a judge
 * prompt built from a whole previous output), not a sandbox against code that sets out to
 * find its variant.
 *
 * @since 0.7.0
 */
import { Effect, Stream } from "effect"
import { StoreUnavailable } from "./Errors.js"
import type { Json } from "./Json.js"
import type { TaskContext } from "./TaskContext.js"
import type { TaskStore } from "./TaskStore.js"

/**
 * The text that replaces a withheld value in an evaluator's input (and its task name).
 *
 * @since 0.7.0
 * @category constants
 */
export const WITHHELD = "[withheld]"

/**
 * The member facts the withheld values come from (a `TaskContext` has all three).
 *
 * @since 0.7.0
 * @category models
 */
export interface MemberFacts {
  readonly variables: Readonly<Record<string, Json>>
  readonly experimentId: string | null
  readonly outputDir: string | null
}

const collectStrings = (value: Json, into: Set<string>): void => {
  if (typeof value === "string") {
    if (value !== "") into.add(value)
  } else if (Array.isArray(value)) {
    for (const v of value) collectStrings(v, into)
  } else if (value !== null && typeof value === "object") {
    for (const v of Object.values(value)) collectStrings(v as Json, into)
  }
}

const none: ReadonlySet<string> = new Set()

/**
 * The string values withheld from an evaluator's input: every non-empty string inside the
 * trial's variables (at any depth), the member id and the member's output directory. Empty
 * outside suites and studies.
 *
 * @param facts the attempt's `variables`, `experimentId` and `outputDir`
 * @returns the set of exact strings {@link redact} replaces
 *
 * @since 0.7.0
 * @category redaction
 */
export const withheldValues = (facts: MemberFacts): ReadonlySet<string> => {
  if (facts.experimentId === null && facts.outputDir === null && Object.keys(facts.variables).length === 0) return none
  const out = new Set<string>()
  collectStrings(facts.variables as Json, out)
  if (facts.experimentId !== null && facts.experimentId !== "") out.add(facts.experimentId)
  if (facts.outputDir !== null && facts.outputDir !== "") out.add(facts.outputDir)
  return out
}

/**
 * The result of {@link redact}: the redacted `value` and how many values were replaced.
 *
 * @since 0.7.0
 * @category models
 */
export interface Redacted<A> {
  readonly value: A
  readonly withheld: number
}

const isPlainObject = (u: unknown): u is Record<string, unknown> => {
  if (u === null || typeof u !== "object" || Array.isArray(u)) return false
  const proto = Object.getPrototypeOf(u)
  return proto === Object.prototype || proto === null
}

/**
 * Replaces every string value equal to one of `values` by {@link WITHHELD}, at any depth of
 * plain objects and arrays. Nothing is copied when nothing is replaced (the same value comes
 * back); otherwise only the objects and arrays on the way to a replaced value are copied
 * (the caller's input is never changed). Keys, substrings, numbers, booleans and values inside
 * non-plain objects are left as they are (see the module's limits).
 *
 * @param input any value (a task's input)
 * @param values the exact strings to withhold ({@link withheldValues})
 * @returns the redacted value and the count of replaced values
 *
 * @since 0.7.0
 * @category redaction
 */
export const redact = <A>(input: A, values: ReadonlySet<string>): Redacted<A> => {
  if (values.size === 0) return { value: input, withheld: 0 }
  let withheld = 0
  const seen = new WeakSet<object>()
  const walk = (u: unknown): unknown => {
    if (typeof u === "string") {
      if (values.has(u)) {
        withheld++
        return WITHHELD
      }
      return u
    }
    if (Array.isArray(u)) {
      if (seen.has(u)) return u
      seen.add(u)
      let copy: Array<unknown> | undefined
      for (let i = 0; i < u.length; i++) {
        const v = walk(u[i])
        if (v !== u[i]) (copy ??= [...u])[i] = v
      }
      return copy ?? u
    }
    if (isPlainObject(u)) {
      if (seen.has(u)) return u
      seen.add(u)
      let copy: Record<string, unknown> | undefined
      for (const k of Object.keys(u)) {
        const v = walk(u[k])
        if (v !== u[k]) (copy ??= { ...u })[k] = v
      }
      return copy ?? u
    }
    return u
  }
  const value = walk(input) as A
  return { value, withheld }
}

const withheldError = () =>
  new StoreUnavailable({
    message: "the store is withheld from evaluator tasks (it holds the variant's outputs and records)"
  })

const fail = Effect.suspend(() => Effect.fail(withheldError()))
const failStream = Stream.suspend(() => Stream.fail(withheldError()))

/**
 * The store an evaluator's context holds: read-only, with every read failing with
 * `StoreUnavailable` ("the store is withheld from evaluator tasks"): earlier outputs, pipeline
 * and run records and events would name the variant.
 *
 * @since 0.7.0
 * @category blindness
 */
export const withheldStore: TaskStore = Object.freeze({
  kind: "withheld",
  featureLevel: "none",
  readOnly: true,
  journal: "summary" as const,
  getRun: () => fail,
  latestRun: fail,
  listRuns: fail,
  getPipelines: () => fail,
  getPipeline: () => fail,
  getArtifact: () => fail,
  listArtifacts: () => fail,
  metrics: () => fail,
  resources: fail,
  stats: () => fail,
  resourceUsage: () => fail,
  pipelineAccounting: () => fail,
  errors: () => fail,
  events: () => fail,
  countEvents: () => fail,
  pipelinesBySpec: fail,
  pipelinesPage: () => fail,
  completions: () => fail,
  loadBundles: () => fail,
  streamPipelines: () => failStream,
  streamTasks: () => failStream,
  streamAttempts: () => failStream,
  streamEvents: () => failStream,
  streamArtifacts: () => failStream
})

const BLIND: unique symbol = Symbol.for("assay/Evaluator/blind")
const noVariables: Readonly<Record<string, Json>> = Object.freeze({})

/**
 * Whether a context is an evaluator's (built by {@link blindContext}, or a fanout branch of
 * one).
 *
 * @since 0.7.0
 * @category blindness
 */
export const isBlind = (ctx: TaskContext): boolean => (ctx as unknown as { readonly [BLIND]?: unknown })[BLIND] === true

/**
 * The context an evaluator runs with: `ctx` with `variables = {}`, `suiteId`,
 * `experimentId`, `localKey` and `outputDir` `null`, the {@link withheldStore}, and the task
 * name replaced by {@link WITHHELD} when it is one of `values`; everything else is `ctx`'s own
 * (read through a proxy, so the runner's context keeps its private state). Blinding a blind
 * context gives it back.
 *
 * @param ctx the attempt's context
 * @param values the withheld values (default: {@link withheldValues} of `ctx`)
 * @returns the evaluator's context
 *
 * @since 0.7.0
 * @category blindness
 */
export const blindContext = (ctx: TaskContext, values: ReadonlySet<string> = withheldValues(ctx)): TaskContext => {
  if (isBlind(ctx)) return ctx
  const overrides: Partial<Record<PropertyKey, unknown>> = {
    [BLIND]: true,
    variables: noVariables,
    suiteId: null,
    experimentId: null,
    localKey: null,
    outputDir: null,
    store: withheldStore,
    taskName: values.has(ctx.taskName) ? WITHHELD : ctx.taskName
  }
  return new Proxy(ctx, {
    get: (target, prop) => Object.hasOwn(overrides, prop) ? overrides[prop] : Reflect.get(target, prop, target),
    has: (target, prop) => Object.hasOwn(overrides, prop) || Reflect.has(target, prop)
  })
}

/**
 * What the runner (and a fanout group, for an evaluator branch) does before an evaluator's
 * attempt: the blind context and the redacted input, both from the same withheld values.
 * A context that is already blind is kept, and the input is redacted with nothing (its
 * group's input was redacted already).
 *
 * @param ctx the attempt's (or branch's) context
 * @param input the task's input
 * @returns the blind context and the redacted input
 *
 * @since 0.7.0
 * @category blindness
 */
export const blind = <A>(ctx: TaskContext, input: A): { readonly ctx: TaskContext; readonly input: A } => {
  if (isBlind(ctx)) return { ctx, input }
  const values = withheldValues(ctx)
  return { ctx: blindContext(ctx, values), input: redact(input, values).value }
}

/**
 * Counts the {@link WITHHELD} markers in a value (plain objects and arrays, any depth): what
 * an evaluator can tell about how much of its input was withheld.
 *
 * @param u any value
 * @returns the number of string values equal to {@link WITHHELD}
 *
 * @since 0.7.0
 * @category redaction
 */
export const countWithheld = (u: unknown): number => {
  if (u === WITHHELD) return 1
  if (Array.isArray(u)) return u.reduce((n: number, v) => n + countWithheld(v), 0)
  if (isPlainObject(u)) return Object.values(u).reduce((n: number, v) => n + countWithheld(v), 0)
  return 0
}
