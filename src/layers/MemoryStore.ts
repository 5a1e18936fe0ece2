/**
 * The in-memory store: the same semantics as `SqliteStore` (one contract suite runs against
 * both), kept in maps for tests and short-lived runs. Everything is lost when the layer's
 * scope closes.
 *
 * The memory driver ({@link makeDriver}) sits behind the same store front as the SQLite driver
 * (`Store.makeWith`: group commit, write-behind, flush-on-read, limits), so ordering,
 * flush-on-read and failed-flush retry behave identically. A write applies all its rows
 * synchronously, so no reader ever sees part of a batch.
 *
 * @since 0.1.0
 */
import { Chunk, Effect, FiberRef, Layer, Option, Random, type Scope, Stream } from "effect"
import { type ConfigError, StoreUnavailable } from "../domain/Errors.js"
import type { PipelineId } from "../domain/Ids.js"
import {
  ArtifactRecord,
  AttemptRecord,
  EventRecord,
  isTerminalPipelineState,
  MetricRecord,
  PipelineRecord,
  type PipelineState,
  ResourceRecord,
  RunRecord,
  TaskRecord,
  trusted
} from "../domain/Records.js"
import { ArtifactBackend, type ArtifactBackendService } from "../services/ArtifactBackend.js"
import type {
  CompletionBucket,
  ErrorRow,
  EventFilter,
  LoadedArtifact,
  PipelineBundle,
  PipelinesPage,
  NewArtifact,
  NewAttempt,
  NewEvent,
  PlacedArtifact,
  SpecCount,
  StoreDriver,
  StoreOptions,
  StoreService,
  StoreStats,
  StoreWrite
} from "../services/Store.js"
import { makeWith, Store } from "../services/Store.js"
import { PAGE_SIZE, type PipelineStateAndRun, tallyTaken } from "../services/internal/store/shared.js"
import { errorRowOf } from "../domain/TaskStore.js"
import { isRetryDecision } from "../domain/internal/retries.js"
import { addAttempt as addCacheAttempt, emptyStats as emptyCacheStats } from "../services/CallCache.js"
import { HandoffRecord } from "../domain/Handoff.js"
import * as Traversal from "../domain/Traversal.js"
import type { TraversalWrite } from "../services/Store.js"
import { BASE_LEVEL, conflict, handoffEventOf, needsVisits, newest, VISITS_LEVEL } from "../services/internal/store/traversal.js"
import { layerInline } from "./ArtifactBackends.js"
import { applyPatch, settleToPatch } from "../services/internal/store/ops.js"
import {
  artifactRecordOf,
  latencyOf,
  loadPayload,
  succeededIndexOf,
  usageAccumulator,
  accountingFold
} from "../services/internal/store/shared.js"

