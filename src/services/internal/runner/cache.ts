/**
 * The call cache around one attempt (see `domain/CallCache.ts` and `services/CallCache.ts`):
 * the attempt's effective mode, its key, the lookup before any lease is taken, and the store
 * after a success. A cache that fails to answer is logged and counts as a miss.
 *
 * @internal
 */
import { Deferred, Effect, Either, Exit, FiberId, Option } from "effect"
import type { BranchCache } from "../../../domain/internal/branchCache.js"
import type { TaskContext } from "../../../domain/TaskContext.js"
import { roundUsd } from "../../../domain/Pricing.js"
import * as CallCache from "../../../domain/CallCache.js"
import { type CodecRegistry, type Encoded, JsonCodec } from "../../../domain/Codec.js"
import * as Evaluator from "../../../domain/Evaluator.js"
import { isHandoff } from "../../../domain/Handoff.js"
import { canonicalJson, digestFull, type Json } from "../../../domain/Json.js"
import type * as Pipeline from "../../../domain/Pipeline.js"
import * as RetryPolicy from "../../../domain/RetryPolicy.js"
import * as Task from "../../../domain/Task.js"
import { type CacheEntry, type CallCacheService, type CacheUsageTokens, putFirst } from "../../CallCache.js"
import type { Pools } from "../../Pool.js"
import type { Context } from "effect"
import type { StoreUnavailable } from "../../../domain/Errors.js"
import type { CacheCounters } from "./state.js"
import type { AttemptUsage } from "./attemptContext.js"

/**
 * The cache of a run: the service and the run's settings.
 *
 * @internal
 */
export interface CacheEnv {
  readonly service: CallCacheService
  readonly run: CallCache.RunCache
}

/**
 * What the cache did for one attempt, recorded in its decision (`decision.cache`): `hit`
 * (served; `storedAt` and the stored `usage`), `miss` (ran and stored), `refresh` (ran and
 * stored over), `bypass` (`readOnly`, nothing stored: ran and kept nothing); `key` is the
 * first 16 hex digits of the key; `stored: false` on a `miss` or `refresh` whose output the
 * cache failed to store (the task ran and its result stands; counted as a miss and as a
 * failed write, `writeFailures`); `lookupFailed: true` when the cache failed to answer the
 * lookup before the task ran (a damaged or unreadable cache: counted as a miss and as a failed
 * lookup, `lookupFailures`); `pool` on a `hit` of a task that declares a pool resource (it
 * would have leased one to make its call): the pool, what the accounting counts as a model
 * call saved (`AccountingFigures.modelCallHits`); `branches` on a `fanout` attempt whose
 * branches went through the cache: each such branch's task name, status and key (see
 * {@link combineBranchNotes}).
 *
 * @internal
 */
export interface CacheNote {
  readonly status: "hit" | "miss" | "refresh" | "bypass"
  readonly key: string
  readonly stored?: false | undefined
  readonly lookupFailed?: true | undefined
  readonly storedAt?: number | undefined
  readonly usage?: CacheUsageTokens | null | undefined
  readonly pool?: string | undefined
  /**
   * On a `miss` whose call was made while another (a process sharing the cache file) stored
   * an answer to the same request first: the stored answer was kept, and it is the attempt's
   * output (pipelines sending the same request share one answer).
   */
  readonly lostRace?: true | undefined
  readonly branches?: ReadonlyArray<{ readonly task: string; readonly status: CacheNote["status"]; readonly key: string }> | undefined
}

/**
 * What the cache did for one branch of a fanout (see {@link branchCache}).
 *
 * @internal
 */
export interface BranchNote {
  readonly task: string
  readonly note: CacheNote
}

/**
 * The {@link BranchCache} of one fanout attempt (fix18e): each cacheable branch is planned
 * as the task would be at the group's place (`seq`, `visit`: the key a judge task there would
 * have, its namespace the pipeline's repeat, the visit and the study variant), served from
 * the cache when an unexpired entry decodes (its `onCacheHit` run, as for a task), else run
 * and its success stored as the mode says; what it did is pushed to `notes`. A branch's entry
 * stores the output's own `usage` only (a branch's lease reports are the group's: the tokens
 * of one branch cannot be told apart from its siblings').
 *
 * @internal
 */
