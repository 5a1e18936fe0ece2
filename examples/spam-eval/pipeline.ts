/**
 * The spam evaluation pipeline: for one email of the SpamAssassin corpus,
 * load and parse it (postal-mime) → build the prompt → ask the classifier through the `llm`
 * pool (the built-in `chat` task) → read the label → score it against the gold label.
 *
 * An answer that names no label fails the `label` task with `InvalidLabel` (class `invalid`):
 * a recorded failure of that email, not a crash, and not retried. Live metrics (evaluated,
 * accuracy, precision, recall, F1, invalid) are reported at run scope by {@link makeLiveMetrics}
 * after each pipeline finishes.
 *
 * @since 0.1.0
 */
import { FileSystem } from "@effect/platform"
import { Effect, Either, Option } from "effect"
import * as NodePath from "node:path"
import type { PipelineRecord } from "../../src/domain/Records.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import { Runner } from "../../src/services/Runner.js"
import { chat, type ChatOptions, type ChatOutput } from "../../src/tasks/Chat.js"
import {
  buildPrompt,
  type CorpusEntry,
  corpusDirectory,
  CorpusError,
  type CorpusGroup,
  type Label,
  parseEmail,
  parseLabel,
  type ParsedEmail
} from "./corpus.js"

// ---------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------

/**
 * The seed of one pipeline: the email's corpus id, group, gold label and its file relative to
 * the corpus `data/` folder (machine-independent, so the pipeline id is the same everywhere).
 *
 * @since 0.1.0
 * @category models
 */
export interface EmailSeed {
  readonly id: string
  readonly group: CorpusGroup
  readonly label: Label
  readonly file: string
}

/**
 * The seed of a corpus entry (see {@link EmailSeed}); `dataDir` is the corpus `data/` folder.
 *
 * @since 0.1.0
 * @category models
 */
export const seedOf = (entry: CorpusEntry, dataDir: string): EmailSeed => ({
  id: entry.id,
  group: entry.group,
  label: entry.label,
  file: NodePath.relative(dataDir, entry.file).split(NodePath.sep).join("/")
})

/**
 * A parsed email with its seed fields.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoadedEmail extends EmailSeed {
  readonly email: ParsedEmail
}

/**
 * The prompt row handed to `chat`: `prompt` (one user message) plus the fields the later
 * tasks need.
 *
 * @since 0.1.0
 * @category models
 */
export interface PromptRow {
  readonly id: string
  readonly group: CorpusGroup
  readonly gold: Label
  readonly prompt: string
}

/**
 * The label read from the answer, with the resource that answered.
 *
 * @since 0.1.0
 * @category models
 */
export interface Labelled {
  readonly id: string
  readonly group: CorpusGroup
  readonly gold: Label
  readonly predicted: Label
  readonly resourceId: string
}

/**
 * The final output of one pipeline: gold and predicted labels, whether they agree, and the
 * resource that answered.
 *
 * @since 0.1.0
 * @category models
 */
export interface Score extends Labelled {
  readonly correct: boolean
}

// ---------------------------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------------------------

/**
 * Reads the email's raw file from the corpus package and parses it with postal-mime. Fails
 * with `CorpusError` (unreadable file) or `EmailParseError`.
 *
 * @since 0.1.0
 * @category tasks
 */
export const load = Task.make("load", (seed: EmailSeed) =>
  Effect.gen(function*() {
    const dir = yield* corpusDirectory
    const fs = yield* FileSystem.FileSystem
    const raw = yield* fs.readFileString(NodePath.join(dir, ...seed.file.split("/"))).pipe(
      Effect.mapError((e) => new CorpusError({ message: `cannot read ${seed.id}: ${e.message}` }))
    )
    const email = yield* parseEmail(raw)
    return { ...seed, email } satisfies LoadedEmail
  }))

/**
 * Builds the classification prompt (`buildPrompt`: sender, subject, the first 1,500
 * characters of the body).
 *
 * @since 0.1.0
 * @category tasks
 */
export const prompt = Task.sync("prompt", (row: LoadedEmail): PromptRow => ({
  id: row.id,
  group: row.group,
  gold: row.label,
  prompt: buildPrompt(row.email)
}))

/**
 * Reads the label from the model's answer; an answer naming no label fails with
 * `InvalidLabel` (class `invalid`, not retried).
 *
 * @since 0.1.0
 * @category tasks
 */
export const label = Task.make("label", (out: ChatOutput<PromptRow>) =>
  Either.match(parseLabel(out.content), {
    onLeft: (e) => Effect.fail(e),
    onRight: (predicted) =>
      Effect.succeed(
        {
          id: out.input.id,
          group: out.input.group,
          gold: out.input.gold,
          predicted,
          resourceId: out.resourceId
        } satisfies Labelled
      )
  }))

