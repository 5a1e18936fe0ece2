/**
 * A view of a pools service under local names: a suite member calls its pools by the names
 * of its own configuration (`apis`), and the view maps each to the pool it actually uses (a
 * shared top-level pool such as `shared`, or the member's private `experiment:ID:apis`).
 *
 * The mapping applies wherever a pool is named: acquire by name or by `options.pool`, the
 * holder's default pool (the task's declared `resource`), `get`, `add` (publish), `revoke`,
 * `snapshot`, `stats` and the event filter of `subscribe` / `events`. Events and handles of
 * an aliased pool carry the local name back; names that are not aliased pass through.
 *
 * @internal
 */
import { Effect, Queue, Stream } from "effect"
import type { AcquireOptions } from "../../../domain/Lease.js"
import type { EventFilter, ResourceEvent } from "../../../domain/PoolEvent.js"
import type { Holder, PoolHandle, PoolsService } from "../../Pools.js"

/**
 * The view of `pools` in which every key of `aliases` (a local pool name) means the pool
 * named by its value. With no alias, `pools` itself is returned.
 *
 * @internal
 */
export const aliased = (pools: PoolsService, aliases: Readonly<Record<string, string>>): PoolsService => {
  const entries = Object.entries(aliases).filter(([local, actual]) => local !== actual)
  if (entries.length === 0) return pools
  const forward = new Map(entries)
  // the local name an actual pool is shown under: only when exactly one local name maps to it
  const counts = new Map<string, number>()
  for (const [, actual] of entries) counts.set(actual, (counts.get(actual) ?? 0) + 1)
  const backward = new Map<string, string>()
  for (const [local, actual] of entries) if (counts.get(actual) === 1) backward.set(actual, local)

  const to = (name: string): string => forward.get(name) ?? name
  const localEvent = (event: ResourceEvent): ResourceEvent => {
    const local = backward.get(event.pool)
    return local === undefined ? event : { ...event, pool: local }
  }
  const options = (o: AcquireOptions | string | undefined): AcquireOptions | string | undefined =>
    typeof o === "string" ? to(o) : o === undefined || o.pool === undefined ? o : { ...o, pool: to(o.pool) }
  // holders are made once per attempt: the mapped copy only when its default pool is aliased
  const holderOf = (h: Holder | undefined): Holder | undefined =>
    h === undefined || h.defaultPool === undefined || !forward.has(h.defaultPool)
      ? h
      : { ...h, defaultPool: to(h.defaultPool) }
  const filterOf = (f: EventFilter | undefined): EventFilter | undefined =>
    f === undefined || f.pool === undefined ? f : { ...f, pool: to(f.pool) }
  const handleOf = (local: string, h: PoolHandle): PoolHandle =>
    local === h.name ? h : {
      ...h,
      name: local,
      subscribe: (kinds) => Stream.map(h.subscribe(kinds), localEvent)
    }

  return {
    acquire: (o, h) => pools.acquire(options(o), holderOf(h)),
    acquireRaw: (o, h) => pools.acquireRaw(options(o), holderOf(h)),
    heldBy: pools.heldBy,
    releaseAll: pools.releaseAll,
    reclaim: pools.reclaim,
    get: (name) => Effect.map(pools.get(to(name)), (h) => handleOf(name, h)),
    names: pools.names,
    addPool: pools.addPool,
    add: (pool, resource) => pools.add(to(pool), resource),
    revoke: (pool, id, reason) => pools.revoke(to(pool), id, reason),
    snapshot: (pool) => pools.snapshot(to(pool)),
    stats: (pool, selector) =>
      Effect.map(pools.stats(to(pool), selector), (s) => backward.get(s.pool) === pool ? { ...s, pool } : s),
    subscribe: (filter) => Stream.map(pools.subscribe(filterOf(filter)), localEvent),
    events: (filter) =>
      Effect.flatMap(pools.events(filterOf(filter)), (source) =>
        backward.size === 0 ? Effect.succeed(source) : Effect.gen(function*() {
          // the same sliding bound as the service's own subscriptions, renamed on the way
          const out = yield* Effect.acquireRelease(Queue.sliding<ResourceEvent>(4096), Queue.shutdown)
          yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(source), (e) => Queue.offer(out, localEvent(e)))))
          return out as Queue.Dequeue<ResourceEvent>
        })),
    listen: (callback) => pools.listen((event) => callback(localEvent(event)))
  }
}