export const branchCache = (
  cache: CacheEnv,
  spec: Pipeline.PipelineSpec<any, any, any, any>,
  seq: number,
  visit: number,
  pools: Context.Tag.Service<Pools>,
  registryFor: (task: Task.Any) => CodecRegistry,
  nowMs: () => number,
  reportMetric: TaskContext["reportMetric"],
  notes: Array<BranchNote>
): BranchCache =>
<A, E, R>(child: Task.Any, input: unknown, run: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  const registry = registryFor(child)
  return Effect.flatMap(planOf(cache, child, spec, visit, input, pools, registry, seq), (plan): Effect.Effect<A, E, R> => {
    if (plan === undefined) return run
    return Effect.flatMap(lookup(cache, plan, registry, nowMs()), (hit): Effect.Effect<A, E, R> => {
      if (Option.isSome(hit)) {
        notes.push({ task: child.name, note: hit.value.note })
        const value = hit.value.value as A
        const onHit = child.options.onCacheHit
        if (onHit === null) return Effect.succeed(value)
        // what the branch's body does beside returning its output (the judge's metrics), redone;
        // its failure fails the branch as the body's would
        return Effect.as(
          onHit(value, { pipelineId: spec.pipelineId, seq, visit, reportMetric }) as Effect.Effect<void, E>,
          value
        )
      }
      return Effect.flatMap(Effect.exit(run), (exit) =>
        Effect.flatMap(afterRun(cache, plan, child.name, exit, registry, nowMs()), ({ note, replaced }) => {
          if (note !== undefined) notes.push({ task: child.name, note })
          // an answer to the same request stored first (another process): the branch's value
          return replaced === undefined ? exit : Exit.succeed(replaced.value as A)
        }))
    })
  })
}

/**
 * The one {@link CacheNote} of a fanout attempt from its branches' (`undefined`: none went
 * through the cache): `hit` when every such branch was served and the attempt leased nothing
 * (`leased` false: no call was made, the attempt is a cache hit), with the branches' stored
 * usage added up and the first served branch's pool; else the first branch's status that is
 * not a hit (a miss, refresh or bypass: the attempt made calls). `stored: false` and
 * `lookupFailed` when any branch's says so; `key` is the first branch's; `branches` lists them
 * all. An attempt row carries one note, so the run's figures count a fanout attempt once.
 *
 * @internal
 */
export const combineBranchNotes = (notes: ReadonlyArray<BranchNote>, leased: boolean): CacheNote | undefined => {
  const first = notes[0]
  if (first === undefined) return undefined
  const branches = notes.map((n) => ({ task: n.task, status: n.note.status, key: n.note.key }))
  const notHit = notes.find((n) => n.note.status !== "hit")
  const flags = {
    ...(notes.some((n) => n.note.stored === false) ? { stored: false as const } : {}),
    ...(notes.some((n) => n.note.lookupFailed === true) ? { lookupFailed: true as const } : {})
  }
  if (notHit !== undefined || leased) {
    return { status: notHit?.note.status ?? "miss", key: first.note.key, ...flags, branches }
  }
  let usage: CacheUsageTokens | null = null
  for (const n of notes) {
    const u = n.note.usage
    if (u === undefined || u === null) continue
    const sum: CacheUsageTokens = usage ?? { promptTokens: 0, completionTokens: 0, totalTokens: 0 }
    const cost = typeof u.costUsd === "number" || typeof sum.costUsd === "number"
      ? { costUsd: roundUsd((sum.costUsd ?? 0) + (u.costUsd ?? 0)) }
      : {}
    usage = {
      promptTokens: sum.promptTokens + u.promptTokens,
      completionTokens: sum.completionTokens + u.completionTokens,
      totalTokens: sum.totalTokens + u.totalTokens,
      ...cost
    }
  }
  const pool = notes.find((n) => n.note.pool !== undefined)?.note.pool
  const storedAt = Math.min(...notes.map((n) => n.note.storedAt ?? Number.POSITIVE_INFINITY))
  return {
    status: "hit",
    key: first.note.key,
    ...flags,
    ...(Number.isFinite(storedAt) ? { storedAt } : {}),
    usage,
    ...(pool === undefined ? {} : { pool }),
    branches
  }
}

