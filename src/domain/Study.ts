/**
 * Studies: the data of a study and its pure rules. A study asks one question of one base
 * experiment (its protocol) by running it once per **variant** (one assignment of every
 * variable) and **repeat**; each (variant, repeat) is a **trial**, run as one member of a suite.
 *
 * This module holds what needs no I/O:
 *
 * - the variable Schemas ({@link Variable}: `enum`, `range`, `boolean`, `prompt`, `model`,
 *   `set`) and their values ({@link valuesOf}; ranges in exact decimal steps,
 *   {@link rangeValues});
 * - the expansion into variants ({@link expand}, {@link variantAt}, {@link variantCount}) in a
 *   fixed odometer order: variables in file order, the last one changing fastest;
 * - identity: variant ids (`v01`), keys and digests, trial ids (`p1-v03-r2`,
 *   {@link trialId} / {@link parseTrialId}), the protocol digest ({@link protocolDigest}) and its
 *   parts ({@link protocolParts}, {@link changedParts});
 * - the Schemas of stop conditions, objectives, budgets and limits, and the study and trial
 *   statuses.
 *
 * The study file is read by `config/Study.ts`.
 *
 * @since 0.6.0
 */
import { Duration, Either, Schema } from "effect"
import { canonicalJsonUnsafe, digest, isStrictJson, type Json } from "./Json.js"
import { DurationFromString } from "./RetryPolicy.js"

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/**
 * A variable's value: any strict JSON value.
 *
 * @since 0.6.0
 * @category models
 */
export type VariableValue = Json

const JsonValue = Schema.Unknown.pipe(
  Schema.filter((u) => isStrictJson(u) || "must be a JSON value (null, a boolean, a finite number, a string, a list or an object)", {
    jsonSchema: {}
  })
) as unknown as Schema.Schema<Json>

const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optionalWith(s, { exact: true })

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * A variable's name: an ASCII identifier (`^[A-Za-z_][A-Za-z0-9_]*$`), so that a reference
 * `{ $var: "model.params.temperature" }` reads unambiguously as a name and a path.
 *
 * @since 0.6.0
 * @category schemas
 */
export const VariableName = Schema.String.pipe(
  Schema.filter((s) => NAME.test(s) || `${JSON.stringify(s)} is not a variable name: letters, digits and _, not starting with a digit`, {
    jsonSchema: { pattern: NAME.source }
  })
).annotations({ identifier: "VariableName" })

const FiniteNumber = Schema.Number.pipe(Schema.finite()).annotations({ message: () => "must be a finite number" })

/** A duration string with a unit, kept as written (a variable's values are plain JSON). */
const DurationText = Schema.String.pipe(
  Schema.filter((s) => Either.isRight(Schema.decodeUnknownEither(DurationFromString)(s)) || "expected a duration string with a unit: \"800 millis\", \"3 seconds\"", {
    jsonSchema: { type: "string" }
  })
)

/**
 * A latency estimate of one model call: `{ min, max }`, duration strings with a unit. Used by
 * the plan's time range only.
 *
 * @since 0.6.0
 * @category schemas
 */
export const LatencyEstimate = Schema.Struct({
  min: DurationText,
  max: DurationText
}).annotations({ identifier: "LatencyEstimate", description: "the shortest and longest expected duration of one model call" })

/**
 * A price per 1,000 tokens in US dollars: `promptPer1k` (input tokens) and `completionPer1k`
 * (output tokens), each a finite number >= 0.
 *
 * @since 0.6.0
 * @category schemas
 */
export const Price = Schema.Struct({
  promptPer1k: FiniteNumber.pipe(Schema.greaterThanOrEqualTo(0)),
  completionPer1k: FiniteNumber.pipe(Schema.greaterThanOrEqualTo(0))
}).annotations({ identifier: "Price", description: "US dollars per 1,000 prompt / completion tokens" })

/**
 * A model profile (one value of a `model` variable): `model` (the name sent to the endpoint),
 * optional `pool` (a pool of the base experiment), `selector` (a resource selector, JSON),
 * `params` (request parameters such as `temperature`, JSON), `price` (see {@link Price}; needed
 * for a `costUsd` budget), and estimates for the plan: `latency` ({@link LatencyEstimate}) and
 * `requestsPerMinute` (the provider's rate limit for this profile).
 *
 * @since 0.6.0
 * @category schemas
 */
export const ModelProfile = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)).annotations({ message: () => "must be a non-empty model name" }),
  pool: opt(Schema.String.pipe(Schema.minLength(1))),
  selector: opt(Schema.Record({ key: Schema.String, value: JsonValue })),
  params: opt(Schema.Record({ key: Schema.String, value: JsonValue })),
  price: opt(Price),
  latency: opt(LatencyEstimate),
  requestsPerMinute: opt(FiniteNumber.pipe(Schema.greaterThan(0)))
}).annotations({ identifier: "ModelProfile" })

/**
 * @since 0.6.0
 * @category models
 */
export type ModelProfile = typeof ModelProfile.Type

// ---------------------------------------------------------------------------------------------
// Variables
// ---------------------------------------------------------------------------------------------

const named = <Type extends string, F extends Schema.Struct.Fields>(type: Type, fields: F, description: string) =>
  Schema.Struct({ name: VariableName, type: Schema.Literal(type), ...fields }).annotations({
    identifier: `${type[0]!.toUpperCase()}${type.slice(1)}Variable`,
    description
  })

/**
 * `{ name, type: enum, values: [JSON values] }`: the values in the order written (at least one;
 * no two equal as canonical JSON). The assignment is the value itself.
 *
 * @since 0.6.0
 * @category schemas
 */
export const EnumVariable = named("enum", {
  values: Schema.Array(JsonValue).pipe(Schema.minItems(1)).annotations({ message: () => "must be a non-empty list of JSON values: values: [a, b]" })
}, "a list of JSON values")

/**
 * `{ name, type: range, start, end, step }`: `start`, `start + step`, ... up to `end` included
 * when reached, computed in exact decimal (see {@link rangeValues}); `step > 0`, `end >= start`.
 *
 * @since 0.6.0
 * @category schemas
 */
export const RangeVariable = named("range", {
  start: FiniteNumber,
  end: FiniteNumber,
  step: FiniteNumber.pipe(Schema.greaterThan(0)).annotations({ message: () => "must be a finite number > 0" })
}, "numbers from start to end (included when reached) in exact decimal steps")

