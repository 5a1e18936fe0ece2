/**
 * Merging the stores of several shards (or several runs) into one coherent answer.
 *
 * Pipelines are deduplicated by id: the best state wins (`succeeded` > `failed` >
 * `interrupted` > `running` / `pending`), the latest finish (`endedAt`, then `updatedAt`)
 * breaks ties, and the first source wins a complete tie. Work counts (`pipelines`, `tasks`,
 * `attemptsTotal`, `handoffsTotal`) are recounted from the surviving rows, so merging is idempotent: the same
 * store given twice, or one pipeline present in two shards, counts once. `sourceEventsTotal`
 * is deliberately the raw sum of each source's event count: events are not attached to a
 * pipeline row, so nothing tells which copy owns an event.
 *
 * The surviving rows are kept in memory (dedupe needs every pipeline's winner); events are
 * only counted.
 *
 * @since 0.1.0
 */
import { Chunk, Effect, type Scope, Stream } from "effect"
import { ConfigError, type PluginError, StoreUnavailable } from "../../domain/Errors.js"
import type { PipelineRecord, PipelineState } from "../../domain/Records.js"
import * as Export from "./export.js"
import type { ErrorRow, Latency, ReadError, StoreService } from "../Store.js"
import { StoreOpener } from "../Store.js"
import { transitionsText } from "../../domain/internal/transitions.js"

/**
 * A surviving pipeline row: the record, the source it came from, and the numbers of task rows
 * and of handoff ledger rows it has in that source.
 *
 * @since 0.1.0
 * @category models
 */
export interface MergedRow {
  readonly pipeline: PipelineRecord
  readonly source: string
  readonly tasks: number
  /** Handoff ledger rows of the pipeline in that source (0 for a plain pipeline). */
  readonly handoffs: number
  /**
   * Of `handoffs`, the rows that spent a unit of the pipeline's `maxHandoffs` budget (all but
   * `end`); `undefined` when the source does not say (no `handoffBudgetedCounts`).
   */
  readonly handoffsBudgeted: number | undefined
}

/**
 * One source of a merge, already read: its name (a path), its pipeline rows (as read; each
 * must carry a numeric `attemptsTotal`), the task-row count of each pipeline, the handoff
 * ledger-row count of each pipeline (absent: none, as for a store without the traversal
 * capability), of those the rows that spent `maxHandoffs` budget (all but `end`; absent: not
 * known, and the merged `handoffsBudgeted` is `null` if that pipeline has ledger rows), and its
 * raw event count.
 *
 * @since 0.1.0
 * @category models
 */
export interface MergeSource {
  readonly source: string
  readonly pipelines: ReadonlyArray<PipelineRecord>
  readonly taskCounts: ReadonlyMap<string, number>
  readonly handoffCounts?: ReadonlyMap<string, number> | undefined
  readonly handoffBudgetedCounts?: ReadonlyMap<string, number> | undefined
  readonly eventsTotal: number
}

/**
 * The counts of a merged report.
 *
 * - `pipelines`, `byState`, `tasks`, `attemptsTotal`: recounted from the surviving rows;
 * - `handoffsTotal`: the control transitions (ledger rows) of the surviving rows, each
 *   pipeline's counted in its winning source (so shards add up and a store given twice
 *   counts once);
 * - `handoffsBudgeted`: of `handoffsTotal`, the transitions that spent a unit of a
 *   `maxHandoffs` budget (all but `end`), counted the same way; `null` when a winning source
 *   with ledger rows does not say;
 * - `sourceEventsTotal`: raw sum of the sources' events (duplicates included);
 * - `duplicates`: rows folded away; `sources`: the sources in the given order;
 * - `latencyMs`: percentiles of `endedAt - startedAt` of terminal surviving rows (ms,
 *   linear interpolation between closest ranks, Hyndman & Fan type 7), `null` when none:
 *   time in the run from admission to end, incl. waiting for a worker slot (see
 *   {@link latencyOf}).
 *
 * @since 0.1.0
 * @category models
 */
export interface MergedStats {
  readonly pipelines: number
  readonly byState: Readonly<Record<PipelineState, number>>
  readonly tasks: number
  readonly attemptsTotal: number
  readonly handoffsTotal: number
  readonly handoffsBudgeted: number | null
  readonly sourceEventsTotal: number
  readonly duplicates: number
  readonly sources: ReadonlyArray<string>
  readonly latencyMs: Latency | null
}

