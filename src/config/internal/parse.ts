/**
 * @internal
 *
 * Reading an experiment file: the format from its suffix, the JSON/TOML/YAML parsers with
 * compiler-style syntax errors, and `read` (a file to its raw document, not yet checked).
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Jsonc from "jsonc-parser"
import * as path from "node:path"
import { Effect, Either } from "effect"
import { parse as parseToml } from "smol-toml"
import * as YAML from "yaml"
import { ConfigError, type ConfigIssue } from "../../domain/Errors.js"
import * as SyntaxErrors from "./syntaxErrors.js"
import * as Plugins from "../../layers/internal/plugins.js"

import type { Format, RawExperiment } from "../Experiment.js"
import { failWith, formatPath, isRecord, issue } from "./issues.js"
import { floatLiteralIssues } from "./literals.js"

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

/**
 * The format of a file from its suffix, or `undefined` for an unknown suffix.
 *
 * @since 0.1.0
 * @category parsing
 */
export const formatOf = (file: string): Format | undefined => {
  const ext = path.extname(file).toLowerCase()
  switch (ext) {
    case ".json":
      return "json"
    case ".toml":
      return "toml"
    case ".yaml":
    case ".yml":
      return "yaml"
    case ".ts":
    case ".mts":
    case ".js":
    case ".mjs":
      return "module"
    default:
      return undefined
  }
}

/** YAML 1.1 reads a bare `on`/`yes`/`off` key as a boolean: find keys that became "true"/"false". */
export const yamlBooleanKeys = (value: unknown, at: ReadonlyArray<PropertyKey>, out: Array<ConfigIssue>): void => {
  if (Array.isArray(value)) value.forEach((v, i) => yamlBooleanKeys(v, [...at, i], out))
  else if (isRecord(value)) {
    for (const [k, v] of Object.entries(value)) {
      if (k === "true" || k === "false") {
        out.push(issue(
          formatPath([...at, k]),
          `a key was read as the boolean ${k}: YAML 1.1 turns a bare on/off/yes/no key into a boolean`,
          `quote the key, for example "on": [...] in a retry block`
        ))
      }
      yamlBooleanKeys(v, [...at, k], out)
    }
  }
}

/** The 1-based line and column of `offset` in `text`. */
const lineColumn = (text: string, offset: number): { readonly line: number; readonly column: number } => {
  const before = text.slice(0, offset)
  const line = before.split("\n").length
  return { line, column: offset - before.lastIndexOf("\n") }
}

/**
 * The keys written twice in one JSON object, one issue each at the repeated key's field path
 * (`experiments.a.config`), naming both lines. `JSON.parse` keeps the last value without a
 * word; YAML (`uniqueKeys`) and TOML refuse a repeated key by their own rules, so this gives
 * JSON files (experiment, suite and study files alike, all read by {@link parseText}) the same
 * refusal.
 *
 * @since 0.6.0
 * @category parsing
 */
export const jsonDuplicateKeys = (text: string): Array<ConfigIssue> => {
  const out: Array<ConfigIssue> = []
  const visit = (node: Jsonc.Node | undefined): void => {
    if (node === undefined) return
    if (node.type === "object") {
      const seen = new Map<string, number>()
      for (const p of node.children ?? []) {
        const key = p.children?.[0]
        if (key === undefined) continue
        const name = String(key.value)
        const first = seen.get(name)
        if (first === undefined) {
          seen.set(name, key.offset)
          continue
        }
        const at = lineColumn(text, key.offset)
        out.push(issue(
          formatPath([...Jsonc.getNodePath(node), name]),
          `the key "${name}" is written twice in one object (line ${lineColumn(text, first).line}, then line ${at.line} ` +
            `column ${at.column}); JSON would keep only the last value`,
          "remove one of them"
        ))
      }
    }
    for (const c of node.children ?? []) visit(c)
  }
  visit(Jsonc.parseTree(text))
  return out
}

