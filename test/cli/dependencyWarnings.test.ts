/**
 * The one pg deprecation that `@effect/cluster`'s lock connection raises in every runner is
 * dropped; every other warning still reaches Node's printer (`src/cli/dependencyWarnings.ts`).
 */
import { assert, describe, it } from "@effect/vitest"
import * as util from "node:util"
import { quietDependencyWarnings } from "../../src/cli/dependencyWarnings.js"

const warningsDuring = async (f: () => void): Promise<Array<string>> => {
  const seen: Array<string> = []
  const listener = (w: Error) => seen.push(w.message)
  process.on("warning", listener)
  try {
    f()
    // the 'warning' event is emitted on the next tick
    await new Promise((resolve) => setImmediate(resolve))
  } finally {
    process.off("warning", listener)
  }
  return seen
}

describe("quietDependencyWarnings", () => {
  it("drops pg's queued-query deprecation, keeps every other warning", async () => {
    const pgMessage = "Calling client.query() when the client is already executing a query is deprecated and will be removed in pg@9.0."
    // before: Node raises it like any deprecation
    const before = await warningsDuring(() => util.deprecate(() => 1, pgMessage)())
    assert.deepStrictEqual(before, [pgMessage])
    quietDependencyWarnings()
    quietDependencyWarnings() // idempotent: wrapped once
    const after = await warningsDuring(() => {
      util.deprecate(() => 1, pgMessage)()
      util.deprecate(() => 1, "Client.queryQueue is deprecated and will be removed in pg@9.0.")()
      process.emitWarning("a plugin's own warning")
    })
    assert.deepStrictEqual(after, ["Client.queryQueue is deprecated and will be removed in pg@9.0.", "a plugin's own warning"])
  })
})
