/**
 * The {@link TaskContext} of one attempt, and what every attempt context of a run shares.
 *
 * @internal
 */
import { type Context, Effect } from "effect"
import type { ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import { digest, type Json } from "../../../domain/Json.js"
import type { AcquireOptions, Lease, LeaseReport } from "../../../domain/Lease.js"
import * as Pricing from "../../../domain/Pricing.js"
import * as RetryPolicy from "../../../domain/RetryPolicy.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import type { Membership } from "../../../domain/Suite.js"
import type * as Task from "../../../domain/Task.js"
import type { MetricOptions, TaskContext } from "../../../domain/TaskContext.js"
import type { BusService } from "../../Bus.js"
import type { Holder, Pools } from "../../Pool.js"
import { type AcquireHooks, AcquireHooksTypeId, appliesHooks, type HookedHolder } from "../acquireHooks.js"
import type { TaskStore } from "../../../domain/TaskStore.js"
import { type BranchCache, BranchCacheId } from "../../../domain/internal/branchCache.js"
import type { BranchNote } from "./cache.js"
import type { PipelineId, RunId } from "../../../domain/Ids.js"

/**
 * A 32-bit seed per (pipeline, seq, visit, attempt): the same attempt always gets the same
 * seed. Visit 0 (every station of a pipeline without control, and first entries) hashes
 * `pipelineId:seq:attempt` exactly as before visits existed; a revisit hashes the occurrence
 * `pipelineId:seq#visit:attempt`, so a regeneration samples anew.
 *
 * @internal
 */
export const attemptSeed = (pipelineId: PipelineId, seq: number, attempt: number, visit = 0): number =>
  Number.parseInt(
    digest(visit === 0 ? `${pipelineId}:${seq}:${attempt}` : `${pipelineId}:${seq}#${visit}:${attempt}`).slice(0, 8),
    16
  ) >>> 0

/**
 * The suite facts of a member pipeline (`spec.member`, see `domain/Suite.ts`).
 *
 * @internal
 */
export type MemberFacts = Membership

/**
 * The suite membership of a spec, if any (absent outside suites).
 *
 * @internal
 */
export const memberOf = (spec: Pipeline.PipelineSpec<any, any, any, any>): MemberFacts | undefined => spec.member

/**
 * What every attempt context of a run shares (for a suite member's pipelines: the member's
 * view of the pools, see `Pools.aliased`).
 *
 * @internal
 */
export interface AttemptShared {
  readonly runId: RunId
  readonly bus: BusService
  readonly store: TaskStore
  readonly pools: Context.Tag.Service<Pools>
  readonly emit: (kind: string, pipelineId: PipelineId | null, data: unknown) => Effect.Effect<void, StoreUnavailable>
  readonly reportMetric: (
    name: string,
    value: unknown,
    options: MetricOptions & { readonly pipelineId?: PipelineId | null | undefined }
  ) => Effect.Effect<void, StoreUnavailable | ConfigError>
  /** The run's price table (`RunConfig.pricing`), if any. */
  readonly pricing?: Pricing.PriceTable | undefined
  /**
   * Runs a wait for a pool lease so that a stop of the run interrupts it at once (an attempt
   * waiting for a lease has sent nothing: it is parked, not in flight, and gets no grace), and
   * refuses to start one once the run is stopping. Absent: the wait is left as it is.
   */
  readonly leaseWait?: (<A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>) | undefined
  /**
   * Whether `leaseWait` refuses to start a wait now (the run is stopping). Given with
   * `leaseWait`, to a pools service that applies an attempt's hooks (`acquireHooks.ts`): a
   * lease granted at once is then neither parked nor mapped by an Effect of the attempt's.
   */
  readonly leaseRefused?: (() => boolean) | undefined
}

/**
 * What one attempt's lease reports added up to (see `Pricing`): `calls` (reports with token
 * usage), tokens in and out, whether any was `estimated`, the cost in US dollars (`null` when
 * no report could be priced; a sum of the priced reports otherwise) and the last model named.
 *
 * @internal
 */
export interface AttemptUsage {
  calls: number
  tokensIn: number
  tokensOut: number
  estimated: boolean
  costUsd: number | null
  model: string | null
}

const numberIn = (u: Readonly<Record<string, number>> | undefined, key: string): number => {
  const v = u?.[key]
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? v : 0
}

/**
 * A study variant's model price (its model profile's `price: { promptPer1k, completionPer1k }`,
 * USD per 1000 tokens, see `StudyControl.priceOf`) as a {@link Pricing.ModelPrice}, for a call
 * to that profile's `model` only: a call naming another model (a judge's, say) is not priced
 * at the variant's price (`undefined`: the run's table or the server's cost prices it). A call
 * that names no model at all takes the price of the first priced profile.
 */
const variantPrice = (
  variables: Readonly<Record<string, Json>>,
  models: ReadonlyArray<string | undefined>
): Pricing.ModelPrice | undefined => {
  const named = models.some((m) => m !== undefined)
  for (const v of Object.values(variables)) {
    if (v === null || typeof v !== "object" || Array.isArray(v)) continue
    const price = (v as { readonly price?: unknown }).price
    if (price === null || typeof price !== "object") continue
    const model = (v as { readonly model?: unknown }).model
    if (named && typeof model === "string" && !models.includes(model)) continue
    const { completionPer1k, promptPer1k } = price as Record<string, unknown>
    if (typeof promptPer1k === "number" && typeof completionPer1k === "number" && promptPer1k >= 0 && completionPer1k >= 0) {
      return { inputPer1M: promptPer1k * 1000, outputPer1M: completionPer1k * 1000 }
    }
  }
  return undefined
}

/** `ctx.variables` outside studies (frozen: nothing can be added to it). */
const noVariables: Readonly<Record<string, Json>> = Object.freeze({})

/**
 * The {@link TaskContext} of one attempt. A class, so that an attempt allocates one object:
 * the functions a task may call are built on first access (getters returning closures, so
 * destructuring `const { acquire } = ctx` still works), and the lease bookkeeping only when a
 * lease is taken.
 *
 * @internal
 */
export class AttemptContext implements TaskContext {
  readonly runId: RunId
  readonly bus: BusService
  readonly store: TaskStore
  readonly taskName: string
  readonly suiteId: string | null
  readonly experimentId: string | null
  readonly localKey: string | null
  readonly outputDir: string | null
  readonly variables: Readonly<Record<string, Json>>
  readonly meta: Record<string, unknown> = {}
  /** Ids of every lease taken by the attempt (undefined until the first). */
  leaseIds: Array<string> | undefined = undefined
  /** Whether the escape hatch was used (its leases are reclaimed after the attempt). */
  rawLeases = false
  /** What the attempt's lease reports added up to (undefined until a report with usage). */
  usage: AttemptUsage | undefined = undefined
  /**
   * A fanout attempt's branch cache (see `domain/internal/branchCache.ts`), set by the runner
   * when the run has a cache and the group a cacheable branch; read by the fanout.
   */
  declare [BranchCacheId]: BranchCache | undefined
  /**
   * What the branch cache did for each branch (set with it; see `cache.ts`). Both are
   * declared only: an attempt of any other task pays nothing for them.
   */
  declare branchNotes: Array<BranchNote> | undefined
  #seed: number | undefined = undefined
  #holder: Holder | undefined = undefined
  #hookedHolder: HookedHolder | undefined = undefined
  readonly #shared: AttemptShared
  readonly #task: Task.Any

  constructor(
    shared: AttemptShared,
    task: Task.Any,
    readonly pipelineId: PipelineId,
    readonly seq: number,
    readonly attempt: number,
    readonly visit: number = 0,
    member: MemberFacts | undefined = undefined
  ) {
    this.#shared = shared
    this.#task = task
    this.runId = shared.runId
    this.bus = shared.bus
    this.store = shared.store
    this.taskName = task.name
    // plain fields (not getters on private state): a fanout branch context inherits them
    if (member === undefined) {
      this.suiteId = this.experimentId = this.localKey = this.outputDir = null
      this.variables = noVariables
    } else {
      this.suiteId = member.suiteId
      this.experimentId = member.experimentId
      this.localKey = member.localKey
      this.outputDir = member.outputDir
      this.variables = member.variables ?? noVariables
    }
  }

  /** The pool owner key of this attempt (leases, reclaim); a revisit names its visit. */
  get owner(): string {
    return this.visit === 0
      ? `${this.pipelineId}:${this.seq}:${this.attempt}`
      : `${this.pipelineId}:${this.seq}#${this.visit}:${this.attempt}`
  }
  get seed(): number {
    return this.#seed ??= attemptSeed(this.pipelineId, this.seq, this.attempt, this.visit)
  }
  #holderOf(): Holder {
    return this.#holder ??= this.#newHolder(undefined)
  }
  /** The attempt's holder for the pools service (`hooks`: see {@link #hookedHolderOf}). */
  #newHolder(hooks: AcquireHooks | undefined): HookedHolder {
    const task = this.#task
    return {
      taskName: task.name,
      pipelineId: this.pipelineId,
      defaultPool: task.options.resource ?? undefined,
      defaultAlgorithm: (task.options.algorithmInstance ?? task.options.algorithm ?? undefined) as Holder[
        "defaultAlgorithm"
      ],
      owner: this.owner,
      maxServerDelayMs: RetryPolicy.maxServerDelayMs(task.options.retry),
      [AcquireHooksTypeId]: hooks
    }
  }
  /**
   * {@link #holderOf} with the attempt's {@link AcquireHooks} (parking, refusal, the lease the
   * task sees), for a pools service that applies them; `undefined` when the run gives no
   * parking to hand over.
   */
  #hookedHolderOf(): HookedHolder | undefined {
    if (this.#hookedHolder !== undefined) return this.#hookedHolder
    const park = this.#shared.leaseWait
    const refused = this.#shared.leaseRefused
    if (park === undefined || refused === undefined) return undefined
    const hooks: AcquireHooks = {
      refused,
      park,
      granted: <Client,>(lease: Lease<Client>) => {
        this.#track(lease)
        return this.#priced(lease)
      }
    }
    return this.#hookedHolder = this.#newHolder(hooks)
  }
  #track(lease: Lease): void {
    ;(this.leaseIds ??= []).push(lease.id)
  }
  /**
   * Prices one lease report (see `Pricing`: the resource's own pricing, then a study
   * variant's model profile price for a call to the profile's model, then the run's table, else the server's reported cost),
   * adds it to {@link usage}, and returns the report with `costUsd` the priced figure (what
   * a study's meter counts), or as it was when it carries no token usage.
   */
  priceReport(lease: Lease, report: LeaseReport): LeaseReport {
    const u = report.usage
    const tokensIn = numberIn(u, "promptTokens")
    const tokensOut = numberIn(u, "completionTokens")
    // a report with no usage and no model is no model call (a worker pool's lease); one with a
    // usage is, though it names no token: a simulated provider's answer (`simulateLlm` reports
    // `{ tokens }` alone) is an answered call, as its simulated 429s are refused ones (newuser37 F11)
    if (tokensIn === 0 && tokensOut === 0 && report.model === undefined && u === undefined) return report
    const models = [report.model, report.requestedModel]
    const own = Pricing.priceFor(models, undefined, lease.resource)
    const variant = own === undefined ? variantPrice(this.variables, models) : undefined
    const priced = own !== undefined
      ? { costUsd: Pricing.costOf(own, tokensIn, tokensOut), source: "pricing" as const }
      : variant !== undefined
      ? { costUsd: Pricing.costOf(variant, tokensIn, tokensOut), source: "pricing" as const }
      : Pricing.priceCall({ models, tokensIn, tokensOut, serverCostUsd: report.costUsd, table: this.#shared.pricing }) ??
        // a call of 0 tokens costs 0 at any price: its cost is known, not unpriced
        (tokensIn === 0 && tokensOut === 0 ? { costUsd: 0, source: "pricing" as const } : undefined)
    const acc = this.usage ??= { calls: 0, tokensIn: 0, tokensOut: 0, estimated: false, costUsd: null, model: null }
    acc.calls++
    acc.tokensIn += tokensIn
    acc.tokensOut += tokensOut
    if (report.estimated === true) acc.estimated = true
    if (priced !== undefined) acc.costUsd = Pricing.roundUsd((acc.costUsd ?? 0) + priced.costUsd)
    if (report.model !== undefined) acc.model = report.model
    if (priced === undefined) {
      if (report.costUsd === undefined) return report
      const { costUsd: _, ...rest } = report
      return rest
    }
    return { ...report, costUsd: priced.costUsd }
  }
  /** The lease a task sees: the pool's, with its reports priced ({@link priceReport}). */
  #priced<Client>(lease: Lease<Client>): Lease<Client> {
    return new PricedLease(lease, this)
  }
  get publishResource(): TaskContext["publishResource"] {
    return (pool, resource) => this.#shared.pools.add(pool, resource)
  }
  get revokeResource(): TaskContext["revokeResource"] {
    return (pool, id, reason) => this.#shared.pools.revoke(pool, id, reason)
  }
  get subscribe(): TaskContext["subscribe"] {
    return (filter) => this.#shared.pools.subscribe(filter)
  }
  #leaseWait<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> {
    const wait = this.#shared.leaseWait
    return wait === undefined ? self : wait(self)
  }
  get acquire(): TaskContext["acquire"] {
    return <Client,>(opts?: AcquireOptions | string) => {
      // The pool tracks the attempt's unreleased leases under its owner key (held pools for
      // deadlock warnings, reclaim); the attempt only records the ids for its task row.
      const pools = this.#shared.pools
      const hooked = appliesHooks(pools) ? this.#hookedHolderOf() : undefined
      // the pools service parks a wait, refuses after a stop and maps the lease itself
      if (hooked !== undefined) return pools.acquire<Client>(opts, hooked)
      return Effect.flatMap(this.#leaseWait(pools.acquire<Client>(opts, this.#holderOf())), (lease) => {
        this.#track(lease)
        return Effect.succeed(this.#priced(lease))
      })
    }
  }
  get acquireLease(): TaskContext["acquireLease"] {
    return <Client,>(opts?: AcquireOptions | string) =>
      Effect.tap(
        Effect.suspend(() => {
          this.rawLeases = true
          return this.#leaseWait(this.#shared.pools.acquireRaw<Client>(opts, this.#holderOf()))
        }),
        (lease) => Effect.sync(() => this.#track(lease))
      ).pipe(Effect.map((lease) => this.#priced(lease)))
  }
  get heldLeases(): TaskContext["heldLeases"] {
    return this.#shared.pools.heldBy(this.owner)
  }
  get reclaimNow(): TaskContext["reclaimNow"] {
    return Effect.asVoid(this.#shared.pools.releaseAll(this.owner))
  }
  get emit(): TaskContext["emit"] {
    return (kind, data) => this.#shared.emit(kind, this.pipelineId, data ?? {})
  }
  get reportMetric(): TaskContext["reportMetric"] {
    return (name, value, o) =>
      this.#shared.reportMetric(name, value, { ...o, pipelineId: o?.scope === "run" ? null : this.pipelineId })
  }
}

/**
 * The lease an attempt's task sees: the pool's lease, whose reports the attempt prices first
 * (`AttemptContext.priceReport`). A class, so that a lease costs one small object (its
 * functions are built on access, so destructuring `const { report } = lease` still works).
 */
class PricedLease<Client> implements Lease<Client> {
  readonly id: string
  readonly pool: string
  readonly resource: Lease<Client>["resource"]
  readonly options: Lease<Client>["options"]
  readonly client: Client
  readonly taskName: string
  readonly #lease: Lease<Client>
  readonly #ctx: AttemptContext
  constructor(lease: Lease<Client>, ctx: AttemptContext) {
    this.id = lease.id
    this.pool = lease.pool
    this.resource = lease.resource
    this.options = lease.options
    this.client = lease.client
    this.taskName = lease.taskName
    this.#lease = lease
    this.#ctx = ctx
  }
  get heldMs(): Effect.Effect<number> {
    return this.#lease.heldMs
  }
  get report(): Lease<Client>["report"] {
    const lease = this.#lease
    const ctx = this.#ctx
    return (report) => Effect.suspend(() => lease.report(ctx.priceReport(lease as Lease, report)))
  }
  get degrade(): Lease<Client>["degrade"] {
    const lease = this.#lease
    return (reason) => lease.degrade(reason)
  }
  get releaseNow(): Effect.Effect<void> {
    return this.#lease.releaseNow
  }
}
