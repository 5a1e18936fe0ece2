/**
 * A study's latency is the variant's, not the schedule's (issue 16, tester t16b): the built-in
 * `latencyP95Ms` is each succeeded pipeline's execution time read from its attempts (durations
 * plus retry back-off), never the time it waited for a worker slot; and trials start
 * round-robin by repeat with the variants rotated (`Study.runOrder`), so no variant owns a
 * stretch of the run. MemoryStore, TestClock, one pipeline at a time (every other admitted
 * pipeline queues).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type * as DomainStudy from "../../src/domain/Study.js"
import * as Task from "../../src/domain/Task.js"
import * as Study from "../../src/services/Study.js"
import * as StudyCompare from "../../src/services/StudyCompare.js"
import * as Suite from "../../src/services/Suite.js"
import { studyEnv } from "./studyFixture.js"

const accuracy: DomainStudy.MetricDecl = { name: "accuracy", reducer: "mean", from: { output: "correct" }, unit: "ratio", direction: "maximize" }

/** Every variant's task sleeps `taskMs` (TestClock) and answers correctly; 2 variants × `repeats`. */
const sleepy = (o: {
  readonly cases: number
  readonly repeats: number
  readonly taskMs: number
  readonly variants?: number
  /** The task is cached under one key: a trial's first pipeline calls, the others are served from the cache. */
  readonly cached?: boolean
}) => {
  const id = "sleepy"
  const variants = Array.from({ length: o.variants ?? 2 }, (_, i): Study.StudyVariant => ({
    id: `v0${i + 1}`,
    assignment: { arm: i },
    key: JSON.stringify({ arm: i }),
    digest: `d${i}`,
    isBaseline: i === 0
  }))
  const trialsFor = (version: number): ReadonlyArray<Study.StudyTrial> =>
    variants.flatMap((variant) => Array.from({ length: o.repeats }, (_, r) => ({ trialId: `p${version}-${variant.id}-r${r + 1}`, variant, repeat: r + 1 })))
  const started: Array<string> = []
  const template = (trialId: string) =>
    Pipeline.make(
      "cases",
      Task.make("answer", o.cached === true ? { cache: true, cacheKey: () => Effect.succeed("same") } : {}, (n: number) =>
        Effect.gen(function*() {
          if (n === 0) started.push(trialId)
          yield* Effect.sleep(o.taskMs)
          return { n, correct: true }
        }))
    )
  const suiteFor = (version: number): Suite.Suite<any, any, any> => ({
    _tag: "Suite",
    id,
    experiments: trialsFor(version).map((t) =>
      Suite.member(t.trialId, () => template(t.trialId).map(Array.from({ length: o.cases }, (_, i) => i)), { definitionDigest: t.trialId })
    ),
    outputRoot: "/study-root",
    layout: "combined",
    pools: []
  })
  const objectives: ReadonlyArray<Study.StudyObjective> = [
    { metric: "accuracy", direction: "maximize" },
    { metric: "latencyP95Ms", direction: "minimize" }
  ]
  const parts = { experiment: "sleepy", repeats: String(o.repeats) }
  const study: Study.StudyInput = {
    id,
    question: "which arm is faster?",
    type: "compare",
    objectives,
    metrics: [accuracy],
    stop: [{ when: "allTrialsTerminal" }],
    protocolDigest: JSON.stringify(parts),
    protocolParts: parts,
    describe: (): Json => ({ parts }),
    trialConcurrency: 2,
    trialsFor,
    suiteFor
  }
  const input: StudyCompare.CompareInput = {
    id,
    question: study.question,
    objectives,
    metrics: [accuracy],
    analysis: { resamples: 200, minPairedCases: 3, minRepeats: 1 },
    baseline: { id: "v01" },
    variants: variants.map((v) => ({ id: v.id, assignment: v.assignment })),
    repeats: o.repeats
  }
  return { study, input, started }
}

