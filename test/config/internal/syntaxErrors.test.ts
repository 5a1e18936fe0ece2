/**
 * Syntax errors of experiment files: position arithmetic, the frame (caret under the column,
 * tabs, long lines), secrets masked on the shown line, and each format's locator.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import { parseText } from "../../../src/config/internal/parse.js"
import * as SyntaxErrors from "../../../src/config/internal/syntaxErrors.js"

/** The column (1-based) the caret of a rendered frame points at, in the shown line. */
const caretColumn = (rendered: string): { readonly shown: string; readonly column: number } => {
  const lines = rendered.split("\n")
  const shown = lines[lines.length - 2]!.replace(/^\s*\d+ \| /, "")
  const caret = lines[lines.length - 1]!.replace(/^\s* \| /, "")
  return { shown, column: caret.indexOf("^") + 1 }
}

describe("syntaxErrors", () => {
  it("positionOf: 1-based line and column of an offset; CRLF ends count as one line end", () => {
    const text = "ab\ncd\r\nef"
    assert.deepStrictEqual(SyntaxErrors.positionOf(text, 0), { line: 1, column: 1 })
    assert.deepStrictEqual(SyntaxErrors.positionOf(text, 2), { line: 1, column: 3 })
    assert.deepStrictEqual(SyntaxErrors.positionOf(text, 3), { line: 2, column: 1 })
    assert.deepStrictEqual(SyntaxErrors.positionOf(text, 7), { line: 3, column: 1 })
    assert.deepStrictEqual(SyntaxErrors.positionOf(text, 99), { line: 3, column: 3 })
  })

  it("frame: the line with its number and a caret under the column; tabs kept so the caret lines up", () => {
    const text = "{\n\t\t\"a\": 1 2\n}"
    const f = SyntaxErrors.frame(text, { line: 2, column: 10 })
    const [shown, caret] = f.split("\n") as [string, string]
    assert.strictEqual(shown, "    2 | \t\t\"a\": 1 2")
    assert.strictEqual(caret, "      | \t\t       ^")
    // the caret sits under the offending character, tabs included
    assert.strictEqual(shown.slice(8)[caret.slice(8).indexOf("^")], "2")
  })

  it("frame: a long (minified) line is cut to a window around the column, the caret still on its character", () => {
    const body = Array.from({ length: 400 }, (_, i) => `"k${i}":${i}`).join(",")
    const text = `{${body} "oops":1,${body}}`
    const offset = text.indexOf(" \"oops\"") + 1
    const at = SyntaxErrors.positionOf(text, offset)
    const { column, shown } = caretColumn(SyntaxErrors.frame(text, at))
    assert.isAtMost(shown.length, 122)
    assert.isTrue(shown.startsWith("…") && shown.endsWith("…"))
    assert.strictEqual(shown[column - 1], "\"")
    assert.strictEqual(shown.slice(column - 1, column + 5), "\"oops\"")
  })

  it("maskLine: values of secret-looking names and the secret parts of URLs are masked; the caret follows", () => {
    const line = `  "apiKey": "sk-live-123456", "baseUrl": "https://u:pw@h/x?api-key=abcd&api-version=2", "n": 3 x`
    const masked = SyntaxErrors.maskLine(line)
    assert.notInclude(masked.text, "sk-live-123456")
    assert.notInclude(masked.text, "pw@")
    assert.notInclude(masked.text, "abcd")
    assert.include(masked.text, `"apiKey": "***"`)
    assert.include(masked.text, "api-version=2")
    // a column after the masks lands on the same character
    const col = line.indexOf(" x") + 2
    assert.strictEqual(masked.text[masked.columnOf(col) - 1], "x")
    // a column inside a masked value lands at its start
    assert.strictEqual(masked.text[masked.columnOf(line.indexOf("live") + 1) - 1], "\"")
    // YAML/TOML forms and env references
    assert.strictEqual(SyntaxErrors.maskLine("token: abcdef123 ]").text, "token: *** ]")
    assert.strictEqual(SyntaxErrors.maskLine(`api_key = "k-0000"`).text, `api_key = "***"`)
    assert.strictEqual(SyntaxErrors.maskLine(`apiKey: "\${OPENAI_KEY}" ]`).text, `apiKey: "\${OPENAI_KEY}" ]`)
    assert.strictEqual(SyntaxErrors.maskLine(`apiKeyEnv: MY_KEY ]`).text, `apiKeyEnv: MY_KEY ]`)
  })

  it("jsonProblem: V8's position when it gives one, jsonc-parser's otherwise (a bare word, an empty file)", () => {
    const text = `{\n  "a": 1,\n  "b": tru\n}\n`
    const e = (() => {
      try {
        JSON.parse(text)
      } catch (err) {
        return err
      }
    })()
    const p = SyntaxErrors.jsonProblem("f.json", text, e)
    assert.deepStrictEqual([p.line, p.column], [3, 8])
    assert.include(p.reason, `"tru" is not a JSON value`)
    // a message without a position (another engine's wording) is located by jsonc-parser too
    const q = SyntaxErrors.jsonProblem("f.json", `{"a": 1,}`, new SyntaxError("Unexpected token }"))
    assert.deepStrictEqual([q.line, q.column], [1, 9])
    assert.include(q.reason, "property name")
    const empty = SyntaxErrors.jsonProblem("f.json", "", new SyntaxError("Unexpected end of JSON input"))
    assert.deepStrictEqual([empty.line, empty.column], [1, 1])
    assert.include(empty.reason, "empty")
  })

  it("parseText: JSON, TOML and YAML errors have the same shape (file:line:column, the line, a caret) and carry line/column", () => {
    const cases: ReadonlyArray<readonly ["json" | "toml" | "yaml", string, number, number, string]> = [
      ["json", `{\n  "pipeline": {"name": "x" "tasks": []}\n}\n`, 2, 28, `"tasks"`],
      ["toml", `[pipeline]\nname = "x"\ntasks = [ { use = "echo" }\n[source]\n`, 4, 1, "["],
      ["yaml", `pipeline:\n  name: x\n  tasks: [{use: echo}\nsource: {range: {n: 2}}\n`, 4, 1, "s"]
    ]
    for (const [format, text, line, column, at] of cases) {
      const r = parseText(text, format, `/d/x.${format}`)
      assert.isTrue(Either.isLeft(r), format)
      if (Either.isRight(r)) continue
      const e = r.left
      assert.match(e.message, new RegExp(`^/d/x\\.${format}:${line}:${column}: invalid ${format.toUpperCase()}: `), format)
      assert.deepStrictEqual([e.issues[0]!.line, e.issues[0]!.column], [line, column], format)
      const { column: caret, shown } = caretColumn(e.message.split("\n").slice(0, 3).join("\n"))
      assert.strictEqual(caret, column, format)
      assert.isTrue(shown.slice(caret - 1).startsWith(at), `${format}: ${shown}`)
    }
  })

  it("issue 16 trial: a YAML file indented with tabs is one short problem (not one per line), the other lines named", () => {
    const body = Array.from({ length: 80 }, (_, i) => `\t- { name: v${i}, type: enum, values: [a, b] }`).join("\n")
    const r = parseText(`study:\n\tid: x\nvariables:\n${body}\n`, "yaml", "/d/s.yaml")
    assert.isTrue(Either.isLeft(r))
    if (Either.isRight(r)) return
    const lines = r.left.message.split("\n")
    assert.isAtMost(lines.length, 3 * SyntaxErrors.MAX_YAML_PROBLEMS, r.left.message)
    assert.isAtMost(r.left.issues.length, SyntaxErrors.MAX_YAML_PROBLEMS)
    assert.match(lines[0]!, /^\/d\/s\.yaml:2:1: invalid YAML: .*tab.* \(the same on 80 other lines: 4, 5, 6, 7, 8, \.\.\.\)/i)
    assert.strictEqual(r.left.message.split("/d/s.yaml:").length - 1, r.left.issues.length, "each kind once")
  })

  it("parseText: every kind of YAML error of the document is reported, each with its own frame", () => {
    const r = parseText("a: 1\na: 2\nb: [1,\n", "yaml", "/d/y.yaml")
    assert.isTrue(Either.isLeft(r))
    if (Either.isLeft(r)) {
      assert.isAtLeast(r.left.issues.length, 2)
      assert.include(r.left.message, "/d/y.yaml:2:1: invalid YAML: Map keys must be unique")
    }
  })
})
