/**
 * The read views of a suite root (`assay report|watch|serve|export ROOT` on a directory holding
 * `manifest.json`): the cumulative suite view, one member's view, and one invocation's durable
 * outcomes, built over the read side of the suite store (`SuiteCatalog`: members, per-run
 * membership facts, and a read view of one member or of the whole suite).
 *
 * - **Cumulative** (the default): every pipeline as its last run left it, so successes skipped
 *   by later resumes are counted (as the runs that did them left them: no attempts of the
 *   later runs are attributed to them);
 * - **one member** (`experiment`): the member's own view (`SuiteCatalog.view(ID)`);
 * - **one run** (`runId`): the durable outcome of every pipeline that run executed, derived from
 *   the task rows it committed (they carry their run, and are written in the same transaction
 *   as the checkpoint), so a pipeline that failed in run A stays failed in A's view after run B
 *   re-ran it successfully (see {@link runOutcomes}).
 *
 * Shared pools (any pool not named `experiment:ID:NAME`) are shown as shared and never
 * attributed to one member; a member's private pools (`experiment:ID:NAME`) belong to it.
 * Nothing here writes.
 *
 * @since 0.3.0
 */
import { Chunk, Clock, Effect, Option, Stream } from "effect"
import * as nodePath from "node:path"
import { ConfigError, type StoreUnavailable } from "../../domain/Errors.js"
import type { PipelineId, RunId } from "../../domain/Ids.js"
import type { MetricRecord, PipelineRecord, PipelineState, RunRecord, TaskRecord } from "../../domain/Records.js"
import { idKey } from "../../domain/Suite.js"
import type { ErrorRow, ReadError, TaskStore } from "../../domain/TaskStore.js"
import * as Export from "./export.js"
import { makeDirectories } from "./directories.js"
import type { MemberRecord, MembershipRecord, SupersededRecord } from "../SuiteCatalog.js"
import * as Monitor from "./monitor.js"
import { FAILURES_REACHED_METRIC, parseMemberMetric } from "./suite/metric.js"
import * as Report from "./report.js"
import { SKIPPED_METRIC } from "./runner/run.js"

// ---------------------------------------------------------------------------------------------
// The suite read port (the read half of `SuiteCatalog`)
// ---------------------------------------------------------------------------------------------

/**
 * One member of a suite as the catalog records it (`SuiteCatalog.MemberRecord`).
 *
 * @since 0.3.0
 * @category models
 */
export type SuiteMember = MemberRecord

/**
 * The source facts of one member in one run (`SuiteCatalog.MembershipRecord`): selected,
 * admitted, source exhausted, source error, limit reached.
 *
 * @since 0.3.0
 * @category models
 */
export type SuiteMembership = MembershipRecord

/**
 * What the views read of a suite root: the structural read half of `SuiteCatalog` (so the
 * catalog itself, or a test fake, fits).
 *
 * - `view(ID)`: the read store of one member; `view()`: the merged cumulative suite store.
 *
 * @since 0.3.0
 * @category models
 */
export interface SuiteReads {
  readonly suiteId: string
  readonly layout: "combined" | "byExperiment"
  /** The absolute output root. */
  readonly root: string
  readonly members: Effect.Effect<ReadonlyArray<SuiteMember>, StoreUnavailable>
  readonly membership: (runId?: RunId) => Effect.Effect<ReadonlyArray<SuiteMembership>, StoreUnavailable>
  readonly view: (experimentId?: string) => Effect.Effect<TaskStore, StoreUnavailable | ConfigError>
  /**
   * The members whose database is missing (recorded as created, file gone), each with the
   * file; they read as empty. Absent: none (since 0.6.0).
   */
  readonly missingDatabases?: ReadonlyArray<{ readonly experimentId: string; readonly file: string }> | undefined
  /**
   * The superseded pipelines of one member or of all (history of accepted input-row edits,
   * left out of the cumulative views). Absent: none (since 0.7.0).
   */
  readonly superseded?: ((experimentId?: string) => Effect.Effect<ReadonlyArray<SupersededRecord>, StoreUnavailable | ConfigError>) | undefined
}

/**
 * The members of a suite in id order (the order every suite view and split export uses).
 *
 * @since 0.3.0
 * @category members
 */
export const membersInOrder = (suite: SuiteReads): Effect.Effect<ReadonlyArray<SuiteMember>, StoreUnavailable> =>
  Effect.map(suite.members, (ms) => [...ms].sort((a, b) => (a.experimentId < b.experimentId ? -1 : a.experimentId > b.experimentId ? 1 : 0)))

/**
 * The member `experimentId` names: member ids are unique ignoring case (they name
 * directories), so `FULL` resolves to the member `full`; use the returned record's
 * `experimentId` (the canonical id) from then on. Fails with `ConfigError` naming
 * `--experiment` (and the members there are) when no member has that id in any case.
 *
 * @since 0.3.0
 * @category members
 */
export const checkMember = (suite: SuiteReads, experimentId: string): Effect.Effect<SuiteMember, StoreUnavailable | ConfigError> =>
  Effect.flatMap(membersInOrder(suite), (ms) => {
    const m = ms.find((x) => x.experimentId === experimentId) ??
      ms.find((x) => idKey(x.experimentId) === idKey(experimentId))
    if (m !== undefined) return Effect.succeed(m)
    const known = ms.map((x) => x.experimentId).join(", ")
    const message = `suite ${suite.suiteId} has no member "${experimentId}" (members: ${known === "" ? "none" : known})`
    return Effect.fail(new ConfigError({ message, issues: [{ path: "--experiment", message }] }))
  })

/**
 * The canonical id of member `experimentId` ({@link checkMember}), `undefined` for none (the
 * whole suite).
 *
 * @since 0.5.0
 * @category members
 */
export const canonicalMember = (
  suite: SuiteReads,
  experimentId: string | undefined
): Effect.Effect<string | undefined, StoreUnavailable | ConfigError> =>
  experimentId === undefined ? Effect.succeed(undefined) : Effect.map(checkMember(suite, experimentId), (m) => m.experimentId)

/**
 * Checks that `runId` is a run of the suite (of its merged store). Fails with `ConfigError`
 * naming `--run-id` otherwise.
 *
 * @since 0.3.0
 * @category members
 */
export const checkRun = (store: TaskStore, runId: RunId, where: string): Effect.Effect<void, ReadError> =>
  Effect.flatMap(store.getRun(runId), (o) =>
    Option.isSome(o)
      ? Effect.void
      : Effect.fail(new ConfigError({ message: `run ${runId} is not a run of ${where}`, issues: [{ path: "--run-id", message: `unknown run ${runId}` }] })))

/**
 * The member identity of some pipelines (`experimentId`, `localKey`), read from their stored
 * rows (one `getPipelines` read); pipelines outside a member are left out.
 *
 * @since 0.5.0
 * @category members
 */
export const memberIdentities = (
  store: TaskStore,
  ids: ReadonlyArray<string>
): Effect.Effect<ReadonlyMap<string, { readonly experimentId: string; readonly localKey: string | null }>, StoreUnavailable> =>
  ids.length === 0
    ? Effect.succeed(new Map())
    : Effect.map(store.getPipelines([...new Set(ids)] as Array<PipelineId>), (found) => {
      const out = new Map<string, { experimentId: string; localKey: string | null }>()
      for (const [id, p] of found) if (p.experimentId !== null) out.set(id, { experimentId: p.experimentId, localKey: p.localKey })
      return out
    })

