/**
 * Machinery shared by the store implementations: limit validation, percentiles, secret
 * masking, artifact placement, the group-commit writer and the write-behind buffer.
 *
 * @since 0.1.0
 */
import { Context, DefaultServices, Effect, Exit, Fiber, Option, type Scope, Stream, Tracer } from "effect"
import { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import { ArtifactRecord, type PipelineState, trusted } from "../../../domain/Records.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"
import * as ResourceHelpers from "../../../domain/internal/resource.js"
import type { ArtifactBackendService } from "../../ArtifactBackend.js"
import { retryTracker } from "../../../domain/internal/retries.js"
import { roundUsd } from "../../../domain/Pricing.js"
import type {
  AccountingFigures,
  CacheFigures,
  Latency,
  NewArtifact,
  NewAttempt,
  NewEvent,
  PipelineAccounting,
  PipelineAccountingOptions,
  ResourceUsage,
  SucceededIndex,
  TakenPipelines,
  TaskStore
} from "../../Store.js"
import type { IdSet } from "./idSet.js"

/** Keyset paging batch size of every stream (rows per query). */
export const PAGE_SIZE = 1000

/**
 * Validates a read limit: `undefined` (all) or a non-negative integer; anything else fails
 * with `ConfigError`.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkLimit = (limit: number | undefined): Effect.Effect<number | undefined, ConfigError> =>
  limit === undefined || (Number.isInteger(limit) && limit >= 0)
    ? Effect.succeed(limit)
    : Effect.fail(
      new ConfigError({
        message: `limit must be a non-negative integer or absent (all rows), got ${String(limit)}`,
        issues: [{ path: "limit", message: `invalid limit ${String(limit)}` }]
      })
    )

/**
 * The lease target of a lease id: `pool/resourceId#n` without its `#n` (everything before the
 * last `#`; the whole id when it has none).
 *
 * @since 0.6.0
 * @category statistics
 */
export const leaseTarget = (leaseId: string): string => {
  const hash = leaseId.lastIndexOf("#")
  return hash < 0 ? leaseId : leaseId.slice(0, hash)
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] }

/**
 * Zero figures of a `ResourceUsage` (without its target).
 *
 * @since 0.8.0
 * @category statistics
 */
export const zeroUsage = (): Mutable<Omit<ResourceUsage, "target">> => ({
  attempts: 0,
  retries: 0,
  rateLimited: 0,
  tokensIn: 0,
  tokensOut: 0,
  costUsd: 0,
  estimated: 0,
  unpriced: 0
})

/**
 * The sum of two usages' figures (the target is `a`'s).
 *
 * @since 0.8.0
 * @category statistics
 */
export const sumUsage = <A extends Omit<ResourceUsage, "target">>(a: A, b: Omit<ResourceUsage, "target">): A => ({
  ...a,
  attempts: a.attempts + b.attempts,
  retries: a.retries + b.retries,
  rateLimited: a.rateLimited + b.rateLimited,
  tokensIn: a.tokensIn + b.tokensIn,
  tokensOut: a.tokensOut + b.tokensOut,
  costUsd: a.costUsd + b.costUsd,
  estimated: a.estimated + b.estimated,
  unpriced: a.unpriced + b.unpriced
})

/**
 * An accumulator of `ResourceUsage` (see `TaskStore.resourceUsage`): `add` takes the attempts
 * of one scope in attempt-id order, `result` gives the usage per target ascending by target.
 * What stores without SQL compute `resourceUsage` with.
 *
 * @since 0.6.0
 * @category statistics
 */
export const usageAccumulator = () => {
  const isRetry = retryTracker()
  const usage = new Map<string, Mutable<Omit<ResourceUsage, "target">>>()
  return {
    add: (a: {
      readonly pipelineId: string
      readonly seq: number
      readonly visit?: number | undefined
      readonly decision: unknown
      readonly errorClass: string | null
      readonly leaseIds: ReadonlyArray<string>
      readonly tokensIn?: number | null | undefined
      readonly tokensOut?: number | null | undefined
      readonly tokensEstimated?: boolean | undefined
      readonly costUsd?: number | null | undefined
    }): void => {
      const retry = isRetry(a)
      for (const target of new Set(a.leaseIds.map(leaseTarget))) {
        let u = usage.get(target)
        if (u === undefined) {
          u = zeroUsage()
          usage.set(target, u)
        }
        u.attempts++
        if (retry) u.retries++
        if (a.errorClass === "rate_limit") u.rateLimited++
        u.tokensIn += a.tokensIn ?? 0
        u.tokensOut += a.tokensOut ?? 0
        if (a.costUsd !== undefined && a.costUsd !== null) u.costUsd += a.costUsd
        // a call of 0 tokens costs 0 at any price: known, not unpriced
        else if ((a.tokensIn ?? 0) + (a.tokensOut ?? 0) > 0) u.unpriced++
        if (a.tokensEstimated === true) u.estimated++
      }
    },
    result: (): ReadonlyArray<ResourceUsage> =>
      Array.from(usage, ([target, u]) => ({ target, ...u })).sort((a, b) => a.target < b.target ? -1 : a.target > b.target ? 1 : 0)
  }
}

/**
 * Zero {@link AccountingFigures} (a fresh mutable object).
 *
 * @since 0.8.0
 * @category statistics
 */
export const zeroFigures = (): Mutable<AccountingFigures> => ({
  calls: 0,
  refused: 0,
  failedCalls: 0,
  cacheHits: 0,
  modelCallHits: 0,
  tokensIn: 0,
  tokensOut: 0,
  costUsd: 0,
  estimated: 0,
  unpriced: 0
})

/**
 * The sum of two {@link AccountingFigures} (the other fields are `a`'s).
 *
 * @since 0.8.0
 * @category statistics
 */
export const sumFigures = <A extends AccountingFigures>(a: A, b: AccountingFigures): A => ({
  ...a,
  calls: a.calls + b.calls,
  refused: a.refused + b.refused,
  failedCalls: a.failedCalls + b.failedCalls,
  cacheHits: a.cacheHits + b.cacheHits,
  modelCallHits: a.modelCallHits + b.modelCallHits,
  tokensIn: a.tokensIn + b.tokensIn,
  tokensOut: a.tokensOut + b.tokensOut,
  costUsd: a.costUsd + b.costUsd,
  estimated: a.estimated + b.estimated,
  unpriced: a.unpriced + b.unpriced
})

/** The accounting columns of an attempt, as the fold reads them. */
interface AccountedAttempt {
  readonly pipelineId: string
  readonly outcome: string
  readonly errorClass?: string | null | undefined
  readonly leaseIds?: ReadonlyArray<string> | undefined
  readonly tokensIn?: number | null | undefined
  readonly tokensOut?: number | null | undefined
  readonly tokensEstimated?: boolean | undefined
  readonly costUsd?: number | null | undefined
  /** The attempt's decision (a cache hit's note, `decision.cache`, names its task's pool). */
  readonly decision?: unknown
}

