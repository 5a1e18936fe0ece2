/**
 * Global pools: the local pools core (waiters, the seven algorithms, health, breakers) with a
 * global capacity gate on Postgres in front of every grant.
 *
 * An acquire lets the local core choose a resource (the algorithm's choice, ranking and
 * fallbacks are the local ones), then claims a slot row of the chosen resource (`FOR UPDATE
 * SKIP LOCKED`, with a TTL; the claim itself checks the global capacity, death, cooldown and
 * throttle) and charges its quota windows. The first try reads nothing else, unless the
 * algorithm ranks by the global view (`leastBusy`); once a claim is refused, each try reads the
 * global view of its pools first (one query: capacity, live leases, dead, cooldown and
 * throttle of every resource, by the server's clock) and offers the local core only the
 * resources free *globally* (a selector `where` over the view). When the
 * claim or a charge fails the local lease is given back and the acquire tries again after a
 * backoff from `Clock` (a full resource is skipped at once; waits are bounded by the acquire's
 * timeout). The granted lease renews its slot in a forked fiber (L3 of the research note):
 * a renewal *error* is not a loss (it is asked again soon), the work keeps its slot until the
 * local deadline counted from before the last successful renewal was sent, less a margin; a
 * renewal that finds the slot taken, or the deadline passing (seen by the fiber, or when the
 * lease ends), fails the lease's `lost` signal with `LeaseLost`, publishes `lease.lost`, and
 * tells the lease's watchers (the cluster engine stops the call). The slot is given
 * back early only after a completed call (a successful scope, an explicit `releaseNow`, or a
 * lease that received a report); after an unknown outcome it is kept until its TTL ends. Slots
 * given back are queued and written together (one statement per flush, at most
 * `releaseDelay` later); a queued slot is still held, and the next acquire of this process on
 * the same resource takes it over in its own claim statement, so that a task's release and the
 * next task's claim cost one statement.
 *
 * Reports drive the local health as before and are mirrored to the shared rows: a throttle
 * (Retry-After), a cooldown, death and revival, so every runner sees them at its next acquire.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Deferred, Duration, Effect, Either, Exit, Fiber, FiberId, FiberRef, Option, Random, Scope } from "effect"
import { AcquireTimeout, ResourceUnavailable } from "../../../../domain/Errors.js"
import type { ConfigError } from "../../../../domain/Errors.js"
import * as AcquireAlgorithm from "../../../AcquireAlgorithm.js"
import type {
  AcquireError,
  AcquireOptions,
  AlgorithmInput,
  Lease,
  LeaseReport,
  ResourceInfo
} from "../../../../domain/Lease.js"
import * as Resource from "../../../../domain/Resource.js"
import type { PoolConfig } from "../../../Pool.js"
import type { Holder, LeakedLease, PoolHandle, PoolsOptions, PoolsService } from "../../../Pools.js"
import { anonymous } from "../state.js"
import { makePools as makeLocal } from "../../../Pools.js"
import { demandOf, type LocalLeases, localLeasesOf, type LocalView, localViewOf, publish, setCeiling } from "../core.js"
import { LeaseLost } from "./errors.js"
import * as Q from "./sql.js"

/** A global quota: at most `limit` of `metric` per `windowMs` window, per resource. */
export interface QuotaRule {
  readonly pool: string
  /** Only this resource (default: each resource of the pool, each with its own counter). */
  readonly resource?: string | undefined
  /** `"requests"` (1 per lease) or a usage key reported with `lease.report({ usage })`. */
  readonly metric: string
  readonly limit: number
  readonly windowMs: number
  /** Charged at acquire before the real count is known (default 1 for requests, else 0). */
  readonly estimate?: number | undefined
}

/** Resolved options of the global pools. */
export interface Settings {
  readonly runnerId: string
  readonly leaseTtlMs: number
  readonly renewEveryMs: number
  readonly pollMinMs: number
  readonly pollMaxMs: number
  readonly quotas: ReadonlyArray<QuotaRule>
  /**
   * The end of a quota window grants nothing: a charge needs at least
   * `min(quotaGuardMs, window / 4)` of its window left, so that the call it allows reaches
   * the provider inside the window it was charged to.
   */
  readonly quotaGuardMs: number
  /**
   * How long a slot given back may wait to be written with others (ms): releases are queued
   * and written in one statement per flush, at most this long after the first of them; a
   * queued slot is still held (nobody else can claim it) and an acquire of this process may
   * take it over in its own claim statement meanwhile (see {@link Gate.queueRelease}).
   */
  readonly releaseDelayMs: number
  /**
   * Block leases: log one line per block at each renewal (`block trace {…}`, JSON, at level
   * Info) with its size, demand, share, the others' demands and what its acquires waited
   * since the previous renewal ({@link TraceStats}); off by default (`ASSAY_BLOCK_TRACE=1`).
   */
  readonly trace?: boolean | undefined
}

/**
 * What the acquires of one pool did between two renewals (block leases, `Settings.trace`):
 * granted, of which from a block, how many waited at all, their total and longest wait (ms,
 * from the acquire's start to its grant, `Clock`), the leases of a block that ended and how
 * long they held their slot in all (ms, from the grant to the slot's return: the call and
 * what the process did around it), the brought-forward top-ups and the rows they claimed,
 * and the rows given back by renewals and by {@link Gate.shedCheck}.
 */
export interface TraceStats {
  granted: number
  fromBlock: number
  waited: number
  waitMs: number
  maxWaitMs: number
  returned: number
  holdMs: number
  early: number
  earlyRows: number
  topUpRows: number
  givenBack: number
}

/**
 * How often a holder above its equal share reads the other runners' demands between renewals
 * (ms, by `Clock`; see {@link Gate.shedCheck}).
 */
export const shedEveryMs = 1_000

const emptyTrace = (): TraceStats => ({
  granted: 0,
  fromBlock: 0,
  waited: 0,
  waitMs: 0,
  maxWaitMs: 0,
  returned: 0,
  holdMs: 0,
  early: 0,
  earlyRows: 0,
  topUpRows: 0,
  givenBack: 0
})

/**
 * One quota charge of a lease: the window it is in (moved by {@link Gate.confirm} when the
 * call goes out after that window), and what is known of the window's end: `leftMs` of it
 * were left when the server accepted the charge, which was sent at local time `sentAt` (so at
 * local time `t` at least `leftMs - (t - sentAt)` are left).
 */
interface QuotaCharge {
  readonly key: { readonly pool: string; readonly resource: string; readonly metric: string }
  readonly limit: number
  readonly windowMs: number
  readonly guardMs: number
  windowStart: string
  leftMs: number
  sentAt: number
  charged: number
  actual: number
}

/**
 * A check joined to the slot claim of an acquire (the cluster engine's fence after a lease,
 * `cluster/task.ts`): when the acquiring fiber has one in {@link currentClaimFence} and its
 * tables live in the pools' database (`here`), the slot is claimed by one statement with the
 * check's parts (`Q.claimWith`: the slot only when `parts.when` holds), and `settle` is told
 * the statement's row and whether a slot was claimed: `true` lets the lease go (it is then
 * {@link fencedAtClaim}), `false` stops the acquire (the slot, if claimed, and the local
 * lease go back) by interrupting it. One statement instead of the claim and a fence after it.
 */
export interface ClaimFence {
  readonly here: (sql: SqlClient.SqlClient) => Effect.Effect<boolean>
  readonly parts: (first: number) => Q.ClaimExtra
  readonly settle: (row: Record<string, unknown> | undefined, claimed: boolean) => Effect.Effect<boolean>
}

/**
 * The {@link ClaimFence} of the acquires of the current fiber (none by default): set with
 * `Effect.locally` around an acquire.
 */
export const currentClaimFence: FiberRef.FiberRef<ClaimFence | undefined> = FiberRef.unsafeMake<ClaimFence | undefined>(undefined)

/** The lease handed out: the local lease, plus its global slot. */
export class PgLease implements Lease<any> {
  done = false
  /** Whether its slot claim carried the acquirer's {@link ClaimFence} (nothing left to fence). */
  fencedAtClaim = false
  reported = false
  renewal: Fiber.RuntimeFiber<void> | undefined
  /**
   * The local deadline (epoch ms, from `Clock`): the local time the last successful claim or
   * renewal was sent, plus the TTL, minus the safety margin ({@link Gate.marginMs}). Past it
   * with no renewal, the slot may have expired in the database and been claimed by another
   * runner: the lease is lost.
   */
  deadline = 0
  /** Why the lease was lost, once it is ({@link Gate.markLost}). */
  lostAs: LeaseLost | undefined
  /** Told once when the lease is lost while still held ({@link onLost}). */
  readonly watchers: Array<(lost: LeaseLost) => void> = []
  /**
   * The block its slot comes from (block leases): no statement of its own, no renewal fiber
   * (the block is renewed as a whole), its deadline the block's.
   */
  block: Block | undefined
  /** When it was granted from its block (`Clock` ms; traced: `Settings.trace`). */
  grantedAt = 0
  constructor(
    readonly inner: Lease<any>,
    readonly claimed: Q.Claimed,
    readonly charges: ReadonlyArray<QuotaCharge>,
    readonly lost: Deferred.Deferred<never, LeaseLost>,
    readonly owner: string | undefined,
    readonly raw: boolean,
    readonly releaseLocal: Effect.Effect<void>,
    readonly gate: Gate
  ) {}
  get id() {
    return this.inner.id
  }
  get pool() {
    return this.inner.pool
  }
  get resource() {
    return this.inner.resource
  }
  get options() {
    return this.inner.options
  }
  get client() {
    return this.inner.client
  }
  get taskName() {
    return this.inner.taskName
  }
  get heldMs() {
    return this.inner.heldMs
  }
  report(report: LeaseReport): Effect.Effect<void> {
    this.reported = true
    return this.gate.report(this, report)
  }
  degrade(reason?: string): Effect.Effect<void> {
    return this.gate.mirror(this.pool, this.resource.id, this.inner.degrade(reason))
  }
  get releaseNow(): Effect.Effect<void> {
    return this.gate.finish(this, true)
  }
}

/** Whether a lease carries a global slot (see `PgPools.guard`). */
export const isPgLease = (lease: Lease<any>): lease is PgLease => lease instanceof PgLease

/**
 * Just before a lease's call: its quota charges moved to the window the call goes out in
 * ({@link Gate.confirm}); nothing for a local lease.
 */
export const confirm = (lease: Lease<any>): Effect.Effect<void> => isPgLease(lease) ? lease.gate.confirm(lease) : Effect.void

/**
 * What the last step before a global lease's call checks (the cluster engine's fence, see
 * `cluster/inflight.ts`): the lease's slot row, its client, and the TTL a renewal writes.
 * `undefined` for a local lease.
 */
export interface SlotFence {
  readonly sql: SqlClient.SqlClient
  readonly pool: string
  readonly resource: string
  readonly slot: number
  readonly leaseId: string
  readonly ttlMs: number
}

/** The slot a global lease holds, for a fence (`undefined` for a local lease). */
export const slotFence = (lease: Lease<any>): SlotFence | undefined =>
  isPgLease(lease)
    ? {
      sql: lease.gate.sql,
      pool: lease.pool,
      resource: lease.resource.id,
      slot: lease.claimed.slot,
      leaseId: lease.claimed.leaseId,
      ttlMs: lease.gate.settings.leaseTtlMs
    }
    : undefined

