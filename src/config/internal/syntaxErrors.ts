/**
 * Syntax errors of experiment files, the way a compiler reports them: the file, the 1-based
 * line and column, the reason, and the offending line with a caret under the column. One
 * shape for the three text formats:
 *
 * ```
 * /work/exp.json:2:28: invalid JSON: Expected ',' or '}' after property value
 *     2 |   "pipeline": {"name": "x" "tasks": []},
 *       |                            ^
 * ```
 *
 * - JSON: `JSON.parse` refuses the text; its position (V8 writes `at position N`) is the
 *   offset when it gives one, else the first error of `jsonc-parser` (Microsoft's scanner and
 *   parser of VS Code, run with comments and trailing commas disallowed, so it refuses what
 *   `JSON.parse` refuses) gives the offset and the reason;
 * - TOML: `smol-toml`'s `TomlError` carries the line and column;
 * - YAML: each error of `yaml`'s `parseDocument` carries its offset range (`pos`).
 *
 * The shown line is cleaned of secrets first (a value under a secret-looking name such as
 * `apiKey`, the secret parts of a URL: see `domain/Secrets.ts`), so a syntax error on the line
 * of a key never prints the key. Columns count UTF-16 code units, as editors built on
 * JavaScript strings (VS Code) do.
 *
 * @since 0.1.0
 */
import * as Jsonc from "jsonc-parser"
import * as Secrets from "../../domain/Secrets.js"

/**
 * A place in a text: 1-based `line` and `column`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Position {
  readonly line: number
  readonly column: number
}

/**
 * One syntax error of a file: where (`line`, `column`, 1-based), why (`reason`, without the
 * place), and `rendered`, the compiler-style block (`file:line:column: invalid FORMAT:
 * reason`, then the line and a caret).
 *
 * @since 0.1.0
 * @category models
 */
export interface SyntaxProblem extends Position {
  readonly reason: string
  readonly rendered: string
}

/**
 * The 1-based line and column of a 0-based UTF-16 `offset` in `text` (an offset past the end
 * is the end). Lines end at `\n` (a `\r` before it belongs to the line end).
 *
 * @since 0.1.0
 * @category positions
 */
export const positionOf = (text: string, offset: number): Position => {
  const at = Math.max(0, Math.min(offset, text.length))
  let line = 1
  let start = 0
  for (let i = text.indexOf("\n"); i >= 0 && i < at; i = text.indexOf("\n", i + 1)) {
    line++
    start = i + 1
  }
  return { line, column: at - start + 1 }
}

/** The text of 1-based line `n` (without its line end); `""` past the last line. */
const lineAt = (text: string, n: number): string => {
  let start = 0
  for (let k = 1; k < n; k++) {
    const i = text.indexOf("\n", start)
    if (i < 0) return ""
    start = i + 1
  }
  const end = text.indexOf("\n", start)
  const line = text.slice(start, end < 0 ? undefined : end)
  return line.endsWith("\r") ? line.slice(0, -1) : line
}

