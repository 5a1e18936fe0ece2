/**
 * Pipelines: a linear chain of tasks (a {@link Template}) and the unit of completion and
 * resume, one per seed (a {@link PipelineSpec}).
 *
 * **The chain is checked twice.** At compile time, {@link make} refuses a task whose input type
 * does not accept the previous task's output type (the offending argument is underlined with a
 * `ChainMismatch` naming both types). When it is built, where both sides declare Schemas
 * (`prev.output` and `next.input`), {@link make} checks them too and throws a
 * {@link PipelineBuildError}: refinements such as `NonEmptyString` are invisible to the
 * compiler. See {@link checkSchemas} for how and its limits. {@link fromTasks} builds a template
 * from a chain known only at run time (a config file): same runtime checks, no compile-time one.
 *
 * **Identity.** A template's `specDigest` is the digest of its tasks' fingerprints (see
 * `Task.fingerprint`); a spec's default id is the digest of `[specDigest, seedDigest, repeat]`:
 * same definition + same seed ⇒ same id ⇒ resume finds it. The pipeline's name and tags are not
 * part of the identity (as in the specification's `compute_spec_digest`).
 *
 * **Errors.** Definition errors throw, as in `Task` (a malformed pipeline is a programming
 * mistake): {@link make} throws {@link PipelineBuildError}; `bind` throws {@link SeedError} for
 * a seed that is not strict JSON. `map` is a `Stream` and fails with {@link SeedError} in its
 * error channel instead, because its seeds are data.
 *
 * Nothing in this module performs I/O.
 *
 * @since 0.1.0
 */
import { Arbitrary, Chunk, Effect, Either, FastCheck, Option, ParseResult, Predicate, Schema, Stream } from "effect"
import * as Control from "./Control.js"
import { PipelineBuildError } from "./Errors.js"
import { isHistoryArtifact } from "./HistoryArtifact.js"
import type { PipelineId } from "./Ids.js"
import { canonicalJson, canonicalJsonUnsafe, digest, type Json } from "./Json.js"
import type { Membership } from "./Suite.js"
import * as Task from "./Task.js"
import * as SpecStream from "./internal/specStream.js"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * A seed cannot become a pipeline: it is not strict JSON (so it has no content digest), its
 * key is not a non-empty string, `keyOf` threw, or the seed source itself failed. `index` is
 * the 0-based position of the seed in the mapped source, when known.
 *
 * @since 0.1.0
 * @category errors
 */
export class SeedError extends Schema.TaggedError<SeedError>("assay/SeedError")("SeedError", {
  message: Schema.String,
  index: Schema.optional(Schema.Number),
  cause: Schema.optional(Schema.Defect)
}) {}

// ---------------------------------------------------------------------------------------------
// Type-level chain check
// ---------------------------------------------------------------------------------------------

/**
 * A non-empty tuple of tasks.
 *
 * @since 0.1.0
 * @category type-level
 */
export type Tasks = readonly [Task.Any, ...ReadonlyArray<Task.Any>]

/**
 * What the compiler expects in place of a task whose input type does not accept the previous
 * task's output type; its single property is the error message you read in the editor.
 *
 * @since 0.1.0
 * @category type-level
 */
export interface ChainMismatch<PreviousOutput, Input> {
  readonly "assay: this task's input type does not accept the previous task's output type": {
    readonly previousOutput: PreviousOutput
    readonly input: Input
  }
}

type CheckFrom<T extends ReadonlyArray<Task.Any>, Prev, First extends boolean> = T extends readonly [
  infer H extends Task.Any,
  ...infer Rest extends ReadonlyArray<Task.Any>
] ? readonly [
    First extends true ? H : [Prev] extends [Task.Input<H>] ? H : ChainMismatch<Prev, Task.Input<H>>,
    ...CheckFrom<Rest, Task.Output<H>, false>
  ]
  : readonly []

/**
 * `T` itself when every task accepts the previous task's output, else `T` with each offending
 * task replaced by a {@link ChainMismatch} (so the error points at that argument).
 *
 * @since 0.1.0
 * @category type-level
 */
export type CheckChain<T extends ReadonlyArray<Task.Any>> = T extends CheckFrom<T, never, true> ? T
  : CheckFrom<T, never, true>

