/**
 * A trap of the pinned test libraries: chai's `assert.deepStrictEqual` (what `@effect/vitest`'s
 * `assert` is) treats `Option.some(x)` and `Option.none()` as equal, both ways and inside arrays
 * and objects, so an assertion written that way passes whether the value is there or not.
 * `expect(actual).toStrictEqual(expected)` compares Options by value (Effect's equality testers).
 *
 * This file fails on any `assert.deepStrictEqual(…)` in test/ whose arguments spell an Option
 * (`Option.some(` / `Option.none(`): write it with `expect(…).toStrictEqual(…)`, or assert
 * `Option.isSome` and the value. It cannot see an Option that an argument computes without
 * naming it; it keeps the kind that was found (37 of them) from coming back. The first test is
 * the trap itself: when a library upgrade fixes it, that test fails, and this rule can go.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

/** Every test source under `test/`, by its checkout-relative path. */
const testSources = (): ReadonlyMap<string, string> => {
  const out = new Map<string, string>()
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(full)
      else if (/\.m?ts$/.test(entry.name)) out.set(path.relative(root, full).split(path.sep).join("/"), fs.readFileSync(full, "utf8"))
    }
  }
  walk(path.join(root, "test"))
  return out
}

/**
 * The `assert.deepStrictEqual(…)` calls of `text` whose argument text names an Option, as
 * `line: call` (the call's text up to its closing parenthesis; quotes and nesting followed).
 */
export const optionDeepEquals = (text: string): ReadonlyArray<string> => {
  const found: Array<string> = []
  const head = "assert.deepStrictEqual("
  for (let at = text.indexOf(head); at >= 0; at = text.indexOf(head, at + head.length)) {
    let depth = 0
    let quote: string | undefined
    let end = -1
    for (let i = at + head.length; i < text.length && end < 0; i++) {
      const c = text[i]!
      if (quote !== undefined) {
        if (c === "\\") i++
        else if (c === quote) quote = undefined
      } else if (c === "\"" || c === "'" || c === "`") quote = c
      else if (c === "(" || c === "[" || c === "{") depth++
      else if (c === ")" || c === "]" || c === "}") {
        if (depth === 0) end = i
        else depth--
      }
    }
    const call = text.slice(at, end < 0 ? text.length : end + 1)
    if (/Option\.(some|none)\(/.test(call)) found.push(`${text.slice(0, at).split("\n").length}: ${call.replace(/\s+/g, " ")}`)
  }
  return found
}

describe("test assertions", () => {
  it("the trap: chai's deepStrictEqual takes Option.some and Option.none for equal; expect's toStrictEqual does not", () => {
    assert.doesNotThrow(() => assert.deepStrictEqual(Option.some(1), Option.none()))
    assert.doesNotThrow(() => assert.deepStrictEqual([Option.none()], [Option.some(1)]))
    assert.throws(() => expect(Option.some(1)).toStrictEqual(Option.none()))
    assert.throws(() => expect({ a: Option.none() }).toStrictEqual({ a: Option.some(1) }))
  })

  it("the checker finds an Option in a one-line and a multi-line deepStrictEqual, and skips strings and other calls", () => {
    const text = [
      "assert.deepStrictEqual(read(x), Option.some(1))",
      "assert.deepStrictEqual(",
      "  f(\")\"),",
      "  Either.right([0, Option.none()])",
      ")",
      "assert.deepStrictEqual(Option.isSome(x), true)",
      "expect(y).toStrictEqual(Option.none())"
    ].join("\n")
    assert.deepStrictEqual(optionDeepEquals(text).map((f) => f.split(":")[0]), ["1", "2"])
  })

  it("no assert.deepStrictEqual in test/ spells an Option", () => {
    const offending: Array<string> = []
    for (const [file, text] of testSources()) {
      if (file === "test/architecture/testAssertions.test.ts") continue
      for (const f of optionDeepEquals(text)) offending.push(`${file}:${f}`)
    }
    assert.deepStrictEqual(offending, [])
  })
})