/** `name: value`, `"name": value`, `name = value` where the value may be a secret. */
const namedValue = /(["']?)([A-Za-z_][\w.-]*)\1(\s*[:=]\s*)("(?:[^"\\]|\\.)*"?|'[^']*'?|[^\s,}\]#]+)/g
/** An absolute URL inside a line. */
const urlIn = /[a-z][a-z0-9+.-]*:\/\/[^\s"'`,<>]+/gi

interface Replacement {
  readonly start: number
  readonly end: number
  readonly text: string
}

/**
 * A line with its secrets replaced by `***` (the value of a secret-looking name, the userinfo
 * and query values of URLs; a `${VAR}` reference is not a secret and is kept), and where a
 * column of the original line lands in the cleaned one.
 *
 * @since 0.1.0
 * @category secrets
 */
export const maskLine = (line: string): { readonly text: string; readonly columnOf: (column: number) => number } => {
  const edits: Array<Replacement> = []
  for (const m of line.matchAll(namedValue)) {
    const [whole, , name, , value] = m as unknown as [string, string, string, string, string]
    if (!Secrets.isSecretName(name) || /^["']?\$\{[^}]*\}["']?$/.test(value)) continue
    const start = m.index! + whole.length - value.length
    const quote = value.startsWith("\"") || value.startsWith("'") ? value[0]! : ""
    edits.push({ start, end: start + value.length, text: `${quote}${Secrets.MASK}${quote}` })
  }
  for (const m of line.matchAll(urlIn)) {
    const masked = Secrets.maskUrl(m[0])
    if (masked === m[0]) continue
    const start = m.index!
    const end = start + m[0].length
    if (edits.some((e) => e.start < end && start < e.end)) continue
    edits.push({ start, end, text: masked })
  }
  if (edits.length === 0) return { text: line, columnOf: (c) => c }
  edits.sort((a, b) => a.start - b.start)
  let out = ""
  let at = 0
  for (const e of edits) {
    if (e.start < at) continue
    out += line.slice(at, e.start) + e.text
    at = e.end
  }
  out += line.slice(at)
  const columnOf = (column: number): number => {
    let shift = 0
    for (const e of edits) {
      const c0 = column - 1
      if (c0 >= e.end) shift += e.text.length - (e.end - e.start)
      else if (c0 >= e.start) return e.start + shift + 1
    }
    return column + shift
  }
  return { text: out, columnOf }
}

/** Widest part of a line shown (characters); a longer line is cut around the column. */
const MAX_SHOWN = 120

/**
 * The offending line of `text` and a caret under `column`, prefixed by the line number:
 *
 * ```
 *     2 |   "pipeline": {"name": "x" "tasks": []},
 *       |                            ^
 * ```
 *
 * Secrets on the line are masked ({@link maskLine}); a line longer than 120 characters is
 * cut to a window around the column (`…` marks each cut); tabs before the column are kept in
 * the caret line so that the caret stays under the character.
 *
 * @since 0.1.0
 * @category rendering
 */
export const frame = (text: string, at: Position): string => {
  const masked = maskLine(lineAt(text, at.line))
  let shown = masked.text
  let column = masked.columnOf(at.column)
  if (shown.length > MAX_SHOWN) {
    const from = Math.max(0, Math.min(column - 1 - MAX_SHOWN / 2, shown.length - MAX_SHOWN))
    const head = from > 0 ? "…" : ""
    const tail = from + MAX_SHOWN < shown.length ? "…" : ""
    shown = head + shown.slice(from, from + MAX_SHOWN) + tail
    column = column - from + head.length
  }
  const gutter = String(at.line).padStart(5)
  const pad = shown.slice(0, Math.max(0, column - 1)).replace(/[^\t]/g, " ")
  return `${gutter} | ${shown}\n${" ".repeat(gutter.length)} | ${pad}^`
}

/**
 * A {@link SyntaxProblem} at `at` of `text` in `file` (`format` is the word after "invalid":
 * `JSON`, `TOML`, `YAML`).
 *
 * @since 0.1.0
 * @category rendering
 */
export const problemAt = (file: string, format: string, text: string, at: Position, reason: string): SyntaxProblem => ({
  ...at,
  reason,
  rendered: `${file}:${at.line}:${at.column}: invalid ${format}: ${reason}\n${frame(text, at)}`
})

const jsoncReasons: Readonly<Record<string, string>> = {
  InvalidSymbol: "is not a JSON value (strings take double quotes; the literals are true, false and null)",
  InvalidNumberFormat: "is not a valid JSON number",
  PropertyNameExpected: "expected a property name in double quotes",
  ValueExpected: "expected a value",
  ColonExpected: "expected ':' after the property name",
  CommaExpected: "expected ',' between values",
  CloseBraceExpected: "expected '}': the object is not closed",
  CloseBracketExpected: "expected ']': the array is not closed",
  EndOfFileExpected: "unexpected text after the end of the JSON value",
  InvalidCommentToken: "comments are not allowed in JSON",
  UnexpectedEndOfComment: "comments are not allowed in JSON",
  UnexpectedEndOfString: "the string is not closed",
  UnexpectedEndOfNumber: "the number is cut off",
  InvalidUnicode: "invalid \\u escape (four hex digits)",
  InvalidEscapeCharacter: "invalid escape in a string",
  InvalidCharacter: "a control character (a tab, a line break) inside a string must be escaped (\\t, \\n)"
}

/** V8's `... in JSON at position 102` (newer V8 adds ` (line 3 column 5)`). */
const v8Position = /^(.*?) in JSON at position (\d+)(?: \(line \d+ column \d+\))?$/s

/**
 * Where and why `JSON.parse` refused `text`, given the error it threw: V8's position and
 * words when its message has a position; else the first error `jsonc-parser` finds (comments
 * and trailing commas disallowed) with its words; else the end of the text and V8's message.
 *
 * @since 0.1.0
 * @category json
 */
export const jsonProblem = (file: string, text: string, error: unknown): SyntaxProblem => {
  const message = error instanceof Error ? error.message : String(error)
  const v8 = v8Position.exec(message)
  if (v8 !== null) return problemAt(file, "JSON", text, positionOf(text, Number(v8[2])), v8[1]!)
  const errors: Array<Jsonc.ParseError> = []
  Jsonc.parse(text, errors, { disallowComments: true, allowTrailingComma: false, allowEmptyContent: false })
  const first = errors[0]
  if (first === undefined) return problemAt(file, "JSON", text, positionOf(text, text.length), message)
  const code = Jsonc.printParseErrorCode(first.error)
  const words = jsoncReasons[code] ?? code
  const token = text.slice(first.offset, first.offset + Math.min(first.length, 40))
  const reason = code === "InvalidSymbol" || code === "InvalidNumberFormat"
    ? `${JSON.stringify(token)} ${words}`
    : first.offset >= text.trimEnd().length && code !== "ValueExpected"
    ? `${words} (the file ends first)`
    : text.trim() === ""
    ? "the file is empty: expected an object"
    : words
  return problemAt(file, "JSON", text, positionOf(text, first.offset), reason)
}

/**
 * The {@link SyntaxProblem} of a `smol-toml` `TomlError` (its `line` and `column`, 1-based,
 * and the first line of its message without `Invalid TOML document: `); `undefined` for any
 * other error.
 *
 * @since 0.1.0
 * @category toml
 */
export const tomlProblem = (file: string, text: string, error: unknown): SyntaxProblem | undefined => {
  if (!(error instanceof Error)) return undefined
  const e = error as Error & { line?: unknown; column?: unknown }
  if (typeof e.line !== "number" || typeof e.column !== "number") return undefined
  const reason = e.message.split("\n")[0]!.replace(/^Invalid TOML document: /, "")
  return problemAt(file, "TOML", text, { line: e.line, column: e.column }, reason)
}

/**
 * The most YAML problems shown for one file: 3 kinds of error. `yaml` reports every error of
 * a document, and one slip cascades (a file indented with tabs gives one error per line, the
 * lines after an unclosed bracket several more): past the first few, the rest are counted.
 *
 * @since 0.9.0
 * @category yaml
 */
export const MAX_YAML_PROBLEMS = 3

/**
 * The {@link SyntaxProblem}s of `yaml`'s document errors, short: one per kind of error (the
 * library's `code`, else its words), at the first place it occurs (the start of its `pos`
 * range; the message as the library writes it without its own excerpt), naming the other
 * lines with the same error (`the same on 81 other lines: 4, 5, 6, 7, 8, ...`); at most
 * {@link MAX_YAML_PROBLEMS} kinds, the last one shown counting the errors left out. A file
 * indented with tabs is one problem of four lines, not one per line (issue 16's trial: 504
 * lines for one slip).
 *
 * @since 0.1.0
 * @category yaml
 */
export const yamlProblems = (
  file: string,
  text: string,
  errors: ReadonlyArray<{ readonly message: string; readonly pos: readonly [number, number]; readonly code?: string }>
): ReadonlyArray<SyntaxProblem> => {
  const kinds = new Map<string, { readonly at: Position; readonly reason: string; readonly lines: Array<number> }>()
  for (const e of errors) {
    const at = positionOf(text, e.pos[0])
    const reason = e.message.split(/ at line \d+, column \d+:?\n/)[0]!.trim()
    const key = e.code ?? reason
    const kind = kinds.get(key)
    if (kind === undefined) kinds.set(key, { at, reason, lines: [at.line] })
    else if (!kind.lines.includes(at.line)) kind.lines.push(at.line)
  }
  const all = [...kinds.values()]
  const shown = all.slice(0, MAX_YAML_PROBLEMS)
  const left = all.slice(MAX_YAML_PROBLEMS).reduce((n, k) => n + k.lines.length, 0)
  return shown.map((k, i) => {
    const others = k.lines.slice(1)
    const also = others.length === 0
      ? ""
      : ` (the same on ${others.length} other line${others.length === 1 ? "" : "s"}: ${others.slice(0, 5).join(", ")}${others.length > 5 ? ", ..." : ""})`
    const more = i === shown.length - 1 && left > 0
      ? `; ${left} more YAML error${left === 1 ? "" : "s"} after these, likely caused by them: fix these first`
      : ""
    return problemAt(file, "YAML", text, k.at, `${k.reason}${also}${more}`)
  })
}
