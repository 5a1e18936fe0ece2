/**
 * Pool benchmark: assay's lease path against a bare `Effect.Semaphore` doing the same work,
 * in one run. Prints JSON lines:
 *
 * - `pool.uncontended`: acquire + release per second from one fiber.
 * - `pool.contended`: 64 fibers each doing 2000 acquire / yield / release cycles on a pool of
 *   total capacity 8, laid out as one resource of capacity 8 and as 4 resources of capacity 2.
 *
 * Each line compares:
 * - the lease path (`acquireRaw` + `releaseNow`) with `sem.withPermits(1)`:
 *   `ratio_to_semaphore` = assay time / semaphore time (the target is <= 4);
 * - the scoped lease (`Effect.scoped(acquire)`) with the scoped semaphore lease of STYLE §3.1
 *   (`Effect.scoped(acquireRelease(sem.take(1), () => sem.release(1)))`):
 *   `scoped_ratio_to_scoped_semaphore`; and with `withPermits`: `scoped_ratio_to_semaphore`
 *   (this one includes the cost of creating and closing an Effect `Scope` per lease, which
 *   alone is several times a semaphore round trip).
 *
 * - `pool.held_acquire` (issue 21): a task holding a lease of one pool acquires a free slot of
 *   another whose resource has a client factory (the fanout / judge-after-model shape), 6 rows
 *   one after the other and 2,000 in a loop; before the fix each such acquire waited for the
 *   pool's `deadlockWarn` (5 s) timer; `ms_per_acquire` should be microseconds.
 *
 * Timings alternate between the variants and keep each one's best of 5 runs.
 *
 * - `pool.pg` (only with `--pg`; needs Debian's PostgreSQL, started on loopback by the test
 *   helper): global pools (`PgPools`) over 3 separate clients sharing one database, capacity 8:
 *   acquire + release cycles per second from one fiber (`uncontended`), and from 8 fibers per
 *   client (24 in all, `contended`); with the CPU time of this process (the server's is not
 *   counted).
 *
 * Run: `npx tsx bench/pool.ts` (add `--pg` for the Postgres case)
 */
import { Effect, Exit, Redacted, Scope } from "effect"
import * as Resource from "../src/domain/Resource.js"
import * as Pool from "../src/services/Pool.js"

const UNCONTENDED = 200_000
const FIBERS = 64
const CYCLES = 2_000
const RUNS = 5

const time = <A, E>(eff: Effect.Effect<A, E>): Effect.Effect<number, E> =>
  Effect.gen(function*() {
    const start = performance.now()
    yield* eff
    return performance.now() - start
  })

/** Runs every variant once per round, `RUNS` rounds, and keeps each variant's minimum (ms). */
const bestOf = <K extends string>(variants: Record<K, Effect.Effect<unknown, unknown>>) =>
  Effect.gen(function*() {
    const best = {} as Record<K, number>
    for (let r = 0; r < RUNS; r++) {
      for (const k of Object.keys(variants) as Array<K>) {
        const t = yield* time(variants[k])
        best[k] = Math.min(best[k] ?? Infinity, t)
      }
    }
    return best
  })

const loop = (eff: Effect.Effect<unknown, unknown>, n: number) =>
  Effect.forEach(Array.from({ length: n }), () => eff, { discard: true })

const ratio = (a: number, b: number) => +(a / b).toFixed(2)

