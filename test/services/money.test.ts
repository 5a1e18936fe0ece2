import { assert, describe, it } from "@effect/vitest"
import { cacheHitsText, cacheLineText, callsServedText, callsText, formatCost, formatStudyUsd, formatUsd, knownCost, STUDY_COST } from "../../src/services/internal/money.js"
import { figuresText } from "../../src/services/internal/report.js"

describe("formatUsd", () => {
  it("never rounds a small cost to zero, never prints an exponent, shows cents from a dollar up", () => {
    assert.deepStrictEqual(
      [0, 1.2e-7, 0.0000123, 0.00018, 0.0012, 0.0099, 0.05, 3.4, 1234.5].map(formatUsd),
      ["$0", "$0.00000012", "$0.000012", "$0.00018", "$0.0012", "$0.0099", "$0.05", "$3.40", "$1234.50"]
    )
  })
})

describe("formatUsd: small amounts keep their value", () => {
  it("below a dollar, two significant digits: $0.011 is not $0.01", () => {
    assert.deepStrictEqual(
      [0.011, 0.0113, 0.095, 0.5, 0.996, 1.234].map(formatUsd),
      ["$0.011", "$0.011", "$0.095", "$0.50", "$1.00", "$1.23"]
    )
  })
  it("no trailing zero past the cents: $0.0090 reads $0.009, $0.00040 reads $0.0004 (issue 18)", () => {
    assert.deepStrictEqual([0.009, 0.0004, 0.1, 0.05].map(formatUsd), ["$0.009", "$0.0004", "$0.10", "$0.05"])
  })
})

describe("formatStudyUsd: one precision in every study view (fix16x)", () => {
  it("three significant digits with their zeros, never rounded to a shorter figure: $0.0103 beside $0.0107 and $0.00970", () => {
    assert.deepStrictEqual(
      [0.01035, 0.01074, 0.0097, 0.05, 0.1349, 0.5, 0.000238, 0.09996, 1.234, 12.345, 1.2e-9, 0].map((v) => formatStudyUsd(v)),
      ["$0.0103", "$0.0107", "$0.00970", "$0.0500", "$0.135", "$0.500", "$0.000238", "$0.100", "$1.23", "$12.35", "$0.00000000120", "$0"]
    )
    // more digits only on request (two figures that read the same at 3)
    assert.deepStrictEqual([formatStudyUsd(0.00042, 4), formatStudyUsd(0.0004, 4)], ["$0.0004200", "$0.0004000"])
  })
})

describe("formatCost: a total with unpriced attempts never reads as a plain dollar figure", () => {
  it("all priced: the amount; some priced: a lower bound and the count; none: unpriced", () => {
    assert.deepStrictEqual(
      [formatCost(0.011, 0), formatCost(0, 0), formatCost(0.011, 3), formatCost(0, 1), formatCost(null, 2)],
      ["$0.011", "$0", ">= $0.011 (3 attempts unpriced)", "unpriced (1 attempt)", "unpriced (2 attempts)"]
    )
    // a study trial's meter counts calls, in the study views' dollars
    assert.deepStrictEqual([formatCost(0.01035, 2, STUDY_COST), formatCost(null, 1, STUDY_COST)], [">= $0.0103 (2 calls unpriced)", "unpriced (1 call)"])
    assert.deepStrictEqual([knownCost(0, 2), knownCost(0.5, 2), knownCost(0, 0)], [null, 0.5, 0])
  })
  it("the report's figures in words say a partly priced total is a lower bound", () => {
    const text = figuresText({ calls: 4, refused: 0, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 10, tokensOut: 5, costUsd: 0.011, estimated: 0, unpriced: 1 })
    assert.include(text, "cost >= $0.011 (1 attempt unpriced)")
    // the count is of attempts, worded so (fix16x): a judge attempt that repaired its answer
    // sent 2 calls and is 1 unpriced attempt, never "calls 2 … (1 call unpriced)"
    const repaired = figuresText({ calls: 2, refused: 0, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 10, tokensOut: 5, costUsd: null, estimated: 0, unpriced: 1 })
    assert.include(repaired, "calls 2; ")
    assert.include(repaired, "cost unpriced (1 attempt)")
    // every call sent, and how many were answered when not all were (tester18c F4)
    assert.include(text, "calls 4; ")
    const refused = figuresText({ calls: 312, refused: 12, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 10, tokensOut: 5, costUsd: 0.011, estimated: 0, unpriced: 0 })
    assert.include(refused, "calls 312 (300 answered, 12 refused with 429); ")
    assert.strictEqual(callsText({ calls: 8, refused: 1, failedCalls: 2 }), "8 (5 answered, 1 refused with 429, 2 failed at the endpoint)")
    // the hits of any cached task, and of them the model calls saved (hits of tasks on a pool)
    const hits = figuresText({ calls: 0, refused: 0, failedCalls: 0, cacheHits: 28, modelCallHits: 20, tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 })
    assert.include(hits, "calls 0, cache hits 28 (any cached task; 20 model calls saved); ")
    assert.strictEqual(cacheHitsText({ cacheHits: 1, modelCallHits: 1 }), ", cache hits 1 (any cached task; 1 model call saved)")
    assert.strictEqual(cacheHitsText({ cacheHits: 0, modelCallHits: 0 }), "")
  })
})

describe("the call cache in the summaries' words (tester18d F3, F6)", () => {
  it("calls made, with what the cache served instead and what that did not cost", () => {
    assert.strictEqual(callsServedText(0, 4, 0.0001785), "0 calls (4 served from cache, $0.00018 not spent)")
    assert.strictEqual(callsServedText(1, 1, null), "1 call (1 served from cache)")
    assert.strictEqual(callsServedText(12, 0, null), "12 calls")
  })

  it("the run's cache line: hits, misses, the answers stored, the dollars not spent", () => {
    const base = { hits: 0, misses: 20, refreshed: 0, bypassed: 0, costSavedUsd: null, stored: 20 }
    assert.strictEqual(cacheLineText(base), "call cache: 0 hits, 20 misses (20 answers stored)")
    assert.strictEqual(cacheLineText({ ...base, hits: 28, misses: 0, stored: 0, costSavedUsd: 0.0012495 }), "call cache: 28 hits, 0 misses ($0.0012 not spent)")
    assert.strictEqual(cacheLineText({ ...base, misses: 0, bypassed: 8, stored: 0 }), "call cache: 0 hits, 0 misses, 8 read-only misses (nothing stored)")
  })
})
