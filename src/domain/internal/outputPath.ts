/**
 * Checking a declared metric's output path (`metrics[i].from.output`, a dot path such as
 * `correct` or `verdict.label`) before a study spends anything on it: against the Schema a
 * task declares for its output (`Task.make(..., { output })`), or against an actual output
 * value (the first succeeded pipeline's). Internal: used by the study loader and `Study.execute`.
 */
import { SchemaAST } from "effect"
import type { Schema } from "effect"
import { closest } from "./suggest.js"

/**
 * Where a path leads:
 * - `found`: every segment exists (or the schema stops describing fields at some point: an
 *   index signature, `unknown`, an array, a declaration: then nothing more can be checked);
 * - `missing`: segment `segment` (0-based) is not a field of what the path leads to before it,
 *   whose known fields are `fields` (empty when that value is not an object); `near` the
 *   closest field name, if any is close enough for a did-you-mean.
 */
export type PathCheck =
  | { readonly _tag: "found" }
  | {
    readonly _tag: "missing"
    readonly segment: number
    readonly prefix: string
    readonly fields: ReadonlyArray<string>
    readonly near: string | undefined
  }

const missing = (segs: ReadonlyArray<string>, i: number, fields: ReadonlyArray<string>): PathCheck => ({
  _tag: "missing",
  segment: i,
  prefix: segs.slice(0, i).join("."),
  fields,
  near: closest(segs[i]!, fields)
})

/** The object-like shape of an AST: its field names and whether other keys are allowed; `undefined`: not checkable. */
const shapeOf = (ast: SchemaAST.AST, depth = 0): { readonly fields: ReadonlyArray<string>; readonly open: boolean; readonly child: (k: string) => SchemaAST.AST | undefined } | "scalar" | undefined => {
  if (depth > 20) return undefined
  switch (ast._tag) {
    case "Refinement":
      return shapeOf(ast.from, depth + 1)
    case "Transformation":
      // the stored output is JSON: the encoded side's field names
      return shapeOf(ast.from, depth + 1)
    case "Suspend":
      return shapeOf(ast.f(), depth + 1)
    case "TypeLiteral": {
      const fields = ast.propertySignatures.flatMap((p) => typeof p.name === "string" ? [p.name] : [])
      return {
        fields,
        open: ast.indexSignatures.length > 0,
        child: (k) => ast.propertySignatures.find((p) => p.name === k)?.type
      }
    }
    case "Union": {
      const shapes = ast.types.map((t) => shapeOf(t, depth + 1))
      // null/undefined members (an optional output) add no field; any unknown member: unchecked
      const objects = shapes.filter((s): s is Exclude<typeof s, "scalar" | undefined> => s !== undefined && s !== "scalar")
      if (shapes.some((s) => s === undefined) || objects.length === 0) return shapes.every((s) => s === "scalar") ? "scalar" : undefined
      const fields = Array.from(new Set(objects.flatMap((s) => s.fields)))
      return {
        fields,
        open: objects.some((s) => s.open),
        child: (k) => {
          const kids = objects.flatMap((s) => {
            const c = s.child(k)
            return c === undefined ? [] : [c]
          })
          return kids.length === 1 ? kids[0] : kids.length === 0 ? undefined : SchemaAST.Union.make(kids)
        }
      }
    }
    case "StringKeyword":
    case "NumberKeyword":
    case "BooleanKeyword":
    case "BigIntKeyword":
    case "Literal":
    case "Enums":
    case "TemplateLiteral":
    case "UndefinedKeyword":
    case "VoidKeyword":
    case "NeverKeyword":
      return "scalar"
    default:
      // unknown, any, object, tuples and arrays, declarations (classes, dates): not checked
      return undefined
  }
}

/**
 * Checks a dot path against a Schema of the output. `found` when the schema cannot tell (see
 * {@link PathCheck}).
 */
export const checkSchemaPath = (schema: Schema.Schema.AnyNoContext, path: string): PathCheck => {
  if (path === "") return { _tag: "found" }
  const segs = path.split(".")
  let ast: SchemaAST.AST | undefined = schema.ast
  for (let i = 0; i < segs.length && ast !== undefined; i++) {
    const shape = shapeOf(ast)
    if (shape === undefined) return { _tag: "found" }
    if (shape === "scalar") return missing(segs, i, [])
    const next = shape.child(segs[i]!)
    if (next === undefined) return shape.open ? { _tag: "found" } : missing(segs, i, shape.fields)
    ast = next
  }
  return { _tag: "found" }
}

/** Checks a dot path against an actual output value (arrays take numeric segments). */
export const checkValuePath = (value: unknown, path: string): PathCheck => {
  if (path === "") return { _tag: "found" }
  const segs = path.split(".")
  let v: unknown = value
  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i]!
    if (Array.isArray(v) && /^(0|[1-9][0-9]*)$/.test(seg) && Number(seg) < v.length) v = v[Number(seg)]
    else if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, seg)) {
      v = (v as Record<string, unknown>)[seg]
    } else {
      return missing(segs, i, v !== null && typeof v === "object" && !Array.isArray(v) ? Object.keys(v) : [])
    }
  }
  return { _tag: "found" }
}

/** A missing path in words: `"corect" is not a field of the output (fields: a, b)`. */
export const describeMissing = (path: string, m: Extract<PathCheck, { _tag: "missing" }>, what: string): string => {
  const seg = path.split(".")[m.segment]!
  const of = m.prefix === "" ? what : `${what}.${m.prefix}`
  return m.fields.length === 0
    ? `"${seg}" cannot be read: ${of} is not an object`
    : `"${seg}" is not a field of ${of} (its fields: ${m.fields.slice(0, 12).join(", ")}${m.fields.length > 12 ? ", ..." : ""})`
}

/** Whether an AST describes only booleans (`boolean`, `true`/`false` literals, optional: null/undefined beside them). */
const isBooleanAst = (ast: SchemaAST.AST, depth = 0): boolean => {
  if (depth > 20) return false
  switch (ast._tag) {
    case "BooleanKeyword":
      return true
    case "Literal":
      return typeof ast.literal === "boolean"
    case "Refinement":
    case "Transformation":
      return isBooleanAst(ast.from, depth + 1)
    case "Suspend":
      return isBooleanAst(ast.f(), depth + 1)
    case "Union": {
      const real = ast.types.filter((t) => !(t._tag === "UndefinedKeyword" || (t._tag === "Literal" && t.literal === null)))
      return real.length > 0 && real.every((t) => isBooleanAst(t, depth + 1))
    }
    default:
      return false
  }
}

/**
 * Whether the output's Schema says the value at a dot path is a boolean (so a `mean` of it is
 * a share from 0 to 1): `false` when it is anything else or the schema cannot tell.
 *
 * @param schema - the final task's output Schema
 * @param path - the dot path (`correct`, `verdict.ok`)
 * @returns whether every value there is `true` or `false`
 */
export const isBooleanAt = (schema: Schema.Schema.AnyNoContext, path: string): boolean => {
  const segs = path === "" ? [] : path.split(".")
  let ast: SchemaAST.AST | undefined = schema.ast
  for (let i = 0; i < segs.length && ast !== undefined; i++) {
    const shape = shapeOf(ast)
    if (shape === undefined || shape === "scalar") return false
    ast = shape.child(segs[i]!)
  }
  return ast !== undefined && isBooleanAst(ast)
}