const cachedBranches = new WeakMap<Task.Any, boolean>()

/**
 * Whether a task runs branches of its own (a fanout's `children`, at any depth) of which one
 * is cacheable (declares `cache`): such an attempt gets a {@link branchCache} when the run has
 * a cache.
 *
 * @internal
 */
export const hasCachedBranch = (task: Task.Any): boolean => {
  const known = cachedBranches.get(task)
  if (known !== undefined) return known
  const found = task.children.some((c) => c.options.cache !== null || hasCachedBranch(c))
  cachedBranches.set(task, found)
  return found
}

/**
 * One attempt's cache plan: mode, time to live (ms, `null`: none), key, namespace;
 * `lookupFailed` is set by {@link lookup} when the cache failed to answer (read by
 * {@link afterRun}, which says so in the attempt's note).
 *
 * @internal
 */
export interface Plan {
  readonly mode: Exclude<CallCache.CacheMode, "off">
  readonly ttlMs: number | null
  readonly key: string
  readonly namespace: CallCache.CacheNamespace
  /** The pool the task leases from (`resource`), `null`: none. */
  readonly pool: string | null
  lookupFailed?: boolean
}

/** The runs' caches that already logged their first failure (one warning per run and cache). */
const warned = new WeakSet<CacheEnv>()

/**
 * Logs a failure of the cache: the first of a run as one warning that names the file and says
 * what to do; the next ones at debug level (they are counted in the run's figures: `report`,
 * `watch` and `/stats` show how many lookups and writes failed).
 */
const logFailure = (cache: CacheEnv, what: string, failure: string): Effect.Effect<void> => {
  // the cache's own errors already begin with `call cache LOCATION: `: said once
  const own = `call cache ${cache.service.location}: `
  const message = failure.startsWith(own) ? failure.slice(own.length) : failure
  if (warned.has(cache)) return Effect.logDebug(`${own}${what}: ${message}`)
  warned.add(cache)
  return Effect.logWarning(
    `${own}${what}: ${message}. The run goes on without it: each call it ` +
      `cannot serve is made, and further cache errors of this run are counted (assay report: "Call cache" line) ` +
      `rather than logged. If it is a damaged SQLite file, move it aside (a new one is made by the next run with ` +
      `the cache on) or check it with: sqlite3 <file> "PRAGMA integrity_check"`
  )
}

const fingerprints = new WeakMap<Task.Any, Json>()
const fingerprintOf = (task: Task.Any): Json => {
  let fp = fingerprints.get(task)
  if (fp === undefined) {
    fp = Task.fingerprint(task)
    fingerprints.set(task, fp)
  }
  return fp
}

/**
 * The key material of a task without its own `cacheKey`: its fingerprint (code digest
 * included) and the digest of its input (canonical JSON, else the bytes the run's codec
 * registry writes for it); `undefined` when the input can be neither.
 */
const defaultMaterial = (task: Task.Any, input: unknown, registry: CodecRegistry): Json | undefined => {
  const json = canonicalJson(input)
  if (Either.isRight(json)) return { task: fingerprintOf(task), input: digestFull(json.right) }
  const encoded = registry.dump(input)
  if (Either.isLeft(encoded)) return undefined
  return { task: fingerprintOf(task), input: { codec: encoded.right.codec, digest: digestFull(encoded.right.data) } }
}

/**
 * The cache plan of one attempt, or `undefined` when the cache does not apply (mode `off`, an
 * input that cannot be keyed, a key function that declines). An evaluator's key is made from
 * the input it is given, redacted as the runner redacts it (`Evaluator.redact` with the
 * member's withheld values): what the task sees is what it answers to. A key function is told
 * where the call is made (`CacheKeyEnv.place`: pipeline id, `seq`, `visit`).
 *
 * @internal
 */
