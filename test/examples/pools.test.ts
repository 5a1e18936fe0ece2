import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as path from "node:path"

const root = path.resolve(import.meta.dirname, "../..")
const loader = path.join(root, "node_modules/tsx/dist/loader.mjs")

describe("examples/pools", () => {
  it("runs: masks secrets, degrades and recovers the flaky endpoint, reclaims the leaked lease", () => {
    const run = spawnSync(process.execPath, ["--conditions=assay-source", "--import", loader, "examples/pools/pools.ts"], {
      cwd: root,
      encoding: "utf8"
    })
    expect(run.status, run.stderr).toBe(0)
    const lines = run.stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, any>)
    const step = (name: string) => lines.find((l) => l["step"] === name)!
    expect(step("spec")["spec"]["options"]).toEqual({ model: "m-large", apiKey: "***", quota: { tokens: 10000 } })
    expect(run.stdout).not.toContain("sk-secret")
    expect(step("degraded")).toMatchObject({ state: "degraded", failures: 3 })
    expect(step("burst")).toMatchObject({ answered: 12, servedBy: ["big"] })
    expect(step("revived")).toMatchObject({ servedBy: "flaky", state: "ready", failures: 0 })
    expect(step("reclaim")["leaked"]).toEqual(["leaky"])
    const summary = step("summary")
    expect(summary).toMatchObject({ leasesTotal: 17, okTotal: 13, failedTotal: 3, leakedTotal: 1, active: 0 })
    expect(summary["events"]).toEqual([
      "resource.degraded:flaky",
      "resource.cooldown_ended:flaky",
      "lease.leaked:big"
    ])
  }, 120_000)
})