/** Runs the study to its end, moving TestClock a task's length at a time. */
const runToEnd = (study: Study.StudyInput, stepMs: number) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(Study.run(study))
    for (let i = 0; i < 400; i++) {
      for (let k = 0; k < 5; k++) yield* Effect.yieldNow()
      yield* TestClock.adjust(stepMs)
    }
    return yield* fiber.await.pipe(Effect.flatten)
  })

describe("StudyMetrics: latencyP95Ms is the pipeline's execution time", () => {
  it.effect("every task takes exactly 100 ms while most pipelines queue for the one worker slot: every repeat's p95 is 100 ms, the two identical variants do not differ", () =>
    Effect.gen(function*() {
      const { input, study } = sleepy({ cases: 6, repeats: 2, taskMs: 100 })
      const report = yield* runToEnd(study, 100)
      assert.strictEqual(report.status, "completed")
      const c = yield* StudyCompare.compare(input)
      for (const v of c.variants) {
        // measured from admission (the old reading) the queue was counted too: 200 ms for v02
        assert.deepStrictEqual(v.values.latencyP95Ms!.perRepeat, [100, 100], v.variantId)
      }
      const delta = c.variants[1]!.vsBaseline!["latencyP95Ms"]!
      assert.strictEqual(delta.paired!.difference.estimate, 0)
    }).pipe(Effect.provide(studyEnv("sleepy"))))
})

describe("StudyMetrics: latencyP95Ms leaves out the pipelines the call cache served (tester18c F3)", () => {
  it.effect("one call of 100 ms and five cache hits per trial: the p95 is the call's 100 ms, not pulled toward the hits' 0 ms; the comparison says why", () =>
    Effect.gen(function*() {
      const { input, study } = sleepy({ cases: 6, repeats: 1, taskMs: 100, cached: true })
      const report = yield* runToEnd(study, 100)
      assert.strictEqual(report.status, "completed")
      assert.deepStrictEqual(report.trials.map((t) => t.cache), [{ hits: 5, misses: 1, costSavedUsd: null }, { hits: 5, misses: 1, costSavedUsd: null }])
      const c = yield* StudyCompare.compare(input)
      for (const v of c.variants) {
        // with the hits (about 0 ms each) the p95 of [0, 0, 0, 0, 0, 100] would read 75 ms
        assert.deepStrictEqual(v.values.latencyP95Ms!.perRepeat, [100], v.variantId)
        assert.strictEqual(v.values.latencyP95Ms!.cacheHits, 5)
        assert.include(v.values.latencyP95Ms!.aggregation, "served from the call cache: the pipelines they served are left out")
      }
    }).pipe(Effect.provide(studyEnv("sleepy", { concurrency: 1, cache: "readWrite" }))))
})

describe("Study.runOrder: trials interleaved across variants and repeats", () => {
  const v = (id: string) => ({ id, assignment: {}, key: id, digest: id, isBaseline: id === "a" })
  const trials = ["a", "b", "c"].flatMap((x) => [1, 2, 3].map((r) => ({ trialId: `${x}${r}`, variant: v(x), repeat: r })))

  it("round-robin by repeat, the variants rotated one place per repeat", () => {
    assert.deepStrictEqual(Study.runOrder(trials).map((t) => t.trialId), ["a1", "b1", "c1", "b2", "c2", "a2", "c3", "a3", "b3"])
  })

  it.effect("a run starts its trials in that order, not one variant's repeats side by side", () =>
    Effect.gen(function*() {
      const { started, study } = sleepy({ cases: 1, repeats: 2, taskMs: 10, variants: 3 })
      const report = yield* runToEnd(study, 10)
      assert.strictEqual(report.status, "completed")
      assert.deepStrictEqual(started, ["p1-v01-r1", "p1-v02-r1", "p1-v03-r1", "p1-v02-r2", "p1-v03-r2", "p1-v01-r2"])
    }).pipe(Effect.provide(studyEnv("sleepy"))))
})