/**
 * A merged report. `export` writes the merged view (deduplicated rows of `pipelines` or
 * `results`, each read from its winning source) atomically; other kinds are concatenated
 * from every source, restricted to rows of surviving (pipeline, source) pairs when the row
 * names a pipeline.
 *
 * @since 0.1.0
 * @category models
 */
export interface MergedReport {
  readonly rows: ReadonlyArray<MergedRow>
  readonly duplicates: number
  readonly sources: ReadonlyArray<string>
  readonly pipelines: number
  readonly tasks: number
  readonly attemptsTotal: number
  /** See {@link MergedStats}. */
  readonly handoffsTotal: number
  /** See {@link MergedStats}. */
  readonly handoffsBudgeted: number | null
  readonly sourceEventsTotal: number
  readonly stats: () => MergedStats
  /** A few human-readable lines. */
  readonly summary: () => string
  /** Failed surviving pipelines, latest finish first (default limit 20). */
  readonly errors: (limit?: number) => ReadonlyArray<ErrorRow & { readonly source: string }>
  readonly export: (
    path: string,
    options?: { readonly format?: Export.Format | undefined; readonly kind?: Export.RowKind | undefined }
  ) => Effect.Effect<number, ReadError | Export.ExportError>
}

const RANK: Record<PipelineState, number> = { succeeded: 4, failed: 3, interrupted: 2, running: 1, pending: 1 }

/**
 * Whether `a` beats `b` for the same pipeline id: better state, then later `endedAt` (a
 * missing end loses), then later `updatedAt`.
 *
 * @since 0.1.0
 * @category merging
 */
export const beats = (
  a: Pick<PipelineRecord, "state" | "endedAt" | "updatedAt">,
  b: Pick<PipelineRecord, "state" | "endedAt" | "updatedAt">
): boolean => {
  const ra = RANK[a.state] ?? 0
  const rb = RANK[b.state] ?? 0
  if (ra !== rb) return ra > rb
  const ea = a.endedAt ?? -Infinity
  const eb = b.endedAt ?? -Infinity
  if (ea !== eb) return ea > eb
  return a.updatedAt > b.updatedAt
}

/** Type-7 percentile of ascending values. */
const quantile = (sorted: ReadonlyArray<number>, p: number): number => {
  const h = (sorted.length - 1) * p
  const lo = Math.floor(h)
  const hi = Math.ceil(h)
  return sorted[lo]! + (h - lo) * (sorted[hi]! - sorted[lo]!)
}

/**
 * Percentiles (ms) of terminal pipelines' `endedAt - startedAt`, `null` when none: each
 * pipeline's time in the run from its admission to its end, so waiting for a worker slot
 * (`run.concurrency`) counts. Printed as "time in run (incl. queueing)", never as the
 * pipelines' own latency (a study's `latencyP95Ms` is their execution time: see
 * `StudyMetrics`). The name is kept for the API.
 *
 * @since 0.1.0
 * @category merging
 */
export const latencyOf = (rows: Iterable<Pick<PipelineRecord, "state" | "startedAt" | "endedAt">>): Latency | null => {
  const ds: Array<number> = []
  for (const p of rows) {
    if ((p.state === "succeeded" || p.state === "failed" || p.state === "interrupted") && p.startedAt !== null && p.endedAt !== null) {
      ds.push(p.endedAt - p.startedAt)
    }
  }
  if (ds.length === 0) return null
  ds.sort((a, b) => a - b)
  return { p50: quantile(ds, 0.5), p95: quantile(ds, 0.95), p99: quantile(ds, 0.99) }
}

/**
 * Merges sources that are already read (the pure core of {@link mergeReports}). `open`
 * re-opens a source for `export` (absent: export fails with `ConfigError`).
 *
 * Fails with `ConfigError` naming the row and the source when a row lacks a numeric
 * `attemptsTotal` (it is never counted as 0).
 *
 * @since 0.1.0
 * @category merging
 */
