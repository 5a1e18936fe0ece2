import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Deferred, Duration, Effect, Exit, Fiber, FastCheck as fc, Layer, Ref, Redacted, Scope, TestClock, TestContext } from "effect"
import { describe, expect, it } from "vitest"
import type { AcquireOptions, Lease } from "../../src/domain/Lease.js"
import * as Resource from "../../src/domain/Resource.js"
import * as PgPools from "../../src/layers/PgPools.js"
import * as PgLeases from "../../src/services/internal/pool/pg/pools.js"
import * as Q from "../../src/services/internal/pool/pg/sql.js"
import * as Pool from "../../src/services/Pool.js"
import type { PoolsService } from "../../src/services/Pools.js"
import { breakable, eventually, holdingClaims } from "../support/breakableSql.js"
import { usePostgres } from "../support/postgres.js"

// Real Postgres time (`now()`) decides TTLs here, so these tests run on the live clock with
// short TTLs and bounded loops; no assertion depends on how long anything took.

const pg = usePostgres()
let dbSeq = 0

/** A fresh database with the pool tables; returns its URL. */
const freshDb = async (): Promise<string> => {
  const name = `pools_${++dbSeq}`
  await pg.createDatabase(name)
  await Effect.runPromise(Effect.scoped(Effect.provide(PgPools.migrate, clientLayer(pg.url(name)))))
  return pg.url(name)
}

const clientLayer = (url: string) =>
  PgClient.layer({ url: Redacted.make(url), maxConnections: 4 }).pipe(Layer.provide(Reactivity.layer))

/** An independent client (its own connection pool), for the enclosing scope. */
const client = (url: string): Effect.Effect<SqlClient.SqlClient, never, Scope.Scope> =>
  Effect.orDie(Effect.provide(PgClient.make({ url: Redacted.make(url), maxConnections: 4 }), Reactivity.layer))

const service = (
  sql: SqlClient.SqlClient,
  pools: ReadonlyArray<Pool.PoolConfig>,
  options: PgPools.PgPoolsOptions = {}
): Effect.Effect<PoolsService, never, Scope.Scope> =>
  Effect.orDie(Effect.provideService(PgPools.make(pools, { leaseTtl: "3 seconds", renewEvery: "300 millis", pollMin: "5 millis", pollMax: "50 millis", ...options }), SqlClient.SqlClient, sql))

const liveSlots = (sql: SqlClient.SqlClient, pool: string) =>
  Effect.orDie(Effect.map(
    sql<{ n: number }>`SELECT count(*)::int AS n FROM assay_pool_slot WHERE pool = ${pool} AND holder IS NOT NULL AND expires_at > now()`,
    (rows) => Number(rows[0]!.n)
  ))

const run = <A, E>(eff: Effect.Effect<A, E, Scope.Scope>): Promise<A> => Effect.runPromise(Effect.scoped(eff))

const one = (capacity: number, name = "llm", extra: Partial<Resource.ResourceOptions<any>> = {}) =>
  Pool.make(name, [Resource.make("llm", { id: "key-a", capacity, ...extra })])

/** Slot 1 of pool `llm` as the database holds it: its lease id and expiry (text; null when free). */
const slotOne = (sql: SqlClient.SqlClient) =>
  Effect.orDie(Effect.map(
    sql<{ lease_id: string | null; expires_at: string | null }>`SELECT lease_id::text AS lease_id, expires_at::text AS expires_at FROM assay_pool_slot WHERE pool = 'llm' AND slot = 1`,
    (rows) => rows[0]!
  ))

/**
 * Runs `body` with a fresh database's client, scoped, on the test clock: the local deadlines
 * move with `TestClock`, the database's expiries with its own clock.
 */
const onTestClock = async <E>(body: (sql: SqlClient.SqlClient) => Effect.Effect<void, E, Scope.Scope>): Promise<void> => {
  const url = await freshDb()
  await Effect.runPromise(Effect.scoped(Effect.flatMap(client(url), body)).pipe(Effect.provide(TestContext.TestContext)))
}