/**
 * Test hook: while `failWrites` is true every write transaction of the memory store fails
 * with `StoreUnavailable` and changes nothing (used to test failed-flush retry and group
 * commit failure).
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryStoreFaults {
  failWrites: boolean
}

/**
 * Options of the memory store: the shared {@link StoreOptions} plus an optional
 * {@link MemoryStoreFaults} hook.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryStoreOptions extends StoreOptions {
  readonly faults?: MemoryStoreFaults | undefined
}

interface StoredArtifact {
  readonly record: ArtifactRecord
  readonly payload: Uint8Array | null
}

const pageStream = <A>(rows: () => ReadonlyArray<A>): Stream.Stream<A> =>
  Stream.flatMap(
    Stream.sync(rows),
    (all) =>
      Stream.fromIterable(Array.from({ length: Math.ceil(all.length / PAGE_SIZE) }, (_, i) => i)).pipe(
        Stream.mapConcatChunk((i) => Chunk.unsafeFromArray(all.slice(i * PAGE_SIZE, (i + 1) * PAGE_SIZE)))
      )
  )

const asTask = (t: TaskRecord | ConstructorParameters<typeof TaskRecord>[0]): TaskRecord =>
  t instanceof TaskRecord ?
    t :
    t.visit === undefined || t.active === undefined ?
    trusted(TaskRecord, { ...t, visit: t.visit ?? 0, active: t.active ?? true }) :
    trusted(TaskRecord, t)

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)
const byCreated = (a: PipelineRecord, b: PipelineRecord) => a.createdAt - b.createdAt || cmp(a.pipelineId, b.pipelineId)
const byTaskOrder = (a: TaskRecord, b: TaskRecord) =>
  cmp(a.pipelineId, b.pipelineId) || a.seq - b.seq || a.visit - b.visit || cmp(a.taskRunId, b.taskRunId)

const matchEvent = (f: EventFilter) => (e: EventRecord) =>
  (f.pipelineId === undefined || e.pipelineId === f.pipelineId) &&
  (f.runId === undefined || e.runId === f.runId) &&
  (f.kind === undefined || e.kind === f.kind)

/**
 * The memory driver (see `Store.StoreDriver`): maps in this process, each write applied
 * synchronously (so no reader ever sees part of a batch), using the {@link ArtifactBackend} in
 * context for blob payloads.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeDriver = (options: { readonly faults?: MemoryStoreFaults | undefined } = {}) =>
  Effect.gen(function*() {
    const backend: ArtifactBackendService = yield* ArtifactBackend
    const faults = options.faults ?? { failWrites: false }
    // the instance's identity (`Store.storeId`): 96 random bits from `Random`
    const storeId = (yield* Effect.all([Random.nextIntBetween(0, 2 ** 32), Random.nextIntBetween(0, 2 ** 32), Random.nextIntBetween(0, 2 ** 32)]))
      .map((n) => n.toString(16).padStart(8, "0")).join("")

    const runs = new Map<string, RunRecord>()
    const pipelines = new Map<string, PipelineRecord>()
    const tasks = new Map<string, TaskRecord>()
    const attempts: Array<AttemptRecord> = []
    const events: Array<EventRecord> = []
    const artifacts = new Map<number, StoredArtifact>()
    const artifactsByPipeline = new Map<string, Array<number>>()
    const metrics = new Map<string, MetricRecord>()
    const resources = new Map<string, ResourceRecord>()
    let nextAttemptId = 1
    let nextEventId = 1
    let nextArtifactId = 1
    // the traversal capability: states by pipeline, the ledger, the feature level
    const traversals = new Map<string, Traversal.VisitState>()
    const ledger: Array<HandoffRecord> = []
    let nextHandoffId = 1
    let level: string = BASE_LEVEL
    /** Task run ids of the control pipelines (the ones a rewind may invalidate), by pipeline. */
    const taskIdsByPipeline = new Map<string, Set<string>>()
    const putTask = (t: TaskRecord) => {
      tasks.set(t.taskRunId, t)
      // plain pipelines are never invalidated: they pay no index
      if (traversals.has(t.pipelineId)) {
        const ids = taskIdsByPipeline.get(t.pipelineId)
        if (ids === undefined) taskIdsByPipeline.set(t.pipelineId, new Set([t.taskRunId]))
        else ids.add(t.taskRunId)
      }
    }

    // Consistent views (`consistentReads`): while one is open, writes of other fibers wait for
    // it to end (the reading fibers' own writes go through). A view is a few synchronous reads,
    // so a writer waits microseconds; with no view open a write costs one comparison more.
    let views = 0
    const viewsEnded = Effect.unsafeMakeLatch(true)
    const viewing = FiberRef.unsafeMake(false)
    const tx = <A>(f: () => A): Effect.Effect<A, StoreUnavailable> =>
      Effect.suspend(() => {
        if (faults.failWrites) return Effect.fail(new StoreUnavailable({ message: "memory store: injected write failure" }))
        // the check and the write in one step: no view can begin between them
        if (views === 0) return Effect.succeed(f())
        return Effect.flatMap(FiberRef.get(viewing), (own) => own ? Effect.sync(f) : Effect.zipRight(viewsEnded.await, tx(f)))
      })

    const insertAttempt = (a: NewAttempt) => {
      attempts.push(trusted(AttemptRecord, {
        ...a,
        attemptId: nextAttemptId++,
        visit: a.visit ?? 0,
        model: a.model ?? null,
        tokensIn: a.tokensIn ?? null,
        tokensOut: a.tokensOut ?? null,
        tokensEstimated: a.tokensEstimated ?? false,
        costUsd: a.costUsd ?? null
      }))
    }
    const insertEvent = (e: NewEvent) => {
      events.push(trusted(EventRecord, { ...e, eventId: nextEventId++ }))
    }
    const clearFinal = (pipelineId: string, keep: number) => {
      for (const id of artifactsByPipeline.get(pipelineId) ?? []) {
        const a = artifacts.get(id)
        if (a !== undefined && a.record.isFinal && id !== keep) {
          artifacts.set(id, { ...a, record: trusted(ArtifactRecord, { ...a.record, isFinal: false }) })
        }
      }
    }
    const insertArtifact = (a: NewArtifact, placed: PlacedArtifact): ArtifactRecord => {
      const artifactId = nextArtifactId++
      const record = artifactRecordOf(artifactId, a, placed)
      artifacts.set(artifactId, { record, payload: placed.payload })
      const list = artifactsByPipeline.get(a.pipelineId)
      if (list === undefined) artifactsByPipeline.set(a.pipelineId, [artifactId])
      else list.push(artifactId)
      if (a.isFinal) clearFinal(a.pipelineId, artifactId)
      return record
    }
    /** The latest active artifact at `seq` (or, with `visit`, the latest of that occurrence, active or not). */
    const latestAt = (pipelineId: string, seq: number, visit?: number): StoredArtifact | undefined => {
      let best: StoredArtifact | undefined
      for (const id of artifactsByPipeline.get(pipelineId) ?? []) {
        const a = artifacts.get(id)
        if (
          a !== undefined && a.record.seq === seq && (visit === undefined ? a.record.active : a.record.visit === visit) &&
          (best === undefined || id > best.record.artifactId)
        ) best = a
      }
      return best
    }
    const setFinal = (a: StoredArtifact) => {
      if (!a.record.isFinal) {
        artifacts.set(a.record.artifactId, { ...a, record: trusted(ArtifactRecord, { ...a.record, isFinal: true }) })
      }
      clearFinal(a.record.pipelineId, a.record.artifactId)
    }
    /** Task and artifact rows of stations `from..nTasks-1` become inactive history. */
    const invalidate = (pipelineId: string, from: number, nTasks: number) => {
      for (const k of taskIdsByPipeline.get(pipelineId) ?? []) {
        const t = tasks.get(k)
        if (t !== undefined && t.seq >= from && t.active) tasks.set(k, trusted(TaskRecord, { ...t, active: false }))
      }
      for (const id of artifactsByPipeline.get(pipelineId) ?? []) {
        const a = artifacts.get(id)
        if (a !== undefined && a.record.active && a.record.seq >= from && a.record.seq < nTasks) {
          artifacts.set(id, { ...a, record: trusted(ArtifactRecord, { ...a.record, active: false }) })
        }
      }
    }
    /** Stores a traversal state; the first revisit moves the store to `visits-v1`. */
    const putState = (pipelineId: string, state: Traversal.VisitState) => {
      traversals.set(pipelineId, state)
      if (level === BASE_LEVEL && needsVisits(state)) level = VISITS_LEVEL
    }
    /**
     * The traversal part of a checkpoint, after the version check: the unit's rows are written
     * first (by the caller), then the entry payload, the ledger row, the invalidation, the final
     * mark and the state.
     */
    const applyTraversal = (pipelineId: string, t: TraversalWrite, entryPlaced: PlacedArtifact | undefined) => {
      if (t.entry !== undefined && entryPlaced !== undefined) insertArtifact(t.entry, entryPlaced)
      if (t.handoff !== undefined) ledger.push(trusted(HandoffRecord, { ...t.handoff, handoffId: nextHandoffId++ }))
      if (t.invalidateFrom !== undefined) invalidate(pipelineId, t.invalidateFrom, t.state.counters.length)
      if (t.final !== undefined) {
        const at = Traversal.parseAddress(t.final)
        const a = at === undefined ? undefined : latestAt(pipelineId, at.seq, at.visit)
        if (a !== undefined) setFinal(a)
      }
      putState(pipelineId, t.state)
    }
    const patch = (id: string, p: Parameters<typeof applyPatch>[1]) => {
      const row = pipelines.get(id)
      if (row !== undefined) pipelines.set(id, applyPatch(row, p))
    }

    const applyOp = (op: StoreWrite) => {
      switch (op._tag) {
        case "Admit":
          for (const p of op.pipelines) {
            // a re-admission without a repeat index or member fields keeps the known ones (as
            // SqliteStore's upsert does)
            const known = pipelines.get(p.pipelineId)
            const repeat = p.repeat ?? known?.repeat ?? null
            const suiteId = p.suiteId ?? known?.suiteId ?? null
            const experimentId = p.experimentId ?? known?.experimentId ?? null
            const localKey = p.localKey ?? known?.localKey ?? null
            pipelines.set(
              p.pipelineId,
              p instanceof PipelineRecord && p.repeat === repeat && p.suiteId === suiteId &&
                p.experimentId === experimentId && p.localKey === localKey
                ? p
                : trusted(PipelineRecord, { ...p, repeat, suiteId, experimentId, localKey })
            )
          }
          for (const [a, placed] of op.seeds) insertArtifact(a, placed)
          for (const t of op.traversals) putState(t.pipelineId, t.state)
          return
        case "Checkpoint": {
          const u = op.unit
          if (u.artifact !== undefined && op.placed !== undefined) insertArtifact(u.artifact, op.placed)
          if (u.task !== undefined) putTask(asTask(u.task))
          for (const a of u.attempts ?? []) insertAttempt(a)
          for (const e of u.events ?? []) insertEvent(e)
          if (u.traversal?.handoffEvent !== undefined) {
            const e = handoffEventOf(u.traversal)
            if (e !== undefined) insertEvent(e)
          }
          if (u.pipeline !== undefined) patch(u.pipelineId, u.pipeline)
          if (u.traversal !== undefined) applyTraversal(u.pipelineId, u.traversal, op.entryPlaced)
          return
        }
        case "PutTask":
          putTask(asTask(op.task))
          return
        case "Patch":
          return patch(op.pipelineId, op.patch)
        case "Settle":
          return patch(op.pipelineId, settleToPatch(op.settle))
        case "MarkFinal": {
          const a = latestAt(op.pipelineId, op.seq)
          if (a !== undefined) setFinal(a)
          return
        }
      }
    }

    const loaded = (a: StoredArtifact): Effect.Effect<Option.Option<LoadedArtifact>, StoreUnavailable> =>
      Effect.map(loadPayload(a.record.storage, a.payload, a.record.blobRef, backend), (payload) =>
        Option.some({
          artifact: a.record.available === (payload !== undefined)
            ? a.record
            : trusted(ArtifactRecord, { ...a.record, available: payload !== undefined }),
          payload
        }))

    const withAvailability = (a: StoredArtifact): Effect.Effect<ArtifactRecord, StoreUnavailable> =>
      a.record.storage === "blob" && a.record.blobRef !== null
        ? Effect.map(
          backend.exists(a.record.blobRef),
          (ok) => ok === a.record.available ? a.record : trusted(ArtifactRecord, { ...a.record, available: ok })
        )
        : Effect.succeed(a.record)

    const sortedArtifacts = (pipelineId: string) =>
      (artifactsByPipeline.get(pipelineId) ?? [])
        .map((id) => artifacts.get(id))
        .filter((a): a is StoredArtifact => a !== undefined)
        .sort((x, y) => x.record.seq - y.record.seq || x.record.artifactId - y.record.artifactId)

    /**
     * The version check of the traversal writes of a batch, before anything is applied: a
     * refused checkpoint is skipped whole. Writes of one pipeline in one batch chain (each
     * expects the version the previous one wrote).
     */
    const checkVersions = (ops: ReadonlyArray<StoreWrite>) => {
      let refused: Array<readonly [number, StoreUnavailable]> | undefined
      let seen: Map<string, number | null> | undefined
      for (let i = 0; i < ops.length; i++) {
        const op = ops[i]!
        if (op._tag === "Admit" && op.traversals.length > 0) {
          seen ??= new Map()
          for (const t of op.traversals) seen.set(t.pipelineId, t.state.version)
        }
        if (op._tag !== "Checkpoint" || op.unit.traversal === undefined) continue
        seen ??= new Map()
        const pid = op.unit.pipelineId
        const actual = seen.has(pid) ? seen.get(pid)! : (traversals.get(pid)?.version ?? null)
        if (actual !== op.unit.traversal.expectedVersion) {
          ;(refused ??= []).push([i, conflict(pid, op.unit.traversal.expectedVersion, actual)])
        } else {
          seen.set(pid, op.unit.traversal.state.version)
        }
      }
      return refused
    }

    const driver: StoreDriver = {
      kind: "memory",
      get featureLevel() {
        return level
      },
      readOnlyError: undefined,
      // one instance may be shared by several runners of the process
      exclusiveWriter: false,
      // one identity per instance (what the cluster engine keys a pipeline's workflow with)
      storeId: Effect.succeed(storeId),
      // one view: no other fiber's write lands until `reads` end
      consistentReads: (reads) =>
        Effect.acquireUseRelease(
          Effect.sync(() => {
            views++
            viewsEnded.unsafeClose()
          }),
          () => Effect.locally(reads, viewing, true),
          () =>
            Effect.sync(() => {
              if (--views === 0) viewsEnded.unsafeOpen()
            })
        ),
      commit: (ops) =>
        tx(() => {
          const refused = checkVersions(ops)
          if (refused === undefined) return ops.forEach(applyOp)
          ops.forEach((op, i) => {
            if (!refused.some((r) => r[0] === i)) applyOp(op)
          })
          return refused
        }),
      traversal: {
        visitState: (pipelineId) => Effect.sync(() => Option.fromNullable(traversals.get(pipelineId))),
        handoffs: (o) =>
          Effect.sync(() =>
            newest(
              ledger.filter((h) =>
                (o.pipelineId === undefined || h.pipelineId === o.pipelineId) &&
                (o.runId === undefined || h.runId === o.runId)
              ),
              o.limit
            )
          ),
        getArtifactById: (address) =>
          Effect.suspend(() => {
            const at = Traversal.parseAddress(address)
            const a = at === undefined ? undefined : latestAt(at.pipelineId, at.seq, at.visit)
            return a === undefined ? Effect.succeed(Option.none()) : loaded(a)
          })
      },
      writeFacts: (as, es) =>
        tx(() => {
          as.forEach(insertAttempt)
          es.forEach(insertEvent)
        }),

      openRun: (run) =>
        tx(() => {
          const record = trusted(RunRecord, {
            runId: run.runId,
            label: run.label ?? null,
            status: "running",
            config: run.config ?? null,
            startedAt: run.startedAt,
            heartbeatAt: run.startedAt,
            endedAt: null,
            stopReason: null,
            notes: run.notes ?? null,
            meta: { ...(run.meta ?? {}) }
          })
          runs.set(run.runId, record)
          return record
        }),
      heartbeat: (runId, nowMs) =>
        tx(() => {
          const r = runs.get(runId)
          if (r !== undefined) runs.set(runId, trusted(RunRecord, { ...r, heartbeatAt: nowMs }))
        }),
      finishRun: (runId, finish) =>
        tx(() => {
          const r = runs.get(runId)
          if (r !== undefined) {
            runs.set(
              runId,
              trusted(RunRecord, {
                ...r,
                status: finish.status,
                endedAt: finish.endedAt,
                stopReason: finish.stopReason ?? null
              })
            )
          }
        }),
      getRun: (runId) => Effect.sync(() => Option.fromNullable(runs.get(runId))),
      latestRun: Effect.sync(() => {
        let best: RunRecord | undefined
        for (const r of runs.values()) if (best === undefined || r.startedAt >= best.startedAt) best = r
        return Option.fromNullable(best)
      }),
      listRuns: Effect.sync(() => Array.from(runs.values()).sort((a, b) => a.startedAt - b.startedAt)),
      interruptStale: (staleAfterMs, nowMs) =>
        tx(() => {
          const out: Array<RunRecord> = []
          for (const r of runs.values()) {
            if (r.status === "running" && r.heartbeatAt < nowMs - staleAfterMs) {
              const next = trusted(RunRecord, { ...r, status: "interrupted", endedAt: nowMs, stopReason: "stale" })
              runs.set(r.runId, next)
              out.push(next)
            }
          }
          return out
        }),

      getPipelines: (ids) =>
        Effect.sync(() => {
          const out = new Map<PipelineId, PipelineRecord>()
          for (const id of ids) {
            const p = pipelines.get(id)
            if (p !== undefined) out.set(id, p)
          }
          return out
        }),
      getPipeline: (id) => Effect.sync(() => Option.fromNullable(pipelines.get(id))),
      pipelineStates: (ids, among) =>
        Effect.sync(() => {
          const out = new Map<PipelineId, PipelineStateAndRun>()
          for (const id of ids) {
            const p = pipelines.get(id)
            if (p !== undefined && (among === undefined || among.includes(p.state))) out.set(id, { state: p.state, runId: p.runId })
          }
          return out
        }),

      takenPipelines: (runId) =>
        Effect.sync(() => {
          const ran = new Set<PipelineId>()
          const interrupted = new Set<PipelineId>()
          for (const t of tasks.values()) if (t.runId === runId) ran.add(t.pipelineId)
          for (const a of attempts) if (a.runId === runId) ran.add(a.pipelineId)
          for (const e of events) {
            if (e.pipelineId === null) continue
            if (e.runId === runId && e.kind === "pipeline.interrupted") {
              ran.add(e.pipelineId)
              interrupted.add(e.pipelineId)
            } else if (e.kind === "pipeline.abandoned" && (e.data as { readonly run?: unknown } | null)?.run === runId) {
              interrupted.add(e.pipelineId)
            }
          }
          return tallyTaken(runId, ran, interrupted, (id) => pipelines.get(id)?.runId)
        }),

      putArtifact: (a, placed) => tx(() => insertArtifact(a, placed)),
      getArtifact: (pipelineId, seq) =>
        Effect.suspend(() => {
          const a = latestAt(pipelineId, seq)
          return a === undefined ? Effect.succeed(Option.none()) : loaded(a)
        }),
      listArtifacts: (pipelineId) => Effect.forEach(sortedArtifacts(pipelineId), withAvailability),

      reportMetric: (m) =>
        tx(() => {
          metrics.set(
            JSON.stringify([m.runId, m.pipelineId, m.name]),
            trusted(MetricRecord, {
              runId: m.runId,
              pipelineId: m.pipelineId,
              name: m.name,
              value: m.value,
              label: m.label,
              display: m.display,
              updatedAt: m.updatedAt
            })
          )
        }),
      metrics: (f) =>
        Effect.sync(() =>
          Array.from(metrics.values())
            .filter((m) => m.runId === f.runId && (f.pipelineId === undefined || m.pipelineId === f.pipelineId))
            .sort((a, b) =>
              (a.pipelineId ?? "").localeCompare(b.pipelineId ?? "") || a.name.localeCompare(b.name)
            )
        ),
      putResource: (r) =>
        tx(() => {
          resources.set(
            JSON.stringify([r.pool, r.resourceId]),
            trusted(ResourceRecord, {
              pool: r.pool,
              resourceId: r.resourceId,
              kind: r.kind,
              spec: r.spec,
              health: r.health,
              updatedAt: r.updatedAt
            })
          )
        }),
      resources: Effect.sync(() =>
        Array.from(resources.values()).sort((a, b) =>
          a.pool.localeCompare(b.pool) || a.resourceId.localeCompare(b.resourceId)
        )
      ),

      stats: (runId) =>
          Effect.sync((): StoreStats => {
            const byState: Record<PipelineState, number> = {
              pending: 0,
              running: 0,
              succeeded: 0,
              failed: 0,
              interrupted: 0
            }
            const durations: Array<number> = []
            let n = 0
            for (const p of pipelines.values()) {
              if (runId !== undefined && p.runId !== runId) continue
              n++
              byState[p.state]++
              if (isTerminalPipelineState(p.state) && p.startedAt !== null && p.endedAt !== null) {
                durations.push(p.endedAt - p.startedAt)
              }
            }
            durations.sort((a, b) => a - b)
            let nTasks = 0
            for (const t of tasks.values()) if (runId === undefined || t.runId === runId) nTasks++
            let nAttempts = 0
            let retries = 0
            const fold = accountingFold()
            // the call cache's figures from the same rows (what the SQL stores aggregate), so a
            // report over this store streams no attempt
            let cache = emptyCacheStats
            for (const a of attempts) {
              if (runId !== undefined && a.runId !== runId) continue
              nAttempts++
              if (isRetryDecision(a.decision)) retries++
              fold.add(a)
              cache = addCacheAttempt(cache, a.outcome, a.decision)
            }
            let nEvents = 0
            for (const e of events) if (runId === undefined || e.runId === runId) nEvents++
            return {
              pipelines: n,
              byState,
              tasks: nTasks,
              attemptsTotal: nAttempts,
              retries,
              events: nEvents,
              handoffsTotal: runId === undefined ? ledger.length : ledger.filter((h) => h.runId === runId).length,
              handoffsBudgeted: ledger.filter((h) => h.toSeq !== null && (runId === undefined || h.runId === runId)).length,
              latencyMs: latencyOf(durations),
              resources: Array.from(resources.values()),
              accounting: fold.total(),
              cache
            }
          }),
      succeededPipelines: Effect.sync(() => {
        const ids: Array<string> = []
        const keyed: Array<readonly [string, string, string]> = []
        for (const p of pipelines.values()) {
          if (p.state !== "succeeded") continue
          ids.push(p.pipelineId)
          if (p.key !== null) keyed.push([p.pipelineId, p.specDigest, p.seedDigest])
        }
        return succeededIndexOf(ids, keyed)
      }),
      resourceUsage: (runId) =>
        Effect.sync(() => {
          const acc = usageAccumulator()
          for (const a of attempts) if (runId === undefined || a.runId === runId) acc.add(a)
          return acc.result()
        }),
      pipelineAccounting: (o = {}) =>
        Effect.sync(() => {
          const fold = accountingFold()
          for (const a of attempts) if (o.runId === undefined || a.runId === o.runId) fold.add(a)
          return fold.pipelines(o)
        }),
      errors: (o) =>
        Effect.sync(() => {
          const limit = o.limit
          const rows: Array<ErrorRow> = Array.from(pipelines.values())
            .filter((p) => p.state === "failed" && (o.runId === undefined || p.runId === o.runId))
            .sort((a, b) => b.updatedAt - a.updatedAt || (a.pipelineId < b.pipelineId ? -1 : 1))
            .map(errorRowOf)
          return limit === undefined ? rows : rows.slice(0, limit)
        }),
      events: (o, limit) =>
        Effect.sync(() => {
          const all = events.filter(matchEvent(o))
          return limit === undefined ? all : all.slice(Math.max(0, all.length - limit))
        }),
      countEvents: (f = {}) => Effect.sync(() => events.filter(matchEvent(f)).length),
      pipelinesBySpec: Effect.sync(() => {
        const counts = new Map<string, number>()
        for (const p of pipelines.values()) counts.set(p.specDigest, (counts.get(p.specDigest) ?? 0) + 1)
        return Array.from(counts, ([specDigest, n]): SpecCount => ({ specDigest, pipelines: n }))
          .sort((a, b) => b.pipelines - a.pipelines || (a.specDigest < b.specDigest ? -1 : a.specDigest > b.specDigest ? 1 : 0))
      }),

      pipelinesPage: (o) =>
        Effect.sync((): PipelinesPage => {
          const limit = o.limit
          const after = o.after
          // one scan, then a sort of the rows after the cursor only (O(n) per page: the memory
          // store has no ordered index)
          const rest = Array.from(pipelines.values()).filter((p) =>
            (o.runId === undefined || p.runId === o.runId) && (o.state === undefined || p.state === o.state) &&
            (after === undefined || p.createdAt > after.createdAt ||
              (p.createdAt === after.createdAt && p.pipelineId > after.pipelineId))
          ).sort(byCreated)
          const page = rest.slice(0, limit)
          const last = page[page.length - 1]
          return {
            pipelines: page,
            next: rest.length > limit && last !== undefined ? { createdAt: last.createdAt, pipelineId: last.pipelineId } : null
          }
        }),
      completions: (o) =>
        Effect.sync(() => {
          const bucketMs = o.bucketMs
          const origin = Math.trunc(o.since ?? 0)
          const counts = new Map<number, number>()
          for (const p of pipelines.values()) {
            if (o.runId !== undefined && p.runId !== o.runId) continue
            if (!isTerminalPipelineState(p.state) || p.endedAt === null) continue
            if (o.since !== undefined && p.endedAt < o.since) continue
            const b = Math.floor((p.endedAt - origin) / bucketMs)
            counts.set(b, (counts.get(b) ?? 0) + 1)
          }
          return Array.from(counts.entries())
            .sort((a, b) => a[0] - b[0])
            .map(([b, count]): CompletionBucket => ({ startMs: origin + b * bucketMs, count }))
        }),
      loadBundles: (ids, o) =>
        Effect.gen(function*() {
          const out = new Map<PipelineId, PipelineBundle>()
          const wantedIds = new Set(ids)
          const tasksOf = new Map<string, Array<TaskRecord>>()
          if (o.tasks !== false) {
            for (const t of tasks.values()) {
              if (!wantedIds.has(t.pipelineId)) continue
              const list = tasksOf.get(t.pipelineId)
              if (list === undefined) tasksOf.set(t.pipelineId, [t])
              else list.push(t)
            }
          }
          const budget = o.payloadBytes === undefined || o.payloadBytes === Infinity
            ? Infinity
            : Number.isNaN(o.payloadBytes) ? 0 : Math.max(0, o.payloadBytes)
          /** Stored bytes of the wanted, available payloads met so far (ids in the order given). */
          let spent = 0
          for (const id of ids) {
            if (out.has(id)) continue
            const loaded: Array<LoadedArtifact> = []
            for (const a of sortedArtifacts(id)) {
              if (o.artifacts === "final" && !a.record.isFinal) continue
              let wanted = o.payloads === "all" || (o.payloads === "final" && a.record.isFinal)
              if (wanted && a.record.available) {
                const before = spent
                spent += a.record.size
                wanted = spent <= budget || before === 0
              }
              if (!wanted) {
                loaded.push({ artifact: yield* withAvailability(a), payload: undefined })
                continue
              }
              const payload = yield* loadPayload(a.record.storage, a.payload, a.record.blobRef, backend)
              loaded.push({
                artifact: a.record.available === (payload !== undefined)
                  ? a.record
                  : trusted(ArtifactRecord, { ...a.record, available: payload !== undefined }),
                payload
              })
            }
            out.set(id, { pipelineId: id, tasks: (tasksOf.get(id) ?? []).sort(byTaskOrder), artifacts: loaded })
          }
          return out
        }),

      streamPipelines: (o) =>
        pageStream(() =>
          Array.from(pipelines.values())
            .filter((p) => (o.runId === undefined || p.runId === o.runId) && (o.state === undefined || p.state === o.state))
            .sort(byCreated)
        ),
      streamTasks: (o) =>
        pageStream(() =>
          Array.from(tasks.values())
            .filter((t) => (o.pipelineId === undefined || t.pipelineId === o.pipelineId) && (o.runId === undefined || t.runId === o.runId))
            .sort(byTaskOrder)
        ),
      streamAttempts: (o) =>
        pageStream(() =>
          attempts.filter((a) =>
            (o.pipelineId === undefined || a.pipelineId === o.pipelineId) && (o.runId === undefined || a.runId === o.runId)
          )
        ),
      streamEvents: (o) => pageStream(() => events.filter(matchEvent(o))),
      streamArtifacts: (o) => Stream.mapEffect(pageStream(() => sortedArtifacts(o.pipelineId)), withAvailability)
    }
    return driver
  })

/**
 * Builds a memory store in the current scope: the memory driver behind the store front
 * (`Store.makeWith`), using the {@link ArtifactBackend} in context. Fails with `ConfigError` on
 * invalid options.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: MemoryStoreOptions = {}): Effect.Effect<StoreService, ConfigError, ArtifactBackend | Scope.Scope> =>
  Effect.flatMap(makeDriver({ faults: options.faults }), (driver) => makeWith(driver, options))


/**
 * The memory store as a layer, using the {@link ArtifactBackend} in context.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWith = (
  options: MemoryStoreOptions = {}
): Layer.Layer<Store, ConfigError, ArtifactBackend> => Layer.scoped(Store, make(options))

/**
 * The memory store with the inline backend.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: MemoryStoreOptions = {}): Layer.Layer<Store, ConfigError> =>
  layerWith(options).pipe(Layer.provide(layerInline))
