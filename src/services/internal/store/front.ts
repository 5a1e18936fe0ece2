/**
 * The store front, written once: everything a store does that does not depend on where the
 * facts live. A driver (`StoreDriver`: the memory maps, one SQLite file, later a Postgres
 * database) implements commits, fact writes and typed reads; the front adds
 *
 * - the group commit of pipeline writes ({@link makeGroupCommit}, byte budgets by payload
 *   size),
 * - the write-behind buffer of attempts and events ({@link makeWriteBehind}) and its policy
 *   (`writeBehind`, `batchSize`, `flushIntervalMs`: at open, and per run through
 *   `NewRun.writes`),
 * - flush-before-read (reads that return attempts or events, `stats`, `finishRun`; once as a
 *   `consistentReads` view begins, not inside it),
 * - limit and bucket validation (`checkLimit`, `checkBucket`),
 * - artifact placement (journal mode, artifact backend), secret masking of resources and the
 *   default metric display,
 * - the refusal of every write on a read-only driver.
 *
 * The shape follows `@effect/cluster`'s `MessageStorage.makeEncoded(driver)`: one front, narrow
 * drivers (`MemoryDriver`, `SqlMessageStorage`).
 *
 * @since 0.1.0
 */
import { Effect, type Exit, FiberRef, Stream } from "effect"
import { type ConfigError, StoreUnavailable } from "../../../domain/Errors.js"
import { ArtifactBackend } from "../../ArtifactBackend.js"
import type {
  AdmissionWrite,
  CheckpointUnit,
  Limit,
  NewArtifact,
  NewAttempt,
  NewEvent,
  PlacedArtifact,
  StoreDriver,
  StoreOptions,
  StoreService,
  WritePolicy
} from "../../Store.js"
import type { WriteOp } from "./ops.js"
import {
  checkBucket,
  checkLimit,
  checkOptions,
  makeGroupCommit,
  makeWriteBehind,
  maskSecrets,
  placeAll,
  placeArtifact,
  placeSync
} from "./shared.js"

/**
 * What the front queues: a driver's write, or a group of writes of one pipeline that commit
 * in the same transaction, in order (a checkpoint with its `admission` and `before` units).
 * Groups are flattened before the driver sees them.
 *
 * @since 0.1.0
 * @category writers
 */
export type QueuedOp = WriteOp | { readonly _tag: "Group"; readonly ops: ReadonlyArray<WriteOp> }

/**
 * Commits queued ops through `commit`, flattening groups; a refused op inside a group refuses
 * the group (its caller fails with the first refusal).
 *
 * @since 0.1.0
 * @category writers
 */
export const commitFlattened = (commit: StoreDriver["commit"]) =>
(
  ops: ReadonlyArray<QueuedOp>
): Effect.Effect<void | ReadonlyArray<readonly [number, StoreUnavailable]>, StoreUnavailable> => {
  let grouped = false
  for (const op of ops) {
    if (op._tag === "Group") {
      grouped = true
      break
    }
  }
  if (!grouped) return commit(ops as ReadonlyArray<WriteOp>)
  const flat: Array<WriteOp> = []
  const owner: Array<number> = []
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!
    if (op._tag === "Group") {
      for (const o of op.ops) {
        flat.push(o)
        owner.push(i)
      }
    } else {
      flat.push(op)
      owner.push(i)
    }
  }
  return Effect.map(commit(flat), (refused) => {
    if (refused === undefined || refused.length === 0) return refused
    const out: Array<readonly [number, StoreUnavailable]> = []
    for (const [j, e] of refused) {
      const i = owner[j]!
      if (!out.some((r) => r[0] === i)) out.push([i, e])
    }
    return out
  })
}

/**
 * The payload bytes a queued write holds in memory (the group commit's byte budget): the
 * artifact of a checkpoint and the seeds of an admission, whatever the backend did with them.
 *
 * @since 0.1.0
 * @category writers
 */
export const bytesOf = (op: QueuedOp): number => {
  switch (op._tag) {
    case "Group": {
      let n = 0
      for (const o of op.ops) n += bytesOf(o)
      return n
    }
    case "Checkpoint":
      return op.unit.artifact?.payload.byteLength ?? 0
    case "Admit": {
      let n = 0
      for (const [a] of op.seeds) n += a.payload.byteLength
      return n
    }
    default:
      return 0
  }
}

