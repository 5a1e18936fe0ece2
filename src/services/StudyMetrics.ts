/**
 * The metrics of a study's trials, read from what a study's root records: the declared metrics
 * of the study file (`metrics:`, see `Study.MetricDecl`), the built-in runtime metrics
 * (`Study.BUILTIN_METRICS`) and the metrics tasks report (`ctx.reportMetric`) that an
 * objective names without declaring them.
 *
 * **Where each value comes from.**
 *
 * | metric | read from |
 * | --- | --- |
 * | declared, `from: { output }` | the final output (decoded payload) of each succeeded pipeline of the trial |
 * | declared, `from: { metric }`; reported | each pipeline's latest value of the pipeline-scope metric (every run of the root); a reported metric's trial value is the member-scoped run metric `experiment:ID:NAME` when one exists |
 * | `calls`, `tokens`, `costUsd`, `wallMs` | the trial's usage row (`study_trials`: what the study's control metered, summed across resumes) |
 * | `tokensIn`, `tokensOut` | `usage.promptTokens` / `usage.completionTokens` of the trial's stored task outputs (the chat task's output carries them) |
 * | `latencyP95Ms` | `endedAt − startedAt` of the trial's succeeded pipelines |
 * | `retries`, `rateLimited` | the trial's attempts: `attemptNo > 1`, and `errorClass = rate_limit` |
 *
 * **Cases.** A case is one row of the protocol's source: the same case in every trial. Its key
 * is the pipeline's explicit key when it has one, else its seed's digest (and the source's
 * `repeats` sample number when above 0): a content-addressed pipeline id also digests the
 * pipeline's definition, which differs between variants, so it cannot pair them.
 *
 * Only succeeded pipelines give case values (a failed pipeline has no final output).
 *
 * @since 0.6.0
 */