type Last<T extends ReadonlyArray<unknown>> = T extends readonly [...ReadonlyArray<unknown>, infer L] ? L : never

/**
 * The seed type of a chain: the first task's input.
 *
 * @since 0.1.0
 * @category type-level
 */
export type SeedOf<T extends Tasks> = Task.Input<T[0]>

/**
 * The output type of a chain: the last task's output.
 *
 * @since 0.1.0
 * @category type-level
 */
export type OutOf<T extends Tasks> = Task.Output<Last<T>>

/**
 * The error type of a chain: the union of its tasks' errors.
 *
 * @since 0.1.0
 * @category type-level
 */
export type ErrorOf<T extends Tasks> = Task.Error<T[number]>

/**
 * The requirements of a chain: the union of its tasks' requirements.
 *
 * @since 0.1.0
 * @category type-level
 */
export type ContextOf<T extends Tasks> = Task.Context<T[number]>

/**
 * The template a chain builds.
 *
 * @since 0.1.0
 * @category type-level
 */
export type TemplateOf<T extends Tasks> = Template<SeedOf<T>, OutOf<T>, ErrorOf<T>, ContextOf<T>>

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link make}: `tags` (a strict JSON object stored with every pipeline, for
 * filtering; not part of the identity), `includeCode` (default `true`: every task's code
 * digest, children's included, is part of the identity; `false` lets task bodies change
 * without losing checkpoints) and `control` (the declared handoffs, rewinds and loop budget,
 * see `Control`; part of the identity only when given).
 *
 * @since 0.1.0
 * @category models
 */
export interface MakeOptions {
  readonly tags?: Task.JsonObject | undefined
  readonly includeCode?: boolean | undefined
  readonly control?: Control.ControlDecl | undefined
}

/**
 * Options of `bind`: an explicit `key` (used as the pipeline id instead of the content
 * address; the runner checks its stored digests before reusing it) and the `repeat` index
 * (integer ≥ 0, default 0).
 *
 * @since 0.1.0
 * @category models
 */
export interface BindOptions {
  readonly key?: string | undefined
  readonly repeat?: number | undefined
}

/**
 * Options of `map`:
 * - `repeats`: independent pipelines per seed (integer ≥ 1, default 1), for pass@k;
 * - `keyOf`: your own stable id per seed instead of the content address; with `repeats > 1`
 *   the id is `` `${key}#${repeat}` ``;
 * - `chunkSize`: how many seeds are pulled from a synchronous iterable at a time (integer
 *   ≥ 1, default 16): the most read ahead of what downstream asked for. The runner, given
 *   the stream `map` returned itself, pulls a whole admission batch (up to 256 seeds, what
 *   it reads before admitting anyway) at a time.
 *
 * @since 0.1.0
 * @category models
 */
export interface MapOptions<Seed> {
  readonly repeats?: number | undefined
  readonly keyOf?: ((seed: Seed) => string) | undefined
  readonly chunkSize?: number | undefined
}

