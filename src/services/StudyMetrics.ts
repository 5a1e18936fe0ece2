/**
 * The metrics of a study's trials, read from what a study's root records: the declared metrics
 * of the study file (`metrics:`, see `Study.MetricDecl`), the built-in runtime metrics
 * (`Study.BUILTIN_METRICS`) and the metrics tasks report (`ctx.reportMetric`) that an
 * objective names without declaring them.
 *
 * **Where each value comes from.**
 *
 * | metric | read from |
 * | --- | --- |
 * | declared, `from: { output }` | the final output (decoded payload) of each succeeded pipeline of the trial |
 * | declared, `from: { metric }`; reported | each pipeline's latest value of the pipeline-scope metric (every run of the root); a reported metric's trial value is the member-scoped run metric `experiment:ID:NAME` when one exists |
 * | `calls`, `tokens`, `costUsd`, `wallMs` | the trial's usage row (`study_trials`: what the study's control metered, summed across resumes), plus for `calls`, `tokens` and `costUsd` each `cache_hit` attempt at the figures its cache entry recorded when the call was made (`decision.cache.usage`; issue 18 trial F3: a hit costs $0, and averaged with paid trials it read as a cheaper variant; what the study paid stays in the usage row, `study report`'s Run section); `costUsd` is left empty (no value, never 0) for a trial with calls (or hits) that had tokens but no price (`TrialValues.unpricedCalls` counts them) |
 * | `tokensIn`, `tokensOut` | the tokens billed: `tokensIn` / `tokensOut` of every attempt of the trial's pipelines (every run; the attempts' token columns, issue 18): a failed attempt's call counts (it was billed), a `cache_hit` at the tokens its entry recorded; attempts whose tokens were estimated (no `usage` from the server) are counted in `TrialValues.estimatedAttempts` |
 * | `latencyP95Ms` | the execution time of each succeeded pipeline of the trial that no cache hit served (a cache entry keeps no latency: such a pipeline's time is not its calls'): the sum over its attempts (every run) of `durationMs` (an attempt runs from the moment it holds a worker slot to its end, so it includes waiting for a pool lease, a rate limiter or the server), plus the back-off delay (`decision.delayMs`) after each attempt that was retried; not the time the pipeline waited for a worker slot (its admission, between its tasks or before a retry): that is the study's own queue, not the variant's (see docs/statistics.md) |
 * | `retries`, `rateLimited` | the trial's attempts: `attemptNo > 1`, and `errorClass = rate_limit` |
 *
 * **Cases.** A case is one row of the protocol's source: the same case in every trial. Its key
 * is the pipeline's explicit key when it has one, else its seed's digest (and the source's
 * `repeats` sample number when above 0): a content-addressed pipeline id also digests the
 * pipeline's definition, which differs between variants, so it cannot pair them.
 *
 * Only succeeded pipelines give case values (a failed pipeline has no final output).
 *
 * @since 0.6.0
 */
