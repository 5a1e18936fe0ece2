/**
 * The built-in `judge` task: an LLM-as-judge that scores one or more candidates of its input
 * against a versioned rubric, blind (an evaluator), through the `chat` machinery.
 *
 * See `src/tasks/Judge.ts` for the public surface and docs/judge.md for the user guide.
 *
 * @since 0.7.0
 */
import { Chunk, Clock, Duration, Effect, Either, Option, ParseResult, Predicate, Random, Schema } from "effect"
import { ConfigError, type ConfigIssue, ErrorClass, type StoreUnavailable } from "../../domain/Errors.js"
import * as Evaluator from "../../domain/Evaluator.js"
import type * as CallCache from "../../domain/CallCache.js"
import { canonicalJsonUnsafe, digest, type Json } from "../../domain/Json.js"
import type { AcquireError, Selector } from "../../domain/Lease.js"
import * as Task from "../../domain/Task.js"
import type { TaskContext } from "../../domain/TaskContext.js"
import {
  type ChatCompletion,
  ChatError,
  type ChatMessage,
  type ChatOptions,
  clientOf,
  defaultChatRetry,
  endpointFaultClasses,
  endpointKeyOf
} from "./chat.js"

// ---------------------------------------------------------------------------------------------
// Rubric
// ---------------------------------------------------------------------------------------------

const NamePattern = /^[A-Za-z_][A-Za-z0-9_-]*$/

const Name = Schema.String.pipe(Schema.pattern(NamePattern)).annotations({
  message: () => "a name of letters, digits, _ and - that starts with a letter or _"
})

const Finite = Schema.Number.pipe(Schema.finite())

/**
 * A criterion's scale: the lowest and highest score (`max` > `min`; any finite numbers, e.g.
 * `{ min: 1, max: 5 }` or `{ min: 0, max: 1 }`).
 *
 * @since 0.7.0
 * @category schemas
 */
export const Scale = Schema.Struct({ min: Finite, max: Finite }).pipe(
  Schema.filter((s) => s.max > s.min || { path: ["max"], message: `max (${s.max}) must be greater than min (${s.min})` })
).annotations({ identifier: "JudgeScale" })

/**
 * One criterion of a rubric: its `name` (letters, digits, `_`, `-`; the key of its score in
 * the output), an optional `description` shown to the judge, its `scale` and an optional
 * `weight` (> 0, default 1) in the `overall` score.
 *
 * @since 0.7.0
 * @category schemas
 */
export const Criterion = Schema.Struct({
  name: Name,
  description: Schema.optional(Schema.String),
  scale: Scale,
  weight: Schema.optional(Finite.pipe(Schema.positive()))
}).annotations({ identifier: "JudgeCriterion" })

/**
 * A versioned rubric: `id` and `version` (a string or an integer; recorded in every verdict
 * as `rubricVersion`, a string), at least one criterion (unique names) and optional
 * `instructions` added to the judge's system message. Change the version whenever the
 * criteria or instructions change: the verdicts of two versions are not comparable.
 *
 * @since 0.7.0
 * @category schemas
 */
export const Rubric = Schema.Struct({
  id: Schema.NonEmptyTrimmedString,
  version: Schema.Union(Schema.NonEmptyTrimmedString, Schema.Int),
  criteria: Schema.NonEmptyArray(Criterion).pipe(
    Schema.filter((cs) => {
      const seen = new Set<string>()
      for (const [i, c] of cs.entries()) {
        if (seen.has(c.name)) return { path: [i, "name"], message: `duplicate criterion name "${c.name}"` }
        seen.add(c.name)
      }
      return true
    })
  ),
  instructions: Schema.optional(Schema.String)
}).annotations({ identifier: "JudgeRubric" })

/**
 * A rubric as written (see {@link Rubric}).
 *
 * @since 0.7.0
 * @category models
 */
export type RubricInput = Schema.Schema.Encoded<typeof Rubric>

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

const Score = Schema.NullOr(Schema.Number)

/**
 * What the judge was shown, without the text: per candidate in presentation order its
 * `name`, the `label` the judge saw (`A`, `B`, ...), its length in characters and a digest
 * (32 hex) of its text; the same for each context field; `withheld`, the number of values of
 * the shown text that the evaluator redaction replaced by `[withheld]`; and `promptDigest`,
 * the digest of the first request's messages.
 *
 * @since 0.7.0
 * @category schemas
 */
