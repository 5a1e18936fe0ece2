/**
 * Statistics of a pool: the wait figures recorded per acquire, and the read-outs
 * (`Pools.stats`, `Pools.snapshot`) computed from the pool state.
 *
 * @internal
 */
import * as Breaker from "../../../domain/Breaker.js"
import type { Json } from "../../../domain/Json.js"
import type { Selector } from "../../../domain/Lease.js"
import * as Resource from "../../../domain/Resource.js"
import type { PoolHold, PoolStats, ResourceSnapshot } from "../../Pools.js"
import type { PoolState } from "./state.js"

/** How many recent waits the percentiles are computed over. */
const RECENT_WAITS = 1024

/**
 * The waits of one pool: acquires that could not be served at once.
 *
 * @internal
 */
export interface WaitStats {
  total: number
  sumMs: number
  maxMs: number
  /** A ring of the last {@link RECENT_WAITS} waits (ms). */
  readonly recent: Array<number>
  next: number
}

/** @internal */
export const emptyWaits = (): WaitStats => ({ total: 0, sumMs: 0, maxMs: 0, recent: [], next: 0 })

/**
 * Records one wait of `ms` milliseconds.
 *
 * @internal
 */
export const recordWait = (w: WaitStats, ms: number): void => {
  w.total++
  w.sumMs += ms
  if (ms > w.maxMs) w.maxMs = ms
  if (w.recent.length < RECENT_WAITS) w.recent.push(ms)
  else w.recent[w.next] = ms
  w.next = (w.next + 1) % RECENT_WAITS
}

/**
 * The nearest-rank percentile `p` (0..1) of an ascending array (0 when empty).
 *
 * @internal
 */
export const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!

const noHolds: ReadonlyArray<PoolHold> = []

/** What the pool's observing algorithms say about one resource, by algorithm name (or none). */
const algorithmStateOf = (pool: PoolState, service: object, resourceId: string, now: number): Record<string, Json> | undefined => {
  let out: Record<string, Json> | undefined
  for (const a of pool.observers) {
    const d = a.describe?.(service, pool.name, resourceId, now)
    if (d !== undefined) (out ??= {})[a.name] = d
  }
  return out
}

/**
 * The per-resource state of a pool at `now` (epoch ms).
 *
 * @internal
 */
export const snapshotOf = (pool: PoolState, now: number, service?: object): ReadonlyArray<ResourceSnapshot> =>
  pool.list.map((res) => {
    const state = Resource.effectiveState(res.health, now)
    const algorithm = service === undefined ? undefined : algorithmStateOf(pool, service, res.resource.id, now)
    return {
      ...(algorithm !== undefined ? { algorithm } : {}),
      id: res.resource.id,
      kind: res.resource.kind,
      state,
      active: res.active,
      capacity: res.resource.capacity,
      leases: Array.from(res.leases, (lease) => lease.id),
      latencyEmaMs: res.latencyEmaMs,
      usage: { ...res.usage },
      consecutiveFailures: res.health.consecutiveFailures,
      cooldownUntil: state === "degraded" ? res.health.cooldownUntil : undefined,
      lastError: res.lastError,
      throttledUntil: res.throttledUntil > now ? res.throttledUntil : undefined,
      throttledTotal: res.throttledTotal,
      probing: res.probing,
      breaker: Breaker.effectiveState(res.breaker, now),
      breakerUntil: res.breaker.state === "open" && res.breaker.openUntil > now ? res.breaker.openUntil : undefined,
      breakerOpened: res.breaker.opened
    }
  })

/**
 * The aggregated figures of a pool at `now` (epoch ms), over the resources matching
 * `selector` (all when absent or empty).
 *
 * @internal
 */
export const statsOf = (pool: PoolState, selector: Selector | undefined, now: number): PoolStats => {
  let active = 0, capacity = 0, ready = 0, degraded = 0, dead = 0, total = 0, revoked = 0, throttled = 0, breakerOpen = 0
  const usage: Record<string, number> = {}
  let holds: Array<PoolHold> | undefined
  const all = selector === undefined || Resource.isEmptySelector(selector)
  for (const res of pool.list) {
    if (!all && !Resource.matches(selector, res.info)) continue
    total++
    active += res.active
    if (res.throttledUntil > now) {
      throttled++
      ;(holds ??= []).push({ resourceId: res.resource.id, reason: "throttled", until: res.throttledUntil })
    } else if (res.breaker.state === "open" && res.breaker.openUntil > now) {
      ;(holds ??= []).push({ resourceId: res.resource.id, reason: "breaker_open", until: res.breaker.openUntil })
    }
    if (res.breaker.state !== "closed") breakerOpen++
    const state = Resource.effectiveState(res.health, now)
    if (state === "revoked") {
      revoked++
    } else {
      capacity += res.resource.capacity
      if (state === "ready") ready++
      else if (state === "degraded") degraded++
      else dead++
    }
    if (!all) for (const [k, v] of Object.entries(res.usage)) usage[k] = (usage[k] ?? 0) + v
  }
  const waits = pool.waits
  const sorted = [...waits.recent].sort((a, b) => a - b)
  return {
    pool: pool.name,
    active,
    capacity,
    utilization: capacity === 0 ? 0 : active / capacity,
    ready,
    degraded,
    dead,
    waiting: pool.waiting,
    queued: pool.waiters.size,
    throttled,
    breakerOpen,
    leasesTotal: pool.leasesTotal,
    okTotal: pool.okTotal,
    failedTotal: pool.failedTotal,
    total,
    revoked,
    leakedTotal: pool.leakedTotal,
    waitsTotal: waits.total,
    waitMsAvg: waits.total === 0 ? 0 : waits.sumMs / waits.total,
    waitMsP50: percentile(sorted, 0.5),
    waitMsP95: percentile(sorted, 0.95),
    waitMsMax: waits.maxMs,
    usage: all ? { ...pool.usage } : usage,
    holds: holds === undefined ? noHolds : holds.sort((a, b) => a.until - b.until)
  }
}