import { Effect, Stream } from "effect"
import type { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import { schemaCodecName } from "../domain/Codec.js"
import { roundUsd } from "../domain/Pricing.js"
import { canonicalJsonUnsafe, isStrictJson } from "../domain/Json.js"
import type { PipelineId } from "../domain/Ids.js"
import type { TaskStore } from "../domain/TaskStore.js"
import { defaultPipelineId } from "../domain/Pipeline.js"
import * as Study from "../domain/Study.js"
import { memberDigest, memberDigestOf } from "../domain/Suite.js"
import { decodePayload } from "./internal/export.js"
import * as Suite from "./Suite.js"
import * as CallCache from "./CallCache.js"
import { SuiteCatalog } from "./SuiteCatalog.js"
import type { TrialUsage } from "./StudyControl.js"

// ---------------------------------------------------------------------------------------------
// Definitions
// ---------------------------------------------------------------------------------------------

/**
 * One metric as a comparison uses it: `name`, `unit`, `direction` (better is higher, lower or
 * closer to a target), `level` (`case`: one value per case, paired across variants; `trial`:
 * one value per trial, compared across repeats), `kind` (`declared` in the study file,
 * `builtin`, or `reported` by tasks and named by an objective without a declaration),
 * `source` (where the value comes from, in words) and the declaration (`decl`, declared only).
 *
 * @since 0.6.0
 * @category models
 */
export interface MetricDefinition {
  readonly name: string
  readonly unit: string
  readonly direction: Study.Direction
  readonly level: "case" | "trial"
  readonly kind: "declared" | "builtin" | "reported"
  readonly source: string
  readonly decl?: Study.MetricDecl | undefined
}

const sourceText = (m: Study.MetricDecl): string => {
  const from = "output" in m.from ? `output${m.from.output === "" ? "" : `.${m.from.output}`}` : `metric ${m.from.metric}`
  switch (m.reducer) {
    case "mean":
      return `mean over cases of ${from}`
    case "rate":
      return `share of cases whose ${from} equals ${canonicalJsonUnsafe(m.equals ?? true)}`
    case "p50":
      return `median over pipelines of ${from}`
    case "p95":
      return `95th percentile over pipelines of ${from}`
    case "sum":
      return `sum over pipelines of ${from}`
  }
}

/**
 * The metrics of a study: its declared metrics (in file order), the built-in ones, then every
 * other metric named by an objective or in `extra` (a metric reported by tasks; case-level,
 * the mean over the trial's pipelines, `maximize` unless its objective says otherwise).
 *
 * @param declared the study file's `metrics:`
 * @param objectives the study's objectives (their directions are the defaults of reported metrics)
 * @param extra more metric names to resolve (e.g. `metricThreshold` stop conditions)
 * @since 0.6.0
 * @category metrics
 */
export const definitions = (
  declared: ReadonlyArray<Study.MetricDecl>,
  objectives: ReadonlyArray<{ readonly metric: string; readonly direction: Study.Direction }>,
  extra: ReadonlyArray<string> = []
): ReadonlyArray<MetricDefinition> => {
  const out: Array<MetricDefinition> = declared.map((m) => ({
    name: m.name,
    unit: m.unit ?? (m.reducer === "rate" ? "ratio" : ""),
    direction: m.direction ?? "maximize",
    level: Study.levelOfReducer(m.reducer),
    kind: "declared",
    source: sourceText(m),
    decl: m
  }))
  for (const [name, b] of Object.entries(Study.BUILTIN_METRICS)) {
    if (out.some((d) => d.name === name)) continue
    out.push({ name, unit: b.unit, direction: b.direction, level: "trial", kind: "builtin", source: `built in: ${b.description}` })
  }
  for (const name of [...objectives.map((o) => o.metric), ...extra]) {
    if (out.some((d) => d.name === name)) continue
    const o = objectives.find((x) => x.metric === name)
    out.push({
      name,
      unit: "",
      direction: o?.direction ?? "maximize",
      level: "case",
      kind: "reported",
      source: `reported by tasks: mean over pipelines of metric ${name} (or the trial's run metric)`
    })
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/**
 * One metric's per-pipeline values in one trial, in columns (one entry per succeeded pipeline
 * with a value): `caseIndex[k]` is the entry's case (an index into {@link TrialValues}'s
 * `caseKeys`), `pipeline[k]` its pipeline (an index into `pipelines`), `value[k]` the value.
 * Columns of typed arrays rather than one object per pipeline: a study of a million pipelines
 * is read into tens of megabytes.
 *
 * @since 0.7.0
 * @category models
 */
export interface TrialCases {
  readonly caseIndex: Int32Array
  readonly pipeline: Int32Array
  readonly value: Float64Array
}

/**
 * A trial's metric values: `values` (metric -> the trial's value; absent when unknown),
 * `cases` (metric -> its {@link TrialCases}, for every metric with per-pipeline values:
 * case-level metrics, declared trial-level ones, `latencyP95Ms` as each pipeline's latency),
 * `caseKeys` (the case keys of the read, shared by every trial it returned: the same index is
 * the same case in every trial), and the trial's stored pipelines (any state): `pipelineCount`
 * of them, `pipelineId(i)` the id of the `i`-th (what `TrialCases.pipeline` indexes),
 * `pipelines()` every id in that order. The ids are kept as 16 bytes each and spelled out on
 * demand (a study of a million pipelines holds no million strings).
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialValues {
  readonly trialId: string
  readonly values: Readonly<Record<string, number>>
  readonly cases: Readonly<Record<string, TrialCases>>
  readonly caseKeys: ReadonlyArray<string>
  readonly pipelineCount: number
  readonly pipelineId: (i: number) => string
  readonly pipelines: () => ReadonlyArray<string>
  /**
   * Of the attempts `tokensIn` / `tokensOut` count, those whose tokens were estimated (the
   * server gave no usage; since 0.9.0). Absent when neither metric was read.
   */
  readonly estimatedAttempts?: number | undefined
  /**
   * The trial's model calls with tokens but no price (`TrialUsage.unpriced`), when `costUsd`
   * was read and there were some: its `costUsd` is then left out of `values` (the cost is
   * unknown, not $0; since 0.9.0).
   */
  readonly unpricedCalls?: number | undefined
  /**
   * The trial's attempts served from the call cache (`cache_hit`), when there were some and the
   * usage metrics were read (since 0.9.0). `calls`, `tokens`, `tokensIn`, `tokensOut` and
   * `costUsd` count each at the figures its cache entry recorded when the call was made (what
   * the variant costs, not what this study paid: that is the trial's usage row); `latencyP95Ms`
   * leaves out the pipelines they served (an entry keeps no latency).
   */
  readonly cacheHits?: number | undefined
  /**
   * The part of the trial's cost (US dollars) its evaluator tasks' calls made (a `judge`'s),
   * when `read` was given `evaluatorTasks` and they cost anything; `costUsd` includes it: it is
   * what the trial cost (since 0.13.0, tester16b N7).
   */
  readonly judgeCostUsd?: number | undefined
  /**
   * What the call cache did for the trial (since 0.12.0), when it did anything and the
   * attempts were read: `hits` (answers served from the cache) and `misses` (calls its cached
   * tasks made), counted from the attempt rows with `CallCache.addAttempt`, as `StoreStats.cache`
   * and `study run`'s per-trial line count them.
   */
  readonly cache?: { readonly hits: number; readonly misses: number } | undefined
  /**
   * Per-pipeline shares of trial-level usage metrics (since 0.14.0, fix16y), for the metrics
   * `read` was asked for in `perPipeline` (among {@link PER_PIPELINE_METRICS}): metric -> each
   * succeeded pipeline's figure summed over its attempts (`costUsd` in US dollars, `tokensIn`,
   * `tokensOut`, `tokens` = in + out; a cache hit at what its entry recorded; every attempt,
   * failed ones included). A pipeline with a call of unknown cost has no `costUsd` entry, and a
   * trial without a `costUsd` value none at all. These pair two variants case by case in the
   * Pareto front (`StudyCompare`); the trial's own value stays `values[metric]` (the metered
   * usage), which may count calls no pipeline's attempts hold.
   */
  readonly perPipeline?: Readonly<Record<string, TrialCases>> | undefined
}

/**
 * The built-in trial-level metrics that also have a per-pipeline share (each pipeline's
 * attempts' figures): `costUsd`, `tokens`, `tokensIn`, `tokensOut`. See `TrialValues.perPipeline`.
 *
 * @since 0.14.0
 * @category metrics
 */
export const PER_PIPELINE_METRICS: ReadonlySet<string> = new Set(["costUsd", "tokens", "tokensIn", "tokensOut"])

/** A value as a number (booleans 0/1), else undefined. */
const numeric = (v: unknown): number | undefined =>
  typeof v === "number" && Number.isFinite(v) ? v : typeof v === "boolean" ? (v ? 1 : 0) : undefined

/**
 * The value at a dot path inside a JSON value (`""`: the value itself; a number indexes a
 * list); `undefined` when the path leads nowhere.
 *
 * @since 0.6.0
 * @category metrics
 */
export const atPath = (value: unknown, path: string): unknown => {
  if (path === "") return value
  let v: unknown = value
  for (const seg of path.split(".")) {
    if (Array.isArray(v) && /^(0|[1-9][0-9]*)$/.test(seg)) v = v[Number(seg)]
    else if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, seg)) {
      v = (v as Record<string, unknown>)[seg]
    } else return undefined
  }
  return v
}

