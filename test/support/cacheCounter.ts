/**
 * A counted "model" and a one-run helper for the tests of a store's own call cache (SQLite and
 * PostgreSQL): every call answers something new, so a cache hit shows as an unchanged count.
 */
import { Effect, Layer } from "effect"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import type * as CallCache from "../../src/services/CallCache.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import type { Store } from "../../src/services/Store.js"

/** A "model" whose every call answers something new; the calls are counted across runs. */
export const counter = () => {
  let calls = 0
  const task = Task.make("model", { cache: true }, (row: { readonly q: string }) =>
    Effect.sync(() => ({ q: row.q, answer: `a${++calls}` })))
  return { template: Pipeline.make("cached", task), calls: () => calls }
}

/** The three rows every run asks about. */
export const seeds = [{ q: "a" }, { q: "b" }, { q: "c" }]

/** One run (retrying succeeded pipelines, so every task is asked again) in a fresh build of `stores`. */
export const runOnce = <ROut extends Store | CallCache.CallCache, E>(
  model: ReturnType<typeof counter>,
  stores: Layer.Layer<ROut, E>
) =>
  Runner.run(model.template.map(seeds), { retrySucceeded: true }).pipe(
    Effect.provide(Layer.provideMerge(
      Runner.layer({ handleSignals: false, cache: "readWrite" }),
      Layer.mergeAll(stores, Pool.layer([]))
    ))
  )