/**
 * `{ name, type: boolean }`: `false`, then `true`.
 *
 * @since 0.6.0
 * @category schemas
 */
export const BooleanVariable = named("boolean", {}, "false, then true")

/**
 * `{ name, type: prompt, values: { NAME: text } }`: named texts, in the order written. The
 * assignment is the name; the bound value is the text.
 *
 * @since 0.6.0
 * @category schemas
 */
export const PromptVariable = named("prompt", {
  values: Schema.Record({ key: Schema.String, value: Schema.String }).annotations({
    message: () => "must be an object of name -> text: values: { terse: \"...\", detailed: \"...\" }"
  })
}, "named prompt texts: name -> text")

/**
 * `{ name, type: model, values: { NAME: profile } }`: named model profiles ({@link ModelProfile}),
 * in the order written. The assignment is the name; the bound value is the profile object.
 *
 * @since 0.6.0
 * @category schemas
 */
export const ModelVariable = named("model", {
  values: Schema.Record({ key: Schema.String, value: ModelProfile }).annotations({
    message: () => "must be an object of name -> profile: values: { small: { model: small-1 }, large: { model: large-1 } }"
  })
}, "named model profiles: name -> { model, pool?, selector?, params?, price?, latency?, requestsPerMinute? }")

/**
 * `{ name, type: set, values: [[...], [...]] }`: a list of lists (expert sets, tool sets), in the
 * order written. The assignment is the 0-based index; the bound value is the list.
 *
 * @since 0.6.0
 * @category schemas
 */
export const SetVariable = named("set", {
  values: Schema.Array(Schema.Array(JsonValue)).pipe(Schema.minItems(1)).annotations({
    message: () => "must be a non-empty list of lists: values: [[a, b], [a, c]]"
  })
}, "a list of lists; the assignment is the index")

/**
 * One variable of a study, by `type`: {@link EnumVariable}, {@link RangeVariable},
 * {@link BooleanVariable}, {@link PromptVariable}, {@link ModelVariable}, {@link SetVariable}.
 *
 * @since 0.6.0
 * @category schemas
 */
export const Variable = Schema.Union(EnumVariable, RangeVariable, BooleanVariable, PromptVariable, ModelVariable, SetVariable)
  .annotations({ identifier: "Variable" })

/**
 * @since 0.6.0
 * @category models
 */
export type Variable = typeof Variable.Type

/**
 * The variable types.
 *
 * @since 0.6.0
 * @category constants
 */
export const VARIABLE_TYPES: ReadonlyArray<Variable["type"]> = ["enum", "range", "boolean", "prompt", "model", "set"]

// ---------------------------------------------------------------------------------------------
// Exact decimal ranges
// ---------------------------------------------------------------------------------------------

/** A finite number as an exact decimal: `mantissa × 10^exponent` (from its shortest repr). */
const toDecimal = (n: number): { readonly mantissa: bigint; readonly exponent: number } => {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/.exec(String(n))
  if (m === null) throw new RangeError(`not a finite number: ${n}`)
  const frac = m[3] ?? ""
  const mantissa = BigInt(`${m[1]}${m[2]}${frac}`)
  return { mantissa, exponent: Number(m[4] ?? "0") - frac.length }
}

/** `mantissa × 10^exponent` as the nearest double (through its decimal text). */
const fromDecimal = (mantissa: bigint, exponent: number): number => {
  const n = Number(`${mantissa}e${exponent}`)
  return Object.is(n, -0) ? 0 : n
}

const scaled = (start: number, end: number, step: number) => {
  const ds = [toDecimal(start), toDecimal(end), toDecimal(step)]
  const exponent = Math.min(...ds.map((d) => d.exponent))
  const [s, e, t] = ds.map((d) => d.mantissa * 10n ** BigInt(d.exponent - exponent)) as [bigint, bigint, bigint]
  return { s, e, t, exponent }
}

/**
 * The number of values of a range: `floor((end - start) / step) + 1` computed in exact decimal
 * (so `0, 1, 0.1` has 11), 0 when `end < start` or `step <= 0`.
 *
 * @param start the first value
 * @param end the last value (included when `start + k × step` reaches it exactly)
 * @param step the increment (> 0)
 * @returns the count (may exceed 2^53 for absurd ranges: a cap refuses those before expansion)
 * @since 0.6.0
 * @category ranges
 */
export const rangeCount = (start: number, end: number, step: number): number => {
  if (!(step > 0) || end < start || !Number.isFinite(start) || !Number.isFinite(end) || !Number.isFinite(step)) return 0
  const { e, s, t } = scaled(start, end, step)
  return Number((e - s) / t + 1n)
}

/**
 * The values of a range in exact decimal arithmetic: value k is the decimal `start + k × step`
 * (computed on integers scaled by the largest number of decimals of the three numbers), then
 * read as the nearest double, so `0` to `1` by `0.1` gives `0, 0.1, 0.2, 0.3, ..., 1` (11 values,
 * `0.3` and never `0.30000000000000004`). `end` is included when reached exactly.
 *
 * @param start the first value
 * @param end the last value
 * @param step the increment (> 0)
 * @returns the values in increasing order (empty when `end < start` or `step <= 0`)
 * @since 0.6.0
 * @category ranges
 */
export const rangeValues = (start: number, end: number, step: number): ReadonlyArray<number> => {
  const n = rangeCount(start, end, step)
  if (n === 0) return []
  const { exponent, s, t } = scaled(start, end, step)
  const out: Array<number> = []
  for (let k = 0; k < n; k++) out.push(fromDecimal(s + BigInt(k) * t, exponent))
  return out
}

/**
 * The k-th value of a range (0-based), as {@link rangeValues} gives it, without listing the
 * others.
 */
const rangeValueAt = (start: number, end: number, step: number, k: number): number => {
  const { exponent, s, t } = scaled(start, end, step)
  return fromDecimal(s + BigInt(k) * t, exponent)
}

// ---------------------------------------------------------------------------------------------
// Values of a variable
// ---------------------------------------------------------------------------------------------

/**
 * One value of a variable: `assignment` (what identifies it in a variant's key: the value for
 * `enum`/`range`/`boolean`, the name for `prompt`/`model`, the 0-based index for `set`) and
 * `value` (what a reference binds: the value, the text, the profile object, the list).
 *
 * @since 0.6.0
 * @category models
 */