/**
 * One pipeline's value of a declared metric: the number at the path (booleans 0/1) for
 * `mean`, `p50`, `p95` and `sum`; for `rate`, 1 when the value equals `equals` (canonical
 * JSON; `true` by default) else 0, and `undefined` when the path leads nowhere.
 *
 * @since 0.6.0
 * @category metrics
 */
export const pipelineValue = (m: Study.MetricDecl, raw: unknown): number | undefined => {
  if (raw === undefined) return undefined
  if (m.reducer !== "rate") return numeric(raw)
  const wanted = canonicalJsonUnsafe(m.equals ?? true)
  return isStrictJson(raw) && canonicalJsonUnsafe(raw) === wanted ? 1 : 0
}

/**
 * The 95th or 50th percentile (Hyndman & Fan 1996, type 7: linear interpolation between order
 * statistics), `NaN` for no values.
 */
const quantile7 = (xs: ReadonlyArray<number>, p: number): number => {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  const h = (s.length - 1) * p
  const lo = Math.floor(h)
  const hi = Math.min(lo + 1, s.length - 1)
  return s[lo]! + (h - lo) * (s[hi]! - s[lo]!)
}

/**
 * A trial's value of a declared metric from its pipelines' values (see `Study.Reducer`);
 * `undefined` for no values.
 *
 * @since 0.6.0
 * @category metrics
 */
export const reduce = (reducer: Study.Reducer, xs: ReadonlyArray<number>): number | undefined => {
  if (xs.length === 0) return undefined
  switch (reducer) {
    case "mean":
    case "rate":
      return xs.reduce((a, b) => a + b, 0) / xs.length
    case "p50":
      return quantile7(xs, 0.5)
    case "p95":
      return quantile7(xs, 0.95)
    case "sum":
      return xs.reduce((a, b) => a + b, 0)
  }
}

/**
 * The case key of a stored pipeline (see the module docs): its explicit local key, else
 * `seed:<seedDigest>` (with `#<repeat>` for a source repeat above 0).
 *
 * @since 0.6.0
 * @category metrics
 */
export const caseKeyOf = (p: {
  readonly localKey: string | null
  readonly specDigest: string
  readonly seedDigest: string
  readonly repeat: number | null
}): string => {
  const repeat = p.repeat ?? 0
  const contentAddressed = p.localKey === null || p.localKey === defaultPipelineId(p.specDigest, p.seedDigest, repeat)
  return contentAddressed ? `seed:${p.seedDigest}${repeat > 0 ? `#${repeat}` : ""}` : p.localKey!
}

/** Two lowercase hex digits per byte value. */
const HEX_PAIRS: ReadonlyArray<string> = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"))

/** The value of a lowercase hex digit's character code (the ids' digests are lowercase hex). */
const nibble = (c: number): number => c <= 57 ? c - 48 : c - 87

