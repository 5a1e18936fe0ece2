/**
 * The pools service's core: pool registry, slot taking, FIFO dispatch to waiters, the acquire
 * paths (synchronous fast path, plain wait, algorithm-driven), lease reports driving health,
 * throttles and circuit breakers, and the timers that end them.
 *
 * All state lives in the plain structures of `state.ts`, changed only inside synchronous
 * blocks (atomic: one fiber step at a time). Waiters are a FIFO per pool (`waiters.ts`),
 * resumed by callback; a slot granted to a waiter is recorded on the acquire attempt first, so
 * an interruption at any point gives it back. Health comes only from `lease.report` (and
 * factory failures) via the pure machines of `src/domain/Resource.ts` and `Breaker.ts`;
 * cooldown, throttle and breaker timers are fibers in the service's scope, sleeping on
 * Effect's `Clock`, that wake matching waiters when they fire. The client build lives in
 * `client.ts`, the read-outs in `stats.ts`, the event fan-out in `events.ts`.
 *
 * @internal
 */
import { Duration, Effect, Either, Exit, Fiber, Option, Scope } from "effect"
import type { Clock } from "effect"
import * as Breaker from "../../../domain/Breaker.js"
import * as LoopDelay from "../loopDelay.js"
import {
  AcquireTimeout,
  classify,
  ConfigError,
  PoolNotFound,
  ResourceUnavailable,
  retryAfterOf,
  ServerDelayRefused
} from "../../../domain/Errors.js"
import { messageOf } from "../../../domain/internal/errors.js"
import type { ConfigIssue, ErrorClass } from "../../../domain/Errors.js"
import type { Json } from "../../../domain/Json.js"
import type {
  AcquireError,
  AcquireOptions,
  AlgorithmInput,
  Lease,
  LeaseReport,
  ResourceInfo,
  Selector
} from "../../../domain/Lease.js"
import type { ResourceEvent } from "../../../domain/PoolEvent.js"
import * as Resource from "../../../domain/Resource.js"
import * as AcquireAlgorithm from "../../AcquireAlgorithm.js"
import type { PoolConfig } from "../../Pool.js"
import type {
  Holder,
  LeakedLease,
  PoolHandle,
  PoolsOptions,
  PoolsService,
  RestoreOutcome,
  SavedResourceState
} from "../../Pools.js"
import * as Client from "./client.js"
import { withHolderNow } from "../holdNow.js"
import { hooksOf, markAppliesHooks } from "../acquireHooks.js"
import { EventFanout } from "./events.js"
import type { Attempt, Effects, PoolState, Res } from "./state.js"
import { anonymous, avoidKey, clientNone, defaultMaxServerDelayMs, StickyMemory } from "./state.js"
import * as Stats from "./stats.js"
import { emptyWaits, recordWait } from "./stats.js"
import * as Resume from "./resume.js"
import * as Waiters from "./waiters.js"
import { WaiterQueue } from "./waiters.js"

/** The weight of the newest latency in the moving average. */
const EMA_ALPHA = 0.2

const jsonError = (u: unknown): Json => messageOf(u)

/** An acquire without options (read only: one object for every such acquire). */
const noOptions: AcquireOptions = Object.freeze({})

// ---------------------------------------------------------------------------------------------
// The lease
// ---------------------------------------------------------------------------------------------

/**
 * A lease as the pools service keeps it. `Client` is the resource's client type: the service
 * stores every client as `unknown` (built by a factory it knows only as `unknown`), and an
 * acquire's caller names the type it expects (`acquire<Client>`), as `Lease<Client>`.
 *
 * @internal
 */
export class LeaseImpl<Client = unknown> implements Lease<Client> {
  released = false
  /** Granted while the resource's breaker was half-open: its report decides the breaker. */
  probe = false
  /** The breaker's `opened` count at grant: reports of leases from before an opening are stale. */
  breakerEpoch = 0
  /** The holder's pipeline (`""` for none): with `taskName`, whose next acquire a transient failure moves. */
  pipelineId = ""
  constructor(
    readonly id: string,
    readonly pool: string,
    readonly res: Res,
    readonly client: Client,
    readonly taskName: string,
    readonly acquiredAt: number,
    readonly owner: string | undefined,
    readonly raw: boolean,
    readonly core: Core
  ) {}
  get resource(): ResourceInfo {
    return this.res.info
  }
  get options(): Readonly<Record<string, unknown>> {
    return this.res.info.options
  }
  get heldMs(): Effect.Effect<number> {
    return Effect.sync(() => this.core.now() - this.acquiredAt)
  }
  report(report: LeaseReport): Effect.Effect<void> {
    return this.core.report(this, report)
  }
  degrade(reason?: string): Effect.Effect<void> {
    return this.core.degrade(this, reason)
  }
  get releaseNow(): Effect.Effect<void> {
    return this.core.release(this)
  }
}

/**
 * The unreleased leases of each owner (an attempt's key), in the order taken: a lease held as
 * it is while its owner holds no other (most attempts take one), a Set only from the second.
 *
 * @internal
 */
export class Owners {
  readonly #byOwner = new Map<string, LeaseImpl | Set<LeaseImpl>>()
  /** Records `lease` as `owner`'s. */
  add(owner: string, lease: LeaseImpl): void {
    const held = this.#byOwner.get(owner)
    if (held === undefined) this.#byOwner.set(owner, lease)
    else if (held instanceof Set) held.add(lease)
    else this.#byOwner.set(owner, new Set([held, lease]))
  }
  /** Forgets `lease` (given back), and `owner` once it holds none. */
  delete(owner: string, lease: LeaseImpl): void {
    const held = this.#byOwner.get(owner)
    if (held === lease) {
      this.#byOwner.delete(owner)
    } else if (held instanceof Set) {
      held.delete(lease)
      if (held.size === 0) this.#byOwner.delete(owner)
    }
  }
  /** Forgets `owner` and every lease it held. */
  drop(owner: string): void {
    this.#byOwner.delete(owner)
  }
  /** `owner`'s leases, in the order taken (a copy). */
  list(owner: string): ReadonlyArray<LeaseImpl> {
    const held = this.#byOwner.get(owner)
    return held === undefined ? [] : held instanceof Set ? [...held] : [held]
  }
  /** How many leases `owner` holds. */
  size(owner: string): number {
    const held = this.#byOwner.get(owner)
    return held === undefined ? 0 : held instanceof Set ? held.size : 1
  }
}

// ---------------------------------------------------------------------------------------------
// The core
// ---------------------------------------------------------------------------------------------

/** A parked waiter with a deadline (see {@link Core.timed}): its queue, and what its timeout says. */
interface Timed {
  readonly deadline: number
  readonly waiter: Waiters.Waiter<Attempt>
  readonly pool: PoolState
  /** The pool the acquire named (its `AcquireTimeout`'s `pool`). */
  readonly home: string
  readonly timeoutMs: number
}

export class Core implements Client.ClientEnv {
  readonly pools = new Map<string, PoolState>()
  readonly owners = new Owners()
  readonly fanout: EventFanout
  readonly resolved = new Map<string, AcquireAlgorithm.AcquireAlgorithm>()
  leaseSeq = 0
  /** The opaque token algorithms key their per-service state by (`AcquireOps.service`). */
  readonly token: object = {}
  /**
   * The parked waiters whose wait has a deadline ({@link Core.park}), earliest first from
   * index {@link Core.timedHead} on (entries of waiters already ended are skipped when
   * reached): one timer fiber ({@link Core.sweeper}) for all of them instead of a timeout
   * (two fibers) around each wait.
   */
  readonly timed: Array<Timed> = []
  timedHead = 0
  /** When the running sweeper wakes next (epoch ms); `Infinity`: none runs. */
  sweepAt = Infinity
  sweeper: Fiber.RuntimeFiber<void> | undefined = undefined
  /** The generation of the current sweeper (a replaced one stops at its next wake-up). */
  sweepGen = 0

  constructor(
    readonly clock: Clock.Clock,
    readonly scope: Scope.Scope,
    readonly options: PoolsOptions,
    /** This process's event-loop stalls, passed to observing algorithms (`loopDelay.ts`). */
    readonly loopDelay: LoopDelay.LoopDelayShape
  ) {
    this.fanout = new EventFanout(options.onEvent)
  }

  now(): number {
    return this.clock.unsafeCurrentTimeMillis()
  }

  // --- pools ---------------------------------------------------------------------------------

  unknownPool(name: string): PoolNotFound {
    return new PoolNotFound({ pool: name, known: [...this.pools.keys()] })
  }

