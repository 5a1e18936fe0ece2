/**
 * The declarative experiment file: one Schema for JSON, TOML, YAML and TypeScript
 * experiments (camelCase keys), with the sections `run`, `pools`, `pipeline`, `source`,
 * `plugins` and `pricing` (model name → `{ inputPer1M, outputPer1M }`, USD per 1,000,000
 * tokens; see `Pricing`).
 *
 * A task entry may be `use: fanout` with nested task entries under `tasks` (recursively, see
 * {@link TaskSection}); the loader builds it with `Fanout.fanout`.
 *
 * The Schema only describes shapes (types, ranges, unknown keys). Cross-references (a task's
 * pool exists, an algorithm name resolves, a `use:` target exists) are checked by the loader
 * in `config/Experiment.ts` (code in `config/internal/`), which reports both kinds of problems together.
 *
 * Durations are strings with a unit (`"500 millis"`, `"30 seconds"`); a bare number is refused
 * with a hint (see {@link DurationFromString}).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { PriceTableSchema, ResourcePricingSchema } from "../domain/Pricing.js"
import { DurationFromString, RetryPolicyFromConfig } from "../domain/RetryPolicy.js"
import * as RunConfig from "../domain/RunConfig.js"
import { handoffBudgetMessage } from "../domain/internal/handoffBudget.js"
import { isTask } from "../domain/Task.js"
import type * as Task from "../domain/Task.js"

const PositiveInt = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)).annotations({
  message: () => "must be an integer >= 1"
})
const JsonRecord = Schema.Record({ key: Schema.String, value: Schema.Unknown })
const opt = <S extends Schema.Schema.Any>(s: S) => Schema.optionalWith(s, { exact: true })

/**
 * An acquire algorithm in a config file: a name (`"backoff"`) or `{ name, ...options }`
 * (options are checked against the algorithm by the loader).
 *
 * @since 0.1.0
 * @category schemas
 */
export const AlgorithmSection = Schema.Union(
  Schema.String,
  Schema.Struct({ name: Schema.String }, JsonRecord)
).annotations({ identifier: "Algorithm", description: "an algorithm name or { name, ...options }" })

/**
 * The `run` section: every `RunConfig` field (durations with a unit). Declared once, in
 * `domain/RunConfig.ts`, where the runner's `RunConfigInput` is derived from the same fields.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunSection = RunConfig.RunSection

/**
 * A quota window of a resource (`quotas:` of a resource entry): at most `limit` of `metric`
 * (default `"requests"`) per `window` (a duration with a unit), with an optional `estimate`
 * charged before the real count is known. Enforced by the cluster engine's global pools only
 * (see `Resource.Quota`).
 *
 * @since 0.8.0
 * @category schemas
 */
export const QuotaSection = Schema.Struct({
  metric: opt(Schema.NonEmptyString),
  limit: Schema.Number.pipe(Schema.finite(), Schema.greaterThan(0)).annotations({ message: () => "must be a number > 0" }),
  window: DurationFromString,
  estimate: opt(Schema.Number.pipe(Schema.finite(), Schema.greaterThanOrEqualTo(0)).annotations({ message: () => "must be a number >= 0" }))
}).annotations({ identifier: "QuotaSection" })

/**
 * One resource of a pool. Fields not given take the pool's defaults.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ResourceSection = Schema.Struct({
  id: opt(Schema.String),
  kind: opt(Schema.String),
  capacity: opt(PositiveInt),
  options: opt(JsonRecord),
  tags: opt(Schema.Record({ key: Schema.String, value: Schema.String })),
  degradeAfter: opt(PositiveInt),
  deadAfter: opt(PositiveInt),
  cooldown: opt(DurationFromString),
  /** The resource's own price of model calls (wins over the experiment's `pricing`; see `Pricing`). */
  pricing: opt(ResourcePricingSchema),
  /** Quota windows, enforced by the cluster engine's global pools (see {@link QuotaSection}). */
  quotas: opt(Schema.Array(QuotaSection))
}).annotations({ identifier: "ResourceSection" })

/**
 * One pool: its default algorithm, defaults for its resources, and the resources.
 *
 * @since 0.1.0
 * @category schemas
 */
export const PoolSection = Schema.Struct({
  kind: opt(Schema.String),
  algorithm: opt(AlgorithmSection),
  capacity: opt(PositiveInt),
  degradeAfter: opt(PositiveInt),
  deadAfter: opt(PositiveInt),
  cooldown: opt(DurationFromString),
  deadlockWarn: opt(DurationFromString),
  resources: Schema.Array(ResourceSection)
}).annotations({ identifier: "PoolSection" })