/**
 * What the read keeps of one trial's pipelines while it reads, in growable typed columns by
 * position (`n` used): the ids as 16 bytes each (a member pipeline's id is its member digest, a
 * `-` and 32 hex digits: the digits are kept, see `Suite.memberPipelineId`), the case number,
 * whether it succeeded, its latency (the execution time of a succeeded pipeline read from its
 * attempts, see the module docs, else NaN),
 * the values of the declared output metrics and of the task-reported metrics (NaN: none). The
 * columns but the ids are dropped once the trial's values are built.
 */
interface Acc {
  readonly trialId: string
  readonly member: string
  n: number
  ids: Uint8Array
  caseIndex: Int32Array
  ok: Uint8Array
  latency: Float64Array
  /** declared metric from an output -> its value per position */
  outputs: Map<string, Float64Array>
  /** task-reported metric -> its value per position */
  reported: Map<string, Float64Array>
  /** pipeline id -> position, built when a task-reported metric needs it */
  positions: Map<string, number> | undefined
  /** open-addressing table of positions by id bytes (-1: empty), built when attempts are joined */
  slots: Int32Array | undefined
  tokensIn: number
  tokensOut: number
  estimated: number
  retries: number
  rateLimited: number
  /** the trial's `cache_hit` attempts, and the figures their entries recorded when the call was made */
  hits: number
  hitTokensIn: number
  hitTokensOut: number
  hitCostUsd: number
  /** hits whose entry recorded tokens but no cost (the cost of the call is unknown) */
  hitUnpriced: number
  /** the call cache's figures from the trial's attempts (`CallCache.addAttempt`) */
  cache: CallCache.CacheStats
  /** positions of the pipelines with a cache hit (left out of the latency) */
  hitPositions: Set<number>
  /** the cost its evaluator tasks' attempts recorded (cache hits at their entries' cost) */
  judgeCostUsd: number
  /** per-pipeline usage metric -> its figure per position (0: none; NaN: unknown), when asked for */
  perPipe: Map<string, Float64Array>
}

const CHUNK = 500
const ID_BYTES = 16

const newAcc = (trialId: string, member: string): Acc => ({
  trialId,
  member,
  n: 0,
  ids: new Uint8Array(64 * ID_BYTES),
  caseIndex: new Int32Array(64),
  ok: new Uint8Array(64),
  latency: new Float64Array(64),
  outputs: new Map(),
  reported: new Map(),
  positions: undefined,
  slots: undefined,
  tokensIn: 0,
  tokensOut: 0,
  estimated: 0,
  retries: 0,
  rateLimited: 0,
  hits: 0,
  hitTokensIn: 0,
  hitTokensOut: 0,
  hitCostUsd: 0,
  hitUnpriced: 0,
  cache: CallCache.emptyStats,
  hitPositions: new Set(),
  judgeCostUsd: 0,
  perPipe: new Map()
})

/** Appends one pipeline (its id matches `Suite`'s member id shape) to a trial's columns. */
const push = (acc: Acc, pipelineId: string, caseNo: number, ok: boolean, latency: number): void => {
  if (acc.n === acc.caseIndex.length) {
    const cap = acc.n * 2
    const ids = new Uint8Array(cap * ID_BYTES)
    ids.set(acc.ids)
    acc.ids = ids
    const caseIndex = new Int32Array(cap)
    caseIndex.set(acc.caseIndex)
    acc.caseIndex = caseIndex
    const okCol = new Uint8Array(cap)
    okCol.set(acc.ok)
    acc.ok = okCol
    const lat = new Float64Array(cap)
    lat.set(acc.latency)
    acc.latency = lat
  }
  const i = acc.n++
  const from = acc.member.length + 1
  for (let j = 0; j < ID_BYTES; j++) {
    acc.ids[i * ID_BYTES + j] = (nibble(pipelineId.charCodeAt(from + 2 * j)) << 4) | nibble(pipelineId.charCodeAt(from + 2 * j + 1))
  }
  acc.caseIndex[i] = caseNo
  acc.ok[i] = ok ? 1 : 0
  acc.latency[i] = latency
}

/** The id of a trial's `i`-th pipeline, spelled out from its 16 kept bytes. */
const idOf = (member: string, ids: Uint8Array, i: number): string => {
  let s = `${member}-`
  for (let j = i * ID_BYTES, end = j + ID_BYTES; j < end; j++) s += HEX_PAIRS[ids[j]!]!
  return s
}

/** The first four id bytes of position `i` as an unsigned number (the ids are digests: uniform). */
const idHash = (ids: Uint8Array, i: number): number =>
  ((ids[i * ID_BYTES]! << 24) | (ids[i * ID_BYTES + 1]! << 16) | (ids[i * ID_BYTES + 2]! << 8) | ids[i * ID_BYTES + 3]!) >>> 0

/**
 * The position of a member pipeline id in a trial's columns, `-1` when it is not one of them:
 * an open-addressing table over the kept id bytes (4 bytes per slot, at most half full) rather
 * than a map of id strings, so joining a million attempts costs megabytes, not a string per id.
 */