/**
 * Calls `callback` once if the global lease is lost while it is still held (its renewal found
 * the slot taken, or the local deadline passed with no renewal), at once when it already is;
 * never for a local lease, nor for a loss first seen when the lease ends (the call is over by
 * then). The cluster engine interrupts the attempt holding the lease with it (`cluster/task.ts`).
 */
export const onLost = (lease: Lease<any>, callback: (lost: LeaseLost) => void): Effect.Effect<void> =>
  isPgLease(lease) ? Effect.sync(() => onLostNow(lease, callback)) : Effect.void

/** Whether a global lease's slot claim carried its acquirer's {@link ClaimFence}; `false` for a local lease. */
export const fencedAtClaim = (lease: Lease<any>): boolean => isPgLease(lease) && lease.fencedAtClaim

/**
 * The local deadline of a global lease (epoch ms by `Clock`: past it with no renewal its slot
 * may have expired and been claimed by another runner), `undefined` for a local lease.
 */
export const deadlineOf = (lease: Lease<any>): number | undefined => isPgLease(lease) ? lease.deadline : undefined

/** Whether a global lease is already known lost here (its renewal fiber saw it); `false` for a local lease. */
export const knownLost = (lease: Lease<any>): Effect.Effect<boolean> => Effect.sync(() => lostNow(lease))

/**
 * {@link knownLost}, synchronously: the lease was marked lost ({@link Gate.markLost} sets
 * `lostAs` before it fails the lease's `lost` signal, in the same step). `false` for a local lease.
 *
 * @param lease a lease of any pools service
 */
export const lostNow = (lease: Lease<any>): boolean => isPgLease(lease) && lease.lostAs !== undefined

/**
 * {@link onLost}, synchronously: `callback` is told when the lease is lost while held (at
 * once when it is lost already); nothing for a lease that ended or a local lease.
 *
 * @param lease a lease of any pools service
 * @param callback told the {@link LeaseLost} once
 */
export const onLostNow = (lease: Lease<any>, callback: (lost: LeaseLost) => void): void => {
  if (!isPgLease(lease) || lease.done) return
  if (lease.lostAs === undefined) lease.watchers.push(callback)
  else callback(lease.lostAs)
}

/**
 * Whether {@link confirm} has anything to do for `lease` (a global lease with quota charges);
 * without, the call may go out at once.
 *
 * @param lease a lease of any pools service
 */
export const confirmNeeded = (lease: Lease<any>): boolean => isPgLease(lease) && lease.charges.length > 0

/**
 * A fence found the lease's slot no longer its own (expired and claimed by another holder, or
 * expired): the lease is lost (`taken`) and goes back without giving the slot back (it is
 * not ours); a no-op for a local lease.
 */
export const lostAtFence = (lease: Lease<any>): Effect.Effect<void> =>
  isPgLease(lease)
    ? Effect.zipRight(
      lease.gate.markLost(lease, "taken", true),
      lease.gate.finish(lease, false)
    )
    : Effect.void

/**
 * A block (block leases, issue 17 steps 2 and 3): the slot rows of one resource this runner
 * holds as a whole, claimed together ({@link Q.claimBlock}), renewed together with the
 * runner's window claims, and handed to leases in memory. `deadline` is the local deadline of
 * every slot in it (the local time before the last renewal that succeeded was sent, plus the
 * TTL, less the margin): past it the block calls nothing more. `target` is its size: this
 * runner's demand-proportional share of the capacity ({@link Q.proportionalShare}) as of the
 * last renewal (before the first renewal, the first guess of {@link Q.claimBlock}; 0 for a
 * dead resource); a slot coming back above it, or above the capacity, is given back to the
 * database.
 */
export class Block {
  /** Slots held and not in use. */
  readonly free: Array<Q.Claimed> = []
  /** Slots in use, by slot number, with the lease on each. */
  readonly used = new Map<number, PgLease>()
  deadline = 0
  capacity: number | undefined = undefined
  target = 0
  /** Local time of the last lease taken from it (0: none yet). */
  lastUse = 0
  /** The demand the last renewal wrote for it (its peak since the renewal before, see {@link peak}). */
  demand = 0
  /**
   * The highest demand seen since the last renewal was sent (leases in use + acquires under
   * way: its value then, and after each acquire of its pool started since). A renewal writes
   * this peak, not the demand at the instant it is sent, so that a runner between two windows
   * keeps its block through one renewal (hysteresis): only a runner with no demand for a
   * whole renewal interval gives its rows back.
   */
  peak = 0
  /**
   * The other runners' live demands as last read (runner id → demand; 0 for a runner
   * registered with no demand): by the last renewal, or by the last {@link Gate.shedCheck}.
   */
  others: ReadonlyMap<string, number> = new Map()
  /**
   * How many other runners are live for the resource as last read (their demand rows not
   * expired, 0 included): by the last block claim, renewal or {@link Gate.shedCheck}. With
   * this runner, what the equal share {@link Gate.equalShare} divides the capacity by.
   */
  liveOthers = 0
  /** Local time of the last claim brought forward by waiters ({@link Gate.earlyTopUp}). */
  lastEarly = 0
  constructor(readonly pool: string, readonly resource: string) {}
  /** Slots held: free and in use. */
  get held(): number {
    return this.free.length + this.used.size
  }
}

/** A resource's shared state as the last block renewal read it (local epoch ms). */
interface SharedHealth {
  readonly dead: boolean
  readonly throttledUntil: number
  readonly cooledUntil: number
}

/** The block leases of a gate, once enabled ({@link Gate.enableBlocks}). */
interface BlockMode {
  /**
   * The runners expected to share each resource (`--expected-runners`): only the first guess
   * of a block's size, `⌊capacity ÷ runners⌋`, before a renewal has read the demands; without
   * it the first guess splits the capacity between this runner and the others with a live demand.
   */
  readonly runners: number | undefined
  /** Every block, by `pool \u0000 resource`. */
  readonly blocks: Map<string, Block>
  /** The pools whose blocks are claimed (or being claimed): cleared when a pool goes idle. */
  readonly claimed: Map<string, Deferred.Deferred<void>>
  /** The pools of {@link claimed} whose claim has ended (an acquire need not wait for it). */
  readonly ready: Set<string>
  /** The resources' shared state, by `pool \u0000 resource`, from the last renewal. */
  readonly health: Map<string, SharedHealth>
  /** A resource with an empty block whose per-task claim was refused: not offered until then (local ms). */
  readonly refusedUntil: Map<string, number>
  /** When the previous renewal was sent (a pool with no lease taken since is idle). */
  lastRenewal: number
  /**
   * The resources of the local pools when block leases were enabled: this runner is
   * registered as live for each ({@link Q.registerDemand}), and every renewal writes a demand
   * (0 when it holds no block of it) for each, so that the others' first guesses count it.
   */
  readonly registered: ReadonlyArray<{ readonly pool: string; readonly resource: string }>
}

/**
 * The block leases' part of the runner's renewal statement (`cluster/windowClaims.ts` joins
 * it to the window claims' renewal): `parts` (CTEs, columns, parameters from `first`), and
 * `settle` (the statement's row, the local time it was sent) or `failed` (it did not answer:
 * nothing changes, the blocks run to their deadlines, L3).
 */
export interface BlockRider {
  readonly parts: (first: number) => { readonly ctes: ReadonlyArray<string>; readonly cols: ReadonlyArray<string>; readonly params: ReadonlyArray<unknown> } | undefined
  readonly settle: (row: Record<string, unknown> | undefined, sent: number) => Effect.Effect<void>
}

/** The gate: the global side of every lease. */
export class Gate {
  /** Block leases, once enabled ({@link Gate.enableBlocks}); `undefined`: a slot claim per lease. */
  blockMode: BlockMode | undefined = undefined
  /** Block leases: the acquires under way (not granted yet) per pool, part of its resources' demand. */
  readonly pending = new Map<string, number>()
  readonly leases = new Map<string, Set<PgLease>>()
  readonly quotaBlocked = new Map<string, number>()
  /** The declared default algorithm of each pool. */
  readonly algorithms = new Map<string, AlgorithmInput | AcquireAlgorithm.AcquireAlgorithm | undefined>()
  /**
   * Slots given back and not written yet, by `pool \u0000 resource`, then slot number: each is
   * still held in the database (by its lease, until its TTL at the latest) until a flush
   * writes it or an acquire of this process takes it over ({@link Gate.queueRelease}).
   */
  readonly queued = new Map<string, Map<number, Q.Release>>()
  /** Whether a flush of {@link queued} is scheduled. */
  flushScheduled = false
  /** Set when the service's scope closes: a release is then written at once. */
  closed = false
  /** `Settings.trace`: per pool, what its acquires did since the last renewal. */
  readonly traceStats = new Map<string, TraceStats>()
  constructor(
    readonly sql: SqlClient.SqlClient,
    readonly local: PoolsService,
    readonly settings: Settings,
    readonly scope: Scope.Scope,
    /** The service's Clock (as the local core's): read synchronously on the acquire's path. */
    readonly clock: Clock.Clock
  ) {
    const view = localViewOf(local)
    const leases = localLeasesOf(local)
    if (view === undefined || leases === undefined) throw new Error("global pools: the local pools service is not the local core's")
    this.view = view
    this.localLeases = leases
  }

  /** The local core's pool names and resources, read synchronously (ops17ak: per acquire). */
  readonly view: LocalView
  /** The local core's leases without a Scope, for the acquires that are not raw (ops17am). */
  readonly localLeases: LocalLeases

  /** A local pool's resources not revoked, synchronously (none for an unknown pool). */
  resourcesNow(pool: string): ReadonlyArray<ResourceInfo> {
    return this.view.resources(pool) ?? []
  }

  /**
   * The quota windows of a resource: those it declares itself (`Resource.quotas`, from its
   * config), then those of the options for metrics it does not declare.
   */
  quotaRules(pool: string, info: ResourceInfo): ReadonlyArray<QuotaRule> {
    const own: Array<QuotaRule> = Resource.quotas(info).map((q) => ({ ...q, pool, resource: info.id }))
    const declared = new Set(own.map((q) => q.metric))
    return own.concat(this.settings.quotas.filter((q) =>
      q.pool === pool && (q.resource === undefined || q.resource === info.id) && !declared.has(q.metric)
    ))
  }

  /** Declares every resource of the given pools (rows + slots). */
  declarePool(name: string): Effect.Effect<void, SqlError | never> {
    return Effect.flatMap(
      Effect.orDie(Effect.flatMap(this.local.get(name), (h) => h.resources)),
      (infos) => Effect.forEach(infos, (i) => Q.declare(this.sql, name, i.id, i.capacity), { discard: true })
    )
  }

  nowMs = Effect.clockWith((c) => c.currentTimeMillis)

  /** {@link nowMs}, synchronously (the service's Clock, ops17ak). */
  now(): number {
    return this.clock.unsafeCurrentTimeMillis()
  }

  /**
   * The safety margin of a lease's local deadline (ms): `min(renewEvery, TTL / 20)`, time for
   * the database's clock to run ahead of this process's and for a renewal's round trip.
   */
  get marginMs(): number {
    return Math.min(this.settings.renewEveryMs, this.settings.leaseTtlMs / 20)
  }

