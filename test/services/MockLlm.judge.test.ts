/**
 * The mock server's judge rule: it reads the prompt the `judge` task writes (rubric, evidence,
 * responses), scores against a `reference` when there is one, otherwise by a hash of the response
 * text (the same text gets the same score under any label), and leaves other prompts alone.
 */
import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import { judgeAnswerOf, judgeRequestOf } from "../../src/services/internal/mockJudge.js"
import { Rubric, userPrompt } from "../../src/tasks/Judge.js"

const rubric = Schema.decodeSync(Rubric)({
  id: "r",
  version: 1,
  criteria: [{ name: "correct", scale: { min: 1, max: 5 } }, { name: "tone", scale: { min: 0, max: 10 } }]
})

describe("the mock judge", () => {
  it("reads the judge task's prompt: criteria with their scales, responses by label, evidence by name", () => {
    const text = userPrompt(rubric, [{ name: "reference", text: "spam" }], [{ label: "A", text: "It is SPAM." }, { label: "B", text: "ham\nsecond line" }])
    const req = judgeRequestOf(text)!
    assert.deepStrictEqual(req.criteria, [{ name: "correct", min: 1, max: 5 }, { name: "tone", min: 0, max: 10 }])
    assert.deepStrictEqual(req.responses, [{ label: "A", text: "It is SPAM." }, { label: "B", text: "ham\nsecond line" }])
    assert.strictEqual(req.evidence.get("reference"), "spam")
    const answer = JSON.parse(judgeAnswerOf(req, 0, "m"))
    assert.deepStrictEqual(answer.responses.A.scores, { correct: 5, tone: 10 })
    assert.deepStrictEqual(answer.responses.B.scores, { correct: 1, tone: 0 })
    assert.isUndefined(judgeRequestOf("--- email ---\nhello\n--- end of email ---"))
  })

  it("without a reference: integer scores within each scale, the same for the same text under any label", () => {
    const one = judgeRequestOf(userPrompt(rubric, [], [{ label: "A", text: "first" }, { label: "B", text: "second" }]))!
    const two = judgeRequestOf(userPrompt(rubric, [], [{ label: "A", text: "second" }, { label: "B", text: "first" }]))!
    const a = JSON.parse(judgeAnswerOf(one, 7, "m")).responses
    const b = JSON.parse(judgeAnswerOf(two, 7, "m")).responses
    assert.deepStrictEqual(a.A.scores, b.B.scores)
    assert.deepStrictEqual(a.B.scores, b.A.scores)
    for (const s of [a.A.scores, a.B.scores]) {
      assert.isTrue(Number.isInteger(s.correct) && s.correct >= 1 && s.correct <= 5)
      assert.isTrue(Number.isInteger(s.tone) && s.tone >= 0 && s.tone <= 10)
    }
  })
})
