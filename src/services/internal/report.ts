/**
 * The after-the-fact report of one or more stores (`assay report STORE...`): which runs,
 * their status, pipeline counts by state, attempts and retries, latency percentiles, pool
 * resource health with per-resource attempts / retries / rate limits, reported metrics,
 * recent errors, and pipelines whose terminal repair failed. Several stores are merged:
 * pipelines are deduplicated by id with the rules of `Merge.beats`.
 *
 * Reports only read: every store is opened read-only, and a `running` run whose heartbeat is
 * older than {@link STALE_AFTER_MS} is *shown* as interrupted (stale) without being rewritten.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Predicate, Stream } from "effect"
import { ConfigError, type PluginError, type StoreUnavailable } from "../../domain/Errors.js"
import type { PipelineId, RunId } from "../../domain/Ids.js"
import type { EventRecord, MetricDisplay, PipelineRecord, PipelineState, RunRecord } from "../../domain/Records.js"
import * as CallCache from "../CallCache.js"
import * as Export from "./export.js"
import { beats, latencyOf } from "./merge.js"
import type {
  AccountingFigures,
  ErrorRow,
  Latency,
  PipelineAccounting,
  ReadError,
  ResourceUsage,
  StoreOpener,
  StoreStats,
  TaskStore
} from "../Store.js"
import {
  accountingFold,
  orderPipelineAccounting,
  sumFigures,
  sumUsage,
  takenPipelinesOf,
  usageAccumulator,
  zeroFigures,
  zeroUsage
} from "./store/shared.js"
import { cacheHitsText, callsText, formatCost, formatUsd, knownCost } from "./money.js"
import { errorRowOf } from "../../domain/TaskStore.js"
import { algorithmText, restoredText } from "./algorithmState.js"
import { type LeasesLost, leaseLostEvents, leasesLostText, tallyLeasesLost } from "./leasesLost.js"
import { transitionsText } from "../../domain/internal/transitions.js"

/**
 * A running run whose heartbeat is older than this (ms) is reported as interrupted (stale).
 *
 * @since 0.1.0
 * @category constants
 */
export const STALE_AFTER_MS = 30_000

/**
 * The stale threshold of a run (ms): `staleAfterMs` when given, else the `staleAfter` the run
 * recorded in its config (`config.staleAfterMs`), else {@link STALE_AFTER_MS}.
 *
 * @since 0.2.0
 * @category reports
 */
export const staleAfterOf = (r: RunRecord, staleAfterMs?: number | undefined): number => {
  if (staleAfterMs !== undefined) return staleAfterMs
  const config = r.config as Record<string, unknown> | null
  const recorded = typeof config === "object" && config !== null ? config.staleAfterMs : undefined
  return typeof recorded === "number" && Number.isFinite(recorded) && recorded > 0 ? recorded : STALE_AFTER_MS
}

/**
 * Whether a run is stale at `nowMs` (epoch ms): stored as `running` with a heartbeat older
 * than {@link staleAfterOf} — its writer died without closing it. `report` shows it as
 * interrupted (stale), `watch` and `serve` as stale; none of them shows it running.
 *
 * @since 0.2.0
 * @category reports
 */
export const isStale = (r: RunRecord, nowMs: number, staleAfterMs?: number | undefined): boolean =>
  r.status === "running" && nowMs - r.heartbeatAt > staleAfterOf(r, staleAfterMs)

/**
 * Report options: `runId` selects runs (absent: each store's most recent run; `"all"`: every
 * run; an id: that run, which must exist in at least one store), `errors` the number of
 * recent errors listed (default 10; non-negative integer), `staleAfterMs` the stale threshold
 * (default: each run's own `staleAfter`, see {@link staleAfterOf}).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReportOptions {
  readonly runId?: string | undefined
  readonly errors?: number | undefined
  readonly staleAfterMs?: number | undefined
  /**
   * How many pipelines the per-pipeline accounting lists (the top N by `pipelinesBy`; default
   * {@link TOP_PIPELINES}; 0: none). Read only when some attempt made a model call or was a
   * cache hit.
   */
  readonly topPipelines?: number | undefined
  /** The order of the per-pipeline accounting: `cost` (default) or `tokens` (in + out). */
  readonly pipelinesBy?: "cost" | "tokens" | undefined
}

/**
 * The number of pipelines the report's per-pipeline accounting lists by default.
 *
 * @since 0.8.0
 * @category constants
 */
export const TOP_PIPELINES = 10

/**
 * One selected run as reported: `status` is the stored status, `shownStatus` what the report
 * says (`interrupted` for a stale running run), `stale` whether its heartbeat is too old.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReportRun {
  readonly source: string
  readonly runId: string
  readonly label: string | null
  readonly status: RunRecord["status"]
  readonly shownStatus: RunRecord["status"]
  readonly stale: boolean
  readonly startedAt: number
  readonly heartbeatAt: number
  readonly endedAt: number | null
  readonly stopReason: string | null
}

/**
 * One pool resource: its stored health, and what the selected runs' attempts did on it
 * (joined through lease ids `pool/resourceId#n`): attempts, retries (attempts run because the
 * previous attempt of the same task run ended with a decision to retry; a re-run after a kill
 * is none) and
 * rate-limited attempts (`errorClass` `rate_limit`, e.g. HTTP 429).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReportResource extends Accounting {
  readonly source: string
  readonly pool: string
  readonly resourceId: string
  readonly kind: string
  readonly health: unknown
  readonly attempts: number
  readonly retries: number
  readonly rateLimited: number
}

/**
 * Token and cost figures (see `Pricing`): `tokensIn` / `tokensOut`, `costUsd` (US dollars,
 * the sum of the known costs: a lower bound when `unpriced` > 0; `null` when calls without a
 * price made it up and none had one, never a `0` that reads as free), `estimated` (attempts whose tokens were estimated: the server
 * reported no usage), `unpriced` (attempts with tokens but no known cost: no price configured
 * and none reported by the server).
 *
 * @since 0.8.0
 * @category models
 */
export interface Accounting {
  readonly tokensIn: number
  readonly tokensOut: number
  readonly costUsd: number | null
  readonly estimated: number
  readonly unpriced: number
}

/**
 * The accounting of a report (see `AccountingFigures`):
 *
 * - `total` over the selected runs and each of `runs` count every attempt **once** (with its
 *   `calls` and `cacheHits`), whether it leased no resource, one or several;
 * - `pools` and the resources (on each {@link ReportResource}) count an attempt on **each**
 *   resource it leased (what that resource served), so when attempts leased several resources
 *   `resourcesSum` (the resources' figures added up) is more than `total`, by the figures of
 *   those attempts once per extra resource; `multiLeased` says whether that happened;
 * - `pipelines`: the top `limit` pipelines `by` cost or tokens (each attempt once; `source`
 *   the store), empty when no attempt made a model call or was a cache hit;
 * - `pools`: each pool's subtotal of its resources (`resources` how many, `attempts` theirs
 *   summed), the same counting as the resources'.
 *
 * @since 0.8.0
 * @category models
 */