  /** Charges every quota rule of a resource; undoes and returns `undefined` on a refusal. */
  chargeAll(pool: string, info: ResourceInfo): Effect.Effect<ReadonlyArray<QuotaCharge> | undefined, SqlError> {
    const resource = info.id
    const rules = this.quotaRules(pool, info)
    if (rules.length === 0) return Effect.succeed([])
    const gate = this
    return Effect.gen(function*() {
      const done: Array<QuotaCharge> = []
      for (const rule of rules) {
        const key = { pool, resource, metric: rule.metric }
        const cost = rule.estimate ?? (rule.metric === "requests" ? 1 : 0)
        const guardMs = Math.min(gate.settings.quotaGuardMs, rule.windowMs / 4)
        const sentAt = yield* gate.nowMs
        const r = yield* Q.charge(gate.sql, key, cost, rule.limit, rule.windowMs, guardMs)
        if (r === undefined) {
          for (const c of done) yield* Effect.ignore(Q.correct(gate.sql, c.key, c.windowStart, -c.charged))
          const left = yield* Q.windowLeftMs(gate.sql, rule.windowMs)
          const now = yield* gate.nowMs
          gate.quotaBlocked.set(`${pool}\u0000${resource}`, now + left)
          return undefined
        }
        done.push({
          key,
          limit: rule.limit,
          windowMs: rule.windowMs,
          guardMs,
          windowStart: r.windowStart,
          leftMs: r.leftMs,
          sentAt,
          charged: cost,
          actual: 0
        })
      }
      return done
    })
  }

  /**
   * Just before the lease's call goes out: every quota charge of the lease must be in the
   * window the call is sent in, with at least its guard left (the time the request still needs
   * to reach the provider). A charge whose window ends sooner (the lease waited between its
   * grant and its call: a store read, a slow event loop) waits for that window's end, then is
   * moved to the current window with the conditional upsert ({@link Q.move}: never over the
   * limit, the old window given back in the same statement); when the current window is full,
   * it waits for the next one. A charge known to be fresh costs no statement. The database
   * unreachable: asks again after a backoff (L5). Bounded by the caller's deadline (the
   * attempt's timeout); interrupted, a charge stays where it is (counted, never under-counted).
   */
  confirm(lease: PgLease): Effect.Effect<void> {
    if (lease.charges.length === 0) return Effect.void
    const gate = this
    return Effect.gen(function*() {
      let n = 0
      while (true) {
        const now = yield* gate.nowMs
        const stale = lease.charges.find((c) => c.leftMs - (now - c.sentAt) < c.guardMs)
        if (stale === undefined) return
        const left = stale.leftMs - (now - stale.sentAt)
        if (left > 0) {
          // its window is still the current one, in its last moments: the call goes in the next
          yield* Effect.sleep(Duration.millis(Math.ceil(left)))
          continue
        }
        const sentAt = yield* gate.nowMs
        const moved = yield* Effect.either(
          Q.move(gate.sql, stale.key, stale.windowStart, stale.charged, stale.limit, stale.windowMs, stale.guardMs)
        )
        if (Either.isLeft(moved)) {
          yield* Effect.logWarning(`global pools: cannot move a quota charge to the current window: ${moved.left.message}`)
          yield* gate.sleepBackoff(n++)
          continue
        }
        if (moved.right === undefined) {
          // refused: the current window is full or ending (or, by the server's clock, still the
          // charged one): wait for its end
          const wait = yield* Effect.either(Q.windowLeftMs(gate.sql, stale.windowMs))
          yield* Either.isLeft(wait) ? gate.sleepBackoff(n++) : Effect.sleep(Duration.millis(Math.max(5, Math.ceil(wait.right))))
          continue
        }
        stale.windowStart = moved.right.windowStart
        stale.leftMs = moved.right.leftMs
        stale.sentAt = sentAt
      }
    })
  }

  /** The resources of every local pool that are free globally now. */
  usable(
    rows: ReadonlyArray<Q.GlobalRow>
  ): Effect.Effect<{ set: Set<ResourceInfo>; dead: Map<string, Set<string>>; rowOf: Map<ResourceInfo, Q.GlobalRow> }> {
    const byKey = new Map<string, Q.GlobalRow>()
    for (const r of rows) byKey.set(`${r.pool}\u0000${r.resource}`, r)
    const gate = this
    return Effect.gen(function*() {
      const now = yield* gate.nowMs
      const set = new Set<ResourceInfo>()
      const dead = new Map<string, Set<string>>()
      const rowOf = new Map<ResourceInfo, Q.GlobalRow>()
      for (const name of yield* gate.local.names) {
        const h = yield* Effect.orDie(gate.local.get(name))
        for (const info of yield* h.resources) {
          const key = `${name}\u0000${info.id}`
          const row = byKey.get(key)
          if (row === undefined) continue
          rowOf.set(info, row)
          if (row.state === "dead") {
            let s = dead.get(name)
            if (s === undefined) dead.set(name, s = new Set())
            s.add(info.id)
            continue
          }
          // a slot this process queued for release is still counted live, and is this process's to take over
          if (row.throttleMs > 0 || row.cooldownMs > 0 || row.inUse - gate.queuedCount(name, info.id) >= row.capacity) continue
          const blocked = gate.quotaBlocked.get(key)
          if (blocked !== undefined) {
            if (blocked > now) continue
            gate.quotaBlocked.delete(key)
          }
          set.add(info)
        }
      }
      return { set, dead, rowOf }
    })
  }

  /**
   * The resources of every local pool not blocked by a quota window this process saw full:
   * what an acquire offers before it has read the global view (the slot claim itself checks
   * capacity, death, cooldown and throttle).
   */
  usableLocally(): Effect.Effect<Set<ResourceInfo>> {
    return Effect.map(this.nowMs, (now) => this.usableAt(now))
  }

  /** {@link usableLocally} at `now`, synchronously. */
  usableAt(now: number): Set<ResourceInfo> {
    const set = new Set<ResourceInfo>()
    for (const name of this.view.names()) {
      for (const info of this.resourcesNow(name)) {
        const key = `${name}\u0000${info.id}`
        const blocked = this.quotaBlocked.get(key)
        if (blocked !== undefined) {
          if (blocked > now) continue
          this.quotaBlocked.delete(key)
        }
        set.add(info)
      }
    }
    return set
  }

  /** Every resource of `pool` matching the selector is dead globally (and there is one). */
  hopeless(pool: string, opts: AcquireOptions, dead: Map<string, Set<string>>): Effect.Effect<boolean> {
    return Effect.map(Effect.orDie(Effect.flatMap(this.local.get(pool), (h) => h.resources)), (infos) => this.hopelessAmong(infos, pool, opts, dead))
  }

  /** {@link hopeless} over `infos` (the pool's resources), synchronously. */
  hopelessAmong(infos: ReadonlyArray<ResourceInfo>, pool: string, opts: AcquireOptions, dead: Map<string, Set<string>>): boolean {
    const d = dead.get(pool)
    if (d === undefined) return false
    const matching = infos.filter((i) => Resource.matches(opts, i))
    return matching.length > 0 && matching.every((i) => d.has(i.id))
  }

  /**
   * Every resource of `pool` matching the user's selector (not the offered free set) is dead or
   * revoked by this process's local health, and at least one is dead: the local core's rule
   * (`hopeless`) over the whole pool. An unknown pool counts as hopeless (the error stands).
   */
  locallyHopeless(pool: string, opts: AcquireOptions): Effect.Effect<boolean> {
    const gate = this
    return Effect.gen(function*() {
      const h = yield* Effect.option(gate.local.get(pool))
      if (Option.isNone(h)) return true
      const infos = yield* h.value.resources
      const states = new Map((yield* h.value.snapshot).map((r) => [r.id, r.state] as const))
      let matching = 0
      let dead = 0
      for (const info of infos) {
        if (!Resource.matches(opts, info)) continue
        matching++
        const state = states.get(info.id)
        if (state === "dead") dead++
        else if (state !== "revoked") return false
      }
      return matching > 0 && dead > 0
    })
  }

  /**
   * `leastBusy` (given by name, without a fallback) ranks by the global load of each resource
   * (live slots of every runner / global capacity) instead of this process's leases.
   */
  globalAlgorithm(
    opts: AcquireOptions,
    holder: Holder,
    target: string | undefined,
    rowOf: Map<ResourceInfo, Q.GlobalRow>
  ): AcquireAlgorithm.AcquireAlgorithm | undefined {
    if (!this.ranksGlobally(opts, holder, target)) return undefined
    const load = (c: AcquireAlgorithm.Candidate) => {
      const row = rowOf.get(c.resource)
      return row === undefined || row.capacity <= 0 ? 1 : row.inUse / row.capacity
    }
    const ranker: AcquireAlgorithm.Ranker = (cs) => cs.slice().sort((a, b) => load(a) - load(b) || a.index - b.index)
    const fallback = AcquireAlgorithm.wait()
    return {
      _tag: "AcquireAlgorithm",
      name: "leastBusy",
      fingerprint: () => ({ name: "leastBusy", fallback: fallback.fingerprint() }),
      acquire: (ops) => fallback.acquire(ops.with({ ranker }))
    }
  }

  /** Whether the acquire's algorithm ranks by the global view (`leastBusy` given by name, without a fallback). */
  ranksGlobally(opts: AcquireOptions, holder: Holder, target: string | undefined): boolean {
    const input = opts.algorithm ?? holder.defaultAlgorithm ?? (target === undefined ? undefined : this.algorithms.get(target))
    const name = typeof input === "string" ? input : input !== undefined && "name" in input && Object.keys(input).length === 1 ? input.name : undefined
    return name === "leastBusy"
  }

  /** The pool an acquire asks for among the local pools `names` (`undefined`: any of them). */
  targetOf(opts: AcquireOptions, holder: Holder, names: ReadonlyArray<string>): string | undefined {
    return opts.pool ?? holder.defaultPool ?? (names.length === 1 ? names[0] : undefined)
  }

  sleepBackoff(n: number): Effect.Effect<void> {
    const base = Math.min(this.settings.pollMaxMs, this.settings.pollMinMs * 2 ** Math.min(n, 16))
    // equal jitter: [base/2, base]
    return Effect.flatMap(Random.nextRange(base / 2, base), (ms) => Effect.sleep(Duration.millis(Math.round(ms))))
  }