/**
 * Error wire rows (`/errors`, a snapshot's `recent_errors`) with their member identity
 * (`experiment_id`, `local_key`) added, read from `store` ({@link memberIdentities}).
 *
 * @since 0.5.0
 * @category members
 */
export const errorWiresWithMember = (
  store: TaskStore,
  rows: ReadonlyArray<Monitor.ErrorWire>
): Effect.Effect<ReadonlyArray<Monitor.ErrorWire>, StoreUnavailable> =>
  Effect.map(memberIdentities(store, rows.map((e) => e.pipeline_id)), (ids) =>
    rows.map((e) => {
      const m = ids.get(e.pipeline_id)
      return m === undefined ? e : { ...e, experiment_id: m.experimentId, local_key: m.localKey }
    }))

// ---------------------------------------------------------------------------------------------
// Pools: shared or private
// ---------------------------------------------------------------------------------------------

/**
 * The member owning a private pool (`experiment:ID:NAME` → `ID`), or `null` for a shared pool
 * (any other name: bound by several members or by none, never attributed to one).
 *
 * @since 0.3.0
 * @category pools
 */
export const poolOwner = (pool: string): string | null => {
  const m = /^experiment:([^:]+):/.exec(pool)
  return m === null ? null : m[1]!
}

/**
 * Whether a pool is visible in the view of `experimentId` (`undefined`: the whole suite):
 * shared pools are always shown (as shared), private pools only in their member's view.
 *
 * @since 0.3.0
 * @category pools
 */
export const poolVisible = (pool: string, experimentId: string | undefined): boolean => {
  const owner = poolOwner(pool)
  return owner === null || experimentId === undefined || owner === experimentId
}

/**
 * The member and metric name of a member-scoped metric's stored name (`experiment:ID:NAME`, the
 * runner's `reportMetric(name, v, { experiment: ID })`, see `Suite.memberMetricName`),
 * `undefined` for any other metric.
 *
 * @since 0.3.0
 * @category pools
 */
export const memberMetricOf: (stored: string) => { readonly experimentId: string; readonly name: string } | undefined =
  parseMemberMetric

// ---------------------------------------------------------------------------------------------
// Durable outcomes of one run
// ---------------------------------------------------------------------------------------------

/**
 * The durable outcomes of one run in one store (see {@link runOutcomes}): the pipelines it
 * executed counted by the state that run left them in, and the ids of those it failed.
 *
 * @since 0.3.0
 * @category outcomes
 */
export interface RunOutcomes {
  readonly pipelines: number
  readonly byState: Readonly<Record<PipelineState, number>>
  /** Pipelines the run left failed (also those a later run then took over). */
  readonly failed: ReadonlyArray<PipelineId>
  /**
   * The failures of pipelines a later run took over, as the run's failed task rows recorded
   * them (the pipeline rows now hold the later run's outcome).
   */
  readonly takenOverErrors: ReadonlyArray<ErrorRow>
}

const emptyByState = (): Record<PipelineState, number> => ({ pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 })

/** What one run's task rows say about one pipeline. */
interface TaskFacts {
  failed: boolean
  error: TaskRecord | undefined
  unfinished: boolean
  lastSucceededSeq: number
}

/**
 * The durable outcome of every pipeline that run `runId` executed, in `store`:
 *
 * - a pipeline the run still owns: its stored state (the run settled it last), except that a
 *   pipeline still stored `running` by a run that is no longer running (`ended`: finished,
 *   interrupted, or stale, its writer gone) counts as `interrupted` (a read-side reading: an
 *   unselected member's database keeps the row as the dead run left it);
 * - a pipeline a later run took over: what the run's own task rows say (they carry their run
 *   and are committed with the checkpoints): `failed` when one of them failed, `interrupted`
 *   when one was left running or interrupted, or the last task was not reached; `succeeded`
 *   when its task rows reached the pipeline's last task.
 *
 * Pipelines the run skipped (already succeeded) are not among them: they have no task rows of
 * that run and no attempts. One pass over the run's pipelines and one over its task rows, plus
 * one `getPipelines` read per 500 pipelines taken over; memory is O(pipelines of the run).
 *
 * @since 0.3.0
 * @category outcomes
 */
export const runOutcomes = (store: TaskStore, runId: RunId, ended = false): Effect.Effect<RunOutcomes, ReadError> =>
  Effect.gen(function*() {
    const byState = emptyByState()
    const failed: Array<PipelineId> = []
    const owned = new Set<string>()
    yield* Stream.runForEach(store.streamPipelines({ runId }), (p) =>
      Effect.sync(() => {
        owned.add(p.pipelineId)
        byState[ended && p.state === "running" ? "interrupted" : p.state]++
        if (p.state === "failed") failed.push(p.pipelineId)
      }))
    const facts = new Map<PipelineId, TaskFacts>()
    yield* Stream.runForEach(store.streamTasks({ runId }), (t) =>
      Effect.sync(() => {
        if (owned.has(t.pipelineId)) return
        const f = facts.get(t.pipelineId) ?? { failed: false, error: undefined, unfinished: false, lastSucceededSeq: -1 }
        if (t.state === "failed") {
          f.failed = true
          f.error = t
        }
        else if (t.state === "running" || t.state === "interrupted") f.unfinished = true
        else if (t.state === "succeeded" || t.state === "skipped") f.lastSucceededSeq = Math.max(f.lastSucceededSeq, t.seq)
        facts.set(t.pipelineId, f)
      }))
    const ids = Array.from(facts.keys())
    const takenOverErrors: Array<ErrorRow> = []
    for (let i = 0; i < ids.length; i += 500) {
      const chunk = ids.slice(i, i + 500)
      const rows = yield* store.getPipelines(chunk)
      for (const id of chunk) {
        const f = facts.get(id)!
        const total = rows.get(id)?.nTasksTotal
        const state: PipelineState = f.failed
          ? "failed"
          : f.unfinished || total === undefined || f.lastSucceededSeq < total - 1
          ? "interrupted"
          : "succeeded"
        byState[state]++
        if (state === "failed") {
          failed.push(id)
          const p = rows.get(id)
          takenOverErrors.push({
            pipelineId: id,
            name: p?.name ?? "",
            key: p?.key ?? null,
            runId,
            failedTask: f.error?.taskName ?? null,
            errorType: f.error?.errorType ?? null,
            errorMessage: f.error?.errorMessage ?? null,
            errorClass: f.error?.errorClass ?? null,
            endedAt: f.error?.endedAt ?? null
          })
        }
      }
    }
    return { pipelines: owned.size + ids.length, byState, failed, takenOverErrors }
  })

/** Outcomes of finished runs, per store object (they no longer change, see {@link outcomesOf}). */
const finishedOutcomes = new WeakMap<TaskStore, Map<RunId, RunOutcomes>>()

/**
 * {@link runOutcomes}, remembered for a run that has ended (`finished`): its own rows and task
 * rows no longer change, and a later run taking one of its pipelines over leaves the derived
 * outcome as it was, so a dashboard refreshing a finished run's view reads it once per store.
 * `ended` (default `finished`): the run is no longer running (also a stale one), so the
 * pipelines it left `running` count as interrupted.
 *
 * @since 0.3.0
 * @category outcomes
 */