/** Whether a cache hit's note names the pool its task leases from (a model call saved, see `AccountingFigures`). */
const savedModelCall = (decision: unknown): boolean => {
  if (typeof decision !== "object" || decision === null) return false
  const cache = (decision as { readonly cache?: unknown }).cache
  return typeof cache === "object" && cache !== null && typeof (cache as { readonly pool?: unknown }).pool === "string"
}

/**
 * Whether an attempt sent model calls (see `AccountingFigures`): it is no cache hit, it held a
 * pool lease, and it either carries tokens or failed with a class a provider's answer gets:
 * `rate_limit` (a 429), `upstream` or `timeout` (the endpoint failed or never finished), `fatal`
 * (any other 4xx, such as a 400 for a prompt past the context window). So a call answered with
 * a 400 is a call, as a study trial's meter counts it (`StudyControl.neverReachedProvider`;
 * fix16aa), while a `connection` failure (the request never reached the provider) is none, and
 * a lease without tokens that succeeded or failed otherwise (a worker pool's subprocess, a
 * task's own validation) is no model call: a run without a model shows no call figures. The
 * same rule as {@link ACCOUNTING_COLUMNS}'s SQL.
 */
const sentCalls = (a: AccountedAttempt): boolean => {
  if (a.outcome === "cache_hit" || (a.leaseIds?.length ?? 0) === 0) return false
  if ((a.tokensIn ?? null) !== null || (a.tokensOut ?? null) !== null) return true
  return a.errorClass !== null && a.errorClass !== undefined && PROVIDER_ANSWERED.has(a.errorClass)
}

/** The error classes of a call without tokens that reached the provider (see `sentCalls`). */
const PROVIDER_ANSWERED: ReadonlySet<string> = new Set(["rate_limit", "upstream", "timeout", "fatal"])

/**
 * A call the provider did not answer (see `AccountingFigures`): an attempt on a pool resource
 * without tokens that failed with a 429 (`refused`) or at the endpoint (`failed`); the same
 * rule as {@link ACCOUNTING_COLUMNS}'s SQL.
 */
const unansweredCall = (a: AccountedAttempt): "refused" | "failed" | undefined => {
  if (a.outcome === "cache_hit" || (a.leaseIds?.length ?? 0) === 0) return undefined
  if ((a.tokensIn ?? null) !== null || (a.tokensOut ?? null) !== null) return undefined
  return a.errorClass === "rate_limit" ? "refused" : a.errorClass === "upstream" || a.errorClass === "timeout" ? "failed" : undefined
}

/** Whether an attempt counts in the accounting at all (a model call sent, or a cache hit). */
const accounted = (a: AccountedAttempt): boolean => a.outcome === "cache_hit" || sentCalls(a)

const addAttempt = (f: Mutable<AccountingFigures>, a: AccountedAttempt): void => {
  if (a.outcome === "cache_hit") {
    f.cacheHits++
    if (savedModelCall(a.decision)) f.modelCallHits++
  }
  const unanswered = unansweredCall(a)
  // each lease of an attempt that sent a model call is a call (a judge's format repair is a second one)
  if (sentCalls(a)) f.calls += Math.max(1, a.leaseIds?.length ?? 0)
  if (unanswered === "refused") f.refused++
  else if (unanswered === "failed") f.failedCalls++
  f.tokensIn += a.tokensIn ?? 0
  f.tokensOut += a.tokensOut ?? 0
  if (a.costUsd !== undefined && a.costUsd !== null) f.costUsd += a.costUsd
  // a call of 0 tokens costs 0 at any price: known, not unpriced
  else if ((a.tokensIn ?? 0) + (a.tokensOut ?? 0) > 0) f.unpriced++
  if (a.tokensEstimated === true) f.estimated++
}

/**
 * Orders and cuts per-pipeline figures as `pipelineAccounting` returns them (see
 * `PipelineAccountingOptions`: by cost, by tokens, or by pipeline id; ties by pipeline id).
 *
 * @since 0.8.0
 * @category statistics
 */
export const orderPipelineAccounting = (
  rows: ReadonlyArray<PipelineAccounting>,
  options: PipelineAccountingOptions = {}
): ReadonlyArray<PipelineAccounting> => {
  const byId = (a: PipelineAccounting, b: PipelineAccounting) => (a.pipelineId < b.pipelineId ? -1 : a.pipelineId > b.pipelineId ? 1 : 0)
  const tokens = (a: PipelineAccounting) => a.tokensIn + a.tokensOut
  const sorted = [...rows].sort(
    options.orderBy === "cost"
      ? (a, b) => b.costUsd - a.costUsd || tokens(b) - tokens(a) || byId(a, b)
      : options.orderBy === "tokens"
      ? (a, b) => tokens(b) - tokens(a) || b.costUsd - a.costUsd || byId(a, b)
      : byId
  )
  return options.limit === undefined ? sorted : sorted.slice(0, options.limit)
}

/**
 * A fold of attempts into token and cost figures (what stores without SQL, and readers of a
 * store without the aggregates, compute them with): `add` takes attempts (any order),
 * `total` gives the figures of all of them (each attempt once), `pipelines` the figures per
 * pipeline of those with a model call or a cache hit, ordered and cut by `options`.
 *
 * @since 0.8.0
 * @category statistics
 */
export const accountingFold = () => {
  const total = zeroFigures()
  const per = new Map<string, Mutable<AccountingFigures>>()
  return {
    add: (a: AccountedAttempt): void => {
      addAttempt(total, a)
      if (!accounted(a)) return
      let f = per.get(a.pipelineId)
      if (f === undefined) {
        f = zeroFigures()
        per.set(a.pipelineId, f)
      }
      addAttempt(f, a)
    },
    total: (): AccountingFigures => ({ ...total }),
    pipelines: (options: PipelineAccountingOptions = {}): ReadonlyArray<PipelineAccounting> => {
      const ids = options.pipelineIds === undefined ? undefined : new Set<string>(options.pipelineIds)
      const rows: Array<PipelineAccounting> = []
      for (const [pipelineId, f] of per) {
        if (ids === undefined || ids.has(pipelineId)) rows.push({ pipelineId: pipelineId as PipelineAccounting["pipelineId"], ...f })
      }
      return orderPipelineAccounting(rows, options)
    }
  }
}

/**
 * Whether a cache hit's note (`decision.cache.pool`) names the pool its task leases from, in
 * SQLite (a model call saved, see `AccountingFigures.modelCallHits`).
 *
 * @since 0.14.0
 * @category statistics
 */
