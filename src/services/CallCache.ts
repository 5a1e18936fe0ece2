/**
 * The call cache as a service: where stored outputs of cacheable tasks are kept (see
 * `domain/CallCache.ts` for modes, keys and namespaces), and the cache figures of a run.
 *
 * Two implementations: {@link layerMemory} (this process only; what the runner uses when no
 * cache is provided) and the SQLite one in `layers/SqliteCallCache.ts` (the `call_cache` table
 * of the run's store, or of a shared cache database that several experiments, studies and
 * processes use at once).
 *
 * The runner asks the cache before an attempt of a cacheable task takes any lease: a stored,
 * unexpired output is decoded and recorded as an attempt with outcome `cache_hit` (decision
 * `{ reason: "ok", cache: { status: "hit", key, storedAt, usage } }`); otherwise the attempt
 * runs and its success is stored (decision `cache: { status: "miss" | "refresh" }`, or
 * `"bypass"` in `readOnly`). A cache that cannot be read or written is logged and treated as a
 * miss: a broken cache never fails a pipeline.
 *
 * @since 0.7.0
 */
import { Context, Effect, Layer, Option, Predicate, Stream } from "effect"
import { roundUsd } from "../domain/Pricing.js"
// the domain half (modes, keys, namespaces) is part of this module's surface
export * from "../domain/CallCache.js"
import type { CacheNamespace } from "../domain/CallCache.js"
import type { StoreUnavailable } from "../domain/Errors.js"
import type { RunId } from "../domain/Ids.js"
import type { RunRecord } from "../domain/Records.js"
import type { CacheFigures, ReadError, StoreStats, TaskStore } from "../domain/TaskStore.js"

/**
 * One stored output: its `key` (32 hex), the task's name, the {@link CacheNamespace} it was
 * made in, the encoded output (`typeName`, `codec`, `data`: what the run's codec registry
 * wrote), the token usage of the call that made it (`null`: none known) and when it was
 * stored (`createdAt`, epoch ms from the `Clock`).
 *
 * @since 0.7.0
 * @category models
 */
export interface CacheEntry {
  readonly key: string
  readonly taskName: string
  readonly namespace: CacheNamespace
  readonly typeName: string
  readonly codec: string
  readonly data: Uint8Array
  readonly usage: CacheUsageTokens | null
  readonly createdAt: number
}

/**
 * Token counts of one call (as `chat` reports them).
 *
 * @since 0.7.0
 * @category models
 */
export interface CacheUsageTokens {
  readonly promptTokens: number
  readonly completionTokens: number
  readonly totalTokens: number
  /** The priced cost of the call that made the output (US dollars; see `Pricing`), when known. */
  readonly costUsd?: number | undefined
}

/**
 * The cache port:
 *
 * - `kind`: `"memory"` or `"sqlite"`; `location`: the database path (`":memory:"` for memory);
 * - `get`: the entry stored under `key`, whatever its age (the caller checks the TTL);
 * - `put`: stores `entry`, replacing any entry under its key (what `refresh` does);
 * - `putFirst` (optional, since 0.15.0): stores `entry` unless an unexpired entry is already
 *   under its key, in one atomic step, and returns the entry under the key afterwards
 *   (`entry` itself when it was stored, else the one kept): what `readWrite` does, so that
 *   two pipelines or two processes sending the same request keep the first answer. An
 *   existing entry is expired when `ttlMs` is a number and
 *   `entry.createdAt - existing.createdAt >= ttlMs` (`null`: never). A cache without it is
 *   asked `get`, then `put` when nothing unexpired was there (not atomic across processes);
 * - `size`: how many entries are stored.
 *
 * Every method fails only with `StoreUnavailable` (a locked or unwritable database).
 *
 * @since 0.7.0
 * @category models
 */
