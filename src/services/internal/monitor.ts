/**
 * The monitoring picture of a store: what `assay serve` (as JSON and as a dashboard) and
 * `assay watch` (as terminal text) show.
 *
 * - {@link readSnapshot} reads one picture of the selected run (or of every run) from a
 *   {@link StoreService} alone: counts and latency from `stats`, the throughput series from
 *   `completions`, and `/pipelines` pages from `pipelinesPage` (keyset, O(page) at any depth),
 *   through {@link storeReads};
 * - {@link renderSnapshot} and {@link renderLine} turn it into terminal text.
 *
 * Nothing here knows which store it reads: open a file with `SqliteStore.layerReadOnly`
 * (never migrates, never writes, takes no lock: safe beside a running writer).
 *
 * Every JSON shape here uses snake_case keys: it is the wire format of the HTTP endpoints.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Option, Schema } from "effect"
import type { StoreUnavailable } from "../../domain/Errors.js"
import { PipelineId, RunId } from "../../domain/Ids.js"
import type { EventRecord, MetricRecord, PipelineRecord, PipelineState, RunRecord } from "../../domain/Records.js"
import * as CallCache from "../CallCache.js"
import { algorithmText, restoredText } from "./algorithmState.js"
import { leasesLostOf } from "./leasesLost.js"
import { formatMetric, isStale, STALE_AFTER_MS } from "./report.js"
import { SKIPPED_METRIC } from "./runner/run.js"
import type { VisitState } from "../../domain/Traversal.js"
import { callsText, formatCost, formatUsd, knownCost } from "./money.js"
import { transitionsText } from "../../domain/internal/transitions.js"
import type { AccountingFigures, ErrorRow, Latency, PipelineCursor as StoreCursor, ReadError, ResourceUsage, StoreService, StoreStats, TaskStore } from "../Store.js"

// ---------------------------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------------------------

/**
 * Which run a read is about: `undefined` or `"latest"` = the most recently started run,
 * `"all"` = every run of the store (the whole store: the cumulative picture), any other
 * string = that run id.
 *
 * @since 0.1.0
 * @category models
 */
export type RunSelector = string | undefined

/**
 * A resolved selection: the latest run (if any), an explicit run, or all runs.
 *
 * @since 0.1.0
 * @category models
 */
export type Selection =
  | { readonly _tag: "Run"; readonly run: RunRecord; readonly latest: boolean }
  | { readonly _tag: "All"; readonly runs: ReadonlyArray<RunRecord> }
  | { readonly _tag: "Empty" }

/**
 * Raised when an explicit run id is not in the store (the HTTP server answers 404).
 *
 * @since 0.1.0
 * @category errors
 */
export class UnknownRun extends Schema.TaggedError<UnknownRun>("assay/UnknownRun")("UnknownRun", {
  runId: Schema.String
}) {
  override get message(): string {
    return `unknown run id "${this.runId}"`
  }
}

/**
 * Resolves a {@link RunSelector}: `"all"` → every run; `undefined` or `"latest"` → the most
 * recently started run (`Empty` when the store has none); an id → that run. Fails with
 * {@link UnknownRun} for an id the store does not know, `StoreUnavailable` on read errors.
 *
 * @since 0.1.0
 * @category selection
 */
export const resolveSelection = (
  store: TaskStore,
  selector: RunSelector
): Effect.Effect<Selection, StoreUnavailable | UnknownRun> => {
  if (selector === "all") return Effect.map(store.listRuns, (runs): Selection => ({ _tag: "All", runs }))
  if (selector === undefined || selector === "latest") {
    return Effect.map(store.latestRun, (o): Selection =>
      Option.match(o, { onNone: () => ({ _tag: "Empty" }), onSome: (run) => ({ _tag: "Run", run, latest: true }) }))
  }
  return Effect.flatMap(store.getRun(RunId.make(selector)), (o) =>
    Option.match(o, {
      onNone: () => Effect.fail(new UnknownRun({ runId: selector })),
      onSome: (run) => Effect.succeed<Selection>({ _tag: "Run", run, latest: false })
    }))
}

/**
 * The `run_id` a selection reports: the run's id, `"all"`, or `null` for an empty store.
 *
 * @since 0.1.0
 * @category selection
 */
export const selectionRunId = (s: Selection): string | null =>
  s._tag === "Run" ? s.run.runId : s._tag === "All" ? "all" : null

/** The run id filter of store reads (`undefined` = no filter, for `all`). */
const filterOf = (s: Selection): RunId | undefined => (s._tag === "Run" ? s.run.runId : undefined)

// ---------------------------------------------------------------------------------------------
// Wire rows
// ---------------------------------------------------------------------------------------------

/**
 * A reported metric as the HTTP API returns it.
 *
 * @since 0.1.0
 * @category models
 */
export interface MetricRow {
  readonly run_id: string
  readonly pipeline_id: string | null
  readonly name: string
  readonly value: unknown
  readonly label: string | null
  readonly display: "number" | "percent" | "text"
  /** Epoch ms. */
  readonly updated_at: number
}

/**
 * Converts a stored metric to its wire row.
 *
 * @since 0.1.0
 * @category wire
 */
export const metricRow = (m: MetricRecord): MetricRow => ({
  run_id: m.runId,
  pipeline_id: m.pipelineId === "" ? null : m.pipelineId,
  name: m.name,
  value: m.value,
  label: m.label,
  display: m.display,
  updated_at: m.updatedAt
})

/**
 * The traversal state of a pipeline that declares `control`, as `/pipelines` shows it (the
 * store's `VisitState`, see `domain/Traversal.ts`): `cursor` is a position (the seq of the
 * pending entry, `n_tasks_total` once complete; it moves back on a rewind), `pending` the next
 * entry (`{ seq, visit, input, attempts }`, `null` when complete), `active` the valid outputs
 * (`{ seq, visit, artifact }`), `counters` the entries made per seq, `handoffs` the transitions
 * consumed from the current budget, `payloads` the handoff payloads written, `ledger` the
 * pipeline's ledger rows over every budget lifetime and `floor` the ledger rows of earlier
 * lifetimes (before the last fresh restart), `seed` the seed's occurrence address and
 * `version` the state's version.
 *
 * @since 0.1.0
 * @category models
 */
export interface TraversalWire {
  readonly version: number
  readonly cursor: number
  readonly pending: { readonly seq: number; readonly visit: number; readonly input: string; readonly attempts: number } | null
  readonly active: ReadonlyArray<{ readonly seq: number; readonly visit: number; readonly artifact: string }>
  readonly counters: ReadonlyArray<number>
  readonly handoffs: number
  readonly payloads: number
  readonly ledger: number
  readonly floor: number
  readonly seed: string
}

/**
 * Converts a stored traversal state to its wire form.
 *
 * @since 0.1.0
 * @category wire
 */
export const traversalWire = (s: VisitState): TraversalWire => ({
  version: s.version,
  cursor: s.cursor,
  pending: s.pending === null ? null : { seq: s.pending.seq, visit: s.pending.visit, input: s.pending.input, attempts: s.pending.attempts },
  active: s.active.map((a) => ({ seq: a.seq, visit: a.visit, artifact: a.artifact })),
  counters: [...s.counters],
  handoffs: s.handoffs,
  payloads: s.payloads,
  ledger: s.ledger,
  floor: s.floor,
  seed: s.seed
})

/**
 * A pipeline as `/pipelines` returns it: state, cursor (`n_tasks_done` / `n_tasks_total`),
 * attempts, times (epoch ms), failure fields and its pipeline-scoped reported metrics.
 *
 * A pipeline that declares `control` also has `cursor_kind: "position"` (its cursor is the
 * traversal's position, which moves back on a rewind, not a count of finished tasks) and
 * `traversal` (its {@link TraversalWire}); a plain pipeline's row has neither.
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelineRow {
  readonly pipeline_id: string
  readonly key: string | null
  readonly name: string
  readonly run_id: string
  readonly state: PipelineState
  readonly n_tasks_done: number
  readonly n_tasks_total: number
  readonly attempts_total: number
  readonly created_at: number
  readonly updated_at: number
  readonly started_at: number | null
  readonly ended_at: number | null
  readonly failed_task: string | null
  readonly error_type: string | null
  readonly error_message: string | null
  readonly error_class: string | null
  readonly reported_metrics: ReadonlyArray<MetricRow>
  /** Suite pipelines only: the member (experiment id) and the pipeline's key in the member. */
  readonly experiment_id?: string
  readonly local_key?: string | null
  /**
   * Suite roots only: the stored state when `state` is a reading of it (a pipeline stored
   * `running` by a run that is no longer running reads `interrupted`).
   */
  readonly stored_state?: PipelineState
  /** Control pipelines only: the cursor is a position (see {@link PipelineRow}). */
  readonly cursor_kind?: "position"
  /** Control pipelines only: the traversal state. */
  readonly traversal?: TraversalWire
  /**
   * The pipeline's token and cost figures (its attempts in the page's scope, each once; see
   * {@link AccountingWire}); absent when it made no model call and had no cache hit.
   */
  readonly accounting?: AccountingWire
}

