/**
 * Vitest setup file (run before every test file, in its worker): chai's `assert.deepStrictEqual`
 * and `assert.deepEqual` (what `@effect/vitest`'s `assert` is) fail when either argument holds
 * an `Option` anywhere (itself, or inside arrays, plain objects and class instances' own
 * fields, `Map`s and `Set`s). Chai takes `Option.some(x)` and `Option.none()` for equal, both
 * ways and nested, so such an assertion passes whatever the value: it is written
 * `expect(actual).toStrictEqual(expected)` instead (Effect's equality testers compare Options by
 * value). `test/architecture/testAssertions.test.ts` pins the trap and finds the calls that
 * spell an Option in their text; this guard finds the ones whose Options come from a computed
 * value (a decoded row, a store read, a report) when they run. Patched once per worker (the
 * files of a worker share one module graph: `isolate: false`).
 */
import { assert } from "@effect/vitest"
import { Option } from "effect"

type DeepEqual = (actual: unknown, expected: unknown, message?: string) => void

const key = Symbol.for("assay/test/optionAssert")
const store = assert as unknown as { [key]?: { readonly deepStrictEqual: DeepEqual; readonly deepEqual: DeepEqual } }

/** Whether `value` holds an `Option` (at any depth up to 12; cycles followed once). */
const holdsOption = (value: unknown, seen: Set<unknown> = new Set(), depth = 0): boolean => {
  if (value === null || typeof value !== "object" || depth > 12 || seen.has(value)) return false
  if (Option.isOption(value)) return true
  seen.add(value)
  const next = (v: unknown) => holdsOption(v, seen, depth + 1)
  if (Array.isArray(value)) return value.some(next)
  if (value instanceof Map) {
    for (const [k, v] of value) if (next(k) || next(v)) return true
    return false
  }
  if (value instanceof Set) {
    for (const v of value) if (next(v)) return true
    return false
  }
  return Object.values(value).some(next)
}

/** Chai's own `deepStrictEqual` and `deepEqual`, unguarded (the trap's own test calls them). */
const unguarded = (): { readonly deepStrictEqual: DeepEqual; readonly deepEqual: DeepEqual } =>
  (store[key] ??= { deepStrictEqual: assert.deepStrictEqual.bind(assert), deepEqual: assert.deepEqual.bind(assert) })

const guard = (name: "deepStrictEqual" | "deepEqual", original: DeepEqual): DeepEqual => (actual, expected, message) => {
  if (holdsOption(actual) || holdsOption(expected)) {
    assert.fail(
      `assert.${name} was given an Option, which chai takes for equal to any other Option (Option.some(x) to Option.none()): ` +
        "write expect(actual).toStrictEqual(expected)" + (message === undefined ? "" : ` (${message})`)
    )
  }
  original(actual, expected, message)
}

if (store[key] === undefined) {
  const { deepStrictEqual, deepEqual } = unguarded()
  assert.deepStrictEqual = guard("deepStrictEqual", deepStrictEqual) as typeof assert.deepStrictEqual
  assert.deepEqual = guard("deepEqual", deepEqual) as typeof assert.deepEqual
}