/**
 * One pipeline waiting to run: a seed bound to a template.
 *
 * - `pipelineId` (= `key`): the content address `digest([specDigest, seedDigest, repeat])`,
 *   or the explicit key (`explicitKey: true`);
 * - `seed`: the row, as given; `seedJson`: its canonical JSON, captured at binding;
 * - `seedDigest`: 32-hex digest of `seedJson`; `specDigest`: the template's;
 * - `repeat`: which of the `repeats` samples this is (from 0);
 * - `template`: the template (name, tags, tasks, nTasks, ...);
 * - `member`: the suite member the pipeline belongs to (`Suite.tagSpec`), absent outside
 *   suites; inside a suite `pipelineId`/`key` are the member pipeline id and
 *   `member.localKey` the key above.
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelineSpec<Seed, Out, E = never, R = never> {
  readonly _tag: "PipelineSpec"
  readonly pipelineId: PipelineId
  readonly key: string
  readonly explicitKey: boolean
  readonly seed: Seed
  readonly seedJson: string
  readonly seedDigest: string
  readonly specDigest: string
  readonly repeat: number
  readonly template: Template<Seed, Out, E, R>
  readonly member?: Membership | undefined
}

/**
 * A pipeline before it gets a seed.
 *
 * - `name`, `tags`, `includeCode`: as given to {@link make};
 * - `tasks`, `nTasks`, `taskNames`: the chain;
 * - `specDigest`: {@link computeSpecDigest} of the tasks (and of the control block when
 *   there is one; 32 hex characters);
 * - `control`: the resolved `control` block (`Control.ResolvedControl`), `undefined` for a
 *   plain linear chain;
 * - `describe()`: a JSON summary (what `assay validate` prints), with the control block when
 *   there is one;
 * - `bind(seed, options)`: one {@link PipelineSpec}; throws {@link SeedError} for a seed that
 *   is not strict JSON or an invalid key/repeat;
 * - `map(seeds, options)`: a lazy `Stream` of specs from an `Iterable`, an `AsyncIterable` or
 *   a `Stream` of seeds (each repeated `repeats` times); nothing is pulled before the stream
 *   runs, and a synchronous iterator is closed (`return()`) when the stream ends early.
 *   Throws {@link SeedError} for invalid `repeats`/`chunkSize`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Template<Seed, Out, E = never, R = never> {
  readonly _tag: "PipelineTemplate"
  readonly name: string
  readonly tags: Task.JsonObject
  readonly tasks: ReadonlyArray<Task.Any>
  readonly nTasks: number
  readonly taskNames: ReadonlyArray<string>
  readonly includeCode: boolean
  readonly specDigest: string
  readonly control: Control.ResolvedControl | undefined
  readonly describe: () => Json
  readonly bind: (seed: Seed, options?: BindOptions) => PipelineSpec<Seed, Out, E, R>
  readonly map: {
    (
      seeds: Iterable<Seed> | AsyncIterable<Seed>,
      options?: MapOptions<Seed>
    ): Stream.Stream<PipelineSpec<Seed, Out, E, R>, SeedError>
    <SE, SR>(
      seeds: Stream.Stream<Seed, SE, SR>,
      options?: MapOptions<Seed>
    ): Stream.Stream<PipelineSpec<Seed, Out, E, R>, SE | SeedError, SR>
  }
}

/**
 * Any template, whatever its types.
 *
 * @since 0.1.0
 * @category models
 */
export type AnyTemplate = Template<any, any, any, any>

// ---------------------------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------------------------

/**
 * The format marker digested with the fingerprints; bumping it changes every spec digest.
 *
 * @since 0.1.0
 * @category identity
 */
export const SPEC_FORMAT = "assay.spec/v1"

/**
 * Options of {@link computeSpecDigest}: `includeCode` (as in {@link make}) and the resolved
 * `control` block, if any.
 *
 * @since 0.1.0
 * @category identity
 */
export interface SpecDigestOptions extends Task.FingerprintOptions {
  readonly control?: Control.ResolvedControl | undefined
}

/**
 * The spec digest of a chain: the 32-hex {@link digest} of the canonical JSON of
 * `{ format: SPEC_FORMAT, tasks: [fingerprint(task, { includeCode }) ...] }`, plus
 * `control: <canonical control>` only when the pipeline declares a control block. It covers
 * each task's name, resource, timeout, retry timing fields, algorithm config, config,
 * version, parameters, children and (with `includeCode`, the default) code digest. A chain
 * without control keeps exactly the digest it had before control flow existed (so its ids,
 * checkpoints and shard assignment); a control block is folded in its resolved form (seqs,
 * sorted: `Control.ResolvedControl.canonical`), so a target written as a name or as a seq is
 * the same pipeline. Compare it with a stored digest to know whether a changed chain will
 * resume old pipelines.
 *
 * @since 0.1.0
 * @category identity
 */
export const computeSpecDigest = (
  tasks: ReadonlyArray<Task.Any>,
  options?: SpecDigestOptions
): string => {
  const includeCode = options?.includeCode ?? true
  const fingerprints = tasks.map((t) => Task.fingerprint(t, { includeCode }))
  const control = options?.control
  return digest(canonicalJsonUnsafe(
    control === undefined ?
      { format: SPEC_FORMAT, tasks: fingerprints } :
      { format: SPEC_FORMAT, tasks: fingerprints, control: control.canonical }
  ))
}