export const outcomesOf = (
  store: TaskStore,
  runId: RunId,
  finished: boolean,
  ended: boolean = finished
): Effect.Effect<RunOutcomes, ReadError> =>
  Effect.suspend(() => {
    const known = finished ? finishedOutcomes.get(store)?.get(runId) : undefined
    if (known !== undefined) return Effect.succeed(known)
    return Effect.tap(runOutcomes(store, runId, ended || finished), (o) =>
      Effect.sync(() => {
        if (!finished) return
        const byRun = finishedOutcomes.get(store) ?? new Map<RunId, RunOutcomes>()
        byRun.set(runId, o)
        finishedOutcomes.set(store, byRun)
      }))
  })

/**
 * A cumulative count by state read as the views show it: pipelines stored `running` whose run
 * is no longer running (finished, interrupted or stale per the catalog's run records, see
 * {@link runAlive}) count as `interrupted`; only those of a live run stay `running`. Nothing
 * is written: an unselected member's database keeps the rows the dead run left. One
 * `stats(runId)` read per live run, and only when some pipeline is stored `running`.
 *
 * @since 0.5.0
 * @category outcomes
 */
export const settleRunning = (
  store: TaskStore,
  byState: Readonly<Record<PipelineState, number>>,
  runs: ReadonlyArray<RunRecord>,
  nowMs: number
): Effect.Effect<Readonly<Record<PipelineState, number>>, StoreUnavailable> =>
  Effect.gen(function*() {
    if (byState.running === 0) return byState
    let live = 0
    for (const r of runs) {
      if (runAlive(r, nowMs)) live += (yield* store.stats(r.runId)).byState.running
    }
    const running = Math.min(byState.running, live)
    return { ...byState, running, interrupted: byState.interrupted + byState.running - running }
  })

// ---------------------------------------------------------------------------------------------
// The read state of a pipeline
// ---------------------------------------------------------------------------------------------

/**
 * Whether each run is still running, as of now: a predicate over run ids built from the
 * store's run records (see {@link runAlive}; an unknown run or `null` is not alive).
 *
 * @since 0.5.0
 * @category outcomes
 */
export const liveRuns = (store: TaskStore): Effect.Effect<(runId: string | null) => boolean, StoreUnavailable> =>
  Effect.gen(function*() {
    const runs = new Map((yield* store.listRuns).map((r) => [r.runId as string, r] as const))
    const now = yield* Clock.currentTimeMillis
    return (runId) => runId !== null && runAlive(runs.get(runId), now)
  })

/**
 * The state a suite view shows for a stored pipeline state (the read-side rule): a pipeline
 * stored `running` whose run is no longer running (finished, interrupted, or stale: no
 * heartbeat within its `staleAfter`) reads `interrupted`; every other state reads as stored.
 * Nothing is written (a later resume of its member takes the pipeline up).
 *
 * @since 0.5.0
 * @category outcomes
 */
export const readState = (stored: PipelineState, runId: string | null, alive: (runId: string | null) => boolean): PipelineState =>
  stored === "running" && !alive(runId) ? "interrupted" : stored

/**
 * `/pipelines` of a suite root: the page `reads` gives, each row in its read state
 * ({@link readState}: a row it changes keeps its stored state as `stored_state`), and `state`
 * filtering on the read state: `running` is the stored running rows of live runs,
 * `interrupted` the stored interrupted rows and the stored running rows of runs no longer
 * running, merged in the page order (createdAt, pipelineId). The other states are stored as
 * read. A filtered page may read several store pages to fill `limit`.
 *
 * @since 0.5.0
 * @category monitoring
 */
export const readPipelinesPage = (
  reads: Monitor.MonitorReads,
  alive: (runId: string | null) => boolean,
  o: {
    readonly runId: RunId | undefined
    readonly state?: PipelineState | undefined
    readonly after: Monitor.PipelineCursor | undefined
    readonly limit: number
  }
): Effect.Effect<Monitor.PipelinePage, ReadError> =>
  Effect.gen(function*() {
    const show = (r: Monitor.PipelineRow): Monitor.PipelineRow =>
      r.state === "running" && !alive(r.run_id) ? { ...r, state: "interrupted", stored_state: "running" } : r
    if (o.state !== "running" && o.state !== "interrupted") {
      const page = yield* reads.pipelinesPage(o)
      return { rows: page.rows.map(show), next: page.next }
    }
    if (o.limit <= 0) return { rows: [], next: null }
    /** Up to `n` stored-`stored` rows after the cursor that `keep` keeps, in page order. */
    const collect = (stored: PipelineState, keep: (r: Monitor.PipelineRow) => boolean, n: number) =>
      Effect.gen(function*() {
        const out: Array<Monitor.PipelineRow> = []
        let after = o.after
        for (;;) {
          const page = yield* reads.pipelinesPage({ runId: o.runId, state: stored, after, limit: n })
          for (const r of page.rows) if (keep(r)) out.push(r)
          if (out.length >= n || page.next === null) return out.slice(0, n)
          after = page.next
        }
      })
    const n = o.limit + 1 // one more than a page: whether there is a next one
    const rows = o.state === "running"
      ? yield* collect("running", (r) => alive(r.run_id), n)
      : [...yield* collect("interrupted", () => true, n), ...yield* collect("running", (r) => !alive(r.run_id), n)]
        .sort((a, b) => a.created_at - b.created_at || (a.pipeline_id < b.pipeline_id ? -1 : a.pipeline_id > b.pipeline_id ? 1 : 0))
        .slice(0, n)
    const shown = rows.slice(0, o.limit)
    const last = shown[shown.length - 1]
    return {
      rows: shown.map(show),
      next: rows.length > o.limit && last !== undefined ? { createdAt: last.created_at, pipelineId: last.pipeline_id as PipelineId } : null
    }
  })

/**
 * The `pipelines` and `results` rows of a suite view with their `state` in its read state
 * ({@link readState}), so an export agrees with what `report` and `serve` show and with
 * `serve`'s `?state=` filter; the other kinds pass as they are. The live runs are read once,
 * when the stream starts.
 *
 * @since 0.5.0
 * @category export
 */
export const withReadState = <E>(
  store: TaskStore,
  kind: Export.RowKind,
  rows: Stream.Stream<Export.RowItem, E>
): Stream.Stream<Export.RowItem, E | StoreUnavailable> => {
  if (kind !== "pipelines" && kind !== "results") return rows
  return Stream.unwrap(Effect.map(liveRuns(store), (alive) => {
    const read = (row: Export.Row): Export.Row => {
      const state = row["state"], runId = row["runId"]
      return state === "running" && !alive(typeof runId === "string" ? runId : null) ? { ...row, state: "interrupted" } : row
    }
    return Stream.map(rows, (item): Export.RowItem =>
      item instanceof Export.LargeRow ? new Export.LargeRow(read(item.head), item.field, item.parts) : read(item))
  }))
}

// ---------------------------------------------------------------------------------------------
// Members
// ---------------------------------------------------------------------------------------------