export interface ReportAccounting {
  readonly total: PricedFigures
  /**
   * The whole experiment (every run of the stores, each attempt once), present when the
   * selection leaves some run out (the default, the latest run, after a resume; or one run by
   * id): `runs` the number of runs it covers. What the report's scope line sets beside
   * `total` (since 0.9.0).
   */
  readonly experiment?: (PricedFigures & { readonly runs: number }) | undefined
  readonly runs: ReadonlyArray<PricedFigures & { readonly source: string; readonly runId: string }>
  readonly pools: ReadonlyArray<Accounting & { readonly pool: string; readonly resources: number; readonly attempts: number }>
  readonly resourcesSum: Accounting
  readonly multiLeased: boolean
  readonly pipelines: {
    readonly by: "cost" | "tokens"
    readonly limit: number
    readonly rows: ReadonlyArray<Omit<PipelineAccounting, "costUsd"> & { readonly costUsd: number | null; readonly source: string }>
  }
}

/**
 * {@link AccountingFigures} as a report gives them: `costUsd` the sum of the known costs, a
 * lower bound when `unpriced` > 0, `null` when none of the calls had a price (see
 * {@link Accounting}).
 *
 * @since 0.8.0
 * @category models
 */
export type PricedFigures = Omit<AccountingFigures, "costUsd"> & { readonly costUsd: number | null }

/** Figures with their cost made honest: `null` when no call in them had a price. */
const priced = <A extends { readonly costUsd: number | null; readonly unpriced: number }>(a: A): A => ({
  ...a,
  costUsd: knownCost(a.costUsd, a.unpriced)
})

const zeroAccounting: Accounting = { tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 }

const addAccounting = (a: Accounting, b: Accounting): Accounting => ({
  tokensIn: a.tokensIn + b.tokensIn,
  tokensOut: a.tokensOut + b.tokensOut,
  costUsd: (a.costUsd ?? 0) + (b.costUsd ?? 0),
  estimated: a.estimated + b.estimated,
  unpriced: a.unpriced + b.unpriced
})

const accountingOf = (u: Accounting): Accounting => ({
  tokensIn: u.tokensIn ?? 0,
  tokensOut: u.tokensOut ?? 0,
  costUsd: u.costUsd ?? 0,
  estimated: u.estimated ?? 0,
  unpriced: u.unpriced ?? 0
})

/**
 * A store's token and cost figures of a scope, each attempt once: its `stats` aggregate when
 * it gives them (`given`, or read), else its attempts folded (a plugin store written before
 * the aggregate).
 */
const figuresOf = (
  store: TaskStore,
  runId: RunId | undefined,
  given?: StoreStats | undefined
): Effect.Effect<AccountingFigures, ReadError> =>
  Effect.gen(function*() {
    const st = given ?? (yield* store.stats(runId))
    if (st.accounting !== undefined) return st.accounting
    const fold = accountingFold()
    yield* Stream.runForEach(store.streamAttempts({ runId }), (a) => Effect.sync(() => fold.add(a)))
    return fold.total()
  })

/**
 * A store's top pipelines by cost or tokens: its `pipelineAccounting` aggregate, or its
 * attempts folded (a plugin store written before it).
 */
const topPipelinesOf = (
  store: TaskStore,
  runId: RunId | undefined,
  orderBy: "cost" | "tokens",
  limit: number
): Effect.Effect<ReadonlyArray<PipelineAccounting>, ReadError> => {
  if (typeof (store as Partial<TaskStore>).pipelineAccounting === "function") return store.pipelineAccounting({ runId, orderBy, limit })
  return Effect.suspend(() => {
    const fold = accountingFold()
    return Effect.map(
      Stream.runForEach(store.streamAttempts({ runId }), (a) => Effect.sync(() => fold.add(a))),
      () => fold.pipelines({ orderBy, limit })
    )
  })
}

/**
 * The accounting figures in words: `tokens in 1200, out 340 (2 attempt(s) estimated); cost
 * ≥ $0.0031 (1 attempt unpriced)` (see `formatCost`: never a bare dollar figure when an attempt had
 * no price).
 *
 * @since 0.8.0
 * @category formatting
 */
export const accountingText = (a: Accounting): string =>
  `tokens in ${a.tokensIn}, out ${a.tokensOut}${a.estimated > 0 ? ` (${a.estimated} attempt(s) estimated)` : ""}; cost ${formatCost(a.costUsd, a.unpriced)}`

/**
 * Figures counted once per attempt in words: the calls and cache hits, then
 * {@link accountingText}: `calls 20, cache hits 28 (any cached task; 20 model calls saved);
 * tokens in 1200, out 340; cost $0.0031`. The hits are of every cached task, model calls or not
 * (a pure `Task.make(…, { cache: true })` hit is one too), so they are worded as such; the
 * model calls saved are the hits of tasks that declare a pool resource (`modelCallHits`).
 *
 * @since 0.8.0
 * @category formatting
 */
export const figuresText = (a: Omit<AccountingFigures, "costUsd"> & { readonly costUsd: number | null }): string =>
  `calls ${callsText(a)}${cacheHitsText(a)}; ${accountingText(a)}`

/**
 * One reported metric card, with `text` formatted by its display (number, percent, text).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReportMetric {
  readonly runId: string
  readonly pipelineId: string | null
  readonly name: string
  readonly label: string | null
  readonly display: MetricDisplay
  readonly value: unknown
  readonly text: string
}

/**
 * The whole report (what `--json` prints).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReportData {
  readonly stores: ReadonlyArray<string>
  /** `"latest"`, `"all"` or the explicit run id. */
  readonly selection: string
  readonly runs: ReadonlyArray<ReportRun>
  /**
   * The selected runs' pipelines: those filed under them, and those that ran under them and
   * are filed under another run now ({@link ReportData.taken}, counted in `failed` or
   * `interrupted`).
   */
  readonly pipelines: number
  readonly byState: Readonly<Record<PipelineState, number>>
  /**
   * The pipelines that ran under a selected run (a task row, an attempt row or a
   * `pipeline.interrupted` event of it) and whose rows another submission admitted again, so
   * that they are filed under that run now (see {@link ReportTaken}): counted in `pipelines`
   * and `byState` as what they did under the selected run, as the run's own summary counts
   * them. Empty with `--run-id all` (every row is counted under the run it is filed under).
   */
  readonly taken: ReadonlyArray<ReportTaken>
  readonly duplicates: number
  readonly tasks: number
  readonly attempts: number
  readonly retries: number
  /**
   * Control transitions (handoff ledger rows) the selected runs committed, summed over the
   * stores (`StoreStats.handoffsTotal`; 0 for runs of plain pipelines). Like `tasks` and
   * `attempts` it counts work, so a revisited station's rows all count.
   */
  readonly handoffsTotal: number
  /**
   * Of `handoffsTotal`, the transitions that spent a unit of a `maxHandoffs` budget (all but
   * `end`: `StoreStats.handoffsBudgeted`, summed); `null` when a store does not say (a plugin
   * store written before the figure).
   */
  readonly handoffsBudgeted: number | null
  readonly latencyMs: Latency | null
  readonly resources: ReadonlyArray<ReportResource>
  readonly metrics: ReadonlyArray<ReportMetric>
  readonly errors: ReadonlyArray<ErrorRow & { readonly source: string }>
  /**
   * Stores whose WAL still holds pages the last writer could not copy into the database file
   * at close (readers kept it busy; SQLite only): the `-wal` must be copied with such a file.
   */
  readonly walPending: ReadonlyArray<{ readonly source: string; readonly frames: number }>
  /**
   * What the call cache did in the selected runs: hits (served, no call), misses (called and
   * stored), refreshed, read-only misses, failed writes, and the tokens the hits saved (see
   * `CallCache.CacheStats`).
   */
  readonly cache: CallCache.CacheSummary
  /** Token and cost accounting of the selected runs (see {@link ReportAccounting}). */
  readonly accounting: ReportAccounting
  /**
   * Global leases lost by the selected runs (`lease.lost` events of runners on PostgreSQL
   * pools), per store and pool resource, only resources that lost some (see `LeasesLost`:
   * `taken` by another runner, `deadline` passed without a renewal); empty on local pools.
   * Each lost lease's attempt was retried (since 0.11.0).
   */
  readonly leasesLost: ReadonlyArray<LeasesLost & { readonly source: string }>
  readonly repairFailures: {
    readonly count: number
    readonly pipelines: ReadonlyArray<{ readonly pipelineId: string; readonly phases: ReadonlyArray<string>; readonly source: string }>
  }
  /**
   * Runs that died (kill -9, a crash, a lost machine) with pipelines in flight, as the runs that
   * claimed those pipelines recorded them (`pipeline.abandoned` events), per store and dead run:
   * see {@link ReportInFlight}. Empty when no selected run claimed or lost one. Since 0.12.0
   * (stores written before hold an `Abandoned` attempt row for each instead: reported the same
   * way, and not counted in `attempts`).
   */
  readonly inFlightAtStop: ReadonlyArray<ReportInFlight>
}

