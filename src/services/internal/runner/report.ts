/**
 * The run report: plain data (the facts of a finished run) with derived views (`summary`,
 * `toJSON`) and `exportJsonl`, which writes through `Export.writeRows` (hence `OutputFile`:
 * atomic, no temp file left on failure) with the store taken from the context.
 *
 * @internal
 */
import { Effect, Schema, Stream } from "effect"
import { PipelineRecord, type RunStatus } from "../../../domain/Records.js"
import * as Export from "../export.js"
import type { RunCacheTrouble, RunReport } from "../../Runner.js"
import { Store, type StoreStats } from "../../Store.js"
import type { RunId } from "../../../domain/Ids.js"
import * as CallCache from "../../CallCache.js"
import { cacheHitsText, cacheLineText, callsText, formatCost } from "../money.js"
import { transitionsText } from "../../../domain/internal/transitions.js"

/**
 * The facts a report is made of.
 *
 * @internal
 */
export interface ReportFacts {
  readonly runId: RunId
  readonly status: Exclude<RunStatus, "running">
  readonly startedAt: number
  readonly durationMs: number
  readonly stats: StoreStats
  readonly skipped: number
  readonly repairFailures: number
  readonly leasesLeaked: number
  readonly retries: number
  readonly handoffsTotal: number
  readonly handoffsBudgeted: number
  readonly stopReason: string | null
  readonly heldByOtherRuns: ReadonlyArray<{ readonly runId: RunId; readonly pipelines: number }>
  /** The run's `staleAfter` in ms (0 on a store with one writer). */
  readonly staleAfterMs: number
  /** The call cache, when some of its lookups or writes failed (absent otherwise). */
  readonly callCache?: RunCacheTrouble | undefined
}

const encodePipeline = Schema.encodeSync(PipelineRecord)