/**
 * The source status of a member: `exhausted` (its source ran dry), `error` (its source failed:
 * the member failed, the others went on), `limit` (a limit stopped admission; the source is not
 * known to be exhausted), `failures` (the member's own `stopAfterFailures` stopped it: its
 * source is not read to its end, or admitted pipelines were left pending; a resume continues
 * it; since 0.8.0), `running` (none of these yet, and its run is still running),
 * `interrupted` (none of these, and its run is no longer running: finished, interrupted or
 * stale; the source is not exhausted), `not_selected` (the run shown did not select the member:
 * it read nothing of its source; in the cumulative view, no run ever selected it), or
 * `unknown` (no run recorded anything of the member).
 *
 * @since 0.3.0
 * @category members
 */
export type SourceStatus =
  | "exhausted"
  | "error"
  | "limit"
  | "failures"
  | "running"
  | "interrupted"
  | "not_selected"
  | "unknown"

/**
 * The {@link SourceStatus} of a membership record (`undefined`: no run selected the member);
 * `runAlive`: whether the record's run is still running (stored as running and not stale;
 * default `true`); `failuresReached`: whether the record's run stopped the member at its own
 * `stopAfterFailures` (see {@link memberStoppedByFailures}; default `false`).
 *
 * @since 0.3.0
 * @category members
 */
export const sourceStatusOf = (m: SuiteMembership | undefined, runAlive = true, failuresReached = false): SourceStatus =>
  m === undefined
    ? "unknown"
    : !m.selected
    ? "not_selected"
    : m.sourceError !== null
    ? "error"
    : failuresReached
    ? "failures"
    : m.sourceExhausted
    ? "exhausted"
    : m.limitReached
    ? "limit"
    : runAlive
    ? "running"
    : "interrupted"

/**
 * Whether a run is still running: stored as `running` and not stale (its heartbeat is within
 * its `staleAfter`, see `Report.isStale`). A run missing from the records is not.
 *
 * @since 0.5.0
 * @category members
 */
export const runAlive = (r: RunRecord | undefined, nowMs: number): boolean =>
  r !== undefined && r.status === "running" && !Report.isStale(r, nowMs)

/**
 * How many pipelines of `experimentId` run `runId` skipped because they were already done:
 * the runner's member-scoped skip count (`experiment:ID:skipped`, written with each heartbeat
 * and at the end of the run), 0 when it recorded none. Read from the run-scope metrics of the
 * run (`runMetrics`).
 *
 * @since 0.5.0
 * @category members
 */
export const memberSkipsOf = (runMetrics: ReadonlyArray<MetricRecord>, experimentId: string): number => {
  const hit = runMetrics.find((x) => {
    const scoped = memberMetricOf(x.name)
    return scoped !== undefined && scoped.experimentId === experimentId && scoped.name === SKIPPED_METRIC
  })
  return typeof hit?.value === "number" ? hit.value : 0
}

/**
 * Whether the run whose run-scope metrics are `runMetrics` stopped member `experimentId` at
 * its own `stopAfterFailures`: the suite run records it as the member-scoped metric
 * `experiment:ID:stopped_by_failures` (since 0.8.0; runs before it recorded nothing, and read
 * as not stopped).
 *
 * @since 0.8.0
 * @category members
 */
export const memberStoppedByFailures = (runMetrics: ReadonlyArray<MetricRecord>, experimentId: string): boolean =>
  runMetrics.some((x) => {
    const scoped = memberMetricOf(x.name)
    return x.pipelineId === null && scoped !== undefined && scoped.experimentId === experimentId &&
      scoped.name === FAILURES_REACHED_METRIC
  })

/**
 * What the views print for a skip count the run did not record.
 *
 * @since 0.5.0
 * @category members
 */
export const NOT_RECORDED = "not recorded"

/** The run's own skip count (run scope; 0 when it recorded none). */
const runSkips = (store: TaskStore, runId: RunId): Effect.Effect<number, StoreUnavailable> =>
  Effect.map(store.metrics({ runId, pipelineId: null }), (ms) => {
    const v = ms.find((x) => x.name === SKIPPED_METRIC)?.value
    return typeof v === "number" ? v : 0
  })

/**
 * {@link memberSkipsOf}, telling a count the run did not record from a zero. The runner records
 * the run's skip count (`skipped`, run scope) only when it is above 0, and each member's
 * (`experiment:ID:skipped`) only since per-member counts exist. So, for member `experimentId`
 * of a run that `selected` these members:
 *
 * - its member-scoped count, when recorded;
 * - else 0 when the run recorded no skip count (it skipped nothing) or recorded some member's
 *   (per-member counts existed: this member skipped nothing);
 * - else the run's count when the member was the only one the run selected;
 * - else `null`: the run skipped pipelines before per-member counts existed, and how many were
 *   this member's is not recorded (the views say "not recorded", never a wrong 0).
 *
 * @since 0.5.0
 * @category members
 */
export const memberSkipsRecorded = (
  runMetrics: ReadonlyArray<MetricRecord>,
  experimentId: string,
  selected: ReadonlyArray<string>
): number | null => {
  const runCount = runMetrics.find((x) => x.pipelineId === null && x.name === SKIPPED_METRIC)?.value
  const perMember = runMetrics.some((x) => memberMetricOf(x.name)?.name === SKIPPED_METRIC)
  if (perMember || typeof runCount !== "number" || runCount === 0) return memberSkipsOf(runMetrics, experimentId)
  return selected.length === 1 && selected[0] === experimentId ? runCount : null
}

/**
 * One member as the suite views list it.
 *
 * - `pipelines` / `byState`: the cumulative view of the member, or, with a run, the durable
 *   outcomes of that run in the member ({@link runOutcomes});
 * - `skipped` (with a run only): pipelines the member's source handed to that run that it did
 *   not execute (already succeeded): the runner's member-scoped skip count ({@link memberSkipsRecorded}),
 *   `null` without facts or when the run did not record it;
 * - `skippedRecorded`: `false` when the run skipped pipelines but recorded no per-member count
 *   that tells this member's (a run before per-member counts existed): the views print
 *   "skipped: not recorded"; `true` otherwise;
 * - `source`: the membership facts of the run (with a run), else of the latest run that
 *   selected the member (`null` when none did), and their {@link SourceStatus};
 * - `admitted`: how many specs the member's source handed to that run. The run records the
 *   count when the member's source ends (exhausted, failed, limit) and when it stops; while it
 *   is running, or after it died without recording it, the recorded count lags (it stays 0), so
 *   the views show the store's instead (`admittedFrom: "store"`): the member's pipelines that
 *   run holds plus those it skipped as already done (a lower bound: specs handed over but not
 *   yet written are not in it). `null` (with `admittedFrom: null`) when the run shown did not
 *   select the member or no run did;
 * - `superseded`: the member's pipelines kept as history of accepted input-row edits (not
 *   counted in the cumulative `pipelines`);
 * - `metrics`: the member-scoped metrics (`reportMetric(name, v, { experiment: ID })`, stored as
 *   `experiment:ID:NAME`; shown under `NAME`) of the run, else of the latest run that reported
 *   any for the member. Never averaged across members.
 *
 * @since 0.3.0
 * @category members
 */