/**
 * Pipelines of a selected run (`runId`) filed under another run now (`filedUnder`: a
 * submission admitted them again after they ended under `runId`): `failed` of them failed
 * under `runId`, `interrupted` were stopped there (its `pipeline.interrupted` event, or claimed
 * after it died). See `TaskStore.takenPipelines`.
 *
 * @since 0.20.0
 * @category models
 */
export interface ReportTaken {
  readonly source: string
  readonly runId: string
  readonly filedUnder: string
  readonly failed: number
  readonly interrupted: number
}

/**
 * One run that stopped without recording what it had in flight (killed, crashed), as the runs
 * that claimed its pipelines saw it: `pipelines` were in flight (admitted, waiting for a worker
 * slot or a retry's delay, or running an attempt), and at most `mayHaveCalled` of them
 * (`min(pipelines, concurrency, poolCapacity)`: the run's worker slots, and the leases the
 * pools its attempts leased hold at once) can have had a call running: a model call made and
 * paid for, its answer lost. No attempt row is recorded for them (the
 * store keeps no durable mark of an attempt's start); the claiming run ran them again.
 * `concurrency` is `null` when the dead run's record is gone (then `mayHaveCalled` is
 * `pipelines`). `claimedBy`: the runs that claimed them. A store written before 0.12 has no
 * such events: its claiming runs' `Abandoned` attempt rows are read instead (`legacyRows`).
 *
 * @since 0.12.0
 * @category models
 */
export interface ReportInFlight {
  readonly source: string
  readonly runId: string
  readonly pipelines: number
  readonly concurrency: number | null
  /** The pools the dead run's recorded attempts leased (sorted; empty when it recorded none). */
  readonly leasedPools: ReadonlyArray<string>
  /**
   * The total capacity (leases at once) of the resources of `leasedPools`, as the store last
   * recorded them; `null` when unknown (no leased pool, or a resource without a capacity).
   */
  readonly poolCapacity: number | null
  readonly mayHaveCalled: number
  readonly claimedBy: ReadonlyArray<string>
  /**
   * `Abandoned` attempt rows an earlier assay recorded for these pipelines (a store written
   * before 0.12, whose claiming runs recorded no event): read from the claiming runs' attempts,
   * not counted in the report's `attempts` (an export still lists them). 0 otherwise.
   */
  readonly legacyRows: number
}

/** How the embedded engine's `Abandoned` rows (stores written before 0.12) begin. */
const LEGACY_ABANDONED = "attempt abandoned: its run died"

/**
 * A metric value as its card shows it: `percent` multiplies a number by 100 (one decimal,
 * `%`), `number` prints up to 4 significant decimals, `text` prints strings as is and other
 * values as JSON.
 *
 * @since 0.1.0
 * @category formatting
 */
export const formatMetric = (value: unknown, display: MetricDisplay): string => {
  if (display === "percent" && typeof value === "number") return `${(value * 100).toFixed(1)}%`
  if (display === "number" && typeof value === "number") return String(Number(value.toPrecision(6)))
  return typeof value === "string" ? value : JSON.stringify(value)
}

const STATES: ReadonlyArray<PipelineState> = ["pending", "running", "succeeded", "failed", "interrupted"]

/** One store with its selected runs. */
interface Selected {
  readonly source: string
  readonly store: TaskStore
  readonly runs: ReadonlyArray<RunRecord>
}

/**
 * The pools a run's recorded attempts leased (from its resource usage) and their resources'
 * total capacity as the store last recorded it (`health.capacity`, else `spec.capacity`):
 * how many calls the run can have had in progress at once. `capacity` is `null` when the run
 * leased nothing it recorded, or a resource of those pools has no known capacity.
 */
const leasedCapacity = (
  store: TaskStore,
  runId: RunId
): Effect.Effect<{ readonly pools: ReadonlyArray<string>; readonly capacity: number | null }, ReadError> =>
  Effect.gen(function*() {
    const usage = yield* usageOf(store, runId)
    const pools = Array.from(new Set(usage.filter((u) => u.attempts > 0).map((u) => u.target.split("/")[0]!))).sort()
    if (pools.length === 0) return { pools, capacity: null }
    let capacity = 0
    for (const r of yield* store.resources) {
      if (!pools.includes(r.pool)) continue
      const of = (u: unknown) =>
        Predicate.isObject(u) && typeof (u as { capacity?: unknown }).capacity === "number" ? (u as { capacity: number }).capacity : null
      const c = of(r.health) ?? of(r.spec)
      if (c === null || !Number.isFinite(c)) return { pools, capacity: null }
      capacity += c
    }
    return { pools, capacity: capacity > 0 ? capacity : null }
  })

/** The run scopes of a store: every pipeline (`undefined`) or each selected run's own. */
const scopesOf = (s: Selected, all: boolean): ReadonlyArray<RunId | undefined> =>
  all ? [undefined] : s.runs.map((r) => r.runId)

/**
 * A store's resource usage for a scope: its `resourceUsage` aggregate, or, for a store that
 * lacks it (a plugin written before it existed, in JavaScript), its attempts folded in order.
 */
const usageOf = (store: TaskStore, runId: RunId | undefined): Effect.Effect<ReadonlyArray<ResourceUsage>, ReadError> => {
  if (typeof (store as Partial<TaskStore>).resourceUsage === "function") return store.resourceUsage(runId)
  return Effect.suspend(() => {
    const acc = usageAccumulator()
    return Effect.map(Stream.runForEach(store.streamAttempts({ runId }), (a) => Effect.sync(() => acc.add(a))), () => acc.result())
  })
}

/** The pipeline figures of a report: what the scopes hold, deduplicated by pipeline id. */
interface PipelineFigures {
  readonly pipelines: number
  readonly byState: Readonly<Record<PipelineState, number>>
  readonly duplicates: number
  readonly latencyMs: Latency | null
  readonly errors: ReadonlyArray<ErrorRow & { readonly source: string }>
  /** Those of `ids` whose pipeline is in scope (reported). */
  readonly inScope: (ids: ReadonlyArray<PipelineId>) => Effect.Effect<ReadonlySet<string>, StoreUnavailable>
}

/**
 * The first `limit` of the items added, in a stable descending order of `keyOf`: what sorting
 * every item stably and taking the first `limit` gives, holding at most about `2 × limit`.
 */
