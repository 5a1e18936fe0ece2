/**
 * `npx tsx --conditions=assay-source bench/mock-models.ts [--size N]`: what the mock's built-in
 * model profiles give on the SpamAssassin corpus for a terse, a detailed and a detailed prompt with examples: accuracy
 * against the gold labels, share of answers naming no label, mean prompt and completion tokens
 * and mean cost per email. One JSON line per (model, prompt); the same figures every run (the
 * answers are fixed by hashes, not by Random). Pure: it calls the mock's answer function
 * directly, without HTTP, latency or rate limits.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Effect } from "effect"
import { builtinModels, scoreEmail } from "../src/services/MockLlm.js"
import { answerOf, promptStyleOf, tokensOf } from "../src/services/internal/mockModels.js"
import { digest } from "../src/domain/Json.js"
import { buildPrompt, loadCorpus, parseEmail } from "../examples/spam-eval/corpus.js"

const sizeArg = process.argv.indexOf("--size")
const size = sizeArg > 0 ? Number(process.argv[sizeArg + 1]) : undefined

const detailedInstructions = [
  "You are a careful email spam filter working for a busy mailbox. Spam is unsolicited bulk",
  "mail: advertising, offers of money or prizes, pills, loans, adult content, chain letters,",
  "phishing. Ham is legitimate mail: personal messages, replies in a thread, mailing-list",
  "discussion, newsletters the reader subscribed to, technical notes. Read the sender, the",
  "subject and the body before you decide; quoted replies and technical vocabulary point to ham,",
  "shouting capitals, many links and urgent offers point to spam. Answer with exactly one word:",
  "spam or ham."
].join("\n")
const exampleLines = "Examples: \"Re: patch for the kernel build\" is ham; \"EARN $$$ FROM HOME!!!\" is spam."

const detailed = (prompt: string) => prompt.replace(/^[\s\S]*?(?=--- email ---)/, `${detailedInstructions}\n\n`)
const withExamples = (prompt: string) =>
  prompt.replace(/^[\s\S]*?(?=--- email ---)/, `${detailedInstructions}\n${exampleLines}\n\n`)

const program = Effect.gen(function*() {
  const records = yield* loadCorpus(size === undefined ? {} : { sample: { size, seed: 0 } })
  const prompts: Array<{ gold: string; terse: string }> = []
  for (const r of records) {
    const parsed = yield* Effect.either(parseEmail(r.raw))
    if (parsed._tag === "Left") continue
    prompts.push({ gold: r.label, terse: buildPrompt(parsed.right) })
  }
  for (const model of builtinModels.models) {
    for (const [name, make] of [["terse", (p: string) => p], ["detailed", detailed], ["detailed+examples", withExamples]] as const) {
      let right = 0
      let invalid = 0
      let pt = 0
      let ct = 0
      let cost = 0
      for (const p of prompts) {
        const text = make(p.terse)
        const messages = [{ role: "user", text }]
        const style = promptStyleOf(messages)
        const fingerprint = digest(JSON.stringify([{ content: text, role: "user" }]))
        const promptTokens = tokensOf(text.length)
        const a = answerOf(model, style, scoreEmail(style.input).label, 0, fingerprint, promptTokens)
        const t = a.content.toLowerCase()
        const spam = /\bspam\b/.test(t)
        const ham = /\bham\b/.test(t)
        if (spam === ham) invalid++
        else if ((spam ? "spam" : "ham") === p.gold) right++
        pt += promptTokens
        ct += a.completionTokens
        cost += a.costUsd
      }
      const n = prompts.length
      console.log(JSON.stringify({
        model: model.name,
        prompt: name,
        emails: n,
        accuracy: Number((right / n).toFixed(4)),
        invalid: Number((invalid / n).toFixed(4)),
        promptTokens: Number((pt / n).toFixed(1)),
        completionTokens: Number((ct / n).toFixed(2)),
        costUsdPer1000: Number(((cost / n) * 1000).toFixed(4))
      }))
    }
  }
})

Effect.runPromise(program.pipe(Effect.provide(NodeContext.layer))).catch((e) => {
  console.error(e)
  process.exit(1)
})
