/**
 * Issue 21 ("errors name what to do"): a syntax error in an experiment file names the file,
 * the line and the column and shows the line with a caret, in the same shape for JSON, TOML
 * and YAML, through the real `bin/assay validate` and `run` (exit 2, nothing run).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, tempDir, write } from "../support/cli.js"

const cases: ReadonlyArray<{
  readonly name: string
  readonly text: (store: string) => string
  readonly line: number
  readonly column: number
  readonly at: string
}> = [
  {
    name: "x.json",
    // a missing comma between two properties, on line 3
    text: (store) =>
      `{\n  "run": {"store": ${JSON.stringify(store)}},\n  "pipeline": {"name": "x" "tasks": [{"use": "echo"}]},\n  "source": {"range": {"n": 2}}\n}\n`,
    line: 3,
    column: 28,
    at: `"tasks"`
  },
  {
    name: "x.toml",
    // an unclosed string on line 4
    text: (store) => `[run]\nstore = ${JSON.stringify(store)}\n[pipeline]\nname = "x\ntasks = [{ use = "echo" }]\n`,
    line: 4,
    column: 10,
    at: ""
  },
  {
    name: "x.yaml",
    // an unclosed flow sequence: the error is where the next key starts, line 5
    text: (store) => `run: {store: ${JSON.stringify(store)}}\npipeline:\n  name: x\n  tasks: [{use: echo}\nsource: {range: {n: 2}}\n`,
    line: 5,
    column: 1,
    at: "source"
  }
]

describe("syntax errors in an experiment file (issue 21)", () => {
  it.scopedLive("JSON, TOML and YAML: file:line:column, the line and a caret; exit 2 from validate and run, no store", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      for (const c of cases) {
        const store = path.join(dir, `${c.name}.db`)
        const file = write(dir, c.name, c.text(store))
        const format = path.extname(c.name).slice(1).toUpperCase()
        for (const command of ["validate", "run"]) {
          const r = yield* assay([command, "-c", file])
          assert.strictEqual(r.code, 2, `${command} ${c.name}: ${r.stdout}${r.stderr}`)
          const lines = r.stderr.split("\n")
          const head = lines.findIndex((l) => l.startsWith(`error: ${file}:${c.line}:${c.column}: invalid ${format}: `))
          assert.isAtLeast(head, 0, `${command} ${c.name}:\n${r.stderr}`)
          assert.notInclude(r.stderr, "position")
          // the offending line, then a caret under the column
          const shown = lines[head + 1]!
          const caret = lines[head + 2]!
          const gutter = shown.indexOf(" | ") + 3
          assert.strictEqual(shown.slice(0, gutter - 3).trim(), String(c.line))
          const source = c.text(store).split("\n")[c.line - 1]!
          assert.strictEqual(shown.slice(gutter), source)
          assert.strictEqual(caret.indexOf("^") - gutter + 1, c.column, `${command} ${c.name}:\n${r.stderr}`)
          assert.isTrue(source.slice(c.column - 1).startsWith(c.at))
        }
        assert.isFalse(fs.existsSync(store), "a file that does not parse opens no store")
        const json = yield* assay(["validate", "-c", file, "--json"])
        const out = JSON.parse(json.stdout)
        assert.strictEqual(out.valid, false)
        assert.deepStrictEqual([out.issues[0].line, out.issues[0].column], [c.line, c.column])
      }
    }), { timeout: 120_000 })

  it.scopedLive("a key on the offending line is masked in the shown line", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const file = write(
        dir,
        "key.json",
        `{\n  "pools": {"llm": {"resources": [{"options": {"apiKey": "sk-live-PLANTED-0001"} "x": 1}]}}\n}\n`
      )
      const r = yield* assay(["validate", "-c", file])
      assert.strictEqual(r.code, 2)
      assert.include(r.stderr, `${file}:2:`)
      assert.include(r.stderr, `"apiKey": "***"`)
      assert.notInclude(r.stderr + r.stdout, "PLANTED")
    }), { timeout: 60_000 })
})