const topBy = <A>(keyOf: (a: A) => number, limit: number) => {
  let kept: Array<A> = []
  const trim = () => {
    kept.sort((a, b) => keyOf(b) - keyOf(a)) // stable: ties keep their order of arrival
    if (kept.length > limit) kept = kept.slice(0, limit)
  }
  return {
    add: (a: A) => {
      kept.push(a)
      if (kept.length >= 2 * limit + 64) trim()
    },
    result: (): ReadonlyArray<A> => {
      trim()
      return kept
    }
  }
}

/** The recent-error order: latest finish (`endedAt`, else `updatedAt`) first. */
const finishOf = (p: Pick<PipelineRecord, "endedAt" | "updatedAt">) => p.endedAt ?? p.updatedAt

/**
 * One store: its scopes are disjoint (a pipeline has one owner run), so the counts and the
 * latency are its aggregates (`given`); the recent errors are its failed pipelines of the
 * scope, read through the state index (pipeline order, so ties keep the order of the rows).
 */
const singleScope = (
  s: Selected,
  all: boolean,
  errorsLimit: number,
  given: Pick<PipelineFigures, "pipelines" | "byState" | "latencyMs">
): Effect.Effect<PipelineFigures, ReadError> =>
  Effect.gen(function*() {
    const scopes = scopesOf(s, all)
    const top = topBy((p: PipelineRecord) => finishOf(p), errorsLimit)
    for (const runId of scopes) {
      yield* Stream.runForEach(s.store.streamPipelines({ runId, state: "failed" }), (p) => Effect.sync(() => top.add(p)))
    }
    const runIds = new Set<string>(scopes.flatMap((r) => (r === undefined ? [] : [r])))
    return {
      ...given,
      duplicates: 0,
      errors: top.result().map((p) => ({ ...errorRowOf(p), source: s.source })),
      inScope: (ids) =>
        Effect.map(s.store.getPipelines(ids), (found) => {
          const out = new Set<string>()
          for (const [id, p] of found) if (all || runIds.has(p.runId)) out.add(id)
          return out
        })
    }
  })

/**
 * Several stores: pipelines are deduplicated by id with the rules of `Merge.beats` (the first
 * source wins a complete tie), which needs every pipeline id of every scope: each is read
 * once, and only what the figures use is kept of it (state and times; the whole row of a
 * failed one, for the errors).
 */
const mergedScopes = (
  selected: ReadonlyArray<Selected>,
  all: boolean,
  errorsLimit: number
): Effect.Effect<PipelineFigures, ReadError> =>
  Effect.gen(function*() {
    interface Kept {
      readonly state: PipelineState
      readonly startedAt: number | null
      readonly endedAt: number | null
      readonly updatedAt: number
      readonly source: string
      readonly failed: PipelineRecord | undefined
    }
    const winners = new Map<string, Kept>()
    let duplicates = 0
    for (const s of selected) {
      for (const runId of scopesOf(s, all)) {
        yield* Stream.runForEach(s.store.streamPipelines({ runId }), (p) =>
          Effect.sync(() => {
            const kept: Kept = {
              state: p.state,
              startedAt: p.startedAt,
              endedAt: p.endedAt,
              updatedAt: p.updatedAt,
              source: s.source,
              failed: p.state === "failed" ? p : undefined
            }
            const prev = winners.get(p.pipelineId)
            if (prev === undefined) winners.set(p.pipelineId, kept)
            else {
              duplicates++
              if (beats(kept, prev)) winners.set(p.pipelineId, kept)
            }
          }))
      }
    }
    const byState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
    const top = topBy((k: Kept) => finishOf(k), errorsLimit)
    for (const k of winners.values()) {
      byState[k.state]++
      if (k.failed !== undefined) top.add(k)
    }
    return {
      pipelines: winners.size,
      byState,
      duplicates,
      latencyMs: latencyOf(winners.values()),
      errors: top.result().map((k) => ({ ...errorRowOf(k.failed!), source: k.source })),
      inScope: (ids) => Effect.succeed(new Set(ids.filter((id) => winners.has(id))))
    }
  })

/**
 * Builds the report of already-opened stores (`source` names each one).
 *
 * Fails with `ConfigError` when an explicit run id is in none of the stores or `errors` is
 * not a non-negative integer, `StoreUnavailable` when a store cannot be read.
 *
 * @since 0.1.0
 * @category reports
 */