/**
 * The default (content-addressed) pipeline id: the digest of the canonical JSON of
 * `[specDigest, seedDigest, repeat]`.
 *
 * @since 0.1.0
 * @category identity
 */
export const defaultPipelineId = (specDigest: string, seedDigest: string, repeat: number): PipelineId =>
  // digests are lowercase hex and repeat an integer, so this literal is exactly their canonical JSON
  (/^[0-9a-f]*$/.test(specDigest) && /^[0-9a-f]*$/.test(seedDigest) && Number.isSafeInteger(repeat) ?
    digest(`["${specDigest}","${seedDigest}",${repeat}]`) :
    digest(canonicalJsonUnsafe([specDigest, seedDigest, repeat]))) as PipelineId

// ---------------------------------------------------------------------------------------------
// Build-time Schema check
// ---------------------------------------------------------------------------------------------

/** Samples drawn from an output Schema in {@link checkSchemas}. */
const SAMPLES = 100
/** The fixed fast-check seed that makes {@link checkSchemas} deterministic. */
const SAMPLE_SEED = 0x5eed

const preview = (u: unknown): string => {
  const s = Either.getOrElse(canonicalJson(u), () => {
    try {
      return String(u)
    } catch {
      return "<unprintable>"
    }
  })
  return s.length > 200 ? `${s.slice(0, 200)}…` : s
}

/**
 * Checks that values of the `output` Schema are accepted by the `input` Schema, returning the
 * reason when they are not (`undefined` when compatible or when it cannot tell).
 *
 * How: identical Schemas (the same value or the same AST) pass at once; otherwise 100 values
 * are generated from the output Schema with Effect's `Arbitrary` and a fixed fast-check seed
 * (so the verdict is deterministic), and each must satisfy `Schema.is(input)` (the type side:
 * in a run, the value passed on is the previous task's output itself).
 *
 * Limits: a sample can miss a rare incompatibility (a false pass, never a false failure: any
 * reported sample really is refused); a Schema without an arbitrary (a `declare` without an
 * `arbitrary` annotation) cannot be sampled and the pair is accepted, as the specification
 * treats an absent annotation as lenient.
 *
 * @since 0.1.0
 * @category checks
 */
