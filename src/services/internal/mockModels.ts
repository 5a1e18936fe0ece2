/**
 * Internal helpers of `MockLlm`'s model profiles (not reachable from the package entry): how a
 * prompt's style is read, the hash-based draws that make a profile's answers deterministic per
 * (seed, profile, prompt, input), token counts and cost, and the per-profile rate-limit buckets.
 */
import { digest } from "../../domain/Json.js"
import type { ModelProfile } from "../MockLlm.js"
import { emailSection } from "./mockLlm.js"

/** A chat message reduced to its role and its text (parts joined). */
export interface PlainMessage {
  readonly role: string
  readonly text: string
}

/**
 * What the mock reads from a prompt's wording (everything but the input it classifies):
 *
 * - `input`: the text the scorer reads: the email section (between `--- email ---` and
 *   `--- end of email ---`) of the last user message when it has those markers, else the whole
 *   last user message (else the whole prompt);
 * - `instructionWords`: the number of whitespace-separated words of the prompt outside the input
 *   (the marker lines not counted);
 * - `detailed`: `instructionWords >= DETAILED_WORDS`;
 * - `examples`: an assistant turn before the last user message (few-shot as chat turns), or
 *   the word "example"/"examples" outside the input;
 * - `oneWord`: the instructions ask for a bare label ("one word", "single word", "1-word",
 *   "only the label", "label only").
 */
export interface PromptStyle {
  readonly input: string
  readonly instructionWords: number
  readonly detailed: boolean
  readonly examples: boolean
  readonly oneWord: boolean
}

/** Words of instructions from which a prompt counts as `detailed`. */
export const DETAILED_WORDS = 50

const oneWordRe = /\b(?:one|single|1)[- ]word\b|\bonly (?:the )?label\b|\blabel only\b/i
const exampleRe = /\bexamples?\b/i

/** Reads a prompt's style (see {@link PromptStyle}). Pure. */
export const promptStyleOf = (messages: ReadonlyArray<PlainMessage>): PromptStyle => {
  let last = -1
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === "user") {
      last = i
      break
    }
  }
  const all = messages.map((m) => m.text).join("\n")
  let input: string
  let instructions: string
  if (last < 0) {
    input = all
    instructions = ""
  } else {
    const text = messages[last]!.text
    input = emailSection(text)
    const rest = input === text
      ? ""
      : text.replace(input, " ").replace("--- email ---", " ").replace("--- end of email ---", " ")
    instructions = [...messages.filter((_, i) => i !== last).map((m) => m.text), rest].join("\n")
  }
  const instructionWords = instructions.split(/\s+/).filter((w) => w !== "").length
  const fewShot = messages.some((m, i) => m.role === "assistant" && i < last)
  return {
    input,
    instructionWords,
    detailed: instructionWords >= DETAILED_WORDS,
    examples: fewShot || exampleRe.test(instructions),
    oneWord: oneWordRe.test(instructions)
  }
}

/** A short name of a style for the request log: `terse` or e.g. `detailed+examples+one-word`. */
export const styleName = (s: PromptStyle): string => {
  const parts = [s.detailed ? "detailed" : "", s.examples ? "examples" : "", s.oneWord ? "one-word" : ""].filter((p) =>
    p !== ""
  )
  return parts.length === 0 ? "terse" : parts.join("+")
}

/**
 * A uniform number in [0, 1) from the digest of `parts`: the first 48 bits of the digest
 * divided by 2⁴⁸. The same parts always give the same number; no `Random` is involved, so
 * the result does not depend on arrival order or concurrency.
 */
export const hashUnit = (...parts: ReadonlyArray<string | number>): number =>
  Number.parseInt(digest(parts.join("\u0000")).slice(0, 12), 16) / 2 ** 48

/**
 * The probability that a profile agrees with the scorer for a prompt of style `s`: the error
 * `1 − accuracy` is multiplied by `1 − gains.instructions` for a detailed prompt and by
 * `1 − gains.examples` for a prompt with examples.
 */
export const effectiveAccuracy = (
  accuracy: number,
  gains: { readonly instructions: number; readonly examples: number },
  s: PromptStyle
): number => {
  const error = (1 - accuracy) * (s.detailed ? 1 - gains.instructions : 1) * (s.examples ? 1 - gains.examples : 1)
  return 1 - error
}