export interface CallCacheService {
  readonly kind: string
  readonly location: string
  readonly get: (key: string) => Effect.Effect<Option.Option<CacheEntry>, StoreUnavailable>
  readonly put: (entry: CacheEntry) => Effect.Effect<void, StoreUnavailable>
  readonly putFirst?: ((entry: CacheEntry, ttlMs: number | null) => Effect.Effect<CacheEntry, StoreUnavailable>) | undefined
  readonly size: Effect.Effect<number, StoreUnavailable>
}

/**
 * Whether `existing` may be kept over `entry` under {@link CallCacheService.putFirst}'s rule:
 * it is not expired (`ttlMs` null, or `entry.createdAt - existing.createdAt < ttlMs`).
 *
 * @param existing the entry already stored under the key
 * @param entry the entry being stored (its `createdAt`, epoch ms, is "now")
 * @param ttlMs how long an entry may be served (ms), `null`: forever
 * @since 0.15.0
 * @category predicates
 */
export const keepsExisting = (existing: CacheEntry, entry: CacheEntry, ttlMs: number | null): boolean =>
  ttlMs === null || entry.createdAt - existing.createdAt < ttlMs

/**
 * Stores `entry` on `cache` keeping the first answer ({@link CallCacheService.putFirst}): the
 * cache's own atomic `putFirst` when it has one, else `get` then `put` when nothing unexpired
 * is stored (a cache written before 0.15.0).
 *
 * @param cache the cache
 * @param entry the entry to store
 * @param ttlMs how long an entry may be served (ms), `null`: forever
 * @returns the entry under the key afterwards (`entry` itself when it was stored)
 * @since 0.15.0
 * @category combinators
 */
export const putFirst = (
  cache: CallCacheService,
  entry: CacheEntry,
  ttlMs: number | null
): Effect.Effect<CacheEntry, StoreUnavailable> =>
  cache.putFirst !== undefined
    ? cache.putFirst(entry, ttlMs)
    : Effect.flatMap(cache.get(entry.key), (found) =>
      Option.isSome(found) && keepsExisting(found.value, entry, ttlMs)
        ? Effect.succeed(found.value)
        : Effect.as(cache.put(entry), entry))

/**
 * The call cache of a run.
 *
 * @since 0.7.0
 * @category tags
 */
export class CallCache extends Context.Tag("assay/CallCache")<CallCache, CallCacheService>() {}

/**
 * An in-memory cache (a `Map` living as long as the value).
 *
 * @since 0.7.0
 * @category constructors
 */
export const makeMemory = (): CallCacheService => {
  const entries = new Map<string, CacheEntry>()
  return {
    kind: "memory",
    location: ":memory:",
    get: (key) => Effect.sync(() => Option.fromNullable(entries.get(key))),
    put: (entry) => Effect.sync(() => void entries.set(entry.key, entry)),
    putFirst: (entry, ttlMs) =>
      Effect.sync(() => {
        const existing = entries.get(entry.key)
        if (existing !== undefined && keepsExisting(existing, entry, ttlMs)) return existing
        entries.set(entry.key, entry)
        return entry
      }),
    size: Effect.sync(() => entries.size)
  }
}

/**
 * The in-memory cache as a layer (one cache per build of the layer).
 *
 * @since 0.7.0
 * @category layers
 */
export const layerMemory: Layer.Layer<CallCache> = Layer.sync(CallCache, makeMemory)

// ---------------------------------------------------------------------------------------------
// The figures of a run
// ---------------------------------------------------------------------------------------------

/**
 * What the cache did for a run (or a whole store), counted from the attempt rows: `hits`
 * (attempts served from the cache), `misses` (attempts of cached tasks that found nothing and
 * called, succeeded or failed: the calls made), `refreshed` (attempts run in `refresh` mode,
 * stored over what was there), `bypassed` (attempts of `readOnly` tasks that found nothing and
 * ran without storing), `writeFailures` (misses and refreshes that succeeded but whose output
 * the cache failed to store, counted in those too: the task's result stands, the next run
 * calls again), `lookupFailures` (attempts whose lookup the cache failed
 * to answer, a damaged or unreadable cache: the task ran, counted in `misses` or `bypassed`
 * too; since 0.11.0), and what the hits saved:
 * `tokensSaved` (the stored usage of the calls they replaced; `promptTokens`,
 * `completionTokens`, `totalTokens`) and `costSavedUsd`, the priced cost (US dollars, see
 * `Pricing`) stored with each output the hits were served from, summed; `null` when no hit's
 * call had a known cost (no price configured and no cost reported by the server).
 *
 * The same type as the store's `TaskStore.CacheFigures` (what `StoreStats.cache` holds), of
 * which it is an alias (since 0.12.0; they were two interfaces field for field).
 *
 * @since 0.7.0
 * @category models
 */
