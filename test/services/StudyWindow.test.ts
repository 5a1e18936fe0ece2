/**
 * `trialConcurrency` bounds the trials RUNNING at once (issue 16, tester t16c): a trial holds
 * its place in the window from its start until every pipeline it submitted has ended, not only
 * while it is still submitting. Before, with `trialConcurrency: 1` and 4 workers, three trials
 * had pipelines running at the same time, and a `successfulTrials: 1` stop ended with 3–4
 * trials run instead of 1. MemoryStore, TestClock, 4 workers.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, TestClock } from "effect"
import type { Json } from "../../src/domain/Json.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type * as DomainStudy from "../../src/domain/Study.js"
import * as Task from "../../src/domain/Task.js"
import * as Study from "../../src/services/Study.js"
import * as Suite from "../../src/services/Suite.js"
import { studyEnv } from "./studyFixture.js"

const accuracy: DomainStudy.MetricDecl = { name: "accuracy", reducer: "mean", from: { output: "correct" }, unit: "ratio", direction: "maximize" }

/** 2 variants × 2 repeats of `cases` pipelines that each sleep 100 ms (TestClock); spans per trial. */
const windowed = (o: { readonly trialConcurrency: number; readonly stop: ReadonlyArray<Study.StudyInput["stop"][number]> }) => {
  const id = "windowed"
  const variants = [0, 1].map((i): Study.StudyVariant => ({ id: `v0${i + 1}`, assignment: { arm: i }, key: JSON.stringify({ arm: i }), digest: `d${i}`, isBaseline: i === 0 }))
  const trialsFor = (version: number): ReadonlyArray<Study.StudyTrial> =>
    variants.flatMap((variant) => [1, 2].map((r) => ({ trialId: `p${version}-${variant.id}-r${r}`, variant, repeat: r })))
  const spans = new Map<string, { start: number; end: number }>()
  const template = (trialId: string) =>
    Pipeline.make(
      "cases",
      Task.make("answer", (n: number) =>
        Effect.gen(function*() {
          const start = yield* Clock.currentTimeMillis
          const s = spans.get(trialId) ?? { start, end: start }
          spans.set(trialId, s)
          yield* Effect.sleep(100)
          s.end = Math.max(s.end, yield* Clock.currentTimeMillis)
          return { n, correct: true }
        }))
    )
  const suiteFor = (version: number): Suite.Suite<any, any, any> => ({
    _tag: "Suite",
    id,
    experiments: trialsFor(version).map((t) =>
      Suite.member(t.trialId, () => template(t.trialId).map(Array.from({ length: 6 }, (_, i) => i)), { definitionDigest: t.trialId })
    ),
    outputRoot: "/study-root",
    layout: "combined",
    pools: []
  })
  const parts = { experiment: "windowed" }
  const study: Study.StudyInput = {
    id,
    question: "does the window hold?",
    type: "compare",
    objectives: [{ metric: "accuracy", direction: "maximize" }],
    metrics: [accuracy],
    stop: o.stop,
    protocolDigest: JSON.stringify(parts),
    protocolParts: parts,
    describe: (): Json => ({ parts }),
    trialConcurrency: o.trialConcurrency,
    trialsFor,
    suiteFor
  }
  return { study, spans }
}

const runToEnd = (study: Study.StudyInput) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(Study.run(study))
    for (let i = 0; i < 200; i++) {
      for (let k = 0; k < 5; k++) yield* Effect.yieldNow()
      yield* TestClock.adjust(50)
    }
    return yield* fiber.await.pipe(Effect.flatten)
  })

/** The most trials whose [first start, last end] spans overlap at one instant. */
const mostAtOnce = (spans: ReadonlyMap<string, { start: number; end: number }>): number => {
  let most = 0
  for (const a of spans.values()) {
    let n = 0
    for (const b of spans.values()) if (b.start <= a.start && a.start < b.end) n++
    most = Math.max(most, n)
  }
  return most
}

describe("Study: trialConcurrency counts the trials started and not yet ended", () => {
  it.effect("trialConcurrency 1 with 4 workers: one trial's pipelines at a time, all four trials run", () =>
    Effect.gen(function*() {
      const { spans, study } = windowed({ trialConcurrency: 1, stop: [{ when: "allTrialsTerminal" }] })
      const report = yield* runToEnd(study)
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(spans.size, 4)
      assert.strictEqual(mostAtOnce(spans), 1, JSON.stringify(Array.from(spans)))
    }).pipe(Effect.provide(studyEnv("windowed", { concurrency: 4 }))))

  it.effect("trialConcurrency 2: at most two trials run at once", () =>
    Effect.gen(function*() {
      const { spans, study } = windowed({ trialConcurrency: 2, stop: [{ when: "allTrialsTerminal" }] })
      const report = yield* runToEnd(study)
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(spans.size, 4)
      assert.strictEqual(mostAtOnce(spans), 2, JSON.stringify(Array.from(spans)))
    }).pipe(Effect.provide(studyEnv("windowed", { concurrency: 4 }))))

  it.effect("successfulTrials 1 with trialConcurrency 1: the stop fires after the first trial, no other trial starts", () =>
    Effect.gen(function*() {
      const { spans, study } = windowed({ trialConcurrency: 1, stop: [{ when: "successfulTrials", count: 1 }] })
      yield* runToEnd(study)
      assert.deepStrictEqual(Array.from(spans.keys()), ["p1-v01-r1"])
    }).pipe(Effect.provide(studyEnv("windowed", { concurrency: 4 }))))
})
