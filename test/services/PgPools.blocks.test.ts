/**
 * Block leases (issue 17, step 2 of docs/scale-out.md "Design: windows claimed whole"): a runner
 * holds a block of `⌊capacity ÷ runners⌋` slot rows of each resource, renews it with its
 * window claims in one statement, and hands its leases out in memory.
 *
 * Each "runner" is a `PgPools` service on its own client over one fresh database; the
 * renewal is the window claims' `renewAll` with the block rider, as the cluster engine runs it.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Duration, Effect, Exit, Fiber, Layer, Redacted, Scope, TestClock, TestContext } from "effect"
import { describe, expect, it } from "vitest"
import * as Resource from "../../src/domain/Resource.js"
import * as PgPools from "../../src/layers/PgPools.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import * as Gates from "../../src/services/internal/pool/pg/pools.js"
import * as Pool from "../../src/services/Pool.js"
import type { PoolsService } from "../../src/services/Pools.js"
import { eventually } from "../support/breakableSql.js"
import { usePostgres } from "../support/postgres.js"

const pg = usePostgres()
let dbSeq = 0

const clientLayer = (url: string) => PgClient.layer({ url: Redacted.make(url), maxConnections: 4 }).pipe(Layer.provide(Reactivity.layer))

/** A fresh database with the pool tables and the window claim table; returns its URL. */
const freshDb = async (): Promise<string> => {
  const name = `blocks_${++dbSeq}`
  await pg.createDatabase(name)
  await Effect.runPromise(Effect.scoped(Effect.provide(Effect.zipRight(PgPools.migrate, WindowClaims.createTable), clientLayer(pg.url(name)))))
  return pg.url(name)
}

const client = (url: string): Effect.Effect<SqlClient.SqlClient, never, Scope.Scope> =>
  Effect.orDie(Effect.provide(PgClient.make({ url: Redacted.make(url), maxConnections: 4 }), Reactivity.layer))

/** One "runner": global pools with block leases on (`runners` expected: the first blocks' size guess) and its renewal (window claims + blocks). */
const runner = (sql: SqlClient.SqlClient, pools: ReadonlyArray<Pool.PoolConfig>, id: string, runners: number | undefined) =>
  Effect.gen(function*() {
    const svc: PoolsService = yield* Effect.orDie(Effect.provideService(
      PgPools.make(pools, { runnerId: id, leaseTtl: "30 seconds", renewEvery: "10 seconds", pollMin: "5 millis", pollMax: "50 millis" }),
      SqlClient.SqlClient,
      sql
    ))
    const gate = Gates.gateOf(svc)!
    yield* gate.enableBlocks(runners)
    const claims = WindowClaims.make(sql, { clock: yield* Effect.clock, rider: gate.blockRider })!
    return { svc, gate, renew: claims.renewAll }
  })

const held = (sql: SqlClient.SqlClient, holder?: string) =>
  Effect.orDie(Effect.map(
    holder === undefined
      ? sql<{ n: number }>`SELECT count(*)::int AS n FROM assay_pool_slot WHERE holder IS NOT NULL AND expires_at > now()`
      : sql<{ n: number }>`SELECT count(*)::int AS n FROM assay_pool_slot WHERE holder = ${holder} AND expires_at > now()`,
    (rows) => Number(rows[0]!.n)
  ))

const llm = (capacity: number, extra: Partial<Resource.ResourceOptions<any>> = {}) =>
  Pool.make("llm", [Resource.make("llm", { id: "key-a", capacity, ...extra })])

const run = <A, E>(eff: Effect.Effect<A, E, Scope.Scope>): Promise<A> => Effect.runPromise(Effect.scoped(eff))

/**
 * One lease of `r`'s pool `llm` held in a new scope `a`, another runner's ("ghost") live demand
 * of 3 written (as its renewal would, within its TTL), then `r` renewed; `block` is `r`'s block
 * of `key-a`.
 */