/** Tokens of a text as the mock counts them: ⌈characters / 4⌉, at least 1. */
export const tokensOf = (chars: number): number => Math.max(1, Math.ceil(chars / 4))

/**
 * The cost in USD of a completion: `promptTokens / 1000 × promptPer1k + completionTokens /
 * 1000 × completionPer1k`, rounded to 1e-9 USD (so that sums of costs print without float noise).
 */
export const costUsd = (
  pricing: { readonly promptPer1k: number; readonly completionPer1k: number },
  promptTokens: number,
  completionTokens: number
): number =>
  Math.round(((promptTokens * pricing.promptPer1k + completionTokens * pricing.completionPer1k) / 1000) * 1e9) / 1e9

/** The sentence a chatty profile answers instead of a bare label (contains the label once). */
export const chattyAnswers: ReadonlyArray<(label: "spam" | "ham") => string> = [
  (l) =>
    l === "spam"
      ? "This email is spam: it shows the usual signs of unsolicited bulk mail."
      : "This email is ham: it reads like ordinary correspondence.",
  (l) => `Classification: ${l}. I looked at the sender, the subject and the wording of the body.`,
  (l) => `I would label this message as ${l}.`
]

/** Answers of a profile that name no label at all. */
export const invalidModelAnswers: ReadonlyArray<string> = [
  "I cannot tell from this message.",
  "It is hard to say without more context."
]

/** A token bucket: `tokens` left, refilled at `rate` per second up to `burst`, as of `lastMs`. */
export interface Bucket {
  tokens: number
  lastMs: number
  readonly rate: number
  readonly burst: number
}

/** A full bucket for `rate` tokens per second and size `burst`, as of `nowMs`. */
export const makeBucket = (rate: number, burst: number, nowMs: number): Bucket => ({
  tokens: burst,
  lastMs: nowMs,
  rate,
  burst
})

/**
 * Takes one token from every bucket when each has one (all or nothing), or returns the seconds
 * until all of them have one: the largest ⌈(1 − tokens) / rate⌉, at least 1.
 */
export const takeAll = (buckets: ReadonlyArray<Bucket>, nowMs: number): number | undefined => {
  for (const b of buckets) {
    b.tokens = Math.min(b.burst, b.tokens + ((nowMs - b.lastMs) / 1000) * b.rate)
    b.lastMs = nowMs
  }
  if (buckets.every((b) => b.tokens >= 1)) {
    for (const b of buckets) b.tokens -= 1
    return undefined
  }
  return Math.max(1, ...buckets.filter((b) => b.tokens < 1).map((b) => Math.ceil((1 - b.tokens) / b.rate)))
}

/**
 * A model profile's answer to a prompt of style `style` whose input the scorer labels `truth`:
 * it agrees with `truth` when `hashUnit(seed, name, "agree", input)` is below the
 * {@link effectiveAccuracy}, else names the other label; then `w = hashUnit(seed, name,
 * "wording", fingerprint)` picks the wording: an answer naming no label when `w <
 * invalidRate`, a sentence when the prompt does not ask for one word and `w < invalidRate +
 * chattiness`, else the bare label. Returns the text, its completion tokens and the cost of
 * `promptTokens` + those tokens. Pure: the same arguments give the same answer.
 */
export const answerOf = (
  model: ModelProfile,
  style: PromptStyle,
  truth: "spam" | "ham",
  seed: number,
  fingerprint: string,
  promptTokens: number
): { readonly content: string; readonly agrees: boolean; readonly completionTokens: number; readonly costUsd: number } => {
  const agrees = hashUnit(seed, model.name, "agree", style.input) <
    effectiveAccuracy(model.accuracy, model.promptGains, style)
  const label = agrees ? truth : truth === "spam" ? "ham" : "spam"
  const w = hashUnit(seed, model.name, "wording", fingerprint)
  const content = w < model.invalidRate
    ? invalidModelAnswers[Math.floor((w / model.invalidRate) * invalidModelAnswers.length) % invalidModelAnswers.length]!
    : !style.oneWord && w < model.invalidRate + model.chattiness
    ? chattyAnswers[Math.floor(((w - model.invalidRate) / model.chattiness) * chattyAnswers.length) % chattyAnswers.length]!(
      label
    )
    : label
  const completionTokens = tokensOf(content.length)
  return { content, agrees, completionTokens, costUsd: costUsd(model.pricing, promptTokens, completionTokens) }
}