const positionOf = (acc: Acc, pipelineId: string, scratch: Uint8Array): number => {
  const from = acc.member.length + 1
  if (pipelineId.length !== from + 2 * ID_BYTES) return -1
  for (let j = 0; j < ID_BYTES; j++) {
    scratch[j] = (nibble(pipelineId.charCodeAt(from + 2 * j)) << 4) | nibble(pipelineId.charCodeAt(from + 2 * j + 1))
  }
  let table = acc.slots
  if (table === undefined) {
    let size = 16
    while (size < acc.n * 2) size *= 2
    table = new Int32Array(size).fill(-1)
    for (let i = 0; i < acc.n; i++) {
      let h = idHash(acc.ids, i) & (size - 1)
      while (table[h] !== -1) h = (h + 1) & (size - 1)
      table[h] = i
    }
    acc.slots = table
  }
  const mask = table.length - 1
  let h = (((scratch[0]! << 24) | (scratch[1]! << 16) | (scratch[2]! << 8) | scratch[3]!) >>> 0) & mask
  for (;;) {
    const i = table[h]!
    if (i === -1) return -1
    let same = true
    for (let j = 0; j < ID_BYTES; j++) {
      if (acc.ids[i * ID_BYTES + j] !== scratch[j]) {
        same = false
        break
      }
    }
    if (same) return i
    h = (h + 1) & mask
  }
}

/** The back-off delay (ms) a retried attempt's decision waited before the next one, else 0. */
const retryDelayOf = (decision: unknown): number => {
  if (typeof decision !== "object" || decision === null) return 0
  const d = decision as { readonly retry?: unknown; readonly delayMs?: unknown }
  return d.retry === true && typeof d.delayMs === "number" && Number.isFinite(d.delayMs) && d.delayMs > 0 ? d.delayMs : 0
}

/**
 * What a `cache_hit` attempt's entry recorded of the call that stored it (`decision.cache.usage`:
 * tokens and, when priced, the cost), or `undefined` when it recorded none.
 */
const hitUsageOf = (
  decision: unknown
): { readonly promptTokens: number; readonly completionTokens: number; readonly costUsd: number | undefined } | undefined => {
  if (typeof decision !== "object" || decision === null) return undefined
  const cache = (decision as { readonly cache?: unknown }).cache
  if (typeof cache !== "object" || cache === null) return undefined
  const u = (cache as { readonly usage?: unknown }).usage
  if (typeof u !== "object" || u === null) return undefined
  const r = u as { readonly promptTokens?: unknown; readonly completionTokens?: unknown; readonly costUsd?: unknown }
  const num = (v: unknown): number | undefined => typeof v === "number" && Number.isFinite(v) ? v : undefined
  return { promptTokens: num(r.promptTokens) ?? 0, completionTokens: num(r.completionTokens) ?? 0, costUsd: num(r.costUsd) }
}

/** A column of NaN as long as the trial's pipelines, created on first use. */
const column = (m: Map<string, Float64Array>, name: string, length: number): Float64Array => {
  let c = m.get(name)
  if (c === undefined) {
    c = new Float64Array(length).fill(NaN)
    m.set(name, c)
  }
  return c
}

/** The entries of a per-position column at the succeeded positions with a finite value. */
const casesOf = (acc: Acc, col: ArrayLike<number> | undefined): TrialCases => {
  const n = acc.n
  let k = 0
  if (col !== undefined) for (let i = 0; i < n; i++) if (acc.ok[i] === 1 && Number.isFinite(col[i]!)) k++
  const out = { caseIndex: new Int32Array(k), pipeline: new Int32Array(k), value: new Float64Array(k) }
  if (col === undefined) return out
  for (let i = 0, j = 0; i < n; i++) {
    if (acc.ok[i] !== 1 || !Number.isFinite(col[i]!)) continue
    out.caseIndex[j] = acc.caseIndex[i]!
    out.pipeline[j] = i
    out.value[j++] = col[i]!
  }
  return out
}

/**
 * Reads the metric values of some trials of a study from the root's merged view (see the module
 * docs for the sources). Streams the pipelines once, keeping per pipeline only typed-array
 * columns (its id as 16 bytes, case number, state, latency: 29 bytes); then the attempts and the
 * task-reported metrics; then, one trial at a time, its outputs in chunks of 500 (decoded and
 * dropped), its values built and its columns dropped. What stays per pipeline is its id's 16
 * bytes and, per metric with per-pipeline values, 16 bytes (`TrialCases`).
 *
 * @param input `studyId`; `trialIds`; `metrics`: the definitions to compute (see
 *   {@link definitions}; a name not among them is not computed); `usage`: each trial's metered
 *   usage (the study table's row)
 * @returns per trial its {@link TrialValues}
 * @since 0.6.0
 * @category reading
 */
