/**
 * A trap of the pinned test libraries: chai's `assert.deepStrictEqual` (what `@effect/vitest`'s
 * `assert` is) treats `Option.some(x)` and `Option.none()` as equal, both ways and inside arrays
 * and objects, so an assertion written that way passes whether the value is there or not.
 * `expect(actual).toStrictEqual(expected)` compares Options by value (Effect's equality testers).
 *
 * This file fails on any `assert.deepStrictEqual(…)` in test/ whose arguments spell an Option
 * (`Option.some(` / `Option.none(`): write it with `expect(…).toStrictEqual(…)`, or assert
 * `Option.isSome` and the value. It keeps the kind that was found (37 of them) from coming
 * back. An Option that an argument computes without naming it (a store read, a decoded row)
 * it cannot see: the setup file `test/support/optionAssert.ts` makes chai's `deepStrictEqual`
 * and `deepEqual` fail on any argument that holds an Option when they run (raw36: a run of
 * the 149 unit files with such calls found none left). The first test is the trap itself
 * (chai's own functions, unguarded): when a library upgrade fixes it, that test fails, and
 * this rule and the guard can go.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

type DeepEqual = (actual: unknown, expected: unknown, message?: string) => void

/**
 * Chai's own `deepStrictEqual` and `deepEqual`, as the setup file `test/support/optionAssert.ts`
 * keeps them before it guards `assert`'s (read from where it keeps them, not imported: importing
 * that module would install the guard itself, and the guard's test below would no longer see
 * whether the test config runs it).
 */
const unguarded = (): { readonly deepStrictEqual: DeepEqual; readonly deepEqual: DeepEqual } =>
  (assert as unknown as Record<symbol, { readonly deepStrictEqual: DeepEqual; readonly deepEqual: DeepEqual } | undefined>)[
    Symbol.for("assay/test/optionAssert")
  ] ?? { deepStrictEqual: assert.deepStrictEqual, deepEqual: assert.deepEqual }

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
    const chai = unguarded()
    assert.doesNotThrow(() => chai.deepStrictEqual(Option.some(1), Option.none()))
    assert.doesNotThrow(() => chai.deepStrictEqual([Option.none()], [Option.some(1)]))
    assert.doesNotThrow(() => chai.deepEqual({ a: Option.some(1) }, { a: Option.none() }))
    assert.throws(() => expect(Option.some(1)).toStrictEqual(Option.none()))
    assert.throws(() => expect({ a: Option.none() }).toStrictEqual({ a: Option.some(1) }))
  })

  it("the guard: assert.deepStrictEqual and deepEqual fail on an Option a value holds (computed, nested, in a Map), not on other values", () => {
    const read = (present: boolean) => ({ rows: [{ id: 1, value: present ? Option.some("x") : Option.none() }] })
    assert.throws(() => assert.deepStrictEqual(read(true), read(false)), /expect\(actual\)\.toStrictEqual/)
    assert.throws(() => assert.deepStrictEqual(read(true), read(true)), /was given an Option/)
    assert.throws(() => assert.deepEqual(new Map([["k", Option.none()]]), new Map()), /was given an Option/)
    assert.throws(() => assert.deepStrictEqual([1], [new Set([Option.some(1)])]), /was given an Option/)
    assert.doesNotThrow(() => assert.deepStrictEqual({ a: [1, { b: "c" }] }, { a: [1, { b: "c" }] }))
    assert.throws(() => assert.deepStrictEqual({ a: 1 }, { a: 2 }), /expected/)
    const cyclic: { self?: unknown } = {}
    cyclic.self = cyclic
    assert.doesNotThrow(() => assert.deepStrictEqual(cyclic, cyclic))
    expect(read(true)).not.toStrictEqual(read(false))
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
