import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { ConfigError } from "../../src/domain/Errors.js"
import { builtins, builtinTaskNames } from "../../src/tasks/Builtins.js"
import { taskOptionNames } from "../../src/tasks/internal/chat.js"
import { judgeOptionNames } from "../../src/tasks/internal/judge.js"

const ctx = { baseDir: "/tmp" }
const chat = builtins.get("chat")!

const refused = (f: () => unknown): ConfigError => {
  try {
    f()
  } catch (e) {
    if (e instanceof ConfigError) return e
    throw e
  }
  throw new Error("expected a ConfigError")
}

describe("Builtins: chat", () => {
  it.effect("is registered, and its options (or args[0]) become the chat task's options", () =>
    Effect.sync(() => {
      assert.include(builtinTaskNames, "chat")
      const fromOptions = chat.make([], { name: "classify", maxTokens: 5, temperature: 0 }, ctx)
      assert.strictEqual(fromOptions.name, "classify")
      assert.strictEqual(fromOptions.options.resource, "llm")
      assert.strictEqual(fromOptions.parameters["maxTokens"], 5)
      const fromArgs = chat.make([{ name: "ask", resource: "apis", model: "m" }], undefined, ctx)
      assert.strictEqual(fromArgs.name, "ask")
      assert.strictEqual(fromArgs.options.resource, "apis")
      assert.strictEqual(fromArgs.parameters["model"], "m")
      // options win over args[0]
      const both = chat.make([{ name: "a", maxTokens: 3 }], { maxTokens: 7 }, ctx)
      assert.strictEqual(both.name, "a")
      assert.strictEqual(both.parameters["maxTokens"], 7)
      // the default: name "chat"
      assert.strictEqual(chat.make([], undefined, ctx).name, "chat")
    }))

  it.effect("refuses bad options with paths inside the task section", () =>
    Effect.sync(() => {
      const bad = refused(() => chat.make([], { temperature: 5, colour: "red" }, ctx))
      assert.sameMembers(bad.issues.map((i) => i.path), ["options.temperature", "options.colour"])
      const bare = refused(() => chat.make([], { requestTimeout: 30 }, ctx))
      assert.deepStrictEqual(bare.issues.map((i) => i.path), ["options.requestTimeout"])
      assert.match(bare.issues[0]!.suggestion ?? "", /unit/)
      const notObject = refused(() => chat.make(["hello"], undefined, ctx))
      assert.deepStrictEqual(notObject.issues.map((i) => i.path), ["args[0]"])
      const tooMany = refused(() => chat.make([{}, {}], undefined, ctx))
      assert.deepStrictEqual(tooMany.issues.map((i) => i.path), ["args"])
    }))
})

describe("Builtins: the signatures `assay plugins` prints (tester18e F5)", () => {
  it.effect("chat's and judge's signatures name every option the task accepts (cache included)", () =>
    Effect.sync(() => {
      for (const [name, options] of [["chat", taskOptionNames], ["judge", judgeOptionNames]] as const) {
        const signature = builtins.get(name)!.signature
        for (const option of options) assert.match(signature, new RegExp(`[{,] ${option}\\??:?[ ,}]`), `${name}: ${option}`)
      }
      assert.include(chat.signature, "cache?")
    }))
})