export const SQLITE_POOLED_HIT = `json_type(decision, '$.cache.pool') = 'text'`

/** `PROVIDER_ANSWERED` as an SQL list. */
export const PROVIDER_ANSWERED_SQL = "'rate_limit', 'upstream', 'timeout', 'fatal'"

/** An attempt on a pool resource without tokens, not a cache hit: a call that got no answer when it failed (see `AccountingFigures`). */
const UNANSWERED = `tokens_in IS NULL AND tokens_out IS NULL AND outcome <> 'cache_hit' AND lease_ids <> '[]'`

/**
 * Whether an attempt row sent model calls, in SQL: with tokens, or on a pool resource without
 * tokens and failed with a class a provider's answer gets (refused with a 429, failed at the
 * endpoint, answered with a 400 or another 4xx; see `sentCalls`).
 */
const SENT = `(tokens_in IS NOT NULL OR tokens_out IS NOT NULL OR (${UNANSWERED} AND error_class IN (${PROVIDER_ANSWERED_SQL})))`

/**
 * The select list of the accounting figures, given how the dialect counts an attempt's calls
 * (`leases`: the length of its `lease_ids` JSON array, at least 1) and whether a cache hit's
 * note names its task's pool (`pooled`, over the `decision` column: a model call saved).
 */
const accountingColumns = (leases: string, pooled: string): string =>
  `coalesce(sum(CASE WHEN ${SENT} THEN ${leases} END), 0) AS calls,
  count(*) FILTER (WHERE ${UNANSWERED} AND error_class = 'rate_limit') AS refused,
  count(*) FILTER (WHERE ${UNANSWERED} AND error_class IN ('upstream', 'timeout')) AS failed_calls,
  count(*) FILTER (WHERE outcome = 'cache_hit') AS cache_hits,
  count(*) FILTER (WHERE outcome = 'cache_hit' AND ${pooled}) AS model_call_hits,
  coalesce(sum(tokens_in), 0) AS tokens_in, coalesce(sum(tokens_out), 0) AS tokens_out,
  coalesce(sum(cost_usd), 0) AS cost_usd, count(*) FILTER (WHERE tokens_estimated = 1) AS estimated,
  count(*) FILTER (WHERE cost_usd IS NULL AND coalesce(tokens_in, 0) + coalesce(tokens_out, 0) > 0) AS unpriced`

/**
 * The SQL select list of the accounting figures over SQLite's table `attempts` (schema version
 * 12; column names as the attempts tables have them): `calls` (the calls sent: each lease of an
 * attempt that sent a model call, so a judge's format repair is a second call; see
 * `AccountingFigures`), `refused`, `failed_calls`, `cache_hits`, `model_call_hits`, `tokens_in`, `tokens_out`,
 * `cost_usd`, `estimated`, `unpriced`. {@link PG_ACCOUNTING_COLUMNS} is the same for Postgres.
 *
 * @since 0.8.0
 * @category statistics
 */
export const ACCOUNTING_COLUMNS = accountingColumns("max(1, json_array_length(lease_ids))", SQLITE_POOLED_HIT)

/**
 * {@link ACCOUNTING_COLUMNS} for Postgres (`lease_ids` is JSON text there too).
 *
 * @since 0.13.0
 * @category statistics
 */
export const PG_ACCOUNTING_COLUMNS = accountingColumns(
  "greatest(1, jsonb_array_length(lease_ids::jsonb))",
  `jsonb_typeof(decision::jsonb -> 'cache' -> 'pool') = 'string'`
)

/**
 * {@link ACCOUNTING_COLUMNS} of a SQLite store before schema version 12 (no token columns):
 * the cache hits only.
 *
 * @since 0.8.0
 * @category statistics
 */
export const ACCOUNTING_COLUMNS_V11 =
  `0 AS calls, 0 AS refused, 0 AS failed_calls, count(*) FILTER (WHERE outcome = 'cache_hit') AS cache_hits, count(*) FILTER (WHERE outcome = 'cache_hit' AND ${SQLITE_POOLED_HIT}) AS model_call_hits, 0 AS tokens_in, 0 AS tokens_out, 0 AS cost_usd, 0 AS estimated, 0 AS unpriced`

/**
 * The condition keeping the attempts that count in per-pipeline figures (a model call or a
 * cache hit; the others add nothing).
 *
 * @since 0.8.0
 * @category statistics
 */
export const ACCOUNTED_CONDITION = `(outcome = 'cache_hit' OR ${SENT})`

/** {@link ACCOUNTED_CONDITION} before schema version 12. */
export const ACCOUNTED_CONDITION_V11 = `outcome = 'cache_hit'`

/**
 * The SQL ORDER BY of `pipelineAccounting` (see `PipelineAccountingOptions`), over the
 * aggregates (Postgres cannot use output names inside expressions); `collate` is appended to
 * the pipeline id (Postgres: ` COLLATE "C"`, so ids sort as JavaScript strings do).
 *
 * @since 0.8.0
 * @category statistics
 */
export const accountingOrderSql = (orderBy: PipelineAccountingOptions["orderBy"], collate = ""): string => {
  const cost = "coalesce(sum(cost_usd), 0)"
  const tokens = "(coalesce(sum(tokens_in), 0) + coalesce(sum(tokens_out), 0))"
  return orderBy === "cost"
    ? `${cost} DESC, ${tokens} DESC, pipeline_id${collate}`
    : orderBy === "tokens"
    ? `${tokens} DESC, ${cost} DESC, pipeline_id${collate}`
    : `pipeline_id${collate}`
}

/**
 * {@link AccountingFigures} of a row selected with {@link ACCOUNTING_COLUMNS} (drivers return
 * sums as numbers, bigints or strings).
 *
 * @since 0.8.0
 * @category statistics
 */
export const figuresOfRow = (r: Readonly<Record<string, unknown>> | undefined): AccountingFigures => ({
  calls: Number(r?.calls ?? 0),
  refused: Number(r?.refused ?? 0),
  failedCalls: Number(r?.failed_calls ?? 0),
  cacheHits: Number(r?.cache_hits ?? 0),
  modelCallHits: Number(r?.model_call_hits ?? 0),
  tokensIn: Number(r?.tokens_in ?? 0),
  tokensOut: Number(r?.tokens_out ?? 0),
  costUsd: Number(r?.cost_usd ?? 0),
  estimated: Number(r?.estimated ?? 0),
  unpriced: Number(r?.unpriced ?? 0)
})

/**
 * The SQL of a scope's call cache figures (see `CacheFigures`) over SQLite's `attempts` table
 * (`scope`: the condition keeping the scope's rows): only the rows whose decision mentions a
 * cache note are parsed (`json_extract` once per such row, then on the note alone).
 *
 * @since 0.11.0
 * @category statistics
 */