const program = Effect.gen(function*() {
  const scope = yield* Scope.make()
  const pools = yield* Pool.makePools([
    Pool.make("one", [Resource.make("w", { id: "w", capacity: 8 })]),
    Pool.make("four", Array.from({ length: 4 }, (_, i) => Resource.make("w", { id: `w${i}`, capacity: 2 })))
  ]).pipe(Scope.extend(scope))
  const sem8 = yield* Effect.makeSemaphore(8)
  const semScopedLease = Effect.acquireRelease(sem8.take(1), () => sem8.release(1))

  // uncontended: nothing else holds the pool
  {
    const variants = {
      assay: Effect.flatMap(pools.acquireRaw("one"), (l) => l.releaseNow),
      semaphore: sem8.withPermits(1)(Effect.void),
      assayScoped: Effect.scoped(pools.acquire("one")),
      semaphoreScoped: Effect.scoped(semScopedLease)
    }
    const looped = Object.fromEntries(
      Object.entries(variants).map(([k, v]) => [k, loop(v, UNCONTENDED)])
    ) as Record<keyof typeof variants, Effect.Effect<void, unknown>>
    yield* bestOf(Object.fromEntries(Object.entries(variants).map(([k, v]) => [k, loop(v, 10_000)])))
    const t = yield* bestOf(looped)
    const perS = (ms: number) => Math.round(UNCONTENDED / (ms / 1000))
    console.log(JSON.stringify({
      bench: "pool.uncontended",
      ops: UNCONTENDED,
      assay_ops_per_s: perS(t.assay),
      semaphore_ops_per_s: perS(t.semaphore),
      ratio_to_semaphore: ratio(t.assay, t.semaphore),
      assay_scoped_ops_per_s: perS(t.assayScoped),
      semaphore_scoped_ops_per_s: perS(t.semaphoreScoped),
      scoped_ratio_to_scoped_semaphore: ratio(t.assayScoped, t.semaphoreScoped)
    }))
  }

  // contended: 64 fibers, total capacity 8, one yield while holding (the "work")
  const work = Effect.yieldNow()
  const contended = (cycle: Effect.Effect<unknown, unknown>) =>
    Effect.forEach(Array.from({ length: FIBERS }), () => loop(cycle, CYCLES), {
      concurrency: "unbounded",
      discard: true
    })
  for (const pool of ["one", "four"] as const) {
    const variants = {
      assay: contended(Effect.flatMap(pools.acquireRaw(pool), (l) => Effect.zipRight(work, l.releaseNow))),
      semaphore: contended(sem8.withPermits(1)(work)),
      assayScoped: contended(Effect.scoped(Effect.zipRight(pools.acquire(pool), work))),
      semaphoreScoped: contended(Effect.scoped(Effect.zipRight(semScopedLease, work)))
    }
    const t = yield* bestOf(variants)
    const stats = yield* pools.stats(pool)
    const perS = (ms: number) => Math.round((FIBERS * CYCLES) / (ms / 1000))
    console.log(JSON.stringify({
      bench: "pool.contended",
      layout: pool === "one" ? "1 resource x capacity 8" : "4 resources x capacity 2",
      fibers: FIBERS,
      cycles_per_fiber: CYCLES,
      assay_ms: +t.assay.toFixed(1),
      semaphore_ms: +t.semaphore.toFixed(1),
      assay_leases_per_s: perS(t.assay),
      semaphore_leases_per_s: perS(t.semaphore),
      ratio_to_semaphore: ratio(t.assay, t.semaphore),
      assay_scoped_ms: +t.assayScoped.toFixed(1),
      semaphore_scoped_ms: +t.semaphoreScoped.toFixed(1),
      scoped_ratio_to_scoped_semaphore: ratio(t.assayScoped, t.semaphoreScoped),
      scoped_ratio_to_semaphore: ratio(t.assayScoped, t.semaphore),
      waits_total: stats.waitsTotal,
      active_after: stats.active
    }))
  }
  // issue 21: a held lease, then a free slot of another pool (factory: not the sync fast path)
  {
    const held = yield* Pool.makePools([
      Pool.make("model", [Resource.make("m", { id: "m", capacity: 4 })], { deadlockWarn: "5 seconds" }),
      Pool.make("judge", [Resource.make("j", { id: "j", capacity: 4, factory: () => Effect.succeed("client") })])
    ]).pipe(Scope.extend(scope))
    const row = (i: number) =>
      Effect.scoped(Effect.gen(function*() {
        const holder: Pool.Holder = { taskName: "judge", pipelineId: `p${i}`, owner: `o${i}` }
        yield* held.acquire("model", holder)
        yield* held.acquire("judge", holder)
      }))
    const six = yield* time(Effect.forEach([0, 1, 2, 3, 4, 5], row, { discard: true }))
    const many = yield* time(Effect.forEach(Array.from({ length: 2_000 }, (_, i) => i), row, { discard: true }))
    const judge = yield* held.stats("judge")
    console.log(JSON.stringify({
      bench: "pool.held_acquire",
      rows_6_ms: +six.toFixed(2),
      rows_2000_ms: +many.toFixed(1),
      ms_per_acquire: +(many / 2_000).toFixed(4),
      waits_total: judge.waitsTotal,
      deadlock_warn_ms: 5_000
    }))
  }
  yield* Scope.close(scope, Exit.void)
})

