/**
 * The tasks of the spam-prompts study (`study.yaml`), around the `chat` task that the study
 * varies:
 *
 * - `email`: the loaded email as the fields the prompt templates fill: `email` is the sender,
 *   subject and the first 1,500 characters of the body between `--- email ---` and
 *   `--- end of email ---` markers (the mock server reads the instructions around them);
 * - `score`: the answer's label against the gold one. An answer naming no label is scored wrong
 *   (`predicted: null`, `correct: false`) instead of failing the pipeline, so that one vague
 *   answer does not fail a whole trial; the study's `accuracy` is the mean of `correct`.
 *
 * @since 0.6.0
 */
import { Either } from "effect"
import { type Chat, Task } from "assay"
import { type Label, parseLabel } from "../../spam-eval/corpus.js"
import type { LoadedEmail } from "../../spam-eval/pipeline.js"

/**
 * What `email` gives the prompt: the email's id, its gold label and its text with markers.
 *
 * @since 0.6.0
 * @category models
 */
export interface EmailRow {
  readonly id: string
  readonly gold: Label
  readonly email: string
}

/**
 * What `score` leaves as the pipeline's output: gold and predicted label (`null` when the
 * answer named none) and whether they agree.
 *
 * @since 0.6.0
 * @category models
 */
export interface Scored {
  readonly id: string
  readonly gold: Label
  readonly predicted: Label | null
  readonly correct: boolean
}

/**
 * Formats a loaded email for the prompt templates (see the module header).
 *
 * @since 0.6.0
 * @category tasks
 */
export const email = Task.sync("email", (row: LoadedEmail): EmailRow => {
  const body = row.email.text.replace(/\n{3,}/g, "\n\n")
  const cut = body.length > 1500 ? `${body.slice(0, 1500)}…` : body
  return {
    id: row.id,
    gold: row.label,
    email: ["--- email ---", `From: ${row.email.from}`, `Subject: ${row.email.subject}`, "", cut, "--- end of email ---"].join("\n")
  }
})

/**
 * Scores the model's answer against the gold label (see the module header).
 *
 * @since 0.6.0
 * @category tasks
 */
export const score = Task.sync("score", (out: Chat.ChatOutput<EmailRow>): Scored => {
  const predicted = Either.getOrNull(parseLabel(out.content))
  return { id: out.input.id, gold: out.input.gold, predicted, correct: predicted === out.input.gold }
})