export const sqliteCacheFigures = (scope: string): string =>
  `SELECT count(*) FILTER (WHERE hit) AS hits,
    count(*) FILTER (WHERE NOT hit AND s = 'miss') AS misses,
    count(*) FILTER (WHERE NOT hit AND s = 'refresh') AS refreshed,
    count(*) FILTER (WHERE NOT hit AND s = 'bypass') AS bypassed,
    count(*) FILTER (WHERE s IN ('miss', 'refresh') AND json_type(c, '$.stored') = 'false') AS write_failures,
    count(*) FILTER (WHERE json_type(c, '$.lookupFailed') = 'true') AS lookup_failures,
    count(*) FILTER (WHERE NOT hit AND s IN ('miss', 'refresh') AND o = 'succeeded' AND json_type(c, '$.stored') IS NOT 'false' AND json_type(c, '$.lostRace') IS NOT 'true') AS stored,
    coalesce(sum(CASE WHEN hit AND json_type(c, '$.usage.promptTokens') IN ('integer', 'real') THEN json_extract(c, '$.usage.promptTokens') END), 0) AS prompt_tokens,
    coalesce(sum(CASE WHEN hit AND json_type(c, '$.usage.completionTokens') IN ('integer', 'real') THEN json_extract(c, '$.usage.completionTokens') END), 0) AS completion_tokens,
    coalesce(sum(CASE WHEN hit AND json_type(c, '$.usage.totalTokens') IN ('integer', 'real') THEN json_extract(c, '$.usage.totalTokens') END), 0) AS total_tokens,
    sum(CASE WHEN hit AND json_type(c, '$.usage.costUsd') IN ('integer', 'real') THEN json_extract(c, '$.usage.costUsd') END) AS cost_saved_usd
  FROM (SELECT c, o, json_extract(c, '$.status') AS s, (o = 'cache_hit' OR json_extract(c, '$.status') = 'hit') AS hit
    FROM (SELECT outcome AS o, json_extract(decision, '$.cache') AS c FROM attempts
      WHERE ${scope} AND instr(decision, '"cache"') > 0)
    WHERE json_type(c) = 'object')`

/**
 * {@link sqliteCacheFigures} for Postgres's `assay_attempts` table (`decision` is JSON text).
 *
 * @since 0.11.0
 * @category statistics
 */
export const pgCacheFigures = (scope: string): string => {
  const num = (path: string) => `CASE WHEN hit AND jsonb_typeof(c #> '{${path}}') = 'number' THEN (c #>> '{${path}}')::double precision END`
  return `SELECT count(*) FILTER (WHERE hit) AS hits,
    count(*) FILTER (WHERE NOT hit AND s = 'miss') AS misses,
    count(*) FILTER (WHERE NOT hit AND s = 'refresh') AS refreshed,
    count(*) FILTER (WHERE NOT hit AND s = 'bypass') AS bypassed,
    count(*) FILTER (WHERE s IN ('miss', 'refresh') AND c -> 'stored' = 'false'::jsonb) AS write_failures,
    count(*) FILTER (WHERE c -> 'lookupFailed' = 'true'::jsonb) AS lookup_failures,
    count(*) FILTER (WHERE NOT hit AND s IN ('miss', 'refresh') AND o = 'succeeded' AND (c -> 'stored') IS DISTINCT FROM 'false'::jsonb AND (c -> 'lostRace') IS DISTINCT FROM 'true'::jsonb) AS stored,
    coalesce(sum(${num("usage,promptTokens")}), 0) AS prompt_tokens,
    coalesce(sum(${num("usage,completionTokens")}), 0) AS completion_tokens,
    coalesce(sum(${num("usage,totalTokens")}), 0) AS total_tokens,
    sum(${num("usage,costUsd")}) AS cost_saved_usd
  FROM (SELECT c, o, c ->> 'status' AS s, (o = 'cache_hit' OR c ->> 'status' = 'hit') AS hit
    FROM (SELECT outcome AS o, decision::jsonb -> 'cache' AS c FROM assay_attempts
      WHERE ${scope} AND strpos(decision, '"cache"') > 0) n
    WHERE jsonb_typeof(c) = 'object') m`
}

/**
 * {@link CacheFigures} of a row selected with {@link sqliteCacheFigures} or
 * {@link pgCacheFigures} (drivers return counts as numbers or strings).
 *
 * @since 0.11.0
 * @category statistics
 */
export const cacheFiguresOfRow = (r: Readonly<Record<string, unknown>> | undefined): CacheFigures => {
  const cost = r?.cost_saved_usd
  return {
    hits: Number(r?.hits ?? 0),
    misses: Number(r?.misses ?? 0),
    refreshed: Number(r?.refreshed ?? 0),
    bypassed: Number(r?.bypassed ?? 0),
    writeFailures: Number(r?.write_failures ?? 0),
    lookupFailures: Number(r?.lookup_failures ?? 0),
    tokensSaved: {
      promptTokens: Number(r?.prompt_tokens ?? 0),
      completionTokens: Number(r?.completion_tokens ?? 0),
      totalTokens: Number(r?.total_tokens ?? 0)
    },
    costSavedUsd: cost === null || cost === undefined || !Number.isFinite(Number(cost)) ? null : roundUsd(Number(cost)),
    stored: Number(r?.stored ?? 0)
  }
}

/**
 * A `SucceededIndex` of the ids of the succeeded pipelines (`ids`: the ids as an array, or an
 * {@link IdSet} already built) and, for those stored with an explicit key, their rows
 * `[pipelineId, specDigest, seedDigest]` (`keyed`): a keyed row is compared digest by digest;
 * any other id, stored without a key, is content-addressed.
 *
 * @since 0.6.0
 * @category statistics
 */
export const succeededIndexOf = (
  ids: ReadonlyArray<unknown> | IdSet,
  keyed: Iterable<ReadonlyArray<unknown>>
): SucceededIndex => {
  let all: IdSet
  if (Array.isArray(ids)) {
    const set = new Set<string>()
    for (const id of ids) set.add(String(id))
    all = set
  } else {
    all = ids as IdSet
  }
  const digests = new Map<string, { readonly spec: string; readonly seed: string }>()
  for (const [id, spec, seed] of keyed) digests.set(String(id), { spec: String(spec), seed: String(seed) })
  return {
    size: all.size,
    has: (pipelineId, specDigest, seedDigest, contentAddressed) => {
      if (!all.has(pipelineId)) return false
      if (digests.size === 0) return contentAddressed
      const d = digests.get(pipelineId)
      return d === undefined ? contentAddressed : d.spec === specDigest && d.seed === seedDigest
    }
  }
}

/**
 * Validates a histogram bucket width: a positive integer of ms; anything else fails with
 * `ConfigError`.
 *
 * @since 0.1.0
 * @category validation
 */