/** The fields every task entry has besides `use`, `onError` and `tasks`. */
const entryFields = {
  name: opt(Schema.String),
  args: opt(Schema.Array(Schema.Unknown)),
  options: opt(JsonRecord),
  resource: opt(Schema.NullOr(Schema.String)),
  algorithm: opt(Schema.NullOr(AlgorithmSection)),
  timeout: opt(Schema.NullOr(DurationFromString)),
  retry: opt(RetryPolicyFromConfig),
  config: opt(JsonRecord),
  version: opt(Schema.NullOr(Schema.String)),
  evaluator: opt(Schema.Boolean.annotations({
    description: "run the task blind: no study variables or member labels in its context, its input redacted (docs/judge.md)"
  }))
}

/**
 * The `use:` name that builds a fanout group from a task entry's nested `tasks` (see
 * {@link TaskSection}).
 *
 * @since 0.1.0
 * @category constants
 */
export const FANOUT = "fanout"

/**
 * What a fanout group does when a branch fails (`onError:` of a `use: fanout` entry): the
 * same values as `Fanout.OnError` (`"raise"`, the default, or `"collect"`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const OnErrorSection = Schema.Literal("raise", "collect").annotations({
  identifier: "OnError",
  description: "what a fanout group does when a branch fails: raise (default) or collect",
  message: () => ({ message: "onError must be \"raise\" or \"collect\"", override: true })
})

/**
 * One task entry of `pipeline.tasks`, decoded, with `use:` of type `Use`:
 *
 * - `use`, `name`, `args`, `options`, `resource`, `algorithm`, `timeout` (a `Duration`),
 *   `retry` (a `RetryPolicy`), `config`, `version`: as for every task;
 * - `evaluator`: `true` runs the task blind (`Task.Options.evaluator`; see `Evaluator.ts`);
 * - `onError` and `tasks`: only for `use: fanout` (the loader refuses them elsewhere);
 *   `tasks` holds the branches, each a task entry of the same shape (recursively).
 *
 * @since 0.1.0
 * @category models
 */
export type TaskSection<Use> = Schema.Struct.Type<typeof entryFields> & {
  readonly use: Use
  readonly onError?: "raise" | "collect"
  readonly tasks?: readonly [TaskSection<Use>, ...Array<TaskSection<Use>>]
}

/**
 * The encoded (as written) form of {@link TaskSection}: durations are strings with a unit
 * and `retry` is the config object.
 *
 * @since 0.1.0
 * @category models
 */
export type TaskSectionEncoded<Use> = Schema.Struct.Encoded<typeof entryFields> & {
  readonly use: Use
  readonly onError?: "raise" | "collect"
  readonly tasks?: readonly [TaskSectionEncoded<Use>, ...Array<TaskSectionEncoded<Use>>]
}

/**
 * The Schema of a task entry whose `use:` is decoded by `use`, recursive through `tasks`
 * (a non-empty list: an empty one fails as a missing `tasks[0]`, which the loader words as
 * "a fanout needs at least one task"). The recursion goes through `Schema.suspend` with the
 * `identifier`, so the JSON Schema has one definition that refers to itself.
 */
const makeTaskSection = <A, I>(
  use: Schema.Schema<A, I>,
  identifier: string
): Schema.Schema<TaskSection<A>, TaskSectionEncoded<I>> => {
  const self: Schema.Schema<TaskSection<A>, TaskSectionEncoded<I>> = Schema.suspend(() => struct).annotations({
    identifier,
    description: "a task entry; use: fanout takes nested task entries under tasks"
  })
  const struct = Schema.Struct({
    use,
    ...entryFields,
    onError: opt(OnErrorSection),
    tasks: opt(Schema.NonEmptyArray(self))
  })
  return self
}

/**
 * The `source` section: `{ range: { n } }` or `{ jsonl: { path, limit } }`, plus `keyField`
 * (explicit keys from a field of each row) and `repeats`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const SourceSection = Schema.Struct({
  range: opt(Schema.Struct({ n: Schema.Int.pipe(Schema.greaterThanOrEqualTo(0)) })),
  jsonl: opt(Schema.Struct({ path: Schema.String, limit: opt(Schema.Int.pipe(Schema.greaterThanOrEqualTo(0))) })),
  keyField: opt(Schema.String),
  repeats: opt(PositiveInt)
}).annotations({ identifier: "SourceSection" })

/** A value as a message shows it: `null`, `3`, `"x"`, `a list`. */
const shownValue = (u: unknown): string =>
  u === null || typeof u === "number" || typeof u === "boolean" ? String(u) :
  typeof u === "string" ? JSON.stringify(u) :
  Array.isArray(u) ? "a list" :
  typeof u