export const buildReport = (
  stores: ReadonlyArray<{ readonly source: string; readonly store: TaskStore }>,
  options: ReportOptions = {}
): Effect.Effect<ReportData, ReadError> =>
  Effect.gen(function*() {
    const errorsLimit = (yield* Export.checkLimit(options.errors)) ?? 10
    const now = yield* Clock.currentTimeMillis
    const all = options.runId === "all"

    // run selection, per store: undefined = no run filter (all)
    const selected: Array<Selected> = []
    /** Stores whose selection leaves some of their runs out, with how many runs they hold. */
    const partial: Array<{ readonly store: TaskStore; readonly runs: number }> = []
    let runsInStores = 0
    /** Every run of each store (the selection's and the others: a dead run's concurrency). */
    const runsOf = new Map<TaskStore, ReadonlyArray<RunRecord>>()
    for (const s of stores) {
      const runs = yield* s.store.listRuns
      runsInStores += runs.length
      const chosen = all
        ? runs
        : options.runId === undefined
        ? runs.slice(-1) // listRuns is oldest first
        : runs.filter((r) => r.runId === options.runId)
      selected.push({ ...s, runs: chosen })
      runsOf.set(s.store, runs)
      if (chosen.length < runs.length) partial.push({ store: s.store, runs: runs.length })
    }
    if (options.runId !== undefined && !all && selected.every((s) => s.runs.length === 0)) {
      return yield* new ConfigError({
        message: `run ${options.runId} is in none of the stores (${stores.map((s) => s.source).join(", ")})`,
        issues: [{ path: "runId", message: `unknown run ${options.runId}` }]
      })
    }

    const runs: Array<ReportRun> = selected.flatMap((s) =>
      s.runs.map((r) => {
        const stale = isStale(r, now, options.staleAfterMs)
        return {
          source: s.source,
          runId: r.runId,
          label: r.label,
          status: r.status,
          shownStatus: stale ? "interrupted" : r.status,
          stale,
          startedAt: r.startedAt,
          heartbeatAt: r.heartbeatAt,
          endedAt: r.endedAt,
          stopReason: stale ? "stale (no heartbeat)" : r.stopReason
        }
      })
    )

    // Counts come from each store's aggregates (`stats`, `resourceUsage`): nothing is read per
    // pipeline or per attempt. One store holds each pipeline once (its scopes are disjoint), so
    // its aggregates are the answer; several stores are deduplicated by id (see `mergedScopes`).
    let tasks = 0
    let attempts = 0
    let retries = 0
    let handoffsTotal = 0
    let handoffsBudgeted: number | null = 0
    const leasesLost: Array<LeasesLost & { readonly source: string }> = []
    const usage = new Map<string, Omit<ResourceUsage, "target">>()
    const runAccounting: Array<AccountingFigures & { readonly source: string; readonly runId: string }> = []
    let total: AccountingFigures = zeroFigures()
    let cache = CallCache.emptyStats
    const storeTotals = new Map<TaskStore, AccountingFigures>()
    /** Per store, its scopes: where the per-pipeline figures are read when there are any. */
    const accounted: Array<{ readonly source: string; readonly store: TaskStore; readonly runId: RunId | undefined }> = []
    const selectedRunIds = new Set<string>()
    const walPending: Array<{ source: string; frames: number }> = []
    const singleByState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
    let singlePipelines = 0
    let singleLatency: Latency | null = null
    for (const s of selected) {
      for (const runId of scopesOf(s, all)) {
        if (runId !== undefined) selectedRunIds.add(runId)
        // usage first: a SQLite store's usage scan also gives the attempt totals `stats` needs
        const scoped = yield* usageOf(s.store, runId)
        const st = yield* s.store.stats(runId)
        if (st.walPendingFrames !== undefined && st.walPendingFrames > 0 && !walPending.some((w) => w.source === s.source)) {
          walPending.push({ source: s.source, frames: st.walPendingFrames })
        }
        tasks += st.tasks
        attempts += st.attemptsTotal
        retries += st.retries
        handoffsTotal += st.handoffsTotal
        handoffsBudgeted = handoffsBudgeted === null || st.handoffsBudgeted === undefined
          ? (st.handoffsTotal === 0 ? handoffsBudgeted : null)
          : handoffsBudgeted + st.handoffsBudgeted
        singlePipelines += st.pipelines
        for (const k of STATES) singleByState[k] += st.byState[k]
        singleLatency = st.latencyMs
        for (const u of scoped) {
          const key = `${s.source}\u0000${u.target}`
          const { target: _, ...figures } = u
          usage.set(key, sumUsage(usage.get(key) ?? zeroUsage(), figures))
        }
        // the call cache's figures, from the scope's attempt rows
        cache = CallCache.sumStats(cache, yield* CallCache.statsOfScope(s.store, runId, st))
        // each attempt once (the resources' figures count it on every resource it leased)
        const figures = yield* figuresOf(s.store, runId, st)
        total = sumFigures(total, figures)
        storeTotals.set(s.store, sumFigures(storeTotals.get(s.store) ?? zeroFigures(), figures))
        if (figures.calls + figures.cacheHits > 0) accounted.push({ source: s.source, store: s.store, runId })
        if (runId !== undefined) runAccounting.push({ source: s.source, runId, ...figures })
      }
      // the store's lost global leases over its selected scopes, per resource
      const lost: Array<EventRecord> = []
      for (const runId of scopesOf(s, all)) lost.push(...(yield* leaseLostEvents(s.store, runId)))
      for (const l of tallyLeasesLost(lost)) leasesLost.push({ source: s.source, ...l })
      // every run of the store: each run's own figures (one aggregate read per run)
      if (all) {
        for (const run of s.runs) runAccounting.push({ source: s.source, runId: run.runId, ...(yield* figuresOf(s.store, run.runId)) })
      }
    }
    const merged = selected.length === 1
      ? yield* singleScope(selected[0]!, all, errorsLimit, {
        pipelines: singlePipelines,
        byState: singleByState,
        latencyMs: singleLatency
      })
      : yield* mergedScopes(selected, all, errorsLimit)
    const { duplicates, errors, inScope, latencyMs } = merged
    // a selected run's pipelines that another submission admitted again (their rows filed
    // under it now): counted as what they did under the selected run, shown apart (break39 F2)
    // One run id in several stores means copies of one store (shards have runs of their own, a
    // merged store copies its sources' rows): their counts are of the same pipelines, so the
    // largest is kept per (run, run filed under), not the sum (the counts carry no ids).
    const taken: Array<ReportTaken> = []
    if (!all) {
      for (const s of selected) {
        for (const r of s.runs) {
          for (const t of yield* takenPipelinesOf(s.store)(r.runId)) {
            const i = taken.findIndex((x) => x.runId === r.runId && x.filedUnder === t.runId)
            const prev = taken[i]
            if (prev === undefined) {
              taken.push({ source: s.source, runId: r.runId, filedUnder: t.runId, failed: t.failed, interrupted: t.interrupted })
            } else {
              taken[i] = { ...prev, failed: Math.max(prev.failed, t.failed), interrupted: Math.max(prev.interrupted, t.interrupted) }
            }
          }
        }
      }
    }
    const byState = { ...merged.byState }
    let pipelines = merged.pipelines
    for (const t of taken) {
      byState.failed += t.failed
      byState.interrupted += t.interrupted
      pipelines += t.failed + t.interrupted
    }


    const resources: Array<ReportResource> = []
    const metrics: Array<ReportMetric> = []
    const repair = new Map<string, { phases: Set<string>; source: string }>()
    for (const s of selected) {
      for (const r of yield* s.store.resources) {
        const u = usage.get(`${s.source}\u0000${r.pool}/${r.resourceId}`) ?? zeroUsage()
        resources.push(priced({ source: s.source, pool: r.pool, resourceId: r.resourceId, kind: r.kind, health: r.health, ...u }))
      }
      const runIds = s.runs.map((r) => r.runId)
      for (const runId of runIds) {
        for (const m of yield* s.store.metrics({ runId })) {
          metrics.push({
            runId: m.runId,
            pipelineId: m.pipelineId,
            name: m.name,
            label: m.label,
            display: m.display,
            value: m.value,
            text: formatMetric(m.value, m.display)
          })
        }
      }
      // repair failures of pipelines in scope, or emitted by a selected run
      const events = yield* s.store.events({ kind: "pipeline.terminal_repair_failed" })
      const asked = events.flatMap((e) =>
        e.pipelineId === null || all || (e.runId !== null && selectedRunIds.has(e.runId)) ? [] : [e.pipelineId]
      )
      const counted = asked.length === 0 ? new Set<string>() : yield* inScope(asked)
      for (const e of events) {
        if (e.pipelineId === null) continue
        const kept = all || counted.has(e.pipelineId) || (e.runId !== null && selectedRunIds.has(e.runId))
        if (!kept) continue
        const entry = repair.get(e.pipelineId) ?? { phases: new Set<string>(), source: s.source }
        const phase = (e.data as { phase?: unknown } | null)?.phase
        entry.phases.add(typeof phase === "string" ? phase : "unknown")
        repair.set(e.pipelineId, entry)
      }
    }

    // pipelines a dead run had in flight, claimed by a later run (`pipeline.abandoned`): the
    // events of a selected claiming run, or about a selected dead run
    const inFlightAtStop: Array<ReportInFlight> = []
    for (const s of selected) {
      const ids = new Set<string>(s.runs.map((r) => r.runId))
      const byRun = new Map<string, { pipelines: Set<string>; claimedBy: Set<string> }>()
      yield* Stream.runForEach(s.store.streamEvents({ kind: "pipeline.abandoned" }), (e) =>
        Effect.sync(() => {
          const from = (e.data as { readonly run?: unknown } | null)?.run
          if (typeof from !== "string" || e.pipelineId === null) return
          if (!all && !ids.has(from) && (e.runId === null || !ids.has(e.runId))) return
          const entry = byRun.get(from) ?? { pipelines: new Set<string>(), claimedBy: new Set<string>() }
          entry.pipelines.add(e.pipelineId)
          if (e.runId !== null) entry.claimedBy.add(e.runId)
          byRun.set(from, entry)
        }))
      // A store written before these events: a run that claimed a dead run's pipelines (its
      // `run.stale_interrupted` event) recorded an `Abandoned` attempt row for each instead.
      // Those rows are read (only those runs' attempts, only when they have no event) and
      // reported the same way; in scope, they are not counted as attempts.
      const claimers = new Map<string, Array<string>>()
      yield* Stream.runForEach(s.store.streamEvents({ kind: "run.stale_interrupted" }), (e) =>
        Effect.sync(() => {
          const data = e.data as { readonly staleRunId?: unknown; readonly inFlight?: unknown } | null
          const stale = data?.staleRunId
          // a run of 0.12 or later records events, never such rows: nothing to read
          if (e.runId === null || typeof stale !== "string" || data?.inFlight === "events") return
          if (!all && !ids.has(e.runId) && !ids.has(stale)) return
          claimers.set(e.runId, [...(claimers.get(e.runId) ?? []), stale])
        }))
      const legacyRows = new Map<string, number>()
      for (const [claimer, stale] of claimers) {
        if (Array.from(byRun.values()).some((entry) => entry.claimedBy.has(claimer))) continue
        const from = stale[0]!
        const entry = byRun.get(from) ?? { pipelines: new Set<string>(), claimedBy: new Set<string>() }
        let rows = 0
        yield* Stream.runForEach(s.store.streamAttempts({ runId: claimer as RunId }), (a) =>
          Effect.sync(() => {
            if (a.errorType !== "Abandoned" || !(a.errorMessage ?? "").startsWith(LEGACY_ABANDONED)) return
            rows++
            entry.pipelines.add(a.pipelineId)
          }))
        if (rows === 0) continue
        entry.claimedBy.add(claimer)
        byRun.set(from, entry)
        legacyRows.set(from, (legacyRows.get(from) ?? 0) + rows)
        // counted in this report's attempts when the claiming run is in its scope
        if (all || ids.has(claimer)) attempts -= rows
      }
      if (byRun.size === 0) continue
      const records = runsOf.get(s.store) ?? []
      for (const [runId, entry] of byRun) {
        const config = records.find((r) => r.runId === runId)?.config as { readonly concurrency?: unknown } | null | undefined
        const concurrency = typeof config?.concurrency === "number" ? config.concurrency : null
        const pipelines = entry.pipelines.size
        const leased = yield* leasedCapacity(s.store, runId as RunId)
        inFlightAtStop.push({
          source: s.source,
          runId,
          pipelines,
          concurrency,
          leasedPools: leased.pools,
          poolCapacity: leased.capacity,
          mayHaveCalled: Math.min(pipelines, concurrency ?? Infinity, leased.capacity ?? Infinity),
          claimedBy: Array.from(entry.claimedBy).sort(),
          legacyRows: legacyRows.get(runId) ?? 0
        })
      }
    }

    const pools = new Map<string, Accounting>()
    const poolCounts = new Map<string, { resources: number; attempts: number }>()
    for (const r of resources) {
      pools.set(r.pool, addAccounting(pools.get(r.pool) ?? zeroAccounting, accountingOf(r)))
      const c = poolCounts.get(r.pool) ?? { resources: 0, attempts: 0 }
      poolCounts.set(r.pool, { resources: c.resources + 1, attempts: c.attempts + r.attempts })
    }
    const resourcesSum = Array.from(pools.values()).reduce(addAccounting, zeroAccounting)
    // the top pipelines: one aggregate per scope with model calls or cache hits (none read on a
    // store without them), merged across scopes and stores, cut once
    const topLimit = (yield* Export.checkLimit(options.topPipelines)) ?? TOP_PIPELINES
    const by = options.pipelinesBy ?? "cost"
    const top: Array<PipelineAccounting & { readonly source: string }> = []
    if (topLimit > 0) {
      for (const a of accounted) {
        for (const p of yield* topPipelinesOf(a.store, a.runId, by, topLimit)) top.push({ ...p, source: a.source })
      }
    }
    const ordered = orderPipelineAccounting(top, { orderBy: by, limit: topLimit }) as ReadonlyArray<
      PipelineAccounting & { readonly source: string }
    >
    // the whole experiment beside a selection that leaves runs out: one more aggregate per
    // such store (none for a store of one run, the usual big one), the selected stores' totals
    // reused for the others
    let experiment: ReportAccounting["experiment"] = undefined
    if (partial.length > 0) {
      let whole = zeroFigures()
      for (const s of selected) {
        const p = partial.find((x) => x.store === s.store)
        whole = sumFigures(whole, p === undefined ? storeTotals.get(s.store) ?? zeroFigures() : yield* figuresOf(s.store, undefined))
      }
      experiment = { ...priced(whole), runs: runsInStores }
    }
    const accounting: ReportAccounting = {
      total: priced(total),
      ...(experiment === undefined ? {} : { experiment }),
      runs: runAccounting.map(priced),
      pools: Array.from(pools, ([pool, a]) => priced({ pool, ...poolCounts.get(pool)!, ...a })).sort((a, b) => (a.pool < b.pool ? -1 : a.pool > b.pool ? 1 : 0)),
      resourcesSum: priced(resourcesSum),
      multiLeased: resourcesSum.tokensIn + resourcesSum.tokensOut > total.tokensIn + total.tokensOut ||
        (resourcesSum.costUsd ?? 0) > total.costUsd + 1e-9 || resourcesSum.estimated > total.estimated ||
        resourcesSum.unpriced > total.unpriced,
      pipelines: { by, limit: topLimit, rows: ordered.map(priced) }
    }

    return {
      stores: stores.map((s) => s.source),
      selection: all ? "all" : options.runId ?? "latest",
      runs,
      pipelines,
      byState,
      taken,
      duplicates,
      tasks,
      attempts,
      retries,
      handoffsTotal,
      handoffsBudgeted,
      latencyMs,
      resources,
      metrics,
      errors,
      walPending,
      cache: CallCache.summaryOf(cache, accounting.total),
      accounting,
      leasesLost,
      repairFailures: {
        count: repair.size,
        pipelines: Array.from(repair, ([pipelineId, v]) => ({ pipelineId, phases: Array.from(v.phases).sort(), source: v.source }))
      },
      inFlightAtStop
    }
  })