class Report implements RunReport {
  readonly runId: RunId
  readonly status: Exclude<RunStatus, "running">
  readonly startedAt: number
  readonly durationMs: number
  readonly stats: StoreStats
  readonly skipped: number
  readonly repairFailures: number
  readonly leasesLeaked: number
  readonly retries: number
  readonly handoffsTotal: number
  readonly handoffsBudgeted: number
  readonly stopReason: string | null
  readonly heldByOtherRuns: ReadonlyArray<{ readonly runId: RunId; readonly pipelines: number }>
  readonly callCache: RunCacheTrouble | undefined
  readonly #staleAfterMs: number
  constructor(facts: ReportFacts) {
    this.callCache = facts.callCache
    this.runId = facts.runId
    this.status = facts.status
    this.startedAt = facts.startedAt
    this.durationMs = facts.durationMs
    this.stats = facts.stats
    this.skipped = facts.skipped
    this.repairFailures = facts.repairFailures
    this.leasesLeaked = facts.leasesLeaked
    this.retries = facts.retries
    this.handoffsTotal = facts.handoffsTotal
    this.handoffsBudgeted = facts.handoffsBudgeted
    this.stopReason = facts.stopReason
    this.heldByOtherRuns = facts.heldByOtherRuns
    this.#staleAfterMs = facts.staleAfterMs
  }
  toJSON(): Record<string, unknown> {
    return {
      runId: this.runId,
      status: this.status,
      startedAt: this.startedAt,
      durationMs: this.durationMs,
      stopReason: this.stopReason,
      skipped: this.skipped,
      repairFailures: this.repairFailures,
      leasesLeaked: this.leasesLeaked,
      retries: this.retries,
      handoffsTotal: this.handoffsTotal,
      handoffsBudgeted: this.handoffsBudgeted,
      heldByOtherRuns: this.heldByOtherRuns,
      ...(this.callCache !== undefined ? { callCache: this.callCache } : {}),
      stats: {
        pipelines: { total: this.stats.pipelines, byState: this.stats.byState },
        tasks: this.stats.tasks,
        attemptsTotal: this.stats.attemptsTotal,
        retries: this.stats.retries,
        latencyMs: this.stats.latencyMs,
        ...(this.stats.accounting !== undefined ? { accounting: this.stats.accounting } : {})
      },
      // what the call cache did, as `assay report --json` says it (tester18f F4)
      ...(this.stats.cache !== undefined ? { cache: CallCache.summaryOf(this.stats.cache, this.stats.accounting) } : {})
    }
  }
  summary(): string {
    const s = this.stats
    const by = Object.entries(s.byState).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(", ")
    const lines = [
      `run ${this.runId}: ${this.status}${this.stopReason !== null ? ` (${this.stopReason})` : ""} in ${
        (this.durationMs / 1000).toFixed(1)
      } s`,
      `pipelines: ${s.pipelines}${by === "" ? "" : ` (${by})`}, skipped ${this.skipped}`,
      `tasks: ${s.tasks}, attempts: ${s.attemptsTotal}, retries: ${s.retries}, leases leaked: ${this.leasesLeaked}`
    ]
    if (s.latencyMs !== null) {
      lines.push(
        `pipeline latency: p50 ${s.latencyMs.p50.toFixed(0)} ms, p95 ${s.latencyMs.p95.toFixed(0)} ms, p99 ${
          s.latencyMs.p99.toFixed(0)
        } ms`
      )
    }
    // model calls, cache hits, tokens and cost, as `report` words them (a cost with unpriced
    // calls is a lower bound or "unpriced", never $0); only when the run made or served calls
    const a = s.accounting
    if (a !== undefined && (a.calls > 0 || a.cacheHits > 0 || a.tokensIn + a.tokensOut > 0 || a.costUsd > 0)) {
      lines.push(
        `model calls: ${callsText(a)}${cacheHitsText(a)}; tokens in ${a.tokensIn}, out ${a.tokensOut}${
          a.estimated > 0 ? ` (${a.estimated} attempt(s) estimated)` : ""
        }; cost ${formatCost(a.costUsd, a.unpriced)}`
      )
    }
    // the call cache, whenever it was on: what it served and what it stored (a run whose calls
    // all missed filled it; tester18d F6)
    const c = s.cache
    if (c !== undefined && c.hits + c.misses + c.refreshed + c.bypassed > 0) lines.push(cacheLineText(c))
    // a cache that could not be used is said where the run ends, not only in one early WARN
    // (tester18c F5: a damaged shared cache file ended with a summary silent about it)
    const cc = this.callCache
    if (cc !== undefined && cc.lookupFailures + cc.writeFailures > 0) {
      const what = [
        ...(cc.lookupFailures > 0 ? [`${cc.lookupFailures} lookup${cc.lookupFailures === 1 ? "" : "s"}`] : []),
        ...(cc.writeFailures > 0 ? [`${cc.writeFailures} write${cc.writeFailures === 1 ? "" : "s"}`] : [])
      ].join(" and ")
      const done = [
        ...(cc.lookupFailures > 0 ? [`${cc.lookupFailures === 1 ? "that call was" : "those calls were"} made without it`] : []),
        ...(cc.writeFailures > 0 ? [`${cc.writeFailures === 1 ? "one answer was" : `${cc.writeFailures} answers were`} not stored there (made again next run)`] : [])
      ].join("; ")
      lines.push(`call cache ${cc.location}: unusable (${what} failed: damaged or unreadable, see the warning above); ${done}`)
    }
    if (this.repairFailures > 0) lines.push(`terminal repair failures: ${this.repairFailures}`)
    // (ends included, split: maxHandoffs is spent by all but `end`, tester13h finding 6)
    if (this.handoffsTotal > 0) lines.push(`transitions: ${transitionsText(this.handoffsTotal, this.handoffsBudgeted)}`)
    for (const h of this.heldByOtherRuns) {
      // never silent: a resume right after a kill -9 on a shared store lands here, and "completed"
      // alone would read as "nothing left to do"
      lines.push(
        `left to run ${h.runId}: ${h.pipelines} pipeline(s) it marks running (its heartbeat is younger than ${
          (this.#staleAfterMs / 1000).toFixed(0)
        } s, so it may be alive); if that process is dead, run this again once the heartbeat is older (--stale-after) to take them over`
      )
    }
    return lines.join("\n")
  }
  exportJsonl(path: string) {
    const runId = this.runId
    return Effect.flatMap(Store, (store) =>
      Export.writeRows(
        Stream.map(store.streamPipelines({ runId }), (p) => encodePipeline(p) as Export.Row),
        path,
        "jsonl"
      ))
  }
}

/**
 * The report of a finished run.
 *
 * @internal
 */
export const makeReport = (facts: ReportFacts): RunReport => new Report(facts)