export const checkBucket = (bucketMs: number): Effect.Effect<number, ConfigError> =>
  Number.isInteger(bucketMs) && bucketMs > 0
    ? Effect.succeed(bucketMs)
    : Effect.fail(
      new ConfigError({
        message: `bucketMs must be a positive integer (ms), got ${String(bucketMs)}`,
        issues: [{ path: "bucketMs", message: `invalid bucket width ${String(bucketMs)}` }]
      })
    )

/**
 * The ranks (0-based, into the ascending values) that {@link quantile} reads for each of
 * `ps` over `n` values: `floor((n - 1) p)` and the next one (clamped), deduplicated. Lets a
 * store fetch only those values instead of sorting all of them.
 *
 * @since 0.1.0
 * @category statistics
 */
export const quantileRanks = (n: number, ps: ReadonlyArray<number>): Array<number> => {
  const ranks = new Set<number>()
  for (const p of ps) {
    const lo = Math.floor((n - 1) * p)
    ranks.add(lo)
    ranks.add(Math.min(lo + 1, n - 1))
  }
  return Array.from(ranks).sort((a, b) => a - b)
}

/**
 * {@link quantile} from the values at a few ranks only (`at(rank)`, ranks from
 * {@link quantileRanks}) of `n` ascending values: the same type-7 interpolation.
 *
 * @since 0.1.0
 * @category statistics
 */
export const quantileAt = (n: number, at: (rank: number) => number, p: number): number => {
  const h = (n - 1) * p
  const lo = Math.floor(h)
  const a = at(lo)
  const b = at(Math.min(lo + 1, n - 1))
  return a + (h - lo) * (b - a)
}

/**
 * The `p`-quantile (`p` in [0, 1]) of ascending `sorted` values by linear interpolation
 * between closest ranks (Hyndman & Fan type 7, NumPy's default). `sorted` must be non-empty.
 *
 * @since 0.1.0
 * @category statistics
 */
export const quantile = (sorted: ReadonlyArray<number>, p: number): number => {
  const h = (sorted.length - 1) * p
  const lo = Math.floor(h)
  const a = sorted[lo] ?? 0
  const b = sorted[Math.min(lo + 1, sorted.length - 1)] ?? a
  return a + (h - lo) * (b - a)
}

/**
 * p50/p95/p99 of ascending durations in ms, or `null` when there are none.
 *
 * @since 0.1.0
 * @category statistics
 */
export const latencyOf = (sorted: ReadonlyArray<number>): Latency | null =>
  sorted.length === 0 ? null : { p50: quantile(sorted, 0.5), p95: quantile(sorted, 0.95), p99: quantile(sorted, 0.99) }

/**
 * Returns a copy of a JSON-like value with its secrets masked, by the rules of `maskSecrets`
 * in `domain/internal/resource.ts` (secret-named keys, every non-public header value, a URL's
 * userinfo and query values), so that what the store writes follows the same rules as what the
 * runner hands it.
 *
 * @since 0.1.0
 * @category security
 */
export const maskSecrets = (value: unknown): unknown => ResourceHelpers.maskSecrets(value)

/**
 * Where an artifact's bytes go: nowhere under `journal: "summary"`, else where the backend
 * puts them.
 *
 * @since 0.1.0
 * @category artifacts
 */
export interface PlacedArtifact {
  readonly storage: ArtifactRecord["storage"]
  readonly payload: Uint8Array | null
  readonly blobRef: string | null
}

/**
 * The record of an artifact the store has just placed (`artifactId` assigned by the store).
 *
 * @since 0.1.0
 * @category mappers
 */
export const artifactRecordOf = (artifactId: number, a: NewArtifact, placed: PlacedArtifact): ArtifactRecord =>
  trusted(ArtifactRecord, {
    artifactId,
    pipelineId: a.pipelineId,
    runId: a.runId,
    seq: a.seq,
    taskName: a.taskName,
    typeName: a.typeName,
    codec: a.codec,
    digest: a.digest,
    size: a.payload.byteLength,
    storage: placed.storage,
    blobRef: placed.blobRef,
    isFinal: a.isFinal,
    available: placed.storage !== "none",
    createdAt: a.createdAt,
    visit: a.visit ?? 0,
    active: true
  })

/**
 * Places an artifact's payload according to the journal mode and the backend.
 *
 * @since 0.1.0
 * @category artifacts
 */
export const placeArtifact = (
  artifact: NewArtifact,
  journal: "full" | "summary",
  backend: ArtifactBackendService
): Effect.Effect<PlacedArtifact, StoreUnavailable> => {
  const sync = placeSync(artifact, journal, backend)
  return sync !== undefined ? Effect.succeed(sync) : placeAsync(artifact, journal, backend)
}

/**
 * The placement when it needs no I/O (summary journal, inline or null backend), else
 * `undefined`: lets the hot path skip an Effect per artifact.
 *
 * @since 0.1.0
 * @category artifacts
 */
export const placeSync = (
  artifact: NewArtifact,
  journal: "full" | "summary",
  backend: ArtifactBackendService
): PlacedArtifact | undefined =>
  journal === "summary" || backend.kind === "null"
    ? { storage: "none", payload: null, blobRef: null }
    : backend.kind === "inline"
    ? { storage: "inline", payload: artifact.payload, blobRef: null }
    : undefined

const placeAsync = (
  artifact: NewArtifact,
  journal: "full" | "summary",
  backend: ArtifactBackendService
): Effect.Effect<PlacedArtifact, StoreUnavailable> =>
  journal === "summary"
    ? Effect.succeed({ storage: "none", payload: null, blobRef: null })
    : Effect.map(backend.put(artifact.payload), (p): PlacedArtifact =>
      p.storage === "inline"
        ? { storage: "inline", payload: p.payload, blobRef: null }
        : p.storage === "blob"
        ? { storage: "blob", payload: null, blobRef: p.ref }
        : { storage: "none", payload: null, blobRef: null })

/**
 * Places the artifact of a checkpoint unit and the seeds of an admission, without an Effect
 * when no I/O is needed.
 *
 * @since 0.1.0
 * @category artifacts
 */
export const placeAll = (
  artifacts: ReadonlyArray<NewArtifact>,
  journal: "full" | "summary",
  backend: ArtifactBackendService
): Effect.Effect<Array<readonly [NewArtifact, PlacedArtifact]>, StoreUnavailable> => {
  const out: Array<readonly [NewArtifact, PlacedArtifact]> = []
  for (const a of artifacts) {
    const p = placeSync(a, journal, backend)
    if (p === undefined) {
      return Effect.forEach(artifacts, (x) => Effect.map(placeArtifact(x, journal, backend), (q) => [x, q] as const))
    }
    out.push([a, p])
  }
  return Effect.succeed(out)
}