export const planOf = (
  cache: CacheEnv,
  task: Task.Any,
  spec: Pipeline.PipelineSpec<any, any, any, any>,
  visit: number,
  input: unknown,
  pools: Context.Tag.Service<Pools>,
  registry: CodecRegistry,
  seq = 0
): Effect.Effect<Plan | undefined> => {
  const declared = task.options.cache
  if (declared === null) return Effect.succeed(undefined)
  const { mode, ttlMs } = CallCache.effective(declared, cache.run)
  if (mode === "off") return Effect.succeed(undefined)
  const namespace: CallCache.CacheNamespace = {
    repeat: spec.repeat,
    visit,
    variant: CallCache.variantOf(spec.member?.experimentId)
  }
  const member = spec.member
  const seen = task.options.evaluator && member !== undefined
    ? Evaluator.redact(input, Evaluator.withheldValues({
      variables: member.variables ?? {},
      experimentId: member.experimentId,
      outputDir: member.outputDir
    })).value
    : input
  const material: Effect.Effect<Json | undefined> = task.options.cacheKey === null
    ? Effect.succeed(defaultMaterial(task, seen, registry))
    : task.options.cacheKey(seen, {
      resourceOptions: (pool) =>
        pools.get(pool).pipe(
          Effect.flatMap((p) => p.resources),
          Effect.map((rs) => rs.map((r) => r.options)),
          Effect.orElseSucceed(() => [])
        ),
      place: { pipelineId: spec.pipelineId, seq, visit }
    })
  return Effect.map(
    material,
    (m) =>
      m === undefined ? undefined : { mode, ttlMs, key: CallCache.keyOf(m, namespace), namespace, pool: task.options.resource }
  )
}

/**
 * A served output: the decoded `value`, the attempt's {@link CacheNote}, and `encoded`, the
 * stored bytes when they are exactly what the run's registry would write for `value` (a JSON
 * entry whose value the registry encodes as JSON: canonical JSON decodes and encodes back to
 * the same bytes), so the checkpoint writes them instead of encoding the output again.
 *
 * @internal
 */
export interface Hit {
  readonly value: unknown
  readonly note: CacheNote
  readonly encoded: Encoded | undefined
}

/**
 * `entry` served under `plan`: decoded by the run's registry (`None` when it cannot be), with
 * its hit note (when it was stored, the usage stored with it, the pool).
 */
const hitOf = (plan: Plan, entry: CacheEntry, registry: CodecRegistry): Option.Option<Hit> => {
  const stored: Encoded = { typeName: entry.typeName, codec: entry.codec, data: entry.data }
  const decoded = registry.load(stored)
  if (Either.isLeft(decoded)) return Option.none()
  const value = decoded.right
  // (JSON's type name is always "json")
  const reusable = entry.codec === JsonCodec.name && entry.typeName === "json" && registry.codecFor(value) === JsonCodec
  return Option.some({
    value,
    note: {
      status: "hit" as const,
      key: plan.key.slice(0, 16),
      storedAt: entry.createdAt,
      usage: entry.usage,
      ...(plan.pool === null ? {} : { pool: plan.pool })
    },
    encoded: reusable ? stored : undefined
  })
}

/**
 * The stored output of a plan, decoded, when the plan serves (`readWrite`, `readOnly`) and an
 * unexpired entry decodes; else `None`. A cache that fails answers `None`, marks the plan
 * (`lookupFailed`) and is logged (once per run as a warning, see `logFailure`).
 *
 * @internal
 */
export const lookup = (
  cache: CacheEnv,
  plan: Plan,
  registry: CodecRegistry,
  nowMs: number
): Effect.Effect<Option.Option<Hit>> => {
  if (plan.mode !== "readWrite" && plan.mode !== "readOnly") return Effect.succeed(Option.none())
  return cache.service.get(plan.key).pipe(
    Effect.map(Option.flatMap((entry) =>
      plan.ttlMs !== null && nowMs - entry.createdAt >= plan.ttlMs ? Option.none() : hitOf(plan, entry, registry)
    )),
    Effect.catchAll((e) => {
      plan.lookupFailed = true
      return Effect.as(logFailure(cache, "lookup failed, running the task", e.message), Option.none())
    })
  )
}

