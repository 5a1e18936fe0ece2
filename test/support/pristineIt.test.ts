/**
 * `pristineIt.ts` (the setup file run before every test file): a `layer(...)` block of
 * `@effect/vitest` replaces the testers of the `it` that every file shares in a worker; the
 * setup file's `restore` gives `it` its own methods back, so that a file run after it without
 * isolation (`--no-isolate`) runs `it.effect` with the TestClock, not in that block's runtime.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { pristine, restore } from "./pristineIt.js"

layer(Layer.empty, { excludeTestServices: true })("a layer block without test services", (it) => {
  it.effect("runs in its layer's runtime", () => Effect.void)
})

describe("pristineIt", () => {
  it("a layer block replaced the shared it's testers; restore gives @effect/vitest's own back", () => {
    assert.notStrictEqual(it.effect, pristine().effect)
    assert.notStrictEqual(it.scoped, pristine().scoped)
    restore()
    assert.strictEqual(it.effect, pristine().effect)
    assert.strictEqual(it.scoped, pristine().scoped)
    assert.strictEqual(it.layer, pristine().layer)
  })
})