/** A queued op's fields, writable, for {@link spend} only. */
type Spendable<Op> = { -readonly [K in keyof Op]: Op[K] | undefined }

const NOTHING: ReadonlyArray<never> = Object.freeze([])

/**
 * Empties a queued op once its batch is done (committed, refused or failed) and its submitter
 * has been resumed (the group commit's `spent`): nothing reads the op again. A checkpoint
 * lets go of its unit and placed payloads, an admission of its rows, seeds and states, a
 * group of its ops' contents.
 *
 * Why: the ops of a batch live until its group commit, across a scavenge or two, and V8 comes
 * to allocate them directly in the old generation (allocation-site pretenuring). A dead op
 * there still counts as a root for the next scavenge until a mark-compact frees it, so every
 * young object it references (the unit, its rows, strings and payload bytes) survived that
 * scavenge and was promoted, to be freed only by a mark-compact: about half of the old-space
 * growth of the runner's fast path (BENCHMARKS.md, perf13ad).
 *
 * @since 0.1.0
 * @category writers
 */
export const spend = (op: QueuedOp): void => {
  switch (op._tag) {
    case "Group":
      for (const o of op.ops) spend(o)
      return
    case "Checkpoint": {
      const o = op as Spendable<typeof op>
      o.unit = undefined
      o.placed = undefined
      o.entryPlaced = undefined
      return
    }
    case "Admit": {
      const o = op as { -readonly [K in keyof typeof op]: (typeof op)[K] }
      o.pipelines = NOTHING
      o.seeds = NOTHING
      o.traversals = NOTHING
      return
    }
  }
}

