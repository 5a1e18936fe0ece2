import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { applyOverrides } from "../../src/cli/MockLlmCommand.js"
import { MockProfile, presetEndpoints } from "../../src/services/MockLlm.js"

const none = {
  seed: Option.none(),
  rps: Option.none(),
  burst: Option.none(),
  latencyMs: Option.none(),
  errorRate: Option.none(),
  maxConcurrency: Option.none()
}

const presets = MockProfile.make({ endpoints: presetEndpoints(3) as any })

describe("mock-llm command-line overrides", () => {
  it.effect("--no-storms drops every endpoint's storms and keeps the rest of the profile", () =>
    Effect.gen(function*() {
      const kept = yield* applyOverrides(presets, none)
      const fast = kept.endpoints.find((e) => e.name === "fast")!
      assert.isAbove(fast.storms.length, 0, "the preset fast endpoint has a storm")
      const calm = yield* applyOverrides(presets, { ...none, noStorms: true, latencyMs: Option.some(300) })
      for (const e of calm.endpoints) assert.deepStrictEqual(e.storms, [], e.name)
      const calmFast = calm.endpoints.find((e) => e.name === "fast")!
      assert.strictEqual(calmFast.errorRate, fast.errorRate, "the background error rate stays")
      assert.strictEqual(calmFast.latency.medianMs, 300)
    }))
})