/**
 * Reads an artifact's payload: the inline bytes, the backend's blob, or `undefined`.
 *
 * @since 0.1.0
 * @category artifacts
 */
export const loadPayload = (
  storage: ArtifactRecord["storage"],
  inlinePayload: Uint8Array | null,
  blobRef: string | null,
  backend: ArtifactBackendService
): Effect.Effect<Uint8Array | undefined, StoreUnavailable> => {
  if (storage === "inline") return Effect.succeed(inlinePayload ?? undefined)
  if (storage === "blob" && blobRef !== null) return Effect.map(backend.get(blobRef), Option.getOrUndefined)
  return Effect.succeed<Uint8Array | undefined>(undefined)
}

/** Effect's default tracer (spans kept in memory only, exported nowhere). */
const nativeTracer = Context.get(DefaultServices.liveServices, Tracer.Tracer)

/**
 * The group-commit writer: `submit(op)` queues an operation and resolves once the batch that
 * contains it has committed (or fails with that batch's error; a commit that refuses single ops,
 * returning their index and error, fails only those callers). One fiber drains the queue and
 * hands what is queued to `commit` in one call: at most `maxBatch` ops and, past the first op,
 * at most `maxBatchBytes` bytes (as `sizeOf` counts them: the payloads an op carries), so that
 * one transaction never binds and writes more than that at once.
 *
 * Backpressure is by bytes as well as by waiting: while the ops queued or being committed hold
 * more than `maxQueuedBytes`, a new op that carries bytes waits (outside the queue, in arrival
 * order; an interrupted waiter leaves) until committed ops make room; an op alone larger than
 * the budget enters an empty queue. Ops without bytes never wait. On scope close the writer is
 * stopped and whatever is still queued or waiting is committed before the scope ends; later
 * submissions fail with `StoreUnavailable`. Each batch commits in a span `Store.groupCommit`
 * (attribute `ops`) when a tracer other than Effect's default one is installed.
 *
 * @since 0.1.0
 * @category writers
 */
export interface GroupCommit<Op> {
  readonly submit: (op: Op) => Effect.Effect<void, StoreUnavailable>
  /**
   * {@link GroupCommit.submit} without an Effect: queues `op` (or parks it for room, as
   * `submit` does) and calls `done` once with its exit when its batch has committed (or at once
   * when the writer is closed). Not cancellable: for ops whose commit nobody abandons (the
   * runner's synchronous pipelines, whose last checkpoint is uninterruptible anyway).
   */
  readonly submitNow: (op: Op, done: (exit: Exit.Exit<void, StoreUnavailable>) => void) => void
  /** Bytes (by `sizeOf`) queued or being committed now. */
  readonly queuedBytes: () => number
}

/**
 * Builds a {@link GroupCommit} in the current scope. Defaults: `maxBatch` 4096 ops,
 * `maxBatchBytes` 8 MiB, `maxQueuedBytes` 32 MiB, `sizeOf` 0 (no byte accounting).
 * `spent`, when given, is called once for each op of a batch, in batch order, after every
 * submitter of that batch has been resumed (whether the batch committed, refused the op or
 * failed): the writer never reads the op again, so its owner may empty it (the store front
 * does, see `front.ts`'s `spend`).
 *
 * @since 0.1.0
 * @category writers
 */
export const makeGroupCommit = <Op>(options: {
  readonly commit: (
    ops: ReadonlyArray<Op>
  ) => Effect.Effect<void | ReadonlyArray<readonly [number, StoreUnavailable]>, StoreUnavailable>
  readonly maxBatch?: number | undefined
  readonly sizeOf?: ((op: Op) => number) | undefined
  readonly maxBatchBytes?: number | undefined
  readonly maxQueuedBytes?: number | undefined
  readonly spent?: ((op: Op) => void) | undefined
}): Effect.Effect<GroupCommit<Op>, never, Scope.Scope> =>
  Effect.gen(function*() {
    type Item = readonly [Op, (exit: Exit.Exit<void, StoreUnavailable>) => void, number]
    // A plain array and a latch instead of a Queue + Deferred per op: submitting costs one
    // `Effect.async` registration, and the writer takes everything queued in one swap.
    let queued: Array<Item> = []
    /** Ops with bytes waiting for room (arrival order). */
    const waiting: Array<Item> = []
    let bytes = 0
    let closed = false
    const latch = yield* Effect.makeLatch(false)
    const maxBatch = options.maxBatch ?? 4096
    const sizeOf = options.sizeOf ?? (() => 0)
    const maxBatchBytes = options.maxBatchBytes ?? 8 * 1024 * 1024
    const maxQueuedBytes = options.maxQueuedBytes ?? 32 * 1024 * 1024
    const spent = options.spent
    const enqueue = (item: Item) => {
      queued.push(item)
      bytes += item[2]
      if (queued.length === 1) latch.unsafeOpen()
    }
    const hasRoom = (size: number) => size === 0 || bytes === 0 || bytes + size <= maxQueuedBytes
    const admitWaiting = () => {
      while (waiting.length > 0 && hasRoom(waiting[0]![2])) enqueue(waiting.shift()!)
    }
    /** How many queued ops the next batch takes (count and byte budgets; at least one). */
    const batchLength = () => {
      let n = 0
      let b = 0
      while (n < queued.length && n < maxBatch) {
        const size = queued[n]![2]
        if (n > 0 && size > 0 && b + size > maxBatchBytes) break
        b += size
        n++
      }
      return n
    }
    const runBatch = Effect.suspend(() => {
      const n = batchLength()
      const batch = n === queued.length ? queued : queued.slice(0, n)
      queued = n === queued.length ? [] : queued.slice(n)
      if (queued.length === 0) latch.unsafeClose()
      if (batch.length === 0) return Effect.void
      const ops = batch.map((i) => i[0])
      // One span per batch, when someone collects spans: with Effect's default (native) tracer
      // nobody reads them, and a span per batch cost ~9 % of the store benchmark's CPU time
      // (batches of a few ops under 64 writers). One tracer lookup per batch decides.
      const commit = Effect.tracerWith((tracer) =>
        tracer === nativeTracer
          ? options.commit(ops)
          : Effect.withSpan(options.commit(ops), "Store.groupCommit", {
            attributes: { ops: ops.length },
            captureStackTrace: false
          })
      )
      return Effect.map(Effect.exit(commit), (exit) => {
        // a batch that committed may still have refused some of its ops (their index, error)
        const refused = Exit.isSuccess(exit) && exit.value !== undefined && exit.value.length > 0 ? exit.value : undefined
        const done = Exit.isSuccess(exit) ? Exit.void : exit
        for (let i = 0; i < batch.length; i++) {
          const [, resume, size] = batch[i]!
          bytes -= size
          const own = refused?.find((r) => r[0] === i)
          resume(own === undefined ? done : Exit.fail(own[1]))
        }
        if (spent !== undefined) for (let i = 0; i < batch.length; i++) spent(batch[i]![0])
        admitWaiting()
      })
    })
    const writer = yield* Effect.forkScoped(
      Effect.forever(Effect.zipRight(latch.await, Effect.uninterruptible(runBatch)))
    )
    yield* Effect.addFinalizer(() =>
      Fiber.interrupt(writer).pipe(
        Effect.zipRight(Effect.sync(() => {
          closed = true
        })),
        Effect.zipRight(Effect.whileLoop({
          while: () => queued.length > 0 || waiting.length > 0,
          body: () => Effect.zipRight(Effect.sync(admitWaiting), runBatch),
          step: () => {}
        }))
      )
    )
    const closedError = new StoreUnavailable({ message: "the store is closed" })
    return {
      submit: (op) =>
        Effect.async<void, StoreUnavailable>((resume) => {
          if (closed) return resume(Effect.fail(closedError))
          const item: Item = [op, resume, sizeOf(op)]
          if (item[2] === 0 || (waiting.length === 0 && hasRoom(item[2]))) return enqueue(item)
          waiting.push(item)
          return Effect.sync(() => {
            const i = waiting.indexOf(item)
            if (i >= 0) waiting.splice(i, 1)
          })
        }),
      submitNow: (op, done) => {
        if (closed) return done(Exit.fail(closedError))
        const item: Item = [op, done, sizeOf(op)]
        if (item[2] === 0 || (waiting.length === 0 && hasRoom(item[2]))) return enqueue(item)
        waiting.push(item)
      },
      queuedBytes: () => bytes
    }
  })