import { Effect, Stream } from "effect"
import type { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import { canonicalJsonUnsafe, isStrictJson } from "../domain/Json.js"
import type { PipelineId } from "../domain/Ids.js"
import { defaultPipelineId } from "../domain/Pipeline.js"
import * as Study from "../domain/Study.js"
import { memberDigest, memberDigestOf } from "../domain/Suite.js"
import { decodePayload } from "./internal/export.js"
import * as Suite from "./Suite.js"
import { SuiteCatalog } from "./SuiteCatalog.js"
import type { TrialUsage } from "./StudyControl.js"

// ---------------------------------------------------------------------------------------------
// Definitions
// ---------------------------------------------------------------------------------------------

/**
 * One metric as a comparison uses it: `name`, `unit`, `direction` (better is higher, lower or
 * closer to a target), `level` (`case`: one value per case, paired across variants; `trial`:
 * one value per trial, compared across repeats), `kind` (`declared` in the study file,
 * `builtin`, or `reported` by tasks and named by an objective without a declaration),
 * `source` (where the value comes from, in words) and the declaration (`decl`, declared only).
 *
 * @since 0.6.0
 * @category models
 */
export interface MetricDefinition {
  readonly name: string
  readonly unit: string
  readonly direction: Study.Direction
  readonly level: "case" | "trial"
  readonly kind: "declared" | "builtin" | "reported"
  readonly source: string
  readonly decl?: Study.MetricDecl | undefined
}

const sourceText = (m: Study.MetricDecl): string => {
  const from = "output" in m.from ? `output${m.from.output === "" ? "" : `.${m.from.output}`}` : `metric ${m.from.metric}`
  switch (m.reducer) {
    case "mean":
      return `mean over cases of ${from}`
    case "rate":
      return `share of cases whose ${from} equals ${canonicalJsonUnsafe(m.equals ?? true)}`
    case "p50":
      return `median over pipelines of ${from}`
    case "p95":
      return `95th percentile over pipelines of ${from}`
    case "sum":
      return `sum over pipelines of ${from}`
  }
}

/**
 * The metrics of a study: its declared metrics (in file order), the built-in ones, then every
 * other metric named by an objective or in `extra` (a metric reported by tasks; case-level,
 * the mean over the trial's pipelines, `maximize` unless its objective says otherwise).
 *
 * @param declared the study file's `metrics:`
 * @param objectives the study's objectives (their directions are the defaults of reported metrics)
 * @param extra more metric names to resolve (e.g. `metricThreshold` stop conditions)
 * @since 0.6.0
 * @category metrics
 */
export const definitions = (
  declared: ReadonlyArray<Study.MetricDecl>,
  objectives: ReadonlyArray<{ readonly metric: string; readonly direction: Study.Direction }>,
  extra: ReadonlyArray<string> = []
): ReadonlyArray<MetricDefinition> => {
  const out: Array<MetricDefinition> = declared.map((m) => ({
    name: m.name,
    unit: m.unit ?? (m.reducer === "rate" ? "ratio" : ""),
    direction: m.direction ?? "maximize",
    level: Study.levelOfReducer(m.reducer),
    kind: "declared",
    source: sourceText(m),
    decl: m
  }))
  for (const [name, b] of Object.entries(Study.BUILTIN_METRICS)) {
    if (out.some((d) => d.name === name)) continue
    out.push({ name, unit: b.unit, direction: b.direction, level: "trial", kind: "builtin", source: `built in: ${b.description}` })
  }
  for (const name of [...objectives.map((o) => o.metric), ...extra]) {
    if (out.some((d) => d.name === name)) continue
    const o = objectives.find((x) => x.metric === name)
    out.push({
      name,
      unit: "",
      direction: o?.direction ?? "maximize",
      level: "case",
      kind: "reported",
      source: `reported by tasks: mean over pipelines of metric ${name} (or the trial's run metric)`
    })
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/**
 * One case's value in one trial: the case key (see the module docs), the pipelines it came
 * from and the value.
 *
 * @since 0.6.0
 * @category models
 */
export interface CaseValue {
  readonly caseKey: string
  readonly pipelineIds: ReadonlyArray<string>
  readonly value: number
}

/**
 * A trial's metric values: `values` (metric -> the trial's value; absent when unknown),
 * `cases` (metric -> one {@link CaseValue} per case, for every metric with per-pipeline values:
 * case-level metrics, declared trial-level ones, `latencyP95Ms` as each pipeline's latency),
 * `pipelines` (every pipeline of the trial stored, any state).
 *
 * @since 0.6.0
 * @category models
 */
export interface TrialValues {
  readonly trialId: string
  readonly values: Readonly<Record<string, number>>
  readonly cases: Readonly<Record<string, ReadonlyArray<CaseValue>>>
  readonly pipelines: ReadonlyArray<string>
}

/** A value as a number (booleans 0/1), else undefined. */
const numeric = (v: unknown): number | undefined =>
  typeof v === "number" && Number.isFinite(v) ? v : typeof v === "boolean" ? (v ? 1 : 0) : undefined

/**
 * The value at a dot path inside a JSON value (`""`: the value itself; a number indexes a
 * list); `undefined` when the path leads nowhere.
 *
 * @since 0.6.0
 * @category metrics
 */
export const atPath = (value: unknown, path: string): unknown => {
  if (path === "") return value
  let v: unknown = value
  for (const seg of path.split(".")) {
    if (Array.isArray(v) && /^(0|[1-9][0-9]*)$/.test(seg)) v = v[Number(seg)]
    else if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, seg)) {
      v = (v as Record<string, unknown>)[seg]
    } else return undefined
  }
  return v
}

/**
 * One pipeline's value of a declared metric: the number at the path (booleans 0/1) for
 * `mean`, `p50`, `p95` and `sum`; for `rate`, 1 when the value equals `equals` (canonical
 * JSON; `true` by default) else 0, and `undefined` when the path leads nowhere.
 *
 * @since 0.6.0
 * @category metrics
 */
export const pipelineValue = (m: Study.MetricDecl, raw: unknown): number | undefined => {
  if (raw === undefined) return undefined
  if (m.reducer !== "rate") return numeric(raw)
  const wanted = canonicalJsonUnsafe(m.equals ?? true)
  return isStrictJson(raw) && canonicalJsonUnsafe(raw) === wanted ? 1 : 0
}

/**
 * The 95th or 50th percentile (Hyndman & Fan 1996, type 7: linear interpolation between order
 * statistics), `NaN` for no values.
 */
const quantile7 = (xs: ReadonlyArray<number>, p: number): number => {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  const h = (s.length - 1) * p
  const lo = Math.floor(h)
  const hi = Math.min(lo + 1, s.length - 1)
  return s[lo]! + (h - lo) * (s[hi]! - s[lo]!)
}

/**
 * A trial's value of a declared metric from its pipelines' values (see `Study.Reducer`);
 * `undefined` for no values.
 *
 * @since 0.6.0
 * @category metrics
 */
export const reduce = (reducer: Study.Reducer, xs: ReadonlyArray<number>): number | undefined => {
  if (xs.length === 0) return undefined
  switch (reducer) {
    case "mean":
    case "rate":
      return xs.reduce((a, b) => a + b, 0) / xs.length
    case "p50":
      return quantile7(xs, 0.5)
    case "p95":
      return quantile7(xs, 0.95)
    case "sum":
      return xs.reduce((a, b) => a + b, 0)
  }
}

/**
 * The case key of a stored pipeline (see the module docs): its explicit local key, else
 * `seed:<seedDigest>` (with `#<repeat>` for a source repeat above 0).
 *
 * @since 0.6.0
 * @category metrics
 */
export const caseKeyOf = (p: {
  readonly localKey: string | null
  readonly specDigest: string
  readonly seedDigest: string
  readonly repeat: number | null
}): string => {
  const repeat = p.repeat ?? 0
  const contentAddressed = p.localKey === null || p.localKey === defaultPipelineId(p.specDigest, p.seedDigest, repeat)
  return contentAddressed ? `seed:${p.seedDigest}${repeat > 0 ? `#${repeat}` : ""}` : p.localKey!
}

interface PipelineFacts {
  readonly pipelineId: string
  readonly trialId: string
  readonly caseKey: string
  readonly succeeded: boolean
  readonly latencyMs: number | null
  output?: unknown
  tokensIn: number
  tokensOut: number
  retries: number
  rateLimited: number
}

const CHUNK = 500

/**
 * Reads the metric values of some trials of a study from the root's merged view (see the module
 * docs for the sources).
 *
 * @param input `studyId`; `trialIds`; `metrics`: the definitions to compute (see
 *   {@link definitions}; a name not among them is not computed); `usage`: each trial's metered
 *   usage (the study table's row)
 * @returns per trial its {@link TrialValues}
 * @since 0.6.0
 * @category reading
 */
export const read = (input: {
  readonly studyId: string
  readonly trialIds: ReadonlyArray<string>
  readonly metrics: ReadonlyArray<MetricDefinition>
  readonly usage: ReadonlyMap<string, TrialUsage>
  /** The view to read (default: the root's merged view). */
  readonly view?: string | undefined
}): Effect.Effect<ReadonlyMap<string, TrialValues>, StoreUnavailable | ConfigError, SuiteCatalog> =>
  Effect.gen(function*() {
    const catalog = yield* SuiteCatalog
    const store = yield* catalog.view(input.view)
    const byDigest = new Map(input.trialIds.map((id) => [memberDigest(input.studyId, id), id]))
    const wanted = new Set(input.trialIds)
    const names = new Set(input.metrics.map((m) => m.name))
    const pipelines = new Map<string, PipelineFacts>()
    yield* Stream.runForEach(store.streamPipelines(), (p) =>
      Effect.sync(() => {
        const d = memberDigestOf(p.pipelineId)
        const trialId = d === undefined ? undefined : byDigest.get(d)
        if (trialId === undefined) return
        pipelines.set(p.pipelineId, {
          pipelineId: p.pipelineId,
          trialId,
          caseKey: caseKeyOf(p),
          succeeded: p.state === "succeeded",
          latencyMs: p.state === "succeeded" && p.startedAt !== null && p.endedAt !== null ? p.endedAt - p.startedAt : null,
          tokensIn: 0,
          tokensOut: 0,
          retries: 0,
          rateLimited: 0
        })
      }))
    // outputs: final ones for declared output metrics; every task output for the token counts
    const needOutputs = input.metrics.some((m) => m.decl !== undefined && "output" in m.decl.from)
    const needTokens = names.has("tokensIn") || names.has("tokensOut")
    if (needOutputs || needTokens) {
      const ids = [...pipelines.values()].filter((p) => p.succeeded).map((p) => p.pipelineId as PipelineId)
      for (let i = 0; i < ids.length; i += CHUNK) {
        const bundles = yield* store.loadBundles(ids.slice(i, i + CHUNK), {
          payloads: needTokens ? "all" : "final",
          artifacts: needTokens ? "all" : "final",
          tasks: false
        })
        for (const [pid, b] of bundles) {
          const facts = pipelines.get(pid)!
          for (const a of b.artifacts) {
            if (!a.artifact.active || a.artifact.seq < 0) continue
            const isFinal = a.artifact.isFinal
            if (!isFinal && !needTokens) continue
            const value = decodePayload(a.artifact, a.payload)
            if (isFinal) facts.output = value
            if (needTokens) {
              const pin = numeric(atPath(value, "usage.promptTokens"))
              const pout = numeric(atPath(value, "usage.completionTokens"))
              if (pin !== undefined) facts.tokensIn += pin
              if (pout !== undefined) facts.tokensOut += pout
            }
          }
        }
      }
    }
    if (names.has("retries") || names.has("rateLimited")) {
      yield* Stream.runForEach(store.streamAttempts(), (a) =>
        Effect.sync(() => {
          const facts = pipelines.get(a.pipelineId)
          if (facts === undefined) return
          if (a.attemptNo > 1) facts.retries++
          if (a.errorClass === "rate_limit") facts.rateLimited++
        }))
    }
    // task-reported metrics: pipeline scope (latest run wins) and member-scoped run metrics
    const reportedNames = new Set(
      input.metrics.flatMap((m) => m.kind === "reported" ? [m.name] : m.decl !== undefined && "metric" in m.decl.from ? [m.decl.from.metric] : [])
    )
    const perPipeline = new Map<string, Map<string, number>>()
    const memberScoped = new Map<string, Map<string, number>>()
    if (reportedNames.size > 0) {
      for (const r of yield* store.listRuns) {
        for (const m of yield* store.metrics({ runId: r.runId })) {
          if (!reportedNames.has(m.name) && m.pipelineId !== null) continue
          const v = numeric(m.value)
          if (v === undefined) continue
          if (m.pipelineId === null) {
            const parsed = Suite.parseMemberMetric(m.name)
            if (parsed === undefined || !wanted.has(parsed.experimentId) || !reportedNames.has(parsed.name)) continue
            const ms = memberScoped.get(parsed.experimentId) ?? new Map<string, number>()
            ms.set(parsed.name, v)
            memberScoped.set(parsed.experimentId, ms)
          } else if (pipelines.has(m.pipelineId)) {
            const ps = perPipeline.get(m.pipelineId) ?? new Map<string, number>()
            ps.set(m.name, v)
            perPipeline.set(m.pipelineId, ps)
          }
        }
      }
    }
    // per trial
    const byTrial = new Map<string, Array<PipelineFacts>>()
    for (const p of pipelines.values()) {
      const list = byTrial.get(p.trialId) ?? []
      list.push(p)
      byTrial.set(p.trialId, list)
    }
    const out = new Map<string, TrialValues>()
    for (const trialId of input.trialIds) {
      const list = byTrial.get(trialId) ?? []
      const ok = list.filter((p) => p.succeeded)
      const values: Record<string, number> = {}
      const cases: Record<string, Array<CaseValue>> = {}
      const usage = input.usage.get(trialId)
      for (const m of input.metrics) {
        if (m.kind === "builtin") {
          let v: number | undefined
          switch (m.name) {
            case "calls":
              v = usage?.calls
              break
            case "tokens":
              v = usage?.tokens
              break
            case "costUsd":
              v = usage?.costUsd
              break
            case "wallMs":
              v = usage?.timeMs
              break
            case "tokensIn":
              v = ok.reduce((a, p) => a + p.tokensIn, 0)
              break
            case "tokensOut":
              v = ok.reduce((a, p) => a + p.tokensOut, 0)
              break
            case "retries":
              v = list.reduce((a, p) => a + p.retries, 0)
              break
            case "rateLimited":
              v = list.reduce((a, p) => a + p.rateLimited, 0)
              break
            case "latencyP95Ms": {
              const lat = ok.flatMap((p) => p.latencyMs === null ? [] : [{ caseKey: p.caseKey, pipelineIds: [p.pipelineId], value: p.latencyMs }])
              cases[m.name] = lat
              v = lat.length === 0 ? undefined : quantile7(lat.map((c) => c.value), 0.95)
              break
            }
          }
          if (v !== undefined) values[m.name] = v
          continue
        }
        const cs: Array<CaseValue> = []
        for (const p of ok) {
          let v: number | undefined
          if (m.decl === undefined) v = perPipeline.get(p.pipelineId)?.get(m.name)
          else if ("output" in m.decl.from) v = pipelineValue(m.decl, atPath(p.output, m.decl.from.output))
          else v = pipelineValue(m.decl, perPipeline.get(p.pipelineId)?.get(m.decl.from.metric))
          if (v !== undefined) cs.push({ caseKey: p.caseKey, pipelineIds: [p.pipelineId], value: v })
        }
        cases[m.name] = cs
        const reduced = reduce(m.decl?.reducer ?? "mean", cs.map((c) => c.value))
        const runMetric = m.kind === "reported" ? memberScoped.get(trialId)?.get(m.name) : undefined
        const v = runMetric ?? reduced
        if (v !== undefined) values[m.name] = v
      }
      out.set(trialId, { trialId, values, cases, pipelines: list.map((p) => p.pipelineId) })
    }
    return out
  })