export interface VariableChoice {
  readonly assignment: Json
  readonly value: Json
}

/**
 * The number of values of a variable.
 *
 * @since 0.6.0
 * @category expansion
 */
export const valueCount = (variable: Variable): number => {
  switch (variable.type) {
    case "enum":
    case "set":
      return variable.values.length
    case "range":
      return rangeCount(variable.start, variable.end, variable.step)
    case "boolean":
      return 2
    case "prompt":
    case "model":
      return Object.keys(variable.values).length
  }
}

/**
 * The value at position `k` (0-based, below {@link valueCount}) of a variable, without listing
 * the others (a range of a million steps costs nothing).
 *
 * @since 0.6.0
 * @category expansion
 */
export const choiceAt = (variable: Variable, k: number): VariableChoice => {
  switch (variable.type) {
    case "enum":
      return { assignment: variable.values[k]!, value: variable.values[k]! }
    case "range": {
      const v = rangeValueAt(variable.start, variable.end, variable.step, k)
      return { assignment: v, value: v }
    }
    case "boolean":
      return { assignment: k === 1, value: k === 1 }
    case "prompt":
    case "model": {
      const [name, value] = Object.entries(variable.values)[k]!
      return { assignment: name, value: value as unknown as Json }
    }
    case "set":
      return { assignment: k, value: variable.values[k]! }
  }
}

/**
 * The first `max` values of a variable as text (strings as written, other values as JSON),
 * and how many it has: what a plan or a message shows of a variable without listing it (a
 * range of a billion steps costs `max` values, not a billion).
 *
 * @param variable the variable
 * @param max how many values to show at most (default 10)
 * @returns `shown` (at most `max` texts) and `count` (the variable's {@link valueCount})
 * @since 0.9.0
 * @category expansion
 */
export const firstValues = (variable: Variable, max = 10): { readonly shown: ReadonlyArray<string>; readonly count: number } => {
  const count = valueCount(variable)
  const shown: Array<string> = []
  for (let k = 0; k < Math.min(count, max); k++) {
    const a = choiceAt(variable, k).assignment
    shown.push(typeof a === "string" ? a : JSON.stringify(a))
  }
  return { shown, count }
}

/**
 * The most variants a study expands (builds and checks one experiment each): 10,000. A study
 * with more is refused at `variables` whatever its `limits.maxTrials` (at the default cap of
 * 200 trials, `limits.maxTrials` refuses it first); its plan is computed from the counts
 * alone, never by listing the variants.
 *
 * @since 0.9.0
 * @category constants
 */
export const MAX_EXPANDED_VARIANTS = 10_000

/**
 * Every value of a variable in its order (see {@link VariableChoice}). Lists them all: for a
 * range, check {@link valueCount} first (or use {@link firstValues} to show some).
 *
 * @since 0.6.0
 * @category expansion
 */
export const valuesOf = (variable: Variable): ReadonlyArray<VariableChoice> => {
  const n = valueCount(variable)
  const out: Array<VariableChoice> = []
  for (let k = 0; k < n; k++) out.push(choiceAt(variable, k))
  return out
}

/**
 * The position of an assignment among a variable's values, or `-1`. A `set` accepts the
 * 0-based index or the list itself; a `range` compares numbers exactly (the decimal `0.3`
 * matches its value); the others compare canonical JSON.
 *
 * @since 0.6.0
 * @category expansion
 */