describe("PgPools: capacity across processes", () => {
  it("20 concurrent acquirers over 3 clients vs capacity 4: exactly 4 hold", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const services = yield* Effect.forEach([1, 2, 3], (i) =>
        Effect.flatMap(client(url), (sql) => service(sql, [one(4)], { runnerId: `r${i}` })))
      const holders = yield* Scope.make()
      const results = yield* Effect.forEach(
        Array.from({ length: 20 }, (_, i) => i),
        (i) => Effect.either(Scope.extend(services[i % 3]!.acquire({ pool: "llm", algorithm: "immediate" }), holders)),
        { concurrency: "unbounded" }
      )
      expect(results.filter((r) => r._tag === "Right")).toHaveLength(4)
      for (const r of results) if (r._tag === "Left") expect(r.left._tag).toBe("ResourceUnavailable")
      const sql = yield* client(url)
      expect(yield* liveSlots(sql, "llm")).toBe(4)
      // a completed scope gives the slots back (written together, at most `releaseDelay` later)
      yield* Scope.close(holders, Exit.void)
      expect(yield* eventually(Effect.map(liveSlots(sql, "llm"), (n) => n === 0))).toBe(true)
    }))
  }, 60_000)

  it("waiting acquirers are served as slots come back, never above capacity", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const services = yield* Effect.forEach([1, 2, 3], (i) =>
        Effect.flatMap(client(url), (sql) => service(sql, [one(2)], { runnerId: `r${i}` })))
      const inFlight = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      yield* Effect.forEach(Array.from({ length: 12 }, (_, i) => i), (i) =>
        Effect.scoped(Effect.gen(function*() {
          yield* services[i % 3]!.acquire({ pool: "llm", timeout: "30 seconds" })
          const n = yield* Ref.updateAndGet(inFlight, (x) => x + 1)
          yield* Ref.update(peak, (p) => Math.max(p, n))
          yield* Effect.sleep(Duration.millis(20))
          yield* Ref.update(inFlight, (x) => x - 1)
        })), { concurrency: "unbounded", discard: true })
      expect(yield* Ref.get(peak)).toBeLessThanOrEqual(2)
      expect(yield* Ref.get(peak)).toBe(2)
    }))
  }, 60_000)

  it("property: random acquire/release/abandon over 3 clients never exceeds capacity (sampled in the database and at the work)", async () => {
    const url = await freshDb()
    let round = 0
    const stepArb = fc.record({
      kind: fc.constantFrom("scoped", "raw", "abandon", "fail"),
      holdMs: fc.integer({ min: 0, max: 30 }),
      client: fc.integer({ min: 0, max: 2 }),
      algorithm: fc.constantFrom("wait", "leastBusy", "sticky", "quotaAware", "backoff")
    })
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 3 }), fc.array(stepArb, { minLength: 6, maxLength: 24 }), async (capacity, steps) => {
        const name = `p${++round}`
        await run(Effect.gen(function*() {
          const services = yield* Effect.forEach([0, 1, 2], (i) =>
            Effect.flatMap(client(url), (sql) =>
              service(sql, [Pool.make(name, [Resource.make("llm", { id: "k", capacity: 3 })])], {
                runnerId: `r${i}`,
                leaseTtl: "1 second",
                renewEvery: "100 millis"
              })))
          // the global capacity is lower than what each process declared locally
          const admin = yield* client(url)
          yield* Effect.orDie(Effect.provideService(PgPools.resize(name, "k", capacity), SqlClient.SqlClient, admin))
          const inFlight = yield* Ref.make(0)
          const peakWork = yield* Ref.make(0)
          const peakDb = yield* Ref.make(0)
          const sampler = yield* Effect.fork(Effect.forever(Effect.zipRight(
            Effect.flatMap(liveSlots(admin, name), (n) => Ref.update(peakDb, (p) => Math.max(p, n))),
            Effect.sleep(Duration.millis(5))
          )))
          const work = (lease: Lease<any>, holdMs: number) =>
            Effect.ensuring(
              Effect.zipRight(
                Effect.flatMap(Ref.updateAndGet(inFlight, (x) => x + 1), (n) => Ref.update(peakWork, (p) => Math.max(p, n))),
                Effect.sleep(Duration.millis(holdMs))
              ),
              Ref.update(inFlight, (x) => x - 1)
            ).pipe(PgPools.guard(lease))
          yield* Effect.forEach(steps, (s, i): Effect.Effect<void, unknown> => {
            const pools = services[s.client]!
            const holder = { taskName: "t", pipelineId: `p${i}` }
            const options: AcquireOptions = { pool: name, algorithm: s.algorithm, timeout: "20 seconds" }
            switch (s.kind) {
              case "scoped":
                return Effect.scoped(Effect.flatMap(pools.acquire(options, holder), (l) => work(l, s.holdMs)))
              case "raw":
                return Effect.flatMap(pools.acquireRaw(options, holder), (l) =>
                  Effect.zipRight(work(l, s.holdMs), l.releaseNow))
              case "fail":
                // a completed call that failed: reported, then released early
                return Effect.ignore(Effect.scoped(Effect.flatMap(pools.acquire(options, holder), (l) =>
                  Effect.zipRight(
                    Effect.zipRight(work(l, s.holdMs), l.report({ ok: false, error: { status: 500 } })),
                    Effect.fail("boom")
                  ))))
              case "abandon":
                // interrupted mid-call: the outcome is unknown, the slot stays until its TTL
                return Effect.flatMap(
                  Effect.fork(Effect.scoped(Effect.flatMap(pools.acquire(options, holder), (l) =>
                    Effect.zipRight(work(l, 1_000), Effect.never)))),
                  (f) => Effect.zipRight(Effect.sleep(Duration.millis(s.holdMs + 5)), Fiber.interrupt(f))
                )
              default:
                return Effect.void
            }
          }, { concurrency: "unbounded", discard: true })
          yield* Fiber.interrupt(sampler)
          expect(yield* Ref.get(peakWork)).toBeLessThanOrEqual(capacity)
          expect(yield* Ref.get(peakDb)).toBeLessThanOrEqual(capacity)
        }))
      }),
      { numRuns: 6, endOnFailure: true }
    )
  }, 180_000)

  it("an abandoned holder keeps its slot no longer than one TTL, then another runner gets it", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const a = yield* service(yield* client(url), [one(1)], { runnerId: "a", leaseTtl: "1 second", renewEvery: "100 millis" })
      const b = yield* service(yield* client(url), [one(1)], { runnerId: "b", leaseTtl: "1 second", renewEvery: "100 millis" })
      const got = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(Effect.scoped(Effect.zipRight(a.acquire("llm"), Effect.zipRight(Deferred.succeed(got, undefined), Effect.never))))
      yield* Deferred.await(got)
      yield* Fiber.interrupt(holder)
      const sql = yield* client(url)
      // the slot is still held (unknown outcome) and its expiry is at most one TTL away
      const rows = yield* Effect.orDie(sql<{ held: boolean; within: boolean }>`SELECT holder IS NOT NULL AND expires_at > now() AS held,
          expires_at <= now() + interval '1 second' AS within FROM assay_pool_slot WHERE pool = 'llm' AND slot = 1`)
      expect(rows[0]).toEqual({ held: true, within: true })
      const refused = yield* Effect.either(Effect.scoped(b.acquire({ pool: "llm", algorithm: "immediate" })))
      expect(refused._tag).toBe("Left")
      // no renewal keeps it: it frees by expiry and the waiting runner is served
      const lease = yield* Effect.scoped(Effect.map(b.acquire({ pool: "llm", timeout: "20 seconds" }), (l) => l.resource.id))
      expect(lease).toBe("key-a")
    }))
  }, 60_000)

  it("lowering the capacity (resize) and a dead resource are obeyed by every runner", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const cfg = [Pool.make("llm", [
        Resource.make("llm", { id: "x", capacity: 4, degradeAfter: 1, deadAfter: 1 }),
        Resource.make("llm", { id: "y", capacity: 4 })
      ])]
      const a = yield* service(yield* client(url), cfg, { runnerId: "a" })
      const b = yield* service(yield* client(url), cfg, { runnerId: "b" })
      const sql = yield* client(url)
      yield* Effect.orDie(Effect.provideService(PgPools.resize("llm", "y", 1), SqlClient.SqlClient, sql))
      // x dies on runner a (one failure), b must never get x again
      yield* Effect.scoped(Effect.flatMap(a.acquire({ pool: "llm", id: "x" }), (l) => l.report({ ok: false, error: "broken" })))
      const state = yield* Effect.orDie(Effect.provideService(PgPools.globalState(["llm"]), SqlClient.SqlClient, sql))
      expect(state.find((r) => r.resource === "x")?.state).toBe("dead")
      const holders = yield* Scope.make()
      const results = yield* Effect.forEach(Array.from({ length: 10 }, (_, i) => i), (i) =>
        Effect.either(Scope.extend((i % 2 === 0 ? a : b).acquire({ pool: "llm", algorithm: "immediate" }), holders)), { concurrency: "unbounded" })
      const won = results.flatMap((r) => r._tag === "Right" ? [r.right.resource.id] : [])
      expect(won).toEqual(["y"])
      yield* Scope.close(holders, Exit.void)
      // only x matches and x is dead globally: the acquire fails instead of hanging
      const hopeless = yield* Effect.either(Effect.scoped(b.acquire({ pool: "llm", id: "x", timeout: "20 seconds" })))
      expect(hopeless._tag === "Left" && hopeless.left._tag).toBe("ResourceUnavailable")
    }))
  }, 60_000)

  it("one resource dead here, the other live but full: an acquire waits for the live one (no ResourceUnavailable); all dead still fails", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const cfg = [Pool.make("llm", [
        Resource.make("llm", { id: "x", capacity: 1, degradeAfter: 1, deadAfter: 1 }),
        Resource.make("llm", { id: "y", capacity: 1, degradeAfter: 1, deadAfter: 1 })
      ])]
      const a = yield* service(yield* client(url), cfg, { runnerId: "a" })
      const b = yield* service(yield* client(url), cfg, { runnerId: "b" })
      const sql = yield* client(url)
      // x dies on runner a; another runner's success has since marked it ready in the shared row,
      // so a's view offers x (free globally) while y is held by b
      yield* Effect.scoped(Effect.flatMap(a.acquire({ pool: "llm", id: "x" }), (l) => l.report({ ok: false, error: "broken" })))
      yield* Effect.orDie(Q.setState(sql, "llm", "x", "ready"))
      const held = yield* Scope.make()
      const onY = yield* Scope.extend(b.acquire({ pool: "llm", id: "y" }), held)
      expect(onY.resource.id).toBe("y")
      const waiter = yield* Effect.fork(Effect.either(Effect.scoped(Effect.map(a.acquire({ pool: "llm", timeout: "20 seconds" }), (l) => l.resource.id))))
      yield* Effect.sleep("300 millis")
      yield* Scope.close(held, Exit.void)
      const got = yield* Fiber.join(waiter)
      expect(got._tag === "Right" && got.right).toBe("y")
      // y dies too on runner a: every resource is dead, the typed error comes
      yield* Effect.scoped(Effect.flatMap(a.acquire({ pool: "llm", id: "y" }), (l) => l.report({ ok: false, error: "broken" })))
      const hopeless = yield* Effect.either(Effect.scoped(a.acquire({ pool: "llm", timeout: "20 seconds" })))
      expect(hopeless._tag === "Left" && hopeless.left._tag).toBe("ResourceUnavailable")
    }))
  }, 60_000)
})

