/**
 * @internal
 *
 * Study variable references in an experiment document: `{ $var: "NAME" }` and
 * `{ $var: "NAME.path" }` (found here; bound by the study loader, refused by the experiment
 * loader outside a study).
 */
import type { ConfigIssue } from "../../domain/Errors.js"
import { formatPath, isRecord, issue } from "./issues.js"

/**
 * The key of a variable reference: `{ $var: "NAME" }` or `{ $var: "NAME.path.in.value" }`.
 *
 * @since 0.6.0
 * @category references
 */
export const VAR_KEY = "$var"

/**
 * One variable reference found in the base experiment: where (`at`, path segments of the
 * experiment document), the variable `name` and the `path` into its value.
 *
 * @since 0.6.0
 * @category references
 */
export interface VariableRef {
  readonly at: ReadonlyArray<PropertyKey>
  readonly name: string
  readonly path: ReadonlyArray<string>
}

export const isPlain = (u: unknown): u is Record<string, unknown> => {
  if (!isRecord(u)) return false
  const proto = Object.getPrototypeOf(u)
  return proto === Object.prototype || proto === null
}

/**
 * Every `{ $var: ... }` of a document (plain objects and arrays only: task values and other
 * class instances are not entered), with the malformed ones (`$var` beside other keys, or not
 * a non-empty string) as issues.
 *
 * @since 0.6.0
 * @category references
 */
export const findRefs = (doc: unknown): { readonly refs: ReadonlyArray<VariableRef>; readonly malformed: ReadonlyArray<ConfigIssue> } => {
  const refs: Array<VariableRef> = []
  const malformed: Array<ConfigIssue> = []
  const visit = (v: unknown, at: Array<PropertyKey>) => {
    if (Array.isArray(v)) v.forEach((x, i) => visit(x, [...at, i]))
    else if (isPlain(v)) {
      if (VAR_KEY in v) {
        const target = v[VAR_KEY]
        if (Object.keys(v).length !== 1 || typeof target !== "string" || target === "") {
          malformed.push(issue(
            formatPath(at),
            "a variable reference is an object with the one key $var and the variable's name",
            "{ $var: \"temperature\" } or { $var: \"model.params.temperature\" }"
          ))
          return
        }
        const [name, ...rest] = target.split(".")
        refs.push({ at, name: name!, path: rest })
        return
      }
      for (const [k, x] of Object.entries(v)) visit(x, [...at, k])
    }
  }
  visit(doc, [])
  return { refs, malformed }
}

/**
 * The experiment loader's refusal of references: a file with `{ $var: ... }` is a study's
 * protocol and only runs through its study file, which binds them (unbound, a reference would
 * reach a task as an object).
 *
 * @since 0.6.0
 * @category references
 */
export const unboundRefIssues = (doc: unknown): ReadonlyArray<ConfigIssue> =>
  findRefs(doc).refs.map((r) =>
    issue(
      formatPath(r.at),
      `a study variable reference ({ $var: ${JSON.stringify([r.name, ...r.path].join("."))} }) outside a study`,
      "this experiment is a study's protocol: check and run it through its study file (assay study plan STUDY)"
    )
  )
