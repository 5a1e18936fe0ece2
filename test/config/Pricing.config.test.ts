/**
 * A mistake in a price (`pricing`, a resource's `pricing`) is reported once, at its exact field
 * path, with a did-you-mean for a misspelt field: not beside the other union branch's
 * complaints (`Expected ModelPrice, actual 2`, `unknown key "mock-spam-1"`).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as Experiment from "../../src/config/internal/experiment.js"
import type { ConfigError } from "../../src/domain/Errors.js"

const issuesOf = (e: ConfigError) => e.issues.map((i) => `${i.path}: ${i.message}${i.suggestion ? ` | ${i.suggestion}` : ""}`)

const withPricing = (resource: unknown, table?: unknown) => ({
  ...(table !== undefined ? { pricing: table } : {}),
  pools: { llm: { resources: [{ id: "clean", capacity: 2, pricing: resource }] } },
  pipeline: { name: "p", resource: "llm", tasks: [{ use: "echo" }] },
  source: { range: { n: 2 } }
})

const refused = (definition: unknown) =>
  Effect.gen(function*() {
    const result = yield* Effect.either(Experiment.fromDefinition(definition as never))
    assert.isTrue(Either.isLeft(result), "refused")
    return Either.isLeft(result) ? issuesOf(result.left) : []
  }).pipe(Effect.provide(NodeContext.layer))

describe("pricing mistakes in an experiment", () => {
  it.effect("a misspelt field of a resource's single price: one line, its path and a did-you-mean", () =>
    Effect.gen(function*() {
      const lines = yield* refused(withPricing({ inputPer1M: 2, outputPr1M: 3 }))
      assert.deepStrictEqual(lines, [
        "pools.llm.resources[0].pricing.outputPr1M: unknown key \"outputPr1M\" | did you mean outputPer1M?"
      ])
    }))

  it.effect("a negative price in a resource's table by model: only that price's path", () =>
    Effect.gen(function*() {
      const lines = yield* refused(withPricing({ "mock-spam-1": { inputPer1M: -2, outputPer1M: 3 } }))
      assert.deepStrictEqual(lines, [
        "pools.llm.resources[0].pricing.mock-spam-1.inputPer1M: inputPer1M must be >= 0, got -2"
      ])
    }))

  it.effect("a resource's price that is not a number, and a field left out, each at its path", () =>
    Effect.gen(function*() {
      const lines = yield* refused(withPricing({ a: { inputPer1M: 1, outputPer1M: 2 }, b: { inputPer1M: "x" } }))
      assert.deepStrictEqual(lines, [
        "pools.llm.resources[0].pricing.b.inputPer1M: inputPer1M must be a finite number of USD per 1,000,000 tokens, got \"x\"",
        "pools.llm.resources[0].pricing.b.outputPer1M: outputPer1M is missing (USD per 1,000,000 tokens)"
      ])
    }))

  it.effect("a price of NaN or Infinity (YAML .nan, .inf) is named as such, not as null", () =>
    Effect.gen(function*() {
      const lines = yield* refused(withPricing({ inputPer1M: 1, outputPer1M: 2 }, { m: { inputPer1M: NaN, outputPer1M: Infinity } }))
      assert.deepStrictEqual(lines, [
        "pricing.m.inputPer1M: inputPer1M must be a finite number of USD per 1,000,000 tokens, got NaN",
        "pricing.m.outputPer1M: outputPer1M must be a finite number of USD per 1,000,000 tokens, got Infinity"
      ])
    }))

  it.effect("a misspelt field in the experiment's table: one line, not also 'is missing'", () =>
    Effect.gen(function*() {
      const lines = yield* refused(withPricing({ inputPer1M: 2, outputPer1M: 3 }, { m: { inputPer1m: 1.5, outputPer1M: 6 } }))
      assert.deepStrictEqual(lines, ["pricing.m.inputPer1m: unknown key \"inputPer1m\" | did you mean inputPer1M?"])
    }))

  it.effect("valid prices, single and by model, are accepted", () =>
    Effect.gen(function*() {
      const one = yield* Experiment.fromDefinition(withPricing({ inputPer1M: 2, outputPer1M: 3 }, { m: { inputPer1M: 0, outputPer1M: 1 } }) as never)
      const table = yield* Experiment.fromDefinition(withPricing({ m: { inputPer1M: 2, outputPer1M: 3 } }) as never)
      assert.isDefined(one)
      assert.isDefined(table)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a price table that misses the model in use: a warning naming the resource, the model, the priced models and a near name; loads all the same", () =>
    Effect.gen(function*() {
      const def = (options: Record<string, unknown>, table: unknown, taskModel?: string) => ({
        ...(table !== undefined ? { pricing: table } : {}),
        pools: { llm: { resources: [{ id: "clean", capacity: 2, options }] } },
        pipeline: { name: "p", resource: "llm", tasks: [{ use: "chat", ...(taskModel !== undefined ? { options: { model: taskModel } } : {}) }] },
        source: { range: { n: 2 } }
      })
      const price = { inputPer1M: 1.5, outputPer1M: 6 }
      const far = yield* Experiment.fromDefinition(def({ model: "mock-spam-1" }, { "other-model": price }) as never)
      assert.deepStrictEqual(far.warnings, [
        "warning: pools.llm.resources[0] (clean): model \"mock-spam-1\" has no price, so its calls will count as unpriced (priced: \"other-model\")"
      ])
      // a near miss: the typo is in the pricing key, so the line is at the key and suggests the model's name (tester18f F6)
      const near = yield* Experiment.fromDefinition(def({ model: "mock-spam-1" }, { "mock-spam-l": price, "big": price }) as never)
      assert.deepStrictEqual(near.warnings, [
        "warning: pricing.mock-spam-l: no model in use is called \"mock-spam-l\"; did you mean \"mock-spam-1\" (the model of pools.llm.resources[0] (clean))? Until then, calls of \"mock-spam-1\" count as unpriced."
      ])
      // ... in a resource's own table: the key's path there
      const nearOwn = yield* Experiment.fromDefinition({
        pools: { llm: { resources: [{ id: "clean", capacity: 2, options: { model: "mock-spam-1" }, pricing: { "mock-spam1": price } }] } },
        pipeline: { name: "p", resource: "llm", tasks: [{ use: "chat" }] },
        source: { range: { n: 2 } }
      } as never)
      assert.deepStrictEqual(nearOwn.warnings, [
        "warning: pools.llm.resources[0].pricing.mock-spam1: no model in use is called \"mock-spam1\"; did you mean \"mock-spam-1\" (the model of pools.llm.resources[0] (clean))? Until then, calls of \"mock-spam-1\" count as unpriced."
      ])
      // a near name that another resource uses is no typo: the plain line at the resource, no suggestion
      const twoModels = yield* Experiment.fromDefinition({
        pricing: { "gpt-4o": price },
        pools: {
          llm: { resources: [{ id: "a", capacity: 2, options: { model: "gpt-4o" } }, { id: "b", capacity: 2, options: { model: "gpt-4o-m" } }] }
        },
        pipeline: { name: "p", tasks: [{ use: "chat" }] },
        source: { range: { n: 2 } }
      } as never)
      assert.deepStrictEqual(twoModels.warnings, [
        "warning: pools.llm.resources[1] (b): model \"gpt-4o-m\" has no price, so its calls will count as unpriced (priced: \"gpt-4o\")"
      ])
      // the task's model is the one in use
      const byTask = yield* Experiment.fromDefinition(def({ model: "other-model" }, { "other-model": price }, "gpt-x") as never)
      assert.strictEqual(byTask.warnings.length, 1)
      assert.include(byTask.warnings[0]!, "model \"gpt-x\" has no price")
      // a model from ${VAR} (a model name is no secret): resolved, with its text as written, so the user recognises it
      const fromEnv = yield* Experiment.fromDefinition(def({ model: "${MODEL_V}" }, { "other-model": price }) as never, { env: { MODEL_V: "gpt-4o-mini-2024" } })
      assert.deepStrictEqual(fromEnv.warnings, [
        "warning: pools.llm.resources[0] (clean): model \"gpt-4o-mini-2024\" (written ${MODEL_V}) has no price, so its calls will count as unpriced (priced: \"other-model\")"
      ])
      const taskFromEnv = yield* Experiment.fromDefinition(def({ model: "other-model" }, { "other-model": price }, "${MODEL_V}") as never, { env: { MODEL_V: "gpt-x" } })
      assert.include(taskFromEnv.warnings[0]!, "model \"gpt-x\" (written ${MODEL_V}) has no price")
      // covered, or nothing priced at all: silent
      assert.deepStrictEqual((yield* Experiment.fromDefinition(def({ model: "mock-spam-1" }, { "mock-spam-1": price }) as never)).warnings, [])
      assert.deepStrictEqual((yield* Experiment.fromDefinition(def({ model: "mock-spam-1" }, undefined) as never)).warnings, [])
    }).pipe(Effect.provide(NodeContext.layer)))
})