/**
 * Converts a stored pipeline (without its metrics) to its wire row; `traversal`, the
 * pipeline's traversal state when it declares `control`, adds `cursor_kind` and `traversal`.
 *
 * @since 0.1.0
 * @category wire
 */
export const pipelineRow = (
  p: PipelineRecord,
  metrics: ReadonlyArray<MetricRow> = [],
  traversal: Option.Option<VisitState> = Option.none(),
  accounting?: AccountingFigures | undefined
): PipelineRow => ({
  pipeline_id: p.pipelineId,
  key: p.key,
  name: p.name,
  run_id: p.runId,
  state: p.state,
  n_tasks_done: p.nTasksDone,
  n_tasks_total: p.nTasksTotal,
  attempts_total: p.attemptsTotal,
  created_at: p.createdAt,
  updated_at: p.updatedAt,
  started_at: p.startedAt,
  ended_at: p.endedAt,
  failed_task: p.failedTask,
  error_type: p.errorType,
  error_message: p.errorMessage,
  error_class: p.errorClass,
  reported_metrics: metrics,
  ...(p.experimentId === null ? {} : { experiment_id: p.experimentId, local_key: p.localKey }),
  ...(Option.isSome(traversal) ? { cursor_kind: "position" as const, traversal: traversalWire(traversal.value) } : {}),
  ...(accounting === undefined ? {} : { accounting: accountingWire(accounting) })
})

/**
 * What the call cache did, in the snapshot's snake_case (`CallCache.CacheStats` renamed, since
 * 0.9.0): `hits`, `misses`, `refreshed`, `bypassed`, `write_failures` (outputs the cache failed
 * to store, counted in `misses` or `refreshed` too), `lookup_failures` (lookups the cache failed
 * to answer, a damaged or unreadable cache, counted in `misses` or `bypassed` too; since
 * 0.12.0); `tokens_saved` (`prompt_tokens`,
 * `completion_tokens`, `total_tokens`: the stored usage of the calls the hits replaced) and
 * `cost_saved_usd` (US dollars; `null` when no hit's call had a known cost).
 *
 * @since 0.9.0
 * @category models
 */
export interface CacheWire {
  readonly hits: number
  readonly misses: number
  readonly refreshed: number
  readonly bypassed: number
  readonly write_failures: number
  readonly lookup_failures: number
  readonly tokens_saved: { readonly prompt_tokens: number; readonly completion_tokens: number; readonly total_tokens: number }
  readonly cost_saved_usd: number | null
}

/**
 * `CallCache.CacheStats` in its wire shape ({@link CacheWire}).
 *
 * @since 0.9.0
 * @category wire
 */
export const cacheWire = (c: CallCache.CacheStats): CacheWire => ({
  hits: c.hits,
  misses: c.misses,
  refreshed: c.refreshed,
  bypassed: c.bypassed,
  write_failures: c.writeFailures,
  lookup_failures: c.lookupFailures,
  tokens_saved: {
    prompt_tokens: c.tokensSaved.promptTokens,
    completion_tokens: c.tokensSaved.completionTokens,
    total_tokens: c.tokensSaved.totalTokens
  },
  cost_saved_usd: c.costSavedUsd
})

/**
 * {@link AccountingFigures} in their wire shape.
 *
 * @since 0.8.0
 * @category wire
 */
export const accountingWire = (f: AccountingFigures): AccountingWire => ({
  calls: f.calls,
  refused: f.refused,
  failed_calls: f.failedCalls,
  cache_hits: f.cacheHits,
  model_call_hits: f.modelCallHits,
  tokens_in: f.tokensIn,
  tokens_out: f.tokensOut,
  cost_usd: knownCost(f.costUsd, f.unpriced),
  estimated: f.estimated,
  unpriced: f.unpriced
})

/** Figures from a store's resources (a plugin store without the `stats` accounting). */
const resourceFigures = (store: TaskStore, runId: RunId | undefined): Effect.Effect<AccountingFigures, StoreUnavailable> =>
  Effect.map(
    typeof (store as Partial<TaskStore>).resourceUsage === "function" ? store.resourceUsage(runId) : Effect.succeed([]),
    (usage) => {
      const f = { calls: 0, refused: 0, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 }
      for (const u of usage) {
        f.tokensIn += u.tokensIn ?? 0
        f.tokensOut += u.tokensOut ?? 0
        f.costUsd += u.costUsd ?? 0
        f.estimated += u.estimated ?? 0
        f.unpriced += u.unpriced ?? 0
      }
      return f
    }
  )

/**
 * A failed pipeline as `/errors` and `recent_errors` return it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ErrorWire {
  readonly pipeline_id: string
  readonly name: string
  readonly key: string | null
  readonly run_id: string
  readonly failed_task: string | null
  readonly error_type: string | null
  readonly error_message: string | null
  readonly error_class: string | null
  readonly ended_at: number | null
  /** Suite pipelines only: the member (experiment id) and the pipeline's key in the member. */
  readonly experiment_id?: string
  readonly local_key?: string | null
}

/**
 * Converts an error row to its wire form.
 *
 * @since 0.1.0
 * @category wire
 */
export const errorRow = (e: ErrorRow): ErrorWire => ({
  pipeline_id: e.pipelineId,
  name: e.name,
  key: e.key,
  run_id: e.runId,
  failed_task: e.failedTask,
  error_type: e.errorType,
  error_message: e.errorMessage,
  error_class: e.errorClass,
  ended_at: e.endedAt
})

/**
 * An event as `/events` returns it (`data` as recorded).
 *
 * @since 0.1.0
 * @category models
 */
export interface EventWire {
  readonly event_id: number
  readonly kind: string
  readonly pipeline_id: string | null
  readonly run_id: string | null
  readonly data: unknown
  /** Epoch ms. */
  readonly ts: number
}

/**
 * Converts an event to its wire form.
 *
 * @since 0.1.0
 * @category wire
 */
export const eventRow = (e: EventRecord): EventWire => ({
  event_id: e.eventId,
  kind: e.kind,
  pipeline_id: e.pipelineId,
  run_id: e.runId,
  data: e.data,
  ts: e.ts
})

/**
 * A pool resource as `/resources` returns it: its health as the runner last wrote it
 * (at start, every heartbeat and at the end), flattened. Absent health fields are `null`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ResourceRow {
  readonly pool: string
  readonly resource_id: string
  readonly kind: string
  /** `ready`, `degraded`, `cooldown`, `dead`, … */
  readonly state: string | null
  readonly active: number | null
  readonly capacity: number | null
  readonly consecutive_failures: number | null
  readonly latency_ema_ms: number | null
  readonly usage: unknown
  readonly pool_wait_ms_p95: number | null
  readonly pool_waiting: number | null
  readonly last_error: unknown
  /** Epoch ms until which the server asked to wait (a rate limit), when it did. */
  readonly throttled_until: number | null
  /** The circuit breaker: `closed`, `open`, `half_open` (null before this field existed). */
  readonly breaker: string | null
  /** Epoch ms at which an open breaker turns half-open. */
  readonly breaker_until: number | null
  /** An algorithm's state of the resource by algorithm name (`adaptive`: learned rate and window), or null. */
  readonly algorithm: unknown
  /** The same in words (`adaptive delivered 19.8 req/s lately, allows 24.5 req/s now, 8 at once; cut 3× (last: a 429 at 14:03:10)`), or "". */
  readonly algorithm_text: string
  /**
   * What a resume restored of the resource's saved pool state, in words as `report` says it
   * (`restored at resume: throttle, probing, algorithm:adaptive`), or "" (not a resume; since
   * 0.12.0, tester18d F5).
   */
  readonly restored_text: string
  /** The run that wrote this health. */
  readonly run_id: string | null
  /** Masked spec (secrets replaced by the store). */
  readonly spec: unknown
  /** Epoch ms. */
  readonly updated_at: number
  /**
   * Tokens and cost of the attempts in the view's scope that leased this resource (the
   * dashboard's snapshot only, when the scope made model calls; absent from `/resources`):
   * `null` when none did.
   */
  readonly accounting?: ResourceAccountingWire | null | undefined
}

/**
 * What the attempts that leased one pool resource spent (see `ResourceUsage`; an attempt
 * holding leases on several resources counts on each): `attempts` those attempts, `tokens_in` /
 * `tokens_out` their tokens, `cost_usd` the sum of their known costs in US dollars (a lower
 * bound when `unpriced` > 0; `null` when calls without a price made it up and none had one),
 * `estimated` the attempts whose tokens were estimated, `unpriced` those with tokens but no
 * price.
 *
 * @since 0.8.0
 * @category models
 */
