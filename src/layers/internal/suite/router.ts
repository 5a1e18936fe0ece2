/**
 * The `Store` of a `byExperiment` suite root: an ordinary `StoreService` whose writes go to
 * the database that owns them, so the runner never knows about layouts.
 *
 * - Per-pipeline writes (admission, checkpoints, task rows, patches, settles, final marks,
 *   artifacts, attempts, events and metrics of a pipeline) go to the member database named by
 *   the pipeline id's member prefix (`Suite.memberDigestOf`); a pipeline of no member, or of a
 *   member this run did not select, is refused (`StoreUnavailable`) before anything is written.
 * - Run records (`openRun`, `heartbeat`, `finishRun`, `interruptStale`) go to the catalog and
 *   to every selected member database (a heartbeat only to the open ones; a member opened later
 *   in the run gets the run row then).
 * - Events without a pipeline (pool, resource and run events), run-scope metrics and resources
 *   go to the catalog (`suite.db`).
 * - Reads are the merged cumulative view of every member (see `view.ts`).
 *
 * @since 0.5.0
 */
import { Effect, Option } from "effect"
import { StoreUnavailable } from "../../../domain/Errors.js"
import type { PipelineId } from "../../../domain/Ids.js"
import type { RunRecord } from "../../../domain/Records.js"
import { memberDigestOf } from "../../../domain/Suite.js"
import type { TaskStore } from "../../../domain/TaskStore.js"
import type { InitialTraversal, NewArtifact, NewRun, PipelineFields, StoreService, SucceededIndex } from "../../../services/Store.js"
import type { Cache } from "./members.js"
import type { Db } from "./view.js"

/**
 * What the router needs: the suite id, the catalog database, the member cache, the member of a
 * member digest, the selected members (in id order), the merged read view, and where to keep
 * the open run.
 *
 * @since 0.5.0
 * @category models
 */
export interface RouterParts {
  readonly suiteId: string
  readonly catalog: Db
  readonly cache: Cache
  readonly memberOfDigest: ReadonlyMap<string, string>
  readonly selected: ReadonlyArray<string>
  readonly view: TaskStore
  readonly setActiveRun: (run: NewRun | undefined) => void
}

/**
 * Builds the routing store (see the module docs).
 *
 * @since 0.5.0
 * @category constructors
 */
