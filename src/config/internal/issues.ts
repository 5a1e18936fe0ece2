/**
 * @internal
 *
 * Problems of an experiment file as `ConfigIssue`s: field paths, did-you-mean suggestions
 * (Levenshtein distance), the wording of Schema decode errors, and the one `ConfigError` that
 * lists them.
 */
import { ParseResult, type Schema } from "effect"
import { FANOUT } from "../Config.js"
import { allowedKeysAt, memberAt, placesOfKey } from "./keys.js"
import { ConfigError, type ConfigIssue } from "../../domain/Errors.js"
import * as Pricing from "../../domain/Pricing.js"

// ---------------------------------------------------------------------------------------------
// Helpers: paths, suggestions
// ---------------------------------------------------------------------------------------------

/**
 * Writes a Schema issue path the way users read it: `pools.apis.resources[1].capacity`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const formatPath = (segments: ReadonlyArray<PropertyKey>): string => {
  let out = ""
  for (const s of segments) {
    if (typeof s === "number") out += `[${s}]`
    else out += out === "" ? String(s) : `.${String(s)}`
  }
  return out
}

import { closest, levenshtein } from "../../domain/internal/suggest.js"

export { closest, levenshtein }

export const issue = (p: string, message: string, suggestion?: string): ConfigIssue =>
  suggestion === undefined ? { path: p, message } : { path: p, message, suggestion }

export const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

// ---------------------------------------------------------------------------------------------
// Schema decoding
// ---------------------------------------------------------------------------------------------

/**
 * Whether a Schema path is the first element of a task list (`pipeline.tasks[0]` or a
 * fanout's `...tasks[0]`): a missing one means the list is empty.
 */
export const isEmptyTaskList = (p: ReadonlyArray<PropertyKey>): boolean =>
  p.length >= 3 && p[0] === "pipeline" && p[p.length - 1] === 0 && p[p.length - 2] === "tasks"

export const isFanoutEntry = (entry: unknown): boolean => isRecord(entry) && entry["use"] === FANOUT

/** The value at a path of a parsed file (`undefined` when the path leads nowhere). */
export const valueAt = (root: unknown, p: ReadonlyArray<PropertyKey>): unknown => {
  let v: unknown = root
  for (const seg of p) {
    if (Array.isArray(v) && typeof seg === "number") v = v[seg]
    else if (isRecord(v) && typeof seg === "string") v = v[seg]
    else return undefined
  }
  return v
}

export const literalExpected = /^Expected ("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false), actual /

/**
 * Merges the "Expected "full", actual "ful"" / "Expected "summary", actual "ful"" lines that a
 * union of literals gives into one line: `expected "full" or "summary", got "ful"`, with a
 * did-you-mean (a case-only slip such as `readwrite` for `readWrite` included). A union that
 * also takes other forms (`true | "readWrite" | … | { mode, ttl }`) is merged too, each other
 * form named briefly (`a boolean`, `an object`). `undefined` when no line at the path is a
 * literal mismatch (nothing to merge).
 */
export const mergeLiteralChoices = (p: string, messages: ReadonlyArray<string>, actual: unknown): ConfigIssue | undefined => {
  const literals: Array<string> = []
  const others: Array<string> = []
  for (const m of messages) {
    const match = literalExpected.exec(m)
    if (match !== null) {
      literals.push(match[1]!)
      continue
    }
    const expected = /^Expected (.*), actual /s.exec(m)?.[1]
    if (expected === undefined) return undefined
    // an optional field's "or undefined" is no form to write
    if (expected === "undefined") continue
    const other = expected.startsWith("{") ? "an object" : expected === "boolean" ? "a boolean" : expected.length <= 30 ? expected : "another form"
    if (!others.includes(other)) others.push(other)
  }
  if (literals.length === 0 || literals.length + others.length < 2) return undefined
  const all = [...literals, ...others]
  const choices = all.length === 2 ? `${all[0]} or ${all[1]}` : `${all.slice(0, -1).join(", ")} or ${all[all.length - 1]}`
  const strings = literals.filter((l) => l.startsWith("\"")).map((l) => JSON.parse(l) as string)
  // the same characters in another order (`=>` for `>=`): too short for an edit distance to tell
  const sorted = (x: string) => [...x].sort().join("")
  const near = typeof actual === "string"
    ? strings.find((l) => l !== actual && l.length === actual.length && sorted(l) === sorted(actual)) ?? closest(actual, strings)
    : undefined
  return issue(p, `expected ${choices}, got ${JSON.stringify(actual)}`, near === undefined ? undefined : `did you mean ${JSON.stringify(near)}?`)
}

const LITERAL_UNION = /^Expected ("(?:[^"\\]|\\.)*"(?: \| "(?:[^"\\]|\\.)*")+), actual (.*)$/s

