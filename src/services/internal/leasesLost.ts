/**
 * Lost global leases, counted per pool resource from the event log: what `report`, `/stats`
 * and `watch` show of the `lease.lost` pool events a runner on global pools (`PgPools`)
 * publishes when its slot was taken by another runner (`taken`) or its renewals failed until
 * the local deadline (`deadline`). Each such lease's attempt failed with `LeaseLost` (class
 * `retryable`) and was retried; a count above zero says runners lost slots (a frozen or
 * overloaded runner, a lost connection to PostgreSQL), not that work was lost.
 *
 * @since 0.11.0
 */
import { Effect } from "effect"
import type { RunId } from "../../domain/Ids.js"
import type { EventRecord } from "../../domain/Records.js"
import type { ReadError, TaskStore } from "../Store.js"

/**
 * The kind of the pool event a global pool publishes when a lease is lost.
 *
 * @since 0.11.0
 * @category constants
 */
export const LEASE_LOST = "lease.lost"

/**
 * The lost leases of one pool resource: `lost` how many, `taken` of them because another
 * runner held the slot when this one renewed it, `deadline` because no renewal succeeded before
 * the lease's local deadline (`lost = taken + deadline + ` events of an unknown reason), `maxLateMs`
 * the longest time a loss was seen past that deadline (ms; 0 when every loss was seen in time),
 * `lastAt` when the latest loss was seen (epoch ms), `runners` the runner ids that lost them
 * (sorted; empty when the events name none).
 *
 * @since 0.11.0
 * @category models
 */
export interface LeasesLost {
  readonly pool: string
  readonly resourceId: string
  readonly lost: number
  readonly taken: number
  readonly deadline: number
  readonly maxLateMs: number
  readonly lastAt: number
  readonly runners: ReadonlyArray<string>
}

/**
 * Counts `lease.lost` events per pool resource (other kinds are ignored), ordered by pool then
 * resource id. An event without a pool or resource in its data counts under `"?"`.
 *
 * @since 0.11.0
 * @category counting
 */
export const tallyLeasesLost = (events: Iterable<Pick<EventRecord, "kind" | "data" | "ts">>): ReadonlyArray<LeasesLost> => {
  const by = new Map<string, { -readonly [K in keyof LeasesLost]: K extends "runners" ? Set<string> : LeasesLost[K] }>()
  for (const e of events) {
    if (e.kind !== LEASE_LOST) continue
    const d = e.data !== null && typeof e.data === "object" ? e.data as Record<string, unknown> : {}
    const text = (k: string) => (typeof d[k] === "string" ? d[k] as string : "?")
    const pool = text("pool")
    const resourceId = text("resourceId")
    const key = `${pool}\u0000${resourceId}`
    const t = by.get(key) ?? { pool, resourceId, lost: 0, taken: 0, deadline: 0, maxLateMs: 0, lastAt: e.ts, runners: new Set<string>() }
    t.lost++
    if (d["reason"] === "taken") t.taken++
    else if (d["reason"] === "deadline") t.deadline++
    if (typeof d["lateMs"] === "number" && d["lateMs"] > t.maxLateMs) t.maxLateMs = d["lateMs"]
    t.lastAt = Math.max(t.lastAt, e.ts)
    if (typeof d["runnerId"] === "string") t.runners.add(d["runnerId"])
    by.set(key, t)
  }
  return Array.from(by.values())
    .map((t) => ({ ...t, runners: Array.from(t.runners).sort() }))
    .sort((a, b) => (a.pool < b.pool ? -1 : a.pool > b.pool ? 1 : a.resourceId < b.resourceId ? -1 : a.resourceId > b.resourceId ? 1 : 0))
}

/**
 * The `lease.lost` events of a store's scope (`runId`, or the whole store when `undefined`),
 * oldest first: one read, indexed by kind. Fails with the store's read errors.
 *
 * @since 0.11.0
 * @category counting
 */
export const leaseLostEvents = (store: TaskStore, runId: RunId | undefined): Effect.Effect<ReadonlyArray<EventRecord>, ReadError> =>
  store.events(runId === undefined ? { kind: LEASE_LOST } : { kind: LEASE_LOST, runId })

/**
 * The lost leases of a store's scope (`runId`, or the whole store when `undefined`), per pool
 * resource (see {@link tallyLeasesLost}) from {@link leaseLostEvents}. Empty for a run on
 * local pools. Fails with the store's read errors.
 *
 * @since 0.11.0
 * @category counting
 */
export const leasesLostOf = (store: TaskStore, runId: RunId | undefined): Effect.Effect<ReadonlyArray<LeasesLost>, ReadError> =>
  Effect.map(leaseLostEvents(store, runId), tallyLeasesLost)

/**
 * One resource's lost leases in words: `3 lost (taken 2, deadline 1; up to 40 ms late)`.
 *
 * @since 0.11.0
 * @category formatting
 */
export const leasesLostText = (l: LeasesLost): string =>
  `${l.lost} lost (taken ${l.taken}, deadline ${l.deadline}${l.maxLateMs > 0 ? `; up to ${l.maxLateMs} ms late` : ""})`