export const indexOfAssignment = (variable: Variable, assignment: unknown): number => {
  if (!isStrictJson(assignment)) return -1
  switch (variable.type) {
    case "range": {
      if (typeof assignment !== "number") return -1
      const n = rangeCount(variable.start, variable.end, variable.step)
      const { exponent, s, t } = scaled(variable.start, variable.end, variable.step)
      const d = toDecimal(assignment)
      if (d.exponent < exponent) return -1 // more decimals than the range has
      const a = d.mantissa * 10n ** BigInt(d.exponent - exponent)
      if (a < s || (a - s) % t !== 0n) return -1
      const k = Number((a - s) / t)
      return k < n ? k : -1
    }
    case "set": {
      if (typeof assignment === "number") return Number.isInteger(assignment) && assignment >= 0 && assignment < variable.values.length ? assignment : -1
      const key = canonicalJsonUnsafe(assignment)
      return variable.values.findIndex((v) => canonicalJsonUnsafe(v) === key)
    }
    case "prompt":
    case "model":
      return typeof assignment === "string" ? Object.keys(variable.values).indexOf(assignment) : -1
    case "boolean":
      return assignment === false ? 0 : assignment === true ? 1 : -1
    case "enum": {
      const key = canonicalJsonUnsafe(assignment)
      return variable.values.findIndex((v) => canonicalJsonUnsafe(v) === key)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Variants
// ---------------------------------------------------------------------------------------------

/**
 * One variant: one value of every variable.
 *
 * - `id`: `v01`, `v02`, ... (1-based, zero-padded to the width of the variant count, at least 2);
 * - `index`: its 0-based position in the expansion order;
 * - `assignment`: variable name → its assignment (see {@link VariableChoice}: names for
 *   `prompt`/`model`, the index for `set`);
 * - `values`: variable name → the bound value (the text, the profile object, the list);
 * - `key`: the canonical JSON of `assignment`; `digest`: the first 16 hex characters of its
 *   `Json.digest`;
 * - `isBaseline`: whether it is the study's baseline.
 *
 * @since 0.6.0
 * @category models
 */
export interface Variant {
  readonly id: string
  readonly index: number
  readonly assignment: Readonly<Record<string, Json>>
  readonly values: Readonly<Record<string, Json>>
  readonly key: string
  readonly digest: string
  readonly isBaseline: boolean
}

/**
 * The number of variants: the product of the variables' value counts (1 for no variables).
 *
 * @since 0.6.0
 * @category expansion
 */
export const variantCount = (variables: ReadonlyArray<Variable>): number =>
  variables.reduce((n, v) => n * valueCount(v), 1)

/**
 * The id of the variant at `index` (0-based) among `count`: `v` and the 1-based position,
 * zero-padded to the digits of `count` (at least 2): `v01`, ..., `v12`; `v001` for 100+.
 *
 * @since 0.6.0
 * @category identity
 */
export const variantId = (index: number, count: number): string =>
  `v${String(index + 1).padStart(Math.max(2, String(count).length), "0")}`

/** The per-variable positions of variant `index` (odometer: last variable fastest). */
const positionsOf = (counts: ReadonlyArray<number>, index: number): Array<number> => {
  const out = new Array<number>(counts.length)
  let rest = index
  for (let i = counts.length - 1; i >= 0; i--) {
    out[i] = rest % counts[i]!
    rest = Math.floor(rest / counts[i]!)
  }
  return out
}

/**
 * The index of the variant with the given per-variable positions (the inverse of the odometer
 * order).
 *
 * @since 0.6.0
 * @category expansion
 */
export const indexOfPositions = (variables: ReadonlyArray<Variable>, positions: ReadonlyArray<number>): number =>
  variables.reduce((acc, v, i) => acc * valueCount(v) + positions[i]!, 0)

/**
 * The variant at `index` (0-based) of the expansion, built without listing the others.
 *
 * @param variables the study's variables, in file order
 * @param index 0-based, below {@link variantCount}
 * @param baselineIndex the baseline's index (marks `isBaseline`), if any
 * @since 0.6.0
 * @category expansion
 */
export const variantAt = (variables: ReadonlyArray<Variable>, index: number, baselineIndex?: number): Variant => {
  const counts = variables.map(valueCount)
  const count = counts.reduce((a, b) => a * b, 1)
  const positions = positionsOf(counts, index)
  const assignment: Record<string, Json> = {}
  const values: Record<string, Json> = {}
  variables.forEach((v, i) => {
    const c = choiceAt(v, positions[i]!)
    assignment[v.name] = c.assignment
    values[v.name] = c.value
  })
  const key = canonicalJsonUnsafe(assignment)
  return {
    id: variantId(index, count),
    index,
    assignment,
    values,
    key,
    digest: digest(key).slice(0, 16),
    isBaseline: index === baselineIndex
  }
}

/**
 * Expands variables into every variant, in a fixed order: the variables in file order, the
 * last one changing fastest (an odometer), each variable's values in its own order (see
 * {@link valuesOf}). No variables give one variant (`v01`, the empty assignment). The count is
 * {@link variantCount}: check it against a cap before calling this.
 *
 * @param variables the study's variables, in file order
 * @param options `baselineIndex`: the index of the baseline variant (marks `isBaseline`)
 * @returns the variants in order, ids `v01`, `v02`, ...
 * @since 0.6.0
 * @category expansion
 */
export const expand = (
  variables: ReadonlyArray<Variable>,
  options: { readonly baselineIndex?: number | undefined } = {}
): ReadonlyArray<Variant> => {
  const n = variantCount(variables)
  const out: Array<Variant> = []
  for (let i = 0; i < n; i++) out.push(variantAt(variables, i, options.baselineIndex))
  return out
}

/**
 * The variant `assignment` names, as `name=value` pairs for messages and tables
 * (`prompt=terse, temperature=0.5`).
 *
 * @since 0.6.0
 * @category formatting
 */
export const describeAssignment = (assignment: Readonly<Record<string, Json>>): string =>
  Object.entries(assignment).map(([k, v]) => `${k}=${typeof v === "string" ? v : canonicalJsonUnsafe(v)}`).join(", ")

/**
 * One limitation per variant none of whose trials succeeded, with its trials' statuses:
 * `variant v02 (model=large) has no succeeded trial (2 budget exhausted): no result for it can
 * be compared`. The one source of these lines for `study run`'s settlement and `study report`
 * (tester16c F3).
 *
 * @param trials every trial of the version: its variant id, the variant's assignment (an
 *   object of variable → value) and its status code
 * @returns the lines, in the order the variants first appear
 * @since 0.12.0
 * @category settlement
 */
export const noSucceededTrialLimitations = (
  trials: ReadonlyArray<{ readonly variantId: string; readonly assignment: unknown; readonly status: string }>
): Array<string> => {
  const byVariant = new Map<string, Array<{ readonly assignment: unknown; readonly status: string }>>()
  for (const t of trials) {
    const list = byVariant.get(t.variantId) ?? []
    list.push(t)
    byVariant.set(t.variantId, list)
  }
  const out: Array<string> = []
  for (const [variantId, list] of byVariant) {
    if (list.some((t) => t.status === "succeeded")) continue
    const counts = new Map<string, number>()
    for (const t of list) counts.set(t.status, (counts.get(t.status) ?? 0) + 1)
    const assignment = list[0]!.assignment
    const values = typeof assignment === "object" && assignment !== null && !Array.isArray(assignment)
      ? Object.entries(assignment).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ")
      : JSON.stringify(assignment)
    out.push(
      `variant ${variantId} (${values}) has no succeeded trial (${[...counts].map(([s, n]) => `${n} ${s.replace(/_/g, " ")}`).join(", ")}): ` +
        `no result for it can be compared`
    )
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Trials
// ---------------------------------------------------------------------------------------------

/**
 * A trial's id (its suite member id): `p<version>-<variantId>-r<repeat>`, e.g. `p1-v03-r2`
 * (protocol version and repeat are 1-based).
 *
 * @since 0.6.0
 * @category identity
 */
export const trialId = (version: number, variantId: string, repeat: number): string => `p${version}-${variantId}-r${repeat}`

const TRIAL_ID = /^p([1-9][0-9]*)-(v[0-9]{2,})-r([1-9][0-9]*)$/

/**
 * The parts of a trial id, or `undefined` when `id` is not one.
 *
 * @since 0.6.0
 * @category identity
 */
export const parseTrialId = (id: string): { readonly version: number; readonly variantId: string; readonly repeat: number } | undefined => {
  const m = TRIAL_ID.exec(id)
  return m === null ? undefined : { version: Number(m[1]), variantId: m[2]!, repeat: Number(m[3]) }
}

// ---------------------------------------------------------------------------------------------
// Comparisons, stop conditions, objectives
// ---------------------------------------------------------------------------------------------

/**
 * A comparison operator: `>`, `>=`, `<`, `<=`, `==`, `!=`.
 *
 * @since 0.6.0
 * @category schemas
 */
export const Op = Schema.Literal(">", ">=", "<", "<=", "==", "!=").annotations({ identifier: "Op" })

/**
 * @since 0.6.0
 * @category models
 */
export type Op = typeof Op.Type

/**
 * Whether `actual op value` holds (plain number comparison).
 *
 * @since 0.6.0
 * @category comparisons
 */
export const holds = (op: Op, actual: number, value: number): boolean => {
  switch (op) {
    case ">":
      return actual > value
    case ">=":
      return actual >= value
    case "<":
      return actual < value
    case "<=":
      return actual <= value
    case "==":
      return actual === value
    case "!=":
      return actual !== value
  }
}

/**
 * What happens to the trials already running when a stop condition fires: `drain` (the
 * default: they finish) or `cancel` (their pipelines are interrupted, resumable).
 *
 * @since 0.6.0
 * @category schemas
 */
export const Running = Schema.Literal("drain", "cancel").annotations({ identifier: "Running" })

const running = { running: Schema.optionalWith(Running, { default: () => "drain" as const, exact: true }) }
const when = <W extends string, F extends Schema.Struct.Fields>(w: W, fields: F, description: string) =>
  Schema.Struct({ when: Schema.Literal(w), ...fields, ...running }).annotations({ description })

/**
 * A stop condition, by `when` (each with `running: drain | cancel`, default `drain`):
 *
 * - `allTrialsTerminal`: every planned trial ended (always the natural end, implicit);
 * - `successfulTrials`, `count`: that many trials succeeded;
 * - `metricThreshold`, `metric`, `op`, `value`: a trial's metric compares so;
 * - `budget`: the study's total budget (`budget.total`) is spent;
 * - `deadline`, `at`: an ISO-8601 date-time passed;
 * - `manual`: `assay study stop` or Ctrl-C.
 *
 * @since 0.6.0
 * @category schemas
 */
export const StopCondition = Schema.Union(
  when("allTrialsTerminal", {}, "every planned trial ended"),
  when("successfulTrials", {
    count: Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({ message: () => "must be an integer >= 1" })
  }, "that many trials succeeded"),
  when("metricThreshold", { metric: Schema.String.pipe(Schema.minLength(1)), op: Op, value: FiniteNumber }, "a trial's metric crossed a value"),
  when("budget", {}, "the study's total budget is spent"),
  when("deadline", {
    at: Schema.String.pipe(Schema.filter((s) => !Number.isNaN(Date.parse(s)) || "must be an ISO-8601 date-time such as 2026-12-31T00:00:00Z"))
  }, "a date-time passed"),
  when("manual", {}, "assay study stop, or Ctrl-C")
).annotations({ identifier: "StopCondition" })

/**
 * @since 0.6.0
 * @category models
 */
export type StopCondition = typeof StopCondition.Type

/**
 * An objective over a metric: `direction` `maximize`, `minimize` or `target` (with `target`,
 * closer is better), an optional `weight` (> 0, default 1) and an optional `hardConstraint`
 * (`{ op, value }`: a trial breaking it is not successful).
 *
 * @since 0.6.0
 * @category schemas
 */
export const Objective = Schema.Struct({
  metric: Schema.String.pipe(Schema.minLength(1)),
  direction: Schema.Literal("maximize", "minimize", "target"),
  target: opt(FiniteNumber),
  weight: Schema.optionalWith(FiniteNumber.pipe(Schema.greaterThan(0)), { default: () => 1, exact: true }),
  hardConstraint: opt(Schema.Struct({ op: Op, value: FiniteNumber }))
}).pipe(Schema.filter((o) => {
  if (o.direction === "target" && o.target === undefined) return { path: ["target"], message: "is missing: direction target needs a target value" }
  if (o.direction !== "target" && o.target !== undefined) return { path: ["target"], message: `only direction target takes a target (direction is ${o.direction})` }
  return undefined
})).annotations({ identifier: "Objective" })

/**
 * @since 0.6.0
 * @category models
 */
export type Objective = typeof Objective.Type

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/**
 * How a declared metric reduces its pipelines' values to a trial's value:
 *
 * - `mean`: the mean over the trial's cases of a numeric or boolean (0/1) value;
 * - `rate`: the share of cases whose value equals `equals` (canonical JSON; `true` when
 *   `equals` is not given);
 * - `p50`, `p95`: the median and the 95th percentile (Hyndman–Fan type 7) of the values;
 * - `sum`: their sum.
 *
 * `mean` and `rate` are **case-level** (one value per case, paired across variants); the others
 * are **trial-level** (one value per trial, compared across repeats).
 *
 * @since 0.6.0
 * @category schemas
 */
export const Reducer = Schema.Literal("mean", "rate", "p50", "p95", "sum").annotations({ identifier: "Reducer" })

/**
 * @since 0.6.0
 * @category models
 */
export type Reducer = typeof Reducer.Type

/**
 * Which way is better for a metric (or an objective): `maximize`, `minimize`, or `target`
 * (closer to a target value).
 *
 * @since 0.6.0
 * @category schemas
 */
export const Direction = Schema.Literal("maximize", "minimize", "target").annotations({ identifier: "Direction" })

/**
 * @since 0.6.0
 * @category models
 */
export type Direction = typeof Direction.Type

const METRIC_NAME = /^[A-Za-z_][A-Za-z0-9_.-]*$/
const DOT_PATH = /^[^.\s]+(\.[^.\s]+)*$/

/**
 * Where a declared metric reads a pipeline's value: `{ output: "a.b" }`, a dot path into the
 * pipeline's final output (a number indexes a list; `""` is the output itself), or
 * `{ metric: NAME }`, a pipeline-scope metric reported by a task (`ctx.reportMetric`).
 *
 * @since 0.6.0
 * @category schemas
 */
export const MetricSource = Schema.Union(
  Schema.Struct({
    output: Schema.String.pipe(Schema.filter((s) => s === "" || DOT_PATH.test(s) || "must be a dot path such as correct or answer.label", {
      jsonSchema: {}
    }))
  }).annotations({ description: "a dot path into the pipeline's final output" }),
  Schema.Struct({ metric: Schema.String.pipe(Schema.minLength(1)) }).annotations({ description: "a pipeline-scope metric reported by a task" })
).annotations({ identifier: "MetricSource" })

/**
 * @since 0.6.0
 * @category models
 */
export type MetricSource = typeof MetricSource.Type

/**
 * A declared metric of a study (`metrics:` of the study file): `name` (letters, digits, `_`,
 * `.`, `-`; not a built-in name), `reducer` ({@link Reducer}), `from` ({@link MetricSource}),
 * `equals` (only with `rate`: the value counted), `unit` (free text, e.g. `ratio`, `ms`) and
 * `direction` (default `maximize`).
 *
 * @since 0.6.0
 * @category schemas
 */
export const MetricDecl = Schema.Struct({
  name: Schema.String.pipe(Schema.filter((s) => METRIC_NAME.test(s) || "must be a metric name: letters, digits, _, . or -, not starting with a digit", {
    jsonSchema: { pattern: METRIC_NAME.source }
  })),
  reducer: Reducer,
  from: MetricSource,
  equals: opt(JsonValue),
  unit: opt(Schema.String),
  direction: opt(Direction)
}).pipe(Schema.filter((m) =>
  m.equals !== undefined && m.reducer !== "rate"
    ? { path: ["equals"], message: `only reducer rate takes equals (reducer is ${m.reducer})` }
    : undefined
)).annotations({ identifier: "MetricDecl" })

/**
 * @since 0.6.0
 * @category models
 */
export type MetricDecl = typeof MetricDecl.Type

/**
 * A declared metric's output path (`from: { output }`) the study loader could not check
 * against a declared output Schema (the final task declares none, or the pipeline's control
 * flow decides which output is final): `at` is its field path in the study file
 * (`metrics[i].from.output`), `name` the metric, `path` the dot path. A study run checks it
 * against its first succeeded pipeline's output and stops there when it leads nowhere.
 *
 * @since 0.9.0
 * @category models
 */
export interface OutputCheck {
  readonly at: string
  readonly name: string
  readonly path: string
}

/**
 * Whether a reducer gives one value per case (`mean`, `rate`: "case") or one per trial
 * (`p50`, `p95`, `sum`: "trial").
 *
 * @since 0.6.0
 * @category metrics
 */
export const levelOfReducer = (r: Reducer): "case" | "trial" => r === "mean" || r === "rate" ? "case" : "trial"

/**
 * How the usage metrics count the call cache's hits, in each of their descriptions (tester18d
 * F3: `calls` read "model calls (leases acquired)" while it counted hits, which acquire no
 * lease): at the figures their entry recorded when the call was made, so that variants compare
 * alike whether the cache served them or not. What was spent this time is the study's usage
 * (`study run`, `study status`: `0 calls (4 served from cache, $0.00018 not spent)`).
 */
const HITS_AT_RECORDED_USAGE = "cache hits included at their recorded usage"

/**
 * The runtime metrics every trial has, with their unit and default direction (all trial-level,
 * read from what the store and the study tables record):
 *
 * | name | unit | what |
 * | --- | --- | --- |
 * | `calls` | calls | model calls (leases acquired by the trial's tasks), summed across resumes; `calls`, `tokensIn`, `tokensOut`, `tokens` and `costUsd` count a call-cache hit at the figures its entry recorded when the call was made (since 0.9.0) |
 * | `tokensIn` | tokens | prompt tokens reported by the trial's chat outputs (`usage.promptTokens`) |
 * | `tokensOut` | tokens | completion tokens reported there (`usage.completionTokens`) |
 * | `tokens` | tokens | all tokens metered by the trial's leases |
 * | `costUsd` | USD | the cost from the tokens and the trial's model price |
 * | `wallMs` | ms | wall time while the trial was active |
 * | `latencyP95Ms` | ms | 95th percentile of its succeeded pipelines' execution time (their attempts' durations plus retry back-off; not the wait for a worker slot); pipelines served from the call cache are left out (an entry keeps no latency) |
 * | `retries` | attempts | attempts after a task's first |
 * | `rateLimited` | attempts | attempts that ended with error class `rate_limit` (HTTP 429) |
 *
 * @since 0.6.0
 * @category metrics
 */
export const BUILTIN_METRICS: Readonly<Record<string, { readonly unit: string; readonly direction: Direction; readonly description: string }>> = {
  calls: { unit: "calls", direction: "minimize", description: `model calls, ${HITS_AT_RECORDED_USAGE}` },
  tokensIn: { unit: "tokens", direction: "minimize", description: `prompt tokens of the trial's calls (every model-calling attempt, failed ones included), ${HITS_AT_RECORDED_USAGE}` },
  tokensOut: { unit: "tokens", direction: "minimize", description: `completion tokens of the trial's calls (every model-calling attempt, failed ones included), ${HITS_AT_RECORDED_USAGE}` },
  tokens: { unit: "tokens", direction: "minimize", description: `tokens of the trial's calls, ${HITS_AT_RECORDED_USAGE}` },
  costUsd: { unit: "USD", direction: "minimize", description: `cost from tokens and the model price, ${HITS_AT_RECORDED_USAGE}` },
  wallMs: { unit: "ms", direction: "minimize", description: "wall time while the trial was active" },
  latencyP95Ms: { unit: "ms", direction: "minimize", description: "p95 pipeline latency" },
  retries: { unit: "attempts", direction: "minimize", description: "attempts after a task's first" },
  rateLimited: { unit: "attempts", direction: "minimize", description: "attempts refused with a rate limit (429)" }
}

/**
 * The names of {@link BUILTIN_METRICS}, in their order.
 *
 * @since 0.6.0
 * @category metrics
 */
export const BUILTIN_METRIC_NAMES: ReadonlyArray<string> = Object.keys(BUILTIN_METRICS)

/**
 * The defaults of the comparison's analysis: 30 paired cases for a case-level claim, 3
 * repeats for a repeat-level one, a 95 % level, 10,000 bootstrap resamples, seed 1.
 *
 * @since 0.6.0
 * @category constants
 */
export const DEFAULT_ANALYSIS: {
  readonly minPairedCases: number
  readonly minRepeats: number
  readonly level: number
  readonly resamples: number
  readonly seed: number
} = { minPairedCases: 30, minRepeats: 3, level: 0.95, resamples: 10_000, seed: 1 }

/**
 * `analysis:` of a study file: `minPairedCases` (default 30) and `minRepeats` (default 3), the
 * smallest samples on which the report states a significance; `level` (0.5 < level < 1,
 * default 0.95), `resamples` (bootstrap, default 10,000) and `seed` (default 1). Not part of
 * the protocol: changing it re-analyses the same trials.
 *
 * @since 0.6.0
 * @category schemas
 */
export const Analysis = Schema.Struct({
  minPairedCases: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({ message: () => "must be an integer >= 1" })),
  minRepeats: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({ message: () => "must be an integer >= 1" })),
  level: opt(FiniteNumber.pipe(Schema.greaterThan(0.5), Schema.lessThan(1)).annotations({ message: () => "must be a number between 0.5 and 1, e.g. 0.95" })),
  resamples: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(100), Schema.lessThanOrEqualTo(1_000_000)).annotations({
    message: () => "must be an integer from 100 to 1,000,000"
  })),
  seed: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(0)).annotations({ message: () => "must be an integer >= 0" }))
}).annotations({ identifier: "Analysis" })

