import { assert, describe, it } from "@effect/vitest"
import { formatUsd } from "../../src/services/internal/money.js"

describe("formatUsd", () => {
  it("never rounds a small cost to zero, never prints an exponent, shows cents from a cent up", () => {
    assert.deepStrictEqual(
      [0, 1.2e-7, 0.0000123, 0.00018, 0.0012, 0.0099, 0.05, 3.4, 1234.5].map(formatUsd),
      ["$0", "$0.00000012", "$0.000012", "$0.00018", "$0.0012", "$0.0099", "$0.05", "$3.40", "$1234.50"]
    )
  })
})
