/**
 * @internal
 *
 * The keys the experiment Schema allows at each level, read from its AST: what "did you mean"
 * suggestions and "this block belongs under ..." hints are made of.
 */
import { Schema } from "effect"
import type * as AST from "effect/SchemaAST"
import { ExperimentFile } from "../Config.js"

// ---------------------------------------------------------------------------------------------
// Keys per level (for did-you-mean suggestions)
// ---------------------------------------------------------------------------------------------

const structsOf = (ast: AST.AST): Array<AST.TypeLiteral> => {
  switch (ast._tag) {
    case "TypeLiteral":
      return [ast]
    case "Union":
      return ast.types.flatMap(structsOf)
    case "Refinement":
      return structsOf(ast.from)
    case "Transformation":
      return structsOf(ast.from)
    case "Suspend":
      return structsOf(ast.f())
    case "Declaration":
      return []
    default:
      return []
  }
}

const arraysOf = (ast: AST.AST): Array<AST.TupleType> => {
  switch (ast._tag) {
    case "TupleType":
      return [ast]
    case "Union":
      return ast.types.flatMap(arraysOf)
    case "Refinement":
      return arraysOf(ast.from)
    case "Transformation":
      return arraysOf(ast.from)
    case "Suspend":
      return arraysOf(ast.f())
    default:
      return []
  }
}

const step = (ast: AST.AST, segment: PropertyKey): Array<AST.AST> => {
  if (typeof segment === "number") {
    return arraysOf(ast).flatMap((t) => {
      const el = t.elements[segment]
      return el !== undefined ? [el.type] : t.rest.map((r) => r.type)
    })
  }
  return structsOf(ast).flatMap((s) => {
    const p = s.propertySignatures.find((ps) => ps.name === segment)
    if (p !== undefined) return [p.type]
    return s.indexSignatures.map((i) => i.type)
  })
}

/**
 * The keys a config object may have at a path of the encoded file (`["pools", "apis"]` →
 * `kind, algorithm, capacity, ...`); empty when the path does not lead to an object with
 * named keys. Used for "did you mean" suggestions. `root` is the file's Schema (default the
 * experiment file; the suite file passes its own).
 *
 * @since 0.1.0
 * @category introspection
 */
export const allowedKeysAt = (
  path: ReadonlyArray<PropertyKey>,
  root: Schema.Schema.Any = ExperimentFile
): ReadonlyArray<string> => {
  let nodes: Array<AST.AST> = [Schema.encodedSchema(root).ast]
  for (const seg of path) nodes = nodes.flatMap((n) => step(n, seg))
  const keys = new Set<string>()
  for (const n of nodes) {
    for (const s of structsOf(n)) for (const p of s.propertySignatures) keys.add(String(p.name))
  }
  return [...keys]
}

/**
 * Every place a key may appear in the file, as display paths (`retry` →
 * `["pipeline.tasks[].retry"]`): used to tell a user where a misplaced block belongs.
 *
 * @since 0.1.0
 * @category introspection
 */
export const placesOfKey = (key: string, root: Schema.Schema.Any = ExperimentFile): ReadonlyArray<string> => {
  const out: Array<string> = []
  // A recursive entry (a fanout's `tasks`) is entered once per path: its keys are listed at
  // the first level (`pipeline.tasks[].retry`), not again for every nesting depth.
  const visit = (ast: AST.AST, at: string, depth: number, inSuspend: boolean): void => {
    if (depth > 6) return
    if (ast._tag === "Suspend") {
      if (!inSuspend) visit(ast.f(), at, depth, true)
      return
    }
    for (const s of structsOf(ast)) {
      for (const p of s.propertySignatures) {
        const here = at === "" ? String(p.name) : `${at}.${String(p.name)}`
        if (p.name === key) out.push(here)
        visit(p.type, here, depth + 1, inSuspend)
      }
      for (const i of s.indexSignatures) visit(i.type, `${at}.<name>`, depth + 1, inSuspend)
    }
    for (const t of arraysOf(ast)) for (const r of t.rest) visit(r.type, `${at}[]`, depth + 1, inSuspend)
  }
  visit(Schema.encodedSchema(root).ast, "", 0, false)
  return [...new Set(out)]
}

/**
 * The union member an object at a path of the encoded file is read as, by its tag: the first
 * member (a struct) at `path` one of whose properties is a literal that `value` gives (a
 * variable's `type: boolean`, a stop condition's `when: budget`); `undefined` when the path
 * leads to no union of structs told apart by a tag, or `value` names no member's tag.
 * `tag` is the property and its value, `keys` the member's own keys.
 *
 * @since 0.6.0
 * @category introspection
 */
export const memberAt = (
  path: ReadonlyArray<PropertyKey>,
  value: unknown,
  root: Schema.Schema.Any = ExperimentFile
): { readonly tag: string; readonly value: string; readonly keys: ReadonlyArray<string> } | undefined => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined
  let nodes: Array<AST.AST> = [Schema.encodedSchema(root).ast]
  for (const seg of path) nodes = nodes.flatMap((n) => step(n, seg))
  const members = nodes.flatMap(structsOf)
  if (members.length < 2) return undefined
  for (const m of members) {
    for (const p of m.propertySignatures) {
      const given = (value as Record<string, unknown>)[String(p.name)]
      if (p.type._tag === "Literal" && typeof given === "string" && p.type.literal === given) {
        return { tag: String(p.name), value: given, keys: m.propertySignatures.map((q) => String(q.name)) }
      }
    }
  }
  return undefined
}