/**
 * The usage stored with a cached output: the output's own (`CallCache.usageOf`), else the
 * tokens the attempt's lease reports added up to (a `judge` verdict has no `usage` field; a
 * verdict that needed a format repair stores the tokens of both its calls), with the priced
 * cost of the calls that made it (`costUsd`, US dollars, from the attempt's accounting) when
 * they had one: what a later hit reports as the tokens and the cost saved.
 */
const usageToStore = (value: unknown, accounted: AttemptUsage | undefined) => {
  const usage = CallCache.usageOf(value)
  if (accounted === undefined || (usage !== null && accounted.costUsd === null)) return usage
  const tokens = usage ??
    { promptTokens: accounted.tokensIn, completionTokens: accounted.tokensOut, totalTokens: accounted.tokensIn + accounted.tokensOut }
  return accounted.costUsd === null ? tokens : { ...tokens, costUsd: accounted.costUsd }
}

/**
 * What {@link afterRun} did: the attempt's {@link CacheNote}; `encoded`, the bytes of the
 * attempt's output when it encoded them (the checkpoint writes them rather than encoding the
 * output again); `entry`, the entry under the key afterwards when the output was stored or the
 * stored answer kept (what the attempt's waiters are served, see {@link coalesce});
 * `replaced`, when another answer to the same request was stored first (`lostRace`): that
 * answer, decoded, which the attempt records instead of its own.
 *
 * @internal
 */
export interface AfterRun {
  readonly note: CacheNote | undefined
  readonly encoded?: Encoded | undefined
  readonly entry?: CacheEntry | undefined
  readonly replaced?: { readonly value: unknown } | undefined
}

/**
 * After an attempt ran under `plan`: stores its successful output (not a control directive,
 * not an output the registry cannot encode) unless the plan is `readOnly`, and returns the
 * attempt's {@link CacheNote} (a failed attempt's too: it called, a miss with nothing stored)
 * with the bytes it encoded the output to (see {@link AfterRun}). `readWrite` keeps the first
 * answer (`putFirst`): when an unexpired answer to the same request was stored meanwhile (by
 * another process on a shared cache), it is kept and becomes the attempt's output (`replaced`,
 * note `lostRace`), unless the run cannot decode it (then this answer replaces it). `refresh`
 * replaces what was stored. A failed write is logged (once per run as a warning), never fails
 * the attempt: its note says `stored: false` (the attempt still counts as a miss, and as a
 * failed write); a failed lookup before it (`plan.lookupFailed`) is said as `lookupFailed`.
 *
 * @internal
 */