/**
 * The client, recording the text of every statement sent through it (tagged templates and
 * `unsafe`), to count statements of a kind.
 */
const recording = (sql: SqlClient.SqlClient) => {
  const texts: Array<string> = []
  const proxy = new Proxy(sql, {
    apply: (target, self, args) => {
      const strings = args[0] as unknown
      if (Array.isArray(strings) && "raw" in strings) texts.push(strings.join("?"))
      return Reflect.apply(target as any, self, args)
    },
    get: (target, key, receiver) => {
      const value = Reflect.get(target, key, receiver)
      return key === "unsafe"
        ? (text: string, params?: ReadonlyArray<unknown>) => {
          texts.push(text)
          return (value as SqlClient.SqlClient["unsafe"]).call(target, text, params)
        }
        : value
    }
  })
  return { sql: proxy as SqlClient.SqlClient, texts }
}

/** How many of the recorded statements gave slots back (`UPDATE … FROM unnest(…)`). */
const releases = (texts: ReadonlyArray<string>) => texts.filter((t) => /SET holder = NULL/.test(t)).length

describe("PgPools: batched releases", () => {
  it("slots given back together are written in one statement; until then they stay held, and no other runner gets them", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const rec = recording(yield* client(url))
      const services = yield* Scope.make()
      const a = yield* Scope.extend(service(rec.sql, [one(3)], { runnerId: "a", releaseDelay: "1 hour" }), services)
      const b = yield* service(yield* client(url), [one(3)], { runnerId: "b" })
      const admin = yield* client(url)
      const holders = yield* Scope.make()
      for (let i = 0; i < 3; i++) yield* Scope.extend(a.acquire({ pool: "llm", algorithm: "immediate" }), holders)
      yield* Scope.close(holders, Exit.void)
      // given back, not written yet: still held in the database, so another runner is refused
      expect(yield* liveSlots(admin, "llm")).toBe(3)
      expect(releases(rec.texts)).toBe(0)
      const refused = yield* Effect.either(Effect.scoped(b.acquire({ pool: "llm", algorithm: "immediate" })))
      expect(refused._tag === "Left" && refused.left._tag).toBe("ResourceUnavailable")
      // the service's scope writes the queue when it closes: one statement for the three
      yield* Scope.close(services, Exit.void)
      expect(releases(rec.texts)).toBe(1)
      expect(yield* liveSlots(admin, "llm")).toBe(0)
      const served = yield* Effect.scoped(Effect.map(b.acquire({ pool: "llm", algorithm: "immediate" }), (l) => l.resource.id))
      expect(served).toBe("key-a")
    }))
  }, 60_000)

  it("a queued slot is taken over by the next acquire of the same runner in its claim statement (no release statement)", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const rec = recording(yield* client(url))
      const a = yield* service(rec.sql, [one(1)], { runnerId: "a", releaseDelay: "1 hour" })
      const admin = yield* client(url)
      const ids: Array<string> = []
      for (let i = 0; i < 4; i++) {
        // capacity 1, the previous lease's slot still held (queued): the claim hands it over
        yield* Effect.scoped(Effect.flatMap(a.acquire({ pool: "llm", algorithm: "immediate" }), (l) =>
          Effect.zipRight(Effect.sync(() => ids.push(PgLeases.slotFence(l)!.leaseId)), Effect.flatMap(liveSlots(admin, "llm"), (n) => Effect.sync(() => expect(n).toBe(1))))))
      }
      expect(new Set(ids).size).toBe(4)
      expect(releases(rec.texts)).toBe(0)
      // the last one is written after the delay or at the close; meanwhile the slot is held by the last lease only
      const row = yield* slotOne(admin)
      expect(row.lease_id).toBe(ids[3])
    }))
  }, 60_000)

  it("without a close, the queue is written within the release delay", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const rec = recording(yield* client(url))
      const a = yield* service(rec.sql, [one(2)], { runnerId: "a", releaseDelay: "30 millis" })
      const admin = yield* client(url)
      yield* Effect.scoped(Effect.zip(a.acquire({ pool: "llm", algorithm: "immediate" }), a.acquire({ pool: "llm", algorithm: "immediate" })))
      expect(yield* eventually(Effect.map(liveSlots(admin, "llm"), (n) => n === 0))).toBe(true)
      expect(releases(rec.texts)).toBe(1)
    }))
  }, 60_000)
})