export interface ResourceAccountingWire {
  readonly attempts: number
  readonly tokens_in: number
  readonly tokens_out: number
  readonly cost_usd: number | null
  readonly estimated: number
  readonly unpriced: number
}

/**
 * A resource's `ResourceUsage` in its wire shape ({@link ResourceAccountingWire}).
 *
 * @since 0.8.0
 * @category wire
 */
export const resourceAccountingWire = (u: ResourceUsage): ResourceAccountingWire => ({
  attempts: u.attempts,
  tokens_in: u.tokensIn,
  tokens_out: u.tokensOut,
  cost_usd: knownCost(u.costUsd, u.unpriced),
  estimated: u.estimated,
  unpriced: u.unpriced
})

/**
 * A clock time for a progress line, `watch`, `report` and the dashboard: `14:03:10` (local time)
 * when `untilMs` falls on the same local day as `nowMs` and less than 12 hours from it, else the
 * full ISO date and time (UTC): a time of day alone must never read as "today" for tomorrow
 * (a `Retry-After: 86400` ends at this very clock time, a day later).
 *
 * @since 0.2.0
 * @category rendering
 */
export const formatUntil = (untilMs: number, nowMs: number): string => {
  const d = new Date(untilMs)
  const now = new Date(nowMs)
  const sameDay = d.getFullYear() === now.getFullYear() && d.getMonth() === now.getMonth() && d.getDate() === now.getDate()
  if (!sameDay || Math.abs(untilMs - nowMs) >= 43_200_000) return d.toISOString()
  const pad = (n: number) => String(n).padStart(2, "0")
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
}

/**
 * What holds a stored resource out of rotation by time, in words, when its hold is still
 * ahead of `nowMs`: `throttled until 14:03:10` or `breaker open until 14:03:10`; else "".
 *
 * @since 0.2.0
 * @category rendering
 */
export const holdOf = (r: Pick<ResourceRow, "throttled_until" | "breaker_until">, nowMs: number): string =>
  r.throttled_until !== null && r.throttled_until > nowMs
    ? `throttled until ${formatUntil(r.throttled_until, nowMs)}`
    : r.breaker_until !== null && r.breaker_until > nowMs
    ? `breaker open until ${formatUntil(r.breaker_until, nowMs)}`
    : ""

const numOrNull = (u: unknown): number | null => (typeof u === "number" && Number.isFinite(u) ? u : null)
const strOrNull = (u: unknown): string | null => (typeof u === "string" ? u : null)

/**
 * Flattens a stored resource's health into its wire row.
 *
 * @since 0.1.0
 * @category wire
 */
export const resourceRow = (r: {
  readonly pool: string
  readonly resourceId: string
  readonly kind: string
  readonly spec: unknown
  readonly health: unknown
  readonly updatedAt: number
}): ResourceRow => {
  const h = (typeof r.health === "object" && r.health !== null ? r.health : {}) as Record<string, unknown>
  return {
    pool: r.pool,
    resource_id: r.resourceId,
    kind: r.kind,
    state: strOrNull(h.state),
    active: numOrNull(h.active),
    capacity: numOrNull(h.capacity),
    consecutive_failures: numOrNull(h.consecutiveFailures),
    latency_ema_ms: numOrNull(h.latencyEmaMs),
    usage: h.usage ?? null,
    pool_wait_ms_p95: numOrNull(h.poolWaitMsP95),
    pool_waiting: numOrNull(h.poolWaiting),
    last_error: h.lastError ?? null,
    throttled_until: numOrNull(h.throttledUntil),
    breaker: strOrNull(h.breaker),
    breaker_until: numOrNull(h.breakerUntil),
    algorithm: h.algorithm ?? null,
    algorithm_text: algorithmText(h.algorithm, (at) => formatUntil(at, r.updatedAt)),
    restored_text: restoredText(h.restored),
    run_id: strOrNull(h.runId),
    spec: r.spec,
    updated_at: r.updatedAt
  }
}

/**
 * The resource rows a scope shows: every stored row for the whole store (`runId` undefined);
 * for one run, the rows that run wrote (or that name no run) as they are, plus each row another
 * run wrote last whose resource this run's attempts leased (`leased`: the `pool/resource_id`
 * targets of the run's attempts), its health cleared (`state`, counters, holds and algorithm
 * `null`/empty: that health is the later run's, not this one's) and `run_id` still naming the
 * run that wrote it. A store keeps one row per resource, overwritten by the last run that
 * used it, so without the second kind an older run's resources would vanish from its view.
 *
 * @since 0.9.0
 * @category wire
 */
export const scopeResourceRows = (
  rows: ReadonlyArray<ResourceRow>,
  runId: string | undefined,
  leased: ReadonlySet<string>
): Array<ResourceRow> =>
  rows.flatMap((r) =>
    runId === undefined || r.run_id === null || r.run_id === runId
      ? [r]
      : leased.has(`${r.pool}/${r.resource_id}`)
      ? [{
        ...r,
        state: null,
        active: null,
        capacity: null,
        consecutive_failures: null,
        latency_ema_ms: null,
        usage: null,
        pool_wait_ms_p95: null,
        pool_waiting: null,
        last_error: null,
        throttled_until: null,
        breaker: null,
        breaker_until: null,
        algorithm: null,
        algorithm_text: "",
        restored_text: ""
      }]
      : []
  )

// ---------------------------------------------------------------------------------------------
// Paged and histogram reads
// ---------------------------------------------------------------------------------------------

/**
 * A `/pipelines` keyset cursor: the (createdAt, pipelineId) of the last row of a page (the
 * `Store` port's cursor).
 *
 * @since 0.1.0
 * @category models
 */
export type PipelineCursor = StoreCursor

/**
 * Encodes a cursor as an opaque URL-safe token (base64url of `[createdAt, pipelineId]`).
 *
 * @since 0.1.0
 * @category cursors
 */
export const encodeCursor = (c: PipelineCursor): string =>
  Buffer.from(JSON.stringify([c.createdAt, c.pipelineId]), "utf8").toString("base64url")

/**
 * Decodes a token made by {@link encodeCursor}; `Option.none()` when it is malformed.
 *
 * @since 0.1.0
 * @category cursors
 */
export const decodeCursor = (token: string): Option.Option<PipelineCursor> => {
  try {
    const v: unknown = JSON.parse(Buffer.from(token, "base64url").toString("utf8"))
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === "number" && Number.isFinite(v[0]) && typeof v[1] === "string") {
      return Option.some({ createdAt: v[0], pipelineId: PipelineId.make(v[1]) })
    }
  } catch {
    // malformed
  }
  return Option.none()
}

/**
 * One page of pipelines and the cursor of the next page (`null` at the end).
 *
 * @since 0.1.0
 * @category models
 */
export interface PipelinePage {
  readonly rows: ReadonlyArray<PipelineRow>
  readonly next: PipelineCursor | null
}

/**
 * The paged and histogram reads monitoring needs, in its wire shapes (implemented by
 * {@link storeReads} over the `Store` port):
 *
 * - `pipelinesPage`: pipelines ordered by (createdAt, pipelineId) strictly after `after`, at
 *   most `limit` rows, each with its pipeline-scoped metrics (of its owner run);
 * - `completions`: terminal pipelines bucketed by `floor((endedAt - originMs) / bucketMs)`,
 *   as `[bucketIndex, count]` pairs, ascending.
 *
 * `runId` `undefined` means every run.
 *
 * @since 0.1.0
 * @category models
 */
export interface MonitorReads {
  readonly pipelinesPage: (options: {
    readonly runId: RunId | undefined
    /** Only pipelines in this state (all when absent). */
    readonly state?: PipelineState | undefined
    readonly after: PipelineCursor | undefined
    readonly limit: number
  }) => Effect.Effect<PipelinePage, StoreUnavailable | ReadError>
  readonly completions: (options: {
    readonly runId: RunId | undefined
    readonly originMs: number
    readonly bucketMs: number
  }) => Effect.Effect<ReadonlyArray<readonly [number, number]>, StoreUnavailable | ReadError>
}

/**
 * {@link MonitorReads} over the `Store` port: a page is one `pipelinesPage` (keyset: the same
 * cost at any depth on SQLite) plus one `metrics` read per row shown (pipeline-scoped metrics
 * of the row's owner run) and, on a store with the traversal capability, one `visitState`
 * read per row (the traversal of a pipeline that declares `control`); the histogram is one `completions` aggregate aligned on `originMs`
 * (completions that ended before `originMs` are not counted).
 *
 * @since 0.1.0
 * @category constructors
 */