export const checkSchemas = (
  output: Schema.Schema.AnyNoContext,
  input: Schema.Schema.AnyNoContext
): string | undefined => {
  if (output === input || output.ast === input.ast) return undefined
  let samples: Array<unknown>
  try {
    samples = FastCheck.sample(Arbitrary.make(output), { seed: SAMPLE_SEED, numRuns: SAMPLES })
  } catch {
    return undefined
  }
  const validate = Schema.validateEither(input)
  for (const sample of samples) {
    const result = validate(sample)
    if (Either.isLeft(result)) {
      return `the output value ${preview(sample)} is refused by the next input Schema: ${
        ParseResult.TreeFormatter.formatErrorSync(result.left)
      }`
    }
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------------------------

const isStream = (u: unknown): u is Stream.Stream<unknown, unknown, unknown> =>
  Predicate.hasProperty(u, Stream.StreamTypeId)

const messageOf = (e: unknown): string =>
  Predicate.hasProperty(e, "message") && typeof e.message === "string" ? e.message : String(e)

/**
 * A stream over a synchronous iterable that pulls at most `chunkSize` values per downstream
 * pull, turns a throwing iterator into a {@link SeedError}, and closes the iterator
 * (`return()`, which runs a generator's `finally`) when the stream ends for any reason.
 */
const fromIterableLazy = <A>(iterable: Iterable<A>, chunkSize: number): Stream.Stream<A, SeedError> =>
  Stream.unwrapScoped(
    Effect.map(
      Effect.acquireRelease(
        Effect.try({
          try: () => iterable[Symbol.iterator](),
          catch: (e) => new SeedError({ message: `the seed source failed to start: ${messageOf(e)}`, cause: e })
        }),
        (iterator) =>
          Effect.sync(() => {
            try {
              iterator.return?.()
            } catch {
              // closing a finished or broken iterator: nothing left to release
            }
          })
      ),
      (iterator) => {
        let done = false
        return Stream.repeatEffectChunkOption(Effect.suspend(() => {
          if (done) return Effect.fail(Option.none())
          const buffer: Array<A> = []
          try {
            while (buffer.length < chunkSize) {
              const next = iterator.next()
              if (next.done === true) {
                done = true
                break
              }
              buffer.push(next.value)
            }
          } catch (e) {
            done = true
            const error = new SeedError({ message: `the seed source failed: ${messageOf(e)}`, cause: e })
            return Effect.fail(Option.some(error))
          }
          return buffer.length === 0 ? Effect.fail(Option.none()) : Effect.succeed(Chunk.unsafeFromArray(buffer))
        }))
      }
    )
  )

const toSeedStream = (seeds: unknown, chunkSize: number): Stream.Stream<unknown, unknown, unknown> => {
  if (isStream(seeds)) return seeds
  if (Predicate.hasProperty(seeds, Symbol.asyncIterator)) {
    return Stream.fromAsyncIterable(
      seeds as AsyncIterable<unknown>,
      (e) => new SeedError({ message: `the seed source failed: ${messageOf(e)}`, cause: e })
    )
  }
  if (Predicate.hasProperty(seeds, Symbol.iterator)) return fromIterableLazy(seeds as Iterable<unknown>, chunkSize)
  throw new SeedError({ message: "map() takes an Iterable, an AsyncIterable or a Stream of seeds" })
}

const isPositiveInt = (n: unknown, min: number): n is number => typeof n === "number" && Number.isInteger(n) && n >= min

// ---------------------------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------------------------

/**
 * The key of an object that has no place there, as the type a misspelt key must match: the
 * compiler's message then names the key and the allowed ones.
 */
type UnknownKey<K, Allowed extends string> = `unknown key "${K & string}": the keys are ${Allowed}`

/**
 * The `control` block as written, with every key that {@link Control.ControlDecl} does not
 * have mapped to {@link UnknownKey}: `make`'s generic options escape TypeScript's excess
 * property check, this restores it.
 */
type ExactControl<C> = C extends object ? {
    readonly [K in keyof C]: K extends keyof Control.ControlDecl ? C[K]
      : UnknownKey<K, "edges, rewind, retryAll, maxHandoffs">
  }
  : C

/** The options as written, with unknown keys (top level and in `control`) refused. */
type ExactOptions<O> = O extends MakeOptions ? {
    readonly [K in keyof O]: K extends "control" ? ExactControl<O[K]>
      : K extends keyof MakeOptions ? O[K]
      : UnknownKey<K, "tags, includeCode, control">
  }
  : MakeOptions

/**
 * The arguments after the name: the checked chain, options then the checked chain, or the
 * checked chain then options (options checked for unknown keys, see {@link ExactOptions}).
 */
type MakeArgs<A extends ReadonlyArray<unknown>> = A extends readonly [infer F, ...infer Rest] ?
  F extends Task.Any ? (
      A extends ReadonlyArray<Task.Any> ? CheckChain<A>
        : A extends readonly [...infer Init, infer L] ? Init extends Tasks ? readonly [...CheckChain<Init>, ExactOptions<L>]
          : readonly [Task.Any, ...ReadonlyArray<Task.Any>, ExactOptions<L>]
        : never
    )
  : Rest extends Tasks ? readonly [ExactOptions<F>, ...CheckChain<Rest>]
  : readonly [ExactOptions<F>, Task.Any, ...ReadonlyArray<Task.Any>]
  : never

type TasksOf<A extends ReadonlyArray<unknown>> = A extends readonly [infer F, ...infer Rest] ?
  F extends Task.Any ? A extends Tasks ? A
    : A extends readonly [...infer Init, infer _L] ? Init extends Tasks ? Init : never
    : never
  : Rest extends Tasks ? Rest
  : never
  : never

const buildError = (name: string, message: string): PipelineBuildError =>
  new PipelineBuildError({ message: `pipeline "${name}": ${message}` })

/**
 * Builds a template from a chain of tasks: `make(name, ...tasks)`,
 * `make(name, options, ...tasks)` or `make(name, ...tasks, options)` with the options
 * `{ tags, includeCode, control }` (see {@link MakeOptions}). A single task is a valid
 * pipeline.
 *
 * Type parameters: `Seed` is the first task's input, `Out` the last task's output, `E` and `R`
 * the unions of the tasks' errors and requirements. A task whose input type does not accept
 * the previous output type does not compile (see {@link ChainMismatch}).
 *
 * Throws {@link PipelineBuildError} when: the name is empty; there is no task or an argument is
 * not a task; options are given both first and last; the options are malformed (unknown key,
 * `tags` not a strict JSON object, `includeCode` not a boolean, a `control` block that
 * `Control.resolve` refuses: every issue with its path, `control.edges.validate[0]: ...`); or
 * two adjacent tasks declare Schemas that do not fit ({@link checkSchemas}).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <const A extends readonly [MakeOptions | Task.Any, ...ReadonlyArray<MakeOptions | Task.Any>]>(
  name: string,
  ...args: A extends MakeArgs<A> ? A : MakeArgs<A>
): TemplateOf<TasksOf<A>> => {
  const all = args as ReadonlyArray<unknown>
  const first = all[0]
  const last = all.length > 1 ? all[all.length - 1] : undefined
  const isOptions = (u: unknown) => Predicate.isObject(u) && !Array.isArray(u) && !Task.isTask(u)
  if (first !== undefined && !Task.isTask(first)) {
    if (!isOptions(first)) throw buildError(String(name), "expected options or a task after the name")
    if (last !== undefined && isOptions(last)) {
      throw buildError(String(name), "options are given twice (first and last): pass one options object")
    }
    return build(name, first as MakeOptions, all.slice(1)) as TemplateOf<TasksOf<A>>
  }
  if (last !== undefined && isOptions(last)) {
    return build(name, last as MakeOptions, all.slice(0, -1)) as TemplateOf<TasksOf<A>>
  }
  return build(name, {}, all) as TemplateOf<TasksOf<A>>
}

/**
 * Builds a template from a chain known only at run time (a declarative config, code that
 * composes steps conditionally). Same runtime checks and errors as {@link make} (including the
 * Schema check), but no compile-time chain check: the caller vouches for the type parameters,
 * which default to `unknown` seeds and outputs, `unknown` errors and no requirements.
 *
 * Throws {@link PipelineBuildError} like {@link make}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromTasks = <Seed = unknown, Out = unknown, E = unknown, R = never>(
  name: string,
  tasks: ReadonlyArray<Task.Any>,
  options?: MakeOptions
): Template<Seed, Out, E, R> => build(name, options ?? {}, tasks) as Template<Seed, Out, E, R>

const build = (name: string, options: MakeOptions, taskArgs: ReadonlyArray<unknown>): AnyTemplate => {
  if (typeof name !== "string" || name.trim() === "") {
    throw new PipelineBuildError({ message: "a pipeline needs a non-empty string name" })
  }
  if (!Predicate.isObject(options) || Array.isArray(options)) throw buildError(name, "options must be an object")
  if (!Array.isArray(taskArgs)) throw buildError(name, "tasks must be an array")
  for (const key of Object.keys(options)) {
    if (key !== "tags" && key !== "includeCode" && key !== "control") {
      throw buildError(name, `unknown option "${key}" (the options are tags, includeCode and control)`)
    }
  }
  if (options.includeCode !== undefined && typeof options.includeCode !== "boolean") {
    throw buildError(name, "includeCode must be a boolean")
  }
  const includeCode = options.includeCode ?? true
  let tags: Task.JsonObject = Object.freeze({})
  if (options.tags !== undefined) {
    if (!Predicate.isObject(options.tags) || Array.isArray(options.tags)) {
      throw buildError(name, "tags must be a JSON object")
    }
    const encoded = canonicalJson(options.tags)
    if (Either.isLeft(encoded)) {
      throw buildError(name, `tags${encoded.left.path.slice(1)}: ${encoded.left.reason} (tags must be strict JSON)`)
    }
    tags = deepFreeze(JSON.parse(encoded.right) as Task.JsonObject)
  }
  if (taskArgs.length === 0) throw buildError(name, "a pipeline needs at least one task")
  taskArgs.forEach((t, i) => {
    if (!Task.isTask(t)) throw buildError(name, `argument ${i + 1} is not a task`)
  })
  const tasks = Object.freeze([...taskArgs] as Array<Task.Any>)
  for (let i = 1; i < tasks.length; i++) {
    const prev = tasks[i - 1]!
    const next = tasks[i]!
    if (prev.outputSchema !== undefined && next.inputSchema !== undefined) {
      const reason = checkSchemas(prev.outputSchema, next.inputSchema)
      if (reason !== undefined) {
        throw buildError(
          name,
          `task ${i} "${next.name}" does not accept the output of task ${i - 1} "${prev.name}": ${reason}`
        )
      }
    }
  }
  let control: Control.ResolvedControl | undefined
  if (options.control !== undefined) {
    const resolved = Control.resolve(tasks.map((t) => t.name), options.control)
    if (Either.isLeft(resolved)) {
      throw buildError(
        name,
        resolved.left.map((i) =>
          `${Control.formatIssuePath(["control", ...i.path])}: ${i.message}${
            i.suggestion === undefined ? "" : ` (${i.suggestion})`
          }`
        ).join("; ")
      )
    }
    control = resolved.right
  }
  return makeTemplate(name, tags, tasks, includeCode, control)
}

const deepFreeze = <A>(value: A): A => {
  if (value !== null && typeof value === "object") {
    for (const v of Object.values(value)) deepFreeze(v)
    Object.freeze(value)
  }
  return value
}

const makeTemplate = (
  name: string,
  tags: Task.JsonObject,
  tasks: ReadonlyArray<Task.Any>,
  includeCode: boolean,
  control: Control.ResolvedControl | undefined
): AnyTemplate => {
  const specDigest = computeSpecDigest(tasks, { includeCode, control })
  const idPrefix = idPrefixOf(specDigest)
  const template: { -readonly [K in keyof AnyTemplate]: AnyTemplate[K] } = {
    _tag: "PipelineTemplate",
    name,
    tags,
    tasks,
    nTasks: tasks.length,
    taskNames: Object.freeze(tasks.map((t) => t.name)),
    includeCode,
    specDigest,
    control,
    describe: () => ({
      name,
      tags,
      specDigest,
      includeCode,
      nTasks: tasks.length,
      tasks: tasks.map(Task.describe),
      ...(control === undefined ? {} : { control: Control.describe(control) })
    }),
    bind: (seed, options) => {
      const result = bindSpec(template, seed, options?.key, options?.repeat ?? 0, undefined, idPrefix)
      if (Either.isLeft(result)) throw result.left
      return result.right
    },
    map: ((seeds: unknown, options?: MapOptions<unknown>) => {
      const repeats = options?.repeats ?? 1
      const chunkSize = options?.chunkSize ?? 16
      const keyOf = options?.keyOf
      if (!isPositiveInt(repeats, 1)) throw new SeedError({ message: "repeats must be an integer >= 1" })
      if (!isPositiveInt(chunkSize, 1)) throw new SeedError({ message: "chunkSize must be an integer >= 1" })
      const specsOf = (source: Stream.Stream<unknown, unknown, unknown>) => Stream.suspend(() => {
        let index = 0
        return Stream.mapChunksEffect(source, (chunk) =>
          Effect.suspend(() => {
            const out: Array<PipelineSpec<unknown, unknown, unknown, unknown>> = []
            for (const seed of chunk) {
              const at = index++
              const prepared = prepareSeed(seed, at)
              if (Either.isLeft(prepared)) return Effect.fail(prepared.left)
              let key: string | undefined
              if (keyOf !== undefined) {
                try {
                  key = keyOf(seed)
                } catch (e) {
                  return Effect.fail(new SeedError({ message: `keyOf threw: ${messageOf(e)}`, index: at, cause: e }))
                }
                if (typeof key !== "string" || key === "") {
                  return Effect.fail(new SeedError({ message: "keyOf must return a non-empty string", index: at }))
                }
              }
              for (let repeat = 0; repeat < repeats; repeat++) {
                const k = key === undefined ? undefined : repeats > 1 ? `${key}#${repeat}` : key
                const spec = bindSpec(template, seed, k, repeat, prepared.right, idPrefix)
                if (Either.isLeft(spec)) return Effect.fail(spec.left)
                out.push(spec.right)
              }
            }
            return Effect.succeed(Chunk.unsafeFromArray(out))
          }))
      })
      // the runner may read it in bigger chunks (see `internal/specStream.ts`)
      return SpecStream.register(
        specsOf(toSeedStream(seeds, chunkSize)),
        (readAhead) => specsOf(toSeedStream(seeds, Math.max(chunkSize, readAhead)))
      )
    }) as AnyTemplate["map"]
  }
  return Object.freeze(template)
}

interface PreparedSeed {
  readonly seedJson: string
  readonly seedDigest: string
}

const prepareSeed = (seed: unknown, index: number | undefined): Either.Either<PreparedSeed, SeedError> => {
  if (isHistoryArtifact(seed)) {
    // a seed is its canonical JSON (the pipeline's identity, what retryAll replays), decoded
    // without a codec registry: a typed payload cannot be one
    return Either.left(
      new SeedError({
        message: `${index === undefined ? "the seed" : `seed #${index}`} is a HistoryArtifact (${
          seed.constructor.name
        }), which cannot be a seed: a seed is strict JSON, its canonical bytes are the pipeline's identity and what ` +
          "retryAll replays. Bind its state (`artifact.stateObject()`) and build the HistoryArtifact in the first task " +
          "(a later task may send one back with Handoff.rewind)",
        ...(index === undefined ? {} : { index })
      })
    )
  }
  const encoded = canonicalJson(seed)
  if (Either.isLeft(encoded)) {
    return Either.left(
      new SeedError({
        message: `${index === undefined ? "the seed" : `seed #${index}`} is not strict JSON at ${encoded.left.path}: ${
          encoded.left.reason
        }`,
        ...(index === undefined ? {} : { index })
      })
    )
  }
  return Either.right({ seedJson: encoded.right, seedDigest: digest(encoded.right) })
}

/**
 * The start of a content-addressed id's canonical JSON, `["<specDigest>","`, for a template
 * whose spec digest is lowercase hex (always, as {@link computeSpecDigest} makes it):
 * {@link bindSpec} then writes the rest itself (a seed digest is lowercase hex too) instead of
 * checking both digests per spec in {@link defaultPipelineId}. The same id either way.
 */
const idPrefixOf = (specDigest: string): string | undefined =>
  /^[0-9a-f]*$/.test(specDigest) ? `["${specDigest}","` : undefined

const bindSpec = (
  template: AnyTemplate,
  seed: unknown,
  key: unknown,
  repeat: unknown,
  prepared: PreparedSeed | undefined,
  idPrefix: string | undefined
): Either.Either<PipelineSpec<any, any, any, any>, SeedError> => {
  if (!isPositiveInt(repeat, 0)) return Either.left(new SeedError({ message: "repeat must be an integer >= 0" }))
  if (key !== undefined && (typeof key !== "string" || key === "")) {
    return Either.left(new SeedError({ message: "key must be a non-empty string" }))
  }
  let p = prepared
  if (p === undefined) {
    const r = prepareSeed(seed, undefined)
    if (Either.isLeft(r)) return Either.left(r.left)
    p = r.right
  }
  // an explicit key is the pipeline id as given (checked above: a non-empty string)
  const pipelineId = (key as PipelineId | undefined) ??
    (idPrefix !== undefined && Number.isSafeInteger(repeat)
      ? digest(`${idPrefix}${p.seedDigest}",${repeat}]`) as PipelineId
      : defaultPipelineId(template.specDigest, p.seedDigest, repeat))
  return Either.right(Object.freeze({
    _tag: "PipelineSpec" as const,
    pipelineId,
    key: pipelineId,
    explicitKey: key !== undefined,
    seed,
    seedJson: p.seedJson,
    seedDigest: p.seedDigest,
    specDigest: template.specDigest,
    repeat,
    template
  }))
}

/**
 * Whether a value is a {@link Template}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isTemplate = (u: unknown): u is AnyTemplate =>
  Predicate.isObject(u) && (u as { _tag?: unknown })._tag === "PipelineTemplate"

/**
 * Whether a value is a {@link PipelineSpec}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isPipelineSpec = (u: unknown): u is PipelineSpec<unknown, unknown, unknown, unknown> =>
  Predicate.isObject(u) && (u as { _tag?: unknown })._tag === "PipelineSpec"
