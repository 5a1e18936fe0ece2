/**
 * A throttle survives `kill -9` right after the 429: `bin/assay run` against the mock LLM, one
 * key answering 429 with Retry-After 30 s, killed the moment it sends its next request after
 * the 429 (a few milliseconds later, well inside the second in which a throttle used to wait
 * for the write-behind), then resumed: nothing reaches the throttled key before its window ends.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, start, tempDir, write } from "../support/cli.js"

const RETRY_AFTER_S = 30

const stormMock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 5,
    endpoints: [
      { name: "stormy", latency: { medianMs: 0 }, storms: [{ fromS: 0, toS: 3600, status: 429, rate: 1, retryAfterS: RETRY_AFTER_S }] },
      { name: "calm", latency: { medianMs: 5 } }
    ]
  })
  return yield* MockLlm.serve({ profile })
}).pipe(Effect.provide(NodeContext.layer))

describe("a throttle across kill -9 and resume", () => {
  it.scopedLive("killed at its next request after the 429, the resumed run sends nothing to the throttled key before the window ends", () =>
    Effect.gen(function*() {
      const server = yield* stormMock
      const dir = yield* tempDir("throttle-kill")
      const [stormy, calm] = server.endpoints
      write(dir, "rows.jsonl", Array.from({ length: 30 }, (_, i) => JSON.stringify({ id: `r${i}`, prompt: `row ${i}` })).join("\n"))
      const exp = write(dir, "exp.json", {
        // one worker: after the 429 the next request is sent only once the throttled attempt
        // let its worker go (it waits out Retry-After holding none)
        run: { store: "state.db", concurrency: 1 },
        pools: {
          llm: {
            resources: [
              { id: "stormy", capacity: 1, options: { baseUrl: stormy!.baseUrl, model: "mock-spam-1", apiKeyEnv: "THROTTLE_KEY" } },
              { id: "calm", capacity: 1, options: { baseUrl: calm!.baseUrl, model: "mock-spam-1", apiKeyEnv: "THROTTLE_KEY" } }
            ]
          }
        },
        pipeline: { name: "storm", tasks: [{ use: "chat", options: { temperature: 0, maxTokens: 5 }, retry: { maxAttempts: 5 } }] },
        source: { jsonl: { path: "rows.jsonl" }, keyField: "id" }
      })
      const env = { THROTTLE_KEY: "sk-throttle-kill-1a2b3c4d" }
      const child = start(["run", "-c", exp, "--quiet"], { cwd: dir, env })
      // wait for the first 429, then for any request after it: kill -9 at once
      let first429: MockLlm.RequestLogEntry | undefined
      for (let i = 0; i < 30_000; i++) {
        const log = yield* server.log
        first429 ??= log.find((e) => e.status === 429)
        if (first429 !== undefined && log.some((e) => e.seq > first429!.seq)) break
        if (child.child.exitCode !== null) break
        yield* Effect.sleep("1 millis")
      }
      child.child.kill("SIGKILL")
      const killed = yield* Effect.promise(() => child.done)
      assert.isDefined(first429, `no 429 before the run ended: ${killed.stderr}`)
      assert.strictEqual(killed.signal, "SIGKILL", "killed while running")
      const windowEnd = first429!.atMs + RETRY_AFTER_S * 1000

      const resumedAt = Date.now()
      const resumed = yield* assay(["resume", "-c", exp, "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      const after = (yield* server.log).filter((e) => e.atMs >= resumedAt)
      assert.isAbove(after.filter((e) => e.endpoint === "calm").length, 0, "the resume did run")
      const early = after.filter((e) => e.endpoint === "stormy" && e.atMs < windowEnd)
      assert.deepStrictEqual(early.map((e) => ({ status: e.status, msBeforeWindowEnd: windowEnd - e.atMs })), [])
    }), 120_000)
})
