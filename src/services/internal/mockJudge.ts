/**
 * The mock server's judge rule (internal to `MockLlm`): a request whose messages hold a judge
 * prompt (the markers the `judge` task writes: `--- rubric ---` with the rubric as JSON, and
 * `--- response L ---` blocks) is answered with a JSON score object instead of a spam label.
 */
import { hashUnit } from "./mockModels.js"

/** One criterion as the rubric block gives it. */
export interface MockCriterion {
  readonly name: string
  readonly min: number
  readonly max: number
}

/** What the mock reads from a judge prompt. */
export interface MockJudgeRequest {
  readonly criteria: ReadonlyArray<MockCriterion>
  readonly responses: ReadonlyArray<{ readonly label: string; readonly text: string }>
  readonly evidence: ReadonlyMap<string, string>
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * Reads a judge prompt from the text of a request's messages (the first rubric block, the
 * response and evidence blocks, first occurrence of each label or name wins), or `undefined`
 * when the text is no judge prompt (no rubric block, no valid criteria, or no response).
 */
export const judgeRequestOf = (text: string): MockJudgeRequest | undefined => {
  const rubric = /--- rubric ---\r?\n([\s\S]*?)\r?\n--- end of rubric ---/.exec(text)
  if (rubric === null) return undefined
  let parsed: unknown
  try {
    parsed = JSON.parse(rubric[1]!)
  } catch {
    return undefined
  }
  if (!isRecord(parsed) || !Array.isArray(parsed["criteria"])) return undefined
  const criteria: Array<MockCriterion> = []
  for (const c of parsed["criteria"]) {
    if (!isRecord(c) || typeof c["name"] !== "string" || !isRecord(c["scale"])) return undefined
    const { max, min } = c["scale"]
    if (typeof min !== "number" || typeof max !== "number" || !(max > min)) return undefined
    criteria.push({ name: c["name"], min, max })
  }
  const responses: Array<{ label: string; text: string }> = []
  for (const m of text.matchAll(/--- response ([A-Z]) ---\r?\n([\s\S]*?)\r?\n--- end of response \1 ---/g)) {
    if (!responses.some((r) => r.label === m[1])) responses.push({ label: m[1]!, text: m[2]! })
  }
  const evidence = new Map<string, string>()
  for (const m of text.matchAll(/--- evidence: ([^\r\n]+?) ---\r?\n([\s\S]*?)\r?\n--- end of evidence: \1 ---/g)) {
    if (!evidence.has(m[1]!)) evidence.set(m[1]!, m[2]!)
  }
  return criteria.length === 0 || responses.length === 0 ? undefined : { criteria, responses, evidence }
}

const normalize = (s: string): string => s.toLowerCase().replace(/\s+/g, " ").trim()

/**
 * The mock judge's answer: for every response and criterion, with an evidence block named
 * `reference`, the criterion's `max` when the response contains the reference (case and
 * whitespace ignored) and its `min` otherwise; without one, an integer step of the scale fixed
 * by `hashUnit(seed, model, "judge", criterion, response text)` (so the same response always
 * gets the same score, whatever its label or position). Each score has a one-line reason.
 * Pure.
 */
export const judgeAnswerOf = (request: MockJudgeRequest, seed: number, model: string): string => {
  const reference = request.evidence.get("reference")
  const responses: Record<string, { scores: Record<string, number>; reasons: Record<string, string> }> = {}
  for (const r of request.responses) {
    const scores: Record<string, number> = {}
    const reasons: Record<string, string> = {}
    for (const c of request.criteria) {
      if (reference !== undefined) {
        const hit = normalize(r.text).includes(normalize(reference))
        scores[c.name] = hit ? c.max : c.min
        reasons[c.name] = hit ? "The response states the reference answer." : "The response does not state the reference answer."
      } else {
        const steps = Math.floor(c.max - c.min) + 1
        const u = hashUnit(seed, model, "judge", c.name, r.text)
        scores[c.name] = Math.min(c.max, c.min + Math.floor(u * steps))
        reasons[c.name] = `Mock judgement of ${c.name} (deterministic for this text).`
      }
    }
    responses[r.label] = { scores, reasons }
  }
  return JSON.stringify({ responses })
}

/** What a judge says when it is told to answer badly: prose, no JSON object. */
export const malformedJudgeAnswer = (request: MockJudgeRequest): string =>
  `Response ${request.responses[0]!.label} reads well overall; I would rate it fairly high.`