describe("PgPools: shutdown", () => {
  it("closing the service while leases are still held stops their renewals and ends", async () => {
    const url = await freshDb()
    const exit = await Effect.runPromiseExit(Effect.scoped(Effect.gen(function*() {
      const pools = yield* service(yield* client(url), [one(2)], { runnerId: "a", renewEvery: "50 millis" })
      const never = yield* Scope.make() // never closed: the leases outlive the service
      yield* Scope.extend(pools.acquire("llm"), never)
      yield* pools.acquireRaw("llm")
      yield* Effect.sleep(Duration.millis(120))
    })))
    expect(exit._tag).toBe("Success")
  }, 60_000)
})

describe("PgPools: algorithms see the global state", () => {
  it("leastBusy ranks by every runner's leases; failover skips a pool full elsewhere", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const cfg = [
        Pool.make("llm", [Resource.make("llm", { id: "x", capacity: 4 }), Resource.make("llm", { id: "y", capacity: 4 })]),
        Pool.make("primary", [Resource.make("llm", { id: "p", capacity: 1 })]),
        Pool.make("backup", [Resource.make("llm", { id: "b", capacity: 1 })])
      ]
      const a = yield* service(yield* client(url), cfg, { runnerId: "a" })
      const b = yield* service(yield* client(url), cfg, { runnerId: "b" })
      const held = yield* Scope.make()
      // runner a holds 2 of x's 4 slots and primary's only slot
      for (const _ of [1, 2]) yield* Scope.extend(a.acquire({ pool: "llm", id: "x" }), held)
      yield* Scope.extend(a.acquire("primary"), held)
      // runner b holds nothing itself: a local ranking would take x (first in pool order)
      const picked = yield* Effect.scoped(Effect.map(b.acquire({ pool: "llm", algorithm: "leastBusy" }), (l) => l.resource.id))
      expect(picked).toBe("y")
      const failover = yield* Effect.scoped(Effect.map(
        b.acquire({ pool: "primary", algorithm: { name: "failover", pools: ["primary", "backup"] } }),
        (l) => `${l.pool}/${l.resource.id}`
      ))
      expect(failover).toBe("backup/b")
      yield* Scope.close(held, Exit.void)
    }))
  }, 60_000)
})