  acquireCore(
    options: AcquireOptions | string | undefined,
    holder: Holder,
    raw: boolean
  ): Effect.Effect<PgLease, AcquireError> {
    const gate = this
    const opts: AcquireOptions = typeof options === "string" ? { pool: options } : options ?? {}
    const userWhere = opts.where
    /** The lease this acquire built (its last attempt's): given back if the acquire fails after all. */
    type Built = { lease: PgLease | undefined }
    // the pool names and the acquire's target, resolved once (the block-mode demand count below
    // needs them too: pg17ac)
    const attempt = (pools: ReadonlyArray<string>, target: string | undefined, built: Built): Effect.Effect<PgLease, AcquireError> => Effect.gen(function*() {
      const startedAt = gate.now()
      let n = 0
      // the first try goes without the global view when the algorithm does not rank by it: the
      // slot claim checks capacity, death, cooldown and throttle itself, so the view is read
      // only once a claim was refused (to choose among what is free, and to see a pool dead)
      // block leases: the resources are served from this runner's blocks, in memory (a
      // resource with an empty block by a slot claim per lease); the global view is not read
      const blocks = gate.blockMode
      let viewed = blocks === undefined && gate.ranksGlobally(opts, holder, target)
      while (true) {
        let set: Set<ResourceInfo>
        let algorithm: AcquireAlgorithm.AcquireAlgorithm | undefined = undefined
        if (blocks !== undefined) {
          yield* gate.ensureBlocks(target === undefined ? pools : [target])
          const now = gate.now()
          if (target !== undefined && gate.hopelessAmong(gate.resourcesNow(target), target, opts, gate.deadByBlocks(blocks))) {
            return yield* new ResourceUnavailable({
              pool: target,
              message: `every resource of pool "${target}" that matches the request is dead (shared state)`
            })
          }
          set = gate.blockSetAt(blocks, now)
        } else if (viewed) {
          const rows = yield* Effect.either(Q.view(gate.sql, pools))
          if (Either.isLeft(rows)) {
            // the database is unreachable: wait and ask again (L5); the acquire's timeout bounds it
            yield* Effect.logWarning(`global pools: cannot read the pool rows: ${rows.left.message}`)
            yield* gate.sleepBackoff(n++)
            continue
          }
          const usable = yield* gate.usable(rows.right)
          if (target !== undefined && (yield* gate.hopeless(target, opts, usable.dead))) {
            return yield* new ResourceUnavailable({
              pool: target,
              message: `every resource of pool "${target}" that matches the request is dead (shared state)`
            })
          }
          set = usable.set
          algorithm = gate.globalAlgorithm(opts, holder, target, usable.rowOf)
        } else {
          set = yield* gate.usableLocally()
        }
        const blind = !viewed && blocks === undefined
        // with blocks the local core waits for a slot itself (its ceiling is the block): the
        // local wait is bounded by `pollMax`, then the blocks and the shared state are looked at again
        const pollMs = blocks !== undefined
          ? gate.settings.pollMaxMs
          : Math.min(gate.settings.pollMaxMs, gate.settings.pollMinMs * 2 ** Math.min(n, 16))
        const local: AcquireOptions = {
          ...opts,
          ...(algorithm === undefined ? {} : { algorithm }),
          where: (i: ResourceInfo) => set.has(i) && (userWhere === undefined || userWhere(i)),
          timeout: Duration.millis(pollMs)
        }
        const got = yield* Effect.uninterruptibleMask((restore) =>
          Effect.gen(function*() {
            // a lease that is not raw is the local core's own (`LocalLeases`): a free slot at once
            // with no Effect, else a wait made interruptible inside the core (whatever this
            // region), whose lease comes back with no interruption check after its grant; given
            // back by `releaseLocal` on every path below, or by its owner's reclaim. No Scope of
            // its own (a `Scope.make`/`extend`/`close` per lease before: ops17am). A raw one the
            // same way (`waitRaw`): in `restore(…)` before, an interruption arriving as it was
            // granted was seen when that region ended, the lease dropped held (raw36)
            const now = raw ? undefined : gate.localLeases.now(local, holder)
            const leased = now !== undefined
              ? Either.right(now)
              : yield* Effect.either(raw ? gate.localLeases.waitRaw(local, holder) : gate.localLeases.wait(local, holder))
            const releaseLocal = (lease: Lease<any> | undefined) => lease === undefined ? Effect.void : lease.releaseNow
            if (Either.isLeft(leased)) {
              yield* releaseLocal(undefined)
              const e = leased.left
              if (e._tag === "AcquireTimeout" && e.timeoutMs === pollMs) return Option.none<PgLease>()
              // the local core judged "all dead" over the resources offered (free now): a full but
              // live one elsewhere in the pool means wait, so judge again over all that match.
              // Any other refusal (`immediate` with nothing free offered) stands as it is
              if (
                e._tag === "ResourceUnavailable" && (yield* gate.locallyHopeless(e.pool, local)) &&
                !(yield* gate.locallyHopeless(e.pool, opts))
              ) {
                yield* restore(gate.sleepBackoff(n))
                return Option.none<PgLease>()
              }
              return yield* e
            }
            const lease = leased.right
            const block = blocks?.blocks.get(`${lease.pool}\u0000${lease.resource.id}`)
            if (block !== undefined && block.held > 0) {
              // served from the block, in memory: no statement (the local core's ceiling is the
              // block, so a slot is free); past the block's deadline nothing more is granted
              const now = gate.now()
              const slot = now < block.deadline ? block.free.pop() : undefined
              if (slot === undefined) {
                yield* releaseLocal(lease)
                yield* restore(gate.sleepBackoff(n))
                return Option.none<PgLease>()
              }
              const charges = yield* Effect.either(gate.chargeAll(lease.pool, lease.resource))
              if (Either.isLeft(charges) || charges.right === undefined) {
                block.free.push(slot)
                yield* releaseLocal(lease)
                if (Either.isLeft(charges)) yield* restore(gate.sleepBackoff(n))
                return Option.none<PgLease>()
              }
              const lost = Deferred.unsafeMake<never, LeaseLost>(FiberId.none)
              const pg = new PgLease(lease, slot, charges.right, lost, holder.owner, raw, releaseLocal(lease), gate)
              pg.block = block
              pg.deadline = block.deadline
              pg.grantedAt = now
              block.used.set(slot.slot, pg)
              block.lastUse = now
              if (holder.owner !== undefined) {
                let s = gate.leases.get(holder.owner)
                if (s === undefined) gate.leases.set(holder.owner, s = new Set())
                s.add(pg)
              }
              built.lease = pg
              return Option.some(pg)
            }
            // the deadline counts from before the claim was sent (the server's TTL starts later)
            const sent = yield* gate.nowMs
            const fence = yield* FiberRef.get(currentClaimFence)
            const withFence = fence !== undefined && (yield* fence.here(gate.sql))
            const { pool, resource: { id: resource } } = lease
            const { runnerId, leaseTtlMs } = gate.settings
            const handOver = gate.handOver(pool, resource)
            const taken = (claimed: Q.Claimed | undefined) => {
              if (claimed !== undefined) gate.claimedSlot(pool, resource, claimed.slot)
              return claimed
            }
            const claimed = withFence
              ? yield* Effect.either(Effect.flatMap(
                Q.claimWith(gate.sql, pool, resource, runnerId, leaseTtlMs, handOver, fence.parts(Q.extraFirstParam)),
                ({ claimed, row }) =>
                  Effect.flatMap(fence.settle(row, taken(claimed) !== undefined), (go) =>
                    go
                      ? Effect.succeed(claimed)
                      : Effect.zipRight(
                        Effect.zipRight(
                          claimed === undefined ? Effect.void : gate.queueRelease(pool, resource, claimed),
                          releaseLocal(lease)
                        ),
                        Effect.interrupt
                      ))
              ))
              : yield* Effect.either(Effect.map(Q.claim(gate.sql, pool, resource, runnerId, leaseTtlMs, handOver), taken))
            if (Either.isLeft(claimed) || claimed.right === undefined) {
              yield* releaseLocal(lease)
              if (blocks !== undefined) {
                // an empty block's resource, full globally: offered again after a backoff
                const now = yield* gate.nowMs
                const base = Math.min(gate.settings.pollMaxMs, gate.settings.pollMinMs * 2 ** Math.min(n, 16))
                blocks.refusedUntil.set(`${pool}\u0000${resource}`, now + base)
                return Option.none<PgLease>()
              }
              // refused without the view: read it at once (no wait) and choose again
              if (!blind || Either.isLeft(claimed)) yield* restore(gate.sleepBackoff(n))
              return Option.none<PgLease>()
            }
            const charges = yield* Effect.either(gate.chargeAll(lease.pool, lease.resource))
            if (Either.isLeft(charges) || charges.right === undefined) {
              // refused (or unknown): the slot was never used, give it back now
              yield* gate.queueRelease(pool, resource, claimed.right)
              yield* releaseLocal(lease)
              if (Either.isLeft(charges)) yield* restore(gate.sleepBackoff(n))
              return Option.none<PgLease>()
            }
            const lost = yield* Deferred.make<never, LeaseLost>()
            const pg = new PgLease(lease, claimed.right, charges.right, lost, holder.owner, raw, releaseLocal(lease), gate)
            pg.fencedAtClaim = withFence
            pg.deadline = sent + gate.settings.leaseTtlMs - gate.marginMs
            // forked from an uninterruptible region: the loop itself must stay interruptible
            pg.renewal = yield* Effect.forkIn(Effect.interruptible(gate.renew(pg)), gate.scope)
            if (holder.owner !== undefined) {
              let s = gate.leases.get(holder.owner)
              if (s === undefined) gate.leases.set(holder.owner, s = new Set())
              s.add(pg)
            }
            built.lease = pg
            return Option.some(pg)
          })
        )
        if (Option.isSome(got)) {
          if (gate.settings.trace === true && blocks !== undefined) {
            const t = gate.traceOf(got.value.pool)
            const waited = (yield* gate.nowMs) - startedAt
            t.granted++
            if (got.value.block !== undefined) t.fromBlock++
            if (waited > 0) t.waited++
            t.waitMs += waited
            t.maxWaitMs = Math.max(t.maxWaitMs, waited)
          }
          return got.value
        }
        if (blind) viewed = true
        else n++
        if (blocks !== undefined) {
          viewed = false
          // waited a whole poll: the block's share may be claimed before the next renewal
          yield* gate.earlyTopUp(target === undefined ? pools : [target])
        }
      }
    })
    // block leases: an acquire under way counts in its pools' demand until it ends
    const loop = (built: Built) => Effect.suspend(() => {
      const names = gate.view.names()
      const target = gate.targetOf(opts, holder, names)
      if (this.blockMode === undefined) return attempt(names, target, built)
      {
        const counted = target === undefined ? names : [target]
        const add = (n: number) => {
          for (const p of counted) gate.pending.set(p, (gate.pending.get(p) ?? 0) + n)
          // an acquire starting raises its pool's demand: each block's peak follows
          if (n > 0) gate.notePeaks(counted)
        }
        const ended = Effect.sync(() => add(-1))
        // counted and uncounted as `Effect.acquireUseRelease` would, without its release's
        // extra exit and suspension (one acquire per task: pg17z)
        return Effect.uninterruptibleMask((restore) =>
          Effect.suspend(() => {
            add(1)
            return Effect.matchCauseEffect(restore(attempt(names, target, built)), {
              onFailure: (cause) => Effect.zipRight(ended, Effect.failCause(cause)),
              onSuccess: (lease) => Effect.as(ended, lease)
            })
          })
        )
      }
    })
    const timeout = opts.timeout === undefined ? undefined : Duration.decode(opts.timeout)
    const timed = (built: Built) =>
      timeout === undefined ? loop(built) : Effect.timeoutFail(loop(built), {
        duration: timeout,
        onTimeout: () => new AcquireTimeout({ pool: opts.pool ?? holder.defaultPool ?? "(default)", timeoutMs: Duration.toMillis(timeout) })
      })
    // a lease built by the loop reaches the caller or is given back (raw36): an interruption
    // seen after its build (the attempt's uninterruptible region ending in an interruptible
    // caller's, a raw acquire's), or the timeout passing while its slot claim was in flight
    // (the loop's result then dropped by the race), would leave it held, its local lease with
    // it, until its owner's reclaim (a raw one counted as a leak), or for good without an
    // owner. Its call never went out: its slot goes back as after a completed one. (A scoped
    // acquire without a timeout needs no guard: its caller's region is uninterruptible, `scoped`)
    if (!raw && timeout === undefined) return loop({ lease: undefined })
    return Effect.suspend(() => {
      const built: Built = { lease: undefined }
      return Effect.uninterruptibleMask((restore) =>
        Effect.onExit(restore(timed(built)), (exit) =>
          Exit.isFailure(exit) && built.lease !== undefined ? gate.finish(built.lease, true) : Effect.void)
      )
    })
  }