/**
 * Opens every store read-only through the `Store.StoreOpener` in context (paths, `file:` URIs,
 * plugin URIs, as the CLI takes them) and builds their report (see {@link buildReport}).
 * Fails with `StoreUnavailable` when a store is missing or not an assay store, `ConfigError`
 * on a spec that does not resolve (or as {@link buildReport}), `PluginError` when a plugin's
 * factory fails.
 *
 * @since 0.1.0
 * @category reports
 */
export const reportPaths = (
  paths: ReadonlyArray<string>,
  options: ReportOptions = {}
): Effect.Effect<ReportData, StoreUnavailable | ConfigError | PluginError | Export.ExportError, StoreOpener> =>
  Effect.scoped(
    Effect.flatMap(
      Effect.forEach(paths, (p) => Effect.map(Export.openReadOnly(p), ({ store }) => ({ source: p, store }))),
      (stores) => buildReport(stores, options)
    )
  )

const time = (ms: number | null) => (ms === null ? "-" : new Date(ms).toISOString())

/** Calls sent, cache hits and cost in a few words: `253 calls, $1.31`. */
const briefText = (f: PricedFigures): string =>
  `${f.calls} call${f.calls === 1 ? "" : "s"}${f.cacheHits > 0 ? `, ${f.cacheHits} cache hit(s)` : ""}, ${formatCost(f.costUsd, f.unpriced)}`

