/**
 * Issue 18, the last findings of the fresh trial, in an experiment file:
 *
 * - a resource that a `chat` task leases only understands chat's options: an unknown key there
 *   (`maxTokns`, `myNote`) is warned about (validate, run), with its field path and a
 *   did-you-mean against chat's option names; resources no chat task leases are not looked at,
 *   and `quota` and the keys a task's selector matches on are not warned about. Before: accepted
 *   without a word.
 * - a task option filled from `${VAR}` is shown (and so stored, by whatever stores a
 *   description) as its config text, as resource options already were; the task runs with the
 *   value and its identity digest is computed from it. Before: `validate --json` printed the
 *   value in the task's `parameters`.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Experiment from "../../src/config/internal/experiment.js"
import * as Chat from "../../src/tasks/internal/chat.js"

const write = (name: string, text: string) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-chatopts-"))
  const file = path.join(dir, name)
  fs.writeFileSync(file, text)
  return file
}

const definition = (resources: ReadonlyArray<unknown>, extraPools: Record<string, unknown> = {}, task: Record<string, unknown> = {}) => ({
  pools: { llm: { resources }, ...extraPools },
  pipeline: { name: "p", tasks: [{ use: "chat", name: "ask", options: { template: "{{.}}", ...task } }] },
  source: { range: { n: 1 } }
})

describe("unknown options of a resource a chat task leases", () => {
  it.effect("one warning per unknown key, with its path, the task and a did-you-mean; other resources unchanged", () =>
    Effect.gen(function*() {
      const e = yield* Experiment.fromDefinition(definition([
        { id: "a", options: { baseUrl: "http://127.0.0.1:1/v1", model: "m", apiKeyEnv: "K", quota: { tokens: 5 } } },
        { id: "b", options: { baseUrl: "http://127.0.0.1:1/v1", modle: "m", maxTokns: 5, myNote: "x" } }
      ], { other: { resources: [{ id: "o", options: { whatever: 1 } }] } }) as never, { env: { K: "sk-k-value" } })
      assert.deepStrictEqual(e.warnings, [
        `warning: pools.llm.resources[1].options.modle: unknown option of a resource the chat task "ask" leases: it reads only ` +
        `baseUrl, apiKey, apiKeyEnv, model and headers, so this one does nothing; did you mean model?`,
        `warning: pools.llm.resources[1].options.maxTokns: unknown option of a resource the chat task "ask" leases: it reads only ` +
        `baseUrl, apiKey, apiKeyEnv, model and headers, so this one does nothing; did you mean maxTokens? (an option of the chat ` +
        `task, set in its options, not the resource's)`,
        `warning: pools.llm.resources[1].options.myNote: unknown option of a resource the chat task "ask" leases: it reads only ` +
        `baseUrl, apiKey, apiKeyEnv, model and headers, so this one does nothing`
      ])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a chat task option put on the resource, and a price table put in options, say where each belongs", () =>
    Effect.gen(function*() {
      const e = yield* Experiment.fromDefinition(definition([
        { id: "a", options: { baseUrl: "http://127.0.0.1:1/v1", model: "m", temperature: 0, pricing: { inputPer1M: 1, outputPer1M: 2 } } }
      ]) as never)
      assert.strictEqual(e.warnings.length, 2)
      assert.include(e.warnings[0], "options.temperature:")
      assert.include(e.warnings[0], "temperature is an option of the chat task: set it in the task's options, not the resource's")
      assert.notInclude(e.warnings[0], "did you mean temperature")
      assert.include(e.warnings[1], "options.pricing:")
      assert.include(e.warnings[1], "its own `pricing` (pools.llm.resources[0].pricing), beside options")
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a key variable that is unset or empty is warned (not refused without --strict-env), naming the variable, never a value", () =>
    Effect.gen(function*() {
      const def = definition([
        { id: "a", options: { baseUrl: "http://127.0.0.1:1/v1", model: "m", apiKeyEnv: "UNSET_KEY" } },
        { id: "b", options: { baseUrl: "http://127.0.0.1:1/v1", model: "m", apiKeyEnv: "EMPTY_KEY" } },
        { id: "c", options: { baseUrl: "http://127.0.0.1:1/v1", model: "m", apiKeyEnv: "SET_KEY" } }
      ]) as never
      const e = yield* Experiment.fromDefinition(def, { env: { EMPTY_KEY: "", SET_KEY: "sk-set-value-1" } })
      assert.deepStrictEqual(e.warnings, [
        "warning: pools.llm.resources[0].options.apiKeyEnv: environment variable UNSET_KEY (the key) is not set: every call to this resource will fail (export UNSET_KEY=...; --strict-env refuses it)",
        "warning: pools.llm.resources[1].options.apiKeyEnv: environment variable EMPTY_KEY (the key) is empty: every call to this resource will fail (export EMPTY_KEY=...; --strict-env refuses it)"
      ])
      // --strict-env: refused instead (exit 2 from the CLI)
      const strict = yield* Effect.flip(Experiment.fromDefinition(def, { env: {}, strictEnv: true }))
      assert.include(strict.message, "pools.llm.resources[0].options.apiKeyEnv")
    }).pipe(Effect.provide(NodeContext.layer)))

  it("Chat.isEnvName: the one rule of a variable's name that the loader's checks and the task share", () => {
    for (const name of ["OPENAI_API_KEY", "_k", "k9"]) assert.isTrue(Chat.isEnvName(name), name)
    for (const name of ["", "9K", "${KEY}", "sk-abc", "A B", "KEY\n"]) assert.isFalse(Chat.isEnvName(name), name)
  })

  it.effect("a key the task's selector matches on is understood (free-form options select resources)", () =>
    Effect.gen(function*() {
      const e = yield* Experiment.fromDefinition(definition(
        [{ id: "a", options: { baseUrl: "http://127.0.0.1:1/v1", model: "m", region: "eu" } }],
        {},
        { selector: { options: { region: "eu" } } }
      ) as never)
      assert.deepStrictEqual(e.warnings, [])
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("a task option from ${VAR}", () => {
  it.effect("is shown as its config text in parameters and config; the task holds the value; the digest is the value's", () =>
    Effect.gen(function*() {
      const VALUE = "sk-TASKOPT-Jr7Qm2Wx9"
      const text = (system: string) => [
        "pools:",
        "  llm:",
        "    resources:",
        "      - { id: a, options: { baseUrl: \"http://127.0.0.1:1/v1\", model: m } }",
        "pipeline:",
        "  name: p",
        "  tasks:",
        `    - { use: chat, name: ask, options: { template: "{{.}}", system: "${system}", config: { note: "\${TOKEN}", plain: "x" } } }`,
        "source:",
        "  range: { n: 1 }",
        ""
      ].join("\n")
      const e = yield* Experiment.load(write("env.yaml", text("${TOKEN}")), { env: { TOKEN: VALUE } })
      const described = JSON.stringify(e.describe())
      assert.notInclude(described, VALUE)
      const task = (e.describe() as { pipeline: { tasks: Array<{ parameters: Record<string, unknown>; config: Record<string, unknown> }> } })
        .pipeline.tasks[0]!
      assert.strictEqual(task.parameters["system"], "${TOKEN}")
      assert.deepStrictEqual(task.config, { note: "${TOKEN}", plain: "x" })
      // the task runs with the value
      const built = e.template.tasks[0]!
      assert.strictEqual((built.parameters as Record<string, unknown>)["system"], VALUE)
      // its identity is the value's: as if the value were written in the file
      const inline = yield* Experiment.load(write("inline.yaml", text(VALUE).replace("${TOKEN}", VALUE)))
      assert.strictEqual(e.template.specDigest, inline.template.specDigest)
    }).pipe(Effect.provide(NodeContext.layer)))
})