export const read = (input: {
  readonly studyId: string
  readonly trialIds: ReadonlyArray<string>
  readonly metrics: ReadonlyArray<MetricDefinition>
  readonly usage: ReadonlyMap<string, TrialUsage>
  /** The view to read (default: the root's merged view). */
  readonly view?: string | undefined
  /** The evaluator tasks' names (`judge`): their attempts' cost is each trial's `judgeCostUsd`. */
  readonly evaluatorTasks?: ReadonlySet<string> | undefined
  /**
   * The metrics of {@link PER_PIPELINE_METRICS} (and of `metrics`) whose per-pipeline shares to
   * keep as `TrialValues.perPipeline` (8 bytes per pipeline each while reading; default none).
   */
  readonly perPipeline?: ReadonlySet<string> | undefined
}): Effect.Effect<ReadonlyMap<string, TrialValues>, StoreUnavailable | ConfigError, SuiteCatalog> =>
  Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    const store = yield* catalog.view(input.view)
    const accs = new Map<string, Acc>()
    const byDigest = new Map<string, Acc>()
    for (const id of input.trialIds) {
      const member = memberDigest(input.studyId, id)
      const acc = newAcc(id, member)
      accs.set(id, acc)
      byDigest.set(member, acc)
    }
    const wanted = new Set(input.trialIds)
    const names = new Set(input.metrics.map((m) => m.name))
    const caseKeys: Array<string> = []
    const caseNo = new Map<string, number>()
    yield* Stream.runForEach(store.streamPipelines(), (p) =>
      Effect.sync(() => {
        const d = memberDigestOf(p.pipelineId)
        const acc = d === undefined ? undefined : byDigest.get(d)
        if (acc === undefined) return
        const key = caseKeyOf(p)
        let c = caseNo.get(key)
        if (c === undefined) {
          c = caseKeys.length
          caseKeys.push(key)
          caseNo.set(key, c)
        }
        const ok = p.state === "succeeded"
        // the latency is summed from the attempts below (NaN: none read)
        push(acc, p.pipelineId, c, ok, NaN)
      }))
    // the ids stay: trimmed to their length
    for (const acc of accs.values()) acc.ids = acc.ids.slice(0, acc.n * ID_BYTES)
    // the attempts: retries, 429s, the tokens billed (a cache hit made no call) and the
    // pipelines' execution time (the latency: attempts' durations plus retry back-off)
    const needTokens = names.has("tokensIn") || names.has("tokensOut")
    const needLatency = names.has("latencyP95Ms")
    // the usage metrics count a cache hit at what its call cost when made (issue 18 trial F3)
    const needHits = needTokens || needLatency || names.has("calls") || names.has("tokens") || names.has("costUsd")
    const scratch = new Uint8Array(ID_BYTES)
    // the judge's share of the cost: the attempts of the evaluator tasks (tester16b N7)
    const judges = input.evaluatorTasks ?? new Set<string>()
    // per-pipeline shares of usage metrics (the Pareto front pairs variants case by case on them)
    const perPipe = [...(input.perPipeline ?? [])].filter((m) => PER_PIPELINE_METRICS.has(m) && names.has(m))
    const pipeColumn = (acc: Acc, name: string): Float64Array => {
      let c = acc.perPipe.get(name)
      if (c === undefined) {
        c = new Float64Array(acc.n)
        acc.perPipe.set(name, c)
      }
      return c
    }
    if (names.has("retries") || names.has("rateLimited") || needHits || judges.size > 0) {
      yield* Stream.runForEach(store.streamAttempts(), (a) =>
        Effect.sync(() => {
          const d = memberDigestOf(a.pipelineId)
          const acc = d === undefined ? undefined : byDigest.get(d)
          if (acc === undefined) return
          if (perPipe.length > 0) {
            const i = positionOf(acc, a.pipelineId, scratch)
            if (i >= 0) {
              const hit = a.outcome === "cache_hit" ? hitUsageOf(a.decision) : undefined
              const tin = a.outcome === "cache_hit" ? hit?.promptTokens ?? 0 : a.tokensIn ?? 0
              const tout = a.outcome === "cache_hit" ? hit?.completionTokens ?? 0 : a.tokensOut ?? 0
              // a call with tokens and no price has an unknown cost: NaN stays NaN
              const cost = a.outcome === "cache_hit" ? hit?.costUsd ?? (tin + tout > 0 ? NaN : 0) : a.costUsd ?? (tin + tout > 0 ? NaN : 0)
              for (const m of perPipe) {
                const col = pipeColumn(acc, m)
                col[i] = col[i]! + (m === "costUsd" ? cost : m === "tokensIn" ? tin : m === "tokensOut" ? tout : tin + tout)
              }
            }
          }
          if (judges.has(a.taskName)) {
            const cost = a.outcome === "cache_hit" ? hitUsageOf(a.decision)?.costUsd : a.costUsd
            if (cost !== undefined && cost !== null) acc.judgeCostUsd += cost
          }
          if (needLatency) {
            const i = positionOf(acc, a.pipelineId, scratch)
            if (i >= 0 && acc.ok[i] === 1) {
              const ms = Math.max(0, a.durationMs) + retryDelayOf(a.decision)
              acc.latency[i] = Number.isNaN(acc.latency[i]!) ? ms : acc.latency[i]! + ms
            }
          }
          if (a.attemptNo > 1) acc.retries++
          if (a.errorClass === "rate_limit") acc.rateLimited++
          acc.cache = CallCache.addAttempt(acc.cache, a.outcome, a.decision)
          if (a.outcome === "cache_hit") {
            // served by the call cache: counted at the figures its entry recorded when the call
            // was made (a hit is $0 and ~0 ms; averaged with paid trials it would read as a
            // cheaper, faster variant); its pipeline's time is not a call's: no latency
            acc.hits++
            const u = hitUsageOf(a.decision)
            if (u !== undefined) {
              acc.hitTokensIn += u.promptTokens
              acc.hitTokensOut += u.completionTokens
              if (u.costUsd !== undefined) acc.hitCostUsd += u.costUsd
              else if (u.promptTokens + u.completionTokens > 0) acc.hitUnpriced++
            }
            if (needLatency) {
              const i = positionOf(acc, a.pipelineId, scratch)
              if (i >= 0) acc.hitPositions.add(i)
            }
            return
          }
          if (a.tokensIn === null && a.tokensOut === null) return
          acc.tokensIn += a.tokensIn ?? 0
          acc.tokensOut += a.tokensOut ?? 0
          if (a.tokensEstimated) acc.estimated++
        }))
    }
    // task-reported metrics: pipeline scope (latest run wins) and member-scoped run metrics
    const reportedNames = new Set(
      input.metrics.flatMap((m) => m.kind === "reported" ? [m.name] : m.decl !== undefined && "metric" in m.decl.from ? [m.decl.from.metric] : [])
    )
    const memberScoped = new Map<string, Map<string, number>>()
    if (reportedNames.size > 0) {
      for (const r of yield* store.listRuns) {
        for (const m of yield* store.metrics({ runId: r.runId })) {
          if (!reportedNames.has(m.name) && m.pipelineId !== null) continue
          const v = numeric(m.value)
          if (v === undefined) continue
          if (m.pipelineId === null) {
            const parsed = Suite.parseMemberMetric(m.name)
            if (parsed === undefined || !wanted.has(parsed.experimentId) || !reportedNames.has(parsed.name)) continue
            const ms = memberScoped.get(parsed.experimentId) ?? new Map<string, number>()
            ms.set(parsed.name, v)
            memberScoped.set(parsed.experimentId, ms)
          } else {
            const d = memberDigestOf(m.pipelineId)
            const acc = d === undefined ? undefined : byDigest.get(d)
            if (acc === undefined) continue
            if (acc.positions === undefined) {
              const positions = new Map<string, number>()
              for (let i = 0; i < acc.n; i++) positions.set(idOf(acc.member, acc.ids, i), i)
              acc.positions = positions
            }
            const i = acc.positions.get(m.pipelineId)
            if (i === undefined) continue
            column(acc.reported, m.name, acc.n)[i] = v
          }
        }
      }
    }
    // per trial: its final outputs (declared output metrics), then its values; its columns are
    // dropped before the next trial's outputs
    const outputMetrics = input.metrics.flatMap((m) => m.decl !== undefined && "output" in m.decl.from ? [{ name: m.name, decl: m.decl, path: m.decl.from.output }] : [])
    const out = new Map<string, TrialValues>()
    for (const trialId of input.trialIds) {
      const acc = accs.get(trialId)!
      if (outputMetrics.length > 0) yield* readOutputs(store, acc, outputMetrics)
      const values = valuesOf(acc, input.metrics, input.usage.get(trialId), memberScoped.get(trialId), caseKeys, needTokens)
      if (perPipe.length > 0) {
        // a trial without the metric's value (an unpriced call: no costUsd) has no shares of it
        const shares: Record<string, TrialCases> = {}
        for (const m of perPipe) if (values.values[m] !== undefined) shares[m] = casesOf(acc, acc.perPipe.get(m) ?? new Float64Array(acc.n))
        out.set(trialId, { ...values, perPipeline: shares })
      } else out.set(trialId, values)
      acc.caseIndex = new Int32Array(0)
      acc.ok = new Uint8Array(0)
      acc.latency = new Float64Array(0)
      acc.outputs = new Map()
      acc.reported = new Map()
      acc.positions = undefined
      acc.slots = undefined
      acc.hitPositions = new Set()
      acc.perPipe = new Map()
    }
    return out
  })