/**
 * @since 0.6.0
 * @category models
 */
export type Analysis = typeof Analysis.Type

// ---------------------------------------------------------------------------------------------
// Budgets and limits
// ---------------------------------------------------------------------------------------------

const PositiveInt = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({ message: () => "must be an integer >= 1" })

/**
 * A budget as written: `calls` (model calls: leases acquired), `tokens`, `costUsd` and `time`
 * (a duration string), each optional.
 *
 * @since 0.6.0
 * @category schemas
 */
export const BudgetSection = Schema.Struct({
  calls: opt(PositiveInt),
  tokens: opt(PositiveInt),
  costUsd: opt(FiniteNumber.pipe(Schema.greaterThan(0)).annotations({ message: () => "must be a number > 0 (US dollars)" })),
  time: opt(DurationFromString)
}).annotations({ identifier: "BudgetSection" })

/**
 * `budget`: `perTrial` (the same for every trial, enforced by the runner) and `total` (the
 * study's, the `budget` stop condition).
 *
 * @since 0.6.0
 * @category schemas
 */
export const Budget = Schema.Struct({
  perTrial: opt(BudgetSection),
  total: opt(BudgetSection)
}).annotations({ identifier: "Budget" })

/**
 * A budget in numbers: `calls`, `tokens`, `costUsd` (US dollars), `timeMs` (milliseconds);
 * absent = no limit.
 *
 * @since 0.6.0
 * @category models
 */
