/**
 * The model-call cache in the domain: modes, what a task declares, the namespace that keeps
 * repeats independent, and the key.
 *
 * A task whose output is a pure function of its input and declared config (and the built-in
 * `chat`, whose output is what the endpoint answered to one exact request) may have its
 * successful outputs stored and served again instead of being run. A served output is recorded
 * as an attempt with outcome `cache_hit` and takes no lease.
 *
 * **Modes** ({@link CacheMode}): `readWrite` (serve a stored output, else run and store it),
 * `readOnly` (serve, else run without storing), `refresh` (always run, store and replace),
 * `off` (neither; the default).
 *
 * **Key** ({@link keyOf}): the digest (`Json.digest`) of the canonical JSON of
 * `{ v, material, namespace }`: `material` is what determines the output (for a general task
 * its identity, `Task.fingerprint` with the code digest, and the input; for `chat` the public
 * identity of the pool's endpoints, the model, the messages and the sampling parameters, never
 * a key, a header value or a URL's secret) and the {@link CacheNamespace} is where the call is
 * made: the pipeline's repeat, the station's visit and the study variant, so repeat 2 is never
 * served repeat 1's answer and a rewound station gets a new sample.
 *
 * Nothing in this module performs I/O.
 *
 * @since 0.7.0
 */
import { Duration, type Effect, Option, Predicate } from "effect"
import type { ConfigIssue } from "./Errors.js"
import { canonicalJsonUnsafe, digest, type Json } from "./Json.js"
import type { TaskContext } from "./TaskContext.js"

/**
 * How a cacheable task uses the cache: `readWrite` serves stored outputs and stores new ones;
 * `readOnly` serves stored outputs and never writes; `refresh` never serves, always runs and
 * stores (replacing what was stored); `off` neither serves nor stores.
 *
 * @since 0.7.0
 * @category models
 */
export type CacheMode = "readWrite" | "readOnly" | "refresh" | "off"

/**
 * The modes, in the order the docs list them.
 *
 * @since 0.7.0
 * @category constants
 */
export const cacheModes: ReadonlyArray<CacheMode> = ["readWrite", "readOnly", "refresh", "off"]

/**
 * What a task (or `chat`) declares as its `cache` option: `true` (= `readWrite`), `false` (=
 * `off`: never cached, whatever the run says), a mode, or `{ mode?, ttl? }` where `ttl` is how
 * long a stored output may be served (any `Duration.DurationInput`: `"7 days"`, a number of
 * ms; `null` or absent: no expiry). `{ ttl }` without `mode` is `readWrite`; `{ mode:
 * undefined }` with the key present declares the task cacheable under the run's mode (what
 * `chat` does: off unless the run turns the cache on).
 *
 * @since 0.7.0
 * @category models
 */
export type CacheOption =
  | boolean
  | CacheMode
  | { readonly mode?: CacheMode | undefined; readonly ttl?: Duration.DurationInput | null | undefined }

/**
 * A task's cache declaration after validation: `mode` is the declared mode (`undefined`: the
 * run's mode applies, as for `chat` without a `cache` option), `ttlMs` the declared time to
 * live in ms (`undefined`: the run's; `null`: none).
 *
 * @since 0.7.0
 * @category models
 */
export interface TaskCache {
  readonly mode: CacheMode | undefined
  readonly ttlMs: number | null | undefined
}

/**
 * The run's cache settings (`run.cache` in a config, `--cache`, `--cache-db`, `--cache-ttl`):
 * `mode` applies to every cacheable task that declares no mode of its own, and, when given
 * ({@link RunCache.explicit}), overrides a declared `readWrite` (a task declared `off` stays
 * off); `ttlMs` applies where the task declares none; `db` is the path of a shared cache
 * database (absent: the run's store).
 *
 * @since 0.7.0
 * @category models
 */
export interface RunCache {
  readonly mode: CacheMode
  readonly ttlMs: number | null
  readonly db?: string | undefined
  /**
   * Whether the run's mode was given (by a config, a flag or code): only then does it override
   * a task's declared mode (`--cache off` turns off even a task declared `cache: true`).
   */
  readonly explicit?: boolean | undefined
}

/**
 * The default run cache settings: off, no expiry, the run's store.
 *
 * @since 0.7.0
 * @category constants
 */
export const runCacheOff: RunCache = { mode: "off", ttlMs: null }

const isMode = (u: unknown): u is CacheMode => typeof u === "string" && (cacheModes as ReadonlyArray<string>).includes(u)

/**
 * The one wording of a TTL that is not a positive duration (negative, zero, infinite or not a
 * duration), wherever it is given: the `--cache-ttl` flag, a config's `run.cache.ttl`, a
 * task's `cache.ttl`. Each names its place before it: `--cache-ttl: must be a positive
 * duration such as "7 days", got "-5 seconds"` (issue 18: three wordings, one of them "is
 * negative: a duration is 0 or more" for a TTL that may not be 0 either).
 *
 * @since 0.10.0
 * @category validation
 */