/**
 * The accounting's scope in one line, with how to see the other: `Scope: this run (the latest):
 * 253 calls, $1.31 · whole experiment (3 runs): 300 calls, $1.56 — \`--run-id all\`` when the
 * selection leaves runs out; `Scope: whole experiment (3 runs) — one run: \`--run-id ID\`` for
 * `all` over several runs; "" for a store of one run (nothing else to see).
 *
 * @since 0.9.0
 * @category formatting
 */
export const scopeText = (r: ReportData): string => {
  const acc = r.accounting
  if (acc.experiment !== undefined) {
    const who = r.selection === "latest" ? "this run (the latest)" : `run ${r.selection}`
    return `Scope: ${who}: ${briefText(acc.total)} · whole experiment (${acc.experiment.runs} runs): ${
      briefText(acc.experiment)
    } — \`assay report ${r.stores.join(" ")} --run-id all\``
  }
  if (r.selection === "all" && r.runs.length > 1) {
    return `Scope: whole experiment (${r.runs.length} runs) — one run: \`--run-id ID\` (the latest: without --run-id)`
  }
  return ""
}

/**
 * One dead run's pipelines in flight in one line: `Run X stopped with 128 pipelines in flight
 * (claimed by run Y, which ran them again; no attempt is recorded for them): up to 32 of them
 * (its concurrency) may have had a model call in progress, made and paid for.`
 */
const inFlightText = (f: ReportInFlight, manyStores: boolean): string => {
  const n = `${f.pipelines} pipeline${f.pipelines === 1 ? "" : "s"}`
  const by = f.claimedBy.length === 0 ? "" : ` (claimed by ${f.claimedBy.length === 1 ? "run" : "runs"} ${f.claimedBy.join(", ")}, which ran them again)`
  const byPools = f.poolCapacity !== null && (f.concurrency === null || f.poolCapacity < f.concurrency)
  const pools = `the ${f.leasedPools.length === 1 ? "pool" : "pools"} ${f.leasedPools.join(", ")} its calls leased ${
    f.leasedPools.length === 1 ? "holds" : "hold"
  } ${f.poolCapacity} lease${f.poolCapacity === 1 ? "" : "s"} at once`
  const bound = byPools
    ? `up to ${f.mayHaveCalled} of them (${pools}${
      f.concurrency === null ? "" : `; the run's concurrency is ${f.concurrency}`
    }) may have had a call in progress, made and maybe paid for, its answer lost`
    : f.concurrency === null
    ? `each of them may have had a call in progress (the run's record is gone: its concurrency is unknown)`
    : `up to ${f.mayHaveCalled} of them (the run's concurrency is ${f.concurrency}) may have had a call in progress, made and maybe paid for, its answer lost`
  const recorded = f.legacyRows > 0
    ? `; an earlier assay recorded ${f.legacyRows} Abandoned attempt row(s) for them, not counted in Attempts above (an export lists them)`
    : "; no attempt is recorded for them"
  return `In flight when run ${f.runId}${manyStores ? ` in ${f.source}` : ""} stopped: ${n}${by}; ${bound}${recorded}`
}

/** One line of {@link ReportData.taken}: `  10 failed (admitted again by run B: filed under it now)`. */
const takenText = (t: ReportTaken, manyRuns: boolean, manyStores: boolean): string => {
  const what = [t.failed > 0 ? `${t.failed} failed` : "", t.interrupted > 0 ? `${t.interrupted} interrupted` : ""]
    .filter((x) => x !== "").join(", ")
  return `  ${what}${manyRuns ? ` under run ${t.runId}` : ""}${manyStores ? ` in ${t.source}` : ""} (admitted again by run ${t.filedUnder}: filed under it now)`
}

/**
 * The report as text (what `assay report` prints without `--json`).
 *
 * @since 0.1.0
 * @category formatting
 */
