/**
 * @internal
 *
 * The study file's Schema: one Schema for JSON, TOML, YAML and TypeScript study files
 * (re-exported by `config/Study.ts`).
 */
import { Schema } from "effect"
import * as Study from "../../domain/Study.js"
import * as Suite from "../../domain/Suite.js"
import { SuiteRunSection } from "./suiteSchema.js"

const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optionalWith(s, { exact: true })
const NonEmpty = (what: string) => Schema.String.pipe(Schema.minLength(1)).annotations({ message: () => `must be a non-empty ${what}` })

/**
 * `study`: the study's stable `id` (the rules of a suite id, see `SuiteIdentity.checkId`), the
 * `question` it answers, an optional `hypothesis` and its `type` (`explore` by default).
 *
 * @since 0.6.0
 * @category schemas
 */
export const StudySection = Schema.Struct({
  id: Suite.Id.annotations({ description: "the study's stable id (1-80 ASCII letters, digits, - or _)" }),
  question: NonEmpty("question").annotations({ description: "the question the study answers" }),
  hypothesis: opt(Schema.String),
  type: opt(Study.StudyType)
}).annotations({ identifier: "StudySection" })

/**
 * `protocol`: `experiment`, the base experiment file (relative to the study file): its
 * pipeline, pools and source are what every trial runs.
 *
 * @since 0.6.0
 * @category schemas
 */
export const ProtocolSection = Schema.Struct({
  experiment: NonEmpty("path").annotations({ description: "the base experiment file, relative to the study file" })
}).annotations({ identifier: "ProtocolSection" })

/**
 * `output`: `root`, the study's output directory (relative to the study file; `--output-root`
 * replaces it). Trials share it (a suite's `combined` layout).
 *
 * @since 0.6.0
 * @category schemas
 */
export const StudyOutputSection = Schema.Struct({
  root: opt(NonEmpty("path").annotations({ description: "the output directory, relative to the study file" }))
}).annotations({ identifier: "StudyOutputSection" })

/**
 * `run`: a suite's run fields (no `store`) and `trialConcurrency`, the most trials running at
 * once (default 3).
 *
 * @since 0.6.0
 * @category schemas
 */
export const StudyRunSection = Schema.extend(
  SuiteRunSection,
  Schema.Struct({
    trialConcurrency: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({
      message: () => "must be an integer >= 1",
      description: "the most trials running at once (default 3)"
    }))
  })
).annotations({ identifier: "StudyRunSection" })

/**
 * `estimate`: what the plan's time range assumes for a model call when the model profile
 * gives nothing: `latency` (`{ min, max }` durations) and `requestsPerMinute`.
 *
 * @since 0.6.0
 * @category schemas
 */
export const EstimateSection = Schema.Struct({
  latency: opt(Study.LatencyEstimate),
  requestsPerMinute: opt(Schema.Number.pipe(Schema.finite(), Schema.greaterThan(0)))
}).annotations({ identifier: "EstimateSection" })

/**
 * The study file: `study`, `protocol`, `output`, `run`, `variables`, `baseline` (variable name
 * → its value: the value, the name of a prompt or model, the index or list of a set),
 * `repeats` (>= 1, default 1), `budget`, `limits`, `stop`, `objectives`, `metrics` (declared
 * metrics, see `Study.MetricDecl`), `analysis` (the comparison's sample minimums, level,
 * resamples and seed, see `Study.Analysis`), `estimate`. Its JSON
 * Schema is what `assay schema --study` prints.
 *
 * @since 0.6.0
 * @category schemas
 */
export const StudyFile = Schema.Struct({
  $schema: opt(Schema.String),
  study: StudySection,
  protocol: ProtocolSection,
  output: opt(StudyOutputSection),
  run: opt(StudyRunSection),
  variables: opt(Schema.Array(Study.Variable)),
  baseline: opt(Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
    description: "variable name -> its baseline value (a prompt's or model's name, a set's index or list)"
  })),
  repeats: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({ message: () => "must be an integer >= 1" })),
  budget: opt(Study.Budget),
  limits: opt(Study.Limits),
  stop: opt(Schema.Array(Study.StopCondition)),
  objectives: opt(Schema.Array(Study.Objective)),
  metrics: opt(Schema.Array(Study.MetricDecl)),
  analysis: opt(Study.Analysis),
  estimate: opt(EstimateSection)
}).annotations({ identifier: "AssayStudy" })

/**
 * The study file as written (what `defineStudy` takes): {@link StudyFile}'s encoded side,
 * where an objective may also be a metric's name alone (`objectives: ["accuracy", "costUsd"]`,
 * since 0.15.0), read by the study loader as `{ metric, direction }` in the metric's own
 * direction (a built-in metric's, or the `direction` of its `metrics` entry) before the Schema
 * sees it; a name whose metric declares no direction is refused at `objectives[i]`.
 *
 * @since 0.6.0
 * @category models
 */
export type StudyInput = Omit<typeof StudyFile.Encoded, "objectives"> & {
  readonly objectives?: ReadonlyArray<string | typeof Study.Objective.Encoded>
}

/**
 * The decoded study file.
 *
 * @since 0.6.0
 * @category models
 */
export type StudyFile = typeof StudyFile.Type

/**
 * The identity function that types a TypeScript study file: `export default defineStudy({
 * study: { id, question }, protocol: { experiment: "./experiment.yaml" }, variables: [...] })`.
 * Checking happens when the file is loaded.
 *
 * @since 0.6.0
 * @category constructors
 */
export const defineStudy = (definition: StudyInput): StudyInput => definition