export interface MemberSummary {
  readonly experimentId: string
  readonly label: string | null
  readonly limit: number | null
  readonly definitionDigest: string
  readonly pipelines: number
  readonly byState: Readonly<Record<PipelineState, number>>
  readonly skipped: number | null
  readonly skippedRecorded: boolean
  readonly source: SuiteMembership | null
  readonly sourceStatus: SourceStatus
  readonly admitted: number | null
  /** Where `admitted` comes from: the run's `recorded` count, or the `store`'s rows (see above). */
  readonly admittedFrom: "recorded" | "store" | null
  readonly metricsRunId: string | null
  readonly metrics: ReadonlyArray<Report.ReportMetric & { readonly updatedAt: number }>
  /**
   * The member's superseded pipelines: kept as history of accepted input-row edits
   * (`--accept-changed-rows`), counted in neither `pipelines` nor `byState` of the cumulative
   * view (one run's view still shows what that run did). 0 when none (since 0.7.0).
   */
  readonly superseded: number
  /** The member's database file when it is missing (it then reads as empty), else `null`. */
  readonly databaseMissing: string | null
}

/**
 * The summaries of the suite's members, in id order: all of them, or only `experiment`
 * (which must be a member: `ConfigError` otherwise); with `runId`, scoped to that run.
 *
 * @since 0.3.0
 * @category members
 */
export const memberSummaries = (
  suite: SuiteReads,
  options: { readonly experiment?: string | undefined; readonly runId?: RunId | undefined } = {}
): Effect.Effect<ReadonlyArray<MemberSummary>, ReadError> =>
  Effect.gen(function*() {
    const all = yield* membersInOrder(suite)
    const experiment = yield* canonicalMember(suite, options.experiment)
    const members = experiment === undefined ? all : all.filter((m) => m.experimentId === experiment)
    const facts = yield* suite.membership(options.runId)
    const merged = yield* suite.view()
    const allRuns = yield* merged.listRuns
    const runsNewestFirst = allRuns.map((r) => r.runId).reverse()
    const now = yield* Clock.currentTimeMillis
    const runsById = new Map(allRuns.map((r) => [r.runId, r] as const))
    const finished = allRuns.some((r) => r.runId === options.runId && r.status !== "running")
    const metricsByRun = new Map<RunId, ReadonlyArray<MetricRecord>>()
    const runMetrics = (runId: RunId) =>
      Effect.suspend(() => {
        const known = metricsByRun.get(runId)
        return known !== undefined
          ? Effect.succeed(known)
          : Effect.tap(merged.metrics({ runId, pipelineId: null }), (ms) => Effect.sync(() => metricsByRun.set(runId, ms)))
      })
    const out: Array<MemberSummary> = []
    for (const m of members) {
      const view = yield* suite.view(m.experimentId)
      const mine = facts.filter((f) => f.experimentId === m.experimentId && (options.runId === undefined || f.runId === options.runId))
      // the run's facts, else the latest run that selected it
      const source = mine.filter((f) => f.selected).sort((a, b) => b.updatedAt - a.updatedAt)[0] ?? mine[0]
      let pipelines: number
      let byState: Readonly<Record<PipelineState, number>>
      let skipped: number | null = null
      let skippedRecorded = true
      // the member's pipelines the source's run holds (undefined: not read yet)
      let held: number | undefined
      if (options.runId !== undefined) {
        const o = yield* outcomesOf(view, options.runId, finished, !runAlive(runsById.get(options.runId), now))
        held = o.pipelines
        pipelines = o.pipelines
        byState = o.byState
        // the runner's own count: what it found already done (never "admitted minus recorded":
        // an interrupted run's admitted specs may never have reached a row); a member the run
        // did not select has no count
        if (source !== undefined && source.selected) {
          const runId = options.runId
          const selected = facts.filter((f) => f.runId === runId && f.selected).map((f) => f.experimentId)
          skipped = memberSkipsRecorded(yield* runMetrics(runId), m.experimentId, selected)
          skippedRecorded = skipped !== null
        }
      } else {
        const st = yield* view.stats()
        pipelines = st.pipelines
        byState = yield* settleRunning(view, st.byState, allRuns, now)
      }
      // member-scoped metrics are run-scope metrics named `experiment:ID:NAME` (see
      // `Suite.memberMetricName`): the run's, else the latest run that reported any for it
      const runs = options.runId !== undefined ? [options.runId] : runsNewestFirst
      let metricsRunId: string | null = null
      let metrics: MemberSummary["metrics"] = []
      for (const runId of runs) {
        const ms = (yield* runMetrics(runId)).flatMap((x) => {
          const scoped = memberMetricOf(x.name)
          return scoped === undefined || scoped.experimentId !== m.experimentId || scoped.name === SKIPPED_METRIC ||
              scoped.name === FAILURES_REACHED_METRIC
            ? []
            : [{ x, name: scoped.name }]
        })
        if (ms.length > 0 || options.runId !== undefined) {
          metricsRunId = runId
          metrics = ms.map(({ name, x }) => ({
            runId: x.runId,
            pipelineId: x.pipelineId,
            name,
            label: x.label,
            display: x.display,
            value: x.value,
            text: Report.formatMetric(x.value, x.display),
            updatedAt: x.updatedAt
          }))
          break
        }
      }
      const sourceStatus = sourceStatusOf(
        source,
        source === undefined || runAlive(runsById.get(source.runId), now),
        source !== undefined && source.selected && memberStoppedByFailures(yield* runMetrics(source.runId), m.experimentId)
      )
      let admitted: number | null = null
      let admittedFrom: MemberSummary["admittedFrom"] = null
      if (source !== undefined && source.selected) {
        admitted = source.admitted
        admittedFrom = "recorded"
        if (sourceStatus === "running" || sourceStatus === "interrupted") {
          // the recorded count is written when the source ends or the run stops: live (or
          // after a kill) it lags, so count what the store holds of that run for the member
          const count = (held ?? (yield* view.stats(source.runId)).pipelines) +
            memberSkipsOf(yield* runMetrics(source.runId), m.experimentId)
          if (count > admitted) {
            admitted = count
            admittedFrom = "store"
          }
        }
      }
      out.push({
        experimentId: m.experimentId,
        label: m.label,
        limit: m.limit,
        definitionDigest: m.definitionDigest,
        pipelines,
        byState,
        skipped,
        skippedRecorded,
        source: source ?? null,
        sourceStatus,
        admitted,
        admittedFrom,
        metricsRunId,
        metrics,
        superseded: suite.superseded === undefined ? 0 : (yield* suite.superseded(m.experimentId)).length,
        databaseMissing: suite.missingDatabases?.find((d) => d.experimentId === m.experimentId)?.file ?? null
      })
    }
    return out
  })

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link buildSuiteReport}: `experiment` (one member; default the whole suite),
 * `runId` (one invocation's durable outcomes; default the cumulative view), `errors` (recent
 * errors listed, default 10).
 *
 * @since 0.3.0
 * @category report
 */
export interface SuiteReportOptions {
  readonly experiment?: string | undefined
  readonly runId?: string | undefined
  readonly errors?: number | undefined
}

/**
 * One pool resource of the suite report: a {@link Report.ReportResource} marked `shared`
 * (with `experimentId: null`) or private to one member.
 *
 * @since 0.3.0
 * @category report
 */
export type SuiteResource = Report.ReportResource & { readonly shared: boolean; readonly experimentId: string | null }

