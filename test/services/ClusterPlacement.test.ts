/**
 * Window placement (issue 17, lead36): the submitter starts each new window in the lane whose
 * shard's runner has the least work, the shards' runners computed as @effect/cluster computes
 * them. The pure parts: the lane choice and the shards' runners.
 */
import * as Runner from "@effect/cluster/Runner"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import { describe, expect, it } from "vitest"
import { chooseLane, shardRunners, WINDOW_LANES } from "../../src/services/internal/cluster/submit.js"
import { windowExecutionKey, windowKey } from "../../src/services/internal/cluster/workflow.js"

const runner = (port: number, healthy = true) =>
  [new Runner.Runner({ address: RunnerAddress.make("127.0.0.1", port), groups: ["default"], weight: 1 }), healthy] as const

describe("window placement", () => {
  it("the lane of the least-loaded runner, the lowest lane on ties; lanes with no known runner are skipped; lane 0 when none is known", () => {
    const load = new Map([["a", 64], ["b", 3], ["c", 3]])
    expect(chooseLane(["a", "b", "c", "a"], load)).toBe(1)
    expect(chooseLane(["a", undefined, "c", "b"], load)).toBe(2)
    // a runner with nothing in flight is not in the load map: 0
    expect(chooseLane(["a", "b", "d"], load)).toBe(2)
    expect(chooseLane([undefined, undefined], load)).toBe(0)
    expect(chooseLane([], load)).toBe(0)
  })

  it("the shards' runners: every shard of the group to a healthy runner, as evenly as the library's hash ring splits them; an unhealthy runner gets none", () => {
    const shards = shardRunners([runner(7001), runner(7002), runner(7003), runner(7004, false)], 300)
    expect(shards.length).toBe(300)
    const counts = new Map<string, number>()
    for (const r of shards) counts.set(r, (counts.get(r) ?? 0) + 1)
    expect([...counts.keys()].sort()).toEqual([7001, 7002, 7003].map((p) => String(RunnerAddress.make("127.0.0.1", p))).sort())
    expect([...counts.values()]).toEqual([100, 100, 100])
    // the same runners listed in another order: the same assignment
    expect(shardRunners([runner(7003), runner(7001), runner(7002)], 300)).toEqual(shards)
    expect(shardRunners([runner(7001, false)], 300)).toEqual([])
  })

  it("a window's execution key: lane 0 is the key windows had before lanes (an older submitter's window is the same execution); other lanes are distinct", () => {
    const payload = { pipelineIds: ["p1", "p2"], storeId: "s" }
    expect(windowExecutionKey(payload)).toBe(windowKey(payload))
    expect(windowExecutionKey({ ...payload, lane: 0 })).toBe(windowKey(payload))
    const keys = new Set(Array.from({ length: WINDOW_LANES }, (_, lane) => windowExecutionKey({ ...payload, lane })))
    expect(keys.size).toBe(WINDOW_LANES)
    // lanes 1–7 keep the keys of the submitters that had 8 lanes: their windows are found again
    expect(WINDOW_LANES).toBeGreaterThanOrEqual(8)
    expect(windowExecutionKey({ ...payload, lane: 7 })).toBe(`${windowKey(payload)}@7`)
  })
})