export const afterRun = (
  cache: CacheEnv,
  plan: Plan,
  taskName: string,
  exit: Exit.Exit<unknown, unknown>,
  registry: CodecRegistry,
  nowMs: number,
  accounted?: AttemptUsage | undefined
): Effect.Effect<AfterRun> => {
  const key = plan.key.slice(0, 16)
  const failed = plan.lookupFailed === true ? { lookupFailed: true as const } : {}
  // a failed attempt called too: a miss (refresh, bypass) with nothing to store
  if (!Exit.isSuccess(exit)) {
    return Effect.succeed({
      note: { status: plan.mode === "readOnly" ? "bypass" : plan.mode === "refresh" ? "refresh" : "miss", key, ...failed }
    })
  }
  if (isHandoff(exit.value)) return Effect.succeed({ note: undefined })
  if (plan.mode === "readOnly") return Effect.succeed({ note: { status: "bypass", key, ...failed } })
  const encoded = registry.dump(exit.value)
  if (Either.isLeft(encoded)) {
    return Effect.succeed({ note: plan.lookupFailed === true ? { status: "miss", key, ...failed } : undefined })
  }
  const note: CacheNote = { status: plan.mode === "refresh" ? "refresh" : "miss", key, ...failed }
  const entry: CacheEntry = {
    key: plan.key,
    taskName,
    namespace: plan.namespace,
    typeName: encoded.right.typeName,
    codec: encoded.right.codec,
    data: encoded.right.data,
    usage: usageToStore(exit.value, accounted),
    createdAt: nowMs
  }
  const done: AfterRun = { note, encoded: encoded.right, entry }
  const store: Effect.Effect<AfterRun, StoreUnavailable> = plan.mode === "refresh"
    ? Effect.as(cache.service.put(entry), done)
    : Effect.flatMap(putFirst(cache.service, entry, plan.ttlMs), (kept): Effect.Effect<AfterRun, StoreUnavailable> => {
      if (kept === entry) return Effect.succeed(done)
      const served = hitOf(plan, kept, registry)
      // an answer this run cannot read is replaced, as a miss would have replaced it
      if (Option.isNone(served)) return Effect.as(cache.service.put(entry), done)
      const value = served.value.value
      const bytes = served.value.encoded ?? registry.dump(value).pipe(Either.getOrUndefined)
      return Effect.succeed({
        note: { ...note, lostRace: true as const },
        encoded: bytes,
        entry: kept,
        replaced: { value }
      })
    })
  return store.pipe(
    Effect.catchAll((e) =>
      Effect.as(logFailure(cache, "could not store an output", e.message), {
        note: { ...note, stored: false as const },
        encoded: encoded.right,
        entry
      })
    )
  )
}

/**
 * The misses being answered in this process, by cache and key (see {@link coalesce}): the
 * flight of the attempt making the call, with the deferred its waiters wait on (made when the
 * first waiter comes).
 */
interface Flight {
  done: Deferred.Deferred<Option.Option<CacheEntry>> | undefined
}

const flights = new WeakMap<CallCacheService, Map<string, Flight>>()

const flightsOf = (service: CallCacheService): Map<string, Flight> => {
  let m = flights.get(service)
  if (m === undefined) {
    m = new Map()
    flights.set(service, m)
  }
  return m
}

/**
 * How {@link coalesce} serves or runs one attempt: `serve` a served output (a hit, its
 * {@link Hit}); `lead` runs the attempt as a miss and calls `publish` with the entry its
 * waiters are to be served (the one stored under the key, {@link AfterRun.entry}), if any;
 * `waiting` runs before the attempt first waits for another's call (it gives back what the
 * attempt holds: its worker slot); `leading` before it runs after having waited (it takes
 * them again).
 *
 * @internal
 */
export interface CoalesceOptions<A> {
  readonly serve: (hit: Hit) => Effect.Effect<A>
  readonly lead: (publish: (entry: CacheEntry) => void) => Effect.Effect<A>
  readonly waiting: Effect.Effect<void>
  readonly leading: Effect.Effect<void>
}

/**
 * One attempt under the call cache, with the misses of one key coalesced within the process
 * (single flight, `readWrite` only): the first attempt that misses a key (the leader) makes
 * the call while the others that miss it meanwhile wait, holding no lease and no worker slot,
 * and are then served the leader's stored answer as hits. When the leader ends without an
 * answer for them (its call failed, it was interrupted, its output cannot be stored), the
 * waiters look up again and one of them leads the next call. `readOnly` and `refresh`
 * attempts are not coalesced (each calls). Interrupting a waiter affects nobody else;
 * interrupting the leader wakes its waiters.
 *
 * @internal
 */