export const ttlMessage = (got: unknown): string =>
  `must be a positive duration such as "7 days", got ${
    Duration.isDuration(got) ? Duration.format(got) : JSON.stringify(got) ?? String(got)
  }`

const ttlOf = (input: unknown, field: string, issues: Array<ConfigIssue>): number | null | undefined => {
  if (input === undefined) return undefined
  if (input === null) return null
  const d = typeof input === "string" && /^\s*-/.test(input) ? Option.none() : Duration.decodeUnknown(input)
  if (Option.isNone(d) || !Duration.isFinite(d.value) || Duration.toMillis(d.value) <= 0) {
    issues.push({ path: field, message: ttlMessage(input), suggestion: "null: no expiry" })
    return undefined
  }
  return Duration.toMillis(d.value)
}

/**
 * Validates a task's `cache` option (see {@link CacheOption}); `undefined` when absent.
 * Problems are pushed onto `issues` with their field path under `field` (`cache.mode`,
 * `cache.ttl`).
 *
 * @since 0.7.0
 * @category constructors
 */
export const resolveTaskCache = (input: unknown, field: string, issues: Array<ConfigIssue>): TaskCache | undefined => {
  if (input === undefined) return undefined
  if (input === true) return { mode: "readWrite", ttlMs: undefined }
  if (input === false) return { mode: "off", ttlMs: undefined }
  if (isMode(input)) return { mode: input, ttlMs: undefined }
  if (Predicate.isObject(input) && !Array.isArray(input)) {
    const o = input as Record<string, unknown>
    for (const k of Object.keys(o)) {
      if (k !== "mode" && k !== "ttl") issues.push({ path: `${field}.${k}`, message: `unknown cache field "${k}"` })
    }
    const mode = o["mode"]
    if (mode !== undefined && !isMode(mode)) {
      issues.push({ path: `${field}.mode`, message: `mode must be one of ${cacheModes.join(", ")}, got ${JSON.stringify(mode)}` })
    }
    // `{ mode: undefined }` (the key present): the run's mode applies (what `chat` declares)
    const inherit = mode === undefined && Object.prototype.hasOwnProperty.call(o, "mode")
    return {
      mode: isMode(mode) ? mode : mode === undefined && !inherit ? "readWrite" : undefined,
      ttlMs: ttlOf(o["ttl"], `${field}.ttl`, issues)
    }
  }
  issues.push({
    path: field,
    message: `cache must be true, false, one of ${cacheModes.join(", ")} or { mode, ttl }, got ${JSON.stringify(input) ?? typeof input}`
  })
  return undefined
}

/**
 * Validates the run's cache setting: `true` (= `readWrite`), `false` (= `off`), a mode, or
 * `{ mode?, ttl?, db? }`. Problems are pushed onto `issues` under `field` (`run.cache.ttl`).
 *
 * @since 0.7.0
 * @category constructors
 */
export const resolveRunCache = (input: unknown, field: string, issues: Array<ConfigIssue>): RunCache => {
  if (input === undefined || input === null) return runCacheOff
  if (Predicate.isObject(input) && !Array.isArray(input)) {
    const o = input as Record<string, unknown>
    const { db, ...rest } = o
    if (db !== undefined && (typeof db !== "string" || db === "")) {
      issues.push({ path: `${field}.db`, message: "db must be a non-empty path" })
    }
    const task = resolveTaskCache(rest, field, issues)
    return {
      mode: task?.mode ?? "readWrite",
      ttlMs: task?.ttlMs ?? null,
      explicit: true,
      ...(typeof db === "string" && db !== "" ? { db } : {})
    }
  }
  const task = resolveTaskCache(input, field, issues)
  return { mode: task?.mode ?? "off", ttlMs: null, explicit: true }
}

/**
 * What a cacheable task does in a run: its effective mode and time to live (ms, `null`: no
 * expiry). A task that declares `off` is off whatever the run says; the run's `readOnly`,
 * `refresh` and `off` override a declared `readWrite`; a task that declares nothing takes the
 * run's mode; `ttlMs` is the task's, else the run's.
 *
 * @since 0.7.0
 * @category combinators
 */
export const effective = (task: TaskCache, run: RunCache): { readonly mode: CacheMode; readonly ttlMs: number | null } => {
  const mode: CacheMode = task.mode === "off"
    ? "off"
    : run.explicit !== true
    ? task.mode ?? run.mode
    : task.mode === undefined || run.mode !== "readWrite"
    ? run.mode
    : task.mode
  return { mode, ttlMs: task.ttlMs === undefined ? run.ttlMs : task.ttlMs }
}

/**
 * Where a call is made, so that independent samples stay independent: the pipeline's `repeat`
 * (0 for a pipeline without repeats), the station's `visit` (0 outside control flow) and the
 * study `variant` (the trial's variant and repeat, `null` outside a study).
 *
 * @since 0.7.0
 * @category models
 */
export interface CacheNamespace {
  readonly repeat: number
  readonly visit: number
  readonly variant: string | null
}