export interface BudgetFigures {
  readonly calls?: number | undefined
  readonly tokens?: number | undefined
  readonly costUsd?: number | undefined
  readonly timeMs?: number | undefined
}

/**
 * The figures of a decoded budget section (`time` in milliseconds).
 *
 * @since 0.6.0
 * @category models
 */
export const budgetFigures = (section: typeof BudgetSection.Type | undefined): BudgetFigures => {
  const out: { -readonly [K in keyof BudgetFigures]: BudgetFigures[K] } = {}
  if (section?.calls !== undefined) out.calls = section.calls
  if (section?.tokens !== undefined) out.tokens = section.tokens
  if (section?.costUsd !== undefined) out.costUsd = section.costUsd
  if (section?.time !== undefined) out.timeMs = Duration.toMillis(section.time)
  return out
}

/**
 * The default of `limits.maxTrials`: 200.
 *
 * @since 0.6.0
 * @category constants
 */
export const DEFAULT_MAX_TRIALS = 200

/**
 * `limits`: caps the plan is checked against before anything runs: `maxTrials` (default
 * {@link DEFAULT_MAX_TRIALS}), `maxPipelines`, `maxCalls` (model calls, attempts included),
 * `maxTokens`. Above a cap the study is refused; it is never sampled.
 *
 * @since 0.6.0
 * @category schemas
 */
