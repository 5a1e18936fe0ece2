/**
 * The demand-proportional share of block leases (issue 17 step 3): `proportionalShare`, the
 * split every runner computes from the demands its renewal read.
 */
import { describe, expect, it } from "vitest"
import { proportionalShare } from "../../src/services/internal/pool/pg/sql.js"

const all = (capacity: number, demands: Record<string, number>) =>
  Object.keys(demands).map((r) => proportionalShare(capacity, new Map(Object.entries(demands)), r))

describe("proportionalShare", () => {
  it("splits the capacity in proportion to demand: 3:1 of 8 is 6 and 2; a lone demand gets it all", () => {
    expect(all(8, { a: 30, b: 10 })).toEqual([6, 2])
    expect(all(8, { a: 3, b: 1 })).toEqual([6, 2])
    expect(all(8, { a: 5 })).toEqual([8])
  })

  it("gives 0 to a runner with no demand (and nothing to split with a capacity of 0)", () => {
    expect(all(8, { a: 4, b: 0 })).toEqual([8, 0])
    expect(proportionalShare(8, new Map([["a", 4]]), "b")).toBe(0)
    expect(all(0, { a: 4, b: 4 })).toEqual([0, 0])
  })

  it("gives at least 1 to each runner with a demand when the capacity covers them all", () => {
    expect(all(4, { a: 100, b: 1, c: 1 })).toEqual([2, 1, 1])
    expect(all(3, { a: 1000, b: 1, c: 1 })).toEqual([1, 1, 1])
    // fewer slots than runners with a demand: the largest demands first
    expect(all(2, { a: 5, b: 3, c: 1 })).toEqual([1, 1, 0])
  })

  it("never sums above the capacity, and sums to it when anyone has a demand (every vector up to 4 runners, demands 0–6, capacities 0–9)", () => {
    const values = [0, 1, 2, 3, 6]
    let checked = 0
    for (let capacity = 0; capacity <= 9; capacity++) {
      for (const a of values) for (const b of values) for (const c of values) for (const d of values) {
        const demands = { a, b, c, d }
        const shares = all(capacity, demands)
        const sum = shares.reduce((n, x) => n + x, 0)
        const demanding = Object.values(demands).filter((x) => x > 0).length
        expect(sum).toBeLessThanOrEqual(capacity)
        if (demanding > 0) expect(sum).toBe(capacity)
        Object.values(demands).forEach((x, i) => {
          if (x === 0) expect(shares[i]).toBe(0)
          else if (capacity >= demanding) expect(shares[i]).toBeGreaterThanOrEqual(1)
        })
        checked++
      }
    }
    expect(checked).toBe(10 * 5 ** 4)
  })
})