  /**
   * The renewal loop (L3): renews every `renewEvery`; a success moves the lease's local deadline
   * to `sent + TTL - margin` (sent = the clock read before the statement went out). A renewal
   * *error* (or one that does not answer before the deadline) is not a loss: it is asked again
   * after a short backoff (`renewEvery / 20` doubling, at most `renewEvery / 4`, equal jitter
   * from `Random`) until the deadline. The slot found taken, or the deadline reached with no
   * success, loses the lease ({@link Gate.markLost}).
   */
  renew(lease: PgLease): Effect.Effect<void> {
    const gate = this
    const { leaseTtlMs, renewEveryMs } = this.settings
    const margin = this.marginMs
    return Effect.gen(function*() {
      let next = (yield* gate.nowMs) + renewEveryMs
      let failures = 0
      while (!lease.done) {
        const now = yield* gate.nowMs
        const wake = Math.min(next, lease.deadline)
        if (wake > now) yield* Effect.sleep(Duration.millis(wake - now))
        if (lease.done) return
        const sent = yield* gate.nowMs
        if (sent >= lease.deadline) {
          yield* gate.markLost(lease, "deadline", true)
          return
        }
        const r = yield* Effect.either(Effect.timeoutFail(Q.renew(gate.sql, lease.pool, lease.resource.id, lease.claimed, leaseTtlMs), {
          duration: Duration.millis(Math.max(1, lease.deadline - sent)),
          onTimeout: () => "timeout" as const
        }))
        if (Either.isRight(r)) {
          if (!r.right) {
            yield* gate.markLost(lease, "taken", true)
            return
          }
          lease.deadline = Math.max(lease.deadline, sent + leaseTtlMs - margin)
          next = sent + renewEveryMs
          failures = 0
          continue
        }
        // not a loss: ask again soon, the deadline still bounds it
        const base = Math.min(renewEveryMs / 4, (renewEveryMs / 20) * 2 ** Math.min(failures++, 16))
        next = (yield* gate.nowMs) + Math.round(yield* Random.nextRange(base / 2, base))
      }
    })
  }

  /**
   * Marks a lease lost (once): fails its `lost` signal with {@link LeaseLost}, logs it, and
   * publishes the pool event `lease.lost` (data: `leaseId`, `reason`, `lateMs`, how long past
   * the local deadline the loss was seen, 0 when in time, and `runnerId`). With `notify`, the
   * lease's watchers ({@link onLost}) are told when it is still held. Its slot is never given
   * back early afterwards ({@link Gate.finish}): it may be another runner's now.
   */
  markLost(lease: PgLease, reason: "taken" | "deadline", notify: boolean): Effect.Effect<void> {
    const gate = this
    return Effect.gen(function*() {
      if (lease.lostAs !== undefined) return
      const now = yield* gate.nowMs
      const lateMs = Math.max(0, Math.round(now - lease.deadline))
      const lost = new LeaseLost({ pool: lease.pool, resourceId: lease.resource.id, leaseId: lease.claimed.leaseId, reason, errorClass: "retryable" })
      lease.lostAs = lost
      yield* Deferred.fail(lease.lost, lost)
      yield* Effect.logWarning(
        `global pools: lease ${lease.claimed.leaseId} on ${lease.pool}/${lease.resource.id} lost (${reason}, ${lateMs} ms past its local deadline)`
      )
      yield* publish(gate.local, {
        kind: "lease.lost",
        pool: lease.pool,
        resourceId: lease.resource.id,
        data: { leaseId: lease.claimed.leaseId, reason, lateMs, runnerId: gate.settings.runnerId },
        ts: now
      })
      if (notify && !lease.done) for (const watcher of lease.watchers.splice(0)) watcher(lost)
    })
  }