export const mergeSources = (
  sources: ReadonlyArray<MergeSource>,
  open?: (source: string) => Effect.Effect<{ readonly store: StoreService; readonly bulk: Export.BulkReader }, ReadError | Export.ExportError, Scope.Scope>
): Effect.Effect<MergedReport, ConfigError> =>
  Effect.gen(function*() {
    const winners = new Map<string, MergedRow>()
    let duplicates = 0
    for (const s of sources) {
      for (const p of s.pipelines) {
        const attempts = (p as { attemptsTotal?: unknown }).attemptsTotal
        if (typeof attempts !== "number" || !Number.isFinite(attempts)) {
          return yield* new ConfigError({
            message: `pipeline row ${String(p.pipelineId)} from ${s.source} has no numeric attemptsTotal (got ${String(attempts)}); refusing to count it as 0`,
            issues: [{ path: `${s.source}:${String(p.pipelineId)}.attemptsTotal`, message: "missing attemptsTotal" }]
          })
        }
        const row: MergedRow = {
          pipeline: p,
          source: s.source,
          tasks: s.taskCounts.get(p.pipelineId) ?? 0,
          handoffs: s.handoffCounts?.get(p.pipelineId) ?? 0,
          handoffsBudgeted: s.handoffBudgetedCounts === undefined ? undefined : s.handoffBudgetedCounts.get(p.pipelineId) ?? 0
        }
        const prev = winners.get(p.pipelineId)
        if (prev === undefined) winners.set(p.pipelineId, row)
        else {
          duplicates++
          if (beats(p, prev.pipeline)) winners.set(p.pipelineId, row)
        }
      }
    }
    const rows = Array.from(winners.values())
    const names = sources.map((s) => s.source)
    const byState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
    let tasks = 0
    let attemptsTotal = 0
    let handoffsTotal = 0
    let handoffsBudgeted: number | null = 0
    for (const r of rows) {
      byState[r.pipeline.state]++
      tasks += r.tasks
      handoffsTotal += r.handoffs
      if (r.handoffs > 0) {
        handoffsBudgeted = handoffsBudgeted === null || r.handoffsBudgeted === undefined ? null : handoffsBudgeted + r.handoffsBudgeted
      }
      attemptsTotal += r.pipeline.attemptsTotal
    }
    const sourceEventsTotal = sources.reduce((n, s) => n + s.eventsTotal, 0)
    const stats = (): MergedStats => ({
      pipelines: rows.length,
      byState: { ...byState },
      tasks,
      attemptsTotal,
      handoffsTotal,
      handoffsBudgeted,
      sourceEventsTotal,
      duplicates,
      sources: names,
      latencyMs: latencyOf(rows.map((r) => r.pipeline))
    })
    const errors = (limit = 20) =>
      rows
        .filter((r) => r.pipeline.state === "failed")
        .sort((a, b) => (b.pipeline.endedAt ?? b.pipeline.updatedAt) - (a.pipeline.endedAt ?? a.pipeline.updatedAt))
        .slice(0, Math.max(0, limit))
        .map((r) => ({
          pipelineId: r.pipeline.pipelineId,
          name: r.pipeline.name,
          key: r.pipeline.key,
          runId: r.pipeline.runId,
          failedTask: r.pipeline.failedTask,
          errorType: r.pipeline.errorType,
          errorMessage: r.pipeline.errorMessage,
          errorClass: r.pipeline.errorClass,
          endedAt: r.pipeline.endedAt,
          source: r.source
        }))
    const summary = () => {
      const st = stats()
      const states = (Object.keys(st.byState) as Array<PipelineState>)
        .filter((k) => st.byState[k] > 0)
        .map((k) => `${k} ${st.byState[k]}`)
        .join(", ")
      return [
        `merged ${st.sources.length} store(s): ${st.pipelines} pipeline(s)${states === "" ? "" : ` (${states})`}`,
        `tasks ${st.tasks}, attempts ${st.attemptsTotal}${
          // (ends included, split: maxHandoffs is spent by all but `end`, tester13h finding 6)
          st.handoffsTotal > 0 ? `, transitions ${transitionsText(st.handoffsTotal, st.handoffsBudgeted ?? undefined)}` : ""}, duplicates folded ${st.duplicates}, source events ${st.sourceEventsTotal}`,
        st.latencyMs === null
          ? "time in run: n/a"
          // admission to end: includes waiting for a worker slot (not the pipelines' own latency)
          : `time in run ms (admission to end, incl. queueing): p50 ${st.latencyMs.p50.toFixed(0)}, p95 ${st.latencyMs.p95.toFixed(0)}, p99 ${st.latencyMs.p99.toFixed(0)}`
      ].join("\n")
    }
    const owner = new Map<string, string>(rows.map((r) => [r.pipeline.pipelineId, r.source]))
    const exportTo: MergedReport["export"] = (path, options = {}) => {
      const kind = options.kind ?? "pipelines"
      const format = options.format ?? "jsonl"
      if (open === undefined) {
        return Effect.fail(new ConfigError({ message: "this merged report has no openable sources; export needs store paths" }))
      }
      return Effect.scoped(Effect.gen(function*() {
        yield* Export.checkOutput(path, names)
        const opened = yield* Effect.forEach(names, (name) => Effect.map(open(name), (o) => [name, o] as const))
        const seen = new Set<string>()
        const streams = opened.flatMap(([name, o]) => {
          // a path given twice is one source: read it once
          if (seen.has(name)) return []
          seen.add(name)
          return [
            Export.iterRows(o.store, { kind }, o.bulk).pipe(
              Stream.filter((row) => {
                const id = row["pipelineId"]
                return typeof id !== "string" || !owner.has(id) || owner.get(id) === name
              })
            )
          ]
        })
        return yield* Export.writeRows(Stream.concatAll(Chunk.fromIterable(streams)), path, format)
      }))
    }
    return {
      rows,
      duplicates,
      sources: names,
      pipelines: rows.length,
      tasks,
      attemptsTotal,
      handoffsTotal,
      handoffsBudgeted,
      sourceEventsTotal,
      stats,
      summary,
      errors,
      export: exportTo
    }
  })