  createPool(config: PoolConfig): Effect.Effect<PoolState, ConfigError> {
    return Effect.suspend(() => {
      const issues: Array<ConfigIssue> = []
      const base = `pools.${config.name}`
      if (config.name === "") issues.push({ path: "pools", message: "a pool needs a non-empty name" })
      if (this.pools.has(config.name)) issues.push({ path: base, message: `a pool named "${config.name}" already exists` })
      const algo = AcquireAlgorithm.resolveAlgorithm(config.options.algorithm ?? "wait", this.options.plugins)
      if (algo._tag === "Left") {
        const e = algo.left
        if (e._tag === "ConfigError") {
          for (const i of e.issues) issues.push({ ...i, path: `${base}.${i.path}` })
        } else issues.push({ path: `${base}.algorithm`, message: e.message })
      }
      const deadlockWarnMs = config.options.deadlockWarn === undefined ? 5_000 : Duration.toMillis(config.options.deadlockWarn)
      let breaker: Breaker.BreakerPolicy | undefined
      if (config.options.breaker !== false) {
        const b = Breaker.policy(config.options.breaker)
        if ("issues" in b) {
          for (const i of b.issues) issues.push({ path: `${base}.breaker.${i.field}`, message: i.message })
        } else breaker = b.policy
      }
      const state: PoolState = {
        name: config.name,
        kind: config.options.kind,
        algorithm: algo._tag === "Right" ? algo.right : AcquireAlgorithm.wait(),
        deadlockWarnMs,
        onEvent: config.options.onEvent,
        breaker,
        throttledUntilMax: 0,
        list: [],
        byId: new Map(),
        waiters: new WaiterQueue(),
        waiting: 0,
        leasesTotal: 0,
        okTotal: 0,
        failedTotal: 0,
        leakedTotal: 0,
        waits: emptyWaits(),
        usage: {},
        sticky: new StickyMemory(),
        avoid: new StickyMemory(),
        handle: undefined,
        observers: []
      }
      if (state.algorithm.observe !== undefined) state.observers.push(state.algorithm)
      config.resources.forEach((r, i) => {
        const err = this.insertResource(state, r, `${base}.resources[${i}]`)
        if (err !== undefined) issues.push(...err)
      })
      if (issues.length > 0) {
        return Effect.fail(
          new ConfigError({
            message: `invalid pool "${config.name}": ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
            issues
          })
        )
      }
      this.pools.set(config.name, state)
      state.handle = this.handle(state)
      return Effect.succeed(state)
    })
  }

  /** Validates and inserts; returns issues on failure. */
  insertResource(
    pool: PoolState,
    input: Resource.Resource<any> | Resource.ResourceOptions<any>,
    path: string
  ): ReadonlyArray<ConfigIssue> | undefined {
    let resource: Resource.Resource<unknown> = (input as { _tag?: unknown })._tag === "Resource"
      ? input as Resource.Resource<unknown>
      : Resource.make(pool.kind ?? "generic", input as Resource.ResourceOptions<unknown>)
    const issues = Resource.validate(resource, path)
    if (issues.length > 0) return issues
    if (this.options.globalQuotas !== true && Resource.quotas(resource).length > 0) {
      return [{
        path: `${path}.quotas`,
        message: "quota windows are enforced only by global pools (the cluster engine's `assay runner`, or PgPools): " +
          "this engine's pools would not enforce them; run with --engine cluster, or remove quotas"
      }]
    }
    if (pool.byId.has(resource.id)) {
      if (!resource.generatedId) {
        return [{ path: `${path}.id`, message: `duplicate resource id "${resource.id}" in pool "${pool.name}"` }]
      }
      let n = 2
      while (pool.byId.has(`${resource.id}~${n}`)) n++
      resource = Resource.withId(resource, `${resource.id}~${n}`)
    }
    const res: Res = {
      resource,
      info: Resource.info(resource),
      index: pool.list.length,
      health: Resource.initialHealth,
      active: 0,
      leases: new Set(),
      client: clientNone,
      usage: {},
      latencyEmaMs: undefined,
      lastError: undefined,
      cooldownGen: 0,
      throttledUntil: 0,
      probing: false,
      throttledTotal: 0,
      breaker: Breaker.initial,
      slot: { pool: pool.name, resourceId: resource.id }
    }
    pool.list.push(res)
    pool.byId.set(resource.id, res)
    return undefined
  }

  // --- events --------------------------------------------------------------------------------

  event(
    fx: Effects,
    pool: PoolState,
    kind: string,
    resourceId: string | undefined,
    data: Record<string, Json> = {}
  ): void {
    const e: ResourceEvent = resourceId === undefined
      ? { kind, pool: pool.name, data, ts: this.now() }
      : { kind, pool: pool.name, resourceId, data, ts: this.now() }
    ;(fx.events ??= []).push(e)
  }

  /** Applies a health step to a resource, recording events and cooldown timers. */
  applyStep(fx: Effects, pool: PoolState, res: Res, step: Resource.Step, data: Record<string, Json> = {}): void {
    const before = res.health
    res.health = step.health
    if (step.health.state === "degraded" && step.health.cooldownUntil !== before.cooldownUntil) {
      const gen = ++res.cooldownGen
      ;(fx.timers ??= []).push({ pool, res, gen, until: step.health.cooldownUntil })
    } else if (step.health.state !== "degraded") {
      res.cooldownGen++
    }
    if (step.transition !== undefined) {
      this.event(fx, pool, `resource.${step.transition}`, res.resource.id, {
        consecutiveFailures: step.health.consecutiveFailures,
        ...(step.transition === "degraded" ? { cooldownUntil: step.health.cooldownUntil } : {}),
        ...data
      })
    }
  }

  /**
   * Sleeps until the clock reads `until` (epoch ms) or later. A timer may fire early (Node
   * fires up to ~1 ms before its deadline as `Date.now()` sees it) or late; every wake-up
   * re-reads the clock and sleeps again while the deadline is still ahead, so whatever is
   * checked after it (a throttle window, a cooldown, an open breaker) holds when it runs.
   */
  sleepUntil(until: number): Effect.Effect<void> {
    const loop: Effect.Effect<void> = Effect.suspend(() => {
      const left = until - this.now()
      return left <= 0 ? Effect.void : Effect.zipRight(this.clock.sleep(Duration.millis(Math.max(1, left))), loop)
    })
    return loop
  }

  /**
   * Runs a timer fiber in the service's scope, interruptible whatever region it is forked
   * from (a fiber inherits its parent's interruptibility: a timer forked inside an
   * uninterruptible region, a lease release or an acquire's bookkeeping, would otherwise
   * hold the scope's closing, or its interrupter, until it fires).
   */
  timer(effect: Effect.Effect<void>): Effect.Effect<Fiber.RuntimeFiber<void>> {
    return Effect.forkIn(Effect.interruptible(effect), this.scope)
  }

  flush(fx: Effects): Effect.Effect<void> {
    if (fx.events === undefined && fx.timers === undefined && fx.throttles === undefined && fx.breakers === undefined) {
      return Effect.void
    }
    return Effect.suspend(() => {
      const effects: Array<Effect.Effect<unknown>> = []
      if (fx.timers !== undefined) {
        for (const t of fx.timers) effects.push(this.timer(this.cooldownTimer(t.pool, t.res, t.gen, t.until)))
      }
      if (fx.throttles !== undefined) {
        for (const t of fx.throttles) {
          // the window's end re-checked by `sleepUntil`; `dispatch` serves what is free then
          effects.push(this.timer(Effect.zipRight(this.sleepUntil(t.until), Effect.sync(() => this.dispatch(t.pool)))))
        }
      }
      if (fx.breakers !== undefined) {
        for (const t of fx.breakers) effects.push(this.timer(this.breakerTimer(t.pool, t.res, t.opened, t.until)))
      }
      if (fx.events !== undefined) {
        for (const e of fx.events) effects.push(this.fanout.deliver(e, this.pools.get(e.pool)?.onEvent))
      }
      return Effect.all(effects, { discard: true })
    })
  }

  cooldownTimer(pool: PoolState, res: Res, gen: number, until: number): Effect.Effect<void> {
    return Effect.flatMap(
      this.sleepUntil(until),
      () =>
        Effect.suspend(() => {
          const fx: Effects = { events: undefined, timers: undefined }
          if (res.cooldownGen === gen) {
            const step = Resource.onCooldownEnd(res.health, this.now())
            if (step.transition !== undefined) {
              // a stored factory failure gets a real retry after the cooldown
              if (res.client._tag === "failed") res.client = clientNone
              this.applyStep(fx, pool, res, step)
              this.dispatch(pool)
            }
          }
          return this.flush(fx)
        })
    )
  }

  /** An open breaker's time is over: half-open (one probe at a time), waiters woken. */
  breakerTimer(pool: PoolState, res: Res, opened: number, until: number): Effect.Effect<void> {
    return Effect.flatMap(this.sleepUntil(until), () =>
      Effect.suspend(() => {
        if (res.breaker.opened !== opened) return Effect.void
        const fx: Effects = { events: undefined, timers: undefined }
        this.applyBreaker(fx, pool, res, Breaker.onOpenEnd(res.breaker, this.now()))
        if (pool.waiters.head !== undefined) this.dispatch(pool)
        return this.flush(fx)
      }))
  }

  /** Applies a breaker step, recording its event and, when it opened, its timer. */
  applyBreaker(fx: Effects, pool: PoolState, res: Res, step: Breaker.BreakerStep, data: Record<string, Json> = {}): void {
    res.breaker = step.breaker
    if (step.transition === undefined) return
    if (step.transition === "opened") {
      ;(fx.breakers ??= []).push({ pool, res, opened: step.breaker.opened, until: step.breaker.openUntil })
    }
    this.event(fx, pool, `breaker.${step.transition}`, res.resource.id, {
      ...(step.transition === "opened" ? { openUntil: step.breaker.openUntil, failedProbes: step.breaker.failedProbes } : {}),
      ...data
    })
  }

  // --- taking slots --------------------------------------------------------------------------

  free(res: Res, now: number): boolean {
    if (now < res.throttledUntil) return false
    const b = res.breaker
    if (b.state === "open" && now < b.openUntil) return false
    // a probe at a time: after a rate limit, or while the breaker is half-open
    const declared = res.probing || b.state !== "closed" ? 1 : res.resource.capacity
    const capacity = res.ceiling === undefined ? declared : Math.min(declared, res.ceiling)
    return res.active < capacity && Resource.inRotation(res.health, now)
  }

  /** Picks a free matching resource (no side effects). */
  pick(pool: PoolState, selector: Selector, ranker: AcquireAlgorithm.Ranker | undefined, now: number): Res | undefined {
    if (ranker === undefined) {
      for (const res of pool.list) {
        if (this.free(res, now) && Resource.matches(selector, res.info)) return res
      }
      return undefined
    }
    const candidates: Array<AcquireAlgorithm.Candidate> = []
    for (const res of pool.list) {
      if (this.free(res, now) && Resource.matches(selector, res.info)) {
        candidates.push({
          resource: res.info,
          index: res.index,
          active: res.active,
          capacity: res.resource.capacity,
          usage: res.usage,
          latencyEmaMs: res.latencyEmaMs,
          consecutiveFailures: res.health.consecutiveFailures
        })
      }
    }
    if (candidates.length === 0) return undefined
    const first = ranker(candidates)[0]
    if (first === undefined) return undefined
    const res = pool.byId.get(first.resource.id)
    return res !== undefined && this.free(res, now) && Resource.matches(selector, res.info) ? res : undefined
  }

  take(attempt: Attempt, res: Res): void {
    res.active++
    attempt.taken.push(res)
  }

  /** Gives a slot back (not a lease) and wakes waiters. */
  untake(pool: PoolState, res: Res): void {
    res.active--
    if (pool.waiters.head !== undefined) this.dispatch(pool)
  }

  /** Serves queued waiters FIFO (skipping those no free resource matches). */
  dispatch(pool: PoolState): void {
    const now = this.now()
    let w = pool.waiters.head
    while (w !== undefined) {
      const next = w.next
      const res = this.pick(pool, w.selector, w.ranker, now)
      if (res !== undefined) {
        // the slot is recorded on the attempt first: an interruption from here gives it back
        this.take(w.attempt, res)
        pool.waiters.detach(w)?.(Effect.succeed(res.slot))
        if (!this.anyFree(pool, now)) return
      } else {
        const hopeless = this.hopeless(pool, w.selector)
        if (hopeless !== undefined) {
          pool.waiters.detach(w)?.(Effect.fail(hopeless))
        } else {
          this.refuseIfOverlong(pool, w, now)
        }
      }
      w = next
    }
  }

  /** Fails every queued waiter whose usable resources are all throttled past its ceiling. */
  refuseOverlong(pool: PoolState): void {
    const now = this.now()
    let w = pool.waiters.head
    while (w !== undefined) {
      const next = w.next
      this.refuseIfOverlong(pool, w, now)
      w = next
    }
  }

  refuseIfOverlong(pool: PoolState, w: Waiters.Waiter<Attempt>, now: number): void {
    const refused = this.overlong(pool, w.selector, w.maxDelayMs, now)
    if (refused === undefined) return
    pool.waiters.detach(w)?.(Effect.fail(refused))
  }

  /**
   * A wait longer than the acquire accepts: every resource matching the selector that is not
   * dead or revoked is throttled by its server past `now + maxDelayMs`, and there is at least
   * one (the earliest end is reported).
   */
  overlong(pool: PoolState, selector: Selector, maxDelayMs: number, now: number): ServerDelayRefused | undefined {
    if (pool.throttledUntilMax - now <= maxDelayMs) return undefined
    let earliest: Res | undefined
    for (const res of pool.list) {
      if (!Resource.matches(selector, res.info)) continue
      const state = Resource.effectiveState(res.health, now)
      if (state === "dead" || state === "revoked") continue
      if (res.throttledUntil - now <= maxDelayMs) return undefined
      if (earliest === undefined || res.throttledUntil < earliest.throttledUntil) earliest = res
    }
    if (earliest === undefined) return undefined
    return new ServerDelayRefused({
      pool: pool.name,
      resourceId: earliest.resource.id,
      retryAfterMs: earliest.throttledUntil - now,
      untilMs: earliest.throttledUntil,
      maxDelayMs,
      errorClass: "rate_limit"
    })
  }

  /**
   * A wait that can never be served: every resource matching the selector is dead or revoked
   * (neither comes back by itself) and at least one of them died (its endpoint keeps failing,
   * so waiting would hang the run). A selector whose resources were all revoked, or that
   * matches no resource at all, keeps waiting: revocation is an operator's move, usually
   * followed by an `add`.
   */
  hopeless(pool: PoolState, selector: Selector): ResourceUnavailable | undefined {
    const now = this.now()
    let matching = 0
    let dead = 0
    for (const res of pool.list) {
      if (!Resource.matches(selector, res.info)) continue
      matching++
      const state = Resource.effectiveState(res.health, now)
      if (state === "dead") dead++
      else if (state !== "revoked") return undefined
    }
    if (matching === 0 || dead === 0) return undefined
    return new ResourceUnavailable({
      pool: pool.name,
      message: `every resource of pool "${pool.name}" that matches the request is dead or revoked (${dead} dead of ${matching}); a successful report or an added resource is needed`
    })
  }

  anyFree(pool: PoolState, now: number): boolean {
    for (const res of pool.list) if (this.free(res, now)) return true
    return false
  }

  markWaiting(attempt: Attempt, pool: PoolState): void {
    if (!attempt.waited) {
      attempt.waited = true
      pool.waiting++
    }
  }

  ops(
    attempt: Attempt,
    target: string,
    selector: Selector,
    holder: Holder,
    ranker: AcquireAlgorithm.Ranker | undefined,
    home: PoolState
  ): AcquireAlgorithm.AcquireOps {
    const core = this
    const poolOf = (name: string | undefined) => core.pools.get(name ?? target)
    const ops: AcquireAlgorithm.AcquireOps = {
      pool: target,
      selector,
      taskName: holder.taskName,
      pipelineId: holder.pipelineId,
      ranker,
      tryTake: (name) =>
        Effect.suspend((): Effect.Effect<Option.Option<AcquireAlgorithm.Slot>, PoolNotFound | ServerDelayRefused> => {
          const pool = poolOf(name)
          if (pool === undefined) return Effect.fail(core.unknownPool(name ?? target))
          const now = core.now()
          const res = core.pick(pool, selector, ranker, now)
          if (res === undefined) {
            // nothing free: a wait the holder would not accept is refused now (issue 20 §2),
            // whichever algorithm asks (backoff polls instead of queueing)
            const refused = core.overlong(pool, selector, holder.maxServerDelayMs ?? defaultMaxServerDelayMs, now)
            if (refused !== undefined) return Effect.fail(refused)
            core.markWaiting(attempt, home)
            return Effect.succeed(Option.none())
          }
          core.take(attempt, res)
          return Effect.succeed(Option.some(res.slot))
        }),
      wait: (name) =>
        Effect.suspend((): Effect.Effect<AcquireAlgorithm.Slot, PoolNotFound | ResourceUnavailable | ServerDelayRefused> => {
          const pool = poolOf(name)
          if (pool === undefined) return Effect.fail(core.unknownPool(name ?? target))
          // an algorithm's attempt has no deadline (its acquire's timeout wraps it): no AcquireTimeout here
          return core.park(pool, selector, ranker, attempt, home, holder) as Effect.Effect<
            AcquireAlgorithm.Slot,
            ResourceUnavailable | ServerDelayRefused
          >
        }),
      lastResourceId: (name) => poolOf(name)?.sticky.get(holder.pipelineId),
      service: core.token,
      now: () => core.now(),
      with: (patch) =>
        core.ops(
          attempt,
          patch.pool ?? target,
          selector,
          holder,
          "ranker" in patch ? patch.ranker : ranker,
          home
        )
    }
    return ops
  }

  /**
   * Takes a free slot or queues FIFO for one; check and enqueue happen in one synchronous
   * step. Fails at once with `ResourceUnavailable` when every matching resource is dead or
   * revoked (see {@link Core.hopeless}), and with `ServerDelayRefused` when every usable one
   * is throttled longer than the holder accepts.
   *
   * Only a waiter that is really queued starts the deadlock watch: an acquire served at once
   * never arms a timer (issue 21: a task holding a lease that acquired a free slot of another
   * pool waited for the watch's timer, forked uninterruptible, to fire before going on).
   */
  park(
    pool: PoolState,
    selector: Selector,
    ranker: AcquireAlgorithm.Ranker | undefined,
    attempt: Attempt,
    home: PoolState,
    holder: Holder
  ): Effect.Effect<AcquireAlgorithm.Slot, ResourceUnavailable | ServerDelayRefused | AcquireTimeout> {
    return Effect.suspend(() => {
      const held = this.heldPoolsFor(holder)
      if (held.length > 0) {
        // a holder of other leases is watched for deadlocks only when it really queues
        const res = this.pick(pool, selector, ranker, this.now())
        if (res !== undefined) {
          this.take(attempt, res)
          return Effect.succeed(res.slot)
        }
      }
      const maxDelayMs = holder.maxServerDelayMs ?? defaultMaxServerDelayMs
      const waiter = Waiters.waiter(selector, ranker, maxDelayMs, attempt)
      const deadline = attempt.deadline
      const parked = Effect.async<AcquireAlgorithm.Slot, ResourceUnavailable | ServerDelayRefused | AcquireTimeout>((resume) => {
        // check, refuse or enqueue in one synchronous step (a fiber can yield between two)
        const now = this.now()
        const res = this.pick(pool, selector, ranker, now)
        if (res !== undefined) {
          this.take(attempt, res)
          resume(Effect.succeed(res.slot))
          return
        }
        const hopeless = this.hopeless(pool, selector)
        if (hopeless !== undefined) {
          resume(Effect.fail(hopeless))
          return
        }
        const refused = this.overlong(pool, selector, maxDelayMs, now)
        if (refused !== undefined) {
          resume(Effect.fail(refused))
          return
        }
        if (deadline !== undefined && now >= deadline) {
          resume(Effect.fail(new AcquireTimeout({ pool: home.name, timeoutMs: attempt.timeoutMs ?? 0 })))
          return
        }
        this.markWaiting(attempt, home)
        waiter.resume = resume
        pool.waiters.push(waiter)
        if (deadline !== undefined) this.addTimed({ deadline, waiter, pool, home: home.name, timeoutMs: attempt.timeoutMs ?? 0 })
        return Effect.sync(() => {
          // interrupted: leave the queue; a slot granted meanwhile is in `attempt.taken`
          pool.waiters.detach(waiter)
        })
      })
      // the sweeper that ends the wait at its deadline runs (or is started) before the waiter parks
      const armed = deadline === undefined || deadline >= this.sweepAt ? parked : Effect.zipRight(this.armSweeper(deadline), parked)
      return held.length === 0 ? armed : this.watchDeadlock(armed, pool, holder, held)
    })
  }

  /** Whether no resource of `pool` builds a client (a lease is built at once once granted). */
  noFactory(pool: PoolState): boolean {
    for (const res of pool.list) if (res.resource.factory !== undefined) return false
    return true
  }

  /** Records a parked waiter's deadline, in deadline order (the end in the common case). */
  addTimed(t: Timed): void {
    const list = this.timed
    let i = list.length
    while (i > this.timedHead && list[i - 1]!.deadline > t.deadline) i--
    if (i === list.length) list.push(t)
    else list.splice(i, 0, t)
  }

  /**
   * Makes sure a sweeper wakes at `deadline` at the latest: one fiber in the service's scope
   * that sleeps until the earliest recorded deadline, fails every waiter whose deadline has
   * come with `AcquireTimeout` (taking it out of its queue), and goes on while deadlines are
   * left. A deadline earlier than the running sweeper's next wake-up replaces it.
   */
  armSweeper(deadline: number): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (deadline >= this.sweepAt) return Effect.void
      const previous = this.sweeper
      this.sweepAt = deadline
      // a replaced sweeper that wakes before its interruption reaches it does nothing
      const gen = ++this.sweepGen
      const loop: Effect.Effect<void> = Effect.suspend(() =>
        Effect.zipRight(
          this.sleepUntil(this.sweepAt),
          Effect.suspend(() => {
            if (gen !== this.sweepGen) return Effect.void
            const next = this.sweep(this.now())
            if (next === undefined) {
              this.sweepAt = Infinity
              this.sweeper = undefined
              return Effect.void
            }
            this.sweepAt = next
            return loop
          })
        )
      )
      return Effect.flatMap(this.timer(loop), (fiber) => {
        this.sweeper = fiber
        return previous === undefined ? Effect.void : Fiber.interruptFork(previous)
      })
    })
  }

  /**
   * Ends every recorded wait whose deadline is at or before `now` with `AcquireTimeout`;
   * answers the next deadline still recorded (`undefined`: none).
   */
  sweep(now: number): number | undefined {
    const list = this.timed
    while (this.timedHead < list.length) {
      const t = list[this.timedHead]!
      if (t.deadline > now) break
      this.timedHead++
      const resume = t.pool.waiters.detach(t.waiter)
      if (resume !== undefined) resume(Effect.fail(new AcquireTimeout({ pool: t.home, timeoutMs: t.timeoutMs })))
    }
    // the entries of waiters already served are dropped as they come up; the array is
    // compacted once most of it is behind the head
    if (this.timedHead === list.length) {
      list.length = 0
      this.timedHead = 0
      return undefined
    }
    if (this.timedHead > 1024 && this.timedHead * 2 > list.length) {
      list.splice(0, this.timedHead)
      this.timedHead = 0
    }
    return list[this.timedHead]!.deadline
  }

  /** The pools a holder already holds leases from. */
  heldPoolsFor(holder: Holder): ReadonlyArray<string> {
    return holder.heldPools?.() ?? this.heldPoolsOf(holder.owner)
  }

  /** The pools an owner holds unreleased leases from (what `heldPools` defaults to). */
  heldPoolsOf(owner: string | undefined): ReadonlyArray<string> {
    if (owner === undefined || this.owners.size(owner) === 0) return []
    const pools = new Set<string>()
    for (const lease of this.owners.list(owner)) pools.add(lease.pool)
    return Array.from(pools)
  }

  /**
   * Runs `wait` with a warning timer: when the holder already holds leases and the wait lasts
   * the smallest `deadlockWarn` of their pools, `acquire.suspected_deadlock` is emitted. The
   * timer is an interruptible fiber of the service's scope, stopped without waiting for it
   * (`interruptFork`) as soon as the wait ends in any way.
   */
  watchDeadlock<A, E>(
    wait: Effect.Effect<A, E>,
    pool: PoolState,
    holder: Holder,
    held: ReadonlyArray<string>
  ): Effect.Effect<A, E> {
    let warnMs = Infinity
    for (const name of held) {
      const p = this.pools.get(name)
      warnMs = Math.min(warnMs, p === undefined ? 5_000 : p.deadlockWarnMs)
    }
    if (!Number.isFinite(warnMs)) return wait
    const deadline = this.now() + warnMs
    const warn = Effect.flatMap(this.sleepUntil(deadline), () => {
      const fx: Effects = { events: undefined, timers: undefined }
      this.event(fx, pool, "acquire.suspected_deadlock", undefined, {
        taskName: holder.taskName,
        pipelineId: holder.pipelineId,
        heldPools: [...held],
        waitedMs: warnMs
      })
      return this.flush(fx)
    })
    return Effect.flatMap(this.timer(warn), (fiber) => Effect.ensuring(wait, Fiber.interruptFork(fiber)))
  }

  // --- acquiring -----------------------------------------------------------------------------

  resolveInput(
    input: AlgorithmInput | AcquireAlgorithm.AcquireAlgorithm
  ): Effect.Effect<AcquireAlgorithm.AcquireAlgorithm, AcquireError> {
    if (typeof input === "string") {
      const hit = this.resolved.get(input)
      if (hit !== undefined) return Effect.succeed(hit)
    } else if (AcquireAlgorithm.isAcquireAlgorithm(input)) {
      return Effect.succeed(input)
    }
    const r = AcquireAlgorithm.resolveAlgorithm(input, this.options.plugins)
    if (r._tag === "Left") return Effect.fail(r.left)
    if (typeof input === "string") this.resolved.set(input, r.right)
    return Effect.succeed(r.right)
  }

  /** Keeps `slot`, gives back every other slot of the attempt. */
  settle(attempt: Attempt, keep: Res | undefined): void {
    for (const res of attempt.taken) {
      if (res === keep) {
        keep = undefined
        continue
      }
      const pool = this.pools.get(res.slot.pool)
      if (pool !== undefined) this.untake(pool, res)
    }
    attempt.taken.length = 0
  }

  /**
   * Whether `res` can serve a lease now or once a slot of it frees: in rotation (not dead,
   * revoked or cooling down), not throttled by its server, its breaker not open.
   */
  canServe(res: Res, now: number): boolean {
    if (now < res.throttledUntil) return false
    if (res.breaker.state === "open" && now < res.breaker.openUntil) return false
    return Resource.inRotation(res.health, now)
  }

  /**
   * The selector of an acquire by `holder` from `pool`: `selector` itself, or, when the
   * holder's last lease from this pool ended in a transient failure (classes `upstream`,
   * `connection`, `timeout`: the endpoint's fault, not the request's) and another resource
   * matching `selector` can serve ({@link canServe}; busy is fine: the acquire waits for it),
   * `selector` without that resource. Once: the acquire after it is served as usual. With no
   * other resource that can serve, the retry goes back to the one that failed it.
   *
   * A retry sent back to the endpoint that just failed it fails again while that endpoint is
   * down; the breaker that takes it out of rotation needs `minRequests` outcomes first, which a
   * process with little traffic on it (one pipeline at a time; one runner of several, issue 17
   * chaos C9) may not see before a task's attempts run out. After Envoy's retry host predicate
   * `previous_hosts` (envoyproxy.io, "Retry plugin configuration"), here on by default and with
   * a fallback instead of a bounded number of re-selections.
   */
  avoiding(pool: PoolState, holder: Holder, selector: Selector): Selector {
    if (pool.avoid.empty || holder.pipelineId === "") return selector
    const id = pool.avoid.take(avoidKey(holder.pipelineId, holder.taskName))
    if (id === undefined) return selector
    const failed = pool.byId.get(id)
    if (failed === undefined) return selector
    const now = this.now()
    let other = false
    for (const res of pool.list) {
      if (res !== failed && Resource.matches(selector, res.info) && this.canServe(res, now)) {
        other = true
        break
      }
    }
    if (!other) return selector
    const info = failed.info
    const where = selector.where
    return { ...selector, where: (i: ResourceInfo) => i !== info && (where === undefined || where(i)) }
  }

  acquireCore(
    options: AcquireOptions | string | undefined,
    holder: Holder,
    raw: boolean
  ): Effect.Effect<LeaseImpl, AcquireError> {
    return Effect.suspend(() => {
      const opts: AcquireOptions = typeof options === "string" ? { pool: options } : options ?? {}
      let poolName = opts.pool ?? holder.defaultPool
      if (poolName === undefined && this.pools.size === 1) poolName = this.pools.keys().next().value
      const pool = poolName === undefined ? undefined : this.pools.get(poolName)
      if (pool === undefined) return Effect.fail(this.unknownPool(poolName ?? "(none given)"))
      const algoInput = opts.algorithm ?? holder.defaultAlgorithm
      const selector: Selector = this.avoiding(pool, holder, opts)
      const go = (algorithm: AcquireAlgorithm.AcquireAlgorithm): Effect.Effect<LeaseImpl, AcquireError> => {
        const started = this.now()
        const now = this.grantNow(pool, algorithm, selector, holder, raw, started)
        if (now !== undefined) return Effect.succeed(now)
        const attempt: Attempt = { taken: [], waited: false, lease: undefined }
        const plain = algorithm.hints?.plainWait === true
        // a plain wait on resources whose clients need no building: the only thing that waits
        // is the parked waiter, which carries the acquire's deadline itself (no timeout fibers)
        const timed = opts.timeout !== undefined && plain && this.noFactory(pool)
        if (timed) {
          attempt.timeoutMs = Duration.toMillis(Duration.decode(opts.timeout!))
          attempt.deadline = started + attempt.timeoutMs
        }
        let phase: Effect.Effect<LeaseImpl, AcquireError> = plain
          ? Effect.flatMap(
            this.park(pool, selector, undefined, attempt, pool, holder),
            (slot) => this.buildLease(attempt, slot, holder, raw, started, pool)
          )
          : Effect.flatMap(
            algorithm.acquire(this.ops(attempt, pool.name, selector, holder, undefined, pool)),
            (slot) => this.buildLease(attempt, slot, holder, raw, started, pool)
          )
        if (opts.timeout !== undefined && !timed) {
          const timeout = Duration.decode(opts.timeout)
          phase = Effect.timeoutFail(phase, {
            duration: timeout,
            onTimeout: () => new AcquireTimeout({ pool: pool.name, timeoutMs: Duration.toMillis(timeout) })
          })
        }
        return Effect.uninterruptible(
          Effect.onExit(Effect.interruptible(phase), (exit) =>
            Effect.sync(() => {
              if (attempt.waited) pool.waiting--
              if (Exit.isFailure(exit)) {
                this.settle(attempt, undefined)
                // a lease built as the acquire was interrupted (its timeout races the build in
                // another fiber, whose result is then dropped) reaches nobody: give it back
                if (attempt.lease !== undefined) this.releaseNow(attempt.lease)
              }
            }))
        )
      }
      return algoInput === undefined ? go(pool.algorithm) : Effect.flatMap(this.resolveInput(algoInput), go)
    })
  }

  /**
   * The fast path of an acquire: with an algorithm that takes the first free resource in pool
   * order, a free resource whose client needs no building is leased synchronously (and the
   * algorithm registered as an observer of `pool`, as every acquire does); `undefined` when the
   * acquire has to go through the algorithm (or wait).
   */
  grantNow(
    pool: PoolState,
    algorithm: AcquireAlgorithm.AcquireAlgorithm,
    selector: Selector,
    holder: Holder,
    raw: boolean,
    started: number
  ): LeaseImpl | undefined {
    if (algorithm.observe !== undefined && !pool.observers.includes(algorithm)) pool.observers.push(algorithm)
    if (algorithm.hints?.firstFreeInPoolOrder !== true) return undefined
    const res = this.pick(pool, selector, undefined, started)
    if (res === undefined || !(res.resource.factory === undefined || res.client._tag === "ready")) return undefined
    res.active++
    const client = res.client._tag === "ready" ? res.client.value : undefined
    return this.newLease(pool, res, client, holder, raw, started)
  }

  /**
   * {@link grantNow} for an acquire's options, when they name (or default to) a known pool and
   * an algorithm known without an Effect (the pool's own, an instance, or a name resolved
   * before); `undefined` otherwise (the acquire then goes through {@link acquireCore}, which
   * reports an unknown pool or algorithm). No timeout applies: nothing waits.
   */
  leaseNow(options: AcquireOptions | string | undefined, holder: Holder, raw: boolean): LeaseImpl | undefined {
    const opts: AcquireOptions = typeof options === "string" ? { pool: options } : options ?? noOptions
    let poolName = opts.pool ?? holder.defaultPool
    if (poolName === undefined && this.pools.size === 1) poolName = this.pools.keys().next().value
    const pool = poolName === undefined ? undefined : this.pools.get(poolName)
    if (pool === undefined) return undefined
    const input = opts.algorithm ?? holder.defaultAlgorithm
    const algorithm = input === undefined
      ? pool.algorithm
      : typeof input === "string"
      ? this.resolved.get(input)
      : AcquireAlgorithm.isAcquireAlgorithm(input)
      ? input
      : undefined
    if (algorithm === undefined) return undefined
    // a retry that should go elsewhere takes the full path (`acquireCore`), which reads the entry
    if (!pool.avoid.empty && holder.pipelineId !== "" && pool.avoid.get(avoidKey(holder.pipelineId, holder.taskName)) !== undefined) {
      return undefined
    }
    return this.grantNow(pool, algorithm, opts, holder, raw, this.now())
  }

  buildLease(
    attempt: Attempt,
    slot: AcquireAlgorithm.Slot,
    holder: Holder,
    raw: boolean,
    started: number,
    home: PoolState
  ): Effect.Effect<LeaseImpl, AcquireError> {
    const pool = this.pools.get(slot.pool)
    const res = pool?.byId.get(slot.resourceId)
    if (pool === undefined || res === undefined || !attempt.taken.includes(res)) {
      return Effect.dieMessage(`algorithm returned a slot it did not take: ${slot.pool}/${slot.resourceId}`)
    }
    const finish = (client: unknown): Effect.Effect<LeaseImpl> =>
      Effect.sync(() => {
        this.settle(attempt, res)
        const now = this.now()
        if (attempt.waited) {
          recordWait(home.waits, now - started)
        }
        return attempt.lease = this.newLease(pool, res, client, holder, raw, now)
      })
    const factory = res.resource.factory
    if (factory === undefined) return finish(undefined)
    return Effect.flatMap(Client.client(this, pool, res, factory), finish)
  }

  /** Records a lease on a slot already counted in `res.active`. */
  newLease(pool: PoolState, res: Res, client: unknown, holder: Holder, raw: boolean, now: number): LeaseImpl {
    const id = `${pool.name}/${res.resource.id}#${++this.leaseSeq}`
    const lease = new LeaseImpl(id, pool.name, res, client, holder.taskName, now, holder.owner, raw, this)
    lease.breakerEpoch = res.breaker.opened
    lease.probe = res.breaker.state !== "closed"
    lease.pipelineId = holder.pipelineId
    res.leases.add(lease)
    pool.leasesTotal++
    if (holder.pipelineId !== "") {
      // bounded: an endless run does not keep one entry per pipeline it ever saw
      pool.sticky.set(holder.pipelineId, res.resource.id)
    }
    if (holder.owner !== undefined) this.owners.add(holder.owner, lease)
    return lease
  }

  countFactoryFailure(fx: Effects, pool: PoolState, res: Res): void {
    pool.failedTotal++
    res.lastError = res.client._tag === "failed" ? messageOf(res.client.error) : res.lastError
    this.applyStep(fx, pool, res, Resource.onFailure(res.health, res.resource, this.now()))
  }

  // --- lease operations ----------------------------------------------------------------------

  release(lease: LeaseImpl): Effect.Effect<void> {
    return Effect.sync(() => this.releaseNow(lease))
  }

  /** Gives a lease back now (idempotent) and serves the waiters its slot can. */
  releaseNow(lease: LeaseImpl): void {
    if (lease.released) return
    lease.released = true
    const res = lease.res
    res.leases.delete(lease)
    if (lease.owner !== undefined) this.owners.delete(lease.owner, lease)
    const pool = this.pools.get(lease.pool)
    res.active--
    if (pool !== undefined && pool.waiters.head !== undefined) this.dispatch(pool)
  }

  report(lease: LeaseImpl, report: LeaseReport): Effect.Effect<void> {
    return Effect.suspend(() => {
      const pool = this.pools.get(lease.pool)
      if (pool === undefined) return Effect.void
      const res = lease.res
      const fx: Effects = { events: undefined, timers: undefined }
      if (report.latencyMs !== undefined && Number.isFinite(report.latencyMs)) {
        res.latencyEmaMs = res.latencyEmaMs === undefined
          ? report.latencyMs
          : EMA_ALPHA * report.latencyMs + (1 - EMA_ALPHA) * res.latencyEmaMs
      }
      if (report.usage !== undefined) {
        for (const [k, v] of Object.entries(report.usage)) {
          if (typeof v !== "number" || !Number.isFinite(v)) continue
          res.usage[k] = (res.usage[k] ?? 0) + v
          pool.usage[k] = (pool.usage[k] ?? 0) + v
        }
      }
      const now = this.now()
      const errorClass = report.ok === false && report.error !== undefined ? classify(report.error) : undefined
      if (pool.observers.length > 0) this.observe(pool, lease, report, errorClass, now)
      // the endpoint's fault: the holder's next acquire goes elsewhere when it can (`avoiding`)
      if (errorClass !== undefined && lease.pipelineId !== "" && Breaker.breakerClasses.has(errorClass)) {
        pool.avoid.set(avoidKey(lease.pipelineId, lease.taskName), res.resource.id)
      }
      const breaker = pool.breaker
      // The breaker hears probes, and the leases granted since it last closed.
      const current = lease.breakerEpoch === res.breaker.opened
      if (breaker !== undefined && lease.probe && current && res.breaker.state === "open") {
        this.applyBreaker(fx, pool, res, Breaker.onOpenEnd(res.breaker, now))
      }
      const probeOf = (outcome: "ok" | "failed" | "other") => {
        if (breaker === undefined || !current) return
        if (lease.probe) {
          this.applyBreaker(fx, pool, res, Breaker.onProbe(res.breaker, breaker, outcome, now))
          lease.probe = false
        } else if (outcome !== "other") {
          this.applyBreaker(fx, pool, res, Breaker.onOutcome(res.breaker, breaker, outcome === "failed", now))
        }
      }
      if (errorClass === "rate_limit") {
        // Throttled by the server: the endpoint works, it asked us to slow down. Never a
        // health failure (it never degrades or kills the resource), never a breaker failure.
        // With a hint (Retry-After, reset headers, a body hint: the error's retry-after) the
        // resource is out of rotation until then, then one probe lease at a time until a
        // success; without one, one lease at a time at once (each pipeline backs off by its
        // retry policy).
        pool.failedTotal++
        res.lastError = messageOf(report.error)
        res.probing = true
        res.throttledTotal++
        const retryAfterMs = retryAfterOf(report.error, now)
        if (retryAfterMs !== undefined && retryAfterMs > 0) {
          const until = now + retryAfterMs
          if (until > res.throttledUntil) {
            res.throttledUntil = until
            if (until > pool.throttledUntilMax) pool.throttledUntilMax = until
            ;(fx.throttles ??= []).push({ pool, until })
          }
          this.event(fx, pool, "resource.throttled", res.resource.id, { retryAfterMs, until })
          // waiters that will not wait this long fail now instead of waiting silently
          if (pool.waiters.head !== undefined) this.refuseOverlong(pool)
        } else {
          this.event(fx, pool, "resource.throttled", res.resource.id, { retryAfterMs: null, until: null })
        }
        probeOf("other")
      } else if (report.ok === false && breaker !== undefined && errorClass !== undefined && Breaker.breakerClasses.has(errorClass)) {
        // A transient failure (5xx, connection, timeout): the breaker's business, not the
        // failure streak's; an endpoint whose probes keep failing `deadAfter` times in a row
        // is dead (it will not come back by itself).
        pool.failedTotal++
        res.lastError = messageOf(report.error)
        const wasProbe = lease.probe && current
        probeOf("failed")
        if (wasProbe && res.breaker.failedProbes >= res.resource.deadAfter && res.health.state !== "dead") {
          this.applyStep(fx, pool, res, {
            health: { state: "dead", consecutiveFailures: res.health.consecutiveFailures, cooldownUntil: 0 },
            transition: "dead"
          }, { error: jsonError(report.error), failedProbes: res.breaker.failedProbes })
          if (pool.waiters.head !== undefined) this.dispatch(pool)
        }
      } else if (report.ok === false) {
        pool.failedTotal++
        if (report.error !== undefined) res.lastError = messageOf(report.error)
        this.applyStep(
          fx,
          pool,
          res,
          Resource.onFailure(res.health, res.resource, this.now()),
          report.error === undefined ? {} : { error: jsonError(report.error) }
        )
        probeOf("other")
        // A resource that just died may leave waiters nothing to wait for: fail those now.
        if (res.health.state === "dead" && pool.waiters.head !== undefined) this.dispatch(pool)
      } else {
        pool.okTotal++
        const wasOpen = res.breaker.state !== "closed"
        if (report.ok === true) probeOf("ok")
        if (res.probing || (wasOpen && res.breaker.state === "closed")) {
          res.probing = false
          if (pool.waiters.head !== undefined) this.dispatch(pool)
        }
        const step = Resource.onSuccess(res.health)
        this.applyStep(fx, pool, res, step)
        if (step.transition === "revived" && pool.waiters.head !== undefined) this.dispatch(pool)
      }
      return this.flush(fx)
    })
  }

  /** Tells the pool's observing algorithms about one report (see `AcquireAlgorithm.observe`). */
  observe(pool: PoolState, lease: LeaseImpl, report: LeaseReport, errorClass: ErrorClass | undefined, now: number): void {
    const res = lease.res
    const observation: AcquireAlgorithm.ReportObservation = {
      service: this.token,
      pool: pool.name,
      resourceId: res.resource.id,
      capacity: res.resource.capacity,
      active: res.active,
      now,
      leasedAt: lease.acquiredAt,
      ok: report.ok,
      latencyMs: report.latencyMs,
      usage: report.usage,
      rateLimit: report.rateLimit,
      errorClass,
      retryAfterMs: errorClass === "rate_limit" ? retryAfterOf(report.error, now) : undefined,
      loopDelay: this.loopDelay
    }
    for (const algorithm of pool.observers) algorithm.observe!(observation)
  }

  degrade(lease: LeaseImpl, reason: string | undefined): Effect.Effect<void> {
    return Effect.suspend(() => {
      const pool = this.pools.get(lease.pool)
      if (pool === undefined) return Effect.void
      const fx: Effects = { events: undefined, timers: undefined }
      this.applyStep(
        fx,
        pool,
        lease.res,
        Resource.onDegrade(lease.res.health, lease.res.resource, this.now()),
        reason === undefined || reason === "" ? { explicit: true } : { explicit: true, reason }
      )
      return this.flush(fx)
    })
  }

  // --- registry operations -------------------------------------------------------------------

  addResource(
    pool: PoolState,
    input: Resource.Resource<any> | Resource.ResourceOptions<any>
  ): Effect.Effect<ResourceInfo, ConfigError> {
    return Effect.suspend(() => {
      const issues = this.insertResource(pool, input, `pools.${pool.name}.resources[${pool.list.length}]`)
      if (issues !== undefined) {
        return Effect.fail(
          new ConfigError({ message: issues.map((i) => `${i.path}: ${i.message}`).join("; "), issues: [...issues] })
        )
      }
      const res = pool.list[pool.list.length - 1]!
      const fx: Effects = { events: undefined, timers: undefined }
      this.event(fx, pool, "resource.added", res.resource.id, { spec: Resource.spec(res.resource) })
      if (pool.waiters.head !== undefined) this.dispatch(pool)
      return Effect.as(this.flush(fx), res.info)
    })
  }

  revokeResource(pool: PoolState, id: string, reason: string | undefined): Effect.Effect<boolean> {
    return Effect.suspend(() => {
      const res = pool.byId.get(id)
      if (res === undefined || res.health.state === "revoked") return Effect.succeed(false)
      const fx: Effects = { events: undefined, timers: undefined }
      this.applyStep(fx, pool, res, Resource.onRevoke(res.health))
      this.event(fx, pool, "resource.revoked", id, reason === undefined ? {} : { reason })
      if (pool.waiters.head !== undefined) this.dispatch(pool)
      return Effect.as(this.flush(fx), true)
    })
  }

  // --- across a resume ------------------------------------------------------------------------

  /** The algorithms of a pool that can save or restore their state: its own, then the observers. */
  stateful(pool: PoolState): ReadonlyArray<AcquireAlgorithm.AcquireAlgorithm> {
    const out: Array<AcquireAlgorithm.AcquireAlgorithm> = []
    for (const a of [pool.algorithm, ...pool.observers]) {
      if ((a.save !== undefined || a.restore !== undefined) && !out.includes(a)) out.push(a)
    }
    return out
  }

  /** See `PoolsService.saveState`. */
  saveState(pool: PoolState): ReadonlyArray<SavedResourceState> {
    const now = this.now()
    const algorithms = this.stateful(pool)
    const out: Array<SavedResourceState> = []
    for (const res of pool.list) {
      if (res.health.state === "revoked") continue
      const saved: Record<string, Json> = {}
      for (const a of algorithms) {
        const j = a.save?.(this.token, pool.name, res.resource.id)
        if (j !== undefined && !(a.name in saved)) saved[a.name] = j
      }
      const b = res.breaker
      const state: Resume.SavedState = {
        v: 1,
        identity: Resume.identityOf(res.resource),
        savedAt: now,
        throttledUntil: res.throttledUntil > now ? res.throttledUntil : 0,
        probing: res.probing,
        cooldownUntil: res.health.state === "degraded" && res.health.cooldownUntil > now ? res.health.cooldownUntil : 0,
        consecutiveFailures: res.health.consecutiveFailures,
        breakerOpenUntil: b.state === "open" && b.openUntil > now ? b.openUntil : 0,
        ...(b.state !== "closed" ? { breakerState: Breaker.effectiveState(b, now) as "open" | "half_open" } : {}),
        failedProbes: b.failedProbes,
        usage: { ...res.usage },
        algorithms: saved
      }
      out.push({ resourceId: res.resource.id, state: state as unknown as Json })
    }
    return out
  }

  /** See `PoolsService.restoreState`. */
  restoreState(pool: PoolState, id: string, value: unknown): Effect.Effect<RestoreOutcome> {
    return Effect.suspend(() => {
      const fx: Effects = { events: undefined, timers: undefined }
      const res = pool.byId.get(id)
      const checked = res === undefined
        ? Either.left({ reason: "unknown_resource" as const, message: `no resource "${id}" in pool "${pool.name}"` })
        : Resume.check(value, res.resource)
      if (Either.isLeft(checked) || res === undefined) {
        const e = Either.isLeft(checked) ? checked.left : { reason: "unknown_resource" as const, message: "" }
        this.event(fx, pool, "resource.restore_ignored", id, { reason: e.reason, message: e.message })
        return Effect.as(this.flush(fx), { _tag: "Ignored", reason: e.reason, message: e.message } as RestoreOutcome)
      }
      const saved = checked.right
      const now = this.now()
      const applied: Array<string> = []
      if (saved.throttledUntil > now && saved.throttledUntil > res.throttledUntil) {
        res.throttledUntil = saved.throttledUntil
        if (saved.throttledUntil > pool.throttledUntilMax) pool.throttledUntilMax = saved.throttledUntil
        ;(fx.throttles ??= []).push({ pool, until: saved.throttledUntil })
        applied.push("throttle")
      }
      // after a throttle window, one lease at a time until a success (as before the resume)
      if (saved.probing || applied.includes("throttle")) {
        res.probing = true
        applied.push("probing")
      }
      if (saved.cooldownUntil > now && res.health.state === "ready") {
        res.health = { state: "degraded", consecutiveFailures: saved.consecutiveFailures, cooldownUntil: saved.cooldownUntil }
        const gen = ++res.cooldownGen
        ;(fx.timers ??= []).push({ pool, res, gen, until: saved.cooldownUntil })
        applied.push("cooldown")
      }
      if (saved.breakerOpenUntil > now && pool.breaker !== undefined && res.breaker.state === "closed") {
        res.breaker = {
          ...Breaker.initial,
          state: "open",
          openUntil: saved.breakerOpenUntil,
          opened: now,
          failedProbes: saved.failedProbes
        }
        ;(fx.breakers ??= []).push({ pool, res, opened: now, until: saved.breakerOpenUntil })
        applied.push("breaker")
      } else if (saved.breakerState !== undefined && pool.breaker !== undefined && res.breaker.state === "closed") {
        // half-open when saved, or open and its time over while the process was down: the
        // endpoint has not answered since it failed, so one probe decides (not a full window)
        res.breaker = { ...Breaker.initial, state: "half_open", opened: now, failedProbes: saved.failedProbes }
        this.event(fx, pool, "breaker.half_open", id, { restored: true })
        applied.push("breaker")
      }
      let used = false
      // usage counted in this process already includes what was saved (the same service resumed)
      const fresh = Object.keys(res.usage).length === 0
      if (fresh) for (const [k, v] of Object.entries(saved.usage)) {
        if (!Number.isFinite(v) || v === 0) continue
        res.usage[k] = (res.usage[k] ?? 0) + v
        pool.usage[k] = (pool.usage[k] ?? 0) + v
        used = true
      }
      if (used) applied.push("usage")
      for (const a of this.stateful(pool)) {
        const j = saved.algorithms[a.name]
        if (j === undefined || a.restore === undefined) continue
        let ok = false
        try {
          ok = a.restore(this.token, pool.name, id, res.resource.capacity, j, now)
        } catch {
          ok = false
        }
        if (ok) applied.push(`algorithm:${a.name}`)
        else {
          this.event(fx, pool, "resource.restore_ignored", id, {
            reason: "invalid",
            message: `the saved state of algorithm "${a.name}" was not understood`
          })
        }
      }
      this.event(fx, pool, "resource.restored", id, {
        applied,
        savedAt: saved.savedAt,
        throttledUntil: res.throttledUntil > now ? res.throttledUntil : null,
        cooldownUntil: applied.includes("cooldown") ? saved.cooldownUntil : null,
        breakerUntil: applied.includes("breaker") && saved.breakerOpenUntil > now ? saved.breakerOpenUntil : null,
        breakerState: applied.includes("breaker") ? res.breaker.state : null
      })
      return Effect.as(this.flush(fx), { _tag: "Restored", applied } as RestoreOutcome)
    })
  }

  handle(pool: PoolState): PoolHandle {
    const core = this
    return {
      name: pool.name,
      acquire: <Client>(options?: AcquireOptions, holder?: Holder) =>
        core.scoped<Client>({ ...options, pool: pool.name }, holder ?? anonymous),
      acquireRaw: <Client>(options?: AcquireOptions, holder?: Holder) =>
        core.acquireCore({ ...options, pool: pool.name }, holder ?? anonymous, true) as Effect.Effect<
          Lease<Client>,
          AcquireError
        >,
      add: (resource) => core.addResource(pool, resource),
      revoke: (id, reason) => core.revokeResource(pool, id, reason),
      resources: Effect.sync(() => pool.list.filter((r) => r.health.state !== "revoked").map((r) => r.info)),
      stats: (selector) => Effect.sync(() => Stats.statsOf(pool, selector, core.now())),
      snapshot: Effect.sync(() => Stats.snapshotOf(pool, core.now(), core.token)),
      subscribe: (kinds) => core.fanout.subscribe({ pool: pool.name, kinds })
    }
  }

  scoped<Client>(
    options: AcquireOptions | string | undefined,
    holder: Holder
  ): Effect.Effect<Lease<Client>, AcquireError, Scope.Scope> {
    // In a Scope that holds a synchronous finalizer now (a runner attempt's: see `holdNow.ts`),
    // a free slot is granted and its release registered in one synchronous step: nothing can
    // interrupt between the two, and no Effect runs for either. A runner attempt's hooks
    // (`acquireHooks.ts`) refuse the acquire once its run stops, park only a wait, and map the
    // lease to what the task sees.
    // (`withHolderNow`: the runner's evaluation without a fiber runs this step too, with the
    // holder that fiber would have found)
    const hooks = hooksOf(holder)
    return withHolderNow<Lease<Client>, AcquireError, Scope.Scope>((sync) => {
      if (hooks !== undefined && hooks.refused()) return Effect.interrupt
      if (sync !== undefined) {
        const lease = this.leaseNow(options, holder, false)
        if (lease !== undefined) {
          sync.hold(() => this.releaseNow(lease))
          return Effect.succeed(hooks === undefined ? lease as Lease<Client> : hooks.granted(lease as Lease<Client>))
        }
      }
      if (hooks === undefined) return this.scopedWait<Client>(options, holder)
      return Effect.map(hooks.park(this.scopedWait<Client>(options, holder)), (lease) => hooks.granted(lease))
    })
  }

  /** {@link scoped} through the Scope protocol: any Scope, and acquires that may wait. */
  scopedWait<Client>(
    options: AcquireOptions | string | undefined,
    holder: Holder
  ): Effect.Effect<Lease<Client>, AcquireError, Scope.Scope> {
    // The shape of `Effect.acquireRelease` (uninterruptible acquire whose wait is made
    // interruptible inside `acquireCore`, then a finalizer on the scope), registering the
    // finalizer with `Scope.addFinalizer` directly: the release reads no FiberRefs, so the
    // FiberRefs snapshot/diff that `acquireRelease` performs on every release is pure cost.
    return Effect.uninterruptible(
      Effect.flatMap(this.acquireCore(options, holder, false), (lease) =>
        Effect.flatMap(Effect.scope, (scope) => Effect.as(Scope.addFinalizer(scope, this.release(lease)), lease)))
    ) as Effect.Effect<Lease<Client>, AcquireError, Scope.Scope>
  }

  /**
   * {@link LocalLeases.now}: a free slot leased synchronously (not raw, registered on no
   * Scope), `undefined` when the acquire has to go through {@link ownedWait} (it waits, or the
   * holder's hooks refuse it, or it names an unknown pool or algorithm).
   */
  ownedNow(options: AcquireOptions | string | undefined, holder: Holder): LeaseImpl | undefined {
    const hooks = hooksOf(holder)
    if (hooks !== undefined && hooks.refused()) return undefined
    return this.leaseNow(options, holder, false)
  }

  /**
   * {@link LocalLeases.wait}: {@link acquireCore} for a lease that is not raw (a reclaim does
   * not count it as leaked) and registered on no Scope, its wait parked by the holder's hooks
   * (refused: interrupted). The wait is interruptible inside `acquireCore` whatever the
   * caller's region; the lease comes back with no interruption check after its grant.
   */
  ownedWait(options: AcquireOptions | string | undefined, holder: Holder): Effect.Effect<LeaseImpl, AcquireError> {
    const hooks = hooksOf(holder)
    if (hooks === undefined) return this.acquireCore(options, holder, false)
    return Effect.suspend(() => hooks.refused() ? Effect.interrupt : hooks.park(this.acquireCore(options, holder, false)))
  }

  reclaimOwner(owner: string, countLeaks: boolean): Effect.Effect<ReadonlyArray<LeakedLease>> {
    return Effect.suspend(() => {
      const held = this.owners.list(owner)
      if (held.length === 0) return Effect.succeed([])
      const leaked: Array<LeakedLease> = []
      const fx: Effects = { events: undefined, timers: undefined }
      const now = this.now()
      const releases: Array<Effect.Effect<void>> = []
      for (const lease of held) {
        if (countLeaks && lease.raw) {
          const pool = this.pools.get(lease.pool)
          const item: LeakedLease = {
            leaseId: lease.id,
            pool: lease.pool,
            resourceId: lease.res.resource.id,
            taskName: lease.taskName,
            heldMs: now - lease.acquiredAt
          }
          leaked.push(item)
          if (pool !== undefined) {
            pool.leakedTotal++
            this.event(fx, pool, "lease.leaked", item.resourceId, {
              leaseId: item.leaseId,
              taskName: item.taskName,
              owner,
              heldMs: item.heldMs
            })
          }
        }
        releases.push(this.release(lease))
      }
      this.owners.drop(owner)
      return Effect.as(Effect.zipRight(Effect.all(releases, { discard: true }), this.flush(fx)), leaked)
    })
  }
}


/**
 * Builds the pools service (see `Pools.makePools`).
 *
 * @internal
 */
export const make = (
  pools: Iterable<PoolConfig>,
  options: PoolsOptions
): Effect.Effect<PoolsService, ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const clock = yield* Effect.clock
    const scope = yield* Effect.scope
    // a stall source given in the context (tests), or a sampler in this service's scope
    const given = yield* Effect.serviceOption(LoopDelay.LoopDelay)
    const core = new Core(clock, scope, options, Option.isSome(given) ? given.value : yield* LoopDelay.make)
    const issues: Array<ConfigIssue> = []
    for (const p of pools) {
      const r = yield* Effect.either(core.createPool(p))
      if (r._tag === "Left") issues.push(...r.left.issues)
    }
    if (issues.length > 0) {
      return yield* new ConfigError({
        message: `invalid pools: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
        issues
      })
    }
    const poolOf = (name: string): Effect.Effect<PoolState, PoolNotFound> =>
      Effect.suspend(() => {
        const p = core.pools.get(name)
        return p === undefined ? Effect.fail(core.unknownPool(name)) : Effect.succeed(p)
      })
    const service: PoolsService = {
      acquire: <Client>(o?: AcquireOptions | string, holder?: Holder) => core.scoped<Client>(o, holder ?? anonymous),
      acquireRaw: <Client>(o?: AcquireOptions | string, holder?: Holder) =>
        core.acquireCore(o, holder ?? anonymous, true) as Effect.Effect<Lease<Client>, AcquireError>,
      heldBy: (owner) => Effect.sync(() => [...core.owners.list(owner)]),
      releaseAll: (owner) =>
        Effect.suspend(() => {
          const n = core.owners.size(owner)
          return Effect.as(core.reclaimOwner(owner, false), n)
        }),
      reclaim: (owner) => core.reclaimOwner(owner, true),
      get: (name) => Effect.map(poolOf(name), (p) => p.handle!),
      names: Effect.sync(() => [...core.pools.keys()]),
      addPool: (config) => Effect.map(core.createPool(config), (p) => p.handle!),
      add: (pool, resource) => Effect.flatMap(poolOf(pool), (p) => core.addResource(p, resource)),
      revoke: (pool, id, reason) => Effect.flatMap(poolOf(pool), (p) => core.revokeResource(p, id, reason)),
      snapshot: (pool) => Effect.map(poolOf(pool), (p) => Stats.snapshotOf(p, core.now(), core.token)),
      stats: (pool, selector) => Effect.map(poolOf(pool), (p) => Stats.statsOf(p, selector, core.now())),
      subscribe: (filter) => core.fanout.subscribe(filter),
      events: (filter) => core.fanout.events(filter),
      listen: (callback) => core.fanout.listen(callback),
      saveState: (pool) => Effect.flatMap(poolOf(pool), (p) => Effect.sync(() => core.saveState(p))),
      restoreState: (pool, id, state) => Effect.flatMap(poolOf(pool), (p) => core.restoreState(p, id, state))
    }
    publishers.set(service, (e) => core.fanout.deliver(e, core.pools.get(e.pool)?.onEvent))
    ceilings.set(service, (pool, id, ceiling) => {
      const p = core.pools.get(pool)
      const res = p?.list.find((r) => r.info.id === id)
      if (p === undefined || res === undefined || res.ceiling === ceiling) return
      const raised = ceiling === undefined || (res.ceiling !== undefined && ceiling > res.ceiling)
      res.ceiling = ceiling
      // a higher ceiling frees room: queued waiters are served
      if (raised && p.waiters.head !== undefined) core.dispatch(p)
    })
    views.set(service, {
      names: () => [...core.pools.keys()],
      resources: (pool) => core.pools.get(pool)?.list.filter((r) => r.health.state !== "revoked").map((r) => r.info)
    })
    leases.set(service, {
      now: (o, holder) => core.ownedNow(o, holder),
      wait: (o, holder) => core.ownedWait(o, holder),
      waitRaw: (o, holder) => core.acquireCore(o, holder, true),
      owns: (lease) => lease instanceof LeaseImpl && lease.core === core,
      release: (lease) => core.releaseNow(lease as LeaseImpl)
    })
    demands.set(service, (pool, id) => {
      const p = core.pools.get(pool)
      const res = p?.list.find((r) => r.info.id === id)
      return p === undefined || res === undefined ? { active: 0, waiters: 0 } : { active: res.active, waiters: p.waiters.size }
    })
    // `acquire` goes through `core.scoped`, which applies a runner attempt's hooks
    return markAppliesHooks(service)
  })

const publishers = new WeakMap<PoolsService, (event: ResourceEvent) => Effect.Effect<void>>()

const ceilings = new WeakMap<PoolsService, (pool: string, id: string, ceiling: number | undefined) => void>()

const demands = new WeakMap<PoolsService, (pool: string, id: string) => { readonly active: number; readonly waiters: number }>()

/**
 * What {@link localViewOf} gives: the local core's pool names and a pool's resources not
 * revoked (`undefined` for an unknown pool), read synchronously (what `names` and a handle's
 * `resources` answer, without an Effect each).
 *
 * @internal
 */
export interface LocalView {
  readonly names: () => ReadonlyArray<string>
  readonly resources: (pool: string) => ReadonlyArray<ResourceInfo> | undefined
}

const views = new WeakMap<PoolsService, LocalView>()

/**
 * The synchronous {@link LocalView} of `pools`' local core, `undefined` for a service this
 * module did not build: what the global pools' block-mode acquire reads per acquire
 * (`pool/pg/pools.ts`: two Effects per pool and resource fewer, ops17ak).
 *
 * @internal
 */
export const localViewOf = (pools: PoolsService): LocalView | undefined => views.get(pools)

/**
 * What {@link localLeasesOf} gives: leases of the local core for a caller that gives each back
 * itself (`lease.releaseNow`, or its owner's reclaim), registered on no Scope and not raw (a
 * reclaim of their owner releases them without counting them as leaked, as a scoped lease). The
 * global pools' block-mode acquire takes its local lease this way (`pool/pg/pools.ts`): a
 * scoped acquire through a Scope of its own cost a `Scope.make`, `Scope.extend`, `Scope.close`
 * and the scoped acquire's regions per lease (ops17am).
 *
 * A holder's `AcquireHooks` (`acquireHooks.ts`) are applied as far as they concern the
 * acquire: refused, the acquire is interrupted; a wait is parked. `granted` is not applied: the
 * lease is the pool's own, whose release the caller owns.
 *
 * @internal
 */
export interface LocalLeases {
  /**
   * A free slot leased now, synchronously (no Effect), or `undefined`: then {@link wait}.
   * @param options the acquire's options (its `timeout` does not apply: nothing waits)
   * @param holder who acquires (owner, defaults, hooks)
   */
  readonly now: (options: AcquireOptions | string | undefined, holder: Holder) => Lease<any> | undefined
  /**
   * The acquire through the pool's algorithm, waiting for a slot (interruptible) up to the
   * options' `timeout` (then `AcquireTimeout`); fails with the acquire's errors (unknown pool,
   * `ResourceUnavailable`, ...).
   */
  readonly wait: (options: AcquireOptions | string | undefined, holder: Holder) => Effect.Effect<Lease<any>, AcquireError>
  /**
   * {@link wait} for a raw lease (what the service's `acquireRaw` grants: a reclaim of its owner
   * counts it as leaked), the holder's hooks not applied (as `acquireRaw`). The wait is
   * interruptible inside whatever the caller's region, and the lease comes back with no
   * interruption check after its grant: in an uninterruptible region, a lease granted reaches
   * the caller (an interruption at the grant gives it back inside). The global pools' raw
   * acquire takes its local lease this way (raw36).
   * @param options the acquire's options (its `timeout` bounds the wait: `AcquireTimeout`)
   * @param holder who acquires (owner, defaults)
   */
  readonly waitRaw: (options: AcquireOptions | string | undefined, holder: Holder) => Effect.Effect<Lease<any>, AcquireError>
  /** Whether `lease` was granted by this core (any acquire of it, raw or not): {@link release} applies. */
  readonly owns: (lease: Lease<any>) => boolean
  /**
   * Gives `lease` back now, synchronously (idempotent; what its `releaseNow` Effect does), and
   * serves the waiters its slot can. Only for a lease {@link owns} says this core granted.
   */
  readonly release: (lease: Lease<any>) => void
}

const leases = new WeakMap<PoolsService, LocalLeases>()

/**
 * The {@link LocalLeases} of `pools`' local core, `undefined` for a service this module did not build.
 *
 * @internal
 */
export const localLeasesOf = (pools: PoolsService): LocalLeases | undefined => leases.get(pools)

/**
 * A resource's local demand in `pools`' local core now: `active`, its leases held, and
 * `waiters`, the acquires of its pool queued for a slot (any resource of the pool may serve
 * them). What the global pools' block leases write as the runner's demand (`pool/pg/pools.ts`).
 * Synchronous; zeros for an unknown pool or resource, or a service this module did not build.
 *
 * @internal
 */
export const demandOf = (pools: PoolsService, pool: string, id: string): { readonly active: number; readonly waiters: number } =>
  demands.get(pools)?.(pool, id) ?? { active: 0, waiters: 0 }

/**
 * Sets (or, with `undefined`, clears) a resource's ceiling in `pools`' local core: no more
 * than `ceiling` leases of it at once, below its declared capacity (the global pools' block
 * of slot rows held, `pool/pg/pools.ts`); a raised ceiling serves queued waiters at once.
 * Synchronous; a no-op for an unknown pool or resource, or a service this module did not build.
 *
 * @internal
 */
export const setCeiling = (pools: PoolsService, pool: string, id: string, ceiling: number | undefined): void => {
  ceilings.get(pools)?.(pool, id, ceiling)
}

/**
 * Delivers `event` as one of `pools`' own events (its subscribers, the pool's and the
 * service's `onEvent`, every `listen` callback): how the global pools (`pool/pg/pools.ts`)
 * report what happens to a lease outside the local core (`lease.lost`). A no-op for a service
 * this module did not build.
 *
 * @internal
 */
export const publish = (pools: PoolsService, event: ResourceEvent): Effect.Effect<void> =>
  Effect.suspend(() => publishers.get(pools)?.(event) ?? Effect.void)