export const renderText = (r: ReportData): string => {
  const out: Array<string> = []
  out.push(`Report of ${r.stores.join(", ")} (runs: ${r.selection})`)
  if (r.runs.length === 0) out.push("  no runs")
  for (const run of r.runs) {
    const status = run.stale ? `interrupted (stale: stored as running, no heartbeat since ${time(run.heartbeatAt)})` : run.shownStatus
    out.push(
      `  run ${run.runId}${run.label === null ? "" : ` [${run.label}]`}${r.stores.length > 1 ? ` in ${run.source}` : ""}: ${status}, started ${
        time(run.startedAt)
      }, ended ${time(run.endedAt)}${run.stopReason === null || run.stale ? "" : ` (${run.stopReason})`}`
    )
  }
  const states = (Object.keys(r.byState) as Array<PipelineState>).map((k) => `${k} ${r.byState[k]}`).join(", ")
  out.push(`Pipelines: ${r.pipelines} (${states})${r.duplicates > 0 ? `, ${r.duplicates} duplicate row(s) merged` : ""}`)
  for (const t of r.taken ?? []) out.push(takenText(t, r.runs.length > 1, r.stores.length > 1))
  // control transitions only when some were committed: a plain run's text is unchanged
  out.push(`Tasks: ${r.tasks}  Attempts: ${r.attempts}  Retries: ${r.retries}${
    // (ends included, split: maxHandoffs is spent by all but `end`, tester13h finding 6)
    r.handoffsTotal > 0 ? `  Transitions: ${transitionsText(r.handoffsTotal, r.handoffsBudgeted ?? undefined)}` : ""}`)
  for (const f of r.inFlightAtStop ?? []) out.push(inFlightText(f, r.stores.length > 1))
  out.push(
    r.latencyMs === null
      ? "Time in run: n/a"
      // admission to end (endedAt - startedAt): includes waiting for a worker slot, so it is
      // not called the pipelines' latency (a study's latencyP95Ms is their execution time)
      : `Time in run ms (admission to end, incl. queueing): p50 ${r.latencyMs.p50.toFixed(1)}  p95 ${r.latencyMs.p95.toFixed(1)}  p99 ${r.latencyMs.p99.toFixed(1)}`
  )
  if (r.resources.length > 0) {
    out.push("Resources:")
    for (const res of r.resources) {
      const h = res.health !== null && typeof res.health === "object" ? res.health as Record<string, unknown> : undefined
      const state = h !== undefined && "state" in h ? String(h["state"]) : JSON.stringify(res.health)
      // a throttle or an open breaker as of the last write of the health (the report's own
      // time is not the run's: say when it was meant to end, not whether it still holds)
      const until = (k: string) => (typeof h?.[k] === "number" ? new Date(h[k] as number).toISOString() : undefined)
      const throttled = until("throttledUntil")
      const breaker = until("breakerUntil")
      const health = throttled !== undefined
        ? `${state}, throttled until ${throttled}`
        : breaker !== undefined
        ? `${state}, breaker open until ${breaker}`
        : state
      const learned = algorithmText(h?.["algorithm"])
      const restored = restoredText(h?.["restored"])
      const a = accountingOf(res)
      out.push(
        `  ${res.pool}/${res.resourceId} (${res.kind}): ${health}; attempts ${res.attempts}, retries ${res.retries}, rate-limited ${res.rateLimited}${
          a.tokensIn + a.tokensOut > 0 || (a.costUsd ?? 0) > 0 ? `; ${accountingText(a)}` : ""
        }${learned === "" ? "" : `; ${learned}`}${restored === "" ? "" : `; ${restored}`}`
      )
    }
  }
  // global leases a runner lost (its attempt retried): said only when some were lost
  if (r.leasesLost.length > 0) {
    const n = r.leasesLost.reduce((a, l) => a + l.lost, 0)
    out.push(`Global leases lost: ${n} (each lost lease's attempt was retried; see docs/scale-out.md)`)
    for (const l of r.leasesLost) {
      out.push(`  ${l.pool}/${l.resourceId}${r.stores.length > 1 ? ` in ${l.source}` : ""}: ${leasesLostText(l)}, last at ${time(l.lastAt)}`)
    }
  }
  // token and cost totals, only when some attempt carried token usage or a cost
  const acc = r.accounting
  const spent = (f: PricedFigures) => f.tokensIn + f.tokensOut > 0 || (f.costUsd ?? 0) > 0 || f.calls > 0 || f.cacheHits > 0
  if (acc !== undefined && (spent(acc.total) || (acc.experiment !== undefined && spent(acc.experiment)))) {
    const scope = scopeText(r)
    if (scope !== "") out.push(scope)
    // cache hits cost nothing: say what they saved (a run of hits only would otherwise read as
    // "tokens 0, cost $0" with nothing behind it)
    const saved = r.cache !== undefined && acc.total.cacheHits > 0 && r.cache.tokensSaved.totalTokens > 0
      ? `; saved by the call cache: ${r.cache.tokensSaved.totalTokens} tokens${
        r.cache.costSavedUsd === null ? "" : `, ${formatUsd(r.cache.costSavedUsd)}`
      }`
      : ""
    out.push(`Tokens and cost (each attempt once): ${figuresText(acc.total)}${saved}`)
    if (acc.multiLeased) {
      out.push(
        `  (attempts that leased several resources count on each of them: the resources above add up to ${accountingText(acc.resourcesSum)})`
      )
    }
    // a subtotal per pool when there is more than one pool or a pool has several resources
    if (acc.pools.length > 1 || acc.pools.some((p) => p.resources > 1)) {
      for (const p of acc.pools) out.push(`  pool ${p.pool} (${p.resources} resource(s), attempts ${p.attempts}): ${accountingText(p)}`)
    }
    if (acc.runs.length > 1) {
      for (const run of acc.runs) out.push(`  run ${run.runId}${r.stores.length > 1 ? ` in ${run.source}` : ""}: ${figuresText(run)}`)
    }
  }
  if (acc !== undefined && acc.pipelines.rows.length > 0) {
    // a pipeline that cost nothing (or used no token) is no one's top: a run served from the
    // call cache would list ten $0 pipelines
    const by = acc.pipelines.by
    const ranked = acc.pipelines.rows.filter((p) =>
      by === "cost" ? p.unpriced > 0 || (p.costUsd ?? 0) > 0 : p.tokensIn + p.tokensOut > 0
    )
    const left = acc.pipelines.rows.length - ranked.length
    // a pipeline whose calls were all refused (429) or failed at the endpoint cost nothing and
    // is no one's top either; said apart, so that a 429 storm does not read as work done at $0
    const unanswered = acc.pipelines.rows.filter((p) => !ranked.includes(p) && p.calls > 0 && p.calls - p.refused - p.failedCalls <= 0)
    const unansweredText = unanswered.length === 0
      ? ""
      : `, ${unanswered.length === left ? (left === 1 ? "it" : "all") : unanswered.length} with no call answered (${
        unanswered.every((p) => p.failedCalls === 0) ? "429 only" : "refused with 429 or failed at the endpoint"
      })`
    if (ranked.length > 0) {
      out.push(`Top ${ranked.length} pipeline(s) by ${by}${left > 0 ? ` (${left} at ${by === "cost" ? "$0" : "0 tokens"} left out${unansweredText})` : ""}:`)
      for (const p of ranked) {
        out.push(`  ${p.pipelineId}${r.stores.length > 1 ? ` in ${p.source}` : ""}: ${figuresText(p)}`)
      }
    } else if (acc.pipelines.rows.every((p) => p.calls === 0)) {
      // no call at all: every answer came from the call cache (no empty ranking). The scope's
      // hits, as the lines around it count them (tester18d F1: the ranked rows' sum said 10 of 28)
      const hits = r.cache.hits
      const saved = r.cache?.costSavedUsd ?? null
      out.push(
        `No model call was made: the call cache served every cached task (${hits} hit${hits === 1 ? "" : "s"}${
          saved === null ? "" : `; ${formatUsd(saved)} saved`
        })`
      )
    } else if (acc.total.calls > 0 && acc.total.calls - acc.total.refused - acc.total.failedCalls <= 0) {
      // calls were sent and none was answered: nothing was priced at $0, nothing was answered
      out.push(`No pipeline's calls ${by === "cost" ? "cost anything" : "used a token"}: no call was answered (calls ${callsText(acc.total)})`)
    } else {
      out.push(`No pipeline's calls ${
        by !== "cost"
          ? "used a token"
          : unanswered.length === 0
          ? "cost anything (every call was priced at $0)"
          : `cost anything (every call answered was priced at $0; ${unanswered.length} pipeline(s) with no call answered)`
      }`)
    }
  }
  if (r.cache !== undefined && CallCache.isActive(r.cache)) {
    const c = r.cache
    const t = c.tokensSaved
    out.push(
      `Call cache: hits ${c.hits}, misses ${c.misses}${c.refreshed > 0 ? `, refreshed ${c.refreshed}` : ""}${
        c.bypassed > 0 ? `, read-only misses ${c.bypassed}` : ""
      }${
        c.lookupFailures > 0
          ? `; ${c.lookupFailures} cache lookup${c.lookupFailures === 1 ? "" : "s"} failed (the cache could not be read: those calls were made; see the run's log for the file and what to do)`
          : ""
      }${c.writeFailures > 0 ? `; ${c.writeFailures} cache write${c.writeFailures === 1 ? "" : "s"} failed (those calls are made again next run)` : ""}; saved ${t.totalTokens} tokens (prompt ${t.promptTokens}, completion ${t.completionTokens})${
        c.costSavedUsd === null ? "" : `, ${formatUsd(c.costSavedUsd)}`
      }`
    )
  }
  if (r.metrics.length > 0) {
    out.push("Metrics:")
    // several runs in the report: say which run each metric belongs to
    const manyRuns = new Set(r.metrics.map((m) => m.runId)).size > 1
    for (const m of r.metrics) {
      out.push(
        `  ${m.label ?? m.name}${m.pipelineId === null ? "" : ` [${m.pipelineId}]`}${manyRuns ? ` (run ${m.runId})` : ""}: ${m.text}`
      )
    }
  }
  if (r.errors.length > 0) {
    out.push(`Recent errors (${r.errors.length}):`)
    for (const e of r.errors) {
      out.push(
        `  ${e.pipelineId}${e.key === null || e.key === e.pipelineId ? "" : ` (${e.key})`} at ${e.failedTask ?? "?"}: ${e.errorType ?? "Error"} [${e.errorClass ?? "unknown"}] ${
          e.errorMessage ?? ""
        }`
      )
    }
  }
  if (r.repairFailures.count > 0) {
    out.push(`Terminal repair failures: ${r.repairFailures.count} pipeline(s)`)
    for (const p of r.repairFailures.pipelines) out.push(`  ${p.pipelineId}: failed at ${p.phases.join(", ")}`)
  }
  for (const w of r.walPending) {
    out.push(
      `Warning: the WAL of ${w.source} holds ${w.frames} page(s) not yet in the database file: copy ${w.source}-wal with it (or open it for writing once, which moves them in)`
    )
  }
  return out.join("\n")
}