export const EvidenceSummary = Schema.Struct({
  candidates: Schema.Array(Schema.Struct({ name: Schema.String, label: Schema.String, chars: Schema.Int, digest: Schema.String })),
  context: Schema.Array(Schema.Struct({ name: Schema.String, chars: Schema.Int, digest: Schema.String })),
  withheld: Schema.Int,
  promptDigest: Schema.String
}).annotations({ identifier: "JudgeEvidenceSummary" })

/**
 * The verdict the `judge` task returns:
 *
 * - `rubricId`, `rubricVersion`: the rubric used;
 * - `judgeModel`: the model that answered (as the server named it);
 * - `order`: the candidate names in the order they were shown (`order[0]` was "response A");
 * - `scores`: candidate → criterion → score (within the criterion's scale), or `null` when the
 *   judge said the evidence does not allow a judgement;
 * - `overall`: candidate → the weighted mean of its scores normalised to [0, 1]
 *   (`(score − min) / (max − min)`, weights from the rubric, `null` scores left out; `null`
 *   when every score is `null`); computed here, never asked of the model;
 * - `reasons`: candidate → criterion → the judge's reason;
 * - `evidenceSummary`: see {@link EvidenceSummary};
 * - `formatRepair`: `null`, or what was wrong with the first answer when a repair request was
 *   needed (then the verdict comes from the second answer).
 *
 * @since 0.7.0
 * @category schemas
 */
export const JudgeOutput = Schema.Struct({
  rubricId: Schema.String,
  rubricVersion: Schema.String,
  judgeModel: Schema.String,
  order: Schema.Array(Schema.String),
  scores: Schema.Record({ key: Schema.String, value: Schema.Record({ key: Schema.String, value: Score }) }),
  overall: Schema.Record({ key: Schema.String, value: Score }),
  reasons: Schema.Record({ key: Schema.String, value: Schema.Record({ key: Schema.String, value: Schema.String }) }),
  evidenceSummary: EvidenceSummary,
  formatRepair: Schema.NullOr(Schema.String)
}).annotations({ identifier: "JudgeOutput" })

/**
 * The type of a verdict (see the {@link JudgeOutput} Schema).
 *
 * @since 0.7.0
 * @category models
 */
export type JudgeOutput = typeof JudgeOutput.Type

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * A judge that could not give a verdict: its input lacks a candidate or context field
 * (`errorClass: "invalid"`), its answer was still malformed after the one repair request
 * (`"invalid"`, with `formatRepair` saying what was wrong with the first answer), or the task
 * was run without the evaluator's blindness (`"fatal"`). Failures of the model calls themselves
 * are {@link ChatError}s.
 *
 * @since 0.7.0
 * @category errors
 */
