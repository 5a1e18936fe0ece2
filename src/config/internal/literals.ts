/**
 * @internal
 *
 * Integer fields written as float literals. JSON, TOML and YAML parsers turn `3.0` into the
 * JavaScript number `3`, so the Schema cannot tell it from `3`; for the fields where the
 * specification refuses a float (`maxHandoffs`, in `run` and in `pipeline.control`), the text
 * is read again for the literal as written. Each finding is an issue at the field's path.
 */
import * as Jsonc from "jsonc-parser"
import * as YAML from "yaml"
import type { ConfigIssue } from "../../domain/Errors.js"
import { formatPath, issue } from "./issues.js"

/** The keys whose value must be written as an integer literal. */
const INTEGER_KEYS: ReadonlySet<string> = new Set(["maxHandoffs"])

/** A number literal with a fraction or an exponent whose value is nevertheless an integer. */
const isIntegralFloatLiteral = (literal: string): boolean => {
  const text = literal.trim().replace(/_/g, "")
  if (!/^[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)$/.test(text)) return false
  return Number.isInteger(Number(text))
}

const floatIssue = (path: ReadonlyArray<PropertyKey>, literal: string): ConfigIssue => {
  const key = String(path[path.length - 1])
  return issue(
    formatPath(path),
    `${key} must be an integer, got the float ${literal.trim()}`,
    `write ${Number(literal.trim().replace(/_/g, ""))}`
  )
}

const fromJson = (text: string): Array<ConfigIssue> => {
  const out: Array<ConfigIssue> = []
  const visit = (node: Jsonc.Node | undefined): void => {
    if (node === undefined) return
    if (node.type === "property" && node.children?.length === 2) {
      const [key, value] = node.children as [Jsonc.Node, Jsonc.Node]
      if (INTEGER_KEYS.has(String(key.value)) && value.type === "number") {
        const literal = text.slice(value.offset, value.offset + value.length)
        if (isIntegralFloatLiteral(literal)) out.push(floatIssue(Jsonc.getNodePath(value), literal))
      }
    }
    for (const c of node.children ?? []) visit(c)
  }
  visit(Jsonc.parseTree(text))
  return out
}

const fromYaml = (text: string): Array<ConfigIssue> => {
  const out: Array<ConfigIssue> = []
  const doc = YAML.parseDocument(text)
  YAML.visit(doc, {
    Pair(_, pair, ancestors) {
      const key = YAML.isScalar(pair.key) ? pair.key.value : undefined
      if (typeof key !== "string" || !INTEGER_KEYS.has(key)) return
      const value = pair.value
      if (!YAML.isScalar(value) || typeof value.value !== "number" || value.range === undefined || value.range === null) {
        return
      }
      const literal = text.slice(value.range[0], value.range[1])
      if (!isIntegralFloatLiteral(literal)) return
      const path: Array<PropertyKey> = []
      ancestors.forEach((a, i) => {
        if (YAML.isPair(a) && YAML.isScalar(a.key)) path.push(String(a.key.value))
        else if (YAML.isSeq(a)) {
          const next = ancestors[i + 1]
          path.push(a.items.indexOf(next as never))
        }
      })
      out.push(floatIssue([...path, key], literal))
    }
  })
  return out
}

/** Splits a TOML dotted key (`a."b.c".d`) into its parts. */
const tomlKey = (raw: string): Array<string> =>
  (raw.match(/"(?:[^"\\]|\\.)*"|'[^']*'|[^.\s]+/g) ?? []).map((k) =>
    k.startsWith("\"") || k.startsWith("'") ? k.slice(1, -1) : k
  )

const fromToml = (text: string): Array<ConfigIssue> => {
  const out: Array<ConfigIssue> = []
  let table: Array<string> = []
  for (const line of text.split(/\r?\n/)) {
    const header = /^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$/.exec(line)
    if (header !== null) {
      table = tomlKey(header[1]!)
      continue
    }
    // `maxHandoffs = 3.0`, `control.maxHandoffs = 3.0`, `control = { maxHandoffs = 3.0 }`
    const assignment = /^\s*([^=#]+?)\s*=\s*(.*)$/.exec(line)
    if (assignment === null) continue
    const outer = tomlKey(assignment[1]!)
    const rest = assignment[2]!
    const direct = /^([-+]?[\d_.eE+-]+)\s*(#.*)?$/.exec(rest)
    if (direct !== null && INTEGER_KEYS.has(outer[outer.length - 1]!) && isIntegralFloatLiteral(direct[1]!)) {
      out.push(floatIssue([...table, ...outer], direct[1]!))
      continue
    }
    for (const m of rest.matchAll(/([A-Za-z0-9_"'.-]+)\s*=\s*([-+]?[\d_.eE+-]+)\s*[,}]/g)) {
      const inner = tomlKey(m[1]!)
      if (INTEGER_KEYS.has(inner[inner.length - 1]!) && isIntegralFloatLiteral(m[2]!)) {
        out.push(floatIssue([...table, ...outer, ...inner], m[2]!))
      }
    }
  }
  return out
}

/**
 * The integer fields (`maxHandoffs`) of a JSON, TOML or YAML text written as float literals
 * (`3.0`, `3e0`), each as an issue at its field path (`pipeline.control.maxHandoffs`). The
 * text is assumed to parse (syntax errors are reported before this runs).
 *
 * @since 0.1.0
 * @category checks
 */
export const floatLiteralIssues = (text: string, format: "json" | "toml" | "yaml"): ReadonlyArray<ConfigIssue> => {
  if (!text.includes("maxHandoffs")) return []
  switch (format) {
    case "json":
      return fromJson(text)
    case "yaml":
      return fromYaml(text)
    case "toml":
      return fromToml(text)
  }
}