/**
 * Scores the predicted label against the gold one.
 *
 * @since 0.1.0
 * @category tasks
 */
export const score = Task.sync("score", (row: Labelled): Score => ({ ...row, correct: row.predicted === row.gold }))

/**
 * Options of {@link makePipeline}: the `chat` task's options (defaults: name `"classify"`,
 * temperature 0, at most 5 tokens, pool `"llm"`).
 *
 * @since 0.1.0
 * @category models
 */
export type SpamPipelineOptions = ChatOptions

/**
 * The spam evaluation pipeline template: load → prompt → classify (chat) → label → score.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makePipeline = (options: SpamPipelineOptions = {}) =>
  Pipeline.make(
    "spam-eval",
    { tags: { example: "spam-eval" } },
    load,
    prompt,
    chat<PromptRow>({ name: "classify", temperature: 0, maxTokens: 5, ...options }),
    label,
    score
  )

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/**
 * Confusion counts with spam as the positive class, plus the emails whose answer named no
 * label (`invalid`) and the other failed ones (`failed`).
 *
 * @since 0.1.0
 * @category metrics
 */
export interface Confusion {
  readonly tp: number
  readonly fp: number
  readonly tn: number
  readonly fn: number
  readonly invalid: number
  readonly failed: number
}

/**
 * The figures of a {@link Confusion}: `evaluated` = tp + fp + tn + fn; `accuracy` = correct /
 * evaluated; `precision` = tp / (tp + fp); `recall` = tp / (tp + fn); `f1` = harmonic mean of
 * precision and recall (standard definitions, spam positive). A ratio with a zero denominator
 * is 0.
 *
 * @since 0.1.0
 * @category metrics
 */
export const metricsOf = (c: Confusion) => {
  const evaluated = c.tp + c.fp + c.tn + c.fn
  const ratio = (a: number, b: number) => (b === 0 ? 0 : a / b)
  const precision = ratio(c.tp, c.tp + c.fp)
  const recall = ratio(c.tp, c.tp + c.fn)
  return {
    evaluated,
    accuracy: ratio(c.tp + c.tn, evaluated),
    precision,
    recall,
    f1: ratio(2 * precision * recall, precision + recall),
    invalid: c.invalid,
    failed: c.failed
  }
}

/**
 * Adds one scored email to a {@link Confusion}.
 *
 * @since 0.1.0
 * @category metrics
 */
export const addScore = (c: Confusion, s: { readonly gold: Label; readonly predicted: Label }): Confusion =>
  s.predicted === "spam"
    ? (s.gold === "spam" ? { ...c, tp: c.tp + 1 } : { ...c, fp: c.fp + 1 })
    : (s.gold === "ham" ? { ...c, tn: c.tn + 1 } : { ...c, fn: c.fn + 1 })

/**
 * An empty {@link Confusion}.
 *
 * @since 0.1.0
 * @category metrics
 */
export const emptyConfusion: Confusion = { tp: 0, fp: 0, tn: 0, fn: 0, invalid: 0, failed: 0 }

/**
 * Live metrics for a run: `onPipelineFinished` (give it to `Runner.run`) folds each finished
 * pipeline into the confusion counts and reports `evaluated`, `accuracy`, `precision`,
 * `recall`, `f1` and `invalid` through the runner's `reportMetric` (run scope); `current`
 * reads the counts. Covers the pipelines finished in this process (a resumed run's report
 * recomputes the totals from the store).
 *
 * @since 0.1.0
 * @category metrics
 */
export const makeLiveMetrics = Effect.gen(function*() {
  const runner = yield* Runner
  let confusion = emptyConfusion
  const onPipelineFinished = (record: PipelineRecord, output: Option.Option<unknown>) =>
    Effect.gen(function*() {
      if (Option.isSome(output)) confusion = addScore(confusion, output.value as Score)
      else if (record.errorClass === "invalid") confusion = { ...confusion, invalid: confusion.invalid + 1 }
      else if (record.state === "failed") confusion = { ...confusion, failed: confusion.failed + 1 }
      const m = metricsOf(confusion)
      yield* runner.reportMetric("evaluated", m.evaluated, { label: "evaluated" })
      yield* runner.reportMetric("accuracy", m.accuracy, { label: "accuracy", display: "percent" })
      yield* runner.reportMetric("precision", m.precision, { label: "precision (spam)", display: "percent" })
      yield* runner.reportMetric("recall", m.recall, { label: "recall (spam)", display: "percent" })
      yield* runner.reportMetric("f1", m.f1, { label: "F1 (spam)", display: "number" })
      yield* runner.reportMetric("invalid", m.invalid, { label: "answers with no label" })
    })
  return { onPipelineFinished, current: Effect.sync(() => confusion) }
})
