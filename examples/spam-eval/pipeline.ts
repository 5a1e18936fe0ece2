/**
 * The spam evaluation pipeline: for one email of the SpamAssassin corpus,
 * load and parse it (postal-mime) → build the prompt → ask the classifier through the `llm`
 * pool (the built-in `chat` task) → read the label → score it against the gold label.
 *
 * An answer that names no label fails the `label` task with `InvalidLabel` (class `invalid`):
 * a recorded failure of that email, not a crash, and not retried. Live metrics (evaluated,
 * accuracy, precision, recall, F1, invalid) are reported at run scope by {@link makeLiveMetrics}
 * after each pipeline finishes (the TypeScript program), or by the {@link liveLabel} and
 * {@link liveScore} tasks themselves (the config file, where no callback can be given).
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Effect, Either, Option, Stream } from "effect"
import * as NodePath from "node:path"
import { Chat, Json, Pipeline, type Records, Runner, type Store, Task, type TaskContext } from "assay"
import {
  buildPrompt,
  type CorpusEntry,
  corpusDirectory,
  CorpusError,
  type CorpusGroup,
  type Label,
  parseEmail,
  parseIdentity,
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
 * The call-cache key material of {@link load} for one seed: the task (`load`'s code digest),
 * what parsing depends on besides the file ({@link parseIdentity}: the corpus package's and
 * postal-mime's versions, the digest of the parsing code) and the whole seed (its `file`
 * names the email within that corpus version; its other fields are copied into the output).
 * `undefined` (not cached) when the versions cannot be read or the seed is not strict JSON.
 */
const loadCacheKey = (seed: unknown): Effect.Effect<Json.Json | undefined> =>
  Effect.match(parseIdentity, {
    onFailure: () => undefined,
    onSuccess: (identity) =>
      Json.isStrictJson(seed) ? { task: { name: "spam-eval/load", code: load.codeDigest }, ...identity, seed } : undefined
  })

/**
 * Reads the email's raw file from the corpus package and parses it with postal-mime. Fails
 * with `CorpusError` (unreadable file) or `EmailParseError`.
 *
 * Cacheable (a pure function of the seed, the corpus version and the parser): it follows the
 * run's cache mode (`run.cache`, `--cache`; off by default), and {@link makePipeline} gives it
 * the `classify` task's `cache` option. A rerun with the cache on then serves the parsed
 * email instead of reading and parsing the file (see docs/cache.md, "Caching a pure step").
 *
 * @since 0.1.0
 * @category tasks
 */