/**
 * Builds the store service of `driver` in the current scope (see the module docs), using the
 * `ArtifactBackend` in context. Closing the scope commits queued writes and flushes buffered
 * facts (a failed final flush is a defect carrying the `StoreUnavailable`: call `flush` before
 * closing to handle it as a typed error). Fails with `ConfigError` on invalid `options`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWith = (
  driver: StoreDriver,
  options: StoreOptions = {}
) =>
  Effect.gen(function*() {
    const policy = yield* checkOptions(options)
    const backend = yield* ArtifactBackend
    const journal = options.journal ?? "full"
    const refused = driver.readOnlyError
    const readOnly = refused !== undefined

    const writer = yield* makeGroupCommit<QueuedOp>({
      commit: commitFlattened(driver.commit),
      sizeOf: bytesOf,
      spent: spend
    })
    const wb = yield* makeWriteBehind({
      write: driver.writeFacts,
      batchSize: policy.batchSize,
      // a read-only store buffers nothing: no flusher
      flushIntervalMs: readOnly ? 0 : policy.flushIntervalMs,
      enabled: options.writeBehind ?? true
    })
    yield* Effect.addFinalizer(() => Effect.orDie(wb.flush))

    const refuse = <A>(write: Effect.Effect<A, StoreUnavailable>): Effect.Effect<A, StoreUnavailable> =>
      refused === undefined ? write : Effect.fail(refused)
    const submit = (op: WriteOp) => (refused === undefined ? writer.submit(op) : Effect.fail(refused))
    const limited = <A, E>(
      limit: Limit,
      stream: () => Stream.Stream<A, E>
    ): Stream.Stream<A, E | ConfigError> =>
      Stream.unwrap(Effect.map(checkLimit(limit), (l) => l === 0 ? Stream.empty : l === undefined ? stream() : Stream.take(stream(), l)))
    // Inside `consistentReads` the buffer was flushed as the view began: a read there writes
    // nothing (on Postgres the view is a read-only transaction that the reading fiber's writes
    // would enter; in memory, writes wait for the view to end).
    const inView = FiberRef.unsafeMake(false)
    /** Flush-before-read: the buffered facts, unless this fiber reads inside a consistent view. */
    const readFlush: Effect.Effect<void, StoreUnavailable> = Effect.flatMap(
      FiberRef.get(inView),
      (viewing) => viewing ? Effect.void : wb.flush
    )
    const consistentReads = driver.consistentReads
    const flushed = <A, E>(stream: () => Stream.Stream<A, E>): Stream.Stream<A, E | StoreUnavailable> =>
      Stream.unwrap(Effect.as(readFlush, Stream.suspend(stream)))
    /** Applies a run's write policy (validated by `RunConfig.resolve`; anything else is a bug). */
    const configure = (writes: Partial<WritePolicy>) =>
      Effect.flatMap(
        Effect.orDie(checkOptions({
          batchSize: writes.batchSize ?? policy.batchSize,
          flushIntervalMs: writes.flushIntervalMs ?? policy.flushIntervalMs
        })),
        (p) => wb.configure({ ...p, enabled: writes.writeBehind ?? options.writeBehind ?? true })
      )

    const noTraversal = new StoreUnavailable({
      message: `the ${driver.kind} store has no traversal capability (pipelines with control cannot be stored in it)`
    })
    /** A checkpoint of a control pipeline: the unit's artifact and the entry payload placed. */
    const checkpointTraversal = (unit: CheckpointUnit) => {
      if (driver.traversal === undefined) return Effect.fail(noTraversal)
      // no I/O to place either payload (inline or null backend, summary journal): no Effect per payload
      const placed = unit.artifact === undefined ? undefined : placeSync(unit.artifact, journal, backend)
      const entry = unit.traversal?.entry
      const entryPlaced = entry === undefined ? undefined : placeSync(entry, journal, backend)
      if ((unit.artifact === undefined || placed !== undefined) && (entry === undefined || entryPlaced !== undefined)) {
        return writer.submit({ _tag: "Checkpoint", unit, placed, entryPlaced })
      }
      return Effect.flatMap(
        Effect.all([
          unit.artifact === undefined ? Effect.succeed(undefined) : placeArtifact(unit.artifact, journal, backend),
          unit.traversal?.entry === undefined ?
            Effect.succeed(undefined) :
            placeArtifact(unit.traversal.entry, journal, backend)
        ]),
        ([placed, entryPlaced]) => writer.submit({ _tag: "Checkpoint", unit, placed, entryPlaced })
      )
    }
    /** A unit's checkpoint op with its payloads placed: at once when no I/O is needed, else `undefined`. */
    const placedUnitSync = (unit: CheckpointUnit): WriteOp | undefined => {
      const placed = unit.artifact === undefined ? undefined : placeSync(unit.artifact, journal, backend)
      if (unit.artifact !== undefined && placed === undefined) return undefined
      const entry = unit.traversal?.entry
      const entryPlaced = entry === undefined ? undefined : placeSync(entry, journal, backend)
      if (entry !== undefined && entryPlaced === undefined) return undefined
      return { _tag: "Checkpoint", unit, placed, entryPlaced }
    }
    const placedUnit = (unit: CheckpointUnit): Effect.Effect<WriteOp, StoreUnavailable> => {
      const op = placedUnitSync(unit)
      if (op !== undefined) return Effect.succeed(op)
      return Effect.map(
        Effect.all([
          unit.artifact === undefined ? Effect.succeed(undefined) : placeArtifact(unit.artifact, journal, backend),
          unit.traversal?.entry === undefined ?
            Effect.succeed(undefined) :
            placeArtifact(unit.traversal.entry, journal, backend)
        ]),
        ([placed, entryPlaced]): WriteOp => ({ _tag: "Checkpoint", unit, placed, entryPlaced })
      )
    }
    /**
     * A checkpoint with its admission and earlier units: one group (admission, `before`, the
     * unit), so that the driver commits them in one transaction, in order.
     */
    /**
     * The group op of a checkpoint with its admission and earlier units, built at once when
     * no payload needs I/O to be placed (`undefined` otherwise), with the unit itself without
     * its group and the group's parts.
     */
    const groupParts = (unit: CheckpointUnit) => {
      const admission = unit.admission
      const before = unit.before
      // the unit itself without its group (field by field: a rest pattern took the runtime's
      // generic property copy once per checkpoint)
      const last: CheckpointUnit = admission === undefined && before === undefined ? unit : {
        pipelineId: unit.pipelineId,
        artifact: unit.artifact,
        task: unit.task,
        pipeline: unit.pipeline,
        attempts: unit.attempts,
        events: unit.events,
        traversal: unit.traversal
      } satisfies { [K in Exclude<keyof CheckpointUnit, "admission" | "before">]-?: CheckpointUnit[K] }
      const units: ReadonlyArray<CheckpointUnit> = before === undefined ? [last] : [...before, last]
      const traversals = admission?.traversals ?? []
      const seeds = admission?.seeds ?? []
      const refusal = driver.traversal === undefined &&
          (traversals.length > 0 || units.some((u) => u.traversal !== undefined))
        ? noTraversal
        : undefined
      return { admission, units, traversals, seeds, refusal }
    }
    /** The group op of `parts` when no payload needs I/O to be placed (else `undefined`). */
    const groupSync = (parts: ReturnType<typeof groupParts>): QueuedOp | undefined => {
      const { admission, seeds, traversals, units } = parts
      // no I/O to place any payload: no Effect per payload, and the group's ops built in
      // one array (the admission first)
      const syncSeeds: Array<readonly [NewArtifact, PlacedArtifact]> = []
      const syncOps: Array<WriteOp> = []
      for (const a of seeds) {
        const p = placeSync(a, journal, backend)
        if (p === undefined) return undefined
        syncSeeds.push([a, p])
      }
      if (admission !== undefined) {
        syncOps.push({ _tag: "Admit", pipelines: admission.pipelines, seeds: syncSeeds, traversals })
      }
      for (let i = 0; i < units.length; i++) {
        const op = placedUnitSync(units[i]!)
        if (op === undefined) return undefined
        syncOps.push(op)
      }
      return { _tag: "Group", ops: syncOps }
    }
    /**
     * A checkpoint with its admission and earlier units: one group (admission, `before`, the
     * unit), so that the driver commits them in one transaction, in order.
     */
    const checkpointGroup = (unit: CheckpointUnit): Effect.Effect<void, StoreUnavailable> => {
      const parts = groupParts(unit)
      if (parts.refusal !== undefined) return Effect.fail(parts.refusal)
      const op = groupSync(parts)
      if (op !== undefined) return writer.submit(op)
      const { admission, seeds, traversals, units } = parts
      return Effect.flatMap(
        Effect.all([placeAll(seeds, journal, backend), Effect.forEach(units, placedUnit)]),
        ([placedSeeds, ops]) =>
          writer.submit({
            _tag: "Group",
            ops: admission === undefined
              ? ops
              : [{ _tag: "Admit", pipelines: admission.pipelines, seeds: placedSeeds, traversals }, ...ops]
          })
      )
    }
    /**
     * `checkpoint` of a unit with its admission or earlier units, without an Effect (see
     * {@link checkpointNowOf}): `false` when it cannot be submitted so (a payload needs I/O,
     * a refusal): the caller then uses `checkpoint`, which says why.
     */
    const checkpointNow = (unit: CheckpointUnit, done: (exit: Exit.Exit<void, StoreUnavailable>) => void): boolean => {
      if (refused !== undefined || (unit.admission === undefined && unit.before === undefined)) return false
      const parts = groupParts(unit)
      if (parts.refusal !== undefined) return false
      const op = groupSync(parts)
      if (op === undefined) return false
      writer.submitNow(op, done)
      return true
    }
    /** An admission with its seeds placed: submitted at once when no seed needs I/O. */
    const admitPlaced = (
      ps: Parameters<StoreService["admit"]>[0],
      seeds: ReadonlyArray<NewArtifact>,
      traversals: NonNullable<Parameters<StoreService["admit"]>[2]>
    ): Effect.Effect<void, StoreUnavailable> => {
      const placed: Array<readonly [NewArtifact, PlacedArtifact]> = []
      for (const a of seeds) {
        const p = placeSync(a, journal, backend)
        if (p === undefined) {
          return Effect.flatMap(placeAll(seeds, journal, backend), (all) =>
            writer.submit({ _tag: "Admit", pipelines: ps, seeds: all, traversals }))
        }
        placed.push([a, p])
      }
      return writer.submit({ _tag: "Admit", pipelines: ps, seeds: placed, traversals })
    }
    /**
     * An admission claim's write as the driver takes it: refused when it carries traversal
     * states and the store keeps none, or when the store refuses writes; its seeds placed first.
     */
    const placedAdmission = <A>(
      write: AdmissionWrite,
      claim: (op: Extract<WriteOp, { readonly _tag: "Admit" }>) => Effect.Effect<A, StoreUnavailable>
    ): Effect.Effect<A, StoreUnavailable> =>
      (write.traversals ?? []).length > 0 && driver.traversal === undefined
        ? Effect.fail(noTraversal)
        : refuse(Effect.flatMap(placeAll(write.seeds ?? [], journal, backend), (placed) =>
          claim({ _tag: "Admit", pipelines: write.pipelines, seeds: placed, traversals: write.traversals ?? [] })))
    const traversal = driver.traversal
    const service: StoreService = {
      kind: driver.kind,
      get featureLevel() {
        return driver.featureLevel
      },
      traversal: traversal === undefined ? undefined : {
        visitState: traversal.visitState,
        getArtifactById: traversal.getArtifactById,
        handoffs: (o = {}) =>
          Effect.flatMap(checkLimit(o.limit), (limit) =>
            limit === 0 ? Effect.succeed([]) : traversal.handoffs({ ...o, limit }))
      },
      readOnly,
      exclusiveWriter: driver.exclusiveWriter,
      callCache: driver.callCache,
      storeId: driver.storeId,
      journal,
      succeededPipelines: driver.succeededPipelines,
      pipelineStates: driver.pipelineStates,
      takenPipelines: driver.takenPipelines === undefined ? undefined : ((taken) => (runId) =>
        Effect.zipRight(readFlush, taken(runId)))(driver.takenPipelines),
      consistentReads: consistentReads === undefined ? undefined : (reads) =>
        Effect.zipRight(wb.flush, consistentReads(Effect.locally(reads, inView, true))),
      claimAdmission: driver.claimAdmission === undefined ? undefined : ((claim) => (write, expected) =>
        placedAdmission(write, (op) => claim(op, expected)))(driver.claimAdmission),
      claimAdmissions: driver.claimAdmissions === undefined ? undefined : ((claim) => (write, expected) =>
        placedAdmission(write, (op) => claim(op, expected)))(driver.claimAdmissions),

      openRun: (run) =>
        refuse(
          run.writes === undefined ? driver.openRun(run) : Effect.zipRight(configure(run.writes), driver.openRun(run))
        ),
      heartbeat: (runId, nowMs) => refuse(driver.heartbeat(runId, nowMs)),
      finishRun: (runId, finish) => refuse(Effect.zipRight(wb.flush, driver.finishRun(runId, finish))),
      getRun: driver.getRun,
      latestRun: driver.latestRun,
      listRuns: driver.listRuns,
      interruptStale: (staleAfterMs, nowMs) => refuse(driver.interruptStale(staleAfterMs, nowMs)),

      admit: (ps, seeds = [], traversals = []) =>
        ps.length === 0 && seeds.length === 0 && traversals.length === 0
          ? Effect.void
          : traversals.length > 0 && driver.traversal === undefined
          ? Effect.fail(noTraversal)
          : refused !== undefined
          ? Effect.fail(refused)
          : admitPlaced(ps, seeds, traversals),
      checkpoint: (unit) => {
        if (refused !== undefined) return Effect.fail(refused)
        if (unit.admission !== undefined || unit.before !== undefined) return checkpointGroup(unit)
        if (unit.traversal !== undefined) return checkpointTraversal(unit)
        if (unit.artifact === undefined) return writer.submit({ _tag: "Checkpoint", unit, placed: undefined })
        const placed = placeSync(unit.artifact, journal, backend)
        return placed !== undefined
          ? writer.submit({ _tag: "Checkpoint", unit, placed })
          : Effect.flatMap(placeArtifact(unit.artifact, journal, backend), (p) =>
            writer.submit({ _tag: "Checkpoint", unit, placed: p }))
      },
      putTask: (task) => submit({ _tag: "PutTask", task }),
      updatePipeline: (pipelineId, patch) => submit({ _tag: "Patch", pipelineId, patch }),
      settlePipeline: (pipelineId, settle) => submit({ _tag: "Settle", pipelineId, settle }),
      getPipelines: driver.getPipelines,
      getPipeline: driver.getPipeline,

      recordAttempt: (a: NewAttempt) => (refused === undefined ? wb.addAttempt(a) : Effect.fail(refused)),
      emitEvent: (e: NewEvent) => (refused === undefined ? wb.addEvent(e) : Effect.fail(refused)),
      flush: wb.flush,
      pending: wb.pending,

      putArtifact: (a) =>
        refuse(Effect.flatMap(placeArtifact(a, journal, backend), (placed) => driver.putArtifact(a, placed))),
      getArtifact: driver.getArtifact,
      listArtifacts: driver.listArtifacts,
      markFinal: (pipelineId, seq) => submit({ _tag: "MarkFinal", pipelineId, seq }),

      reportMetric: (m) =>
        refuse(driver.reportMetric({
          ...m,
          label: m.label ?? null,
          display: m.display ?? (typeof m.value === "number" ? "number" : "text")
        })),
      metrics: driver.metrics,
      putResource: (r) => refuse(driver.putResource({ ...r, spec: maskSecrets(r.spec) })),
      resources: driver.resources,

      stats: (runId) => Effect.zipRight(readFlush, driver.stats(runId)),
      resourceUsage: (runId) => Effect.zipRight(readFlush, driver.resourceUsage(runId)),
      pipelineAccounting: (o) => Effect.zipRight(readFlush, driver.pipelineAccounting(o)),
      errors: (o = {}) =>
        Effect.flatMap(checkLimit(o.limit ?? 20), (limit) =>
          limit === 0 ? Effect.succeed([]) : driver.errors({ runId: o.runId, limit })),
      events: (o = {}) =>
        Effect.flatMap(checkLimit(o.limit), (limit) =>
          limit === 0 ? Effect.succeed([]) : Effect.zipRight(readFlush, driver.events(o, limit))),
      countEvents: (f = {}) => Effect.zipRight(readFlush, driver.countEvents(f)),
      pipelinesBySpec: driver.pipelinesBySpec,
      pipelinesPage: (o) =>
        Effect.flatMap(checkLimit(o.limit), (limit = 0) =>
          limit === 0 ? Effect.succeed({ pipelines: [], next: null }) : driver.pipelinesPage({ ...o, limit })),
      completions: (o) => Effect.flatMap(checkBucket(o.bucketMs), (bucketMs) => driver.completions({ ...o, bucketMs })),
      loadBundles: driver.loadBundles,

      streamPipelines: (o = {}) => limited(o.limit, () => driver.streamPipelines(o)),
      streamTasks: (o = {}) => limited(o.limit, () => driver.streamTasks(o)),
      streamAttempts: (o = {}) => limited(o.limit, () => flushed(() => driver.streamAttempts(o))),
      streamEvents: (o = {}) => limited(o.limit, () => flushed(() => driver.streamEvents(o))),
      streamArtifacts: (o) => limited(o.limit, () => driver.streamArtifacts(o))
    }
    nowSubmitters.set(service, checkpointNow)
    return service
  })

/**
 * The stores built by the front, with their `checkpoint` without an Effect (see
 * {@link checkpointNowOf}). A weak map: a closed store's entry goes with it.
 */
const nowSubmitters = new WeakMap<StoreService, CheckpointNow>()

/**
 * A checkpoint (with its admission or earlier units) submitted to the group commit without an
 * Effect: `done` is called once with the commit's exit. Returns `false`, having submitted
 * nothing, when the unit cannot be submitted so (a payload needs I/O to be placed, the store is
 * read-only or refuses the unit): then use `StoreService.checkpoint`.
 *
 * @internal
 */
export type CheckpointNow = (unit: CheckpointUnit, done: (exit: Exit.Exit<void, StoreUnavailable>) => void) => boolean

/**
 * The {@link CheckpointNow} of `store` when it is a store built by this front itself (not a
 * wrapper around one), else `undefined`. The same transaction, rows and order as
 * `store.checkpoint(unit)`; only the caller's wait differs (a callback instead of a fiber).
 *
 * @internal
 */
export const checkpointNowOf = (store: StoreService): CheckpointNow | undefined => nowSubmitters.get(store)