const leaseBesideGhost = (sql: SqlClient.SqlClient, r: Effect.Effect.Success<ReturnType<typeof runner>>) =>
  Effect.gen(function*() {
    const a = yield* Scope.make()
    yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
    const block = r.gate.blockMode!.blocks.get("llm\u0000key-a")!
    yield* sql`INSERT INTO assay_pool_demand (pool, resource, runner, demand, expires_at)
      VALUES ('llm', 'key-a', 'ghost', 3, now() + interval '30 seconds')`
    yield* r.renew
    return { a, block }
  })

describe("PgPools block leases", () => {
  it("a first block of ⌊capacity ÷ runners⌋ slots is claimed at the first acquire, served in memory, renewed in one statement (resized to the demand's share), given back when idle and on exit", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const scope = yield* Scope.make()
      const r = yield* Scope.extend(runner(yield* client(url), [llm(7)], "r1", 3), scope)
      expect(yield* held(sql)).toBe(0)
      const a = yield* Scope.make()
      const first = yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
      // ⌊7 ÷ 3⌋ = 2 rows held as one block
      expect(yield* held(sql, "r1")).toBe(2)
      expect(Gates.fromBlock(first)).toBe(true)
      // the slot table out of reach: the block still serves, so no statement is needed
      yield* sql.unsafe("ALTER TABLE assay_pool_slot RENAME TO away")
      const second = yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
      expect(second.resource.id).toBe("key-a")
      // the block is the local ceiling: a third waits (and times out here)
      const third = yield* Effect.exit(Scope.extend(r.svc.acquire({ pool: "llm", timeout: "200 millis" }), a))
      expect(Exit.isFailure(third)).toBe(true)
      yield* sql.unsafe("ALTER TABLE away RENAME TO assay_pool_slot")
      const expires = (yield* sql<{ e: string }>`SELECT min(expires_at)::text AS e FROM assay_pool_slot WHERE holder = 'r1'`)[0]!.e
      yield* Effect.sleep("20 millis")
      // the renewal: both rows extended; this runner is the only one with a demand (its two
      // leases in use), so its share is the whole capacity: the block grows to 7
      yield* r.renew
      const renewed = (yield* sql<{ e: string }>`SELECT min(expires_at)::text AS e FROM assay_pool_slot WHERE holder = 'r1' AND slot <= 2`)[0]!.e
      expect(renewed > expires).toBe(true)
      expect(yield* held(sql, "r1")).toBe(7)
      expect(r.gate.blockMode!.blocks.get("llm\u0000key-a")!.target).toBe(7)
      // both back: the next renewal still writes the interval's peak demand (kept through one
      // idle renewal); no demand for a whole interval: the whole block goes back at the one
      // after (the releases are written within the release delay)
      yield* Scope.close(a, Exit.void)
      yield* r.renew
      expect(yield* held(sql, "r1")).toBe(7)
      yield* r.renew
      yield* Effect.sleep("100 millis")
      expect(yield* held(sql, "r1")).toBe(0)
      // needed again: claimed again at the next acquire
      yield* Effect.scoped(r.svc.acquire({ pool: "llm" }))
      expect(yield* held(sql, "r1")).toBeGreaterThan(0)
      // the runner stops: its block goes back
      yield* Scope.close(scope, Exit.void)
      expect(yield* held(sql)).toBe(0)
    }))
  })

  it("the first block's guess counts the live runners, not only those with a demand: with 3 runners started, the first to claim takes ⌊capacity ÷ 3⌋; each renewal keeps a runner with no block registered; a runner that stops is no longer counted; alone, a runner grows to the capacity at its renewal", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const later = yield* Scope.make()
      const r1 = yield* runner(yield* client(url), [llm(9)], "r1", undefined)
      const r2 = yield* Scope.extend(runner(yield* client(url), [llm(9)], "r2", undefined), later)
      const r3 = yield* Scope.extend(runner(yield* client(url), [llm(9)], "r3", undefined), later)
      // r2 and r3 are started (registered) but have asked for nothing: r1's first block is
      // ⌊9 ÷ 3⌋, not the whole capacity, so their first claims find rows free
      const a = yield* Scope.make()
      yield* Scope.extend(r1.svc.acquire({ pool: "llm" }), a)
      expect(yield* held(sql, "r1")).toBe(3)
      const b = yield* Scope.make()
      yield* Scope.extend(r2.svc.acquire({ pool: "llm" }), b)
      expect(yield* held(sql, "r2")).toBe(3)
      // a renewal of a runner with no block writes its registration again (demand 0, one TTL)
      yield* sql`UPDATE assay_pool_demand SET expires_at = now() + interval '1 second' WHERE runner = 'r3'`
      yield* r3.renew
      const reg = yield* sql<{ demand: number; ttl_ok: boolean }>`SELECT demand,
        (expires_at > now() + interval '25 seconds') AS ttl_ok FROM assay_pool_demand WHERE runner = 'r3'`
      expect(reg.map((o) => [Number(o.demand), o.ttl_ok])).toEqual([[0, true]])
      // a registered runner with no demand has no share: r1's renewal splits by demand (r1 1,
      // r2 1: ⌈9 ÷ 2⌉ for one of them)
      yield* r1.renew
      expect(r1.gate.blockMode!.blocks.get("llm\u0000key-a")!.target).toBeGreaterThanOrEqual(4)
      // r2 and r3 stop (their rows deleted, r2's block given back): r1, alone, takes the whole
      // capacity at its renewal
      yield* Scope.close(b, Exit.void)
      yield* Scope.close(later, Exit.void)
      yield* r1.renew
      yield* r1.renew
      expect(yield* held(sql, "r1")).toBe(9)
      yield* Scope.close(a, Exit.void)
    }))
  })

  it("a holder above its equal share gives its free rows back within a second (TestClock) when another live runner asks, not at its next renewal; at or below its equal share it reads nothing", async () => {
    const url = await freshDb()
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const sql = yield* client(url)
      // A's client counts its reads of the other runners' demands between renewals
      let reads = 0
      const real = yield* client(url)
      const counted = new Proxy(real, {
        apply: (target, self, args) => {
          if (Array.isArray(args[0]) && String(args[0].join("?")).includes("FROM assay_pool_demand WHERE pool = ANY")) reads++
          return Reflect.apply(target as any, self, args)
        }
      })
      const a = yield* runner(counted, [llm(9)], "r1", undefined)
      const b = yield* runner(yield* client(url), [llm(9)], "r2", undefined)
      yield* runner(yield* client(url), [llm(9)], "r3", undefined)
      const blockA = () => a.gate.blockMode!.blocks.get("llm\u0000key-a")!
      // A's first block is its equal share, ⌊9 ÷ 3⌋: a second later it reads nothing
      const inUse = yield* Scope.make()
      yield* Scope.extend(a.svc.acquire({ pool: "llm" }), inUse)
      expect(yield* held(sql, "r1")).toBe(3)
      yield* TestClock.adjust("1 second")
      yield* eventually(Effect.succeed(false), 20)
      expect(reads).toBe(0)
      // A renews before B and C have asked for anything (their demand rows are 0): its share is
      // the whole capacity, and it takes every free row
      yield* a.renew
      expect(yield* held(sql, "r1")).toBe(9)
      expect(blockA().liveOthers).toBe(2)
      // B asks now: its first claim writes its demand (1) and finds nothing free; its acquire
      // waits (per-task claims refused while A holds every row)
      const waiting = yield* Effect.fork(Effect.scoped(Effect.as(b.svc.acquire({ pool: "llm", timeout: "20 seconds" }), "got")))
      const asked = Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM assay_pool_demand WHERE runner = 'r2' AND demand > 0`,
        (r) => Number(r[0]!.n) === 1
      )
      expect(yield* eventually(asked)).toBe(true)
      expect(b.gate.blockMode!.blocks.get("llm\u0000key-a")!.held).toBe(0)
      // within a second of the clock (A's renewal, 10 s away, never runs here) A reads B's demand
      // and gives back its free rows above its new share (demand 1 against 1: 5 of 9, the
      // remainder to r1), released in the table at once
      const t0 = yield* TestClock.currentTimeMillis
      const gaveBack = Effect.map(held(sql, "r1"), (n) => n === 5)
      let back = false
      while (!back && (yield* TestClock.currentTimeMillis) - t0 < 1_000) {
        yield* TestClock.adjust("100 millis")
        back = yield* eventually(gaveBack, undefined, 300)
      }
      if (!back) back = yield* eventually(gaveBack)
      expect(back).toBe(true)
      expect(reads).toBeGreaterThanOrEqual(1)
      expect([blockA().target, blockA().held]).toEqual([5, 5])
      // B's next claim gets one of them
      let got = false
      for (let i = 0; i < 20 && !got; i++) {
        yield* TestClock.adjust("50 millis")
        got = yield* eventually(Effect.sync(() => waiting.unsafePoll() !== null), undefined, 300)
      }
      expect(yield* waiting.await.pipe(Effect.map(Exit.isSuccess))).toBe(true)
      expect(yield* held(sql)).toBeLessThanOrEqual(9)
      yield* Scope.close(inUse, Exit.void)
    })).pipe(Effect.provide(TestContext.TestContext)))
  }, 120_000)

  it("a completed call's slot goes back to the block at once and is served again; an interrupted call's slot is kept out until its TTL", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const scope = yield* Scope.make()
      const r = yield* Scope.extend(runner(yield* client(url), [llm(2)], "r1", 1), scope)
      const a = yield* Scope.make()
      yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
      const b = yield* Scope.make()
      yield* Scope.extend(r.svc.acquire({ pool: "llm" }), b)
      // the call completed (its scope succeeded): the slot is back in the block, served again
      yield* Scope.close(a, Exit.void)
      const c = yield* Scope.make()
      yield* Scope.extend(r.svc.acquire({ pool: "llm", timeout: "1 second" }), c)
      yield* Scope.close(c, Exit.void)
      // an interrupted call (unknown outcome): its slot leaves the block and stays held in the
      // database until its TTL (a call may still be running at the provider)
      yield* Scope.close(b, Exit.interrupt(undefined as never))
      yield* Scope.close(scope, Exit.void)
      expect(yield* held(sql)).toBe(1)
    }))
  })

  it("renewals failing past the block's local deadline: its leases are lost and it grants nothing more", async () => {
    const url = await freshDb()
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const sql = yield* client(url)
      const r = yield* runner(yield* client(url), [llm(4)], "r1", 2)
      const a = yield* Scope.make()
      const lease = yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
      const deadline = Gates.deadlineOf(lease)!
      // the database unreachable for the renewals: a failed renewal is not a loss (L3)
      yield* sql.unsafe("ALTER TABLE assay_pool_slot RENAME TO away")
      yield* TestClock.adjust("20 seconds")
      yield* r.renew
      expect(yield* Gates.knownLost(lease)).toBe(false)
      expect(Gates.deadlineOf(lease)).toBe(deadline)
      // past the deadline: lost, and the block is empty (nothing more is served from it)
      yield* TestClock.adjust(Duration.millis(deadline + 1 - (yield* TestClock.currentTimeMillis)))
      yield* Effect.yieldNow()
      expect(yield* Gates.knownLost(lease)).toBe(true)
      const mode = r.gate.blockMode!
      expect([...mode.blocks.values()].reduce((n, b) => n + b.held, 0)).toBe(0)
      yield* sql.unsafe("ALTER TABLE away RENAME TO assay_pool_slot")
      yield* Scope.close(a, Exit.void)
    })).pipe(Effect.provide(TestContext.TestContext)))
  })

  it("a resize shrinks the block within one renewal; a dead resource's slots are let go and the failover finds the live one (C9)", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const pools = [Pool.make("llm", [Resource.make("llm", { id: "r1", capacity: 3 }), Resource.make("llm", { id: "r2", capacity: 3 })], {
        algorithm: "failover"
      })]
      const r = yield* runner(yield* client(url), pools, "r1", 1)
      const a = yield* Scope.make()
      const first = yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
      expect(first.resource.id).toBe("r1")
      expect(yield* held(sql)).toBe(6)
      // r2 in use too (a demand for it: its share is its whole capacity, 3)
      const b = yield* Scope.make()
      const onR2 = yield* Scope.extend(r.svc.acquire({ pool: "llm", where: (i) => i.id === "r2" }), b)
      expect(onR2.resource.id).toBe("r2")
      const heldOf = (res: string) =>
        Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM assay_pool_slot WHERE resource = ${res} AND holder IS NOT NULL AND expires_at > now()`, (rows) => Number(rows[0]!.n))
      yield* r.renew
      expect(yield* heldOf("r2")).toBe(3)
      // r2 lowered to 1: its free slots above the new size go back at the next renewal
      expect(yield* PgPools.resize("llm", "r2", 1).pipe(Effect.provideService(SqlClient.SqlClient, sql))).toBe(true)
      yield* r.renew
      // (releases are written in batches, within the release delay)
      yield* Effect.sleep("100 millis")
      expect(yield* heldOf("r2")).toBe(1)
      yield* Scope.close(b, Exit.void)
      // r1 dies (another runner saw it): its free slots are let go at the next renewal, the one
      // in use when it comes back; the failover then leases the live r2
      yield* sql`UPDATE assay_pool_resource SET state = 'dead' WHERE resource = 'r1'`
      yield* r.renew
      yield* Effect.sleep("100 millis")
      expect(yield* heldOf("r1")).toBe(1)
      const next = yield* Scope.extend(r.svc.acquire({ pool: "llm", timeout: "2 seconds" }), a)
      expect(next.resource.id).toBe("r2")
      yield* Scope.close(a, Exit.void)
      yield* Effect.sleep("100 millis")
      expect(yield* heldOf("r1")).toBe(0)
      // every matching resource dead: the acquire fails rather than waits
      yield* sql`UPDATE assay_pool_resource SET state = 'dead' WHERE resource = 'r2'`
      yield* r.renew
      const hopeless = yield* Effect.flip(Effect.scoped(r.svc.acquire({ pool: "llm", timeout: "2 seconds" })))
      expect(hopeless._tag).toBe("ResourceUnavailable")
    }))
  })

  it("three runners with blocks: peak in flight never above the capacity; a fourth runner with no block still progresses (per-task claims, then blocks given back by idle runners)", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const capacity = 6
      const runners = yield* Effect.forEach([1, 2, 3], (i) => Effect.flatMap(client(url), (c) => runner(c, [llm(capacity)], `r${i}`, 3)))
      let inFlight = 0
      let peak = 0
      let dbPeak = 0
      const work = (svc: PoolsService) =>
        Effect.scoped(Effect.gen(function*() {
          yield* svc.acquire({ pool: "llm" })
          inFlight++
          peak = Math.max(peak, inFlight)
          yield* Effect.sleep("3 millis")
          inFlight--
        }))
      const renewals = Effect.forEach(runners, (r) => r.renew, { concurrency: "unbounded", discard: true })
      // 30 workers (10 per runner) keep taking leases until the 6 renewals are done, so no
      // renewal finds its runner idle (an idle runner gives its block back: checked below),
      // however the machine's load orders them
      let renewed = false
      const worker = (svc: PoolsService, left: number): Effect.Effect<void, unknown> =>
        Effect.suspend(() => renewed && left <= 0 ? Effect.void : Effect.zipRight(work(svc), worker(svc, left - 1)))
      yield* Effect.all([
        Effect.forEach(Array.from({ length: 30 }, (_, i) => i), (i) => worker(runners[i % 3]!.svc, 3), { concurrency: "unbounded", discard: true }),
        Effect.zipRight(
          Effect.repeatN(Effect.zipRight(renewals, Effect.flatMap(held(sql), (n) => Effect.sync(() => dbPeak = Math.max(dbPeak, n)))), 5),
          Effect.sync(() => renewed = true)
        )
      ], { concurrency: "unbounded" })
      expect(peak).toBeGreaterThan(0)
      expect(peak).toBeLessThanOrEqual(capacity)
      expect(dbPeak).toBeLessThanOrEqual(capacity)
      // 3 blocks of 2: every row held
      expect(yield* held(sql)).toBe(6)
      // a fourth runner (more than expected) gets an empty block: its acquire is a per-task
      // claim, refused while the others hold every row, and it waits (bounded by its timeout)
      // until the others, idle for a whole renewal, give their blocks back
      const fourth = yield* Effect.flatMap(client(url), (c) => runner(c, [llm(capacity)], "r4", 3))
      const waiting = yield* Effect.fork(Effect.scoped(Effect.as(fourth.svc.acquire({ pool: "llm", timeout: "20 seconds" }), "got")))
      yield* Effect.sleep("200 millis")
      yield* renewals
      yield* renewals
      expect(yield* waiting.await.pipe(Effect.map(Exit.isSuccess))).toBe(true)
      yield* Effect.sleep("100 millis")
      expect(yield* held(sql, "r1")).toBe(0)
    }))
  })

  it("demand-proportional shares: two runners with demand 3:1 converge to 6 and 2 of 8 (the one that started with an empty block progresses); the sum held never exceeds the capacity; an idle runner's rows go to the busy one within one renewal", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const capacity = 8
      const a = yield* runner(yield* client(url), [llm(capacity)], "ra", undefined)
      const blockOf = (r: typeof a) => r.gate.blockMode!.blocks.get("llm\u0000key-a")!
      let inFlight = 0
      let peak = 0
      const done = { ra: 0, rb: 0 }
      const stop = { ra: false, rb: false }
      const worker = (r: typeof a, id: "ra" | "rb"): Effect.Effect<void, unknown> =>
        Effect.suspend(() =>
          stop[id] ? Effect.void : Effect.zipRight(
            Effect.scoped(Effect.gen(function*() {
              yield* r.svc.acquire({ pool: "llm" })
              inFlight++
              peak = Math.max(peak, inFlight)
              yield* Effect.sleep("2 millis")
              inFlight--
              done[id]++
            })),
            worker(r, id)
          )
        )
      // 12 workers on ra, 4 on rb: demand 3:1
      const wa = yield* Effect.forkScoped(Effect.forEach(Array.from({ length: 12 }), () => worker(a, "ra"), { concurrency: "unbounded", discard: true }))
      // ra is alone at its first acquire (no other runner started): its first block is the whole capacity
      yield* Effect.sleep("100 millis")
      expect(blockOf(a).held).toBe(capacity)
      // rb starts later (its registration comes after ra's first block)
      const b = yield* runner(yield* client(url), [llm(capacity)], "rb", undefined)
      const wb = yield* Effect.forkScoped(Effect.forEach(Array.from({ length: 4 }), () => worker(b, "rb"), { concurrency: "unbounded", discard: true }))
      yield* Effect.sleep("50 millis")
      // rb's first block is empty (every row is ra's): its acquires claim slot by slot
      expect(blockOf(b).held).toBe(0)
      let dbPeak = 0
      const step = Effect.gen(function*() {
        const n = yield* held(sql)
        dbPeak = Math.max(dbPeak, n)
        expect(n).toBeLessThanOrEqual(capacity)
        expect(blockOf(a).held + blockOf(b).held).toBeLessThanOrEqual(capacity)
      })
      const converged = () =>
        blockOf(a).target === 6 && blockOf(b).target === 2 && blockOf(a).held === 6 && blockOf(b).held === 2
      let rounds = 0
      while (!converged() && rounds < 10) {
        yield* b.renew
        yield* step
        yield* a.renew
        yield* step
        yield* Effect.sleep("30 millis")
        yield* step
        rounds++
      }
      // the demand written is the peak of the interval: the workers, or one more for the instant
      // between an acquire's grant and the end of its count as under way
      expect(blockOf(a).demand - 12).toBeGreaterThanOrEqual(0)
      expect(blockOf(a).demand - 12).toBeLessThanOrEqual(1)
      expect(blockOf(b).demand - 4).toBeGreaterThanOrEqual(0)
      expect(blockOf(b).demand - 4).toBeLessThanOrEqual(1)
      expect([blockOf(a).target, blockOf(b).target]).toEqual([6, 2])
      expect([blockOf(a).held, blockOf(b).held]).toEqual([6, 2])
      expect(done.rb).toBeGreaterThan(0)
      expect(peak).toBeLessThanOrEqual(capacity)
      expect(dbPeak).toBeLessThanOrEqual(capacity)
      // rb goes idle: its next renewal writes the interval's peak (4, the block kept through
      // one idle renewal), the one after demand 0: its block goes back
      stop.rb = true
      yield* Fiber.join(wb)
      yield* b.renew
      expect(blockOf(b).demand).toBeGreaterThanOrEqual(4)
      expect(blockOf(b).held).toBe(2)
      yield* b.renew
      expect(blockOf(b).target).toBe(0)
      expect(blockOf(b).held).toBe(0)
      yield* Effect.sleep("100 millis")
      expect(yield* held(sql, "rb")).toBe(0)
      // ra, busy, gets them at its next renewal: rb's demand is 0 now
      yield* a.renew
      expect(blockOf(a).target).toBe(capacity)
      expect(blockOf(a).held).toBe(capacity)
      expect(yield* held(sql)).toBeLessThanOrEqual(capacity)
      stop.ra = true
      yield* Fiber.join(wa)
    }))
  })

  it("hysteresis: a renewal writes the peak demand since the previous one, so a runner idle at the instant of a renewal keeps its block; idle for a whole interval, it gives the block back", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const r = yield* runner(yield* client(url), [llm(8)], "r1", undefined)
      const block = r.gate.blockMode!.blocks
      const a = yield* Scope.make()
      yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
      yield* Scope.extend(r.svc.acquire({ pool: "llm" }), a)
      yield* sql`INSERT INTO assay_pool_demand (pool, resource, runner, demand, expires_at)
        VALUES ('llm', 'key-a', 'ghost', 2, now() + interval '30 seconds')`
      // demand 2 against 2: half of 8 (the rows above it go back within the release delay)
      yield* r.renew
      yield* Effect.sleep("100 millis")
      expect(block.get("llm\u0000key-a")!.target).toBe(4)
      expect(yield* held(sql, "r1")).toBe(4)
      // between two windows: its leases end, then three acquires start and end (peak 3), and
      // at the instant of the renewal nothing is in use
      yield* Scope.close(a, Exit.void)
      yield* Effect.all([0, 1, 2].map(() => Effect.scoped(Effect.zipRight(r.svc.acquire({ pool: "llm" }), Effect.sleep("20 millis")))), {
        concurrency: "unbounded",
        discard: true
      })
      yield* r.renew
      // the peak of the interval is written: demand 3 against 2, ⌊8 × 3 ÷ 5⌋ + a remainder = 5
      expect(block.get("llm\u0000key-a")!.demand).toBe(3)
      expect(block.get("llm\u0000key-a")!.target).toBe(5)
      expect(block.get("llm\u0000key-a")!.held).toBe(5)
      expect(yield* held(sql, "r1")).toBe(5)
      const written = yield* sql<{ demand: number }>`SELECT demand FROM assay_pool_demand WHERE runner = 'r1'`
      expect(written.map((w) => Number(w.demand))).toEqual([3])
      // no acquire for a whole interval: the block goes back
      yield* r.renew
      yield* Effect.sleep("100 millis")
      expect(block.get("llm\u0000key-a")!.target).toBe(0)
      expect(yield* held(sql, "r1")).toBe(0)
    }))
  })

  it("a renewal writes the runner's demand for one TTL; a dead runner's demand stops counting once its TTL has passed; a runner that stops forgets its demand", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const scope = yield* Scope.make()
      const r = yield* Scope.extend(runner(yield* client(url), [llm(8)], "r1", undefined), scope)
      const { a, block } = yield* leaseBesideGhost(sql, r)
      // demand 1 against 3: a quarter of 8
      expect(block.demand).toBe(1)
      expect(block.target).toBe(2)
      const own = yield* sql<{ demand: number; ttl_ok: boolean }>`SELECT demand,
        (expires_at > now() + interval '25 seconds' AND expires_at <= now() + interval '30 seconds') AS ttl_ok
        FROM assay_pool_demand WHERE runner = 'r1'`
      expect(own.map((o) => [Number(o.demand), o.ttl_ok])).toEqual([[1, true]])
      // the other runner died: its row is not renewed and its TTL passes
      yield* sql`UPDATE assay_pool_demand SET expires_at = now() - interval '1 second' WHERE runner = 'ghost'`
      // (the rows above the share went back within the release delay)
      yield* Effect.sleep("100 millis")
      yield* r.renew
      expect(block.target).toBe(8)
      expect(block.held).toBe(8)
      yield* Scope.close(a, Exit.void)
      // the runner stops: its demand row goes (not left to its TTL)
      yield* Scope.close(scope, Exit.void)
      const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM assay_pool_demand WHERE runner = 'r1'`
      expect(Number(left[0]!.n)).toBe(0)
    }))
  })

  it("a top-up brought forward: acquires waiting a whole poll, more than the block holds, claim free rows up to the share recomputed with the demand now, before the next renewal (once per quarter of renewEvery)", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const r = yield* runner(yield* client(url), [llm(8)], "r1", undefined)
      const { a, block } = yield* leaseBesideGhost(sql, r)
      // demand 1 against 3: 2 of 8; the 6 others go back
      expect(block.target).toBe(2)
      yield* Effect.sleep("100 millis")
      expect(yield* held(sql, "r1")).toBe(2)
      // 10 more acquires, held until the end: the block's 2nd row serves one, 9 wait a poll
      // (50 ms here), then the share with demand 11 against 3 (⌊8 × 11 ÷ 14⌋ + a remainder = 6) is claimed
      const got: Array<string> = []
      for (let i = 0; i < 10; i++) {
        yield* Effect.forkIn(Effect.tap(r.svc.acquire({ pool: "llm" }), (l) => Effect.sync(() => got.push(l.id))), a)
      }
      let waited = 0
      while (block.held < 6 && waited++ < 100) yield* Effect.sleep("20 millis")
      expect(block.held).toBe(6)
      expect(block.target).toBe(6)
      expect(yield* held(sql, "r1")).toBe(6)
      while (got.length < 5 && waited++ < 200) yield* Effect.sleep("20 millis")
      expect(got.length).toBe(5)
      yield* Scope.close(a, Exit.void)
    }))
  })

  it("a runner with demand and an empty block progresses by per-task claims, and a completed per-task slot joins its block when the block is below its share", async () => {
    const url = await freshDb()
    await run(Effect.gen(function*() {
      const sql = yield* client(url)
      const r = yield* runner(yield* client(url), [llm(4)], "r1", undefined)
      // every row held by another runner (within their TTL)
      yield* sql`UPDATE assay_pool_slot SET holder = 'ghost', lease_id = gen_random_uuid(), acquired_at = now(),
        expires_at = now() + interval '30 seconds'`
      const a = yield* Scope.make()
      const waiting = yield* Effect.forkIn(Scope.extend(r.svc.acquire({ pool: "llm", timeout: "20 seconds" }), a), a)
      yield* Effect.sleep("100 millis")
      const block = r.gate.blockMode!.blocks.get("llm\u0000key-a")!
      // its first block is empty: the acquire claims slot by slot, refused while every row is held
      expect(block.held).toBe(0)
      expect(waiting.unsafePoll()).toBe(null)
      // one row comes free: the per-task claim gets it
      yield* sql`UPDATE assay_pool_slot SET holder = NULL, lease_id = NULL, expires_at = NULL WHERE slot = 1`
      const lease = yield* Fiber.join(waiting)
      expect(Gates.fromBlock(lease)).toBe(false)
      // its first claim (no row free) already told the others its demand, before any renewal
      const written = yield* sql<{ demand: number }>`SELECT demand FROM assay_pool_demand WHERE runner = 'r1'`
      expect(written.map((w) => Number(w.demand))).toEqual([1])
      // its renewal: the only demand, so its share is the whole capacity; nothing is free to top up
      yield* r.renew
      expect(block.target).toBe(4)
      expect(block.held).toBe(0)
      // the call completes: its row joins the block (not given back, then claimed slot by slot again)
      yield* Scope.close(a, Exit.void)
      expect(block.held).toBe(1)
      yield* Effect.sleep("100 millis")
      expect(yield* held(sql, "r1")).toBe(1)
      const next = yield* Effect.scoped(Effect.map(r.svc.acquire({ pool: "llm", timeout: "1 second" }), Gates.fromBlock))
      expect(next).toBe(true)
    }))
  })
})

