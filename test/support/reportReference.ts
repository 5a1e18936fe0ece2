/**
 * A reference implementation of `Report.buildReport`: the algorithm it replaced (issue 19 §4),
 * kept in the tests to check that the aggregates give the same report on the same stores.
 */
import { Clock, Effect, Stream } from "effect"
import { ConfigError } from "../../src/domain/Errors.js"
import { retryTracker } from "../../src/domain/internal/retries.js"
import type { PipelineId, RunId } from "../../src/domain/Ids.js"
import type { PipelineRecord, PipelineState, RunRecord } from "../../src/domain/Records.js"
import { errorRowOf } from "../../src/domain/TaskStore.js"
import * as CallCache from "../../src/services/CallCache.js"
import * as Export from "../../src/services/internal/export.js"
import { beats, latencyOf } from "../../src/services/internal/merge.js"
import { type Accounting, formatMetric, isStale, type ReportData, type ReportMetric, type ReportOptions, type ReportResource, type ReportRun } from "../../src/services/internal/report.js"
import type { AccountingFigures, ReadError, TaskStore } from "../../src/services/Store.js"
import { roundUsd } from "../../src/domain/Pricing.js"
import { LEASE_LOST, tallyLeasesLost } from "../../src/services/internal/leasesLost.js"
import { takenPipelinesOf } from "../../src/services/internal/store/shared.js"

/**
 * A total's cost as the report must give it: unknown (null), not $0, when no call in it had a
 * price; else rounded to 1e-9 USD (`Pricing.roundUsd`, the precision of each call's cost).
 */
const honest = <A extends { readonly costUsd: number | null; readonly unpriced: number }>(a: A): A => ({
  ...a,
  costUsd: a.costUsd === null || (a.unpriced > 0 && a.costUsd === 0) ? null : roundUsd(a.costUsd)
})

const leaseTarget = (leaseId: string): string => {
  const hash = leaseId.lastIndexOf("#")
  return hash < 0 ? leaseId : leaseId.slice(0, hash)
}

/**
 * The report as it was computed before issue 19 (every pipeline and attempt of the scopes
 * streamed through JavaScript): the reference the aggregate-based `buildReport` must equal,
 * figure for figure.
 */
