/**
 * A view of a pools service under local names: a suite member calls its pools by the names
 * of its own configuration (`apis`), and the view maps each to the pool it actually uses (a
 * shared top-level pool such as `shared`, or the member's private `experiment:ID:apis`).
 *
 * The mapping applies wherever a pool is named: acquire by name or by `options.pool`, the
 * holder's default pool (the task's declared `resource`), `get`, `add` (publish), `revoke`,
 * `snapshot`, `stats` and the event filter of `subscribe` / `events`. Events and handles of
 * an aliased pool carry the local name back.
 *
 * The view is closed: a member reaches only its local names. Any other name (another
 * member's private pool, a top-level pool it does not bind, an actual name such as `shared`
 * under which it knows the pool as `apis`) fails with `PoolNotFound` listing the local names,
 * exactly as an unknown pool does; event streams carry only the member's pools.
 *
 * @internal
 */
import { Effect, Queue, Stream } from "effect"
import type { AcquireOptions } from "../../../domain/Lease.js"
import { PoolNotFound } from "../../../domain/Errors.js"
import type { EventFilter, ResourceEvent } from "../../../domain/PoolEvent.js"
import type { Holder, PoolsService } from "../../Pools.js"
import { appliesHooks, markAppliesHooks } from "../acquireHooks.js"

/**
 * The view of `pools` in which a member reaches exactly the keys of `aliases` (its local pool
 * names), each meaning the pool named by its value (possibly the same name).
 *
 * @param pools the run's pools
 * @param aliases local pool name -> actual pool name; the only names the view knows
 * @returns the closed view; a name outside `aliases` fails with `PoolNotFound` (known: the local names)
 * @internal
 */
export const aliased = (pools: PoolsService, aliases: Readonly<Record<string, string>>): PoolsService => {
  const entries = Object.entries(aliases)
  const locals = entries.map(([local]) => local)
  const forward = new Map(entries)
  const actuals = new Set(entries.map(([, actual]) => actual))
  // the local name an actual pool is shown under: only when exactly one local name maps to it
  const counts = new Map<string, number>()
  for (const [, actual] of entries) counts.set(actual, (counts.get(actual) ?? 0) + 1)
  const backward = new Map<string, string>()
  for (const [local, actual] of entries) if (counts.get(actual) === 1) backward.set(actual, local)

  const unknown = (name: string): PoolNotFound => new PoolNotFound({ pool: name, known: locals })
  /** The actual pool of a local name, or the error naming the local names. */
  const to = (name: string): Effect.Effect<string, PoolNotFound> => {
    const actual = forward.get(name)
    return actual === undefined ? Effect.fail(unknown(name)) : Effect.succeed(actual)
  }
  const localEvent = (event: ResourceEvent): ResourceEvent => {
    const local = backward.get(event.pool)
    return local === undefined || local === event.pool ? event : { ...event, pool: local }
  }
  const mine = (event: ResourceEvent): boolean => actuals.has(event.pool)
  /**
   * The acquire options and holder in actual names: the pool named by the call, else the
   * holder's default (the task's `resource`), else the member's only pool, as the service
   * does with its only pool.
   */
  const resolve = (
    o: AcquireOptions | string | undefined,
    h: Holder | undefined
  ): Effect.Effect<readonly [AcquireOptions, Holder | undefined], PoolNotFound> => {
    const opts: AcquireOptions = typeof o === "string" ? { pool: o } : o ?? {}
    const name = opts.pool ?? h?.defaultPool ?? (locals.length === 1 ? locals[0] : undefined)
    if (name === undefined) return Effect.fail(unknown("(none given)"))
    return Effect.map(to(name), (actual) =>
      [
        { ...opts, pool: actual },
        h === undefined || h.defaultPool === undefined ? h : { ...h, defaultPool: actual }
      ] as const)
  }
  /** The filter in actual names; `undefined` when it names no local pool (no event can match). */
  const filterOf = (f: EventFilter | undefined): EventFilter | undefined | null => {
    if (f === undefined || f.pool === undefined) return f
    const actual = forward.get(f.pool)
    return actual === undefined ? null : { ...f, pool: actual }
  }

  const view: PoolsService = {
    acquire: (o, h) => Effect.flatMap(resolve(o, h), ([opts, holder]) => pools.acquire(opts, holder)),
    acquireRaw: (o, h) => Effect.flatMap(resolve(o, h), ([opts, holder]) => pools.acquireRaw(opts, holder)),
    heldBy: pools.heldBy,
    releaseAll: pools.releaseAll,
    reclaim: pools.reclaim,
    get: (name) =>
      Effect.flatMap(to(name), (actual) =>
        Effect.map(pools.get(actual), (h) =>
          name === h.name ? h : {
            ...h,
            name,
            subscribe: (kinds) => Stream.map(h.subscribe(kinds), (e) => ({ ...e, pool: name }))
          })),
    names: Effect.succeed(locals),
    addPool: pools.addPool,
    add: (pool, resource) => Effect.flatMap(to(pool), (actual) => pools.add(actual, resource)),
    revoke: (pool, id, reason) => Effect.flatMap(to(pool), (actual) => pools.revoke(actual, id, reason)),
    snapshot: (pool) => Effect.flatMap(to(pool), (actual) => pools.snapshot(actual)),
    stats: (pool, selector) =>
      Effect.flatMap(to(pool), (actual) =>
        Effect.map(pools.stats(actual, selector), (s) => s.pool === pool ? s : { ...s, pool })),
    subscribe: (filter) => {
      const f = filterOf(filter)
      return f === null ? Stream.never : pools.subscribe(f).pipe(Stream.filter(mine), Stream.map(localEvent))
    },
    events: (filter) => {
      const f = filterOf(filter)
      return Effect.gen(function*() {
        // the same sliding bound as the service's own subscriptions, filtered and renamed on the way
        const out = yield* Effect.acquireRelease(Queue.sliding<ResourceEvent>(4096), Queue.shutdown)
        if (f !== null) {
          const source = yield* pools.events(f)
          yield* Effect.forkScoped(Effect.forever(Effect.flatMap(
            Queue.take(source),
            (e) => mine(e) ? Queue.offer(out, localEvent(e)) : Effect.void
          )))
        }
        return out as Queue.Dequeue<ResourceEvent>
      })
    },
    listen: (callback) => pools.listen((event) => mine(event) ? callback(localEvent(event)) : Effect.void),
    saveState: (pool) => Effect.flatMap(to(pool), (actual) => pools.saveState(actual)),
    restoreState: (pool, id, state) => Effect.flatMap(to(pool), (actual) => pools.restoreState(actual, id, state))
  }
  // the holder reaches `pools.acquire` with its hooks (a spread copies them): applied when `pools` applies them
  return appliesHooks(pools) ? markAppliesHooks(view) : view
}