export const storeReads = (store: TaskStore): MonitorReads => ({
  pipelinesPage: ({ after, limit, runId, state }) =>
    Effect.gen(function*() {
      const page = yield* store.pipelinesPage({ runId, state, after, limit })
      const traversal = store.traversal
      // the page's token and cost figures: one aggregate over its pipelines
      const figures = new Map<string, AccountingFigures>()
      if (page.pipelines.length > 0 && typeof (store as Partial<TaskStore>).pipelineAccounting === "function") {
        for (const f of yield* store.pipelineAccounting({ runId, pipelineIds: page.pipelines.map((p) => p.pipelineId) })) {
          figures.set(f.pipelineId, f)
        }
      }
      const rows = yield* Effect.forEach(page.pipelines, (p) =>
        Effect.zipWith(
          store.metrics({ runId: p.runId, pipelineId: p.pipelineId }),
          traversal === undefined ? Effect.succeed(Option.none<VisitState>()) : traversal.visitState(p.pipelineId),
          (ms, state) => pipelineRow(p, ms.map(metricRow), state, figures.get(p.pipelineId))
        ))
      return { rows, next: page.next }
    }),
  completions: ({ bucketMs, originMs, runId }) =>
    Effect.map(
      store.completions({ runId, bucketMs, since: originMs }),
      (buckets) => buckets.map((b) => [Math.round((b.startMs - originMs) / bucketMs), b.count] as const)
    )
})

// ---------------------------------------------------------------------------------------------
// The snapshot
// ---------------------------------------------------------------------------------------------

/**
 * The selected run as the snapshot shows it (times in epoch ms).
 *
 * @since 0.1.0
 * @category models
 */
export interface RunView {
  readonly run_id: string
  readonly label: string | null
  /**
   * The run's status as the views read it: its stored status, except `stale` for a run stored
   * as `running` whose writer is gone (see `stale`; since 0.8.0: before, `running` beside
   * `stale: true`).
   */
  readonly status: string
  /** The status stored in the run's record (`running` for a stale run; since 0.8.0). */
  readonly stored_status: string
  readonly started_at: number
  readonly heartbeat_at: number
  readonly ended_at: number | null
  readonly stop_reason: string | null
  /** The run's `staleAfter` in ms (from its config), when recorded. */
  readonly stale_after_ms: number | null
  /**
   * Stored as `running` but its heartbeat is older than its `staleAfter` (default
   * {@link STALE_AFTER_MS}): its writer died without closing it. Shown as stale (as `report`
   * shows it interrupted), never as running; a resume takes it up.
   */
  readonly stale: boolean
}

/**
 * Completions over time: `series` is `[bucketStartMs, completed]` for every bucket from the
 * run's start to now (or its end), gaps filled with 0.
 *
 * @since 0.1.0
 * @category models
 */
export interface Throughput {
  /** Terminal pipelines per second since the start; `null` before one second has passed. */
  readonly per_sec: number | null
  /** Terminal pipelines per second over the last {@link RECENT_WINDOW_MS} (bucket-aligned). */
  readonly recent_per_sec: number | null
  readonly bucket_ms: number
  readonly series: ReadonlyArray<readonly [number, number]>
}

/**
 * The monitoring picture of one selection (what `/stats` returns and `watch` renders).
 *
 * - `run_id`: the selected run, `"all"` (the whole store: every run's pipelines, each row as
 *   its last run left it), or `null` when the store has no run yet;
 * - `running`: the selected run (any run, for `all`) is still running: stored as `running`
 *   and not stale;
 * - `stale`: the selected run (for `all`: a run) is stored as `running` but sends no
 *   heartbeat any more (see {@link RunView.stale});
 * - `done`: pipelines finished for good (succeeded + failed) in the selection, plus those a
 *   resumed run skipped as already done (`skipped`, from the runner's run-scoped metric;
 *   `null` unless one run is selected).
 *   Interrupted pipelines are not done (they resume): `pipelines.by_state.interrupted`;
 * - `total`: the source size when the run recorded it (`meta.total` or `config.total`; for
 *   `all`, the largest any run recorded), else `null`; `progress` = `done / total`;
 *   `eta_ms` from the recent rate (null when unknown or not running);
 * - `metrics`: run-level reported metrics of the selected run; for `all`, those of the most
 *   recently started run that reported any (`metrics_run_id` names it);
 * - `latest_run` and `recent_runs` (newest first, at most {@link RECENT_RUNS}): the runs of
 *   the store, so a view can offer each of them.
 *
 * @since 0.1.0
 * @category models
 */
export interface Snapshot {
  readonly run_id: string | null
  readonly selection: "latest" | "run" | "all"
  /** Epoch ms when the snapshot was read. */
  readonly generated_at: number
  readonly run: RunView | null
  readonly runs_total: number
  readonly running: boolean
  readonly stale: boolean
  /** The most recently started run of the store (whatever the selection). */
  readonly latest_run: RunView | null
  /** The store's runs, newest first, at most {@link RECENT_RUNS}. */
  readonly recent_runs: ReadonlyArray<RunView>
  readonly pipelines: { readonly total: number; readonly by_state: Readonly<Record<PipelineState, number>> }
  readonly done: number
  /**
   * Pipelines the selected run skipped because they were already done (counted in `done`);
   * `null` when no one run is selected (`all`, the cumulative view, or a store without runs):
   * skips belong to one run.
   */
  readonly skipped: number | null
  readonly total: number | null
  readonly progress: number | null
  readonly eta_ms: number | null
  readonly elapsed_ms: number | null
  readonly tasks: number
  readonly attempts_total: number
  readonly retries: number
  /** Control transitions (handoff ledger rows) committed in the selection, `end` included (0 without control). */
  readonly handoffs_total: number
  /**
   * Of `handoffs_total`, the transitions that spent a unit of a `maxHandoffs` budget (all but
   * `end`); `null` when the store does not say (a plugin store written before the figure).
   */
  readonly handoffs_budgeted: number | null
  readonly events: number
  readonly latency_ms: Latency | null
  readonly throughput: Throughput
  readonly recent_errors: ReadonlyArray<ErrorWire>
  readonly resources: ReadonlyArray<ResourceRow>
  readonly metrics: ReadonlyArray<MetricRow>
  /** The run whose metrics `metrics` holds (the selected run; for `all`, see above), or null. */
  readonly metrics_run_id: string | null
  /** Present only for a suite root: its identity, the member shown and its members. */
  readonly suite?: SuiteSection | undefined
  /**
   * What the call cache did in the selection ({@link CacheWire}; counted from the attempt rows
   * recorded so far, a running run's too); absent when it did nothing.
   */
  readonly cache?: CacheWire | undefined
  /**
   * Token and cost accounting of the selection (see `Pricing`; the store's `stats`
   * aggregate, each attempt once): the calls and cache hits, tokens in and out, the known cost in US dollars, the attempts
   * whose tokens were estimated and those with tokens but no known cost; absent when no
   * attempt carried token usage.
   */
  readonly accounting?: AccountingWire | undefined
  /**
   * Per pool, the subtotal of its resources' `accounting` (see {@link PoolTotalWire}), present
   * when a pool has several resources or there are several pools, and the scope made model
   * calls (since 0.9.0).
   */
  readonly pool_totals?: ReadonlyArray<PoolTotalWire> | undefined
  /**
   * Global leases lost in the selection, per pool resource ({@link LeasesLostWire}), present
   * when a runner on PostgreSQL pools lost some (since 0.11.0).
   */
  readonly leases_lost?: ReadonlyArray<LeasesLostWire> | undefined
}

/**
 * One pool resource's lost global leases (the `lease.lost` events of the selection):
 * `lost` how many, `taken` of them because another runner held the slot at a renewal,
 * `deadline` because no renewal succeeded before the lease's local deadline, `max_late_ms`
 * the longest a loss was seen past that deadline (ms), `last_at` the latest loss (epoch ms),
 * `runners` the runner ids that lost them. Each lost lease's attempt failed `retryable` and
 * was retried.
 *
 * @since 0.11.0
 * @category models
 */
export interface LeasesLostWire {
  readonly pool: string
  readonly resource_id: string
  readonly lost: number
  readonly taken: number
  readonly deadline: number
  readonly max_late_ms: number
  readonly last_at: number
  readonly runners: ReadonlyArray<string>
}

/**
 * One pool's subtotal: `pool`, how many of its `resources` the view lists, and the sum of
 * their {@link ResourceAccountingWire} figures (an attempt that leased several resources of the
 * pool counts on each, as the resources' rows do; `cost_usd` `null` when none of the calls had
 * a price).
 *
 * @since 0.9.0
 * @category models
 */
export interface PoolTotalWire extends ResourceAccountingWire {
  readonly pool: string
  readonly resources: number
}

/**
 * The pools' subtotals of resource rows with accounting: one per pool, in order of first
 * appearance; empty unless there are several pools or a pool with several resources.
 *
 * @since 0.9.0
 * @category wire
 */