describe("PgPools: shared state", () => {
  it("a throttle (429 with Retry-After) reported on one runner is seen by another", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const a = yield* service(yield* client(url), [one(4)], { runnerId: "a" })
      const b = yield* service(yield* client(url), [one(4)], { runnerId: "b" })
      yield* Effect.scoped(Effect.flatMap(a.acquire("llm"), (l) => l.report({ ok: false, error: { status: 429, retryAfterMs: 60_000 } })))
      const r = yield* Effect.either(Effect.scoped(b.acquire({ pool: "llm", algorithm: "immediate" })))
      expect(r._tag === "Left" && r.left._tag).toBe("ResourceUnavailable")
      const sql = yield* client(url)
      const state = yield* Effect.orDie(Effect.provideService(PgPools.globalState(["llm"]), SqlClient.SqlClient, sql))
      expect(state[0]!.throttleMs).toBeGreaterThan(0)
    }))
  }, 60_000)

  it("quota: 20 concurrent charges over 3 clients vs a limit of 5: exactly 5 pass", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const clients = yield* Effect.forEach([0, 1, 2], () => client(url))
      const key = { pool: "llm", resource: "key-a", metric: "requests" }
      const results = yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => i), (i) =>
        Effect.orDie(Effect.provideService(PgPools.charge(key, 1, 5, "1 hour"), SqlClient.SqlClient, clients[i % 3]!)), { concurrency: "unbounded" })
      expect(results.filter((r) => r !== undefined)).toHaveLength(5)
    }))
  }, 60_000)

  it("quota rules gate acquires across runners; tokens are charged by estimate and corrected by the report", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const quotas: ReadonlyArray<PgPools.QuotaOptions> = [
        { pool: "llm", metric: "requests", limit: 3, window: "1 hour" },
        { pool: "llm", metric: "tokens", limit: 1_000_000, window: "1 hour", estimate: 100 }
      ]
      const a = yield* service(yield* client(url), [one(4)], { runnerId: "a", quotas })
      const b = yield* service(yield* client(url), [one(4)], { runnerId: "b", quotas })
      const outcomes = yield* Effect.forEach(Array.from({ length: 8 }, (_, i) => i), (i) =>
        Effect.either(Effect.scoped(Effect.flatMap((i % 2 === 0 ? a : b).acquire({ pool: "llm", algorithm: "immediate" }), (l) =>
          l.report({ ok: true, usage: { tokens: 40 } })))))
      expect(outcomes.filter((o) => o._tag === "Right")).toHaveLength(3)
      const sql = yield* client(url)
      const rows = yield* Effect.orDie(sql<{ metric: string; used: number }>`SELECT metric, used FROM assay_pool_quota ORDER BY metric`)
      expect(rows.map((r) => [r.metric, Number(r.used)])).toEqual([["requests", 3], ["tokens", 120]])
    }))
  }, 60_000)

  it("a resource's own quota windows (its config) gate acquires across runners, and win over the options' rule for their metric", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      // the options allow 100 requests; the resource declares 3: the resource's rule applies
      const quotas: ReadonlyArray<PgPools.QuotaOptions> = [{ pool: "llm", metric: "requests", limit: 100, window: "1 hour" }]
      const cfg = [one(4, "llm", { quotas: [{ limit: 3, window: "1 hour" }] })]
      const a = yield* service(yield* client(url), cfg, { runnerId: "a", quotas })
      const b = yield* service(yield* client(url), cfg, { runnerId: "b", quotas })
      const outcomes = yield* Effect.forEach(Array.from({ length: 8 }, (_, i) => i), (i) =>
        Effect.either(Effect.scoped((i % 2 === 0 ? a : b).acquire({ pool: "llm", algorithm: "immediate" }))))
      expect(outcomes.filter((o) => o._tag === "Right")).toHaveLength(3)
      const sql = yield* client(url)
      const rows = yield* Effect.orDie(sql<{ metric: string; used: number }>`SELECT metric, used FROM assay_pool_quota`)
      expect(rows.map((r) => [r.metric, Number(r.used)])).toEqual([["requests", 3]])
    }))
  }, 60_000)

  it("a call sent after its grant's window ended is counted in the window it goes out in (confirmQuota), never over the limit", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      // windows of 2 s, at most 2 requests each, guard 200 ms
      const cfg = [one(4, "llm", { quotas: [{ limit: 2, window: "2 seconds" }] })]
      const a = yield* service(yield* client(url), cfg, { runnerId: "a", quotaGuard: "200 millis" })
      const b = yield* service(yield* client(url), cfg, { runnerId: "b", quotaGuard: "200 millis" })
      const sql = yield* client(url)
      const windowNow = Effect.orDie(Effect.map(
        sql<{ w: string; left: number }>`SELECT date_bin('2 seconds', now(), timestamptz '2000-01-01 00:00:00+00')::text AS w,
          (extract(epoch FROM (date_bin('2 seconds', now(), timestamptz '2000-01-01 00:00:00+00') + interval '2 seconds' - now())) * 1000)::float8 AS left`,
        (rows) => ({ w: rows[0]!.w, left: Number(rows[0]!.left) })
      ))
      // waits for the start of a window after `w` (with most of it left, so that the steps
      // below happen at its start however slow the machine)
      const nextWindow = (w: string) =>
        Effect.gen(function*() {
          while (true) {
            const now = yield* windowNow
            if (now.w !== w && now.left > 1_500) return now.w
            yield* Effect.sleep(Duration.millis(Math.max(10, now.w === w ? now.left : now.left + 10)))
          }
        })
      const ledger = Effect.orDie(Effect.map(
        sql<{ w: string; used: number }>`SELECT window_start::text AS w, used FROM assay_pool_quota ORDER BY window_start`,
        (rows) => rows.map((r) => [r.w, Number(r.used)] as const)
      ))
      const w0 = yield* nextWindow("")
      const l1 = yield* a.acquireRaw({ pool: "llm", algorithm: "immediate" })
      // the grant's window ends before the call: the charge moves to the call's window
      const w1 = yield* nextWindow(w0)
      yield* PgPools.confirmQuota(l1)
      expect(yield* ledger).toEqual([[w0, 0], [w1, 1]])
      // a fresh charge costs nothing more and stays
      yield* PgPools.confirmQuota(l1)
      const l2 = yield* b.acquireRaw({ pool: "llm", algorithm: "immediate" })
      expect(yield* ledger).toEqual([[w0, 0], [w1, 2]])
      // l2 waits past its window; the next one is spent by other grants: it waits for the one after
      const w2 = yield* nextWindow(w1)
      yield* a.acquireRaw({ pool: "llm", algorithm: "immediate" })
      yield* a.acquireRaw({ pool: "llm", algorithm: "immediate" })
      yield* PgPools.confirmQuota(l2)
      const after = yield* ledger
      expect(after.slice(0, 3)).toEqual([[w0, 0], [w1, 1], [w2, 2]])
      expect(after.slice(3).map(([, n]) => n)).toEqual([1])
      expect(after[3]![0] > w2).toBe(true)
    }))
  }, 60_000)

  it("resize answers whether the resource exists, and writes nothing for one that does not", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      yield* service(yield* client(url), [one(2)], { runnerId: "a" })
      const sql = yield* client(url)
      const resize = (resource: string, n: number) => Effect.orDie(Effect.provideService(PgPools.resize("llm", resource, n), SqlClient.SqlClient, sql))
      expect(yield* resize("key-a", 5)).toBe(true)
      expect(yield* resize("nope", 3)).toBe(false)
      const slots = yield* Effect.orDie(sql<{ resource: string; n: number }>`SELECT resource, count(*)::int AS n FROM assay_pool_slot GROUP BY resource`)
      expect(slots.map((r) => [r.resource, Number(r.n)])).toEqual([["key-a", 5]])
      const state = yield* Effect.orDie(Effect.provideService(PgPools.globalState(["llm"]), SqlClient.SqlClient, sql))
      expect(state.map((r) => [r.resource, r.capacity])).toEqual([["key-a", 5]])
    }))
  }, 60_000)

  it("a Postgres restart (fast) mid-hold never lets more than the capacity work at once", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const services = yield* Effect.forEach([0, 1, 2], (i) =>
        Effect.flatMap(client(url), (sql) => service(sql, [one(2)], { runnerId: `r${i}`, leaseTtl: "6 seconds", renewEvery: "200 millis" })))
      const inFlight = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      const lost = yield* Ref.make(0)
      const done = yield* Ref.make(0)
      const held = yield* Deferred.make<void>()
      const heldCount = yield* Ref.make(0)
      const task = (i: number, holdMs: number) =>
        Effect.scoped(Effect.flatMap(services[i % 3]!.acquire({ pool: "llm", timeout: "60 seconds" }), (lease) =>
          Effect.gen(function*() {
            const n = yield* Ref.updateAndGet(inFlight, (x) => x + 1)
            yield* Ref.update(peak, (p) => Math.max(p, n))
            if ((yield* Ref.updateAndGet(heldCount, (x) => x + 1)) === 2) yield* Deferred.succeed(held, undefined)
            yield* Effect.sleep(Duration.millis(holdMs))
            yield* Ref.update(inFlight, (x) => x - 1)
            yield* Ref.update(done, (x) => x + 1)
          }).pipe(PgPools.guard(lease), Effect.catchTag("LeaseLost", () => Effect.zipRight(Ref.update(inFlight, (x) => x - 1), Ref.update(lost, (x) => x + 1))))))
      const first = yield* Effect.fork(Effect.all([task(0, 2_500), task(1, 2_500)], { concurrency: "unbounded" }))
      yield* Deferred.await(held)
      const others = yield* Effect.fork(Effect.forEach([2, 3, 4, 5], (i) => task(i, 50), { concurrency: "unbounded" }))
      yield* Effect.promise(() => pg.restart("fast"))
      yield* Fiber.join(first)
      yield* Fiber.join(others)
      expect(yield* Ref.get(peak)).toBeLessThanOrEqual(2)
      // every task ended: done, or told its lease was lost (then retried by its policy)
      expect((yield* Ref.get(done)) + (yield* Ref.get(lost))).toBe(6)
    }))
  }, 120_000)
})

