/**
 * Vitest setup file (run before every test file, in its worker): gives the shared `it` of
 * `@effect/vitest` back its own methods. `layer(L)(...)` of `@effect/vitest` (0.30) assigns
 * its block's testers (`effect`, `scoped`, `layer`, `prop`, `flakyTest`, running in `L`'s
 * runtime) onto vitest's global `it` object itself, so in a worker that runs several files
 * without isolation (`--no-isolate`) every file after one with a `layer(...)` block ran its
 * `it.effect` tests in that block's runtime, whose scope was already closed; after
 * `layer(L, { excludeTestServices: true })` with the live Clock (`testClock.setTime is not a
 * function`). With isolation each file loads its own `@effect/vitest` and this is a no-op.
 */
import { it } from "@effect/vitest"

type Methods = Pick<typeof it, "effect" | "scoped" | "live" | "scopedLive" | "layer" | "prop" | "flakyTest">

const key = Symbol.for("assay/test/pristineIt")
const store = globalThis as typeof globalThis & { [key]?: Methods }

/** `it`'s methods as `@effect/vitest` made them: the first time this file runs in a worker. */
export const pristine = (): Methods =>
  (store[key] ??= {
    effect: it.effect,
    scoped: it.scoped,
    live: it.live,
    scopedLive: it.scopedLive,
    layer: it.layer,
    prop: it.prop,
    flakyTest: it.flakyTest
  })

/** Puts {@link pristine}'s methods back on `it`. */
export const restore = (): void => {
  Object.assign(it, pristine())
}

restore()