/**
 * The write-behind buffer of attempts and events.
 *
 * @since 0.1.0
 * @category writers
 */
export interface WriteBehind {
  readonly addAttempt: (a: NewAttempt) => Effect.Effect<void, StoreUnavailable>
  readonly addEvent: (e: NewEvent) => Effect.Effect<void, StoreUnavailable>
  /** Writes everything buffered in one call of `write`; on failure it all stays buffered. */
  readonly flush: Effect.Effect<void, StoreUnavailable>
  readonly pending: Effect.Effect<number>
  /**
   * Changes the policy from now on: the batch size, the flush period (the periodic flusher is
   * restarted with it; 0 = none) and whether facts are buffered at all (`enabled: false`: each
   * add writes what is buffered before it returns, and fails when that write fails).
   */
  readonly configure: (policy: WriteBehindPolicy) => Effect.Effect<void>
}

/**
 * The policy of a {@link WriteBehind}: `batchSize` facts trigger a flush, `flushIntervalMs`
 * (ms, 0 = no periodic flush) between periodic flushes, `enabled` whether adds are buffered.
 *
 * @since 0.1.0
 * @category writers
 */
export interface WriteBehindPolicy {
  readonly batchSize: number
  readonly flushIntervalMs: number
  readonly enabled: boolean
}

/**
 * Builds a {@link WriteBehind} in the current scope. A flush happens when `batchSize` facts are
 * buffered (failures there are kept for the next flush), every `flushIntervalMs` (a `Clock`
 * sleep, so `TestClock` drives it), and on demand. When more than `64 × batchSize` facts are
 * buffered because flushes keep failing, new facts are refused with `StoreUnavailable`. With
 * `enabled: false` every add is written before it returns (see {@link WriteBehind.configure}).
 *
 * @since 0.1.0
 * @category writers
 */
export const makeWriteBehind = (options: {
  readonly write: (
    attempts: ReadonlyArray<NewAttempt>,
    events: ReadonlyArray<NewEvent>
  ) => Effect.Effect<void, StoreUnavailable>
  readonly batchSize: number
  readonly flushIntervalMs: number
  readonly enabled?: boolean | undefined
}): Effect.Effect<WriteBehind, never, Scope.Scope> =>
  Effect.gen(function*() {
    const attempts: Array<NewAttempt> = []
    const events: Array<NewEvent> = []
    const lock = yield* Effect.makeSemaphore(1)
    const scope = yield* Effect.scope
    let policy: WriteBehindPolicy = {
      batchSize: options.batchSize,
      flushIntervalMs: options.flushIntervalMs,
      enabled: options.enabled ?? true
    }
    const locked: Effect.Effect<void, StoreUnavailable> = lock.withPermits(1)(
      Effect.suspend(() => {
        const na = attempts.length
        const ne = events.length
        if (na === 0 && ne === 0) return Effect.void
        return Effect.tap(options.write(attempts.slice(0, na), events.slice(0, ne)), () =>
          Effect.sync(() => {
            attempts.splice(0, na)
            events.splice(0, ne)
          }))
      })
    )
    // nothing buffered: nothing to wait for either (a flush under way still holds its facts
    // in the buffer until its write succeeded), so no lock is taken (a cluster runner
    // flushes before every checkpoint: pg17z)
    const flush: Effect.Effect<void, StoreUnavailable> = Effect.suspend(() =>
      attempts.length === 0 && events.length === 0 ? Effect.void : locked
    )
    const add = (push: () => void) =>
      Effect.suspend(() => {
        const hardCap = Math.max(1, policy.batchSize) * 64
        if (attempts.length + events.length >= hardCap) {
          return Effect.fail(
            new StoreUnavailable({ message: `write-behind buffer is full (${hardCap} facts): flushes keep failing` })
          )
        }
        push()
        if (!policy.enabled) return flush
        return attempts.length + events.length >= policy.batchSize ? Effect.ignore(flush) : Effect.void
      })
    let flusher: Fiber.RuntimeFiber<never> | undefined
    const startFlusher = Effect.suspend(() => {
      const ms = policy.flushIntervalMs
      if (ms <= 0) return Effect.void
      return Effect.map(
        Effect.forkIn(Effect.forever(Effect.zipRight(Effect.sleep(ms), Effect.ignore(flush))), scope),
        (f) => {
          flusher = f
        }
      )
    })
    yield* startFlusher
    return {
      addAttempt: (a) => add(() => attempts.push(a)),
      addEvent: (e) => add(() => events.push(e)),
      flush,
      pending: Effect.sync(() => attempts.length + events.length),
      configure: (next) =>
        Effect.suspend(() => {
          const restart = next.flushIntervalMs !== policy.flushIntervalMs
          policy = next
          if (!restart) return Effect.void
          const old = flusher
          flusher = undefined
          return Effect.zipRight(old === undefined ? Effect.void : Fiber.interrupt(old), startFlusher)
        })
    }
  })

/**
 * Validates the write-behind options (positive integer batch size, non-negative interval).
 *
 * @since 0.1.0
 * @category validation
 */