export const load = Task.make("load", { cache: { mode: undefined }, cacheKey: loadCacheKey }, (seed: EmailSeed) =>
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
export const label = Task.make("label", (out: Chat.ChatOutput<PromptRow>) =>
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
export type SpamPipelineOptions = Chat.ChatOptions

/**
 * The spam evaluation pipeline template: load → prompt → classify (chat) → label → score.
 * The `cache` option of `options` (the `classify` task's) applies to {@link load} too: with
 * the cache on, a rerun neither calls the model nor parses an email again.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makePipeline = (options: SpamPipelineOptions = {}) =>
  Pipeline.make(
    "spam-eval",
    { tags: { example: "spam-eval" } },
    options.cache === undefined ? load : Task.withOverrides(load, { cache: options.cache }),
    prompt,
    Chat.chat<PromptRow>({ name: "classify", temperature: 0, maxTokens: 5, ...options }),
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
  const runner = yield* Runner.Runner
  let confusion = emptyConfusion
  const onPipelineFinished = (record: Records.PipelineRecord, output: Option.Option<unknown>) =>
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

// ---------------------------------------------------------------------------------------------
// Live metrics from the tasks (for the config file)
// ---------------------------------------------------------------------------------------------

interface Tally {
  readonly scored: Map<string, { readonly gold: Label; readonly predicted: Label }>
  readonly invalid: Set<string>
}

// One tally per run id. A config file cannot hand the runner a callback, so the label and score
// tasks keep the counts here; the semaphore orders the first read of the store and the updates.
const tallies = new Map<string, Tally>()
const tallyLock = Effect.unsafeMakeSemaphore(1)

const isScore = (u: unknown): u is { readonly gold: Label; readonly predicted: Label } =>
  typeof u === "object" && u !== null && ((u as Score).gold === "spam" || (u as Score).gold === "ham") &&
  ((u as Score).predicted === "spam" || (u as Score).predicted === "ham")

/** The emails the store already settled (earlier runs of a resumed job), read once per run. */
const seedTally = (store: Store.TaskStore) =>
  Effect.gen(function*() {
    const tally: Tally = { scored: new Map(), invalid: new Set() }
    yield* Stream.runForEach(store.streamPipelines({ state: "succeeded" }), (p) =>
      Effect.gen(function*() {
        const art = yield* store.getArtifact(p.pipelineId, p.nTasksTotal - 1)
        if (Option.isNone(art) || art.value.payload === undefined) return
        const value: unknown = JSON.parse(new TextDecoder().decode(art.value.payload))
        if (isScore(value)) tally.scored.set(p.pipelineId, { gold: value.gold, predicted: value.predicted })
      }))
    yield* Stream.runForEach(store.streamPipelines({ state: "failed" }), (p) =>
      Effect.sync(() => {
        if (p.errorClass === "invalid" && p.failedTask === "label") tally.invalid.add(p.pipelineId)
      }))
    return tally
  })

const confusionOf = (t: Tally): Confusion => {
  let c = emptyConfusion
  for (const s of t.scored.values()) c = addScore(c, s)
  return { ...c, invalid: t.invalid.size }
}

/**
 * Records one settled email (`outcome`: a scored label, or `"invalid"`) in the run's tally and
 * reports the run-scope metrics `evaluated`, `accuracy`, `precision`, `recall`, `f1` and
 * `invalid` through the runner (`ctx.reportMetric` with `scope: "run"`; the task's store is
 * read-only). The first call of a run also counts what the store already holds
 * (succeeded spam-eval pipelines and label failures of class `invalid`), so a resumed run's
 * figures cover the whole job. Counting is by pipeline id, so an email is never counted twice.
 */
const recordOutcome = (
  ctx: Pick<TaskContext, "runId" | "pipelineId" | "store" | "reportMetric">,
  outcome: { readonly gold: Label; readonly predicted: Label } | "invalid"
) =>
  tallyLock.withPermits(1)(Effect.gen(function*() {
    let tally = tallies.get(ctx.runId)
    if (tally === undefined) {
      tally = yield* seedTally(ctx.store)
      tallies.set(ctx.runId, tally)
    }
    if (outcome === "invalid") {
      tally.invalid.add(ctx.pipelineId)
      tally.scored.delete(ctx.pipelineId)
    } else {
      tally.scored.set(ctx.pipelineId, outcome)
      tally.invalid.delete(ctx.pipelineId)
    }
    const m = metricsOf(confusionOf(tally))
    const put = (name: string, value: number, label: string, display: "number" | "percent") =>
      ctx.reportMetric(name, value, { label, display, scope: "run" })
    yield* put("evaluated", m.evaluated, "evaluated", "number")
    yield* put("accuracy", m.accuracy, "accuracy", "percent")
    yield* put("precision", m.precision, "precision (spam)", "percent")
    yield* put("recall", m.recall, "recall (spam)", "percent")
    yield* put("f1", m.f1, "F1 (spam)", "number")
    yield* put("invalid", m.invalid, "answers with no label", "number")
  }))

/**
 * The `label` task of the config file: as {@link label}, and an answer that names no label is
 * also counted in the run's live metrics (`invalid`) before the task fails with
 * `InvalidLabel` (class `invalid`, not retried). Fails with `StoreUnavailable` when the
 * metrics cannot be written.
 *
 * @since 0.1.0
 * @category tasks
 */
export const liveLabel = Task.make("label", (out: Chat.ChatOutput<PromptRow>, ctx) =>
  Either.match(parseLabel(out.content), {
    onLeft: (e) => Effect.zipRight(recordOutcome(ctx, "invalid"), Effect.fail(e)),
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
 * The `score` task of the config file: as {@link score}, and the scored email updates the
 * run's live metrics (evaluated, accuracy, precision, recall, F1, invalid; run scope, shown by
 * `assay report` and `assay serve`). Fails with `StoreUnavailable` when the metrics cannot be
 * written.
 *
 * @since 0.1.0
 * @category tasks
 */
export const liveScore = Task.make("score", (row: Labelled, ctx) =>
  Effect.as(
    recordOutcome(ctx, { gold: row.gold, predicted: row.predicted }),
    { ...row, correct: row.predicted === row.gold } satisfies Score
  ))