export const Limits = Schema.Struct({
  maxTrials: opt(PositiveInt),
  maxPipelines: opt(PositiveInt),
  maxCalls: opt(PositiveInt),
  maxTokens: opt(PositiveInt)
}).annotations({ identifier: "Limits" })

// ---------------------------------------------------------------------------------------------
// Study
// ---------------------------------------------------------------------------------------------

/**
 * The kind of question: `explore`, `compare`, `optimize` or `replay`.
 *
 * @since 0.6.0
 * @category schemas
 */
export const StudyType = Schema.Literal("explore", "compare", "optimize", "replay").annotations({ identifier: "StudyType" })

/**
 * @since 0.6.0
 * @category models
 */
export type StudyType = typeof StudyType.Type

/**
 * How a study ended (or where it is): `pending`, `running`, then `completed` (at least one
 * trial succeeded, every planned trial settled), `failed` (none succeeded), `stopped_with_results`
 * (stopped early with at least one success), `cancelled` (stopped early, none), `inconclusive`
 * (successes, but the objectives cannot rank them).
 *
 * @since 0.6.0
 * @category models
 */
export type StudyStatus = "pending" | "running" | "completed" | "failed" | "stopped_with_results" | "cancelled" | "inconclusive"

/**
 * @since 0.6.0
 * @category schemas
 */
export const StudyStatus = Schema.Literal("pending", "running", "completed", "failed", "stopped_with_results", "cancelled", "inconclusive")

/**
 * How a trial ended (or where it is). Only `succeeded` trials are ever compared or ranked.
 *
 * @since 0.6.0
 * @category models
 */
export type TrialStatus = "pending" | "running" | "succeeded" | "failed" | "budget_exhausted" | "cancelled" | "incomplete" | "not_started"

/**
 * @since 0.6.0
 * @category schemas
 */
export const TrialStatus = Schema.Literal("pending", "running", "succeeded", "failed", "budget_exhausted", "cancelled", "incomplete", "not_started")

// ---------------------------------------------------------------------------------------------
// Protocol identity
// ---------------------------------------------------------------------------------------------

/**
 * The format marker of {@link protocolDigest}; bumping it changes every study's digest.
 *
 * @since 0.6.0
 * @category identity
 */
export const PROTOCOL_FORMAT = "assay-study-protocol-v1"

/**
 * The parts of a protocol, in order: `experiment` (the base experiment's definition),
 * `variables`, `baseline`, `repeats`, `budget`, `stop`, `objectives`.
 *
 * @since 0.6.0
 * @category identity
 */
export const PROTOCOL_PARTS = ["experiment", "variables", "baseline", "repeats", "budget", "stop", "objectives"] as const

/**
 * The protocol parts present only when there is something in them: `metrics` (the study file's
 * `metrics:`) and `modules` (since 0.9.0: the digest of the content of each local code file the
 * base experiment loads, by its path relative to the experiment file; see
 * `config/Study.ts`). A protocol without them has the digest and parts it had before they
 * existed, so studies that declare none keep their frozen version.
 *
 * @since 0.6.0
 * @category identity
 */
export const OPTIONAL_PROTOCOL_PARTS = ["metrics", "modules"] as const