describe("PgPools: lease renewal (L3), on the test clock", () => {
  it("a renewal error is not a loss; the lease is lost only at the local deadline, and its slot is then kept until it expires", async () => {
    await onTestClock((real) => Effect.gen(function*() {
      const { sql, state } = breakable(real)
      // TTL 60 s on both clocks: the database keeps the row for the whole test; the local
      // deadline is driven by the TestClock alone
      const pools = yield* service(sql, [one(1)], { runnerId: "a", leaseTtl: "60 seconds", renewEvery: "10 seconds" })
      const lease = yield* pools.acquireRaw("llm")
      const leaseRow = slotOne(real)
      const first = yield* leaseRow
      const guarded = yield* Effect.fork(Effect.either(PgPools.guard(lease)(Effect.never)))
      // renewals fail for 40 s (4 renewals, at 10 s .. 40 s): still ours
      state.broken = true
      for (let i = 0; i < 4; i++) {
        yield* TestClock.adjust("10 seconds")
        yield* eventually(Effect.succeed(false), 5)
      }
      expect(yield* PgPools.isLost(lease)).toBe(false)
      // the database is back: the next renewal succeeds and moves the deadline
      state.broken = false
      yield* TestClock.adjust("10 seconds")
      expect(yield* eventually(Effect.map(leaseRow, (r) => r.expires_at !== first.expires_at))).toBe(true)
      expect(yield* PgPools.isLost(lease)).toBe(false)
      // broken again until past the new deadline (counted from before that renewal was sent)
      state.broken = true
      for (let i = 0; i < 7; i++) {
        yield* TestClock.adjust("10 seconds")
        yield* eventually(Effect.succeed(false), 5)
      }
      expect(yield* PgPools.isLost(lease)).toBe(true)
      const outcome = yield* Fiber.join(guarded)
      expect(outcome._tag === "Left" && outcome.left._tag === "LeaseLost" && outcome.left.reason).toBe("deadline")
      // unknown outcome: even once the database is back, the slot is not given back early
      state.broken = false
      yield* lease.releaseNow
      expect((yield* leaseRow).lease_id).toBe(first.lease_id)
    }))
  }, 60_000)

  it("a renewal error before the deadline is asked again soon, not left until the deadline: the lease is kept", async () => {
    const url = await freshDb()
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const real = yield* client(url)
      const { sql, state } = breakable(real)
      // TTL 30 s (local deadline 28.5 s after the grant: margin 1.5 s), renewals every 10 s;
      // the database keeps the row for the whole test (its clock barely moves)
      const pools = yield* service(sql, [one(1)], { runnerId: "a", leaseTtl: "30 seconds", renewEvery: "10 seconds" })
      const lease = yield* pools.acquireRaw("llm")
      const expires = Effect.orDie(Effect.map(
        real<{ expires_at: string }>`SELECT expires_at::text AS expires_at FROM assay_pool_slot WHERE pool = 'llm' AND slot = 1`,
        (rows) => rows[0]!.expires_at
      ))
      const first = yield* expires
      // the renewal at 10 s and its retries until 20 s fail (the database restarting); the
      // clock moves in small steps so that each retry runs at its own time
      state.broken = true
      for (let i = 0; i < 80; i++) {
        yield* TestClock.adjust("250 millis")
        yield* eventually(Effect.succeed(false), 5)
      }
      // back at 20 s: the renewal is asked again within the longest backoff (renewEvery / 4 =
      // 2.5 s), well before the deadline (28.5 s)
      state.broken = false
      let renewed = false
      for (let i = 0; i < 10 && !renewed; i++) {
        yield* TestClock.adjust("250 millis")
        renewed = yield* eventually(Effect.map(expires, (e) => e !== first), 50)
      }
      if (!renewed) renewed = yield* eventually(Effect.map(expires, (e) => e !== first))
      expect(renewed).toBe(true)
      // past the first deadline (28.5 s): still held
      yield* TestClock.adjust("9 seconds")
      yield* eventually(Effect.succeed(false), 5)
      expect(yield* PgPools.isLost(lease)).toBe(false)
      yield* lease.releaseNow
    })).pipe(Effect.provide(TestContext.TestContext)))
  }, 60_000)

  it("a lease ending past its local deadline before its renewal ran (a frozen process) is lost: lease.lost, its slot not given back", async () => {
    await onTestClock((sql) => Effect.gen(function*() {
      const pools = yield* service(sql, [one(1)], { runnerId: "a", leaseTtl: "30 seconds", renewEvery: "10 seconds" })
      const events: Array<{ kind: string; resourceId?: string | undefined; data: Record<string, unknown> }> = []
      yield* pools.listen((e) => Effect.sync(() => events.push(e)))
      const lease = yield* pools.acquireRaw("llm")
      // the process froze right after the grant: its renewal fiber has not run since; it wakes
      // 40 s later (11.5 s past the local deadline of 28.5 s) with the call completed
      if (!PgLeases.isPgLease(lease)) throw new Error("expected a global lease")
      yield* Fiber.interrupt(lease.renewal!)
      yield* TestClock.adjust("40 seconds")
      const row = Effect.map(slotOne(sql), (r) => r.lease_id)
      const before = yield* row
      yield* lease.report({ ok: true })
      yield* lease.releaseNow
      expect(yield* PgPools.isLost(lease)).toBe(true)
      // the slot may be another runner's by now: it is left to its TTL, never released early
      expect(yield* row).toBe(before)
      const lost = events.filter((e) => e.kind === "lease.lost")
      expect(lost).toHaveLength(1)
      expect(lost[0]!.resourceId).toBe("key-a")
      expect(lost[0]!.data).toMatchObject({ leaseId: before, reason: "deadline", lateMs: 11_500, runnerId: "a" })
    }))
  }, 60_000)

  it("a renewal that finds the slot taken fails the lease with LeaseLost (taken)", async () => {
    await onTestClock((sql) => Effect.gen(function*() {
      const pools = yield* service(sql, [one(1)], { runnerId: "a", leaseTtl: "60 seconds", renewEvery: "10 seconds" })
      const lease = yield* pools.acquireRaw("llm")
      // another runner's lease replaced it (as after an expiry)
      yield* Effect.orDie(sql`UPDATE assay_pool_slot SET lease_id = gen_random_uuid(), holder = 'b' WHERE pool = 'llm'`)
      const guarded = yield* Effect.fork(Effect.either(PgPools.guard(lease)(Effect.never)))
      yield* TestClock.adjust("10 seconds")
      expect(yield* eventually(PgPools.isLost(lease))).toBe(true)
      const outcome = yield* Fiber.join(guarded)
      expect(outcome._tag === "Left" && outcome.left._tag === "LeaseLost" && outcome.left.reason).toBe("taken")
      expect(outcome._tag === "Left" && outcome.left.errorClass).toBe("retryable")
      // its release does not touch the other runner's slot
      yield* lease.releaseNow
      const rows = yield* Effect.orDie(sql<{ holder: string }>`SELECT holder FROM assay_pool_slot WHERE pool = 'llm'`)
      expect(rows[0]!.holder).toBe("b")
    }))
  }, 60_000)
})