/**
 * A union's refusal of its tag in one line (`Expected "enum" | "range" | ..., actual "rnage"`,
 * a variable's `type`, a stop condition's `when`): `expected "enum", "range", … or "set", got
 * "rnage"`, with a did-you-mean; `undefined` for any other message.
 */
const literalUnion = (p: string, message: string): ConfigIssue | undefined => {
  const m = LITERAL_UNION.exec(message)
  if (m === null) return undefined
  const choices = m[1]!.split(" | ").map((l) => JSON.parse(l) as string)
  const actual = m[2]!
  let near: string | undefined
  try {
    const a = JSON.parse(actual) as unknown
    near = typeof a === "string" ? closest(a, choices) : undefined
  } catch {
    near = undefined
  }
  return issue(
    p,
    `expected ${choices.slice(0, -1).map((c) => JSON.stringify(c)).join(", ")} or ${JSON.stringify(choices[choices.length - 1])}, got ${actual}`,
    near !== undefined ? `did you mean ${JSON.stringify(near)}?` : undefined
  )
}

/**
 * A Schema refusal (`Expected X, actual Y`) in the words a user reads, never the Schema's
 * internals: `Expected Struct (Encoded side), actual "costUsd"` → `expected an object { metric,
 * direction, target, weight, hardConstraint }, got "costUsd"`; `Expected number, actual "3"` →
 * `expected a number, got "3"`; `Expected ReadonlyArray<…>, actual 5` → `expected a list, got
 * 5`. A message in no such form (a field's own wording) is returned as it is. `at` is the
 * issue's path, `actual` the value there, `root` the file's Schema (for an object's keys).
 *
 * @since 0.6.0
 * @category formatting
 */