export const referenceReport = (
  stores: ReadonlyArray<{ readonly source: string; readonly store: TaskStore }>,
  options: ReportOptions = {}
): Effect.Effect<ReportData, ReadError> =>
  Effect.gen(function*() {
    const errorsLimit = (yield* Export.checkLimit(options.errors)) ?? 10
    const now = yield* Clock.currentTimeMillis
    const all = options.runId === "all"

    // run selection, per store: undefined = no run filter (all)
    const selected: Array<{ source: string; store: TaskStore; runs: ReadonlyArray<RunRecord>; runsInStore: number }> = []
    for (const s of stores) {
      const runs = yield* s.store.listRuns
      const chosen = all
        ? runs
        : options.runId === undefined
        ? runs.slice(-1) // listRuns is oldest first
        : runs.filter((r) => r.runId === options.runId)
      selected.push({ ...s, runs: chosen, runsInStore: runs.length })
    }
    if (options.runId !== undefined && !all && selected.every((s) => s.runs.length === 0)) {
      return yield* new ConfigError({
        message: `run ${options.runId} is in none of the stores (${stores.map((s) => s.source).join(", ")})`,
        issues: [{ path: "runId", message: `unknown run ${options.runId}` }]
      })
    }

    const runs: Array<ReportRun> = selected.flatMap((s) =>
      s.runs.map((r) => {
        const stale = isStale(r, now, options.staleAfterMs)
        return {
          source: s.source,
          runId: r.runId,
          label: r.label,
          status: r.status,
          shownStatus: stale ? "interrupted" : r.status,
          stale,
          startedAt: r.startedAt,
          heartbeatAt: r.heartbeatAt,
          endedAt: r.endedAt,
          stopReason: stale ? "stale (no heartbeat)" : r.stopReason
        }
      })
    )

    // pipelines in scope, deduplicated across stores
    const winners = new Map<string, { p: PipelineRecord; source: string }>()
    let duplicates = 0
    let tasks = 0
    let attempts = 0
    let retries = 0
    let handoffsTotal = 0
    let handoffsBudgeted = 0
    type Figures = { attempts: number; retries: number; rateLimited: number } & { -readonly [K in keyof Accounting]: number }
    const zero = (): Figures => ({ attempts: 0, retries: 0, rateLimited: 0, tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 })
    /** One attempt's accounting on each target it leased. */
    const addAccountingOf = (
      u: Figures,
      a: { tokensIn: number | null; tokensOut: number | null; tokensEstimated: boolean; costUsd: number | null }
    ) => {
      u.tokensIn += a.tokensIn ?? 0
      u.tokensOut += a.tokensOut ?? 0
      if (a.costUsd !== null) u.costUsd += a.costUsd
      else if (a.tokensIn !== null || a.tokensOut !== null) u.unpriced++
      if (a.tokensEstimated) u.estimated++
    }
    const usage = new Map<string, Figures>()
    type Once = { -readonly [K in keyof AccountingFigures]: number }
    const zeroOnce = (): Once => ({ calls: 0, refused: 0, failedCalls: 0, cacheHits: 0, modelCallHits: 0, tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 })
    /** A call sent and not answered: on a resource, no tokens, failed with a 429 or at the endpoint. */
    const unanswered = (a: { outcome: string; errorClass: string | null; leaseIds: ReadonlyArray<string>; tokensIn: number | null; tokensOut: number | null }) =>
      a.outcome !== "cache_hit" && a.leaseIds.length > 0 && a.tokensIn === null && a.tokensOut === null
        ? a.errorClass === "rate_limit" ? "refused" : a.errorClass === "upstream" || a.errorClass === "timeout" ? "failed" : undefined
        : undefined
    /** One attempt counted once (its calls sent: each lease of an attempt that sent one; refused, failed; cache hits, tokens, cost). */
    const addOnce = (
      u: Once,
      a: {
        outcome: string
        errorClass: string | null
        leaseIds: ReadonlyArray<string>
        tokensIn: number | null
        tokensOut: number | null
        tokensEstimated: boolean
        costUsd: number | null
        decision?: unknown
      }
    ) => {
      if (a.outcome === "cache_hit") u.cacheHits++
      // a hit whose note names its task's pool: a model call saved
      const note = (a.decision as { cache?: { pool?: unknown } } | null | undefined)?.cache
      if (a.outcome === "cache_hit" && typeof note?.pool === "string") u.modelCallHits++
      const un = unanswered(a)
      // a 400 (class fatal, no tokens) reached the provider: a call, neither refused nor failed
      const answeredError = a.outcome !== "cache_hit" && a.leaseIds.length > 0 && a.errorClass === "fatal"
      if (a.tokensIn !== null || a.tokensOut !== null || un !== undefined || answeredError) u.calls += Math.max(1, a.leaseIds.length)
      if (un === "refused") u.refused++
      if (un === "failed") u.failedCalls++
      u.tokensIn += a.tokensIn ?? 0
      u.tokensOut += a.tokensOut ?? 0
      if (a.costUsd !== null) u.costUsd += a.costUsd
      else if (a.tokensIn !== null || a.tokensOut !== null) u.unpriced++
      if (a.tokensEstimated) u.estimated++
    }
    const total = zeroOnce()
    const perPipeline = new Map<string, Once & { source: string }>()
    const runAccounting: Array<AccountingFigures & { source: string; runId: string }> = []
    const selectedRunIds = new Set<string>()
    const walPending: Array<{ source: string; frames: number }> = []
    for (const [entry, s] of selected.entries()) {
      const scopes: ReadonlyArray<RunId | undefined> = all ? [undefined] : s.runs.map((r) => r.runId)
      for (const runId of scopes) {
        if (runId !== undefined) selectedRunIds.add(runId)
        yield* Stream.runForEach(s.store.streamPipelines({ runId }), (p) =>
          Effect.sync(() => {
            const prev = winners.get(p.pipelineId)
            if (prev === undefined) winners.set(p.pipelineId, { p, source: s.source })
            else {
              duplicates++
              if (beats(p, prev.p)) winners.set(p.pipelineId, { p, source: s.source })
            }
          }))
        const st = yield* s.store.stats(runId)
        if (st.walPendingFrames !== undefined && st.walPendingFrames > 0 && !walPending.some((w) => w.source === s.source)) {
          walPending.push({ source: s.source, frames: st.walPendingFrames })
        }
        tasks += st.tasks
        attempts += st.attemptsTotal
        retries += st.retries
        handoffsTotal += st.handoffsTotal
        // counted from the ledger rows themselves: an `end` row has no target seq
        if (s.store.traversal !== undefined) {
          for (const h of yield* s.store.traversal.handoffs(runId === undefined ? {} : { runId })) {
            if (h.toSeq !== null) handoffsBudgeted++
          }
        }
        const isRetry = retryTracker()
        yield* Stream.runForEach(s.store.streamAttempts({ runId }), (a) =>
          Effect.sync(() => {
            const retry = isRetry(a)
            for (const id of new Set(a.leaseIds.map(leaseTarget))) {
              const key = `${s.source}\u0000${id}`
              const u = usage.get(key) ?? zero()
              u.attempts++
              if (retry) u.retries++
              if (a.errorClass === "rate_limit") u.rateLimited++
              addAccountingOf(u, a)
              usage.set(key, u)
            }
            addOnce(total, a)
            if (a.outcome === "cache_hit" || a.tokensIn !== null || a.tokensOut !== null || unanswered(a) !== undefined) {
              // one row per store given and scope read, as the report reads one aggregate per scope
              const key = `${entry}\u0000${runId ?? ""}\u0000${s.source}\u0000${a.pipelineId}`
              const f = perPipeline.get(key) ?? { ...zeroOnce(), source: s.source }
              addOnce(f, a)
              perPipeline.set(key, f)
            }
          }))
      }
      // each selected run's own figures, every attempt read
      for (const run of s.runs) {
        const acc = zeroOnce()
        yield* Stream.runForEach(s.store.streamAttempts({ runId: run.runId }), (a) => Effect.sync(() => addOnce(acc, a)))
        runAccounting.push({ source: s.source, runId: run.runId, ...acc })
      }
    }
    const byState: Record<PipelineState, number> = { pending: 0, running: 0, succeeded: 0, failed: 0, interrupted: 0 }
    for (const { p } of winners.values()) byState[p.state]++
    // a selected run's pipelines filed under another run now, read from the run's rows (the
    // store's own aggregate left out), counted as what they did under the selected run
    const taken: Array<ReportData["taken"][number]> = []
    if (!all) {
      for (const s of selected) {
        for (const run of s.runs) {
          const fromRows = takenPipelinesOf({ ...s.store, takenPipelines: undefined })
          for (const t of yield* fromRows(run.runId)) {
            // copies of one store (one run id in several): the largest count, not the sum
            const i = taken.findIndex((x) => x.runId === run.runId && x.filedUnder === t.runId)
            const prev = taken[i]
            if (prev === undefined) taken.push({ source: s.source, runId: run.runId, filedUnder: t.runId, failed: t.failed, interrupted: t.interrupted })
            else taken[i] = { ...prev, failed: Math.max(prev.failed, t.failed), interrupted: Math.max(prev.interrupted, t.interrupted) }
          }
        }
      }
    }
    for (const t of taken) {
      byState.failed += t.failed
      byState.interrupted += t.interrupted
    }

    const resources: Array<ReportResource> = []
    const metrics: Array<ReportMetric> = []
    const repair = new Map<string, { phases: Set<string>; source: string }>()
    const leasesLost: Array<ReportData["leasesLost"][number]> = []
    for (const s of selected) {
      // lost global leases: every such event of the store, those of a selected run kept
      const lost = (yield* s.store.events({ kind: LEASE_LOST })).filter((e) => all || (e.runId !== null && selectedRunIds.has(e.runId)))
      for (const l of tallyLeasesLost(lost)) leasesLost.push({ source: s.source, ...l })
      for (const r of yield* s.store.resources) {
        const u = usage.get(`${s.source}\u0000${r.pool}/${r.resourceId}`) ?? zero()
        resources.push(honest({ source: s.source, pool: r.pool, resourceId: r.resourceId, kind: r.kind, health: r.health, ...u }))
      }
      const runIds = s.runs.map((r) => r.runId)
      for (const runId of runIds) {
        for (const m of yield* s.store.metrics({ runId })) {
          metrics.push({
            runId: m.runId,
            pipelineId: m.pipelineId,
            name: m.name,
            label: m.label,
            display: m.display,
            value: m.value,
            text: formatMetric(m.value, m.display)
          })
        }
      }
      // repair failures of pipelines in scope, or emitted by a selected run
      const events = yield* s.store.events({ kind: "pipeline.terminal_repair_failed" })
      for (const e of events) {
        if (e.pipelineId === null) continue
        const inScope = all || winners.has(e.pipelineId) || (e.runId !== null && selectedRunIds.has(e.runId))
        if (!inScope) continue
        const entry = repair.get(e.pipelineId) ?? { phases: new Set<string>(), source: s.source }
        const phase = (e.data as { phase?: unknown } | null)?.phase
        entry.phases.add(typeof phase === "string" ? phase : "unknown")
        repair.set(e.pipelineId, entry)
      }
    }

    const survivors = Array.from(winners.values())
    const errors = survivors
      .filter(({ p }) => p.state === "failed")
      .sort((a, b) => (b.p.endedAt ?? b.p.updatedAt) - (a.p.endedAt ?? a.p.updatedAt))
      .slice(0, errorsLimit)
      .map(({ p, source }) => ({ ...errorRowOf(p), source }))

    // the whole experiment when the selection leaves runs out: every attempt of every store
    const experiment = selected.some((s) => s.runs.length < s.runsInStore)
        ? yield* Effect.map(
          Effect.reduce(selected, zeroOnce(), (acc, s) =>
            Effect.as(Stream.runForEach(s.store.streamAttempts({}), (a) => Effect.sync(() => addOnce(acc, a))), acc)),
          (f) => ({ ...honest(f), runs: selected.reduce((n, s) => n + s.runsInStore, 0) })
        )
        : undefined

    return {
      stores: stores.map((s) => s.source),
      selection: all ? "all" : options.runId ?? "latest",
      runs,
      pipelines: winners.size + taken.reduce((n, t) => n + t.failed + t.interrupted, 0),
      byState,
      taken,
      duplicates,
      tasks,
      attempts,
      retries,
      handoffsTotal,
      handoffsBudgeted,
      latencyMs: latencyOf(survivors.map((w) => w.p)),
      resources,
      metrics,
      errors,
      walPending,
      // the reference reads every attempt of the selected runs
      // (with the model calls the hits saved, counted from the attempts above)
      cache: {
        ...yield* Effect.reduce(
          selected.flatMap((s) => s.runs.map((r) => ({ store: s.store, runId: r.runId }))),
          CallCache.emptyStats,
          (acc, x) => Effect.map(CallCache.statsOf(x.store, x.runId), (st) => CallCache.sumStats(acc, st))
        ),
        modelCallHits: total.modelCallHits
      },
      accounting: (() => {
        const pools = new Map<string, Accounting>()
        const counts = new Map<string, { resources: number; attempts: number }>()
        const add = (a: Accounting, b: Accounting): Accounting => ({
          tokensIn: a.tokensIn + b.tokensIn,
          tokensOut: a.tokensOut + b.tokensOut,
          costUsd: (a.costUsd ?? 0) + (b.costUsd ?? 0),
          estimated: a.estimated + b.estimated,
          unpriced: a.unpriced + b.unpriced
        })
        const none: Accounting = { tokensIn: 0, tokensOut: 0, costUsd: 0, estimated: 0, unpriced: 0 }
        for (const r of resources) {
          const { tokensIn, tokensOut, costUsd, estimated, unpriced } = r
          pools.set(r.pool, add(pools.get(r.pool) ?? none, { tokensIn, tokensOut, costUsd, estimated, unpriced }))
          const c = counts.get(r.pool) ?? { resources: 0, attempts: 0 }
          counts.set(r.pool, { resources: c.resources + 1, attempts: c.attempts + r.attempts })
        }
        const resourcesSum = Array.from(pools.values()).reduce(add, none)
        const by = options.pipelinesBy ?? "cost"
        const limit = options.topPipelines ?? 10
        const tokens = (x: Once) => x.tokensIn + x.tokensOut
        const rows = Array.from(perPipeline, ([key, f]) => ({ pipelineId: key.slice(key.lastIndexOf("\u0000") + 1) as PipelineId, ...f }))
          .sort((a, b) =>
            (by === "cost" ? b.costUsd - a.costUsd || tokens(b) - tokens(a) : tokens(b) - tokens(a) || b.costUsd - a.costUsd) ||
            (a.pipelineId < b.pipelineId ? -1 : a.pipelineId > b.pipelineId ? 1 : 0)
          )
          .slice(0, limit)
          .map(({ source, ...f }) => ({ ...f, source }))
        return {
          total: honest(total),
          ...(experiment === undefined ? {} : { experiment }),
          runs: runAccounting.map(honest),
          pools: Array.from(pools, ([pool, a]) => honest({ pool, ...counts.get(pool)!, ...a })).sort((a, b) => (a.pool < b.pool ? -1 : a.pool > b.pool ? 1 : 0)),
          resourcesSum: honest(resourcesSum),
          multiLeased: resourcesSum.tokensIn + resourcesSum.tokensOut > total.tokensIn + total.tokensOut ||
            (resourcesSum.costUsd ?? 0) > total.costUsd + 1e-9 || resourcesSum.estimated > total.estimated ||
            resourcesSum.unpriced > total.unpriced,
          pipelines: { by, limit, rows: rows.map(honest) }
        }
      })(),
      leasesLost,
      repairFailures: {
        count: repair.size,
        pipelines: Array.from(repair, ([pipelineId, v]) => ({ pipelineId, phases: Array.from(v.phases).sort(), source: v.source }))
      },
      // read from `pipeline.abandoned` events, not from an aggregate: the fixtures have none
      inFlightAtStop: []
    }
  })

