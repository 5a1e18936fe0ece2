/**
 * The built-in `judge` task: an LLM-as-judge that scores one or more candidates of its input
 * against a versioned rubric, through the same machinery as `chat` (a leased resource of a
 * pool, default `"llm"`; retries; latency and token usage reported to each lease).
 *
 * **Always an evaluator.** The runner runs it blind (`Evaluator.ts`): no study variables, no
 * member or trial labels, no store in its context, and the trial's variable values redacted
 * from its input. Candidate names are never shown to the model: it sees "response A",
 * "response B", ... in an order drawn with Effect's `Random` seeded from the pipeline id and
 * the visit (not the attempt: a retry shows the same order), and the order used is recorded.
 *
 * **Recorded.** Every verdict holds the rubric id and version, the judge model, the order, the
 * sub-scores, the overall score, the reasons, a summary of the evidence shown (lengths and
 * digests) and the format repair, if one was needed (a malformed answer gets one repair
 * request; a second one fails with `JudgeError`, class `invalid`).
 *
 * **Cached like `chat`.** With the call cache on (its `cache` option, `--cache`, `run.cache`) a
 * verdict is stored whole and served for the same request (rubric id, version and content,
 * model, sampling options, candidates' order, evidence) in the same place (repeat, visit,
 * study variant); see docs/judge.md, "The call cache".
 *
 * **Never overrides a deterministic failure.** A pipeline is a chain: a deterministic check
 * that fails its task fails the pipeline, and the judge after it never runs; the judge's
 * output carries no success flag of its own.
 *
 * See docs/judge.md.
 *
 * @since 0.7.0
 */

// The implementation is in internal/judge.ts; this module is the public surface.
export {
  Criterion,
  EvidenceSummary,
  judge,
  JudgeError,
  JudgeOutput,
  labelAt,
  Rubric,
  Scale,
  userPrompt
} from "./internal/judge.js"
export type { JudgeOptions, RubricInput } from "./internal/judge.js"