/**
 * Parses the text of a JSON, TOML or YAML experiment. A syntax error fails with a
 * `ConfigError` whose message is, for each error, the compiler-style block of
 * `internal/syntaxErrors.ts` (`file:line:column: invalid JSON: reason`, the offending line
 * with its secrets masked, a caret under the column) and whose issues carry `line` and
 * `column` (1-based; path `""`). JSON errors are located from `JSON.parse`'s position or,
 * when its message has none, by `jsonc-parser`; TOML errors by `smol-toml`; YAML errors by
 * `yaml` (one block per kind of error, at most `MAX_YAML_PROBLEMS`: see `SyntaxErrors.yamlProblems`). A YAML key read as a boolean fails
 * with an issue at its field path, and so does a key written twice in one JSON object
 * ({@link jsonDuplicateKeys}; YAML and TOML refuse those as syntax errors).
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseText = (text: string, format: "json" | "toml" | "yaml", file: string): Either.Either<unknown, ConfigError> => {
  const syntax = (problems: ReadonlyArray<SyntaxErrors.SyntaxProblem>) =>
    Either.left(
      new ConfigError({
        message: problems.map((p) => p.rendered).join("\n"),
        issues: problems.map((p) => ({
          path: "",
          message: `${file}:${p.line}:${p.column}: invalid ${format.toUpperCase()}: ${p.reason}`,
          line: p.line,
          column: p.column
        }))
      })
    )
  switch (format) {
    case "json": {
      let value: unknown
      try {
        value = JSON.parse(text) as unknown
      } catch (e) {
        return syntax([SyntaxErrors.jsonProblem(file, text, e)])
      }
      const duplicates = jsonDuplicateKeys(text)
      if (duplicates.length > 0) {
        return Either.left(
          new ConfigError({ message: duplicates.map((d) => `${file}: ${d.path}: ${d.message}`).join("\n"), issues: duplicates })
        )
      }
      return Either.right(value)
    }
    case "toml": {
      try {
        return Either.right(parseToml(text) as unknown)
      } catch (e) {
        const located = SyntaxErrors.tomlProblem(file, text, e)
        if (located !== undefined) return syntax([located])
        const message = `invalid TOML: ${e instanceof Error ? e.message : String(e)}`
        return Either.left(new ConfigError({ message: `${file}: ${message}`, issues: [issue("", message)] }))
      }
    }
    case "yaml": {
      const doc = YAML.parseDocument(text, { prettyErrors: false, uniqueKeys: true })
      if (doc.errors.length > 0) return syntax(SyntaxErrors.yamlProblems(file, text, doc.errors))
      const value = doc.toJS({ mapAsMap: false }) as unknown
      const problems: Array<ConfigIssue> = []
      yamlBooleanKeys(value, [], problems)
      if (problems.length > 0) {
        return Either.left(new ConfigError({ message: `${file}: ${problems[0]!.message}`, issues: problems }))
      }
      return Either.right(value)
    }
  }
}

/**
 * A `.ts` file compiled as CommonJS (no `"type": "module"` in the nearest package.json, and not
 * `.mts`) reaches an `import()` as `{ default: module.exports }`, and its `export default X` is
 * `module.exports.default`: the document is then `{ default: X }` (plus `__esModule`). Such a
 * wrapper is unwrapped once, so the file works as written whichever way it was compiled.
 */
const unwrapCommonJsDefault = (value: unknown): unknown => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return value
  const keys = Object.keys(value).filter((k) => k !== "__esModule")
  return keys.length === 1 && keys[0] === "default" ? (value as Record<string, unknown>)["default"] : value
}

/**
 * Reads and parses an experiment file without checking it against the Schema: the first half
 * of {@link load}, shared with `assay plugins` (which only needs the `plugins` list). Fails
 * with the same `ConfigError`s as `load`: unknown suffix, missing or unreadable file, a module
 * that cannot be imported or has no default export, a syntax error (compiler-style, with line
 * and column).
 *
 * @since 0.1.0
 * @category loading
 */
export const read = (file: string): Effect.Effect<RawExperiment, ConfigError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const abs = path.resolve(file)
    const format = formatOf(abs)
    const baseDir = path.dirname(abs)
    if (format === undefined) {
      return yield* failWith(abs, [
        issue("", `unknown experiment format "${path.extname(abs)}"`, "use .json, .toml, .yaml/.yml or .ts")
      ])
    }
    const fs = yield* FileSystem.FileSystem
    if (!(yield* Effect.orElseSucceed(fs.exists(abs), () => false))) {
      return yield* failWith(abs, [issue("", `no such file: ${abs}`)])
    }
    if (format === "module") {
      const mod = yield* Effect.either(Plugins.importModule(abs, baseDir))
      if (mod._tag === "Left") return yield* failWith(abs, [issue("", `cannot load module: ${mod.left}`)])
      if (!("default" in mod.right)) {
        return yield* failWith(abs, [
          issue("", "the module has no default export", "export default defineExperiment({ ... })")
        ])
      }
      return { file: abs, format, baseDir, raw: unwrapCommonJsDefault(mod.right["default"]) }
    }
    const text = yield* Effect.mapError(
      fs.readFileString(abs),
      (e) => failWith(abs, [issue("", `cannot read the file: ${e.message}`)])
    )
    const parsed = parseText(text, format, abs)
    if (Either.isLeft(parsed)) {
      // a syntax error is already written like a compiler's (file:line:column, the line, a caret)
      const located = parsed.left.issues.some((i) => i.line !== undefined)
      return yield* (located ? parsed.left : failWith(abs, parsed.left.issues))
    }
    return { file: abs, format, baseDir, raw: parsed.right, literalIssues: floatLiteralIssues(text, format) }
  })

/**
 * Whether a config file's document has `key` at its top level (`suite`, `study`): what tells a
 * suite or study file from an experiment file before loading it. Never fails. A file that
 * parses is checked as parsed; one refused only for a key written twice (a JSON duplicate
 * key, a YAML `uniqueKeys` error) is parsed again leniently, so that its errors are reported
 * as the suite's or study's they are instead of an experiment's. A file that cannot be read or
 * parsed at all is answered `false` (loading it as an experiment then says why).
 *
 * @since 0.7.0
 * @category loading
 */
export const hasTopLevelKey = (file: string, key: string): Effect.Effect<boolean, never, FileSystem.FileSystem> => {
  const has = (raw: unknown) => isRecord(raw) && raw[key] !== undefined
  return Effect.matchEffect(read(file), {
    onSuccess: (r) => Effect.succeed(has(r.raw)),
    onFailure: () => {
      const format = formatOf(path.resolve(file))
      if (format !== "json" && format !== "yaml") return Effect.succeed(false)
      return Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(file)).pipe(
        Effect.map((text) => {
          try {
            return has(format === "json" ? JSON.parse(text) as unknown : YAML.parse(text, { uniqueKeys: false }) as unknown)
          } catch {
            return false
          }
        }),
        Effect.orElseSucceed(() => false)
      )
    }
  })
}