export type CacheStats = CacheFigures

/**
 * Zero figures.
 *
 * @since 0.7.0
 * @category constants
 */
export const emptyStats: CacheStats = {
  hits: 0,
  misses: 0,
  refreshed: 0,
  bypassed: 0,
  writeFailures: 0,
  lookupFailures: 0,
  tokensSaved: { promptTokens: 0, completionTokens: 0, totalTokens: 0 },
  costSavedUsd: null,
  stored: 0
}

/**
 * The call cache's figures as `assay report --json` and `assay run --summary json` print them
 * (their `cache` object): the {@link CacheStats} (`hits`, `misses`, `refreshed`, `bypassed`:
 * the read-only misses, `stored`: the answers stored, `writeFailures`, `lookupFailures`,
 * `tokensSaved`, `costSavedUsd` in US dollars) and `modelCallHits`, the model calls the hits
 * saved (`AccountingFigures.modelCallHits`; 0 when the accounting is not known).
 *
 * @since 0.15.0
 * @category models
 */
export type CacheSummary = CacheStats & { readonly modelCallHits: number }

/**
 * Builds the {@link CacheSummary} of a scope from its cache figures and its accounting.
 *
 * @param cache the scope's cache figures (`StoreStats.cache`, `statsOfScope`)
 * @param accounting the scope's accounting (`StoreStats.accounting`), for `modelCallHits`
 * @returns the figures with `modelCallHits`
 * @since 0.15.0
 * @category constructors
 */
export const summaryOf = (
  cache: CacheStats,
  accounting: { readonly modelCallHits: number } | undefined
): CacheSummary => ({ ...cache, modelCallHits: accounting?.modelCallHits ?? 0 })

/**
 * Whether a {@link CacheStats} shows any cache activity.
 *
 * @since 0.7.0
 * @category guards
 */
export const isActive = (s: CacheStats): boolean => s.hits + s.misses + s.refreshed + s.bypassed + s.writeFailures + s.lookupFailures > 0

const numberOr0 = (u: unknown): number => typeof u === "number" && Number.isFinite(u) ? u : 0

/** A known cost plus another (`null`: none known; a cost that is not a number adds nothing). */
const addCost = (a: number | null, b: unknown): number | null =>
  typeof b === "number" && Number.isFinite(b) ? roundUsd((a ?? 0) + b) : a

/**
 * Adds one attempt (its outcome and stored decision) to running figures (see
 * {@link CacheStats}).
 *
 * @since 0.7.0
 * @category combinators
 */