export const makeRouter = (p: RouterParts): StoreService => {
  const catalog = p.catalog.service
  const selected = new Set(p.selected)
  /** The member of a pipeline id, or the error that refuses writing it. */
  const memberOf = (pipelineId: string): string | StoreUnavailable => {
    const digest = memberDigestOf(pipelineId)
    const id = digest === undefined ? undefined : p.memberOfDigest.get(digest)
    if (id === undefined) {
      return new StoreUnavailable({
        message: `suite "${p.suiteId}": pipeline ${pipelineId} belongs to no member of the suite (not a member pipeline id)`
      })
    }
    if (!selected.has(id)) {
      return new StoreUnavailable({
        message: `suite "${p.suiteId}": pipeline ${pipelineId} belongs to member "${id}", which this run did not select; its database is not written`
      })
    }
    return id
  }
  const onMember = <A>(pipelineId: string, f: (s: StoreService) => Effect.Effect<A, StoreUnavailable>) =>
    Effect.suspend(() => {
      const id = memberOf(pipelineId)
      return typeof id === "string"
        ? p.cache.use(id, (db) => f(db.service), undefined as A)
        : Effect.fail(id)
    })
  // the open members first: a sweep over more members than the cache holds then reopens only
  // the ones that were closed (open last, it would evict each open one before reaching it)
  const eachSelected = <A>(f: (s: StoreService) => Effect.Effect<A, StoreUnavailable>) =>
    Effect.suspend(() => {
      const open = new Set(p.cache.open().map((e) => e.id))
      const order = [...p.selected.filter((id) => open.has(id)), ...p.selected.filter((id) => !open.has(id))]
      return Effect.forEach(order, (id) => p.cache.use(id, (db) => Effect.map(f(db.service), Option.some), Option.none<A>()))
    }).pipe(Effect.map((rs) => rs.flatMap(Option.toArray)))
  // the open members when it runs (not when it is built: `flush` is a value)
  const eachOpenWritable = <A>(f: (s: StoreService) => Effect.Effect<A, StoreUnavailable>) =>
    Effect.suspend(() =>
      Effect.forEach(
        p.cache.open().filter((e) => e.writable).map((e) => e.id),
        (id) => p.cache.use(id, (db) => f(db.service), undefined),
        { discard: true }
      )
    )

  const group = <T>(items: ReadonlyArray<T>, idOf: (t: T) => string, groups: Map<string, Array<T>>) => {
    for (const t of items) {
      const id = memberOf(idOf(t))
      if (typeof id !== "string") return id
      const list = groups.get(id) ?? []
      list.push(t)
      groups.set(id, list)
    }
    return undefined
  }

  const admit = (
    ps: ReadonlyArray<PipelineFields>,
    seeds: ReadonlyArray<NewArtifact> = [],
    traversals: ReadonlyArray<InitialTraversal> = []
  ) =>
    Effect.suspend(() => {
      const byMember = new Map<string, { ps: Array<PipelineFields>; seeds: Array<NewArtifact>; trs: Array<InitialTraversal> }>()
      const slot = (id: string) => {
        let g = byMember.get(id)
        if (g === undefined) byMember.set(id, g = { ps: [], seeds: [], trs: [] })
        return g
      }
      // every id is routed before anything is written
      const gp = new Map<string, Array<PipelineFields>>()
      const gs = new Map<string, Array<NewArtifact>>()
      const gt = new Map<string, Array<InitialTraversal>>()
      const refused = group(ps, (x) => x.pipelineId, gp) ?? group(seeds, (x) => x.pipelineId, gs) ??
        group(traversals, (x) => x.pipelineId, gt)
      if (refused !== undefined) return Effect.fail(refused)
      for (const [id, list] of gp) slot(id).ps.push(...list)
      for (const [id, list] of gs) slot(id).seeds.push(...list)
      for (const [id, list] of gt) slot(id).trs.push(...list)
      // one member (the runner admits pipeline by pipeline): no fibers forked and joined
      if (byMember.size === 1) {
        const [id, g] = byMember.entries().next().value!
        return p.cache.use(id, (db) => db.service.admit(g.ps, g.seeds, g.trs), undefined)
      }
      return Effect.forEach(
        byMember,
        ([id, g]) => p.cache.use(id, (db) => db.service.admit(g.ps, g.seeds, g.trs), undefined),
        { concurrency: "unbounded", discard: true }
      )
    })

  const service: StoreService = {
    ...p.view,
    kind: "suite",
    // the highest level of any member (the catalog holds no pipelines)
    get featureLevel() {
      return p.view.featureLevel
    },
    readOnly: catalog.readOnly,
    journal: catalog.journal,
    exclusiveWriter: catalog.exclusiveWriter,

    openRun: (run) =>
      Effect.gen(function*() {
        const record: RunRecord = yield* catalog.openRun(run)
        p.setActiveRun(run)
        yield* eachSelected((s) => Effect.flatMap(s.getRun(run.runId), Option.match({ onNone: () => Effect.asVoid(s.openRun(run)), onSome: () => Effect.void })))
        return record
      }),
    heartbeat: (runId, nowMs) =>
      Effect.zipRight(catalog.heartbeat(runId, nowMs), eachOpenWritable((s) => s.heartbeat(runId, nowMs))),
    finishRun: (runId, finish) =>
      Effect.gen(function*() {
        yield* eachSelected((s) => s.finishRun(runId, finish))
        yield* catalog.finishRun(runId, finish)
        p.setActiveRun(undefined)
      }),
    interruptStale: (staleAfterMs, nowMs) =>
      Effect.gen(function*() {
        const fromCatalog = yield* catalog.interruptStale(staleAfterMs, nowMs)
        yield* eachSelected((s) => s.interruptStale(staleAfterMs, nowMs))
        return fromCatalog
      }),

    admit,
    checkpoint: (unit) => onMember(unit.pipelineId, (s) => s.checkpoint(unit)),
    putTask: (task) => onMember(task.pipelineId, (s) => s.putTask(task)),
    updatePipeline: (pipelineId, patch) => onMember(pipelineId, (s) => s.updatePipeline(pipelineId, patch)),
    settlePipeline: (pipelineId, settle) => onMember(pipelineId, (s) => s.settlePipeline(pipelineId, settle)),
    markFinal: (pipelineId: PipelineId, seq) => onMember(pipelineId, (s) => s.markFinal(pipelineId, seq)),
    putArtifact: (a) => onMember(a.pipelineId, (s) => s.putArtifact(a)),

    recordAttempt: (a) => onMember(a.pipelineId, (s) => s.recordAttempt(a)),
    emitEvent: (e) => (e.pipelineId === null || e.pipelineId === undefined ? catalog.emitEvent(e) : onMember(e.pipelineId, (s) => s.emitEvent(e))),
    flush: Effect.zipRight(catalog.flush, eachOpenWritable((s) => s.flush)),
    pending: Effect.gen(function*() {
      let n = yield* catalog.pending
      for (const e of p.cache.open()) if (e.writable) n += yield* e.db.service.pending
      return n
    }),

    // the selected members' indexes (the only pipelines this handle admits), each asked about
    // its own pipelines: a member whose store has no index answers false, which sends its
    // specs the reading path
    succeededPipelines: Effect.gen(function*() {
      const byMember = new Map<string, SucceededIndex>()
      let size = 0
      for (const id of p.selected) {
        const index = yield* p.cache.use(
          id,
          (db) => db.service.succeededPipelines ?? Effect.succeed<SucceededIndex | undefined>(undefined),
          undefined
        )
        if (index !== undefined && index.size > 0) {
          byMember.set(id, index)
          size += index.size
        }
      }
      return {
        size,
        has: (pipelineId, specDigest, seedDigest, contentAddressed) => {
          const member = memberOf(pipelineId)
          return typeof member === "string" &&
            (byMember.get(member)?.has(pipelineId, specDigest, seedDigest, contentAddressed) ?? false)
        }
      }
    }),
    reportMetric: (m) => (m.pipelineId === null ? catalog.reportMetric(m) : onMember(m.pipelineId, (s) => s.reportMetric(m))),
    putResource: (r) => catalog.putResource(r)
  }
  return service
}