/**
 * Reads one opened store as a {@link MergeSource}: every pipeline row, the task-row count of
 * each pipeline, the ledger-row count of each pipeline (through the traversal capability;
 * none without it), and the raw event count.
 *
 * @since 0.1.0
 * @category merging
 */
export const readSource = (source: string, store: StoreService): Effect.Effect<MergeSource, ReadError> =>
  Effect.gen(function*() {
    const pipelines = Chunk.toReadonlyArray(yield* Stream.runCollect(store.streamPipelines()))
    const taskCounts = new Map<string, number>()
    yield* Stream.runForEach(store.streamTasks(), (t) => Effect.sync(() => void taskCounts.set(t.pipelineId, (taskCounts.get(t.pipelineId) ?? 0) + 1)))
    const handoffCounts = new Map<string, number>()
    const handoffBudgetedCounts = new Map<string, number>()
    if (store.traversal !== undefined) {
      for (const h of yield* store.traversal.handoffs()) {
        handoffCounts.set(h.pipelineId, (handoffCounts.get(h.pipelineId) ?? 0) + 1)
        // (an `end` row has no target seq: it spends no budget)
        if (h.toSeq !== null) handoffBudgetedCounts.set(h.pipelineId, (handoffBudgetedCounts.get(h.pipelineId) ?? 0) + 1)
      }
    }
    const eventsTotal = yield* store.countEvents()
    return { source, pipelines, taskCounts, handoffCounts, handoffBudgetedCounts, eventsTotal }
  })

/**
 * Opens every store read-only through the `Store.StoreOpener` in context (paths, `file:` URIs,
 * plugin URIs, as the CLI takes them), reads it, and merges (see the module docs). A source
 * given twice is read twice, and changes nothing (idempotence).
 *
 * Fails with `StoreUnavailable` when a store is missing or not an assay store, `ConfigError`
 * as {@link mergeSources} or on a spec that does not resolve, `PluginError` when a plugin's
 * factory fails.
 *
 * @since 0.1.0
 * @category merging
 */
export const mergeReports = (
  paths: ReadonlyArray<string>
): Effect.Effect<MergedReport, StoreUnavailable | ConfigError | PluginError | Export.ExportError, StoreOpener> =>
  Effect.flatMap(StoreOpener, (opener) => {
    const provided = Effect.provideService(StoreOpener, opener)
    // the merged export reopens a source that opened once already: a plugin failure there is
    // reported as the source being unavailable
    const reopen = (source: string) =>
      Export.openReadOnly(source).pipe(
        provided,
        Effect.catchTag("PluginError", (e) => Effect.fail(new StoreUnavailable({ message: e.message, path: source })))
      )
    return Effect.flatMap(
      Effect.forEach(paths, (p) => Effect.scoped(Effect.flatMap(Export.openReadOnly(p), ({ store }) => readSource(p, store)))),
      (sources) => mergeSources(sources, reopen)
    )
  })