/**
 * The report of a suite root (what `assay report ROOT --json` prints): the ordinary report of
 * the selected view (`selection` is `"cumulative"` or the run id; with a run, `pipelines` and
 * `byState` are its durable outcomes and `skipped` what it did not execute), plus the suite's
 * identity, the selected member, the members, and the resources marked shared or private.
 *
 * @since 0.3.0
 * @category report
 */
export interface SuiteReportData extends Omit<Report.ReportData, "resources" | "errors"> {
  /** The recent errors, each with its member (`experimentId`) and `localKey` (`null` outside a member). */
  readonly errors: ReadonlyArray<
    Report.ReportData["errors"][number] & { readonly experimentId: string | null; readonly localKey: string | null }
  >
  readonly suite: {
    readonly suiteId: string
    readonly layout: "combined" | "byExperiment"
    readonly root: string
    readonly experiment: string | null
    readonly runId: string | null
  }
  readonly skipped: number | null
  /**
   * The superseded pipelines of the view (history of accepted input-row edits, left out of the
   * cumulative `pipelines` and `byState`; see `MemberSummary.superseded`) (since 0.7.0).
   */
  readonly superseded: number
  /**
   * `false` when `skipped` is unknown: the run skipped pipelines before per-member counts
   * existed and the member shown is not the only one it selected (see `memberSkipsRecorded`).
   */
  readonly skippedRecorded: boolean
  readonly members: ReadonlyArray<MemberSummary>
  readonly resources: ReadonlyArray<SuiteResource>
}

/**
 * Builds the report of a suite (see the module docs). Fails with `ConfigError` for an unknown
 * member or run (naming `--experiment` / `--run-id`), or the stores' read errors.
 *
 * @since 0.3.0
 * @category report
 */
export const buildSuiteReport = (
  suite: SuiteReads,
  given: SuiteReportOptions = {}
): Effect.Effect<SuiteReportData, ReadError> =>
  Effect.gen(function*() {
    const options = { ...given, experiment: yield* canonicalMember(suite, given.experiment) }
    const merged = yield* suite.view()
    const runId = options.runId === undefined || options.runId === "all" ? undefined : (options.runId as RunId)
    if (runId !== undefined) yield* checkRun(merged, runId, `suite ${suite.suiteId}`)
    const store = options.experiment === undefined ? merged : yield* suite.view(options.experiment)
    const source = options.experiment === undefined ? suite.root : `${suite.root} [${options.experiment}]`
    const base = yield* Report.buildReport([{ source, store }], { runId: runId ?? "all", errors: options.errors })
    const members = yield* memberSummaries(suite, { experiment: options.experiment, runId })
    const now = yield* Clock.currentTimeMillis
    const runs = yield* merged.listRuns
    let pipelines = base.pipelines
    let byState = yield* settleRunning(store, base.byState, runs, now)
    let skipped: number | null = null
    let skippedRecorded = true
    let errors = base.errors
    if (runId !== undefined) {
      const o = yield* runOutcomes(store, runId, !runAlive(runs.find((r) => r.runId === runId), now))
      pipelines = o.pipelines
      byState = o.byState
      // the run's failures a later run took over stay listed (from the run's own task rows)
      errors = [...base.errors, ...o.takenOverErrors.map((e) => ({ ...e, source }))]
        .sort((a, b) => (b.endedAt ?? 0) - (a.endedAt ?? 0))
        .slice(0, options.errors ?? 10)
      const known = members.map((m) => m.skipped).filter((n): n is number => n !== null)
      skipped = known.length === 0 ? null : known.reduce((a, b) => a + b, 0)
      if (members.some((m) => !m.skippedRecorded)) {
        // a run before per-member counts: the whole suite's is the run's own count
        skipped = options.experiment === undefined ? yield* runSkips(merged, runId) : null
        skippedRecorded = skipped !== null
      }
    }
    // each error names its member and local key (a suite pipeline's key is its id)
    const identities = yield* memberIdentities(store, errors.map((e) => e.pipelineId))
    const named = errors.map((e) => {
      const m = identities.get(e.pipelineId)
      return { ...e, experimentId: m?.experimentId ?? null, localKey: m?.localKey ?? null }
    })
    const resources = base.resources
      .filter((r) => poolVisible(r.pool, options.experiment))
      .map((r) => ({ ...r, shared: poolOwner(r.pool) === null, experimentId: poolOwner(r.pool) }))
      // shared pools first, then each member's private ones (stable within each group)
      .sort((a, b) => Number(!a.shared) - Number(!b.shared))
    return {
      ...base,
      metrics: suiteMetrics(base.metrics, options.experiment),
      selection: runId ?? "cumulative",
      pipelines,
      byState,
      skipped,
      superseded: members.reduce((n, m) => n + m.superseded, 0),
      skippedRecorded,
      errors: named,
      resources,
      suite: {
        suiteId: suite.suiteId,
        layout: suite.layout,
        root: suite.root,
        experiment: options.experiment ?? null,
        runId: runId ?? null
      },
      members
    }
  })

/**
 * The metrics of a suite report, each saying whose it is: a member-scoped metric (stored as
 * `experiment:ID:NAME`) is labelled with its member (`LABEL [member ID]`); the others are left
 * as they are. In one member's view (`experiment`), the other members' metrics are left out.
 * The runner's skip counts (the run's `skipped` and each member's `experiment:ID:skipped`) and
 * the suite's budget stops (`experiment:ID:stopped_by_failures`) are no metrics: a run's view
 * gives its skips as its figures (the Pipelines line, each member's line), the cumulative view
 * has none (skips belong to one run), and a stop is the member's source status.
 *
 * @since 0.5.0
 * @category report
 */
export const suiteMetrics = (
  metrics: ReadonlyArray<Report.ReportMetric>,
  experiment: string | undefined
): ReadonlyArray<Report.ReportMetric> =>
  metrics.flatMap((x) => {
    const scoped = memberMetricOf(x.name)
    if (scoped !== undefined) {
      return (experiment !== undefined && scoped.experimentId !== experiment) || scoped.name === SKIPPED_METRIC ||
          scoped.name === FAILURES_REACHED_METRIC
        ? []
        : [{ ...x, label: `${x.label ?? scoped.name} [member ${scoped.experimentId}]` }]
    }
    return x.name === SKIPPED_METRIC && x.pipelineId === null ? [] : [x]
  })

const statesText = (by: Readonly<Record<PipelineState, number>>): string =>
  (Object.keys(by) as Array<PipelineState>).map((k) => `${k} ${by[k]}`).join(", ")

/**
 * How a member's admitted count reads: `N admitted` (recorded by the run), `at least N
 * admitted (as stored)` (counted from the store while the run's own count lags), see
 * {@link MemberSummary}.
 *
 * @since 0.5.0
 * @category report
 */
export const admittedText = (admitted: number | null, from: MemberSummary["admittedFrom"]): string =>
  admitted === null ? "admitted: not recorded" : from === "store" ? `at least ${admitted} admitted (as stored)` : `${admitted} admitted`

/**
 * `s` as one line of text: line breaks, tabs and other control characters (C0, DEL, C1, and the
 * Unicode line and paragraph separators) escaped as `\\n`, `\\r`, `\\t` or `\\uXXXX`, so a
 * member's id, label or source error cannot break a one-line-per-member listing.
 *
 * @since 0.5.0
 * @category report
 */