const utf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * A final output as a declared metric reads it: an output stored with its task's output Schema
 * (codec `schema`) is the JSON of its encoded form, read as such (the encoded side's field
 * names: what the study loader checks a path against); any other payload as the export decodes it.
 */
const outputValue = (artifact: Parameters<typeof decodePayload>[0], payload: Uint8Array | undefined): unknown => {
  if (payload !== undefined && artifact.codec === schemaCodecName) {
    try {
      return JSON.parse(utf8.decode(payload)) as unknown
    } catch {
      return undefined
    }
  }
  return decodePayload(artifact, payload)
}

/** Reads a trial's final outputs in chunks into its output columns. */
const readOutputs = (
  store: TaskStore,
  acc: Acc,
  outputMetrics: ReadonlyArray<{ readonly name: string; readonly decl: Study.MetricDecl; readonly path: string }>
): Effect.Effect<void, StoreUnavailable> =>
  Effect.gen(function*() {
    const positions: Array<number> = []
    for (let i = 0; i < acc.n; i++) if (acc.ok[i] === 1) positions.push(i)
    const cols = outputMetrics.map((m) => column(acc.outputs, m.name, acc.n))
    for (let s = 0; s < positions.length; s += CHUNK) {
      const chunk = positions.slice(s, s + CHUNK)
      const ids = chunk.map((i) => idOf(acc.member, acc.ids, i) as PipelineId)
      const bundles = yield* store.loadBundles(ids, { payloads: "final", artifacts: "final", tasks: false })
      for (let x = 0; x < chunk.length; x++) {
        const i = chunk[x]!
        const b = bundles.get(ids[x]!)
        if (b === undefined) continue
        for (const a of b.artifacts) {
          if (!a.artifact.active || a.artifact.seq < 0 || !a.artifact.isFinal) continue
          const value = outputValue(a.artifact, a.payload)
          for (let k = 0; k < outputMetrics.length; k++) {
            const m = outputMetrics[k]!
            const v = pipelineValue(m.decl, atPath(value, m.path))
            cols[k]![i] = v === undefined ? NaN : v
          }
        }
      }
    }
  })