  /**
   * Ends a lease (idempotent): stops the renewal, gives the local lease back and, after a
   * completed call on a lease not lost, the global slot too (queued, {@link Gate.queueRelease};
   * a failed release is left to the TTL, L5); otherwise the slot stays held until it expires. A lease ending past its local
   * deadline with no renewal (a process frozen past it, whose renewal fiber has not run yet)
   * is lost first: its slot may be another runner's now.
   */
  finish(lease: PgLease, completed: boolean): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (lease.done) return Effect.void
      lease.done = true
      lease.watchers.length = 0
      if (lease.owner !== undefined) {
        const s = this.leases.get(lease.owner)
        s?.delete(lease)
        if (s?.size === 0) this.leases.delete(lease.owner)
      }
      const stop = lease.renewal === undefined ? Effect.void : Fiber.interrupt(lease.renewal)
      if (lease.block !== undefined && this.settings.trace !== true && this.now() < lease.deadline && this.localLeases.owns(lease.inner) && this.blockReturnNow(lease, completed)) {
        // the common end of a block lease, synchronously (no Effect, no region; ops17am): not
        // lapsed, its slot back to its block (or nothing to give back), then the local lease,
        // in the order of the path below
        this.localLeases.release(lease.inner)
        return Effect.void
      }
      const lapsed = Effect.suspend(() => this.now() >= lease.deadline ? this.markLost(lease, "deadline", false) : Effect.void)
      if (lease.block !== undefined) {
        // the slot goes back to its block before the local lease to the local core (whose
        // ceiling is the block: a waiter it wakes finds the slot free)
        // (a lease lost, by `lapsed` just before included, gives nothing back: `blockReturn`
        // reads `lostAs`, set with the `lost` signal, when it runs; no Effect to read it, ops17ak)
        const back = this.blockReturn(lease, completed)
        return Effect.uninterruptible(Effect.all([lapsed, back, lease.releaseLocal], { discard: true }))
      }
      // block leases: a slot claimed on its own joins its resource's block when the block is
      // below its share (before the local lease goes back: a waiter it wakes finds it)
      const giveBack = Effect.suspend(() =>
        !completed || lease.lostAs !== undefined
          ? Effect.void
          : Effect.flatMap(this.adopt(lease), (adopted) => adopted ? Effect.void : this.queueRelease(lease.pool, lease.resource.id, lease.claimed)))
      return Effect.uninterruptible(Effect.all([stop, lapsed, giveBack, lease.releaseLocal], { discard: true }))
    })
  }

  /**
   * Block leases: the slot of a lease claimed on its own (its resource's block was empty), its
   * call completed, joins the block instead of going back to the database, when the block is
   * below its share, the pool's blocks are in use, the resource is neither dead nor resized
   * below the slot, and the lease is within its local deadline (the block's deadline becomes
   * the earlier of the two; the next renewal renews it with the block). Without this, a busy
   * runner whose block emptied would keep claiming slot by slot: the rows it gives back pass
   * to its next claim and are never free for the block's top-up. `false`: not taken.
   */
  adopt(lease: PgLease): Effect.Effect<boolean> {
    const gate = this
    return Effect.gen(function*() {
      const mode = gate.blockMode
      if (mode === undefined || !mode.claimed.has(lease.pool)) return false
      const key = `${lease.pool}\u0000${lease.resource.id}`
      const block = mode.blocks.get(key)
      if (block === undefined || block.held >= block.target || mode.health.get(key)?.dead === true) return false
      if (block.capacity !== undefined && lease.claimed.slot > block.capacity) return false
      const now = yield* gate.nowMs
      if (now >= lease.deadline) return false
      block.deadline = block.held === 0 ? lease.deadline : Math.min(block.deadline, lease.deadline)
      block.free.push(lease.claimed)
      gate.ceiling(block)
      return true
    })
  }

  /**
   * Gives a slot back (only with its own lease id), batched: the release is queued and
   * written with every other release of this process in one statement (`Q.releaseAll`) at
   * most `releaseDelayMs` later; until then the slot is still held in the database (the lease
   * that holds it has ended, its call completed; no other runner can claim it, so capacity is
   * never exceeded), and an acquire of this process on the same resource takes it over in its
   * own claim statement ({@link Gate.handOver}). A release is never lost beyond the TTL: a
   * crash leaves the slot to expire as before, a failed flush is left to the TTL (L5), and the
   * service's scope writes what is queued when it closes (afterwards a release is written at
   * once).
   */
  queueRelease(pool: string, resource: string, claimed: Q.Claimed): Effect.Effect<void> {
    return Effect.suspend(() => {
      const release: Q.Release = { pool, resource, slot: claimed.slot, leaseId: claimed.leaseId }
      if (this.closed) return this.write([release])
      const key = `${pool}\u0000${resource}`
      let slots = this.queued.get(key)
      if (slots === undefined) this.queued.set(key, slots = new Map())
      slots.set(claimed.slot, release)
      if (this.flushScheduled) return Effect.void
      this.flushScheduled = true
      // the wait stays interruptible (a closing scope writes the queue itself)
      return Effect.asVoid(Effect.forkIn(
        Effect.zipRight(Effect.interruptible(Effect.sleep(Duration.millis(this.settings.releaseDelayMs))), this.flush),
        this.scope
      ))
    })
  }

  /** The lease ids of the queued releases of a resource: what its next claim may take over. */
  handOver(pool: string, resource: string): ReadonlyArray<string> {
    const slots = this.queued.get(`${pool}\u0000${resource}`)
    if (slots === undefined) return []
    const ids: Array<string> = []
    for (const r of slots.values()) ids.push(r.leaseId)
    return ids
  }

  /**
   * A slot of a resource was claimed by this process: a queued release of the same slot is
   * dropped (its lease no longer holds it: taken over by the claim, or expired before it).
   */
  claimedSlot(pool: string, resource: string, slot: number): void {
    const key = `${pool}\u0000${resource}`
    const slots = this.queued.get(key)
    if (slots === undefined) return
    slots.delete(slot)
    if (slots.size === 0) this.queued.delete(key)
  }

  /** How many slots of a resource this process has queued for release (still held in the database). */
  queuedCount(pool: string, resource: string): number {
    return this.queued.get(`${pool}\u0000${resource}`)?.size ?? 0
  }

  /** Writes every queued release in one statement (uninterruptible: taken is written). */
  get flush(): Effect.Effect<void> {
    return Effect.suspend(() => {
      this.flushScheduled = false
      const all: Array<Q.Release> = []
      for (const slots of this.queued.values()) for (const r of slots.values()) all.push(r)
      this.queued.clear()
      return all.length === 0 ? Effect.void : this.write(all)
    })
  }

  /** One release statement; a failure is logged and left to the slots' TTL (L5). */
  write(releases: ReadonlyArray<Q.Release>): Effect.Effect<void> {
    return Effect.uninterruptible(Effect.catchAll(
      Effect.asVoid(Q.releaseAll(this.sql, releases)),
      (e) => Effect.logWarning(`global pools: release of ${releases.length} slot(s) failed, they free at their TTL: ${e.message}`)
    ))
  }

  /** Runs a local health change, then mirrors what changed to the shared row. */
  mirror(pool: string, resourceId: string, change: Effect.Effect<void>): Effect.Effect<void> {
    const gate = this
    const find = Effect.map(Effect.orDie(this.local.snapshot(pool)), (s) => s.find((r) => r.id === resourceId))
    return Effect.gen(function*() {
      const before = yield* find
      yield* change
      const after = yield* find
      if (before === undefined || after === undefined) return
      const now = yield* gate.nowMs
      const writes: Array<Effect.Effect<unknown, SqlError>> = []
      if (after.throttledUntil !== undefined && after.throttledUntil > now && after.throttledUntil !== before.throttledUntil) {
        writes.push(Q.throttle(gate.sql, pool, resourceId, after.throttledUntil - now))
      }
      if (after.state === "dead" && before.state !== "dead") writes.push(Q.setState(gate.sql, pool, resourceId, "dead"))
      if (
        after.state === "degraded" && after.cooldownUntil !== undefined && after.cooldownUntil > now &&
        after.cooldownUntil !== before.cooldownUntil
      ) writes.push(Q.cooldown(gate.sql, pool, resourceId, after.cooldownUntil - now))
      if (after.state === "ready" && before.state !== "ready") writes.push(Q.setState(gate.sql, pool, resourceId, "ready"))
      for (const w of writes) {
        yield* Effect.catchAll(w, (e) => Effect.logWarning(`global pools: cannot share the state of ${pool}/${resourceId}: ${e.message}`))
      }
    })
  }

  /** A report: local health (mirrored), then the quota correction once the real count is known. */
  report(lease: PgLease, report: LeaseReport): Effect.Effect<void> {
    const gate = this
    return Effect.zipRight(
      this.mirror(lease.pool, lease.resource.id, lease.inner.report(report)),
      Effect.suspend(() => {
        const fixes: Array<Effect.Effect<unknown, SqlError>> = []
        for (const c of lease.charges) {
          const v = report.usage?.[c.key.metric]
          if (c.key.metric === "requests" || v === undefined || !Number.isFinite(v)) continue
          c.actual += v
          const delta = c.actual - c.charged
          if (delta !== 0) {
            c.charged = c.actual
            fixes.push(Q.correct(gate.sql, c.key, c.windowStart, delta))
          }
        }
        return Effect.forEach(fixes, (f) =>
          Effect.catchAll(f, (e) => Effect.logWarning(`global pools: quota correction failed: ${e.message}`)), { discard: true })
      })
    )
  }

  // --- block leases (issue 17, step 2) ----------------------------------------------------

  /**
   * Turns block leases on (idempotent): from now on each resource's slots are claimed as a
   * block at the first acquire of its pool (`⌊capacity ÷ runners⌋` rows, or without `runners`
   * the capacity split with the live runners, those registered for the resource: this runner
   * registers itself at once, {@link Q.registerDemand}), renewed through
   * {@link Gate.blockRider} (with the runner's other claims, in one statement) which resizes
   * it to the runner's demand-proportional share, and handed out in memory; a resource whose block is empty (capacity below `runners`, or every row held
   * by others) is served by a slot claim per lease, as without blocks. Starts the watchdog that
   * loses a block whose local deadline passed with no renewal. The registration failing is
   * logged, not an error: the first renewal registers the runner.
   */
  enableBlocks(runners?: number | undefined): Effect.Effect<void> {
    const gate = this
    return Effect.gen(function*() {
      if (gate.blockMode !== undefined) return
      const registered: Array<{ pool: string; resource: string }> = []
      for (const name of yield* gate.local.names) {
        const h = yield* Effect.option(gate.local.get(name))
        if (h._tag === "None") continue
        for (const info of yield* h.value.resources) registered.push({ pool: name, resource: info.id })
      }
      if (gate.blockMode !== undefined) return
      gate.blockMode = {
        runners: runners === undefined ? undefined : Math.max(1, Math.floor(runners)),
        blocks: new Map(),
        claimed: new Map(),
        ready: new Set(),
        health: new Map(),
        refusedUntil: new Map(),
        lastRenewal: 0,
        registered
      }
      yield* Effect.forkIn(Effect.interruptible(gate.blockWatchdog), gate.scope)
      yield* Effect.forkIn(Effect.interruptible(gate.shedLoop), gate.scope)
      if (registered.length > 0) {
        yield* Q.registerDemand(gate.sql, gate.settings.runnerId, gate.settings.leaseTtlMs, registered).pipe(
          Effect.catchAll((e) => Effect.logWarning(`global pools: cannot register for block leases (the first renewal will): ${e.message}`))
        )
      }
    })
  }

  /** The block of a resource, created empty when missing (block leases on). */
  blockOf(mode: BlockMode, pool: string, resource: string): Block {
    const key = `${pool}\u0000${resource}`
    let b = mode.blocks.get(key)
    if (b === undefined) mode.blocks.set(key, b = new Block(pool, resource))
    return b
  }

  /** The local core's ceiling of a block's resource: the slots it holds (none held: no ceiling, the per-lease claims). */
  ceiling(block: Block): void {
    setCeiling(this.local, block.pool, block.resource, block.held > 0 ? block.held : undefined)
  }

  /** Adds freshly claimed slots to a block; its deadline is the earliest of its slots'. */
  addToBlock(block: Block, claim: Q.BlockClaim, sent: number): void {
    if (claim.capacity !== undefined) {
      block.capacity = claim.capacity
      block.target = claim.size
    }
    block.liveOthers = claim.liveOthers
    if (claim.claimed.length === 0) return
    const deadline = sent + this.settings.leaseTtlMs - this.marginMs
    block.deadline = block.held === 0 ? deadline : Math.min(block.deadline, deadline)
    for (const c of claim.claimed) {
      this.claimedSlot(block.pool, block.resource, c.slot)
      block.free.push(c)
    }
    this.ceiling(block)
  }

  /**
   * Claims (or tops up) one block, up to `target` slots (default: the first guess, see
   * {@link Q.claimBlock}): one statement; an error leaves it as it is (the renewal tries again).
   */
  claimInto(block: Block, target?: number | undefined): Effect.Effect<void> {
    const gate = this
    const mode = this.blockMode
    if (mode === undefined) return Effect.void
    return Effect.gen(function*() {
      const sent = yield* gate.nowMs
      // a block just claimed counts as used (the pool is not idle at the next renewal)
      block.lastUse = Math.max(block.lastUse, sent)
      block.peak = Math.max(block.peak, gate.demandNow(block))
      const r = yield* Effect.either(
        Q.claimBlock(
          gate.sql,
          block.pool,
          block.resource,
          gate.settings.runnerId,
          gate.settings.leaseTtlMs,
          mode.runners,
          block.held,
          target,
          // every claim tells the others this runner's demand (a runner that needs the
          // resource again is seen at their next renewal, not after one renewal of its own)
          gate.demandShown(block)
        )
      )
      if (Either.isLeft(r)) {
        yield* Effect.logWarning(`global pools: cannot claim a block of ${block.pool}/${block.resource}: ${r.left.message}`)
        return
      }
      gate.addToBlock(block, r.right, sent)
    })
  }

  /**
   * The blocks of `pools` claimed once, at their first need (the acquires that arrive
   * meanwhile wait for the same claim): one statement per resource.
   */
  ensureBlocks(pools: ReadonlyArray<string>): Effect.Effect<void> {
    const gate = this
    const mode = this.blockMode
    if (mode === undefined) return Effect.void
    // the common case: every pool's blocks claimed already (no Effect per pool: ops17ak)
    if (pools.every((pool) => mode.ready.has(pool))) return Effect.void
    return Effect.forEach(pools, (pool) =>
      Effect.suspend(() => {
        const known = mode.claimed.get(pool)
        if (known !== undefined) return Deferred.await(known)
        const done = Deferred.unsafeMake<void>(FiberId.none)
        mode.claimed.set(pool, done)
        return Effect.uninterruptible(Effect.ensuring(
          Effect.flatMap(
            Effect.orDie(Effect.flatMap(gate.local.get(pool), (h) => h.resources)),
            (infos) => Effect.forEach(infos, (info) => gate.claimInto(gate.blockOf(mode, pool, info.id)), { discard: true })
          ),
          Effect.zipRight(
            Effect.sync(() => {
              if (mode.claimed.get(pool) === done) mode.ready.add(pool)
            }),
            Deferred.succeed(done, undefined)
          )
        ))
      }), { discard: true })
  }

  /**
   * What an acquire offers the local core in block mode: every resource of the local pools
   * not blocked by a quota window this process saw full, nor dead, throttled or cooling down
   * by the shared state the last renewal read; a resource with an empty block (served by a
   * slot claim per lease) not while its last claim's refusal stands.
   */
  blockSet(mode: BlockMode): Effect.Effect<Set<ResourceInfo>> {
    return Effect.map(this.nowMs, (now) => this.blockSetAt(mode, now))
  }

  /** {@link blockSet} at `now`, synchronously (one clock read per acquire: ops17ak). */
  blockSetAt(mode: BlockMode, now: number): Set<ResourceInfo> {
    const gate = this
    {
      const out = gate.usableAt(now)
      for (const name of gate.view.names()) {
        for (const info of gate.resourcesNow(name)) {
          if (!out.has(info)) continue
          const key = `${name}\u0000${info.id}`
          const health = mode.health.get(key)
          if (health !== undefined && (health.dead || health.throttledUntil > now || health.cooledUntil > now)) {
            out.delete(info)
            continue
          }
          const block = mode.blocks.get(key)
          const refused = mode.refusedUntil.get(key)
          if ((block === undefined || block.held === 0) && refused !== undefined) {
            if (refused > now) out.delete(info)
            else mode.refusedUntil.delete(key)
          }
        }
      }
      return out
    }
  }

  /** The resources dead by the shared state the last renewal read, by pool (for `hopeless`). */
  deadByBlocks(mode: BlockMode): Map<string, Set<string>> {
    const dead = new Map<string, Set<string>>()
    for (const [key, h] of mode.health) {
      if (!h.dead) continue
      const [pool, resource] = key.split("\u0000") as [string, string]
      let s = dead.get(pool)
      if (s === undefined) dead.set(pool, s = new Set())
      s.add(resource)
    }
    return dead
  }

  /**
   * A block lease ended: its slot leaves the lease. After a completed call on a lease not
   * lost, it goes back to the block's free slots, or to the database (batched) when the block
   * is above its size, the slot above the resource's capacity, or the resource dead; after an
   * unknown outcome it is dropped from the block (no longer renewed: it expires at its TTL, so
   * a call still running at the provider is never doubled); a lost lease's slot was dropped
   * already.
   */
  /**
   * {@link blockReturn} done synchronously when it needs no statement: `true` when done (the
   * slot back to the block's free list, or dropped after a call not completed or a lease lost,
   * or nothing to give back), `false` when the slot has to go back to the database (a dead
   * resource, a slot above the capacity, a block above its share): then nothing was done and
   * {@link blockReturn} does it. Not with `Settings.trace` (its counters read the clock).
   */
  blockReturnNow(lease: PgLease, completed: boolean): boolean {
    const block = lease.block!
    if (block.used.get(lease.claimed.slot) !== lease) return true
    const back = completed && lease.lostAs === undefined
    if (back) {
      const mode = this.blockMode
      const dead = mode?.health.get(`${block.pool}\u0000${block.resource}`)?.dead === true
      const above = block.capacity !== undefined && lease.claimed.slot > block.capacity
      if (dead || above || block.held + 1 > block.target || mode === undefined) return false
    }
    block.used.delete(lease.claimed.slot)
    if (back) block.free.push(lease.claimed)
    this.ceiling(block)
    return true
  }

  blockReturn(lease: PgLease, completed: boolean): Effect.Effect<void> {
    const block = lease.block!
    return Effect.suspend(() => {
      if (block.used.get(lease.claimed.slot) !== lease) return Effect.void
      block.used.delete(lease.claimed.slot)
      const mode = this.blockMode
      let back = Effect.void as Effect.Effect<void>
      if (this.settings.trace === true) {
        back = Effect.flatMap(this.nowMs, (now) =>
          Effect.sync(() => {
            const t = this.traceOf(block.pool)
            t.returned++
            t.holdMs += now - lease.grantedAt
          }))
      }
      if (completed && lease.lostAs === undefined) {
        const dead = mode?.health.get(`${block.pool}\u0000${block.resource}`)?.dead === true
        const above = block.capacity !== undefined && lease.claimed.slot > block.capacity
        if (dead || above || block.held + 1 > block.target || mode === undefined) {
          back = Effect.zipRight(back, this.queueRelease(block.pool, block.resource, lease.claimed))
        } else {
          block.free.push(lease.claimed)
        }
      }
      this.ceiling(block)
      return back
    })
  }

  /**
   * A block lost (the database gave its slots to another holder, or its deadline passed with no
   * renewal): every lease on it is lost (its call stopped, `lease.lost`), and its slots are
   * dropped without a release (they may be another runner's now).
   */
  loseSlots(block: Block, slots: ReadonlySet<number> | undefined, reason: "taken" | "deadline"): Effect.Effect<void> {
    const gate = this
    return Effect.gen(function*() {
      const lost = (slot: number) => slots === undefined || slots.has(slot)
      for (let i = block.free.length - 1; i >= 0; i--) if (lost(block.free[i]!.slot)) block.free.splice(i, 1)
      for (const [slot, lease] of [...block.used]) {
        if (!lost(slot)) continue
        block.used.delete(slot)
        yield* gate.markLost(lease, reason, true)
      }
      gate.ceiling(block)
    })
  }

  /** Loses every block whose local deadline has passed (checked at each deadline and every second). */
  get blockWatchdog(): Effect.Effect<void> {
    const gate = this
    return Effect.gen(function*() {
      while (true) {
        const mode = gate.blockMode
        if (mode === undefined) return
        const now = yield* gate.nowMs
        let next = now + 1_000
        for (const block of mode.blocks.values()) {
          if (block.held === 0) continue
          if (now >= block.deadline) yield* gate.loseSlots(block, undefined, "deadline")
          else next = Math.min(next, block.deadline)
        }
        yield* Effect.sleep(Duration.millis(Math.max(1, next - now)))
      }
    })
  }

  /**
   * A block's equal share: its resource's capacity divided by the live runners as last known
   * (this one and {@link Block.liveOthers}), rounded down; `undefined` before the capacity is
   * known.
   */
  equalShare(block: Block): number | undefined {
    return block.capacity === undefined ? undefined : Math.floor(block.capacity / (1 + block.liveOthers))
  }

  /**
   * Every {@link shedEveryMs} (by `Clock`), {@link Gate.shedCheck}: between two renewals, a
   * holder above its equal share gives rows back as soon as another live runner asks for them.
   */
  get shedLoop(): Effect.Effect<void> {
    const gate = this
    return Effect.gen(function*() {
      while (gate.blockMode !== undefined) {
        yield* Effect.sleep(Duration.millis(shedEveryMs))
        yield* gate.shedCheck
      }
    })
  }

  /**
   * Block leases, between two renewals (issue 17, blk17al): the blocks holding more than their
   * equal share ({@link Gate.equalShare}: a renewal or a brought-forward top-up grew them while
   * the other live runners had no demand yet) read the other runners' demands again (one
   * `SELECT` on `assay_pool_demand`, {@link Q.othersDemands}; no statement at all when no block
   * is above its equal share). When another runner's demand is now above 0, the block's share
   * is computed again ({@link Q.proportionalShare}, with {@link Gate.demandShown} as this
   * runner's demand) and becomes its size: its free rows above it are given back at once (one
   * release statement; a row leaves the block, and the local core's ceiling, before it is
   * released in the table, and only a released row can be claimed by another runner, so the
   * capacity is never exceeded), rows in use when their calls end ({@link Gate.blockReturn}).
   * A read or a release that fails is logged and changes nothing more: the next renewal
   * shares the rows as before.
   */
  get shedCheck(): Effect.Effect<void> {
    const gate = this
    return Effect.gen(function*() {
      const mode = gate.blockMode
      if (mode === undefined) return
      const above: Array<Block> = []
      for (const [key, block] of mode.blocks) {
        const equal = gate.equalShare(block)
        if (equal === undefined || block.held <= equal || mode.health.get(key)?.dead === true) continue
        above.push(block)
      }
      if (above.length === 0) return
      const read = yield* Effect.either(Q.othersDemands(gate.sql, gate.settings.runnerId, [...new Set(above.map((b) => b.pool))]))
      if (Either.isLeft(read)) {
        yield* Effect.logWarning(`global pools: cannot read the other runners' demands: ${read.left.message}`)
        return
      }
      const me = gate.settings.runnerId
      const back: Array<Q.Release> = []
      for (const block of above) {
        const others = new Map<string, number>()
        for (const d of read.right) if (d.pool === block.pool && d.resource === block.resource) others.set(d.runner, d.demand)
        block.others = others
        block.liveOthers = others.size
        if (block.capacity === undefined || ![...others.values()].some((d) => d > 0)) continue
        const share = Q.proportionalShare(block.capacity, new Map([...others, [me, gate.demandShown(block)]]), me)
        if (share >= block.held) continue
        block.target = share
        // the highest free rows first (as a renewal gives them back)
        block.free.sort((a, b) => a.slot - b.slot)
        while (block.free.length > 0 && block.held > share) {
          const c = block.free.pop()!
          back.push({ pool: block.pool, resource: block.resource, slot: c.slot, leaseId: c.leaseId })
        }
        gate.ceiling(block)
      }
      if (back.length === 0) return
      if (gate.settings.trace === true) for (const r of back) gate.traceOf(r.pool).givenBack++
      yield* gate.write(back)
    })
  }

  /**
   * A block's demand now: the local leases of its resource in use (from the block, or by a
   * slot claim of their own) plus the acquires of its pool under way
   * (the local waiters, and those claiming or backing off).
   */
  demandNow(block: Block): number {
    return demandOf(this.local, block.pool, block.resource).active + (this.pending.get(block.pool) ?? 0)
  }

  /**
   * The block leases' part of the runner's renewal (see {@link BlockRider}): every slot of
   * every block is renewed, this runner's demand for each blocked resource written (the peak
   * of leases in use + acquires under way since the previous renewal, {@link Block.peak},
   * counted for one TTL), the other runners' live demands and the resources'
   * shared state read, all in the statement of the window claims' renewal. Settling it:
   * - a slot the database did not renew is lost (its lease too); the others get a new
   *   deadline, the local time the statement was sent plus the TTL, less the margin;
   * - each block's size becomes this runner's demand-proportional share
   *   ({@link Q.proportionalShare}) of the capacity read (0 for a dead resource, or with no
   *   demand): free slots above it, or above the capacity, go back at once (a runner idle for
   *   a whole renewal interval gives its rows back at the renewal that ends it; a resize
   *   shrinks the blocks within one renewal),
   *   slots in use when they come back;
   * - a block below its size is topped up (one statement); a pool with no demand at all is
   *   forgotten (its blocks are claimed again at its next need).
   */
  get blockRider(): BlockRider {
    const gate = this
    /** The slots the last renewal was sent for (key → lease id): only those are judged by its answer. */
    let sentFor = new Map<string, string>()
    /** The demands the last renewal wrote, by `pool \u0000 resource`. */
    let sentDemand = new Map<string, number>()
    return {
      parts: (first) => {
        const mode = gate.blockMode
        if (mode === undefined || (mode.blocks.size === 0 && mode.registered.length === 0)) return undefined
        const slots: Array<Q.Release> = []
        const demands: Array<Q.Demand> = []
        for (const b of mode.blocks.values()) {
          for (const c of b.free) slots.push({ pool: b.pool, resource: b.resource, slot: c.slot, leaseId: c.leaseId })
          for (const l of b.used.values()) slots.push({ pool: b.pool, resource: b.resource, slot: l.claimed.slot, leaseId: l.claimed.leaseId })
          // the peak since the previous renewal (at least the demand now), then the next
          // interval's peak starts from the demand now
          const now = gate.demandNow(b)
          demands.push({ pool: b.pool, resource: b.resource, demand: Math.max(now, b.peak) })
          b.peak = now
        }
        const pools = [...new Set([...mode.blocks.values()].map((b) => b.pool))]
        sentFor = new Map(slots.map((r) => [`${r.pool}\u0000${r.resource}\u0000${r.slot}`, r.leaseId]))
        sentDemand = new Map(demands.map((d) => [`${d.pool}\u0000${d.resource}`, d.demand]))
        // the registration renewed: a demand of 0 for each resource with no block (not in
        // `sentDemand`: a block claimed before the answer keeps its first guess)
        const registered = mode.registered.filter((k) => !mode.blocks.has(`${k.pool}\u0000${k.resource}`))
        return Q.blockRenewalParts(
          first,
          slots,
          pools,
          gate.settings.leaseTtlMs,
          gate.settings.runnerId,
          [...demands, ...registered.map((k) => ({ ...k, demand: 0 }))]
        )
      },
      settle: (row, sent) =>
        Effect.gen(function*() {
          const mode = gate.blockMode
          if (mode === undefined) return
          const answer = Q.blockRenewalOf(row)
          const now = yield* gate.nowMs
          const renewed = new Set(answer.renewed.map((r) => `${r.pool}\u0000${r.resource}\u0000${r.slot}`))
          const deadline = sent + gate.settings.leaseTtlMs - gate.marginMs
          // a slot the statement was sent for and did not renew is lost (one claimed since is not judged)
          const judged = sentFor
          const notRenewed = (block: Block, c: Q.Claimed) => {
            const key = `${block.pool}\u0000${block.resource}\u0000${c.slot}`
            return judged.get(key) === c.leaseId && !renewed.has(key)
          }
          for (const block of mode.blocks.values()) {
            const gone = new Set<number>()
            for (const c of block.free) if (notRenewed(block, c)) gone.add(c.slot)
            for (const l of block.used.values()) if (notRenewed(block, l.claimed)) gone.add(l.claimed.slot)
            const before = block.held
            if (gone.size > 0) yield* gate.loseSlots(block, gone, "taken")
            if (block.held > 0 && gone.size < before) {
              block.deadline = Math.max(block.deadline, deadline)
              for (const l of block.used.values()) l.deadline = block.deadline
            }
          }
          // the other runners' live demands, by resource
          const others = new Map<string, Map<string, number>>()
          for (const d of answer.demands) {
            const key = `${d.pool}\u0000${d.resource}`
            let m = others.get(key)
            if (m === undefined) others.set(key, m = new Map())
            m.set(d.runner, d.demand)
          }
          const me = gate.settings.runnerId
          for (const r of answer.resources) {
            const key = `${r.pool}\u0000${r.resource}`
            const dead = r.state === "dead"
            mode.health.set(key, { dead, throttledUntil: now + r.throttleMs, cooledUntil: now + r.cooldownMs })
            const block = mode.blocks.get(key)
            if (block === undefined) continue
            block.capacity = r.capacity
            block.others = others.get(key) ?? new Map()
            block.liveOthers = block.others.size
            // a block created after the statement was sent keeps its first guess
            const demand = sentDemand.get(key)
            if (demand === undefined) continue
            block.demand = demand
            block.target = dead ? 0 : Q.proportionalShare(r.capacity, new Map([...block.others, [me, demand]]), me)
          }
          // pools with no demand are forgotten (claimed again at their next need); the blocks
          // shrink to their share, or grow to it
          const wanted = new Set<string>()
          for (const b of mode.blocks.values()) if (b.demand > 0 || b.used.size > 0 || !sentDemand.has(`${b.pool}\u0000${b.resource}`)) wanted.add(b.pool)
          const back: Array<Q.Release> = []
          const topUp: Array<Block> = []
          for (const block of mode.blocks.values()) {
            // slots above the capacity first
            block.free.sort((a, b) => a.slot - b.slot)
            while (block.free.length > 0) {
              const last = block.free[block.free.length - 1]!
              const above = block.capacity !== undefined && last.slot > block.capacity
              if (!above && block.held <= block.target) break
              block.free.pop()
              back.push({ pool: block.pool, resource: block.resource, slot: last.slot, leaseId: last.leaseId })
            }
            gate.ceiling(block)
            if (!wanted.has(block.pool)) {
              mode.claimed.delete(block.pool)
              mode.ready.delete(block.pool)
            } else if (mode.claimed.has(block.pool) && block.held < block.target) topUp.push(block)
          }
          mode.lastRenewal = sent
          for (const r of back) yield* gate.queueRelease(r.pool, r.resource, r)
          const heldBefore = new Map([...mode.blocks.values()].map((b) => [b, b.held] as const))
          for (const block of topUp) yield* gate.claimInto(block, block.target)
          if (gate.settings.trace === true) {
            for (const r of back) gate.traceOf(r.pool).givenBack++
            for (const block of topUp) gate.traceOf(block.pool).topUpRows += block.held - (heldBefore.get(block) ?? 0)
            yield* gate.traceLines(mode, now)
          }
        })
    }
  }

  /**
   * A renewal's top-up brought forward (block leases): when an acquire of `pools` waited a
   * whole poll and the pool's acquires under way are more than the slots a block holds, the block's share is
   * computed again with its demand ({@link Gate.demandShown}) and the other runners' demands the last renewal read,
   * and, when that share is above what the block holds, free slots are claimed up to it (one
   * statement). At most once per quarter of `renewEvery` per block; slots are only ever taken
   * free, so the sum of the blocks stays bounded by the rows.
   */
  earlyTopUp(pools: ReadonlyArray<string>): Effect.Effect<void> {
    const gate = this
    const mode = this.blockMode
    if (mode === undefined) return Effect.void
    return Effect.gen(function*() {
      const now = yield* gate.nowMs
      const me = gate.settings.runnerId
      for (const block of mode.blocks.values()) {
        if (!pools.includes(block.pool) || !mode.claimed.has(block.pool) || block.capacity === undefined) continue
        if (now - block.lastEarly < gate.settings.renewEveryMs / 4) continue
        if (mode.health.get(`${block.pool}\u0000${block.resource}`)?.dead === true) continue
        const waiting = gate.pending.get(block.pool) ?? 0
        if (waiting <= block.held) continue
        const share = Q.proportionalShare(block.capacity, new Map([...block.others, [me, gate.demandShown(block)]]), me)
        if (share <= block.held) continue
        block.lastEarly = now
        block.target = Math.max(block.target, share)
        const before = block.held
        // uninterruptible: rows claimed are in the block, or the statement did not run
        yield* Effect.uninterruptible(gate.claimInto(block, share))
        if (gate.settings.trace === true) {
          const t = gate.traceOf(block.pool)
          t.early++
          t.earlyRows += block.held - before
        }
      }
    })
  }

  /**
   * The demand a block claim between renewals writes (and a brought-forward top-up computes its
   * share with): the demand now, or the peak of this interval, or the peak the last renewal
   * wrote, whichever is highest, so that a claim never lowers below the renewal's peak what
   * the other runners see.
   */
  demandShown(block: Block): number {
    return Math.max(this.demandNow(block), block.peak, block.demand)
  }

  /** Raises the {@link Block.peak} of every block of `pools` to its demand now (block leases). */
  notePeaks(pools: ReadonlyArray<string>): void {
    const mode = this.blockMode
    if (mode === undefined) return
    for (const block of mode.blocks.values()) {
      if (pools.includes(block.pool)) block.peak = Math.max(block.peak, this.demandNow(block))
    }
  }

  /** The trace counters of a pool since the last renewal (`Settings.trace`). */
  traceOf(pool: string): TraceStats {
    let t = this.traceStats.get(pool)
    if (t === undefined) this.traceStats.set(pool, t = emptyTrace())
    return t
  }

  /**
   * `Settings.trace`: one log line per block after a renewal (`block trace {…}`: runner, local
   * time, pool, resource, capacity, rows held / in use, the demand sent, the share computed, the
   * other runners' demands, and its pool's {@link TraceStats} since the previous renewal, which
   * are then reset).
   */
  traceLines(mode: BlockMode, now: number): Effect.Effect<void> {
    const gate = this
    return Effect.gen(function*() {
      for (const block of mode.blocks.values()) {
        const stats = gate.traceStats.get(block.pool) ?? emptyTrace()
        yield* Effect.logInfo(`block trace ${JSON.stringify({
          runner: gate.settings.runnerId,
          t: now,
          pool: block.pool,
          resource: block.resource,
          capacity: block.capacity,
          held: block.held,
          used: block.used.size,
          demand: block.demand,
          share: block.target,
          others: Object.fromEntries(block.others),
          ...stats
        })}`)
      }
      gate.traceStats.clear()
    })
  }

  /** Gives every block's free slots back (the service closing); slots in use are left to their TTL. */
  releaseBlocks(): void {
    const mode = this.blockMode
    if (mode === undefined) return
    for (const block of mode.blocks.values()) {
      for (const c of block.free.splice(0)) {
        const key = `${block.pool}\u0000${block.resource}`
        let slots = this.queued.get(key)
        if (slots === undefined) this.queued.set(key, slots = new Map())
        slots.set(c.slot, { pool: block.pool, resource: block.resource, slot: c.slot, leaseId: c.leaseId })
      }
    }
  }

  reclaim(owner: string, countLeaks: boolean): Effect.Effect<ReadonlyArray<LeakedLease>> {
    const gate = this
    return Effect.gen(function*() {
      const mine = [...(gate.leases.get(owner) ?? [])]
      const leaked = countLeaks ? yield* gate.local.reclaim(owner) : (yield* gate.local.releaseAll(owner), [])
      // the attempt has ended: no call of its leases is in flight any more
      for (const l of mine) yield* gate.finish(l, true)
      return leaked
    })
  }
}

