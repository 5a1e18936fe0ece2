/**
 * Issue 17, step 1 of docs/scale-out.md "Design: windows claimed whole": with window claims on,
 * a window of pipelines is claimed whole (a row per pipeline, a token, a TTL on the database's clock),
 * read once, and its tasks run without a task claim, a fence statement or an input read; a
 * local deadline on the process's clock, checked in memory before each call, fences a runner
 * that froze or lost the database (`windowClaims.ts`, `window.ts`).
 *
 * Two task environments (each with its own window claims service) stand for two runner
 * processes over one Postgres database; "frozen past the TTL" is the holder's row aged in the
 * database and its local deadline passed with `TestClock`.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Duration, Effect, Either, Exit, Fiber, Layer, Option, Redacted, Schedule, Scope, TestClock } from "effect"
import { StoreUnavailable } from "../../src/domain/Errors.js"
import type { RunId } from "../../src/domain/Ids.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as ArtifactBackends from "../../src/layers/ArtifactBackends.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as PgPools from "../../src/layers/PgPools.js"
import * as PgStore from "../../src/layers/PgStore.js"
import { make as makeBus } from "../../src/services/Bus.js"
import { makeTaskEnv } from "../../src/services/internal/cluster/task.js"
import { runWindow } from "../../src/services/internal/cluster/window.js"
import * as WindowClaims from "../../src/services/internal/cluster/windowClaims.js"
import * as Gates from "../../src/services/internal/pool/pg/pools.js"
import { windowKey } from "../../src/services/internal/cluster/workflow.js"
import * as Pool from "../../src/services/Pool.js"
import * as Rows from "../../src/services/internal/runner/rows.js"
import { Store, type StoreService } from "../../src/services/Store.js"
import { type AnySpec, admitUnder, assertSucceeded, createClusterDatabase, drive, singleRunner, submitSpecs, turn } from "../support/clusterRunner.js"
import { usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const pgLayer = (db: string) =>
  Layer.unwrapEffect(Effect.promise(async () => {
    await pg.createDatabase(db)
    return PgClient.layer({ url: Redacted.make(pg.url(db)) })
  }))

/** The window claims of one "process" on the client in context (table created), on its clock. */
const claimsOn = (options: { readonly ttl: Duration.DurationInput; readonly heartbeat: Duration.DurationInput }) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* WindowClaims.createTable
    return WindowClaims.make(sql, { ...options, clock: yield* Effect.clock })!
  })

/** Ages every window claim past any TTL (as if its holder froze for an hour). */
const ageWindowClaims = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql.unsafe(`UPDATE ${WindowClaims.TABLE} SET expires_at = now() - interval '1 hour' WHERE token IS NOT NULL`)
)

/** Turns until `check` holds. */
const until = (check: () => boolean) => Effect.repeat(turn, { until: check })

/** Opens run `runId` in `store` and admits `specs` under it (their seeds included), written through. */
const admitAll = (store: StoreService, specs: ReadonlyArray<AnySpec>, runId: RunId) =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    yield* store.openRun({ runId, label: null, config: {}, startedAt: now, meta: undefined })
    yield* store.admit(
      specs.map((spec) => Rows.admissionRow(spec, 0, undefined, runId, now)),
      specs.map((spec) => Rows.seedArtifact(spec, runId, now))
    )
    yield* store.flush
  })

const counter = () => {
  const calls = new Map<string, number>()
  return {
    calls,
    add: (key: string) => calls.set(key, (calls.get(key) ?? 0) + 1),
    of: (key: string) => calls.get(key) ?? 0
  }
}