export const addAttempt = (before: CacheStats, outcome: string, decision: unknown): CacheStats => {
  const cache = Predicate.isObject(decision) ? (decision as { readonly cache?: unknown }).cache : undefined
  if (!Predicate.isObject(cache)) return before
  const c = cache as {
    readonly status?: unknown
    readonly usage?: unknown
    readonly stored?: unknown
    readonly lookupFailed?: unknown
    readonly lostRace?: unknown
  }
  // a miss or refresh whose output the cache failed to store (`stored: false`)
  const w = c.stored === false && (c.status === "miss" || c.status === "refresh")
    ? { ...before, writeFailures: before.writeFailures + 1 }
    : before
  // an attempt whose lookup the cache failed to answer (`lookupFailed: true`)
  const s = c.lookupFailed === true ? { ...w, lookupFailures: w.lookupFailures + 1 } : w
  if (outcome === "cache_hit" || c.status === "hit") {
    const u = Predicate.isObject(c.usage) ? c.usage as Record<string, unknown> : {}
    return {
      ...s,
      hits: s.hits + 1,
      tokensSaved: {
        promptTokens: s.tokensSaved.promptTokens + numberOr0(u["promptTokens"]),
        completionTokens: s.tokensSaved.completionTokens + numberOr0(u["completionTokens"]),
        totalTokens: s.tokensSaved.totalTokens + numberOr0(u["totalTokens"])
      },
      costSavedUsd: addCost(s.costSavedUsd, u["costUsd"])
    }
  }
  // an answer kept for the next run: a miss or refresh that succeeded, its write not failed
  // and not lost to an answer stored first (`lostRace`)
  const k = outcome === "succeeded" && c.stored !== false && c.lostRace !== true ? { ...s, stored: (s.stored ?? 0) + 1 } : s
  if (c.status === "miss") return { ...k, misses: s.misses + 1 }
  if (c.status === "refresh") return { ...k, refreshed: s.refreshed + 1 }
  if (c.status === "bypass") return { ...s, bypassed: s.bypassed + 1 }
  return s
}

/**
 * The cache figures of `runId` (absent: of every run in the store), read from the attempts'
 * outcomes and decisions (one pass over the run's attempts).
 *
 * @since 0.7.0
 * @category reads
 */
export const statsOf = (store: TaskStore, runId?: RunId | undefined): Effect.Effect<CacheStats, ReadError> =>
  Stream.runFold(
    store.streamAttempts(runId === undefined ? {} : { runId }),
    emptyStats,
    (s, a) => addAttempt(s, a.outcome, a.decision)
  )

/**
 * Adds two sets of figures (`costSavedUsd` is `null` only when neither knows it).
 *
 * @since 0.7.0
 * @category combinators
 */
export const sumStats = (a: CacheStats, b: CacheStats): CacheStats => ({
  hits: a.hits + b.hits,
  misses: a.misses + b.misses,
  refreshed: a.refreshed + b.refreshed,
  bypassed: a.bypassed + b.bypassed,
  writeFailures: a.writeFailures + b.writeFailures,
  lookupFailures: a.lookupFailures + b.lookupFailures,
  tokensSaved: {
    promptTokens: a.tokensSaved.promptTokens + b.tokensSaved.promptTokens,
    completionTokens: a.tokensSaved.completionTokens + b.tokensSaved.completionTokens,
    totalTokens: a.tokensSaved.totalTokens + b.tokensSaved.totalTokens
  },
  costSavedUsd: addCost(a.costSavedUsd, b.costSavedUsd),
  stored: (a.stored ?? 0) + (b.stored ?? 0)
})

/**
 * The cache figures of a scope (`runId`; absent: every run of the store), counted from its
 * attempt rows: the store's `stats` aggregate (`StoreStats.cache`; `given` when the caller
 * already read the scope's stats), else, for a store that does not compute it (a plugin
 * written before it), its attempts folded ({@link statsOf}). Rows are durable: a run killed
 * with `kill -9` reads every attempt it recorded, and a resumed store's whole-experiment
 * figures cover every run (no counter flushed at intervals is read).
 *
 * @since 0.11.0
 * @category reads
 */
export const statsOfScope = (
  store: TaskStore,
  runId: RunId | undefined,
  given?: StoreStats | undefined
): Effect.Effect<CacheStats, ReadError> =>
  Effect.flatMap(
    given === undefined ? store.stats(runId) : Effect.succeed(given),
    (st) => st.cache !== undefined ? Effect.succeed(st.cache) : statsOf(store, runId)
  )

/**
 * The cache figures of one run, counted from its attempt rows ({@link statsOfScope}): the
 * same figures whether the run finished, is running, or died.
 *
 * @since 0.7.0
 * @category reads
 */
export const statsOfRun = (store: TaskStore, run: RunRecord): Effect.Effect<CacheStats, ReadError> =>
  statsOfScope(store, run.runId)
