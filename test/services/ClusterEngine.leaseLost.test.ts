/**
 * Issue 17: a global pool slot lost *while* a task's call runs. Runner r1's renewals fail (it is
 * cut off from Postgres) until the lease's local deadline passes mid-call; the slot then
 * expires in the database and runner r2 claims it and calls. Before, r1's call went on (and r1
 * still counted the slot as its own), so the provider saw two calls at once on a resource of
 * capacity 1. Now the lease is marked lost at its local deadline (which keeps a margin before
 * the database's expiry): the attempt holding it fails with `LeaseLost` and its call is
 * stopped, a `lease.lost` event names the resource and the lease, the slot is not given back
 * (r2 holds it), and the attempt's row says `LeaseLost` (retryable: the task is retried).
 *
 * The runners' logic runs on the test clock; the database's clock barely moves (TTLs of
 * seconds), so "the slot expired" is written by the test, as a database would after the TTL.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Ref, TestClock } from "effect"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type { ResourceEvent } from "../../src/domain/PoolEvent.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as PgPools from "../../src/layers/PgPools.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import * as Claims from "../../src/services/internal/cluster/inflight.js"
import { makeTaskEnv, runTask } from "../../src/services/internal/cluster/task.js"
import * as Pool from "../../src/services/Pool.js"
import { breakable, eventually } from "../support/breakableSql.js"
import { admitUnder, pgServicesOn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pools = [Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })])]

/** The provider's view: calls in flight on its one resource, and the most at once. */
const fakeProvider = Effect.gen(function*() {
  const inFlight = yield* Ref.make(0)
  const peak = yield* Ref.make(0)
  const open = yield* Deferred.make<void>()
  /** One call: in flight until the test opens the provider (or the caller stops it). */
  const call = Effect.acquireUseRelease(
    Effect.flatMap(Ref.updateAndGet(inFlight, (n) => n + 1), (n) => Ref.update(peak, (p) => Math.max(p, n))),
    () => Deferred.await(open),
    () => Ref.update(inFlight, (n) => n - 1)
  )
  return { inFlight, peak, open, call }
})

describe("cluster: a global slot lost during the call", () => {
  it.effect("the lease's local deadline passing mid-call stops the call and records lease.lost; the slot, now another runner's, is not released; in flight never above capacity", () => {
    const db = "lease_lost_mid_call"
    const url = pg.url(db)
    return Effect.gen(function*() {
      const real = yield* SqlClient.SqlClient
      yield* Claims.createTable
      yield* PgPools.migrate
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      // r1's pools on a client the test can cut off; TTL 20 s: local deadline 19 s after the grant
      const cut = breakable(real)
      const timing = { leaseTtl: "20 seconds", renewEvery: "5 seconds", pollMin: "5 millis", pollMax: "50 millis" } as const
      const r1 = yield* Effect.provideService(PgPools.make(pools, { runnerId: "r1", ...timing }), SqlClient.SqlClient, cut.sql)
      const r2 = yield* PgPools.make(pools, { runnerId: "r2", ...timing })
      const events: Array<ResourceEvent> = []
      yield* r1.listen((e) => Effect.sync(() => events.push(e)))
      const provider = yield* fakeProvider
      const ask = Task.make("ask", { resource: "llm", retry: { maxAttempts: 3, base: "100 millis" } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const lease = yield* ctx.acquire()
          yield* provider.call
          yield* lease.report({ ok: true })
          return n * 10
        }))
      const spec = Pipeline.make("lost", ask).bind(4)
      yield* admitUnder(store, spec, "run-l" as RunId)
      const claims = Claims.make(real, { ttl: "1 minute", heartbeat: "1 second" })!
      const storeHere = yield* claims.holdsStore(yield* store.storeId!)
      const env = yield* makeTaskEnv({ store, pools: r1, bus: yield* makeBus, concurrency: 2, claims, storeHere })
      const running = yield* Effect.fork(runTask(env, spec, 0))
      // r1's call is out under the only slot
      assert.isTrue(yield* eventually(Effect.map(Ref.get(provider.inFlight), (n) => n === 1), 20_000), "r1's call started")
      const slotRow = Effect.orDie(Effect.map(
        real<{ holder: string | null; lease_id: string | null }>`SELECT holder, lease_id::text AS lease_id FROM assay_pool_slot WHERE pool = 'llm'`,
        (rows) => rows[0]!
      ))
      const r1Lease = (yield* slotRow).lease_id
      // r1 is cut off from Postgres: its renewals fail until its local deadline (19 s) passes
      cut.state.broken = true
      for (let i = 0; i < 4; i++) {
        yield* TestClock.adjust("5 seconds")
        yield* eventually(Effect.succeed(false), 5)
      }
      // the call is stopped at the deadline, before the database lets the slot go
      assert.isTrue(yield* eventually(Effect.map(Ref.get(provider.inFlight), (n) => n === 0), 20_000), "r1's call stopped at its lease's deadline")
      const lost = events.filter((e) => e.kind === "lease.lost")
      assert.strictEqual(lost.length, 1, "one lease.lost event")
      assert.strictEqual(lost[0]!.resourceId, "k")
      assert.strictEqual(lost[0]!.data["leaseId"], r1Lease)
      assert.strictEqual(lost[0]!.data["reason"], "deadline")
      assert.isAtLeast(Number(lost[0]!.data["lateMs"]), 0)
      // r1 counts the slot as free locally again
      assert.strictEqual((yield* r1.stats("llm")).active, 0)
      // the TTL runs out in the database; r2 claims the slot and calls
      yield* Effect.orDie(real`UPDATE assay_pool_slot SET expires_at = now() - interval '1 second' WHERE pool = 'llm'`)
      const r2Lease = yield* r2.acquireRaw("llm")
      const r2Call = yield* Effect.fork(provider.call)
      assert.isTrue(yield* eventually(Effect.map(Ref.get(provider.inFlight), (n) => n >= 1), 20_000), "r2's call started")
      // r1 is back: it never gives back the slot r2 holds
      cut.state.broken = false
      for (let i = 0; i < 3; i++) {
        yield* TestClock.adjust("1 second")
        yield* eventually(Effect.succeed(false), 5)
      }
      assert.strictEqual((yield* slotRow).holder, "r2", "the slot stays r2's")
      assert.strictEqual(yield* Ref.get(provider.peak), 1, "never more calls in flight than the capacity")
      // the attempt cut short says why (its row is written before the retry's delay)
      const attempts = real<{ outcome: string; error_type: string | null }>`SELECT outcome, error_type FROM assay_attempts WHERE pipeline_id = ${spec.pipelineId} ORDER BY attempt_no`
      assert.isTrue(
        yield* eventually(Effect.zipRight(store.flush, Effect.map(Effect.orDie(attempts), (rows) => rows[0]?.error_type === "LeaseLost")), 20_000),
        "the attempt failed with LeaseLost"
      )
      yield* Deferred.succeed(provider.open, undefined)
      yield* Fiber.join(r2Call)
      yield* r2Lease.report({ ok: true })
      yield* r2Lease.releaseNow
      yield* Fiber.interrupt(running)
    }).pipe(
      Effect.scoped,
      Effect.provide(pgServicesOn(pg, db))
    )
  }, 60_000)
})