describe("cluster window claims", () => {
  it.scoped("L3: a renewal that fails is not a loss (the claim runs to its local deadline); an answer naming another token is", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const wc = yield* claimsOn({ ttl: "1 minute", heartbeat: "10 seconds" })
      const other = yield* claimsOn({ ttl: "1 minute", heartbeat: "10 seconds" })
      const won = yield* wc.claim(["w1"], "A")
      assert.deepStrictEqual(won, { won: true, tookOver: false })
      // a live claim is not won by another token
      assert.isFalse((yield* other.claim(["w1"], "B")).won)
      // the deadline: the claim's start on the local clock, plus the TTL, less the margin (2 s)
      const start = yield* Clock.currentTimeMillis
      assert.strictEqual(wc.deadline("A"), start + 60_000 - 2_000)
      assert.isTrue(wc.live("A"))
      // the database cannot be reached (its table is away): the renewal fails, nothing changes
      yield* sql.unsafe(`ALTER TABLE ${WindowClaims.TABLE} RENAME TO away`)
      yield* TestClock.adjust("30 seconds")
      yield* wc.renewAll
      assert.strictEqual(wc.deadline("A"), start + 58_000)
      yield* TestClock.adjust("27 seconds")
      assert.isTrue(wc.live("A"), "live until the deadline")
      yield* TestClock.adjust("1 second")
      assert.isFalse(wc.live("A"), "not live past the deadline: nothing more is called")
      // back: a renewal that succeeds gives a new deadline from when it was sent
      yield* sql.unsafe(`ALTER TABLE away RENAME TO ${WindowClaims.TABLE}`)
      yield* wc.renewAll
      assert.isTrue(wc.live("A"))
      assert.strictEqual(wc.deadline("A"), start + 58_000 + 58_000)
      // taken over (its row expired in the database): the next renewal's answer is a loss at once
      yield* ageWindowClaims
      const takeover = yield* other.claim(["w1"], "B")
      assert.deepStrictEqual(takeover, { won: true, tookOver: true })
      yield* wc.renewAll
      assert.isFalse(wc.live("A"))
      // the holder's release frees the row; another token's release is a no-op
      yield* wc.release("A")
      assert.isFalse((yield* wc.claim(["w1"], "C")).won)
      yield* other.release("B")
      assert.deepStrictEqual(yield* wc.claim(["w1"], "C"), { won: true, tookOver: false })
    }).pipe(Effect.provide(pgLayer("window_l3"))), 180_000)

  it.scoped("a window claimed by one runner is not run by another while its claim is live; the other returns the holder's verdicts", () =>
    Effect.gen(function*() {
      const count = counter()
      const gate = yield* Deferred.make<void>()
      const a = Task.make("a", (n: number, ctx) =>
        Effect.zipRight(Effect.sync(() => count.add(`a/${ctx.pipelineId}`)), Effect.as(Deferred.await(gate), n + 1)))
      const b = Task.make("b", (n: number, ctx) => Effect.sync(() => (count.add(`b/${ctx.pipelineId}`), n * 2)))
      const template = Pipeline.make("held", a, b)
      const specs: ReadonlyArray<AnySpec> = [template.bind(1), template.bind(2)]
      const store = yield* Store
      const pools = yield* Pool.Pools
      yield* admitAll(store, specs, "run-h" as RunId)
      const key = windowKey({ pipelineIds: specs.map((s) => s.pipelineId) })
      const runner = Effect.gen(function*() {
        const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
        const claims = yield* claimsOn({ ttl: "1 hour", heartbeat: "1 second" })
        return { env, claims }
      })
      const r1 = yield* runner
      const r2 = yield* runner
      const first = yield* Effect.fork(runWindow(r1.env, r1.claims, undefined, key, specs))
      yield* until(() => count.of(`a/${specs[0]!.pipelineId}`) + count.of(`a/${specs[1]!.pipelineId}`) === 2)
      // runner 2 is asked to run the same window (its shard moved, a replay): it waits
      const second = yield* Effect.fork(runWindow(r2.env, r2.claims, undefined, key, specs))
      for (let i = 0; i < 5; i++) {
        yield* TestClock.adjust("1 second")
        yield* turn
      }
      assert.strictEqual(count.calls.size, 2, "only runner 1's two calls of task a")
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* Fiber.join(first), ["succeeded", "succeeded"])
      // runner 2 sees the window settled at its next look: nothing of it was run there
      assert.deepStrictEqual(yield* drive(second, "1 second"), ["succeeded", "succeeded"])
      for (const spec of specs) {
        assert.strictEqual(count.of(`a/${spec.pipelineId}`), 1)
        assert.strictEqual(count.of(`b/${spec.pipelineId}`), 1)
      }
      yield* assertSucceeded(specs)
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), pgLayer("window_held")))
    ), 180_000)

  it.scoped("a window whose activity the engine interrupted (its shard moved) drains: the calls under way commit, nothing more is called there, the claim goes to the new owner", () =>
    Effect.gen(function*() {
      const count = counter()
      const gate = yield* Deferred.make<void>()
      const a = Task.make("a", (n: number, ctx) =>
        Effect.zipRight(Effect.sync(() => count.add(`a/${ctx.pipelineId}`)), Effect.as(Deferred.await(gate), n + 1)))
      const b = Task.make("b", (n: number, ctx) => Effect.sync(() => (count.add(`b/${ctx.pipelineId}`), n * 2)))
      const template = Pipeline.make("moved", a, b)
      const specs: ReadonlyArray<AnySpec> = [template.bind(1), template.bind(2)]
      const store = yield* Store
      const pools = yield* Pool.Pools
      const sql = yield* SqlClient.SqlClient
      yield* admitAll(store, specs, "run-m" as RunId)
      const key = windowKey({ pipelineIds: specs.map((s) => s.pipelineId) })
      const runner = Effect.gen(function*() {
        const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
        const claims = yield* claimsOn({ ttl: "1 hour", heartbeat: "1 second" })
        return { env, claims }
      })
      const r1 = yield* runner
      const r2 = yield* runner
      const activity = yield* Effect.fork(runWindow(r1.env, r1.claims, undefined, key, specs))
      yield* until(() => specs.every((s) => count.of(`a/${s.pipelineId}`) === 1))
      // the window's shard moves: the engine interrupts runner 1's activity while task a is in its call
      yield* Fiber.interrupt(activity)
      yield* Deferred.succeed(gate, undefined)
      // the calls under way finish and commit; runner 1 calls nothing more and gives the claim up
      yield* until(() => !r1.env.windows.has(key))
      assert.strictEqual(count.calls.size, 2, "only the two calls of task a under way at the move")
      const rows = yield* sql<{ token: string | null }>`SELECT token FROM ${sql(WindowClaims.TABLE)}`
      assert.deepStrictEqual(rows.map((r) => r.token), [], "the claim is free for the new owner (its rows deleted)")
      for (const spec of specs) assert.strictEqual(Option.getOrThrow(yield* store.getPipeline(spec.pipelineId)).nTasksDone, 1)
      // the new owner's replay claims the window at once and runs only task b
      assert.deepStrictEqual(yield* drive(yield* Effect.fork(runWindow(r2.env, r2.claims, undefined, key, specs)), "1 second"), [
        "succeeded",
        "succeeded"
      ])
      for (const spec of specs) assert.deepStrictEqual([count.of(`a/${spec.pipelineId}`), count.of(`b/${spec.pipelineId}`)], [1, 1])
      yield* assertSucceeded(specs)
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), pgLayer("window_moved")))
    ), 180_000)

  it.scoped("an activity that comes back to a draining window (its shard came back) stops the drain: the window runs on, each task once", () =>
    Effect.gen(function*() {
      const count = counter()
      const gate = yield* Deferred.make<void>()
      const a = Task.make("a", (n: number, ctx) =>
        Effect.zipRight(Effect.sync(() => count.add(`a/${ctx.pipelineId}`)), Effect.as(Deferred.await(gate), n + 1)))
      const b = Task.make("b", (n: number, ctx) => Effect.sync(() => (count.add(`b/${ctx.pipelineId}`), n * 2)))
      const specs: ReadonlyArray<AnySpec> = [Pipeline.make("back", a, b).bind(1)]
      const store = yield* Store
      const pools = yield* Pool.Pools
      yield* admitAll(store, specs, "run-b" as RunId)
      const key = windowKey({ pipelineIds: specs.map((s) => s.pipelineId) })
      const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      const claims = yield* claimsOn({ ttl: "1 hour", heartbeat: "1 second" })
      const first = yield* Effect.fork(runWindow(env, claims, undefined, key, specs))
      yield* until(() => count.of(`a/${specs[0]!.pipelineId}`) === 1)
      yield* Fiber.interrupt(first)
      // the replay on the same runner (a Postgres restart: the shard's lock lost and taken back)
      const again = yield* Effect.fork(runWindow(env, claims, undefined, key, specs))
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* drive(again, "1 second"), ["succeeded"])
      assert.deepStrictEqual([count.of(`a/${specs[0]!.pipelineId}`), count.of(`b/${specs[0]!.pipelineId}`)], [1, 1])
      yield* assertSucceeded(specs)
    }).pipe(
      Effect.provide(Layer.mergeAll(MemoryStore.layer(), Pool.layer([]), pgLayer("window_back")))
    ), 180_000)

  it.scoped("a runner whose local deadline passed calls nothing more: a zombie granted its lease after a takeover stops before its call", () =>
    Effect.gen(function*() {
      const count = counter()
      const a = Task.make("a", (n: number) => Effect.sync(() => (count.add("a"), n + 1)))
      const b = Task.make("b", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          count.add("b entered")
          const lease = yield* ctx.acquire()
          count.add("b")
          yield* lease.report({ ok: true })
          return n * 10
        }))
      const spec = Pipeline.make("zombiewin", a, b).bind(4)
      const store = yield* Store
      const pools = yield* Pool.Pools
      yield* admitUnder(store, spec, "run-z" as RunId)
      const key = windowKey({ pipelineIds: [spec.pipelineId] })
      // the pool's only slot is busy: task b will wait for it
      const blocker = yield* Effect.forkScoped(Effect.scoped(Effect.zipRight(pools.acquire("llm"), Effect.never)))
      const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 2 })
      const mine = yield* claimsOn({ ttl: "1 hour", heartbeat: "10 seconds" })
      const zombie = yield* Effect.fork(runWindow(env, mine, undefined, key, [spec]))
      yield* until(() => count.of("b entered") === 1)
      assert.strictEqual(count.of("a"), 1)
      // the runner freezes (no renewal) past its local deadline (1 hour less 2 s); its row
      // expires and another runner claims the window
      yield* TestClock.adjust("3599 seconds")
      yield* ageWindowClaims
      const other = yield* claimsOn({ ttl: "1 hour", heartbeat: "10 seconds" })
      assert.deepStrictEqual(yield* other.claim([spec.pipelineId], "OTHER"), { won: true, tookOver: true })
      // the slot frees: the zombie (first in line) gets the lease, finds its deadline passed and
      // does not call; it waits for the other's claim
      yield* Fiber.interrupt(blocker)
      for (let i = 0; i < 5; i++) {
        yield* TestClock.adjust("10 seconds")
        yield* turn
      }
      assert.strictEqual(count.of("b"), 0, "no call past the deadline")
      // the other runner lets the window go without running it: the first claims it back, reads
      // the stored cursor (task a committed) and runs only task b
      yield* other.release("OTHER")
      assert.deepStrictEqual(yield* drive(zombie, "10 seconds"), ["succeeded"])
      assert.deepStrictEqual([count.of("a"), count.of("b")], [1, 1])
      const final = Option.getOrThrow(yield* store.getArtifact(spec.pipelineId, 1))
      assert.strictEqual(JSON.parse(new TextDecoder().decode(final.payload!)), 50)
    }).pipe(
      Effect.provide(Layer.mergeAll(
        MemoryStore.layer(),
        Pool.layer([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })])]),
        pgLayer("window_zombie")
      ))
    ), 180_000)

  /**
   * A draining window's task that was waiting for a global lease gets it, finds its window no
   * longer live and does not call: no call went out under that lease, so its slot is free again
   * at once. Kept until its TTL (as after an unknown outcome), such slots stalled chaos C4 with
   * both options on (2026-12-04, pg17t): after a full restart, draining windows' waiters took
   * five of the six slots the moment the dead runners' slots expired and held them another TTL
   * (30 s), and the run went on one call at a time.
   */
  const drainedWaiter = (blocks: boolean) =>
    Effect.gen(function*() {
      const count = counter()
      const a = Task.make("a", (n: number) => Effect.sync(() => (count.add("a"), n + 1)))
      const b = Task.make("b", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          count.add("b entered")
          const lease = yield* ctx.acquire()
          count.add("b")
          yield* lease.report({ ok: true })
          return n * 10
        }))
      const spec = Pipeline.make(blocks ? "drainblock" : "drainslot", a, b).bind(4)
      const store = yield* Store
      yield* PgPools.migrate
      // one slot, held for an hour when it is not given back
      const pools = yield* PgPools.make([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })])], {
        runnerId: "r1",
        leaseTtl: "1 hour",
        renewEvery: "10 minutes"
      })
      if (blocks) yield* Gates.gateOf(pools)!.enableBlocks(1)
      yield* admitUnder(store, spec, "run-d" as RunId)
      const key = windowKey({ pipelineIds: [spec.pipelineId] })
      // the pool's only slot is busy: task b will wait for it
      const busy = yield* Scope.make()
      const held = yield* Scope.extend(pools.acquire("llm"), busy)
      assert.strictEqual(Gates.fromBlock(held), blocks, "served from a block only with block leases")
      const env = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 2 })
      const claims = yield* claimsOn({ ttl: "1 hour", heartbeat: "10 seconds" })
      const activity = yield* Effect.fork(runWindow(env, claims, undefined, key, [spec]))
      yield* until(() => count.of("b entered") === 1)
      // the window's shard moves: the engine interrupts its activity, the window drains
      yield* Fiber.interrupt(activity)
      // the busy slot comes back after a completed call: task b gets it, finds its window
      // draining, and stops before its call; the drained window ends
      yield* Scope.close(busy, Exit.void)
      while (env.windows.has(key)) {
        yield* TestClock.adjust("100 millis")
        yield* turn
      }
      assert.deepStrictEqual([count.of("a"), count.of("b")], [1, 0], "no call of task b")
      // its slot is free for the next acquire, not held until its TTL (an hour)
      const next = yield* Effect.fork(Effect.either(Effect.scoped(pools.acquire({ pool: "llm", timeout: "1 minute" }))))
      const got = yield* drive(next, "1 second")
      assert.isTrue(Either.isRight(got), `the slot of the lease granted to the drained task comes back: ${Either.isLeft(got) ? got.left._tag : ""}`)
    })

  it.scoped("a draining window's task granted a lease after the drain began gives its slot back at once (a slot per task)", () =>
    drainedWaiter(false).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("window_drain_slot")))), 180_000)

  it.scoped("a draining window's task granted a lease after the drain began gives its slot back to the block at once (block leases)", () =>
    drainedWaiter(true).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("window_drain_block")))), 180_000)

  /**
   * The release point of a windowed task's lease: a slot (of a block, or claimed on its own)
   * goes back when the task's call completes, not after its checkpoint's group commit
   * (issue 17: early release only after a completed call). Held through the commit (as until
   * pg17x, block leases), most acquires waited for commits rather than for calls (BENCHMARKS.md
   * "pg17v"). An interrupted call (unknown outcome) still keeps its slot until its TTL.
   *
   * One slot of capacity 1 (TTL one hour); the store's checkpoint of the task waits on a gate.
   */
  const releasePoint = (blocks: boolean, interrupted: boolean) =>
    Effect.gen(function*() {
      const count = counter()
      const b = Task.make("b", { resource: "llm", retry: { maxAttempts: 1 } }, (n: number, ctx) =>
        Effect.gen(function*() {
          yield* ctx.acquire()
          count.add("b")
          // the interrupted variant's call never answers
          if (interrupted) return yield* Effect.never
          return n * 10
        }))
      const spec = Pipeline.make(`release${blocks ? "block" : "slot"}${interrupted ? "int" : ""}`, b).bind(4)
      const base = yield* Store
      const commit = yield* Deferred.make<void>()
      const committing = counter()
      // the checkpoint's commit waits for the test's gate
      const store: StoreService = {
        ...base,
        checkpoint: (unit) =>
          Effect.zipRight(Effect.zipRight(Effect.sync(() => committing.add("c")), Deferred.await(commit)), base.checkpoint(unit))
      }
      yield* PgPools.migrate
      const pools = yield* PgPools.make([Pool.make("llm", [Resource.make("llm", { id: "k", capacity: 1 })])], {
        runnerId: "r1",
        leaseTtl: "1 hour",
        renewEvery: "10 minutes"
      })
      if (blocks) yield* Gates.gateOf(pools)!.enableBlocks(1)
      yield* admitUnder(store, spec, "run-r" as RunId)
      const key = windowKey({ pipelineIds: [spec.pipelineId] })
      const processScope = yield* Scope.make()
      const env = yield* Scope.extend(makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 2 }), processScope)
      const claims = yield* claimsOn({ ttl: "1 hour", heartbeat: "10 seconds" })
      const window = yield* Effect.fork(runWindow(env, claims, undefined, key, [spec]))
      yield* until(() => count.of("b") === 1)
      if (interrupted) {
        // the runner process stops mid-call: the execution is interrupted (an unknown outcome)
        yield* Fiber.interrupt(window)
        yield* Scope.close(processScope, Exit.void)
        const next = yield* Effect.fork(Effect.either(Effect.scoped(pools.acquire({ pool: "llm", timeout: "1 minute" }))))
        const got = yield* drive(next, "1 second")
        assert.isTrue(Either.isLeft(got) && got.left._tag === "AcquireTimeout", "the interrupted call's slot is kept (until its TTL, an hour)")
        return
      }
      // the call has returned; its checkpoint waits: the slot is free for another acquire already
      const next = yield* Effect.fork(Effect.either(Effect.scoped(pools.acquire({ pool: "llm", timeout: "1 minute" }))))
      const got = yield* drive(next, "1 second")
      assert.isTrue(Either.isRight(got), `the slot comes back at the call's end: ${Either.isLeft(got) ? got.left._tag : ""}`)
      assert.strictEqual(committing.of("c"), 1, "the checkpoint's commit was under way")
      assert.strictEqual(Option.getOrThrow(yield* base.getPipeline(spec.pipelineId)).nTasksDone, 0, "and not committed")
      yield* Deferred.succeed(commit, undefined)
      assert.deepStrictEqual(yield* drive(window, "1 second"), ["succeeded"])
      assert.strictEqual(count.of("b"), 1)
      yield* Scope.close(processScope, Exit.void)
    })

  it.scoped("a windowed task's block slot goes back when its call completes, before its checkpoint commits (block leases)", () =>
    releasePoint(true, false).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("window_release_block")))), 180_000)

  it.scoped("a windowed task's slot goes back when its call completes, before its checkpoint commits (a slot per task)", () =>
    releasePoint(false, false).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("window_release_slot")))), 180_000)

  it.scoped("a windowed task's interrupted call keeps its block slot until its TTL (block leases)", () =>
    releasePoint(true, true).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("window_release_block_int")))), 180_000)

  it.scoped("a windowed task's interrupted call keeps its slot until its TTL (a slot per task)", () =>
    releasePoint(false, true).pipe(Effect.provide(Layer.mergeAll(MemoryStore.layer(), pgLayer("window_release_slot_int")))), 180_000)

  it.live("a stale claim is taken over: one read of the window (rows and last checkpoints), only the tasks not committed run again", () =>
    Effect.gen(function*() {
      const count = counter()
      const a = Task.make("a", (n: number, ctx) => Effect.sync(() => (count.add(`a/${ctx.pipelineId}`), n + 1)))
      // task b's first call never returns (its runner froze inside it); later calls do
      const b = Task.make("b", (n: number, ctx) =>
        Effect.suspend(() => {
          count.add(`b/${ctx.pipelineId}`)
          return count.of(`b/${ctx.pipelineId}`) === 1 ? Effect.never : Effect.succeed(n * 2)
        }))
      const c = Task.make("c", (n: number, ctx) => Effect.sync(() => (count.add(`c/${ctx.pipelineId}`), n + 100)))
      const template = Pipeline.make("takeover", a, b, c)
      const specs: ReadonlyArray<AnySpec> = [template.bind(1), template.bind(2)]
      const url = pg.url("window_takeover")
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      const sql = yield* SqlClient.SqlClient
      const pools = yield* Pool.Pools
      yield* admitAll(store, specs, "run-t" as RunId)
      const key = windowKey({ pipelineIds: specs.map((s) => s.pipelineId) })
      const env1 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      const wc1 = yield* claimsOn({ ttl: "1 hour", heartbeat: "1 second" })
      const frozen = yield* Effect.fork(runWindow(env1, wc1, sql, key, specs))
      yield* until(() => specs.every((s) => count.of(`b/${s.pipelineId}`) === 1))
      // runner 1 froze inside task b; its claim expires; runner 2 replays the window
      yield* ageWindowClaims
      const env2 = yield* makeTaskEnv({ store, pools, bus: yield* makeBus, concurrency: 8 })
      const wc2 = yield* claimsOn({ ttl: "1 hour", heartbeat: "1 second" })
      const verdicts = yield* runWindow(env2, wc2, sql, key, specs)
      assert.deepStrictEqual(verdicts, ["succeeded", "succeeded"])
      for (const spec of specs) {
        // a committed before the freeze: not called again; b called by both; c once
        assert.deepStrictEqual(
          [count.of(`a/${spec.pipelineId}`), count.of(`b/${spec.pipelineId}`), count.of(`c/${spec.pipelineId}`)],
          [1, 2, 1]
        )
      }
      yield* assertSucceeded(specs).pipe(Effect.provideService(Store, store))
      const out = Option.getOrThrow(yield* store.getArtifact(specs[1]!.pipelineId, 2))
      assert.strictEqual(JSON.parse(new TextDecoder().decode(out.payload!)), (2 + 1) * 2 + 100)
      yield* Fiber.interrupt(frozen)
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(ArtifactBackends.layerInline, Pool.layer([]), pgLayer("window_takeover")))), 180_000)

  // guards that a pipeline's failure does not cut a sibling's call: a windowed task runs in its
  // pipeline's fiber (pg17ac), and the window's pipelines end each on its own (pg17v saw the
  // call interrupted mid-call when the window's fibers failed fast)
  it.live("a pipeline of the window that fails (its store unreachable past L5) does not stop another's call under way: the window fails, the call commits", () =>
    Effect.gen(function*() {
      const count = counter()
      const release = yield* Deferred.make<void>()
      // pipeline 1's task is called and held until released; pipeline 2's commit cannot reach the store
      const a = Task.make("a", (n: number, ctx) =>
        Effect.suspend(() => {
          count.add(`a/${ctx.pipelineId}`)
          return n === 1 ? Effect.as(Deferred.await(release), n + 1) : Effect.succeed(n + 1)
        }))
      const template = Pipeline.make("sibling", a)
      const specs: ReadonlyArray<AnySpec> = [template.bind(1), template.bind(2)]
      const url = pg.url("window_sibling")
      yield* PgStore.migrate(url)
      const store = yield* PgStore.make({ url })
      const sql = yield* SqlClient.SqlClient
      yield* admitAll(store, specs, "run-s" as RunId)
      const broken = specs[1]!.pipelineId
      let refused = 0
      const failing: StoreService = {
        ...store,
        checkpoint: (unit) =>
          unit.pipelineId === broken
            ? Effect.suspend(() => {
              refused++
              return Effect.fail(new StoreUnavailable({ message: "unreachable (test)" }))
            })
            : store.checkpoint(unit)
      }
      const env = yield* makeTaskEnv({
        store: failing,
        pools: yield* Pool.Pools,
        bus: yield* makeBus,
        concurrency: 8,
        infraRetry: Schedule.recurs(0)
      })
      const wc = yield* claimsOn({ ttl: "1 hour", heartbeat: "1 second" })
      const key = windowKey({ pipelineIds: specs.map((s) => s.pipelineId) })
      const window = yield* Effect.fork(runWindow(env, wc, sql, key, specs))
      yield* until(() => count.of(`a/${specs[0]!.pipelineId}`) === 1 && count.of(`a/${broken}`) === 1)
      // pipeline 2 has failed by now (its commit refused, no retry left); pipeline 1's call goes on
      yield* until(() => refused === 1)
      yield* Effect.sleep("50 millis") // the failure reaches the window's fibers
      yield* Deferred.succeed(release, undefined)
      const exit = yield* Fiber.await(window)
      assert.isTrue(Exit.isFailure(exit), "the window fails with the store's error")
      const row = Option.getOrThrow(yield* store.getPipeline(specs[0]!.pipelineId))
      assert.strictEqual(row.state, "succeeded", "the call under way committed")
      assert.strictEqual(count.of(`a/${specs[0]!.pipelineId}`), 1)
    }).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(ArtifactBackends.layerInline, Pool.layer([]), pgLayer("window_sibling")))), 180_000)

  it.live("end to end: a runner with window claims runs submitted windows; each window's claim is released when it ends", () => {
    const count = counter()
    const template = Pipeline.make(
      "e2e",
      Task.make("a", (n: number, ctx) => Effect.sync(() => (count.add(`a/${ctx.pipelineId}`), n + 1))),
      Task.make("b", (n: number, ctx) => Effect.sync(() => (count.add(`b/${ctx.pipelineId}`), n * 2)))
    )
    const specs = Array.from({ length: 6 }, (_, i) => template.bind(i))
    return Effect.gen(function*() {
      yield* createClusterDatabase(pg, "window_e2e")
      const summary = yield* submitSpecs(specs, { window: 4 }).pipe(
        Effect.provide(singleRunner(pg, "window_e2e", { specs, workflow: { concurrency: 8, windowClaims: true } }))
      )
      assert.strictEqual(summary.succeeded, 6)
      yield* assertSucceeded(specs)
      for (const spec of specs) assert.deepStrictEqual([count.of(`a/${spec.pipelineId}`), count.of(`b/${spec.pipelineId}`)], [1, 1])
      const { inflight, rows } = yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        return {
          rows: yield* sql.unsafe<{ pipeline_key: string; token: string | null }>(`SELECT pipeline_key, token FROM ${WindowClaims.TABLE}`),
          inflight: yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM assay_cluster_inflight`)
        }
      }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(pg.url("window_e2e")) })))
      // a claim row per pipeline while its window runs, deleted when the window ends
      assert.deepStrictEqual(rows, [], "released")
      // no task claim was taken
      assert.strictEqual(inflight[0]!.n, 0)
    }).pipe(Effect.provide(MemoryStore.layer()), Effect.scoped)
  }, 180_000)
})