export const poolTotalsOf = (rows: ReadonlyArray<ResourceRow>): Array<PoolTotalWire> => {
  const out = new Map<string, { pool: string; resources: number; attempts: number; tokens_in: number; tokens_out: number; cost: number; estimated: number; unpriced: number }>()
  for (const r of rows) {
    const t = out.get(r.pool) ?? { pool: r.pool, resources: 0, attempts: 0, tokens_in: 0, tokens_out: 0, cost: 0, estimated: 0, unpriced: 0 }
    const a = r.accounting
    t.resources++
    if (a !== undefined && a !== null) {
      t.attempts += a.attempts
      t.tokens_in += a.tokens_in
      t.tokens_out += a.tokens_out
      t.cost += a.cost_usd ?? 0
      t.estimated += a.estimated
      t.unpriced += a.unpriced
    }
    out.set(r.pool, t)
  }
  const totals = Array.from(out.values())
  if (totals.length < 2 && !totals.some((t) => t.resources > 1)) return []
  return totals.map(({ cost, ...t }) => ({ ...t, cost_usd: knownCost(cost, t.unpriced) }))
}

/**
 * The last per-resource usage reads of each store (by store instance; weakly held), one per
 * scope (`all` or a run id; the {@link USAGE_SCOPES} most recently read), each with the key it
 * was read at: the `stats` figures of the scope's attempts (count, retries, accounting), which
 * the snapshot reads anyway. Attempts are appended whole, so while those figures stand still
 * the usage does too: an idle dashboard re-reads nothing, and two views refreshed in turn
 * (the whole store and the latest run, in two tabs) do not evict each other's reading.
 */
const usageCache = new WeakMap<TaskStore, Map<string, { readonly key: string; readonly usage: ReadonlyArray<ResourceUsage> }>>()

/** How many scopes' usage readings {@link usageCache} keeps per store. */
const USAGE_SCOPES = 8

/**
 * `store.resourceUsage(runId)`, read again only when the scope's attempts changed (see
 * `usageCache`).
 *
 * @since 0.9.0
 * @category snapshot
 */
export const cachedResourceUsage = (
  store: TaskStore,
  runId: RunId | undefined,
  stats: StoreStats
): Effect.Effect<ReadonlyArray<ResourceUsage>, ReadError> => {
  const scope = runId === undefined ? "" : `run:${runId}`
  const key = JSON.stringify([stats.attemptsTotal, stats.retries, stats.accounting ?? null])
  const byScope = usageCache.get(store)
  const hit = byScope?.get(scope)
  if (hit !== undefined && hit.key === key) return Effect.succeed(hit.usage)
  return Effect.tap(store.resourceUsage(runId), (usage) =>
    Effect.sync(() => {
      const m = usageCache.get(store) ?? new Map()
      // most recently read last: the oldest scope goes first when full
      m.delete(scope)
      m.set(scope, { key, usage })
      if (m.size > USAGE_SCOPES) m.delete(m.keys().next().value!)
      usageCache.set(store, m)
    }))
}

/**
 * The dashboard's token and cost figures (see {@link Snapshot}; `AccountingFigures`): `calls`
 * the model calls sent (each lease of an attempt that sent one), `cache_hits` the attempts the
 * call cache served (any cached task's), `model_call_hits` those of them whose task declares a
 * pool resource (the model calls the cache saved).
 *
 * @since 0.8.0
 * @category models
 */
export interface AccountingWire {
  /** The model calls sent (since 0.13.0; a judge's format repair is a second call; before: the attempts answered). */
  readonly calls: number
  /** The calls the provider refused with a 429 (since 0.12.0; among `calls`). */
  readonly refused: number
  /** The calls that failed at the endpoint without an answer (5xx, timeout; since 0.12.0; among `calls`). */
  readonly failed_calls: number
  readonly cache_hits: number
  /** Of `cache_hits`, those of tasks that declare a pool resource: model calls saved (since 0.14.0). */
  readonly model_call_hits: number
  readonly tokens_in: number
  readonly tokens_out: number
  /**
   * The sum of the known costs in US dollars: a lower bound when `unpriced` > 0 (that many
   * calls had tokens but no price); `null` when none of the calls had a price.
   */
  readonly cost_usd: number | null
  readonly estimated: number
  /** Calls with tokens but no price (not in `cost_usd`). */
  readonly unpriced: number
}

/**
 * The source facts of one member in one run, as the HTTP API returns them.
 *
 * @since 0.3.0
 * @category models
 */
export interface MembershipWire {
  readonly run_id: string
  readonly selected: boolean
  /**
   * Specs the member's source handed to the run (`null` when the run did not select it): the
   * run's recorded count, or, while the run is live or after it died without recording it, the
   * count of the member's pipelines the store holds of that run plus those it skipped
   * (`admitted_from: "store"`, a lower bound).
   */
  readonly admitted: number | null
  /** `"recorded"` (the run's count), `"store"` (counted from the store's rows), `null` (not selected). */
  readonly admitted_from: "recorded" | "store" | null
  readonly source_exhausted: boolean
  readonly source_error: string | null
  readonly limit_reached: boolean
  /** Epoch ms. */
  readonly updated_at: number
}

/**
 * One suite member as `/experiments` and the dashboard list it: its counts (cumulative, or the
 * durable outcomes of the selected run, with `skipped` then), its source status and facts
 * (`exhausted`, `error`, `limit`, `running`, `interrupted`, `not_selected` or `unknown`), and its member-scoped metrics
 * (never averaged across members).
 *
 * @since 0.3.0
 * @category models
 */
export interface MemberWire {
  readonly experiment_id: string
  readonly label: string | null
  readonly limit: number | null
  readonly pipelines: number
  readonly by_state: Readonly<Record<PipelineState, number>>
  readonly skipped: number | null
  /**
   * `false` when the run skipped pipelines before per-member skip counts existed and this
   * member's is not known (`skipped` is `null`; shown as "not recorded").
   */
  readonly skipped_recorded: boolean
  readonly source_status: string
  readonly source: MembershipWire | null
  readonly metrics_run_id: string | null
  readonly metrics: ReadonlyArray<MetricRow>
  /**
   * The member's database file when it is missing (a `byExperiment` root whose catalog records
   * it as created; the member then reads as empty), else `null` (since 0.6.0).
   */
  readonly database_missing: string | null
  /**
   * The member's superseded pipelines (history of accepted input-row edits, not counted in
   * `pipelines`) (since 0.7.0).
   */
  readonly superseded: number
}

/**
 * The suite part of a {@link Snapshot} (suite roots only): `experiment` is the member shown
 * (`null`: the whole suite); `members` every member in id order. Pools in `resources` carry
 * `shared` (and the owner of a private `experiment:ID:NAME` pool) in `suite.pools`.
 *
 * @since 0.3.0
 * @category models
 */
export interface SuiteSection {
  readonly suite_id: string
  readonly layout: string
  readonly experiment: string | null
  readonly members: ReadonlyArray<MemberWire>
  readonly pools: ReadonlyArray<{ readonly pool: string; readonly shared: boolean; readonly experiment_id: string | null }>
}

/**
 * How many runs a snapshot lists in `recent_runs`.
 *
 * @since 0.2.0
 * @category constants
 */
export const RECENT_RUNS = 20

/**
 * Width of the window of `recent_per_sec` (ms).
 *
 * @since 0.1.0
 * @category constants
 */
export const RECENT_WINDOW_MS = 30_000

const NICE_BUCKETS = [
  1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000,
  7_200_000, 21_600_000, 43_200_000, 86_400_000
]

/**
 * The histogram bucket for a span (ms): the smallest "nice" width giving at most
 * `maxPoints` buckets (1 s … 1 day).
 *
 * @since 0.1.0
 * @category snapshot
 */
export const bucketFor = (spanMs: number, maxPoints = 120): number =>
  NICE_BUCKETS.find((b) => spanMs / b <= maxPoints) ?? NICE_BUCKETS[NICE_BUCKETS.length - 1]!

/** A positive finite number from `u`, else null. */
const positive = (u: unknown): number | null => (typeof u === "number" && Number.isFinite(u) && u > 0 ? u : null)

/**
 * The source size a run recorded: `meta.total`, else `config.total`, else `null`.
 *
 * @since 0.1.0
 * @category snapshot
 */
export const totalOf = (run: RunRecord): number | null => {
  const fromMeta = positive(run.meta.total)
  if (fromMeta !== null) return fromMeta
  const config = run.config as Record<string, unknown> | null
  return typeof config === "object" && config !== null ? positive(config.total) : null
}

const staleAfterMsOf = (r: RunRecord): number | null => {
  const config = r.config as Record<string, unknown> | null
  return typeof config === "object" && config !== null ? numOrNull(config.staleAfterMs) : null
}

const runView = (r: RunRecord, nowMs: number): RunView => ({
  run_id: r.runId,
  label: r.label,
  // a dead writer's run reads as what it is, never `running` beside `stale: true`
  status: isStale(r, nowMs) ? "stale" : r.status,
  stored_status: r.status,
  started_at: r.startedAt,
  heartbeat_at: r.heartbeatAt,
  ended_at: r.endedAt,
  stop_reason: r.stopReason,
  stale_after_ms: staleAfterMsOf(r),
  stale: isStale(r, nowMs)
})