/**
 * The study variant of a suite member's experiment id: a study trial
 * `p<version>-<variant>-r<repeat>` is `<variant>-r<repeat>` (the protocol version left out, so
 * a new protocol version reuses the answers of unchanged requests); any other id is `null`
 * (plain suite members share the cache like separate experiments do).
 *
 * @since 0.7.0
 * @category constructors
 */
export const variantOf = (experimentId: string | undefined): string | null => {
  if (experimentId === undefined) return null
  const m = /^p\d+-(.+-r\d+)$/.exec(experimentId)
  return m === null ? null : m[1]!
}

/**
 * Version of the key layout: part of every key, so a change of layout never serves old rows.
 *
 * @since 0.7.0
 * @category constants
 */
export const KEY_VERSION = 1

/**
 * The cache key of a call (32 hex: `Json.digest`, BLAKE2b-512 cut to 128 bits, as pipeline ids):
 * the digest of the canonical JSON of
 * `{ v: KEY_VERSION, material, namespace }`. `material` must be strict JSON and must not hold
 * a secret (only its digest is stored, but the rule is that no secret enters it at all).
 *
 * @since 0.7.0
 * @category constructors
 */
export const keyOf = (material: Json, namespace: CacheNamespace): string =>
  digest(canonicalJsonUnsafe({ v: KEY_VERSION, material, namespace: namespace as unknown as Json }))

/**
 * Token usage found in an output, for the "tokens saved" of a cache hit: an object with a
 * `usage` field holding `promptTokens` / `completionTokens` / `totalTokens` (what `chat`
 * returns), or `prompt_tokens` / `completion_tokens` / `total_tokens` (the OpenAI wire form);
 * `null` when there is none.
 *
 * @since 0.7.0
 * @category getters
 */
export const usageOf = (
  output: unknown
): { readonly promptTokens: number; readonly completionTokens: number; readonly totalTokens: number } | null => {
  if (!Predicate.isObject(output)) return null
  const u = (output as { readonly usage?: unknown }).usage
  if (!Predicate.isObject(u)) return null
  const r = u as Record<string, unknown>
  const num = (a: string, b: string): number | undefined => {
    const v = r[a] ?? r[b]
    return typeof v === "number" && Number.isFinite(v) ? v : undefined
  }
  const prompt = num("promptTokens", "prompt_tokens")
  const completion = num("completionTokens", "completion_tokens")
  const total = num("totalTokens", "total_tokens")
  if (prompt === undefined && completion === undefined && total === undefined) return null
  return {
    promptTokens: prompt ?? 0,
    completionTokens: completion ?? 0,
    totalTokens: total ?? (prompt ?? 0) + (completion ?? 0)
  }
}

/**
 * What a task's own cache key function can read before any lease is taken: the `options` of
 * the resources of a pool (base URLs, default models, and secrets too: a key function must
 * keep only public fields, see `Chat`'s endpoint identity), `[]` for an unknown pool.
 *
 * @since 0.7.0
 * @category models
 */
export interface CacheKeyEnv {
  readonly resourceOptions: (pool: string) => Effect.Effect<ReadonlyArray<Readonly<Record<string, unknown>>>>
  /**
   * Where the call is made (since 0.15.0; absent when a key is computed outside a run): for a
   * key whose request depends on the place, as the `judge`'s candidate order does (seeded by
   * the pipeline id, the task's position and its visit).
   */
  readonly place?: CachePlace | undefined
}

/**
 * Where an attempt runs, as a task's own cache key function and its {@link CacheHitFn} see it:
 * the pipeline id, the task's position in the pipeline (`seq`) and the station's `visit` (0
 * outside control flow). The attempt number is never part of it: a retry is the same call.
 *
 * @since 0.15.0
 * @category models
 */
export interface CachePlace {
  readonly pipelineId: string
  readonly seq: number
  readonly visit: number
}

/**
 * What a task's {@link CacheHitFn} may do when the cache serves its output: report the
 * metrics its body would have reported (`reportMetric`, as `TaskContext.reportMetric`: a
 * pipeline-scope metric of the served pipeline unless `scope: "run"`), at its {@link CachePlace}.
 *
 * @since 0.15.0
 * @category models
 */
export interface CacheHitContext extends CachePlace {
  readonly reportMetric: TaskContext["reportMetric"]
}

/**
 * A task's `onCacheHit` option: run by the runner when the call cache serves the task's output
 * (the body does not run), with the served output, to redo what the body does beside returning
 * it, such as the `judge`'s metrics. A failure fails the attempt as the body's would.
 *
 * @since 0.15.0
 * @category models
 */
export type CacheHitFn = (output: unknown, ctx: CacheHitContext) => Effect.Effect<void, unknown>

/**
 * A task's own cache key material (the `cacheKey` task option): given the input, the strict
 * JSON that determines the output, or `undefined` when this input must not be cached. Without
 * one, the material is the task's fingerprint (code digest included) and its input.
 *
 * @since 0.7.0
 * @category models
 */
export type CacheKeyFn = (input: unknown, env: CacheKeyEnv) => Effect.Effect<Json | undefined>