export const oneLine = (s: string): string =>
  s.replace(
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g,
    (c) => c === "\n" ? "\\n" : c === "\r" ? "\\r" : c === "\t" ? "\\t" : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`
  )

const sourceText = (m: MemberSummary): string => {
  const s = m.source
  const admitted = admittedText(m.admitted, m.admittedFrom)
  switch (m.sourceStatus) {
    case "unknown":
      return "source: never run"
    case "not_selected":
      return `not selected (run ${s?.runId ?? ""})`
    case "error":
      return `source error: ${oneLine(s?.sourceError ?? "")}`
    case "exhausted":
      return `source exhausted (${admitted})`
    case "limit":
      return `limit reached (${admitted})`
    case "failures":
      return `stopped by its own stopAfterFailures (${admitted}; resume continues it)`
    case "running":
      return `source not exhausted yet (${admitted}, run ${s?.runId ?? ""} running)`
    case "interrupted":
      return `source not exhausted (${admitted}; run ${s?.runId ?? ""} ended)`
  }
}

/**
 * The suite report as text (what `assay report ROOT` prints without `--json`).
 *
 * @since 0.3.0
 * @category report
 */
/** The start of the report's token and cost line (`Report.renderText`). */
const SPEND_LINE = "Tokens and cost (each attempt once): "

export const renderSuiteText = (r: SuiteReportData): string => {
  const out: Array<string> = []
  const scope = r.suite.experiment === null ? "all members" : `member ${r.suite.experiment}`
  const view = r.suite.runId === null ? "cumulative view" : `run ${r.suite.runId} (durable outcomes)`
  out.push(`Suite ${r.suite.suiteId} (${r.suite.layout}) at ${r.suite.root}: ${scope}, ${view}`)
  // the cumulative view leaves superseded pipelines out of its counts, but what they cost was
  // spent: tokens, cost and pool attempts stay complete, and say so
  const supersededNote = r.suite.runId === null && r.superseded > 0
    ? `includes the attempts of ${r.superseded} superseded pipeline(s), left out of the counts above`
    : undefined
  const base = Report.renderText({ ...r, stores: [r.suite.root], resources: [], errors: [] }).split("\n").slice(1)
    .map((l) => supersededNote !== undefined && l.startsWith(SPEND_LINE) ? `${l} (${supersededNote})` : l)
  out.push(...base.filter((l) => !l.startsWith("Pipelines: ")))
  const errorLines: Array<string> = []
  if (r.errors.length > 0) {
    errorLines.push(`Recent errors (${r.errors.length}):`)
    for (const e of r.errors) {
      const who = e.experimentId === null ? "" : ` [member ${e.experimentId}${e.localKey === null ? "" : `, local key ${e.localKey}`}]`
      errorLines.push(`  ${e.pipelineId}${who} at ${e.failedTask ?? "?"}: ${e.errorType ?? "Error"} [${e.errorClass ?? "unknown"}] ${e.errorMessage ?? ""}`)
    }
  }
  out.push(`Pipelines: ${r.pipelines} (${statesText(r.byState)})${
    r.skipped !== null ? `, skipped ${r.skipped} (already done)` : r.skippedRecorded ? "" : `, skipped: ${NOT_RECORDED}`
  }`)
  if (r.superseded > 0) {
    out.push(
      `Superseded: ${r.superseded} pipeline(s) of input rows edited or removed since they ran (accepted; kept as history` +
        `${r.suite.runId === null ? ", not counted above" : ""})`
    )
  }
  out.push("Members:")
  if (r.members.length === 0) out.push("  none")
  for (const m of r.members) {
    out.push(
      `  ${oneLine(m.experimentId)}${m.label === null ? "" : ` [${oneLine(m.label)}]`}: ${m.pipelines} pipeline(s) (${statesText(m.byState)})${
        m.skipped !== null ? `, skipped ${m.skipped}` : m.skippedRecorded ? "" : `, skipped: ${NOT_RECORDED}`
      }${m.superseded > 0 ? `, superseded ${m.superseded}` : ""}; ${sourceText(m)}${m.limit === null ? "" : `; limit ${m.limit}`}${
        m.databaseMissing === null ? "" : `; DATABASE MISSING (${m.databaseMissing}): reads as empty, restore the file to see its results`
      }`
    )
    for (const x of m.metrics) out.push(`    ${x.label ?? x.name}: ${x.text}`)
  }
  if (r.resources.length > 0) {
    out.push(supersededNote === undefined ? "Pools:" : `Pools (attempts ${supersededNote.replace("includes", "include")}):`)
    for (const res of r.resources) {
      const who = res.shared ? "shared pool" : `pool private to ${res.experimentId}`
      out.push(`  ${res.pool}/${res.resourceId} (${who}; kind ${res.kind}): attempts ${res.attempts}, retries ${res.retries}, rate-limited ${res.rateLimited}`)
    }
  }
  out.push(...errorLines)
  return out.join("\n")
}

// ---------------------------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------------------------

/**
 * Adds member identity to audit rows (tasks, attempts, events, artifacts, handoffs) of a suite
 * view: `suiteId` and `experimentId` of the pipeline a row belongs to (read from its stored
 * pipeline row, one `getPipelines` read per chunk of rows); a row without a pipeline (a shared
 * pool's or a run's event) gets `experimentId: null` (no member is made up). Rows that already
 * carry the identity (`pipelines`, `results`) pass through.
 *
 * @since 0.3.0
 * @category export
 */
export const withMemberIdentity = <E>(
  store: TaskStore,
  suiteId: string,
  kind: Export.RowKind,
  rows: Stream.Stream<Export.RowItem, E>
): Stream.Stream<Export.RowItem, E | StoreUnavailable> => {
  if (kind === "pipelines" || kind === "results") return rows
  return Stream.mapChunksEffect(rows, (chunk) =>
    Effect.gen(function*() {
      const items = Array.from(chunk)
      const ids = new Set<PipelineId>()
      for (const item of items) {
        const row = item instanceof Export.LargeRow ? item.head : item
        const id = row["pipelineId"]
        if (typeof id === "string") ids.add(id as PipelineId)
      }
      const found: ReadonlyMap<PipelineId, PipelineRecord> = ids.size === 0 ? new Map() : yield* store.getPipelines(Array.from(ids))
      const tag = (row: Export.Row): Export.Row => {
        const id = row["pipelineId"]
        const p = typeof id === "string" ? found.get(id as PipelineId) : undefined
        return { ...row, suiteId, experimentId: p?.experimentId ?? null }
      }
      return Chunk.unsafeFromArray(items.map((item): Export.RowItem =>
        item instanceof Export.LargeRow ? new Export.LargeRow(tag(item.head), item.field, item.parts) : tag(item)
      ))
    }))
}

/**
 * The rows of one kind of a suite view, as `assay export ROOT OUT` writes them: the
 * cumulative suite (or one member's) rows in the store's order, audit rows with member
 * identity ({@link withMemberIdentity}); `results` and `pipelines` rows carry it from their
 * pipeline rows. `limit` applies to the view as a whole.
 *
 * @since 0.3.0
 * @category export
 */
export const suiteRowItems = (
  suite: SuiteReads,
  options: Export.RowOptions & { readonly experiment?: string | undefined }
): Stream.Stream<Export.RowItem, ReadError> =>
  Stream.unwrap(Effect.gen(function*() {
    const store = yield* suite.view(yield* canonicalMember(suite, options.experiment))
    return withReadState(store, options.kind, withMemberIdentity(store, suite.suiteId, options.kind, Export.rowItems(store, options)))
  }))

/**
 * What {@link exportByExperiment} wrote: one file per member, in id order.
 *
 * @since 0.3.0
 * @category export
 */
export interface SplitExport {
  readonly files: ReadonlyArray<{ readonly experimentId: string; readonly path: string; readonly rows: number }>
  readonly rows: number
}

/**
 * `assay export ROOT OUT --by-experiment`: writes each member's rows to `OUT/ID/KIND.FORMAT`,
 * members in id order (all of them, or only `experiment`), each member's rows in its view's
 * normal order (`limit` per member), with member identity as {@link suiteRowItems}. Works for
 * either layout (it reads each member's view). Each file is written atomically (a temporary
 * file renamed into place), so a failure leaves earlier members' files complete and the failed
 * member's file as it was; the directory as a whole is not atomic. `OUT` and `OUT/ID` are
 * created when missing.
 *
 * Fails with `ConfigError` for an unknown member, `ExportError` when a directory or file cannot
 * be written, or the stores' read errors.
 *
 * @since 0.3.0
 * @category export
 */
export const exportByExperiment = (
  suite: SuiteReads,
  out: string,
  options: Export.ExportOptions & { readonly experiment?: string | undefined }
): Effect.Effect<SplitExport, ReadError | Export.ExportError> =>
  Effect.gen(function*() {
    const members = options.experiment === undefined
      ? yield* membersInOrder(suite)
      : [yield* checkMember(suite, options.experiment)]
    const files: Array<{ experimentId: string; path: string; rows: number }> = []
    let total = 0
    for (const m of members) {
      const dir = nodePath.join(out, m.experimentId)
      yield* Effect.try({
        try: () => makeDirectories(dir),
        catch: (e) => new Export.ExportError({ message: `cannot create ${dir}: ${e instanceof Error ? e.message : String(e)}`, path: dir })
      })
      const path = nodePath.join(dir, `${options.kind}.${options.format}`)
      const rows = yield* Export.writeRows(suiteRowItems(suite, { ...options, experiment: m.experimentId }), path, options)
      files.push({ experimentId: m.experimentId, path, rows })
      total += rows
    }
    return { files, rows: total }
  })

// ---------------------------------------------------------------------------------------------
// Monitoring (watch, serve)
// ---------------------------------------------------------------------------------------------

/**
 * A {@link MemberSummary} as the HTTP API returns it.
 *
 * @since 0.3.0
 * @category monitoring
 */
export const memberWire = (m: MemberSummary): Monitor.MemberWire => ({
  experiment_id: m.experimentId,
  label: m.label,
  limit: m.limit,
  pipelines: m.pipelines,
  by_state: m.byState,
  skipped: m.skipped,
  skipped_recorded: m.skippedRecorded,
  source_status: m.sourceStatus,
  source: m.source === null
    ? null
    : {
      run_id: m.source.runId,
      selected: m.source.selected,
      admitted: m.admitted,
      admitted_from: m.admittedFrom,
      source_exhausted: m.source.sourceExhausted,
      source_error: m.source.sourceError,
      limit_reached: m.source.limitReached,
      updated_at: m.source.updatedAt
    },
  database_missing: m.databaseMissing,
  superseded: m.superseded,
  metrics_run_id: m.metricsRunId,
  metrics: m.metrics.map((x) => ({
    run_id: x.runId,
    pipeline_id: x.pipelineId,
    name: x.name,
    value: x.value,
    label: x.label,
    display: x.display,
    updated_at: x.updatedAt
  }))
})

/**
 * The monitoring picture of a suite view: the {@link Monitor.snapshotOf} of the member's view
 * (`experiment`) or of the whole suite, for a selection resolved against the whole suite's
 * runs; for one run, the pipeline counts are that run's durable outcomes ({@link runOutcomes})
 * and `skipped` what its members' sources handed it that it did not execute; plus the suite
 * section (members in id order, pools marked shared or private). Pools private to another
 * member are left out of a member's view.
 *
 * @since 0.3.0
 * @category monitoring
 */
export const suiteSnapshot = (
  suite: SuiteReads,
  selection: Monitor.Selection,
  given: { readonly experiment?: string | undefined; readonly errors: number }
): Effect.Effect<Monitor.Snapshot, ReadError> =>
  Effect.gen(function*() {
    const options = { ...given, experiment: yield* canonicalMember(suite, given.experiment) }
    const store = yield* suite.view(options.experiment)
    const base = yield* Monitor.snapshotOf(store, selection, options.errors, Monitor.storeReads(store))
    const runId = selection._tag === "Run" ? selection.run.runId : undefined
    const members = yield* memberSummaries(suite, { runId })
    const shown = options.experiment === undefined ? members : members.filter((m) => m.experimentId === options.experiment)
    const now = yield* Clock.currentTimeMillis
    const runs = selection._tag === "All" ? selection.runs : yield* store.listRuns
    let pipelines = { ...base.pipelines, by_state: yield* settleRunning(store, base.pipelines.by_state, runs, now) }
    let done = base.done
    // skips belong to one run: none in the cumulative view (`base.skipped` is null there)
    let skipped = base.skipped
    if (runId !== undefined && selection._tag === "Run") {
      const o = yield* outcomesOf(store, runId, selection.run.status !== "running", !runAlive(selection.run, now))
      const known = shown.map((m) => m.skipped).filter((n): n is number => n !== null)
      // a run before per-member counts: the whole suite's is the run's own (base.skipped); a
      // member whose count was not recorded adds none
      const ofRun = options.experiment === undefined && shown.some((m) => !m.skippedRecorded)
        ? base.skipped ?? 0
        : known.reduce((a, b) => a + b, 0)
      skipped = ofRun
      pipelines = { total: o.pipelines, by_state: o.byState }
      done = o.byState.succeeded + o.byState.failed + ofRun
    }
    const resources = base.resources.filter((r) => poolVisible(r.pool, options.experiment))
    // the runner's per-member skip counts (and the suite's budget stops) are figures of the
    // members, not run metrics
    const metrics = base.metrics.filter((x) => {
      const name = memberMetricOf(x.name)?.name
      return name !== SKIPPED_METRIC && name !== FAILURES_REACHED_METRIC
    })
    const recentErrors = yield* errorWiresWithMember(store, base.recent_errors)
    return {
      ...base,
      metrics,
      recent_errors: recentErrors,
      pipelines,
      done,
      skipped,
      progress: base.total === null ? null : Math.min(1, done / base.total),
      resources,
      suite: {
        suite_id: suite.suiteId,
        layout: suite.layout,
        experiment: options.experiment ?? null,
        members: members.map(memberWire),
        pools: resources.map((r) => ({ pool: r.pool, shared: poolOwner(r.pool) === null, experiment_id: poolOwner(r.pool) }))
          .sort((a, b) => Number(!a.shared) - Number(!b.shared))
      }
    }
  })