/**
 * Options of {@link readSnapshot}: the run selector and how many recent errors to include
 * (default 10).
 *
 * @since 0.1.0
 * @category models
 */
export interface SnapshotOptions {
  readonly runId?: RunSelector
  readonly errors?: number | undefined
}

/**
 * Reads the monitoring picture of a store: the selected run's status, counts by state,
 * progress and ETA (when the source size is known), throughput over time, latency
 * percentiles, recent errors, pool resources and run-level reported metrics. Time comes from
 * `Clock`. `reads` defaults to {@link storeReads}.
 *
 * The rates: `per_sec = done / elapsed`; `recent_per_sec` = completions in the buckets that
 * started within the last {@link RECENT_WINDOW_MS}, divided by the time those buckets span
 * up to now; `eta_ms = (total - done) / recent_per_sec` (overall rate when no recent one).
 *
 * Fails with {@link UnknownRun} for an explicit id the store does not know, or the store's
 * read errors.
 *
 * @since 0.1.0
 * @category snapshot
 */
export const readSnapshot = (
  store: TaskStore,
  options: SnapshotOptions = {},
  reads: MonitorReads = storeReads(store)
): Effect.Effect<Snapshot, StoreUnavailable | ReadError | UnknownRun> =>
  consistent(
    store,
    Effect.gen(function*() {
      const selection = yield* resolveSelection(store, options.runId)
      return yield* snapshotIn(store, selection, options.errors ?? 10, reads)
    })
  )

/**
 * `reads` against one consistent view of `store` when it offers one (`consistentReads`:
 * SQLite's read transaction), else as they come: the figures of one picture (totals, counts
 * per state, per-resource sums) then agree even while a writer commits between the reads
 * (issue 18 trial: a live `/stats` answer whose totals and sums disagreed).
 */
const consistent = <A, E, R>(store: TaskStore, reads: Effect.Effect<A, E, R>): Effect.Effect<A, E | StoreUnavailable, R> => {
  const wrap = (store as Partial<StoreService>).consistentReads
  return wrap === undefined ? reads : wrap(reads)
}

/**
 * {@link readSnapshot} for an already resolved selection.
 *
 * @since 0.1.0
 * @category snapshot
 */
export const snapshotOf = (
  store: TaskStore,
  selection: Selection,
  errors: number,
  reads: MonitorReads
): Effect.Effect<Snapshot, StoreUnavailable | ReadError> => consistent(store, snapshotIn(store, selection, errors, reads))

/** {@link snapshotOf}'s reads, one after the other (the caller makes them one view). */
const snapshotIn = (
  store: TaskStore,
  selection: Selection,
  errors: number,
  reads: MonitorReads
): Effect.Effect<Snapshot, StoreUnavailable | ReadError> =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const runId = filterOf(selection)
    const allRuns = selection._tag === "All" ? selection.runs : yield* store.listRuns
    const newestFirst = [...allRuns].sort((a, b) => b.startedAt - a.startedAt || (a.runId < b.runId ? 1 : -1))
    const stats = yield* store.stats(runId)
    const errorRows = yield* store.errors({ runId, limit: errors })
    const run = selection._tag === "Run" ? selection.run : null
    // A run stored as running whose writer died (no heartbeat) is not running: it is stale.
    const alive = (r: RunRecord) => r.status === "running" && !isStale(r, now)
    const running = selection._tag === "Run"
      ? alive(selection.run)
      : selection._tag === "All" && selection.runs.some(alive)
    const stale = selection._tag === "Run"
      ? isStale(selection.run, now)
      : selection._tag === "All" && selection.runs.some((r) => isStale(r, now))
    const start = selection._tag === "Run"
      ? selection.run.startedAt
      : selection._tag === "All" && selection.runs.length > 0
      ? Math.min(...selection.runs.map((r) => r.startedAt))
      : null
    // where the selection's time ends: now while running; the end (or, for a run that died,
    // its last heartbeat) otherwise, so that a dead run's rate is not diluted by the time since
    const endOf = (r: RunRecord) => r.endedAt ?? r.heartbeatAt
    const end = running
      ? now
      : selection._tag === "Run"
      ? endOf(selection.run)
      : selection._tag === "All" && selection.runs.length > 0
      ? Math.max(...selection.runs.map(endOf))
      : now
    const elapsed = start === null ? null : Math.max(0, end - start)
    const bucketMs = bucketFor(elapsed ?? 0)
    const buckets = start === null ? [] : yield* reads.completions({ runId, originMs: start, bucketMs })
    const series: Array<readonly [number, number]> = []
    if (start !== null) {
      const counts = new Map(buckets)
      const lastIndex = Math.max(Math.floor(Math.max(0, end - start) / bucketMs), buckets[buckets.length - 1]?.[0] ?? 0)
      const firstIndex = Math.min(0, buckets[0]?.[0] ?? 0)
      for (let i = firstIndex; i <= lastIndex; i++) series.push([start + i * bucketMs, counts.get(i) ?? 0])
    }
    const by = stats.byState
    // the metrics shown: the selected run's; for the whole store, the most recent run's that
    // reported any (a resumed job's live metrics cover the whole job)
    let metricsRunId: string | null = selection._tag === "Run" ? selection.run.runId : null
    let metricRows = selection._tag === "Run" ? yield* store.metrics({ runId: selection.run.runId, pipelineId: null }) : []
    if (selection._tag === "All") {
      for (const r of newestFirst.slice(0, RECENT_RUNS)) {
        const ms = (yield* store.metrics({ runId: r.runId, pipelineId: null })).filter((m) => m.name !== SKIPPED_METRIC)
        if (ms.length > 0) {
          metricsRunId = r.runId
          metricRows = ms
          break
        }
      }
    }
    // Pipelines a resumed run skipped (already done) count as done for its progress (the
    // whole store's rows already include them).
    const skippedValue = selection._tag === "Run" ? metricRows.find((m) => m.name === SKIPPED_METRIC)?.value : undefined
    const skipped = typeof skippedValue === "number" ? skippedValue : 0
    const done = by.succeeded + by.failed + skipped
    const perSec = elapsed !== null && elapsed >= 1000 ? done / (elapsed / 1000) : null
    let recentPerSec: number | null = null
    if (series.length > 0 && elapsed !== null && elapsed >= 1000) {
      const from = end - RECENT_WINDOW_MS
      const recent = series.filter(([t]) => t >= from)
      const t0 = recent[0]?.[0]
      if (t0 !== undefined && end - t0 >= 1000) {
        recentPerSec = recent.reduce((a, [, n]) => a + n, 0) / ((end - t0) / 1000)
      }
    }
    const totals = (selection._tag === "Run" ? [selection.run] : selection._tag === "All" ? selection.runs : [])
      .map(totalOf)
      .filter((t): t is number => t !== null)
    const total = totals.length === 0 ? null : Math.max(...totals)
    const rate = recentPerSec !== null && recentPerSec > 0 ? recentPerSec : perSec
    const eta = total !== null && running && rate !== null && rate > 0
      ? Math.max(0, Math.round(((total - done) / rate) * 1000))
      : null
    const storedRows = stats.resources.map(resourceRow)
    const metrics = metricRows.map(metricRow)
    // the call cache's figures, from the scope's attempt rows (the `stats` aggregate read above)
    const cache = selection._tag === "Run" || selection._tag === "All"
      ? yield* CallCache.statsOfScope(store, runId, stats)
      : CallCache.emptyStats
    // token and cost totals: one aggregate read (nothing when there is no run yet)
    let accounting: AccountingWire | undefined
    if (selection._tag === "Run" || selection._tag === "All") {
      // each attempt once (the `stats` aggregate read above; a plugin store without it: its
      // resources' figures, which count an attempt on each resource it leased)
      const f = stats.accounting ?? (yield* resourceFigures(store, runId))
      const sum: AccountingWire = accountingWire(f)
      if (sum.tokens_in + sum.tokens_out > 0 || (sum.cost_usd ?? 0) > 0 || sum.calls > 0 || sum.cache_hits > 0) accounting = sum
    }
    // each resource's share (the attempts that leased it), read only when the scope made model
    // calls (an aggregate over the attempts' leases: nothing to show for runs without usage)
    // (a run's view also keeps the resources it leased whose row a later run overwrote)
    let resources: ReadonlyArray<ResourceRow> = scopeResourceRows(storedRows, runId, new Set())
    let poolTotals: Array<PoolTotalWire> = []
    if (accounting !== undefined && accounting.calls > 0 && storedRows.length > 0 && typeof (store as Partial<TaskStore>).resourceUsage === "function") {
      const usage = yield* cachedResourceUsage(store, runId, stats)
      const byTarget = new Map(usage.map((u) => [u.target, u] as const))
      const rows = scopeResourceRows(storedRows, runId, new Set(usage.filter((u) => u.attempts > 0).map((u) => u.target)))
      resources = rows.map((r) => {
        const u = byTarget.get(`${r.pool}/${r.resource_id}`)
        return { ...r, accounting: u === undefined ? null : resourceAccountingWire(u) }
      })
      poolTotals = poolTotalsOf(resources)
    }
    // lost global leases: one indexed read of the `lease.lost` events (none on local pools)
    const leasesLost: Array<LeasesLostWire> = (selection._tag === "Run" || selection._tag === "All"
      ? yield* leasesLostOf(store, runId)
      : []).map((l) => ({
        pool: l.pool,
        resource_id: l.resourceId,
        lost: l.lost,
        taken: l.taken,
        deadline: l.deadline,
        max_late_ms: l.maxLateMs,
        last_at: l.lastAt,
        runners: l.runners
      }))
    return {
      run_id: selectionRunId(selection),
      selection: selection._tag === "All" ? "all" : selection._tag === "Run" && !selection.latest ? "run" : "latest",
      generated_at: now,
      run: run === null ? null : runView(run, now),
      runs_total: allRuns.length,
      running,
      stale,
      latest_run: newestFirst.length === 0 ? null : runView(newestFirst[0]!, now),
      recent_runs: newestFirst.slice(0, RECENT_RUNS).map((r) => runView(r, now)),
      pipelines: { total: stats.pipelines, by_state: by },
      done,
      skipped: selection._tag === "Run" ? skipped : null,
      total,
      progress: total === null ? null : Math.min(1, done / total),
      eta_ms: eta,
      elapsed_ms: elapsed,
      tasks: stats.tasks,
      attempts_total: stats.attemptsTotal,
      retries: stats.retries,
      handoffs_total: stats.handoffsTotal,
      handoffs_budgeted: stats.handoffsBudgeted ?? null,
      events: stats.events,
      latency_ms: stats.latencyMs,
      throughput: { per_sec: perSec, recent_per_sec: recentPerSec, bucket_ms: bucketMs, series },
      recent_errors: errorRows.map(errorRow),
      resources,
      metrics,
      metrics_run_id: metricsRunId,
      ...(CallCache.isActive(cache) ? { cache: cacheWire(cache) } : {}),
      ...(accounting !== undefined ? { accounting } : {}),
      ...(poolTotals.length > 0 ? { pool_totals: poolTotals } : {}),
      ...(leasesLost.length > 0 ? { leases_lost: leasesLost } : {})
    } satisfies Snapshot
  })