/**
 * A task as a control block addresses it: its unique name or its seq. Any number passes the
 * shape check: `Control.resolve` judges the seq against the chain (out of range, with the
 * valid seqs listed).
 */
const TaskRef = Schema.Union(
  Schema.String,
  Schema.Number.annotations({ jsonSchema: { type: "integer", minimum: 0 } })
).annotations({ identifier: "TaskRef", description: "a task's unique name or its seq (0-based position)" })

// `control.maxHandoffs`: one message for every wrong value, naming what was given (shared
// with `run.maxHandoffs`, see `handoffBudget.ts`)
const HandoffBudget = PositiveInt.annotations({
  message: (issue) => ({ message: handoffBudgetMessage(issue.actual), override: true })
})

/**
 * The `pipeline.control` section: the declared handoffs (`edges`: `{ source: [later targets or
 * "end"] }`), rewinds (`rewind`: `{ source: [earlier targets] }`), `retryAll` sources and the
 * loop budget `maxHandoffs` (a positive integer, required with `rewind`/`retryAll`). The Schema
 * checks the shape; the loader resolves the names and seqs against the chain with
 * `Control.resolve` and reports each problem at its `pipeline.control.*` path.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ControlSection = Schema.Struct({
  edges: opt(Schema.Record({ key: Schema.String, value: Schema.Array(TaskRef) })),
  rewind: opt(Schema.Record({ key: Schema.String, value: Schema.Array(TaskRef) })),
  retryAll: opt(Schema.Array(TaskRef)),
  maxHandoffs: opt(HandoffBudget)
}).annotations({
  identifier: "ControlSection",
  description: "declared handoffs (edges), rewinds, retryAll sources and the loop budget (maxHandoffs)",
  // only for a value that is not an object at all (null, a number, a list): a problem inside
  // the block keeps its own message and path
  message: (issue) =>
    `pipeline.control must be an object with edges, rewind, retryAll or maxHandoffs, got ${
      shownValue(issue.actual)
    }: declare at least one of them, or omit pipeline.control for a pipeline without control flow`
})

const makeExperiment = <A, I>(task: Schema.Schema<TaskSection<A>, TaskSectionEncoded<I>>, identifier: string) =>
  Schema.Struct({
    $schema: opt(Schema.String),
    run: opt(RunSection),
    pools: opt(Schema.Record({ key: Schema.String, value: PoolSection })),
    pipeline: Schema.Struct({
      name: Schema.String,
      resource: opt(Schema.String),
      tags: opt(JsonRecord),
      includeCode: opt(Schema.Boolean),
      control: opt(ControlSection),
      tasks: Schema.NonEmptyArray(task)
    }).annotations({ identifier: "PipelineSection" }),
    source: SourceSection,
    plugins: opt(Schema.Array(Schema.String)),
    pricing: opt(PriceTableSchema)
  }).annotations({ identifier })

/**
 * The experiment file as written in JSON, TOML or YAML (`use:` is a string). Its JSON
 * Schema is what `assay schema` prints.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ExperimentFile = makeExperiment(makeTaskSection(Schema.String, "TaskSection"), "AssayExperiment")

/**
 * The decoded form of {@link ExperimentFile}.
 *
 * @since 0.1.0
 * @category models
 */
export type ExperimentFile = typeof ExperimentFile.Type

/**
 * A task value accepted by `use:` in a TypeScript experiment.
 *
 * @since 0.1.0
 * @category schemas
 */
export const TaskValue: Schema.Schema<Task.Any> = Schema.declare((u: unknown): u is Task.Any => isTask(u), {
  identifier: "Task",
  description: "a task value"
})

/**
 * The experiment as a TypeScript module's default export: the same shape as
 * {@link ExperimentFile}, except that `use:` may also be a task value.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ExperimentDefinition = makeExperiment(
  makeTaskSection(Schema.Union(Schema.String, TaskValue), "TaskDefinitionSection"),
  "AssayExperimentDefinition"
)

/**
 * The encoded (as written) form of {@link ExperimentDefinition}: what `defineExperiment`
 * takes.
 *
 * @since 0.1.0
 * @category models
 */
export type ExperimentInput = typeof ExperimentDefinition.Encoded

/**
 * The decoded form of {@link ExperimentDefinition}.
 *
 * @since 0.1.0
 * @category models
 */
export type ExperimentDefinition = typeof ExperimentDefinition.Type

/**
 * The identity function that types a TypeScript experiment: `export default
 * defineExperiment({ pipeline: { ... }, source: { ... } })`. Checking happens when the file
 * is loaded (the same checks as for a JSON/TOML/YAML file).
 *
 * @since 0.1.0
 * @category constructors
 */
export const defineExperiment = (definition: ExperimentInput): ExperimentInput => definition