export class JudgeError extends Schema.TaggedError<JudgeError>("assay/JudgeError")("JudgeError", {
  message: Schema.String,
  errorClass: ErrorClass,
  formatRepair: Schema.optional(Schema.NullOr(Schema.String))
}) {}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link judge}:
 *
 * - `rubric` (required): see {@link Rubric};
 * - `candidates` (required): what to judge, as candidate name → field path of the input
 *   (dot-separated, a number indexes a list, `"."` is the whole input), e.g.
 *   `{ answer: "content" }`; a single path string is one candidate named `answer`. At most 26.
 *   Names are never shown to the judge: it sees "response A", "response B", ... in a random
 *   order;
 * - `context`: evidence shown beside the candidates, as name → field path (e.g. `{ question:
 *   "input.prompt", reference: "gold" }`); the names are shown to the judge;
 * - `metric`: a metric name; when given, each verdict reports every candidate's `overall` score
 *   as a pipeline-scope metric (`ctx.reportMetric`): named `metric` itself with one candidate,
 *   `metric.NAME` per candidate with several (a `null` overall is not reported). A study's
 *   trial metric is then the mean over its pipelines (docs/studies.md);
 * - `model`, `temperature` (default 0), `maxTokens` (default 1000), `requestTimeout` (default
 *   60 s), `jsonMode` (send `response_format: { type: "json_object" }`, default false);
 * - `resource` (pool, default `"llm"`), `selector`, `algorithm`, `name` (default `"judge"`),
 *   `retry` (default: the chat task's), `timeout`, `version`, `config`: as for `chat`;
 * - `cache` (since 0.15.0): the call cache of this judge, as for `chat` (`true`, a mode or
 *   `{ mode, ttl }`; absent: the run's setting, `--cache` / `run.cache`, off by default). A
 *   verdict is stored whole (a format repair included: one entry for its two calls) and
 *   served for the same request in the same place (the pipeline's repeat, the visit, the study
 *   variant); see {@link judge} for its key.
 *
 * @since 0.7.0
 * @category models
 */
export interface JudgeOptions extends Pick<ChatOptions, (typeof sharedChatOptions)[number]> {
  readonly rubric: RubricInput
  readonly candidates: string | Readonly<Record<string, string>>
  readonly context?: Readonly<Record<string, string>> | undefined
  readonly metric?: string | undefined
  readonly jsonMode?: boolean | undefined
}

/** The options a judge takes from `chat` with the same meaning (a judge call is a chat call). */
const sharedChatOptions = [
  "name",
  "retry",
  "timeout",
  "version",
  "config",
  "resource",
  "selector",
  "algorithm",
  "model",
  "temperature",
  "maxTokens",
  "requestTimeout",
  "cache"
] as const

const knownOptions: ReadonlyArray<string> = ["rubric", "candidates", "context", "metric", "jsonMode", ...sharedChatOptions]

/**
 * The option keys of the `judge` task (what `assay plugins` lists in its signature).
 *
 * @internal
 */
export const judgeOptionNames: ReadonlyArray<string> = knownOptions

/** `rubric.criteria[0].scale.max` from a parse issue's path. */
const pathText = (base: string, path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>((acc, k) => typeof k === "number" ? `${acc}[${k}]` : `${acc}.${String(k)}`, base)

const issuesOf = (base: string, e: ParseResult.ParseError): Array<ConfigIssue> =>
  ParseResult.ArrayFormatter.formatErrorSync(e).map((i) => ({ path: pathText(base, i.path), message: i.message }))

const checkPath = (p: unknown, at: string, issues: Array<ConfigIssue>): p is string => {
  if (typeof p !== "string" || p.trim() === "") {
    issues.push({ path: at, message: "a field path (dot-separated, \".\" for the whole input) is required" })
    return false
  }
  if (p !== "." && p.split(".").some((s) => s === "")) {
    issues.push({ path: at, message: `"${p}" has an empty segment`, suggestion: "write a.b.c, or \".\" for the whole input" })
    return false
  }
  return true
}

const pathsOf = (
  value: unknown,
  at: string,
  issues: Array<ConfigIssue>,
  max: number
): Array<readonly [string, string]> => {
  if (!Predicate.isObject(value) || Array.isArray(value)) {
    issues.push({ path: at, message: "must be an object of name -> field path", suggestion: `${at.split(".").pop()}: { answer: content }` })
    return []
  }
  const out: Array<readonly [string, string]> = []
  for (const [name, p] of Object.entries(value)) {
    if (!NamePattern.test(name)) {
      issues.push({ path: `${at}.${name}`, message: `"${name}" is not a name (letters, digits, _ and -, starting with a letter or _)` })
    } else if (checkPath(p, `${at}.${name}`, issues)) out.push([name, p])
  }
  if (out.length === 0 && issues.length === 0) issues.push({ path: at, message: "needs at least one entry" })
  if (out.length > max) issues.push({ path: at, message: `at most ${max} entries, got ${out.length}` })
  return out
}

/** The value at a dot path (`"."`: the whole value); `undefined` when absent. */
const valueAt = (input: unknown, p: string): unknown => {
  if (p === ".") return input
  let cur: unknown = input
  for (const k of p.split(".")) {
    if (Array.isArray(cur) && /^\d+$/.test(k)) cur = cur[Number(k)]
    else if (Predicate.isObject(cur) && !Array.isArray(cur)) cur = (cur as Record<string, unknown>)[k]
    else return undefined
  }
  return cur
}

const textOf = (u: unknown): string => typeof u === "string" ? u : JSON.stringify(u, null, 2) ?? String(u)

// ---------------------------------------------------------------------------------------------
// The prompt and the answer
// ---------------------------------------------------------------------------------------------

/**
 * The labels the judge sees, in presentation order: `A`, `B`, ... (at most 26).
 *
 * @since 0.7.0
 * @category prompt
 */
export const labelAt = (i: number): string => String.fromCharCode(65 + i)

type Rubric = typeof Rubric.Type

const systemPrompt = (rubric: Rubric): string =>
  [
    "You are an impartial evaluator. Score each response against the rubric.",
    "Judge only the text of the responses and the evidence given. Nothing tells you who or what wrote a response, and the order in which the responses are shown means nothing.",
    "When the evidence does not allow a judgement on a criterion (for example factual correctness without a reference), give null for that score and say so in its reason; never guess.",
    ...(rubric.instructions === undefined || rubric.instructions.trim() === "" ? [] : [rubric.instructions.trim()])
  ].join("\n")

/**
 * The user message of a judge request: the rubric as JSON between `--- rubric ---` and
 * `--- end of rubric ---`, each context field between `--- evidence: NAME ---` and
 * `--- end of evidence: NAME ---`, each candidate between `--- response L ---` and
 * `--- end of response L ---` (L its label), then the JSON shape to answer with. The mock
 * server's judge rule reads these markers.
 *
 * @since 0.7.0
 * @category prompt
 */
export const userPrompt = (
  rubric: Rubric,
  context: ReadonlyArray<{ readonly name: string; readonly text: string }>,
  shown: ReadonlyArray<{ readonly label: string; readonly text: string }>
): string => {
  const rubricJson = JSON.stringify({
    id: rubric.id,
    version: String(rubric.version),
    criteria: rubric.criteria.map((c) => ({
      name: c.name,
      ...(c.description === undefined ? {} : { description: c.description }),
      scale: { min: c.scale.min, max: c.scale.max }
    }))
  })
  const scoreShape = rubric.criteria.map((c) => `"${c.name}": <a number from ${c.scale.min} to ${c.scale.max}, or null>`).join(", ")
  const reasonShape = rubric.criteria.map((c) => `"${c.name}": "<why, in one or two sentences>"`).join(", ")
  const shape = `{"responses": {${shown.map((s) => `"${s.label}": {"scores": {${scoreShape}}, "reasons": {${reasonShape}}}`).join(", ")}}}`
  return [
    "--- rubric ---",
    rubricJson,
    "--- end of rubric ---",
    "",
    ...context.flatMap((c) => [`--- evidence: ${c.name} ---`, c.text, `--- end of evidence: ${c.name} ---`, ""]),
    ...shown.flatMap((s) => [`--- response ${s.label} ---`, s.text, `--- end of response ${s.label} ---`, ""]),
    `Score ${shown.length === 1 ? "the response" : `each of the ${shown.length} responses`} on every criterion. Answer with one JSON object and nothing else, of this shape:`,
    shape
  ].join("\n")
}

const repairPrompt = (problem: string): string =>
  `Your answer could not be used: ${problem}. Answer again with only the JSON object of the shape asked for, and nothing else.`

/** The Schema of an answer for these labels and criteria (ranges checked, extra keys ignored). */
const answerSchema = (labels: ReadonlyArray<string>, rubric: Rubric) => {
  const scores = Schema.Struct(Object.fromEntries(rubric.criteria.map((c) => [
    c.name,
    Schema.NullOr(Schema.Number.pipe(Schema.between(c.scale.min, c.scale.max)))
  ])))
  const reasons = Schema.Struct(Object.fromEntries(rubric.criteria.map((c) => [c.name, Schema.String])))
  const response = Schema.Struct({ scores, reasons })
  return Schema.parseJson(Schema.Struct({ responses: Schema.Struct(Object.fromEntries(labels.map((l) => [l, response]))) }))
}

interface Answer {
  readonly responses: Readonly<
    Record<string, {
      readonly scores: Readonly<Record<string, number | null>>
      readonly reasons: Readonly<Record<string, string>>
    }>
  >
}

/** A fenced answer (```json ... ```) is read without its fence; nothing else is forgiven. */
const unfenced = (s: string): string => {
  const m = /^\s*```[A-Za-z]*[ \t]*\r?\n([\s\S]*?)\r?\n?[ \t]*```\s*$/.exec(s)
  return m === null ? s : m[1]!
}

const excerpt = (s: string, n = 200): string => (s.length <= n ? s : `${s.slice(0, n)}…`)

const problemOf = (e: ParseResult.ParseError): string => {
  const issues = ParseResult.ArrayFormatter.formatErrorSync(e)
  const shown = issues.slice(0, 5).map((i) => `${i.path.length === 0 ? "the answer" : i.path.join(".")}: ${i.message}`)
  return issues.length > 5 ? `${shown.join("; ")}; and ${issues.length - 5} more` : shown.join("; ")
}

// ---------------------------------------------------------------------------------------------
// The task
// ---------------------------------------------------------------------------------------------

/**
 * The seed of a judge's candidate order: a 32-bit number from the pipeline id, the task's
 * position and its visit (`pipelineId:seq#visit:judge-order`), not the attempt, so a retry
 * of the same visit shows the same order and a revisit (a rewind) draws anew.
 */
const orderSeed = (ctx: { readonly pipelineId: string; readonly seq: number; readonly visit: number }): number =>
  Number.parseInt(digest(`${ctx.pipelineId}:${ctx.seq}#${ctx.visit}:judge-order`).slice(0, 8), 16) >>> 0

/**
 * The built-in `judge` task (always an evaluator, so the runner runs it blind): reads the
 * candidates (and context) at their field paths of the input, shuffles the candidates with
 * Effect's `Random` seeded from the pipeline id, the task's position and its visit (not the
 * attempt: a retry shows the same order, recorded), shows them to the judge model as "response A", "response B", ...
 * with the rubric, and asks for one JSON object of scores and reasons. The answer is decoded
 * with a Schema built from the rubric (every label, every criterion, scores within their
 * scales or `null`, a reason per criterion; a ```json fence is tolerated). A malformed answer
 * gets one repair request (the conversation with the bad answer and what was wrong with it),
 * recorded in `formatRepair`; a second malformed answer fails with a {@link JudgeError} of
 * class `invalid` (not retried by the default policy).
 *
 * With `metric`, the overall scores are reported as pipeline metrics (a store failure there
 * fails the attempt with `StoreUnavailable`).
 *
 * Each model call leases its own resource of the pool (so a repair counts as a call in usage
 * meters) and reports latency and token usage to it, exactly as `chat` does; endpoint faults
 * (rate_limit, upstream, connection, timeout) fail the attempt with a {@link ChatError} and
 * are retried by the retry policy.
 *
 * Cached like `chat` (`cache` option, else the run's setting): the key is the exact request,
 * the public identity of the pool's endpoints, the model, temperature, maxTokens, jsonMode, the
 * selector, the rubric's id, version and content digest, the candidates' seeded order and the
 * messages (rubric, evidence, candidates, as redacted for the evaluator) with their digest,
 * in the namespace of the repeat, the visit and the study variant; a verdict (a format repair
 * included) is stored and served whole, and a served verdict reports its `metric`
 * (`onCacheHit`).
 *
 * Identity: `parameters` records the rubric (as decoded), candidates, context, model,
 * temperature, maxTokens, requestTimeoutMs, jsonMode, metric and selector; the task is an evaluator
 * (`evaluator: true` in its fingerprint).
 *
 * Throws a {@link ConfigError} (with field paths under the options) for a missing or malformed
 * rubric, missing or malformed candidates or context, unknown option keys, a temperature outside
 * [0, 2], a bad `maxTokens` or duration, or a `where` selector.
 *
 * @since 0.7.0
 * @category tasks
 */
export const judge = <In = unknown>(
  options: JudgeOptions
): Task.Task<In, JudgeOutput, JudgeError | ChatError | AcquireError | StoreUnavailable> => {
  const issues: Array<ConfigIssue> = []
  const o = (Predicate.isObject(options) ? options : {}) as Partial<JudgeOptions>
  for (const key of Object.keys(o)) {
    if (!knownOptions.includes(key)) {
      issues.push({ path: key, message: `unknown option "${key}"`, suggestion: `known options: ${knownOptions.join(", ")}` })
    }
  }
  let rubric: Rubric | undefined
  if (o.rubric === undefined) {
    issues.push({
      path: "rubric",
      message: "the judge needs a rubric",
      suggestion: "rubric: { id: helpfulness, version: 1, criteria: [{ name: correct, scale: { min: 1, max: 5 } }] }"
    })
  } else {
    const decoded = Schema.decodeUnknownEither(Rubric, { errors: "all", onExcessProperty: "error" })(o.rubric)
    if (Either.isLeft(decoded)) issues.push(...issuesOf("rubric", decoded.left))
    else rubric = decoded.right
  }
  const candidates = o.candidates === undefined
    ? (issues.push({ path: "candidates", message: "the judge needs the candidates to score", suggestion: "candidates: { answer: content }" }), [])
    : typeof o.candidates === "string"
    ? (checkPath(o.candidates, "candidates", issues) ? [["answer", o.candidates] as const] : [])
    : pathsOf(o.candidates, "candidates", issues, 26)
  const context = o.context === undefined ? [] : pathsOf(o.context, "context", issues, 100)
  if (o.metric !== undefined && (typeof o.metric !== "string" || o.metric.trim() === "")) {
    issues.push({ path: "metric", message: "metric must be a non-empty string (a metric name): for example metric: judgeScore, which a study's objectives and stop conditions can then name" })
  }
  if (o.name !== undefined && (typeof o.name !== "string" || o.name.trim() === "")) {
    issues.push({ path: "name", message: "name must be a non-empty string" })
  }
  const t = o.temperature ?? 0
  if (!(typeof t === "number" && t >= 0 && t <= 2)) {
    issues.push({ path: "temperature", message: `temperature must be a number in [0, 2], got ${String(t)}` })
  }
  const maxTokens = o.maxTokens ?? 1000
  if (!(Number.isInteger(maxTokens) && maxTokens > 0)) {
    issues.push({ path: "maxTokens", message: `maxTokens must be a positive integer, got ${String(maxTokens)}` })
  }
  if (o.jsonMode !== undefined && typeof o.jsonMode !== "boolean") {
    issues.push({ path: "jsonMode", message: "jsonMode must be true or false" })
  }
  let requestTimeoutMs = 60_000
  if (o.requestTimeout !== undefined) {
    const d = Duration.decodeUnknown(o.requestTimeout)
    if (Option.isNone(d) || !Duration.isFinite(d.value) || Duration.toMillis(d.value) <= 0) {
      issues.push({ path: "requestTimeout", message: "requestTimeout must be a finite, positive duration" })
    } else requestTimeoutMs = Duration.toMillis(d.value)
  }
  const selector = o.selector ?? {}
  if ("where" in selector) {
    issues.push({ path: "selector.where", message: "a where predicate cannot be part of the task identity" })
  }
  if (issues.length > 0 || rubric === undefined) {
    throw new ConfigError({ message: `judge: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`, issues })
  }
  const r = rubric
  const selectorJson: Record<string, unknown> = {}
  if (selector.id !== undefined) selectorJson["id"] = selector.id
  if (selector.kind !== undefined) selectorJson["kind"] = selector.kind
  if (selector.tags !== undefined) selectorJson["tags"] = selector.tags
  if (selector.options !== undefined) selectorJson["options"] = selector.options
  const acquireOptions: Selector = { ...selectorJson }
  const model = o.model
  const jsonMode = o.jsonMode ?? false
  const rubricVersion = String(r.version)
  const names = candidates.map(([n]) => n)
  const labels = names.map((_, i) => labelAt(i))
  const decodeAnswer = Schema.decodeUnknownEither(answerSchema(labels, r), { errors: "all" }) as (
    u: unknown
  ) => Either.Either<Answer, ParseResult.ParseError>
  const parameters = {
    rubric: Schema.encodeSync(Rubric)(r),
    candidates: Object.fromEntries(candidates),
    context: Object.fromEntries(context),
    model: model ?? null,
    temperature: t,
    maxTokens,
    requestTimeoutMs,
    jsonMode,
    metric: o.metric ?? null,
    selector: selectorJson
  } as unknown as Task.JsonObject
  const base: Task.BaseOptions = {
    resource: o.resource ?? "llm",
    retry: o.retry ?? defaultChatRetry,
    parameters,
    codeDigest: "assay.judge/v1",
    evaluator: true,
    ...(o.timeout !== undefined ? { timeout: o.timeout } : {}),
    ...(o.version !== undefined ? { version: o.version } : {}),
    ...(o.config !== undefined ? { config: o.config } : {}),
    ...(o.algorithm !== undefined ? { algorithm: o.algorithm } : {}),
    // cacheable as chat is: off unless the task or the run turns the cache on
    cache: o.cache ?? { mode: undefined },
    cacheKey: (input, env) => {
      // the request depends on where it is made (the seeded order): no place, no key
      const place = env.place
      if (place === undefined) return Effect.succeed(undefined)
      const pool = o.resource ?? "llm"
      return Effect.flatMap(prepare(input, place), (prepared) =>
        Either.isLeft(prepared)
          ? Effect.succeed(undefined) // the body fails it: nothing to key
          : Effect.map(env.resourceOptions(pool), (resources) => {
            const { messages, order } = prepared.right
            const sent = messages.map((m) => ({ role: m.role, content: m.content }))
            return {
              kind: "judge",
              code: "assay.judge/v1",
              pool,
              endpoints: Array.from(new Set(resources.map(endpointKeyOf))).sort(),
              model: model ?? null,
              temperature: t,
              maxTokens,
              jsonMode,
              selector: selectorJson as Task.JsonObject,
              rubric: { id: r.id, version: rubricVersion, digest: rubricDigest },
              order: [...order],
              evidence: digest(canonicalJsonUnsafe(sent)),
              messages: sent
            }
          }))
    },
    // a served verdict reports its metrics as the body would have
    onCacheHit: (output, hit) => o.metric === undefined ? Effect.void : reportOverall(output, hit.reportMetric)
  }
  const taskName = o.name ?? "judge"
  const rubricDigest = digest(canonicalJsonUnsafe(parameters["rubric"] as Json))

  /** Reports each candidate's `overall` as a pipeline metric (see `metric`). */
  function reportOverall(
    verdict: unknown,
    reportMetric: TaskContext["reportMetric"]
  ): Effect.Effect<void, StoreUnavailable | ConfigError> {
    const metric = o.metric
    const overall = Predicate.isObject(verdict) ? (verdict as { readonly overall?: unknown }).overall : undefined
    if (metric === undefined || !Predicate.isObject(overall)) return Effect.void
    return Effect.forEach(names, (name) => {
      const v = (overall as Record<string, unknown>)[name]
      return typeof v === "number"
        ? reportMetric(names.length === 1 ? metric : `${metric}.${name}`, v, { display: "percent" })
        : Effect.void
    }, { discard: true })
  }

  /**
   * What the judge is shown for `input` at `place`: the context and candidate values (a
   * missing one: the message of the attempt's failure), the candidates in their seeded order
   * and the two messages of the request. Used by the body and by the cache key alike.
   */
  function prepare(input: unknown, place: CallCache.CachePlace) {
    return Effect.gen(function*() {
      const read = (kind: string, name: string, p: string) => {
        const v = valueAt(input, p)
        return v === undefined || v === null
          ? Either.left(`${taskName}: ${kind} "${name}": no value at the input's path "${p}"`)
          : Either.right({ name, value: v, text: textOf(v) })
      }
      const shownContext: Array<{ readonly name: string; readonly value: unknown; readonly text: string }> = []
      for (const [name, p] of context) {
        const v = read("context", name, p)
        if (Either.isLeft(v)) return Either.left(v.left)
        shownContext.push(v.right)
      }
      const values = new Map<string, { readonly value: unknown; readonly text: string }>()
      for (const [name, p] of candidates) {
        const v = read("candidate", name, p)
        if (Either.isLeft(v)) return Either.left(v.left)
        values.set(name, v.right)
      }
      // the order derives from the pipeline and the visit, never the attempt: a retried
      // attempt shows the same order (a blind, reproducible judge; tester16c F6)
      const order = Chunk.toReadonlyArray(yield* Effect.withRandom(Random.shuffle(names), Random.make(orderSeed(place))))
      const shown = order.map((name, i) => ({ name, label: labels[i]!, ...values.get(name)! }))
      const messages: ReadonlyArray<ChatMessage> = [
        { role: "system", content: systemPrompt(r) },
        { role: "user", content: userPrompt(r, shownContext, shown) }
      ]
      return Either.right({ order, shown, shownContext, messages })
    })
  }

  /** One completion on its own lease, reported to it as `chat` reports. */
  const call = (ctx: TaskContext, messages: ReadonlyArray<ChatMessage>) =>
    Effect.scoped(Effect.gen(function*() {
      const lease = yield* ctx.acquire(acquireOptions)
      const client = yield* clientOf(lease)
      const started = yield* Clock.currentTimeMillis
      const result = yield* Effect.either(client.complete({
        messages,
        model,
        temperature: t,
        maxTokens,
        timeoutMs: requestTimeoutMs,
        ...(jsonMode ? { extraBody: { response_format: { type: "json_object" } } } : {})
      }))
      if (Either.isLeft(result)) {
        const error = result.left
        const latencyMs = (yield* Clock.currentTimeMillis) - started
        yield* lease.report(endpointFaultClasses.has(error.errorClass) ? { ok: false, latencyMs, error } : { latencyMs })
        return yield* error
      }
      const c: ChatCompletion = result.right
      yield* lease.report({
        ok: true,
        latencyMs: c.latencyMs,
        usage: { tokens: c.usage.totalTokens, promptTokens: c.usage.promptTokens, completionTokens: c.usage.completionTokens },
        // token and cost accounting (see `Pricing`)
        model: c.model,
        ...(c.usage.estimated === true ? { estimated: true } : {}),
        ...(c.usage.costUsd !== undefined ? { costUsd: c.usage.costUsd } : {}),
        ...(c.rateLimit !== undefined ? { rateLimit: c.rateLimit } : {})
      })
      return c
    }))

  return Task.make(taskName, base, (input: In, ctx) =>
    Effect.gen(function*() {
      if (!Evaluator.isBlind(ctx)) {
        return yield* new JudgeError({
          message: `${taskName}: the judge runs only as an evaluator (evaluator: true), blind to the variant`,
          errorClass: "fatal"
        })
      }
      const prepared = yield* prepare(input, ctx)
      if (Either.isLeft(prepared)) return yield* new JudgeError({ message: prepared.left, errorClass: "invalid" })
      const { messages, order, shown, shownContext } = prepared.right
      const labelToName = new Map(shown.map((s) => [s.label, s.name]))
      const first = yield* call(ctx, messages)
      let answered = first
      let formatRepair: string | null = null
      let decoded = decodeAnswer(unfenced(first.content))
      if (Either.isLeft(decoded)) {
        const problem = problemOf(decoded.left)
        formatRepair = `${problem} (first answer: ${JSON.stringify(excerpt(first.content))})`
        const second = yield* call(ctx, [
          ...messages,
          { role: "assistant", content: first.content },
          { role: "user", content: repairPrompt(problem) }
        ])
        decoded = decodeAnswer(unfenced(second.content))
        if (Either.isLeft(decoded)) {
          return yield* new JudgeError({
            message: `${taskName}: the judge's answer was malformed again after one repair request: ${
              problemOf(decoded.left)
            } (second answer: ${JSON.stringify(excerpt(second.content))}); first: ${formatRepair}`,
            errorClass: "invalid",
            formatRepair
          })
        }
        answered = second
      }
      const answer = decoded.right
      const scores: Record<string, Record<string, number | null>> = {}
      const reasons: Record<string, Record<string, string>> = {}
      const overall: Record<string, number | null> = {}
      for (const [label, name] of labelToName) {
        const a = answer.responses[label]!
        const s: Record<string, number | null> = {}
        const why: Record<string, string> = {}
        let sum = 0
        let weights = 0
        for (const c of r.criteria) {
          const v = a.scores[c.name] ?? null
          s[c.name] = v
          why[c.name] = a.reasons[c.name] ?? ""
          if (v !== null) {
            const w = c.weight ?? 1
            sum += w * ((v - c.scale.min) / (c.scale.max - c.scale.min))
            weights += w
          }
        }
        scores[name] = s
        reasons[name] = why
        overall[name] = weights === 0 ? null : sum / weights
      }
      yield* reportOverall({ overall }, ctx.reportMetric)
      const output: JudgeOutput = {
        rubricId: r.id,
        rubricVersion,
        judgeModel: answered.model !== "" ? answered.model : model ?? "",
        order,
        scores,
        overall,
        reasons,
        evidenceSummary: {
          candidates: shown.map((s) => ({ name: s.name, label: s.label, chars: s.text.length, digest: digest(s.text) })),
          context: shownContext.map((c) => ({ name: c.name, chars: c.text.length, digest: digest(c.text) })),
          withheld: shown.reduce((n, s) => n + Evaluator.countWithheld(s.value), 0) +
            shownContext.reduce((n, c) => n + Evaluator.countWithheld(c.value), 0),
          promptDigest: digest(canonicalJsonUnsafe(messages))
        },
        formatRepair
      }
      return output
    }))
}
