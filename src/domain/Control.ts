/**
 * The `control` block of a pipeline: which tasks may hand off where, and the loop budget.
 *
 * As users write it ({@link ControlDecl}):
 * - `edges`: `{ source: [later targets] }`, forward jumps (`Handoff.to`) and `"end"`
 *   (`Handoff.end`); optional when only backward operations are declared;
 * - `rewind`: `{ source: [strictly earlier targets] }`, allowed `Handoff.rewind`s;
 * - `retryAll`: `[sources]`, tasks allowed to `Handoff.retryAll` (the first task included, even
 *   in a single-task pipeline);
 * - `maxHandoffs`: positive integer, required as soon as `rewind` or `retryAll` declares
 *   something, refused otherwise: the pipeline's budget of control transitions.
 *
 * Tasks are addressed by unique name or by seq (0-based position, a number or a numeric
 * string; a seq out of range, negative ones included, is refused with the valid seqs listed). An exact task name wins over a numeric string; a name used by several tasks is
 * ambiguous and must be addressed by seq. The word `"end"` as a target is always the end of
 * the pipeline, in `edges` as in `Handoff.to("end")`: a task named `end` is addressed as a
 * target by its seq (as a source, by name or seq), and `"end"` is never a rewind target.
 *
 * {@link resolve} turns a declaration into seqs ({@link ResolvedControl}) and reports every
 * problem at once with its field path; {@link check} judges a directive a task returned against
 * it. The resolved form's `canonical` JSON (sorted, seqs only) is what the spec digest folds in,
 * so a target written as a name or as a seq is the same pipeline.
 *
 * Nothing in this module performs I/O.
 *
 * @since 0.1.0
 */
import { Either, Option, Predicate } from "effect"
import type { Handoff, Target } from "./Handoff.js"
import { closest } from "./internal/suggest.js"
import type { Json } from "./Json.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * The word for the end of the pipeline as an edge target.
 *
 * @since 0.1.0
 * @category constants
 */
export const END = "end"

/**
 * A `control` block as users write it (in code or in `pipeline.control` of a config file).
 * Sources are object keys (a task name or a seq as a string); targets are names or seqs.
 *
 * @since 0.1.0
 * @category models
 */
export interface ControlDecl {
  readonly edges?: { readonly [source: string]: ReadonlyArray<Target> } | undefined
  readonly rewind?: { readonly [source: string]: ReadonlyArray<Target> } | undefined
  readonly retryAll?: ReadonlyArray<Target> | undefined
  readonly maxHandoffs?: number | undefined
}

/**
 * The keys a {@link ControlDecl} may have.
 *
 * @since 0.1.0
 * @category constants
 */
export const CONTROL_KEYS: ReadonlyArray<string> = ["edges", "rewind", "retryAll", "maxHandoffs"]

/**
 * A declaration resolved against the pipeline's tasks.
 *
 * - `edges`: source seq → allowed forward targets (seqs, or `"end"`);
 * - `rewind`: source seq → allowed earlier targets (seqs);
 * - `retryAll`: the seqs allowed to retry all;
 * - `maxHandoffs`: the declared budget, `null` for a forward-only block;
 * - `backward`: whether any backward operation is declared;
 * - `taskNames`: the chain's task names (for messages);
 * - `canonical`: the sorted, seq-only JSON folded into the spec digest.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResolvedControl {
  readonly edges: ReadonlyMap<number, ReadonlySet<number | "end">>
  readonly rewind: ReadonlyMap<number, ReadonlySet<number>>
  readonly retryAll: ReadonlySet<number>
  readonly maxHandoffs: number | null
  readonly backward: boolean
  readonly taskNames: ReadonlyArray<string>
  readonly canonical: Json
}

/**
 * One problem of a declaration: `path`, the segments under the control block
 * (`["edges", "validate", 0]`); `message`; `suggestion`, a did-you-mean when there is one.
 *
 * @since 0.1.0
 * @category models
 */