export const schemaWording = (message: string, at: ReadonlyArray<PropertyKey>, actual: unknown, root?: Schema.Schema.Any): string => {
  const m = /^Expected (.*), actual (.*)$/s.exec(message)
  if (m === null) return message
  const expected = m[1]!
  const got = m[2]!
  const keys = isRecord(actual) ? [] : allowedKeysAt(at, root)
  const words = keys.length > 0 && (expected.startsWith("{") || /\b(?:Struct|Encoded side|Type side)\b/.test(expected) || /^[A-Z]\w*$/.test(expected))
    ? `an object { ${keys.join(", ")} }`
    : /^(?:Readonly)?Array<|^readonly \[/.test(expected)
    ? "a list"
    : /^(?:number|string|boolean|bigint|symbol)$/.test(expected)
    ? `a ${expected}`
    : expected
  return `expected ${words}, got ${got}`
}

/**
 * An unknown key that another member of a tagged union takes (`values` on a `type: boolean`
 * variable, `metric` on a `when: budget` stop condition): `a boolean variable takes no values
 * (…)`, with the keys the member does take.
 */
const taggedKeyIssue = (
  p: string,
  key: string,
  member: { readonly tag: string; readonly value: string; readonly keys: ReadonlyArray<string> },
  parent: ReadonlyArray<PropertyKey>
): ConfigIssue => {
  const own = member.keys.filter((k) => k !== member.tag)
  const what = parent.length >= 2 && parent[parent.length - 2] === "variables"
    ? `a ${member.value} variable`
    : parent.length >= 2 && parent[parent.length - 2] === "stop"
    ? `a ${member.value} stop condition`
    : `an entry with ${member.tag}: ${member.value}`
  const suggestion = member.value === "boolean" && key === "values"
    ? "its values are always false and true: remove values"
    : own.length > 0
    ? `remove ${key}; ${what} takes ${own.join(", ")}`
    : `remove ${key}; ${what} takes no other key`
  return issue(p, `${what} takes no ${key}`, suggestion)
}

/**
 * `args: "echo {value}"`: a task's `args` is a list of its arguments. For `shellRun` the
 * command is the first argument, so the message shows both of its forms.
 */
export const argsNotAList = (p: string, text: string, task: unknown): ConfigIssue => {
  const use = typeof task === "object" && task !== null ? (task as { use?: unknown }).use : undefined
  if (use === "shellRun") {
    const argv = text.trim().split(/\s+/).filter((w) => w !== "")
    return issue(
      p,
      "is a list of the task's arguments, and shellRun's first argument is the command",
      `write the command as an argv list, one element per argument and no shell: args: [${JSON.stringify(argv)}]` +
        (text.includes("{value}") ? "" : `; or as one shell line: args: [${JSON.stringify(text)}]`)
    )
  }
  return issue(p, "is a list of the task's arguments, got a string", `args: [${JSON.stringify(text)}]`)
}

/**
 * Where a Schema issue path enters a price: the path up to a resource's `pricing`
 * (`…resources[0].pricing`, a single price or a table by model) or the experiment's top-level
 * `pricing` table; `undefined` for any other path.
 */
const pricingRoot = (
  p: ReadonlyArray<PropertyKey>
): { readonly at: ReadonlyArray<PropertyKey>; readonly kind: "resource" | "table" } | undefined => {
  if (p.length >= 2 && p[0] === "pricing") return { at: p.slice(0, 1), kind: "table" }
  for (let k = 2; k < p.length; k++) {
    if (p[k] === "pricing" && typeof p[k - 1] === "number" && p[k - 2] === "resources") {
      return { at: p.slice(0, k + 1), kind: "resource" }
    }
  }
  return undefined
}

export const decodeIssues = (
  error: ParseResult.ParseError,
  input: unknown,
  root?: Schema.Schema.Any
): Array<ConfigIssue> => {
  const raw = ParseResult.ArrayFormatter.formatErrorSync(error)
  // A price is checked by its own rules (`Pricing`), which pick the form the user meant by its
  // shape: a resource's `pricing` is a union of one price and a table by model, and the
  // Schema's report on a union lists every branch's complaints (`Expected ModelPrice, actual
  // 2` beside the real typo), so a price's issues are replaced by one line per real problem
  // (the Schema's lines are kept should those rules find none).
  const prices = new Map<string, ReadonlyArray<ConfigIssue>>()
  const byPath = new Map<string, number>()
  for (const i of raw) byPath.set(formatPath(i.path), (byPath.get(formatPath(i.path)) ?? 0) + 1)
  const out: Array<ConfigIssue> = []
  const seen = new Set<string>()
  const merged = new Set<string>()
  for (const i of raw) {
    const p = formatPath(i.path)
    const price = pricingRoot(i.path)
    if (price !== undefined) {
      const at = formatPath(price.at)
      let own = prices.get(at)
      if (own === undefined) {
        const value = valueAt(input, price.at)
        own = price.kind === "resource" ? Pricing.resourcePricingIssues(value, at) : Pricing.tableIssues(value, at)
        prices.set(at, own)
        for (const entry of own) {
          const k = `${entry.path}\u0000${entry.message}`
          if (seen.has(k)) continue
          seen.add(k)
          out.push(entry)
        }
      }
      if (own.length > 0) continue
    }
    // `NullOr(x)` adds "Expected null" next to the real problem, an optional field "Expected
    // undefined": drop that noise.
    if ((i.message.startsWith("Expected null") || i.message.startsWith("Expected undefined")) && (byPath.get(p) ?? 0) > 1) continue
    // A union that also takes an object (`cache: true | "readWrite" | … | { mode, ttl }`),
    // given an object with a mistake inside: the mistake's own line says it; the union's "expected
    // … got {…}" at the object itself is noise.
    if (
      i._tag === "Type" && isRecord(valueAt(input, i.path)) &&
      raw.some((j) => j.path.length > i.path.length && i.path.every((seg, k) => j.path[k] === seg))
    ) continue
    if (merged.has(p)) continue
    let entry: ConfigIssue
    const atPath = raw.filter((j) => formatPath(j.path) === p && j._tag === "Type").map((j) => j.message)
    const choice = i._tag === "Type" && atPath.length > 1 ? mergeLiteralChoices(p, atPath, valueAt(input, i.path)) : undefined
    if (choice !== undefined) {
      merged.add(p)
      entry = choice
    } else if (i._tag === "Missing" && isEmptyTaskList(i.path) && i.path.length > 3 && !isFanoutEntry(valueAt(input, i.path.slice(0, -2)))) {
      // `tasks: []` on an entry that is not a fanout: the loader says "only a use: fanout
      // entry takes nested tasks", which is the real problem.
      continue
    } else if (i._tag === "Unexpected") {
      const key = String(i.path[i.path.length - 1])
      const parent = i.path.slice(0, -1)
      const allowed = allowedKeysAt(parent, root)
      // a key another member of a tagged union takes (`values` on a `type: boolean` variable):
      // said for the member the object is read as, never "did you mean" the key itself
      const member = allowed.includes(key) ? memberAt(parent, valueAt(input, parent), root) : undefined
      if (member !== undefined) {
        const entry = taggedKeyIssue(p, key, member, parent)
        const k = `${entry.path}\u0000${entry.message}`
        if (!seen.has(k)) {
          seen.add(k)
          out.push(entry)
        }
        continue
      }
      const near = closest(key, allowed)
      const places = placesOfKey(key, root).filter((pl) => pl !== formatPath(parent) && pl.split(".").length > 0)
      // an experiment file does not know `experiments`: a suite file whose `suite` key is missing
      const suggestion = parent.length === 0 && key === "experiments"
        ? "this looks like a suite file missing its suite.id: add `suite: { id: NAME }` at the top level"
        : near !== undefined
        ? `did you mean ${near}?`
        : places.length > 0
        ? `${key} belongs under ${places.join(" or ")}`
        : allowed.length > 0
        ? `allowed keys here: ${allowed.join(", ")}`
        : undefined
      entry = issue(p, `unknown key "${key}"`, suggestion)
    } else if (i._tag === "Missing" && isEmptyTaskList(i.path)) {
      const list = i.path.slice(0, -1)
      entry = list.length === 2
        ? issue(formatPath(list), "is empty: a pipeline needs at least one task", "tasks: [{ use: echo }]")
        : issue(
          formatPath(list),
          "is empty: a fanout needs at least one task",
          "tasks: [{ use: echo, name: a }, { use: echo, name: b }]"
        )
    } else if (i._tag === "Missing") {
      // a required key misspelled (`typ:` for a union's `type`): a union without its tag
      // reports only the missing tag, never the stray key, so name the stray key here
      const missingKey = String(i.path[i.path.length - 1])
      const parent = valueAt(input, i.path.slice(0, -1))
      const allowed = allowedKeysAt(i.path.slice(0, -1), root)
      const strayKeys = parent !== null && typeof parent === "object" && !Array.isArray(parent)
        ? Object.keys(parent).filter((k) => !allowed.includes(k) && closest(k, [missingKey]) !== undefined)
        : []
      // a stray key already reported as unknown with this key as its did-you-mean (`valuse`,
      // did you mean values?): read as this key, so "is missing" would contradict it
      if (strayKeys.some((k) => closest(k, allowed) === missingKey && raw.some((j) => j._tag === "Unexpected" && formatPath(j.path) === formatPath([...i.path.slice(0, -1), k])))) continue
      const stray = strayKeys.filter((k) => !raw.some((j) => j._tag === "Unexpected" && formatPath(j.path) === formatPath([...i.path.slice(0, -1), k])))
      entry = stray.length > 0 ? issue(p, "is missing", `found "${stray[0]}": did you mean ${missingKey}?`) : issue(p, "is missing")
    } else if (i._tag === "Type" && i.path[i.path.length - 1] === "args" && typeof valueAt(input, i.path) === "string") {
      entry = argsNotAList(p, String(valueAt(input, i.path)), valueAt(input, i.path.slice(0, -1)))
    } else {
      entry = literalUnion(p, i.message) ?? issue(p, schemaWording(i.message, i.path, valueAt(input, i.path), root))
    }
    const k = `${entry.path}\u0000${entry.message}`
    if (seen.has(k)) continue
    seen.add(k)
    out.push(entry)
  }
  return out
}

/**
 * The `ConfigError` of a configuration file: "invalid `what` FILE: N problem(s)" and one line
 * per issue (`path: message (suggestion)`), each distinct (path, message) once.
 *
 * @param file - the file's path, as shown
 * @param all - the issues found (duplicates allowed)
 * @param what - what the file is: `"experiment"` (default) or `"suite"`
 */
export const failWith = (file: string, all: ReadonlyArray<ConfigIssue>, what: "experiment" | "suite" = "experiment"): ConfigError => {
  // One problem reached along several routes (two branches defaulting to the same missing
  // pool) is reported once.
  const seen = new Set<string>()
  const issues = all.filter((i) => {
    const k = `${i.path}\u0000${i.message}`
    if (seen.has(k)) return false
    seen.add(k)
    return true
  })
  return new ConfigError({
    message: `invalid ${what} ${file}: ${issues.length} problem${issues.length === 1 ? "" : "s"}\n${
      issues.map((i) => `  ${i.path === "" ? "(file)" : i.path}: ${i.message}${i.suggestion !== undefined ? ` (${i.suggestion})` : ""}`)
        .join("\n")
    }`,
    issues
  })
}