export const checkOptions = (options: {
  readonly batchSize?: number | undefined
  readonly flushIntervalMs?: number | undefined
}): Effect.Effect<{ readonly batchSize: number; readonly flushIntervalMs: number }, ConfigError> => {
  const batchSize = options.batchSize ?? 128
  const flushIntervalMs = options.flushIntervalMs ?? 1000
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    return Effect.fail(new ConfigError({ message: `batchSize must be a positive integer, got ${batchSize}` }))
  }
  if (!Number.isFinite(flushIntervalMs) || flushIntervalMs < 0) {
    return Effect.fail(new ConfigError({ message: `flushIntervalMs must be >= 0, got ${flushIntervalMs}` }))
  }
  return Effect.succeed({ batchSize, flushIntervalMs })
}

/**
 * What `StoreService.pipelineStates` answers of one stored pipeline (named once here,
 * `Store.PipelineStateAndRun` publicly): its state and the run its row is filed under now
 * (`run_id`: the run that last admitted it). A row moves to another run only when another
 * submission admits it again, after it ended `failed` or `interrupted`: a reader that counted
 * the pipeline under one run tells by `runId` that the row is another run's now.
 */
export interface PipelineStateAndRun {
  readonly state: PipelineState
  readonly runId: RunId
}

/**
 * The read of `StoreService.pipelineStates` (named once here, `Store.PipelineStatesRead`
 * publicly): the states of the stored pipelines among `ids` (only those whose state is one of
 * `among`, when given), each with the run its row is filed under ({@link PipelineStateAndRun}),
 * a map from id to them with no entry for an unknown id or a state outside `among`; fails with
 * `StoreUnavailable` as the store's reads do.
 */
export type PipelineStatesRead = (
  ids: ReadonlyArray<PipelineId>,
  among?: ReadonlyArray<PipelineState> | undefined
) => Effect.Effect<ReadonlyMap<PipelineId, PipelineStateAndRun>, StoreUnavailable>

/**
 * `store.pipelineStates` when the store has it, else the same answer from `getPipelines`
 * (whole rows read, their states and run ids kept): see `StoreService.pipelineStates`.
 *
 * @param store - the store (its `pipelineStates` and `getPipelines`).
 * @returns the states and runs of the stored pipelines among `ids` (only those in `among`, when given).
 */
export const pipelineStatesOf = (
  store: {
    readonly getPipelines: (
      ids: ReadonlyArray<PipelineId>
    ) => Effect.Effect<ReadonlyMap<PipelineId, { readonly state: PipelineState; readonly runId: RunId }>, StoreUnavailable>
    readonly pipelineStates?: PipelineStatesRead | undefined
  }
): PipelineStatesRead =>
(ids, among) =>
  ids.length === 0
    ? Effect.succeed(new Map())
    : store.pipelineStates !== undefined
    ? store.pipelineStates(ids, among)
    : Effect.map(store.getPipelines(ids), (rows) => {
      const out = new Map<PipelineId, PipelineStateAndRun>()
      for (const [id, r] of rows) if (among === undefined || among.includes(r.state)) out.set(id, { state: r.state, runId: r.runId })
      return out
    })

/**
 * Counts the pipelines that ran under `runId` and are filed under another run now (see
 * `TaskStore.takenPipelines`) from what a store holds of them: `ran`, the ids with a task
 * row, an attempt row or a `pipeline.interrupted` event of `runId`; `interrupted`, those with
 * such an event or claimed from `runId` after it died (a `pipeline.abandoned` event naming it); `filedUnder`, the run each stored one's row is filed under now. Ascending by
 * run id.
 */
export const tallyTaken = (
  runId: RunId,
  ran: Iterable<PipelineId>,
  interrupted: ReadonlySet<PipelineId>,
  filedUnder: (id: PipelineId) => RunId | undefined
): ReadonlyArray<TakenPipelines> => {
  const byRun = new Map<RunId, { failed: number; interrupted: number }>()
  for (const id of ran) {
    const now = filedUnder(id)
    if (now === undefined || now === runId) continue
    const entry = byRun.get(now) ?? { failed: 0, interrupted: 0 }
    if (interrupted.has(id)) entry.interrupted++
    else entry.failed++
    byRun.set(now, entry)
  }
  return Array.from(byRun, ([run, n]): TakenPipelines => ({ runId: run, ...n }))
    .sort((a, b) => (a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0))
}

/**
 * `store.takenPipelines(runId)` when the store has it, else the same answer read from the
 * run's rows: its task rows, attempt rows and `pipeline.interrupted` events (streams by run
 * id) and the `pipeline.abandoned` events naming it, then the rows of those pipelines (`pipelineStatesOf`, 500 ids a read). See
 * `TaskStore.takenPipelines`.
 *
 * @param store - the store (its `takenPipelines`, or the reads the answer is made of).
 * @returns the pipelines that ran under the run and are filed under another run now, per that run.
 */
export const takenPipelinesOf = (
  store: Pick<TaskStore, "takenPipelines" | "streamTasks" | "streamAttempts" | "streamEvents" | "getPipelines"> & {
    readonly pipelineStates?: PipelineStatesRead | undefined
  }
) =>
(runId: RunId): Effect.Effect<ReadonlyArray<TakenPipelines>, StoreUnavailable | ConfigError> =>
  store.takenPipelines !== undefined
    ? store.takenPipelines(runId)
    : Effect.gen(function*() {
      const ran = new Set<PipelineId>()
      const interrupted = new Set<PipelineId>()
      yield* Stream.runForEach(store.streamTasks({ runId }), (t) => Effect.sync(() => void ran.add(t.pipelineId)))
      yield* Stream.runForEach(store.streamAttempts({ runId }), (a) => Effect.sync(() => void ran.add(a.pipelineId)))
      yield* Stream.runForEach(store.streamEvents({ runId, kind: "pipeline.interrupted" }), (e) =>
        Effect.sync(() => {
          if (e.pipelineId === null) return
          ran.add(e.pipelineId)
          interrupted.add(e.pipelineId)
        }))
      yield* Stream.runForEach(store.streamEvents({ kind: "pipeline.abandoned" }), (e) =>
        Effect.sync(() => {
          if (e.pipelineId !== null && (e.data as { readonly run?: unknown } | null)?.run === runId) interrupted.add(e.pipelineId)
        }))
      const ids = Array.from(ran)
      const rows = new Map<PipelineId, RunId>()
      const states = pipelineStatesOf(store)
      for (let i = 0; i < ids.length; i += 500) {
        for (const [id, r] of yield* states(ids.slice(i, i + 500))) rows.set(id, r.runId)
      }
      return tallyTaken(runId, ran, interrupted, (id) => rows.get(id))
    })