// An acquire through the global pools interrupted at the moment its lease is granted (raw
// acquires, as `ctx.acquireLease` makes them; scoped ones timing out): what it was granted goes
// back, the local pool's capacity is whole afterwards and nothing counts as a leak (raw36)
describe("PgPools: an acquire interrupted at its grant gives back what it was granted", () => {
  const waiter: Pool.Holder = { taskName: "t", pipelineId: "p", owner: "p:t:1" }
  const oneSlot = (sql: SqlClient.SqlClient) => service(sql, [one(1)], { leaseTtl: "30 seconds", renewEvery: "3 seconds", runnerId: "r1" })
  /**
   * The capacity is whole: nothing in use locally, a new acquire gets the slot at once, no slot
   * held in the database (a release is written by a flush `releaseDelay` later: on the test
   * clock, `tick` moves it), and the waiter's owner holds nothing (no leak).
   */
  const whole = (pools: PoolsService, sql: SqlClient.SqlClient, tick: Effect.Effect<void> = Effect.void) =>
    Effect.gen(function*() {
      expect((yield* Effect.orDie(pools.snapshot("llm")))[0]!.active).toBe(0)
      expect((yield* Effect.either(Effect.scoped(pools.acquire({ pool: "llm", algorithm: "immediate" }))))._tag).toBe("Right")
      expect(yield* eventually(Effect.zipRight(tick, Effect.map(liveSlots(sql, "llm"), (n) => n === 0)))).toBe(true)
      expect(yield* Effect.orDie(pools.reclaim(waiter.owner!))).toEqual([])
    })
  /** `acquire` forked on a service whose next slot claim is held back: once the claim is in flight, `then` with its fiber (before the claim is let go). */
  const claimInFlight = (
    sql: SqlClient.SqlClient,
    acquire: (pools: PoolsService) => Effect.Effect<unknown, unknown>,
    then: (fiber: Fiber.RuntimeFiber<unknown, unknown>) => Effect.Effect<unknown>
  ) =>
    Effect.gen(function*() {
      const held = holdingClaims(sql)
      const pools = yield* oneSlot(held.sql)
      const started = yield* Deferred.make<void>()
      const go = yield* Deferred.make<void>()
      held.state.held = { started, go }
      const fiber = yield* Effect.fork(acquire(pools))
      yield* Deferred.await(started)
      held.state.held = undefined
      expect((yield* Effect.orDie(pools.snapshot("llm")))[0]!.active).toBe(1)
      yield* then(fiber)
      yield* Deferred.succeed(go, undefined)
      return { pools, exit: yield* Fiber.await(fiber) }
    })

  it("raw: the waiter's grant (the holder's release) and its interruption in one synchronous step", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const pools = yield* oneSlot(sql)
      const held = yield* pools.acquireRaw({ pool: "llm" })
      const fiber = yield* Effect.fork(pools.acquireRaw({ pool: "llm", timeout: "30 seconds" }, waiter))
      // parked in the local core behind the held lease
      expect(yield* eventually(Effect.map(Effect.orDie(pools.stats("llm")), (s) => s.waiting === 1))).toBe(true)
      // the release grants the slot to the waiter (resumed later); the interruption follows
      // before the waiter runs
      yield* Effect.zipRight(held.releaseNow, Effect.sync(() => fiber.unsafeInterruptAsFork(fiber.id())))
      expect(Exit.isInterrupted(yield* Fiber.await(fiber))).toBe(true)
      yield* whole(pools, sql)
    }))
  }, 60_000)

  it("raw: interrupted while its slot claim is in flight (its local lease granted)", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      // the interruption is seen once the claim has come back (a claim is not cut off)
      const { exit, pools } = yield* claimInFlight(sql, (pools) => pools.acquireRaw({ pool: "llm", timeout: "30 seconds" }, waiter), Fiber.interruptFork)
      expect(Exit.isInterrupted(exit)).toBe(true)
      yield* whole(pools, sql)
    }))
  }, 60_000)

  it("scoped: the acquire's timeout passing while its slot claim is in flight", async () => {
    await onTestClock((sql) =>
      Effect.gen(function*() {
        const { exit, pools } = yield* claimInFlight(
          sql,
          (pools) => Effect.scoped(pools.acquire({ pool: "llm", timeout: "1 second" }, waiter)),
          () => TestClock.adjust("2 seconds")
        )
        expect(Exit.isFailure(exit) && !Exit.isInterrupted(exit)).toBe(true)
        if (Exit.isFailure(exit)) expect(String(exit.cause)).toContain("AcquireTimeout")
        yield* whole(pools, sql, TestClock.adjust("100 millis"))
      }))
  }, 60_000)
})