const completedExit = (lease: PgLease, exit: Exit.Exit<unknown, unknown>) => Exit.isSuccess(exit) || lease.reported

/** Builds the global pools service over the given SQL client (see `PgPools.make`). */
export const make = (
  sql: SqlClient.SqlClient,
  pools: Iterable<PoolConfig>,
  settings: Settings,
  options: PoolsOptions = {}
): Effect.Effect<PoolsService, ConfigError | SqlError, Scope.Scope> =>
  Effect.gen(function*() {
    const configs = [...pools]
    const local = yield* makeLocal(configs, { ...options, globalQuotas: true })
    const scope = yield* Effect.scope
    const gate = new Gate(sql, local, settings, scope, yield* Effect.clock)
    // the releases still queued are written when the service closes (later ones at once)
    yield* Effect.addFinalizer(() => Effect.suspend(() => {
      // the blocks' free slots go back with the queued releases (slots in use: their calls'
      // outcome is unknown, they are left to their TTL)
      gate.releaseBlocks()
      gate.closed = true
      // and its demands stop counting at once (not after their TTL)
      const forget = gate.blockMode === undefined
        ? Effect.void
        : Effect.catchAll(Effect.asVoid(Q.forgetDemand(sql, settings.runnerId)), () => Effect.void)
      return Effect.zipRight(gate.flush, forget)
    }))
    for (const p of configs) gate.algorithms.set(p.name, p.options.algorithm)
    for (const name of yield* local.names) yield* gate.declarePool(name)
    // `Effect.acquireRelease`'s shape (an uninterruptible acquire, then a finalizer on the
    // scope) with the finalizer registered by `Scope.addFinalizerExit` directly, as the local
    // core's `scopedWait`: `gate.finish` reads no FiberRefs (its clock is the gate's, its work
    // uninterruptible), so the FiberRefs diff and patch that `acquireRelease` runs around every
    // release (two copies of the fiber's whole service Context, once per task) are pure cost
    // (BENCHMARKS.md gen17am)
    const scoped = <C,>(o: AcquireOptions | string | undefined, h: Holder | undefined) =>
      Effect.uninterruptible(
        Effect.flatMap(gate.acquireCore(o, h ?? anonymous, false), (lease) =>
          Effect.flatMap(Effect.scope, (scope) =>
            Effect.as(Scope.addFinalizerExit(scope, (exit) => gate.finish(lease, completedExit(lease, exit))), lease)))
      ) as unknown as Effect.Effect<Lease<C>, AcquireError, Scope.Scope>
    const raw = <C,>(o: AcquireOptions | string | undefined, h: Holder | undefined) =>
      gate.acquireCore(o, h ?? anonymous, true) as unknown as Effect.Effect<Lease<C>, AcquireError>
    const handle = (h: PoolHandle): PoolHandle => ({
      ...h,
      acquire: (o, holder) => scoped({ ...o, pool: h.name }, holder),
      acquireRaw: (o, holder) => raw({ ...o, pool: h.name }, holder),
      add: (resource) =>
        Effect.tap(h.add(resource), (info) => Effect.orDie(Q.declare(sql, h.name, info.id, info.capacity)))
    })
    const service: PoolsService = {
      ...local,
      acquire: scoped,
      acquireRaw: raw,
      releaseAll: (owner) =>
        Effect.map(Effect.zip(local.heldBy(owner), gate.reclaim(owner, false)), ([held]) => held.length),
      reclaim: (owner) => gate.reclaim(owner, true),
      get: (name) => Effect.map(local.get(name), handle),
      addPool: (config) =>
        Effect.flatMap(Effect.tap(local.addPool(config), () => Effect.sync(() => gate.algorithms.set(config.name, config.options.algorithm))), (h) => Effect.as(Effect.orDie(gate.declarePool(h.name)), handle(h))),
      add: (pool, resource) =>
        Effect.tap(local.add(pool, resource), (info) => Effect.orDie(Q.declare(sql, pool, info.id, info.capacity)))
    }
    gates.set(service, gate)
    return service
  })

const gates = new WeakMap<PoolsService, Gate>()

/**
 * The gate of a global pools service (`undefined` for any other pools service): what the
 * cluster engine enables block leases on and renews them through.
 */
export const gateOf = (pools: PoolsService): Gate | undefined => gates.get(pools)

/** Whether a lease was served from a block (block leases); `false` for any other. */
export const fromBlock = (lease: Lease<any>): boolean => isPgLease(lease) && lease.block !== undefined