export const coalesce = <A>(
  cache: CacheEnv,
  plan: Plan,
  registry: CodecRegistry,
  nowMs: () => number,
  o: CoalesceOptions<A>
): Effect.Effect<A> => {
  if (plan.mode !== "readWrite") {
    return Effect.flatMap(lookup(cache, plan, registry, nowMs()), (hit) =>
      Option.isSome(hit) ? o.serve(hit.value) : o.lead(() => {}))
  }
  const inFlight = flightsOf(cache.service)
  const attempt = (waited: boolean): Effect.Effect<A> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        const current = inFlight.get(plan.key)
        if (current !== undefined) {
          // another attempt is making this call: wait for its answer, holding nothing
          const done = current.done ??= Deferred.unsafeMake<Option.Option<CacheEntry>>(FiberId.none)
          return restore(Effect.zipRight(
            waited ? Effect.void : o.waiting,
            Effect.flatMap(Deferred.await(done), (got) => {
              const hit = Option.flatMap(got, (entry) => hitOf(plan, entry, registry))
              return Option.isSome(hit) ? o.serve(hit.value) : attempt(true)
            })
          ))
        }
        // lead: claimed before the lookup, so a miss meanwhile waits rather than calls
        const flight: Flight = { done: undefined }
        inFlight.set(plan.key, flight)
        let published: Option.Option<CacheEntry> = Option.none()
        const settle = Effect.sync(() => {
          if (inFlight.get(plan.key) === flight) inFlight.delete(plan.key)
          if (flight.done !== undefined) Deferred.unsafeDone(flight.done, Exit.succeed(published))
        })
        return Effect.ensuring(
          restore(Effect.flatMap(lookup(cache, plan, registry, nowMs()), (hit) => {
            if (Option.isSome(hit)) return o.serve(hit.value)
            const lead = o.lead((entry) => {
              published = Option.some(entry)
            })
            return waited ? Effect.zipRight(o.leading, lead) : lead
          })),
          settle
        )
      })
    )
  return attempt(false)
}

/** A first attempt's success without a cache note: one frozen value for every such attempt. */
const firstSucceeded: { readonly outcome: "succeeded"; readonly decision: RetryPolicy.RetryDecision } = Object.freeze({
  outcome: "succeeded",
  decision: Object.freeze(RetryPolicy.succeeded(1))
})

/**
 * The outcome and decision of a succeeded attempt: `cache_hit` for a served output, else
 * `succeeded`; the decision carries the attempt's {@link CacheNote} as `cache` when there is
 * one (how `assay report` counts hits, misses and the tokens saved).
 *
 * @internal
 */
export const succeededAs = (
  attempt: number,
  note: CacheNote | undefined
): { readonly outcome: "succeeded" | "cache_hit"; readonly decision: RetryPolicy.RetryDecision } => {
  if (attempt === 1 && note === undefined) return firstSucceeded
  const decision = RetryPolicy.succeeded(attempt)
  if (note === undefined) return { outcome: "succeeded", decision }
  return {
    outcome: note.status === "hit" ? "cache_hit" : "succeeded",
    decision: { ...decision, cache: note } as RetryPolicy.RetryDecision
  }
}

/**
 * A failed attempt's decision with its {@link CacheNote} as `cache` when there is one (so
 * `report` counts the call it made as a miss from its row).
 *
 * @internal
 */
export const failedWithNote = <D extends RetryPolicy.RetryDecision>(decision: D, note: CacheNote | undefined): D =>
  note === undefined ? decision : { ...decision, cache: note }

/**
 * Counts an attempt's {@link CacheNote} in the run's figures (`RunState.cache`).
 *
 * @internal
 */
export const countNote = (c: CacheCounters, note: CacheNote | undefined): void => {
  if (note === undefined) return
  if (note.stored === false) c.writeFailures++
  if (note.lookupFailed === true) c.lookupFailures++
  switch (note.status) {
    case "hit": {
      c.hits++
      if (note.usage !== undefined && note.usage !== null) {
        c.promptTokens += note.usage.promptTokens
        c.completionTokens += note.usage.completionTokens
        c.totalTokens += note.usage.totalTokens
        const cost = note.usage.costUsd
        if (typeof cost === "number" && Number.isFinite(cost)) c.costSavedUsd = roundUsd((c.costSavedUsd ?? 0) + cost)
      }
      return
    }
    case "miss":
      c.misses++
      return
    case "refresh":
      c.refreshed++
      return
    case "bypass":
      c.bypassed++
  }
}
