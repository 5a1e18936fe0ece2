import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { warningsOf } from "../../src/cli/StudyPlan.js"
import { count, figure, labelled, listed, noun, range, unsetEnvWarning } from "../../src/domain/internal/words.js"

describe("words: an interval's two ends are written the same way (tester16g F4)", () => {
  it("an integer up to float noise is that integer, and an interval never mixes an integer with the same number in 4 digits", () => {
    // v04 is v01 + 2 on every case: the bootstrap's upper end is -2 up to float noise
    expect(figure(-1.9999999999999998)).toBe("-2")
    expect(range(-2, -1.9999999999999998)).toBe("[-2, -2]")
    expect(range(1.9999999999999998, 2)).toBe("[2, 2]")
    // a real (not float-noise) difference below the 4 digits: both ends in 4 digits
    expect(range(2, 2.0004)).toBe("[2.000, 2.000]")
    expect(range(-1.0001, -1)).toBe("[-1.000, -1.000]")
    // different numbers keep their own forms
    expect(range(0, 0.5)).toBe("[0, 0.5000]")
    expect(range(2, 3)).toBe("[2, 3]")
    expect(figure(2.0004)).toBe("2.000")
  })
})

describe("words: labels and counts agree in number with what follows them", () => {
  it("a label before ids is singular for one id and plural for several", () => {
    expect(labelled("variant", ["v01"])).toBe("variant v01")
    expect(labelled("variant", ["v01", "v02"])).toBe("variants v01, v02")
    expect(labelled("trial", [])).toBe("trials none")
    expect(labelled("analysis", ["a", "b"], { many: "analyses" })).toBe("analyses a, b")
    expect(labelled("trial", ["t1", "t2", "t3"], { max: 2 })).toBe("trials t1, t2, … (3 in all)")
  })

  it("a count names its noun in the count's number, with thousands separators", () => {
    expect(count(1, "trial")).toBe("1 trial")
    expect(count(0, "trial")).toBe("0 trials")
    expect(count(2, "paired case")).toBe("2 paired cases")
    expect(count(12000, "pipeline")).toBe("12,000 pipelines")
    expect(noun(1, "variant")).toBe("variant")
    expect(noun(3, "variant")).toBe("variants")
    expect(listed(["a", "b", "c"], { max: 1, separator: "; " })).toBe("a; … (3 in all)")
  })

  it("an unset ${VAR} is warned of in one wording, spelled by one helper (study plan and study run agree; issue 16 leftovers)", () => {
    const line = unsetEnvWarning({ name: "JUDGE_KEY", path: "pools.llm.resources[0].options.apiKey" })
    expect(line).toBe('warning: environment variable JUDGE_KEY is not set (at pools.llm.resources[0].options.apiKey); it expands to ""')
    expect(warningsOf({ unresolvedEnv: [{ name: "JUDGE_KEY", path: "pools.llm.resources[0].options.apiKey" }], warnings: [], stop: [] }, 0))
      .toEqual([line])
    // no command spells the sentence itself (run, study run, a suite run print it through the helper)
    const src = path.join(import.meta.dirname, "../../src")
    const spelled = (fs.readdirSync(src, { recursive: true }) as Array<string>)
      .filter((f) => f.endsWith(".ts") && !f.endsWith(path.join("internal", "words.ts")))
      .filter((f) => fs.readFileSync(path.join(src, f), "utf8").includes("is not set (at "))
    expect(spelled).toEqual([])
  })
})