/**
 * Whether a snapshot's run is over for `watch`: not running (finished, or stale: stored as
 * running with a heartbeat older than its `staleAfter`, its writer gone).
 *
 * @since 0.1.0
 * @category snapshot
 */
export const isOver = (s: Snapshot): boolean => s.run_id !== null && !s.running

// ---------------------------------------------------------------------------------------------
// Terminal rendering
// ---------------------------------------------------------------------------------------------

/**
 * A duration in ms as compact text: `850ms`, `12s`, `3m05s`, `2h04m`, `3d04h`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const formatDuration = (ms: number): string => {
  if (!Number.isFinite(ms)) return "?"
  if (ms < 1000) return `${Math.round(ms)}ms`
  const s = Math.round(ms / 1000)
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`
  const h = Math.floor(m / 60)
  if (h < 24) return `${h}h${String(m % 60).padStart(2, "0")}m`
  return `${Math.floor(h / 24)}d${String(h % 24).padStart(2, "0")}h`
}

/**
 * A rate per second as text: `12.3/s`, `0.25/s`, `1.2k/s`.
 *
 * @since 0.1.0
 * @category formatting
 */
export const formatRate = (perSec: number): string =>
  perSec >= 1000 ? `${(perSec / 1000).toFixed(1)}k/s` : perSec >= 10 ? `${perSec.toFixed(1)}/s` : `${perSec.toFixed(2)}/s`

/**
 * A text progress bar of `width` cells for a fraction in [0, 1].
 *
 * @since 0.1.0
 * @category formatting
 */
export const bar = (fraction: number, width: number): string => {
  const f = Math.max(0, Math.min(1, fraction))
  const full = Math.round(f * width)
  return `[${"#".repeat(full)}${".".repeat(Math.max(0, width - full))}]`
}

/**
 * Options of {@link renderSnapshot}: line width in columns (default 80; at least 40;
 * `Infinity`: no line is cut, as `watch` writes to a file or a pipe) and ANSI colour
 * (default off).
 *
 * @since 0.1.0
 * @category models
 */
export interface RenderOptions {
  readonly width?: number | undefined
  readonly color?: boolean | undefined
}

const ANSI = { green: "32", red: "31", yellow: "33", cyan: "36", dim: "2", bold: "1" } as const

/** Replaces control characters (a stored message must not drive the terminal). */
const clean = (s: string): string => s.replace(/[\u0000-\u001f\u007f-\u009f]/g, " ")

const truncate = (s: string, width: number): string => (s.length <= width ? s : `${s.slice(0, Math.max(0, width - 1))}…`)

/**
 * The status words of a snapshot: the run's stored status, except a stale run (stored as
 * running, no heartbeat any more), which reads
 * `stale (no heartbeat since 14:03:10: its writer is gone; resume continues it)`; for the
 * whole store, `running`, `stale` or `finished`.
 *
 * @since 0.2.0
 * @category rendering
 */
export const statusOf = (s: Snapshot): string => {
  if (s.run !== null) {
    return s.run.stale
      ? `stale (no heartbeat since ${formatUntil(s.run.heartbeat_at, s.generated_at)}: its writer is gone; resume continues it)`
      : s.run.status
  }
  return s.running ? "running" : s.stale ? "stale" : "finished"
}

/**
 * The one-line summary `watch` prints when stdout is not a terminal, e.g.
 * `run 2025…-ab12cd34 running: 450/1000 done (45.0%) · 12 failed · 30 admitted · 12.3/s · ETA 44s`.
 * `admitted` counts pipelines admitted and not finished (stored state `running`: in flight,
 * waiting for a worker or for a retry), the word `assay run`'s progress line uses too; an
 * interrupted count and the lost global leases (`3 global leases lost`) appear when there are some; one member of a suite adds `[member ID]`
 * after the run; each pool resource with an acquisition state (`adaptive`) adds it, as the
 * multi-line picture says it (`llm/a adaptive delivered 19.8 req/s lately, …`). Store text is
 * stripped of control characters.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderLine = (s: Snapshot): string => {
  if (s.run_id === null) return "no run yet"
  const by = s.pipelines.by_state
  const run = s.run_id === "all" ? `all runs (${s.runs_total})` : `run ${clean(s.run_id)}`
  // one member of a suite (`watch --experiment ID`): say whose figures these are
  const member = s.suite?.experiment ?? null
  const head = member === null ? run : `${run} [member ${clean(member)}]`
  const parts = [
    s.total !== null
      ? `${s.done}/${s.total} done (${((s.progress ?? 0) * 100).toFixed(1)}%)`
      : `${s.done}/${s.pipelines.total} done`,
    `${by.failed} failed`
  ]
  if (by.interrupted > 0) parts.push(`${by.interrupted} interrupted`)
  parts.push(`${by.running} admitted`)
  const rate = s.throughput.recent_per_sec ?? s.throughput.per_sec
  if (rate !== null) parts.push(formatRate(rate))
  if (s.eta_ms !== null) parts.push(`ETA ${formatDuration(s.eta_ms)}`)
  if (s.retries > 0) parts.push(`${s.retries} retries`)
  // (ends included, split: maxHandoffs is spent by all but `end`, tester13h finding 6)
  if (s.handoffs_total > 0) parts.push(`transitions ${transitionsText(s.handoffs_total, s.handoffs_budgeted ?? undefined)}`)
  const lost = (s.leases_lost ?? []).reduce((a, l) => a + l.lost, 0)
  if (lost > 0) parts.push(`${lost} global lease${lost === 1 ? "" : "s"} lost`)
  // each resource's acquisition state (adaptive: its learned rate and window), so that every
  // frame a pipe gets carries it, not only the last one (tester18c F8)
  for (const r of s.resources) {
    if (r.algorithm_text !== "") parts.push(`${clean(r.pool)}/${clean(r.resource_id)} ${clean(r.algorithm_text)}`)
  }
  return `${head} ${clean(statusOf(s))}: ${parts.join(" · ")}`
}

/**
 * The multi-line terminal picture of a snapshot (what `watch` draws on a terminal): run
 * header (a stale run reads as stale, see {@link statusOf}), progress bar, counts by state
 * (`admitted` for pipelines admitted and not finished), throughput and ETA, the percentiles
 * of the ended pipelines' time in the run (`time in run (incl. queueing)`: admission to end,
 * so waiting for a worker slot counts; the field stays `latency_ms`), reported metrics, pool
 * resources, lost global leases (when a runner on PostgreSQL pools lost some), the call cache (hits, misses, failed writes, tokens saved) and recent errors (full
 * pipeline ids). Lines are cut to `width`; store text is
 * stripped of control characters; colour is ANSI SGR when `color` is set.
 *
 * @since 0.1.0
 * @category rendering
 */