/**
 * A protocol: the JSON of each of {@link PROTOCOL_PARTS}, and of each of
 * {@link OPTIONAL_PROTOCOL_PARTS} when declared.
 *
 * @since 0.6.0
 * @category models
 */
export type Protocol =
  & { readonly [K in typeof PROTOCOL_PARTS[number]]: Json }
  & { readonly [K in typeof OPTIONAL_PROTOCOL_PARTS[number]]?: Json | undefined }

const ALL_PARTS: ReadonlyArray<string> = [...PROTOCOL_PARTS, ...OPTIONAL_PROTOCOL_PARTS]

/** The protocol without its optional parts that are absent (so they never reach a digest). */
const present = (protocol: Protocol): Record<string, Json> => {
  const out: Record<string, Json> = {}
  for (const k of ALL_PARTS) {
    const v = (protocol as Record<string, Json | undefined>)[k]
    if (v !== undefined) out[k] = v
  }
  return out
}

/**
 * The protocol's digest: `Json.digest` (32 hex) of the canonical JSON
 * `["assay-study-protocol-v1", protocol]`, where an optional part that is not declared is
 * absent (not `null`): a protocol without `metrics` digests as it did before `metrics` existed.
 *
 * @since 0.6.0
 * @category identity
 */
export const protocolDigest = (protocol: Protocol): string => digest(canonicalJsonUnsafe([PROTOCOL_FORMAT, present(protocol)]))

/**
 * The protocol part by part, as stored beside its digest: `repeats` as its number, every other
 * part as the first 12 hex characters of its canonical JSON's digest; an optional part
 * ({@link OPTIONAL_PROTOCOL_PARTS}) only when declared.
 *
 * @since 0.6.0
 * @category identity
 */
export const protocolParts = (protocol: Protocol): Readonly<Record<string, string>> => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(present(protocol))) out[k] = k === "repeats" ? String(v) : digest(canonicalJsonUnsafe(v)).slice(0, 12)
  return out
}

/**
 * A protocol as an earlier build digested it (see {@link protocolMatches}): its digest and
 * parts. A version frozen with it is the same protocol as the current one.
 *
 * @since 0.7.0
 * @category identity
 */
export interface PreviousProtocol {
  readonly digest: string
  readonly parts: Readonly<Record<string, string>>
}

/**
 * Whether a stored protocol digest is the protocol loaded now: its current digest, or one of
 * the digests earlier builds gave the same protocol (`previousProtocols`: before 0.7.0 the
 * base experiment's `run` section and its pools' run configuration were digested, though a
 * study runs under its own `run` and neither changes what a trial measures).
 *
 * @param stored the digest a version was frozen with
 * @param loaded the protocol's current digest and its previous digests (none when absent)
 * @returns whether they are the same protocol
 * @since 0.7.0
 * @category identity
 */
export const protocolMatches = (
  stored: string,
  loaded: { readonly protocolDigest: string; readonly previousProtocols?: ReadonlyArray<PreviousProtocol> | undefined }
): boolean => stored === loaded.protocolDigest || (loaded.previousProtocols ?? []).some((p) => p.digest === stored)

/**
 * The parts to compare a stored version's parts with: the current ones, or those of a previous
 * digest format when the stored version was frozen with it (its `experiment` part is that
 * format's), so that a change names only what the user changed.
 *
 * @param stored the stored version's parts
 * @param loaded the protocol's current parts and its previous protocols
 * @returns the parts to compare with
 * @since 0.7.0
 * @category identity
 */
export const comparableParts = (
  stored: Readonly<Record<string, string>>,
  loaded: { readonly protocolParts: Readonly<Record<string, string>>; readonly previousProtocols?: ReadonlyArray<PreviousProtocol> | undefined }
): Readonly<Record<string, string>> => {
  if (stored["experiment"] === loaded.protocolParts["experiment"]) return loaded.protocolParts
  const previous = (loaded.previousProtocols ?? []).find((p) => p.parts["experiment"] === stored["experiment"])
  return previous?.parts ?? loaded.protocolParts
}

/**
 * The names of the parts that differ between two protocols' parts (a part missing on one side
 * counts as changed), in {@link PROTOCOL_PARTS} order then any others sorted.
 *
 * @since 0.6.0
 * @category identity
 */
export const changedParts = (before: Readonly<Record<string, string>>, after: Readonly<Record<string, string>>): ReadonlyArray<string> => {
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])]
  const order = (k: string) => {
    const i = ALL_PARTS.indexOf(k)
    return i === -1 ? ALL_PARTS.length : i
  }
  names.sort((a, b) => order(a) - order(b) || (a < b ? -1 : a > b ? 1 : 0))
  return names.filter((k) => before[k] !== after[k])
}

/**
 * Whether some number meets both hard constraints (`op value` each, see {@link Op}): e.g.
 * `>= 0.9` and `<= 0.5` cannot both hold (`false`); `>= 0.5` and `<= 0.9` can (`true`); `!= v`
 * contradicts only `== v`. Each constraint is a set of reals (a ray, a point, or all but a
 * point) and the two are compatible when their intersection is not empty.
 *
 * @param a a hard constraint
 * @param b another hard constraint
 * @since 0.9.0
 * @category objectives
 */
export const constraintsCompatible = (
  a: { readonly op: Op; readonly value: number },
  b: { readonly op: Op; readonly value: number }
): boolean => {
  if (a.op === "!=" || b.op === "!=") {
    const [ne, other] = a.op === "!=" ? [a, b] : [b, a]
    return !(other.op === "==" && other.value === ne.value)
  }
  const range = (c: { readonly op: Op; readonly value: number }) => ({
    lo: c.op === ">" || c.op === ">=" || c.op === "==" ? c.value : -Infinity,
    loClosed: c.op !== ">",
    hi: c.op === "<" || c.op === "<=" || c.op === "==" ? c.value : Infinity,
    hiClosed: c.op !== "<"
  })
  const x = range(a)
  const y = range(b)
  const lo = Math.max(x.lo, y.lo)
  const hi = Math.min(x.hi, y.hi)
  if (lo < hi) return true
  if (lo > hi) return false
  const loClosed = (x.lo !== lo || x.loClosed) && (y.lo !== lo || y.loClosed)
  const hiClosed = (x.hi !== hi || x.hiClosed) && (y.hi !== hi || y.hiClosed)
  return loClosed && hiClosed
}
