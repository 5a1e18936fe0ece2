/**
 * Test fixtures for studies: a hand-built `StudyInput` (what `config/Study.ts`'s loader gives)
 * whose trials are suite members over a trivial pipeline. Each variant has a `quality`:
 * `good` (accuracy 0.9), `bad` (accuracy 0.5) or `broken` (its task fails on every case).
 * Every pipeline execution is counted per (trial, case) in `executions`.
 */
import { Effect, Layer } from "effect"
import { FatalError } from "../../src/domain/Errors.js"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Resource from "../../src/domain/Resource.js"
import * as Task from "../../src/domain/Task.js"
import * as MemoryStore from "../../src/layers/MemoryStore.js"
import * as Pool from "../../src/services/Pool.js"
import * as Runner from "../../src/services/Runner.js"
import type * as Study from "../../src/services/Study.js"
import * as StudyCatalog from "../../src/services/StudyCatalog.js"
import * as Suite from "../../src/services/Suite.js"
import { fakeCatalog } from "./suiteFixture.js"

export type Quality = "good" | "bad" | "broken"

export interface FixtureOptions {
  readonly id?: string
  readonly qualities: ReadonlyArray<Quality>
  readonly repeats?: number
  readonly cases?: number
  /** Changes the protocol digest (a changed protocol). */
  readonly protocolTag?: string
  readonly objectives?: ReadonlyArray<Study.StudyObjective>
  readonly outputRoot?: string
  /** Each task acquires a lease of pool `llm` (a model call) and reports 100 tokens. */
  readonly leases?: boolean
  readonly stop?: Study.StudyInput["stop"]
  readonly budget?: Study.StudyInput["budget"]
  readonly trialConcurrency?: number
  /** With `leases`: the call reports after this long (TestClock: drive it), as a model call does. */
  readonly callMs?: number
  /** Asked before each case runs: an error to fail it with (an endpoint fault), or undefined. */
  readonly fault?: ((trialId: string, n: number) => unknown) | undefined
  /** Whether case `n` reports its `accuracy` metric (default every case). */
  readonly reportsAccuracy?: ((n: number) => boolean) | undefined
  /**
   * Tasks after `score` in each pipeline: `count` of them (`step1`…), each sleeping `ms` (the
   * Clock's), its executions counted per (trial, case, step) in `stepRuns`.
   */
  readonly steps?: { readonly count: number; readonly ms: number } | undefined
}

export const variantId = (i: number) => `v${String(i + 1).padStart(2, "0")}`

export const makeStudy = (o: FixtureOptions) => {
  const id = o.id ?? "demo"
  const repeats = o.repeats ?? 2
  const cases = o.cases ?? 3
  const executions = new Map<string, number>()
  const stepRuns = new Map<string, number>()
  const variants = o.qualities.map((q, i): Study.StudyVariant => ({
    id: variantId(i),
    assignment: { quality: q, index: i },
    key: JSON.stringify({ index: i, quality: q }),
    digest: `d${i}`,
    isBaseline: i === 0
  }))
  const trialsFor = (version: number): ReadonlyArray<Study.StudyTrial> =>
    variants.flatMap((variant) =>
      Array.from({ length: repeats }, (_, r) => ({ trialId: `p${version}-${variant.id}-r${r + 1}`, variant, repeat: r + 1 }))
    )
  const stepsOf = (trialId: string) =>
    Array.from({ length: o.steps?.count ?? 0 }, (_, i) =>
      Task.make(`step${i + 1}`, (n: number) =>
        Effect.gen(function*() {
          const k = `${trialId}/${n}/step${i + 1}`
          stepRuns.set(k, (stepRuns.get(k) ?? 0) + 1)
          yield* Effect.sleep(o.steps!.ms)
          return n
        })))
  const templateOf = (trialId: string, quality: Quality) =>
    (Pipeline.make as unknown as (name: string, ...tasks: ReadonlyArray<Task.Any>) => Pipeline.Template<number, number, any, any>)(
      "cases",
      Task.make("score", (n: number, ctx) =>
        Effect.gen(function*() {
          const k = `${trialId}/${n}`
          executions.set(k, (executions.get(k) ?? 0) + 1)
          if (quality === "broken") return yield* new FatalError({ message: "broken variant" })
          const fault = o.fault?.(trialId, n)
          if (fault !== undefined) return yield* Effect.fail(fault)
          if (o.leases === true) {
            yield* Effect.scoped(Effect.gen(function*() {
              const lease = yield* Effect.orDie(ctx.acquire())
              if (o.callMs !== undefined) yield* Effect.sleep(o.callMs)
              yield* lease.report({ ok: true, usage: { tokens: 100, promptTokens: 60, completionTokens: 40 } })
            }))
          }
          if (o.reportsAccuracy?.(n) ?? true) yield* ctx.reportMetric("accuracy", quality === "good" ? 0.9 : 0.5)
          return n
        })),
      ...stepsOf(trialId)
    )
  const suiteFor = (version: number): Suite.Suite<any, any, any> => {
    const members = trialsFor(version).map((t) => {
      const quality = t.variant.assignment.quality as Quality
      const template = templateOf(t.trialId, quality)
      return Suite.member(t.trialId, () => template.map(Array.from({ length: cases }, (_, i) => i)), {
        definitionDigest: `${t.trialId}-${o.protocolTag ?? "base"}`,
        ...(o.leases === true ? { poolAliases: { llm: "llm" } } : {})
      })
    })
    return {
      _tag: "Suite",
      id,
      experiments: members,
      outputRoot: o.outputRoot ?? "/study-root",
      layout: "combined",
      pools: o.leases === true ? [llmPool] : []
    }
  }
  const parts = {
    experiment: `exp-${o.protocolTag ?? "base"}`,
    variables: JSON.stringify(o.qualities),
    repeats: String(repeats)
  }
  const study: Study.StudyInput = {
    id,
    question: "which quality is best?",
    type: "compare",
    objectives: o.objectives ?? [{ metric: "accuracy", direction: "maximize" }],
    stop: o.stop ?? [{ when: "allTrialsTerminal" }],
    ...(o.budget === undefined ? {} : { budget: o.budget }),
    ...(o.trialConcurrency === undefined ? {} : { trialConcurrency: o.trialConcurrency }),
    protocolDigest: JSON.stringify(parts),
    protocolParts: parts,
    describe: (): Json => ({ parts }),
    trialsFor,
    suiteFor
  }
  return { study, executions, stepRuns }
}

/** The pool the tasks lease from with `leases`: one resource of capacity 8. */
export const llmPool = Pool.make("llm", [Resource.make("api", { id: "k", capacity: 8 })])

/** Store + catalogs + runner on a MemoryStore (the `llm` pool), one pipeline at a time. */
export const studyEnv = (suiteId: string, options: Runner.RunOptions = {}) =>
  Layer.provideMerge(
    Layer.mergeAll(Runner.layer({ handleSignals: false, ...options }), fakeCatalog(suiteId), StudyCatalog.layerMemory),
    Layer.mergeAll(MemoryStore.layer(), Pool.layer([llmPool]))
  )
