/**
 * The second prompt style of the suite example: the subject line alone. It takes the output of
 * the spam evaluation's `load` task (the seed and the parsed email) and gives the same row as
 * its `prompt` task (`{ id, group, gold, prompt }`), so the rest of the chain (`chat`, `label`,
 * `score`) is shared by both members of `suite.yaml`; only the prompt differs.
 *
 * The types are written out here (the example imports nothing but `assay`); they are the
 * shapes of `LoadedEmail` and `PromptRow` in `examples/spam-eval/pipeline.ts`.
 *
 * @since 0.5.0
 */
import { Task } from "assay"

/**
 * What `load` gives: the seed (`id`, `group`, gold `label`, `file`) and the parsed email.
 *
 * @since 0.5.0
 * @category models
 */
export interface LoadedEmail {
  readonly id: string
  readonly group: string
  readonly label: "spam" | "ham"
  readonly file: string
  readonly email: { readonly subject: string; readonly from: string; readonly text: string }
}

/**
 * What the `chat` task is given: the row and its prompt.
 *
 * @since 0.5.0
 * @category models
 */
export interface PromptRow {
  readonly id: string
  readonly group: string
  readonly gold: "spam" | "ham"
  readonly prompt: string
}

/**
 * The subject-only prompt: the same instruction as the full prompt, then only the subject
 * line (no sender, no body).
 *
 * @param email - the parsed email
 * @returns the prompt text
 *
 * @since 0.5.0
 * @category prompts
 */
export const subjectOnly = (email: LoadedEmail["email"]): string =>
  [
    "You are an email spam filter. Classify the email below as spam (unsolicited bulk or",
    "fraudulent mail) or ham (legitimate mail). Answer with exactly one word: spam or ham.",
    "",
    "--- email ---",
    `Subject: ${email.subject}`,
    "--- end of email ---"
  ].join("\n")

/**
 * Task `prompt` (the same name as the full style's, so both members' chains read alike):
 * builds the subject-only prompt of a loaded email.
 *
 * @since 0.5.0
 * @category tasks
 */
export const subjectPrompt = Task.sync("prompt", (row: LoadedEmail): PromptRow => ({
  id: row.id,
  group: row.group,
  gold: row.label,
  prompt: subjectOnly(row.email)
}))