/** A trial's {@link TrialValues} from its read columns. */
const valuesOf = (
  acc: Acc,
  metrics: ReadonlyArray<MetricDefinition>,
  usage: TrialUsage | undefined,
  runMetrics: ReadonlyMap<string, number> | undefined,
  caseKeys: ReadonlyArray<string>,
  tokensRead: boolean
): TrialValues => {
  const values: Record<string, number> = {}
  const cases: Record<string, TrialCases> = {}
  // cache hits count at what their calls cost when made (`hits`: 0 when the attempts were not read)
  const unpriced = (usage?.unpriced ?? 0) + acc.hitUnpriced
  for (const m of metrics) {
    if (m.kind === "builtin") {
      let v: number | undefined
      switch (m.name) {
        case "calls":
          v = usage === undefined && acc.hits === 0 ? undefined : (usage?.calls ?? 0) + acc.hits
          break
        case "tokens":
          v = usage === undefined && acc.hits === 0 ? undefined : (usage?.tokens ?? 0) + acc.hitTokensIn + acc.hitTokensOut
          break
        case "costUsd":
          // a call without a price has an unknown cost: no value rather than a sum that reads as complete
          v = unpriced > 0 ? undefined : acc.hits === 0 ? usage?.costUsd : roundUsd((usage?.costUsd ?? 0) + acc.hitCostUsd)
          break
        case "wallMs":
          v = usage?.timeMs
          break
        case "tokensIn":
          v = acc.tokensIn + acc.hitTokensIn
          break
        case "tokensOut":
          v = acc.tokensOut + acc.hitTokensOut
          break
        case "retries":
          v = acc.retries
          break
        case "rateLimited":
          v = acc.rateLimited
          break
        case "latencyP95Ms": {
          // the pipelines served from the call cache are left out: their entries keep no latency
          let col: ArrayLike<number> = acc.latency
          if (acc.hitPositions.size > 0) {
            const copy = Float64Array.from(acc.latency)
            for (const i of acc.hitPositions) copy[i] = NaN
            col = copy
          }
          const lat = casesOf(acc, col)
          cases[m.name] = lat
          v = lat.value.length === 0 ? undefined : quantile7(Array.from(lat.value), 0.95)
          break
        }
      }
      if (v !== undefined) values[m.name] = v
      continue
    }
    const col = m.decl === undefined
      ? acc.reported.get(m.name)
      : "output" in m.decl.from
      ? acc.outputs.get(m.name)
      : mapColumn(acc.reported.get(m.decl.from.metric), m.decl)
    const cs = casesOf(acc, col)
    cases[m.name] = cs
    const reduced = reduce(m.decl?.reducer ?? "mean", Array.from(cs.value))
    const runMetric = m.kind === "reported" ? runMetrics?.get(m.name) : undefined
    const v = runMetric ?? reduced
    if (v !== undefined) values[m.name] = v
  }
  const { ids, member, n } = acc
  const pipelineId = (i: number): string => {
    if (!(i >= 0 && i < n)) throw new RangeError(`pipeline ${i} of trial ${acc.trialId}: it has ${n}`)
    return idOf(member, ids, i)
  }
  return {
    trialId: acc.trialId,
    values,
    cases,
    caseKeys,
    pipelineCount: n,
    pipelineId,
    pipelines: () => Array.from({ length: n }, (_, i) => idOf(member, ids, i)),
    ...(tokensRead ? { estimatedAttempts: acc.estimated } : {}),
    ...(metrics.some((m) => m.kind === "builtin" && m.name === "costUsd") && unpriced > 0
      ? { unpricedCalls: unpriced }
      : {}),
    ...(acc.hits > 0 ? { cacheHits: acc.hits } : {}),
    ...(acc.judgeCostUsd > 0 ? { judgeCostUsd: roundUsd(acc.judgeCostUsd) } : {}),
    ...(acc.cache.hits + acc.cache.misses > 0 ? { cache: { hits: acc.cache.hits, misses: acc.cache.misses } } : {})
  }
}

/** A reported metric's column through a declaration (`rate` compares with `equals`). */
const mapColumn = (col: Float64Array | undefined, decl: Study.MetricDecl): Float64Array | undefined =>
  col === undefined ? undefined : col.map((x) => {
    if (Number.isNaN(x)) return NaN
    const v = pipelineValue(decl, x)
    return v === undefined ? NaN : v
  })