export interface ControlIssue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
  readonly suggestion?: string | undefined
}

/**
 * An allowed transition, as {@link check} returns it: the source seq, the target seq (`"end"`
 * for the end; `0` for `retryAll`), the entry value (`None` = reuse the source's input for
 * `to`/`end`, the bound seed for `retryAll`) and the reason.
 *
 * @since 0.1.0
 * @category models
 */
export interface Transition {
  readonly operation: Handoff["operation"]
  readonly fromSeq: number
  readonly toSeq: number | "end"
  readonly value: Option.Option<unknown>
  readonly reason: string
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/**
 * Writes issue segments the way users read them: `edges.validate[0]`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const formatIssuePath = (segments: ReadonlyArray<string | number>): string => {
  let out = ""
  for (const s of segments) {
    if (typeof s === "number") out += `[${s}]`
    else out += out === "" ? s : `.${s}`
  }
  return out
}

const isRecord = (u: unknown): u is Record<string, unknown> => Predicate.isObject(u) && !Array.isArray(u)

const NUMERIC = /^(0|[1-9][0-9]*)$/

/** A negative integer written as a string (`"-1"`): judged as that number (out of range). */
const NEGATIVE = /^-(0|[1-9][0-9]*)$/

/** A decimal fraction (`"1.5"`): judged as that number (not an integer); `"1.0"` is refused. */
const FRACTION = /^-?(0|[1-9][0-9]*)\.[0-9]+$/

/**
 * A string that reads as a number but is not written as a seq (`"1.0"`, `"01"`, `"+1"`, `"1e0"`,
 * `"1.5"`): refused as a seq, saying how a seq is written (only {@link NUMERIC} is one).
 */
const LOOKS_NUMERIC = /^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?$/i

/** The seqs a reference may use, with their tasks: `0 ("generate"), 1 ("validate")`. */
const validSeqs = (names: ReadonlyArray<string>): string =>
  names.length <= 12 ?
    `the valid seqs are ${names.map((n, i) => `${i} ("${n}")`).join(", ")}` :
    `the valid seqs are 0..${names.length - 1}`

const shown = (u: unknown): string => {
  if (typeof u === "string") return JSON.stringify(u)
  if (typeof u === "number" || typeof u === "boolean" || u === null) return String(u)
  if (u === undefined) return "undefined"
  return Array.isArray(u) ? "an array" : typeof u
}

/** A task as people read it: `"validate" (seq 1)`. */
const taskLabel = (names: ReadonlyArray<string>, seq: number): string => `"${names[seq]}" (seq ${seq})`

/** An edge as people read it: `validate → report`. */
const edgeLabel = (names: ReadonlyArray<string>, from: number, to: number | "end"): string =>
  `${names[from]} → ${to === END ? END : names[to]}`

/**
 * Resolves one task reference: an exact name (unique), else a seq (an integer, or a string
 * written as a plain integer: `"1"`, never `"1.0"` or `"01"`) within range. Returns the seq or
 * the reason it is refused.
 */
const resolveRef = (
  names: ReadonlyArray<string>,
  ref: unknown
): Either.Either<number, { readonly message: string; readonly suggestion?: string }> => {
  if (typeof ref === "string") {
    // (the first match and a count: no array or closure per call, as this runs at every
    // directive that names its target; the list is built only for the refusal)
    let first = -1
    let matches = 0
    for (let i = 0; i < names.length; i++) {
      if (names[i] === ref) {
        if (matches++ === 0) first = i
      }
    }
    if (matches === 1) return Either.right(first)
    if (matches > 1) {
      const seqs: Array<number> = []
      for (let i = 0; i < names.length; i++) if (names[i] === ref) seqs.push(i)
      return Either.left({
        message: `task name "${ref}" is used by seqs ${seqs.join(", ")}: address the task by its seq`
      })
    }
    // (`"1.5"`: judged as the number, "a seq is an integer")
    if (NUMERIC.test(ref) || NEGATIVE.test(ref) || (FRACTION.test(ref) && !Number.isInteger(Number(ref)))) {
      return resolveRef(names, Number(ref))
    }
    if (LOOKS_NUMERIC.test(ref)) {
      return Either.left({
        message: `"${ref}" is not a seq: a seq is written as a plain integer (0, 1, 2: no sign, leading zero, ` +
          `decimal point or exponent), and no task has this name; ${validSeqs(names)}`
      })
    }
    const near = closest(ref, names)
    return Either.left({
      message: `unknown task "${ref}" (the tasks are ${names.map((n) => `"${n}"`).join(", ")})`,
      ...(near === undefined ? {} : { suggestion: `did you mean "${near}"?` })
    })
  }
  if (typeof ref === "number") {
    if (!Number.isInteger(ref)) {
      return Either.left({ message: `a seq is an integer >= 0, got ${ref} (${validSeqs(names)})` })
    }
    if (ref < 0 || ref >= names.length) {
      return Either.left({
        message: `seq ${ref} is out of range: the pipeline has ${names.length} task${
          names.length === 1 ? "" : "s"
        }, ${validSeqs(names)}`
      })
    }
    return Either.right(ref)
  }
  return Either.left({ message: `a task is a name or a seq, got ${shown(ref)}` })
}

/** Why `"end"` is refused as a rewind target, with the seq of a task named `end` if any. */
const endIsNoRewindTarget = (names: ReadonlyArray<string>): string => {
  const named = names.indexOf(END)
  return `"end" is not a rewind target: rewind goes to a strictly earlier task${
    named < 0 ? "" : ` ("end" as a target is the end of the pipeline: address the task named "end" by its seq ${named})`
  }`
}

const sortTargets = (targets: Iterable<number | "end">): Array<number | "end"> =>
  [...targets].sort((a, b) => (a === END ? 1 : b === END ? -1 : a - b))

// ---------------------------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------------------------

/**
 * Resolves a declaration against the chain's task names, reporting every problem at once.
 *
 * Refused (each with its field path under the block): a block that is not an object or has an
 * unknown key (with a did-you-mean); a block that declares no operation; `edges`/`rewind` not
 * an object of non-empty lists, `retryAll` not a non-empty list; a source or target that is
 * not a unique task name or a seq in range (a repeated name says which seqs use it); an edge
 * that is not strictly forward, or `"end"` from the last task; a rewind target that is not
 * strictly earlier (or is `"end"`); `maxHandoffs` missing while `rewind`/`retryAll` is
 * declared, present without them (`maxHandoffs requires backward operations`), or
 * not a positive integer (`true`, `"3"`, `0`, `-1`, `2.5` are refused; JavaScript cannot tell
 * `3.0` from `3`, a config file can: see the config module).
 *
 * @param taskNames - the chain's task names, by seq.
 * @param decl - the block as written (any value: configs pass parsed data).
 * @returns the resolved control, or the issues.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (
  taskNames: ReadonlyArray<string>,
  decl: unknown
): Either.Either<ResolvedControl, ReadonlyArray<ControlIssue>> => {
  const issues: Array<ControlIssue> = []
  const add = (path: ReadonlyArray<string | number>, message: string, suggestion?: string) =>
    issues.push(suggestion === undefined ? { path, message } : { path, message, suggestion })
  if (!isRecord(decl)) {
    add([], `control must be an object with edges, rewind, retryAll or maxHandoffs, got ${shown(decl)}`)
    return Either.left(issues)
  }
  const n = taskNames.length
  for (const key of Object.keys(decl)) {
    if (!CONTROL_KEYS.includes(key)) {
      // a snake_case spelling (`max_handoffs`) is the camelCase key it spells
      const camel = key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())
      const near = CONTROL_KEYS.includes(camel) ? camel : closest(camel, CONTROL_KEYS)
      add([key], `unknown key "${key}"`, near === undefined ? undefined : `did you mean "${near}"?`)
    }
  }

  const edges = new Map<number, Set<number | "end">>()
  const rewind = new Map<number, Set<number>>()
  const retryAll = new Set<number>()

  const sourceOf = (section: string, key: string): number | undefined => {
    const r = resolveRef(taskNames, key)
    if (Either.isLeft(r)) {
      add([section, key], r.left.message, r.left.suggestion)
      return undefined
    }
    return r.right
  }

  const lists = (section: "edges" | "rewind", onTarget: (from: number, key: string, t: unknown, at: number) => void) => {
    const raw = decl[section]
    if (raw === undefined) return
    if (!isRecord(raw)) {
      add([section], `${section} must be an object { source: [targets] }, got ${shown(raw)}`)
      return
    }
    if (Object.keys(raw).length === 0) {
      add([section], `${section} is empty: declare at least one source or remove ${section}`)
      return
    }
    for (const [key, targets] of Object.entries(raw)) {
      const from = sourceOf(section, key)
      if (!Array.isArray(targets)) {
        add([section, key], `expected a list of targets, got ${shown(targets)}`)
        continue
      }
      if (targets.length === 0) {
        add([section, key], "the list of targets is empty: declare at least one or remove the source")
        continue
      }
      if (from === undefined) continue
      targets.forEach((t, i) => onTarget(from, key, t, i))
    }
  }

  const addTo = <V>(m: Map<number, Set<V>>, from: number, to: V) => {
    m.set(from, (m.get(from) ?? new Set<V>()).add(to))
  }

  // a target of `edges` (forward, or "end") or of `rewind` (strictly back)
  const target = (section: "edges" | "rewind") => (from: number, key: string, t: unknown, i: number) => {
    const path = [section, key, i]
    const forward = section === "edges"
    if (t === END) {
      if (!forward) return add(path, endIsNoRewindTarget(taskNames))
      if (from === n - 1) return add(path, `"end" from the last task ${taskLabel(taskNames, from)} changes nothing`)
      return addTo(edges, from, END)
    }
    const r = resolveRef(taskNames, t)
    if (Either.isLeft(r)) return add(path, r.left.message, r.left.suggestion)
    const to = r.right
    if (forward ? to <= from : to >= from) {
      const [rule, relation, other] = forward ?
        ["edges go strictly forward", "after", "going back in rewind"] :
        ["rewind goes strictly back", "before", "going forward in edges"]
      const label = (seq: number) => taskLabel(taskNames, seq)
      return add(path, `${rule}: ${label(to)} is not ${relation} ${label(from)} (declare ${other})`)
    }
    return forward ? addTo(edges, from, to) : addTo(rewind, from, to)
  }
  lists("edges", target("edges"))
  lists("rewind", target("rewind"))

  if (decl["retryAll"] !== undefined) {
    const raw = decl["retryAll"]
    if (!Array.isArray(raw)) {
      add(["retryAll"], `retryAll must be a list of source tasks, got ${shown(raw)}`)
    } else if (raw.length === 0) {
      add(["retryAll"], "the list of sources is empty: declare at least one or remove retryAll")
    } else {
      raw.forEach((s, i) => {
        const r = resolveRef(taskNames, s)
        if (Either.isLeft(r)) add(["retryAll", i], r.left.message, r.left.suggestion)
        else retryAll.add(r.right)
      })
    }
  }

  // a present section counts as declared (a malformed one is reported on its own path)
  const declaresBackward = decl["rewind"] !== undefined || decl["retryAll"] !== undefined
  const declaresForward = decl["edges"] !== undefined
  const max = decl["maxHandoffs"]
  // an unknown key that stands for maxHandoffs (`maxHandoff`, `max_handoffs`) was reported with
  // its did-you-mean: its absence under the right name is not a second problem
  const misspeltMax = issues.some((i) => i.path.length === 1 && i.suggestion === `did you mean "maxHandoffs"?`)
  if (max === undefined) {
    if (declaresBackward && !misspeltMax) {
      add(["maxHandoffs"], "maxHandoffs is required when rewind or retryAll is declared (the loop budget)")
    }
  } else if (typeof max !== "number" || !Number.isSafeInteger(max) || max < 1) {
    add(["maxHandoffs"], `maxHandoffs must be a positive integer, got ${shown(max)}`)
  } else if (!declaresBackward && !Object.keys(decl).some((key) => !CONTROL_KEYS.includes(key))) {
    // (not after an unknown key: a misspelt `rewind` would report this as a knock-on)
    add(["maxHandoffs"], "maxHandoffs requires backward operations (rewind or retryAll)")
  }
  if (!declaresBackward && !declaresForward && max === undefined && issues.length === 0) {
    add([], "control declares no operation: declare edges, rewind or retryAll (or remove control)")
  }
  if (issues.length > 0) return Either.left(issues)

  const backward = rewind.size > 0 || retryAll.size > 0
  const maxHandoffs = backward ? (max as number) : null
  const bySeq = <V>(m: ReadonlyMap<number, ReadonlySet<V>>, sort: (s: Iterable<V>) => Array<V>) =>
    [...m.keys()].sort((a, b) => a - b).map((k) => [k, sort(m.get(k)!)] as Json)
  const canonical: Json = {
    edges: bySeq(edges, sortTargets) as Json,
    rewind: bySeq(rewind, (s) => [...s].sort((a, b) => a - b)) as Json,
    retryAll: [...retryAll].sort((a, b) => a - b),
    maxHandoffs
  }
  return Either.right(Object.freeze({
    edges,
    rewind,
    retryAll,
    maxHandoffs,
    backward,
    taskNames: Object.freeze([...taskNames]),
    canonical
  }))
}

/**
 * A readable summary of a resolved block (what `assay validate` and `Template.describe` show):
 * edges as `validate(1) → report(2)`, with the budget.
 *
 * @since 0.1.0
 * @category formatting
 */
export const describe = (control: ResolvedControl): Json => {
  const names = control.taskNames
  const at = (seq: number | "end") => (seq === END ? END : `${names[seq]}(${seq})`)
  const pairs = (m: ReadonlyMap<number, ReadonlySet<number | "end">>) =>
    [...m.keys()].sort((a, b) => a - b).flatMap((from) => sortTargets(m.get(from)!).map((to) => `${at(from)} → ${at(to)}`))
  return {
    edges: pairs(control.edges),
    rewind: pairs(control.rewind as ReadonlyMap<number, ReadonlySet<number | "end">>),
    retryAll: [...control.retryAll].sort((a, b) => a - b).map(at),
    maxHandoffs: control.maxHandoffs,
    backward: control.backward
  }
}

// ---------------------------------------------------------------------------------------------
// Checking a directive
// ---------------------------------------------------------------------------------------------

/** `Handoff.<operation>`, for a refusal's message. */
const opLabel = (directive: Handoff): string => `Handoff.${directive.operation}`

/** The transition a checked directive asks for. */
const accept = (directive: Handoff, fromSeq: number, toSeq: number | "end"): Either.Either<Transition, string> =>
  Either.right({ operation: directive.operation, fromSeq, toSeq, value: directive.value, reason: directive.reason })

/** The seq a directive's target names, or the refusal naming the source and the bad target. */
const targetOf = (names: ReadonlyArray<string>, fromSeq: number, directive: Handoff): Either.Either<number, string> => {
  const resolved = resolveRef(names, directive.target)
  // (a resolved target as it is: no closure or new Either per directive)
  if (Either.isRight(resolved)) return resolved as Either.Either<number, never>
  const e = resolved.left
  return Either.left(
    `${taskLabel(names, fromSeq)} returned ${opLabel(directive)} with a bad target: ${e.message}${
      e.suggestion === undefined ? "" : ` (${e.suggestion})`
    }`
  )
}

/**
 * Judges a directive a task returned against the pipeline's declaration.
 *
 * Refused (the message is what the fatal `HandoffRefused` carries): a pipeline without control;
 * a reason that is not a string; options with a key other than `reason`; a target that does not resolve; `to` along an undeclared edge
 * (named: `validate → report`) or to a task that is not strictly later; `end` from the last task
 * or without a declared `"end"` edge; `rewind` without a value (`null` is a value), to a task
 * that is not strictly earlier, or along an undeclared rewind; `retryAll` with a value, or from
 * a task not listed in `control.retryAll`. The value is kept as is: encoding it is the runner's
 * job.
 *
 * @param control - the resolved block, or `undefined` for a pipeline without one.
 * @param nTasks - the number of tasks in the chain.
 * @param fromSeq - the seq of the task that returned the directive.
 * @param directive - what it returned.
 * @returns the transition to commit, or the reason it is refused.
 *
 * @since 0.1.0
 * @category checks
 */
export const check = (
  control: ResolvedControl | undefined,
  nTasks: number,
  fromSeq: number,
  directive: Handoff
): Either.Either<Transition, string> => {
  // (no closure per call: this runs at every transition of every control pipeline; the labels
  // of a refusal are built only when one is)
  if (control === undefined) {
    return Either.left(`the task at seq ${fromSeq} returned ${opLabel(directive)}, but the pipeline declares no control block`)
  }
  const names = control.taskNames
  if (typeof directive.reason !== "string") {
    return Either.left(`${taskLabel(names, fromSeq)} returned ${opLabel(directive)} with a reason that is not a string (${shown(directive.reason)})`)
  }
  // options with keys other than `reason` (untyped code: `{ reasn: "x" }`), kept by Handoff
  const unknownOptions = (directive as unknown as Record<symbol, ReadonlyArray<string> | undefined>)[
    Symbol.for("assay/Handoff/unknownOptions")
  ]
  if (unknownOptions !== undefined) {
    return Either.left(
      `${taskLabel(names, fromSeq)} returned ${opLabel(directive)} with unknown option${unknownOptions.length === 1 ? "" : "s"} ` +
        `${unknownOptions.map((k) => `"${k}"`).join(", ")}: the only option is "reason"`
    )
  }
  // (the symbol of `Handoff.HandoffTypeId`, looked up by key: Handoff imports this module's types)
  if (Option.isSome(directive.value) && Predicate.hasProperty(directive.value.value, Symbol.for("assay/Handoff"))) {
    return Either.left(
      `${taskLabel(names, fromSeq)} returned ${opLabel(directive)} whose value is itself a Handoff directive: a directive cannot be a value ` +
        `(pass the target's entry state, e.g. Handoff.rewind(target, draft); to end, return Handoff.end(...) itself)`
    )
  }
  switch (directive.operation) {
    case "to": {
      const t = targetOf(names, fromSeq, directive)
      if (Either.isLeft(t)) return Either.left(t.left)
      const to = t.right
      if (to <= fromSeq) {
        return Either.left(
          `${taskLabel(names, fromSeq)} returned Handoff.to ${taskLabel(names, to)}, which is not after it: Handoff.to only goes forward (going back is Handoff.rewind, declared in control.rewind)`
        )
      }
      if (control.edges.get(fromSeq)?.has(to) !== true) return Either.left(undeclared(control, fromSeq, to))
      return accept(directive, fromSeq, to)
    }
    case "end": {
      if (fromSeq === nTasks - 1) {
        return Either.left(`${taskLabel(names, fromSeq)} is the last task: Handoff.end from it changes nothing and is refused`)
      }
      if (control.edges.get(fromSeq)?.has(END) !== true) return Either.left(undeclared(control, fromSeq, END))
      return accept(directive, fromSeq, END)
    }
    case "rewind": {
      if (Option.isNone(directive.value)) {
        return Either.left(
          `${taskLabel(names, fromSeq)} returned Handoff.rewind without a value: rewind needs the target's explicit entry state (null is a value)`
        )
      }
      if (directive.target === END) return Either.left(`${taskLabel(names, fromSeq)} returned Handoff.rewind("end"): ${endIsNoRewindTarget(names)}`)
      const t = targetOf(names, fromSeq, directive)
      if (Either.isLeft(t)) return Either.left(t.left)
      const to = t.right
      if (to >= fromSeq) {
        return Either.left(
          `${taskLabel(names, fromSeq)} returned Handoff.rewind to ${taskLabel(names, to)}, which is not before it: rewind goes strictly back`
        )
      }
      if (control.rewind.get(fromSeq)?.has(to) !== true) {
        const declared = [...(control.rewind.get(fromSeq) ?? [])].sort((a, b) => a - b).map((s) => names[s])
        return Either.left(
          `undeclared rewind ${edgeLabel(names, fromSeq, to)}: control.rewind ${
            declared.length === 0 ? `declares nothing for ${names[fromSeq]}` : `allows ${names[fromSeq]} → [${declared.join(", ")}]`
          }`
        )
      }
      return accept(directive, fromSeq, to)
    }
    case "retryAll": {
      if (Option.isSome(directive.value)) {
        return Either.left(
          `${taskLabel(names, fromSeq)} returned Handoff.retryAll with a value: retryAll replays the bound seed and takes none (to restart with a chosen state, use Handoff.rewind(0, state))`
        )
      }
      if (!control.retryAll.has(fromSeq)) {
        return Either.left(`${taskLabel(names, fromSeq)} returned Handoff.retryAll, but control.retryAll does not list it`)
      }
      return accept(directive, fromSeq, 0)
    }
    default:
      return Either.left(`${taskLabel(names, fromSeq)} returned an unknown directive operation ${shown(directive.operation)}`)
  }
}

const undeclared = (control: ResolvedControl, from: number, to: number | "end"): string => {
  const names = control.taskNames
  const declared = control.edges.get(from)
  return `undeclared edge ${edgeLabel(names, from, to)}: control.edges ${
    declared === undefined ?
      `declares nothing for ${names[from]}` :
      `allows ${names[from]} → [${sortTargets(declared).map((t) => (t === END ? END : names[t])).join(", ")}]`
  }`
}

/**
 * The number of transitions a pipeline may make in a run: the smaller of the declared
 * `maxHandoffs` and the run's ceiling (`RunConfig.maxHandoffs`); the run's ceiling alone for a
 * forward-only block (no declared budget). A run can lower a pipeline's budget, never raise it.
 *
 * @param control - the resolved block.
 * @param runMaxHandoffs - the run's ceiling (positive integer).
 * @returns the effective limit.
 *
 * @since 0.1.0
 * @category budgets
 */
export const effectiveLimit = (control: ResolvedControl, runMaxHandoffs: number): number =>
  control.maxHandoffs === null ? runMaxHandoffs : Math.min(control.maxHandoffs, runMaxHandoffs)

/**
 * Where a pipeline's effective budget ({@link effectiveLimit}) comes from, in words for an
 * error message: `maxHandoffs 3` (declared, under the run's ceiling), `maxHandoffs: declared 3,
 * capped to 2 by run.maxHandoffs`, or `run.maxHandoffs 5` (a forward-only block declares none).
 *
 * @param control - the resolved block.
 * @param runMaxHandoffs - the run's ceiling (positive integer).
 * @returns the phrase, without a trailing period.
 *
 * @since 0.1.0
 * @category budgets
 */
export const describeLimit = (control: ResolvedControl, runMaxHandoffs: number): string =>
  control.maxHandoffs === null
    ? `run.maxHandoffs ${runMaxHandoffs}`
    : control.maxHandoffs > runMaxHandoffs
    ? `maxHandoffs: declared ${control.maxHandoffs}, capped to ${runMaxHandoffs} by run.maxHandoffs`
    : `maxHandoffs ${control.maxHandoffs}`