export const renderSnapshot = (s: Snapshot, options: RenderOptions = {}): string => {
  const width = Math.max(40, options.width ?? 80)
  const paint = (code: keyof typeof ANSI, text: string) => (options.color === true ? `\u001b[${ANSI[code]}m${text}\u001b[0m` : text)
  const lines: Array<string> = []
  const push = (plain: string, painted?: string) => {
    const cut = truncate(plain, width)
    lines.push(painted !== undefined && cut === plain ? painted : cut)
  }
  if (s.run_id === null) return "assay: no run in this store yet\n"
  const by = s.pipelines.by_state
  const shown = clean(statusOf(s))
  if (s.run !== null) {
    const r = s.run
    const status = r.stale
      ? paint("yellow", shown)
      : r.status === "running"
      ? paint("cyan", shown)
      : r.status === "completed"
      ? paint("green", shown)
      : paint("yellow", shown)
    const label = r.label === null ? "" : ` (${clean(r.label)})`
    const tail = ` · ${s.elapsed_ms === null ? "" : formatDuration(s.elapsed_ms)}${r.stop_reason === null ? "" : ` · stop: ${clean(r.stop_reason)}`}`
    push(`run ${clean(r.run_id)}${label} · ${shown}${tail}`, `run ${paint("bold", clean(r.run_id))}${label} · ${status}${tail}`)
  } else {
    const latest = s.latest_run === null ? "" : ` · latest run ${clean(s.latest_run.run_id)}`
    push(`all runs (${s.runs_total}) · ${shown}${latest}`)
  }
  const rate = s.throughput.recent_per_sec ?? s.throughput.per_sec
  const rateText = rate === null ? "" : ` · ${formatRate(rate)}`
  const eta = s.eta_ms === null ? "" : ` · ETA ${formatDuration(s.eta_ms)}`
  if (s.total !== null) {
    const pct = `${((s.progress ?? 0) * 100).toFixed(1)}%`
    const text = `${s.done}/${s.total} ${pct}${rateText}${eta}`
    const barWidth = Math.max(10, Math.min(40, width - text.length - 12))
    push(`progress ${bar(s.progress ?? 0, barWidth)} ${text}`)
  } else {
    push(`progress ${s.done}/${s.pipelines.total} done${rateText} (source size unknown: no ETA)`)
  }
  push(
    `pipelines ${s.pipelines.total}: ${by.succeeded} succeeded · ${by.failed} failed · ${by.interrupted} interrupted · ${by.running} admitted · ${by.pending} pending`,
    `pipelines ${s.pipelines.total}: ${paint("green", `${by.succeeded} succeeded`)} · ${
      by.failed > 0 ? paint("red", `${by.failed} failed`) : `${by.failed} failed`
    } · ${by.interrupted} interrupted · ${by.running} admitted · ${by.pending} pending`
  )
  const lat = s.latency_ms === null
    ? ""
    // admission to end: includes waiting for a worker slot (not the pipelines' own latency)
    : ` · time in run (incl. queueing) p50 ${formatDuration(s.latency_ms.p50)} p95 ${formatDuration(s.latency_ms.p95)} p99 ${formatDuration(s.latency_ms.p99)}`
  push(`tasks ${s.tasks} · attempts ${s.attempts_total} · retries ${s.retries}${lat}`)
  // a line of its own (the split does not fit beside the latencies in 80 columns); ends
  // included, split: maxHandoffs is spent by all but `end` (tester13h finding 6)
  if (s.handoffs_total > 0) push(`transitions ${transitionsText(s.handoffs_total, s.handoffs_budgeted ?? undefined)}`)
  if (s.metrics.length > 0) {
    push(s.run_id === "all" && s.metrics_run_id !== null ? `metrics (of run ${clean(s.metrics_run_id)})` : "metrics")
    for (const m of s.metrics) push(`  ${clean(m.label ?? m.name)}: ${clean(formatMetric(m.value, m.display))}`)
  }
  if (s.resources.length > 0) {
    push("pools")
    for (const r of s.resources) {
      const occ = r.capacity === null ? "" : ` ${r.active ?? 0}/${r.capacity}`
      const wait = r.pool_wait_ms_p95 === null ? "" : ` · wait p95 ${formatDuration(r.pool_wait_ms_p95)}`
      const fails = r.consecutive_failures !== null && r.consecutive_failures > 0 ? ` · ${r.consecutive_failures} failures` : ""
      const hold = holdOf(r, s.generated_at)
      // the acquisition algorithm's learned state (adaptive: its rate and window), as report
      // and the dashboard show it
      const algo = r.algorithm_text === "" ? "" : ` · ${clean(r.algorithm_text)}`
      const restored = r.restored_text === "" ? "" : ` · ${clean(r.restored_text)}`
      push(`  ${clean(r.pool)}/${clean(r.resource_id)} ${clean(r.state ?? "?")}${occ}${wait}${fails}${hold === "" ? "" : ` · ${hold}`}${algo}${restored}`)
    }
  }
  if (s.leases_lost !== undefined && s.leases_lost.length > 0) {
    // global leases a runner lost (its slot taken, or no renewal before its deadline)
    const n = s.leases_lost.reduce((a, l) => a + l.lost, 0)
    push(`global leases lost ${n} (attempts retried)`, `${paint("yellow", `global leases lost ${n}`)} (attempts retried)`)
    for (const l of s.leases_lost) {
      push(`  ${clean(l.pool)}/${clean(l.resource_id)} ${l.lost} lost · taken ${l.taken} · deadline ${l.deadline}${l.max_late_ms > 0 ? ` · up to ${formatDuration(l.max_late_ms)} late` : ""}`)
    }
  }
  if (s.accounting !== undefined && (s.accounting.calls > 0 || s.accounting.tokens_in + s.accounting.tokens_out > 0)) {
    // what the model calls used and cost so far (the run's summary and report say the same):
    // every call sent, and how many were answered when not all were
    const a = s.accounting
    const estimated = a.estimated > 0 ? ` (${a.estimated} estimated)` : ""
    push(`model calls ${callsText({ calls: a.calls, refused: a.refused, failedCalls: a.failed_calls })} · tokens in ${a.tokens_in}, out ${a.tokens_out}${estimated} · cost ${formatCost(a.cost_usd, a.unpriced)}`)
  }
  if (s.cache !== undefined) {
    // the call cache: a failed write is said (the call it kept is made again next run)
    const c = s.cache
    const failed = `${
      c.lookup_failures > 0 ? ` · ${c.lookup_failures} cache lookup${c.lookup_failures === 1 ? "" : "s"} failed` : ""
    }${c.write_failures > 0 ? ` · ${c.write_failures} cache write${c.write_failures === 1 ? "" : "s"} failed` : ""}`
    const text = `call cache: hits ${c.hits} · misses ${c.misses}${c.refreshed > 0 ? ` · refreshed ${c.refreshed}` : ""}${
      c.bypassed > 0 ? ` · read-only misses ${c.bypassed}` : ""
    }${failed} · saved ${c.tokens_saved.total_tokens} tokens${c.cost_saved_usd === null ? "" : `, ${formatUsd(c.cost_saved_usd)}`}`
    push(text, failed === "" ? text : text.replace(failed, paint("red", failed)))
  }
  if (s.suite !== undefined) {
    push(`suite ${clean(s.suite.suite_id)} (${s.suite.layout})${s.suite.experiment === null ? "" : ` · member ${clean(s.suite.experiment)}`}`)
    for (const m of s.suite.members) {
      const b = m.by_state
      const skipped = m.skipped !== null ? ` · ${m.skipped} skipped` : m.skipped_recorded ? "" : " · skipped: not recorded"
      const err = m.source?.source_error
      const source = m.source_status === "error"
        ? `source error: ${clean(err ?? "")}`
        : m.source_status === "interrupted"
        ? "source not exhausted (run ended)"
        : m.source_status === "failures"
        ? "stopped by its own stopAfterFailures"
        : m.source_status === "not_selected"
        ? "not selected"
        : `source ${m.source_status}`
      push(`  ${clean(m.experiment_id)}: ${m.pipelines} (${b.succeeded} ok · ${b.failed} failed · ${b.interrupted} interrupted)${skipped} · ${source}`)
    }
  }
  if (s.recent_errors.length > 0) {
    push(`errors (${by.failed} failed; latest ${s.recent_errors.length})`)
    for (const e of s.recent_errors) {
      const what = [e.error_type, e.error_message].filter((x) => x !== null).join(": ")
      push(`  ${clean(e.pipeline_id)} ${clean(e.failed_task ?? "?")}: ${clean(what)}`)
    }
  }
  return `${lines.join("\n")}\n`
}