const pgCase = Effect.gen(function*() {
  const { startPostgres } = yield* Effect.promise(() => import("../test/support/postgres.js"))
  const Reactivity = yield* Effect.promise(() => import("@effect/experimental/Reactivity"))
  const PgClient = yield* Effect.promise(() => import("@effect/sql-pg/PgClient"))
  const { SqlClient } = yield* Effect.promise(() => import("@effect/sql"))
  const PgPools = yield* Effect.promise(() => import("../src/layers/PgPools.js"))
  const server = yield* Effect.acquireRelease(Effect.promise(() => startPostgres()), (s) => Effect.promise(() => s.stop()))
  yield* Effect.promise(() => server.createDatabase("bench"))
  const client = Effect.orDie(Effect.provide(
    PgClient.make({ url: Redacted.make(server.url("bench")), maxConnections: 8 }),
    Reactivity.layer
  ))
  const first = yield* client
  yield* Effect.orDie(Effect.provideService(PgPools.migrate, SqlClient.SqlClient, first))
  const decl = [Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 8 })])]
  const services = yield* Effect.forEach([0, 1, 2], (i) =>
    Effect.flatMap(i === 0 ? Effect.succeed(first) : client, (sql) =>
      Effect.orDie(Effect.provideService(PgPools.make(decl, { runnerId: `bench-${i}`, pollMin: "2 millis", pollMax: "50 millis" }), SqlClient.SqlClient, sql))))
  const cycle = (i: number) => Effect.scoped(services[i % 3]!.acquire("llm"))
  const UNC = 1_000
  const FIB = 8
  const CYC = 150
  const cpu0 = process.cpuUsage()
  const unc = yield* time(Effect.forEach(Array.from({ length: UNC }, (_, i) => i), (i) => cycle(i), { discard: true }))
  const cpu1 = process.cpuUsage(cpu0)
  const cpu2 = process.cpuUsage()
  const con = yield* time(Effect.forEach(Array.from({ length: 3 * FIB }, (_, f) => f), (f) =>
    Effect.forEach(Array.from({ length: CYC }), () => cycle(f), { discard: true }), { concurrency: "unbounded", discard: true }))
  const cpu3 = process.cpuUsage(cpu2)
  const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000
  console.log(JSON.stringify({
    bench: "pool.pg",
    clients: 3,
    capacity: 8,
    uncontended_per_s: Math.round(UNC / (unc / 1000)),
    uncontended_cpu_ms_per_cycle: +(cpuMs(cpu1) / UNC).toFixed(3),
    contended_fibers: 3 * FIB,
    contended_per_s: Math.round((3 * FIB * CYC) / (con / 1000)),
    contended_cpu_ms_per_cycle: +(cpuMs(cpu3) / (3 * FIB * CYC)).toFixed(3)
  }))
})

const main = process.argv.includes("--pg") ? Effect.zipRight(program, Effect.scoped(pgCase)) : program

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
